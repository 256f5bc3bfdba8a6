//! Re-evaluation of the few top-level files a change reaches, for a long-lived holder of a
//! loaded project (`crate::session::Session::reload`): the other files are neither evaluated
//! nor copied, so the holder updates its project in place instead of merging every model again.
//!
//! Used only when the load cache proves what it needs: every other discovered file has an entry
//! whose key matches its inputs as they are now (so the `require` / `import` edges it records
//! are current), the audit files are unchanged, no file to evaluate is reached by another
//! top-level file, and every evaluation succeeded and defined only models located in itself.
//! Otherwise `None`, and the holder loads in full ([`super::load_project`]).

use super::{FileOutcome, LoadCache, base_key, evaluate, ext};
use crate::config::Config;
use crate::core::Model;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use super::{Discovered, Entry};

/// The top-level files [`reevaluate`] evaluated, and what they read.
#[derive(Debug, Default)]
pub struct Reevaluated {
    /// Per file evaluated (relative, in discovery order): the models it defined, as its
    /// evaluation built them (`cols()` not expanded, seed files not hashed).
    pub files: Vec<(PathBuf, Vec<Model>)>,
    /// Every file those evaluations read (relative): the evaluated files and what they reached,
    /// with the blake3 of the bytes evaluated.
    pub hashes: BTreeMap<PathBuf, [u8; 32]>,
    /// Paths their `require` / `import` tried and found absent (relative).
    pub probes: BTreeSet<PathBuf>,
    /// What the evaluated files reached before this evaluation (relative), per their previous
    /// entries: inputs the holder may no longer need.
    pub reached_before: BTreeSet<PathBuf>,
}

/// Evaluates the top-level files of `files` that `changed` (relative paths whose memoized
/// hashes were forgotten, [`LoadCache::forget`]) reaches: the changed model files and every
/// model file whose entry reached a changed path; their entries are replaced.
///
/// # Errors
/// When the conditions in the module docs do not hold: the files evaluated before that was
/// known (their entries are in the cache, so the full load that follows does not evaluate them
/// again), none when it was known before evaluating anything.
pub fn reevaluate(config: &Config, files: &Discovered, changed: &[PathBuf], cache: &mut LoadCache) -> Result<Reevaluated, Vec<PathBuf>> {
    reevaluate_opt(config, files, changed, cache).ok_or_else(Vec::new)?
}

/// [`reevaluate`]: `None` when nothing was evaluated, `Some(Err(files))` when files were.
fn reevaluate_opt(config: &Config, files: &Discovered, changed: &[PathBuf], cache: &mut LoadCache) -> Option<Result<Reevaluated, Vec<PathBuf>>> {
    let root = &config.root;
    let changed_set: HashSet<&Path> = changed.iter().map(PathBuf::as_path).collect();
    if files.audits.iter().any(|a| changed_set.contains(a.as_path())) || files.all().any(|f| !matches!(ext(f), "lua" | "rhai" | "sql")) {
        return None;
    }
    let base = base_key(config);
    let mut global = blake3::Hasher::new();
    global.update(&base);
    for a in &files.audits {
        let e = cache.entries.get(a)?;
        let key = LoadCache::key(&mut cache.hashes, root, &base, a, &e.reached, &e.probes, None);
        if key != e.key {
            return None;
        }
        global.update(&key);
    }
    let g = *global.finalize().as_bytes();
    // The files to evaluate, and every other file's entry proven current.
    let mut stale: Vec<PathBuf> = Vec::new();
    let mut libraries: HashSet<&Path> = HashSet::new();
    let mut reached_before = BTreeSet::new();
    for f in &files.models {
        let e = cache.entries.get(f);
        let hit = changed_set.contains(f.as_path()) || e.is_some_and(|e| e.reached.iter().any(|r| changed_set.contains(r.as_path())));
        if hit {
            if let Some(e) = e {
                reached_before.extend(e.reached.iter().cloned());
            }
            stale.push(f.clone());
            continue;
        }
        let e = e?;
        if LoadCache::key(&mut cache.hashes, root, &g, f, &e.reached, &e.probes, None) != e.key {
            return None;
        }
        libraries.extend(e.reached.iter().map(PathBuf::as_path));
    }
    if stale.is_empty() || stale.iter().any(|f| libraries.contains(f.as_path())) {
        return None;
    }
    // Every changed path must be a model file or a file some model file reached: anything else
    // (a seed file, say) changes what this evaluation does not see.
    let models: HashSet<&Path> = files.models.iter().map(PathBuf::as_path).collect();
    if !changed.iter().all(|c| models.contains(c.as_path()) || libraries.contains(c.as_path()) || reached_before.contains(c)) {
        return None;
    }
    let langs: HashSet<&str> = stale.iter().map(|f| ext(f)).collect();
    let audits: Vec<PathBuf> = files.audits.iter().filter(|a| langs.contains(ext(a))).cloned().collect();
    let (outcomes, _, errors) = evaluate(root, &files.audits, &audits, &stale, &[]);
    let stale_set: HashSet<&Path> = stale.iter().map(PathBuf::as_path).collect();
    let evaluated: Vec<FileOutcome> = outcomes.into_iter().filter(|o| stale_set.contains(o.file.as_path())).collect();
    // A top-level file the evaluated files reached before and no file reaches now is no longer
    // a library: unless it defines something, a full load refuses it (`idle_errors`).
    let top: HashSet<&Path> = files.all().map(PathBuf::as_path).collect();
    let reached_now: HashSet<&Path> = evaluated.iter().flat_map(|o| o.reached.iter().map(PathBuf::as_path)).chain(libraries.iter().copied()).collect();
    let orphaned = reached_before.iter().any(|r| top.contains(r.as_path()) && !reached_now.contains(r.as_path()));
    let ok = errors.is_empty()
        && !orphaned
        && evaluated.len() == stale.len()
        && evaluated.iter().all(|o| !o.failed && o.defines && !o.models.is_empty() && o.models.iter().all(|m| m.location.file == o.file))
        && !evaluated.iter().any(|o| o.reached.iter().any(|r| stale_set.contains(r.as_path())));
    // Entries of the files evaluated without error, as a full load writes them.
    for o in evaluated.iter().filter(|o| !o.failed) {
        let reached: Vec<PathBuf> = o.reached.iter().cloned().collect();
        let probes: Vec<PathBuf> = o.probes.iter().cloned().collect();
        let key = LoadCache::key(&mut cache.hashes, root, &g, &o.file, &reached, &probes, Some(&o.hashes));
        cache.entries.insert(o.file.clone(), Entry { key, reached, probes, defines: o.defines, models: o.models.clone() });
        cache.dirty = true;
    }
    let done: Vec<PathBuf> = evaluated.iter().map(|o| o.file.clone()).collect();
    if !ok {
        return Some(Err(done));
    }
    let mut out = Reevaluated { reached_before, ..Reevaluated::default() };
    let mut by_file: BTreeMap<PathBuf, FileOutcome> = evaluated.into_iter().map(|o| (o.file.clone(), o)).collect();
    for f in &stale {
        let Some(o) = by_file.remove(f) else { return Some(Err(done)) };
        for (p, h) in &o.hashes {
            // One path read with two different contents by two evaluations: never trusted.
            if out.hashes.insert(p.clone(), *h).is_some_and(|old| old != *h) {
                return Some(Err(done));
            }
        }
        out.probes.extend(o.probes);
        out.files.push((o.file, o.models));
    }
    Some(Ok(out))
}
