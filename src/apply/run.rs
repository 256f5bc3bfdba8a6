//! `efmesh run <env>`: refresh what an environment serves, without changing what it serves.
//!
//! sqlmesh's `run` re-executes models on their schedule; efmesh's `run` is one tick of that: for
//! the environment's current versions it upserts every `incremental_by_unique_key` model,
//! replaces the partitions of every `incremental_by_partition` model, reconciles every
//! `scd_type2` model (at the plan's instant) — those on a `cron` only when it ticked since their
//! last refresh, when `full` models on a `cron` are rebuilt too — and computes the missing intervals
//! of time-range models (lookback included), parents first, with the usual contract check
//! first. It never builds a new version and never promotes: when the project differs from the
//! environment (any action other than `unchanged`) it refuses and lists the changes, so a
//! scheduled `run` never applies an edit nobody reviewed (`apply` does that).
//!
//! `apply` fills a unique-key or SCD type 2 version once, when it builds it; an `apply` with
//! nothing changed does nothing. Refreshing is `run`'s job — and `apply`'s when it computes new
//! intervals of such a model's parent (its time-range children read it in the same apply), or
//! when an earlier apply or run stopped after those intervals, before the refresh it recorded as
//! pending ([`crate::plan::work::Work::rebuilds`]).
//!
//! Auto-restatement ([`auto_restate`]): when a run computes the newest due interval of a
//! time-range model declaring `auto_restatement_intervals = N`, it also recomputes the N wanted
//! intervals right before it that are done, and the same time range (widened to their grain)
//! of every time-range descendant, through the ordinary per-batch delete-and-insert: one more
//! range in the plan's backfill, as a restatement followed by a run would compute it.

use super::{ApplyError, ApplyReport, Options, execute};
use crate::core::interval::{self, Interval, Millis};
use crate::core::name::ModelName;
use crate::engine::Engine;
use crate::plan::{Change, Plan};
use crate::project::Project;
use crate::state::StateStore;
use std::collections::{BTreeMap, BTreeSet};

/// Done intervals one run recomputes for `auto_restatement_intervals`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoRestated {
    /// The model recomputed.
    pub model: ModelName,
    /// The model declaring `auto_restatement_intervals` this restatement comes from (the model
    /// itself, or an ancestor).
    pub from_model: String,
    /// Start of the first restated interval (ISO-8601 UTC in JSON).
    #[serde(serialize_with = "interval::serialize_iso")]
    pub from: Millis,
    /// End of the last restated interval, exclusive (ISO-8601 UTC in JSON).
    #[serde(serialize_with = "interval::serialize_iso")]
    pub to: Millis,
    /// Done intervals recomputed (besides the missing ones the run computes anyway).
    pub intervals: usize,
}

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
            // Its table is another environment's to rebuild ([`super::lost_shared_tables`]; a
            // `full` one on `prod`'s table under audits lacking here, [`super::lost_full_left_to_prod`]).
            (Some(r), _)
                if r.physical_missing
                    && let crate::plan::WriterHolds::All { writer, .. } | crate::plan::WriterHolds::Rebuilds { writer, .. } = &a.writer_holds =>
            {
                format!("{}: {} (`efmesh apply {writer}` repairs it: its table is also what `{writer}` serves)", a.name, r.summary())
            }
            (Some(r), Change::Unchanged) => format!("{}: {} (`apply` repairs it)", a.name, r.summary()),
            (Some(r), c) => format!("{}: {}, {} (`apply` repairs it)", a.name, c.as_str(), r.summary()),
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
    let mut plan = plan.clone();
    let restated = auto_restate(project, &mut plan, state)?;
    run_prepared(project, &plan, restated, state, engine, options)
}

/// [`run`] of a plan [`auto_restate`] has already extended (and signals may have trimmed since:
/// `restated` is then [`still_restated`]'s), reporting `restated`.
///
/// # Errors
/// As [`run`].
pub fn run_prepared(
    project: &Project,
    plan: &Plan,
    restated: Vec<AutoRestated>,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    options: &Options,
) -> Result<RunOutcome, ApplyError> {
    let blocked = blocked_by(plan);
    if !blocked.is_empty() {
        return Ok(RunOutcome::Blocked(blocked));
    }
    let mut report = execute(project, plan, state, engine, options, true)?;
    report.auto_restated = restated;
    Ok(RunOutcome::Ran(report))
}

/// The part of `restated` `plan` still computes (after signals removed intervals from its
/// backfill): each entry narrowed to its intervals left, entries with none dropped.
pub fn still_restated(project: &Project, plan: &Plan, restated: Vec<AutoRestated>) -> Vec<AutoRestated> {
    restated
        .into_iter()
        .filter_map(|mut r| {
            let t = project.dag.get(&r.model)?.kind.time_range()?;
            let action = plan.action(&r.model)?;
            let left: Vec<Interval> = action.backfill.iter().flat_map(|b| b.split(t.grain)).filter(|i| i.start >= r.from && i.end <= r.to).collect();
            let (first, last) = (left.first()?.start, left.last()?.end);
            // Only the done intervals counted before stay counted: missing ones in the range
            // were computed anyway.
            r.intervals = r.intervals.min(left.len());
            r.from = first;
            r.to = last;
            Some(r)
        })
        .collect()
}

/// Adds to `plan`'s backfill the intervals `auto_restatement_intervals` restates (see the module
/// docs) and returns them. A model restates only when this run computes its newest due interval
/// (its cron ticked, its `end` is not past): a second run before the next tick restates
/// nothing. The restated intervals are the N wanted ones right before the newest; those not done
/// are computed anyway (they are missing), only done ones are reported. Descendants (through any
/// kind) restate the range `[from, newest start)` of every model upstream that restated, widened
/// to their grain and limited to their own wanted intervals; one reading itself (`@this`) to its
/// newest wanted interval, as `efmesh restate` does. Non-time-range descendants need nothing
/// more: `full` and `view` ones are rebuilt (a parent has new intervals), unique-key,
/// partition and SCD type 2 ones are refreshed by every run (on a `cron`: at its next tick).
///
/// # Errors
/// A state store failure reading a ledger.
pub fn auto_restate(project: &Project, plan: &mut Plan, state: &dyn StateStore) -> Result<Vec<AutoRestated>, ApplyError> {
    let mut out = Vec::new();
    // Per model restated (or below one that is): the range and the declaring model.
    let mut ranges: BTreeMap<ModelName, (Interval, String)> = BTreeMap::new();
    for action in plan.actions.iter_mut().filter(|a| a.change == Change::Unchanged) {
        let Some(model) = project.dag.get(&action.name) else { continue };
        let inherited = model.parents().iter().filter_map(|p| ranges.get(p)).fold(None, |acc: Option<(Interval, String)>, (r, from)| match acc {
            None => Some((*r, from.clone())),
            Some((a, f)) => Some((Interval::new(a.start.min(r.start), a.end.max(r.end)), f)),
        });
        let Some(t) = model.kind.time_range() else {
            // Passed through to the descendants (a `full` model between is rebuilt first).
            if let Some(r) = inherited {
                ranges.insert(action.name.clone(), r);
            }
            continue;
        };
        let wanted = interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&model.name, plan.now));
        let Some(newest) = wanted.last().copied() else { continue };
        let backfill: BTreeSet<Interval> = action.backfill.iter().flat_map(|r| r.split(t.grain)).collect();
        let mut range: Option<(Interval, String)> = None;
        if t.auto_restatement_intervals > 0 && backfill.contains(&newest) {
            let i = wanted.len() - 1;
            let first = i.saturating_sub(t.auto_restatement_intervals as usize);
            if first < i {
                range = Some((Interval::new(wanted[first].start, newest.start), model.name.to_string()));
            }
        }
        if let Some((r, from)) = inherited {
            let reads_itself = model.body.as_ref().is_some_and(|b| b.reads_itself());
            let widened = Interval::new(t.grain.floor(r.start), if reads_itself { newest.end } else { t.grain.next(r.end - 1) });
            range = Some(match range {
                None => (widened, from),
                Some((own, own_from)) => (Interval::new(own.start.min(widened.start), own.end.max(widened.end)), own_from),
            });
        }
        let Some((r, from)) = range else { continue };
        ranges.insert(action.name.clone(), (r, from.clone()));
        let done = state.done_intervals(&action.name.to_string(), action.fingerprint.as_str())?;
        let restated: Vec<Interval> = wanted
            .iter()
            .filter(|w| w.start >= r.start && w.end <= r.end && done.contains(&w.start) && !backfill.contains(w) && !action.writer_holds.holds(w.start))
            .copied()
            .collect();
        if restated.is_empty() {
            continue;
        }
        let all: BTreeSet<Interval> = backfill.into_iter().chain(restated.iter().copied()).collect();
        let all: Vec<Interval> = all.into_iter().collect();
        action.intervals = all.len();
        action.backfill = interval::merge(&all);
        let (first, last): (Millis, Millis) = (restated[0].start, restated[restated.len() - 1].end);
        tracing::info!(model = %action.name, "auto-restating {} done interval(s) in [{}, {}) (auto_restatement_intervals of {from})", restated.len(), interval::to_iso(first), interval::to_iso(last));
        out.push(AutoRestated { model: action.name.clone(), from_model: from, from: first, to: last, intervals: restated.len() });
    }
    Ok(out)
}
