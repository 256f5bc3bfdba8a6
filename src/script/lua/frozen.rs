//! Macros keep no state between calls: the check of the Lua macro interpreter
//! ([`super::serve`]).
//!
//! The interpreter evaluates the macro files once per load and then answers the calls of every
//! loader thread in the order they come. A macro that leaves something behind (`shared.v = x`,
//! `n = n + 1`, a module's field, a metatable) would make a model's SQL depend on the models served
//! before it — on the load cache and on thread timing (SPEC §4 invariants 34 and 54). Calling a
//! macro twice does not reveal it when another macro reads what one wrote. So before a macro's
//! first call a snapshot is taken of everything its function can reach (its upvalues, the file's
//! globals through `_ENV`, the modules kept from the definition files, followed through tables,
//! metatables and the project's functions), and after each of its calls — whether it returned or
//! raised — the same things are compared with it (`stdlib/lua/frozen.lua`): a difference is a
//! load error at the call naming the macro, its file:line and the first thing written
//! (`shared.v`).
//!
//! A write also *poisons* the interpreter ([`Frozen::poison`]): the state it would answer from is
//! no longer what the macro files define, so it answers every later request of the load with a
//! refusal ([`crate::script::foreign::refuse_after_write`]) instead of SQL computed from that
//! state, and no file evaluated after the write is cached with such SQL (a file with a load
//! error is not cached). The same when the comparison cannot run: what the call left is unknown.
//!
//! A function reached that is neither the project's (walked: its upvalues) nor one of those
//! every file's environment holds ([`Frozen::know`]: the sandbox's functions and libraries, not
//! walked) was made by a library call — the iterator `string.gmatch` or `pairs` returned — and
//! keeps state no snapshot can read (how far it got): a macro reaching one is refused before
//! its call, naming it ([`Frozen::before`]), as is one reaching a coroutine.
//!
//! The comparison reads every table the macro reaches again, so a call costs time in proportion
//! to that (a file's globals and its copies of the libraries: some hundred entries, a few
//! microseconds), with no allocation and no project code run (no metamethod is called).
//!
//! The audit bodies and signals the interpreter runs reach the same state, so they are checked
//! the same way ([`super::LuaHost::render_audit`], [`super::LuaHost::call_signal`]; their
//! snapshots are keyed `audit <name>` and `signal <name>`, which no macro's name can be): one
//! writing what a macro reads is a load error naming it, and poisons the interpreter too.

use crate::core::Location;
use mlua::{Function, Lua, Table};
use std::cell::RefCell;
use std::collections::HashMap;

/// Lua source of the snapshot and comparison functions.
pub(super) const SOURCE: &str = include_str!("../../../stdlib/lua/frozen.lua");

/// The snapshot functions of the macro interpreter, the snapshot of each macro called so far, and
/// what poisoned the interpreter, if anything did.
pub(super) struct Frozen {
    snapshot: Function,
    changed: Function,
    know: Function,
    taken: RefCell<HashMap<String, Table>>,
    /// The first write found (or comparison that could not run), as [`Frozen::poisoned`] says it.
    poisoned: RefCell<Option<String>>,
}

impl Frozen {
    /// Loads the snapshot functions with the debug library's `getupvalue`, `getinfo` and
    /// `getmetatable` (`debug`, which the interpreter took out of its globals: no script sees it).
    ///
    /// # Errors
    /// When the functions cannot be loaded.
    pub(super) fn new(lua: &Lua, debug: &Table) -> mlua::Result<Frozen> {
        let getupvalue: Function = debug.get("getupvalue")?;
        let getinfo: Function = debug.get("getinfo")?;
        let getmetatable: Function = debug.get("getmetatable")?;
        let (snapshot, changed, know): (Function, Function, Function) =
            lua.load(SOURCE).set_name("=efmesh/frozen.lua").set_mode(mlua::chunk::ChunkMode::Text).call((getupvalue, getinfo, getmetatable))?;
        Ok(Frozen { snapshot, changed, know, taken: RefCell::new(HashMap::new()), poisoned: RefCell::new(None) })
    }

    /// Marks the functions `env` holds (through its tables: a fresh file environment, with the
    /// sandbox's base functions, the libraries, the host's API), and the stateless iterators of
    /// `ipairs` and `utf8.codes`, as efmesh's own: a snapshot does not follow them, and reaching
    /// any other function that is not the project's is refused ([`Frozen::before`]).
    ///
    /// # Errors
    /// When the Lua function fails (the interpreter's memory limit).
    pub(super) fn know(&self, env: &Table) -> mlua::Result<()> {
        self.know.call(env.clone())
    }

    /// Before a call of macro `name` (function `f`): takes its snapshot unless it has one, of what
    /// `f` and `roots` reach (`roots`: a sequence of value, label, value, label…: the modules kept
    /// from the definition files, made only when a snapshot is taken). `Some(path)` when what it
    /// reaches holds a function whose state no snapshot can read (an iterator a library call
    /// made, `it`) or a coroutine: the call must not be made; no snapshot is kept.
    ///
    /// # Errors
    /// When the snapshot cannot be taken (the interpreter's memory limit).
    pub(super) fn before(&self, name: &str, f: &Function, roots: impl FnOnce() -> mlua::Result<Table>) -> mlua::Result<Option<String>> {
        if self.taken.borrow().contains_key(name) {
            return Ok(None);
        }
        let (snap, hidden): (Option<Table>, Option<String>) = self.snapshot.call((f.clone(), roots()?))?;
        match snap {
            Some(snap) => {
                self.taken.borrow_mut().insert(name.to_string(), snap);
                Ok(None)
            }
            None => Ok(Some(hidden.unwrap_or_default())),
        }
    }

    /// After a call of `name` (a macro's name, `audit <name>`, `signal <name>`), whatever it
    /// returned or raised: the path of the first thing it changed (`shared.v`), if any. A write
    /// poisons the interpreter ([`Frozen::poison`], naming `who` — ``macro `@set` `` — defined at
    /// `at`, and what it wrote) and drops every snapshot (the state they describe is gone).
    ///
    /// # Errors
    /// When the comparison cannot run (the interpreter's memory limit): the interpreter is
    /// poisoned too, since what the call left is unknown.
    pub(super) fn after(&self, name: &str, who: &str, at: &Location) -> mlua::Result<Option<String>> {
        let snap = self.taken.borrow().get(name).cloned();
        let Some(snap) = snap else { return Ok(None) };
        match self.changed.call::<Option<String>>(snap) {
            Ok(None) => Ok(None),
            Ok(Some(what)) => {
                self.forget();
                self.poison(crate::script::foreign::write_cause(who, at, &what));
                Ok(Some(what))
            }
            Err(e) => {
                self.forget();
                self.poison(format!("what a call of {who} ({at}) left could not be checked ({e})"));
                Err(e)
            }
        }
    }

    /// Poisons the interpreter for the rest of the load: `cause` (what a call of which macro,
    /// audit or signal wrote) is what every later request is refused with
    /// ([`crate::script::foreign::refuse_after_write`]). The first cause is kept.
    pub(super) fn poison(&self, cause: String) {
        let mut p = self.poisoned.borrow_mut();
        if p.is_none() {
            *p = Some(cause);
        }
    }

    /// What poisoned the interpreter ([`Frozen::poison`]), if anything did.
    pub(super) fn poisoned(&self) -> Option<String> {
        self.poisoned.borrow().clone()
    }

    /// Drops every snapshot (the state they describe is gone).
    fn forget(&self) {
        self.taken.borrow_mut().clear();
    }
}

/// The label of a kept module in a path: `require("lib.helpers")` for `lib/helpers.lua`.
pub(super) fn module_label(rel: &std::path::Path) -> String {
    let name = rel.with_extension("").to_string_lossy().replace(['/', '\\'], ".");
    format!("require(\"{name}\")")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{LuaOptions, StdLib, Value};

    /// An interpreter with the debug library (as the macro interpreter has it), the coroutine
    /// library (which the sandbox lacks: to show that a coroutine is refused all the same) and
    /// the snapshot functions, its globals' functions known (as the host marks a file's
    /// environment's); `macro_of(code)` evaluates a macro file (named `@macros/m.lua`) in an
    /// environment of its own and returns what it returns.
    fn interpreter() -> (Lua, Frozen) {
        // SAFETY: a test interpreter running only the code below.
        let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::COROUTINE | StdLib::DEBUG;
        let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::new()) };
        let debug: Table = lua.globals().get("debug").unwrap();
        let frozen = Frozen::new(&lua, &debug).unwrap();
        frozen.know(&lua.globals()).unwrap();
        (lua, frozen)
    }

    fn macro_of(lua: &Lua, code: &str) -> Function {
        let env = lua.create_table().unwrap();
        for lib in ["string", "table", "math", "coroutine", "tostring", "setmetatable", "rawset", "getmetatable", "ipairs", "error"] {
            let v: Value = lua.globals().get(lib).unwrap();
            // Each file gets copies of the libraries, as in the host.
            let v = match v {
                Value::Table(t) => {
                    let copy = lua.create_table().unwrap();
                    for pair in t.pairs::<Value, Value>() {
                        let (k, x) = pair.unwrap();
                        copy.raw_set(k, x).unwrap();
                    }
                    Value::Table(copy)
                }
                other => other,
            };
            env.raw_set(lib, v).unwrap();
        }
        lua.load(code).set_name("@macros/m.lua").set_environment(env).eval().unwrap()
    }

    fn at() -> Location {
        Location { file: "macros/m.lua".into(), line: 1 }
    }

    /// What each call of `f` (made `calls` times) wrote.
    fn writes(lua: &Lua, frozen: &Frozen, f: &Function, calls: usize) -> Vec<Option<String>> {
        (0..calls)
            .map(|_| {
                assert_eq!(frozen.before("m", f, || lua.create_table()).unwrap(), None);
                let _: Value = f.call("x").unwrap();
                frozen.after("m", "macro `@m`", &at()).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_write_to_what_a_macro_reaches_is_named_and_a_pure_macro_passes() {
        let (lua, frozen) = interpreter();
        for (code, written) in [
            ("local shared = { v = \"1\" }\nreturn function(x) shared.v = x; return \"0\" end", "shared.v"),
            ("local n = 0\nreturn function() n = n + 1; return tostring(n) end", "n"),
            ("counter = 0\nreturn function() counter = counter + 1; return \"\" end", "counter"),
            ("return function() string.v = 1; return \"\" end", "string.v"),
            ("local t = { 1, 2 }\nreturn function(x) table.insert(t, x); return \"\" end", "t[3]"),
            ("local t = {}\nreturn function(x) rawset(t, x, 1); return \"\" end", "t.x"),
            ("local t = { b = 1 }\nreturn function() t.b = nil; return \"\" end", "t.b"),
            ("local t = {}\nreturn function() setmetatable(t, {}); return \"\" end", "getmetatable(t)"),
            ("local shared = {}\nreturn function() shared = {}; return \"\" end", "shared"),
        ] {
            let f = macro_of(&lua, code);
            assert_eq!(writes(&lua, &frozen, &f, 1), vec![Some(written.to_string())], "{code}");
        }
        // Reading, building fresh tables, writing and restoring a field: nothing outlives the call.
        let f = macro_of(
            &lua,
            "local names = { a = \"x\", nan = 0/0 }\nreturn function(x) local l = {} for i = 1, 3 do l[i] = x end names.tmp = x; names.tmp = nil\n  return table.concat(l, \",\") .. names.a end",
        );
        assert_eq!(writes(&lua, &frozen, &f, 3), vec![None, None, None]);
    }

    #[test]
    fn a_number_turned_into_the_other_subtype_or_the_other_zero_is_a_write() {
        let (lua, frozen) = interpreter();
        for (code, written) in [
            ("local st = { n = 1 }\nreturn function() st.n = st.n * 1.0; return \"\" end", "st.n"),
            ("local st = { n = 2.0 }\nreturn function() st.n = math.tointeger(st.n); return \"\" end", "st.n"),
            ("local st = { z = 0.0 }\nreturn function() st.z = -st.z; return \"\" end", "st.z"),
            ("local n = 1\nreturn function() n = n * 1.0; return \"\" end", "n"),
            ("local z = -0.0\nreturn function() z = 0.0; return \"\" end", "z"),
        ] {
            let f = macro_of(&lua, code);
            assert_eq!(writes(&lua, &frozen, &f, 1), vec![Some(written.to_string())], "{code}");
        }
        // The same number of the same subtype (and NaN) written again is no write.
        let f = macro_of(
            &lua,
            "local st = { n = 1, x = 1.0, z = -0.0, nan = 0/0 }\nlocal n, z = 1, 0.0\nreturn function()\n  st.n = 1; st.x = 1.0; st.z = -0.0; st.nan = 0/0; n = 1; z = 0.0; return \"\" end",
        );
        assert_eq!(writes(&lua, &frozen, &f, 2), vec![None, None]);
    }

    #[test]
    fn a_write_to_a_kept_module_is_named_by_its_require() {
        let (lua, frozen) = interpreter();
        let module = lua.create_table().unwrap();
        let env = lua.create_table().unwrap();
        env.raw_set("M", module.clone()).unwrap();
        let f: Function = lua.load("return function() return tostring(M) end").set_name("@macros/m.lua").set_environment(env).eval().unwrap();
        let roots = || {
            let r = lua.create_table()?;
            r.raw_push(module.clone())?;
            r.raw_push(module_label(std::path::Path::new("lib/h.lua")))?;
            Ok(r)
        };
        assert_eq!(frozen.before("m", &f, roots).unwrap(), None);
        module.raw_set("count", 1).unwrap();
        assert_eq!(frozen.after("m", "macro `@m`", &at()).unwrap().as_deref(), Some("require(\"lib.h\").count"));
    }

    /// A write followed by an error is found all the same (the host compares whatever the call
    /// did), and poisons the interpreter: the first write is what later requests are refused
    /// with, a later one does not replace it.
    #[test]
    fn a_write_then_an_error_is_found_and_poisons_the_interpreter_with_the_first_write() {
        let (lua, frozen) = interpreter();
        assert_eq!(frozen.poisoned(), None);
        let f = macro_of(&lua, "local shared = { v = \"orig\" }\nreturn function(x) shared.v = \"polluted\"; error(\"boom\") end");
        assert_eq!(frozen.before("m", &f, || lua.create_table()).unwrap(), None);
        assert!(f.call::<Value>("boom").is_err());
        assert_eq!(frozen.after("m", "macro `@m`", &at()).unwrap().as_deref(), Some("shared.v"));
        let first = "macro `@m` (macros/m.lua:1) wrote state that outlives its call (`shared.v`)";
        assert_eq!(frozen.poisoned().as_deref(), Some(first));
        let g = macro_of(&lua, "local n = 0\nreturn function() n = n + 1; return \"\" end");
        assert_eq!(writes(&lua, &frozen, &g, 1), vec![Some("n".to_string())]);
        assert_eq!(frozen.poisoned().as_deref(), Some(first));
    }

    /// A function a library call made outside the macro keeps state no snapshot reads (how far
    /// `gmatch`'s iterator got, the position of a `pairs` iterator made by efmesh's own code):
    /// reaching one — or a coroutine — is refused before the call, naming it, and no snapshot
    /// is kept. The functions every file holds (known), the stateless iterator of `ipairs`, the
    /// project's own closures, and an iterator made inside the call, pass.
    #[test]
    fn a_function_whose_state_no_snapshot_reads_is_refused_before_the_call() {
        let (lua, frozen) = interpreter();
        for (code, hidden) in [
            ("local it = (\"a a b\"):gmatch(\"%a\")\nreturn function() return \"'\" .. it() .. \"'\" end", "it"),
            ("local iters = { words = string.gmatch(\"a b\", \"%a\") }\nreturn function() return iters.words() end", "iters.words"),
            ("local co = coroutine.wrap(function() coroutine.yield(\"a\") end)\nreturn function() return co() end", "co"),
            ("local co = coroutine.create(function() end)\nreturn function() return coroutine.status(co) end", "co"),
            ("local it = string.gmatch(\"a\", \".\")\nlocal h = { f = function() return it() end }\nreturn function() return h.f() end", "it"),
        ] {
            let f = macro_of(&lua, code);
            assert_eq!(frozen.before("m", &f, || lua.create_table()).unwrap().as_deref(), Some(hidden), "{code}");
            // Refused again at the next call: nothing was kept.
            assert_eq!(frozen.before("m", &f, || lua.create_table()).unwrap().as_deref(), Some(hidden), "{code}");
        }
        // efmesh's own `pairs` is known, the iterator closure it returns is not.
        let safe_pairs: Function = lua
            .load("return function(t) local i = 0; return function() i = i + 1; return i, t[i] end, t, nil end")
            .set_name("=efmesh/safe.lua")
            .eval()
            .unwrap();
        let holder = lua.create_table().unwrap();
        holder.raw_set("pairs", safe_pairs.clone()).unwrap();
        frozen.know(&holder).unwrap();
        let env = lua.create_table().unwrap();
        env.raw_set("pairs", safe_pairs).unwrap();
        let kept: Function = lua
            .load("local it = pairs({ \"a\", \"a\", \"b\" })\nreturn function() local _, v = it(); return v end")
            .set_name("@macros/m.lua")
            .set_environment(env.clone())
            .eval()
            .unwrap();
        assert_eq!(frozen.before("p", &kept, || lua.create_table()).unwrap().as_deref(), Some("it"));
        let inside: Function = lua
            .load("return function() local out = {} for _, v in pairs({ \"a\" }) do out[#out + 1] = v end return out[1] end")
            .set_name("@macros/m.lua")
            .set_environment(env)
            .eval()
            .unwrap();
        assert_eq!(frozen.before("q", &inside, || lua.create_table()).unwrap(), None);
        // `ipairs`'s iterator keeps no state; a gmatch made and used inside the call is the call's.
        let f = macro_of(
            &lua,
            "local step = ipairs({})\nlocal words = { \"a\", \"b\" }\nreturn function(x) local out = {} for w in x:gmatch(\"%a\") do out[#out + 1] = w end\n  local _, first = step(words, 0); return first .. table.concat(out) end",
        );
        assert_eq!(writes(&lua, &frozen, &f, 2), vec![None, None]);
    }
}
