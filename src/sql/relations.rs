//! The relations a query reads by name, from its AST: what the load checks against the project's
//! model names, so a query naming another model's table directly (`FROM s.b`, written by hand or
//! produced by a macro) instead of through `ref` is refused ([`crate::project::bare_model_names`]).
//!
//! Only table references count (`FROM`/`JOIN` items, in subqueries and CTEs too): a string
//! literal, a column or a table function named like a model is not a read of it, and a one-part
//! name a `WITH` in scope defines is the CTE's.

use sqlparser::ast::{Query, SetExpr, TableFactor, Visit, Visitor};
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

/// For a query sqlparser cannot parse (DuckDB syntax it lacks: `ASOF JOIN`, `USING SAMPLE`,
/// `SELECT #1`, a bare `TABLE s.b`): the qualified names (two or three parts) that follow
/// `FROM`, `JOIN` or `TABLE` in its tokens, outside literals and comments, where that keyword
/// belongs to a query (at the top level, or in parentheses holding a `SELECT`: never the `FROM`
/// of `extract(day FROM o.created_at)`), and are not called as a table function. `None` when it
/// cannot even be tokenised.
#[must_use]
pub fn named_relations_by_tokens(sql: &str, postgres: bool) -> Option<Vec<NamedRelation>> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = if postgres {
        Tokenizer::new(&sqlparser::dialect::PostgreSqlDialect {}, sql).tokenize_with_location().ok()?
    } else {
        Tokenizer::new(&sqlparser::dialect::DuckDbDialect {}, sql).tokenize_with_location().ok()?
    };
    let tokens: Vec<_> = tokens.into_iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).collect();
    let mut found = Vec::new();
    // Per open parenthesis: whether it holds a query (a `SELECT` seen in it, or it opens with
    // `FROM`, `TABLE` or `WITH`: DuckDB's FROM-first form); the top level is one.
    let mut levels: Vec<bool> = vec![true];
    let word = |k: usize| match tokens.get(k).map(|t| &t.token) {
        Some(Token::Word(w)) => Some(w),
        _ => None,
    };
    // The name at `j`: its parts and the index after it.
    let name_at = |mut j: usize| -> (Vec<String>, usize) {
        let mut parts = Vec::new();
        while let Some(name) = word(j) {
            // A keyword (`LATERAL`…) unless it qualifies a name (`raw.orders`).
            let qualifies = tokens.get(j + 1).map(|t| &t.token) == Some(&Token::Period);
            if name.quote_style.is_none() && name.keyword != Keyword::NoKeyword && parts.is_empty() && !qualifies {
                break;
            }
            parts.push(name.value.clone());
            if qualifies {
                j += 2;
            } else {
                j += 1;
                break;
            }
        }
        (parts, j)
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].token {
            Token::LParen => {
                // Not a function's arguments: `trim(FROM s.b)` trims a field.
                let call = i > 0
                    && word(i - 1).is_some_and(|f| {
                        f.keyword == Keyword::NoKeyword
                            || matches!(f.keyword, Keyword::TRIM | Keyword::SUBSTRING | Keyword::EXTRACT | Keyword::OVERLAY | Keyword::POSITION)
                    });
                let opens_query = !call && word(i + 1).is_some_and(|w| matches!(w.keyword, Keyword::FROM | Keyword::TABLE | Keyword::WITH | Keyword::SELECT));
                levels.push(opens_query);
            }
            Token::RParen if levels.len() > 1 => {
                levels.pop();
            }
            Token::Word(w) if w.keyword == Keyword::SELECT => {
                if let Some(l) = levels.last_mut() {
                    *l = true;
                }
            }
            // (`IS [NOT] DISTINCT FROM x` compares, it reads nothing.)
            Token::Word(w)
                if matches!(w.keyword, Keyword::FROM | Keyword::JOIN | Keyword::TABLE)
                    && levels.last() == Some(&true)
                    && !(w.keyword == Keyword::FROM && i > 0 && word(i - 1).is_some_and(|p| p.keyword == Keyword::DISTINCT)) =>
            {
                // The relation, then any more of a comma-separated `FROM` list.
                let mut j = i + 1;
                loop {
                    let (parts, after) = name_at(j);
                    let called = tokens.get(after).map(|t| &t.token) == Some(&Token::LParen);
                    if (2..=3).contains(&parts.len()) && !called {
                        let line = Some(tokens[j].span.start.line).filter(|l| *l > 0);
                        found.push(NamedRelation { parts: parts.clone(), line });
                    }
                    if parts.is_empty() || w.keyword != Keyword::FROM {
                        break;
                    }
                    // An alias (`AS x`, `x`), then a comma goes on with the next relation.
                    let mut k = after;
                    if word(k).is_some_and(|a| a.keyword == Keyword::AS) {
                        k += 1;
                    }
                    if word(k).is_some_and(|a| a.keyword == Keyword::NoKeyword || a.quote_style.is_some()) {
                        k += 1;
                    }
                    if tokens.get(k).map(|t| &t.token) == Some(&Token::Comma) {
                        j = k + 1;
                    } else {
                        break;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    Some(found)
}

impl Names {
    fn tables_in(&mut self, body: &SetExpr) {
        match body {
            SetExpr::Table(t) => {
                let Some(table) = &t.table_name else { return };
                let idents: Vec<&sqlparser::ast::Ident> = t.schema_name.iter().chain(std::iter::once(table)).collect();
                self.push(&idents);
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.tables_in(left);
                self.tables_in(right);
            }
            _ => {}
        }
    }

    /// Records a relation named by `idents`, unless it is a one-part name a `WITH` in scope
    /// defines.
    fn push(&mut self, idents: &[&sqlparser::ast::Ident]) {
        let parts: Vec<String> = idents.iter().map(|i| i.value.clone()).collect();
        // (A CTE's body is inside its `WITH`'s scope: `WITH b AS (SELECT … FROM b)` counts as
        // the CTE's, a conservative reading of a recursive one.)
        if let [one] = parts.as_slice() {
            let one = one.to_lowercase();
            if self.scopes.iter().any(|s| s.contains(&one)) {
                return;
            }
        }
        let line = idents.first().map(|i| i.span.start.line).filter(|l| *l > 0);
        self.found.push(NamedRelation { parts, line });
    }
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
        // `TABLE s.b` (alone, or a side of a set operation) reads a relation too; it is no
        // table factor.
        self.tables_in(&query.body);
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
        self.push(&idents);
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> Vec<String> {
        named_relations(sql, false).unwrap_or_else(|| panic!("does not parse: {sql}")).into_iter().map(|r| r.parts.join(".")).collect()
    }

    #[test]
    fn table_references_are_read_from_the_ast() {
        assert_eq!(names("SELECT x FROM s.b"), ["s.b"]);
        assert_eq!(names("SELECT a.x FROM s.a AS a JOIN \"S\".\"B\" AS b USING (x) WHERE x IN (SELECT x FROM dev__s.c)"), ["s.a", "S.B", "dev__s.c"]);
        assert_eq!(names("FROM s.b"), ["s.b"]);
        assert_eq!(names("SELECT 1 AS x UNION ALL TABLE s.b"), ["s.b"]);
        assert_eq!(names("SELECT * FROM efmesh.s.b"), ["efmesh.s.b"]);
        let lines: Vec<Option<u64>> =
            named_relations("SELECT x\nFROM \"@ref\"\nJOIN s.b USING (x)", false).expect("parses").into_iter().map(|r| r.line).collect();
        assert_eq!(lines, [Some(2), Some(3)]);
    }

    /// What sqlparser cannot parse is read from its tokens: qualified names after `FROM`,
    /// `JOIN`, `TABLE` of a query, not the `FROM` of `extract`, not a table function, not in a
    /// literal or a comment.
    #[test]
    fn an_unparsed_query_is_read_from_its_tokens() {
        let names = |sql: &str| -> Vec<String> {
            assert!(named_relations(sql, false).is_none(), "parses: {sql}");
            named_relations_by_tokens(sql, false).expect("tokenises").into_iter().map(|r| r.parts.join(".")).collect()
        };
        assert_eq!(names("TABLE s.b"), ["s.b"]);
        assert_eq!(
            names(
                "SELECT extract(day FROM o.created_at) AS d, 'FROM s.x' AS l -- JOIN s.y\nFROM \"@ref\" AS o ASOF JOIN s.b AS b ON o.t >= b.t, read_csv.x.y('f')"
            ),
            ["s.b"]
        );
        assert_eq!(
            names("SELECT * FROM s.a USING SAMPLE 10% WHERE x IN (SELECT y FROM efmesh.s.c JOIN raw.orders USING (y))"),
            ["s.a", "efmesh.s.c", "raw.orders"]
        );
        // `IS DISTINCT FROM` compares; a comma list; DuckDB's FROM-first form in parentheses.
        assert_eq!(
            names(
                "SELECT * FROM \"@ref\" AS f ASOF JOIN \"@ref\" AS dim ON f.t >= dim.t WHERE f.c IS NOT DISTINCT FROM dim.customer AND f.c IS DISTINCT FROM dim.x"
            ),
            Vec::<String>::new()
        );
        assert_eq!(names("SELECT * FROM \"@ref\" AS o, s.b AS q, s.c ASOF JOIN (FROM s.d) AS e ON true UNION ALL (TABLE s.e)"), ["s.b", "s.c", "s.d", "s.e"]);
        assert_eq!(names("SELECT trim(FROM s.b) AS t FROM \"@ref\" AS s ASOF JOIN \"@ref\" AS u ON true WHERE x IN (FROM s.f SELECT x)"), ["s.f"]);
        let lines: Vec<Option<u64>> = named_relations_by_tokens("TABLE\n  s.b", false).unwrap().into_iter().map(|r| r.line).collect();
        assert_eq!(lines, [Some(2)]);
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
