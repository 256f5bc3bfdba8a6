//! What an `apply` or `run` writes besides the plan's builds and backfills, decided from the plan
//! and the state store alone, so `plan` can list it and `apply` does exactly that: `full` and
//! `view` versions rebuilt downstream of new data (SPEC §4 invariant 36), unique-key, partition
//! and SCD type 2 models refreshed as `run` would (the decision "Refreshing is `run`'s job").
//! Both are recorded as pending before anything is written when a parent has new data here
//! ([`Work::rebuilds`]), so a command stopped before them leaves them to the next one.

use super::{Action, Change, Plan};
use crate::core::Kind;
use crate::core::interval;
use crate::core::name::ModelName;
use crate::project::Project;
use crate::state::{StateError, StateStore};
use serde::Serialize;
use std::collections::BTreeSet;

/// A model the apply (or run) writes although the plan has no build or backfill for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refresh {
    /// The model.
    pub model: ModelName,
    /// What and why, as the plan prints it: `rebuild: downstream of new intervals of …`,
    /// `refresh, as `run` would: … has new data here and its cron … ticked since its last refresh`.
    pub note: String,
}

/// The actions an apply (`refresh` false) or run (`refresh` true) of `plan` writes, in the plan's
/// (topological) order, with the pending-rebuild records to write first and what the plan lists
/// besides its builds and backfills.
#[derive(Debug, Default)]
pub struct Work<'p> {
    /// Every action written: built, registered, backfilled, rebuilt or refreshed.
    pub work: Vec<&'p Action>,
    /// `(name, fingerprint, reason)` of the `full`/`view` versions rebuilt because they are
    /// downstream of new data (or were marked), and of the unique-key, partition and SCD type 2
    /// versions refreshed here because a parent has new data here (or whose refresh an earlier
    /// command left pending): recorded as pending before anything is written, cleared as each
    /// is rebuilt or refreshed. The reason stays true of a command that stopped before the
    /// parent's new data was written (`downstream of t.daily, whose new intervals that command
    /// was to compute`): `status` shows it while the record stays.
    pub rebuilds: Vec<(String, String, String)>,
    /// The writes beyond the plan's builds and backfills: rebuilds downstream and refreshes.
    pub refreshes: Vec<Refresh>,
    /// [`super::served_by_other_versions`], when it was read.
    pub shared: Option<BTreeSet<(String, String)>>,
    /// `full`/`view` models downstream of new data left as they are: their table is also served
    /// by another version of them, which another environment reads (outside `prod`).
    pub left_shared: Vec<ModelName>,
    /// Outside `prod`: unique-key, partition and SCD type 2 models not refreshed, and time-range
    /// models whose due intervals are not computed (or wait), because their table is also what
    /// another environment writes (`prod`'s) over other parent tables (with what the plan
    /// prints about each).
    pub left_to_writer: Vec<Refresh>,
}

/// Decides [`Work`] for `plan` against `state` (see the module docs).
///
/// # Errors
/// A state store read fails.
pub fn decide<'p>(project: &Project, plan: &'p Plan, state: &dyn StateStore, refresh: bool) -> Result<Work<'p>, StateError> {
    let relation_by_name: std::collections::HashMap<String, String> =
        plan.actions.iter().filter(|a| a.change != Change::Removed).filter_map(|a| a.physical.clone().map(|p| (a.name.to_string(), p))).collect();
    let relation_of = |n: &str| relation_by_name.get(n).cloned();
    // `full` and `view` models downstream of what this apply or run computes (new intervals of
    // the same version; in `run` also a refresh) are rebuilt too (actions are in topological order, so parents are
    // decided first), unless (outside `prod`) their physical relation is also what another
    // version of the model serves (an inherited table: indirect reuse after a non-breaking parent
    // change), which another environment reads over other parents: rebuilding it here would
    // change that environment's data. `prod` rebuilds its own.
    let mut touched: BTreeSet<&ModelName> = BTreeSet::new();
    let mut shared: Option<BTreeSet<(String, String)>> = None;
    // The `full`/`view` versions rebuilt because they are downstream of new data, and the
    // unique-key, partition and SCD type 2 versions refreshed because a parent has new data
    // here: recorded as pending before anything is written, cleared one by one as they are
    // rebuilt or refreshed, so a process stopped in between leaves a record the next apply or
    // run acts on (SPEC §4 invariant 36 (d)).
    let mut rebuilds: Vec<(String, String, String)> = Vec::new();
    // The pending records, read once when a unique-key, partition or SCD type 2 version is
    // marked or built: a refresh an earlier command recorded and did not do is done here (the
    // plan marked it, `plan::mark_pending_rebuilds`), and a build of such a version (a lost
    // table) ends its record too.
    let keyed_pending: BTreeSet<(String, String)> = if plan
        .actions
        .iter()
        .any(|a| a.change != Change::Removed && (a.rebuild || a.build) && project.dag.get(&a.name).is_some_and(|m| m.kind.is_refreshed()))
    {
        state.pending_rebuilds()?.into_iter().map(|p| (p.name, p.fingerprint)).collect()
    } else {
        BTreeSet::new()
    };
    let mut work: Vec<&'p Action> = Vec::new();
    let mut refreshes: Vec<Refresh> = Vec::new();
    let mut left_shared: Vec<ModelName> = Vec::new();
    let mut left_to_writer: Vec<Refresh> = Vec::new();
    // In `apply`, the models upstream of a time-range model computing intervals here: those `run`
    // refreshes whole (a unique-key, partition, SCD type 2 model without a `cron`, or whose cron
    // ticked since its last refresh; a `full` model whose cron ticked) are refreshed first, as
    // `run` would — its intervals are due up to their last tick (`Dag::due_at`) and would
    // otherwise be computed from their older rows and recorded done for good.
    let feeding = if refresh { BTreeSet::new() } else { feeds_backfill(project, plan) };
    for a in &plan.actions {
        if a.change == Change::Removed || a.kind == "external" {
            continue;
        }
        // A time-range version on the table another environment writes (`prod`'s), over other
        // parent tables, writes nothing there (`plan::WriterHolds::All`): what it wants that the
        // writer has not done is said, not written.
        // Done intervals a model upstream rewrote (or built anew) count too: recomputed here,
        // they would change what the writer serves (`recompute::stale_on_return`, `propagate`).
        if let super::WriterHolds::All { writer, withheld, settings, stale, .. } = &a.writer_holds
            && *withheld + stale.len() > 0
        {
            let why = if *settings {
                "this very version, under other `lookback`/`auto_restatement_intervals`/`cron`/audits/statements, which decide what is written there"
            } else {
                "another version, over other parent tables"
            };
            let done_upstream =
                if stale.is_empty() { String::new() } else { format!("; {} of them done here, over rows a model upstream has rewritten since", stale.len()) };
            leave(
                &mut refreshes,
                &mut left_to_writer,
                &a.name,
                format!(
                    "{} interval(s) not computed here: its table is also what `{writer}` serves ({why}), so it serves `{writer}`'s rows and shows them as `{writer}` computes them (or once `{writer}` serves this change too){done_upstream}",
                    *withheld + stale.len()
                ),
            );
        }
        if let Some(w) = &a.waits_for_writer {
            let (from, upstream, writer) = (crate::core::interval::to_iso(w.from), &w.upstream, &w.writer);
            let note = match plan.actions.iter().find(|u| u.name == *upstream).map(|u| &u.writer_holds) {
                Some(super::WriterHolds::Refreshes { at, .. }) => format!(
                    "{} interval(s) from {from} wait: `{upstream}` upstream is left to `{writer}` here (its table is what `{writer}` serves, {}); they are computed once `{writer}` refreshes it past them",
                    w.intervals,
                    at.map_or_else(
                        || "with no refresh of it recorded yet".to_string(),
                        |t| format!("whose last refresh there holds rows up to {}", crate::core::interval::to_iso(t))
                    )
                ),
                _ => format!(
                    "{} interval(s) from {from} wait: `{upstream}` upstream is left to `{writer}` here (its table is what `{writer}` serves) and holds no rows from then on yet; they are computed once `{writer}` computes them",
                    w.intervals
                ),
            };
            leave(&mut refreshes, &mut left_to_writer, &a.name, note);
        }
        let model = project.dag.get(&a.name);
        let full_or_view = model.is_some_and(|m| matches!(m.kind, Kind::Full | Kind::View));
        // The first parent with new intervals (or refreshed), for the pending-rebuild record.
        let cause = model.and_then(|m| m.parents().iter().find(|p| touched.contains(p)).cloned());
        // An `embedded` model has no data of its own: its readers read its parents' data, so it
        // counts as touched when a parent is (its `full`/`view` children are downstream of that).
        if cause.is_some() && model.is_some_and(|m| matches!(m.kind, Kind::Embedded)) {
            touched.insert(&a.name);
        }
        // A `full` model on a `cron` is rebuilt by `run` at each tick too (sqlmesh's schedule),
        // besides whenever its parents' data changes (it never serves older data than they hold).
        let ticked = match model {
            Some(m) if (refresh || feeding.contains(&a.name)) && !a.build && matches!(m.kind, Kind::Full) && m.cron.is_some() => cron_due(plan, state, a, m)?,
            _ => None,
        };
        // A rebuild an earlier apply or run recorded and did not finish counts like one decided now.
        let mut candidate = !a.build && full_or_view && (cause.is_some() || a.rebuild || ticked.is_some());
        // Outside `prod`, a `full` version on the table `prod` serves, under audits this
        // environment lacks (or other pre/post statements), is never rebuilt here
        // (`plan::WriterHolds::Rebuilds`): the rebuild would replace what `prod` serves with rows
        // `prod`'s audits never checked. Said (and warned of by the apply or run) whenever a
        // rebuild would be due here — new data upstream, its cron, its last build older than its
        // parents' data, a pending record — and left to `prod`'s apply and run.
        if let super::WriterHolds::Rebuilds { writer, behind } = &a.writer_holds
            && !a.build
            && (candidate || behind.is_some())
        {
            let why = match (&cause, ticked, behind) {
                (Some(p), _, _) => cause_reason(project, p).0,
                (None, Some(t), _) => format!("its cron `{}` ticked at {}", model.and_then(|m| m.cron.as_deref()).unwrap_or_default(), interval::to_iso(t)),
                (None, None, Some(b)) => b.clone(),
                (None, None, None) => "an earlier apply or run stopped before rebuilding it".to_string(),
            };
            let env = &plan.env;
            leave(
                &mut refreshes,
                &mut left_to_writer,
                &a.name,
                format!(
                    "not rebuilt here ({why}): its table is also what `{writer}` serves, under audits `{env}` lacks or other pre/post statements (which decide what is written there), so `{env}` serves `{writer}`'s last build of it until `{writer}` rebuilds it (or `{env}` serves `{writer}`'s audits and statements too)"
                ),
            );
            candidate = false;
        }
        let downstream = match (&a.physical, candidate) {
            (Some(physical), true) => {
                if shared.is_none() {
                    shared = Some(super::served_by_other_versions(plan, state)?);
                }
                // `prod` always rebuilds what it serves over its own parents (it is never left
                // stale for another environment's sake); the environments sharing the table see
                // prod's rows, as the reuse promised.
                let mut shared_with =
                    plan.env != crate::core::name::PROD && shared.as_ref().is_some_and(|s| s.contains(&(a.name.to_string(), physical.clone())));
                // A `full` table whose every version reads the same relations is rebuilt rightly
                // for all of them by any environment.
                if shared_with && model.is_some_and(|m| matches!(m.kind, Kind::Full)) {
                    let relations = super::generations::relations(project, &a.name, &relation_of);
                    shared_with = !super::generations::rebuild_is_shared_rightly(
                        state,
                        &plan.env,
                        &a.name.to_string(),
                        a.fingerprint.as_str(),
                        physical,
                        relations.as_ref(),
                    )?;
                }
                if shared_with {
                    // A pending record stays for an environment that may rebuild it (prod).
                    left_shared.push(a.name.clone());
                }
                !shared_with
            }
            _ => false,
        };
        // Why, as the plan says it, and as the pending record keeps it: recorded before the
        // parent's new data is written, it may outlive a command that never wrote it.
        let mut rebuild_note = None;
        if downstream {
            let (said, recorded) = match (&cause, ticked) {
                (Some(p), _) => cause_reason(project, p),
                (None, Some(t)) if !a.rebuild => {
                    let r = format!("its cron `{}` ticked at {}", model.and_then(|m| m.cron.as_deref()).unwrap_or_default(), interval::to_iso(t));
                    (r.clone(), r)
                }
                _ => {
                    let r = a.rebuild_reason.clone().unwrap_or_else(|| "an earlier apply or run stopped before rebuilding it".to_string());
                    (r.clone(), r)
                }
            };
            rebuilds.push((a.name.to_string(), a.fingerprint.as_str().to_string(), recorded));
            rebuild_note = Some(said);
        }
        // A unique-key, partition or SCD type 2 model is refreshed by `run`, and by `apply` too
        // when a parent has new data here (it would otherwise keep rows its time-range children
        // compute their new intervals from, and record done, in this very apply).
        // (A unique-key or partition version pointed at anew whose parents' data changed since
        // its last refresh: `plan::mark_stale_builds`.)
        let keyed = model.is_some_and(|m| m.kind.is_refreshed());
        let version = (a.name.to_string(), a.fingerprint.as_str().to_string());
        // A refresh an earlier apply or run recorded as pending and did not do (it stopped after
        // a parent's new data was written, or before): done now, whatever its schedule says, as
        // that command would have done it (`plan::mark_pending_rebuilds` marked it only where
        // this environment writes the table).
        let pending_refresh = keyed && a.rebuild && keyed_pending.contains(&version);
        let stale_switch = keyed && a.rebuild && !pending_refresh;
        let refreshable = !a.build && !a.register && a.backfill.is_empty() && !downstream;
        let when = match refreshable && (refresh || cause.is_some() || feeding.contains(&a.name) || stale_switch || pending_refresh) {
            true => refreshed(project, plan, state, a)?,
            false => None,
        };
        let mut refreshed_here = when.is_some() || (refreshable && pending_refresh);
        // Outside `prod`, a table that keeps what it recorded (a history, upserted rows,
        // partitions) that another environment writes (`prod`, else the one serving the oldest
        // version there) through another version over other parent tables: a refresh here would
        // write rows computed from this environment's parents into what it serves. Left as it
        // keeps it (as a shared `full` table is, SPEC §4 invariant 36 (e)); decided by the plan
        // ([`super::WriterHolds::Refreshes`]). Over other parent tables it is said whether a
        // refresh is due here or not (a plan with nothing to do too): the rows served here are
        // the writer's, computed from parents this environment does not serve (`prod`'s
        // forward-only change below a changed parent leaves `dev` serving a history reconciled
        // from `prod`'s parent). Under other settings (the same version, the same parents),
        // only when a refresh is due here.
        if let super::WriterHolds::Refreshes { writer, settings, .. } = &a.writer_holds
            && (refreshed_here || (!*settings && !a.build && !a.register))
        {
            refreshed_here = false;
            let (why, until) = if *settings {
                (
                    "this very version, under other `cron`/audits/statements, which decide what is written there",
                    format!(" until `{writer}` serves this change too"),
                )
            } else {
                ("another version, over other parent tables", format!(", refreshed from `{writer}`'s parents, until both serve the same version of it"))
            };
            leave(
                &mut refreshes,
                &mut left_to_writer,
                &a.name,
                format!("not refreshed here: its table is also what `{writer}` serves ({why}), so it keeps `{writer}`'s rows{until}"),
            );
        }
        if refreshed_here && pending_refresh {
            let why = a.rebuild_reason.as_deref().unwrap_or("pending: an earlier apply or run stopped before refreshing it");
            refreshes.push(Refresh { model: a.name.clone(), note: format!("refresh: {why}") });
        } else if refreshed_here {
            let why = match &cause {
                Some(p) => format!("`{p}` has new data here"),
                None if refresh => "`run` refreshes it".to_string(),
                // A version inheriting its older version's table was not pointed at: its reason
                // says what it inherits (`plan::mark_stale_builds`).
                None if stale_switch && a.reused_from.is_some() => a.rebuild_reason.clone().unwrap_or_default(),
                None if stale_switch => {
                    format!("pointed at here, {}", a.rebuild_reason.as_deref().unwrap_or("its parents' data changed since its last refresh"))
                }
                None => "a time-range model below it computes intervals here".to_string(),
            };
            let when = when.unwrap_or_default();
            refreshes.push(Refresh { model: a.name.clone(), note: format!("refresh, as `run` would: {why} and {when}") });
        }
        // Recorded as pending before anything is written, as a rebuild downstream is: a command
        // stopped after the parent's new data and before this refresh would otherwise leave the
        // table behind its parents while the next plan finds nothing to do (the parent done, no
        // new data here any more). A refresh already pending keeps its first record; one decided
        // by the schedule alone (`run`'s every refresh) stays due by that schedule and is not
        // recorded. A build of a version with a pending record (a lost table rebuilt) ends it too.
        if keyed && (refreshed_here || a.build) {
            let reason = match &cause {
                Some(p) if refreshed_here => Some(cause_reason(project, p).1),
                _ if keyed_pending.contains(&version) => Some("an earlier apply or run stopped before refreshing it".to_string()),
                _ => None,
            };
            if let Some(reason) = reason {
                rebuilds.push((version.0, version.1, reason));
            }
        }
        // A marked rebuild is in the plan already.
        if downstream && !a.rebuild {
            refreshes.push(Refresh { model: a.name.clone(), note: format!("rebuild: {}", rebuild_note.unwrap_or_default()) });
        }
        if a.build || a.register || !a.backfill.is_empty() || refreshed_here || downstream {
            // In `apply`, a new version of a parent does not make its children's existing
            // tables rebuild (a non-breaking change keeps them as they are); new intervals of
            // the same version (a backfill, e.g. after a restatement) do, and so does an existing
            // version rebuilt because its relation was lost (its data generation moves: its
            // `full` children would be stale after this apply, SPEC §4 invariant 36).
            if refresh || !a.build || a.repair.as_ref().is_some_and(|r| r.physical_missing) {
                touched.insert(&a.name);
            }
            work.push(a);
        }
    }
    Ok(Work { work, rebuilds, refreshes, shared, left_shared, left_to_writer })
}

/// What a rebuild or refresh downstream of `parent` says: the plan's note, and the pending
/// record's reason (recorded before the parent's new data is written, it says what the command
/// was to do, never that it happened).
fn cause_reason(project: &Project, parent: &ModelName) -> (String, String) {
    if project.dag.get(parent).is_some_and(|m| m.kind.time_range().is_some()) {
        (format!("downstream of new intervals of {parent}"), format!("downstream of {parent}, whose new intervals that command was to compute"))
    } else {
        (format!("downstream of the refresh of {parent}"), format!("downstream of {parent}, which that command was to refresh"))
    }
}

/// Records that `model` is left to another environment (`note` says what and why): a line of the
/// plan's writes ([`Work::refreshes`]) and a warning of the apply or run ([`Work::left_to_writer`]).
fn leave(refreshes: &mut Vec<Refresh>, left: &mut Vec<Refresh>, model: &ModelName, note: String) {
    let entry = Refresh { model: model.clone(), note };
    refreshes.push(entry.clone());
    left.push(entry);
}

/// The models upstream (through any kind) of a time-range action with intervals to compute.
fn feeds_backfill(project: &Project, plan: &Plan) -> BTreeSet<ModelName> {
    let mut out = BTreeSet::new();
    // Children before parents (the plan's order is topological): one pass.
    for a in plan.actions.iter().rev().filter(|a| a.change != Change::Removed) {
        // A time-range model without intervals to compute here reads nothing here: what it
        // holds was computed from its parents before.
        if !a.backfill.is_empty() || (out.contains(&a.name) && a.kind != "incremental_by_time_range") {
            out.extend(project.dag.get(&a.name).map(|m| m.parents()).unwrap_or_default());
        }
    }
    out
}

/// True when `run` refreshes `action`'s model: a unique-key, partition or SCD type 2 model
/// without a `cron` (every run), or one whose cron ticked since it was last refreshed
/// ([`cron_due`]).
pub(super) fn refreshed(project: &Project, plan: &Plan, state: &dyn StateStore, action: &Action) -> Result<Option<String>, StateError> {
    Ok(match project.dag.get(&action.name) {
        Some(m) if m.kind.is_refreshed() => match m.cron.as_deref() {
            None => Some("it has no cron".to_string()),
            Some(cron) if cron_due(plan, state, action, m)?.is_some() => Some(format!("its cron `{cron}` ticked since its last refresh")),
            Some(_) => caught_up_since_refresh(project, plan, state, action)?.map(|until| {
                format!(
                    "its last refresh read the models above it complete only up to {}, and they hold more now (before its next tick)",
                    interval::to_iso(until)
                )
            }),
        },
        _ => None,
    })
}

/// The earliest start of an interval the time-range model `ancestor` (its action in `plan`)
/// wants by the plan's `now` and does not hold: not done (its ledger, plus what the writer of a
/// shared table did), nor computed by this plan when `with_backfill` (before the models below
/// it run). `None` when it holds all it wants. Intervals before the writer's first done one are
/// not counted: the view serves them from the writer's table (empty there).
///
/// # Errors
/// The state store's read.
pub fn first_missing(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    ancestor: &Action,
    with_backfill: bool,
) -> Result<Option<interval::Millis>, StateError> {
    let Some(t) = project.dag.get(&ancestor.name).and_then(|m| m.kind.time_range()) else { return Ok(None) };
    let mut done = state.done_intervals(&ancestor.name.to_string(), ancestor.fingerprint.as_str())?;
    done.extend(ancestor.writer_holds.writer_done().into_iter().flatten().copied());
    if with_backfill {
        done.extend(ancestor.backfill.iter().flat_map(|b| b.split(t.grain)).map(|i| i.start));
    }
    let wanted = interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&ancestor.name, plan.now));
    let before_writer = |s: interval::Millis| matches!(&ancestor.writer_holds, super::WriterHolds::Done(d) if d.first().is_some_and(|f| s < *f));
    Ok(wanted.iter().find(|w| !done.contains(&w.start) && !before_writer(w.start)).map(|w| w.start))
}

/// For a unique-key, partition or SCD type 2 model on a `cron` whose last refresh read its
/// time-range ancestors complete only up to an instant (a signal held them, a batch failed: the
/// record's start, [`crate::state::refreshed_until`]): that instant, when they hold more now —
/// done since, or computed by this plan before it runs — so it is refreshed again before its next
/// tick (the models below it never compute from rows it lacks). `None` otherwise.
fn caught_up_since_refresh(project: &Project, plan: &Plan, state: &dyn StateStore, action: &Action) -> Result<Option<interval::Millis>, StateError> {
    let (name, fp) = (action.name.to_string(), action.fingerprint.as_str());
    let Some(until) = crate::state::refreshed_until(state, &name, fp)? else { return Ok(None) };
    if state.ledger_stats(&name, fp)?.done_up_to.is_none_or(|end| until >= end) {
        return Ok(None);
    }
    for m in project.dag.ancestors(&action.name) {
        let Some(t) = m.kind.time_range().filter(|_| !matches!(m.kind, Kind::External(_))) else { continue };
        let Some(a) = plan.actions.iter().find(|a| a.name == m.name) else { continue };
        // Outside the ancestor's range, `until` is nothing it could hold.
        if until < t.start || t.end.is_some_and(|end| until >= end) {
            continue;
        }
        // It holds more only once the interval at `until` is due (wanted by this plan's `now`)
        // and held: an interval not due yet (an earlier `now`, a cron on the ancestor) is not
        // one it caught up on.
        let wanted = interval::wanted_span(t.start, t.end, t.grain, project.dag.due_at(&m.name, plan.now));
        if !wanted.is_some_and(|w| w.start <= until && until < w.end) {
            return Ok(None);
        }
        if first_missing(project, plan, state, a, true)?.is_some_and(|f| f <= until) {
            return Ok(None);
        }
    }
    Ok(Some(until))
}

/// For a model `run` refreshes whole (`full`, unique-key, partition, SCD type 2) on a `cron`:
/// the tick its refresh is due for, when the cron ticked (at or before the plan's `now`) after the
/// last tick its version was refreshed for (the newest done end of its ledger,
/// [`StateStore::record_refresh`]); `None` when it is not due, has no cron, or is another kind.
fn cron_due(plan: &Plan, state: &dyn StateStore, action: &Action, model: &crate::core::Model) -> Result<Option<interval::Millis>, StateError> {
    if !model.kind.is_refreshed_whole() {
        return Ok(None);
    }
    let Some(tick) = model.schedule().and_then(|c| crate::core::cron::last_tick(&c, plan.now)) else { return Ok(None) };
    let last = state.ledger_stats(&action.name.to_string(), action.fingerprint.as_str())?.done_up_to;
    Ok(last.is_none_or(|l| l < tick).then_some(tick))
}
