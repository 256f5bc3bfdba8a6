//! The audit API of the Rhai host: `define_audit(#{ … })`, `audit("name", …)` and the built-ins
//! of `stdlib/rhai/audits.rhai` (written with the same `define_audit`, rendering the same SQL as
//! the Lua built-ins).
//!
//! A body is a closure `|rel, args| …`; it is kept with the functions of the file that defined
//! it, so a model file can call a body defined in `audits/`, an imported file or the built-ins.
//! Uses are resolved where they are written, as in Lua: unknown names and bad arguments are
//! load errors at the `audit(…)` call, recorded while evaluation goes on.

use super::{CLOSURE_NAME_HINT, CLOSURE_NAME_IN_SQL, State, call_site, convert, holds_closure_name, rt};
use crate::core::audit::{Audit, AuditDef, THIS};
use crate::core::{LoadError, Location};
use crate::script::audits::{self as reg, RHAI_BUILTINS};
use ::rhai::{AST, Array, Dynamic, Engine, EvalAltResult, FnPtr, ImmutableString, Map, NativeCallContext};
use std::any::TypeId;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

/// The built-in audits, evaluated once per load before any project file.
pub(super) const BUILTINS: &str = include_str!("../../../stdlib/rhai/audits.rhai");

/// Most arguments `audit(name, …)` takes after the name.
pub const MAX_AUDIT_ARGS: usize = 8;

/// A body: the closure and the functions of the file that defined it.
pub(super) type Body = (FnPtr, Rc<AST>);

/// One attached audit, as `audit(…)` returns it (empty when the use had an error, which is
/// already recorded).
#[derive(Debug, Clone)]
pub(super) struct Use(Option<Audit>);

/// Registers `define_audit`, `audit` and the `Audit` type.
pub(super) fn register(engine: &mut Engine, state: &Rc<RefCell<State>>) {
    engine.register_type_with_name::<Use>("Audit");
    engine.register_fn("to_string", |u: &mut Use| -> ImmutableString {
        u.0.as_ref().map(|a| format!("audit {}", a.label())).unwrap_or_else(|| "audit (invalid)".into()).into()
    });

    let st = state.clone();
    engine.register_raw_fn("define_audit", [TypeId::of::<Dynamic>()], move |ctx, args| {
        if let Some(e) = super::refused_in_macro(&st, "define_audit") {
            return Err(e);
        }
        let location = call_site(&ctx);
        let spec = std::mem::take(args[0]);
        st.borrow_mut().defines();
        match define(&st, spec, &location) {
            Ok((def, body)) => {
                let defined = st.borrow_mut().audits.define(def, body);
                if let Err(e) = defined {
                    st.borrow_mut().errors.push(e);
                }
            }
            Err(e) => st.borrow_mut().errors.push(e),
        }
        Ok(Dynamic::UNIT)
    });

    for arity in 1..=MAX_AUDIT_ARGS + 1 {
        let st = state.clone();
        engine.register_raw_fn("audit", vec![TypeId::of::<Dynamic>(); arity], move |ctx, args| {
            let location = call_site(&ctx);
            let Some(name) = args[0].read_lock::<ImmutableString>().map(|s| s.to_string()) else {
                return Err(rt("`audit(name, …)` needs the audit's name first, e.g. `audit(\"not_null\", \"id\")`"));
            };
            let rest: Vec<Dynamic> = args[1..].iter_mut().map(|a| std::mem::take(*a)).collect();
            let resolved = resolve(&ctx, &st, &name, rest, &location);
            // A body that spent the file's budget ends the evaluation: its error is not caught here.
            let uncaught = st.borrow_mut().uncaught.take();
            if let Some(e) = uncaught.or_else(|| st.borrow().tripped()) {
                return Err(e);
            }
            match resolved {
                Ok(a) => Ok(Use(Some(a))),
                Err(e) => {
                    st.borrow_mut().errors.push(e);
                    Ok(Use(None))
                }
            }
        });
    }
}

fn define(st: &Rc<RefCell<State>>, spec: Dynamic, location: &Location) -> Result<(AuditDef, Body), LoadError> {
    let err = |m: String| LoadError::new(Some(location.clone()), None, m);
    let type_name = spec.type_name();
    let Some(map) = spec.try_cast::<Map>() else {
        return Err(err(format!("`define_audit` expects a map `#{{ name: …, params: […], query: |rel, args| … }}`, got `{type_name}`")));
    };
    let mut json = serde_json::Map::new();
    let mut body = None;
    for (key, value) in &map {
        if key == "query" {
            match value.read_lock::<FnPtr>() {
                Some(f) => body = Some(f.clone()),
                None => return Err(err(format!("`query` of `define_audit` must be a closure `|rel, args| …` returning SQL, got `{}`", value.type_name()))),
            }
            continue;
        }
        if value.is_unit() {
            continue;
        }
        json.insert(key.to_string(), convert::to_json(value).map_err(|e| err(format!("`{key}`: {e}")))?);
    }
    let def = AuditDef::from_spec(&json, location.clone()).map_err(err)?;
    let body = body.ok_or_else(|| err(format!("audit `{}`: `define_audit` needs `query`, a closure `|rel, args| …` returning SQL", def.name)))?;
    let ast = st
        .borrow()
        .asts
        .get(&location.file)
        .cloned()
        .ok_or_else(|| err("`define_audit` must be called at the top level of a file or of a function it defines".into()))?;
    Ok((def, (body, ast)))
}

fn resolve(ctx: &NativeCallContext, st: &Rc<RefCell<State>>, name: &str, args: Vec<Dynamic>, location: &Location) -> Result<Audit, LoadError> {
    let err = |m: String| LoadError::new(Some(location.clone()), None, format!("audit `{name}`: {m}"));
    let mut positional = Vec::new();
    let mut named = serde_json::Map::new();
    match args.as_slice() {
        [one] if one.is_map() => {
            let map = one.read_lock::<Map>().expect("a map");
            for (k, v) in map.iter() {
                named.insert(k.to_string(), convert::to_json(v).map_err(|e| err(format!("`{k}`: {e}")))?);
            }
        }
        _ => {
            for v in &args {
                positional.push(convert::to_json(v).map_err(&err)?);
            }
        }
    }
    let found = st.borrow().audits.get(name);
    if let Some((def, body)) = found {
        return render(ctx.engine(), st, &def, &body, positional, named, location);
    }
    // Defined in another language (or a `.sql` audit file), or unknown.
    let (foreign, local) = {
        let s = st.borrow();
        (s.foreign.clone(), s.audits.names())
    };
    match foreign {
        Some(f) => f.render_audit(name, positional, named, location, crate::script::foreign::Lang::Rhai, &local),
        None => {
            let found = st.borrow().audits.lookup(name, location);
            found.and_then(|(def, body)| render(ctx.engine(), st, &def, &body, positional, named, location))
        }
    }
}

/// Binds a use's arguments and calls the body of `def` (and again, to check that it keeps no
/// state: [`reg::Answers::checks`]).
pub(super) fn render(
    engine: &Engine,
    st: &Rc<RefCell<State>>,
    def: &AuditDef,
    body: &Body,
    positional: Vec<serde_json::Value>,
    named: serde_json::Map<String, serde_json::Value>,
    location: &Location,
) -> Result<Audit, LoadError> {
    let (body, ast) = body;
    let bound = reg::bind(def, positional, named, location)?;
    // One call of the body with `args`, in a map of its own (the body may change it).
    let call = |args: &serde_json::Map<String, serde_json::Value>| -> Result<String, LoadError> {
        let mut rhai_args = Map::new();
        for (k, v) in args {
            rhai_args.insert(k.as_str().into(), json_to_dynamic(v));
        }
        // The body carries no source: a host function's error inside it is placed in the
        // definition's file ([`super::refuse_fn_ptr_text`]).
        let outer = st.borrow_mut().body_file.replace(def.location.file.clone());
        let out: Result<Dynamic, Box<EvalAltResult>> = body.call(engine, ast, (ImmutableString::from(THIS), rhai_args));
        st.borrow_mut().body_file = outer;
        let text = match out {
            Ok(v) => match v.read_lock::<ImmutableString>() {
                // The catch-all of a closure's name reaching SQL by a route the conversions miss.
                Some(s) if holds_closure_name(s.as_str()) => {
                    return Err(reg::body_failed(def, location, &format!("its SQL holds {CLOSURE_NAME_IN_SQL}")).with_hint(CLOSURE_NAME_HINT));
                }
                Some(s) => s.to_string(),
                None => return Err(reg::body_failed(def, location, &format!("the body must return a string of SQL, got `{}`", v.type_name()))),
            },
            Err(e) => {
                let mut leaf = &*e;
                while let EvalAltResult::ErrorInFunctionCall(_, _, inner, _) = leaf {
                    leaf = inner;
                }
                let failed = reg::body_failed(def, location, &rhai_message(&e));
                // A spent limit (operations, budget, memory, depth) ends the file, as it would
                // outside the body: the caller raises it again instead of recording it.
                if leaf.is_system_exception() {
                    st.borrow_mut().uncaught = Some(e);
                }
                return Err(failed);
            }
        };
        Ok(text)
    };
    // Called again, and with the arguments of the definition's first use when they differ, the
    // first time these arguments are rendered (not for a built-in): a body keeping state
    // between calls (a closure's captured variable) answers otherwise ([`reg::finish_pure`]).
    // These verification calls run outside the file's budget ([`State::verifying`]).
    let first = call(&bound.args)?;
    let checks = st.borrow().audit_answers.checks(def, &bound.args);
    let (again, earlier) = if checks.any() { State::verifying(st, || checks.call(&bound.args, call))? } else { (None, None) };
    let mut s = st.borrow_mut();
    let s = &mut *s;
    reg::finish_pure(def, bound, reg::Calls { first, again, earlier }, &s.sites, &mut s.audit_answers, location)
}

/// The innermost message of a Rhai error.
fn rhai_message(e: &EvalAltResult) -> String {
    let mut leaf = e;
    while let EvalAltResult::ErrorInFunctionCall(_, _, inner, _) = leaf {
        leaf = inner;
    }
    match leaf {
        EvalAltResult::ErrorRuntime(v, _) if v.is_string() => v.to_string(),
        other => other.to_string(),
    }
}

/// A JSON argument as a Rhai value (`null` becomes `()`).
pub(super) fn json_to_dynamic(v: &serde_json::Value) -> Dynamic {
    use serde_json::Value as J;
    match v {
        J::Null => Dynamic::UNIT,
        J::Bool(b) => Dynamic::from(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from(i),
            None => Dynamic::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Dynamic::from(ImmutableString::from(s.as_str())),
        J::Array(items) => Dynamic::from(items.iter().map(json_to_dynamic).collect::<Array>()),
        J::Object(m) => {
            let mut out = Map::new();
            for (k, item) in m {
                out.insert(k.as_str().into(), json_to_dynamic(item));
            }
            Dynamic::from(out)
        }
    }
}

/// The audits of a model's `audits` field: an array of `audit(…)` values.
///
/// # Errors
/// A message when the field is not such an array.
pub(super) fn collect(v: &Dynamic) -> Result<Vec<Audit>, String> {
    const SHAPE: &str = "`audits` must be an array of audits, e.g. `[audit(\"not_null\", \"id\"), audit(\"unique\", \"id\")]`";
    let Some(items) = v.read_lock::<Array>() else { return Err(SHAPE.into()) };
    let mut out = Vec::new();
    for item in items.iter() {
        match item.read_lock::<Use>() {
            Some(u) => out.extend(u.0.clone()),
            None => return Err(SHAPE.into()),
        }
    }
    Ok(out)
}

/// Evaluates the built-ins (their definitions land in the registry).
pub(super) fn load_builtins(engine: &Engine, st: &Rc<RefCell<State>>) -> Result<(), LoadError> {
    let at = |m: String| LoadError::new(Some(Location { file: PathBuf::from(RHAI_BUILTINS), line: 0 }), None, m);
    let mut ast = engine.compile(BUILTINS).map_err(|e| at(e.to_string()))?;
    ast.set_source(RHAI_BUILTINS);
    st.borrow_mut().asts.insert(PathBuf::from(RHAI_BUILTINS), Rc::new(ast.clone_functions_only()));
    engine.run_ast(&ast).map_err(|e| at(e.to_string()))
}
