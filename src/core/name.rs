//! Names: models are `<schema>.<table>`, environments are lower-case identifiers.
//!
//! Rules come from the original's definition-time checks (reference `core-semantics.md` §1.1):
//! each part of a model name matches `[A-Za-z_][A-Za-z0-9_]*`; an environment name matches
//! `[a-z][a-z0-9_]*`. The environment `prod` is special: its views live in the model's own schema.
//! We add rules so that no view or physical relation can land on another's (SPEC §4,
//! "Names never collide"):
//! - a model's schema contains no `__` and does not end with `_`, and is not `_efmesh`;
//! - an environment name contains no `__` and does not end with `_`;
//! - model names are unique case-insensitively (DuckDB identifiers are), checked by the DAG.
//!
//! So in `<env>__<schema>` and `<schema>__<table>__<fp>` the FIRST `__` always sits right after
//! the environment (resp. the schema): nothing before it can hold `__`, nor end in `_` to make
//! one with the separator. Both mappings are injective (exhaustively tested over tricky names in
//! `tests/it/names.rs`), environment schemas always contain `__` while prod schemas and
//! `_efmesh` never do.

use std::fmt;

/// A validated model name `<schema>.<table>`.
///
/// Ordering is lexicographic on (schema, table), which keeps every listing deterministic.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelName {
    schema: String,
    table: String,
}

/// Why a string is not a valid model or environment name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} `{name}`: {reason}")]
pub struct NameError {
    /// `model name` or `environment name`.
    pub what: &'static str,
    /// The offending text.
    pub name: String,
    /// What rule it breaks.
    pub reason: String,
}

/// True when `s` is a plain identifier `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ModelName {
    /// Parses `schema.table`.
    ///
    /// # Errors
    /// [`NameError`] when there is not exactly one dot or a part is not an identifier.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        let err = |reason: &str| NameError { what: "model name", name: s.to_string(), reason: reason.to_string() };
        let Some((schema, table)) = s.split_once('.') else {
            return Err(err("expected `<schema>.<table>`"));
        };
        if table.contains('.') {
            return Err(err("expected exactly one `.` between schema and table"));
        }
        for part in [schema, table] {
            if !is_identifier(part) {
                return Err(err(&format!("`{part}` must match [A-Za-z_][A-Za-z0-9_]*")));
            }
        }
        // `<env>__<schema>` holds environment views and `_efmesh` the physical relations: a
        // model schema must never be able to land on either.
        if schema.contains("__") {
            return Err(err("the schema part cannot contain `__` (reserved for environment schemas `<env>__<schema>`)"));
        }
        // `a_.b` would flatten like `a._b` in `<schema>__<table>__<fp>`.
        if schema.ends_with('_') {
            return Err(err("the schema part cannot end with `_` (`<schema>__<table>` must split at its first `__`)"));
        }
        if schema.eq_ignore_ascii_case(PHYSICAL_SCHEMA) {
            return Err(err("the schema `_efmesh` is reserved for physical tables"));
        }
        Ok(Self { schema: schema.to_string(), table: table.to_string() })
    }

    /// The schema part.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The table part.
    pub fn table(&self) -> &str {
        &self.table
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

impl fmt::Debug for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl TryFrom<String> for ModelName {
    type Error = NameError;
    fn try_from(s: String) -> Result<Self, NameError> {
        Self::parse(&s)
    }
}

impl From<ModelName> for String {
    fn from(n: ModelName) -> String {
        n.to_string()
    }
}

/// The schema holding every physical relation.
pub const PHYSICAL_SCHEMA: &str = "_efmesh";

/// `"schema"."name"` split into its parts; `None` for names in attached catalogs (three parts,
/// e.g. DuckLake tables, which the main catalog does not list).
pub fn split_relation(qualified: &str) -> Option<(String, String)> {
    let [schema, name]: [String; 2] = quoted_parts(qualified)?.try_into().ok()?;
    Some((schema, name))
}

/// The parts of a relation name written as efmesh writes them, every part double-quoted (`""`
/// inside standing for a quote) and joined by dots, unquoted; `None` for any other spelling.
pub fn quoted_parts(qualified: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut chars = qualified.chars().peekable();
    while chars.peek().is_some() {
        if chars.next()? != '"' {
            return None;
        }
        let mut part = String::new();
        loop {
            match chars.next()? {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    part.push('"');
                }
                '"' => break,
                c => part.push(c),
            }
        }
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => {}
            Some(_) => return None,
        }
    }
    Some(parts)
}

/// The environment whose views live in the models' own schemas.
pub const PROD: &str = "prod";

/// Validates an environment name (`[a-z][a-z0-9_]*`, without `__` and not ending with `_`).
///
/// # Errors
/// [`NameError`] naming the rule.
pub fn validate_env(env: &str) -> Result<(), NameError> {
    let ok = env.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && env.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    // `__` inside, or a trailing `_` (`dev_` + `mart` = `dev` + `_mart` = `dev___mart`), would
    // make `<env>__<schema>` ambiguous with another environment's schema.
    if ok && !env.contains("__") && !env.ends_with('_') {
        Ok(())
    } else {
        Err(NameError { what: "environment name", name: env.to_string(), reason: "must match [a-z][a-z0-9_]*, without `__` and not ending with `_`".into() })
    }
}

/// Double-quotes an SQL identifier, doubling embedded quotes.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Single-quotes an SQL string literal, doubling embedded quotes.
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_need_one_dot_and_identifiers() {
        assert!(ModelName::parse("med.moves").is_ok());
        assert!(ModelName::parse("_a1.b_2").is_ok());
        assert!(ModelName::parse("a.b__c").is_ok());
        for bad in ["moves", "a.b.c", "1a.b", "a.", ".b", "a-b.c", "a.b c", "", "a__b.c", "dev__s.e", "_efmesh.t", "_EFMESH.t", "a_.b"] {
            assert!(ModelName::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn env_names_are_lowercase_identifiers() {
        assert!(validate_env("dev").is_ok());
        assert!(validate_env("prod_2").is_ok());
        for bad in ["Dev", "1dev", "", "a-b", "a__b", "dev_"] {
            assert!(validate_env(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
