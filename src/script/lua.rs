//! The Lua 5.4 host.
//!
//! One interpreter per project load (per loader worker when model files are evaluated in
//! parallel, see [`super::loader`]). Each model file runs in its own environment table holding
//! fresh copies of the allowed libraries (`string`, `table`, `math` without `random`, `utf8`,
//! safe base functions) and the efmesh API (`define_model`, `ref`, `cols`, `kind`, `require`),
//! so no file can change what another file sees: assigning a global or a library field is
//! allowed and confined to the file. The environment is built by one Lua function generated
//! when the host starts (a table constructor per library), not field by field from Rust. Each top-level file also gets a fresh module
//! table ([`LuaHost::load_file`]): what it requires is evaluated for it alone, so one file
//! mutating a module's table cannot change what another sees (see [`super::loader`]). Not available: `io`, `os`, `debug`,
//! `package`, `load`, `loadfile`, `dofile`, `string.dump`, `collectgarbage`, randomness and the
//! clock. `require` resolves only files inside the project. (The macro interpreter of
//! [`serve`] loads `debug` for its own check that macros keep no state, [`frozen`], and takes it
//! out of the globals before any other code runs.)
//!
//! # Termination
//!
//! Each top-level file (with what it requires) has a wall-clock budget ([`FILE_BUDGET`]) and a
//! work budget ([`WORK_BUDGET`]: VM instructions, counted by a hook every [`HOOK_EVERY`]
//! instructions, plus the work library functions do inside C, charged by the wrappers of
//! `stdlib/lua/guards.lua` before and after each call, so that a call that would loop for long
//! is refused before it starts). Once a budget is exceeded the evaluation is *tripped*: every
//! later hook call and every charge fails again with the same error, and `pcall`/`xpcall` (and
//! the host's own catch points) re-raise it, so no script can catch the budget and go on. A
//! memory limit bounds allocations, and the [watchdog](super::watchdog) ends the process if an
//! evaluation is stuck in an operation nothing above can interrupt. The calls efmesh makes to
//! check that audit bodies keep no state run outside the file's budgets, each audit use's under
//! budgets of its own ([`State::verifying`]).

mod audits;
mod chunk;
mod frozen;

use super::builder::{Site, Sites, build_model};
use super::sandbox::{Definitions, FileOutcome, PrintCap, Reached};
use crate::core::audit::Audit;
use crate::core::fragment::{ColsSite, RefSite};
use crate::core::{LoadError, Location, Model, ModelName};
use mlua::{AnyUserData, Function, Lua, LuaOptions, MultiValue, StdLib, Table, UserData, Value};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Memory an interpreter may allocate, in bytes.
pub const MEMORY_LIMIT: usize = 256 * 1024 * 1024;
/// Wall-clock budget for evaluating one file (including what it requires).
pub const FILE_BUDGET: Duration = Duration::from_millis(500);
/// Largest string `string.rep` may build, in bytes.
pub const MAX_STRING: usize = 64 * 1024 * 1024;
/// Work one top-level file may do: VM instructions plus the steps library functions take inside
/// C (bytes scanned or copied, elements moved or sorted). Generous: the wall-clock budget ends a
/// runaway file first unless it spends its time inside C.
pub const WORK_BUDGET: u64 = 1_000_000_000;
/// How often (in VM instructions) the hook charges the work meter and reads the clock.
pub const HOOK_EVERY: u32 = 1000;

const PRELUDE: &str = include_str!("../../stdlib/lua/prelude.lua");
const GUARDS: &str = include_str!("../../stdlib/lua/guards.lua");
/// Lua source of the safe base functions that replace the raw ones in model files.
const SAFE_BASE: &str = r#"
local charge, plain = ...
local raw_setmetatable, raw_getmetatable, next, type, error, tostring, sort, rawget = setmetatable, getmetatable, next, type, error, tostring, table.sort, rawget
local rawequal = rawequal
local raw_pcall, raw_xpcall = pcall, xpcall
local safe = {}
-- A spent budget cannot be caught: after a protected call returns, `charge(0)` raises the budget
-- error again if the evaluation was tripped meanwhile.
local function after(...)
  charge(0)
  return ...
end
function safe.pcall(...)
  return after(raw_pcall(...))
end
-- The message handler of an error raised by the budget hook runs with hooks off: it must not
-- run at all once the evaluation is tripped (`charge(0)` raises instead).
function safe.xpcall(f, handler, ...)
  if type(handler) ~= "function" then return raw_xpcall(f, handler, ...) end
  return after(raw_xpcall(f, function(e)
    charge(0)
    return handler(e)
  end, ...))
end
-- Finalizers run with the instruction hook off: no `__gc`, no `__close` metamethods.
function safe.setmetatable(t, mt)
  if type(mt) == "table" and (rawget(mt, "__gc") ~= nil or rawget(mt, "__close") ~= nil) then
    error("metatables with `__gc` or `__close` are not allowed in model files", 2)
  end
  return raw_setmetatable(t, mt)
end
-- Host objects keep their metatables to themselves.
function safe.getmetatable(v)
  if type(v) == "userdata" then return nil end
  return raw_getmetatable(v)
end
-- `tostring` without addresses (`plain`, from the guards: a table is `table`, never
-- `table: 0x…`).
safe.tostring = plain
-- `pairs` and `next` in a deterministic order (Lua's own order depends on a per-process hash
-- seed): numbers, then strings, then booleans, each in their order; a key of another type
-- orders by its `__tostring` (a model handle's name). One without (a table, a function) has no
-- order that does not depend on its address, nor have two such keys printing the same text:
-- refused, naming the caller's line.
local rank = { number = 1, string = 2, boolean = 3 }
local function before(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (rank[ta] or 9) < (rank[tb] or 9) end
  if ta == "number" or ta == "string" then return a < b end
  if ta == "boolean" then return (not a) and b end
  return tostring(a) < tostring(b)
end
-- `level`: the caller of `pairs`/`next`, counted from here.
local function unordered(k, what, level)
  error(("%s: a key of the table is a %s, which has no deterministic order (Lua orders it by its address); key the table by strings or numbers"):format(what, type(k)), level)
end
local function same_text(what, k, level)
  error(("%s: two keys of the table print the same (`%s`), so their order is not deterministic"):format(what, tostring(k)), level)
end
local function sorted_keys(t, what)
  local keys, n, odd = {}, 0, false
  for k in next, t do
    if rank[type(k)] == nil then
      if plain(k) ~= tostring(k) then unordered(k, what, 4) end
      odd = true
    end
    n = n + 1; keys[n] = k
  end
  sort(keys, before)
  if odd then
    for i = 2, n do
      local a, b = keys[i - 1], keys[i]
      if rank[type(a)] == nil and type(a) == type(b) and tostring(a) == tostring(b) then same_text(what, a, 4) end
    end
  end
  return keys, n
end
function safe.pairs(t)
  local keys = sorted_keys(t, "pairs")
  local i = 0
  return function()
    i = i + 1
    local k = keys[i]
    if k ~= nil then return k, t[k] end
  end, t, nil
end
-- `next` walks the same order: `next(t, k)` is the key after `k` in the sorted order of the keys
-- `t` holds. `next(t)` finds the first key by one scan (an emptiness test, or a loop taking the
-- first key, stays linear). A walk — each `next(t, k)` from the key the previous one returned —
-- sorts the keys once, at its first step from a key, and goes on along them: a key cleared during
-- the walk, `k` included, is skipped, as Lua allows (and one added during it may be, as Lua
-- leaves undefined). Any other `next(t, k)` sorts the keys `t` holds now: what an earlier walk
-- sorted is never reused after the table may have changed. `forget` drops every walk: the host
-- calls it before each file it evaluates and each macro, audit body or signal it runs, so no walk
-- outlives a call (the macro interpreter's state check does not look inside these functions).
local orders = raw_setmetatable({}, { __mode = "k" })
function safe.next(t, k)
  if type(t) ~= "table" then return next(t, k) end
  if k == nil then
    local best
    for key in next, t do
      local tk = type(key)
      if rank[tk] == nil and plain(key) ~= tostring(key) then unordered(key, "next", 3) end
      if best == nil then
        best = key
      else
        local tb = type(best)
        if tk == tb and (tk == "string" or tk == "number") then
          if key < best then best = key end
        elseif tk == tb and rank[tk] == nil and tostring(key) == tostring(best) then
          same_text("next", key, 3)
        elseif before(key, best) then
          best = key
        end
      end
    end
    orders[t] = nil
    if best == nil then return nil end
    return best, rawget(t, best)
  end
  local o = orders[t]
  local i
  if o ~= nil and rawequal(o.last, k) then
    -- The walk goes on from the key it returned last.
    i = o.at
  else
    local keys, n = sorted_keys(t, "next")
    o = { keys = keys }
    orders[t] = o
    -- The first position whose key does not sort before `k`: `k` itself, or (`k` was cleared)
    -- the key after where it sorts.
    local lo, hi = 1, n
    while lo <= hi do
      local mid = (lo + hi) // 2
      if before(keys[mid], k) then lo = mid + 1 else hi = mid - 1 end
    end
    i = lo - 1
    if lo <= n and rawequal(keys[lo], k) then i = lo end
  end
  local keys = o.keys
  while true do
    i = i + 1
    local key = keys[i]
    if key == nil then
      orders[t] = nil
      return nil
    end
    local v = rawget(t, key)
    if v ~= nil then
      o.last, o.at = key, i
      return key, v
    end
  end
end
-- Drops every walk of `next` (see above).
local function forget()
  for t in next, orders do orders[t] = nil end
end
return safe, forget
"#;

/// Every embedded Lua source the host evaluates (the load cache's key covers them).
pub(crate) fn stdlib_sources() -> [&'static str; 5] {
    [PRELUDE, GUARDS, SAFE_BASE, audits::BUILTINS, frozen::SOURCE]
}

/// A model handle returned by `define_model`: pass it to `ref()` and `cols()`.
#[derive(Debug, Clone)]
struct Handle(ModelName);

impl UserData for Handle {
    fn add_fields<F: mlua::UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("name", |_, this| Ok(this.0.to_string()));
    }
    fn add_methods<M: mlua::UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(mlua::MetaMethod::ToString, |_, this, ()| Ok(this.0.to_string()));
    }
}

#[derive(Default)]
struct State {
    root: PathBuf,
    models: Vec<Model>,
    errors: Vec<LoadError>,
    sites: Sites,
    /// Evaluated files (relative path) → their return value key in the registry.
    modules: HashMap<PathBuf, ModuleState>,
    /// Files being evaluated, innermost last.
    stack: Vec<PathBuf>,
    /// The text (bytes) of each file of the top-level evaluation in progress, as evaluated: where
    /// a model's query is written ([`super::builder::script_query_lines`]).
    sources: HashMap<PathBuf, Rc<[u8]>>,
    /// The budget of the top-level evaluation in progress.
    budget: Option<Budget>,
    /// What each file printed.
    printed: PrintCap,
    /// Which files defined something, and which are libraries.
    definitions: Definitions,
    /// What the top-level evaluation in progress reached through `require`.
    reached: Option<Reached>,
    /// Modules kept from one top-level evaluation to the next (audit definition files and
    /// what they require: evaluated once, before every model file).
    shared: HashSet<PathBuf>,
    /// blake3 of the bytes each module was last evaluated from (a kept module's value is
    /// reused by later top-level files, which are keyed by these bytes).
    evaluated: HashMap<PathBuf, [u8; 32]>,
    /// The value of each module's first evaluation, for test files (which `require` model
    /// files for their handles once every model file was evaluated).
    first_values: HashMap<PathBuf, mlua::RegistryKey>,
    /// The audit definitions every top-level evaluation starts from: the built-ins and the
    /// audit definition files' (set by [`LuaHost::keep_modules`]).
    base_audits: Option<super::audits::Registry<Function>>,
    /// True once test files are evaluated.
    testing: bool,
    /// Unit tests defined by test files (`define_test`).
    tests: Vec<super::test_spec::TestSpec>,
    /// `define_audit` definitions (built-ins first).
    audits: super::audits::Registry<Function>,
    /// The SQL each audit body answered for each arguments, for the whole life of the
    /// interpreter (a later use must get the same: [`super::audits::finish_pure`]).
    audit_answers: super::audits::Answers,
    /// `define_macro` definitions: name → where, and the function.
    macros: std::collections::BTreeMap<String, (Location, Function)>,
    /// `define_signal` definitions: name → where, and the function.
    signals: std::collections::BTreeMap<String, (Location, Function)>,
    /// The interpreters of the definition files of every language (macro calls, audits
    /// defined in another language); `None` in a [`serve`]d interpreter.
    foreign: Option<std::sync::Arc<super::foreign::Foreign>>,
    /// True while a macro's function runs ([`LuaHost::call_macro`]): `ref`, `cols` and
    /// `define_model` refuse ([`refused_in_macro`]).
    in_macro: bool,
}

/// The budgets of one top-level evaluation (a file and what it requires), or of the
/// verification calls of its audit bodies ([`State::verifying`]).
struct Budget {
    deadline: Instant,
    /// Work charged so far (see [`WORK_BUDGET`]).
    work: u64,
    /// The work allowed: [`WORK_BUDGET`], or [`super::audits::VERIFY_FACTOR`] times it for the
    /// verification calls of one audit use.
    work_limit: u64,
    /// The error that ended the evaluation: once set, every later check fails with it.
    tripped: Option<String>,
    /// The wall-clock budget (for the message).
    limit: Duration,
    /// The time the verification calls of audit bodies ([`State::verifying`]) took so far in
    /// this evaluation (each use's calls get a budget of their own,
    /// [`super::audits::VERIFY_FACTOR`] times this one). `None` while they run, and for their
    /// own budget.
    verified: Option<Duration>,
    /// The watchdog's entry; `None` for the verification calls' budget (they run under the
    /// file's entry, which allows for them).
    watch: Option<super::watchdog::Watch>,
}

impl Budget {
    /// The budget of a top-level evaluation of `label` lasting at most `limit`, watched.
    fn new(label: &Path, limit: Duration) -> Self {
        let watch = super::watchdog::watch(label, limit);
        let verified = Some(Duration::ZERO);
        Budget { deadline: Instant::now() + limit, work: 0, work_limit: WORK_BUDGET, tripped: None, limit, verified, watch: Some(watch) }
    }

    /// The budget of the verification calls of one audit use made during the evaluation this
    /// budget is for ([`State::verifying`]): [`super::audits::VERIFY_FACTOR`] times its time
    /// and work, starting now; not watched (the evaluation's watchdog entry allows for it).
    fn verification(&self) -> Budget {
        let factor = super::audits::VERIFY_FACTOR;
        let limit = self.limit * factor;
        let work_limit = self.work_limit.saturating_mul(u64::from(factor));
        Budget { deadline: Instant::now() + limit, work: 0, work_limit, tripped: self.tripped.clone(), limit, verified: None, watch: None }
    }
}

impl State {
    /// Charges `n` units of work (done by `what`, or by the VM) and checks both budgets; the
    /// error once a budget is spent, then again at every later call. Outside an evaluation
    /// nothing is counted.
    fn charge(&mut self, n: u64, what: Option<&str>, line: impl FnOnce() -> Option<usize>) -> Result<(), String> {
        let Some(b) = self.budget.as_mut() else { return Ok(()) };
        if let Some(msg) = &b.tripped {
            return Err(msg.clone());
        }
        let at = || line().map(|l| format!(" (at line {l})")).unwrap_or_default();
        let left = b.work_limit.saturating_sub(b.work);
        // The verification calls of audit bodies run under a budget of their own (per audit
        // use, reported in full), said so.
        let (who, whose, per, whom) = if b.watch.is_none() {
            (
                "the calls efmesh makes to check that audit bodies keep no state",
                "their own",
                format!(" per audit use and {} ms in all per file", (b.limit / super::audits::VERIFY_FACTOR * super::audits::VERIFY_TOTAL_FACTOR).as_millis()),
                "the work budget of the calls efmesh makes to check that audit bodies keep no state",
            )
        } else {
            ("evaluation", "its", String::new(), "this file's work budget")
        };
        let msg = if n > left {
            Some(match what {
                Some(what) => format!(
                    "`{what}` would take {n} steps{}, more than the {left} left of {whom} ({} steps{per}: VM instructions plus bytes and elements library functions process)",
                    at(),
                    b.work_limit
                ),
                None => format!("{who} exceeded {whose} work budget of {} steps{per}{}: an infinite loop?", b.work_limit, at()),
            })
        } else if Instant::now() > b.deadline {
            Some(format!("{who} exceeded {whose} budget of {} ms{per}{}: an infinite loop?", b.limit.as_millis(), at()))
        } else {
            None
        };
        b.work = b.work.saturating_add(n);
        match msg {
            Some(msg) => {
                let msg = format!("{msg} (the budget cannot be caught: the evaluation is abandoned)");
                b.tripped = Some(msg.clone());
                Err(msg)
            }
            None => Ok(()),
        }
    }

    /// Passes on to the file requiring `rel` (the innermost file being evaluated) the credit for
    /// the models `rel` defined, itself or through what it required, so that a top-level file
    /// whose models are all defined by the files it requires is not a file that "defines no
    /// model". Also when `rel` was evaluated earlier and its cached value is returned.
    fn credit_requirer(&mut self, rel: &Path) {
        if self.definitions.defining.contains(rel)
            && let Some(requirer) = self.stack.last().cloned()
        {
            self.definitions.defining.insert(requirer);
        }
    }

    /// The budget error, when the evaluation in progress was tripped.
    fn tripped(&self) -> Option<mlua::Error> {
        self.budget.as_ref().and_then(|b| b.tripped.clone()).map(rt)
    }

    /// Runs `f`, the verification calls of one audit use ([`audits::render`]), outside the
    /// file's budget: under a budget of their own for this use ([`Budget::verification`]:
    /// [`super::audits::VERIFY_FACTOR`] times the file's time and work, whatever earlier uses'
    /// calls took), so that a pure body that fits the file's budget once per use always loads.
    /// The time they take is given back to the file (its deadline moves by as much, and its
    /// watchdog entry allows for the time earlier uses' calls took plus this use's whole
    /// budget), the work they do is not charged to it; a verification budget spent trips the
    /// file. Outside an evaluation (or inside verification calls) `f` just runs.
    fn verifying<T>(st: &RefCell<State>, f: impl FnOnce() -> T) -> T {
        let file = st.borrow_mut().budget.take();
        let Some(mut file) = file else { return f() };
        let Some(verified) = file.verified.take() else {
            st.borrow_mut().budget = Some(file);
            return f();
        };
        let mut own = file.verification();
        // At most VERIFY_TOTAL_FACTOR times the file's budget in all for the file's uses.
        let total = file.limit * super::audits::VERIFY_TOTAL_FACTOR;
        let left = total.saturating_sub(verified);
        if left < own.limit {
            own.deadline = Instant::now() + left;
        }
        if let Some(watch) = &file.watch {
            watch.allow_extra(verified + own.limit.min(left));
        }
        let started = Instant::now();
        st.borrow_mut().budget = Some(own);
        let out = f();
        let own = st.borrow_mut().budget.take();
        let spent = started.elapsed();
        file.deadline += spent;
        file.verified = Some(verified + spent);
        if let Some(tripped) = own.and_then(|o| o.tripped)
            && file.tripped.is_none()
        {
            file.tripped = Some(tripped);
        }
        st.borrow_mut().budget = Some(file);
        out
    }
}

enum ModuleState {
    Loading,
    Done(mlua::RegistryKey),
    Failed,
}

/// Evaluates model files; see the module docs.
pub struct LuaHost {
    lua: Lua,
    state: Rc<RefCell<State>>,
    /// Safe globals copied into each file's environment.
    proto: Table,
    /// Builds one file's environment (see [`environment_factory`]).
    env_factory: Function,
    /// The check that macros keep no state ([`frozen`]): in the macro interpreter ([`serve`]) only.
    frozen: Option<frozen::Frozen>,
    /// Drops the walks of the safe `next` (`forget` of [`SAFE_BASE`]; [`LuaHost::forget_walks`]
    /// calls it before each top-level file and each served call), so no walk, whose sorted keys
    /// the state check does not see, outlives one.
    walks_reset: Function,
}

fn rt(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

/// Registry key of the raw `xpcall` ([`call_plain`]).
const XPCALL_KEY: &str = "efmesh.xpcall";
/// Registry key of the function [`error_handler`] builds.
const HANDLER_KEY: &str = "efmesh.error_handler";
/// Registry key of the prelude's `guard`: gives a file's copy of `kind` the error naming an
/// unknown kind ([`environment_factory`]).
const KIND_GUARD_KEY: &str = "efmesh.kind_guard";
/// Registry key of a Lua function returning `t[k]` (metamethods included), for reading a field
/// of a project table through [`call_plain`].
const INDEX_KEY: &str = "efmesh.index";

/// Set by [`error_handler`] when it runs (the interpreter's app data): Lua calls no message
/// handler for an allocation failure, so an `xpcall` failing without it is a memory error
/// ([`call_plain`]).
struct HandlerRan(std::cell::Cell<bool>);

/// What `xpcall` hands back for an allocation failure (Lua's preallocated message).
const NOT_ENOUGH_MEMORY: &str = "not enough memory";

/// The message handler of every call into project code ([`call_plain`]): what mlua's own handler
/// does (the error's text followed by a traceback), except that an error value that is not a
/// string (`error({})`, `assert(false, f)`) is converted with the sandbox's `tostring` (`plain`
/// of the guards): `table`, never `table: 0x…`, whose address depends on what the interpreter
/// ran before and would otherwise reach SQL through a `pcall`'s message (a new fingerprint with
/// no edit). efmesh's own errors (a callback's, the budget's) pass unchanged. It notes that it
/// ran ([`HandlerRan`]). While a macro runs, a table raised is shown with its fields, after the
/// file:line that raised it ([`described`]): Lua gives a value that is not a string no position,
/// and `failed: table` said nothing of what went wrong.
fn error_handler(lua: &Lua, plain: Function, st: Rc<RefCell<State>>) -> mlua::Result<Function> {
    lua.create_function(move |lua, e: Value| {
        if let Some(ran) = lua.app_data_ref::<HandlerRan>() {
            ran.0.set(true);
        }
        if matches!(e, Value::Error(_)) {
            return Ok(e);
        }
        let text = match &e {
            Value::String(s) => s.to_string_lossy(),
            other => {
                let in_macro = st.try_borrow().ok().filter(|s| s.in_macro).map(|s| s.root.clone());
                let shown = match &in_macro {
                    Some(root) => described(&plain, other).map(|text| match caller_location(lua, root) {
                        Some(at) => format!("{at}: {text}"),
                        None => text,
                    }),
                    None => plain.call::<String>(other.clone()),
                };
                match shown {
                    Ok(text) => text,
                    // A `__tostring` that fails: the type's name; one that loops: the spent budget.
                    Err(_) => match st.try_borrow().ok().and_then(|s| s.tripped()) {
                        Some(tripped) => return Ok(Value::Error(Box::new(tripped))),
                        None => other.type_name().to_string(),
                    },
                }
            }
        };
        Ok(Value::String(lua.traceback(Some(text.as_str()), 0)?))
    })
}

/// Entries of a table [`described`] shows, per table.
const DESCRIBED_ENTRIES: usize = 16;

/// A value a macro raised that is not a string, as text: a table without `__tostring` as its
/// entries (`{code = 1, why = "bad", list = {1, 2}}`: keys in order — numbers, strings,
/// booleans, then other values by their type's name and their text —, a sequence's items by
/// position, tables two levels deep, at most [`DESCRIBED_ENTRIES`] entries each, the first in
/// that order), anything else as `plain` (the sandbox's `tostring`) shows it. No address either
/// way, nor any order that depends on one (a table's own order does). Only the entries
/// shown are kept while a table is walked (a raised table of a million entries is counted, not
/// copied).
fn described(plain: &Function, v: &Value) -> mlua::Result<String> {
    /// Where a key's entry comes in `described`: numbers, strings, booleans, then any other
    /// key by its type's name, its text and its value's text (a table or a function as a key is
    /// ordered by what it shows, never by its address).
    #[derive(PartialEq, PartialOrd)]
    enum Order {
        Number(f64),
        Text(String),
        Boolean(bool),
        Other(&'static str, String, String),
    }
    fn shown(plain: &Function, v: &Value, depth: usize) -> mlua::Result<String> {
        let mut out = String::new();
        show(plain, v, depth, &mut out)?;
        Ok(out)
    }
    fn show(plain: &Function, v: &Value, depth: usize, out: &mut String) -> mlua::Result<()> {
        use std::fmt::Write as _;
        let t = match v {
            Value::String(s) => {
                let _ = write!(out, "{:?}", s.to_string_lossy());
                return Ok(());
            }
            Value::Table(t) if t.metatable().is_none_or(|m| m.raw_get::<Value>("__tostring").is_ok_and(|f| f.is_nil())) => t,
            other => {
                out.push_str(&plain.call::<String>(other.clone())?);
                return Ok(());
            }
        };
        if depth >= 2 {
            out.push_str("{…}");
            return Ok(());
        }
        // The first entries in key order, sorted; every entry counted.
        let mut entries: Vec<(Order, Value, Value)> = Vec::with_capacity(DESCRIBED_ENTRIES + 1);
        let mut total = 0usize;
        for pair in t.pairs::<Value, Value>() {
            let (k, x) = pair?;
            total += 1;
            let order = match &k {
                Value::Integer(i) => Order::Number(*i as f64),
                Value::Number(n) => Order::Number(*n),
                Value::String(s) => Order::Text(s.to_string_lossy()),
                Value::Boolean(b) => Order::Boolean(*b),
                other => Order::Other(other.type_name(), shown(plain, other, depth + 1)?, shown(plain, &x, depth + 1)?),
            };
            if entries.len() == DESCRIBED_ENTRIES && entries.last().is_some_and(|(last, _, _)| order >= *last) {
                continue;
            }
            let at = entries.partition_point(|(o, _, _)| *o <= order);
            entries.insert(at, (order, k, x));
            entries.truncate(DESCRIBED_ENTRIES);
        }
        let len = t.raw_len();
        out.push('{');
        for (i, (_, k, x)) in entries.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match k {
                Value::Integer(j) if *j >= 1 && usize::try_from(*j).is_ok_and(|j| j <= len) => {}
                Value::String(s) if crate::core::name::is_identifier(&s.to_string_lossy()) => {
                    let _ = write!(out, "{} = ", s.to_string_lossy());
                }
                other => {
                    out.push('[');
                    show(plain, other, depth + 1, out)?;
                    out.push_str("] = ");
                }
            }
            show(plain, x, depth + 1, out)?;
        }
        if total > DESCRIBED_ENTRIES {
            let _ = write!(out, ", … ({total} entries)");
        }
        out.push('}');
        Ok(())
    }
    shown(plain, v, 0)
}

/// Calls project code `f` with `args`, as [`Function::call`] does but under [`error_handler`]
/// (through the raw `xpcall`): no address of an error value reaches the error's text, whether
/// the error goes back into Lua (a `pcall` around `define_model` or `require`) or into a report.
///
/// # Errors
/// The error `f` raised: efmesh's own errors keep their kind, an allocation failure is a memory
/// error (`memory error: not enough memory`, as mlua reports it: Lua calls no message handler
/// for it), any other is a runtime error carrying the handler's text.
fn call_plain<R: mlua::FromLuaMulti>(lua: &Lua, f: &Function, args: impl mlua::IntoLuaMulti) -> mlua::Result<R> {
    let xpcall: Function = lua.named_registry_value(XPCALL_KEY)?;
    let handler: Function = lua.named_registry_value(HANDLER_KEY)?;
    // Whether the handler ran for this call: the flag of an enclosing call is put back after it.
    let outer = lua.app_data_ref::<HandlerRan>().map(|ran| ran.0.replace(false));
    let out = xpcall.call::<MultiValue>((f.clone(), handler, args));
    let handled = lua.app_data_ref::<HandlerRan>().is_none_or(|ran| ran.0.replace(outer.unwrap_or(false)));
    let mut out = out?;
    match out.pop_front() {
        Some(Value::Boolean(true)) => R::from_lua_multi(out, lua),
        _ => Err(match out.pop_front() {
            Some(Value::Error(e)) => *e,
            Some(Value::String(s)) if !handled && s.to_string_lossy() == NOT_ENOUGH_MEMORY => mlua::Error::MemoryError(s.to_string_lossy()),
            Some(Value::String(s)) => mlua::Error::RuntimeError(s.to_string_lossy()),
            other => mlua::Error::RuntimeError(other.map_or("nil", |v| v.type_name()).to_string()),
        }),
    }
}

/// The error of `function` (`ref`, `cols`, `define_model`) called while a macro runs, at the
/// macro code's file:line; `None` outside a macro. A macro runs in the interpreter of the macro
/// files: a `ref()` marker it returned would be resolved against the calling model's own
/// references (another model, read silently).
fn refused_in_macro(lua: &Lua, st: &RefCell<State>, function: &str) -> Option<mlua::Error> {
    let s = st.borrow();
    if !s.in_macro {
        return None;
    }
    let at = caller_location(lua, &s.root).map(|l| format!("{l}: ")).unwrap_or_default();
    Some(rt(format!("{at}{}", super::macros::not_in_macros(function))))
}

/// file:line of the Lua code that called the current Rust callback.
fn caller_location(lua: &Lua, root: &Path) -> Option<Location> {
    for level in 1..8 {
        let found = lua.inspect_stack(level, |d| {
            let src = d.source();
            let file = src.source.as_deref().and_then(|s| s.strip_prefix('@')).map(PathBuf::from);
            (file, d.current_line())
        });
        match found {
            None => return None,
            Some((Some(file), line)) => {
                let file = file.strip_prefix(root).map(Path::to_path_buf).unwrap_or(file);
                return Some(Location { file, line: line.unwrap_or(0) as u32 });
            }
            Some((None, _)) => continue,
        }
    }
    None
}

/// The line of the innermost project-file Lua code on the stack (the caller of a callback).
fn caller_line(lua: &Lua) -> Option<usize> {
    (1..8).map_while(|level| lua.inspect_stack(level, |d| (d.source().source.is_some_and(|s| s.starts_with('@')), d.current_line()))).find(|(ours, _)| *ours)?.1
}

/// The line of a `<close>` attribute in Lua source, if any (its `__close` handler would run with
/// the instruction hook off).
fn close_attribute_line(code: &[u8]) -> Option<u32> {
    // Most files never mention `close`: one vectorised search decides (a cold load reads every file).
    memchr::memmem::find(code, b"close")?;
    let text = String::from_utf8_lossy(code);
    for (i, line) in text.lines().enumerate() {
        let squeezed: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        if squeezed.contains("<close>") {
            return Some(i as u32 + 1);
        }
    }
    None
}

/// Parses `path:line:` at the start of a Lua error message.
fn location_in_message(msg: &str, file: &Path) -> Option<u32> {
    let f = file.to_string_lossy();
    let named = msg.find(f.as_ref()).and_then(|idx| {
        let rest = msg[idx + f.len()..].strip_prefix(':')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    });
    // A spent budget stops the evaluation from the interpreter's hook, whose error names no
    // file: its message says where it stopped, `(at line N)`.
    named.or_else(|| {
        let rest = &msg[msg.find("(at line ")? + "(at line ".len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// Values one conversion to JSON may visit (a model spec, an audit's arguments, a unit test's
/// fixtures): conversion runs in Rust, out of the budget hook's sight, and tables shared at
/// several places of a nested value would otherwise be visited once per path.
const MAX_JSON_VALUES: usize = 200_000;

fn lua_to_json(v: &Value, depth: usize) -> Result<serde_json::Value, String> {
    let mut left = MAX_JSON_VALUES;
    to_json(v, depth, &mut left)
}

fn to_json(v: &Value, depth: usize, left: &mut usize) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if depth > 32 {
        return Err("value nested too deeply".into());
    }
    *left = left.checked_sub(1).ok_or_else(|| format!("value too large (more than {MAX_JSON_VALUES} values)"))?;
    Ok(match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => J::from(*i),
        Value::Number(n) => serde_json::Number::from_f64(*n).map(J::Number).ok_or("a number must be finite")?,
        Value::String(s) => J::String(s.to_str().map_err(|_| "strings must be UTF-8")?.to_string()),
        Value::Table(t) => {
            let len = t.raw_len();
            // Each entry converted once: its key, its position when it is 1..=len, its value.
            let mut entries = Vec::new();
            let mut all_seq = true;
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, val) = pair.map_err(|e| e.to_string())?;
                let position = match &k {
                    Value::Integer(i) if *i >= 1 && (*i as usize) <= len => Some(*i as usize),
                    _ => {
                        all_seq = false;
                        None
                    }
                };
                let key = match &k {
                    Value::String(s) => s.to_str().map_err(|_| "keys must be UTF-8")?.to_string(),
                    Value::Integer(i) => i.to_string(),
                    other => return Err(format!("unsupported key type `{}`", other.type_name())),
                };
                entries.push((key, position, to_json(&val, depth + 1, left)?));
            }
            if all_seq && entries.len() == len && len > 0 {
                let mut arr = vec![J::Null; len];
                for (_, position, value) in entries {
                    if let Some(p) = position {
                        arr[p - 1] = value;
                    }
                }
                J::Array(arr)
            } else {
                J::Object(entries.into_iter().map(|(key, _, value)| (key, value)).collect())
            }
        }
        Value::UserData(ud) => match ud.borrow::<Handle>() {
            Ok(h) => J::String(h.0.to_string()),
            Err(_) => return Err("unsupported userdata value".into()),
        },
        Value::Function(_) => return Err("a function is not allowed here".into()),
        other => return Err(format!("unsupported value of type `{}`", other.type_name())),
    })
}

/// A ref target from a handle or a `"schema.table"` string.
fn target_of(v: &Value) -> mlua::Result<ModelName> {
    match v {
        Value::UserData(ud) => ud.borrow::<Handle>().map(|h| h.0.clone()).map_err(|_| rt("expected a model handle or a \"schema.table\" string")),
        Value::String(s) => {
            let s = s.to_str().map_err(|_| rt("model names must be UTF-8"))?;
            ModelName::parse(&s).map_err(|e| rt(e.to_string()))
        }
        Value::Nil => Err(rt("expected a model handle or a \"schema.table\" string, got nil (is the handle exported by the file you required?)")),
        other => Err(rt(format!("expected a model handle or a \"schema.table\" string, got {}", other.type_name()))),
    }
}

impl LuaHost {
    /// A host for the project rooted at `root`.
    ///
    /// # Errors
    /// When the interpreter cannot be created.
    pub fn new(root: &Path) -> mlua::Result<Self> {
        Self::create(root, false)
    }

    /// A host for the project rooted at `root`; `served`: the macro interpreter of
    /// [`serve`], which also checks that macros keep no state ([`frozen`]) with the debug
    /// library, taken out of the globals before anything else runs (no script sees it: a file's
    /// environment is built from `proto` and copies of [`COPIED_LIBRARIES`]).
    fn create(root: &Path, served: bool) -> mlua::Result<Self> {
        let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8;
        let lua = if served {
            // SAFETY: the debug library is loaded for efmesh's own code (`frozen`) only: it is
            // removed from the globals below, before any other code runs, and kept in a Rust
            // value; mlua's "unsafe" mode otherwise only allows loading C modules, which no
            // library loaded here can do (no `package`).
            unsafe { Lua::unsafe_new_with(libs | StdLib::DEBUG, LuaOptions::new()) }
        } else {
            Lua::new_with(libs, LuaOptions::new())?
        };
        let debug: Option<Table> = if served {
            let debug: Table = lua.globals().get("debug")?;
            lua.globals().raw_set("debug", Value::Nil)?;
            Some(debug)
        } else {
            None
        };
        lua.set_memory_limit(MEMORY_LIMIT)?;
        let state = Rc::new(RefCell::new(State { root: root.to_path_buf(), ..State::default() }));
        {
            let st = state.clone();
            lua.set_hook(mlua::HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |_, debug| {
                match st.borrow_mut().charge(u64::from(HOOK_EVERY), None, || debug.current_line()) {
                    Ok(()) => Ok(mlua::VmState::Continue),
                    Err(msg) => Err(rt(msg)),
                }
            })?;
        }
        // charge(n, what): the work meter the library wrappers (and `pcall`) charge.
        let st = state.clone();
        let charge = lua.create_function(move |lua, (n, what): (Value, Option<String>)| {
            let n = match n {
                Value::Integer(i) => u64::try_from(i).unwrap_or(0),
                // Saturating: `inf` and anything above u64::MAX charge everything; NaN nothing.
                Value::Number(f) if f > 0.0 => f as u64,
                _ => 0,
            };
            st.borrow_mut().charge(n, what.as_deref(), || caller_line(lua)).map_err(rt)
        })?;
        let limits = lua.create_table()?;
        limits.set("max_string", MAX_STRING)?;
        limits.set("max_table_move", 10_000_000)?;
        limits.set("max_pattern_cost", 1e9)?;
        limits.set("charge", charge.clone())?;
        let plain: Function = lua.load(GUARDS).set_name("=efmesh/guards.lua").call(limits)?;
        // Every call into project code runs under this message handler (see `call_plain`).
        lua.set_named_registry_value(XPCALL_KEY, lua.globals().get::<Function>("xpcall")?)?;
        lua.set_named_registry_value(HANDLER_KEY, error_handler(&lua, plain.clone(), state.clone())?)?;
        lua.set_app_data(HandlerRan(std::cell::Cell::new(false)));
        let index: Function = lua.load("return function(t, k) return t[k] end").set_name("=efmesh/index.lua").eval()?;
        lua.set_named_registry_value(INDEX_KEY, index)?;
        // Lock the string metatable so `getmetatable("")` cannot reach the shared string table.
        lua.load("getmetatable('').__metatable = false").set_name("=efmesh").exec()?;
        let g = lua.globals();
        let proto = lua.create_table()?;
        for name in [
            "assert", "error", "ipairs", "next", "pcall", "select", "tonumber", "tostring", "type", "xpcall", "rawequal", "rawget", "rawlen", "rawset",
            "_VERSION",
        ] {
            proto.set(name, g.get::<Value>(name)?)?;
        }
        let (safe, forget_walks): (Table, Function) = lua.load(SAFE_BASE).set_name("=efmesh/safe.lua").call((charge, plain))?;
        for pair in safe.pairs::<Value, Value>() {
            let (k, v) = pair?;
            proto.set(k, v)?;
        }
        // The prelude's error for an unknown kind (`kind.ful()`) is the one every language gives.
        let unknown = lua.create_function(|_, name: String| Ok(super::builder::unknown_kind(&name)))?;
        let prelude: Table = lua.load(PRELUDE).set_name("=efmesh/prelude.lua").call(unknown)?;
        proto.set("kind", prelude.get::<Value>("kind")?)?;
        lua.set_named_registry_value(KIND_GUARD_KEY, prelude.get::<Function>("guard")?)?;
        let placeholder = lua.create_function(|_, ()| Ok(()))?;
        let frozen = debug.as_ref().map(|d| frozen::Frozen::new(&lua, d)).transpose()?;
        let mut host = Self { lua, state, proto, env_factory: placeholder, frozen, walks_reset: forget_walks };
        host.install_api()?;
        audits::install(&host.lua, &host.proto, &host.state)?;
        let require = require_fn(&host.lua, host.state.clone())?;
        host.env_factory = environment_factory(&host.lua, &host.proto, require)?;
        host.ensure_loader()?;
        let env = make_environment(&host.env_factory)?;
        host.lua.load(audits::BUILTINS).set_name("=efmesh/audits.lua").set_mode(mlua::chunk::ChunkMode::Text).set_environment(env).exec()?;
        // What every file's environment holds, and the built-in audits' bodies, are efmesh's
        // own: the state check does not follow them ([`frozen::Frozen::know`]).
        if let Some(frozen) = &host.frozen {
            frozen.know(&make_environment(&host.env_factory)?)?;
            let builtins = host.lua.create_table()?;
            {
                let s = host.state.borrow();
                for def in s.audits.defs() {
                    if let Some((_, body)) = s.audits.get(&def.name) {
                        builtins.raw_push(body)?;
                    }
                }
            }
            frozen.know(&builtins)?;
        }
        Ok(host)
    }

    fn install_api(&self) -> mlua::Result<()> {
        let lua = &self.lua;
        // ref(x)
        let st = self.state.clone();
        let ref_fn = lua.create_function(move |lua, v: Value| {
            if let Some(e) = refused_in_macro(lua, &st, "ref") {
                return Err(e);
            }
            let target = target_of(&v)?;
            let root = st.borrow().root.clone();
            let location = caller_location(lua, &root).unwrap_or_else(|| Location { file: PathBuf::new(), line: 0 });
            Ok(st.borrow_mut().sites.record(Site::Ref(RefSite { target, location })))
        })?;
        // cols(parent, "a", "b", ...)
        let st = self.state.clone();
        let cols_fn = lua.create_function(move |lua, args: MultiValue| {
            if let Some(e) = refused_in_macro(lua, &st, "cols") {
                return Err(e);
            }
            let mut it = args.into_iter();
            let first = it.next().unwrap_or(Value::Nil);
            let of_ref = match &first {
                Value::String(s) => s.to_str().ok().and_then(|t| st.borrow().sites.ref_target(&t)),
                _ => None,
            };
            let parent = match of_ref {
                Some(p) => p,
                None => target_of(&first)?,
            };
            let mut columns = Vec::new();
            for v in it {
                match v {
                    Value::String(s) => columns.push(s.to_str().map_err(|_| rt("column names must be UTF-8"))?.to_string()),
                    other => return Err(rt(format!("`cols()` column names must be strings, got {}", other.type_name()))),
                }
            }
            let root = st.borrow().root.clone();
            let location = caller_location(lua, &root).unwrap_or_else(|| Location { file: PathBuf::new(), line: 0 });
            Ok(st.borrow_mut().sites.record(Site::Cols(ColsSite { parent, columns, location })))
        })?;
        // define_model { ... }
        let st = self.state.clone();
        let define_fn = lua.create_function(move |lua, spec: Value| {
            if let Some(e) = refused_in_macro(lua, &st, "define_model") {
                return Err(e);
            }
            {
                let mut s = st.borrow_mut();
                if let Some(file) = s.stack.last().cloned() {
                    s.definitions.defining.insert(file);
                }
            }
            let root = st.borrow().root.clone();
            let location = caller_location(lua, &root).unwrap_or_else(|| Location { file: PathBuf::new(), line: 0 });
            let Value::Table(t) = spec else {
                return Err(rt(format!("`define_model` expects a table, got {}", spec.type_name())));
            };
            // Read (an `__index` of the spec may raise) and called under the sandbox's handler.
            let index: Function = lua.named_registry_value(INDEX_KEY)?;
            let query_val: Value = call_plain(lua, &index, (t.clone(), "query"))?;
            let query = match query_val {
                Value::Nil => None,
                Value::String(s) => Some(s.to_str().map_err(|_| rt("`query` must be UTF-8"))?.to_string()),
                Value::Function(f) => match call_plain::<Value>(lua, &f, ())? {
                    Value::String(s) => Some(s.to_str().map_err(|_| rt("`query` must be UTF-8"))?.to_string()),
                    other => return Err(rt(format!("the `query` function must return a string, got {}", other.type_name()))),
                },
                other => return Err(rt(format!("`query` must be a string or a function returning one, got {}", other.type_name()))),
            };
            // Convert everything but the query (and the audits) to a neutral spec.
            let mut spec = serde_json::Map::new();
            let mut attached = Vec::new();
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair?;
                let Value::String(k) = k else {
                    return Err(rt("`define_model` fields must be named"));
                };
                let key = k.to_str()?.to_string();
                if key == "query" {
                    continue;
                }
                if key == "audits" {
                    match audits::collect(&v) {
                        Ok(a) => attached = a,
                        Err(msg) => {
                            // Named like the model's other field errors.
                            let model = t.raw_get::<Option<String>>("name").ok().flatten().and_then(|n| crate::core::ModelName::parse(&n).ok());
                            st.borrow_mut().errors.push(LoadError::new(Some(location.clone()), model, msg));
                        }
                    }
                    continue;
                }
                let kind_fn = matches!(v, Value::Function(_)) && key == "kind";
                let v = if kind_fn {
                    // `kind = kind.full` (without the call) is accepted.
                    let Value::Function(f) = v else { unreachable!() };
                    call_plain::<Value>(lua, &f, ())?
                } else {
                    v
                };
                let j = lua_to_json(&v, 0).map_err(|e| rt(format!("`{key}`: {e}")))?;
                spec.insert(key, j);
            }
            // `@name(…)` macro calls (query and pre/post statements), expanded before the query
            // is parsed (errors at the call); the text as the script built it places the
            // query's lines in the file.
            let foreign = st.borrow().foreign.clone();
            let written = query.clone();
            let (query, expansion) = match super::macros::expand_model(query, &mut spec, foreign.as_deref(), &location) {
                Ok(q) => q,
                Err(errs) => {
                    let name = spec.get("name").and_then(|v| v.as_str()).and_then(|n| ModelName::parse(n).ok());
                    st.borrow_mut().errors.extend(errs.into_iter().map(|mut e| {
                        e.model = name.clone();
                        e
                    }));
                    let unknown = super::builder::unknown_signals(&spec, &location, foreign.as_deref());
                    st.borrow_mut().errors.extend(unknown);
                    return match name {
                        Some(n) => Ok(Value::UserData(lua.create_userdata(Handle(n))?)),
                        None => Ok(Value::Nil),
                    };
                }
            };
            let mut s = st.borrow_mut();
            let built = build_model(&spec, query.as_deref(), &s.sites, location.clone());
            match built {
                Ok(mut m) => {
                    m.audits = attached;
                    if let (Some(written), Some(expanded), Some(source), true) = (&written, &query, s.sources.get(&location.file), m.body.is_some()) {
                        m.query_lines = super::builder::script_query_lines(source, written, expanded, &expansion);
                    }
                    let handle = Handle(m.name.clone());
                    s.models.push(m);
                    drop(s);
                    Ok(Value::UserData(lua.create_userdata(handle)?))
                }
                Err(errs) => {
                    let name = spec.get("name").and_then(|v| v.as_str()).and_then(|n| ModelName::parse(n).ok());
                    s.errors.extend(errs);
                    // Its unknown signals too: they are checked after the load only on models that built.
                    let foreign = s.foreign.clone();
                    s.errors.extend(super::builder::unknown_signals(&spec, &location, foreign.as_deref()));
                    drop(s);
                    // Keep evaluating so later errors surface too.
                    match name {
                        Some(n) => Ok(Value::UserData(lua.create_userdata(Handle(n))?)),
                        None => Ok(Value::Nil),
                    }
                }
            }
        })?;
        // print(...) → log on stderr, never stdout.
        let st = self.state.clone();
        let print_fn = lua.create_function(move |lua, args: MultiValue| {
            let text = args.iter().map(|v| v.to_string().unwrap_or_default()).collect::<Vec<_>>().join("\t");
            let line = caller_line(lua);
            let mut s = st.borrow_mut();
            s.charge(text.len() as u64, Some("print"), || line).map_err(rt)?;
            let file = s.stack.last().cloned().unwrap_or_default();
            s.printed.print(&file, line, &text);
            Ok(())
        })?;
        // define_macro("name", function(a, b) … end): only in definition files.
        let define_macro = self.definition(&super::foreign::MACRO, |s| &mut s.macros)?;
        self.proto.set("define_macro", define_macro)?;
        // define_signal("name", function(intervals, args, db) … end): only in definition files.
        let define_signal = self.definition(&super::signals::SIGNAL, |s| &mut s.signals)?;
        self.proto.set("define_signal", define_signal)?;
        self.proto.set("ref", ref_fn)?;
        self.proto.set("cols", cols_fn)?;
        self.proto.set("define_model", define_fn)?;
        self.proto.set("print", print_fn)?;
        let refuse_test = lua.create_function(|_, _: Value| -> mlua::Result<()> {
            Err(rt("`define_test` belongs in test files (`project.tests`, default `tests/**/*.{lua,rhai}`), not in model files"))
        })?;
        self.proto.set("define_test", refuse_test)?;
        Ok(())
    }

    /// The host function of `kind` (`define_macro`, `define_signal`): `kind.function("name", f)`
    /// only in definition files, recording `f` in `map` of the state.
    fn definition(
        &self,
        kind: &'static super::foreign::Definable,
        map: fn(&mut State) -> &mut std::collections::BTreeMap<String, (Location, Function)>,
    ) -> mlua::Result<Function> {
        let st = self.state.clone();
        self.lua.create_function(move |lua, args: MultiValue| {
            let root = st.borrow().root.clone();
            let location = caller_location(lua, &root).unwrap_or_else(|| Location { file: PathBuf::new(), line: 0 });
            let mut s = st.borrow_mut();
            if s.base_audits.is_some() {
                return Err(rt(kind.outside));
            }
            let [usage, expects] = kind.lua;
            // An extra argument (`define_macro("m", f, 3)`) would be ignored silently.
            if args.len() > 2 {
                return Err(rt(format!("`{}` takes a name and a function, e.g. `{usage}`, got {} arguments", kind.function, args.len())));
            }
            let mut args = args.into_iter();
            let (name, f) = (args.next().unwrap_or(Value::Nil), args.next().unwrap_or(Value::Nil));
            let Value::String(name) = name else {
                return Err(rt(format!("`{}` expects a name and a function, e.g. `{usage}`, got {} first", kind.function, name.type_name())));
            };
            let name = name.to_str().map_err(|_| rt(format!("{} names must be UTF-8", kind.noun)))?.to_string();
            let Value::Function(f) = f else {
                return Err(rt(format!("`{}(\"{name}\", …)` expects {expects}, got {}", kind.function, f.type_name())));
            };
            if let Some(file) = s.stack.last().cloned() {
                s.definitions.defining.insert(file);
            }
            if let Err(m) = (kind.check_name)(&name) {
                s.errors.push(LoadError::new(Some(location), None, m));
            } else if let Some((first, _)) = map(&mut s).get(&name) {
                let e = (kind.duplicate)(&name, first, &location);
                s.errors.push(e);
            } else {
                map(&mut s).insert(name, (location, f));
            }
            Ok(())
        })
    }

    /// Switches the host to test files: files evaluated from now on get `define_test` (recording
    /// a [`TestSpec`](super::test_spec::TestSpec)) and a `define_model` that refuses. Model files
    /// already evaluated keep their handles, so test files can `require` them.
    ///
    /// # Errors
    /// When the Lua functions cannot be created.
    pub fn begin_tests(&mut self) -> mlua::Result<()> {
        let lua = &self.lua;
        let st = self.state.clone();
        let define_test = lua.create_function(move |lua, spec: Value| {
            let root = st.borrow().root.clone();
            let location = caller_location(lua, &root).unwrap_or_else(|| Location { file: PathBuf::new(), line: 0 });
            let Value::Table(_) = spec else {
                return Err(rt(format!("`define_test` expects a table, got {}", spec.type_name())));
            };
            let json = lua_to_json(&spec, 0).map_err(|e| {
                let hint = if e.contains("key type") { " (key `inputs` by model names: `[handle.name] = { … }`)" } else { "" };
                rt(format!("`define_test`: {e}{hint}"))
            })?;
            let map = match json {
                serde_json::Value::Object(m) => m,
                _ => return Err(rt("`define_test` expects a table of named fields")),
            };
            let mut s = st.borrow_mut();
            match super::test_spec::build_test(&map, location) {
                Ok(t) => s.tests.push(t),
                Err(errs) => s.errors.extend(errs),
            }
            Ok(())
        })?;
        let refuse_model = lua.create_function(|_, _: Value| -> mlua::Result<()> {
            Err(rt("`define_model` is not available in test files: define models in model files (`project.models`)"))
        })?;
        self.proto.set("define_test", define_test)?;
        self.proto.set("define_model", refuse_model)?;
        let mut s = self.state.borrow_mut();
        s.testing = true;
        // Test files see each model file as its first evaluation left it.
        for (rel, key) in std::mem::take(&mut s.first_values) {
            if !matches!(s.modules.get(&rel), Some(ModuleState::Done(_))) {
                s.modules.insert(rel, ModuleState::Done(key));
            }
        }
        Ok(())
    }

    /// Ends a load started with [`LuaHost::begin_tests`]: every error recorded and the tests.
    pub fn finish_with_tests(self) -> (Vec<LoadError>, Vec<super::test_spec::TestSpec>) {
        let tests = std::mem::take(&mut self.state.borrow_mut().tests);
        (self.finish(), tests)
    }
}

/// The libraries each file gets a fresh copy of, and the fields left out of each copy.
const COPIED_LIBRARIES: [(&str, &[&str]); 5] = [("string", &["dump"]), ("table", &[]), ("math", &["random", "randomseed"]), ("utf8", &[]), ("kind", &[])];

/// Generates (once per host) the Lua function that builds one file's environment: a table
/// constructor holding every safe global of `proto` (looked up in `proto` at each call, so later
/// changes of a value, as [`LuaHost::begin_tests`] makes, are seen), a fresh copy of each
/// library of [`COPIED_LIBRARIES`] (also a constructor), `_G` and `require`. The same tables as
/// copying field by field, at a fraction of the cost (no call from Rust per field).
fn environment_factory(lua: &Lua, proto: &Table, require: Function) -> mlua::Result<Function> {
    use std::fmt::Write as _;
    // Keys are written as `["k"]`: a plain name (checked) needs no escaping, reserved words included.
    let ident = crate::core::name::is_identifier;
    let keys = |t: &Table| -> mlua::Result<Vec<String>> {
        let mut keys = Vec::new();
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            match k {
                Value::String(k) => {
                    let k = k.to_str()?.to_string();
                    if !ident(&k) {
                        return Err(rt(format!("cannot build the environment: global `{k}` is not a plain name")));
                    }
                    keys.push(k);
                }
                other => return Err(rt(format!("cannot build the environment: a global keyed by a {}", other.type_name()))),
            }
        }
        keys.sort();
        Ok(keys)
    };
    let g = lua.globals();
    let mut code = String::from("local p, req, libs, guard = ...\nlocal ");
    let names: Vec<String> = (0..COPIED_LIBRARIES.len()).map(|i| format!("l{i}")).collect();
    code.push_str(&names.join(", "));
    code.push_str(" = ");
    code.push_str(&(1..=COPIED_LIBRARIES.len()).map(|i| format!("libs[{i}]")).collect::<Vec<_>>().join(", "));
    code.push_str("\nreturn function()\n  local env = {\n");
    let copied: Vec<&str> = COPIED_LIBRARIES.iter().map(|(n, _)| *n).collect();
    for k in keys(proto)? {
        if !copied.contains(&k.as_str()) && k != "require" && k != "_G" {
            let _ = writeln!(code, "    [\"{k}\"] = p[\"{k}\"],");
        }
    }
    let libs = lua.create_table()?;
    for (i, (lib, without)) in COPIED_LIBRARIES.iter().enumerate() {
        let src: Table = if *lib == "kind" { proto.get(*lib)? } else { g.get(*lib)? };
        // `kind`'s copy raises an error naming a kind it lacks (the prelude's `guard`).
        let guarded = *lib == "kind";
        let _ = write!(code, "    {lib} = {}{{", if guarded { "guard(" } else { "" });
        for k in keys(&src)? {
            if !without.contains(&k.as_str()) {
                let _ = write!(code, " [\"{k}\"] = l{i}[\"{k}\"],");
            }
        }
        code.push_str(if guarded { " }),\n" } else { " },\n" });
        libs.raw_set(i + 1, src)?;
    }
    code.push_str("    require = req,\n  }\n  env._G = env\n  return env\nend\n");
    let guard: Function = lua.named_registry_value(KIND_GUARD_KEY)?;
    lua.load(code).set_name("=efmesh/environment.lua").set_mode(mlua::chunk::ChunkMode::Text).call((proto.clone(), require, libs, guard))
}

/// A fresh environment for one file: copies of the safe globals and libraries.
fn make_environment(factory: &Function) -> mlua::Result<Table> {
    factory.call(())
}

/// `require(name)`: evaluates a project file once (through the registry-stored loader) and
/// returns its value.
fn require_fn(lua: &Lua, st: Rc<RefCell<State>>) -> mlua::Result<Function> {
    lua.create_function(move |lua, name: String| {
        if name.is_empty() || !name.split('.').all(crate::core::name::is_identifier) {
            return Err(rt(format!("`require(\"{name}\")`: module names are dotted identifiers inside the project")));
        }
        // The requiring file is the one the calling code was written in (the nearest frame of a
        // project file): inside a function defined in `lib/a.lua` and called later — from a
        // model file, or as a macro with no file being evaluated — it is `lib/a.lua`, not the
        // file being evaluated.
        let (root, evaluating) = {
            let s = st.borrow();
            (s.root.clone(), s.stack.last().cloned().unwrap_or_default())
        };
        let current = (1..16)
            .map_while(|level| lua.inspect_stack(level, |d| d.source().source.and_then(|s| s.strip_prefix('@').map(PathBuf::from))))
            .flatten()
            .next()
            .unwrap_or(evaluating);
        let rel = PathBuf::from(format!("{}.lua", name.replace('.', "/")));
        let base = current.parent().map(Path::to_path_buf).unwrap_or_default();
        let candidates = [base.join(&rel), rel.clone()];
        let found_at = candidates.iter().position(|c| root.join(c).is_file());
        if let Some(r) = st.borrow_mut().reached.as_mut() {
            // Absent candidates tried first (every candidate when none exists, so that a
            // `pcall(require, ...)` sees the file once it is created): a file appearing there
            // changes the resolution.
            let at = found_at.unwrap_or(candidates.len());
            r.probes.extend(candidates[..at].iter().filter(|c| found_at.is_none_or(|i| **c != candidates[i])).cloned());
        }
        let Some(found) = found_at.map(|i| candidates[i].clone()) else {
            let _ = lua;
            return Err(rt(format!("`require(\"{name}\")`: no file `{}` or `{}` in the project", candidates[0].display(), candidates[1].display())));
        };
        // Stay inside the project even through symlinks.
        let real = root.join(&found).canonicalize().map_err(|e| rt(e.to_string()))?;
        let real_root = root.canonicalize().map_err(|e| rt(e.to_string()))?;
        if !real.starts_with(&real_root) {
            return Err(rt(format!("`require(\"{name}\")` resolves outside the project")));
        }
        {
            let mut s = st.borrow_mut();
            s.definitions.libraries.insert(found.clone());
            if let Some(r) = s.reached.as_mut() {
                r.files.insert(found.clone());
            }
        }
        let loader: Function = lua.named_registry_value("efmesh.loader")?;
        loader.call::<Value>(found.to_string_lossy().to_string())
    })
}

impl LuaHost {
    /// The files a served request (a macro call, an audit rendered) reached through `require`,
    /// for the caller's own inputs ([`super::foreign::take_call_reads`]).
    fn call_reads(&self) -> Reached {
        self.state.borrow_mut().reached.take().unwrap_or_default()
    }

    /// Keeps the modules evaluated so far (the audit definition files and what they require)
    /// for every later top-level evaluation; every other module is evaluated afresh for each
    /// top-level file that requires it.
    pub fn keep_modules(&mut self) {
        let mut s = self.state.borrow_mut();
        let kept: Vec<PathBuf> = s.modules.keys().cloned().collect();
        s.shared.extend(kept);
        s.base_audits = Some(s.audits.clone());
        // Their audits' answers are remembered from now on (`super::audits::finish_pure`).
        let s = &mut *s;
        s.audit_answers.share(&s.audits);
    }

    /// Evaluates one top-level file (relative to the root) with a fresh module table: what it
    /// requires is evaluated for it (once within this evaluation), never shared with another
    /// top-level file (see [`LuaHost::keep_modules`]). Errors are recorded, never returned;
    /// the outcome says whether there were any.
    pub fn load_file(&mut self, rel: &Path) -> FileOutcome {
        // No walk of `next` a file started goes on in the next one.
        self.forget_walks();
        let (models_before, errors_before) = {
            let mut s = self.state.borrow_mut();
            if !s.testing {
                let shared = std::mem::take(&mut s.shared);
                s.modules.retain(|k, _| shared.contains(k));
                s.shared = shared;
                // Audits a module defines are defined again when another file requires it.
                if let Some(base) = &s.base_audits {
                    s.audits = base.clone();
                }
            }
            s.reached = Some(Reached::default());
            (s.models.len(), s.errors.len())
        };
        let mut outcome = FileOutcome { file: rel.to_path_buf(), ..FileOutcome::default() };
        // What the macro calls and audits rendered through another interpreter read: this file's.
        let _ = super::foreign::take_call_reads();
        match self.ensure_loader().and_then(|()| self.lua.named_registry_value::<Function>("efmesh.loader")) {
            Ok(loader) => {
                let _ = loader.call::<Value>(rel.to_string_lossy().to_string());
            }
            Err(e) => self.state.borrow_mut().errors.push(LoadError::new(None, None, e.to_string())),
        }
        let mut s = self.state.borrow_mut();
        let reached = s.reached.take().unwrap_or_default();
        outcome.models = s.models.split_off(models_before);
        outcome.failed = s.errors.len() > errors_before || !matches!(s.modules.get(rel), Some(ModuleState::Done(_)));
        outcome.defines = s.definitions.defining.contains(rel);
        outcome.reached = reached.files;
        outcome.probes = reached.probes;
        outcome.hashes = reached.hashes;
        super::foreign::add_call_reads(&mut outcome);
        outcome
    }

    fn ensure_loader(&mut self) -> mlua::Result<()> {
        if self.lua.named_registry_value::<Value>("efmesh.loader")?.is_function() {
            return Ok(());
        }
        // A loader callable from Lua (for `require`) and Rust: evaluates a file once, caches
        // its return value, and records script errors as load errors.
        let st = self.state.clone();
        let factory = self.env_factory.clone();
        let loader = self.lua.create_function(move |lua, rel: String| {
            let rel = PathBuf::from(rel);
            {
                let mut s = st.borrow_mut();
                match s.modules.get(&rel) {
                    Some(ModuleState::Done(key)) => {
                        let v = lua.registry_value::<Value>(key);
                        s.credit_requirer(&rel);
                        let s = &mut *s;
                        if let (Some(r), Some(h)) = (s.reached.as_mut(), s.evaluated.get(&rel)) {
                            r.reused(&rel, *h);
                        }
                        return v;
                    }
                    Some(ModuleState::Loading) => {
                        let chain = s.stack.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(" → ");
                        return Err(rt(format!("require cycle: {chain} → `{}`", rel.display())));
                    }
                    Some(ModuleState::Failed) => return Err(rt(format!("`{}` failed to load (see its error)", rel.display()))),
                    None => {}
                }
            }
            let root = st.borrow().root.clone();
            let code = fs_err::read(root.join(&rel)).map_err(|e| rt(format!("cannot read `{}`: {e}", rel.display())))?;
            {
                let hash = *blake3::hash(&code).as_bytes();
                let mut s = st.borrow_mut();
                s.evaluated.insert(rel.clone(), hash);
                if let Some(r) = s.reached.as_mut() {
                    r.evaluated(&rel, hash);
                }
            }
            // A byte-order mark (some editors save UTF-8 with one) is not Lua: skipped, as
            // `lua` itself does for files.
            let code = match code.strip_prefix(b"\xef\xbb\xbf") {
                Some(rest) => rest.to_vec(),
                None => code,
            };
            if let Some(line) = super::nul_byte_line(&code) {
                st.borrow_mut().errors.push(LoadError::new(Some(Location { file: rel.clone(), line }), None, super::NUL_BYTE));
                st.borrow_mut().modules.insert(rel.clone(), ModuleState::Failed);
                return Ok(Value::Nil);
            }
            if let Some(line) = close_attribute_line(&code) {
                let msg = format!("{}:{line}: to-be-closed variables (`<close>`) are not allowed in model files", rel.display());
                st.borrow_mut().errors.push(LoadError::new(Some(Location { file: rel.clone(), line }), None, msg));
                st.borrow_mut().modules.insert(rel.clone(), ModuleState::Failed);
                return Ok(Value::Nil);
            }
            let env = make_environment(&factory)?;
            {
                let mut s = st.borrow_mut();
                s.modules.insert(rel.clone(), ModuleState::Loading);
                s.stack.push(rel.clone());
                s.sources.insert(rel.clone(), Rc::from(code.as_slice()));
                if s.stack.len() == 1 {
                    s.budget = Some(Budget::new(&rel, FILE_BUDGET));
                }
            }
            // `Chunk::eval`'s result, compiling the file once when it has several statements.
            let name = format!("@{}", rel.display());
            let result = chunk::eval(
                &code,
                |src| lua.load(src).set_name(name.as_str()).set_mode(mlua::chunk::ChunkMode::Text).set_environment(env.clone()),
                |f| call_plain(lua, f, ()),
            );
            let mut s = st.borrow_mut();
            s.stack.pop();
            if s.stack.is_empty() {
                s.budget = None;
                s.sources.clear();
            }
            match result {
                Ok(v) => {
                    let key = lua.create_registry_value(v.clone())?;
                    if !s.first_values.contains_key(&rel) {
                        let first = lua.create_registry_value(v.clone())?;
                        s.first_values.insert(rel.clone(), first);
                    }
                    s.credit_requirer(&rel);
                    s.modules.insert(rel, ModuleState::Done(key));
                    Ok(v)
                }
                Err(e) => {
                    s.modules.insert(rel.clone(), ModuleState::Failed);
                    let outermost = s.stack.is_empty();
                    let msg = e.to_string();
                    let line = location_in_message(&msg, &rel).unwrap_or(0);
                    // The location leads the error already: Lua's own `file:line: ` prefix inside
                    // the message is said once.
                    let msg = if line > 0 { msg.replacen(&format!("{}:{line}: ", rel.display()), "", 1) } else { msg };
                    let msg = super::sandbox::capped_message(msg.trim_end().to_string());
                    s.errors.push(LoadError::new(Some(Location { file: rel.clone(), line }), None, msg));
                    drop(s);
                    if outermost { Ok(Value::Nil) } else { Err(rt(format!("`{}` failed to load (see its error)", rel.display()))) }
                }
            }
        })?;
        self.lua.set_named_registry_value("efmesh.loader", loader)?;
        Ok(())
    }

    /// Gives the host the interpreters of every language's definition files: `@name(…)` macro
    /// calls in queries, and audits its own definitions lack.
    pub fn set_foreign(&mut self, foreign: std::sync::Arc<super::foreign::Foreign>) {
        self.state.borrow_mut().foreign = Some(foreign);
    }

    /// Runs `f` under a fresh budget (the file budget, with the watchdog, `label` naming the
    /// file in its message), as a top-level evaluation would.
    fn with_budget<T>(&self, label: &Path, f: impl FnOnce() -> T) -> T {
        self.with_budget_of(label, FILE_BUDGET, f)
    }

    /// [`LuaHost::with_budget`] with another wall-clock budget. No walk of `next` started before
    /// goes on in `f` ([`LuaHost::forget_walks`]).
    fn with_budget_of<T>(&self, label: &Path, budget: Duration, f: impl FnOnce() -> T) -> T {
        self.forget_walks();
        self.state.borrow_mut().budget = Some(Budget::new(label, budget));
        let out = f();
        self.state.borrow_mut().budget = None;
        out
    }

    /// Drops every walk of the safe `next` (`forget` of [`SAFE_BASE`]): a call or file
    /// evaluated next starts from no sorted keys, whatever the one before walked.
    fn forget_walks(&self) {
        // Clearing a table's fields allocates nothing: it cannot fail but for a bug.
        if let Err(e) = self.walks_reset.call::<()>(()) {
            tracing::warn!("cannot reset the walks of `next`: {e}");
        }
    }

    /// Runs macro `name` with `args` (strings).
    fn call_macro(&self, name: &str, args: Vec<String>) -> Result<String, super::macros::Failure> {
        use super::foreign::{arity_message, count};
        use super::macros::Failure;
        let found = self.state.borrow().macros.get(name).map(|(l, f)| (l.clone(), f.clone()));
        let Some((at, f)) = found else { return Err(Failure::new(format!("unknown macro `@{name}`"))) };
        let info = f.info();
        let n = usize::from(info.num_params);
        if args.len() < n || (args.len() > n && !info.is_vararg) {
            let expected = if info.is_vararg { format!("at least {}", count(n)) } else { count(n) };
            return Err(Failure::new(arity_message(name, &at, &expected, args.len())));
        }
        let mut values = MultiValue::new();
        for a in &args {
            values.push_back(Value::String(self.lua.create_string(a).map_err(|e| Failure::new(e.to_string()))?));
        }
        // What the macro reaches, before its first call: a function whose state no snapshot can
        // read (an iterator made outside it) is refused before the call.
        let who = format!("macro `@{name}`");
        if let Some(frozen) = &self.frozen {
            let hidden = frozen
                .before(name, &f, || self.kept_modules())
                .map_err(|e| Failure::new(format!("{who} ({at}): cannot take the snapshot of the state it reaches: {e}")))?;
            if let Some(what) = hidden {
                return Err(Failure { message: super::foreign::hidden_state(&who, &at, &what), hint: Some(super::foreign::HIDDEN_HINT.into()) });
            }
        }
        self.state.borrow_mut().in_macro = true;
        let out = self.with_budget(&at.file, || call_plain::<MultiValue>(&self.lua, &f, values));
        self.state.borrow_mut().in_macro = false;
        // Compared whether the call returned or raised: a write followed by an error is the
        // write (which poisons the interpreter: no later request is answered from that state).
        if let Some(frozen) = &self.frozen {
            let written = frozen.after(name, &who, &at).map_err(|e| Failure::new(format!("{who} ({at}): cannot compare the state it reaches: {e}")))?;
            if let Some(what) = written {
                return Err(super::foreign::state_written(name, &at, &what));
            }
        }
        let mut values = match out {
            Ok(values) => values,
            Err(e) => return Err(Failure::new(format!("{who} ({at}) failed: {}", audits::lua_message(&e)))),
        };
        // `return sql, extra`: the extra values would be dropped silently.
        if values.len() > 1 {
            return Err(Failure::new(format!("macro `@{name}` ({at}) returned {} values: a macro returns one string of SQL", values.len())));
        }
        match values.pop_front().unwrap_or(Value::Nil) {
            Value::String(s) => s.to_str().map(|s| s.to_string()).map_err(|_| Failure::new(format!("macro `@{name}` ({at}) returned text that is not UTF-8"))),
            other => Err(Failure::new(format!("macro `@{name}` ({at}) must return a string of SQL, got {}", other.type_name()))),
        }
    }

    /// The modules kept from the definition files ([`LuaHost::keep_modules`]; `require` hands
    /// them to any macro), for a macro's snapshot ([`frozen::Frozen::before`]): a sequence of
    /// value, label (`require("lib.h")`), in the order of their paths; only tables and
    /// functions (other values cannot be changed in place).
    fn kept_modules(&self) -> mlua::Result<Table> {
        let mut kept: Vec<(PathBuf, Value)> = Vec::new();
        {
            let s = self.state.borrow();
            for (rel, m) in &s.modules {
                if let ModuleState::Done(key) = m
                    && s.shared.contains(rel)
                {
                    kept.push((rel.clone(), self.lua.registry_value::<Value>(key)?));
                }
            }
        }
        kept.sort_by(|(a, _), (b, _)| a.cmp(b));
        let roots = self.lua.create_table()?;
        for (rel, v) in kept {
            if matches!(v, Value::Table(_) | Value::Function(_)) {
                roots.raw_push(v)?;
                roots.raw_push(frozen::module_label(&rel))?;
            }
        }
        Ok(roots)
    }

    /// Forgets the modules a served request required beyond the kept ones
    /// ([`LuaHost::keep_modules`]), as [`LuaHost::load_file`] does for each top-level file: a
    /// module a macro's function requires when called is evaluated afresh for each request, so
    /// what one call left in it cannot reach another.
    fn forget_unkept_modules(&self) {
        let mut s = self.state.borrow_mut();
        let shared = std::mem::take(&mut s.shared);
        s.modules.retain(|k, _| shared.contains(k));
        s.shared = shared;
    }

    /// Evaluates signal `name` (see [`super::foreign::Foreign::call_signal`]): its queries go
    /// to `reply` and wait for their rows.
    fn call_signal(
        &self,
        name: &str,
        intervals: &[(String, String)],
        args: &serde_json::Map<String, serde_json::Value>,
        reply: &std::sync::mpsc::Sender<super::foreign::SignalMsg>,
    ) -> Result<Vec<bool>, String> {
        let found = self.state.borrow().signals.get(name).map(|(l, f)| (l.clone(), f.clone()));
        let Some((at, f)) = found else { return Err(format!("unknown signal `{name}`")) };
        let fail = |m: String| format!("signal `{name}` ({at}) {m}");
        let lua = &self.lua;
        let build = || -> mlua::Result<(Table, Value, Table)> {
            let list = lua.create_table()?;
            for (i, (start, end)) in intervals.iter().enumerate() {
                let t = lua.create_table()?;
                t.set("start", start.as_str())?;
                t.set("end", end.as_str())?;
                list.raw_set(i + 1, t)?;
            }
            let args = audits::json_to_lua(lua, &serde_json::Value::Object(args.clone()))?;
            let db = lua.create_table()?;
            let reply = reply.clone();
            let query = lua.create_function(move |lua, sql: String| {
                let (tx, rx) = std::sync::mpsc::channel();
                if reply.send(super::foreign::SignalMsg::Query(sql, tx)).is_err() {
                    return Err(rt("the query handle is closed"));
                }
                let rows = rx.recv().map_err(|_| rt("the query handle is closed"))?.map_err(rt)?;
                let out = lua.create_table()?;
                for (i, row) in rows.iter().enumerate() {
                    let r = lua.create_table()?;
                    for (j, v) in row.iter().enumerate() {
                        if let Some(v) = v {
                            r.raw_set(j + 1, v.as_str())?;
                        }
                    }
                    out.raw_set(i + 1, r)?;
                }
                Ok(out)
            })?;
            db.set("query", query)?;
            Ok((list, args, db))
        };
        let (list, args, db) = build().map_err(|e| fail(format!("cannot be called: {e}")))?;
        // In the macro interpreter a signal reaches what its file's macros do: checked as they
        // are ([`frozen`]), or a macro would read what the signal left there.
        let key = format!("signal {name}");
        let who = format!("signal `{name}`");
        if let Some(frozen) = &self.frozen {
            let hidden = frozen.before(&key, &f, || self.kept_modules()).map_err(|e| fail(format!("cannot take the snapshot of the state it reaches: {e}")))?;
            if let Some(what) = hidden {
                return Err(super::foreign::hidden_state(&who, &at, &what));
            }
        }
        let out = self.with_budget_of(&at.file, super::foreign::SIGNAL_BUDGET, || call_plain::<Value>(lua, &f, (list, args, db)));
        // A write is refused even when the signal failed (and poisons the interpreter).
        if let Some(frozen) = &self.frozen {
            let written = frozen.after(&key, &who, &at).map_err(|e| fail(format!("cannot compare the state it reaches: {e}")))?;
            if let Some(what) = written {
                return Err(super::foreign::body_state_written("signal", name, &at, &what));
            }
        }
        match out {
            Ok(v) => {
                let json = lua_to_json(&v, 0).map_err(|e| fail(format!("returned an unusable value: {e}")))?;
                super::foreign::verdicts(&json, intervals.len()).map_err(fail)
            }
            Err(e) => Err(fail(format!("failed: {}", audits::lua_message(&e)))),
        }
    }

    /// Renders a use of audit `name` this interpreter defines.
    fn render_audit(
        &self,
        name: &str,
        positional: Vec<serde_json::Value>,
        named: serde_json::Map<String, serde_json::Value>,
        location: &Location,
    ) -> Result<Audit, LoadError> {
        let (def, body) = self.state.borrow().audits.lookup(name, location)?;
        let Some(frozen) = &self.frozen else {
            return self.with_budget(&location.file, || audits::render(&self.lua, &self.state, &def, &body, positional, named, location));
        };
        // In the macro interpreter the body reaches what its file's macros do: checked as they
        // are ([`frozen`]), or a macro would read what a use of the audit left there.
        let at = &def.location;
        let key = format!("audit {name}");
        let who = format!("audit `{name}`");
        let failed = |m: String| LoadError::new(Some(location.clone()), None, format!("{who} ({at}): {m}"));
        let hidden =
            frozen.before(&key, &body, || self.kept_modules()).map_err(|e| failed(format!("cannot take the snapshot of the state it reaches: {e}")))?;
        if let Some(what) = hidden {
            let message = super::foreign::hidden_state(&who, at, &what);
            return Err(LoadError::new(Some(location.clone()), None, message).with_hint(super::foreign::HIDDEN_HINT));
        }
        let out = self.with_budget(&location.file, || audits::render(&self.lua, &self.state, &def, &body, positional, named, location));
        // Compared whether the body's calls returned, raised or answered otherwise (refused by
        // [`super::audits::finish_pure`]): a write is the error, and poisons the interpreter.
        let written = frozen.after(&key, &who, at).map_err(|e| failed(format!("cannot compare the state it reaches: {e}")))?;
        if let Some(what) = written {
            let message = super::foreign::body_state_written("audit", name, at, &what);
            return Err(LoadError::new(Some(location.clone()), None, message).with_hint(super::foreign::STATE_HINT));
        }
        out
    }

    /// The errors recorded since the last call (or since the host started): after
    /// [`LuaHost::load_file`], those of that file's evaluation.
    pub fn take_errors(&mut self) -> Vec<LoadError> {
        std::mem::take(&mut self.state.borrow_mut().errors)
    }

    /// Ends the load: every error recorded (the models are in each file's outcome).
    pub fn finish(self) -> Vec<LoadError> {
        std::mem::take(&mut self.state.borrow_mut().errors)
    }
}

/// The Lua interpreter of [`super::foreign::Foreign`]: evaluates the Lua definition files
/// `files` (after the built-ins), sends what they define on `init`, then answers requests until
/// `rx` closes. Errors of the files are not reported here (the loader's own evaluation reports
/// them); a host that cannot start sends nothing.
pub(crate) fn serve(
    root: &Path,
    files: &[PathBuf],
    init: std::sync::mpsc::Sender<super::foreign::Defs>,
    rx: std::sync::mpsc::Receiver<super::foreign::Request>,
) {
    use super::foreign::{Defs, MacroInfo, Request};
    let Ok(mut host) = LuaHost::create(root, true) else { return };
    for f in files {
        host.load_file(f);
    }
    host.keep_modules();
    let _ = host.take_errors();
    let defs = {
        let s = host.state.borrow();
        Defs {
            macros: s.macros.iter().map(|(name, (location, _))| MacroInfo { name: name.clone(), location: location.clone() }).collect(),
            audits: s.audits.defs().cloned().collect(),
            signals: s.signals.iter().map(|(name, (location, _))| MacroInfo { name: name.clone(), location: location.clone() }).collect(),
        }
    };
    if init.send(defs).is_err() {
        return;
    }
    // Macros checked for state kept between calls (their first call, twice).
    let mut checked: std::collections::HashSet<String> = std::collections::HashSet::new();
    while let Ok(req) = rx.recv() {
        // After a write (by a macro, an audit body or a signal) the state is no longer what the
        // files define: nothing more is answered from it in this load ([`frozen`]).
        if let Some(cause) = host.frozen.as_ref().and_then(frozen::Frozen::poisoned) {
            super::foreign::refuse_after_write(req, &cause);
            continue;
        }
        host.forget_unkept_modules();
        match req {
            Request::Signal { name, intervals, args, reply } => {
                let verdict = host.call_signal(&name, &intervals, &args, &reply);
                let _ = reply.send(super::foreign::SignalMsg::Done(verdict));
            }
            Request::Macro { name, args, reply } => {
                host.state.borrow_mut().reached = Some(Reached::default());
                let out = if checked.insert(name.clone()) {
                    let first = host.call_macro(&name, args.clone());
                    super::foreign::same_twice(&name, first, || host.call_macro(&name, args))
                } else {
                    host.call_macro(&name, args)
                };
                let _ = reply.send((out, host.call_reads()));
            }
            Request::Audit { name, positional, named, location, reply } => {
                host.state.borrow_mut().reached = Some(Reached::default());
                let out = host.render_audit(&name, positional, named, &location);
                let _ = reply.send((out, host.call_reads()));
            }
        }
        let _ = host.take_errors();
    }
}

impl std::fmt::Debug for LuaHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LuaHost")
    }
}

#[allow(dead_code)]
fn _assert_userdata(_: AnyUserData) {}
