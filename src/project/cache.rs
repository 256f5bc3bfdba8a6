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
pub const CACHE_VERSION: u32 = 4;
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
    /// What this key records for `rel` (relative to the root; absolute for a seed outside it):
    /// `Some(Some(hash))` for an input read with that content, `Some(None)` for a path the load
    /// found absent, `None` for a path that is no input.
    pub fn input(&self, rel: &Path) -> Option<Option<[u8; 32]>> {
        self.inputs.binary_search_by(|(p, _)| p.as_path().cmp(rel)).ok().map(|i| self.inputs[i].1)
    }

    /// True when an input lies under the directory `rel` (relative to the root).
    pub fn has_input_under(&self, rel: &Path) -> bool {
        let i = self.inputs.partition_point(|(p, _)| p.as_path() < rel);
        self.inputs.get(i).is_some_and(|(p, _)| p.starts_with(rel))
    }

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

/// A file's identity and times as `stat` gives them: what the input-stats file records beside
/// the blake3 of the content read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    /// Modification and status-change times, `(seconds, nanoseconds)` since the epoch.
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stat {
    #[cfg(unix)]
    fn of(m: &std::fs::Metadata) -> Option<Stat> {
        use std::os::unix::fs::MetadataExt;
        Some(Stat { dev: m.dev(), ino: m.ino(), size: m.size(), mtime: (m.mtime(), m.mtime_nsec()), ctime: (m.ctime(), m.ctime_nsec()) })
    }

    /// Without Unix file identities nothing is recorded: every input is read and hashed.
    #[cfg(not(unix))]
    fn of(_m: &std::fs::Metadata) -> Option<Stat> {
        None
    }

    /// True when the file's last change is strictly older than `clock` (the file system's time
    /// taken before this stat): every later write, rename over it, `chmod`, or time set back by a
    /// tool gives it a status-change time of `clock` or later, so a stat still equal to this one
    /// proves the content is the one read after it. A file changed at `clock` or later ("racily
    /// clean", as git calls it) is not recorded and is read again next time.
    ///
    /// `clock` is `(device, time)`: a file on another device than the clock's (another file
    /// system, with its own time source and granularity) proves nothing and is never recorded.
    fn settled_before(&self, clock: (u64, (i64, i64))) -> bool {
        self.dev == clock.0 && self.mtime < clock.1 && self.ctime < clock.1
    }
}

/// The input-stats file's records: per relative path, the stat taken before the content was
/// read and the blake3 of that content.
type Proven = std::collections::HashMap<PathBuf, (Stat, [u8; 32])>;

/// The version of the input-stats file's layout.
const STATS_VERSION: u32 = 1;
/// First bytes of an input-stats file.
const STATS_MAGIC: &str = "efmesh-input-stats";

/// `<state dir>/.efmesh/input-stats`, beside the project cache.
fn stats_path(config: &Config) -> PathBuf {
    path_for(config).with_file_name("input-stats")
}

/// The records of the input-stats file at `path`; none when it is absent, and none with a debug
/// line when it cannot be trusted (another efmesh, a checksum mismatch): then every input is
/// read and hashed, and the file rewritten.
fn read_stats(path: &Path) -> Proven {
    let Ok(bytes) = fs_err::read(path) else { return Proven::new() };
    let records: Result<Vec<(PathBuf, Stat, [u8; 32])>, String> =
        crate::script::loader::checked_cache_body(&bytes, STATS_MAGIC, STATS_VERSION, "input-stats file")
            .and_then(|body| postcard::from_bytes(body).map_err(|e| format!("it is corrupt ({e})")));
    match records {
        Ok(r) => r.into_iter().map(|(p, s, h)| (p, (s, h))).collect(),
        Err(why) => {
            tracing::debug!("ignoring the input-stats file `{}`: {why}; every input is read and hashed", path.display());
            Proven::new()
        }
    }
}

/// Writes `records` to the input-stats file at `path`; a failure is a debug line (the next
/// restore reads and hashes every input).
fn write_stats(path: &Path, records: &Proven) {
    let mut list: Vec<(&PathBuf, &Stat, &[u8; 32])> = records.iter().map(|(p, (s, h))| (p, s, h)).collect();
    list.sort_by(|a, b| a.0.cmp(b.0));
    let result = postcard::to_allocvec(&list)
        .map_err(|e| e.to_string())
        .and_then(|body| crate::script::loader::write_cache_file(path, STATS_MAGIC, STATS_VERSION, &body));
    if let Err(e) = result {
        tracing::debug!("cannot write the input-stats file `{}`: {e}", path.display());
    }
}

/// The file system's current time: the device and status-change time `(seconds, nanoseconds)`
/// of a file created in `dir` now (removed again). `None` when it cannot be created.
#[cfg(unix)]
fn fs_clock(dir: &Path) -> Option<(u64, (i64, i64))> {
    use std::os::unix::fs::MetadataExt;
    fs_err::create_dir_all(dir).ok()?;
    let path = dir.join(format!(".input-stats-clock.{}.tmp", std::process::id()));
    let m = fs_err::File::create(&path).and_then(|f| f.metadata());
    let _ = fs_err::remove_file(&path);
    let m = m.ok()?;
    Some((m.dev(), (m.ctime(), m.ctime_nsec())))
}

#[cfg(not(unix))]
fn fs_clock(_dir: &Path) -> Option<(u64, (i64, i64))> {
    None
}

/// What [`inputs_current`] found.
struct Current {
    /// The content hash of every present input (proven by its stat or read and hashed now).
    hashes: Vec<(PathBuf, [u8; 32])>,
    /// The input-stats records to write, when some input was read and hashed.
    records: Option<Proven>,
}

/// True when every input of `key` is as recorded under `root`; the hashes proven are returned.
///
/// An input whose stat equals its record in `known` (same device, inode, size, modification
/// and status-change times) with the hash `key` wants is proven without reading it (git's
/// index rule: [`Stat::settled_before`] says why a record can be trusted). Every other input is
/// read and hashed, on up to four threads, after the file system's clock was read
/// ([`fs_clock`]); its stat, taken before the read, is recorded when its last change is older
/// than that clock. The first difference stops every thread.
fn inputs_current(root: &Path, key: &Key, known: &Proven, clock_dir: &Path) -> Option<Current> {
    let mut hashes = Vec::with_capacity(key.inputs.len());
    let mut todo: Vec<(&PathBuf, &[u8; 32])> = Vec::new();
    let mut records = Proven::new();
    for (p, want) in &key.inputs {
        let full = root.join(p);
        let Some(h) = want else {
            if full.exists() {
                tracing::debug!("project cache: `{}` appeared", p.display());
                return None;
            }
            continue;
        };
        let Ok(meta) = fs_err::metadata(&full) else {
            tracing::debug!("project cache: `{}` cannot be read", p.display());
            return None;
        };
        match (Stat::of(&meta), known.get(p)) {
            (Some(now), Some((stat, recorded))) if now == *stat && recorded == h => {
                hashes.push((p.clone(), *h));
                records.insert(p.clone(), (now, *h));
            }
            _ => todo.push((p, h)),
        }
    }
    tracing::debug!("project cache: {} input(s) proven by their recorded stat, {} to read and hash", hashes.len(), todo.len());
    if todo.is_empty() {
        return Some(Current { hashes, records: None });
    }
    let clock = fs_clock(clock_dir);
    let stale = AtomicBool::new(false);
    type Read = (PathBuf, [u8; 32], Option<Stat>);
    let check = |chunk: &[(&PathBuf, &[u8; 32])]| -> Vec<Read> {
        let mut read = Vec::with_capacity(chunk.len());
        for (p, h) in chunk {
            if stale.load(Ordering::Relaxed) {
                break;
            }
            let full = root.join(p);
            let stat = fs_err::metadata(&full).ok().and_then(|m| Stat::of(&m)).filter(|s| clock.is_some_and(|c| s.settled_before(c)));
            // Only a regular file is read (a FIFO would block, a device never end): anything
            // else is a changed input, which the load then reports.
            match crate::file::read_regular(&full) {
                Ok(bytes) if blake3::hash(&bytes).as_bytes() == *h => read.push(((*p).clone(), **h, stat)),
                _ => {
                    tracing::debug!("project cache: `{}` changed", p.display());
                    stale.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        read
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let per = todo.len().div_ceil(threads).max(64);
    let read: Vec<Read> = if todo.len() <= per {
        check(&todo)
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = todo.chunks(per).map(|c| s.spawn(|| check(c))).collect();
            handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        })
    };
    if stale.load(Ordering::Relaxed) || read.len() != todo.len() {
        return None;
    }
    for (p, h, stat) in read {
        if let Some(stat) = stat {
            records.insert(p.clone(), (stat, h));
        }
        hashes.push((p, h));
    }
    Some(Current { hashes, records: Some(records) })
}

/// The project of `config` as last stored, when the cache is intact and every input is as it was
/// loaded from; `None` otherwise (a damaged or foreign cache with a warning on stderr).
pub fn restore(config: &Config) -> Option<Restored> {
    let path = path_for(config);
    let bytes = match crate::file::read_regular(&path) {
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
    let stats = stats_path(config);
    let known = read_stats(&stats);
    let current = inputs_current(&config.root, &key, &known, stats.parent().unwrap_or(&config.root))?;
    let hashes = current.hashes;
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
    if let Some(records) = &current.records {
        write_stats(&stats, records);
    }
    tracing::debug!("load: the project restored from the project cache ({} models)", dag.len());
    Some(Restored { project: Project { config: config.clone(), dag }, inputs, hashes, key, files })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn key_of_files(inputs: &[(&str, [u8; 32])]) -> Key {
        Key { config: [0; 32], audits: Vec::new(), models: Vec::new(), inputs: inputs.iter().map(|(p, h)| (PathBuf::from(p), Some(*h))).collect() }
    }

    #[test]
    fn only_a_change_strictly_older_than_the_clock_is_settled() {
        let s = Stat { dev: 1, ino: 2, size: 3, mtime: (10, 5), ctime: (10, 7) };
        assert!(s.settled_before((1, (10, 8))));
        assert!(!s.settled_before((1, (10, 7))), "changed at the clock's tick: racy, read again");
        assert!(!Stat { mtime: (11, 0), ..s }.settled_before((1, (10, 8))), "an mtime set into the future is not settled");
        assert!(!s.settled_before((9, (10, 8))), "a file on another device than the clock's proves nothing");
    }

    #[test]
    fn a_recorded_stat_proves_the_recorded_content_until_the_file_changes_in_any_way() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let file = root.join("m.lua");
        fs_err::write(&file, "return 1\n").unwrap();
        let real = *blake3::hash(b"return 1\n").as_bytes();
        // Read and hashed: recorded once the change is older than the clock.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let key = key_of_files(&[("m.lua", real)]);
        let first = inputs_current(root, &key, &Proven::new(), root).unwrap();
        assert_eq!(first.hashes, vec![(PathBuf::from("m.lua"), real)]);
        let records = first.records.unwrap();
        let (stat, hash) = records[Path::new("m.lua")];
        assert_eq!(hash, real);
        // A record is trusted without reading: one naming another content proves that content
        // (this is what a record means), while the file keeps the recorded stat.
        let forged = [7u8; 32];
        let known: Proven = [(PathBuf::from("m.lua"), (stat, forged))].into_iter().collect();
        let current = inputs_current(root, &key_of_files(&[("m.lua", forged)]), &known, root).unwrap();
        assert!(current.records.is_none(), "nothing read");
        // The same bytes written again with the modification time put back: the status-change
        // time moved, so the file is read, and the forged hash no longer matches.
        let mtime = fs_err::metadata(&file).unwrap().modified().unwrap();
        fs_err::write(&file, "return 1\n").unwrap();
        fs_err::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
        assert!(inputs_current(root, &key_of_files(&[("m.lua", forged)]), &known, root).is_none());
        // And a record with the right content but an old stat is read again and renewed.
        let again = inputs_current(root, &key, &known, root).unwrap();
        assert!(again.records.is_some());
    }
}
