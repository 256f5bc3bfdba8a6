//! Environments hold under edits and faults (issue 10, defects 2 and 3): the metadata an
//! environment serves is its own, written only by the promotion that makes it live; and the
//! views of an environment always end up serving exactly what the state store's pointers say,
//! whatever point a promotion was interrupted at (`kill -9`, a failed state write).

use crate::common::*;
use efmesh::apply::fault::{FAULT_ENV, LOSE_LOCK_ENV, STATE_FAIL_ENV};
use serde_json::Value;

/// Runs the binary with the test hook `EFMESH_FAULT=<point>` (the process aborts there).
fn run_with_fault(p: &Project, point: &str, args: &[&str]) -> Run {
    let out = p.command(args).env(FAULT_ENV, point).output().expect("spawn efmesh");
    Run::from_output(out, format!("{FAULT_ENV}={point} efmesh {}", args.join(" ")))
}

/// Asserts that every view of `env` serves exactly the physical relation of the version its
/// pointer names in the state store (row for row, over the view's columns), and that no
/// promotion is left under way.
#[track_caller]
pub fn assert_views_serve_pointers(p: &Project, env: &str) {
    let state = p.store().expect("a state store");
    assert_eq!(state.pending_promotions().expect("pending"), vec![], "a promotion of `{env}` is still under way");
    let pointers = state.env_pointers(env).expect("pointers");
    assert!(!pointers.is_empty(), "`{env}` has no pointers");
    for (name, fp) in pointers {
        let Some(snapshot) = state.snapshot(&name, &fp).expect("snapshot") else { continue };
        if snapshot.physical.is_empty() {
            continue;
        }
        let (schema, table) = name.split_once('.').expect("schema.table");
        let schema = if env == "prod" { schema.to_string() } else { format!("{env}__{schema}") };
        let cols = p.query(&format!(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position"
        ));
        assert!(!cols.is_empty(), "`{env}` has no view for `{name}`");
        let list: Vec<String> = cols.into_iter().map(|c| format!("\"{}\"", c[0].clone().expect("column"))).collect();
        let served = p.rows(&env_view(env, &name));
        let pointed = p.rows(&format!("(SELECT {} FROM {}) AS pointed", list.join(", "), snapshot.physical));
        assert_eq!(served, pointed, "the view of `{name}` in `{env}` does not serve the version its pointer names ({fp})");
    }
}

// On each engine, and on a Postgres state store.
crate::on_every_engine_and_state_backend!(
    a_metadata_edit_applied_to_dev_never_reaches_prod,
    a_crash_between_the_view_swap_and_the_state_write_is_undone_by_the_next_plan,
    a_crash_after_recording_the_intent_is_undone_for_every_command,
    a_crash_after_the_view_swap_of_a_promotion_building_nothing_puts_the_old_views_back,
);

// On each engine, and on a Postgres state store: a writer losing its lock mid-promotion.
crate::on_every_engine_and_state_backend!(
    a_lock_lost_before_the_view_swap_commits_moves_no_view,
    a_lock_lost_after_the_view_swap_puts_the_views_back_and_says_so,
);

// On each engine, and on a Postgres state store: the state write of a promotion failing after
// the view swap, its COMMIT landed or not.
crate::on_every_engine_and_state_backend!(
    a_promotion_recorded_although_its_answer_was_lost_keeps_the_new_views,
    a_promotion_the_state_store_did_not_record_puts_the_views_back,
);

// On each engine: their names resolve differently (DuckDB ignoring case).
crate::on_every_engine!(a_crash_after_the_view_swap_of_a_rename_in_letter_case_puts_the_old_view_back);

// On each engine (these break the SQLite state store's writes).
crate::on_every_engine!(
    a_metadata_edit_in_a_failed_apply_changes_no_environment,
    a_failed_state_write_after_the_view_swap_leaves_the_old_versions_served,
    an_unwritable_state_store_blocks_commands_until_the_promotion_is_undone,
);

// ---- defect 2: metadata per environment ------------------------------------------------------

/// The sample project with metadata-only edits: a description on `s.a`, a batch size on
/// `t.daily`. Neither changes a fingerprint.
fn edit_metadata(p: &Project) {
    let a = p.read("models/a.lua").replacen("define_model {", "define_model {\n  description = \"edited in dev\",", 1);
    p.write("models/a.lua", &a);
    let d = p.read("models/d.lua").replace("batch_size = 7", "batch_size = 3");
    p.write("models/d.lua", &d);
}

fn a_metadata_edit_applied_to_dev_never_reaches_prod(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("prod");
    p.apply("dev");
    let (a0, d0) = (p.read("models/a.lua"), p.read("models/d.lua"));
    edit_metadata(&p);
    let v = p.apply("dev");
    assert_eq!(action(&v, "s.a")["change"], "metadata", "{v:#}");
    assert_eq!(action(&v, "t.daily")["change"], "metadata", "{v:#}");

    // prod's checkout still has the old files: prod serves them, nothing to apply, the cron
    // tick runs.
    p.write("models/a.lua", &a0).write("models/d.lua", &d0);
    let v = p.plan("prod");
    assert_eq!(v["hasChanges"], false, "prod sees a change nobody applied to it: {v:#}");
    p.run(&["run", "prod"]).expect_code(0);
    // dev serves the edit: against the old files, it is dev that has a metadata change.
    let v = p.plan("dev");
    assert_eq!(action(&v, "s.a")["change"], "metadata", "{v:#}");

    // The edit, applied to prod, is picked up there (a promotion without a build).
    edit_metadata(&p);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    let v = p.plan("prod");
    assert_eq!(action(&v, "s.a")["change"], "metadata", "{v:#}");
    assert_eq!(action(&v, "t.daily")["change"], "metadata", "{v:#}");
    let v = p.apply("prod");
    assert!(v["built"].as_array().expect("built").is_empty(), "{v:#}");
    assert_eq!(p.plan("prod")["hasChanges"], false);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.run(&["run", "prod"]).expect_code(0);
    let served = p.store().unwrap().env_metadata("prod").expect("metadata");
    assert!(served["s.a"].contains("edited in dev"), "{served:?}");
}

/// A full model with a blocking audit: ids stay below 100 unless `bad` is true.
fn guarded(bad: bool) -> String {
    let last = if bad { 999 } else { 9 };
    format!(
        r#"define_model {{
  name = "s.guarded",
  kind = kind.full(),
  schema = {{ {{ "id", "integer" }} }},
  audits = {{ audit.expression("id < 100") }},
  query = "SELECT CAST(i AS INTEGER) AS id FROM generate_series(1, {last}) AS g(i)",
}}
"#
    )
}

fn a_metadata_edit_in_a_failed_apply_changes_no_environment(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.write("models/guarded.lua", &guarded(false));
    p.apply("prod");
    p.apply("dev");
    let (a0, d0) = (p.read("models/a.lua"), p.read("models/d.lua"));
    edit_metadata(&p);
    // Another model's edit fails its blocking audit: the apply stops before promoting.
    p.write("models/guarded.lua", &guarded(true));
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("s.guarded"), "{}", r.stderr);

    p.write("models/a.lua", &a0).write("models/d.lua", &d0).write("models/guarded.lua", &guarded(false));
    for env in ["prod", "dev"] {
        let v = p.plan(env);
        assert_eq!(v["hasChanges"], false, "`{env}` sees metadata of an apply that failed: {v:#}");
        p.run(&["run", env]).expect_code(0);
    }
}

// ---- defect 3: views ⇔ pointers after a fault -------------------------------------------------

fn a_crash_between_the_view_swap_and_the_state_write_is_undone_by_the_next_plan(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let before = p.state_summary();
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let r = run_with_fault(&p, "after-view-swap", &["apply", "dev", "--yes"]);
    assert_ne!(r.code, 0, "the test hook did not stop the apply: {}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("aborting at `after-view-swap`"), "{}", r.stderr);
    // The state store never heard of the promotion (the new versions were built).
    assert_eq!(p.state_summary().pointers, before.pointers);

    // The next command that reads `dev` undoes the promotion first, saying so.
    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    let plan = r.json();
    assert_eq!(action(&plan, "s.a")["change"], "breaking", "{plan:#}");
    assert_eq!(action(&plan, "s.a")["build"], false, "the version was built before the crash: {plan:#}");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before);

    // Applying again promotes (a view swap) and converges.
    let v = p.apply("dev");
    assert!(v["built"].as_array().expect("built").is_empty(), "{v:#}");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.rows(&env_view("dev", "s.a")).len(), 5);
    let r = p.run(&["plan", "dev", "--json"]);
    assert!(!r.stderr.contains("interrupted"), "{}", r.stderr);
    assert_eq!(r.json()["hasChanges"], false);
}

/// `apply prod` of versions `dev` built (a view swap, nothing built: on DuckDB its undo is
/// taken from the catalog the plan read, not queried) stopped right after the swap: the next
/// command puts `prod`'s views back exactly as they were, then the promotion converges.
fn a_crash_after_the_view_swap_of_a_promotion_building_nothing_puts_the_old_views_back(backend: StateBackend, engine: EngineBackend) {
    let duckdb = matches!(engine, EngineBackend::DuckDb);
    let p = sample_project_with(backend, engine);
    p.apply("prod");
    let served_before = p.rows(&env_view("prod", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    p.apply("dev");
    let r = run_with_fault(&p, "after-view-swap", &["--log-level", "debug", "apply", "prod", "--yes"]);
    assert!(r.stderr.contains("aborting at `after-view-swap`"), "{}", r.stderr);
    if duckdb {
        // The undo recorded before the swap came from the catalog the plan read, not a query.
        assert!(r.stderr.contains("engine catalog at the open"), "{}", r.stderr);
        assert!(!r.stderr.contains("SELECT schema_name, view_name, sql FROM duckdb_views()"), "{}", r.stderr);
    }
    let r = p.run(&["plan", "prod", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `prod`"), "{}", r.stderr);
    assert_views_serve_pointers(&p, "prod");
    assert_eq!(p.rows(&env_view("prod", "s.a")), served_before);
    let v = p.apply("prod");
    assert!(v["built"].as_array().expect("built").is_empty(), "{v:#}");
    assert_views_serve_pointers(&p, "prod");
    assert_eq!(p.rows(&env_view("prod", "s.a")).len(), 5);
}

/// `s.c` renamed `s.C` (a removed model and an added one, one view on DuckDB) and `apply prod`
/// stopped right after the view swap: the next command puts back the view of `s.c` (and on
/// Postgres, where `"s"."C"` is another view, drops that one), then applying again serves `s.C`
/// and plans nothing more.
fn a_crash_after_the_view_swap_of_a_rename_in_letter_case_puts_the_old_view_back(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("models/c.lua", &one_row_model("s.c", "old"));
    p.apply("prod");
    p.write("models/c.lua", &one_row_model("s.C", "new"));
    let r = run_with_fault(&p, "after-view-swap", &["apply", "prod", "--yes"]);
    assert!(r.stderr.contains("aborting at `after-view-swap`"), "{}", r.stderr);

    let r = p.run(&["plan", "prod", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `prod`"), "{}", r.stderr);
    let plan = r.json();
    assert_eq!(action(&plan, "s.C")["change"], "added", "{plan:#}");
    assert_eq!(action(&plan, "s.C")["build"], false, "the version was built before the crash: {plan:#}");
    assert_eq!(action(&plan, "s.c")["change"], "removed", "{plan:#}");
    assert_views_serve_pointers(&p, "prod");
    assert_eq!(p.rows(&env_view("prod", "s.c")), vec![vec![Some("old".to_string())]]);
    if p.on_postgres() {
        assert!(!p.relations().contains(&"s.C".to_string()), "{:?}", p.relations());
    }

    let v = p.apply("prod");
    assert!(v["built"].as_array().expect("built").is_empty(), "{v:#}");
    assert_views_serve_pointers(&p, "prod");
    assert_eq!(p.rows(&env_view("prod", "s.C")), vec![vec![Some("new".to_string())]]);
    let r = p.run(&["plan", "prod", "--json"]);
    assert!(!r.stderr.contains("interrupted"), "{}", r.stderr);
    assert_eq!(r.json()["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

fn a_crash_after_recording_the_intent_is_undone_for_every_command(backend: StateBackend, engine: EngineBackend) {
    for command in [&["run", "dev"][..], &["audit", "dev"][..], &["apply", "dev", "--yes"][..]] {
        let p = sample_project_with(backend.another(command[0]), engine.another());
        p.apply("dev");
        p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
        let r = run_with_fault(&p, "after-intent", &["apply", "dev", "--yes"]);
        assert!(r.stderr.contains("aborting at `after-intent`"), "{}", r.stderr);
        assert_eq!(p.store().unwrap().pending_promotions().expect("pending").len(), 1);
        let r = p.run(command);
        assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "`{}`: {}", r.cmd, r.stderr);
        assert_views_serve_pointers(&p, "dev");
    }
}

/// Makes the state store refuse the promotion's own transaction (as a full disk would): the
/// journal insert fails. With `and_forgetting`, dropping the intent fails too.
fn break_state_writes(p: &Project, and_forgetting: bool) {
    let conn = rusqlite::Connection::open(p.state_path()).expect("open state");
    conn.execute_batch("CREATE TRIGGER full_disk BEFORE INSERT ON plans BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;").expect("trigger");
    if and_forgetting {
        conn.execute_batch("CREATE TRIGGER full_disk_2 BEFORE DELETE ON promotions BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;")
            .expect("trigger");
    }
}

fn repair_state_writes(p: &Project) {
    let conn = rusqlite::Connection::open(p.state_path()).expect("open state");
    conn.execute_batch("DROP TRIGGER IF EXISTS full_disk; DROP TRIGGER IF EXISTS full_disk_2;").expect("drop triggers");
}

fn a_failed_state_write_after_the_view_swap_leaves_the_old_versions_served(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    let before = p.state_summary();
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    break_state_writes(&p, false);
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("disk is full"), "{}", r.stderr);
    assert_eq!(p.state_summary().pointers, before.pointers);
    assert_views_serve_pointers(&p, "dev");
    assert!(r.stderr.contains("put back"), "{}", r.stderr);
    assert!(!r.stdout.contains("promoted"), "{}", r.stdout);
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before);
    repair_state_writes(&p);
    p.apply("dev");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

fn an_unwritable_state_store_blocks_commands_until_the_promotion_is_undone(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    break_state_writes(&p, true);
    p.run(&["apply", "dev", "--yes"]).expect_code(1);
    // The views were put back at once; the record of the promotion could not be dropped.
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before);
    assert_eq!(p.state().pending_promotions().expect("pending").len(), 1);
    // While the store stays unwritable, commands that read `dev` fail loudly rather than
    // answer from a state they cannot make consistent.
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("interrupted promotion"), "{}", r.stderr);
    repair_state_writes(&p);
    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    assert_views_serve_pointers(&p, "dev");
    let v: Value = r.json();
    assert_eq!(action(&v, "s.a")["change"], "breaking", "{v:#}");
}

#[test]
fn an_interrupted_promotion_is_not_undone_under_a_process_holding_the_engine() {
    let p = sample_project();
    p.apply("dev");
    p.write("models/a.lua", &model_a(" AND range > 2"));
    let r = run_with_fault(&p, "after-view-swap", &["apply", "dev", "--yes"]);
    assert!(r.stderr.contains("aborting at `after-view-swap`"), "{}", r.stderr);
    {
        // Another process holds the DuckDB file (as an apply still promoting would).
        let _held = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
        let r = p.run(&["plan", "dev"]);
        r.expect_code(1);
        assert!(r.stderr.contains("records a promotion of `dev` as under way"), "{}", r.stderr);
    }
    assert_eq!(p.state().pending_promotions().expect("pending").len(), 1, "nothing was undone while the engine was held");
    let r = p.run(&["plan", "dev"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    assert_views_serve_pointers(&p, "dev");
}

/// An interrupted promotion whose undo cannot put a view back (its old definition reads a table
/// dropped since: the janitor collected that version after a state store holding the record
/// was restored) blocks no command: `diff` reads the store alone (no engine, nothing undone);
/// the next `plan` drops the views that cannot be put back, naming each, puts the others back
/// and forgets the record; `apply` then converges.
#[test]
fn an_interrupted_promotion_whose_old_version_is_gone_blocks_no_command() {
    let p = sample_project();
    p.apply("dev");
    let state = p.state();
    let fp = state.env_pointers("dev").expect("pointers")["s.a"].clone();
    let old = state.snapshot("s.a", &fp).expect("snapshot").expect("recorded").physical;
    drop(state);
    let served_c = p.rows(&env_view("dev", "s.c"));
    p.write("models/a.lua", &model_a(" AND range > 2"));
    let r = run_with_fault(&p, "after-view-swap", &["apply", "dev", "--yes"]);
    assert!(r.stderr.contains("aborting at `after-view-swap`"), "{}", r.stderr);
    // The version `dev`'s pointer names loses its table: the undo of `dev__s.a` (and of the
    // view `dev__s.b`, whose old version reads that table) cannot run any more.
    p.execute_on_engine(&format!("DROP TABLE {old}"));

    {
        // `diff` needs no engine, even with a promotion to undo.
        let _held = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb");
        let r = p.run(&["diff", "dev", "dev"]);
        r.expect_code(0);
        assert!(r.stdout.contains("one environment"), "{}", r.stdout);
    }
    assert_eq!(p.state().pending_promotions().expect("pending").len(), 1, "`diff` undid nothing");

    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    for view in ["dev__s.a", "dev__s.b"] {
        assert!(r.stderr.contains(&format!("the interrupted promotion of `dev` cannot put view `{view}` back as it was")), "{view}: {}", r.stderr);
    }
    assert!(r.stderr.contains("does not exist"), "the failure is named: {}", r.stderr);
    assert!(!r.stderr.contains("cannot put view `dev__s.c`"), "{}", r.stderr);
    assert_eq!(p.state().pending_promotions().expect("pending"), vec![]);
    // The views that could be put back were; the others are gone, not left serving the new versions.
    assert_eq!(p.rows(&env_view("dev", "s.c")), served_c);
    let views = p.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'dev__s' AND table_name IN ('a', 'b')");
    assert!(views.is_empty(), "{views:?}");
    let plan = r.json();
    assert_eq!(action(&plan, "s.a")["change"], "breaking", "{plan:#}");

    p.apply("dev");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.rows(&env_view("dev", "s.a")).len(), 5);
    let r = p.run(&["plan", "dev", "--json"]);
    assert!(!r.stderr.contains("interrupted"), "{}", r.stderr);
    assert_eq!(r.json()["hasChanges"], false);
}

/// A normal interrupted promotion (its undo runs) warns of no dropped view: every view is put
/// back as it was, as before.
#[test]
fn an_interrupted_promotion_whose_undo_runs_drops_no_view() {
    let p = sample_project();
    p.apply("dev");
    let served = ["s.a", "s.b", "s.c"].map(|m| p.rows(&env_view("dev", m)));
    p.write("models/a.lua", &model_a(" AND range > 2"));
    let r = run_with_fault(&p, "after-view-swap", &["apply", "dev", "--yes"]);
    assert!(r.stderr.contains("aborting at `after-view-swap`"), "{}", r.stderr);
    let r = p.run(&["plan", "dev"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    assert!(!r.stderr.contains("cannot put view"), "{}", r.stderr);
    assert_eq!(["s.a", "s.b", "s.c"].map(|m| p.rows(&env_view("dev", m))), served);
    assert_views_serve_pointers(&p, "dev");
}

// ---- a writer losing its lock mid-promotion ---------------------------------------------------

/// `apply dev --yes` of `p` with the test hook `EFMESH_LOSE_LOCK=<point>`: the apply loses its
/// lock `env:dev` there, as one stalled past the lock's expiry (`SIGSTOP`) loses it to another
/// command.
fn apply_losing_the_lock_at(p: &Project, point: &str) -> Run {
    let out = p.command(&["apply", "dev", "--yes"]).env(LOSE_LOCK_ENV, point).output().expect("spawn efmesh");
    Run::from_output(out, format!("{LOSE_LOCK_ENV}={point} efmesh apply dev --yes"))
}

/// The `error:` line of `r` and the lines after it (what the CLI reports, not the log).
fn reported_error(r: &Run) -> String {
    r.stderr.lines().skip_while(|l| !l.starts_with("error:")).collect::<Vec<_>>().join("\n")
}

/// A lock lost after the view swap's statements ran and before its COMMIT (its statements
/// waited on a reader past the lock's expiry): the swap is rolled back, so the environment's
/// views still serve what the state store records, and the error's "stopped before writing
/// anything more" is true. The promotion's record stays (the lost lock forbids dropping it):
/// the next command undoes it, a no-op.
fn a_lock_lost_before_the_view_swap_commits_moves_no_view(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let before = p.state_summary();
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let r = apply_losing_the_lock_at(&p, "before-swap-commit");
    r.expect_code(1);
    assert!(r.stderr.contains("lost the lock `env:dev` at `before-swap-commit`"), "the test hook did not run: {}", r.stderr);
    let error = reported_error(&r);
    assert!(error.contains("lost the lock `env:dev`") && error.contains("stopped before writing anything more"), "{}", r.stderr);
    assert!(r.stderr.contains("the view swap of `dev` was rolled back before its commit"), "{}", r.stderr);
    assert_eq!(p.state_summary().pointers, before.pointers);
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before, "the swap committed although its lock was lost before the commit");

    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    assert_eq!(action(&r.json(), "s.a")["change"], "breaking");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before);
    let v = p.apply("dev");
    assert!(v["built"].as_array().expect("built").is_empty(), "{v:#}");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A lock lost after the view swap committed and before the state store recorded the
/// promotion: the apply puts the views back from its undo record at once (no later command
/// needed) and its error says the swap had committed and the views were put back, not that it
/// stopped before writing anything more.
fn a_lock_lost_after_the_view_swap_puts_the_views_back_and_says_so(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let before = p.state_summary();
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let r = apply_losing_the_lock_at(&p, "after-view-swap");
    r.expect_code(1);
    assert!(r.stderr.contains("lost the lock `env:dev` at `after-view-swap`"), "the test hook did not run: {}", r.stderr);
    let error = reported_error(&r);
    assert!(error.contains("lost the lock `env:dev` after its view swap of `dev` committed"), "{}", r.stderr);
    assert!(error.contains("the views of `dev` were put back as they were"), "{}", r.stderr);
    assert!(error.contains("hint: ") && error.contains("apply again"), "{}", r.stderr);
    assert!(!error.contains("stopped before writing anything more"), "a false report: the swap had committed\n{}", r.stderr);
    // The environment serves what the state store records, before any other command runs.
    assert_eq!(p.state_summary().pointers, before.pointers);
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before, "the views serve versions the state store does not record");
    assert_eq!(p.store().expect("a state store").pending_promotions().expect("pending").len(), 1, "the record stays: dropping it is a write");

    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("undoing an interrupted promotion of `dev`"), "{}", r.stderr);
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before);
    let v = p.apply("dev");
    assert!(v["built"].as_array().expect("built").is_empty(), "{v:#}");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

// ---- the state write of a promotion failing after the view swap ------------------------------

/// `apply dev --yes` of `p` with the test hook `EFMESH_STATE_FAIL=<how>`: the promotion's state
/// write fails with a lost connection's error, after committing (`promote:committed`) or
/// without writing (`promote:refused`).
fn apply_with_state_fail(p: &Project, how: &str) -> Run {
    let out = p.command(&["apply", "dev", "--yes"]).env(STATE_FAIL_ENV, how).output().expect("spawn efmesh");
    Run::from_output(out, format!("{STATE_FAIL_ENV}={how} efmesh apply dev --yes"))
}

/// The state store recorded the promotion but its answer was lost (the connection died after
/// the COMMIT): the views are not put back — the environment keeps serving the new versions the
/// store records, never the old ones — and the apply says the store recorded it and succeeds;
/// `status --check` finds the environment healthy and a plan has nothing to do.
fn a_promotion_recorded_although_its_answer_was_lost_keeps_the_new_views(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let before = p.state_summary();
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let r = apply_with_state_fail(&p, "promote:committed");
    assert!(r.stderr.contains("the state write `promote` committed, its answer lost"), "the test hook did not run: {}", r.stderr);
    r.expect_code(0);
    assert!(r.stderr.contains("the state store recorded the promotion of `dev` although its answer was lost"), "{}", r.stderr);
    assert!(!r.stderr.contains("were put back"), "{}", r.stderr);
    assert_ne!(p.state_summary().pointers, before.pointers, "the store records the promotion");
    assert_views_serve_pointers(&p, "dev");
    assert_ne!(p.rows(&env_view("dev", "s.a")), served_before, "the views were put back although the store recorded the promotion");
    p.run(&["status", "dev", "--check"]).expect_code(0);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// The state write of the promotion failed and wrote nothing: the store still records the
/// promotion as under way, so the views are put back at once (the guard lets the put-back
/// commit), the record is dropped, and the apply fails with the store's error.
fn a_promotion_the_state_store_did_not_record_puts_the_views_back(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let before = p.state_summary();
    let served_before = p.rows(&env_view("dev", "s.a"));
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let r = apply_with_state_fail(&p, "promote:refused");
    assert!(r.stderr.contains("the state write `promote` failed, nothing written"), "the test hook did not run: {}", r.stderr);
    r.expect_code(1);
    assert!(r.stderr.contains("the views of `dev` were put back as they were"), "{}", r.stderr);
    assert!(!r.stderr.contains("although its answer was lost"), "{}", r.stderr);
    assert_eq!(p.state_summary().pointers, before.pointers);
    assert_eq!(p.rows(&env_view("dev", "s.a")), served_before, "the views serve versions the state store does not record");
    assert_views_serve_pointers(&p, "dev");
    p.apply("dev");
    assert_views_serve_pointers(&p, "dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}
