//! `efmesh check`: validate a project without any database, for CI and editors.
//!
//! Loads the project exactly as every command does (discovery, evaluation, DAG validation: refs,
//! `cols()`, names, cycles…), then resolves every column each model's SQL reads from its parents
//! through the SQL AST ([`crate::sql::lineage`]) against the parents' declared schemas (embedded
//! parents included). Neither the DuckDB file nor the state store is opened.
//!
//! Every error names the model, its file:line (where `define_model` is), the column and the
//! parent, with the position in the query when known and a "did you mean" hint when a parent
//! column is close. Exit 1 on any error, load errors included (printed in the same shape).
//!
//! Warnings (`warning:` lines, `"warnings"` in `--json`) never change the exit code: a
//! time-range model whose `@start`/`@end` filter cannot reach the scan of what it reads
//! ([`crate::sql::pushdown`]), so that every batch re-reads or re-computes all of it.

use super::Exit;
use super::printer::Printer;
use crate::config::Config;
use crate::core::fragment::CanonicalResolver;
use crate::core::{LoadError, Location, Model, ModelName};
use crate::project::Project;
use crate::sql::lineage::{self, ColumnProblem};
use crate::sql::pushdown::BatchRescan;
use anyhow::Result;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// Parents with more declared columns than this are not listed in a hint.
const LIST_COLUMNS_UP_TO: usize = 12;

/// One error found by `check`.
#[derive(Debug)]
struct Finding {
    location: Option<Location>,
    model: Option<ModelName>,
    column: Option<String>,
    parent: Option<String>,
    message: String,
    hint: Option<String>,
    sql_line: Option<u64>,
    sql_column: Option<u64>,
}

impl Finding {
    fn from_load_error(e: LoadError) -> Self {
        Finding { location: e.location, model: e.model, column: None, parent: None, message: e.message, hint: e.hint, sql_line: None, sql_column: None }
    }

    /// The human line(s), in the shape of a load error: `file:line: model `x`: message` and an
    /// optional `hint:` line.
    fn text(&self) -> String {
        let at = match (self.sql_line, self.sql_column) {
            (Some(l), Some(c)) => format!(", at line {l}, column {c} of the query"),
            (Some(l), None) => format!(", at line {l} of the query"),
            _ => String::new(),
        };
        let e = LoadError { location: self.location.clone(), model: self.model.clone(), message: format!("{}{at}", self.message), hint: self.hint.clone() };
        e.to_string()
    }

    fn json(&self) -> Value {
        let mut o = Map::new();
        o.insert("file".into(), self.location.as_ref().map_or(Value::Null, |l| l.file.display().to_string().into()));
        o.insert("line".into(), self.location.as_ref().filter(|l| l.line > 0).map_or(Value::Null, |l| l.line.into()));
        o.insert("model".into(), self.model.as_ref().map_or(Value::Null, |m| m.to_string().into()));
        if let Some(c) = &self.column {
            o.insert("column".into(), c.clone().into());
        }
        if let Some(p) = &self.parent {
            o.insert("parent".into(), p.clone().into());
        }
        o.insert("message".into(), self.message.clone().into());
        if let Some(h) = &self.hint {
            o.insert("hint".into(), h.clone().into());
        }
        if let Some(l) = self.sql_line {
            o.insert("sqlLine".into(), l.into());
        }
        if let Some(c) = self.sql_column {
            o.insert("sqlColumn".into(), c.into());
        }
        Value::Object(o)
    }
}

/// A model whose columns could not be checked (sqlparser cannot parse its SQL; DuckDB may).
#[derive(Debug)]
struct Unchecked {
    model: ModelName,
    location: Location,
    reason: String,
}

/// A time-range model whose every batch re-reads or re-computes a whole relation
/// ([`crate::sql::pushdown`]): a warning, which never changes the exit code.
#[derive(Debug)]
struct Warning {
    model: ModelName,
    location: Location,
    rescan: BatchRescan,
    message: String,
    hint: String,
}

impl Warning {
    fn new(project: &Project, model: &Model, rescan: BatchRescan) -> Self {
        let culprit = project.dag.get(&rescan.culprit);
        let what = culprit.map_or("model", |m| m.kind.tag());
        let at = culprit.map(|m| format!(" ({})", m.location)).unwrap_or_default();
        let stops = if rescan.culprit == rescan.parent { "its scan".to_string() } else { format!("the scan of `{}`", rescan.culprit) };
        let message = format!(
            "every batch reads all of `{}`: the `@start`/`@end` filter on its column `{}` cannot reach {stops}: {what} `{}`{at}: {}",
            rescan.parent, rescan.column, rescan.culprit, rescan.reason
        );
        let hint = match culprit.map(|m| &m.kind) {
            Some(crate::core::Kind::External(_)) => format!(
                "load the file once into a table (a `full` or `incremental_by_unique_key` model reading `{}`) and read that in `{}`, or store it as parquet",
                rescan.culprit, model.name
            ),
            _ => format!(
                "materialise `{}` once as a table (kind `full`, `incremental_by_unique_key` or `incremental_by_time_range`), so each batch of `{}` reads only its rows",
                rescan.culprit, model.name
            ),
        };
        Warning { model: model.name.clone(), location: model.location.clone(), rescan, message, hint }
    }

    fn text(&self) -> String {
        format!("warning: {}: model `{}`: {}\n  hint: {}", self.location, self.model, self.message, self.hint)
    }

    fn json(&self) -> Value {
        json!({
            "file": self.location.file.display().to_string(),
            "line": self.location.line,
            "model": self.model.to_string(),
            "parent": self.rescan.parent.to_string(),
            "column": self.rescan.column,
            "culprit": self.rescan.culprit.to_string(),
            "message": self.message,
            "hint": self.hint,
        })
    }
}

/// What one check found.
#[derive(Debug, Default)]
struct Report {
    /// Models loaded (0 when the project did not load).
    models: usize,
    errors: Vec<Finding>,
    warnings: Vec<Warning>,
    unchecked: Vec<Unchecked>,
    /// The project did not load: `errors` are load errors.
    not_loaded: bool,
}

/// Runs `efmesh check`.
///
/// # Errors
/// Only when stdout cannot be written; every problem with the project is a reported error
/// (exit 1), never an `Err`.
pub(super) fn run(config_path: &Path, json: bool, out: &Printer) -> Result<Exit> {
    let report = check(config_path);
    for u in &report.unchecked {
        tracing::warn!("{}: model `{}`: columns not checked: {}", u.location, u.model, u.reason);
    }
    let ok = report.errors.is_empty();
    if json {
        out.json(json!({
            "ok": ok,
            "models": report.models,
            "errors": report.errors.iter().map(Finding::json).collect::<Vec<_>>(),
            "warnings": report.warnings.iter().map(Warning::json).collect::<Vec<_>>(),
            "unchecked": report.unchecked.iter().map(|u| json!({
                "file": u.location.file.display().to_string(),
                "line": u.location.line,
                "model": u.model.to_string(),
                "reason": u.reason,
            })).collect::<Vec<_>>(),
        }))?;
    } else {
        let mut s = String::new();
        for e in &report.errors {
            s.push_str(&e.text());
            s.push('\n');
        }
        for w in &report.warnings {
            s.push_str(&w.text());
            s.push('\n');
        }
        let n = report.errors.len();
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        if ok && !report.warnings.is_empty() {
            s.push_str(&format!("ok: {} checked, {}\n", plural(report.models, "model"), plural(report.warnings.len(), "warning")));
        } else if ok {
            s.push_str(&format!("ok: {} checked\n", plural(report.models, "model")));
        } else if report.not_loaded {
            s.push_str(&format!("check failed: {} (the project did not load)\n", plural(n, "error")));
        } else {
            s.push_str(&format!("check failed: {} ({} checked)\n", plural(n, "error"), plural(report.models, "model")));
        }
        out.text(&s)?;
    }
    Ok(if ok { Exit::Success } else { Exit::Error })
}

/// Loads the project and resolves every model's columns.
fn check(config_path: &Path) -> Report {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            let error = Finding {
                location: Some(Location { file: config_path.to_path_buf(), line: 0 }),
                model: None,
                column: None,
                parent: None,
                message: e.to_string(),
                hint: e.hint().map(str::to_string),
                sql_line: None,
                sql_column: None,
            };
            return Report { errors: vec![error], not_loaded: true, ..Report::default() };
        }
    };
    let project = match Project::load(&config) {
        Ok(p) => p,
        Err(errors) => {
            let errors = errors.0.into_iter().map(Finding::from_load_error).collect();
            return Report { errors, not_loaded: true, ..Report::default() };
        }
    };
    let mut report = Report { models: project.dag.len(), ..Report::default() };
    for model in project.dag.models() {
        check_model(&project, model, &mut report);
        for rescan in crate::sql::pushdown::batch_rescans(&project.dag, model) {
            report.warnings.push(Warning::new(&project, model, rescan));
        }
    }
    report.errors.sort_by(|a, b| (&a.location, &a.model, a.sql_line, a.sql_column).cmp(&(&b.location, &b.model, b.sql_line, b.sql_column)));
    report
}

/// The column problems `efmesh check` finds in `model` (what it reads from its parents), as
/// load-error-shaped diagnostics, for `watch`; none when sqlparser cannot parse its SQL.
pub(super) fn column_errors(project: &Project, model: &Model) -> Vec<LoadError> {
    let mut report = Report::default();
    check_model(project, model, &mut report);
    report
        .errors
        .into_iter()
        .map(|f| {
            let at = match (f.sql_line, f.sql_column) {
                (Some(l), Some(c)) => format!(", at line {l}, column {c} of the query"),
                (Some(l), None) => format!(", at line {l} of the query"),
                _ => String::new(),
            };
            LoadError { location: f.location, model: f.model, message: format!("{}{at}", f.message), hint: f.hint }
        })
        .collect()
}

/// Resolves the columns `model` reads from its parents.
fn check_model(project: &Project, model: &Model, report: &mut Report) {
    let Some(body) = &model.body else { return };
    let sql = body.render(&CanonicalResolver);
    let parents: BTreeMap<String, Vec<String>> = model
        .parents()
        .into_iter()
        .filter_map(|p| project.dag.get(&p).map(|m| (p.to_string(), m.relation_columns().into_iter().map(|c| c.name).collect())))
        .collect();
    let grammar = if crate::engine::dialect_for(&project.config).sqlparser_first() { lineage::Grammar::Embedded } else { lineage::Grammar::Postgres };
    match lineage::unknown_columns_in(grammar, &sql, &parents) {
        Ok(problems) => {
            for p in problems {
                report.errors.push(finding(model, &parents, p));
            }
        }
        Err(e) => report.unchecked.push(Unchecked { model: model.name.clone(), location: model.location.clone(), reason: e.to_string() }),
    }
}

fn finding(model: &Model, parents: &BTreeMap<String, Vec<String>>, p: ColumnProblem) -> Finding {
    let hint = match (&p.suggestion, &p.relation) {
        (Some(s), _) => Some(format!("did you mean `{s}`?")),
        (None, Some(parent)) => parents.get(parent).filter(|cols| cols.len() <= LIST_COLUMNS_UP_TO).map(|cols| {
            let list = cols.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
            format!("`{parent}` declares {list}")
        }),
        (None, None) => None,
    };
    Finding {
        location: Some(model.location.clone()),
        model: Some(model.name.clone()),
        column: Some(p.column),
        parent: p.relation,
        message: p.detail,
        hint,
        sql_line: p.line,
        sql_column: p.col,
    }
}
