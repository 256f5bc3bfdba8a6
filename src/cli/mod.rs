//! The command-line interface: a thin layer over the library. Commands return an [`Exit`];
//! `main` maps it to the process exit code. Reports go to stdout, logs to stderr.

pub mod args;
mod audit;
mod check;
mod completions;
mod diff;
mod envlife;
mod graph;
mod init;
mod janitor;
mod lineage;
mod lock;
pub mod logging;
mod migrate;
mod preview;
mod printer;
mod render;
mod restate;
mod run;
mod schedule;
mod status;
mod test;
mod watch;

use crate::apply::{self, ApplyReport};
use crate::core::interval::{self, Millis};
use crate::core::{LoadErrors, ModelName};
use crate::plan::{self, Plan};
use crate::project::Project;
use anyhow::{Result, anyhow};
use args::{Args, Command};
use printer::Printer;
use serde_json::json;
use std::io::{BufRead, IsTerminal, Write};

/// How a command ended (the frozen exit-code contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done.
    Success,
    /// 1: an error (reported on stderr).
    Error,
    /// 2: awaiting a human (apply with changes, no `--yes`, stdin not a TTY).
    AwaitingHuman,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Error => 1,
            Exit::AwaitingHuman => 2,
        }
    }
}

/// An error already explained on stderr in full (e.g. a list of load errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Reported(pub String);

/// The `hint:` line for an error anywhere in `err`'s cause chain, when one helps.
pub fn hint_for(err: &anyhow::Error) -> Option<String> {
    if let Some(h) = err.chain().find_map(|e| e.downcast_ref::<crate::config::ConfigError>().and_then(|c| c.hint())) {
        return Some(h.to_string());
    }
    err.chain().find_map(|e| {
        let state = e
            .downcast_ref::<crate::state::StateError>()
            .or_else(|| match e.downcast_ref::<crate::plan::PlanError>() {
                Some(crate::plan::PlanError::State(s)) => Some(s),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<crate::apply::ApplyError>() {
                Some(crate::apply::ApplyError::State(s)) => Some(s),
                // The first failure of a parallel apply that carries a hint.
                Some(crate::apply::ApplyError::Several(all) | crate::apply::ApplyError::SeveralInRun(all)) => all.iter().find_map(|a| match a {
                    crate::apply::ApplyError::State(s) if s.hint().is_some() => Some(s),
                    _ => None,
                }),
                _ => None,
            });
        state.and_then(|s| s.hint()).map(str::to_string)
    })
}

/// The message `main` prints after `error: ` (before the hint): the error, then each cause not
/// already part of the text before it, so nothing is printed twice.
pub fn error_text(err: &anyhow::Error) -> String {
    let mut msg = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !msg.contains(&cause) {
            msg.push_str(&format!("\n  caused by: {cause}"));
        }
    }
    msg
}

/// The `--json` error kind of an apply failure; several failures (`--jobs`) of one kind have
/// that kind, of different kinds `several`.
fn apply_error_kind(a: &crate::apply::ApplyError) -> &'static str {
    use crate::apply::ApplyError;
    match a {
        ApplyError::Contract(_) => "contract",
        ApplyError::Build { .. } => "build",
        ApplyError::Rejected { .. } => "rejected",
        ApplyError::Target { .. } => "target",
        ApplyError::EngineFeature { .. } => "engine-feature",
        ApplyError::Audit { .. }
        | ApplyError::RunAudit { .. }
        | ApplyError::SharedAudit { .. }
        | ApplyError::SourceAudit { .. }
        | ApplyError::ReadAudit { .. } => "audit",
        ApplyError::StalePlan { .. } => "stale-plan",
        ApplyError::EngineBehind(_) => "engine-behind",
        ApplyError::LockLostAfterSwap(_) | ApplyError::PromotionUnsettled(_) => "state",
        ApplyError::ForeignViews(_) => "foreign-views",
        ApplyError::Engine(e) if e.is_writer_busy() => "engine-locked",
        ApplyError::Engine(_) => "engine",
        ApplyError::State(s) if s.is_reclaimed() => "reclaimed",
        ApplyError::State(_) => "state",
        ApplyError::Several(all) | ApplyError::SeveralInRun(all) => {
            let kinds: std::collections::BTreeSet<&str> = all.iter().map(apply_error_kind).collect();
            // A lost lease says what to do next whatever else failed.
            if kinds.contains("reclaimed") {
                return "reclaimed";
            }
            match kinds.len() {
                1 => kinds.into_iter().next().unwrap_or("several"),
                _ => "several",
            }
        }
        _ => "apply",
    }
}

/// What kind of failure `err` is, for the `--json` error object: `config`, `load`, `plan`,
/// `contract`, `build`, `rejected`, `target`, `audit`, `stale-plan`, `engine-behind`,
/// `foreign-views`, `state`, `engine`, `engine-locked` (another process is writing the engine's
/// database), `usage`, `several` (failures of different kinds in a parallel apply), or `error`
/// when none applies.
pub fn error_kind(err: &anyhow::Error) -> &'static str {
    use crate::apply::ApplyError;
    for e in err.chain() {
        if e.is::<crate::config::ConfigError>() {
            return "config";
        }
        if e.is::<Reported>() || e.is::<LoadErrors>() {
            return "load";
        }
        if e.is::<lock::LockHeld>() {
            return "lock-held";
        }
        if let Some(a) = e.downcast_ref::<ApplyError>() {
            return apply_error_kind(a);
        }
        if let Some(p) = e.downcast_ref::<crate::plan::PlanError>() {
            return match p {
                crate::plan::PlanError::State(_) => "state",
                // A flag's model unknown or refused (`--forward-only`, `--reclassify`,
                // `--reset-history`): the command line's fault.
                crate::plan::PlanError::Env(_) | crate::plan::PlanError::Operator(_) => "usage",
                crate::plan::PlanError::EngineFeature { .. } => "engine-feature",
                crate::plan::PlanError::EngineBehind(_) => "engine-behind",
                _ => "plan",
            };
        }
        if e.downcast_ref::<crate::state::StateError>().is_some_and(crate::state::StateError::is_reclaimed) {
            return "reclaimed";
        }
        if e.is::<crate::state::StateError>() {
            return "state";
        }
        if let Some(engine) = e.downcast_ref::<crate::engine::EngineError>() {
            return if engine.is_writer_busy() { "engine-locked" } else { "engine" };
        }
        // (`init` and `completions` refuse a flag with a `UsageError` and take no `--json`; the
        // commands naming a model or environment that does not exist refuse it with one too.)
        if e.is::<crate::core::name::NameError>() || e.is::<crate::core::select::SelectError>() || e.is::<UsageError>() {
            return "usage";
        }
    }
    // A command that words the engine's failure to open its database itself (`diff --data`
    // reads it read-only) still says when another process is writing it.
    if err.chain().any(|e| crate::engine::is_locked_file(&e.to_string())) {
        return "engine-locked";
    }
    "error"
}

/// A command line clap refuses, as the `--json` error's message and hint: its first paragraph
/// (`invalid value '0' for '--jobs <N>': …`), and what follows it (`For more information, try
/// '--help'.`, a usage line) as the hint.
pub fn clap_message(text: &str) -> (String, Option<String>) {
    let text = text.trim_end();
    let text = text.strip_prefix("error: ").unwrap_or(text);
    match text.split_once("\n\n") {
        Some((message, rest)) => (message.trim_end().to_string(), Some(rest.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|h| !h.is_empty())),
        None => (text.to_string(), None),
    }
}

/// The `--json` report of a failed command (stdout, one object): `{"apiVersion": 1, "error":
/// {"kind", "message", "hint"?}}`, `message` being what stderr says after `error: `.
/// A hint the message carries itself (`…\n  hint: …`, as stderr prints it) becomes `hint`.
pub fn error_json(kind: &str, message: &str, hint: Option<&str>) -> serde_json::Value {
    let (message, hint) = split_hint(message, hint);
    let mut error = serde_json::Map::new();
    error.insert("kind".into(), kind.into());
    error.insert("message".into(), message.into());
    if let Some(h) = hint {
        error.insert("hint".into(), h.into());
    }
    json!({ "error": error })
}

/// An error's message and hint apart, for JSON: `hint` when given, else the one the message
/// carries on its own line (`\n  hint: …`, as the text output prints it), cut from the message.
/// Only a message with one hint, ending it (no line of another problem after it), gives it up:
/// in a list of problems (a load's several errors) each hint stays with its own.
pub(crate) fn split_hint<'a>(message: &'a str, hint: Option<&'a str>) -> (&'a str, Option<&'a str>) {
    const MARK: &str = "\n  hint: ";
    match message.split_once(MARK) {
        Some((m, h)) if hint.is_none() && !h.contains(MARK) && !h.split('\n').skip(1).any(|line| !line.starts_with(' ') && !line.is_empty()) => (m, Some(h)),
        _ => (message, hint),
    }
}

#[cfg(test)]
mod error_json_tests {
    use super::error_json;

    #[test]
    fn a_command_line_refused_after_clap_is_a_usage_error() {
        let e = anyhow::anyhow!(super::UsageError("`--config x`: ignored".into()));
        assert_eq!(super::error_kind(&e), "usage");
    }

    #[test]
    fn a_flags_unknown_or_refused_model_is_a_usage_error() {
        let e = anyhow::Error::new(crate::plan::PlanError::Operator("unknown model `mart.nope`".into()));
        assert_eq!(super::error_kind(&e), "usage");
    }

    #[test]
    fn a_hint_inside_the_message_becomes_the_hint_field() {
        let v = error_json("error", "unknown model `mart.rutes`\n  hint: did you mean `mart.routes`?", None);
        assert_eq!(v["error"]["message"], "unknown model `mart.rutes`");
        assert_eq!(v["error"]["hint"], "did you mean `mart.routes`?");
        let v = error_json("error", "no such thing", Some("try this"));
        assert_eq!((v["error"]["message"].as_str(), v["error"]["hint"].as_str()), (Some("no such thing"), Some("try this")));
        assert!(error_json("error", "plain", None)["error"].get("hint").is_none());
        // Several problems, each with its own hint: the message keeps them all.
        let several = "project failed to load (2 errors)\nmodels/b.rhai:5: unknown ref `s.b`\n  hint: did you mean `s.a`?\nmodels/c.lua:5: unknown ref `s.x`\n  hint: did you mean `s.c`?";
        let v = error_json("load", several, None);
        assert_eq!((v["error"]["message"].as_str(), v["error"].get("hint")), (Some(several), None));
        let one_then_another = "project failed to load (2 errors)\nmodels/b.rhai:5: unknown ref `s.b`\n  hint: did you mean `s.a`?\nmodels/c.lua:5: a problem";
        assert_eq!(error_json("load", one_then_another, None)["error"]["message"], one_then_another);
        // A hint over several indented lines is one hint.
        let v = error_json("error", "bad\n  hint: first\n  second", None);
        assert_eq!((v["error"]["message"].as_str(), v["error"]["hint"].as_str()), (Some("bad"), Some("first\n  second")));
    }
}

/// Prints [`error_json`] on stdout, with `"apiVersion": 1` first.
pub fn print_error_json(kind: &str, message: &str, hint: Option<&str>) {
    let _ = Printer::stdout().json(error_json(kind, message, hint));
}

/// Installs the stderr logger (see [`logging`]): `--log-level`, `--log-format` (pretty at a
/// TTY, logfmt otherwise), `NO_COLOR`, and a progress bar for builds at a TTY (not for `--json`,
/// nor for `watch`, whose screen owns the terminal).
pub fn init_logging(args: &Args) {
    let no_bar = args.command.json() || matches!(args.command, Command::Watch { .. });
    // `watch`'s screen redraws the terminal: info lines (an `--apply`'s builds) written over it
    // would scramble it, and the screen reports them. Warnings and errors still show; an
    // explicit `--log-level debug` (or `RUST_LOG`) shows everything.
    let screen = matches!(args.command, Command::Watch { json: false, .. }) && std::io::stdout().is_terminal();
    let level = if screen && args.log_level == args::LogLevel::Info { args::LogLevel::Warn } else { args.log_level };
    logging::init(level, args.log_format, no_bar);
}

/// Runs one command.
///
/// # Errors
/// Any failure, to be printed with its cause chain by `main` (exit 1).
pub fn run(mut args: Args) -> Result<Exit> {
    let cwd = std::env::current_dir().map_err(|e| anyhow!("cannot read the current directory: {e}"))?;
    args.resolve_config(&cwd);
    match &args.config_flag {
        Some(_) => tracing::debug!(config = %args.config.display(), "using the config given by --config"),
        None if args.config.is_absolute() => tracing::debug!(config = %args.config.display(), "using the config found from the current directory"),
        None => tracing::debug!(cwd = %cwd.display(), "no efmesh.toml in the current directory or any parent"),
    }
    // Parsed by the commands that read the clock only: a bad `--now`/`EFMESH_NOW` does not fail
    // `check`, `test` or `lineage`.
    let given = args.now.clone();
    let now = || -> Result<Millis> {
        match &given {
            Some(s) => interval::parse_instant(s).map_err(|e| anyhow!("--now: {e}")),
            None => Ok(interval::now_millis()),
        }
    };
    refuse_ignored_config(&args)?;
    // The hint for a DuckDB file another process holds offers `--retries N` where there is one
    // (a larger one to a command that already retried).
    crate::engine::offer_retries(match &args.command {
        Command::Apply { retries, .. } | Command::Run { retries, .. } => Some(*retries),
        _ => None,
    });
    // A command that writes nothing waits only a few seconds for an engine lock (a Postgres
    // promotion under way); a writer's reads wait as long as the lock is held.
    crate::engine::bound_lock_waits(writes_nothing(&args.command));
    let out = Printer::stdout();
    match args.command {
        Command::Init { dir } => init::run(&dir, &out),
        Command::Plan { env, json, explain, forward_only, reclassify, reset_history } => {
            let options = plan_options(&forward_only, &reclassify, &reset_history)?;
            cmd_plan(&args.config, &env, json, explain, &options, now()?, &out)
        }
        Command::Apply { env, yes, json, forward_only, reclassify, reset_history, wait, retries, jobs } => {
            let options = plan_options(&forward_only, &reclassify, &reset_history)?;
            let wait = wait.as_deref().map(lock::parse_duration).transpose().map_err(|e| anyhow!("--wait: {e}"))?.unwrap_or_default();
            cmd_apply(&args.config, &env, ApplyFlags { yes, json, wait, retries, jobs: jobs.map_or(0, |j| j as usize) }, &options, now()?, &out)
        }
        Command::Check { json } => check::run(&args.config, json, &out),
        Command::Run { env, json, retries, jobs } => run::run(&args.config, &env, json, retries, jobs.map_or(0, |j| j as usize), now()?, &out),
        Command::Status { env, json, check } => status::run(&args.config, &env, json, check, now()?, &out),
        Command::Migrate { json } => migrate::run(&args.config, json, &out),
        Command::Invalidate { env, json } => envlife::invalidate(&args.config, &env, json, &out),
        Command::State { action: args::StateAction::Export { file, json } } => envlife::export(&args.config, file.as_deref(), json, now()?, &out),
        Command::State { action: args::StateAction::Import { file, force, engine_ahead, json } } => {
            envlife::import(&args.config, &file, force, engine_ahead, json, &out)
        }
        Command::Janitor { ttl, dry_run, adopt, json, wait } => {
            let wait = wait.as_deref().map(lock::parse_duration).transpose().map_err(|e| anyhow!("--wait: {e}"))?.unwrap_or_default();
            janitor::run(&args.config, janitor::Request { ttl_days: ttl, dry_run, adopt, json, wait, now: now()? }, &out)
        }
        Command::Restate { env, model, from, to, dry_run, json } => {
            restate::run(&args.config, restate::Request { env: &env, model: &model, from: &from, to: &to, dry_run, json, now: now()? }, &out)
        }
        Command::Test { selectors, json } => test::run(&args.config, &selectors, json, &out),
        Command::Render { model, env, interval: Some(bounds), json } => {
            render::interval(&args.config, render::Request { model: &model, env: env.as_deref(), bounds: &bounds, json, now: now()? }, &out)
        }
        Command::Render { model, env, interval: None, json } => cmd_render(&args.config, &model, env.as_deref(), json, &out),
        Command::Lineage { target, depth, downstream, json } => lineage::run(&args.config, &target, depth, downstream, json, &out),
        Command::Diff { env_a, env_b, model, data, sample, json } => {
            diff::run(&args.config, diff::Request { a: &env_a, b: &env_b, models: model.as_deref(), data, sample: sample.as_deref(), json }, &out)
        }
        Command::Graph { json, html, select, env } => {
            // The clock only for an environment's plan.
            let now = if env.is_some() { now()? } else { interval::now_millis() };
            graph::run(&args.config, graph::Request { json, html: html.as_deref(), select: select.as_deref(), env: env.as_deref(), now }, &out)
        }
        Command::Audit { env, json, model } => audit::run(&args.config, &env, &model, json, &out),
        Command::Watch { env, json, apply, test, preview_rows, debounce_ms } => watch::run(
            &args.config,
            watch::Options {
                env,
                json,
                apply,
                test,
                preview_rows,
                debounce: std::time::Duration::from_millis(debounce_ms),
                now: args.now.as_ref().map(|_| now()).transpose()?,
            },
        ),
        Command::Preview { env, models, rows, json } => preview::run(&args.config, &env, &models, rows, json, now()?, &out),
        Command::Completions { shell } => completions::run(shell, &out),
        Command::Schedule { env, cron, remove, list, print_systemd, json } => {
            schedule::run(&args.config, schedule::Options { env, cron, remove, list, print_systemd, json }, &out)
        }
    }
}

/// True for the commands that write nothing (to the engine nor to the state store): their
/// engine reads wait at most a few seconds for a lock ([`crate::engine::bound_lock_waits`]).
/// The writers' (`apply`, `run`, `restate`, the janitor, `audit`, `watch --apply`, …) wait
/// as long as the lock is held.
fn writes_nothing(command: &Command) -> bool {
    match command {
        Command::Plan { .. }
        | Command::Status { .. }
        | Command::Diff { .. }
        | Command::Preview { .. }
        | Command::Render { .. }
        | Command::Lineage { .. }
        | Command::Graph { .. }
        | Command::Check { .. }
        | Command::Test { .. }
        | Command::State { action: args::StateAction::Export { .. } } => true,
        Command::Restate { dry_run, .. } | Command::Janitor { dry_run, .. } => *dry_run,
        Command::Watch { apply, .. } => !*apply,
        Command::Init { .. }
        | Command::Apply { .. }
        | Command::Run { .. }
        | Command::Migrate { .. }
        | Command::Invalidate { .. }
        | Command::State { action: args::StateAction::Import { .. } }
        | Command::Audit { .. }
        | Command::Completions { .. }
        | Command::Schedule { .. } => false,
    }
}

/// Refuses `--config` on the commands that read no configuration, rather than ignore it: `init`
/// writes `efmesh.toml` in the directory it scaffolds (where every other command finds it),
/// `completions` prints a script that depends on no project.
///
/// # Errors
/// A usage error naming the flag and the command (nothing was done).
fn refuse_ignored_config(args: &Args) -> Result<()> {
    let Some(given) = &args.config_flag else { return Ok(()) };
    let why = match &args.command {
        Command::Init { dir } => {
            let written = dir.join(crate::config::CONFIG_FILE);
            format!(
                "`efmesh init` writes its configuration as `{}` and reads none, so `--config` would be ignored; nothing was done\n  hint: run `efmesh init {}` without `--config`, then run the other commands inside `{}` (they find `{}` there) or pass them `--config {}`",
                written.display(),
                dir.display(),
                dir.display(),
                crate::config::CONFIG_FILE,
                written.display()
            )
        }
        Command::Completions { .. } => {
            "`efmesh completions` prints a script that depends on no project and reads no configuration, so `--config` would be ignored; nothing was done\n  hint: run it without `--config`".to_string()
        }
        _ => return Ok(()),
    };
    Err(anyhow!(UsageError(format!("`--config {}`: {why}", given.display()))))
}

/// A command line efmesh refuses after clap accepted it (a flag the command would ignore, or a
/// model, environment or column it names that does not exist): `--json` error kind `usage`, as
/// for clap's own refusals and an unknown model in a `--select`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The plan options of `plan` and `apply` (`--forward-only`, `--reclassify`, `--reset-history`):
/// a malformed one is the command line's fault (`--json` error kind `usage`).
fn plan_options(forward_only: &str, reclassify: &str, reset_history: &[String]) -> Result<plan::Options> {
    plan::Options::parse(forward_only, reclassify).and_then(|o| o.with_reset_history(reset_history)).map_err(|e| anyhow!(UsageError(e)))
}

fn load(config_path: &std::path::Path) -> Result<Project> {
    // The hint is added by `main` ([`hint_for`]).
    crate::session::Session::open(config_path)?.into_project().map_err(|e| match e.downcast::<LoadErrors>() {
        Ok(errors) => Reported(errors.to_string()).into(),
        Err(e) => e,
    })
}

pub(crate) use crate::session::{open_state, open_state_records, plan_checked, writable_state};

fn cmd_plan(config: &std::path::Path, env: &str, json: bool, explain: bool, options: &plan::Options, now: Millis, out: &Printer) -> Result<Exit> {
    // A cold load canonicalises the bodies in the background while it finishes (`sql::prefetch`).
    crate::sql::prefetch::enable();
    let project = load(config)?;
    let state = open_state(&project, false)?;
    let mut plan = plan_checked(&project, &*state, env, now, options)?;
    // A new environment is said so in the report (its plan builds everything from scratch): a
    // line under the header naming the existing ones and the one a typo meant, `newEnvironment`
    // and `didYouMean` in JSON — whose reader is a program: the human is told on stderr too.
    plan.mark_new_environment(state.environments()?);
    let work = plan::work::decide(&project, &plan, &*state, false)?;
    // What `apply` would refuse is said here, never listed as work it would do.
    // (As apply words it, less what only an apply that ran can say.)
    let refused = crate::apply::refusal(&project, &plan, &*state, &work)?.map(|e| e.to_string().replace("; nothing was done", ""));
    if json && let Some(like) = &plan.did_you_mean {
        tracing::warn!(env = %env, "environment `{env}` does not exist yet (did you mean `{like}`?): this plan creates it");
    }
    let refreshes = work.refreshes;
    (plan.refused, plan.also_writes) = (refused, refreshes);
    // An expired environment (not yet dropped by the janitor) is planned against what it still
    // serves: applying it renews it (`crate::lifecycle`).
    let (expiry, expired) = envlife::expired_serving(&*state, env, project.config.environments.ttl, now)?;
    if expired && let Some(line) = crate::lifecycle::describe(&expiry) {
        tracing::warn!(env = %env, "{line}");
    }
    if json {
        let mut v = serde_json::to_value(&plan)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("expired".into(), expired.into());
            if expired {
                o.insert("expiry".into(), serde_json::to_value(&expiry)?);
            }
        }
        out.json(v)?;
    } else {
        out.text(&printer::plan_text(&plan, explain))?;
    }
    // The process ends here: freeing every model and action one by one is work nobody waits
    // for (the operating system takes the memory back at exit).
    std::mem::forget(plan);
    std::mem::forget(project);
    Ok(Exit::Success)
}

fn apply_json(plan: &Plan, applied: bool, report: Option<&ApplyReport>) -> serde_json::Value {
    json!({
        "env": plan.env,
        "applied": applied,
        "plan": plan,
        "built": report.map(|r| r.built.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap_or_default(),
        "registered": report.map(|r| r.registered.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap_or_default(),
        "intervals": report.map(|r| r.intervals).unwrap_or(0),
        "promoted": report.is_some_and(|r| r.promoted),
        "audits": report.map(|r| serde_json::to_value(&r.audits).unwrap_or_default()).unwrap_or_else(|| json!([])),
        "auditsReused": report.map(|r| r.audits_reused.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap_or_default(),
        "restatedMeanwhile": report.map(|r| serde_json::to_value(&r.restated_meanwhile).unwrap_or_default()).unwrap_or_else(|| json!([])),
    })
}

/// `apply`'s flags beyond the plan options.
#[derive(Debug, Clone, Copy)]
struct ApplyFlags {
    yes: bool,
    json: bool,
    /// How long to wait for the environment's lock.
    wait: std::time::Duration,
    /// Transient failures retried.
    retries: u32,
    /// Models built at once (0: the number of cores).
    jobs: usize,
}

fn cmd_apply(config: &std::path::Path, env: &str, flags: ApplyFlags, options: &plan::Options, now: Millis, out: &Printer) -> Result<Exit> {
    let ApplyFlags { yes, json, .. } = flags;
    crate::sql::prefetch::enable();
    let project = load(config)?;
    let state = open_state(&project, false)?;
    let mut plan = plan_checked(&project, &*state, env, now, options)?;
    plan.also_writes = plan::work::decide(&project, &plan, &*state, false)?.refreshes;
    // A new environment is said so before anyone confirms (a misspelt `prod`), as `plan` says it.
    plan.mark_new_environment(state.environments()?);
    if !json {
        out.text(&printer::plan_text(&plan, true))?;
    }
    // Refused before asking anyone: neither `--yes` nor a confirmation discards a history.
    if let Some(refusal) = plan::history_refusal(&plan) {
        return Err(anyhow!(refusal));
    }
    // An expired environment (invalidated, or past its ttl) that the janitor has not dropped yet
    // is renewed by its apply, changes or not: with none, a promotion of what it serves (no
    // view moves) records the renewal (`crate::lifecycle`).
    let (_, renew) = envlife::expired_serving(&*state, env, project.config.environments.ttl, now)?;
    if !plan.has_changes && renew {
        let state = writable_state(&project, state)?;
        let report = apply_locked(&project, plan.clone(), &*state, flags, options, now)?;
        // The promotion is stamped with the clock; judged at `--now`, a ttl may still have run
        // out (a `--now` later than the clock): said so, never claimed renewed.
        let after = crate::lifecycle::judge(env, &state.journal(env)?, project.config.environments.ttl, now);
        if after.expired {
            tracing::warn!(env = %env, "the apply was recorded at the clock's time, and `{env}` is still expired at the `--now` given");
        }
        if json {
            let mut v = apply_json(&plan, true, Some(&report));
            if let Some(o) = v.as_object_mut() {
                o.insert("renewed".into(), (!after.expired).into());
            }
            out.json(v)?;
        } else if after.expired {
            out.text(&format!("nothing to build; environment `{env}` is still expired at the given --now\n"))?;
        } else {
            out.text(&format!("nothing to build; environment `{env}` renewed (it was expired)\n"))?;
        }
        return Ok(Exit::Success);
    }
    if !plan.has_changes {
        // A lock left by a killed command keeps `status --check` unhealthy until a command takes
        // it: this apply, with nothing to do, reclaims it all the same (taken and released, with
        // the warning naming the old holder); a live holder's lock is left alone.
        let lease = crate::state::lease::writer_lease(env, project.config.writes_a_lake());
        let clock = state.clock()?;
        if state.lease(&lease)?.is_some_and(|l| crate::state::lease::is_stale(&l, clock, &crate::state::lease::host_name())) {
            // (A lease row means the store is a file: no stand-in to replace.)
            if let lock::Locked::Held(guard) = lock::lock_env(&*state, &project.config, env, std::time::Duration::ZERO)? {
                guard.release(&*state);
            }
        }
        if json {
            // Nothing was applied: `applied` is true only when the plan's changes were.
            out.json(apply_json(&plan, false, Some(&ApplyReport::default())))?;
        } else {
            out.text("nothing to apply\n")?;
        }
        if project.dag.models().any(|m| m.kind.is_refreshed()) {
            crate::ewriteln!("  hint: `efmesh run {env}` refreshes its incremental_by_unique_key and scd_type2 models");
        }
        return Ok(Exit::Success);
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            if json {
                out.json(apply_json(&plan, false, None))?;
            }
            crate::ewriteln!("the plan has changes and stdin is not a terminal: nobody to confirm\n  hint: re-run with `--yes` to apply without asking");
            return Ok(Exit::AwaitingHuman);
        }
        crate::ewrite!("apply the plan to `{env}`? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        let answer = answer.trim().to_ascii_lowercase();
        if answer != "y" && answer != "yes" {
            if json {
                out.json(apply_json(&plan, false, None))?;
            } else {
                out.text("apply cancelled\n")?;
            }
            return Ok(Exit::Success);
        }
    }
    let state = writable_state(&project, state)?;
    let report = apply_locked(&project, plan.clone(), &*state, flags, options, now)?;
    if json {
        out.json(apply_json(&plan, true, Some(&report)))?;
    } else {
        let mut built = if report.built.is_empty() {
            "no build needed (view swap only)".to_string()
        } else {
            format!("built: {}", report.built.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
        };
        if !report.registered.is_empty() {
            let names: Vec<String> = report.registered.iter().map(ToString::to_string).collect();
            built.push_str(&format!("\nregistered (embedded, nothing to build): {}", names.join(", ")));
        }
        if !report.audits_reused.is_empty() {
            let names: Vec<String> = report.audits_reused.iter().map(ToString::to_string).collect();
            built.push_str(&format!("\naudits not run again (passed on the same data): {}", names.join(", ")));
        }
        for r in &report.restated_meanwhile {
            built.push_str(&format!("\n{}", r.describe()));
        }
        out.text(&format!("{built}\n{}environment `{env}` promoted\n", printer::audits_text(&report.audits)))?;
    }
    Ok(Exit::Success)
}

/// Applies `plan` under the environment's lock (waiting `flags.wait` for it; a lock still held
/// is an error naming its holder), retrying transient failures and a stale plan (another `apply`
/// or `run` wrote the state store between the plan and the engine's open, e.g. the writer whose
/// Postgres engine lock this apply waited for) `flags.retries` times: each retry plans again
/// under the lock and refuses to go on if the versions differ from `plan`'s (what was
/// confirmed).
fn apply_locked(
    project: &Project,
    plan: Plan,
    state: &dyn crate::state::StateStore,
    flags: ApplyFlags,
    options: &plan::Options,
    now: Millis,
) -> Result<ApplyReport> {
    let env = plan.env.clone();
    // First without waiting: whether this apply had to wait decides below whether it may plan again.
    let (guard, waited) = match lock::lock_env(state, &project.config, &env, std::time::Duration::ZERO)? {
        lock::Locked::Held(g) => (g, false),
        lock::Locked::Busy(..) if !flags.wait.is_zero() => match lock::lock_env(state, &project.config, &env, flags.wait)? {
            lock::Locked::Held(g) => (g, true),
            lock::Locked::Busy(name, holder) => return Err(lock::held_error(&env, &name, &holder, flags.wait)),
        },
        lock::Locked::Busy(name, holder) => return Err(lock::held_error(&env, &name, &holder, flags.wait)),
    };
    let result = (|| {
        // Under the lock, a promotion of this environment recorded as under way was interrupted.
        crate::session::recover_interrupted(project, state)?;
        let confirmed = versions(&plan);
        let approved = backfills(&plan);
        // The holder this apply waited for (`--wait`) may have written the store: plan again, and
        // go on only with the versions confirmed. Without a wait, a store that moved since the
        // plan is refused as a stale plan (nothing done, "plan again").
        let moved = plan.generation.is_some() && plan.generation != Some(state.generation()?);
        if waited && moved {
            tracing::warn!(env = %env, "the state store changed while waiting for the lock of `{env}`; planning again (applied only if it leads to the same versions)");
        }
        let mut first = if waited && moved { None } else { Some(plan) };
        // What a failed attempt built stays built, and the next attempt's plan no longer lists
        // it: the attempt that succeeds reports it too.
        let committed = std::sync::Arc::new(std::sync::Mutex::new(apply::Committed::default()));
        crate::apply::retry::with_retries(flags.retries, &format!("apply `{env}`"), |attempt| {
            // A failed attempt may have left its promotion's intent (a view swap that failed
            // transiently may have landed): undone before trying again.
            if attempt > 0 {
                crate::session::recover_interrupted(project, state)?;
            }
            let plan = match first.take() {
                Some(p) => p,
                None => {
                    let again = plan_checked(project, state, &env, now, options)?;
                    if versions(&again) != confirmed {
                        return Err(anyhow!(
                            "the plan of `{env}` changed while retrying (another process changed the project or the state); nothing more was done\n  hint: plan again"
                        ));
                    }
                    // What an earlier attempt computed is no longer listed; an interval the
                    // approved plan did not compute is another plan (a lookback reaching past
                    // intervals a refused attempt took back, another process's restatement).
                    if let Some((model, range)) = unapproved_interval(&again, &approved) {
                        return Err(anyhow!(
                            "the plan of `{env}` changed while retrying: it now computes `{model}` over {range}, which the approved plan did not; nothing more was done\n  hint: plan again"
                        ));
                    }
                    again
                }
            };
            let options = apply::Options { applied_by: applied_by(), jobs: flags.jobs, committed: Some(committed.clone()), ..Default::default() };
            crate::session::apply_recorded(project, &plan, state, &options)
        })
    })();
    guard.release(state);
    result
}

/// The versions a plan leads to: model name → fingerprint (removed models absent).
fn versions(plan: &Plan) -> std::collections::BTreeMap<String, String> {
    plan.actions.iter().filter(|a| a.change != plan::Change::Removed).map(|a| (a.name.to_string(), a.fingerprint.as_str().to_string())).collect()
}

/// The ranges each time-range model of a plan computes: model name → merged ranges.
fn backfills(plan: &Plan) -> std::collections::BTreeMap<String, Vec<crate::core::interval::Interval>> {
    plan.actions.iter().filter(|a| !a.backfill.is_empty()).map(|a| (a.name.to_string(), a.backfill.clone())).collect()
}

/// The first range `again` computes that no range `approved` computes for the same model holds
/// (each approved range is merged, so a range within the approved ones lies within one of them).
fn unapproved_interval(
    again: &Plan,
    approved: &std::collections::BTreeMap<String, Vec<crate::core::interval::Interval>>,
) -> Option<(String, crate::core::interval::Interval)> {
    again
        .actions
        .iter()
        .flat_map(|a| a.backfill.iter().map(move |r| (a.name.to_string(), *r)))
        .find(|(name, r)| !approved.get(name).is_some_and(|ranges| ranges.iter().any(|o| o.start <= r.start && r.end <= o.end)))
}

/// The OS user applying, for the journal; empty when unknown.
pub(super) fn applied_by() -> String {
    std::env::var("EFMESH_APPLIED_BY").or_else(|_| std::env::var("USER")).or_else(|_| std::env::var("LOGNAME")).unwrap_or_default()
}

/// The models whose environment views `render --env` resolves `model`'s SQL to read: its parents,
/// through embedded ones (inlined, so their own parents are read), externals left out (read from
/// their source); the model itself when it reads `@this`.
fn env_views_read(project: &Project, model: &crate::core::Model) -> std::collections::BTreeSet<ModelName> {
    let mut read = std::collections::BTreeSet::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<ModelName> = model.parents().into_iter().collect();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        match project.dag.get(&name) {
            Some(parent) if matches!(parent.kind, crate::core::Kind::Embedded) => todo.extend(parent.parents()),
            Some(parent) if matches!(parent.kind, crate::core::Kind::External(_)) => {}
            Some(_) => {
                read.insert(name);
            }
            None => {}
        }
    }
    if model.body.as_ref().is_some_and(|b| b.reads_itself()) {
        read.insert(model.name.clone());
    }
    read
}

fn cmd_render(config: &std::path::Path, model: &str, env: Option<&str>, json: bool, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    let name = ModelName::parse(model)?;
    let Some(m) = project.dag.get(&name) else {
        let hint = project.dag.suggest(model).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
        return Err(anyhow!(UsageError(format!("unknown model `{model}`{hint}"))));
    };
    let mut env_exists = None;
    let mut env_dropped = None;
    let sql = match (&m.body, &m.kind) {
        (Some(body), _) => match env {
            None => body.render(&crate::core::fragment::CanonicalResolver),
            Some(e) => {
                crate::core::name::validate_env(e)?;
                // The views of an environment nothing was applied to do not exist yet: the SQL
                // is what it would read once applied, and the user is told (the store is only read).
                // One the janitor dropped is said so (as `status` and `diff` say it).
                let (exists, dropped, served) = match crate::state::open_existing(&project.config)? {
                    Some(state) => {
                        let served = state.env_pointers(e)?;
                        if served.is_empty() { (false, envlife::dropped_at(state.as_ref(), e)?, served) } else { (true, None, served) }
                    }
                    None => (false, None, Default::default()),
                };
                match &dropped {
                    _ if exists => {
                        // An environment that exists may still not serve a model the SQL reads
                        // (one added to the project since it was applied): its view is missing too.
                        let missing: Vec<ModelName> = env_views_read(&project, m).into_iter().filter(|n| !served.contains_key(&n.to_string())).collect();
                        if !missing.is_empty() {
                            let names: Vec<String> = missing.iter().map(|n| format!("`{n}`")).collect();
                            let (reads, does, them) = if missing.len() == 1 { ("its view", "does", "it") } else { ("their views", "do", "them") };
                            tracing::warn!(
                                "environment `{e}` does not serve {}: this SQL reads {reads}, which {does} not exist until `efmesh apply {e}` creates {them}",
                                names.join(", ")
                            );
                        }
                    }
                    Some(at) => {
                        tracing::warn!("environment `{e}` {}: this SQL reads views that `efmesh apply {e}` would create again", envlife::dropped_phrase(at))
                    }
                    None => tracing::warn!(
                        "environment `{e}` does not exist yet (nothing was applied to it): this SQL reads views that `efmesh apply {e}` would create"
                    ),
                }
                env_exists = Some(exists);
                env_dropped = dropped;
                let physicals = Default::default();
                body.render(&crate::apply::resolve::ExecResolver::new(&project, &physicals, crate::apply::resolve::Mode::Env(e)))
            }
        },
        (None, crate::core::Kind::External(ext)) => format!("SELECT * FROM {}", crate::apply::resolve::external_source(&project, m, ext)),
        (None, crate::core::Kind::Seed(s)) => format!("-- seed: rows of `{}` ({}, blake3 {})", s.path, s.format.as_str(), s.content_hash),
        (None, _) => String::new(),
    };
    let sql = sql.trim().to_string();
    if json {
        let mut v = json!({"model": model, "env": env, "sql": sql});
        if let (Some(exists), Some(o)) = (env_exists, v.as_object_mut()) {
            o.insert("envExists".into(), exists.into());
            // When the janitor dropped it (`null` otherwise).
            o.insert("envDroppedAt".into(), env_dropped.into());
        }
        out.json(v)?;
    } else {
        out.text(&format!("{sql}\n"))?;
    }
    Ok(Exit::Success)
}
