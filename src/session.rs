//! A session: the configuration, the loaded project and the way to the state store and the
//! engine, held together so that `watch`, the CLI commands and embedders share one seam.
//!
//! A session is opened from a configuration file ([`Session::open`]). It keeps the project as
//! last loaded — or the load errors, so a watcher keeps running on a broken project — and every
//! input that load read ([`Session::inputs`]): the config, model and audit files, files reached
//! through `require`/`import`, seed files. [`Session::reload`] takes the paths that changed and
//! brings the project up to date. [`Session::plan`] and [`Session::apply`] plan and apply an
//! environment the way the CLI does: the state store is opened per call (an interrupted
//! promotion is undone first), the plan is checked against the engine's catalog, and the engine
//! is opened only for as long as a call needs it, so other processes are not locked out between
//! calls.

use crate::apply::{self, ApplyReport};
use crate::config::Config;
use crate::core::interval::Millis;
use crate::core::{Dag, LoadErrors, ModelName};
use crate::plan::{self, Plan};
use crate::project::Project;
use crate::project::cache as project_cache;
use crate::script::loader::{Discovered, LoadCache};
use crate::state::{SqliteStore, StateStore};
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What a [`Session::reload`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reload {
    /// The configuration file changed and was read again.
    pub config_changed: bool,
    /// Script files evaluated by this reload (relative to the project root).
    pub evaluated: Vec<PathBuf>,
    /// Models whose loaded definition differs from the previous load, added or removed. After
    /// loads that failed, the comparison is with the last load that succeeded (every model
    /// when none did): a model a failing load could not say anything of is not changed by it.
    pub changed_models: BTreeSet<ModelName>,
    /// The project was updated in place (only the evaluated files' models replaced in the DAG),
    /// not loaded in full: see [`Session::reload`].
    pub in_place: bool,
}

/// The configuration, the loaded project (or its load errors) and every input the load read.
#[derive(Debug)]
pub struct Session {
    config_path: PathBuf,
    config: Config,
    project: Result<Project, LoadErrors>,
    inputs: BTreeSet<PathBuf>,
    /// While the project does not load, the inputs of the loads before the failing one (back to
    /// the last that succeeded); empty while it loads. See [`Session::kept_inputs`].
    kept: BTreeSet<PathBuf>,
    /// While the project does not load, the models of the last load that succeeded (since the
    /// session opened), which the next load that succeeds is compared with
    /// ([`Reload::changed_models`]); `None` while it loads.
    last_good: Option<Dag>,
    /// Per-file load results and content hashes, kept across reloads and saved to the project's
    /// load cache by [`Session::save_caches`]; opened on the first load that needs it (a session
    /// restored from the project cache never reads it).
    cache: Option<LoadCache>,
    /// Content hashes the project-cache restore read, for the load cache's memo when it opens.
    restored: Vec<(PathBuf, [u8; 32])>,
    /// The project cache's key as last restored or stored, and the key of the last load.
    stored_key: Option<project_cache::Key>,
    loaded_key: Option<project_cache::Key>,
    /// `stored_key` is the key of the project as loaded now (restored, or saved since the last
    /// load): with `loaded_key`, what [`Session::unchanged`] compares with.
    stored_current: bool,
    /// The audit and model files of the last load; a reload whose changed paths cannot change
    /// them reuses them instead of walking the discovery globs again.
    files: Option<Discovered>,
    /// Fingerprints of the last plan, so the next one re-fingerprints only what changed.
    versions: std::sync::Mutex<plan::VersionMemo>,
}

impl Session {
    /// Reads the configuration at `config_path` and loads the project: restored from the
    /// project cache when no input changed since it was stored ([`crate::project::cache`]),
    /// otherwise through the load cache (then both caches are saved). A project that does not
    /// load still opens: its errors are in [`Session::project`].
    ///
    /// # Errors
    /// The configuration cannot be read or is invalid.
    pub fn open(config_path: &Path) -> Result<Session> {
        let config = Config::load(config_path)?;
        let restored = project_cache::restore(&config);
        let mut session = Session {
            config_path: config_path.to_path_buf(),
            config,
            project: Err(LoadErrors(Vec::new())),
            inputs: BTreeSet::new(),
            kept: BTreeSet::new(),
            last_good: None,
            cache: None,
            restored: Vec::new(),
            stored_key: None,
            loaded_key: None,
            stored_current: false,
            files: None,
            versions: Default::default(),
        };
        match restored {
            Some(r) => {
                session.project = Ok(r.project);
                session.inputs = r.inputs;
                session.inputs.insert(session.config.path.clone());
                session.restored = r.hashes;
                session.files = Some(r.files);
                session.stored_key = Some(r.key);
                session.stored_current = true;
            }
            None => {
                session.load_all();
                session.save_caches();
            }
        }
        Ok(session)
    }

    /// Writes what the last loads changed to the project's caches: the load cache, and the
    /// project cache when the project loaded and its inputs differ from the stored ones. A
    /// failure is a warning. [`Session::open`] saves after its load; [`Session::reload`] does
    /// not (`watch` saves after showing each re-plan, off the path from the save to the screen).
    pub fn save_caches(&mut self) {
        if let Some(c) = &mut self.cache {
            c.save();
        }
        if let (Ok(p), Some(key)) = (&self.project, self.loaded_key.take()) {
            if self.stored_key.as_ref() != Some(&key) {
                project_cache::store(&self.config, &key, p);
                self.stored_key = Some(key);
            }
            self.stored_current = true;
        }
    }

    /// The key of what the project as loaded now was loaded from (`None`: not loaded, or its
    /// key unknown).
    fn current_key(&self) -> Option<&project_cache::Key> {
        self.project.as_ref().ok()?;
        self.loaded_key.as_ref().or(self.stored_key.as_ref().filter(|_| self.stored_current))
    }

    /// True when `path` (absolute or relative to the root) is as the project now loaded was
    /// loaded from it: an input whose bytes hash to what the load read, or a path that is absent
    /// now and was no input (nor a directory holding one) or was found absent by the load. The
    /// configuration file never is (it is read again on every change), nor anything when the
    /// project did not load. A change of such a path cannot change the project: `watch` drops
    /// it, so a save reported in two batches of file events re-plans once.
    pub fn unchanged(&self, path: &Path) -> bool {
        let Some(key) = self.current_key() else { return false };
        let abs = self.absolute(path);
        if abs == self.config.path {
            return false;
        }
        let absent = || matches!(fs_err::symlink_metadata(&abs), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        let rel = abs.strip_prefix(&self.config.root).map(Path::to_path_buf).unwrap_or_else(|_| abs.clone());
        match key.input(&rel) {
            Some(Some(hash)) => crate::file::read_regular(&abs).is_ok_and(|bytes| *blake3::hash(&bytes).as_bytes() == hash),
            Some(None) => absent(),
            None => !self.inputs.contains(&abs) && !key.has_input_under(&rel) && absent(),
        }
    }

    /// The load cache, opened on first use (its memo seeded with what a restore read).
    fn load_cache(&mut self) -> &mut LoadCache {
        if self.cache.is_none() {
            let mut c = LoadCache::open(&self.config);
            c.remember(std::mem::take(&mut self.restored).into_iter().map(|(p, h)| (p, Some(h))));
            self.cache = Some(c);
        }
        self.cache.as_mut().expect("opened above")
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The path of the configuration file, as given to [`Session::open`].
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The project as last loaded, or every error of that load.
    pub fn project(&self) -> Result<&Project, &LoadErrors> {
        self.project.as_ref()
    }

    /// The project as last loaded, or its errors as an error to report.
    ///
    /// # Errors
    /// The load errors of the last load.
    pub fn loaded(&self) -> Result<&Project> {
        self.project.as_ref().map_err(|e| e.clone().into())
    }

    /// The project as last loaded, consuming the session (one-shot commands).
    ///
    /// # Errors
    /// The load errors of the last load.
    pub fn into_project(self) -> Result<Project> {
        Ok(self.project?)
    }

    /// Every file the last load read, absolute: the configuration, the model and audit files,
    /// the files they reached through `require`/`import`, and the seed files. A change to any of
    /// them (or a new file matching the discovery globs) is a reason to [`Session::reload`].
    pub fn inputs(&self) -> &BTreeSet<PathBuf> {
        &self.inputs
    }

    /// While the project does not load: the inputs of the loads before the failing one, back to
    /// the last load that succeeded (empty while the project loads). A load that fails early (a
    /// discovery glob's walk refused, say) reads next to nothing, yet a change to what the
    /// project read before — a module reached through `require`, a seed — still changes what
    /// the next load finds: `watch` keeps treating these paths as inputs.
    pub fn kept_inputs(&self) -> &BTreeSet<PathBuf> {
        &self.kept
    }

    /// Brings the project up to date after `changed` paths (absolute or relative to the project
    /// root) changed, appeared or disappeared: the discovery globs are walked again (new files
    /// are picked up, deleted ones dropped), the content of the changed paths is read again, and
    /// only the top-level files whose inputs changed are evaluated — a changed file and every
    /// top-level file that reached it through `require` / `import` (every file when the
    /// configuration's `[project]` section or an audit file changed). Seeds are hashed again;
    /// the DAG is rebuilt. Paths not listed are taken as unchanged since the last load.
    ///
    /// # Errors
    /// The configuration is gone or no longer valid; the session keeps its previous state.
    pub fn reload(&mut self, changed: &[PathBuf]) -> Result<Reload> {
        let config_abs = self.config.path.clone();
        let config_changed = changed.iter().any(|p| self.absolute(p) == config_abs);
        // Forget first: a reload that fails below (the configuration no longer parses) must not
        // leave these paths trusted for the next one.
        let old_root = self.config.root.clone();
        let rel: Vec<PathBuf> = changed.iter().map(|p| p.strip_prefix(&old_root).map(Path::to_path_buf).unwrap_or_else(|_| p.clone())).collect();
        self.load_cache().forget(rel.iter().map(PathBuf::as_path));
        if config_changed {
            let config = Config::load(&self.config_path)?;
            if config.root != self.config.root {
                self.load_cache().forget_all();
            }
            self.config = config;
        }
        // The discovered files can change only by a path appearing, disappearing or changing
        // what it is, or by the configuration: the globs are walked again unless every changed
        // path is a plain file (no link) the last load already read.
        let root = self.config.root.clone();
        let plain_known = |p: &PathBuf| {
            let known = self.files.as_ref().is_some_and(|f| f.all().any(|x| x == p)) || self.inputs.contains(&root.join(p));
            known && fs_err::symlink_metadata(root.join(p)).is_ok_and(|m| m.file_type().is_file())
        };
        if config_changed || !rel.iter().all(plain_known) {
            self.files = None;
        }
        // The common case of `watch`: model files (or modules they reach) edited in place.
        let mut evaluated = Vec::new();
        if !config_changed
            && !rel.is_empty()
            && let Some(r) = self.reload_in_place(&rel, &mut evaluated)
        {
            return Ok(r);
        }
        // The previous project is compared with the new one, not copied: `load_all` replaces it.
        // After failed loads, the last one that succeeded is: a model is changed by what changed
        // it since then, not by the failure in between (`watch` would otherwise list, and
        // preview, every model whose version a parent's edit moved).
        // The files an attempt in place evaluated are in the load cache: evaluated all the same.
        let before = match std::mem::replace(&mut self.project, Err(LoadErrors(Vec::new()))) {
            Ok(p) => Some(p.dag),
            Err(_) => self.last_good.take(),
        };
        evaluated.extend(self.load_all());
        evaluated.sort();
        evaluated.dedup();
        let mut changed_models = BTreeSet::new();
        match &self.project {
            Ok(p) => {
                for m in p.dag.models() {
                    if before.as_ref().and_then(|b| b.get(&m.name)) != Some(m) {
                        changed_models.insert(m.name.clone());
                    }
                }
                for m in before.iter().flat_map(|b| b.models()) {
                    if p.dag.get(&m.name).is_none() {
                        changed_models.insert(m.name.clone());
                    }
                }
            }
            Err(_) => self.last_good = before,
        }
        Ok(Reload { config_changed, evaluated, changed_models, in_place: false })
    }

    /// [`Session::reload`] of `rel` (relative, already forgotten by the load cache) without a
    /// full load, when it can be proven equal to one: the project loaded, the discovered files
    /// are kept (no path appeared, vanished or changed type), every model of the project is
    /// located in the top-level model file that defines it, and the loader re-evaluated only the
    /// files the change reaches ([`crate::script::loader::reevaluate`], which states its own
    /// conditions). Their models must keep their names, parents and exposed columns, and pass
    /// every check the full load runs, on them and on every model they can concern: the load's
    /// checks of each model ([`crate::project::model_checks`]) and the DAG's
    /// ([`crate::core::Dag::try_replace`]); they are put in place in the DAG. `None` when any
    /// condition fails or a check finds anything: the caller loads in full, which reports it
    /// (the load cache then holds what was evaluated). So a reload in place never accepts a
    /// project a load from scratch refuses (SPEC §4, invariant 37).
    /// The files it evaluated before finding it cannot are added to `attempted`.
    fn reload_in_place(&mut self, rel: &[PathBuf], attempted: &mut Vec<PathBuf>) -> Option<Reload> {
        let files = self.files.as_ref()?;
        let project = self.project.as_ref().ok()?;
        let top: std::collections::HashSet<&Path> = files.models.iter().map(PathBuf::as_path).collect();
        if !project.dag.models().all(|m| top.contains(m.location.file.as_path())) {
            return None;
        }
        let cache = self.cache.as_mut()?;
        let re = match crate::script::loader::reevaluate(&self.config, files, rel, cache) {
            Ok(re) => re,
            Err(evaluated) => {
                tracing::debug!(
                    "reload: in full (the loader cannot re-evaluate these files alone: a file requires another model file, fails, or is reached by another)"
                );
                attempted.extend(evaluated);
                return None;
            }
        };
        let evaluated: Vec<PathBuf> = re.files.iter().map(|(f, _)| f.clone()).collect();
        let in_evaluated: std::collections::HashSet<&Path> = evaluated.iter().map(PathBuf::as_path).collect();
        let before: BTreeSet<&ModelName> = project.dag.models().filter(|m| in_evaluated.contains(m.location.file.as_path())).map(|m| &m.name).collect();
        let mut models: Vec<crate::core::Model> = re.files.into_iter().flat_map(|(_, ms)| ms).collect();
        let after: BTreeSet<&ModelName> = models.iter().map(|m| &m.name).collect();
        if after.len() != models.len() || after != before {
            tracing::debug!("reload: in full (the evaluated files define other models)");
            attempted.extend(evaluated);
            return None;
        }
        drop((after, before, in_evaluated));
        // As a full load ends (`cols()` expanded from the parents' columns, seeds hashed, storage
        // targets configured), over these models and the project's others.
        let columns = |n: &ModelName| -> Option<Vec<String>> {
            models.iter().find(|m| m.name == *n).or_else(|| project.dag.get(n)).map(|m| m.relation_columns().into_iter().map(|c| c.name).collect())
        };
        let expanded: Vec<Vec<(usize, Vec<String>)>> = models
            .iter()
            .map(|m| {
                let nodes = m.body.as_ref().map(|b| b.nodes.as_slice()).unwrap_or_default();
                nodes
                    .iter()
                    .enumerate()
                    .filter_map(|(i, n)| match n {
                        crate::core::fragment::Node::Cols(c) if c.columns.is_empty() => columns(&c.parent).map(|cols| (i, cols)),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        for (m, fills) in models.iter_mut().zip(expanded) {
            let Some(body) = m.body.as_mut() else { continue };
            for (i, cols) in fills {
                if let crate::core::fragment::Node::Cols(c) = &mut body.nodes[i] {
                    c.columns = cols;
                }
            }
        }
        if !crate::seed::hash_seed_files(&self.config.root, &mut models).is_empty() {
            tracing::debug!("reload: in full (a seed to report)");
            attempted.extend(evaluated);
            return None;
        }
        // An external's relation decides which names no query may read (`bare_model_reads`
        // leaves out an external reading the relation of its own name): every query is checked
        // again by a full load when one changes.
        let external = |m: &crate::core::Model| matches!(m.kind, crate::core::Kind::External(_));
        if models.iter().any(|m| project.dag.get(&m.name).is_some_and(|old| old.kind != m.kind && (external(old) || external(m)))) {
            tracing::debug!("reload: in full (an external's relation changed)");
            attempted.extend(evaluated);
            return None;
        }
        // The full load's checks of each model (reserved schemas, pre/post statements, models
        // read by name, storage targets): the same function, on the models replaced.
        if !crate::project::model_checks(&self.config, &project.dag, &models.iter().collect::<Vec<_>>()).is_empty() {
            tracing::debug!("reload: in full (a model fails a check of the load)");
            attempted.extend(evaluated);
            return None;
        }
        let changed_models: BTreeSet<ModelName> = models.iter().filter(|m| project.dag.get(&m.name) != Some(*m)).map(|m| m.name.clone()).collect();
        let seeds: Vec<(PathBuf, [u8; 32])> = models
            .iter()
            .filter_map(|m| match &m.kind {
                crate::core::Kind::Seed(s) => {
                    Some((crate::seed::resolve(&self.config.root, &s.path), *blake3::Hash::from_hex(&s.content_hash).ok()?.as_bytes()))
                }
                _ => None,
            })
            .collect();
        let project = self.project.as_mut().ok()?;
        if project.dag.try_replace(models).is_err() {
            tracing::debug!("reload: in full (a model's references or columns changed, or a check of the DAG fails)");
            attempted.extend(evaluated);
            return None;
        }
        // The project cache's key, brought up to date the same way (it may keep an input the
        // evaluated files no longer read: that only makes it stricter).
        // The key of the project before this reload (a stored key that is not, after a load
        // whose key was unknown, is no base).
        let base = self.loaded_key.take().or_else(|| self.stored_key.clone().filter(|_| self.stored_current));
        self.stored_current = false;
        self.loaded_key = base.and_then(|k| k.patched(&self.config.root, &re.hashes, &re.probes, &seeds));
        for p in re.hashes.keys() {
            self.inputs.insert(self.config.root.join(p));
        }
        self.inputs.extend(seeds.into_iter().map(|(p, _)| p));
        Some(Reload { config_changed: false, evaluated, changed_models, in_place: true })
    }

    fn absolute(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.config.root.join(p) }
    }

    /// Loads the project through the session's load cache (saved by [`Session::save_caches`]);
    /// returns the files evaluated.
    fn load_all(&mut self) -> Vec<PathBuf> {
        self.load_cache();
        let cache = self.cache.as_mut().expect("opened above");
        let (project, report) = match self.files.take() {
            Some(files) => Project::load_files(&self.config, files, cache),
            None => Project::load_with(&self.config, cache),
        };
        self.files = (report.files != Discovered::default() || project.is_ok()).then(|| report.files.clone());
        self.stored_current = false;
        self.loaded_key = project.as_ref().ok().and_then(|p| project_cache::key_of(&self.config, p, &report));
        self.project = project;
        let mut inputs = report.inputs;
        inputs.insert(self.config.path.clone());
        let before = std::mem::replace(&mut self.inputs, inputs);
        if self.project.is_ok() {
            self.kept.clear();
        } else if self.kept.is_empty() {
            self.kept = before;
        } else {
            self.kept.extend(before);
        }
        report.evaluated
    }

    /// Opens the state store for reading (an empty in-memory stand-in when the project has
    /// none yet), undoing an interrupted promotion first: [`open_state`].
    ///
    /// # Errors
    /// The project does not load; the store cannot be opened; an interrupted promotion cannot be undone.
    pub fn state(&self) -> Result<Box<dyn StateStore>> {
        open_state(self.loaded()?, false)
    }

    /// Plans `env` against the state store, checked against the engine's catalog: [`plan_checked`].
    /// Fingerprints are kept from one plan to the next ([`plan::VersionMemo`]): after a reload,
    /// only models whose definition or ancestors changed are fingerprinted again.
    ///
    /// # Errors
    /// The project does not load; the state store or the planner fails.
    pub fn plan(&self, env: &str, now: Millis, options: &plan::Options) -> Result<Plan> {
        let project = self.loaded()?;
        let mut versions = self.versions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The store's identity before it is opened: a store replaced after this (a new file at
        // the path) is then found with another identity by the next plan, never the reverse.
        // By `stat` alone, never by opening the file: closing a descriptor of the store in this
        // process would release the POSIX locks SQLite holds on it for any open connection.
        let path = project.config.state_file();
        // A Postgres store has no file to identify it: nothing is reused then (`None`).
        versions.set_store_identity(path.and_then(|path| crate::engine::record::path_stat(&path)).map(|stat| format!("store {stat}")));
        let state = open_state(project, false)?;
        // The store's engine epoch before the catalog ([`plan::integrity::Observed`]).
        let epoch = state.engine_epoch()?;
        // The identity the catalog is exactly valid for is what the plan memo keys on.
        let (catalog, catalog_id) = engine_catalog_identified(project)?;
        versions.set_catalog_identity(catalog_id);
        let observed = catalog.as_deref().map(|c| plan::integrity::Observed::new(c, epoch));
        plan_checked_in(project, &*state, env, now, options, Some(&mut versions), observed)
    }

    /// Applies `plan` (from [`Session::plan`]): opens the store on disk (creating it) and the
    /// engine for the duration of the apply ([`apply_recorded`]).
    ///
    /// # Errors
    /// As [`apply::apply`]; a stale plan is refused; the environment's lock is held by another
    /// live process.
    pub fn apply(&self, plan: &Plan, options: &apply::Options) -> Result<ApplyReport> {
        use crate::state::lease::{LeaseGuard, Refused, writer_lease};
        let project = self.loaded()?;
        let state = open_state(project, true)?;
        // Under the environment's lock, like `efmesh apply` (SPEC §4, invariant 30): in a
        // project with a lake, the one lock `lake` of every environment.
        let lock = writer_lease(&plan.env, project.config.writes_a_lake());
        let guard = match LeaseGuard::acquire(&*state, &lock, &format!("efmesh watch {} --apply", plan.env), std::time::Duration::ZERO) {
            Ok(g) => g,
            Err(Refused::Held(r)) => anyhow::bail!("environment `{}` is locked: `{lock}` is held by {}; nothing was done", plan.env, r.holder),
            Err(Refused::State(e)) => return Err(e.into()),
        };
        let result = recover_promotions(project, &*state).and_then(|()| apply_recorded(project, plan, &*state, options));
        guard.release(&*state);
        result
    }

    /// Opens the engine for writing (held until dropped).
    ///
    /// # Errors
    /// The engine file cannot be opened (e.g. another process holds it).
    pub fn open_engine(&self) -> Result<Box<dyn crate::engine::Engine + Send>> {
        Ok(crate::engine::open(&self.config, crate::engine::Access::ReadWrite)?)
    }
}

/// Opens the state store for reading. A project that has no store yet gets an empty in-memory
/// stand-in, so `plan` (and an apply that ends up not applying) never creates files. Never
/// write to what this returns: writers take [`writable_state`]. Every command that reads an
/// environment opens the store here, so an interrupted promotion is undone first
/// ([`recover_promotions`]).
///
/// # Errors
/// The store cannot be opened; an interrupted promotion cannot be undone.
pub fn open_state(project: &Project, create: bool) -> Result<Box<dyn StateStore>> {
    // The error names the store already (a file, or a Postgres URL without its password).
    let state = if create { Some(crate::state::open(&project.config)?) } else { crate::state::open_existing(&project.config)? };
    let Some(state) = state else {
        return Ok(Box::new(SqliteStore::open_in_memory()?));
    };
    recover_promotions(project, &*state)?;
    Ok(state)
}

/// Opens the state store to read its records alone, never an environment's views (`diff`
/// without `--data`): as [`open_state`], but an interrupted promotion is left for the next
/// command that reads views to undo, so no engine is opened. The pointers then name what the
/// environment served before that promotion, while its views may already serve the versions it
/// was promoting to: a caller reads [`StateStore::pending_promotions`] to say so (`diff`).
///
/// # Errors
/// The store cannot be opened.
pub fn open_state_records(project: &Project) -> Result<Box<dyn StateStore>> {
    let Some(state) = crate::state::open_existing(&project.config)? else {
        return Ok(Box::new(SqliteStore::open_in_memory()?));
    };
    Ok(state)
}

/// Undoes any promotion the store records as under way but never completed (a crash, `kill -9`
/// or a failed state write between moving the views and recording the pointers), so the
/// command sees views and pointers that agree: [`apply::recover_promotions`]. Opens the engine
/// only when there is one to undo.
/// [`recover_promotions`] for a command that just took an environment's lock (the promotion
/// of that environment under way, if any, is an interrupted one now).
///
/// # Errors
/// As [`open_state`].
pub fn recover_interrupted(project: &Project, state: &dyn StateStore) -> Result<()> {
    recover_promotions(project, state)
}

fn recover_promotions(project: &Project, state: &dyn StateStore) -> Result<()> {
    if state.pending_promotions()?.is_empty() {
        return Ok(());
    }
    // Undoing a promotion takes its environment's lock first (on a handle of its own, so the
    // caller's fence stays as it is): a live holder keeps its promotion; a stale one is
    // reclaimed, so that holder, should it resume, fails with `LeaseLost` (SPEC §4 invariant 30).
    let handle = state.reopen()?;
    let guards = crate::state::lease::take_for_recovery(state, &*handle, project.config.writes_a_lake())?;
    let result = undo_promotions(project, state);
    for g in guards {
        g.release(&*handle);
    }
    result
}

fn undo_promotions(project: &Project, state: &dyn StateStore) -> Result<()> {
    let pending = crate::state::lease::interrupted_promotions(state, project.config.writes_a_lake())?;
    if pending.is_empty() {
        return Ok(());
    }
    let envs: Vec<String> = pending.iter().map(|p| format!("`{}`", p.env)).collect();
    let mut engine = crate::engine::open(&project.config, crate::engine::Access::ReadWrite).with_context(|| {
        format!(
            "the state store records a promotion of {} as under way (in another efmesh process, or interrupted); undoing it needs the engine\n  hint: retry once the other process is done",
            envs.join(", ")
        )
    })?;
    apply::recover_promotions(project, state, &mut *engine).context("undoing an interrupted promotion")?;
    Ok(())
}

/// The engine's catalog as `plan` sees it: the DuckDB file opened read-only for one catalog query
/// (no file: an empty catalog, everything the state relies on is missing), or the catalog efmesh
/// recorded when it last read the file, if the file's identity has not changed since
/// ([`crate::engine::record`], SPEC §4 invariant 27). `None`, with a warning, when another
/// process is writing the file (it holds DuckDB's lock): the plan then assumes the relations
/// exist, and `apply` checks again on its own connection.
///
/// # Errors
/// The file is there but DuckDB cannot read it for any other reason (corrupt, not a DuckDB file,
/// written by a newer DuckDB, unreadable), or a server engine (Postgres) cannot be reached or
/// read (server down, no such database or role, refused login): no plan assumes anything of an
/// engine it cannot read — `plan` and `status` fail, naming the cause.
pub fn engine_catalog(project: &Project) -> Result<Option<std::sync::Arc<crate::engine::Catalog>>> {
    Ok(engine_catalog_identified(project)?.0)
}

/// [`engine_catalog`], with the identity of the engine file it is exactly valid for (`absent
/// <path>` when there is no file; `None` when unknown: a server engine, or a file that changed
/// while it was read).
#[allow(clippy::type_complexity)]
fn engine_catalog_identified(project: &Project) -> Result<(Option<std::sync::Arc<crate::engine::Catalog>>, Option<String>)> {
    if let Some(path) = project.config.engine_file().filter(|path| !path.exists()) {
        return Ok((Some(Default::default()), Some(format!("absent {}", path.display()))));
    }
    match read_engine_catalog(project) {
        Ok((catalog, id)) => Ok((Some(catalog), id)),
        // A file DuckDB cannot read (corrupt, not a DuckDB file at all, written by a newer
        // DuckDB, unreadable), like a server engine that cannot be reached or read (down, its
        // database dropped, its role missing), serves nothing: a plan assuming its relations
        // exist would say "no changes" (and `status --check` "healthy") over views no one can
        // read. Only a file another process is writing (its lock held) is assumed as the state
        // store says, for `apply` to check on its own connection.
        Err(e) if crate::engine::is_corrupt_file(&e.message) || project.config.engine_file().is_none() || !crate::engine::is_locked_file(&e.message) => {
            Err(e.into())
        }
        Err(e) => {
            // The hint of the open failure (run again, `--retries`) is for a command that fails:
            // this one goes on, so the warning gives the cause alone.
            tracing::warn!(
                "cannot read the engine catalog, so this plan assumes every relation it relies on exists: {}",
                crate::engine::split_hint(&e.message).0
            );
            Ok((None, None))
        }
    }
}

/// The engine's catalog through its record ([`crate::engine::record::read_through`]): the
/// recorded catalog while the DuckDB file is unchanged, else one read-only catalog query
/// (recorded when the file did not change meanwhile); with the file's identity, as
/// [`engine_catalog_identified`] gives it.
#[allow(clippy::type_complexity)]
fn read_engine_catalog(project: &Project) -> Result<(std::sync::Arc<crate::engine::Catalog>, Option<String>), crate::engine::EngineError> {
    let Some(path) = project.config.engine_file() else { return query_catalog(project).map(|c| (std::sync::Arc::new(c), None)) };
    let record = crate::engine::record::path_for(&project.config.state_path());
    let (catalog, id) = crate::engine::record::read_through(&record, &path, || query_catalog(project))?;
    Ok((catalog, id.map(|id| format!("{} {id}", path.display()))))
}

/// One catalog query on the engine opened for it alone ([`crate::engine::Access::Catalog`]).
fn query_catalog(project: &Project) -> Result<crate::engine::Catalog, crate::engine::EngineError> {
    crate::engine::open(&project.config, crate::engine::Access::Catalog).and_then(|mut db| db.catalog())
}

/// Applies `plan` to the store `state` (on disk) with the engine opened for the apply alone, then
/// records the catalog as the apply left it, read on the apply's own connection
/// ([`record_catalog_and_close`]; failing that, by opening the closed file read-only), so the
/// next plan finds it recorded rather than opening DuckDB (SPEC §4, invariant 27); a catalog
/// that cannot be read is only logged (debug): the next plan queries it.
///
/// # Errors
/// The engine cannot be opened; as [`apply::apply`].
pub fn apply_recorded(project: &Project, plan: &Plan, state: &dyn StateStore, options: &apply::Options) -> Result<ApplyReport> {
    // Test hook: the window between the plan and the apply's intents (the janitor's race test).
    apply::fault::delay_point("apply-after-plan");
    let (mut engine, catalog_at_open) = open_for_writing(project)?;
    let options = apply::Options { catalog_at_open, ..options.clone() };
    let report = apply::apply(project, plan, state, &mut *engine, &options)?;
    close_recorded(project, engine);
    Ok(report)
}

/// Opens the engine for writing (`apply`, `run`), with the catalog this process read for its
/// plan when it is proven still the file's own once the connection holds the file: the file's
/// stat identity is taken first, then its full identity (header included) must be the one the
/// catalog was read at, and the stat identity taken again after the open must equal the first
/// — a write anywhere in between (before the full identity included) moves it. The caller's
/// connection then need not query the catalog again (SPEC §4, invariant 27).
///
/// # Errors
/// The engine cannot be opened.
pub(crate) fn open_for_writing(project: &Project) -> Result<(Box<dyn crate::engine::Engine + Send>, Option<apply::ProvenCatalog>)> {
    let proven = project.config.engine_file().and_then(|path| {
        let stat = crate::engine::record::stat_identity(&path)?;
        let catalog = crate::engine::record::recall(&path, &crate::engine::record::identity(&path)?)?;
        Some(apply::ProvenCatalog::new(catalog, path, stat))
    });
    // Test hook: the window between that proof and the open.
    apply::fault::delay_point("apply-before-open");
    let engine = crate::engine::open(&project.config, crate::engine::Access::ReadWrite)?;
    let catalog_at_open = proven.filter(apply::ProvenCatalog::still_current);
    if catalog_at_open.is_some() {
        tracing::debug!("engine catalog at the open: as this process read it for the plan (the file is unchanged since)");
    }
    Ok((engine, catalog_at_open))
}

/// After `apply` or `run` wrote through `engine`: records the catalog as the command left it,
/// read on its own database ([`record_catalog_and_close`]; failing that, by opening the closed
/// file read-only), so the next plan finds it recorded rather than opening DuckDB (SPEC §4,
/// invariant 27); a catalog that cannot be read is only logged (debug): the next plan queries
/// it. A server engine's catalog is read by every plan: nothing to record.
pub(crate) fn close_recorded(project: &Project, engine: Box<dyn crate::engine::Engine + Send>) {
    if project.config.engine_file().is_none() {
        return;
    }
    if !record_catalog_and_close(project, engine)
        && let Err(e) = read_engine_catalog(project)
    {
        tracing::debug!("engine catalog not recorded after the write: {}", e.message);
    }
}

/// Records the catalog of the engine file as `engine` (the apply's own read-write connection)
/// sees it, then closes it: a `CHECKPOINT`, so the file holds everything, while a second
/// connection of the database queries the catalog; then the file's stat identity (stat only:
/// opening and closing the file while the connection holds it would release DuckDB's lock, see
/// [`crate::engine::record::stat_identity`]); after the connection closed, the full identity
/// (with the header) and the stat identity once more. The record is written, at that full
/// identity, only when the two stat identities agree: the close wrote nothing (the checkpoint
/// left nothing to write) and no other process wrote meanwhile. Saves the next plan, and this
/// process, a second open of the file. `false` (nothing recorded) when any step fails or the
/// identity moved: the caller reads the catalog the ordinary way.
fn record_catalog_and_close(project: &Project, mut engine: Box<dyn crate::engine::Engine + Send>) -> bool {
    use crate::engine::record::{identity, stat_identity};
    let path = project.config.engine_path();
    let record = crate::engine::record::path_for(&project.config.state_path());
    let read = (|| {
        // The catalog is read on a second connection of the database while this one runs the
        // `CHECKPOINT` (a read does not hold the checkpoint back; DuckDB runs both at once):
        // it is the catalog as the apply committed it, which nothing changes before the close —
        // no statement of this process writes in between, and DuckDB's lock keeps every other
        // process out — and the checkpoint writes it to the file. Without a second connection,
        // one after the other.
        let catalog = std::thread::scope(|scope| {
            let dispatch = tracing::dispatcher::get_default(Clone::clone);
            let read = engine.worker().and_then(|mut worker| {
                std::thread::Builder::new()
                    .name("efmesh-catalog".into())
                    .spawn_scoped(scope, move || tracing::dispatcher::with_default(&dispatch, || worker.catalog()))
                    .ok()
            });
            let checkpointed = engine.checkpoint();
            match read {
                Some(read) => checkpointed.ok().and(read.join().ok().and_then(Result::ok)),
                // No second connection (or no thread for it): one after the other.
                None => checkpointed.ok().and_then(|()| engine.catalog().ok()),
            }
        })?;
        Some((stat_identity(&path)?, catalog))
    })();
    tracing::debug!("engine catalog read on the apply's database; closing its connections");
    // Test hook: the window in which the connection still holds the file (its lock must hold).
    apply::fault::delay_point("apply-before-close");
    drop(engine);
    let Some((before, catalog)) = read else { return false };
    // No connection of this process holds the file now: reading its header is harmless.
    let full = identity(&path);
    let (Some(full), true) = (full, stat_identity(&path).as_ref() == Some(&before)) else {
        tracing::debug!("engine catalog of `{}` read on the apply's connection; not recorded: the file changed when it closed", path.display());
        return false;
    };
    match crate::engine::record::write(&record, &path, &full, &catalog) {
        Ok(()) => {
            tracing::debug!("engine catalog of `{}` read on the apply's connection and recorded in {}", path.display(), record.display());
            true
        }
        Err(e) => {
            tracing::debug!("engine catalog of `{}` read on the apply's connection; not recorded: {e}", path.display());
            false
        }
    }
}

/// Plans `env` and checks the plan against the engine's catalog ([`plan::integrity`]); warns on
/// stderr, naming each relation, when the engine lacks what the state relies on.
///
/// # Errors
/// The planner fails.
pub fn plan_checked(project: &Project, state: &dyn StateStore, env: &str, now: Millis, options: &plan::Options) -> Result<Plan> {
    plan_checked_with(project, state, env, now, options, None)
}

/// [`plan_checked`] taking fingerprints from `versions` when given ([`plan::plan_with_memo`]).
///
/// Without `versions`, a plan whose check found something to repair is planned again while a
/// promotion of `env` (another process's `apply`) moved the environment's views between the
/// pointers the plan read and the catalog it checked ([`plan::integrity::ViewsMark`]): at most
/// [`STEADY_READS`] plans, a moment apart; the views it saw moving are not taken for damage
/// once they agree. Still moving after that, the last plan is returned with a warning saying
/// what it repairs may be that promotion's doing.
///
/// # Errors
/// The planner fails.
pub fn plan_checked_with(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &plan::Options,
    versions: Option<&mut plan::VersionMemo>,
) -> Result<Plan> {
    if versions.is_some() {
        let epoch = state.engine_epoch()?;
        let catalog = engine_catalog(project)?;
        return plan_checked_in(project, state, env, now, options, versions, catalog.as_deref().map(|c| plan::integrity::Observed::new(c, epoch)));
    }
    let mut reads = 1;
    loop {
        let plan = plan_checked_quiet(project, state, env, now, options)?;
        let repairs = plan::integrity::describe(project, &plan);
        if repairs.is_empty() {
            return Ok(plan);
        }
        // Only a plan that found something reads the environment's promotions again (two state
        // reads): the pointers it was planned against and none under way, before its catalog
        // read and after it, mean no view of `env` moved in between.
        let after = plan::integrity::ViewsMark::read(state, env)?;
        if plan::integrity::ViewsMark::of_plan(&plan).steady(&after) {
            warn_repairs(project, env, &repairs);
            return Ok(plan);
        }
        if reads >= STEADY_READS {
            tracing::warn!(
                env = %env,
                "a promotion of `{env}` moved its views while they were read ({reads} plans): what the warning below repairs may be that \
                 promotion's doing, not damage; plan again once it is done"
            );
            warn_repairs(project, env, &repairs);
            return Ok(plan);
        }
        tracing::debug!(env = %env, reads, "a promotion of `{env}` moved its views while this plan read them: planning again");
        std::thread::sleep(steady_pause(reads));
        reads += 1;
    }
}

/// How many times a check that found an environment's views disagreeing with its pointers reads
/// them again while a promotion of the environment moves them ([`plan_checked_with`], `status
/// --check`).
pub const STEADY_READS: u32 = 4;

/// The pause before read `reads + 1` of [`STEADY_READS`]: 50 ms, 100 ms, 200 ms (a promotion's
/// view swap and its record are milliseconds apart, unless the swap waits for readers of the
/// views).
pub fn steady_pause(reads: u32) -> std::time::Duration {
    std::time::Duration::from_millis(50u64 << reads.saturating_sub(1).min(4))
}

/// Prints the warning of a plan of `env` that found the engine lacking what the environment
/// relies on: `repairs` ([`plan::integrity::describe`]), one relation a line. A report for the
/// person at the terminal (it names relations across several lines), printed like
/// `error:`/`hint:`, not a log event.
pub fn warn_repairs(project: &Project, env: &str, repairs: &[String]) {
    crate::ewriteln!(
        "warning: the engine `{}` does not hold everything environment `{env}` relies on (was the file deleted, replaced or edited, or the project moved?):\n  {}",
        crate::engine::location(&project.config),
        repairs.join("\n  ")
    );
}

/// [`plan_checked_with`] without `versions`, once, saying nothing of what it repairs (the
/// caller does: [`warn_repairs`]): the plan, its rebuild marks, its check against the engine's
/// catalog (skipped for a replayed no-op plan found clean at the same state and engine file
/// before) and the DuckLake files.
///
/// # Errors
/// The planner fails.
pub fn plan_checked_quiet(project: &Project, state: &dyn StateStore, env: &str, now: Millis, options: &plan::Options) -> Result<Plan> {
    let mut plan = plan::plan_unmarked(project, state, env, now, options, None)?;
    // A no-op plan replayed from the memo, found with nothing to rebuild and checked clean
    // against this very engine file before: the same marks and the same check with the same
    // inputs (SPEC §4 invariants 38 and 40).
    let engine = project.config.engine_path();
    let token = match (plan.from_memo, plan.generation) {
        (true, Some(generation)) => {
            let store = store_identity(project, state).zip(others_pointers_digest(state, env)).map(|(id, others)| format!("{id} {others}"));
            project
                .config
                .engine_file()
                .and_then(|_| engine_file_identity(&engine))
                .zip(store)
                .map(|(id, store)| (plan_check_token(project, env, generation, &format!("{id} {}", lake_identity(project, &plan)), &store), id))
        }
        _ => None,
    };
    let record = plan_check_path(project);
    if let Some((t, _)) = &token
        && fs_err::read_to_string(&record).is_ok_and(|s| s.trim_end() == t)
    {
        if std::env::var_os(plan::memo::VERIFY_ENV).is_some_and(|v| v == "1") {
            let has_changes = plan.has_changes;
            plan::mark_rebuilds(project, state, &mut plan)?;
            assert!(plan.actions.iter().all(|a| !a.rebuild) && plan.has_changes == has_changes, "the plan-check token of `{env}` hid a rebuild");
        }
        tracing::debug!("rebuild marks and engine check skipped: {} says this replayed plan was found clean at this state and engine file", record.display());
        return Ok(plan);
    }
    plan::mark_rebuilds(project, state, &mut plan)?;
    let nothing_marked = plan.actions.iter().all(|a| !a.rebuild);
    // The store's engine epoch first, then the catalog ([`plan::integrity::Observed`]).
    let epoch = state.engine_epoch()?;
    let catalog = engine_catalog(project)?;
    // Test hook: the window between the catalog read and its check (a writer stamping and
    // recording a later epoch there must not make the database look behind).
    apply::fault::delay_point("plan-after-catalog");
    if let Some(catalog) = &catalog {
        plan::integrity::check(project, state, &mut plan, plan::integrity::Observed::new(catalog, epoch))?;
    }
    check_ducklake_files(project, state, &mut plan)?;
    if let (Some((t, id)), Some(_), true) = (&token, &catalog, nothing_marked)
        && plan::integrity::describe(project, &plan).is_empty()
        && engine_file_identity(&engine).as_ref() == Some(id)
        && let Err(e) = write_plan_check(&record, t)
    {
        tracing::debug!("cannot write {}: {e}", record.display());
    }
    Ok(plan)
}

/// The identity of the state store `state` was opened from: its `store_id` and the file's
/// device, inode, size, modification and status-change times (a store copied or moved over
/// the file changes them); `None` when either cannot be read (then nothing is skipped).
#[cfg(unix)]
fn store_identity(project: &Project, state: &dyn StateStore) -> Option<String> {
    if state.is_in_memory() {
        return None;
    }
    // A Postgres store has no file whose identity would tell it was replaced: no token then.
    let m = fs_err::metadata(project.config.state_file()?).ok()?;
    let id = state.store_id().ok()?;
    Some(format!("{id} {}", crate::engine::record::file_stat(&m)))
}

/// blake3 (hex) over every environment's pointers but `env`'s, or `None` when they cannot be
/// read (then nothing is skipped). The rebuild marks read other environments' pointers (a table
/// shared with another environment's version, SPEC §4 invariant 36 (e)), and a promotion
/// changes them without moving the store's generation (it keeps other environments' plan
/// memos valid), so the plan-check token must cover them (invariant 40).
fn others_pointers_digest(state: &dyn StateStore, env: &str) -> Option<String> {
    let mut h = blake3::Hasher::new();
    for e in state.environments().ok()?.into_iter().filter(|e| e != env) {
        h.update(format!("env {e}\n").as_bytes());
        for (name, fp) in state.env_pointers(&e).ok()? {
            h.update(format!("{name} {fp}\n").as_bytes());
        }
    }
    Some(h.finalize().to_hex().to_string())
}

/// Without the Unix file identity nothing is skipped: every replayed plan is marked and checked.
#[cfg(not(unix))]
fn store_identity(_project: &Project, _state: &dyn StateStore) -> Option<String> {
    None
}

/// `<state dir>/.efmesh/plan-check`: the token of the last replayed no-op plan found clean by
/// the engine check ([`plan_check_token`]).
fn plan_check_path(project: &Project) -> PathBuf {
    crate::engine::record::path_for(&project.config.state_path()).with_file_name("plan-check")
}

/// The identity of the engine file as the engine-catalog record takes it, or a marker naming
/// its absence; `None` when it cannot be read.
fn engine_file_identity(engine: &Path) -> Option<String> {
    match fs_err::symlink_metadata(engine) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("absent".to_string()),
        _ => crate::engine::record::identity(engine),
    }
}

/// blake3 (hex) over efmesh's version, the plan memo's key of `project` for `env` at
/// `generation` (which fixes every action of the replayed plan), the state store's identity
/// (with the generation, which fixes what the rebuild marks read), the engine's path and the
/// identity of its file (which fixes its catalog, invariant 27).
/// The identity of the local lake's version directories the plan's parquet models are stored
/// in (their status: a file deleted or added by hand changes its directory's times), so a check
/// found clean is not trusted after a lake file went missing (`repair.lakeFilesMissing`); and
/// likewise of the local DuckLake catalog file and of the directories of the plan's DuckLake
/// tables under a local data path (`repair.ducklakeFilesMissing`).
#[cfg(unix)]
fn lake_identity(project: &Project, plan: &Plan) -> String {
    let mut out = String::new();
    let mut ducklake = false;
    for a in &plan.actions {
        let Some(physical) = a.physical.as_deref() else { continue };
        let dir = match project.dag.get(&a.name).map(|m| m.target) {
            Some(crate::core::Target::Parquet) => plan::integrity::local_lake_dir(project, physical),
            Some(crate::core::Target::DuckLake) => {
                ducklake = true;
                apply::ducklake::table_dir(&project.config, physical)
            }
            _ => None,
        };
        let Some(dir) = dir else { continue };
        match fs_err::metadata(&dir) {
            Ok(m) => out.push_str(&crate::engine::record::file_stat(&m)),
            Err(_) => out.push('-'),
        }
        out.push(' ');
    }
    // The DuckLake catalog lists the files: one restored from a copy may list others.
    if let Some(file) = project.config.ducklake_catalog_file().filter(|_| ducklake) {
        match fs_err::metadata(&file) {
            Ok(m) => out.push_str(&crate::engine::record::file_stat(&m)),
            Err(_) => out.push('-'),
        }
    }
    out
}

#[cfg(not(unix))]
fn lake_identity(_project: &Project, _plan: &Plan) -> String {
    // No directory times to trust: the check is never skipped with a lake.
    crate::core::interval::now_millis().to_string()
}

fn plan_check_token(project: &Project, env: &str, generation: i64, engine_identity: &str, store_identity: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(format!("efmesh-plan-check 2 {}\n", env!("CARGO_PKG_VERSION")).as_bytes());
    h.update(plan::memo::key(project, env, generation).as_bytes());
    h.update(format!("\n{store_identity}\n{}\n{engine_identity}", project.config.engine_path().display()).as_bytes());
    h.finalize().to_hex().to_string()
}

/// Writes `token` to `path` (a temporary file renamed over it).
fn write_plan_check(path: &Path, token: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    fs_err::create_dir_all(dir)?;
    let tmp = dir.join(format!(".plan-check.{}.tmp", std::process::id()));
    crate::file::replace(path, &tmp, format!("{token}\n").as_bytes())
}

/// [`plan_checked_with`] against `catalog` (as [`engine_catalog`] gives it).
fn plan_checked_in(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &plan::Options,
    versions: Option<&mut plan::VersionMemo>,
    catalog: Option<plan::integrity::Observed<'_>>,
) -> Result<Plan> {
    let mut plan = plan::plan_verified_with(project, state, env, now, options, catalog, versions)?;
    check_ducklake_files(project, state, &mut plan)?;
    let repairs = plan::integrity::describe(project, &plan);
    if !repairs.is_empty() {
        warn_repairs(project, env, &repairs);
    }
    Ok(plan)
}

/// Checks the DuckLake tables `plan` relies on for data files missing from the local data path
/// ([`apply::ducklake::lost_files`]; DuckLake's catalog is not the engine's, which
/// [`plan::integrity::check`] reads) and turns what it finds into work of the plan
/// ([`plan::integrity::ducklake_files_lost`]: such a table is rebuilt). A catalog that cannot be
/// read is warned about (another process holding it, say), or, refused as configured (its data
/// path edited), only logged: `apply` and `run` refuse it, and check the files again on their own
/// connection before writing ([`apply::ducklake::prepare_checked`]).
///
/// # Errors
/// The state store's reads.
fn check_ducklake_files(project: &Project, state: &dyn StateStore, plan: &mut Plan) -> Result<()> {
    match apply::ducklake::lost_files(project, plan) {
        Ok(lost) => plan::integrity::ducklake_files_lost(project, state, plan, &lost)?,
        Err(e) if e.contains(apply::ducklake::DATA_PATH_MISMATCH) => tracing::debug!("DuckLake data files not checked: {e}"),
        Err(e) => tracing::warn!("cannot read the DuckLake catalog's data files, so the plan assumes they are there (`apply` and `run` check them again): {e}"),
    }
    Ok(())
}

/// The store a command writes to, given the one its plan was read from: always the file on
/// disk. When the plan was read from the empty stand-in, the file is opened now, or created
/// (SQLite's create flag, the layout written under the write lock, so two processes creating it
/// at once get one store). Another process may have created and written it since the plan was
/// read: the plan's generation then differs and `apply`/`run` refuse the stale plan, so state is
/// never written anywhere else and nothing is reported that was not recorded.
///
/// # Errors
/// The store cannot be opened or created.
pub fn writable_state(project: &Project, planned: Box<dyn StateStore>) -> Result<Box<dyn StateStore>> {
    if planned.is_in_memory() { open_state(project, true) } else { Ok(planned) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::loader::tests::write;

    fn model(name: &str, prelude: &str, select: &str) -> String {
        format!("{prelude}\ndefine_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = {select} }}\n")
    }

    fn names(v: &[&str]) -> BTreeSet<ModelName> {
        v.iter().map(|n| ModelName::parse(n).unwrap()).collect()
    }

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn reload_evaluates_the_changed_files_and_their_importers_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\n");
        write(root, "lib/util.lua", "return { n = 1 }\n");
        write(root, "models/a.lua", &model("s.a", "local u = require(\"lib.util\")", "\"SELECT \" .. u.n .. \" AS x\""));
        write(root, "models/b.lua", &model("s.b", "", "\"SELECT 2 AS x\""));
        write(root, "models/c.lua", &model("s.c", "", "\"SELECT x FROM \" .. ref(\"s.b\")"));
        let mut s = Session::open(&root.join("efmesh.toml")).unwrap();
        assert_eq!(s.project().unwrap().dag.len(), 3);
        for f in ["efmesh.toml", "lib/util.lua", "models/a.lua", "models/b.lua", "models/c.lua"] {
            assert!(s.inputs().contains(&root.join(f)), "{f} is an input: {:?}", s.inputs());
        }

        // Nothing changed: nothing evaluated.
        let r = s.reload(&[]).unwrap();
        assert_eq!(r, Reload::default());

        // A model file: only it, and only its model changed.
        write(root, "models/b.lua", &model("s.b", "", "\"SELECT 3 AS x\""));
        let r = s.reload(&[root.join("models/b.lua")]).unwrap();
        assert_eq!(r.evaluated, paths(&["models/b.lua"]));
        assert_eq!(r.changed_models, names(&["s.b"]));
        assert!(!r.config_changed);

        // A module reached through `require` (relative path given): its importer.
        write(root, "lib/util.lua", "return { n = 9 }\n");
        let r = s.reload(&[PathBuf::from("lib/util.lua")]).unwrap();
        assert_eq!(r.evaluated, paths(&["models/a.lua"]));
        assert_eq!(r.changed_models, names(&["s.a"]));

        // A reformat that changes no model: evaluated, no model changed.
        write(root, "models/a.lua", &format!("\n{}", model("s.a", "local u = require(\"lib.util\")", "\"SELECT \" .. u.n .. \" AS x\"")));
        let r = s.reload(&[root.join("models/a.lua")]).unwrap();
        assert_eq!(r.evaluated, paths(&["models/a.lua"]));
        assert_eq!(r.changed_models, names(&["s.a"]), "the location of s.a changed (one line down), nothing else");

        // A new file and a deleted one.
        write(root, "models/d.lua", &model("s.d", "", "\"SELECT 4 AS x\""));
        std::fs::remove_file(root.join("models/c.lua")).unwrap();
        let r = s.reload(&[root.join("models/d.lua"), root.join("models/c.lua")]).unwrap();
        assert_eq!(r.evaluated, paths(&["models/d.lua"]));
        assert_eq!(r.changed_models, names(&["s.c", "s.d"]));
        assert!(s.project().unwrap().dag.get(&ModelName::parse("s.c").unwrap()).is_none());
        assert!(!s.inputs().contains(&root.join("models/c.lua")));

        // A broken file: the errors, then the fix.
        write(root, "models/d.lua", "define_model {");
        let r = s.reload(&[root.join("models/d.lua")]).unwrap();
        assert_eq!(r.evaluated, paths(&["models/d.lua"]));
        assert!(s.project().is_err());
        write(root, "models/d.lua", &model("s.d", "", "\"SELECT 5 AS x\""));
        let r = s.reload(&[root.join("models/d.lua")]).unwrap();
        assert_eq!(r.evaluated, paths(&["models/d.lua"]));
        assert!(r.changed_models.contains(&ModelName::parse("s.d").unwrap()), "{:?}", r.changed_models);
        assert_eq!(s.project().unwrap().dag.len(), 3);

        // A model whose columns change cannot be replaced in place: the full load that follows
        // finds the file in the load cache, and the reload still names it as evaluated.
        write(
            root,
            "models/b.lua",
            "define_model { name = \"s.b\", kind = kind.full(), schema = { { \"x\", \"integer\" }, { \"y\", \"integer\" } }, query = \"SELECT 3 AS x, 4 AS y\" }\n",
        );
        let r = s.reload(&[root.join("models/b.lua")]).unwrap();
        assert!(!r.in_place);
        assert_eq!(r.evaluated, paths(&["models/b.lua"]));
        assert_eq!(r.changed_models, names(&["s.b"]));

        // The config: read again; its `[project]` section is part of every key.
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\naudits = []\n");
        let r = s.reload(&[root.join("efmesh.toml")]).unwrap();
        assert!(r.config_changed);
        assert_eq!(r.evaluated, paths(&["models/a.lua", "models/b.lua", "models/d.lua"]));
        assert!(r.changed_models.is_empty(), "{:?}", r.changed_models);
    }

    /// A model file that `require`s another model file (the `init` scaffold's shape) is reloaded
    /// in full, and the reload names the file it evaluated (the full load takes it from the cache).
    #[test]
    fn a_reload_in_full_names_the_file_it_evaluated() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\n");
        write(root, "models/raw.lua", &format!("local M = {{}}\nM.a = {}return M\n", model("s.a", "", "\"SELECT 1 AS x\"")));
        let mart = |d: &str| {
            format!(
                "local raw = require(\"raw\")\ndefine_model {{ name = \"s.b\", kind = kind.full(), description = \"{d}\", schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT x FROM \" .. ref(raw.a) }}\n"
            )
        };
        write(root, "models/mart.lua", &mart("one"));
        let mut s = Session::open(&root.join("efmesh.toml")).unwrap();
        assert_eq!(s.project().unwrap().dag.len(), 2);
        write(root, "models/mart.lua", &mart("two"));
        let r = s.reload(&[root.join("models/mart.lua")]).unwrap();
        assert!(!r.in_place, "{r:?}");
        assert_eq!(r.evaluated, paths(&["models/mart.lua"]));
        assert_eq!(r.changed_models, names(&["s.b"]));
    }

    /// A load that fails at discovery (a symlinked folder leading out of the project) reads
    /// next to nothing: the inputs of the last good load stay known ([`Session::kept_inputs`])
    /// until a load succeeds again.
    #[cfg(unix)]
    #[test]
    fn a_failed_load_keeps_the_inputs_of_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\n");
        write(root, "lib/util.lua", "return { n = 1 }\n");
        write(root, "models/a.lua", &model("s.a", "local u = require(\"lib.util\")", "\"SELECT \" .. u.n .. \" AS x\""));
        write(outside.path(), "b.lua", &model("s.b", "", "\"SELECT 2 AS x\""));
        let mut s = Session::open(&root.join("efmesh.toml")).unwrap();
        assert!(s.project().is_ok());
        assert!(s.kept_inputs().is_empty(), "{:?}", s.kept_inputs());

        std::os::unix::fs::symlink(outside.path(), root.join("models/linked")).unwrap();
        s.reload(&[root.join("models/linked")]).unwrap();
        let Err(errors) = s.project() else { panic!("a model file outside the project must fail the load") };
        assert!(format!("{errors:?}").contains("outside the project"), "{errors:?}");
        assert!(s.kept_inputs().contains(&root.join("lib/util.lua")), "{:?}", s.kept_inputs());
        assert!(s.kept_inputs().contains(&root.join("models/a.lua")), "{:?}", s.kept_inputs());

        // Failing again keeps them; loading again forgets them.
        s.reload(&[root.join("lib/util.lua")]).unwrap();
        assert!(s.project().is_err());
        assert!(s.kept_inputs().contains(&root.join("lib/util.lua")), "{:?}", s.kept_inputs());
        fs_err::remove_file(root.join("models/linked")).unwrap();
        s.reload(&[root.join("models/linked")]).unwrap();
        assert!(s.project().is_ok(), "{:?}", s.project().err());
        assert!(s.kept_inputs().is_empty(), "{:?}", s.kept_inputs());
        assert!(s.inputs().contains(&root.join("lib/util.lua")));
    }

    /// After loads that failed, the reload that loads again names the models changed since the
    /// last load that succeeded (edited, added, removed meanwhile), not every model: `watch`
    /// lists and previews these.
    #[test]
    fn a_reload_after_failed_loads_names_the_models_changed_since_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\n");
        write(root, "models/a.lua", &model("s.a", "", "\"SELECT 1 AS x\""));
        write(root, "models/b.lua", &model("s.b", "", "\"SELECT x FROM \" .. ref(\"s.a\")"));
        write(root, "models/c.lua", &model("s.c", "", "\"SELECT 3 AS x\""));
        let mut s = Session::open(&root.join("efmesh.toml")).unwrap();
        assert!(s.project().is_ok(), "{:?}", s.project().err());
        write(root, "models/a.lua", "define_model {\n");
        let r = s.reload(&[root.join("models/a.lua")]).unwrap();
        assert!(s.project().is_err());
        assert!(r.changed_models.is_empty(), "{:?}", r.changed_models);
        fs_err::remove_file(root.join("models/c.lua")).unwrap();
        s.reload(&[root.join("models/c.lua")]).unwrap();
        assert!(s.project().is_err());
        write(root, "models/a.lua", &model("s.a", "", "\"SELECT 5 AS x\""));
        let r = s.reload(&[root.join("models/a.lua")]).unwrap();
        assert!(s.project().is_ok(), "{:?}", s.project().err());
        assert_eq!(r.changed_models, names(&["s.a", "s.c"]), "s.b reads s.a but did not change");
        // Loading again, then failing and loading back as it was: nothing changed.
        write(root, "models/b.lua", "define_model {\n");
        s.reload(&[root.join("models/b.lua")]).unwrap();
        assert!(s.project().is_err());
        write(root, "models/b.lua", &model("s.b", "", "\"SELECT x FROM \" .. ref(\"s.a\")"));
        let r = s.reload(&[root.join("models/b.lua")]).unwrap();
        assert!(r.changed_models.is_empty(), "{:?}", r.changed_models);
    }

    /// A reload whose configuration no longer parses still forgets the changed paths: the next
    /// reload (config fixed, nothing else named) sees the model edited meanwhile.
    #[test]
    fn a_reload_with_a_broken_config_still_forgets_the_changed_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\n");
        write(root, "models/a.lua", &model("s.a", "", "\"SELECT 1 AS x\""));
        let mut s = Session::open(&root.join("efmesh.toml")).unwrap();
        write(root, "efmesh.toml", "[project\n");
        write(root, "models/a.lua", &model("s.a", "", "\"SELECT 2 AS x\""));
        assert!(s.reload(&[root.join("efmesh.toml"), root.join("models/a.lua")]).is_err());
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\"]\n");
        let r = s.reload(&[root.join("efmesh.toml")]).unwrap();
        assert_eq!(r.changed_models, names(&["s.a"]));
        let a = s.project().unwrap().dag.get(&ModelName::parse("s.a").unwrap()).cloned().unwrap();
        assert!(format!("{a:?}").contains("SELECT 2 AS x"), "{a:?}");
    }
}
