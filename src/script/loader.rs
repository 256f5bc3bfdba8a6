//! The loader: evaluates a project's audit, model (and, for `efmesh test`, test) files, each
//! by the host of its language, merges their models, and reports every file it read.
//!
//! # Per-file isolation
//!
//! Each top-level file (a file matched by `project.models`) is evaluated with a fresh module
//! table: what it `require`s / `import`s is evaluated for it (once within that evaluation) and
//! never shared with another top-level file, so a file's result depends only on its own
//! inputs — its content, the content of every file it reached, the audit definition files
//! and the embedded stdlib. Audit definition files (`project.audits`) are evaluated first, and
//! what they define is seen by every model file. Models a required module defines at its top
//! level are seen once per evaluation that reaches it; equal definitions are merged, a real
//! duplicate (same name, different definition or location) stays a load error.
//!
//! # The load cache
//!
//! [`LoadCache`] keeps, per top-level file, what its evaluation produced, under a key covering
//! every input of that evaluation (see [`LoadCache`]); [`load_project`] evaluates only the files
//! whose key changed. Seeds are hashed from their content on every load, never cached.

mod incremental;
pub use incremental::{Reevaluated, reevaluate};

use super::foreign::Foreign;
use super::sandbox::{FileOutcome, idle_errors};
use super::test_spec::TestSpec;
use crate::config::Config;
use crate::core::{LoadError, LoadErrors, Location, Model, ModelName};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The version of the load cache's layout and key recipe: bump it whenever either changes.
pub const CACHE_VERSION: u32 = 2;
/// First bytes of a load cache file.
const MAGIC: &str = "efmesh-load-cache";

/// The files a project loads, relative to the root: audit definition files, then model files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    /// Definition files: those matched by `project.audits` or `project.macros`, sorted.
    pub audits: Vec<PathBuf>,
    /// Files matched by `project.models` and not by `project.audits` / `project.macros`, sorted.
    pub models: Vec<PathBuf>,
}

impl Discovered {
    /// Discovers the audit and model files of `config`'s project.
    ///
    /// # Errors
    /// [`LoadErrors`] for an invalid glob or a file outside the project.
    pub fn of(config: &Config) -> Result<Discovered, LoadErrors> {
        let mut found = super::discover_each(config, &[&config.project.audits, &config.project.macros, &config.project.models])?;
        let models = found.pop().unwrap_or_default();
        let macros = found.pop().unwrap_or_default();
        let mut audits = found.pop().unwrap_or_default();
        // Macro files are definition files like audit files: evaluated first, seen by every
        // model file, inputs of every model file's cache key.
        audits.extend(macros);
        audits.sort();
        audits.dedup();
        let audit_set: HashSet<&PathBuf> = audits.iter().collect();
        let models = models.into_iter().filter(|f| !audit_set.contains(f)).collect();
        Ok(Discovered { audits, models })
    }

    /// Audit files then model files, in evaluation order.
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.audits.iter().chain(&self.models)
    }
}

/// What a load read and did.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Every file the load read, absolute: audit and model files, the files they reached through
    /// `require` / `import` (transitively), the seed files the models name.
    pub inputs: BTreeSet<PathBuf>,
    /// The top-level files evaluated by this load (relative), in order.
    pub evaluated: Vec<PathBuf>,
    /// How many top-level files were taken from the cache.
    pub from_cache: usize,
    /// Per audit or model file and per file they reached (relative to the root): the blake3 of
    /// the bytes the returned models came from (`None` when unknown or when two evaluations read
    /// different bytes: such a file never matches). The project cache is keyed by them.
    pub hashes: BTreeMap<PathBuf, Option<[u8; 32]>>,
    /// Paths `require` / `import` tried and found absent before resolving (relative).
    pub probes: BTreeSet<PathBuf>,
    /// The audit and model files the load was given.
    pub files: Discovered,
}

/// `Path`'s order (component by component) read from the bytes: equal to it for paths without
/// empty or `.` components (every path discovery or `require` produces), and only a pre-sort
/// otherwise ([`path_set`] and [`path_map`] leave the final order to `Path`'s own).
fn path_order(a: &Path, b: &Path) -> std::cmp::Ordering {
    let (a, b) = (a.as_os_str().as_encoded_bytes(), b.as_os_str().as_encoded_bytes());
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    // At the first difference a separator sorts before any other byte; a prefix sorts first.
    let at = |s: &[u8]| s.get(same).map(|&c| if c == b'/' { 0 } else { u16::from(c) + 1 });
    at(a).cmp(&at(b))
}

/// A set of paths built from a sorted vector: sorted by bytes first ([`path_order`]) so that
/// the set's own sort (by components, far slower per comparison) finds them in order and
/// compares each path about twice instead of `log2(n)` times.
fn path_set(paths: impl Iterator<Item = PathBuf>) -> BTreeSet<PathBuf> {
    let mut v: Vec<PathBuf> = paths.collect();
    v.sort_by(|a, b| path_order(a, b));
    v.into_iter().collect()
}

/// [`path_set`] for a map; a key given twice keeps its last value, as `BTreeMap::from_iter`.
fn path_map<T>(entries: impl Iterator<Item = (PathBuf, T)>) -> BTreeMap<PathBuf, T> {
    let mut v: Vec<(PathBuf, T)> = entries.collect();
    v.sort_by(|a, b| path_order(&a.0, &b.0));
    v.into_iter().collect()
}

fn ext(f: &Path) -> &str {
    f.extension().and_then(|e| e.to_str()).unwrap_or("")
}

/// The environment variable that sets how many threads evaluate model files (`1`: one, on the
/// calling thread); by default, the processors available ([`std::thread::available_parallelism`]).
pub const LOAD_THREADS_ENV: &str = "EFMESH_LOAD_THREADS";
/// At least this many files per loader thread: a small load (a watch reload of one file) is
/// not worth a thread and an interpreter.
const FILES_PER_THREAD: usize = 16;
/// Stack of a loader thread (the main thread's default: deep Lua `require` chains recurse in C).
const THREAD_STACK: usize = 8 << 20;

/// How many threads evaluate model files: `EFMESH_LOAD_THREADS` when set to a positive number,
/// else the processors available.
fn load_threads() -> usize {
    match std::env::var(LOAD_THREADS_ENV) {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                tracing::warn!("{LOAD_THREADS_ENV}={v:?} is not a positive number of threads: using the processors available");
                std::thread::available_parallelism().map_or(1, usize::from)
            }
        },
        Err(_) => std::thread::available_parallelism().map_or(1, usize::from),
    }
}

/// What one loader worker produced (see [`evaluate_parallel`]).
#[derive(Default)]
struct Work {
    /// The audit files' outcomes and the errors of their evaluation (every worker evaluates
    /// them; the first worker's are kept).
    audits: Option<(Vec<FileOutcome>, Vec<LoadError>)>,
    /// Per job index: the file's outcome and the errors of its evaluation.
    jobs: Vec<(usize, FileOutcome, Vec<LoadError>)>,
    /// Errors outside any file (an interpreter that cannot start).
    other: Vec<LoadError>,
}

/// Evaluates one `.sql` file: a `.sql` audit file when it is a definition file, else a model
/// file (its `@name(…)` macro calls and its audits through `foreign`).
fn evaluate_sql(root: &Path, f: &Path, foreign: &Foreign) -> (FileOutcome, Vec<LoadError>) {
    let mut outcome = FileOutcome { file: f.to_path_buf(), defines: true, ..FileOutcome::default() };
    let mut errors = Vec::new();
    let _ = super::foreign::take_call_reads();
    if foreign.is_definition(f) {
        match fs_err::read_to_string(root.join(f)) {
            Ok(text) => match super::sql_audit::SqlAuditDef::parse(f, &text) {
                Ok(_) => {
                    outcome.hashes.insert(f.to_path_buf(), *blake3::hash(text.as_bytes()).as_bytes());
                }
                Err(e) => {
                    outcome.failed = true;
                    errors.extend(e);
                }
            },
            Err(e) => {
                outcome.failed = true;
                errors.push(LoadError::new(Some(Location { file: f.to_path_buf(), line: 0 }), None, format!("cannot read: {e}")));
            }
        }
        return (outcome, errors);
    }
    match fs_err::read_to_string(root.join(f)) {
        Ok(text) => match super::sql_file::parse_with(f, &text, Some(foreign)) {
            Ok(m) => {
                outcome.hashes.insert(f.to_path_buf(), *blake3::hash(text.as_bytes()).as_bytes());
                outcome.models.push(m);
                // What its macro calls and audits read when they ran.
                super::foreign::add_call_reads(&mut outcome);
            }
            Err(e) => {
                outcome.failed = true;
                errors.extend(e);
            }
        },
        Err(e) => {
            outcome.failed = true;
            errors.push(LoadError::new(Some(Location { file: f.to_path_buf(), line: 0 }), None, format!("cannot read: {e}")));
        }
    }
    (outcome, errors)
}

/// One loader worker: takes the next job (an index into `lua_models` then `sql_files`) until
/// none is left. Lua jobs run in the worker's own interpreter, started (with the audit files
/// evaluated and kept) at its first Lua job.
fn work(
    root: &Path,
    foreign: &Arc<Foreign>,
    lua_audits: &[PathBuf],
    lua_models: &[PathBuf],
    sql_files: &[PathBuf],
    next: &std::sync::atomic::AtomicUsize,
) -> Work {
    use std::sync::atomic::Ordering;
    let mut out = Work::default();
    let mut host: Option<super::lua::LuaHost> = None;
    let mut no_host = false;
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = lua_models.get(i) {
            if host.is_none() && !no_host {
                match super::lua::LuaHost::new(root) {
                    Ok(mut h) => {
                        h.set_foreign(foreign.clone());
                        let outcomes: Vec<FileOutcome> = lua_audits.iter().map(|a| h.load_file(a)).collect();
                        out.audits = Some((outcomes, h.take_errors()));
                        h.keep_modules();
                        host = Some(h);
                    }
                    Err(e) => {
                        // As when the one interpreter of a sequential load cannot start: an
                        // error, and no outcome for the Lua files this worker takes.
                        out.other.push(LoadError::new(None, None, format!("cannot start the Lua host: {e}")));
                        no_host = true;
                    }
                }
            }
            if let Some(h) = host.as_mut() {
                let outcome = h.load_file(f);
                out.jobs.push((i, outcome, h.take_errors()));
            }
        } else if let Some(f) = sql_files.get(i - lua_models.len()) {
            let (outcome, errors) = evaluate_sql(root, f, foreign);
            out.jobs.push((i, outcome, errors));
        } else {
            break;
        }
    }
    if let Some(h) = host {
        out.other.extend(h.finish());
    }
    out
}

/// Evaluates the Lua model files and the `.sql` files on `threads` workers (the calling thread
/// is one), each Lua worker with its own interpreter in which the Lua audit files are evaluated
/// first. Every top-level file is evaluated in isolation (module docs), so which worker
/// evaluates it does not change its result; the outcomes and errors are merged in job order, so
/// the result is the one of [`evaluate_sequential`]: the Lua audit files' outcomes and errors,
/// then per Lua model file, then per `.sql` file. Returns the Lua outcomes and errors, then the
/// `.sql` ones.
#[allow(clippy::type_complexity)]
fn evaluate_parallel(
    root: &Path,
    foreign: &Arc<Foreign>,
    lua_audits: &[PathBuf],
    lua_models: &[PathBuf],
    sql_files: &[PathBuf],
    threads: usize,
) -> ((Vec<FileOutcome>, Vec<LoadError>), (Vec<FileOutcome>, Vec<LoadError>)) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let mut works: Vec<Work> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .map(|k| {
                let (dispatch, next) = (dispatch.clone(), &next);
                std::thread::Builder::new()
                    .name(format!("efmesh-load-{k}"))
                    .stack_size(THREAD_STACK)
                    .spawn_scoped(scope, move || tracing::dispatcher::with_default(&dispatch, || work(root, foreign, lua_audits, lua_models, sql_files, next)))
            })
            .collect();
        let mut works = vec![work(root, foreign, lua_audits, lua_models, sql_files, &next)];
        for h in handles {
            match h {
                Ok(h) => works.push(h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))),
                // A thread that cannot start takes no job: the others (this one at least) do them all.
                Err(e) => tracing::debug!("cannot start a loader thread: {e}"),
            }
        }
        works
    });
    let mut lua_outcomes = Vec::new();
    let mut lua_errors = Vec::new();
    if let Some((outcomes, errors)) = works.iter_mut().find_map(|w| w.audits.take()) {
        lua_outcomes.extend(outcomes);
        lua_errors.extend(errors);
    }
    let mut jobs: Vec<(usize, FileOutcome, Vec<LoadError>)> = works.iter_mut().flat_map(|w| std::mem::take(&mut w.jobs)).collect();
    jobs.sort_by_key(|j| j.0);
    let mut sql = (Vec::new(), Vec::new());
    for (i, outcome, errors) in jobs {
        let (outcomes, errs) = if i < lua_models.len() { (&mut lua_outcomes, &mut lua_errors) } else { (&mut sql.0, &mut sql.1) };
        outcomes.push(outcome);
        errs.extend(errors);
    }
    for w in works {
        for e in w.other {
            if !lua_errors.contains(&e) {
                lua_errors.push(e);
            }
        }
    }
    ((lua_outcomes, lua_errors), sql)
}

/// Evaluates `audits`, then `models` (each in isolation), then `tests`, by language: Lua, Rhai,
/// then `.sql` files. Without test files, the Lua model files and the `.sql` files are spread
/// over loader threads ([`LOAD_THREADS_ENV`], [`evaluate_parallel`]) with the same result.
///
/// `definitions` are every definition file of the project (audit and macro files): what
/// macro calls and audits defined in another language need ([`Foreign`]), even when only some
/// of them (`audits`) are evaluated here. Names defined in two languages are errors.
fn evaluate(
    root: &Path,
    definitions: &[PathBuf],
    audits: &[PathBuf],
    models: &[PathBuf],
    tests: &[PathBuf],
) -> (Vec<FileOutcome>, Vec<TestSpec>, Vec<LoadError>) {
    evaluate_on(root, definitions, audits, models, tests, load_threads())
}

/// [`evaluate`] on at most `threads` threads.
fn evaluate_on(
    root: &Path,
    definitions: &[PathBuf],
    audits: &[PathBuf],
    models: &[PathBuf],
    tests: &[PathBuf],
    threads: usize,
) -> (Vec<FileOutcome>, Vec<TestSpec>, Vec<LoadError>) {
    let foreign = Arc::new(Foreign::new(root, definitions));
    let (mut outcomes, tests, mut errors) = evaluate_with(root, &foreign, audits, models, tests, threads);
    // Every signal a model uses is defined (by the definition files of any language).
    let unknown = foreign.check_signals(outcomes.iter().flat_map(|o| &o.models));
    if !unknown.is_empty() {
        // The file of a use failed: it is not cached, so the next load checks again.
        for o in &mut outcomes {
            if o.models.iter().any(|m| unknown.iter().any(|e| e.model.as_ref() == Some(&m.name))) {
                o.failed = true;
            }
        }
        errors.extend(unknown);
    }
    let evaluated_any = !audits.is_empty() || !models.is_empty();
    if !definitions.is_empty() && evaluated_any {
        let twice = foreign.check();
        // The file of a second definition failed: it is not cached, so the next load checks again.
        for o in &mut outcomes {
            if twice.iter().any(|e| e.location.as_ref().is_some_and(|l| l.file == o.file)) {
                o.failed = true;
            }
        }
        errors.extend(twice);
    }
    (outcomes, tests, errors)
}

/// [`evaluate_on`] with the services of the definition files.
fn evaluate_with(
    root: &Path,
    foreign: &Arc<Foreign>,
    audits: &[PathBuf],
    models: &[PathBuf],
    tests: &[PathBuf],
    threads: usize,
) -> (Vec<FileOutcome>, Vec<TestSpec>, Vec<LoadError>) {
    let pick = |files: &[PathBuf], e: &str| files.iter().filter(|f| ext(f) == e).cloned().collect::<Vec<_>>();
    let lua_models = pick(models, "lua");
    let sql_files: Vec<PathBuf> = audits.iter().chain(models).filter(|f| ext(f) == "sql").cloned().collect();
    let threads = threads.min((lua_models.len() + sql_files.len()).div_ceil(FILES_PER_THREAD));
    let lua_audits_alone = lua_models.is_empty() && audits.iter().any(|a| ext(a) == "lua");
    if !tests.is_empty() || threads <= 1 || lua_audits_alone {
        tracing::debug!("load: evaluating {} files on 1 thread", audits.len() + models.len() + tests.len());
        return evaluate_sequential(root, foreign, audits, models, tests);
    }
    tracing::debug!("load: evaluating {} files on {threads} threads", audits.len() + models.len());
    let ((mut outcomes, mut errors), (sql_outcomes, sql_errors)) = evaluate_parallel(root, foreign, &pick(audits, "lua"), &lua_models, &sql_files, threads);
    let (rhai_audits, rhai_models) = (pick(audits, "rhai"), pick(models, "rhai"));
    if !rhai_audits.is_empty() || !rhai_models.is_empty() {
        let run = super::rhai::run_host(root, &rhai_audits, &rhai_models, &[], Some(foreign.clone()));
        outcomes.extend(run.outcomes);
        errors.extend(run.errors);
    }
    outcomes.extend(sql_outcomes);
    errors.extend(sql_errors);
    (outcomes, Vec::new(), errors)
}

/// [`evaluate`] on the calling thread (and the Rhai host's), one interpreter per language.
fn evaluate_sequential(
    root: &Path,
    foreign: &Arc<Foreign>,
    audits: &[PathBuf],
    models: &[PathBuf],
    tests: &[PathBuf],
) -> (Vec<FileOutcome>, Vec<TestSpec>, Vec<LoadError>) {
    let pick = |files: &[PathBuf], e: &str| files.iter().filter(|f| ext(f) == e).cloned().collect::<Vec<_>>();
    let mut outcomes = Vec::new();
    let mut tests_out = Vec::new();
    let mut errors = Vec::new();
    let (lua_audits, lua_models, lua_tests) = (pick(audits, "lua"), pick(models, "lua"), pick(tests, "lua"));
    if !lua_audits.is_empty() || !lua_models.is_empty() || !lua_tests.is_empty() {
        match super::lua::LuaHost::new(root) {
            Ok(mut host) => {
                host.set_foreign(foreign.clone());
                for f in &lua_audits {
                    outcomes.push(host.load_file(f));
                }
                host.keep_modules();
                for f in &lua_models {
                    outcomes.push(host.load_file(f));
                }
                if !lua_tests.is_empty() {
                    match host.begin_tests() {
                        Ok(()) => {
                            for f in &lua_tests {
                                outcomes.push(host.load_file(f));
                            }
                        }
                        Err(e) => errors.push(LoadError::new(None, None, format!("cannot prepare the Lua host for tests: {e}"))),
                    }
                }
                let (e, t) = host.finish_with_tests();
                errors.extend(e);
                tests_out.extend(t);
            }
            Err(e) => errors.push(LoadError::new(None, None, format!("cannot start the Lua host: {e}"))),
        }
    }
    let (rhai_audits, rhai_models, rhai_tests) = (pick(audits, "rhai"), pick(models, "rhai"), pick(tests, "rhai"));
    if !rhai_audits.is_empty() || !rhai_models.is_empty() || !rhai_tests.is_empty() {
        let run = super::rhai::run_host(root, &rhai_audits, &rhai_models, &rhai_tests, Some(foreign.clone()));
        outcomes.extend(run.outcomes);
        tests_out.extend(run.tests);
        errors.extend(run.errors);
    }
    for f in audits.iter().chain(models).filter(|f| ext(f) == "sql") {
        let (outcome, e) = evaluate_sql(root, f, foreign);
        outcomes.push(outcome);
        errors.extend(e);
    }
    (outcomes, tests_out, errors)
}

/// Refuses files of another extension than the hosts read, and test files also matched as
/// model files.
fn check_extensions(files: &Discovered, tests: &[PathBuf]) -> Vec<LoadError> {
    let at = |f: &PathBuf| Some(Location { file: f.clone(), line: 0 });
    let mut errors = Vec::new();
    for f in files.all() {
        if !matches!(ext(f), "lua" | "rhai" | "sql") {
            errors.push(
                LoadError::new(at(f), None, "not a model file: efmesh reads `.lua`, `.rhai` and `.sql` files")
                    .with_hint("narrow `project.models` in efmesh.toml"),
            );
        }
    }
    let all: HashSet<&PathBuf> = files.all().collect();
    for f in tests {
        if all.contains(f) {
            errors.push(
                LoadError::new(at(f), None, "this file is matched both by `project.models` and by `project.tests`")
                    .with_hint("keep test files out of the model globs (default: models in `models/`, tests in `tests/`)"),
            );
        } else if !matches!(ext(f), "lua" | "rhai") {
            errors.push(LoadError::new(at(f), None, "not a test file: tests are `.lua` or `.rhai` files").with_hint("narrow `project.tests` in efmesh.toml"));
        }
    }
    errors
}

/// Merges the models of every outcome (audit and model files, in `files` order): a model seen
/// in several evaluations (defined by a module several files required) is kept once when its
/// definitions are equal; different definitions under one name are all kept, for
/// [`crate::core::Dag::build`] to report as duplicates.
fn merge_models(outcomes: Vec<FileOutcome>) -> Vec<Model> {
    let mut models: Vec<Model> = Vec::new();
    let mut by_name: HashMap<ModelName, Vec<usize>> = HashMap::new();
    for o in outcomes {
        for m in o.models {
            let same = by_name.entry(m.name.clone()).or_default();
            if same.iter().any(|&i| models[i] == m) {
                continue;
            }
            same.push(models.len());
            models.push(m);
        }
    }
    models
}

/// Ends a load: merged models, the no-model rule, seed hashes, `cols()` expansion; the errors
/// sorted by location.
fn finish(
    root: &Path,
    outcomes: Vec<FileOutcome>,
    mut errors: Vec<LoadError>,
    test_outcomes: &[&FileOutcome],
    definitions: &[PathBuf],
) -> Result<Vec<Model>, LoadErrors> {
    errors.extend(idle_top_level(&outcomes.iter().collect::<Vec<_>>(), test_outcomes, definitions));
    let mut models = merge_models(outcomes);
    // Seeds: hash each file's bytes (never parse at load) so the fingerprint follows the content.
    errors.extend(crate::seed::hash_seed_files(root, &mut models));
    if !errors.is_empty() {
        errors.sort_by(|a, b| a.location.cmp(&b.location));
        // One error at one place is reported once: a module that fails is evaluated again for
        // every file requiring it (each top-level file evaluates in isolation), and its error
        // comes back with that file's longer traceback.
        errors.dedup_by(|later, first| {
            later.location == first.location && later.model == first.model && later.message.lines().next() == first.message.lines().next()
        });
        // A file failing only because a module it requires failed comes after that module's own
        // error (which says what to fix), without its traceback; so does a request the macro
        // interpreter refused after a write (the write's error says what to fix).
        let own: BTreeSet<PathBuf> = errors.iter().filter_map(|e| e.location.as_ref().map(|l| l.file.clone())).collect();
        let knock_on = |e: &LoadError| failed_module(&e.message).is_some_and(|m| own.contains(Path::new(m)));
        for e in errors.iter_mut().filter(|e| knock_on(e)) {
            e.traceback = None;
        }
        errors.sort_by_key(|e| knock_on(e) || super::foreign::is_not_run(&e.message));
        // A script's call stack is no part of the report (one line per error): it is logged, for
        // `--log-level debug` (and `check --json` gives it as `"traceback"`).
        for e in &errors {
            if let Some(traceback) = &e.traceback {
                let at = e.location.as_ref().map(|l| format!("{l}: ")).unwrap_or_default();
                tracing::debug!("{at}{}\n{traceback}", e.message);
            }
        }
        return Err(LoadErrors(errors));
    }
    super::builder::expand_all_cols(&mut models);
    Ok(models)
}

/// The module of a "`<module>` failed to load (see its error)" error: a file that `require`s or
/// `import`s a module whose own evaluation failed.
fn failed_module(message: &str) -> Option<&str> {
    let end = message.find("` failed to load (see its error)")?;
    let start = message[..end].rfind('`')? + 1;
    Some(&message[start..end])
}

/// The no-model errors of audit and model files; files test files reach count as libraries.
fn idle_top_level(outcomes: &[&FileOutcome], test_outcomes: &[&FileOutcome], definitions: &[PathBuf]) -> Vec<LoadError> {
    let tested: Vec<FileOutcome> =
        test_outcomes.iter().map(|o| FileOutcome { file: o.file.clone(), reached: o.reached.clone(), defines: true, ..FileOutcome::default() }).collect();
    idle_errors(outcomes.iter().copied().chain(tested.iter()), definitions)
}

/// Evaluates every audit, model and test file (no cache), in the same hosts, so test files can
/// `require` / `import` model files for their handles. Test files get `define_test` and lose
/// `define_model`; model files cannot call `define_test`.
///
/// # Errors
/// Every load error of models and tests, sorted by location; duplicate test names; test files
/// of another extension than `.lua` / `.rhai`; a file matched both as a model and as a test.
pub fn load_models_and_tests(root: &Path, files: &Discovered, test_files: &[PathBuf]) -> Result<(Vec<Model>, Vec<TestSpec>), LoadErrors> {
    let errors = check_extensions(files, test_files);
    if !errors.is_empty() {
        return Err(LoadErrors(errors));
    }
    let (outcomes, mut tests, mut errors) = evaluate(root, &files.audits, &files.audits, &files.models, test_files);
    let tests_set: HashSet<&PathBuf> = test_files.iter().collect();
    let (test_outcomes, top): (Vec<&FileOutcome>, Vec<&FileOutcome>) = outcomes.iter().partition(|o| tests_set.contains(&o.file));
    tests.sort_by(|a, b| a.location.cmp(&b.location).then_with(|| a.name.cmp(&b.name)));
    errors.extend(super::test_spec::check_unique(&tests));
    let top: Vec<FileOutcome> = order(&top, files).into_iter().cloned().collect();
    let models = finish(root, top, errors, &test_outcomes, &files.audits)?;
    Ok((models, tests))
}

/// `outcomes` in `files` order (audit files, then model files).
fn order<'a>(outcomes: &[&'a FileOutcome], files: &Discovered) -> Vec<&'a FileOutcome> {
    let by_file: HashMap<&Path, &'a FileOutcome> = outcomes.iter().map(|o| (o.file.as_path(), *o)).collect();
    files.all().filter_map(|f| by_file.get(f.as_path()).copied()).collect()
}

/// What one top-level file's evaluation produced, as the cache keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// blake3 over every input of the evaluation (see [`LoadCache`]).
    key: [u8; 32],
    reached: Vec<PathBuf>,
    probes: Vec<PathBuf>,
    defines: bool,
    models: Vec<Model>,
}

impl Entry {
    fn outcome(&self, file: &Path) -> FileOutcome {
        FileOutcome {
            file: file.to_path_buf(),
            models: self.models.clone(),
            reached: self.reached.iter().cloned().collect(),
            probes: self.probes.iter().cloned().collect(),
            hashes: BTreeMap::new(),
            defines: self.defines,
            failed: false,
        }
    }
}

/// The body of a cache file.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    entries: Vec<(PathBuf, Entry)>,
}

/// The load cache: per top-level file (audit or model file), the models its evaluation defined,
/// what it reached, whether it defined anything, under a key — blake3 over [`CACHE_VERSION`],
/// efmesh's version, a digest of every embedded stdlib source, the configuration's
/// `[project]` section, the audit files (each with everything it reached), the file's
/// content and the content of every file it reached (and the absence of every candidate path
/// `require` / `import` tried before it). An entry is used only when its key matches the inputs
/// as they are now; otherwise the file is evaluated again.
///
/// Persisted in `<state directory>/.efmesh/load-cache` ([`LoadCache::open`],
/// [`LoadCache::save`]): a one-line text header (magic, [`CACHE_VERSION`], efmesh's version,
/// the stdlib digest and a blake3 checksum of the body), then the entries in `postcard`. A file
/// that is unreadable, corrupt or written by another version is ignored with a one-line warning
/// on stderr naming it — never trusted in part — and rewritten.
///
/// Content hashes are memoized: each input is read once per load. A long-lived holder (a
/// [`crate::session::Session`]) keeps the memo across loads and [`LoadCache::forget`]s the paths
/// that changed.
#[derive(Debug, Default)]
pub struct LoadCache {
    path: Option<PathBuf>,
    entries: HashMap<PathBuf, Entry>,
    hashes: HashMap<PathBuf, Option<[u8; 32]>>,
    dirty: bool,
}

/// Digest of every embedded stdlib source the hosts evaluate.
pub fn stdlib_digest() -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for src in super::lua::stdlib_sources().iter().chain(super::rhai::stdlib_sources().iter()) {
        h.update(&(src.len() as u64).to_le_bytes());
        h.update(src.as_bytes());
    }
    *h.finalize().as_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The identity of the efmesh build: a digest of the crate's sources (`src/`, `stdlib/`,
/// `Cargo.toml`, `Cargo.lock`) taken by the build script. Two binaries built from the same
/// sources share it; a rebuild after any change of the code that evaluates model files (even
/// with the same version number) does not, so its caches are not trusted.
pub const BUILD_ID: &str = env!("EFMESH_BUILD_ID");

/// The one-line header of an efmesh cache file (load cache, project cache): its kind (`magic`),
/// layout version, efmesh version, build identity ([`BUILD_ID`]), stdlib digest and a blake3
/// checksum of `body`.
pub(crate) fn cache_header(magic: &str, layout: u32, body: &[u8]) -> String {
    format!(
        "{magic} {layout} efmesh={} build={BUILD_ID} stdlib={} body={}\n",
        env!("CARGO_PKG_VERSION"),
        hex(&stdlib_digest()),
        hex(blake3::hash(body).as_bytes())
    )
}

/// Writes a cache file atomically: [`cache_header`]`(magic, layout, body)` then `body` into a
/// temporary file beside `path` (named after it and this process), renamed over `path`.
///
/// # Errors
/// The directory cannot be created, or the file written or renamed (the temporary file is
/// removed then); the message is for a warning.
pub(crate) fn write_cache_file(path: &Path, magic: &str, layout: u32, body: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or("no directory")?;
    let name = path.file_name().ok_or("no file name")?.to_string_lossy();
    fs_err::create_dir_all(dir).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut bytes = cache_header(magic, layout, body).into_bytes();
    bytes.extend_from_slice(body);
    crate::file::replace(path, &tmp, &bytes).map_err(|e| e.to_string())
}

/// The body of a cache file written with [`cache_header`]`(magic, layout, …)`, or why it cannot
/// be trusted (another kind of file, another efmesh or stdlib, a checksum mismatch), in words
/// that follow "ignoring the <what> `<path>`: ".
pub(crate) fn checked_cache_body<'a>(bytes: &'a [u8], magic: &str, layout: u32, what: &str) -> Result<&'a [u8], String> {
    let nl = bytes.iter().position(|&b| b == b'\n').ok_or("it is corrupt (no header)")?;
    let head = std::str::from_utf8(&bytes[..nl]).map_err(|_| "it is corrupt (header)")?;
    let body = &bytes[nl + 1..];
    let mut words = head.split(' ');
    if words.next() != Some(magic) {
        return Err(format!("it is not an efmesh {what}"));
    }
    let expected = cache_header(magic, layout, body);
    let expected = expected.trim_end();
    if head != expected {
        let version = words.next().unwrap_or("");
        let field = |line: &'_ str, key: &str| -> String {
            let prefix = format!("{key}=");
            line.split(' ').find_map(|w| w.strip_prefix(prefix.as_str())).unwrap_or("").to_string()
        };
        let theirs = |key: &str| field(head, key);
        let ours = |key: &str| field(expected, key);
        return Err(if version != layout.to_string() || theirs("efmesh") != ours("efmesh") {
            format!("it was written by another efmesh version ({}, cache layout {version})", theirs("efmesh"))
        } else if theirs("build") != ours("build") {
            format!("it was written by another build of efmesh {} (build {})", theirs("efmesh"), theirs("build"))
        } else if theirs("stdlib") != ours("stdlib") {
            "it was written with another embedded stdlib".into()
        } else {
            "it is corrupt (checksum mismatch)".into()
        });
    }
    Ok(body)
}

impl LoadCache {
    /// An empty cache kept in memory only.
    pub fn in_memory() -> LoadCache {
        LoadCache::default()
    }

    /// Where `config`'s project keeps its load cache: `.efmesh/load-cache` in the directory of
    /// the state store.
    pub fn path_for(config: &Config) -> PathBuf {
        let state = config.state_path();
        let dir = state.parent().map(Path::to_path_buf).unwrap_or_else(|| config.root.clone());
        dir.join(".efmesh").join("load-cache")
    }

    /// Reads the cache of `config`'s project; empty when there is none. A cache that cannot be
    /// read, is corrupt or was written by another version is ignored with a warning.
    pub fn open(config: &Config) -> LoadCache {
        let path = Self::path_for(config);
        let mut cache = LoadCache { path: Some(path.clone()), ..LoadCache::default() };
        let bytes = match crate::file::read_regular(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return cache,
            Err(e) => {
                tracing::warn!("ignoring the load cache `{}`: cannot read it ({e}); every file is evaluated", path.display());
                cache.dirty = true;
                return cache;
            }
        };
        match Self::decode(&bytes) {
            Ok(entries) => cache.entries = entries,
            Err(why) => {
                tracing::warn!("ignoring the load cache `{}`: {why}; every file is evaluated and the cache rewritten", path.display());
                cache.dirty = true;
            }
        }
        cache
    }

    fn decode(bytes: &[u8]) -> Result<HashMap<PathBuf, Entry>, String> {
        let body = checked_cache_body(bytes, MAGIC, CACHE_VERSION, "load cache")?;
        let stored: Stored = postcard::from_bytes(body).map_err(|e| format!("it is corrupt ({e})"))?;
        Ok(stored.entries.into_iter().collect())
    }

    /// Writes the cache back when a load changed it: a temporary file renamed over the old one.
    /// A failure is a warning, never an error.
    pub fn save(&mut self) {
        let Some(path) = self.path.clone() else { return };
        if !self.dirty {
            return;
        }
        // Serialised from references: postcard writes `&T` exactly as `T`, so these are the
        // bytes of a `Stored`, without copying every model first.
        #[derive(Serialize)]
        struct StoredRef<'a> {
            entries: Vec<(&'a PathBuf, &'a Entry)>,
        }
        let mut entries: Vec<(&PathBuf, &Entry)> = self.entries.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let result = (|| -> Result<(), String> {
            let body = postcard::to_allocvec(&StoredRef { entries }).map_err(|e| e.to_string())?;
            write_cache_file(&path, MAGIC, CACHE_VERSION, &body)
        })();
        match result {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::warn!("cannot write the load cache `{}`: {e} (the next load evaluates again)", path.display()),
        }
    }

    /// Forgets the memoized content hashes of `paths` (relative to the root) and of every path
    /// under them (a changed path may be a directory, moved or replaced as a whole), so the next
    /// load reads them again.
    pub fn forget<'a>(&mut self, paths: impl IntoIterator<Item = &'a Path>) {
        let paths: Vec<&Path> = paths.into_iter().collect();
        if paths.is_empty() {
            return;
        }
        self.hashes.retain(|p, _| !paths.iter().any(|changed| p.starts_with(changed)));
    }

    /// Forgets every memoized content hash.
    pub fn forget_all(&mut self) {
        self.hashes.clear();
    }

    #[cfg(test)]
    fn content_hash(&mut self, root: &Path, rel: &Path) -> Option<[u8; 32]> {
        content_hash(&mut self.hashes, root, rel)
    }

    /// Seeds the memo of content hashes with `hashes` (relative path → blake3 of the content as
    /// it was just read, `None` for absent), so a later load does not read them again.
    pub fn remember(&mut self, hashes: impl IntoIterator<Item = (PathBuf, Option<[u8; 32]>)>) {
        self.hashes.extend(hashes);
    }
}

/// The blake3 of `rel`'s content (`None`: unreadable), memoized in `memo`.
fn content_hash(memo: &mut HashMap<PathBuf, Option<[u8; 32]>>, root: &Path, rel: &Path) -> Option<[u8; 32]> {
    if let Some(h) = memo.get(rel) {
        return *h;
    }
    let h = fs_err::read(root.join(rel)).ok().map(|bytes| *blake3::hash(&bytes).as_bytes());
    memo.insert(rel.to_path_buf(), h);
    h
}

impl LoadCache {
    /// The key of `file`'s evaluation. `evaluated` holds the hashes of the bytes an evaluation
    /// just read (a file changed since is keyed by what was evaluated, so the next load sees
    /// the change); without it, the current content is hashed (memoized).
    fn key(
        memo: &mut HashMap<PathBuf, Option<[u8; 32]>>,
        root: &Path,
        base: &[u8; 32],
        file: &Path,
        reached: &[PathBuf],
        probes: &[PathBuf],
        evaluated: Option<&BTreeMap<PathBuf, [u8; 32]>>,
    ) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(base);
        let put = |h: &mut blake3::Hasher, p: &Path, content: Option<[u8; 32]>| {
            let s = p.to_string_lossy();
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
            match content {
                Some(c) => {
                    h.update(&[1]);
                    h.update(&c);
                }
                None => {
                    h.update(&[0]);
                }
            }
        };
        let mut hash = |p: &Path| match evaluated {
            // A file the evaluation did not report reading is keyed as absent: never trusted.
            Some(e) => e.get(p).copied(),
            None => content_hash(memo, root, p),
        };
        let c = hash(file);
        put(&mut h, file, c);
        h.update(b"reached");
        for r in reached {
            let c = hash(r);
            put(&mut h, r, c);
        }
        h.update(b"probes");
        for p in probes {
            // A probe is a path that did not exist: only its existence matters.
            let c = root.join(p).exists().then_some([0; 32]);
            put(&mut h, p, c);
        }
        *h.finalize().as_bytes()
    }
}

/// The key of everything every file's evaluation depends on, before the audit files.
fn base_key(config: &Config) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&CACHE_VERSION.to_le_bytes());
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(BUILD_ID.as_bytes());
    h.update(&stdlib_digest());
    // The load-relevant part of the configuration: discovery (the hosts read nothing else).
    h.update(format!("{:?}", config.project).as_bytes());
    *h.finalize().as_bytes()
}

/// Loads the models of `config`'s project (audit and model files `files`), using `cache`:
/// files whose entry matches are not evaluated; the others are, and their entries replaced.
/// Seeds are hashed from their content every time.
///
/// Returns the models (or every load error) and what the load read and did; the report is
/// filled even when the load fails, as far as it got.
pub fn load_project(config: &Config, files: &Discovered, cache: &mut LoadCache) -> (Result<Vec<Model>, LoadErrors>, LoadReport) {
    load_project_with(config, files, cache, &mut || {})
}

/// [`load_project`], calling `after_evaluation` between the evaluation and the cache update
/// (tests change files there, as an editor saving during a load would).
fn load_project_with(
    config: &Config,
    files: &Discovered,
    cache: &mut LoadCache,
    after_evaluation: &mut dyn FnMut(),
) -> (Result<Vec<Model>, LoadErrors>, LoadReport) {
    let root = &config.root;
    let mut report = LoadReport { files: files.clone(), ..LoadReport::default() };
    report.inputs = path_set(files.all().map(|f| root.join(f)));
    let errors = check_extensions(files, &[]);
    if !errors.is_empty() {
        return (Err(LoadErrors(errors)), report);
    }
    let base = base_key(config);
    // Audit files: every model file's result depends on them.
    let mut audits_valid = true;
    let mut global = blake3::Hasher::new();
    global.update(&base);
    for a in &files.audits {
        let valid = match cache.entries.get(a) {
            Some(e) => {
                let key = LoadCache::key(&mut cache.hashes, root, &base, a, &e.reached, &e.probes, None);
                global.update(&key);
                key == e.key
            }
            None => false,
        };
        audits_valid &= valid;
    }
    let mut stale: Vec<PathBuf> = Vec::new();
    if audits_valid {
        let g = *global.finalize().as_bytes();
        for f in &files.models {
            let fresh = match cache.entries.get(f) {
                Some(e) => LoadCache::key(&mut cache.hashes, root, &g, f, &e.reached, &e.probes, None) == e.key,
                None => false,
            };
            if !fresh {
                stale.push(f.clone());
            }
        }
    } else {
        stale = files.models.clone();
    }
    // Evaluate the stale model files, with the audit files of their languages (or every audit
    // file when one of them changed).
    let langs: HashSet<&str> = stale.iter().map(|f| ext(f)).collect();
    let audits: Vec<PathBuf> = files.audits.iter().filter(|a| !audits_valid || langs.contains(ext(a))).cloned().collect();
    let (evaluated, errors) = if stale.is_empty() && audits.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let (outcomes, _, errors) = evaluate(root, &files.audits, &audits, &stale, &[]);
        (outcomes, errors)
    };
    after_evaluation();
    let fresh: HashMap<&Path, &FileOutcome> = evaluated.iter().map(|o| (o.file.as_path(), o)).collect();
    report.evaluated = files.all().filter(|f| fresh.contains_key(f.as_path())).cloned().collect();
    // Every top-level file's outcome: evaluated now, or from the cache.
    let cached: Vec<FileOutcome> =
        files.all().filter(|f| !fresh.contains_key(f.as_path())).filter_map(|f| cache.entries.get(f).map(|e| e.outcome(f))).collect();
    report.from_cache = cached.len();
    let cached_by: HashMap<&Path, &FileOutcome> = cached.iter().map(|o| (o.file.as_path(), o)).collect();
    let outcomes: Vec<&FileOutcome> = files.all().filter_map(|f| fresh.get(f.as_path()).or_else(|| cached_by.get(f.as_path())).copied()).collect();
    tracing::debug!("load: {} files evaluated, {} from the cache", report.evaluated.len(), report.from_cache);
    // The hashes gathered first and sorted once ([`path_set`]): a `BTreeMap<PathBuf, _>` filled
    // one path at a time compares paths component by component, dozens of times each.
    let mut hashes: HashMap<&Path, Option<[u8; 32]>> = HashMap::new();
    for o in &outcomes {
        report.inputs.extend(o.reached.iter().map(|r| root.join(r)));
        let is_fresh = fresh.contains_key(o.file.as_path());
        for p in std::iter::once(&o.file).chain(&o.reached) {
            // Evaluated now: the bytes evaluated; from the cache: the content its key matched.
            let h = if is_fresh { o.hashes.get(p).copied() } else { cache.hashes.get(p).copied().flatten() };
            // A path seen with two different contents has no hash.
            hashes
                .entry(p.as_path())
                .and_modify(|known| {
                    if *known != h {
                        *known = None
                    }
                })
                .or_insert(h);
        }
        report.probes.extend(o.probes.iter().cloned());
    }
    report.hashes = path_map(hashes.into_iter().map(|(p, h)| (p.to_path_buf(), h)));
    // New entries for the files evaluated without error; none for files no longer discovered.
    let discovered: HashSet<&PathBuf> = files.all().collect();
    let before = cache.entries.len();
    cache.entries.retain(|f, _| discovered.contains(f));
    cache.dirty |= cache.entries.len() != before;
    let by_file: HashMap<&Path, &FileOutcome> = outcomes.iter().map(|o| (o.file.as_path(), *o)).collect();
    let audit_set: HashSet<&PathBuf> = files.audits.iter().collect();
    let mut global = blake3::Hasher::new();
    global.update(&base);
    let mut audit_ok = true;
    for a in &files.audits {
        match by_file.get(a.as_path()) {
            Some(o) if !o.failed => {
                let reached: Vec<PathBuf> = o.reached.iter().cloned().collect();
                let probes: Vec<PathBuf> = o.probes.iter().cloned().collect();
                let is_fresh = fresh.contains_key(a.as_path());
                let key = LoadCache::key(&mut cache.hashes, root, &base, a, &reached, &probes, is_fresh.then_some(&o.hashes));
                global.update(&key);
                if is_fresh {
                    cache.entries.insert(a.clone(), Entry { key, reached, probes, defines: o.defines, models: o.models.clone() });
                    cache.dirty = true;
                }
            }
            _ => audit_ok = false,
        }
    }
    let g = *global.finalize().as_bytes();
    if audit_ok {
        for o in &evaluated {
            if o.failed || audit_set.contains(&o.file) {
                continue;
            }
            let reached: Vec<PathBuf> = o.reached.iter().cloned().collect();
            let probes: Vec<PathBuf> = o.probes.iter().cloned().collect();
            let key = LoadCache::key(&mut cache.hashes, root, &g, &o.file, &reached, &probes, Some(&o.hashes));
            cache.entries.insert(o.file.clone(), Entry { key, reached, probes, defines: o.defines, models: o.models.clone() });
            cache.dirty = true;
        }
    }
    for m in outcomes.iter().flat_map(|o| &o.models) {
        if let crate::core::Kind::Seed(s) = &m.kind {
            report.inputs.insert(crate::seed::resolve(root, &s.path));
        }
    }
    // Every outcome, owned, in `files` order (models are moved, not copied, into the result).
    let mut owned: HashMap<PathBuf, FileOutcome> = cached.into_iter().chain(evaluated).map(|o| (o.file.clone(), o)).collect();
    let all: Vec<FileOutcome> = files.all().filter_map(|f| owned.remove(f)).collect();
    (finish(root, all, errors, &[], &files.audits), report)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn path_order_is_paths_own_order_and_the_sets_equal_sets_built_one_path_at_a_time() {
        let paths = [
            "a",
            "a/b",
            "a-b",
            "a.b",
            "a/b/c",
            "a/b-c",
            "a/bc",
            "ab",
            "a/",
            "a//b",
            "a/./b",
            "./a",
            "/a",
            "/a/b",
            "b",
            "A",
            "a/b/",
            "é/x",
            "a/\\x",
            "",
            "models/l01/f00002.lua",
            "models/l01/f00010.lua",
            "models/l01-x/f.lua",
            "models/l010/f.lua",
            "models/l1/f.lua",
        ];
        let clean = |p: &str| !p.is_empty() && !p.split('/').skip(1).any(|c| c.is_empty() || c == ".") && !p.starts_with("./");
        for a in paths {
            for b in paths {
                if clean(a) && clean(b) {
                    assert_eq!(path_order(Path::new(a), Path::new(b)), Path::new(a).cmp(Path::new(b)), "{a:?} vs {b:?}");
                }
            }
        }
        // Unclean paths too: the set and the map equal those built one path at a time.
        let mut shuffled: Vec<PathBuf> = paths.iter().rev().chain(paths.iter()).map(PathBuf::from).collect();
        shuffled.rotate_left(7);
        let one_by_one: BTreeSet<PathBuf> = shuffled.iter().fold(BTreeSet::new(), |mut s, p| {
            s.insert(p.clone());
            s
        });
        let set = path_set(shuffled.iter().cloned());
        assert_eq!(set, one_by_one);
        assert_eq!(set.iter().collect::<Vec<_>>(), one_by_one.iter().collect::<Vec<_>>());
        let map = path_map(shuffled.iter().enumerate().map(|(i, p)| (p.clone(), i)));
        let mut expected = BTreeMap::new();
        for (i, p) in shuffled.iter().enumerate() {
            expected.insert(p.clone(), i);
        }
        assert_eq!(map.into_iter().collect::<Vec<_>>(), expected.into_iter().collect::<Vec<_>>());
    }

    /// Writes `text` to `rel` under `root`, creating its directories (shared by the session's tests).
    pub(crate) fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs_err::create_dir_all(p.parent().unwrap()).unwrap();
        fs_err::write(p, text).unwrap();
    }

    fn lua_model(n: u32) -> String {
        format!(
            "local u = require(\"lib.util\")\ndefine_model {{ name = \"s.a\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT {n} + \" .. u.n .. \" AS x\" }}\n"
        )
    }

    fn sql_model(n: u32) -> String {
        format!("-- name: s.b\n-- kind: full\n-- schema: y integer\nSELECT {n} AS y\n")
    }

    fn load(config: &Config, cache: &mut LoadCache, between: &mut dyn FnMut()) -> (String, Vec<PathBuf>) {
        let files = Discovered::of(config).unwrap();
        let (models, report) = load_project_with(config, &files, cache, between);
        (format!("{:?}", models.unwrap()), report.evaluated)
    }

    /// Loader threads change nothing: a project of many Lua and `.sql` files (modules required
    /// by several files, a Lua audit file, errors of every kind in several files) evaluates to
    /// the same outcomes, in the same order, and the same errors, in the same order, on one
    /// thread and on several; and the load ends with the same models or errors.
    #[test]
    fn parallel_evaluation_equals_sequential_evaluation() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "audits/checks.lua",
            "define_audit { name = \"positive\", params = { \"column\" }, query = function(self, a) return ('SELECT * FROM %s WHERE %s < 0'):format(self, a.column) end }\n",
        );
        write(root, "lib/util.lua", "local M = { n = 7 }\nfunction M.col(c) return c .. ' AS ' .. c end\nreturn M\n");
        write(root, "lib/bad.lua", "return { n = 1 } +\n");
        let mut models = Vec::new();
        for i in 0..70u32 {
            let (rel, text) = match i % 10 {
                // A syntax error, a runtime error with a line, an invalid spec, a failing require.
                3 => (format!("models/f{i:03}.lua"), format!("local x = \ndefine_model {{ name = \"s.m{i}\"\n")),
                5 => (format!("models/f{i:03}.lua"), format!("local u = require(\"lib.util\")\n\nerror(\"boom {i}\")\n")),
                7 => (
                    format!("models/f{i:03}.lua"),
                    format!("define_model {{ name = \"s.m{i}\", kind = kind.fuul(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT 1 AS x\" }}\n"),
                ),
                9 if i < 40 => (format!("models/f{i:03}.lua"), "local b = require(\"lib.bad\")\n".to_string()),
                // `.sql` files, one of them broken.
                1 => (format!("models/f{i:03}.sql"), format!("-- name: q.m{i}\n-- kind: full\n-- schema: y integer\nSELECT {i} AS y\n")),
                8 if i < 30 => (format!("models/f{i:03}.sql"), format!("-- name: q.m{i}\n-- kind: fulll\nSELECT {i} AS y\n")),
                // Models through a shared module, a file printing, a global assignment.
                _ => (
                    format!("models/f{i:03}.lua"),
                    format!(
                        "local u = require(\"lib.util\")\nprint(\"f{i}\")\nu.n = u.n + {i}\nstring.format = nil\ndefine_model {{ name = \"s.m{i}\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT \" .. u.n .. \" AS x\", audits = {{ audit.positive(\"x\") }} }}\n"
                    ),
                ),
            };
            write(root, &rel, &text);
            models.push(PathBuf::from(rel));
        }
        // A duplicate model name across files.
        write(
            root,
            "models/f070.lua",
            "define_model { name = \"s.m0\", kind = kind.view(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 2 AS x\" }\n",
        );
        models.push(PathBuf::from("models/f070.lua"));
        let audits = vec![PathBuf::from("audits/checks.lua")];
        let show = |(outcomes, tests, errors): (Vec<FileOutcome>, Vec<TestSpec>, Vec<LoadError>)| {
            assert!(tests.is_empty());
            let shown = format!("{outcomes:#?}\n{errors:#?}");
            let files: Vec<FileOutcome> =
                order(&outcomes.iter().collect::<Vec<_>>(), &Discovered { audits: audits.clone(), models: models.clone() }).into_iter().cloned().collect();
            let loaded = match finish(root, files, errors, &[], &audits) {
                Ok(m) => format!("{m:#?}"),
                Err(e) => format!("{e}"),
            };
            (shown, loaded)
        };
        let (one, one_loaded) = show(evaluate_on(root, &audits, &audits, &models, &[], 1));
        assert!(one.contains("boom 15") && one.contains("lib/bad.lua") && one.contains("fuul") && one.contains("fulll"), "{one}");
        assert!(one_loaded.contains("boom 15") && one_loaded.contains("fulll"), "{one_loaded}");
        for threads in [2, 3, 5] {
            let (many, many_loaded) = show(evaluate_on(root, &audits, &audits, &models, &[], threads));
            assert_eq!(many, one, "{threads} threads");
            assert_eq!(many_loaded, one_loaded, "{threads} threads");
        }
    }

    /// A directory replaced as a whole (`mv lib lib_old && mv lib_new lib`) is reported as one
    /// event on the directory: the files under it are read again.
    #[test]
    fn forgetting_a_directory_forgets_the_files_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "lib/util.lua", "return { n = 1 }\n");
        write(root, "libx.lua", "return { n = 1 }\n");
        let mut cache = LoadCache::in_memory();
        let before = cache.content_hash(root, Path::new("lib/util.lua"));
        let other = cache.content_hash(root, Path::new("libx.lua"));
        write(root, "lib/util.lua", "return { n = 2 }\n");
        write(root, "libx.lua", "return { n = 2 }\n");
        cache.forget([Path::new("lib")]);
        assert_ne!(cache.content_hash(root, Path::new("lib/util.lua")), before, "a file under the changed directory is read again");
        assert_eq!(cache.content_hash(root, Path::new("libx.lua")), other, "a sibling sharing a name prefix stays memoized");
    }

    /// A file saved while the load evaluates it: the entry is keyed by the bytes evaluated, so
    /// the next load evaluates the new content instead of trusting the old models.
    #[test]
    fn a_file_changed_during_evaluation_is_evaluated_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "efmesh.toml", "[project]\nmodels = [\"models/**/*.lua\", \"models/**/*.sql\"]\n");
        write(root, "lib/util.lua", "return { n = 10 }\n");
        write(root, "models/a.lua", &lua_model(1));
        write(root, "models/b.sql", &sql_model(1));
        let config = Config::load(&root.join("efmesh.toml")).unwrap();
        let mut cache = LoadCache::in_memory();
        let (models, _) = load(&config, &mut cache, &mut || {
            write(root, "lib/util.lua", "return { n = 20 }\n");
            write(root, "models/b.sql", &sql_model(2));
        });
        assert!(models.contains("SELECT 1 + 10 AS x") && models.contains("SELECT 1 AS y"), "{models}");
        // A new process (no memo): both files are evaluated again and their new content seen.
        cache.forget_all();
        let (models, evaluated) = load(&config, &mut cache, &mut || {});
        assert_eq!(evaluated, vec![PathBuf::from("models/a.lua"), PathBuf::from("models/b.sql")]);
        assert!(models.contains("SELECT 1 + 20 AS x") && models.contains("SELECT 2 AS y"), "{models}");
        // And then trusted.
        cache.forget_all();
        let (_, evaluated) = load(&config, &mut cache, &mut || {});
        assert!(evaluated.is_empty(), "{evaluated:?}");
    }
}
