//! Whether an audit's result depends on nothing but the relation under audit.
//!
//! A promotion reuses a recorded audit pass only when the audits' result is fixed by the data of
//! the version they audit (SPEC §4 invariant 44). That holds for an audit whose SQL reads no
//! relation but the one under audit (no other table, view or table function, in any subquery)
//! and calls no function whose result changes from one run to the next (`now()`,
//! `current_date`, `random()`, `"now"()`, Postgres's `'today'::date`, …). Anything this module
//! cannot prove — a parse error, an unknown shape — counts as reading more, so its audits run at
//! every promotion.

use sqlparser::ast::{ObjectName, Statement, visit_relations};
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::BTreeSet;
use std::ops::ControlFlow;

/// The name the relation under audit is given while the SQL is inspected.
const PLACEHOLDER: &str = "_efmesh_audited_relation";

/// Words naming functions or values that differ between runs over the same data, in DuckDB or
/// Postgres. Matched against every bare word of the SQL, case-insensitively, so a column with one
/// of these names also counts (conservative: its audits just run again), and against a quoted
/// word followed by `(`, which calls the function all the same (`"now"()`).
const VOLATILE: &[&str] = &[
    // The clock.
    "now",
    "today",
    "current_date",
    "current_time",
    "current_timestamp",
    "current_localtime",
    "current_localtimestamp",
    "localtime",
    "localtimestamp",
    "get_current_time",
    "get_current_timestamp",
    "transaction_timestamp",
    "statement_timestamp",
    "clock_timestamp",
    "timeofday",
    // Randomness: values, and samples (`TABLESAMPLE`, DuckDB's `USING SAMPLE`).
    "random",
    "random_normal",
    "setseed",
    "uuid",
    "uuidv4",
    "uuidv7",
    "gen_random_uuid",
    "uuid_generate_v1",
    "uuid_generate_v1mc",
    "uuid_generate_v4",
    "tablesample",
    "sample",
    // Postgres 16's random array functions.
    "array_sample",
    "array_shuffle",
    // Sequences, the process environment, settings and session variables.
    "getvariable",
    "nextval",
    "currval",
    "getenv",
    "current_setting",
];

/// Names that are volatile only as a call (as bare words they are common column names):
/// Postgres's one-argument `age(ts)` counts from today's midnight.
const VOLATILE_CALLS: &[&str] = &["age"];

/// Words that, in a string literal cast to a date or time type, read the clock when the query
/// runs: Postgres's special inputs (`'today'::date`, `TIMESTAMP 'now'`, `'tomorrow 10:00'`).
/// DuckDB refuses them, but an audit is scanned without knowing its engine. Any string literal
/// holding one of them as a word counts, cast or not (conservative: an implicit cast reads it too,
/// and a text that merely says "now" only costs a re-run of its audits).
const RELATIVE_DATES: &[&str] = &["now", "today", "tomorrow", "yesterday"];

/// True when the tokens call a volatile function ([`VOLATILE`], [`VOLATILE_CALLS`]) or hold a
/// string literal naming a relative date ([`RELATIVE_DATES`]).
fn calls_volatile(tokens: &[Token]) -> bool {
    let named = |list: &[&str], word: &str| list.iter().any(|v| word.eq_ignore_ascii_case(v));
    let significant: Vec<&Token> = tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_))).collect();
    significant.iter().enumerate().any(|(i, token)| {
        let call = matches!(significant.get(i + 1), Some(Token::LParen));
        match token {
            Token::Word(w) => ((w.quote_style.is_none() || call) && named(VOLATILE, w.value.as_str())) || (call && named(VOLATILE_CALLS, w.value.as_str())),
            other => string_literal(other).is_some_and(|text| text.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| named(RELATIVE_DATES, w))),
        }
    })
}

/// The text of a string literal token, whatever its quoting (`'…'`, `E'…'`, `N'…'`, `U&'…'`,
/// `$$…$$`, …); `None` for any other token.
fn string_literal(token: &Token) -> Option<&str> {
    match token {
        Token::SingleQuotedString(s)
        | Token::DoubleQuotedString(s)
        | Token::TripleSingleQuotedString(s)
        | Token::TripleDoubleQuotedString(s)
        | Token::NationalStringLiteral(s)
        | Token::EscapedStringLiteral(s)
        | Token::UnicodeStringLiteral(s) => Some(s.as_str()),
        Token::DollarQuotedString(d) => Some(d.value.as_str()),
        _ => None,
    }
}

/// True when `sql` (an audit body rendered with `this` standing for the relation under audit)
/// provably reads no relation but `this` and calls no volatile function; false when it reads
/// anything else or cannot be parsed as one query.
pub fn reads_only(render: impl Fn(&str) -> String) -> bool {
    let sql = render(PLACEHOLDER);
    let dialect = DuckDbDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, &sql).tokenize() else { return false };
    if calls_volatile(&tokens) {
        return false;
    }
    // One token stream serves both the volatile-function scan above and the parse.
    let Ok(statements) = Parser::new(&dialect).with_tokens(tokens).parse_statements() else { return false };
    let [Statement::Query(_)] = statements.as_slice() else { return false };
    // Names a `WITH` defines may be read; every other relation must be the audited one.
    let mut ctes = BTreeSet::new();
    let _ = sqlparser::ast::visit_statements(&statements, |s| {
        if let Statement::Query(q) = s
            && let Some(with) = &q.with
        {
            ctes.extend(with.cte_tables.iter().map(|c| c.alias.name.value.to_ascii_lowercase()));
        }
        ControlFlow::<()>::Continue(())
    });
    let only_this = |name: &ObjectName| {
        let text = name.to_string().to_ascii_lowercase();
        text == PLACEHOLDER || (name.0.len() == 1 && ctes.contains(&text))
    };
    visit_relations(&statements, |name| if only_this(name) { ControlFlow::Continue(()) } else { ControlFlow::Break(()) }).is_continue()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sql: &str) -> bool {
        reads_only(|this| sql.replace("@this", this))
    }

    #[test]
    fn the_built_in_shapes_read_only_the_audited_relation() {
        assert!(check("SELECT * FROM @this WHERE a IS NULL OR b IS NULL"));
        assert!(check("SELECT a, count(*) AS duplicates FROM @this GROUP BY a HAVING count(*) > 1"));
        assert!(check("SELECT * FROM @this WHERE c IS NOT NULL AND c NOT IN ('x', 'y')"));
        assert!(check("WITH t AS (SELECT * FROM @this) SELECT * FROM t WHERE a < 0"));
    }

    #[test]
    fn another_relation_a_table_function_or_a_volatile_function_is_not_proven() {
        assert!(!check("SELECT * FROM @this WHERE region NOT IN (SELECT region FROM prod.regions)"));
        assert!(!check("SELECT * FROM @this JOIN s.other USING (id)"));
        assert!(!check("SELECT * FROM @this, read_csv('x.csv') AS f"));
        assert!(!check("SELECT * FROM @this WHERE ts < now() - INTERVAL 1 DAY"));
        assert!(!check("SELECT * FROM @this WHERE d < CURRENT_DATE"));
        assert!(!check("SELECT * FROM @this WHERE random() < 0.1"));
        assert!(!check("SELECT * FROM @this WHERE"), "a parse error proves nothing");
        assert!(!check("SELECT 1; SELECT * FROM @this"), "two statements prove nothing");
    }

    #[test]
    fn a_relative_date_literal_a_quoted_call_or_another_clock_or_random_function_is_not_proven() {
        // A freshness audit: reused at a promotion on a later day, its pass would be stale.
        assert!(!check("SELECT * FROM @this HAVING max(ts) < 'today'::date - 1"));
        for sql in [
            "SELECT * FROM @this WHERE ts < 'now'::timestamp",
            "SELECT * FROM @this WHERE d < DATE 'yesterday'",
            "SELECT * FROM @this WHERE d > CAST('Tomorrow' AS DATE)",
            "SELECT * FROM @this WHERE ts < TIMESTAMP 'tomorrow 10:00'",
            "SELECT * FROM @this WHERE d < 'today'",
            "SELECT * FROM @this WHERE ts < \"now\"()",
            "SELECT * FROM @this WHERE ts < \"CLOCK_TIMESTAMP\"()",
            "SELECT * FROM @this WHERE ts < clock_timestamp()",
            "SELECT * FROM @this WHERE ts < statement_timestamp()",
            "SELECT * FROM @this WHERE ts < transaction_timestamp()",
            "SELECT * FROM @this WHERE ts < timeofday()::timestamp",
            "SELECT * FROM @this WHERE ts < current_localtimestamp()",
            "SELECT * FROM @this WHERE t < get_current_time()",
            "SELECT * FROM @this WHERE id = uuidv4()",
            "SELECT * FROM @this WHERE id = uuidv7()",
            "SELECT * FROM @this WHERE id = gen_random_uuid()",
            "SELECT setseed(0.5), * FROM @this",
            "SELECT * FROM @this WHERE age(born) > INTERVAL '150 years'",
            "SELECT * FROM @this TABLESAMPLE SYSTEM (10)",
            "SELECT * FROM @this WHERE ts < getvariable('cutoff')",
            "SELECT array_sample(tags, 1), * FROM @this",
        ] {
            assert!(!check(sql), "{sql}");
        }
    }

    #[test]
    fn a_quoted_column_a_column_named_like_a_call_or_a_fixed_literal_is_still_proven() {
        // `"now"` and `age` are columns here, not calls; `'epoch'` is a fixed instant.
        assert!(check("SELECT * FROM @this WHERE \"now\" IS NULL"));
        assert!(check("SELECT * FROM @this WHERE age < 0"));
        assert!(check("SELECT * FROM @this WHERE ts < TIMESTAMP '2026-01-01' OR ts = 'epoch'::timestamp"));
        assert!(check("SELECT * FROM @this WHERE status NOT IN ('paid', 'open')"));
    }
}
