//! Per-model schedules (issue #16 part 3): finer and coarser grains (`5m`, `15m`, `week`,
//! `month`), a model's `cron` deciding which intervals are due, `run` computing only those,
//! `status` counting a model late only when a due interval is missing, a cron change being a
//! metadata change, the load errors of a bad cron, and `full`, unique-key, partition and SCD
//! type 2 models refreshed by `run` only at their cron's ticks.

use crate::common::{EngineBackend, Project, action, env_view};
use efmesh::state::StateStore;
use serde_json::Value;
use std::collections::BTreeSet;

/// The done interval starts (ISO) of `model`'s version served by `env`, read from the ledger.
fn done(p: &Project, env: &str, model: &str) -> BTreeSet<String> {
    let s = p.state();
    let fp = s.env_pointers(env).expect("pointers").get(model).cloned().unwrap_or_else(|| panic!("`{model}` not served by `{env}`"));
    s.done_intervals(model, &fp).expect("ledger").into_iter().map(efmesh::core::interval::to_iso).collect()
}

fn iso(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| efmesh::core::interval::to_iso(efmesh::core::interval::parse_instant(s).unwrap())).collect()
}

/// `run <env> --json` at `now`, which must succeed: (outcome, processed models, intervals).
fn run_at(p: &mut Project, env: &str, now: &str) -> (String, Vec<String>, u64) {
    p.now = now.to_string();
    let v = p.run(&["run", env, "--json"]).expect_code(0).json();
    let processed = v["processed"].as_array().expect("processed").iter().map(|x| x.as_str().unwrap().to_string()).collect();
    (v["outcome"].as_str().unwrap().to_string(), processed, v["intervals"].as_u64().unwrap_or(0))
}

fn count(p: &Project, env: &str, model: &str) -> usize {
    p.rows(&env_view(env, model)).len()
}

const QUARTERS: &str = r#"define_model {
  name = "s.quarter",
  kind = kind.incremental_by_time_range { time_column = "t", start = "2026-02-10T09:00:00Z", grain = "15m" },
  cron = "*/15 * * * *",
  schema = { { "t", "timestamp" }, { "n", "integer" } },
  query = "SELECT range AS t, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 15 MINUTE)",
}
define_model {
  name = "s.five",
  kind = kind.incremental_by_time_range { time_column = "t", start = "2026-02-10T09:00:00Z", grain = "5m" },
  cron = "*/15 * * * *",
  schema = { { "t", "timestamp" }, { "n", "integer" } },
  query = "SELECT range AS t, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 5 MINUTE)",
}
"#;

#[test]
fn a_quarter_hour_model_runs_only_its_due_quarters() {
    let mut p = Project::new();
    p.write("models/q.lua", QUARTERS);
    p.now = "2026-02-10T10:07:00Z".into();
    p.apply("dev");
    // At 10:07 the cron last ticked at 10:00: the quarters 09:00-10:00 are done, 10:00-10:15 is not.
    let first = iso(&["2026-02-10T09:00:00Z", "2026-02-10T09:15:00Z", "2026-02-10T09:30:00Z", "2026-02-10T09:45:00Z"]);
    assert_eq!(done(&p, "dev", "s.quarter"), first);
    assert_eq!(count(&p, "dev", "s.quarter"), 4);
    // The 5-minute model on a 15-minute cron: 10:00-10:05 has ended but is not due before 10:15.
    assert_eq!(done(&p, "dev", "s.five").len(), 12);
    assert!(!done(&p, "dev", "s.five").contains(&iso(&["2026-02-10T10:00:00Z"]).pop_first().unwrap()));

    let (outcome, processed, intervals) = run_at(&mut p, "dev", "2026-02-10T10:07:00Z");
    assert_eq!((outcome.as_str(), processed.len(), intervals), ("nothing-due", 0, 0));
    assert_eq!(done(&p, "dev", "s.quarter"), first);

    // At 10:16 the 10:00 quarter is due: exactly it is computed, nothing else.
    let (outcome, processed, intervals) = run_at(&mut p, "dev", "2026-02-10T10:16:00Z");
    assert_eq!(outcome, "processed");
    assert_eq!(processed, vec!["s.five".to_string(), "s.quarter".to_string()]);
    assert_eq!(intervals, 1 + 3, "one quarter and three five-minute intervals");
    let mut second = first.clone();
    second.extend(iso(&["2026-02-10T10:00:00Z"]));
    assert_eq!(done(&p, "dev", "s.quarter"), second);
    assert_eq!(count(&p, "dev", "s.quarter"), 5);
    assert_eq!(done(&p, "dev", "s.five").len(), 15);
    assert_eq!(count(&p, "dev", "s.five"), 15);

    // Until the next tick (10:30) nothing is due, though 10:15-10:20 ended for the 5m grain.
    let (outcome, _, intervals) = run_at(&mut p, "dev", "2026-02-10T10:29:59Z");
    assert_eq!((outcome.as_str(), intervals), ("nothing-due", 0));
    assert_eq!(done(&p, "dev", "s.quarter"), second);
    let (_, processed, intervals) = run_at(&mut p, "dev", "2026-02-10T10:30:00Z");
    assert_eq!((processed.len(), intervals), (2, 1 + 3));
    assert_eq!(count(&p, "dev", "s.quarter"), 6);
}

const DAILY_AND_HOURLY: &str = r#"define_model {
  name = "s.daily",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-02-08", grain = "day" },
  cron = "0 6 * * *",
  schema = { { "d", "timestamp" }, { "n", "integer" } },
  query = "SELECT range AS d, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 DAY)",
}
define_model {
  name = "s.hourly",
  kind = kind.incremental_by_time_range { time_column = "h", start = "2026-02-10", grain = "hour" },
  schema = { { "h", "timestamp" }, { "n", "integer" } },
  query = "SELECT range AS h, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 HOUR)",
}
"#;

fn lag<'a>(v: &'a Value, model: &str) -> &'a Value {
    v["lag"].as_array().expect("lag").iter().find(|l| l["model"] == model).unwrap_or_else(|| panic!("no lag of `{model}` in {v:#}"))
}

#[test]
fn a_daily_cron_model_is_left_alone_while_only_the_hourly_one_is_due() {
    let mut p = Project::new();
    p.write("models/dh.lua", DAILY_AND_HOURLY);
    p.now = "2026-02-10T07:00:00Z".into();
    p.apply("dev");
    // The daily cron ticked at 06:00 on the 10th: the 8th and 9th are done.
    let days = iso(&["2026-02-08", "2026-02-09"]);
    assert_eq!(done(&p, "dev", "s.daily"), days);
    assert_eq!(done(&p, "dev", "s.hourly").len(), 7);

    // The next night at 03:00: 20 hours are due, the 10th is not (its tick is at 06:00).
    p.now = "2026-02-11T03:00:00Z".into();
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(lag(&status, "s.hourly")["behind"], 20, "{status:#}");
    assert_eq!(lag(&status, "s.hourly")["late"], true);
    assert_eq!(lag(&status, "s.daily")["behind"], 0, "not late: no due interval is missing");
    assert_eq!(lag(&status, "s.daily")["late"], false);
    assert_eq!(lag(&status, "s.daily")["cron"], "0 6 * * *");
    assert_eq!(lag(&status, "s.daily")["nextDueAt"], "2026-02-11T06:00:00.000Z");
    let text = p.run(&["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("✓ s.daily  caught up to 2026-02-10T00:00:00.000Z (cron `0 6 * * *`, next due 2026-02-11T06:00:00.000Z)"), "{text}");
    assert!(text.contains("s.hourly  behind by 20 hour interval(s)"), "{text}");

    let (outcome, processed, intervals) = run_at(&mut p, "dev", "2026-02-11T03:00:00Z");
    assert_eq!(outcome, "processed");
    assert_eq!(processed, vec!["s.hourly".to_string()], "only the hourly model was due");
    assert_eq!(intervals, 20);
    assert_eq!(done(&p, "dev", "s.daily"), days, "the daily model is untouched");
    assert_eq!(count(&p, "dev", "s.daily"), 2);

    // After its tick, the daily model is late until a run computes the 10th.
    p.now = "2026-02-11T06:30:00Z".into();
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!((lag(&status, "s.daily")["behind"].as_i64(), lag(&status, "s.daily")["late"].as_bool()), (Some(1), Some(true)), "{status:#}");
    let (_, processed, intervals) = run_at(&mut p, "dev", "2026-02-11T06:30:00Z");
    assert_eq!(processed, vec!["s.daily".to_string(), "s.hourly".to_string()]);
    assert_eq!(intervals, 1 + 3);
    assert_eq!(done(&p, "dev", "s.daily"), iso(&["2026-02-08", "2026-02-09", "2026-02-10"]));
}

#[test]
fn week_and_month_grains_build_calendar_intervals() {
    let p = Project::new();
    p.write(
        "models/wm.lua",
        r#"define_model {
  name = "s.weekly",
  kind = kind.incremental_by_time_range { time_column = "w", start = "2026-01-01", grain = "week", batch_size = 2 },
  schema = { { "w", "timestamp" }, { "days", "bigint" } },
  query = "SELECT CAST(@start AS TIMESTAMP) AS w, CAST(date_diff('day', CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP)) AS BIGINT) AS days",
}
define_model {
  name = "s.monthly",
  kind = kind.incremental_by_time_range { time_column = "m", start = "2025-11-15", grain = "month", batch_size = 1 },
  cron = "@monthly",
  schema = { { "m", "timestamp" }, { "days", "bigint" } },
  query = "SELECT CAST(@start AS TIMESTAMP) AS m, CAST(date_diff('day', CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP)) AS BIGINT) AS days",
}
"#,
    );
    // NOW is 2026-02-10 (a Tuesday).
    p.apply("dev");
    // ISO weeks from Monday 2025-12-29 to the last finished one (2026-02-02 .. 2026-02-09).
    assert_eq!(done(&p, "dev", "s.weekly"), iso(&["2025-12-29", "2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-02-02"]));
    // One row per batch of two weeks, each batch 14 days long.
    let weeks = p.query(&format!("SELECT CAST(w AS VARCHAR), days FROM {} ORDER BY w", env_view("dev", "s.weekly")));
    let weeks: Vec<(String, String)> = weeks.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap())).collect();
    assert_eq!(
        weeks,
        vec![("2025-12-29 00:00:00".into(), "14".into()), ("2026-01-12 00:00:00".into(), "14".into()), ("2026-01-26 00:00:00".into(), "14".into())]
    );
    // Calendar months: November (30 days), December (31), January (31); February has not ended.
    assert_eq!(done(&p, "dev", "s.monthly"), iso(&["2025-11-01", "2025-12-01", "2026-01-01"]));
    let months = p.query(&format!("SELECT CAST(m AS VARCHAR), days FROM {} ORDER BY m", env_view("dev", "s.monthly")));
    let months: Vec<String> = months.into_iter().map(|r| format!("{} {}", r[0].clone().unwrap(), r[1].clone().unwrap())).collect();
    assert_eq!(months, vec!["2025-11-01 00:00:00 30", "2025-12-01 00:00:00 31", "2026-01-01 00:00:00 31"]);
}

#[test]
fn a_cron_change_is_a_metadata_change_without_a_rebuild() {
    let p = Project::new();
    p.write("models/dh.lua", DAILY_AND_HOURLY);
    let first = p.apply("dev");
    let fp = action(&first, "s.daily")["fingerprint"].clone();
    p.write("models/dh.lua", &DAILY_AND_HOURLY.replace(r#"cron = "0 6 * * *""#, r#"cron = "0 2 * * *""#));
    let plan = p.plan("dev");
    let a = action(&plan, "s.daily");
    assert_eq!(a["change"], "metadata", "{plan:#}");
    assert_eq!(a["fingerprint"], fp, "the cron is not part of the fingerprint");
    assert_eq!(a["build"], false);
    assert_eq!(action(&plan, "s.hourly")["change"], "unchanged");
    // Dropping the cron altogether is a metadata change too.
    p.write("models/dh.lua", &DAILY_AND_HOURLY.replace("  cron = \"0 6 * * *\",\n", ""));
    assert_eq!(action(&p.plan("dev"), "s.daily")["change"], "metadata");
}

#[test]
fn a_bad_cron_is_a_load_error_naming_the_file_line_and_model() {
    let p = Project::new();
    p.write(
        "efmesh.toml",
        &p.config_with("").replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\", \"models/**/*.rhai\", \"models/**/*.sql\"]"),
    );
    p.write(
        "models/bad.lua",
        "\n\ndefine_model {\n  name = \"s.bad\",\n  kind = kind.incremental_by_time_range { time_column = \"t\", start = \"2026-01-01\" },\n  cron = \"61 * * * *\",\n  schema = { { \"t\", \"timestamp\" } },\n  query = \"SELECT CAST(@start AS TIMESTAMP) AS t\",\n}\n",
    );
    p.write(
        "models/fine.rhai",
        "define_model(#{ name: \"s.fine\", kind: kind::incremental_by_time_range(#{ time_column: \"t\", start: \"2026-01-01\" }), cron: \"*/15 * * * *\",\n  schema: [[\"t\", \"timestamp\"]], query: \"SELECT CAST(@start AS TIMESTAMP) AS t\" });\n",
    );
    p.write("models/full.sql", "-- name: s.whole\n-- kind: view\n-- schema: x integer\n-- cron: @daily\nSELECT 1 AS x\n");
    p.write("models/busy.sql", "-- name: s.busy\n-- kind: full\n-- schema: x integer\n-- cron: 4,6 * * * *\nSELECT 1 AS x\n");
    p.write("models/fine_full.sql", "-- name: s.daily_full\n-- kind: full\n-- schema: x integer\n-- cron: @daily\nSELECT 1 AS x\n");
    p.write(
        "models/nick.sql",
        "-- name: s.nick\n-- kind: incremental_by_time_range(time_column = t, start = 2026-01-01)\n-- schema: t timestamp\n-- cron: @often\nSELECT CAST(@start AS TIMESTAMP) AS t\n",
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("models/bad.lua:3") && err.contains("s.bad") && err.contains("cron `61 * * * *` is invalid"), "{err}");
    // Finer than the grain (the default `day`): refused, naming the grain that would fit.
    assert!(err.contains("models/fine.rhai:1") && err.contains("s.fine") && err.contains("fires more often than the model's grain `day`"), "{err}");
    assert!(err.contains("the grains it fits: `5m`, `15m`"), "{err}");
    // A view is never computed by `run`: a cron would schedule nothing.
    assert!(err.contains("models/full.sql:4") && err.contains("s.whole") && err.contains("nothing to schedule on a `view` model"), "{err}");
    // A model refreshed whole: at most every five minutes, as sqlmesh.
    assert!(err.contains("models/busy.sql:4") && err.contains("s.busy") && err.contains("fires more often than every five minutes"), "{err}");
    assert!(!err.contains("s.daily_full"), "a daily cron on a `full` model is fine: {err}");
    assert!(err.contains("models/nick.sql:4") && err.contains("s.nick") && err.contains("unknown cron nickname `@often`"), "{err}");
    assert!(!p.state_path().exists() || p.state().env_pointers("dev").unwrap_or_default().is_empty());
}

fn no_gaps_covers_every_grain_in_lua_and_rhai(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\", \"models/**/*.rhai\"]"));
    // Quarter hours 10:00, 10:15, 11:00 (two missing); months Jan, Feb, May (two missing);
    // weeks of 2026-01-05 and 2026-01-19 (one missing).
    let query = "SELECT * FROM (VALUES (TIMESTAMP '2026-01-05 10:00:00', TIMESTAMP '2026-01-10 00:00:00', TIMESTAMP '2026-01-05 00:00:00'), \
                 (TIMESTAMP '2026-01-05 10:20:00', TIMESTAMP '2026-02-03 00:00:00', TIMESTAMP '2026-01-11 23:00:00'), \
                 (TIMESTAMP '2026-01-05 11:14:59', TIMESTAMP '2026-05-31 23:59:00', TIMESTAMP '2026-01-21 00:00:00')) AS v(q, m, w)";
    let schema_lua = "{ { \"q\", \"timestamp\" }, { \"m\", \"timestamp\" }, { \"w\", \"timestamp\" } }";
    p.write(
        "models/l.lua",
        &format!(
            "define_model {{ name = \"l.t\", kind = kind.view(), schema = {schema_lua},\n  audits = {{ audit.no_gaps {{ column = \"q\", grain = \"15m\", blocking = false }}, audit.no_gaps {{ column = \"m\", grain = \"month\", blocking = false }}, audit.no_gaps {{ column = \"w\", grain = \"week\", blocking = false }} }},\n  query = \"{query}\" }}\n"
        ),
    );
    p.write(
        "models/r.rhai",
        &format!(
            "define_model(#{{ name: \"r.t\", kind: kind::view(), schema: [[\"q\", \"timestamp\"], [\"m\", \"timestamp\"], [\"w\", \"timestamp\"]],\n  audits: [audit(\"no_gaps\", #{{ column: \"q\", grain: \"15m\", blocking: false }}), audit(\"no_gaps\", #{{ column: \"m\", grain: \"month\", blocking: false }}), audit(\"no_gaps\", #{{ column: \"w\", grain: \"week\", blocking: false }})],\n  query: \"{query}\" }});\n"
        ),
    );
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let get = |n: &str| project.dag.get(&efmesh::core::ModelName::parse(n).unwrap()).unwrap().audits.clone();
    let (l, r) = (get("l.t"), get("r.t"));
    assert_eq!(l.len(), 3);
    for (a, b) in l.iter().zip(&r) {
        assert_eq!(a.metadata(), b.metadata(), "{} differs between Lua and Rhai", a.label());
    }
    let v = p.apply("dev");
    let list = v["audits"].as_array().unwrap_or_else(|| panic!("no audits in {v:#}"));
    for m in ["l.t", "r.t"] {
        let find = |label: &str| list.iter().find(|r| r["model"] == m && r["audit"] == label).unwrap_or_else(|| panic!("no `{label}` on {m} in {v:#}"));
        for (label, missing) in [("no_gaps(q, grain = 15m)", 2), ("no_gaps(m, grain = month)", 2), ("no_gaps(w, grain = week)", 1)] {
            let r = find(label);
            assert_eq!(r["violations"], 1, "{label} on {m}: {r:#}");
            assert_eq!(r["sample"][0]["missing"].as_i64(), Some(missing), "{label} on {m}: {r:#}");
        }
    }
}

crate::on_every_engine!(no_gaps_covers_every_grain_in_lua_and_rhai);

/// `s.daily` (day grain, cron `0 6 * * *`: a day is due at 06:00 the next day), `s.hourly`
/// (hour grain, no cron) and `s.per_day` (day grain, no cron) reading it.
const HELD_BACK: &str = r#"local daily = define_model {
  name = "s.daily",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-02-01", grain = "day" },
  cron = "0 6 * * *",
  schema = { { "d", "timestamp" }, { "n", "integer" } },
  query = "SELECT range AS d, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 DAY)",
}
define_model {
  name = "s.hourly",
  kind = kind.incremental_by_time_range { time_column = "h", start = "2026-02-01", grain = "hour" },
  schema = { { "h", "timestamp" }, { "n", "bigint" } },
  query = "SELECT date_trunc('hour', d) + INTERVAL (x) HOUR AS h, CAST(n AS bigint) AS n FROM " .. ref(daily) .. ", range(24) AS r(x) WHERE d >= date_trunc('day', @start) AND d < @end",
}
define_model {
  name = "s.per_day",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-02-01", grain = "day" },
  schema = { { "d", "timestamp" }, { "n", "integer" } },
  query = "SELECT d, n FROM " .. ref(daily) .. " WHERE d >= @start AND d < @end",
}
"#;

#[test]
fn a_child_waits_for_the_intervals_its_parent_holds_back() {
    let mut p = Project::new();
    p.write("models/held.lua", HELD_BACK);
    // 03:00 on 3 February: the daily parent's cron last ticked at 06:00 on the 2nd, so it has
    // 1 February only. Its children, though due through the 2nd (and 02:00 on the 3rd), wait.
    p.now = "2026-02-03T03:00:00Z".into();
    p.apply("dev");
    assert_eq!(done(&p, "dev", "s.daily"), iso(&["2026-02-01"]));
    assert_eq!(done(&p, "dev", "s.per_day"), iso(&["2026-02-01"]), "the daily child waits for the parent's 2 February");
    assert_eq!(done(&p, "dev", "s.hourly").len(), 24, "the hourly child stops where the parent's data does");
    // Their next interval is due at the parent's next tick, not at the end of their own grain.
    let v = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    for m in ["s.daily", "s.per_day", "s.hourly"] {
        assert_eq!(lag(&v, m)["nextDueAt"], "2026-02-03T06:00:00.000Z", "{m}: {v:#}");
    }
    // 07:00: the parent's 2 February is due; the children compute it from its rows.
    run_at(&mut p, "dev", "2026-02-03T07:00:00Z");
    assert_eq!(done(&p, "dev", "s.per_day"), iso(&["2026-02-01", "2026-02-02"]));
    assert_eq!(done(&p, "dev", "s.hourly").len(), 48);
    assert_eq!(count(&p, "dev", "s.per_day"), 2, "no interval was marked done over missing input");
    assert_eq!(count(&p, "dev", "s.hourly"), 48);
    let v = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(lag(&v, "s.per_day")["late"], false, "a child waiting for its parent is not late: {v:#}");
}

/// A daily child on its own `@daily` cron reading a daily parent on `0 6 * * *`.
const OWN_CRON_HELD_BACK: &str = r#"local daily = define_model {
  name = "s.daily",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-02-01", grain = "day" },
  cron = "0 6 * * *",
  schema = { { "d", "timestamp" }, { "n", "integer" } },
  query = "SELECT range AS d, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 DAY)",
}
define_model {
  name = "s.own",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-02-01", grain = "day" },
  cron = "@daily",
  schema = { { "d", "timestamp" }, { "n", "integer" } },
  query = "SELECT d, n FROM " .. ref(daily) .. " WHERE d >= @start AND d < @end",
}
"#;

#[test]
fn a_child_on_its_own_cron_is_next_due_when_its_parent_hands_the_interval_over() {
    let mut p = Project::new();
    p.write("models/own.lua", OWN_CRON_HELD_BACK);
    // 03:00 on 3 February: the child's `@daily` ticked at midnight, but the parent has only
    // 1 February until its 06:00 tick: the child is next due then (it was reported due a
    // millisecond before its own next tick, 23:59:59.999).
    p.now = "2026-02-03T03:00:00Z".into();
    p.apply("dev");
    assert_eq!(done(&p, "dev", "s.own"), iso(&["2026-02-01"]));
    let v = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(lag(&v, "s.own")["nextDueAt"], "2026-02-03T06:00:00.000Z", "{v:#}");
    let text = p.run(&["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("(cron `@daily`, next due 2026-02-03T06:00:00.000Z)"), "{text}");
    // A run at that instant computes it, as announced.
    let (_, processed, _) = run_at(&mut p, "dev", "2026-02-03T06:00:00Z");
    assert!(processed.contains(&"s.own".to_string()), "{processed:?}");
    assert_eq!(done(&p, "dev", "s.own"), iso(&["2026-02-01", "2026-02-02"]));
}

/// An hourly time-range parent computing one row per hour, and `s.seen`, a unique-key model on
/// a daily cron counting the hours it saw when it was last refreshed.
const HOURLY_AND_DAILY_UPSERT: &str = r#"define_model {
  name = "s.hours",
  kind = kind.incremental_by_time_range { time_column = "t", start = "2026-03-01", grain = "hour", batch_size = 1 },
  schema = { { "t", "timestamp" } },
  query = "SELECT CAST(@start AS TIMESTAMP) AS t",
}
define_model {
  name = "s.seen",
  kind = kind.incremental_by_unique_key { key = { "k" } },
  cron = "@daily",
  schema = { { "k", "integer" }, { "n", "bigint" } },
  query = "SELECT 1 AS k, count(*) AS n FROM " .. ref("s.hours"),
}
"#;

fn seen(p: &Project, env: &str) -> String {
    p.rows(&env_view(env, "s.seen")).iter().map(|r| r[1].clone().unwrap_or_default()).collect::<Vec<_>>().join(",")
}

fn refresh<'a>(v: &'a Value, model: &str) -> &'a Value {
    v["refreshes"].as_array().expect("refreshes").iter().find(|r| r["model"] == model).unwrap_or_else(|| panic!("no refresh entry for {model}: {v}"))
}

fn unique_key_model_on_a_daily_cron_is_refreshed_once_per_tick(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.write(
        "models/m.lua",
        &if p.on_postgres() { HOURLY_AND_DAILY_UPSERT.replace("count(*) AS n", "CAST(count(*) AS BIGINT) AS n") } else { HOURLY_AND_DAILY_UPSERT.to_string() },
    );
    p.now = "2026-03-02T05:30:00Z".into();
    p.apply("prod");
    // The build by apply counts as the refresh for the day's tick (00:00): 29 hours seen.
    assert_eq!(seen(&p, "prod"), "29");
    let st = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let r = refresh(&st, "s.seen");
    assert_eq!((r["kind"].as_str(), r["cron"].as_str(), r["due"].as_bool()), (Some("incremental_by_unique_key"), Some("@daily"), Some(false)), "{r}");
    assert_eq!(r["refreshedFor"], "2026-03-02T00:00:00.000Z");
    assert_eq!(r["nextDueAt"], "2026-03-03T00:00:00.000Z");

    // 07:10: the parent computes two new hours; the unique-key model's cron has not ticked
    // since it was refreshed: it is not upserted (without a cron every run upserts it).
    let (outcome, processed, intervals) = run_at(&mut p, "prod", "2026-03-02T07:10:00Z");
    assert_eq!((outcome.as_str(), processed, intervals), ("processed", vec!["s.hours".to_string()], 2));
    assert_eq!(seen(&p, "prod"), "29");

    // Past midnight the cron ticked: the run refreshes it, once.
    p.now = "2026-03-03T00:20:00Z".into();
    let st = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    assert_eq!((refresh(&st, "s.seen")["due"].as_bool(), refresh(&st, "s.seen")["dueSince"].as_str()), (Some(true), Some("2026-03-03T00:00:00.000Z")));
    let text = p.run(&["status", "prod"]).expect_code(0).stdout.clone();
    assert!(text.contains("s.seen  refresh due: its cron `@daily` ticked at 2026-03-03T00:00:00.000Z"), "{text}");
    assert!(!text.contains("`full` table"), "a unique-key model is not a shared `full` table: {text}");
    let (_, processed, _) = run_at(&mut p, "prod", "2026-03-03T00:20:00Z");
    assert_eq!(processed, vec!["s.hours".to_string(), "s.seen".to_string()]);
    assert_eq!(seen(&p, "prod"), "48");
    let (outcome, processed, _) = run_at(&mut p, "prod", "2026-03-03T00:40:00Z");
    assert_eq!((outcome.as_str(), processed.len()), ("nothing-due", 0));
    let (_, processed, _) = run_at(&mut p, "prod", "2026-03-03T01:10:00Z");
    assert_eq!(processed, vec!["s.hours".to_string()]);
    assert_eq!(seen(&p, "prod"), "48", "the 00:00 hour arrived after the refresh: seen at the next tick");
    let st = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    assert_eq!(refresh(&st, "s.seen")["refreshedFor"], "2026-03-03T00:00:00.000Z");
}

crate::on_every_engine!(unique_key_model_on_a_daily_cron_is_refreshed_once_per_tick);

/// An external table efmesh does not track, `s.total` (full, on a `0 6 * * *` cron) counting its
/// rows, `s.plain` the same without a cron, and `s.child` (full, no cron) reading `s.total`.
const EXTERNAL_AND_FULL: &str = r#"define_model {
  name = "raw.ev",
  kind = kind.external { table = "src.ev" },
  schema = { { "x", "integer" } },
}
define_model {
  name = "s.total",
  kind = kind.full(),
  cron = "0 6 * * *",
  schema = { { "n", "bigint" } },
  query = "SELECT CAST(count(*) AS BIGINT) AS n FROM " .. ref("raw.ev"),
}
define_model {
  name = "s.plain",
  kind = kind.full(),
  schema = { { "n", "bigint" } },
  query = "SELECT CAST(count(*) AS BIGINT) AS n FROM " .. ref("raw.ev"),
}
define_model {
  name = "s.child",
  kind = kind.full(),
  schema = { { "n", "bigint" } },
  query = "SELECT n FROM " .. ref("s.total"),
}
"#;

fn full_model_on_a_cron_is_rebuilt_at_its_ticks(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.execute_on_engine("CREATE SCHEMA src; CREATE TABLE src.ev (x INTEGER); INSERT INTO src.ev VALUES (1)");
    p.write("models/m.lua", EXTERNAL_AND_FULL);
    p.now = "2026-03-02T10:00:00Z".into();
    p.apply("prod");
    let n = |p: &Project, m: &str| p.rows(&env_view("prod", m))[0][0].clone().unwrap_or_default();
    assert_eq!((n(&p, "s.total"), n(&p, "s.plain"), n(&p, "s.child")), ("1".into(), "1".into(), "1".into()));
    p.execute_on_engine("INSERT INTO src.ev VALUES (2)");
    // The 06:00 tick was before the build: nothing is due until tomorrow's.
    let (outcome, processed, _) = run_at(&mut p, "prod", "2026-03-02T12:00:00Z");
    assert_eq!((outcome.as_str(), processed.len()), ("nothing-due", 0));
    assert_eq!(n(&p, "s.total"), "1");
    // At the next tick `s.total` is rebuilt and reads the new row; its child follows (it never
    // serves older data than its parent); `s.plain`, without a cron, is not rebuilt by `run`.
    let (outcome, processed, _) = run_at(&mut p, "prod", "2026-03-03T06:05:00Z");
    assert_eq!((outcome.as_str(), processed), ("processed", vec!["s.total".to_string(), "s.child".to_string()]));
    assert_eq!((n(&p, "s.total"), n(&p, "s.plain"), n(&p, "s.child")), ("2".into(), "1".into(), "2".into()));
    let (outcome, _, _) = run_at(&mut p, "prod", "2026-03-03T07:00:00Z");
    assert_eq!(outcome, "nothing-due");
    let st = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let r = refresh(&st, "s.total");
    assert_eq!((r["kind"].as_str(), r["due"].as_bool(), r["refreshedFor"].as_str()), (Some("full"), Some(false), Some("2026-03-03T06:00:00.000Z")), "{r}");
    assert!(st["refreshes"].as_array().unwrap().iter().all(|r| r["model"] != "s.plain"), "no cron, no entry: {st}");
}

crate::on_every_engine!(full_model_on_a_cron_is_rebuilt_at_its_ticks);

/// `restate` of a model without intervals says what recomputes it instead: a `full` model
/// without a cron is told to take one (what makes `run` re-read a file or table efmesh does not
/// watch), one with a cron that `run` rebuilds it after its next tick, a unique-key model on a
/// cron when `run` upserts it.
#[test]
fn restating_a_model_without_intervals_hints_at_what_recomputes_it() {
    let p = Project::new();
    p.write("models/m.lua", EXTERNAL_AND_FULL);
    p.write("models/u.lua", HOURLY_AND_DAILY_UPSERT);
    let restate = |model: &str| {
        let r = p.run(&["restate", "prod", "--model", model, "--from", "2026-03-01", "--to", "2026-03-02"]);
        r.expect_code(1);
        r.stderr.clone()
    };
    let plain = restate("s.plain");
    assert!(plain.contains("cannot restate `s.plain`: only incremental_by_time_range models have intervals (it is full)"), "{plain}");
    // A command line refused: `--json` kind `usage`.
    let v = p.run(&["restate", "prod", "--model", "s.plain", "--from", "2026-03-01", "--to", "2026-03-02", "--json"]).expect_code(1).json();
    assert_eq!(v["error"]["kind"], "usage", "{v:#}");
    assert!(
        plain.contains("\n  hint: a `full` model is rebuilt whole when its parents' data changes, and by `run` at each tick of its `cron`; `s.plain` has none")
            && plain.contains("give it one (e.g. `cron = \"@daily\"`) for `run` to re-read it"),
        "{plain}"
    );
    let total = restate("s.total");
    assert!(
        total.contains("by the first `run` after each tick of its cron (`0 6 * * *`)")
            && total.contains("`efmesh run <env>` after its next tick rebuilds `s.total`"),
        "{total}"
    );
    let upsert = restate("s.seen");
    assert!(
        upsert.contains("\n  hint: the first `run` after each tick of its cron (`@daily`) upserts what the query of `s.seen` returns at that moment"),
        "{upsert}"
    );
    // A `full` model without a cron whose parents are models efmesh computes is rebuilt when
    // they change: it is not told to take a cron, and is told which time-range model to restate.
    let child = restate("s.child");
    assert!(
        child.contains("\n  hint: a `full` model is rebuilt whole when its parents' data changes; the parents of `s.child` are models efmesh computes, so the `run` or `apply` after their data changes rebuilds it (a cron matters only for a file or table it reads itself)"),
        "{child}"
    );
    assert!(!child.contains("give it one"), "{child}");
    p.write("models/t.lua", DAYS_AND_ROLLUP);
    let rollup = restate("s.rollup");
    assert!(rollup.contains("the parents of `s.rollup` are models efmesh computes"), "{rollup}");
    assert!(rollup.contains(": restate the time-range model it reads (`s.days`) over the range instead"), "{rollup}");
    assert!(!rollup.contains("give it one"), "{rollup}");
}

/// A daily time-range model and a `full` rollup over it, through a view.
const DAYS_AND_ROLLUP: &str = r#"define_model {
  name = "s.days",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-03-01" },
  schema = { { "d", "date" } },
  query = "SELECT d FROM (SELECT CAST(@start AS DATE) AS d) AS t WHERE d >= @start AND d < @end",
}
define_model {
  name = "s.days_view",
  kind = kind.view(),
  schema = { { "d", "date" } },
  query = "SELECT d FROM " .. ref("s.days"),
}
define_model {
  name = "s.rollup",
  kind = kind.full(),
  schema = { { "n", "bigint" } },
  query = "SELECT CAST(count(*) AS BIGINT) AS n FROM " .. ref("s.days_view"),
}
"#;

/// An hourly time-range model from 2026-01-01 of grain `grain`, on `cron` (none when empty).
fn hours(grain: &str, cron: &str) -> String {
    let cron = if cron.is_empty() { String::new() } else { format!("  cron = \"{cron}\",\n") };
    format!(
        r#"define_model {{
  name = "s.h",
  kind = kind.incremental_by_time_range {{ time_column = "t", start = "2026-01-01", grain = "{grain}" }},
{cron}  schema = {{ {{ "t", "timestamp" }}, {{ "n", "integer" }} }},
  query = "SELECT range AS t, 1 AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 HOUR)",
}}
"#
    )
}

#[test]
fn status_judges_lag_by_the_cron_the_environment_serves_not_the_working_trees() {
    let mut p = Project::new();
    p.write("models/h.lua", &hours("hour", "0 * * * *"));
    p.now = "2026-01-03T03:10:00Z".into();
    p.apply("prod");
    // A daily cron in the working tree, not applied (a `git pull` on the monitoring host): `prod`
    // still runs hourly, so at 10:10 seven hours are due and missing.
    p.write("models/h.lua", &hours("hour", "0 0 * * *"));
    p.now = "2026-01-03T10:10:00Z".into();
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let h = lag(&status, "s.h");
    assert_eq!((h["behind"].as_i64(), h["late"].as_bool()), (Some(7), Some(true)), "{status:#}");
    assert_eq!(h["cron"], "0 * * * *", "the cron `prod` serves");
    assert_eq!(h["nextDueAt"], "2026-01-03T11:00:00.000Z");
    assert_eq!(status["unjudged"], serde_json::json!([]));
    let text = p.run(&["status", "prod"]).expect_code(0).stdout.clone();
    assert!(
        text.contains("… s.h  behind by 7 hour interval(s), caught up to 2026-01-03T03:00:00.000Z (cron `0 * * * *`, next due 2026-01-03T11:00:00.000Z)"),
        "{text}"
    );
    // `run` refuses the edit until it is applied: the served cron is what decides.
    p.run(&["run", "prod"]).expect_code(2);

    // The other way round: `prod` serves a daily cron, the tree an hourly one. The day's tick at
    // midnight handed over every hour up to it: nothing due is missing.
    let mut p = Project::new();
    p.write("models/h.lua", &hours("hour", "0 0 * * *"));
    p.now = "2026-01-03T03:10:00Z".into();
    p.apply("prod");
    p.write("models/h.lua", &hours("hour", "0 * * * *"));
    p.now = "2026-01-03T10:10:00Z".into();
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let h = lag(&status, "s.h");
    assert_eq!((h["behind"].as_i64(), h["late"].as_bool()), (Some(0), Some(false)), "{status:#}");
    assert_eq!(h["doneUpTo"], "2026-01-03T00:00:00.000Z");
    assert_eq!(h["cron"], "0 0 * * *");
    assert_eq!(h["nextDueAt"], "2026-01-04T00:00:00.000Z");
}

#[test]
fn status_judges_lag_by_the_grain_the_environment_serves() {
    let mut p = Project::new();
    p.write("models/h.lua", &hours("hour", ""));
    p.now = "2026-01-03T03:10:00Z".into();
    p.apply("prod");
    // A `day` grain in the tree is another version, not applied: `prod` serves the hourly one,
    // seven hours behind at 10:10 (by the tree's grain, nothing of the 3rd would be due yet).
    p.write("models/h.lua", &hours("day", ""));
    p.now = "2026-01-03T10:10:00Z".into();
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let h = lag(&status, "s.h");
    assert_eq!((h["grain"].as_str(), h["behind"].as_i64()), (Some("hour"), Some(7)), "{status:#}");
    assert_eq!(h["nextDueAt"], "2026-01-03T11:00:00.000Z");
}

#[test]
fn status_says_it_does_not_judge_a_model_whose_kind_the_tree_changed() {
    let mut p = Project::new();
    p.write("models/h.lua", &hours("hour", "0 * * * *"));
    p.now = "2026-01-03T03:10:00Z".into();
    p.apply("prod");
    p.write(
        "models/h.lua",
        r#"define_model {
  name = "s.h",
  kind = kind.full(),
  schema = { { "t", "timestamp" }, { "n", "integer" } },
  query = "SELECT CAST('2026-01-01' AS TIMESTAMP) AS t, 1 AS n",
}
"#,
    );
    p.now = "2026-01-03T10:10:00Z".into();
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    assert!(status["lag"].as_array().expect("lag").iter().all(|l| l["model"] != "s.h"), "no lag judged by the tree's kind: {status:#}");
    let reason = "`prod` serves it as `incremental_by_time_range`, the working tree defines it as `full`: apply to judge it";
    assert_eq!(status["unjudged"], serde_json::json!([{"model": "s.h", "reason": reason}]));
    let text = p.run(&["status", "prod"]).expect_code(0).stdout.clone();
    assert!(text.contains(&format!("  ? s.h  not judged: {reason}\n")), "{text}");
}
