//! Done intervals a time-range version recomputes because a model upstream rewrites them.
//!
//! A time-range model's interval is computed once, from what its parents held then. When a plan
//! makes a time-range parent write intervals into the table its readers already read — its
//! `lookback` recomputing its last intervals with late rows, its `start` moved earlier (a
//! metadata change that backfills older intervals), a gap it fills — the intervals a time-range
//! descendant computed over that range came from other rows than the parent will hold. sqlmesh
//! and dbt leave them as they are (a lookback is the model's own); efmesh recomputes them in the
//! same apply or run, as a restatement would (SPEC §4, invariant 62), for the versions the
//! environment being applied serves (another environment's other version of a descendant over
//! the same parent table is not reached: docs/faults.md).
//!
//! The range passes through models of every kind (a `full` or `view` model between is rebuilt
//! or reads through anyway; unique-key, partition and SCD type 2 models are refreshed by every
//! `run`) and is widened to each descendant's grain; a descendant reading itself (`@this`)
//! recomputes to its newest wanted interval. A new version's build (a new table, read by nobody
//! yet) rewrites nothing its readers read: only the range it inherits passes on, since it reads
//! its parents' new rows too (a lost table rebuilt by a repair rewrites: its readers read the
//! old one; so does a version rebuilt after the janitor collected it, for an existing version
//! below that computed from its old table: [`stale_on_return`]). Only done intervals are added:
//! missing ones are computed anyway.
//!
//! The plan alone would lose them when the apply or run stops after the parent's rewrite
//! committed and before the child's recompute did (the next plan finds the parent done): so
//! `apply` clears them from the child's ledger once its contract check passed, before any
//! model is written ([`crate::apply`]); a stopped apply or run leaves them missing, and the next
//! one computes them.

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
    /// The time-range models upstream whose rewritten intervals reach this one; the model itself
    /// when another version of it (another query) wrote them into its table ([`taken_over`]).
    pub because: Vec<ModelName>,
    /// True when (some of) them are recomputed because the model reads its own table (`@this`)
    /// and an earlier interval is computed in this plan (`because` names the model itself).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reads_itself: bool,
    /// The done intervals added to the backfill (grain intervals, sorted).
    #[serde(skip)]
    pub added: Vec<Interval>,
}

/// Adds to `plan`'s backfill the done intervals of time-range versions that a time-range model
/// upstream rewrites in the same plan (see the module docs), and records why in
/// [`Action::recompute`]. Run again after the plan's repairs are known ([`super::integrity`]),
/// it adds what they rewrite to what it added before.
///
/// # Errors
/// A state store failure reading a ledger.
pub fn propagate(project: &Project, state: &dyn StateStore, plan: &mut Plan) -> Result<(), StateError> {
    rewrites(project, state, plan)?;
    hold_for_writer(project, state, plan)
}

/// Outside `prod`, a time-range version on a table another environment writes (`prod`'s) over
/// other parent tables computes nothing there ([`super::WriterHolds::All`]): its rows arrive as
/// the writer computes them. So its data is complete here only up to the first interval it wants
/// that the writer has not done (and will: not one before the writer's first done interval,
/// which it never computes), and every time-range model downstream (through any kind) waits for
/// its intervals ending after that instant, as under a signal ([`crate::apply::signals`]): computed now, over rows not there
/// yet, they would be recorded done and never recomputed when the rows arrive. Likewise below a
/// unique-key, partition or SCD type 2 version left to the writer
/// ([`super::WriterHolds::Refreshes`]): its rows are complete up to the writer's last refresh
/// (nowhere, when none is recorded). Idempotent: run again once repairs are known
/// ([`super::integrity`]).
///
/// # Errors
/// A state read fails.
pub fn hold_for_writer(project: &Project, state: &dyn StateStore, plan: &mut Plan) -> Result<(), StateError> {
    if !plan.actions.iter().any(|a| matches!(a.writer_holds, super::WriterHolds::All { .. } | super::WriterHolds::Refreshes { .. })) {
        return Ok(());
    }
    let at: HashMap<ModelName, usize> = plan.actions.iter().enumerate().map(|(i, a)| (a.name.clone(), i)).collect();
    // Per model: the instant its data here is complete up to, the model left to its writer that
    // set it, and that writer.
    let mut horizon: HashMap<ModelName, (Millis, ModelName, String)> = HashMap::new();
    for model in project.dag.models() {
        let cap = model.parents().iter().filter_map(|p| horizon.get(p)).min_by_key(|(t, _, _)| *t).cloned();
        let Some(action) = at.get(&model.name).map(|&i| &mut plan.actions[i]) else {
            if let Some(c) = cap {
                horizon.insert(model.name.clone(), c);
            }
            continue;
        };
        let own = match (&action.writer_holds, model.kind.time_range()) {
            (super::WriterHolds::All { writer, done, .. }, Some(t)) => {
                let first = done.iter().next().copied();
                interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&model.name, plan.now))
                    .into_iter()
                    .find(|w| !done.contains(&w.start) && first.is_none_or(|f| w.start > f))
                    .map(|w| (w.start, model.name.clone(), writer.clone()))
            }
            // Its rows are what the writer's last refresh computed (none recorded: none yet).
            (super::WriterHolds::Refreshes { writer, at, .. }, None) => Some((at.unwrap_or(Millis::MIN), model.name.clone(), writer.clone())),
            _ => None,
        };
        if let (Some((until, upstream, writer)), Some(t)) = (&cap, model.kind.time_range()) {
            let (mut kept, held): (Vec<Interval>, Vec<Interval>) = action.backfill.iter().flat_map(|b| b.split(t.grain)).partition(|i| i.end <= *until);
            if !held.is_empty() {
                // With every interval it lacks held, what is left are done ones recomputed: by
                // a lookback (of the held ones: recomputed when they are computed) or because
                // a model upstream rewrites them (kept).
                let mut done = state.done_intervals(&action.name.to_string(), action.fingerprint.as_str())?;
                done.extend(action.writer_holds.writer_done().into_iter().flatten().copied());
                if kept.iter().all(|i| done.contains(&i.start)) {
                    let rewritten: BTreeSet<Interval> = action.recompute.as_ref().map(|r| r.added.iter().copied().collect()).unwrap_or_default();
                    kept.retain(|i| rewritten.contains(i));
                }
                action.backfill = interval::merge(&kept);
                action.intervals = kept.len();
                if let Some(r) = action.recompute.as_mut() {
                    r.added.retain(|i| i.end <= *until);
                    r.intervals = r.added.len();
                }
                if action.recompute.as_ref().is_some_and(|r| r.intervals == 0) {
                    action.recompute = None;
                }
                let before = action.waits_for_writer.as_ref().map_or(0, |w| w.intervals);
                // From its first held interval (the instant upstream may fall inside one, or be
                // none: no refresh recorded).
                let from = held.iter().map(|i| i.start).min().unwrap_or(*until);
                action.waits_for_writer =
                    Some(super::WaitsForWriter { upstream: upstream.clone(), writer: writer.clone(), from, intervals: before.max(held.len()) });
            }
        }
        if let Some(h) = [cap, own].into_iter().flatten().min_by_key(|(t, _, _)| *t) {
            horizon.insert(model.name.clone(), h);
        }
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// [`propagate`]'s rewrites: the done intervals recomputed below a model rewriting them.
fn rewrites(project: &Project, state: &dyn StateStore, plan: &mut Plan) -> Result<(), StateError> {
    if plan.actions.iter().all(|a| a.backfill.is_empty()) {
        return Ok(());
    }
    // Per model: the merged ranges rewritten at or above it. Per time-range model that rewrites
    // intervals its readers read: those intervals (its backfill as its own action decided it).
    let mut ranges: HashMap<ModelName, Vec<Interval>> = HashMap::new();
    let mut own: HashMap<ModelName, Vec<Interval>> = HashMap::new();
    let now = plan.now;
    for action in plan.actions.iter_mut() {
        let Some(model) = project.dag.get(&action.name) else { continue };
        let mut inherited = Vec::new();
        if !ranges.is_empty() {
            for p in model.parents() {
                if let Some(r) = ranges.get(&p) {
                    inherited.extend_from_slice(r);
                }
            }
        }
        let Some(t) = model.kind.time_range() else {
            if !inherited.is_empty() {
                inherited.sort();
                ranges.insert(action.name.clone(), merge_overlapping(inherited));
            }
            continue;
        };
        let rewrites = !action.build || action.repair.as_ref().is_some_and(|r| r.physical_missing);
        let reads_itself = model.body.as_ref().is_some_and(|b| b.reads_itself());
        let span = interval::wanted_span(t.start, t.end, t.grain, project.dag.due_at(&model.name, now));
        let widen = |r: &Interval, span: Interval| {
            let start = t.grain.floor(r.start).max(span.start);
            let end = if reads_itself { span.end } else { t.grain.next(t.grain.floor(r.end - 1)).min(span.end) };
            (start < end).then(|| Interval::new(start, end))
        };
        let widened: Vec<Interval> = match span {
            Some(span) => inherited.iter().filter_map(|r| widen(r, span)).collect(),
            None => Vec::new(),
        };
        // A model reading its own earlier intervals (`@this`): each done interval after one it
        // computes now read that one as it was (absent, or other rows) — a running total moved
        // its `start` earlier, or filled a gap.
        if reads_itself
            && rewrites
            && let (Some(first), Some(span)) = (action.backfill.iter().map(|b| b.start).min(), span)
            && let Some(after) = Some(Interval::new(t.grain.floor(first).max(span.start), span.end)).filter(|r| r.start < r.end)
        {
            let added = recompute_done(state, action, t.grain, &[after])?;
            if !added.is_empty() {
                note(action, added, [action.name.clone()]);
                if let Some(r) = action.recompute.as_mut() {
                    r.reads_itself = true;
                }
            }
        }
        let before = action.backfill.clone();
        if !widened.is_empty() && rewrites {
            let added = recompute_done(state, action, t.grain, &widened)?;
            if !added.is_empty() {
                let because = sources(project, &model.name, &own, &added, &|r: &Interval| span.and_then(|s| widen(r, s)));
                note(action, added, because);
            }
        }
        // What it passes on: what it writes into a table its readers read (its whole backfill,
        // recomputed intervals included), or, for a new table, the range it inherited.
        let mut passed = widened;
        if rewrites && !action.backfill.is_empty() {
            passed.extend_from_slice(&action.backfill);
            let mine: Vec<Interval> = match &action.recompute {
                // Its own rewrites: what its action computes besides what it recomputes for
                // models upstream.
                // (Those [`taken_over`] added are its own rewrites: it names itself.)
                Some(r) if r.because.contains(&action.name) => before,
                Some(r) => before.iter().flat_map(|b| b.split(t.grain)).filter(|i| r.added.binary_search(i).is_err()).collect(),
                None => before,
            };
            if !mine.is_empty() {
                own.insert(action.name.clone(), interval::merge(&mine));
            }
        }
        if !passed.is_empty() {
            passed.sort();
            ranges.insert(action.name.clone(), merge_overlapping(passed));
        }
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// A time-range version an environment points at, existing already — built for another
/// environment (a first promotion, a model new to this environment, an environment made anew),
/// or served before an edit now undone — computed its done intervals from its parents as they
/// were then; a time-range model upstream that wrote an overlapping interval since into the
/// table this environment serves it from — its lookback's late rows, a restatement, in a run of
/// another environment or while this one served another version — left them stale. Those
/// intervals join its backfill as [`Action::recompute`] (before [`propagate`], which carries
/// them to its readers).
///
/// The ancestors compared are the versions the environment serves after the plan that the plan
/// does not build (a build's writes are [`propagate`]'s), each only where its table existed
/// when the interval was computed: an ancestor's table made later (a non-breaking new version,
/// taken to hold the same rows for the existing columns) wrote its first rows after the
/// interval without it being computed from other rows.
///
/// A time-range ancestor the plan builds anew (a new table) under such a version is the very
/// version its intervals were computed from (a fingerprint embeds its ancestors'), whose table
/// was dropped since — the janitor collects a version no environment serves while a version
/// that reused this one's table (a non-breaking parent edit) keeps this one alive — and is
/// rebuilt from the rows its parents hold now: this version's done intervals overlapping what
/// it computes are recomputed too ([`propagate`] would not: a first build rewrites nothing its
/// readers read). A version inheriting a table (indirect reuse, forward-only) is not compared:
/// every ancestor built anew under it is a change the reuse took as keeping the rows (a
/// non-breaking new version, columns it does not read) or the operator chose to keep the history
/// over. Outside `prod`, a version on a table another environment writes over other parent
/// tables ([`super::WriterHolds::All`]) recomputes none of them (they would change what the
/// writer serves): they are recorded as its `stale`, which the plan's ``not computed here``
/// note counts ([`super::work::decide`]).
///
/// # Errors
/// A state store failure reading a ledger or a snapshot.
pub fn stale_on_return(project: &Project, state: &dyn StateStore, index: &crate::state::SnapshotIndex, plan: &mut Plan) -> Result<(), StateError> {
    let returning: Vec<usize> =
        plan.actions.iter().enumerate().filter(|(_, a)| a.points_at_existing() && a.kind == "incremental_by_time_range").map(|(i, _)| i).collect();
    if returning.is_empty() {
        return Ok(());
    }
    // Ledgers read once per version: several returning models share ancestors.
    let mut ledgers: HashMap<(ModelName, String), Ancestor> = HashMap::new();
    let kept: HashMap<ModelName, String> = plan
        .actions
        .iter()
        .filter(|a| !a.build && a.change != super::Change::Removed && a.kind == "incremental_by_time_range")
        .map(|a| (a.name.clone(), a.fingerprint.as_str().to_string()))
        .collect();
    // Per time-range model whose version the plan builds anew (a new table): what it computes
    // there.
    let built: HashMap<ModelName, Vec<Interval>> = plan
        .actions
        .iter()
        .filter(|a| a.build && a.change != super::Change::Removed && a.kind == "incremental_by_time_range")
        .map(|a| (a.name.clone(), a.backfill.clone()))
        .collect();
    // Per (model, physical): the versions on that table (read only when a ledger needs it).
    let mut on_table: Option<HashMap<(&str, &str), Vec<&str>>> = None;
    for i in returning {
        let name = plan.actions[i].name.clone();
        let Some(t) = project.dag.get(&name).and_then(|m| m.kind.time_range()) else { continue };
        let own = state.done_ledger(&name.to_string(), plan.actions[i].fingerprint.as_str())?;
        let Some(first_written) = own.values().map(|&(_, w)| w).min() else { continue };
        let mut stale: BTreeSet<Interval> = BTreeSet::new();
        let mut because: BTreeSet<ModelName> = BTreeSet::new();
        for ancestor in project.dag.ancestors(&name).into_iter().filter(|m| m.kind.time_range().is_some()) {
            // Built anew under this version, which existed already: a fingerprint embeds its
            // ancestors', so the ancestor's version is the very one this version's intervals were
            // computed from, in a table since dropped (the janitor collected it while a version
            // reusing this one's table kept this one alive). Its new table is computed now, from
            // the rows its parents hold now: every done interval over what it computes read
            // other rows.
            if let Some(rebuilt) = built.get(&ancestor.name) {
                for (&start, &(end, _)) in &own {
                    if rebuilt.iter().any(|b| b.start < end && start < b.end) {
                        stale.insert(Interval::new(start, end));
                        because.insert(ancestor.name.clone());
                    }
                }
                continue;
            }
            let Some(theirs) = kept.get(&ancestor.name) else { continue };
            let key = (ancestor.name.clone(), theirs.clone());
            if !ledgers.contains_key(&key) {
                let ledger = state.done_ledger(&key.0.to_string(), &key.1)?;
                let last_written = ledger.values().map(|&(_, w)| w).max();
                ledgers.insert(key.clone(), Ancestor { ledger, last_written, table_made: None });
            }
            // Nothing it wrote comes after this version's first write (the common case: a
            // promotion of what another environment built parents first).
            if ledgers[&key].last_written.is_none_or(|w| w <= first_written) {
                continue;
            }
            if ledgers[&key].table_made.is_none() {
                let made = table_made(state, index, &mut on_table, &key.0.to_string(), &key.1)?;
                ledgers.get_mut(&key).expect("inserted above").table_made = Some(made);
            }
            let theirs = &ledgers[&key];
            let made = theirs.table_made.flatten();
            for (&start, &(end, written)) in &own {
                // Computed before that table existed: from another table's rows.
                if made.is_some_and(|m| m > written) {
                    continue;
                }
                // Their intervals overlapping [start, end): ends rise with starts, so walking
                // back from the last one starting before `end` stops at the first ending by `start`.
                if theirs.ledger.range(..end).rev().take_while(|(_, (e, _))| *e > start).any(|(_, (_, w))| *w > written) {
                    stale.insert(Interval::new(start, end));
                    because.insert(ancestor.name.clone());
                }
            }
        }
        recompute_stale(&mut plan.actions[i], t.grain, stale, because);
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// An ancestor version's done ledger, its last write, and when its table was made (the first
/// record of a version on it; `Some(None)`: unknown).
struct Ancestor {
    ledger: std::collections::BTreeMap<Millis, (Millis, Millis)>,
    last_written: Option<Millis>,
    table_made: Option<Option<Millis>>,
}

/// When the table of version `(name, fp)` was made: the earliest record of a version of `name`
/// on it (`None` when no record says).
fn table_made<'a>(
    state: &dyn StateStore,
    index: &'a crate::state::SnapshotIndex,
    on_table: &mut Option<HashMap<(&'a str, &'a str), Vec<&'a str>>>,
    name: &str,
    fp: &str,
) -> Result<Option<Millis>, StateError> {
    let Some((physical, _)) = index.get(&(name.to_string(), fp.to_string())) else { return Ok(None) };
    let by_table = on_table.get_or_insert_with(|| {
        let mut m: HashMap<(&str, &str), Vec<&str>> = HashMap::new();
        for ((n, f), (p, _)) in index {
            m.entry((n.as_str(), p.as_str())).or_default().push(f.as_str());
        }
        m
    });
    let mut made: Option<Millis> = None;
    for f in by_table.get(&(name, physical.as_str())).map(Vec::as_slice).unwrap_or_default() {
        if let Some(record) = state.snapshot(name, f)?
            && let Ok(at) = interval::parse_instant(&record.created_at)
        {
            made = Some(made.map_or(at, |m| m.min(at)));
        }
    }
    Ok(made)
}

/// A time-range version an environment points at anew (a first promotion too) may share its
/// table with another version of the model over another query: a forward-only change that kept
/// the table, applied in another environment (made while nobody else served the table) or
/// undone since in this one, or the older version it kept the table of, written again since.
/// Every interval that version wrote after this version's own write of it holds the other
/// query's rows, and so may one it inherited and later cleared (a restatement: the table keeps
/// what it wrote until the next computation). An inherited ledger keeps the times its intervals
/// were written (`StateStore::inherit_done`); one inherited before that was recorded counts as
/// written when it was inherited: the whole overlap is recomputed, at worst. This version's done
/// intervals among them join its backfill as [`Action::recompute`], naming the model itself; `apply` refuses it while
/// another environment serves the newer version (`apply::shared_writes`: rewriting them would
/// change what that environment serves) and otherwise writes this version's rows back, so the
/// environment never serves the other query's rows as this version's.
///
/// # Errors
/// A state store failure reading a snapshot or a ledger.
pub fn taken_over(project: &Project, state: &dyn StateStore, index: &crate::state::SnapshotIndex, plan: &mut Plan) -> Result<(), StateError> {
    let switching: Vec<usize> = plan
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| a.kind == "incremental_by_time_range" && a.points_at_existing() && a.physical.as_deref().is_some_and(|p| !p.is_empty()))
        .map(|(i, _)| i)
        .collect();
    if switching.is_empty() {
        return Ok(());
    }
    // The other versions on each switching version's table (nearly always none: one read of
    // the index, already in memory).
    let wanted: HashMap<(String, &str), usize> =
        switching.iter().map(|&i| ((plan.actions[i].name.to_string(), plan.actions[i].physical.as_deref().unwrap_or_default()), i)).collect();
    let mut others: HashMap<usize, Vec<String>> = HashMap::new();
    for ((name, fp), (physical, _)) in index {
        if let Some(&i) = wanted.get(&(name.clone(), physical.as_str()))
            && plan.actions[i].fingerprint.as_str() != fp
        {
            others.entry(i).or_default().push(fp.clone());
        }
    }
    for (i, fps) in others {
        let name = plan.actions[i].name.to_string();
        let Some(own) = state.snapshot(&name, plan.actions[i].fingerprint.as_str())? else { continue };
        let Some(t) = project.dag.get(&plan.actions[i].name).and_then(|m| m.kind.time_range()) else { continue };
        let mut mine = None;
        let mut stale: BTreeSet<Interval> = BTreeSet::new();
        for fp in fps {
            let Some(theirs) = state.snapshot(&name, &fp)? else { continue };
            // Any other query, older or newer: a version undone and pointed at again writes
            // its own rows there too (an inherited ledger keeps the times of what it inherited).
            if theirs.canonical == own.canonical {
                continue;
            }
            if mine.is_none() {
                mine = Some(state.done_ledger(&name, plan.actions[i].fingerprint.as_str())?);
            }
            let mine = mine.as_ref().expect("read above");
            let theirs_ledger = state.done_ledger(&name, &fp)?;
            // When the other version was recorded: it inherited every interval this one had
            // written by then, so one it lacks among those it cleared (a restatement) after
            // perhaps writing it — its rows may be in the table: recomputed too.
            let created = interval::parse_instant(&theirs.created_at).ok();
            for (&start, &(end, written)) in mine {
                let stale_here = match theirs_ledger.get(&start) {
                    Some(&(_, w)) => w > written,
                    None => created.is_some_and(|c| written < c),
                };
                if stale_here {
                    stale.extend(Interval::new(start, end).split(t.grain));
                }
            }
        }
        let own_name = plan.actions[i].name.clone();
        recompute_stale(&mut plan.actions[i], t.grain, stale, [own_name]);
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// Adds the `stale` done intervals (grain intervals on `grain`) its backfill lacks to `action`'s
/// backfill, noting `because` as the cause ([`Action::recompute`]).
fn recompute_stale(action: &mut Action, grain: interval::Grain, stale: BTreeSet<Interval>, because: impl IntoIterator<Item = ModelName>) {
    let computed: BTreeSet<Interval> = action.backfill.iter().flat_map(|b| b.split(grain)).collect();
    let (held, stale): (Vec<Interval>, Vec<Interval>) = stale.into_iter().filter(|i| !computed.contains(i)).partition(|i| action.writer_holds.holds(i.start));
    // Those the table's writer holds are left to it, and the plan says so.
    action.writer_holds.leave_stale(held.iter().map(|i| i.start));
    let added: Vec<Interval> = stale;
    if added.is_empty() {
        return;
    }
    add_to_backfill(action, computed, &added);
    note(action, added, because);
}

/// Adds to `action`'s backfill its version's done intervals in `ranges` (aligned on `grain`);
/// returns them.
fn recompute_done(state: &dyn StateStore, action: &mut Action, grain: interval::Grain, ranges: &[Interval]) -> Result<Vec<Interval>, StateError> {
    let computed: BTreeSet<Interval> = action.backfill.iter().flat_map(|b| b.split(grain)).collect();
    // Never the intervals a shared table's writer holds there ([`Action::writer_holds`]): the
    // done ones among them are left to it, and the plan says so.
    let (held, candidates): (Vec<Interval>, Vec<Interval>) =
        ranges.iter().flat_map(|r| r.split(grain)).filter(|i| !computed.contains(i)).partition(|i| action.writer_holds.holds(i.start));
    if candidates.is_empty() && held.is_empty() {
        return Ok(Vec::new());
    }
    let name = action.name.to_string();
    let mut done: BTreeSet<Millis> = state.done_intervals(&name, action.fingerprint.as_str())?;
    if let Some(from) = &action.reused_from {
        done.extend(state.done_intervals(&name, from.as_str())?);
    }
    action.writer_holds.leave_stale(held.iter().map(|i| i.start).filter(|s| done.contains(s)));
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let added: BTreeSet<Interval> = candidates.into_iter().filter(|i| done.contains(&i.start)).collect();
    if added.is_empty() {
        return Ok(Vec::new());
    }
    let added: Vec<Interval> = added.into_iter().collect();
    add_to_backfill(action, computed, &added);
    Ok(added)
}

/// Sets `action`'s backfill to `computed` (its grain intervals) with `added`.
fn add_to_backfill(action: &mut Action, computed: BTreeSet<Interval>, added: &[Interval]) {
    let all: Vec<Interval> = computed.into_iter().chain(added.iter().copied()).collect::<BTreeSet<_>>().into_iter().collect();
    action.intervals = all.len();
    action.backfill = interval::merge(&all);
}

/// Records in `action.recompute` the done intervals `added` to its backfill and the models
/// `because` of which, with what an earlier pass recorded.
fn note(action: &mut Action, added: Vec<Interval>, because: impl IntoIterator<Item = ModelName>) {
    let r = action.recompute.get_or_insert_with(|| Recompute { intervals: 0, because: Vec::new(), reads_itself: false, added: Vec::new() });
    r.added.extend(added);
    r.added.sort();
    r.added.dedup();
    r.intervals = r.added.len();
    r.because.extend(because);
    r.because.sort();
    r.because.dedup();
}

/// The models upstream of `name` whose own rewrites (`own`), widened to `name`'s grain by
/// `widen`, overlap `added`.
fn sources(
    project: &Project,
    name: &ModelName,
    own: &HashMap<ModelName, Vec<Interval>>,
    added: &[Interval],
    widen: &dyn Fn(&Interval) -> Option<Interval>,
) -> Vec<ModelName> {
    project
        .dag
        .ancestors(name)
        .into_iter()
        .filter(|m| own.get(&m.name).is_some_and(|rs| rs.iter().filter_map(widen).any(|w| added.iter().any(|a| a.start < w.end && w.start < a.end))))
        .map(|m| m.name.clone())
        .collect()
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
