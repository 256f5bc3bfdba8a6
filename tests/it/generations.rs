//! Data generations (SPEC §4 invariant 36): a `full` version is rebuilt whenever its parents'
//! data changed since its last build, whichever environment changed it. prod and dev share the
//! version of a time-range parent and serve different versions of a `full` rollup (and of a
//! rollup of that rollup).

use crate::common::*;
use crate::on_every_engine;
use serde_json::Value;

/// A daily time-range model, a `full` rollup over it (its total multiplied by `factor`: dev
/// edits it), a `full` rollup of that rollup, and a `full` rollup like the first reading the
/// daily model through a `view` (a view has no data of its own: seen through).
fn models(factor: u32) -> String {
    format!(
        r#"
local daily = define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(extract(epoch FROM CAST(@start AS TIMESTAMP)) / 86400 AS BIGINT) AS v",
}}
local rollup = define_model {{
  name = "t.rollup", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS n, CAST(sum(v) * {factor} AS BIGINT) AS total FROM " .. ref(daily),
}}
define_model {{
  name = "t.roll2", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total1", "bigint" }} }},
  query = "SELECT n, total + 1 AS total1 FROM " .. ref(rollup),
}}
local vw = define_model {{
  name = "t.vw", kind = kind.view(),
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }} }},
  query = "SELECT day, v FROM " .. ref(daily),
}}
define_model {{
  name = "t.vroll", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS n, CAST(sum(v) * {factor} AS BIGINT) AS total FROM " .. ref(vw),
}}
"#
    )
}

on_every_engine!(
    prod_computes_the_shared_parent_then_dev_plans_and_runs_the_rebuild_of_its_own_rollups,
    dev_computes_the_shared_parent_then_prod_plans_and_runs_the_rebuild_of_its_own_rollups,
    a_restatement_in_prod_marks_the_rollup_dev_serves_over_the_restated_parent,
    a_rollup_inheriting_a_table_over_the_same_parent_data_is_not_marked_and_any_environment_refreshes_it,
    a_session_keeps_the_rebuild_marks_of_the_models_an_edit_does_not_reach,
);

on_every_engine!(
    a_rollup_dev_serves_over_its_own_parent_gets_a_table_of_its_own_and_follows_dev_data,
    an_inherited_rollup_table_built_from_fewer_days_than_the_parents_new_version_is_built_anew_by_the_same_apply,
    a_run_rebuilds_a_full_model_reading_new_intervals_through_an_embedded_model,
    a_run_killed_between_the_upsert_and_its_record_still_marks_the_rollups_over_it,
    an_upsert_that_changes_no_row_leaves_the_rollups_over_it_current_and_one_that_changes_rows_marks_them,
    a_unique_key_model_served_from_another_table_rebuilds_its_full_children_in_the_same_apply,
    a_partition_model_served_from_another_table_rebuilds_its_full_children_in_the_same_apply,
    a_unique_key_version_pointed_at_anew_is_refreshed_when_its_parents_data_changed_since_its_last_refresh,
);

on_every_engine!(
    a_non_breaking_change_applied_to_dev_leaves_prod_nothing_stale_and_its_promotion_builds_nothing,
    a_write_into_a_child_table_dev_inherited_still_marks_the_full_model_dev_built_over_it,
);

const PROD: u32 = 1;
const DEV: u32 = 3;

/// What `t.rollup` and `t.roll2` hold when computed from scratch over the days before `now_day`
/// with `factor`, on an in-memory DuckDB.
fn expected(now_day: &str, factor: u32) -> (Rows, Rows) {
    let days = format!("range(TIMESTAMP '2026-01-01', TIMESTAMP '{now_day}', INTERVAL 1 DAY) AS t(d)");
    let rollup = sorted_in_memory(&format!("SELECT count(*), CAST(sum(CAST(epoch(d) / 86400 AS BIGINT)) * {factor} AS BIGINT) FROM {days}"));
    let roll2 = sorted_in_memory(&format!("SELECT count(*), CAST(sum(CAST(epoch(d) / 86400 AS BIGINT)) * {factor} + 1 AS BIGINT) FROM {days}"));
    (rollup, roll2)
}

#[track_caller]
fn assert_serves(p: &Project, env: &str, now_day: &str, factor: u32) {
    let (rollup, roll2) = expected(now_day, factor);
    assert_eq!(p.rows(&env_view(env, "t.rollup")), rollup, "t.rollup in {env}");
    assert_eq!(p.rows(&env_view(env, "t.roll2")), roll2, "t.roll2 in {env}");
    assert_eq!(p.rows(&env_view(env, "t.vroll")), rollup, "t.vroll in {env}");
}

/// Runs `args` with the project as `factor` defines it (prod's or dev's edit).
#[track_caller]
fn with(p: &Project, factor: u32, args: &[&str]) -> Run {
    p.write("models/m.lua", &models(factor));
    p.run(args)
}

#[track_caller]
fn plan_of(p: &Project, factor: u32, env: &str) -> Value {
    with(p, factor, &["plan", env, "--json"]).expect_code(0).json()
}

/// prod at `PROD`, dev at `DEV` (its own rollups, prod's daily version), both applied at
/// 2026-01-10; then a no-op plan in both.
fn two_environments(engine: EngineBackend) -> Project {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    with(&p, PROD, &["apply", "prod", "--yes"]).expect_code(0);
    with(&p, DEV, &["apply", "dev", "--yes"]).expect_code(0);
    let dev = plan_of(&p, DEV, "dev");
    assert_eq!(action(&dev, "t.rollup")["change"], "unchanged", "{dev:#}");
    let s = p.state();
    assert_eq!(s.env_pointers("prod").unwrap()["t.daily"], s.env_pointers("dev").unwrap()["t.daily"], "the daily version is shared");
    assert_ne!(s.env_pointers("prod").unwrap()["t.rollup"], s.env_pointers("dev").unwrap()["t.rollup"], "the rollups differ");
    for (env, factor) in [("prod", PROD), ("dev", DEV)] {
        let plan = plan_of(&p, factor, env);
        assert_eq!(plan["hasChanges"], false, "nothing changed, nothing is marked: {plan:#}");
        assert!(actions(&plan).iter().all(|a| a.get("rebuild").is_none()), "{plan:#}");
        assert_serves(&p, env, "2026-01-10", factor);
    }
    p.now = "2026-01-12T00:00:00Z".to_string();
    p
}

#[track_caller]
fn assert_marked(plan: &Value, parent_of_rollup: &str) {
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    let daily = action(plan, "t.daily");
    assert_eq!(daily["intervals"], 0, "the shared ledger has nothing missing: {plan:#}");
    let rollup = action(plan, "t.rollup");
    assert_eq!(rollup["rebuild"], true, "{plan:#}");
    assert!(rollup["rebuildReason"].as_str().unwrap().contains(parent_of_rollup), "the reason names the parent: {plan:#}");
    let roll2 = action(plan, "t.roll2");
    assert_eq!(roll2["rebuild"], true, "{plan:#}");
    assert!(roll2["rebuildReason"].as_str().unwrap().contains("t.rollup"), "{plan:#}");
    let vroll = action(plan, "t.vroll");
    assert_eq!(vroll["rebuild"], true, "{plan:#}");
    assert!(vroll["rebuildReason"].as_str().unwrap().contains(parent_of_rollup), "seen through the view: {plan:#}");
    assert!(action(plan, "t.vw").get("rebuild").is_none(), "a view is never stale: {plan:#}");
}

fn prod_computes_the_shared_parent_then_dev_plans_and_runs_the_rebuild_of_its_own_rollups(engine: EngineBackend) {
    let p = two_environments(engine);
    // prod's run computes the two new days of the shared daily version and rebuilds prod's rollups.
    let v = with(&p, PROD, &["run", "prod", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).is_superset(&set(&["t.daily", "t.rollup", "t.roll2"])), "{v:#}");
    assert_serves(&p, "prod", "2026-01-12", PROD);
    // dev's rollups were built from the older daily data: still as they were, and the plan says so.
    assert_serves(&p, "dev", "2026-01-10", DEV);
    let plan = plan_of(&p, DEV, "dev");
    assert_marked(&plan, "t.daily");
    let text = with(&p, DEV, &["plan", "dev"]);
    text.expect_code(0);
    assert!(text.stdout.contains("rebuild: the data of t.daily changed since it was built"), "{text:#?}");
    let status = with(&p, DEV, &["status", "dev", "--json", "--check"]).expect_code(0).json();
    let stale: Vec<&str> = status["staleRebuilds"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(stale, ["t.rollup", "t.vroll"], "status lists the stale rollups (the rollup of a rollup follows it): {status:#}");
    let prod_rollup = p.rows(&env_view("prod", "t.rollup"));
    // dev's run rebuilds both, parents first, over the shared daily data.
    let v = with(&p, DEV, &["run", "dev", "--json"]).expect_code(0).json();
    let processed = string_set(&v["processed"]);
    assert!(processed.is_superset(&set(&["t.rollup", "t.roll2", "t.vroll"])) && !processed.contains("t.daily"), "{v:#}");
    assert_serves(&p, "dev", "2026-01-12", DEV);
    assert_eq!(p.rows(&env_view("prod", "t.rollup")), prod_rollup, "dev's run left prod's rollup alone");
    // Nothing is stale any more, in either environment.
    for (env, factor) in [("dev", DEV), ("prod", PROD)] {
        let plan = plan_of(&p, factor, env);
        assert_eq!(plan["hasChanges"], false, "{env}: {plan:#}");
    }
    let status = with(&p, DEV, &["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["staleRebuilds"], serde_json::json!([]), "{status:#}");
}

fn dev_computes_the_shared_parent_then_prod_plans_and_runs_the_rebuild_of_its_own_rollups(engine: EngineBackend) {
    let p = two_environments(engine);
    let v = with(&p, DEV, &["run", "dev", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).is_superset(&set(&["t.daily", "t.rollup", "t.roll2"])), "{v:#}");
    assert_serves(&p, "dev", "2026-01-12", DEV);
    assert_serves(&p, "prod", "2026-01-10", PROD);
    let plan = plan_of(&p, PROD, "prod");
    assert_marked(&plan, "t.daily");
    // `apply` rebuilds them as well as `run` does.
    let v = with(&p, PROD, &["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    assert!(string_set(&v["built"]).is_superset(&set(&["t.rollup", "t.roll2"])), "{v:#}");
    assert_serves(&p, "prod", "2026-01-12", PROD);
    assert_serves(&p, "dev", "2026-01-12", DEV);
    for (env, factor) in [("dev", DEV), ("prod", PROD)] {
        assert_eq!(plan_of(&p, factor, env)["hasChanges"], false, "{env}");
    }
}

fn a_restatement_in_prod_marks_the_rollup_dev_serves_over_the_restated_parent(engine: EngineBackend) {
    let p = two_environments(engine);
    // Caught up in both first, so only the restatement changes anything.
    with(&p, PROD, &["run", "prod"]).expect_code(0);
    with(&p, DEV, &["run", "dev"]).expect_code(0);
    assert_eq!(plan_of(&p, DEV, "dev")["hasChanges"], false);
    with(&p, PROD, &["restate", "prod", "--model", "t.daily", "--from", "2026-01-03", "--to", "2026-01-04"]).expect_code(0);
    // prod recomputes the day; dev's ledger (shared) has nothing missing, and its rollups are stale.
    let v = with(&p, PROD, &["run", "prod", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).is_superset(&set(&["t.daily", "t.rollup"])), "{v:#}");
    let plan = plan_of(&p, DEV, "dev");
    assert_marked(&plan, "t.daily");
    with(&p, DEV, &["run", "dev"]).expect_code(0);
    assert_serves(&p, "dev", "2026-01-12", DEV);
    assert_eq!(plan_of(&p, DEV, "dev")["hasChanges"], false);
}

/// dev adds a column to the daily model (non-breaking): a new daily version with a table of its
/// own, which dev alone serves. `t.rollup` reads it, so dev's rollup version gets a table of its
/// own rather than inheriting prod's (prod's rollup is built from prod's daily table: the two
/// would diverge as soon as one of the dailies gets new days), and `t.top` over it too.
fn shared_table_models(dev: bool) -> String {
    let (extra_col, extra_sel, plus) = if dev { (r#", { "w", "bigint" }"#, ", 7 AS w", 2) } else { ("", "", 1) };
    format!(
        r#"
local daily = define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }}{extra_col} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(extract(epoch FROM CAST(@start AS TIMESTAMP)) / 86400 AS BIGINT) AS v{extra_sel}",
}}
local rollup = define_model {{
  name = "t.rollup", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS n, CAST(sum(v) AS BIGINT) AS total FROM " .. ref(daily),
}}
define_model {{
  name = "t.top", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total1", "bigint" }} }},
  query = "SELECT n, total + {plus} AS total1 FROM " .. ref(rollup),
}}
"#
    )
}

/// `(n, total)` of `t.rollup` computed from scratch over the days before `now_day`.
fn fresh_rollup(now_day: &str) -> Rows {
    expected(now_day, 1).0
}

fn a_rollup_dev_serves_over_its_own_parent_gets_a_table_of_its_own_and_follows_dev_data(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &shared_table_models(false));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    // dev starts as prod (a view swap), so the edit below is categorised against prod's versions.
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    p.write("models/m.lua", &shared_table_models(true));
    let plan = p.plan("dev");
    let rollup = action(&plan, "t.rollup");
    assert_eq!(rollup["change"], "indirect", "{plan:#}");
    assert_eq!(rollup["build"], true, "not inherited from prod: {plan:#}");
    assert!(rollup.get("reusedFrom").is_none(), "{plan:#}");
    assert!(rollup["explain"]["reason"].as_str().unwrap().contains("one of its own"), "{plan:#}");
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    let s = p.state();
    let (prod, dev) = (s.env_pointers("prod").unwrap(), s.env_pointers("dev").unwrap());
    let physical = |name: &str, fp: &str| s.snapshot(name, fp).unwrap().unwrap().physical;
    assert_ne!(physical("t.rollup", &prod["t.rollup"]), physical("t.rollup", &dev["t.rollup"]), "dev's rollup has a table of its own");
    drop(s);
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-10"));
    assert_eq!(p.plan("dev")["hasChanges"], false, "built from what dev's daily holds: nothing stale");
    // prod's run computes prod's new days and rebuilds prod's rollup: dev's is not affected.
    p.now = "2026-01-12T00:00:00Z".to_string();
    p.write("models/m.lua", &shared_table_models(false));
    let v = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).contains("t.rollup"), "{v:#}");
    assert_eq!(p.rows(&env_view("prod", "t.rollup")), fresh_rollup("2026-01-12"));
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-10"), "dev's daily has not computed the new days yet");
    // dev's run computes dev's new days and rebuilds dev's rollup (and top) over them; prod's stays.
    p.write("models/m.lua", &shared_table_models(true));
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).is_superset(&set(&["t.daily", "t.rollup", "t.top"])), "{v:#}");
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-12"));
    assert_eq!(
        p.rows(&env_view("dev", "t.top")),
        p.rows(&format!("(SELECT n, total + 2 FROM {}) AS q", env_view("dev", "t.rollup"))),
        "dev's top serves what dev's rollup holds"
    );
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A rollup whose new version would inherit its own environment's table while its parent's new
/// version holds other data (two more days than the table was built from): the plan builds it
/// anew (naming the parent and the intervals), so the apply that promotes it serves the new
/// days, and so does the rollup of it. A time-range model over a `full` copy of the daily model
/// keeps its table and computes the two days from the copy built anew. With the same days, the
/// tables are inherited.
fn an_inherited_rollup_table_built_from_fewer_days_than_the_parents_new_version_is_built_anew_by_the_same_apply(engine: EngineBackend) {
    const BELOW: &str = r#"
local copy = define_model {
  name = "t.copy", kind = kind.full(),
  schema = { { "day", "timestamp" }, { "v", "bigint" } },
  query = "SELECT day, v FROM " .. ref(daily),
}
define_model {
  name = "t.late",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day" },
  schema = { { "day", "timestamp" }, { "v", "bigint" } },
  query = "SELECT day, v FROM " .. ref(copy) .. " WHERE day BETWEEN CAST(@start_ts AS TIMESTAMP) AND CAST(@end_ts AS TIMESTAMP)",
}
"#;
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &(shared_table_models(false) + BELOW));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    // dev adds a column to the daily model (non-breaking): over the same days, the rollup's
    // table is what the new daily version would give, and is inherited.
    p.write("models/m.lua", &(shared_table_models(true).replace("total + 2", "total + 1") + BELOW));
    let plan = p.plan("dev");
    assert!(action(&plan, "t.rollup")["reusedFrom"].is_string(), "same days: inherited: {plan:#}");
    // Two days later, without a run: the new daily version is backfilled up to now, while the
    // rollup's table was built over ten days.
    p.now = "2026-01-12T00:00:00Z".to_string();
    let plan = p.plan("dev");
    let rollup = action(&plan, "t.rollup");
    assert_eq!(rollup["build"], true, "built anew: {plan:#}");
    assert!(rollup.get("reusedFrom").is_none(), "{plan:#}");
    let reason = rollup["explain"]["reason"].as_str().unwrap();
    assert!(reason.contains("`t.daily`'s new version computes 2 intervals its older version lacked"), "{reason}");
    let top = action(&plan, "t.top");
    assert_eq!(top["build"], true, "{plan:#}");
    assert!(top["explain"]["reason"].as_str().unwrap().contains("`t.rollup`'s table is built anew over new intervals"), "{plan:#}");
    let late = action(&plan, "t.late");
    assert!(late["reusedFrom"].is_string(), "the time-range model keeps its table: {plan:#}");
    assert_eq!(late["intervals"], 2, "{plan:#}");
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-12"), "a fresh computation over dev's daily");
    assert_eq!(p.rows(&env_view("dev", "t.top")), p.rows(&format!("(SELECT n, total + 1 FROM {}) AS q", env_view("dev", "t.rollup"))));
    assert_eq!(p.rows(&env_view("dev", "t.late")), p.rows(&format!("(SELECT day, v FROM {}) AS q", env_view("dev", "t.daily"))));
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A view between the daily model and a rollup: dev edits the view (a column added), so dev's
/// rollup version inherits prod's table and reads the same daily table: the reuse is current
/// (not marked), and either environment's rebuild of the shared table is right for both.
fn view_models(dev: bool) -> String {
    let (extra_col, extra_sel) = if dev { (r#", { "w", "bigint" }"#, ", 7 AS w") } else { ("", "") };
    format!(
        r#"
local daily = define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(extract(epoch FROM CAST(@start AS TIMESTAMP)) / 86400 AS BIGINT) AS v",
}}
local vw = define_model {{
  name = "t.vw", kind = kind.view(),
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }}{extra_col} }},
  query = "SELECT day, v{extra_sel} FROM " .. ref(daily),
}}
define_model {{
  name = "t.rollup", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS n, CAST(sum(v) AS BIGINT) AS total FROM " .. ref(vw),
}}
"#
    )
}

fn a_rollup_inheriting_a_table_over_the_same_parent_data_is_not_marked_and_any_environment_refreshes_it(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &view_models(false));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    p.write("models/m.lua", &view_models(true));
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert!(action(&v, "t.rollup")["reusedFrom"].is_string(), "dev's rollup inherits prod's table: {v:#}");
    assert!(!string_set(&v["built"]).contains("t.rollup"), "{v:#}");
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "the inherited table is current: no needless rebuild: {plan:#}");
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-10"));
    // dev's run computes the shared daily version's new days and rebuilds the shared table:
    // right for prod too (the same relations), whose plan then has nothing to do.
    p.now = "2026-01-12T00:00:00Z".to_string();
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).is_superset(&set(&["t.daily", "t.rollup"])), "{v:#}");
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-12"));
    assert_eq!(p.rows(&env_view("prod", "t.rollup")), fresh_rollup("2026-01-12"));
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    p.write("models/m.lua", &view_models(false));
    let plan = p.plan("prod");
    assert_eq!(plan["hasChanges"], false, "prod's version of the shared table moved with the rebuild: {plan:#}");
}

/// A `full` model over an `embedded` model over a time-range parent: the run that computes the
/// parent's new intervals rebuilds the `full` model too (the embedded model has no data of its
/// own), so the plan after it is a no-op.
fn a_run_rebuilds_a_full_model_reading_new_intervals_through_an_embedded_model(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write(
        "models/m.lua",
        r#"
local daily = define_model {
  name = "t.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 },
  schema = { { "day", "timestamp" }, { "v", "bigint" } },
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(extract(epoch FROM CAST(@start AS TIMESTAMP)) / 86400 AS BIGINT) AS v",
}
local emb = define_model {
  name = "t.emb", kind = kind.embedded(),
  schema = { { "day", "timestamp" }, { "v", "bigint" } },
  query = "SELECT day, v FROM " .. ref(daily),
}
define_model {
  name = "t.eroll", kind = kind.full(),
  schema = { { "n", "bigint" } },
  query = "SELECT count(*) AS n FROM " .. ref(emb),
}
"#,
    );
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(p.rows(&env_view("prod", "t.eroll")), vec![vec![Some("9".to_string())]]);
    p.now = "2026-01-12T00:00:00Z".to_string();
    let v = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).contains("t.eroll"), "{v:#}");
    assert_eq!(p.rows(&env_view("prod", "t.eroll")), vec![vec![Some("11".to_string())]], "the rollup reads the new days");
    let plan = p.run(&["plan", "prod", "--json"]).expect_code(0).json();
    assert_eq!(plan["hasChanges"], false, "nothing left stale after the run: {plan:#}");
}

/// A unique-key model prod and dev share, and a `full` rollup of it each of their own (dev edits
/// it). `prod`'s run upserts new rows and is killed (the `EFMESH_FAULT` hook aborts it) after the
/// engine committed the upsert, before anything is recorded after it: the generation moved before
/// the write, so dev's rollup is still marked.
fn upsert_models(plus: u32) -> String {
    format!(
        r#"
local daily = define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, 1 AS v",
}}
local u = define_model {{
  name = "t.u", kind = kind.incremental_by_unique_key {{ key = "id" }},
  schema = {{ {{ "id", "bigint" }}, {{ "n", "bigint" }} }},
  query = "SELECT 1 AS id, count(*) AS n FROM " .. ref(daily),
}}
define_model {{
  name = "t.r", kind = kind.full(),
  schema = {{ {{ "n1", "bigint" }} }},
  query = "SELECT n + {plus} AS n1 FROM " .. ref(u),
}}
"#
    )
}

fn a_run_killed_between_the_upsert_and_its_record_still_marks_the_rollups_over_it(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &upsert_models(1));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    p.write("models/m.lua", &upsert_models(2));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    let s = p.state();
    assert_eq!(s.env_pointers("prod").unwrap()["t.u"], s.env_pointers("dev").unwrap()["t.u"], "the upserted version is shared");
    drop(s);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.now = "2026-01-12T00:00:00Z".to_string();
    p.write("models/m.lua", &upsert_models(1));
    let mut c = p.command(&["run", "prod"]);
    c.env("EFMESH_FAULT", "after-upsert:t.u");
    let killed = c.output().expect("spawn efmesh");
    let stderr = String::from_utf8_lossy(&killed.stderr);
    assert!(!killed.status.success() && stderr.contains("aborting at `after-upsert:t.u`"), "{stderr}");
    assert_eq!(p.rows(&env_view("prod", "t.u")), vec![vec![Some("1".to_string()), Some("11".to_string())]], "the upsert committed");
    p.write("models/m.lua", &upsert_models(2));
    let plan = p.plan("dev");
    let r = action(&plan, "t.r");
    assert_eq!(r["rebuild"], true, "{plan:#}");
    assert!(r["rebuildReason"].as_str().unwrap().contains("t.u"), "{plan:#}");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "t.r")), vec![vec![Some("13".to_string())]]);
}

fn an_upsert_that_changes_no_row_leaves_the_rollups_over_it_current_and_one_that_changes_rows_marks_them(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &upsert_models(1));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    p.write("models/m.lua", &upsert_models(2));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    // prod's run upserts the same row again (no new day): nothing changed.
    p.write("models/m.lua", &upsert_models(1));
    let v = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).contains("t.u"), "the upsert ran: {v:#}");
    p.write("models/m.lua", &upsert_models(2));
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "dev's rollup over the unchanged upsert is not marked: {plan:#}");
    // A day later the upsert changes the row: dev's rollup is marked.
    p.now = "2026-01-11T00:00:00Z".to_string();
    p.write("models/m.lua", &upsert_models(1));
    p.run(&["run", "prod"]).expect_code(0);
    p.write("models/m.lua", &upsert_models(2));
    let plan = p.plan("dev");
    let r = action(&plan, "t.r");
    assert_eq!(r["rebuild"], true, "{plan:#}");
    assert!(r["rebuildReason"].as_str().unwrap().contains("t.u"), "{plan:#}");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "t.r")), vec![vec![Some("12".to_string())]]);
}

/// A session's re-plan keeps the rebuild marks of the models its edit does not reach
/// (`plan::VersionMemo`'s marks, SPEC §4): after edits that leave the stale rollup alone, the
/// session still marks it, and every plan equals the plan from scratch (the test suite also sets
/// `EFMESH_VERIFY_PLAN_MEMO=1`, which compares the kept marks with the marks computed in full).
fn a_session_keeps_the_rebuild_marks_of_the_models_an_edit_does_not_reach(engine: EngineBackend) {
    use efmesh::session::{Session, open_state, plan_checked};
    let p = two_environments(engine);
    with(&p, PROD, &["run", "prod", "--json"]).expect_code(0);
    p.write("models/m.lua", &models(DEV));
    // The session runs in this process: on Postgres it reads the engine's catalog.
    p.engine_url_in_process();
    let now = efmesh::core::interval::parse_instant("2026-01-12T00:00:00Z").expect("instant");
    let options = efmesh::plan::Options::default();
    let scratch = |session: &Session| {
        let project = session.loaded().expect("loads");
        let state = open_state(project, false).expect("state");
        serde_json::to_value(plan_checked(project, &*state, "dev", now, &options).expect("plan")).expect("json")
    };
    let mut session = Session::open(&p.root().join("efmesh.toml")).expect("session");
    let first = serde_json::to_value(session.plan("dev", now, &options).expect("plan")).expect("json");
    assert_marked(&first, "t.daily");
    assert_eq!(first, scratch(&session));
    // `t.roll2` (below the stale rollup), then the view `t.vw` (above `t.vroll`).
    for (from, to) in [("total + 1 AS total1", "total + 2 AS total1"), ("SELECT day, v FROM", "SELECT day, v + 0 AS v FROM")] {
        let text = fs_err::read_to_string(p.root().join("models/m.lua")).expect("read").replace(from, to);
        p.write("models/m.lua", &text);
        session.reload(&[p.root().join("models/m.lua")]).expect("reload");
        let plan = serde_json::to_value(session.plan("dev", now, &options).expect("plan")).expect("json");
        assert_eq!(plan, scratch(&session), "after `{to}`");
        let rollup = action(&plan, "t.rollup");
        assert_eq!(rollup["rebuild"], true, "after `{to}`, the stale rollup is still marked: {plan:#}");
        assert!(rollup["rebuildReason"].as_str().unwrap_or_default().contains("t.daily"), "{plan:#}");
    }
}

/// A unique-key (or partition) model over `landing.ev`, optionally with a count `n` (a
/// non-breaking edit), and a `full` rollup of it.
fn keyed_models(kind: &str, with_n: bool) -> String {
    let (col, sel) = if with_n { (r#", { "n", "bigint" }"#, ", count(*) AS n") } else { ("", "") };
    format!(
        r#"
local raw = define_model {{ name = "raw.ev", kind = kind.external {{ table = "landing.ev" }}, schema = {{ {{ "cat", "varchar" }}, {{ "amount", "bigint" }} }} }}
local u = define_model {{
  name = "t.bycat", kind = {kind},
  schema = {{ {{ "cat", "varchar" }}, {{ "total", "bigint" }}{col} }},
  query = "SELECT cat, CAST(sum(amount) AS BIGINT) AS total{sel} FROM " .. ref(raw) .. " GROUP BY cat",
}}
define_model {{
  name = "t.roll", kind = kind.full(),
  schema = {{ {{ "cats", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS cats, CAST(sum(total) AS BIGINT) AS total FROM " .. ref(u),
}}
"#
    )
}

fn a_unique_key_model_served_from_another_table_rebuilds_its_full_children_in_the_same_apply(engine: EngineBackend) {
    keyed_model_served_from_another_table(engine, r#"kind.incremental_by_unique_key { key = "cat" }"#);
}

fn a_partition_model_served_from_another_table_rebuilds_its_full_children_in_the_same_apply(engine: EngineBackend) {
    keyed_model_served_from_another_table(engine, r#"kind.incremental_by_partition { partitioned_by = { "cat" } }"#);
}

fn keyed_model_served_from_another_table(engine: EngineBackend, kind: &str) {
    // The key `b` leaves the source; the upsert keeps it (absent rows stay). A non-breaking edit
    // gives the keyed model a table of its own, built from its query alone: `b` is gone there,
    // and the rollup over the old table (2 keys, 30) would be served beside it.
    {
        let p = Project::on_engine(engine);
        p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.ev (cat varchar, amount bigint); INSERT INTO landing.ev VALUES ('a', 10), ('b', 20)");
        p.write("models/m.lua", &keyed_models(kind, false));
        p.run(&["apply", "prod", "--yes"]).expect_code(0);
        p.execute_on_engine("DELETE FROM landing.ev WHERE cat = 'b'");
        p.run(&["run", "prod"]).expect_code(0);
        let roll = |p: &Project| p.query(&format!("SELECT CAST(cats AS VARCHAR), CAST(total AS VARCHAR) FROM {}", env_view("prod", "t.roll")));
        assert_eq!(roll(&p), vec![vec![Some("2".to_string()), Some("30".to_string())]], "{kind}: the upsert kept `b`");
        p.write("models/m.lua", &keyed_models(kind, true));
        let plan = p.plan("prod");
        assert_eq!(action(&plan, "t.bycat")["change"], "non-breaking", "{kind}: {plan:#}");
        let r = action(&plan, "t.roll");
        assert_eq!(r["build"], true, "{kind}: the rollup is built anew: {plan:#}");
        assert!(r["explain"]["reason"].as_str().unwrap().contains("`t.bycat` is served from another table"), "{kind}: {plan:#}");
        // The keyed model's new table lacks `b`: the plan says so (`plan::DropsKept`).
        assert_eq!(action(&plan, "t.bycat")["dropsKept"]["built"], true, "{kind}: {plan:#}");
        p.run(&["apply", "prod", "--yes"]).expect_code(0);
        let keys = p.query(&format!("SELECT cat FROM {} ORDER BY cat", env_view("prod", "t.bycat")));
        assert_eq!(keys, vec![vec![Some("a".to_string())]], "{kind}: the new table holds what the query returns");
        assert_eq!(roll(&p), vec![vec![Some("1".to_string()), Some("10".to_string())]], "{kind}: the rollup follows the table served");
        assert_eq!(p.plan("prod")["hasChanges"], false, "{kind}: nothing left to rebuild");
        // Back to the old version (its table, which kept `b`): the rollup follows it again.
        p.write("models/m.lua", &keyed_models(kind, false));
        p.run(&["apply", "prod", "--yes"]).expect_code(0);
        assert_eq!(roll(&p), vec![vec![Some("2".to_string()), Some("30".to_string())]], "{kind}: the rollup over the old table");
    }
}

/// `t.daily` (time-range, from `landing.ev`) and `t.bycat` (unique-key over it), optionally with
/// a count `n` (a non-breaking edit).
fn daily_and_keyed(with_n: bool) -> String {
    let (col, sel) = if with_n { (r#", { "n", "bigint" }"#, ", count(*) AS n") } else { ("", "") };
    format!(
        r#"
local raw = define_model {{ name = "raw.ev", kind = kind.external {{ table = "landing.ev" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "cat", "varchar" }}, {{ "amount", "bigint" }} }} }}
local daily = define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "cat", "varchar" }}, {{ "total", "bigint" }} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, cat, CAST(sum(amount) AS BIGINT) AS total FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1, 2",
}}
define_model {{
  name = "t.bycat", kind = kind.incremental_by_unique_key {{ key = "cat" }},
  schema = {{ {{ "cat", "varchar" }}, {{ "total", "bigint" }}{col} }},
  query = "SELECT cat, CAST(sum(total) AS BIGINT) AS total{sel} FROM " .. ref(daily) .. " GROUP BY cat",
}}
"#
    )
}

fn a_unique_key_version_pointed_at_anew_is_refreshed_when_its_parents_data_changed_since_its_last_refresh(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.execute_on_engine(
        "CREATE SCHEMA landing; CREATE TABLE landing.ev (ts timestamp, cat varchar, amount bigint); \
         INSERT INTO landing.ev VALUES (TIMESTAMP '2026-01-01 10:00', 'a', 10), (TIMESTAMP '2026-01-02 10:00', 'b', 20)",
    );
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_and_keyed(false));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    let b = |p: &Project, env: &str| p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} WHERE cat = 'b'", env_view(env, "t.bycat")));
    // dev serves the edit; promoted to prod with no new data: a view swap, nothing refreshed.
    p.write("models/m.lua", &daily_and_keyed(true));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    let promoted = p.run(&["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    assert!(!string_set(&promoted["built"]).contains("t.bycat"), "{promoted:#}");
    // A new day; prod's run refreshes the version it serves.
    p.execute_on_engine("INSERT INTO landing.ev VALUES (TIMESTAMP '2026-01-03 10:00', 'b', 7)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(b(&p, "prod"), vec![vec![Some("27".to_string())]]);
    // Back to the old version, last refreshed before the new day: refreshed by the apply.
    p.write("models/m.lua", &daily_and_keyed(false));
    let plan = p.plan("prod");
    let refresh = plan["alsoWrites"].as_array().and_then(|w| w.iter().find(|r| r["model"] == "t.bycat")).cloned().unwrap_or_default();
    assert!(refresh["note"].as_str().is_some_and(|n| n.contains("refresh, as `run` would") && n.contains("t.daily")), "{plan:#}");
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_eq!(b(&p, "prod"), vec![vec![Some("27".to_string())]], "the old version's table brought up to date");
    assert_eq!(p.plan("prod")["hasChanges"], false);
}

/// `t.daily` (time-range; `with_w`: a column `w` added, a non-breaking edit), `t.mid` a
/// time-range copy of its `v` (it does not read `w`: a dev edit of the daily model gives it a new
/// version inheriting prod's table and done intervals), `t.rollup` a `full` total of `t.mid`
/// (inheriting prod's table too: it reads the same relation) and `t.top` a `full` model over the
/// rollup (`plus`: another value is a breaking edit, a table of its own).
fn inherited_models(with_w: bool, plus: u32) -> String {
    let (extra_col, extra_sel) = if with_w { (r#", { "w", "bigint" }"#, ", 7 AS w") } else { ("", "") };
    format!(
        r#"
local daily = define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }}{extra_col} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(extract(epoch FROM CAST(@start AS TIMESTAMP)) / 86400 AS BIGINT) AS v{extra_sel}",
}}
local mid = define_model {{
  name = "t.mid",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }} }},
  query = "SELECT day, v FROM " .. ref(daily) .. " WHERE day BETWEEN CAST(@start_ts AS TIMESTAMP) AND CAST(@end_ts AS TIMESTAMP)",
}}
local rollup = define_model {{
  name = "t.rollup", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS n, CAST(sum(v) AS BIGINT) AS total FROM " .. ref(mid),
}}
define_model {{
  name = "t.top", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total1", "bigint" }} }},
  query = "SELECT n, total + {plus} AS total1 FROM " .. ref(rollup),
}}
"#
    )
}

/// What `t.top` holds over `t.rollup` as `env` serves it, with `plus`.
fn top_over_rollup(p: &Project, env: &str, plus: u32) -> Rows {
    p.rows(&format!("(SELECT n, total + {plus} FROM {}) AS q", env_view(env, "t.rollup")))
}

/// The names `status <env> --json` lists under `staleRebuilds`.
#[track_caller]
fn stale_in(p: &Project, env: &str) -> Vec<String> {
    let status = p.run(&["status", env, "--json"]).expect_code(0).json();
    status["staleRebuilds"].as_array().unwrap_or_else(|| panic!("{status:#}")).iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
}

/// prod and dev applied at 2026-01-10 from [`inherited_models`] (dev a view swap of prod), then
/// dev's edit of the daily model (a column added) applied to dev with `plus` for `t.top`: dev's
/// `t.mid` inherits prod's table and ledger, its `t.rollup` prod's table.
fn dev_inheriting_prods_tables(engine: EngineBackend, plus: u32) -> Project {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &inherited_models(false, 1));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    p.write("models/m.lua", &inherited_models(true, plus));
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(action(&v, "t.daily")["change"], "non-breaking", "{v:#}");
    for name in ["t.mid", "t.rollup"] {
        assert_eq!(action(&v, name)["change"], "indirect", "{v:#}");
        assert!(action(&v, name)["reusedFrom"].is_string(), "{name} inherits prod's table: {v:#}");
    }
    assert!(string_set(&v["built"]).is_disjoint(&set(&["t.mid", "t.rollup"])), "{v:#}");
    let s = p.state();
    let (prod, dev) = (s.env_pointers("prod").unwrap(), s.env_pointers("dev").unwrap());
    let physical = |name: &str, fp: &str| s.snapshot(name, fp).unwrap().unwrap().physical;
    for name in ["t.mid", "t.rollup"] {
        assert_ne!(prod[name], dev[name], "{name}: another version");
        assert_eq!(physical(name, &prod[name]), physical(name, &dev[name]), "{name}: on prod's table");
    }
    drop(s);
    p
}

/// SPEC §4 invariant 36 (a): a version taking over another's table and done intervals writes
/// nothing into it, so the versions already on it keep their data generation. A non-breaking
/// edit applied to dev gives `t.mid` a version on prod's table: prod's rollup, built from prod's
/// `t.mid`, is not stale; dev's rollup inheriting prod's rollup table is proven current; and
/// promoting the edit to prod builds nothing (every version it needs is there, current).
fn a_non_breaking_change_applied_to_dev_leaves_prod_nothing_stale_and_its_promotion_builds_nothing(engine: EngineBackend) {
    let p = dev_inheriting_prods_tables(engine, 1);
    assert_eq!(stale_in(&p, "prod"), Vec::<String>::new(), "prod's data did not change");
    assert_eq!(stale_in(&p, "dev"), Vec::<String>::new());
    let dev = p.plan("dev");
    assert_eq!(dev["hasChanges"], false, "dev's inherited rollup table is current: {dev:#}");
    p.write("models/m.lua", &inherited_models(false, 1));
    let prod = p.plan("prod");
    assert_eq!(prod["hasChanges"], false, "nothing to rebuild in prod: {prod:#}");
    assert!(actions(&prod).iter().all(|a| a.get("rebuild").is_none()), "{prod:#}");
    // The promotion of dev's edit: every version it needs is built and current.
    p.write("models/m.lua", &inherited_models(true, 1));
    let plan = p.plan("prod");
    assert!(actions(&plan).iter().all(|a| a.get("rebuild").is_none() && a["build"] != true), "{plan:#}");
    let v = p.run(&["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(string_set(&v["built"]), set(&[]), "{v:#}");
    assert_eq!(p.rows(&env_view("prod", "t.rollup")), fresh_rollup("2026-01-10"));
    assert_eq!(p.rows(&env_view("prod", "t.top")), top_over_rollup(&p, "prod", 1));
    for env in ["prod", "dev"] {
        assert_eq!(p.plan(env)["hasChanges"], false, "{env}");
        assert_eq!(stale_in(&p, env), Vec::<String>::new(), "{env}");
    }
}

/// The other side of the rule above: a write into the shared `t.mid` table after dev's version
/// took it over (prod's run computing two new days there) moves dev's version too, so the `full`
/// model dev built over it with a table of its own (`t.top`, edited in dev, reading dev's rollup on
/// the shared rollup table, which prod's run rebuilds rightly for both) is marked, and dev's run
/// rebuilds it.
fn a_write_into_a_child_table_dev_inherited_still_marks_the_full_model_dev_built_over_it(engine: EngineBackend) {
    let mut p = dev_inheriting_prods_tables(engine, 5);
    assert_eq!(stale_in(&p, "prod"), Vec::<String>::new());
    assert_eq!(p.plan("dev")["hasChanges"], false);
    assert_eq!(p.rows(&env_view("dev", "t.top")), top_over_rollup(&p, "dev", 5));
    p.now = "2026-01-12T00:00:00Z".to_string();
    p.write("models/m.lua", &inherited_models(false, 1));
    let v = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).is_superset(&set(&["t.daily", "t.mid", "t.rollup", "t.top"])), "{v:#}");
    assert_eq!(p.rows(&env_view("prod", "t.rollup")), fresh_rollup("2026-01-12"));
    // dev serves prod's computation of the shared tables: its rollup (rebuilt for both) holds the
    // new days, its own top was built before them.
    assert_eq!(p.rows(&env_view("dev", "t.rollup")), fresh_rollup("2026-01-12"));
    assert_ne!(p.rows(&env_view("dev", "t.top")), top_over_rollup(&p, "dev", 5));
    assert_eq!(stale_in(&p, "dev"), vec!["t.top".to_string()], "the shared rollup table's data changed under dev's top");
    p.write("models/m.lua", &inherited_models(true, 5));
    let plan = p.plan("dev");
    assert!(action(&plan, "t.rollup").get("rebuild").is_none(), "rebuilt by prod rightly for dev too: {plan:#}");
    let top = action(&plan, "t.top");
    assert_eq!(top["rebuild"], true, "{plan:#}");
    assert!(top["rebuildReason"].as_str().unwrap().contains("t.rollup"), "{plan:#}");
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert!(string_set(&v["processed"]).contains("t.top"), "{v:#}");
    assert_eq!(p.rows(&env_view("dev", "t.top")), top_over_rollup(&p, "dev", 5));
    assert_eq!(stale_in(&p, "dev"), Vec::<String>::new());
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "nothing left to rebuild: {plan:#}");
}
