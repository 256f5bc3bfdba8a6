//! The audit registry a script host keeps during one load: every `define_audit` (the built-ins
//! from `stdlib/`, then the project's), looked up by name when a model attaches an audit.
//!
//! Language-neutral: the host stores its own callable body next to each [`AuditDef`]. Lookups
//! happen where the audit is attached, so a definition must be evaluated first: the built-ins
//! are, and so are files matched by `[project] audits` (default `audits/**/*.{lua,rhai,sql}`),
//! evaluated before any model file; otherwise `require`/`import` the defining file. A name
//! the host's own registry lacks is looked up in the other languages' definitions
//! ([`super::foreign::Foreign::render_audit`]).

use crate::core::audit::{Audit, AuditDef, AuditSql, Bound};
use crate::core::error::did_you_mean;
use crate::core::fragment::RefSite;
use crate::core::{LoadError, Location};
use crate::script::builder::{Site, Sites};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Source name of the built-in Lua audits, as locations show it.
pub const LUA_BUILTINS: &str = "efmesh:audits.lua";
/// Source name of the built-in Rhai audits, as locations show it.
pub const RHAI_BUILTINS: &str = "efmesh:audits.rhai";

/// Definitions by name, each with the host's body `B`.
#[derive(Debug, Clone)]
pub struct Registry<B> {
    defs: BTreeMap<String, (AuditDef, B)>,
}

impl<B> Default for Registry<B> {
    fn default() -> Self {
        Self { defs: BTreeMap::new() }
    }
}

impl<B: Clone> Registry<B> {
    /// Records a definition.
    ///
    /// # Errors
    /// A load error at the definition when the name is taken (built-in names included).
    pub fn define(&mut self, def: AuditDef, body: B) -> Result<(), LoadError> {
        if let Some((first, _)) = self.defs.get(&def.name) {
            let at = if first.location.file.to_string_lossy().starts_with("efmesh:") {
                "a built-in audit".to_string()
            } else {
                format!("defined at {}", first.location)
            };
            return Err(LoadError::new(Some(def.location.clone()), None, format!("audit `{}` is already defined ({at})", def.name))
                .with_hint("give the audit another name"));
        }
        self.defs.insert(def.name.clone(), (def, body));
        Ok(())
    }

    /// Every definition, by name (built-ins included).
    pub fn defs(&self) -> impl Iterator<Item = &AuditDef> {
        self.defs.values().map(|(d, _)| d)
    }

    /// Every name defined.
    pub fn names(&self) -> Vec<String> {
        self.defs.keys().cloned().collect()
    }

    /// The definition named `name` and its body, if defined.
    pub fn get(&self, name: &str) -> Option<(AuditDef, B)> {
        self.defs.get(name).map(|(d, b)| (d.clone(), b.clone()))
    }

    /// The definition named `name` and its body.
    ///
    /// # Errors
    /// A load error at `location` for an unknown name, with a "did you mean".
    pub fn lookup(&self, name: &str, location: &Location) -> Result<(AuditDef, B), LoadError> {
        match self.defs.get(name) {
            Some((d, b)) => Ok((d.clone(), b.clone())),
            None => {
                let mut e = LoadError::new(Some(location.clone()), None, format!("unknown audit `{name}`"));
                e = match did_you_mean(name, self.defs.keys().map(String::as_str)) {
                    Some(s) => e.with_hint(format!("did you mean `{s}`?")),
                    None => e.with_hint("define it with `define_audit` in `audits/` (evaluated before the models), or require/import the file defining it"),
                };
                Err(e)
            }
        }
    }
}

/// Binds a use's arguments, naming the audit and its use site on error.
///
/// # Errors
/// A load error at `location`.
pub fn bind(def: &AuditDef, positional: Vec<Value>, named: Map<String, Value>, location: &Location) -> Result<Bound, LoadError> {
    def.bind(positional, named).map_err(|m| LoadError::new(Some(location.clone()), None, m))
}

/// Turns the text a body returned into the model's audit. A `ref()` the body called (a marker
/// recorded in `sites`) becomes a reference to that model, located at the use (`location`):
/// the model is checked to exist there once every file is loaded.
///
/// # Errors
/// A load error at `location` naming the audit.
pub fn finish(def: &AuditDef, bound: Bound, text: &str, sites: &Sites, location: &Location) -> Result<Audit, LoadError> {
    let marker = |inner: &str| match sites.get(inner) {
        Some(Site::Ref(r)) => Ok(RefSite { target: r.target.clone(), location: location.clone() }),
        Some(Site::Cols(_)) => Err("`cols()` cannot be used in an audit body (`ref()` can)".to_string()),
        None => Err("unknown host marker in the audit body's SQL".to_string()),
    };
    let sql = AuditSql::parse(text, &marker).map_err(|m| LoadError::new(Some(location.clone()), None, format!("audit `{}`: {m}", def.name)))?;
    if let Some(word) = sql.at_words().into_iter().next() {
        return Err(at_word(def, &word, location));
    }
    Ok(Audit::new(def, bound, sql, location.clone()))
}

/// The load error at a use (`location`) of an audit whose body returned SQL holding `word`
/// (`@name` or `@name(…)`, [`AuditSql::at_words`]): macros are not expanded in audit bodies and
/// a body's SQL has no markers, so the engine would read it as `abs(…)` and the audit pass
/// falsely.
fn at_word(def: &AuditDef, word: &str, location: &Location) -> LoadError {
    let name = word.trim_start_matches('@');
    let (what, hint) = match name.strip_suffix("(…)") {
        Some(call) => (
            format!("the macro call `{word}`, but macros are not expanded in audit bodies: DuckDB would read it as `abs({call}(…))`"),
            "build that SQL in the body itself (a function of the audit's file), or write an SQL function call without `@`",
        ),
        None => (
            format!(
                "`{word}`, but an audit body's SQL has no `@` markers (the relation under audit is the body's first argument): DuckDB would read it as `abs({name})`"
            ),
            "put the argument's text in the SQL as it is (write `abs(…)` if that was meant)",
        ),
    };
    LoadError::new(Some(location.clone()), None, format!("audit `{}` ({}) returned SQL holding {what}", def.name, def.location)).with_hint(hint)
}

/// The load error for a body that failed.
pub fn body_failed(def: &AuditDef, location: &Location, message: &str) -> LoadError {
    LoadError::new(Some(location.clone()), None, format!("audit `{}` failed to render its SQL: {}", def.name, message.trim_end()))
}
