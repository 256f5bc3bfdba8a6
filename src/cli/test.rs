//! `efmesh test [NAME_OR_MODEL…] [--json]`: run the model unit tests on an in-memory DuckDB.
//!
//! Loads models and test files, selects tests by test or model name, runs them
//! ([`crate::unittest`]) and prints one line per test, with the row diff of each failure
//! (`-` missing rows, `+` unexpected rows, aligned columns) and the problems of each error. Exit
//! 0 when every selected test passed (or there is none), 1 otherwise. Neither the project's
//! DuckDB file nor its state store is opened.

use super::printer::Printer;
use super::{Exit, Reported};
use crate::config::Config;
use crate::unittest::diff::{self, TextRow};
use crate::unittest::{self, Status, TestResult};
use anyhow::Result;
use serde_json::{Value, json};
use std::path::Path;

pub(super) fn run(config_path: &Path, selectors: &[String], as_json: bool, out: &Printer) -> Result<Exit> {
    let config = Config::load(config_path)?;
    let suite = unittest::load(&config).map_err(|e| Reported(e.to_string()))?;
    let selected = unittest::select(&suite.tests, selectors)?;
    let results = if selected.is_empty() {
        Vec::new()
    } else {
        let mut engine = crate::engine::open(&config, crate::engine::Access::Scratch)?;
        unittest::run(&suite.project, &selected, &mut *engine)
    };
    let ok = results.iter().all(|r| r.status == Status::Passed);
    if as_json {
        out.json(report_json(&results, ok))?;
    } else if results.is_empty() {
        out.text(&format!("no tests found (`project.tests`: {})\n", config.project.tests.join(", ")))?;
    } else {
        out.text(&report_text(&results, ok))?;
    }
    Ok(if ok { Exit::Success } else { Exit::Error })
}

fn plural(n: usize, one: &str) -> String {
    format!("{n} {one}{}", if n == 1 { "" } else { "s" })
}

/// The human report: one line per test, details under failures and errors, a summary line.
fn report_text(results: &[TestResult], ok: bool) -> String {
    let mut s = format!("running {}\n", plural(results.len(), "test"));
    let width = results.iter().map(|r| r.name.chars().count()).max().unwrap_or(0);
    for r in results {
        let mark = match r.status {
            Status::Passed => '✓',
            Status::Failed => '✗',
            Status::Error => '!',
        };
        let at = if r.status == Status::Passed { String::new() } else { format!("  {}", r.location) };
        s.push_str(&format!("  {mark} {:width$}  {}{at}\n", r.name, r.model));
        if r.status == Status::Passed {
            continue;
        }
        for p in &r.problems {
            let label = if r.status == Status::Error { "error: " } else { "" };
            s.push_str(&format!("      {label}{p}\n"));
        }
        if !r.diff.is_empty() {
            let got = r.actual_rows.unwrap_or(0);
            let mut parts = Vec::new();
            if !r.diff.missing.is_empty() {
                parts.push(format!("{} missing (-)", r.diff.missing.len()));
            }
            if !r.diff.unexpected.is_empty() {
                parts.push(format!("{} unexpected (+)", r.diff.unexpected.len()));
            }
            if let Some(o) = &r.diff.order {
                parts.push(format!("same rows in another order, first at row {}", o.row));
            }
            s.push_str(&format!("      expected {}, got {got}: {}\n", plural(r.expected_rows, "row"), parts.join(", ")));
            s.push_str(&diff::render(&r.columns, &r.diff, "      "));
            s.push('\n');
        }
    }
    let count = |st: Status| results.iter().filter(|r| r.status == st).count();
    s.push_str(&format!(
        "test result: {}. {} passed, {} failed, {}\n",
        if ok { "ok" } else { "FAILED" },
        count(Status::Passed),
        count(Status::Failed),
        plural(count(Status::Error), "error")
    ));
    s
}

fn rows_json(rows: &[TextRow]) -> Value {
    Value::Array(rows.iter().map(|r| Value::Array(r.iter().map(|v| v.clone().map_or(Value::Null, Value::String)).collect())).collect())
}

fn report_json(results: &[TestResult], ok: bool) -> Value {
    let count = |st: Status| results.iter().filter(|r| r.status == st).count();
    json!({
        "ok": ok,
        "passed": count(Status::Passed),
        "failed": count(Status::Failed),
        "errors": count(Status::Error),
        "tests": results.iter().map(|r| json!({
            "name": r.name,
            "model": r.model.to_string(),
            "file": r.location.file.display().to_string(),
            "line": r.location.line,
            "status": r.status.as_str(),
            "columns": r.columns,
            "expectedRows": r.expected_rows,
            "actualRows": r.actual_rows,
            "missing": rows_json(&r.diff.missing),
            "unexpected": rows_json(&r.diff.unexpected),
            "order": r.diff.order.as_ref().map(|o| json!({
                "row": o.row,
                "expected": rows_json(std::slice::from_ref(&o.expected))[0],
                "actual": rows_json(std::slice::from_ref(&o.actual))[0],
            })),
            "problems": r.problems,
        })).collect::<Vec<_>>(),
    })
}
