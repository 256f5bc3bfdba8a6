//! The project cache: the validated project of the last load, restored in one read when every
//! input is byte for byte what it was loaded from (SPEC §4, invariant 35).
//!
//! The load cache ([`crate::script::loader::LoadCache`]) spares the evaluation of unchanged
//! files, but a load through it still decodes every file's entry, keys every file, merges the
//! models, hashes the seeds and validates the DAG. When nothing changed at all, that is the same
//! work with the same result every time. The project cache keeps that result — the models in
//! topological order and their digest ([`crate::core::Dag::digest`]) — with the key it was
//! loaded under:
//!
//! - the layout version, efmesh's version and the digest of the embedded stdlib (in the header);
//! - a digest of the configuration as loaded (its `Debug` form: project root, discovery globs,
//!   storage targets, every section);
//! - the discovered audit and model files (a new or deleted file changes the list);
//! - every file the load read, with the blake3 of its bytes: the audit and model files, every
//!   file they reached through `require` / `import`, every seed file;
//! - every path `require` / `import` tried and found absent before resolving: still absent.
//!
//! A restore walks the discovery globs, reads and hashes every input (in parallel) and compares;
//! any difference is a miss, and the project is loaded through the load cache as before, then
//! stored again. Contents are compared, never modification times, so an edit keeping size and
//! mtime is seen. The file is `<state dir>/.efmesh/project-cache`: a one-line text header
//! (magic, layout version, efmesh version, stdlib digest, blake3 of the body), then the key and
//! the models in `postcard`. A file that cannot be read, fails its checksum, cannot be decoded
//! or was written by another efmesh is ignored with a one-line warning (never trusted in part)
//! and rewritten by the next load.

use super::Project;
use crate::config::Config;
use crate::core::{Dag, Kind, Model};
use crate::script::loader::{Discovered, LoadReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The version of the project cache's layout and key recipe: bump it whenever either changes.
pub const CACHE_VERSION: u32 = 2;
/// First bytes of a project cache file.
const MAGIC: &str = "efmesh-project-cache";

/// What a cached project was loaded from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// blake3 of the configuration's `Debug` form.
    config: [u8; 32],
    /// The discovered audit files, then model files (relative, sorted as discovery gives them).
    audits: Vec<PathBuf>,
    models: Vec<PathBuf>,
    /// Every input, relative to the root (absolute for a seed outside it): `Some(blake3 of its
    /// bytes)`, or `None` for a path that must not exist.
    inputs: Vec<(PathBuf, Option<[u8; 32]>)>,
}

/// A project restored from the cache.
#[derive(Debug)]
pub struct Restored {
    /// The project, validated when it was stored.
    pub project: Project,
    /// Every input of the load, absolute (the configuration excepted).
    pub inputs: BTreeSet<PathBuf>,
    /// The content hashes the restore read, per relative path, for the load cache's memo.
    pub hashes: Vec<(PathBuf, [u8; 32])>,
    /// The key it was stored under (equal to the project as it is now).
    pub key: Key,
    /// The audit and model files discovered.
    pub files: Discovered,
}

/// Where `config`'s project keeps its project cache: `.efmesh/project-cache` in the directory
/// of the state store, beside the load cache.
pub fn path_for(config: &Config) -> PathBuf {
    let state = config.state_path();
    let dir = state.parent().map(Path::to_path_buf).unwrap_or_else(|| config.root.clone());
    dir.join(".efmesh").join("project-cache")
}

fn config_digest(config: &Config) -> [u8; 32] {
    *blake3::hash(format!("{config:?}").as_bytes()).as_bytes()
}

/// The key of a load that produced `project` and reported `report`; `None` when some input's
/// content is unknown (then nothing is stored).
pub fn key_of(config: &Config, project: &Project, report: &LoadReport) -> Option<Key> {
    let mut inputs: Vec<(PathBuf, Option<[u8; 32]>)> = Vec::with_capacity(report.hashes.len() + report.probes.len());
    for (p, h) in &report.hashes {
        inputs.push((p.clone(), Some((*h)?)));
    }
    for p in report.probes.iter().filter(|p| !report.hashes.contains_key(*p)) {
        inputs.push((p.clone(), None));
    }
    for m in project.dag.models() {
        if let Kind::Seed(s) = &m.kind {
            let path = crate::seed::resolve(&config.root, &s.path);
            let rel = path.strip_prefix(&config.root).map(Path::to_path_buf).unwrap_or(path);
            let hash = blake3::Hash::from_hex(&s.content_hash).ok()?;
            inputs.push((rel, Some(*hash.as_bytes())));
        }
    }
    inputs.sort();
    inputs.dedup();
    // One path with two different contents (a seed that is also a module) never matches.
    if inputs.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    Some(Key { config: config_digest(config), audits: report.files.audits.clone(), models: report.files.models.clone(), inputs })
}

impl Key {
    /// This key after the files in `hashes` (relative; the evaluated files and what they
    /// reached) were read with those contents, `probes` (relative) were found absent and the
    /// seed files `seeds` (absolute or relative) hashed, the rest of the load unchanged
    /// (`crate::session::Session`'s reload in place). Inputs the new reads no longer need stay
    /// with their recorded hashes, which only makes the key stricter. `None` when one path would
    /// be both present and absent, or read with two contents.
    pub fn patched(
        &self,
        root: &Path,
        hashes: &std::collections::BTreeMap<PathBuf, [u8; 32]>,
        probes: &BTreeSet<PathBuf>,
        seeds: &[(PathBuf, [u8; 32])],
    ) -> Option<Key> {
        let mut inputs: std::collections::BTreeMap<PathBuf, Option<[u8; 32]>> = self.inputs.iter().cloned().collect();
        let mut set = |p: PathBuf, h: Option<[u8; 32]>, replace: bool| -> Option<()> {
            match inputs.get(&p) {
                Some(old) if *old != h && !replace => None,
                _ => {
                    inputs.insert(p, h);
                    Some(())
                }
            }
        };
        for (p, h) in hashes {
            set(p.clone(), Some(*h), true)?;
        }
        for (p, h) in seeds {
            let rel = p.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| p.clone());
            if hashes.get(&rel).is_some_and(|x| x != h) {
                return None;
            }
            set(rel, Some(*h), true)?;
        }
        for p in probes {
            if hashes.contains_key(p) {
                return None;
            }
            set(p.clone(), None, false)?;
        }
        Some(Key { config: self.config, audits: self.audits.clone(), models: self.models.clone(), inputs: inputs.into_iter().collect() })
    }
}

/// Writes `project` under `key` (a temporary file renamed over the old one). A failure is a
/// warning, never an error.
pub fn store(config: &Config, key: &Key, project: &Project) {
    let path = path_for(config);
    let result = (|| -> Result<(), String> {
        let key_bytes = postcard::to_allocvec(key).map_err(|e| e.to_string())?;
        let models: Vec<&Model> = project.dag.models().collect();
        let models_bytes = postcard::to_allocvec(&(project.dag.digest(), models)).map_err(|e| e.to_string())?;
        let mut body = Vec::with_capacity(8 + key_bytes.len() + models_bytes.len());
        body.extend_from_slice(&(key_bytes.len() as u64).to_le_bytes());
        body.extend_from_slice(&key_bytes);
        body.extend_from_slice(&models_bytes);
        crate::script::loader::write_cache_file(&path, MAGIC, CACHE_VERSION, &body)
    })();
    if let Err(e) = result {
        tracing::warn!("cannot write the project cache `{}`: {e} (the next command loads through the load cache)", path.display());
    }
}

/// The body of a cache file, checked against its header.
fn body(bytes: &[u8]) -> Result<&[u8], String> {
    crate::script::loader::checked_cache_body(bytes, MAGIC, CACHE_VERSION, "project cache")
}

/// Splits a checked body into its key and the encoded models.
fn split(body: &[u8]) -> Result<(Key, &[u8]), String> {
    let len = body.get(..8).ok_or("it is corrupt (truncated)")?;
    let len = usize::try_from(u64::from_le_bytes(len.try_into().map_err(|_| "it is corrupt (truncated)")?)).map_err(|_| "it is corrupt (length)")?;
    let key_bytes = body.get(8..8usize.saturating_add(len)).ok_or("it is corrupt (truncated)")?;
    let key: Key = postcard::from_bytes(key_bytes).map_err(|e| format!("it is corrupt ({e})"))?;
    Ok((key, &body[8 + len..]))
}

/// True when every input of `key` is as recorded under `root`; the hashes read are returned.
/// Inputs are read and hashed on up to four threads; the first difference stops every thread.
fn inputs_current(root: &Path, key: &Key) -> Option<Vec<(PathBuf, [u8; 32])>> {
    let stale = AtomicBool::new(false);
    let check = |chunk: &[(PathBuf, Option<[u8; 32]>)]| -> Vec<(PathBuf, [u8; 32])> {
        let mut read = Vec::with_capacity(chunk.len());
        for (p, want) in chunk {
            if stale.load(Ordering::Relaxed) {
                break;
            }
            let full = root.join(p);
            let ok = match want {
                None => !full.exists(),
                Some(h) => match fs_err::read(&full) {
                    Ok(bytes) if blake3::hash(&bytes).as_bytes() == h => {
                        read.push((p.clone(), *h));
                        true
                    }
                    _ => false,
                },
            };
            if !ok {
                tracing::debug!("project cache: `{}` changed", p.display());
                stale.store(true, Ordering::Relaxed);
                break;
            }
        }
        read
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let per = key.inputs.len().div_ceil(threads).max(64);
    let read: Vec<(PathBuf, [u8; 32])> = if key.inputs.len() <= per {
        check(&key.inputs)
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = key.inputs.chunks(per).map(|c| s.spawn(|| check(c))).collect();
            handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        })
    };
    (!stale.load(Ordering::Relaxed) && read.len() == key.inputs.iter().filter(|(_, h)| h.is_some()).count()).then_some(read)
}

/// The project of `config` as last stored, when the cache is intact and every input is as it was
/// loaded from; `None` otherwise (a damaged or foreign cache with a warning on stderr).
pub fn restore(config: &Config) -> Option<Restored> {
    let path = path_for(config);
    let bytes = match fs_err::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("ignoring the project cache `{}`: cannot read it ({e}); the project is loaded through the load cache", path.display());
            return None;
        }
    };
    let warn = |why: String| tracing::warn!("ignoring the project cache `{}`: {why}; the project is loaded through the load cache", path.display());
    let (key, models) = match body(&bytes).and_then(split) {
        Ok(x) => x,
        Err(why) => {
            warn(why);
            return None;
        }
    };
    if key.config != config_digest(config) {
        tracing::debug!("project cache: the configuration changed");
        return None;
    }
    let files = Discovered::of(config).ok()?;
    if files.audits != key.audits || files.models != key.models {
        tracing::debug!("project cache: the discovered files changed");
        return None;
    }
    let hashes = inputs_current(&config.root, &key)?;
    let (digest, models): ([u8; 32], Vec<Model>) = match postcard::from_bytes(models) {
        Ok(x) => x,
        Err(e) => {
            warn(format!("it is corrupt ({e})"));
            return None;
        }
    };
    let Some(dag) = Dag::from_validated(models, digest) else {
        warn("it is corrupt (models out of order)".into());
        return None;
    };
    let inputs = key.inputs.iter().filter(|(_, h)| h.is_some()).map(|(p, _)| config.root.join(p)).collect();
    tracing::debug!("load: the project restored from the project cache ({} models)", dag.len());
    Some(Restored { project: Project { config: config.clone(), dag }, inputs, hashes, key, files })
}
