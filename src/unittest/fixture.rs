//! Fixtures as SQL: typed literals, the relations standing in for parents, and the resolver that
//! renders a model's body over them.
//!
//! Every fixture value is written as `CAST(<literal> AS <declared type>)`, the type being the
//! declaring model's schema (the parent's for inputs, the tested model's for expected rows); a
//! fixture is a CTE named by the parent's quoted full name (`"raw.moves"`), an empty one still has
//! typed columns (`SELECT CAST(NULL AS T) AS "c", … WHERE false`).

use crate::core::interval::{self, Interval};
use crate::core::name::{quote_ident, quote_literal};
use crate::core::schema::{decimal_scale, decimals_of, drops_utc_offset, is_integer_type, list_element, nonzero_utc_offset, temporal_cut};
use crate::core::{Column, Kind, Model, ModelName, Resolver, TypeFamily};
use crate::project::Project;
use crate::script::test_spec::Row;
use serde_json::Value;
use std::collections::BTreeSet;

/// The SQL literal of a fixture value: NULL, TRUE/FALSE, integers as digits, other numbers as
/// `CAST('<shortest round-trip text>' AS DOUBLE PRECISION)` (the spelling DuckDB and Postgres
/// share), strings quoted, lists as `[…]` and maps as DuckDB struct literals `{'k': v}` (DuckDB
/// only: Postgres has neither).
pub fn literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => format!("CAST('{}' AS DOUBLE PRECISION)", n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => quote_literal(s),
        Value::Array(items) => format!("[{}]", items.iter().map(literal).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!("{{{}}}", m.iter().map(|(k, v)| format!("{}: {}", quote_literal(k), literal(v))).collect::<Vec<_>>().join(", ")),
    }
}

/// `CAST(<literal> AS <type>)`; a list for a list type with each element cast to the element
/// type first (a list literal's own type, inferred from its elements, would turn `["x", 2]`
/// into an error and `[1.5, 2]` into `['1.5', '2.0']` for a `varchar[]`).
pub fn typed(v: &Value, ty: &str) -> String {
    match (v, list_element(ty)) {
        (Value::Array(items), Some(element)) => format!("CAST([{}] AS {ty})", items.iter().map(|i| typed(i, element)).collect::<Vec<_>>().join(", ")),
        _ => format!("CAST({} AS {ty})", literal(v)),
    }
}

/// Why a value cannot fit a column without asking the engine: a number with a fraction for an
/// integer column (also written as a string: DuckDB's cast rounds `'1.6'` to 2), or a number
/// (or one written as a string) with more decimals than a `decimal(p,s)` column's scale (an
/// engine cast would round it silently), also as an element of a list column; a list or table
/// for a scalar column (DuckDB casts `[1, 2]` to the text `'[1, 2]'` without a word); a date or
/// time its type would cut ([`temporal_cut`]: a time of day into a `date`, digits of a second
/// past the type's precision).
///
/// The decimals past a scale and the date and time cuts only for `input` values, which the
/// fixture holds as declared; expected ones are compared as the query returns them (its type
/// may keep more): a number no stored value equals fails the test, and a date or time the
/// query's type would cut is refused once that type is known ([`super::run_one`]).
pub fn refuse_without_engine(v: &Value, ty: &str, input: bool) -> Option<String> {
    if matches!(v, Value::Array(_) | Value::Object(_)) && TypeFamily::of(ty).is_scalar() {
        let what = if matches!(v, Value::Array(_)) { "a list" } else { "a table of fields" };
        return Some(format!("{what} is not a value of the scalar type `{ty}`"));
    }
    if let (Value::Array(items), Some(element)) = (v, list_element(ty)) {
        return items.iter().enumerate().find_map(|(i, item)| refuse_without_engine(item, element, input).map(|why| format!("element {}: {why}", i + 1)));
    }
    if let (Value::String(s), true) = (v, drops_utc_offset(ty))
        && let Some(offset) = nonzero_utc_offset(s)
    {
        return Some(format!("\"{s}\" has the UTC offset `{offset}`, which `{ty}` (no time zone) would drop: write the time in UTC"));
    }
    if let (Value::String(s), true) = (v, input)
        && let Some(why) = temporal_cut(s, ty)
    {
        return Some(why);
    }
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return None,
    };
    // Only a scale the type names: a bare `decimal` is DuckDB's (18,3) but Postgres's rounds
    // nothing.
    let decimals = decimals_of(&text)?;
    // Also a string: Postgres's integer cast refuses `'1.6'`, but DuckDB's rounds it to 2.
    if is_integer_type(ty) && decimals > 0 {
        return Some(format!("{text} has a fraction and `{ty}` is an integer type"));
    }
    let scale = decimal_scale(ty).filter(|_| input && ty.contains('('))?;
    (decimals > scale as usize).then(|| format!("{text} has more than the {scale} decimal(s) of `{ty}`, which would round it"))
}

/// A relation with `columns`' names and types holding `rows` (a row's missing columns are NULL):
/// `SELECT * FROM (VALUES (CAST(… AS T), …), …) AS _t("a", …)`, or a typed empty relation.
pub fn relation(columns: &[&Column], rows: &[Row]) -> String {
    let names: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
    if rows.is_empty() {
        let cols: Vec<String> = columns.iter().map(|c| format!("CAST(NULL AS {}) AS {}", c.ty, quote_ident(&c.name))).collect();
        return format!("SELECT {} WHERE false", cols.join(", "));
    }
    let values: Vec<String> = rows
        .iter()
        .map(|r| format!("({})", columns.iter().map(|c| typed(r.get(&c.name).unwrap_or(&Value::Null), &c.ty)).collect::<Vec<_>>().join(", ")))
        .collect();
    format!("SELECT * FROM (VALUES\n  {}\n) AS _t({})", values.join(",\n  "), names.join(", "))
}

/// The name a fixture CTE gets: the parent's full name as one quoted identifier (`"raw.moves"`),
/// which no model's own CTE can shadow (model CTE names hold no dot in practice).
pub fn cte_name(parent: &ModelName) -> String {
    quote_ident(&parent.to_string())
}

/// Renders references to fixtured parents as their CTEs, embedded parents without a fixture as
/// their own query (over fixtures, recursively), and bounds as the test's interval.
pub struct FixtureResolver<'a> {
    /// The project (for embedded parents' bodies).
    pub project: &'a Project,
    /// Parents that have a fixture.
    pub fixtured: &'a BTreeSet<ModelName>,
    /// The test's interval, if any.
    pub bounds: Option<Interval>,
}

impl Resolver for FixtureResolver<'_> {
    fn relation(&self, name: &ModelName) -> String {
        if self.fixtured.contains(name) {
            return cte_name(name);
        }
        match self.project.dag.get(name) {
            Some(Model { kind: Kind::Embedded, body: Some(body), .. }) => format!("(\n{}\n)", body.render(self)),
            _ => name.to_string(),
        }
    }

    fn start(&self) -> String {
        self.bounds.map(|b| interval::to_sql_literal(b.start)).unwrap_or_else(|| "NULL".into())
    }

    fn end(&self) -> String {
        self.bounds.map(|b| interval::to_sql_literal(b.end)).unwrap_or_else(|| "NULL".into())
    }

    fn bound(&self, b: crate::core::fragment::Bound) -> String {
        self.bounds.map(|iv| b.literal(iv)).unwrap_or_else(|| "NULL".into())
    }

    /// The test's rows for the model itself when it gives some (its previous rows), else none.
    fn this(&self, model: &ModelName) -> String {
        if self.fixtured.contains(model) {
            return cte_name(model);
        }
        self.project.dag.get(model).map(crate::apply::resolve::typed_empty).unwrap_or_else(|| crate::core::fragment::THIS_PLACEHOLDER.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_list_or_table_for_a_scalar_column_is_refused_not_cast_to_text() {
        assert_eq!(refuse_without_engine(&serde_json::json!([1, 2]), "varchar", true).as_deref(), Some("a list is not a value of the scalar type `varchar`"));
        assert!(refuse_without_engine(&serde_json::json!({"a": 1}), "bigint", true).is_some());
        assert_eq!(refuse_without_engine(&serde_json::json!([1, 2]), "integer[]", true), None);
        assert_eq!(refuse_without_engine(&serde_json::json!("x"), "varchar", true), None);
    }

    #[test]
    fn literals_cover_json_values() {
        assert_eq!(literal(&json!(null)), "NULL");
        assert_eq!(literal(&json!(true)), "TRUE");
        assert_eq!(literal(&json!(-12)), "-12");
        assert_eq!(literal(&json!(0.1)), "CAST('0.1' AS DOUBLE PRECISION)");
        assert_eq!(literal(&json!("it's")), "'it''s'");
        assert_eq!(literal(&json!([1, "a"])), "[1, 'a']");
        assert_eq!(literal(&json!({"k": 1})), "{'k': 1}");
    }

    #[test]
    fn fractions_do_not_fit_integers() {
        assert!(refuse_without_engine(&json!(1.5), "bigint", true).is_some());
        assert!(refuse_without_engine(&json!(2.0), "INTEGER", true).is_none());
        assert!(refuse_without_engine(&json!(1.5), "decimal(10,2)", true).is_none());
        assert!(refuse_without_engine(&json!(1.5), "double", true).is_none());
        assert!(
            refuse_without_engine(&json!("1.6"), "integer", true).is_some_and(|w| w == "1.6 has a fraction and `integer` is an integer type"),
            "DuckDB's cast would round the string to 2"
        );
        assert!(refuse_without_engine(&json!("1.6"), "bigint", false).is_some(), "an expected string too");
        assert!(refuse_without_engine(&json!("2.0"), "bigint", true).is_none());
    }

    #[test]
    fn an_input_date_or_time_the_cast_would_cut_is_refused() {
        assert!(refuse_without_engine(&json!("2026-01-01 23:59:59"), "date", true).is_some_and(|w| w.contains("time of day")));
        assert!(refuse_without_engine(&json!("2026-01-01 00:00:00.0000009"), "timestamp", true).is_some_and(|w| w.contains("keeps 6")));
        assert!(refuse_without_engine(&json!(["2026-01-02", "2026-01-01 01:00:00"]), "date[]", true).is_some_and(|w| w.starts_with("element 2:")));
        assert!(refuse_without_engine(&json!("2026-01-01"), "date", true).is_none());
        assert!(refuse_without_engine(&json!("2026-01-01 23:59:59"), "date", false).is_none(), "an expected value is checked against the query's type");
    }

    #[test]
    fn every_offset_form_a_naive_timestamp_or_time_would_drop_is_refused() {
        for (value, ty, offset) in [
            ("2026-01-02 10:00:00+02:00:00", "timestamp", "`+02:00:00`"),
            ("2026-01-02 10:00:0+02", "timestamp", "`+02`"),
            ("2026-01-02 10:00:00+0200\t", "datetime", "`+0200`"),
            ("10:00:00+02", "time", "`+02`"),
        ] {
            assert!(refuse_without_engine(&json!(value), ty, true).is_some_and(|w| w.contains(offset) && w.contains("would drop")), "{value:?} {ty}");
        }
        for (value, ty) in [("2026-01-02 10:00:00+00:00:00", "timestamp"), ("10:00:00+02", "timetz"), ("2026-01-02 10:00:00+02:00:00", "timestamptz")] {
            assert_eq!(refuse_without_engine(&json!(value), ty, true), None, "{value:?} {ty}");
        }
        assert!(refuse_without_engine(&json!("2026-01-02 T10:00"), "date", true).is_some_and(|w| w.contains("time of day")));
        assert!(refuse_without_engine(&json!("2026-01-02 10:00:0.9999999"), "timestamp", true).is_some_and(|w| w.contains("keeps 6")));
    }

    #[test]
    fn list_elements_are_typed_one_by_one() {
        assert_eq!(typed(&json!(["x", 2]), "varchar[]"), "CAST([CAST('x' AS varchar), CAST(2 AS varchar)] AS varchar[])");
        assert_eq!(typed(&json!([]), "integer[]"), "CAST([] AS integer[])");
    }

    #[test]
    fn decimals_past_the_scale_and_list_elements_are_refused() {
        assert!(refuse_without_engine(&json!(1.5551), "decimal(10,2)", true).is_some_and(|w| w.contains("more than the 2 decimal(s)")));
        assert!(refuse_without_engine(&json!("1.555"), "dec(10,2)", true).is_some());
        assert!(refuse_without_engine(&json!("1.550"), "numeric(10,2)", true).is_none(), "trailing zeros change nothing");
        assert!(refuse_without_engine(&json!(1.5551), "decimal", true).is_none(), "a bare decimal is the engine's own");
        assert!(refuse_without_engine(&json!(1e-7), "decimal(10,2)", true).is_some(), "exponent notation too");
        assert_eq!(
            refuse_without_engine(&json!([1, 2.5]), "integer[]", true).as_deref(),
            Some("element 2: 2.5 has a fraction and `integer` is an integer type")
        );
        assert!(refuse_without_engine(&json!([1.25, 2.125]), "decimal(5,2)[]", true).is_some_and(|w| w.starts_with("element 2:")));
        assert!(refuse_without_engine(&json!([1.5, 2]), "double[]", true).is_none());
        assert!(refuse_without_engine(&json!(1.5551), "decimal(10,2)", false).is_none(), "an expected value is compared as the query returns it");
        assert!(refuse_without_engine(&json!("2026-01-02T10:00:00+02:00"), "timestamp", false).is_some_and(|w| w.contains("`+02:00`")));
        assert!(refuse_without_engine(&json!("2026-01-02T10:00:00+02:00"), "timestamptz", true).is_none());
    }

    #[test]
    fn empty_fixtures_keep_their_types() {
        let c = [Column { name: "id".into(), ty: "bigint".into() }, Column { name: "at".into(), ty: "date".into() }];
        let cols: Vec<&Column> = c.iter().collect();
        assert_eq!(relation(&cols, &[]), "SELECT CAST(NULL AS bigint) AS \"id\", CAST(NULL AS date) AS \"at\" WHERE false");
        let row: Row = json!({"at": "2026-01-01"}).as_object().unwrap().clone();
        assert_eq!(relation(&cols, &[row]), "SELECT * FROM (VALUES\n  (CAST(NULL AS bigint), CAST('2026-01-01' AS date))\n) AS _t(\"id\", \"at\")");
    }
}
