//! `efmesh restate <env> --model M --from T --to T [--dry-run] [--json]`: forget the done
//! intervals of a time-range model in a range, and of every time-range descendant reading that
//! range, for the versions the environment serves, so the next `run` (or `apply`) recomputes
//! exactly that range; `full` and `view` descendants are rebuilt by the `run` that recomputes
//! it (they are downstream of what it backfills). Under the environment's lock.

use super::lock::{Locked, lock_env};
use super::printer::Printer;
use super::{Exit, load, open_state};
use crate::core::interval::{Grain, Millis, parse_instant, to_iso};
use crate::core::{Kind, ModelName};
use crate::state::RestateTarget;
use anyhow::{Result, anyhow, bail};
use serde_json::json;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// The restate request.
pub(super) struct Request<'a> {
    pub env: &'a str,
    pub model: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub dry_run: bool,
    pub json: bool,
    /// The instant the environment's plan is computed at (`--now`).
    pub now: Millis,
}

/// Checks that `t` (named `which`) is aligned to `grain`, naming the nearest valid bounds.
pub(super) fn aligned(which: &str, text: &str, t: Millis, grain: Grain, model: &str) -> Result<()> {
    grain.aligned(t).map_err(|e| anyhow!("--{which} {text} is not aligned to the {} grain of `{model}`; {e}", e.grain.spelling()))
}

/// What recomputes `model`, a model without intervals, instead of a restatement: a `full` model
/// is rebuilt when its parents' data changes and by `run` at each tick of its `cron` (the cron is
/// what re-reads an external file or table, which efmesh does not watch); a unique-key, partition
/// or SCD type 2 model is refreshed by every `run` (on a cron, at the first run after each tick);
/// a view or an embedded model is computed when read; an external or a seed is read as it is.
fn no_intervals_hint(model: &crate::core::Model) -> String {
    let name = &model.name;
    let refreshed = match &model.cron {
        Some(cron) => format!("the first `run` after each tick of its cron (`{cron}`)"),
        None => "every `run`".to_string(),
    };
    match &model.kind {
        Kind::Full => match &model.cron {
            Some(cron) => format!(
                "a `full` model is rebuilt whole when its parents' data changes, and by the first `run` after each tick of its cron (`{cron}`), which re-reads a file or table efmesh does not watch; `efmesh run <env>` after its next tick rebuilds `{name}`"
            ),
            None => format!(
                "a `full` model is rebuilt whole when its parents' data changes, and by `run` at each tick of its `cron`; `{name}` has none, so a file or table efmesh does not watch (an external) is read again only when the model changes: give it one (e.g. {}) for `run` to re-read it (see docs/models.md, Schedules)",
                model.cron_example()
            ),
        },
        Kind::IncrementalByUniqueKey(_) => format!("{refreshed} upserts what the query of `{name}` returns at that moment"),
        Kind::IncrementalByPartition(_) => format!("{refreshed} replaces the partitions the query of `{name}` returns at that moment"),
        Kind::ScdType2(_) => format!("{refreshed} reconciles `{name}` with what its source says at that moment"),
        Kind::View => format!("a view is computed when it is read: `{name}` already shows what its parents hold; restate the time-range models it reads"),
        Kind::Embedded => format!("an embedded model is inlined into the queries that read it: restate the time-range models reading `{name}`"),
        Kind::External(_) => format!("an external is read where it is: restate the time-range models reading `{name}`, or give the `full` ones a `cron`"),
        Kind::Seed(_) => format!("a seed is reloaded by `apply` when its file changes: edit the file of `{name}`"),
        Kind::IncrementalByTimeRange(_) => String::new(),
    }
}

/// Runs the restatement.
pub(super) fn run(config: &std::path::Path, req: Request<'_>, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    crate::core::name::validate_env(req.env)?;
    let name = ModelName::parse(req.model)?;
    let Some(model) = project.dag.get(&name) else {
        let hint = project.dag.suggest(req.model).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
        bail!("unknown model `{}`{hint}", req.model);
    };
    let t = match &model.kind {
        Kind::IncrementalByTimeRange(t) => t.clone(),
        Kind::ScdType2(_) => bail!(
            "cannot restate `{name}`: an scd_type2 model's history is not recomputable from its source (it records what the source said when each run looked)\n  hint: {}",
            no_intervals_hint(model)
        ),
        other => {
            bail!("cannot restate `{name}`: only incremental_by_time_range models have intervals (it is {})\n  hint: {}", other.tag(), no_intervals_hint(model))
        }
    };
    let from = parse_instant(req.from).map_err(|e| anyhow!("--from: {e}"))?;
    let to = parse_instant(req.to).map_err(|e| anyhow!("--to: {e}"))?;
    aligned("from", req.from, from, t.grain, req.model)?;
    aligned("to", req.to, to, t.grain, req.model)?;
    if from >= to {
        bail!("--from {} must be before --to {}", req.from, req.to);
    }
    let state = open_state(&project, false)?;
    let pointers = state.env_pointers(req.env)?;
    if pointers.is_empty() {
        let known = state.environments()?;
        let hint = crate::core::error::did_you_mean(req.env, known.iter().map(String::as_str))
            .map_or_else(|| "\n  hint: apply it first (`efmesh status <env>` shows an environment)".to_string(), |s| format!("\n  hint: did you mean `{s}`?"));
        bail!("unknown environment `{}`: it serves nothing in this state store; nothing to restate{hint}", req.env);
    }
    if !pointers.contains_key(&name.to_string()) {
        bail!("environment `{}` does not serve `{name}`; nothing to restate\n  hint: apply it first", req.env);
    }
    // The lineage and grains below come from the project: they are what the environment serves
    // only when the project does not differ from it (as `run` requires). The pointers are
    // checked again when the intervals are cleared.
    let plan = super::plan_checked(&project, &*state, req.env, req.now, &crate::plan::Options::default())?;
    let blocked = crate::apply::run::blocked_by(&plan);
    if !blocked.is_empty() {
        bail!(
            "cannot restate `{}`: the project differs from what the environment serves, so its lineage is not the served one:\n  {}\n  hint: apply the changes first (`efmesh apply {}`), or restore the project, then restate",
            req.env,
            blocked.join("\n  "),
            req.env
        );
    }
    // The model, then its descendants in topological order: time-range ones are restated over
    // the range widened to their grain; full and view ones are rebuilt by the next run.
    let mut seen: BTreeSet<ModelName> = BTreeSet::from([name.clone()]);
    let mut queue: VecDeque<ModelName> = VecDeque::from([name.clone()]);
    while let Some(n) = queue.pop_front() {
        for c in project.dag.children(&n) {
            if seen.insert(c.clone()) {
                queue.push_back(c.clone());
            }
        }
    }
    let mut targets = Vec::new();
    // Per model: the done intervals of the range outside its `start`/`end`, left as computed.
    let mut outside_bounds: Vec<(String, usize)> = Vec::new();
    let mut rebuilt = Vec::new();
    let mut refused = Vec::new();
    // A model reading its own previous rows (`@this`) computed every interval after the range
    // from the rows being restated: it is restated to its end, and so is every descendant
    // (parents come first in the order, so a descendant sees its parent's mark).
    let mut to_the_end: BTreeSet<ModelName> = BTreeSet::new();
    for n in project.dag.order().iter().filter(|n| seen.contains(*n)) {
        let Some(m) = project.dag.get(n) else { continue };
        if m.body.as_ref().is_some_and(|b| b.reads_itself()) || m.parents().iter().any(|p| to_the_end.contains(p)) {
            to_the_end.insert(n.clone());
        }
        let Some(fp) = pointers.get(&n.to_string()) else { continue };
        match &m.kind {
            Kind::IncrementalByTimeRange(tr) => {
                let (f, e) = (tr.grain.floor(from), tr.grain.next(to - 1));
                let e = if to_the_end.contains(n) {
                    let last = state.done_intervals(&n.to_string(), fp)?.last().map(|s| tr.grain.next(*s));
                    last.map_or(e, |l| l.max(e))
                } else {
                    e
                };
                // Only what a run recomputes: intervals outside the model's `start`/`end` are
                // served as they were computed and never recomputed, so clearing them would
                // leave rows no ledger records and no run replaces. (One not yet due is
                // recomputed when it is.)
                let cf = f.max(tr.grain.floor(tr.start));
                let ce = tr.end.map_or(e, |end| e.min(tr.grain.next(tr.grain.floor(end - 1))));
                let outside = state.done_intervals(&n.to_string(), fp)?.into_iter().filter(|&d| d >= f && d < e && !tr.holds(d)).count();
                if outside > 0 {
                    outside_bounds.push((n.to_string(), outside));
                    tracing::warn!(
                        "`{n}`: {outside} done interval(s) of the range lie outside its `start`/`end`: not restated (a run never recomputes them; they stay as computed)"
                    );
                }
                if cf < ce {
                    targets.push((n.to_string(), fp.clone(), cf, ce));
                } else if outside == 0 {
                    // Nothing done there (a range after the data): said so, as any empty range.
                    targets.push((n.to_string(), fp.clone(), f, e));
                }
            }
            Kind::Full | Kind::View => rebuilt.push(n.to_string()),
            Kind::ScdType2(_) => refused.push(n.to_string()),
            _ => {}
        }
    }
    if !refused.is_empty() {
        tracing::warn!("scd_type2 descendants are not restated (their history is not recomputable): {}", refused.join(", "));
    }
    // A version another environment serves too is that environment's data as well: restating
    // it from a non-prod environment would change what the other one serves (as a forward-only
    // change in dev would; the planner refuses that too). `prod` restates its versions wherever
    // they are also served.
    // So is another version on the same table (an inherited one: a child of a non-breaking
    // change reusing the table): the run would not recompute what the other environment's
    // version holds there, and the restatement would promise what it cannot do.
    // Another version on the same table is fine when this environment is the table's writer
    // (`plan::generations::writer_elsewhere`: `prod`, else the one serving its oldest version):
    // the others serve what it computes.
    if req.env != "prod" {
        let mut shared = Vec::new();
        let mut owners = BTreeSet::new();
        let index = state.snapshot_index()?;
        let table_of = |n: &str, fp: &str| index.get(&(n.to_string(), fp.to_string())).map(|(p, _)| p.as_str()).filter(|p| !p.is_empty());
        let others = crate::plan::generations::other_envs(&*state, req.env, project.config.environments.ttl, req.now)?;
        for (other, theirs) in &others.envs {
            for (n, fp, _, _) in &targets {
                match theirs.get(n) {
                    Some(f) if f == fp => {
                        shared.push(format!("`{n}` (also served by `{other}`)"));
                        owners.insert(other.clone());
                    }
                    Some(f) if table_of(n, fp).is_some() && table_of(n, fp) == table_of(n, f) => {
                        let table = table_of(n, fp).unwrap_or_default();
                        if let Some((writer, _, _)) = crate::plan::generations::writer_elsewhere(&*state, &index, &others, req.env, n, fp, table)? {
                            let writes = if writer == other { String::new() } else { format!(", which `{writer}` writes") };
                            shared.push(format!("`{n}` (its table also holds the version `{other}` serves{writes})"));
                            owners.insert(writer.to_string());
                        }
                    }
                    _ => {}
                }
            }
        }
        if !shared.is_empty() {
            let owner = if owners.contains("prod") { "prod".to_string() } else { owners.iter().next().cloned().unwrap_or_else(|| "prod".to_string()) };
            bail!(
                "cannot restate `{}`: it shares these versions with other environments, whose data would change too:\n  {}\n  hint: restate the environment that owns them (`efmesh restate {owner} ...`), or apply a change that gives `{}` its own versions first",
                req.env,
                shared.join("\n  "),
                req.env
            );
        }
    }
    let mut cleared = Vec::new();
    if req.dry_run {
        for (n, fp, f, e) in &targets {
            let n_done = state.done_intervals(n, fp)?.range(*f..*e).count();
            cleared.push((n.clone(), *f, *e, n_done));
        }
    } else {
        let state = super::writable_state(&project, state)?;
        let guard = match lock_env(&*state, &project.config, req.env, Duration::ZERO)? {
            Locked::Held(g) => g,
            Locked::Busy(lock, holder) => return Err(super::lock::held_error(req.env, &lock, &holder, Duration::ZERO)),
        };
        // One transaction: every target's pointer is checked (it may have moved before the lock
        // was taken) and every range cleared, or nothing is.
        let request: Vec<RestateTarget> =
            targets.iter().map(|(n, fp, f, e)| RestateTarget { name: n.clone(), fingerprint: fp.clone(), from: *f, to: *e }).collect();
        let result = state.restate_intervals(req.env, &request);
        guard.release(&*state);
        let counts =
            result.map_err(|e| if e.is_pointer_moved() { anyhow!("{e}; nothing was cleared\n  hint: run restate again") } else { anyhow::Error::from(e) })?;
        for ((n, _, f, e), k) in targets.iter().zip(counts) {
            cleared.push((n.clone(), *f, *e, k));
        }
    }
    // No done interval in the range: nothing was (or would be) cleared, so the next run has
    // nothing to recompute and no full or view descendant to rebuild.
    let nothing = cleared.iter().all(|(_, _, _, k)| *k == 0);
    if nothing {
        rebuilt.clear();
    }
    if req.json {
        out.json(json!({
            "env": req.env,
            "model": req.model,
            "from": to_iso(from),
            "to": to_iso(to),
            "dryRun": req.dry_run,
            "restated": cleared.iter().map(|(n, f, e, k)| json!({"model": n, "from": to_iso(*f), "to": to_iso(*e), "intervals": k})).collect::<Vec<_>>(),
            "rebuiltByNextRun": rebuilt,
            "notRestated": refused,
            "outsideBounds": outside_bounds.iter().map(|(n, k)| json!({"model": n, "intervals": k})).collect::<Vec<_>>(),
        }))?;
    } else {
        let verb = if req.dry_run { "would clear" } else { "cleared" };
        let mut text = String::new();
        for (n, f, e, k) in &cleared {
            text.push_str(&format!("{n}: {verb} {k} done interval(s) in [{}, {})\n", to_iso(*f), to_iso(*e)));
        }
        for (n, k) in &outside_bounds {
            text.push_str(&format!("{n}: {k} done interval(s) outside its `start`/`end` left as computed (not restated)\n"));
        }
        if nothing {
            // The done intervals outside a model's bounds named above are left as computed: the
            // range held no done interval a run recomputes.
            let within = if outside_bounds.is_empty() { "" } else { " within the models' `start`/`end`" };
            text.push_str(&format!("no interval in [{}, {}){within} was done: nothing to recompute\n", to_iso(from), to_iso(to)));
        } else {
            if !rebuilt.is_empty() {
                text.push_str(&format!("rebuilt by the next run: {}\n", rebuilt.join(", ")));
            }
            if !req.dry_run {
                text.push_str(&format!("`efmesh run {}` recomputes the range\n", req.env));
            }
        }
        out.text(&text)?;
    }
    Ok(Exit::Success)
}
