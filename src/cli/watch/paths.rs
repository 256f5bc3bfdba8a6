//! Which file events are a reason to re-plan.
//!
//! The project root is watched recursively, so a new model file anywhere is seen. An event
//! matters when its path is a project input ([`crate::session::Session::inputs`]: the config,
//! model, audit and seed files, files reached through `require`/`import`), matches the
//! discovery globs (models, audits, tests), or may become one: a script or seed file
//! (`.lua`, `.rhai`, `.sql`, `.csv`, `.tsv`, `.json`, `.ndjson`, `.jsonl`) not loaded yet, a
//! directory created or moved in, a directory that held inputs. Never: anything below a hidden
//! directory (`.git`, `.efmesh`, where the load cache lives) or named with a leading dot (editor
//! swap and backup files), the DuckDB, state and DuckLake catalog files and what the database
//! libraries write beside them ([`SIDECARS`]), which efmesh itself writes. In a local lake
//! directory and the DuckLake data directory, which efmesh also writes, only an input (a seed
//! kept there), a directory holding inputs, or a path the discovery globs match counts: a file
//! there never counts just for its extension. An input always counts, wherever it lies and
//! whatever its name (but a database file itself): a seed `codes.csv` beside an engine file
//! `codes` is the user's, not a sidecar of the engine's.
//! A file that may have become an input and turns out not to be one after the reload (read by
//! no model, matched by no glob: the `.jsonl` the watch's output is redirected to) gets no line.
//!
//! An input reached through a symlink (a model in a symlinked folder, a symlinked model file)
//! has two names, and the watcher reports a change under either: inotify watches a directory
//! once whatever the paths leading to it, and a symlink made while the watch runs is never
//! followed, so edits behind it arrive under the target's path. [`Aliases`] maps such a path
//! back to the input(s) it is. While the project does not load, a link or a vanished entry in
//! a directory a discovery glob walks ([`Filter::may_change_discovery`]) counts too: removing
//! the link that broke the load must re-walk the globs.

use crate::config::Config;
use notify::EventKind;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// Extensions of files that may become inputs (scripts reached through `require`/`import`,
/// seed files) before a load has read them.
const MAYBE_INPUT: &[&str] = &["lua", "rhai", "sql", "csv", "tsv", "json", "ndjson", "jsonl"];

/// What the database libraries write beside a database file, named by appending one of these to
/// its name (and possibly more after it): DuckDB's write-ahead log (`.wal`, and its
/// `.wal.checkpoint` and `.wal.recovery`) and temporary directory (`.tmp`, spilled data);
/// SQLite's write-ahead log, shared-memory index, rollback journal and super-journal (`-wal`,
/// `-shm`, `-journal`, `-mj…`). Only these: any other name that starts with the database file's
/// (`codes.csv` beside an engine file `codes`, `shop_orders.sql` beside `shop`) is the user's.
const SIDECARS: &[&str] = &[".wal", ".tmp", "-wal", "-shm", "-journal", "-mj"];

/// Decides which changed paths matter to a project.
#[derive(Debug)]
pub struct Filter {
    root: PathBuf,
    /// The root with symlinks resolved: some platforms (macOS FSEvents) report event paths so.
    canonical_root: Option<PathBuf>,
    config: PathBuf,
    globs: globset::GlobSet,
    /// Database files efmesh writes (engine, state, DuckLake catalog), as (directory, name): the
    /// file, and its [`SIDECARS`] and what lies below them.
    own_files: Vec<(PathBuf, OsString)>,
    /// Directories efmesh writes (a local lake, DuckLake data); a user's file may be kept there
    /// (a seed), so only what is not an input is efmesh's.
    own_dirs: Vec<PathBuf>,
    /// The directories the discovery globs walk (each glob's part before its first wildcard).
    walked: Vec<PathBuf>,
}

impl Filter {
    /// The filter for `config`'s project.
    pub fn new(config: &Config) -> Filter {
        let all: Vec<String> =
            config.project.models.iter().chain(&config.project.audits).chain(&config.project.macros).chain(&config.project.tests).cloned().collect();
        let globs = glob_set(&all);
        let mut files = vec![config.engine_path(), config.state_path()];
        // (With a Postgres engine or state no file is at those paths: nothing to ignore, harmless.)
        let mut own_dirs = Vec::new();
        if let Some(lake) = config.lake.as_ref().filter(|l| !l.is_s3()) {
            own_dirs.push(config.resolve(Path::new(lake.path.trim_end_matches('/'))));
        }
        if let (Some(dl), Some(catalog)) = (&config.ducklake, config.ducklake_catalog_file()) {
            let mut data = catalog.clone().into_os_string();
            data.push(".files");
            own_dirs.push(dl.data_path.as_ref().map_or_else(|| PathBuf::from(data), |d| config.resolve(d)));
            files.push(catalog);
        }
        let own_files = files.into_iter().filter_map(|f| Some((f.parent()?.to_path_buf(), f.file_name()?.to_os_string()))).collect();
        let canonical_root = config.root.canonicalize().ok().filter(|c| *c != config.root);
        let walked = all.iter().filter_map(|g| walked_dir(g)).map(|d| config.root.join(d)).collect();
        Filter { root: config.root.clone(), canonical_root, config: config.path.clone(), globs, own_files, own_dirs, walked }
    }

    /// The test-file globs of `config` (`project.tests`), matched against paths relative to
    /// the root.
    pub fn test_globs(config: &Config) -> globset::GlobSet {
        glob_set(&config.project.tests)
    }

    /// True when `kind` can change what a file holds (or whether it exists): not an open or a
    /// read, not a metadata-only change.
    pub fn kind_matters(kind: &EventKind) -> bool {
        match kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) => false,
            _ => true,
        }
    }

    /// `path` under the root as given in the configuration, when it is reported under the
    /// canonical root (the session and its inputs name paths under the former).
    pub fn under_root(&self, path: &Path) -> PathBuf {
        match self.canonical_root.as_ref().and_then(|c| path.strip_prefix(c).ok()) {
            Some(rel) if !path.starts_with(&self.root) => self.root.join(rel),
            _ => path.to_path_buf(),
        }
    }

    /// `path` with every symlink resolved, named under the root as given in the configuration
    /// when it lies under it ([`Filter::under_root`]). A path that does not exist (deleted) is
    /// resolved through its nearest existing ancestor, the rest appended as named. `None` when
    /// no ancestor resolves.
    pub fn real(&self, path: &Path) -> Option<PathBuf> {
        let mut rest: Vec<&OsStr> = Vec::new();
        let mut at = path;
        loop {
            if let Ok(mut real) = at.canonicalize() {
                for c in rest.iter().rev() {
                    real.push(c);
                }
                return Some(self.under_root(&real));
            }
            rest.push(at.file_name()?);
            at = at.parent()?;
        }
    }

    /// True when `path` is where efmesh writes itself: a database file ([`Filter::database`]),
    /// what the database library writes beside it ([`Filter::beside_database`]), or anything in
    /// a directory efmesh writes (a local lake, DuckLake data). An input among them (a seed kept
    /// in the lake directory) is the user's all the same: [`Filter::relevant`] takes inputs
    /// first.
    pub fn own(&self, path: &Path) -> bool {
        self.database(path) || self.beside_database(path) || self.in_own_dir(path)
    }

    /// True when `path` is a database file efmesh writes: the engine's, the state store's, the
    /// DuckLake catalog. Never an input, whatever a model names.
    fn database(&self, path: &Path) -> bool {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return false };
        self.own_files.iter().any(|(dir, file)| dir == parent && name == file.as_os_str())
    }

    /// True when `path` is one of the files the database library writes beside a database file
    /// efmesh writes ([`SIDECARS`]), or lies below one (DuckDB's temporary directory). A
    /// sibling whose name merely starts with the database file's (`codes.csv` beside `codes`)
    /// is not.
    fn beside_database(&self, path: &Path) -> bool {
        self.own_files.iter().any(|(dir, file)| {
            let Some(first) = path.strip_prefix(dir).ok().and_then(|rel| rel.components().next()) else { return false };
            let rest = first.as_os_str().as_encoded_bytes().strip_prefix(file.as_encoded_bytes());
            rest.is_some_and(|rest| SIDECARS.iter().any(|s| rest.starts_with(s.as_bytes())))
        })
    }

    /// True when `path` lies in a directory efmesh writes (a local lake, DuckLake data).
    fn in_own_dir(&self, path: &Path) -> bool {
        self.own_dirs.iter().any(|d| path.starts_with(d))
    }

    /// True when `path` (absolute, under the root) matches a discovery glob (models, audits,
    /// macros, tests).
    pub fn discovered(&self, path: &Path) -> bool {
        self.under_root(path).strip_prefix(&self.root).is_ok_and(|rel| self.globs.is_match(rel))
    }

    /// True when `path` is hidden (below a directory or named with a leading dot).
    fn hidden(rel: &Path) -> bool {
        rel.components().any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
    }

    /// True when a change to `path` may change the loaded project (see the module doc);
    /// `inputs` are the session's. The database files efmesh writes never are; an input always
    /// is, even under a hidden directory, in the lake directory, or named like a database
    /// file's sidecar. Other paths efmesh writes ([`Filter::own`]) are not, but for a directory
    /// holding inputs and a path the discovery globs match.
    pub fn relevant(&self, path: &Path, inputs: &BTreeSet<PathBuf>) -> bool {
        let path = self.under_root(path);
        let path = path.as_path();
        let Ok(rel) = path.strip_prefix(&self.root) else { return false };
        if self.database(path) {
            return false;
        }
        if path == self.config || inputs.contains(path) {
            return true;
        }
        if Self::hidden(rel) || self.beside_database(path) {
            return false;
        }
        if self.globs.is_match(rel) {
            return true;
        }
        if self.in_own_dir(path) {
            // Lake files (parquet, `manifest.json`), version directories: efmesh's. A directory
            // holding inputs (a folder of seeds moved in or deleted) is the user's.
            return holds_input(inputs, path);
        }
        if path.extension().and_then(|e| e.to_str()).is_some_and(|e| MAYBE_INPUT.contains(&e.to_ascii_lowercase().as_str())) {
            return true;
        }
        if path.is_dir() {
            return true;
        }
        // A directory that is gone: did it hold inputs?
        !path.exists() && holds_input(inputs, path)
    }

    /// True when `path` (absolute) lies in a directory a discovery glob walks, is not hidden nor
    /// efmesh's own, and is a symlink or is gone: what the walk finds may have changed (a
    /// symlinked folder added or removed). `watch` counts such a path while the project does not
    /// load (the failing load may not have read what is behind it); while it loads, a link to a
    /// directory and a vanished directory that held inputs already count ([`Filter::relevant`]).
    pub fn may_change_discovery(&self, path: &Path) -> bool {
        let path = self.under_root(path);
        let Ok(rel) = path.strip_prefix(&self.root) else { return false };
        if self.own(&path) || Self::hidden(rel) || !self.walked.iter().any(|d| path.starts_with(d)) {
            return false;
        }
        match fs_err::symlink_metadata(&path) {
            Ok(m) => m.file_type().is_symlink(),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        }
    }
}

/// The inputs reached through a symlink, by their real path ([`Filter::real`]), so that a file
/// event reported under the target's path is taken as a change of the input (see the module
/// doc). Built from the inputs of one load: `watch` builds it again when they change.
#[derive(Debug, Default)]
pub struct Aliases {
    /// Real path → the inputs (absolute, under the root) that resolve to it, for the inputs
    /// whose real path differs from the path the load read them at.
    by_real: BTreeMap<PathBuf, Vec<PathBuf>>,
}

impl Aliases {
    /// The aliases of `inputs` (one real path resolved per input).
    pub fn new<'a>(filter: &Filter, inputs: impl IntoIterator<Item = &'a PathBuf>) -> Aliases {
        let mut by_real: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for input in inputs {
            if let Some(real) = filter.real(input).filter(|r| r != input) {
                by_real.entry(real).or_default().push(input.clone());
            }
        }
        Aliases { by_real }
    }

    /// The inputs other than `path` (absolute, under the root) that `path` is another name of,
    /// or holds under another name: those whose real path is `path`'s, or lies below it, and
    /// `path`'s real path when that differs and is an input itself (`is_input`). The flag is
    /// true when `path` names one of them exactly (a file, not a directory holding them): a
    /// `path` that is no input itself is then only that input's other name.
    pub fn inputs_at(&self, filter: &Filter, path: &Path, is_input: impl Fn(&Path) -> bool) -> (Vec<PathBuf>, bool) {
        let Some(real) = filter.real(path) else { return (Vec::new(), false) };
        let mut found = Vec::new();
        let mut exact = false;
        if real != path && is_input(&real) {
            found.push(real.clone());
            exact = true;
        }
        for (r, inputs) in self.by_real.range(real.clone()..).take_while(|(r, _)| r.starts_with(&real)) {
            exact |= *r == real;
            found.extend(inputs.iter().filter(|i| i.as_path() != path).cloned());
        }
        (found, exact)
    }
}

/// True when `path` is one of `inputs` or a directory holding one (`inputs` sorted: the first at
/// or after `path` is under it if any is).
pub fn holds_input(inputs: &BTreeSet<PathBuf>, path: &Path) -> bool {
    inputs.range(path.to_path_buf()..).next().is_some_and(|i| i.starts_with(path))
}

/// The directory `glob` walks, relative to the root: its part before the first wildcard, up to
/// the last `/` (`models` of `models/**/*.lua`, the root of `*.lua`); `None` for a glob without
/// wildcards (one file, nothing walked).
fn walked_dir(glob: &str) -> Option<PathBuf> {
    let i = glob.find(['*', '?', '[', '{'])?;
    Some(PathBuf::from(glob[..i].rfind('/').map_or("", |j| &glob[..j])))
}

/// The globs as discovery matches them; an invalid glob (a load error the session reports)
/// matches nothing here.
fn glob_set(globs: &[String]) -> globset::GlobSet {
    let mut builder = globset::GlobSetBuilder::new();
    for g in globs {
        if let Ok(glob) = globset::GlobBuilder::new(g).literal_separator(true).build() {
            builder.add(glob);
        }
    }
    builder.build().unwrap_or_else(|_| globset::GlobSet::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter() -> (Filter, BTreeSet<PathBuf>) {
        let toml = "[project]\nmodels = [\"models/**/*.lua\"]\n[engine]\npath = \"db/efmesh.duckdb\"\n[state]\npath = \"efmesh.state.sqlite\"\n[lake]\npath = \"lake\"\n";
        let config = Config::parse(Path::new("/nonexistent-efmesh/p/efmesh.toml"), toml).expect("config");
        let inputs: BTreeSet<PathBuf> =
            ["efmesh.toml", "models/a.lua", "lib/util.lua", "seeds/s.txt"].iter().map(|p| Path::new("/nonexistent-efmesh/p").join(p)).collect();
        (Filter::new(&config), inputs)
    }

    fn p(rel: &str) -> PathBuf {
        Path::new("/nonexistent-efmesh/p").join(rel)
    }

    #[test]
    fn inputs_globs_and_possible_inputs_are_relevant() {
        let (f, inputs) = filter();
        for rel in ["efmesh.toml", "models/a.lua", "models/new/b.lua", "lib/util.lua", "seeds/s.txt", "lib/other.rhai", "seeds/new.csv", "x.sql"] {
            assert!(f.relevant(&p(rel), &inputs), "{rel}");
        }
    }

    #[test]
    fn own_files_hidden_files_and_unrelated_files_are_not() {
        let (f, inputs) = filter();
        for rel in [
            "db/efmesh.duckdb",
            "db/efmesh.duckdb.wal",
            "db/efmesh.duckdb.tmp",
            "efmesh.state.sqlite",
            "efmesh.state.sqlite-wal",
            "efmesh.state.sqlite-shm",
            "efmesh.state.sqlite-journal",
            "lake/m__t/abc/data.parquet",
            "lake/m__t/abc/manifest.json",
            ".efmesh/load-cache.json",
            ".git/index",
            "models/.a.lua.swp",
            "models/a.lua~",
            "models/4913",
            "README.md",
        ] {
            assert!(!f.relevant(&p(rel), &inputs), "{rel}");
        }
        assert!(!f.relevant(Path::new("/elsewhere/models/a.lua"), &inputs));
    }

    #[test]
    fn an_input_under_a_hidden_directory_is_relevant_and_own_files_never_are() {
        let (f, mut inputs) = filter();
        inputs.insert(p(".shared/util.lua"));
        inputs.insert(p("db/efmesh.duckdb"));
        assert!(f.relevant(&p(".shared/util.lua"), &inputs), "a module imported from a hidden directory is an input");
        assert!(!f.relevant(&p(".shared/other.lua"), &inputs));
        assert!(!f.relevant(&p("db/efmesh.duckdb"), &inputs), "efmesh's own files never trigger");
    }

    #[test]
    fn paths_under_the_canonical_root_are_matched() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs_err::create_dir_all(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let toml = "[project]\nmodels = [\"models/**/*.lua\"]\n[engine]\npath = \"efmesh.duckdb\"\n";
        let config = Config::parse(&link.join("efmesh.toml"), toml).expect("config");
        let f = Filter::new(&config);
        let canonical = real.canonicalize().unwrap();
        let inputs: BTreeSet<PathBuf> = [link.join("lib/util.lua")].into_iter().collect();
        assert!(f.relevant(&canonical.join("models/a.lua"), &inputs), "a model file reported under the canonical root");
        assert!(f.relevant(&canonical.join("lib/util.lua"), &inputs), "an input reported under the canonical root");
        assert!(f.relevant(&canonical.join("efmesh.toml"), &inputs), "the config reported under the canonical root");
        assert!(!f.relevant(&canonical.join("efmesh.duckdb"), &inputs), "the engine file reported under the canonical root");
    }

    /// A project at a canonical temporary root with `models/shared -> ../shared` holding
    /// `e.lua`, and its filter.
    fn linked_project() -> (tempfile::TempDir, PathBuf, Filter) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs_err::create_dir_all(root.join("shared")).unwrap();
        fs_err::create_dir_all(root.join("models")).unwrap();
        fs_err::write(root.join("shared/e.lua"), "").unwrap();
        fs_err::write(root.join("models/a.lua"), "").unwrap();
        std::os::unix::fs::symlink("../shared", root.join("models/shared")).unwrap();
        let toml = "[project]\nmodels = [\"models/**/*.lua\"]\n[engine]\npath = \"efmesh.duckdb\"\n";
        let config = Config::parse(&root.join("efmesh.toml"), toml).expect("config");
        let f = Filter::new(&config);
        (dir, root, f)
    }

    #[test]
    fn a_path_behind_a_symlink_is_taken_for_the_input_it_is() {
        let (_dir, root, f) = linked_project();
        let input = root.join("models/shared/e.lua");
        let inputs: BTreeSet<PathBuf> = [input.clone(), root.join("models/a.lua")].into_iter().collect();
        let aliases = Aliases::new(&f, &inputs);
        let is_input = |p: &Path| inputs.contains(p);
        assert_eq!(aliases.inputs_at(&f, &root.join("shared/e.lua"), is_input), (vec![input.clone()], true), "the target's path");
        assert_eq!(aliases.inputs_at(&f, &root.join("shared"), is_input), (vec![input.clone()], false), "a directory holding it");
        assert_eq!(aliases.inputs_at(&f, &root.join("shared/new.lua"), is_input), (Vec::<PathBuf>::new(), false), "no input yet");
        assert_eq!(aliases.inputs_at(&f, &root.join("README.md"), is_input), (Vec::<PathBuf>::new(), false));
        fs_err::remove_file(root.join("shared/e.lua")).unwrap();
        assert_eq!(aliases.inputs_at(&f, &root.join("shared/e.lua"), is_input), (vec![input.clone()], true), "deleted at its target");
        // The input known by its real path, reported through the link.
        fs_err::write(root.join("shared/e.lua"), "").unwrap();
        let real: BTreeSet<PathBuf> = [root.join("shared/e.lua")].into_iter().collect();
        let none = Aliases::new(&f, &real);
        assert_eq!(none.inputs_at(&f, &input, |p: &Path| real.contains(p)), (vec![root.join("shared/e.lua")], true));
    }

    #[test]
    fn links_and_vanished_entries_where_the_globs_walk_may_change_discovery() {
        let (_dir, root, f) = linked_project();
        std::os::unix::fs::symlink("/nonexistent-efmesh/outside", root.join("models/dangling")).unwrap();
        assert!(f.may_change_discovery(&root.join("models/shared")), "a link");
        assert!(f.may_change_discovery(&root.join("models/dangling")), "a dangling link");
        assert!(f.may_change_discovery(&root.join("models/linked")), "an entry that vanished");
        assert!(!f.may_change_discovery(&root.join("models/a.lua")), "a plain file");
        assert!(!f.may_change_discovery(&root.join("linked")), "outside the directories the globs walk");
        assert!(!f.may_change_discovery(&root.join("models/.a.lua.swp")), "hidden");
        assert_eq!(walked_dir("models/**/*.lua"), Some(PathBuf::from("models")));
        assert_eq!(walked_dir("*.lua"), Some(PathBuf::new()));
        assert_eq!(walked_dir("models/one.lua"), None);
    }

    #[test]
    fn a_file_named_like_a_database_file_or_kept_in_the_lake_directory_is_the_users() {
        // The engine file `codes`, the state file `shop`, the lake `data`: a seed `codes.csv`, a
        // model `shop_orders.sql` and a seed `data/codes.csv` are inputs and count; what DuckDB,
        // SQLite and the lake write never does.
        let toml = "[project]\nmodels = [\"*.sql\"]\n[engine]\npath = \"codes\"\n[state]\npath = \"shop\"\n[lake]\npath = \"data\"\n";
        let config = Config::parse(Path::new("/nonexistent-efmesh/p/efmesh.toml"), toml).expect("config");
        let f = Filter::new(&config);
        let inputs: BTreeSet<PathBuf> = ["efmesh.toml", "shop_orders.sql", "codes.csv", "data/codes.csv", "data/seeds/a.csv"].into_iter().map(p).collect();
        for rel in ["codes.csv", "shop_orders.sql", "shop_new.sql", "codes.tsv", "data/codes.csv", "data/seeds/a.csv", "data/seeds"] {
            assert!(f.relevant(&p(rel), &inputs), "{rel}");
        }
        for rel in [
            "codes",
            "codes.wal",
            "codes.wal.checkpoint",
            "codes.tmp/duckdb_temp_storage-0.tmp",
            "shop",
            "shop-wal",
            "shop-shm",
            "shop-journal",
            "data/raw__codes/abc/data.parquet",
            "data/raw__codes/abc/manifest.json",
            "data/raw__codes/abc/manifest.json.tmp",
            "data/raw__codes",
            "data/new.csv",
            "data/.efmesh-owner.d/store",
        ] {
            assert!(!f.relevant(&p(rel), &inputs), "{rel}");
        }
        assert!(f.own(&p("data/codes.csv")) && !f.own(&p("codes.csv")) && f.own(&p("codes.wal")));
    }

    #[test]
    fn a_gone_directory_that_held_inputs_is_relevant() {
        let (f, inputs) = filter();
        assert!(f.relevant(&p("lib"), &inputs));
        assert!(!f.relevant(&p("docs"), &inputs));
    }

    #[test]
    fn opening_and_reading_never_trigger() {
        use notify::event::{AccessKind, AccessMode, CreateKind, MetadataKind, ModifyKind};
        assert!(!Filter::kind_matters(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!Filter::kind_matters(&EventKind::Access(AccessKind::Close(AccessMode::Read))));
        assert!(!Filter::kind_matters(&EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any))));
        assert!(Filter::kind_matters(&EventKind::Access(AccessKind::Close(AccessMode::Write))));
        assert!(Filter::kind_matters(&EventKind::Create(CreateKind::File)));
        assert!(Filter::kind_matters(&EventKind::Modify(ModifyKind::Any)));
    }
}
