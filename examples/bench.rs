//! Library-level benchmark of the main job (issue #2 item 12): load, cold plan, apply of everything, no-op
//! plan and promotion to prod on generated N-model projects, next to a replay of its own statements
//! on DuckDB in the same run (a replay, not a floor: `--floor` measures the floor).
//!
//! ```text
//! scripts/cargo run --example bench -- [N ...] [--events ROWS] [--seed S] [--reps R] [--rounds K]
//!     [--keep DIR] [--dump DIR] [--no-direct] [--plan-loops K [--loops noop,cold,load]]
//! ```
//! Default: N = 100 500 2000, 200,000 event rows, 5 repetitions of load / plan timings
//! (median), 2 rounds of apply + promotion against direct DuckDB (minimum of each side).
//! Run it through `scripts/cargo`, which also holds the build lock, so no build competes for the
//! CPU while it measures.
//!
//! How it measures, per N, in a fresh temp dir (see `bench/gen.rs` for the projects):
//! - **load**: `Project::load` (discovery, Lua evaluation, DAG build).
//! - **cold plan**: `plan(dev)` against a newly created state file (empty canon cache, no
//!   snapshots), each repetition on its own new file.
//! - **apply**: `apply(dev)` of a cold plan on a fresh state file and a fresh file-backed DuckDB:
//!   contract check, every build, the dev view swap, state writes. The engine is wrapped in a
//!   recorder that keeps every statement and times every engine call (a string clone per call).
//! - **replay DDL** (historically "direct DDL"): the recorded statements of that apply — `CREATE SCHEMA`, `CREATE OR REPLACE
//!   TABLE/VIEW … AS`, `CREATE TABLE IF NOT EXISTS … LIMIT 0`, the `DELETE` + `INSERT` batches,
//!   and the dev view swap — replayed verbatim on a fresh DuckDB file through a bare
//!   `duckdb::Connection` (same `SET TimeZone = 'UTC'`, same transaction grouping: each efmesh
//!   `transaction` call is one `BEGIN … COMMIT`, each `execute` autocommits). Only the contract
//!   check's `DESCRIBE`s are left out: they are efmesh's own overhead.
//! - **no-op plan**: `plan(dev)` right after apply (asserted to have no changes).
//! - **promote**: `plan(prod)` + `apply(prod)`, asserted to build nothing (a view swap).
//! - **replay views**: the recorded prod view swap replayed in one transaction on the direct
//!   DuckDB file, which holds the same physical relations.
//!
//! Rounds alternate the order (round 1: efmesh then direct; round 2: direct then efmesh; …), each
//! on new files, and every round must issue exactly the statements of round 1. The tables report
//! the fastest round of each side.
//!
//! The replay is NOT a floor: it repeats efmesh's own statements (whatever extra SQL efmesh
//! issues is on both sides). `--floor` runs the honest floor instead (`bench/floor.rs`): the
//! `efmesh` process against the models' own SQL run directly in DuckDB by a process with no
//! efmesh in it.
//!
//! `--process` runs the whole-process benchmark instead (`bench/process.rs`): the `efmesh`
//! binary timed as a user runs it (`check`, cold and no-op `plan`, `apply`), and the watch
//! re-plan through `Session`.

/// The allocator of the `efmesh` binary (src/main.rs), so that what this process times in the
/// library (the watch re-plan of `--process`) allocates as `efmesh watch` does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "bench/floor.rs"]
mod floor;
#[path = "bench/gen.rs"]
mod generator;
#[path = "bench/pg.rs"]
mod pg;
#[path = "bench/process.rs"]
mod process;

use efmesh::apply::{self, Options};
use efmesh::config::Config;
use efmesh::core::fragment::CanonicalResolver;
use efmesh::core::{Kind, ModelName};
use efmesh::engine::duckdb::DuckDb;
use efmesh::engine::{DescribedColumn, Engine, EngineError};
use efmesh::plan::{self, Plan};
use efmesh::project::Project;
use efmesh::state::{SqliteStore, StateStore};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Recording engine.

/// One engine call as efmesh made it.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Execute(String),
    Transaction(Vec<String>),
    Describe(String),
    Query(String),
    /// A catalog read (`catalog`, `view_definitions`): efmesh's own checks, never replayed.
    Read(&'static str),
}

/// An [`Engine`] that forwards to DuckDB and records every call with its duration.
struct Recorder {
    inner: DuckDb,
    calls: Vec<(Call, Duration)>,
}

impl Engine for Recorder {
    fn sql(&self) -> &'static dyn efmesh::engine::dialect::Dialect {
        self.inner.sql()
    }
    fn execute(&mut self, sql: &str) -> Result<(), EngineError> {
        let t = Instant::now();
        let r = self.inner.execute(sql);
        self.calls.push((Call::Execute(sql.to_string()), t.elapsed()));
        r
    }
    fn transaction(&mut self, statements: &[String]) -> Result<(), EngineError> {
        let t = Instant::now();
        let r = self.inner.transaction(statements);
        self.calls.push((Call::Transaction(statements.to_vec()), t.elapsed()));
        r
    }
    fn describe(&mut self, query: &str) -> Result<Vec<DescribedColumn>, EngineError> {
        let t = Instant::now();
        let r = self.inner.describe(query);
        self.calls.push((Call::Describe(query.to_string()), t.elapsed()));
        r
    }
    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        let t = Instant::now();
        let r = self.inner.query(sql);
        self.calls.push((Call::Query(sql.to_string()), t.elapsed()));
        r
    }
    fn relation_exists(&mut self, schema: &str, name: &str) -> Result<bool, EngineError> {
        self.inner.relation_exists(schema, name)
    }
    fn describe_many(&mut self, queries: &[String]) -> Vec<Result<Vec<DescribedColumn>, EngineError>> {
        // DuckDB spreads them over cloned connections: each is recorded with an equal share.
        let t = Instant::now();
        let r = self.inner.describe_many(queries);
        let share = t.elapsed() / u32::try_from(queries.len().max(1)).unwrap_or(u32::MAX);
        self.calls.extend(queries.iter().map(|q| (Call::Describe(q.clone()), share)));
        r
    }
    fn stage_text(&mut self, table: &str, columns: &[String], rows: &[Vec<Option<String>>]) -> Result<(), EngineError> {
        self.inner.stage_text(table, columns, rows)
    }
    fn execute_secret(&mut self, label: &str, sql: &str) -> Result<(), EngineError> {
        self.inner.execute_secret(label, sql)
    }
    fn catalog(&mut self) -> Result<efmesh::engine::Catalog, EngineError> {
        let t = Instant::now();
        let r = self.inner.catalog();
        self.calls.push((Call::Read("catalog"), t.elapsed()));
        r
    }
    fn view_definitions(&mut self, views: &[(String, String)]) -> Result<BTreeMap<(String, String), String>, EngineError> {
        let t = Instant::now();
        let r = self.inner.view_definitions(views);
        self.calls.push((Call::Read("view definitions"), t.elapsed()));
        r
    }
    fn load_extension(&mut self, name: &str) -> Result<(), EngineError> {
        self.inner.load_extension(name)
    }
}

/// A count and a total time.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    n: usize,
    t: Duration,
}

impl Tally {
    fn add(&mut self, d: Duration) {
        self.n += 1;
        self.t += d;
    }
    fn show(&self) -> String {
        format!("{} ({})", ms(self.t), self.n)
    }
}

/// What a statement or call is, for the breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cat {
    /// Contract step 1: declared types are engine types (one union, or one per column).
    TypeCheck,
    /// Contract step 2: each external source read once.
    ExternalCheck,
    /// Contract step 3: a model query that reads a CSV external (bind = CSV sniffing).
    DescribeCsv,
    /// Contract step 3: any other model query.
    Describe,
    Schema,
    Ctas,
    PhysicalView,
    /// Time-range table creation (`CREATE TABLE IF NOT EXISTS … LIMIT 0`).
    TimeRangeCreate,
    /// One `DELETE` + `INSERT` batch transaction.
    Batch,
    /// The environment view swap (the last transaction of an apply).
    Swap,
    Other,
}

impl Cat {
    fn of(c: &Call, last: bool) -> Cat {
        let env_stmt = |x: &String| {
            (x.starts_with("CREATE SCHEMA IF NOT EXISTS") && !x.contains("\"_efmesh\""))
                || (x.starts_with("CREATE OR REPLACE VIEW") && !x.starts_with("CREATE OR REPLACE VIEW \"_efmesh\""))
                || x.starts_with("DROP VIEW")
        };
        match c {
            Call::Describe(q) | Call::Query(q) => {
                if q.starts_with("SELECT (SELECT count(*)") || q.starts_with("SELECT CAST(NULL AS") {
                    Cat::TypeCheck
                } else if q.starts_with("SELECT * FROM read_") {
                    Cat::ExternalCheck
                } else if q.contains("read_csv(") {
                    Cat::DescribeCsv
                } else {
                    Cat::Describe
                }
            }
            Call::Transaction(st) if last && st.iter().all(env_stmt) => Cat::Swap,
            Call::Transaction(st) if st.len() == 2 && st[1].starts_with("INSERT INTO") => Cat::Batch,
            Call::Transaction(st) if st.len() == 1 && st[0].starts_with("CREATE OR REPLACE TABLE") => Cat::Ctas,
            Call::Transaction(st) if st.len() == 1 && st[0].starts_with("CREATE OR REPLACE VIEW \"_efmesh\"") => Cat::PhysicalView,
            Call::Execute(s) if s.starts_with("CREATE SCHEMA") => Cat::Schema,
            Call::Execute(s) if s.starts_with("CREATE TABLE IF NOT EXISTS") => Cat::TimeRangeCreate,
            _ => Cat::Other,
        }
    }
    fn is_describe(self) -> bool {
        matches!(self, Cat::TypeCheck | Cat::ExternalCheck | Cat::DescribeCsv | Cat::Describe)
    }
}

/// An apply's engine calls, by category.
#[derive(Debug, Default, Clone)]
struct EngineSplit {
    by: BTreeMap<Cat, Tally>,
    /// Calls a direct run replays (everything but the describes), view swap excluded.
    build_calls: Vec<Call>,
    /// The view swap's statements.
    swap: Vec<String>,
}

impl EngineSplit {
    fn of(calls: &[(Call, Duration)]) -> EngineSplit {
        let mut s = EngineSplit::default();
        for (i, (c, d)) in calls.iter().enumerate() {
            let cat = Cat::of(c, i + 1 == calls.len());
            s.by.entry(cat).or_default().add(*d);
            match (cat, c) {
                (Cat::Swap, Call::Transaction(st)) => s.swap = st.clone(),
                (cat, _) if cat.is_describe() => {}
                (_, Call::Read(_)) => {}
                _ => s.build_calls.push(c.clone()),
            }
        }
        s
    }
    fn get(&self, c: Cat) -> Tally {
        self.by.get(&c).copied().unwrap_or_default()
    }
    fn sum(&self, f: impl Fn(Cat) -> bool) -> Tally {
        self.by.iter().filter(|(c, _)| f(**c)).fold(Tally::default(), |a, (_, t)| Tally { n: a.n + t.n, t: a.t + t.t })
    }
    fn total(&self) -> Duration {
        self.by.values().map(|t| t.t).sum()
    }
}

/// Replays calls on a bare DuckDB connection, timing each by category.
fn replay(conn: &duckdb::Connection, calls: &[Call], out: &mut BTreeMap<Cat, Tally>, last_is_swap: bool) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    for (i, c) in calls.iter().enumerate() {
        let t = Instant::now();
        match c {
            Call::Execute(sql) => conn.execute_batch(sql)?,
            Call::Transaction(st) => {
                conn.execute_batch("BEGIN TRANSACTION")?;
                for s in st {
                    conn.execute_batch(s)?;
                }
                conn.execute_batch("COMMIT")?;
            }
            Call::Describe(_) | Call::Query(_) | Call::Read(_) => continue,
        }
        out.entry(Cat::of(c, last_is_swap && i + 1 == calls.len())).or_default().add(t.elapsed());
    }
    Ok(t0.elapsed())
}

/// Writes recorded calls with their durations as one SQL script.
fn dump(path: &Path, calls: &[(Call, Duration)]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (c, d) in calls {
        let (what, body) = match c {
            Call::Execute(s) => ("execute", s.clone()),
            Call::Transaction(st) => ("transaction", format!("BEGIN TRANSACTION;\n{};\nCOMMIT", st.join(";\n"))),
            Call::Describe(q) => ("describe", format!("DESCRIBE {q}")),
            Call::Query(q) => ("query", q.clone()),
            Call::Read(what) => ("read", format!("-- {what}")),
        };
        let _ = writeln!(out, "-- {what}: {} ms\n{body};\n", ms(*d));
    }
    if let Some(p) = path.parent() {
        fs_err::create_dir_all(p)?;
    }
    fs_err::write(path, out)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Formatting.

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    let m = d.as_secs_f64() * 1e3;
    if m < 10.0 {
        format!("{m:.2}")
    } else if m < 1000.0 {
        format!("{m:.1}")
    } else {
        format!("{m:.0}")
    }
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}

// ---------------------------------------------------------------------------------------------
// Plan and load phases, replayed with the public pieces `plan::plan` and `Project::load` use.

#[derive(Debug, Default, Clone)]
struct PlanSplit {
    /// Rendering every body and hashing it into a cache key.
    keys: Duration,
    /// `canon_cache_get` and the bytes it returned.
    cache_get: Duration,
    cache_bytes: usize,
    /// `plan::versions` (canonicalisation on misses, fingerprints).
    versions: Duration,
    /// env pointers + snapshot keys + done intervals.
    state_reads: Duration,
    misses: usize,
    fallbacks: usize,
    /// Inside `versions`, measured separately: sqlparser parse only, whole `canonicalize`, and
    /// `fingerprint` over all models.
    parse: Duration,
    canonicalize: Duration,
    fingerprint: Duration,
}

fn plan_split(project: &Project, state: &dyn StateStore, env: &str) -> anyhow::Result<PlanSplit> {
    let t0 = Instant::now();
    let keys: Vec<String> =
        project.dag.models().filter_map(|m| m.body.as_ref().map(|b| plan::canon_cache_key("duckdb", &b.render(&CanonicalResolver)))).collect();
    let t1 = Instant::now();
    let cache: HashMap<String, String> = state.canon_cache_get(&keys)?;
    let t2 = Instant::now();
    let v = plan::versions(project, &cache)?;
    let t3 = Instant::now();
    let _p = state.env_pointers(env)?;
    let _s = state.snapshot_keys()?;
    let _d = state.all_done_intervals()?;
    let t4 = Instant::now();
    let fallbacks = v.sources.values().filter(|c| **c != efmesh::sql::canon::CanonSource::SqlParser).count();

    // Sub-phases of `versions`, each over every model.
    let rendered: Vec<(&efmesh::core::Model, String)> =
        project.dag.models().filter_map(|m| m.body.as_ref().map(|b| (m, b.render(&CanonicalResolver)))).collect();
    let dialect = sqlparser::dialect::DuckDbDialect {};
    let t = Instant::now();
    for (_, sql) in &rendered {
        std::hint::black_box(sqlparser::parser::Parser::parse_sql(&dialect, sql).ok());
    }
    let parse = t.elapsed();
    let t = Instant::now();
    for (_, sql) in &rendered {
        std::hint::black_box(efmesh::sql::canon::canonicalize(sql).ok());
    }
    let canonicalize = t.elapsed();
    let t = Instant::now();
    for m in project.dag.models() {
        let parents: BTreeMap<ModelName, efmesh::sql::fingerprint::Fingerprint> =
            m.parents().into_iter().map(|p| (p.clone(), v.fingerprints[&p].clone())).collect();
        std::hint::black_box(efmesh::sql::fingerprint::fingerprint_with_digest(m, v.digests.get(&m.name).map(String::as_str), &parents));
    }
    let fingerprint = t.elapsed();
    Ok(PlanSplit {
        keys: t1 - t0,
        cache_get: t2 - t1,
        cache_bytes: cache.values().map(String::len).sum(),
        versions: t3 - t2,
        state_reads: t4 - t3,
        misses: v.misses.len(),
        fallbacks,
        parse,
        canonicalize,
        fingerprint,
    })
}

/// Time the state store spends on an apply's writes, replayed on a fresh store: one
/// `put_snapshot` per built or registered model, one `mark_intervals` per batch, `canon_cache_put`, `promote`.
fn state_writes(project: &Project, plan: &Plan, path: &Path) -> anyhow::Result<(Duration, Duration, Duration)> {
    use efmesh::core::interval;
    use efmesh::state::{IntervalStatus, SnapshotRecord};
    let store = SqliteStore::open(path)?;
    let now = interval::now_millis();
    let (mut snaps, mut ivs) = (Duration::ZERO, Duration::ZERO);
    // Registered (embedded) versions get a snapshot too: the promotion requires one per model.
    for a in plan.actions.iter().filter(|a| a.build || a.register) {
        let m = project.dag.get(&a.name).expect("model");
        let rec = SnapshotRecord {
            name: a.name.to_string(),
            fingerprint: a.fingerprint.as_str().to_string(),
            fingerprint_version: efmesh::sql::fingerprint::FINGERPRINT_VERSION,
            kind: a.kind.to_string(),
            physical: a.physical.clone().unwrap_or_default(),
            canonical: efmesh::plan::canonical_of(&efmesh::engine::duckdb::DuckDbDialect, m)?.map(|c| c.text),
            rendered_sql: m.body.as_ref().map(|b| b.render(&CanonicalResolver)).unwrap_or_default(),
            metadata: serde_json::json!({"kind": m.kind.fingerprint_payload(), "schema": m.schema.0.iter().map(|c| [c.name.clone(), c.ty.clone()]).collect::<Vec<_>>()}),
            created_at: interval::to_iso(now),
        };
        let t = Instant::now();
        store.put_snapshot(&rec)?;
        snaps += t.elapsed();
        if let Kind::IncrementalByTimeRange(tr) = &m.kind {
            for b in interval::batches(&a.backfill, tr.grain, tr.batch_size) {
                let t = Instant::now();
                store.mark_intervals(&rec.name, &rec.fingerprint, &b.split(tr.grain), IntervalStatus::Done, now)?;
                ivs += t.elapsed();
            }
        }
    }
    let t = Instant::now();
    store.canon_cache_put(&plan.canon_cache_misses)?;
    let pointers: BTreeMap<String, String> = plan.actions.iter().map(|a| (a.name.to_string(), a.fingerprint.as_str().to_string())).collect();
    let require = plan.actions.iter().filter(|a| a.kind != "external").map(|a| a.name.to_string()).collect();
    store.promote(&plan.env, &pointers, &BTreeMap::new(), &require, &serde_json::json!({}), "bench", now)?;
    Ok((snaps, ivs, t.elapsed()))
}

// ---------------------------------------------------------------------------------------------
// The benchmark.

/// One efmesh round: apply dev, no-op plan, promote prod.
struct EfRound {
    apply: Duration,
    engine: EngineSplit,
    built: usize,
    intervals: usize,
    promote_plan: Duration,
    promote_apply: Duration,
    promote_engine: EngineSplit,
    calls: Vec<(Call, Duration)>,
}

/// One direct round.
#[derive(Default)]
struct DirectRound {
    build: Duration,
    swap: Duration,
    views: Duration,
    by: BTreeMap<Cat, Tally>,
}

struct Row {
    n: usize,
    summary: generator::Summary,
    load: Duration,
    load_split: (Duration, Duration, Duration),
    cold_plan: Duration,
    cold_split: PlanSplit,
    noop_plan: Duration,
    noop_split: PlanSplit,
    ef: EfRound,
    ef_applies: Vec<Duration>,
    ef_promotes: Vec<Duration>,
    direct: DirectRound,
    direct_applies: Vec<Duration>,
    direct_views: Vec<Duration>,
    state_writes: (Duration, Duration, Duration),
}

struct Args {
    ns: Vec<usize>,
    events: i64,
    seed: u64,
    reps: usize,
    rounds: usize,
    keep: Option<PathBuf>,
    direct: bool,
    dump: Option<PathBuf>,
    /// Extra repetitions of the no-op plan, cold canonicalisation and load, for `perf record`.
    plan_loops: usize,
    /// Which loops `--plan-loops` runs: any of `noop`, `cold`, `load` (comma-separated).
    loops: String,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        ns: Vec::new(),
        events: 200_000,
        seed: 0xEF3E_5B2C_0001,
        reps: 5,
        rounds: 2,
        keep: None,
        direct: true,
        dump: None,
        plan_loops: 0,
        loops: "noop,cold,load".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| anyhow::anyhow!("{name} needs a value"));
        match x.as_str() {
            "--events" => a.events = val("--events")?.parse()?,
            "--seed" => a.seed = val("--seed")?.parse()?,
            "--reps" => a.reps = val("--reps")?.parse::<usize>()?.max(1),
            "--rounds" => a.rounds = val("--rounds")?.parse::<usize>()?.max(1),
            "--keep" => a.keep = Some(val("--keep")?.into()),
            "--dump" => a.dump = Some(val("--dump")?.into()),
            "--no-direct" => a.direct = false,
            "--plan-loops" => a.plan_loops = val("--plan-loops")?.parse()?,
            "--loops" => a.loops = val("--loops")?,
            "-h" | "--help" => {
                println!(
                    "usage: bench [N ...] [--events ROWS] [--seed S] [--reps R] [--rounds K] [--keep DIR] [--dump DIR] \
                     [--no-direct] [--plan-loops K [--loops noop,cold,load]]"
                );
                std::process::exit(0);
            }
            n => a.ns.push(n.parse().map_err(|e| anyhow::anyhow!("`{n}` is not a model count: {e}"))?),
        }
    }
    if a.ns.is_empty() {
        a.ns = vec![100, 500, 2000];
    }
    Ok(a)
}

/// Apply dev, then promote prod, on new files `<dir>/round<r>.{state.sqlite,duckdb}`.
fn efmesh_round(project: &Project, config: &Config, dir: &Path, r: usize) -> anyhow::Result<(EfRound, SqliteStore)> {
    let state = SqliteStore::open(&dir.join(format!("round{r}.state.sqlite")))?;
    let now = efmesh::core::interval::now_millis();
    let dev = plan::plan(project, &state, "dev", now)?;
    let mut engine = Recorder { inner: DuckDb::open(&dir.join(format!("round{r}.duckdb")), &config.engine)?, calls: Vec::new() };
    let opts = Options { applied_by: "bench".into(), jobs: 0, ..Default::default() };
    let t = Instant::now();
    let report = apply::apply(project, &dev, &state, &mut engine, &opts)?;
    let apply_t = t.elapsed();
    let calls = std::mem::take(&mut engine.calls);
    let split = EngineSplit::of(&calls);

    let t = Instant::now();
    let prod = plan::plan(project, &state, "prod", now)?;
    let promote_plan = t.elapsed();
    let t = Instant::now();
    let preport = apply::apply(project, &prod, &state, &mut engine, &opts)?;
    let promote_apply = t.elapsed();
    anyhow::ensure!(preport.built.is_empty(), "promotion built {:?}", preport.built);
    let promote_engine = EngineSplit::of(&engine.calls);
    anyhow::ensure!(promote_engine.build_calls.is_empty(), "promotion issued build statements: {:?}", promote_engine.build_calls);
    Ok((
        EfRound { apply: apply_t, engine: split, built: report.built.len(), intervals: report.intervals, promote_plan, promote_apply, promote_engine, calls },
        state,
    ))
}

/// Replays a round's statements on the new file `<dir>/direct<r>.duckdb`.
fn direct_round(dir: &Path, r: usize, ef: &EfRound) -> anyhow::Result<DirectRound> {
    let path = dir.join(format!("direct{r}.duckdb"));
    let conn = duckdb::Connection::open(&path)?;
    let _ = conn.execute_batch("SET TimeZone = 'UTC'");
    let mut d = DirectRound::default();
    d.build = replay(&conn, &ef.engine.build_calls, &mut d.by, false)?;
    d.swap = replay(&conn, &[Call::Transaction(ef.engine.swap.clone())], &mut d.by, true)?;
    let mut views = BTreeMap::new();
    d.views = replay(&conn, &[Call::Transaction(ef.promote_engine.swap.clone())], &mut views, true)?;
    Ok(d)
}

/// Both databases hold the same relations with the same row counts.
fn same_databases(a: &Path, b: &Path) -> anyhow::Result<()> {
    let q = "SELECT (SELECT count(*) FROM duckdb_tables() WHERE schema_name = '_efmesh'), \
                    (SELECT count(*) FROM duckdb_views() WHERE NOT internal), \
                    (SELECT sum(estimated_size) FROM duckdb_tables() WHERE schema_name = '_efmesh')";
    let read = |p: &Path| -> anyhow::Result<(i64, i64, i64)> {
        let c = duckdb::Connection::open(p)?;
        Ok(c.query_row(q, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?)
    };
    let (x, y) = (read(a)?, read(b)?);
    anyhow::ensure!(x == y, "{} has (tables, views, rows) {x:?} but {} has {y:?}", a.display(), b.display());
    Ok(())
}

fn bench_one(n: usize, args: &Args) -> anyhow::Result<Row> {
    let tmp = tempfile::Builder::new().prefix("efmesh-bench-").tempdir()?;
    let dir: PathBuf = match &args.keep {
        Some(k) => {
            let d = k.join(format!("n{n}"));
            if d.exists() {
                fs_err::remove_dir_all(&d)?;
            }
            d
        }
        None => tmp.path().to_path_buf(),
    };
    let t = Instant::now();
    let summary = generator::generate(&dir, n, args.events, args.seed, false, generator::Sql::DuckDb)?;
    eprintln!(
        "[n={n}] generated {} models in {} files, {} layers ({} full, {} view, {} embedded, {} time-range), {} event rows, in {} ms",
        summary.models,
        summary.files,
        summary.layers,
        summary.full,
        summary.view,
        summary.embedded,
        summary.incremental,
        summary.events,
        ms(t.elapsed())
    );
    let config = Config::load(&dir.join("efmesh.toml"))?;

    // Load.
    let mut loads = Vec::new();
    let mut splits = Vec::new();
    let mut project = None;
    for _ in 0..args.reps {
        let t = Instant::now();
        let p = Project::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
        loads.push(t.elapsed());
        project = Some(p);
        let t0 = Instant::now();
        let files = efmesh::script::discover(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
        let t1 = Instant::now();
        let models = efmesh::script::load_models(&config.root, &files).map_err(|e| anyhow::anyhow!("{e}"))?;
        let t2 = Instant::now();
        let _dag = efmesh::core::Dag::build(models).map_err(|e| anyhow::anyhow!("{e}"))?;
        splits.push((t1 - t0, t2 - t1, t2.elapsed()));
    }
    let project = project.expect("reps >= 1");
    anyhow::ensure!(project.dag.len() == n + 3, "expected {} models + 3 externals, loaded {}", n, project.dag.len());
    splits.sort_by_key(|s| s.0 + s.1 + s.2);
    let load_split = splits[splits.len() / 2];

    // Cold plan: a new state file each time.
    let mut colds = Vec::new();
    for r in 0..args.reps {
        let state = SqliteStore::open(&dir.join(format!("cold{r}.state.sqlite")))?;
        let t = Instant::now();
        let p = plan::plan(&project, &state, "dev", efmesh::core::interval::now_millis())?;
        colds.push(t.elapsed());
        anyhow::ensure!(p.has_changes, "a cold plan has changes");
    }
    let cold_plan = median(colds);
    let cold_state = SqliteStore::open(&dir.join("cold-split.state.sqlite"))?;
    let cold_split = plan_split(&project, &cold_state, "dev")?;
    let cold = plan::plan(&project, &cold_state, "dev", efmesh::core::interval::now_millis())?;
    let state_writes = state_writes(&project, &cold, &dir.join("writes.state.sqlite"))?;

    // Rounds of efmesh vs direct, alternating which goes first.
    let mut best_ef: Option<EfRound> = None;
    let mut best_direct: Option<DirectRound> = None;
    let (mut ef_applies, mut ef_promotes, mut direct_applies, mut direct_views) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut reference: Option<Vec<Call>> = None;
    let mut noop_state = None;
    for r in 0..args.rounds {
        let mut run_direct = |ef: &EfRound| -> anyhow::Result<()> {
            if !args.direct {
                return Ok(());
            }
            let d = direct_round(&dir, r, ef)?;
            eprintln!("[n={n}] round {}: replay DDL {} ms, replay prod views {} ms", r + 1, ms(d.build + d.swap), ms(d.views));
            direct_applies.push(d.build + d.swap);
            direct_views.push(d.views);
            if best_direct.as_ref().is_none_or(|b| d.build + d.swap < b.build + b.swap) {
                best_direct = Some(d);
            }
            Ok(())
        };
        let direct_first = r % 2 == 1;
        if direct_first {
            run_direct(best_ef.as_ref().expect("round 1 ran efmesh"))?;
        }
        let (ef, state) = efmesh_round(&project, &config, &dir, r)?;
        eprintln!(
            "[n={n}] round {}: efmesh apply {} ms (built {}, {} intervals), promote {} ms",
            r + 1,
            ms(ef.apply),
            ef.built,
            ef.intervals,
            ms(ef.promote_plan + ef.promote_apply)
        );
        if let Some(d) = &args.dump {
            dump(&d.join(format!("apply-dev-{n}-round{}.sql", r + 1)), &ef.calls)?;
        }
        let replayed: Vec<Call> = ef.engine.build_calls.iter().cloned().chain([Call::Transaction(ef.engine.swap.clone())]).collect();
        match &reference {
            None => reference = Some(replayed),
            Some(first) => anyhow::ensure!(*first == replayed, "round {} issued other statements than round 1", r + 1),
        }
        ef_applies.push(ef.apply);
        ef_promotes.push(ef.promote_plan + ef.promote_apply);
        if !direct_first {
            run_direct(&ef)?;
        }
        if args.direct {
            same_databases(&dir.join(format!("round{r}.duckdb")), &dir.join(format!("direct{r}.duckdb")))?;
        }
        if best_ef.as_ref().is_none_or(|b| ef.apply < b.apply) {
            best_ef = Some(ef);
        }
        noop_state = Some(state);
        if args.keep.is_none() && r + 1 < args.rounds {
            for f in [format!("round{r}.duckdb"), format!("direct{r}.duckdb")] {
                let _ = fs_err::remove_file(dir.join(f));
            }
        }
    }
    let ef = best_ef.expect("rounds >= 1");
    let state = noop_state.expect("rounds >= 1");

    // No-op plan, on the last round's state (dev and prod applied).
    let now = efmesh::core::interval::now_millis();
    let mut noops = Vec::new();
    for _ in 0..args.reps.max(5) {
        let t = Instant::now();
        let p = plan::plan(&project, &state, "dev", now)?;
        noops.push(t.elapsed());
        anyhow::ensure!(!p.has_changes, "the plan right after apply has changes");
    }
    let noop_plan = median(noops);
    let noop_split = plan_split(&project, &state, "dev")?;

    if args.plan_loops > 0 {
        eprintln!("[n={n}] profiling loops start");
        let on = |w: &str| args.loops.split(',').any(|x| x == w);
        if on("noop") {
            let t = Instant::now();
            for _ in 0..args.plan_loops {
                std::hint::black_box(plan::plan(&project, &state, "dev", now)?);
            }
            eprintln!("[n={n}] {} no-op plans: {} ms each", args.plan_loops, ms(t.elapsed() / args.plan_loops as u32));
        }
        if on("cold") {
            let t = Instant::now();
            for _ in 0..args.plan_loops {
                std::hint::black_box(plan::versions(&project, &HashMap::new())?);
            }
            eprintln!("[n={n}] {} cold versions(): {} ms each", args.plan_loops, ms(t.elapsed() / args.plan_loops as u32));
        }
        if on("load") {
            let k = args.plan_loops.div_ceil(10);
            let t = Instant::now();
            for _ in 0..k {
                std::hint::black_box(Project::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?);
            }
            eprintln!("[n={n}] {k} loads: {} ms each", ms(t.elapsed() / k as u32));
        }
    }
    eprintln!("[n={n}] done; project in {}", dir.display());
    drop(tmp);
    Ok(Row {
        n,
        summary,
        load: median(loads),
        load_split,
        cold_plan,
        cold_split,
        noop_plan,
        noop_split,
        ef,
        ef_applies,
        ef_promotes,
        direct: best_direct.unwrap_or_default(),
        direct_applies,
        direct_views,
        state_writes,
    })
}

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--floor-exec") {
        return floor::exec_main();
    }
    if std::env::args().any(|a| a == "--floor-exec-pg") {
        return pg::exec_main();
    }
    if std::env::args().any(|a| a == "--floor") {
        return floor::main();
    }
    if std::env::args().any(|a| a == "--process") {
        return process::main();
    }
    let args = parse_args()?;
    let mut rows = Vec::new();
    for &n in &args.ns {
        rows.push(bench_one(n, &args)?);
    }
    let d = |x: Duration| if args.direct { ms(x) } else { "–".into() };
    let r = |a: Duration, b: Duration| if args.direct { ratio(a, b) } else { "–".into() };
    let min = |v: &[Duration]| v.iter().min().copied().unwrap_or_default();
    println!();
    println!(
        "Times in ms; {} event rows; load and plans: median of {}; apply, promotion and direct: fastest of {} alternating rounds.",
        args.events,
        args.reps.max(1),
        args.rounds
    );
    println!();
    println!("| models | load | cold plan | no-op plan | apply | replay DDL | ratio | promote | replay views | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for x in &rows {
        let (apply, promote) = (min(&x.ef_applies), min(&x.ef_promotes));
        let (direct, views) = (min(&x.direct_applies), min(&x.direct_views));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            x.n,
            ms(x.load),
            ms(x.cold_plan),
            ms(x.noop_plan),
            ms(apply),
            d(direct),
            r(apply, direct),
            ms(promote),
            d(views),
            r(promote, views),
        );
    }
    println!();
    println!("Every round (ms): efmesh apply / replay of its DDL / efmesh promote / replay of its views");
    println!();
    for x in &rows {
        let list = |v: &[Duration]| v.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ");
        println!(
            "- n={}: apply [{}], replay [{}], promote [{}], replay views [{}]",
            x.n,
            list(&x.ef_applies),
            list(&x.direct_applies),
            list(&x.ef_promotes),
            list(&x.direct_views)
        );
    }
    println!();
    println!("Load and plan breakdown (ms):");
    println!();
    println!(
        "| models | files | load: discover / Lua / DAG build | cold plan: keys / cache read / versions / state reads | in versions: sqlparser parse / canonicalize (incl. parse) / fingerprint | no-op plan: keys / cache read (MB) / versions / state reads | in versions: fingerprint |"
    );
    println!("|---:|---:|---|---|---|---|---|");
    for x in &rows {
        let (c, o) = (&x.cold_split, &x.noop_split);
        println!(
            "| {} | {} | {} / {} / {} | {} / {} / {} / {} | {} / {} / {} | {} / {} ({:.1}) / {} / {} | {} |",
            x.n,
            x.summary.files,
            ms(x.load_split.0),
            ms(x.load_split.1),
            ms(x.load_split.2),
            ms(c.keys),
            ms(c.cache_get),
            ms(c.versions),
            ms(c.state_reads),
            ms(c.parse),
            ms(c.canonicalize),
            ms(c.fingerprint),
            ms(o.keys),
            ms(o.cache_get),
            o.cache_bytes as f64 / 1e6,
            ms(o.versions),
            ms(o.state_reads),
            ms(o.fingerprint),
        );
    }
    println!();
    println!("Apply breakdown, fastest efmesh round vs fastest replay round (ms, calls in parentheses):");
    println!();
    println!(
        "| models | contract: type check / externals / describe CSV-reading / describe other | full (CTAS) efmesh / direct | views efmesh / direct | time-range create + batches efmesh / direct | dev view swap efmesh / direct | efmesh outside the engine | state writes replayed: snapshots / intervals / cache + promote |"
    );
    println!("|---:|---|---|---|---|---|---|---|");
    for x in &rows {
        let e = &x.ef.engine;
        let dg = |c: Cat| x.direct.by.get(&c).copied().unwrap_or_default();
        let tr_e = e.sum(|c| matches!(c, Cat::TimeRangeCreate | Cat::Batch));
        let tr_d = Tally { n: dg(Cat::TimeRangeCreate).n + dg(Cat::Batch).n, t: dg(Cat::TimeRangeCreate).t + dg(Cat::Batch).t };
        println!(
            "| {} | {} / {} / {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} | {} / {} / {} |",
            x.n,
            e.get(Cat::TypeCheck).show(),
            e.get(Cat::ExternalCheck).show(),
            e.get(Cat::DescribeCsv).show(),
            e.get(Cat::Describe).show(),
            e.get(Cat::Ctas).show(),
            dg(Cat::Ctas).show(),
            e.get(Cat::PhysicalView).show(),
            dg(Cat::PhysicalView).show(),
            tr_e.show(),
            tr_d.show(),
            e.get(Cat::Swap).show(),
            dg(Cat::Swap).show(),
            ms(x.ef.apply.saturating_sub(e.total())),
            ms(x.state_writes.0),
            ms(x.state_writes.1),
            ms(x.state_writes.2),
        );
    }
    println!();
    println!("Promotion breakdown (ms): plan prod / view swap in the engine (statements) / rest of apply / direct views");
    println!();
    for x in &rows {
        let p = &x.ef.promote_engine;
        println!(
            "- n={}: {} / {} ({}) / {} / {}",
            x.n,
            ms(x.ef.promote_plan),
            ms(p.get(Cat::Swap).t),
            p.swap.len(),
            ms(x.ef.promote_apply.saturating_sub(p.total())),
            d(min(&x.direct_views)),
        );
    }
    println!();
    for x in &rows {
        println!(
            "n={}: {} models ({} full, {} view, {} embedded, {} time-range) in {} files and {} layers; built {}, {} intervals; \
             cold plan canonicalised {} bodies ({} via the DuckDB fallback)",
            x.n,
            x.summary.models,
            x.summary.full,
            x.summary.view,
            x.summary.embedded,
            x.summary.incremental,
            x.summary.files,
            x.summary.layers,
            x.ef.built,
            x.ef.intervals,
            x.cold_split.misses,
            x.cold_split.fallbacks
        );
    }
    Ok(())
}
