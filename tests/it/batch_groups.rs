//! A time-range model's batches sharing one engine transaction (`[engine] batch_commit_ms`,
//! SPEC §4 invariant 4): a failing batch still leaves every earlier batch committed and done,
//! names its own interval, and a process killed inside a shared transaction, or after its
//! commit and before its ledger rows, leaves a ledger that never claims rows the table lacks and
//! converges on the next apply.

use crate::common::*;

/// Ten daily intervals, [2026-01-01, 2026-01-11), one batch each.
const NOW_11: &str = "2026-01-11T00:00:00Z";

/// A project whose `g.daily` reads `land.events` (one row per day of January 1–10, `raw` its
/// text value; day 5's is `day5`), with every batch of an apply in one shared transaction
/// (`batch_commit_ms` far longer than the apply). `query` is the model's select list over
/// `raw.events` `e`.
fn project(engine: EngineBackend, day5: &str, select: &str, audits: &str) -> Project {
    let mut p = Project::on_engine(engine);
    p.now = NOW_11.to_string();
    p.write("efmesh.toml", &p.config_with("").replace("[engine]\n", "[engine]\nbatch_commit_ms = 600000\n"));
    p.execute_on_engine("CREATE SCHEMA land");
    p.execute_on_engine("CREATE TABLE land.events (day TIMESTAMP, raw VARCHAR)");
    let values: Vec<String> =
        (1..=10).map(|d| format!("(TIMESTAMP '2026-01-{d:02} 12:00:00', {})", if d == 5 { day5.to_string() } else { format!("'{d}'") })).collect();
    p.execute_on_engine(&format!("INSERT INTO land.events VALUES {}", values.join(", ")));
    p.write(
        "models/g.lua",
        &format!(
            r#"local raw = define_model {{
  name = "raw.events",
  kind = kind.external {{ table = "land.events" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "raw", "varchar" }} }},
}}
define_model {{
  name = "g.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "bigint" }} }},
  audits = {{ {audits} }},
  query = "SELECT CAST(date_trunc('day', e.day) AS TIMESTAMP) AS day, {select} AS v FROM " .. ref(raw) .. " AS e WHERE e.day >= @start AND e.day < @end",
}}
"#
        ),
    );
    p
}

/// Runs `apply dev --yes` with the test hook `EFMESH_FAULT=<point>` (the process aborts there, as
/// `kill -9` would stop it) and waits until a Postgres engine's server has ended the aborted
/// client's session (rolling back what it left uncommitted).
fn apply_aborted_at(p: &Project, point: &str) {
    let out = p.command(&["apply", "dev", "--yes"]).env("EFMESH_FAULT", point).output().expect("spawn efmesh");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("aborting at `{point}`")), "{}", String::from_utf8_lossy(&out.stderr));
    if p.on_postgres() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
        while p.query(others) != [[Some("0".to_string())]] {
            assert!(std::time::Instant::now() < deadline, "the aborted apply's server session did not end within 30 s");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// The physical table of `g.daily` (the only one in `_efmesh`), if the engine holds it.
fn daily_table(p: &Project) -> Option<String> {
    p.physical_tables().into_iter().find(|t| t.starts_with("g__daily__")).map(|t| format!("_efmesh.{t}"))
}

/// The days (1–31 of January) `g.daily`'s table holds rows for.
fn days_in_table(p: &Project) -> Vec<u32> {
    let Some(table) = daily_table(p) else { return Vec::new() };
    let mut days: Vec<u32> = p
        .query(&format!("SELECT CAST(extract(day FROM day) AS INTEGER) FROM {table}"))
        .into_iter()
        .map(|r| r[0].as_deref().expect("day").parse().expect("number"))
        .collect();
    days.sort();
    days
}

/// The days (1–31 of January) the ledger records done for `g.daily`, every version.
fn days_done(p: &Project) -> Vec<u32> {
    let Some(store) = p.store() else { return Vec::new() };
    let mut days: Vec<u32> = store
        .all_done_intervals()
        .expect("intervals")
        .into_iter()
        .filter(|((name, _), _)| name == "g.daily")
        .flat_map(|(_, starts)| starts)
        .map(|ms| ((ms - 1_767_225_600_000) / 86_400_000 + 1) as u32) // 2026-01-01T00:00Z = day 1
        .collect();
    days.sort();
    days
}

crate::on_every_engine!(
    a_blocking_audit_failing_in_the_5th_of_10_shared_batches_leaves_days_1_to_4_done,
    a_statement_failing_in_the_5th_of_10_shared_batches_leaves_days_1_to_4_done,
    a_kill_inside_a_shared_transaction_or_before_its_ledger_rows_converges,
);

fn a_blocking_audit_failing_in_the_5th_of_10_shared_batches_leaves_days_1_to_4_done(engine: EngineBackend) {
    // Day 5's value is NULL: the interval audit `not_null(v)` fails in its batch.
    let p = project(engine, "NULL", "CAST(e.raw AS BIGINT)", "audit.not_null(\"v\")");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    // The failure is the 5th batch's own, as when each batch had its own transaction.
    let day5 = "[2026-01-05T00:00:00.000Z, 2026-01-06T00:00:00.000Z)";
    assert!(run.stderr.contains(&format!("batch {day5} of model `g.daily` rolled back and marked failed")), "{}", run.stderr);
    assert!(run.stderr.contains("not_null(v)"), "{}", run.stderr);
    // Days 1–4 committed and recorded, 5–10 neither.
    assert_eq!(days_in_table(&p), [1, 2, 3, 4]);
    assert_eq!(days_done(&p), [1, 2, 3, 4]);
    assert!(!p.state_summary().pointers.contains_key("dev"), "nothing promoted");
    // Fixed data: the next apply computes days 5–10 only.
    p.execute_on_engine("UPDATE land.events SET raw = '5' WHERE raw IS NULL");
    let v = p.apply("dev");
    assert_eq!(v["intervals"], serde_json::Value::from(6), "{v:#}");
    assert_eq!(days_in_table(&p), (1..=10).collect::<Vec<_>>());
    assert_eq!(days_done(&p), (1..=10).collect::<Vec<_>>());
}

fn a_statement_failing_in_the_5th_of_10_shared_batches_leaves_days_1_to_4_done(engine: EngineBackend) {
    // Day 5's text is not a number: the 5th batch's INSERT fails in the engine.
    let p = project(engine, "'five'", "CAST(e.raw AS BIGINT)", "");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("building model `g.daily` interval [2026-01-05T00:00:00.000Z, 2026-01-06T00:00:00.000Z)"), "{}", run.stderr);
    assert!(run.stderr.contains("five"), "the engine's message: {}", run.stderr);
    assert_eq!(days_in_table(&p), [1, 2, 3, 4]);
    assert_eq!(days_done(&p), [1, 2, 3, 4]);
}

fn a_kill_inside_a_shared_transaction_or_before_its_ledger_rows_converges(engine: EngineBackend) {
    let p = project(engine.clone(), "'5'", "CAST(e.raw AS BIGINT)", "audit.not_null(\"v\")");
    // Killed after the 5th batch ran inside the shared transaction: nothing committed, nothing
    // recorded (the table was created by the first batch, in the same transaction).
    apply_aborted_at(&p, "in-group:g.daily:5");
    assert_eq!(days_done(&p), Vec::<u32>::new());
    assert_eq!(days_in_table(&p), Vec::<u32>::new());
    // Killed after the shared transaction of all ten batches committed, before their ledger
    // rows: the table holds the days the ledger does not claim (a harmless recompute).
    apply_aborted_at(&p, "group-committed:g.daily:10");
    assert_eq!(days_done(&p), Vec::<u32>::new());
    assert_eq!(days_in_table(&p), (1..=10).collect::<Vec<_>>());
    // The next apply recomputes every day (DELETE + INSERT: no duplicates) and records them.
    let v = p.apply("dev");
    assert_eq!(v["intervals"], serde_json::Value::from(10), "{v:#}");
    assert_eq!(days_done(&p), (1..=10).collect::<Vec<_>>());
    let clean = project(engine.another(), "'5'", "CAST(e.raw AS BIGINT)", "audit.not_null(\"v\")");
    clean.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "g.daily")), clean.rows(&env_view("dev", "g.daily")));
    assert_eq!(p.rows(&env_view("dev", "g.daily")).len(), 10);
}
