//! A table `dev` shares with `prod` while their versions read different parent tables (SPEC §4
//! invariant 36 (e)): outside `prod`, a time-range version computes no interval in it (it serves
//! `prod`'s computation: new days appear as `prod`'s run computes them); an SCD type 2
//! (unique-key, partition) table, which keeps what it recorded, is not refreshed there (it keeps
//! `prod`'s rows until `prod` serves the change too); a lost one is rebuilt by `prod` only, and
//! then `dev` serves its rebuilt rows, healthy. `dev` never writes rows computed from its own
//! parents into what `prod` serves.

use crate::common::*;

/// `t.daily` sums `landing.events` per day (optionally with a count `n`: a non-breaking edit);
/// `t.child` copies it; `f.tot` is the grand total, `s.hist` its history (SCD type 2).
fn models(with_n: bool, with_scd: bool) -> String {
    let scd = if with_scd { SCD } else { "" };
    let (col, sel) = if with_n { (r#", { "n", "bigint" }"#, ", count(*) AS n") } else { ("", "") };
    format!(
        r#"
local raw = define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "integer" }} }} }}
local daily = define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }}{col} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, CAST(sum(v) AS BIGINT) AS total{sel} FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}}
define_model {{
  name = "t.child", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref(daily) .. " WHERE day >= @start AND day < @end",
}}
{scd}
"#
    )
}

const SCD: &str = r#"
local tot = define_model {
  name = "f.tot", kind = kind.full(),
  schema = { { "k", "integer" }, { "total", "bigint" } },
  query = "SELECT 1 AS k, CAST(sum(total) AS BIGINT) AS total FROM " .. ref(daily),
}
define_model {
  name = "s.hist", kind = kind.scd_type2 { key = { "k" } },
  schema = { { "k", "integer" }, { "total", "bigint" } },
  query = "SELECT k, total FROM " .. ref(tot),
}
"#;

fn one(p: &Project, sql: &str) -> String {
    p.query(sql).first().and_then(|r| r.first().cloned().flatten()).unwrap_or_default()
}

/// `envs` applied in turn from `models` at 01:00 on the 3rd (on the same versions).
fn applied_in(envs: &[&str], models: &str) -> Project {
    let mut p = Project::new();
    landing(&p);
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", models);
    for env in envs {
        p.apply(env);
    }
    p
}

/// `prod` and `dev` applied from `models` at 01:00 on the 3rd (on the same versions).
fn prod_and_dev(models: &str) -> Project {
    applied_in(&["prod", "dev"], models)
}

#[test]
fn a_child_dev_reads_over_its_own_parent_never_rewrites_what_prod_computed_in_their_table() {
    let mut p = prod_and_dev(&models(false, false));
    // dev changes the daily model (non-breaking) and back: dev is on prod's versions again.
    p.write("models/m.lua", &models(true, false));
    p.apply("dev");
    p.write("models/m.lua", &models(false, false));
    p.apply("dev");
    // prod's run computes the 3rd; then a late row for the 3rd, and dev's edit again.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 20:00', 100)");
    p.write("models/m.lua", &models(true, false));
    let plan = p.plan("dev");
    let child = action(&plan, "t.child");
    let served = {
        let s = p.state();
        let fp = s.env_pointers("prod").unwrap()["t.child"].clone();
        s.snapshot("t.child", &fp).unwrap().unwrap().physical
    };
    assert_eq!(child["physical"].as_str(), Some(served.as_str()), "the table prod serves: {plan:#}");
    assert_eq!(child["intervals"], 0, "prod computed the 3rd in it: not written from dev's daily: {plan:#}");
    p.apply("dev");
    let on = |env: &str, m: &str| one(&p, &format!("SELECT CAST(total AS VARCHAR) FROM {} WHERE day = TIMESTAMP '2026-01-03'", env_view(env, m)));
    assert_eq!((on("prod", "t.daily"), on("prod", "t.child")), ("4".to_string(), "4".to_string()), "prod's child serves prod's daily");
    // dev's new daily version read the late row; its child, kept as non-breaking, holds prod's
    // computation (docs/faults.md: late rows the old version never read).
    assert_eq!((on("dev", "t.daily"), on("dev", "t.child")), ("104".to_string(), "4".to_string()));
    // dev's run afterwards leaves it as well (its plan is computed, never replayed without it).
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(on("prod", "t.child"), "4", "prod's child after dev's run");
}

fn landing(p: &Project) {
    p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 10:00', 1), (TIMESTAMP '2026-01-02 10:00', 2)");
}

#[test]
fn an_scd_history_dev_would_reconcile_from_its_own_parents_is_left_to_prod_outside_prod() {
    let mut p = prod_and_dev(&models(false, true));
    // dev's non-breaking edit gives `f.tot` a table of its own; `s.hist` keeps the one table
    // (its history): dev's run would reconcile dev's total into prod's history. Not refreshed
    // in dev (said in its plan and warned), the rest of dev's run goes on.
    p.write("models/m.lua", &models(true, true));
    p.apply("dev");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    let ran = p.run(&["run", "dev"]);
    ran.expect_code(0);
    assert!(ran.stderr.contains("not refreshed") && ran.stderr.contains("s.hist") && ran.stderr.contains("`prod` serves"), "{}", ran.stderr);
    let days = one(&p, &format!("SELECT CAST(count(*) AS VARCHAR) FROM {}", env_view("dev", "t.daily")));
    assert_eq!(days, "3", "dev's own time-range model advanced");
    p.write("models/m.lua", &models(false, true));
    p.run(&["run", "prod"]).expect_code(0);
    let history = one(&p, &format!("SELECT string_agg(CAST(total AS VARCHAR), ',' ORDER BY valid_from) FROM {}", env_view("prod", "s.hist")));
    assert_eq!(history, "3,7", "prod's history holds prod's totals only");
    // Once prod applies the edit, both read the same parents: dev runs again.
    p.write("models/m.lua", &models(true, true));
    p.apply("prod");
    p.run(&["run", "dev"]).expect_code(0);
}

/// [`models`] without the SCD models, `t.daily`'s sum plus `plus` (a query edit) and its `start`.
fn daily_models(plus: &str, start: &str) -> String {
    models(false, false).replace("CAST(sum(v) AS BIGINT) AS total", &format!("CAST(sum(v){plus} AS BIGINT) AS total")).replace(
        r#"name = "t.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" }"#,
        &format!(r#"name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "{start}" }}"#),
    )
}

/// A project whose `t.daily` was applied to `env` at the 3rd, then changed (`+ 1`) by a
/// forward-only apply of `env`, which keeps its table; the project written back without the
/// change.
fn forward_only_in(env: &str) -> Project {
    let mut p = Project::new();
    landing(&p);
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p.apply(env);
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    p.run(&["apply", env, "--yes", "--forward-only", "t.daily"]).expect_code(0);
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p
}

#[test]
fn a_promotion_onto_a_table_a_forward_only_change_took_over_in_another_environment_is_refused() {
    // dev's forward-only change keeps the version's table (nobody else served it); prod then
    // promoted the old version onto that same table: a view swap, and dev's runs wrote dev's
    // query's rows into what prod served.
    let p = forward_only_in("dev");
    // `plan` says what `apply` refuses, never lists it as work to do.
    let planned = p.run(&["plan", "prod"]);
    planned.expect_code(0);
    assert!(planned.stdout.contains("apply refuses this plan:") && planned.stdout.contains("taken over by the newer version"), "{}", planned.stdout);
    let refused = &p.plan("prod")["applyRefuses"];
    assert!(refused.as_str().is_some_and(|r| r.contains("t.daily") && r.contains("`dev` serves")), "{refused}");
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("t.daily") && r.stderr.contains("taken over by the newer version") && r.stderr.contains("`dev` serves"), "{}", r.stderr);
    assert!(r.stderr.contains("`prod` would serve, as this version's, the rows `dev`'s query writes there"), "{}", r.stderr);
    assert!(p.state().env_pointers("prod").unwrap().is_empty(), "prod was promoted");
}

#[test]
fn undoing_a_forward_only_change_recomputes_the_intervals_its_query_wrote_and_no_others() {
    let mut p = forward_only_in("dev");
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    // The forward-only version recomputes the 1st (restated) and computes the 3rd.
    p.now = "2026-01-04T01:00:00Z".into();
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    let daily = |p: &Project| p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} ORDER BY day", env_view("dev", "t.daily")));
    let values = |v: &[&str]| v.iter().map(|x| vec![Some(x.to_string())]).collect::<Vec<_>>();
    assert_eq!(daily(&p), values(&["2", "2", "5"]), "the forward-only query's rows for the 1st and 3rd");
    // Undone: the old version's 1st holds the other query's row (its 2nd was inherited, never
    // rewritten; its 3rd it never computed).
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    let plan = p.plan("dev");
    let a = action(&plan, "t.daily");
    assert_eq!((a["intervals"].clone(), a["recompute"]["intervals"].clone()), (serde_json::json!(2), serde_json::json!(1)), "{plan:#}");
    assert_eq!(a["recompute"]["because"], serde_json::json!(["t.daily"]), "{plan:#}");
    assert_eq!(
        action(&plan, "t.child")["recompute"]["because"],
        serde_json::json!(["t.daily"]),
        "the child names what rewrites its parent's intervals: {plan:#}"
    );
    p.apply("dev");
    assert_eq!(daily(&p), values(&["1", "2", "4"]), "the old version's rows again");
}

#[test]
fn a_version_holding_intervals_outside_the_bounds_an_environment_declares_is_said_so_by_the_plan() {
    // dev moves `start` a day earlier (a metadata change: the 31st goes into the version's one
    // table); prod promotes the same version with the original start: its view serves the 31st
    // too (as after moving `start` later), and the plan says so.
    let mut p = Project::new();
    landing(&p);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2025-12-31 10:00', 7)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models("", "2025-12-31"));
    p.apply("dev");
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    let plan = p.plan("prod");
    let o = &action(&plan, "t.daily")["outsideBounds"];
    assert_eq!(
        (o["intervals"].clone(), o["range"]["start"].clone(), o["range"]["end"].clone()),
        (serde_json::json!(1), serde_json::json!("2025-12-31T00:00:00.000Z"), serde_json::json!("2026-01-01T00:00:00.000Z")),
        "{plan:#}"
    );
    let text = p.run(&["plan", "prod"]).expect_code(0).stdout.clone();
    assert!(text.contains("its table holds 1 done interval in [2025-12-31T00:00:00.000Z, 2026-01-01T00:00:00.000Z) outside its `start`/`end` here"), "{text}");
    assert!(action(&p.plan("dev"), "t.child").get("outsideBounds").is_none(), "t.child computed nothing outside its bounds");
}

#[test]
fn pointing_an_environment_at_the_older_version_of_a_table_another_environment_serves_is_refused() {
    // prod's forward-only change, then prod back at the old version (nobody else served the
    // new one): dev pointing at the newer version would write its query's rows into the table
    // prod serves (whichever version is older, two queries are never served on one table by
    // an environment pointed there).
    let mut p = forward_only_in("prod");
    p.apply("prod");
    p.now = "2026-01-04T01:00:00Z".into();
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("t.daily") && r.stderr.contains("is also the table of version") && r.stderr.contains("`prod` serves"), "{}", r.stderr);
    assert!(p.state().env_pointers("dev").unwrap().is_empty(), "dev was promoted");
}

#[test]
fn environments_left_on_the_old_version_after_prods_forward_only_change_may_each_join_prod() {
    // prod's own forward-only change leaves dev and staging on the old version (their writes
    // refused); each may move to prod's version — the table's writer — although the other still
    // serves the old one.
    let mut p = Project::new();
    landing(&p);
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    for env in ["prod", "dev", "staging"] {
        p.apply(env);
    }
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    p.run(&["apply", "staging", "--yes"]).expect_code(0);
    let prod = p.state().env_pointers("prod").unwrap()["t.daily"].clone();
    assert_eq!(p.state().env_pointers("dev").unwrap()["t.daily"], prod);
    assert_eq!(p.state().env_pointers("staging").unwrap()["t.daily"], prod);
}

#[test]
fn status_of_an_environment_whose_table_prods_forward_only_change_took_over_names_the_takeover_not_lag() {
    // Both serve the old version; prod's forward-only change takes the table over, and prod's
    // run computes the 3rd there with its query. dev's view serves that day: dev is not behind,
    // but every `run dev` is refused while its version lacks it — a problem, with the way out.
    let mut p = Project::new();
    landing(&p);
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p.apply("prod");
    p.apply("dev");
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    let newer = p.state().env_pointers("prod").unwrap()["t.daily"].clone();
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p, "dev", "t.daily"), "01=1,02=2,03=5", "dev's view serves the day prod's query computed");
    // The project dev serves.
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.daily")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!((lag["late"].clone(), lag["leftTo"].clone()), (false.into(), "prod".into()), "{status:#}");
    assert_eq!((lag["behind"].as_i64(), lag["doneUpTo"].as_str()), (Some(0), Some("2026-01-04T00:00:00.000Z")), "what its view serves: {status:#}");
    let over = &lag["takenOverBy"];
    assert_eq!((over["env"].as_str(), over["fingerprint"].as_str(), over["missing"].as_i64()), (Some("prod"), Some(newer.as_str()), Some(1)), "{status:#}");
    assert_eq!(status["healthy"], false, "{status:#}");
    let problems = status["problems"].as_array().cloned().unwrap_or_default();
    let problem = problems.iter().filter_map(|p| p.as_str()).find(|p| p.contains("taken over")).unwrap_or_else(|| panic!("{status:#}"));
    assert!(problem.starts_with("`t.daily`: its table was taken over by the newer version ") && problem.contains("that `prod` serves"), "{problem}");
    assert!(problem.contains("every `run dev` is refused (exit 1)") && problem.contains("apply `dev` from the project `prod` serves"), "{problem}");
    let text = p.run(&["status", "dev", "--check"]);
    let said = &text.expect_code(1).stdout;
    assert!(said.contains("  ✓ t.daily  caught up to 2026-01-04T00:00:00.000Z"), "{said}");
    assert!(said.contains("    ⚠ its table was taken over by the newer version ") && !said.contains("t.daily  behind by"), "{said}");
    // What status said: dev's run is refused.
    let ran = p.run(&["run", "dev"]);
    assert!(ran.expect_code(1).stderr.contains("taken over by the newer version"), "{}", ran.stderr);
    // The way out: dev applied from the project prod serves serves its version; once a run of
    // it succeeds (the refused one errored), it is healthy.
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    p.apply("dev");
    p.run(&["run", "dev"]).expect_code(0);
    let status = p.run(&["status", "dev", "--check", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.daily")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(lag["takenOverBy"], serde_json::Value::Null, "{status:#}");
}

#[test]
fn a_forward_only_change_outside_prod_is_refused_while_prod_serves_another_version_on_the_table() {
    // prod's own forward-only version keeps the table prod and dev served; dev's forward-only
    // change of the old version (which only dev still serves) would keep that same table:
    // prod's rows would change under it.
    let mut p = Project::new();
    landing(&p);
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p.apply("prod");
    p.apply("dev");
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    p.write("models/m.lua", &daily_models(" + 2", "2026-01-01"));
    let r = p.run(&["apply", "dev", "--yes", "--forward-only", "t.daily"]);
    r.expect_code(1);
    assert!(r.stderr.contains("`prod` serves the table that would be kept"), "{}", r.stderr);
}

#[test]
fn an_environment_moving_onto_another_environments_forward_only_version_rebuilds_its_children() {
    // prod's t.daily on a table of its own (+ 10); dev's forward-only change (+ 1) keeps dev's
    // older table; prod then takes dev's version: its data changes (another table), so its
    // child must not keep the rows it computed from prod's old table.
    let mut p = Project::new();
    landing(&p);
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models(" + 10", "2026-01-01"));
    p.apply("prod");
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p.apply("dev");
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    p.run(&["apply", "dev", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    p.apply("prod");
    let totals = |m: &str| p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} ORDER BY day", env_view("prod", m)));
    assert_eq!(totals("t.daily"), vec![vec![Some("1".to_string())], vec![Some("2".to_string())]], "dev's table, inherited rows");
    assert_eq!(totals("t.child"), totals("t.daily"), "prod's child copies the parent it now reads");
}

#[test]
fn a_version_pointed_at_again_recomputes_what_a_restated_forward_only_version_left_in_its_table() {
    // prod's forward-only version rewrote the 1st (restated and run), then restated it again
    // without running: its ledger no longer lists the 1st, but the table holds its row. prod
    // back at the old version recomputes the 1st.
    let p = forward_only_in("prod");
    p.write("models/m.lua", &daily_models(" + 1", "2026-01-01"));
    let restate = ["restate", "prod", "--model", "t.daily", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"];
    p.run(&restate).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    p.run(&restate).expect_code(0);
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p.apply("prod");
    let first = one(&p, &format!("SELECT CAST(total AS VARCHAR) FROM {} WHERE day = TIMESTAMP '2026-01-01'", env_view("prod", "t.daily")));
    assert_eq!(first, "1", "the old version's row for the 1st");
}

#[test]
fn a_restatement_outside_prod_of_a_version_on_the_table_prod_serves_is_refused() {
    // dev's child is another version (its parent changed, non-breaking) on the table prod's
    // child serves: a restatement from dev could not be recomputed there (prod's rows stay).
    let p = prod_and_dev(&models(false, false));
    p.write("models/m.lua", &models(true, false));
    let plan = p.apply("dev");
    assert!(action(&plan["plan"], "t.child")["reusedFrom"].is_string(), "{plan:#}");
    let r = p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]);
    r.expect_code(1);
    assert!(r.stderr.contains("`t.child` (its table also holds the version `prod` serves)"), "{}", r.stderr);
    // prod may restate its own versions, but its `t.daily` is another one: its restatement
    // would not recompute dev's days, so the hint does not send the user there.
    assert!(!r.stderr.contains("efmesh restate prod"), "{}", r.stderr);
    assert!(r.stderr.contains("no environment can restate them alone") && r.stderr.contains("`prod`'s would not recompute these days"), "{}", r.stderr);
    assert!(r.stderr.contains("an edit of `t.daily` that gives it versions of its own") && !r.stderr.contains("efmesh invalidate"), "{}", r.stderr);
    // Nothing was cleared: dev's versions keep their days.
    let plan = p.plan("dev");
    assert!(!plan["hasChanges"].as_bool().unwrap_or(true), "{plan:#}");
}

#[test]
fn a_parents_lookback_outside_prod_never_rewrites_what_prod_computed_in_a_shared_child_table() {
    // dev's daily model is its own (non-breaking: a new table) with a lookback; its child keeps
    // the table prod's child serves. A late row: dev's run recomputes its daily's day, and its
    // child's day is prod's, which the recomputation must not rewrite from dev's daily.
    let with_lookback = |m: String| m.replacen(r#"start = "2026-01-01" }"#, r#"start = "2026-01-01", lookback = 1 }"#, 1);
    let mut p = prod_and_dev(&with_lookback(models(false, false)));
    p.write("models/m.lua", &with_lookback(models(true, false)));
    p.apply("dev");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 20:00', 100)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(0);
    let on = |env: &str, m: &str| one(&p, &format!("SELECT CAST(total AS VARCHAR) FROM {} WHERE day = TIMESTAMP '2026-01-02'", env_view(env, m)));
    assert_eq!(on("dev", "t.daily"), "102", "dev's daily read the late row");
    assert_eq!((on("prod", "t.daily"), on("prod", "t.child")), ("2".to_string(), "2".to_string()), "prod's child serves prod's daily");
}

/// Days served by `model`'s view in `env`, as `day=total` joined by `,`.
fn days(p: &Project, env: &str, model: &str) -> String {
    one(p, &format!("SELECT coalesce(string_agg(strftime(day, '%d') || '=' || CAST(total AS VARCHAR), ',' ORDER BY day), '') FROM {}", env_view(env, model)))
}

#[test]
fn new_days_outside_prod_in_a_child_table_prod_serves_over_other_parents_are_left_to_prods_run() {
    // dev's daily model is its own (non-breaking: a new table); its child keeps the table prod's
    // child serves. A new day is due: dev's run (here on two workers) computes its daily's day,
    // and leaves the child's to prod — computed from dev's daily, it would be served by prod
    // before prod's run, with prod's ledger saying the day was never done.
    let mut p = prod_and_dev(&models(false, false));
    p.write("models/m.lua", &models(true, false));
    p.apply("dev");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.child")["intervals"], 0, "{plan:#}");
    let also = plan["alsoWrites"].as_array().unwrap_or_else(|| panic!("{plan:#}"));
    assert!(
        also.iter().any(|a| a["model"] == "t.child" && a["note"].as_str().is_some_and(|n| n.starts_with("1 interval(s) not computed here"))),
        "the plan says what dev leaves to prod: {plan:#}"
    );
    let ran = p.run(&["run", "dev", "--jobs", "2"]);
    ran.expect_code(0);
    assert!(ran.stderr.contains("not computed here") && ran.stderr.contains("t.child"), "{}", ran.stderr);
    assert_eq!(days(&p, "dev", "t.daily"), "01=1,02=2,03=4", "dev's daily advanced");
    assert_eq!(days(&p, "prod", "t.child"), "01=1,02=2", "prod serves nothing prod did not compute");
    assert_eq!(days(&p, "dev", "t.child"), "01=1,02=2", "dev serves prod's rows");
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.child")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!((lag["behind"].clone(), lag["leftTo"].clone(), lag["late"].clone()), (1.into(), "prod".into(), false.into()), "{status:#}");
    // An apply of dev writes nothing there either.
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(days(&p, "prod", "t.child"), "01=1,02=2");
    // prod's run computes its day: both serve it.
    p.write("models/m.lua", &models(false, false));
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!((days(&p, "prod", "t.child"), days(&p, "dev", "t.child")), ("01=1,02=2,03=4".to_string(), "01=1,02=2,03=4".to_string()));
}

#[test]
fn a_start_moved_earlier_outside_prod_writes_nothing_before_prods_start_into_the_child_table_prod_serves() {
    let p = prod_and_dev(&models(false, false));
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2025-12-31 10:00', 9)");
    // dev: the daily model's non-breaking edit, and both models start a day earlier.
    let earlier = models(true, false).replace(r#"start = "2026-01-01""#, r#"start = "2025-12-31""#);
    p.write("models/m.lua", &earlier);
    let plan = p.apply("dev");
    assert_eq!(action(&plan["plan"], "t.child")["intervals"], 0, "{plan:#}");
    assert_eq!(days(&p, "dev", "t.daily"), "31=9,01=1,02=2");
    assert_eq!(days(&p, "prod", "t.child"), "01=1,02=2", "nothing before prod's start in the table prod serves");
    assert_eq!(days(&p, "dev", "t.child"), "01=1,02=2");
}

#[test]
fn a_lost_table_prod_serves_over_other_parents_is_rebuilt_by_prod_never_from_another_environment() {
    // A late row only dev's new daily version read: rebuilt from dev, the lost child table would
    // hold it and prod would serve it.
    let p = prod_and_dev(&models(false, true));
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 20:00', 100)");
    p.write("models/m.lua", &models(true, true));
    p.apply("dev");
    assert_eq!(days(&p, "dev", "t.daily"), "01=1,02=102");
    for model in ["t.child", "s.hist"] {
        let table = {
            let s = p.state();
            let fp = s.env_pointers("prod").unwrap()[model].clone();
            s.snapshot(model, &fp).unwrap().unwrap().physical
        };
        p.execute_on_engine(&format!("DROP TABLE {table}"));
        let refused = p.run(&["apply", "dev", "--yes"]);
        refused.expect_code(1);
        assert!(
            refused.stderr.contains(&format!("model `{model}`"))
                && refused.stderr.contains("is missing, and `prod` serves it too")
                && refused.stderr.contains("efmesh apply prod"),
            "{}",
            refused.stderr
        );
        assert!(refused.stderr.contains("models/m.lua:"), "names the model's file: {}", refused.stderr);
        // prod rebuilds it from its own parents; dev then applies and serves prod's rows.
        p.write("models/m.lua", &models(false, true));
        p.apply("prod");
        p.write("models/m.lua", &models(true, true));
        p.apply("dev");
    }
    assert_eq!((days(&p, "prod", "t.child"), days(&p, "dev", "t.child")), ("01=1,02=2".to_string(), "01=1,02=2".to_string()));
    let history = one(&p, &format!("SELECT string_agg(CAST(total AS VARCHAR), ',' ORDER BY valid_from) FROM {}", env_view("prod", "s.hist")));
    assert_eq!(history, "3", "prod's history rebuilt from prod's totals");
}

/// `t.child`'s entry of `env`'s `status --check --json`, which exits `code`.
#[track_caller]
fn child_lag(p: &Project, env: &str, code: i32) -> serde_json::Value {
    let status = p.run(&["status", env, "--check", "--json"]).expect_code(code).json();
    status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.child")).cloned().unwrap_or_else(|| panic!("{status:#}"))
}

#[test]
fn after_prods_rebuild_of_a_lost_table_dev_shares_dev_serves_its_rows_healthy_unless_the_rebuild_failed() {
    // dev's child is a version of its own (over dev's new daily) on the table prod's child
    // serves: it never computes there. The table lost, prod's rebuild marks both versions'
    // intervals failed (the rows are gone), then gives dev's version back what it recomputed:
    // dev serves prod's rebuilt rows, and says so. A rebuild that failed leaves dev unhealthy
    // until prod's next apply completes it.
    for rebuild_fails_first in [false, true] {
        let p = prod_and_dev(&models(false, false));
        p.write("models/m.lua", &models(true, false));
        p.apply("dev");
        let (table, dev_fp) = {
            let s = p.state();
            let (prod_fp, dev_fp) = (s.env_pointers("prod").unwrap()["t.child"].clone(), s.env_pointers("dev").unwrap()["t.child"].clone());
            assert_ne!(prod_fp, dev_fp, "dev's child is a version of its own");
            let table = s.snapshot("t.child", &prod_fp).unwrap().unwrap().physical;
            assert_eq!(s.snapshot("t.child", &dev_fp).unwrap().unwrap().physical, table, "on the table prod serves");
            (table, dev_fp)
        };
        p.execute_on_engine(&format!("DROP TABLE {table}"));
        p.run(&["apply", "dev", "--yes"]).expect_code(1);
        p.write("models/m.lua", &models(false, false));
        if rebuild_fails_first {
            let out = p.command(&["apply", "prod", "--yes"]).env("EFMESH_STATE_FAIL", "done:t.child:refused").output().expect("spawn efmesh");
            let failed = Run::from_output(out, "EFMESH_STATE_FAIL=done:t.child:refused efmesh apply prod --yes".into());
            failed.expect_code(1);
            assert!(failed.stderr.contains("the state write `done:t.child` failed"), "the test hook did not run: {failed:#?}");
            p.write("models/m.lua", &models(true, false));
            let lag = child_lag(&p, "dev", 1);
            assert_eq!(lag["failed"], 2, "dev's intervals stay failed while the rebuild is not done: {lag:#}");
            assert_eq!(p.state().ledger_stats("t.child", &dev_fp).unwrap().failed, 2);
            p.write("models/m.lua", &models(false, false));
        }
        let rebuilt = p.apply("prod");
        assert!(string_set(&rebuilt["built"]).contains("t.child"), "{rebuilt:#}");
        p.write("models/m.lua", &models(true, false));
        assert_eq!(p.plan("dev")["hasChanges"], false);
        p.run(&["run", "dev"]).expect_code(0);
        let lag = child_lag(&p, "dev", 0);
        assert_eq!(lag["failed"], 0, "{lag:#}");
        let stats = p.state().ledger_stats("t.child", &dev_fp).unwrap();
        assert_eq!((stats.done, stats.failed), (2, 0), "dev's version holds what the rebuilt table holds");
        assert_eq!((days(&p, "prod", "t.child"), days(&p, "dev", "t.child")), ("01=1,02=2".to_string(), "01=1,02=2".to_string()));
    }
}

/// [`models`] (no SCD) with `t.grand`, a time-range child of `t.child` (plus `add`: an edit
/// gives it a version, and a table, of its own) that writes a row per interval, an empty one too.
fn with_grandchild(with_n: bool, add: i64) -> String {
    format!(
        r#"{}
define_model {{
  name = "t.grand", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(coalesce(sum(total), 0) + {add} AS BIGINT) AS total FROM " .. ref("t.child") .. " WHERE day >= @start AND day < @end",
}}
"#,
        models(with_n, false)
    )
}

#[test]
fn models_below_a_table_left_to_prod_wait_for_prods_rows_instead_of_computing_over_none() {
    // dev's `t.child` is left to prod (its table is prod's, over dev's own daily version): its
    // new day is not there until prod's run. `t.grand` below it, whether on prod's table too or
    // on one of its own, waits for it: computed now, over no rows, its day would be recorded
    // done and never recomputed.
    for own_grandchild in [false, true] {
        let mut p = prod_and_dev(&with_grandchild(false, 0));
        p.write("models/m.lua", &with_grandchild(true, if own_grandchild { 1000 } else { 0 }));
        p.apply("dev");
        p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
        p.now = "2026-01-04T01:00:00Z".into();
        let plan = p.plan("dev");
        assert_eq!(action(&plan, "t.grand")["intervals"], 0, "{plan:#}");
        let also = plan["alsoWrites"].as_array().unwrap_or_else(|| panic!("{plan:#}"));
        assert!(
            also.iter().any(|a| a["model"] == "t.grand" && a["note"].as_str().is_some_and(|n| n.contains("wait: `t.child` upstream is left to `prod`"))),
            "{plan:#}"
        );
        p.run(&["run", "dev"]).expect_code(0);
        assert_eq!(days(&p, "prod", "t.grand"), "01=1,02=2", "own grandchild {own_grandchild}: prod's table holds only prod's days");
        // prod's run computes its days; dev's next run computes its grandchild's from them.
        let dev_project = with_grandchild(true, if own_grandchild { 1000 } else { 0 });
        p.write("models/m.lua", &with_grandchild(false, 0));
        p.run(&["run", "prod"]).expect_code(0);
        p.write("models/m.lua", &dev_project);
        p.run(&["run", "dev"]).expect_code(0);
        let want = if own_grandchild { "01=1001,02=1002,03=1004" } else { "01=1,02=2,03=4" };
        assert_eq!(days(&p, "dev", "t.grand"), want, "own grandchild {own_grandchild}");
        assert_eq!(days(&p, "prod", "t.grand"), "01=1,02=2,03=4");
        let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
        let lag = |m: &str| status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == m)).cloned().unwrap_or_else(|| panic!("{status:#}"));
        assert_eq!(lag("t.child")["behind"], 0, "what dev serves is caught up: {status:#}");
        assert_eq!(lag("t.grand")["behind"], 0, "{status:#}");
    }
}

#[test]
fn a_view_or_embedded_parent_changed_outside_prod_keeps_dev_out_of_the_tables_prod_serves_below_it() {
    // dev edits the view (or embedded model) between the daily model and a time-range and a
    // unique-key child, declared non-breaking by the operator: the tables under it are the same,
    // its query is not. The children keep prod's tables, so dev writes nothing into them.
    for kind in ["view", "embedded"] {
        let project = |factor: i64| {
            format!(
                r#"
local raw = define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "integer" }} }} }}
define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, CAST(sum(v) AS BIGINT) AS total FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}}
define_model {{ name = "v.scaled", kind = kind.{kind}(), schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }}, query = "SELECT day, total * {factor} AS total FROM " .. ref("t.daily") }}
define_model {{
  name = "t.child", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref("v.scaled") .. " WHERE day >= @start AND day < @end",
}}
define_model {{ name = "u.latest", kind = kind.incremental_by_unique_key {{ key = "day" }}, schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }}, query = "SELECT day, total FROM " .. ref("v.scaled") }}
"#
            )
        };
        let mut p = prod_and_dev(&project(1));
        p.write("models/m.lua", &project(2));
        p.run(&["apply", "dev", "--yes", "--reclassify", "v.scaled=non-breaking"]).expect_code(0);
        p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
        p.now = "2026-01-04T01:00:00Z".into();
        p.run(&["run", "dev"]).expect_code(0);
        assert_eq!(days(&p, "prod", "t.child"), "01=1,02=2", "{kind}: prod's time-range table");
        assert_eq!(days(&p, "prod", "u.latest"), "01=1,02=2", "{kind}: prod's unique-key table");
        p.write("models/m.lua", &project(1));
        p.run(&["run", "prod"]).expect_code(0);
        assert_eq!((days(&p, "prod", "t.child"), days(&p, "prod", "u.latest")), ("01=1,02=2,03=4".to_string(), "01=1,02=2,03=4".to_string()), "{kind}");
    }
}

#[test]
fn two_environments_other_than_prod_sharing_a_table_leave_it_to_the_one_serving_its_older_version() {
    // `staging` and `dev` serve one version of each model; `dev` adds a column to the daily
    // model (non-breaking: a table of its own), so its child and history keep staging's tables
    // over other parents. No `prod`: `staging`, serving the older versions there, writes them.
    let mut p = staging_and_dev(&models(false, true));
    p.write("models/m.lua", &models(true, true));
    p.apply("dev");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4), (TIMESTAMP '2026-01-02 20:00', 100)");
    p.now = "2026-01-04T01:00:00Z".into();
    let plan = p.plan("dev");
    let also = plan["alsoWrites"].as_array().unwrap_or_else(|| panic!("{plan:#}"));
    let note = |m: &str| also.iter().find(|a| a["model"] == m).and_then(|a| a["note"].as_str()).unwrap_or_default().to_string();
    assert!(note("t.child").contains("not computed here: its table is also what `staging` serves"), "{plan:#}");
    assert!(note("s.hist").contains("not refreshed here: its table is also what `staging` serves"), "{plan:#}");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(days(&p, "staging", "t.child"), "01=1,02=2", "staging's table holds staging's days only");
    let history = |p: &Project| one(p, &format!("SELECT string_agg(CAST(total AS VARCHAR), ',' ORDER BY valid_from) FROM {}", env_view("staging", "s.hist")));
    assert_eq!(history(&p), "3", "staging's history untouched by dev");
    // staging's own run writes them, from staging's daily (the late row of the 2nd is not one
    // its done day reads again).
    p.write("models/m.lua", &models(false, true));
    p.run(&["run", "staging"]).expect_code(0);
    assert_eq!(days(&p, "staging", "t.child"), "01=1,02=2,03=4");
    assert_eq!(history(&p), "3,7");
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.child")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!((lag["leftTo"].as_str(), lag["behind"].as_i64()), (Some("staging"), Some(0)), "{status:#}");
}

#[test]
fn a_model_held_below_a_table_left_to_prod_recomputes_nothing_for_its_lookback_and_shows_as_waiting() {
    // `t.grand` (a table of its own in dev, with a lookback of 1) waits below `t.child`, left to
    // prod: its lookback of the held day is not recomputed at every run meanwhile, and `status`
    // says it waits on `t.child`, not that it is late.
    let with_lookback = |m: String| m.replace(r#"start = "2026-01-01", batch_size = 1 }"#, r#"start = "2026-01-01", batch_size = 1, lookback = 1 }"#);
    let mut p = prod_and_dev(&with_lookback(with_grandchild(false, 0)));
    p.write("models/m.lua", &with_lookback(with_grandchild(true, 1000)));
    p.apply("dev");
    p.now = "2026-01-04T01:00:00Z".into();
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.grand")["intervals"], 0, "{plan:#}");
    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert!(!ran["processed"].as_array().is_some_and(|m| m.iter().any(|m| m == "t.grand")), "{ran:#}");
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.grand")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!((lag["late"].as_bool(), lag["waitingOn"].as_str()), (Some(false), Some("t.child")), "{status:#}");
}

#[test]
fn a_start_moved_earlier_outside_prod_writes_nothing_before_prods_start_into_a_table_read_over_the_same_parents() {
    // `t.grand` reads `t.child`, on prod's table in dev too (the same parent table): its version
    // differs from prod's (its parent's does) but computes what prod's would, except before
    // prod's start, which prod never computes and its view would serve.
    let earlier = |m: String| m.replace(r#"start = "2026-01-01", batch_size = 1 }"#, r#"start = "2025-12-31", batch_size = 1 }"#);
    let p = prod_and_dev(&with_grandchild(false, 0));
    p.write("models/m.lua", &earlier(with_grandchild(true, 0)));
    p.apply("dev");
    assert_eq!(days(&p, "prod", "t.grand"), "01=1,02=2", "nothing before prod's start in prod's table");
}

/// `staging` and then `dev` applied from `models` at 01:00 on the 3rd (on the same versions).
fn staging_and_dev(models: &str) -> Project {
    applied_in(&["staging", "dev"], models)
}

#[test]
fn the_apply_creating_a_version_on_another_environments_table_writes_nothing_there() {
    // Days are due that `staging` has not computed when `dev` applies its non-breaking change:
    // `dev`'s new child version (no snapshot yet while planned) is the newest on the table, so
    // `staging` writes it; `dev`'s apply computes nothing there.
    let mut p = staging_and_dev(&models(false, false));
    p.now = "2026-01-05T01:00:00Z".into();
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.write("models/m.lua", &models(true, false));
    let plan = p.apply("dev");
    assert_eq!(action(&plan["plan"], "t.child")["intervals"], 0, "{plan:#}");
    assert_eq!(days(&p, "staging", "t.child"), "01=1,02=2", "staging's table holds staging's days only");
}

#[test]
fn an_invalidated_writer_leaves_the_table_to_the_environment_still_served_and_restate_follows_the_writer() {
    // `dev` serves the older version of the child's table (it applied first); `staging` changes
    // the daily model (non-breaking). `dev` writes the table until it is invalidated: then
    // `staging` does, and may restate it; `dev` may not while it writes it.
    let mut p = applied_in(&["dev", "staging"], &models(false, false));
    p.write("models/m.lua", &models(true, false));
    p.apply("staging");
    p.now = "2026-01-04T01:00:00Z".into();
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    let plan = p.plan("staging");
    let also = plan["alsoWrites"].as_array().cloned().unwrap_or_default();
    assert!(also.iter().any(|a| a["model"] == "t.child" && a["note"].as_str().is_some_and(|n| n.contains("what `dev` serves"))), "{plan:#}");
    let refused = p.run(&["restate", "staging", "--model", "t.child", "--from", "2026-01-01", "--to", "2026-01-02"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("efmesh restate dev"), "{}", refused.stderr);
    p.run(&["invalidate", "dev"]).expect_code(0);
    p.run(&["run", "staging"]).expect_code(0);
    assert_eq!(days(&p, "staging", "t.child"), "01=1,02=2,03=4", "staging writes the table once dev is on its way out");
    p.run(&["restate", "staging", "--model", "t.child", "--from", "2026-01-01", "--to", "2026-01-02"]).expect_code(0);
}

#[test]
fn a_refused_restatement_of_a_version_two_environments_outside_prod_share_names_neither_and_says_what_works() {
    // `staging` and `dev` serve the same versions, neither is prod: each one's restatement is
    // refused for the other's sake, so sending one to the other would loop. The hint says that
    // no environment can restate them alone, and names what can.
    let p = staging_and_dev(&models(false, false));
    // A late row for the 1st, which a restatement of the 1st should bring in.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 20:00', 10)");
    let restate = |env: &str, json: bool| {
        let mut args = vec!["restate", env, "--model", "t.daily", "--from", "2026-01-01", "--to", "2026-01-02"];
        if json {
            args.push("--json");
        }
        p.run(&args)
    };
    for (env, other) in [("dev", "staging"), ("staging", "dev")] {
        let r = restate(env, false);
        r.expect_code(1);
        assert!(r.stderr.contains(&format!("`t.daily` (also served by `{other}`)")), "{}", r.stderr);
        assert!(!r.stderr.contains(&format!("efmesh restate {other}")), "names an environment refused the same way: {}", r.stderr);
        assert!(r.stderr.contains("no environment can restate them alone"), "{}", r.stderr);
        assert!(r.stderr.contains(&format!("`{other}`'s own restatement is refused the same way")), "{}", r.stderr);
        assert!(r.stderr.contains(&format!("`efmesh invalidate {other}` if no longer needed")), "{}", r.stderr);
        // The other environment is indeed refused, naming this one.
        let theirs = restate(other, false);
        theirs.expect_code(1);
        assert!(theirs.stderr.contains(&format!("`t.daily` (also served by `{env}`)")), "{}", theirs.stderr);
        // `--json`: the hint is the error's own key, cut from the message.
        let v = restate(env, true).expect_code(1).json();
        let (message, hint) = (v["error"]["message"].as_str().unwrap_or_default(), v["error"]["hint"].as_str().unwrap_or_default());
        assert!(hint.starts_with("no environment can restate them alone") && hint.contains(&format!("`efmesh invalidate {other}`")), "{v:#}");
        assert!(message.contains("also served by") && !message.contains("hint:"), "{v:#}");
    }
    assert_eq!(days(&p, "dev", "t.daily"), "01=1,02=2", "nothing was cleared");
    // The way out named to dev, followed: staging is invalidated, dev's restatement is accepted,
    // and dev's run recomputes the 1st with the late row.
    p.run(&["invalidate", "staging"]).expect_code(0);
    restate("dev", false).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(days(&p, "dev", "t.daily"), "01=11,02=2", "the 1st recomputed");
}

#[test]
fn a_refused_restatement_shared_with_many_environments_names_three_and_counts_the_rest() {
    // Four environments outside `prod` serve dev's versions: each is refused the same way. The
    // hint says so once, naming three and counting the fourth, and the way out invalidates all
    // four (the refusal's message names every one); followed, dev's restatement is accepted.
    let sharers = ["qa1", "qa2", "qa3", "qa4"];
    let p = applied_in(&[&["dev"][..], &sharers[..]].concat(), &models(false, false));
    let restate = ["restate", "dev", "--model", "t.daily", "--from", "2026-01-01", "--to", "2026-01-02"];
    let v = p.run(&[&restate[..], &["--json"][..]].concat()).expect_code(1).json();
    let (message, hint) = (v["error"]["message"].as_str().unwrap_or_default(), v["error"]["hint"].as_str().unwrap_or_default());
    for other in sharers {
        assert!(message.contains(&format!("`t.daily` (also served by `{other}`)")), "{v:#}");
    }
    assert!(hint.starts_with("no environment can restate them alone"), "{v:#}");
    assert!(hint.contains("`qa1`, `qa2`, `qa3` and 1 more: each one's own restatement is refused the same way"), "{v:#}");
    assert_eq!(hint.matches("refused the same way").count(), 1, "{v:#}");
    assert!(!hint.contains("qa4"), "the fourth is counted, not named: {v:#}");
    assert!(hint.contains("`efmesh invalidate <env>` for each of the 4 environments other than `prod` the refusal names"), "{v:#}");
    assert!(!hint.contains("efmesh restate qa"), "{v:#}");
    // The way out named, followed: every one invalidated, dev's restatement is accepted.
    for other in sharers {
        p.run(&["invalidate", other]).expect_code(0);
    }
    p.run(&restate).expect_code(0);
}

#[test]
fn a_refused_restatement_names_no_environment_whose_bounds_leave_the_days_out() {
    // dev computed `t.daily` under an earlier `start`, then prod took the same version with its
    // own (a metadata change): the day before prod's start is in the shared table, outside
    // prod's bounds. prod's restatement of it would be accepted but clear nothing, so the hint
    // does not name prod.
    let earlier = |m: String| m.replacen(r#"start = "2026-01-01" }"#, r#"start = "2025-12-31" }"#, 1);
    let mut p = Project::new();
    landing(&p);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2025-12-31 10:00', 5)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &earlier(models(false, false)));
    p.apply("dev");
    p.write("models/m.lua", &models(false, false));
    p.apply("prod");
    assert_eq!(days(&p, "dev", "t.daily"), "31=5,01=1,02=2", "dev computed the day before prod's start");
    p.write("models/m.lua", &earlier(models(false, false)));
    let range = ["--model", "t.daily", "--from", "2025-12-31", "--to", "2026-01-01"];
    let r = p.run(&[&["restate", "dev"][..], &range[..]].concat());
    r.expect_code(1);
    assert!(r.stderr.contains("`t.daily` (also served by `prod`)"), "{}", r.stderr);
    assert!(!r.stderr.contains("efmesh restate prod"), "names prod, whose restatement recomputes nothing there: {}", r.stderr);
    assert!(r.stderr.contains("no environment can restate them alone") && r.stderr.contains("`prod`'s would not recompute these days"), "{}", r.stderr);
    // prod's restatement (from prod's project) indeed clears none of it.
    p.write("models/m.lua", &models(false, false));
    let v = p.run(&[&["restate", "prod"][..], &range[..], &["--dry-run", "--json"][..]].concat()).expect_code(0).json();
    let cleared: i64 = v["restated"].as_array().map(|r| r.iter().filter_map(|t| t["intervals"].as_i64()).sum()).unwrap_or_default();
    assert_eq!(cleared, 0, "{v:#}");
    assert_eq!(v["outsideBounds"][0]["model"], "t.daily", "{v:#}");
}

#[test]
fn an_invalidated_environment_writes_no_table_a_served_one_shares() {
    // `staging` serves the older version (the writer) and is invalidated: `dev` writes the
    // table from then on. A run of `staging` meanwhile (it is not dropped yet) computes nothing
    // there: two writers would each write rows from their own parents.
    let mut p = staging_and_dev(&models(false, false));
    p.write("models/m.lua", &models(true, false));
    p.apply("dev");
    p.run(&["invalidate", "staging"]).expect_code(0);
    p.now = "2026-01-04T01:00:00Z".into();
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(days(&p, "dev", "t.child"), "01=1,02=2,03=4", "dev writes the table now");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 20:00', 100)");
    p.now = "2026-01-05T01:00:00Z".into();
    p.write("models/m.lua", &models(false, false));
    let ran = p.run(&["run", "staging"]);
    ran.expect_code(0);
    assert!(ran.stderr.contains("not computed here: its table is also what `dev` serves"), "{}", ran.stderr);
    assert_eq!(days(&p, "dev", "t.child"), "01=1,02=2,03=4", "the invalidated staging wrote nothing into dev's table");
}

/// [`models`] with `u.days` (unique-key by day, over `t.daily`) and `t.below`, a daily time-range
/// model over it adding `add` (a query edit gives it a version of its own).
fn below_keyed(with_n: bool, add: i64) -> String {
    format!("{}{}", models(with_n, false), keyed_and_below(add))
}

/// `u.days` (unique-key by day, over `t.daily`) and `t.below`, a daily time-range model over it
/// plus `add`.
fn keyed_and_below(add: i64) -> String {
    format!(
        r#"
define_model {{
  name = "u.days", kind = kind.incremental_by_unique_key {{ key = "day" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref("t.daily"),
}}
define_model {{
  name = "t.below", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT CAST(@start AS TIMESTAMP) AS day, CAST(coalesce(sum(total), 0) + {add} AS BIGINT) AS total FROM " .. ref("u.days") .. " WHERE day >= @start AND day < @end",
}}
"#
    )
}

#[test]
fn models_below_a_unique_key_table_left_to_prod_wait_for_prods_refresh_instead_of_computing_over_stale_rows() {
    // dev's `u.days` keeps prod's table over dev's own `t.daily`: it is never refreshed in dev,
    // so it holds the rows of prod's last refresh (at 01:00 on the 3rd). `t.below`, on prod's
    // table too or on one of its own, waits for its days ending after that refresh: computed
    // now, over rows `u.days` lacks, its 3rd would be recorded done and never recomputed.
    for own_below in [false, true] {
        let add = if own_below { 1000 } else { 0 };
        let mut p = prod_and_dev(&below_keyed(false, 0));
        p.write("models/m.lua", &below_keyed(true, add));
        p.apply("dev");
        p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
        p.now = "2026-01-04T01:00:00Z".into();
        let plan = p.plan("dev");
        assert_eq!(action(&plan, "t.below")["intervals"], 0, "own {own_below}: {plan:#}");
        let also = plan["alsoWrites"].as_array().unwrap_or_else(|| panic!("{plan:#}"));
        let note = |m: &str| also.iter().find(|a| a["model"] == m).and_then(|a| a["note"].as_str()).unwrap_or_default().to_string();
        assert!(note("u.days").contains("not refreshed here: its table is also what `prod` serves"), "{plan:#}");
        assert!(
            note("t.below").contains("wait: `u.days` upstream is left to `prod` here")
                && note("t.below").contains("whose last refresh there holds rows up to 2026-01-03T01:00"),
            "{plan:#}"
        );
        p.run(&["run", "dev"]).expect_code(0);
        let before = if own_below { "01=1001,02=1002" } else { "01=1,02=2" };
        assert_eq!(days(&p, "dev", "t.below"), before, "own {own_below}: nothing computed over rows not there");
        let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
        let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.below")).cloned().unwrap_or_else(|| panic!("{status:#}"));
        assert_eq!((lag["late"].as_bool(), lag["waitingOn"].as_str()), (Some(false), Some("u.days")), "{status:#}");
        // prod's run refreshes `u.days` (and computes its own `t.below`); dev's next run computes
        // the 3rd from those rows.
        p.write("models/m.lua", &below_keyed(false, 0));
        p.run(&["run", "prod"]).expect_code(0);
        assert_eq!(days(&p, "prod", "t.below"), "01=1,02=2,03=4");
        p.write("models/m.lua", &below_keyed(true, add));
        p.run(&["run", "dev"]).expect_code(0);
        let after = if own_below { "01=1001,02=1002,03=1004" } else { "01=1,02=2,03=4" };
        assert_eq!(days(&p, "dev", "t.below"), after, "own {own_below}");
    }
}

/// The `landed` signal: an interval is ready once `landing.ready` has its day.
const LANDED: &str = r#"define_signal("landed", function(intervals, args, db)
  local ready = {}
  for i, iv in ipairs(intervals) do
    local rows = db.query(("SELECT count(*) FROM landing.ready WHERE d = DATE '%s'"):format(iv.start:sub(1, 10)))
    ready[i] = rows[1][1] ~= "0"
  end
  return ready
end)
"#;

/// `t.daily` (the `landed` signal: ready once `landing.ready` has the day; with a count `n` when
/// `with_n`), `u.days` unique-key over it, `t.below` daily over that plus `add`. No other
/// time-range table than `t.daily` and `t.below`.
fn keyed_below_signal(with_n: bool, add: i64) -> String {
    let (col, sel) = if with_n { (r#", { "n", "bigint" }"#, ", count(*) AS n") } else { ("", "") };
    format!(
        r#"
local raw = define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "integer" }} }} }}
define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }}, signals = {{ "landed" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }}{col} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, CAST(sum(v) AS BIGINT) AS total{sel} FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}}
{below}"#,
        below = keyed_and_below(add)
    )
}

#[test]
fn a_keyed_table_left_to_prod_counts_only_up_to_what_prods_refresh_read_and_no_memo_replays_it_refreshed() {
    let mut p = Project::new();
    landing(&p);
    p.execute_on_engine("CREATE TABLE landing.ready (d DATE); INSERT INTO landing.ready VALUES (DATE '2026-01-01'), (DATE '2026-01-02')");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("macros/signals.lua", LANDED);
    p.write("models/m.lua", &keyed_below_signal(false, 0));
    p.apply("prod");
    p.apply("dev");
    p.write("models/m.lua", &keyed_below_signal(true, 1000));
    p.apply("dev");
    let prod_keyed = |p: &Project| one(p, &format!("SELECT CAST(count(*) AS VARCHAR) FROM {}", env_view("prod", "u.days")));
    // Right after `apply dev`, with nothing else written, `run dev` a day later: the plan is not
    // a memo's (which would hold nothing): `u.days` is left to prod, `t.below`'s new day waits.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4); INSERT INTO landing.ready VALUES (DATE '2026-01-03')");
    p.now = "2026-01-04T01:00:00Z".into();
    let ran = p.run(&["run", "dev"]);
    ran.expect_code(0);
    assert!(ran.stderr.contains("not refreshed here") && ran.stderr.contains("u.days"), "{}", ran.stderr);
    assert_eq!(prod_keyed(&p), "2", "prod's table holds prod's refresh only");
    assert_eq!(days(&p, "dev", "t.below"), "01=1001,02=1002");
    // prod's run with the 4th not landed: its `t.daily` waits on the signal, `u.days` is
    // refreshed without the 4th — refreshed only up to the 4th, not up to 01:00 on the 5th.
    let prod_project = keyed_below_signal(false, 0);
    let dev_project = keyed_below_signal(true, 1000);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-04 10:00', 8)");
    p.now = "2026-01-05T01:00:00Z".into();
    p.write("models/m.lua", &prod_project);
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p, "prod", "t.below"), "01=1,02=2,03=4");
    // The 4th lands; dev's own `t.daily` computes it, but its `t.below` computes only the 3rd:
    // `u.days` holds nothing of the 4th yet.
    p.execute_on_engine("INSERT INTO landing.ready VALUES (DATE '2026-01-04')");
    p.now = "2026-01-05T01:30:00Z".into();
    p.write("models/m.lua", &dev_project);
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(days(&p, "dev", "t.below"), "01=1001,02=1002,03=1004", "the 4th waits for prod's next refresh");
    // prod's next run computes its 4th and refreshes `u.days` (its refresh was not counted up
    // to the tick, so a `cron` would not hold it back either); dev's then computes the 4th.
    p.now = "2026-01-05T02:00:00Z".into();
    p.write("models/m.lua", &prod_project);
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p, "prod", "t.below"), "01=1,02=2,03=4,04=8");
    p.write("models/m.lua", &dev_project);
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(days(&p, "dev", "t.below"), "01=1001,02=1002,03=1004,04=1008");
}

/// `t.daily` behind the `landed` signal (the 1st and 2nd landed), `u.days` unique-key over it on
/// a daily `cron`, `t.below` under that; applied to `prod` at 01:00 on the 3rd.
fn daily_keyed_below_a_signal() -> Project {
    let mut p = Project::new();
    landing(&p);
    p.execute_on_engine("CREATE TABLE landing.ready (d DATE); INSERT INTO landing.ready VALUES (DATE '2026-01-01'), (DATE '2026-01-02')");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("macros/signals.lua", LANDED);
    let cron =
        |m: String| m.replace(r#"kind.incremental_by_unique_key { key = "day" },"#, r#"kind.incremental_by_unique_key { key = "day" }, cron = "@daily","#);
    p.write("models/m.lua", &cron(keyed_below_signal(false, 0)));
    p.apply("prod");
    p
}

#[test]
fn status_says_a_cron_refresh_read_rows_complete_only_up_to_an_interval_held_above_it() {
    let mut p = daily_keyed_below_a_signal();
    // The 3rd's events arrive, not its signal: the daily refresh at the tick reads `t.daily`
    // without it.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let refresh = status["refreshes"].as_array().and_then(|r| r.iter().find(|r| r["model"] == "u.days")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(
        (refresh["refreshedFor"].as_str(), refresh["rowsUpTo"].as_str()),
        (Some("2026-01-04T00:00:00.000Z"), Some("2026-01-03T00:00:00.000Z")),
        "{status:#}"
    );
    let text = p.run(&["status", "prod"]).expect_code(0).stdout.clone();
    assert!(text.contains("over rows complete only up to 2026-01-03T00:00:00.000Z"), "{text}");
}

#[test]
fn a_cron_refresh_over_rows_held_above_it_is_refreshed_again_once_they_land_before_its_next_tick() {
    // `u.days` (daily cron) was refreshed at its tick while `t.daily`'s 3rd waited on its
    // signal. The 3rd lands before the next tick: the run computes it in `t.daily`, refreshes
    // `u.days` again (its rows lacked the 3rd), and only then `t.below`'s 3rd — never from rows
    // `u.days` lacks, recorded done for good.
    let mut p = daily_keyed_below_a_signal();
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p, "prod", "t.below"), "01=1,02=2", "the 3rd waits upstream");
    let processed = |p: &Project| {
        let ran = p.run(&["run", "prod", "--json"]).expect_code(0).json();
        ran["processed"].as_array().map(|a| a.iter().filter_map(|m| m.as_str().map(str::to_string)).collect::<Vec<_>>()).unwrap_or_else(|| panic!("{ran:#}"))
    };
    // Still held: a run before the tick does not refresh `u.days` again (nothing more to read),
    // nor does a replay at an earlier `now`, where the 3rd is not due yet (a refresh there would
    // record the rows complete, and the 3rd's landing would then go unnoticed).
    for now in ["2026-01-04T01:30:00Z", "2026-01-03T12:00:00Z"] {
        p.now = now.into();
        assert!(!processed(&p).contains(&"u.days".to_string()), "{now}");
    }
    p.execute_on_engine("INSERT INTO landing.ready VALUES (DATE '2026-01-03')");
    p.now = "2026-01-04T02:00:00Z".into();
    let plan = p.plan("prod");
    let note = plan["alsoWrites"].as_array().and_then(|a| a.iter().find(|w| w["model"] == "u.days")).map(|w| w["note"].to_string()).unwrap_or_default();
    assert!(note.contains("complete only up to 2026-01-03T00:00:00.000Z, and they hold more now"), "{plan:#}");
    assert_eq!(processed(&p), ["t.daily", "u.days", "t.below"]);
    assert_eq!(days(&p, "prod", "t.below"), "01=1,02=2,03=4");
    assert_eq!(days(&p, "prod", "u.days"), "01=1,02=2,03=4");
    // Complete now: the next run before the tick refreshes nothing.
    p.now = "2026-01-04T03:00:00Z".into();
    assert!(processed(&p).is_empty());
}

/// `dev` and `prod` serve the same version of `t.daily` (one table); `dev` alone applies a
/// `lookback` (metadata). A late row for an old day: `dev`'s run would rewrite that day in the
/// table `prod` serves under its own `lookback = 0` — it computes nothing there and serves what
/// `prod` computes; `prod` keeps its own rows.
#[test]
fn a_lookback_only_dev_declares_never_rewrites_the_version_prod_serves() {
    let with_lookback = |m: String| m.replacen(r#"start = "2026-01-01" }"#, r#"start = "2026-01-01", lookback = 2 }"#, 1);
    let mut p = prod_and_dev(&models(false, false));
    p.write("models/m.lua", &with_lookback(models(false, false)));
    p.apply("dev");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 20:00', 100), (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    let plan = p.plan("dev");
    let daily = action(&plan, "t.daily");
    assert_eq!(daily["intervals"], 0, "prod writes the version's table under its own settings: {plan:#}");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(days(&p, "prod", "t.daily"), "01=1,02=2", "dev's lookback rewrote nothing prod serves");
    // prod's own run computes the new day with prod's settings (no lookback): dev serves it.
    p.write("models/m.lua", &models(false, false));
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p, "prod", "t.daily"), "01=1,02=2,03=4");
    assert_eq!(days(&p, "dev", "t.daily"), "01=1,02=2,03=4");
}

/// An audit only `dev` adds refuses more than `prod`'s: what it lets through passes `prod`'s too,
/// so `dev` still computes the shared version's days (and its audit guards them); one of
/// `prod`'s audits `dev` drops would let rows in that `prod` refuses, so then `prod` writes.
#[test]
fn an_audit_dev_adds_keeps_it_computing_one_it_drops_leaves_the_table_to_prod() {
    let audited = |m: String, audit: &str| m.replacen(r#"start = "2026-01-01" },"#, &format!(r#"start = "2026-01-01" }}, audits = {{ {audit} }},"#), 1);
    let mut p = prod_and_dev(&models(false, false));
    p.write("models/m.lua", &audited(models(false, false), r#"audit.not_null("day")"#));
    p.apply("dev");
    p.now = "2026-01-04T01:00:00Z".into();
    assert_eq!(action(&p.plan("dev"), "t.daily")["intervals"], 1, "dev's stricter audits: dev computes");
    let mut q = prod_and_dev(&audited(models(false, false), r#"audit.not_null("day")"#));
    q.write("models/m.lua", &models(false, false));
    q.apply("dev");
    q.now = "2026-01-04T01:00:00Z".into();
    assert_eq!(action(&q.plan("dev"), "t.daily")["intervals"], 0, "prod's audit dropped in dev: prod writes");
}

#[test]
fn a_start_moved_earlier_outside_prod_onto_the_table_prod_serves_is_refused_and_the_plan_says_so() {
    // dev and prod serve one version of `t.daily` from the 1st; dev moves `start` a day earlier
    // (a metadata change: the same version, the same table): its backfill of the 31st would go
    // into the table prod serves, outside prod's own bounds.
    let mut p = Project::new();
    landing(&p);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2025-12-31 10:00', 7)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_models("", "2026-01-01"));
    p.apply("prod");
    p.apply("dev");
    p.write("models/m.lua", &daily_models("", "2025-12-31"));
    let planned = p.run(&["plan", "dev"]);
    planned.expect_code(0);
    assert!(
        planned.stdout.contains("apply refuses this plan:") && planned.stdout.contains("its new `start`/`end` would write 1 interval(s)"),
        "{}",
        planned.stdout
    );
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("t.daily") && r.stderr.contains("the table `prod` serves too"), "{}", r.stderr);
    let days = one(&p, &format!("SELECT CAST(count(*) AS VARCHAR) FROM {}", env_view("prod", "t.daily")));
    assert_eq!(days, "2", "prod serves its own two days only");
    // Applied to prod first, dev may follow.
    p.apply("prod");
    assert!(p.plan("dev").get("applyRefuses").is_none());
}
