//! Which columns of its relations a query can see beyond those it is known to read: what decides
//! whether a parent's *added* columns (a non-breaking change) may change a child that is
//! otherwise unchanged (`plan`'s indirect categorisation).
//!
//! A child keeps its table under a parent that only added columns when nothing in its query
//! resolves differently with them. That fails for `*` (its shape grows), and for every construct
//! that takes a relation's column list as it is: `NATURAL JOIN` (joins on every shared name), a
//! column-list alias `FROM p AS t(x)` (positional), `COLUMNS(…)`, a whole-row reference
//! (`to_json(t)`), a qualified `t.*` passed to a function, a `PIVOT` (it groups by every column
//! it does not name), and DuckDB's `FROM p` without `SELECT`. And an unqualified name binds to
//! the first relation in scope that has it: a name the parent gains can capture a reference that
//! bound to an outer query (a correlated subquery), to another relation of a join (now
//! ambiguous, also a `USING (k)` column), to a select alias, or to a struct column whose field a
//! dotted name reads (`info.city`). So the query's unqualified names, `USING` names and the
//! first parts of dotted names that are no relation's are kept, and the parent's added names are
//! checked against them.
//!
//! A dotted name's first part is taken for a relation (which no added column captures) only
//! where it names a relation of the reference's own `SELECT` (an alias, an unaliased table's
//! name): DuckDB binds `z.k` to a relation `z` of the same `FROM` before a struct column `z`, but
//! to a struct column `z` of a subquery's own relations before an outer query's relation `z`. So
//! in `SELECT z.k FROM src.z AS z WHERE EXISTS (SELECT 1 FROM m.p AS p WHERE p.k = z.k)` the
//! inner `z.k` is a name `m.p` gaining a struct column `z` captures. The rule looks at that one
//! scope only, never at where the parent is read: a relation `z` of an outer query (or of any
//! other scope) discounts nothing, at worst rebuilding a child for nothing.
//!
//! DuckDB also binds a keyword function written without parentheses (`current_date`,
//! `localtime`, `current_timestamp`…) to a column of that name of the query's relations, and a
//! function argument `a = 1` (sqlparser's named argument, DuckDB's comparison: `count_if(a = 1)`)
//! names a column `a`: both are unqualified names (a named parameter `header := true` is not).
//!
//! DuckDB's dot call `d.abs()` (`abs(d)`; `p.v.abs()`, `l.list_transform(x -> x * 2)`) is read by
//! sqlparser as a call of a function `abs` in a schema `d`. DuckDB looks for that function first
//! and, finding none, binds `d` as a column reference, so the name parts before the function's
//! are kept as a reference like any other (`d` an unqualified name, `p` of `p.v` the first part
//! of a dotted one): `WHERE d.abs() > 30` over a select alias `d` reads a parent's new column `d`
//! instead. Where it was a schema's function after all, a parent adding a column of the schema's
//! name only rebuilds the child for nothing.

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArgOperator, FunctionArguments, JoinConstraint, JoinOperator, Query, Select, SelectFlavor, SelectItem, SetExpr,
    TableFactor, TableWithJoins, Visit, Visitor,
};
use std::collections::BTreeSet;
use std::ops::ControlFlow;

/// What a query sees of its relations' column lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnSight {
    /// Every added column may change it (one of the constructs of the module docs, or a query
    /// sqlparser cannot read).
    Whole,
    /// Only an added column named like one of these unqualified names (lower case) may.
    Names(BTreeSet<String>),
}

impl ColumnSight {
    /// Whether a parent adding `added` (lower-case names; `None`: not known) may change the
    /// query's result.
    #[must_use]
    pub fn sees(&self, added: Option<&BTreeSet<String>>) -> bool {
        match (self, added) {
            (ColumnSight::Whole, _) => true,
            (ColumnSight::Names(names), Some(added)) => added.iter().any(|a| names.contains(a)),
            (ColumnSight::Names(names), None) => !names.is_empty(),
        }
    }
}

/// The [`ColumnSight`] of one query (`sql` as the canonical render gives it), read with
/// sqlparser's DuckDB dialect, or its Postgres dialect when `postgres`.
#[must_use]
pub fn column_sight(sql: &str, postgres: bool) -> ColumnSight {
    let parsed = if postgres { super::canon::parse_query_in(&sqlparser::dialect::PostgreSqlDialect {}, sql) } else { super::canon::parse_query(sql) };
    let Ok(query) = parsed else { return ColumnSight::Whole };
    let mut v = Sight { dot_calls: !postgres, keyword_columns: !postgres, ..Sight::default() };
    let _ = query.visit(&mut v);
    if v.whole || v.names.iter().any(|n| v.relations.contains(n)) {
        return ColumnSight::Whole;
    }
    // `info.city` reads a struct column `info` unless `info` names a relation of its own
    // `SELECT` ([`Sight::head`]): a parent gaining a column `info` may capture it.
    v.names.extend(v.heads);
    ColumnSight::Names(v.names)
}

/// The constraint of a join, whatever its kind (`ON`, `USING`, `NATURAL`, none).
pub(crate) fn constraint(op: &JoinOperator) -> Option<&JoinConstraint> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightAnti(c)
        | JoinOperator::StraightJoin(c)
        | JoinOperator::AsOf { constraint: c, .. } => Some(c),
        _ => None,
    }
}

#[derive(Default)]
struct Sight {
    whole: bool,
    names: BTreeSet<String>,
    /// First parts of dotted names (`info` of `info.city`) that name no relation of the
    /// reference's own `SELECT`, lower case.
    heads: BTreeSet<String>,
    /// Relation names and aliases (lower case), anywhere in the query: an unqualified name equal
    /// to one may be a whole-row reference.
    relations: BTreeSet<String>,
    /// The names a dotted reference may qualify by in each query and `SELECT` being visited
    /// ([`scope_names`]), innermost last.
    scopes: Vec<BTreeSet<String>>,
    /// Whether `x.f(…)` may be DuckDB's dot call `f(x, …)`; to Postgres it is only a function
    /// `f` of a schema `x`, which no added column captures.
    dot_calls: bool,
    /// Whether a keyword function without parentheses (`current_date`) may be a column: DuckDB
    /// binds a column of that name first; to Postgres the unquoted keyword is the function.
    keyword_columns: bool,
}

impl Sight {
    /// Keeps `head`, the first part of a dotted name, as a name a parent's new struct column may
    /// capture, unless it names a relation of the innermost scope: DuckDB binds it there to that
    /// relation before any column, but looks for a column of that name in a subquery's own
    /// relations before an outer query's relations.
    fn head(&mut self, head: String) {
        if !self.scopes.last().is_some_and(|s| s.contains(&head)) {
            self.heads.insert(head);
        }
    }

    /// A `FROM` item's joins: a `NATURAL` one sees every shared name; the names of a
    /// `USING (k)` are names an added column can make ambiguous.
    fn joins(&mut self, twj: &TableWithJoins) {
        for j in &twj.joins {
            match constraint(&j.join_operator) {
                Some(JoinConstraint::Natural) => self.whole = true,
                Some(JoinConstraint::Using(cols) | JoinConstraint::UsingAlias(cols, _)) => {
                    self.names.extend(cols.iter().filter_map(|c| c.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase())));
                }
                _ => {}
            }
        }
    }
}

impl Visitor for Sight {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if query.with.as_ref().is_some_and(|w| w.cte_tables.iter().any(|c| !c.alias.columns.is_empty())) {
            self.whole = true;
        }
        // The query's `ORDER BY` reads its `SELECT`'s relations (a set operation's: none).
        let names = match query.body.as_ref() {
            SetExpr::Select(s) => scope_names(&s.from),
            _ => BTreeSet::new(),
        };
        self.scopes.push(names);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
        self.scopes.pop();
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        self.scopes.push(scope_names(&select.from));
        if select.flavor == SelectFlavor::FromFirstNoSelect
            || select.projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)))
        {
            self.whole = true;
        }
        for twj in &select.from {
            self.joins(twj);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, _select: &Select) -> ControlFlow<()> {
        self.scopes.pop();
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        match factor {
            // A `PIVOT` groups by every column it does not name.
            TableFactor::Pivot { .. } => self.whole = true,
            TableFactor::NestedJoin { table_with_joins, .. } => self.joins(table_with_joins),
            _ => {}
        }
        let (name, alias) = match factor {
            TableFactor::Table { name, alias, .. } => (name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()), alias.as_ref()),
            TableFactor::Derived { alias, .. } | TableFactor::UNNEST { alias, .. } | TableFactor::Function { alias, .. } => (None, alias.as_ref()),
            _ => (None, None),
        };
        self.relations.extend(name);
        if let Some(a) = alias {
            self.relations.insert(a.name.value.to_lowercase());
            if !a.columns.is_empty() {
                self.whole = true;
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        match expr {
            Expr::Identifier(i) => {
                self.names.insert(i.value.to_lowercase());
            }
            Expr::CompoundIdentifier(parts) => {
                if let Some(head) = parts.first() {
                    self.head(head.value.to_lowercase());
                }
            }
            Expr::Wildcard(_) | Expr::QualifiedWildcard(..) => self.whole = true,
            Expr::Function(f) => {
                let name = f.name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()).unwrap_or_default();
                if name == "columns" {
                    self.whole = true;
                }
                // A keyword function without parentheses (`current_date`): a column of that name
                // if a relation has one.
                if self.keyword_columns
                    && matches!(f.args, FunctionArguments::None)
                    && let [part] = f.name.0.as_slice()
                    && let Some(id) = part.as_ident()
                {
                    self.names.insert(id.value.to_lowercase());
                }
                // A dot call `d.abs()` / `p.v.abs()`: the parts before the function's name are a
                // column reference (or a schema's name, which no added column changes).
                if let Some((_, receiver)) = f.name.0.split_last()
                    && self.dot_calls
                {
                    let parts: Option<Vec<String>> = receiver.iter().map(|p| p.as_ident().map(|i| i.value.to_lowercase())).collect();
                    match parts.as_deref() {
                        None => self.whole = true,
                        Some([]) => {}
                        Some([one]) => {
                            self.names.insert(one.clone());
                        }
                        Some([head, ..]) => self.head(head.clone()),
                    }
                }
                if let FunctionArguments::List(list) = &f.args {
                    for arg in &list.args {
                        // `count_if(a = 1)`: sqlparser's argument named `a`, DuckDB's comparison
                        // of a column `a` (its named parameters are `name := value`).
                        if let FunctionArg::Named { name: compared, operator: FunctionArgOperator::Equals, .. } = arg {
                            self.names.insert(compared.value.to_lowercase());
                        }
                        let e = match arg {
                            FunctionArg::Unnamed(e) | FunctionArg::Named { arg: e, .. } | FunctionArg::ExprNamed { arg: e, .. } => e,
                        };
                        // `count(*)` counts rows; `struct_pack(*)`, `to_json(t.*)` take the columns.
                        match e {
                            FunctionArgExpr::Wildcard if name != "count" => self.whole = true,
                            FunctionArgExpr::QualifiedWildcard(_) => self.whole = true,
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// The names a dotted reference in a `SELECT` over `from` may qualify by (lower case): each
/// relation's alias, an unaliased table's name (its last part), the relations of an unaliased
/// parenthesised join. Only these keep a dotted name's first part from being a struct column's
/// name a parent may capture ([`Sight::head`]).
fn scope_names(from: &[TableWithJoins]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for twj in from {
        for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match factor {
                TableFactor::Table { name, alias: None, .. } => out.extend(name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase())),
                TableFactor::NestedJoin { table_with_joins, alias: None, .. } => out.extend(scope_names(std::slice::from_ref(table_with_joins.as_ref()))),
                TableFactor::Table { alias: Some(a), .. }
                | TableFactor::Derived { alias: Some(a), .. }
                | TableFactor::TableFunction { alias: Some(a), .. }
                | TableFactor::Function { alias: Some(a), .. }
                | TableFactor::UNNEST { alias: Some(a), .. }
                | TableFactor::NestedJoin { alias: Some(a), .. }
                | TableFactor::Pivot { alias: Some(a), .. }
                | TableFactor::Unpivot { alias: Some(a), .. } => {
                    out.insert(a.name.value.to_lowercase());
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn constructs_taking_a_column_list_as_it_is_see_every_added_column() {
        for sql in [
            "SELECT * FROM s.a",
            "SELECT a.* FROM s.a AS a",
            "FROM s.a",
            "SELECT id FROM s.a NATURAL JOIN s.c",
            "SELECT x FROM s.a AS t(x)",
            "WITH w(x) AS (SELECT * FROM s.a) SELECT x FROM w",
            "SELECT to_json(t) FROM s.a AS t",
            "SELECT CAST(t AS VARCHAR) FROM s.a AS t",
            "SELECT struct_pack(*) FROM s.a",
            "SELECT to_json(t.*) FROM s.a AS t",
            "SELECT COLUMNS('^n') FROM s.a",
            "SELECT concat(*COLUMNS(*)) FROM s.a",
            "SELECT id FROM s.a WHERE",
            "SELECT g, x FROM s.c PIVOT (sum(v) FOR cat IN ('x' AS x))",
            "SELECT a.id FROM (s.a AS a NATURAL JOIN s.c AS c)",
        ] {
            assert_eq!(column_sight(sql, false), ColumnSight::Whole, "{sql}");
        }
    }

    #[test]
    fn unqualified_names_are_what_an_added_column_can_capture() {
        let sight = column_sight(
            "SELECT o.id, (SELECT count(*) FROM s.a AS i WHERE i.id = o.id AND amount > 6) AS n FROM raw.t AS o JOIN s.c USING (id) ORDER BY n",
            false,
        );
        // `o` of the subquery's `o.id` too: a struct column `o` of `s.a` would come before the
        // outer relation `o` ([`Sight::head`]).
        assert_eq!(sight, ColumnSight::Names(names(&["amount", "id", "n", "o"])));
        assert!(sight.sees(Some(&names(&["amount"]))));
        assert!(!sight.sees(Some(&names(&["name"]))));
        assert!(sight.sees(None));
        // Qualified names and `count(*)` see nothing of what a parent adds.
        let qualified = column_sight("SELECT a.id, count(*) AS n FROM s.a AS a JOIN s.c AS c ON a.id = c.id GROUP BY a.id", false);
        assert_eq!(qualified, ColumnSight::Names(BTreeSet::new()));
        assert!(!qualified.sees(None));
        assert_eq!(column_sight("SELECT t.x FROM s.a AS t(x)", true), ColumnSight::Whole);
        // A join's `USING` names, and a struct column's name before a dot (not a relation's).
        assert_eq!(
            column_sight("SELECT a.id, info.city FROM s.a AS a JOIN raw.t AS t USING (k) WHERE a.x > 1", false),
            ColumnSight::Names(names(&["info", "k"]))
        );
    }

    #[test]
    fn a_dot_calls_receiver_is_a_name_an_added_column_can_capture() {
        // `d.abs()` is `abs(d)`: over a select alias `d`, a parent gaining a column `d` binds it
        // instead (DuckDB binds a relation's column before a select alias).
        let sight = column_sight("SELECT a.id, a.v * 2 AS d FROM m.p AS a WHERE d.abs() > 30", false);
        assert_eq!(sight, ColumnSight::Names(names(&["d"])));
        assert!(sight.sees(Some(&names(&["d"]))));
        assert!(!sight.sees(Some(&names(&["e"]))));
        // Unqualified receivers, in the select list, a chained call and a lambda's body.
        for (sql, name) in [
            ("SELECT a.id, s.len() AS n FROM m.p AS a", "s"),
            ("SELECT a.id, l2.list_sum().abs() AS n FROM m.p AS a", "l2"),
            ("SELECT a.id, list_transform(a.l, x -> x * k.abs()) AS n FROM m.p AS a", "k"),
            ("SELECT a.id, a.l.list_transform(x -> x + w.abs()) AS n FROM m.p AS a", "w"),
        ] {
            assert!(column_sight(sql, false).sees(Some(&names(&[name]))), "{sql}");
        }
        // A qualified receiver `info.v.abs()`: a struct column `info`, unless `info` names a
        // relation (`a.v.abs()` is the relation's column).
        assert_eq!(column_sight("SELECT a.id, info.v.abs() AS n FROM m.p AS a", false), ColumnSight::Names(names(&["info"])));
        assert_eq!(column_sight("SELECT a.id, a.v.abs() AS n FROM m.p AS a", false), ColumnSight::Names(BTreeSet::new()));
        // A relation's name as the receiver is a whole-row reference.
        assert_eq!(column_sight("SELECT a.to_json() AS j FROM m.p AS a", false), ColumnSight::Whole);
        // To Postgres `s.f(x)` is a function of a schema `s` only.
        assert_eq!(column_sight("SELECT a.id, s.f(a.v) AS n FROM m.p AS a", true), ColumnSight::Names(BTreeSet::new()));
    }

    #[test]
    fn a_dotted_name_is_a_struct_column_a_parent_may_add_unless_a_relation_of_its_own_select_has_the_name() {
        // The subquery's `z.k`: DuckDB looks for a struct column `z` of `m.p` before the outer
        // relation `z`, so `m.p` gaining a column `z` captures it.
        let exists = column_sight("SELECT z.k, z.zone FROM src.z AS z WHERE EXISTS (SELECT 1 FROM m.p AS p WHERE p.k = z.k)", false);
        assert_eq!(exists, ColumnSight::Names(names(&["z"])));
        assert!(exists.sees(Some(&names(&["z"]))));
        let scalar = column_sight("SELECT z.k, (SELECT max(p.id) FROM m.p AS p WHERE p.k = z.k) AS m FROM src.z AS z", false);
        assert!(scalar.sees(Some(&names(&["z"]))), "{scalar:?}");
        // In its own `SELECT` (its `ORDER BY` included), the relation `z` comes first; so does an
        // unaliased table's name.
        for sql in [
            "SELECT z.k FROM src.z AS z JOIN m.p AS p ON p.k = z.k ORDER BY z.k",
            "SELECT z.k FROM src.z AS z WHERE EXISTS (SELECT 1 FROM m.p AS p, src.y AS z WHERE p.k = z.k)",
            "SELECT z.k FROM src.z",
        ] {
            assert_eq!(column_sight(sql, false), ColumnSight::Names(BTreeSet::new()), "{sql}");
        }
        // A table aliased otherwise no longer has its name: `z.k` may be a struct's field.
        assert_eq!(column_sight("SELECT z.k FROM src.z AS y", false), ColumnSight::Names(names(&["z"])));
    }

    #[test]
    fn a_keyword_function_without_parentheses_is_a_name_an_added_column_can_capture() {
        // DuckDB binds `current_date` to a column `current_date` when a relation has one.
        let sight = column_sight("SELECT id, current_date AS d, localtimestamp AS t FROM m.p", false);
        assert_eq!(sight, ColumnSight::Names(names(&["current_date", "id", "localtimestamp"])));
        assert!(sight.sees(Some(&names(&["current_date"]))));
        // Another added column does not reach it; a call with parentheses is the function.
        assert!(!sight.sees(Some(&names(&["today"]))));
        assert_eq!(column_sight("SELECT p.id, current_date() AS d FROM m.p AS p", false), ColumnSight::Names(BTreeSet::new()));
        // To Postgres the unquoted keyword is the function.
        assert_eq!(column_sight("SELECT p.id, current_date AS d FROM m.p AS p", true), ColumnSight::Names(BTreeSet::new()));
    }

    #[test]
    fn an_argument_written_name_equals_value_names_a_column_and_a_named_parameter_does_not() {
        // sqlparser reads `count_if(a = 1)` as an argument named `a`; DuckDB compares a column `a`.
        let sight = column_sight("SELECT p.id, count_if(a = 1) AS c, sum(if(x = 7, p.b, 0)) AS t FROM m.p AS p GROUP BY p.id", false);
        assert_eq!(sight, ColumnSight::Names(names(&["a", "x"])));
        assert!(sight.sees(Some(&names(&["a"]))));
        // `k := v` names a parameter `k`: only `v` is a column.
        assert_eq!(column_sight("SELECT struct_pack(k := v) AS s FROM m.p", false), ColumnSight::Names(names(&["v"])));
    }
}
