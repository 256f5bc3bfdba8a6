//! `efmesh run <env>`: one refresh tick of an environment (see [`crate::apply::run`]).

use super::printer::Printer;
use super::{Exit, applied_by, load, open_state, writable_state};
use crate::apply::run::{RunOutcome, run as run_env};
use crate::core::interval::{Millis, to_iso};
use crate::engine::duckdb::DuckDb;
use crate::plan;
use anyhow::Result;
use serde_json::json;

/// Plans `env`; refuses (exit 2, listing the changes) when the project differs from it; else
/// refreshes its unique-key and SCD type 2 models and computes missing intervals.
pub(super) fn run(config: &std::path::Path, env: &str, json: bool, now: Millis, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    let state = open_state(&project, false)?;
    let plan = super::plan_checked(&project, &state, env, now, &plan::Options::default())?;
    let blocked = crate::apply::run::blocked_by(&plan);
    if !blocked.is_empty() {
        if json {
            out.json(json!({"env": env, "outcome": "awaiting-human", "now": to_iso(now), "processed": [], "intervals": 0, "blockedBy": blocked}))?;
        }
        let lines: Vec<String> = blocked.iter().map(|b| format!("  {b}")).collect();
        eprintln!(
            "run `{env}`: the project differs from what the environment serves; apply needed:\n{}\n  hint: review and apply with `efmesh apply {env}`, then run again",
            lines.join("\n")
        );
        return Ok(Exit::AwaitingHuman);
    }
    let state = writable_state(&project, state)?;
    let mut engine = DuckDb::open(&project.config.engine_path(), &project.config.engine)?;
    let report = match run_env(&project, &plan, &state, &mut engine, &applied_by())? {
        RunOutcome::Ran(r) => r,
        RunOutcome::Blocked(_) => unreachable!("checked above with the same plan"),
    };
    let processed: Vec<String> = report.built.iter().map(ToString::to_string).collect();
    if json {
        out.json(json!({"env": env, "outcome": "ok", "now": to_iso(now), "processed": processed, "intervals": report.intervals}))?;
    } else if processed.is_empty() {
        out.text(&format!("run `{env}`: nothing to refresh\n"))?;
    } else {
        let intervals = if report.intervals > 0 { format!(" ({} intervals computed)", report.intervals) } else { String::new() };
        out.text(&format!("run `{env}`: processed {}{intervals}\n", processed.join(", ")))?;
    }
    Ok(Exit::Success)
}
