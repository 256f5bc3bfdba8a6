//! Data generations: is a `full` version's table built from its parents' data as it is now?
//!
//! Every version has a data generation in the state store ([`crate::state::DataVersion`]),
//! bumped by the transaction that changes its data (intervals done, done intervals cleared or
//! reset, a build; an upsert or a reconciliation: before and after its engine write), whichever
//! environment wrote it, together with every version sharing its physical relation. A version
//! taking over another's table and done intervals (indirect reuse, forward-only) writes nothing
//! into it: its own generation moves, not theirs (their readers stay current). A `full`
//! version's build records `built_from`: the `(name, fingerprint, generation)` of every version
//! whose data it reads ([`sources`]: its parents, seen through `view` and `embedded` parents,
//! which have no data of their own), read before the build started. A plan marks a `full`
//! version stale when that record differs from the generations now, naming the parents whose
//! data changed ([`stale`]). `view` versions are DuckDB views, never stale; externals have no
//! ledger and are not tracked.
//!
//! A `full` version inheriting another version's table (indirect reuse) records a `built_from`
//! too ([`reuse_record`]): its current sources when the inherited table provably holds what they
//! hold now, otherwise a record no generation matches (the next plan rebuilds it). Versions
//! sharing one `full` table read the same relations ([`shares_sources`]), so rebuilding it for
//! one of them rebuilds it rightly for all ([`sharer_records`]).

use crate::core::interval::Millis;
use crate::core::{Kind, ModelName};
use crate::project::Project;
use crate::state::{DataVersion, SnapshotIndex, StateError, StateStore};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One version whose data a `full` model reads: `(name, fingerprint, generation)`.
pub type Source = (String, String, i64);

/// The models whose data `name` reads: its parents, with `view` and `embedded` parents replaced
/// by theirs (recursively) and externals left out, sorted.
pub fn data_parents(project: &Project, name: &ModelName) -> Vec<ModelName> {
    let parents = project.dag.get(name).map(|m| m.parents().into_iter().collect()).unwrap_or_default();
    read_through(project, parents).into_iter().filter(|p| !matches!(project.dag.get(p).map(|m| &m.kind), Some(Kind::External(_)))).collect()
}

/// The models whose stored data reading `models` reads: each of them, with `view` and `embedded`
/// ones (which store nothing) replaced by what they read, recursively; externals included, sorted.
pub fn read_through(project: &Project, models: Vec<ModelName>) -> BTreeSet<ModelName> {
    let mut out = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut stack = models;
    while let Some(p) = stack.pop() {
        if !seen.insert(p.clone()) {
            continue;
        }
        let Some(model) = project.dag.get(&p) else { continue };
        match model.kind {
            Kind::View | Kind::Embedded => stack.extend(model.parents()),
            _ => {
                out.insert(p);
            }
        }
    }
    out
}

/// The sources of `name` given the versions its data parents are at (`fingerprint_of`) and the
/// generations read (`gens`; a version without a row is at generation 0). A parent without a
/// version is left out.
pub fn sources(
    project: &Project,
    name: &ModelName,
    fingerprint_of: &dyn Fn(&str) -> Option<String>,
    gens: &HashMap<(String, String), DataVersion>,
) -> Vec<Source> {
    data_parents(project, name)
        .into_iter()
        .filter_map(|p| {
            let p = p.to_string();
            let fp = fingerprint_of(&p)?;
            let generation = gens.get(&(p.clone(), fp.clone())).map_or(0, |d| d.generation);
            Some((p, fp, generation))
        })
        .collect()
}

/// The `built_from` text recorded with a build: the sources as JSON, sorted by name.
pub fn built_from(sources: &[Source]) -> String {
    let mut sorted = sources.to_vec();
    sorted.sort();
    serde_json::to_string(&sorted).unwrap_or_default()
}

/// The sources `key`'s recorded `built_from` names, from `gens` (a [`StateStore::data_versions`]
/// read); `None` when it has no record or one that cannot be read (a never-matching marker).
fn recorded_sources(gens: &HashMap<(String, String), DataVersion>, key: &(String, String)) -> Option<Vec<Source>> {
    gens.get(key).and_then(|d| d.built_from.as_deref()).and_then(|r| serde_json::from_str(r).ok())
}

/// The names whose data changed between the recorded `built_from` and `current`; empty when
/// they agree. A record that cannot be read names every current source (stale, never trusted).
pub fn changed(recorded: &str, current: &[Source]) -> Vec<String> {
    let Ok(before) = serde_json::from_str::<Vec<Source>>(recorded) else {
        return current.iter().map(|s| s.0.clone()).collect();
    };
    let before: BTreeMap<&str, (&str, i64)> = before.iter().map(|(n, f, g)| (n.as_str(), (f.as_str(), *g))).collect();
    let now: BTreeMap<&str, (&str, i64)> = current.iter().map(|(n, f, g)| (n.as_str(), (f.as_str(), *g))).collect();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for (n, v) in &now {
        if before.get(n) != Some(v) {
            names.insert(n);
        }
    }
    names.extend(before.keys().filter(|n| !now.contains_key(*n)));
    names.into_iter().map(str::to_string).collect()
}

/// Of `candidates` (`(name, fingerprint)` of `full` versions), those whose recorded build read
/// other data than their sources hold now, with the reason (naming the parents). The versions
/// of the sources are `fingerprint_of`'s. A version without a recorded `built_from` (built
/// before layout 6, or inherited from another version's table before reuses were recorded) is
/// not stale.
///
/// # Errors
/// A state read fails.
pub fn stale(
    project: &Project,
    state: &dyn StateStore,
    candidates: &[(ModelName, String)],
    fingerprint_of: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(ModelName, String, String)>, StateError> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let mut keys: BTreeSet<(String, String)> = BTreeSet::new();
    let parents: Vec<Vec<ModelName>> = candidates.iter().map(|(n, _)| data_parents(project, n)).collect();
    for ((name, fp), ps) in candidates.iter().zip(&parents) {
        keys.insert((name.to_string(), fp.clone()));
        for p in ps {
            let p = p.to_string();
            if let Some(pfp) = fingerprint_of(&p) {
                keys.insert((p, pfp));
            }
        }
    }
    let keys: Vec<(String, String)> = keys.into_iter().collect();
    let gens = state.data_versions(&keys)?;
    let mut out = Vec::new();
    for (name, fp) in candidates {
        let Some(recorded) = gens.get(&(name.to_string(), fp.clone())).and_then(|d| d.built_from.as_deref()) else { continue };
        let current = sources(project, name, fingerprint_of, &gens);
        let names = changed(recorded, &current);
        if !names.is_empty() {
            out.push((name.clone(), fp.clone(), format!("the data of {} changed since it was built", names.join(", "))));
        }
    }
    Ok(out)
}

/// A `built_from` record no generations match: `current` at generation -1 (generations are never
/// negative), so [`changed`] names every source.
pub fn never_matching(current: &[Source]) -> String {
    built_from(&current.iter().map(|(n, f, _)| (n.clone(), f.clone(), -1)).collect::<Vec<_>>())
}

/// The `built_from` of a `full` version of `name` inheriting the table of version `from` (nothing
/// is built), given its sources now (`current`): `current` when the inherited table was built
/// from data equal to what each of them holds now ([`same_data`]: the same version at the same
/// generation, or the same relation unchanged since, or a new version over equal data),
/// otherwise [`never_matching`] for the sources not proven equal (the next plan rebuilds it,
/// naming them). `from` without a readable record proves nothing.
///
/// # Errors
/// A state read fails.
pub fn reuse_record(state: &dyn StateStore, index: &SnapshotIndex, name: &str, from: &str, current: &[Source]) -> Result<String, StateError> {
    let key = (name.to_string(), from.to_string());
    let Some(before) = recorded_sources(&state.data_versions(std::slice::from_ref(&key))?, &key) else {
        return Ok(never_matching(current));
    };
    let before: BTreeMap<&str, &Source> = before.iter().map(|s| (s.0.as_str(), s)).collect();
    if before.len() != current.len() {
        return Ok(never_matching(current));
    }
    let mut out = Vec::with_capacity(current.len());
    for source in current {
        let proven = match before.get(source.0.as_str()) {
            Some(old) => same_data(state, index, source, old, 0)?,
            None => false,
        };
        out.push(if proven { source.clone() } else { (source.0.clone(), source.1.clone(), -1) });
    }
    Ok(built_from(&out))
}

/// A version a plan builds as a new table: its fingerprint and its done interval starts once
/// the plan is applied.
pub type Built = (String, BTreeSet<Millis>);

/// What makes the table of `full` version `from` of `name` wrong to inherit for a new version of
/// it (indirect reuse after a non-breaking parent change), known before anything is built: for
/// each data parent `from` was built from whose version the plan builds as a new table,
/// `built(parent)` gives that version's fingerprint and its done interval starts once the plan
/// is applied (time-range parents only). When those differ from what the older version held
/// when `from` was built (its generation moved since, or other intervals done), the inherited
/// table lacks (or keeps) rows the new parent serves: one reason per such parent. Empty when
/// `from` has no readable record (the apply's [`reuse_record`] then decides, after the builds).
/// For a unique-key or partition table, `from` is the version whose refresh last wrote it and
/// `built` gives every time-range parent's version the plan leads to, built or not (one another
/// environment built: `plan::mark_stale_builds`).
///
/// # Errors
/// A state read fails.
pub fn reuse_outgrown(
    state: &dyn StateStore,
    name: &str,
    from: &str,
    built: &dyn Fn(&str) -> Result<Option<Built>, StateError>,
) -> Result<Vec<String>, StateError> {
    let key = (name.to_string(), from.to_string());
    let Some(recorded) = recorded_sources(&state.data_versions(std::slice::from_ref(&key))?, &key) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (parent, old_fp, old_generation) in recorded {
        let Some((new_fp, after)) = built(&parent)? else { continue };
        if new_fp == old_fp {
            continue;
        }
        let old_key = (parent.clone(), old_fp.clone());
        let generation = state.data_versions(std::slice::from_ref(&old_key))?.get(&old_key).map_or(0, |d| d.generation);
        if generation != old_generation {
            out.push(format!("`{parent}`'s older version changed since the inherited table was built from it"));
            continue;
        }
        let before = state.done_intervals(&parent, &old_fp)?;
        let gained = after.difference(&before).count();
        let lost = before.difference(&after).count();
        match (gained, lost) {
            (0, 0) => {}
            (g, 0) => out.push(format!("`{parent}`'s new version computes {g} interval{} its older version lacked", plural(g))),
            (0, l) => out.push(format!("`{parent}`'s new version lacks {l} interval{} its older version held", plural(l))),
            (g, l) => out.push(format!("`{parent}`'s new version computes {g} interval{} its older version lacked and lacks {l} it held", plural(g))),
        }
    }
    Ok(out)
}

/// The version of `name` whose refresh last wrote the unique-key or partition table `physical`:
/// of the versions `index` stores there, the one whose refresh row was written last (one row per
/// version, rewritten at each refresh: [`StateStore::record_refresh`]; equal times: the smallest
/// fingerprint), for [`reuse_outgrown`] to read what that refresh read. A version inheriting the
/// table writes no row until it refreshes it itself. `None` when no refresh of the table is
/// recorded, or when the last one has no readable `built_from` (an efmesh older than those
/// records): nothing is known of what it read.
///
/// # Errors
/// A state read fails.
pub fn last_refresh_on(state: &dyn StateStore, index: &SnapshotIndex, name: &str, physical: &str) -> Result<Option<String>, StateError> {
    let mut last: Option<(Millis, String)> = None;
    for fp in crate::state::versions_in(index, name, physical) {
        let Some(written) = state.done_ledger(name, &fp)?.values().map(|(_, at)| *at).max() else { continue };
        if last.as_ref().is_none_or(|(at, _)| written > *at) {
            last = Some((written, fp));
        }
    }
    let Some((_, fp)) = last else { return Ok(None) };
    let key = (name.to_string(), fp.clone());
    Ok(recorded_sources(&state.data_versions(std::slice::from_ref(&key))?, &key).map(|_| fp.clone()))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// True when the data of `new` (`(name, fingerprint, generation)`) is provably what `old` held at
/// its recorded generation: the same version at the same generation; otherwise both versions
/// must be at those generations now and either name the same relation (every write to a
/// relation moves every version naming it), or be `full` versions whose own records are equal
/// source by source (recursively), or time-range versions with the same intervals done. The
/// data of a new version equals the old one's over equal inputs because the plan categorised
/// it so (it inherits a table only when every changed parent keeps its data). Anything else
/// (unique-key, SCD type 2, seeds, an unreadable record) is not proven.
fn same_data(state: &dyn StateStore, index: &SnapshotIndex, new: &Source, old: &Source, depth: usize) -> Result<bool, StateError> {
    if new.1 == old.1 {
        return Ok(new.2 == old.2);
    }
    if depth > 64 {
        return Ok(false);
    }
    let keys = [(new.0.clone(), new.1.clone()), (old.0.clone(), old.1.clone())];
    let gens = state.data_versions(&keys)?;
    let generation = |k: &(String, String)| gens.get(k).map_or(0, |d| d.generation);
    if generation(&keys[0]) != new.2 || generation(&keys[1]) != old.2 {
        return Ok(false);
    }
    let (Some((new_rel, new_kind)), Some((old_rel, old_kind))) = (index.get(&keys[0]), index.get(&keys[1])) else { return Ok(false) };
    if !old_rel.is_empty() && new_rel == old_rel {
        return Ok(true);
    }
    if new_kind != old_kind {
        return Ok(false);
    }
    match new_kind.as_str() {
        "incremental_by_time_range" => Ok(state.done_intervals(&new.0, &new.1)? == state.done_intervals(&old.0, &old.1)?),
        "full" => {
            let (Some(a), Some(b)) = (recorded_sources(&gens, &keys[0]), recorded_sources(&gens, &keys[1])) else { return Ok(false) };
            if a.len() != b.len() {
                return Ok(false);
            }
            let b: BTreeMap<&str, &Source> = b.iter().map(|s| (s.0.as_str(), s)).collect();
            for s in &a {
                match b.get(s.0.as_str()) {
                    Some(o) if same_data(state, index, s, o, depth + 1)? => {}
                    _ => return Ok(false),
                }
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Every version other environments than `env` serve, by `(name, relation)`: the fingerprints
/// served on each relation (one bulk read of the pointers; [`others_on`] looks it up).
pub type ServedElsewhere = HashMap<(String, String), BTreeSet<String>>;

/// Every environment other than one still served, with its pointers (model name →
/// fingerprint), and whether that one is still served itself: read once ([`other_envs`]) for
/// [`writer_elsewhere`].
#[derive(Debug, Clone, Default)]
pub struct OtherEnvs {
    /// The other environments still served (not invalidated, expired or dropped), with their pointers.
    pub envs: Vec<(String, BTreeMap<String, String>)>,
    /// Whether the environment asking is still served itself.
    pub live: bool,
}

/// [`OtherEnvs`] of `env`: those still served — not invalidated, expired (`ttl` at `now`) or
/// dropped ([`crate::lifecycle::judge`]): an environment on its way out writes nothing for the
/// others to wait on.
///
/// # Errors
/// A state read fails.
pub fn other_envs(
    state: &dyn StateStore,
    env: &str,
    ttl: Option<crate::core::interval::Millis>,
    now: crate::core::interval::Millis,
) -> Result<OtherEnvs, StateError> {
    let served = |e: &str| -> Result<bool, StateError> {
        let judged = crate::lifecycle::judge(e, &state.journal(e)?, ttl, now);
        Ok(!judged.expired && judged.dropped_at.is_none())
    };
    let mut out = OtherEnvs { envs: Vec::new(), live: served(env)? };
    for e in state.environments()?.into_iter().filter(|e| e != env) {
        if !served(&e)? {
            continue;
        }
        let pointers = state.env_pointers(&e)?;
        out.envs.push((e, pointers));
    }
    Ok(out)
}

/// An environment that writes a shared table: its name, its version there, its pointers.
pub type Writer<'a> = (&'a str, &'a String, &'a BTreeMap<String, String>);

/// The environment that writes the table `physical` of `name` when other environments still
/// served serve other versions than `fp` on it (a non-breaking parent change gives a child a
/// new version on its older table): `prod` when it serves one there; else the environment
/// serving the oldest version there (its snapshot made first; ties by environment name) —
/// `None` when that is `env`'s own `fp` (then `env` writes), or when `env` is `prod`. An `env`
/// on its way out (invalidated, expired: [`OtherEnvs::live`]) never writes a table a served one
/// shares. `(writer, its version, its pointers)`.
///
/// # Errors
/// A state read fails.
pub fn writer_elsewhere<'a>(
    state: &dyn StateStore,
    index: &SnapshotIndex,
    others: &'a OtherEnvs,
    env: &str,
    name: &str,
    fp: &str,
    physical: &str,
) -> Result<Option<Writer<'a>>, StateError> {
    if env == crate::core::name::PROD || physical.is_empty() {
        return Ok(None);
    }
    // A version without a snapshot yet (the plan at hand creates it) is the newest of all.
    let made = |f: &str| state.snapshot(name, f).map(|r| r.map_or_else(|| "\u{10FFFF}".to_string(), |r| r.created_at));
    let sharing: Vec<Writer<'a>> =
        others.envs.iter().filter_map(|(e, pointers)| other_version_on(pointers, index, name, fp, physical).map(|f| (e.as_str(), f, pointers))).collect();
    if sharing.is_empty() {
        return Ok(None);
    }
    if let Some(prod) = sharing.iter().find(|(e, _, _)| *e == crate::core::name::PROD) {
        return Ok(Some(*prod));
    }
    // An environment on its way out (invalidated, expired) writes no table another one still
    // served shares: the oldest of theirs does.
    let own = if others.live { made(fp)? } else { "\u{10FFFF}\u{10FFFF}".to_string() };
    let mut oldest: Option<(String, Writer<'a>)> = None;
    for s in sharing {
        let at = made(s.1)?;
        if oldest.as_ref().is_none_or(|(t, o)| (at.as_str(), s.0) < (t.as_str(), o.0)) {
            oldest = Some((at, s));
        }
    }
    // The oldest of theirs writes unless `env`'s own version is older still (at equal times,
    // the environment names decide, the same way for every environment asking).
    Ok(oldest.filter(|(at, o)| (at.as_str(), o.0) < (own.as_str(), env)).map(|(_, o)| o))
}

/// Every environment other than `env` with its pointers (model name → fingerprint), expired,
/// invalidated or not (as the apply's shared-writes check asks them): read once, for
/// [`taken_over_by`] to look each model up in.
pub type EveryOther = Vec<(String, BTreeMap<String, String>)>;

/// [`EveryOther`] of `env`.
///
/// # Errors
/// A state read fails.
pub fn every_other(state: &dyn StateStore, env: &str) -> Result<EveryOther, StateError> {
    let mut out = Vec::new();
    for e in state.environments()?.into_iter().filter(|e| e != env) {
        let pointers = state.env_pointers(&e)?;
        out.push((e, pointers));
    }
    Ok(out)
}

/// The environment serving, on the table `physical` of `name`, a version with another query
/// than `fp` (its environment's) made after it: a forward-only change there (`prod`'s, as a
/// rule) took the table over, and only the newest version of a table writes into it, so that
/// environment's `apply` and `run` are refused wherever they would compute intervals (or
/// reconcile an SCD history) there (the apply's shared-writes check). Every other environment
/// (`everyone`: [`every_other`]) is asked, expired or not, as that check asks them; snapshots are
/// read only when one serves another version on the table. `(environment, its version)`, `prod`
/// first when several; `None` when `fp` is the table's newest query (or has no table, or no
/// snapshot).
///
/// # Errors
/// A state read fails.
pub fn taken_over_by(
    state: &dyn StateStore,
    index: &SnapshotIndex,
    everyone: &EveryOther,
    name: &str,
    fp: &str,
    physical: &str,
) -> Result<Option<(String, String)>, StateError> {
    if physical.is_empty() {
        return Ok(None);
    }
    let on: Vec<(&str, &String)> =
        everyone.iter().filter_map(|(e, pointers)| other_version_on(pointers, index, name, fp, physical).map(|f| (e.as_str(), f))).collect();
    if on.is_empty() {
        return Ok(None);
    }
    let Some(own) = state.snapshot(name, fp)? else { return Ok(None) };
    // Whether each version met is a newer query than `fp`'s, read once per version.
    let mut newer: HashMap<&str, bool> = HashMap::new();
    let mut found: Option<(&str, &String)> = None;
    for (e, theirs) in on {
        let newer_query = match newer.get(theirs.as_str()) {
            Some(n) => *n,
            None => {
                let n = state.snapshot(name, theirs)?.is_some_and(|r| r.canonical != own.canonical && r.created_at > own.created_at);
                newer.insert(theirs.as_str(), n);
                n
            }
        };
        if newer_query && found.is_none_or(|(f, _)| f != crate::core::name::PROD && e == crate::core::name::PROD) {
            found = Some((e, theirs));
        }
    }
    Ok(found.map(|(e, f)| (e.to_string(), f.clone())))
}

/// [`ServedElsewhere`] of `env`.
///
/// # Errors
/// A state read fails.
pub fn served_elsewhere(state: &dyn StateStore, index: &SnapshotIndex, env: &str) -> Result<ServedElsewhere, StateError> {
    let mut out: ServedElsewhere = HashMap::new();
    for e in state.environments()?.into_iter().filter(|e| e != env) {
        for (name, fp) in state.env_pointers(&e)? {
            if let Some((physical, _)) = index.get(&(name.clone(), fp.clone()))
                && !physical.is_empty()
            {
                out.entry((name, physical.clone())).or_default().insert(fp);
            }
        }
    }
    Ok(out)
}

/// The fingerprints of the versions of `name` other environments serve on `physical`, other than
/// `fp` (from `served`, [`served_elsewhere`]).
pub fn others_on(served: &ServedElsewhere, name: &str, fp: &str, physical: &str) -> BTreeSet<String> {
    served.get(&(name.to_string(), physical.to_string())).map(|fps| fps.iter().filter(|f| *f != fp).cloned().collect()).unwrap_or_default()
}

/// True when every one of `others` (versions of `name` sharing a `full` table) has a recorded
/// `built_from` whose sources are the relations `relations` names (`(name, relation)` of the
/// sources of the version at hand now): then all of them read the same data, and rebuilding the
/// table for one rebuilds it rightly for every one (SPEC §4 invariant 36 (e)).
///
/// # Errors
/// A state read fails.
pub fn shares_sources(
    state: &dyn StateStore,
    index: &SnapshotIndex,
    name: &str,
    others: &BTreeSet<String>,
    relations: &BTreeMap<String, String>,
) -> Result<bool, StateError> {
    let keys: Vec<(String, String)> = others.iter().map(|f| (name.to_string(), f.clone())).collect();
    let gens = state.data_versions(&keys)?;
    for k in &keys {
        let Some(record) = recorded_sources(&gens, k) else {
            return Ok(false);
        };
        let theirs: BTreeMap<String, String> = record.into_iter().filter_map(|(n, f, _)| index.get(&(n.clone(), f)).map(|(p, _)| (n, p.clone()))).collect();
        if theirs != *relations || relations.values().any(String::is_empty) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The records of `others` (versions of `name` sharing the table a build of `name` rewrites,
/// [`shares_sources`]) after that build: their recorded sources at the generations read now,
/// before the build (they read the same relations).
///
/// # Errors
/// A state read fails.
pub fn sharer_records(state: &dyn StateStore, name: &str, others: &BTreeSet<String>) -> Result<Vec<(String, String, String)>, StateError> {
    let keys: Vec<(String, String)> = others.iter().map(|f| (name.to_string(), f.clone())).collect();
    let gens = state.data_versions(&keys)?;
    let mut out = Vec::new();
    for k in &keys {
        let Some(record) = recorded_sources(&gens, k) else { continue };
        let source_keys: Vec<(String, String)> = record.iter().map(|(n, f, _)| (n.clone(), f.clone())).collect();
        let now = state.data_versions(&source_keys)?;
        let sources: Vec<Source> = source_keys
            .into_iter()
            .map(|k| {
                let g = now.get(&k).map_or(0, |d| d.generation);
                (k.0, k.1, g)
            })
            .collect();
        out.push((k.0.clone(), k.1.clone(), built_from(&sources)));
    }
    Ok(out)
}

/// The relations the sources of `name` read: `(parent, relation)` of each of its data parents
/// ([`data_parents`]) with the relation `relation_of` gives; `None` when one has none.
pub fn relations(project: &Project, name: &ModelName, relation_of: &dyn Fn(&str) -> Option<String>) -> Option<BTreeMap<String, String>> {
    data_parents(project, name)
        .into_iter()
        .map(|p| {
            let p = p.to_string();
            relation_of(&p).filter(|r| !r.is_empty()).map(|r| (p, r))
        })
        .collect()
}

/// True when `name`, reading its direct parents as `served` gives them here (each parent's
/// `(relation, fingerprint)`), reads other parents than the environment whose `pointers` these
/// are ([`direct_reads`], [`parents_differ`]): the two versions would write, into one table,
/// rows computed from different data. A parent without a version here counts as another.
pub fn reads_other_parents(
    project: &Project,
    name: &ModelName,
    served: &dyn Fn(&str) -> Option<(String, String)>,
    pointers: &BTreeMap<String, String>,
    index: &SnapshotIndex,
) -> bool {
    direct_reads(project, name, served).is_none_or(|r| parents_differ(pointers, index, &r))
}

/// True when the environment whose `pointers` these are reads, for one of the parents in
/// `reads` ([`direct_reads`]), another relation (or, for a parent without one, another version)
/// than the one named there.
fn parents_differ(pointers: &BTreeMap<String, String>, index: &SnapshotIndex, reads: &BTreeMap<String, String>) -> bool {
    let served = |p: &str| pointers.get(p).map(|f| read_key(index.get(&(p.to_string(), f.clone())).map_or("", |(r, _)| r.as_str()), f));
    reads.iter().any(|(p, r)| served(p).as_deref() != Some(r.as_str()))
}

/// What `name` reads, by direct parent, for [`parents_differ`]: the relation the parent's
/// version is served from (`served` gives it with the version's fingerprint), or its version
/// where it has none (an `embedded` model, inlined). Direct parents, `view` and `embedded` ones
/// included: their own query may differ where the tables under them do not. `None` when a
/// parent has no version here.
fn direct_reads(project: &Project, name: &ModelName, served: &dyn Fn(&str) -> Option<(String, String)>) -> Option<BTreeMap<String, String>> {
    let model = project.dag.get(name)?;
    model
        .parents()
        .into_iter()
        .map(|p| {
            let p = p.to_string();
            served(&p).map(|(relation, fp)| {
                let key = read_key(&relation, &fp);
                (p, key)
            })
        })
        .collect()
}

/// A parent's relation, or `version <fp>` when it has none.
fn read_key(relation: &str, fp: &str) -> String {
    if relation.is_empty() { format!("version {fp}") } else { relation.to_string() }
}

/// The version of `name` an environment's `pointers` name when it is another version than `fp`
/// stored in the same table `physical` (as `index` records it).
pub fn other_version_on<'a>(pointers: &'a BTreeMap<String, String>, index: &SnapshotIndex, name: &str, fp: &str, physical: &str) -> Option<&'a String> {
    pointers.get(name).filter(|f| f.as_str() != fp && index.get(&(name.to_string(), (*f).clone())).is_some_and(|(p, _)| p == physical))
}

/// True when the `full` version `(name, fp)` on `physical`, whose sources read `relations`, may
/// be rebuilt by `env` although other environments serve other versions on the same table:
/// every one of those reads the same relations ([`shares_sources`]); true as well when none does.
///
/// # Errors
/// A state read fails.
pub fn rebuild_is_shared_rightly(
    state: &dyn StateStore,
    env: &str,
    name: &str,
    fp: &str,
    physical: &str,
    relations: Option<&BTreeMap<String, String>>,
) -> Result<bool, StateError> {
    let index = state.snapshot_index()?;
    let others = others_on(&served_elsewhere(state, &index, env)?, name, fp, physical);
    if others.is_empty() {
        return Ok(true);
    }
    match relations {
        Some(r) => shares_sources(state, &index, name, &others, r),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(n: &str, g: i64) -> Source {
        (n.to_string(), "f".repeat(64), g)
    }

    #[test]
    fn the_record_names_the_parents_whose_generation_moved() {
        let before = built_from(&[src("a.b", 1), src("a.c", 4)]);
        assert!(changed(&before, &[src("a.c", 4), src("a.b", 1)]).is_empty(), "order does not matter");
        assert_eq!(changed(&before, &[src("a.b", 2), src("a.c", 4)]), vec!["a.b".to_string()]);
        let mut other_version = src("a.c", 4);
        other_version.1 = "e".repeat(64);
        assert_eq!(changed(&before, &[src("a.b", 1), other_version]), vec!["a.c".to_string()]);
        assert_eq!(changed(&before, &[src("a.b", 1)]), vec!["a.c".to_string()], "a parent gone counts");
        assert_eq!(changed("not json", &[src("a.b", 1)]), vec!["a.b".to_string()], "an unreadable record is stale");
    }

    #[test]
    fn a_keyed_tables_last_refresh_is_the_version_whose_refresh_row_was_written_last() {
        let store = crate::state::SqliteStore::open_in_memory().unwrap();
        let physical = "\"_efmesh\".\"m__u__a\"";
        let fp = |c: char| c.to_string().repeat(64);
        let snapshot = |c: char| crate::state::SnapshotRecord {
            name: "m.u".into(),
            fingerprint: fp(c),
            fingerprint_version: crate::sql::fingerprint::FINGERPRINT_VERSION,
            kind: "incremental_by_unique_key".into(),
            physical: physical.into(),
            canonical: None,
            rendered_sql: String::new(),
            metadata: serde_json::json!({}),
            created_at: crate::core::interval::to_iso(0),
        };
        let last = |on: &str| last_refresh_on(&store, &store.snapshot_index().unwrap(), "m.u", on).unwrap();
        let read = built_from(&[src("m.d", 1)]);
        // `a` refreshed the table and recorded what it read; `b` inherits it, unrefreshed.
        store.record_reuse(&snapshot('a'), &read, 100).unwrap();
        store.record_refresh("m.u", &fp('a'), 1_000, None, 100).unwrap();
        store.put_snapshot(&snapshot('b')).unwrap();
        assert_eq!(last(physical), Some(fp('a')));
        assert_eq!(last("\"_efmesh\".\"m__u__c\""), None, "another table's refresh does not count");
        // `b` refreshes it later without a record of what it read: nothing is known.
        store.record_refresh("m.u", &fp('b'), 2_000, None, 200).unwrap();
        assert_eq!(last(physical), None);
        store.record_reuse(&snapshot('b'), &read, 200).unwrap();
        assert_eq!(last(physical), Some(fp('b')));
    }
}
