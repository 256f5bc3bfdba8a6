//! The relations a query reads by name, from its AST: what the load checks against the project's
//! model names, so a query naming another model's table directly (`FROM s.b`, written by hand or
//! produced by a macro) instead of through `ref` is refused ([`crate::project::bare_model_names`]).
//!
//! Only table references count (`FROM`/`JOIN` items, in subqueries and CTEs too): a string
//! literal, a column or a table function named like a model is not a read of it, and a one-part
//! name a `WITH` in scope defines is the CTE's.

use sqlparser::ast::{Query, TableFactor, Visit, Visitor};
use std::ops::ControlFlow;

/// One relation a query reads by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedRelation {
    /// The name's parts as written, without quotes (`["s", "b"]` for `s.b`).
    pub parts: Vec<String>,
    /// The 1-based line of the query the name starts at, when known.
    pub line: Option<u64>,
}

/// Every relation `sql` (one query) reads by a name, in order of appearance, except one-part
/// names a `WITH` in scope defines; `None` when sqlparser (its DuckDB dialect, or its Postgres
/// dialect when `postgres`) cannot read `sql` as one query.
#[must_use]
pub fn named_relations(sql: &str, postgres: bool) -> Option<Vec<NamedRelation>> {
    let parsed = if postgres { super::canon::parse_query_in(&sqlparser::dialect::PostgreSqlDialect {}, sql) } else { super::canon::parse_query(sql) };
    let query = parsed.ok()?;
    let mut v = Names::default();
    let _ = query.visit(&mut v);
    Some(v.found)
}

#[derive(Default)]
struct Names {
    /// The CTE names (lower case) of each enclosing query, innermost last.
    scopes: Vec<Vec<String>>,
    found: Vec<NamedRelation>,
}

impl Visitor for Names {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let ctes: Vec<String> = query.with.as_ref().map(|w| w.cte_tables.iter().map(|c| c.alias.name.value.to_lowercase()).collect()).unwrap_or_default();
        self.scopes.push(ctes);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
        self.scopes.pop();
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        // A table function (`read_csv(…)`) has arguments: not a relation read by name.
        let TableFactor::Table { name, args: None, .. } = factor else { return ControlFlow::Continue(()) };
        let idents: Option<Vec<&sqlparser::ast::Ident>> = name.0.iter().map(|p| p.as_ident()).collect();
        let Some(idents) = idents else { return ControlFlow::Continue(()) };
        let parts: Vec<String> = idents.iter().map(|i| i.value.clone()).collect();
        // (A CTE's body is inside its `WITH`'s scope: `WITH b AS (SELECT … FROM b)` counts as
        // the CTE's, a conservative reading of a recursive one.)
        if let [one] = parts.as_slice() {
            let one = one.to_lowercase();
            if self.scopes.iter().any(|s| s.contains(&one)) {
                return ControlFlow::Continue(());
            }
        }
        let line = idents.first().map(|i| i.span.start.line).filter(|l| *l > 0);
        self.found.push(NamedRelation { parts, line });
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> Vec<String> {
        named_relations(sql, false).expect("parses").into_iter().map(|r| r.parts.join(".")).collect()
    }

    #[test]
    fn table_references_are_read_from_the_ast() {
        assert_eq!(names("SELECT x FROM s.b"), ["s.b"]);
        assert_eq!(names("SELECT a.x FROM s.a AS a JOIN \"S\".\"B\" AS b USING (x) WHERE x IN (SELECT x FROM dev__s.c)"), ["s.a", "S.B", "dev__s.c"]);
        assert_eq!(names("FROM s.b"), ["s.b"]);
        let lines: Vec<Option<u64>> =
            named_relations("SELECT x\nFROM \"@ref\"\nJOIN s.b USING (x)", false).expect("parses").into_iter().map(|r| r.line).collect();
        assert_eq!(lines, [Some(2), Some(3)]);
    }

    #[test]
    fn literals_columns_functions_and_ctes_are_not_model_reads() {
        assert_eq!(names("SELECT 's.b' AS t, s.b FROM \"@ref\" AS s"), ["@ref"]);
        assert_eq!(names("SELECT * FROM read_csv('s.b')"), Vec::<String>::new());
        assert_eq!(names("WITH b AS (SELECT 1 AS x) SELECT x FROM b"), Vec::<String>::new());
        // A CTE shadows a one-part name only, and only where it is in scope.
        assert_eq!(names("WITH b AS (SELECT 1 AS x) SELECT x FROM s.b"), ["s.b"]);
        assert_eq!(names("SELECT * FROM (WITH b AS (SELECT 1 AS x) SELECT x FROM b) AS t, b"), ["b"]);
        assert!(named_relations("SELECT x FROM s.b WHERE", false).is_none());
    }
}
