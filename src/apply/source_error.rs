//! A build that failed on a record of a CSV file an external model reads, restated in efmesh's
//! terms. The engine reports it against the statement that read the file, so the build error
//! names the consumer; DuckDB's message then suggests its own reader options (`nullstr`) and
//! dumps its reader settings. The message becomes the engine's first lines (the record and what
//! is wrong with it), the external model(s) that could have failed so with their definitions,
//! the file and the record, and a hint naming the kind option (`null_markers`) or the declared
//! column to change. The engine's whole message goes to the debug log. When no external reading
//! the file could have failed so (the model's own `read_csv` did), the engine's message stays.

use super::ApplyError;
use super::resolve::resolve_source_path;
use crate::core::schema::same_type;
use crate::core::{External, FileFormat, Kind, Model};
use crate::engine::{CsvLineError, Engine, EngineError};
use crate::project::Project;

/// Values a CSV file may hold for "no value": a conversion refusing one of them (in any case) is
/// hinted to be a `null_markers` entry rather than a wrong type.
const NULL_SPELLINGS: [&str; 13] = ["NA", "N/A", "#N/A", "NULL", "None", "nil", "NaN", "-", "--", ".", "?", "\\N", "missing"];

/// Longest text of the failing record quoted (in characters); longer ones end with `…`.
const QUOTED_LINE: usize = 200;

/// `error` with each build failure on a record of a CSV file that an external ancestor of the
/// model reads restated ([`restated`]), also among several failures; every other error as it is,
/// and one that no external reading the file could have caused ([`could_fail`]) too.
pub(crate) fn explain(project: &Project, engine: &dyn Engine, error: ApplyError) -> ApplyError {
    match error {
        ApplyError::Build { model, location, interval, error } => {
            let error = match engine.csv_line_error(&error) {
                Some(csv) => {
                    let readers: Vec<&Model> =
                        project.dag.ancestors(&model).into_iter().filter(|m| reads_file(project, m, &csv.file) && could_fail(m, &csv)).collect();
                    if readers.is_empty() {
                        error
                    } else {
                        tracing::debug!(model = %model, "the engine's whole message: {}", error.message);
                        EngineError { message: restated(&readers, &csv), ..error }
                    }
                }
                None => error,
            };
            ApplyError::Build { model, location, interval, error }
        }
        ApplyError::Several(all) => ApplyError::Several(all.into_iter().map(|e| explain(project, engine, e)).collect()),
        ApplyError::SeveralInRun(all) => ApplyError::SeveralInRun(all.into_iter().map(|e| explain(project, engine, e)).collect()),
        other => other,
    }
}

/// True when `m` is a CSV external whose path (or glob) is `file`, as the engine names it: the
/// path efmesh resolves against the project directory, or a file it matches.
fn reads_file(project: &Project, m: &Model, file: &str) -> bool {
    let Kind::External(External::Files { path, format: FileFormat::Csv, .. }) = &m.kind else { return false };
    let resolved = resolve_source_path(&project.config.root, path);
    resolved == file
        || (resolved.contains(['*', '?', '[', '{'])
            && globset::GlobBuilder::new(&resolved).literal_separator(true).build().is_ok_and(|g| g.compile_matcher().is_match(file)))
}

/// True when reading the file as the CSV external `m` does could have failed as `csv` says: for a
/// value its type refused, `m` declares the column with the type the engine converted to and
/// does not already read the value as NULL (one of its `null_markers`); a problem of the record's
/// fields (another number of them) any reader of the file meets.
fn could_fail(m: &Model, csv: &CsvLineError) -> bool {
    let Some(c) = &csv.conversion else { return true };
    let markers: &[String] = match &m.kind {
        Kind::External(External::Files { null_markers, .. }) => null_markers.as_slice(),
        _ => &[],
    };
    m.schema.0.iter().any(|col| col.name.eq_ignore_ascii_case(&c.column) && same_type(&col.ty, &c.ty)) && !markers.contains(&c.value)
}

/// The message of a CSV record error of the file `readers` (CSV externals, at least one) read:
/// the engine's first line and the problem, the externals with their definitions, the file, the
/// record and its text, and a hint ([`hint`]). The engine counts records (a header is the first,
/// a quoted field over several lines is in one), which is not the file's line number when a field
/// spans lines: the message says record.
fn restated(readers: &[&Model], csv: &CsvLineError) -> String {
    let mut out = csv.head.clone();
    if !csv.problem.is_empty() {
        out.push_str(&format!(": {}", csv.problem));
    }
    let names: Vec<String> = readers.iter().map(|m| format!("`{}` ({})", m.name, m.location)).collect();
    let externals = if readers.len() == 1 { "external" } else { "externals" };
    out.push_str(&format!("\n  in the file of {externals} {}: {}, CSV record {}", names.join(", "), csv.file, csv.record));
    if let Some(text) = &csv.text {
        let quoted: String = text.chars().take(QUOTED_LINE).collect();
        let more = if text.chars().count() > QUOTED_LINE { "…" } else { "" };
        out.push_str(&format!(": {quoted}{more}"));
    }
    if let Some(hint) = hint(readers, csv) {
        out.push_str(&format!("\n  hint: {hint}"));
    }
    out
}

/// What to change, in efmesh's terms, for a CSV record error of the file `readers` read: for a
/// value spelling NULL ([`NULL_SPELLINGS`]), the `null_markers` option of each external's kind
/// (each with the markers it declares); for another value, the column's declared type; for a
/// record with another number of fields, the quoting or the `delimiter`. `None` for any other
/// problem.
fn hint(readers: &[&Model], csv: &CsvLineError) -> Option<String> {
    let first = *readers.first()?;
    let named = |m: &Model| format!("`{}` ({})", m.name, m.location);
    let each = if readers.len() == 1 { named(first) } else { "each external".to_string() };
    if let Some(c) = &csv.conversion {
        let value = c.value.trim();
        if NULL_SPELLINGS.iter().any(|s| s.eq_ignore_ascii_case(value)) {
            // Each external's option with its own markers and this value added.
            let options: Vec<String> = readers.iter().map(|&m| format!("{}, `{}`", named(m), null_markers_option(m, &c.value))).collect();
            let whose = if readers.len() == 1 { "its" } else { "their" };
            return Some(format!(
                "`{}` spells NULL in this file: declare it in the kind of {}, so {whose} column `{}` reads it as NULL",
                c.value,
                options.join(", and of "),
                c.column
            ));
        }
        let declared = first.schema.get(&c.column).map_or_else(|| c.ty.to_lowercase(), |col| col.ty.clone());
        let of = if readers.len() == 1 { named(first) } else { readers.iter().map(|&m| named(m)).collect::<Vec<_>>().join(", ") };
        return Some(format!(
            "column `{}` of {of} is declared `{declared}`, which `{}` is not: declare the type the file's values have (e.g. `varchar`, converted by a model reading it), or correct CSV record {} of the file",
            c.column, c.value, csv.record
        ));
    }
    csv.problem.starts_with("Expected Number of Columns").then(|| {
        format!(
            "every record of the file must have the fields of its header: quote a field holding the delimiter, declare `delimiter` in the kind of {each} if the file uses another, or correct CSV record {} of the file",
            csv.record
        )
    })
}

/// The `null_markers` option of `m`'s kind with `value` added to those it declares, as its
/// language writes it: `null_markers = [NA]` in a `.sql` file's `-- kind:`, `null_markers:
/// ["NA"]` in Rhai, `null_markers = { "NA" }` in Lua.
fn null_markers_option(m: &Model, value: &str) -> String {
    let mut markers: Vec<&str> = match &m.kind {
        Kind::External(External::Files { null_markers, .. }) => null_markers.iter().map(String::as_str).collect(),
        _ => Vec::new(),
    };
    markers.push(value);
    let quoted = |v: &&str| format!("{v:?}");
    match m.location.file.extension().and_then(|e| e.to_str()) {
        Some("sql") => format!("null_markers = [{}]", markers.iter().map(|v| sql_value(v)).collect::<Vec<_>>().join(", ")),
        Some("rhai") => format!("null_markers: [{}]", markers.iter().map(quoted).collect::<Vec<_>>().join(", ")),
        _ => format!("null_markers = {{ {} }}", markers.iter().map(quoted).collect::<Vec<_>>().join(", ")),
    }
}

/// `value` as a `.sql` file's `-- kind:` line reads it as text: a bare word when it is one (`NA`,
/// `N/A`), else in single quotes (`''`, `'n a'`, a number, `true`).
fn sql_value(value: &str) -> String {
    let bare = !value.is_empty()
        && value.chars().all(|c| c.is_alphanumeric() || matches!(c, '/' | '#' | '.' | '-' | '_' | '?' | '\\'))
        && value.parse::<u64>().is_err()
        && !matches!(value, "true" | "false");
    if bare { value.to_string() } else { format!("'{value}'") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CsvConversion;

    fn model(file: &str, null_markers: &[&str]) -> Model {
        let kind = Kind::External(External::Files {
            path: "data/f.csv".into(),
            format: FileFormat::Csv,
            union_by_name: None,
            hive_partitioning: None,
            null_markers: null_markers.iter().map(|s| s.to_string()).collect(),
            csv: None,
        });
        let schema = crate::core::Schema(vec![crate::core::Column { name: "n".into(), ty: "integer".into() }]);
        Model::new(crate::core::ModelName::parse("raw.f").unwrap(), kind, schema, None, crate::core::Location { file: file.into(), line: 1 })
    }

    #[test]
    fn the_null_markers_hint_is_written_as_the_externals_language_writes_it() {
        assert_eq!(null_markers_option(&model("models/raw.sql", &[]), "NA"), "null_markers = [NA]");
        assert_eq!(null_markers_option(&model("models/raw.sql", &["NA"]), "n a"), "null_markers = [NA, 'n a']");
        assert_eq!(null_markers_option(&model("models/raw.lua", &[]), "N/A"), "null_markers = { \"N/A\" }");
        assert_eq!(null_markers_option(&model("models/raw.rhai", &["-"]), "NA"), "null_markers: [\"-\", \"NA\"]");
    }

    #[test]
    fn a_value_spelling_null_is_hinted_as_a_null_marker_and_another_as_the_declared_type() {
        let m = model("models/raw.sql", &[]);
        let csv = |value: &str| CsvLineError {
            head: "Conversion Error: CSV Error on Line: 3".into(),
            record: 3,
            text: Some(format!("2,{value}")),
            problem: format!("Error when converting column \"n\". Could not convert string \"{value}\" to 'INTEGER'"),
            conversion: Some(CsvConversion { column: "n".into(), value: value.into(), ty: "INTEGER".into() }),
            file: "/p/data/f.csv".into(),
        };
        let na = restated(&[&m], &csv("NA"));
        assert!(na.starts_with("Conversion Error: CSV Error on Line: 3: Error when converting column \"n\""), "{na}");
        assert!(na.contains("\n  in the file of external `raw.f` (models/raw.sql:1): /p/data/f.csv, CSV record 3: 2,NA"), "{na}");
        assert!(na.contains("\n  hint: `NA` spells NULL in this file: declare it in the kind of `raw.f` (models/raw.sql:1), `null_markers = [NA]`"), "{na}");
        let x = hint(&[&m], &csv("x y")).expect("a hint");
        assert!(x.starts_with("column `n` of `raw.f` (models/raw.sql:1) is declared `integer`, which `x y` is not"), "{x}");
        assert!(x.ends_with("or correct CSV record 3 of the file"), "{x}");
    }

    fn conversion(value: &str, ty: &str) -> CsvLineError {
        CsvLineError {
            head: "Conversion Error: CSV Error on Line: 3".into(),
            record: 3,
            text: Some(format!("2,{value}")),
            problem: format!("Error when converting column \"n\". Could not convert string \"{value}\" to '{ty}'"),
            conversion: Some(CsvConversion { column: "n".into(), value: value.into(), ty: ty.into() }),
            file: "/p/data/f.csv".into(),
        }
    }

    #[test]
    fn only_an_external_that_could_have_failed_so_is_blamed() {
        // Declared `integer`, no markers: its conversion of `NA` to `INTEGER` is the one that failed.
        assert!(could_fail(&model("models/raw.sql", &[]), &conversion("NA", "INTEGER")));
        // It already reads `NA` as NULL; it converts to another type than the one that failed.
        assert!(!could_fail(&model("models/raw.sql", &["NA"]), &conversion("NA", "INTEGER")));
        assert!(!could_fail(&model("models/raw.sql", &[]), &conversion("NA", "BIGINT")));
        assert!(!could_fail(&model("models/raw.sql", &[]), &conversion("x", "VARCHAR")));
        // A record with another number of fields: every reader of the file meets it.
        let fields = CsvLineError { problem: "Expected Number of Columns: 3 Found: 4".into(), conversion: None, ..conversion("x", "INTEGER") };
        assert!(could_fail(&model("models/raw.sql", &["NA"]), &fields));
    }

    #[test]
    fn each_external_blamed_gets_a_null_markers_option_from_its_own_markers() {
        let (sql, lua) = (model("models/raw.sql", &[]), model("models/raw.lua", &["-"]));
        let h = hint(&[&sql, &lua], &conversion("NA", "INTEGER")).expect("a hint");
        assert_eq!(
            h,
            "`NA` spells NULL in this file: declare it in the kind of `raw.f` (models/raw.sql:1), `null_markers = [NA]`, and of `raw.f` (models/raw.lua:1), `null_markers = { \"-\", \"NA\" }`, so their column `n` reads it as NULL"
        );
    }
}
