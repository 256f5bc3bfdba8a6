//! `efmesh janitor` (issue 12 item 5): what it drops and never drops, the ttl, orphans, parquet
//! lake directories, failed drops retried, a killed janitor's claims finished, and the race
//! with an apply that re-points an old version.
//!
//! Snapshots record the real instant they were written, so these tests collect with a `--now`
//! far in the future (or just past the real instant, for the ttl).
//!
//! Test hooks used (documented in `src/apply/fault.rs`): `EFMESH_FAULT=janitor-after-claim`
//! (the janitor aborts after its claim) and `EFMESH_DELAY=<point>=<ms>` (a process sleeps at a
//! point: `apply-after-plan`, `janitor-before-claim`).

use crate::common::*;
use efmesh::core::interval::{now_millis, to_iso};
use serde_json::Value;
use std::collections::BTreeSet;

/// Far enough in the future that every version is older than any ttl these tests use.
const LATER: &str = "2099-01-01T00:00:00Z";

/// `s.m` (full, `SELECT <v> AS x`) and `s.v` (view over it).
fn models(v: i64) -> String {
    format!(
        r#"define_model {{ name = "s.m", kind = kind.full(), schema = {{ {{ "x", "bigint" }} }}, query = "SELECT CAST({v} AS BIGINT) AS x" }}
define_model {{ name = "s.v", kind = kind.view(), schema = {{ {{ "x", "bigint" }} }}, query = "SELECT x FROM " .. ref("s.m") }}
"#
    )
}

fn project(v: i64) -> Project {
    project_with(StateBackend::Sqlite, EngineBackend::DuckDb, v)
}

fn project_on_engine(engine: EngineBackend, v: i64) -> Project {
    project_with(StateBackend::Sqlite, engine, v)
}

fn project_with(backend: StateBackend, engine: EngineBackend, v: i64) -> Project {
    let p = Project::with(backend, engine);
    p.write("models/m.lua", &models(v));
    p
}

/// A relation name of the physical-name shape (`s__<table>__<fingerprint>`) that no state store
/// knows: a full fingerprint on DuckDB, as many digits as a shortened name keeps within
/// Postgres's 63-byte identifiers on Postgres.
fn orphan_name(p: &Project, table: &str) -> String {
    let digits = if p.on_postgres() { 40 } else { 64 };
    format!("s__{table}__{}", "c".repeat(digits))
}

/// Runs the janitor with `--now now` and `args`.
fn janitor(p: &mut Project, now: &str, args: &[&str]) -> Run {
    let saved = std::mem::replace(&mut p.now, now.to_string());
    let mut all = vec!["janitor"];
    all.extend_from_slice(args);
    let r = p.run(&all);
    p.now = saved;
    r
}

/// `physical` of every entry of a janitor report list.
fn physicals(v: &Value, key: &str) -> BTreeSet<String> {
    v[key].as_array().unwrap_or_else(|| panic!("no `{key}` in {v:#}")).iter().map(|d| d["physical"].as_str().unwrap().to_string()).collect()
}

/// `"_efmesh"."<schema>__<table>__<fp>"` of a model's version in an apply result.
fn physical_of(applied: &Value, model: &str) -> String {
    action(applied, model)["physical"].as_str().unwrap_or_else(|| panic!("no physical for {model}")).to_string()
}

/// The relation name inside a quoted physical name.
fn table_name(physical: &str) -> String {
    physical.rsplit("\".\"").next().unwrap().trim_matches('"').to_string()
}

// On each engine, and on a Postgres state store.
crate::on_every_engine_and_state_backend!(
    dry_run_lists_and_changes_nothing_then_only_unreachable_versions_are_dropped,
    the_ttl_counts_from_when_a_version_stopped_being_served,
    orphans_are_found_and_dropped_other_relations_left_alone,
);

crate::on_every_engine!(
    a_forward_only_shared_table_is_kept_while_one_sharer_is_served,
    a_killed_janitors_claims_are_finished_by_the_next_one,
    janitor_racing_an_apply_that_repoints_an_old_version_never_leaves_a_view_on_a_dropped_relation,
    an_orphan_is_dropped_only_once_seen_for_the_ttl,
    storage_written_before_owner_markers_keeps_its_orphans_until_adopted,
    a_version_another_store_serves_is_kept_until_the_last_store_moves_on,
    a_store_re_pointing_a_version_another_stores_janitor_dropped_rebuilds_it,
    a_use_recorded_between_a_janitors_claim_and_its_drop_keeps_the_relation,
    two_state_stores_sharing_one_engine_never_collect_each_others_storage,
    an_apply_never_re_points_the_environment_views_another_store_made,
    a_store_that_promoted_last_never_takes_over_a_view_another_store_made_before,
    a_version_a_store_knows_from_another_environment_never_makes_anothers_view_its_own,
    two_checkouts_at_one_commit_never_share_an_environments_views,
    a_stores_own_view_pointed_elsewhere_is_repaired_while_an_unrelated_store_is_present,
    an_orphan_a_view_still_reads_is_kept_until_the_view_moves,
);

/// Rows of the `condemned` table (claims not dropped yet).
fn condemned(p: &Project) -> i64 {
    rusqlite::Connection::open(p.state_path()).unwrap().query_row("SELECT count(*) FROM condemned", [], |r| r.get(0)).unwrap()
}

/// Every environment's views serve exactly the physical relation its pointer names (read back
/// through the view definition) and are queryable.
#[track_caller]
fn assert_views_serve_pointers(p: &Project, models: &[&str]) {
    let state = p.store().expect("a state store");
    assert_views_serve_pointers_in(p, &*state, models);
}

/// [`assert_views_serve_pointers`] for the state store at `rel`.
#[track_caller]
fn assert_views_serve_pointers_of(p: &Project, rel: &str, models: &[&str]) {
    let state = efmesh::state::SqliteStore::open(&p.root().join(rel)).expect("open state store");
    assert_views_serve_pointers_in(p, &state, models);
}

#[track_caller]
fn assert_views_serve_pointers_in(p: &Project, state: &dyn StateStore, models: &[&str]) {
    for env in state.environments().unwrap() {
        let pointers = state.env_pointers(&env).unwrap();
        for m in models {
            let Some(fp) = pointers.get(*m) else { continue };
            let snapshot = state.snapshot(m, fp).unwrap().unwrap_or_else(|| panic!("{env}: `{m}` points at {fp}, which has no snapshot"));
            let (schema, table) = m.split_once('.').unwrap();
            let schema = if env == "prod" { schema.to_string() } else { format!("{env}__{schema}") };
            let sql = if p.on_postgres() {
                p.query(&format!("SELECT definition FROM pg_views WHERE schemaname = '{schema}' AND viewname = '{table}'"))
            } else {
                p.query(&format!("SELECT sql FROM duckdb_views() WHERE schema_name = '{schema}' AND view_name = '{table}'"))
            };
            let sql = sql.first().and_then(|r| r[0].clone()).unwrap_or_else(|| panic!("{env}: no view for `{m}`"));
            assert!(
                sql.replace('"', "").to_lowercase().contains(&snapshot.physical.replace('"', "").to_lowercase()),
                "{env}: the view of `{m}` does not select from {}: {sql}",
                snapshot.physical
            );
            p.query(&format!("SELECT count(*) FROM \"{schema}\".\"{table}\""));
        }
    }
}

fn dry_run_lists_and_changes_nothing_then_only_unreachable_versions_are_dropped(backend: StateBackend, engine: EngineBackend) {
    let mut p = project_with(backend, engine, 1);
    p.apply("prod");
    p.write("models/m.lua", &models(2));
    let two = p.apply("dev");
    p.write("models/m.lua", &models(3));
    p.apply("dev");
    let unreachable = BTreeSet::from([physical_of(&two, "s.m"), physical_of(&two, "s.v")]);
    let (tables, summary) = (p.physical_tables(), p.state_summary());
    assert_eq!(tables.len(), 6, "{tables:?}");

    let dry = janitor(&mut p, LATER, &["--ttl", "0", "--dry-run", "--json"]);
    let v = dry.expect_code(0).json();
    assert_eq!(v["dryRun"], Value::Bool(true));
    assert_eq!(physicals(&v, "dropped"), unreachable, "{v:#}");
    assert_eq!(p.physical_tables(), tables, "a dry run drops nothing");
    assert_eq!(p.state_summary(), summary, "a dry run changes no state");

    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
    let v = r.expect_code(0).json();
    assert_eq!((v["dryRun"].clone(), v["ttlDays"].as_f64()), (Value::Bool(false), Some(0.0)));
    assert_eq!(physicals(&v, "dropped"), unreachable, "{v:#}");
    assert!(v["orphans"].as_array().unwrap().is_empty() && v["failed"].as_array().unwrap().is_empty(), "{v:#}");
    let left: BTreeSet<String> = p.physical_tables().into_iter().collect();
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(unreachable.iter().all(|u| !left.contains(&table_name(u))), "{left:?}");
    // prod and dev still serve their versions, and their rows.
    assert_views_serve_pointers(&p, &["s.m", "s.v"]);
    assert_eq!(p.rows("s.v"), vec![vec![Some("1".to_string())]]);
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("3".to_string())]]);
    let after = p.state_summary();
    assert_eq!(after.pointers, summary.pointers);
    assert_eq!(after.snapshots.len(), summary.snapshots.len() - 2, "the two versions' snapshots went with their storage");
    // The text report, and nothing left to do.
    let again = janitor(&mut p, LATER, &["--ttl", "0"]);
    assert!(again.expect_code(0).stdout.contains("nothing to collect"), "{again:#?}");
    // Applying the dropped version again rebuilds it.
    p.write("models/m.lua", &models(2));
    let rebuilt = p.apply("dev");
    assert_eq!(string_set(&rebuilt["built"]), set(&["s.m", "s.v"]));
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);
}

fn the_ttl_counts_from_when_a_version_stopped_being_served(backend: StateBackend, engine: EngineBackend) {
    let mut p = project_with(backend, engine, 1);
    let one = p.apply("dev");
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    let now = now_millis();
    let day = 86_400_000;
    // Released moments ago: younger than a week, younger than half a day.
    for (at, ttl) in [(now, "7"), (now + day / 4, "0.5")] {
        let v = janitor(&mut p, &to_iso(at), &["--ttl", ttl, "--json"]).expect_code(0).json();
        assert!(v["dropped"].as_array().unwrap().is_empty(), "ttl {ttl}: {v:#}");
    }
    assert!(p.physical_tables().contains(&table_name(&physical_of(&one, "s.m"))));
    // Eight days later the week is over.
    let v = janitor(&mut p, &to_iso(now + 8 * day), &["--json"]).expect_code(0).json();
    assert_eq!(v["ttlDays"].as_f64(), Some(7.0));
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([physical_of(&one, "s.m"), physical_of(&one, "s.v")]));
    assert!(v["dropped"].as_array().unwrap().iter().all(|d| d["ageDays"].as_f64().is_some_and(|a| a >= 7.0)), "{v:#}");
}

/// `--ttl` takes the configuration's duration spellings (`7d`, `12h`, `1w`) as well as days
/// (`--ttl 7d` was refused as "invalid float literal" while `[environments] ttl = "7d"` is the
/// configuration's spelling); a unit it does not know is a usage error naming the units.
#[test]
fn the_ttl_flag_takes_a_duration_as_the_configuration_spells_it() {
    let mut p = project(1);
    let one = p.apply("dev");
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    let now = now_millis();
    let day = 86_400_000;
    for (at, ttl, days) in [(now, "7d", 7.0), (now + day / 4, "12h", 0.5)] {
        let v = janitor(&mut p, &to_iso(at), &["--ttl", ttl, "--json"]).expect_code(0).json();
        assert_eq!(v["ttlDays"].as_f64(), Some(days), "ttl {ttl}: {v:#}");
        assert!(v["dropped"].as_array().unwrap().is_empty(), "ttl {ttl}: {v:#}");
    }
    let v = janitor(&mut p, &to_iso(now + 8 * day), &["--ttl", "1w", "--json"]).expect_code(0).json();
    assert_eq!(v["ttlDays"].as_f64(), Some(7.0));
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([physical_of(&one, "s.m"), physical_of(&one, "s.v")]));
    let bad = janitor(&mut p, LATER, &["--ttl", "7 parsecs"]);
    bad.expect_code(1);
    assert!(bad.stderr.contains("unit must be ms, s, m, h, d or w"), "{}", bad.stderr);
}

/// A time-range model whose second version is forward-only (it keeps the first version's table).
fn forward_only_models(extra_col: bool, tag: &str) -> String {
    let (col, sel) = if extra_col { (r#", { "y", "bigint" }"#, ", CAST(2 AS BIGINT) AS y") } else { ("", "") };
    format!(
        r#"define_model {{
  name = "t.d",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-02-07", grain = "day" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "varchar" }}{col} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, '{tag}' AS v{sel}",
}}
"#
    )
}

fn a_forward_only_shared_table_is_kept_while_one_sharer_is_served(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.write("models/d.lua", &forward_only_models(false, "a"));
    let first = p.apply("dev");
    let table = physical_of(&first, "t.d");
    p.write("models/d.lua", &forward_only_models(true, "a"));
    let fo = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "t.d"]).expect_code(0).json();
    assert_eq!(physical_of(&fo, "t.d"), table, "the forward-only version inherits the table");
    // The first version is served by nobody, but its table is the served version's.
    let rows = p.rows("dev__t.d");
    assert!(!rows.is_empty());
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert!(v["dropped"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(p.physical_tables().contains(&table_name(&table)));
    assert_eq!(p.rows("dev__t.d"), rows, "dev still serves the shared table's rows");
    // A breaking change gives dev a table of its own: both sharers are unreachable, and go together.
    p.write("models/d.lua", &forward_only_models(true, "b"));
    p.apply("dev");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([table.clone()]), "{v:#}");
    assert_eq!(v["dropped"][0]["versions"].as_array().map(Vec::len), Some(2), "{v:#}");
    assert!(!p.physical_tables().contains(&table_name(&table)));
    assert_views_serve_pointers(&p, &["t.d"]);
}

fn orphans_are_found_and_dropped_other_relations_left_alone(backend: StateBackend, engine: EngineBackend) {
    let mut p = project_with(backend, engine, 1);
    p.apply("dev");
    let orphan = orphan_name(&p, "gone");
    p.query(&format!("CREATE TABLE \"_efmesh\".\"{orphan}\" AS SELECT 1 AS x"));
    p.query("CREATE TABLE \"_efmesh\".\"my_scratch\" AS SELECT 1 AS x");
    let dry = janitor(&mut p, LATER, &["--ttl", "0", "--dry-run", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&dry, "orphans"), BTreeSet::from([format!("\"_efmesh\".\"{orphan}\"")]), "{dry:#}");
    assert!(p.physical_tables().contains(&orphan));
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "orphans"), BTreeSet::from([format!("\"_efmesh\".\"{orphan}\"")]), "{v:#}");
    assert!(v["dropped"].as_array().unwrap().is_empty(), "served versions are not orphans: {v:#}");
    let tables = p.physical_tables();
    assert!(!tables.contains(&orphan) && tables.contains(&"my_scratch".to_string()), "{tables:?}");
    assert_views_serve_pointers(&p, &["s.m", "s.v"]);
}

/// A project with `s.m` stored in a local parquet lake (`lake/`).
fn lake_project(v: i64) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &format!("{CONFIG}\n[lake]\npath = \"lake\"\n"));
    p.write("models/m.lua", &lake_models(v));
    p
}

fn lake_models(v: i64) -> String {
    format!(
        r#"define_model {{ name = "s.m", kind = kind.full(), target = "parquet", schema = {{ {{ "x", "bigint" }} }}, query = "SELECT CAST({v} AS BIGINT) AS x" }}"#
    )
}

/// `lake/s__m/<fp>` of the version an apply result names.
fn lake_dir(p: &Project, applied: &Value) -> std::path::PathBuf {
    let name = table_name(&physical_of(applied, "s.m"));
    let fp = name.rsplit("__").next().unwrap();
    p.root().join("lake/s__m").join(fp)
}

#[test]
fn a_parquet_lake_version_directory_is_removed_with_its_view() {
    let mut p = lake_project(1);
    let one = p.apply("dev");
    p.write("models/m.lua", &lake_models(2));
    let two = p.apply("dev");
    let (old, new) = (lake_dir(&p, &one), lake_dir(&p, &two));
    assert!(old.join("data.parquet").exists() && new.join("data.parquet").exists());
    // A version directory nobody knows: an orphan.
    let stray = p.root().join("lake/s__m").join("d".repeat(64));
    fs_err::create_dir_all(&stray).unwrap();
    fs_err::write(stray.join("data.parquet"), "not parquet").unwrap();
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([physical_of(&one, "s.m")]), "{v:#}");
    let reported = v["dropped"][0]["lakeDir"].as_str().map(std::path::PathBuf::from).unwrap_or_else(|| panic!("no lakeDir in {v:#}"));
    assert!(reported.ends_with(old.strip_prefix(p.root()).unwrap()), "{reported:?} is not {old:?}");
    assert_eq!(v["orphans"].as_array().map(Vec::len), Some(1), "{v:#}");
    assert!(!old.exists() && !stray.exists() && new.join("data.parquet").exists());
    assert!(!p.physical_tables().contains(&table_name(&physical_of(&one, "s.m"))));
    assert_eq!(p.rows("dev__s.m"), vec![vec![Some("2".to_string())]]);
}

#[test]
fn a_failed_drop_is_reported_with_exit_1_and_retried_by_the_next_janitor() {
    let mut p = lake_project(1);
    let one = p.apply("dev");
    p.write("models/m.lua", &lake_models(2));
    p.apply("dev");
    // The old version's directory is now a symbolic link out of the lake: never followed.
    let old = lake_dir(&p, &one);
    let outside = tempfile::tempdir().unwrap();
    let moved = outside.path().join("kept");
    fs_err::rename(&old, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &old).unwrap();
    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
    let v = r.expect_code(1).json();
    assert_eq!(physicals(&v, "failed"), BTreeSet::from([physical_of(&one, "s.m")]), "{v:#}");
    assert!(v["failed"][0]["error"].as_str().unwrap().contains("symbolic link"), "{v:#}");
    assert!(r.stderr.contains("cannot drop"), "{}", r.stderr);
    assert!(moved.join("data.parquet").exists(), "nothing outside the lake is touched");
    assert_eq!(condemned(&p), 1, "the failed drop stays claimed");
    // Applying the claimed version is refused while it is claimed.
    p.write("models/m.lua", &lake_models(1));
    let refused = p.run(&["apply", "dev", "--yes"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("reclaimed by the janitor"), "{}", refused.stderr);
    assert_eq!(p.rows("dev__s.m"), vec![vec![Some("2".to_string())]]);
    // The operator removes the link; the next janitor finishes the claim.
    fs_err::remove_file(&old).unwrap();
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([physical_of(&one, "s.m")]), "{v:#}");
    assert_eq!(v["dropped"][0]["leftOver"], Value::Bool(true), "{v:#}");
    assert_eq!(condemned(&p), 0);
    // Now the version can be built again.
    let again = p.apply("dev");
    assert_eq!(string_set(&again["built"]), set(&["s.m"]));
    assert_eq!(p.rows("dev__s.m"), vec![vec![Some("1".to_string())]]);
}

fn a_killed_janitors_claims_are_finished_by_the_next_one(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    let one = p.apply("dev");
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    p.now = LATER.to_string();
    let killed = Run::from_output(p.command(&["janitor", "--ttl", "0"]).env("EFMESH_FAULT", "janitor-after-claim").output().unwrap(), "janitor".into());
    assert_ne!(killed.code, 0, "{killed:#?}");
    assert!(killed.stderr.contains("janitor-after-claim"), "{}", killed.stderr);
    assert_eq!(condemned(&p), 2, "both claims recorded");
    assert!(p.physical_tables().contains(&table_name(&physical_of(&one, "s.m"))), "nothing dropped yet");
    assert!(p.state().snapshot("s.m", action(&one, "s.m")["fingerprint"].as_str().unwrap()).unwrap().is_none());
    // An apply relying on a claimed version is refused, and changes nothing.
    p.write("models/m.lua", &models(1));
    let before = p.state_summary();
    let refused = p.run(&["apply", "dev", "--yes", "--json"]);
    refused.expect_code(1);
    assert_eq!(refused.json()["error"]["kind"], "reclaimed", "{}", refused.stdout);
    assert!(refused.stderr.contains("reclaimed by the janitor after this plan was made") && refused.stderr.contains("plan again"), "{}", refused.stderr);
    assert_eq!(p.state_summary(), before);
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);
    // The janitor's lock of the killed process is stale: the next janitor reclaims it and drops.
    let v = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([physical_of(&one, "s.m"), physical_of(&one, "s.v")]), "{v:#}");
    assert!(v["dropped"].as_array().unwrap().iter().all(|d| d["leftOver"] == Value::Bool(true)), "{v:#}");
    assert_eq!(condemned(&p), 0);
    p.now = NOW.to_string();
    let rebuilt = p.apply("dev");
    assert_eq!(string_set(&rebuilt["built"]), set(&["s.m", "s.v"]));
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("1".to_string())]]);
    assert_views_serve_pointers(&p, &["s.m", "s.v"]);
}

/// The unserved snapshot of the layout-4 fixture counts as released at the upgrade: its ttl
/// starts then, not at its creation.
#[test]
fn the_v4_fixtures_unserved_snapshot_counts_as_released_at_the_upgrade() {
    let mut p = project(1);
    let sql = fs_err::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-v4.sql")).unwrap();
    rusqlite::Connection::open(p.state_path()).unwrap().execute_batch(&sql).unwrap();
    let before = now_millis();
    p.run(&["migrate"]).expect_code(0);
    let released: Vec<(String, String)> = rusqlite::Connection::open(p.state_path())
        .unwrap()
        .prepare("SELECT fingerprint, released_at FROM released")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0].0, "b".repeat(64), "only the unserved snapshot");
    let at = efmesh::core::interval::parse_instant(&released[0].1).unwrap();
    assert!(at >= before - 1000, "released at the upgrade ({}), not before", released[0].1);
    // Created in 2026-01 but released just now: kept by a week's ttl, collected eight days on.
    let v = janitor(&mut p, &to_iso(now_millis()), &["--dry-run", "--json"]).expect_code(0).json();
    assert!(v["dropped"].as_array().unwrap().is_empty(), "{v:#}");
    let v = janitor(&mut p, &to_iso(now_millis() + 8 * 86_400_000), &["--dry-run", "--json"]).expect_code(0).json();
    assert_eq!(v["dropped"].as_array().map(Vec::len), Some(1), "{v:#}");
    assert_eq!(v["dropped"][0]["model"], "old.model");
}

#[test]
fn without_a_state_store_the_janitor_refuses_to_guess() {
    let mut p = project(1);
    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
    r.expect_code(1);
    assert!(r.stderr.contains("no state store"), "{}", r.stderr);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("nothing was done"));
}

/// `--ttl=-0` is a ttl of 0 days, printed so (never `ttl -0 days`, nor `-0.0` in JSON).
#[test]
fn a_ttl_of_negative_zero_is_a_ttl_of_zero() {
    let mut p = project(1);
    p.apply("prod");
    let r = janitor(&mut p, LATER, &["--ttl=-0"]);
    assert!(r.expect_code(0).stdout.contains("(ttl 0 days)") && !r.stdout.contains("ttl -0"), "{}", r.stdout);
    let v = janitor(&mut p, LATER, &["--ttl=-0", "--json"]).expect_code(0).json();
    assert_eq!(v["ttlDays"].as_f64().map(f64::is_sign_negative), Some(false), "{v:#}");
}

/// A small deterministic generator (xorshift) for the race's offsets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The race the issue asks for: a janitor with `--ttl 0` against an apply that re-points `dev`
/// at the version it served before (unreachable since), at least 50 times, with start offsets
/// and delay hooks spread so that the apply wins (a view swap), the janitor wins before the apply
/// plans (the apply rebuilds), and the janitor claims between the apply's plan and its intents
/// (the apply is refused with the janitor's message). After every iteration every environment's
/// views serve exactly what its pointers say.
fn janitor_racing_an_apply_that_repoints_an_old_version_never_leaves_a_view_on_a_dropped_relation(engine: EngineBackend) {
    let seed: u64 = std::env::var("EFMESH_JANITOR_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x1a41_7012);
    let mut rng = Rng(seed | 1);
    let mut p = project_on_engine(engine, 0);
    p.apply("prod");
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    p.write("models/m.lua", &models(1));
    p.apply("dev");
    // Every process of the race pretends it is far in the future: the janitor's ttl 0 takes
    // everything unreachable at once.
    p.now = LATER.to_string();
    let (mut swapped, mut rebuilt, mut refused) = (0, 0, 0);
    let iterations = 50;
    for i in 0..iterations {
        let serving: i64 = p.rows("dev__s.m")[0][0].as_deref().unwrap().parse().unwrap();
        let target = 3 - serving;
        p.write("models/m.lua", &models(target));
        // Three shapes, each with jitter: the janitor late (apply first), the janitor early
        // (before the apply plans), the janitor in the apply's window between plan and intents.
        let jitter = rng.below(60);
        let (apply_after, apply_delay, janitor_after, janitor_delay) = match (i + rng.below(3)) % 3 {
            0 => (0, 0, jitter, 250 + rng.below(100)),
            1 => (250 + jitter, 0, 0, 0),
            _ => (0, 300 + rng.below(100), 60 + jitter, 0),
        };
        let mut apply = p.command(&["apply", "dev", "--yes", "--json", "--retries", "6"]);
        apply.env("EFMESH_DELAY", format!("apply-after-plan={apply_delay}"));
        let mut jan = p.command(&["janitor", "--ttl", "0", "--json", "--wait", "10s"]);
        jan.env("EFMESH_DELAY", format!("janitor-before-claim={janitor_delay}"));
        let start = std::time::Instant::now();
        let mut order: Vec<(u64, &mut std::process::Command, &str)> = vec![(apply_after, &mut apply, "apply"), (janitor_after, &mut jan, "janitor")];
        order.sort_by_key(|o| o.0);
        let mut children = Vec::new();
        for (after, cmd, what) in order {
            let wait = std::time::Duration::from_millis(after).saturating_sub(start.elapsed());
            std::thread::sleep(wait);
            children.push((what, cmd.spawn().unwrap()));
        }
        let mut outputs = std::collections::BTreeMap::new();
        for (what, child) in children {
            outputs.insert(what, Run::from_output(child.wait_with_output().unwrap(), format!("{what} (iteration {i})")));
        }
        let (a, j) = (&outputs["apply"], &outputs["janitor"]);
        j.expect_code(0);
        let served: i64 = p.rows("dev__s.m")[0][0].as_deref().unwrap().parse().unwrap();
        match a.code {
            0 => {
                let v = a.json();
                assert_eq!(served, target, "iteration {i}: applied, so dev serves {target}\n{}", a.stderr);
                if v["built"].as_array().unwrap().is_empty() { swapped += 1 } else { rebuilt += 1 }
            }
            1 => {
                assert!(a.stderr.contains("reclaimed by the janitor after this plan was made"), "iteration {i}: apply failed otherwise:\n{}", a.stderr);
                assert_eq!(served, serving, "iteration {i}: refused, so dev still serves {serving}");
                refused += 1;
            }
            other => panic!("iteration {i}: apply exited {other}:\n{}", a.stderr),
        }
        assert_views_serve_pointers(&p, &["s.m", "s.v"]);
        assert_eq!(p.rows("s.v"), vec![vec![Some("0".to_string())]], "iteration {i}: prod untouched");
    }
    eprintln!("janitor race (seed {seed:#x}): {swapped} view swaps, {rebuilt} rebuilds, {refused} refusals over {iterations} iterations");
    assert!(swapped > 0 && rebuilt > 0 && refused > 0, "every interleaving happened: {swapped} swaps, {rebuilt} rebuilds, {refused} refusals");
}

/// DuckLake versions: the table of an unreachable version is dropped from the attached catalog,
/// and a table of the physical-name shape the state store does not know is an orphan.
#[test]
fn ducklake_tables_of_unreachable_versions_and_orphans_are_dropped() {
    let dl_model = |v: i64| {
        format!(
            r#"define_model {{ name = "m.total", kind = kind.full(), target = "ducklake", schema = {{ {{ "n", "bigint" }} }}, query = "SELECT CAST({v} AS BIGINT) AS n" }}"#
        )
    };
    let mut p = Project::new();
    p.write("efmesh.toml", &format!("{CONFIG}\n[ducklake]\ncatalog = \"catalog/lake.ducklake\"\ndata_path = \"lake_data\"\n"));
    p.write("models/m.lua", &dl_model(1));
    let one = p.apply("dev");
    p.write("models/m.lua", &dl_model(2));
    let two = p.apply("dev");
    let tables = |p: &Project| -> BTreeSet<String> {
        use efmesh::engine::Engine;
        let mut db = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
        db.execute(&format!("ATTACH 'ducklake:{}' AS \"_efmesh_ducklake\"", p.root().join("catalog/lake.ducklake").display())).expect("attach");
        db.query("SELECT table_name FROM information_schema.tables WHERE table_catalog = '_efmesh_ducklake' AND table_schema = 'main'")
            .unwrap()
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect()
    };
    let (old, new) = (physical_of(&one, "m.total"), physical_of(&two, "m.total"));
    assert!(old.starts_with("\"_efmesh_ducklake\".\"main\"."), "{old}");
    assert_eq!(tables(&p), BTreeSet::from([table_name(&old), table_name(&new)]));
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), BTreeSet::from([old.clone()]), "{v:#}");
    assert_eq!(tables(&p), BTreeSet::from([table_name(&new)]));
    // A table of the physical-name shape nobody knows is an orphan; the served version's
    // table, even with its snapshot row gone (a damaged store), is not.
    let stray = format!("m__gone__{}", "c".repeat(64));
    {
        use efmesh::engine::Engine;
        let mut db = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
        db.execute(&format!("ATTACH 'ducklake:{}' AS \"_efmesh_ducklake\"", p.root().join("catalog/lake.ducklake").display())).expect("attach");
        db.execute(&format!("CREATE TABLE \"_efmesh_ducklake\".\"main\".\"{stray}\" AS SELECT 1 AS x")).expect("create");
    }
    let fp = action(&two, "m.total")["fingerprint"].as_str().unwrap().to_string();
    rusqlite::Connection::open(p.state_path()).unwrap().execute("DELETE FROM snapshots WHERE fingerprint = ?1", [&fp]).unwrap();
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "orphans"), BTreeSet::from([format!("\"_efmesh_ducklake\".\"main\".\"{stray}\"")]), "{v:#}");
    assert_eq!(tables(&p), BTreeSet::from([table_name(&new)]), "the served table stays");
}

// ---------------------------------------------------------------------------------------------
// Ownership and age of orphans (SPEC invariant 39 (d))

/// The identity (`meta.store_id`) of the state store at `rel`.
fn store_id(p: &Project, rel: &str) -> String {
    rusqlite::Connection::open(p.root().join(rel)).unwrap().query_row("SELECT store_id FROM meta", [], |r| r.get(0)).unwrap()
}

/// Points the project at the state store `rel` (the DuckDB file stays the same).
fn use_state(p: &Project, rel: &str) {
    p.write("efmesh.toml", &p.config_with("").replace("efmesh.state.sqlite", rel));
}

/// `(physical, reason)` of every kept orphan of a janitor report.
fn kept(v: &Value) -> BTreeSet<(String, String)> {
    v["keptOrphans"]
        .as_array()
        .unwrap_or_else(|| panic!("no keptOrphans in {v:#}"))
        .iter()
        .map(|k| (k["physical"].as_str().unwrap().to_string(), k["reason"].as_str().unwrap().to_string()))
        .collect()
}

fn two_state_stores_sharing_one_engine_never_collect_each_others_storage(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    use_state(&p, "a.state.sqlite");
    let a = p.apply("dev");
    let a_phys = [physical_of(&a, "s.m"), physical_of(&a, "s.v")];
    // A second state store (another project, or the state file replaced) applying into the same file.
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &models(2).replace("\"s.", "\"t."));
    let b = p.apply("dev");
    let b_phys = [physical_of(&b, "t.m"), physical_of(&b, "t.v")];
    let (a_id, b_id) = (store_id(&p, "a.state.sqlite"), store_id(&p, "b.state.sqlite"));
    assert_ne!(a_id, b_id);
    for (me, other, others_phys) in [("b.state.sqlite", &a_id, &a_phys), ("a.state.sqlite", &b_id, &b_phys)] {
        use_state(&p, me);
        let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
        let v = r.expect_code(0).json();
        assert!(v["orphans"].as_array().unwrap().is_empty() && v["dropped"].as_array().unwrap().is_empty(), "{me}: {v:#}");
        let want: BTreeSet<(String, String)> = others_phys.iter().map(|ph| (ph.clone(), "foreign".to_string())).collect();
        assert_eq!(kept(&v), want, "{me}: the other store's versions are kept as foreign: {v:#}");
        assert_eq!(v["keptOrphans"][0]["owners"], serde_json::json!([other]), "{v:#}");
        assert!(r.stderr.contains(other.as_str()) && r.stderr.contains("--adopt"), "the warning names the other store and the way out: {}", r.stderr);
    }
    let tables = p.physical_tables();
    for ph in a_phys.iter().chain(&b_phys) {
        assert!(tables.contains(&table_name(ph)), "{ph} was dropped: {tables:?}");
    }
    assert_eq!(p.rows("dev__s.m"), vec![vec![Some("1".to_string())]]);
    assert_eq!(p.rows("dev__t.m"), vec![vec![Some("2".to_string())]]);
    // The way out when the other store is gone for good: adopt, then its storage is collected —
    // not while store A's environment views still read it (that would break them): kept, the
    // views named.
    use_state(&p, "b.state.sqlite");
    let text = janitor(&mut p, LATER, &["--ttl", "0", "--adopt"]).expect_code(0).stdout.clone();
    assert!(
        text.contains("read it") && text.contains("dev__s") && !text.contains("also owned by state store(s) \n"),
        "the text names the reading views: {text}"
    );
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--adopt", "--json"]).expect_code(0).json();
    assert!(a_phys.iter().all(|ph| kept(&v).contains(&(ph.clone(), "read".to_string()))), "{v:#}");
    let tables = p.physical_tables();
    assert!(a_phys.iter().chain(&b_phys).all(|ph| tables.contains(&table_name(ph))), "{tables:?}");
    // Once store A's environment is gone, the adoption collects its storage.
    p.execute_on_engine("DROP SCHEMA dev__s CASCADE");
    if p.on_postgres() {
        // Postgres records which views read a relation: a view in efmesh's own schema (no
        // environment's) still reading one makes its drop fail (never `CASCADE`): the janitor
        // fails, naming the view in the way.
        p.execute_on_engine(&format!("CREATE VIEW \"_efmesh\".\"user_v\" AS SELECT * FROM {}", a_phys[1]));
        let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
        r.expect_code(1);
        assert!(r.stderr.contains("depends on") && r.stderr.contains("never drops with CASCADE"), "{}", r.stderr);
        assert!(!r.stderr.contains("Use DROP ... CASCADE"), "the server's advice to cascade is not passed on: {}", r.stderr);
        p.execute_on_engine("DROP VIEW \"_efmesh\".\"user_v\"");
    }
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--adopt", "--json"]).expect_code(0).json();
    assert_eq!(v["adopted"], Value::Bool(true));
    assert_eq!(physicals(&v, "orphans"), a_phys.iter().cloned().collect(), "{v:#}");
    let tables = p.physical_tables();
    assert!(b_phys.iter().all(|ph| tables.contains(&table_name(ph))) && a_phys.iter().all(|ph| !tables.contains(&table_name(ph))), "{tables:?}");
    assert_eq!(p.rows("dev__t.m"), vec![vec![Some("2".to_string())]]);
}

/// The comment of environment `env`'s record (`"_efmesh"."_efmesh_env__<env>"`), `None` when
/// there is no record or it has no comment.
fn env_record_comment(p: &Project, env: &str) -> Option<String> {
    let name = efmesh::ownership::env_record_name(env);
    let sql = if p.on_postgres() {
        format!("SELECT obj_description(to_regclass('\"_efmesh\".\"{name}\"'), 'pg_class')")
    } else {
        format!("SELECT comment FROM duckdb_views() WHERE schema_name = '_efmesh' AND view_name = '{name}'")
    };
    p.query(&sql).into_iter().next().and_then(|r| r.into_iter().next().flatten()).filter(|c| !c.is_empty())
}

/// Two state stores applying one environment name into one engine database (two checkouts of a
/// project, each with its own state): the second one's promotion would re-point the views the
/// first one serves. It is refused before anything is written (SPEC §4, invariant 64), naming
/// the views, the first store and the ways out — an environment promoted before efmesh recorded
/// its store (no record) too; the first store keeps serving and applying its environment. Once
/// the first store is taken over (`janitor --adopt`: gone for good), the second one's apply
/// replaces its views. The store is recorded once per environment (its record), never per view.
fn an_apply_never_re_points_the_environment_views_another_store_made(engine: EngineBackend) {
    let p = project_on_engine(engine, 1);
    use_state(&p, "a.state.sqlite");
    p.apply("prod");
    let a_id = store_id(&p, "a.state.sqlite");
    let recorded = |p: &Project| env_record_comment(p, "prod").and_then(|c| efmesh::ownership::env_record_owner(&c).map(str::to_string));
    assert_eq!(recorded(&p), Some(a_id.clone()), "prod's record names the store that promoted it");
    let view_comment = if p.on_postgres() {
        "SELECT obj_description(to_regclass('s.m'), 'pg_class')"
    } else {
        "SELECT comment FROM duckdb_views() WHERE schema_name = 's' AND view_name = 'm'"
    };
    let comment = p.query(view_comment).into_iter().next().and_then(|r| r.into_iter().next().flatten()).filter(|c| !c.is_empty());
    assert_eq!(comment, None, "no statement per view: the environment's record holds the store");
    assert!(p.physical_tables().iter().all(|t| !t.starts_with(efmesh::ownership::ENV_RECORD_PREFIX)));
    let janitor = p.run(&["janitor", "--json"]).expect_code(0).json();
    assert!(!janitor.to_string().contains(efmesh::ownership::ENV_RECORD_PREFIX), "the record is no orphan: {janitor:#}");
    let served = |p: &Project| p.rows("s.m");
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &models(2));
    let refused = |p: &Project, owner: &str| {
        let r = p.run(&["apply", "prod", "--yes"]);
        r.expect_code(1);
        for needle in [
            "environment `prod` would re-point 2 view(s)".to_string(),
            format!("`s.m` {owner}"),
            format!("`s.v` {owner}"),
            format!("other state store(s) write this database ({a_id}"),
            "nothing was done".to_string(),
            "one state store per engine database".to_string(),
            "efmesh janitor --adopt".to_string(),
        ] {
            assert!(r.stderr.contains(&needle), "{needle:?} missing\n{}", r.stderr);
        }
        let kind = p.run(&["apply", "prod", "--yes", "--json"]);
        assert_eq!(kind.expect_code(1).json()["error"]["kind"], "foreign-views", "{}", kind.stdout);
        assert_eq!(served(p), vec![vec![Some("1".to_string())]], "store A's prod still serves its version");
    };
    refused(&p, &format!("(reads no version this state store's `prod` serves; `prod` last promoted by state store {a_id})"));
    // An environment promoted before efmesh recorded its store (no record): its views read
    // versions B's `prod` does not serve.
    p.execute_on_engine(&format!("DROP VIEW {}", efmesh::ownership::env_record_relation("prod")));
    refused(&p, "(reads no version this state store's `prod` serves)");
    // Store A applies its own environment as before, and is recorded again.
    use_state(&p, "a.state.sqlite");
    p.write("models/m.lua", &models(3));
    p.apply("prod");
    assert_eq!(served(&p), vec![vec![Some("3".to_string())]]);
    assert_eq!(recorded(&p), Some(a_id.clone()));
    // Store A gone for good: B takes the database over, then its apply replaces A's views and
    // records B.
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &models(2));
    p.run(&["janitor", "--adopt"]).expect_code(0);
    p.apply("prod");
    assert_eq!(served(&p), vec![vec![Some("2".to_string())]]);
    assert_eq!(recorded(&p), Some(store_id(&p, "b.state.sqlite")));
    assert_eq!(p.plan("prod")["hasChanges"], false, "B's views serve what B's state says");
}

/// A model `t.n` alone, answering `v`.
fn model_n(v: i64) -> String {
    format!(
        r#"define_model {{ name = "t.n", kind = kind.full(), schema = {{ {{ "x", "bigint" }} }}, query = "SELECT CAST({v} AS BIGINT) AS x" }}
"#
    )
}

/// Runs `apply <env>` (with `--json`, then without) expecting the foreign-views refusal, its
/// text naming each of `needles`.
#[track_caller]
fn refused_foreign(p: &Project, env: &str, needles: &[&str]) {
    let kind = p.run(&["apply", env, "--yes", "--json"]);
    assert_eq!(kind.expect_code(1).json()["error"]["kind"], "foreign-views", "{}\n{}", kind.stdout, kind.stderr);
    let r = p.run(&["apply", env, "--yes"]);
    r.expect_code(1);
    for needle in needles {
        assert!(r.stderr.contains(needle), "{needle:?} missing\n{}", r.stderr);
    }
}

/// Stores A and B promote `prod` side by side with different models (A: `s.m`, `s.v`; B:
/// `t.n`); A promotes again, so `prod`'s record names A. A then adds a model `t.n`: the view
/// `t.n` B's `prod` serves reads no version A's `prod` points at, so A's apply is refused
/// (SPEC §4, invariant 64) — the record naming A spares nothing — and B's `t.n` still serves B's
/// rows.
fn a_store_that_promoted_last_never_takes_over_a_view_another_store_made_before(engine: EngineBackend) {
    let p = project_on_engine(engine, 1);
    use_state(&p, "a.state.sqlite");
    p.apply("prod");
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &model_n(100));
    p.apply("prod");
    assert_eq!(p.rows("t.n"), vec![vec![Some("100".to_string())]]);
    use_state(&p, "a.state.sqlite");
    p.write("models/m.lua", &models(2));
    p.apply("prod");
    let a_id = store_id(&p, "a.state.sqlite");
    let recorded = env_record_comment(&p, "prod").and_then(|c| efmesh::ownership::env_record_owner(&c).map(str::to_string));
    assert_eq!(recorded, Some(a_id), "A promoted prod last");
    p.write("models/m.lua", &format!("{}{}", models(2), model_n(999)));
    refused_foreign(
        &p,
        "prod",
        &["environment `prod` would re-point 1 view(s)", "`t.n` (reads no version this state store's `prod` serves)", "nothing was done"],
    );
    assert_eq!(p.rows("t.n"), vec![vec![Some("100".to_string())]], "B's prod still serves B's t.n");
    assert_eq!(p.rows("s.m"), vec![vec![Some("2".to_string())]], "A's prod is left as it was");
}

/// Store A's `prod` view `s.m` is pointed by hand at another of A's own versions (its `dev`
/// one) while store B, unrelated, serves its own environment in the same database: the view reads
/// a relation only A uses, so A's apply repairs it (SPEC §4, invariant 64) — a view is another
/// store's when it reads a relation that store uses or one A does not know, not merely because
/// another store is present.
fn a_stores_own_view_pointed_elsewhere_is_repaired_while_an_unrelated_store_is_present(engine: EngineBackend) {
    let p = project_on_engine(engine, 1);
    use_state(&p, "a.state.sqlite");
    p.apply("prod");
    p.write("models/m.lua", &models(2));
    let dev = p.apply("dev");
    let dev_m = physical_of(&dev, "s.m");
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &model_n(100));
    p.apply("bx");
    use_state(&p, "a.state.sqlite");
    p.write("models/m.lua", &models(1));
    p.execute_on_engine(&format!("CREATE OR REPLACE VIEW s.m AS SELECT * FROM {dev_m}"));
    assert_eq!(p.rows("s.m"), vec![vec![Some("2".to_string())]], "pointed at A's dev version by hand");
    p.apply("prod");
    assert_eq!(p.rows("s.m"), vec![vec![Some("1".to_string())]], "A's apply repaired its own view");
    assert_eq!(p.rows("bx__t.n"), vec![vec![Some("100".to_string())]], "B's environment untouched");
}

/// Store A promotes `prod` at version 1; store B (same database, same code) applies only `dev`,
/// so it has a snapshot of version 1 too. B then edits and applies `prod`: A's `prod` views read
/// version 1, which B knows but B's `prod` does not serve (it has no pointer there), so B's
/// apply is refused and A's `prod` keeps serving version 1 and planning no change.
fn a_version_a_store_knows_from_another_environment_never_makes_anothers_view_its_own(engine: EngineBackend) {
    let p = project_on_engine(engine, 1);
    use_state(&p, "a.state.sqlite");
    p.apply("prod");
    use_state(&p, "b.state.sqlite");
    p.apply("dev");
    p.write("models/m.lua", &models(2));
    refused_foreign(&p, "prod", &["environment `prod` would re-point 2 view(s)", "`s.m` (reads no version this state store's `prod` serves", "`s.v` ("]);
    assert_eq!(p.rows("s.m"), vec![vec![Some("1".to_string())]], "A's prod still serves version 1");
    use_state(&p, "a.state.sqlite");
    p.write("models/m.lua", &models(1));
    assert_eq!(p.plan("prod")["hasChanges"], false, "A's prod serves what A's state says");
}

/// Two checkouts of one project (stores A and B, one database) apply `prod` at the same commit:
/// the second one's views would be the first one's, same definitions, and the two would then
/// diverge silently at the next edit of either. B's apply is refused although the views read
/// versions B would build itself; A goes on serving and moving its `prod`, and B's state never
/// records a `prod`.
fn two_checkouts_at_one_commit_never_share_an_environments_views(engine: EngineBackend) {
    let p = project_on_engine(engine, 1);
    use_state(&p, "a.state.sqlite");
    p.apply("prod");
    let a_id = store_id(&p, "a.state.sqlite");
    use_state(&p, "b.state.sqlite");
    let last = format!("`prod` last promoted by state store {a_id}");
    refused_foreign(&p, "prod", &["environment `prod` would re-point 2 view(s)", last.as_str()]);
    assert!(p.state_summary().envs.is_empty(), "B recorded no prod: {:?}", p.state_summary());
    use_state(&p, "a.state.sqlite");
    p.write("models/m.lua", &models(2));
    p.apply("prod");
    assert_eq!(p.rows("s.m"), vec![vec![Some("2".to_string())]]);
    assert_eq!(p.plan("prod")["hasChanges"], false);
}

fn an_orphan_is_dropped_only_once_seen_for_the_ttl(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    p.apply("dev");
    let orphan = orphan_name(&p, "gone");
    let physical = format!("\"_efmesh\".\"{orphan}\"");
    p.query(&format!("CREATE TABLE \"_efmesh\".\"{orphan}\" AS SELECT 1 AS x"));
    // The first sighting is something that happened: stamped with the clock, never `--now` (a
    // janitor run as of a past date would otherwise make it look a ttl old at once).
    let (before, day) = (now_millis(), 86_400_000);
    let v = janitor(&mut p, "2025-01-01T00:00:00Z", &["--ttl", "7", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical.clone(), "young".to_string())]), "{v:#}");
    let first = v["keptOrphans"][0]["firstSeen"].as_str().unwrap_or_else(|| panic!("{v:#}")).to_string();
    let seen = efmesh::core::interval::parse_instant(&first).unwrap_or_else(|e| panic!("{first}: {e}"));
    assert!((before..=now_millis()).contains(&seen), "stamped with the clock: {first}");
    let v = janitor(&mut p, &to_iso(now_millis()), &["--ttl", "7", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical.clone(), "young".to_string())]), "{v:#}");
    // Aged on the clock, never a `--now` later than it (it may be a relation another process is
    // creating): a janitor as of 60 days ahead keeps it, and keeps its first sighting.
    let v = janitor(&mut p, &to_iso(seen + 60 * day), &["--ttl", "7", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical.clone(), "young".to_string())]), "{v:#}");
    assert_eq!(v["keptOrphans"][0]["firstSeen"], Value::from(first.clone()), "{v:#}");
    assert!(p.physical_tables().contains(&orphan));
    // Seen six days ago (the record moved back, as six days passing would leave it): still
    // young; seven: it goes.
    let state_path = p.state_path();
    let seen_ago = |days: i64| {
        let at = to_iso(now_millis() - days * day);
        rusqlite::Connection::open(&state_path).unwrap().execute("UPDATE orphans_seen SET first_seen = ?1", [&at]).unwrap();
        at
    };
    let six = seen_ago(6);
    let v = janitor(&mut p, &to_iso(now_millis()), &["--ttl", "7", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical.clone(), "young".to_string())]), "{v:#}");
    assert_eq!(v["keptOrphans"][0]["firstSeen"], Value::from(six), "the first sighting is kept, not renewed: {v:#}");
    let seven = seen_ago(7);
    let v = janitor(&mut p, &to_iso(now_millis()), &["--ttl", "7", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "orphans"), BTreeSet::from([physical.clone()]), "{v:#}");
    assert_eq!(v["orphans"][0]["firstSeen"], Value::from(seven), "{v:#}");
    assert!(!p.physical_tables().contains(&orphan));
    let rows: i64 = rusqlite::Connection::open(p.state_path()).unwrap().query_row("SELECT count(*) FROM orphans_seen", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, 0, "the sighting of an orphan no longer present is forgotten");
}

fn storage_written_before_owner_markers_keeps_its_orphans_until_adopted(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    p.apply("dev");
    let me = store_id(&p, "efmesh.state.sqlite");
    // Storage as an efmesh without owner markers left it (on Postgres the marker is a row).
    if p.on_postgres() {
        p.execute_on_engine(&format!("DELETE FROM \"_efmesh_meta\".owners WHERE store_id = '{me}'"));
    } else {
        p.query(&format!("DROP SEQUENCE \"_efmesh\".\"_efmesh_owner__{me}\""));
    }
    let orphan = orphan_name(&p, "gone");
    let physical = format!("\"_efmesh\".\"{orphan}\"");
    p.query(&format!("CREATE TABLE \"_efmesh\".\"{orphan}\" AS SELECT 1 AS x"));
    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
    let v = r.expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical.clone(), "unmarked".to_string())]), "{v:#}");
    assert!(r.stderr.contains("no owner marker") && r.stderr.contains("--adopt"), "{}", r.stderr);
    // An apply into it records itself beside `unknown`: other stores may have written there.
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical.clone(), "foreign".to_string())]), "{v:#}");
    assert_eq!(v["keptOrphans"][0]["owners"], serde_json::json!(["unknown"]), "{v:#}");
    assert!(p.physical_tables().contains(&orphan));
    // The operator adopts it: only then are its orphans collected.
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--adopt", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "orphans"), BTreeSet::from([physical]), "{v:#}");
    assert!(!p.physical_tables().contains(&orphan));
    assert_eq!(p.rows("dev__s.m"), vec![vec![Some("2".to_string())]]);
}

#[test]
fn a_lake_root_shared_by_two_state_stores_keeps_each_others_directories() {
    let mut p = lake_project(1);
    let config = p.read("efmesh.toml");
    let a = p.apply("dev");
    let a_dir = lake_dir(&p, &a);
    // The second store writes into the same lake root, from its own DuckDB file.
    p.write("efmesh.toml", &config.replace("efmesh.state.sqlite", "b.state.sqlite").replace("efmesh.duckdb", "b.duckdb"));
    p.write("models/m.lua", &lake_models(2));
    let b = p.apply("dev");
    let b_dir = lake_dir(&p, &b);
    let mut markers: Vec<String> =
        std::fs::read_dir(p.root().join("lake/.efmesh-owner.d")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    markers.sort();
    let mut want = vec![store_id(&p, "efmesh.state.sqlite"), store_id(&p, "b.state.sqlite")];
    want.sort();
    assert_eq!(markers, want, "one marker per store in the lake root");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical_of(&a, "s.m"), "foreign".to_string())]), "{v:#}");
    p.write("efmesh.toml", &config);
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical_of(&b, "s.m"), "foreign".to_string())]), "{v:#}");
    assert!(a_dir.join("data.parquet").exists() && b_dir.join("data.parquet").exists());
}

#[test]
fn a_lake_without_parquet_versions_does_not_keep_the_engines_orphans() {
    let mut p = project(1);
    p.write("efmesh.toml", &format!("{CONFIG}\n[lake]\npath = \"lake\"\n"));
    p.apply("dev");
    assert!(!p.root().join("lake/.efmesh-owner.d").exists(), "no parquet model: the lake was never written, so it has no marker");
    let orphan = format!("s__gone__{}", "c".repeat(64));
    let physical = format!("\"_efmesh\".\"{orphan}\"");
    p.query(&format!("CREATE TABLE \"_efmesh\".\"{orphan}\" AS SELECT 1 AS x"));
    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
    let v = r.expect_code(0).json();
    assert_eq!(physicals(&v, "orphans"), BTreeSet::from([physical]), "the orphan lives in the engine only, which is ours: {v:#}");
    assert!(v["keptOrphans"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(!r.stderr.contains("no owner marker"), "{}", r.stderr);
    assert!(!p.physical_tables().contains(&orphan));
}

// ---------------------------------------------------------------------------------------------
// The same physical name in two live stores sharing one storage (SPEC invariant 39 (e))

/// The environment store B applies to (the two stores share the DuckDB file, so their
/// environments' views must not share names).
const B_ENV: &str = "staging";

/// `(physical, reason, owners)` of every `keptShared` entry of a janitor report.
fn kept_shared(v: &Value) -> BTreeSet<(String, String, Vec<String>)> {
    v["keptShared"]
        .as_array()
        .unwrap_or_else(|| panic!("no keptShared in {v:#}"))
        .iter()
        .map(|k| {
            let owners = k["owners"].as_array().unwrap().iter().map(|o| o.as_str().unwrap().to_string()).collect();
            (k["physical"].as_str().unwrap().to_string(), k["reason"].as_str().unwrap().to_string(), owners)
        })
        .collect()
}

/// Stores A (`a.state.sqlite`) and B (`b.state.sqlite`) both apply `models(1)` (to `dev` and to
/// `staging`) in one DuckDB file (the same physical names), then A moves on to `models(2)`. Returns the physical
/// relations of version 1 and the two store ids.
fn two_stores_on_one_version(p: &Project) -> (Vec<String>, String, String) {
    p.write("models/m.lua", &models(1));
    use_state(p, "a.state.sqlite");
    let a = p.apply("dev");
    use_state(p, "b.state.sqlite");
    let b = p.apply(B_ENV);
    let one = vec![physical_of(&a, "s.m"), physical_of(&a, "s.v")];
    assert_eq!(one, vec![physical_of(&b, "s.m"), physical_of(&b, "s.v")], "same model, same SQL: the same physical names");
    use_state(p, "a.state.sqlite");
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    (one, store_id(p, "a.state.sqlite"), store_id(p, "b.state.sqlite"))
}

fn a_version_another_store_serves_is_kept_until_the_last_store_moves_on(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    let (one, _, b_id) = two_stores_on_one_version(&p);
    // A no longer serves version 1; B does. A's janitor keeps it and says why.
    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]);
    let v = r.expect_code(0).json();
    let want: BTreeSet<_> = one.iter().map(|ph| (ph.clone(), "shared".to_string(), vec![b_id.clone()])).collect();
    assert_eq!(kept_shared(&v), want, "{v:#}");
    assert!(v["dropped"].as_array().unwrap().is_empty() && v["orphans"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(r.stderr.contains("keptShared"), "the warning says where to look: {}", r.stderr);
    let tables = p.physical_tables();
    assert!(one.iter().all(|ph| tables.contains(&table_name(ph))), "{tables:?}");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]], "A serves version 2");
    use_state(&p, "b.state.sqlite");
    assert_eq!(p.rows("staging__s.v"), vec![vec![Some("1".to_string())]], "B's environment still serves its data");
    assert_views_serve_pointers_of(&p, "b.state.sqlite", &["s.m", "s.v"]);
    // The human report names the other store too.
    use_state(&p, "a.state.sqlite");
    let r = janitor(&mut p, LATER, &["--ttl", "0"]);
    r.expect_code(0);
    assert!(r.stdout.contains("another state store may serve") && r.stdout.contains(&b_id), "{}", r.stdout);
    // B moves on as well: its janitor is the last one, and collects version 1.
    use_state(&p, "b.state.sqlite");
    p.apply(B_ENV);
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), one.iter().cloned().collect(), "{v:#}");
    assert!(v["keptShared"].as_array().unwrap().is_empty(), "{v:#}");
    let tables = p.physical_tables();
    assert!(one.iter().all(|ph| !tables.contains(&table_name(ph))), "{tables:?}");
    for (state, view) in [("a.state.sqlite", "dev__s.v"), ("b.state.sqlite", "staging__s.v")] {
        use_state(&p, state);
        assert_eq!(p.rows(view), vec![vec![Some("2".to_string())]], "{state}");
        assert_views_serve_pointers_of(&p, state, &["s.m", "s.v"]);
    }
    // A's janitor forgets its version 1 (the relation is gone) and drops nothing else.
    use_state(&p, "a.state.sqlite");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert!(v["keptShared"].as_array().unwrap().is_empty() && v["failed"].as_array().unwrap().is_empty(), "{v:#}");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);
}

fn a_store_re_pointing_a_version_another_stores_janitor_dropped_rebuilds_it(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    let (one, a_id, _) = two_stores_on_one_version(&p);
    // B moves on too; B's janitor keeps version 1 (A has not given it up yet) and gives up its own use.
    use_state(&p, "b.state.sqlite");
    p.apply(B_ENV);
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    let want: BTreeSet<_> = one.iter().map(|ph| (ph.clone(), "shared".to_string(), vec![a_id.clone()])).collect();
    assert_eq!(kept_shared(&v), want, "{v:#}");
    // A's janitor is now the last user: it drops version 1.
    use_state(&p, "a.state.sqlite");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), one.iter().cloned().collect(), "{v:#}");
    // B still knows version 1 and goes back to it: the relation is found missing and rebuilt,
    // never served dropped.
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &models(1));
    let r = p.run(&["apply", B_ENV, "--yes", "--json"]);
    if r.code != 0 {
        assert!(r.stderr.contains(&table_name(&one[0])), "a refusal names the missing relation: {}", r.stderr);
        p.apply(B_ENV);
    }
    assert_eq!(p.rows("staging__s.v"), vec![vec![Some("1".to_string())]]);
    assert_views_serve_pointers_of(&p, "b.state.sqlite", &["s.m", "s.v"]);
    use_state(&p, "a.state.sqlite");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);
}

/// A's janitor claims version 1 (B had given up its use), and B re-points its environment at
/// version 1 while A's janitor waits before its drop (`EFMESH_DELAY=janitor-before-drop`): the
/// drop, with the engine held, sees B's new use record and keeps the relation (the claim
/// released). (B's apply after the drop finds it missing and rebuilds it: the test above.)
fn a_use_recorded_between_a_janitors_claim_and_its_drop_keeps_the_relation(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    let (one, _, b_id) = two_stores_on_one_version(&p);
    use_state(&p, "b.state.sqlite");
    p.apply(B_ENV);
    janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0);
    use_state(&p, "a.state.sqlite");
    p.now = LATER.to_string();
    let mut jan = p.command(&["janitor", "--ttl", "0", "--json"]);
    jan.env("EFMESH_DELAY", "janitor-before-drop=4000");
    let jan = jan.spawn().unwrap();
    // Wait for A's claim, then let B go back to version 1.
    let a_state = p.root().join("a.state.sqlite");
    let claimed = |path: &std::path::Path| -> i64 {
        rusqlite::Connection::open(path).and_then(|c| c.query_row("SELECT count(*) FROM condemned", [], |r| r.get(0))).unwrap_or(0)
    };
    let start = std::time::Instant::now();
    while claimed(&a_state) == 0 {
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "the janitor never claimed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    use_state(&p, "b.state.sqlite");
    p.write("models/m.lua", &models(1));
    let b = p.run(&["apply", B_ENV, "--yes", "--json", "--retries", "6"]);
    let j = Run::from_output(jan.wait_with_output().unwrap(), "janitor".to_string());
    let v = j.expect_code(0).json();
    // B's apply ran within the janitor's wait (4 s), before its drop: the use came first.
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(v["dropped"].as_array().unwrap().is_empty(), "{v:#}");
    let kept = v["keptShared"].as_array().unwrap();
    assert_eq!(kept.iter().map(|k| k["physical"].as_str().unwrap().to_string()).collect::<BTreeSet<_>>(), one.iter().cloned().collect(), "{v:#}");
    assert!(kept.iter().all(|k| k["forgotten"] == Value::Bool(true) && k["owners"] == serde_json::json!([b_id])), "{v:#}");
    assert_eq!(claimed(&a_state), 0, "A's claim is released");
    let tables = p.physical_tables();
    assert!(one.iter().all(|ph| tables.contains(&table_name(ph))), "{tables:?}");
    assert_eq!(p.rows("staging__s.v"), vec![vec![Some("1".to_string())]], "{}\n{}", b.stderr, j.stderr);
    assert_views_serve_pointers_of(&p, "b.state.sqlite", &["s.m", "s.v"]);
}

/// The use records' sequences of `store` (as an efmesh before the records' table kept them).
fn legacy_uses(p: &Project, store: &str) -> i64 {
    let n = p.query(&format!("SELECT count(*) FROM duckdb_sequences() WHERE starts_with(sequence_name, '_efmesh_use__{store}__')"));
    n[0][0].as_deref().unwrap().parse().unwrap()
}

/// A file whose use records an older efmesh wrote (one sequence each; B's `registered` a row):
/// they are honoured as rows are, a janitor removes its own, and each store's next apply turns
/// its own (only) into rows of `_efmesh._efmesh_uses`, which no janitor takes for an orphan.
#[test]
fn use_records_an_older_efmesh_wrote_as_sequences_are_honoured_then_turned_into_rows() {
    let mut p = project(1);
    let (one, a_id, b_id) = two_stores_on_one_version(&p);
    let rows = p.query("SELECT store_id, key FROM \"_efmesh\".\"_efmesh_uses\" ORDER BY ALL");
    for store in [&a_id, &b_id] {
        assert!(rows.iter().any(|r| r[0].as_ref() == Some(store) && r[1].as_deref() == Some("registered")), "{rows:?}");
    }
    // Every record as a sequence, but B's `registered`, which stays a row: B counts as a
    // store that records its uses, so only B's sequences say that B serves version 1 (a
    // store that went back to an older efmesh and then upgraded again leaves this mix).
    for r in &rows {
        let (store, key) = (r[0].as_deref().unwrap(), r[1].as_deref().unwrap());
        if store == b_id && key == "registered" {
            continue;
        }
        p.query(&format!("CREATE SEQUENCE \"_efmesh\".\"_efmesh_use__{store}__{key}\""));
        p.query(&format!("DELETE FROM \"_efmesh\".\"_efmesh_uses\" WHERE store_id = '{store}' AND key = '{key}'"));
    }
    let left = p.query("SELECT store_id, key FROM \"_efmesh\".\"_efmesh_uses\"");
    assert_eq!(left, vec![vec![Some(b_id.clone()), Some("registered".to_string())]]);
    let (a_before, b_before) = (legacy_uses(&p, &a_id), legacy_uses(&p, &b_id));
    assert!(a_before > 1 && b_before > 1, "{rows:?}");

    // A no longer serves version 1; B's sequences say B does: kept. The table is no orphan.
    use_state(&p, "a.state.sqlite");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    let want: BTreeSet<_> = one.iter().map(|ph| (ph.clone(), "shared".to_string(), vec![b_id.clone()])).collect();
    assert_eq!(kept_shared(&v), want, "{v:#}");
    assert!(v["orphans"].as_array().unwrap().is_empty() && v["dropped"].as_array().unwrap().is_empty(), "{v:#}");
    // A's own records of version 1 went, sequences as they were.
    assert_eq!(legacy_uses(&p, &a_id), a_before - one.len() as i64);

    // A's next apply turns A's records into rows; B's sequences are B's to move.
    p.write("models/m.lua", &models(3));
    p.apply("dev");
    assert_eq!(legacy_uses(&p, &a_id), 0);
    assert_eq!(legacy_uses(&p, &b_id), b_before);
    let mine = p.query(&format!("SELECT count(*) FROM \"_efmesh\".\"_efmesh_uses\" WHERE store_id = '{a_id}' AND key = 'registered'"));
    assert_eq!(mine[0][0].as_deref(), Some("1"));

    // B's apply moves B's; B moves on, and its janitor — the last user — drops version 1.
    use_state(&p, "b.state.sqlite");
    p.apply(B_ENV);
    assert_eq!(legacy_uses(&p, &b_id), 0);
    let all = p.query("SELECT count(*) FROM duckdb_sequences() WHERE starts_with(sequence_name, '_efmesh_use__')");
    assert_eq!(all[0][0].as_deref(), Some("0"));
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(physicals(&v, "dropped"), one.iter().cloned().collect(), "{v:#}");
    assert_eq!(p.rows("staging__s.v"), vec![vec![Some("3".to_string())]]);
    use_state(&p, "a.state.sqlite");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("3".to_string())]]);
    assert_views_serve_pointers_of(&p, "a.state.sqlite", &["s.m", "s.v"]);
}

/// Two stores sharing one DuckLake catalog (and DuckDB file): each keeps the other's tables as
/// `foreign` orphans, and a version of the same model with the same SQL that one of them no
/// longer serves is kept (`keptShared`, storage `ducklake`) while the catalog's marker names the
/// other store.
#[test]
fn a_ducklake_catalog_shared_by_two_stores_keeps_their_tables() {
    let dl_model = |name: &str, v: i64| {
        format!(
            r#"define_model {{ name = "{name}", kind = kind.full(), target = "ducklake", schema = {{ {{ "n", "bigint" }} }}, query = "SELECT CAST({v} AS BIGINT) AS n" }}
"#
        )
    };
    let config =
        |state: &str| format!("{}\n[ducklake]\ncatalog = \"catalog/lake.ducklake\"\ndata_path = \"lake_data\"\n", CONFIG.replace("efmesh.state.sqlite", state));
    // Read through the catalog, as an outside reader would.
    let dl_rows = |p: &Project, env: &str| -> Rows {
        use efmesh::engine::Engine;
        let mut db = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
        db.execute(&format!("ATTACH 'ducklake:{}' AS \"_efmesh_ducklake\"", p.root().join("catalog/lake.ducklake").display())).expect("attach");
        db.query(&format!("SELECT CAST(n AS VARCHAR) FROM \"{env}__m\".\"total\"")).unwrap_or_else(|e| panic!("{e}"))
    };
    let mut p = Project::new();
    p.write("efmesh.toml", &config("a.state.sqlite"));
    p.write("models/m.lua", &(dl_model("m.total", 1) + dl_model("m.a_only", 5).as_str()));
    let a = p.apply("dev");
    p.write("efmesh.toml", &config("b.state.sqlite"));
    p.write("models/m.lua", &dl_model("m.total", 1));
    let b = p.apply(B_ENV);
    let (a_id, b_id) = (store_id(&p, "a.state.sqlite"), store_id(&p, "b.state.sqlite"));
    let total = physical_of(&a, "m.total");
    assert_eq!(total, physical_of(&b, "m.total"), "same model, same SQL: one DuckLake table");
    assert!(total.starts_with("\"_efmesh_ducklake\".\"main\"."), "{total}");
    // B sees A's other table as an orphan in a catalog A owns too: kept.
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(kept(&v), BTreeSet::from([(physical_of(&a, "m.a_only"), "foreign".to_string())]), "{v:#}");
    assert_eq!(v["keptOrphans"][0]["owners"], serde_json::json!([a_id]), "{v:#}");
    // A moves on: its version 1 of m.total is what B serves.
    p.write("efmesh.toml", &config("a.state.sqlite"));
    p.write("models/m.lua", &(dl_model("m.total", 2) + dl_model("m.a_only", 5).as_str()));
    p.apply("dev");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(kept_shared(&v), BTreeSet::from([(total.clone(), "shared".to_string(), vec![b_id.clone()])]), "{v:#}");
    assert_eq!(v["keptShared"][0]["storage"], Value::from("ducklake"), "{v:#}");
    assert!(v["dropped"].as_array().unwrap().is_empty(), "{v:#}");
    assert_eq!(dl_rows(&p, "dev"), vec![vec![Some("2".to_string())]]);
    p.write("efmesh.toml", &config("b.state.sqlite"));
    assert_eq!(dl_rows(&p, B_ENV), vec![vec![Some("1".to_string())]], "B still serves its data");
}

/// A claimed version whose relation the engine no longer has (dropped by hand) is reported as
/// such (`alreadyAbsent`, "already gone"), not as a drop the janitor made; its state rows go.
#[test]
fn a_version_whose_relation_was_dropped_by_hand_is_reported_already_absent_not_dropped() {
    let mut p = project(1);
    p.apply("prod");
    // Applies `a`, then `b` to dev: `a`'s two versions become unreachable; `a`'s view of `s.v`
    // is then dropped by hand.
    let unreachable = |p: &mut Project, a: i64, b: i64| {
        p.write("models/m.lua", &models(a));
        let applied = p.apply("dev");
        p.write("models/m.lua", &models(b));
        p.apply("dev");
        let (m, v) = (physical_of(&applied, "s.m"), physical_of(&applied, "s.v"));
        p.execute_on_engine(&format!("DROP VIEW {v}"));
        (m, v)
    };
    let (m, _) = unreachable(&mut p, 2, 3);
    let before = p.state_summary().snapshots.len();
    let text = janitor(&mut p, LATER, &["--ttl", "0"]).expect_code(0).stdout.clone();
    assert!(
        text.contains("janitor dropped 1 unreachable version storage(s) and forgot 1 whose storage was already gone from the engine")
            && text.contains("already gone from the engine (nothing to drop"),
        "{text}"
    );
    assert!(!p.physical_tables().contains(&table_name(&m)));
    assert_eq!(p.state_summary().snapshots.len(), before - 2, "both versions' rows went");
    let (m, v) = unreachable(&mut p, 4, 5);
    // A dry run says the same.
    let dry = janitor(&mut p, LATER, &["--ttl", "0", "--dry-run"]).expect_code(0).stdout.clone();
    assert!(dry.contains("unreachable version storage(s) and would forget 1 whose storage was already gone"), "{dry}");
    let r = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    let entry = |phys: &str| r["dropped"].as_array().and_then(|d| d.iter().find(|e| e["physical"] == phys)).cloned().unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(entry(&v)["alreadyAbsent"], Value::Bool(true), "{r:#}");
    assert_eq!(entry(&m).get("alreadyAbsent"), None, "a relation it dropped: {r:#}");
    let again = janitor(&mut p, LATER, &["--ttl", "0"]);
    assert!(again.expect_code(0).stdout.contains("nothing to collect"), "{again:#?}");
}

/// An older state export imported (`state import --force --engine-ahead`: the apply after the
/// export stamped the engine past it, though it wrote only the new versions' tables) without the
/// engine file from the same moment: the store forgets the newer versions an environment's views still read. Those
/// relations are orphans to it, but the janitor keeps them while a view reads them (they would
/// break the view), naming the views; once `apply` points the views back, they go.
fn an_orphan_a_view_still_reads_is_kept_until_the_view_moves(engine: EngineBackend) {
    let mut p = project_on_engine(engine, 1);
    p.apply("prod");
    p.run(&["state", "export", "backup.json"]).expect_code(0);
    p.write("models/m.lua", &models(2));
    let applied = p.apply("prod");
    let (m2, v2) = (physical_of(&applied, "s.m"), physical_of(&applied, "s.v"));
    p.run(&["state", "import", "backup.json", "--force", "--engine-ahead"]).expect_code(0);
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    let kept = kept(&v);
    assert!(kept.contains(&(m2.clone(), "read".to_string())) && kept.contains(&(v2.clone(), "read".to_string())), "{v:#}");
    let by = v["keptOrphans"].as_array().unwrap().iter().find(|k| k["physical"] == m2.as_str()).map(|k| k["readBy"].clone()).unwrap_or_default();
    assert_eq!(by, serde_json::json!(["s.m", "s.v"]), "the prod views of both models (s.v through its version's view): {v:#}");
    assert_eq!(p.rows("s.m"), vec![vec![Some("2".to_string())]], "prod still serves what it read");
    // `apply prod` points the views back at the versions the store records; then they go.
    p.write("models/m.lua", &models(1));
    p.apply("prod");
    let v = janitor(&mut p, LATER, &["--ttl", "0", "--json"]).expect_code(0).json();
    assert!(physicals(&v, "orphans").contains(&m2), "{v:#}");
    assert!(!p.physical_tables().iter().any(|t| m2.contains(t.as_str())), "dropped: {:?}", p.physical_tables());
    assert_eq!(p.rows("s.m"), vec![vec![Some("1".to_string())]]);
}
