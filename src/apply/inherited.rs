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
//!
//! A unique-key, partition or SCD type 2 model below such a version may be refreshed by the same
//! apply in a table environments serve (its version inherits the table of the version `prod`
//! serves): upserted, replaced or reconciled from rows [`take_back`] then deletes. A later
//! refresh never undoes that (an upsert never deletes a key its query no longer returns, a
//! reconciliation never rewrites the history it closed), so [`keep`] marks such a table among
//! the environment's intents and copies it into a table of the database just before the refresh
//! writes it, and when the apply fails, [`put_back`] puts the copy back in place of the
//! refreshed rows: the table holds what it held before the apply. An apply killed before its
//! promotion or its put-back leaves the mark and the copy: the next apply or run of its
//! environment puts it back first ([`recover_kept`]). What cannot be put back is left to
//! [`refresh_again`], which records a pending refresh.

use super::{ApplyError, batch, lake};
use crate::core::interval::{self, Interval};
use crate::core::{Model, ModelName, Target};
use crate::engine::Engine;
use crate::plan::{Action, Change};
use crate::project::Project;
use crate::state::{IntervalStatus, KeptCopy, SnapshotIndex, StateError, StateStore};
use std::collections::{BTreeMap, BTreeSet};

/// Per model, the grain intervals whose batches this apply committed into the table it inherits
/// (or may have: a batch failing transiently, whose commit may have landed; a lake version's
/// every planned interval, its files being listed together).
pub(super) type Wrote = BTreeMap<ModelName, BTreeSet<Interval>>;

/// Per forward-only model, per other version stored in its table (fingerprint), the done grain
/// intervals [`clear_rewritten`] took out of that version's ledger.
pub(super) type Cleared = BTreeMap<ModelName, BTreeMap<String, BTreeSet<Interval>>>;

/// A copy of a unique-key, partition or SCD type 2 table taken just before this apply refreshed
/// it in place ([`keep`]): put back if the apply fails ([`put_back`]), dropped otherwise
/// ([`drop_kept`]).
#[derive(Debug)]
pub(super) struct Kept {
    /// The table refreshed in place (qualified, quoted).
    physical: String,
    /// The copy, qualified ([`crate::engine::kept_copy_relation`]); `None` when the engine lacked
    /// the table (lost: this apply rebuilt it), put back empty.
    copy: Option<String>,
    /// The table's columns when copied, in order: put back by name.
    columns: Vec<String>,
    /// The version this apply refreshed the table for.
    fingerprint: String,
}

/// Per model, the copy [`keep`] took of its table.
pub(super) type Keeps = BTreeMap<ModelName, Kept>;

/// What [`take_back`] found and did.
#[derive(Debug, Default)]
pub(super) struct TakenBack {
    /// The models whose written intervals were taken back (not done any more).
    pub taken: Vec<ModelName>,
    /// Every model whose version wrote into a table it inherits, or took done intervals from the
    /// versions stored there, that no environment serves, read while this process held its
    /// environment's lock: what it wrote was taken back, or was to be (a step failed). What the
    /// apply refreshed below one of them is put back ([`put_back`]).
    pub refused: BTreeSet<ModelName>,
}

/// True when `action` writes batches: a time-range version with a table and intervals to
/// compute.
fn writes_batches(project: &Project, action: &Action) -> bool {
    !action.backfill.is_empty()
        && action.physical.as_deref().is_some_and(|p| !p.is_empty())
        && project.dag.get(&action.name).is_some_and(|m| m.kind.time_range().is_some())
}

/// The models of `work` whose versions write batches into a table other versions of the model
/// are stored in: one inheriting another version's table (forward-only, an indirect reuse:
/// `reused_from`), or an existing version stored with others (a return to a version served
/// before, on the table an environment serves through another version; a version recorded by
/// an earlier attempt). Every environment serving one of those other versions sees each batch
/// as it commits: what they write is taken back if the apply fails and no environment serves
/// them ([`at_risk`], [`take_back`]). The snapshot index is read only when a version writing
/// batches inherits nothing.
///
/// # Errors
/// The state store's read.
pub(super) fn inheriting(project: &Project, state: &dyn StateStore, work: &[&Action]) -> Result<BTreeSet<ModelName>, StateError> {
    let mut out = BTreeSet::new();
    let mut index: Option<SnapshotIndex> = None;
    for action in work.iter().copied().filter(|a| writes_batches(project, a)) {
        if action.reused_from.is_none() {
            let index = match &mut index {
                Some(index) => index,
                slot => slot.insert(state.snapshot_index()?),
            };
            let physical = action.physical.as_deref().unwrap_or_default();
            if others_in(index, &action.name.to_string(), physical, action.fingerprint.as_str()).is_empty() {
                continue;
            }
        }
        out.insert(action.name.clone());
    }
    Ok(out)
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
pub(super) fn clear_rewritten(project: &Project, state: &dyn StateStore, work: &[&Action], inheriting: &BTreeSet<ModelName>) -> Result<Cleared, StateError> {
    let mut out = Cleared::new();
    let forward_only: Vec<&Action> = work.iter().copied().filter(|a| a.change == Change::ForwardOnly && inheriting.contains(&a.name)).collect();
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
/// written intervals were taken back (not done any more), and those whose writes were to be.
pub(super) fn take_back(
    project: &Project,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    (work, inheriting): (&[&Action], &BTreeSet<ModelName>),
    wrote: &Wrote,
    cleared: &Cleared,
) -> TakenBack {
    let mut out = TakenBack::default();
    let inheriting: Vec<&Action> =
        work.iter().copied().filter(|a| inheriting.contains(&a.name) && (wrote.contains_key(&a.name) || cleared.contains_key(&a.name))).collect();
    if inheriting.is_empty() {
        return out;
    }
    let left = "what it wrote into tables other versions share is left to the next run or apply to recompute";
    if let Err(e) = state.check_fence() {
        tracing::warn!("the apply failed and no longer holds its lock: {left}: {e}");
        return out;
    }
    let served = match served_versions(state) {
        Ok(served) => served,
        Err(e) => {
            tracing::warn!("the apply failed and cannot read the environments' pointers: {left}: {e}");
            return out;
        }
    };
    let index = match state.snapshot_index() {
        Ok(index) => index,
        Err(e) => {
            tracing::warn!("the apply failed and cannot read the snapshots: {left}: {e}");
            return out;
        }
    };
    let nothing = BTreeMap::new();
    for action in inheriting {
        if served.contains(&(action.name.to_string(), action.fingerprint.as_str().to_string())) {
            continue;
        }
        out.refused.insert(action.name.clone());
        let written: Vec<Interval> = wrote.get(&action.name).map(|w| w.iter().copied().collect()).unwrap_or_default();
        let rewritten = cleared.get(&action.name).unwrap_or(&nothing);
        match take_back_one(project, state, engine, &index, action, &written, rewritten) {
            Ok(()) if !written.is_empty() => {
                tracing::warn!(
                    model = %action.name,
                    intervals = written.len(),
                    "nothing was promoted: the rows this version wrote into the table it shares with the version environments serve were taken back (those intervals are not done, the next run or apply computes them)"
                );
                out.taken.push(action.name.clone());
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(model = %action.name, "nothing was promoted, and the rows this version wrote into the table it shares could not be taken back: the ledgers say those intervals are not done, so the next run or apply of the environments serving that table recomputes them: {e}")
            }
        }
    }
    out
}

/// After [`take_back`] and [`put_back`]: the unique-key, partition and SCD type 2 versions of
/// `work` below a model whose rows were taken back (`taken`) may have been refreshed by this
/// apply from those rows (upserted, replaced or reconciled from rows no ledger records now), in
/// the table the version `env` serves shares (the unchanged version `prod` serves, below a
/// forward-only parent), and those not `restored` (their table's copy was not put back: its
/// refresh did not write in place into a table the engine held, or the copy failed to go back)
/// keep what it wrote, or (a lost table rebuilt, emptied by [`put_back`]) hold nothing. That served version is recorded as a pending refresh, so `status` lists
/// it and the next apply or run of `env` refreshes it ([`crate::plan::mark_pending_rebuilds`]),
/// as a `full` model below is found stale. Only `env`'s own: a version another environment
/// serves from that table is refreshed by its writer, and the refused version is served by
/// none. A version already pending keeps its first record. A failure is a warning naming the
/// models: the apply's own error is the one reported.
pub(super) fn refresh_again(project: &Project, state: &dyn StateStore, env: &str, work: &[&Action], taken: &[ModelName], restored: &BTreeSet<ModelName>) {
    if taken.is_empty() {
        return;
    }
    let taken: BTreeSet<&ModelName> = taken.iter().collect();
    let below: Vec<(&Action, String)> = work
        .iter()
        .filter(|a| a.change != Change::Removed && !restored.contains(&a.name) && project.dag.get(&a.name).is_some_and(|m| m.kind.is_refreshed()))
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

/// The models of `work` whose writes into a table they inherit [`take_back`] takes back if the
/// apply fails: time-range versions writing into a table other versions are stored in
/// (`inheriting`, [`inheriting`]) that no environment serves (read before any write;
/// [`take_back`] reads it again). Nothing is read when none writes into such a table.
///
/// # Errors
/// The state store's reads.
pub(super) fn at_risk(state: &dyn StateStore, work: &[&Action], inheriting: &BTreeSet<ModelName>) -> Result<BTreeSet<ModelName>, StateError> {
    let inheriting: Vec<&Action> = work.iter().copied().filter(|a| inheriting.contains(&a.name)).collect();
    if inheriting.is_empty() {
        return Ok(BTreeSet::new());
    }
    let served = served_versions(state)?;
    Ok(inheriting.into_iter().filter(|a| !served.contains(&(a.name.to_string(), a.fingerprint.as_str().to_string()))).map(|a| a.name.clone()).collect())
}

/// True when the unique-key, partition or SCD type 2 refresh of `action` (`model`) writes in
/// place into a table the engine held before this apply (`catalog`: the table of the version an
/// environment serves, or of one stored with it) below a model of `at_risk` ([`at_risk`]), whose
/// rows it may read before they are taken back; or the table of such a version the engine lacked
/// (lost: dropped by hand, an older copy of the database), which the apply rebuilds from those
/// rows: a version recorded as refreshed, which an environment serves or may point at later. Not
/// a table the apply builds for a new version (an SCD history carried over too: no environment
/// serves what it holds), nor a lake or DuckLake table (the kinds are the engine's tables only).
fn refreshes_kept_table(
    project: &Project,
    at_risk: &BTreeSet<ModelName>,
    catalog: &crate::engine::Catalog,
    action: &Action,
    model: &Model,
    physical: &str,
) -> bool {
    !at_risk.is_empty()
        && model.kind.is_refreshed()
        && model.target == Target::Table
        && (rebuilds_lost(action) || (!action.build && !batch::table_absent(physical, catalog)))
        && !physical.is_empty()
        && project.dag.ancestors(&action.name).iter().any(|m| at_risk.contains(&m.name))
}

/// True when `action` rebuilds its recorded version's table, which the engine lacks.
fn rebuilds_lost(action: &Action) -> bool {
    action.repair.as_ref().is_some_and(|r| r.physical_missing)
}

/// Just before the unique-key, partition or SCD type 2 refresh of `action` (`model`) writes into
/// `physical`, when it writes there in place below a model whose writes the apply takes back if
/// it fails ([`refreshes_kept_table`]): drops a copy an earlier apply left of it, records the
/// mark of the copy among `env`'s intents ([`StateStore::record_kept_copy`]), then copies the
/// table into a table of the database ([`crate::engine::kept_copy_relation`],
/// [`crate::engine::dialect::Dialect::copy_table`]), for [`put_back`] — or, killed before that,
/// for the next apply or run of `env` ([`recover_kept`]): a marked copy is always one taken
/// after its mark. A lost table the apply rebuilds is not copied (it held nothing) nor marked
/// (after a kill, what its rebuild wrote cannot be told from a later repair by another
/// environment: not covered). `None` (nothing copied) otherwise.
///
/// # Errors
/// The state store's write; [`ApplyError::Build`] naming the model when the table cannot be
/// described or copied: nothing of the refresh is written then.
pub(super) fn keep(
    project: &Project,
    (state, env): (&dyn StateStore, &str),
    at_risk: &BTreeSet<ModelName>,
    catalog: &crate::engine::Catalog,
    (action, model): (&Action, &Model),
    physical: &str,
    engine: &mut dyn Engine,
) -> Result<Option<Kept>, ApplyError> {
    if !refreshes_kept_table(project, at_risk, catalog, action, model, physical) {
        return Ok(None);
    }
    let fingerprint = action.fingerprint.as_str().to_string();
    if rebuilds_lost(action) {
        // Nothing to copy: it held nothing before this apply, and holds nothing if put back.
        tracing::debug!(model = %model.name, table = physical, "lost table rebuilt below what may be taken back: emptied if nothing is promoted");
        return Ok(Some(Kept { physical: physical.to_string(), copy: None, columns: Vec::new(), fingerprint }));
    }
    let columns: Vec<String> =
        engine.describe(&format!("SELECT * FROM {physical}")).map_err(|e| ApplyError::build(model, None, e))?.into_iter().map(|c| c.name).collect();
    let copy = crate::engine::kept_copy_relation(physical);
    // A copy an earlier apply left (killed after its promotion, or its mark forgotten) goes
    // before the mark: the copy the mark points at is then always this one.
    engine.execute(&engine.sql().drop_table_if_exists(&copy)).map_err(|e| ApplyError::build(model, None, e))?;
    // The mark before the copy: a process killed once it is recorded leaves this copy to put
    // back, or none yet (then the table was not written either).
    let mark = KeptCopy { name: model.name.to_string(), fingerprint: fingerprint.clone(), physical: physical.to_string() };
    state.record_kept_copy(env, &mark, interval::now_millis())?;
    super::fault::crash_point(|| format!("after-kept-mark:{}", model.name));
    engine.transaction(&engine.sql().copy_table(&copy, physical)).map_err(|e| ApplyError::build(model, None, e))?;
    tracing::debug!(model = %model.name, table = physical, copy = %copy, "table copied before its refresh in place: put back if nothing is promoted");
    Ok(Some(Kept { physical: physical.to_string(), copy: Some(copy), columns, fingerprint }))
}

/// Before an apply or run of `env` records its intents: the tables an earlier apply of `env`
/// marked as refreshed in place below a version whose writes it would take back
/// ([`keep`]), and left marked — stopped (killed) before its promotion or its put-back — are put
/// back as they were before that apply, from the copy it left (what that apply wrote of the
/// version above stays in its table, not done in the ledgers of the versions an environment
/// serves: the next run or apply recomputes it, invariant 65). A mark whose copy the engine does
/// not hold (killed before the copy, or after the put-back committed) leaves the table as it
/// is. The marks go with the intents this command records next. Called before the command
/// decides its work, which then sees the ledger the put-back cleared.
///
/// # Errors
/// The state store's reads and writes; the engine's (the catalog read, the put-back,
/// [`ApplyError::Build`] naming the model): the marks stay for the next command.
pub(super) fn recover_kept(project: &Project, state: &dyn StateStore, engine: &mut dyn Engine, env: &str) -> Result<(), ApplyError> {
    let marks = state.kept_copies(env)?;
    if marks.is_empty() {
        return Ok(());
    }
    let catalog = engine.catalog()?;
    for mark in marks {
        let copy = crate::engine::kept_copy_relation(&mark.physical);
        if batch::table_absent(&copy, &catalog) || batch::table_absent(&mark.physical, &catalog) {
            continue;
        }
        let columns = engine.describe(&format!("SELECT * FROM {copy}"))?.into_iter().map(|c| c.name).collect();
        let kept = Kept { physical: mark.physical.clone(), copy: Some(copy), columns, fingerprint: mark.fingerprint.clone() };
        let model = ModelName::parse(&mark.name).ok().and_then(|n| project.dag.get(&n));
        put_back_one(state, engine, (&mark.name, model), &kept)?;
        tracing::warn!(model = %mark.name, "an apply of `{env}` stopped before it promoted or took back what it wrote: its table, refreshed in place from rows it would have taken back, holds what it held before that apply again");
    }
    Ok(())
}

/// After [`take_back`]: each table [`keep`] copied before this apply refreshed it in place below
/// a model of `refused` (its writes taken back, or meant to be: [`TakenBack::refused`]) gets the
/// copy's rows back in place of its own ([`put_back_one`]): it holds what it held before the
/// apply, which no later refresh would give back (an upsert never deletes a key its query no
/// longer returns, a reconciliation never reopens what it closed); a lost table the apply
/// rebuilt is emptied (it held nothing). Nothing when this process no longer holds its
/// environment's lock (another may be writing those tables). Returns the models put back as
/// they were; the others (an emptied table among them) are left to [`refresh_again`], those
/// not put back keeping their copy for [`drop_kept`]. A failure is a warning naming the model: the apply's own error is the
/// one reported.
pub(super) fn put_back(
    project: &Project,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    refused: &BTreeSet<ModelName>,
    kept: &mut Keeps,
) -> BTreeSet<ModelName> {
    let mut restored = BTreeSet::new();
    let below: Vec<ModelName> = kept.keys().filter(|name| project.dag.ancestors(name).iter().any(|m| refused.contains(&m.name))).cloned().collect();
    if below.is_empty() {
        return restored;
    }
    if let Err(e) = state.check_fence() {
        tracing::warn!("the apply failed and no longer holds its lock: the tables it refreshed below what it took back keep that refresh: {e}");
        return restored;
    }
    for name in below {
        let (Some(k), Some(model)) = (kept.get(&name), project.dag.get(&name)) else { continue };
        match put_back_one(state, engine, (&name.to_string(), Some(model)), k) {
            Ok(()) if k.copy.is_none() => {
                // Left to `refresh_again`: a pending refresh fills it (it held nothing before).
                tracing::warn!(model = %name, "nothing was promoted: its lost table, rebuilt from rows that were then taken back, was emptied; its next refresh fills it");
                kept.remove(&name);
            }
            Ok(()) => {
                tracing::warn!(model = %name, "nothing was promoted: its table, refreshed in place from rows that were then taken back, holds what it held before the apply again");
                kept.remove(&name);
                restored.insert(name);
            }
            Err(e) => {
                tracing::warn!(model = %name, "nothing was promoted, and its table, refreshed in place from rows that were then taken back, could not be put back as it was: {e}")
            }
        }
    }
    restored
}

/// Puts `k`'s copy back into the table of `model` it was taken from, and the version's records
/// with it: the data generation of every version stored in the table is moved first, as for any
/// write (a `full` model built from the refreshed rows is found stale, a recorded audit pass
/// no longer counts; generations never go back), then, in ONE engine transaction, the table's
/// rows are replaced by the copy's, by column name, and the copy is dropped
/// ([`crate::engine::dialect::Dialect::restore_from_temp`]); then the refresh the version
/// recorded ([`StateStore::record_refresh`]: its ledger) is cleared, so neither its cron nor the
/// plan's reading of the table's last refresh ([`crate::plan::generations::last_refresh_on`])
/// takes the refresh taken back for done: the version counts as never refreshed (refreshed when
/// due). Its other records only say more than it holds (what it was built from names the refused
/// parent version, whose generation the take-back moved): the next plan refreshes it where those
/// are read. A process stopped before the engine transaction commits leaves the refreshed rows,
/// recording no pending refresh (as one stopped before [`take_back`]).
///
/// # Errors
/// The state store's writes; the engine's ([`ApplyError::Build`] naming the model: the
/// transaction rolled back, the refreshed rows and the copy as they were).
fn put_back_one(state: &dyn StateStore, engine: &mut dyn Engine, (name, model): (&str, Option<&Model>), k: &Kept) -> Result<(), ApplyError> {
    // Lost before the apply and not rebuilt (its build failed first): nothing to empty.
    if k.copy.is_none() && batch::table_absent(&k.physical, &engine.catalog()?) {
        return Ok(());
    }
    let write = state.begin_data_write(name, &k.fingerprint, interval::now_millis())?;
    let statements = match &k.copy {
        Some(copy) => engine.sql().restore_from_copy(&k.physical, copy, &k.columns),
        // Lost before the apply, rebuilt by it: emptied (the views selecting from it keep it).
        None => vec![format!("DELETE FROM {}", k.physical)],
    };
    engine.transaction(&statements).map_err(|e| match model {
        Some(model) => ApplyError::build(model, None, e),
        None => ApplyError::Engine(e),
    })?;
    state.end_data_write(&write, true, interval::now_millis())?;
    let ledger = state.done_ledger(name, &k.fingerprint)?;
    if let (Some(first), Some(last)) = (ledger.keys().next(), ledger.keys().next_back()) {
        state.clear_intervals(name, &k.fingerprint, *first, *last + 1)?;
    }
    Ok(())
}

/// Drops every copy [`keep`] took that [`put_back`] did not put back (the apply promoted, or
/// the refresh was not below what was taken back, or the copy could not go back): best effort
/// (a copy left is replaced by the next apply copying that table).
pub(super) fn drop_kept(engine: &mut dyn Engine, kept: &mut Keeps) {
    for (name, k) in std::mem::take(kept) {
        let Some(copy) = k.copy else { continue };
        let dialect = engine.sql();
        if let Err(e) = engine.execute(&dialect.drop_table_if_exists(&copy)) {
            tracing::warn!(model = %name, copy = %copy, "the copy of its table taken by this apply stays (the next apply copying that table replaces it): {e}");
        }
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
