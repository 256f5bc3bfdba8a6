//! Canonical SQL: one deterministic text per query, whatever its formatting.
//!
//! The rule comes from `DECISIONS.md` ("Canonical SQL and fingerprints"): a DuckDB body is parsed
//! with sqlparser's DuckDB dialect, normalised and serialised deterministically, so that
//! whitespace, comments, keyword case, identifier quoting, an optional `AS`, redundant
//! parentheses, `x::T` versus `CAST(x AS T)` and a trailing `;` never change the text, while any
//! change of meaning (a literal, a predicate, a projection, identifier case…) always does.
//! Identifier case is kept on purpose: DuckDB preserves it in output column names.
//!
//! # How
//!
//! 1. Parse with [`DuckDbDialect`] and require exactly one query statement.
//! 2. Normalise the typed AST with a [`VisitorMut`]:
//!    - unwrap [`Expr::Nested`] and queries in redundant parentheses (`((SELECT …))`,
//!      `(SELECT …) UNION (SELECT …)` without clauses of their own): the tree already encodes
//!      precedence and grouping, so the parentheses carry no meaning — except where sqlparser
//!      and DuckDB may group an operand otherwise (`Normalizer::matters`: an operator of the
//!      operand beside one above it that the two rank otherwise, [`risky_pair`] — `(a + 1) ^ 2`
//!      and `a + 1 ^ 2` are one sqlparser tree and two DuckDB meanings; a JSON arrow, which
//!      DuckDB reads apart, [`is_arrow`] — `url LIKE (r ->> 'p')` is not `url LIKE r ->> 'p'`),
//!      where one pair is kept, and an operand written without them is marked (two pairs, which
//!      no text keeps);
//!    - make every `::` cast a `CAST`;
//!    - lower-case function names, table-function names and unknown type names (DuckDB
//!      resolves them case-insensitively);
//!    - spell join operators one way (`JOIN` = `INNER JOIN`, `LEFT OUTER JOIN` = `LEFT JOIN`,
//!      `RIGHT OUTER JOIN` = `RIGHT JOIN`) and `FROM t SELECT a` as `SELECT a FROM t`.
//!
//!    Not normalised (a difference only costs a rebuild): `ORDER BY x` vs `ORDER BY x ASC`,
//!    synonymous type spellings (`TIMESTAMPTZ` vs `TIMESTAMP WITH TIME ZONE`), number
//!    spellings (`1.0` vs `1.00`).
//! 3. Serialise the AST with serde straight to compact JSON, leaving out every struct field that
//!    records how the text was written rather than what it means: `span` (source positions of
//!    identifiers and literals), `*_token` (the keyword tokens sqlparser attaches for
//!    diagnostics, which remember keyword case), `quote_style` (identifier quoting) and
//!    `explicit` (whether an alias was written with `AS`). Comments and whitespace never reach
//!    the AST. Field order is the AST's declaration order, so the text is deterministic for a
//!    given sqlparser version; a sqlparser upgrade that changes the AST's shape changes the
//!    text, which is what [`FINGERPRINT_VERSION`](super::fingerprint::FINGERPRINT_VERSION) is
//!    for (the frozen-fingerprint golden test catches it).
//!
//! When sqlparser cannot parse a body, [`canonicalize_with_fallback`] asks DuckDB itself
//! (`json_serialize_sql`) and keeps its JSON without `query_location` ([`normalize_duckdb_json`]);
//! so it does for a body sqlparser reads otherwise than DuckDB where no normalisation of its tree
//! can tell ([`read_otherwise`]): one holding `==` (sqlparser reads `=`), `~~~` (DuckDB's `GLOB`,
//! `~~ ~` to sqlparser), `@2` (a placeholder to sqlparser, an absolute value to DuckDB), an alias
//! `ISNULL` written without `AS` (`IS NULL` to DuckDB), or a function argument
//! `name = value` whose value an operator ranked at or below `=` ends for DuckDB
//! (`count_if(a = 1 OR b = 2)`: a comparison to DuckDB, a named argument to sqlparser). The
//! [`CanonSource`] of the result says which path was taken, for `plan --explain`.

use serde::ser::{self, Serialize, Serializer};
use serde_json::Value;
use sqlparser::ast::helpers::attached_token::AttachedToken;
use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgOperator, FunctionArguments, JoinOperator, LambdaSyntax,
    ObjectNamePart, Query, Select, SelectFlavor, SelectItem, SetExpr, Statement, TableFactor, TableWithJoins, VisitMut, Visitor, VisitorMut,
};
use sqlparser::dialect::DuckDbDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};
use std::ops::ControlFlow;

/// The version of the canonicalisation's rules beside [`FINGERPRINT_VERSION`](super::fingerprint::FINGERPRINT_VERSION):
/// a change of them that changes some texts (not every fingerprint) bumps it, so no cache keeps a
/// digest the old rules computed (`plan::canon_cache_key`, the plan memo). 2: parentheses kept
/// between operators sqlparser and DuckDB rank otherwise. 3: that weighed against every operator
/// above an operand in its context, not only its own operator; the JSON arrows, which DuckDB 1.5.5
/// reads apart (`is_arrow`); `<=>`, the regular-expression matches and `||` in classes of their
/// own; a body holding `==` read by DuckDB's parser; and declared types normalised outside their
/// quoted parts and member names only ([`normalize_type`](super::fingerprint::normalize_type): the
/// plan memo, keyed by this version too, holds fingerprints that hash them). 4: `||` above
/// arithmetic no longer keeps parentheses (`a || (n + 1)` has one meaning in both parsers), so such
/// bodies take their text of the rules 2 again. 5: more bodies that sqlparser reads otherwise than
/// DuckDB 1.5.5 where no tree can tell are read by DuckDB's parser (`read_otherwise`): one holding
/// `~~~` (DuckDB's `GLOB`, `~~ ~` to sqlparser), `@` against a number or a name (`@2 - 5`, a
/// placeholder to sqlparser, `@(2 - 5)` to DuckDB), a select item's alias `ISNULL` written
/// without `AS` (`n IS NULL` to DuckDB), or a function argument `name = value` whose value
/// holds, outside parentheses, `AND`, `OR`, a comparison, `IS …` or a JSON arrow
/// (`count_if(a = 1 OR b = 2)`: a named argument to sqlparser, `(a = 1) OR (b = 2)` to DuckDB).
/// Every other body keeps its text of the rules 4.
pub const CANON_RULES: u32 = 5;

/// Which parser produced a [`Canonical`] text.
/// Serialized (`plan --json`'s `canonicalSource`) as [`CanonSource::as_str`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum CanonSource {
    /// sqlparser's DuckDB dialect, normalised as described in the [module docs](self).
    #[serde(rename = "sqlparser")]
    SqlParser,
    /// DuckDB's `json_serialize_sql`, without `query_location` (the fallback).
    #[serde(rename = "duckdb-json")]
    DuckDbJson,
    /// The Postgres grammar (libpg_query), without locations ([`super::pg_canon`]).
    #[serde(rename = "pg-query")]
    PgQuery,
}

impl CanonSource {
    /// `sqlparser`, `duckdb-json` or `pg-query`, as shown by `plan --explain` and kept in the
    /// caches.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CanonSource::SqlParser => "sqlparser",
            CanonSource::DuckDbJson => "duckdb-json",
            CanonSource::PgQuery => "pg-query",
        }
    }

    /// The source [`CanonSource::as_str`] names; anything else is `sqlparser` (the caches'
    /// older entries carry no name).
    #[must_use]
    pub fn from_name(name: &str) -> Self {
        match name {
            "duckdb-json" => CanonSource::DuckDbJson,
            "pg-query" => CanonSource::PgQuery,
            _ => CanonSource::SqlParser,
        }
    }
}

impl std::fmt::Display for CanonSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The canonical form of one query body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Canonical {
    /// Compact JSON of the normalised AST: equal for formatting variants of one query, different
    /// for queries that mean different things. This is what the fingerprint hashes.
    pub text: String,
    /// Which parser produced `text`.
    pub source: CanonSource,
}

/// Why a body has no canonical form.
///
/// Messages follow `STYLE.md`: no trailing period, SQL keywords in backticks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// sqlparser rejected the text (tokenizer or parser error).
    #[error("cannot parse SQL{}: {message}", at(*.line, *.column))]
    Parse {
        /// sqlparser's message, without its `at Line: …, Column: …` suffix.
        message: String,
        /// 1-based line of the offending token in the body, when sqlparser reports it.
        line: Option<u64>,
        /// 1-based column of the offending token in the body, when sqlparser reports it.
        column: Option<u64>,
    },
    /// The text parsed, but it is not exactly one query (`SELECT`, `WITH`, `VALUES` or a set
    /// operation of them).
    #[error("expected one query (`SELECT`, `WITH`, `VALUES` or a set operation), found {found}")]
    NotAQuery {
        /// What was found instead, e.g. "a `DELETE FROM` statement", "2 statements", "no statement".
        found: String,
    },
    /// The Postgres grammar (libpg_query) rejected the text.
    #[error("Postgres cannot parse SQL{}: {message}", at(*.line, None))]
    Postgres {
        /// libpg_query's message.
        message: String,
        /// 1-based line of the body where the parser stopped, when known.
        line: Option<u64>,
    },
    /// DuckDB's own parser rejected the text (the fallback's `"error": true`).
    #[error("DuckDB cannot parse SQL{}: {message}", at(*.line, None))]
    DuckDb {
        /// DuckDB's `error_message`.
        message: String,
        /// 1-based line of the body at DuckDB's `position` (a character index), when it gives one
        /// ([`canonicalize_with_fallback`] knows the text).
        line: Option<u64>,
    },
    /// A `PIVOT` without an `IN (…)` list: DuckDB reads the values to pivot on from the data when
    /// the query runs, turning the query into several statements, so it has no parse tree to
    /// compare or analyse (DuckDB's `json_serialize_sql` says only "Only SELECT statements can be
    /// serialized to json!").
    #[error(
        "a dynamic `PIVOT` (one without an `IN (…)` list){} cannot be analysed: DuckDB reads the pivoted values from the data when the query runs, so the query has no parse tree to fingerprint\n  hint: list the pivoted values, e.g. `PIVOT … ON k IN ('a', 'b') USING …`",
        at(*.line, None)
    )]
    DynamicPivot {
        /// 1-based line of the body where the first `PIVOT` is, when found.
        line: Option<u64>,
    },
    /// sqlparser failed and the fallback could not be asked (e.g. the engine call failed).
    #[error("{parser}; the DuckDB fallback failed too: {fallback}")]
    Fallback {
        /// The sqlparser error, rendered.
        parser: String,
        /// The fallback's error.
        fallback: String,
    },
    /// The fallback returned text that is not the JSON `json_serialize_sql` produces.
    #[error("unexpected `json_serialize_sql` output: {reason}")]
    BadDuckDbJson {
        /// What is wrong with it.
        reason: String,
    },
}

impl SqlError {
    /// 1-based line of the error in the body, when known. A body that is not one query
    /// ([`SqlError::NotAQuery`]: `EXPLAIN SELECT …`, `DELETE FROM …`) is wrong from its first
    /// line on: the body's first line (a `.sql` model's body starts at its first line after the
    /// header that is neither blank nor a `--` comment; a `/* … */` comment before the statement
    /// is that line), so `models/m.sql:5`, not the `-- name:` line.
    #[must_use]
    pub fn line(&self) -> Option<u64> {
        match self {
            SqlError::Parse { line, .. } | SqlError::DuckDb { line, .. } | SqlError::Postgres { line, .. } | SqlError::DynamicPivot { line } => *line,
            SqlError::NotAQuery { .. } => Some(1),
            _ => None,
        }
    }

    /// 1-based column of the error in the body, when known.
    #[must_use]
    pub fn column(&self) -> Option<u64> {
        match self {
            SqlError::Parse { column, .. } => *column,
            _ => None,
        }
    }

    pub(crate) fn from_parser(e: ParserError, sql: &str) -> Self {
        let raw = match e {
            ParserError::TokenizerError(s) | ParserError::ParserError(s) => s,
            ParserError::RecursionLimitExceeded => "recursion limit exceeded".to_string(),
        };
        let (message, mut line, mut column) = split_location(&raw);
        if line.is_none() && message.ends_with("found: EOF") {
            // sqlparser gives no location for the end of input: point just past the last token.
            let (l, c) = end_of_text(sql);
            (line, column) = (Some(l), Some(c));
        }
        SqlError::Parse { message: trim_period(message).to_string(), line, column }
    }
}

/// ` at line L, column C` or nothing.
fn at(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

fn trim_period(s: &str) -> &str {
    s.trim_end().strip_suffix('.').unwrap_or(s.trim_end())
}

/// 1-based (line, column) just after the last non-whitespace character of `sql`.
fn end_of_text(sql: &str) -> (u64, u64) {
    let text = sql.trim_end();
    let line = text.matches('\n').count() as u64 + 1;
    let last = text.rsplit('\n').next().unwrap_or("");
    (line, last.chars().count() as u64 + 1)
}

/// Splits sqlparser's `"<message> at Line: L, Column: C"` into its parts.
fn split_location(raw: &str) -> (&str, Option<u64>, Option<u64>) {
    if let Some(i) = raw.rfind(" at Line: ") {
        let tail = &raw[i + " at Line: ".len()..];
        if let Some((l, c)) = tail.split_once(", Column: ")
            && let (Ok(l), Ok(c)) = (l.trim().parse(), c.trim().parse())
        {
            return (&raw[..i], Some(l), Some(c));
        }
    }
    (raw, None, None)
}

/// The canonical form of a DuckDB query body, via sqlparser.
///
/// `sql` must hold exactly one query: `SELECT`, `WITH … SELECT`, `VALUES`, or a set operation
/// (`UNION`, `EXCEPT`, `INTERSECT`) of them; one trailing `;` is fine. Bounds rendered by
/// [`CanonicalResolver`](crate::core::fragment::CanonicalResolver) (`$start`, `$end`) parse as
/// placeholders. See the [module docs](self) for what is normalised.
///
/// Cost (release build): about 15 µs for a one-line body and 80 µs for a 15-line CTE with a
/// join and a window, nearly all of it sqlparser's parse; the normalisation and serialisation
/// add under 20 µs. The function is pure, so a planner may run it on many threads.
///
/// # Errors
/// [`SqlError::Parse`] (with line and column when sqlparser gives them) when the text does not
/// parse, or when sqlparser reads it otherwise than DuckDB where no tree can tell (the operator
/// `==`, `~~~`, `@2`, an alias `ISNULL` without `AS`, a named argument `a = 1 OR b`:
/// `read_otherwise`; such a body is DuckDB's parser's, [`canonicalize_with_fallback`]);
/// [`SqlError::NotAQuery`] when it is empty, holds several statements, or a statement that is not
/// a query.
///
/// # Example
/// ```
/// use efmesh::sql::canon::canonicalize;
/// let a = canonicalize("SELECT \"id\", amount::DOUBLE AS amt FROM raw.orders o -- note")?;
/// let b = canonicalize("select id, cast(amount as double) amt\nfrom raw.orders as o;")?;
/// assert_eq!(a, b);
/// assert!(canonicalize("DELETE FROM raw.orders").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn canonicalize(sql: &str) -> Result<Canonical, SqlError> {
    let query = parse_canonical(sql)?;
    Ok(canonical_of(query))
}

/// The [`body_digest`](super::fingerprint::body_digest) of [`canonicalize`]'s text, computed
/// without keeping the text: the canonical JSON is hashed as it is written (through a buffer),
/// which spares the text's allocation, its growth and its UTF-8 check. Equal, byte for byte, to
/// `body_digest(&canonicalize(sql)?.text)` (tested on every example project's models).
///
/// # Errors
/// As [`canonicalize`].
pub fn canonical_digest(sql: &str) -> Result<String, SqlError> {
    let mut query = parse_canonical(sql)?;
    let _ = query.visit(&mut Normalizer::default());
    let mut out = HashBuffer { hasher: blake3::Hasher::new(), buf: Vec::with_capacity(HashBuffer::SIZE) };
    // As in `canonical_of`: serialising an AST cannot fail.
    let _ = Filtered(&*query).serialize(&mut serde_json::Serializer::new(&mut out));
    out.hasher.update(&out.buf);
    Ok(out.hasher.finalize().to_hex().to_string())
}

/// A writer that feeds blake3 in blocks of [`HashBuffer::SIZE`] bytes (blake3's digest does not
/// depend on how its input is split; large updates let it hash several chunks at once).
struct HashBuffer {
    hasher: blake3::Hasher,
    buf: Vec<u8>,
}

impl HashBuffer {
    const SIZE: usize = 16 * 1024;
}

impl std::io::Write for HashBuffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > Self::SIZE {
            self.hasher.update(&self.buf);
            self.buf.clear();
        }
        if data.len() >= Self::SIZE {
            self.hasher.update(data);
        } else {
            self.buf.extend_from_slice(data);
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// sqlparser's own rendering of the query in `sql` (one line, keywords upper-case, parentheses
/// and quoting kept, comments dropped), *before* normalisation.
///
/// A formatting-only rewrite: `canonicalize(&reprint(sql)?)` equals `canonicalize(sql)`, which
/// the golden tests check for every body (the round-trip rule of `STYLE.md`).
///
/// # Errors
/// As [`canonicalize`].
///
/// # Example
/// ```
/// use efmesh::sql::canon::{canonicalize, reprint};
/// let sql = "select a -- the key\nfrom s.t;";
/// assert_eq!(reprint(sql)?, "SELECT a FROM s.t");
/// assert_eq!(canonicalize(&reprint(sql)?)?, canonicalize(sql)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn reprint(sql: &str) -> Result<String, SqlError> {
    Ok(parse_query(sql)?.to_string())
}

/// Like [`canonicalize`], but when sqlparser cannot parse `sql`, asks DuckDB.
///
/// `fallback(sql)` must return the text of DuckDB's `SELECT json_serialize_sql(<sql>)` (pass
/// `sql` as a bound parameter), or an error message when the engine could not be asked. Its
/// output goes through [`normalize_duckdb_json`] and the result's source is
/// [`CanonSource::DuckDbJson`]. The fallback is only used for parse failures (a body sqlparser
/// reads otherwise than DuckDB where no tree can tell counts as one, `read_otherwise`: `==`,
/// which sqlparser reads as `=`, `~~~`, `@2`, an alias `ISNULL` without `AS`, a named argument
/// `a = 1 OR b`): a body that sqlparser reads as a non-query statement is an error without asking
/// DuckDB.
///
/// # Errors
/// [`SqlError::NotAQuery`] as for [`canonicalize`]; [`SqlError::Fallback`] when `fallback`
/// fails; [`SqlError::DuckDb`] when DuckDB rejects the text; [`SqlError::BadDuckDbJson`] when
/// its output is not the expected JSON.
///
/// # Example
/// ```
/// use efmesh::sql::canon::{canonicalize_with_fallback, CanonSource};
/// // A stand-in for DuckDB, for the example.
/// let duckdb = |_: &str| -> Result<String, String> {
///     Ok(r#"{"error":false,"statements":[{"node":{"type":"SELECT_NODE","query_location":0}}]}"#.into())
/// };
/// let c = canonicalize_with_fallback("SELECT 1 +", &duckdb)?;
/// assert_eq!(c.source, CanonSource::DuckDbJson);
/// assert!(!c.text.contains("query_location"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn canonicalize_with_fallback(sql: &str, fallback: &dyn Fn(&str) -> Result<String, String>) -> Result<Canonical, SqlError> {
    match parse_canonical(sql) {
        Ok(query) => Ok(canonical_of(query)),
        Err(parser @ SqlError::Parse { .. }) => {
            let json = fallback(sql).map_err(|f| SqlError::Fallback { parser: parser.to_string(), fallback: trim_period(&f).to_string() })?;
            match normalize_duckdb_json(&json) {
                Ok(text) => Ok(Canonical { text, source: CanonSource::DuckDbJson }),
                // DuckDB serialises no dynamic `PIVOT`: it is several statements to it.
                Err(SqlError::DuckDb { message, .. }) if message.starts_with("Only SELECT statements can be serialized") && pivot_line(sql).is_some() => {
                    Err(SqlError::DynamicPivot { line: pivot_line(sql) })
                }
                Err(SqlError::DuckDb { message, .. }) => Err(SqlError::DuckDb { message, line: duckdb_error_line(&json, sql) }),
                Err(other) => Err(other),
            }
        }
        Err(other) => Err(other),
    }
}

/// The 1-based line of `sql` where the keyword `PIVOT` first stands as a word of its own (not
/// `UNPIVOT`, not part of a longer name), case-insensitively; `None` when it never does.
fn pivot_line(sql: &str) -> Option<u64> {
    let lower = sql.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let at = lower.match_indices("pivot").map(|(i, _)| i).find(|&i| {
        let before = i.checked_sub(1).and_then(|j| bytes.get(j)).is_some_and(|&b| word(b));
        let after = bytes.get(i + "pivot".len()).is_some_and(|&b| word(b));
        !before && !after
    })?;
    u64::try_from(lower[..at].matches('\n').count() + 1).ok()
}

/// The 1-based line of `sql` holding the character at an error document's `position` (DuckDB
/// gives it as text, counting characters); `None` without one.
pub(crate) fn duckdb_error_line(json: &str, sql: &str) -> Option<u64> {
    let doc: Value = serde_json::from_str(json).ok()?;
    let position = doc.get("position")?;
    let offset: usize = match position {
        Value::String(s) => s.parse().ok()?,
        other => usize::try_from(other.as_u64()?).ok()?,
    };
    // DuckDB counts characters, not bytes.
    let byte = sql.char_indices().nth(offset).map_or(sql.len(), |(b, _)| b);
    u64::try_from(sql[..byte].matches('\n').count() + 1).ok()
}

/// Normalises the output of DuckDB's `json_serialize_sql`: rejects an error document, requires
/// exactly one statement, removes every `query_location` key (byte offsets into the text, which
/// change with whitespace and comments) at any depth, and prints compact JSON in DuckDB's key
/// order.
///
/// # Errors
/// [`SqlError::DuckDb`] with DuckDB's `error_message` when the document says `"error": true`;
/// [`SqlError::NotAQuery`] when it holds no statement or several; [`SqlError::BadDuckDbJson`]
/// when the text is not JSON, not an object, or has no `statements` array.
///
/// # Example
/// ```
/// use efmesh::sql::canon::normalize_duckdb_json;
/// let raw = r#"{"error": false, "statements": [{"node": {"type": "SELECT_NODE", "query_location": 18446744073709551615}}]}"#;
/// assert_eq!(
///     normalize_duckdb_json(raw)?,
///     r#"{"error":false,"statements":[{"node":{"type":"SELECT_NODE"}}]}"#
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn normalize_duckdb_json(json: &str) -> Result<String, SqlError> {
    let bad = |reason: String| SqlError::BadDuckDbJson { reason };
    let mut doc: Value = serde_json::from_str(json).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Some(obj) = doc.as_object() else {
        return Err(bad("expected a JSON object".into()));
    };
    if obj.get("error").and_then(Value::as_bool) == Some(true) {
        let message = obj.get("error_message").and_then(Value::as_str).unwrap_or("unknown error");
        return Err(SqlError::DuckDb { message: trim_period(message).to_string(), line: None });
    }
    match obj.get("statements").and_then(Value::as_array).map(Vec::len) {
        Some(1) => {}
        Some(0) => {
            return Err(SqlError::NotAQuery { found: "no statement".into() });
        }
        Some(n) => {
            return Err(SqlError::NotAQuery { found: format!("{n} statements") });
        }
        None => return Err(bad("no `statements` array".into())),
    }
    strip_keys(&mut doc, &|k| k == "query_location");
    Ok(doc.to_string())
}

/// Parses `sql` (sqlparser's DuckDB dialect) and returns its single query.
pub(crate) fn parse_query(sql: &str) -> Result<Box<Query>, SqlError> {
    parse_query_in(&DuckDbDialect {}, sql)
}

/// [`parse_query`] for a canonical form: a body sqlparser reads otherwise than DuckDB in a way
/// no normalisation of its tree can tell ([`read_otherwise`]: the operator `==`, `~~~`, `@2`, an
/// alias `ISNULL` without `AS`, a named argument whose value an operator of it ends for DuckDB)
/// is refused as a parse error, so that DuckDB's parser reads it ([`canonicalize_with_fallback`]).
fn parse_canonical(sql: &str) -> Result<Box<Query>, SqlError> {
    let query = parse_query(sql)?;
    match read_otherwise(sql, &query) {
        Some(Misread { message, line, column }) => Err(SqlError::Parse { message, line: Some(line), column: Some(column) }),
        None => Ok(query),
    }
}

/// Where, and why, sqlparser's tree of a body is not what DuckDB reads ([`read_otherwise`]).
struct Misread {
    /// Why the body is left to DuckDB's parser (the [`SqlError::Parse`] message).
    message: String,
    /// 1-based line of what sqlparser misreads.
    line: u64,
    /// 1-based column of what sqlparser misreads.
    column: u64,
}

impl Misread {
    fn at(location: Location, message: String) -> Self {
        Misread { message, line: location.line, column: location.column }
    }
}

/// The first place of `sql` (parsed as `query`) where sqlparser's tree says something else than
/// DuckDB 1.5.5 reads there, whatever the normalisation makes of the tree, so that no sqlparser
/// tree of it is a faithful canonical form:
/// - the operator `==`, which sqlparser reads as `=`, where DuckDB ranks it with the other
///   operators, above the comparisons (`a = b == c` is `a = (b == c)`, `a == b = c` is
///   `(a == b) = c`, `true >= true == false` is `true >= (true == false)`);
/// - `~~~` (DuckDB's `GLOB`), which sqlparser reads as `~~` and a prefix `~` (`s ~~ ~p`);
/// - `@` against a number or a name (`@2`): a placeholder to sqlparser, so that `(@2) - 5` and
///   `@2 - 5` are one tree, where DuckDB reads a prefix `@` (the absolute value) whose operand
///   reaches up to an operator ranked below it (`@2 - 5` is `@(2 - 5)`, 3; `(@2) - 5` is -3);
/// - a select item's alias `ISNULL` written without `AS` or quotes ([`POSTFIX_OPERATOR_WORDS`]):
///   sqlparser reads the alias, DuckDB the postfix operator (`n ISNULL` is `n IS NULL`), where
///   `n AS ISNULL` and `n "ISNULL"` are aliases to both;
/// - a function argument `name = value` whose value holds an operator that ends it for DuckDB
///   ([`splits_comparison`]): a named argument to sqlparser, so that `count_if(a = 1 OR b = 2)`
///   and `count_if(a = (1 OR b = 2))` are one tree, where DuckDB reads a comparison
///   (`(a = 1) OR (b = 2)`; a table function's `header = true` in `FROM` is a named parameter
///   to DuckDB too, and keeps sqlparser's tree, its value being one operand).
///
/// The operators are found among the tokens, and only when the text holds `==`, `~~~` or `@`;
/// the rest by one walk of the tree, which tokenizes the text only for an alias it has to look
/// at.
fn read_otherwise(sql: &str, query: &Query) -> Option<Misread> {
    if let Some(misread) = misread_token(sql) {
        return Some(misread);
    }
    let mut tree = TreeMisreads { sql, tokens: None };
    match sqlparser::ast::Visit::visit(query, &mut tree) {
        ControlFlow::Break(misread) => Some(misread),
        ControlFlow::Continue(()) => None,
    }
}

/// The first operator of `sql` (not in a string, a quoted name or a comment) that sqlparser
/// reads otherwise than DuckDB ([`read_otherwise`]): `==`, `~~~`, or `@` against a number or a
/// name.
fn misread_token(sql: &str) -> Option<Misread> {
    if !(sql.contains("==") || sql.contains("~~~") || sql.contains('@')) {
        return None;
    }
    let tokens = Tokenizer::new(&DuckDbDialect {}, sql).tokenize_with_location().ok()?;
    tokens.iter().enumerate().find_map(|(i, t)| {
        // Whitespace and comments are tokens: the next one is written against this one.
        let message = match (&t.token, tokens.get(i + 1).map(|next| &next.token)) {
            (Token::DoubleEq, _) => "`==` is left to DuckDB's parser (sqlparser reads it as `=`, which DuckDB ranks below it)".to_string(),
            (Token::DoubleTilde, Some(Token::Tilde)) => {
                "`~~~` is left to DuckDB's parser (DuckDB's `GLOB`, which sqlparser reads as `~~` and a prefix `~`)".to_string()
            }
            (Token::AtSign, Some(Token::Number(word, _))) => at_sign(word),
            (Token::AtSign, Some(Token::Word(word))) if word.quote_style.is_none() => at_sign(&word.value),
            _ => return None,
        };
        Some(Misread::at(t.span.start, message))
    })
}

/// The message of `@<word>` ([`misread_token`]).
fn at_sign(word: &str) -> String {
    format!(
        "`@{word}` is left to DuckDB's parser (sqlparser reads a placeholder, DuckDB the absolute value of what follows up to an operator ranked below it: `@2 - 5` is `@(2 - 5)`)"
    )
}

/// The words sqlparser takes as a select item's alias written without `AS` where DuckDB reads a
/// postfix operator: `x ISNULL` is `x IS NULL` (lower case). (sqlparser's DuckDB dialect reads
/// `x NOTNULL` as DuckDB does, `x IS NOT NULL`. DuckDB takes no keyword as such an alias:
/// `SELECT x day` is its syntax error, which sqlparser reads as `x AS day`; that text fails when
/// built, so nothing is served from it, and it is left to sqlparser.)
const POSTFIX_OPERATOR_WORDS: &[&str] = &["isnull"];

/// The misreads of [`read_otherwise`] that a parsed body's tree shows.
struct TreeMisreads<'a> {
    /// The body's text.
    sql: &'a str,
    /// Its tokens, once an alias needs them ([`TreeMisreads::written_with_as`]).
    tokens: Option<Vec<TokenWithSpan>>,
}

impl TreeMisreads<'_> {
    /// Whether `alias` follows the keyword `AS` (whitespace and comments between). An alias the
    /// tokens do not show counts as written with it: the tree is then left as it is.
    fn written_with_as(&mut self, alias: &sqlparser::ast::Ident) -> bool {
        let sql = self.sql;
        let tokens = self.tokens.get_or_insert_with(|| Tokenizer::new(&DuckDbDialect {}, sql).tokenize_with_location().unwrap_or_default());
        let Some(at) = tokens.iter().position(|t| t.span.start == alias.span.start) else {
            return true;
        };
        tokens[..at].iter().rfind(|t| !matches!(t.token, Token::Whitespace(_))).is_some_and(|t| matches!(&t.token, Token::Word(w) if w.keyword == Keyword::AS))
    }
}

impl Visitor for TreeMisreads<'_> {
    type Break = Misread;

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<Misread> {
        for item in &select.projection {
            if let SelectItem::ExprWithAlias { alias, .. } = item
                && alias.quote_style.is_none()
                && POSTFIX_OPERATOR_WORDS.iter().any(|w| alias.value.eq_ignore_ascii_case(w))
                && !self.written_with_as(alias)
            {
                let message = format!("`{}` without `AS` is left to DuckDB's parser (sqlparser reads an alias, DuckDB the postfix `IS NULL`)", alias.value);
                return ControlFlow::Break(Misread::at(alias.span.start, message));
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Misread> {
        match expr {
            Expr::Function(Function { args: FunctionArguments::List(list), .. }) => named_comparison(&list.args),
            _ => ControlFlow::Continue(()),
        }
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<Misread> {
        match factor {
            TableFactor::Table { args: Some(args), .. } => named_comparison(&args.args),
            TableFactor::Function { args, .. } => named_comparison(args),
            _ => ControlFlow::Continue(()),
        }
    }
}

/// The first argument `name = value` of `args` that DuckDB reads as a comparison ending before
/// `value` does ([`splits_comparison`]), as a [`Misread`] at its name. (sqlparser's DuckDB
/// dialect names an argument by a name only, never by an expression: `FunctionArg::ExprNamed`
/// does not occur.)
fn named_comparison(args: &[FunctionArg]) -> ControlFlow<Misread> {
    for arg in args {
        if let FunctionArg::Named { name, arg: FunctionArgExpr::Expr(value), operator: FunctionArgOperator::Equals } = arg
            && splits_comparison(value)
        {
            let message = format!(
                "`{} = …` is left to DuckDB's parser (sqlparser reads a named argument, DuckDB a comparison, which an operator of the value ends)",
                name.value
            );
            return ControlFlow::Break(Misread::at(name.span.start, message));
        }
    }
    ControlFlow::Continue(())
}

/// Whether DuckDB, reading `name = value` as a comparison, ends it before `value` ends: `value`
/// holds, outside parentheses, an operator DuckDB ranks at or below `=` (`AND`, `OR`, `XOR`, a
/// comparison, `IS …`, `= ANY (…)`), or a JSON arrow or arrow lambda, which takes everything
/// before it as its left operand ([`is_arrow`]): `count_if(a = 1 OR b = 2)` is
/// `count_if((a = 1) OR (b = 2))`. DuckDB ranks every other operator above `=` (`LIKE`,
/// `BETWEEN`, `IN`, arithmetic, `||`, the matches: `a = b LIKE c` is `a = (b LIKE c)`), and reads
/// `a = NOT b` as `a = (NOT b)`: there the comparison takes the whole value, as sqlparser's
/// named argument does.
fn splits_comparison(value: &Expr) -> bool {
    use sqlparser::ast::BinaryOperator as B;
    let low = match value {
        Expr::BinaryOp { op, .. } => matches!(op, B::And | B::Or | B::Xor | B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq) || is_arrow(value),
        Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsNotTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::AnyOp { .. }
        | Expr::AllOp { .. } => true,
        // An arrow lambda.
        _ => arrow_kind(value) != ArrowKind::Absent,
    };
    low || operand_refs(value).into_iter().any(|operand| !matches!(operand, Expr::Nested(_)) && splits_comparison(operand))
}

/// [`parse_query`] in sqlparser's `dialect`.
pub(crate) fn parse_query_in(dialect: &dyn sqlparser::dialect::Dialect, sql: &str) -> Result<Box<Query>, SqlError> {
    let statements = Parser::parse_sql(dialect, sql).map_err(|e| SqlError::from_parser(e, sql))?;
    let n = statements.len();
    let mut it = statements.into_iter();
    match (it.next(), n) {
        (None, _) => Err(SqlError::NotAQuery { found: "no statement".into() }),
        (Some(Statement::Query(q)), 1) => Ok(q),
        (Some(other), 1) => Err(SqlError::NotAQuery { found: describe(&other) }),
        (Some(_), n) => Err(SqlError::NotAQuery { found: format!("{n} statements") }),
    }
}

/// "a `DELETE FROM` statement": the leading keywords of the statement as sqlparser prints it.
fn describe(statement: &Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).take_while(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_')).collect();
    if words.is_empty() {
        "a statement that is not a query".into()
    } else {
        let article = if words[0].starts_with(['A', 'E', 'I', 'O', 'U']) { "an" } else { "a" };
        format!("{article} `{}` statement", words.join(" "))
    }
}

fn canonical_of(mut query: Box<Query>) -> Canonical {
    let _ = query.visit(&mut Normalizer::default());
    let mut out = Vec::with_capacity(4096);
    // Serialising an AST into memory cannot fail: it has no maps with non-string keys and no
    // fallible custom serialisers. Should it ever, the partial text is still deterministic.
    let _ = Filtered(&*query).serialize(&mut serde_json::Serializer::new(&mut out));
    // serde_json writes valid UTF-8.
    let text = String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Canonical { text, source: CanonSource::SqlParser }
}

/// Keys that record how the text was written rather than what it means:
/// - `span`: source positions of identifiers and literals;
/// - `*_token`: the keyword tokens sqlparser attaches for diagnostics (with their case);
/// - `quote_style`: whether an identifier was quoted;
/// - `explicit`: whether an alias was introduced with `AS` (the only two `explicit` fields in
///   sqlparser 0.64, `TableAlias` and `TableAliasWithoutColumns`, both mean exactly that).
fn is_spelling_key(k: &str) -> bool {
    matches!(k, "span" | "quote_style" | "explicit") || k.ends_with("_token")
}

/// Removes, at every depth, the object keys for which `drop` holds (keeping the others' order).
fn strip_keys(v: &mut Value, drop: &dyn Fn(&str) -> bool) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !drop(k));
            for child in map.values_mut() {
                strip_keys(child, drop);
            }
        }
        Value::Array(items) => {
            for child in items {
                strip_keys(child, drop);
            }
        }
        _ => {}
    }
}

/// Serialises the wrapped value through [`Filter`], which leaves out every struct field named by
/// [`is_spelling_key`]. Writing straight to JSON text this way is ~10× faster than building a
/// `serde_json::Value` and pruning it, which matters at 2000 bodies per cold plan.
struct Filtered<'a, T: ?Sized>(&'a T);

impl<T: Serialize + ?Sized> Serialize for Filtered<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Filter(s))
    }
}

/// A serializer (and its compound states) delegating to `S`, with every child wrapped in
/// [`Filtered`] and spelling fields skipped.
struct Filter<S>(S);

macro_rules! delegate_primitives {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Result<S::Ok, S::Error> { self.0.$method(v) })*
    };
}

impl<S: Serializer> Serializer for Filter<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Filter<S::SerializeSeq>;
    type SerializeTuple = Filter<S::SerializeTuple>;
    type SerializeTupleStruct = Filter<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Filter<S::SerializeTupleVariant>;
    type SerializeMap = Filter<S::SerializeMap>;
    type SerializeStruct = Filter<S::SerializeStruct>;
    type SerializeStructVariant = Filter<S::SerializeStructVariant>;

    delegate_primitives!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
    );

    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Filtered(v))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(self, name: &'static str, index: u32, variant: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Filtered(v))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(self, name: &'static str, index: u32, variant: &'static str, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_variant(name, index, variant, &Filtered(v))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Filter)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Filter)
    }
    fn serialize_tuple_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Filter)
    }
    fn serialize_tuple_variant(self, name: &'static str, index: u32, variant: &'static str, len: usize) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0.serialize_tuple_variant(name, index, variant, len).map(Filter)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(Filter)
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Filter)
    }
    fn serialize_struct_variant(self, name: &'static str, index: u32, variant: &'static str, len: usize) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0.serialize_struct_variant(name, index, variant, len).map(Filter)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! filter_elements {
    ($($trait:ident :: $method:ident),* $(,)?) => {
        $(impl<S: ser::$trait> ser::$trait for Filter<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
                self.0.$method(&Filtered(v))
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        })*
    };
}

filter_elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl<S: ser::SerializeMap> ser::SerializeMap for Filter<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Filtered(k))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Filtered(v))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

macro_rules! filter_fields {
    ($($trait:ident),* $(,)?) => {
        $(impl<S: ser::$trait> ser::$trait for Filter<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> Result<(), S::Error> {
                if is_spelling_key(key) {
                    self.0.skip_field(key)
                } else {
                    self.0.serialize_field(key, &Filtered(v))
                }
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        })*
    };
}

filter_fields!(SerializeStruct, SerializeStructVariant);

/// The typed part of the normalisation (see the module docs).
#[derive(Default)]
struct Normalizer {
    /// Operand slots (by address) as their operator left them ([`Slot`]), read and forgotten when
    /// the visit reaches them (an operator is visited before its operands).
    slots: std::collections::HashMap<usize, Slot>,
}

/// What an operator decided about one of its operands.
enum Slot {
    /// The operand's grouping is one sqlparser and DuckDB may read otherwise ([`Normalizer::matters`]):
    /// `Parens` where the text has parentheses (one pair is kept), `Implicit` where it has none
    /// (the operand is wrapped in two, a marker no text spells, so neither form is the tree an
    /// efmesh without the rule stored for the other).
    Keep(Keep),
    /// The operand's parentheses, if any, are formatting: it is read in its operator's context.
    Within(Context),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Parens,
    Implicit,
}

/// Where an operator stands in its delimited context — a select item, a function argument, a
/// `WHERE` or `WHEN` condition, the inside of parentheses: what is above it there.
#[derive(Clone)]
struct Context {
    /// Its text starts where the context's does (it is reached from the context's top through
    /// first operands only: `a` in `a = b`, not in `NOT a` nor in `b = a`).
    leading: bool,
    /// Classes of the operators above it ([`OpClass::bit`]).
    above: u16,
    /// A JSON arrow above it.
    arrow_above: bool,
    /// The operator of the run of operators just above it that each hold it in their first
    /// operand (`||` for `a || b` in `a || b || c`), and the classes above that run: a chain of one
    /// operator from the left reads alike in both parsers.
    run: Option<(BinaryOperator, u16)>,
}

impl Context {
    /// The context's top.
    fn root() -> Self {
        Context { leading: true, above: 0, arrow_above: false, run: None }
    }

    /// The context of `op`'s operand `i` (`self` being `op`'s).
    fn child(&self, op: &Expr, i: usize) -> Self {
        let run = match op {
            Expr::BinaryOp { op: o, .. } if i == 0 => match &self.run {
                Some((r, before)) if r == o => Some((r.clone(), *before)),
                _ => Some((o.clone(), self.above)),
            },
            _ => None,
        };
        Context {
            leading: self.leading && i == 0 && leads(op),
            above: self.above | op_class(op).map_or(0, OpClass::bit),
            arrow_above: self.arrow_above || is_arrow(op),
            run,
        }
    }
}

/// Operator classes by how the two parsers rank them: DuckDB has Postgres's levels (comparisons
/// < `LIKE`/`BETWEEN`/`IN` < every other operator < `+ -` < `* /` < `^`); sqlparser puts `LIKE`
/// below the comparisons and `BETWEEN`/`IN` at their level, spreads the other operators over
/// several levels (`&` above `^` above `|`; `||` with `*`; the regular-expression matches and
/// `<=>` with the comparisons), ranks `^` below `+`, and binds a prefix `~` tighter than `+`.
/// DuckDB 1.5.5 ranks the JSON arrows apart ([`is_arrow`]), and reads `==` above `=` where
/// sqlparser reads one operator (a body holding `==` is read by DuckDB's parser,
/// [`read_otherwise`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpClass {
    /// `= <> < > <= >=`.
    Comparison,
    /// `LIKE`, `ILIKE`, `SIMILAR TO`, `GLOB`, `BETWEEN`, `IN`.
    Predicate,
    /// `<=>` and the regular-expression and `~~` matches: another operator for DuckDB, a
    /// comparison for sqlparser.
    Loose,
    /// `||`: another operator for DuckDB, ranked with `*` by sqlparser.
    Concat,
    /// Every other binary operator: bitwise, shifts, JSON arrows, `@>`…
    Other,
    /// `+ - * / // %`.
    Arithmetic,
    /// `^`.
    Power,
    /// Unary `-`/`+`.
    Sign,
    /// Another prefix operator (`~`, `@`, `|/`…).
    Prefix,
}

impl OpClass {
    const ALL: [OpClass; 9] = [
        OpClass::Comparison,
        OpClass::Predicate,
        OpClass::Loose,
        OpClass::Concat,
        OpClass::Other,
        OpClass::Arithmetic,
        OpClass::Power,
        OpClass::Sign,
        OpClass::Prefix,
    ];

    /// The class's bit in a set of classes (`ALL` is in declaration order).
    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// Per class (by its place in [`OpClass::ALL`]), the classes it is a [`risky_pair`] with.
static RISKY_WITH: std::sync::LazyLock<[u16; 9]> =
    std::sync::LazyLock::new(|| OpClass::ALL.map(|a| OpClass::ALL.iter().filter(|b| risky_pair(a, **b)).fold(0, |set, b| set | b.bit())));

/// Whether an operator of a class in `a` above one of a class in `b` is a [`risky_pair`].
fn risky_sets(a: u16, b: u16) -> bool {
    a != 0 && b != 0 && OpClass::ALL.iter().any(|c| (a & c.bit()) != 0 && (RISKY_WITH[*c as usize] & b) != 0)
}

fn op_class(e: &Expr) -> Option<OpClass> {
    use sqlparser::ast::{BinaryOperator as B, UnaryOperator as U};
    Some(match e {
        Expr::BinaryOp { op, .. } => match op {
            B::And | B::Or | B::Xor => return None,
            B::Spaceship
            | B::PGRegexMatch
            | B::PGRegexIMatch
            | B::PGRegexNotMatch
            | B::PGRegexNotIMatch
            | B::PGLikeMatch
            | B::PGILikeMatch
            | B::PGNotLikeMatch
            | B::PGNotILikeMatch => OpClass::Loose,
            B::StringConcat => OpClass::Concat,
            B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => OpClass::Comparison,
            B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo | B::DuckIntegerDivide | B::MyIntegerDivide => OpClass::Arithmetic,
            B::PGExp | B::BitwiseXor => OpClass::Power,
            B::Glob | B::Regexp | B::Match => OpClass::Predicate,
            _ => OpClass::Other,
        },
        Expr::UnaryOp { op, .. } => match op {
            U::Not => return None,
            U::Minus | U::Plus => OpClass::Sign,
            _ => OpClass::Prefix,
        },
        Expr::Like { .. } | Expr::ILike { .. } | Expr::SimilarTo { .. } | Expr::RLike { .. } | Expr::Between { .. } | Expr::In { .. } => OpClass::Predicate,
        _ => return None,
    })
}

/// Whether sqlparser may group an operator of class `a` and one of class `b` in an operand under
/// it otherwise than DuckDB does ([`OpClass`]): then `(a + 1) ^ 2` and `a + 1 ^ 2` are one
/// sqlparser tree and two DuckDB meanings, so the canonical tree records which the text wrote.
/// Every pair is so both ways but `||` and arithmetic: sqlparser ranks `||` with `*`, DuckDB below
/// `+`, so only arithmetic above `||` is ambiguous (`(a || b) + c` vs `a || b + c`); `||` above
/// arithmetic is one meaning in both, since sqlparser needs the parentheses of `a || (n + 1)` and
/// reads `n * 2 || a` as DuckDB does. Every pair of the rules before (`CANON_RULES` 2, when `<=>`
/// was a comparison and `||` and the matches other operators) is still one.
fn risky_pair(a: OpClass, b: OpClass) -> bool {
    use OpClass::*;
    let pair = |x: OpClass, y: OpClass| (a == x && b == y) || (a == y && b == x);
    let other = |c: OpClass| matches!(c, Other | Loose | Concat);
    (other(a) && other(b))
        || (other(a) && matches!(b, Power | Prefix))
        || (other(b) && matches!(a, Power | Prefix))
        || pair(Power, Arithmetic)
        || pair(Power, Sign)
        || pair(Power, Prefix)
        || pair(Prefix, Arithmetic)
        || pair(Predicate, Comparison)
        || pair(Predicate, Predicate)
        || pair(Loose, Comparison)
        || pair(Loose, Predicate)
        || (a == Arithmetic && b == Concat)
}

/// A JSON arrow, `->` or `->>`. DuckDB 1.5.5 reads them apart from every other operator: an
/// arrow takes as its left operand everything before it up to the start of its context
/// (`x > 0 AND j ->> 'k' = 'v'` is `((x > 0 AND j) ->> 'k') = 'v'`, `a LIKE b ->> c` is
/// `(a LIKE b) ->> c`); `->>` then takes one operand of the other operators' level on its right
/// (`j ->> 'k' = 'v'` compares the value), `->` everything up to the next arrow (`j -> 'k' = 'v'`
/// is `j -> ('k' = 'v')`, as a lambda's body). sqlparser ranks both with the other operators.
fn is_arrow(e: &Expr) -> bool {
    matches!(e, Expr::BinaryOp { op: BinaryOperator::Arrow | BinaryOperator::LongArrow, .. })
}

/// Which JSON arrow, if any, `e` is: a `->>`, or a `->` (an arrow lambda `x -> …` too: sqlparser
/// reads `j -> 'k'` as one when `j` is a bare name, DuckDB as an arrow), which reaches farther
/// to its right ([`is_arrow`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ArrowKind {
    Absent,
    Long,
    Short,
}

fn arrow_kind(e: &Expr) -> ArrowKind {
    match e {
        Expr::BinaryOp { op: BinaryOperator::LongArrow, .. } => ArrowKind::Long,
        Expr::BinaryOp { op: BinaryOperator::Arrow, .. } => ArrowKind::Short,
        Expr::Lambda(l) if matches!(l.syntax, LambdaSyntax::Arrow) => ArrowKind::Short,
        _ => ArrowKind::Absent,
    }
}

/// The operands of an operator whose extent the text's precedence decides (not an `IN` list, an
/// `ANY (…)`, a function's arguments: delimited by parentheses and commas). An arrow lambda's
/// body is one: a JSON arrow inside it reaches out of it ([`is_arrow`]).
fn operands(e: &mut Expr) -> Vec<&mut Expr> {
    match e {
        Expr::BinaryOp { left, right, .. } => vec![&mut **left, &mut **right],
        Expr::UnaryOp { expr, .. } | Expr::In { expr, .. } | Expr::Collate { expr, .. } => vec![&mut **expr],
        Expr::Like { expr, pattern, .. } | Expr::ILike { expr, pattern, .. } | Expr::SimilarTo { expr, pattern, .. } | Expr::RLike { expr, pattern, .. } => {
            vec![&mut **expr, &mut **pattern]
        }
        Expr::Between { expr, low, high, .. } => vec![&mut **expr, &mut **low, &mut **high],
        Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsNotTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsNotFalse(x)
        | Expr::IsUnknown(x)
        | Expr::IsNotUnknown(x) => vec![&mut **x],
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => vec![&mut **a, &mut **b],
        Expr::AnyOp { left, .. } | Expr::AllOp { left, .. } => vec![&mut **left],
        Expr::AtTimeZone { timestamp, time_zone } => vec![&mut **timestamp, &mut **time_zone],
        Expr::Lambda(l) if matches!(l.syntax, LambdaSyntax::Arrow) => vec![&mut *l.body],
        _ => Vec::new(),
    }
}

/// [`operands`], read-only.
fn operand_refs(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryOp { left, right, .. } => vec![&**left, &**right],
        Expr::UnaryOp { expr, .. } | Expr::In { expr, .. } | Expr::Collate { expr, .. } => vec![&**expr],
        Expr::Like { expr, pattern, .. } | Expr::ILike { expr, pattern, .. } | Expr::SimilarTo { expr, pattern, .. } | Expr::RLike { expr, pattern, .. } => {
            vec![&**expr, &**pattern]
        }
        Expr::Between { expr, low, high, .. } => vec![&**expr, &**low, &**high],
        Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsNotTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsNotFalse(x)
        | Expr::IsUnknown(x)
        | Expr::IsNotUnknown(x) => vec![&**x],
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => vec![&**a, &**b],
        Expr::AnyOp { left, .. } | Expr::AllOp { left, .. } => vec![&**left],
        Expr::AtTimeZone { timestamp, time_zone } => vec![&**timestamp, &**time_zone],
        Expr::Lambda(l) if matches!(l.syntax, LambdaSyntax::Arrow) => vec![&*l.body],
        _ => Vec::new(),
    }
}

/// Whether `e` is an operator ([`operands`] has some).
fn is_operator(e: &Expr) -> bool {
    match e {
        Expr::BinaryOp { .. }
        | Expr::UnaryOp { .. }
        | Expr::In { .. }
        | Expr::Collate { .. }
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::SimilarTo { .. }
        | Expr::RLike { .. }
        | Expr::Between { .. }
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsNotTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::AnyOp { .. }
        | Expr::AllOp { .. }
        | Expr::AtTimeZone { .. } => true,
        Expr::Lambda(l) => matches!(l.syntax, LambdaSyntax::Arrow),
        _ => false,
    }
}

/// Whether an operator's first operand starts its text (not a prefix operator's nor a lambda's).
fn leads(e: &Expr) -> bool {
    is_operator(e) && !matches!(e, Expr::UnaryOp { .. } | Expr::Lambda(_))
}

/// `e` without its parentheses.
fn peeled(mut e: &Expr) -> &Expr {
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

/// The operators of an operand's text outside parentheses (the operand and, through the
/// [`operands`] of each, every operator it holds that no parentheses delimit), as
/// [`Normalizer::matters`] weighs them.
#[derive(Default)]
struct Exposed {
    /// Any operator at all.
    any: bool,
    /// Classes ([`OpClass::bit`]) of the operators outside the operand's chain.
    classes: u16,
    /// Classes of the operators of the operand's chain: those of its left edge with the
    /// operator's own binary operator (`a || b` under `||`).
    chain: u16,
    /// A `->>`.
    long_arrow: bool,
    /// A `->` on the operand's left edge that is an arrow's left operand (`t.j -> 'a'` in
    /// `t.j -> 'a' ->> 'b'`): an arrow ends its reach to the right.
    bounded_short: bool,
    /// Any other `->`.
    short: bool,
}

/// Adds `e`'s operators to `out`: `edge`, `e` is on the operand's left edge; `arrow_left`, `e` is
/// an arrow's left operand; `chain`, the binary operator whose chain `e` may continue.
fn expose(e: &Expr, edge: bool, arrow_left: bool, chain: Option<&BinaryOperator>, out: &mut Exposed) {
    if !is_operator(e) {
        return;
    }
    out.any = true;
    let in_chain = matches!((e, chain), (Expr::BinaryOp { op, .. }, Some(c)) if op == c);
    if let Some(class) = op_class(e) {
        if in_chain {
            out.chain |= class.bit();
        } else {
            out.classes |= class.bit();
        }
    }
    match arrow_kind(e) {
        ArrowKind::Long => out.long_arrow = true,
        ArrowKind::Short if edge && arrow_left => out.bounded_short = true,
        ArrowKind::Short => out.short = true,
        ArrowKind::Absent => {}
    }
    let (first, arrow) = (leads(e), is_arrow(e));
    for (j, operand) in operand_refs(e).into_iter().enumerate() {
        if !matches!(operand, Expr::Nested(_)) {
            expose(operand, edge && j == 0 && first, arrow && j == 0, if in_chain && j == 0 { chain } else { None }, out);
        }
    }
}

impl Normalizer {
    /// Whether the grouping of `op`'s operand `i`, in `context`, is one sqlparser and DuckDB may
    /// read otherwise, so that its parentheses (or their absence) are kept: an operator of the
    /// operand's text outside parentheses is a [`risky_pair`] with `op` or an operator above it
    /// in the context (but for a chain of one operator from the left); or the operand holds a JSON
    /// arrow, which in DuckDB reaches out of it to the left; or it is an arrow's operand, or holds
    /// one above it. Not the arrows of an operand that starts its context (`j ->> 'k' = 'v'`,
    /// `j ->> 'k' IS NULL`): nothing before them to reach, and a `->>` (or a `->` ended by
    /// another arrow, `t.j -> 'a' ->> 'b'`) reaches nothing after them that sqlparser would not
    /// also put above them.
    fn matters(context: &Context, op: &Expr, i: usize, operand: &Expr) -> bool {
        let chain = match op {
            Expr::BinaryOp { op: o, .. } if i == 0 => Some(o),
            _ => None,
        };
        let mut x = Exposed::default();
        expose(peeled(operand), true, is_arrow(op) && i == 0, chain, &mut x);
        if !x.any {
            return false;
        }
        let leading = context.leading && i == 0 && leads(op);
        let all = context.above | op_class(op).map_or(0, OpClass::bit);
        // The chain reads alike with `op` and the run of the same operator above it.
        let beside_chain = match (&context.run, chain) {
            (Some((r, before)), Some(o)) if r == o => *before,
            _ => context.above,
        };
        risky_sets(all, x.classes)
            || risky_sets(beside_chain, x.chain)
            || x.short
            || ((x.long_arrow || x.bounded_short || context.arrow_above || is_arrow(op)) && !leading)
    }

    /// Decides, for each operand of the operator `expr` in `context`, whether its parentheses are
    /// kept ([`Slot`]), and wraps those written without them in the two-pair marker.
    fn mark_operands(&mut self, expr: &mut Expr, context: &Context) {
        let shared: &Expr = expr;
        let decided: Vec<(bool, Context)> =
            operand_refs(shared).into_iter().enumerate().map(|(i, operand)| (Self::matters(context, shared, i, operand), context.child(shared, i))).collect();
        for (operand, (kept, child)) in operands(expr).into_iter().zip(decided) {
            if !kept {
                if is_operator(peeled(operand)) {
                    self.slots.insert(&raw const *operand as usize, Slot::Within(child));
                }
            } else if matches!(operand, Expr::Nested(_)) {
                self.slots.insert(&raw const *operand as usize, Slot::Keep(Keep::Parens));
            } else {
                let bare = std::mem::replace(operand, Expr::Wildcard(AttachedToken::empty()));
                *operand = Expr::Nested(Box::new(Expr::Nested(Box::new(bare))));
                self.slots.insert(&raw const *operand as usize, Slot::Keep(Keep::Implicit));
                if let Expr::Nested(second) = operand {
                    self.slots.insert(&raw const **second as usize, Slot::Keep(Keep::Implicit));
                    if let Expr::Nested(bare) = &**second {
                        self.slots.insert(&raw const **bare as usize, Slot::Within(child));
                    }
                }
            }
        }
    }
}

impl VisitorMut for Normalizer {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        // `((a))` → `a` — but not an operand whose grouping [`Normalizer::matters`]: one pair of
        // its parentheses is kept, or its two-pair marker left as it is. Children are visited
        // after this, on the unwrapped node.
        let context = match self.slots.remove(&(&raw const *expr as usize)) {
            Some(Slot::Keep(Keep::Implicit)) => return ControlFlow::Continue(()),
            Some(Slot::Keep(Keep::Parens)) => {
                while let Expr::Nested(inner) = expr
                    && matches!(**inner, Expr::Nested(_))
                {
                    let inner = std::mem::replace(&mut **inner, Expr::Wildcard(AttachedToken::empty()));
                    *expr = inner;
                }
                // Inside the pair, a context of its own starts.
                return ControlFlow::Continue(());
            }
            Some(Slot::Within(context)) => context,
            None => Context::root(),
        };
        while let Expr::Nested(inner) = expr {
            let inner = std::mem::replace(&mut **inner, Expr::Wildcard(AttachedToken::empty()));
            *expr = inner;
        }
        if is_operator(expr) {
            self.mark_operands(expr, &context);
        }
        match expr {
            Expr::Cast { kind, data_type, .. } => {
                if *kind == CastKind::DoubleColon {
                    *kind = CastKind::Cast;
                }
                // A type sqlparser does not know (`x::MyEnum`): DuckDB type names are
                // case-insensitive.
                if let DataType::Custom(name, _) = data_type {
                    lowercase_parts(&mut name.0);
                }
            }
            Expr::Function(f) => lowercase_parts(&mut f.name.0),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        // DuckDB's `FROM t SELECT a` is `SELECT a FROM t`. (`FROM t` alone stays as it is: its
        // projection is implicit.)
        if select.flavor == SelectFlavor::FromFirst {
            select.flavor = SelectFlavor::Standard;
        }
        select.from.iter_mut().for_each(normalize_joins);
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        match factor {
            // `FROM read_parquet('x')`, `FROM range(10)`: a table function, case-insensitive.
            TableFactor::Table { name, args: Some(_), .. } | TableFactor::Function { name, .. } => {
                lowercase_parts(&mut name.0);
            }
            TableFactor::NestedJoin { table_with_joins, .. } => normalize_joins(table_with_joins),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        // `(SELECT …)` as a whole query: an inner query in redundant parentheses.
        while is_bare(query) {
            let SetExpr::Query(inner) = &*query.body else {
                break;
            };
            // Rare (only for redundant parentheses), so the clone does not matter.
            let inner = (**inner).clone();
            *query = inner;
        }
        flatten_set_expr(&mut query.body);
        ControlFlow::Continue(())
    }
}

/// True when `query` is nothing but another query in parentheses.
fn is_bare(query: &Query) -> bool {
    has_no_clauses(query) && matches!(*query.body, SetExpr::Query(_))
}

/// True when `query` has nothing around its body (no `WITH`, `ORDER BY`, `LIMIT`, …).
fn has_no_clauses(query: &Query) -> bool {
    query.with.is_none()
        && query.order_by.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none()
        && query.locks.is_empty()
        && query.for_clause.is_none()
        && query.settings.is_none()
        && query.format_clause.is_none()
        && query.pipe_operators.is_empty()
}

/// In set operations, `(SELECT …) UNION (SELECT …)` → `SELECT … UNION SELECT …` when the
/// parenthesised operand has no clauses of its own (the tree keeps the grouping).
fn flatten_set_expr(set: &mut SetExpr) {
    match set {
        SetExpr::Query(q) if has_no_clauses(q) => {
            let body = (*q.body).clone();
            *set = body;
            flatten_set_expr(set);
        }
        SetExpr::SetOperation { left, right, .. } => {
            flatten_set_expr(left);
            flatten_set_expr(right);
        }
        _ => {}
    }
}

/// `JOIN` → `INNER JOIN`, `LEFT OUTER` → `LEFT`, `RIGHT OUTER` → `RIGHT`: one spelling each.
fn normalize_joins(twj: &mut TableWithJoins) {
    for join in &mut twj.joins {
        let op = std::mem::replace(&mut join.join_operator, JoinOperator::CrossApply);
        join.join_operator = match op {
            JoinOperator::Join(c) => JoinOperator::Inner(c),
            JoinOperator::LeftOuter(c) => JoinOperator::Left(c),
            JoinOperator::RightOuter(c) => JoinOperator::Right(c),
            other => other,
        };
    }
}

fn lowercase_parts(parts: &mut [ObjectNamePart]) {
    for part in parts {
        if let ObjectNamePart::Identifier(id) = part
            && id.value.chars().any(char::is_uppercase)
        {
            id.value = id.value.to_lowercase();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(sql: &str) -> String {
        canonicalize(sql).unwrap_or_else(|e| panic!("{sql}: {e}")).text
    }

    #[test]
    fn the_json_names_of_a_canonical_source_are_the_documented_ones() {
        for source in [CanonSource::SqlParser, CanonSource::DuckDbJson, CanonSource::PgQuery] {
            assert_eq!(serde_json::to_value(source).unwrap(), serde_json::json!(source.as_str()));
            assert_eq!(CanonSource::from_name(source.as_str()), source);
        }
    }

    #[test]
    fn spelling_is_invisible() {
        let base = canon("SELECT a AS b, count(*) AS n FROM s.t AS x JOIN s.u AS y ON x.id = y.id GROUP BY a");
        for v in [
            "select a b, COUNT(*) n from s.t x inner join s.u y on (x.id = y.id) group by a;",
            "SELECT \"a\" AS \"b\", Count(*) AS n /* c */ FROM \"s\".\"t\" AS \"x\"\n JOIN s.u y ON ((x.id) = (y.id)) -- c\n GROUP BY (a)",
        ] {
            assert_eq!(canon(v), base, "{v}");
        }
    }

    #[test]
    fn no_position_or_spelling_data_survives() {
        let text = canon("SELECT \"A\" AS x FROM s.t AS y WHERE z = $start");
        for key in ["\"span\":", "\"quote_style\":", "\"explicit\":", "_token\":", "\"line\":", "\"column\":"] {
            assert!(!text.contains(key), "{key} in {text}");
        }
        assert!(text.contains("\"$start\""), "{text}");
    }

    #[test]
    fn casts_and_joins_have_one_spelling() {
        assert_eq!(canon("SELECT a::INT"), canon("SELECT CAST(a AS INT)"));
        assert_ne!(canon("SELECT a::INT"), canon("SELECT TRY_CAST(a AS INT)"));
        assert_eq!(canon("SELECT * FROM a LEFT OUTER JOIN b USING (k)"), canon("SELECT * FROM a LEFT JOIN b USING (k)"));
        assert_eq!(canon("SELECT * FROM a RIGHT OUTER JOIN b USING (k)"), canon("SELECT * FROM a RIGHT JOIN b USING (k)"));
        assert_ne!(canon("SELECT * FROM a LEFT JOIN b USING (k)"), canon("SELECT * FROM a JOIN b USING (k)"));
    }

    #[test]
    fn parentheses_stay_where_sqlparser_and_duckdb_group_otherwise() {
        // Each pair is one sqlparser tree once its parentheses go, and two meanings in DuckDB
        // (`1 + 1 ^ 2` is 2 there: `^` binds above `+`; the bitwise and string operators are one
        // level, left to right).
        for (a, b) in [
            ("SELECT (a + 1) ^ 2", "SELECT a + 1 ^ 2"),
            ("SELECT a * (b ^ 2)", "SELECT a * b ^ 2"),
            ("SELECT 7 | (3 & 2)", "SELECT 7 | 3 & 2"),
            ("SELECT (7 | 3) & 2", "SELECT 7 | 3 & 2"),
            ("SELECT (~1) + 1", "SELECT ~ 1 + 1"),
            ("SELECT j ->> ('a' || 'x')", "SELECT j ->> 'a' || 'x'"),
            ("SELECT (a = b) LIKE c", "SELECT a = b LIKE c"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} / {b}");
        }
        assert_ne!(canon("SELECT (1 = 2) IN (false)"), canon("SELECT 1 = 2 IN (false)"));
        // Without parentheses, the operand is marked: an efmesh before this rule stored the bare
        // tree for `(a + 1) ^ 2`, which must not be the tree of `a + 1 ^ 2` now.
        assert!(canon("SELECT a + 1 ^ 2").contains("{\"Nested\":{\"Nested\":"), "{}", canon("SELECT a + 1 ^ 2"));
        // The same operator chained from the left reads alike in both: no marker.
        assert!(!canon("SELECT s || '-' || s || 'x'").contains("Nested"), "{}", canon("SELECT s || '-' || s || 'x'"));
        assert_ne!(canon("SELECT a || (b || c)"), canon("SELECT a || b || c"));
        // Elsewhere parentheses are still formatting: around a name, a literal or a call, a
        // second pair, an operand of AND/OR, and between operators both parsers rank alike.
        for (a, b) in [
            ("SELECT (a) ^ (2)", "SELECT a ^ 2"),
            ("SELECT ((a + 1)) ^ 2", "SELECT (a + 1) ^ 2"),
            ("SELECT (((a ^ 2)))", "SELECT a ^ 2"),
            ("SELECT f((a)) | 1", "SELECT f(a) | 1"),
            ("SELECT (s || 'x')", "SELECT s || 'x'"),
            ("SELECT coalesce((s LIKE p), false)", "SELECT coalesce(s LIKE p, false)"),
            ("SELECT 1 FROM t WHERE (s LIKE 'a%') AND a = 1", "SELECT 1 FROM t WHERE s LIKE 'a%' AND a = 1"),
            ("SELECT a BETWEEN (b - 1) AND 3", "SELECT a BETWEEN b - 1 AND 3"),
            ("SELECT (a || b) = c", "SELECT a || b = c"),
            ("SELECT (j ->> 'a') = 'x'", "SELECT j ->> 'a' = 'x'"),
            ("SELECT (x) COLLATE nocase", "SELECT x COLLATE nocase"),
            ("SELECT (a || b) || c", "SELECT a || b || c"),
        ] {
            assert_eq!(canon(a), canon(b), "{a} / {b}");
        }
    }

    #[test]
    fn json_arrows_keep_their_parentheses_wherever_they_reach() {
        // DuckDB 1.5.5 gives `->`/`->>` everything before them as their left operand (up to the
        // start of the context: a select item, a condition, a function argument, parentheses),
        // and `->` everything after it up to the next arrow; sqlparser ranks them above the
        // comparisons. Each pair is one sqlparser tree once its parentheses go, and two meanings
        // in DuckDB (checked with `json_serialize_sql`).
        for (a, b) in [
            ("SELECT 1 FROM t WHERE url LIKE (rule ->> 'prefix')", "SELECT 1 FROM t WHERE url LIKE rule ->> 'prefix'"),
            ("SELECT 1 FROM t WHERE x > 0 AND (j ->> 'k') = 'v'", "SELECT 1 FROM t WHERE x > 0 AND j ->> 'k' = 'v'"),
            ("SELECT a OR (b AND c ->> d)", "SELECT a OR b AND c ->> d"),
            ("SELECT NOT (j ->> 'k' = 'v')", "SELECT NOT j ->> 'k' = 'v'"),
            ("SELECT a BETWEEN b AND (c ->> d)", "SELECT a BETWEEN b AND c ->> d"),
            ("SELECT x AND (a ->> b) ->> c", "SELECT x AND a ->> b ->> c"),
            ("SELECT (t.j -> 'k') = 'v'", "SELECT t.j -> 'k' = 'v'"),
            // `j -> …` with a bare name is a lambda to sqlparser, an arrow to DuckDB.
            ("SELECT j -> ('a' ->> 'b')", "SELECT j -> 'a' ->> 'b'"),
            ("SELECT list_filter(l, x -> (x ->> 'k') = 'v')", "SELECT list_filter(l, x -> x ->> 'k' = 'v')"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} / {b}");
        }
        // Without parentheses, the operand is marked: an efmesh before this rule stored the bare
        // tree for the first of each pair, which must not be the tree of the second now.
        let marked = canon("SELECT 1 FROM t WHERE url LIKE rule ->> 'prefix'");
        assert!(marked.contains("{\"Nested\":{\"Nested\":"), "{marked}");
        // An arrow that starts its context reaches nothing more than sqlparser gives it, and an
        // arrow's operand kept whole is formatting there: these stay one form each.
        for (a, b) in [
            ("SELECT (j ->> 'k') = 'v'", "SELECT j ->> 'k' = 'v'"),
            ("SELECT (j ->> 'k') IS NULL", "SELECT j ->> 'k' IS NULL"),
            ("SELECT 1 FROM t WHERE (j ->> 'k' = 'v') AND x > 0", "SELECT 1 FROM t WHERE j ->> 'k' = 'v' AND x > 0"),
            ("SELECT (t.j -> 'a' ->> 'b') = 'v'", "SELECT t.j -> 'a' ->> 'b' = 'v'"),
            ("SELECT coalesce((j ->> 'k'), 'x')", "SELECT coalesce(j ->> 'k', 'x')"),
            ("SELECT CASE WHEN (j ->> 'k') = 'v' THEN 1 END", "SELECT CASE WHEN j ->> 'k' = 'v' THEN 1 END"),
        ] {
            assert_eq!(canon(a), canon(b), "{a} / {b}");
        }
        assert!(!canon("SELECT j ->> 'k' = 'v' AND x > 0").contains("Nested"), "{}", canon("SELECT j ->> 'k' = 'v' AND x > 0"));
    }

    #[test]
    fn operators_sqlparser_ranks_otherwise_keep_their_parentheses_under_any_operator_above() {
        // `<=>`, `~` and `~~` are comparisons to sqlparser, other operators to DuckDB; `||` ranks
        // with `*` in sqlparser, below `+` in DuckDB; and a pair is weighed against every operator
        // above the operand in its context, not only its own (`a ^ (b + c) + d`: the `^` above
        // decides). Two DuckDB meanings each.
        for (a, b) in [
            ("SELECT (a = b) ~ c", "SELECT a = b ~ c"),
            ("SELECT (a < b) <=> c", "SELECT a < b <=> c"),
            ("SELECT (a || b) + c", "SELECT a || b + c"),
            ("SELECT (a || b) * c", "SELECT a || b * c"),
            ("SELECT a ~ (b || c + d)", "SELECT a ~ b || c + d"),
            ("SELECT a ^ (b + c) + d", "SELECT a ^ b + c + d"),
            ("SELECT (a = b ~ c) ~ d", "SELECT a = b ~ c ~ d"),
            ("SELECT (a + ~ b) + c", "SELECT a + ~ b + c"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} / {b}");
        }
        // Pairs both parsers rank alike are still formatting.
        for (a, b) in [("SELECT (a || b) = c", "SELECT a || b = c"), ("SELECT (a) + b", "SELECT a + b"), ("SELECT (a + b) - c", "SELECT a + b - c")] {
            assert_eq!(canon(a), canon(b), "{a} / {b}");
        }
        // `||` above arithmetic reads alike in both (sqlparser needs the parentheses of the
        // first, and reads `n * 2 || a` as DuckDB does): no parentheses kept, no re-version.
        for sql in ["SELECT a || (n + 1)", "SELECT (n + 1) || 'x'", "SELECT a || (n * 2)", "SELECT (n * 2) || a"] {
            assert!(!canon(sql).contains("Nested"), "{sql}: {}", canon(sql));
        }
        assert_eq!(canon("SELECT (n * 2) || a"), canon("SELECT n * 2 || a"));
    }

    #[test]
    fn a_body_holding_double_equals_is_left_to_duckdb() {
        // sqlparser reads `==` as `=`; DuckDB ranks it above `=` (`a = b == c` is `a = (b == c)`,
        // `a == b = c` is `(a == b) = c`): no sqlparser tree tells them apart.
        let e = canonicalize("SELECT a = b\n  == c").unwrap_err();
        assert!(matches!(e, SqlError::Parse { .. }), "{e:?}");
        assert_eq!((e.line(), e.column()), (Some(2), Some(3)), "{e}");
        assert!(e.to_string().contains("`==`"), "{e}");
        let asked = std::cell::Cell::new(0);
        let duckdb = |_: &str| -> Result<String, String> {
            asked.set(asked.get() + 1);
            Ok(r#"{"error":false,"statements":[{"node":{"type":"SELECT_NODE"}}]}"#.into())
        };
        assert_eq!(canonicalize_with_fallback("SELECT true >= true == false", &duckdb).unwrap().source, CanonSource::DuckDbJson);
        assert_eq!(asked.get(), 1);
        // In a string, a quoted name or a comment it is no operator.
        for sql in ["SELECT 'a == b' AS x", "SELECT \"a==b\" FROM t", "SELECT a -- a == b\nFROM t", "SELECT a = b /* == */ FROM t"] {
            assert_eq!(canonicalize_with_fallback(sql, &duckdb).unwrap().source, CanonSource::SqlParser, "{sql}");
        }
        assert_eq!(asked.get(), 1);
        // The digest takes the same way: an error, so that the planner asks DuckDB.
        assert!(matches!(canonical_digest("SELECT a == b"), Err(SqlError::Parse { .. })));
    }

    /// A stand-in for DuckDB's `json_serialize_sql`, whose tree is the text it was asked: what
    /// DuckDB's parser reads gets a text of its own.
    fn duckdb_stub(sql: &str) -> Result<String, String> {
        Ok(serde_json::json!({"error": false, "statements": [{"node": {"sql": sql}}]}).to_string())
    }

    /// The canonical form of `sql`, DuckDB's parser ([`duckdb_stub`]) reading what sqlparser
    /// leaves to it.
    fn either(sql: &str) -> Canonical {
        canonicalize_with_fallback(sql, &duckdb_stub).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Asserts that `sql` is left to DuckDB's parser at `line` and `column` (a parse error to
    /// [`canonicalize`] and [`canonical_digest`], so that the planner asks DuckDB).
    #[track_caller]
    fn left_to_duckdb(sql: &str, line: u64, column: u64) {
        let e = canonicalize(sql).unwrap_err();
        assert!(matches!(e, SqlError::Parse { .. }), "{sql}: {e:?}");
        assert_eq!((e.line(), e.column()), (Some(line), Some(column)), "{sql}: {e}");
        assert_eq!(canonical_digest(sql).unwrap_err(), e, "{sql}");
        assert_eq!(either(sql).source, CanonSource::DuckDbJson, "{sql}");
    }

    #[test]
    fn at_against_a_number_is_left_to_duckdb() {
        // A placeholder to sqlparser, so `(@2) - 5` and `@2 - 5` were one tree; DuckDB 1.5.5 reads
        // a prefix `@` whose operand reaches up to an operator ranked below it: -3 and 3.
        left_to_duckdb("SELECT (@2) - 5", 1, 9);
        left_to_duckdb("SELECT 1,\n  @2 - 5", 2, 3);
        left_to_duckdb("SELECT x * @0.5 - 1 FROM t", 1, 12);
        assert_ne!(either("SELECT (@2) - 5").text, either("SELECT @2 - 5").text);
        // `@` in a literal, a quoted name or a comment, and the operators holding it, are not it.
        for sql in ["SELECT '@2 - 5', \"@2\" FROM t -- @2\n", "SELECT j @> '{}', l <@ m FROM t"] {
            assert_eq!(either(sql).source, CanonSource::SqlParser, "{sql}");
        }
    }

    #[test]
    fn glob_written_as_an_operator_is_left_to_duckdb() {
        // `~~~` is DuckDB's `GLOB`; sqlparser reads `~~` (`LIKE`) and a prefix `~`, the tree of
        // `s ~~ ~p`.
        left_to_duckdb("SELECT s ~~~ p FROM t", 1, 10);
        left_to_duckdb("SELECT s~~~p FROM t", 1, 9);
        assert_eq!(either("SELECT s ~~ ~p FROM t").source, CanonSource::SqlParser);
        assert_ne!(either("SELECT s ~~~ p FROM t").text, either("SELECT s ~~ ~p FROM t").text);
        assert_eq!(either("SELECT s ~~ p, s !~~ p, '~~~' FROM t").source, CanonSource::SqlParser);
    }

    #[test]
    fn an_alias_isnull_without_as_is_left_to_duckdb() {
        // sqlparser reads `n ISNULL` as `n AS ISNULL`; DuckDB 1.5.5 as `n IS NULL`.
        left_to_duckdb("SELECT n ISNULL FROM t", 1, 10);
        left_to_duckdb("SELECT a,\n  n /* c */ IsNull, b FROM t", 2, 13);
        left_to_duckdb("SELECT x FROM (SELECT n isnull FROM t)", 1, 25);
        assert_ne!(either("SELECT n ISNULL FROM t").text, either("SELECT n AS ISNULL FROM t").text);
        // With `AS` or quotes it is an alias to both; `NOTNULL` sqlparser reads as DuckDB does.
        for sql in ["SELECT n AS ISNULL FROM t", "SELECT n AS /* c */ isnull FROM t", "SELECT n \"ISNULL\" FROM t", "SELECT n isnull_x FROM t"] {
            assert_eq!(either(sql).source, CanonSource::SqlParser, "{sql}");
        }
        assert_eq!(canon("SELECT n \"ISNULL\" FROM t"), canon("SELECT n AS ISNULL FROM t"));
        assert_ne!(canon("SELECT n NOTNULL FROM t"), canon("SELECT n AS NOTNULL FROM t"));
    }

    #[test]
    fn a_named_argument_duckdb_reads_as_a_comparison_ended_early_is_left_to_duckdb() {
        // sqlparser reads `count_if(a = 1 OR b = 2)` as the argument `a` named `1 OR b = 2`, the
        // tree of `count_if(a = (1 OR b = 2))`; DuckDB 1.5.5 reads `(a = 1) OR (b = 2)`.
        left_to_duckdb("SELECT count_if(a = 1 OR b = 2) FROM t", 1, 17);
        assert_ne!(either("SELECT count_if(a = 1 OR b = 2) FROM t").text, either("SELECT count_if(a = (1 OR b = 2)) FROM t").text);
        for sql in [
            "SELECT count_if(a = 1 AND b) FROM t",
            "SELECT count_if(a = b IS NULL) FROM t",
            "SELECT count_if(a = b IS DISTINCT FROM c) FROM t",
            "SELECT count_if(a = b ->> 'k') FROM t",
            "SELECT bool_or(a = NOT b AND c) FROM t",
            "SELECT coalesce(x = 1 OR y, false) FROM t",
            "SELECT count(*) FILTER (WHERE f(a = 1 OR b)) FROM t",
            "SELECT * FROM read_csv('x.csv', header = true OR false)",
        ] {
            assert_eq!(either(sql).source, CanonSource::DuckDbJson, "{sql}");
        }
        // A value that is one operand to DuckDB's comparison too is sqlparser's, as before: a
        // name, a literal, arithmetic, `LIKE`, `IN`, `NOT`, parentheses; `:=` and `=>` name an
        // argument in both; a table function's `header = true` is a named parameter in both.
        for sql in [
            "SELECT count_if(status = 'paid'), coalesce(a = 1, false) FROM t",
            "SELECT count_if(a = b + 1), count_if(a = b LIKE c), count_if(a = b IN (1, 2)), count_if(a = NOT b) FROM t",
            "SELECT count_if(a = (1 OR b = 2)), count_if(a = f(b OR c)), count_if(a = CASE WHEN b = 1 THEN c END) FROM t",
            "SELECT f(a := 1 OR b), f(a => b = c) FROM t",
            "SELECT * FROM read_csv('x.csv', header = true, delim = ';')",
        ] {
            assert_eq!(either(sql).source, CanonSource::SqlParser, "{sql}");
        }
    }

    #[test]
    fn parentheses_go_but_precedence_stays() {
        assert_eq!(canon("SELECT ((a + b)) * c"), canon("SELECT (a + b) * c"));
        assert_ne!(canon("SELECT (a + b) * c"), canon("SELECT a + b * c"));
        assert_eq!(canon("SELECT a + (b * c)"), canon("SELECT a + b * c"));
        assert_eq!(canon("((SELECT 1))"), canon("SELECT 1"));
        assert_eq!(canon("(SELECT 1) UNION ALL (SELECT 2)"), canon("SELECT 1 UNION ALL SELECT 2"));
        assert_ne!(canon("SELECT 1 UNION (SELECT 2 INTERSECT SELECT 3)"), canon("(SELECT 1 UNION SELECT 2) INTERSECT SELECT 3"));
        assert_ne!(canon("SELECT 1 UNION (SELECT 2 LIMIT 1)"), canon("SELECT 1 UNION SELECT 2 LIMIT 1"));
    }

    #[test]
    fn duckdb_spellings_fold() {
        let same = [
            ("FROM t SELECT a", "SELECT a FROM t"),
            ("SELECT x::MyType", "SELECT CAST(x AS mytype)"),
            ("SELECT a, b, FROM t", "SELECT a, b FROM t"),
            ("SELECT a <> b", "SELECT a != b"),
            ("SELECT * EXCLUDE (a) FROM t", "select * exclude (a) from t"),
            ("SELECT COLUMNS('a.*') FROM t", "SELECT columns('a.*') FROM t"),
            ("SELECT x FROM t WHERE x IN (SELECT y FROM u)", "SELECT x FROM t WHERE x IN ((SELECT y FROM u))"),
            ("SELECT list_transform(l, x -> x + 1) FROM t", "SELECT LIST_TRANSFORM(l, (x -> (x + 1))) FROM t"),
            ("SELECT * FROM read_csv('x.csv', header = true)", "SELECT * FROM READ_CSV('x.csv', header = true)"),
        ];
        for (a, b) in same {
            assert_eq!(canon(a), canon(b), "{a} ~ {b}");
        }
        assert_ne!(canon("FROM t"), canon("FROM t SELECT a"));
    }

    #[test]
    fn function_names_fold_but_identifiers_keep_case() {
        assert_eq!(canon("SELECT SUM(x) FROM READ_PARQUET('f')"), canon("select sum(x) from read_parquet('f')"));
        assert_ne!(canon("SELECT X FROM t"), canon("SELECT x FROM t"));
        assert_ne!(canon("SELECT x AS Y FROM t"), canon("SELECT x AS y FROM t"));
        assert_ne!(canon("SELECT x FROM T"), canon("SELECT x FROM t"));
    }

    #[test]
    fn errors_name_what_was_found_and_where() {
        let e = canonicalize("SELECT a FROM t WHERE )").unwrap_err();
        assert!(matches!(e, SqlError::Parse { .. }), "{e:?}");
        assert_eq!((e.line(), e.column()), (Some(1), Some(23)), "{e}");
        let e = canonicalize("SELECT a\nFROM t WHERE  \n").unwrap_err();
        assert_eq!(e.to_string(), "cannot parse SQL at line 2, column 13: Expected: an expression, found: EOF");
        let e = canonicalize("SELECT 1,\n  2 +* FROM t").unwrap_err();
        assert_eq!(e.line(), Some(2), "{e}");
        assert!(e.to_string().starts_with("cannot parse SQL at line 2, column "), "{e}");
        assert!(!e.to_string().ends_with('.'));

        let e = canonicalize("DELETE FROM t").unwrap_err();
        assert_eq!(e.to_string(), "expected one query (`SELECT`, `WITH`, `VALUES` or a set operation), found a `DELETE FROM` statement");
        // At the statement's first line (a `.sql` file maps it to the line of the query's first word).
        assert_eq!(e.line(), Some(1), "{e}");
        let e = canonicalize("EXPLAIN SELECT 1 AS x").unwrap_err();
        assert!(e.to_string().ends_with("found an `EXPLAIN SELECT` statement") && e.line() == Some(1), "{e}");
        let e = canonicalize("CREATE TABLE t (a INT)").unwrap_err();
        assert!(e.to_string().ends_with("found a `CREATE TABLE` statement"), "{e}");
        let e = canonicalize("SELECT 1; SELECT 2").unwrap_err();
        assert!(e.to_string().ends_with("found 2 statements"), "{e}");
        let e = canonicalize(" -- nothing\n").unwrap_err();
        assert!(e.to_string().ends_with("found no statement"), "{e}");
        assert!(canonicalize("VALUES (1, 'a'), (2, 'b')").is_ok());
        assert!(canonicalize("WITH x AS (SELECT 1) SELECT * FROM x;").is_ok());
    }

    #[test]
    fn split_location_reads_sqlparser_suffixes() {
        assert_eq!(split_location("Expected: x, found: y at Line: 3, Column: 14"), ("Expected: x, found: y", Some(3), Some(14)));
        assert_eq!(split_location("recursion limit exceeded"), ("recursion limit exceeded", None, None));
    }

    #[test]
    fn fallback_is_used_only_when_sqlparser_fails() {
        let calls = std::cell::Cell::new(0);
        let ok = |_: &str| -> Result<String, String> {
            calls.set(calls.get() + 1);
            Ok(r#"{"error":false,"statements":[{"node":{"query_location":3,"x":[{"query_location":1}]}}]}"#.into())
        };
        let c = canonicalize_with_fallback("SELECT 1", &ok).unwrap();
        assert_eq!((c.source, calls.get()), (CanonSource::SqlParser, 0));
        let c = canonicalize_with_fallback("SELECT 1 FROM", &ok).unwrap();
        assert_eq!((c.source, calls.get()), (CanonSource::DuckDbJson, 1));
        assert_eq!(c.text, r#"{"error":false,"statements":[{"node":{"x":[{}]}}]}"#);
        assert!(matches!(canonicalize_with_fallback("DELETE FROM t", &ok), Err(SqlError::NotAQuery { .. })));
        assert_eq!(calls.get(), 1);

        let rejected =
            |_: &str| -> Result<String, String> { Ok(r#"{"error":true,"error_type":"parser","error_message":"syntax error at or near \"FRM\""}"#.into()) };
        let e = canonicalize_with_fallback("SELECT 1 FROM", &rejected).unwrap_err();
        assert_eq!(e.to_string(), "DuckDB cannot parse SQL: syntax error at or near \"FRM\"");
        // DuckDB's `position` (a byte offset, as text) becomes the line of the body it falls in.
        let placed = |_: &str| -> Result<String, String> {
            Ok(r#"{"error":true,"error_type":"parser","error_message":"syntax error at or near \"t\"","position":"19"}"#.into())
        };
        let e = canonicalize_with_fallback("SELECT a,\n  b\nFRM t\n", &placed).unwrap_err();
        assert_eq!(e.line(), Some(3), "{e:?}");
        assert_eq!(e.to_string(), "DuckDB cannot parse SQL at line 3: syntax error at or near \"t\"");
        // … counted in characters: three `é` (two bytes each) before it move no line.
        let e = canonicalize_with_fallback("SELECT 'ééé',\n  b\nFRM t\n", &placed).unwrap_err();
        assert_eq!(e.line(), Some(3), "{e:?}");

        let down = |_: &str| -> Result<String, String> { Err("database is locked.".into()) };
        let e = canonicalize_with_fallback("SELECT 1 FROM", &down).unwrap_err();
        assert!(matches!(e, SqlError::Fallback { .. }), "{e:?}");
        assert!(e.to_string().ends_with("; the DuckDB fallback failed too: database is locked"), "{e}");
    }

    #[test]
    fn duckdb_json_must_hold_one_statement() {
        assert!(matches!(normalize_duckdb_json("nope"), Err(SqlError::BadDuckDbJson { .. })));
        assert!(matches!(normalize_duckdb_json("[]"), Err(SqlError::BadDuckDbJson { .. })));
        assert!(matches!(normalize_duckdb_json(r#"{"error":false}"#), Err(SqlError::BadDuckDbJson { .. })));
        let two = r#"{"error":false,"statements":[{"node":{}},{"node":{}}]}"#;
        assert_eq!(
            normalize_duckdb_json(two).unwrap_err().to_string(),
            "expected one query (`SELECT`, `WITH`, `VALUES` or a set operation), found 2 statements"
        );
        let not_select = r#"{"error":true,"error_type":"not implemented","error_message":"Only SELECT statements can be serialized to json!"}"#;
        assert_eq!(normalize_duckdb_json(not_select).unwrap_err().to_string(), "DuckDB cannot parse SQL: Only SELECT statements can be serialized to json!");
    }

    #[test]
    fn a_dynamic_pivot_duckdb_cannot_serialise_is_named_at_its_line_with_a_hint() {
        // DuckDB's answer for a `PIVOT` without `IN (…)` (several statements to it).
        let not_select = |_: &str| -> Result<String, String> {
            Ok(r#"{"error":true,"error_type":"not implemented","error_message":"Only SELECT statements can be serialized to json!"}"#.into())
        };
        let e = canonicalize_with_fallback("SELECT count(*) AS n\nFROM (PIVOT src.t ON k USING count(*))", &not_select).unwrap_err();
        assert_eq!(e, SqlError::DynamicPivot { line: Some(2) });
        assert_eq!(e.line(), Some(2));
        let text = e.to_string();
        assert!(
            text.starts_with("a dynamic `PIVOT` (one without an `IN (…)` list) at line 2 cannot be analysed")
                && text.contains("hint: list the pivoted values, e.g. `PIVOT … ON k IN ('a', 'b') USING …`"),
            "{text}"
        );
        // Another body DuckDB does not serialise keeps DuckDB's message: `UNPIVOT` is no `PIVOT`.
        let e = canonicalize_with_fallback("SELEC 1 FROM unpivoted", &not_select).unwrap_err();
        assert_eq!(e.to_string(), "DuckDB cannot parse SQL: Only SELECT statements can be serialized to json!");
        assert_eq!(pivot_line("SELECT 1\nFROM t\n  pivot x ON k"), Some(3));
        assert_eq!(pivot_line("SELECT pivot_total FROM t UNPIVOT (v FOR n IN (a))"), None);
    }

    #[test]
    fn direct_serialisation_matches_pruning_a_json_value() {
        // The fast path (a filtering serializer) must equal the obvious one (build a
        // `serde_json::Value`, prune it).
        for sql in [
            "WITH d AS (SELECT a, CASE WHEN b THEN 1 ELSE 0 END AS c FROM s.t AS x) SELECT * FROM d ORDER BY a DESC LIMIT 3",
            "SELECT row_number() OVER (PARTITION BY a ORDER BY b) AS rn, \"Q\" FROM s.t t JOIN s.u USING (k) WHERE ts >= $start",
        ] {
            let mut q = parse_query(sql).unwrap();
            let _ = q.visit(&mut Normalizer::default());
            let mut v = serde_json::to_value(&q).unwrap();
            strip_keys(&mut v, &is_spelling_key);
            assert_eq!(canon(sql), v.to_string());
        }
    }

    /// `scripts/cargo test --lib sql::canon::tests::bench -- --ignored --nocapture`
    #[test]
    #[ignore = "timing, run by hand"]
    fn bench() {
        let bodies = [
            "SELECT id, amount::DOUBLE AS amount, created_at FROM raw.orders WHERE created_at >= $start AND created_at < $end",
            "WITH daily AS (SELECT s.patient_id, date_trunc('day', s.admitted_at) AS day, count(*) AS n, \
             sum(CASE WHEN s.ward = 'ICU' THEN 1 ELSE 0 END) AS icu FROM med.stays s \
             LEFT JOIN med.patients p ON p.id = s.patient_id WHERE s.admitted_at >= $start AND s.admitted_at < $end \
             GROUP BY 1, 2) SELECT patient_id, day, n, icu::DOUBLE / n AS icu_share, \
             row_number() OVER (PARTITION BY patient_id ORDER BY day DESC) AS rn FROM daily WHERE n > 0",
        ];
        for body in bodies {
            let n = 2000u32;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let _ = Parser::parse_sql(&DuckDbDialect {}, body);
            }
            let parse = t.elapsed() / n;
            let t = std::time::Instant::now();
            for _ in 0..n {
                let _ = canonicalize(body);
            }
            println!("{} bytes: parse {parse:?}, canonicalize {:?} per body", body.len(), t.elapsed() / n);
        }
    }
}
