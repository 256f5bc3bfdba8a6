//! Property-style crash test (issue 10): seeded, reproducible random sequences of (edit a model
//! of a small project, apply dev / apply prod, run, the process aborted at a random point by the
//! `EFMESH_FAULT` test hook). After each step and the command that follows it, every
//! environment's views must equal a from-scratch build, on a fresh in-memory DuckDB, of the
//! versions the state store says the environment serves (from their snapshots' SQL).
//!
//! A step without a fault point may instead be killed (SIGKILL) after a seeded random delay,
//! wherever the command then is; a second property kills every command so, at any instant.
//!
//! `EFMESH_PROPERTY_SEED=<n>` replays one sequence; the default runs a few fixed seeds. It runs
//! on both engines: on Postgres the from-scratch build is made in a database of its own on the
//! same server.

use crate::common::*;
use crate::on_every_engine;
use efmesh::apply::fault::FAULT_ENV;
use efmesh::engine::Engine;
use efmesh::engine::duckdb::DuckDb;
use efmesh::engine::postgres::Postgres;
use std::time::{Duration, Instant};

/// Steps per sequence (bounded so the whole test takes seconds).
const STEPS: usize = 10;

/// The models in topological order, with the time column of the time-range one.
const MODELS: [(&str, Option<&str>); 4] = [("s.a", None), ("s.b", None), ("s.c", None), ("t.daily", Some("day"))];

/// The first interval of `t.daily` and the day `NOW` falls on (so the last wanted interval ends there).
const START: &str = "2026-01-01";
const NOW_DAY: &str = "2026-02-10";

/// xorshift64*: small, deterministic, good enough to pick steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What the project's files say: one variant per editable aspect.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Variant {
    /// `s.a`'s rows and labels (breaking edits).
    a: usize,
    /// `s.a`'s description (a metadata edit).
    a_description: bool,
    /// `s.b`'s multiplier (a breaking edit of a view).
    b: usize,
    /// `t.daily`'s batch size (a metadata edit).
    daily_batch: usize,
}

fn write_project(p: &Project, v: Variant) {
    let description = if v.a_description { "  description = \"the numbers\",\n" } else { "" };
    p.write(
        "models/a.lua",
        &format!(
            r#"return define_model {{
  name = "s.a",
{description}  kind = kind.full(),
  schema = {{ {{ "id", "integer" }}, {{ "label", "varchar" }} }},
  query = "SELECT CAST(range AS INTEGER) AS id, 'v{a}' AS label FROM generate_series(1, {n}) AS g(range)",
}}
"#,
            a = v.a,
            // `range(1, 5 + 3a)`: the end is inclusive.
            n = 4 + 3 * v.a
        ),
    );
    p.write(
        "models/b.lua",
        &format!(
            r#"local a = require("a")
define_model {{
  name = "s.b",
  kind = kind.view(),
  schema = {{ {{ "id", "integer" }}, {{ "label", "varchar" }}, {{ "x", "integer" }} }},
  query = "SELECT id, label, id * {m} AS x FROM " .. ref(a) .. " WHERE id > 1",
}}
define_model {{
  name = "s.c",
  kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "total", "bigint" }} }},
  query = "SELECT count(*) AS n, CAST(sum(x) AS BIGINT) AS total FROM " .. ref("s.b"),
}}
define_model {{
  name = "t.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "{START}", grain = "day", batch_size = {batch} }},
  schema = {{ {{ "day", "timestamp" }}, {{ "id", "integer" }}, {{ "label", "varchar" }} }},
  query = "SELECT day, id, label FROM (SELECT CAST(TIMESTAMP '{START}' + id * 3 * INTERVAL '1 day' AS TIMESTAMP) AS day, id, label FROM " .. ref(a) .. ") AS q WHERE day >= @start AND day < @end",
}}
"#,
            m = 2 + v.b,
            batch = [10, 25][v.daily_batch]
        ),
    );
}

/// Where from-scratch builds are made: a fresh in-memory DuckDB each time, or a database of the
/// test Postgres that no project uses, emptied each time.
enum Scratch {
    DuckDb,
    Postgres(String),
}

impl Scratch {
    fn for_project(p: &Project) -> Scratch {
        match &p.engine {
            EngineBackend::DuckDb => Scratch::DuckDb,
            EngineBackend::Postgres(_) => Scratch::Postgres(crate::pg::fresh_database().expect("a scratch Postgres database").url),
        }
    }

    /// An empty engine of the project's kind with the schemas `s` and `t`.
    fn fresh(&self) -> Box<dyn Engine> {
        let mut db: Box<dyn Engine> = match self {
            Scratch::DuckDb => Box::new(DuckDb::in_memory().expect("in-memory duckdb")),
            Scratch::Postgres(url) => {
                let mut db = Postgres::open(url, false).expect("open the scratch Postgres database");
                db.execute("DROP SCHEMA IF EXISTS s CASCADE; DROP SCHEMA IF EXISTS t CASCADE;").expect("empty the scratch database");
                Box::new(db)
            }
        };
        db.execute("CREATE SCHEMA s; CREATE SCHEMA t;").expect("schemas");
        db
    }

    /// Every row of `relation`, every value as text, sorted (as [`Project::rows`]).
    fn rows(&self, db: &mut dyn Engine, relation: &str) -> Rows {
        let sql = match self {
            Scratch::DuckDb => format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}"),
            Scratch::Postgres(_) => format!("SELECT * FROM {relation}"),
        };
        let mut rows = db.query(&sql).expect("fresh rows");
        rows.sort();
        rows
    }
}

/// Every environment's views against a from-scratch build of the versions its pointers name.
#[track_caller]
fn check_environments(p: &Project, scratch: &Scratch, log: &str) {
    let state = p.state();
    assert_eq!(state.pending_promotions().expect("pending"), vec![], "a promotion is still under way\n{log}");
    for env in state.environments().expect("environments") {
        let pointers = state.env_pointers(&env).expect("pointers");
        let mut fresh = scratch.fresh();
        for (name, time_column) in MODELS {
            let Some(fp) = pointers.get(name) else { continue };
            let snapshot =
                state.snapshot(name, fp).expect("snapshot").unwrap_or_else(|| panic!("`{env}` points at `{name}` {fp}, which has no snapshot\n{log}"));
            let sql = snapshot.rendered_sql.replace("$start", &format!("TIMESTAMP '{START}'")).replace("$end", &format!("TIMESTAMP '{NOW_DAY}'"));
            let sql = match time_column {
                Some(tc) => format!("SELECT * FROM ({sql}) AS q WHERE {tc} >= TIMESTAMP '{START}' AND {tc} < TIMESTAMP '{NOW_DAY}'"),
                None => sql,
            };
            fresh.execute(&format!("CREATE TABLE {name} AS {sql}")).unwrap_or_else(|e| panic!("fresh build of `{name}`: {e}\n{log}"));
            let want = scratch.rows(fresh.as_mut(), name);
            let served = p.rows(&env_view(&env, name));
            assert_eq!(served, want, "`{env}` serves `{name}` unlike a fresh build of the version its pointer names ({fp})\n{log}");
        }
    }
}

/// Waits until no other session is connected to a Postgres project's engine database: a
/// killed client's server session finishes its statement, then rolls back and ends.
fn wait_for_killed_sessions(p: &Project, log: &str) {
    if !p.on_postgres() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
    while p.query(others) != [[Some("0".to_string())]] {
        assert!(Instant::now() < deadline, "a killed command's server session did not end within 30 s\n{log}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs one sequence; returns how many steps crashed at a fault point, how many promotions
/// were undone and how many commands were killed before they finished. With `kill_every_step`
/// no fault point is armed and every command is killed after 0 to 100 ms instead.
fn run_sequence(engine: &EngineBackend, seed: u64, kill_every_step: bool) -> (usize, usize, usize) {
    let p = Project::on_engine(engine.another());
    let scratch = Scratch::for_project(&p);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // Kills draw from their own stream, so a seed's edits, commands and fault points stay as
    // they were before kills were added.
    let mut kills = Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03) | 1);
    let mut v = Variant { a: 0, a_description: false, b: 0, daily_batch: 0 };
    write_project(&p, v);
    let mut log = format!("EFMESH_PROPERTY_SEED={seed}\n");
    p.apply("prod");
    log.push_str("apply prod\n");
    check_environments(&p, &scratch, &log);
    let (mut crashes, mut undone, mut killed) = (0, 0, 0);
    let faults = ["", "", "before-intent", "after-intent", "after-view-swap", "after-build:s.a", "after-build:s.c", "after-build:t.daily"];
    for step in 0..STEPS {
        // Mostly an edit (so the command has work and the fault point is reached), sometimes
        // none (a repeated apply, a view-swap promotion of what the other environment has).
        match rng.below(6) {
            0 | 1 => v.a = (v.a + 1 + rng.below(2)) % 3,
            2 => v.a_description = !v.a_description,
            3 => v.b ^= 1,
            4 => v.daily_batch ^= 1,
            _ => {}
        }
        write_project(&p, v);
        let env = ["dev", "prod"][rng.below(2)];
        let fault = faults[rng.below(faults.len())];
        let fault = if kill_every_step { "" } else { fault };
        // Sequential or parallel builds, whatever the machine's cores (SPEC §4 invariant 45).
        let jobs = ["1", "2"][rng.below(2)];
        let args: Vec<&str> = if rng.below(5) == 0 { vec!["run", env, "--jobs", jobs] } else { vec!["apply", env, "--yes", "--jobs", jobs] };
        let mut cmd = p.command(&args);
        if !fault.is_empty() {
            cmd.env(FAULT_ENV, fault);
        }
        // Half the steps without a fault point are killed after 0 to 300 ms (every step after 0
        // to 50 ms with `kill_every_step`: a command of this small project on a local server can
        // be done in well under 100 ms, and most must be caught under way).
        let kill_after = if kill_every_step {
            Some(Duration::from_millis(kills.below(51) as u64))
        } else {
            (fault.is_empty() && kills.below(2) == 0).then(|| Duration::from_millis(kills.below(301) as u64))
        };
        let (code, stderr, was_killed) = match kill_after {
            None => {
                let out = cmd.output().expect("spawn efmesh");
                (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), false)
            }
            Some(after) => {
                let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().expect("spawn efmesh");
                let deadline = Instant::now() + after;
                while Instant::now() < deadline && child.try_wait().expect("try_wait").is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Does nothing when the command already finished.
                let _ = child.kill();
                let status = child.wait().expect("wait");
                (status.code().unwrap_or(-1), String::new(), status.code().is_none())
            }
        };
        let kill_note =
            kill_after.map(|d| format!(" (SIGKILL after {} ms{})", d.as_millis(), if was_killed { "" } else { ": finished before" })).unwrap_or_default();
        log.push_str(&format!("step {step}: {v:?}; {FAULT_ENV}={fault} efmesh {} -> {code}{kill_note}\n", args.join(" ")));
        let aborted = stderr.contains("(test hook)");
        crashes += usize::from(aborted);
        killed += usize::from(was_killed);
        wait_for_killed_sessions(&p, &log);
        // Without a crash, an apply succeeds and a run either refreshes or waits for an apply.
        let fine = if was_killed {
            true
        } else if aborted {
            code != 0
        } else if args[0] == "run" {
            code == 0 || code == 2
        } else {
            code == 0
        };
        assert!(fine, "unexpected exit {code}\n{log}--- stderr\n{stderr}");
        // The next commands (here: a plan of each environment) see one consistent answer.
        for e in ["dev", "prod"] {
            let r = p.run(&["plan", e, "--json"]);
            assert_eq!(r.code, 0, "plan {e} after the step\n{log}--- stderr\n{}", r.stderr);
            if r.stderr.contains("interrupted promotion") {
                undone += 1;
                log.push_str(&format!("  plan {e}: undid an interrupted promotion\n"));
            }
        }
        check_environments(&p, &scratch, &log);
    }
    // Whatever happened, applying the project to both environments converges.
    for env in ["dev", "prod"] {
        p.apply(env);
        assert_eq!(p.plan(env)["hasChanges"], false, "{log}");
    }
    check_environments(&p, &scratch, &log);
    (crashes, undone, killed)
}

on_every_engine!(random_edits_applies_runs_and_crashes_keep_views_equal_to_what_the_state_says);

fn random_edits_applies_runs_and_crashes_keep_views_equal_to_what_the_state_says(engine: EngineBackend) {
    let seeds: Vec<u64> = match std::env::var("EFMESH_PROPERTY_SEED") {
        Ok(s) => vec![s.parse().expect("EFMESH_PROPERTY_SEED is a number")],
        Err(_) => vec![1, 2, 3],
    };
    let (mut crashes, mut undone, mut killed) = (0, 0, 0);
    for seed in seeds {
        let (c, u, k) = run_sequence(&engine, seed, false);
        crashes += c;
        killed += k;
        undone += u;
    }
    eprintln!("crash property: {crashes} crashes, {undone} interrupted promotions undone, {killed} commands killed");
    // The sequences are seeded: they must exercise crashes, interrupted promotions included.
    assert!(crashes >= 3 && undone >= 1, "too few faults exercised: {crashes} crashes, {undone} promotions undone");
}

on_every_engine!(random_edits_applies_and_runs_killed_at_random_instants_keep_views_equal_to_what_the_state_says);

/// kill -9 at any instant: every command of the sequence is SIGKILLed after a seeded random
/// delay, wherever it then is (planning, building, swapping views, recording the promotion).
fn random_edits_applies_and_runs_killed_at_random_instants_keep_views_equal_to_what_the_state_says(engine: EngineBackend) {
    let seeds: Vec<u64> = match std::env::var("EFMESH_PROPERTY_SEED") {
        Ok(s) => vec![s.parse().expect("EFMESH_PROPERTY_SEED is a number")],
        Err(_) => vec![11, 12, 13],
    };
    let (mut killed, mut undone, mut commands) = (0, 0, 0);
    for seed in seeds {
        let (_, u, k) = run_sequence(&engine, seed, true);
        killed += k;
        undone += u;
        commands += STEPS;
    }
    eprintln!("kill property: {killed} of {commands} commands killed before they finished, {undone} interrupted promotions undone");
    assert!(killed >= commands / 4, "too few commands killed before they finished: {killed} of {commands}");
}
