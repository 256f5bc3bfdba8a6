//! The schema contract: what a query returns must match what its model declares — the same
//! names, in the same order, with compatible type families (reference `core-semantics.md` §5.3).
//! Checked for every model of an apply before anything is built; every problem is reported.

use super::resolve::{ExecResolver, Mode, external_source};
use crate::core::interval::Interval;
use crate::core::{External, Kind, Location, Model, ModelName, Schema, TypeFamily};
use crate::engine::{DescribedColumn, Engine};
use crate::project::Project;
use std::collections::{BTreeMap, BTreeSet};

/// One contract violation.
#[derive(Debug, Clone, PartialEq)]
pub struct ContractProblem {
    /// The model at fault.
    pub model: ModelName,
    /// Where it is defined.
    pub location: Location,
    /// What is wrong, naming the column.
    pub message: String,
}

/// Renders problems one per line for error messages.
pub fn render(problems: &[ContractProblem]) -> String {
    problems.iter().map(|p| format!("  {}: model `{}`: {}", p.location, p.model, p.message)).collect::<Vec<_>>().join("\n")
}

/// Compares a declared schema with a query's described output.
pub fn compare(declared: &Schema, actual: &[DescribedColumn]) -> Vec<String> {
    let mut out = Vec::new();
    let actual_names: Vec<&str> = actual.iter().map(|c| c.name.as_str()).collect();
    for d in &declared.0 {
        match actual.iter().find(|c| c.name == d.name) {
            None => out.push(format!("declared column `{}` is not returned by the query", d.name)),
            Some(a) => {
                let (want, got) = (TypeFamily::of(&d.ty), TypeFamily::of(&a.ty));
                if !want.compatible(got) {
                    out.push(format!("column `{}` is declared `{}` ({want}) but the query returns `{}` ({got})", d.name, d.ty, a.ty));
                } else if let Some(why) = zone_mismatch(&d.ty, &a.ty) {
                    out.push(format!("column `{}` is declared `{}` but the query returns `{}`: {why}", d.name, d.ty, a.ty));
                }
            }
        }
    }
    for (i, a) in actual.iter().enumerate() {
        if !declared.contains(&a.name) {
            out.push(format!("the query returns column `{}` ({}), which the schema does not declare", a.name, a.ty));
        } else if actual[..i].iter().filter(|b| b.name == a.name).count() == 1 {
            out.push(format!("the query returns column `{}` more than once (name each output column once)", a.name));
        }
    }
    if out.is_empty() {
        let declared_names: Vec<&str> = declared.names().collect();
        if declared_names != actual_names {
            out.push(format!("columns are returned in another order: declared ({}), returned ({})", declared_names.join(", "), actual_names.join(", ")));
        }
    }
    out
}

/// For a CSV external read with the default delimiter: a hint that efmesh does not sniff it
/// (a file separated by `;` read with `,` has one column named like the whole header). `found`:
/// the columns the file was read with, when known: the hint is then given only when there is
/// one, named with another likely delimiter in it (a header cut at `,` into several columns
/// is read with the right one).
fn delimiter_hint(m: &Model, found: Option<&[String]>) -> String {
    let looks_undivided = found.is_none_or(|f| matches!(f, [one] if one.contains([';', '|', '\t', ','])));
    match &m.kind {
        Kind::External(crate::core::External::Files { format: crate::core::FileFormat::Csv, csv, .. })
            if csv.as_ref().is_none_or(|c| c.delimiter.is_none()) && looks_undivided =>
        {
            "\n  hint: the file is read with the delimiter `,` (a tab for a `.tsv` path), never sniffed: declare `delimiter` (e.g. `delimiter = \";\"`) if it uses another".to_string()
        }
        _ => String::new(),
    }
}

/// When the CSV external `m` (read with a header) could not be read because its file lacks
/// columns its schema declares (the reader refuses declared types for columns the header does
/// not name), the problem in efmesh's words: the file (or the glob), the missing columns, the
/// columns the file has (read once more, without the declared types), and a hint. `None` when
/// `m` is no such external, the file cannot be read even so, or it has every declared column
/// (the failure was another one).
fn missing_csv_columns(project: &Project, m: &Model, engine: &mut dyn Engine) -> Option<String> {
    let Kind::External(ext @ External::Files { path, format: crate::core::FileFormat::Csv, csv, union_by_name, .. }) = &m.kind else { return None };
    if csv.as_ref().and_then(|c| c.header) == Some(false) {
        return None;
    }
    let root = project.config.root.clone();
    let raw = format!("SELECT * FROM {}", ext.render(&|p| super::resolve::resolve_source_path(&root, p), &[]));
    let found: Vec<String> = engine.describe(&raw).ok()?.into_iter().map(|c| c.name).collect();
    // The reader matches declared names to the header's regardless of letter case.
    let missing: Vec<String> = m.schema.0.iter().filter(|d| !found.iter().any(|f| f.eq_ignore_ascii_case(&d.name))).map(|d| d.name.clone()).collect();
    if missing.is_empty() {
        return None;
    }
    let glob = path.contains(['*', '?', '[', '{']);
    let (what, has, columns) = if glob {
        (format!("the CSV files matching `{path}`"), "have", "read together, their columns are")
    } else {
        (format!("the CSV file `{path}`"), "has", "its header names")
    };
    let hint = match delimiter_hint(m, Some(&found)) {
        h if !h.is_empty() => h,
        _ if glob && *union_by_name != Some(true) => {
            "\n  hint: declare the columns as the files' headers name them; files whose headers differ are read by position unless `union_by_name = true`"
                .to_string()
        }
        _ => "\n  hint: declare the columns as the file's header names them, or add the missing ones to the file".to_string(),
    };
    Some(format!(
        "cannot read the source: {what} {has} no column{} {}, which the schema declares ({columns} {}){hint}",
        if missing.len() == 1 { "" } else { "s" },
        listed(&missing),
        listed(&found)
    ))
}

/// `names` as `` `a`, `b` ``, cut after the first 20 (`…, and 5 more`).
fn listed(names: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut out: Vec<String> = names.iter().take(SHOWN).map(|n| format!("`{n}`")).collect();
    if names.len() > SHOWN {
        out.push(format!("and {} more", names.len() - SHOWN));
    }
    out.join(", ")
}

/// True when the relation consumers read of external `m` casts its columns to their declared
/// types ([`crate::core::External::typed_by_consumers`]).
fn ext_casts(m: &Model) -> bool {
    matches!(&m.kind, Kind::External(ext) if ext.typed_by_consumers())
}

/// Why a declared timestamp and the one the engine gives differ in having a time zone, when
/// they do. The tables keep the engine's type while the contract's stand-ins for unbuilt parents
/// and sources are typed as declared, and efmesh writes interval bounds as the declared type
/// says ([`super::batch::time_column_bounds`]): a comparison across the two converts one side in
/// the session's time zone, which a `SET TimeZone` moves (rows lost or taken from the next
/// interval while the ledger records it done).
fn zone_mismatch(declared: &str, got: &str) -> Option<String> {
    // Instants only (dates and timestamps); `any`, times and intervals are not compared.
    let instant = |t: &str| {
        let t = t.trim().to_ascii_lowercase();
        t == "date" || t.starts_with("timestamp") || t.starts_with("datetime")
    };
    if !(instant(declared) && instant(got)) {
        return None;
    }
    let (want, have) = (crate::core::schema::is_zoned_timestamp(declared), crate::core::schema::is_zoned_timestamp(got));
    (want != have).then(|| {
        let cast = if want { "TIMESTAMPTZ" } else { "TIMESTAMP" };
        format!(
            "one has a time zone and the other none, so comparing them would depend on the session's time zone; cast it (`CAST(… AS {cast})`) or declare the type it has"
        )
    })
}

/// Checks every model in `pending` (and the external sources they read) against the engine,
/// without building anything.
pub fn check(project: &Project, physicals: &BTreeMap<ModelName, String>, pending: &BTreeSet<ModelName>, engine: &mut dyn Engine) -> Vec<ContractProblem> {
    let problem = |m: &Model, message: String| ContractProblem { model: m.name.clone(), location: m.location.clone(), message };
    let mut problems = Vec::new();

    // 1. Declared types must be engine types (one statement when all are valid).
    let mut involved: Vec<&Model> = pending.iter().filter_map(|n| project.dag.get(n)).collect();
    let externals: BTreeSet<ModelName> =
        involved.iter().flat_map(|m| m.parents()).filter(|p| project.dag.get(p).is_some_and(|m| matches!(m.kind, Kind::External(_)))).collect();
    involved.extend(externals.iter().filter_map(|n| project.dag.get(n)));
    // One statement casting NULL to every distinct declared type; per type only if it fails.
    let mut types: Vec<&str> = involved.iter().flat_map(|m| m.schema.0.iter().map(|c| c.ty.as_str())).collect();
    types.sort_unstable();
    types.dedup();
    for (t, message) in crate::engine::refused_types(engine, &types) {
        for m in &involved {
            for c in m.schema.0.iter().filter(|c| c.ty == t) {
                let mut said = crate::engine::not_a_type(&c.name, &c.ty, engine.sql().title(), &message);
                // `-- schema: id integer name varchar`: a comma missing, not a type to correct.
                if let Some(hint) = crate::core::schema::missing_comma_hint(&c.name, &c.ty) {
                    said.push_str(&format!("\n  hint: {hint}"));
                }
                problems.push(problem(m, said));
            }
        }
    }
    if !problems.is_empty() {
        return problems;
    }

    // 2. External sources must provide their declared columns. Described together: binding a
    // file source reads it (DuckDB samples a CSV to find its dialect), so several are read at once.
    let (mut sources, mut raws): (Vec<&Model>, Vec<String>) = (Vec::new(), Vec::new());
    for name in &externals {
        let m = project.dag.get(name).expect("known");
        let Kind::External(ext) = &m.kind else { continue };
        if let Some(message) = missing_files(project, ext, engine) {
            problems.push(problem(m, message));
            continue;
        }
        sources.push(m);
        raws.push(format!("SELECT * FROM {}", external_source(project, m, ext)));
    }
    for (m, described) in sources.into_iter().zip(engine.describe_many(&raws)) {
        match described {
            Err(e) => {
                // A file lacking declared columns is said in efmesh's words, naming them.
                let message = missing_csv_columns(project, m, engine)
                    .unwrap_or_else(|| format!("cannot read the source: {}{}", first_line(&e.message), delimiter_hint(m, None)));
                problems.push(problem(m, message));
            }
            Ok(actual) => {
                let found: Vec<String> = actual.iter().map(|a| a.name.clone()).collect();
                for d in &m.schema.0 {
                    match actual.iter().find(|a| a.name == d.name) {
                        None => problems.push(problem(m, format!("declared column `{}` is not in the source{}", d.name, delimiter_hint(m, Some(&found))))),
                        Some(a) => {
                            let (want, got) = (TypeFamily::of(&d.ty), TypeFamily::of(&a.ty));
                            // A column the reader left untyped is cast by the relation consumers
                            // read (`External::typed_by_consumers`): its values decide at the build.
                            let cast = ext_casts(m) && got == TypeFamily::Json;
                            // A zoned time read as text is cast there too (`External::reads_as_text`).
                            let as_text = matches!(&m.kind, Kind::External(ext) if ext.guards_zoned(&d.ty)) && got == TypeFamily::Text;
                            if as_text {
                                // Its values decide at the build, as a JSON column's.
                            } else if !want.compatible(got) && !cast {
                                problems.push(problem(m, format!("column `{}` is declared `{}` ({want}) but the source has `{}` ({got})", d.name, d.ty, a.ty)));
                            } else if let Some(why) = zone_mismatch(&d.ty, &a.ty) {
                                problems.push(problem(m, format!("column `{}` is declared `{}` but the source has `{}`: {why}", d.name, d.ty, a.ty)));
                            }
                        }
                    }
                }
            }
        }
    }

    // 3. Every pending query against its declared schema.
    let resolver = ExecResolver::new(project, physicals, Mode::Contract(pending)).with_bounds(Some(Interval::new(0, 0)));
    let checked: Vec<(&Model, String)> =
        pending.iter().filter_map(|n| project.dag.get(n)).filter_map(|m| m.body.as_ref().map(|b| (m, b.render(&resolver)))).collect();
    let queries: Vec<String> = checked.iter().map(|(_, sql)| sql.clone()).collect();
    for ((m, sql), result) in checked.iter().zip(engine.describe_many(&queries)) {
        match result {
            Err(e) => problems.push(unbound(m, sql, &e.message)),
            Ok(actual) => problems.extend(compare(&m.schema, &actual).into_iter().map(|msg| problem(m, msg))),
        }
    }
    problems
}

/// A column a query returns in another type than the table it is written into stores, which
/// the table's type may not hold unchanged: `(column, the query's type, the stored type)`.
pub type LossyColumn = (String, String, String);

/// The columns of `returned` (a query's described columns) that `stored` (the table's) keeps in
/// another built-in scalar type, unless every value of the query's type fits the stored one
/// ([`lossless`]): written, their values may be rounded or cut. Types differing only within one
/// name (Postgres describes `numeric` without its precision) are not seen.
pub fn lossy_columns(returned: &[DescribedColumn], stored: &[DescribedColumn]) -> Vec<LossyColumn> {
    returned
        .iter()
        .filter_map(|c| {
            let table = stored.iter().find(|t| t.name.eq_ignore_ascii_case(&c.name))?;
            let differs = !table.ty.eq_ignore_ascii_case(&c.ty) && nameable(&table.ty) && nameable(&c.ty) && !lossless(&c.ty, &table.ty);
            differs.then(|| (c.name.clone(), c.ty.clone(), table.ty.clone()))
        })
        .collect()
}

/// Of the rows of `rows` (a relation, or a query in parentheses with an alias) that `filter`
/// keeps, those whose `column` (returned as `returned`) the type `stored` would change — round,
/// cut, or not hold at all (NULL where the engine has a `TRY_CAST`; the write would fail on it
/// otherwise): how many, and an example as `" (e.g. 2.3456 → 2.35)"`. `None` when there is none.
///
/// # Errors
/// The engine's, when the query fails.
pub fn changed_values(engine: &mut dyn Engine, rows: &str, filter: &str, lossy: &LossyColumn) -> Result<Option<(String, String)>, crate::engine::EngineError> {
    let (column, _, _) = lossy;
    let c = crate::core::name::quote_ident(column);
    let (stored_value, changed) = change_test(engine.sql(), lossy);
    let found = engine
        .query(&format!("SELECT count(*) OVER (), CAST({c} AS VARCHAR), CAST({stored_value} AS VARCHAR) FROM {rows} WHERE {filter} AND {changed} LIMIT 1"))?;
    Ok(found.first().map(|row| {
        let n = row.first().cloned().flatten().unwrap_or_default();
        let example = match (row.get(1).cloned().flatten(), row.get(2).cloned().flatten()) {
            (Some(from), to) => format!(" (e.g. {from} → {})", to.unwrap_or_else(|| "NULL".into())),
            _ => String::new(),
        };
        (n, example)
    }))
}

/// The first column whose values a stored type would change ([`first_changed`]): its index
/// among the columns asked, and how many values with an example (as [`changed_values`] says).
pub type FirstChanged = (usize, (String, String));

/// A check query that failed ([`first_changed`]): the index of its column and the engine's error.
pub type ColumnFailed = (usize, crate::engine::EngineError);

/// Of `columns` (each as [`changed_values`] takes it), the first in their order that has a value
/// among the rows of `rows` that `filter` keeps which its stored type would change: its index and
/// what [`changed_values`] says of it (the same count and example as when it is checked alone).
/// One scan of `rows` counts every column's changed values ([`changed_counts_sql`]); only a
/// column found with some is queried again, for its example. A model's query is scanned once
/// per batch then, not once per such column (each scan re-runs the whole query). When that scan
/// fails (Postgres, without a `TRY_CAST`, fails on a value the stored type cannot hold) each
/// column is checked alone in order, so that the error is the first failing column's.
///
/// # Errors
/// The engine's, with the index of the column whose query failed.
pub fn first_changed(engine: &mut dyn Engine, rows: &str, filter: &str, columns: &[LossyColumn]) -> Result<Option<FirstChanged>, ColumnFailed> {
    // One column: its own query is the one scan.
    let counted = if columns.len() > 1 {
        let sql = changed_counts_sql(engine.sql(), rows, filter, columns);
        engine.query(&sql).ok()
    } else {
        None
    };
    // Each column's count as the scan gave it; a column not counted (no scan) is queried.
    let counts: Vec<Option<String>> = counted.and_then(|found| found.into_iter().next()).unwrap_or_default();
    for (i, lossy) in columns.iter().enumerate() {
        if counts.get(i).is_some_and(|n| n.as_deref() == Some("0")) {
            continue;
        }
        if let Some(found) = changed_values(engine, rows, filter, lossy).map_err(|e| (i, e))? {
            return Ok(Some((i, found)));
        }
    }
    Ok(None)
}

/// The statement [`first_changed`] scans `rows` with: one row counting, per column of `columns`
/// in their order, the rows `filter` keeps whose value its stored type would change (the test
/// [`changed_values`] applies), in standard SQL but for `dialect`'s conversion.
fn changed_counts_sql(dialect: &dyn crate::engine::dialect::Dialect, rows: &str, filter: &str, columns: &[LossyColumn]) -> String {
    let counts: Vec<String> = columns.iter().map(|lossy| format!("count(CASE WHEN {} THEN 1 END)", change_test(dialect, lossy).1)).collect();
    format!("SELECT {} FROM {rows} WHERE {filter}", counts.join(", "))
}

/// For `lossy`'s column: its value as the stored type holds it (`NULL` where the dialect has a
/// `TRY_CAST` and the type cannot hold it at all), and the condition that this changes it.
fn change_test(dialect: &dyn crate::engine::dialect::Dialect, (column, returned, stored): &LossyColumn) -> (String, String) {
    let c = crate::core::name::quote_ident(column);
    let stored_value = dialect.try_cast(&c, stored).unwrap_or_else(|| format!("CAST({c} AS {stored})"));
    let changed = format!("CAST({stored_value} AS {returned}) IS DISTINCT FROM {c}");
    (stored_value, changed)
}

/// True when every value of type `from` is stored unchanged in a column of type `to` (DuckDB's
/// spellings): a wider integer, a wider decimal (as many digits before and after the point), a
/// `DOUBLE` for a `FLOAT` or an integer of at most 32 bits, a `TIMESTAMP` for a `DATE`. Anything
/// else is not known to be: its values are checked.
pub fn lossless(from: &str, to: &str) -> bool {
    let (from, to) = (from.trim().to_ascii_uppercase(), to.trim().to_ascii_uppercase());
    if from == to {
        return true;
    }
    // Decimal digits of each integer type (its largest magnitude), by width.
    let int = |t: &str| match t {
        "TINYINT" => Some((1, 3)),
        "SMALLINT" => Some((2, 5)),
        "INTEGER" => Some((3, 10)),
        "BIGINT" => Some((4, 19)),
        "HUGEINT" => Some((5, 39)),
        _ => None,
    };
    let decimal = |t: &str| -> Option<(i64, i64)> {
        let inner = t.strip_prefix("DECIMAL(").or_else(|| t.strip_prefix("NUMERIC("))?.strip_suffix(')')?;
        let (p, s) = inner.split_once(',')?;
        Some((p.trim().parse().ok()?, s.trim().parse().ok()?))
    };
    match (int(&from), int(&to), decimal(&from), decimal(&to)) {
        (Some((a, _)), Some((b, _)), _, _) => a <= b,
        (Some((_, digits)), None, _, Some((p, s))) => digits <= p - s,
        (None, None, Some((p, s)), Some((p2, s2))) => s2 >= s && p2 - s2 >= p - s,
        _ => matches!(
            (from.as_str(), to.as_str()),
            ("FLOAT", "DOUBLE") | ("TINYINT" | "SMALLINT" | "INTEGER", "DOUBLE") | ("TINYINT" | "SMALLINT", "FLOAT") | ("DATE", "TIMESTAMP")
        ),
    }
}

/// The types a model's query gives its columns, described as the contract check binds it
/// (models still to build as typed empty relations). The table a build creates has these types,
/// not the declared ones (the contract compares only their families), so a column added to an
/// existing table must have them too: a narrower declared type (`decimal(10,1)`, `real`,
/// `timestamp(0)`, `varchar(1)`) would round or cut what the query gives, and every later
/// comparison of the query with the stored value would see a change.
///
/// # Errors
/// The engine's, when the query does not bind.
pub fn query_columns(
    project: &Project,
    physicals: &BTreeMap<ModelName, String>,
    pending: &BTreeSet<ModelName>,
    model: &Model,
    engine: &mut dyn Engine,
) -> Result<Vec<DescribedColumn>, crate::engine::EngineError> {
    let resolver = ExecResolver::new(project, physicals, Mode::Contract(pending)).with_bounds(Some(Interval::new(0, 0)));
    match model.body.as_ref() {
        Some(body) => engine.describe(&body.render(&resolver)),
        None => Ok(Vec::new()),
    }
}

/// A type to create column `name` with: the query's own (`described`) when it may name one
/// ([`nameable`]), else the declared one.
pub fn column_type<'a>(described: &'a [DescribedColumn], name: &str, declared: &'a str) -> &'a str {
    match described.iter().find(|c| c.name.eq_ignore_ascii_case(name)) {
        Some(c) if nameable(&c.ty) => &c.ty,
        _ => declared,
    }
}

/// True when a described type may name a column efmesh creates or casts to: a built-in scalar
/// type. Postgres names another type (an enum, a domain) without its schema, which would not
/// resolve, and DuckDB spells an enum with its values; Postgres's length-less `CHAR` (any
/// `char(n)`) would mean `char(1)`.
pub fn nameable(ty: &str) -> bool {
    TypeFamily::of(ty).is_scalar() && !ty.eq_ignore_ascii_case("CHAR")
}

/// For a local file external, a message when its path or glob matches no file (the engine's own
/// error would name only the resolved pattern); `None` when files match, and for tables and
/// URLs (which the engine reports itself). `efmesh check` warns of the same
/// (`missing_source_file`, `crate::cli::check`), with the same words.
fn missing_files(project: &Project, ext: &External, engine: &mut dyn Engine) -> Option<String> {
    let External::Files { path, .. } = ext else { return None };
    if super::resolve::is_url(path) {
        return None;
    }
    let resolved = super::resolve::resolve_source_path(&project.config.root, path);
    crate::engine::matches_no_file(engine, &resolved)?.then(|| super::resolve::no_file_message(&project.config.root, path))
}

/// A query that does not bind, at the line the engine points at (`LINE n:` of its message, a
/// line of `sql` as rendered for the check): that line of the model's file ([`Model::query_lines`]:
/// a `.sql` file, or a Lua or Rhai query written there as it is) when the rendered query has the
/// lines of the one written (no embedded model inlined over several lines), otherwise the model's
/// location with the line of the rendered query (`efmesh render` shows it).
fn unbound(m: &Model, sql: &str, message: &str) -> ContractProblem {
    let line = crate::engine::error_line(message);
    let as_written = sql.matches('\n').count() + 1 == m.query_lines.len();
    let (location, at) = match (line, as_written) {
        (Some(n), true) => (m.location_of_query_line(Some(n)), String::new()),
        (Some(n), false) => (m.location.clone(), format!(" (line {n} of the query as `efmesh render` shows it)")),
        (None, _) => (m.location.clone(), String::new()),
    };
    ContractProblem {
        model: m.name.clone(),
        location,
        message: crate::core::error::bounded_words(format!("the query does not bind{at}: {}", first_line(message))),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Column;

    #[test]
    fn a_column_is_created_with_the_querys_built_in_scalar_type_else_the_declared_one() {
        let described = vec![desc("share", "DECIMAL(11,2)"), desc("mood", "MOOD"), desc("flag", "CHAR"), desc("tags", "VARCHAR[]")];
        assert_eq!(column_type(&described, "share", "decimal(10,1)"), "DECIMAL(11,2)");
        assert_eq!(column_type(&described, "mood", "app.mood"), "app.mood", "a Postgres user type is named without its schema");
        assert_eq!(column_type(&described, "flag", "char(3)"), "char(3)", "Postgres's `CHAR` would mean char(1)");
        assert_eq!(column_type(&described, "tags", "varchar[]"), "varchar[]");
        assert_eq!(column_type(&described, "absent", "bigint"), "bigint");
    }

    /// The columns a CSV file lacks or has are listed quoted, a long header cut after 20 names.
    #[test]
    fn listed_columns_are_quoted_and_a_long_list_is_cut() {
        let names = |n: usize| (0..n).map(|i| format!("c{i}")).collect::<Vec<_>>();
        assert_eq!(listed(&names(2)), "`c0`, `c1`");
        let long = listed(&names(23));
        assert!(long.starts_with("`c0`, `c1`") && long.ends_with("`c19`, and 3 more") && !long.contains("`c20`"), "{long}");
    }

    #[test]
    fn a_column_returned_twice_is_named_once() {
        let declared = crate::core::Schema(vec![col("id", "integer")]);
        let problems = compare(&declared, &[desc("id", "INTEGER"), desc("id", "INTEGER"), desc("id", "INTEGER")]);
        assert_eq!(problems, ["the query returns column `id` more than once (name each output column once)"]);
    }

    #[test]
    fn every_column_a_stored_type_may_change_is_counted_in_one_scan_of_the_rows() {
        let columns: Vec<LossyColumn> = vec![
            ("s".into(), "HUGEINT".into(), "BIGINT".into()),
            ("n".into(), "BIGINT".into(), "INTEGER".into()),
            ("a\"b".into(), "DECIMAL(38,2)".into(), "DECIMAL(18,2)".into()),
        ];
        let sql = changed_counts_sql(&crate::engine::dialect::Standard, "(\nSELECT 1\n) AS _efmesh_q", "\"t\" >= 1", &columns);
        assert_eq!(
            sql,
            "SELECT count(CASE WHEN CAST(CAST(\"s\" AS BIGINT) AS HUGEINT) IS DISTINCT FROM \"s\" THEN 1 END), \
             count(CASE WHEN CAST(CAST(\"n\" AS INTEGER) AS BIGINT) IS DISTINCT FROM \"n\" THEN 1 END), \
             count(CASE WHEN CAST(CAST(\"a\"\"b\" AS DECIMAL(18,2)) AS DECIMAL(38,2)) IS DISTINCT FROM \"a\"\"b\" THEN 1 END) \
             FROM (\nSELECT 1\n) AS _efmesh_q WHERE \"t\" >= 1"
        );
        assert_eq!(sql.matches("SELECT 1").count(), 1, "the model's query is run once for every column");
    }

    fn col(n: &str, t: &str) -> Column {
        Column { name: n.into(), ty: t.into() }
    }
    fn desc(n: &str, t: &str) -> DescribedColumn {
        DescribedColumn { name: n.into(), ty: t.into() }
    }

    #[test]
    fn only_casts_known_to_keep_every_value_skip_the_value_check() {
        for (from, to) in [
            ("INTEGER", "BIGINT"),
            ("DECIMAL(10,2)", "DECIMAL(18,4)"),
            ("INTEGER", "DECIMAL(12,2)"),
            ("FLOAT", "DOUBLE"),
            ("DATE", "TIMESTAMP"),
            ("integer", "INTEGER"),
        ] {
            assert!(lossless(from, to), "{from} → {to}");
        }
        for (from, to) in [
            ("BIGINT", "INTEGER"),
            ("DECIMAL(18,4)", "DECIMAL(10,2)"),
            ("DECIMAL(10,2)", "DECIMAL(10,4)"),
            ("BIGINT", "DOUBLE"),
            ("DOUBLE", "FLOAT"),
            ("TIMESTAMP", "DATE"),
            ("INTEGER", "DECIMAL(9,0)"),
        ] {
            assert!(!lossless(from, to), "{from} → {to}");
        }
        let lossy =
            lossy_columns(&[desc("a", "DECIMAL(18,4)"), desc("b", "INTEGER"), desc("c", "VARCHAR")], &[desc("a", "DECIMAL(10,2)"), desc("B", "BIGINT")]);
        assert_eq!(lossy, vec![("a".to_string(), "DECIMAL(18,4)".to_string(), "DECIMAL(10,2)".to_string())]);
    }

    #[test]
    fn lists_every_problem() {
        let declared = Schema(vec![col("a", "varchar"), col("b", "bigint"), col("c", "date")]);
        let actual = [desc("a", "INTEGER"), desc("c", "DATE"), desc("d", "VARCHAR")];
        let p = compare(&declared, &actual);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("`a`") && p[0].contains("numeric"));
        assert!(p[1].contains("`b`") && p[1].contains("not returned"));
        assert!(p[2].contains("`d`") && p[2].contains("does not declare"));
    }

    #[test]
    fn order_matters_and_any_is_unchecked() {
        let declared = Schema(vec![col("a", "varchar"), col("b", "json")]);
        assert!(compare(&declared, &[desc("a", "VARCHAR"), desc("b", "STRUCT(x INTEGER)")]).is_empty());
        let p = compare(&declared, &[desc("b", "JSON"), desc("a", "VARCHAR")]);
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("order"));
    }

    #[test]
    fn json_passes_for_text_and_nested_declarations_only() {
        let declared = Schema(vec![col("n", "integer"), col("d", "date"), col("t", "varchar"), col("s", "struct(x integer)")]);
        let p = compare(&declared, &[desc("n", "JSON"), desc("d", "JSON"), desc("t", "JSON"), desc("s", "JSON")]);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("`n`") && p[0].contains("(numeric) but the query returns `JSON` (json)"), "{p:?}");
        assert!(p[1].contains("`d`") && p[1].contains("(temporal)"), "{p:?}");
    }
}
