//! The shipped examples, applied end to end on real and generated data, as golden fixtures:
//! row counts measured when the examples were written (see their READMEs).

use efmesh::apply::{self, Options};
use efmesh::config::Config;
use efmesh::core::interval::parse_instant;
use efmesh::engine::Engine;
use efmesh::engine::duckdb::DuckDb;
use efmesh::project::Project;
use efmesh::state::SqliteStore;
use std::path::Path;

/// Copies an example's committed files (config, models, tests, data) into a temporary directory,
/// so tests never write into the source tree and never share a lake or DuckLake catalog.
fn copy_example(dir: &str) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path, top: bool) {
        fs_err::create_dir_all(to).unwrap();
        for entry in fs_err::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            let name_s = name.to_string_lossy();
            // Outputs of earlier runs: the lake and DuckLake directories, databases, state stores.
            if (top && ["lake", "ducklake"].contains(&name_s.as_ref())) || name_s.contains(".duckdb") || name_s.contains(".state.sqlite") {
                continue;
            }
            let (src, dst) = (entry.path(), to.join(&name));
            if src.is_dir() {
                copy(&src, &dst, false)
            } else {
                fs_err::copy(&src, &dst).unwrap();
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    copy(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(dir), tmp.path(), true);
    tmp
}

/// Applies a copy of the example to `dev` (in-memory engine and state); the directory lives as
/// long as the returned `TempDir`.
fn apply_example(dir: &str, now: &str) -> (Project, DuckDb, SqliteStore, tempfile::TempDir) {
    apply_example_with(dir, now, 0)
}

/// [`apply_example`] building `jobs` models at once (0: the number of cores).
fn apply_example_with(dir: &str, now: &str, jobs: usize) -> (Project, DuckDb, SqliteStore, tempfile::TempDir) {
    let tmp = copy_example(dir);
    let root = tmp.path().to_path_buf();
    let config = Config::load(&root.join("efmesh.toml")).unwrap();
    let project = Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let state = SqliteStore::open_in_memory().unwrap();
    let mut engine = DuckDb::in_memory().unwrap();
    let now = parse_instant(now).unwrap();
    let plan = efmesh::plan::plan(&project, &state, "dev", now).unwrap();
    apply::apply(&project, &plan, &state, &mut engine, &Options { jobs, ..Options::default() }).unwrap_or_else(|e| panic!("{e}"));
    let again = efmesh::plan::plan(&project, &state, "dev", now).unwrap();
    assert!(!again.has_changes, "a plan right after apply must be empty: {again:?}");
    (project, engine, state, tmp)
}

fn count(engine: &mut DuckDb, relation: &str) -> u64 {
    engine.query(&format!("SELECT count(*) FROM {relation}")).unwrap()[0][0].as_deref().unwrap().parse().unwrap()
}

#[test]
fn flights_example_builds_the_published_row_counts() {
    let (_, mut db, _, _dir) = apply_example("flights", "2026-11-30T00:00:00Z");
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
    let (_, mut db, _, dir) = apply_example("hospital", "2026-11-30T00:00:00Z");
    assert_eq!(count(&mut db, "dev__stg.moves"), 106_175);
    assert_eq!(count(&mut db, "dev__med.moves"), 106_175);
    assert_eq!(count(&mut db, "dev__med.stays"), 76_654);
    assert_eq!(count(&mut db, "dev__med.census_daily"), 1_267);
    // The departments seed: a quoted name holding a comma, `NA` read as NULL, names joined
    // into the census.
    assert_eq!(count(&mut db, "dev__raw.departments"), 7);
    let seed = db.query("SELECT code, name, (phone IS NULL)::VARCHAR FROM dev__raw.departments WHERE code IN ('SURGERY', 'THERAPY') ORDER BY code").unwrap();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(seed, vec![vec![s("SURGERY"), s("Surgery, General and Visceral"), s("false")], vec![s("THERAPY"), s("Rehabilitation Therapy"), s("true")]]);
    let census = db.query("SELECT DISTINCT dept_name, beds::VARCHAR FROM dev__med.census_daily WHERE dept = 'SURGERY'").unwrap();
    assert_eq!(census, vec![vec![s("Surgery, General and Visceral"), s("64")]]);
    assert_eq!(count(&mut db, "dev__med.current_location"), 24_293, "one row per patient");
    assert_eq!(count(&mut db, "dev__med.assignments"), 1_321, "one open version per patient still in the house");
    // Storage targets: a parquet lake model (one file per day) and a DuckLake model read like
    // tables, and agree with the same aggregates over `med.moves`.
    let per_day = count(&mut db, "(SELECT DISTINCT date_trunc('day', moved_at), dept, event FROM dev__med.moves)");
    assert_eq!(count(&mut db, "dev__lake.dept_moves_daily"), per_day);
    assert_eq!(count(&mut db, "dev__lake.dept_moves_daily WHERE moves > 0"), per_day);
    let total = db.query("SELECT CAST(sum(moves) AS VARCHAR) FROM dev__lake.dept_moves_daily").unwrap();
    assert_eq!(total[0][0].as_deref(), Some("106175"));
    let load = db.query("SELECT CAST(sum(moves) AS VARCHAR), CAST(count(*) AS VARCHAR) FROM dev__lake.dept_load").unwrap();
    assert_eq!(load[0], vec![Some("106175".to_string()), Some("7".to_string())]);
    let physical = db.query("SELECT table_catalog FROM information_schema.tables WHERE table_name LIKE 'lake__dept_load__%'").unwrap();
    assert_eq!(physical, vec![vec![Some("_efmesh_ducklake".to_string())]], "the DuckLake model is a table of the catalog");
    let lake = dir.path().join("lake/lake__dept_moves_daily");
    for version in fs_err::read_dir(&lake).unwrap() {
        let dir = version.unwrap().path();
        let files = fs_err::read_dir(&dir).unwrap().filter(|f| f.as_ref().unwrap().file_name().to_string_lossy().ends_with(".parquet")).count();
        assert_eq!(files, 181, "one file per day of 2026-01-01 … 2026-06-30 in {}", dir.display());
    }
}

/// `examples/hospital_portable` (the hospital example in SQL Postgres runs too) builds the row
/// counts its README publishes, the hospital example's; tests/it/engines.rs compares its rows
/// with the hospital example's and between DuckDB and Postgres.
#[test]
fn hospital_portable_example_builds_the_published_row_counts() {
    let (_, mut db, _, _dir) = apply_example("hospital_portable", "2026-11-30T00:00:00Z");
    assert_eq!(count(&mut db, "dev__raw.moves"), 106_496, "the feed is a seed here");
    assert_eq!(count(&mut db, "dev__raw.departments"), 7);
    assert_eq!(count(&mut db, "dev__stg.moves"), 106_175);
    assert_eq!(count(&mut db, "dev__med.moves"), 106_175);
    assert_eq!(count(&mut db, "dev__med.stays"), 76_654);
    assert_eq!(count(&mut db, "dev__med.census_daily"), 1_267);
    assert_eq!(count(&mut db, "dev__med.current_location"), 24_293);
    assert_eq!(count(&mut db, "dev__med.assignments"), 1_321);
}

#[test]
fn hospital_assignments_gain_history_through_daily_runs() {
    let (project, mut db, state, _dir) = apply_example("hospital", "2026-03-01T00:00:00Z");
    assert_eq!(count(&mut db, "dev__med.assignments"), count(&mut db, "dev__med.current_location WHERE in_house"));
    for day in ["2026-03-02", "2026-03-03", "2026-03-04"] {
        let now = parse_instant(day).unwrap();
        let plan = efmesh::plan::plan(&project, &state, "dev", now).unwrap();
        let outcome = apply::run::run(&project, &plan, &state, &mut db, &Options { applied_by: "it".into(), jobs: 0, ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
        let apply::run::RunOutcome::Ran(report) = outcome else { panic!("run blocked on {day}") };
        let built: Vec<String> = report.built.iter().map(ToString::to_string).collect();
        // The refreshed and backfilled models (`stg.moves`, upserted from the feed, before the
        // new days of `med.moves` read it), then the `full` and `view` models downstream of them.
        assert_eq!(
            built,
            ["stg.moves", "med.moves", "lake.dept_load", "lake.dept_moves_daily", "med.current_location", "med.assignments", "med.stays", "med.census_daily"],
            "{day}"
        );
    }
    // Measured with the default seed (see examples/hospital/README.md).
    assert_eq!(count(&mut db, "dev__med.current_location"), 9_627);
    assert_eq!(count(&mut db, "dev__med.current_location WHERE in_house"), 1_342);
    assert_eq!(count(&mut db, "dev__med.assignments"), 2_449);
    assert_eq!(count(&mut db, "dev__med.assignments WHERE valid_to IS NULL"), 1_342, "open versions = patients in the house");
    assert_eq!(count(&mut db, "(SELECT patient_id FROM dev__med.assignments WHERE valid_to IS NULL GROUP BY ALL HAVING count(*) > 1)"), 0);
    assert_eq!(count(&mut db, "dev__med.assignments WHERE valid_from = TIMESTAMP '2026-03-01' AND valid_to IS NULL"), 458, "unchanged since the first apply");
}

#[allow(dead_code)]
#[path = "../../examples/hospital_data.rs"]
mod hospital_data;

#[test]
fn hospital_generator_is_deterministic_and_matches_the_committed_data() {
    let dir = tempfile::tempdir().unwrap();
    hospital_data::generate(dir.path(), hospital_data::SEED).unwrap();
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hospital/data");
    {
        let file = "moves.csv";
        let fresh = fs_err::read(dir.path().join(file)).unwrap();
        let shipped = fs_err::read(committed.join(file)).unwrap();
        assert!(fresh == shipped, "{file} differs from a fresh run of the generator");
    }
    // examples/hospital_portable loads the same feed as a seed.
    let portable = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hospital_portable/seeds/moves.csv");
    assert!(
        fs_err::read(&portable).unwrap() == fs_err::read(committed.join("moves.csv")).unwrap(),
        "{} differs from the hospital example's data/moves.csv",
        portable.display()
    );
    let rows = fs_err::read_to_string(dir.path().join("moves.csv")).unwrap().lines().count() - 1;
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
fn hospital_portable_unit_tests_pass() {
    let tests = example_unit_tests("hospital_portable");
    let names: Vec<&str> = tests.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["stg_moves_cleans_the_feed", "med_moves_keeps_only_its_interval", "stays_follow_each_case", "stays_of_no_moves_is_empty"]);
}

#[test]
fn flights_unit_tests_pass() {
    let tests = example_unit_tests("flights");
    let got: Vec<(&str, &str)> = tests.iter().map(|(n, m, _)| (n.as_str(), m.as_str())).collect();
    assert_eq!(got, [("carrier_delays_of_one_utc_day", "mart.carrier_delays_daily"), ("worst_routes_are_frequent_and_sorted", "mart.worst_routes")]);
}

/// Every relation `dev` serves, each as its sorted rows (every value cast to text).
fn served_rows(project: &Project, engine: &mut DuckDb) -> Vec<(String, Vec<Vec<Option<String>>>)> {
    use efmesh::core::Kind;
    let mut out = Vec::new();
    for m in project.dag.models().filter(|m| !matches!(m.kind, Kind::External(_) | Kind::Embedded)) {
        let view = format!("\"{}\".\"{}\"", efmesh::plan::env_schema("dev", m.name.schema()), m.name.table());
        let mut rows = engine.query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {view}")).unwrap_or_else(|e| panic!("{view}: {e}"));
        rows.sort();
        out.push((view, rows));
    }
    out
}

#[test]
fn examples_build_the_same_rows_with_one_job_and_with_four() {
    for dir in ["flights", "hospital", "hospital_portable"] {
        let (project, mut one, _, _d1) = apply_example_with(dir, "2026-11-30T00:00:00Z", 1);
        let (_, mut four, _, _d4) = apply_example_with(dir, "2026-11-30T00:00:00Z", 4);
        let (a, b) = (served_rows(&project, &mut one), served_rows(&project, &mut four));
        assert!(a.len() > 3, "{dir}: {} relations", a.len());
        for ((view, rows1), (_, rows4)) in a.iter().zip(&b) {
            assert!(rows1 == rows4, "{dir}: {view} differs between --jobs 1 ({} rows) and --jobs 4 ({} rows)", rows1.len(), rows4.len());
        }
    }
}
