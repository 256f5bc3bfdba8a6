//! Whether an audit's result depends on nothing but the relation under audit.
//!
//! A promotion reuses a recorded audit pass only when the audits' result is fixed by the data of
//! the version they audit (SPEC §4 invariant 44). That holds for an audit whose SQL reads no
//! relation but the one under audit (no other table, view or table function, in any subquery)
//! and calls no function whose result changes from one run to the next (`now()`,
//! `current_date`, `random()`, …). Anything this module cannot prove — a parse error, an unknown
//! shape — counts as reading more, so its audits run at every promotion.

use sqlparser::ast::{ObjectName, Statement, visit_relations};
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::BTreeSet;
use std::ops::ControlFlow;

/// The name the relation under audit is given while the SQL is inspected.
const PLACEHOLDER: &str = "_efmesh_audited_relation";

/// Words naming functions or values that differ between runs over the same data. Matched
/// against every bare word of the SQL, case-insensitively, so a column with one of these names
/// also counts (conservative: its audits just run again).
const VOLATILE: &[&str] = &[
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
    "random",
    "setseed",
    "uuid",
    "gen_random_uuid",
    "nextval",
    "currval",
    "getenv",
    "current_setting",
];

/// True when `sql` (an audit body rendered with `this` standing for the relation under audit)
/// provably reads no relation but `this` and calls no volatile function; false when it reads
/// anything else or cannot be parsed as one query.
pub fn reads_only(render: impl Fn(&str) -> String) -> bool {
    let sql = render(PLACEHOLDER);
    let dialect = DuckDbDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, &sql).tokenize() else { return false };
    if tokens.iter().any(|t| matches!(t, Token::Word(w) if w.quote_style.is_none() && VOLATILE.iter().any(|v| w.value.eq_ignore_ascii_case(v)))) {
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
}
