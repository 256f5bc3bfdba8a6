//! `efmesh audit <env>`: runs the project's audits against what an environment serves now.

use super::printer::Printer;
use super::{Exit, UsageError, load, open_state};
use crate::apply::audit::{AuditResult, audit_environment};
use crate::core::ModelName;
use anyhow::{Result, anyhow};
use serde_json::json;
use std::collections::BTreeSet;

/// Runs the command: every audit runs; exit 1 at the end when a blocking audit found violating
/// rows or an audit's SQL could not run (each such audit is reported with the engine's message
/// and its `file:line`). An audit that would inline an embedded model or an external whose
/// project definition differs from the version `env` serves (or does not parse, so cannot be
/// compared) is not run, and exits 1 too: the command cannot vouch for what the environment
/// serves ([`crate::apply::audit::unserved_definitions`]). Only those models' bodies are
/// parsed: another model's broken SQL does not stop the audits.
///
/// The audits are the project's: a model `env` serves that the project no longer defines (removed,
/// and the removal not applied) has none to run. The report names those whose served metadata
/// records audits, with how many, and says their audits were not run ([`undefined_audited`]);
/// they do not change the exit code, as the project's models `env` does not serve do not.
///
/// # Errors
/// Load errors, an unknown environment or model, an engine database older than the state store
/// ([`crate::plan::PlanError::EngineBehind`]).
pub(super) fn run(config: &std::path::Path, env: &str, models: &str, json: bool, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    crate::core::name::validate_env(env)?;
    let mut only = BTreeSet::new();
    for m in models.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let name = ModelName::parse(m).map_err(|e| anyhow!("--model: {e}"))?;
        if project.dag.get(&name).is_none() {
            let hint = project.dag.suggest(m).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
            return Err(anyhow!(UsageError(format!("--model: unknown model `{m}`{hint}"))));
        }
        only.insert(name);
    }
    let state = open_state(&project, false)?;
    let pointers = state.env_pointers(env)?;
    let served: BTreeSet<String> = pointers.keys().cloned().collect();
    if served.is_empty() {
        // One the janitor dropped is said so, as `status` and `diff` say it.
        if let Some(at) = super::envlife::dropped_at(&*state, env)? {
            return Err(anyhow!(UsageError(format!(
                "environment `{env}` {}: it serves nothing to audit\n  hint: `efmesh apply {env}` creates it again",
                super::envlife::dropped_phrase(&at)
            ))));
        }
        // A typo of an existing environment's name is said so, as `status` and `run` say it.
        let known = state.environments()?;
        let hint = match crate::core::error::did_you_mean(env, known.iter().map(String::as_str)) {
            Some(like) => format!("did you mean `{like}`? (`efmesh apply {env}` would create `{env}`)"),
            None => format!("run `efmesh apply {env}` first"),
        };
        return Err(anyhow!(UsageError(format!("environment `{env}` does not exist (nothing was applied to it)\n  hint: {hint}"))));
    }
    // Embedded models and externals render from the project's definitions: one edited and not
    // applied is not what the environment serves, and the audits inlining it do not run (nor
    // those inlining one whose SQL does not parse: it cannot be compared).
    let inlined = crate::apply::audit::inlined_by_audits(&project, &served, &only);
    let differs = crate::apply::audit::unserved_definitions(&project, &*state, &pointers, &inlined)?;
    let mut engine = crate::engine::open(&project.config, crate::engine::Access::ReadWrite)?;
    // An engine database older than the state store (a backup restored after later runs) would
    // have its stale rows audited as the environment's: refused as the plan refuses it (SPEC §4,
    // invariant 63).
    // The store's epoch before the catalog (`plan::integrity::Observed`).
    let epoch = state.engine_epoch()?;
    let catalog = engine.catalog()?;
    if let Some(message) = crate::plan::integrity::engine_behind(&project.config, &*state, epoch, &catalog)? {
        return Err(crate::plan::PlanError::EngineBehind(message).into());
    }
    // Views over lake files (S3 credentials) and DuckLake tables (the attached catalog) bind only
    // once the targets are prepared, as apply does.
    crate::apply::lake::prepare(&project, &mut *engine)?;
    crate::apply::ducklake::prepare(&project, &mut *engine)?;
    let results = audit_environment(&project, env, &served, &only, &differs, &mut *engine);
    // `--model` names project models only: a removed one is never selected.
    let undefined = if only.is_empty() { undefined_audited(&project, &*state, env, &served)? } else { Vec::new() };
    let skipped: Vec<String> = project
        .dag
        .models()
        .filter(|m| !m.audits.is_empty() && !served.contains(&m.name.to_string()) && (only.is_empty() || only.contains(&m.name)))
        .map(|m| m.name.to_string())
        .collect();
    let blocking: u64 = results.iter().filter(|r| r.blocking).map(|r| r.violations).sum();
    let warn: u64 = results.iter().filter(|r| !r.blocking).map(|r| r.violations).sum();
    let errors = results.iter().filter(|r| r.error.is_some()).count();
    let not_run = results.iter().filter(|r| r.not_run.is_some()).count();
    if json {
        out.json(json!({
            "env": env,
            "results": results,
            "blockingViolations": blocking,
            "warnViolations": warn,
            "errors": errors,
            "notRun": not_run,
            "notServed": skipped,
            "notInProject": undefined.iter().map(|(model, audits)| json!({"model": model, "audits": audits})).collect::<Vec<_>>(),
        }))?;
    } else {
        out.text(&report_text(env, &results, &skipped, &undefined))?;
    }
    if blocking > 0 || errors > 0 || not_run > 0 {
        let mut parts = Vec::new();
        if blocking > 0 {
            parts.push(format!("{blocking} blocking audit violation{}", if blocking == 1 { "" } else { "s" }));
        }
        if errors > 0 {
            parts.push(format!("{errors} audit{} could not run", if errors == 1 { "" } else { "s" }));
        }
        if not_run > 0 {
            parts.push(format!("{not_run} audit{} not run", if not_run == 1 { "" } else { "s" }));
        }
        crate::ewriteln!("error: environment `{env}`: {}", parts.join(", "));
        let line = |r: &AuditResult, what: &str, why: &str| {
            crate::ewriteln!("  {}: audit `{}` on model `{}` {what}: {why}", r.location.as_deref().unwrap_or("?"), r.audit, r.model);
        };
        for r in results.iter() {
            if let Some(e) = &r.error {
                line(r, "could not run", e);
            }
        }
        for r in results.iter() {
            if let Some(n) = &r.not_run {
                line(r, "not run", n);
            }
        }
        return Ok(Exit::Error);
    }
    Ok(Exit::Success)
}

/// The models `env` serves that the project does not define, each with the number of audits its
/// served metadata records ([`crate::state::StateStore::env_metadata`]), for those recording
/// any: `efmesh audit` runs the project's audits, so theirs are not run, and the report says so
/// rather than "nothing to check". Sorted by name.
///
/// # Errors
/// The state store read fails.
fn undefined_audited(
    project: &crate::project::Project,
    state: &dyn crate::state::StateStore,
    env: &str,
    served: &BTreeSet<String>,
) -> Result<Vec<(String, usize)>> {
    let gone: Vec<&String> = served.iter().filter(|n| !ModelName::parse(n).is_ok_and(|m| project.dag.get(&m).is_some())).collect();
    if gone.is_empty() {
        return Ok(Vec::new());
    }
    let metadata = state.env_metadata(env)?;
    Ok(gone
        .into_iter()
        .filter_map(|name| {
            let meta: serde_json::Value = serde_json::from_str(metadata.get(name)?).ok()?;
            let audits = meta.get("audits").and_then(serde_json::Value::as_array).map_or(0, Vec::len);
            (audits > 0).then(|| (name.clone(), audits))
        })
        .collect())
}

/// The text report: each audit run, then the audited models `env` does not serve (`skipped`,
/// `notServed` in `--json`) and those it serves that the project no longer defines. With no
/// audit to run, the models not served are still named: they are why nothing ran.
fn report_text(env: &str, results: &[AuditResult], skipped: &[String], undefined: &[(String, usize)]) -> String {
    if results.is_empty() && undefined.is_empty() {
        if skipped.is_empty() {
            return format!("no audits in environment `{env}`: nothing to check\n");
        }
        let width = skipped.iter().map(String::len).max().unwrap_or(0);
        let mut s = format!("no audits run in environment `{env}`: it serves none of the audited models\n");
        for m in skipped {
            s.push_str(&format!("  · {m:width$}  not served by `{env}`\n"));
        }
        return s;
    }
    let width = results.iter().map(|r| r.model.to_string().len()).chain(undefined.iter().map(|(m, _)| m.len())).max().unwrap_or(0);
    let mut s = format!("audits of environment `{env}`\n");
    for r in results {
        let (mark, tail) = match (r.violations, r.blocking) {
            _ if r.not_run.is_some() => ('✗', format!("  not run: {}", r.not_run.as_deref().unwrap_or_default())),
            _ if r.error.is_some() => {
                ('✗', format!("  could not run ({}): {}", r.location.as_deref().unwrap_or("?"), r.error.as_deref().unwrap_or_default().trim_end()))
            }
            (0, _) => ('✓', String::new()),
            (n, true) => ('✗', format!("  {n} violating row{}", if n == 1 { "" } else { "s" })),
            (n, false) => ('⚠', format!("  {n} violating row{} (warn)", if n == 1 { "" } else { "s" })),
        };
        s.push_str(&format!("  {mark} {:width$}  {}{tail}\n", r.model.to_string(), r.audit));
        for row in &r.sample {
            s.push_str(&format!("      {row}\n"));
        }
        let more = r.violations.saturating_sub(r.sample.len() as u64);
        if more > 0 && !r.sample.is_empty() {
            s.push_str(&format!("      … and {more} more\n"));
        }
    }
    for m in skipped {
        s.push_str(&format!("  · {m:width$}  not served by `{env}`\n"));
    }
    let plural = |n: usize, one: &'static str, many: &'static str| if n == 1 { one } else { many };
    for (m, n) in undefined {
        s.push_str(&format!("  · {m:width$}  served by `{env}`, no longer in the project: {n} recorded audit{} not run\n", plural(*n, "", "s")));
    }
    let not_run = results.iter().filter(|r| r.not_run.is_some()).count();
    let ran = results.len() - not_run;
    let failed = results.iter().filter(|r| r.failed() && r.not_run.is_none()).count();
    let warned = results.iter().filter(|r| !r.failed() && !r.blocking && r.violations > 0).count();
    s.push_str(&format!("{ran} audit{} run: {} passed, {failed} failed, {warned} warned", if ran == 1 { "" } else { "s" }, ran - failed - warned));
    if not_run > 0 {
        s.push_str(&format!("; {not_run} not run: what they read differs in the project from what `{env}` serves, or does not parse"));
    }
    s.push('\n');
    if !undefined.is_empty() {
        let models = undefined.iter().map(|(m, _)| format!("`{m}`")).collect::<Vec<_>>().join(", ");
        let audits: usize = undefined.iter().map(|(_, n)| n).sum();
        let (count, them) = (undefined.len(), plural(undefined.len(), "it", "them"));
        s.push_str(&format!(
            "warning: `{env}` serves {count} audited model{} the project no longer defines ({models}): {} {audits} recorded audit{} not run, \
             as `efmesh audit` runs the project's audits; `efmesh apply {env}` stops serving {them} (or restore {})\n",
            plural(count, "", "s"),
            plural(count, "its", "their"),
            plural(audits, " was", "s were"),
            plural(count, "its definition", "their definitions"),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::report_text;

    /// With no audit run, the audited models the environment does not serve are named (as
    /// `notServed` in `--json`): they are why nothing ran, not "nothing to check".
    #[test]
    fn a_report_with_no_audit_run_names_the_audited_models_not_served() {
        let text = report_text("prod", &[], &["mart.daily_revenue".to_string(), "s.t".to_string()], &[]);
        assert_eq!(
            text,
            "no audits run in environment `prod`: it serves none of the audited models\n  · mart.daily_revenue  not served by `prod`\n  · s.t                 not served by `prod`\n"
        );
        assert_eq!(report_text("prod", &[], &[], &[]), "no audits in environment `prod`: nothing to check\n");
    }
}
