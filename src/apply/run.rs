//! `efmesh run <env>`: refresh what an environment serves, without changing what it serves.
//!
//! sqlmesh's `run` re-executes models on their schedule; efmesh's `run` is one tick of that: for
//! the environment's current versions it upserts every `incremental_by_unique_key` model,
//! reconciles every `scd_type2` model (at the plan's instant) and computes the missing intervals
//! of time-range models (lookback included), parents first, with the usual contract check
//! first. It never builds a new version and never promotes: when the project differs from the
//! environment (any action other than `unchanged`) it refuses and lists the changes, so a
//! scheduled `run` never applies an edit nobody reviewed (`apply` does that).
//!
//! `apply` fills a unique-key or SCD type 2 version once, when it builds it; an `apply` with
//! nothing changed does nothing. Refreshing is `run`'s job.

use super::{ApplyError, ApplyReport, Options, execute};
use crate::engine::Engine;
use crate::plan::{Change, Plan};
use crate::project::Project;
use crate::state::StateStore;

/// How a run ended.
#[derive(Debug, Clone)]
pub enum RunOutcome {
    /// The environment's versions were refreshed; `report.built` lists the models refreshed or
    /// backfilled, parents first (`report.promoted` is false: nothing was promoted).
    Ran(ApplyReport),
    /// The project differs from the environment: `"<model>: <change>"` per differing model.
    /// Nothing was written.
    Blocked(Vec<String>),
}

/// The changes that block a run: every action that is not `unchanged`, and every relation the
/// engine lacks (restoring it is `apply`'s job: it may rebuild history and re-create views).
pub fn blocked_by(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter(|a| a.change != Change::Unchanged || a.repair.is_some())
        .map(|a| match (&a.repair, a.change) {
            (Some(_), Change::Unchanged) => format!("{}: relations missing from the engine", a.name),
            (Some(_), c) => format!("{}: {}, relations missing from the engine", a.name, c.as_str()),
            (None, c) => format!("{}: {}", a.name, c.as_str()),
        })
        .collect()
}

/// Runs one refresh of `plan.env` (a plan computed for `project` against it), building as
/// `options` say (who runs it, how many models at once).
///
/// # Errors
/// As [`super::apply`]: a contract failure builds nothing; a rejected key or an engine error stops at
/// that model, earlier models stay refreshed (each refresh is its own transaction).
pub fn run(project: &Project, plan: &Plan, state: &dyn StateStore, engine: &mut dyn Engine, options: &Options) -> Result<RunOutcome, ApplyError> {
    let blocked = blocked_by(plan);
    if !blocked.is_empty() {
        return Ok(RunOutcome::Blocked(blocked));
    }
    execute(project, plan, state, engine, options, true).map(RunOutcome::Ran)
}
