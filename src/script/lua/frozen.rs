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
//! metatables and the project's functions), and after each of its calls the same things are
//! compared with it (`stdlib/lua/frozen.lua`): a difference is a load error at the call naming the
//! macro, its file:line and the first thing written (`shared.v`).
//!
//! The comparison reads every table the macro reaches again, so a call costs time in proportion
//! to that (a file's globals and its copies of the libraries: some hundred entries, a few
//! microseconds), with no allocation and no project code run (no metamethod is called).
//!
//! The audit bodies and signals the interpreter runs reach the same state, so they are checked
//! the same way ([`super::LuaHost::render_audit`], [`super::LuaHost::call_signal`]; their
//! snapshots are keyed `audit <name>` and `signal <name>`, which no macro's name can be): one
//! writing what a macro reads is a load error naming it, not a change the next macro's snapshot
//! silently starts from. Snapshots are dropped when a write is found and taken again at each
//! one's next call.

use mlua::{Function, Lua, Table};
use std::cell::RefCell;
use std::collections::HashMap;

/// Lua source of the snapshot and comparison functions.
pub(super) const SOURCE: &str = include_str!("../../../stdlib/lua/frozen.lua");

/// The snapshot functions of the macro interpreter and the snapshot of each macro called since
/// the state last changed.
pub(super) struct Frozen {
    snapshot: Function,
    changed: Function,
    taken: RefCell<HashMap<String, Table>>,
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
        let (snapshot, changed): (Function, Function) =
            lua.load(SOURCE).set_name("=efmesh/frozen.lua").set_mode(mlua::chunk::ChunkMode::Text).call((getupvalue, getinfo, getmetatable))?;
        Ok(Frozen { snapshot, changed, taken: RefCell::new(HashMap::new()) })
    }

    /// Before a call of macro `name` (function `f`): takes its snapshot unless it has one, of what
    /// `f` and `roots` reach (`roots`: a sequence of value, label, value, label…: the modules kept
    /// from the definition files, made only when a snapshot is taken).
    ///
    /// # Errors
    /// When the snapshot cannot be taken (the interpreter's memory limit).
    pub(super) fn before(&self, name: &str, f: &Function, roots: impl FnOnce() -> mlua::Result<Table>) -> mlua::Result<()> {
        if self.taken.borrow().contains_key(name) {
            return Ok(());
        }
        let snap: Table = self.snapshot.call((f.clone(), roots()?))?;
        self.taken.borrow_mut().insert(name.to_string(), snap);
        Ok(())
    }

    /// After a call of macro `name`: the path of the first thing it changed (`shared.v`), if
    /// any; then every snapshot is dropped (the state they describe is gone).
    ///
    /// # Errors
    /// When the comparison cannot run.
    pub(super) fn after(&self, name: &str) -> mlua::Result<Option<String>> {
        let snap = self.taken.borrow().get(name).cloned();
        let Some(snap) = snap else { return Ok(None) };
        let written: Option<String> = self.changed.call(snap)?;
        if written.is_some() {
            self.forget();
        }
        Ok(written)
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

    /// An interpreter with the debug library (as the macro interpreter has it) and the
    /// snapshot functions; `load(code)` evaluates a macro file (named `@macros/m.lua`) in an
    /// environment of its own and returns what it returns.
    fn interpreter() -> (Lua, Frozen) {
        // SAFETY: a test interpreter running only the code below.
        let lua = unsafe { Lua::unsafe_new_with(StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::DEBUG, LuaOptions::new()) };
        let debug: Table = lua.globals().get("debug").unwrap();
        let frozen = Frozen::new(&lua, &debug).unwrap();
        (lua, frozen)
    }

    fn macro_of(lua: &Lua, code: &str) -> Function {
        let env = lua.create_table().unwrap();
        for lib in ["string", "table", "math", "tostring", "setmetatable", "rawset", "getmetatable"] {
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

    /// What each call of `f` (made `calls` times) wrote.
    fn writes(lua: &Lua, frozen: &Frozen, f: &Function, calls: usize) -> Vec<Option<String>> {
        (0..calls)
            .map(|_| {
                frozen.before("m", f, || lua.create_table()).unwrap();
                let _: Value = f.call("x").unwrap();
                frozen.after("m").unwrap()
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
        frozen.before("m", &f, roots).unwrap();
        module.raw_set("count", 1).unwrap();
        assert_eq!(frozen.after("m").unwrap().as_deref(), Some("require(\"lib.h\").count"));
    }
}
