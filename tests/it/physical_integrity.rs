//! Engine relations against the state (SPEC §4, invariants 18–20): a relation embedding another's
//! physical name is never reused across a change of that name (views and views over embedded
//! models follow their parents' new versions); a lost DuckDB file, a dropped physical table or a
//! dropped environment view is noticed by `plan`, rebuilt and restored by `apply` with a warning;
//! a moved project re-creates the views that read project files.

use crate::common::*;
use efmesh::config::EngineSection;
use efmesh::engine::Engine;
use efmesh::engine::duckdb::DuckDb;
use serde_json::Value;
use std::path::Path;

crate::on_every_engine!(
    the_engine_epoch_follows_the_writes_to_tables,
    views_follow_a_non_breaking_parent_version_into_later_intervals,
    a_dropped_physical_table_is_rebuilt_with_every_interval,
    a_dropped_environment_view_is_restored,
    apply_refuses_a_plan_that_relies_on_a_vanished_relation,
    schemas_differing_only_in_case_are_one_engine_schema,
    a_physical_view_reading_an_old_parent_version_is_rebuilt,
    a_relation_of_the_users_where_a_new_models_view_goes_is_refused_and_efmeshs_own_is_replaced,
    status_checks_the_served_version_of_a_model_edited_but_not_applied,
);

/// A time-range parent `m.p` (one row per day, `extra` appended to its columns), a view `m.v`
/// over it, an embedded `m.e` over it and a view `m.ve` over the embedded model.
fn parent_and_views(extra_col: &str, extra_schema: &str) -> String {
    format!(
        r#"local p = define_model {{
  name = "m.p",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "integer" }} {extra_schema} }},
  query = [[SELECT CAST(d AS TIMESTAMP) AS day, 1 AS v {extra_col} FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-12-31', INTERVAL '1 day') AS g(d) WHERE d >= @start AND d < @end]],
}}
local e = define_model {{
  name = "m.e",
  kind = kind.embedded(),
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "integer" }} }},
  query = "SELECT day, v FROM " .. ref(p),
}}
define_model {{
  name = "m.v",
  kind = kind.view(),
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "integer" }} }},
  query = "SELECT day, v FROM " .. ref(p),
}}
define_model {{
  name = "m.ve",
  kind = kind.view(),
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "integer" }} }},
  query = "SELECT day, v FROM " .. ref(e),
}}
"#
    )
}

fn count(p: &Project, relation: &str) -> usize {
    p.query(&format!("SELECT count(*) FROM {relation}"))[0][0].as_deref().expect("count").parse().expect("number")
}

fn views_follow_a_non_breaking_parent_version_into_later_intervals(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-05T00:00:00Z".into();
    p.write("models/m.lua", &parent_and_views("", ""));
    let first = p.apply("dev");
    assert_eq!(count(&p, &env_view("dev", "m.v")), 4);

    // Non-breaking edit of the parent: a new version with a new table; the views are indirect.
    p.write("models/m.lua", &parent_and_views(", 2 AS w", r#", { "w", "integer" }"#));
    let second = p.apply("dev");
    assert_eq!(action(&second, "m.p")["change"], "non-breaking", "{second:#}");

    // Later intervals land in the new parent table only; the views must show them.
    p.now = "2026-01-08T00:00:00Z".into();
    let run = p.run(&["run", "dev"]);
    run.expect_code(0);
    assert_eq!(count(&p, &env_view("dev", "m.p")), 7);
    assert_eq!(count(&p, &env_view("dev", "m.v")), 7, "the view child reads the parent's current version");
    assert_eq!(count(&p, &env_view("dev", "m.ve")), 7, "the view over the embedded model reads the parent's current version");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    for view in ["m.v", "m.ve"] {
        let a = action(&second, view);
        assert_eq!(a["change"], "indirect", "{a:#}");
        assert!(a.get("reusedFrom").is_none(), "the parent's table changed, so the view it is named in is not reused: {a:#}");
        assert_ne!(a["physical"], action(&first, view)["physical"], "{a:#}");
    }
}

/// Every served model's rows in `env`.
fn served_rows(p: &Project, plan: &Value, env: &str) -> Vec<(String, Rows)> {
    served_models(plan).into_iter().map(|m| (m.clone(), p.rows(&env_view(env, &m)))).collect()
}

/// A DuckDB file DuckDB finds corrupt (what 1.5.5 can leave when killed during a checkpoint,
/// SPEC §4 invariant 8): `apply` exits 1 naming it, with the way out as a hint, and changes no
/// state; moved aside as the hint says, `apply` serves the same rows again.
#[test]
fn a_corrupt_duckdb_file_fails_loudly_with_the_way_out_and_moved_aside_is_rebuilt() {
    let p = sample_project();
    let dev = p.apply("dev");
    let dev_rows = served_rows(&p, &dev, "dev");
    let state = p.state_summary();
    // Bytes of block 0 (the first after DuckDB's three header blocks) overwritten: its checksum
    // no longer matches.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = fs_err::OpenOptions::new().write(true).open(p.engine_path()).expect("open");
        f.seek(SeekFrom::Start(12_288 + 64)).expect("seek");
        f.write_all(&[0xff; 32]).expect("write");
    }
    // `plan` does not assume the relations of a file it cannot read exist ("no changes"): it
    // stops, as `apply` does.
    let plan = p.run(&["plan", "dev"]);
    plan.expect_code(1);
    assert!(plan.stderr.contains("Corrupt database file") && plan.stderr.contains("hint: DuckDB cannot read this file"), "{}", plan.stderr);
    let p2 = p.run(&["apply", "dev", "--yes"]);
    p2.expect_code(1);
    assert!(p2.stderr.contains("Corrupt database file") && p2.stderr.contains("hint: DuckDB cannot read this file"), "{}", p2.stderr);
    assert!(p2.stderr.contains("move it aside") && p2.stderr.contains("`efmesh apply <env>`"), "{}", p2.stderr);
    assert_eq!(p.state_summary(), state, "nothing recorded");
    // The way out, as the hint gives it.
    fs_err::rename(p.engine_path(), p.root().join("efmesh.duckdb.corrupt")).expect("move aside");
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(served_rows(&p, &dev, "dev"), dev_rows);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A file at the engine's path that DuckDB cannot open for another reason than a lock (here not
/// a DuckDB file at all) fails `plan` and `status --check` too: neither assumes its relations
/// exist ("no changes", "healthy"). A file another process is writing is the one case a plan
/// warns and goes on (`cli.md`).
#[test]
fn a_file_that_is_not_a_duckdb_database_fails_plan_and_status_instead_of_no_changes() {
    let p = sample_project();
    p.apply("dev");
    fs_err::write(p.engine_path(), "{ \"apiVersion\": 1 }\n").expect("write");
    for args in [&["plan", "dev"][..], &["status", "dev", "--check"]] {
        let r = p.run(args);
        r.expect_code(1);
        assert!(r.stderr.contains("not a valid DuckDB database file"), "{args:?}: {}", r.stderr);
        assert!(!r.stdout.contains("no changes"), "{args:?}: {}", r.stdout);
    }
}

/// A Postgres engine that cannot be read (here the server unreachable; equally a dropped
/// database or an unknown role) fails `plan` and `status --check` with exit 1, naming the
/// database and why, instead of assuming every relation it serves exists ("no changes",
/// "health: ok"): the Postgres engine has no transient lock a plan could wait out.
#[test]
fn a_postgres_engine_that_cannot_be_read_fails_plan_and_status_instead_of_healthy() {
    let Some(t) = crate::pg::fresh_database() else { return };
    let p = sample_project_with(StateBackend::Sqlite, EngineBackend::Postgres(t));
    p.apply("dev");
    let nowhere = "postgres://efmesh@127.0.0.1:1/nowhere";
    for args in [&["plan", "dev"][..], &["status", "dev", "--check"]] {
        let out = p.command(args).env(PG_ENGINE_URL_ENV, nowhere).output().expect("spawn efmesh");
        let r = Run::from_output(out, args.join(" "));
        r.expect_code(1);
        assert!(r.stderr.contains(&format!("cannot open Postgres database `{nowhere}`")), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("assumes every relation"), "{args:?}: {}", r.stderr);
        assert!(!r.stdout.contains("no changes") && !r.stdout.contains("health: ok"), "{args:?}: {}", r.stdout);
    }
    // Reachable again, nothing was lost.
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

/// The one engine a plan does not read and still goes on with: a DuckDB file another process
/// holds (it is writing it). `plan` warns that it assumes every relation exists and
/// `status --check` stays healthy; `apply` checks again on its own connection.
#[test]
fn a_duckdb_file_another_process_holds_is_assumed_with_a_warning() {
    let p = sample_project();
    p.apply("dev");
    // Neither the recorded catalog nor the plan-check token may spare the plan its read.
    let _ = fs_err::remove_file(p.root().join(".efmesh/engine-catalog"));
    let _ = fs_err::remove_file(p.root().join(".efmesh/plan-check"));
    let _held = DuckDb::open(&p.engine_path(), &EngineSection::default()).expect("open duckdb");
    let plan = p.run(&["plan", "dev"]);
    plan.expect_code(0);
    assert!(plan.stderr.contains("cannot read the engine catalog, so this plan assumes every relation it relies on exists"), "{}", plan.stderr);
    assert!(plan.stderr.contains("Could not set lock on file"), "{}", plan.stderr);
    // The plan goes on: the open failure's hint (run again, `--retries`) is not repeated to it.
    assert!(!plan.stderr.contains("run this again") && !plan.stderr.contains("--retries"), "{}", plan.stderr);
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

#[test]
fn a_lost_duckdb_file_is_noticed_rebuilt_and_its_views_restored() {
    let p = sample_project();
    let dev = p.apply("dev");
    p.apply("prod");
    let dev_rows = served_rows(&p, &dev, "dev");
    let prod_rows = served_rows(&p, &dev, "prod");
    let ledger = p.state_summary().intervals;

    p.remove("efmesh.duckdb");
    let _ = fs_err::remove_file(p.root().join("efmesh.duckdb.wal"));

    // plan names what is missing, and writes nothing.
    let text = p.run(&["plan", "dev"]);
    text.expect_code(0);
    assert!(text.stdout.contains("physical relation missing from the engine"), "{}", text.stdout);
    // The header counts the repairs: not "4 unchanged" alone, which reads as nothing to do.
    let repairs = text.stdout.lines().filter(|l| l.contains("missing")).count();
    assert!(repairs > 0 && text.stdout.lines().next().is_some_and(|h| h.ends_with(&format!(", {repairs} to repair)"))), "{}", text.stdout);
    assert!(text.stderr.contains("warning") && text.stderr.contains("\"dev__s\".\"a\"") && text.stderr.contains("is missing"), "{}", text.stderr);
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    for m in served_models(&plan) {
        let a = action(&plan, &m);
        assert_eq!(a["repair"]["physicalMissing"], true, "{a:#}");
        assert_eq!(a["repair"]["viewMissing"], true, "{a:#}");
        assert_eq!(a["build"], true, "{a:#}");
    }
    // The lost table's ledger is not trusted: every wanted interval is recomputed.
    assert_eq!(action(&plan, "t.daily")["intervals"], 40, "{plan:#}");
    assert!(!p.engine_path().exists(), "plan must not create the engine file");
    // The cron tick does not restore: it refuses and says what is missing.
    let run = p.run(&["run", "dev"]);
    run.expect_code(2);
    assert!(run.stderr.contains("s.a: physical relation missing, view missing (`apply` repairs it)"), "{}", run.stderr);

    let applied = p.run(&["apply", "dev", "--yes"]);
    applied.expect_code(0);
    assert!(applied.stderr.contains("\"_efmesh\".\"s__a__") && applied.stderr.contains("is missing"), "{}", applied.stderr);
    assert_eq!(served_rows(&p, &dev, "dev"), dev_rows);
    assert_eq!(p.state_summary().intervals, ledger, "the ledger describes the rebuilt tables again");
    assert_eq!(p.plan("dev")["hasChanges"], false);

    // prod shares the rebuilt versions: only its views are restored.
    let prod = p.apply("prod");
    assert_eq!(prod["built"], serde_json::json!([]), "{prod:#}");
    assert_eq!(served_rows(&p, &dev, "prod"), prod_rows);
    assert_eq!(p.plan("prod")["hasChanges"], false);
}

fn a_dropped_physical_table_is_rebuilt_with_every_interval(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let dev = p.apply("dev");
    p.apply("prod");
    let before = p.rows(&env_view("dev", "t.daily"));
    let physical = action(&dev, "t.daily")["physical"].as_str().expect("physical").to_string();
    // Postgres drops a table only with the views reading it (CASCADE): there the environment
    // views of dev and prod vanish with it.
    let cascade = if p.on_postgres() { " CASCADE" } else { "" };
    p.execute_on_engine(&format!("DROP TABLE {physical}{cascade}"));
    // `status --check` sees it as the plan does: unhealthy (run would refuse).
    let status = p.run(&["status", "dev", "--check", "--json"]);
    let problems = status.expect_code(1).json()["problems"].to_string();
    assert!(problems.contains("the engine lacks what it serves of `t.daily` ("), "{problems}");

    let plan = p.plan("dev");
    let daily = action(&plan, "t.daily");
    assert_eq!(daily["repair"]["physicalMissing"], true, "{plan:#}");
    if p.on_postgres() {
        assert_eq!(daily["repair"]["viewMissing"], true, "{plan:#}");
    } else {
        assert!(daily["repair"].get("viewMissing").is_none(), "{plan:#}");
    }
    assert_eq!(daily["intervals"], 40, "{plan:#}");
    for a in actions(&plan).iter().filter(|a| a["name"] != "t.daily") {
        assert!(a.get("repair").is_none() && a["build"] == false, "{a:#}");
    }

    let applied = p.run(&["apply", "dev", "--yes", "--json"]);
    applied.expect_code(0);
    assert!(applied.stderr.contains(&physical) && applied.stderr.contains("is missing"), "{}", applied.stderr);
    assert_eq!(applied.json()["built"], serde_json::json!(["t.daily"]));
    assert_eq!(p.rows(&env_view("dev", "t.daily")), before);
    if p.on_postgres() {
        // prod's view went with the table: only the view is restored, over the rebuilt table.
        let plan = p.plan("prod");
        assert_eq!(action(&plan, "t.daily")["repair"], serde_json::json!({"viewMissing": true}), "{plan:#}");
        assert_eq!(action(&plan, "t.daily")["build"], false, "{plan:#}");
        assert_eq!(p.apply("prod")["built"], serde_json::json!([]));
    }
    assert_eq!(p.rows(&env_view("prod", "t.daily")), before, "prod serves the same, rebuilt table");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

/// `status --check` checks what the state store says the environment serves, whatever the
/// working tree holds: `prod`'s physical table of `s.a` dropped by hand, an unapplied edit of
/// `s.a` (a `git pull` on a monitoring host) does not make it healthy — the text and the JSON
/// name the model and the relation — and applying the edit repairs it.
fn status_checks_the_served_version_of_a_model_edited_but_not_applied(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let applied = p.apply("prod");
    let served = action(&applied, "s.a");
    let physical = served["physical"].as_str().expect("physical").to_string();
    let fingerprint = served["fingerprint"].as_str().expect("fingerprint").to_string();
    p.run(&["status", "prod", "--check"]).expect_code(0);
    // Postgres drops a table only with the views reading it (CASCADE).
    let cascade = if p.on_postgres() { " CASCADE" } else { "" };
    p.execute_on_engine(&format!("DROP TABLE {physical}{cascade}"));
    // The project unchanged: the plan's check finds it (and `lostRelations` does not repeat it).
    let before = p.run(&["status", "prod", "--check", "--json"]);
    let before = before.expect_code(1).json();
    assert_eq!(before["lostRelations"], serde_json::json!([]), "{before:#}");

    // An unapplied edit of `s.a`: the project's version is another one.
    p.write("models/a.lua", &portable_sample(&p, &model_a("AND range < 5")));
    let plan = p.plan("prod");
    assert_ne!(action(&plan, "s.a")["change"], "unchanged", "{plan:#}");
    let text = p.run(&["status", "prod", "--check"]);
    text.expect_code(1);
    let line = format!("  ⚠ s.a  physical relation {physical} missing (the version `prod` serves; the project defines another version): `apply` repairs it");
    assert!(text.stdout.contains(&line), "{}", text.stdout);
    assert!(text.stdout.contains("health: unhealthy (") && !text.stdout.contains("health: ok"), "{}", text.stdout);
    let json = p.run(&["status", "prod", "--check", "--json"]);
    let v = json.expect_code(1).json();
    assert_eq!(v["healthy"], false, "{v:#}");
    let problems: Vec<&str> = v["problems"].as_array().expect("problems").iter().map(|t| t.as_str().expect("text")).collect();
    assert!(problems.iter().any(|t| t.contains(&format!("`s.a` (physical relation {physical} missing)")) && t.contains("`apply` repairs it")), "{problems:?}");
    let lost = v["lostRelations"].as_array().expect("lostRelations");
    let expected = serde_json::json!({"model": "s.a", "fingerprint": fingerprint, "relation": physical, "lack": "physicalMissing", "removed": false});
    assert!(lost.contains(&expected), "{v:#}");
    if !p.on_postgres() {
        // DuckDB keeps the view over the dropped table: the physical relation alone is missing.
        assert_eq!(lost.len(), 1, "{v:#}");
    }

    // Applying the edit serves the project's version: healthy again.
    p.apply("prod");
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

fn a_dropped_environment_view_is_restored(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    let before = p.rows(&env_view("dev", "s.c"));
    p.execute_on_engine(&format!("DROP VIEW {}", env_view("dev", "s.c")));

    // The plan is replayed from the memo the apply recorded: the replay is checked too.
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let project = efmesh::project::Project::load(&config).expect("project");
    let now = efmesh::core::interval::parse_instant(NOW).unwrap();
    assert!(efmesh::plan::memo::lookup(&project, &p.state(), "dev", now).expect("memo").is_some(), "the next plan is a memo replay");
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "s.c")["repair"], serde_json::json!({"viewMissing": true}), "{plan:#}");
    assert_eq!(action(&plan, "s.c")["build"], false);
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!([]), "{applied:#}");
    assert_eq!(p.rows(&env_view("dev", "s.c")), before);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

fn apply_refuses_a_plan_that_relies_on_a_vanished_relation(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    // This process opens the engine below.
    p.engine_url_in_process();
    let dev = p.apply("dev");
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let project = efmesh::project::Project::load(&config).expect("project");
    let now = efmesh::core::interval::parse_instant(NOW).unwrap();
    // Planned without looking at the engine, then the table vanishes.
    let plan = efmesh::plan::plan(&project, &p.state(), "dev", now).expect("plan");
    let physical = action(&dev, "s.a")["physical"].as_str().expect("physical").to_string();
    // Postgres drops a table only with the views reading it (`s.b`'s, the environment's).
    let cascade = if p.on_postgres() { " CASCADE" } else { "" };
    p.execute_on_engine(&format!("DROP TABLE {physical}{cascade}"));
    let before = p.state_summary();
    let mut engine = efmesh::engine::open(&project.config, efmesh::engine::Access::ReadWrite).expect("open the engine");
    let err = efmesh::apply::apply(&project, &plan, &p.state(), &mut *engine, &Default::default()).expect_err("must refuse").to_string();
    assert!(err.contains(&physical) && err.contains("plan again"), "{err}");
    drop(engine);
    assert_eq!(p.state_summary(), before);
}

/// Runs the binary in `dir` (a project root).
fn efmesh_in(dir: &Path, args: &[&str]) -> Run {
    let out = std::process::Command::new(BIN)
        .current_dir(dir)
        .args(["--config", "efmesh.toml", "--now", NOW])
        .args(args)
        .env_remove("RUST_LOG")
        .env("EFMESH_APPLIED_BY", "it")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn efmesh");
    Run::from_output(out, format!("efmesh {} (in {})", args.join(" "), dir.display()))
}

fn rows_in(dir: &Path, relation: &str) -> Rows {
    let mut db = DuckDb::open(&dir.join("efmesh.duckdb"), &EngineSection::default()).expect("open duckdb");
    let mut r = db.query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}"));
    r.sort();
    r
}

const MOVED_MODELS: &str = r#"local events = define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.csv" },
  schema = { { "region", "varchar" }, { "amount", "bigint" } },
}
local e = define_model {
  name = "s.e",
  kind = kind.embedded(),
  schema = { { "region", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, amount FROM " .. ref(events),
}
define_model { name = "s.v", kind = kind.view(), schema = { { "region", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, amount FROM " .. ref(events) }
define_model { name = "s.ve", kind = kind.view(), schema = { { "region", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, amount FROM " .. ref(e) }
define_model { name = "s.t", kind = kind.full(), schema = { { "region", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, amount FROM " .. ref(events) }
define_model { name = "s.lk", kind = kind.full(), target = "parquet", schema = { { "region", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, amount FROM " .. ref(events) }
"#;

#[test]
fn a_moved_project_recreates_the_views_over_project_files() {
    let outer = tempfile::Builder::new().prefix("efmesh-it-move-").tempdir().expect("temp dir");
    let (old, new) = (outer.path().join("before"), outer.path().join("after"));
    fs_err::create_dir_all(old.join("models")).unwrap();
    fs_err::create_dir_all(old.join("data")).unwrap();
    fs_err::write(old.join("efmesh.toml"), format!("{CONFIG}\n[lake]\npath = \"lake\"\n")).unwrap();
    fs_err::write(old.join("data/events.csv"), "region,amount\nnorth,1\nsouth,2\n").unwrap();
    fs_err::write(old.join("models/m.lua"), MOVED_MODELS).unwrap();
    let old = old.canonicalize().unwrap();
    efmesh_in(&old, &["apply", "prod", "--yes"]).expect_code(0);
    let expected: Rows = vec![vec![Some("north".into()), Some("1".into())], vec![Some("south".into()), Some("2".into())]];
    for m in ["s.v", "s.ve", "s.t", "s.lk"] {
        assert_eq!(rows_in(&old, &env_view("prod", m)), expected, "{m}");
    }

    fs_err::rename(&old, &new).unwrap();
    let plan = efmesh_in(&new, &["plan", "prod", "--json"]);
    let plan = plan.expect_code(0).json();
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    for m in ["s.v", "s.ve", "s.lk"] {
        assert_eq!(action(&plan, m)["repair"]["createdUnder"], old.to_string_lossy().as_ref(), "{m}: {plan:#}");
    }
    for m in ["s.t", "raw.events", "s.e"] {
        assert!(action(&plan, m).get("repair").is_none(), "{m}: a table's data was copied, it embeds no path: {plan:#}");
    }
    let applied = efmesh_in(&new, &["apply", "prod", "--yes"]);
    applied.expect_code(0);
    assert!(applied.stderr.contains("`apply` re-creates it"), "{}", applied.stderr);
    // Queried from another working directory, through another connection.
    for m in ["s.v", "s.ve", "s.t", "s.lk"] {
        assert_eq!(rows_in(&new, &env_view("prod", m)), expected, "{m}");
    }
    let again = efmesh_in(&new, &["plan", "prod", "--json"]).expect_code(0).json();
    assert_eq!(again["hasChanges"], false, "{again:#}");
}

/// An external CSV and a view `s.v` over it, its `amount` times `factor`.
fn view_over_a_file(factor: i64) -> String {
    format!(
        r#"local events = define_model {{
  name = "raw.events",
  kind = kind.external {{ path = "data/events.csv" }},
  schema = {{ {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
}}
define_model {{ name = "s.v", kind = kind.view(), schema = {{ {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
  query = "SELECT region, amount * {factor} AS amount FROM " .. ref(events) }}
"#
    )
}

/// A promotion interrupted after its view swap, then the project moved (a restored backup on
/// another host): the undo's old definition of `s.v` reads the file under the previous root.
/// The next command drops that view, naming it and the failure, and forgets the record instead
/// of failing for ever; `apply` re-creates everything under the new root and converges.
#[test]
fn an_interrupted_promotion_in_a_moved_project_is_undone_and_apply_converges() {
    let outer = tempfile::Builder::new().prefix("efmesh-it-move-").tempdir().expect("temp dir");
    let (old, new) = (outer.path().join("before"), outer.path().join("after"));
    fs_err::create_dir_all(old.join("models")).unwrap();
    fs_err::create_dir_all(old.join("data")).unwrap();
    fs_err::write(old.join("efmesh.toml"), CONFIG).unwrap();
    fs_err::write(old.join("data/events.csv"), "region,amount\nnorth,1\nsouth,2\n").unwrap();
    fs_err::write(old.join("models/m.lua"), view_over_a_file(1)).unwrap();
    let old = old.canonicalize().unwrap();
    efmesh_in(&old, &["apply", "prod", "--yes"]).expect_code(0);
    fs_err::write(old.join("models/m.lua"), view_over_a_file(2)).unwrap();
    let out = std::process::Command::new(BIN)
        .current_dir(&old)
        .args(["--config", "efmesh.toml", "--now", NOW, "apply", "prod", "--yes"])
        .env_remove("RUST_LOG")
        .env(efmesh::apply::fault::FAULT_ENV, "after-view-swap")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn efmesh");
    let crashed = Run::from_output(out, "EFMESH_FAULT=after-view-swap efmesh apply prod --yes".to_string());
    assert!(crashed.stderr.contains("aborting at `after-view-swap`"), "{}", crashed.stderr);

    fs_err::rename(&old, &new).unwrap();
    let r = efmesh_in(&new, &["plan", "prod", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `prod`"), "{}", r.stderr);
    assert!(r.stderr.contains("the interrupted promotion of `prod` cannot put view `s.v` back as it was"), "{}", r.stderr);
    assert!(r.stderr.contains("No files found"), "the failure is named: {}", r.stderr);
    assert_eq!(r.json()["hasChanges"], true);
    let again = efmesh_in(&new, &["plan", "prod"]);
    again.expect_code(0);
    assert!(!again.stderr.contains("interrupted"), "the record was forgotten: {}", again.stderr);

    efmesh_in(&new, &["apply", "prod", "--yes"]).expect_code(0);
    let doubled: Rows = vec![vec![Some("north".into()), Some("2".into())], vec![Some("south".into()), Some("4".into())]];
    assert_eq!(rows_in(&new, &env_view("prod", "s.v")), doubled);
    let plan = efmesh_in(&new, &["plan", "prod", "--json"]).expect_code(0).json();
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
}

fn schemas_differing_only_in_case_are_one_engine_schema(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write(
        "models/m.lua",
        r#"define_model { name = "Sales.a", kind = kind.full(), schema = { { "x", "integer" } }, query = "SELECT 1 AS x" }
define_model { name = "sales.b", kind = kind.full(), schema = { { "x", "integer" } }, query = "SELECT 2 AS x" }
"#,
    );
    p.apply("dev");
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    p.run(&["run", "dev"]).expect_code(0);
}

fn one_model(value: i32) -> String {
    format!(r#"define_model {{ name = "s.t", kind = kind.full(), schema = {{ {{ "x", "integer" }} }}, query = "SELECT {value} AS x" }}"#)
}

/// An older copy of the DuckDB file whose view points at another version than the state store
/// records (taken before a promotion that wrote no table, so its engine epoch is current): the
/// plan sees the view stale and the apply points it back.
#[test]
fn an_older_duckdb_copy_is_repaired_to_serve_the_recorded_version() {
    let p = Project::new();
    p.write("models/m.lua", &one_model(1));
    p.apply("dev");
    p.write("models/m.lua", &one_model(2));
    p.apply("dev");
    let aside = p.root().join("old.duckdb");
    std::fs::copy(p.engine_path(), &aside).unwrap();
    // Back to the first version: a promotion alone (its table is still there).
    p.write("models/m.lua", &one_model(1));
    assert_eq!(p.apply("dev")["built"], serde_json::json!([]));
    assert_eq!(p.rows(&env_view("dev", "s.t")), vec![vec![Some("1".to_string())]]);
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
    std::fs::copy(&aside, p.engine_path()).unwrap();

    let plan = p.plan("dev");
    let a = action(&plan, "s.t");
    assert_eq!(a["repair"]["viewStale"], true, "{a:#}");
    assert_eq!(a["repair"]["physicalMissing"], serde_json::Value::Null, "{a:#}");
    let applied = p.run(&["apply", "dev", "--yes"]);
    applied.expect_code(0);
    assert!(applied.stderr.contains("does not serve"), "{}", applied.stderr);
    assert_eq!(p.rows(&env_view("dev", "s.t")), vec![vec![Some("1".to_string())]]);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

fn a_physical_view_reading_an_old_parent_version_is_rebuilt(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-05T00:00:00Z".into();
    p.write("models/m.lua", &parent_and_views("", ""));
    let first = p.apply("dev");
    // As an older efmesh left it: the view's version reused across a new parent version, so its
    // physical view still reads the parent's old table.
    let view = action(&first, "m.v")["physical"].as_str().expect("physical").to_string();
    let parent = action(&first, "m.p")["physical"].as_str().expect("physical").to_string();
    p.execute_on_engine(
        &format!(
            "CREATE TABLE \"_efmesh\".\"old_parent\" AS SELECT * FROM {parent} LIMIT 1; CREATE OR REPLACE VIEW {view} AS SELECT day, v FROM \"_efmesh\".\"old_parent\""
        ),
    );
    assert_eq!(count(&p, &env_view("dev", "m.v")), 1);

    let plan = p.plan("dev");
    let a = action(&plan, "m.v");
    assert_eq!(a["repair"]["physicalStale"], true, "{a:#}");
    assert_eq!(a["build"], true, "{a:#}");
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(count(&p, &env_view("dev", "m.v")), 4);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A model new to an environment gets its view by `CREATE OR REPLACE VIEW`: a view of the user's
/// standing at that name would be replaced silently, a table would fail with the engine's
/// message. Both are refused by the plan and the apply, naming the model's file and the relation;
/// nothing is written. A view efmesh left there (its state store lost) is replaced once the
/// database is taken over (`janitor --adopt`).
fn a_relation_of_the_users_where_a_new_models_view_goes_is_refused_and_efmeshs_own_is_replaced(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    if p.on_postgres() {
        // A search_path naming efmesh's storage: Postgres then renders view definitions without
        // that schema, unless efmesh reads them with an empty one.
        p.execute_on_engine("DO $do$ BEGIN EXECUTE format('ALTER DATABASE %I SET search_path = \"$user\", public, _efmesh', current_database()); END $do$");
    }
    p.execute_on_engine("CREATE SCHEMA s; CREATE VIEW s.c AS SELECT 42 AS answer");
    for (create, what) in [
        ("", "a view efmesh did not create (it reads none of efmesh's storage"),
        ("DROP VIEW s.c; CREATE TABLE s.c AS SELECT 42 AS answer", "a table efmesh did not create"),
    ] {
        if !create.is_empty() {
            p.execute_on_engine(create);
        }
        for args in [&["plan", "prod"][..], &["apply", "prod", "--yes"][..]] {
            let run = p.run(args);
            run.expect_code(1);
            for needle in ["models/c.lua:1", "model `s.c`", "environment `prod` would serve it as the view `s.c`", what, "rename the model"] {
                assert!(run.stderr.contains(needle), "{needle:?} missing\n{}", run.stderr);
            }
        }
        assert_eq!(p.query("SELECT CAST(answer AS VARCHAR) FROM s.c"), vec![vec![Some("42".to_string())]], "the user's relation is left as it was");
        assert!(p.state_summary().envs.is_empty(), "nothing promoted: {:?}", p.state_summary());
    }
    p.execute_on_engine("DROP TABLE s.c");
    p.apply("prod");
    assert_eq!(p.plan("prod")["hasChanges"], false, "efmesh's views read as serving what the state says");
    let served = p.rows("s.c");
    assert!(!served.is_empty());
    // The state store lost: the views efmesh left read its storage, and the lost store's use
    // records remain, which look like another live store sharing the database (SPEC §4,
    // invariant 64): refused, the hint saying so, until the operator says it is gone
    // (`janitor --adopt`); then the views are replaced.
    fs_err::remove_file(p.state_path()).expect("remove the state store");
    let refused = p.run(&["apply", "prod", "--yes"]);
    for needle in ["a state store deleted and applied again is a new store", "efmesh janitor --adopt"] {
        assert!(refused.expect_code(1).stderr.contains(needle), "{needle:?} missing\n{}", refused.stderr);
    }
    assert_eq!(p.rows("s.c"), served);
    p.run(&["janitor", "--adopt"]).expect_code(0);
    let again = p.run(&["apply", "prod", "--yes"]);
    again.expect_code(0);
    assert_eq!(p.rows("s.c"), served);
    // An embedded model (no view) made a table gets a view too: checked the same way.
    p.execute_on_engine("CREATE VIEW t.e AS SELECT 42 AS answer");
    p.write("models/d.lua", &portable_sample(&p, &p.read("models/d.lua").replacen("kind.embedded()", "kind.full()", 1)));
    let run = p.run(&["apply", "prod", "--yes"]);
    assert!(
        run.expect_code(1).stderr.contains("model `t.e`: environment `prod` would serve it as the view `t.e`, where a view efmesh did not create"),
        "{}",
        run.stderr
    );
    assert_eq!(p.query("SELECT CAST(answer AS VARCHAR) FROM t.e"), vec![vec![Some("42".to_string())]]);
}

/// The DuckDB file's epoch stamp of the project's state store (0 when there is none).
fn stamped_epoch(p: &Project) -> i64 {
    let id = p.store().expect("state store").store_id().expect("store id");
    let view = efmesh::engine::epoch::view_name(&id);
    let sql = if p.on_postgres() {
        format!("SELECT obj_description(to_regclass('\"_efmesh\".\"{view}\"'), 'pg_class')")
    } else {
        format!("SELECT comment FROM duckdb_views() WHERE schema_name = '_efmesh' AND view_name = '{view}'")
    };
    p.query(&sql).into_iter().next().and_then(|r| r.into_iter().next().flatten()).and_then(|c| efmesh::engine::epoch::parse(&c)).unwrap_or(0)
}

/// Every apply or run that writes tables of the engine's own database raises the database's
/// epoch stamp, then the store's epoch, to the same value, before its first write and once it is
/// done; a promotion or a run that writes nothing moves neither (SPEC §4, invariant 63).
fn the_engine_epoch_follows_the_writes_to_tables(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let epochs = |p: &Project| (stamped_epoch(p), p.state().engine_epoch().unwrap());
    p.apply("dev");
    assert_eq!(epochs(&p), (2, 2));
    p.apply("prod");
    assert_eq!(epochs(&p), (2, 2), "a promotion writes no table");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(epochs(&p), (2, 2), "a run with nothing to do writes no table");
    p.run(&["restate", "prod", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(epochs(&p), (4, 4));
    assert_eq!(p.plan("prod")["hasChanges"], false);
    // The stamp is not storage: the janitor never lists it.
    assert!(p.physical_tables().iter().all(|t| !t.starts_with(efmesh::engine::epoch::VIEW_PREFIX)));
    let janitor = p.run(&["janitor", "--json"]).expect_code(0).json();
    assert!(!janitor.to_string().contains(efmesh::engine::epoch::VIEW_PREFIX), "{janitor:#}");
}

/// An older copy of the DuckDB file holding tables the plan serves (a backup restored after
/// later runs: every relation exists, one table lacks the run's write) is refused by every
/// command that would trust it, naming the file, both epochs and the ways forward, and nothing
/// is written to it; moved aside, the next apply rebuilds everything; restored again, the state
/// store exported at the same moment as the copy makes the pair agree (SPEC §4, invariant 63).
#[test]
fn an_older_copy_of_the_duckdb_file_is_refused_until_rebuilt_or_the_state_store_matches() {
    let p = sample_project();
    p.apply("dev");
    p.run(&["state", "export", "same-moment.json"]).expect_code(0);
    let backup = p.root().join("backup.duckdb");
    std::fs::copy(p.engine_path(), &backup).unwrap();
    let old_rows = p.rows(&env_view("dev", "t.daily"));
    // Later: a source row corrected, its day restated and run again.
    p.write("data/events.csv", &p.read("data/events.csv").replace("2026-01-02 09:10:00,north,120", "2026-01-02 09:10:00,north,121"));
    p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    let new_rows = p.rows(&env_view("dev", "t.daily"));
    assert_ne!(new_rows, old_rows);

    let restore = || {
        let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
        std::fs::copy(&backup, p.engine_path()).unwrap();
    };
    restore();
    let bytes = std::fs::read(p.engine_path()).unwrap();
    for args in [&["plan", "dev"][..], &["status", "dev", "--check"], &["run", "dev"], &["apply", "dev", "--yes"]] {
        let r = p.run(args);
        r.expect_code(1);
        assert!(
            r.stderr.contains("efmesh.duckdb is older than the state store")
                && r.stderr.contains("up to engine epoch 4")
                && r.stderr.contains("up to epoch 2")
                && r.stderr.contains("(model `")
                && r.stderr.contains("efmesh state import"),
            "{args:?}: {r:#?}"
        );
    }
    // Nor an apply of an edited project, whose new versions the copy does not hold: it would
    // stamp the copy current, and the stale tables would then be served as caught up.
    let edited = p.read("models/c.lua");
    p.write("models/c.lua", &edited.replace("count(*) AS n", "count(*) + 0 AS n"));
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("is older than the state store"), "{r:#?}");
    p.write("models/c.lua", &edited);
    // The janitor neither: the copy's views may read versions the store calls unreachable.
    let janitor = p.run(&["janitor", "--ttl", "0"]);
    janitor.expect_code(1);
    assert!(janitor.stderr.contains("is older than the state store") && janitor.stderr.contains("nothing was claimed or dropped"), "{janitor:#?}");
    let json = p.run(&["plan", "dev", "--json"]);
    json.expect_code(1);
    assert_eq!(json.json()["error"]["kind"], "engine-behind", "{json:#?}");
    assert_eq!(std::fs::read(p.engine_path()).unwrap(), bytes, "nothing was written to the file");

    // Moved aside: a new file holds none of the tables, so the plan rebuilds them all — and
    // warns that the database the store wrote before is refused once this one is written.
    std::fs::rename(p.engine_path(), p.root().join("refused.duckdb")).unwrap();
    let plan = p.run(&["plan", "dev"]);
    plan.expect_code(0);
    assert!(
        plan.stderr.contains("holds none of the tables the state store")
            && plan.stderr.contains("every version is rebuilt here")
            && plan.stderr.contains("is refused as older than the store"),
        "{}",
        plan.stderr
    );
    p.apply("dev");
    assert!(!p.run(&["plan", "dev"]).expect_code(0).stderr.contains("holds none of the tables"), "a database the store wrote is not new to it");
    assert_eq!(p.rows(&env_view("dev", "t.daily")), new_rows);
    assert_eq!(p.plan("dev")["hasChanges"], false);

    // Restored again, with the state store of the same moment: the pair agrees.
    restore();
    p.run(&["plan", "dev"]).expect_code(1);
    p.run(&["state", "import", "same-moment.json", "--force"]).expect_code(0);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    assert_eq!(p.rows(&env_view("dev", "t.daily")), old_rows);
}

/// The commands that read what an environment serves without planning (`audit`, `preview` of
/// named models, `diff --data`) refuse an older copy of the DuckDB file as the plan does — exit 1,
/// naming the file and both epochs, error kind `engine-behind` — rather than report its stale
/// rows as the environment's (SPEC §4, invariant 63).
#[test]
fn an_older_copy_of_the_duckdb_file_is_refused_by_audit_preview_and_data_diff() {
    let p = sample_project();
    p.apply("dev");
    p.apply("prod");
    let backup = p.root().join("backup.duckdb");
    std::fs::copy(p.engine_path(), &backup).unwrap();
    // Later: a day restated and run again, which writes a table (the store's epoch moves on).
    p.run(&["restate", "prod", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    // Before the copy is restored, every one of them reads the file.
    for args in [&["audit", "dev"][..], &["preview", "dev", "t.daily"], &["diff", "dev", "prod", "--data"]] {
        p.run(args).expect_code(0);
    }
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
    std::fs::copy(&backup, p.engine_path()).unwrap();
    for args in [&["audit", "dev"][..], &["audit", "prod", "--model", "t.daily"], &["preview", "dev", "t.daily"], &["diff", "dev", "prod", "--data"]] {
        let r = p.run(args);
        r.expect_code(1);
        assert!(
            r.stderr.contains("efmesh.duckdb is older than the state store")
                && r.stderr.contains("up to engine epoch 4")
                && r.stderr.contains("up to epoch 2")
                && r.stderr.contains("(model `")
                && r.stderr.contains("efmesh state import"),
            "{args:?}: {r:#?}"
        );
        let mut json_args = args.to_vec();
        json_args.push("--json");
        let j = p.run(&json_args);
        j.expect_code(1);
        let v = j.json();
        assert_eq!(v["error"]["kind"], "engine-behind", "{json_args:?}: {v:#}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("is older than the state store")), "{json_args:?}: {v:#}");
        assert!(v["error"]["hint"].as_str().is_some_and(|h| h.contains("efmesh state import")), "{json_args:?}: {v:#}");
    }
}

/// Two DuckDB files applied with one state store (two checkouts or machines sharing it, each
/// with its own `[engine] path`): the file that missed the other's writes is refused at its
/// next plan instead of being served as caught up (SPEC §4, invariant 63).
#[test]
fn a_second_duckdb_file_applied_with_the_same_state_store_makes_the_first_refused() {
    let p = sample_project();
    p.apply("dev");
    let config = p.read("efmesh.toml");
    p.write("efmesh.toml", &config.replace("path = \"efmesh.duckdb\"", "path = \"other.duckdb\""));
    // A new file holds none of the tables: rebuilt there, not refused.
    let built = p.apply("dev");
    assert!(!built["built"].as_array().unwrap().is_empty(), "{built:#}");
    p.write("efmesh.toml", &config);
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("efmesh.duckdb is older than the state store") && r.stderr.contains("another database was applied"), "{r:#?}");
}

/// A rebuild into a new file (the old one moved aside) stopped part-way is not taken for an
/// older copy: the apply stamps a new file current before its first write, so the next command
/// goes on rebuilding.
#[test]
fn a_rebuild_into_a_new_file_killed_part_way_is_not_refused() {
    let p = sample_project();
    p.apply("dev");
    p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    let rows = p.rows(&env_view("dev", "t.daily"));
    std::fs::rename(p.engine_path(), p.root().join("aside.duckdb")).unwrap();
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
    let out = p.command(&["apply", "dev", "--yes", "--jobs", "1"]).env("EFMESH_FAULT", "after-build:s.a").output().expect("spawn efmesh");
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at `after-build:s.a`"), "{}", String::from_utf8_lossy(&out.stderr));
    p.run(&["plan", "dev"]).expect_code(0);
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "t.daily")), rows);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A process killed between raising the file's stamp and recording it in the state store leaves
/// the file ahead of the store: accepted, and the next write records a higher epoch in both.
#[test]
fn a_kill_between_the_stamp_and_its_record_leaves_the_file_ahead_and_accepted() {
    let p = sample_project();
    let out = p.command(&["apply", "dev", "--yes"]).env("EFMESH_FAULT", "after-epoch-stamp").output().expect("spawn efmesh");
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at `after-epoch-stamp`"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((stamped_epoch(&p), p.state().engine_epoch().unwrap()), (2, 1));
    p.apply("dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!((stamped_epoch(&p), p.state().engine_epoch().unwrap()), (4, 4));
}

/// An apply whose closing record of the epoch fails after the stamp (a full disk; the test hook
/// `EFMESH_STATE_FAIL=record-epoch:after-epoch-stamp:refused`) exits 0 — its data and ledger are
/// written, and the database ahead of the store is accepted, as after a kill between the two —
/// and warns what happened: the database stamped, the store not recording it (never "the engine
/// epoch was not raised"). The next plan accepts it, and the next write records a higher epoch
/// in both.
#[test]
fn a_failed_record_of_the_closing_epoch_says_the_database_was_stamped_and_is_accepted() {
    let p = sample_project();
    let out = p.command(&["apply", "dev", "--yes"]).env("EFMESH_STATE_FAIL", "record-epoch:after-epoch-stamp:refused").output().expect("spawn efmesh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the engine database was stamped with epoch 2 at the end of this command, but the state store did not record it"), "{stderr}");
    assert!(stderr.contains("the state write `record-epoch:after-epoch-stamp` failed"), "the closing record failed: {stderr}");
    // The warning names the cause (a full disk's "database or disk is full"; the hook's here).
    assert!(stderr.contains("the database is ahead of the store") && stderr.contains("the connection was closed before the answer came"), "{stderr}");
    assert!(!stderr.contains("was not raised"), "{stderr}");
    assert_eq!((stamped_epoch(&p), p.state().engine_epoch().unwrap()), (2, 1));
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!((stamped_epoch(&p), p.state().engine_epoch().unwrap()), (4, 4));
}

/// Two projects, each with its own DuckDB file and one full model (`a.x`, `b.y`), sharing the
/// first one's SQLite state store: two machines with one state store.
fn two_databases_one_store() -> (Project, Project) {
    let model = |name: &str| {
        format!("define_model {{\n  name = \"{name}\",\n  kind = kind.full(),\n  schema = {{ {{ \"x\", \"integer\" }} }},\n  query = \"SELECT 1 AS x\",\n}}\n")
    };
    let a = Project::new();
    a.write("models/a.lua", &model("a.x"));
    let b = Project::new();
    let shared = a.state_path().display().to_string();
    b.write("efmesh.toml", &CONFIG.replace("[state]\npath = \"efmesh.state.sqlite\"\n", &format!("[state]\npath = {shared:?}\n")));
    b.write("models/b.lua", &model("b.y"));
    (a, b)
}

/// `apply <env> --yes` of `p` started with the test hook `EFMESH_DELAY=<delay>`.
fn spawn_delayed(p: &Project, env: &str, delay: &str) -> std::process::Child {
    p.command(&["apply", env, "--yes"])
        .env("EFMESH_DELAY", delay)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn efmesh")
}

/// Waits until the shared store (`a`'s) records engine epoch `at_least` (an apply's opening raise
/// recorded), while `running` (a delayed apply that must still be running) has not ended.
fn wait_for_epoch(a: &Project, at_least: i64, running: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let epoch = if a.state_path().exists() { SqliteStore::open(&a.state_path()).ok().and_then(|s| s.engine_epoch().ok()).unwrap_or(0) } else { 0 };
        if epoch >= at_least {
            return;
        }
        assert!(running.try_wait().expect("poll efmesh").is_none(), "the delayed apply ended before the store recorded epoch {at_least}");
        assert!(std::time::Instant::now() < deadline, "the store never recorded epoch {at_least}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The epoch stamp of `a`'s state store (the shared one) in `p`'s DuckDB file (0 when none).
fn shared_stamp(a: &Project, p: &Project) -> i64 {
    let view = efmesh::engine::epoch::view_name(&a.state().store_id().expect("store id"));
    let sql = format!("SELECT comment FROM duckdb_views() WHERE schema_name = '_efmesh' AND view_name = '{view}'");
    p.query(&sql).into_iter().next().and_then(|r| r.into_iter().next().flatten()).and_then(|c| efmesh::engine::epoch::parse(&c)).unwrap_or(0)
}

/// `plan <env>` and `status <env> --check` of `p` refuse its DuckDB file as older than the store.
#[track_caller]
fn refused_as_behind(p: &Project, env: &str, why: &str) {
    for args in [&["plan", env][..], &["status", env, "--check"]] {
        let r = p.run(args);
        r.expect_code(1);
        assert!(
            r.stderr.contains("efmesh.duckdb is older than the state store") || r.stdout.contains("efmesh.duckdb is older than the state store"),
            "{why}: {r:#?}"
        );
    }
}

/// Two DuckDB files sharing one state store, applied at the same time (both checked current
/// before either raised the epoch, so each lacks the other's writes): the epochs are issued by
/// the store, and the writer that opened first finds at its closing raise that the other was
/// issued one since; it records the store's epoch past its own stamp, which leaves every
/// database stamped so far behind. Whichever closes first, neither file is accepted afterwards
/// (SPEC §4, invariant 63): `plan` and `status --check` of each refuse it.
#[test]
fn two_duckdb_files_applied_at_once_with_one_state_store_are_both_refused() {
    // A opens, B opens, B closes, A closes.
    let (a, b) = two_databases_one_store();
    let mut first = spawn_delayed(&a, "deva", "build:a.x=6000");
    wait_for_epoch(&a, 1, &mut first);
    b.run(&["apply", "devb", "--yes"]).expect_code(0);
    assert!(first.try_wait().expect("poll efmesh").is_none(), "A still writing when B closes");
    assert!(first.wait().expect("wait efmesh").success());
    let s = a.state();
    assert_eq!((s.engine_epoch().unwrap(), shared_stamp(&a, &a), shared_stamp(&a, &b)), (5, 4, 3), "A's closing raise left both files behind");
    drop(s);
    refused_as_behind(&a, "deva", "A's file lacks B's writes");
    refused_as_behind(&b, "devb", "B's file lacks A's writes (A wrote after B's check)");

    // A opens, B opens, A closes, B closes.
    let (a, b) = two_databases_one_store();
    let mut first = spawn_delayed(&a, "deva", "build:a.x=5000");
    wait_for_epoch(&a, 1, &mut first);
    let mut second = spawn_delayed(&b, "devb", "build:b.y=10000");
    wait_for_epoch(&a, 2, &mut first);
    assert!(first.wait().expect("wait efmesh").success());
    assert!(second.try_wait().expect("poll efmesh").is_none(), "B still writing when A closes");
    assert!(second.wait().expect("wait efmesh").success());
    let s = a.state();
    assert_eq!((s.engine_epoch().unwrap(), shared_stamp(&a, &a), shared_stamp(&a, &b)), (6, 3, 5), "each closing raise found the other's issue");
    drop(s);
    refused_as_behind(&a, "deva", "A's file lacks B's writes");
    refused_as_behind(&b, "devb", "B's file lacks A's writes");
    // The way out the message names: the file moved aside is rebuilt, stamped current.
    std::fs::rename(b.engine_path(), b.root().join("aside.duckdb")).unwrap();
    let _ = std::fs::remove_file(b.root().join("efmesh.duckdb.wal"));
    b.apply("devb");
    b.run(&["plan", "devb"]).expect_code(0);
}

/// A copy of the DuckDB file taken before a run that was stopped part-way (its intervals
/// recorded done, its closing stamp never made) is behind the store: the run raised the epoch
/// before its first write.
#[test]
fn a_copy_taken_before_a_run_stopped_part_way_is_refused() {
    let mut p = Project::new();
    p.write(
        "models/m.lua",
        r#"define_model {
  name = "s.days",
  kind = kind.incremental_by_time_range { time_column = "ts", start = "2026-01-01", grain = "day" },
  schema = { { "ts", "timestamp" }, { "v", "integer" } },
  query = [[SELECT ts, 1 AS v FROM generate_series(TIMESTAMP @start_ts, TIMESTAMP @end_ts - INTERVAL 1 HOUR, INTERVAL 1 HOUR) t(ts)]],
}
define_model {
  name = "s.tot", kind = kind.full(), schema = { { "n", "bigint" } },
  query = "SELECT count(*) AS n FROM " .. ref("s.days"),
}
"#,
    );
    p.now = "2026-01-03T00:00:00Z".into();
    p.apply("prod");
    let backup = p.root().join("backup.duckdb");
    std::fs::copy(p.engine_path(), &backup).unwrap();
    p.now = "2026-01-06T00:00:00Z".into();
    let out = p.command(&["run", "prod"]).env("EFMESH_FAULT", "after-build:s.tot").output().expect("spawn efmesh");
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at `after-build:s.tot`"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
    std::fs::copy(&backup, p.engine_path()).unwrap();
    for args in [&["run", "prod"][..], &["status", "prod", "--check"]] {
        let r = p.run(args);
        r.expect_code(1);
        assert!(r.stderr.contains("is older than the state store"), "{args:?}: {r:#?}");
    }
}
