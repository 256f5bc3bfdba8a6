//! Done intervals a time-range version recomputes because a model upstream rewrites them.
//!
//! A time-range model's interval is computed once, from what its parents held then. When a plan
//! makes a time-range parent write intervals into the table its readers already read — its
//! `lookback` recomputing its last intervals with late rows, its `start` moved earlier (a
//! metadata change that backfills older intervals), a gap it fills — the intervals a time-range
//! descendant computed over that range came from other rows than the parent will hold. sqlmesh
//! and dbt leave them as they are (a lookback is the model's own); efmesh recomputes them in the
//! same apply or run, as a restatement would (SPEC §4, invariant 62): every environment then
//! serves what its models' queries give over their parents' data.
//!
//! The range passes through models of every kind (a `full` or `view` model between is rebuilt
//! or reads through anyway; unique-key, partition and SCD type 2 models are refreshed by every
//! `run`) and is widened to each descendant's grain; a descendant reading itself (`@this`)
//! recomputes to its newest wanted interval. A new version's build (a new table, read by nobody
//! yet) rewrites nothing its readers read: only the range it inherits passes on, since it reads
//! its parents' new rows too. Only done intervals are added: missing ones are computed anyway.

use super::{Action, Plan};
use crate::core::interval::{self, Interval, Millis};
use crate::core::name::ModelName;
use crate::project::Project;
use crate::state::{StateError, StateStore};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

/// Done intervals of a time-range version that a plan recomputes because models upstream rewrite
/// them ([`Action::recompute`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Recompute {
    /// Done intervals recomputed (counted in [`Action::intervals`] too).
    pub intervals: usize,
    /// The time-range models upstream whose rewritten intervals reach this one.
    pub because: Vec<ModelName>,
}

/// Adds to `plan`'s backfill the done intervals of time-range versions that a time-range model
/// upstream rewrites in the same plan (see the module docs), and records why in
/// [`Action::recompute`].
///
/// # Errors
/// A state store failure reading a ledger.
pub fn propagate(project: &Project, state: &dyn StateStore, plan: &mut Plan) -> Result<(), StateError> {
    if plan.actions.iter().all(|a| a.backfill.is_empty()) {
        return Ok(());
    }
    // Per model: the ranges rewritten at or above it, and the time-range models they come from.
    let mut ranges: HashMap<ModelName, (Vec<Interval>, BTreeSet<ModelName>)> = HashMap::new();
    let now = plan.now;
    for action in plan.actions.iter_mut() {
        let Some(model) = project.dag.get(&action.name) else { continue };
        let (mut inherited, mut sources) = (Vec::new(), BTreeSet::new());
        if !ranges.is_empty() {
            for p in model.parents() {
                if let Some((r, s)) = ranges.get(&p) {
                    inherited.extend_from_slice(r);
                    sources.extend(s.iter().cloned());
                }
            }
        }
        let Some(t) = model.kind.time_range() else {
            if !inherited.is_empty() {
                ranges.insert(action.name.clone(), (inherited, sources));
            }
            continue;
        };
        let due = project.dag.due_at(&model.name, now);
        let span = interval::wanted_span(t.start, t.end, t.grain, due);
        let mut widened: Vec<Interval> = Vec::new();
        if let (false, Some(span)) = (inherited.is_empty(), span) {
            let reads_itself = model.body.as_ref().is_some_and(|b| b.reads_itself());
            for r in &inherited {
                let start = t.grain.floor(r.start).max(span.start);
                let end = if reads_itself { span.end } else { t.grain.next(t.grain.floor(r.end - 1)).min(span.end) };
                if start < end {
                    widened.push(Interval::new(start, end));
                }
            }
        }
        if !widened.is_empty() && !action.build {
            recompute_done(state, action, t.grain, &widened, &sources)?;
        }
        // What it passes on: what it writes into a table its readers read (its whole backfill,
        // recomputed intervals included), or, for a new table, the range it inherited.
        let mut passed = widened;
        if !action.build && !action.backfill.is_empty() {
            passed.extend_from_slice(&action.backfill);
            sources.insert(action.name.clone());
        }
        if !passed.is_empty() {
            passed.sort();
            ranges.insert(action.name.clone(), (merge_overlapping(passed), sources));
        }
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// Adds to `action`'s backfill its version's done intervals in `ranges` (aligned on `grain`).
fn recompute_done(
    state: &dyn StateStore,
    action: &mut Action,
    grain: interval::Grain,
    ranges: &[Interval],
    sources: &BTreeSet<ModelName>,
) -> Result<(), StateError> {
    let computed: BTreeSet<Interval> = action.backfill.iter().flat_map(|b| b.split(grain)).collect();
    let candidates: Vec<Interval> = ranges.iter().flat_map(|r| r.split(grain)).filter(|i| !computed.contains(i)).collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let name = action.name.to_string();
    let mut done: BTreeSet<Millis> = state.done_intervals(&name, action.fingerprint.as_str())?;
    if let Some(from) = &action.reused_from {
        done.extend(state.done_intervals(&name, from.as_str())?);
    }
    let added: BTreeSet<Interval> = candidates.into_iter().filter(|i| done.contains(&i.start)).collect();
    if added.is_empty() {
        return Ok(());
    }
    let count = added.len();
    let all: Vec<Interval> = computed.into_iter().chain(added).collect::<BTreeSet<_>>().into_iter().collect();
    action.intervals = all.len();
    action.backfill = interval::merge(&all);
    let because = sources.iter().filter(|s| **s != action.name).cloned().collect();
    action.recompute = Some(Recompute { intervals: count, because });
    Ok(())
}

/// Sorted ranges merged where they touch or overlap.
fn merge_overlapping(sorted: Vec<Interval>) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}
