//! Interval bounds in other forms than `@start`/`@end` (issue #16 part 8): `@start_date` /
//! `@end_date` (`DATE` literals, the end inclusive as in sqlmesh), `@start_ds` / `@end_ds` and
//! `@start_ts` / `@end_ts` (strings); a `date` time column compared with `DATE` literals; and
//! embedded models using bounds, inlined into a time-range consumer.

use crate::common::{EngineBackend, Project};
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(
    date_bounds_filter_a_date_column_render_shows_date_literals_and_apply_matches_a_direct_computation,
    an_embedded_model_using_bounds_takes_its_time_range_consumers_batch,
);

/// `s.events`: three rows a day from 2026-01-01 to 2026-02-20, `day` a `date`.
const EVENTS: &str = "-- name: s.events
-- kind: full
-- schema: day date, k integer
SELECT CAST(g.d AS date) AS day, v.k FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-02-20', INTERVAL '1 day') AS g(d), (VALUES (1), (2), (3)) AS v(k)
";

/// `t.daily`: per day of a `date` time column, by batches of 3 days filtered with
/// `BETWEEN @start_date AND @end_date`; `batch_ds` is the batch's `@start_ds`.
const DAILY: &str = "-- name: t.daily
-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = day, batch_size = 3)
-- schema: day date, n bigint, batch_ds varchar, batch_last varchar
-- refs: s.events
SELECT day, count(*) AS n, CAST(@start_ds AS varchar) AS batch_ds, CAST(@end_ts AS varchar) AS batch_last
FROM @ref(s.events)
WHERE day BETWEEN @start_date AND @end_date
GROUP BY day
";

/// An empty project whose models are `.sql` files.
fn sql_project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p
}

fn statements(v: &Value) -> Vec<String> {
    v["batches"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["statements"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn date_bounds_filter_a_date_column_render_shows_date_literals_and_apply_matches_a_direct_computation(engine: EngineBackend) {
    let p = sql_project(engine);
    p.write("models/events.sql", EVENTS);
    p.write("models/daily.sql", DAILY);

    // Without an interval: the canonical placeholders (what is fingerprinted).
    let plain = p.run(&["render", "t.daily", "--json"]).expect_code(0).json();
    let sql = plain["sql"].as_str().unwrap_or_default();
    assert!(sql.contains("$start_date") && sql.contains("$end_date") && sql.contains("$start_ds") && sql.contains("$end_ts"), "{plain:#}");

    // One batch of three days: DATE literals, the end date inclusive (the batch's last day);
    // the time column is compared with DATE literals too: no TIMESTAMP anywhere.
    let v = p.run(&["render", "t.daily", "--env", "dev", "--interval", "2026-01-01", "2026-01-04", "--json"]).expect_code(0).json();
    let s = statements(&v);
    assert_eq!(s.len(), 1, "{v:#}");
    assert!(s[0].contains("BETWEEN DATE '2026-01-01' AND DATE '2026-01-03'"), "{}", s[0]);
    assert!(s[0].contains("\"day\" >= DATE '2026-01-01' AND \"day\" < DATE '2026-01-04'"), "{}", s[0]);
    assert!(s[0].contains("CAST('2026-01-01' AS varchar)") && s[0].contains("CAST('2026-01-03 23:59:59.999999' AS varchar)"), "{}", s[0]);
    assert!(!s[0].contains("TIMESTAMP") && !s[0].contains('$') && !s[0].contains('@'), "{}", s[0]);

    p.apply("dev");
    // The project's now is 2026-02-10: 40 days, each with its 3 events, each batch's start.
    let got = p.query("SELECT CAST(day AS varchar), n, batch_ds, batch_last FROM dev__t.daily ORDER BY day");
    assert_eq!(got.len(), 40, "{got:?}");
    let want = p.query(
        "SELECT CAST(day AS varchar), count(*), \
                CAST(DATE '2026-01-01' + CAST(floor((day - DATE '2026-01-01') / 3.0) * 3 AS integer) AS varchar), \
                CAST(least(DATE '2026-01-01' + CAST(floor((day - DATE '2026-01-01') / 3.0) * 3 + 2 AS integer), DATE '2026-02-09') AS varchar) || ' 23:59:59.999999' \
         FROM dev__s.events WHERE day < DATE '2026-02-10' GROUP BY day ORDER BY day",
    );
    assert_eq!(got, want, "each day once, with its batch's start and last instant");
}

fn an_embedded_model_using_bounds_takes_its_time_range_consumers_batch(engine: EngineBackend) {
    let p = sql_project(engine);
    p.write("models/events.sql", EVENTS);
    p.write(
        "models/window.sql",
        "-- name: e.window\n-- kind: embedded\n-- schema: day date, k integer\n-- refs: s.events\nSELECT day, k FROM @ref(s.events) WHERE day >= @start_date AND day <= @end_date\n",
    );
    p.write(
        "models/per_day.sql",
        "-- name: t.per_day\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = day, batch_size = 7)\n-- schema: day date, total bigint\n-- refs: e.window\nSELECT day, CAST(sum(k) AS bigint) AS total FROM @ref(e.window) GROUP BY day\n",
    );
    let v = p.run(&["render", "t.per_day", "--env", "dev", "--interval", "2026-01-08", "2026-01-15", "--json"]).expect_code(0).json();
    let s = statements(&v);
    assert!(s.iter().any(|s| s.contains("day >= DATE '2026-01-08' AND day <= DATE '2026-01-14'")), "the embedded body takes the consumer's batch: {s:?}");
    p.apply("dev");
    let got = p.query("SELECT CAST(day AS varchar), total FROM dev__t.per_day ORDER BY day");
    let want = p.query("SELECT CAST(day AS varchar), CAST(sum(k) AS bigint) FROM dev__s.events WHERE day < DATE '2026-02-10' GROUP BY day ORDER BY day");
    assert_eq!((got.len(), &got), (40, &want));
}

#[test]
fn bounds_where_no_interval_exists_are_load_errors_naming_the_place() {
    let p = sql_project(EngineBackend::DuckDb);
    p.write("models/events.sql", EVENTS);
    p.write(
        "models/window.sql",
        "-- name: e.window\n-- kind: embedded\n-- schema: day date, k integer\n-- refs: s.events\nSELECT day, k FROM @ref(s.events) WHERE day BETWEEN @start_date AND @end_date\n",
    );
    p.write("models/via.sql", "-- name: e.via\n-- kind: embedded\n-- schema: day date\n-- refs: e.window\nSELECT day FROM @ref(e.window)\n");
    p.write("models/full.sql", "-- name: m.full\n-- kind: full\n-- schema: day date\n-- refs: e.via\nSELECT day FROM @ref(e.via)\n");
    p.write(
        "models/hourly.sql",
        "-- name: t.hourly\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = hour)\n-- schema: day date\n-- refs: s.events\nSELECT day FROM @ref(s.events)\n",
    );
    p.write("models/plain.sql", "-- name: m.plain\n-- kind: full\n-- schema: d date\nSELECT @start_date AS d\n");
    p.write(
        "models/epoch.sql",
        "-- name: t.epoch\n-- kind: incremental_by_time_range(time_column = ts, start = 2026-01-01)\n-- schema: ts bigint\nSELECT 1 AS ts WHERE ts >= @start\n",
    );
    p.write(
        "models/audited.sql",
        "-- name: m.audited\n-- kind: full\n-- schema: day date\n-- audits: relationships(column = day, to = e.window)\nSELECT DATE '2026-01-01' AS day\n",
    );
    let out = p.run(&["plan", "dev"]);
    out.expect_code(1);
    let err = &out.stderr;
    assert!(
        err.contains("models/full.sql:")
            && err.contains("embedded model `e.window` uses `@start`/`@end` (through `e.via`, which inlines it), but a `full` model has no interval"),
        "{err}"
    );
    assert!(err.contains("models/hourly.sql") && err.contains("time column `day` is a `date`, but the grain `hour` is finer than a day"), "{err}");
    // The hint writes the kind option as the `.sql` header does, not as Lua's `grain = "day"`.
    assert!(err.contains("hint: a date holds no time of day: use `grain = day` in `-- kind:` (or coarser)"), "{err}");
    assert!(err.contains("models/plain.sql") && err.contains("`@start`/`@end` used in a `full` model"), "{err}");
    assert!(err.contains("models/epoch.sql") && err.contains("time column `ts` is declared `bigint`"), "{err}");
    assert!(err.contains("models/audited.sql") && err.contains("reads embedded model `e.window`, which uses `@start`/`@end`"), "{err}");
}

/// `end` moved earlier: the days after it stay as computed (served, never recomputed). A
/// restatement over them clears only the days a run recomputes, says it leaves the others, and
/// the run then leaves no day cleared and undone.
#[test]
fn a_restatement_clears_only_the_intervals_inside_the_models_bounds() {
    let mut p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.execute_on_engine("CREATE SCHEMA raw; CREATE TABLE raw.ev (day date, v bigint); INSERT INTO raw.ev VALUES ('2026-01-01', 1), ('2026-01-02', 2), ('2026-01-03', 3), ('2026-01-04', 4)");
    p.write("models/ev.sql", "-- name: s.ev\n-- kind: external(table = raw.ev)\n-- schema: day date, v bigint\n");
    let daily = |end: &str| {
        format!(
            "-- name: t.daily\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, end = {end}, grain = day)\n-- schema: day date, v bigint\n-- refs: s.ev\nSELECT day, v FROM @ref(s.ev) WHERE day BETWEEN @start_date AND @end_date\n"
        )
    };
    p.write("models/daily.sql", &daily("2026-01-05"));
    p.now = "2026-01-06T00:00:00Z".into();
    p.apply("prod");
    p.write("models/daily.sql", &daily("2026-01-03"));
    p.apply("prod");
    p.execute_on_engine("UPDATE raw.ev SET v = v + 100");
    let r = p.run(&["restate", "prod", "--model", "t.daily", "--from", "2026-01-01", "--to", "2026-01-05", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("2 done interval(s) of the range lie outside its `start`/`end`: not restated"), "{}", r.stderr);
    assert_eq!(r.json()["restated"][0]["intervals"], 2, "{}", r.stdout);
    assert_eq!(r.json()["outsideBounds"], serde_json::json!([{"model": "t.daily", "intervals": 2}]), "{}", r.stdout);
    p.run(&["run", "prod"]).expect_code(0);
    let rows = p.query("SELECT CAST(day AS VARCHAR), v FROM t.daily ORDER BY day");
    let v: Vec<Option<String>> = rows.iter().map(|r| r[1].clone()).collect();
    assert_eq!(v, ["101", "102", "3", "4"].map(|s| Some(s.to_string())), "{rows:?}");
    let status = p.run(&["status", "prod", "--check"]);
    status.expect_code(0);
}

/// `start` moved later (a metadata change: the version and its done days before the new
/// `start` stay), then a day inside the bounds restated: `status` counts it as a gap, never
/// offset by the done days before `start`, and the run that recomputes it leaves none.
#[test]
fn status_counts_a_restated_day_as_a_gap_after_start_moved_past_done_days() {
    let mut p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.execute_on_engine(
        "CREATE SCHEMA raw; CREATE TABLE raw.ev (day date, v bigint); INSERT INTO raw.ev VALUES ('2026-01-01', 1), ('2026-01-05', 5), ('2026-01-06', 6)",
    );
    p.write("models/ev.sql", "-- name: s.ev\n-- kind: external(table = raw.ev)\n-- schema: day date, v bigint\n");
    let daily = |start: &str| {
        format!(
            "-- name: t.daily\n-- kind: incremental_by_time_range(time_column = day, start = {start}, grain = day)\n-- schema: day date, v bigint\n-- refs: s.ev\nSELECT day, v FROM @ref(s.ev) WHERE day BETWEEN @start_date AND @end_date\n"
        )
    };
    p.write("models/daily.sql", &daily("2026-01-01"));
    p.now = "2026-01-10T00:00:00Z".into();
    p.apply("prod");
    // Three done days (Jan 1-3) now before `start`; Jan 6 inside the bounds, restated.
    p.write("models/daily.sql", &daily("2026-01-04"));
    p.apply("prod");
    p.run(&["restate", "prod", "--model", "t.daily", "--from", "2026-01-06", "--to", "2026-01-07"]).expect_code(0);
    let lag = |p: &Project| {
        let s = p.run(&["status", "prod", "--json"]).expect_code(0).json();
        let l = &s["lag"][0];
        (l["model"].as_str().map(str::to_string), l["gaps"].as_i64(), l["behind"].as_i64())
    };
    assert_eq!(lag(&p), (Some("t.daily".to_string()), Some(1), Some(0)), "Jan 6 is inside the bounds and not done");
    let text = p.run(&["status", "prod"]).expect_code(0).stdout.clone();
    assert!(text.contains("1 day interval(s) before 2026-01-10T00:00:00.000Z not done (restated or failed): the next run recomputes them"), "{text}");
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(lag(&p), (Some("t.daily".to_string()), Some(0), Some(0)), "the run recomputed it");
}

/// The other order: a restatement first, then `start` moved past the restated days before any
/// run. The restated days keep their old rows (a run would have replaced them) and no ledger
/// entry; no run recomputes them now. The plan of the edit says so, beside the done days it
/// leaves outside as computed; an edit narrowing nothing undone says nothing of the kind.
#[test]
fn moving_start_past_restated_days_before_a_run_says_their_old_rows_stay_served() {
    let mut p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.execute_on_engine("CREATE SCHEMA raw; CREATE TABLE raw.ev (day date, v bigint); INSERT INTO raw.ev VALUES ('2026-01-01', 1), ('2026-01-02', 2), ('2026-01-03', 3), ('2026-01-04', 4)");
    p.write("models/ev.sql", "-- name: s.ev\n-- kind: external(table = raw.ev)\n-- schema: day date, v bigint\n");
    let daily = |start: &str, end: &str| {
        format!(
            "-- name: t.daily\n-- kind: incremental_by_time_range(time_column = day, start = {start}, end = {end}, grain = day)\n-- schema: day date, v bigint\n-- refs: s.ev\nSELECT day, v FROM @ref(s.ev) WHERE day BETWEEN @start_date AND @end_date\n"
        )
    };
    p.write("models/daily.sql", &daily("2026-01-01", "2026-01-05"));
    p.now = "2026-01-06T00:00:00Z".into();
    p.apply("prod");
    p.execute_on_engine("UPDATE raw.ev SET v = v + 100");
    let r = p.run(&["restate", "prod", "--model", "t.daily", "--from", "2026-01-01", "--to", "2026-01-02"]);
    r.expect_code(0);
    // `start` moved past the restated day (and one done day): one of each outside it.
    p.write("models/daily.sql", &daily("2026-01-03", "2026-01-05"));
    let plan = p.run(&["plan", "prod", "--json"]).expect_code(0).json();
    let action = plan["actions"].as_array().into_iter().flatten().find(|a| a["name"] == "t.daily").cloned().unwrap_or_default();
    assert_eq!(action["change"], "metadata", "{plan:#}");
    assert_eq!(action["undoneOutside"]["intervals"], 1, "{plan:#}");
    assert_eq!(action["undoneOutside"]["range"]["start"], "2026-01-01T00:00:00.000Z", "{plan:#}");
    assert_eq!(action["outsideBounds"]["intervals"], 1, "the done day 2026-01-02: {plan:#}");
    let text = p.run(&["plan", "prod"]).expect_code(0).stdout.clone();
    assert!(
        text.contains("1 interval in [2026-01-01T00:00:00.000Z, 2026-01-02T00:00:00.000Z) its old `start`/`end` held, now outside them, has no done record"),
        "{text}"
    );
    let applied = p.run(&["apply", "prod", "--yes"]).expect_code(0).stdout.clone();
    assert!(applied.contains("has no done record"), "{applied}");
    // What the line says: the old row of the restated day is what the view serves.
    assert_eq!(p.query("SELECT v FROM t.daily WHERE day = DATE '2026-01-01'"), vec![vec![Some("1".to_string())]]);
    // Said once, by the plan that narrows the bounds: the next plan has no change.
    let again = p.run(&["plan", "prod", "--json"]).expect_code(0).json();
    assert!(again["actions"].as_array().into_iter().flatten().all(|a| a["undoneOutside"].is_null()), "{again:#}");

    // `end` moved earlier over days all done: no such line (only the done days outside).
    p.write("models/daily.sql", &daily("2026-01-03", "2026-01-04"));
    let plan = p.run(&["plan", "prod", "--json"]).expect_code(0).json();
    let action = plan["actions"].as_array().into_iter().flatten().find(|a| a["name"] == "t.daily").cloned().unwrap_or_default();
    assert_eq!(action["change"], "metadata", "{plan:#}");
    assert!(action["undoneOutside"].is_null(), "{plan:#}");
    assert_eq!(action["outsideBounds"]["intervals"], 2, "2026-01-02 and 04 (01 is not done): {plan:#}");
}

/// The same, when the narrowed bounds come with another version: `prod` pointed at the version
/// `dev` computed and restated (its table's rows were computed under `dev`'s wider bounds).
#[test]
fn pointing_prod_at_a_restated_version_under_narrower_bounds_says_the_old_rows_stay_served() {
    let mut p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.execute_on_engine("CREATE SCHEMA raw; CREATE TABLE raw.ev (day date, v bigint); INSERT INTO raw.ev VALUES ('2026-01-01', 1), ('2026-01-02', 2), ('2026-01-03', 3), ('2026-01-04', 4)");
    p.write("models/ev.sql", "-- name: s.ev\n-- kind: external(table = raw.ev)\n-- schema: day date, v bigint\n");
    let daily = |start: &str, select: &str| {
        format!(
            "-- name: t.daily\n-- kind: incremental_by_time_range(time_column = day, start = {start}, grain = day)\n-- schema: day date, v bigint\n-- refs: s.ev\nSELECT day, {select} AS v FROM @ref(s.ev) WHERE day BETWEEN @start_date AND @end_date\n"
        )
    };
    p.write("models/daily.sql", &daily("2026-01-01", "v"));
    p.now = "2026-01-05T00:00:00Z".into();
    p.apply("prod");
    p.write("models/daily.sql", &daily("2026-01-01", "v * 10"));
    p.apply("dev");
    p.execute_on_engine("UPDATE raw.ev SET v = v + 100");
    p.run(&["restate", "dev", "--model", "t.daily", "--from", "2026-01-01", "--to", "2026-01-02"]).expect_code(0);
    p.write("models/daily.sql", &daily("2026-01-03", "v * 10"));
    let plan = p.run(&["plan", "prod", "--json"]).expect_code(0).json();
    let action = plan["actions"].as_array().into_iter().flatten().find(|a| a["name"] == "t.daily").cloned().unwrap_or_default();
    assert_eq!(action["build"], false, "dev's version is reused: {plan:#}");
    assert_eq!(action["undoneOutside"]["intervals"], 1, "{plan:#}");
    assert_eq!(action["undoneOutside"]["range"]["start"], "2026-01-01T00:00:00.000Z", "{plan:#}");
}
