//! The honest floor (`bench --floor`, issue #13): the `efmesh` process next to the models' own
//! SQL run directly in DuckDB by a process with no efmesh in it, in the same run.
//!
//! ```text
//! scripts/cargo build --bin efmesh && scripts/cargo run --example bench -- --floor [N ...]
//!     [--runs K] [--events ROWS] [--seed S] [--keep DIR] [--no-flights] [--flights-only] [--compare counts|full]
//!     [--jobs J[,J…]] [--one-batch] [--postgres]
//! ```
//! Default: N = 100 500 2000, K = 3. Per N, in a fresh directory holding the generated project
//! (`bench/gen.rs`):
//!
//! - **the floor's SQL** is rendered once by this process from the loaded project, with every
//!   reference resolved to the floor's own tables (`"_floor"."<schema>__<table>"`; embedded
//!   models inlined, externals read in place as efmesh reads them), NOT replayed from efmesh's
//!   statements: in DAG order one `CREATE TABLE … AS <query>` per `full` model, `CREATE VIEW`
//!   per `view` model, and for a time-range model ONE `CREATE TABLE … AS` over its whole range
//!   (the query rendered with `@start`/`@end` = the range the plan backfills, the output kept to
//!   that range on the time column: no per-interval batches), then the environment's views
//!   (`"dev__<schema>"."<table>"`, the names efmesh's `dev` serves) in ONE transaction. The
//!   floor process is this bench re-invoked (`--floor-exec SCRIPT DB`): it opens a fresh DuckDB
//!   file and runs the script with one `execute_batch`.
//! - **cold plan**: `efmesh plan dev` with no state, engine file or cache (the floor plans nothing);
//! - **apply all**: `efmesh apply dev --yes --jobs J` on fresh files vs the floor's script on a fresh
//!   file, one line per J of `--jobs` (default: 1, then the cores available); the floor's script
//!   is one sequential connection whatever J is;
//! - **no-op plan**: `efmesh plan dev` after it (checked to have no changes);
//! - **promote**: from copies of the applied files, `efmesh apply prod --yes` (a view swap) vs
//!   the floor creating the same views (`"<schema>"."<table>"`) in one transaction;
//! - **breaking change**: a `WHERE` term added to a model of the middle layer, then from copies
//!   of the applied files `efmesh apply dev --yes` vs the floor re-running `CREATE OR REPLACE`
//!   of that model and its descendants (the models efmesh rebuilds);
//! - **flights**: `examples/flights` copied to a temp dir, `efmesh apply dev --yes` vs the
//!   hand-written `examples/flights/floor.sql` (same transformations, whole year per statement).
//!
//! Each side runs K times, alternating which goes first, each run after a `sync(2)` (no dirty
//! page of the set-up or of the previous run is written back during a timed run); every run is a child process (under
//! `/usr/bin/time -f %M`, for its peak RSS) waited with `wait4`, which gives its wall and CPU
//! time (user + system, the process and `time` together). Reported: best wall
//! (median wall, median CPU, peak RSS of the largest run) and the ratio of the best walls; the
//! load average is printed with each line. After the last apply and the last breaking change,
//! every relation efmesh's `dev` serves is compared with the floor's: same row count and same
//! rows (`EXCEPT ALL` both ways, doubles rounded to 6 decimals; `--compare counts` only counts).
//! stdout of the timed processes goes to /dev/null; stderr to a file shown on failure.
//!
//! `--postgres` (issue #14 part 7; `bench/pg.rs`): the same DAG written for the Postgres engine
//! (`[engine] url_env`, externals naming source tables, Postgres spellings: `bench/gen.rs`),
//! on the server whose URL is in `EFMESH_BENCH_PG_URL` (the role needs `CREATEDB`). Per N the
//! sources are loaded once into a template database; before every run the side's database is
//! made anew from it (`CREATE DATABASE … TEMPLATE`, untimed) and efmesh's state file removed.
//! The floor process is `bench --floor-exec-pg SCRIPT` on its own database: the same rendered
//! SQL, one statement per round trip in autocommit (the views' transaction as one), one
//! connection. A breaking change's floor refills each re-run table (`TRUNCATE` + `INSERT` in
//! one transaction: Postgres has no `CREATE OR REPLACE TABLE` and keeps views' dependencies).
//! Relations are compared by row count and by an order-independent hash of their rows (two
//! databases cannot be joined): see [`pg::Server::compare`]. No flights (it reads files).

use super::generator::{PG_ENGINE_URL_ENV, Sql};
use super::pg;
use super::process::{bench_dir, efmesh_bin, loadavg, remove};
use efmesh::apply::resolve::{ExecResolver, Mode};
use efmesh::config::Config;
use efmesh::core::interval::{self, Interval};
use efmesh::core::name::quote_ident;
use efmesh::core::{Kind, Model, ModelName, Resolver};
use efmesh::project::Project;
use efmesh::state::SqliteStore;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The floor's schema of physical tables.
const FLOOR: &str = "_floor";

struct Args {
    ns: Vec<usize>,
    runs: usize,
    events: i64,
    seed: u64,
    keep: Option<PathBuf>,
    flights: bool,
    sizes: bool,
    full_compare: bool,
    /// `--jobs` of the timed `apply all` runs, one line each.
    jobs: Vec<usize>,
    /// `--one-batch`: the generated time-range models declare a `batch_size` covering their
    /// whole range, so efmesh runs one statement per model as the floor does (the default
    /// project declares 7, 14 or 30 days: efmesh then runs 2–6 statements, commits and scans
    /// per model where the floor runs one).
    one_batch: bool,
    /// `--postgres`: the project on the Postgres engine, both sides on the server of
    /// [`pg::URL_ENV`] (`bench/pg.rs`); no flights.
    postgres: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        ns: Vec::new(),
        runs: 3,
        events: 200_000,
        seed: 0xEF3E_5B2C_0001,
        keep: None,
        flights: true,
        sizes: true,
        full_compare: true,
        jobs: Vec::new(),
        one_batch: false,
        postgres: false,
    };
    let mut it = std::env::args().skip(1).filter(|x| x != "--floor");
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| anyhow::anyhow!("{name} needs a value"));
        match x.as_str() {
            "--runs" => a.runs = val("--runs")?.parse::<usize>()?.max(1),
            "--events" => a.events = val("--events")?.parse()?,
            "--seed" => a.seed = val("--seed")?.parse()?,
            "--keep" => a.keep = Some(val("--keep")?.into()),
            "--no-flights" => a.flights = false,
            "--one-batch" => a.one_batch = true,
            "--postgres" => a.postgres = true,
            "--flights-only" => a.sizes = false,
            "--compare" => a.full_compare = val("--compare")? != "counts",
            "--jobs" => {
                for j in val("--jobs")?.split(',') {
                    a.jobs.push(j.trim().parse::<usize>().map_err(|e| anyhow::anyhow!("--jobs `{j}`: {e}"))?.max(1));
                }
            }
            n => a.ns.push(n.parse().map_err(|e| anyhow::anyhow!("`{n}` is not a model count: {e}"))?),
        }
    }
    if a.ns.is_empty() {
        a.ns = vec![100, 500, 2000];
    }
    if a.jobs.is_empty() {
        // Sequential, then the default (the cores available).
        a.jobs = vec![1, std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)];
        a.jobs.dedup();
    }
    Ok(a)
}

/// `bench --floor-exec SCRIPT DB`: runs the SQL script on the DuckDB file, in one batch.
///
/// # Errors
/// The script cannot be read or fails.
pub fn exec_main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip_while(|a| a != "--floor-exec").skip(1).collect();
    let [script, db] = &args[..] else { anyhow::bail!("usage: bench --floor-exec SCRIPT DB") };
    let sql = fs_err::read_to_string(script)?;
    let conn = duckdb::Connection::open(db)?;
    conn.execute_batch(&sql)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Measuring child processes.

/// One child process: wall time, CPU time (user + system), peak RSS.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
    rss_kb: i64,
    /// `--postgres`, server on this machine: the server's CPU time over the run
    /// ([`pg::server_cpu`]).
    server_cpu: Option<Duration>,
}

/// The postmaster whose CPU time each measured run reports (`--postgres`, [`pg::postmaster`]).
static POSTMASTER: std::sync::OnceLock<i32> = std::sync::OnceLock::new();

/// Runs `cmd` to completion (stdout to /dev/null, stderr to a file shown on failure) and
/// reaps it with `wait4`, which reports its resource usage.
fn measure(inner: Command) -> anyhow::Result<Sample> {
    let err = tempfile::NamedTempFile::new()?;
    // Peak RSS through `/usr/bin/time` (`%M`): the rusage of a child spawned from this (large)
    // process carries this process's peak RSS over `exec`, so `wait4` alone overstates it.
    let rss = tempfile::NamedTempFile::new()?;
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg("-o").arg(rss.path()).arg(inner.get_program()).args(inner.get_args());
    if let Some(d) = inner.get_current_dir() {
        cmd.current_dir(d);
    }
    for (key, value) in inner.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err.reopen()?).env_remove("RUST_LOG").env_remove("EFMESH_VERIFY_PLAN_MEMO").env("NO_COLOR", "1");
    let what = format!("{cmd:?}");
    let server0 = POSTMASTER.get().map(|pid| pg::server_cpu(*pid));
    let t = Instant::now();
    let child = cmd.spawn()?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status: libc::c_int = 0;
    // SAFETY: wait4 writes only the status and the rusage struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = t.elapsed();
    drop(child);
    anyhow::ensure!(r == pid, "wait4 failed for {what}");
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        anyhow::bail!("{what} failed (status {status}):\n{}", fs_err::read_to_string(err.path()).unwrap_or_default());
    }
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    let rss_kb = fs_err::read_to_string(rss.path())?.trim().lines().last().unwrap_or("").parse().map_err(|e| anyhow::anyhow!("peak RSS of {what}: {e}"))?;
    let server_cpu = POSTMASTER.get().zip(server0).map(|(pid, before)| pg::server_cpu(*pid).saturating_sub(before));
    Ok(Sample { wall, cpu: tv(ru.ru_utime) + tv(ru.ru_stime), rss_kb, server_cpu })
}

/// A side's runs.
#[derive(Debug, Default, Clone)]
struct Runs(Vec<Sample>);

impl Runs {
    fn best(&self) -> Duration {
        self.0.iter().map(|s| s.wall).min().unwrap_or_default()
    }
    fn show(&self) -> String {
        if self.0.is_empty() {
            return "—".into();
        }
        let mut w: Vec<Duration> = self.0.iter().map(|s| s.wall).collect();
        let mut c: Vec<Duration> = self.0.iter().map(|s| s.cpu).collect();
        w.sort();
        c.sort();
        let rss = self.0.iter().map(|s| s.rss_kb).max().unwrap_or(0);
        // The server's median CPU beside the process's, when measured (`--postgres`).
        let mut server: Vec<Duration> = self.0.iter().filter_map(|s| s.server_cpu).collect();
        server.sort();
        let server = if server.len() == self.0.len() { format!(" + server {}", super::ms(server[server.len() / 2])) } else { String::new() };
        format!("{} ({}, cpu {}{server}, {:.0} MB)", super::ms(self.best()), super::ms(w[w.len() / 2]), super::ms(c[c.len() / 2]), rss as f64 / 1024.0)
    }
    fn rss_mb(&self) -> f64 {
        self.0.iter().map(|s| s.rss_kb).max().unwrap_or(0) as f64 / 1024.0
    }
}

fn ratio(a: &Runs, b: &Runs) -> String {
    if a.0.is_empty() || b.0.is_empty() {
        return "—".into();
    }
    format!("{:.2}× (RSS {:.2}×)", a.best().as_secs_f64() / b.best().as_secs_f64().max(1e-9), a.rss_mb() / b.rss_mb().max(1e-9))
}

fn efmesh(bin: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.args(args).current_dir(dir);
    c
}

fn floor_exec(dir: &Path, script: &Path, db: &Path) -> anyhow::Result<Command> {
    let mut c = Command::new(std::env::current_exe()?);
    c.arg("--floor-exec").arg(script).arg(db).current_dir(dir);
    Ok(c)
}

/// The files an efmesh project's state lives in (state store, engine, caches).
fn efmesh_files(dir: &Path) -> Vec<PathBuf> {
    ["efmesh.state.sqlite", "efmesh.state.sqlite-wal", "efmesh.state.sqlite-shm", "efmesh.duckdb", "efmesh.duckdb.wal", ".efmesh"]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    if fs_err::metadata(from)?.is_dir() {
        fs_err::create_dir_all(to)?;
        for e in fs_err::read_dir(from)? {
            let e = e?;
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        }
    } else {
        fs_err::copy(from, to)?;
    }
    Ok(())
}

/// Copies (`save`) or restores the files in `files` to/from `snap`.
fn snapshot(files: &[PathBuf], snap: &Path, save: bool) -> anyhow::Result<()> {
    if save {
        remove(snap)?;
        fs_err::create_dir_all(snap)?;
    }
    for f in files {
        let name = f.file_name().ok_or_else(|| anyhow::anyhow!("no file name"))?;
        let s = snap.join(name);
        if save {
            if f.exists() {
                copy_tree(f, &s)?;
            }
        } else {
            remove(f)?;
            if s.exists() {
                copy_tree(&s, f)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The floor's SQL.

/// The floor's table (or view) of a model.
fn floor_relation(name: &ModelName) -> String {
    format!("{}.{}", quote_ident(FLOOR), quote_ident(&format!("{}__{}", name.schema(), name.table())))
}

/// An environment's view of a model, as efmesh names it.
fn env_view(env: &str, name: &ModelName) -> String {
    format!("{}.{}", quote_ident(&efmesh::plan::env_schema(env, name.schema())), quote_ident(name.table()))
}

/// Models that have a relation of their own (not external, not embedded).
fn materialised(m: &Model) -> bool {
    !matches!(m.kind, Kind::External(_) | Kind::Embedded)
}

/// The range a cold plan of `project` backfills for each time-range model (from a plan against a
/// fresh state store, so the floor computes exactly the intervals efmesh computes).
fn ranges(project: &Project, scratch: &Path) -> anyhow::Result<BTreeMap<ModelName, Interval>> {
    let state = SqliteStore::open(&scratch.join("floor-plan.state.sqlite"))?;
    let plan = efmesh::plan::plan(project, &state, "dev", interval::now_millis())?;
    let mut out = BTreeMap::new();
    for a in &plan.actions {
        if let (Some(first), Some(last)) = (a.backfill.iter().map(|i| i.start).min(), a.backfill.iter().map(|i| i.end).max()) {
            out.insert(a.name.clone(), Interval::new(first, last));
        }
    }
    drop(state);
    for f in ["floor-plan.state.sqlite", "floor-plan.state.sqlite-wal", "floor-plan.state.sqlite-shm"] {
        remove(&scratch.join(f))?;
    }
    Ok(out)
}

/// The statement building `model` on the floor (`replace`: `CREATE OR REPLACE`).
fn build_statement(
    project: &Project,
    physicals: &BTreeMap<ModelName, String>,
    ranges: &BTreeMap<ModelName, Interval>,
    m: &Model,
    replace: bool,
    sql: Sql,
) -> anyhow::Result<String> {
    let exec = ExecResolver::new(project, physicals, Mode::Execute);
    let body = m.body.as_ref().ok_or_else(|| anyhow::anyhow!("model `{}` has no body", m.name))?;
    let t = exec.relation(&m.name);
    let create = if replace { "CREATE OR REPLACE" } else { "CREATE" };
    // Postgres has no `CREATE OR REPLACE TABLE`, and will not drop a table views read: a table
    // is refilled in one transaction (as efmesh rebuilds a table on Postgres).
    let refill = |query: String| format!("BEGIN TRANSACTION;\nTRUNCATE {t};\nINSERT INTO {t}\n{query};\nCOMMIT");
    let pg_replace = replace && sql == Sql::Postgres;
    Ok(match &m.kind {
        Kind::Full if pg_replace => refill(body.render(&exec.with_bounds(None))),
        Kind::Full => format!("{create} TABLE {t} AS\n{}", body.render(&exec.with_bounds(None))),
        Kind::View => format!("{create} VIEW {t} AS\n{}", body.render(&exec.with_bounds(None))),
        Kind::IncrementalByTimeRange(tr) => {
            let range = ranges.get(&m.name).copied().ok_or_else(|| anyhow::anyhow!("no backfill range for `{}`", m.name))?;
            let cols: Vec<String> = m.schema.names().map(quote_ident).collect();
            let tc = quote_ident(&tr.time_column);
            let query = format!(
                "SELECT {} FROM (\n{}\n) AS q WHERE {tc} >= {} AND {tc} < {}",
                cols.join(", "),
                body.render(&exec.with_bounds(Some(range))),
                interval::to_sql_literal(range.start),
                interval::to_sql_literal(range.end)
            );
            if pg_replace { refill(query) } else { format!("{create} TABLE {t} AS {query}") }
        }
        other => anyhow::bail!("the floor does not build `{}` models (`{}`)", other.tag(), m.name),
    })
}

/// Views of `env` over the floor's relations, in one transaction.
fn views_script(project: &Project, env: &str) -> String {
    let mut out = String::from("BEGIN TRANSACTION;\n");
    let mut schemas = BTreeSet::new();
    for m in project.dag.models().filter(|m| materialised(m)) {
        let schema = efmesh::plan::env_schema(env, m.name.schema());
        if schemas.insert(schema.clone()) {
            out.push_str(&format!("CREATE SCHEMA IF NOT EXISTS {};\n", quote_ident(&schema)));
        }
        let cols: Vec<String> = m.relation_columns().iter().map(|c| quote_ident(&c.name)).collect();
        out.push_str(&format!("CREATE VIEW {} AS SELECT {} FROM {};\n", env_view(env, &m.name), cols.join(", "), floor_relation(&m.name)));
    }
    out.push_str("COMMIT;\n");
    out
}

fn physicals(project: &Project) -> BTreeMap<ModelName, String> {
    project.dag.models().filter(|m| materialised(m)).map(|m| (m.name.clone(), floor_relation(&m.name))).collect()
}

/// The floor's apply script: every model in DAG order, then `dev`'s views in one transaction.
fn apply_script(project: &Project, ranges: &BTreeMap<ModelName, Interval>) -> anyhow::Result<String> {
    let physicals = physicals(project);
    let mut out = format!("SET TimeZone = 'UTC';\nCREATE SCHEMA {};\n", quote_ident(FLOOR));
    for m in project.dag.models().filter(|m| materialised(m)) {
        out.push_str(&build_statement(project, &physicals, ranges, m, false, Sql::DuckDb)?);
        out.push_str(";\n");
    }
    out.push_str(&views_script(project, "dev"));
    Ok(out)
}

/// The floor's re-run of `models` (in DAG order) after a change.
fn rerun_script(project: &Project, ranges: &BTreeMap<ModelName, Interval>, models: &BTreeSet<ModelName>, sql: Sql) -> anyhow::Result<String> {
    let physicals = physicals(project);
    let mut out = String::from("SET TimeZone = 'UTC';\n");
    for m in project.dag.models().filter(|m| materialised(m) && models.contains(&m.name)) {
        out.push_str(&build_statement(project, &physicals, ranges, m, true, sql)?);
        out.push_str(";\n");
    }
    Ok(out)
}

/// `name` and every model downstream of it.
fn descendants(project: &Project, name: &ModelName) -> BTreeSet<ModelName> {
    let mut out = BTreeSet::from([name.clone()]);
    for m in project.dag.models() {
        if m.parents().iter().any(|p| out.contains(p)) {
            out.insert(m.name.clone());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Equality.

/// Compares each `(efmesh relation, floor relation, model)`: the same row count, and (with
/// `full`) the same rows, doubles rounded to 6 decimals. A relation whose rows differ only in
/// double columns (the same rows with the doubles left out: sums of doubles depend on the
/// order DuckDB's threads add them) is counted apart and reported, not failed. Returns the
/// number compared and the number differing only in doubles.
fn compare(efmesh_db: &Path, floor_db: &Path, pairs: &[(String, String, &Model)], full: bool) -> anyhow::Result<(usize, usize)> {
    let conn = duckdb::Connection::open(efmesh_db)?;
    conn.execute_batch(&format!("SET TimeZone = 'UTC'; ATTACH '{}' AS fl (READ_ONLY)", floor_db.display()))?;
    let mut bad = Vec::new();
    let mut doubles_only = 0;
    let is_double = |ty: &str| {
        let t = ty.to_ascii_lowercase();
        t.contains("double") || t.contains("float") || t.contains("real")
    };
    let differing = |ours: &str, theirs: &str, cols: &str| -> anyhow::Result<i64> {
        let sql = format!(
            "SELECT (SELECT count(*) FROM (SELECT {cols} FROM {ours} EXCEPT ALL SELECT {cols} FROM {theirs})) + \
             (SELECT count(*) FROM (SELECT {cols} FROM {theirs} EXCEPT ALL SELECT {cols} FROM {ours}))"
        );
        Ok(conn.query_row(&sql, [], |r| r.get(0))?)
    };
    for (ours, theirs, m) in pairs {
        let theirs = format!("fl.{theirs}");
        let counts = format!("SELECT (SELECT count(*) FROM {ours}), (SELECT count(*) FROM {theirs})");
        let (a, b): (i64, i64) = conn.query_row(&counts, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
        if a != b {
            bad.push(format!("{}: efmesh {a} rows, floor {b} rows", m.name));
            continue;
        }
        if !full {
            continue;
        }
        let all: Vec<String> = m
            .schema
            .0
            .iter()
            .map(|c| {
                let q = quote_ident(&c.name);
                if is_double(&c.ty) { format!("round({q}, 6) AS {q}") } else { q }
            })
            .collect();
        if differing(ours, &theirs, &all.join(", "))? == 0 {
            continue;
        }
        let exact: Vec<String> = m.schema.0.iter().filter(|c| !is_double(&c.ty)).map(|c| quote_ident(&c.name)).collect();
        let d = if exact.is_empty() { 0 } else { differing(ours, &theirs, &exact.join(", "))? };
        if d == 0 {
            doubles_only += 1;
        } else {
            bad.push(format!("{}: {a} rows each, {d} rows differ outside double columns", m.name));
        }
    }
    anyhow::ensure!(bad.is_empty(), "efmesh and the floor disagree on {} relations:\n  {}", bad.len(), bad.join("\n  "));
    Ok((pairs.len(), doubles_only))
}

/// The note of a comparison.
fn compared((n, doubles): (usize, usize)) -> String {
    if doubles == 0 { format!("{n} relations equal") } else { format!("{n} relations: same rows; {doubles} differ only in double columns (summation order)") }
}

/// Every relation `dev` serves, efmesh's view next to the floor's.
fn dev_pairs(project: &Project) -> Vec<(String, String, &Model)> {
    project.dag.models().filter(|m| materialised(m)).map(|m| (env_view("dev", &m.name), env_view("dev", &m.name), m)).collect()
}

// ---------------------------------------------------------------------------------------------
// The measurements.

/// K alternating runs of efmesh (`ef`) and the floor (`fl`), each preceded by its `before`.
fn alternate(
    k: usize,
    mut ef_before: impl FnMut() -> anyhow::Result<()>,
    mut ef: impl FnMut() -> anyhow::Result<Command>,
    mut fl_before: impl FnMut() -> anyhow::Result<()>,
    mut fl: impl FnMut() -> anyhow::Result<Command>,
) -> anyhow::Result<(Runs, Runs)> {
    let (mut a, mut b) = (Runs::default(), Runs::default());
    for r in 0..k {
        // Round 1 runs the floor first, round 2 efmesh first, …; the last round ends with
        // efmesh's run, so the files it leaves are compared.
        let floor_first = (k - 1 - r) % 2 == 1 || k == 1;
        if floor_first {
            fl_before()?;
            settle();
            b.0.push(measure(fl()?)?);
        }
        ef_before()?;
        settle();
        a.0.push(measure(ef()?)?);
        if !floor_first {
            fl_before()?;
            settle();
            b.0.push(measure(fl()?)?);
        }
    }
    Ok((a, b))
}

/// Writes every dirty page back (`sync(2)`) before a timed run: the files the set-up just
/// copied (hundreds of MB at 2000 models) or the previous run left are otherwise written back
/// during the run, and whichever side `fsync`s first waits for them.
fn settle() {
    // SAFETY: `sync` takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

struct Line {
    what: String,
    ef: Runs,
    fl: Runs,
    note: String,
    load: String,
}

fn print_line(l: &Line) {
    println!("| {} | {} | {} | {} | {} | {} |", l.what, l.ef.show(), l.fl.show(), ratio(&l.ef, &l.fl), l.note, l.load);
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

fn header() {
    println!("| figure | efmesh: best (median, cpu, peak RSS) | floor: best (median, cpu, peak RSS) | efmesh / floor (best) | checked | load avg |");
    println!("|---|---|---|---|---|---|");
}

/// A one-line edit in the middle layer: the file, its text, the edited model.
fn middle_edit(dir: &Path, layers: usize) -> anyhow::Result<(PathBuf, String, String, String)> {
    let layer = dir.join("models").join(format!("l{:02}", (layers / 2).max(1)));
    let mut files: Vec<PathBuf> = fs_err::read_dir(&layer)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    files.sort();
    for f in files {
        let text = fs_err::read_to_string(&f)?;
        if let Some(at) = text.find("\nWHERE ") {
            let model = text[..at].rfind("name = \"").map(|i| text[i + 8..].split('"').next().unwrap_or("").to_string()).unwrap_or_default();
            let mut edited = text.clone();
            edited.insert_str(at + "\nWHERE ".len(), "1 <> 2 AND ");
            return Ok((f, text, edited, model));
        }
    }
    anyhow::bail!("no model with a WHERE line under {}", layer.display())
}

/// Where the two sides keep their data.
enum Store<'a> {
    /// DuckDB files in the project's directory: efmesh's `efmesh.duckdb` (one of the
    /// [`efmesh_files`]) and the floor's `floor.duckdb`.
    DuckDb { floor_db: PathBuf },
    /// Databases of a Postgres server (`--postgres`): efmesh's (`ef`) and the floor's (`fl`),
    /// each made anew from `template` (the source tables, nothing else) before a run.
    Postgres { server: &'a pg::Server, template: String, ef: String, fl: String },
}

impl Store<'_> {
    fn sql(&self) -> Sql {
        match self {
            Store::DuckDb { .. } => Sql::DuckDb,
            Store::Postgres { .. } => pg::SQL,
        }
    }

    /// The engine as efmesh's next run from scratch finds it (its files are removed apart).
    fn fresh_ef(&self) -> anyhow::Result<()> {
        match self {
            Store::DuckDb { .. } => Ok(()),
            Store::Postgres { server, template, ef, .. } => server.recreate(ef, template),
        }
    }

    fn fresh_floor(&self) -> anyhow::Result<()> {
        match self {
            Store::DuckDb { floor_db } => {
                remove(floor_db)?;
                remove(&floor_db.with_extension("duckdb.wal"))
            }
            Store::Postgres { server, template, fl, .. } => server.recreate(fl, template),
        }
    }

    /// `efmesh <args>` in `dir`, on this store's engine.
    fn efmesh(&self, bin: &Path, dir: &Path, args: &[&str]) -> Command {
        let mut c = efmesh(bin, dir, args);
        if let Store::Postgres { server, ef, .. } = self {
            c.env(PG_ENGINE_URL_ENV, server.url_of(ef));
        }
        c
    }

    /// The floor process running `script`.
    fn floor(&self, dir: &Path, script: &Path) -> anyhow::Result<Command> {
        match self {
            Store::DuckDb { floor_db } => floor_exec(dir, script, floor_db),
            Store::Postgres { server, fl, .. } => {
                let mut c = Command::new(std::env::current_exe()?);
                c.arg("--floor-exec-pg").arg(script).current_dir(dir).env(PG_ENGINE_URL_ENV, server.url_of(fl));
                Ok(c)
            }
        }
    }

    /// Keeps a copy of efmesh's engine database (`save`), or puts the copy back; on DuckDB the
    /// engine file is one of the [`efmesh_files`], copied with them. On Postgres the database
    /// is `ANALYZE`d before it is copied (see [`pg::Server::analyze`]).
    fn snapshot_ef(&self, save: bool) -> anyhow::Result<()> {
        match self {
            Store::DuckDb { .. } => Ok(()),
            Store::Postgres { server, ef, .. } => {
                let copy = format!("{ef}_applied");
                if save {
                    server.analyze(ef)?;
                    server.recreate(&copy, ef)
                } else {
                    server.recreate(ef, &copy)
                }
            }
        }
    }

    /// Keeps a copy of the floor's database in `snap` (`save`), or puts it back; on Postgres
    /// `ANALYZE`d first, as efmesh's.
    fn snapshot_floor(&self, snap: &Path, save: bool) -> anyhow::Result<()> {
        match self {
            Store::DuckDb { floor_db } => snapshot(std::slice::from_ref(floor_db), snap, save),
            Store::Postgres { server, fl, .. } => {
                let copy = format!("{fl}_applied");
                if save {
                    server.analyze(fl)?;
                    server.recreate(&copy, fl)
                } else {
                    server.recreate(fl, &copy)
                }
            }
        }
    }

    /// See [`compare`] and [`pg::Server::compare`].
    fn compare(&self, dir: &Path, pairs: &[(String, String, &Model)], full: bool) -> anyhow::Result<(usize, usize)> {
        match self {
            Store::DuckDb { floor_db } => compare(&dir.join("efmesh.duckdb"), floor_db, pairs, full),
            Store::Postgres { server, ef, fl, .. } => server.compare(ef, fl, pairs, full),
        }
    }

    /// Drops the databases this store made (Postgres).
    fn drop_databases(&self) -> anyhow::Result<()> {
        if let Store::Postgres { server, template, ef, fl } = self {
            for db in [ef.clone(), fl.clone(), format!("{ef}_applied"), format!("{fl}_applied"), template.clone()] {
                server.drop_database(&db)?;
            }
        }
        Ok(())
    }
}

fn bench_one(n: usize, args: &Args, bin: &Path, server: Option<&pg::Server>) -> anyhow::Result<Vec<Line>> {
    let sql = if server.is_some() { pg::SQL } else { Sql::DuckDb };
    let (tmp, dir) = bench_dir(args.keep.as_deref(), &format!("floor{n}"), "efmesh-bench-floor-")?;
    let summary = super::generator::generate(&dir, n, args.events, args.seed, args.one_batch, sql)?;
    // Every line of a `--one-batch` run says so; every line of a Postgres run too.
    let mut tag = if args.one_batch { format!("n={n}, one batch per model") } else { format!("n={n}") };
    let store = match server {
        None => Store::DuckDb { floor_db: dir.join("floor.duckdb") },
        Some(server) => {
            tag.push_str(", Postgres");
            let template = format!("efbench_n{n}_sources");
            let t = Instant::now();
            let size = server.load_template(&template, &dir)?;
            eprintln!("[n={n}] sources loaded into database `{template}` ({} MB) in {} ms", size / 1_000_000, super::ms(t.elapsed()));
            Store::Postgres { server, template, ef: format!("efbench_n{n}_efmesh"), fl: format!("efbench_n{n}_floor") }
        }
    };
    let config = Config::load(&dir.join("efmesh.toml"))?;
    let project = Project::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ranges = ranges(&project, &dir)?;
    let script = dir.join("floor-apply.sql");
    fs_err::write(&script, apply_script(&project, &ranges)?)?;
    let prod_script = dir.join("floor-prod.sql");
    fs_err::write(&prod_script, views_script(&project, efmesh::core::name::PROD))?;
    let fresh_floor = || store.fresh_floor();
    let files = efmesh_files(&dir);
    let fresh = || -> anyhow::Result<()> {
        for f in &files {
            remove(f)?;
        }
        store.fresh_ef()
    };
    eprintln!(
        "[n={n}] {} models ({} time-range), floor script {} KB; load average {}",
        summary.models,
        summary.incremental,
        fs_err::metadata(&script)?.len() / 1024,
        loadavg()
    );
    let k = args.runs;
    let mut lines = Vec::new();
    let mut push = |l: Line| {
        eprintln!("[n={n}] {}: efmesh {} / floor {}", l.what, l.ef.show(), l.fl.show());
        lines.push(l);
    };

    // Cold plan (the floor plans nothing); the process start for reference.
    let mut start = Runs::default();
    let mut cold = Runs::default();
    for _ in 0..k {
        start.0.push(measure(efmesh(bin, &dir, &["--version"]))?);
        fresh()?;
        cold.0.push(measure(store.efmesh(bin, &dir, &["plan", "dev"]))?);
    }
    push(Line { what: format!("{tag}: start (`efmesh --version`)"), ef: start, fl: Runs::default(), note: String::new(), load: loadavg() });
    push(Line { what: format!("{tag}: cold plan"), ef: cold, fl: Runs::default(), note: String::new(), load: loadavg() });

    // Apply everything, once per `--jobs` value (each line with its own floor runs); every
    // result is compared with the floor's.
    for &j in &args.jobs {
        let jobs = j.to_string();
        let (ef, fl) =
            alternate(k, fresh, || Ok(store.efmesh(bin, &dir, &["apply", "dev", "--yes", "--jobs", &jobs])), fresh_floor, || store.floor(&dir, &script))?;
        let note = compared(store.compare(&dir, &dev_pairs(&project), args.full_compare)?);
        push(Line { what: format!("{tag}: apply all --jobs {j}"), ef, fl, note, load: loadavg() });
    }
    let snap = dir.join("snap-efmesh");
    let floor_snap = dir.join("snap-floor");
    snapshot(&files, &snap, true)?;
    store.snapshot_ef(true)?;
    store.snapshot_floor(&floor_snap, true)?;
    // The applied files as `apply dev` left them: a copy gives the DuckDB file a new identity
    // (inode times), which makes the engine-catalog record that apply wrote stale; it is
    // recorded again (untimed), as the apply had, so the next command starts where a user's
    // `apply prod` after `apply dev` would (SPEC §4 invariant 27). A Postgres engine has no
    // record (every plan queries its catalog).
    let restore = || -> anyhow::Result<()> {
        snapshot(&files, &snap, false)?;
        store.snapshot_ef(false)?;
        if server.is_none() {
            efmesh::session::engine_catalog(&project)?.ok_or_else(|| anyhow::anyhow!("cannot read the restored engine catalog"))?;
        }
        Ok(())
    };

    // No-op plan.
    let mut noop = Runs::default();
    for _ in 0..k {
        noop.0.push(measure(store.efmesh(bin, &dir, &["plan", "dev"]))?);
    }
    let out = store.efmesh(bin, &dir, &["plan", "dev", "--json"]).output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    anyhow::ensure!(v["hasChanges"] == serde_json::Value::Bool(false), "the plan right after apply has changes");
    push(Line { what: format!("{tag}: no-op plan"), ef: noop, fl: Runs::default(), note: "no changes".into(), load: loadavg() });

    // Promote dev → prod.
    let (ef, fl) = alternate(
        k,
        restore,
        || Ok(store.efmesh(bin, &dir, &["apply", "prod", "--yes"])),
        || store.snapshot_floor(&floor_snap, false),
        || store.floor(&dir, &prod_script),
    )?;
    let prod_pairs: Vec<(String, String, &Model)> = project
        .dag
        .models()
        .filter(|m| materialised(m))
        .map(|m| (env_view(efmesh::core::name::PROD, &m.name), env_view(efmesh::core::name::PROD, &m.name), m))
        .collect();
    let (views, _) = store.compare(&dir, &prod_pairs, false)?;
    push(Line { what: format!("{tag}: promote dev → prod"), ef, fl, note: format!("{views} prod views, same counts"), load: loadavg() });

    // A breaking change in the middle layer.
    let (file, original, edited, model) = middle_edit(&dir, summary.layers)?;
    fs_err::write(&file, &edited)?;
    let result = (|| -> anyhow::Result<Line> {
        let changed_project = Project::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
        let name = ModelName::parse(&model).map_err(|e| anyhow::anyhow!("{e}"))?;
        let rerun = descendants(&changed_project, &name);
        let rebuilt = changed_project.dag.models().filter(|m| materialised(m) && rerun.contains(&m.name)).count();
        let rerun_sql = dir.join("floor-breaking.sql");
        fs_err::write(&rerun_sql, rerun_script(&changed_project, &ranges, &rerun, store.sql())?)?;
        let (ef, fl) = alternate(
            k,
            restore,
            || Ok(store.efmesh(bin, &dir, &["apply", "dev", "--yes"])),
            || store.snapshot_floor(&floor_snap, false),
            || store.floor(&dir, &rerun_sql),
        )?;
        let note = compared(store.compare(&dir, &dev_pairs(&changed_project), args.full_compare)?);
        Ok(Line { what: format!("{tag}: breaking change of `{model}` ({rebuilt} models re-run)"), ef, fl, note, load: loadavg() })
    })();
    fs_err::write(&file, &original)?;
    push(result?);
    if args.keep.is_none() {
        store.drop_databases()?;
    }
    drop(tmp);
    Ok(lines)
}

/// `examples/flights`, copied to a temp dir: `efmesh apply dev --yes` vs `floor.sql`.
fn flights(args: &Args, bin: &Path) -> anyhow::Result<Line> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/flights");
    let tmp = tempfile::Builder::new().prefix("efmesh-bench-flights-").tempdir()?;
    let dir = tmp.path().join("flights");
    for sub in ["data", "models"] {
        copy_tree(&src.join(sub), &dir.join(sub))?;
    }
    fs_err::copy(src.join("efmesh.toml"), dir.join("efmesh.toml"))?;
    let script = src.join("floor.sql");
    let floor_db = dir.join("floor.duckdb");
    let files = efmesh_files(&dir);
    let (ef, fl) = alternate(
        args.runs,
        || {
            for f in &files {
                remove(f)?;
            }
            Ok(())
        },
        || Ok(efmesh(bin, &dir, &["apply", "dev", "--yes"])),
        || remove(&floor_db),
        || floor_exec(&dir, &script, &floor_db),
    )?;
    let config = Config::load(&dir.join("efmesh.toml"))?;
    let project = Project::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pairs: Vec<(String, String, &Model)> = project
        .dag
        .models()
        .filter(|m| materialised(m))
        .map(|m| (env_view("dev", &m.name), format!("{}.{}", quote_ident(m.name.schema()), quote_ident(m.name.table())), m))
        .collect();
    let note = compared(compare(&dir.join("efmesh.duckdb"), &floor_db, &pairs, true)?);
    Ok(Line { what: "flights: apply all (cold)".into(), ef, fl, note, load: loadavg() })
}

/// `bench --floor`.
///
/// # Errors
/// A run fails, or efmesh and the floor disagree on a relation.
pub fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let bin = efmesh_bin()?;
    let server = if args.postgres { Some(pg::Server::from_env()?) } else { None };
    if let Some(s) = &server {
        match pg::postmaster(s) {
            Some(pid) => {
                let _ = POSTMASTER.set(pid);
                eprintln!("Postgres: {} (postmaster {pid}: its CPU time is shown as `+ server`)", s.describe());
            }
            None => eprintln!("Postgres: {} (its processes are not visible here: no server CPU time)", s.describe()),
        }
    }
    let mut lines = Vec::new();
    if args.flights && server.is_none() {
        let l = flights(&args, &bin)?;
        eprintln!("{}: efmesh {} / floor {}", l.what, l.ef.show(), l.fl.show());
        lines.push(l);
    }
    if args.sizes {
        for &n in &args.ns {
            lines.extend(bench_one(n, &args, &bin, server.as_ref())?);
        }
    }
    println!();
    println!("Whole processes, times in ms; best of {} alternating runs per side (median wall, median CPU, largest peak RSS).", args.runs);
    println!();
    header();
    for l in &lines {
        print_line(l);
    }
    Ok(())
}
