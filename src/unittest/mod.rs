//! `efmesh test`: model unit tests on fixtures.
//!
//! A test (see [`crate::script::test_spec`]) gives rows for the parents of one model and the rows
//! the model must return. Running it:
//!
//! 1. checks the fixtures against the DAG: every parent the model reads needs a fixture (an
//!    embedded parent may instead be left out, and is then inlined over fixtures of its own
//!    parents); a fixture for anything else is an error; rows may only name declared columns;
//! 2. types every value by the declaring model's schema (`CAST(v AS <declared type>)`); a value
//!    that does not fit is an error naming the test, the parent (or `expect`), the row and the
//!    column, and so is one the cast would change without an error (a fraction into an integer
//!    type, a time of day into a `date`, digits of a second past a time type's precision: see
//!    [`fixture::refuse_without_engine`]; an expected date or time against the type the query
//!    returns, once it is known);
//! 3. renders the model's SQL with each fixtured parent replaced by a CTE (`"raw.moves"`) and
//!    `@start`/`@end` by the test's `vars` (time-range models: required), and runs it on an
//!    in-memory DuckDB: the schema contract first (names, order, type families, as `apply`
//!    checks it), then the rows. A time-range model's rows are filtered to `[start, end)` on its
//!    time column, exactly as `apply` inserts them;
//! 4. compares the returned rows, cast to the declared types (a value such a cast would cut or
//!    round as the query returns it: what a build stores), with the expected rows: as
//!    multisets by default (NULL equals NULL), position by position with `ordered = true`.
//!
//! Nothing touches the project's database or state store.

pub mod diff;
pub mod fixture;

use crate::apply::contract;
use crate::config::Config;
use crate::core::error::did_you_mean;
use crate::core::name::quote_ident;
use crate::core::{Column, Dag, Interval, Kind, LoadErrors, Location, Model, ModelName, interval};
use crate::engine::Engine;
use crate::project::Project;
use crate::script::{self, test_spec::TestSpec};
use diff::{RowDiff, TextRow};
use fixture::FixtureResolver;
use serde_json::Value;
use std::collections::BTreeSet;

/// A project loaded with its unit tests.
#[derive(Debug, Clone)]
pub struct Suite {
    /// The models, validated as for every command.
    pub project: Project,
    /// Every test of the project's test files, sorted by file and line.
    pub tests: Vec<TestSpec>,
}

/// Loads the models (`project.models`) and the tests (`project.tests`) of `config`'s project.
///
/// # Errors
/// [`LoadErrors`] of models and test files alike, each with file:line.
pub fn load(config: &Config) -> Result<Suite, LoadErrors> {
    let files = script::loader::Discovered::of(config)?;
    let test_files = script::discover_matching(config, &config.project.tests)?;
    let (models, tests) = script::loader::load_models_and_tests(&config.root, &files, &test_files)?;
    let dag = Dag::build(models)?;
    Ok(Suite { project: Project { config: config.clone(), dag }, tests })
}

/// Selectors that matched no test name and no tested model, each with a "did you mean" when close.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", .0.iter().map(|(s, hint)| format!("no test and no tested model named `{s}`{}", hint.as_ref().map(|h| format!("\n  hint: did you mean `{h}`?")).unwrap_or_default())).collect::<Vec<_>>().join("\n"))]
pub struct UnknownSelectors(pub Vec<(String, Option<String>)>);

/// The tests named by `selectors` (a test name, or a model name selecting its tests), in suite
/// order; every test when `selectors` is empty.
///
/// # Errors
/// [`UnknownSelectors`] listing every selector that matched nothing.
pub fn select<'a>(tests: &'a [TestSpec], selectors: &[String]) -> Result<Vec<&'a TestSpec>, UnknownSelectors> {
    if selectors.is_empty() {
        return Ok(tests.iter().collect());
    }
    let hit = |t: &TestSpec, s: &str| t.name == s || t.model.to_string() == s;
    let unknown: Vec<(String, Option<String>)> = selectors
        .iter()
        .filter(|s| !tests.iter().any(|t| hit(t, s)))
        .map(|s| {
            let candidates: BTreeSet<String> = tests.iter().flat_map(|t| [t.name.clone(), t.model.to_string()]).collect();
            (s.clone(), did_you_mean(s, candidates.iter().map(String::as_str)).map(str::to_string))
        })
        .collect();
    if !unknown.is_empty() {
        return Err(UnknownSelectors(unknown));
    }
    Ok(tests.iter().filter(|t| selectors.iter().any(|s| hit(t, s))).collect())
}

/// How a test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The model returned the expected rows.
    Passed,
    /// It returned other rows, or broke its schema contract.
    Failed,
    /// The test could not run: bad fixtures, bounds, columns or values, or a query error.
    Error,
}

impl Status {
    /// `passed`, `failed` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Error => "error",
        }
    }
}

/// The outcome of one test.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// Test name.
    pub name: String,
    /// The model under test.
    pub model: ModelName,
    /// Where `define_test` was called.
    pub location: Location,
    /// Passed, failed or error.
    pub status: Status,
    /// The compared output columns, in declared order (or the test's `columns` order).
    pub columns: Vec<String>,
    /// Number of expected rows.
    pub expected_rows: usize,
    /// Number of rows the model returned (`None` when it did not run).
    pub actual_rows: Option<usize>,
    /// Missing and unexpected rows (and an order mismatch with `ordered`).
    pub diff: RowDiff,
    /// Why the test failed without a row diff (schema contract) or could not run (errors), one
    /// message per problem.
    pub problems: Vec<String>,
}

impl TestResult {
    fn new(t: &TestSpec) -> Self {
        TestResult {
            name: t.name.clone(),
            model: t.model.clone(),
            location: t.location.clone(),
            status: Status::Error,
            columns: Vec::new(),
            expected_rows: t.expect.len(),
            actual_rows: None,
            diff: RowDiff::default(),
            problems: Vec::new(),
        }
    }

    fn error(mut self, problems: Vec<String>) -> Self {
        self.status = Status::Error;
        self.problems = problems;
        self
    }
}

/// Runs `tests` of `project`, in order, on `engine` (an in-memory database: test queries create
/// nothing and read only their fixtures).
pub fn run(project: &Project, tests: &[&TestSpec], engine: &mut dyn Engine) -> Vec<TestResult> {
    tests.iter().map(|t| run_one(project, t, engine)).collect()
}

/// Which parents get fixtures, or every fixture problem.
fn plan_fixtures(project: &Project, model: &Model, test: &TestSpec) -> Result<BTreeSet<ModelName>, Vec<String>> {
    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    // (model reading, parents), walked through embedded parents without a fixture.
    let mut stack: Vec<(&Model, Option<&ModelName>)> = vec![(model, None)];
    let mut seen = BTreeSet::new();
    while let Some((m, via)) = stack.pop() {
        for p in m.parents() {
            if test.inputs.contains_key(&p) {
                used.insert(p);
                continue;
            }
            match project.dag.get(&p) {
                Some(pm) if matches!(pm.kind, Kind::Embedded) => {
                    if seen.insert(p.clone()) {
                        stack.push((pm, Some(&pm.name)));
                    }
                }
                _ => problems.push(match via {
                    None => format!("no fixture for parent `{p}`, which `{}` reads", model.name),
                    Some(e) => format!("no fixture for `{p}`, which the embedded parent `{e}` reads (inlined because it has no fixture of its own)"),
                }),
            }
        }
    }
    // A model reading itself (`@this`) may be given its previous rows.
    if model.body.as_ref().is_some_and(|b| b.reads_itself()) && test.inputs.contains_key(&model.name) {
        used.insert(model.name.clone());
    }
    for given in test.inputs.keys() {
        if !used.contains(given) {
            let parents: Vec<String> = model.parents().iter().map(|p| format!("`{p}`")).collect();
            let also = if project.dag.get(given).is_none() { "an unknown model, " } else { "" };
            problems.push(format!(
                "fixture `{given}` is {also}not a parent of `{}` (its parents: {})",
                model.name,
                if parents.is_empty() { "none".to_string() } else { parents.join(", ") }
            ));
        }
    }
    problems.sort();
    problems.dedup();
    if problems.is_empty() { Ok(used) } else { Err(problems) }
}

/// One value to type: where it comes from and its target column.
struct Cell<'a> {
    /// `input `raw.moves`` or `expect`.
    source: String,
    /// 1-based row.
    row: usize,
    column: &'a Column,
    value: &'a Value,
}

impl Cell<'_> {
    fn describe(&self) -> String {
        format!("{} row {}, column `{}` ({}): value {}", self.source, self.row, self.column.name, self.column.ty, self.value)
    }
}

/// Checks that every row names only `columns`; returns the cells to type.
fn cells<'a>(source: &str, owner: &str, columns: &[&'a Column], rows: &'a [crate::script::test_spec::Row], problems: &mut Vec<String>) -> Vec<Cell<'a>> {
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let mut unknown: Vec<&String> = row.keys().filter(|k| !columns.iter().any(|c| &c.name == *k)).collect();
        unknown.sort();
        for k in unknown {
            let hint = did_you_mean(k, columns.iter().map(|c| c.name.as_str())).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
            problems.push(format!("{source} row {}: column `{k}` is not {owner}{hint}", i + 1));
        }
        for c in columns {
            if let Some(v) = row.get(&c.name).filter(|v| !v.is_null()) {
                out.push(Cell { source: source.to_string(), row: i + 1, column: c, value: v });
            }
        }
    }
    out
}

/// Types every cell, in one engine round trip when all fit; names each cell that does not.
fn check_cells(cells: &[Cell], engine: &mut dyn Engine) -> Vec<String> {
    let mut problems: Vec<String> = cells
        .iter()
        .filter_map(|c| fixture::refuse_without_engine(c.value, &c.column.ty, c.source != "expect").map(|why| format!("{} does not fit: {why}", c.describe())))
        .collect();
    if !problems.is_empty() || cells.is_empty() {
        return problems;
    }
    let checks: Vec<String> =
        cells.iter().enumerate().map(|(i, c)| format!("({i}, TRY_CAST({} AS {}) IS NULL)", fixture::literal(c.value), c.column.ty)).collect();
    let sql = format!("SELECT i FROM (VALUES {}) AS _c(i, bad) WHERE bad ORDER BY i", checks.join(", "));
    let suspects: Vec<usize> = match engine.query(&sql) {
        Ok(rows) => rows.iter().filter_map(|r| r.first().cloned().flatten()).filter_map(|i| i.parse().ok()).collect(),
        // A declared type the engine does not know, or a literal it cannot read: find the cells.
        Err(_) => (0..cells.len()).collect(),
    };
    for i in suspects {
        let c = &cells[i];
        if let Err(e) = engine.query(&format!("SELECT {}", fixture::typed(c.value, &c.column.ty))) {
            problems.push(format!("{} does not fit: {}", c.describe(), first_line(&e.message)));
        } else if let Ok(rows) = engine.query(&format!("SELECT TRY_CAST({} AS {}) IS NULL", fixture::literal(c.value), c.column.ty))
            && rows.first().and_then(|r| r.first().cloned().flatten()).as_deref() == Some("true")
        {
            problems.push(format!("{} does not fit", c.describe()));
        }
    }
    problems
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// Runs one test; never panics on bad input, reports it in the result.
pub fn run_one(project: &Project, test: &TestSpec, engine: &mut dyn Engine) -> TestResult {
    let result = TestResult::new(test);
    let Some(model) = project.dag.get(&test.model) else {
        let hint = project.dag.suggest(&test.model.to_string()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
        return result.error(vec![format!("unknown model `{}`{hint}", test.model)]);
    };
    let Some(body) = &model.body else {
        return result.error(vec![format!("`{}` is an external source: it has no query to test", model.name)]);
    };
    let mut problems = Vec::new();

    // Fixtures against the DAG.
    let fixtured = plan_fixtures(project, model, test).unwrap_or_else(|p| {
        problems.extend(p);
        BTreeSet::new()
    });

    // Bounds.
    let time_range = model.kind.time_range();
    let bounds = match (test.start, test.end) {
        (Some(s), Some(e)) => Some(Interval::new(s, e)),
        _ => None,
    };
    if time_range.is_some() || body.uses_bounds() {
        if bounds.is_none() {
            problems.push(format!(
                "`{}` is computed per interval: give the test's bounds as `vars = {{ start = \"2026-01-01\", [\"end\"] = \"2026-01-02\" }}` (Lua) or `vars: #{{ start: …, end: … }}` (Rhai)",
                model.name
            ));
        }
    } else if test.start.is_some() || test.end.is_some() {
        problems.push(format!("`vars.start` / `vars.end` are for models that use `@start`/`@end`; `{}` is `{}`", model.name, model.kind.tag()));
    }
    // A time-range model only ever computes whole intervals of its grain: a test of bounds
    // inside one would pass for a window `apply` and `run` never compute.
    if let (Some(t), Some(b)) = (time_range, bounds) {
        for (which, at) in [("start", b.start), ("end", b.end)] {
            if let Err(e) = t.grain.aligned(at) {
                problems.push(format!(
                    "`vars.{which}` {} is not aligned to the {} grain of `{}` (apply computes whole intervals); {e}",
                    interval::to_iso(at),
                    t.grain.spelling(),
                    model.name
                ));
            }
        }
    }

    // Compared columns.
    let columns: Vec<&Column> = match &test.columns {
        None => model.schema.0.iter().collect(),
        Some(names) => names
            .iter()
            .filter_map(|n| {
                let c = model.schema.get(n);
                if c.is_none() {
                    let hint = did_you_mean(n, model.schema.names()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
                    problems.push(format!("`columns`: `{n}` is not declared by `{}`{hint}", model.name));
                }
                c
            })
            .collect(),
    };
    let mut result = result;
    result.columns = columns.iter().map(|c| c.name.clone()).collect();

    // Rows: only declared columns, values that fit the declared types.
    let mut all_cells = Vec::new();
    for (parent, rows) in &test.inputs {
        let Some(pm) = project.dag.get(parent).filter(|_| fixtured.contains(parent)) else { continue };
        let cols: Vec<&Column> = pm.schema.0.iter().collect();
        all_cells.extend(cells(&format!("input `{parent}`"), &format!("declared by `{parent}`"), &cols, rows, &mut problems));
    }
    let owner = if test.columns.is_some() { format!("among the test's `columns` of `{}`", model.name) } else { format!("declared by `{}`", model.name) };
    all_cells.extend(cells("expect", &owner, &columns, &test.expect, &mut problems));
    if problems.is_empty() {
        problems.extend(check_cells(&all_cells, engine));
    }
    if !problems.is_empty() {
        return result.error(problems);
    }

    // The query over the fixtures.
    let mut ctes: Vec<String> = Vec::new();
    for parent in &fixtured {
        let pm = project.dag.get(parent).expect("validated");
        let cols: Vec<&Column> = pm.schema.0.iter().collect();
        ctes.push(format!("{} AS (\n{}\n)", fixture::cte_name(parent), fixture::relation(&cols, &test.inputs[parent])));
    }
    let with = if ctes.is_empty() { String::new() } else { format!("WITH {}\n", ctes.join(",\n")) };
    let resolver = FixtureResolver { project, fixtured: &fixtured, bounds };
    let sql = body.render(&resolver);
    let filter = match (time_range, bounds) {
        (Some(t), Some(b)) => {
            let tc = quote_ident(&t.time_column);
            format!("\nWHERE {tc} >= {} AND {tc} < {}", crate::core::interval::to_sql_literal(b.start), crate::core::interval::to_sql_literal(b.end))
        }
        _ => String::new(),
    };
    let from = format!("FROM (\n{sql}\n) AS _efmesh_q{filter}");

    // 1. The schema contract, as apply checks it.
    let described = match engine.describe(&format!("{with}SELECT * {from}")) {
        Err(e) => return result.error(vec![format!("the query does not run over the fixtures: {}", first_line(&e.message))]),
        Ok(described) => {
            let broken = contract::compare(&model.schema, &described);
            if !broken.is_empty() {
                result.status = Status::Failed;
                result.problems = broken.into_iter().map(|p| format!("schema contract: {p}")).collect();
                return result;
            }
            described
        }
    };

    // 2. The rows, rendered as text on both sides, each value cast to the declared type as
    // before — unless that cast would change it: the contract compares type families only, so
    // a build stores what the query returns, and a value a declared `varchar(1)`, `decimal(10,1)`
    // or `real` would cut or round is compared as the query returns it (the table holds that).
    // An expected value is read in the declared type, in the query's (whose form decides which
    // text is compared) and in a wide type of its family (the text compared when the declared
    // type would change it: the query's type may round it too).
    use crate::core::TypeFamily;
    let query_types: Vec<String> = columns.iter().map(|c| contract::column_type(&described, &c.name, &c.ty).to_string()).collect();
    // An expected date or time the query's type would cut (a time of day for a `date`, digits
    // of a second past its precision) would be compared cut, and pass against a value the table
    // does not hold: refused, as an input is ([`fixture::refuse_without_engine`]).
    let mut cut = Vec::new();
    for (n, row) in test.expect.iter().enumerate() {
        for (c, q) in columns.iter().zip(&query_types) {
            if let Some(v) = row.get(&c.name)
                && let Value::String(s) = v
                && let Some(why) = crate::core::schema::temporal_cut(s, q)
            {
                cut.push(format!("expect row {}, column `{}` ({q}, as the query returns it): value {v} does not fit: {why}", n + 1, c.name));
            }
        }
    }
    if !cut.is_empty() {
        return result.error(cut);
    }
    let differs =
        |c: &Column, q: &str| matches!(TypeFamily::of(q), TypeFamily::Text | TypeFamily::Numeric | TypeFamily::Temporal) && !q.eq_ignore_ascii_case(&c.ty);
    // The text of `x` (of type `q`) as it is: a number as a double when that keeps it exactly
    // (an unconstrained Postgres `numeric` prints the scale its computation left: 0.2500…).
    // The round trip through a double must not fail where the double rounds past the type's
    // range (`decimal(38,0)` near its maximum): `TRY_CAST` where the engine has it (DuckDB),
    // else into an unconstrained `numeric` (Postgres), which holds any double.
    let try_cast = engine.sql().try_cast("_efmesh_x", "_efmesh_t").is_some();
    let raw = |x: &str, q: &str| {
        if TypeFamily::of(q) == TypeFamily::Numeric {
            let back =
                if try_cast { format!("TRY_CAST(CAST({x} AS DOUBLE PRECISION) AS {q})") } else { format!("CAST(CAST({x} AS DOUBLE PRECISION) AS numeric)") };
            format!("CASE WHEN {back} = {x} THEN CAST(CAST({x} AS DOUBLE PRECISION) AS VARCHAR) ELSE CAST({x} AS VARCHAR) END")
        } else {
            format!("CAST({x} AS VARCHAR)")
        }
    };
    // `x` in the query's type, `declared` in the declared type, `(wide, its type)` as it is.
    // A decimal's text carries its scale, which an unconstrained Postgres `numeric` takes from
    // the computation (`0.3000` from a `sum()` of `numeric(20,4)`): decimals compare by value.
    let decimal = |ty: &str| {
        let t = ty.trim().to_ascii_lowercase();
        t.starts_with("numeric") || t.starts_with("decimal")
    };
    let key = |c: &Column, q: &str, x: &str, declared: &str, (wide, wide_ty): (&str, &str)| {
        if differs(c, q) {
            format!("CASE WHEN CAST(CAST({x} AS {}) AS {q}) IS NOT DISTINCT FROM {x} THEN CAST({declared} AS VARCHAR) ELSE {} END", c.ty, raw(wide, wide_ty))
        } else if decimal(&c.ty) {
            raw(declared, &c.ty)
        } else {
            format!("CAST({declared} AS VARCHAR)")
        }
    };
    let projection: Vec<String> = columns
        .iter()
        .zip(&query_types)
        .map(|(c, q)| {
            let x = quote_ident(&c.name);
            key(c, q, &x, &format!("CAST({x} AS {})", c.ty), (&x, q))
        })
        .collect();
    let actual: Vec<TextRow> = match engine.query(&format!("{with}SELECT {} {from}", projection.join(", "))) {
        Ok(rows) => rows,
        Err(e) => return result.error(vec![format!("the query failed over the fixtures: {}", first_line(&e.message))]),
    };
    let expected: Vec<TextRow> = if test.expect.is_empty() {
        Vec::new()
    } else {
        // Each expected column three times, by position (`_q0`, `_d0`, `_w0`: short names,
        // whatever the column's length): in the query's type, the declared one, a wide one.
        let wide_type = |q: &str| match TypeFamily::of(q) {
            TypeFamily::Numeric => "DOUBLE PRECISION".to_string(),
            TypeFamily::Text => "VARCHAR".to_string(),
            _ => q.to_string(),
        };
        let mut all: Vec<Column> = Vec::with_capacity(columns.len() * 3 + 1);
        // The row's position: the rows come back in the order written.
        all.push(Column { name: "_n".into(), ty: "BIGINT".into() });
        for (i, (c, q)) in columns.iter().zip(&query_types).enumerate() {
            all.push(Column { name: format!("_q{i}"), ty: q.clone() });
            all.push(Column { name: format!("_d{i}"), ty: c.ty.clone() });
            all.push(Column { name: format!("_w{i}"), ty: wide_type(q) });
        }
        let rows: Vec<script::test_spec::Row> = test
            .expect
            .iter()
            .enumerate()
            .map(|(n, r)| {
                let mut out = script::test_spec::Row::new();
                out.insert("_n".into(), serde_json::Value::from(n));
                for (i, c) in columns.iter().enumerate() {
                    if let Some(v) = r.get(&c.name) {
                        for prefix in ["_q", "_d", "_w"] {
                            out.insert(format!("{prefix}{i}"), v.clone());
                        }
                    }
                }
                out
            })
            .collect();
        let all_refs: Vec<&Column> = all.iter().collect();
        let rel = fixture::relation(&all_refs, &rows);
        let projection: Vec<String> = columns
            .iter()
            .zip(&query_types)
            .enumerate()
            .map(|(i, (c, q))| key(c, q, &format!("_q{i}"), &format!("_d{i}"), (&format!("_w{i}"), &wide_type(q))))
            .collect();
        let mut typed: Vec<TextRow> = match engine.query(&format!("SELECT {} FROM ({rel}) AS _e ORDER BY _n", projection.join(", "))) {
            Ok(rows) => rows,
            Err(e) => return result.error(vec![format!("the expected rows cannot be typed: {}", first_line(&e.message))]),
        };
        // A number the query's exact type would round (1.5551 for a `decimal(10,2)`, 3.4 for an
        // integer) is compared as written: no value the table stores equals it. Decided on the
        // text (a double would misjudge long decimals).
        for (row, written) in typed.iter_mut().zip(&test.expect) {
            for (i, (c, q)) in columns.iter().zip(&query_types).enumerate() {
                let text = match written.get(&c.name) {
                    Some(serde_json::Value::Number(n)) => n.to_string(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    _ => continue,
                };
                if crate::core::schema::decimals_of(&text).is_some_and(|d| crate::core::schema::rounds(q, d)) {
                    row[i] = Some(text);
                }
            }
        }
        typed
    };
    result.actual_rows = Some(actual.len());
    // A negative zero equals zero (SQL's `=`): `-0.0` and `0.0` are one number here too.
    let numeric: Vec<bool> =
        query_types.iter().zip(&columns).map(|(q, c)| TypeFamily::of(q) == TypeFamily::Numeric || TypeFamily::of(&c.ty) == TypeFamily::Numeric).collect();
    let (expected, actual) = (diff::unsigned_zeros(expected, &numeric), diff::unsigned_zeros(actual, &numeric));
    result.diff = diff::compare(&expected, &actual, test.ordered);
    result.status = if result.diff.is_empty() { Status::Passed } else { Status::Failed };
    result
}
