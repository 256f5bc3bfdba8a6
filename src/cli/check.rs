//! `efmesh check`: validate a project without any database, for CI and editors.
//!
//! Loads the project exactly as every command does (discovery, evaluation, DAG validation: refs,
//! `cols()`, names, cycles…), then resolves every column each model's SQL reads from its parents
//! through the SQL AST ([`crate::sql::lineage`]) against the parents' declared schemas (embedded
//! parents included). Neither the DuckDB file nor the state store is opened.
//!
//! Every error names the model, its file:line (the line of the query in its file when known:
//! [`Model::location_of_query_line`]; where `define_model` is otherwise), the column and the
//! parent, with the position in the query when known and a "did you mean" hint when a parent
//! column is close. Exit 1 on any error, load errors included (printed in the same shape; a Lua
//! or Rhai error's call stack only as `"traceback"` in `--json`).
//!
//! Then the lint rules ([`crate::sql::lint`]: `missing_grain`, `select_star_external`,
//! `ambiguous_column`, `time_filter_column`, `batch_rescan`; `unknown_type` and
//! `missing_source_file`, which need the engine's types and the file system, here), as `[lint]`
//! in `efmesh.toml` and each model's `ignored_lints` say: a finding is a warning
//! (`warning[rule]:` lines, `"warnings"` in `--json`), which never changes the exit code, unless
//! `[lint] error` names its rule (then it is an error, `error[rule]:`, in `"errors"`, exit 1).

use super::Exit;
use super::printer::Printer;
use crate::config::Config;
use crate::core::fragment::CanonicalResolver;
use crate::core::{External, Kind, LoadError, Location, Model, ModelName};
use crate::project::Project;
use crate::sql::canon::SqlError;
use crate::sql::lineage::{self, ColumnProblem};
use crate::sql::lint::{self, Lint};
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
    /// A Lua or Rhai error's call stack ([`LoadError::traceback`]): in `--json` only.
    traceback: Option<String>,
}

impl Finding {
    fn from_load_error(e: LoadError) -> Self {
        Finding {
            location: e.location,
            model: e.model,
            column: None,
            parent: None,
            message: e.message,
            hint: e.hint,
            sql_line: None,
            sql_column: None,
            traceback: e.traceback,
        }
    }

    /// The human line(s), in the shape of a load error: `file:line: model `x`: message` and an
    /// optional `hint:` line.
    fn text(&self) -> String {
        let at = match (self.sql_line, self.sql_column) {
            (Some(l), Some(c)) => format!(", at line {l}, column {c} of the query"),
            (Some(l), None) => format!(", at line {l} of the query"),
            _ => String::new(),
        };
        let e = LoadError {
            location: self.location.clone(),
            model: self.model.clone(),
            message: format!("{}{at}", self.message),
            hint: self.hint.clone(),
            field: None,
            traceback: None,
        };
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
        if let Some(t) = &self.traceback {
            o.insert("traceback".into(), t.clone().into());
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

/// How a lint finding prints: `warning[rule]: file:line: model `m`: message` (or `error[rule]`)
/// and a `hint:` line.
fn lint_text(l: &Lint, severity: &str) -> String {
    let at = match l.sql_position {
        Some((line, Some(col))) => format!(", at line {line}, column {col} of the query"),
        Some((line, None)) => format!(", at line {line} of the query"),
        None => String::new(),
    };
    let mut s = format!("{severity}[{}]: {}: model `{}`: {}{at}", l.rule, l.location, l.model, l.message);
    if let Some(h) = &l.hint {
        s.push_str(&format!("\n  hint: {h}"));
    }
    s
}

/// A lint finding in `--json`: `{"rule", "severity", "file", "line", "model", …facts,
/// "message", "hint"?, "sqlLine"?, "sqlColumn"?}`.
fn lint_json(l: &Lint, severity: &str) -> Value {
    let mut o = Map::new();
    o.insert("rule".into(), l.rule.into());
    o.insert("severity".into(), severity.into());
    o.insert("file".into(), l.location.file.display().to_string().into());
    o.insert("line".into(), l.location.line.into());
    o.insert("model".into(), l.model.to_string().into());
    for (k, v) in &l.facts {
        o.insert((*k).into(), v.clone().into());
    }
    o.insert("message".into(), l.message.clone().into());
    if let Some(h) = &l.hint {
        o.insert("hint".into(), h.clone().into());
    }
    if let Some((line, col)) = l.sql_position {
        o.insert("sqlLine".into(), line.into());
        if let Some(c) = col {
            o.insert("sqlColumn".into(), c.into());
        }
    }
    Value::Object(o)
}

/// What one check found.
#[derive(Debug, Default)]
struct Report {
    /// Models loaded (0 when the project did not load).
    models: usize,
    errors: Vec<Finding>,
    /// Findings of lint rules `[lint] error` names: they fail the check.
    lint_errors: Vec<Lint>,
    /// Findings of the other lint rules that run: they never change the exit code.
    warnings: Vec<Lint>,
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
    let ok = report.errors.is_empty() && report.lint_errors.is_empty();
    if json {
        let errors = report.errors.iter().map(Finding::json).chain(report.lint_errors.iter().map(|l| lint_json(l, "error")));
        out.json(json!({
            "ok": ok,
            "models": report.models,
            "errors": errors.collect::<Vec<_>>(),
            "warnings": report.warnings.iter().map(|l| lint_json(l, "warning")).collect::<Vec<_>>(),
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
        for l in &report.lint_errors {
            s.push_str(&lint_text(l, "error"));
            s.push('\n');
        }
        for w in &report.warnings {
            s.push_str(&lint_text(w, "warning"));
            s.push('\n');
        }
        let n = report.errors.len() + report.lint_errors.len();
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
            // The finding's location names the file (and the line TOML's message gives): the
            // message need not repeat it.
            let (line, message) = match &e {
                crate::config::ConfigError::Invalid { message, .. } => (e.line().unwrap_or(0), format!("invalid config: {message}")),
                crate::config::ConfigError::Read { .. } => (0, e.to_string()),
            };
            let error = Finding {
                location: Some(Location { file: config_path.to_path_buf(), line }),
                model: None,
                column: None,
                parent: None,
                message,
                hint: e.hint().map(str::to_string),
                sql_line: None,
                sql_column: None,
                traceback: None,
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
    let unknown = unknown_types(&project, &config);
    let mut missing_sources = missing_source_files(&project, &config);
    for model in project.dag.models() {
        let analysis = check_model(&project, model, &mut report, true);
        let lints = lint::lint_model(&project.dag, model, analysis.as_ref()).into_iter().chain(type_lints(&project, model, &unknown));
        for l in lints.chain(missing_sources.remove(&model.name)) {
            if !config.lint.runs(l.rule) || model.ignored_lints.iter().any(|r| r == l.rule) {
                continue;
            }
            if config.lint.is_error(l.rule) { report.lint_errors.push(l) } else { report.warnings.push(l) }
        }
    }
    report.errors.sort_by(|a, b| (&a.location, &a.model, a.sql_line, a.sql_column).cmp(&(&b.location, &b.model, b.sql_line, b.sql_column)));
    report
}

/// The column problems `efmesh check` finds in `model` (what it reads from its parents), as
/// load-error-shaped diagnostics, for `watch`; none when sqlparser cannot parse its SQL (the
/// watch's plan reports a query the engine cannot parse either).
pub(super) fn column_errors(project: &Project, model: &Model) -> Vec<LoadError> {
    let mut report = Report::default();
    check_model(project, model, &mut report, false);
    report
        .errors
        .into_iter()
        .map(|f| {
            let at = match (f.sql_line, f.sql_column) {
                (Some(l), Some(c)) => format!(", at line {l}, column {c} of the query"),
                (Some(l), None) => format!(", at line {l} of the query"),
                _ => String::new(),
            };
            LoadError { location: f.location, model: f.model, message: format!("{}{at}", f.message), hint: f.hint, field: None, traceback: f.traceback }
        })
        .collect()
}

/// Resolves the columns `model` reads from its parents. When sqlparser cannot parse its SQL and
/// `engine_parse`, the engine's own parser decides whether that is an error; on the Postgres
/// engine it is asked even when sqlparser reads the SQL (libpg_query, what `plan` fingerprints
/// with, refuses what sqlparser's Postgres dialect accepts beyond Postgres). Returns the query's
/// analysis, for the lint rules (`None` without a query sqlparser reads).
fn check_model(project: &Project, model: &Model, report: &mut Report, engine_parse: bool) -> Option<lineage::Analysis> {
    check_audits(project, model, report);
    let body = model.body.as_ref()?;
    let sql = body.render(&CanonicalResolver);
    let parents: BTreeMap<String, Vec<String>> = model
        .parents()
        .into_iter()
        .filter_map(|p| project.dag.get(&p).map(|m| (p.to_string(), m.relation_columns().into_iter().map(|c| c.name).collect())))
        .collect();
    let query_grammar = grammar(project);
    let analyzed = lineage::analyze_in(query_grammar, &sql, &parents);
    // sqlparser's Postgres dialect reads more than Postgres does (`GROUP BY ALL`, DuckDB's list
    // literals `[a]`): the grammar `plan` fingerprints the query with decides, as when sqlparser
    // fails, so `check` fails where `plan` would stop.
    if analyzed.is_ok()
        && engine_parse
        && query_grammar == lineage::Grammar::Postgres
        && let Err(engine) = crate::engine::dialect_for(&project.config).canonicalize(&sql)
    {
        report.errors.push(Finding::from_load_error(LoadError::new(
            Some(model.location_of_query_line(engine.line())),
            Some(model.name.clone()),
            engine.to_string(),
        )));
        return None;
    }
    match analyzed {
        Ok(analysis) => {
            for p in &analysis.unknown {
                report.errors.push(finding(model, &parents, p.clone(), None));
            }
            check_outputs(model, &analysis.lineage, report);
            Some(analysis)
        }
        // sqlparser cannot parse it: the engine's own parser decides, as `plan` does when it
        // fingerprints the model. A query the engine rejects too is an error (`plan` would stop
        // on it); one only the engine understands is left unchecked, with a warning.
        Err(e) => match engine_error(project, query_grammar, &sql, &e, engine_parse) {
            Some(engine) => {
                report.errors.push(Finding::from_load_error(LoadError::new(
                    Some(model.location_of_query_line(engine.line())),
                    Some(model.name.clone()),
                    engine.to_string(),
                )));
                None
            }
            None => {
                report.unchecked.push(Unchecked { model: model.name.clone(), location: model.location.clone(), reason: e.to_string() });
                None
            }
        },
    }
}

/// The engine parser's error for `sql`, which sqlparser could not read (failing with `e`);
/// `None` when the engine reads it or `engine_parse` is off. On the Postgres grammar `e` is
/// already libpg_query's error when it refused the query too (`lineage::analyze_in` asks it
/// when sqlparser fails): it is kept, not parsed (nor its line searched for) a second time.
fn engine_error(project: &Project, query_grammar: lineage::Grammar, sql: &str, e: &SqlError, engine_parse: bool) -> Option<SqlError> {
    if !engine_parse {
        None
    } else if query_grammar == lineage::Grammar::Postgres && matches!(e, SqlError::Postgres { .. }) {
        Some(e.clone())
    } else {
        crate::engine::dialect_for(&project.config).canonicalize(sql).err()
    }
}

/// The declared column types of the project its engine does not know, with the engine's
/// message ([`crate::engine::unknown_types`]); none when `unknown_type` does not run.
fn unknown_types(project: &Project, config: &Config) -> BTreeMap<String, String> {
    if !config.lint.runs("unknown_type") {
        return BTreeMap::new();
    }
    let mut types: Vec<&str> = project.dag.models().flat_map(|m| m.schema.0.iter().map(|c| c.ty.as_str())).collect();
    types.sort_unstable();
    types.dedup();
    crate::engine::unknown_types(config, &types).into_iter().collect()
}

/// The hint of an `unknown_type` finding, unless the type reads as columns run together.
const UNKNOWN_TYPE_HINT: &str = "correct the type, or, when the database itself defines it (`CREATE TYPE`), which `check` cannot see, add `unknown_type` \
     to the model's `ignored_lints`; otherwise `apply` stops at this model's schema contract, before building anything";

/// The hint of a query's output that differs from the declared schema, unless a comma is missing.
const CONTRACT_HINT: &str = "the schema is the query's contract: `apply` refuses to build a model whose query returns other columns, or in another order";

/// The `unknown_type` findings of `model`: one per column whose declared type is in `unknown`.
fn type_lints(project: &Project, model: &Model, unknown: &BTreeMap<String, String>) -> Vec<Lint> {
    let engine = crate::engine::dialect_for(&project.config).title();
    model
        .schema
        .0
        .iter()
        .filter_map(|c| {
            let message = unknown.get(&c.ty)?;
            // `-- schema: id integer name varchar`: a comma missing, not a type to correct.
            let hint = crate::core::schema::missing_comma_hint(&c.name, &c.ty).unwrap_or_else(|| UNKNOWN_TYPE_HINT.to_string());
            Some(
                Lint::new("unknown_type", model, crate::engine::not_a_type(&c.name, &c.ty, engine, message))
                    .hint(hint)
                    .fact("column", c.name.clone())
                    .fact("type", c.ty.clone()),
            )
        })
        .collect()
}

/// The `missing_source_file` findings, by model: each file external whose local path or glob
/// matches no file. The path is resolved as `apply` reads it
/// ([`crate::apply::resolve::resolve_source_path`]) and globbed as the engine does
/// ([`crate::engine::unmatched_files`]: a private in-memory DuckDB, never the project's
/// database), and the message is `apply`'s ([`crate::apply::resolve::no_file_message`]). A URL
/// (`s3://`, `https://`, `hf://`, …) is the engine's to reach: never looked for; tables are no
/// files. None when the rule does not run, and on an engine that reads no files (Postgres).
fn missing_source_files(project: &Project, config: &Config) -> BTreeMap<ModelName, Lint> {
    if !config.lint.runs("missing_source_file") {
        return BTreeMap::new();
    }
    let root = &project.config.root;
    let local: Vec<(&Model, &str, String)> = project
        .dag
        .models()
        .filter(|m| !m.ignored_lints.iter().any(|r| r == "missing_source_file"))
        .filter_map(|m| match &m.kind {
            Kind::External(External::Files { path, .. }) if !crate::apply::resolve::is_url(path) => {
                Some((m, path.as_str(), crate::apply::resolve::resolve_source_path(root, path)))
            }
            _ => None,
        })
        .collect();
    let unmatched = crate::engine::unmatched_files(config, &local.iter().map(|(_, _, r)| r.as_str()).collect::<Vec<_>>());
    local
        .into_iter()
        .filter(|(_, _, resolved)| unmatched.contains(resolved))
        .map(|(m, path, resolved)| {
            let lint = Lint::new("missing_source_file", m, crate::apply::resolve::no_file_message(root, path))
                .hint(
                    "create the file, or correct the external's `path`: `apply` stops at this source before building a model that reads it; \
                     when the file comes only where `apply` runs, add `missing_source_file` to the model's `ignored_lints` (or `[lint] ignore`)"
                        .to_string(),
                )
                .fact("path", path)
                .fact("resolvedPath", resolved);
            (m.name.clone(), lint)
        })
        .collect()
}

/// Compares the query's output columns with the declared schema, as `apply`'s contract will:
/// a column returned but not declared, one declared but not returned, one returned more than
/// once (`SELECT *` over a join whose sides share a name, `SELECT a.x, b.x`), the same columns
/// in another order. Only when every output column is known by name (no `*` over an unknown
/// relation, no `COLUMNS(…)`, no unnamed expression): never a guess. Names compare ignoring
/// case (the contract compares them exactly, so this finds no model it would not refuse).
fn check_outputs(model: &Model, l: &lineage::QueryLineage, report: &mut Report) {
    let Some(returned) = l.complete.then(|| l.columns.iter().map(|c| c.column.clone()).collect::<Option<Vec<String>>>()).flatten() else { return };
    let declared: Vec<&str> = model.schema.0.iter().map(|c| c.name.as_str()).collect();
    let has = |list: &[&str], name: &str| list.iter().any(|d| d.eq_ignore_ascii_case(name));
    let returned: Vec<&str> = returned.iter().map(String::as_str).collect();
    // A returned column the schema lacks because a comma is missing before it in the declaration
    // (`-- schema: id integer name varchar` declares `id` only): the hint says so.
    let comma_missing = |r: &str| {
        model.schema.0.iter().find_map(|c| {
            let pairs = crate::core::schema::run_together(&c.name, &c.ty)?;
            let meant = pairs.iter().skip(1).any(|(n, _)| n.trim_matches('"').eq_ignore_ascii_case(r));
            if meant { crate::core::schema::missing_comma_hint(&c.name, &c.ty) } else { None }
        })
    };
    // (column, message, a hint other than the contract's)
    let mut problems: Vec<(String, String, Option<String>)> = Vec::new();
    for d in &declared {
        if !has(&returned, d) {
            problems.push(((*d).to_string(), format!("declared column `{d}` is not returned by the query"), None));
        }
    }
    for (i, r) in returned.iter().enumerate() {
        let before = returned[..i].iter().filter(|b| b.eq_ignore_ascii_case(r)).count();
        if !has(&declared, r) {
            if before == 0 {
                problems.push(((*r).to_string(), format!("the query returns column `{r}`, which the schema does not declare"), comma_missing(r)));
            }
        } else if before == 1 {
            // The contract's words: the table cannot have the column twice.
            problems.push(((*r).to_string(), format!("the query returns column `{r}` more than once (name each output column once)"), None));
        }
    }
    // The order only where the lineage knows it (a `*` over a `USING` join: Postgres puts the
    // keys first).
    if problems.is_empty() && l.ordered && declared.len() == returned.len() && declared.iter().zip(&returned).any(|(d, r)| !d.eq_ignore_ascii_case(r)) {
        let first = declared.iter().zip(&returned).find(|(d, r)| !d.eq_ignore_ascii_case(r)).map_or("", |(d, _)| *d);
        problems.push((
            first.to_string(),
            format!("columns are returned in another order: declared ({}), returned ({})", declared.join(", "), returned.join(", ")),
            None,
        ));
    }
    for (column, message, hint) in problems {
        let hint = hint.unwrap_or_else(|| CONTRACT_HINT.to_string());
        report.errors.push(Finding {
            location: Some(model.location.clone()),
            model: Some(model.name.clone()),
            column: Some(column),
            parent: None,
            message,
            hint: Some(hint),
            sql_line: None,
            sql_column: None,
            traceback: None,
        });
    }
}

/// Resolves the columns each audit of `model` reads: those of the relation under audit (the
/// model's declared schema) and of the models its body `ref()`s. An audit whose SQL sqlparser
/// cannot parse is left to the engine (it runs at apply, before anything is promoted).
fn check_audits(project: &Project, model: &Model, report: &mut Report) {
    let own = model.name.to_string();
    let columns = |m: &Model| m.relation_columns().into_iter().map(|c| c.name).collect::<Vec<_>>();
    for audit in &model.audits {
        let mut relations = BTreeMap::from([(own.clone(), columns(model))]);
        relations.extend(audit.sql.refs().filter_map(|r| project.dag.get(&r.target).map(|m| (r.target.to_string(), columns(m)))));
        let sql = audit.sql.render(&own, &ToString::to_string);
        // The audited relation is the model itself, the others are models it refs (not
        // parents), and the aliases are the audit body's, which no file the user wrote shows.
        let Ok(analysis) = lineage::analyze_named(grammar(project), &sql, &relations, lineage::Naming::audit(&own)) else { continue };
        let mut seen = std::collections::BTreeSet::new();
        // A relation qualified by its own name is no problem here: the audited relation and the
        // models an audit refs are named by their physical names when it runs.
        for p in analysis.unknown.into_iter().filter(|p| !p.by_name) {
            let mut f = finding(model, &relations, p, Some(&own));
            f.message = format!("audit `{}`: {}", audit.label(), f.message);
            f.location = Some(audit.location.clone());
            // A position in the audit's rendered SQL, which no file shows: one finding per
            // column and message.
            (f.sql_line, f.sql_column) = (None, None);
            if seen.insert((f.column.clone(), f.message.clone())) {
                report.errors.push(f);
            }
        }
    }
}

/// The project's SQL grammar: its engine's.
fn grammar(project: &Project) -> lineage::Grammar {
    if crate::engine::dialect_for(&project.config).sqlparser_first() { lineage::Grammar::Embedded } else { lineage::Grammar::Postgres }
}

/// The finding of one column problem of `model`'s query, or of its audit's when `subject` names
/// the audited relation (which the finding calls "the model", with no `parent`).
fn finding(model: &Model, parents: &BTreeMap<String, Vec<String>>, p: ColumnProblem, subject: Option<&str>) -> Finding {
    let is_subject = |relation: &str| subject == Some(relation);
    let hint = match (&p.suggestion, &p.relation) {
        (Some(s), _) => Some(format!("did you mean `{s}`?")),
        (None, Some(parent)) => parents.get(parent).filter(|cols| cols.len() <= LIST_COLUMNS_UP_TO).map(|cols| {
            let list = cols.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
            if is_subject(parent) { format!("the model declares {list}") } else { format!("`{parent}` declares {list}") }
        }),
        (None, None) => None,
    };
    Finding {
        // A `.sql` model's query line is a line of its file.
        location: Some(model.location_of_query_line(p.line)),
        model: Some(model.name.clone()),
        column: Some(p.column),
        parent: p.relation.filter(|r| !is_subject(r)),
        // A name from a macro's output may be megabytes long: quoted within bounds.
        message: crate::core::error::bounded_words(p.detail),
        hint,
        sql_line: p.line,
        sql_column: p.col,
        traceback: None,
    }
}
