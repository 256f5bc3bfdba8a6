//! Calls across languages: a macro or an audit defined once — in Lua, in Rhai or (audits) in
//! a `.sql` file — used from a model of any language.
//!
//! A model file is evaluated in its own language's interpreter, on a loader thread (Lua, `.sql`)
//! or on the Rhai host's thread. A macro call (`@name(…)` in a query) or the use of an audit
//! defined in another language needs an interpreter of *that* language holding the definition
//! files. [`Foreign`] keeps one such interpreter per language for the length of one load, each
//! on its own thread (interpreters are not `Send`), started the first time it is needed: it
//! evaluates the language's definition files (`[project] audits` and `[project] macros`, the
//! built-in audits first), then serves requests one at a time over a channel — run this
//! macro with these arguments, render this audit use. Arguments and results cross as strings
//! (macros) or JSON values (audit arguments: strings, numbers, booleans, lists, maps). Each
//! request runs under its own budget (the file budget of the sandbox, with the watchdog); the
//! interpreter has the sandbox of model files (no clock, no I/O, no randomness), so a request
//! gives the same answer whichever thread sent it and whenever: loads stay deterministic. A
//! request that changes the state the interpreter answers from (a macro, audit body or signal
//! writing what outlives its call: checked after each call) is refused, and so is every later
//! one of the load ([`refuse_after_write`]): nothing is answered from a state the definition
//! files do not define.
//!
//! Every macro call goes through its language's service, also from a model of the same
//! language (one path, one set of rules). `.sql` audit files are parsed in Rust
//! ([`super::sql_audit`]) and rendered without an interpreter.

use super::macros::{Failure, RESERVED, no_macro_hint};
use super::sandbox::Reached;
use super::sql_audit::SqlAuditDef;
use crate::core::audit::{Audit, AuditDef};
use crate::core::error::did_you_mean;
use crate::core::{LoadError, Location, ModelName};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, OnceLock};

/// The language a definition is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lang {
    /// A `.lua` file.
    Lua,
    /// A `.rhai` file.
    Rhai,
    /// A `.sql` file.
    Sql,
}

impl Lang {
    /// The language of a file, by extension.
    pub fn of(f: &Path) -> Option<Lang> {
        match f.extension().and_then(|e| e.to_str()) {
            Some("lua") => Some(Lang::Lua),
            Some("rhai") => Some(Lang::Rhai),
            Some("sql") => Some(Lang::Sql),
            _ => None,
        }
    }
}

/// A macro as its service reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct MacroInfo {
    /// Its name (without `@`).
    pub name: String,
    /// Where `define_macro` was called.
    pub location: Location,
}

/// What a service's definition files define (built-in audits included).
#[derive(Debug, Clone, Default)]
pub struct Defs {
    /// Macros.
    pub macros: Vec<MacroInfo>,
    /// Audit definitions, built-ins first.
    pub audits: Vec<AuditDef>,
    /// Signals (`define_signal`).
    pub signals: Vec<MacroInfo>,
}

/// Rows a signal's read-only query returns: each row's values as text (`None`: NULL).
pub type Rows = Vec<Vec<Option<String>>>;

/// What a signal being evaluated sends its caller: a query to run, then its verdict.
pub enum SignalMsg {
    /// Run this read-only query; the reply is its rows or why not.
    Query(String, Sender<Result<Rows, String>>),
    /// The signal ended: one verdict per interval, or why it failed.
    Done(Result<Vec<bool>, String>),
}

/// How long one signal evaluation may take, its queries included.
pub const SIGNAL_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// A signal's answer as JSON: `true`/`false` (every interval), or a list of booleans, one per
/// interval, in order.
///
/// # Errors
/// Any other value, or a list of another length.
pub fn verdicts(v: &Value, n: usize) -> Result<Vec<bool>, String> {
    match v {
        Value::Bool(b) => Ok(vec![*b; n]),
        Value::Array(items) => {
            if items.len() != n {
                return Err(format!("returned a list of {} values for {n} intervals (return one boolean per interval, or one boolean for all)", items.len()));
            }
            items.iter().map(|i| i.as_bool().ok_or_else(|| format!("returned a list holding {i}, not only booleans"))).collect()
        }
        Value::Object(m) if m.is_empty() && n == 0 => Ok(Vec::new()),
        other => Err(format!(
            "must return a boolean (every interval) or a list of booleans (one per interval), got {}",
            match other {
                Value::Null => "nothing".to_string(),
                o => o.to_string(),
            }
        )),
    }
}

thread_local! {
    /// What the requests sent from this thread read through `require` / `import` when they ran
    /// (a macro function, an audit body) since [`take_call_reads`]: inputs of the file whose
    /// evaluation sent them, which nothing else records — a helper a macro loads only when
    /// called must still make its callers' load cache entries stale when it changes.
    static CALL_READS: std::cell::RefCell<Reached> = std::cell::RefCell::new(Reached::default());
}

/// Adds what a request read to this thread's account (a file is evaluated on one thread, and
/// sends its requests from it).
fn note_call_reads(reads: Reached) {
    if reads.files.is_empty() && reads.probes.is_empty() {
        return;
    }
    CALL_READS.with(|r| {
        let mut r = r.borrow_mut();
        r.files.extend(reads.files);
        r.probes.extend(reads.probes);
        for (f, h) in reads.hashes {
            r.reused(&f, h);
        }
    });
}

/// What the requests sent from this thread read since the last call: a file's evaluation takes
/// it before it starts (dropping a previous file's) and when it ends ([`add_call_reads`]).
pub fn take_call_reads() -> Reached {
    CALL_READS.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

/// Adds this thread's account ([`take_call_reads`]) to a file's outcome.
pub fn add_call_reads(outcome: &mut super::sandbox::FileOutcome) {
    let reads = take_call_reads();
    outcome.reached.extend(reads.files);
    outcome.probes.extend(reads.probes);
    for (f, h) in reads.hashes {
        outcome.hashes.entry(f).or_insert(h);
    }
}

/// A macro's first call's answer, checked by calling it a second time with the same arguments (`again`):
/// a macro that keeps state between calls (a counter, a memo of names handed out) answers
/// otherwise, and would make a model's SQL depend on which files a load evaluated before it
/// (a comment edit re-evaluating one file would change its data). Refused, naming the macro.
pub fn same_twice(name: &str, first: Result<String, Failure>, again: impl FnOnce() -> Result<String, Failure>) -> Result<String, Failure> {
    let sql = first?;
    match again() {
        Ok(second) if second == sql => Ok(sql),
        Ok(second) => Err(Failure::new(format!(
            "macro `@{name}` returned `{}` and then `{}` for the same arguments: a macro must depend on its arguments alone (no state kept between calls), or a model's SQL would depend on which files efmesh evaluated before it",
            quoted(&sql),
            quoted(&second)
        ))),
        Err(e) => Err(e),
    }
}

/// The refusal of macro `name` (defined at `at`) whose call changed `what` (`shared.v`, a
/// variable it captured): state that outlives the call, which a later call — of it or of
/// another macro reading the same state — would see, so a model's SQL would depend on which
/// models the macro interpreter served before it (the load cache, thread timing).
pub fn state_written(name: &str, at: &Location, what: &str) -> Failure {
    Failure {
        message: format!("macro `@{name}` ({at}) writes state that outlives the call (`{what}`): a macro must be a pure function of its arguments"),
        hint: Some(STATE_HINT.into()),
    }
}

/// The refusal of the body of audit or signal `name` (`kind`: `audit`, `signal`), defined at
/// `at`, whose call changed `what`: the macro files' macros, audit bodies and signals share that
/// state, so a macro reading it would answer according to which audits and signals the macro
/// interpreter ran before (the load cache, thread timing). Its hint is [`STATE_HINT`].
pub fn body_state_written(kind: &str, name: &str, at: &Location, what: &str) -> String {
    format!(
        "{kind} `{name}` ({at}) writes state that outlives the call (`{what}`): the macros of the macro files read the same state, so the {kind} must write nothing but what it creates at each call"
    )
}

/// The hint of [`state_written`] and [`body_state_written`].
pub(crate) const STATE_HINT: &str = "compute what the SQL needs from the arguments at each call: the file's variables and tables are shared by every call (keep constants there, never write them)";

/// What poisoned a macro interpreter, for the refusals of later requests ([`not_run`]): `who`
/// (``macro `@set` ``, ``audit `a` ``, ``signal `s` ``), defined at `at`, wrote `what` — also when
/// the call then raised an error, which the write's error replaces.
pub fn write_cause(who: &str, at: &Location, what: &str) -> String {
    format!("{who} ({at}) wrote state that outlives its call (`{what}`)")
}

/// The words after its subject ([`not_run`]) that mark a request a poisoned interpreter refused:
/// a knock-on of another error of the load, listed after the others ([`is_not_run`]).
const NOT_RUN: &str = "was not run: earlier in this load";

/// The refusal of `who` (``macro `@get` ``) by an interpreter that a write poisoned (`cause`:
/// [`write_cause`]). After a write the state a macro, audit body or signal would be computed from
/// is no longer what the macro files define: SQL computed from it would depend on which models
/// the interpreter served before (thread timing), and would be cached for the next loads. So the
/// interpreter answers nothing more in that load; the file whose request it refused has a load
/// error, and is not cached.
pub fn not_run(who: &str, cause: &str) -> String {
    format!("{who} {NOT_RUN} {cause}, and nothing more is computed from the macro files' state in this load (that call's error says what to fix)")
}

/// The hint of [`not_run`].
pub(crate) const NOT_RUN_HINT: &str = "fix the write named here (its error is at its own call); this file is evaluated again at the next load";

/// Whether load error `message` is a refusal of [`not_run`] (a knock-on of another error).
pub fn is_not_run(message: &str) -> bool {
    message.contains(NOT_RUN)
}

/// Answers `req` with its refusal by an interpreter poisoned by `cause` ([`not_run`]), without
/// running anything.
pub fn refuse_after_write(req: Request, cause: &str) {
    match req {
        Request::Macro { name, reply, .. } => {
            let refusal = Failure { message: not_run(&format!("macro `@{name}`"), cause), hint: Some(NOT_RUN_HINT.into()) };
            let _ = reply.send((Err(refusal), Reached::default()));
        }
        Request::Audit { name, location, reply, .. } => {
            let refusal = LoadError::new(Some(location), None, not_run(&format!("audit `{name}`"), cause)).with_hint(NOT_RUN_HINT);
            let _ = reply.send((Err(refusal), Reached::default()));
        }
        Request::Signal { name, reply, .. } => {
            let _ = reply.send(SignalMsg::Done(Err(not_run(&format!("signal `{name}`"), cause))));
        }
    }
}

/// The refusal of `who` (``macro `@tag` ``, ``audit `a` ``, ``signal `s` ``), defined at `at`,
/// whose function reaches `what` (`it`), a function a library call made outside it (the iterator
/// `string.gmatch` or `pairs` returned) or a coroutine: it keeps state no snapshot can read (how
/// far it got), so each call could advance it, and a model's SQL would depend on the calls made
/// before — on the load cache and thread timing. Refused before the call. An empty `what` is
/// the function `who` was defined with itself (`define_macro("m", it)`). Its hint is
/// [`HIDDEN_HINT`].
pub fn hidden_state(who: &str, at: &Location, what: &str) -> String {
    let (reaches, outside) = if what.is_empty() { ("is".to_string(), "") } else { (format!("reaches `{what}`,"), " outside it") };
    format!(
        "{who} ({at}) {reaches} a function made by a library call{outside} (an iterator of `string.gmatch` or `pairs`) or a coroutine: it keeps state efmesh cannot see, so each call could advance it and a model's SQL would depend on the calls made before"
    )
}

/// The hint of [`hidden_state`].
pub(crate) const HIDDEN_HINT: &str =
    "create the iterator inside the function at each call (`for w in s:gmatch(p) do … end`): keep strings, numbers, tables and your own functions in the file";

/// Characters of a macro's output an error quotes ([`quoted`]).
pub const QUOTED_CHARS: usize = 200;

/// A macro's output (or what it raised) as an error quotes it: on one line, and past
/// [`QUOTED_CHARS`] characters cut, saying how long it was (`xxx… (62914563 bytes)`).
pub(crate) fn quoted(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::core::error::excerpt(&flat, QUOTED_CHARS, s.len())
}

/// Characters of a failed macro call's message ([`Foreign::call_macro`]): room for the
/// macro's own message, not for a megabyte it raised.
const FAILURE_CHARS: usize = 1000;

/// `sql`, a macro's output, unless it holds a NUL byte, which no engine reads (DuckDB stops at
/// it: "nul byte found in provided data"): a load error at the call naming the macro (defined
/// at `at`).
fn nul_free(name: &str, at: &Location, sql: String) -> Result<String, Failure> {
    match sql.find('\0') {
        None => Ok(sql),
        Some(i) => Err(Failure {
            message: format!(
                "macro `@{name}` ({at}) returned SQL holding a NUL byte (`\\0`, at byte {i} of `{}`): no engine reads it",
                quoted(&sql.replace('\0', "\\0"))
            ),
            hint: Some("a NUL byte is no SQL: remove it from what the macro returns".into()),
        }),
    }
}

/// `s` on one line, cut to 80 characters.
pub(crate) fn one_line(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 80 { format!("{}…", flat.chars().take(80).collect::<String>()) } else { flat }
}

/// A request to a language's service.
pub enum Request {
    /// Run a macro; the reply is its SQL or why not.
    Macro {
        /// The macro.
        name: String,
        /// Its arguments.
        args: Vec<String>,
        /// Where the answer goes, with the files the call read.
        reply: Sender<(Result<String, Failure>, Reached)>,
    },
    /// Render a use of an audit.
    Audit {
        /// The audit.
        name: String,
        /// Positional arguments.
        positional: Vec<Value>,
        /// Named arguments and options.
        named: Map<String, Value>,
        /// Where the use is written.
        location: Location,
        /// Where the answer goes, with the files the rendering read.
        reply: Sender<(Result<Audit, LoadError>, Reached)>,
    },
    /// Evaluate a signal over intervals (`[start, end)`, ISO-8601 UTC) with its arguments.
    Signal {
        /// The signal.
        name: String,
        /// The candidate intervals.
        intervals: Vec<(String, String)>,
        /// Its named arguments.
        args: Map<String, Value>,
        /// Its queries and its verdicts go here.
        reply: Sender<SignalMsg>,
    },
}

/// One language's interpreter, on its own thread.
struct Service {
    tx: Mutex<Sender<Request>>,
    defs: Defs,
}

impl Service {
    /// Starts `serve` on a thread named `name`: it sends its [`Defs`] once its definition files
    /// are evaluated, then answers requests until the sender is dropped.
    fn start(name: &str, stack: usize, serve: impl FnOnce(Sender<Defs>, Receiver<Request>) + Send + 'static) -> Option<Service> {
        let (tx, rx) = channel();
        let (init_tx, init_rx) = channel();
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let spawned =
            std::thread::Builder::new().name(name.into()).stack_size(stack).spawn(move || tracing::dispatcher::with_default(&dispatch, || serve(init_tx, rx)));
        if let Err(e) = spawned {
            tracing::warn!("cannot start the {name} thread: {e}");
            return None;
        }
        match init_rx.recv() {
            Ok(defs) => Some(Service { tx: Mutex::new(tx), defs }),
            Err(_) => None,
        }
    }

    fn send(&self, req: Request) -> bool {
        self.tx.lock().map(|tx| tx.send(req).is_ok()).unwrap_or(false)
    }
}

/// The services of one load; see the module docs.
pub struct Foreign {
    root: PathBuf,
    definitions: Vec<PathBuf>,
    lua_files: Vec<PathBuf>,
    rhai_files: Vec<PathBuf>,
    sql_audits: Vec<SqlAuditDef>,
    lua: OnceLock<Option<Service>>,
    rhai: OnceLock<Option<Service>>,
    /// Every macro by name (the first definition of a name), with its language.
    macros: OnceLock<BTreeMap<String, (Lang, MacroInfo)>>,
}

impl std::fmt::Debug for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Foreign")
    }
}

impl Foreign {
    /// The services for the project at `root` whose definition files (audit and macro files,
    /// relative) are `definitions`. Nothing starts until needed. A `.sql` audit file that does
    /// not parse is left out (the loader reports its errors).
    pub fn new(root: &Path, definitions: &[PathBuf]) -> Foreign {
        let pick = |l: Lang| definitions.iter().filter(|f| Lang::of(f) == Some(l)).cloned().collect::<Vec<_>>();
        let sql_audits =
            pick(Lang::Sql).iter().filter_map(|f| fs_err::read_to_string(root.join(f)).ok().and_then(|t| SqlAuditDef::parse(f, &t).ok())).collect();
        Foreign {
            root: root.to_path_buf(),
            definitions: definitions.to_vec(),
            lua_files: pick(Lang::Lua),
            rhai_files: pick(Lang::Rhai),
            sql_audits,
            lua: OnceLock::new(),
            rhai: OnceLock::new(),
            macros: OnceLock::new(),
        }
    }

    /// Whether `f` is one of the definition files.
    pub fn is_definition(&self, f: &Path) -> bool {
        self.definitions.iter().any(|d| d == f)
    }

    /// The Lua service (started on first use, also without Lua files: it holds the built-ins).
    fn lua(&self) -> Option<&Service> {
        self.lua
            .get_or_init(|| {
                let (root, files) = (self.root.clone(), self.lua_files.clone());
                Service::start("efmesh-lua-defs", 8 << 20, move |init, rx| super::lua::serve(&root, &files, init, rx))
            })
            .as_ref()
    }

    /// The Rhai service (started on first use).
    fn rhai(&self) -> Option<&Service> {
        self.rhai
            .get_or_init(|| {
                let (root, files) = (self.root.clone(), self.rhai_files.clone());
                Service::start("efmesh-rhai-defs", super::rhai::STACK_SIZE, move |init, rx| super::rhai::serve(&root, &files, init, rx))
            })
            .as_ref()
    }

    /// The services of the languages that have definition files.
    fn services(&self) -> Vec<(Lang, &Service)> {
        let mut out = Vec::new();
        if !self.lua_files.is_empty()
            && let Some(s) = self.lua()
        {
            out.push((Lang::Lua, s));
        }
        if !self.rhai_files.is_empty()
            && let Some(s) = self.rhai()
        {
            out.push((Lang::Rhai, s));
        }
        out
    }

    fn macro_index(&self) -> &BTreeMap<String, (Lang, MacroInfo)> {
        self.macros.get_or_init(|| {
            let mut index = BTreeMap::new();
            for (lang, s) in self.services() {
                for m in &s.defs.macros {
                    index.entry(m.name.clone()).or_insert_with(|| (lang, m.clone()));
                }
            }
            index
        })
    }

    fn signal_index(&self) -> BTreeMap<String, (Lang, MacroInfo)> {
        let mut index = BTreeMap::new();
        for (lang, s) in self.services() {
            for m in &s.defs.signals {
                index.entry(m.name.clone()).or_insert_with(|| (lang, m.clone()));
            }
        }
        index
    }

    /// Checks every signal use of `models` against the signals defined: an unknown name is a
    /// load error at the use, with a "did you mean".
    pub fn check_signals<'m>(&self, models: impl Iterator<Item = &'m crate::core::Model>) -> Vec<LoadError> {
        let mut models = models.filter(|m| !m.signals.is_empty()).peekable();
        if models.peek().is_none() {
            return Vec::new();
        }
        let index = self.signal_index();
        models.flat_map(|m| unknown_signals(&index, Some(&m.name), &m.signals)).collect()
    }

    /// [`Self::check_signals`] for the signal `uses` of one model that did not build (`model`
    /// its name when valid): its unknown signals are reported with its other load errors.
    pub fn check_signal_uses(&self, model: Option<&ModelName>, uses: &[crate::core::SignalUse]) -> Vec<LoadError> {
        if uses.is_empty() {
            return Vec::new();
        }
        unknown_signals(&self.signal_index(), model, uses)
    }

    /// Evaluates signal `name` over `intervals` (`[start, end)`, ISO-8601) with `args`, in its
    /// language's interpreter, under [`SIGNAL_BUDGET`]; its read-only queries are answered by
    /// `query` on the calling thread. One verdict per interval.
    ///
    /// # Errors
    /// An unknown signal, an error it raised, a wrong answer, a refused or failed query: each
    /// message names the signal and where it is defined.
    pub fn call_signal(
        &self,
        name: &str,
        intervals: Vec<(String, String)>,
        args: Map<String, Value>,
        query: &mut dyn FnMut(&str) -> Result<Rows, String>,
    ) -> Result<Vec<bool>, String> {
        let Some((lang, _)) = self.signal_index().get(name).cloned() else { return Err(format!("unknown signal `{name}`")) };
        let service = match lang {
            Lang::Lua => self.lua(),
            _ => self.rhai(),
        };
        let (reply, rx) = channel();
        if !service.is_some_and(|s| s.send(Request::Signal { name: name.to_string(), intervals, args, reply })) {
            return Err(format!("signal `{name}`: its interpreter is not running"));
        }
        loop {
            match rx.recv() {
                Ok(SignalMsg::Query(sql, answer)) => {
                    let _ = answer.send(query(&sql));
                }
                Ok(SignalMsg::Done(verdict)) => return verdict,
                Err(_) => return Err(format!("signal `{name}`: its interpreter stopped")),
            }
        }
    }

    /// Runs macro `name` with `args` in its language's interpreter.
    ///
    /// # Errors
    /// An unknown macro (with a "did you mean"), a wrong arity, an error the macro raised, a
    /// result that is not a string; each message names the macro and where it is defined.
    pub fn call_macro(&self, name: &str, args: Vec<String>) -> Result<String, Failure> {
        let index = self.macro_index();
        let Some((lang, info)) = index.get(name) else {
            let hint = match did_you_mean(name, index.keys().map(String::as_str)) {
                Some(s) => format!("did you mean `@{s}`?"),
                None => no_macro_hint(),
            };
            return Err(Failure { message: format!("unknown macro `@{name}`"), hint: Some(hint) });
        };
        let service = match lang {
            Lang::Lua => self.lua(),
            _ => self.rhai(),
        };
        let (reply, rx) = channel();
        if !service.is_some_and(|s| s.send(Request::Macro { name: name.to_string(), args, reply })) {
            return Err(Failure::new(format!("macro `@{name}`: its interpreter is not running")));
        }
        match rx.recv() {
            Ok((out, reads)) => {
                note_call_reads(reads);
                out.and_then(|sql| nul_free(name, &info.location, sql))
                    .map_err(|f| Failure { message: crate::core::error::excerpt(&f.message, FAILURE_CHARS, f.message.len()), hint: f.hint })
            }
            Err(_) => Err(Failure::new(format!("macro `@{name}`: its interpreter stopped"))),
        }
    }

    /// Renders a use of audit `name` (written at `location`, in a file of language `from`,
    /// whose own interpreter does not define it): from a `.sql` audit file, else from the
    /// interpreter of the other language that defines it (the built-ins from Lua's).
    /// `local` are the names the caller's own interpreter knows (for the "did you mean").
    ///
    /// # Errors
    /// An unknown audit (with a "did you mean"), bad arguments, a body that failed.
    pub fn render_audit(
        &self,
        name: &str,
        positional: Vec<Value>,
        named: Map<String, Value>,
        location: &Location,
        from: Lang,
        local: &[String],
    ) -> Result<Audit, LoadError> {
        if let Some(def) = self.sql_audits.iter().find(|d| d.def.name == name) {
            return def.render(positional, named, location);
        }
        let mut candidates: Vec<(Lang, &Service)> = Vec::new();
        if from != Lang::Lua
            && (from == Lang::Sql || !self.lua_files.is_empty())
            && let Some(s) = self.lua()
        {
            candidates.push((Lang::Lua, s));
        }
        if from != Lang::Rhai
            && !self.rhai_files.is_empty()
            && let Some(s) = self.rhai()
        {
            candidates.push((Lang::Rhai, s));
        }
        for (_, s) in &candidates {
            if s.defs.audits.iter().any(|d| d.name == name) {
                let (reply, rx) = channel();
                let req = Request::Audit { name: name.to_string(), positional, named, location: location.clone(), reply };
                if !s.send(req) {
                    break;
                }
                return match rx.recv() {
                    Ok((out, reads)) => {
                        note_call_reads(reads);
                        out
                    }
                    Err(_) => Err(LoadError::new(Some(location.clone()), None, format!("audit `{name}`: its interpreter stopped"))),
                };
            }
        }
        let mut names: Vec<&str> = local.iter().map(String::as_str).collect();
        names.extend(self.sql_audits.iter().map(|d| d.def.name.as_str()));
        for (_, s) in &candidates {
            names.extend(s.defs.audits.iter().map(|d| d.name.as_str()));
        }
        let mut e = LoadError::new(Some(location.clone()), None, format!("unknown audit `{name}`"));
        e = match did_you_mean(name, names) {
            Some(s) => e.with_hint(format!("did you mean `{s}`?")),
            None => e.with_hint("define it with `define_audit` (Lua, Rhai) or a `.sql` audit file in `audits/` (evaluated before the models)"),
        };
        Err(e)
    }

    /// Names defined in two languages (macros, or audits other than the built-ins, which every
    /// language has), each an error at the second definition naming the first. Only when
    /// definition files of two languages at least exist (one language's own duplicates are
    /// reported by its interpreter).
    pub fn check(&self) -> Vec<LoadError> {
        let langs = [!self.lua_files.is_empty(), !self.rhai_files.is_empty(), !self.sql_audits.is_empty()];
        if langs.iter().filter(|x| **x).count() < 2 {
            return Vec::new();
        }
        let builtin = |l: &Location| l.file.to_string_lossy().starts_with("efmesh:");
        let mut macros: Vec<&MacroInfo> = Vec::new();
        let mut signals: Vec<&MacroInfo> = Vec::new();
        let mut audits: Vec<(&str, &Location)> = self.sql_audits.iter().map(|d| (d.def.name.as_str(), &d.def.location)).collect();
        for (_, s) in self.services() {
            macros.extend(&s.defs.macros);
            signals.extend(&s.defs.signals);
            audits.extend(s.defs.audits.iter().filter(|d| !builtin(&d.location)).map(|d| (d.name.as_str(), &d.location)));
        }
        let mut errors = Vec::new();
        let mut twice = |what: &str, mut items: Vec<(&str, &Location)>| {
            items.sort_by(|a, b| a.1.cmp(b.1));
            let mut first: BTreeMap<&str, &Location> = BTreeMap::new();
            for (name, at) in items {
                match first.get(name) {
                    Some(f) if Lang::of(&f.file) != Lang::of(&at.file) => errors.push(
                        LoadError::new(Some(at.clone()), None, format!("{what} `{name}` is already defined (defined at {f})"))
                            .with_hint(format!("give the {what} another name")),
                    ),
                    Some(_) => {}
                    None => {
                        first.insert(name, at);
                    }
                }
            }
        };
        twice("macro", macros.iter().map(|m| (m.name.as_str(), &m.location)).collect());
        twice("audit", audits);
        twice("signal", signals.iter().map(|m| (m.name.as_str(), &m.location)).collect());
        errors
    }
}

/// What `define_macro` and `define_signal` check alike in both hosts: the refusal outside
/// definition files, the name rule, the duplicate error and each host's usage texts.
pub(crate) struct Definable {
    /// The host function, e.g. `define_macro`.
    pub function: &'static str,
    /// What it defines, e.g. `macro`.
    pub noun: &'static str,
    /// The refusal once model files are evaluated.
    pub outside: &'static str,
    /// The name rule: the message of a bad name.
    pub check_name: fn(&str) -> Result<(), String>,
    /// The error of a second definition of a name (`first` its first place, `at` this one).
    pub duplicate: fn(name: &str, first: &Location, at: &Location) -> LoadError,
    /// An example call in Lua, and what the function must be.
    pub lua: [&'static str; 2],
    /// An example call in Rhai, and what the closure must be.
    pub rhai: [&'static str; 2],
}

/// `define_macro`.
pub(crate) static MACRO: Definable = Definable {
    function: "define_macro",
    noun: "macro",
    outside: "`define_macro` belongs in macro files (`[project] macros`, default `macros/**/*.{lua,rhai}`), evaluated before every model file",
    check_name: check_macro_name,
    duplicate: duplicate_macro,
    lua: ["define_macro(\"cents_to_dollars\", function(column) … end)", "a function returning SQL text"],
    rhai: ["define_macro(\"cents_to_dollars\", |column| …)", "a closure returning SQL text"],
};

/// Checks a macro definition's name: an identifier, not a name efmesh reserves after `@`.
///
/// # Errors
/// The message for a load error at the definition.
pub fn check_macro_name(name: &str) -> Result<(), String> {
    if !crate::core::name::is_identifier(name) {
        return Err(format!("macro name `{name}` must be an identifier (`[A-Za-z_][A-Za-z0-9_]*`)"));
    }
    if RESERVED.contains(&name) {
        return Err(format!("`@{name}` is reserved by efmesh: a macro cannot be named `{name}`"));
    }
    Ok(())
}

/// The message for a call with the wrong number of arguments.
pub fn arity_message(name: &str, at: &Location, expected: &str, got: usize) -> String {
    format!("macro `@{name}` ({at}) takes {expected}, got {got}")
}

/// "1 argument", "2 arguments", "at least 1 argument".
pub fn count(n: usize) -> String {
    format!("{n} argument{}", if n == 1 { "" } else { "s" })
}

/// A duplicate macro in one language.
pub fn duplicate_macro(name: &str, first: &Location, at: &Location) -> LoadError {
    LoadError::new(Some(at.clone()), None, format!("macro `{name}` is already defined (defined at {first})")).with_hint("give the macro another name")
}

/// The uses among `uses` (of `model`) naming no signal of `index`: a load error each, at the use.
fn unknown_signals(index: &BTreeMap<String, (Lang, MacroInfo)>, model: Option<&ModelName>, uses: &[crate::core::SignalUse]) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for s in uses.iter().filter(|s| !index.contains_key(&s.name)) {
        let hint = match did_you_mean(&s.name, index.keys().map(String::as_str)) {
            Some(close) => format!("did you mean `{close}`?"),
            None => "define it with `define_signal(\"name\", function(intervals, args, db) … end)` in a macro file (`[project] macros`, default `macros/**/*.{lua,rhai}`)".into(),
        };
        errors.push(LoadError::new(Some(s.location.clone()), model.cloned(), format!("unknown signal `{}`", s.name)).with_hint(hint));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Location {
        Location { file: PathBuf::from("macros/m.lua"), line: 3 }
    }

    /// A macro answering megabytes: the error quotes 200 characters of each answer and its
    /// length (it pasted both whole).
    #[test]
    fn an_error_quotes_a_macros_output_within_bounds() {
        let (a, b) = ("a".repeat(3_000_000), "b".repeat(10));
        let e = same_twice("m", Ok(a.clone()), || Ok(b.clone())).unwrap_err();
        assert!(e.message.len() < 1000, "{} bytes", e.message.len());
        assert!(e.message.contains(&format!("returned `{}… (3000000 bytes)` and then `bbbbbbbbbb`", "a".repeat(QUOTED_CHARS))), "{}", e.message);
        assert_eq!(quoted("select\n  1"), "select 1");
    }

    #[test]
    fn a_nul_byte_in_a_macros_output_is_refused_naming_the_macro() {
        assert_eq!(nul_free("m", &at(), "SELECT 1".into()).unwrap(), "SELECT 1");
        let e = nul_free("m", &at(), "1\0".into()).unwrap_err();
        assert_eq!(e.message, "macro `@m` (macros/m.lua:3) returned SQL holding a NUL byte (`\\0`, at byte 1 of `1\\0`): no engine reads it");
        assert!(!e.message.contains('\0'));
    }

    #[test]
    fn a_write_is_refused_naming_the_macro_and_what_it_wrote() {
        let e = state_written("set", &at(), "shared.v");
        assert_eq!(
            e.message,
            "macro `@set` (macros/m.lua:3) writes state that outlives the call (`shared.v`): a macro must be a pure function of its arguments"
        );
        assert!(e.hint.is_some_and(|h| h.contains("at each call")));
    }

    /// A poisoned interpreter answers each kind of request with the refusal naming the write,
    /// without running anything; the loader lists such refusals after the other errors.
    #[test]
    fn a_request_after_a_write_is_refused_naming_the_write() {
        let cause = write_cause("macro `@set`", &at(), "shared.v");
        assert_eq!(cause, "macro `@set` (macros/m.lua:3) wrote state that outlives its call (`shared.v`)");
        let (reply, rx) = channel();
        refuse_after_write(Request::Macro { name: "get".into(), args: vec![], reply }, &cause);
        let (out, reads) = rx.recv().unwrap();
        let refusal = out.unwrap_err();
        assert!(refusal.message.starts_with(&format!("macro `@get` was not run: earlier in this load {cause}")), "{}", refusal.message);
        assert!(is_not_run(&refusal.message) && refusal.hint.is_some());
        assert!(reads.files.is_empty());
        let (reply, rx) = channel();
        let location = Location { file: PathBuf::from("models/y.sql"), line: 4 };
        refuse_after_write(Request::Audit { name: "a".into(), positional: vec![], named: Map::new(), location: location.clone(), reply }, &cause);
        let e = rx.recv().unwrap().0.unwrap_err();
        assert_eq!(e.location, Some(location));
        assert!(e.message.starts_with("audit `a` was not run: earlier in this load macro `@set`") && is_not_run(&e.message), "{}", e.message);
        let (reply, rx) = channel();
        refuse_after_write(Request::Signal { name: "s".into(), intervals: vec![], args: Map::new(), reply }, &cause);
        match rx.recv().unwrap() {
            SignalMsg::Done(Err(m)) => assert!(m.starts_with("signal `s` was not run") && m.contains(&cause), "{m}"),
            _ => panic!("a signal's refusal is its verdict"),
        }
        assert!(!is_not_run(&state_written("set", &at(), "shared.v").message));
    }

    #[test]
    fn a_function_whose_state_cannot_be_seen_is_named() {
        assert_eq!(
            hidden_state("macro `@tag`", &at(), "it"),
            "macro `@tag` (macros/m.lua:3) reaches `it`, a function made by a library call outside it (an iterator of `string.gmatch` or `pairs`) or a coroutine: it keeps state efmesh cannot see, so each call could advance it and a model's SQL would depend on the calls made before"
        );
        assert!(hidden_state("macro `@tag`", &at(), "").starts_with("macro `@tag` (macros/m.lua:3) is a function made by a library call (an iterator"));
    }
}
