//! Whether a time-range model's `@start`/`@end` filter can reach the scan of what it filters.
//!
//! A time-range model is computed batch by batch: its query runs once per batch with the
//! batch's bounds. When the relation the bounds filter is a table (or a parquet file), DuckDB
//! pushes the filter into the scan and skips what lies outside the batch. When it is a `view` or
//! `embedded` model whose shape stops the filter (a window function not partitioned by the
//! filtered column, `QUALIFY` over one, an aggregate not grouped by it, `DISTINCT ON`, `LIMIT`),
//! every batch recomputes that whole relation; when the filter ends on a CSV or JSON file, every
//! batch reads the whole file (those formats have no statistics to skip rows by). Neither is
//! wrong, but the batches cost as much as computing everything each time: [`batch_rescans`]
//! finds those cases from the SQL ASTs, without any database, for `efmesh check` to warn about.
//!
//! The analysis follows DuckDB's filter pushdown rules on the AST, and is conservative: it warns
//! only when it can follow the filtered column from the model down to the blocking relation
//! (plain column references and expressions of one column, through aliases, joins, `*`, CTEs and
//! subqueries); any shape it cannot follow (set operations, table functions other than file
//! readers, several columns in one expression) ends the search without a warning.

use crate::core::dag::Dag;
use crate::core::fragment::CanonicalResolver;
use crate::core::kind::{External, FileFormat, Kind};
use crate::core::model::Model;
use crate::core::name::ModelName;
use sqlparser::ast::{
    BinaryOperator, Distinct, Expr, GroupByExpr, Ident, NamedWindowExpr, ObjectNamePart, Query, Select, SelectItem, SetExpr, TableFactor, Value, Visit,
    Visitor, WindowType,
};
use std::ops::ControlFlow;

/// A time-range model whose every batch re-reads or re-computes a whole relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRescan {
    /// The parent the model's `@start`/`@end` filter is on.
    pub parent: ModelName,
    /// The filtered column of that parent.
    pub column: String,
    /// The model where the filter stops: the parent itself or one of its `view`/`embedded`
    /// ancestors (an external for a CSV or JSON file).
    pub culprit: ModelName,
    /// Why, e.g. "it computes `row_number() OVER (PARTITION BY m.move_id …)` over all its rows".
    pub reason: String,
}

/// Longest chain of `view`/`embedded` models followed (the DAG has no cycles; this bounds work).
const MAX_DEPTH: usize = 64;

/// Every parent of the time-range model `model` that its `@start`/`@end` filter reads and that
/// the filter cannot reach the scan of, with why; empty for other kinds, for models whose SQL
/// sqlparser cannot parse, and whenever the analysis cannot follow the filter.
pub fn batch_rescans(dag: &Dag, model: &Model) -> Vec<BatchRescan> {
    if !matches!(model.kind, Kind::IncrementalByTimeRange(_)) {
        return Vec::new();
    }
    let Some(query) = body_query(model) else { return Vec::new() };
    let mut found = Vec::new();
    for (parent, column) in bound_filtered_columns(dag, &query) {
        if found.iter().any(|f: &BatchRescan| f.parent == parent && f.column.eq_ignore_ascii_case(&column)) {
            continue;
        }
        if let Some((culprit, reason)) = trace(dag, &parent, &column) {
            found.push(BatchRescan { parent, column, culprit, reason });
        }
    }
    found
}

/// The parents' columns a model's `@start`/`@end` filter compares (followed through aliases,
/// CTEs and subqueries to the parent it reads), as `(parent, column)`: a plain column reference
/// compared with a bound (`>=`, `<`, `BETWEEN`…) in a `WHERE` or a join's `ON`. Empty when the
/// body does not parse or no such filter can be followed.
pub fn bound_filters(dag: &Dag, model: &Model) -> Vec<(ModelName, String)> {
    body_query(model).map(|q| bound_filtered_columns(dag, &q)).unwrap_or_default()
}

fn body_query(model: &Model) -> Option<Query> {
    let sql = model.body.as_ref()?.render(&CanonicalResolver);
    crate::sql::canon::parse_query(&sql).ok().map(|q| *q)
}

/// Follows the filter on `column` of `model` down its `view`/`embedded` ancestors: the model
/// where it stops and why, or `None` when it reaches a table's, a parquet file's or an unknown
/// relation's scan (or cannot be followed).
fn trace(dag: &Dag, model: &ModelName, column: &str) -> Option<(ModelName, String)> {
    let (mut model, mut column) = (model.clone(), column.to_string());
    for _ in 0..MAX_DEPTH {
        let m = dag.get(&model)?;
        match &m.kind {
            // With hive partitioning, a filter on a partition column skips whole files: no warning.
            Kind::External(External::Files { path, format: format @ (FileFormat::Csv | FileFormat::Json), hive_partitioning, .. })
                if *hive_partitioning != Some(true) =>
            {
                let what = if *format == FileFormat::Csv { "CSV" } else { "JSON" };
                return Some((model, format!("it reads the {what} file `{path}`, which has no statistics to skip rows by")));
            }
            Kind::View | Kind::Embedded => {
                let query = body_query(m)?;
                match through_query(dag, &query, &column, &[]) {
                    Step::Blocked(reason) => return Some((model, reason)),
                    Step::Parent(parent, col) => (model, column) = (parent, col),
                    Step::Stop => return None,
                }
            }
            _ => return None,
        }
    }
    None
}

/// Where a filter on an output column of a query goes.
enum Step {
    /// It cannot pass this query: why.
    Blocked(String),
    /// It reaches this column of this model.
    Parent(ModelName, String),
    /// It reaches something that is not a model (or the analysis cannot follow it).
    Stop,
}

/// The filter on output `column` of `query`; `ctes` are the common table expressions visible
/// from outside it (innermost last).
fn through_query<'q>(dag: &Dag, query: &'q Query, column: &str, ctes: &[&'q sqlparser::ast::Cte]) -> Step {
    if query.limit_clause.is_some() || query.fetch.is_some() {
        return Step::Blocked("its `LIMIT` keeps rows chosen among all its rows, so the time filter cannot be applied before it".into());
    }
    let mut visible: Vec<&sqlparser::ast::Cte> = ctes.to_vec();
    if let Some(with) = &query.with {
        visible.extend(with.cte_tables.iter());
    }
    match query.body.as_ref() {
        SetExpr::Select(select) => through_select(dag, select, column, &visible),
        SetExpr::Query(q) => through_query(dag, q, column, &visible),
        _ => Step::Stop,
    }
}

fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// The expression `select` computes its output `column` with, when it can be told.
fn output_expr(select: &Select, column: &str) -> Option<Expr> {
    for item in &select.projection {
        match item {
            SelectItem::ExprWithAlias { expr, alias } if same(&alias.value, column) => return Some(expr.clone()),
            SelectItem::UnnamedExpr(e @ Expr::Identifier(i)) if same(&i.value, column) => return Some(e.clone()),
            SelectItem::UnnamedExpr(e @ Expr::CompoundIdentifier(parts)) if parts.last().is_some_and(|i| same(&i.value, column)) => return Some(e.clone()),
            _ => {}
        }
    }
    // Not named in the list: a `*` (or `t.*`) provides it.
    select.projection.iter().find_map(|item| match item {
        SelectItem::Wildcard(_) => Some(Expr::Identifier(Ident::new(column))),
        SelectItem::QualifiedWildcard(sqlparser::ast::SelectItemQualifiedWildcardKind::ObjectName(name), _) => {
            let mut parts: Vec<Ident> = name.0.iter().filter_map(ObjectNamePart::as_ident).cloned().collect();
            parts.push(Ident::new(column));
            Some(Expr::CompoundIdentifier(parts))
        }
        _ => None,
    })
}

fn function_name(f: &sqlparser::ast::Function) -> String {
    f.name.0.last().and_then(ObjectNamePart::as_ident).map(|i| i.value.to_lowercase()).unwrap_or_default()
}

/// Functions of `expr` that are windowed (`OVER`) and that aggregate (no `OVER`), outside
/// subqueries.
fn functions(expr: &Expr) -> (Vec<sqlparser::ast::Function>, bool) {
    struct V {
        windows: Vec<sqlparser::ast::Function>,
        aggregate: bool,
        depth: usize,
    }
    impl Visitor for V {
        type Break = ();
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if self.depth == 0
                && let Expr::Function(f) = e
            {
                if f.over.is_some() {
                    self.windows.push(f.clone());
                } else if super::AGGREGATES.contains(&function_name(f).as_str()) {
                    self.aggregate = true;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = V { windows: Vec::new(), aggregate: false, depth: 0 };
    let _ = expr.visit(&mut v);
    (v.windows, v.aggregate)
}

/// The one column `expr` reads (outside subqueries), when it reads exactly one.
fn single_column(expr: &Expr) -> Option<Vec<Ident>> {
    let mut cols: Vec<Vec<Ident>> = Vec::new();
    let mut subquery = false;
    let _ = sqlparser::ast::visit_expressions(expr, |e| {
        match e {
            Expr::Identifier(i) => cols.push(vec![i.clone()]),
            Expr::CompoundIdentifier(parts) => cols.push(parts.clone()),
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::In { target: sqlparser::ast::InTarget::Subquery(_), .. } | Expr::Lambda(_) => subquery = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    // `a.b` also visits its parts on some versions: keep the longest references only.
    cols.dedup();
    if subquery || cols.is_empty() {
        return None;
    }
    let first = cols[0].clone();
    cols.iter().all(|c| c.iter().map(|i| i.value.to_lowercase()).eq(first.iter().map(|i| i.value.to_lowercase()))).then_some(first)
}

fn expr_key(e: &Expr) -> String {
    e.to_string().to_lowercase()
}

/// True when `e` (a `GROUP BY` or `PARTITION BY` key of `select`) may be `target` (the expression
/// of the filtered column): the same text, the output column `column` by name or by position
/// (`GROUP BY 1`), or a column reference with the same column name whatever its qualifier
/// (`e.day` and `day`). Generous on purpose: a key taken for the column only costs a warning
/// not given; a key not recognised would be a false alarm.
fn is_key(select: &Select, e: &Expr, target: &Expr, column: &str) -> bool {
    fn column_name(e: &Expr) -> Option<&str> {
        match e {
            Expr::Identifier(i) => Some(&i.value),
            Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.as_str()),
            Expr::Nested(inner) => column_name(inner),
            _ => None,
        }
    }
    let names = |e: &Expr| {
        expr_key(e) == expr_key(target)
            || column_name(e).is_some_and(|n| same(n, column))
            || column_name(e).zip(column_name(target)).is_some_and(|(a, b)| same(a, b))
    };
    if names(e) {
        return true;
    }
    // `GROUP BY 2`: the second output column.
    if let Expr::Value(v) = e
        && let Ok(n) = v.to_string().parse::<usize>()
        && let Some(item) = n.checked_sub(1).and_then(|i| select.projection.get(i))
    {
        return match item {
            SelectItem::UnnamedExpr(x) => names(x),
            SelectItem::ExprWithAlias { expr, alias } => same(&alias.value, column) || names(expr),
            // A position into `*`: not followed, taken as the column (no false alarm).
            _ => true,
        };
    }
    false
}

/// Shortens SQL text for a message.
fn short(sql: &str) -> String {
    let one_line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 80 { format!("{}…", one_line.chars().take(79).collect::<String>()) } else { one_line }
}

fn through_select<'q>(dag: &Dag, select: &'q Select, column: &str, ctes: &[&'q sqlparser::ast::Cte]) -> Step {
    let Some(target) = output_expr(select, column) else { return Step::Stop };
    // Window functions anywhere in the list or in QUALIFY: the filter passes one only when the
    // filtered column is one of its PARTITION BY keys.
    let mut windows = Vec::new();
    let mut aggregate = false;
    for item in &select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            let (w, a) = functions(e);
            windows.extend(w);
            aggregate |= a;
        }
    }
    if let Some(q) = &select.qualify {
        windows.extend(functions(q).0);
    }
    for f in &windows {
        let partition: Vec<Expr> = match &f.over {
            Some(WindowType::WindowSpec(spec)) => spec.partition_by.clone(),
            Some(WindowType::NamedWindow(name)) => select
                .named_window
                .iter()
                .find(|d| same(&d.0.value, &name.value))
                .and_then(|d| match &d.1 {
                    NamedWindowExpr::WindowSpec(spec) => Some(spec.partition_by.clone()),
                    NamedWindowExpr::NamedWindow(_) => None,
                })
                .unwrap_or_default(),
            None => Vec::new(),
        };
        if !partition.iter().any(|p| is_key(select, p, &target, column)) {
            let clause = if select.qualify.is_some() { "a `QUALIFY` on " } else { "" };
            return Step::Blocked(format!(
                "it computes {clause}`{}` over all its rows, and `{column}` is not one of its `PARTITION BY` keys",
                short(&Expr::Function(f.clone()).to_string())
            ));
        }
    }
    if let Some(Distinct::On(_)) = &select.distinct {
        // DuckDB pushes no filter through `DISTINCT ON`, even one on its keys (DuckDB 1.5.5).
        return Step::Blocked("its `DISTINCT ON` picks one row per key among all its rows, and DuckDB applies no filter before it".into());
    }
    if functions(&target).1 {
        return Step::Blocked(format!("`{column}` is an aggregate over all its rows"));
    }
    // Grouped by the column (`GROUP BY ALL` groups by every non-aggregate output): the filter
    // passes; grouped by other keys, or aggregated into one row: it does not.
    let grouped_by_column = match &select.group_by {
        GroupByExpr::Expressions(keys, _) if !keys.is_empty() => Some(keys.iter().any(|k| is_key(select, k, &target, column))),
        GroupByExpr::All(_) => Some(true),
        _ => None,
    };
    match grouped_by_column {
        Some(false) => return Step::Blocked(format!("it aggregates all its rows (`GROUP BY`), and `{column}` is not one of the grouping keys")),
        None if aggregate || select.having.is_some() => return Step::Blocked("it aggregates all its rows into one".into()),
        _ => {}
    }
    // Through the projection to the one column the expression reads.
    let Some(source) = single_column(&target) else { return Step::Stop };
    follow(dag, select, &source, ctes)
}

/// Every relation in `select`'s `FROM`, joins included: (qualifier it is known by, factor).
fn from_items(select: &Select) -> Vec<(Vec<String>, &TableFactor)> {
    fn add<'a>(out: &mut Vec<(Vec<String>, &'a TableFactor)>, f: &'a TableFactor) {
        match f {
            TableFactor::NestedJoin { table_with_joins, .. } => {
                add(out, &table_with_joins.relation);
                for j in &table_with_joins.joins {
                    add(out, &j.relation);
                }
            }
            TableFactor::Table { name, alias, .. } => {
                let names = match alias {
                    Some(a) => vec![a.name.value.to_lowercase()],
                    None => {
                        let parts: Vec<String> = name.0.iter().filter_map(ObjectNamePart::as_ident).map(|i| i.value.to_lowercase()).collect();
                        let mut names = vec![parts.join(".")];
                        names.extend(parts.last().cloned());
                        names
                    }
                };
                out.push((names, f));
            }
            TableFactor::Derived { alias, .. }
            | TableFactor::Function { alias, .. }
            | TableFactor::TableFunction { alias, .. }
            | TableFactor::UNNEST { alias, .. } => out.push((alias.iter().map(|a| a.name.value.to_lowercase()).collect(), f)),
            _ => out.push((Vec::new(), f)),
        }
    }
    let mut out = Vec::new();
    for t in &select.from {
        add(&mut out, &t.relation);
        for j in &t.joins {
            add(&mut out, &j.relation);
        }
    }
    out
}

/// The model a `FROM` table name is, when it is one.
fn model_named(dag: &Dag, name: &sqlparser::ast::ObjectName) -> Option<ModelName> {
    let text: Vec<String> = name.0.iter().filter_map(ObjectNamePart::as_ident).map(|i| i.value.clone()).collect();
    let name = ModelName::parse(&text.join(".")).ok()?;
    dag.get(&name).map(|m| m.name.clone())
}

/// Whether the relation `factor` has a column `column` (unknown: `None`).
fn declares(dag: &Dag, factor: &TableFactor, column: &str) -> Option<bool> {
    match factor {
        TableFactor::Table { name, args: None, .. } => {
            let model = dag.get(&model_named(dag, name)?)?;
            Some(model.relation_columns().iter().any(|c| same(&c.name, column)))
        }
        _ => None,
    }
}

/// The filter on column `reference` of `select`'s `FROM`: into the model, CTE or subquery it
/// comes from.
fn follow<'q>(dag: &Dag, select: &'q Select, reference: &[Ident], ctes: &[&'q sqlparser::ast::Cte]) -> Step {
    let items = from_items(select);
    let (column, factor) = match reference {
        [col] => {
            // Unqualified: the one relation, or the one relation that declares it.
            let candidates: Vec<&TableFactor> = if items.len() == 1 {
                vec![items[0].1]
            } else {
                let known: Vec<Option<bool>> = items.iter().map(|(_, f)| declares(dag, f, &col.value)).collect();
                if known.iter().any(Option::is_none) {
                    return Step::Stop;
                }
                items.iter().zip(known).filter(|(_, k)| *k == Some(true)).map(|((_, f), _)| *f).collect()
            };
            let [factor] = candidates.as_slice() else { return Step::Stop };
            (col.value.clone(), *factor)
        }
        [.., qualifier, col] => {
            let q = if reference.len() > 2 {
                reference[..reference.len() - 1].iter().map(|i| i.value.to_lowercase()).collect::<Vec<_>>().join(".")
            } else {
                qualifier.value.to_lowercase()
            };
            let Some((_, factor)) = items.iter().find(|(names, _)| names.contains(&q)) else { return Step::Stop };
            (col.value.clone(), *factor)
        }
        [] => return Step::Stop,
    };
    match factor {
        TableFactor::Table { name, args: None, .. } => {
            let text: Vec<String> = name.0.iter().filter_map(ObjectNamePart::as_ident).map(|i| i.value.to_lowercase()).collect();
            if let [one] = text.as_slice()
                && let Some(pos) = ctes.iter().rposition(|c| c.alias.name.value.to_lowercase() == *one)
            {
                let cte = ctes[pos];
                if !cte.alias.columns.is_empty() {
                    return Step::Stop;
                }
                return through_query(dag, &cte.query, &column, &ctes[..pos]);
            }
            match model_named(dag, name) {
                Some(model) => Step::Parent(model, column),
                None => Step::Stop,
            }
        }
        TableFactor::Table { name, args: Some(_), .. } => {
            let f = name.0.last().and_then(ObjectNamePart::as_ident).map(|i| i.value.to_lowercase()).unwrap_or_default();
            file_reader(&f).map_or(Step::Stop, Step::Blocked)
        }
        TableFactor::Function { name, .. } => {
            let f = name.0.last().and_then(ObjectNamePart::as_ident).map(|i| i.value.to_lowercase()).unwrap_or_default();
            file_reader(&f).map_or(Step::Stop, Step::Blocked)
        }
        TableFactor::Derived { subquery, alias, .. } => {
            if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
                return Step::Stop;
            }
            through_query(dag, subquery, &column, ctes)
        }
        _ => Step::Stop,
    }
}

/// Why a file reader written in the SQL cannot skip rows, for CSV and JSON readers.
fn file_reader(function: &str) -> Option<String> {
    let what = if function.starts_with("read_csv") {
        "CSV"
    } else if function.starts_with("read_json") || function.starts_with("read_ndjson") {
        "JSON"
    } else {
        return None;
    };
    Some(format!("it reads a {what} file (`{function}`), which has no statistics to skip rows by"))
}

/// True when `e` holds an `@start`/`@end` bound (rendered `$start`/`$end`) or another form of
/// one (`$start_date`, …).
fn has_bound(e: &Expr) -> bool {
    let mut found = false;
    let _ = sqlparser::ast::visit_expressions(e, |x| {
        if let Expr::Value(v) = x
            && let Value::Placeholder(p) = &v.value
            && (p == "$start" || p == "$end" || crate::core::fragment::Bound::ALL.iter().any(|(m, _)| p.strip_prefix('$') == Some(*m)))
        {
            found = true;
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

fn conjuncts(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp { left, op: sqlparser::ast::BinaryOperator::And, right } => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Expr::Nested(inner) => conjuncts(inner, out),
        other => out.push(other.clone()),
    }
}

/// The (parent, column) pairs the model's `@start`/`@end` comparisons filter: in every `SELECT`
/// of the query, each `WHERE` or `JOIN … ON` conjunct comparing a column with a bound.
fn bound_filtered_columns(dag: &Dag, query: &Query) -> Vec<(ModelName, String)> {
    struct V<'d> {
        dag: &'d Dag,
        found: Vec<(ModelName, String)>,
    }
    impl V<'_> {
        fn set_expr(&mut self, body: &SetExpr, ctes: &[&sqlparser::ast::Cte]) {
            match body {
                SetExpr::Select(select) => self.select(select, ctes),
                SetExpr::SetOperation { left, right, .. } => {
                    self.set_expr(left, ctes);
                    self.set_expr(right, ctes);
                }
                _ => {}
            }
        }
        fn select(&mut self, select: &Select, ctes: &[&sqlparser::ast::Cte]) {
            let mut parts = Vec::new();
            if let Some(w) = &select.selection {
                conjuncts(w, &mut parts);
            }
            for t in &select.from {
                for j in &t.joins {
                    use sqlparser::ast::{JoinConstraint, JoinOperator as J};
                    if let J::Join(JoinConstraint::On(e))
                    | J::Inner(JoinConstraint::On(e))
                    | J::Left(JoinConstraint::On(e))
                    | J::LeftOuter(JoinConstraint::On(e)) = &j.join_operator
                    {
                        conjuncts(e, &mut parts);
                    }
                }
            }
            for part in parts {
                let column = match &part {
                    Expr::BinaryOp { left, op: BinaryOperator::Gt | BinaryOperator::GtEq | BinaryOperator::Lt | BinaryOperator::LtEq, right } => {
                        if has_bound(right) && !has_bound(left) {
                            left.as_ref().clone()
                        } else if has_bound(left) && !has_bound(right) {
                            right.as_ref().clone()
                        } else {
                            continue;
                        }
                    }
                    Expr::Between { expr, negated: false, low, high } if (has_bound(low) || has_bound(high)) && !has_bound(expr) => expr.as_ref().clone(),
                    _ => continue,
                };
                let reference = match column {
                    Expr::Identifier(i) => vec![i],
                    Expr::CompoundIdentifier(parts) => parts,
                    _ => continue,
                };
                if let Step::Parent(model, col) = follow(self.dag, select, &reference, ctes) {
                    self.found.push((model, col));
                }
            }
        }
        fn query(&mut self, query: &Query, outer: &[&sqlparser::ast::Cte]) {
            let mut ctes: Vec<&sqlparser::ast::Cte> = outer.to_vec();
            if let Some(with) = &query.with {
                ctes.extend(with.cte_tables.iter());
            }
            self.set_expr(&query.body, &ctes);
        }
    }
    // Every query in the body (CTEs and subqueries included), each with the CTEs its `WITH`
    // declares; a bound filter in a CTE or subquery is followed from there.
    struct All<'a> {
        queries: Vec<&'a Query>,
    }
    fn collect<'a>(q: &'a Query, all: &mut All<'a>) {
        all.queries.push(q);
        if let Some(with) = &q.with {
            for c in &with.cte_tables {
                collect(&c.query, all);
            }
        }
        fn set<'a>(s: &'a SetExpr, all: &mut All<'a>) {
            match s {
                SetExpr::Select(select) => {
                    for t in &select.from {
                        for f in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
                            if let TableFactor::Derived { subquery, .. } = f {
                                collect(subquery, all);
                            }
                        }
                    }
                }
                SetExpr::Query(q) => collect(q, all),
                SetExpr::SetOperation { left, right, .. } => {
                    set(left, all);
                    set(right, all);
                }
                _ => {}
            }
        }
        set(&q.body, all);
    }
    let mut all = All { queries: Vec::new() };
    collect(query, &mut all);
    let mut v = V { dag, found: Vec::new() };
    // CTEs of the outermost query are visible in all of them (close enough: names are unique
    // in the bodies this looks at, and an unresolved name only ends the search).
    let top: Vec<&sqlparser::ast::Cte> = query.with.iter().flat_map(|w| w.cte_tables.iter()).collect();
    for q in all.queries {
        if std::ptr::eq(q, query) {
            v.query(q, &[]);
        } else {
            v.query(q, &top);
        }
    }
    v.found
}
