//! A build that failed on a line of a CSV file an external model reads, restated in efmesh's
//! terms. The engine reports it against the statement that read the file, so the build error
//! names the consumer; DuckDB's message then suggests its own reader options (`nullstr`) and
//! dumps its reader settings. The message becomes the engine's first lines (the line and what is
//! wrong with it), the external model(s) reading the file with their definitions, the file and the
//! line, and a hint naming the kind option (`null_markers`) or the declared column to change.
//! The engine's whole message goes to the debug log.

use super::ApplyError;
use super::resolve::resolve_source_path;
use crate::core::{External, FileFormat, Kind, Model};
use crate::engine::{CsvLineError, Engine, EngineError};
use crate::project::Project;

/// Values a CSV file may hold for "no value": a conversion refusing one of them (in any case) is
/// hinted to be a `null_markers` entry rather than a wrong type.
const NULL_SPELLINGS: [&str; 13] = ["NA", "N/A", "#N/A", "NULL", "None", "nil", "NaN", "-", "--", ".", "?", "\\N", "missing"];

/// Longest text of the failing line quoted (in characters); longer lines end with `…`.
const QUOTED_LINE: usize = 200;

/// `error` with each build failure on a line of a CSV file that an external ancestor of the
/// model reads restated ([`restated`]), also among several failures; every other error as it is.
pub(crate) fn explain(project: &Project, engine: &dyn Engine, error: ApplyError) -> ApplyError {
    match error {
        ApplyError::Build { model, location, interval, error } => {
            let error = match engine.csv_line_error(&error) {
                Some(csv) => {
                    let readers: Vec<&Model> = project.dag.ancestors(&model).into_iter().filter(|m| reads_file(project, m, &csv.file)).collect();
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

/// The message of a CSV line error of the file `readers` (CSV externals, at least one) read: the
/// engine's first line and the problem, the externals with their definitions, the file, the line
/// and its text, and a hint ([`hint`]).
fn restated(readers: &[&Model], csv: &CsvLineError) -> String {
    let mut out = csv.head.clone();
    if !csv.problem.is_empty() {
        out.push_str(&format!(": {}", csv.problem));
    }
    let names: Vec<String> = readers.iter().map(|m| format!("`{}` ({})", m.name, m.location)).collect();
    let externals = if readers.len() == 1 { "external" } else { "externals" };
    out.push_str(&format!("\n  in the file of {externals} {}: {}, line {}", names.join(", "), csv.file, csv.line));
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

/// What to change, in efmesh's terms, for a CSV line error of the file `readers` read: for a value
/// spelling NULL ([`NULL_SPELLINGS`]), the `null_markers` option of the external's kind; for
/// another value, the column's declared type; for a line with another number of fields, the
/// quoting or the `delimiter`. `None` for any other problem.
fn hint(readers: &[&Model], csv: &CsvLineError) -> Option<String> {
    let first = readers.first()?;
    let each = if readers.len() == 1 { format!("`{}` ({})", first.name, first.location) } else { "each external".to_string() };
    if let Some(c) = &csv.conversion {
        let value = c.value.trim();
        if NULL_SPELLINGS.iter().any(|s| s.eq_ignore_ascii_case(value)) {
            return Some(format!(
                "`{}` spells NULL in this file: declare it in the kind of {each}, `{}`, so its column `{}` reads it as NULL",
                c.value,
                null_markers_option(first, &c.value),
                c.column
            ));
        }
        let declared = first.schema.get(&c.column).map_or_else(|| c.ty.to_lowercase(), |col| col.ty.clone());
        return Some(format!(
            "column `{}` of {each} is declared `{declared}`, which `{}` is not: declare the type the file's values have (e.g. `varchar`, converted by a model reading it), or correct line {} of the file",
            c.column, c.value, csv.line
        ));
    }
    csv.problem.starts_with("Expected Number of Columns").then(|| {
        format!(
            "every line of the file must have the fields of its header: quote a field holding the delimiter, declare `delimiter` in the kind of {each} if the file uses another, or correct line {} of the file",
            csv.line
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
            line: 3,
            text: Some(format!("2,{value}")),
            problem: format!("Error when converting column \"n\". Could not convert string \"{value}\" to 'INTEGER'"),
            conversion: Some(CsvConversion { column: "n".into(), value: value.into(), ty: "INTEGER".into() }),
            file: "/p/data/f.csv".into(),
        };
        let na = restated(&[&m], &csv("NA"));
        assert!(na.starts_with("Conversion Error: CSV Error on Line: 3: Error when converting column \"n\""), "{na}");
        assert!(na.contains("\n  in the file of external `raw.f` (models/raw.sql:1): /p/data/f.csv, line 3: 2,NA"), "{na}");
        assert!(na.contains("\n  hint: `NA` spells NULL in this file: declare it in the kind of `raw.f` (models/raw.sql:1), `null_markers = [NA]`"), "{na}");
        let x = hint(&[&m], &csv("x y")).expect("a hint");
        assert!(x.starts_with("column `n` of `raw.f` (models/raw.sql:1) is declared `integer`, which `x y` is not"), "{x}");
    }
}
