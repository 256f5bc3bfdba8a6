//! Issue #13: apply without statements beyond the work (a new time-range table created by its
//! first batch), and a promotion that does not re-run audits already passed on the same data.
//! Every test runs on both engines: the source is an external table (changed outside efmesh
//! by the tests), which Postgres reads as DuckDB does.

use crate::common::*;
use crate::on_every_engine;
use efmesh::core::interval::Interval;
use efmesh::state::{IntervalStatus, StateStore};
use serde_json::Value;
use std::collections::BTreeSet;

on_every_engine!(
    a_new_time_range_table_is_created_by_its_first_batch_without_an_empty_creation_or_a_delete,
    a_first_batch_failing_its_audit_leaves_no_table_and_no_snapshot_and_a_fix_builds_it,
    promotion_does_not_rerun_audits_passed_on_the_same_data_and_reruns_them_when_the_data_changed,
    an_edited_audit_is_run_at_promotion_even_over_data_whose_old_audits_passed,
    a_batch_failing_its_audit_rolls_back_alone_and_the_batches_before_it_stay_done,
    a_warn_audit_that_found_rows_runs_again_at_every_promotion,
    an_audit_reading_the_clock_or_another_table_runs_at_every_promotion,
    an_audit_calling_the_clock_by_its_quoted_name_runs_at_every_promotion,
    a_kill_after_the_first_batch_created_the_table_and_before_its_snapshot_converges_on_the_next_apply,
);

const EVENTS: &str = "event_at,region,amount\n\
2026-01-01 10:00:00,north,10\n\
2026-01-02 10:00:00,north,20\n\
2026-01-03 10:00:00,south,30\n\
2026-01-04 10:00:00,south,40\n\
2026-01-05 10:00:00,east,50\n\
2026-01-06 10:00:00,east,60\n\
2026-01-07 10:00:00,east,70\n";

/// A daily time-range model over an external table holding the rows of `csv` (see
/// [`load_events`]; batches of 2 days) with the given audits, and a `full` rollup of it with a
/// `not_null` audit; `now` is 2026-01-06 (5 daily intervals).
fn project(engine: EngineBackend, csv: &str, audits: &str) -> Project {
    let mut p = Project::on_engine(engine);
    p.now = "2026-01-06T00:00:00Z".into();
    load_events(&p, csv);
    p.write(
        "models/daily.lua",
        &format!(
            r#"local raw = define_model {{
  name = "raw.events",
  kind = kind.external {{ table = "src.events" }},
  schema = {{ {{ "event_at", "timestamp" }}, {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
}}
local daily = define_model {{
  name = "s.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", batch_size = 2 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
  audits = {{ {audits} }},
  query = "SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region, CAST(sum(amount) AS BIGINT) AS amount FROM " .. ref(raw) .. " WHERE event_at >= @start AND event_at < @end GROUP BY 1, 2",
}}
define_model {{
  name = "s.totals",
  kind = kind.full(),
  schema = {{ {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
  audits = {{ audit.not_null("region", "amount") }},
  query = "SELECT region, CAST(sum(amount) AS BIGINT) AS amount FROM " .. ref(daily) .. " GROUP BY region",
}}
"#
        ),
    );
    p
}

/// `apply <env> --yes` with the engine's statements logged (`RUST_LOG=efmesh=debug`): the run.
/// The log quotes each statement (`sql="…"`, inner quotes escaped): they are unescaped here.
fn apply_logged(p: &Project, env: &str) -> Run {
    let out = p.command(&["apply", env, "--yes"]).env("RUST_LOG", "efmesh=debug").output().expect("spawn efmesh");
    let mut run = Run::from_output(out, format!("efmesh apply {env} --yes (debug log)"));
    run.stderr = run.stderr.replace("\\\"", "\"");
    run
}

/// The physical table of `s.daily` (`"_efmesh"."s__daily__<fp>"`).
fn daily_table(p: &Project) -> String {
    let t: Vec<String> = p.physical_tables().into_iter().filter(|t| t.starts_with("s__daily__")).collect();
    assert_eq!(t.len(), 1, "{t:?}");
    format!("\"_efmesh\".\"{}\"", t[0])
}

fn a_new_time_range_table_is_created_by_its_first_batch_without_an_empty_creation_or_a_delete(engine: EngineBackend) {
    let mut p = project(engine, EVENTS, "audit.not_null(\"region\")");
    let run = apply_logged(&p, "dev");
    run.expect_code(0);
    let table = daily_table(&p);
    let log = &run.stderr;
    // Three batches ([1, 3), [3, 5), [5, 6)), each its own transaction: the first creates the
    // table with its rows, the two others insert theirs; no empty `LIMIT 0` creation, no
    // DELETE of nothing.
    assert_eq!(log.matches(&format!("CREATE TABLE {table} AS SELECT * FROM (")).count(), 1, "{log}");
    assert!(!log.contains(&format!("CREATE TABLE IF NOT EXISTS {table}")), "{log}");
    assert_eq!(log.matches(&format!("INSERT INTO {table}")).count(), 2, "{log}");
    assert!(!log.contains(&format!("DELETE FROM {table}")), "{log}");
    assert_eq!(log.matches("backfill batch").count(), 3, "{log}");
    assert_eq!(p.rows(&env_view("dev", "s.daily")).len(), 5);
    assert_eq!(p.state_summary().intervals.values().map(std::collections::BTreeSet::len).sum::<usize>(), 5);
    // The table exists now: a later apply with new intervals deletes and inserts.
    p.now = "2026-01-08T00:00:00Z".into();
    let run = apply_logged(&p, "dev");
    run.expect_code(0);
    assert!(!run.stderr.contains(&format!("CREATE TABLE {table}")), "{}", run.stderr);
    assert_eq!(run.stderr.matches(&format!("DELETE FROM {table}")).count(), 1, "{}", run.stderr);
    assert_eq!(
        p.rows(&format!("(SELECT CAST(day AS DATE) AS d, region, amount FROM {}) AS r", env_view("dev", "s.daily"))),
        EVENTS
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                vec![Some(f[0][..10].to_string()), Some(f[1].to_string()), Some(f[2].to_string())]
            })
            .collect::<Vec<_>>()
    );
}

fn a_first_batch_failing_its_audit_leaves_no_table_and_no_snapshot_and_a_fix_builds_it(engine: EngineBackend) {
    let bad = EVENTS.replace("2026-01-01 10:00:00,north,10", "2026-01-01 10:00:00,,10");
    let p = project(engine, &bad, "audit.not_null(\"region\")");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `not_null(region)` on model `s.daily`"), "{}", run.stderr);
    assert!(run.stderr.contains("rolled back and marked failed"), "{}", run.stderr);
    // The first batch created nothing that stayed: no table, no snapshot, its days marked failed.
    assert!(!p.physical_tables().iter().any(|t| t.starts_with("s__daily__")), "{:?}", p.physical_tables());
    let summary = p.state_summary();
    assert!(!summary.snapshots.iter().any(|(n, _)| n == "s.daily"), "{:?}", summary.snapshots);
    assert!(summary.intervals.is_empty(), "{:?}", summary.intervals);
    let conn = rusqlite::Connection::open(p.state_path()).expect("open state");
    let failed: i64 = conn.query_row("SELECT count(*) FROM intervals WHERE name = 's.daily' AND status = 'failed'", [], |r| r.get(0)).expect("count");
    assert_eq!(failed, 2);
    // Fixed data: the next apply builds it from its first batch on.
    load_events(&p, EVENTS);
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.daily")).len(), 5);
}

/// The audit results of an apply for `model`.
fn audits_of<'a>(v: &'a Value, model: &str) -> Vec<&'a Value> {
    v["audits"].as_array().expect("audits").iter().filter(|r| r["model"] == model).collect()
}

fn reused(v: &Value) -> Vec<String> {
    v["auditsReused"].as_array().expect("auditsReused").iter().map(|x| x.as_str().expect("name").to_string()).collect()
}

fn promotion_does_not_rerun_audits_passed_on_the_same_data_and_reruns_them_when_the_data_changed(engine: EngineBackend) {
    let p = project(engine, EVENTS, "audit.not_null(\"region\"), audit.unique { \"day\", \"region\", scope = \"whole\" }");
    let dev = p.apply("dev");
    // Built in dev: every audit ran while writing (interval ones per batch, whole ones at the end).
    assert_eq!(audits_of(&dev, "s.daily").len(), 2, "{dev:#}");
    assert_eq!(audits_of(&dev, "s.totals").len(), 1, "{dev:#}");
    assert!(reused(&dev).is_empty(), "{dev:#}");

    // Promotion to prod is a view swap over the same data: no audit runs again, and it says so.
    let prod = p.apply("prod");
    assert_eq!(prod["built"], serde_json::json!([]), "{prod:#}");
    assert!(prod["audits"].as_array().expect("audits").is_empty(), "{prod:#}");
    assert_eq!(reused(&prod), ["s.daily", "s.totals"], "{prod:#}");
    let text = p.run(&["apply", "qa", "--yes"]);
    text.expect_code(0);
    assert!(text.stdout.contains("audits not run again (passed on the same data): s.daily, s.totals"), "{}", text.stdout);

    // The data of s.daily's version changes (one of its days recomputed, as `run` records it):
    // its generation moves, so the next promotion audits it again.
    let store = p.state();
    let fp = store.env_pointers("dev").expect("pointers")["s.daily"].clone();
    let first = *store.done_intervals("s.daily", &fp).expect("done").iter().next().expect("a done day");
    store.mark_intervals("s.daily", &fp, &[Interval::new(first, first + 86_400_000)], IntervalStatus::Done, first).expect("mark");
    drop(store);
    let staging = p.apply("staging");
    // Every audit runs, the `interval` one too, over the whole table: no pass of them covers
    // the data as it is now (whoever wrote the day may have had other audits).
    let ran: BTreeSet<&str> = audits_of(&staging, "s.daily").iter().filter_map(|r| r["audit"].as_str()).collect();
    assert_eq!(ran, BTreeSet::from(["not_null(region)", "unique(day, region)"]), "{staging:#}");
    assert!(!reused(&staging).contains(&"s.daily".to_string()), "{staging:#}");
    // That run passed and is recorded: the next promotion over the same data re-runs nothing.
    let uat = p.apply("uat");
    assert!(audits_of(&uat, "s.daily").is_empty(), "{uat:#}");
    assert!(reused(&uat).contains(&"s.daily".to_string()), "{uat:#}");
}

fn an_edited_audit_is_run_at_promotion_even_over_data_whose_old_audits_passed(engine: EngineBackend) {
    let p = project(engine, EVENTS, "audit.not_null(\"region\")");
    p.apply("dev");
    // A stricter audit on s.totals is a metadata change: same version, same data, new audits.
    p.write(
        "models/daily.lua",
        &p.read("models/daily.lua").replace("audit.not_null(\"region\", \"amount\") }", "audit.not_null(\"region\", \"amount\"), audit.unique(\"region\") }"),
    );
    let prod = p.apply("prod");
    assert_eq!(audits_of(&prod, "s.totals").len(), 2, "{prod:#}");
    assert_eq!(reused(&prod), ["s.daily"], "{prod:#}");
}

fn a_batch_failing_its_audit_rolls_back_alone_and_the_batches_before_it_stay_done(engine: EngineBackend) {
    // Batches [1, 3), [3, 5), [5, 6): the 4th has no region, so the second batch fails; the
    // first (which created the table) stays.
    let bad = EVENTS.replace("2026-01-04 10:00:00,south,40", "2026-01-04 10:00:00,,40");
    let p = project(engine, &bad, "audit.not_null(\"region\")");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("(batch [2026-01-03T00:00:00.000Z, 2026-01-05T00:00:00.000Z) of model `s.daily` rolled back and marked failed)"),
        "{}",
        run.stderr
    );
    let table = daily_table(&p);
    assert_eq!(
        p.rows(&format!("(SELECT CAST(day AS DATE) AS d, region FROM {table}) AS r")),
        vec![vec![Some("2026-01-01".to_string()), Some("north".to_string())], vec![Some("2026-01-02".to_string()), Some("north".to_string())],]
    );
    let conn = rusqlite::Connection::open(p.state_path()).expect("open state");
    let mut stmt = conn.prepare("SELECT substr(start_ts, 1, 10), status FROM intervals WHERE name = 's.daily' ORDER BY start_ts").expect("prepare");
    let ledger: Vec<(String, String)> = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("query").map(Result::unwrap).collect();
    assert_eq!(
        ledger,
        [("2026-01-01", "done"), ("2026-01-02", "done"), ("2026-01-03", "failed"), ("2026-01-04", "failed")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert!(p.state_summary().snapshots.iter().any(|(n, _)| n == "s.daily"), "the first batch's table is recorded");
    drop(stmt);
    drop(conn);
    // Fixed data: the next apply writes the rest into the existing table.
    load_events(&p, EVENTS);
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.daily")).len(), 5);
}

fn a_warn_audit_that_found_rows_runs_again_at_every_promotion(engine: EngineBackend) {
    // Several days per region: the warn-level `unique(region)` finds rows; the apply succeeds.
    let p = project(engine, EVENTS, "audit.unique { \"region\", blocking = false, scope = \"whole\" }");
    let dev = p.apply("dev");
    assert!(audits_of(&dev, "s.daily").iter().any(|a| a["violations"].as_u64() > Some(0)), "{dev:#}");
    // Recorded as a check, never as a pass: the promotion runs it again and reports the warning
    // again.
    let prod = p.apply("prod");
    let daily = audits_of(&prod, "s.daily");
    assert_eq!(daily.len(), 1, "{prod:#}");
    assert!(daily[0]["violations"].as_u64() > Some(0), "{prod:#}");
    assert_eq!(reused(&prod), ["s.totals"], "{prod:#}");
}

fn an_audit_reading_the_clock_or_another_table_runs_at_every_promotion(engine: EngineBackend) {
    let p = project(engine, EVENTS, "audit.not_in_future(), audit.regions_known()");
    p.write(
        "audits/custom.lua",
        r#"define_audit {
  name = "not_in_future",
  scope = "whole",
  query = function(self, args) return ("SELECT * FROM %s WHERE day > now() + INTERVAL '100 years'"):format(self) end,
}
define_audit {
  name = "regions_known",
  scope = "whole",
  query = function(self, args) return ("SELECT * FROM %s WHERE (SELECT count(*) FROM information_schema.schemata) < 0"):format(self) end,
}
"#,
    );
    let dev = p.apply("dev");
    assert_eq!(audits_of(&dev, "s.daily").len(), 2, "{dev:#}");
    // s.totals' built-in audit reads only its table: reused. s.daily's read the clock and
    // another relation: their result is not fixed by s.daily's data, so they run again.
    let prod = p.apply("prod");
    assert_eq!(audits_of(&prod, "s.daily").len(), 2, "{prod:#}");
    assert_eq!(reused(&prod), ["s.totals"], "{prod:#}");
}

/// `"now"()` calls the clock as `now()` does (a quoted name is still a call, on both engines):
/// the audit's result is not fixed by the data, so a promotion runs it again.
fn an_audit_calling_the_clock_by_its_quoted_name_runs_at_every_promotion(engine: EngineBackend) {
    let p = project(engine, EVENTS, "audit.not_in_future()");
    p.write(
        "audits/custom.lua",
        r#"define_audit {
  name = "not_in_future",
  scope = "whole",
  query = function(self, args) return ([[SELECT * FROM %s WHERE day > "now"() + INTERVAL '100 years']]):format(self) end,
}
"#,
    );
    let dev = p.apply("dev");
    assert_eq!(audits_of(&dev, "s.daily").len(), 1, "{dev:#}");
    let prod = p.apply("prod");
    assert_eq!(audits_of(&prod, "s.daily").len(), 1, "{prod:#}");
    assert_eq!(reused(&prod), ["s.totals"], "{prod:#}");
}

fn a_kill_after_the_first_batch_created_the_table_and_before_its_snapshot_converges_on_the_next_apply(engine: EngineBackend) {
    let p = project(engine.clone(), EVENTS, "audit.not_null(\"region\")");
    let out = p.command(&["apply", "dev", "--yes"]).env("EFMESH_FAULT", "after-first-batch:s.daily").output().expect("spawn efmesh");
    assert!(!out.status.success(), "the fault hook aborts the apply");
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at `after-first-batch:s.daily`"), "{}", String::from_utf8_lossy(&out.stderr));
    // The engine holds the new table (its first batch committed), the state store no snapshot.
    let table = daily_table(&p);
    assert!(!p.rows(&table).is_empty(), "the first batch's rows are in the engine");
    assert!(p.state().env_pointers("dev").expect("pointers").is_empty(), "nothing was promoted");
    // The next apply finds the table in the catalog, writes every batch by DELETE/INSERT and ends
    // with the same rows as an apply that was never interrupted.
    p.apply("dev");
    let clean = project(engine.another(), EVENTS, "audit.not_null(\"region\")");
    clean.apply("dev");
    assert_eq!(daily_table(&p).rsplit("__").next(), daily_table(&clean).rsplit("__").next(), "same version");
    assert_eq!(p.rows(&daily_table(&p)), clean.rows(&daily_table(&clean)));
    assert_eq!(p.rows("dev__s.totals"), clean.rows("dev__s.totals"));
}
