//! `efmesh restate <env> --model M --from T --to T [--dry-run] [--json]`: forget the done
//! intervals of a time-range model in a range, and of every time-range descendant reading that
//! range, for the versions the environment serves, so the next `run` (or `apply`) recomputes
//! exactly that range; `full` and `view` descendants are rebuilt by the `run` that recomputes
//! it (they are downstream of what it backfills). Under the environment's lock — that lock
//! alone, and without opening the engine for writing: an apply or run of another environment
//! serving a restated version (`run dev` while `prod` restates) may be computing the range
//! meanwhile. The restatement moves each target's data generation
//! ([`StateStore::restate`]), and that run's batches of it, whose done records are a
//! compare-and-set on the generation ([`StateStore::mark_done_unless_moved`]), are then not
//! recorded done: the next run recomputes them (SPEC §4 invariant 33).

use super::lock::{Locked, lock_env};
use super::printer::Printer;
use super::{Exit, UsageError, load, open_state};
use crate::core::interval::{Grain, Millis, parse_instant, to_iso};
use crate::core::kind::TimeRange;
use crate::core::name::PROD;
use crate::core::{Kind, ModelName};
use crate::plan::generations::OtherEnvs;
use crate::project::Project;
use crate::state::{RestateTarget, SnapshotIndex, StateStore};
use anyhow::{Result, anyhow, bail};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
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

/// Checks that `t` (named `which`) is aligned to `grain`, naming the nearest valid bounds (a
/// [`UsageError`] when not: a malformed argument).
pub(super) fn aligned(which: &str, text: &str, t: Millis, grain: Grain, model: &str) -> Result<()> {
    grain.aligned(t).map_err(|e| anyhow!(UsageError(format!("--{which} {text} is not aligned to the {} grain of `{model}`; {e}", e.grain.spelling()))))
}

/// What recomputes `model`, a model without intervals, instead of a restatement: a `full` model
/// is rebuilt when its parents' data changes and by `run` at each tick of its `cron` (the cron is
/// what re-reads an external file or table, which efmesh does not watch); a unique-key, partition
/// or SCD type 2 model is refreshed by every `run` (on a cron, at the first run after each tick);
/// a view or an embedded model is computed when read; an external or a seed is read as it is.
///
/// A `full` model without a cron whose parents are models efmesh computes (no external read
/// directly or through views and embedded models) needs none: it is rebuilt whenever they
/// change, so the hint names the time-range models above it to restate instead
/// ([`computed_sources`]).
fn no_intervals_hint(project: &Project, model: &crate::core::Model) -> String {
    let name = &model.name;
    if matches!(model.kind, Kind::Full)
        && model.cron.is_none()
        && !model.parents().is_empty()
        && let Some(time_range) = computed_sources(project, model)
    {
        let restate = if time_range.is_empty() {
            String::new()
        } else {
            let names = time_range.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
            format!(": restate the time-range model{} it reads ({names}) over the range instead", if time_range.len() == 1 { "" } else { "s" })
        };
        return format!(
            "a `full` model is rebuilt whole when its parents' data changes; the parents of `{name}` are models efmesh computes, so the `run` or `apply` after their data changes rebuilds it (a cron matters only for a file or table it reads itself){restate}"
        );
    }
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

/// The time-range models `model` reads (through `full`, view and embedded models, sorted), when
/// everything it reads is computed by efmesh; `None` when it reads an external (directly or
/// through views and embedded models, which read it as it is at each rebuild): then only a cron
/// makes `run` read it again.
fn computed_sources(project: &Project, model: &crate::core::Model) -> Option<BTreeSet<ModelName>> {
    let mut found = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<(ModelName, bool)> = model.parents().into_iter().map(|p| (p, true)).collect();
    while let Some((parent, read_directly)) = queue.pop_front() {
        if !seen.insert(parent.clone()) {
            continue;
        }
        let Some(m) = project.dag.get(&parent) else { continue };
        match &m.kind {
            // Read as it is now only where nothing materialised stands in between.
            Kind::External(_) if read_directly => return None,
            Kind::IncrementalByTimeRange(_) => {
                found.insert(parent);
            }
            Kind::View | Kind::Embedded => queue.extend(m.parents().into_iter().map(|p| (p, read_directly))),
            Kind::Full => queue.extend(m.parents().into_iter().map(|p| (p, false))),
            _ => {}
        }
    }
    Some(found)
}

/// Runs the restatement.
pub(super) fn run(config: &std::path::Path, req: Request<'_>, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    crate::core::name::validate_env(req.env)?;
    let name = ModelName::parse(req.model)?;
    let Some(model) = project.dag.get(&name) else {
        let hint = project.dag.suggest(req.model).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
        bail!(UsageError(format!("unknown model `{}`{hint}", req.model)));
    };
    // A model without intervals and malformed bounds are a command line refused (`usage`).
    let t = match &model.kind {
        Kind::IncrementalByTimeRange(t) => t.clone(),
        Kind::ScdType2(_) => bail!(UsageError(format!(
            "cannot restate `{name}`: an scd_type2 model's history is not recomputable from its source (it records what the source said when each run looked)\n  hint: {}",
            no_intervals_hint(&project, model)
        ))),
        other => {
            bail!(UsageError(format!(
                "cannot restate `{name}`: only incremental_by_time_range models have intervals (it is {})\n  hint: {}",
                other.tag(),
                no_intervals_hint(&project, model)
            )))
        }
    };
    let from = parse_instant(req.from).map_err(|e| anyhow!(UsageError(format!("--from: {e}"))))?;
    let to = parse_instant(req.to).map_err(|e| anyhow!(UsageError(format!("--to: {e}"))))?;
    aligned("from", req.from, from, t.grain, req.model)?;
    aligned("to", req.to, to, t.grain, req.model)?;
    if from >= to {
        bail!(UsageError(format!("--from {} must be before --to {}", req.from, req.to)));
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
    let seen = lineage(&project, &name);
    let declared = |_: &str, tr: &TimeRange| Some(tr.clone());
    let Ok(asked) = restatement(&project, &*state, &pointers, &seen, &declared, from, to)? else { unreachable!("the project's own bounds are always given") };
    for (n, outside) in &asked.outside_bounds {
        tracing::warn!(
            "`{n}`: {outside} done interval(s) of the range lie outside its `start`/`end`: not restated (a run never recomputes them; they stay as computed)"
        );
    }
    if !asked.refused.is_empty() {
        tracing::warn!("scd_type2 descendants are not restated (their history is not recomputable): {}", asked.refused.join(", "));
    }
    // A version another environment serves too is that environment's data as well, and so is
    // another version on a table this environment does not write ([`sharing`]). The hint names
    // a way out that works ([`way_out`]): another environment only when its own restatement
    // would be accepted and would recompute these days.
    if req.env != PROD {
        let index = state.snapshot_index()?;
        let ttl = project.config.environments.ttl;
        let others = crate::plan::generations::other_envs(&*state, req.env, ttl, req.now)?;
        let shared = sharing(&*state, &index, &others, req.env, &asked.targets, false)?;
        if !shared.lines.is_empty() {
            let ctx = Ctx { project: &project, state: &*state, index: &index, env: req.env, name: &name, from, to, from_text: req.from, to_text: req.to };
            let hint = way_out(&ctx, &others, &pointers, &seen, &asked, &shared)?;
            bail!(
                "cannot restate `{}`: it shares these versions with other environments, whose data would change too:\n  {}\n  hint: {hint}",
                req.env,
                shared.lines.join("\n  ")
            );
        }
    }
    let Restatement { targets, outside_bounds, mut rebuilt, refused } = asked;
    let mut cleared = Vec::new();
    if req.dry_run {
        for (n, fp, f, e) in &targets {
            let n_done = state.done_intervals(n, fp)?.range(*f..*e).count();
            cleared.push((n.clone(), *f, *e, n_done, false));
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
        let result = state.restate(req.env, &request);
        guard.release(&*state);
        let counts =
            result.map_err(|e| if e.is_pointer_moved() { anyhow!("{e}; nothing was cleared\n  hint: run restate again") } else { anyhow::Error::from(e) })?;
        for ((n, _, f, e), r) in targets.iter().zip(counts) {
            cleared.push((n.clone(), *f, *e, r.cleared, r.fenced));
        }
    }
    // No done interval in the range: nothing was (or would be) cleared, so the next run has
    // nothing to recompute and no full or view descendant to rebuild.
    let nothing = cleared.iter().all(|(_, _, _, k, _)| *k == 0);
    // The versions whose data generation moved though nothing was cleared: another
    // environment's apply or run relies on them, and its batches of the range under way are
    // refused their done records ([`StateStore::restate`]).
    let fenced: Vec<&str> = cleared.iter().filter(|(_, _, _, _, fenced)| *fenced).map(|(n, ..)| n.as_str()).collect();
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
            "restated": cleared
                .iter()
                .map(|(n, f, e, k, fenced)| json!({"model": n, "from": to_iso(*f), "to": to_iso(*e), "intervals": k, "fenced": fenced}))
                .collect::<Vec<_>>(),
            "rebuiltByNextRun": rebuilt,
            "notRestated": refused,
            "outsideBounds": outside_bounds.iter().map(|(n, k)| json!({"model": n, "intervals": k})).collect::<Vec<_>>(),
        }))?;
    } else {
        let verb = if req.dry_run { "would clear" } else { "cleared" };
        let mut text = String::new();
        for (n, f, e, k, _) in &cleared {
            text.push_str(&format!("{n}: {verb} {k} done interval(s) in [{}, {})\n", to_iso(*f), to_iso(*e)));
        }
        for (n, k) in &outside_bounds {
            text.push_str(&format!("{n}: {k} done interval(s) outside its `start`/`end` left as computed (not restated)\n"));
        }
        if nothing {
            // The done intervals outside a model's bounds named above are left as computed: the
            // range held no done interval a run recomputes.
            let within = if outside_bounds.is_empty() { "" } else { " within the models' `start`/`end`" };
            text.push_str(&format!("no interval in [{}, {}){within} was done: nothing to recompute", to_iso(from), to_iso(to)));
            if !fenced.is_empty() {
                text.push_str(&fence_note(&fenced));
            }
            text.push('\n');
        } else {
            if !fenced.is_empty() {
                text.push_str(&format!("{}: nothing to clear{}\n", names(&fenced), fence_note(&fenced)));
            }
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

/// `list` as `` `a`, `b` ``.
fn names(list: &[&str]) -> String {
    list.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// What a restatement that cleared nothing of the versions of `fenced` did all the same (it
/// moved their data generation: an apply or run of another environment relies on them), said
/// after the line of the range: the batches of the range that apply or run has under way are
/// not recorded done, and its next run recomputes them.
fn fence_note(fenced: &[&str]) -> String {
    format!(
        "; but an apply or run of another environment relies on the version{} of {} it serves: its batches of the range under way will not be recorded done (`restatedMeanwhile`), and its next run recomputes them",
        if fenced.len() == 1 { "" } else { "s" },
        names(fenced)
    )
}

/// A time-range version a restatement clears: the model, its fingerprint, and the range
/// `[from, to)` of the interval starts it clears.
type Target = (String, String, Millis, Millis);

/// What restating a model over a range does in one environment (from its pointers and the
/// bounds it serves), before anything is cleared.
struct Restatement {
    /// The time-range versions whose done intervals in their range are cleared, parents first.
    targets: Vec<Target>,
    /// Per model: the done intervals of the range outside its `start`/`end`, left as computed.
    outside_bounds: Vec<(String, usize)>,
    /// The `full` and `view` descendants the next run rebuilds.
    rebuilt: Vec<String>,
    /// The `scd_type2` descendants, not restated (their history is not recomputable).
    refused: Vec<String>,
}

/// `name` and its descendants, in the project's lineage.
fn lineage(project: &Project, name: &ModelName) -> BTreeSet<ModelName> {
    let mut seen: BTreeSet<ModelName> = BTreeSet::from([name.clone()]);
    let mut queue: VecDeque<ModelName> = VecDeque::from([name.clone()]);
    while let Some(n) = queue.pop_front() {
        for c in project.dag.children(&n) {
            if seen.insert(c.clone()) {
                queue.push_back(c.clone());
            }
        }
    }
    seen
}

/// The [`Restatement`] of `[from, to)` over `seen` (a model and its descendants: [`lineage`]) for
/// the versions `pointers` name, each time-range model held to the bounds `bounds` gives it: the
/// ones the project declares for the environment asked, the ones another environment serves to
/// judge that environment's restatement ([`judge`]). `Err(model)` when `bounds` gives none for
/// that model.
fn restatement(
    project: &Project,
    state: &dyn StateStore,
    pointers: &BTreeMap<String, String>,
    seen: &BTreeSet<ModelName>,
    bounds: &dyn Fn(&str, &TimeRange) -> Option<TimeRange>,
    from: Millis,
    to: Millis,
) -> Result<std::result::Result<Restatement, String>> {
    let mut out = Restatement { targets: Vec::new(), outside_bounds: Vec::new(), rebuilt: Vec::new(), refused: Vec::new() };
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
            Kind::IncrementalByTimeRange(declared) => {
                let Some(tr) = bounds(n.to_string().as_str(), declared) else { return Ok(Err(n.to_string())) };
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
                    out.outside_bounds.push((n.to_string(), outside));
                }
                if cf < ce {
                    out.targets.push((n.to_string(), fp.clone(), cf, ce));
                } else if outside == 0 {
                    // Nothing done there (a range after the data): said so, as any empty range.
                    out.targets.push((n.to_string(), fp.clone(), f, e));
                }
            }
            Kind::Full | Kind::View => out.rebuilt.push(n.to_string()),
            Kind::ScdType2(_) => out.refused.push(n.to_string()),
            _ => {}
        }
    }
    Ok(Ok(out))
}

/// `tr` held to the `start`/`end` of `metadata` (the metadata an environment serves for the
/// model: its `schedule`), what that environment's runs and restatements hold to; `None` when
/// it records none.
fn served_bounds(tr: &TimeRange, metadata: Option<&String>) -> Option<TimeRange> {
    let v: serde_json::Value = serde_json::from_str(metadata?).ok()?;
    let schedule = v.get("schedule")?;
    let start = parse_instant(schedule.get("start")?.as_str()?).ok()?;
    let end = match schedule.get("end") {
        Some(serde_json::Value::String(e)) => Some(parse_instant(e).ok()?),
        _ => None,
    };
    Some(TimeRange { start, end, ..tr.clone() })
}

/// The table of the version `(n, fp)`, when it has one.
fn table_of<'a>(index: &'a SnapshotIndex, n: &str, fp: &str) -> Option<&'a str> {
    index.get(&(n.to_string(), fp.to_string())).map(|(p, _)| p.as_str()).filter(|p| !p.is_empty())
}

/// What of a restatement other environments share ([`sharing`]): what a refusal names.
#[derive(Default)]
struct Sharing {
    /// One line per version shared, naming the model and the environment sharing it.
    lines: Vec<String>,
    /// The versions shared, `(model, fingerprint)`.
    versions: BTreeSet<(String, String)>,
    /// The environments sharing them, and those writing a table shared.
    envs: BTreeSet<String>,
}

/// What of `targets` (what `env` would restate) the environments `others` still served
/// ([`crate::plan::generations::other_envs`]) share; nothing for `prod`, which restates its
/// versions wherever they are also served.
///
/// A version another environment serves too is that environment's data as well: restating it
/// from a non-prod environment would change what the other one serves (as a forward-only change
/// in dev would; the planner refuses that too). So is another version on the same table (an
/// inherited one: a child of a non-breaking change reusing the table): the run would not
/// recompute what the other environment's version holds there, and the restatement would promise
/// what it cannot do. Another version on the same table is fine when `env` is the table's writer
/// ([`crate::plan::generations::writer_elsewhere`]: `prod`, else the one serving its oldest
/// version): the others serve what it computes.
///
/// `first`: stop at the first version shared, for the callers asking only whether one is.
fn sharing(state: &dyn StateStore, index: &SnapshotIndex, others: &OtherEnvs, env: &str, targets: &[Target], first: bool) -> Result<Sharing> {
    let mut out = Sharing::default();
    if env == PROD {
        return Ok(out);
    }
    for (other, theirs) in &others.envs {
        for (n, fp, _, _) in targets {
            if first && !out.lines.is_empty() {
                return Ok(out);
            }
            match theirs.get(n) {
                Some(f) if f == fp => {
                    out.lines.push(format!("`{n}` (also served by `{other}`)"));
                    out.versions.insert((n.clone(), fp.clone()));
                    out.envs.insert(other.clone());
                }
                Some(f) if table_of(index, n, fp).is_some() && table_of(index, n, fp) == table_of(index, n, f) => {
                    let table = table_of(index, n, fp).unwrap_or_default();
                    if let Some((writer, _, _)) = crate::plan::generations::writer_elsewhere(state, index, others, env, n, fp, table)? {
                        let writes = if writer == other { String::new() } else { format!(", which `{writer}` writes") };
                        out.lines.push(format!("`{n}` (its table also holds the version `{other}` serves{writes})"));
                        out.versions.insert((n.clone(), fp.clone()));
                        out.envs.insert(other.clone());
                        out.envs.insert(writer.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// What judging the way out of a refused restatement reads: the project, the state, the request.
struct Ctx<'a> {
    project: &'a Project,
    state: &'a dyn StateStore,
    index: &'a SnapshotIndex,
    /// The environment whose restatement was refused.
    env: &'a str,
    /// The model asked for.
    name: &'a ModelName,
    from: Millis,
    to: Millis,
    /// `--from` and `--to` as given, for the commands the hint prints.
    from_text: &'a str,
    to_text: &'a str,
}

/// Why another environment's own restatement is not the way out of a refused one ([`judge`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum NotThere {
    /// It is refused too: it shares the versions with another environment still (the one asking, say).
    Refused,
    /// It would not recompute the days: it serves other versions, or bounds leaving them out.
    Misses,
    /// Its versions below the model are of other kinds than the project's: not judged.
    Kinds,
    /// The metadata it serves for this time-range model (below the model, or the model itself)
    /// records no `start`/`end` this efmesh reads: what its restatement would clear is unknown.
    NoBounds(String),
}

/// Whether `other` (serving `theirs`), restating the model of `ctx` over the same range itself,
/// would be accepted — the same [`sharing`] check against `around` (every environment still
/// served but `other`, the asking one included), with the bounds `other` serves, over `seen`
/// (this project's lineage: the one `other` serves when the project does not differ from it) —
/// and would clear every done day `asked` (the refused restatement) would clear in the model's
/// version and in each version `shared` names (`done`: those days, per target of `asked`): in
/// the same version (one ledger), or, on a shared table, as its writer (the others serve what it
/// computes). `Ok(left)`: the days of `asked` it does not reach, in the asking environment's own
/// versions below the model.
#[allow(clippy::too_many_arguments)]
fn judge(
    ctx: &Ctx<'_>,
    seen: &BTreeSet<ModelName>,
    other: &str,
    theirs: &BTreeMap<String, String>,
    around: &OtherEnvs,
    asked: &Restatement,
    done: &[Vec<Millis>],
    shared: &Sharing,
) -> Result<std::result::Result<Vec<Target>, NotThere>> {
    for n in seen {
        let Some(fp) = theirs.get(&n.to_string()) else { continue };
        let declared = ctx.project.dag.get(n).map(|m| m.kind.tag());
        if ctx.index.get(&(n.to_string(), fp.clone())).map(|(_, kind)| kind.as_str()) != declared {
            return Ok(Err(NotThere::Kinds));
        }
    }
    let metadata = ctx.state.env_metadata(other)?;
    let served = |n: &str, tr: &TimeRange| served_bounds(tr, metadata.get(n));
    let theirs_done = match restatement(ctx.project, ctx.state, theirs, seen, &served, ctx.from, ctx.to)? {
        Ok(r) => r,
        Err(model) => return Ok(Err(NotThere::NoBounds(model))),
    };
    if !sharing(ctx.state, ctx.index, around, other, &theirs_done.targets, true)?.lines.is_empty() {
        return Ok(Err(NotThere::Refused));
    }
    let model = ctx.name.to_string();
    let mut left = Vec::new();
    for (target, done) in asked.targets.iter().zip(done) {
        let (n, fp, _, _) = target;
        if done.is_empty() {
            continue;
        }
        if *n != model && !shared.versions.contains(&(n.clone(), fp.clone())) {
            left.push(target.clone());
            continue;
        }
        let table = table_of(ctx.index, n, fp);
        let reaches = theirs_done
            .targets
            .iter()
            .any(|(m, g, cf, ce)| m == n && (g == fp || (table.is_some() && table_of(ctx.index, n, g) == table)) && done.iter().all(|d| d >= cf && d < ce));
        if !reaches {
            return Ok(Err(NotThere::Misses));
        }
    }
    Ok(Ok(left))
}

/// The commands restating `left` (the asking environment's own versions below the model, which
/// another environment's restatement does not reach) from that environment, one per topmost
/// version (each takes its descendants along), when each would be accepted there ([`sharing`]);
/// `None` when one would be refused.
fn own_below(ctx: &Ctx<'_>, others: &OtherEnvs, pointers: &BTreeMap<String, String>, left: &[Target]) -> Result<Option<Vec<String>>> {
    let declared = |_: &str, tr: &TimeRange| Some(tr.clone());
    let mut below: BTreeSet<ModelName> = BTreeSet::new();
    let mut commands = Vec::new();
    for (n, _, f, e) in left {
        let name = ModelName::parse(n)?;
        if below.contains(&name) {
            continue;
        }
        let seen = lineage(ctx.project, &name);
        let Ok(again) = restatement(ctx.project, ctx.state, pointers, &seen, &declared, *f, *e)? else { return Ok(None) };
        if !sharing(ctx.state, ctx.index, others, ctx.env, &again.targets, true)?.lines.is_empty() {
            return Ok(None);
        }
        commands.push(format!("`efmesh restate {} --model {n} --from {} --to {}`", ctx.env, to_iso(*f), to_iso(*e)));
        below.extend(seen);
    }
    Ok(Some(commands))
}

/// How many environments a refused restatement's hint names in one list; the rest are counted
/// ("and 42 more"): with dozens of environments sharing a version, the hint stays readable (the
/// refusal's message above it names every one).
const NAMED: usize = 3;

/// `envs` as a hint names them: each in backticks, at most [`NAMED`] of them, then "and N more".
fn named(envs: &[String]) -> String {
    let shown: Vec<String> = envs.iter().take(NAMED).map(|e| format!("`{e}`")).collect();
    if envs.len() > NAMED {
        return format!("{} and {} more", shown.join(", "), envs.len() - NAMED);
    }
    match shown.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => shown.concat(),
    }
}

/// Why another environment named in a restatement's refusal cannot restate the model itself
/// instead ([`way_out`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum WhyNot {
    /// Its own restatement is not the way out ([`judge`]).
    Judged(NotThere),
    /// Its own would be, but the asking environment could not restate its own versions below then.
    Below,
    /// It does not serve the model: the refusal names it for a model below (a version it serves
    /// too, or a table it writes).
    ServesNot,
}

/// The clause of a refused restatement's hint saying `why` the environments `envs` (one or more)
/// cannot restate `model` in place of `env`.
fn why_not_clause(why: &WhyNot, envs: &[String], env: &str, model: &str) -> String {
    let one = envs.len() == 1;
    let who = named(envs);
    match why {
        WhyNot::Judged(NotThere::Refused) if one => format!("{who}'s own restatement is refused the same way"),
        WhyNot::Judged(NotThere::Refused) => format!("{who}: each one's own restatement is refused the same way"),
        WhyNot::Judged(NotThere::Misses) if one => format!("{who}'s would not recompute these days (it serves other versions, or bounds leaving them out)"),
        WhyNot::Judged(NotThere::Misses) => format!("{who}: each one's would not recompute these days (other versions served, or bounds leaving them out)"),
        WhyNot::Judged(NotThere::Kinds) if one => format!("{who} serves models of other kinds below `{model}` than this project"),
        WhyNot::Judged(NotThere::Kinds) => format!("{who} serve models of other kinds below `{model}` than this project"),
        WhyNot::Judged(NotThere::NoBounds(n)) => {
            let (serves, its) = if one { ("serves", "its") } else { ("serve", "their") };
            format!("{who} {serves} `{n}` with no `start`/`end` this efmesh can read in its metadata, so what {its} own restatement would clear is unknown")
        }
        WhyNot::Below if one => format!("after {who}'s own restatement, `{env}` could not restate its own versions below alone"),
        WhyNot::Below => format!("after the own restatement of any of {who}, `{env}` could not restate its own versions below alone"),
        WhyNot::ServesNot if one => format!("{who} does not serve `{model}` (the refusal names it for a model below), so it cannot restate it"),
        WhyNot::ServesNot => format!("{who} do not serve `{model}` (the refusal names them for models below), so none can restate it"),
    }
}

/// The hint of a restatement of `ctx.env` refused for `shared` (`asked`: what it would clear over
/// `seen`, the model's lineage; `pointers`: what `ctx.env` serves; `others`: the environments
/// still served). It names another environment only when [`judge`] finds that its own restatement
/// of the model over the range would be accepted and would recompute these days — `prod` first,
/// then those the refusal names, then any other serving the model — with the follow-up for the
/// asking environment's own versions below ([`own_below`]), and says when that environment's
/// project differs from this one (its `restate` refuses this project). Else it says that no
/// environment can restate them alone, why not for the environments the refusal names (grouped
/// by reason, each list cut at [`NAMED`]), and what can: invalidating the environments other than
/// `prod` sharing them, when `ctx.env` could restate them then (the same check without them), or
/// an edit giving `ctx.env` versions of its own. What every environment is judged with is read
/// once: the environments still served, the done days asked.
fn way_out(
    ctx: &Ctx<'_>,
    others: &OtherEnvs,
    pointers: &BTreeMap<String, String>,
    seen: &BTreeSet<ModelName>,
    asked: &Restatement,
    shared: &Sharing,
) -> Result<String> {
    let (env, model) = (ctx.env, ctx.name.to_string());
    let command = |e: &str| format!("`efmesh restate {e} --model {model} --from {} --to {}`", ctx.from_text, ctx.to_text);
    let mut candidates: Vec<String> = others.envs.iter().filter(|o| o.1.contains_key(&model)).map(|o| o.0.clone()).collect();
    // A stable sort: `prod`, then the environments the refusal names, each by name.
    candidates.sort_by_key(|o| (o != PROD, !shared.envs.contains(o)));
    let ours = ctx.state.env_metadata(env)?;
    let mut done: Vec<Vec<Millis>> = Vec::with_capacity(asked.targets.len());
    for (n, fp, f, e) in &asked.targets {
        done.push(ctx.state.done_intervals(n, fp)?.range(*f..*e).copied().collect());
    }
    // Every environment still served but the one judged, as it would see them restating: the
    // others of `env`, and `env` itself when still served (as
    // `crate::plan::generations::other_envs` reads them for it). Each candidate is taken out
    // while it is judged, and put back.
    let mut around = OtherEnvs { envs: others.envs.clone(), live: true };
    if others.live {
        let at = around.envs.partition_point(|o| o.0.as_str() < env);
        around.envs.insert(at, (env.to_string(), pointers.clone()));
    }
    let mut why_not: Vec<(WhyNot, Vec<String>)> = Vec::new();
    let mut because = |why: WhyNot, other: &str| match why_not.iter_mut().find(|(w, _)| *w == why) {
        Some((_, envs)) => envs.push(other.to_string()),
        None => why_not.push((why, vec![other.to_string()])),
    };
    for other in &candidates {
        let Some(k) = around.envs.iter().position(|o| o.0 == *other) else { continue };
        let (_, theirs) = around.envs.remove(k);
        let verdict = judge(ctx, seen, other, &theirs, &around, asked, &done, shared)?;
        let why = match verdict {
            Ok(left) => match own_below(ctx, others, pointers, &left)? {
                Some(follow) => {
                    let elsewhere = if theirs != *pointers || ctx.state.env_metadata(other)? != ours {
                        format!(" from the project `{other}` serves (`restate {other}` refuses this one: it differs from what `{other}` serves)")
                    } else {
                        String::new()
                    };
                    let then = if follow.is_empty() {
                        String::new()
                    } else {
                        format!("; `{env}`'s own versions below are not `{other}`'s: after that run, {}, then `efmesh run {env}`", follow.join(" and "))
                    };
                    return Ok(format!(
                        "restate them from `{other}`, whose own restatement is accepted and recomputes these days: {}{elsewhere}, then `efmesh run {other}` recomputes the range{then}",
                        command(other)
                    ));
                }
                None => WhyNot::Below,
            },
            Err(not) => WhyNot::Judged(not),
        };
        around.envs.insert(k, (other.clone(), theirs));
        if shared.envs.contains(other) {
            because(why, other.as_str());
        }
    }
    // The environments the refusal names for a model below only (a version of it, or a table
    // they write), not serving the model.
    for other in shared.envs.iter().filter(|e| !candidates.contains(e)) {
        because(WhyNot::ServesNot, other.as_str());
    }
    let mut ways = Vec::new();
    let leaving: Vec<String> = shared.envs.iter().filter(|e| e.as_str() != PROD).cloned().collect();
    if !leaving.is_empty() {
        // What `env` could restate once they no longer count: invalidated, they are not served
        // (`other_envs`), before the janitor drops them.
        let rest = OtherEnvs { envs: others.envs.iter().filter(|o| o.0 == PROD || !shared.envs.contains(&o.0)).cloned().collect(), live: others.live };
        if sharing(ctx.state, ctx.index, &rest, env, &asked.targets, true)?.lines.is_empty() {
            let invalidate = if leaving.len() <= NAMED {
                leaving.iter().map(|e| format!("`efmesh invalidate {e}`")).collect::<Vec<_>>().join(" and ")
            } else {
                format!("`efmesh invalidate <env>` for each of the {} environments other than `prod` the refusal names ({})", leaving.len(), named(&leaving))
            };
            let gone = if leaving.len() == 1 {
                "it is no longer served, the next `efmesh janitor` drops it"
            } else {
                "they are no longer served, the next `efmesh janitor` drops them"
            };
            ways.push(format!("{invalidate} if no longer needed ({gone}), then {} again and `efmesh run {env}`", command(env)));
        }
    }
    ways.push(format!("apply to `{env}` an edit of `{model}` that gives it versions of its own (a breaking change: they are computed anew, every day)"));
    let why = if why_not.is_empty() {
        String::new()
    } else {
        format!(" ({})", why_not.iter().map(|(why, envs)| why_not_clause(why, envs, env, &model)).collect::<Vec<_>>().join("; "))
    };
    Ok(format!("no environment can restate them alone{why}; instead: {}", ways.join("; or ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envs(names: &[&str]) -> Vec<String> {
        names.iter().map(ToString::to_string).collect()
    }

    /// A hint names at most three environments per list, and counts the rest.
    #[test]
    fn a_hint_names_three_environments_and_counts_the_rest() {
        assert_eq!(named(&envs(&["dev"])), "`dev`");
        assert_eq!(named(&envs(&["a", "b"])), "`a` and `b`");
        assert_eq!(named(&envs(&["a", "b", "c"])), "`a`, `b` and `c`");
        let many: Vec<String> = (1..=45).map(|i| format!("dev{i}")).collect();
        assert_eq!(named(&many), "`dev1`, `dev2`, `dev3` and 42 more");
    }

    /// Each reason an environment named in a refusal cannot restate in its place is said as
    /// such: unreadable bounds are not called other kinds, and an environment named for a model
    /// below only is said not to serve the model.
    #[test]
    fn each_reason_another_environment_cannot_restate_is_said_as_such() {
        let clause = |why: WhyNot, names: &[&str]| why_not_clause(&why, &envs(names), "dev", "t.daily");
        assert_eq!(clause(WhyNot::Judged(NotThere::Refused), &["staging"]), "`staging`'s own restatement is refused the same way");
        let many: Vec<String> = (1..=45).map(|i| format!("dev{i}")).collect();
        let refused = why_not_clause(&WhyNot::Judged(NotThere::Refused), &many, "dev0", "t.daily");
        assert_eq!(refused, "`dev1`, `dev2`, `dev3` and 42 more: each one's own restatement is refused the same way");
        assert!(clause(WhyNot::Judged(NotThere::Misses), &["prod"]).starts_with("`prod`'s would not recompute these days"));
        let no_bounds = clause(WhyNot::Judged(NotThere::NoBounds("t.child".into())), &["staging"]);
        assert!(no_bounds.starts_with("`staging` serves `t.child` with no `start`/`end` this efmesh can read in its metadata"), "{no_bounds}");
        assert!(!no_bounds.contains("other kinds"), "{no_bounds}");
        assert!(clause(WhyNot::Judged(NotThere::Kinds), &["staging"]).contains("models of other kinds below `t.daily`"));
        assert_eq!(clause(WhyNot::ServesNot, &["qa"]), "`qa` does not serve `t.daily` (the refusal names it for a model below), so it cannot restate it");
        assert!(clause(WhyNot::Below, &["prod"]).contains("`dev` could not restate its own versions below alone"));
    }
}
