//! Benchmark of the main job (issue #2 item 12): load, cold plan, apply of everything, no-op
//! plan and promotion to prod on generated N-model projects, next to the same DDL run directly
//! on DuckDB in the same run.
//!
//! ```text
//! scripts/cargo run --example bench -- [N ...] [--events ROWS] [--seed S] [--reps R] [--keep DIR] [--no-direct] [--dump DIR] [--plan-loops K [--loops noop,cold,load]]
//! ```
//! Default: N = 100 500 2000, 200,000 event rows, 3 repetitions of the cheap timings (median).
//!
//! How it measures (per N, in a fresh temp dir; see `bench/gen.rs` for the projects):
//! - **load**: `Project::load` (discovery, Lua evaluation, DAG build), median of R.
//! - **cold plan**: `plan(dev)` against a freshly created state file (empty canon cache, no
//!   snapshots), median of R, each on its own new file.
//! - **apply**: `apply(dev)` of that cold plan on a fresh file-backed DuckDB: contract check,
//!   every build, the dev view swap, state writes. The engine is wrapped in a recorder that
//!   stores every statement and times every engine call (the wrapper costs a string clone).
//! - **direct DDL**: the recorded build statements (`CREATE SCHEMA`, `CREATE OR REPLACE
//!   TABLE/VIEW … AS`, `CREATE TABLE IF NOT EXISTS … LIMIT 0`, `DELETE` + `INSERT` batches) and
//!   the dev view swap, replayed verbatim on a fresh DuckDB file with a bare `duckdb::Connection`
//!   (same `SET TimeZone = 'UTC'`, same transaction grouping: each efmesh `transaction` call is
//!   one `BEGIN … COMMIT`, each `execute` autocommits). Not replayed: the contract check's
//!   `DESCRIBE`s, which are efmesh's own overhead.
//! - **no-op plan**: `plan(dev)` right after apply (must have no changes), median of R.
//! - **promote**: `plan(prod)` + `apply(prod)` (a pure view swap; asserts nothing is built).
//! - **direct views**: the recorded prod view swap replayed on the direct DuckDB file (which
//!   holds the same physical relations) in one transaction.
//!
//! A second table breaks every figure down by phase.

#[path = "bench/gen.rs"]
mod generator;

use efmesh::apply::{self, Options};
use efmesh::config::Config;
use efmesh::engine::duckdb::DuckDb;
use efmesh::engine::{DescribedColumn, Engine, EngineError};
use efmesh::plan::{self, Plan};
use efmesh::project::Project;
use efmesh::state::StateStore;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One engine call as efmesh made it.
#[derive(Debug, Clone)]
enum Call {
    Execute(String),
    Transaction(Vec<String>),
    Describe(String),
    Query(String),
}

/// An [`Engine`] that forwards to DuckDB and records every call with its duration.
struct Recorder {
    inner: DuckDb,
    calls: Vec<(Call, Duration)>,
}

impl Recorder {
    fn take(&mut self) -> Vec<(Call, Duration)> {
        std::mem::take(&mut self.calls)
    }
}

impl Engine for Recorder {
    fn dialect(&self) -> &'static str {
        self.inner.dialect()
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
}

/// Where an apply's engine time went.
#[derive(Debug, Default, Clone)]
struct EngineSplit {
    describes: usize,
    describe: Duration,
    builds: usize,
    build: Duration,
    /// The environment view swap (the last transaction of an apply).
    swap_statements: usize,
    swap: Duration,
}

/// Splits recorded calls into (build calls, view-swap transaction) and times them.
fn split(calls: &[(Call, Duration)]) -> (EngineSplit, Vec<Call>, Vec<String>) {
    let mut s = EngineSplit::default();
    let mut build = Vec::new();
    let mut swap = Vec::new();
    let n = calls.len();
    for (i, (c, d)) in calls.iter().enumerate() {
        let env_stmt = |x: &String| {
            (x.starts_with("CREATE SCHEMA IF NOT EXISTS") && !x.contains("\"_efmesh\""))
                || (x.starts_with("CREATE OR REPLACE VIEW") && !x.starts_with("CREATE OR REPLACE VIEW \"_efmesh\""))
                || x.starts_with("DROP VIEW")
        };
        let is_swap = i + 1 == n && matches!(c, Call::Transaction(st) if st.iter().all(env_stmt));
        match c {
            Call::Describe(_) | Call::Query(_) => {
                s.describes += 1;
                s.describe += *d;
            }
            Call::Transaction(st) if is_swap => {
                s.swap_statements = st.len();
                s.swap += *d;
                swap = st.clone();
            }
            _ => {
                s.builds += 1;
                s.build += *d;
                build.push(c.clone());
            }
        }
    }
    (s, build, swap)
}

/// Replays calls on a bare DuckDB connection; returns the wall time.
fn replay(conn: &duckdb::Connection, calls: &[Call]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    for c in calls {
        match c {
            Call::Execute(sql) => conn.execute_batch(sql)?,
            Call::Transaction(st) => {
                conn.execute_batch("BEGIN TRANSACTION")?;
                for s in st {
                    conn.execute_batch(s)?;
                }
                conn.execute_batch("COMMIT")?;
            }
            Call::Describe(_) | Call::Query(_) => {}
        }
    }
    Ok(t.elapsed())
}

/// Writes recorded calls with their durations, one SQL script per apply.
fn dump(path: &std::path::Path, calls: &[(Call, Duration)]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (c, d) in calls {
        let (what, body) = match c {
            Call::Execute(s) => ("execute", s.clone()),
            Call::Transaction(st) => ("transaction", format!("BEGIN TRANSACTION;\n{};\nCOMMIT", st.join(";\n"))),
            Call::Describe(q) => ("describe", format!("DESCRIBE {q}")),
            Call::Query(q) => ("query", q.clone()),
        };
        let _ = writeln!(out, "-- {what}: {} ms\n{body};\n", ms(*d));
    }
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::write(path, out)?;
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    let m = d.as_secs_f64() * 1e3;
    if m < 10.0 { format!("{m:.2}") } else if m < 1000.0 { format!("{m:.1}") } else { format!("{m:.0}") }
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}

/// Plan phases, replaying what `plan::plan` does with the public pieces.
#[derive(Debug, Default, Clone)]
struct PlanSplit {
    keys: Duration,
    cache_get: Duration,
    versions: Duration,
    state_reads: Duration,
    misses: usize,
    fallbacks: usize,
}

fn plan_split(project: &Project, state: &StateStore, env: &str) -> anyhow::Result<PlanSplit> {
    use efmesh::core::fragment::CanonicalResolver;
    let t0 = Instant::now();
    let keys: Vec<String> = project
        .dag
        .models()
        .filter_map(|m| m.body.as_ref().map(|b| plan::canon_cache_key(&b.render(&CanonicalResolver))))
        .collect();
    let t1 = Instant::now();
    let cache: HashMap<String, String> = state.canon_cache_get(&keys)?;
    let t2 = Instant::now();
    let v = plan::versions(project, &cache)?;
    let t3 = Instant::now();
    let _p = state.env_pointers(env)?;
    let _s = state.snapshot_keys()?;
    let _d = state.all_done_intervals()?;
    let t4 = Instant::now();
    let fallbacks = v.canonical.values().filter(|c| c.source != efmesh::sql::canon::CanonSource::SqlParser).count();
    Ok(PlanSplit { keys: t1 - t0, cache_get: t2 - t1, versions: t3 - t2, state_reads: t4 - t3, misses: v.misses.len(), fallbacks })
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
    apply: Duration,
    apply_engine: EngineSplit,
    built: usize,
    intervals: usize,
    direct_build: Duration,
    direct_swap: Duration,
    promote_plan: Duration,
    promote_apply: Duration,
    promote_engine: EngineSplit,
    direct_views: Duration,
}

struct Args {
    ns: Vec<usize>,
    events: i64,
    seed: u64,
    reps: usize,
    keep: Option<PathBuf>,
    direct: bool,
    dump: Option<PathBuf>,
    /// Extra repetitions of the no-op plan and of cold canonicalisation, for `perf record`.
    plan_loops: usize,
    /// Which loops `--plan-loops` runs: any of `noop`, `cold`, `load` (comma-separated).
    loops: String,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args { ns: Vec::new(), events: 200_000, seed: 0xEF3E_5B2C_0001, reps: 3, keep: None, direct: true, dump: None, plan_loops: 0, loops: "noop,cold,load".into() };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| anyhow::anyhow!("{name} needs a value"));
        match x.as_str() {
            "--events" => a.events = val("--events")?.parse()?,
            "--seed" => a.seed = val("--seed")?.parse()?,
            "--reps" => a.reps = val("--reps")?.parse::<usize>()?.max(1),
            "--keep" => a.keep = Some(val("--keep")?.into()),
            "--no-direct" => a.direct = false,
            "--dump" => a.dump = Some(val("--dump")?.into()),
            "--plan-loops" => a.plan_loops = val("--plan-loops")?.parse()?,
            "--loops" => a.loops = val("--loops")?,
            "-h" | "--help" => {
                println!("usage: bench [N ...] [--events ROWS] [--seed S] [--reps R] [--keep DIR] [--no-direct] [--dump DIR] [--plan-loops K [--loops noop,cold,load]]");
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

fn bench_one(n: usize, args: &Args) -> anyhow::Result<Row> {
    let tmp = tempfile::Builder::new().prefix("efmesh-bench-").tempdir()?;
    let dir: PathBuf = match &args.keep {
        Some(k) => {
            let d = k.join(format!("n{n}"));
            if d.exists() {
                std::fs::remove_dir_all(&d)?;
            }
            d
        }
        None => tmp.path().to_path_buf(),
    };
    let t = Instant::now();
    let summary = generator::generate(&dir, n, args.events, args.seed)?;
    eprintln!(
        "[n={n}] generated {} models in {} files, {} layers ({} full, {} view, {} embedded, {} time-range), {} event rows, in {}",
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
    assert_eq!(project.dag.len(), n + 3, "models + 3 externals");
    splits.sort_by_key(|s| s.0 + s.1 + s.2);
    let load_split = splits[splits.len() / 2];

    // Cold plan: fresh state file each time.
    let mut colds = Vec::new();
    for r in 0..args.reps {
        let state = StateStore::open(&dir.join(format!("cold-{r}.state.sqlite")))?;
        let t = Instant::now();
        let p = plan::plan(&project, &state, "dev", efmesh::core::interval::now_millis())?;
        colds.push(t.elapsed());
        assert!(p.has_changes);
    }
    let cold_plan = median(colds);
    let cold_split = plan_split(&project, &StateStore::open(&dir.join("cold-split.state.sqlite"))?, "dev")?;

    // The real run: plan dev cold, apply dev.
    let state = StateStore::open(&config.state_path())?;
    let now = efmesh::core::interval::now_millis();
    let dev: Plan = plan::plan(&project, &state, "dev", now)?;
    let mut engine = Recorder { inner: DuckDb::open(&config.engine_path(), &config.engine)?, calls: Vec::new() };
    let t = Instant::now();
    let report = apply::apply(&project, &dev, &state, &mut engine, &Options { applied_by: "bench".into() })?;
    let apply_t = t.elapsed();
    let calls = engine.take();
    if let Some(d) = &args.dump {
        dump(&d.join(format!("apply-dev-{n}.sql")), &calls)?;
    }
    let (apply_engine, build_calls, dev_swap) = split(&calls);
    eprintln!("[n={n}] apply dev: {} ms, built {}, {} intervals", ms(apply_t), report.built.len(), report.intervals);

    // No-op plan.
    let mut noops = Vec::new();
    for _ in 0..args.reps.max(5) {
        let t = Instant::now();
        let p = plan::plan(&project, &state, "dev", now)?;
        noops.push(t.elapsed());
        assert!(!p.has_changes, "plan after apply must be empty");
    }
    let noop_plan = median(noops);
    if args.plan_loops > 0 {
        eprintln!("[n={n}] profiling loops start");
        let on = |w: &str| args.loops.split(',').any(|x| x == w);
        let t = Instant::now();
        for _ in 0..args.plan_loops * on("noop") as usize {
            std::hint::black_box(plan::plan(&project, &state, "dev", now)?);
        }
        eprintln!("[n={n}] {} no-op plans: {} ms each", args.plan_loops, ms(t.elapsed() / args.plan_loops as u32));
        let t = Instant::now();
        for _ in 0..args.plan_loops * on("cold") as usize {
            std::hint::black_box(plan::versions(&project, &HashMap::new())?);
        }
        eprintln!("[n={n}] {} cold versions(): {} ms each", args.plan_loops, ms(t.elapsed() / args.plan_loops as u32));
        let t = Instant::now();
        for _ in 0..args.plan_loops.div_ceil(10) * on("load") as usize {
            std::hint::black_box(Project::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?);
        }
        eprintln!("[n={n}] {} loads: {} ms each", args.plan_loops.div_ceil(10), ms(t.elapsed() / args.plan_loops.div_ceil(10) as u32));
    }
    let noop_split = plan_split(&project, &state, "dev")?;

    // Promote to prod: plan + apply, a view swap only.
    let t = Instant::now();
    let prod = plan::plan(&project, &state, "prod", now)?;
    let promote_plan = t.elapsed();
    let t = Instant::now();
    let preport = apply::apply(&project, &prod, &state, &mut engine, &Options { applied_by: "bench".into() })?;
    let promote_apply = t.elapsed();
    assert!(preport.built.is_empty(), "promotion must build nothing, built {:?}", preport.built);
    let (promote_engine, pbuild, prod_swap) = split(&engine.take());
    assert!(pbuild.is_empty(), "promotion issued build statements: {pbuild:?}");
    drop(engine);

    // Direct: the same statements on a fresh DuckDB file, without efmesh.
    let (mut direct_build, mut direct_swap, mut direct_views) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    if args.direct {
        let conn = duckdb::Connection::open(dir.join("direct.duckdb"))?;
        let _ = conn.execute_batch("SET TimeZone = 'UTC'");
        direct_build = replay(&conn, &build_calls)?;
        direct_swap = replay(&conn, &[Call::Transaction(dev_swap)])?;
        direct_views = replay(&conn, &[Call::Transaction(prod_swap)])?;
        // Same relations on both sides.
        let count = |c: &duckdb::Connection, sql: &str| -> anyhow::Result<i64> { Ok(c.query_row(sql, [], |r| r.get(0))?) };
        let q = "SELECT (SELECT count(*) FROM duckdb_tables() WHERE schema_name = '_efmesh') * 1000000 \
                 + (SELECT count(*) FROM duckdb_views() WHERE NOT internal)";
        let efm = duckdb::Connection::open(config.engine_path())?;
        let (a, b) = (count(&efm, q)?, count(&conn, q)?);
        assert_eq!(a, b, "efmesh and direct databases differ in tables/views");
        let rows = "SELECT sum(estimated_size) FROM duckdb_tables() WHERE schema_name = '_efmesh'";
        let (a, b) = (count(&efm, rows)?, count(&conn, rows)?);
        assert_eq!(a, b, "efmesh and direct databases differ in row counts");
    }
    eprintln!("[n={n}] done; project in {}", dir.display());
    if args.keep.is_none() {
        drop(tmp);
    }
    Ok(Row {
        n,
        summary,
        load: median(loads),
        load_split,
        cold_plan,
        cold_split,
        noop_plan,
        noop_split,
        apply: apply_t,
        apply_engine,
        built: report.built.len(),
        intervals: report.intervals,
        direct_build,
        direct_swap,
        promote_plan,
        promote_apply,
        promote_engine,
        direct_views,
    })
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut rows = Vec::new();
    for &n in &args.ns {
        rows.push(bench_one(n, &args)?);
    }
    let d = |x: Duration| if args.direct { ms(x) } else { "–".into() };
    let r = |a: Duration, b: Duration| if args.direct { ratio(a, b) } else { "–".into() };
    println!();
    println!("Times in ms ({} event rows; medians of {} for load and plans; apply and promotion single runs).", args.events, args.reps);
    println!();
    println!("| models | load | cold plan | no-op plan | apply | direct DDL | ratio | promote | direct views | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for x in &rows {
        let direct = x.direct_build + x.direct_swap;
        let promote = x.promote_plan + x.promote_apply;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            x.n,
            ms(x.load),
            ms(x.cold_plan),
            ms(x.noop_plan),
            ms(x.apply),
            d(direct),
            r(x.apply, direct),
            ms(promote),
            d(x.direct_views),
            r(promote, x.direct_views),
        );
    }
    println!();
    println!("Breakdown (ms):");
    println!();
    println!("| models | files | load: discover / Lua / DAG | cold plan: keys / cache / versions / state | no-op plan: keys / cache / versions / state | apply: describes (n) / builds (n) / view swap (stmts) / efmesh rest | direct: builds / view swap | promote: plan / swap (stmts) / rest |");
    println!("|---:|---:|---|---|---|---|---|---|");
    for x in &rows {
        let a = &x.apply_engine;
        let rest = x.apply.saturating_sub(a.describe + a.build + a.swap);
        let p = &x.promote_engine;
        let prest = x.promote_apply.saturating_sub(p.describe + p.build + p.swap);
        let ps = |s: &PlanSplit| format!("{} / {} / {} / {}", ms(s.keys), ms(s.cache_get), ms(s.versions), ms(s.state_reads));
        println!(
            "| {} | {} | {} / {} / {} | {} | {} | {} ({}) / {} ({}) / {} ({}) / {} | {} / {} | {} / {} ({}) / {} |",
            x.n,
            x.summary.files,
            ms(x.load_split.0),
            ms(x.load_split.1),
            ms(x.load_split.2),
            ps(&x.cold_split),
            ps(&x.noop_split),
            ms(a.describe),
            a.describes,
            ms(a.build),
            a.builds,
            ms(a.swap),
            a.swap_statements,
            ms(rest),
            d(x.direct_build),
            d(x.direct_swap),
            ms(x.promote_plan),
            ms(p.swap),
            p.swap_statements,
            ms(prest),
        );
    }
    println!();
    for x in &rows {
        println!(
            "n={}: built {} models, {} intervals; cold plan canonicalised {} bodies ({} via the DuckDB fallback)",
            x.n, x.built, x.intervals, x.cold_split.misses, x.cold_split.fallbacks
        );
    }
    Ok(())
}
