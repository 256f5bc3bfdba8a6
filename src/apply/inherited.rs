//! What an apply writes into a table it inherits, taken back when the apply promotes nothing
//! (SPEC §4 invariant 65).
//!
//! A time-range version that inherits another version's table — a forward-only change keeps the
//! old version's table, an indirect reuse shares it — computes its intervals there before the
//! promotion, and every environment serving a version stored in that table sees each batch as
//! it commits: `prod`, still on the old version, serves the new query's rows. When the apply
//! then fails (a blocking audit of the version or of a model below it, a build, the view swap),
//! those environments keep serving the old version, whose ledger lacks those intervals (or
//! called them done before a lookback rewrote them): they would serve rows of a version they do
//! not serve, for intervals their ledger does not hold, until a later run recomputes them — or
//! for good, for a rewritten interval their ledger still calls done.
//!
//! So, before anything is written, [`clear_rewritten`] takes the done intervals a forward-only
//! version is about to rewrite out of the ledgers of the other versions stored in its table
//! (another query's rows are about to replace theirs): a process killed from then on leaves
//! them not done, so the next `run` or `apply` of the environments serving those versions
//! recomputes them with their own query, and `status` counts them, instead of serving the new
//! query's rows as theirs for good. And when the apply fails, [`take_back`] clears the intervals
//! each such version (served by no environment) wrote from the ledger of every version stored in
//! the table, then deletes their rows (a lake: their files, then re-lists the view), and gives
//! back the done intervals [`clear_rewritten`] took that no batch rewrote: every environment
//! then serves exactly what its version's ledger records — the old rows, less the intervals the
//! new version rewrote (not done, recomputed by the next run or apply).

use super::{ApplyError, batch, lake};
use crate::core::interval::{self, Interval};
use crate::core::{ModelName, Target};
use crate::engine::Engine;
use crate::plan::{Action, Change};
use crate::project::Project;
use crate::state::{IntervalStatus, SnapshotIndex, StateError, StateStore};
use std::collections::{BTreeMap, BTreeSet};

/// Per model, the grain intervals whose batches this apply committed into the table it inherits
/// (or may have: a batch failing transiently, whose commit may have landed; a lake version's
/// every planned interval, its files being listed together).
pub(super) type Wrote = BTreeMap<ModelName, BTreeSet<Interval>>;

/// Per forward-only model, per other version stored in its table (fingerprint), the done grain
/// intervals [`clear_rewritten`] took out of that version's ledger.
pub(super) type Cleared = BTreeMap<ModelName, BTreeMap<String, BTreeSet<Interval>>>;

/// True when `action` writes batches into a table it inherits: a time-range version stored in
/// another version's table (forward-only, or an indirect reuse) with intervals to compute.
pub(super) fn writes_inherited(project: &Project, action: &Action) -> bool {
    action.reused_from.is_some()
        && !action.backfill.is_empty()
        && action.physical.as_deref().is_some_and(|p| !p.is_empty())
        && project.dag.get(&action.name).is_some_and(|m| m.kind.time_range().is_some())
}

/// The versions of `name` stored in `physical` (per `index`) other than `fp`, sorted.
fn others_in(index: &SnapshotIndex, name: &str, physical: &str, fp: &str) -> Vec<String> {
    let mut out = crate::state::versions_in(index, name, physical);
    out.retain(|f| f != fp);
    out
}

/// Before the first write of an apply: for each forward-only time-range version of `work` with
/// intervals to compute, clears from the ledger of every other version stored in its table the
/// done intervals among them (a lookback, a recomputation: the batches replace their rows with
/// the new query's). Returns what it cleared, for [`take_back`] to give back what no batch
/// rewrote when the apply fails.
///
/// # Errors
/// The state store's reads and writes (what was cleared before stays cleared: not done, so
/// recomputed by the next run or apply of an environment serving that version).
pub(super) fn clear_rewritten(project: &Project, state: &dyn StateStore, work: &[&Action]) -> Result<Cleared, StateError> {
    let mut out = Cleared::new();
    let forward_only: Vec<&Action> = work.iter().copied().filter(|a| a.change == Change::ForwardOnly && writes_inherited(project, a)).collect();
    if forward_only.is_empty() {
        return Ok(out);
    }
    let index = state.snapshot_index()?;
    for action in forward_only {
        let (Some(t), Some(physical)) = (project.dag.get(&action.name).and_then(|m| m.kind.time_range()), action.physical.as_deref()) else { continue };
        let name = action.name.to_string();
        let planned: BTreeSet<Interval> = action.backfill.iter().flat_map(|b| b.split(t.grain)).collect();
        for other in others_in(&index, &name, physical, action.fingerprint.as_str()) {
            let done = state.done_intervals(&name, &other)?;
            let rewritten: Vec<Interval> = planned.iter().filter(|i| done.contains(&i.start)).copied().collect();
            if rewritten.is_empty() {
                continue;
            }
            for range in interval::merge(&rewritten) {
                state.clear_intervals(&name, &other, range.start, range.end)?;
            }
            let version = &other[..12.min(other.len())];
            tracing::debug!(model = %action.name, version, intervals = rewritten.len(), "done intervals the forward-only version rewrites in the table it keeps: no longer done for the version it kept");
            out.entry(action.name.clone()).or_default().insert(other, rewritten.into_iter().collect());
        }
    }
    Ok(out)
}

/// After an apply that failed without promoting: for each version of `work` that wrote into a
/// table it inherits (`wrote`) or took done intervals from the versions stored there
/// (`cleared`), and that no environment serves (a promotion whose record landed although the
/// apply failed keeps what it wrote), takes its writes back ([`take_back_one`]). Nothing when
/// this process no longer holds its environment's lock (another may be writing those tables):
/// the ledgers then say those intervals are not done (or still hold what the new version
/// wrote, as after a kill), and the next run or apply recomputes them. A failure is a warning
/// naming the model: the apply's own error is the one reported. Returns the models whose
/// written intervals were taken back (not done any more).
pub(super) fn take_back(
    project: &Project,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    work: &[&Action],
    wrote: &Wrote,
    cleared: &Cleared,
) -> Vec<ModelName> {
    let mut taken = Vec::new();
    let inheriting: Vec<&Action> =
        work.iter().copied().filter(|a| writes_inherited(project, a) && (wrote.contains_key(&a.name) || cleared.contains_key(&a.name))).collect();
    if inheriting.is_empty() {
        return taken;
    }
    let left = "what it wrote into tables other versions share is left to the next run or apply to recompute";
    if let Err(e) = state.check_fence() {
        tracing::warn!("the apply failed and no longer holds its lock: {left}: {e}");
        return taken;
    }
    let served = match served_versions(state) {
        Ok(served) => served,
        Err(e) => {
            tracing::warn!("the apply failed and cannot read the environments' pointers: {left}: {e}");
            return taken;
        }
    };
    let index = match state.snapshot_index() {
        Ok(index) => index,
        Err(e) => {
            tracing::warn!("the apply failed and cannot read the snapshots: {left}: {e}");
            return taken;
        }
    };
    let nothing = BTreeMap::new();
    for action in inheriting {
        if served.contains(&(action.name.to_string(), action.fingerprint.as_str().to_string())) {
            continue;
        }
        let written: Vec<Interval> = wrote.get(&action.name).map(|w| w.iter().copied().collect()).unwrap_or_default();
        let rewritten = cleared.get(&action.name).unwrap_or(&nothing);
        match take_back_one(project, state, engine, &index, action, &written, rewritten) {
            Ok(()) if !written.is_empty() => {
                tracing::warn!(
                    model = %action.name,
                    intervals = written.len(),
                    "nothing was promoted: the rows this version wrote into the table it shares with the version environments serve were taken back (those intervals are not done, the next run or apply computes them)"
                );
                taken.push(action.name.clone());
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(model = %action.name, "nothing was promoted, and the rows this version wrote into the table it shares could not be taken back: the ledgers say those intervals are not done, so the next run or apply of the environments serving that table recomputes them: {e}")
            }
        }
    }
    taken
}

/// After [`take_back`]: the unique-key, partition and SCD type 2 versions of `work` below a
/// model whose rows were taken back (`taken`) may have been refreshed by this apply from those
/// rows (upserted, replaced or reconciled from rows no ledger records now), in the table the
/// version `env` serves shares (the unchanged version `prod` serves, below a forward-only
/// parent). That served version is recorded as a pending refresh, so `status` lists it and the
/// next apply or run of `env` refreshes it ([`crate::plan::mark_pending_rebuilds`]), as a `full`
/// model below is found stale. Only `env`'s own: a version another environment serves from that
/// table is refreshed by its writer, and the refused version is served by none. A version
/// already pending keeps its first record. A failure is a warning naming the models: the apply's
/// own error is the one reported.
pub(super) fn refresh_again(project: &Project, state: &dyn StateStore, env: &str, work: &[&Action], taken: &[ModelName]) {
    if taken.is_empty() {
        return;
    }
    let taken: BTreeSet<&ModelName> = taken.iter().collect();
    let below: Vec<(&Action, String)> = work
        .iter()
        .filter(|a| a.change != Change::Removed && project.dag.get(&a.name).is_some_and(|m| m.kind.is_refreshed()))
        .filter_map(|a| {
            let from = project.dag.ancestors(&a.name).into_iter().find(|p| taken.contains(&p.name))?;
            Some((*a, format!("downstream of {}, whose rows an apply that promoted nothing took back after this refresh may have read them", from.name)))
        })
        .collect();
    if below.is_empty() {
        return;
    }
    let read = state.env_pointers(env).and_then(|pointers| Ok((pointers, state.snapshot_index()?)));
    let (pointers, index) = match read {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!("cannot read which refreshes read rows taken back (the next run refreshes them as due): {e}");
            return;
        }
    };
    let mut records: Vec<(String, String, String)> = Vec::new();
    for (a, reason) in below {
        let name = a.name.to_string();
        let Some(served) = pointers.get(&name) else { continue };
        let physical = a.physical.as_deref().filter(|p| !p.is_empty());
        let same_table = served == a.fingerprint.as_str() || physical.is_some_and(|p| others_in(&index, &name, p, a.fingerprint.as_str()).contains(served));
        if same_table {
            records.push((name, served.clone(), reason));
        }
    }
    if records.is_empty() {
        return;
    }
    if let Err(e) = state.record_pending_rebuilds(&records, interval::now_millis()) {
        let models: Vec<&str> = records.iter().map(|r| r.0.as_str()).collect();
        tracing::warn!("cannot record that {} may hold rows read from what was taken back (the next run refreshes them as due): {e}", models.join(", "));
    }
}

/// Every `(model, fingerprint)` some environment's pointer names.
fn served_versions(state: &dyn StateStore) -> Result<BTreeSet<(String, String)>, StateError> {
    let mut out = BTreeSet::new();
    for env in state.environments()? {
        out.extend(state.env_pointers(&env)?);
    }
    Ok(out)
}

/// Takes back what `action`'s version wrote into the table it inherits (`written`, grain
/// intervals): first clears them from the ledger of every version stored in the table (its own
/// too), then deletes their rows in one engine transaction (a lake's files, then re-lists its
/// view: [`lake::take_back`]) — in that order, so a process stopped in between leaves intervals
/// not done (recomputed by the next run or apply), never done over deleted rows. Then marks done
/// again, for each other version, the intervals of `rewritten` (taken from its ledger before the
/// writes) that no batch wrote: its rows are still there.
///
/// # Errors
/// The state store's writes; the engine's `DELETE` ([`ApplyError::Build`] naming the model);
/// [`lake::take_back`]'s.
fn take_back_one(
    project: &Project,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    index: &SnapshotIndex,
    action: &Action,
    written: &[Interval],
    rewritten: &BTreeMap<String, BTreeSet<Interval>>,
) -> Result<(), ApplyError> {
    let (Some(model), Some(physical)) = (project.dag.get(&action.name), action.physical.as_deref()) else { return Ok(()) };
    let Some(t) = model.kind.time_range() else { return Ok(()) };
    let name = action.name.to_string();
    let fp = action.fingerprint.as_str();
    let ranges = interval::merge(written);
    let mut versions = others_in(index, &name, physical, fp);
    versions.push(fp.to_string());
    for range in &ranges {
        for version in &versions {
            state.clear_intervals(&name, version, range.start, range.end)?;
        }
    }
    if !ranges.is_empty() {
        if model.target == Target::Parquet {
            lake::take_back(project, model, physical, t.grain, written, state, engine)?;
        } else {
            let statements: Vec<String> = ranges.iter().map(|r| batch::delete(model, t, physical, *r)).collect();
            engine.transaction(&statements).map_err(|e| ApplyError::build(model, None, e))?;
        }
    }
    let written: BTreeSet<Interval> = written.iter().copied().collect();
    for (version, gone) in rewritten {
        let back: Vec<Interval> = gone.iter().filter(|i| !written.contains(i)).copied().collect();
        state.mark_intervals(&name, version, &back, IntervalStatus::Done, interval::now_millis())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The versions sharing a table are the model's other versions stored in that relation: not
    /// itself, not the model's versions in another relation, not another model's.
    #[test]
    fn the_other_versions_in_a_table_are_the_models_versions_stored_there_but_itself() {
        let mut index = SnapshotIndex::new();
        for (name, fp, physical) in [("t.d", "a", "T"), ("t.d", "e", "T"), ("t.d", "c", "U"), ("t.x", "d", "T"), ("t.d", "b", "T")] {
            index.insert((name.to_string(), fp.to_string()), (physical.to_string(), "incremental_by_time_range".to_string()));
        }
        assert_eq!(others_in(&index, "t.d", "T", "a"), ["b", "e"]);
        assert!(others_in(&index, "t.d", "U", "c").is_empty());
    }
}
