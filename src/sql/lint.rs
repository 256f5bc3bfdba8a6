//! `efmesh check`'s lints (sqlmesh's linter): rules over the loaded project and each model's
//! canonical SQL AST that find what is legal but likely wrong or costly. Each rule has a name
//! (used in `[lint]` of `efmesh.toml` and a model's `ignored_lints`), a one-line summary
//! ([`RULES`]) and a check; [`lint_model`] runs them all on one model. Which rules run and
//! whether a finding fails `check` is the caller's business (`crate::config::LintSection`).
//! Two rules need more than the model: `unknown_type` (the engine's types) and
//! `missing_source_file` (the file system) are declared here, for their names, and checked by
//! `crate::cli::check`; this module reads no file.
//!
//! Like the column check, every rule is conservative: a shape it cannot read (SQL sqlparser
//! cannot parse, a column lineage cannot follow) is never a finding.

use super::lineage;
use crate::core::dag::Dag;
use crate::core::kind::Kind;
use crate::core::model::{Location, Model};
use crate::core::name::ModelName;

/// A lint rule: its name and what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The name used in config and output, e.g. `select_star_external`.
    pub name: &'static str,
    /// One line: what the rule finds.
    pub summary: &'static str,
}

/// Every rule, in the order `check` reports them for a model.
pub const RULES: &[Rule] = &[
    Rule {
        name: "missing_grain",
        summary: "a time-range or partition model declares no row-identity `grain` (the columns that identify a row; a unique-key model's key is its grain)",
    },
    Rule { name: "select_star_external", summary: "`SELECT *` over an external model: the output follows whatever columns the source has" },
    Rule { name: "ambiguous_column", summary: "an unqualified column that several relations in scope have" },
    Rule { name: "time_filter_column", summary: "a time-range model's `@start`/`@end` filter is on a column other than what its time column is computed from" },
    Rule { name: "batch_rescan", summary: "a time-range model's `@start`/`@end` filter cannot reach the scan of what it reads: every batch reads all of it" },
    Rule {
        name: "unknown_type",
        summary: "a declared column type the engine does not know (DuckDB: none of its built-in types; run by `check`, which sees no database, so a type created there with `CREATE TYPE` is a false finding)",
    },
    Rule {
        name: "missing_source_file",
        summary: "an external whose local file or glob matches no file, which `apply` would stop at (a URL such as `s3://…` is never looked for; run by `check`)",
    },
];

/// The rule called `name`, if any.
pub fn rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.name == name)
}

/// The rule names, for "did you mean" hints.
pub fn rule_names() -> impl Iterator<Item = &'static str> {
    RULES.iter().map(|r| r.name)
}

/// One finding of a rule on a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lint {
    /// The rule's name ([`RULES`]).
    pub rule: &'static str,
    /// The model at fault.
    pub model: ModelName,
    /// Where it is defined.
    pub location: Location,
    /// What is wrong, without the model's name.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
    /// Line and column in the rendered query, when the finding has a position.
    pub sql_position: Option<(u64, Option<u64>)>,
    /// Rule-specific facts for `--json` (e.g. `parent`, `column`), in order.
    pub facts: Vec<(&'static str, String)>,
}

impl Lint {
    /// A finding of `rule` on `model`, at the model's definition.
    pub fn new(rule: &'static str, model: &Model, message: String) -> Self {
        Lint { rule, model: model.name.clone(), location: model.location.clone(), message, hint: None, sql_position: None, facts: Vec::new() }
    }

    /// With a `hint:` line.
    pub fn hint(mut self, hint: String) -> Self {
        self.hint = Some(hint);
        self
    }

    /// With a fact for `--json`.
    pub fn fact(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.facts.push((key, value.into()));
        self
    }
}

/// Runs every rule on `model`; `analysis` is its query's ([`lineage::analyze_in`] against its
/// parents' declared columns), `None` when it has no query or sqlparser cannot read it.
pub fn lint_model(dag: &Dag, model: &Model, analysis: Option<&lineage::Analysis>) -> Vec<Lint> {
    let mut out = Vec::new();
    missing_grain(model, &mut out);
    if let Some(a) = analysis {
        select_star_external(dag, model, &a.lineage, &mut out);
        for p in &a.ambiguous {
            let mut lint = Lint::new("ambiguous_column", model, p.detail.clone()).fact("column", p.column.clone());
            lint.sql_position = p.line.map(|l| (l, p.col));
            out.push(lint.hint("qualify the column with its relation's alias, so the query reads the relation you mean".into()));
        }
        time_filter_column(dag, model, &a.lineage, &mut out);
    }
    for rescan in super::pushdown::batch_rescans(dag, model) {
        out.push(batch_rescan(dag, model, rescan));
    }
    out
}

fn missing_grain(model: &Model, out: &mut Vec<Lint>) {
    if !model.grain.is_empty() {
        return;
    }
    let example = match &model.kind {
        Kind::IncrementalByTimeRange(t) => format!("`{}` and the columns that tell its rows apart", t.time_column),
        // Its key identifies a row: `diff --data` keys on it when no grain is declared.
        Kind::IncrementalByUniqueKey(_) => return,
        Kind::IncrementalByPartition(p) => {
            format!("{} and the columns that tell a partition's rows apart", p.partitioned_by.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "))
        }
        _ => return,
    };
    out.push(
        Lint::new(
            "missing_grain",
            model,
            format!(
                "no row-identity `grain` (the columns that identify a row) on this `{}` model: `efmesh diff --data` keys on it{}",
                model.kind.tag(),
                // Not the kind's interval `grain = "day"`, which says how time is cut.
                if matches!(model.kind, Kind::IncrementalByTimeRange(_)) { "; the kind's `grain` (its interval unit) is another setting" } else { "" }
            ),
        )
        .hint(format!("declare the columns that identify a row, e.g. {example}")),
    );
}

fn select_star_external(dag: &Dag, model: &Model, l: &lineage::QueryLineage, out: &mut Vec<Lint>) {
    for parent in &l.whole {
        let Some(p) = ModelName::parse(parent).ok().and_then(|n| dag.get(&n)) else { continue };
        if !matches!(p.kind, Kind::External(_)) {
            continue;
        }
        out.push(
            Lint::new(
                "select_star_external",
                model,
                format!("`SELECT *` reads every column of external `{}` ({}): the model's output follows whatever columns the source has", p.name, p.location),
            )
            .hint(format!("list the columns `{}` needs from `{}`", model.name, p.name))
            .fact("parent", p.name.to_string()),
        );
    }
}

fn time_filter_column(dag: &Dag, model: &Model, l: &lineage::QueryLineage, out: &mut Vec<Lint>) {
    let Kind::IncrementalByTimeRange(t) = &model.kind else { return };
    let Some(time) = l.columns.iter().find(|c| c.column.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(&t.time_column))) else { return };
    // Only when the time column's origin is fully known: otherwise the filter may be on it.
    if !time.certain || time.sources.is_empty() {
        return;
    }
    let mut seen: Vec<(ModelName, String)> = Vec::new();
    for (parent, column) in super::pushdown::bound_filters(dag, model) {
        if seen.iter().any(|(p, c)| *p == parent && c.eq_ignore_ascii_case(&column)) {
            continue;
        }
        seen.push((parent.clone(), column.clone()));
        let feeds = time.sources.iter().any(|s| s.model.eq_ignore_ascii_case(&parent.to_string()) && s.column.eq_ignore_ascii_case(&column));
        if feeds {
            continue;
        }
        let from = time.sources.iter().map(|s| format!("`{}.{}`", s.model, s.column)).collect::<Vec<_>>().join(", ");
        out.push(
            Lint::new(
                "time_filter_column",
                model,
                format!(
                    "the `@start`/`@end` filter is on `{parent}.{column}`, but the time column `{}` comes from {from}: a batch would select rows by another column than the one its interval is recorded on",
                    t.time_column
                ),
            )
            .hint(format!("filter on the column `{}` is computed from ({from}) with `@start`/`@end`", t.time_column))
            .fact("parent", parent.to_string())
            .fact("column", column),
        );
    }
}

fn batch_rescan(dag: &Dag, model: &Model, rescan: super::pushdown::BatchRescan) -> Lint {
    let culprit = dag.get(&rescan.culprit);
    let what = culprit.map_or("model", |m| m.kind.tag());
    let at = culprit.map(|m| format!(" ({})", m.location)).unwrap_or_default();
    let stops = if rescan.culprit == rescan.parent { "its scan".to_string() } else { format!("the scan of `{}`", rescan.culprit) };
    let message = format!(
        "every batch reads all of `{}`: the `@start`/`@end` filter on its column `{}` cannot reach {stops}: {what} `{}`{at}: {}",
        rescan.parent, rescan.column, rescan.culprit, rescan.reason
    );
    let hint = match culprit.map(|m| &m.kind) {
        Some(Kind::External(_)) => format!(
            "load the file once into a table (a `full` or `incremental_by_unique_key` model reading `{}`) and read that in `{}`, or store it as parquet; \
             a `full` one needs a `cron` (e.g. {}) for `run` to re-read the file (efmesh does not watch it; an `incremental_by_unique_key` one re-reads it at every `run`)",
            rescan.culprit,
            model.name,
            // Spelled in the language of the model warned about, where the staging table replaces the read.
            model.cron_example()
        ),
        _ => format!(
            "materialise `{}` once as a table (kind `full`, `incremental_by_unique_key` or `incremental_by_time_range`), so each batch of `{}` reads only its rows",
            rescan.culprit, model.name
        ),
    };
    Lint::new("batch_rescan", model, message)
        .hint(hint)
        .fact("parent", rescan.parent.to_string())
        .fact("column", rescan.column)
        .fact("culprit", rescan.culprit.to_string())
}
