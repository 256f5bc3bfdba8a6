//! The DuckLake target: one table per version inside the attached catalog, environments as
//! views over them, promotion as a view swap, and a second version beside the first.

use crate::common::*;
use efmesh::engine::Engine;
use serde_json::Value;

const NOW_DL: &str = "2026-01-10T06:00:00Z";

const DL_CONFIG: &str = "[ducklake]\ncatalog = \"catalog/lake.ducklake\"\ndata_path = \"lake_data\"\n";

fn models(extra: &str) -> String {
    format!(
        r#"local daily = define_model {{
  name = "m.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 4 }},
  target = "ducklake",
  schema = {{ {{ "day", "timestamp" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(range AS TIMESTAMP) AS day, CAST(epoch(range) / 86400 AS BIGINT) AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 DAY)",
}}
define_model {{
  name = "m.total",
  kind = kind.full(),
  target = "ducklake",
  schema = {{ {{ "days", "bigint" }}, {{ "n", "bigint" }} }},
  query = "SELECT count(*) AS days, CAST(sum(n) AS BIGINT) AS n FROM " .. ref(daily) .. " {extra}",
}}
"#
    )
}

fn ducklake_project() -> Project {
    let mut p = Project::new();
    p.now = NOW_DL.to_string();
    p.write("efmesh.toml", &format!("{CONFIG}\n{DL_CONFIG}"));
    p.write("models/m.lua", &models(""));
    p
}

/// Opens the project's DuckDB file with the DuckLake catalog attached, as an outside reader would.
fn open(p: &Project) -> efmesh::engine::duckdb::DuckDb {
    let mut db = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
    db.execute(&format!("ATTACH 'ducklake:{}' AS \"_efmesh_ducklake\"", p.root().join("catalog/lake.ducklake").display())).expect("attach");
    db
}

fn rows(p: &Project, relation: &str) -> Rows {
    let mut r = open(p).query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}"));
    r.sort();
    r
}

/// Tables of the DuckLake catalog, sorted.
fn catalog_tables(p: &Project) -> Vec<String> {
    let mut v: Vec<String> = open(p)
        .query("SELECT table_name FROM information_schema.tables WHERE table_catalog = '_efmesh_ducklake' AND table_schema = 'main'")
        .unwrap()
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    v.sort();
    v
}

fn fp(v: &Value, m: &str) -> String {
    action(v, m)["fingerprint"].as_str().unwrap().to_string()
}

#[test]
fn ducklake_versions_apply_promote_and_live_beside_each_other() {
    let p = ducklake_project();
    let dev = p.apply("dev");
    assert_eq!(dev["intervals"], Value::from(9));
    let physical = action(&dev, "m.total")["physical"].as_str().unwrap().to_string();
    assert_eq!(physical, format!("\"_efmesh_ducklake\".\"main\".\"m__total__{}\"", fp(&dev, "m.total")));
    let first = vec![format!("m__daily__{}", fp(&dev, "m.daily")), format!("m__total__{}", fp(&dev, "m.total"))];
    assert_eq!(catalog_tables(&p), first);
    assert!(p.physical_tables().is_empty(), "nothing is stored in the DuckDB file's `_efmesh`");
    assert_eq!(rows(&p, &env_view("dev", "m.daily")).len(), 9);
    let total = rows(&p, &env_view("dev", "m.total"));
    assert_eq!(total, vec![vec![Some("9".into()), Some((20454..20463).sum::<i64>().to_string())]]);

    // Promotion is a view swap; a re-plan is empty.
    let prod = p.apply("prod");
    assert_eq!(prod["built"], serde_json::json!([]));
    assert_eq!(rows(&p, &env_view("prod", "m.total")), total);
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));

    // A second version beside the first; prod keeps the old one until promoted.
    p.write("models/m.lua", &models("HAVING count(*) > 100"));
    let second = p.apply("dev");
    assert_eq!(string_set(&second["built"]), set(&["m.total"]));
    let mut both = first.clone();
    both.push(format!("m__total__{}", fp(&second, "m.total")));
    both.sort();
    assert_eq!(catalog_tables(&p), both);
    assert_eq!(rows(&p, &env_view("prod", "m.total")), total, "prod still on the old version");
    assert!(rows(&p, &env_view("dev", "m.total")).is_empty());
    assert_eq!(p.state().env_pointers("prod").unwrap()["m.total"], fp(&dev, "m.total"));
    assert_eq!(p.apply("prod")["built"], serde_json::json!([]));
    assert!(rows(&p, &env_view("prod", "m.total")).is_empty());

    // Time passes: batches DELETE + INSERT into the catalog table, nothing duplicated.
    let mut p = p;
    p.now = "2026-01-12T00:00:00Z".into();
    let later = p.apply("prod");
    assert_eq!(later["intervals"], Value::from(2));
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 11);
}

/// `dev` serves `prod`'s `full` DuckLake version with an audit more (the version is shared):
/// `prod`'s run rebuilds the table under its own audits, and `dev`'s run runs `dev`'s over it
/// before refreshing anything, failing on the violation (it said "nothing to refresh", exit 0,
/// serving the rows its blocking audit refuses: only engine tables were audited so).
#[test]
fn a_ducklake_table_prod_rebuilds_is_audited_by_the_run_of_an_environment_with_an_audit_more() {
    let mut p = ducklake_project();
    let with = |audits: &str| models("").replace("name = \"m.total\",", &format!("name = \"m.total\",\n  audits = {{ {audits} }},"));
    p.write("models/m.lua", &with("audit.expression(\"days >= 0\")"));
    p.apply("prod");
    p.write("models/m.lua", &with("audit.expression(\"days >= 0\"), audit.expression(\"days < 12\")"));
    let dev = p.apply("dev");
    assert_eq!(fp(&dev, "m.total"), fp(&p.plan("prod"), "m.total"), "the version is shared");
    p.now = "2026-01-14T06:00:00Z".into();
    p.write("models/m.lua", &with("audit.expression(\"days >= 0\")"));
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "m.total")).first().and_then(|r| r[0].clone()).as_deref(), Some("13"));
    p.write("models/m.lua", &with("audit.expression(\"days >= 0\"), audit.expression(\"days < 12\")"));
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("days < 12") && run.stderr.contains("shared with `prod`"), "{}", run.stderr);
}

#[test]
fn ducklake_without_its_section_is_a_load_error() {
    let p = Project::new();
    p.write("models/m.lua", &models(""));
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("models/m.lua:1") && r.stderr.contains("model `m.daily`") && r.stderr.contains("[ducklake]"), "{}", r.stderr);
}

#[test]
fn efmesh_audit_reads_ducklake_views() {
    let p = ducklake_project();
    p.write(
        "models/m.lua",
        &models("").replace(
            "  target = \"ducklake\",\n  schema = { { \"days\"",
            "  target = \"ducklake\",\n  audits = { audit.row_count { min = 1 }, audit.not_null(\"days\") },\n  schema = { { \"days\"",
        ),
    );
    p.apply("prod");
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(0);
    let v = run.json();
    let audited: Vec<&str> = v["results"].as_array().unwrap().iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert!(audited.contains(&"m.total"), "{v:#}");
    assert_eq!(v["blockingViolations"], 0, "{v:#}");
}

#[test]
fn a_ducklake_table_dropped_by_hand_is_never_recreated_holding_only_new_intervals() {
    let mut p = ducklake_project();
    let applied = p.apply("prod");
    assert_eq!(applied["intervals"], Value::from(9));
    // `dev` serves the same versions (restating them from `dev` is refused: `prod`'s data too).
    p.apply("dev");
    let daily = format!("m__daily__{}", fp(&applied, "m.daily"));
    open(&p).execute(&format!("DROP TABLE \"_efmesh_ducklake\".\"main\".\"{daily}\"")).expect("drop the version's table by hand");
    assert!(!catalog_tables(&p).contains(&daily));

    // `status --check` reads the DuckLake catalog: unhealthy, naming the model.
    let status = p.run(&["status", "prod", "--check"]);
    status.expect_code(1);
    assert!(status.stdout.contains("DuckLake") && status.stdout.contains("`m.daily`"), "{}", status.stdout);

    // The next day: `run` (and `apply`) refuse before writing, naming the model, the table, the
    // catalog and how to recover; the table is not re-created with the two new days alone.
    p.now = "2026-01-12T00:00:00Z".into();
    for args in [&["run", "prod"][..], &["apply", "prod", "--yes"][..]] {
        let r = p.run(args);
        r.expect_code(1);
        for needle in ["model `m.daily`", daily.as_str(), "catalog/lake.ducklake", "9 done interval(s)", "nothing was written"] {
            assert!(r.stderr.contains(needle), "`{}` does not say {needle:?}:\n{}", args.join(" "), r.stderr);
        }
        assert!(r.stderr.contains("efmesh restate prod --model m.daily --from 2026-01-01T00:00:00.000Z --to 2026-01-10T00:00:00.000Z"), "{}", r.stderr);
        assert!(!catalog_tables(&p).contains(&daily), "`{}` re-created the lost table", args.join(" "));
    }
    // From `dev`, the hint names the restatement that is allowed: `prod`'s.
    let r = p.run(&["run", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("efmesh restate prod --model m.daily --from 2026-01-01T00:00:00.000Z"), "{}", r.stderr);
    assert!(!r.stderr.contains("efmesh restate dev"), "{}", r.stderr);
    assert_eq!(p.state().done_intervals("m.daily", &fp(&applied, "m.daily")).unwrap().len(), 9, "the ledger is left as it was");

    // Following the hint: the run recomputes every interval into a new table.
    p.run(&["restate", "prod", "--model", "m.daily", "--from", "2026-01-01T00:00:00.000Z", "--to", "2026-01-10T00:00:00.000Z"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    assert!(catalog_tables(&p).contains(&daily));
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 11, "every interval, not only the new ones");
    assert_eq!(rows(&p, &env_view("prod", "m.total"))[0][0], Some("11".to_string()));
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// A DuckLake time-range table stores the types its query returned when it was created; the
/// source widened since (four decimals): the new day's 2.3456 was stored as 2.35 silently, the
/// check the engine's tables get (`apply::check_batches_fit`) being skipped for DuckLake's. Refused
/// now before the model writes, as for an engine table; values the stored type holds go in.
#[test]
fn a_value_a_ducklake_tables_narrower_column_would_round_is_refused_before_the_model_writes() {
    let mut p = Project::new();
    p.now = "2026-01-02T01:00:00Z".into();
    p.write("efmesh.toml", &format!("{CONFIG}\n{DL_CONFIG}"));
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.sales (ts TIMESTAMP, amount DECIMAL(10,2))");
    p.execute_on_engine("INSERT INTO land.sales VALUES (TIMESTAMP '2026-01-01 10:00', 1.25)");
    p.write(
        "models/m.lua",
        r#"define_model { name = "raw.sales", kind = kind.external { table = "land.sales" }, schema = { { "ts", "timestamp" }, { "amount", "decimal(10,2)" } } }
define_model {
  name = "t.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" }, target = "ducklake",
  schema = { { "day", "timestamp" }, { "amount", "decimal(38,4)" } },
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, sum(amount) AS amount FROM " .. ref("raw.sales") .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}
"#,
    );
    p.apply("prod");
    p.execute_on_engine("ALTER TABLE land.sales ALTER COLUMN amount SET DATA TYPE DECIMAL(18,4)");
    p.execute_on_engine("INSERT INTO land.sales VALUES (TIMESTAMP '2026-01-02 10:00', 2.3456)");
    p.now = "2026-01-03T01:00:00Z".into();
    let before = rows(&p, &env_view("prod", "t.daily"));
    assert_eq!(before, vec![vec![Some("2026-01-01 00:00:00".to_string()), Some("1.25".to_string())]]);
    let run = p.run(&["run", "prod"]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("models/m.lua:2")
            && run.stderr.contains(
                "column `amount`: the query returns `DECIMAL(38,4)` but the table stores `DECIMAL(38,2)`, which would change 1 of its values in [2026-01-02"
            )
            && run.stderr.contains("2.3456 → 2.35"),
        "{}",
        run.stderr
    );
    assert_eq!(rows(&p, &env_view("prod", "t.daily")), before, "nothing written");
    let fp = p.state_summary().pointers["prod"]["t.daily"].clone();
    assert_eq!(p.state().done_intervals("t.daily", &fp).unwrap().len(), 1, "2026-01-02 is not done");
    // Values the stored type holds as they are go in, the types still differing.
    p.execute_on_engine("UPDATE land.sales SET amount = 2.34 WHERE amount = 2.3456");
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "t.daily")).last().and_then(|r| r[1].clone()).as_deref(), Some("2.34"));
}

/// `status --check` with an unapplied edit checks the DuckLake table of the version the
/// environment serves, not only the project's version (which the plan and `lost_served` check):
/// the served table dropped by hand makes it unhealthy, naming the model and the table.
#[test]
fn status_checks_the_ducklake_table_of_the_served_version_of_a_model_edited_but_not_applied() {
    let p = ducklake_project();
    let applied = p.apply("prod");
    let fingerprint = fp(&applied, "m.daily");
    let physical = action(&applied, "m.daily")["physical"].as_str().expect("physical").to_string();
    let daily = format!("m__daily__{fingerprint}");
    // An unapplied edit of `m.daily`: the project's version is another one.
    p.write("models/m.lua", &models("").replace("CAST(epoch(range) / 86400 AS BIGINT) AS n", "CAST(epoch(range) / 86400 + 0 AS BIGINT) AS n"));
    let plan = p.plan("prod");
    assert_ne!(action(&plan, "m.daily")["change"], "unchanged", "{plan:#}");
    p.run(&["status", "prod", "--check"]).expect_code(0);

    open(&p).execute(&format!("DROP TABLE \"_efmesh_ducklake\".\"main\".\"{daily}\"")).expect("drop the served version's table by hand");
    let text = p.run(&["status", "prod", "--check"]);
    text.expect_code(1);
    let line = format!("  ⚠ m.daily  DuckLake table {physical} missing (the version `prod` serves; the project defines another version)");
    assert!(text.stdout.contains(&line), "{}", text.stdout);
    let status = p.run(&["status", "prod", "--check", "--json"]).expect_code(1).json();
    let expected = serde_json::json!({"model": "m.daily", "fingerprint": fingerprint, "relation": physical, "lack": "duckLakeTableMissing", "removed": false});
    assert!(status["lostRelations"].as_array().expect("lostRelations").contains(&expected), "{status:#}");
}

#[test]
fn a_lost_ducklake_catalog_is_never_replaced_by_an_empty_one() {
    let mut p = ducklake_project();
    p.apply("prod");
    fs_err::rename(p.root().join("catalog"), p.root().join("catalog_moved")).expect("move the catalog away");

    let status = p.run(&["status", "prod", "--check"]);
    status.expect_code(1);
    assert!(status.stdout.contains("`m.daily`") && status.stdout.contains("`m.total`"), "{}", status.stdout);

    p.now = "2026-01-12T00:00:00Z".into();
    let r = p.run(&["run", "prod"]);
    r.expect_code(1);
    assert!(r.stderr.contains("catalog/lake.ducklake") && r.stderr.contains("does not exist"), "{}", r.stderr);
    assert!(r.stderr.contains("model `m.daily`") && r.stderr.contains("9 done interval(s)"), "{}", r.stderr);
    assert!(!p.root().join("catalog/lake.ducklake").exists(), "no empty catalog was created in its place");

    // Put back, the catalog serves again and the run proceeds.
    fs_err::rename(p.root().join("catalog_moved"), p.root().join("catalog")).expect("restore the catalog");
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 11);
}

/// A promotion interrupted after its view swap, then the local DuckLake catalog moved away: the
/// next command cannot put back the view reading the catalog, drops it with a warning naming
/// the missing catalog file as the cause (not only the engine's "table does not exist"),
/// creates no empty catalog in its place, and forgets the record; with the catalog put back,
/// `apply` converges.
#[test]
fn an_interrupted_promotion_undone_without_its_ducklake_catalog_names_the_missing_catalog() {
    let p = ducklake_project();
    p.apply("prod");
    p.write("models/m.lua", &models("HAVING count(*) > 0"));
    let out = p.command(&["apply", "prod", "--yes"]).env(efmesh::apply::fault::FAULT_ENV, "after-view-swap").output().expect("spawn efmesh");
    let crashed = Run::from_output(out, "EFMESH_FAULT=after-view-swap efmesh apply prod --yes".to_string());
    assert!(crashed.stderr.contains("aborting at `after-view-swap`"), "{}", crashed.stderr);
    fs_err::rename(p.root().join("catalog"), p.root().join("catalog_moved")).expect("move the catalog away");

    let r = p.run(&["plan", "prod"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `prod`"), "{}", r.stderr);
    assert!(r.stderr.contains("the interrupted promotion of `prod` cannot put view `m.total` back as it was"), "{}", r.stderr);
    assert!(
        r.stderr.contains("its DuckLake catalog `") && r.stderr.contains("catalog/lake.ducklake` does not exist"),
        "names the missing catalog: {}",
        r.stderr
    );
    assert!(r.stderr.contains("restore the catalog, then `efmesh apply prod`"), "{}", r.stderr);
    assert!(!p.root().join("catalog/lake.ducklake").exists(), "no empty catalog was created in its place");
    assert_eq!(p.state().pending_promotions().expect("pending"), vec![], "the record was forgotten");

    fs_err::rename(p.root().join("catalog_moved"), p.root().join("catalog")).expect("restore the catalog");
    p.apply("prod");
    assert_eq!(rows(&p, &env_view("prod", "m.total"))[0][0], Some("9".to_string()));
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));
}

/// A `full` DuckLake model of 1000 rows, `n = range * factor`: DuckLake writes parquet files for
/// inserts that large (small ones it inlines in the catalog).
fn big_model(factor: i64) -> String {
    format!(
        r#"define_model {{
  name = "m.big",
  kind = kind.full(),
  target = "ducklake",
  schema = {{ {{ "n", "bigint" }} }},
  query = "SELECT CAST(range * {factor} AS BIGINT) AS n FROM range(1000)",
}}
"#
    )
}

/// The parquet files under the DuckLake data path's schema `main`, relative to it, sorted.
fn data_files(p: &Project) -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in fs_err::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "parquet") {
                out.push(path);
            }
        }
    }
    let root = p.root().join("lake_data/main");
    let mut out = Vec::new();
    walk(&root, &mut out);
    let mut v: Vec<String> = out.iter().map(|f| f.strip_prefix(&root).unwrap().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `count(*)` and `sum(n)` of a relation, as text.
fn count_sum(p: &Project, relation: &str) -> Vec<Option<String>> {
    open(p).query(&format!("SELECT CAST(count(*) AS VARCHAR), CAST(sum(n) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}")).remove(0)
}

/// The janitor's DuckLake maintenance: a dropped version's parquet files are removed from the data
/// path (its snapshots expired past the ttl), reported as `ducklakeFilesRemoved`; a dry run
/// counts them and removes nothing; the served version's files and rows stay.
#[test]
fn the_janitor_removes_the_files_of_a_dropped_ducklake_version() {
    let p = Project::new();
    p.write("efmesh.toml", &format!("{CONFIG}\n{DL_CONFIG}"));
    p.write("models/m.lua", &big_model(1));
    let prod = p.apply("prod");
    let prod_dir = format!("m__big__{}/", fp(&prod, "m.big"));
    p.write("models/m.lua", &big_model(3));
    let dev = p.apply("dev");
    let dev_dir = format!("m__big__{}/", fp(&dev, "m.big"));
    let before = data_files(&p);
    let prod_files: Vec<String> = before.iter().filter(|f| f.starts_with(&prod_dir)).cloned().collect();
    let dev_files: Vec<String> = before.iter().filter(|f| f.starts_with(&dev_dir)).cloned().collect();
    assert!(!prod_files.is_empty() && !dev_files.is_empty(), "DuckLake wrote parquet files for both versions: {before:?}");
    let sum: i64 = (0..1000).sum();
    assert_eq!(count_sum(&p, &env_view("dev", "m.big")), vec![Some("1000".into()), Some((3 * sum).to_string())]);
    p.run(&["invalidate", "dev"]).expect_code(0);

    // A dry run counts the files the real run removes, and touches nothing.
    let dry = p.run(&["janitor", "--ttl", "0", "--dry-run", "--json"]).expect_code(0).json();
    assert!(dry["ducklakeFilesRemoved"].as_u64().is_some_and(|n| n >= dev_files.len() as u64), "{dry:#}");
    assert_eq!(data_files(&p), before, "a dry run removes no file");

    let run = p.run(&["janitor", "--ttl", "0", "--json"]);
    let v = run.expect_code(0).json();
    let dropped: Vec<&str> = v["dropped"].as_array().unwrap().iter().map(|d| d["physical"].as_str().unwrap()).collect();
    assert_eq!(dropped, vec![action(&dev, "m.big")["physical"].as_str().unwrap()], "{v:#}");
    assert!(v["ducklakeFilesRemoved"].as_u64().is_some_and(|n| n >= dev_files.len() as u64), "{v:#}");
    assert!(v["ducklakeSnapshotsExpired"].as_u64().is_some_and(|n| n > 0), "{v:#}");
    let after = data_files(&p);
    assert!(after.iter().all(|f| !f.starts_with(&dev_dir)), "the dropped version's files are gone: {after:?}");
    assert!(!p.root().join("lake_data/main").join(dev_dir.trim_end_matches('/')).exists(), "and its empty directory");
    assert_eq!(after, prod_files, "prod's files stay");
    assert_eq!(count_sum(&p, &env_view("prod", "m.big")), vec![Some("1000".into()), Some(sum.to_string())], "prod still reads its rows");

    // The text report says what went; a second run has nothing left to remove.
    let again = p.run(&["janitor", "--ttl", "0"]);
    again.expect_code(0);
    assert!(again.stdout.contains("janitor: nothing to collect"), "{}", again.stdout);
    assert!(!again.stdout.contains("DuckLake file(s)"), "nothing left to remove: {}", again.stdout);
    assert_eq!(data_files(&p), prod_files);
    assert_eq!(count_sum(&p, &env_view("prod", "m.big")), vec![Some("1000".into()), Some(sum.to_string())]);
}

/// Copies the directory `from` to `to`, recursively (a backup of a catalog or data path).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    fs_err::create_dir_all(to).unwrap();
    for entry in fs_err::read_dir(from).unwrap().flatten() {
        let (path, target) = (entry.path(), to.join(entry.file_name()));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs_err::copy(&path, &target).unwrap();
        }
    }
}

/// A DuckLake catalog and its data path restored from a copy taken before a later run hold every
/// table but lack the run's intervals: `run` and `status --check` refuse it (SPEC §4,
/// invariant 63), naming the catalog, both epochs and the ways out, and nothing is written to it.
#[test]
fn a_ducklake_catalog_older_than_the_state_store_is_refused() {
    let mut p = ducklake_project();
    let applied = p.apply("prod");
    assert_eq!(applied["intervals"], Value::from(9));
    copy_dir(&p.root().join("catalog"), &p.root().join("backup/catalog"));
    copy_dir(&p.root().join("lake_data"), &p.root().join("backup/lake_data"));
    p.now = "2026-01-12T00:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 11);

    fs_err::remove_dir_all(p.root().join("catalog")).unwrap();
    fs_err::remove_dir_all(p.root().join("lake_data")).unwrap();
    copy_dir(&p.root().join("backup/catalog"), &p.root().join("catalog"));
    copy_dir(&p.root().join("backup/lake_data"), &p.root().join("lake_data"));
    let catalog_file = p.root().join("catalog/lake.ducklake");
    let bytes = fs_err::read(&catalog_file).unwrap();
    // (`apply` of an unchanged project has nothing to write and reads no catalog: it says "nothing
    // to apply", as `plan` says "no changes".)
    for args in [&["run", "prod"][..], &["status", "prod", "--check"][..]] {
        let r = p.run(args);
        r.expect_code(1);
        let said = format!("{}{}", r.stdout, r.stderr);
        for needle in [
            "catalog/lake.ducklake",
            "is older than the state store",
            "writes to the catalog up to epoch 4",
            "up to epoch 2",
            "`m.daily`",
            "efmesh state import",
            "efmesh restate prod --model m.daily --from 2026-01-01T00:00:00.000Z --to 2026-01-12T00:00:00.000Z",
        ] {
            assert!(said.contains(needle), "`{}` does not say {needle:?}:\n{said}", args.join(" "));
        }
    }
    assert_eq!(fs_err::read(&catalog_file).unwrap(), bytes, "nothing was written to the catalog");
    let json = p.run(&["run", "prod", "--json"]);
    json.expect_code(1);
    assert_eq!(json.json()["error"]["kind"], "engine-behind", "{json:#?}");
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 9, "the old copy still holds its 9 days, no more");

    // Following the hint: every done interval restated, the run recomputes them and stamps the
    // catalog current.
    p.run(&["restate", "prod", "--model", "m.daily", "--from", "2026-01-01T00:00:00.000Z", "--to", "2026-01-12T00:00:00.000Z"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 11);
    assert_eq!(rows(&p, &env_view("prod", "m.total"))[0][0], Some("11".to_string()));
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// An apply of the project without its DuckLake models, sharing its state store (a branch that
/// removed them, another checkout), raises the engine epoch without stamping the catalog: the
/// catalog stays current, and the next `run prod` of the project with them is not refused, nor
/// `status --check` after it (the store's DuckLake epoch, the last stamp of the catalog, is what it must
/// hold; SPEC §4, invariant 63).
#[test]
fn an_apply_without_the_ducklake_models_does_not_make_the_catalog_look_behind() {
    let mut p = ducklake_project();
    p.apply("prod");
    let with_ducklake = p.read("models/m.lua");
    p.write(
        "models/m.lua",
        r#"define_model {
  name = "e.plain",
  kind = kind.full(),
  schema = { { "x", "integer" } },
  query = "SELECT 1 AS x",
}
"#,
    );
    p.apply("dev");
    let store = p.state();
    let (engine_epoch, ducklake_epoch) = (store.engine_epoch().unwrap(), store.ducklake_epoch().unwrap());
    drop(store);
    assert!(engine_epoch > ducklake_epoch && ducklake_epoch > 0, "the engine epoch raised past the catalog's: {engine_epoch} {ducklake_epoch}");

    p.write("models/m.lua", &with_ducklake);
    p.now = "2026-01-12T00:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "m.daily")).len(), 11);
    p.run(&["status", "prod", "--check"]).expect_code(0);
    assert!(p.state().ducklake_epoch().unwrap() > ducklake_epoch, "the run stamped the catalog and recorded it");
}

/// A new catalog (the old one moved aside) created by a first apply of new versions, while the
/// state store's epoch is already raised, is not refused, then or at the next run: it holds none
/// of the store's tables with done intervals, and the apply stamps it current.
#[test]
fn a_new_ducklake_catalog_is_not_refused_as_older_than_the_state_store() {
    let mut p = ducklake_project();
    p.apply("prod");
    fs_err::rename(p.root().join("catalog"), p.root().join("catalog_moved")).unwrap();
    fs_err::rename(p.root().join("lake_data"), p.root().join("lake_data_moved")).unwrap();
    // New versions for `dev`: nothing of them is stored anywhere yet.
    p.write("models/m.lua", &models("HAVING count(*) > 0").replace("/ 86400 AS BIGINT) AS n", "/ 86400 AS BIGINT) + 0 AS n"));
    let dev = p.apply("dev");
    assert_eq!(dev["intervals"], Value::from(9), "{dev:#}");
    assert!(p.root().join("catalog/lake.ducklake").exists());
    p.run(&["status", "dev", "--check"]).expect_code(0);
    p.now = "2026-01-12T00:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("dev", "m.daily")).len(), 11);
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

/// Runs the binary in `dir` (a project root outside the test's `Project`: moved, copied, linked).
fn efmesh_at(dir: &std::path::Path, args: &[&str]) -> Run {
    let out = std::process::Command::new(BIN)
        .current_dir(dir)
        .args(["--config", "efmesh.toml"])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn efmesh");
    Run::from_output(out, format!("efmesh {} (in {})", args.join(" "), dir.display()))
}

/// A project moved with its DuckLake catalog and its relative data path (a restored backup): the
/// catalog still records the old absolute data path, yet `status --check`, a read of the
/// environment's view and an apply writing a new version all work at the new place, reading and
/// writing the files under the new data path (the configured directory holds the catalog's
/// files: attached there, overriding the record). Without the override the apply was refused by
/// DuckLake and reads went to the old place.
#[test]
fn a_moved_ducklake_project_reads_and_writes_its_data_path_at_the_new_place() {
    let outer = tempfile::Builder::new().prefix("efmesh-it-dlmove-").tempdir().expect("temp dir");
    let (old, new) = (outer.path().join("before"), outer.path().join("after"));
    fs_err::create_dir_all(old.join("models")).unwrap();
    fs_err::write(old.join("efmesh.toml"), format!("{CONFIG}\n{DL_CONFIG}")).unwrap();
    fs_err::write(old.join("models/m.lua"), big_model(1)).unwrap();
    efmesh_at(&old, &["apply", "prod", "--yes"]).expect_code(0);
    fs_err::rename(&old, &new).unwrap();
    // Every file of the catalog is now only under the new data path: a read must find them there.
    let sum_of = |factor: i64, relation: &str| {
        let mut db = efmesh::engine::duckdb::DuckDb::open(&new.join("efmesh.duckdb"), &efmesh::config::EngineSection::default()).expect("open duckdb");
        db.execute(&format!(
            "ATTACH 'ducklake:{}' AS \"_efmesh_ducklake\" (DATA_PATH '{}/', OVERRIDE_DATA_PATH true)",
            new.join("catalog/lake.ducklake").display(),
            new.join("lake_data").display()
        ))
        .expect("attach");
        let got = db.query(&format!("SELECT CAST(sum(n) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, vec![vec![Some((factor * (0..1000).sum::<i64>()).to_string())]], "{relation}");
    };
    sum_of(1, &env_view("prod", "m.big"));
    efmesh_at(&new, &["status", "prod", "--check"]).expect_code(0);
    // An apply writing a new version into the moved catalog, and a promotion of it.
    fs_err::write(new.join("models/m.lua"), big_model(3)).unwrap();
    let applied = efmesh_at(&new, &["apply", "prod", "--yes"]);
    applied.expect_code(0);
    sum_of(3, &env_view("prod", "m.big"));
    assert!(!old.exists(), "nothing was written at the old place");
    efmesh_at(&new, &["status", "prod", "--check"]).expect_code(0);
}

/// A project copied with its DuckLake catalog and relative data path (both places exist): the
/// copy is attached at its own data path, which holds the catalog's files, and writes there; the
/// original keeps serving its own rows. A project reached through a symlink attaches as usual.
#[test]
fn a_copied_or_symlinked_ducklake_project_uses_its_own_data_path() {
    let outer = tempfile::Builder::new().prefix("efmesh-it-dlcopy-").tempdir().expect("temp dir");
    let (orig, copy, link) = (outer.path().join("orig"), outer.path().join("copy"), outer.path().join("link"));
    fs_err::create_dir_all(orig.join("models")).unwrap();
    fs_err::write(orig.join("efmesh.toml"), format!("{CONFIG}\n{DL_CONFIG}")).unwrap();
    fs_err::write(orig.join("models/m.lua"), big_model(1)).unwrap();
    efmesh_at(&orig, &["apply", "prod", "--yes"]).expect_code(0);
    copy_dir(&orig, &copy);
    std::os::unix::fs::symlink(&orig, &link).unwrap();
    let sum_of = |dir: &std::path::Path, relation: &str| {
        let mut db = efmesh::engine::duckdb::DuckDb::open(&dir.join("efmesh.duckdb"), &efmesh::config::EngineSection::default()).expect("open duckdb");
        db.execute(&format!(
            "ATTACH 'ducklake:{}' AS \"_efmesh_ducklake\" (DATA_PATH '{}/', OVERRIDE_DATA_PATH true)",
            dir.join("catalog/lake.ducklake").display(),
            dir.join("lake_data").display()
        ))
        .expect("attach");
        db.query(&format!("SELECT CAST(sum(n) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}"))
    };
    let sum = (0..1000).sum::<i64>();
    fs_err::write(copy.join("models/m.lua"), big_model(3)).unwrap();
    efmesh_at(&copy, &["apply", "prod", "--yes"]).expect_code(0);
    efmesh_at(&copy, &["status", "prod", "--check"]).expect_code(0);
    assert_eq!(sum_of(&copy, &env_view("prod", "m.big")), vec![vec![Some((3 * sum).to_string())]], "the copy serves its new version");
    assert_eq!(sum_of(&orig, &env_view("prod", "m.big")), vec![vec![Some(sum.to_string())]], "the original keeps its rows");
    efmesh_at(&orig, &["status", "prod", "--check"]).expect_code(0);
    // Through the symlink: the same directory spelled otherwise.
    efmesh_at(&link, &["status", "prod", "--check"]).expect_code(0);
    fs_err::write(link.join("models/m.lua"), big_model(2)).unwrap();
    efmesh_at(&link, &["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(sum_of(&orig, &env_view("prod", "m.big")), vec![vec![Some((2 * sum).to_string())]]);
}

/// `[ducklake] data_path` edited while the recorded directory is still there: every command
/// attaching the catalog refuses, naming both paths (attaching through the new one would leave
/// the table's files split between the two, every read failing), and nothing is written.
#[test]
fn an_edited_ducklake_data_path_is_refused_naming_both_paths() {
    let p = Project::new();
    p.write("efmesh.toml", &format!("{CONFIG}\n{DL_CONFIG}"));
    p.write("models/m.lua", &big_model(1));
    p.apply("prod");
    let files = data_files(&p);
    p.write("efmesh.toml", &format!("{CONFIG}\n{}", DL_CONFIG.replace("lake_data", "lake_data2")));
    p.write("models/m.lua", &big_model(2));
    for args in [&["apply", "prod", "--yes"][..], &["status", "prod", "--check"][..]] {
        let run = p.run(args);
        run.expect_code(1);
        // `apply` fails with it; `status --check` reports it as a problem (stdout).
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(said.contains("records its data path") && said.contains("lake_data/") && said.contains("lake_data2/"), "{args:?}: {said}");
    }
    assert!(!p.root().join("lake_data2").exists(), "nothing written under the edited path");
    assert_eq!(data_files(&p), files, "the recorded data path untouched");
}

/// A DuckLake project whose tables DuckLake writes as parquet files (inserts of more than a few
/// rows; small ones it inlines in the catalog, where a lost data path loses nothing): a
/// time-range model of 48 rows a day (a half-hour grid) and a `full` one of 1000 rows.
fn files_project() -> Project {
    let mut p = Project::new();
    p.now = NOW_DL.to_string();
    p.write("efmesh.toml", &format!("{CONFIG}\n{DL_CONFIG}"));
    let half = r#"define_model {
  name = "m.half",
  kind = kind.incremental_by_time_range { time_column = "ts", start = "2026-01-01", grain = "day", batch_size = 4 },
  target = "ducklake",
  schema = { { "ts", "timestamp" }, { "n", "bigint" } },
  query = "SELECT CAST(range AS TIMESTAMP) AS ts, CAST(epoch(range) / 1800 AS BIGINT) AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 30 MINUTE)",
}
"#;
    p.write("models/m.lua", &format!("{half}{}", big_model(1)));
    p
}

/// The DuckLake data path moved away with the catalog unchanged: the catalog still lists every
/// file of the served tables, and every query of them fails. `status --check` said healthy and
/// `plan`, `run` and `apply` had nothing to do, and a `restate` then `run` failed on the engine's
/// bare `IO Error` of the batch's `DELETE`. Now the plan reads the catalog's files: `status
/// --check` is unhealthy naming the model and a missing file in its table's directory, `plan`
/// rebuilds both tables (`repair.ducklakeFilesMissing`), `restate` and `run` refuse naming them,
/// and `apply` recomputes every interval into the table anew.
#[test]
fn lost_ducklake_data_files_are_found_by_plan_and_status_and_rebuilt_by_apply() {
    let p = files_project();
    let applied = p.apply("prod");
    assert_eq!(applied["intervals"], Value::from(9));
    let half = format!("m__half__{}", fp(&applied, "m.half"));
    let half_physical = action(&applied, "m.half")["physical"].as_str().expect("physical").to_string();
    let files = data_files(&p);
    assert!(files.iter().any(|f| f.starts_with(&format!("{half}/"))) && files.iter().any(|f| f.starts_with("m__big__")), "DuckLake wrote files: {files:?}");
    assert_eq!(rows(&p, &env_view("prod", "m.half")).len(), 9 * 48);
    p.run(&["status", "prod", "--check"]).expect_code(0);

    fs_err::rename(p.root().join("lake_data"), p.root().join("lake_data_moved")).expect("move the data path away");
    assert!(open(&p).query(&format!("SELECT CAST(sum(n) AS VARCHAR) FROM {}", env_view("prod", "m.half"))).is_err(), "the table cannot be read");

    // `status --check`: unhealthy, naming the models, the table and a missing file of it.
    let status = p.run(&["status", "prod", "--check"]);
    status.expect_code(1);
    let file_of_half = format!("lake_data/main/{half}/ducklake-");
    for needle in ["`m.half`", "`m.big`", half_physical.as_str(), "data file(s)", file_of_half.as_str()] {
        assert!(status.stdout.contains(needle), "status does not say {needle:?}:\n{}", status.stdout);
    }

    // `plan`: both tables rebuilt, every interval of the time-range one recomputed.
    let plan = p.plan("prod");
    assert_eq!(plan["hasChanges"], Value::Bool(true), "{plan:#}");
    let a = action(&plan, "m.half");
    assert_eq!(a["repair"]["physicalMissing"], Value::Bool(true), "{a:#}");
    let missing: Vec<&str> = a["repair"]["ducklakeFilesMissing"].as_array().expect("ducklakeFilesMissing").iter().filter_map(Value::as_str).collect();
    assert!(!missing.is_empty() && missing.iter().all(|f| f.contains(&format!("lake_data/main/{half}/"))), "{a:#}");
    assert_eq!((a["build"].clone(), a["intervals"].clone()), (Value::Bool(true), Value::from(9)), "{a:#}");
    assert_eq!(action(&plan, "m.big")["repair"]["ducklakeFilesMissing"].as_array().map(Vec::len), Some(1), "{plan:#}");
    let text = p.run(&["plan", "prod"]);
    text.expect_code(0);
    assert!(text.stderr.contains(&format!("DuckLake table {half_physical} of `m.half` lacks")), "{}", text.stderr);

    // `restate` and `run` refuse, naming the model and a file, never the engine's error.
    let restate = p.run(&["restate", "prod", "--model", "m.half", "--from", "2026-01-01T00:00:00.000Z", "--to", "2026-01-03T00:00:00.000Z"]);
    restate.expect_code(1);
    let run = p.run(&["run", "prod"]);
    run.expect_code(2);
    for (what, r) in [("restate", &restate), ("run", &run)] {
        for needle in ["m.half: DuckLake table ", half_physical.as_str(), file_of_half.as_str(), "`apply` repairs it"] {
            assert!(r.stderr.contains(needle), "{what} does not say {needle:?}:\n{}", r.stderr);
        }
        assert!(!r.stderr.contains("IO Error"), "{what}: {}", r.stderr);
    }
    assert_eq!(p.state().done_intervals("m.half", &fp(&applied, "m.half")).unwrap().len(), 9, "nothing restated");

    // `apply` rebuilds both tables from their sources; all is healthy again.
    let repaired = p.apply("prod");
    assert!(string_set(&repaired["built"]).is_superset(&set(&["m.half", "m.big"])), "{repaired:#}");
    assert_eq!(repaired["intervals"], Value::from(9), "{repaired:#}");
    assert_eq!(rows(&p, &env_view("prod", "m.half")).len(), 9 * 48);
    let sum: i64 = (0..1000).sum();
    assert_eq!(count_sum(&p, &env_view("prod", "m.big")), vec![Some("1000".into()), Some(sum.to_string())]);
    assert_eq!(p.state().done_intervals("m.half", &fp(&applied, "m.half")).unwrap().len(), 9);
    assert!(data_files(&p).iter().any(|f| f.starts_with(&format!("{half}/"))), "the table's files are written anew");
    p.run(&["status", "prod", "--check"]).expect_code(0);
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));
}

/// `status --check` with an unapplied edit of the time-range model checks the files of the table
/// of the version the environment serves (the plan checks the project's version): a lost data
/// path makes it unhealthy, naming the model and a missing file of that table
/// (`duckLakeFileMissing`).
#[test]
fn status_names_a_lost_ducklake_data_file_of_the_served_version_of_a_model_edited_but_not_applied() {
    let p = files_project();
    let applied = p.apply("prod");
    let fingerprint = fp(&applied, "m.half");
    let half = format!("m__half__{fingerprint}");
    p.write("models/m.lua", &p.read("models/m.lua").replace("/ 1800 AS BIGINT) AS n", "/ 1800 AS BIGINT) + 0 AS n"));
    assert_ne!(action(&p.plan("prod"), "m.half")["change"], "unchanged");
    p.run(&["status", "prod", "--check"]).expect_code(0);

    fs_err::rename(p.root().join("lake_data"), p.root().join("lake_data_moved")).expect("move the data path away");
    let text = p.run(&["status", "prod", "--check"]);
    text.expect_code(1);
    let line = text.stdout.lines().find(|l| l.contains("⚠ m.half  DuckLake data file ")).unwrap_or_else(|| panic!("{}", text.stdout));
    assert!(
        line.contains(&format!("lake_data/main/{half}/ducklake-")) && line.contains("missing (the version `prod` serves; the project defines another version)"),
        "{line}"
    );
    let status = p.run(&["status", "prod", "--check", "--json"]).expect_code(1).json();
    let lost = status["lostRelations"].as_array().expect("lostRelations");
    assert!(
        lost.iter().any(|l| l["model"] == "m.half"
            && l["fingerprint"] == fingerprint.as_str()
            && l["lack"] == "duckLakeFileMissing"
            && l["relation"].as_str().is_some_and(|r| r.contains(&format!("lake_data/main/{half}/")))),
        "{status:#}"
    );
}

/// An `apply` whose plan could not read the DuckLake catalog (another process held it, so the plan
/// warned and assumed the files there) while the data path was gone: it refuses before writing
/// anything, naming the model, its table and a missing file, instead of the engine's `IO Error`
/// of a batch's `DELETE`; the next apply's plan rebuilds the tables.
#[test]
fn an_apply_whose_plan_missed_lost_ducklake_files_refuses_before_writing() {
    use std::io::BufRead;
    let mut p = files_project();
    let applied = p.apply("prod");
    let half_physical = action(&applied, "m.half")["physical"].as_str().expect("physical").to_string();
    fs_err::rename(p.root().join("lake_data"), p.root().join("lake_data_moved")).expect("move the data path away");
    // Two more days to compute: the apply has work.
    p.now = "2026-01-12T00:00:00Z".into();
    // The catalog held by another process while the apply plans; released before it writes.
    let catalog = p.root().join("catalog/lake.ducklake");
    let holder = efmesh::engine::duckdb::DuckDb::open(&catalog, &efmesh::config::EngineSection::default()).expect("hold the catalog");
    let mut child = p.command(&["apply", "prod", "--yes"]).env(efmesh::apply::fault::DELAY_ENV, "apply-after-plan=5000").spawn().expect("spawn efmesh");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    let mut line = String::new();
    while stderr.read_line(&mut line).expect("read stderr") > 0 {
        said.push_str(&line);
        let warned = line.contains("cannot read the DuckLake catalog's data files");
        line.clear();
        if warned {
            break;
        }
    }
    drop(holder);
    assert!(said.contains("cannot read the DuckLake catalog's data files"), "the plan warned: {said}");
    // What the apply said once the catalog was released.
    let mut refusal = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut refusal).expect("read stderr");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1), "{said}{refusal}");
    for needle in ["`m.half`: its DuckLake table", half_physical.as_str(), "lake_data/main/", "/ducklake-", "nothing was written", "efmesh apply prod"] {
        assert!(refusal.contains(needle), "the refusal does not say {needle:?}:\n{refusal}");
    }
    assert!(!refusal.contains("IO Error"), "{refusal}");
    assert_eq!(p.state().done_intervals("m.half", &fp(&applied, "m.half")).unwrap().len(), 9, "no interval written");

    // The catalog readable, the plan rebuilds the tables: every interval, the two new days too.
    let repaired = p.apply("prod");
    assert_eq!(repaired["intervals"], Value::from(11), "{repaired:#}");
    assert_eq!(rows(&p, &env_view("prod", "m.half")).len(), 11 * 48);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// A `plan` (or `status --check`) of the project reads the DuckLake catalog file read-only for a
/// moment to check its data files; a `run` or `apply` attaching it read-write meanwhile waits for
/// that read to let go instead of failing on the file's lock.
#[test]
fn a_write_waits_for_a_read_of_the_ducklake_catalog_to_let_go() {
    use std::io::BufRead;
    let mut p = files_project();
    p.apply("prod");
    p.now = "2026-01-12T00:00:00Z".into();
    let catalog = p.root().join("catalog/lake.ducklake");
    let reader = efmesh::engine::duckdb::DuckDb::open_read_only(&catalog, &efmesh::config::EngineSection::default()).expect("read the catalog");
    let mut child = p.command(&["run", "prod", "--log-level", "debug"]).spawn().expect("spawn efmesh");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let (mut said, mut line) = (String::new(), String::new());
    while stderr.read_line(&mut line).expect("read stderr") > 0 {
        said.push_str(&line);
        let waits = line.contains("held by another process's read: waiting");
        line.clear();
        if waits {
            break;
        }
    }
    drop(reader);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read stderr");
    let out = child.wait_with_output().expect("wait");
    assert!(said.contains("held by another process's read: waiting"), "the run met the reader's lock: {said}{rest}");
    assert_eq!(out.status.code(), Some(0), "{said}{rest}");
    assert_eq!(rows(&p, &env_view("prod", "m.half")).len(), 11 * 48, "the two new days written");
}

/// `prod` serves a forward-only version of a DuckLake time-range model that added a column to the
/// table `dev`'s older version shares. With the table's data files lost, an apply of `dev` would
/// rebuild the table from `dev`'s version alone, without the column `prod`'s view selects: it is
/// refused before the table is dropped; `apply prod` rebuilds the table with it.
#[test]
fn a_lost_ducklake_table_is_not_rebuilt_without_a_column_another_environment_serves() {
    let p = files_project();
    p.apply("prod");
    p.apply("dev");
    let v1 = p.read("models/m.lua");
    let v2 = v1.replace(
        "{ \"n\", \"bigint\" } },\n  query = \"SELECT CAST(range AS TIMESTAMP) AS ts, CAST(epoch(range) / 1800 AS BIGINT) AS n FROM",
        "{ \"n\", \"bigint\" }, { \"w\", \"bigint\" } },\n  query = \"SELECT CAST(range AS TIMESTAMP) AS ts, CAST(epoch(range) / 1800 AS BIGINT) AS n, 7 AS w FROM",
    );
    assert_ne!(v1, v2);
    p.write("models/m.lua", &v2);
    p.run(&["apply", "prod", "--yes", "--forward-only", "m.half"]).expect_code(0);
    fs_err::rename(p.root().join("lake_data"), p.root().join("lake_data_moved")).expect("move the data path away");
    p.write("models/m.lua", &v1);
    let refused = p.run(&["apply", "dev", "--yes"]);
    refused.expect_code(1);
    // Refused as a table taken over by the version `prod` serves (or, were that not found, as a
    // rebuild lacking `w`): nothing dropped.
    assert!(refused.stderr.contains("`m.half`"), "{}", refused.stderr);
    assert!(refused.stderr.contains("taken over by the newer version") || refused.stderr.contains("declares `w` this version does not"), "{}", refused.stderr);
    assert!(catalog_tables(&p).iter().any(|t| t.starts_with("m__half__")), "the table is not dropped");
    p.write("models/m.lua", &v2);
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(rows(&p, &env_view("prod", "m.half")).len(), 9 * 48);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}
