//! A time-range model recomputes its done intervals that a time-range model upstream rewrites in
//! the same apply or run (SPEC §4, invariant 62): a parent's `lookback` recomputing late rows, a
//! parent's `start` moved earlier. Through a `view` between them too. A new version of a parent
//! (a non-breaking change, whose rows for the existing columns are the same) does not make its
//! children recompute what they hold. A run stopped after the parent's rewrite leaves the child's
//! intervals to compute. A parent version the janitor collected, built again under a child
//! version that stayed (an edit undone), makes that child recompute what it computed from the
//! old table.

use crate::common::*;
use serde_json::json;

/// `t.daily` sums `land.events` per day with a lookback of one day; `t.child` doubles it;
/// `t.v` is a view over `t.daily`, `t.grand` reads the view; `t.plain` reads the source directly
/// (nothing upstream rewrites its intervals).
const MODELS: &str = r#"
local src = define_model {
  name = "raw.events", kind = kind.external { table = "land.events" },
  schema = { { "day", "date" }, { "amount", "bigint" } },
}
local daily = define_model {
  name = "t.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", lookback = 1 },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, sum(amount) AS total FROM " .. ref(src) .. " WHERE day BETWEEN @start_date AND @end_date GROUP BY day",
}
define_model {
  name = "t.child",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "doubled", "bigint" } },
  query = "SELECT day, total * 2 AS doubled FROM " .. ref(daily) .. " WHERE day BETWEEN @start_date AND @end_date",
}
local v = define_model {
  name = "t.v", kind = kind.view(),
  schema = { { "day", "date" }, { "shifted", "bigint" } },
  query = "SELECT day, total + 1000 AS shifted FROM " .. ref(daily),
}
define_model {
  name = "t.grand",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "shifted", "bigint" } },
  query = "SELECT day, shifted FROM " .. ref(v) .. " WHERE day BETWEEN @start_date AND @end_date",
}
define_model {
  name = "t.plain",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, sum(amount) AS total FROM " .. ref(src) .. " WHERE day BETWEEN @start_date AND @end_date GROUP BY day",
}
"#;

/// The value of `column` for `day` in `model`, as `dev` serves it.
fn on(p: &Project, model: &str, column: &str, day: &str) -> String {
    let r = p.query(&format!("SELECT CAST({column} AS VARCHAR) FROM {} WHERE day = DATE '{day}'", env_view("dev", model)));
    r.first().and_then(|row| row[0].clone()).unwrap_or_else(|| format!("no row for {day} in {model}"))
}

fn with_source(p: &Project) {
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.events (day date, amount bigint)");
    p.execute_on_engine("INSERT INTO land.events SELECT DATE '2026-01-01' + CAST(i AS INTEGER), 1 FROM range(0, 10) AS r(i)");
}

#[test]
fn a_parents_lookback_recomputes_the_same_days_of_its_time_range_descendants() {
    let mut p = Project::new();
    p.write("models/m.lua", MODELS);
    with_source(&p);
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("dev");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-04"), "2");

    // A late row for 4 January; on the 6th, the parent computes the 5th and, by its lookback,
    // the 4th again: its descendants recompute the 4th with it.
    p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-04', 100)");
    p.now = "2026-01-06T01:00:00Z".into();
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.daily")["intervals"], 2, "{plan:#}");
    assert_eq!(action(&plan, "t.daily").get("recompute"), None, "its own lookback is not a recomputation from upstream: {plan:#}");
    for m in ["t.child", "t.grand"] {
        let a = action(&plan, m);
        assert_eq!((&a["change"], &a["intervals"]), (&json!("unchanged"), &json!(2)), "{m}: the 5th and the 4th: {plan:#}");
        assert_eq!(a["recompute"], json!({"intervals": 1, "because": ["t.daily"]}), "{m}: {plan:#}");
        assert_eq!(a["backfill"], json!([{"start": "2026-01-04T00:00:00.000Z", "end": "2026-01-06T00:00:00.000Z"}]), "{m}: {plan:#}");
    }
    assert_eq!(action(&plan, "t.plain")["intervals"], 1, "nothing upstream rewrites its days: {plan:#}");
    let run = p.run(&["plan", "dev"]);
    let text = &run.expect_code(0).stdout;
    assert!(text.contains("1 of them done, recomputed: `t.daily` rewrites them"), "{text}");

    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ran["intervals"], 2 + 2 + 2 + 1, "{ran:#}");
    assert_eq!(on(&p, "t.daily", "total", "2026-01-04"), "101");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-04"), "202", "the child follows its parent's late row");
    assert_eq!(on(&p, "t.grand", "shifted", "2026-01-04"), "1101", "through the view too");
    assert_eq!(on(&p, "t.plain", "total", "2026-01-04"), "1", "no lookback of its own, nothing upstream rewrote it");
    assert_eq!(p.rows(&env_view("dev", "t.child")).len(), 5, "a recomputed day replaces its rows");
    // Nothing is due after the run: the next plan recomputes nothing.
    let after = p.plan("dev");
    assert_eq!(after["hasChanges"], false, "{after:#}");
}

#[test]
fn a_parents_start_moved_earlier_recomputes_the_days_its_children_computed_without_it() {
    let mut p = Project::new();
    // The parent starts on the 3rd; its child (and the view's reader) from the 1st: their 1st
    // and 2nd are computed over no parent rows.
    let late_start = MODELS.replacen("start = \"2026-01-01\", lookback = 1", "start = \"2026-01-03\"", 1);
    assert_ne!(late_start, MODELS);
    p.write("models/m.lua", &late_start);
    with_source(&p);
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("dev");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-02"), "no row for 2026-01-02 in t.child");

    // `start` moved to the 1st: a metadata change; the parent backfills the 1st and 2nd, and the
    // days its descendants computed without them are computed again.
    p.write("models/m.lua", &late_start.replacen("start = \"2026-01-03\"", "start = \"2026-01-01\"", 1));
    let plan = p.plan("dev");
    let parent = action(&plan, "t.daily");
    assert_eq!((&parent["change"], &parent["build"], &parent["intervals"]), (&json!("metadata"), &json!(false), &json!(2)), "{plan:#}");
    for m in ["t.child", "t.grand"] {
        let a = action(&plan, m);
        assert_eq!(a["recompute"], json!({"intervals": 2, "because": ["t.daily"]}), "{m}: {plan:#}");
        assert_eq!(a["backfill"], json!([{"start": "2026-01-01T00:00:00.000Z", "end": "2026-01-03T00:00:00.000Z"}]), "{m}: {plan:#}");
    }
    p.apply("dev");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-02"), "2");
    assert_eq!(on(&p, "t.grand", "shifted", "2026-01-01"), "1001");
    assert_eq!(p.rows(&env_view("dev", "t.child")).len(), 4);
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

#[test]
fn a_new_version_of_a_parent_keeping_its_rows_recomputes_nothing_below() {
    let mut p = Project::new();
    p.write("models/m.lua", MODELS);
    with_source(&p);
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("dev");
    // A column added to the parent: non-breaking; the parent's new version is built over every
    // day, its rows for the existing columns the same, so the children keep what they hold.
    p.write("models/m.lua", &MODELS.replace("{ \"total\", \"bigint\" } },\n  query = \"SELECT day, sum(amount) AS total FROM \" .. ref(src) .. \" WHERE day BETWEEN @start_date AND @end_date GROUP BY day\",\n}\ndefine_model {\n  name = \"t.child\"",
        "{ \"total\", \"bigint\" }, { \"n\", \"bigint\" } },\n  query = \"SELECT day, sum(amount) AS total, count(*) AS n FROM \" .. ref(src) .. \" WHERE day BETWEEN @start_date AND @end_date GROUP BY day\",\n}\ndefine_model {\n  name = \"t.child\""));
    let plan = p.plan("dev");
    let parent = action(&plan, "t.daily");
    assert_eq!((&parent["change"], &parent["build"]), (&json!("non-breaking"), &json!(true)), "{plan:#}");
    for m in ["t.child", "t.grand"] {
        let a = action(&plan, m);
        assert_eq!((a.get("recompute"), &a["intervals"]), (None, &json!(0)), "{m}: {plan:#}");
    }
}

#[test]
fn a_run_stopped_after_the_parents_rewrite_leaves_the_childs_day_to_compute() {
    let mut p = Project::new();
    p.write("models/m.lua", MODELS);
    with_source(&p);
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("dev");
    p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-04', 100)");
    p.now = "2026-01-06T01:00:00Z".into();
    // The run stops (as under `kill -9`) right after the parent recomputed the 4th and 5th and
    // recorded them, before its children ran.
    let out = p.command(&["run", "dev", "--jobs", "1"]).env("EFMESH_FAULT", "after-build:t.daily").output().expect("spawn efmesh");
    assert!(!out.status.success(), "the fault hook aborts the run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at `after-build:t.daily`"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(on(&p, "t.daily", "total", "2026-01-04"), "101");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-04"), "2", "not recomputed yet");
    // The parent has nothing left to compute, yet the child's 4th is still to compute: the run
    // took it out of the ledger before writing anything (missing, as a restatement leaves it,
    // not failed).
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().expect("lag").iter().find(|l| l["model"] == "t.child").expect("t.child").clone();
    assert_eq!((&lag["failed"], &lag["behind"]), (&json!(0), &json!(2)), "{status:#}");
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.daily")["intervals"], 0, "{plan:#}");
    for m in ["t.child", "t.grand"] {
        let a = action(&plan, m);
        assert_eq!(a["backfill"], json!([{"start": "2026-01-04T00:00:00.000Z", "end": "2026-01-06T00:00:00.000Z"}]), "{m}: {plan:#}");
    }
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-04"), "202");
    assert_eq!(on(&p, "t.grand", "shifted", "2026-01-04"), "1101");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

#[test]
fn only_the_models_whose_rewrites_reach_an_interval_are_named_for_it() {
    let mut p = Project::new();
    // `t.base` (no lookback) feeds `t.daily` (lookback 1) beside the source: on the 6th `t.base`
    // adds only the 5th, `t.daily` rewrites the 4th; the child recomputes the 4th for
    // `t.daily` alone.
    let models = MODELS
        .replacen(
            "local daily = define_model {",
            r#"local base = define_model {
  name = "t.base",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "amount", "bigint" } },
  query = "SELECT day, amount FROM " .. ref(src) .. " WHERE day BETWEEN @start_date AND @end_date",
}
local daily = define_model {"#,
            1,
        )
        .replacen(
            "FROM \" .. ref(src) .. \" WHERE day BETWEEN @start_date AND @end_date GROUP BY day\",\n}\ndefine_model {\n  name = \"t.child\"",
            "FROM \" .. ref(base) .. \" WHERE day BETWEEN @start_date AND @end_date GROUP BY day\",\n}\ndefine_model {\n  name = \"t.child\"",
            1,
        );
    assert!(models.contains("ref(base)"), "{models}");
    p.write("models/m.lua", &models);
    with_source(&p);
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("dev");
    p.now = "2026-01-06T01:00:00Z".into();
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.base")["intervals"], 1, "{plan:#}");
    assert_eq!(action(&plan, "t.daily").get("recompute"), None, "the 5th of `t.base` is new to `t.daily` too: {plan:#}");
    assert_eq!(action(&plan, "t.child")["recompute"], json!({"intervals": 1, "because": ["t.daily"]}), "{plan:#}");
}

/// `t.daily` → `t.uk` (unique key on the day, no cron) → `t.wk` (time-range over `t.uk`).
const KEYED: &str = r#"
local src = define_model {
  name = "raw.events", kind = kind.external { table = "land.events" },
  schema = { { "day", "date" }, { "amount", "bigint" } },
}
local daily = define_model {
  name = "t.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, sum(amount) AS total FROM " .. ref(src) .. " WHERE day BETWEEN @start_date AND @end_date GROUP BY day",
}
local uk = define_model {
  name = "t.uk", kind = kind.incremental_by_unique_key { key = "day" },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, total FROM " .. ref(daily),
}
define_model {
  name = "t.wk",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, total FROM " .. ref(uk) .. " WHERE day BETWEEN @start_date AND @end_date",
}
"#;

#[test]
fn an_apply_backfilling_a_keyed_models_parent_refreshes_it_before_its_time_range_child() {
    let mut p = Project::new();
    p.write("models/m.lua", KEYED);
    with_source(&p);
    p.now = "2026-01-04T01:00:00Z".into();
    p.apply("prod");
    // A day later, with no edit, `apply` backfills the 4th of `t.daily`: the keyed model is
    // refreshed before `t.wk` computes its 4th from it (it was computed from the keyed model's
    // rows of the day before, and recorded done for good).
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("prod");
    let at = |m: &str| p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} WHERE day = DATE '2026-01-04'", env_view("prod", m)));
    assert_eq!(at("t.uk"), vec![vec![Some("1".to_string())]]);
    assert_eq!(at("t.wk"), vec![vec![Some("1".to_string())]], "the 4th of the time-range child");
}

#[test]
fn a_start_moved_earlier_in_dev_is_refused_while_prod_serves_the_same_table() {
    let mut p = Project::new();
    let late_start = MODELS.replacen("start = \"2026-01-01\", lookback = 1", "start = \"2026-01-03\"", 1);
    p.write("models/m.lua", &late_start);
    with_source(&p);
    p.now = "2026-01-05T01:00:00Z".into();
    p.apply("prod");
    p.apply("dev");
    let before = p.query("SELECT count(*) FROM t.daily");
    // In `dev` the parent starts two days earlier: a metadata change whose backfill would write
    // the 1st and 2nd into the table `prod` serves (its `start` there is the 3rd).
    p.write("models/m.lua", &late_start.replacen("start = \"2026-01-03\"", "start = \"2026-01-01\"", 1));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("into the table `prod` serves too"), "{}", run.stderr);
    assert!(run.stderr.contains("[2026-01-01T00:00:00.000Z, 2026-01-03T00:00:00.000Z)"), "{}", run.stderr);
    assert_eq!(p.query("SELECT count(*) FROM t.daily"), before, "prod serves what it served");
    // Applied to `prod` first, the edit reaches `dev` with nothing left to write.
    p.apply("prod");
    assert_eq!(p.query("SELECT count(*) FROM t.daily")[0][0].as_deref(), Some("4"));
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "t.daily")).len(), 4);
}

/// `t.dim` (unique key, refreshed whole from `land.events` by `run` at its cron's ticks, or at
/// every run without one) → `t.fact` (time-range over it) → `t.sum` (`full`).
fn dimension(cron: &str) -> String {
    format!(
        r#"
local src = define_model {{
  name = "raw.events", kind = kind.external {{ table = "land.events" }},
  schema = {{ {{ "day", "date" }}, {{ "amount", "bigint" }} }},
}}
local dim = define_model {{
  name = "t.dim", kind = kind.incremental_by_unique_key {{ key = "day" }},{cron}
  schema = {{ {{ "day", "date" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, sum(amount) AS total FROM " .. ref(src) .. " GROUP BY day",
}}
local fact = define_model {{
  name = "t.fact",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "date" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref(dim) .. " WHERE day BETWEEN @start_date AND @end_date",
}}
define_model {{
  name = "t.sum", kind = kind.full(),
  schema = {{ {{ "total", "bigint" }} }},
  query = "SELECT CAST(sum(total) AS BIGINT) AS total FROM " .. ref(fact),
}}
"#
    )
}

#[test]
fn an_apply_computing_intervals_below_a_keyed_model_refreshes_it_when_run_would() {
    for cron in ["", r#" cron = "0 0 * * *","#] {
        let mut p = Project::new();
        p.write("models/m.lua", &dimension(cron));
        p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.events (day date, amount bigint)");
        p.execute_on_engine("INSERT INTO land.events SELECT DATE '2026-01-01' + CAST(i AS INTEGER), 1 FROM range(0, 3) AS r(i)");
        p.now = "2026-01-04T01:00:00Z".into();
        p.apply("prod");
        // The 4th lands; a day later, with no edit and no run, `apply` computes the 4th of
        // `t.fact`: the keyed model (its cron ticked at midnight, or no cron) is refreshed first,
        // as `run` would, rather than the 4th being computed from its rows of the day before
        // and recorded done for good.
        p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-04', 5)");
        p.now = "2026-01-05T01:00:00Z".into();
        // The plan says so.
        let plan = p.plan("prod");
        let also = plan["alsoWrites"].as_array().unwrap_or_else(|| panic!("{plan:#}"));
        assert_eq!(also.len(), 2, "{plan:#}");
        assert_eq!(also[0]["model"], "t.dim");
        assert_eq!(also[1], json!({"model": "t.sum", "note": "rebuild: downstream of new intervals of t.fact"}));
        let note = also[0]["note"].as_str().unwrap();
        assert!(note.starts_with("refresh, as `run` would: a time-range model below it computes intervals here"), "{note}");
        assert!(note.ends_with(if cron.is_empty() { "it has no cron" } else { "its cron `0 0 * * *` ticked since its last refresh" }), "{note}");
        let text = p.run(&["plan", "prod"]).expect_code(0).stdout.clone();
        assert!(text.contains("refresh, as `run` would"), "{text}");
        p.apply("prod");
        let at = |m: &str| p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} WHERE day = DATE '2026-01-04'", env_view("prod", m)));
        assert_eq!(at("t.dim"), vec![vec![Some("5".to_string())]], "cron {cron:?}");
        assert_eq!(at("t.fact"), vec![vec![Some("5".to_string())]], "the 4th of the time-range model, cron {cron:?}");
        assert_eq!(p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {}", env_view("prod", "t.sum"))), vec![vec![Some("8".to_string())]]);
        // A promotion with nothing to compute refreshes nothing: `run` stays its job.
        p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-04', 1)");
        p.apply("prod");
        assert_eq!(at("t.dim"), vec![vec![Some("5".to_string())]], "cron {cron:?}");
    }
}

/// `t.daily` (lookback 1) → `t.times` (multiplies it by `mult`).
fn times(mult: u32) -> String {
    format!(
        r#"
local raw = define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "integer" }} }} }}
local daily = define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", lookback = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, CAST(sum(v) AS BIGINT) AS total FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}}
define_model {{
  name = "t.times", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total * {mult} AS total FROM " .. ref(daily) .. " WHERE day >= @start AND day < @end",
}}
"#
    )
}

#[test]
fn a_version_pointed_at_again_recomputes_the_intervals_a_parent_rewrote_since() {
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 10:00', 1), (TIMESTAMP '2026-01-02 10:00', 2)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &times(1));
    p.apply("dev");
    // Version ×2 computes the 1st and 2nd; dev goes back to ×1.
    p.write("models/m.lua", &times(2));
    p.apply("dev");
    p.write("models/m.lua", &times(1));
    p.apply("dev");
    // A late row for the 2nd: the daily model's lookback rewrites it, ×1 recomputes it; ×2,
    // served by nobody, keeps what it computed.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 20:00', 100), (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(0);
    // Back to ×2: its 2nd is computed again, from the rewritten daily.
    p.write("models/m.lua", &times(2));
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.times")["recompute"], json!({"intervals": 1, "because": ["t.daily"]}), "{plan:#}");
    p.apply("dev");
    let rows = p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} ORDER BY day", env_view("dev", "t.times")));
    assert_eq!(rows, vec![vec![Some("2".to_string())], vec![Some("204".to_string())], vec![Some("8".to_string())]]);
}

/// [`times`] without `t.times`.
fn daily_only() -> String {
    let all = times(1);
    let cut = all.find("define_model {\n  name = \"t.times\"").expect("t.times is defined");
    all[..cut].to_string()
}

#[test]
fn a_version_new_to_an_environment_recomputes_the_intervals_a_parent_rewrote_since() {
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 10:00', 1), (TIMESTAMP '2026-01-02 10:00', 2)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &daily_only());
    p.apply("prod");
    // `dev` adds ×2 over the daily model `prod` serves: it computes the 1st and 2nd.
    p.write("models/m.lua", &times(2));
    p.apply("dev");
    // A late row for the 2nd: `prod`'s run rewrites it in the shared daily table (its
    // lookback); ×2, which `prod` does not serve, is not reached.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 20:00', 100), (TIMESTAMP '2026-01-03 10:00', 4)");
    p.now = "2026-01-04T01:00:00Z".into();
    p.write("models/m.lua", &daily_only());
    p.run(&["run", "prod"]).expect_code(0);
    // `prod` gains ×2 (a first promotion of it), and `staging`, never applied, points at it:
    // both recompute the 2nd from the rewritten daily model.
    p.write("models/m.lua", &times(2));
    for env in ["prod", "staging"] {
        let plan = p.plan(env);
        assert_eq!(action(&plan, "t.times")["recompute"], json!({"intervals": 1, "because": ["t.daily"]}), "{env}: {plan:#}");
    }
    p.apply("staging");
    let want = vec![vec![Some("2".to_string())], vec![Some("204".to_string())], vec![Some("8".to_string())]];
    for env in ["staging", "dev"] {
        let rows = p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} ORDER BY day", env_view(env, "t.times")));
        assert_eq!(rows, want, "{env}");
    }
    // Recomputed once: `prod` now points at it as it is.
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "t.times")["recompute"], json!(null), "{plan:#}");
    p.apply("prod");
    let rows = p.query(&format!("SELECT CAST(total AS VARCHAR) FROM {} ORDER BY day", env_view("prod", "t.times")));
    assert_eq!(rows, want);
}

#[test]
fn promoting_a_child_over_a_parents_non_breaking_new_version_recomputes_nothing() {
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 10:00', 1), (TIMESTAMP '2026-01-02 10:00', 2)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &times(2));
    p.apply("prod");
    p.apply("dev");
    // `dev` adds a column to the daily model: a new table, written after ×2's days, whose
    // rows for the existing columns are the same; ×2 keeps its table and days.
    let widened = times(2).replace("CAST(sum(v) AS BIGINT) AS total FROM", "CAST(sum(v) AS BIGINT) AS total, count(*) AS n FROM").replacen(
        r#"{ "total", "bigint" } },"#,
        r#"{ "total", "bigint" }, { "n", "bigint" } },"#,
        1,
    );
    assert_ne!(widened, times(2));
    p.write("models/m.lua", &widened);
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "t.daily")["change"], json!("non-breaking"), "{plan:#}");
    p.apply("dev");
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "t.times")["recompute"], json!(null), "{plan:#}");
    assert_eq!(action(&plan, "t.times")["intervals"], json!(0), "{plan:#}");
}

/// `t.daily` sums `landing.events` per day (with a count `n` too when `wide`: a non-breaking
/// edit); `t.copy` (time-range), `t.whole` (`full`) and `t.seen` (`view`) read it as it is.
fn daily_and_copies(wide: bool) -> String {
    let (column, select) = if wide { (r#", { "n", "bigint" }"#, ", count(*) AS n") } else { ("", "") };
    format!(
        r#"
local raw = define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "integer" }} }} }}
local daily = define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }}{column} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, CAST(sum(v) AS BIGINT) AS total{select} FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}}
define_model {{
  name = "t.copy", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref(daily) .. " WHERE day >= @start AND day < @end",
}}
define_model {{
  name = "t.whole", kind = kind.full(),
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref(daily),
}}
define_model {{
  name = "t.seen", kind = kind.view(),
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
  query = "SELECT day, total FROM " .. ref(daily),
}}
"#
    )
}

/// A project serving [`daily_and_copies`] in `dev` over three days of events, at the 4th.
fn daily_and_copies_in_dev() -> Project {
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine(
        "INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 10:00', 10), (TIMESTAMP '2026-01-02 10:00', 20), (TIMESTAMP '2026-01-03 10:00', 30)",
    );
    p.now = "2026-01-04T00:00:00Z".into();
    p.write("models/m.lua", &daily_and_copies(false));
    p.apply("dev");
    p
}

#[test]
fn a_parents_non_breaking_new_version_keeps_the_childs_table_and_recomputes_nothing() {
    let p = daily_and_copies_in_dev();
    let first = action(&p.plan("prod"), "t.copy")["fingerprint"].clone();
    // A column added to the parent: its new version is built in a new table, taken to hold the
    // same rows for the existing columns; the child's new version reuses its table and days.
    p.write("models/m.lua", &daily_and_copies(true));
    let plan = p.plan("dev");
    let parent = action(&plan, "t.daily");
    assert_eq!((&parent["change"], &parent["build"]), (&json!("non-breaking"), &json!(true)), "{plan:#}");
    let copy = action(&plan, "t.copy");
    assert_eq!((&copy["change"], &copy["build"], &copy["reusedFrom"]), (&json!("indirect"), &json!(false), &first), "{plan:#}");
    assert_eq!((copy.get("recompute"), &copy["intervals"]), (None, &json!(0)), "{plan:#}");
    let before = p.rows(&env_view("dev", "t.copy"));
    assert_eq!(before.len(), 3, "{before:?}");
    p.apply("dev");
    // The parent's first version, served by nobody, is collected; the child's days stay as
    // they are: the same days, the same totals.
    p.run(&["janitor", "--ttl", "0"]).expect_code(0);
    let after = p.plan("dev");
    assert_eq!(after["hasChanges"], false, "{after:#}");
    assert_eq!(p.rows(&env_view("dev", "t.copy")), before);
}

#[test]
fn a_parent_rebuilt_after_the_janitor_collected_it_recomputes_the_existing_child_over_it() {
    let p = daily_and_copies_in_dev();
    // A non-breaking edit of the parent (the child reuses its table: its first version stays),
    // the parent's first version collected, a late row for the 2nd, the edit undone: the
    // parent's first version is built again from the events as they are now, and the child's
    // first version, which exists, computed its days from the parent's old table.
    p.write("models/m.lua", &daily_and_copies(true));
    p.apply("dev");
    p.run(&["janitor", "--ttl", "0"]).expect_code(0);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 12:00', 5)");
    p.write("models/m.lua", &daily_and_copies(false));
    let plan = p.plan("dev");
    let parent = action(&plan, "t.daily");
    assert_eq!((&parent["build"], &parent["intervals"]), (&json!(true), &json!(3)), "{plan:#}");
    let copy = action(&plan, "t.copy");
    assert_eq!((&copy["change"], &copy["build"], copy.get("reusedFrom")), (&json!("indirect"), &json!(false), None), "{plan:#}");
    assert_eq!(copy["recompute"], json!({"intervals": 3, "because": ["t.daily"]}), "{plan:#}");
    assert_eq!(copy["intervals"], 3, "{plan:#}");
    let why = copy["explain"]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("exists already") && why.contains("pointed at, not built") && !why.contains("rebuilt"), "not built: {plan:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("3 of them done, recomputed: `t.daily` rewrites them"), "{text}");

    p.apply("dev");
    let daily = p.rows(&env_view("dev", "t.daily"));
    assert!(daily.iter().any(|r| r[1].as_deref() == Some("25")), "the late row is in the parent: {daily:?}");
    for m in ["t.copy", "t.whole", "t.seen"] {
        assert_eq!(p.rows(&env_view("dev", m)), daily, "{m} serves the parent's rows");
    }
    let after = p.plan("dev");
    assert_eq!(after["hasChanges"], false, "{after:#}");
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

/// [`daily_and_copies`] with the parent's total doubled: a breaking edit.
fn daily_doubled() -> String {
    let doubled = daily_and_copies(false).replace("CAST(sum(v) AS BIGINT)", "CAST(sum(v) * 2 AS BIGINT)");
    assert_ne!(doubled, daily_and_copies(false), "the edit applies");
    doubled
}

/// A child version `dev` built over a breaking parent edit, promoted to `prod` for the first
/// time: `prod` never served it, so its why says it exists already (built for another
/// environment) and is pointed at, not that it is pointed at "again".
#[test]
fn a_first_promotion_of_a_childs_version_says_it_is_pointed_at_not_again() {
    let p = daily_and_copies_in_dev();
    p.apply("prod");
    p.write("models/m.lua", &daily_doubled());
    p.apply("dev");
    let plan = p.plan("prod");
    let copy = action(&plan, "t.copy");
    assert_eq!((&copy["change"], &copy["build"]), (&json!("indirect"), &json!(false)), "{plan:#}");
    let why = copy["explain"]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("one that exists already (built before, here or for another environment): pointed at, not built"), "{plan:#}");
    assert!(!why.contains("again"), "prod never served this version: {plan:#}");
}

/// `prod` takes a non-breaking edit of the parent (its child's new version reuses the table),
/// the parent's first version is collected, a late row arrives and `dev` undoes the edit: `dev`
/// points at the child's first version, whose table `prod` writes, over the parent rebuilt
/// from the events as they are now. `dev` recomputes none of the child's days there (they
/// would change what `prod` serves) and its plan says so, counting them.
#[test]
fn stale_days_of_a_child_whose_table_prod_writes_are_left_to_prod_and_said() {
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine(
        "INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 10:00', 10), (TIMESTAMP '2026-01-02 10:00', 20), (TIMESTAMP '2026-01-03 10:00', 30)",
    );
    p.now = "2026-01-04T00:00:00Z".into();
    p.write("models/m.lua", &daily_and_copies(false));
    p.apply("prod");
    p.write("models/m.lua", &daily_and_copies(true));
    p.apply("prod");
    let served = p.rows(&env_view("prod", "t.copy"));
    p.run(&["janitor", "--ttl", "0"]).expect_code(0);
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-02 12:00', 5)");
    p.write("models/m.lua", &daily_and_copies(false));
    let plan = p.plan("dev");
    let parent = action(&plan, "t.daily");
    assert_eq!((&parent["build"], &parent["intervals"]), (&json!(true), &json!(3)), "{plan:#}");
    let copy = action(&plan, "t.copy");
    assert_eq!((copy.get("recompute"), &copy["intervals"]), (None, &json!(0)), "left to prod: {plan:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("3 interval(s) not computed here: its table is also what `prod` serves"), "{text}");
    assert!(text.contains("; 3 of them done here, over rows a model upstream has rewritten since"), "{text}");

    p.apply("dev");
    // `prod` serves what it served; `dev` serves `prod`'s rows for the child, as said.
    assert_eq!(p.rows(&env_view("prod", "t.copy")), served);
    assert_eq!(p.rows(&env_view("dev", "t.copy")), served);
}
