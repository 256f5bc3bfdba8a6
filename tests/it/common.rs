//! Shared fixture for the end-to-end tests: a temporary project driven through the real
//! `efmesh` binary, with a pinned "now", plus helpers to read the DuckDB file and the state store
//! the binary left behind.
#![allow(dead_code)]

use efmesh::config::EngineSection;
use efmesh::engine::Engine;
use efmesh::engine::duckdb::DuckDb;
pub use efmesh::state::{SqliteStore, StateStore};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_efmesh");

/// The instant every test pretends it is, unless it says otherwise.
pub const NOW: &str = "2026-02-10T00:00:00Z";

/// Default `efmesh.toml` of a test project.
pub const CONFIG: &str = "[project]\nmodels = [\"models/**/*.lua\"]\n\n[engine]\npath = \"efmesh.duckdb\"\n\n[state]\npath = \"efmesh.state.sqlite\"\n";

/// Rows as text, `None` for NULL.
pub type Rows = Vec<Vec<Option<String>>>;

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error (logs and diagnostics).
    pub stderr: String,
    /// The command line, for messages.
    pub cmd: String,
}

impl Run {
    /// What a finished process produced, under the command line `cmd` (for messages).
    pub fn from_output(out: std::process::Output, cmd: String) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            cmd,
        }
    }

    /// Panics with the whole output unless the exit code is `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "`{}` exited {} (wanted {code})\n--- stdout\n{}\n--- stderr\n{}", self.cmd, self.code, self.stdout, self.stderr);
        self
    }

    /// Stdout parsed as exactly one JSON object whose first key is `"apiVersion": 1`.
    #[track_caller]
    pub fn json(&self) -> Value {
        let v: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout of `{}` is not one JSON value: {e}\n--- stdout\n{}\n--- stderr\n{}", self.cmd, self.stdout, self.stderr));
        let obj = v.as_object().unwrap_or_else(|| panic!("stdout of `{}` is not a JSON object: {v}", self.cmd));
        let first = obj.iter().next();
        assert_eq!(first.map(|(k, v)| (k.as_str(), v.clone())), Some(("apiVersion", Value::from(1))), "first key of `{}`'s JSON", self.cmd);
        v
    }
}

/// Where a test project keeps its state store.
#[derive(Debug, Clone)]
pub enum StateBackend {
    /// The SQLite file `efmesh.state.sqlite` (the default).
    Sqlite,
    /// A fresh schema on the test Postgres (`tests/it/pg.rs`), named by `[state] url_env`.
    Postgres(crate::pg::PgTarget),
}

impl StateBackend {
    /// Another store on the same backend, empty: the same for SQLite (each project has its own
    /// file), a schema named after `tag` for Postgres.
    pub fn another(&self, tag: &str) -> StateBackend {
        match self {
            StateBackend::Sqlite => StateBackend::Sqlite,
            StateBackend::Postgres(t) => StateBackend::Postgres(crate::pg::PgTarget { schema: format!("{}_{tag}", t.schema), ..t.clone() }),
        }
    }
}

/// The variable a Postgres test project's `[state] url_env` names.
pub const PG_URL_ENV: &str = "EFMESH_IT_PG_URL";

/// The variable a test project's `[engine] url_env` names when its engine is Postgres.
pub const PG_ENGINE_URL_ENV: &str = "EFMESH_IT_PG_ENGINE_URL";

/// The engine a test project runs its models on.
#[derive(Debug, Clone)]
pub enum EngineBackend {
    /// The DuckDB file `efmesh.duckdb` (the default).
    DuckDb,
    /// A fresh database on the test Postgres (`tests/it/pg.rs`), named by `[engine] url_env`.
    Postgres(crate::pg::PgTarget),
}

impl EngineBackend {
    /// Another engine of the same kind, empty, for a second project in the same test: DuckDB
    /// as is (each project has its own file), a fresh database for Postgres.
    pub fn another(&self) -> EngineBackend {
        match self {
            EngineBackend::DuckDb => EngineBackend::DuckDb,
            EngineBackend::Postgres(_) => EngineBackend::Postgres(crate::pg::fresh_database().expect("a second Postgres database")),
        }
    }
}

/// Runs the behaviour `fn name(engine: EngineBackend)` once per engine: a module `name` with
/// the tests `duckdb` and `postgres` (the latter fails without a Postgres unless
/// `EFMESH_SKIP_PG=1`, see `tests/it/pg.rs`).
#[macro_export]
macro_rules! on_every_engine {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn duckdb() {
                    super::$name($crate::common::EngineBackend::DuckDb)
                }
                #[test]
                fn postgres() {
                    if let Some(target) = $crate::pg::fresh_database() {
                        super::$name($crate::common::EngineBackend::Postgres(target))
                    }
                }
            }
        )*
    };
}

/// Runs the behaviour `fn name(backend: StateBackend, engine: EngineBackend)` on each engine with
/// its state in SQLite, and on a Postgres state store with the DuckDB engine: a module `name`
/// with the tests `duckdb`, `postgres` (the engine) and `postgres_state` (the state store).
#[macro_export]
macro_rules! on_every_engine_and_state_backend {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn duckdb() {
                    super::$name($crate::common::StateBackend::Sqlite, $crate::common::EngineBackend::DuckDb)
                }
                #[test]
                fn postgres() {
                    if let Some(target) = $crate::pg::fresh_database() {
                        super::$name($crate::common::StateBackend::Sqlite, $crate::common::EngineBackend::Postgres(target))
                    }
                }
                #[test]
                fn postgres_state() {
                    if let Some(target) = $crate::pg::fresh() {
                        super::$name($crate::common::StateBackend::Postgres(target), $crate::common::EngineBackend::DuckDb)
                    }
                }
            }
        )*
    };
}

/// Runs the behaviour `fn name(backend: StateBackend)` once per state backend: a module
/// `name` with the tests `sqlite` and `postgres` (the latter fails without a Postgres unless
/// `EFMESH_SKIP_PG=1`, see `tests/it/pg.rs`).
#[macro_export]
macro_rules! on_every_state_backend {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn sqlite() {
                    super::$name($crate::common::StateBackend::Sqlite)
                }
                #[test]
                fn postgres() {
                    if let Some(target) = $crate::pg::fresh() {
                        super::$name($crate::common::StateBackend::Postgres(target))
                    }
                }
            }
        )*
    };
}

/// A project in a temporary directory. Dropped with the directory.
pub struct Project {
    dir: tempfile::TempDir,
    /// `--now` passed to every command.
    pub now: String,
    /// Where its state store lives.
    pub backend: StateBackend,
    /// What it runs its models on.
    pub engine: EngineBackend,
}

impl Default for Project {
    fn default() -> Self {
        Self::new()
    }
}

impl Project {
    /// An empty project with the default `efmesh.toml`.
    pub fn new() -> Self {
        Self::on(StateBackend::Sqlite)
    }

    /// An empty project whose state store is on `backend` (the default `efmesh.toml`, but for
    /// `[state]`).
    pub fn on(backend: StateBackend) -> Self {
        Self::with(backend, EngineBackend::DuckDb)
    }

    /// An empty project whose models run on `engine` (state in SQLite).
    pub fn on_engine(engine: EngineBackend) -> Self {
        Self::with(StateBackend::Sqlite, engine)
    }

    /// An empty project with its state store on `backend` and its models on `engine`.
    pub fn with(backend: StateBackend, engine: EngineBackend) -> Self {
        let dir = tempfile::Builder::new().prefix("efmesh-it-").tempdir().expect("temp dir");
        let p = Self { dir, now: NOW.to_string(), backend, engine };
        p.write("efmesh.toml", &p.config_with(""));
        p
    }

    /// True when the project's engine is Postgres.
    pub fn on_postgres(&self) -> bool {
        matches!(self.engine, EngineBackend::Postgres(_))
    }

    /// The default `efmesh.toml` for this project's state backend, with `extra` appended.
    pub fn config_with(&self, extra: &str) -> String {
        let base = match &self.backend {
            StateBackend::Sqlite => CONFIG.to_string(),
            StateBackend::Postgres(t) => {
                CONFIG.replace("[state]\npath = \"efmesh.state.sqlite\"\n", &format!("[state]\nurl_env = \"{PG_URL_ENV}\"\nschema = \"{}\"\n", t.schema))
            }
        };
        let base = match &self.engine {
            EngineBackend::DuckDb => base,
            EngineBackend::Postgres(_) => base.replace("[engine]\npath = \"efmesh.duckdb\"\n", &format!("[engine]\nurl_env = \"{PG_ENGINE_URL_ENV}\"\n")),
        };
        format!("{base}{extra}")
    }

    /// The project root.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `rel` (creating directories).
    pub fn write(&self, rel: &str, text: &str) -> &Self {
        let path = self.root().join(rel);
        fs_err::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs_err::write(&path, text).expect("write");
        self
    }

    /// Reads `rel`.
    pub fn read(&self, rel: &str) -> String {
        fs_err::read_to_string(self.root().join(rel)).expect("read")
    }

    /// Deletes `rel`.
    pub fn remove(&self, rel: &str) {
        fs_err::remove_file(self.root().join(rel)).expect("remove");
    }

    /// The command `efmesh --config efmesh.toml --now <now> <args>`, run in the project root
    /// with stdin closed (never a TTY).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .arg("--config")
            .arg("efmesh.toml")
            .arg("--now")
            .arg(&self.now)
            .args(args)
            .env_remove("EFMESH_NOW")
            .env_remove("RUST_LOG")
            .env("EFMESH_APPLIED_BY", "it")
            .env_remove(PG_URL_ENV)
            .env_remove(PG_ENGINE_URL_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let StateBackend::Postgres(t) = &self.backend {
            c.env(PG_URL_ENV, &t.url);
        }
        if let EngineBackend::Postgres(t) = &self.engine {
            c.env(PG_ENGINE_URL_ENV, &t.url);
        }
        c
    }

    /// Runs the binary to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        let out = self.command(args).output().expect("spawn efmesh");
        Run::from_output(out, format!("efmesh --now {} {}", self.now, args.join(" ")))
    }

    /// Starts the binary without waiting (output discarded).
    pub fn spawn(&self, args: &[&str]) -> Child {
        let mut c = self.command(args);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c.spawn().expect("spawn efmesh")
    }

    /// `plan <env> --json`, which must succeed.
    #[track_caller]
    pub fn plan(&self, env: &str) -> Value {
        self.run(&["plan", env, "--json"]).expect_code(0).json()
    }

    /// `apply <env> --yes --json`, which must succeed: `applied` when the plan had changes (or
    /// renewed an expired environment), not when there was nothing to apply.
    #[track_caller]
    pub fn apply(&self, env: &str) -> Value {
        let v = self.run(&["apply", env, "--yes", "--json"]).expect_code(0).json();
        let changes = v["plan"]["hasChanges"] == Value::Bool(true) || v.get("renewed").is_some();
        assert_eq!(v["applied"], Value::Bool(changes), "{v:#}");
        v
    }

    /// The DuckDB file.
    pub fn engine_path(&self) -> PathBuf {
        self.root().join("efmesh.duckdb")
    }

    /// The state store file.
    pub fn state_path(&self) -> PathBuf {
        self.root().join("efmesh.state.sqlite")
    }

    /// Runs `sql` on the project's DuckDB file (opened for this query only).
    #[track_caller]
    pub fn query(&self, sql: &str) -> Rows {
        use efmesh::engine::Engine;
        if let EngineBackend::Postgres(t) = &self.engine {
            let mut db = efmesh::engine::postgres::Postgres::open(&t.url, false).expect("open the Postgres engine database");
            return db.query(sql).unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(self.engine_path().exists(), "no DuckDB file yet");
        let mut db = DuckDb::open(&self.engine_path(), &EngineSection::default()).expect("open duckdb");
        db.query(sql).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every row of `relation`, each value cast to VARCHAR in SQL, sorted (a row multiset).
    #[track_caller]
    pub fn rows(&self, relation: &str) -> Rows {
        // Postgres's text protocol renders every value as text already.
        let sql = if self.on_postgres() { format!("SELECT * FROM {relation}") } else { format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}") };
        let mut r = self.query(&sql);
        r.sort();
        r
    }

    /// Names of the relations in schema `_efmesh` but the use records' table, the epoch stamps and
    /// the environment records, sorted (empty without a DuckDB file).
    pub fn physical_tables(&self) -> Vec<String> {
        if !self.on_postgres() && !self.engine_path().exists() {
            return Vec::new();
        }
        let mut v: Vec<String> = self
            .query(&format!(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = '_efmesh' AND table_name <> '{}' AND left(table_name, {}) <> '{}'",
                efmesh::engine::USES_TABLE,
                efmesh::engine::epoch::VIEW_PREFIX.len(),
                efmesh::engine::epoch::VIEW_PREFIX
            ))
            .into_iter()
            .map(|r| r[0].clone().expect("name"))
            .filter(|name| !efmesh::ownership::is_env_record(name))
            .collect();
        v.sort();
        v
    }

    /// Every non-internal relation of the DuckDB file as `schema.name`, sorted.
    pub fn all_relations(&self) -> Vec<String> {
        if !self.engine_path().exists() {
            return Vec::new();
        }
        let mut v: Vec<String> =
            self.query("SELECT table_schema || '.' || table_name FROM information_schema.tables").into_iter().map(|r| r[0].clone().expect("name")).collect();
        v.sort();
        v
    }

    /// Opens the state store, whatever its backend (`None`: there is none yet).
    pub fn store(&self) -> Option<Box<dyn StateStore>> {
        match &self.backend {
            StateBackend::Sqlite => self.state_path().exists().then(|| Box::new(self.state()) as Box<dyn StateStore>),
            StateBackend::Postgres(t) => efmesh::state::PostgresStore::open_existing(&t.url, &t.schema)
                .expect("open the Postgres state store")
                .map(|s| Box::new(s) as Box<dyn StateStore>),
        }
    }

    /// Opens the SQLite state store (a project on SQLite only: see [`Project::store`]).
    pub fn state(&self) -> SqliteStore {
        assert!(matches!(self.backend, StateBackend::Sqlite), "a Postgres project: use `store()`");
        assert!(self.state_path().exists(), "no state store yet");
        SqliteStore::open(&self.state_path()).expect("open state store")
    }

    /// Everything the state store records, in comparable form.
    pub fn state_summary(&self) -> StateSummary {
        let Some(s) = self.store() else {
            return StateSummary::default();
        };
        let envs = s.environments().expect("environments");
        let mut pointers = BTreeMap::new();
        let mut journal = BTreeMap::new();
        for e in &envs {
            pointers.insert(e.clone(), s.env_pointers(e).expect("pointers"));
            journal.insert(e.clone(), s.journal(e).expect("journal").into_iter().map(|j| j.id).collect());
        }
        let snapshots = s.snapshot_keys().expect("snapshots").into_iter().collect();
        let intervals = s.all_done_intervals().expect("intervals").into_iter().collect();
        StateSummary { envs, pointers, journal, snapshots, intervals }
    }
}

/// Library calls in the test process (`Session`, `plan_checked`) on either engine.
impl Project {
    /// Lets this test process open the project's engine itself: on Postgres, `efmesh.toml` then
    /// names a variable of this project's own, set in this process (the commands it starts
    /// inherit it). Nothing to do on DuckDB.
    pub fn engine_url_in_process(&self) {
        if let EngineBackend::Postgres(target) = &self.engine {
            let dir = self.root().file_name().expect("dir").to_string_lossy().to_uppercase();
            let var = format!("{PG_ENGINE_URL_ENV}_{}", dir.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
            self.write("efmesh.toml", &self.read("efmesh.toml").replace(PG_ENGINE_URL_ENV, &var));
            // SAFETY: this variable is this project's own; no other thread reads it.
            unsafe { std::env::set_var(&var, &target.url) };
        }
    }
}

/// Writes to the engine and lists its relations, on either engine.
impl Project {
    /// Executes `sql` (statements, no result) on the project's engine as someone with write
    /// access would; on DuckDB the file is created when there is none yet.
    #[track_caller]
    pub fn execute_on_engine(&self, sql: &str) {
        if let EngineBackend::Postgres(t) = &self.engine {
            let mut db = efmesh::engine::postgres::Postgres::open(&t.url, false).expect("open the Postgres engine database");
            return db.execute(sql).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut db = DuckDb::open(&self.engine_path(), &EngineSection::default()).expect("open duckdb");
        db.execute(sql).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every relation outside the catalog schemas as `schema.name`, sorted, on either engine
    /// (empty without a DuckDB file).
    pub fn relations(&self) -> Vec<String> {
        if !self.on_postgres() && !self.engine_path().exists() {
            return Vec::new();
        }
        let mut v: Vec<String> = self
            .query("SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')")
            .into_iter()
            .map(|r| r[0].clone().expect("name"))
            .collect();
        v.sort();
        v
    }
}

/// What the state store holds, for before/after comparisons.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StateSummary {
    /// Environment names.
    pub envs: Vec<String>,
    /// Pointer set per environment.
    pub pointers: BTreeMap<String, BTreeMap<String, String>>,
    /// Journal ids per environment.
    pub journal: BTreeMap<String, Vec<i64>>,
    /// Snapshot keys (name, fingerprint).
    pub snapshots: BTreeSet<(String, String)>,
    /// Done interval starts per snapshot.
    pub intervals: BTreeMap<(String, String), BTreeSet<i64>>,
}

/// The plan's actions (a plan object, or an apply object holding one under `plan`).
#[track_caller]
pub fn actions(v: &Value) -> &Vec<Value> {
    let plan = if v.get("plan").is_some() { &v["plan"] } else { v };
    plan["actions"].as_array().unwrap_or_else(|| panic!("no actions in {v:#}"))
}

/// The action named `name`.
#[track_caller]
pub fn action<'a>(v: &'a Value, name: &str) -> &'a Value {
    actions(v).iter().find(|a| a["name"] == name).unwrap_or_else(|| panic!("no action `{name}` in {v:#}"))
}

/// A JSON array of strings, as a sorted set.
#[track_caller]
pub fn string_set(v: &Value) -> BTreeSet<String> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|s| s.as_str().expect("string").to_string()).collect()
}

/// A set of names.
pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The view serving model `schema.table` in `env` (`prod` serves the model's own schema).
pub fn env_view(env: &str, model: &str) -> String {
    let (schema, table) = model.split_once('.').expect("schema.table");
    if env == "prod" { format!("\"{schema}\".\"{table}\"") } else { format!("\"{env}__{schema}\".\"{table}\"") }
}

/// Runs `sql` on a fresh in-memory DuckDB (UTC session), e.g. a reference query over a CSV file.
#[track_caller]
pub fn query_in_memory(sql: &str) -> Rows {
    let mut db = DuckDb::in_memory().expect("in-memory duckdb");
    db.query(sql).unwrap_or_else(|e| panic!("{e}"))
}

/// Sorted rows of a query whose every column is cast to VARCHAR, on a fresh in-memory DuckDB.
#[track_caller]
pub fn sorted_in_memory(sql: &str) -> Rows {
    let mut r = query_in_memory(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM ({sql}) AS q"));
    r.sort();
    r
}

/// The names of models that have a view (a `physical` relation) in a plan.
pub fn served_models(v: &Value) -> Vec<String> {
    actions(v).iter().filter(|a| a.get("physical").is_some()).map(|a| a["name"].as_str().expect("name").to_string()).collect()
}

/// A small project exercising every kind: an external CSV, a chain `s.a` (full) → `s.b` (view) →
/// `s.c` (full), and unrelated `t.e` (embedded) → `t.d` (full) plus `t.daily` (time range over
/// the CSV, lookback 1).
pub fn sample_project() -> Project {
    sample_project_on(StateBackend::Sqlite)
}

/// [`sample_project`] with its state store on `backend`.
pub fn sample_project_on(backend: StateBackend) -> Project {
    let p = Project::on(backend);
    p.write(
        "data/events.csv",
        "event_at,region,amount\n\
         2026-01-01 00:00:00,north,100\n\
         2026-01-01 14:00:00,north,150\n\
         2026-01-01 16:45:00,south,90\n\
         2026-01-02 00:00:00,south,20\n\
         2026-01-02 09:10:00,north,120\n\
         2026-01-05 23:59:59,east,75\n\
         2026-01-06 00:00:00,east,5\n\
         2026-02-09 23:00:00,west,42\n\
         2026-02-10 00:00:00,west,1000\n",
    );
    p.write(
        "models/raw.lua",
        r#"local M = {}
M.events = define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.csv" },
  schema = { { "event_at", "timestamp" }, { "region", "varchar" }, { "amount", "bigint" } },
}
return M
"#,
    );
    p.write("models/a.lua", &model_a(""));
    p.write("models/b.lua", &model_b(B_QUERY));
    p.write(
        "models/c.lua",
        r#"define_model {
  name = "s.c",
  kind = kind.full(),
  schema = { { "n", "bigint" }, { "total", "bigint" } },
  query = "SELECT count(*) AS n, CAST(sum(twice) AS BIGINT) AS total FROM " .. ref("s.b"),
}
"#,
    );
    p.write("models/d.lua", &model_d("'x' || id"));
    p
}

/// [`sample_project_on`] with its models on `engine`, in SQL both engines read the same way
/// (see [`portable_sample`]).
pub fn sample_project_with(backend: StateBackend, engine: EngineBackend) -> Project {
    let sample = sample_project_on(backend.clone());
    let p = Project::with(backend, engine);
    for rel in ["data/events.csv", "models/raw.lua", "models/a.lua", "models/b.lua", "models/c.lua", "models/d.lua"] {
        p.write(rel, &portable_sample(&p, &sample.read(rel)));
    }
    p
}

/// A file of the sample project (or of [`model_a`], [`model_d`]) in SQL both engines read the
/// same way: `range(…)` as `generate_series(…) AS g(range)` (same rows, same column name),
/// `GROUP BY ALL` spelled out, `t.e`'s tag without reading the alias `id` its own SELECT
/// defines; on Postgres, which reads no files, the external CSV is loaded as
/// a seed of the same file.
pub fn portable_sample(p: &Project, text: &str) -> String {
    let text = text
        .replace("FROM range(1, 8)", "FROM generate_series(1, 7) AS g(range)")
        .replace("FROM range(3)", "FROM generate_series(0, 2) AS g(range)")
        .replace("GROUP BY ALL", "GROUP BY 1, 2")
        .replace(" || id AS tag FROM generate_series", " || CAST(range AS INTEGER) AS tag FROM generate_series");
    if p.on_postgres() { text.replace("kind.external { path = \"data/events.csv\" }", "kind.seed { path = \"data/events.csv\" }") } else { text }
}

/// `models/a.lua` of the sample project; `extra` is appended to its WHERE clause.
pub fn model_a(extra: &str) -> String {
    format!(
        r#"return define_model {{
  name = "s.a",
  kind = kind.full(),
  schema = {{ {{ "id", "integer" }}, {{ "label", "varchar" }} }},
  query = "SELECT CAST(range AS INTEGER) AS id, 'item ' || range AS label FROM range(1, 8) WHERE true {extra}",
}}
"#
    )
}

/// The query of `s.b` in the sample project (`{a}` stands for `ref(a)`).
pub const B_QUERY: &str = "SELECT id, label, id * 2 AS twice FROM {a} WHERE id > 1";

/// `models/b.lua` of the sample project with the given query (`{a}` stands for `ref(a)`).
pub fn model_b(query: &str) -> String {
    let q = query.replace("{a}", "]] .. ref(a) .. [[");
    format!(
        r#"local a = require("a")
return define_model {{
  name = "s.b",
  kind = kind.view(),
  schema = {{ {{ "id", "integer" }}, {{ "label", "varchar" }}, {{ "twice", "integer" }} }},
  query = [[{q}]],
}}
"#
    )
}

/// `models/d.lua` of the sample project; `tag` is the embedded model's `tag` expression.
pub fn model_d(tag: &str) -> String {
    format!(
        r#"local raw = require("raw")
local e = define_model {{
  name = "t.e",
  kind = kind.embedded(),
  schema = {{ {{ "id", "integer" }}, {{ "tag", "varchar" }} }},
  query = "SELECT CAST(range AS INTEGER) AS id, {tag} AS tag FROM range(3)",
}}
define_model {{
  name = "t.d",
  kind = kind.full(),
  schema = {{ {{ "id", "integer" }}, {{ "tag", "varchar" }} }},
  query = "SELECT id, tag FROM " .. ref(e),
}}
define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 7, lookback = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "region", "varchar" }}, {{ "revenue", "bigint" }}, {{ "n", "bigint" }} }},
  query = function()
    return ([[
      SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region,
             CAST(sum(amount) AS BIGINT) AS revenue, count(*) AS n
      FROM %s
      WHERE event_at >= @start AND event_at < @end
      GROUP BY ALL
    ]]):format(ref(raw.events))
  end,
}}
"#
    )
}

/// The files a run evaluated, from the `EVAL <tag>` lines its model files printed (see
/// [`printing_lua_model`]; plain or inside a logfmt `msg="…"`), sorted.
pub fn evaluated(run: &Run) -> Vec<String> {
    let mut tags: Vec<String> = run
        .stderr
        .lines()
        .filter_map(|l| l.split("EVAL ").nth(1))
        .filter_map(|t| t.split(|c: char| c.is_whitespace() || c == '"').next())
        .map(str::to_string)
        .collect();
    tags.sort();
    tags
}

/// A Lua `full` model `name` with one `varchar` column `v` holding the single row `value`.
pub fn one_row_model(name: &str, value: &str) -> String {
    format!("define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"varchar\" }} }}, query = \"SELECT '{value}' AS v\" }}\n")
}

/// A Lua model file that prints `EVAL <tag>` when evaluated; `require` lines (`prelude`) and the
/// query are given.
pub fn printing_lua_model(tag: &str, name: &str, prelude: &str, select: &str) -> String {
    format!(
        "print(\"EVAL {tag}\")\n{prelude}\ndefine_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = {select} }}\n"
    )
}

/// `efmesh check --log-level debug`, which must succeed (the debug lines say what the load did).
pub fn check_debug(p: &Project) -> Run {
    let run = p.run(&["check", "--log-level", "debug"]);
    run.expect_code(0);
    run
}

/// `efmesh render <model>`'s output, which must succeed.
pub fn rendered(p: &Project, model: &str) -> String {
    let run = p.run(&["render", model]);
    run.expect_code(0);
    run.stdout
}

/// Replaces the rows of the source table `src.events` with those of `csv` (`event_at,region,amount`
/// lines after a header; an empty region is NULL), creating it when missing: the data changes
/// outside efmesh, the external's declaration does not.
pub fn load_events(p: &Project, csv: &str) {
    p.execute_on_engine("CREATE SCHEMA IF NOT EXISTS src");
    p.execute_on_engine("CREATE TABLE IF NOT EXISTS src.events (event_at TIMESTAMP, region VARCHAR, amount BIGINT)");
    p.execute_on_engine("DELETE FROM src.events");
    let rows: Vec<String> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let region = if f[1].is_empty() { "NULL".to_string() } else { format!("'{}'", f[1]) };
            format!("(TIMESTAMP '{}', {region}, {})", f[0], f[2])
        })
        .collect();
    p.execute_on_engine(&format!("INSERT INTO src.events VALUES {}", rows.join(", ")));
}

/// The fingerprint of model `m.x` in a project of `models/parent.lua` (`parent`) plus
/// `models/<file>` (`text`): how the kind tests compare one model written in Lua, Rhai and
/// `.sql`, and see which edits are hashed.
#[track_caller]
pub fn fingerprint_of(parent: &str, file: &str, text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(dir.path().join("models/parent.lua"), parent).unwrap();
    fs_err::write(dir.path().join("models").join(file), text).unwrap();
    let config = efmesh::config::Config::with_root(dir.path());
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v = efmesh::plan::versions(&project, &Default::default()).unwrap();
    v.fingerprints.iter().find(|(k, _)| k.to_string() == "m.x").map(|(_, fp)| fp.as_str().to_string()).unwrap_or_else(|| panic!("{file}: no `m.x`"))
}
