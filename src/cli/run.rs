//! `efmesh run <env>`: one refresh tick of an environment (see [`crate::apply::run`]), under the
//! environment's lock, journaled in the state store's run journal (every tick, failures too).
//!
//! Outcomes: `processed` (something was refreshed or backfilled), `nothing-due`, `blocked` (the
//! project differs from the environment: exit 2), `lock-held` (another process holds the lock:
//! an overlapping tick is normal, exit 0), `error` (exit 1; the intervals committed before the
//! failure journaled and reported all the same). An environment that does not exist (never
//! applied) journals nothing: its run is refused as `blocked`, naming a similarly named
//! environment when there is one (a typo).

use super::lock::{Locked, lock_env};
use super::printer::Printer;
use super::{Exit, applied_by, error_json, error_kind, error_text, hint_for, load, open_state};
use crate::apply::ApplyReport;
use crate::apply::retry::with_retries;
use crate::apply::run::{RunOutcome, run_prepared};
use crate::apply::signals::Waiting;
use crate::core::interval::{Interval, Millis, now_millis, to_iso};
use crate::plan;
use crate::project::Project;
use crate::state::{StateStore, Tick};
use anyhow::Result;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// How a tick under the lock ended (errors aside).
enum Ticked {
    Ran(ApplyReport, Vec<Waiting>),
    Blocked(Vec<String>),
}

/// The backfills a tick's attempts handed to the executor, per model and version (name,
/// fingerprint): where to look in the ledger for what a failed tick committed ([`committed`]).
type Planned = BTreeMap<(String, String), Vec<Interval>>;

/// Runs one tick of `env`: takes its lock (none: outcome `lock-held`, exit 0), plans; refuses
/// (exit 2, listing the changes) when the project differs from the environment; else refreshes
/// its unique-key and SCD type 2 models, computes missing intervals and rebuilds the `full` and
/// `view` models downstream (`jobs` models at once, 0: the number of cores), retrying transient failures `retries` times. Journals the tick.
pub(super) fn run(config: &std::path::Path, env: &str, json: bool, retries: u32, jobs: usize, now: Millis, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    crate::core::name::validate_env(env)?;
    let started = now_millis();
    let state = open_state(&project, true)?;
    // An environment exists once applied: it serves something, or its apply journal has rows
    // (one expired and dropped by the janitor keeps them). A run of one that does not (a typo,
    // `prd` for `prod`) journals nothing: the journal is the history of environments.
    let known = state.environments()?;
    let exists = known.iter().any(|e| e == env) || !state.journal(env)?.is_empty();
    let record = |outcome: &str, processed: BTreeMap<String, usize>, detail: Option<String>| {
        if !exists {
            return;
        }
        let tick =
            Tick { env: env.to_string(), started_at: to_iso(started), finished_at: to_iso(now_millis()), outcome: outcome.to_string(), processed, detail };
        // The journal is a record, not the work: failing to write it is logged, not fatal.
        if let Err(e) = state.record_tick(&tick) {
            tracing::warn!("cannot journal the run tick: {e}");
        }
    };
    // A state store busy with another writer (SQLite's lock) is as transient here as later.
    let locked = crate::apply::retry::retrying(retries, &format!("take the lock of `{env}`"), || lock_env(&*state, &project.config, env, Duration::ZERO))?;
    let guard = match locked {
        Locked::Held(g) => g,
        Locked::Busy(lock, holder) => {
            record("lock-held", BTreeMap::new(), Some(format!("`{lock}` held by {holder}")));
            if json {
                out.json(json!({"env": env, "outcome": "lock-held", "now": to_iso(now), "processed": [], "lock": lock, "holder": holder}))?;
            } else {
                out.text(&format!("run `{env}`: skipped, `{lock}` is held by {holder}\n"))?;
            }
            return Ok(Exit::Success);
        }
    };
    let mut planned = Planned::new();
    let result = tick(&project, &*state, env, retries, jobs, now, &mut planned);
    // The tick is journaled under the lock: released first, an `apply` creating the environment
    // again (a dropped one's run is refused) could delete the old ticks in between, and this one
    // would land in the new environment's journal. (One that does not exist journals nothing.)
    let kept = match &result {
        Ok(Ticked::Blocked(blocked)) => {
            record("blocked", BTreeMap::new(), Some(blocked.join("; ")));
            BTreeMap::new()
        }
        Ok(Ticked::Ran(report, waiting)) => {
            let outcome = if report.built.is_empty() { "nothing-due" } else { "processed" };
            let mut notes = Vec::new();
            if !waiting.is_empty() {
                notes.push(format!("waiting: {}", waiting.iter().map(Waiting::describe).collect::<Vec<_>>().join("; ")));
            }
            if !report.restated_meanwhile.is_empty() {
                notes.push(report.restated_meanwhile.iter().map(crate::apply::RestatedMeanwhile::describe).collect::<Vec<_>>().join("; "));
            }
            let detail = (!notes.is_empty()).then(|| notes.join("; "));
            record(outcome, report.per_model.clone(), detail);
            BTreeMap::new()
        }
        Err(e) => {
            // Each batch and each model's refresh is its own transaction: what was committed
            // before the failure stays done, and the journal says so.
            let kept = committed(&*state, &planned, started);
            record("error", kept.clone(), Some(error_text(e)));
            kept
        }
    };
    guard.release(&*state);
    match result {
        Ok(Ticked::Blocked(blocked)) if !exists => {
            let like = crate::core::error::did_you_mean(env, known.iter().map(String::as_str));
            if json {
                out.json(json!({"env": env, "outcome": "blocked", "now": to_iso(now), "processed": [], "intervals": 0, "blockedBy": blocked,
                    "exists": false, "didYouMean": like}))?;
            }
            let hint = match like {
                Some(like) => format!("did you mean `efmesh run {like}`? (`efmesh apply {env}` would create `{env}`, building every model anew)"),
                None => format!("create it with `efmesh apply {env}` (review its plan first: `efmesh plan {env}`), then run again"),
            };
            crate::ewriteln!("run `{env}`: environment `{env}` does not exist (nothing was applied to it); nothing was run\n  hint: {hint}");
            Ok(Exit::AwaitingHuman)
        }
        Ok(Ticked::Blocked(blocked)) => {
            if json {
                out.json(json!({"env": env, "outcome": "blocked", "now": to_iso(now), "processed": [], "intervals": 0, "blockedBy": blocked}))?;
            }
            // One the janitor dropped serves nothing: said so (as `status` says it), not every
            // model listed as added.
            if !known.iter().any(|e| e == env)
                && let Some(at) = super::envlife::dropped_at(&*state, env)?
            {
                crate::ewriteln!(
                    "run `{env}`: environment `{env}` {}; nothing was run\n  hint: `efmesh apply {env}` creates it again (review its plan first: `efmesh plan {env}`), then run again",
                    super::envlife::dropped_phrase(&at)
                );
                return Ok(Exit::AwaitingHuman);
            }
            let lines: Vec<String> = blocked.iter().map(|b| format!("  {b}")).collect();
            // A line may name another environment whose apply repairs what this one serves.
            let other = blocked.iter().any(|b| b.contains("`efmesh apply ") && !b.contains(&format!("`efmesh apply {env}`")));
            crate::ewriteln!(
                "run `{env}`: the project differs from what the environment serves; apply needed:\n{}\n  hint: review and apply with `efmesh apply {env}`{}, then run again",
                lines.join("\n"),
                if other { " (or first apply the environment a line names)" } else { "" }
            );
            Ok(Exit::AwaitingHuman)
        }
        Ok(Ticked::Ran(report, waiting)) => {
            let processed: Vec<String> = report.built.iter().map(ToString::to_string).collect();
            let outcome = if processed.is_empty() { "nothing-due" } else { "processed" };
            if json {
                out.json(json!({
                    "env": env,
                    "outcome": outcome,
                    "now": to_iso(now),
                    "processed": processed,
                    "intervals": report.intervals,
                    "autoRestated": report.auto_restated,
                    "restatedMeanwhile": report.restated_meanwhile,
                    "waiting": waiting,
                }))?;
            } else {
                let mut text = if processed.is_empty() {
                    format!("run `{env}`: nothing to refresh\n")
                } else {
                    let intervals = match report.intervals {
                        0 => String::new(),
                        1 => " (1 interval computed)".to_string(),
                        n => format!(" ({n} intervals computed)"),
                    };
                    format!("run `{env}`: processed {}{intervals}\n", processed.join(", "))
                };
                for r in &report.auto_restated {
                    text.push_str(&format!(
                        "  {}: restated {} done interval(s) in [{}, {}) (auto_restatement_intervals of {})\n",
                        r.model,
                        r.intervals,
                        to_iso(r.from),
                        to_iso(r.to),
                        r.from_model
                    ));
                }
                for w in &waiting {
                    text.push_str(&format!("  waiting: {}\n", w.describe()));
                }
                for r in &report.restated_meanwhile {
                    text.push_str(&format!("  {}\n", r.describe()));
                }
                out.text(&text)?;
            }
            Ok(Exit::Success)
        }
        Err(e) => {
            if !json {
                return Err(e);
            }
            // The error as `main` reports it (stderr, then the JSON error object), the object
            // carrying what the run committed as a successful run's does.
            crate::cli::logging::clear_progress();
            let message = error_text(&e);
            let hint = hint_for(&e);
            crate::ewriteln!("error: {message}{}", hint.as_ref().map(|h| format!("\n  hint: {h}")).unwrap_or_default());
            let mut v = error_json(error_kind(&e), &message, hint.as_deref());
            if let Some(o) = v.as_object_mut() {
                o.insert("env".into(), env.into());
                o.insert("outcome".into(), "error".into());
                o.insert("now".into(), to_iso(now).into());
                o.insert("processed".into(), kept.keys().cloned().collect::<Vec<String>>().into());
                o.insert("intervals".into(), kept.values().sum::<usize>().into());
            }
            out.json(v)?;
            Ok(Exit::Error)
        }
    }
}

/// The intervals of `planned` the ledger holds done and written at `since` or later, per model:
/// what a tick that failed committed before its failure (every batch is its own transaction,
/// marked done as it commits). A ledger that cannot be read counts nothing (logged): the journal
/// is a record, not the work.
fn committed(state: &dyn StateStore, planned: &Planned, since: Millis) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for ((name, fp), backfill) in planned {
        let ledger = match state.done_ledger(name, fp) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("cannot read the ledger of `{name}` to journal what the failed run committed: {e}");
                continue;
            }
        };
        let n = ledger.iter().filter(|&(&start, &(_, written))| written >= since && backfill.iter().any(|b| b.start <= start && start < b.end)).count();
        if n > 0 {
            *out.entry(name.clone()).or_default() += n;
        }
    }
    out
}

/// Plans and refreshes `env` under its lock, retrying transient failures and stale plans (another
/// `apply` or `run`, of any environment, wrote the state store between an attempt's plan and its
/// engine open: each attempt plans again). Every attempt adds the backfills it hands to the
/// executor to `planned`.
fn tick(project: &Project, state: &dyn StateStore, env: &str, retries: u32, jobs: usize, now: Millis, planned: &mut Planned) -> Result<Ticked> {
    // Under the lock, a promotion recorded as under way is an interrupted one: undo it first.
    crate::session::recover_interrupted(project, state)?;
    // What a failed attempt computed stays done, and the next attempt's plan no longer lists it:
    // the attempt that succeeds reports it too.
    let committed = std::sync::Arc::new(std::sync::Mutex::new(crate::apply::Committed::default()));
    with_retries(retries, &format!("run `{env}`"), |attempt| {
        // A failed attempt may have left its promotion's intent: undone before trying again.
        if attempt > 0 {
            crate::session::recover_interrupted(project, state)?;
        }
        let plan = super::plan_checked(project, state, env, now, &plan::Options::default())?;
        let blocked = crate::apply::run::blocked_by(&plan);
        if !blocked.is_empty() {
            return Ok(Ticked::Blocked(blocked));
        }
        let (mut engine, catalog_at_open) = crate::session::open_for_writing(project)?;
        let mut plan = plan;
        // Auto-restatement first, so its done intervals are put to the signals too; then the
        // signals decide which intervals are ready, before anything is computed.
        let restated = crate::apply::run::auto_restate(project, &mut plan, state)?;
        // A restatement a model inherits from an ancestor's is not its own to hold back.
        let inherited: std::collections::BTreeSet<crate::core::ModelName> =
            restated.iter().filter(|r| r.from_model != r.model.to_string()).map(|r| r.model.clone()).collect();
        let waiting =
            hold_signals(project, &mut plan, state, &mut *engine, &inherited).map_err(|e| anyhow::anyhow!("run `{env}`: {e}; nothing was computed"))?;
        let restated = crate::apply::run::still_restated(project, &plan, restated);
        // The signals' queries are read-only and rolled back; the catalog proven at the open is
        // still checked against the file after them (in depth).
        let catalog_at_open = catalog_at_open.filter(crate::apply::ProvenCatalog::still_current);
        let options = crate::apply::Options { applied_by: applied_by(), jobs, catalog_at_open, committed: Some(committed.clone()) };
        for a in plan.actions.iter().filter(|a| !a.backfill.is_empty()) {
            planned.entry((a.name.to_string(), a.fingerprint.as_str().to_string())).or_default().extend(a.backfill.iter().copied());
        }
        Ok(match run_prepared(project, &plan, restated, state, &mut *engine, &options)? {
            RunOutcome::Ran(r) => {
                // The catalog as the run left it, recorded for the next plan.
                crate::session::close_recorded(project, engine);
                Ticked::Ran(r, waiting)
            }
            RunOutcome::Blocked(b) => Ticked::Blocked(b),
        })
    })
}

/// Puts the missing intervals of `plan` to the project's signals (none: nothing asked); keeps
/// only the ready ones in the plan; returns what waits. Signals' queries run on `engine`.
fn hold_signals(
    project: &Project,
    plan: &mut crate::plan::Plan,
    state: &dyn StateStore,
    engine: &mut dyn crate::engine::Engine,
    inherited: &std::collections::BTreeSet<crate::core::ModelName>,
) -> Result<Vec<Waiting>, String> {
    if !project.dag.models().any(|m| !m.signals.is_empty()) {
        return Ok(Vec::new());
    }
    let signals = crate::script::signals::Signals::of(&project.config).map_err(|e| e.to_string())?;
    let mut done = |m: &crate::core::ModelName, fp: &str| state.done_intervals(&m.to_string(), fp).map_err(|e| e.to_string());
    crate::apply::signals::hold_plan(&project.dag, plan, inherited, &mut done, &mut |m, intervals| {
        signals.ready(m, intervals, &mut |sql| crate::engine::read_only_query(&mut *engine, sql))
    })
}
