//! Data generations: is a `full` version's table built from its parents' data as it is now?
//!
//! Every version has a data generation in the state store ([`crate::state::DataVersion`]),
//! bumped by the transaction that changes its data (intervals done, done intervals cleared or
//! reset, a build; an upsert or a reconciliation: before and after its engine write), whichever
//! environment wrote it, together with every version sharing its physical relation. A `full`
//! version's build records `built_from`: the `(name, fingerprint, generation)` of every version
//! whose data it reads ([`sources`]: its parents, seen through `view` and `embedded` parents,
//! which have no data of their own), read before the build started. A plan marks a `full`
//! version stale when that record differs from the generations now, naming the parents whose
//! data changed ([`stale`]). `view` versions are DuckDB views, never stale; externals have no
//! ledger and are not tracked.

use crate::core::{Kind, ModelName};
use crate::project::Project;
use crate::state::{DataVersion, StateError, StateStore};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One version whose data a `full` model reads: `(name, fingerprint, generation)`.
pub type Source = (String, String, i64);

/// The models whose data `name` reads: its parents, with `view` and `embedded` parents replaced
/// by theirs (recursively) and externals left out, sorted.
pub fn data_parents(project: &Project, name: &ModelName) -> Vec<ModelName> {
    let mut out = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<ModelName> = project.dag.get(name).map(|m| m.parents().into_iter().collect()).unwrap_or_default();
    while let Some(p) = stack.pop() {
        if !seen.insert(p.clone()) {
            continue;
        }
        let Some(model) = project.dag.get(&p) else { continue };
        match model.kind {
            Kind::View | Kind::Embedded => stack.extend(model.parents()),
            Kind::External(_) => {}
            _ => {
                out.insert(p);
            }
        }
    }
    out.into_iter().collect()
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
/// of the sources are `fingerprint_of`'s. A version without a recorded `built_from` (built before
/// layout 6, or reused from another version's table) is not stale.
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
}
