//! `.sql` audit files: an audit defined in SQL, usable from models of every language.
//!
//! ```sql
//! -- name:     positive
//! -- params:   column
//! -- optional: allow_zero
//! -- blocking: true
//! -- scope:    interval
//! -- description: rows whose value is not positive
//! SELECT * FROM @this_model WHERE @column < 0
//! ```
//!
//! The header is the leading block of `-- key: value` lines (`name` required; `params`,
//! `optional` comma-separated, the last of `params` may end with `...`; `blocking`, `scope`,
//! `description`), as in `.sql` models. In the body, `@this_model` is the relation under audit
//! (sqlmesh's name) and `@<param>` is replaced by the argument's text: a string as written (a
//! column name or an SQL expression, not quoted), a number as written, a boolean `TRUE` /
//! `FALSE`, an absent optional argument `NULL`, a list its items joined with `, `. Both are
//! recognised as whole words outside string literals, quoted identifiers and comments; any
//! other `@word` is a load error at its line.

use super::audits as reg;
use crate::core::audit::{Audit, AuditDef, THIS};
use crate::core::error::did_you_mean;
use crate::core::fragment::skip_literal_or_comment;
use crate::core::{LoadError, Location};
use serde_json::{Map, Value};
use std::path::Path;

const KEYS: &[&str] = &["name", "params", "optional", "blocking", "scope", "description"];

/// A parsed `.sql` audit file.
#[derive(Debug, Clone)]
pub struct SqlAuditDef {
    /// The signature.
    pub def: AuditDef,
    /// The body, as written.
    body: String,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Each `@word` of `body` outside literals and comments: (offset, word).
fn placeholders(body: &str) -> Vec<(usize, &str)> {
    let b = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        if b[i] == b'@' && (i == 0 || !is_ident(b[i - 1])) && b.get(i + 1).is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
            let mut j = i + 1;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            out.push((i, &body[i + 1..j]));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

impl SqlAuditDef {
    /// Parses a `.sql` audit file; `file` is used in locations.
    ///
    /// # Errors
    /// Every problem found, each at its line.
    pub fn parse(file: &Path, text: &str) -> Result<SqlAuditDef, Vec<LoadError>> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let at = |line: usize| Location { file: file.to_path_buf(), line: line as u32 };
        if let Some(line) = super::nul_byte_line(text.as_bytes()) {
            return Err(vec![LoadError::new(Some(Location { file: file.to_path_buf(), line }), None, super::NUL_BYTE)]);
        }
        let mut errors = Vec::new();
        let (header, body_start) = super::sql_file::read_header(text, KEYS, &at, " of a `.sql` audit file", &|_| false, &mut errors);
        let get = |k: &str| header.iter().find(|(key, _, _)| key == k);
        let Some((_, _, name_line)) = get("name") else {
            errors.push(
                LoadError::new(Some(at(1)), None, "missing header `-- name: <audit name>`")
                    .with_hint("a `.sql` audit file starts with `-- name:` (and `-- params:` when it takes arguments), then a query over `@this_model`"),
            );
            return Err(errors);
        };
        let location = at(*name_line);
        let mut spec = Map::new();
        for (key, value, line) in &header {
            let v = match key.as_str() {
                "params" | "optional" => {
                    Value::Array(value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| Value::String(s.to_string())).collect())
                }
                "blocking" => match value.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    other => {
                        errors.push(LoadError::new(Some(at(*line)), None, format!("`blocking` must be `true` or `false`, got `{other}`")));
                        continue;
                    }
                },
                _ => Value::String(value.clone()),
            };
            spec.insert(key.clone(), v);
        }
        let def = match AuditDef::from_spec(&spec, location.clone()) {
            Ok(d) => d,
            Err(m) => {
                errors.push(LoadError::new(Some(location), None, m));
                return Err(errors);
            }
        };
        let body = text[body_start.min(text.len())..].trim().trim_end_matches(';').trim_end().to_string();
        let body_line0 = text[..body_start.min(text.len())].matches('\n').count();
        if body.is_empty() {
            errors.push(LoadError::new(Some(location.clone()), None, format!("audit `{}`: the file has a header but no query", def.name)));
        }
        let mut reads = false;
        let lead = text[body_start.min(text.len())..].len() - text[body_start.min(text.len())..].trim_start().len();
        for (off, word) in placeholders(&body) {
            if word == "this_model" {
                reads = true;
            } else if !def.all_params().any(|p| p == word) {
                let line = body_line0 + text[body_start + lead..body_start + lead + off].matches('\n').count() + 1;
                let names: Vec<&str> = def.all_params().map(String::as_str).chain(["this_model"]).collect();
                let mut e = LoadError::new(Some(at(line)), None, format!("audit `{}`: `@{word}` is neither `@this_model` nor a parameter", def.name));
                e = match did_you_mean(word, names.iter().copied()) {
                    Some(s) => e.with_hint(format!("did you mean `@{s}`?")),
                    None => e.with_hint(format!("declare it in `-- params:` or `-- optional:` (it takes `{}`)", def.signature())),
                };
                errors.push(e);
            }
        }
        if !reads && !body.is_empty() {
            errors.push(LoadError::new(Some(location), None, format!("audit `{}`: the query never reads `@this_model`, the relation under audit", def.name)));
        }
        if errors.is_empty() { Ok(SqlAuditDef { def, body }) } else { Err(errors) }
    }

    /// Renders a use written at `location`.
    ///
    /// # Errors
    /// Bad arguments (named after the audit and the parameter), or an argument that cannot be
    /// written as SQL text (a map).
    pub fn render(&self, positional: Vec<Value>, named: Map<String, Value>, location: &Location) -> Result<Audit, LoadError> {
        let bound = reg::bind(&self.def, positional, named, location)?;
        let mut out = String::with_capacity(self.body.len());
        let mut copied = 0;
        for (off, word) in placeholders(&self.body) {
            out.push_str(&self.body[copied..off]);
            if word == "this_model" {
                out.push_str(THIS);
            } else {
                let v = bound.args.get(word).cloned().unwrap_or(Value::Null);
                let text =
                    sql_text(&v).map_err(|m| LoadError::new(Some(location.clone()), None, format!("audit `{}`: argument `{word}`: {m}", self.def.name)))?;
                out.push_str(&text);
            }
            copied = off + 1 + word.len();
        }
        out.push_str(&self.body[copied..]);
        reg::finish(&self.def, bound, &out, &crate::script::builder::Sites::default(), location)
    }
}

/// An argument as SQL text (see the module docs).
fn sql_text(v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(sql_text).collect::<Result<Vec<_>, _>>()?.join(", "),
        Value::Object(_) => return Err("a map cannot be written as SQL text".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::audit::AuditScope;
    use std::path::PathBuf;

    #[test]
    fn a_sql_audit_binds_and_substitutes_its_parameters() {
        let text = "-- name: positive\n-- params: column\n-- optional: floor\n-- blocking: false\n-- scope: whole\nSELECT * FROM @this_model\nWHERE @column < coalesce(@floor, 0) AND '@column' <> '' -- @nope\n";
        let d = SqlAuditDef::parse(Path::new("audits/p.sql"), text).unwrap();
        assert_eq!(d.def.signature(), "positive(column, [floor])");
        let at = Location { file: PathBuf::from("models/m.sql"), line: 3 };
        let a = d.render(vec![Value::String("amount".into())], Map::new(), &at).unwrap();
        assert_eq!(a.sql.render("t", &|m| m.to_string()), "SELECT * FROM t\nWHERE amount < coalesce(NULL, 0) AND '@column' <> '' -- @nope");
        assert!(!a.blocking);
        assert_eq!(a.scope, AuditScope::Whole);
        let e = d.render(vec![], Map::new(), &at).unwrap_err();
        assert!(e.to_string().starts_with("models/m.sql:3") && e.message.contains("needs parameter `column`"), "{e}");
    }

    #[test]
    fn unknown_placeholders_and_a_missing_relation_are_load_errors() {
        let errs = SqlAuditDef::parse(Path::new("audits/p.sql"), "-- name: p\n-- params: column\n\nSELECT *\nFROM t WHERE @colum < 0\n").unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| format!("{e} {:?}", e.hint)).collect();
        assert!(text.iter().any(|e| e.starts_with("audits/p.sql:5") && e.contains("`@colum`") && e.contains("did you mean `@column`")), "{text:?}");
        assert!(text.iter().any(|e| e.contains("never reads `@this_model`")), "{text:?}");
    }
}
