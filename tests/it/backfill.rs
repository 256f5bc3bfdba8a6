//! Time-range backfill: batching never changes the result (rows at interval boundaries are
//! counted exactly once), and a backfill killed with SIGKILL converges, on the next apply, to the
//! uninterrupted result.

use crate::common::*;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Batch sizes

/// Times of day of the generated events: midnight, just after, just before 06:00, 06:00 and
/// 12:00 exactly (hour edges), an ordinary instant, and the last millisecond of the day.
const TIMES: &[&str] = &["00:00:00", "00:00:00.001", "05:59:59.999", "06:00:00", "12:00:00", "17:45:10.5", "23:59:59.999"];

/// Day `d` as `YYYY-MM-DD`, day 0 being 2026-01-01 (valid for -1 ..= 58).
fn day(d: i64) -> String {
    match d {
        -1 => "2025-12-31".to_string(),
        0..=30 => format!("2026-01-{:02}", d + 1),
        31..=58 => format!("2026-02-{:02}", d - 30),
        _ => panic!("day {d} out of range"),
    }
}

struct Event {
    day: i64,
    time: String,
    k: &'static str,
    amount: i64,
}

impl Event {
    fn ts(&self) -> String {
        format!("{} {}", day(self.day), self.time)
    }
    fn at_midnight(&self) -> bool {
        self.time == "00:00:00"
    }
    fn at_hour_edge(&self) -> bool {
        self.time.ends_with(":00:00")
    }
}

/// Events from 2025-12-31 (before `start`) to 2026-02-10 (after the last due interval when now
/// is 2026-02-10T00:00Z): [`TIMES`] every day, plus every hour edge of 2026-02-08 ..= 02-10.
fn events() -> Vec<Event> {
    let mut out = Vec::new();
    for d in -1..=40 {
        for (i, t) in TIMES.iter().enumerate() {
            out.push(Event { day: d, time: t.to_string(), k: ["a", "b", "c"][(d + 1 + i as i64) as usize % 3], amount: d * 100 + i as i64 });
        }
        if d >= 38 {
            for h in 0..24 {
                out.push(Event { day: d, time: format!("{h:02}:00:00"), k: "h", amount: 10_000 + d * 100 + h });
            }
        }
    }
    out
}

fn events_csv() -> String {
    let mut s = String::from("ts,k,amount\n");
    for e in events() {
        s.push_str(&format!("{},{},{}\n", e.ts(), e.k, e.amount));
    }
    s
}

/// Model bodies; `{src}` stands for the events relation.
const ROWS_SQL: &str = "SELECT ts, k, amount FROM {src} WHERE ts >= @start AND ts < @end";
const DAILY_SQL: &str = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, k, count(*) AS n, CAST(sum(amount) AS BIGINT) AS total \
                         FROM {src} WHERE ts >= @start AND ts < @end GROUP BY 1, 2";
const HOURLY_SQL: &str = "SELECT CAST(date_trunc('hour', ts) AS TIMESTAMP) AS hour, k, count(*) AS n, CAST(sum(amount) AS BIGINT) AS total, \
                          min(ts) AS first_ts, max(ts) AS last_ts FROM {src} WHERE ts >= @start AND ts < @end GROUP BY 1, 2";

/// Day models cover [2026-01-01, 2026-02-10): 40 intervals; the hour model covers
/// [2026-02-08, 2026-02-10): 48 intervals.
const DAY_START: &str = "2026-01-01";
const HOUR_START: &str = "2026-02-08";
const RANGE_END: &str = "2026-02-10";

fn lua_query(sql: &str) -> String {
    format!("[[{}]]", sql.replace("{src}", "]] .. ref(raw) .. [["))
}

/// The events, in `data/events.csv` (read by the reference query, [`full_query`]) and in the
/// engine table `land.events` (read by the models).
fn batch_project(backend: StateBackend, engine: EngineBackend, batch: u32) -> Project {
    let p = Project::with(backend, engine);
    p.write("data/events.csv", &events_csv());
    p.execute_on_engine("CREATE SCHEMA land");
    p.execute_on_engine("CREATE TABLE land.events (ts TIMESTAMP, k VARCHAR, amount BIGINT)");
    let values: Vec<String> = events().iter().map(|e| format!("('{}', '{}', {})", e.ts(), e.k, e.amount)).collect();
    p.execute_on_engine(&format!("INSERT INTO land.events VALUES {}", values.join(", ")));
    p.write(
        "models/tr.lua",
        &format!(
            r#"local raw = define_model {{
  name = "raw.events",
  kind = kind.external {{ table = "land.events" }},
  schema = {{ {{ "ts", "timestamp" }}, {{ "k", "varchar" }}, {{ "amount", "bigint" }} }},
}}
define_model {{
  name = "tr.rows",
  kind = kind.incremental_by_time_range {{ time_column = "ts", start = "{DAY_START}", grain = "day", batch_size = {batch} }},
  schema = {{ {{ "ts", "timestamp" }}, {{ "k", "varchar" }}, {{ "amount", "bigint" }} }},
  query = {rows},
}}
define_model {{
  name = "tr.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "{DAY_START}", grain = "day", batch_size = {batch} }},
  schema = {{ {{ "day", "timestamp" }}, {{ "k", "varchar" }}, {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = {daily},
}}
define_model {{
  name = "tr.hourly",
  kind = kind.incremental_by_time_range {{ time_column = "hour", start = "{HOUR_START}", grain = "hour", batch_size = {batch} }},
  schema = {{ {{ "hour", "timestamp" }}, {{ "k", "varchar" }}, {{ "n", "bigint" }}, {{ "total", "bigint" }},
             {{ "first_ts", "timestamp" }}, {{ "last_ts", "timestamp" }} }},
  query = {hourly},
}}
"#,
            rows = lua_query(ROWS_SQL),
            daily = lua_query(DAILY_SQL),
            hourly = lua_query(HOURLY_SQL),
        ),
    );
    p
}

/// The body run once over the whole range directly on an in-memory DuckDB, reading the CSV.
fn full_query(p: &Project, sql: &str, start: &str) -> Rows {
    let csv = p.root().join("data/events.csv");
    let src = format!("read_csv('{}', header = true, columns = {{'ts': 'TIMESTAMP', 'k': 'VARCHAR', 'amount': 'BIGINT'}})", csv.display());
    let sql =
        sql.replace("{src}", &src).replace("@start", &format!("TIMESTAMP '{start} 00:00:00'")).replace("@end", &format!("TIMESTAMP '{RANGE_END} 00:00:00'"));
    sorted_in_memory(&sql)
}

fn count(p: &Project, sql: &str) -> usize {
    p.query(sql)[0][0].as_deref().expect("count").parse().expect("number")
}

fn backfill_equals_one_full_query(backend: StateBackend, engine: EngineBackend, batch: u32) {
    let p = batch_project(backend, engine, batch);
    let run = p.run(&["--log-level", "info", "apply", "dev", "--yes", "--json"]);
    run.expect_code(0);
    let v = run.json();
    assert_eq!(v["intervals"], serde_json::Value::from(40 + 40 + 48), "{v:#}");
    // The batch size was honoured: ⌈intervals / batch⌉ engine batches per model.
    for (model, n) in [("tr.rows", 40u32), ("tr.daily", 40), ("tr.hourly", 48)] {
        let batches = run.stderr.lines().filter(|l| l.contains("backfill batch") && l.contains(&format!("model={model} "))).count();
        assert_eq!(batches as u32, n.div_ceil(batch), "batches of `{model}` with batch_size {batch}:\n{}", run.stderr);
    }

    // Each model equals its body run once over the whole range (row multisets).
    for (model, sql, start) in [("tr.rows", ROWS_SQL, DAY_START), ("tr.daily", DAILY_SQL, DAY_START), ("tr.hourly", HOURLY_SQL, HOUR_START)] {
        let expected = full_query(&p, sql, start);
        assert!(!expected.is_empty());
        assert_eq!(p.rows(&env_view("dev", model)), expected, "`{model}` with batch_size {batch}");
    }

    // Boundary rows are counted once: exact counts from the generator.
    let all = events();
    let in_days = |e: &&Event| (0..40).contains(&e.day);
    let in_hours = |e: &&Event| (38..40).contains(&e.day);
    let rows = env_view("dev", "tr.rows");
    assert_eq!(count(&p, &format!("SELECT count(*) FROM {rows}")), all.iter().filter(in_days).count());
    let midnight = all.iter().filter(in_days).filter(|e| e.at_midnight()).count();
    assert_eq!(midnight, 42);
    assert_eq!(count(&p, &format!("SELECT count(*) FROM {rows} WHERE ts = date_trunc('day', ts)")), midnight);
    assert_eq!(count(&p, &format!("SELECT count(DISTINCT ts) FROM {rows} WHERE ts = date_trunc('day', ts)")), 40);
    let daily = env_view("dev", "tr.daily");
    assert_eq!(count(&p, &format!("SELECT CAST(sum(n) AS BIGINT) FROM {daily}")), all.iter().filter(in_days).count());
    assert_eq!(count(&p, &format!("SELECT count(DISTINCT day) FROM {daily}")), 40);

    let hourly = env_view("dev", "tr.hourly");
    assert_eq!(count(&p, &format!("SELECT CAST(sum(n) AS BIGINT) FROM {hourly}")), all.iter().filter(in_hours).count());
    let edges = all.iter().filter(in_hours).filter(|e| e.at_hour_edge()).count();
    assert_eq!(edges, 54);
    // An hour-edge event belongs to the hour it starts, never to the one it ends.
    assert_eq!(count(&p, &format!("SELECT CAST(sum(n) AS BIGINT) FROM {hourly} WHERE k = 'h'")), 48);
    assert_eq!(count(&p, &format!("SELECT count(*) FROM {hourly} WHERE k = 'h' AND first_ts = hour AND last_ts = hour AND n = 1")), 48);
    assert_eq!(count(&p, &format!("SELECT count(DISTINCT hour) FROM {hourly}")), 48);
}

crate::on_every_engine!(backfill_batch_size_1_equals_one_full_query, backfill_batch_size_30_equals_one_full_query);

fn backfill_batch_size_1_equals_one_full_query(engine: EngineBackend) {
    backfill_equals_one_full_query(StateBackend::Sqlite, engine, 1);
}

// The ledger of every batch, on both state stores.
crate::on_every_engine_and_state_backend!(backfill_batch_size_7_equals_one_full_query);

fn backfill_batch_size_7_equals_one_full_query(backend: StateBackend, engine: EngineBackend) {
    backfill_equals_one_full_query(backend, engine, 7);
}

fn backfill_batch_size_30_equals_one_full_query(engine: EngineBackend) {
    backfill_equals_one_full_query(StateBackend::Sqlite, engine, 30);
}

// ---------------------------------------------------------------------------------------------
// kill -9

/// Intervals of the slow model: one per day of [2026-01-01, 2026-01-25).
const SLOW_DAYS: usize = 24;
const SLOW_NOW: &str = "2026-01-25T00:00:00Z";

/// Rows each daily batch of the slow model scans: fewer on Postgres, whose single-threaded scan
/// is slower.
fn slow_rows(p: &Project) -> u64 {
    if p.on_postgres() { 1_000_000 } else { 8_000_000 }
}

/// A time-range model whose every daily batch scans millions of rows on one thread (~0.1 s),
/// with a full model downstream.
fn slow_project(engine: EngineBackend) -> Project {
    let mut p = Project::on_engine(engine);
    p.now = SLOW_NOW.to_string();
    // Batches share a transaction for up to 150 ms (`batch_commit_ms`): with ~0.1 s batches,
    // commits of one or two batches each, so the kills below find a backfill part done.
    let threads = if p.on_postgres() { "" } else { "threads = 1\n" };
    p.write("efmesh.toml", &p.config_with("").replace("[engine]\n", &format!("[engine]\n{threads}batch_commit_ms = 150\n")));
    p.write(
        "models/k.lua",
        &r#"local slow = define_model {
  name = "k.slow",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day", batch_size = 1 },
  schema = { { "day", "timestamp" }, { "s", "bigint" }, { "n", "bigint" } },
  query = [[
    SELECT CAST(@start AS TIMESTAMP) AS day,
           CAST(sum((i * 7 + CAST(extract(epoch FROM CAST(@start AS TIMESTAMP)) AS BIGINT)) % 1009) AS BIGINT) AS s,
           count(*) AS n
    FROM generate_series(0, LAST) AS g(i)
  ]],
}
define_model {
  name = "k.total",
  kind = kind.full(),
  schema = { { "days", "bigint" }, { "s", "bigint" }, { "n", "bigint" } },
  query = "SELECT count(*) AS days, CAST(sum(s) AS BIGINT) AS s, CAST(sum(n) AS BIGINT) AS n FROM " .. ref(slow),
}
"#
        .replace("LAST", &(slow_rows(&p) - 1).to_string()),
    );
    p
}

/// Done intervals of `k.slow` in the ledger (0 while there is no store yet).
fn done_count(p: &Project) -> usize {
    if !p.state_path().exists() {
        return 0;
    }
    match efmesh::state::SqliteStore::open(&p.state_path()).and_then(|s| s.all_done_intervals()) {
        Ok(m) => m.iter().filter(|((name, _), _)| name == "k.slow").map(|(_, v)| v.len()).sum(),
        Err(_) => 0, // being created by the process: try again
    }
}

/// Starts `apply dev --yes`, waits until the ledger holds at least `target` done intervals of
/// `k.slow`, then SIGKILLs it. Returns the done count once the process is dead.
fn apply_and_kill_at(p: &Project, target: usize) -> usize {
    let mut child = p.spawn(&["apply", "dev", "--yes"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("apply finished ({status}) before {target} intervals were done: batches are too fast to interrupt");
        }
        if done_count(p) >= target {
            break;
        }
        assert!(Instant::now() < deadline, "no progress to {target} done intervals within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(status.code().is_none(), "the process exited by itself ({status}) instead of being killed");
    if p.on_postgres() {
        // The killed client's server session finishes its statement, rolls back and ends (with
        // it efmesh's writer lock) once it finds its client gone.
        let deadline = Instant::now() + Duration::from_secs(30);
        let others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
        while p.query(others) != [[Some("0".to_string())]] {
            assert!(Instant::now() < deadline, "the killed apply's server session did not end within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    done_count(p)
}

crate::on_every_engine!(kill_mid_backfill_then_apply_converges_to_the_uninterrupted_result);

fn kill_mid_backfill_then_apply_converges_to_the_uninterrupted_result(engine: EngineBackend) {
    // The uninterrupted result, computed meanwhile in a fresh project.
    let reference_engine = engine.another();
    let reference = std::thread::spawn(move || {
        let r = slow_project(reference_engine);
        let v = r.apply("dev");
        assert_eq!(v["intervals"], serde_json::Value::from(SLOW_DAYS));
        r
    });

    let p = slow_project(engine);
    let mut done = 0;
    for step in 0..3 {
        let after = apply_and_kill_at(&p, done + 2);
        assert!(after >= done + 2 && after < SLOW_DAYS, "step {step}: {after} done");
        done = after;
        // The environment is not promoted by an interrupted apply.
        assert!(!p.state_summary().pointers.contains_key("dev"), "an interrupted apply promoted `dev`");
    }

    let resumed = p.apply("dev");
    // Only what the ledger lacks is recomputed.
    assert_eq!(resumed["intervals"], serde_json::Value::from(SLOW_DAYS - done), "{resumed:#}");
    assert_eq!(string_set(&resumed["built"]), set(&["k.slow", "k.total"]));

    let reference = reference.join().expect("reference apply");
    for model in ["k.slow", "k.total"] {
        let got = p.rows(&env_view("dev", model));
        assert_eq!(got, reference.rows(&env_view("dev", model)), "`{model}` after kill + re-apply");
    }
    let slow = p.rows(&env_view("dev", "k.slow"));
    assert_eq!(slow.len(), SLOW_DAYS, "missing or duplicated days");
    let total = p.rows(&env_view("dev", "k.total"));
    assert_eq!(total[0][0].as_deref(), Some("24"));
    assert_eq!(total[0][2], Some((SLOW_DAYS as u64 * slow_rows(&p)).to_string()));
    // Nothing left to do afterwards.
    assert_eq!(p.plan("dev")["hasChanges"], serde_json::Value::Bool(false));
}

// ---------------------------------------------------------------------------------------------
// A table storing a column narrower than the query returns it

#[test]
fn a_value_a_time_range_tables_narrower_column_would_round_is_refused_before_the_model_writes() {
    // The table was created with the query's types (`DECIMAL(38,2)`, a sum of `DECIMAL(10,2)`);
    // the source widened since (four decimals): the new day's 2.3456 would be stored as 2.35.
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.sales (ts TIMESTAMP, amount DECIMAL(10,2))");
    p.execute_on_engine("INSERT INTO land.sales VALUES (TIMESTAMP '2026-01-01 10:00', 1.25)");
    p.now = "2026-01-02T01:00:00Z".into();
    p.write(
        "models/m.lua",
        r#"define_model { name = "raw.sales", kind = kind.external { table = "land.sales" }, schema = { { "ts", "timestamp" }, { "amount", "decimal(10,2)" } } }
define_model {
  name = "t.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "timestamp" }, { "amount", "decimal(38,4)" } },
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, sum(amount) AS amount FROM " .. ref("raw.sales") .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}
"#,
    );
    p.apply("prod");
    p.execute_on_engine("ALTER TABLE land.sales ALTER COLUMN amount SET DATA TYPE DECIMAL(18,4)");
    p.execute_on_engine("INSERT INTO land.sales VALUES (TIMESTAMP '2026-01-02 10:00', 2.3456)");
    p.now = "2026-01-03T01:00:00Z".into();
    let days = |p: &Project| p.query("SELECT CAST(CAST(day AS DATE) AS VARCHAR), CAST(amount AS VARCHAR) FROM t.daily ORDER BY 1");
    let before = days(&p);
    let run = p.run(&["run", "prod"]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("models/m.lua:2")
            && run.stderr.contains(
                "column `amount`: the query returns `DECIMAL(38,4)` but the table stores `DECIMAL(38,2)`, which would change 1 of its values in [2026-01-02"
            )
            && run.stderr.contains("2.3456 → 2.35"),
        "{}",
        run.stderr
    );
    assert_eq!(days(&p), before, "nothing written");
    // Values the stored type holds as they are go in, the types still differing.
    p.execute_on_engine("UPDATE land.sales SET amount = 2.34 WHERE amount = 2.3456");
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p).last().and_then(|r| r[1].clone()).as_deref(), Some("2.34"));
}

#[test]
fn a_daily_run_over_a_parent_computed_in_the_same_run_is_not_refused_for_types_only_its_declaration_gives() {
    // `t.avg` is declared `decimal(18,4)` while its query returns DOUBLE (the contract compares
    // type families), so both tables store DOUBLE. The contract check types `t.avg` as declared
    // while the run computes it: the check of stored types must read the query as built.
    let mut p = Project::new();
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.ev (ts TIMESTAMP, v INTEGER)");
    p.execute_on_engine("INSERT INTO land.ev VALUES (TIMESTAMP '2026-01-01 10:00', 1), (TIMESTAMP '2026-01-01 11:00', 2), (TIMESTAMP '2026-01-01 12:00', 2)");
    p.now = "2026-01-02T01:00:00Z".into();
    p.write(
        "models/m.lua",
        r#"define_model { name = "raw.ev", kind = kind.external { table = "land.ev" }, schema = { { "ts", "timestamp" }, { "v", "integer" } } }
define_model {
  name = "t.avg", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "timestamp" }, { "avg_v", "decimal(18,4)" } },
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, avg(v) AS avg_v FROM " .. ref("raw.ev") .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}
define_model {
  name = "t.copy", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "timestamp" }, { "avg_v", "decimal(18,4)" } },
  query = "SELECT day, avg_v FROM " .. ref("t.avg") .. " WHERE day >= @start AND day < @end",
}
"#,
    );
    p.apply("prod");
    // An average of 5/3: not a value `decimal(18,4)` holds.
    p.execute_on_engine("INSERT INTO land.ev VALUES (TIMESTAMP '2026-01-02 10:00', 1), (TIMESTAMP '2026-01-02 11:00', 2), (TIMESTAMP '2026-01-02 12:00', 2)");
    p.now = "2026-01-03T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    let rows = p.query("SELECT CAST(avg_v AS VARCHAR) FROM t.copy ORDER BY day");
    assert_eq!(rows.len(), 2, "{rows:?}");
}
