//! Change categories: what kind of change a model's new version is, decided from the canonical
//! ASTs and declared metadata of the old and new definitions (sqlmesh's categories; reference
//! `core-semantics.md` §3, with the original's holes closed: a real `metadata` category, and
//! one JSON-tree diff that any dialect's canonical form plugs into).
//!
//! - `breaking`: the model's own definition changed in a way that may change existing rows or
//!   columns; descendants rebuild.
//! - `non-breaking`: only new output columns were added to the top-level projection (anywhere in
//!   it) and declared in the schema; nothing else changed. Descendants keep their physical tables
//!   — except an `scd_type2` model below a unique-key or partition model whose new version is
//!   served from another table: it lacks the rows the old table's refreshes kept, so its rows
//!   changed (`super::DropsKept`).
//! - `indirect`: the model's own definition is unchanged, a parent changed. It keeps its physical
//!   table when every changed parent leaves existing columns identical (non-breaking,
//!   forward-only, metadata, or indirect with reuse; not a keyed parent that lost its kept rows);
//!   otherwise it rebuilds.
//! - `forward-only` (operator's choice): the new version inherits the old physical table and its
//!   done intervals; new columns are added with `ALTER TABLE`.
//! - `metadata`: the fingerprint is unchanged but fields that do not shape data changed
//!   (description, batch size, lookback, start, end, audits): no rebuild; the promotion records
//!   the new metadata with the environment's pointer (other environments keep theirs).
//!
//! If non-breaking cannot be proven, the verdict is breaking.

use serde_json::Value;

/// Most diverged paths reported per model.
pub const MAX_PATHS: usize = 8;

/// The verdict on a model's own definition change.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnChange {
    /// True when only columns were added to the top-level projection (and schema).
    pub non_breaking: bool,
    /// Human-readable AST paths that diverged, e.g. `where`, `projection[3] (added)`.
    pub diverged: Vec<String>,
    /// Why the verdict followed.
    pub reason: String,
    /// True when the old schema's columns are all still declared, in order (no drop, no rename):
    /// the condition for an operator to declare the change non-breaking.
    pub keeps_columns: bool,
}

/// The old and new definition of one model, as comparable values.
#[derive(Debug, Clone)]
pub struct Definition<'a> {
    /// Canonical AST text (`None` for externals).
    pub canonical: Option<&'a str>,
    /// The kind's fingerprinted fields.
    pub kind: &'a Value,
    /// Declared `(column, type)` pairs.
    pub schema: &'a [(String, String)],
    /// Declared grain.
    pub grain: &'a [String],
    /// The data-relevant pre/post statements as fingerprinted
    /// ([`crate::sql::fingerprint::statements_payload`]); `None` when there are none or they are
    /// metadata.
    pub statements: Option<&'a Value>,
    /// True when the model has any pre/post statement, data-relevant or metadata: a statement
    /// acting on the model's own table (`DELETE FROM @this WHERE …`, `UPDATE @this SET …`) may
    /// read or write any column, so no change of the model is confined to some columns
    /// ([`changed_columns`]).
    pub has_statements: bool,
}

/// Compares an old and a new definition of the same model whose fingerprints differ by more than
/// their parents.
pub fn compare(old: &Definition<'_>, new: &Definition<'_>) -> OwnChange {
    let keeps_columns = is_subsequence(old.schema, new.schema);
    let breaking = |reason: String, diverged: Vec<String>| OwnChange { non_breaking: false, diverged, reason, keeps_columns };
    if old.kind.get("tag") != new.kind.get("tag") {
        return breaking(format!("the kind changed from `{}` to `{}`", tag(old.kind), tag(new.kind)), vec!["kind".into()]);
    }
    if old.kind != new.kind {
        let without_content = |k: &Value| {
            let mut k = k.clone();
            if let Some(o) = k.as_object_mut() {
                o.remove("content");
            }
            k
        };
        if tag(new.kind) == "seed" && without_content(old.kind) == without_content(new.kind) {
            return breaking("the seed file's content changed".into(), vec!["kind.content".into()]);
        }
        let mut paths = Vec::new();
        diff(old.kind, new.kind, "kind", &mut paths);
        return breaking(format!("data-shaping kind fields of `{}` changed", tag(new.kind)), paths);
    }
    if old.grain != new.grain {
        return breaking("the grain changed".into(), vec!["grain".into()]);
    }
    if old.statements != new.statements {
        return breaking("the data-relevant pre/post statements changed (`statements_affect_data`)".into(), vec!["statements".into()]);
    }
    let (Some(old_c), Some(new_c)) = (old.canonical, new.canonical) else {
        return breaking("the source definition changed".into(), vec!["source".into()]);
    };
    let (Ok(old_ast), Ok(new_ast)) = (serde_json::from_str::<Value>(old_c), serde_json::from_str::<Value>(new_c)) else {
        return breaking("the canonical ASTs could not be compared".into(), vec![]);
    };
    let mut diverged = Vec::new();
    diff(&old_ast, &new_ast, "", &mut diverged);
    let schema_paths = schema_diff(old.schema, new.schema);

    // Non-breaking: the old projection is an ordered subsequence of the new one, everything else
    // in the tree is equal, and the schema gained exactly as many columns, keeping the old ones.
    let projections = (projection(&old_ast), projection(&new_ast));
    if let (Some(op), Some(np)) = projections {
        let rest_equal = without_projection(&old_ast) == without_projection(&new_ast);
        if rest_equal && is_subsequence(op, np) && np.len() > op.len() {
            let added_items = added_positions(op, np);
            if let Some(why) = added_columns_change_rows(&new_ast, np, &added_items, op.len()) {
                return breaking(why, added_items.iter().map(|i| format!("projection[{i}] (added)")).collect());
            }
            let added_cols = new.schema.len().saturating_sub(old.schema.len());
            if keeps_columns && added_cols == added_items.len() {
                let diverged = added_items.iter().map(|i| format!("projection[{i}] (added)")).collect();
                return OwnChange {
                    non_breaking: true,
                    diverged,
                    reason: format!("only added output column{}: {}", if added_cols == 1 { "" } else { "s" }, added_names(old.schema, new.schema).join(", ")),
                    keeps_columns,
                };
            }
        }
    }
    if diverged.is_empty() && !schema_paths.is_empty() {
        return breaking("the declared schema changed".into(), schema_paths);
    }
    if !keeps_columns {
        let mut paths = diverged;
        paths.extend(schema_paths);
        paths.truncate(MAX_PATHS);
        return breaking("an existing column was removed, renamed, retyped or moved".into(), paths);
    }
    breaking("the query changed beyond adding output columns".into(), diverged)
}

/// The output columns a breaking change is confined to, when it provably leaves the rows alone:
/// the same kind, grain and query apart from some top-level select items, each item named (an
/// alias or a column), no `*`. The set (lower-case) holds the columns whose item or declared
/// type changed, and those added or removed. `None` ("anything may have changed") when the rows
/// could change: another clause changed, `DISTINCT`, `GROUP BY ALL`, positional `ORDER BY` /
/// `GROUP BY`, a clause keeping rows by their order (`LIMIT`, `OFFSET`, `FETCH`, `TOP`: which
/// tied rows it keeps follows the engine's plan, [`RowClauses::picks`]), a
/// changed item that aggregates without `GROUP BY`, calls a set-returning
/// function or any function not known to return one value per row ([`unknown_function`]), a clause outside the select list that names a changed column (DuckDB lets `WHERE`,
/// `HAVING`, `QUALIFY` and `ORDER BY` read select-list aliases), or a changed column the kind
/// keys rows by (`key_columns`: a time column, a unique key). Also `None` when either version
/// has pre/post statements ([`Definition::has_statements`], even metadata ones): they run on the
/// model's own table and may delete or rewrite rows by any column.
///
/// Children that read none of these columns keep their data (the plan's column impact, SPEC §4).
/// Items are compared by name only: a change that also removes a name (a drop, a rename) or
/// moves a kept column reshapes the column list, which the plan judges per child on top of
/// these columns (its `Reshape`: what the child's query sees of the list, its lineage against
/// the old columns).
pub fn changed_columns(old: &Definition<'_>, new: &Definition<'_>, key_columns: &[String]) -> Option<std::collections::BTreeSet<String>> {
    if old.kind != new.kind || old.grain != new.grain || old.statements != new.statements || old.has_statements || new.has_statements {
        return None;
    }
    let old_ast: Value = serde_json::from_str(old.canonical?).ok()?;
    let new_ast: Value = serde_json::from_str(new.canonical?).ok()?;
    let rest = without_projection(&new_ast);
    if without_projection(&old_ast) != rest {
        return None;
    }
    let named =
        |ast: &Value| -> Option<Vec<(String, Value)>> { projection(ast)?.iter().map(|item| Some((item_name(item)?.to_lowercase(), item.clone()))).collect() };
    let (old_items, new_items) = (named(&old_ast)?, named(&new_ast)?);
    let mut changed = std::collections::BTreeSet::new();
    let mut changed_items: Vec<&Value> = Vec::new();
    for (name, item) in &old_items {
        match new_items.iter().find(|(n, _)| n == name) {
            Some((_, new_item)) if new_item == item => {}
            Some((_, new_item)) => {
                changed.insert(name.clone());
                changed_items.extend([item, new_item]);
            }
            None => {
                changed.insert(name.clone());
                changed_items.push(item);
            }
        }
    }
    for (name, item) in &new_items {
        if !old_items.iter().any(|(n, _)| n == name) {
            changed.insert(name.clone());
            changed_items.push(item);
        }
    }
    for (name, ty) in old.schema {
        if new.schema.iter().any(|(n, t)| n == name && t != ty) {
            changed.insert(name.to_lowercase());
        }
    }
    if changed.is_empty() || changed.iter().any(|c| key_columns.iter().any(|k| k.eq_ignore_ascii_case(c))) {
        return None;
    }
    // What keeps the rows: the clauses outside the select list must not depend on it.
    let clauses = row_clauses(&new_ast)?;
    if clauses.distinct || clauses.group_by_all || clauses.positional_order() || clauses.positional_group() || clauses.order_by_all() || clauses.picks.is_some()
    {
        return None;
    }
    for item in &changed_items {
        if set_returning_call(item, clauses.pg).is_some() || (!clauses.has_group_by && calls_aggregate(item)) {
            return None;
        }
        if unknown_function(item, clauses.pg).is_some() {
            return None;
        }
    }
    let names: Vec<&str> = changed.iter().map(String::as_str).collect();
    if names_any(&rest, &names) {
        return None;
    }
    // DuckDB lets a select item read an earlier item's alias (`a * 2 AS b, b + 1 AS c`): an
    // unchanged item naming a changed or removed column may change with it.
    if new_items.iter().filter(|(n, _)| !changed.contains(n)).any(|(_, item)| names_any(item, &names)) {
        return None;
    }
    Some(changed)
}

/// The clauses outside the select list that decide which rows a query returns, read from either
/// parser's tree: sqlparser's (`body.Select`) or Postgres's (`node.SelectStmt`,
/// [`crate::sql::pg_canon`]).
struct RowClauses<'a> {
    /// A Postgres tree.
    pg: bool,
    distinct: bool,
    group_by_all: bool,
    /// An explicit `GROUP BY` list.
    has_group_by: bool,
    order_by: Option<&'a Value>,
    group_by: Option<&'a Value>,
    /// The clause that keeps only some rows by their order (`LIMIT`, `OFFSET`, `FETCH`, `TOP`),
    /// if any (`DISTINCT ON` counts under `distinct`). Which rows it keeps among rows that tie
    /// in that order (or in no order at all) is the engine's pick, which follows its plan: a
    /// column added to, or changed in, the select list changes the plan (DuckDB computes another
    /// window, projects other columns, sorts otherwise) and so may change which of the tied rows
    /// are kept. Whether the order is total (a unique key last) is not proven from the query, so
    /// such a clause alone keeps a change from leaving the rows alone. `QUALIFY` is not counted,
    /// though a tie in its window's order is the same pick: `QUALIFY row_number() OVER
    /// (PARTITION BY k ORDER BY ts DESC) = 1` is how a model keeps one row per key, its order is
    /// meant to be total, and counting it would make every column added to a deduplicating
    /// model a rebuild of everything downstream (a tie there is the query's own nondeterminism:
    /// a rebuild of the same version may pick another row too).
    picks: Option<&'static str>,
}

impl RowClauses<'_> {
    /// A positional reference (sqlparser's `Number`, Postgres's integer constant `ival`) in
    /// `ORDER BY`: it depends on the select list's order.
    fn positional_order(&self) -> bool {
        positional(self.order_by)
    }

    /// The same in `GROUP BY`.
    fn positional_group(&self) -> bool {
        positional(self.group_by)
    }

    /// `ORDER BY ALL`: sorts by every output column, so under a `LIMIT` it picks rows by them.
    fn order_by_all(&self) -> bool {
        self.order_by.is_some_and(|v| v.to_string().contains("\"All\""))
    }
}

fn positional(v: Option<&Value>) -> bool {
    v.is_some_and(|v| ["\"Number\"", "\"ival\""].iter().any(|k| v.to_string().contains(k)))
}

/// The [`RowClauses`] of `ast`, when it is a `SELECT` either parser wrote.
fn row_clauses(ast: &Value) -> Option<RowClauses<'_>> {
    let present = |v: Option<&Value>| v.is_some_and(|v| !v.is_null());
    if let Some(stmt) = pg_select(ast) {
        // Postgres's `FETCH FIRST n ROWS` is its `LIMIT n`.
        let picks = (present(stmt.get("limit_count")) || present(stmt.get("limit_offset"))).then_some("`LIMIT`/`OFFSET`/`FETCH`");
        return Some(RowClauses {
            pg: true,
            distinct: stmt.get("distinct_clause").and_then(Value::as_array).is_some_and(|d| !d.is_empty()),
            group_by_all: false,
            has_group_by: stmt.get("group_clause").and_then(Value::as_array).is_some_and(|g| !g.is_empty()),
            order_by: stmt.get("sort_clause"),
            group_by: stmt.get("group_clause"),
            picks,
        });
    }
    let select = ast.get("body")?.get("Select")?;
    let group = select.get("group_by");
    let exprs = group.and_then(|g| g.get("Expressions")).and_then(|e| e.get(0)).and_then(Value::as_array);
    let picks = [(ast.get("limit_clause"), "`LIMIT`/`OFFSET`"), (ast.get("fetch"), "`FETCH`"), (select.get("top"), "`TOP`")]
        .into_iter()
        .find_map(|(v, clause)| present(v).then_some(clause));
    Some(RowClauses {
        pg: false,
        distinct: select.get("distinct").is_some_and(|d| !d.is_null()),
        group_by_all: group.is_some_and(|g| g.get("All").is_some()),
        has_group_by: exprs.is_some_and(|e| !e.is_empty()),
        order_by: ast.get("order_by"),
        group_by: group,
        picks,
    })
}

/// Set-returning functions: one of them called in a select item multiplies the rows (DuckDB's
/// `unnest`/`unlist` and its macros over them, `regexp_split_to_table` and
/// `generate_subscripts`; table-valued JSON and regexp functions; Postgres's `generate_series`,
/// `regexp_matches`, whose names DuckDB's `range`, `generate_series` and `regexp_matches` share).
/// Judged first, on the names of the functions an item calls ([`set_returning_call`]), with
/// its own reason; any other function outside [`DUCKDB_ONE_VALUE`] / [`PG_ONE_VALUE`] is taken
/// as possibly set-returning as well ([`unknown_function`]).
pub const SET_RETURNING: &[&str] =
    &["unnest", "unlist", "generate_series", "range", "generate_subscripts", "regexp_split_to_table", "json_each", "json_tree", "jsonb_each", "regexp_matches"];

/// True when the JSON text of a tree (lower-cased) names `name` as an identifier or a function:
/// a name in either parser's tree is a JSON string, `"value":…` (sqlparser) or `"sval":…`
/// (Postgres), compared with the name's JSON spelling.
fn mentions(text: &str, name: &str) -> bool {
    let quoted = serde_json::to_string(name).unwrap_or_default();
    text.contains(&format!("\"value\":{quoted}")) || text.contains(&format!("\"sval\":{quoted}"))
}

/// The first set-returning function ([`SET_RETURNING`]) `item` calls, if any: judged on the
/// names of the functions it calls ([`called_functions`]), so a column merely named `range`
/// (`"range" * 2`) calls none.
fn set_returning_call(item: &Value, pg: bool) -> Option<String> {
    called_functions(item, pg).into_iter().find(|f| SET_RETURNING.contains(&f.as_str()))
}

/// True when `item` calls an aggregate function other than as a window function (`… OVER (…)`
/// keeps the rows): sqlparser's `Function` or Postgres's `FuncCall` whose name is an aggregate
/// and that has no `over`. Anywhere in the item, a scalar subquery's too (conservative).
fn calls_aggregate(item: &Value) -> bool {
    match item {
        Value::Object(m) => {
            let call = m.get("Function").map(|f| (f.get("name"), f.get("over"))).or_else(|| m.get("FuncCall").map(|f| (f.get("funcname"), f.get("over"))));
            if let Some((Some(name), over)) = call
                && over.is_none_or(Value::is_null)
            {
                let text = name.to_string().to_lowercase();
                if crate::sql::AGGREGATES.iter().any(|f| mentions(&text, f)) {
                    return true;
                }
            }
            m.values().any(calls_aggregate)
        }
        Value::Array(items) => items.iter().any(calls_aggregate),
        _ => false,
    }
}

/// True when the tree `v` names one of `names` (lower-case) as an identifier ([`mentions`]).
fn names_any(v: &Value, names: &[&str]) -> bool {
    let text = v.to_string().to_lowercase();
    names.iter().any(|c| mentions(&text, c))
}

/// True when the select item is a plain unqualified reference to a column of its own name (`x`,
/// `x AS x`): the same value under the same name, which shadows nothing. A qualified one
/// (`u.x AS x`) is not: under a `USING` join `x` may be another column, and `s.x` a struct field.
fn reads_itself(item: &Value) -> bool {
    let Some(name) = item_name(item).map(|n| n.to_lowercase()) else { return false };
    let last = |v: Option<&Value>| -> Option<String> {
        let v = v?;
        if let Some(id) = v.pointer("/Identifier/value") {
            return id.as_str().map(str::to_lowercase);
        }
        let fields = v.pointer("/node/ColumnRef/fields")?.as_array()?;
        if fields.len() != 1 {
            return None;
        }
        fields[0].pointer("/node/String/sval").and_then(Value::as_str).map(str::to_lowercase)
    };
    let expr = item.get("UnnamedExpr").or_else(|| item.pointer("/ExprWithAlias/expr")).or_else(|| item.pointer("/node/ResTarget/val"));
    last(expr).is_some_and(|n| n == name)
}

/// The output name of a top-level select item when the tree says it: its alias, or the column
/// it reads as is (sqlparser's `ExprWithAlias` / `Identifier` / `CompoundIdentifier`, Postgres's
/// `ResTarget.name` / `ColumnRef`). `None` for `*` and for names the engine generates.
fn item_name(item: &Value) -> Option<String> {
    if let Some(t) = item.pointer("/node/ResTarget") {
        if let Some(n) = t.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Some(n.to_string());
        }
        let fields = t.pointer("/val/node/ColumnRef/fields")?.as_array()?;
        return fields.last()?.pointer("/node/String/sval").and_then(Value::as_str).map(str::to_string);
    }
    if let Some(a) = item.get("ExprWithAlias") {
        return a.pointer("/alias/value").and_then(Value::as_str).map(str::to_string);
    }
    let e = item.get("UnnamedExpr")?;
    if let Some(v) = e.pointer("/Identifier/value") {
        return v.as_str().map(str::to_string);
    }
    e.get("CompoundIdentifier")?.as_array()?.last()?.get("value")?.as_str().map(str::to_string)
}

/// Why adding projection items at `added` would change the existing rows, if it would: a new
/// column is a new grouping key under `GROUP BY ALL`, changes which rows are distinct under
/// `DISTINCT`, folds rows with an aggregate, multiplies rows with a set-returning function or may
/// do either with a function not known to return one value per row ([`unknown_function`]),
/// shifts positional `ORDER BY` / `GROUP BY` references, or is added at a level with a clause
/// keeping rows by their order (`LIMIT`, `OFFSET`, `FETCH`, `TOP`), where it may change which
/// tied rows are kept ([`RowClauses::picks`]: an order is not proven total; not `QUALIFY`).
fn added_columns_change_rows(ast: &Value, projection: &[Value], added: &[usize], old_len: usize) -> Option<String> {
    let Some(clauses) = row_clauses(ast) else { return Some("the query is not a plain `SELECT`".into()) };
    if clauses.group_by_all && added.iter().any(|&i| !is_aggregate(&projection[i])) {
        return Some("a non-aggregate column added under `GROUP BY ALL` is a new grouping key, so existing rows change".into());
    }
    if clauses.distinct {
        return Some("a column added under `DISTINCT` changes which rows are distinct".into());
    }
    if clauses.order_by_all() {
        return Some("`ORDER BY ALL` sorts by every output column: an added one changes the order (and which rows a `LIMIT` keeps)".into());
    }
    // An aggregate added to a query that aggregated nothing, without `GROUP BY`, folds its rows
    // into one.
    let kept: Vec<usize> = (0..projection.len()).filter(|i| !added.contains(i)).collect();
    if !clauses.has_group_by
        && !clauses.group_by_all
        && added.iter().any(|&i| calls_aggregate(&projection[i]))
        && !kept.iter().all(|&i| is_aggregate(&projection[i]))
    {
        return Some("an aggregate added without `GROUP BY` to a query of other columns folds its rows into one".into());
    }
    // An added alias that other clauses or items may read instead of a source column of that
    // name (DuckDB resolves select-list aliases in `ORDER BY`, `WHERE`, `GROUP BY`, `HAVING`,
    // `QUALIFY` and later select items).
    let added_names: Vec<String> =
        added.iter().filter(|&&i| !reads_itself(&projection[i])).filter_map(|&i| item_name(&projection[i])).map(|n| n.to_lowercase()).collect();
    let added_names: Vec<&str> = added_names.iter().map(String::as_str).collect();
    if !added_names.is_empty() && (names_any(&without_projection(ast), &added_names) || kept.iter().any(|&i| names_any(&projection[i], &added_names))) {
        return Some("an added column's name is read elsewhere in the query, which may now read the new column instead of a source column".into());
    }
    // A known set-returning function first, with its own reason.
    for &i in added {
        if let Some(f) = set_returning_call(&projection[i], clauses.pg) {
            return Some(format!(
                "an added column calls `{f}`, a set-returning function: it may return a set of rows for each row, which multiplies (or drops) rows"
            ));
        }
    }
    // Any other function may return a set or fold the rows (a Postgres `RETURNS SETOF`, the many
    // JSON and text splitters; a DuckDB macro over `unnest` or over an aggregate, an extension's
    // function, an aggregate efmesh does not list): only functions known to return one value
    // per row keep the rows, and known aggregates, judged above.
    for &i in added {
        if let Some(f) = unknown_function(&projection[i], clauses.pg) {
            return Some(format!(
                "an added column calls `{f}`, which efmesh does not know to return one value per row: it may return a set of rows (a set-returning function multiplies rows) or fold them (an aggregate)"
            ));
        }
    }
    if added.iter().any(|&i| i < old_len) && (clauses.positional_order() || clauses.positional_group()) {
        return Some("a column inserted before others shifts positional `ORDER BY`/`GROUP BY` references".into());
    }
    if let Some(clause) = clauses.picks {
        return Some(format!(
            "{clause} keeps some rows by their order, and which of the rows tied in it are kept follows the engine's plan, which an added column changes"
        ));
    }
    None
}

/// Postgres functions known to return one value per input row (scalar and window functions): an
/// added column calling only these (or aggregates) cannot multiply rows.
const PG_ONE_VALUE: &[&str] = &[
    "abs",
    "round",
    "ceil",
    "ceiling",
    "floor",
    "trunc",
    "sign",
    "sqrt",
    "power",
    "exp",
    "ln",
    "log",
    "mod",
    "lower",
    "upper",
    "initcap",
    "length",
    "char_length",
    "octet_length",
    "substr",
    "substring",
    "trim",
    "btrim",
    "ltrim",
    "rtrim",
    "concat",
    "concat_ws",
    "replace",
    "split_part",
    "left",
    "right",
    "lpad",
    "rpad",
    "repeat",
    "reverse",
    "strpos",
    "position",
    "format",
    "md5",
    "to_char",
    "to_date",
    "to_timestamp",
    "to_number",
    "date_trunc",
    "date_part",
    "extract",
    "age",
    "make_date",
    "make_timestamp",
    "now",
    "timezone",
    "nullif",
    "greatest",
    "least",
    "to_json",
    "to_jsonb",
    "json_build_object",
    "jsonb_build_object",
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
];

/// DuckDB functions known to return one value per input row: the scalar functions of DuckDB
/// 1.5.5 (`duckdb_functions()`, `function_type = 'scalar'`) and its built-in scalar macros, plus
/// what sqlparser reads as a call (`coalesce`, `ifnull`, `if`, `try`, `current_date`…,
/// `grouping`). Left out, so taken as possibly changing the rows ([`unknown_function`]): the
/// names of [`SET_RETURNING`] (DuckDB's `range` and `generate_series` return a list and
/// `regexp_matches` a boolean, Postgres's return sets), the macros over `unnest`
/// (`regexp_split_to_table`, `generate_subscripts`) or over an aggregate (`geomean`,
/// `weighted_avg`, `json_group_array`…: in [`crate::sql::AGGREGATES`]), those over a subquery,
/// internal ones and those with side effects (`setseed`, `sleep_ms`, `write_log`; `error` is
/// in: it aborts the query, never changes its rows). In lower case, as calls are compared
/// ([`call_name`]; DuckDB's names ignore case: `formatReadableSize` is `formatreadablesize`).
/// Separated by whitespace, sorted. `tests/it/function_lists.rs` compares it with the linked
/// DuckDB's `duckdb_functions()`, so a DuckDB upgrade that adds or drops a function fails there.
pub const DUCKDB_ONE_VALUE: &str = "
abs acos acosh add age aggregate ago apply array_aggr array_aggregate array_append array_apply array_cat array_concat array_contains
array_cosine_distance array_cosine_similarity array_cross_product array_distance array_distinct array_dot_product array_extract array_filter
array_grade_up array_has array_has_all array_has_any array_indexof array_inner_product array_intersect array_length array_negative_dot_product
array_negative_inner_product array_pop_back array_pop_front array_position array_prepend array_push_back array_push_front array_reduce array_resize
array_reverse array_reverse_sort array_select array_slice array_sort array_to_json array_to_string array_transform array_unique array_value
array_where array_zip ascii asin asinh atan atan2 atanh bar base64 bin bit_count bit_length bit_position bitstring can_cast_implicitly cardinality
cast_to_type cbrt ceil ceiling century char_length character_length chr coalesce concat concat_ws constant_or_null contains cos cosh cot
create_sort_key current_catalog current_connection_id current_database current_date current_localtime current_localtimestamp current_query
current_query_id current_role current_schema current_schemas current_setting current_time current_timestamp current_transaction_id current_user
currval damerau_levenshtein date_add date_diff date_part date_sub date_trunc datediff datepart datesub datetrunc day dayname dayofmonth dayofweek
dayofyear days_in_month decade decode degrees divide editdist3 element_at encode ends_with enum_code enum_first enum_last enum_range
enum_range_boundary epoch epoch_ms epoch_ns epoch_us equi_width_bins era error even exp factorial fdiv filter flatten floor fmod format format_bytes
formatreadabledecimalsize formatreadablesize
from_base64 from_binary from_hex from_json from_json_strict gamma gcd gen_random_uuid get_bit get_current_time get_current_timestamp get_type
getvariable grade_up greatest greatest_common_divisor grouping grouping_id hamming hash hex hour icu_sort_key if ifnull ilike_escape in_search_path
instr is_histogram_other_bin isfinite isinf isnan isodow isoyear jaccard jaro_similarity jaro_winkler_similarity json json_array json_array_length
json_contains json_deserialize_sql json_exists json_extract json_extract_path json_extract_path_text json_extract_string json_keys json_merge_patch
json_object json_pretty json_quote json_structure json_transform json_transform_strict json_type json_valid json_value julian
last_day lcase lcm least least_common_multiple left left_grapheme len length length_grapheme levenshtein lgamma like_escape list_aggr list_aggregate
list_any_value list_append list_apply list_approx_count_distinct list_avg list_bit_and list_bit_or list_bit_xor list_bool_and list_bool_or list_cat
list_concat list_contains list_cosine_distance list_cosine_similarity list_count list_distance list_distinct list_dot_product list_element
list_entropy list_extract list_filter list_first list_grade_up list_has list_has_all list_has_any list_histogram list_indexof list_inner_product
list_intersect list_kurtosis list_kurtosis_pop list_last list_mad list_max list_median list_min list_mode list_negative_dot_product
list_negative_inner_product list_pack list_position list_prepend list_product list_reduce list_resize list_reverse list_reverse_sort list_select
list_sem list_skewness list_slice list_sort list_stddev_pop list_stddev_samp list_string_agg list_sum list_transform list_unique list_value
list_var_pop list_var_samp list_where list_zip ln localtime localtimestamp log log10 log2 lower lpad ltrim make_date make_time make_timestamp
make_timestamp_ms make_timestamp_ns make_timestamptz make_type map map_concat map_contains map_contains_entry map_contains_value map_entries
map_extract map_extract_value map_from_entries map_keys map_values md5 md5_number md5_number_lower md5_number_upper microsecond millennium millisecond
minute mismatches mod month monthname multiply nanosecond nextafter nextval nfc_normalize normalized_interval not_ilike_escape not_like_escape now
nullif octet_length ord parse_dirname parse_dirpath parse_filename parse_formatted_bytes parse_path pg_size_pretty pg_typeof pi position pow power
prefix printf quarter radians random reduce regexp_escape regexp_extract regexp_extract_all regexp_full_match regexp_replace regexp_split_to_array
remap_struct repeat replace replace_type reverse right right_grapheme round round_even roundbankers row row_to_json rpad rtrim second session_user
set_bit sha1 sha256 sign signbit sin sinh split split_part sqrt st_asbinary st_astext st_aswkb st_aswkt st_crs st_geomfromwkb st_intersects_extent
st_setcrs starts_with str_split str_split_regex strftime string_split string_split_regex string_to_array strip_accents strlen strpos strptime
struct_concat struct_contains struct_extract struct_extract_at struct_has struct_indexof struct_insert struct_keys struct_pack struct_position
struct_update struct_values substr substring substring_grapheme subtract suffix switch tan tanh time_bucket timezone timezone_hour timezone_minute
to_base to_base64 to_binary to_centuries to_days to_decades to_hex to_hours to_json to_microseconds to_millennia to_milliseconds to_minutes to_months
to_quarters to_seconds to_timestamp to_weeks to_years today transaction_timestamp translate trim trunc try try_strptime txid_current typeof ucase
unbin unhex unicode union_extract union_tag union_value upper url_decode url_encode user uuid uuid_extract_timestamp uuid_extract_version uuidv4
uuidv7 variant_extract variant_normalize variant_typeof vector_type version week weekday weekofyear xor year yearweek
";

/// True when `name` (lower case) is in [`DUCKDB_ONE_VALUE`].
fn duckdb_one_value(name: &str) -> bool {
    DUCKDB_ONE_VALUE.split_ascii_whitespace().any(|f| f == name)
}

/// The first function `item` calls that efmesh does not know to return one value per row, if
/// any: in a Postgres tree one outside [`PG_ONE_VALUE`], in a sqlparser (DuckDB) tree one outside
/// [`DUCKDB_ONE_VALUE`] called without `OVER` — a macro, a user's or an extension's function, a
/// table or set-returning function, an aggregate efmesh does not list. The aggregates of
/// [`crate::sql::AGGREGATES`] count as known: the callers judge them by the query's `GROUP BY`.
fn unknown_function(item: &Value, pg: bool) -> Option<String> {
    let known = |f: &str| crate::sql::AGGREGATES.contains(&f) || if pg { PG_ONE_VALUE.contains(&f) } else { duckdb_one_value(f) };
    called_functions(item, pg).into_iter().find(|f| !known(f.as_str()))
}

/// The names of the functions `item` calls: [`pg_functions`] in a Postgres tree,
/// [`duckdb_functions`] in a sqlparser one.
fn called_functions(item: &Value, pg: bool) -> Vec<String> {
    if pg { pg_functions(item) } else { duckdb_functions(item) }
}

/// The function a sqlparser call's name parts (`idents`) stand for, in lower case, dotted when
/// qualified. DuckDB's dot-call syntax `a.f(…)` (`tags.upper()`) is read by sqlparser as a call
/// of `a.f`, and so is a call of a function `f` the user defined in a schema `a` (a macro `CREATE
/// MACRO util.split(s) AS unnest(…)`, which DuckDB resolves before a built-in of that name): the
/// two cannot be told apart from the query, so a qualified name stays whole, not known, judged
/// conservatively (a column added with `tags.upper()` is breaking; `upper(tags)` is not).
fn call_name(idents: &[&str]) -> String {
    idents.iter().map(|p| p.to_lowercase()).collect::<Vec<_>>().join(".")
}

/// The names of the functions a sqlparser expression calls without `OVER` (a window function
/// returns one value per row, whatever it computes), at any depth, a scalar subquery's too
/// (conservative): each `Function`'s name as [`call_name`] reads it (a qualified or dot-call
/// name stays whole, so not known), its JSON text when a part of it is not an identifier.
fn duckdb_functions(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(f) = m.get("Function")
                    && let Some(parts) = f.get("name").and_then(Value::as_array)
                    && f.get("over").is_none_or(Value::is_null)
                {
                    let idents: Vec<&str> =
                        parts.iter().filter_map(|p| p.pointer("/Identifier/value").or_else(|| p.get("value")).and_then(Value::as_str)).collect();
                    if !idents.is_empty() && idents.len() == parts.len() {
                        out.push(call_name(&idents));
                    } else {
                        out.push(Value::Array(parts.clone()).to_string());
                    }
                }
                m.values().for_each(|c| walk(c, out));
            }
            Value::Array(items) => items.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

/// The names of the functions a Postgres expression calls (the last part of each `FuncCall`'s
/// name), at any depth.
fn pg_functions(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(names) = m.get("FuncCall").and_then(|f| f.get("funcname")).and_then(Value::as_array)
                    && let Some(last) = names.last().and_then(|n| n.pointer("/node/String/sval")).and_then(Value::as_str)
                {
                    out.push(last.to_ascii_lowercase());
                }
                m.values().for_each(|c| walk(c, out));
            }
            Value::Array(items) => items.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

/// The top-level `SELECT` of a Postgres tree ([`crate::sql::pg_canon`]), when `ast` is one.
fn pg_select(ast: &Value) -> Option<&Value> {
    ast.get("node")?.get("SelectStmt")
}

/// True when some projection in the canonical AST (top level, CTEs or subqueries) selects `*` or
/// `t.*` — not `count(*)`, whose argument is not a projection item. Either parser's tree:
/// sqlparser's `projection` items, or Postgres's `target_list` items whose column reference
/// ends in `A_Star`.
pub fn selects_star(canonical: &str) -> bool {
    fn pg_star(item: &Value) -> bool {
        let fields = item.pointer("/node/ResTarget/val/node/ColumnRef/fields").and_then(Value::as_array);
        fields.is_some_and(|f| f.iter().any(|x| x.pointer("/node/AStar").is_some()))
    }
    fn walk(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, child)| {
                (k == "projection"
                    && child.as_array().is_some_and(|items| items.iter().any(|i| i.get("Wildcard").is_some() || i.get("QualifiedWildcard").is_some())))
                    || (k == "target_list" && child.as_array().is_some_and(|items| items.iter().any(pg_star)))
                    || walk(child)
            }),
            Value::Array(items) => items.iter().any(walk),
            _ => false,
        }
    }
    serde_json::from_str::<Value>(canonical).is_ok_and(|v| walk(&v))
}

/// True when a projection item is an aggregate call (so `GROUP BY ALL` does not group by it).
fn is_aggregate(item: &Value) -> bool {
    // The item's expression must be an aggregate call at its root (possibly aliased or cast).
    fn root(v: &Value) -> Option<&Value> {
        let e = v.get("ExprWithAlias").and_then(|x| x.get("expr")).or_else(|| v.get("UnnamedExpr"))?;
        let mut e = e;
        while let Some(inner) = e.get("Cast").and_then(|c| c.get("expr")) {
            e = inner;
        }
        e.get("Function")
    }
    // A windowed aggregate (`count(*) OVER ()`) is one value per row.
    root(item)
        .filter(|f| f.get("over").is_none_or(Value::is_null))
        .and_then(|f| f.get("name"))
        .map(|n| n.to_string().to_ascii_lowercase())
        .is_some_and(|n| crate::sql::AGGREGATES.iter().any(|a| mentions(&n, a)))
}

fn tag(kind: &Value) -> &str {
    kind.get("tag").and_then(Value::as_str).unwrap_or("?")
}

/// The top-level projection: sqlparser's `body.Select.projection`, or Postgres's
/// `node.SelectStmt.target_list` (empty for a set operation, whose arms hold the lists: no
/// projection then).
fn projection(ast: &Value) -> Option<&Vec<Value>> {
    if let Some(stmt) = pg_select(ast) {
        return stmt.get("target_list")?.as_array().filter(|l| !l.is_empty());
    }
    ast.get("body")?.get("Select")?.get("projection")?.as_array()
}

fn without_projection(ast: &Value) -> Value {
    let mut v = ast.clone();
    if let Some(stmt) = v.get_mut("node").and_then(|n| n.get_mut("SelectStmt")).and_then(Value::as_object_mut) {
        stmt.remove("target_list");
    } else if let Some(sel) = v.get_mut("body").and_then(|b| b.get_mut("Select")).and_then(Value::as_object_mut) {
        sel.remove("projection");
    }
    v
}

/// True when every item of `old` appears in `new`, in order.
fn is_subsequence<T: PartialEq>(old: &[T], new: &[T]) -> bool {
    let mut it = new.iter();
    old.iter().all(|o| it.any(|n| n == o))
}

/// Positions in `new` not used by the greedy in-order match of `old`.
fn added_positions<T: PartialEq>(old: &[T], new: &[T]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut oi = 0;
    for (i, n) in new.iter().enumerate() {
        if oi < old.len() && old[oi] == *n {
            oi += 1;
        } else {
            out.push(i);
        }
    }
    out
}

fn added_names(old: &[(String, String)], new: &[(String, String)]) -> Vec<String> {
    added_positions(old, new).into_iter().map(|i| format!("`{}`", new[i].0)).collect()
}

fn schema_diff(old: &[(String, String)], new: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, ty) in old {
        match new.iter().find(|(n, _)| n == name) {
            None => out.push(format!("schema.{name} (removed)")),
            Some((_, t)) if t != ty => out.push(format!("schema.{name} (type {ty} → {t})")),
            _ => {}
        }
    }
    for (name, _) in new {
        if !old.iter().any(|(n, _)| n == name) {
            out.push(format!("schema.{name} (added)"));
        }
    }
    out
}

/// Readable name of a diverged path: the clause of sqlparser's `Query`/`Select` tree or of
/// Postgres's `SelectStmt` and its item index (`where`, `projection[2]`, `from[0]`), not the
/// AST's inner structure.
fn pretty(path: &str) -> String {
    let p = path.trim_start_matches('.');
    let p = p.strip_prefix("body.Select.").or_else(|| p.strip_prefix("node.SelectStmt.")).unwrap_or(p);
    // Keep the first segment and its index, drop the rest.
    let cut = p.find('.').map_or(p, |i| &p[..i]);
    let p = match cut.find(']') {
        Some(i) => &cut[..=i],
        None => cut,
    };
    for (from, to) in [
        ("selection", "where"),
        ("group_by", "group_by"),
        ("limit_clause", "limit"),
        ("order_by", "order_by"),
        ("from", "from"),
        ("with", "with"),
        // Postgres's names.
        ("where_clause", "where"),
        ("target_list", "projection"),
        ("from_clause", "from"),
        ("group_clause", "group_by"),
        ("having_clause", "having"),
        ("sort_clause", "order_by"),
        ("limit_count", "limit"),
        ("limit_offset", "offset"),
        ("with_clause", "with"),
    ] {
        if let Some(rest) = p.strip_prefix(from) {
            return format!("{to}{rest}");
        }
    }
    p.to_string()
}

/// Collects the shallowest diverging paths between two JSON trees (at most [`MAX_PATHS`]).
pub fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    if out.len() >= MAX_PATHS || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() && x.keys().eq(y.keys()) => {
            for (k, va) in x {
                diff(va, &y[k], &format!("{path}.{k}"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                diff(va, vb, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            let (short, long, what) = if x.len() < y.len() { (x, y, "added") } else { (y, x, "removed") };
            if is_subsequence(short, long) {
                for i in added_positions(short, long) {
                    push(out, format!("{}[{i}] ({what})", pretty(path)));
                }
            } else {
                push(out, format!("{} ({} → {} items)", pretty(path), x.len(), y.len()));
            }
        }
        _ => push(out, pretty(path)),
    }
}

fn push(out: &mut Vec<String>, path: String) {
    if out.len() < MAX_PATHS && !out.contains(&path) {
        out.push(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::canon::canonicalize;
    use serde_json::json;

    fn def<'a>(c: &'a str, schema: &'a [(String, String)], kind: &'a Value) -> Definition<'a> {
        Definition { canonical: Some(c), kind, schema, grain: &[], statements: None, has_statements: false }
    }
    fn cols(names: &[&str]) -> Vec<(String, String)> {
        names.iter().map(|n| (n.to_string(), "bigint".to_string())).collect()
    }
    /// `changed_columns` of two bodies over the same kind (`full`), schemas from their columns.
    fn changed(old_sql: &str, old_cols: &[&str], new_sql: &str, new_cols: &[&str]) -> Option<Vec<String>> {
        let k = json!({"tag": "full"});
        let (oc, nc) = (canonicalize(old_sql).unwrap().text, canonicalize(new_sql).unwrap().text);
        let (os, ns) = (cols(old_cols), cols(new_cols));
        changed_columns(&def(&oc, &os, &k), &def(&nc, &ns, &k), &[]).map(|s| s.into_iter().collect())
    }

    #[test]
    fn a_change_confined_to_select_items_names_its_columns() {
        let base = "SELECT id, a + 1 AS b, c FROM s.t WHERE id > 0";
        assert_eq!(changed(base, &["id", "b", "c"], "SELECT id, a + 2 AS b, c FROM s.t WHERE id > 0", &["id", "b", "c"]), Some(vec!["b".into()]));
        // A removed column and a renamed one.
        assert_eq!(changed(base, &["id", "b", "c"], "SELECT id, a + 1 AS b FROM s.t WHERE id > 0", &["id", "b"]), Some(vec!["c".into()]));
        assert_eq!(
            changed(base, &["id", "b", "c"], "SELECT id, a + 1 AS b, c AS d FROM s.t WHERE id > 0", &["id", "b", "d"]),
            Some(vec!["c".into(), "d".into()])
        );
        // Under an explicit GROUP BY an aggregate may change alone.
        assert_eq!(
            changed("SELECT k, sum(v) AS total FROM s.t GROUP BY k", &["k", "total"], "SELECT k, max(v) AS total FROM s.t GROUP BY k", &["k", "total"]),
            Some(vec!["total".into()])
        );
    }

    #[test]
    fn a_change_that_may_change_rows_names_no_columns() {
        let cols3 = &["id", "b", "c"];
        // Another clause.
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t WHERE id > 0", cols3, "SELECT id, a AS b, c FROM s.t WHERE id > 1", cols3), None);
        // A filter on a changed alias, DISTINCT, an aggregate without GROUP BY, a set-returning function, `*`.
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t QUALIFY b > 0", cols3, "SELECT id, a * 2 AS b, c FROM s.t QUALIFY b > 0", cols3), None);
        assert_eq!(changed("SELECT DISTINCT id, a AS b, c FROM s.t", cols3, "SELECT DISTINCT id, a * 2 AS b, c FROM s.t", cols3), None);
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t", cols3, "SELECT id, max(a) AS b, c FROM s.t", cols3), None);
        // (A window function keeps the rows: only its column changed.)
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t", cols3, "SELECT id, max(a) OVER () AS b, c FROM s.t", cols3), Some(vec!["b".into()]));
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t", cols3, "SELECT id, unnest([a]) AS b, c FROM s.t", cols3), None);
        assert_eq!(changed("SELECT *, a AS b FROM s.t", cols3, "SELECT *, a * 2 AS b FROM s.t", cols3), None);
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t ORDER BY 2", cols3, "SELECT id, a * 2 AS b, c FROM s.t ORDER BY 2", cols3), None);
        // A set-returning function in a changed item (`unlist` too).
        assert_eq!(changed("SELECT id, l AS b, c FROM s.t", cols3, "SELECT id, unlist(l) AS b, c FROM s.t", cols3), None);
        // `ORDER BY ALL` under a LIMIT picks rows by every column.
        assert_eq!(changed("SELECT id, a AS b, c FROM s.t ORDER BY ALL LIMIT 3", cols3, "SELECT id, -a AS b, c FROM s.t ORDER BY ALL LIMIT 3", cols3), None);
        // Another item reads the changed alias (DuckDB's lateral column aliases), or a removed one.
        assert_eq!(changed("SELECT id, a * 2 AS b, b + 1 AS c FROM s.t", cols3, "SELECT id, a * 3 AS b, b + 1 AS c FROM s.t", cols3), None);
        assert_eq!(changed("SELECT id, a * 2 AS b, b + 1 AS c FROM s.t", cols3, "SELECT id, a * 2 AS d, b + 1 AS c FROM s.t", &["id", "d", "c"]), None);
        // A name that JSON escapes is still found in the other clauses.
        assert_eq!(
            changed(r#"SELECT id, a AS "b""q", c FROM s.t WHERE "b""q" > 0"#, cols3, r#"SELECT id, a * 2 AS "b""q", c FROM s.t WHERE "b""q" > 0"#, cols3),
            None
        );
        // A key column of the kind.
        let k = json!({"tag": "full"});
        let (oc, nc) = (canonicalize("SELECT id, a AS b FROM s.t").unwrap().text, canonicalize("SELECT id + 1 AS id, a AS b FROM s.t").unwrap().text);
        let sc = cols(&["id", "b"]);
        assert_eq!(changed_columns(&def(&oc, &sc, &k), &def(&nc, &sc, &k), &["id".to_string()]), None);
    }

    #[test]
    fn a_model_with_pre_or_post_statements_names_no_columns() {
        /// The definition with statements.
        fn with(d: Definition<'_>) -> Definition<'_> {
            Definition { has_statements: true, ..d }
        }
        // `DELETE FROM @this WHERE label = 'open'` (metadata, so `statements` is `None`): a change
        // of `label` alone may delete rows, so no column impact; either version having statements
        // is enough.
        let k = json!({"tag": "full"});
        let sc = cols(&["id", "label", "cents"]);
        let oc = canonicalize("SELECT id, upper(status) AS label, amount_cents AS cents FROM raw.orders").unwrap().text;
        let nc = canonicalize("SELECT id, lower(status) AS label, amount_cents AS cents FROM raw.orders").unwrap().text;
        assert_eq!(changed_columns(&def(&oc, &sc, &k), &def(&nc, &sc, &k), &[]), Some(std::collections::BTreeSet::from(["label".to_string()])));
        assert_eq!(changed_columns(&with(def(&oc, &sc, &k)), &with(def(&nc, &sc, &k)), &[]), None);
        assert_eq!(changed_columns(&def(&oc, &sc, &k), &with(def(&nc, &sc, &k)), &[]), None);
        assert_eq!(changed_columns(&with(def(&oc, &sc, &k)), &def(&nc, &sc, &k), &[]), None);
    }

    fn verdict(old_sql: &str, old_cols: &[&str], new_sql: &str, new_cols: &[&str]) -> OwnChange {
        let k = json!({"tag": "full"});
        let (a, b) = (canonicalize(old_sql).unwrap().text, canonicalize(new_sql).unwrap().text);
        let (sa, sb) = (cols(old_cols), cols(new_cols));
        compare(&def(&a, &sa, &k), &def(&b, &sb, &k))
    }

    #[test]
    fn added_columns_anywhere_are_non_breaking() {
        let v = verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a, b, c FROM t", &["a", "b", "c"]);
        assert!(v.non_breaking, "{v:?}");
        assert_eq!(v.diverged, vec!["projection[2] (added)"]);
        let v = verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a, x + 1 AS c, b FROM t", &["a", "c", "b"]);
        assert!(v.non_breaking, "{v:?}");
        assert_eq!(v.diverged, vec!["projection[1] (added)"]);
    }

    #[test]
    fn added_columns_that_change_the_rows_are_breaking() {
        let breaks = |old: &str, old_cols: &[&str], new: &str, new_cols: &[&str], why: &str| {
            let v = verdict(old, old_cols, new, new_cols);
            assert!(!v.non_breaking && v.reason.contains(why), "{new}: {v:?}");
        };
        // `ORDER BY ALL` under a `LIMIT` picks other rows by the new column.
        breaks(
            "SELECT amount FROM t ORDER BY ALL DESC LIMIT 2",
            &["amount"],
            "SELECT prio, amount FROM t ORDER BY ALL DESC LIMIT 2",
            &["prio", "amount"],
            "ORDER BY ALL",
        );
        // DuckDB's `unlist` is `unnest`.
        breaks("SELECT a FROM t", &["a"], "SELECT a, unlist(l) AS x FROM t", &["a", "x"], "set-returning");
        // An aggregate without `GROUP BY` folds the rows into one.
        breaks("SELECT a FROM t", &["a"], "SELECT a, max(b) AS m FROM t", &["a", "m"], "folds its rows");
        // An added alias that `ORDER BY` (or another clause) reads instead of the source column.
        breaks(
            "SELECT amount FROM t ORDER BY prio LIMIT 1",
            &["amount"],
            "SELECT 0 - prio AS prio, amount FROM t ORDER BY prio LIMIT 1",
            &["prio", "amount"],
            "read elsewhere",
        );
        breaks("SELECT a, b + 1 AS c FROM t", &["a", "c"], "SELECT a, a AS b, b + 1 AS c FROM t", &["a", "b", "c"], "read elsewhere");
        // A qualified column under a `USING` join may not be the column `ORDER BY` meant.
        breaks(
            "SELECT t.a FROM t LEFT JOIN u USING (x) ORDER BY x LIMIT 3",
            &["a"],
            "SELECT t.a, u.x AS x FROM t LEFT JOIN u USING (x) ORDER BY x LIMIT 3",
            &["a", "x"],
            "read elsewhere",
        );
        // A windowed aggregate beside an added aggregate: the rows fold into one.
        breaks("SELECT count(*) OVER () AS n FROM t", &["n"], "SELECT count(*) OVER () AS n, max(b) AS m FROM t", &["n", "m"], "folds its rows");
        // And what keeps them: a column the filter reads, added as itself; an aggregate beside
        // aggregates; a window function.
        for (old, old_cols, new, new_cols) in [
            ("SELECT a FROM t WHERE b > 0", &["a"][..], "SELECT a, b FROM t WHERE b > 0", &["a", "b"][..]),
            ("SELECT sum(a) AS s FROM t", &["s"], "SELECT sum(a) AS s, max(b) AS m FROM t", &["s", "m"]),
            ("SELECT a, b FROM t", &["a", "b"], "SELECT a, b, sum(b) OVER (ORDER BY a) AS r FROM t", &["a", "b", "r"]),
        ] {
            let v = verdict(old, old_cols, new, new_cols);
            assert!(v.non_breaking, "{new}: {v:?}");
        }
    }

    #[test]
    fn a_column_added_or_changed_where_rows_are_kept_by_their_order_is_breaking() {
        // `ORDER BY v DESC LIMIT 2` over rows tied in `v`: which of them is kept follows the
        // engine's plan, which the added window changes (DuckDB then keeps the other one).
        let cols3 = &["id", "v", "x"];
        for (old, new, clause) in [
            (
                "SELECT id, v FROM t ORDER BY v DESC LIMIT 2",
                "SELECT id, v, sum(v) OVER (PARTITION BY k) AS x FROM t ORDER BY v DESC LIMIT 2",
                "`LIMIT`/`OFFSET`",
            ),
            ("SELECT id, v FROM t ORDER BY v OFFSET 1", "SELECT id, v, k AS x FROM t ORDER BY v OFFSET 1", "`LIMIT`/`OFFSET`"),
            ("SELECT id, v FROM t LIMIT 5", "SELECT id, v, upper(k) AS x FROM t LIMIT 5", "`LIMIT`/`OFFSET`"),
        ] {
            let v = verdict(old, &["id", "v"], new, cols3);
            assert!(!v.non_breaking && v.reason.contains(clause) && v.reason.contains("tied"), "{new}: {v:?}");
        }
        // `DISTINCT ON` picks a row per key: breaking as any `DISTINCT`.
        let v = verdict("SELECT DISTINCT ON (k) id, v FROM t ORDER BY k, v", &["id", "v"], "SELECT DISTINCT ON (k) id, v, k AS x FROM t ORDER BY k, v", cols3);
        assert!(!v.non_breaking && v.reason.contains("DISTINCT"), "{v:?}");
        // Postgres's `LIMIT` and `FETCH FIRST`.
        for tail in ["LIMIT 2", "FETCH FIRST 2 ROWS ONLY", "OFFSET 1"] {
            let (old, new) = (format!("SELECT id, v FROM t ORDER BY v {tail}"), format!("SELECT id, v, k AS x FROM t ORDER BY v {tail}"));
            let v = pg_verdict(&old, &["id", "v"], &new, cols3);
            assert!(!v.non_breaking && v.reason.contains("`LIMIT`/`OFFSET`/`FETCH`"), "{tail}: {v:?}");
        }
        // An ordering alone keeps every row: still non-breaking.
        let v = verdict("SELECT id, v FROM t ORDER BY v DESC", &["id", "v"], "SELECT id, v, sum(v) OVER (PARTITION BY k) AS x FROM t ORDER BY v DESC", cols3);
        assert!(v.non_breaking, "{v:?}");
        // A changed column there names no columns either: the other columns' rows may change.
        let base = ["SELECT id, v AS b, c FROM s.t ORDER BY id", "SELECT id, v * 2 AS b, c FROM s.t ORDER BY id"];
        let b3 = &["id", "b", "c"];
        assert_eq!(changed(base[0], b3, base[1], b3), Some(vec!["b".into()]));
        assert_eq!(changed(&format!("{} LIMIT 3", base[0]), b3, &format!("{} LIMIT 3", base[1]), b3), None);
        // `QUALIFY`, the deduplicating idiom, is not counted (its order is meant to be total).
        let q = "QUALIFY row_number() OVER (PARTITION BY k ORDER BY v) = 1";
        let v = verdict(&format!("SELECT id, v FROM t {q}"), &["id", "v"], &format!("SELECT id, v, upper(k) AS x FROM t {q}"), cols3);
        assert!(v.non_breaking, "{v:?}");
    }

    #[test]
    fn an_added_column_calling_a_function_not_known_to_keep_the_rows_is_breaking() {
        let breaks = |old: &str, old_cols: &[&str], new: &str, new_cols: &[&str], why: &str| {
            let v = verdict(old, old_cols, new, new_cols);
            assert!(!v.non_breaking && v.reason.contains(why), "{new}: {v:?}");
        };
        // DuckDB's `regexp_split_to_table` is a macro over `unnest`: one row per part.
        breaks(
            "SELECT id, tags FROM t",
            &["id", "tags"],
            "SELECT id, tags, regexp_split_to_table(tags, ';') AS tag FROM t",
            &["id", "tags", "tag"],
            "set-returning",
        );
        // DuckDB aggregates, built-in and macros over one: added without `GROUP BY` to a query
        // of other columns they fold its rows into one.
        for f in ["regr_r2(v, id)", "sem(v)", "approx_top_k(v, 2)", "arg_max_null(id, v)", "sum_no_overflow(v)", "geomean(v)", "weighted_avg(v, id)"] {
            breaks("SELECT 'all' AS grp FROM t", &["grp"], &format!("SELECT 'all' AS grp, {f} AS g FROM t"), &["grp", "g"], "folds its rows");
        }
        // A function efmesh does not know (a user's macro, an extension's function, a qualified
        // name), even inside a known one: it may return a set or fold the rows.
        for f in ["my_macro(tags)", "upper(my_macro(tags))", "main.upper(tags)", "geo_ext_explode(tags)"] {
            let new = format!("SELECT id, tags, {f} AS x FROM t");
            breaks("SELECT id, tags FROM t", &["id", "tags"], &new, &["id", "tags", "x"], "does not know to return one value per row");
        }
        // Common DuckDB scalar functions (and window functions) keep the rows.
        for f in [
            "upper(tags)",
            "round(v * 1.5, 1)",
            "coalesce(tags, '')",
            "date_trunc('day', ts)",
            "strftime(ts, '%Y-%m')",
            "hash(id)",
            "nullif(tags, '')",
            "greatest(v, 0)",
            "list_extract(string_split(tags, ';'), 1)",
            "regexp_replace(lower(trim(tags)), ';', ',')",
            "concat_ws('-', tags, CAST(id AS VARCHAR))",
            "date_diff('day', ts, current_date)",
            "epoch_ms(ts)",
            "EXTRACT(year FROM ts)",
            "struct_pack(a := id, b := tags)",
            "row_number() OVER (ORDER BY id)",
            "sum(v) OVER (PARTITION BY tags)",
        ] {
            let new = format!("SELECT id, tags, {f} AS x FROM t");
            let v = verdict("SELECT id, tags FROM t", &["id", "tags"], &new, &["id", "tags", "x"]);
            assert!(v.non_breaking, "{f}: {v:?}");
        }
    }

    #[test]
    fn a_changed_item_calling_a_function_not_known_to_keep_the_rows_names_no_columns() {
        // `sem(v)` → `CAST(v AS double)`: an aggregate without `GROUP BY` (one row) becomes a
        // plain column (a row per source row).
        assert_eq!(
            changed("SELECT 'all' AS grp, sem(v) AS g FROM s.t", &["grp", "g"], "SELECT 'all' AS grp, CAST(v AS DOUBLE) AS g FROM s.t", &["grp", "g"]),
            None
        );
        assert_eq!(changed("SELECT 'all' AS grp, v AS g FROM s.t", &["grp", "g"], "SELECT 'all' AS grp, geomean(v) AS g FROM s.t", &["grp", "g"]), None);
        // A column changed to a set-returning macro, or to an unknown function.
        let cols2 = &["id", "tag"];
        assert_eq!(changed("SELECT id, tags AS tag FROM s.t", cols2, "SELECT id, regexp_split_to_table(tags, ';') AS tag FROM s.t", cols2), None);
        assert_eq!(changed("SELECT id, tags AS tag FROM s.t", cols2, "SELECT id, my_macro(tags) AS tag FROM s.t", cols2), None);
        // A known scalar function keeps the change confined to its column.
        assert_eq!(changed("SELECT id, tags AS tag FROM s.t", cols2, "SELECT id, upper(coalesce(tags, '')) AS tag FROM s.t", cols2), Some(vec!["tag".into()]));
    }

    #[test]
    fn a_dot_call_is_not_known_a_plain_call_is() {
        // `a.f(…)` is DuckDB's dot call of `f` or a user's function `f` in a schema `a` (a macro
        // over `unnest` multiplies rows): not known, so breaking; the plain call is known.
        for f in ["tags.upper()", "l.list_transform(x -> x + 1)", "util.split(tags)", "main.upper(tags)", "t.tags.upper()", "tags.my_macro()"] {
            let new = format!("SELECT id, tags, {f} AS x FROM t");
            let v = verdict("SELECT id, tags FROM t", &["id", "tags"], &new, &["id", "tags", "x"]);
            assert!(!v.non_breaking && v.reason.contains("does not know to return one value per row"), "{f}: {v:?}");
        }
        let v = verdict("SELECT id, tags FROM t", &["id", "tags"], "SELECT id, tags, upper(tags) AS x FROM t", &["id", "tags", "x"]);
        assert!(v.non_breaking, "{v:?}");
        assert_eq!(changed("SELECT id, tags AS tag FROM s.t", &["id", "tag"], "SELECT id, tags.upper() AS tag FROM s.t", &["id", "tag"]), None);
        assert_eq!(
            changed("SELECT id, tags AS tag FROM s.t", &["id", "tag"], "SELECT id, upper(tags) AS tag FROM s.t", &["id", "tag"]),
            Some(vec!["tag".into()])
        );
    }

    #[test]
    fn set_returning_calls_say_so_and_a_column_named_like_one_is_no_call() {
        // Each set-returning function is named as one, before the unknown-function check.
        for f in ["unnest(l)", "unlist(l)", "regexp_split_to_table(tags, ';')", "generate_series(1, 3)", "range(3)", "regexp_matches(tags, 'a')"] {
            let new = format!("SELECT id, tags, {f} AS x FROM t");
            let v = verdict("SELECT id, tags FROM t", &["id", "tags"], &new, &["id", "tags", "x"]);
            let name = &f[..f.find('(').unwrap()];
            assert!(!v.non_breaking && v.reason.contains(&format!("calls `{name}`, a set-returning function")), "{f}: {v:?}");
        }
        let v = pg_verdict("SELECT a FROM t", &["a"], "SELECT a, generate_series(1, a) AS x FROM t", &["a", "x"]);
        assert!(!v.non_breaking && v.reason.contains("calls `generate_series`, a set-returning function"), "{v:?}");
        // A column merely named `range` (or `unnest`) is read, not called: the added column keeps
        // the rows, and a changed one is confined to its column.
        for new in [r#"SELECT id, "range" * 2 AS r2 FROM t"#, r#"SELECT id, upper("unnest") AS r2 FROM t"#] {
            let v = verdict("SELECT id FROM t", &["id"], new, &["id", "r2"]);
            assert!(v.non_breaking, "{new}: {v:?}");
        }
        let v = pg_verdict("SELECT id FROM t", &["id"], r#"SELECT id, "range" * 2 AS r2 FROM t"#, &["id", "r2"]);
        assert!(v.non_breaking, "{v:?}");
        assert_eq!(
            changed(r#"SELECT id, "range" AS r2 FROM s.t"#, &["id", "r2"], r#"SELECT id, "range" * 2 AS r2 FROM s.t"#, &["id", "r2"]),
            Some(vec!["r2".into()])
        );
    }

    #[test]
    fn duckdbs_mixed_case_scalars_are_known() {
        for f in ["formatReadableSize(id)", "formatReadableDecimalSize(id)"] {
            let new = format!("SELECT id, tags, {f} AS x FROM t");
            let v = verdict("SELECT id, tags FROM t", &["id", "tags"], &new, &["id", "tags", "x"]);
            assert!(v.non_breaking, "{f}: {v:?}");
        }
    }

    #[test]
    fn the_one_value_list_is_sorted_and_holds_no_aggregate_or_set_returning_function() {
        let names: Vec<&str> = DUCKDB_ONE_VALUE.split_ascii_whitespace().collect();
        assert!(names.len() > 400, "{}", names.len());
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted, without duplicates");
        for n in names {
            assert!(!crate::sql::AGGREGATES.contains(&n) && !SET_RETURNING.contains(&n), "{n}");
        }
    }

    #[test]
    fn removed_renamed_or_filtered_is_breaking() {
        let v = verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a FROM t", &["a"]);
        assert!(!v.non_breaking && !v.keeps_columns, "{v:?}");
        let v = verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a, b AS c FROM t", &["a", "c"]);
        assert!(!v.non_breaking && !v.keeps_columns, "{v:?}");
        let v = verdict("SELECT a FROM t WHERE a > 1", &["a"], "SELECT a FROM t WHERE a > 2", &["a"]);
        assert!(!v.non_breaking && v.keeps_columns, "{v:?}");
        assert_eq!(v.diverged.len(), 1);
        assert!(v.diverged[0].starts_with("where"), "{v:?}");
        // Adding a column and a filter at once is breaking.
        let v = verdict("SELECT a FROM t", &["a"], "SELECT a, b FROM t WHERE a > 2", &["a", "b"]);
        assert!(!v.non_breaking, "{v:?}");
    }

    #[test]
    fn star_means_a_projection_star_not_count_star() {
        assert!(selects_star(&canonicalize("SELECT * FROM t").unwrap().text));
        assert!(selects_star(&canonicalize("SELECT a, t.* FROM t").unwrap().text));
        assert!(selects_star(&canonicalize("WITH x AS (SELECT * FROM t) SELECT a FROM x").unwrap().text));
        assert!(!selects_star(&canonicalize("SELECT count(*) AS n FROM t").unwrap().text));
    }

    fn pg_verdict(old_sql: &str, old_cols: &[&str], new_sql: &str, new_cols: &[&str]) -> OwnChange {
        let k = json!({"tag": "full"});
        let pg = |s: &str| crate::sql::pg_canon::canonicalize(s).unwrap().text;
        let (sa, sb) = (cols(old_cols), cols(new_cols));
        compare(&def(&pg(old_sql), &sa, &k), &def(&pg(new_sql), &sb, &k))
    }

    #[test]
    fn postgres_trees_are_categorised_like_sqlparser_trees() {
        // Added output columns anywhere in the projection: non-breaking.
        let v = pg_verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a, b, c FROM t", &["a", "b", "c"]);
        assert!(v.non_breaking, "{v:?}");
        assert_eq!(v.diverged, vec!["projection[2] (added)"]);
        let v = pg_verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a, x + 1 AS c, b FROM t", &["a", "c", "b"]);
        assert!(v.non_breaking, "{v:?}");
        assert_eq!(v.diverged, vec!["projection[1] (added)"]);
        // Anything else: breaking, with the changed path.
        let v = pg_verdict("SELECT a FROM t WHERE a > 1", &["a"], "SELECT a FROM t WHERE a > 2", &["a"]);
        assert!(!v.non_breaking && v.keeps_columns, "{v:?}");
        assert_eq!(v.diverged, vec!["where"], "{v:?}");
        let v = pg_verdict("SELECT a, b FROM t", &["a", "b"], "SELECT a FROM t", &["a"]);
        assert!(!v.non_breaking && !v.keeps_columns, "{v:?}");
        let v = pg_verdict("SELECT a FROM t", &["a"], "SELECT a, b FROM t WHERE a > 2", &["a", "b"]);
        assert!(!v.non_breaking, "{v:?}");
        // Added columns that change the rows: under DISTINCT, set-returning, shifting positions.
        let v = pg_verdict("SELECT DISTINCT a FROM t", &["a"], "SELECT DISTINCT a, b FROM t", &["a", "b"]);
        assert!(!v.non_breaking && v.reason.contains("DISTINCT"), "{v:?}");
        let v = pg_verdict("SELECT a FROM t", &["a"], "SELECT a, unnest(arr) AS x FROM t", &["a", "x"]);
        assert!(!v.non_breaking && v.reason.contains("set-returning"), "{v:?}");
        // Any function not known to return one value per row may return a set.
        for f in ["jsonb_array_elements(j)", "regexp_split_to_table(s, ',')", "my_setof_function(a)", "upper(jsonb_object_keys(j))"] {
            let v = pg_verdict("SELECT a FROM t", &["a"], &format!("SELECT a, {f} AS x FROM t"), &["a", "x"]);
            assert!(!v.non_breaking && v.reason.contains("may return a set"), "{f}: {v:?}");
        }
        // Scalar functions and aggregates keep the rows.
        let v = pg_verdict(
            "SELECT a, count(*) AS n FROM t GROUP BY a",
            &["a", "n"],
            "SELECT a, count(*) AS n, max(upper(b)) AS m FROM t GROUP BY a",
            &["a", "n", "m"],
        );
        assert!(v.non_breaking, "{v:?}");
        let v = pg_verdict("SELECT a, b FROM t ORDER BY 1", &["a", "b"], "SELECT c, a, b FROM t ORDER BY 1", &["c", "a", "b"]);
        assert!(!v.non_breaking && v.reason.contains("positional"), "{v:?}");
        // `*` in a projection, not `count(*)`.
        let pg = |s: &str| crate::sql::pg_canon::canonicalize(s).unwrap().text;
        assert!(selects_star(&pg("SELECT * FROM t")));
        assert!(selects_star(&pg("SELECT a, t.* FROM t")));
        assert!(selects_star(&pg("WITH x AS (SELECT * FROM t) SELECT a FROM x")));
        assert!(!selects_star(&pg("SELECT count(*) AS n FROM t")));
    }

    #[test]
    fn kind_changes_are_breaking() {
        let (a, b) = (json!({"tag": "full"}), json!({"tag": "view"}));
        let c = canonicalize("SELECT 1 AS a").unwrap().text;
        let s = cols(&["a"]);
        let v = compare(&def(&c, &s, &a), &def(&c, &s, &b));
        assert!(!v.non_breaking);
        assert!(v.reason.contains("`full` to `view`"), "{v:?}");
    }
}
