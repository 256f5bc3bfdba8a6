//! The Rhai host: the same model API as Lua (`define_model`, `ref`, `cols`, `kind::…`,
//! `import`), over the same language-neutral [`builder`](super::builder).
//!
//! # Sandbox
//!
//! The engine starts from [`Engine::new_raw`] and gets only pure packages: the language core,
//! arithmetic, logic, math, strings, arrays, maps, bit fields, function pointers and iterators.
//! The crate is built with `no_time`, so there is no `timestamp`; `sleep` is shadowed by a function
//! that refuses; there is no file or network access, no randomness, and `eval` is a disabled
//! keyword. `print` and `debug` go to `tracing` (stderr), never to stdout. `import` resolves only
//! `.rhai` files inside the project (checked again after following symlinks), evaluating each
//! imported file once per top-level file that reaches it (never shared between two top-level
//! files: see [`super::loader`]), with cycle detection.
//!
//! Limits (see the constants): operations, call depth, expression depth, string, array and map
//! sizes, variables, functions, imports, file size, and per file a wall-clock budget and a cap on
//! resident-memory growth, both polled by `on_progress`; so an infinite loop, a memory bomb, deep
//! recursion or a gigantic string is a load error naming the file, well within a second. Once a
//! budget is spent the evaluation is *tripped*: `on_progress` terminates every later operation
//! (Rhai's `try`/`catch` cannot catch a termination, and the host's own catch points, such as an
//! audit body's errors, re-raise it). Native functions are bounded by the size limits, except
//! `pad` with an empty padding string, which would loop forever and is refused. What a file may
//! print is capped, and the [watchdog](super::watchdog) ends the process if an evaluation is
//! stuck in one operation. The calls efmesh makes to check that audit bodies keep no state run
//! outside the file's budget, each audit use's under a budget of its own ([`State::verifying`]).
//! The
//! host runs on its own thread with a large stack so that nothing a script builds within the
//! limits can overflow it, and a panic inside the interpreter becomes a load error rather than a
//! crash.
//!
//! # Isolation and determinism
//!
//! Every file is evaluated in a fresh [`Scope`]; the API is registered natively and the kind
//! constructors live in the static module `kind` (from `stdlib/rhai/kind.rhai`), so no file can
//! alter what another file sees. A file's top-level variables (and its functions) are what
//! another file gets from `import "file" as alias`. Rhai maps iterate in key order, and nothing
//! reads the clock or a random source, so the same files give the same models run after run.
//!
//! # Errors
//!
//! Load errors carry file:line (the column and the Rhai call stack follow in the message as
//! `at file:line:col` lines). `define_model` records builder errors and keeps evaluating, like
//! the Lua host, so one load reports many problems.

mod audits;
mod convert;
mod errors;
mod resolver;

use super::builder::{Site, Sites, build_model};
use super::sandbox::{Definitions, FileOutcome, PrintCap, Reached};
use crate::core::fragment::{ColsSite, RefSite};
use crate::core::{LoadError, Location, Model, ModelName};
use ::rhai::packages::{BasicArrayPackage, BasicMapPackage, BasicMathPackage, BitFieldPackage, CorePackage, LogicPackage, MoreStringPackage, Package};
use ::rhai::{Array, Dynamic, Engine, EvalAltResult, FnPtr, ImmutableString, Map, Module, NativeCallContext, Position, Scope};
use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Wall-clock budget for evaluating one file, including what it imports. Below one second so a
/// runaway file is reported within one second of the load starting.
pub const FILE_BUDGET: Duration = Duration::from_millis(500);
/// Operations one evaluation (a file, or one imported file) may perform: a few hundred
/// milliseconds of work, thousands of times what a model file needs.
pub const MAX_OPERATIONS: u64 = 5_000_000;
/// Growth of the process's resident memory allowed while one file is evaluated (Linux, where
/// `/proc/self/status` tells it). Rhai's size limits do not count values captured by closures or
/// curried into function pointers; this bounds them too.
pub const MAX_MEMORY_GROWTH: u64 = 512 << 20;
/// Nested function calls.
pub const MAX_CALL_LEVELS: usize = 64;
/// Nesting of expressions at the top level of a file (parse-time guard).
pub const MAX_EXPR_DEPTH: usize = 64;
/// Nesting of expressions inside function bodies (parse-time guard).
pub const MAX_FN_EXPR_DEPTH: usize = 32;
/// Bytes of one string, and of all strings held in one array or map.
pub const MAX_STRING_SIZE: usize = 1 << 20;
/// Elements of one array, counting nested arrays' elements too.
pub const MAX_ARRAY_SIZE: usize = 100_000;
/// Entries of one map, counting nested maps' entries too.
pub const MAX_MAP_SIZE: usize = 100_000;
/// `import` statements executed by one evaluation.
pub const MAX_MODULES: usize = 256;
/// Variables in scope at once.
pub const MAX_VARIABLES: usize = 1_000;
/// Functions defined by one file.
pub const MAX_FUNCTIONS: usize = 1_000;
/// Size of one `.rhai` file, in bytes.
pub const MAX_FILE_SIZE: u64 = 4 << 20;
/// `cols(parent, …)` accepts up to this many column arguments (each a name or an array of names).
pub const MAX_COLS_ARGS: usize = 16;

/// Stack of the host thread: large, so that the interpreter's recursion within the limits above
/// (nested data being sized, copied or dropped) never reaches the guard page.
pub(crate) const STACK_SIZE: usize = 256 << 20;
/// How often (in operations) `on_progress` reads the clock: often, because one native call on
/// data at the size limits can take milliseconds.
const CLOCK_EVERY: u64 = 16;
/// How often (in operations) `on_progress` reads the resident memory.
const MEMORY_EVERY: u64 = 1024;
/// Source name of the built-in kind module, as it appears in tracebacks.
const KIND_SOURCE_NAME: &str = "efmesh:kind.rhai";
const KIND_SOURCE: &str = include_str!("../../stdlib/rhai/kind.rhai");
/// What `sleep()` says.
const SLEEP_REFUSED: &str = "`sleep` is not available: efmesh models run sandboxed, without a clock";
/// The value `on_progress` terminates with when the budget is spent.
const BUDGET_TAG: &str = "efmesh:budget";
/// The value `on_progress` terminates with when the budget of the verification calls of an
/// audit use ([`State::verifying`]) is spent.
const VERIFY_TAG: &str = "efmesh:verify-budget";
/// The wall-clock budget of the verification calls of one audit use ([`State::verifying`]):
/// [`super::audits::VERIFY_FACTOR`] times [`FILE_BUDGET`].
const VERIFY_BUDGET: Duration = FILE_BUDGET.saturating_mul(super::audits::VERIFY_FACTOR);
/// The value `on_progress` terminates with when memory grew too much.
const MEMORY_TAG: &str = "efmesh:memory";

/// Every embedded Rhai source the host evaluates (the load cache's key covers them).
pub(crate) fn stdlib_sources() -> [&'static str; 2] {
    [KIND_SOURCE, audits::BUILTINS]
}

/// A module as Rhai shares it (`Rc`: the crate is built without `sync`).
type SharedModule = Rc<Module>;

/// A model handle returned by `define_model`: pass it to `ref()` and `cols()`; `.name` is its
/// `"schema.table"` name.
#[derive(Debug, Clone)]
struct Handle(ModelName);

/// `define_macro` or `define_signal` definitions: name → where, the function and the functions of
/// its file.
type Defined = std::collections::BTreeMap<String, (Location, FnPtr, Rc<::rhai::AST>)>;

#[derive(Default)]
struct State {
    root: PathBuf,
    models: Vec<Model>,
    errors: Vec<LoadError>,
    sites: Sites,
    /// Files evaluated so far (relative, normalised) → their module.
    modules: HashMap<PathBuf, ModuleState>,
    /// Files being evaluated, innermost last.
    stack: Vec<PathBuf>,
    /// The text of each file of the top-level evaluation in progress, as evaluated: where a
    /// model's query is written ([`super::builder::script_query_lines`]).
    sources: HashMap<PathBuf, Rc<str>>,
    /// True while test files are evaluated: `define_test` works, `define_model` refuses.
    testing: bool,
    /// Unit tests defined by test files.
    tests: Vec<super::test_spec::TestSpec>,
    /// `define_audit` definitions (built-ins first).
    audits: super::audits::Registry<audits::Body>,
    /// The SQL each audit body answered for each arguments, for the whole life of the
    /// interpreter (a later use must get the same: [`super::audits::finish_pure`]).
    audit_answers: super::audits::Answers,
    /// The functions of every evaluated file (audit bodies run with those of their file).
    asts: HashMap<PathBuf, Rc<::rhai::AST>>,
    /// Why the top-level evaluation in progress was terminated ([`BUDGET_TAG`],
    /// [`VERIFY_TAG`] or [`MEMORY_TAG`]): once set, every later operation is terminated too.
    tripped: Rc<Cell<Option<&'static str>>>,
    /// What each file printed.
    printed: PrintCap,
    /// Which files defined something, and which are libraries.
    definitions: Definitions,
    /// What the top-level evaluation in progress reached through `import`.
    reached: Option<Reached>,
    /// blake3 of the bytes each module was last evaluated from (a shared module, imported by an
    /// audit definition file, is reused by later top-level files, which are keyed by these bytes).
    evaluated: HashMap<PathBuf, [u8; 32]>,
    /// The module of each file's first evaluation, for test files (which `import` model files
    /// for their handles once every model file was evaluated).
    first_modules: HashMap<PathBuf, SharedModule>,
    /// A limit an audit body hit (a system exception), to raise again at the use.
    uncaught: Option<Box<EvalAltResult>>,
    /// `define_macro` definitions: name → where, the function and the functions of its file.
    macros: Defined,
    /// `define_signal` definitions: name → where, the function and the functions of its file.
    signals: Defined,
    /// True once model (or test) files are evaluated: `define_macro` refuses.
    past_definitions: bool,
    /// The interpreters of the definition files of every language (macro calls, audits
    /// defined in another language); `None` in a [`serve`]d interpreter.
    foreign: Option<std::sync::Arc<super::foreign::Foreign>>,
    /// True while a macro's function runs ([`call_macro`]): `ref`, `cols` and `define_model`
    /// refuse ([`refused_in_macro`]).
    in_macro: bool,
    /// In a [`serve`]d interpreter, what each macro (audit body, signal: [`note_captured`])
    /// called since the state last changed had captured, before its first call ([`captured`]):
    /// compared after each call.
    captured: HashMap<String, Vec<String>>,
    /// In a [`serve`]d interpreter, the first write a call made to what it captured
    /// ([`super::foreign::write_cause`]): the state is no longer what the macro files define,
    /// so every later request of the load is refused ([`super::foreign::refuse_after_write`]).
    poisoned: Option<String>,
    /// The file defining the audit body, macro or signal running: efmesh calls their closure
    /// with no source, so an error of a host function inside it is placed in this file
    /// ([`refuse_fn_ptr_text`]). `None` outside such a call.
    body_file: Option<PathBuf>,
    /// How many `print`/`debug` calls of an array or a map are converting it to text
    /// ([`printed_text`]): a closure inside is written `Fn(closure)` and not refused (what is
    /// printed goes to the log, never to SQL).
    printing: Rc<Cell<usize>>,
    /// End of the current top-level file's budget (the one [`Refs::deadline`] holds).
    deadline: Rc<Cell<Option<Instant>>>,
    /// The watchdog's entry of the top-level evaluation in progress ([`watched`]).
    watch: Option<super::watchdog::Watch>,
    /// The time the verification calls of audit bodies took so far in the top-level
    /// evaluation in progress ([`State::verifying`]: each use's calls get a budget of their
    /// own); `None` outside an evaluation and while they run.
    verified: Option<Duration>,
    /// True while the verification calls of an audit use run ([`State::verifying`]): a spent
    /// budget is then theirs, and `on_progress` terminates with [`VERIFY_TAG`].
    verifying: Rc<Cell<bool>>,
}

impl State {
    /// Runs `f`, the verification calls of one audit use ([`audits::render`]), outside the
    /// file's budget: under a budget of their own for this use ([`VERIFY_BUDGET`], whatever
    /// earlier uses' calls took), so that a pure body that fits the file's budget once per use
    /// always loads; a budget they spend terminates with [`VERIFY_TAG`], which says so. The
    /// time they take is given back to the file (its deadline moves by as much, and its
    /// watchdog entry allows for the time earlier uses' calls took plus this use's whole
    /// budget); a verification budget spent trips the file. Outside an evaluation (or inside
    /// verification calls) `f` just runs.
    fn verifying<T>(st: &RefCell<State>, f: impl FnOnce() -> T) -> T {
        let (deadline, verified, verifying) = {
            let mut s = st.borrow_mut();
            (s.deadline.clone(), s.verified.take(), s.verifying.clone())
        };
        let Some(verified) = verified else { return f() };
        // At most VERIFY_TOTAL_FACTOR times the file's budget in all for the file's uses.
        let own = VERIFY_BUDGET.min((FILE_BUDGET * super::audits::VERIFY_TOTAL_FACTOR).saturating_sub(verified));
        if let Some(watch) = &st.borrow().watch {
            watch.allow_extra(verified + own);
        }
        let file = deadline.get();
        let started = Instant::now();
        deadline.set(Some(started + own));
        verifying.set(true);
        let out = f();
        verifying.set(false);
        let spent = started.elapsed();
        deadline.set(file.map(|d| d + spent));
        st.borrow_mut().verified = Some(verified + spent);
        out
    }

    /// The termination to raise again when the evaluation in progress was tripped.
    fn tripped(&self) -> Option<Box<EvalAltResult>> {
        self.tripped.get().map(|tag| Box::new(EvalAltResult::ErrorTerminated(Dynamic::from(tag), Position::NONE)))
    }

    /// Passes on to the file importing `rel` (the innermost file being evaluated) the credit for
    /// the models `rel` defined, itself or through what it imported, so that a top-level file
    /// whose models are all defined by the files it imports is not a file that "defines no
    /// model". Also when `rel` was evaluated earlier and its module is shared.
    fn credit_importer(&mut self, rel: &Path) {
        if self.definitions.defining.contains(rel)
            && let Some(importer) = self.stack.last().cloned()
        {
            self.definitions.defining.insert(importer);
        }
    }

    /// Notes that the file being evaluated defines something.
    fn defines(&mut self) {
        if let Some(file) = self.stack.last().cloned() {
            self.definitions.defining.insert(file);
        }
    }
}

enum ModuleState {
    Loading,
    Done(SharedModule),
    Failed,
}

/// What the engine's callbacks share with the host.
#[derive(Clone)]
struct Refs {
    state: Rc<RefCell<State>>,
    /// End of the current top-level file's budget.
    deadline: Rc<Cell<Option<Instant>>>,
    /// Resident memory watch for the current top-level file.
    memory: Rc<MemoryGuard>,
}

/// Watches the process's resident memory (Linux); inert elsewhere.
struct MemoryGuard {
    status: Option<fs_err::File>,
    /// Resident bytes when the current top-level file started.
    baseline: Cell<Option<u64>>,
}

impl MemoryGuard {
    fn new() -> Self {
        let status = if cfg!(target_os = "linux") { fs_err::File::open("/proc/self/status").ok() } else { None };
        Self { status, baseline: Cell::new(None) }
    }

    /// `VmRSS` of `/proc/self/status`, in bytes.
    fn resident(&self) -> Option<u64> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            let mut buf = [0u8; 4096];
            let n = self.status.as_ref()?.file().read_at(&mut buf, 0).ok()?;
            let text = std::str::from_utf8(&buf[..n]).ok()?;
            let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kb: u64 = line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kb * 1024)
        }
        #[cfg(not(unix))]
        {
            None
        }
    }

    /// Starts (or, with `false`, stops) watching.
    fn arm(&self, on: bool) {
        self.baseline.set(if on { self.resident() } else { None });
    }

    fn exceeded(&self) -> bool {
        match (self.baseline.get(), self.resident()) {
            (Some(base), Some(now)) => now.saturating_sub(base) > MAX_MEMORY_GROWTH,
            _ => false,
        }
    }
}

/// What one run of the Rhai host produced.
#[derive(Debug, Default)]
pub struct HostRun {
    /// One outcome per top-level file (audit, model and test files), in evaluation order.
    pub outcomes: Vec<FileOutcome>,
    /// Unit tests defined by the test files.
    pub tests: Vec<super::test_spec::TestSpec>,
    /// Every error recorded.
    pub errors: Vec<LoadError>,
}

/// Evaluates Rhai files (paths relative to `root`): the audit definition files `audits` first
/// (their modules shared by every later file), then each model file of `files` in isolation
/// (what it imports is evaluated for it alone), then the test files `tests` (which may
/// `import` model files, seeing them as their first evaluation left them) with `define_test`
/// available and `define_model` refused. The interpreter runs on a dedicated thread; see the
/// module docs for the sandbox.
pub fn run_host(root: &Path, audits: &[PathBuf], files: &[PathBuf], tests: &[PathBuf], foreign: Option<std::sync::Arc<super::foreign::Foreign>>) -> HostRun {
    let root = root.to_path_buf();
    let (audits, files, tests) = (audits.to_vec(), files.to_vec(), tests.to_vec());
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let spawned = std::thread::Builder::new()
        .name("efmesh-rhai".into())
        .stack_size(STACK_SIZE)
        .spawn(move || tracing::dispatcher::with_default(&dispatch, || load_on_this_thread(&root, &audits, &files, &tests, foreign)));
    let fatal = |msg: String| HostRun { errors: vec![LoadError::new(None, None, msg)], ..HostRun::default() };
    match spawned {
        Err(e) => fatal(format!("cannot start the Rhai host: {e}")),
        Ok(handle) => match handle.join() {
            Ok(result) => result,
            Err(panic) => fatal(format!("the Rhai host crashed: {}", panic_message(&*panic))),
        },
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic.downcast_ref::<&str>().map(|s| (*s).to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into())
}

fn load_on_this_thread(
    root: &Path,
    audits: &[PathBuf],
    files: &[PathBuf],
    tests: &[PathBuf],
    foreign: Option<std::sync::Arc<super::foreign::Foreign>>,
) -> HostRun {
    let state = State { root: root.to_path_buf(), foreign, ..State::default() };
    let refs = Refs { deadline: state.deadline.clone(), state: Rc::new(RefCell::new(state)), memory: Rc::new(MemoryGuard::new()) };
    let fatal = |e: LoadError| HostRun { errors: vec![e], ..HostRun::default() };
    let engine = match new_engine(&refs) {
        Ok(e) => e,
        Err(msg) => return fatal(LoadError::new(None, None, format!("cannot start the Rhai host: {msg}"))),
    };
    if let Err(e) = audits::load_builtins(&engine, &refs.state) {
        return fatal(e);
    }
    let mut outcomes = Vec::new();
    let mut shared: HashSet<PathBuf> = HashSet::new();
    let mut base_audits = None;
    let phases = [(audits, false), (files, false), (tests, true)];
    'phases: for (phase, (list, testing)) in phases.into_iter().enumerate() {
        {
            let mut s = refs.state.borrow_mut();
            if phase == 1 {
                // Audit definition files (and what they import) are shared by every model file.
                shared = s.modules.keys().cloned().collect();
                base_audits = Some(s.audits.clone());
                s.past_definitions = true;
                // Their audits' answers are remembered from now on (`super::audits::finish_pure`).
                let st = &mut *s;
                st.audit_answers.share(&st.audits);
            }
            if testing {
                s.testing = true;
                for (rel, m) in std::mem::take(&mut s.first_modules) {
                    if !matches!(s.modules.get(&rel), Some(ModuleState::Done(_))) {
                        s.modules.insert(rel, ModuleState::Done(m));
                    }
                }
            }
        }
        for file in list {
            let rel = resolver::normalize(file).unwrap_or_else(|| file.clone());
            let (models_before, errors_before) = {
                let mut s = refs.state.borrow_mut();
                if !testing {
                    s.modules.retain(|k, _| shared.contains(k));
                    // Audits a module defines are defined again when another file imports it.
                    if let Some(base) = &base_audits {
                        s.audits = base.clone();
                    }
                }
                s.reached = Some(Reached::default());
                (s.models.len(), s.errors.len())
            };
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // Errors are recorded by `evaluate`; the returned module matters to importers only.
                let _ = evaluate(&engine, &refs, &rel);
            }));
            if let Err(panic) = run {
                let msg = format!("the Rhai interpreter panicked: {}", panic_message(&*panic));
                if let Ok(mut s) = refs.state.try_borrow_mut() {
                    s.errors.push(LoadError::new(Some(Location { file: rel.clone(), line: 0 }), None, msg));
                }
                // The interpreter's state is unknown after a panic: stop here.
                outcomes.push(FileOutcome { file: rel, failed: true, ..FileOutcome::default() });
                break 'phases;
            }
            let mut s = refs.state.borrow_mut();
            let reached = s.reached.take().unwrap_or_default();
            let models = s.models.split_off(models_before);
            let failed = s.errors.len() > errors_before || !matches!(s.modules.get(&rel), Some(ModuleState::Done(_)));
            let defines = s.definitions.defining.contains(&rel);
            let mut outcome = FileOutcome { file: rel, models, reached: reached.files, probes: reached.probes, hashes: reached.hashes, defines, failed };
            // What its macro calls and audits rendered through another interpreter read.
            super::foreign::add_call_reads(&mut outcome);
            outcomes.push(outcome);
        }
    }
    drop(engine);
    let mut s = refs.state.borrow_mut();
    HostRun { outcomes, tests: std::mem::take(&mut s.tests), errors: std::mem::take(&mut s.errors) }
}

/// The Rhai interpreter of [`super::foreign::Foreign`]: evaluates the Rhai definition files
/// `files` (after the built-ins), sends what they define on `init`, then answers requests until
/// `rx` closes. Errors of the files are not reported here (the loader's own evaluation reports
/// them); a host that cannot start sends nothing. Runs on a thread with [`STACK_SIZE`].
/// The files a served request (a macro call, an audit rendered) reached through `import`, for
/// the caller's own inputs ([`super::foreign::take_call_reads`]).
fn call_reads(refs: &Refs) -> Reached {
    refs.state.borrow_mut().reached.take().unwrap_or_default()
}

pub(crate) fn serve(
    root: &Path,
    files: &[PathBuf],
    init: std::sync::mpsc::Sender<super::foreign::Defs>,
    rx: std::sync::mpsc::Receiver<super::foreign::Request>,
) {
    use super::foreign::{Defs, MacroInfo, Request};
    let state = State { root: root.to_path_buf(), ..State::default() };
    let refs = Refs { deadline: state.deadline.clone(), state: Rc::new(RefCell::new(state)), memory: Rc::new(MemoryGuard::new()) };
    let Ok(engine) = new_engine(&refs) else { return };
    if audits::load_builtins(&engine, &refs.state).is_err() {
        return;
    }
    for file in files {
        let rel = resolver::normalize(file).unwrap_or_else(|| file.clone());
        refs.state.borrow_mut().reached = Some(Reached::default());
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = evaluate(&engine, &refs, &rel);
        }));
        if run.is_err() {
            return;
        }
    }
    let defs = {
        let mut s = refs.state.borrow_mut();
        s.past_definitions = true;
        s.errors.clear();
        let st = &mut *s;
        st.audit_answers.share(&st.audits);
        Defs {
            macros: s.macros.iter().map(|(name, (location, _, _))| MacroInfo { name: name.clone(), location: location.clone() }).collect(),
            audits: s.audits.defs().cloned().collect(),
            signals: s.signals.iter().map(|(name, (location, _, _))| MacroInfo { name: name.clone(), location: location.clone() }).collect(),
        }
    };
    if init.send(defs).is_err() {
        return;
    }
    // Macros checked for state kept between calls (their first call, twice).
    let checked: RefCell<std::collections::HashSet<String>> = RefCell::new(std::collections::HashSet::new());
    while let Ok(req) = rx.recv() {
        // After a write (by a macro, an audit body or a signal) the state is no longer what the
        // files define: nothing more is answered from it in this load ([`written`]).
        let poisoned = refs.state.borrow().poisoned.clone();
        if let Some(cause) = poisoned {
            super::foreign::refuse_after_write(req, &cause);
            continue;
        }
        // Whether the request wrote what it captured: then its answer is that write, not an
        // error a host function recorded meanwhile.
        let wrote = || refs.state.borrow().poisoned.is_some();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match req {
            // A host function's error recorded while the request ran (a closure converted to
            // text, [`refuse_fn_ptr_text`]) is its answer: no file evaluation here reports it.
            Request::Signal { name, intervals, args, reply } => {
                let verdict = call_signal(&engine, &refs, &name, &intervals, &args, &reply);
                let verdict = match recorded_error(&refs) {
                    Some(e) if !wrote() => Err(format!("signal `{name}` failed: {}", located(&e))),
                    _ => verdict,
                };
                let _ = reply.send(super::foreign::SignalMsg::Done(verdict));
            }
            Request::Macro { name, args, reply } => {
                refs.state.borrow_mut().reached = Some(Reached::default());
                let out = if checked.borrow_mut().insert(name.clone()) {
                    let first = call_macro(&engine, &refs, &name, args.clone());
                    super::foreign::same_twice(&name, first, || call_macro(&engine, &refs, &name, args))
                } else {
                    call_macro(&engine, &refs, &name, args)
                };
                let out = match recorded_error(&refs) {
                    Some(e) if !wrote() => Err(super::macros::Failure { message: format!("macro `@{name}` failed: {}", located(&e)), hint: e.hint }),
                    _ => out,
                };
                let _ = reply.send((out, call_reads(&refs)));
            }
            Request::Audit { name, positional, named, location, reply } => {
                refs.state.borrow_mut().reached = Some(Reached::default());
                let found = refs.state.borrow().audits.lookup(&name, &location);
                let out = found.and_then(|(def, body)| {
                    // The body captures what its file's macros do: checked as they are
                    // ([`note_captured`]), or a macro would read what a use of it left there.
                    let key = format!("audit {name}");
                    let who = format!("audit `{name}`");
                    note_captured(&refs, &key, &body.0);
                    let out = with_budget(&refs, &location.file, || audits::render(&engine, &refs.state, &def, &body, positional, named, &location));
                    // Compared whether the body's calls returned, raised or answered otherwise
                    // (refused as impure): a write is the error, and poisons the interpreter.
                    match written(&refs, &key, &who, &def.location, &body.0, &body.1) {
                        Some(what) => {
                            let message = super::foreign::body_state_written("audit", &name, &def.location, &what);
                            Err(LoadError::new(Some(location.clone()), None, message).with_hint(super::foreign::STATE_HINT))
                        }
                        None => out,
                    }
                });
                refs.state.borrow_mut().uncaught = None;
                let out = match recorded_error(&refs) {
                    Some(e) if !wrote() => {
                        let mut refused = LoadError::new(Some(location.clone()), None, format!("audit `{name}` failed to render its SQL: {}", located(&e)));
                        refused.hint = e.hint;
                        Err(refused)
                    }
                    _ => out,
                };
                let _ = reply.send((out, call_reads(&refs)));
            }
        }));
        if run.is_err() {
            // The interpreter's state is unknown after a panic: stop serving (callers get an error).
            return;
        }
        refs.state.borrow_mut().errors.clear();
    }
}

/// The first load error recorded while a [`serve`]d request ran (the list is emptied): a
/// refusal a host function records instead of raising ([`refuse_fn_ptr_text`]), which would
/// otherwise be lost, since a served interpreter reports no file's errors.
fn recorded_error(refs: &Refs) -> Option<LoadError> {
    std::mem::take(&mut refs.state.borrow_mut().errors).into_iter().next()
}

/// The part of a model's SQL (`query`, `pre_statements`, `post_statements`) holding a closure's
/// name ([`holds_closure_name`]), once its macro calls are expanded; `None` when none does.
fn closure_name_in_model(query: Option<&str>, spec: &serde_json::Map<String, serde_json::Value>) -> Option<&'static str> {
    if query.is_some_and(holds_closure_name) {
        return Some("query");
    }
    ["pre_statements", "post_statements"].into_iter().find(|key| {
        let statements: Vec<&serde_json::Value> = match spec.get(*key) {
            Some(serde_json::Value::Array(items)) => items.iter().collect(),
            Some(one) => vec![one],
            None => Vec::new(),
        };
        statements.iter().any(|v| v.as_str().is_some_and(holds_closure_name))
    })
}

/// `e`'s place and message, without its hint: `file:line: message`.
fn located(e: &LoadError) -> String {
    match &e.location {
        Some(at) => format!("{at}: {}", e.message),
        None => e.message.clone(),
    }
}

/// Runs `f` under a fresh budget (the file budget, the memory guard and the watchdog, `label`
/// naming the file), as a top-level evaluation would.
fn with_budget<T>(refs: &Refs, label: &Path, f: impl FnOnce() -> T) -> T {
    with_budget_of(refs, label, FILE_BUDGET, f)
}

/// [`with_budget`] with another wall-clock budget.
fn with_budget_of<T>(refs: &Refs, label: &Path, budget: Duration, f: impl FnOnce() -> T) -> T {
    refs.state.borrow().tripped.set(None);
    refs.deadline.set(Some(Instant::now() + budget));
    refs.memory.arm(true);
    watched(refs, label, budget);
    let out = f();
    refs.deadline.set(None);
    refs.memory.arm(false);
    unwatched(refs);
    out
}

/// Starts watching the top-level evaluation of `label` (the watchdog, `budget`) and gives its
/// audit bodies' verification calls their budget ([`State::verifying`]).
fn watched(refs: &Refs, label: &Path, budget: Duration) {
    let watch = super::watchdog::watch(label, budget);
    let mut s = refs.state.borrow_mut();
    s.watch = Some(watch);
    s.verified = Some(Duration::ZERO);
}

/// Ends what [`watched`] started.
fn unwatched(refs: &Refs) {
    let mut s = refs.state.borrow_mut();
    s.watch = None;
    s.verified = None;
}

/// The `db` handle a signal receives: `db.query(sql)` sends the query to the caller.
#[derive(Clone)]
struct Db(std::sync::mpsc::Sender<super::foreign::SignalMsg>);

/// Evaluates signal `name` in a [`serve`]d interpreter (see
/// [`super::foreign::Foreign::call_signal`]).
fn call_signal(
    engine: &Engine,
    refs: &Refs,
    name: &str,
    intervals: &[(String, String)],
    args: &serde_json::Map<String, serde_json::Value>,
    reply: &std::sync::mpsc::Sender<super::foreign::SignalMsg>,
) -> Result<Vec<bool>, String> {
    let found = refs.state.borrow().signals.get(name).cloned();
    let Some((at, f, ast)) = found else { return Err(format!("unknown signal `{name}`")) };
    let list: Array = intervals
        .iter()
        .map(|(start, end)| {
            let mut m = Map::new();
            m.insert("start".into(), Dynamic::from(ImmutableString::from(start.as_str())));
            m.insert("end".into(), Dynamic::from(ImmutableString::from(end.as_str())));
            Dynamic::from(m)
        })
        .collect();
    let values = vec![Dynamic::from(list), audits::json_to_dynamic(&serde_json::Value::Object(args.clone())), Dynamic::from(Db(reply.clone()))];
    // The signal captures what its file's macros do: checked as they are ([`note_captured`]).
    let key = format!("signal {name}");
    note_captured(refs, &key, &f);
    let outer = refs.state.borrow_mut().body_file.replace(at.file.clone());
    let out: Result<Dynamic, Box<EvalAltResult>> = with_budget_of(refs, &at.file, super::foreign::SIGNAL_BUDGET, || f.call(engine, &ast, values));
    let mut s = refs.state.borrow_mut();
    s.uncaught = None;
    s.body_file = outer;
    drop(s);
    // A write is refused even when the signal failed (and poisons the interpreter).
    if let Some(what) = written(refs, &key, &format!("signal `{name}`"), &at, &f, &ast) {
        return Err(super::foreign::body_state_written("signal", name, &at, &what));
    }
    let fail = |m: String| format!("signal `{name}` ({at}) {m}");
    match out {
        Ok(v) => {
            let json = convert::to_json(&v).map_err(|e| fail(format!("returned an unusable value: {e}")))?;
            super::foreign::verdicts(&json, intervals.len()).map_err(fail)
        }
        Err(e) => Err(fail(format!("failed: {}", errors::macro_message(&e, &at.file)))),
    }
}

/// The error of `function` (`ref`, `cols`, `define_model`) called while a macro runs (Rhai adds
/// the call's position); `None` outside a macro. A macro runs in the interpreter of the macro
/// files: a `ref()` marker it returned would be resolved against the calling model's own
/// references (another model, read silently).
fn refused_in_macro(st: &RefCell<State>, function: &str) -> Option<Box<EvalAltResult>> {
    st.borrow().in_macro.then(|| rt(super::macros::not_in_macros(function)))
}

/// Runs macro `name` with `args` (strings) in a [`serve`]d interpreter.
fn call_macro(engine: &Engine, refs: &Refs, name: &str, args: Vec<String>) -> Result<String, super::macros::Failure> {
    use super::foreign::{arity_message, count};
    use super::macros::Failure;
    let found = refs.state.borrow().macros.get(name).cloned();
    let Some((at, f, ast)) = found else { return Err(Failure::new(format!("unknown macro `@{name}`"))) };
    let arity = ast.iter_functions().find(|m| m.name == f.fn_name()).map(|m| m.params.len().saturating_sub(f.curry().len()));
    if let Some(n) = arity
        && n != args.len()
    {
        return Err(Failure::new(arity_message(name, &at, &count(n), args.len())));
    }
    let values: Vec<Dynamic> = args.into_iter().map(|a| Dynamic::from(ImmutableString::from(a))).collect();
    // What the closure captured, before its first call (again after the state changed).
    note_captured(refs, name, &f);
    let outer = {
        let mut s = refs.state.borrow_mut();
        s.in_macro = true;
        s.body_file.replace(at.file.clone())
    };
    let out: Result<Dynamic, Box<EvalAltResult>> = with_budget(refs, &at.file, || f.call(engine, &ast, values));
    {
        let mut s = refs.state.borrow_mut();
        s.in_macro = false;
        s.body_file = outer;
    }
    // Compared whether the call returned or raised: a write followed by an error is the write
    // (which poisons the interpreter: no later request is answered from that state).
    if let Some(what) = written(refs, name, &format!("macro `@{name}`"), &at, &f, &ast) {
        return Err(super::foreign::state_written(name, &at, &what));
    }
    match out {
        Ok(v) => match v.read_lock::<ImmutableString>() {
            // The catch-all of a closure's name reaching SQL by a route the conversions miss.
            Some(s) if holds_closure_name(s.as_str()) => Err(Failure {
                message: format!("macro `@{name}` ({at}) returned SQL holding {CLOSURE_NAME_IN_SQL}"),
                hint: Some(CLOSURE_NAME_HINT.to_string()),
            }),
            Some(s) => Ok(s.to_string()),
            None => Err(Failure::new(format!("macro `@{name}` ({at}) must return a string of SQL, got `{}`", v.type_name()))),
        },
        Err(e) => Err(Failure::new(format!("macro `@{name}` ({at}) failed: {}", errors::macro_message(&e, &at.file)))),
    }
}

/// What closure `f` captured, each variable as text (`Debug`: a shared variable's current value,
/// arrays and maps with their items, closures with what they captured in turn). A closure
/// captures the variables of its file by sharing them: whatever it writes there every later call
/// of it — and of any closure of the file capturing the same variable — sees. Rhai's `fn`
/// functions capture nothing, module variables are constants and global constants read-only,
/// so a macro can keep state between calls only there. Costs time in proportion to what it
/// captured; nothing for a closure that captures nothing.
fn captured(f: &FnPtr) -> Vec<String> {
    f.iter_curry().map(|v| format!("{v:?}")).collect()
}

/// Before a call of macro `key` (closure `f`; `audit <name>` or `signal <name>` for an audit
/// body or a signal, which capture the same variables): records what `f` captured
/// ([`captured`]) unless recorded since the state last changed.
fn note_captured(refs: &Refs, key: &str, f: &FnPtr) {
    if !f.curry().is_empty() && !refs.state.borrow().captured.contains_key(key) {
        let before = captured(f);
        refs.state.borrow_mut().captured.insert(key.to_string(), before);
    }
}

/// After a call of macro `name` (closure `f` of `ast`; `audit <name>`, `signal <name>` for the
/// others), whatever it returned or raised: the first variable it captured whose value is not
/// what it was before its first call ([`captured`]), if any. A write poisons the interpreter
/// (naming `who` — ``macro `@set` `` —, defined at `at`, and the variable: every later request of
/// the load is refused, [`serve`]) and drops every other record (the state they describe is gone).
fn written(refs: &Refs, name: &str, who: &str, at: &Location, f: &FnPtr, ast: &::rhai::AST) -> Option<String> {
    if f.curry().is_empty() {
        return None;
    }
    let now = captured(f);
    let mut s = refs.state.borrow_mut();
    let i = s.captured.get(name)?.iter().zip(&now).position(|(was, now)| was != now)?;
    s.captured.clear();
    // A closure's captured variables are the first parameters of its function.
    let variable = ast.iter_functions().find(|m| m.name == f.fn_name()).and_then(|m| m.params.get(i).map(|p| p.to_string()));
    let variable = variable.unwrap_or_else(|| format!("captured variable {}", i + 1));
    if s.poisoned.is_none() {
        s.poisoned = Some(super::foreign::write_cause(who, at, &variable));
    }
    Some(variable)
}

/// A runtime error raised by a host function; Rhai fills in the call position.
fn rt(msg: impl Into<String>) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(Dynamic::from(msg.into()), Position::NONE))
}

/// Builds the sandboxed engine with the efmesh API.
fn new_engine(refs: &Refs) -> Result<Engine, String> {
    let mut engine = Engine::new_raw();
    for module in [
        CorePackage::new().as_shared_module(),
        LogicPackage::new().as_shared_module(),
        BasicMathPackage::new().as_shared_module(),
        BitFieldPackage::new().as_shared_module(),
        BasicArrayPackage::new().as_shared_module(),
        BasicMapPackage::new().as_shared_module(),
        MoreStringPackage::new().as_shared_module(),
    ] {
        engine.register_global_module(module);
    }
    engine.disable_symbol("eval");
    engine.set_strict_variables(true);
    engine.set_fail_on_invalid_map_property(true);
    engine.set_max_operations(MAX_OPERATIONS);
    engine.set_max_call_levels(MAX_CALL_LEVELS);
    engine.set_max_expr_depths(MAX_EXPR_DEPTH, MAX_FN_EXPR_DEPTH);
    engine.set_max_string_size(MAX_STRING_SIZE);
    engine.set_max_array_size(MAX_ARRAY_SIZE);
    engine.set_max_map_size(MAX_MAP_SIZE);
    engine.set_max_modules(MAX_MODULES);
    engine.set_max_variables(MAX_VARIABLES);
    engine.set_max_functions(MAX_FUNCTIONS);

    let deadline = refs.deadline.clone();
    let memory = refs.memory.clone();
    let tripped = refs.state.borrow().tripped.clone();
    let verifying = refs.state.borrow().verifying.clone();
    engine.on_progress(move |ops| {
        if tripped.get().is_none() {
            if ops % CLOCK_EVERY == 0 && deadline.get().is_some_and(|d| Instant::now() > d) {
                tripped.set(Some(if verifying.get() { VERIFY_TAG } else { BUDGET_TAG }));
            } else if ops % MEMORY_EVERY == 0 && memory.exceeded() {
                tripped.set(Some(MEMORY_TAG));
            }
        }
        tripped.get().map(Dynamic::from)
    });
    let st = refs.state.clone();
    engine.on_print(move |text| print_capped(&st, None, None, text));
    let st = refs.state.clone();
    engine.on_debug(move |text, source, pos| print_capped(&st, source, pos.line(), text));
    engine.set_module_resolver(resolver::ProjectResolver::new(refs.clone()));

    register_api(&mut engine, refs);
    register_define_test(&mut engine, refs);
    audits::register(&mut engine, &refs.state);

    // The kind constructors: a static module compiled from the shipped stdlib source.
    let mut ast = engine.compile(KIND_SOURCE).map_err(|e| format!("{KIND_SOURCE_NAME}: {e}"))?;
    ast.set_source(KIND_SOURCE_NAME);
    let kind = Module::eval_ast_as_new(Scope::new(), &ast, &engine).map_err(|e| format!("{KIND_SOURCE_NAME}: {e}"))?;
    engine.register_static_module("kind", kind.into());
    Ok(engine)
}

/// Logs what a file printed, within the per-file cap.
fn print_capped(st: &Rc<RefCell<State>>, source: Option<&str>, line: Option<usize>, text: &str) {
    match st.try_borrow_mut() {
        Ok(mut s) => {
            let file = source.map(PathBuf::from).or_else(|| s.stack.last().cloned()).unwrap_or_default();
            s.printed.print(&file, line, text);
        }
        Err(_) => tracing::info!(file = source.unwrap_or(""), "{text}"),
    }
}

/// The file a host function was called from: the innermost script namespace with a source (a
/// function defined in an imported file reports that file), else the running file.
fn calling_file(ctx: &NativeCallContext) -> PathBuf {
    ctx.iter_namespaces()
        .filter_map(|m| m.id())
        .filter(|id| !id.starts_with("efmesh:"))
        .last()
        .or_else(|| ctx.call_source())
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn call_site(ctx: &NativeCallContext) -> Location {
    let line = ctx.call_position().line().and_then(|l| u32::try_from(l).ok()).unwrap_or(0);
    Location { file: calling_file(ctx), line }
}

/// Why converting a closure to text is refused.
const FN_PTR_TEXT: &str = "a closure converted to text (`to_string`, `${…}`, `+`, a closure's `name`, `to_json()`, or an array or map holding one \
                           converted so) is refused: Rhai writes a closure as `Fn(anon$<hash>)`, a hash that changes in every process, so SQL built \
                           from it would get a new fingerprint with no edit";

/// What SQL holding a closure's name is refused for (after "… holding "): the catch-all of the
/// routes the conversions do not see ([`holds_closure_name`]).
pub(super) const CLOSURE_NAME_IN_SQL: &str = "`anon$<hash>`, the name Rhai gives a closure (from a closure converted to text, or from an error \
                                              message naming one, such as a caught `Function not found` error's): the hash changes in every \
                                              process, so the SQL would get a new fingerprint with no edit";

/// The hint of [`CLOSURE_NAME_IN_SQL`].
pub(super) const CLOSURE_NAME_HINT: &str =
    "build the SQL from values (what the closure returns, `${f.call(x)}`), not from a closure or an error message naming one";

/// True when `text` holds a closure's name as Rhai writes it: `anon$` followed by 16 hex digits
/// (a hash that differs in every process).
pub(super) fn holds_closure_name(text: &str) -> bool {
    text.match_indices("anon$").any(|(at, prefix)| {
        let hash = &text.as_bytes()[at + prefix.len()..];
        hash.len() >= 16 && hash[..16].iter().all(u8::is_ascii_hexdigit)
    })
}

/// The text of function pointer `f` as efmesh writes it, the same in every process:
/// `Fn(closure)` for a closure, `Fn(<name>)` for a named pointer (as Rhai writes it).
fn fn_ptr_text(f: &FnPtr) -> ImmutableString {
    if f.is_anonymous() { "Fn(closure)".into() } else { format!("Fn({})", f.fn_name()).into() }
}

/// The text of function pointer `f` converted to text at `ctx` ([`fn_ptr_text`]). A closure is
/// refused, as a load error naming the file and line ([`FN_PTR_TEXT`]), unless `print` or
/// `debug` converts it ([`printed_text`]): the log is no SQL. Recorded rather than raised: for
/// `${…}`, `+` and the items of an array or a map, Rhai catches an error of the conversion and
/// prints the built-in text instead.
fn refused_fn_ptr_text(ctx: &NativeCallContext, st: &Rc<RefCell<State>>, printing: &Cell<usize>, f: &FnPtr) -> ImmutableString {
    if f.is_anonymous() && printing.get() == 0 {
        refuse_fn_ptr_text(ctx, st);
    }
    fn_ptr_text(f)
}

/// Records the load error of a closure converted to text at `ctx` ([`FN_PTR_TEXT`]). Inside an
/// audit body, a macro or a signal (a closure efmesh calls, which carries no source) the file is
/// the one defining it.
fn refuse_fn_ptr_text(ctx: &NativeCallContext, st: &Rc<RefCell<State>>) {
    let mut at = call_site(ctx);
    let refusal = |at: Location| {
        LoadError::new(Some(at), None, FN_PTR_TEXT)
            .with_hint("build the text from what the closure returns (`${f.call(x)}`), or from a name kept next to it (`rule.name`)")
    };
    match st.try_borrow_mut() {
        Ok(mut s) => {
            if at.file.as_os_str().is_empty()
                && let Some(file) = &s.body_file
            {
                at.file = file.clone();
            }
            s.errors.push(refusal(at));
        }
        Err(_) => tracing::warn!("{}", refusal(at)),
    }
}

/// `print(v)` or `debug(v)` of an array or a map `v`: its text as Rhai writes it, every closure
/// inside written `Fn(closure)` without a refusal ([`refused_fn_ptr_text`] reads `printing`).
///
/// # Errors
/// The conversion's.
fn printed_text(ctx: &NativeCallContext, printing: &Cell<usize>, v: Dynamic) -> Result<ImmutableString, Box<EvalAltResult>> {
    printing.set(printing.get() + 1);
    let text = ctx.call_native_fn::<ImmutableString>("to_debug", (v,));
    printing.set(printing.get().saturating_sub(1));
    text
}

/// True when `v` is or holds a closure: in an array, a map or a function pointer's curried
/// arguments. A value nested deeper than [`MAX_EXPR_DEPTH`] levels counts as holding one (what
/// lies below is not looked at).
fn holds_closure(v: &Dynamic, depth: usize) -> bool {
    if depth > MAX_EXPR_DEPTH {
        return true;
    }
    if let Some(f) = v.read_lock::<FnPtr>() {
        return f.is_anonymous() || f.iter_curry().any(|c| holds_closure(c, depth + 1));
    }
    if let Some(a) = v.read_lock::<Array>() {
        return a.iter().any(|x| holds_closure(x, depth + 1));
    }
    if let Some(m) = v.read_lock::<Map>() {
        return m.values().any(|x| holds_closure(x, depth + 1));
    }
    false
}

/// A ref target from a handle or a `"schema.table"` string.
fn target_of(v: &Dynamic) -> Result<ModelName, Box<EvalAltResult>> {
    if let Some(h) = v.read_lock::<Handle>() {
        return Ok(h.0.clone());
    }
    if let Some(s) = v.read_lock::<ImmutableString>() {
        return ModelName::parse(s.as_str()).map_err(|e| rt(e.to_string()));
    }
    if v.is_unit() {
        return Err(rt("expected a model handle or a \"schema.table\" string, got `()` (is the handle a top-level variable of the file you imported?)"));
    }
    Err(rt(format!("expected a model handle or a \"schema.table\" string, got `{}`", v.type_name())))
}

/// Column names from `cols()` arguments: strings, or arrays of strings.
fn column_names(args: &[&mut Dynamic]) -> Result<Vec<String>, Box<EvalAltResult>> {
    let bad = |t: &str| rt(format!("`cols()` column names must be strings, got `{t}`"));
    let mut columns = Vec::new();
    for arg in args {
        if let Some(s) = arg.read_lock::<ImmutableString>() {
            columns.push(s.to_string());
        } else if let Some(items) = arg.read_lock::<Array>() {
            // `cols(x)` means every column; an empty list (one built in code that came out empty)
            // means none, which renders nothing a query could use.
            if items.is_empty() {
                return Err(rt("`cols(x, [])` names no column: write `cols(x)` for every column of `x`"));
            }
            for item in items.iter() {
                match item.read_lock::<ImmutableString>() {
                    Some(s) => columns.push(s.to_string()),
                    None => return Err(bad(item.type_name())),
                }
            }
        } else {
            return Err(bad(arg.type_name()));
        }
    }
    Ok(columns)
}

/// Registers the host function of `kind` (`define_macro`, `define_signal`): `kind.function("name",
/// f)` only in definition files, recording `f` in `map` of the state.
fn register_definition(engine: &mut Engine, refs: &Refs, kind: &'static super::foreign::Definable, map: fn(&mut State) -> &mut Defined) {
    let st = refs.state.clone();
    engine.register_raw_fn(kind.function, [TypeId::of::<Dynamic>(), TypeId::of::<Dynamic>()], move |ctx, args| {
        let location = call_site(&ctx);
        if st.borrow().past_definitions {
            return Err(rt(kind.outside));
        }
        let [usage, expects] = kind.rhai;
        let Some(name) = args[0].read_lock::<ImmutableString>().map(|s| s.to_string()) else {
            return Err(rt(format!("`{}` expects a name and a closure, e.g. `{usage}`, got `{}` first", kind.function, args[0].type_name())));
        };
        let Some(f) = args[1].read_lock::<FnPtr>().map(|f| f.clone()) else {
            return Err(rt(format!("`{}(\"{name}\", …)` expects {expects}, got `{}`", kind.function, args[1].type_name())));
        };
        let mut s = st.borrow_mut();
        s.defines();
        let Some(ast) = s.asts.get(&location.file).cloned() else {
            return Err(rt(format!("`{}` must be called at the top level of a file or of a function it defines", kind.function)));
        };
        if let Err(m) = (kind.check_name)(&name) {
            s.errors.push(LoadError::new(Some(location), None, m));
        } else if let Some((first, _, _)) = map(&mut s).get(&name) {
            let e = (kind.duplicate)(&name, first, &location);
            s.errors.push(e);
        } else {
            map(&mut s).insert(name, (location, f, ast));
        }
        Ok(Dynamic::UNIT)
    });
}

fn register_api(engine: &mut Engine, refs: &Refs) {
    // `no_time` removes `timestamp` but not the core package's `sleep`: shadow it (the engine's
    // own namespace is searched before every package).
    let no_sleep = || -> Result<(), Box<EvalAltResult>> { Err(rt(SLEEP_REFUSED)) };
    engine.register_fn("sleep", move |_: ::rhai::INT| no_sleep());
    engine.register_fn("sleep", move |_: ::rhai::FLOAT| no_sleep());
    // The package's `pad(string, len, padding)` never ends with an empty padding string.
    engine.register_fn("pad", pad_with_string);

    engine.register_type_with_name::<Handle>("Model");
    engine.register_get("name", |h: &mut Handle| -> ImmutableString { h.0.to_string().into() });
    engine.register_fn("to_string", |h: &mut Handle| -> ImmutableString { h.0.to_string().into() });
    engine.register_fn("to_debug", |h: &mut Handle| -> ImmutableString { format!("Model({})", h.0).into() });

    // A closure prints as `Fn(anon$<hash>)`, the hash different in every process: converting a
    // closure to text is refused (see [`refused_fn_ptr_text`]). These overloads take precedence
    // over the packages' (the engine's own namespace is searched first), and every built-in
    // conversion calls them: `${f}` and `"" + f` call `to_string`, an array or a map converts its
    // items with `to_debug`.
    let printing = refs.state.borrow().printing.clone();
    for name in ["to_string", "to_debug"] {
        let (st, printing) = (refs.state.clone(), printing.clone());
        engine.register_fn(name, move |ctx: NativeCallContext, f: &mut FnPtr| -> ImmutableString { refused_fn_ptr_text(&ctx, &st, &printing, f) });
    }
    // `print` and `debug` write to the log, never to SQL: a closure, or an array or a map holding
    // one, is printed with the stable text `Fn(closure)`.
    for name in ["print", "debug"] {
        engine.register_fn(name, |f: &mut FnPtr| -> ImmutableString { fn_ptr_text(f) });
        let p = printing.clone();
        engine.register_fn(name, move |ctx: NativeCallContext, a: &mut Array| -> Result<ImmutableString, Box<EvalAltResult>> {
            printed_text(&ctx, &p, Dynamic::from_array(a.clone()))
        });
        let p = printing.clone();
        engine.register_fn(name, move |ctx: NativeCallContext, m: &mut Map| -> Result<ImmutableString, Box<EvalAltResult>> {
            printed_text(&ctx, &p, Dynamic::from_map(m.clone()))
        });
    }
    // A closure's `name` is its `anon$<hash>` too (a named pointer's is the name written).
    let st = refs.state.clone();
    let closure_name = move |ctx: NativeCallContext, f: &mut FnPtr| -> ImmutableString {
        if f.is_anonymous() { refused_fn_ptr_text(&ctx, &st, &Cell::new(0), f) } else { f.fn_name().into() }
    };
    engine.register_fn("name", closure_name.clone());
    engine.register_get("name", closure_name);
    // `to_json()` writes a closure as its `anon$<hash>` name: refused the same way.
    let st = refs.state.clone();
    engine.register_fn("to_json", move |ctx: NativeCallContext, map: &mut Map| -> String {
        if map.values().any(|v| holds_closure(v, 0)) {
            refuse_fn_ptr_text(&ctx, &st);
            return "null".to_string();
        }
        ::rhai::format_map_as_json(map)
    });

    // db.query(sql) in a signal: one read-only statement, answered by the caller.
    engine.register_type_with_name::<Db>("Db");
    engine.register_fn("query", |db: &mut Db, sql: ImmutableString| -> Result<Array, Box<EvalAltResult>> {
        let (tx, rx) = std::sync::mpsc::channel();
        if db.0.send(super::foreign::SignalMsg::Query(sql.to_string(), tx)).is_err() {
            return Err(rt("the query handle is closed"));
        }
        let rows = rx.recv().map_err(|_| rt("the query handle is closed"))?.map_err(rt)?;
        Ok(rows
            .into_iter()
            .map(|row| Dynamic::from(row.into_iter().map(|v| v.map_or(Dynamic::UNIT, |v| Dynamic::from(ImmutableString::from(v)))).collect::<Array>()))
            .collect())
    });
    // define_signal("name", |intervals, args, db| …): only in definition files.
    register_definition(engine, refs, &super::signals::SIGNAL, |s| &mut s.signals);
    // define_macro("name", |a, b| …): only in definition files.
    register_definition(engine, refs, &super::foreign::MACRO, |s| &mut s.macros);

    // ref(x)
    let st = refs.state.clone();
    engine.register_raw_fn("ref", [TypeId::of::<Dynamic>()], move |ctx, args| {
        if let Some(e) = refused_in_macro(&st, "ref") {
            return Err(e);
        }
        let target = target_of(args[0])?;
        let location = call_site(&ctx);
        let marker = st.borrow_mut().sites.record(Site::Ref(RefSite { target, location }));
        Ok(ImmutableString::from(marker))
    });

    // cols(parent, "a", "b", …) and cols(parent, ["a", "b"]); cols(parent) = every column.
    for arity in 1..=MAX_COLS_ARGS + 1 {
        let st = refs.state.clone();
        engine.register_raw_fn("cols", vec![TypeId::of::<Dynamic>(); arity], move |ctx, args| {
            if let Some(e) = refused_in_macro(&st, "cols") {
                return Err(e);
            }
            // `cols(ref("s.a"), …)`: the parent the `ref()` names.
            let of_ref = args[0].clone().try_cast::<ImmutableString>().and_then(|t| st.borrow().sites.ref_target(&t));
            let parent = match of_ref {
                Some(p) => p,
                None => target_of(args[0])?,
            };
            let columns = column_names(&args[1..])?;
            let location = call_site(&ctx);
            let marker = st.borrow_mut().sites.record(Site::Cols(ColsSite { parent, columns, location }));
            Ok(ImmutableString::from(marker))
        });
    }

    // define_model(#{ … })
    let st = refs.state.clone();
    engine.register_raw_fn("define_model", [TypeId::of::<Dynamic>()], move |ctx, args| {
        if let Some(e) = refused_in_macro(&st, "define_model") {
            return Err(e);
        }
        let location = call_site(&ctx);
        let spec = std::mem::take(args[0]);
        let type_name = spec.type_name();
        let Some(map) = spec.try_cast::<Map>() else {
            return Err(rt(format!("`define_model` expects a map `#{{ name: …, kind: …, … }}`, got `{type_name}`")));
        };
        let query = match map.get("query") {
            None => None,
            Some(q) if q.is_unit() => None,
            Some(q) => Some(query_text(&ctx, q)?),
        };
        let mut spec = serde_json::Map::new();
        let mut attached = Vec::new();
        for (key, value) in &map {
            // `query` arrives separately; `()` means absent, like Lua's nil.
            if key == "query" || value.is_unit() {
                continue;
            }
            if key == "audits" {
                match audits::collect(value) {
                    Ok(a) => attached = a,
                    Err(msg) => {
                        // Named like the model's other field errors.
                        let model = map.get("name").and_then(|n| n.clone().into_immutable_string().ok()).and_then(|n| crate::core::ModelName::parse(&n).ok());
                        st.borrow_mut().errors.push(LoadError::new(Some(location.clone()), model, msg));
                    }
                }
                continue;
            }
            let json = convert::to_json(value).map_err(|e| rt(format!("`{key}`: {e}")))?;
            spec.insert(key.to_string(), json);
        }
        if st.borrow().testing {
            return Err(rt("`define_model` is not available in test files: define models in model files (`project.models`)"));
        }
        // `@name(…)` macro calls (query and pre/post statements), expanded before the query is
        // parsed (errors at the call); the text as the script built it places the query's lines
        // in the file.
        let foreign = st.borrow().foreign.clone();
        let written = query.clone();
        let (query, expansion) = match super::macros::expand_model(query, &mut spec, foreign.as_deref(), &location) {
            Ok(q) => q,
            Err(errs) => {
                let name = spec.get("name").and_then(|v| v.as_str()).and_then(|n| ModelName::parse(n).ok());
                let mut s = st.borrow_mut();
                s.defines();
                s.errors.extend(errs.into_iter().map(|mut e| {
                    e.model = name.clone();
                    e
                }));
                s.errors.extend(super::builder::unknown_signals(&spec, &location, foreign.as_deref()));
                return Ok(name.map_or(Dynamic::UNIT, |n| Dynamic::from(Handle(n))));
            }
        };
        // The catch-all of a closure's name reaching the model's SQL by a route the conversions
        // miss (a caught error's message names the closure).
        if let Some(part) = closure_name_in_model(query.as_deref(), &spec) {
            let name = spec.get("name").and_then(|v| v.as_str()).and_then(|n| ModelName::parse(n).ok());
            let mut s = st.borrow_mut();
            s.defines();
            s.errors.push(LoadError::new(Some(location), name.clone(), format!("its {part} holds {CLOSURE_NAME_IN_SQL}")).with_hint(CLOSURE_NAME_HINT));
            return Ok(name.map_or(Dynamic::UNIT, |n| Dynamic::from(Handle(n))));
        }
        let mut s = st.borrow_mut();
        s.defines();
        match build_model(&spec, query.as_deref(), &s.sites, location.clone()) {
            Ok(mut model) => {
                model.audits = attached;
                if let (Some(written), Some(expanded), Some(source), true) = (&written, &query, s.sources.get(&location.file), model.body.is_some()) {
                    model.query_lines = super::builder::script_query_lines(source.as_bytes(), written, expanded, &expansion);
                }
                let handle = Handle(model.name.clone());
                s.models.push(model);
                Ok(Dynamic::from(handle))
            }
            Err(errs) => {
                s.errors.extend(errs);
                // Its unknown signals too: they are checked after the load only on models that built.
                let foreign = s.foreign.clone();
                s.errors.extend(super::builder::unknown_signals(&spec, &location, foreign.as_deref()));
                // Keep evaluating so later errors surface too; a valid name still yields a handle.
                let name = spec.get("name").and_then(|v| v.as_str()).and_then(|n| ModelName::parse(n).ok());
                Ok(name.map_or(Dynamic::UNIT, |n| Dynamic::from(Handle(n))))
            }
        }
    });
}

/// `string.pad(len, padding)`: pads with copies of `padding` (the last one cut) up to `len`
/// characters; refuses an empty padding, and a length over the string size limit before
/// building anything.
fn pad_with_string(string: &mut ImmutableString, len: ::rhai::INT, padding: ImmutableString) -> Result<(), Box<EvalAltResult>> {
    let Ok(len) = usize::try_from(len) else { return Ok(()) };
    if len > MAX_STRING_SIZE {
        return Err(Box::new(EvalAltResult::ErrorDataTooLarge("Length of string".into(), Position::NONE)));
    }
    let have = string.chars().count();
    if len <= have {
        return Ok(());
    }
    if padding.is_empty() {
        return Err(rt("`pad`: the padding string is empty, so the string can never reach the length asked for"));
    }
    let s = string.make_mut();
    s.extend(padding.chars().cycle().take(len - have));
    Ok(())
}

/// `define_test(#{ … })`: records a unit test; only test files may call it.
fn register_define_test(engine: &mut Engine, refs: &Refs) {
    let st = refs.state.clone();
    engine.register_raw_fn("define_test", [TypeId::of::<Dynamic>()], move |ctx, args| {
        if !st.borrow().testing {
            return Err(rt("`define_test` belongs in test files (`project.tests`, default `tests/**/*.{lua,rhai}`), not in model files"));
        }
        let location = call_site(&ctx);
        let spec = std::mem::take(args[0]);
        let type_name = spec.type_name();
        if spec.read_lock::<Map>().is_none() {
            return Err(rt(format!("`define_test` expects a map `#{{ name: …, model: …, … }}`, got `{type_name}`")));
        }
        let map = match convert::to_json(&spec).map_err(|e| rt(format!("`define_test`: {e}")))? {
            serde_json::Value::Object(m) => m,
            _ => return Err(rt("`define_test` expects a map")),
        };
        let mut s = st.borrow_mut();
        match super::test_spec::build_test(&map, location) {
            Ok(t) => s.tests.push(t),
            Err(errs) => s.errors.extend(errs),
        }
        Ok(())
    });
}

/// The query text of a spec: a string, or a closure returning one (called now).
fn query_text(ctx: &NativeCallContext, q: &Dynamic) -> Result<String, Box<EvalAltResult>> {
    if let Some(s) = q.read_lock::<ImmutableString>() {
        return Ok(s.to_string());
    }
    if let Some(f) = q.read_lock::<FnPtr>().map(|f| f.clone()) {
        let out: Dynamic = f.call_within_context(ctx, ())?;
        return match out.read_lock::<ImmutableString>() {
            Some(s) => Ok(s.to_string()),
            None => Err(rt(format!("the `query` closure must return a string, got `{}`", out.type_name()))),
        };
    }
    Err(rt(format!("`query` must be a string or a closure returning one, got `{}`", q.type_name())))
}

/// Evaluates a project file once and returns its module (its top-level variables and
/// functions). A failure is recorded as a load error of that file; the caller gets a short
/// error to report at its `import`.
fn evaluate(engine: &Engine, refs: &Refs, rel: &Path) -> Result<SharedModule, Box<EvalAltResult>> {
    let root = {
        let mut s = refs.state.borrow_mut();
        match s.modules.get(rel) {
            Some(ModuleState::Done(m)) => {
                let m = m.clone();
                s.credit_importer(rel);
                let s = &mut *s;
                if let (Some(r), Some(h)) = (s.reached.as_mut(), s.evaluated.get(rel)) {
                    r.reused(rel, *h);
                }
                return Ok(m);
            }
            Some(ModuleState::Loading) => {
                let start = s.stack.iter().position(|p| p == rel).unwrap_or(0);
                let chain = s.stack[start..].iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(" → ");
                return Err(rt(format!("import cycle: {chain} → `{}`", rel.display())));
            }
            Some(ModuleState::Failed) => return Err(rt(format!("`{}` failed to load (see its error)", rel.display()))),
            None => {}
        }
        s.root.clone()
    };
    let outermost = {
        let mut s = refs.state.borrow_mut();
        s.modules.insert(rel.to_path_buf(), ModuleState::Loading);
        s.stack.push(rel.to_path_buf());
        s.stack.len() == 1
    };
    if outermost {
        refs.state.borrow().tripped.set(None);
        refs.deadline.set(Some(Instant::now() + FILE_BUDGET));
        refs.memory.arm(true);
        watched(refs, rel, FILE_BUDGET);
    }
    let result = run_file(engine, refs, &root, rel);
    if outermost {
        refs.deadline.set(None);
        refs.memory.arm(false);
        unwatched(refs);
        refs.state.borrow_mut().sources.clear();
    }
    let mut s = refs.state.borrow_mut();
    s.stack.pop();
    match result {
        Ok(module) => {
            s.credit_importer(rel);
            if !s.first_modules.contains_key(rel) {
                s.first_modules.insert(rel.to_path_buf(), module.clone());
            }
            s.modules.insert(rel.to_path_buf(), ModuleState::Done(module.clone()));
            Ok(module)
        }
        Err(e) => {
            s.modules.insert(rel.to_path_buf(), ModuleState::Failed);
            s.errors.push(*e);
            Err(rt(format!("`{}` failed to load (see its error)", rel.display())))
        }
    }
}

/// Reads, compiles and runs one file in a fresh scope; builds its module.
fn run_file(engine: &Engine, refs: &Refs, root: &Path, rel: &Path) -> Result<SharedModule, Box<LoadError>> {
    let at_file = |msg: String| Box::new(LoadError::new(Some(Location { file: rel.to_path_buf(), line: 0 }), None, msg));
    let path = root.join(rel);
    let size = fs_err::metadata(&path).map_err(|e| at_file(format!("cannot read the file: {e}")))?.len();
    if size > MAX_FILE_SIZE {
        return Err(at_file(format!("the file has {size} bytes; a `.rhai` file may have at most {MAX_FILE_SIZE}")));
    }
    let code = fs_err::read_to_string(&path).map_err(|e| at_file(format!("cannot read the file: {e}")))?;
    {
        let hash = *blake3::hash(code.as_bytes()).as_bytes();
        let mut s = refs.state.borrow_mut();
        s.evaluated.insert(rel.to_path_buf(), hash);
        if let Some(r) = s.reached.as_mut() {
            r.evaluated(rel, hash);
        }
    }
    if let Some(line) = super::nul_byte_line(code.as_bytes()) {
        return Err(Box::new(LoadError::new(Some(Location { file: rel.to_path_buf(), line }), None, super::NUL_BYTE)));
    }
    refs.state.borrow_mut().sources.insert(rel.to_path_buf(), Rc::from(code.as_str()));
    // A byte-order mark (some editors save UTF-8 with one) is not Rhai.
    let mut ast = engine.compile(code.strip_prefix('\u{feff}').unwrap_or(&code)).map_err(|e| Box::new(errors::parse_error(&e, rel)))?;
    let source = rel.to_string_lossy().to_string();
    ast.set_source(source.as_str());
    refs.state.borrow_mut().asts.insert(rel.to_path_buf(), Rc::new(ast.clone_functions_only()));
    let mut scope = Scope::new();
    match engine.run_ast_with_scope(&mut scope, &ast) {
        Ok(()) => {}
        // `exit()` ends the file early; what it defined so far stands.
        Err(e) if matches!(*e, EvalAltResult::Exit(..)) => {}
        Err(e) => return Err(Box::new(errors::eval_error(&e, rel))),
    }
    let mut functions = ast.clone_functions_only();
    functions.set_source(source.as_str());
    let mut module = Module::eval_ast_as_new(Scope::new(), &functions, engine).map_err(|e| Box::new(errors::eval_error(&e, rel)))?;
    for (name, _constant, value) in scope.iter() {
        module.set_var(name, value);
    }
    module.build_index();
    Ok(module.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::LoadErrors;

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            fs_err::create_dir_all(p.parent().unwrap()).unwrap();
            fs_err::write(p, text).unwrap();
        }
        dir
    }

    fn load_files(dir: &tempfile::TempDir, files: &[&str]) -> Result<Vec<Model>, LoadErrors> {
        crate::script::load_models(dir.path(), &files.iter().map(PathBuf::from).collect::<Vec<_>>())
    }

    #[test]
    fn defines_a_model_with_every_api_function() {
        let dir = project(&[(
            "models/a.rhai",
            "let raw = define_model(#{ name: \"raw.t\", kind: kind::external(#{ table: \"main.t\" }), schema: [[\"id\", \"bigint\"], [\"v\", \"varchar\"]] });\n\
             define_model(#{\n  name: \"s.a\",\n  kind: kind::full(),\n  schema: [[\"id\", \"bigint\"]],\n  grain: [\"id\"],\n  query: || `SELECT ${cols(raw, \"id\")} FROM ${ref(raw)}`,\n});\n",
        )]);
        let models = load_files(&dir, &["models/a.rhai"]).unwrap();
        assert_eq!(models.len(), 2);
        let a = &models[1];
        assert_eq!(a.name.to_string(), "s.a");
        assert_eq!(a.location, Location { file: "models/a.rhai".into(), line: 2 });
        assert_eq!(a.parents().into_iter().map(|p| p.to_string()).collect::<Vec<_>>(), ["raw.t"]);
        assert_eq!(a.grain, ["id"]);
    }

    #[test]
    fn builder_errors_are_recorded_and_evaluation_goes_on() {
        let dir = project(&[(
            "models/a.rhai",
            "define_model(#{ name: \"s.a\", kind: kind::full(), schema: [[\"id\", \"bigint\"]], query: \"SELECT 1 AS id\", grian: [] });\n\
             define_model(#{ name: \"s.b\", kind: kind::fulll(), schema: [] });\n",
        )]);
        let errs = load_files(&dir, &["models/a.rhai"]).unwrap_err().to_string();
        assert!(errs.contains("models/a.rhai:1: model `s.a`: unknown field `grian`"), "{errs}");
        assert!(errs.contains("did you mean `grain`?"), "{errs}");
        // The second call is a script error (no such kind), reported on line 2 as every
        // language reports an unknown kind.
        assert!(errs.contains("models/a.rhai:2: unknown kind `fulll` (did you mean `full`?)"), "{errs}");
        assert!(!errs.contains("unknown function"), "{errs}");
    }

    /// A kind that exists called with arguments it does not take stays Rhai's unknown function;
    /// a kind close to none is listed with every kind.
    #[test]
    fn an_unknown_kind_constructor_is_named_as_a_kind_not_a_function() {
        let dir = project(&[(
            "models/a.rhai",
            "define_model(#{ name: \"s.a\", kind: kind::full(1, 2), schema: [[\"id\", \"bigint\"]], query: \"SELECT 1 AS id\" });\n",
        )]);
        let errs = load_files(&dir, &["models/a.rhai"]).unwrap_err().to_string();
        assert!(errs.contains("unknown function `kind::full"), "{errs}");
        let dir = project(&[(
            "models/a.rhai",
            "define_model(#{ name: \"s.a\", kind: kind::table(), schema: [[\"id\", \"bigint\"]], query: \"SELECT 1 AS id\" });\n",
        )]);
        let errs = load_files(&dir, &["models/a.rhai"]).unwrap_err().to_string();
        assert!(errs.contains("models/a.rhai:1: unknown kind `table` (kinds: embedded, external, full, incremental_by_partition"), "{errs}");
    }
}
