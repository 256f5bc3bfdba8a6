//! Pre/post statements ([`crate::core::Statements`]): the load-time parse check in the engine's
//! grammar, and the canonical text the fingerprint hashes when they are declared data-relevant.

use crate::core::fragment::skip_literal_or_comment;
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::Parser;

/// The grammar a statement is checked with, the engine's (the one lineage reads bodies in):
/// `Embedded` is sqlparser's DuckDB dialect (the embedded engine's own parser needs a
/// connection, which a load does not open), `Postgres` is libpg_query, Postgres's own parser.
pub use crate::sql::lineage::Grammar;

/// Renders statements for [`check`]: bounds as the literals of a sample interval (the engine
/// parses literals; a placeholder such as `$start` is no Postgres syntax), `@this` as its
/// placeholder, references as logical names.
pub struct CheckResolver;

impl crate::core::Resolver for CheckResolver {
    fn relation(&self, model: &crate::core::ModelName) -> String {
        model.to_string()
    }
    fn start(&self) -> String {
        crate::core::interval::to_sql_literal(0)
    }
    fn end(&self) -> String {
        crate::core::interval::to_sql_literal(86_400_000)
    }
    fn bound(&self, b: crate::core::fragment::Bound) -> String {
        b.literal(crate::core::interval::Interval::new(0, 86_400_000))
    }
}

/// Checks that `sql` (a statement rendered with literal bounds) is exactly one statement of
/// `grammar`.
///
/// # Errors
/// The parser's message, or how many statements the text holds.
pub fn check(sql: &str, grammar: Grammar) -> Result<(), String> {
    let n = match grammar {
        Grammar::Embedded => Parser::parse_sql(&DuckDbDialect {}, sql).map_err(|e| crate::sql::SqlError::from_parser(e, sql).to_string())?.len(),
        Grammar::Postgres => {
            pg_query::parse(sql, 0).map_err(|e| format!("Postgres cannot parse SQL: {}", e.to_string().trim_end_matches('.')))?.protobuf.stmts.len()
        }
    };
    match n {
        1 => Ok(()),
        0 => Err("the statement is empty".into()),
        n => Err(format!("the text holds {n} statements; give each its own entry")),
    }
}

/// The canonical text of a statement (rendered with placeholders for the bounds): comments
/// dropped, whitespace runs collapsed to one space (none next to punctuation), everything outside
/// string literals and quoted identifiers lower-cased, a trailing `;` dropped. So formatting,
/// comments and keyword case never change it; anything else does. A lexical form, not a parse
/// tree: it does not depend on a grammar or a parser version.
///
/// ```
/// use efmesh::sql::statements::canonical_text;
/// assert_eq!(canonical_text("CREATE  INDEX i -- why\n ON t ( a );"), canonical_text("create index i on t(a)"));
/// assert_ne!(canonical_text("SET x = 'A'"), canonical_text("SET x = 'a'"));
/// ```
pub fn canonical_text(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut space = false;
    let mut i = 0;
    let punct = |c: char| !(c.is_alphanumeric() || c == '_' || c == '\'' || c == '"' || c == '$' || c == '@');
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            let piece = &sql[i..end];
            if piece.starts_with("--") || piece.starts_with("/*") {
                space = true;
            } else {
                if space && out.chars().last().is_some_and(|c| !punct(c)) {
                    out.push(' ');
                }
                space = false;
                out.push_str(piece);
            }
            i = end;
            continue;
        }
        let c = sql[i..].chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            space = true;
        } else {
            if space && !punct(c) && out.chars().last().is_some_and(|l| !punct(l)) {
                out.push(' ');
            }
            space = false;
            out.extend(c.to_lowercase());
        }
        i += c.len_utf8();
    }
    out.trim_end_matches(';').trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_statements_parse() {
        for sql in [
            "SET threads = 2",
            "RESET threads",
            "CREATE INDEX IF NOT EXISTS i ON s.t (a)",
            "ANALYZE s.t",
            "INSERT INTO log VALUES ('x', TIMESTAMP '2026-01-01 00:00:00')",
            "DELETE FROM log WHERE d < DATE '2026-01-01'",
            "CREATE TABLE IF NOT EXISTS log (a int)",
        ] {
            check(sql, Grammar::Embedded).unwrap_or_else(|e| panic!("{sql}: {e}"));
            check(sql, Grammar::Postgres).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        assert!(check("CREATE INDEKS i ON t (a)", Grammar::Embedded).is_err());
        assert!(check("CREATE INDEKS i ON t (a)", Grammar::Postgres).is_err());
        assert!(check("SET a = 1; SET b = 2", Grammar::Embedded).unwrap_err().contains("2 statements"));
        assert!(check("SET a = 1; SET b = 2", Grammar::Postgres).unwrap_err().contains("2 statements"));
    }

    #[test]
    fn canonical_text_ignores_formatting_only() {
        assert_eq!(canonical_text("INSERT INTO log\n  VALUES ( 'A b' ) ;"), "insert into log values('A b')");
        assert_eq!(canonical_text("SELECT \"Mixed\"  /* c */ FROM t"), "select \"Mixed\" from t");
        assert_ne!(canonical_text("ANALYZE t1"), canonical_text("ANALYZE t2"));
    }
}
