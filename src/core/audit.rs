//! Audits: queries returning the rows of a model that violate a rule (zero rows = pass).
//!
//! An audit is *defined* once (`define_audit { name, params, optional, blocking, scope, query }`
//! in Lua or Rhai, built-ins included) and *used* by models with arguments
//! (`audits = { audit.not_null("id") }`). The script host calls the definition's body at load
//! time with the arguments and a placeholder, [`THIS`], standing for the relation under audit;
//! the SQL it returns is kept as an [`AuditSql`] template. When the audit runs, the placeholder
//! becomes the relation: the freshly written batch (`interval` scope), the whole physical table
//! (`whole`), or an environment's view (`efmesh audit`). A body may also `ref()` another model
//! (the `relationships` built-in does): the template keeps the model's name, and the model is a
//! dependency of the auditing one for ordering and re-audit ([`super::Model::dependencies`]),
//! never for its fingerprint.
//!
//! This module is language-neutral and does no I/O: the signature of a definition
//! ([`AuditDef`]), argument binding with its messages ([`AuditDef::bind`]), the template, and
//! the resolved use a model carries ([`Audit`]). Audits are metadata: they never enter the
//! fingerprint, so adding or editing one never rebuilds anything.

use super::error::did_you_mean;
use super::fragment::RefSite;
use super::model::Location;
use super::name::ModelName;
use serde::Serialize;
use serde_json::{Map, Value};

/// What a body receives as the relation under audit; the host substitutes it when the audit
/// runs. Control characters keep it from clashing with any SQL a body could write.
pub const THIS: &str = "\u{1}this\u{2}";

/// Keys of an audit use that are options, not arguments.
pub const USE_OPTIONS: &[&str] = &["blocking", "scope"];

/// Keys of a `define_audit` spec (the body, `query`, is handled by the host).
pub const DEF_KEYS: &[&str] = &["name", "params", "optional", "blocking", "scope", "query", "description"];

/// Which rows an audit sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditScope {
    /// The rows just written: a time-range batch `[start, end)`, or the whole relation for other
    /// kinds. Runs inside the batch's transaction.
    Interval,
    /// The whole relation of the new version, before any view points at it.
    Whole,
}

impl AuditScope {
    /// Parses `interval` or `whole`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "interval" => Some(Self::Interval),
            "whole" => Some(Self::Whole),
            _ => None,
        }
    }

    /// `interval` or `whole`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interval => "interval",
            Self::Whole => "whole",
        }
    }
}

/// The signature of an audit definition (its body stays with the host that defined it).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditDef {
    /// Name used to attach it (`audit.<name>`), an identifier.
    pub name: String,
    /// Required parameters, in positional order.
    pub params: Vec<String>,
    /// Optional parameters, after the required ones in positional order; absent ones reach
    /// the body as `nil` (Lua) or `()` (Rhai).
    pub optional: Vec<String>,
    /// A last required parameter written `"name..."`: it takes every remaining positional
    /// argument, and always reaches the body as a list.
    pub rest: Option<String>,
    /// Default of `blocking` for uses that do not say.
    pub blocking: bool,
    /// Default scope for uses that do not say.
    pub scope: AuditScope,
    /// Where `define_audit` was called.
    pub location: Location,
}

/// Arguments and options of one use, checked against the definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// Every parameter in declaration order (required, rest, optional); absent optional ones
    /// are `null`.
    pub args: Map<String, Value>,
    /// Blocking (the default) or warn.
    pub blocking: bool,
    /// Which rows it sees.
    pub scope: AuditScope,
}

impl AuditDef {
    /// Reads a definition spec (`name`, `params`, `optional`, `blocking`, `scope`,
    /// `description`; `query` is the host's business).
    ///
    /// # Errors
    /// A message naming the offending field.
    pub fn from_spec(spec: &Map<String, Value>, location: Location) -> Result<AuditDef, String> {
        for key in spec.keys() {
            if !DEF_KEYS.contains(&key.as_str()) {
                let hint = did_you_mean(key, DEF_KEYS.iter().copied()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
                return Err(format!("unknown field `{key}` in `define_audit`{hint}"));
            }
        }
        let name = match spec.get("name") {
            Some(Value::String(s)) if super::name::is_identifier(s) => s.clone(),
            Some(Value::String(s)) => return Err(format!("audit name `{s}` must be an identifier (`[A-Za-z_][A-Za-z0-9_]*`)")),
            Some(_) => return Err("`name` of `define_audit` must be a string".into()),
            None => return Err("`define_audit` needs a `name`".into()),
        };
        let list = |key: &str| -> Result<Vec<String>, String> {
            match spec.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Object(m)) if m.is_empty() => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string).ok_or_else(|| format!("audit `{name}`: `{key}` must be a list of parameter names")))
                    .collect(),
                Some(_) => Err(format!("audit `{name}`: `{key}` must be a list of parameter names")),
            }
        };
        let mut params = list("params")?;
        let optional = list("optional")?;
        let mut rest = None;
        if let Some(last) = params.last().and_then(|p| p.strip_suffix("...")) {
            rest = Some(last.to_string());
            let n = params.len();
            params[n - 1] = last.to_string();
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in params.iter().chain(&optional) {
            if !super::name::is_identifier(p) {
                return Err(format!("audit `{name}`: parameter `{p}` must be an identifier (only the last of `params` may end with `...`)"));
            }
            if USE_OPTIONS.contains(&p.as_str()) {
                return Err(format!("audit `{name}`: `{p}` is an option of every audit use, not a parameter name"));
            }
            if !seen.insert(p.clone()) {
                return Err(format!("audit `{name}`: parameter `{p}` is declared twice"));
            }
        }
        if rest.is_some() && !optional.is_empty() {
            return Err(format!("audit `{name}`: a `...` parameter takes every remaining argument, so it cannot be followed by `optional` ones"));
        }
        let (blocking, scope) = use_options(spec, &name, true, AuditScope::Interval)?;
        Ok(AuditDef { name, params, optional, rest, blocking, scope, location })
    }

    /// Every parameter, in positional order.
    pub fn all_params(&self) -> impl Iterator<Item = &String> {
        self.params.iter().chain(&self.optional)
    }

    /// The signature as written in messages: `accepted_range(column, [min], [max])`.
    pub fn signature(&self) -> String {
        let mut parts: Vec<String> = self.params.iter().map(|p| if self.rest.as_deref() == Some(p) { format!("{p}...") } else { p.clone() }).collect();
        parts.extend(self.optional.iter().map(|p| format!("[{p}]")));
        format!("{}({})", self.name, parts.join(", "))
    }

    /// Binds a use's arguments: `positional` values fill the parameters in order (a `...`
    /// parameter takes the rest), `named` ones by name; `blocking` and `scope` among the named
    /// ones are options.
    ///
    /// # Errors
    /// A message naming the audit and the parameter: unknown (with a "did you mean"), given
    /// twice, missing, too many positional arguments, or a malformed option.
    pub fn bind(&self, positional: Vec<Value>, named: Map<String, Value>) -> Result<Bound, String> {
        let name = &self.name;
        let mut args: Map<String, Value> = Map::new();
        let order: Vec<&String> = self.all_params().collect();
        let mut it = positional.into_iter();
        for p in &order {
            if self.rest.as_deref() == Some(p.as_str()) {
                let rest: Vec<Value> = it.by_ref().collect();
                if !rest.is_empty() {
                    args.insert((*p).clone(), Value::Array(rest));
                }
                break;
            }
            match it.next() {
                Some(v) => {
                    args.insert((*p).clone(), v);
                }
                None => break,
            }
        }
        let extra = it.count();
        if extra > 0 {
            return Err(format!(
                "audit `{name}` takes at most {} argument{}, got {} more: `{}`",
                order.len(),
                if order.len() == 1 { "" } else { "s" },
                extra,
                self.signature()
            ));
        }
        let (blocking, scope) = use_options(&named, name, self.blocking, self.scope)?;
        for (k, v) in named {
            if USE_OPTIONS.contains(&k.as_str()) {
                continue;
            }
            if !order.iter().any(|p| **p == k) {
                let hint = did_you_mean(&k, order.iter().map(|s| s.as_str()))
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_else(|| format!(" (it takes `{}`)", self.signature()));
                return Err(format!("audit `{name}` has no parameter `{k}`{hint}"));
            }
            if args.contains_key(&k) {
                return Err(format!("audit `{name}`: parameter `{k}` is given twice (by position and by name)"));
            }
            if v.is_null() {
                continue;
            }
            args.insert(k, v);
        }
        for p in &self.params {
            if !args.contains_key(p) {
                return Err(format!("audit `{name}` needs parameter `{p}`: `{}`", self.signature()));
            }
        }
        if let Some(r) = &self.rest {
            match args.get_mut(r) {
                Some(Value::Array(items)) if items.is_empty() => return Err(format!("audit `{name}` needs at least one value for `{r}`")),
                Some(Value::Array(_)) => {}
                Some(v) => *v = Value::Array(vec![v.take()]),
                None => {}
            }
        }
        // Declaration order, absent optional ones as null.
        let mut ordered = Map::new();
        for p in order {
            ordered.insert(p.clone(), args.remove(p.as_str()).unwrap_or(Value::Null));
        }
        Ok(Bound { args: ordered, blocking, scope })
    }
}

fn use_options(map: &Map<String, Value>, name: &str, blocking: bool, scope: AuditScope) -> Result<(bool, AuditScope), String> {
    let blocking = match map.get("blocking") {
        None | Some(Value::Null) => blocking,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(format!("audit `{name}`: `blocking` must be `true` or `false`")),
    };
    let scope = match map.get("scope") {
        None | Some(Value::Null) => scope,
        Some(Value::String(s)) => AuditScope::parse(s).ok_or_else(|| format!("audit `{name}`: `scope` must be \"interval\" or \"whole\", got \"{s}\""))?,
        Some(_) => return Err(format!("audit `{name}`: `scope` must be \"interval\" or \"whole\"")),
    };
    Ok((blocking, scope))
}

/// One piece of an audit's SQL.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AuditPart {
    /// Literal SQL.
    Text(String),
    /// The relation under audit.
    This,
    /// Another model the audit reads (`ref()` in the body, e.g. `relationships`' `to`): its
    /// relation of the version being applied, or an environment's view in `efmesh audit`. The
    /// location is the audit's use (where an unknown model is reported).
    Ref(RefSite),
}

/// The SQL an audit body returned, with the relation under audit as a placeholder.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AuditSql(pub Vec<AuditPart>);

impl AuditSql {
    /// Splits a body's text on [`THIS`] and on the host's other markers (`\u{1}…\u{2}`), each
    /// of which `marker` resolves to the model a `ref()` call named.
    ///
    /// # Errors
    /// A message when `marker` refuses a marker (`cols()` is not available in audit bodies), a
    /// marker is malformed, or the text never reads the relation under audit.
    pub fn parse(text: &str, marker: &dyn Fn(&str) -> Result<RefSite, String>) -> Result<AuditSql, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        let mut literal = String::new();
        while let Some(open) = rest.find('\u{1}') {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('\u{2}').ok_or("malformed host marker in the audit body's SQL")?;
            let inner = &after[..close];
            if !literal.is_empty() {
                parts.push(AuditPart::Text(std::mem::take(&mut literal)));
            }
            parts.push(if format!("\u{1}{inner}\u{2}") == THIS { AuditPart::This } else { AuditPart::Ref(marker(inner)?) });
            rest = &after[close + 1..];
        }
        if rest.contains('\u{2}') {
            return Err("malformed host marker in the audit body's SQL".into());
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(AuditPart::Text(literal));
        }
        if !parts.contains(&AuditPart::This) {
            return Err("the audit body's SQL never reads the relation under audit (the body's first argument)".into());
        }
        if parts.iter().all(|p| match p {
            AuditPart::Text(t) => t.trim().is_empty(),
            _ => true,
        }) {
            return Err("the audit body returned no SQL".into());
        }
        Ok(AuditSql(parts))
    }

    /// The SQL with `this` standing for the relation under audit and `model(name)` for each
    /// model it references.
    pub fn render(&self, this: &str, model: &dyn Fn(&ModelName) -> String) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                AuditPart::Text(t) => out.push_str(t),
                AuditPart::This => out.push_str(this),
                AuditPart::Ref(r) => out.push_str(&model(&r.target)),
            }
        }
        out
    }

    /// Each `@word` of its literal SQL outside string literals, quoted identifiers and comments,
    /// once, as written: `@name`, or `@name(…)` for a call. Nothing gives them a meaning in a Lua
    /// or Rhai body's SQL (macros are not expanded there; the relation under audit is the body's
    /// first argument, not a marker), and DuckDB and Postgres read `@x` as `abs(x)`: `WHERE
    /// @sign(c) < 0` would never hold, the audit passing falsely. Operators (`@>`, `<@`, `@@`)
    /// are no words.
    pub fn at_words(&self) -> Vec<String> {
        // One text: a literal or comment may span the relation or a `ref()` (each a plain token).
        let s: String = self.0.iter().map(|p| if let AuditPart::Text(t) = p { t.as_str() } else { " r " }).collect();
        let mut out: Vec<String> = Vec::new();
        for (name, call) in crate::core::fragment::at_words(&s) {
            let shown = if call { format!("@{name}(…)") } else { format!("@{name}") };
            if !out.contains(&shown) {
                out.push(shown);
            }
        }
        out
    }

    /// The models the SQL references besides the relation under audit.
    pub fn refs(&self) -> impl Iterator<Item = &RefSite> {
        self.0.iter().filter_map(|p| match p {
            AuditPart::Ref(r) => Some(r),
            _ => None,
        })
    }
}

/// An audit attached to a model: the definition's name, the bound arguments and the SQL the
/// body produced for them.
///
/// `Hash` covers every field (the plan memo keys on it); `args` hash as their JSON text.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Audit {
    /// The definition's name, e.g. `not_null`.
    pub name: String,
    /// Bound arguments, in declaration order (absent optional ones are `null`). Serialized as
    /// JSON text, so binary formats (the load cache) can hold them.
    #[serde(with = "json_text")]
    pub args: Map<String, Value>,
    /// A blocking violation stops the apply; a warn one is logged.
    pub blocking: bool,
    /// Which rows it sees.
    pub scope: AuditScope,
    /// The violating-rows query.
    pub sql: AuditSql,
    /// Where the audit was attached (the `audit.<name>` call).
    pub location: Location,
    /// How many of `args` are required parameters (labels show those bare).
    pub required: usize,
}

impl std::hash::Hash for Audit {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        serde_json::to_string(&self.args).unwrap_or_default().hash(state);
        self.blocking.hash(state);
        self.scope.hash(state);
        self.sql.hash(state);
        self.location.hash(state);
        self.required.hash(state);
    }
}

impl Audit {
    /// The use of `def` with `bound` arguments, whose body returned `sql`.
    pub fn new(def: &AuditDef, bound: Bound, sql: AuditSql, location: Location) -> Audit {
        Audit { name: def.name.clone(), args: bound.args, blocking: bound.blocking, scope: bound.scope, sql, location, required: def.params.len() }
    }

    /// A short label naming the audit and its arguments, as reports show it:
    /// `not_null(tailnum)`, `accepted_range(dep_delay, min = -60)`.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        for (i, (k, v)) in self.args.iter().enumerate() {
            if v.is_null() {
                continue;
            }
            let text = short_value(v);
            // Required arguments go bare, optional ones by name.
            parts.push(if i < self.required { text } else { format!("{k} = {text}") });
        }
        format!("{}({})", self.name, parts.join(", "))
    }

    /// What the snapshot metadata records about this audit (compared as text by the plan).
    pub fn metadata(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "args": self.args,
            "blocking": self.blocking,
            "scope": self.scope.as_str(),
            "sql": self.sql.render("@this", &|m| format!("@ref({m})")),
        })
    }
}

/// Why the values of an `accepted_values` use (the built-in: audit names are never redefined)
/// cannot be compared with its column without a cast that widens the match, as a message and
/// a hint: a number or boolean on a column declared as text (the engine casts the column, so
/// `'001'`, `'2.0'` and `' 2'` would match `1` and `2`), or a string on a column declared as a
/// number (the engine casts the string, so `'1.6'` would match `2` on an integer column). The
/// declared type is the run-time one for these families: the schema contract refuses a query
/// whose column is of another family. `None` for another audit, a column the model does not
/// declare (`efmesh check` reports it), or a declared type of another family (temporal and
/// boolean columns compare with strings as written; a type efmesh does not classify is the
/// engine's to compare).
pub fn mistyped_values(audit: &Audit, schema: &super::schema::Schema) -> Option<(String, String)> {
    use super::schema::TypeFamily;
    if audit.name != "accepted_values" {
        return None;
    }
    let column = audit.args.get("column")?.as_str()?;
    let ty = &schema.get(column)?.ty;
    let Value::Array(values) = audit.args.get("values")? else { return None };
    let shown = |v: &&Value| match v {
        Value::String(s) => format!("'{s}'"),
        other => other.to_string(),
    };
    let (odd, what, fix, hint): (Vec<&Value>, &str, &str, &str) = match TypeFamily::of(ty) {
        TypeFamily::Text => (
            values.iter().filter(|v| !v.is_string() && !v.is_null()).collect(),
            "not text",
            "quote them",
            "comparing text with a number makes the engine cast the column, so '001', '2.0' or ' 2' would match 2; write ['01', '02'] (a `.sql` header reads a bare 01 as text)",
        ),
        TypeFamily::Numeric => (
            values.iter().filter(|v| v.is_string()).collect(),
            "text",
            "write them as numbers",
            "comparing a number with text makes the engine cast the text, so '1.6' would match 2 on an integer column; write [1, 2] (a `.sql` header reads a bare word, and a bare number with a leading zero, as text)",
        ),
        _ => return None,
    };
    if odd.is_empty() {
        return None;
    }
    let list = odd.iter().map(shown).collect::<Vec<_>>().join(", ");
    let (noun, verb) = if odd.len() == 1 { ("value", "is") } else { ("values", "are") };
    Some((format!("audit `{}`: the {noun} {list} {verb} {what} but column `{column}` is `{ty}`: {fix}", audit.label()), hint.to_string()))
}

/// [`mistyped_values`] of every audit of `models`, each a load error at the audit's use (its
/// `-- audits:` line in a `.sql` model).
pub fn mistyped_values_of<'m>(models: impl IntoIterator<Item = &'m super::Model>) -> Vec<super::LoadError> {
    let mut out = Vec::new();
    for m in models {
        for a in &m.audits {
            if let Some((message, hint)) = mistyped_values(a, &m.schema) {
                out.push(super::LoadError::new(Some(a.location.clone()), Some(m.name.clone()), message).with_hint(hint));
            }
        }
    }
    out
}

fn short_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(short_value).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(spec: Value) -> Result<AuditDef, String> {
        AuditDef::from_spec(spec.as_object().unwrap(), Location { file: "a.lua".into(), line: 1 })
    }

    fn named(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn binds_positional_named_rest_and_options() {
        let d = def(json!({"name": "range", "params": ["column"], "optional": ["min", "max"], "scope": "whole"})).unwrap();
        let b = d.bind(vec![json!("x"), json!(1)], named(json!({"blocking": false}))).unwrap();
        assert_eq!(b.args, named(json!({"column": "x", "min": 1, "max": null})));
        assert!(!b.blocking);
        assert_eq!(b.scope, AuditScope::Whole);
        let u = def(json!({"name": "unique", "params": ["columns..."]})).unwrap();
        assert_eq!(u.bind(vec![json!("a"), json!("b")], Map::new()).unwrap().args, named(json!({"columns": ["a", "b"]})));
        assert_eq!(u.bind(vec![], named(json!({"columns": "a"}))).unwrap().args, named(json!({"columns": ["a"]})));
        assert_eq!(u.bind(vec![json!("a")], Map::new()).unwrap().scope, AuditScope::Interval);
        assert!(u.bind(vec![], named(json!({"columns": []}))).unwrap_err().contains("at least one value"));
        assert!(u.bind(vec![], Map::new()).unwrap_err().contains("needs parameter `columns`: `unique(columns...)`"));
    }

    #[test]
    fn binding_errors_name_the_audit_and_the_parameter() {
        let d = def(json!({"name": "range", "params": ["column"], "optional": ["min"]})).unwrap();
        let e = d.bind(vec![], named(json!({"colum": "x"}))).unwrap_err();
        assert!(e.contains("audit `range` has no parameter `colum` (did you mean `column`?)"), "{e}");
        let e = d.bind(vec![], Map::new()).unwrap_err();
        assert!(e.contains("audit `range` needs parameter `column`: `range(column, [min])`"), "{e}");
        let e = d.bind(vec![json!("a"), json!(1), json!(2)], Map::new()).unwrap_err();
        assert!(e.contains("takes at most 2 arguments"), "{e}");
        let e = d.bind(vec![json!("a")], named(json!({"column": "b"}))).unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let e = d.bind(vec![json!("a")], named(json!({"scope": "batch"}))).unwrap_err();
        assert!(e.contains("`scope` must be \"interval\" or \"whole\""), "{e}");
        assert!(def(json!({"name": "x", "params": ["blocking"]})).unwrap_err().contains("option"));
        assert!(def(json!({"name": "x", "parms": []})).unwrap_err().contains("did you mean `params`"));
    }

    #[test]
    fn accepted_values_of_the_wrong_type_for_their_column_are_refused() {
        use crate::core::{Column, Schema};
        let schema = Schema(vec![
            Column { name: "code".into(), ty: "varchar".into() },
            Column { name: "n".into(), ty: "INTEGER".into() },
            Column { name: "d".into(), ty: "date".into() },
        ]);
        let use_of = |name: &str, column: &str, values: Value| Audit {
            name: name.into(),
            args: named(json!({"column": column, "values": values})),
            blocking: true,
            scope: AuditScope::Interval,
            sql: AuditSql(vec![AuditPart::This]),
            location: Location { file: "m.sql".into(), line: 4 },
            required: 2,
        };
        let (message, hint) = mistyped_values(&use_of("accepted_values", "code", json!([1, 2])), &schema).unwrap();
        assert_eq!(message, "audit `accepted_values(code, 1, 2)`: the values 1, 2 are not text but column `code` is `varchar`: quote them");
        assert!(hint.contains("'001'"), "{hint}");
        let (message, _) = mistyped_values(&use_of("accepted_values", "code", json!(["a", true])), &schema).unwrap();
        assert!(message.contains("the value true is not text"), "{message}");
        let (message, _) = mistyped_values(&use_of("accepted_values", "n", json!(["1", 2])), &schema).unwrap();
        assert_eq!(message, "audit `accepted_values(n, 1, 2)`: the value '1' is text but column `n` is `INTEGER`: write them as numbers");
        for fine in [
            use_of("accepted_values", "code", json!(["01", "02"])),
            use_of("accepted_values", "n", json!([1, 2.5])),
            use_of("accepted_values", "d", json!(["2026-01-01"])),
            use_of("accepted_values", "undeclared", json!([1])),
            use_of("accepted_range", "code", json!([1])),
        ] {
            assert_eq!(mistyped_values(&fine, &schema), None, "{}", fine.label());
        }
    }

    #[test]
    fn templates_need_the_relation_and_resolve_refs() {
        let at = Location { file: "m.lua".into(), line: 3 };
        let marker = |inner: &str| -> Result<RefSite, String> {
            match inner {
                "0" => Ok(RefSite { target: ModelName::parse("s.p").unwrap(), location: at.clone() }),
                _ => Err("`cols()` cannot be used in an audit body".into()),
            }
        };
        let sql = AuditSql::parse(&format!("SELECT * FROM {THIS} WHERE x IS NULL"), &marker).unwrap();
        assert_eq!(sql.render("\"_efmesh\".\"t\"", &|m| m.to_string()), "SELECT * FROM \"_efmesh\".\"t\" WHERE x IS NULL");
        assert!(AuditSql::parse("SELECT 1", &marker).unwrap_err().contains("never reads"));
        assert!(AuditSql::parse(&format!("SELECT * FROM {THIS} JOIN \u{1}1\u{2}"), &marker).unwrap_err().contains("cols()"));
        assert!(AuditSql::parse(&format!("SELECT * FROM {THIS} JOIN \u{1}0"), &marker).unwrap_err().contains("malformed"));
        let joined = AuditSql::parse(&format!("SELECT * FROM {THIS} AS c WHERE NOT EXISTS (SELECT 1 FROM \u{1}0\u{2} AS p)"), &marker).unwrap();
        assert_eq!(joined.refs().map(|r| r.target.to_string()).collect::<Vec<_>>(), ["s.p"]);
        assert_eq!(joined.render("t", &|m| format!("v_{}", m.table())), "SELECT * FROM t AS c WHERE NOT EXISTS (SELECT 1 FROM v_p AS p)");
    }

    #[test]
    fn at_words_are_the_words_and_calls_outside_literals_comments_and_operators() {
        let marker = |_: &str| -> Result<RefSite, String> { Err("no ref".into()) };
        let sql = AuditSql::parse(
            &format!("SELECT * FROM {THIS} WHERE @sign (c) < 0 AND @c < 0 OR @c > 1 AND '@x' <> \"@y\" AND j @> k AND k <@ j AND t @@ q -- @z\n"),
            &marker,
        )
        .unwrap();
        assert_eq!(sql.at_words(), ["@sign(…)", "@c"]);
        let plain = AuditSql::parse(&format!("SELECT * FROM {THIS} WHERE abs(c) < 0 AND x@y"), &marker).unwrap();
        assert!(plain.at_words().is_empty(), "{:?}", plain.at_words());
    }
}

/// Serializes a JSON map as its text (binary serde formats cannot hold `serde_json::Value`).
mod json_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::{Map, Value};

    pub fn serialize<S: Serializer>(map: &Map<String, Value>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&serde_json::to_string(map).map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text).map_err(serde::de::Error::custom)
    }
}
