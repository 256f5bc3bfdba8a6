//! The shipped examples, applied end to end on real and generated data, as golden fixtures:
//! row counts measured when the examples were written (see their READMEs).

use efmesh::apply::{self, Options};
use efmesh::config::Config;
use efmesh::core::interval::parse_instant;
use efmesh::engine::Engine;
use efmesh::engine::duckdb::DuckDb;
use efmesh::project::Project;
use efmesh::state::StateStore;
use std::path::Path;

fn apply_example(dir: &str, now: &str) -> (Project, DuckDb, StateStore) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(dir);
    let config = Config::load(&root.join("efmesh.toml")).unwrap();
    let project = Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let state = StateStore::open_in_memory().unwrap();
    let mut engine = DuckDb::in_memory().unwrap();
    let now = parse_instant(now).unwrap();
    let plan = efmesh::plan::plan(&project, &state, "dev", now).unwrap();
    apply::apply(&project, &plan, &state, &mut engine, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let again = efmesh::plan::plan(&project, &state, "dev", now).unwrap();
    assert!(!again.has_changes, "a plan right after apply must be empty: {again:?}");
    (project, engine, state)
}

fn count(engine: &mut DuckDb, relation: &str) -> u64 {
    engine.query(&format!("SELECT count(*) FROM {relation}")).unwrap()[0][0].as_deref().unwrap().parse().unwrap()
}

#[test]
fn flights_example_builds_the_published_row_counts() {
    let (_, mut db, _) = apply_example("flights", "2026-11-30T00:00:00Z");
    assert_eq!(count(&mut db, "dev__core.flights"), 336_776);
    assert_eq!(count(&mut db, "dev__mart.flights_enriched"), 336_776, "LEFT JOINs keep flights without weather or plane");
    assert_eq!(count(&mut db, "dev__mart.carrier_delays_daily"), 5_442);
    assert_eq!(count(&mut db, "dev__mart.routes"), 439);
    assert_eq!(count(&mut db, "dev__mart.worst_routes"), 20);
    let unmatched = db
        .query("SELECT count(*) FILTER (WHERE NOT has_weather)::VARCHAR, count(*) FILTER (WHERE NOT has_plane)::VARCHAR FROM dev__mart.flights_enriched")
        .unwrap();
    assert_eq!(unmatched[0], vec![Some("1556".to_string()), Some("52606".to_string())]);
}

#[test]
fn hospital_example_builds_the_published_row_counts() {
    let (_, mut db, _) = apply_example("hospital", "2026-11-30T00:00:00Z");
    assert_eq!(count(&mut db, "dev__stg.moves"), 106_175);
    assert_eq!(count(&mut db, "dev__med.moves"), 106_175);
    assert_eq!(count(&mut db, "dev__med.stays"), 76_654);
    assert_eq!(count(&mut db, "dev__med.census_daily"), 1_267);
}

#[allow(dead_code)]
#[path = "../../examples/hospital_data.rs"]
mod hospital_data;

#[test]
fn hospital_generator_is_deterministic_and_matches_the_committed_data() {
    let dir = tempfile::tempdir().unwrap();
    hospital_data::generate(dir.path(), hospital_data::SEED).unwrap();
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hospital/data");
    for file in ["moves.csv", "departments.csv"] {
        let fresh = std::fs::read(dir.path().join(file)).unwrap();
        let shipped = std::fs::read(committed.join(file)).unwrap();
        assert!(fresh == shipped, "{file} differs from a fresh run of the generator");
    }
    let rows = std::fs::read_to_string(dir.path().join("moves.csv")).unwrap().lines().count() - 1;
    assert!(rows >= 100_000, "only {rows} movement rows");
}

/// `efmesh test --json` on a shipped example: every unit test of its `tests/` passes.
fn example_unit_tests(dir: &str) -> Vec<(String, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(dir);
    let out = std::process::Command::new(crate::common::BIN)
        .arg("--config")
        .arg(root.join("efmesh.toml"))
        .args(["test", "--json"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "efmesh test on examples/{dir}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ok"], true, "{v:#}");
    v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["status"], "passed", "{t:#}");
            let file = t["file"].as_str().unwrap().to_string();
            (t["name"].as_str().unwrap().to_string(), t["model"].as_str().unwrap().to_string(), file)
        })
        .collect()
}

#[test]
fn hospital_unit_tests_pass() {
    let tests = example_unit_tests("hospital");
    let names: Vec<&str> = tests.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["stg_moves_cleans_the_feed", "med_moves_keeps_only_its_interval", "stays_follow_each_case", "stays_of_no_moves_is_empty"]);
    assert!(tests.iter().any(|(_, _, f)| f.ends_with(".lua")) && tests.iter().any(|(_, _, f)| f.ends_with(".rhai")));
}

#[test]
fn flights_unit_tests_pass() {
    let tests = example_unit_tests("flights");
    let got: Vec<(&str, &str)> = tests.iter().map(|(n, m, _)| (n.as_str(), m.as_str())).collect();
    assert_eq!(got, [("carrier_delays_of_one_utc_day", "mart.carrier_delays_daily"), ("worst_routes_are_frequent_and_sorted", "mart.worst_routes")]);
}
