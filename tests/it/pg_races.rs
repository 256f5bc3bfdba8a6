//! Two efmesh processes on one engine database and one state store at once — the races a hunt
//! with two checkouts sharing a Postgres database found: a writer stamping the engine epoch
//! between a plan's catalog read and its check, a writer whose plan another writer made stale
//! while it waited for the engine, a view dropped under a catalog read, and `status --check`
//! reading an environment while a promotion moves its views. Each race is made to happen by a
//! test hook holding one process at the point in question (`EFMESH_DELAY`, run through
//! `engine_record::run_held`) or, on Postgres, by a session holding a lock; where it exists on
//! both engines, it is run on both.

use crate::common::*;
use crate::engine_record::run_held;
use crate::{on_every_engine, pg};
use serde_json::Value;

/// A full model generating events over four months of 2026 and a daily time-range model over
/// it, in SQL both engines run alike (as `engines.rs`'s portable project): each `--now` a few
/// days later gives `run` intervals to compute, so it writes tables (and raises the engine
/// epoch) and the state store.
const MODELS: &str = r#"local M = {}
M.events = define_model {
  name = "s.events",
  kind = kind.full(),
  schema = { { "id", "integer" }, { "happened_at", "timestamp" } },
  query = [[SELECT CAST(i AS INTEGER) AS id, TIMESTAMP '2026-01-01 00:00:00' + i * INTERVAL '7 hours' AS happened_at
            FROM generate_series(1, 400) AS g(i)]],
}
M.daily = define_model {
  name = "s.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day" },
  schema = { { "day", "timestamp" }, { "n", "bigint" } },
  query = "SELECT date_trunc('day', happened_at) AS day, count(*) AS n FROM " .. ref(M.events) .. " WHERE happened_at >= @start AND happened_at < @end GROUP BY 1",
}
return M
"#;

/// [`MODELS`] on `engine` (its state in SQLite), at 2026-01-03.
fn days_project(engine: EngineBackend) -> Project {
    let mut p = Project::on_engine(engine);
    p.write("models/m.lua", MODELS);
    p.now = "2026-01-03T00:00:00Z".to_string();
    p
}

/// Whether a logfmt line of `run_held` is the test hook's delay at `point`.
fn delayed_at(point: &str) -> impl Fn(&str) -> bool {
    let at = format!("point={point}");
    move |l: &str| l.contains("test hook: delaying") && l.contains(&at)
}

/// A writer that stamps the engine database and records the later epoch in the state store
/// between a plan's read of the catalog and its check (another process's `run prod`, while
/// `plan prod` and `status prod --check` are held by the test hook `plan-after-catalog`) does
/// not make the database look older than the store: the store's epoch is read before the
/// catalog, and a writer stamps before it records. (Read after it, the run's epoch was taken
/// for one the database lacked: `the engine database … is older than the state store …`, about
/// 3 % of the reads beside a `run` loop on Postgres.)
fn a_writer_between_a_plans_catalog_read_and_its_check_does_not_make_the_database_look_behind(engine: EngineBackend) {
    let mut p = days_project(engine);
    p.apply("prod");
    for (args, now) in [(&["plan", "prod"][..], "2026-01-06T00:00:00Z"), (&["status", "prod", "--check"][..], "2026-01-09T00:00:00Z")] {
        p.now = now.to_string();
        let (code, seen) = run_held(&p, args, "plan-after-catalog=2500", delayed_at("plan-after-catalog"), |_| {
            let run = p.run(&["run", "prod"]);
            run.expect_code(0);
            assert!(run.stdout.contains("processed"), "the run writes tables (it raises the epoch): {}", run.stdout);
        });
        assert!(!seen.contains("is older than the state store"), "{args:?}: {seen}");
        assert_eq!(code, Some(0), "{args:?}: {seen}");
    }
}

/// A `run` or `apply` whose plan another writer made stale — another environment's `run`
/// writing the state store between its plan and its engine open (`apply-before-open`; on
/// Postgres, a writer whose engine lock it waited for and got within the second it asks) — is
/// refused as a stale plan without `--retries`, as before; with `--retries` it plans again and
/// goes on (`run` always; `apply --yes` because the new plan leads to the versions shown), as
/// `--retries` promises: no error tick, the environment healthy.
fn a_plan_made_stale_by_another_writer_is_planned_again_under_retries(engine: EngineBackend) {
    let mut p = days_project(engine);
    p.apply("prod");
    p.apply("dev");
    let held = |p: &Project, args: &[&str]| {
        run_held(p, args, "apply-before-open=1500", delayed_at("apply-before-open"), |_| {
            p.run(&["run", "prod"]).expect_code(0);
        })
    };
    p.now = "2026-01-06T00:00:00Z".to_string();
    let (code, seen) = held(&p, &["run", "dev"][..]);
    assert!(seen.contains("the state store changed since this plan of `dev` was computed"), "the hold makes the plan stale: {seen}");
    assert_eq!(code, Some(1), "{seen}");

    p.now = "2026-01-09T00:00:00Z".to_string();
    let (code, seen) = held(&p, &["run", "dev", "--retries", "2"][..]);
    assert!(seen.contains("another apply or run wrote the state store since this attempt's plan") && seen.contains("planning again"), "{seen}");
    assert_eq!(code, Some(0), "{seen}");
    let status = p.run(&["status", "dev", "--check", "--json"]);
    status.expect_code(0);
    let ticks = status.json()["ticks"].clone();
    assert!(matches!(ticks[0]["outcome"].as_str(), Some("nothing-due" | "processed")), "the newest tick is the retried run's: {ticks:#}");
    assert_eq!(ticks[1]["outcome"], "error", "the run refused without retries: {ticks:#}");

    // A new environment's apply: its plan (the versions shown) is the same when planned again.
    p.now = "2026-01-12T00:00:00Z".to_string();
    let (code, seen) = held(&p, &["apply", "qa", "--yes", "--retries", "2"][..]);
    assert!(seen.contains("planning again"), "{seen}");
    assert_eq!(code, Some(0), "{seen}");
    assert!(!p.store().expect("store").env_pointers("qa").expect("pointers").is_empty(), "`qa` promoted");
}

/// `status --check` while another process promotes the environment (held by the test hook
/// `after-view-swap`: its views moved, its pointers not yet recorded) reports the promotion in
/// progress, never damage: not ``environment `dev` does not exist`` during its first promotion,
/// not ``view … does not select from the served version`` during a later one (which it said on
/// Postgres, where readers see the swap at once). On DuckDB the promoting process holds the file
/// and the check cannot read its catalog: nothing is judged there either. Once the promotion is
/// recorded the environment is healthy, nothing in progress.
fn status_during_a_promotion_reports_it_in_progress_never_damage(engine: EngineBackend) {
    let p = days_project(engine);
    p.apply("prod");
    let check = |p: &Project| {
        let r = p.run(&["status", "dev", "--check", "--json"]);
        let v = r.json();
        assert!(v["problems"].as_array().is_some_and(Vec::is_empty), "{v:#}\n{}", r.stderr);
        assert!(v["lostRelations"].as_array().is_some_and(Vec::is_empty), "{v:#}");
        r.expect_code(0);
        v
    };
    // Its first promotion: the environment is being created.
    let (code, seen) = run_held(&p, &["apply", "dev", "--yes"], "after-view-swap=6000", delayed_at("after-view-swap"), |_| {
        let v = check(&p);
        assert_eq!((&v["exists"], &v["promotionInProgress"]), (&Value::Bool(false), &Value::Bool(true)), "{v:#}");
        let text = p.run(&["status", "dev"]);
        assert!(
            text.stdout.contains("environment `dev` is being created: its first promotion is under way") && !text.stdout.contains("does not exist"),
            "{text:#?}"
        );
    });
    assert_eq!(code, Some(0), "{seen}");
    // A promotion moving `dev`'s view of `s.daily` to a new version (other data: a table of its own).
    p.write("models/m.lua", &MODELS.replace("count(*) AS n", "count(*) * 2 AS n"));
    let (code, seen) = run_held(&p, &["apply", "dev", "--yes"], "after-view-swap=8000", delayed_at("after-view-swap"), |_| {
        let v = check(&p);
        assert_eq!(v["exists"], Value::Bool(true), "{v:#}");
        if p.on_postgres() {
            assert_eq!(v["promotionInProgress"], Value::Bool(true), "{v:#}");
            let text = p.run(&["status", "dev"]);
            assert!(text.stdout.contains("promotion: one of `dev` is under way") && text.stdout.contains("health: ok"), "{text:#?}");
        }
    });
    assert_eq!(code, Some(0), "{seen}");
    let v = check(&p);
    assert_eq!(v["promotionInProgress"], Value::Bool(false), "{v:#}");
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

on_every_engine!(
    a_writer_between_a_plans_catalog_read_and_its_check_does_not_make_the_database_look_behind,
    a_plan_made_stale_by_another_writer_is_planned_again_under_retries,
    status_during_a_promotion_reports_it_in_progress_never_damage,
);

/// A view another session drops while a catalog read lists it (here: an application's own view,
/// dropped inside a transaction holding its table, so the catalog query's `pg_get_viewdef`
/// waits for that table and then finds the view gone; a promotion dropping and re-creating an
/// environment's view meets readers the same way) is read again: `status --check` and `plan`
/// succeed, never showing the server's `could not open relation with OID …`.
#[test]
fn a_view_dropped_while_the_catalog_is_read_is_read_again_never_reported() {
    let Some(t) = pg::fresh_database() else { return };
    let p = days_project(EngineBackend::Postgres(t.clone()));
    p.apply("dev");
    t.client().batch_execute("CREATE SCHEMA etl; CREATE TABLE etl.src (x int)").expect("another application's table");
    let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname IN ('src', 'report') AND NOT l.granted";
    for args in [&["status", "dev", "--check"][..], &["plan", "dev"]] {
        t.client().batch_execute("CREATE VIEW etl.report AS SELECT x FROM etl.src").expect("its view");
        let mut holder = t.client();
        holder.batch_execute("BEGIN; LOCK TABLE etl.src IN ACCESS EXCLUSIVE MODE; DROP VIEW etl.report").expect("drop the view under its table's lock");
        let mut reader = p.command(args).spawn().expect("spawn efmesh");
        // Until the catalog query waits for the view or its table (the view still listed in its
        // snapshot), within the 3 s a read-only command waits for a lock.
        let mut watcher = t.client();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while watcher.query_one(waiting, &[]).expect("pg_locks").get::<_, i64>(0) == 0 {
            if reader.try_wait().expect("poll efmesh").is_some() {
                let r = Run::from_output(reader.wait_with_output().expect("wait efmesh"), format!("{args:?}"));
                panic!("{args:?} ended before reading the view: {r:#?}");
            }
            assert!(std::time::Instant::now() < deadline, "{args:?} never waited for the table under the view");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        holder.batch_execute("COMMIT").expect("commit the drop");
        let r = Run::from_output(reader.wait_with_output().expect("wait efmesh"), format!("{args:?}"));
        assert!(!r.stderr.contains("could not open relation") && !r.stderr.contains("OID"), "{r:#?}");
        r.expect_code(0);
    }
}
