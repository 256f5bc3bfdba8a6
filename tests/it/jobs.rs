//! `apply --jobs N` / `run --jobs N`: the DAG scheduler builds a model once its parents are
//! built, several at once on their own engine connections; the first failure stops new work,
//! every failure is reported, nothing is promoted. (Speed lives in the benchmark.)

use crate::common::*;
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(
    a_diamond_with_four_jobs_builds_each_model_once_after_its_parents,
    one_job_builds_one_model_after_another_in_the_plans_order,
    a_failure_in_one_branch_stops_new_work_and_promotes_nothing,
    every_failure_of_a_parallel_apply_is_reported,
    run_builds_in_parallel_and_computes_what_one_job_computes,
);

/// A `full` model `name` reading `parents` (a cross join of their counts, so it really reads
/// them), one file per model.
fn full(p: &Project, name: &str, parents: &[&str]) {
    let query = if parents.is_empty() {
        "SELECT CAST(i AS BIGINT) AS n FROM generate_series(1, 1000) AS g(i)".to_string()
    } else {
        let from: Vec<String> = parents.iter().map(|q| format!("(SELECT count(*) AS c FROM \" .. ref(\"{q}\") .. \")")).collect();
        let sum: Vec<String> = (0..parents.len()).map(|i| format!("p{i}.c")).collect();
        let from: Vec<String> = from.iter().enumerate().map(|(i, f)| format!("{f} AS p{i}")).collect();
        format!("SELECT CAST({} AS BIGINT) AS n FROM {}", sum.join(" + "), from.join(", "))
    };
    let file = name.replace('.', "_");
    p.write(
        &format!("models/{file}.lua"),
        &format!("define_model {{\n  name = \"{name}\",\n  kind = kind.full(),\n  schema = {{ {{ \"n\", \"bigint\" }} }},\n  query = \"{query}\",\n}}\n"),
    );
}

/// A `full` model `name` whose query binds (its contract holds) and fails when it runs (a cast
/// of a text naming the model to an integer, from the seventh row on).
fn failing(p: &Project, name: &str) {
    let file = name.replace('.', "_");
    p.write(
        &format!("models/{file}.lua"),
        &format!(
            "define_model {{\n  name = \"{name}\",\n  kind = kind.full(),\n  schema = {{ {{ \"x\", \"varchar\" }} }},\n  query = \"SELECT CASE WHEN i > 5 THEN CAST(CAST('boom in {name} #' || i AS INTEGER) AS VARCHAR) ELSE 'ok' END AS x FROM generate_series(0, 9) AS g(i)\",\n}}\n"
        ),
    );
}

/// The JSON log lines of a run (`--log-format json`).
fn events(run: &Run) -> Vec<Value> {
    run.stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

/// Position of the log line `msg` about `model` (exactly one such line).
#[track_caller]
fn at(events: &[Value], msg: &str, model: &str, run: &Run) -> usize {
    let found: Vec<usize> = events.iter().enumerate().filter(|(_, e)| e["message"] == msg && e["model"] == model).map(|(i, _)| i).collect();
    assert_eq!(found.len(), 1, "`{msg}` of {model}: {found:?}\n{}", run.stderr);
    found[0]
}

/// s.a → s.b, s.c → s.d (a diamond), plus t.x (a time-range model over s.a, several batches).
fn diamond(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    full(&p, "s.a", &[]);
    full(&p, "s.b", &["s.a"]);
    full(&p, "s.c", &["s.a"]);
    full(&p, "s.d", &["s.b", "s.c"]);
    p.write(
        "models/t_x.lua",
        r#"define_model {
  name = "t.x",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day", batch_size = 7 },
  schema = { { "day", "timestamp" }, { "n", "bigint" } },
  query = "SELECT d.day, a.n FROM (SELECT day FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-02-09', INTERVAL '1 day') AS g(day)) AS d, (SELECT count(*) AS n FROM " .. ref("s.a") .. ") AS a WHERE d.day >= @start AND d.day < @end",
}
"#,
    );
    p
}

fn a_diamond_with_four_jobs_builds_each_model_once_after_its_parents(engine: EngineBackend) {
    let p = diamond(engine);
    // s.b and s.c each take a while to build: with 4 jobs they are under way at once.
    let mut cmd = p.command(&["--log-format", "json", "apply", "dev", "--yes", "--json", "--jobs", "4"]);
    cmd.env("EFMESH_DELAY", "build:s.b=700,build:s.c=700");
    let run = Run::from_output(cmd.output().expect("spawn"), "apply dev --jobs 4".into());
    run.expect_code(0);
    let v = run.json();
    assert_eq!(v["applied"], true, "{v:#}");
    let ev = events(&run);
    for (child, parents) in [("s.b", &["s.a"][..]), ("s.c", &["s.a"]), ("s.d", &["s.b", "s.c"]), ("t.x", &["s.a"])] {
        let start = at(&ev, "build start", child, &run);
        for parent in parents {
            assert!(at(&ev, "build done", parent, &run) < start, "{child} started before {parent} was built:\n{}", run.stderr);
        }
    }
    at(&ev, "build start", "s.a", &run);
    // Both branches were under way at once.
    assert!(at(&ev, "build start", "s.c", &run) < at(&ev, "build done", "s.b", &run), "{}", run.stderr);
    assert!(at(&ev, "build start", "s.b", &run) < at(&ev, "build done", "s.c", &run), "{}", run.stderr);
    // Reported in the plan's order, whatever finished first.
    let built: Vec<&str> = v["built"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(built, ["s.a", "s.b", "s.c", "s.d", "t.x"], "{v:#}");
    assert_eq!(p.rows(&env_view("dev", "s.d")), vec![vec![Some("2".to_string())]]);
    assert_eq!(
        p.query(&format!("SELECT count(*), min(n), max(n) FROM {}", env_view("dev", "t.x"))),
        vec![vec![Some("40".to_string()), Some("1000".to_string()), Some("1000".to_string())]]
    );
    // Every interval is in the ledger, and nothing is left to do.
    let again = p.plan("dev");
    assert_eq!(again["hasChanges"], false, "{again:#}");
}

fn one_job_builds_one_model_after_another_in_the_plans_order(engine: EngineBackend) {
    let p = diamond(engine);
    let mut cmd = p.command(&["--log-format", "json", "apply", "dev", "--yes", "--jobs", "1"]);
    cmd.env("EFMESH_DELAY", "build:s.b=300,build:s.c=300");
    let run = Run::from_output(cmd.output().expect("spawn"), "apply dev --jobs 1".into());
    run.expect_code(0);
    let ev = events(&run);
    let order = ["s.a", "s.b", "s.c", "s.d", "t.x"];
    for pair in order.windows(2) {
        assert!(at(&ev, "build done", pair[0], &run) < at(&ev, "build start", pair[1], &run), "{pair:?}\n{}", run.stderr);
    }
}

fn a_failure_in_one_branch_stops_new_work_and_promotes_nothing(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    failing(&p, "s.bad");
    full(&p, "s.bad_child", &["s.bad"]);
    full(&p, "s.slow", &[]);
    full(&p, "s.after", &["s.slow"]);
    // s.bad fails once s.slow is under way (both start at once), and s.slow is still being built
    // then: it finishes and is recorded; s.after, ready only after the failure, never starts.
    let mut cmd = p.command(&["--log-format", "json", "apply", "dev", "--yes", "--jobs", "2"]);
    cmd.env("EFMESH_DELAY", "build:s.bad=700,build:s.slow=2500");
    let run = Run::from_output(cmd.output().expect("spawn"), "apply dev --jobs 2".into());
    run.expect_code(1);
    assert!(run.stderr.contains("boom in s.bad") && run.stderr.contains("s_bad.lua:1"), "{}", run.stderr);
    let ev = events(&run);
    at(&ev, "build done", "s.slow", &run);
    for never in ["s.after", "s.bad_child"] {
        assert!(!ev.iter().any(|e| e["message"] == "build start" && e["model"] == never), "{never} started:\n{}", run.stderr);
    }
    // Nothing promoted: the environment has no view.
    let views = p.query("SELECT count(*) FROM information_schema.tables WHERE table_type = 'VIEW' AND table_schema LIKE 'dev__%'");
    assert_eq!(views, vec![vec![Some("0".to_string())]], "{}", run.stderr);
    // s.slow's build was recorded: once s.bad is fixed, the next apply does not build it again.
    full(&p, "s.bad", &[]);
    let v = p.run(&["apply", "dev", "--yes", "--json", "--jobs", "2"]).expect_code(0).json();
    let built: Vec<&str> = v["built"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(built, ["s.bad", "s.bad_child", "s.after"], "{v:#}");
}

fn every_failure_of_a_parallel_apply_is_reported(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    failing(&p, "s.bad1");
    failing(&p, "s.bad2");
    full(&p, "s.ok", &["s.bad1"]);
    // s.bad1 fails only after s.bad2 started: both were under way, both are reported.
    let mut cmd = p.command(&["apply", "dev", "--yes", "--jobs", "2"]);
    cmd.env("EFMESH_DELAY", "build:s.bad1=700");
    let run = Run::from_output(cmd.output().expect("spawn"), "apply dev --jobs 2".into());
    run.expect_code(1);
    assert!(run.stderr.contains("2 failures"), "{}", run.stderr);
    for m in ["s.bad1", "s.bad2"] {
        assert!(run.stderr.contains(&format!("boom in {m}")) && run.stderr.contains(&format!("s_{}.lua:1", &m[2..])), "{m}:\n{}", run.stderr);
    }
    let views = p.query("SELECT count(*) FROM information_schema.tables WHERE table_type = 'VIEW' AND table_schema LIKE 'dev__%'");
    assert_eq!(views, vec![vec![Some("0".to_string())]]);
    // In JSON: one error whose kind is the failures' common kind, the message naming both.
    let mut cmd = p.command(&["apply", "dev", "--yes", "--json", "--jobs", "2"]);
    cmd.env("EFMESH_DELAY", "build:s.bad1=700");
    let run = Run::from_output(cmd.output().expect("spawn"), "apply dev --json --jobs 2".into());
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["error"]["kind"], "build", "{v:#}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("boom in s.bad1") && message.contains("boom in s.bad2"), "{v:#}");
}

/// [`diamond`] plus `t.y`, a second time-range model over `s.a`: `run` has two models to compute.
fn two_time_ranges(engine: EngineBackend) -> Project {
    let p = diamond(engine);
    let x = p.read("models/t_x.lua");
    p.write("models/t_y.lua", &x.replace("\"t.x\"", "\"t.y\"").replace("a.n FROM", "a.n * 2 AS n FROM"));
    p
}

fn run_builds_in_parallel_and_computes_what_one_job_computes(engine: EngineBackend) {
    let mut rows = Vec::new();
    for jobs in ["1", "2"] {
        let mut p = two_time_ranges(if jobs == "1" { engine.clone() } else { engine.another() });
        p.now = "2026-02-01T00:00:00Z".to_string();
        p.apply("dev");
        p.now = "2026-02-10T00:00:00Z".to_string();
        let mut cmd = p.command(&["--log-format", "json", "run", "dev", "--json", "--jobs", jobs]);
        cmd.env("EFMESH_DELAY", "build:t.x=700,build:t.y=700");
        let run = Run::from_output(cmd.output().expect("spawn"), format!("run dev --jobs {jobs}"));
        run.expect_code(0);
        assert_eq!(run.json()["outcome"], "processed", "{}", run.stdout);
        let ev = events(&run);
        let overlapped = at(&ev, "build start", "t.y", &run) < at(&ev, "build done", "t.x", &run)
            && at(&ev, "build start", "t.x", &run) < at(&ev, "build done", "t.y", &run);
        assert_eq!(overlapped, jobs == "2", "--jobs {jobs}:\n{}", run.stderr);
        let q = |m: &str| p.query(&format!("SELECT day, n FROM {} ORDER BY day", env_view("dev", m)));
        let (x, y) = (q("t.x"), q("t.y"));
        assert_eq!(x.len(), 40, "--jobs {jobs}");
        rows.push((x, y));
    }
    assert_eq!(rows[0], rows[1], "`run --jobs 2` computed other rows than `run --jobs 1`");
}

#[test]
fn jobs_zero_is_refused() {
    let p = diamond(EngineBackend::DuckDb);
    let run = p.run(&["apply", "dev", "--yes", "--jobs", "0"]);
    run.expect_code(1);
    assert!(run.stderr.contains("--jobs") && run.stderr.contains("0 jobs build nothing: give 1 or more"), "{}", run.stderr);
    // In `--json`: the message is clap's first paragraph, its "try '--help'" the hint.
    let run = p.run(&["run", "dev", "--json", "--jobs", "two"]);
    run.expect_code(1);
    let error = &run.json()["error"];
    assert_eq!(error["kind"], "usage", "{error:#}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("`two` is not a number of jobs") && !message.contains("--help"), "{error:#}");
    assert!(error["hint"].as_str().is_some_and(|h| h.contains("--help")), "{error:#}");
}

/// Models of the engine's own database reading a DuckLake model run on worker connections: the
/// catalog attached on the main connection is the database instance's, so they see it.
#[test]
fn workers_read_what_the_main_connection_attached() {
    let mut p = Project::new();
    p.now = "2026-01-10T06:00:00Z".to_string();
    p.write("efmesh.toml", &format!("{CONFIG}\n[ducklake]\ncatalog = \"catalog/lake.ducklake\"\ndata_path = \"lake_data\"\n"));
    p.write(
        "models/m.lua",
        r#"define_model {
  name = "m.lake",
  kind = kind.full(),
  target = "ducklake",
  schema = { { "n", "bigint" } },
  query = "SELECT CAST(range AS BIGINT) AS n FROM range(1, 11)",
}
"#,
    );
    for (name, op) in [("s.sum", "sum"), ("s.max", "max"), ("s.min", "min")] {
        let file = name.replace('.', "_");
        p.write(
            &format!("models/{file}.lua"),
            &format!(
                "define_model {{\n  name = \"{name}\",\n  kind = kind.full(),\n  schema = {{ {{ \"v\", \"bigint\" }} }},\n  query = \"SELECT CAST({op}(n) AS BIGINT) AS v FROM \" .. ref(\"m.lake\"),\n}}\n"
            ),
        );
    }
    p.run(&["apply", "dev", "--yes", "--jobs", "3"]).expect_code(0);
    for (name, want) in [("s.sum", "55"), ("s.max", "10"), ("s.min", "1")] {
        assert_eq!(p.rows(&env_view("dev", name)), vec![vec![Some(want.to_string())]], "{name}");
    }
}

/// While several models are built at once, DuckDB's thread pool shrinks by one per extra build
/// (`[engine] threads` = 3: two builds under way run with 2, a build alone with 3), so the build
/// connections' own threads and the pool's add up to the cores instead of contending; a model's
/// query sees the setting it ran under.
#[test]
fn builds_under_way_at_once_share_duckdbs_threads() {
    let p = Project::new();
    p.write("efmesh.toml", &CONFIG.replace("[engine]\n", "[engine]\nthreads = 3\n"));
    let seen = |p: &Project, name: &str, parents: &[&str]| {
        let reads: String = parents.iter().map(|q| format!(" + (SELECT 0 * count(*) FROM \" .. ref(\"{q}\") .. \")")).collect();
        let file = name.replace('.', "_");
        p.write(
            &format!("models/{file}.lua"),
            &format!(
                "define_model {{\n  name = \"{name}\",\n  kind = kind.full(),\n  schema = {{ {{ \"threads\", \"bigint\" }} }},\n  query = \"SELECT CAST(current_setting('threads') AS BIGINT){reads} AS threads\",\n}}\n"
            ),
        );
    };
    // s.slow and s.along start together; s.along's query runs while s.slow is held (both are
    // held a little, so the scheduler has told the engine of both before either query runs);
    // s.alone reads both, so it is built when nothing else is.
    seen(&p, "s.slow", &[]);
    seen(&p, "s.along", &[]);
    seen(&p, "s.alone", &["s.slow", "s.along"]);
    let threads = |p: &Project, name: &str| p.rows(&env_view("dev", name))[0][0].clone().unwrap_or_default();
    let mut cmd = p.command(&["apply", "dev", "--yes", "--jobs", "2"]);
    cmd.env("EFMESH_DELAY", "build:s.slow=3000,build:s.along=1000");
    Run::from_output(cmd.output().expect("spawn"), "apply dev --jobs 2".into()).expect_code(0);
    assert_eq!(threads(&p, "s.along"), "2", "built beside s.slow: one thread fewer than `threads`");
    assert_eq!(threads(&p, "s.alone"), "3", "built alone: every thread");

    // One job: every model has the threads alone.
    let q = Project::new();
    q.write("efmesh.toml", &CONFIG.replace("[engine]\n", "[engine]\nthreads = 3\n"));
    seen(&q, "s.slow", &[]);
    seen(&q, "s.along", &[]);
    q.run(&["apply", "dev", "--yes", "--jobs", "1"]).expect_code(0);
    assert_eq!(threads(&q, "s.along"), "3");
}

/// `s.src` (ten days) → `t.c` (time-range, a batch a day, one transaction each) built on a
/// worker, and `s.uk` (unique-key) built on the calling thread's connection, held there
/// (`build:s.uk`) and the process killed once its upsert committed: while the calling thread
/// was busy it recorded none of `t.c`'s batches, so the worker committed at most one
/// transaction unrecorded (it waits for each record) — not the whole range. The next apply
/// computes exactly what is missing.
#[test]
fn a_kill_leaves_at_most_one_transaction_per_model_unrecorded() {
    let p = Project::new();
    p.write("efmesh.toml", &sql_models(&CONFIG.replace("path = \"efmesh.duckdb\"\n", "path = \"efmesh.duckdb\"\nbatch_commit_ms = 0\n")));
    p.write(
        "models/src.sql",
        "-- name: s.src\n-- kind: full\n-- schema: day date, n bigint\nSELECT CAST(d AS DATE) AS day, CAST(1 AS BIGINT) AS n FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-01-10', INTERVAL 1 DAY) AS g(d)\n",
    );
    p.write(
        "models/tc.sql",
        "-- name: t.c\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, end = 2026-01-11, grain = day, batch_size = 1)\n-- schema: day date, n bigint\n-- refs: s.src\nSELECT day, n FROM @ref(s.src) WHERE day >= @start AND day < @end\n",
    );
    p.write(
        "models/uk.sql",
        "-- name: s.uk\n-- kind: incremental_by_unique_key(key = day)\n-- schema: day date, n bigint\n-- refs: s.src\nSELECT day, n FROM @ref(s.src)\n",
    );
    let mut cmd = p.command(&["apply", "dev", "--yes", "--jobs", "2"]);
    cmd.env("EFMESH_DELAY", "build:s.uk=2500").env("EFMESH_FAULT", "after-upsert:s.uk");
    let run = Run::from_output(cmd.output().expect("spawn"), "apply dev --jobs 2".into());
    assert_ne!(run.code, 0, "the process was stopped: {}", run.stderr);
    let table = p.physical_tables().into_iter().find(|t| t.starts_with("t__c")).unwrap_or_else(|| panic!("t.c's table: {:?}", p.physical_tables()));
    let in_table = p.query(&format!("SELECT count(*) FROM _efmesh.\"{table}\""))[0][0].clone().expect("count").parse::<usize>().expect("a count");
    let recorded: usize = p.state_summary().intervals.iter().filter(|((name, _), _)| name == "t.c").map(|(_, days)| days.len()).sum();
    assert!(in_table >= 1, "the worker ran while the calling thread was held: {}", run.stderr);
    assert!(in_table <= recorded + 1, "{in_table} days in t.c's table, {recorded} recorded: more than one transaction unrecorded\n{}", run.stderr);
    // The next apply converges: every day once.
    p.run(&["apply", "dev", "--yes", "--jobs", "2"]).expect_code(0);
    assert_eq!(p.query("SELECT count(*), count(DISTINCT day) FROM dev__t.c"), vec![vec![Some("10".to_string()), Some("10".to_string())]]);
}

/// A pre/post statement that may change its session (`SET TimeZone`, `SET integer_division`)
/// reaches every later model of a sequential apply: with `--jobs 4` the apply is built one model
/// at a time (and says why), so the rows are those of `--jobs 1`.
#[test]
fn a_session_setting_reaches_the_same_models_with_any_jobs() {
    let mut seen = Vec::new();
    for jobs in ["1", "4"] {
        let p = Project::new();
        p.write("efmesh.toml", &sql_models(CONFIG));
        p.write("models/x.sql", "-- name: s.x\n-- kind: full\n-- schema: n bigint\nSELECT CAST(1 AS BIGINT) AS n;\nSET TimeZone = 'America/New_York'\n");
        for name in ["y", "z", "w"] {
            p.write(
                &format!("models/{name}.sql"),
                &format!("-- name: s.{name}\n-- kind: full\n-- schema: d date\n-- refs: s.x\nSELECT CAST(TIMESTAMPTZ '2026-01-01 03:00:00+00' AS DATE) AS d FROM @ref(s.x)\n"),
            );
        }
        let run = p.run(&["apply", "dev", "--yes", "--jobs", jobs]);
        run.expect_code(0);
        assert_eq!(run.stderr.contains("built one model at a time"), jobs == "4", "{}", run.stderr);
        let rows: Vec<Rows> = ["y", "z", "w"].iter().map(|n| p.rows(&env_view("dev", &format!("s.{n}")))).collect();
        seen.push(rows);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0][0], vec![vec![Some("2025-12-31".to_string())]]);
}

/// Models whose statements create one shared object (`CREATE SCHEMA IF NOT EXISTS ops`, a log
/// table) never run their statements at once: with `--jobs 4` the apply succeeds (in parallel
/// such statements conflict in DuckDB's catalog) and the log has every model's row.
#[test]
fn models_with_statements_never_run_two_at_once() {
    let p = Project::new();
    p.write("efmesh.toml", &sql_models(CONFIG));
    for name in ["a", "b", "c", "d"] {
        p.write(
            &format!("models/{name}.sql"),
            &format!(
                "-- name: s.{name}\n-- kind: full\n-- schema: n bigint\nCREATE SCHEMA IF NOT EXISTS ops;\nCREATE TABLE IF NOT EXISTS ops.log (m varchar);\nSELECT CAST(1 AS BIGINT) AS n;\nINSERT INTO ops.log VALUES ('{name}')\n"
            ),
        );
    }
    p.run(&["apply", "dev", "--yes", "--jobs", "4"]).expect_code(0);
    assert_eq!(p.query("SELECT count(DISTINCT m) FROM ops.log"), vec![vec![Some("4".to_string())]]);
}

/// A `--jobs` far above the models opens no more workers than models it can build in parallel:
/// no panic, no thread per job.
#[test]
fn a_jobs_count_far_above_the_models_builds_them() {
    let p = Project::new();
    for name in ["a", "b", "c"] {
        full(&p, &format!("s.{name}"), &[]);
    }
    let run = p.run(&["apply", "dev", "--yes", "--jobs", "4000000000", "--json"]);
    run.expect_code(0);
    assert_eq!(run.json()["built"].as_array().map(Vec::len), Some(3), "{}", run.stdout);
}

/// `config` reading `.sql` models too.
fn sql_models(config: &str) -> String {
    config.replace("models/**/*.lua", "models/**/*.{lua,sql}")
}
