//! `auto_restatement_intervals = N` on a time-range model: every `efmesh run` that computes the
//! model's newest due interval also recomputes the N done intervals before it, and the same
//! range of its time-range descendants, so late-arriving data is picked up without a lookback
//! on every batch. Older intervals stay as they were; a run with nothing due restates nothing;
//! a model without the option never restates; the option is metadata (no rebuild).

use crate::common::*;
use serde_json::json;

/// `t.daily` (auto-restating its last 2 intervals) and `t.plain` (the same query, without the
/// option) sum `land.events` per day; `t.child` doubles `t.daily`.
const MODELS: &str = r#"
local src = define_model {
  name = "raw.events", kind = kind.external { table = "land.events" },
  schema = { { "day", "date" }, { "amount", "bigint" } },
}
local daily = define_model {
  name = "t.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", auto_restatement_intervals = 2 },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, sum(amount) AS total FROM " .. ref(src) .. " WHERE day BETWEEN @start_date AND @end_date GROUP BY day",
}
define_model {
  name = "t.plain",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT day, sum(amount) AS total FROM " .. ref(src) .. " WHERE day BETWEEN @start_date AND @end_date GROUP BY day",
}
define_model {
  name = "t.child",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "doubled", "bigint" } },
  query = "SELECT day, total * 2 AS doubled FROM " .. ref(daily) .. " WHERE day BETWEEN @start_date AND @end_date",
}
"#;

/// The value of `column` for `day` in `model`, as `env` serves it.
fn on(p: &Project, model: &str, column: &str, day: &str) -> String {
    let r = p.query(&format!("SELECT CAST({column} AS VARCHAR) FROM {} WHERE day = DATE '{day}'", env_view("dev", model)));
    r.first().and_then(|row| row[0].clone()).unwrap_or_else(|| format!("no row for {day} in {model}"))
}

#[test]
fn a_run_restates_the_last_n_intervals_and_their_descendants_and_nothing_older() {
    let mut p = Project::new();
    p.write("models/m.lua", MODELS);
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.events (day date, amount bigint)");
    p.execute_on_engine("INSERT INTO land.events SELECT DATE '2026-01-01' + CAST(i AS INTEGER), 1 FROM range(0, 10) AS r(i)");
    p.now = "2026-01-05T01:00:00Z".into();
    // `apply` builds 1-4 January and never restates.
    let applied = p.apply("dev");
    assert_eq!(applied.get("autoRestated"), None, "{applied:#}");
    assert_eq!(on(&p, "t.daily", "total", "2026-01-04"), "1");

    // Late data for 2 and 4 January arrives in the source.
    p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-02', 100), (DATE '2026-01-04', 100)");
    p.now = "2026-01-06T01:00:00Z".into();
    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ran["outcome"], "processed", "{ran:#}");
    // 5 January is new; 3 and 4 January (N = 2 before it) are recomputed, for the child too.
    assert_eq!(
        ran["autoRestated"],
        json!([
            {"model": "t.daily", "fromModel": "t.daily", "from": "2026-01-03T00:00:00.000Z", "to": "2026-01-05T00:00:00.000Z", "intervals": 2},
            {"model": "t.child", "fromModel": "t.daily", "from": "2026-01-03T00:00:00.000Z", "to": "2026-01-05T00:00:00.000Z", "intervals": 2},
        ]),
        "{ran:#}"
    );
    assert_eq!(ran["intervals"], 3 + 3 + 1, "daily and child: 5 January and 2 restated; plain: 5 January only: {ran:#}");
    // Yesterday is fixed, in the model and its child, without a lookback.
    assert_eq!(on(&p, "t.daily", "total", "2026-01-04"), "101");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-04"), "202");
    assert_eq!(on(&p, "t.daily", "total", "2026-01-05"), "1");
    // 2 January is older than N intervals: it stays as it was.
    assert_eq!(on(&p, "t.daily", "total", "2026-01-02"), "1");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-02"), "2");
    // A model without the option does not restate.
    assert_eq!(on(&p, "t.plain", "total", "2026-01-04"), "1");
    assert_eq!(p.rows(&env_view("dev", "t.daily")).len(), 5, "a restated interval replaces its rows");

    // Later the same day nothing is due: a run restates nothing, even with more late data.
    p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-05', 100)");
    let again = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!((again["outcome"].as_str(), &again["autoRestated"]), (Some("nothing-due"), &json!([])), "{again:#}");
    assert_eq!(on(&p, "t.daily", "total", "2026-01-05"), "1");

    // The option is metadata: changing it rebuilds nothing.
    p.write("models/m.lua", &MODELS.replace("auto_restatement_intervals = 2", "auto_restatement_intervals = 3"));
    let plan = p.plan("dev");
    let a = action(&plan, "t.daily");
    assert_eq!((a["change"].as_str(), &a["build"]), (Some("metadata"), &json!(false)), "{plan:#}");
}

#[test]
fn load_errors_for_auto_restatement_name_the_option() {
    let p = Project::new();
    p.write("models/m.lua", &MODELS.replace("auto_restatement_intervals = 2", "auto_restatement_intervals = -1"));
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("`auto_restatement_intervals` of kind `incremental_by_time_range` must be a non-negative integer"), "{out}");
    assert!(out.contains("models/m.lua:"), "{out}");
}

#[test]
fn with_a_cron_a_run_restates_only_once_the_cron_has_ticked() {
    let mut p = Project::new();
    let text = MODELS.replace("auto_restatement_intervals = 2 },\n", "auto_restatement_intervals = 1 },\n  cron = \"0 6 * * *\",\n");
    assert!(text.contains("cron = \"0 6 * * *\""));
    p.write("models/m.lua", &text);
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.events (day date, amount bigint)");
    p.execute_on_engine("INSERT INTO land.events SELECT DATE '2026-01-01' + CAST(i AS INTEGER), 1 FROM range(0, 10) AS r(i)");
    p.now = "2026-01-05T07:00:00Z".into();
    p.apply("dev");
    p.execute_on_engine("INSERT INTO land.events VALUES (DATE '2026-01-04', 100)");
    // 01:00: the cron has not ticked since 4 January was computed: nothing due, nothing restated.
    p.now = "2026-01-06T01:00:00Z".into();
    let early = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(early["autoRestated"], json!([]), "{early:#}");
    assert_eq!(on(&p, "t.daily", "total", "2026-01-04"), "1");
    // 07:00: the 06:00 tick made 5 January due; 4 January (N = 1) is restated with it.
    p.now = "2026-01-06T07:00:00Z".into();
    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    let restated: Vec<&str> = ran["autoRestated"].as_array().unwrap().iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert_eq!(restated, ["t.daily", "t.child"], "{ran:#}");
    assert_eq!(ran["autoRestated"][0]["from"], "2026-01-04T00:00:00.000Z");
    assert_eq!(on(&p, "t.daily", "total", "2026-01-04"), "101");
    assert_eq!(on(&p, "t.child", "doubled", "2026-01-04"), "202");
}
