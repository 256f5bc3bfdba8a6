//! The parquet lake target on a local directory: one file per grain interval, a view without
//! phantom columns, the manifest, crash convergence (a batch that fails mid-backfill, and
//! `kill -9` mid-backfill), full
//! models across versions and environments, and the load errors of misconfigured targets.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const EVENTS: &str = "event_at,region,amount\n\
    2026-01-01 08:00:00,north,100\n\
    2026-01-01 14:00:00,south,150\n\
    2026-01-02 09:10:00,north,120\n\
    2026-01-04 23:59:59,east,75\n\
    2026-01-05 00:00:00,east,5\n\
    2026-01-06 12:00:00,west,42\n\
    2026-01-08 07:00:00,north,8\n";

/// `now` of these tests: 9 complete days, [2026-01-01, 2026-01-10).
const LAKE_NOW: &str = "2026-01-10T06:00:00Z";
const DAYS: usize = 9;

fn config(extra: &str) -> String {
    format!("{CONFIG}\n{extra}")
}

/// A project with `raw.events` (CSV), `m.daily` (time range, `target`), `m.totals` (full,
/// `target`) reading it, and the given `[lake]` section.
fn lake_project(target: &str, lake: &str) -> Project {
    let mut p = Project::new();
    p.now = LAKE_NOW.to_string();
    p.write("efmesh.toml", &config(lake));
    p.write("data/events.csv", EVENTS);
    p.write("models/m.lua", &models(target, "", 3));
    p
}

/// The project's models; `extra` is appended to `m.totals`'s query, `batch` is the daily batch size.
fn models(target: &str, extra: &str, batch: u32) -> String {
    let target = if target.is_empty() { String::new() } else { format!("target = \"{target}\",") };
    format!(
        r#"local events = define_model {{
  name = "raw.events",
  kind = kind.external {{ path = "data/events.csv" }},
  schema = {{ {{ "event_at", "timestamp" }}, {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
}}
local daily = define_model {{
  name = "m.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = {batch}, lookback = 1 }},
  {target}
  schema = {{ {{ "day", "timestamp" }}, {{ "region", "varchar" }}, {{ "revenue", "bigint" }} }},
  query = [[
    SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region, CAST(sum(amount) AS BIGINT) AS revenue
    FROM ]] .. ref(events) .. [[
    WHERE event_at >= @start AND event_at < @end
    GROUP BY ALL
  ]],
}}
define_model {{
  name = "m.totals",
  kind = kind.full(),
  {target}
  schema = {{ {{ "region", "varchar" }}, {{ "revenue", "bigint" }}, {{ "days", "bigint" }} }},
  query = "SELECT region, CAST(sum(revenue) AS BIGINT) AS revenue, count(*) AS days FROM " .. ref(daily) .. " GROUP BY region {extra}",
}}
"#
    )
}

/// The files of a version directory, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs_err::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `<lake>/<schema>__<table>/<fp>` of a model's version in an apply or plan result.
fn version_dir(p: &Project, lake: &str, v: &Value, model: &str) -> PathBuf {
    let fp = action(v, model)["fingerprint"].as_str().expect("fingerprint").to_string();
    p.root().join(lake).join(model.replace('.', "__")).join(fp)
}

/// The daily file names of [2026-01-01, 2026-01-01 + n days).
fn day_files(n: usize) -> Vec<String> {
    (1..=n).map(|d| format!("2026-01-{d:02}.parquet")).collect()
}

fn described(p: &Project, relation: &str) -> Vec<(String, String)> {
    p.query(&format!("DESCRIBE SELECT * FROM {relation}")).into_iter().map(|r| (r[0].clone().expect("name"), r[1].clone().expect("type"))).collect()
}

#[test]
fn time_range_models_write_one_file_per_interval_and_read_like_tables() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    assert_eq!(v["intervals"], Value::from(DAYS));
    let daily = version_dir(&p, "lake", &v, "m.daily");
    let mut expected = day_files(DAYS);
    expected.push("manifest.json".into());
    assert_eq!(files(&daily), expected, "exactly one file per interval (empty days included), no temporary files");
    assert_eq!(files(&version_dir(&p, "lake", &v, "m.totals")), vec!["data.parquet", "manifest.json"]);

    // Same rows as the same models stored as engine tables.
    let reference = lake_project("", "");
    reference.apply("dev");
    for m in ["m.daily", "m.totals"] {
        assert_eq!(p.rows(&env_view("dev", m)), reference.rows(&env_view("dev", m)), "`{m}`");
    }
    assert_eq!(p.rows(&env_view("dev", "m.daily")).len(), 7, "one row per day and region with events");

    // The view shows the declared columns only: no `fp` / `interval` from the path.
    let declared = vec![("day".to_string(), "TIMESTAMP".to_string()), ("region".into(), "VARCHAR".into()), ("revenue".into(), "BIGINT".into())];
    assert_eq!(described(&p, &env_view("dev", "m.daily")), declared);
    let physical = action(&v, "m.daily")["physical"].as_str().unwrap().to_string();
    assert_eq!(described(&p, &physical), declared, "the physical view itself");
    let view_sql = p.query(&format!(
        "SELECT sql FROM duckdb_views() WHERE schema_name = '_efmesh' AND view_name = '{}'",
        physical.rsplit('.').next().unwrap().trim_matches('"')
    ));
    let view_sql = view_sql[0][0].clone().unwrap();
    // DuckDB stores the view normalised: `hive_partitioning = CAST('f' AS BOOLEAN)`.
    assert!(view_sql.contains("read_parquet(") && view_sql.contains("hive_partitioning = CAST('f'"), "{view_sql}");
    assert_eq!(view_sql.matches(".parquet'").count(), DAYS, "every file listed explicitly: {view_sql}");

    // Nothing left to do; promotion to prod builds nothing.
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
    let prod = p.apply("prod");
    assert_eq!(prod["built"], serde_json::json!([]));
    assert_eq!(p.rows(&env_view("prod", "m.daily")), p.rows(&env_view("dev", "m.daily")));
}

#[test]
fn the_manifest_describes_files_intervals_and_schema() {
    let p = lake_project("parquet", "[lake]\npath = \"out/lake\"\n");
    let v = p.apply("dev");
    let dir = version_dir(&p, "out/lake", &v, "m.daily");
    let m: Value = serde_json::from_str(&fs_err::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["manifestVersion"], Value::from(1));
    assert_eq!(m["model"], "m.daily");
    assert_eq!(m["fingerprint"], action(&v, "m.daily")["fingerprint"]);
    assert_eq!(m["kind"], "incremental_by_time_range");
    assert_eq!(m["format"], "parquet");
    assert_eq!(m["timeColumn"], "day");
    assert_eq!(m["grain"], "day");
    assert_eq!(
        m["schema"],
        serde_json::json!([{"name": "day", "type": "timestamp"}, {"name": "region", "type": "varchar"}, {"name": "revenue", "type": "bigint"}])
    );
    assert_eq!(m["files"], serde_json::json!(day_files(DAYS)));
    let intervals = m["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), DAYS);
    assert_eq!(intervals[0], serde_json::json!({"start": "2026-01-01T00:00:00.000Z", "end": "2026-01-02T00:00:00.000Z", "file": "2026-01-01.parquet"}));
    assert_eq!(intervals[8]["end"], "2026-01-10T00:00:00.000Z");
    // An outside reader needs nothing but the manifest: its files hold exactly the view's rows.
    let list: Vec<String> = m["files"].as_array().unwrap().iter().map(|f| format!("'{}'", dir.join(f.as_str().unwrap()).display())).collect();
    let outside = sorted_in_memory(&format!("SELECT * FROM read_parquet([{}])", list.join(", ")));
    assert_eq!(outside, p.rows(&env_view("dev", "m.daily")));

    let full = version_dir(&p, "out/lake", &v, "m.totals");
    let m: Value = serde_json::from_str(&fs_err::read_to_string(full.join("manifest.json")).unwrap()).unwrap();
    assert_eq!((m["kind"].as_str(), m["files"].clone(), m["intervals"].clone()), (Some("full"), serde_json::json!(["data.parquet"]), serde_json::json!([])));
    assert!(m.get("timeColumn").is_none());
}

#[test]
fn recomputing_an_interval_replaces_its_file() {
    let mut p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    p.apply("dev");
    // Two days later, with a late event for 2026-01-09 (lookback 1 recomputes it).
    p.now = "2026-01-12T01:00:00Z".into();
    p.write("data/events.csv", &format!("{EVENTS}2026-01-09 10:00:00,south,7\n2026-01-10 10:00:00,south,9\n"));
    let v = p.apply("dev");
    assert_eq!(v["intervals"], Value::from(3), "2 new days + 1 lookback");
    let mut expected = day_files(11);
    expected.push("manifest.json".into());
    assert_eq!(files(&version_dir(&p, "lake", &v, "m.daily")), expected);

    let mut reference = lake_project("", "");
    reference.now = p.now.clone();
    reference.write("data/events.csv", &format!("{EVENTS}2026-01-09 10:00:00,south,7\n2026-01-10 10:00:00,south,9\n"));
    reference.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.daily")), reference.rows(&env_view("dev", "m.daily")));
    assert!(p.rows(&env_view("dev", "m.daily")).contains(&vec![Some("2026-01-09 00:00:00".into()), Some("south".into()), Some("7".into())]));
}

/// `m.daily` fails for every interval from 2026-01-05 on while `data/switch.csv` says `fail`
/// (the switch's content is not fingerprinted, so flipping it keeps the version).
fn failing_project() -> Project {
    let mut p = Project::new();
    p.now = LAKE_NOW.to_string();
    p.write("efmesh.toml", &config("[lake]\npath = \"lake\"\n"));
    p.write("data/events.csv", EVENTS);
    p.write("data/switch.csv", "mode\nfail\n");
    p.write(
        "models/m.lua",
        r#"local events = define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.csv" },
  schema = { { "event_at", "timestamp" }, { "region", "varchar" }, { "amount", "bigint" } },
}
local switch = define_model {
  name = "raw.switch",
  kind = kind.external { path = "data/switch.csv" },
  schema = { { "mode", "varchar" } },
}
define_model {
  name = "m.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day", batch_size = 2 },
  target = "parquet",
  schema = { { "day", "timestamp" }, { "region", "varchar" }, { "revenue", "bigint" } },
  query = [[
    SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region,
           CAST(sum(amount) AS BIGINT) + CAST(max(CASE WHEN s.mode = 'fail' AND @start >= TIMESTAMP '2026-01-05'
                                                       THEN error('disk on fire') ELSE 0 END) AS BIGINT) AS revenue
    FROM ]] .. ref(events) .. [[ AS e, ]] .. ref(switch) .. [[ AS s
    WHERE event_at >= @start AND event_at < @end
    GROUP BY ALL
  ]],
}
"#,
    );
    p
}

#[test]
fn a_batch_failing_mid_backfill_marks_nothing_done_and_the_next_apply_converges() {
    let p = failing_project();
    let plan = p.plan("dev");
    let dir = version_dir(&p, "lake", &plan, "m.daily");
    // Every re-creation of the version's view is made slow, so the two batches before the
    // failing one are written without being published: the failure publishes them.
    let out = p.command(&["apply", "dev", "--yes"]).env("EFMESH_DELAY", "lake-publish:m.daily=400").output().expect("spawn efmesh");
    let failed = Run::from_output(out, "apply dev --yes (slow publish)".into());
    failed.expect_code(1);
    assert!(failed.stderr.contains("m.daily") && failed.stderr.contains("disk on fire"), "{}", failed.stderr);
    assert!(failed.stderr.contains("2026-01-05"), "the error names the failing batch: {}", failed.stderr);

    // Batches [01, 03) and [03, 05) are done, each interval with its file; nothing after it.
    let state = p.state_summary();
    let done: BTreeSet<i64> = state.intervals.iter().filter(|((n, _), _)| n == "m.daily").flat_map(|(_, v)| v.iter().copied()).collect();
    let day = |d: u32| efmesh::core::interval::parse_instant(&format!("2026-01-{d:02}")).unwrap();
    assert_eq!(done, (1..=4).map(day).collect::<BTreeSet<_>>());
    let mut expected = day_files(4);
    expected.push("manifest.json".into());
    assert_eq!(files(&dir), expected, "no file (final or temporary) for an interval that is not done");
    // The version's view lists exactly the done days (batches written before the failure are
    // published before it is reported, whenever the view was last published).
    let fp = action(&plan, "m.daily")["fingerprint"].as_str().expect("fingerprint").to_string();
    let served = p.query(&format!("SELECT DISTINCT CAST(day AS DATE)::VARCHAR FROM \"_efmesh\".\"m__daily__{fp}\" ORDER BY 1"));
    let served: Vec<String> = served.into_iter().map(|r| r[0].clone().expect("day")).collect();
    assert_eq!(served, (1..=4).map(|d| format!("2026-01-{d:02}")).filter(|d| EVENTS.contains(d.as_str())).collect::<Vec<_>>());
    assert!(!state.pointers.contains_key("dev"), "a failed apply must not promote");

    p.write("data/switch.csv", "mode\nok\n");
    let v = p.apply("dev");
    assert_eq!(v["intervals"], Value::from(DAYS - 4), "only the missing intervals are computed");
    let mut expected = day_files(DAYS);
    expected.push("manifest.json".into());
    assert_eq!(files(&dir), expected);
    let reference = lake_project("", "");
    reference.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.daily")), reference.rows(&env_view("dev", "m.daily")));
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

/// Runs `apply dev` at debug level with each re-creation of `model`'s version view delayed by
/// `ms`; returns the run and how many times the view was published.
fn apply_with_slow_publish(p: &Project, model: &str, ms: u32) -> (Run, usize) {
    let out = p
        .command(&["apply", "dev", "--yes", "--json"])
        .env("EFMESH_DELAY", format!("lake-publish:{model}={ms}"))
        .env("RUST_LOG", "efmesh=debug")
        .output()
        .expect("spawn efmesh");
    let run = Run::from_output(out, format!("apply dev (publishing {model} slowly)"));
    let published = run.stderr.lines().filter(|l| l.contains("lake view published") && l.contains(&format!("model={model}"))).count();
    (run, published)
}

/// Re-creating a parquet version's view binds every file it lists: a backfill of many batches
/// publishes it for a group of batches at a time (here, with each publish slow, once before the
/// batches and once after the last), and the result is the same as a table's.
#[test]
fn a_lake_backfill_publishes_its_view_once_for_a_group_of_batches() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    p.write("models/m.lua", &models("parquet", "", 1));
    let (run, published) = apply_with_slow_publish(&p, "m.daily", 300);
    let v = run.expect_code(0).json();
    assert_eq!(v["intervals"], Value::from(DAYS), "{v:#}");
    assert_eq!(published, 2, "nine batches: the view is published before them and after the last, not after each:\n{}", run.stderr);
    let dir = version_dir(&p, "lake", &v, "m.daily");
    let mut expected = day_files(DAYS);
    expected.push("manifest.json".into());
    assert_eq!(files(&dir), expected);
    let reference = lake_project("", "");
    reference.write("models/m.lua", &models("", "", 1));
    reference.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.daily")), reference.rows(&env_view("dev", "m.daily")));
    assert_eq!(p.rows(&env_view("dev", "m.totals")), reference.rows(&env_view("dev", "m.totals")));
    let state = p.state_summary();
    let done: usize = state.intervals.iter().filter(|((n, _), _)| n == "m.daily").map(|(_, v)| v.len()).sum();
    assert_eq!(done, DAYS, "every interval done once its file is listed");
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

#[test]
fn a_promotion_under_way_in_a_lake_project_is_not_undone_by_another_command() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    p.apply("dev");
    p.write("models/m.lua", &models("parquet", "HAVING sum(revenue) > 50", 3));
    // A holds the lake's writer lock and stops between its promotion's intent and its view swap.
    let mut a = p.command(&["apply", "dev", "--yes", "--json"]);
    a.env("EFMESH_DELAY", "after-intent=3000").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let a = a.spawn().expect("spawn apply");
    let intents =
        || -> i64 { rusqlite::Connection::open(p.state_path()).and_then(|c| c.query_row("SELECT count(*) FROM promotions", [], |r| r.get(0))).unwrap_or(0) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while intents() == 0 {
        assert!(std::time::Instant::now() < deadline, "the apply never recorded its intent");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Meanwhile another command finds the promotion recorded as under way: its writer holds
    // `lake` (not `env:dev`), so it is live and left alone (nothing undone, no engine needed).
    let plan = p.run(&["plan", "dev", "--json"]);
    plan.expect_code(0);
    assert!(!plan.stderr.contains("undid") && !plan.stderr.contains("interrupted"), "{}", plan.stderr);
    assert_eq!(intents(), 1, "the intent is the live apply's");
    let a = Run::from_output(a.wait_with_output().expect("apply"), "apply dev".into());
    a.expect_code(0);
    // The environment serves what the state says: the new version, nothing left to do.
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
    assert_eq!(intents(), 0);
}

#[test]
fn full_models_get_one_file_set_per_version_and_prod_keeps_the_old_one_until_promoted() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let first = p.apply("dev");
    assert_eq!(p.apply("prod")["built"], serde_json::json!([]));
    let old_rows = p.rows(&env_view("prod", "m.totals"));
    assert_eq!(old_rows.len(), 4);

    p.write("models/m.lua", &models("parquet", "HAVING sum(revenue) > 50", 3));
    let second = p.apply("dev");
    assert_eq!(string_set(&second["built"]), set(&["m.totals"]));
    let (old_dir, new_dir) = (version_dir(&p, "lake", &first, "m.totals"), version_dir(&p, "lake", &second, "m.totals"));
    assert_ne!(old_dir, new_dir);
    assert_eq!(files(&old_dir), vec!["data.parquet", "manifest.json"]);
    assert_eq!(files(&new_dir), vec!["data.parquet", "manifest.json"]);
    assert_eq!(p.rows(&env_view("prod", "m.totals")), old_rows, "prod still serves the old version");
    assert_eq!(p.rows(&env_view("dev", "m.totals")).len(), 3);
    assert_eq!(p.apply("prod")["built"], serde_json::json!([]));
    assert_eq!(p.rows(&env_view("prod", "m.totals")), p.rows(&env_view("dev", "m.totals")));
}

#[test]
fn the_target_is_part_of_the_version() {
    let p = lake_project("", "[lake]\npath = \"lake\"\n");
    let table = p.apply("dev");
    assert!(action(&table, "m.daily")["physical"].as_str().unwrap().starts_with("\"_efmesh\"."));
    p.write("models/m.lua", &models("parquet", "", 3));
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let daily = action(&plan, "m.daily");
    assert_eq!(daily["change"], "breaking", "{daily:#}");
    assert_eq!(daily["explain"]["diverged"], serde_json::json!(["kind"]), "{daily:#}");
    assert!(daily["explain"]["reason"].as_str().unwrap().contains("kind fields"), "{daily:#}");
    assert_ne!(daily["fingerprint"], action(&table, "m.daily")["fingerprint"]);
    let v = p.apply("dev");
    assert!(version_dir(&p, "lake", &v, "m.daily").join("2026-01-01.parquet").exists());
}

#[test]
fn misconfigured_targets_are_load_errors_naming_the_model() {
    // parquet without [lake]
    let p = lake_project("parquet", "");
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("models/m.lua:") && r.stderr.contains("model `m.daily`") && r.stderr.contains("[lake]"), "{}", r.stderr);
    assert!(!p.engine_path().exists() && !p.root().join("lake").exists());

    // A kind the target cannot store.
    let p = lake_project("", "[lake]\npath = \"lake\"\n");
    p.write(
        "models/v.lua",
        r#"define_model { name = "m.v", kind = kind.view(), target = "parquet", schema = { { "x", "integer" } }, query = "SELECT 1 AS x" }
"#,
    );
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains("models/v.lua:1") && r.stderr.contains("model `m.v`") && r.stderr.contains("target `parquet` does not support kind `view`"),
        "{}",
        r.stderr
    );

    // An unknown target, with a suggestion; the same rule in a .sql model.
    p.write(
        "models/v.lua",
        r#"define_model { name = "m.v", kind = kind.full(), target = "parket", schema = { { "x", "integer" } }, query = "SELECT 1 AS x" }
"#,
    );
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("models/v.lua:1") && out.contains("unknown target `parket`") && out.contains("did you mean `parquet`?"), "{out}");
    p.remove("models/v.lua");
    p.write("efmesh.toml", &config("[lake]\npath = \"lake\"\n").replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("models/w.sql", "-- name: m.w\n-- kind: embedded\n-- target: ducklake\n-- schema: x integer\nSELECT 1 AS x\n");
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("models/w.sql:3") && r.stderr.contains("target `ducklake` does not support kind `embedded`"), "{}", r.stderr);

    // Bad [lake] values name the key.
    let p = lake_project("parquet", "[lake]\npath = \"gs://bucket/x\"\n");
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("lake.path") && r.stderr.contains("gs://bucket/x"), "{}", r.stderr);
}

// ---------------------------------------------------------------------------------------------
// S3, against a local moto server

/// Runs efmesh in `p` with the S3 credentials of the moto server in the environment.
fn run_s3(p: &Project, args: &[&str]) -> Run {
    run_s3_with(p, args, &[])
}

/// [`run_s3`] with extra environment variables.
fn run_s3_with(p: &Project, args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = p
        .command(args)
        .envs(env.iter().copied())
        .env("AWS_ACCESS_KEY_ID", crate::s3::KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", crate::s3::SECRET)
        .env_remove("AWS_SESSION_TOKEN")
        .output()
        .expect("spawn efmesh");
    Run::from_output(out, format!("efmesh {}", args.join(" ")))
}

/// Sorted rows of `relation` in `p`'s DuckDB file, read over S3 from the moto server.
fn s3_rows(p: &Project, moto: &crate::s3::Moto, relation: &str) -> Rows {
    use efmesh::engine::Engine;
    let mut db = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
    db.execute("LOAD httpfs").expect("httpfs");
    db.execute(&format!(
        "CREATE TEMPORARY SECRET t (TYPE s3, KEY_ID '{}', SECRET '{}', REGION 'us-east-1', ENDPOINT '{}', URL_STYLE 'path', USE_SSL false)",
        crate::s3::KEY_ID,
        crate::s3::SECRET,
        moto.endpoint()
    ))
    .expect("secret");
    let mut rows = db.query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}"));
    rows.sort();
    rows
}

#[test]
fn s3_lake_round_trip_against_a_local_server() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = format!("[lake]\npath = \"s3://lake/warehouse\"\ns3_endpoint = \"{}\"\ns3_url_style = \"path\"\ns3_use_ssl = false\n", moto.endpoint());
    let p = lake_project("parquet", &lake);
    p.write("efmesh.toml", &config(&lake));
    let r = run_s3(&p, &["--log-level", "debug", "apply", "dev", "--yes", "--json"]);
    r.expect_code(0);
    assert!(!r.stderr.contains(crate::s3::SECRET) && !r.stdout.contains(crate::s3::SECRET), "the secret reached the output");
    let v = r.json();
    assert_eq!(v["intervals"], Value::from(DAYS));

    let fp = |m: &str| action(&v, m)["fingerprint"].as_str().unwrap().to_string();
    let mut expected: Vec<String> = day_files(DAYS).iter().map(|f| format!("warehouse/m__daily/{}/{f}", fp("m.daily"))).collect();
    expected.push(format!("warehouse/m__daily/{}/manifest.json", fp("m.daily")));
    expected.push(format!("warehouse/m__totals/{}/data.parquet", fp("m.totals")));
    expected.push(format!("warehouse/m__totals/{}/manifest.json", fp("m.totals")));
    let store: String = rusqlite::Connection::open(p.state_path()).unwrap().query_row("SELECT store_id FROM meta", [], |r| r.get(0)).unwrap();
    expected.push(format!("warehouse/.efmesh-owner.d/{store}"));
    expected.sort();
    assert_eq!(moto.keys("lake"), expected, "one object per interval, one file set per full version");
    let manifest: Value = serde_json::from_str(&moto.get("lake", &format!("warehouse/m__daily/{}/manifest.json", fp("m.daily")))).unwrap();
    assert_eq!(manifest["files"], serde_json::json!(day_files(DAYS)));
    assert_eq!(manifest["fingerprint"], Value::from(fp("m.daily")));
    assert_eq!(manifest["intervals"].as_array().map(Vec::len), Some(DAYS));

    let reference = lake_project("", "");
    reference.apply("dev");
    for m in ["m.daily", "m.totals"] {
        assert_eq!(s3_rows(&p, &moto, &env_view("dev", m)), reference.rows(&env_view("dev", m)), "`{m}` read from S3");
    }
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
    let again = run_s3(&p, &["apply", "dev", "--yes"]);
    assert!(again.expect_code(0).stdout.contains("nothing to apply"), "{}", again.stdout);
    let prod = run_s3(&p, &["apply", "prod", "--yes", "--json"]);
    assert_eq!(prod.expect_code(0).json()["built"], serde_json::json!([]));
    assert_eq!(s3_rows(&p, &moto, &env_view("prod", "m.totals")), reference.rows(&env_view("dev", "m.totals")));

    // Secrets come from the environment only: never in the state store nor the DuckDB file.
    for f in [p.state_path(), p.engine_path()] {
        let bytes = fs_err::read(&f).unwrap();
        assert!(!bytes.windows(crate::s3::SECRET.len()).any(|w| w == crate::s3::SECRET.as_bytes()), "{} holds the secret", f.display());
    }
    // Without them, apply says which variable is missing, and changes nothing.
    p.write("models/m.lua", &models("parquet", "HAVING count(*) > 1", 3));
    let before = p.state_summary();
    let out = p.command(&["apply", "dev", "--yes"]).env_remove("AWS_SECRET_ACCESS_KEY").env("AWS_ACCESS_KEY_ID", "k").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("AWS_SECRET_ACCESS_KEY"), "{stderr}");
    assert_eq!(p.state_summary(), before);
}

#[test]
fn a_forward_only_column_lands_in_new_files_of_the_kept_directory() {
    let mut p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let first = p.apply("dev");
    let dir = version_dir(&p, "lake", &first, "m.daily");
    let with_n = models("parquet", "", 3)
        .replace(r#"{ "revenue", "bigint" } },"#, r#"{ "revenue", "bigint" }, { "n", "bigint" } },"#)
        .replace("AS revenue\n", "AS revenue, count(*) AS n\n");
    assert_ne!(with_n, models("parquet", "", 3));
    p.write("models/m.lua", &with_n);
    p.write("data/events.csv", &format!("{EVENTS}2026-01-10 10:00:00,south,9\n2026-01-11 11:00:00,south,3\n2026-01-11 12:00:00,south,4\n"));
    p.now = "2026-01-12T01:00:00Z".into();
    let v = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "m.daily"]).expect_code(0).json();
    assert_eq!(action(&v, "m.daily")["change"], "forward-only");
    assert_eq!(version_dir(&p, "lake", &v, "m.daily").parent(), dir.parent());
    let mut expected = day_files(11);
    expected.push("manifest.json".into());
    assert_eq!(files(&dir), expected, "new intervals go to the kept directory, no second file set");
    let cols: Vec<String> = described(&p, &env_view("dev", "m.daily")).into_iter().map(|(c, _)| c).collect();
    assert_eq!(cols, ["day", "region", "revenue", "n"]);
    // History keeps NULL in the new column; recomputed and new days (lookback 1: from the 9th) fill it.
    let rows = p.query(&format!("SELECT strftime(day, '%d'), n FROM {} ORDER BY day, region", env_view("dev", "m.daily")));
    assert_eq!(rows.first().unwrap(), &vec![Some("01".to_string()), None]);
    assert!(rows.iter().all(|r| (r[0].as_deref().unwrap() >= "09") == r[1].is_some()), "{rows:?}");
    assert_eq!(rows[rows.len() - 2..], [vec![Some("10".to_string()), Some("1".to_string())], vec![Some("11".to_string()), Some("2".to_string())]]);
    let manifest: Value = serde_json::from_str(&fs_err::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["schema"].as_array().map(Vec::len), Some(4));
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

/// `raw.src`: 8 rows over [2026-01-01, 2026-01-03); with `x`, a non-breaking change (a column added).
fn shared_view_src(x: bool) -> String {
    let (col, select) = if x { (", x bigint", ", 1 AS x") } else { ("", "") };
    format!(
        "-- name: raw.src\n-- kind: full\n-- schema: ts timestamp, v bigint{col}\n\
         SELECT TIMESTAMP '2026-01-01' + INTERVAL (i) HOUR * 6 AS ts, i AS v{select} FROM range(0, 8) t(i)\n"
    )
}

/// `lk.d`: a time-range parquet model over `raw.src`; with `w`, the column `w` added.
fn shared_view_d(w: bool) -> String {
    let (col, select) = if w { (", w bigint", ", v * 10 AS w") } else { ("", "") };
    format!(
        "-- name: lk.d\n\
         -- kind: incremental_by_time_range(time_column = ts, start = 2026-01-01, end = 2026-01-03, grain = day)\n\
         -- target: parquet\n-- schema: ts timestamp, v bigint{col}\n-- refs: raw.src\n\
         SELECT ts, v{select} FROM @ref(raw.src) WHERE ts >= @start AND ts < @end\n"
    )
}

/// Both environments applied, then `lk.d` given the column `w` in `prod` by a forward-only change
/// (its version keeps the physical lake view of the one `dev` serves): the project as `prod`
/// serves it. Returns the shared physical relation.
fn shared_view_project() -> (Project, String) {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("[lake]\npath = \"lake\"\n").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("models/src.sql", &shared_view_src(false));
    p.write("models/d.sql", &shared_view_d(false));
    p.apply("dev");
    p.apply("prod");
    p.write("models/d.sql", &shared_view_d(true));
    let v = p.run(&["apply", "prod", "--yes", "--json", "--forward-only", "lk.d"]).expect_code(0).json();
    let d = action(&v["plan"], "lk.d");
    assert_eq!(d["change"], "forward-only", "{d:#}");
    let physical = d["physical"].as_str().expect("physical").to_string();
    assert_eq!(p.query("SELECT count(*), count(w) FROM lk.d"), vec![vec![Some("8".to_string()), Some("0".to_string())]]);
    (p, physical)
}

/// The columns of a relation, in order.
fn column_names(p: &Project, relation: &str) -> Vec<String> {
    described(p, relation).into_iter().map(|(c, _)| c).collect()
}

/// After a forward-only column added in `prod`, `prod`'s version keeps the physical lake view of
/// the version `dev` still serves. An apply re-creating that view from the older definition (a
/// non-breaking change of a parent reused in `dev`, the DuckDB file lost and `dev` applied first)
/// anchored it on the older version's columns alone: `prod`'s view, which selects `w`, failed every
/// query (`Binder Error: Referenced column "w" not found`) while `status --check`, `plan`, `run`
/// and `apply` of `prod` said all was well (or `apply prod` failed with the bare binder error).
/// The view now anchors the columns of every version stored in it: `prod` keeps reading `w`, and
/// `dev` its own columns.
#[test]
fn an_older_version_relisting_a_lake_view_keeps_the_columns_of_the_forward_only_version_sharing_it() {
    let (p, physical) = shared_view_project();
    // `dev`'s definition: `lk.d` without `w`, its parent changed non-breakingly (reused in `dev`).
    p.write("models/d.sql", &shared_view_d(false));
    p.write("models/src.sql", &shared_view_src(true));
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    let d = action(&v["plan"], "lk.d");
    assert_eq!((d["change"].as_str(), d["physical"].as_str()), (Some("indirect"), Some(physical.as_str())), "{d:#}");
    assert!(d["reusedFrom"].is_string(), "the physical lake view is reused: {d:#}");
    assert_eq!(column_names(&p, &physical), ["ts", "v", "w"], "the re-listed view keeps `prod`'s column");
    assert_eq!(column_names(&p, &env_view("dev", "lk.d")), ["ts", "v"], "`dev` serves its own columns");
    assert_eq!(p.query("SELECT count(*), count(w) FROM lk.d"), vec![vec![Some("8".to_string()), Some("0".to_string())]]);
    let dir = p.root().join("lake/lk__d").join(physical.rsplit("__").next().unwrap().trim_matches('"'));
    let manifest: Value = serde_json::from_str(&fs_err::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let listed: Vec<&str> = manifest["schema"].as_array().expect("schema").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(listed, ["ts", "v", "w"], "the manifest describes the view's columns");

    // `prod`'s project: nothing to do, healthy, and it says so truthfully.
    p.write("models/d.sql", &shared_view_d(true));
    p.write("models/src.sql", &shared_view_src(false));
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);

    // The DuckDB file lost, `dev` applied first: the lost lake view is re-created from `dev`'s
    // definition, and `prod`'s apply (restoring its views) binds `w`.
    p.write("models/d.sql", &shared_view_d(false));
    p.write("models/src.sql", &shared_view_src(true));
    p.remove("efmesh.duckdb");
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(action(&v["plan"], "lk.d")["repair"]["lakeViewMissing"], true, "{v:#}");
    assert_eq!(column_names(&p, &physical), ["ts", "v", "w"]);
    p.write("models/d.sql", &shared_view_d(true));
    p.write("models/src.sql", &shared_view_src(false));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(p.query("SELECT count(*), count(w) FROM lk.d"), vec![vec![Some("8".to_string()), Some("0".to_string())]]);
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// A lake view anchored on fewer columns than the version an environment serves declares (as an
/// efmesh that anchored a re-list on the re-listing version alone left it: every query of the
/// environment's view fails) is found: `plan` re-lists it (`repair.lakeViewLacks` naming the
/// column), `status --check` exits 1 and `run` exits 2 until `apply` re-creates it with the
/// column, recomputing nothing.
#[test]
fn a_lake_view_lacking_a_column_its_version_declares_is_found_and_relisted() {
    let (p, physical) = shared_view_project();
    let name = physical.rsplit('.').next().unwrap().trim_matches('"').to_string();
    let rows = p.query(&format!("SELECT sql, comment FROM duckdb_views() WHERE schema_name = '_efmesh' AND view_name = '{name}'"));
    let (sql, comment) = (rows[0][0].clone().expect("sql"), rows[0][1].clone().expect("the root comment"));
    // As the older efmesh re-created it (its root comment kept): `w` no longer anchored.
    let narrow = sql.trim_end().trim_end_matches(';').replacen("CREATE VIEW", "CREATE OR REPLACE VIEW", 1).replacen(", CAST(NULL AS BIGINT) AS w", "", 1);
    assert!(sql.contains(", CAST(NULL AS BIGINT) AS w") && !narrow.contains("AS w"), "the view anchored `w`: {sql}");
    p.execute_on_engine(&format!("{narrow};\nCOMMENT ON VIEW {physical} IS '{}'", comment.replace('\'', "''")));
    let error = query_error(&p, "lk.d");
    assert!(error.as_deref().is_some_and(|e| e.contains("\"w\"")), "prod's view no longer binds: {error:?}");

    let plan = p.plan("prod");
    let d = action(&plan, "lk.d");
    assert_eq!(d["repair"]["lakeViewLacks"], serde_json::json!(["w"]), "{d:#}");
    assert_eq!(d["intervals"], 0, "nothing is recomputed: {d:#}");
    let status = p.run(&["status", "prod", "--check"]);
    status.expect_code(1);
    let said = format!("{}{}", status.stdout, status.stderr);
    assert!(said.contains("`lk.d` (lake view lacks the declared column(s) `w`)"), "{said}");
    let run = p.run(&["run", "prod"]);
    run.expect_code(2);
    assert!(run.stderr.contains("lk.d: lake view lacks the declared column(s) `w`"), "{}", run.stderr);

    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(p.query("SELECT count(*), count(w) FROM lk.d"), vec![vec![Some("8".to_string()), Some("0".to_string())]]);
    assert_eq!(column_names(&p, &physical), ["ts", "v", "w"]);
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

// ---------------------------------------------------------------------------------------------
// kill -9

/// Days of the slow lake model: [2026-01-01, 2026-01-21).
const SLOW_LAKE_DAYS: usize = 20;

/// A parquet-lake time-range model whose every daily batch scans millions of rows on one thread,
/// one day per batch, so a `kill -9` lands mid-backfill.
fn slow_lake_project(target: &str) -> Project {
    let mut p = Project::new();
    p.now = "2026-01-21T00:00:00Z".to_string();
    p.write("efmesh.toml", &config("[lake]\npath = \"lake\"\n").replace("[engine]\n", "[engine]\nthreads = 1\n"));
    let target = if target.is_empty() { String::new() } else { format!("target = \"{target}\",") };
    p.write(
        "models/k.lua",
        &format!(
            r#"define_model {{
  name = "k.slow",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  {target}
  schema = {{ {{ "day", "timestamp" }}, {{ "s", "bigint" }}, {{ "n", "bigint" }} }},
  query = [[
    SELECT CAST(@start AS TIMESTAMP) AS day,
           CAST(sum((range * 7 + CAST(epoch(CAST(@start AS TIMESTAMP)) AS BIGINT)) % 1009) AS BIGINT) AS s,
           count(*) AS n
    FROM range(8000000)
  ]],
}}
"#
        ),
    );
    p
}

/// Done day starts of `k.slow` as ISO dates (`2026-01-03`), from the ledger.
fn done_days(p: &Project) -> BTreeSet<String> {
    if !p.state_path().exists() {
        return BTreeSet::new();
    }
    match efmesh::state::SqliteStore::open(&p.state_path()).and_then(|s| s.all_done_intervals()) {
        Ok(m) => m
            .iter()
            .filter(|((name, _), _)| name == "k.slow")
            .flat_map(|(_, v)| v.iter().map(|t| efmesh::core::interval::to_iso(*t)[..10].to_string()))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

#[test]
fn a_killed_lake_backfill_marks_done_only_complete_files_and_converges() {
    let reference = std::thread::spawn(|| {
        let r = slow_lake_project("");
        r.apply("dev");
        r
    });
    let p = slow_lake_project("parquet");
    let lake = p.root().join("lake/k__slow");
    let mut done = 0;
    for step in 0..2 {
        let mut child = p.spawn(&["apply", "dev", "--yes"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while done_days(&p).len() < done + 2 {
            assert!(child.try_wait().unwrap().is_none(), "step {step}: apply finished before it could be killed");
            assert!(std::time::Instant::now() < deadline, "step {step}: no progress within 60 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.kill().expect("SIGKILL");
        assert!(child.wait().unwrap().code().is_none(), "the process was not killed");
        let days = done_days(&p);
        done = days.len();
        assert!(done < SLOW_LAKE_DAYS, "step {step}: everything was done before the kill");
        // Every done interval has its complete file at its final name.
        let version = fs_err::read_dir(&lake).unwrap().next().unwrap().unwrap().path();
        let on_disk: BTreeSet<String> = files(&version).into_iter().filter(|f| f.ends_with(".parquet")).map(|f| f[..10].to_string()).collect();
        for day in &days {
            assert!(on_disk.contains(day), "step {step}: {day} is done but has no file: {on_disk:?}");
            let rows = p.query(&format!("SELECT count(*) FROM read_parquet('{}/{day}.parquet')", version.display()));
            assert_eq!(rows[0][0].as_deref(), Some("1"), "step {step}: {day}'s file is incomplete");
        }
        assert!(!p.state_summary().pointers.contains_key("dev"), "an interrupted apply promoted `dev`");
    }
    let resumed = p.apply("dev");
    assert_eq!(resumed["intervals"], Value::from(SLOW_LAKE_DAYS - done), "only the days the ledger lacks: {resumed:#}");
    let reference = reference.join().expect("reference apply");
    assert_eq!(p.rows(&env_view("dev", "k.slow")), reference.rows(&env_view("dev", "k.slow")), "lake after kill + re-apply");
    let version = fs_err::read_dir(&lake).unwrap().next().unwrap().unwrap().path();
    let parquet: Vec<String> = files(&version).into_iter().filter(|f| f.ends_with(".parquet")).collect();
    assert_eq!(parquet, day_files(SLOW_LAKE_DAYS), "exactly one file per day");
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

#[test]
fn a_lost_duckdb_file_relists_intact_lake_files_and_recomputes_only_missing_ones() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    let rows = p.rows(&env_view("dev", "m.daily"));
    let totals = p.rows(&env_view("dev", "m.totals"));
    let daily = version_dir(&p, "lake", &v, "m.daily");
    let kept = daily.join("2026-01-05.parquet");
    let stamp = std::fs::metadata(&kept).unwrap().modified().unwrap();
    std::fs::remove_file(daily.join("2026-01-02.parquet")).unwrap();
    p.remove("efmesh.duckdb");
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));

    let plan = p.plan("dev");
    let a = action(&plan, "m.daily");
    assert_eq!(a["repair"]["lakeViewMissing"], true, "{a:#}");
    assert!(a["repair"].get("physicalMissing").is_none(), "{a:#}");
    assert_eq!(a["intervals"], 1, "only the interval whose file is missing is recomputed: {a:#}");
    let t = action(&plan, "m.totals");
    assert_eq!(t["repair"]["lakeViewMissing"], true, "{t:#}");
    assert!(t.get("build").is_none_or(|b| b == false), "the full version's file is intact: {t:#}");

    let applied = p.run(&["apply", "dev", "--yes"]);
    applied.expect_code(0);
    assert_eq!(std::fs::metadata(&kept).unwrap().modified().unwrap(), stamp, "intact files are not rewritten");
    assert!(daily.join("2026-01-02.parquet").exists());
    assert_eq!(p.rows(&env_view("dev", "m.daily")), rows);
    assert_eq!(p.rows(&env_view("dev", "m.totals")), totals);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

#[test]
fn lake_files_deleted_or_added_by_hand_are_found_and_never_served() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    let rows = p.rows(&env_view("dev", "m.daily"));
    let totals = p.rows(&env_view("dev", "m.totals"));
    let daily = version_dir(&p, "lake", &v, "m.daily");
    // Found clean first: what a clean check records must not hide what is deleted after it.
    p.run(&["status", "dev", "--check"]).expect_code(0);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    // A done day's file deleted; a copy and a file named like a never-computed day left beside.
    std::fs::remove_file(daily.join("2026-01-02.parquet")).unwrap();
    std::fs::copy(daily.join("2026-01-01.parquet"), daily.join("copy-of-01.parquet")).unwrap();
    std::fs::copy(daily.join("2026-01-01.parquet"), daily.join("2026-01-20.parquet")).unwrap();

    let status = p.run(&["status", "dev", "--check"]);
    status.expect_code(1);
    assert!(status.stdout.contains("`m.daily`") || status.stderr.contains("`m.daily`"), "{}{}", status.stdout, status.stderr);
    let plan = p.plan("dev");
    let a = action(&plan, "m.daily");
    assert_eq!(a["repair"]["lakeFilesMissing"], true, "{a:#}");
    assert_eq!(a["intervals"], 1, "only the day whose file is missing is recomputed: {a:#}");
    // `run` refuses until an apply repairs it (nothing is served from a directory listing).
    let run = p.run(&["run", "dev"]);
    run.expect_code(2);
    assert!(run.stderr.contains("m.daily: lake files missing (`apply` repairs it)"), "{}", run.stderr);

    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert!(daily.join("2026-01-02.parquet").exists());
    assert_eq!(p.rows(&env_view("dev", "m.daily")), rows, "the deleted day is back, the stray files are not served");
    assert_eq!(p.rows(&env_view("dev", "m.totals")), totals);
    let manifest: Value = serde_json::from_str(&fs_err::read_to_string(daily.join("manifest.json")).unwrap()).unwrap();
    let listed: Vec<String> = manifest["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
    assert_eq!(listed, day_files(DAYS), "the manifest lists the done intervals' files only");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// `status --check` with an unapplied edit checks the lake files of the versions the
/// environment serves, not only the project's (which the plan checks): a done day's file and a
/// `full` version's `data.parquet` deleted by hand make it unhealthy, each named with its model.
#[test]
fn status_checks_the_lake_files_of_the_served_version_of_a_model_edited_but_not_applied() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    let daily = version_dir(&p, "lake", &v, "m.daily");
    let totals = version_dir(&p, "lake", &v, "m.totals");
    let fingerprint = action(&v, "m.daily")["fingerprint"].as_str().expect("fingerprint").to_string();
    // An unapplied edit of `m.daily` (and so of `m.totals` below it): the project's versions are
    // other ones, whose directories do not exist yet.
    p.write("models/m.lua", &models("parquet", "", 3).replace("WHERE event_at >= @start", "WHERE amount >= 0 AND event_at >= @start"));
    let plan = p.plan("dev");
    assert_ne!(action(&plan, "m.daily")["change"], "unchanged", "{plan:#}");
    assert_ne!(action(&plan, "m.daily")["fingerprint"], fingerprint.as_str(), "{plan:#}");
    p.run(&["status", "dev", "--check"]).expect_code(0);

    std::fs::remove_file(daily.join("2026-01-02.parquet")).unwrap();
    let text = p.run(&["status", "dev", "--check"]);
    text.expect_code(1);
    let line = text.stdout.lines().find(|l| l.contains("⚠ m.daily  lake file ")).unwrap_or_else(|| panic!("{}", text.stdout));
    assert!(line.contains("2026-01-02.parquet missing (the version `dev` serves; the project defines another version)"), "{line}");
    assert!(text.stdout.contains("health: unhealthy ("), "{}", text.stdout);
    let json = p.run(&["status", "dev", "--check", "--json"]);
    let status = json.expect_code(1).json();
    let lost = status["lostRelations"].as_array().expect("lostRelations");
    let daily_file = format!("m__daily/{fingerprint}/2026-01-02.parquet");
    assert!(
        lost.iter().any(|l| l["model"] == "m.daily"
            && l["fingerprint"] == fingerprint.as_str()
            && l["lack"] == "lakeFileMissing"
            && l["removed"] == false
            && l["relation"].as_str().is_some_and(|r| r.replace('\\', "/").ends_with(&daily_file))),
        "{status:#}"
    );
    assert_eq!(lost.len(), 1, "only the deleted file: {status:#}");

    // The served `full` version's file: `m.totals` is served at another version than the
    // project's too.
    assert_ne!(action(&plan, "m.totals")["change"], "unchanged", "{plan:#}");
    {
        std::fs::remove_file(totals.join("data.parquet")).unwrap();
        let status = p.run(&["status", "dev", "--check", "--json"]).expect_code(1).json();
        let lost = status["lostRelations"].as_array().expect("lostRelations");
        assert!(
            lost.iter().any(|l| l["model"] == "m.totals"
                && l["lack"] == "lakeFileMissing"
                && l["relation"].as_str().is_some_and(|r| r.replace('\\', "/").ends_with("/data.parquet"))),
            "{status:#}"
        );
    }

    // Applying the edit serves the project's versions: healthy again.
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

#[test]
fn a_lost_lake_directory_is_recomputed_and_a_failed_repair_serves_no_fewer_files() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    let rows = p.rows(&env_view("dev", "m.daily"));
    let totals = p.rows(&env_view("dev", "m.totals"));
    let daily = version_dir(&p, "lake", &v, "m.daily");
    let total = version_dir(&p, "lake", &v, "m.totals");
    fs_err::remove_dir_all(&daily).unwrap();
    fs_err::remove_dir_all(&total).unwrap();

    let plan = p.plan("dev");
    let a = action(&plan, "m.daily");
    assert_eq!(a["repair"]["lakeFilesMissing"], true, "{a:#}");
    assert_eq!(a["intervals"], DAYS, "every done day lost its file: {a:#}");
    let t = action(&plan, "m.totals");
    assert_eq!(t["repair"]["lakeFilesMissing"], true, "{t:#}");
    assert_eq!(t["build"], true, "the full version is rebuilt: {t:#}");

    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(files(&daily).into_iter().filter(|f| f.ends_with(".parquet")).collect::<Vec<_>>(), day_files(DAYS));
    assert!(total.join("data.parquet").exists() && total.join("manifest.json").exists());
    assert_eq!(p.rows(&env_view("dev", "m.daily")), rows);
    assert_eq!(p.rows(&env_view("dev", "m.totals")), totals);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

#[test]
fn the_janitor_deletes_superseded_and_orphan_s3_version_directories_and_keeps_served_ones() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = format!("[lake]\npath = \"s3://lake/warehouse\"\ns3_endpoint = \"{}\"\ns3_url_style = \"path\"\ns3_use_ssl = false\n", moto.endpoint());
    let mut p = lake_project("parquet", &lake);
    p.write("efmesh.toml", &config(&lake));
    let one = run_s3(&p, &["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    p.write("models/m.lua", &models("parquet", "HAVING count(*) > 1", 3));
    let two = run_s3(&p, &["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    let fp = |v: &Value, m: &str| action(v, m)["fingerprint"].as_str().unwrap().to_string();
    assert_ne!(fp(&one, "m.totals"), fp(&two, "m.totals"));
    let old = format!("warehouse/m__totals/{}/", fp(&one, "m.totals"));
    let stray = format!("warehouse/m__totals/{}/", "e".repeat(64));
    moto.put("lake", &format!("{stray}data.parquet"), "not parquet");
    // A sibling of the collected prefix `<fp>/`: `<fp>x/` is not under it and must survive.
    let sibling = format!("warehouse/m__totals/{}x/data.parquet", fp(&one, "m.totals"));
    moto.put("lake", &sibling, "not ours to delete");
    let keys = moto.keys("lake");
    assert!(keys.iter().any(|k| k.starts_with(&old)), "{keys:?}");
    let markers: Vec<String> = keys.iter().filter(|k| k.starts_with("warehouse/.efmesh-owner.d/")).cloned().collect();
    assert_eq!(markers.len(), 1, "the lake's owner marker: {keys:?}");
    p.now = "2099-01-01T00:00:00Z".to_string();
    // At trace level too, no pre-signed URL (its signature) reaches the logs.
    let r = run_s3_with(&p, &["janitor", "--ttl", "0", "--json"], &[("RUST_LOG", "trace")]);
    let v = r.expect_code(0).json();
    assert!(!r.stderr.contains(crate::s3::SECRET) && !r.stdout.contains(crate::s3::SECRET), "the secret reached the output");
    assert!(!r.stderr.contains("X-Amz-Signature") && !r.stdout.contains("X-Amz-Signature"), "a signed URL reached the logs");
    assert_eq!(v["dropped"].as_array().map(Vec::len), Some(1), "{v:#}");
    assert_eq!(v["dropped"][0]["lakeDir"], Value::from(format!("s3://lake/{}", old.trim_end_matches('/'))), "{v:#}");
    assert_eq!(v["orphans"].as_array().map(Vec::len), Some(1), "{v:#}");
    let after = moto.keys("lake");
    let expected: Vec<String> = keys.iter().filter(|k| !k.starts_with(&old) && !k.starts_with(&stray)).cloned().collect();
    assert_eq!(after, expected, "nothing left under the collected prefixes, every other object kept");
    assert!(after.contains(&sibling), "the sibling prefix `<fp>x/` survives: {after:?}");
    assert!(after.iter().any(|k| k.starts_with(&format!("warehouse/m__totals/{}/", fp(&two, "m.totals")))));
    assert!(after.iter().any(|k| k.starts_with(&format!("warehouse/m__daily/{}/", fp(&two, "m.daily")))));
    p.now = LAKE_NOW.to_string();
    let reference = lake_project("", "");
    reference.write("models/m.lua", &models("", "HAVING count(*) > 1", 3));
    reference.apply("dev");
    for m in ["m.daily", "m.totals"] {
        assert_eq!(s3_rows(&p, &moto, &env_view("dev", m)), reference.rows(&env_view("dev", m)), "`{m}` still served from S3");
    }
}

#[test]
fn an_s3_listing_failure_fails_the_janitor_but_the_engines_orphans_are_still_claimed() {
    let moto = crate::s3::Moto::start();
    // The bucket does not exist: every listing of the lake fails.
    let lake = format!("[lake]\npath = \"s3://missing/warehouse\"\ns3_endpoint = \"{}\"\ns3_url_style = \"path\"\ns3_use_ssl = false\n", moto.endpoint());
    let mut p = lake_project("", &lake);
    run_s3(&p, &["apply", "dev", "--yes", "--json"]).expect_code(0);
    let orphan = format!("s__gone__{}", "c".repeat(64));
    p.query(&format!("CREATE TABLE \"_efmesh\".\"{orphan}\" AS SELECT 1 AS x"));
    p.now = "2099-01-01T00:00:00Z".to_string();
    let r = run_s3(&p, &["janitor", "--ttl", "0", "--json"]);
    let v = r.expect_code(1).json();
    let failed = v["failed"].as_array().unwrap();
    assert!(failed.iter().any(|f| f["physical"] == "s3://missing/warehouse"), "the lake's listing failure is reported: {v:#}");
    // The engine's orphan is still claimed (the run went on), but its drop first clears its lake
    // prefix, which cannot be listed: it stays claimed for the next janitor, nothing lost.
    let physical = format!("\"_efmesh\".\"{orphan}\"");
    assert!(failed.iter().any(|f| f["physical"] == physical.as_str()), "the orphan was claimed, its drop retried later: {v:#}");
    assert!(v["orphans"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(p.physical_tables().contains(&orphan), "kept until its lake prefix can be checked");
}

/// DuckDB writes `hugeint` to parquet as `DOUBLE` (digits past the 53rd bit lost): declared on a
/// parquet model, a load error naming the column. And each column is written cast to its
/// declared type, as a table target's insert does: a `sum()` (a `hugeint` in DuckDB) declared
/// `bigint` is served as `BIGINT`, its value exact.
#[test]
fn parquet_columns_hold_their_declared_types_and_hugeint_is_refused() {
    let p = lake_project("", "[lake]\npath = \"lake\"\n");
    p.write(
        "models/h.lua",
        r#"define_model { name = "m.h", kind = kind.full(), target = "parquet", schema = { { "h", "hugeint" } }, query = "SELECT CAST(9007199254740993 AS hugeint) AS h" }
"#,
    );
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("models/h.lua:1") && r.stderr.contains("column `h` is declared `hugeint`") && r.stderr.contains("decimal(38,0)"), "{}", r.stderr);
    p.write("models/h.lua", &p.read("models/h.lua").replace("{ \"h\", \"hugeint\" }", "{ \"h\", \"struct(a uhugeint[])\" }"));
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("column `h` is declared `struct(a uhugeint[])`"), "{}", r.stderr);
    p.write(
        "models/h.lua",
        r#"define_model { name = "m.h", kind = kind.full(), target = "parquet", schema = { { "s", "bigint" }, { "d", "decimal(38,0)" } }, query = "SELECT sum(x) AS s, CAST(9007199254740993 AS decimal(38,0)) AS d FROM (VALUES (9007199254740992), (1)) t(x)" }
"#,
    );
    p.apply("dev");
    assert_eq!(described(&p, "dev__m.h"), vec![("s".to_string(), "BIGINT".to_string()), ("d".to_string(), "DECIMAL(38,0)".to_string())]);
    assert_eq!(
        p.query("SELECT CAST(s AS VARCHAR), CAST(d AS VARCHAR) FROM dev__m.h"),
        vec![vec![Some("9007199254740993".to_string()), Some("9007199254740993".to_string())]]
    );
}

/// Events of [`declared_types_project`]: the second 0.4 s before midnight, which `timestamp_s`
/// rounds to the next day's midnight.
const LATE_EVENTS: &str = "ts,v\n2026-01-01 10:00:00,1\n2026-01-01 23:59:59.6,2\n2026-01-02 12:00:00,3\n";

/// A project whose parquet model `m.lk` (models/m.lua:2) declares the columns `schema` over
/// `SELECT ts AS t, <v> AS v` of [`LATE_EVENTS`] (`ts` a `TIMESTAMP`), `kind` its kind's
/// options; two complete days, [2026-01-01, 2026-01-03).
fn declared_types_project(kind: &str, schema: &str, v: &str) -> Project {
    let mut p = Project::new();
    p.now = "2026-01-03T00:00:00Z".into();
    p.write("efmesh.toml", &config("[lake]\npath = \"lake\"\n"));
    p.write("data/ev.csv", LATE_EVENTS);
    p.write(
        "models/m.lua",
        &format!(
            r#"local ev = define_model {{ name = "raw.ev", kind = kind.external {{ path = "data/ev.csv" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "bigint" }} }} }}
define_model {{
  name = "m.lk", kind = {kind}, target = "parquet",
  schema = {{ {schema} }},
  query = "SELECT ts AS t, {v} AS v FROM " .. ref(ev) .. " WHERE ts >= @start AND ts < @end",
}}
"#
        ),
    );
    p
}

/// A time-range kind over `t`, daily, `batch` intervals per batch.
fn daily_on_t(batch: u32) -> String {
    format!(r#"kind.incremental_by_time_range {{ time_column = "t", start = "2026-01-01", grain = "day", batch_size = {batch} }}"#)
}

/// A failed apply of [`declared_types_project`] wrote nothing: no interval done, no version
/// directory in the lake, no environment.
#[track_caller]
fn nothing_written(p: &Project, what: &str) {
    let state = p.state_summary();
    assert!(state.intervals.iter().all(|((name, _), done)| name != "m.lk" || done.is_empty()), "{what}: {:?}", state.intervals);
    assert!(!p.root().join("lake/m__lk").exists(), "{what}: the lake holds a directory of `m.lk`");
    assert!(!state.pointers.contains_key("prod"), "{what}: a failed apply must not promote");
}

/// The query returns the time column as `TIMESTAMP`, the model declares `timestamp_s`: the
/// batch kept the row of 23:59:59.6 by the value the query returns (in 2026-01-01), each day's
/// file was cut by the cast one (2026-01-02 00:00:00). With one day per batch the row was in no
/// file, with two it was served on 2026-01-02 (and a restate of that day lost it), both days
/// done either way. Refused now before anything is written, as the table target refuses a
/// value its stored type would change; declared as the query returns it, the row stays on its
/// day.
#[test]
fn a_time_value_the_declared_type_would_move_past_its_interval_is_refused_before_the_lake_is_written() {
    for batch in [1, 2] {
        let p = declared_types_project(&daily_on_t(batch), r#"{ "t", "timestamp_s" }, { "v", "bigint" }"#, "v");
        let r = p.run(&["apply", "prod", "--yes"]);
        r.expect_code(1);
        assert!(
            r.stderr.contains("models/m.lua:2")
                && r.stderr.contains("model `m.lk`")
                && r.stderr.contains(
                    "column `t`: the query returns `TIMESTAMP` but the model declares `TIMESTAMP_S`, the type its lake files store, which would change 1 of its values in [2026-01-01T00:00:00.000Z, "
                )
                && r.stderr.contains("(e.g. 2026-01-01 23:59:59.6 → 2026-01-02 00:00:00)")
                && r.stderr.contains("puts its row in the next interval's file, or in none")
                && r.stderr.contains("no batch of this model was written"),
            "batch_size {batch}: {}",
            r.stderr
        );
        nothing_written(&p, &format!("batch_size {batch}"));
    }
    // Declared as the query returns it: every row in the file of the day it falls on.
    let p = declared_types_project(&daily_on_t(1), r#"{ "t", "timestamp" }, { "v", "bigint" }"#, "v");
    let v = p.apply("prod");
    assert_eq!(v["intervals"], Value::from(2));
    let served = p.query(&format!("SELECT CAST(t AS VARCHAR), CAST(v AS VARCHAR) FROM {} ORDER BY v", env_view("prod", "m.lk")));
    let served: Vec<(String, String)> = served.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap())).collect();
    assert_eq!(
        served,
        vec![("2026-01-01 10:00:00".into(), "1".into()), ("2026-01-01 23:59:59.6".into(), "2".into()), ("2026-01-02 12:00:00".into(), "3".into())]
    );
    let first_day = version_dir(&p, "lake", &v, "m.lk").join("2026-01-01.parquet");
    let in_file = p.query(&format!("SELECT CAST(v AS VARCHAR) FROM read_parquet('{}') ORDER BY v", first_day.display()));
    assert_eq!(in_file, vec![vec![Some("1".to_string())], vec![Some("2".to_string())]], "the late row is in its own day's file");
}

/// A column declared `integer` over a query returning `DOUBLE` halves: the files stored 0.5 as
/// 0 and 1.5 as 2, served silently (a table storing `INTEGER` refuses them). Refused now, for a
/// time-range model (in the batch holding such a value) and a `full` one, before anything is
/// written; values the declared type holds go in, the types still differing.
#[test]
fn a_value_the_declared_type_would_round_is_refused_before_the_lake_is_written() {
    let schema = r#"{ "t", "timestamp" }, { "v", "integer" }"#;
    let p = declared_types_project(&daily_on_t(1), schema, "CAST(v AS DOUBLE) / 2");
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains("models/m.lua:2")
            && r.stderr.contains(
                "column `v`: the query returns `DOUBLE` but the model declares `INTEGER`, the type its lake files store, which would change 1 of its values in [2026-01-01T00:00:00.000Z, 2026-01-02T00:00:00.000Z) (e.g. 0.5 → 0)"
            )
            && r.stderr.contains("no batch of this model was written")
            && r.stderr.contains("hint: cast the column in the query to `INTEGER`"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("next interval's file"), "not the time column: {}", r.stderr);
    nothing_written(&p, "time range");

    // A `full` model: the whole relation (0.5 and 1.5).
    let p = declared_types_project("kind.full()", schema, "CAST(v AS DOUBLE) / 2");
    p.write("models/m.lua", &p.read("models/m.lua").replace(" WHERE ts >= @start AND ts < @end", ""));
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains("models/m.lua:2")
            && r.stderr.contains(
                "column `v`: the query returns `DOUBLE` but the model declares `INTEGER`, the type its lake files store, which would change 2 of its values (e.g. "
            )
            && r.stderr.contains("nothing was written"),
        "{}",
        r.stderr
    );
    nothing_written(&p, "full");

    // Values an `INTEGER` holds as they are go in.
    p.write("models/m.lua", &p.read("models/m.lua").replace("CAST(v AS DOUBLE) / 2", "CAST(v AS DOUBLE) * 2"));
    p.apply("prod");
    assert_eq!(described(&p, &env_view("prod", "m.lk")), vec![("t".to_string(), "TIMESTAMP".to_string()), ("v".to_string(), "INTEGER".to_string())]);
    let served = p.query(&format!("SELECT CAST(v AS VARCHAR) FROM {} ORDER BY v", env_view("prod", "m.lk")));
    assert_eq!(served, vec![vec![Some("2".to_string())], vec![Some("4".to_string())], vec![Some("6".to_string())]]);
}

/// A model with several columns its declared types may change (a `sum()` declared `bigint`, a
/// `count(*)` declared `integer`, a `sum()` of a decimal declared `decimal(18,2)`) re-ran its
/// whole query once per such column and batch to check them: three such columns over 30 daily
/// batches took 2.9 s instead of 1.3 s. Every such column of a batch is now counted in one run of
/// the query; a refusal still names the first column, in the query's order, whose values the
/// declared type would change, with its example, and writes nothing.
#[test]
fn the_columns_a_declared_type_may_change_are_checked_in_one_run_of_the_query_per_batch() {
    let schema = r#"{ "t", "timestamp" }, { "w", "integer" }, { "v", "integer" }"#;
    // The statements checking values: one per batch (two days, one per batch), not one per
    // batch and column.
    let checks = |r: &Run| r.stderr.lines().filter(|l| l.contains("msg=query") && l.contains("IS DISTINCT FROM")).count();
    let p = declared_types_project(&daily_on_t(1), schema, "CAST(v AS DOUBLE) * 2 AS w, CAST(v AS DOUBLE) * 3");
    let r = p.run(&["--log-level", "debug", "apply", "prod", "--yes"]);
    r.expect_code(0);
    assert_eq!(checks(&r), 2, "one check per batch for both columns: {}", r.stderr);
    let served = p.query(&format!("SELECT CAST(w AS VARCHAR), CAST(v AS VARCHAR) FROM {} ORDER BY v", env_view("prod", "m.lk")));
    let served: Vec<(String, String)> = served.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap())).collect();
    assert_eq!(served, vec![("2".into(), "3".into()), ("4".into(), "6".into()), ("6".into(), "9".into())]);

    // The second column rounds 0.5 on the first day, the first holds: the second is named.
    let p = declared_types_project(&daily_on_t(1), schema, "CAST(v AS DOUBLE) * 2 AS w, CAST(v AS DOUBLE) / 2");
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    let named = "column `v`: the query returns `DOUBLE` but the model declares `INTEGER`, the type its lake files store, which would change 1 of its values in [2026-01-01T00:00:00.000Z, 2026-01-02T00:00:00.000Z) (e.g. 0.5 → 0)";
    assert!(r.stderr.contains(named) && !r.stderr.contains("column `w`"), "{}", r.stderr);
    nothing_written(&p, "the second column");

    // Both round: the first in the query's order is named.
    let p = declared_types_project(&daily_on_t(1), schema, "CAST(v AS DOUBLE) / 4 AS w, CAST(v AS DOUBLE) / 2");
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    let named = "column `w`: the query returns `DOUBLE` but the model declares `INTEGER`, the type its lake files store, which would change 2 of its values in [2026-01-01T00:00:00.000Z, 2026-01-02T00:00:00.000Z) (e.g. ";
    assert!(r.stderr.contains(named) && !r.stderr.contains("column `v`"), "{}", r.stderr);
    nothing_written(&p, "both columns");
}

/// A parquet model whose lake directory `<schema>__<table>` is longer than a file system keeps
/// (255 bytes) passed `check` and `plan`, and the first apply failed creating the directory with
/// the OS's raw "File name too long": now `check` and `plan` refuse it at its file:line, naming
/// the model and the limit, before anything is written; the same name on target `table` applies.
#[test]
fn a_parquet_model_named_too_long_for_the_lake_is_a_load_error() {
    let p = lake_project("", "[lake]\npath = \"lake\"\n");
    let table = "t".repeat(253);
    let model = |target: &str| {
        format!(
            "-- a long name\ndefine_model {{ name = \"m.{table}\", kind = kind.full(), target = \"{target}\", schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT 1 AS x\" }}\n"
        )
    };
    p.write("models/long.lua", &model("parquet"));
    for args in [&["check"][..], &["plan", "dev"], &["apply", "dev", "--yes"]] {
        let r = p.run(args);
        r.expect_code(1);
        let out = format!("{}{}", r.stdout, r.stderr);
        assert!(out.contains("models/long.lua:2") && out.contains(&format!("model `m.{table}`")), "{args:?}: {out}");
        assert!(out.contains("256 bytes long, and file systems keep names of at most 255 bytes"), "{args:?}: {out}");
    }
    assert!(!p.root().join("lake").exists(), "nothing was written to the lake");
    p.write("models/long.lua", &model("table"));
    p.apply("dev");
}

/// A restated day not recomputed keeps serving its old file, as a table keeps its old rows — also
/// once `start` moved past it (no run recomputes it) and a later run re-listed the view.
#[test]
fn a_restated_day_left_outside_the_bounds_keeps_its_old_rows_as_a_table_does() {
    let mut p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    p.apply("prod");
    let before: Vec<_> = p.rows("m.daily").into_iter().filter(|r| r[0].as_deref().is_some_and(|d| d.starts_with("2026-01-01"))).collect();
    assert!(!before.is_empty());
    p.run(&["restate", "prod", "--model", "m.daily", "--from", "2026-01-01", "--to", "2026-01-03"]).expect_code(0);
    p.write("models/m.lua", &models("parquet", "", 3).replace("start = \"2026-01-01\"", "start = \"2026-01-03\""));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    p.now = "2026-01-11T06:00:00Z".to_string();
    p.run(&["run", "prod"]).expect_code(0);
    let after: Vec<_> = p.rows("m.daily").into_iter().filter(|r| r[0].as_deref().is_some_and(|d| d.starts_with("2026-01-01"))).collect();
    assert_eq!(after, before);
}

/// An S3 lake on the moto server, `[lake]` section of `lake_project`.
fn s3_lake(moto: &crate::s3::Moto) -> String {
    format!("[lake]\npath = \"s3://lake/warehouse\"\ns3_endpoint = \"{}\"\ns3_url_style = \"path\"\ns3_use_ssl = false\n", moto.endpoint())
}

/// A `full` version whose `data.parquet` was deleted on S3 by hand, then reused by a non-breaking
/// edit of its parent: the apply re-lists it and fails naming the model and the object, before
/// the view is touched and without promoting — it never serves the typed empty relation. The
/// hint's remedy (an edit of the model: a new version is built) serves the right rows again.
#[test]
fn a_reused_s3_full_version_whose_object_was_deleted_fails_the_apply_and_is_never_served_empty() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = s3_lake(&moto);
    let p = lake_project("parquet", &lake);
    p.write("efmesh.toml", &config(&lake));
    let first = run_s3(&p, &["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    let old_fp = action(&first, "m.totals")["fingerprint"].as_str().unwrap().to_string();
    assert_eq!(s3_rows(&p, &moto, &env_view("prod", "m.totals")).len(), 4);
    let key = format!("warehouse/m__totals/{old_fp}/data.parquet");
    assert!(moto.keys("lake").contains(&key), "{:?}", moto.keys("lake"));
    moto.delete("lake", &key);

    // A non-breaking edit of the parent (an added column): `m.totals` reuses its old table.
    let with_n = |target: &str, extra: &str| {
        models(target, extra, 3)
            .replace(r#"{ "revenue", "bigint" } },"#, r#"{ "revenue", "bigint" }, { "n", "bigint" } },"#)
            .replace("AS revenue\n", "AS revenue, count(*) AS n\n")
    };
    assert_ne!(with_n("parquet", ""), models("parquet", "", 3));
    p.write("models/m.lua", &with_n("parquet", ""));
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "m.totals")["reusedFrom"], Value::from(old_fp.clone()), "{plan:#}");
    let before = p.state_summary();
    let r = run_s3(&p, &["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("`m.totals`"), "names the model: {}", r.stderr);
    assert!(r.stderr.contains(&format!("s3://lake/{key}")) && r.stderr.contains("is missing"), "names the object: {}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    assert_eq!(p.state_summary().pointers, before.pointers, "nothing promoted");
    assert!(!moto.keys("lake").contains(&key), "no object written in its place");

    // The hint's remedy: an edit of the model builds a new version, served with its rows.
    p.write("models/m.lua", &with_n("parquet", "HAVING count(*) > 0"));
    run_s3(&p, &["apply", "prod", "--yes"]).expect_code(0);
    let reference = lake_project("", "");
    reference.write("models/m.lua", &with_n("", "HAVING count(*) > 0"));
    reference.apply("prod");
    let served = s3_rows(&p, &moto, &env_view("prod", "m.totals"));
    assert_eq!(served, reference.rows(&env_view("prod", "m.totals")));
    assert_eq!(served.len(), 4);
}

/// A done interval's S3 object of the version `dev` serves deleted by hand, then `apply prod`
/// promotes that version (a view swap, nothing to build): it fails naming the model, the
/// interval, the object and the restate command in `dev` (never the engine's raw 404), and
/// promotes nothing. The hint's remedy works: restated and run in `dev`, `apply prod` promotes
/// the version and serves its rows.
#[test]
fn promoting_a_version_whose_s3_object_was_deleted_fails_naming_it_and_the_restate_in_its_environment() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = s3_lake(&moto);
    let p = lake_project("parquet", &lake);
    p.write("efmesh.toml", &config(&lake));
    let dev = run_s3(&p, &["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    let fp = action(&dev, "m.daily")["fingerprint"].as_str().unwrap().to_string();
    let key = format!("warehouse/m__daily/{fp}/2026-01-02.parquet");
    assert!(moto.keys("lake").contains(&key), "{:?}", moto.keys("lake"));
    moto.delete("lake", &key);

    let r = run_s3(&p, &["apply", "prod", "--yes"]);
    r.expect_code(1);
    let interval = "[2026-01-02T00:00:00.000Z, 2026-01-03T00:00:00.000Z)";
    assert!(r.stderr.contains(&format!("`m.daily` interval {interval}")), "names the model and the interval: {}", r.stderr);
    assert!(r.stderr.contains(&format!("s3://lake/{key}")) && r.stderr.contains("is missing"), "names the object: {}", r.stderr);
    assert!(r.stderr.contains("environment `prod` was not promoted"), "{}", r.stderr);
    assert!(
        r.stderr.contains("efmesh restate dev --model m.daily --from 2026-01-02T00:00:00.000Z --to 2026-01-03T00:00:00.000Z")
            && r.stderr.contains("then `efmesh run dev` recomputes it, and `efmesh apply prod` promotes it again"),
        "the hint restates the interval where the version is served: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("HTTP 404") && !r.stderr.contains("while running: CREATE OR REPLACE VIEW"), "not the engine's raw error: {}", r.stderr);
    assert!(!p.state().env_pointers("prod").unwrap_or_default().contains_key("m.daily"), "nothing was promoted");
    assert_eq!(p.state().pending_promotions().expect("pending"), vec![]);

    run_s3(&p, &["restate", "dev", "--model", "m.daily", "--from", "2026-01-02T00:00:00.000Z", "--to", "2026-01-03T00:00:00.000Z"]).expect_code(0);
    run_s3(&p, &["run", "dev"]).expect_code(0);
    assert!(moto.keys("lake").contains(&key), "the restated day's object is written anew: {:?}", moto.keys("lake"));
    run_s3(&p, &["apply", "prod", "--yes"]).expect_code(0);
    let reference = lake_project("", "");
    reference.apply("prod");
    for m in ["m.daily", "m.totals"] {
        assert_eq!(s3_rows(&p, &moto, &env_view("prod", m)), reference.rows(&env_view("prod", m)), "`{m}` promoted after the restated day was recomputed");
    }
}

/// An S3 server unreachable during a promotion's view swap (`apply prod` of the versions `dev`
/// built: nothing to build, only views over S3 to create): the engine's `IO Error` names no
/// model, so the failure names the model whose view could not be created, and where it is
/// defined; nothing is promoted.
#[test]
fn a_view_swap_failing_over_s3_names_the_model() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = s3_lake(&moto);
    let p = lake_project("parquet", &lake);
    run_s3(&p, &["apply", "dev", "--yes"]).expect_code(0);
    drop(moto);
    let r = run_s3(&p, &["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("while running: CREATE OR REPLACE VIEW"), "the swap failed: {}", r.stderr);
    assert!(r.stderr.contains("models/m.lua:"), "names the model's definition: {}", r.stderr);
    assert!(["m.daily", "m.totals"].iter().any(|m| r.stderr.contains(&format!("promoting `prod`: the view of model `{m}`"))), "names the model: {}", r.stderr);
    assert!(p.state().env_pointers("prod").unwrap_or_default().is_empty(), "nothing was promoted");
}

/// `s3_endpoint` written with its scheme (`http://127.0.0.1:port`, without `s3_use_ssl`): read as
/// `s3_use_ssl = false`, both efmesh's own S3 client (the owner marker) and DuckDB's secret (the
/// lake files, the views) reach the server — it was `http://http://…`, an unknown host.
#[test]
fn an_s3_endpoint_written_with_its_scheme_reaches_the_server() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = format!("[lake]\npath = \"s3://lake/warehouse\"\ns3_endpoint = \"http://{}\"\ns3_url_style = \"path\"\n", moto.endpoint());
    let p = lake_project("parquet", &lake);
    let v = run_s3(&p, &["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    let keys = moto.keys("lake");
    assert!(keys.iter().any(|k| k.starts_with("warehouse/.efmesh-owner.d/")), "the owner marker: {keys:?}");
    let totals = format!("warehouse/m__totals/{}/data.parquet", action(&v, "m.totals")["fingerprint"].as_str().unwrap());
    assert!(keys.contains(&totals), "{keys:?}");
    assert_eq!(s3_rows(&p, &moto, &env_view("dev", "m.totals")).len(), 4);
}

/// A done interval's S3 object deleted by hand: `run` and `apply` fail naming the model, the
/// interval and the object (never the engine's raw 404) with a hint that works: the interval
/// restated, it is not done, its object is dropped from the list, and the next `run` recomputes
/// it.
#[test]
fn a_deleted_s3_interval_object_fails_naming_it_and_restate_then_run_recomputes_it() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = s3_lake(&moto);
    let mut p = lake_project("parquet", &lake);
    p.write("efmesh.toml", &config(&lake));
    let first = run_s3(&p, &["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    let fp = action(&first, "m.daily")["fingerprint"].as_str().unwrap().to_string();
    let key = format!("warehouse/m__daily/{fp}/2026-01-02.parquet");
    assert!(moto.keys("lake").contains(&key), "{:?}", moto.keys("lake"));
    moto.delete("lake", &key);

    // A day later: `run` and `apply` have a day to compute and meet the missing object.
    p.now = "2026-01-11T06:00:00Z".to_string();
    let interval = "[2026-01-02T00:00:00.000Z, 2026-01-03T00:00:00.000Z)";
    for args in [&["run", "prod"][..], &["apply", "prod", "--yes"][..]] {
        let r = run_s3(&p, args);
        r.expect_code(1);
        assert!(r.stderr.contains(&format!("`m.daily` interval {interval}")), "names the model and the interval: {}", r.stderr);
        assert!(r.stderr.contains(&format!("s3://lake/{key}")) && r.stderr.contains("is missing"), "names the object: {}", r.stderr);
        assert!(
            r.stderr.contains("efmesh restate <env> --model m.daily --from 2026-01-02T00:00:00.000Z --to 2026-01-03T00:00:00.000Z"),
            "the hint restates the interval: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("HTTP 404") && !r.stderr.contains("while running: CREATE OR REPLACE VIEW"), "not the engine's raw error: {}", r.stderr);
    }

    run_s3(&p, &["restate", "prod", "--model", "m.daily", "--from", "2026-01-02T00:00:00.000Z", "--to", "2026-01-03T00:00:00.000Z"]).expect_code(0);
    run_s3(&p, &["run", "prod"]).expect_code(0);
    assert!(moto.keys("lake").contains(&key), "the restated day's object is written anew: {:?}", moto.keys("lake"));
    let manifest: Value = serde_json::from_str(&moto.get("lake", &format!("warehouse/m__daily/{fp}/manifest.json"))).unwrap();
    assert_eq!(manifest["files"], serde_json::json!(day_files(DAYS + 1)));
    let mut reference = lake_project("", "");
    reference.now = p.now.clone();
    reference.apply("prod");
    for m in ["m.daily", "m.totals"] {
        assert_eq!(s3_rows(&p, &moto, &env_view("prod", m)), reference.rows(&env_view("prod", m)), "`{m}` after the restated day was recomputed");
    }
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));
}

/// On S3 (not listed while planning) a re-list forgets a done interval outside `start`/`end`
/// whose object is gone — only when nothing inside the bounds is missing too (then the apply
/// refuses first and the ledger is left as it was) — never leaving it done without its object.
#[test]
fn an_s3_relist_forgets_a_lost_object_outside_the_bounds_only_when_nothing_inside_is_missing() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = s3_lake(&moto);
    let p = lake_project("parquet", &lake);
    p.write("efmesh.toml", &config(&lake));
    let first = run_s3(&p, &["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    let fp = action(&first, "m.daily")["fingerprint"].as_str().unwrap().to_string();
    // `end` moved earlier (a metadata change: the same version): 08 and 09 are done outside it.
    p.write("models/m.lua", &models("parquet", "", 3).replace("lookback = 1 }", "lookback = 1, [\"end\"] = \"2026-01-08\" }"));
    let narrowed = run_s3(&p, &["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(action(&narrowed, "m.daily")["fingerprint"], fp.as_str(), "{narrowed:#}");
    let key = |day: &str| format!("warehouse/m__daily/{fp}/2026-01-{day}.parquet");
    let done = |p: &Project| -> BTreeSet<String> {
        p.state_summary()
            .intervals
            .iter()
            .filter(|((n, _), _)| n == "m.daily")
            .flat_map(|(_, v)| v.iter().map(|t| efmesh::core::interval::to_iso(*t)[..10].to_string()))
            .collect()
    };
    let restate = |p: &Project| {
        run_s3(p, &["restate", "prod", "--model", "m.daily", "--from", "2026-01-03T00:00:00.000Z", "--to", "2026-01-04T00:00:00.000Z"]).expect_code(0);
    };
    // Inside and outside both lost: the re-list of the restated day's build refuses, naming the
    // inside one, and forgets nothing.
    moto.delete("lake", &key("02"));
    moto.delete("lake", &key("09"));
    restate(&p);
    let r = run_s3(&p, &["run", "prod"]);
    r.expect_code(1);
    assert!(r.stderr.contains(&key("02")), "{}", r.stderr);
    assert!(done(&p).contains("2026-01-09"), "nothing forgotten while the apply refuses: {:?}", done(&p));
    // Only the outside one lost: forgotten with a warning, the run succeeds.
    run_s3(&p, &["restate", "prod", "--model", "m.daily", "--from", "2026-01-02T00:00:00.000Z", "--to", "2026-01-03T00:00:00.000Z"]).expect_code(0);
    let r = run_s3(&p, &["run", "prod"]);
    r.expect_code(0);
    assert!(r.stderr.contains("forgotten, not recomputed"), "{}", r.stderr);
    let days = done(&p);
    assert!(!days.contains("2026-01-09") && days.contains("2026-01-08") && days.contains("2026-01-02"), "{days:?}");
}

/// A parquet project (`.sql` models, `[lake] path = "lake"`) whose `s.a` computed the days
/// 2026-01-01 to 03 and then had its `end` moved to 2026-01-03 (a metadata change: the same
/// version, its day 2026-01-03 now outside the bounds, still served); with the version's
/// fingerprint.
fn narrowed_lake_project() -> (Project, String) {
    let mut p = Project::new();
    p.write("efmesh.toml", &p.config_with("[lake]\npath = \"lake\"\n").replace("models/**/*.lua", "models/**/*.sql"));
    let model = |end: &str| {
        format!(
            "-- name: s.a\n-- kind: incremental_by_time_range(time_column = ts, start = 2026-01-01, end = {end}, grain = day)\n-- target: parquet\n-- schema: ts timestamp, v bigint\n\
             SELECT ts, 1::bigint AS v FROM (SELECT range AS ts FROM range(@start_ts::timestamp, @end_ts::timestamp, INTERVAL 1 HOUR))\n"
        )
    };
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/a.sql", &model("2026-01-04"));
    let v = p.apply("dev");
    let fp = action(&v, "s.a")["fingerprint"].as_str().expect("fingerprint").to_string();
    p.write("models/a.sql", &model("2026-01-03"));
    let narrowed = p.apply("dev");
    assert_eq!(action(&narrowed, "s.a")["change"], "metadata", "{narrowed:#}");
    assert_eq!(action(&narrowed, "s.a")["fingerprint"], fp.as_str(), "{narrowed:#}");
    assert_eq!(done_days_of(&p, &fp), ["2026-01-01", "2026-01-02", "2026-01-03"]);
    assert_eq!(served_days(&p), ["2026-01-01", "2026-01-02", "2026-01-03"], "the day outside the bounds is still served");
    (p, fp)
}

/// The days `s.a`'s version `fp` holds done in its ledger.
fn done_days_of(p: &Project, fp: &str) -> Vec<String> {
    p.state().done_intervals("s.a", fp).expect("ledger").into_iter().map(|s| efmesh::core::interval::to_iso(s)[..10].to_string()).collect()
}

/// The days `dev`'s view of `s.a` serves rows of (24 each).
fn served_days(p: &Project) -> Vec<String> {
    let rows = p.query(&format!("SELECT CAST(CAST(ts AS DATE) AS VARCHAR), count(*) FROM {} GROUP BY 1 ORDER BY 1", env_view("dev", "s.a")));
    rows.into_iter()
        .map(|r| {
            assert_eq!(r[1].as_deref(), Some("24"), "{r:?}");
            r[0].clone().expect("day")
        })
        .collect()
}

/// The lake directory and the DuckDB file lost (the state kept) after `end` moved earlier: the
/// done day now outside the bounds lost its file, and no plan under these bounds recomputes it.
/// Every apply used to refuse it forever ("the lake file … of this done interval is missing",
/// its hint to apply the plan first unfollowable): the repair forgets it instead — cleared from
/// the ledger, no longer served — and recomputes the days inside the bounds; the plan, `status
/// --check` and the apply agree, and the next plan has no changes.
#[test]
fn a_lost_lake_with_done_intervals_outside_the_bounds_forgets_them_instead_of_wedging_apply() {
    let (p, fp) = narrowed_lake_project();
    fs_err::remove_dir_all(p.root().join("lake")).unwrap();
    p.remove("efmesh.duckdb");
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));

    let status = p.run(&["status", "dev", "--check"]);
    status.expect_code(1);
    assert!(status.stdout.contains("1 done interval(s) outside its start/end lost their files: forgotten, not recomputed"), "{}", status.stdout);
    let plan = p.plan("dev");
    let a = action(&plan, "s.a");
    assert_eq!(a["repair"]["lakeViewMissing"], true, "{a:#}");
    assert_eq!(a["repair"]["lostOutsideBounds"]["intervals"], 1, "{a:#}");
    assert_eq!(a["repair"]["lostOutsideBounds"]["range"]["start"], "2026-01-03T00:00:00.000Z", "{a:#}");
    assert_eq!(a["intervals"], 2, "the two days inside the bounds are recomputed: {a:#}");
    assert!(a.get("outsideBounds").is_none_or(Value::is_null), "the forgotten day is not said to be served: {a:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("1 done interval(s) outside its start/end lost their files: forgotten, not recomputed"), "{text}");

    let applied = p.run(&["apply", "dev", "--yes"]);
    applied.expect_code(0);
    assert_eq!(done_days_of(&p, &fp), ["2026-01-01", "2026-01-02"], "the lost day outside the bounds is no longer done");
    assert_eq!(served_days(&p), ["2026-01-01", "2026-01-02"], "the view serves exactly the days inside the bounds");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.run(&["status", "dev", "--check"]).expect_code(0);
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
}

/// Only the file of the done day outside the bounds deleted (the view and the other files
/// intact): the plan says it is forgotten, not recomputed (nothing to backfill), and the apply
/// clears it from the ledger; the view serves the days inside the bounds.
#[test]
fn a_lake_file_lost_only_outside_the_bounds_is_forgotten_not_recomputed() {
    let (p, fp) = narrowed_lake_project();
    let dir = p.root().join("lake").join("s__a").join(&fp);
    std::fs::remove_file(dir.join("2026-01-03.parquet")).unwrap();

    let plan = p.plan("dev");
    let a = action(&plan, "s.a");
    assert_eq!(a["repair"]["lakeFilesMissing"], true, "{a:#}");
    assert_eq!(a["repair"]["lostOutsideBounds"]["intervals"], 1, "{a:#}");
    assert_eq!(a["intervals"], 0, "nothing inside the bounds lost its file: {a:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("forgotten, not recomputed"), "{text}");
    assert!(!text.contains("missing: recompute"), "{text}");

    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(done_days_of(&p, &fp), ["2026-01-01", "2026-01-02"]);
    assert!(p.state().failed_intervals("s.a", &fp).expect("ledger").is_empty(), "forgotten, not failed");
    assert_eq!(served_days(&p), ["2026-01-01", "2026-01-02"]);
    let manifest: Value = serde_json::from_str(&fs_err::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["files"], serde_json::json!(["2026-01-01.parquet", "2026-01-02.parquet"]));
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// `src` copied over `dst` (a DuckDB file), with its write-ahead log if it has one (and without
/// `dst`'s): what restoring a copy of the file puts back.
fn copy_duckdb(src: &Path, dst: &Path) {
    let wal = |p: &Path| PathBuf::from(format!("{}.wal", p.display()));
    fs_err::copy(src, dst).unwrap();
    let _ = std::fs::remove_file(wal(dst));
    if wal(src).exists() {
        fs_err::copy(wal(src), wal(dst)).unwrap();
    }
}

/// An older copy of the DuckDB file of a lake-only project restored after a `run` wrote more
/// days (writes to the lake alone raise no engine epoch): its lake view lists the files of the
/// first days only while the ledger says every day is done. It was served as healthy — `plan`
/// without changes, `status --check` caught up, `run` with nothing to refresh — serving those
/// days alone. The plan now finds the view's list short of the ledger (`repair.lakeViewStale`,
/// nothing recomputed), `status --check` exits 1 and `run` refuses until `apply` re-lists the
/// view, which then serves every day, as a project computed in one go does.
#[test]
fn an_older_duckdb_copy_whose_lake_view_lists_fewer_files_than_are_done_is_relisted() {
    let reference = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    reference.apply("prod");
    let all_days = reference.rows(&env_view("prod", "m.daily"));

    let mut p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    p.now = "2026-01-04T06:00:00Z".to_string();
    p.apply("prod");
    let older = p.root().join("older.duckdb");
    copy_duckdb(&p.engine_path(), &older);
    p.now = LAKE_NOW.to_string();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(p.rows(&env_view("prod", "m.daily")), all_days);
    // A view current with its ledger is not re-listed.
    assert_eq!(p.plan("prod")["hasChanges"], false);

    copy_duckdb(&older, &p.engine_path());
    assert_ne!(p.rows(&env_view("prod", "m.daily")), all_days, "the older copy's view lists the first days only");
    let plan = p.plan("prod");
    let a = action(&plan, "m.daily");
    assert_eq!(a["repair"]["lakeViewStale"], true, "{a:#}");
    assert!(a["repair"].get("lakeFilesMissing").is_none(), "every file is there: {a:#}");
    assert_eq!(a["intervals"], 0, "nothing is recomputed: {a:#}");
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    let text = p.run(&["plan", "prod"]);
    text.expect_code(0);
    let said = format!("{}{}", text.stdout, text.stderr);
    assert!(said.contains("does not list the files of 6 done interval(s)"), "{said}");
    let status = p.run(&["status", "prod", "--check"]);
    status.expect_code(1);
    let said = format!("{}{}", status.stdout, status.stderr);
    assert!(said.contains("`m.daily` (lake view does not list the done intervals' files)"), "{said}");
    let run = p.run(&["run", "prod"]);
    run.expect_code(2);
    assert!(run.stderr.contains("m.daily: lake view does not list the done intervals' files (`apply` repairs it)"), "{}", run.stderr);

    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(p.rows(&env_view("prod", "m.daily")), all_days, "every done day is served again");
    assert_eq!(p.rows(&env_view("prod", "m.totals")), reference.rows(&env_view("prod", "m.totals")));
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// Two checkouts (two DuckDB files) sharing one state store and one absolute lake path, the
/// documented way for several engines to share a store: `a` runs `dev` further, and `b`'s view of
/// the version still lists the files its last re-list saw. `b`'s plan and `status --check` say
/// so (they said healthy), and `b`'s `apply prod` re-lists the view before promoting it (it
/// promoted the stale view), so `b` serves every day `a` computed.
#[test]
fn a_checkout_sharing_the_lake_and_state_relists_a_view_another_one_ran_further() {
    let shared = tempfile::Builder::new().prefix("efmesh-it-shared-").tempdir().expect("temp dir");
    let config = format!(
        "[project]\nmodels = [\"models/**/*.lua\"]\n\n[engine]\npath = \"efmesh.duckdb\"\n\n[state]\npath = \"{}\"\n\n[lake]\npath = \"{}\"\n",
        shared.path().join("state.sqlite").display(),
        shared.path().join("lake").display()
    );
    let checkout = || {
        let mut p = lake_project("parquet", "");
        p.write("efmesh.toml", &config);
        p.now = "2026-01-04T06:00:00Z".to_string();
        p
    };
    let (mut a, mut b) = (checkout(), checkout());
    a.apply("dev");
    b.apply("dev");
    a.now = LAKE_NOW.to_string();
    b.now = LAKE_NOW.to_string();
    a.run(&["run", "dev"]).expect_code(0);
    let all_days = a.rows(&env_view("dev", "m.daily"));
    assert_eq!(a.plan("dev")["hasChanges"], false, "the writer's view is current");

    let plan = b.plan("dev");
    let d = action(&plan, "m.daily");
    assert_eq!(d["repair"]["lakeViewStale"], true, "{d:#}");
    b.run(&["status", "dev", "--check"]).expect_code(1);
    b.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(b.rows(&env_view("prod", "m.daily")), all_days, "the promotion serves every done day");
    assert_eq!(b.rows(&env_view("dev", "m.daily")), all_days, "dev reads the same re-listed view");
    assert_eq!(b.plan("dev")["hasChanges"], false);
    b.run(&["status", "dev", "--check"]).expect_code(0);
}

/// The engine's error querying `relation` in the project's DuckDB file; `None` when the query
/// succeeds.
fn query_error(p: &Project, relation: &str) -> Option<String> {
    use efmesh::engine::Engine;
    let mut db = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
    db.query(&format!("SELECT count(*) FROM {relation}")).err().map(|e| e.message)
}

/// A restated day keeps serving its old file until a batch rewrites it; that kept file deleted
/// by hand made every query of the view fail with DuckDB's raw "No files found" while `status
/// --check` said healthy (the day is not done, so no done interval lacks its file, and the view
/// may list a kept file). The plan now compares the view's list with the directory and re-lists
/// it (`repair.lakeViewStale`, the file in `listedMissing`), `status --check` exits 1 naming the
/// model and the file, `run` refuses until `apply`, which re-lists the view and recomputes the
/// day.
#[test]
fn a_restated_days_kept_file_deleted_by_hand_is_found_and_the_view_relisted() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    let rows = p.rows(&env_view("dev", "m.daily"));
    let daily = version_dir(&p, "lake", &v, "m.daily");
    let fp = action(&v, "m.daily")["fingerprint"].as_str().expect("fingerprint").to_string();
    let tail = format!("m__daily/{fp}/2026-01-02.parquet");
    p.run(&["restate", "dev", "--model", "m.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    // Found clean first: the restated day's file is kept and served.
    p.run(&["status", "dev", "--check"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "m.daily")), rows, "the restated day serves its old rows");
    std::fs::remove_file(daily.join("2026-01-02.parquet")).unwrap();
    let error = query_error(&p, &env_view("dev", "m.daily"));
    assert!(error.as_deref().is_some_and(|e| e.contains("2026-01-02.parquet")), "the view lists the deleted file: {error:?}");

    let status = p.run(&["status", "dev", "--check"]);
    status.expect_code(1);
    let said = format!("{}{}", status.stdout, status.stderr);
    assert!(said.contains("`m.daily` (lake view lists a file no longer in the lake: ") && said.contains(&tail), "{said}");
    let plan = p.plan("dev");
    let a = action(&plan, "m.daily");
    assert_eq!(a["repair"]["lakeViewStale"], true, "{a:#}");
    assert!(a["repair"].get("lakeFilesMissing").is_none(), "every done day's file is there: {a:#}");
    let listed: Vec<&str> = a["repair"]["listedMissing"].as_array().expect("listedMissing").iter().filter_map(Value::as_str).collect();
    assert!(listed.len() == 1 && listed[0].ends_with(&tail), "{a:#}");
    let text = p.run(&["plan", "dev"]);
    text.expect_code(0);
    let said = format!("{}{}", text.stdout, text.stderr);
    assert!(said.contains("lists 1 file(s) no longer in the lake (") && said.contains(&tail), "{said}");
    let run = p.run(&["run", "dev"]);
    run.expect_code(2);
    assert!(run.stderr.contains("m.daily: lake view lists a file no longer in the lake: "), "{}", run.stderr);

    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert!(daily.join("2026-01-02.parquet").exists(), "the restated day is recomputed");
    assert_eq!(p.rows(&env_view("dev", "m.daily")), rows);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

/// The restated day's kept file left outside the bounds (`end` moved earlier after the restate:
/// no run ever rewrites it), then deleted by hand: every query of the view failed while `status
/// --check`, `plan`, `run` and `apply` said there was nothing to do, forever. The plan now
/// re-lists the view (nothing recomputed), `status --check` exits 1 naming the model and the
/// file, `run` refuses until the apply, after which the view serves the days still there. Also:
/// `status` does not count the restated day outside the bounds among the intervals the next run
/// recomputes, and a restate of a range done only outside the bounds says so consistently.
#[test]
fn a_kept_file_outside_the_bounds_deleted_by_hand_is_found_and_the_view_relisted() {
    let mut p = Project::new();
    p.write("efmesh.toml", &p.config_with("[lake]\npath = \"lake\"\n").replace("models/**/*.lua", "models/**/*.sql"));
    let model = |end: &str| {
        format!(
            "-- name: s.a\n-- kind: incremental_by_time_range(time_column = ts, start = 2026-01-01, end = {end}, grain = day)\n-- target: parquet\n-- schema: ts timestamp, v bigint\n\
             SELECT ts, 1::bigint AS v FROM (SELECT range AS ts FROM range(@start_ts::timestamp, @end_ts::timestamp, INTERVAL 1 HOUR))\n"
        )
    };
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/a.sql", &model("2026-01-05"));
    let v = p.apply("dev");
    let fp = action(&v, "s.a")["fingerprint"].as_str().expect("fingerprint").to_string();
    p.run(&["restate", "dev", "--model", "s.a", "--from", "2026-01-03", "--to", "2026-01-04"]).expect_code(0);
    p.write("models/a.sql", &model("2026-01-03"));
    p.apply("dev");
    assert_eq!(done_days_of(&p, &fp), ["2026-01-01", "2026-01-02", "2026-01-04"]);
    assert_eq!(served_days(&p), ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"], "the restated day keeps its old file");
    let status = p.run(&["status", "dev", "--check"]);
    status.expect_code(0);
    assert!(!status.stdout.contains("not done (restated or failed)"), "the day outside the bounds is never recomputed: {}", status.stdout);
    assert_eq!(p.run(&["status", "dev", "--json"]).expect_code(0).json()["lag"][0]["gaps"], 0);

    // The done day outside the bounds is left as computed, and the range holds nothing else.
    let restate = p.run(&["restate", "dev", "--model", "s.a", "--from", "2026-01-04", "--to", "2026-01-05"]);
    restate.expect_code(0);
    assert!(restate.stdout.contains("s.a: 1 done interval(s) outside its `start`/`end` left as computed (not restated)"), "{}", restate.stdout);
    assert!(
        restate
            .stdout
            .contains("no interval in [2026-01-04T00:00:00.000Z, 2026-01-05T00:00:00.000Z) within the models' `start`/`end` was done: nothing to recompute"),
        "{}",
        restate.stdout
    );
    assert_eq!(done_days_of(&p, &fp), ["2026-01-01", "2026-01-02", "2026-01-04"]);

    let tail = format!("s__a/{fp}/2026-01-03.parquet");
    std::fs::remove_file(p.root().join("lake").join("s__a").join(&fp).join("2026-01-03.parquet")).unwrap();
    assert!(query_error(&p, &env_view("dev", "s.a")).is_some(), "the view lists the deleted file");
    let status = p.run(&["status", "dev", "--check"]);
    status.expect_code(1);
    let said = format!("{}{}", status.stdout, status.stderr);
    assert!(said.contains("`s.a` (lake view lists a file no longer in the lake: ") && said.contains(&tail), "{said}");
    let plan = p.plan("dev");
    let a = action(&plan, "s.a");
    assert_eq!(a["repair"]["lakeViewStale"], true, "{a:#}");
    assert_eq!(a["intervals"], 0, "nothing is recomputed: {a:#}");
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    let run = p.run(&["run", "dev"]);
    run.expect_code(2);
    assert!(run.stderr.contains("s.a: lake view lists a file no longer in the lake: "), "{}", run.stderr);

    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(served_days(&p), ["2026-01-01", "2026-01-02", "2026-01-04"], "the deleted file is no longer listed");
    assert_eq!(done_days_of(&p, &fp), ["2026-01-01", "2026-01-02", "2026-01-04"], "the ledger is kept");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

/// A `full` parquet version whose `data.parquet` was deleted: the plan's warning says the file is
/// missing and `apply` rebuilds the version, not "lake files of 0 done interval(s) … are missing
/// ()", which was worded for a time-range model.
#[test]
fn a_full_versions_lost_data_file_is_described_as_a_rebuild() {
    let p = lake_project("parquet", "[lake]\npath = \"lake\"\n");
    let v = p.apply("dev");
    let totals = p.rows(&env_view("dev", "m.totals"));
    std::fs::remove_file(version_dir(&p, "lake", &v, "m.totals").join("data.parquet")).unwrap();
    let text = p.run(&["plan", "dev"]);
    text.expect_code(0);
    let said = format!("{}{}", text.stdout, text.stderr);
    assert!(said.contains("the lake file `data.parquet` of `m.totals` (") && said.contains("is missing: `apply` rebuilds the version"), "{said}");
    assert!(!said.contains("done interval(s) of `m.totals`"), "{said}");
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "m.totals")), totals);
}
