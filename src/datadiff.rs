//! Data diff (`efmesh diff <env-a> <env-b> --data`): how the rows two environments serve for a
//! model differ, compared on the engine through each environment's view of it.
//!
//! For each model both environments serve (external and embedded models have no data of their
//! own and are skipped):
//!
//! - the row count of each view, always in full;
//! - schema drift between the two views: columns only in A, only in B, and columns whose type
//!   differs (values of a column retyped between exact numbers — integers, decimals — are
//!   compared as values, `1.25` equal to `1.2500`; any other retyped column as text);
//! - with a key (the model's `grain` when it declares one, else its kind's `key`: unique-key and
//!   `scd_type2` models), a `FULL OUTER JOIN` of the two views on the key, NULL-safe (a NULL key
//!   matches a NULL key): rows only in A, only in B and matched, and for each common non-key
//!   column the number of matched rows whose values differ, NULL-aware (`IS DISTINCT FROM`:
//!   NULL against a value differs, NULL against NULL does not), with up to
//!   [`KEY_SAMPLES`] of the keys only in A and only in B, and how many key values occur more
//!   than once on each side (then the join pairs each such row with every row of its key);
//! - without a key (or when a key column is missing from a view), a multiset comparison over
//!   the common columns: `EXCEPT ALL` both ways counts the rows only in A and only in B,
//!   duplicates counted.
//!
//! An `scd_type2` model compares its open versions (`valid_to IS NULL`) and never its managed
//! columns (when each version opened and closed differs with the time of each apply), unless
//! its key includes one of them.
//!
//! Sampling (`sample = Some(p)`) compares the rows whose key (a keyless model: whole row)
//! hashes into the first `p` % of buckets ([`crate::engine::dialect::Dialect::sample_filter`]),
//! the same expression on both sides: a key is sampled on both sides or on neither, so sampling
//! never makes a row look missing from the other side (a decimal hashes its text without the
//! fraction's trailing zeros, [`Dialect::exact_number_text`]: `1` as an integer and `1.00` as a
//! `numeric(10,2)` are one key, as the join matches them). Row counts stay in full.
//!
//! Read-only: the engine is opened read-only (DuckDB: the file read-only; Postgres: a session
//! whose transactions are read-only), every query runs in one read-only transaction that is
//! rolled back, and nothing is created in the database, not even a temporary table.

use crate::core::name::quote_ident;
use crate::core::schema::{is_exact_number, is_integer_type};
use crate::core::{Kind, Model};
use crate::engine::{DescribedColumn, Engine, dialect::Dialect};
use crate::preview::{env_view, one_line};
use crate::project::Project;
use anyhow::{Result, anyhow};
use serde::Serialize;

/// How many keys only in A (and only in B) a comparison lists.
pub const KEY_SAMPLES: usize = 5;

/// The per-column mismatches among matched rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnDiff {
    /// The column.
    pub column: String,
    /// Matched rows whose values differ (NULL against a value counts, NULL against NULL not).
    pub mismatches: u64,
    /// `mismatches / matched` (0 when nothing matched).
    pub rate: f64,
}

/// A column both views have, at different types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeChange {
    /// The column.
    pub column: String,
    /// Its type in A's view.
    pub type_a: String,
    /// Its type in B's view.
    pub type_b: String,
}

/// How the data of one model differs between two environments.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelDataDiff {
    /// The model.
    pub model: String,
    /// The key the rows were joined on; `None` for a multiset comparison.
    pub key: Option<Vec<String>>,
    /// True for a multiset comparison (no key).
    pub keyless: bool,
    /// Why the comparison has no key, or what it covers when not every row.
    pub note: Option<String>,
    /// Which rows were compared: `all`, or `open` (the open versions of an `scd_type2` model).
    pub scope: &'static str,
    /// Rows A's view has (every row, never sampled).
    pub rows_a: u64,
    /// Rows B's view has.
    pub rows_b: u64,
    /// Compared rows only in A: keys absent from B, or (keyless) rows `EXCEPT ALL` B's.
    pub only_in_a: u64,
    /// Compared rows only in B.
    pub only_in_b: u64,
    /// Joined pairs of rows (keyed only).
    pub matched: Option<u64>,
    /// Common non-key columns whose values differ in some matched row (keyed only).
    pub columns: Vec<ColumnDiff>,
    /// Columns only A's view has.
    pub columns_only_in_a: Vec<String>,
    /// Columns only B's view has.
    pub columns_only_in_b: Vec<String>,
    /// Columns at another type.
    pub type_changed: Vec<TypeChange>,
    /// The share of keys compared, when sampled.
    pub sampled_percent: Option<u8>,
    /// Up to [`KEY_SAMPLES`] keys only in A (each value as text, `None` for NULL), in key order.
    pub only_in_a_keys: Vec<Vec<Option<String>>>,
    /// Up to [`KEY_SAMPLES`] keys only in B.
    pub only_in_b_keys: Vec<Vec<Option<String>>>,
    /// Key values occurring in more than one compared row of A.
    pub duplicate_keys_a: u64,
    /// Key values occurring in more than one compared row of B.
    pub duplicate_keys_b: u64,
    /// With a key value on several rows of either side (the join pairs each with every row of
    /// its key, so equal counts prove nothing): the compared rows only in A, then only in B, as
    /// multisets over the common columns (`EXCEPT ALL`).
    pub multiset: Option<(u64, u64)>,
}

impl ModelDataDiff {
    /// True when nothing differs: the same row counts, no row only on one side, no column
    /// mismatch and no schema drift.
    #[must_use]
    pub fn same(&self) -> bool {
        let schema = self.columns_only_in_a.is_empty() && self.columns_only_in_b.is_empty() && self.type_changed.is_empty();
        match self.multiset {
            // A key on several rows: the join's pairs prove nothing either way; the rows do.
            Some((a, b)) => schema && self.rows_a == self.rows_b && a == 0 && b == 0,
            None => schema && self.rows_a == self.rows_b && self.only_in_a == 0 && self.only_in_b == 0 && self.columns.is_empty(),
        }
    }
}

/// True when `model` has rows of its own to compare (external and embedded models have none).
#[must_use]
pub fn has_data(model: &Model) -> bool {
    !matches!(model.kind, Kind::External(_) | Kind::Embedded)
}

/// Compares the data `env_a` and `env_b` serve for each of `models` (which both serve), in the
/// order given; `sample` is a percent from 1 to 99.
///
/// # Errors
/// The engine cannot be opened read-only, it is older than the state store `state`
/// ([`crate::plan::PlanError::EngineBehind`]: its stale rows would be compared as what the
/// environments serve), a view is missing, or a comparison query fails: the error names the
/// model and the environment.
pub fn diff_data(
    project: &Project,
    state: &dyn crate::state::StateStore,
    env_a: &str,
    env_b: &str,
    models: &[&Model],
    sample: Option<u8>,
) -> Result<Vec<ModelDataDiff>> {
    if models.is_empty() {
        return Ok(Vec::new());
    }
    let mut engine = crate::preview::open_engine(project).map_err(|m| anyhow!("cannot open the engine database to compare data: {m}"))?;
    // The store's epoch before the catalog (`plan::integrity::Observed`).
    let epoch = state.engine_epoch()?;
    let catalog = engine.catalog().map_err(|e| anyhow!("cannot read the engine catalog: {}", one_line(&e.message)))?;
    if let Some(message) = crate::plan::integrity::engine_behind(&project.config, state, epoch, &catalog)? {
        return Err(crate::plan::PlanError::EngineBehind(message).into());
    }
    for model in models {
        for env in [env_a, env_b] {
            let schema = crate::plan::env_schema(env, model.name.schema());
            if !catalog.contains(&schema, model.name.table()) {
                return Err(anyhow!(
                    "model `{}`: environment `{env}` has no view {} in the engine database\n  hint: `efmesh apply {env}` restores it",
                    model.name,
                    env_view(env, &model.name)
                ));
            }
        }
    }
    let dialect = engine.sql();
    engine.execute(&dialect.begin_read_only()).map_err(|e| anyhow!("cannot open a read-only transaction: {}", one_line(&e.message)))?;
    let mut out = Vec::new();
    let mut failure = None;
    for model in models {
        match compare(&mut *engine, model, env_a, env_b, sample) {
            Ok(d) => out.push(d),
            Err(message) => {
                failure = Some(anyhow!("model `{}`: cannot compare `{env_a}` and `{env_b}`: {message}", model.name));
                break;
            }
        }
    }
    let _ = engine.rollback();
    match failure {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A column both views have, as each spells it, and whether its type differs.
struct Common {
    a: String,
    b: String,
    retyped: bool,
    /// Its type (A's).
    ty: String,
    /// An exact number on both sides, a decimal on one at least: equal values may differ in
    /// text (`1` against `1.00`; `1.0` against `1.00` in Postgres's bare `numeric`), so a key
    /// of it joins and hashes through [`Dialect::exact_number_text`].
    decimal: bool,
}

impl Common {
    /// The column of side `alias` (`a` or `b`) as compared: as text when its type differs, as a
    /// type with an equality operator otherwise ([`Dialect::comparable`]).
    fn expr(&self, dialect: &dyn Dialect, alias: &str) -> String {
        let name = if alias == "a" { &self.a } else { &self.b };
        let column = format!("{alias}.{}", quote_ident(name));
        if self.retyped { dialect.text_of(&column) } else { dialect.comparable(&column, &self.ty) }
    }

    /// The column of side `alias`, unqualified (inside that side's own subquery).
    fn bare(&self, dialect: &dyn Dialect, alias: &str) -> String {
        let name = if alias == "a" { &self.a } else { &self.b };
        if self.retyped { dialect.text_of(&quote_ident(name)) } else { dialect.comparable(&quote_ident(name), &self.ty) }
    }

    /// The column of side `alias`, unqualified, as the sample hashes it: the same text for
    /// equal values on both sides ([`Dialect::exact_number_text`] for a decimal).
    fn hashed(&self, dialect: &dyn Dialect, alias: &str) -> String {
        let bare = self.bare(dialect, alias);
        if self.decimal { dialect.exact_number_text(&bare) } else { bare }
    }
}

/// A name for a helper column of a comparison query: `base`, or `base` followed by the first
/// number that makes it a name no column of `sides` has (any case: DuckDB matches names
/// ignoring it). A fixed name would meet a model's own column of that name: DuckDB renames
/// one of the two and the query reads the other, Postgres calls the name ambiguous.
fn helper_name(base: &str, sides: &[&[DescribedColumn]]) -> String {
    let taken = |name: &str| sides.iter().any(|cols| find(cols, name).is_some());
    let mut name = base.to_string();
    let mut n = 0u64;
    while taken(&name) {
        n += 1;
        name = format!("{base}{n}");
    }
    name
}

fn find<'c>(columns: &'c [DescribedColumn], name: &str) -> Option<&'c DescribedColumn> {
    columns.iter().find(|c| c.name.eq_ignore_ascii_case(name))
}

fn counts(engine: &mut dyn Engine, sql: &str) -> Result<Vec<u64>, String> {
    let rows = engine.query(sql).map_err(|e| one_line(&e.message))?;
    let row = rows.into_iter().next().unwrap_or_default();
    Ok(row.into_iter().map(|v| v.and_then(|n| n.parse().ok()).unwrap_or(0)).collect())
}

fn compare(engine: &mut dyn Engine, model: &Model, env_a: &str, env_b: &str, sample: Option<u8>) -> Result<ModelDataDiff, String> {
    let dialect = engine.sql();
    let (view_a, view_b) = (env_view(env_a, &model.name), env_view(env_b, &model.name));
    let describe = |engine: &mut dyn Engine, view: &str| {
        engine.describe(&format!("SELECT * FROM {view}")).map_err(|e| format!("cannot describe {view}: {}", one_line(&e.message)))
    };
    let (cols_a, cols_b) = (describe(engine, &view_a)?, describe(engine, &view_b)?);
    let rows = counts(engine, &format!("SELECT (SELECT count(*) FROM {view_a}), (SELECT count(*) FROM {view_b})"))?;
    let (rows_a, rows_b) = (rows.first().copied().unwrap_or(0), rows.get(1).copied().unwrap_or(0));

    let columns_only_in_a: Vec<String> = cols_a.iter().filter(|c| find(&cols_b, &c.name).is_none()).map(|c| c.name.clone()).collect();
    let columns_only_in_b: Vec<String> = cols_b.iter().filter(|c| find(&cols_a, &c.name).is_none()).map(|c| c.name.clone()).collect();
    let type_changed: Vec<TypeChange> = cols_a
        .iter()
        .filter_map(|a| {
            let b = find(&cols_b, &a.name)?;
            (!a.ty.eq_ignore_ascii_case(&b.ty)).then(|| TypeChange { column: a.name.clone(), type_a: a.ty.clone(), type_b: b.ty.clone() })
        })
        .collect();

    // The key, and whether every key column is in both views.
    let declared_key: Vec<String> = if !model.grain.is_empty() {
        model.grain.clone()
    } else {
        match &model.kind {
            Kind::IncrementalByUniqueKey(u) => u.key.clone(),
            Kind::ScdType2(s) => s.key.clone(),
            // A partition holds many rows: no row key (declare `grain` for a keyed diff).
            _ => Vec::new(),
        }
    };
    let missing: Vec<String> = declared_key
        .iter()
        .flat_map(|k| {
            [(env_a, &cols_a), (env_b, &cols_b)].into_iter().filter(|(_, cols)| find(cols, k).is_none()).map(move |(env, _)| format!("`{k}` in `{env}`"))
        })
        .collect();
    let keyed = !declared_key.is_empty() && missing.is_empty();

    // An `scd_type2` model: its open versions, its managed columns left out (unless keyed on).
    let managed: Vec<String> = model.kind.managed_columns().into_iter().map(|c| c.name).collect();
    let key_has_managed = keyed && declared_key.iter().any(|k| managed.iter().any(|m| m.eq_ignore_ascii_case(k)));
    let mut scope_filter = None;
    if let Kind::ScdType2(scd) = &model.kind
        && !key_has_managed
        && find(&cols_a, &scd.valid_to).is_some()
        && find(&cols_b, &scd.valid_to).is_some()
    {
        scope_filter = Some(format!("{} IS NULL", quote_ident(&scd.valid_to)));
    }
    let skip_managed = !key_has_managed;
    let common: Vec<Common> = cols_a
        .iter()
        .filter_map(|a| {
            let b = find(&cols_b, &a.name)?;
            if skip_managed && managed.iter().any(|m| m.eq_ignore_ascii_case(&a.name)) {
                return None;
            }
            // Compared as text unless both are exact numbers (integers, decimals), which compare
            // exactly as values: `1.25` as `NUMERIC(10,2)` and `1.2500` as `NUMERIC(12,4)` are the
            // same value, not the same text. (A float against an exact number would compare as
            // doubles, losing digits; other families have forms the engines equate that serve
            // differently: a padded `char(n)`, a `uuid`'s spelling, a date and its midnight.)
            let exact = is_exact_number(&a.ty) && is_exact_number(&b.ty);
            let retyped = !(a.ty.eq_ignore_ascii_case(&b.ty) || exact);
            // Integers print alike whatever their width; a decimal prints its scale.
            let decimal = exact && !(is_integer_type(&a.ty) && is_integer_type(&b.ty));
            Some(Common { a: a.name.clone(), b: b.name.clone(), retyped, ty: a.ty.clone(), decimal })
        })
        .collect();
    let is_key = |c: &Common| keyed && declared_key.iter().any(|k| k.eq_ignore_ascii_case(&c.a));
    let key: Vec<&Common> = if keyed { declared_key.iter().filter_map(|k| common.iter().find(|c| c.a.eq_ignore_ascii_case(k))).collect() } else { Vec::new() };

    // Each side's rows compared: the scope, then the sample (same expression on both sides).
    let side = |alias: &str, view: &str| {
        let hashed: Vec<String> =
            if keyed { key.iter().map(|c| c.hashed(dialect, alias)).collect() } else { common.iter().map(|c| c.hashed(dialect, alias)).collect() };
        let mut filters: Vec<String> = scope_filter.iter().cloned().collect();
        if let Some(p) = sample
            && !hashed.is_empty()
        {
            filters.push(dialect.sample_filter(&hashed, p));
        }
        if filters.is_empty() { view.to_string() } else { format!("(SELECT * FROM {view} WHERE {})", filters.join(" AND ")) }
    };
    let (from_a, from_b) = (side("a", &view_a), side("b", &view_b));

    let mut note = None;
    if !declared_key.is_empty() && !missing.is_empty() {
        note = Some(format!("key column {} missing: rows compared as multisets over the common columns", missing.join(", ")));
    } else if declared_key.is_empty() {
        note = Some("no grain or key declared: rows compared as multisets over the common columns (EXCEPT ALL)".to_string());
    }
    if scope_filter.is_some() {
        let open = "open versions compared (valid_to IS NULL), managed columns left out".to_string();
        note = Some(note.map_or(open.clone(), |n| format!("{n}; {open}")));
    }
    let mut diff = ModelDataDiff {
        model: model.name.to_string(),
        key: keyed.then(|| key.iter().map(|c| c.a.clone()).collect()),
        keyless: !keyed,
        note,
        scope: if scope_filter.is_some() { "open" } else { "all" },
        rows_a,
        rows_b,
        only_in_a: 0,
        only_in_b: 0,
        matched: None,
        columns: Vec::new(),
        columns_only_in_a,
        columns_only_in_b,
        type_changed,
        sampled_percent: sample,
        only_in_a_keys: Vec::new(),
        only_in_b_keys: Vec::new(),
        duplicate_keys_a: 0,
        duplicate_keys_b: 0,
        multiset: None,
    };

    // The compared rows only in A, then only in B, as multisets over the common columns.
    let multiset = |engine: &mut dyn Engine| -> Result<(u64, u64), String> {
        let (list_a, list_b): (Vec<String>, Vec<String>) = common.iter().map(|c| (c.expr(dialect, "a"), c.expr(dialect, "b"))).unzip();
        let (list_a, list_b) = (list_a.join(", "), list_b.join(", "));
        let got = counts(
            engine,
            &format!(
                "SELECT (SELECT count(*) FROM (SELECT {list_a} FROM {from_a} AS a EXCEPT ALL SELECT {list_b} FROM {from_b} AS b) AS _efmesh_only_a), \
                 (SELECT count(*) FROM (SELECT {list_b} FROM {from_b} AS b EXCEPT ALL SELECT {list_a} FROM {from_a} AS a) AS _efmesh_only_b)"
            ),
        )?;
        Ok((got.first().copied().unwrap_or(0), got.get(1).copied().unwrap_or(0)))
    };
    if !keyed {
        if common.is_empty() {
            diff.note = Some("the views have no column in common: nothing to compare".into());
            return Ok(diff);
        }
        (diff.only_in_a, diff.only_in_b) = multiset(engine)?;
        return Ok(diff);
    }

    let on: Vec<String> = key.iter().map(|c| dialect.full_join_match(&c.expr(dialect, "a"), &c.expr(dialect, "b"), c.decimal)).collect();
    let values: Vec<&Common> = common.iter().filter(|c| !is_key(c)).collect();
    // Each side's marker column (TRUE on its rows, NULL where the join found none): a name no
    // column of either view has, or it would read the model's own column.
    let views = [cols_a.as_slice(), cols_b.as_slice()];
    let (mark_a, mark_b) = (quote_ident(&helper_name("_efmesh_a", &views)), quote_ident(&helper_name("_efmesh_b", &views)));
    let mut select = vec![
        format!("count(CASE WHEN b.{mark_b} IS NULL THEN 1 END)"),
        format!("count(CASE WHEN a.{mark_a} IS NULL THEN 1 END)"),
        format!("count(CASE WHEN a.{mark_a} AND b.{mark_b} THEN 1 END)"),
    ];
    for c in &values {
        select.push(format!("count(CASE WHEN a.{mark_a} AND b.{mark_b} AND {} IS DISTINCT FROM {} THEN 1 END)", c.expr(dialect, "a"), c.expr(dialect, "b")));
    }
    let got = counts(
        engine,
        &format!(
            "SELECT {} FROM (SELECT TRUE AS {mark_a}, * FROM {from_a} AS _efmesh_sa) AS a FULL OUTER JOIN (SELECT TRUE AS {mark_b}, * FROM {from_b} AS _efmesh_sb) AS b ON {}",
            select.join(", "),
            on.join(" AND ")
        ),
    )?;
    let at = |i: usize| got.get(i).copied().unwrap_or(0);
    let matched = at(2);
    diff.only_in_a = at(0);
    diff.only_in_b = at(1);
    diff.matched = Some(matched);
    #[allow(clippy::cast_precision_loss)]
    let rate = |n: u64| if matched == 0 { 0.0 } else { n as f64 / matched as f64 };
    diff.columns = values
        .iter()
        .enumerate()
        .map(|(i, c)| ColumnDiff { column: c.a.clone(), mismatches: at(3 + i), rate: rate(at(3 + i)) })
        .filter(|c| c.mismatches > 0)
        .collect();

    // Which keys are only on one side (the first few, in key order).
    let only_keys = |engine: &mut dyn Engine, (this, this_from): (&str, &str), (other, other_from): (&str, &str)| {
        let shown: Vec<String> = key.iter().map(|c| dialect.text_of(&c.expr(dialect, this))).collect();
        let same: Vec<String> = key.iter().map(|c| format!("{} IS NOT DISTINCT FROM {}", c.expr(dialect, this), c.expr(dialect, other))).collect();
        let order: Vec<String> = key.iter().map(|c| c.expr(dialect, this)).collect();
        let sql = format!(
            "SELECT {} FROM {this_from} AS {this} WHERE NOT EXISTS (SELECT 1 FROM {other_from} AS {other} WHERE {}) ORDER BY {} LIMIT {KEY_SAMPLES}",
            shown.join(", "),
            same.join(" AND "),
            order.join(", ")
        );
        engine.query(&sql).map_err(|e| one_line(&e.message))
    };
    if diff.only_in_a > 0 {
        diff.only_in_a_keys = only_keys(engine, ("a", &from_a), ("b", &from_b))?;
    }
    if diff.only_in_b > 0 {
        diff.only_in_b_keys = only_keys(engine, ("b", &from_b), ("a", &from_a))?;
    }

    // Key values on more than one row of a side (the join paired each with every row of its key).
    let group_a: Vec<String> = key.iter().map(|c| c.expr(dialect, "a")).collect();
    let group_b: Vec<String> = key.iter().map(|c| c.expr(dialect, "b")).collect();
    let dup = counts(
        engine,
        &format!(
            "SELECT (SELECT count(*) FROM (SELECT 1 AS x FROM {from_a} AS a GROUP BY {} HAVING count(*) > 1) AS _efmesh_dup_a), \
             (SELECT count(*) FROM (SELECT 1 AS x FROM {from_b} AS b GROUP BY {} HAVING count(*) > 1) AS _efmesh_dup_b)",
            group_a.join(", "),
            group_b.join(", ")
        ),
    )?;
    diff.duplicate_keys_a = dup.first().copied().unwrap_or(0);
    diff.duplicate_keys_b = dup.get(1).copied().unwrap_or(0);
    if diff.duplicate_keys_a > 0 || diff.duplicate_keys_b > 0 {
        diff.multiset = Some(multiset(engine)?);
    }
    Ok(diff)
}

/// A key value as the text report shows it: NULL as `NULL` (as preview tables show it), and a
/// value that would read as something else quoted as an SQL string, its quotes doubled: the
/// text `NULL` in any case (`'NULL'`), an empty or space-edged text (`''`), or one holding `,`,
/// `(`, `)`, `=`, `'` or a line break (shown `⏎`), which would blur the list of keys
/// (`'a, b'`). Any other value as is (`6`, `abc`, `2026-01-01`). JSON has every value whole.
fn key_value(v: Option<&str>) -> String {
    let Some(v) = v else { return "NULL".to_string() };
    let blurred = v.is_empty() || v.eq_ignore_ascii_case("null") || v.trim() != v || v.contains([',', '(', ')', '=', '\'', '\n', '\r']);
    if blurred { crate::core::name::quote_literal(&v.replace(['\n', '\r'], "⏎")) } else { v.to_string() }
}

/// The text report of a data diff: `data "A" ↔ "B":`, then one line per model and its details.
#[must_use]
pub fn text(env_a: &str, env_b: &str, diffs: &[ModelDataDiff]) -> String {
    let mut s = format!("data \"{env_a}\" ↔ \"{env_b}\":\n");
    if diffs.is_empty() {
        s.push_str("  no model with data served by both environments\n");
        return s;
    }
    let width = diffs.iter().map(|d| d.model.len()).max().unwrap_or(0);
    let keys = |keys: &[Vec<Option<String>>], key: &[String]| {
        keys.iter()
            .map(|k| {
                let values: Vec<String> = key.iter().zip(k).map(|(name, v)| format!("{name}={}", key_value(v.as_deref()))).collect();
                if values.len() == 1 { values[0].clone() } else { format!("({})", values.join(", ")) }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    for d in diffs {
        let mark = if d.same() { '✓' } else { '≠' };
        let compared = match (&d.key, d.matched) {
            (Some(key), Some(matched)) => {
                format!("key ({}): only in A {}, only in B {}, matched {matched}", key.join(", "), d.only_in_a, d.only_in_b)
            }
            _ => format!("no key (declare a grain): only in A {}, only in B {}", d.only_in_a, d.only_in_b),
        };
        let sampled = d.sampled_percent.map(|p| format!("  (sample {p}%)")).unwrap_or_default();
        s.push_str(&format!("  {mark} {:width$}  A={} B={}  {compared}{sampled}\n", d.model, d.rows_a, d.rows_b));
        let matched = d.matched.unwrap_or(0);
        for c in &d.columns {
            s.push_str(&format!("      {}: {} of {matched} ({:.2}%)\n", c.column, c.mismatches, c.rate * 100.0));
        }
        if !d.columns_only_in_a.is_empty() {
            s.push_str(&format!("      columns only in A: {}\n", d.columns_only_in_a.join(", ")));
        }
        if !d.columns_only_in_b.is_empty() {
            s.push_str(&format!("      columns only in B: {}\n", d.columns_only_in_b.join(", ")));
        }
        for t in &d.type_changed {
            s.push_str(&format!("      type changed: {} {} → {}\n", t.column, t.type_a, t.type_b));
        }
        if let Some(key) = &d.key {
            for (side, list, n) in [("A", &d.only_in_a_keys, d.only_in_a), ("B", &d.only_in_b_keys, d.only_in_b)] {
                if !list.is_empty() {
                    let more = n.saturating_sub(list.len() as u64);
                    let tail = if more > 0 { format!(", … and {more} more") } else { String::new() };
                    s.push_str(&format!("      only in {side}: {}{tail}\n", keys(list, key)));
                }
            }
            for (side, n) in [("A", d.duplicate_keys_a), ("B", d.duplicate_keys_b)] {
                if n > 0 {
                    s.push_str(&format!(
                        "      {n} key value{} on several rows in {side}: each pairs with every row of its key\n",
                        if n == 1 { "" } else { "s" }
                    ));
                }
            }
            if let Some((a, b)) = d.multiset {
                s.push_str(&format!("      rows compared as multisets (keys on several rows): only in A {a}, only in B {b}\n"));
            }
        }
        if let Some(note) = &d.note {
            s.push_str(&format!("      note: {note}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::dialect::{Standard, sample_threshold};

    #[test]
    fn sampling_hashes_the_same_text_on_both_engines_and_thresholds_nest() {
        assert_eq!(sample_threshold(1), "028f");
        assert_eq!(sample_threshold(50), "8000");
        assert_eq!(sample_threshold(99), "fd70");
        let f = Standard.sample_filter(&["\"id\"".into(), "\"k\"".into()], 50);
        assert_eq!(f, "substr(md5(COALESCE('v' || CAST(\"id\" AS VARCHAR), 'n') || '|' || COALESCE('v' || CAST(\"k\" AS VARCHAR), 'n')), 1, 4) < '8000'");
        // A NULL is `n`, never the text of the string 'NULL' (`vNULL`).
        assert!(Standard.null_safe_text("x").contains("'n'"));
        // Postgres joins on text that tells NULL apart (DuckDB's, IS NOT DISTINCT FROM: engine::duckdb).
        assert_eq!(Standard.full_join_match("a.k", "b.k", false), "COALESCE('v' || CAST(a.k AS VARCHAR), 'n') = COALESCE('v' || CAST(b.k AS VARCHAR), 'n')");
        // A decimal key joins on its text without the fraction's trailing zeros: `1` = `1.00`.
        let t = "CAST(a.k AS VARCHAR)";
        assert_eq!(Standard.exact_number_text("a.k"), format!("CASE WHEN {t} LIKE '%.%' THEN rtrim(rtrim({t}, '0'), '.') ELSE {t} END"));
        assert_eq!(
            Standard.full_join_match("a.k", "b.k", true),
            format!("{} = {}", Standard.null_safe_text(&Standard.exact_number_text("a.k")), Standard.null_safe_text(&Standard.exact_number_text("b.k")))
        );
    }

    #[test]
    fn a_helper_column_takes_a_name_no_column_of_either_view_has() {
        let cols = |names: &[&str]| names.iter().map(|n| DescribedColumn { name: (*n).to_string(), ty: "INTEGER".into() }).collect::<Vec<_>>();
        let (a, b) = (cols(&["id", "v"]), cols(&["id", "w"]));
        assert_eq!(helper_name("_efmesh_a", &[a.as_slice(), b.as_slice()]), "_efmesh_a");
        // A model's own column of that name, on either side and in any case, is never read.
        let (a, b) = (cols(&["id", "_efmesh_a"]), cols(&["id", "_EFMESH_A1"]));
        assert_eq!(helper_name("_efmesh_a", &[a.as_slice(), b.as_slice()]), "_efmesh_a2");
        assert_eq!(helper_name("_efmesh_b", &[a.as_slice(), b.as_slice()]), "_efmesh_b");
        let b = cols(&["_efmesh_b"]);
        assert_eq!(helper_name("_efmesh_b", &[a.as_slice(), b.as_slice()]), "_efmesh_b1");
    }

    #[test]
    fn a_key_value_reading_as_null_or_as_several_keys_is_quoted() {
        assert_eq!(key_value(None), "NULL");
        assert_eq!(key_value(Some("NULL")), "'NULL'");
        assert_eq!(key_value(Some("null")), "'null'");
        assert_eq!(key_value(Some("")), "''");
        assert_eq!(key_value(Some(" x")), "' x'");
        assert_eq!(key_value(Some("a, b")), "'a, b'");
        assert_eq!(key_value(Some("it's")), "'it''s'");
        assert_eq!(key_value(Some("a\nb")), "'a⏎b'");
        for plain in ["6", "abc", "-1.5", "2026-01-01 00:00:00", "Nullable"] {
            assert_eq!(key_value(Some(plain)), plain);
        }
    }

    #[test]
    fn the_text_report_marks_each_model_and_lists_what_differs() {
        let d = ModelDataDiff {
            model: "s.t".into(),
            key: Some(vec!["id".into()]),
            keyless: false,
            note: None,
            scope: "all",
            rows_a: 3,
            rows_b: 4,
            only_in_a: 0,
            only_in_b: 1,
            matched: Some(3),
            columns: vec![ColumnDiff { column: "name".into(), mismatches: 1, rate: 1.0 / 3.0 }],
            columns_only_in_a: Vec::new(),
            columns_only_in_b: vec!["extra".into()],
            type_changed: Vec::new(),
            sampled_percent: None,
            only_in_a_keys: Vec::new(),
            only_in_b_keys: vec![vec![Some("4".into())]],
            duplicate_keys_a: 0,
            duplicate_keys_b: 0,
            multiset: None,
        };
        let same = ModelDataDiff {
            model: "s.u".into(),
            rows_b: 3,
            only_in_b: 0,
            columns: Vec::new(),
            columns_only_in_b: Vec::new(),
            only_in_b_keys: Vec::new(),
            ..d.clone()
        };
        // Keys of two columns, one of them the string 'NULL', the other a real NULL.
        let nulls = ModelDataDiff {
            model: "s.n".into(),
            key: Some(vec!["id".into(), "name".into()]),
            only_in_a: 2,
            only_in_a_keys: vec![vec![Some("1".into()), Some("NULL".into())], vec![Some("1".into()), None]],
            ..same.clone()
        };
        let t = text("prod", "dev", &[d, same, nulls]);
        assert_eq!(
            t,
            "data \"prod\" ↔ \"dev\":\n  ≠ s.t  A=3 B=4  key (id): only in A 0, only in B 1, matched 3\n      name: 1 of 3 (33.33%)\n      columns only in B: extra\n      only in B: id=4\n  ✓ s.u  A=3 B=3  key (id): only in A 0, only in B 0, matched 3\n  ≠ s.n  A=3 B=3  key (id, name): only in A 2, only in B 0, matched 3\n      only in A: (id=1, name='NULL'), (id=1, name=NULL)\n"
        );
    }
}
