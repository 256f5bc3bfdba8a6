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
    // The departments seed: a quoted name holding a comma, `NA` read as NULL, names joined
    // into the census.
    assert_eq!(count(&mut db, "dev__raw.departments"), 7);
    let seed = db
        .query("SELECT code, name, (phone IS NULL)::VARCHAR FROM dev__raw.departments WHERE code IN ('SURGERY', 'THERAPY') ORDER BY code")
        .unwrap();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(seed, vec![vec![s("SURGERY"), s("Surgery, General and Visceral"), s("false")], vec![s("THERAPY"), s("Rehabilitation Therapy"), s("true")]]);
    let census = db.query("SELECT DISTINCT dept_name, beds::VARCHAR FROM dev__med.census_daily WHERE dept = 'SURGERY'").unwrap();
    assert_eq!(census, vec![vec![s("Surgery, General and Visceral"), s("64")]]);
}

#[allow(dead_code)]
#[path = "../../examples/hospital_data.rs"]
mod hospital_data;

#[test]
fn hospital_generator_is_deterministic_and_matches_the_committed_data() {
    let dir = tempfile::tempdir().unwrap();
    hospital_data::generate(dir.path(), hospital_data::SEED).unwrap();
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hospital/data");
    for file in ["moves.csv"] {
        let fresh = std::fs::read(dir.path().join(file)).unwrap();
        let shipped = std::fs::read(committed.join(file)).unwrap();
        assert!(fresh == shipped, "{file} differs from a fresh run of the generator");
    }
    let rows = std::fs::read_to_string(dir.path().join("moves.csv")).unwrap().lines().count() - 1;
    assert!(rows >= 100_000, "only {rows} movement rows");
}
