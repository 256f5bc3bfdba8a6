//! `efmesh render <model> --interval FROM TO [--env E] [--json]`: the statements apply runs to
//! compute that interval of an incremental_by_time_range model, batch by batch, with literal
//! bounds, against the physical tables of the versions the environment's plan leads to (the
//! versions it serves when the project does not differ from it). Rendered by
//! [`crate::apply::batch`], the code apply executes. Reads the state and the engine's catalog;
//! changes nothing.

use super::printer::Printer;
use super::restate::aligned;
use super::{Exit, UsageError, load, open_state};
use crate::apply::batch::{self, BatchWrite};
use crate::apply::resolve::{ExecResolver, Mode};
use crate::core::interval::{self, Interval, Millis, parse_instant, to_iso};
use crate::core::{Kind, ModelName, Target};
use crate::plan::Change;
use anyhow::{Result, anyhow, bail};
use serde_json::json;
use std::collections::BTreeMap;

/// The environment rendered against when `--env` is not given.
const DEFAULT_ENV: &str = "prod";

/// The request.
pub(super) struct Request<'a> {
    pub model: &'a str,
    pub env: Option<&'a str>,
    /// `--interval FROM TO` as typed (clap guarantees two values).
    pub bounds: &'a [String],
    pub json: bool,
    /// The instant the environment's plan is computed at (`--now`).
    pub now: Millis,
}

/// What apply does instead for a model of a kind without intervals.
fn without_intervals(kind: &Kind) -> &'static str {
    match kind {
        Kind::Full => "apply rebuilds the whole table from its query (`CREATE OR REPLACE TABLE … AS`)",
        Kind::View => "apply replaces the view with its query",
        Kind::Embedded => "it is inlined into the models that read it; nothing is built",
        Kind::External(_) => "it is read from its source; nothing is built",
        Kind::Seed(_) => "apply loads the rows of its file into a table",
        Kind::IncrementalByUniqueKey(_) => "apply and run upsert the query's rows by its key",
        Kind::ScdType2(_) => "apply and run record the changes of its source in its history",
        Kind::IncrementalByPartition(_) => "apply and run replace the partitions present in the query's output",
        Kind::IncrementalByTimeRange(_) => "",
    }
}

/// Renders the batches of the interval.
pub(super) fn interval(config: &std::path::Path, req: Request<'_>, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    let env = req.env.unwrap_or(DEFAULT_ENV);
    crate::core::name::validate_env(env)?;
    let name = ModelName::parse(req.model)?;
    let Some(model) = project.dag.get(&name) else {
        let hint = project.dag.suggest(req.model).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
        bail!(UsageError(format!("unknown model `{}`{hint}", req.model)));
    };
    // What `--interval` cannot render is a command line refused (`--json` kind `usage`).
    let (Kind::IncrementalByTimeRange(t), Some(body)) = (&model.kind, &model.body) else {
        bail!(UsageError(format!(
            "--interval: `{name}` is {} {} model, which has no intervals ({})\n  hint: `efmesh render {name} --env {env}` prints its query",
            if model.kind.tag().starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" },
            model.kind.tag(),
            without_intervals(&model.kind)
        )));
    };
    if model.target == Target::Parquet {
        bail!(UsageError(format!(
            "--interval: `{name}` is stored as parquet files (target = parquet): apply writes each interval to its own file, not with DELETE and INSERT; --interval renders table targets"
        )));
    }
    let [from_text, to_text] = req.bounds else { bail!(UsageError("--interval takes two values: FROM TO".to_string())) };
    let from = parse_instant(from_text).map_err(|e| anyhow!(UsageError(format!("--interval FROM: {e}"))))?;
    let to = parse_instant(to_text).map_err(|e| anyhow!(UsageError(format!("--interval TO: {e}"))))?;
    aligned("interval", from_text, from, t.grain, req.model)?;
    aligned("interval", to_text, to, t.grain, req.model)?;
    if from >= to {
        bail!(UsageError(format!("--interval: FROM {from_text} must be before TO {to_text}")));
    }
    if from < t.start {
        bail!(UsageError(format!("--interval: `{name}` starts at {}: apply computes no interval before it (FROM is {from_text})", to_iso(t.start))));
    }
    if let Some(end) = t.end.filter(|e| to > *e) {
        bail!(UsageError(format!("--interval: `{name}` ends at {}: apply computes no interval after it (TO is {to_text})", to_iso(end))));
    }

    // The versions the environment's plan leads to: what it serves when the project does not
    // differ from it, else what apply would build. References resolve to their tables exactly
    // as apply resolves them.
    let state = open_state(&project, false)?;
    let served = state.env_pointers(env)?.get(&name.to_string()).cloned();
    let plan = super::plan_checked(&project, &*state, env, req.now, &crate::plan::Options::default())?;
    let physicals: BTreeMap<ModelName, String> =
        plan.actions.iter().filter(|a| a.change != Change::Removed).filter_map(|a| a.physical.clone().map(|p| (a.name.clone(), p))).collect();
    let action = plan.actions.iter().find(|a| a.name == name).ok_or_else(|| anyhow!("the plan of `{env}` has no action for `{name}`"))?;
    let physical = action.physical.clone().ok_or_else(|| anyhow!("the plan of `{env}` gives `{name}` no physical table"))?;
    let fingerprint = action.fingerprint.as_str().to_string();
    let is_served = served.as_deref() == Some(fingerprint.as_str());
    // A table the engine does not hold is created by the first batch that computes it; a
    // catalog that cannot be read counts as holding it (as the plan assumes).
    // A model reading itself (`@this`) has its table created empty before its first batch.
    // So does a model with pre-statements (they may name the table).
    let absent = crate::session::engine_catalog(&project)?.is_some_and(|c| batch::table_absent(&physical, &c)) && batch::may_create_with_first(model, body);
    let batch_size = batch::batch_size(model, t);

    let exec = ExecResolver::new(&project, &physicals, Mode::Execute);
    let dialect = crate::engine::dialect_for(&project.config);
    let batches = interval::batches(&[Interval::new(from, to)], t.grain, batch_size);
    let before: Vec<String> = if absent { Vec::new() } else { vec![batch::ensure_table(model, body, &physical, &exec, dialect)] };
    let rendered: Vec<(Interval, BatchWrite, Vec<String>)> = batches
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            let write = BatchWrite::of(absent, i);
            (b, write, batch::statements(model, t, body, &physical, b, &exec, dialect, write))
        })
        .collect();

    let version = if is_served { "served" } else { "planned" };
    let why = match (&served, is_served) {
        (_, true) => format!("the version environment `{env}` serves"),
        (Some(old), false) => format!(
            "the version apply would build: `{env}` serves @{}, the project's version differs",
            crate::sql::fingerprint::Fingerprint::parse(old).map(|f| f.short().to_string()).unwrap_or_else(|_| old.clone())
        ),
        (None, false) => format!("the version apply would build: `{env}` does not serve `{name}` yet"),
    };
    let script: Vec<String> = before.iter().chain(rendered.iter().flat_map(|(_, _, s)| s)).cloned().collect();
    if req.json {
        out.json(json!({
            "model": name.to_string(),
            "env": env,
            "sql": script.iter().map(|s| format!("{s};")).collect::<Vec<_>>().join("\n\n"),
            "interval": {"from": to_iso(from), "to": to_iso(to)},
            "physical": physical,
            "fingerprint": fingerprint,
            "version": version,
            "servedFingerprint": served,
            "tableExists": !absent,
            "grain": t.grain.as_str(),
            "batchSize": batch_size,
            "before": before,
            "batches": rendered.iter().map(|(b, w, s)| json!({"from": to_iso(b.start), "to": to_iso(b.end), "write": w.as_str(), "statements": s})).collect::<Vec<_>>(),
        }))?;
        return Ok(Exit::Success);
    }
    let mut text = format!("-- {name} in environment `{env}`: {why}\n-- table {physical} (@{})\n", action.fingerprint.short());
    text.push_str(&format!(
        "-- interval [{}, {}): {} batch{} of up to {} {}{} (batch_size {})\n",
        to_iso(from),
        to_iso(to),
        rendered.len(),
        if rendered.len() == 1 { "" } else { "es" },
        batch_size,
        t.grain.as_str(),
        if batch_size == 1 { "" } else { "s" },
        batch_size
    ));
    if absent {
        text.push_str(
            "-- the table does not exist yet: the first batch apply computes creates it (here the first of this interval; a backfill starting earlier creates it there, and these batches are INSERT only)\n",
        );
    } else {
        text.push_str("-- before the batches (a no-op when the table exists):\n");
        for s in &before {
            text.push_str(&format!("{s};\n"));
        }
    }
    for (i, (b, _, statements)) in rendered.iter().enumerate() {
        text.push_str(&format!("\n-- batch {}/{} [{}, {}), one transaction\n", i + 1, rendered.len(), to_iso(b.start), to_iso(b.end)));
        for s in statements {
            text.push_str(&format!("{s};\n"));
        }
    }
    out.text(&text)?;
    Ok(Exit::Success)
}
