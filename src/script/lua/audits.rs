//! The audit API of the Lua host: `define_audit { … }`, the `audit` namespace
//! (`audit.not_null("id")`, `audit.unique { columns = { "a", "b" }, blocking = false }`, or
//! `audit("not_null", "id")`) and the built-ins of `stdlib/lua/audits.lua`, which are written with
//! the same `define_audit` a project uses.
//!
//! An audit use is resolved where it is written: the definition is looked up (unknown names are
//! load errors with a "did you mean"), the arguments are bound (errors name the audit and the
//! parameter), and the body is called with [`THIS`] and the arguments; the SQL it returns
//! becomes the model's [`Audit`]. Errors are recorded and evaluation goes on, like
//! `define_model`'s.

use super::{State, call_plain, caller_location, lua_to_json, rt};
use crate::core::audit::{Audit, AuditDef, THIS};
use crate::core::{LoadError, Location};
use crate::script::audits::{self as reg, LUA_BUILTINS};
use mlua::{Function, Lua, MultiValue, Table, UserData, Value};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

/// The built-in audits, evaluated once per interpreter before any project file.
pub(super) const BUILTINS: &str = include_str!("../../../stdlib/lua/audits.lua");

/// The `audit` global: `audit.<name>` is a constructor, `audit(name, …)` a use.
struct Namespace(Rc<RefCell<State>>);

impl UserData for Namespace {
    fn add_methods<M: mlua::UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(mlua::MetaMethod::Index, |lua, this, name: String| {
            let st = this.0.clone();
            lua.create_function(move |lua, args: MultiValue| use_audit(lua, &st, &name, args))
        });
        methods.add_meta_method(mlua::MetaMethod::Call, |lua, this, args: MultiValue| {
            let mut it = args.into_iter();
            let name = match it.next() {
                Some(Value::String(s)) => s.to_str().map_err(|_| rt("audit names must be UTF-8"))?.to_string(),
                _ => return Err(rt("`audit(name, …)` needs the audit's name first, e.g. `audit(\"not_null\", \"id\")`")),
            };
            use_audit(lua, &this.0, &name, it.collect())
        });
        methods.add_meta_method(mlua::MetaMethod::NewIndex, |_, _, (_k, _v): (Value, Value)| -> mlua::Result<()> {
            Err(rt("`audit` is read-only: define audits with `define_audit { … }`"))
        });
    }
}

/// One attached audit, as `audit.<name>(…)` returns it (empty when the use had an error, which
/// is already recorded).
pub(super) struct Use(Option<Audit>);

impl UserData for Use {
    fn add_methods<M: mlua::UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(mlua::MetaMethod::ToString, |_, this, ()| {
            Ok(this.0.as_ref().map(|a| format!("audit {}", a.label())).unwrap_or_else(|| "audit (invalid)".into()))
        });
    }
}

fn location_of(lua: &Lua, st: &Rc<RefCell<State>>) -> Location {
    let root = st.borrow().root.clone();
    caller_location(lua, &root).unwrap_or_else(|| Location { file: PathBuf::from(LUA_BUILTINS), line: 0 })
}

/// Installs `define_audit` and `audit` into the prototype environment.
pub(super) fn install(lua: &Lua, proto: &Table, st: &Rc<RefCell<State>>) -> mlua::Result<()> {
    let state = st.clone();
    let define = lua.create_function(move |lua, spec: Value| {
        if let Some(e) = super::refused_in_macro(lua, &state, "define_audit") {
            return Err(e);
        }
        {
            let mut s = state.borrow_mut();
            if let Some(file) = s.stack.last().cloned() {
                s.definitions.defining.insert(file);
            }
        }
        let location = location_of(lua, &state);
        match define(&spec, location) {
            Ok((def, body)) => {
                let defined = state.borrow_mut().audits.define(def, body);
                if let Err(e) = defined {
                    state.borrow_mut().errors.push(e);
                }
            }
            Err(e) => state.borrow_mut().errors.push(e),
        }
        Ok(())
    })?;
    proto.set("define_audit", define)?;
    proto.set("audit", lua.create_userdata(Namespace(st.clone()))?)?;
    Ok(())
}

fn define(spec: &Value, location: Location) -> Result<(AuditDef, Function), LoadError> {
    let err = |m: String| LoadError::new(Some(location.clone()), None, m);
    let Value::Table(t) = spec else {
        return Err(err(format!("`define_audit` expects a table, got {}", spec.type_name())));
    };
    let mut map = serde_json::Map::new();
    let mut body = None;
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, v) = pair.map_err(|e| err(e.to_string()))?;
        let Value::String(k) = k else { return Err(err("`define_audit` fields must be named".into())) };
        let key = k.to_str().map_err(|_| err("field names must be UTF-8".into()))?.to_string();
        if key == "query" {
            match v {
                Value::Function(f) => body = Some(f),
                other => return Err(err(format!("`query` of `define_audit` must be a function (relation, args) returning SQL, got {}", other.type_name()))),
            }
            continue;
        }
        map.insert(key.clone(), lua_to_json(&v, 0).map_err(|e| err(format!("`{key}`: {e}")))?);
    }
    let def = AuditDef::from_spec(&map, location.clone()).map_err(err)?;
    let body = body.ok_or_else(|| err(format!("audit `{}`: `define_audit` needs `query`, a function (relation, args) returning SQL", def.name)))?;
    Ok((def, body))
}

/// `audit.<name>(…)`: resolves one use; errors are recorded and yield an empty use.
fn use_audit(lua: &Lua, st: &Rc<RefCell<State>>, name: &str, args: MultiValue) -> mlua::Result<Use> {
    let location = location_of(lua, st);
    let resolved = resolve(lua, st, name, args, &location);
    // A body that spent the file's budget ends the evaluation: its error is not caught here.
    if let Some(e) = st.borrow().tripped() {
        return Err(e);
    }
    match resolved {
        Ok(audit) => Ok(Use(Some(audit))),
        Err(e) => {
            st.borrow_mut().errors.push(e);
            Ok(Use(None))
        }
    }
}

fn resolve(lua: &Lua, st: &Rc<RefCell<State>>, name: &str, args: MultiValue, location: &Location) -> Result<Audit, LoadError> {
    let (positional, named) = arguments(name, args, location)?;
    let found = st.borrow().audits.get(name);
    match found {
        Some((def, body)) => render(lua, st, &def, &body, positional, named, location),
        None => {
            // Defined in another language (or a `.sql` audit file), or unknown.
            let (foreign, local) = {
                let s = st.borrow();
                (s.foreign.clone(), s.audits.names())
            };
            match foreign {
                Some(f) => f.render_audit(name, positional, named, location, crate::script::foreign::Lang::Lua, &local),
                None => {
                    let found = st.borrow().audits.lookup(name, location);
                    found.and_then(|(def, body)| render(lua, st, &def, &body, positional, named, location))
                }
            }
        }
    }
}

/// A use's Lua arguments as positional and named JSON values.
fn arguments(name: &str, args: MultiValue, location: &Location) -> Result<(Vec<serde_json::Value>, serde_json::Map<String, serde_json::Value>), LoadError> {
    let err = |m: String| LoadError::new(Some(location.clone()), None, format!("audit `{name}`: {m}"));
    let mut positional = Vec::new();
    let mut named = serde_json::Map::new();
    let values: Vec<Value> = args.into_iter().collect();
    match values.as_slice() {
        [Value::Table(t)] => {
            let len = t.raw_len();
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|e| err(e.to_string()))?;
                match k {
                    Value::Integer(i) if i >= 1 && (i as usize) <= len => {}
                    Value::String(s) => {
                        let key = s.to_str().map_err(|_| err("argument names must be UTF-8".into()))?.to_string();
                        named.insert(key.clone(), lua_to_json(&v, 0).map_err(|e| err(format!("`{key}`: {e}")))?);
                    }
                    other => return Err(err(format!("unexpected argument key of type {}", other.type_name()))),
                }
            }
            for i in 1..=len {
                let v: Value = t.raw_get(i).map_err(|e| err(e.to_string()))?;
                positional.push(lua_to_json(&v, 0).map_err(&err)?);
            }
        }
        _ => {
            for v in &values {
                positional.push(lua_to_json(v, 0).map_err(&err)?);
            }
        }
    }
    Ok((positional, named))
}

/// Binds a use's arguments and calls the body of `def` (and again, to check that it keeps no
/// state: [`reg::Answers::checks`]).
pub(super) fn render(
    lua: &Lua,
    st: &Rc<RefCell<State>>,
    def: &AuditDef,
    body: &Function,
    positional: Vec<serde_json::Value>,
    named: serde_json::Map<String, serde_json::Value>,
    location: &Location,
) -> Result<Audit, LoadError> {
    let name = &def.name;
    let err = |m: String| LoadError::new(Some(location.clone()), None, format!("audit `{name}`: {m}"));
    let bound = reg::bind(def, positional, named, location)?;
    // One call of the body with `args`, in a table of its own (the body may change it).
    let call = |args: &serde_json::Map<String, serde_json::Value>| -> Result<String, LoadError> {
        let table = lua.create_table().map_err(|e| err(e.to_string()))?;
        for (k, v) in args {
            table.set(k.as_str(), json_to_lua(lua, v).map_err(|e| err(e.to_string()))?).map_err(|e| err(e.to_string()))?;
        }
        let text = match call_plain::<Value>(lua, body, (THIS, table)) {
            Ok(Value::String(s)) => s.to_str().map_err(|_| err("the body must return UTF-8 text".into()))?.to_string(),
            Ok(other) => return Err(reg::body_failed(def, location, &format!("the body must return a string of SQL, got {}", other.type_name()))),
            Err(e) => return Err(reg::body_failed(def, location, &lua_message(&e))),
        };
        Ok(text)
    };
    // Called again, and with the arguments of the definition's first use when they differ, the
    // first time these arguments are rendered (not for a built-in): a body keeping state
    // between calls answers otherwise ([`reg::finish_pure`]). These verification calls run
    // outside the file's budget ([`State::verifying`]).
    let first = call(&bound.args)?;
    let checks = st.borrow().audit_answers.checks(def, &bound.args);
    let (again, earlier) = if checks.any() { State::verifying(st, || checks.call(&bound.args, call))? } else { (None, None) };
    let mut s = st.borrow_mut();
    let s = &mut *s;
    reg::finish_pure(def, bound, reg::Calls { first, again, earlier }, &s.sites, &mut s.audit_answers, location)
}

/// The first line of a Lua error, without mlua's `runtime error: ` prefix, cut to
/// [`MAX_ERROR_BYTES`](crate::script::sandbox::MAX_ERROR_BYTES).
pub(super) fn lua_message(e: &mlua::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    crate::script::sandbox::capped_message(first.strip_prefix("runtime error: ").unwrap_or(first).to_string())
}

/// A JSON argument as a Lua value (`null` becomes `nil`).
pub(super) fn json_to_lua(lua: &Lua, v: &serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, json_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        J::Object(m) => {
            let t = lua.create_table()?;
            for (k, item) in m {
                t.raw_set(k.as_str(), json_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// The audits of a model's `audits` field: a list of uses.
///
/// # Errors
/// A message when the field is not a list of `audit.<name>(…)` values.
pub(super) fn collect(v: &Value) -> Result<Vec<Audit>, String> {
    const SHAPE: &str = "`audits` must be a list of audits, e.g. `{ audit.not_null(\"id\"), audit.unique(\"id\") }`";
    let Value::Table(t) = v else { return Err(SHAPE.into()) };
    let len = t.raw_len();
    if t.clone().pairs::<Value, Value>().count() != len {
        return Err(SHAPE.into());
    }
    let mut out = Vec::new();
    for i in 1..=len {
        match t.raw_get::<Value>(i).map_err(|e| e.to_string())? {
            Value::UserData(ud) => match ud.borrow::<Use>() {
                Ok(u) => out.extend(u.0.clone()),
                Err(_) => return Err(SHAPE.into()),
            },
            _ => return Err(SHAPE.into()),
        }
    }
    Ok(out)
}
