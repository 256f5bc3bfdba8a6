//! Data preview: what a changed model's query returns against what an environment serves for
//! its parents, next to what the environment serves for the model now.
//!
//! For each requested model, its query runs on the engine with every reference resolved as the
//! environment would resolve it after an apply of this one model:
//!
//! - a parent the environment serves (it has a pointer for it) → the environment's view;
//! - an embedded parent → its own query, inlined (as everywhere else);
//! - an external parent → its source, read directly;
//! - a parent the environment does not serve yet (a new model, or an environment never applied)
//!   → its own query, inlined as a subquery projected on its declared columns (cast to their
//!   declared types), recursively: a time-range parent over every complete interval it wants at
//!   `now`, filtered on its time column; an `scd_type2` parent as its first build would open it
//!   (`valid_from = now`, `valid_to` NULL);
//! - a seed parent the environment does not serve → an error for that model (its rows exist
//!   only once applied).
//!
//! A time-range model previews only its newest complete interval before `now` (within its
//! `start`/`end`), with `@start`/`@end` bound to it and its rows filtered to it, as a batch is.
//! A seed previews its file's rows, read and parsed as apply reads them.
//!
//! The comparison, when the environment serves the model (a pointer and its view), describes
//! both relations: columns added, removed and retyped (a served type that is neither the
//! query's own nor the declared one: apply stores one or the other), and counts the rows of each over the preview window: for a
//! time-range model the same interval on the served view's time column, for `scd_type2` the
//! open versions (`valid_to IS NULL`), for every other kind the whole relation.
//!
//! Read-only: the DuckDB file is opened read-only for the call and closed before it returns (no
//! file yet: an in-memory database); lake and DuckLake targets are prepared on that connection,
//! the DuckLake catalog attached read-only. Nothing is written to the engine or the state store.

use crate::apply::resolve::{external_relation, typed_empty};
use crate::core::fragment::Resolver;
use crate::core::interval::{self, Interval, Millis};
use crate::core::name::{quote_ident, quote_literal};
use crate::core::{Kind, Model, ModelName};
use crate::engine::{Access, Catalog, DescribedColumn, Engine};
use crate::plan::env_schema;
use crate::project::Project;
use crate::state::StateStore;
use serde::Serialize;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// How much to preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Rows shown per model (`--preview-rows`, default 10).
    pub rows: usize,
    /// The current instant: time-range models preview their newest complete interval before it.
    pub now: Millis,
}

/// The column-level comparison of the previewed query with what the environment serves now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Columns the new query has and the served relation lacks.
    pub added: Vec<String>,
    /// Columns the served relation has and the new query lacks.
    pub removed: Vec<String>,
    /// Columns in both whose type differs: (name, served type, new type).
    pub retyped: Vec<(String, String, String)>,
    /// Rows the served relation has in the preview window.
    pub rows_now: u64,
    /// Rows the new query returns in the preview window.
    pub rows_new: u64,
    /// What the row counts cover: `window` (the time-range interval previewed), `open` (the open
    /// versions of an `scd_type2` model) or `all` (the whole relation).
    pub scope: &'static str,
}

/// The preview of one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// The model previewed.
    pub model: ModelName,
    /// Output columns of the new query: (name, engine type).
    pub columns: Vec<(String, String)>,
    /// The first rows (at most `Options::rows`), values as text, `None` for NULL.
    pub rows: Vec<Vec<Option<String>>>,
    /// The interval previewed, for time-range models: `[start, end)` as ISO-8601 UTC.
    pub window: Option<(String, String)>,
    /// The comparison with what the environment serves now; `None` when it serves no such model.
    pub comparison: Option<Comparison>,
    /// Why the preview failed (an SQL error), with the model's file:line; then the fields above are empty.
    pub error: Option<String>,
}

impl Preview {
    fn failed(model: &ModelName, error: String) -> Self {
        Preview { model: model.clone(), columns: Vec::new(), rows: Vec::new(), window: None, comparison: None, error: Some(error) }
    }
}

/// Previews `models` of `project` against what `env` serves: each model's query with its
/// parents resolved to `env`'s views (parents `env` does not serve yet are inlined as their own
/// queries; externals read their source), limited to `options.rows` rows, on a read-only
/// connection to the engine opened for this call and closed before it returns.
///
/// # Errors
/// Only failures that concern every model (the state store cannot be read, the engine database
/// is older than the state store: [`crate::plan::PlanError::EngineBehind`]); a model whose query
/// fails gets a [`Preview`] with `error` set.
pub fn preview(project: &Project, state: &dyn StateStore, env: &str, models: &[ModelName], options: &Options) -> anyhow::Result<Vec<Preview>> {
    crate::core::name::validate_env(env)?;
    let served: BTreeSet<String> = state.env_pointers(env)?.into_keys().collect();
    let metadata = state.env_metadata(env)?;
    if models.is_empty() {
        return Ok(Vec::new());
    }
    let mut engine = match open_engine(project) {
        Ok(e) => e,
        Err(message) => return Ok(models.iter().map(|m| Preview::failed(m, message.clone())).collect()),
    };
    // The store's epoch before the catalog (`plan::integrity::Observed`).
    let epoch = state.engine_epoch()?;
    let catalog = match engine.catalog() {
        Ok(c) => c,
        Err(e) => {
            let message = format!("cannot read the engine catalog: {}", one_line(&e.message));
            return Ok(models.iter().map(|m| Preview::failed(m, message.clone())).collect());
        }
    };
    // An engine database older than the state store (a backup restored after later runs) would
    // have its stale rows shown as what the environment serves: refused as the plan refuses it
    // (SPEC §4, invariant 63).
    if let Some(message) = crate::plan::integrity::engine_behind(&project.config, state, epoch, &catalog)? {
        return Err(crate::plan::PlanError::EngineBehind(message).into());
    }
    let ctx = Context { project, env, served: &served, metadata: &metadata, catalog: &catalog, options };
    let previews = models.iter().map(|m| ctx.preview_one(&mut *engine, m)).collect();
    drop(engine);
    Ok(previews)
}

/// The engine for one preview call (and one `efmesh diff --data`): the engine's database
/// read-only (a scratch database when there is none yet), with the lake and DuckLake targets
/// prepared read-only. A database that cannot be opened is said on one line, then the engine's
/// hint on its own (`\n  hint: …`, what `--json` reports apart).
pub(crate) fn open_engine(project: &Project) -> Result<Box<dyn Engine + Send>, String> {
    let mut engine = if project.config.engine_file().is_none_or(|path| path.exists()) {
        crate::engine::open(&project.config, Access::ReadOnly).map_err(|e| {
            let why = if crate::engine::is_locked_file(&e.message) {
                " (previews and data diffs read it read-only and never wait for a process writing it)"
            } else {
                " (is another process writing it? previews and data diffs read it read-only and never wait for it)"
            };
            let (cause, hint) = crate::engine::split_hint(&e.message);
            let hint = hint.map(|h| format!("\n  hint: {}", one_line(h))).unwrap_or_default();
            format!("{}{why}{hint}", one_line(cause))
        })?
    } else {
        crate::engine::open(&project.config, Access::Scratch).map_err(|e| format!("cannot open a scratch database: {}", one_line(&e.message)))?
    };
    crate::apply::lake::prepare(project, &mut *engine).map_err(|e| format!("cannot prepare the lake target for a preview: {}", one_line(&e.to_string())))?;
    crate::apply::ducklake::prepare_read_only(project, &mut *engine)
        .map_err(|e| format!("cannot prepare the DuckLake target for a preview: {}", one_line(&e.to_string())))?;
    Ok(engine)
}

/// The engine's message on one line: DuckDB's caret excerpt (`LINE 1: …`, positions in the
/// generated SQL, meaningless to the model's author) dropped, the other lines joined.
pub(crate) fn one_line(message: &str) -> String {
    let mut parts = Vec::new();
    for line in message.lines().map(str::trim) {
        if line.starts_with("LINE ") {
            break;
        }
        if !line.is_empty() {
            parts.push(line);
        }
    }
    parts.join(" ")
}

struct Context<'a> {
    project: &'a Project,
    env: &'a str,
    served: &'a BTreeSet<String>,
    metadata: &'a BTreeMap<String, String>,
    catalog: &'a Catalog,
    options: &'a Options,
}

/// `"<env schema>"."<table>"`: the view serving `name` in `env`.
pub(crate) fn env_view(env: &str, name: &ModelName) -> String {
    format!("{}.{}", quote_ident(&env_schema(env, name.schema())), quote_ident(name.table()))
}

/// `<column> >= <start> AND <column> < <end>` on `column`.
fn window_filter(column: &str, w: Interval) -> String {
    format!("{c} >= {} AND {c} < {}", interval::to_sql_literal(w.start), interval::to_sql_literal(w.end), c = quote_ident(column))
}

/// Every complete interval a time-range model wants at `now`, as one range; `None` when there is none.
fn wanted_range(tr: &crate::core::kind::TimeRange, now: Millis) -> Option<Interval> {
    interval::wanted_span(tr.start, tr.end, tr.grain, now)
}

impl Context<'_> {
    fn preview_one(&self, engine: &mut dyn Engine, name: &ModelName) -> Preview {
        let Some(model) = self.project.dag.get(name) else {
            let hint = self.project.dag.suggest(&name.to_string()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
            return Preview::failed(name, format!("unknown model `{name}`{hint}"));
        };
        let fail = |message: String| Preview::failed(name, format!("{}: model `{name}`: {message}", model.location));
        let (query, window) = match self.query(model, engine.sql()) {
            Ok(q) => q,
            Err(message) => return fail(message),
        };
        let (columns, rows) = match engine.query_with_columns(&query, self.options.rows) {
            Ok(r) => r,
            Err(e) => return fail(one_line(&e.message)),
        };
        let comparison = match self.compare(engine, model, &query, &columns, rows.len(), window) {
            Ok(c) => c,
            Err(message) => return fail(message),
        };
        Preview {
            model: name.clone(),
            columns: columns.into_iter().map(|c| (c.name, c.ty)).collect(),
            rows,
            window: window.map(|w| (interval::to_iso(w.start), interval::to_iso(w.end))),
            comparison,
            error: None,
        }
    }

    /// The query previewed for `model` and, for time-range models, its window.
    fn query(&self, model: &Model, dialect: &dyn crate::engine::dialect::Dialect) -> Result<(String, Option<Interval>), String> {
        let problems = RefCell::new(Vec::new());
        let (query, window) = match (&model.kind, &model.body) {
            (Kind::External(ext), _) => (format!("SELECT * FROM {}", external_relation(self.project, model, ext)), None),
            (Kind::Seed(_), _) => (self.seed_query(model, dialect)?, None),
            (Kind::IncrementalByTimeRange(tr), Some(body)) => {
                let newest = interval::wanted(tr.start, tr.end, tr.grain, self.options.now).last().copied().ok_or_else(|| {
                    format!(
                        "no complete {} interval before {} within the model's start/end: nothing to preview",
                        tr.grain.as_str(),
                        interval::to_iso(self.options.now)
                    )
                })?;
                let sql = body.render(&self.resolver(Some(newest), &problems));
                (format!("SELECT * FROM (\n{}\n) AS _efmesh_preview WHERE {}", sql.trim(), window_filter(&tr.time_column, newest)), Some(newest))
            }
            (_, Some(body)) => (body.render(&self.resolver(None, &problems)).trim().to_string(), None),
            (_, None) => return Err("the model has no query to preview".into()),
        };
        let problems = problems.into_inner();
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok((query, window))
    }

    /// A seed's rows as apply reads them (the file parsed against the declared schema), as a
    /// `VALUES` relation cast to the declared types.
    fn seed_query(&self, model: &Model, dialect: &dyn crate::engine::dialect::Dialect) -> Result<String, String> {
        let Kind::Seed(seed) = &model.kind else { return Err("not a seed".into()) };
        let path = crate::seed::resolve(&self.project.config.root, &seed.path);
        let bytes = fs_err::read(&path).map_err(|e| e.to_string())?;
        let rows = crate::apply::seed::read(&bytes, seed, model, dialect).map_err(|errors| {
            let first = errors.first().map(ToString::to_string).unwrap_or_default();
            format!("seed file `{}`: {first}", seed.path)
        })?;
        if rows.rows.is_empty() {
            return Ok(format!("SELECT * FROM {}", typed_empty(model)));
        }
        let aliases: Vec<String> = (0..model.schema.0.len()).map(|i| format!("_c{i}")).collect();
        let values: Vec<String> = rows
            .rows
            .iter()
            .map(|(_, r)| format!("({})", r.iter().map(|v| v.as_deref().map_or("NULL".to_string(), quote_literal)).collect::<Vec<_>>().join(", ")))
            .collect();
        let cols: Vec<String> = model.schema.0.iter().zip(&aliases).map(|(c, a)| format!("CAST({a} AS {}) AS {}", c.ty, quote_ident(&c.name))).collect();
        Ok(format!("SELECT {} FROM (VALUES {}) AS _efmesh_seed({})", cols.join(", "), values.join(", "), aliases.join(", ")))
    }

    fn resolver<'r>(&'r self, bounds: Option<Interval>, problems: &'r RefCell<Vec<String>>) -> PreviewResolver<'r> {
        PreviewResolver { ctx: self, bounds, problems }
    }

    /// The comparison with the view `env` serves for `model`, when it serves one.
    fn compare(
        &self,
        engine: &mut dyn Engine,
        model: &Model,
        query: &str,
        columns: &[DescribedColumn],
        shown: usize,
        window: Option<Interval>,
    ) -> Result<Option<Comparison>, String> {
        let name = &model.name;
        let schema = env_schema(self.env, name.schema());
        if !self.served.contains(&name.to_string()) || !self.catalog.contains(&schema, name.table()) {
            return Ok(None);
        }
        let view = env_view(self.env, name);
        let served =
            engine.describe(&format!("SELECT * FROM {view}")).map_err(|e| format!("cannot describe the served view {view}: {}", one_line(&e.message)))?;
        // The new side as apply stores it: an engine table takes the query's own column types
        // (checked against the declared ones by family: a `varchar` declared over a `text`
        // expression is stored `text`), a lake version or a column added to a forward-only
        // table the declared ones. A column is retyped only when the served type is neither.
        let declared: BTreeMap<String, String> = engine
            .describe(&format!("SELECT * FROM {} AS _efmesh_declared", typed_empty(model)))
            .map_err(|e| one_line(&e.message))?
            .into_iter()
            .map(|c| (c.name.to_lowercase(), c.ty))
            .collect();
        let new: Vec<(String, String)> = columns.iter().map(|c| (c.name.clone(), c.ty.clone())).collect();
        let managed: BTreeSet<String> = model.kind.managed_columns().into_iter().map(|c| c.name.to_lowercase()).collect();
        let served_has = |n: &str| served.iter().any(|c| c.name.eq_ignore_ascii_case(n));
        let open_column = match &model.kind {
            Kind::ScdType2(scd) if served_has(&scd.valid_to) => Some(scd.valid_to.clone()),
            _ => None,
        };
        let old: Vec<(String, String)> = served.iter().filter(|c| !managed.contains(&c.name.to_lowercase())).map(|c| (c.name.clone(), c.ty.clone())).collect();
        let find = |cols: &[(String, String)], n: &str| cols.iter().find(|(c, _)| c.eq_ignore_ascii_case(n)).map(|(_, t)| t.clone());
        let added = new.iter().filter(|(n, _)| find(&old, n).is_none()).map(|(n, _)| n.clone()).collect();
        let removed = old.iter().filter(|(n, _)| find(&new, n).is_none()).map(|(n, _)| n.clone()).collect();
        let retyped = new
            .iter()
            .filter_map(|(n, t)| find(&old, n).filter(|o| o != t && declared.get(&n.to_lowercase()) != Some(o)).map(|o| (n.clone(), o, t.clone())))
            .collect();

        let count = |engine: &mut dyn Engine, sql: String| -> Result<u64, String> {
            let rows = engine.query(&sql).map_err(|e| one_line(&e.message))?;
            Ok(rows.first().and_then(|r| r.first().cloned().flatten()).and_then(|n| n.parse().ok()).unwrap_or(0))
        };
        // Fewer rows than the limit: the preview holds them all, no need to run the query again.
        let rows_new = if shown < self.options.rows { shown as u64 } else { count(engine, format!("SELECT count(*) FROM (\n{query}\n) AS _efmesh_preview"))? };
        let (filter, scope) = if let Some(w) = window {
            let column = self.served_time_column(model).unwrap_or_default();
            if !served_has(&column) {
                return Err(format!("the view {view} it serves has no time column `{column}` to count the preview window on"));
            }
            (format!(" WHERE {}", window_filter(&column, w)), "window")
        } else if let Some(valid_to) = &open_column {
            (format!(" WHERE {} IS NULL", quote_ident(valid_to)), "open")
        } else {
            (String::new(), "all")
        };
        let rows_now = count(engine, format!("SELECT count(*) FROM {view}{filter}"))?;
        Ok(Some(Comparison { added, removed, retyped, rows_now, rows_new, scope }))
    }

    /// The time column of the version `env` serves for a time-range model (from the metadata its
    /// promotion recorded), else the project's.
    fn served_time_column(&self, model: &Model) -> Option<String> {
        let recorded = self
            .metadata
            .get(&model.name.to_string())
            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
            .and_then(|m| m["kind"]["time_column"].as_str().map(str::to_string));
        recorded.or_else(|| model.kind.time_range().map(|t| t.time_column.clone()))
    }
}

/// References as [`preview`] resolves them (see the module docs).
struct PreviewResolver<'a> {
    ctx: &'a Context<'a>,
    bounds: Option<Interval>,
    problems: &'a RefCell<Vec<String>>,
}

impl PreviewResolver<'_> {
    /// A parent the environment does not serve: its own query, projected on its declared
    /// columns as its first build would store them — in the query's own types for an engine
    /// table (which takes them: a `decimal(10,4)` declared `decimal(10,2)` keeps its four
    /// places), cast to the declared types for a parquet lake version (whose files are written
    /// so).
    fn inlined(&self, model: &Model) -> String {
        let Some(body) = &model.body else { return typed_empty(model) };
        let cast = model.target == crate::core::Target::Parquet;
        let declared = |extra: &[String]| {
            let mut cols: Vec<String> = model
                .schema
                .0
                .iter()
                .map(|c| if cast { format!("CAST({q} AS {}) AS {q}", c.ty, q = quote_ident(&c.name)) } else { quote_ident(&c.name) })
                .collect();
            cols.extend_from_slice(extra);
            cols.join(", ")
        };
        match &model.kind {
            Kind::IncrementalByTimeRange(tr) => {
                let Some(range) = wanted_range(tr, self.ctx.options.now) else { return typed_empty(model) };
                let sql = body.render(&PreviewResolver { bounds: Some(range), ..*self });
                format!("(SELECT {} FROM (\n{}\n) AS _efmesh_parent WHERE {})", declared(&[]), sql.trim(), window_filter(&tr.time_column, range))
            }
            Kind::ScdType2(scd) => {
                let sql = body.render(&PreviewResolver { bounds: None, ..*self });
                let managed = [
                    format!("CAST({} AS TIMESTAMP) AS {}", interval::to_sql_literal(self.ctx.options.now), quote_ident(&scd.valid_from)),
                    format!("CAST(NULL AS TIMESTAMP) AS {}", quote_ident(&scd.valid_to)),
                ];
                format!("(SELECT {} FROM (\n{}\n) AS _efmesh_parent)", declared(&managed), sql.trim())
            }
            _ => {
                let sql = body.render(&PreviewResolver { bounds: None, ..*self });
                format!("(SELECT {} FROM (\n{}\n) AS _efmesh_parent)", declared(&[]), sql.trim())
            }
        }
    }
}

impl Resolver for PreviewResolver<'_> {
    fn relation(&self, name: &ModelName) -> String {
        let Some(model) = self.ctx.project.dag.get(name) else { return name.to_string() };
        match &model.kind {
            Kind::External(ext) => external_relation(self.ctx.project, model, ext),
            Kind::Embedded => format!("(\n{}\n)", model.body.as_ref().map(|b| b.render(self)).unwrap_or_default()),
            _ if self.ctx.served.contains(&name.to_string()) => env_view(self.ctx.env, name),
            Kind::Seed(_) => {
                let problem = format!(
                    "its parent seed `{name}` is not served by environment `{}` yet (a seed's rows exist only once applied): apply it first",
                    self.ctx.env
                );
                let mut problems = self.problems.borrow_mut();
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
                typed_empty(model)
            }
            // Inlined over the whole wanted range, a model reading its own earlier rows would
            // read none: its preview would be wrong, so it is refused like an unapplied seed.
            _ if model.body.as_ref().is_some_and(|b| b.reads_itself()) => {
                let problem =
                    format!("its parent `{name}` reads its own earlier rows (`@this`) and is not served by environment `{}` yet: apply it first", self.ctx.env);
                let mut problems = self.problems.borrow_mut();
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
                typed_empty(model)
            }
            _ => self.inlined(model),
        }
    }

    fn start(&self) -> String {
        self.bounds.map(|b| interval::to_sql_literal(b.start)).unwrap_or_else(|| "$start".into())
    }

    fn end(&self) -> String {
        self.bounds.map(|b| interval::to_sql_literal(b.end)).unwrap_or_else(|| "$end".into())
    }

    fn bound(&self, b: crate::core::fragment::Bound) -> String {
        self.bounds.map(|iv| b.literal(iv)).unwrap_or_else(|| b.placeholder())
    }

    /// What the environment serves of the model, or no rows (as its first build reads).
    fn this(&self, model: &ModelName) -> String {
        match self.ctx.project.dag.get(model) {
            _ if self.ctx.served.contains(&model.to_string()) => env_view(self.ctx.env, model),
            Some(m) => typed_empty(m),
            None => crate::core::fragment::THIS_PLACEHOLDER.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_messages_fold_to_one_line_without_the_caret_excerpt() {
        let msg =
            "Binder Error: Referenced column \"nope\" not found in FROM clause!\nCandidate bindings: \"id\"\n\nLINE 1: SELECT nope FROM t\n               ^";
        assert_eq!(one_line(msg), "Binder Error: Referenced column \"nope\" not found in FROM clause! Candidate bindings: \"id\"");
        assert_eq!(one_line("IO Error: x"), "IO Error: x");
    }

    #[test]
    fn a_time_range_parent_is_inlined_over_every_complete_interval() {
        let tr = crate::core::kind::TimeRange {
            time_column: "day".into(),
            start: interval::parse_instant("2026-01-01T00:00:00Z").unwrap(),
            end: None,
            grain: interval::Grain::Day,
            batch_size: 1,
            lookback: 0,
            auto_restatement_intervals: 0,
        };
        let now = interval::parse_instant("2026-01-03T12:00:00Z").unwrap();
        let r = wanted_range(&tr, now).unwrap();
        assert_eq!((interval::to_iso(r.start), interval::to_iso(r.end)), ("2026-01-01T00:00:00.000Z".into(), "2026-01-03T00:00:00.000Z".into()));
        assert_eq!(wanted_range(&tr, interval::parse_instant("2026-01-01T05:00:00Z").unwrap()), None);
    }
}
