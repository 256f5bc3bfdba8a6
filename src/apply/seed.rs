//! Seeds at apply time: parsed, staged and type-checked in the contract phase (before anything
//! is built), then built from the stage.
//!
//! For every seed to build, [`stage`] reads the file, checks that its blake3 hash is still the
//! one the plan fingerprinted (a file edited between plan and apply would otherwise load data of
//! another version), parses it ([`crate::seed::read`]), appends its text into a temporary table
//! `_efmesh_seed__<schema>__<table>` (session-local: nothing reaches the database file) and asks
//! the engine, in one query per seed, for the first row of every column whose value does not
//! cast to the declared type. Every problem becomes a [`ContractProblem`] naming the file, the
//! row, the column and the value, so a bad value fails the apply before any model is built.
//! [`build_statements`] then create the physical table from the stage in declared column order,
//! rows in file order.
//!
//! Casting uses the engine's own rules (what `CAST(text AS type)` accepts), with one stricter
//! rule: a number with a fractional part is refused in an integer column, and one with more
//! decimals than a `decimal(p,s)` column holds, instead of being rounded; a date or time the
//! cast would cut ([`temporal_cut`]: a time of day into a `date`, more digits of a second's
//! fraction than a `timestamp`/`timestamptz`/`time` keeps, which DuckDB cuts and Postgres rounds,
//! maybe into the next day) is refused too, and so is a time with a UTC offset a `timestamp` or
//! `time` without a time zone would drop ([`nonzero_utc_offset`], on the text).

use super::contract::ContractProblem;
use crate::core::name::{quote_ident, quote_literal};
use crate::core::schema::{
    decimal_scale, drops_utc_offset, innermost_element, is_integer_type, is_naive_time, list_element, nonzero_utc_offset, rounded_digits_regex, second_digits,
    temporal_cut,
};
use crate::core::{Kind, Model, ModelName};
use crate::engine::Engine;
use crate::project::Project;
use crate::seed;
use std::collections::BTreeSet;

/// Name of the ordinal column of a stage table (the row's position in the file, from 1).
const ORDINAL: &str = "_efmesh_ordinal";

/// The session-local table holding a seed's parsed text between the contract phase and its build.
pub fn stage_table(name: &ModelName) -> String {
    let plain = format!("_efmesh_seed__{}__{}", name.schema(), name.table());
    // Within every engine's identifier limit (Postgres: 63 bytes, which would cut two long names
    // to one stage): a long name is replaced by a digest of the model's name.
    if plain.len() <= 63 { plain } else { format!("_efmesh_seed_{}", &blake3::hash(name.to_string().as_bytes()).to_hex()[..32]) }
}

/// Stages every seed in `pending` (see the module docs) and returns every problem found. Seeds in
/// `skip_typing` (whose declared types are already known to be wrong) are parsed and staged but
/// their values are not cast.
pub fn stage(project: &Project, pending: &BTreeSet<ModelName>, skip_typing: &BTreeSet<ModelName>, engine: &mut dyn Engine) -> Vec<ContractProblem> {
    let mut problems = Vec::new();
    for model in pending.iter().filter_map(|n| project.dag.get(n)) {
        let Kind::Seed(s) = &model.kind else { continue };
        let problem = |message: String| ContractProblem { model: model.name.clone(), location: model.location.clone(), message };
        let file = seed::resolve(&project.config.root, &s.path);
        let bytes = match crate::file::read_regular(&file) {
            Ok(b) => b,
            Err(e) => {
                problems.push(problem(format!("cannot read seed file `{}`: {e}", s.path)));
                continue;
            }
        };
        if seed::content_hash(&bytes) != s.content_hash {
            problems.push(problem(format!("seed file `{}` changed after the plan was computed; plan again", s.path)));
            continue;
        }
        let rows = match read(&bytes, s, model, engine.sql()) {
            Ok(rows) => rows,
            Err(errors) => {
                problems.extend(errors.into_iter().map(|e| problem(format!("`{}`: {e}", s.path))));
                continue;
            }
        };
        let mut columns = vec![ORDINAL.to_string()];
        columns.extend(model.schema.names().map(str::to_string));
        let staged: Vec<Vec<Option<String>>> =
            rows.rows.iter().enumerate().map(|(i, (_, values))| std::iter::once(Some((i + 1).to_string())).chain(values.iter().cloned()).collect()).collect();
        if let Err(e) = engine.stage_text(&stage_table(&model.name), &columns, &staged) {
            problems.push(problem(format!("cannot stage seed file `{}`: {}", s.path, e.message)));
            continue;
        }
        if !skip_typing.contains(&model.name) {
            problems.extend(check_types(model, &s.path, &rows, engine).into_iter().map(problem));
        }
    }
    problems
}

/// A seed file's rows ([`seed::read`]) as text the engine casts to the declared types: a JSON
/// seed's array value in an array-typed column (`varchar[]`) is spelled as the engine reads an
/// array ([`crate::engine::dialect::Dialect::array_text`]; DuckDB casts the JSON text itself).
///
/// # Errors
/// The file's problems, as [`seed::read`] finds them.
pub fn read(
    bytes: &[u8],
    s: &crate::core::kind::Seed,
    model: &Model,
    dialect: &dyn crate::engine::dialect::Dialect,
) -> Result<seed::SeedRows, Vec<seed::SeedError>> {
    let mut rows = seed::read(bytes, s, &model.schema)?;
    if s.format == crate::core::kind::FileFormat::Json && dialect.array_text(&[]).is_some() {
        for (i, column) in model.schema.0.iter().enumerate() {
            if !column.ty.trim_end().ends_with(']') {
                continue;
            }
            for (_, values) in &mut rows.rows {
                if let Some(Some(text)) = values.get_mut(i)
                    && let Ok(crate::core::json::Json::Array(items)) = crate::core::json::Json::parse(text)
                    && let Some(spelled) = dialect.array_text(&items)
                {
                    *text = spelled;
                }
            }
        }
    }
    Ok(rows)
}

/// The first row of each column whose value does not fit the declared type, as messages naming
/// the file, row, column and value.
fn check_types(model: &Model, path: &str, rows: &seed::SeedRows, engine: &mut dyn Engine) -> Vec<String> {
    if rows.rows.is_empty() {
        return Vec::new();
    }
    let dialect = engine.sql();
    let firsts: Option<Vec<String>> = model
        .schema
        .0
        .iter()
        .map(|c| {
            let v = quote_ident(&c.name);
            let mut bad = format!("{} IS NULL", dialect.try_cast(&v, &c.ty)?);
            if is_integer_type(&c.ty) {
                bad = format!("{bad} OR {} <> {}", dialect.try_cast(&v, "DOUBLE")?, dialect.try_cast(&v, &c.ty)?);
            } else if let Some(digits) = innermost_element(&c.ty).and_then(rounded_digits_regex) {
                // A list (of lists) of integers or decimals rounds its elements as a scalar
                // column would: exactly, on the text, as above; an integer list's elements in
                // exponent notation, as doubles.
                let text = format!("CAST({v} AS VARCHAR)");
                bad = format!("{bad} OR regexp_matches({text}, '{digits}')");
                // (Integers only: a long decimal's cast to a double is not exact in DuckDB.)
                if list_element(&c.ty).is_some_and(is_integer_type) {
                    let exact = dialect.try_cast(&v, "DOUBLE[]")?;
                    let stored = dialect.try_cast(&dialect.try_cast(&v, &c.ty)?, "DOUBLE[]")?;
                    bad = format!("{bad} OR (regexp_matches({text}, '[0-9][eE]') AND {exact} IS DISTINCT FROM {stored})");
                }
            } else if let Some(scale) = decimal_scale(&c.ty) {
                // Exactly, on the text (a double has too few digits for wide decimals): a digit
                // other than 0 after the scale's; in exponent notation, as a double.
                // As the cast reads it: padding of any blank, `_` digit separators.
                let text = format!("replace(trim(CAST({v} AS VARCHAR), ' \t\n\r'), '_', '')");
                bad = format!(
                    "{bad} OR regexp_matches({text}, '^[+-]?[0-9]*\\.[0-9]{{{scale}}}[0-9]*[1-9][0-9]*$') OR (regexp_matches({text}, '[eE]') AND {} <> {})",
                    dialect.try_cast(&v, "DOUBLE")?,
                    dialect.try_cast(&v, &c.ty)?
                );
            }
            Some(format!("CAST(min(CAST({} AS BIGINT)) FILTER (WHERE {v} IS NOT NULL AND ({bad})) AS VARCHAR)", quote_ident(ORDINAL)))
        })
        .collect();
    let Some(firsts) = firsts else { return check_types_by_cast(model, path, rows, engine) };
    let sql = format!("SELECT {} FROM {}", firsts.join(", "), quote_ident(&stage_table(&model.name)));
    let found = match engine.query(&sql) {
        Ok(r) => r.into_iter().next().unwrap_or_default(),
        Err(e) => return vec![format!("cannot check the values of seed file `{path}`: {}", first_line(&e.message))],
    };
    let mut out = Vec::new();
    let exact = rounding_rows(model, rows);
    let offsets = offset_rows(model, rows);
    let cuts = cut_rows(model, rows);
    for (i, (column, ordinal)) in model.schema.0.iter().zip(found).enumerate() {
        // Decided on the text: a number a cast would round, a UTC offset it would drop.
        let by_text = exact[i].into_iter().chain(offsets[i]).min().map(|r| r + 1);
        let first = ordinal.and_then(|o| o.parse::<usize>().ok()).into_iter().chain(by_text).min();
        // A date or time the cast would cut (DuckDB's `TRY_CAST` accepts it): reported when it
        // comes before the first value that does not cast at all.
        if let Some((r, cut)) = &cuts[i]
            && first.is_none_or(|o| *r + 1 < o)
            && let Some((place, _)) = rows.rows.get(*r)
        {
            out.push(format!("`{path}`: {place}, column `{}`: {cut}", column.name));
            continue;
        }
        let Some(ordinal) = first else { continue };
        let Some((place, values)) = rows.rows.get(ordinal - 1) else { continue };
        let value = values[i].clone().unwrap_or_default();
        out.push(format!("`{path}`: {place}, column `{}`: {}", column.name, why(&value, &column.ty, engine)));
    }
    out
}

/// [`check_types`] on an engine whose failed cast is an error (Postgres): each column is cast
/// whole; a column that fails is searched by halves over the file order for its first value
/// that fails (a few queries per bad column, one per good column). Postgres refuses a fraction
/// for an integer type, but rounds a value with more decimals than a `numeric(p,s)` holds: those
/// are looked for too.
fn check_types_by_cast(model: &Model, path: &str, rows: &seed::SeedRows, engine: &mut dyn Engine) -> Vec<String> {
    let stage = quote_ident(&stage_table(&model.name));
    let ordinal = format!("CAST({} AS BIGINT)", quote_ident(ORDINAL));
    let mut out = Vec::new();
    let exact = rounding_rows(model, rows);
    let offsets = offset_rows(model, rows);
    let cuts = cut_rows(model, rows);
    for (i, column) in model.schema.0.iter().enumerate() {
        if let Some((place, values)) = exact[i].and_then(|r| rows.rows.get(r)) {
            let value = values[i].clone().unwrap_or_default();
            out.push(format!("`{path}`: {place}, column `{}`: {}", column.name, why(&value, &column.ty, engine)));
            continue;
        }
        // `CAST(… AS timestamptz)` rounds `.9999999` to the next second (maybe the next day),
        // `CAST(… AS date)` drops a time of day, both without an error.
        if let Some((r, cut)) = &cuts[i]
            && let Some((place, _)) = rows.rows.get(*r)
        {
            out.push(format!("`{path}`: {place}, column `{}`: {cut}", column.name));
            continue;
        }
        // `CAST(… AS varchar(n))` cuts a longer value without an error: lengths are checked
        // first, so a seed never serves a value other than its file's.
        if let Some(n) = declared_length(&column.ty) {
            let q = quote_ident(&column.name);
            if let Some((place, value)) = first_row(engine, &stage, rows, i, &format!("length({q}) > {n}")) {
                out.push(format!("`{path}`: {place}, column `{}`: `{value}` is longer than the {n} characters of `{}`", column.name, column.ty));
                continue;
            }
        }
        // `CAST(… AS numeric(p,s)[])` rounds an element with more decimals without an error.
        // (Only a scale the type names: Postgres's bare `numeric` rounds nothing.)
        if let Some(digits) = innermost_element(&column.ty).filter(|e| is_integer_type(e) || e.contains('(')).and_then(rounded_digits_regex)
            && let Some((place, value)) = first_row(engine, &stage, rows, i, &format!("{} ~ '{digits}'", quote_ident(&column.name)))
        {
            out.push(format!("`{path}`: {place}, column `{}`: {}", column.name, why(&value, &column.ty, engine)));
            continue;
        }
        // `CAST(… AS timestamp)` (or `time`) drops a UTC offset without an error.
        if let Some((place, values)) = offsets[i].and_then(|r| rows.rows.get(r)) {
            let value = values[i].clone().unwrap_or_default();
            out.push(format!("`{path}`: {place}, column `{}`: {}", column.name, why(&value, &column.ty, engine)));
            continue;
        }
        let cast = format!("count(CAST({} AS {}))", quote_ident(&column.name), column.ty);
        let fits =
            |engine: &mut dyn Engine, lo: usize, hi: usize| engine.query(&format!("SELECT {cast} FROM {stage} WHERE {ordinal} BETWEEN {lo} AND {hi}")).is_ok();
        let (mut lo, mut hi) = (1, rows.rows.len());
        if fits(engine, lo, hi) {
            // `CAST(… AS numeric(p,s))` rounds a value with more decimals without an error.
            if decimal_scale(&column.ty).is_some() {
                let q = quote_ident(&column.name);
                if let Some((place, value)) = first_row(engine, &stage, rows, i, &format!("CAST({q} AS NUMERIC) <> CAST({q} AS {})", column.ty)) {
                    out.push(format!("`{path}`: {place}, column `{}`: {}", column.name, why(&value, &column.ty, engine)));
                }
            }
            continue;
        }
        // Invariant: some row in [lo, hi] fails.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(engine, lo, mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let Some((place, values)) = rows.rows.get(lo - 1) else { continue };
        let value = values[i].clone().unwrap_or_default();
        out.push(format!("`{path}`: {place}, column `{}`: {}", column.name, why(&value, &column.ty, engine)));
    }
    out
}

/// Per column of an integer or `decimal(p,s)` type (or a list of one), the first row (index in
/// `rows`) holding a number the type would round, decided on the number's text
/// ([`crate::core::schema::decimals_of`], exactly): the engines' checks compare doubles, which
/// cannot tell `9007199254740993.5` from an integer, and a list's elements in exponent notation
/// (`[1.5555E1]` into `decimal(10,2)[]`) escape their pattern.
fn rounding_rows(model: &Model, rows: &seed::SeedRows) -> Vec<Option<usize>> {
    use crate::core::schema::{decimals_of, rounds};
    model
        .schema
        .0
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let list = innermost_element(&c.ty);
            let element = list.unwrap_or(&c.ty);
            if !is_integer_type(element) && decimal_scale(element).is_none() {
                return None;
            }
            rows.rows.iter().position(|(_, values)| {
                values.get(i).and_then(|v| v.as_deref()).is_some_and(|text| {
                    let numbers: Vec<&str> = if list.is_some() { text.split(['[', ']', '{', '}', ',']).collect() } else { vec![text] };
                    numbers.iter().any(|n| decimals_of(n.trim().trim_matches(['\'', '"'])).is_some_and(|d| rounds(element, d)))
                })
            })
        })
        .collect()
}

/// Per column of a timestamp or time type without a time zone ([`drops_utc_offset`]), the first
/// row (index in `rows`) whose value ends with a UTC offset other than zero, which the cast would
/// drop without an error (`10:00:00+02` stored as `10:00:00`, on DuckDB and Postgres alike).
/// Decided on the text by [`nonzero_utc_offset`], the check unit-test fixtures use, so that every
/// offset DuckDB reads is seen (`+02:00:00`, after a one-digit second, before a blank the cast
/// skips: `+02\t`), the same on both engines.
fn offset_rows(model: &Model, rows: &seed::SeedRows) -> Vec<Option<usize>> {
    model
        .schema
        .0
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if !drops_utc_offset(&c.ty) {
                return None;
            }
            rows.rows.iter().position(|(_, values)| values.get(i).and_then(|v| v.as_deref()).is_some_and(|text| nonzero_utc_offset(text).is_some()))
        })
        .collect()
}

/// Per column of a date or time type, the first row (index in `rows`) whose value the cast
/// would change without an error, and why ([`temporal_cut`], the check unit-test fixtures use:
/// a time of day into a `date`; more digits of a second's fraction than the type keeps, which
/// DuckDB cuts and Postgres rounds, so `2026-01-02 23:59:59.9999999+00` would be a different
/// day on each). Decided on the text, the same on both engines.
fn cut_rows(model: &Model, rows: &seed::SeedRows) -> Vec<Option<(usize, String)>> {
    model
        .schema
        .0
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if !c.ty.trim().eq_ignore_ascii_case("date") && second_digits(&c.ty).is_none() {
                return None;
            }
            rows.rows.iter().enumerate().find_map(|(r, (_, values))| temporal_cut(values.get(i)?.as_deref()?, &c.ty).map(|why| (r, why)))
        })
        .collect()
}

/// The first row of the seed's stage table `stage` (in file order) where `filter` holds: its place in the file
/// and its value of column `i`; `None` when there is none (or the query fails: the whole-column
/// cast that follows reports that).
fn first_row(engine: &mut dyn Engine, stage: &str, rows: &seed::SeedRows, i: usize, filter: &str) -> Option<(String, String)> {
    let sql = format!("SELECT CAST(min(CAST({} AS BIGINT)) AS VARCHAR) FROM {stage} WHERE {filter}", quote_ident(ORDINAL));
    let ordinal = engine.query(&sql).ok()?.into_iter().next()?.into_iter().next().flatten()?.parse::<usize>().ok()?;
    let (place, values) = rows.rows.get(ordinal.checked_sub(1)?)?;
    Some((place.to_string(), values[i].clone().unwrap_or_default()))
}

/// The length `n` of a `varchar(n)` / `char(n)` / `character varying(n)` type, if it is one.
fn declared_length(ty: &str) -> Option<u64> {
    let t = ty.trim().to_ascii_lowercase();
    let (base, rest) = t.split_once('(')?;
    let base = base.trim();
    if !matches!(base, "varchar" | "char" | "character" | "character varying" | "bpchar" | "nvarchar") {
        return None;
    }
    rest.strip_suffix(')')?.trim().parse().ok()
}

/// Why `value` does not fit `ty`: the engine's cast error, the UTC offset a timestamp or time
/// without a time zone would drop, or the rounding an integer or decimal column would do.
fn why(value: &str, ty: &str, engine: &mut dyn Engine) -> String {
    let shown = if value.is_empty() { "`\"\"` (a quoted empty string; leave the field empty, unquoted, for NULL)".to_string() } else { format!("`{value}`") };
    match engine.query(&format!("SELECT CAST(CAST({} AS {ty}) AS VARCHAR)", engine.sql().text_of(&quote_literal(value)))) {
        Err(e) => format!("{shown} is not a valid `{ty}`: {}", first_line(&e.message).trim()),
        Ok(r) => {
            let to = r.first().and_then(|row| row.first().cloned().flatten()).unwrap_or_default();
            match decimal_scale(ty) {
                _ if drops_utc_offset(ty) && nonzero_utc_offset(value).is_some() => format!(
                    "{shown} has the UTC offset `{}`, which `{ty}` (no time zone) would drop, storing {to}: declare `{}`, or write the time in UTC",
                    nonzero_utc_offset(value).unwrap_or_default(),
                    if is_naive_time(ty) { "timetz" } else { "timestamptz" }
                ),
                Some(scale) => format!("{shown} has more than the {scale} decimal(s) of `{ty}`, which would round it to {to}"),
                None if innermost_element(ty).is_some() => {
                    format!("{shown} holds a value its elements' type would round; column type `{ty}` would make it {to}")
                }
                None => format!("{shown} is not a whole number; column type `{ty}` would round it to {to}"),
            }
        }
    }
}

/// The table `physical` replaced by `SELECT CAST(<col> AS <type>) AS <col>, … FROM <stage> ORDER
/// BY <ordinal>` ([`crate::engine::dialect::Dialect::replace_table_as`]): the seed's table, typed
/// as declared, rows in file order.
pub fn build_statements(model: &Model, physical: &str, dialect: &dyn crate::engine::dialect::Dialect) -> Vec<String> {
    let cols: Vec<String> = model.schema.0.iter().map(|c| format!("CAST({q} AS {}) AS {q}", c.ty, q = quote_ident(&c.name))).collect();
    let query = format!("\nSELECT {}\nFROM {}\nORDER BY CAST({} AS BIGINT)", cols.join(", "), quote_ident(&stage_table(&model.name)), quote_ident(ORDINAL));
    dialect.replace_table_as(physical, &query)
}

/// Drops the stage tables of the seeds in `pending` (best effort: they are session-local and
/// vanish with the connection anyway).
pub fn drop_stages(project: &Project, pending: &BTreeSet<ModelName>, engine: &mut dyn Engine) {
    for model in pending.iter().filter_map(|n| project.dag.get(n)) {
        if matches!(model.kind, Kind::Seed(_)) {
            let dialect = engine.sql();
            let _ = engine.execute(&dialect.drop_table_if_exists(&dialect.temp_relation(&stage_table(&model.name))));
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_types_are_recognised_by_any_spelling() {
        assert!(is_integer_type(" BIGINT "));
        assert!(is_integer_type("int4"));
        assert!(!is_integer_type("double"));
        assert!(!is_integer_type("decimal(18, 2)"));
    }
}
