//! Self-referencing incremental models (issue #16 part 8): `@this` reads the model's own table
//! (its previous rows), empty on the first build; a time-range model reading itself runs one
//! interval per batch, and a restatement of it runs to its end.

use crate::common::{EngineBackend, Project, Rows};
use crate::on_every_engine;

on_every_engine!(
    a_running_total_reading_its_previous_day_equals_a_recomputation_after_30_daily_runs,
    a_restatement_of_a_self_referencing_model_recomputes_every_later_interval,
    a_unique_key_model_reads_its_previous_rows,
    a_start_moved_earlier_recomputes_every_later_interval,
);

/// `s.sales` (the engine table `raw.sales`: one amount a day, January and February 2026) and
/// `t.running`, the running total reading yesterday's total from its own table.
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.execute_on_engine(&format!("CREATE SCHEMA raw; CREATE TABLE raw.sales (day date, amount bigint); INSERT INTO raw.sales VALUES {}", sales()));
    p.write("models/sales.sql", "-- name: s.sales\n-- kind: external(table = raw.sales)\n-- schema: day date, amount bigint\n");
    p.write(
        "models/running.sql",
        "-- name: t.running
-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = day)
-- schema: day date, amount bigint, total bigint
-- refs: s.sales
SELECT s.day, s.amount, s.amount + coalesce((SELECT p.total FROM @this AS p WHERE p.day = s.day - 1), 0) AS total
FROM @ref(s.sales) AS s
WHERE s.day BETWEEN @start_date AND @end_date
",
    );
    p
}

/// The rows of `raw.sales`: day `d` of the year has amount `d * 7 % 11 + 1`.
fn sales() -> String {
    let rows: Vec<String> = (1..=59u32)
        .map(|d| {
            let (m, dd) = if d <= 31 { (1, d) } else { (2, d - 31) };
            format!("(DATE '2026-{m:02}-{dd:02}', {})", d * 7 % 11 + 1)
        })
        .collect();
    rows.join(", ")
}

/// What the environment serves of `t.running`.
fn served(p: &Project) -> Rows {
    p.query("SELECT CAST(day AS varchar), amount, total FROM dev__t.running ORDER BY day")
}

/// The running total computed from scratch (a window over the source table, no efmesh) over the days before `until`.
fn window(p: &Project, until: &str) -> Rows {
    p.query(&format!(
        "SELECT CAST(day AS varchar), amount, CAST(sum(amount) OVER (ORDER BY day) AS bigint) FROM raw.sales WHERE day < DATE '{until}' ORDER BY day"
    ))
}

fn a_running_total_reading_its_previous_day_equals_a_recomputation_after_30_daily_runs(engine: EngineBackend) {
    let mut p = project(engine);
    p.now = "2026-01-02T00:00:00Z".into();
    p.apply("dev");
    assert_eq!(served(&p).len(), 1, "the first build read an empty table: {:?}", served(&p));
    for day in 3..=32u32 {
        let (m, d) = if day <= 31 { (1, day) } else { (2, day - 31) };
        p.now = format!("2026-{m:02}-{d:02}T00:00:00Z");
        p.run(&["run", "dev"]).expect_code(0);
    }
    let got = served(&p);
    assert_eq!(got.len(), 31, "{got:?}");
    assert_eq!(got, window(&p, "2026-02-01"), "30 daily runs give the running total a from-scratch computation gives");

    // A from-scratch backfill of the same month (one apply) runs one day per batch: each day
    // reads the one before.
    let mut q = project(p.engine.another());
    q.now = "2026-02-01T00:00:00Z".into();
    let plan = q.run(&["render", "t.running", "--env", "dev", "--interval", "2026-01-01", "2026-01-04", "--json"]).expect_code(0).json();
    assert_eq!(plan["batchSize"], 1, "{plan:#}");
    assert_eq!(plan["batches"].as_array().map(Vec::len), Some(3), "{plan:#}");
    q.apply("dev");
    assert_eq!(served(&q), got, "one backfill equals 30 daily runs");
}

fn a_restatement_of_a_self_referencing_model_recomputes_every_later_interval(engine: EngineBackend) {
    let mut p = project(engine);
    p.now = "2026-02-01T00:00:00Z".into();
    p.apply("dev");
    // Late data for 10 January; restating that day alone must carry into every later total.
    p.execute_on_engine("UPDATE raw.sales SET amount = 1000 WHERE day = DATE '2026-01-10'");
    let v = p.run(&["restate", "dev", "--model", "t.running", "--from", "2026-01-10", "--to", "2026-01-11", "--json"]).expect_code(0).json();
    assert_eq!(v["restated"][0]["to"], "2026-02-01T00:00:00.000Z", "restated to its last done interval: {v:#}");
    assert_eq!(v["restated"][0]["intervals"], 22, "{v:#}");
    p.run(&["run", "dev"]).expect_code(0);
    let got = served(&p);
    assert_eq!(got, window(&p, "2026-02-01"), "every total after the restated day includes the late amount");
    assert!(got.iter().any(|r| r[1].as_deref() == Some("1000")), "{got:?}");
}

/// The new first days are computed, and every day after them again: each read the day before,
/// which did not exist then.
fn a_start_moved_earlier_recomputes_every_later_interval(engine: EngineBackend) {
    let mut p = project(engine);
    p.write("models/running.sql", &p.read("models/running.sql").replace("start = 2026-01-01", "start = 2026-01-05"));
    p.now = "2026-01-20T00:00:00Z".into();
    p.apply("dev");
    p.write("models/running.sql", &p.read("models/running.sql").replace("start = 2026-01-05", "start = 2026-01-01"));
    let plan = p.run(&["plan", "dev", "--json"]).expect_code(0).json();
    let action = plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == "t.running").cloned().unwrap_or_default();
    assert_eq!(action["recompute"]["because"], serde_json::json!(["t.running"]), "{action:#}");
    assert_eq!(action["recompute"]["readsItself"], serde_json::json!(true), "{action:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("recomputed: its query reads its own table (`@this`)") && !text.contains("another version of it"), "{text}");
    p.apply("dev");
    assert_eq!(served(&p), window(&p, "2026-01-20"), "every total from the new start on");
}

/// A day its signal holds back holds every later day too (each reads the one before); once it
/// lands, the run computes it and the days after it.
#[test]
fn a_day_waiting_on_its_signal_holds_every_later_day() {
    let mut p = project(EngineBackend::DuckDb);
    let landing = crate::signals::landing_with_file_signal(&p);
    let land = |day: &str| fs_err::write(landing.join(format!("{day}.csv")), "").unwrap();
    p.write(
        "models/running.sql",
        &p.read("models/running.sql").replace("-- refs:", &format!("-- signals: file_exists(dir = '{}')\n-- refs:", landing.display())),
    );
    for d in ["2026-01-01", "2026-01-02"] {
        land(d);
    }
    p.now = "2026-01-03T00:00:00Z".into();
    p.apply("dev");
    for d in ["2026-01-04", "2026-01-05"] {
        land(d);
    }
    p.now = "2026-01-06T00:00:00Z".into();
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    let waiting = &v["waiting"][0];
    assert_eq!((waiting["model"].as_str(), waiting["intervals"].as_array().map(Vec::len)), (Some("t.running"), Some(3)), "{v:#}");
    assert_eq!(served(&p), window(&p, "2026-01-03"), "nothing after the waiting day");
    land("2026-01-03");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(served(&p), window(&p, "2026-01-06"));
}

fn a_unique_key_model_reads_its_previous_rows(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write(
        "models/visits.sql",
        "-- name: t.visits\n-- kind: incremental_by_unique_key(key = k)\n-- schema: k integer, n bigint\n\
         SELECT s.k, CAST(coalesce((SELECT t.n FROM @this AS t WHERE t.k = s.k), 0) + s.k AS bigint) AS n FROM (VALUES (1), (2)) AS s(k)\n",
    );
    p.apply("dev");
    let rows = || p.query("SELECT k, n FROM dev__t.visits ORDER BY k");
    assert_eq!(rows(), vec![vec![Some("1".into()), Some("1".into())], vec![Some("2".into()), Some("2".into())]], "the first build read no rows");
    p.run(&["run", "dev"]).expect_code(0);
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(rows(), vec![vec![Some("1".into()), Some("3".into())], vec![Some("2".into()), Some("6".into())]], "each run added to what the table held");
}

#[test]
fn this_outside_incremental_models_is_a_load_error() {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("models/a.sql", "-- name: m.a\n-- kind: full\n-- schema: x integer\nSELECT x FROM @this\n");
    let out = p.run(&["plan", "dev"]);
    out.expect_code(1);
    assert!(out.stderr.contains("models/a.sql") && out.stderr.contains("`@this` used in a `full` model"), "{}", out.stderr);
}
