//! `efmesh watch <env>`: the live development loop.
//!
//! The project root is watched recursively ([`notify`], debounced by
//! [`notify_debouncer_full`]: renames and atomic replaces arrive as one event). Each batch of
//! relevant changes ([`paths::Filter`]) reloads the [`Session`] with the changed paths,
//! re-plans the environment, previews the changed models the plan builds
//! ([`crate::preview::preview`]), applies with `--apply`, runs the changed models' unit tests
//! with `--test`, and shows the result: a screen redrawn in place at a terminal
//! ([`screen`]), one JSON line per re-plan otherwise ([`Report::json`]).
//!
//! The loop ([`Watch`]) knows nothing of terminals: it turns changes into [`Report`]s. Load,
//! plan, preview, apply and test failures are problems in the report and the watch goes on; only
//! a configuration that disappears (or a watcher that cannot start) ends it, with exit 1. The
//! engine is opened only inside a preview or an apply and released before the report is shown.

mod paths;
mod report;
mod screen;

use super::Exit;
use crate::apply;
use crate::core::interval::{self, Millis};
use crate::core::{LoadError, ModelName};
use crate::plan::{self, Action, Change, Plan};
use crate::project::Project;
use crate::session::Session;
use crate::sql::fingerprint::Fingerprint;
use anyhow::{Context, Result, anyhow};
use notify_debouncer_full::{DebounceEventResult, new_debouncer, notify::RecursiveMode};
use paths::{Aliases, Filter};
use report::{Applied, Event, Problem, Report};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// At most this many models are previewed per re-plan (the rest are counted as omitted).
pub const MAX_PREVIEWS: usize = 20;

/// `efmesh watch` options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The environment planned.
    pub env: String,
    /// JSON lines even at a terminal.
    pub json: bool,
    /// Apply each successful re-plan with changes.
    pub apply: bool,
    /// Run the unit tests of the changed models.
    pub test: bool,
    /// Rows previewed per model; 0 disables previews.
    pub preview_rows: usize,
    /// How old a file event must be before the debouncer delivers it.
    pub debounce: Duration,
    /// A fixed "now" (`--now`); the wall clock at each re-plan otherwise.
    pub now: Option<Millis>,
}

/// What the loop waits for.
pub(crate) enum Msg {
    /// A debounced batch of file events, delivered at `at`; `last` is when the debouncer
    /// received the latest of them.
    Files { paths: Vec<PathBuf>, rescan: bool, at: Instant, last: Option<Instant> },
    /// The file watcher reported errors.
    WatchError(String),
    /// Quit (`q`, Ctrl+C at the screen).
    Quit,
    /// Reload every input (`r` at the screen).
    ReloadAll(Instant),
    /// Draw the screen again (terminal resized).
    Redraw,
}

/// A combination of options `watch` refuses (a usage error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

/// Runs `efmesh watch`.
///
/// # Errors
/// The environment name is invalid; `--apply` on `prod`; the configuration cannot be read at
/// start or disappears; the file watcher or the terminal cannot be set up. In JSON-lines mode
/// the error is also the last line (`"fatal": true`).
pub(super) fn run(config: &Path, options: Options) -> Result<Exit> {
    let lines = options.json || !std::io::stdout().is_terminal();
    let result = run_loop(config, &options, lines);
    if let (true, Err(e)) = (lines, &result) {
        let root = config.parent().unwrap_or(Path::new("."));
        let mut r = Report::new(Event::Error, &options.env, root);
        r.fatal = true;
        // A failure of the watch itself (its configuration deleted, the file watcher or the
        // terminal failing) is of kind `watch`, as the problems the loop reports of it.
        let kind = match super::error_kind(e) {
            _ if e.is::<Refused>() => "usage",
            "error" => "watch",
            known => known,
        };
        r.errors = Problem::from_error(kind, e);
        let mut line = r.json(0.0);
        // The shape every `--json` failure has (`{"error": {"kind", "message", "hint"?}}`).
        if let (serde_json::Value::Object(o), serde_json::Value::Object(err)) =
            (&mut line, super::error_json(kind, &super::error_text(e), super::hint_for(e).as_deref()))
        {
            o.extend(err);
        }
        let _ = write_line(&line);
    }
    result
}

fn run_loop(config_path: &Path, options: &Options, lines: bool) -> Result<Exit> {
    crate::core::name::validate_env(&options.env)?;
    if options.apply && options.env == "prod" {
        return Err(Refused(
            "`watch --apply` is refused for `prod`: every save would go live\n  hint: watch another environment (`efmesh watch dev --apply`), then `efmesh apply prod` once reviewed"
                .into(),
        )
        .into());
    }
    let started = Instant::now();
    let session = Session::open(config_path)?;
    let root = session.config().root.clone();
    let (tx, rx) = mpsc::channel();
    let mut debouncer = {
        let tx = tx.clone();
        new_debouncer(options.debounce, None, move |result: DebounceEventResult| {
            let _ = tx.send(files_msg(result));
        })
        .context("cannot start the file watcher")?
    };
    debouncer.watch(&root, RecursiveMode::Recursive).with_context(|| format!("cannot watch `{}`", root.display()))?;
    let mut out: Box<dyn Output> = if lines { Box::new(Lines) } else { Box::new(screen::Screen::start(tx.clone())?) };
    let mut watch = Watch::new(session, options.clone());
    let report = watch.start(&mut |r: &Report| early(&mut *out, r, started));
    if !out.show(report, started)? {
        return Ok(Exit::Success);
    }
    watch.index_aliases();
    loop {
        let Some(batch) = next_batch(&rx) else { return Ok(Exit::Success) };
        let report = match batch {
            Batch::Quit => return Ok(Exit::Success),
            Batch::Redraw => {
                out.redraw()?;
                continue;
            }
            Batch::WatchError(message) => {
                let mut r = Report::new(Event::Error, &options.env, &root);
                r.errors.push(Problem { kind: "watch", file: None, line: None, model: None, message, hint: None });
                (r, Instant::now())
            }
            Batch::Files { paths, rescan, at, last } => {
                // A path whose content is what the project was loaded from changes nothing (the
                // second batch of a save whose events the debouncer split, a rewrite of the same
                // bytes): no re-plan, no line.
                let changed = if rescan { watch.all_paths() } else { watch.relevant(paths).into_iter().filter(|p| !watch.session.unchanged(p)).collect() };
                if changed.is_empty() {
                    continue;
                }
                if watch.config_gone(options.debounce) {
                    return Err(anyhow!("the configuration `{}` was deleted: nothing left to watch", watch.session.config().path.display()));
                }
                let Some(mut report) = watch.replan(&changed, &mut |r: &Report| early(&mut *out, r, at)) else {
                    watch.index_aliases();
                    continue;
                };
                report.debounced = last.map(|last| at.saturating_duration_since(last));
                (report, at)
            }
        };
        if !out.show(report.0, report.1)? {
            return Ok(Exit::Success);
        }
        // After the screen or line is out: the caches are not on the path from save to redraw.
        watch.session.save_caches();
        watch.index_aliases();
    }
}

/// [`Output::show_early`], a failure only logged (the complete report follows).
fn early(out: &mut dyn Output, report: &Report, since: Instant) {
    if let Err(e) = out.show_early(report, since) {
        tracing::debug!("cannot show the plan before its previews: {e}");
    }
}

fn files_msg(result: DebounceEventResult) -> Msg {
    let at = Instant::now();
    match result {
        Ok(events) => {
            let mut rescan = false;
            let mut paths = Vec::new();
            let mut last: Option<Instant> = None;
            for e in events {
                rescan |= e.need_rescan();
                if Filter::kind_matters(&e.kind) {
                    last = Some(last.map_or(e.time, |l| l.max(e.time)));
                    paths.extend(e.event.paths);
                }
            }
            Msg::Files { paths, rescan, at, last }
        }
        Err(errors) => Msg::WatchError(format!("the file watcher failed: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))),
    }
}

/// What the loop does next, after merging every message already queued.
enum Batch {
    Quit,
    Redraw,
    WatchError(String),
    Files { paths: Vec<PathBuf>, rescan: bool, at: Instant, last: Option<Instant> },
}

/// Waits for a message, then takes every message already queued with it, so that saves made
/// during a re-plan are handled by one re-plan. `None` when every sender is gone.
fn next_batch(rx: &Receiver<Msg>) -> Option<Batch> {
    let first = rx.recv().ok()?;
    let mut pending = vec![first];
    while let Ok(m) = rx.try_recv() {
        pending.push(m);
    }
    let mut files: Option<(Vec<PathBuf>, bool, Instant, Option<Instant>)> = None;
    let mut redraw = false;
    for m in pending {
        match m {
            Msg::Quit => return Some(Batch::Quit),
            Msg::WatchError(e) => return Some(Batch::WatchError(e)),
            Msg::Redraw => redraw = true,
            Msg::Files { paths, rescan, at, last } => {
                let f = files.get_or_insert_with(|| (Vec::new(), false, at, None));
                f.0.extend(paths);
                f.1 |= rescan;
                f.2 = f.2.min(at);
                f.3 = f.3.max(last);
            }
            Msg::ReloadAll(at) => {
                let f = files.get_or_insert_with(|| (Vec::new(), true, at, None));
                f.1 = true;
                f.2 = f.2.min(at);
            }
        }
    }
    match files {
        Some((paths, rescan, at, last)) => Some(Batch::Files { paths, rescan, at, last }),
        None => {
            debug_assert!(redraw);
            Some(Batch::Redraw)
        }
    }
}

/// Where reports go.
trait Output {
    /// Shows `report` (made for an event delivered at `since`). `false` when nobody reads any
    /// more (stdout closed): the watch ends.
    fn show(&mut self, report: Report, since: Instant) -> Result<bool>;
    /// Shows the last report again.
    fn redraw(&mut self) -> Result<()>;
    /// Shows `report` while its previews, apply or tests still run (its plan is ready): the
    /// screen draws it at once; JSON lines wait for the complete report (one line per re-plan).
    fn show_early(&mut self, _report: &Report, _since: Instant) -> Result<()> {
        Ok(())
    }
}

/// One JSON line per report on stdout.
struct Lines;

impl Output for Lines {
    fn show(&mut self, report: Report, since: Instant) -> Result<bool> {
        let mut line = report.json(0.0);
        if let (Some(ready), serde_json::Value::Object(o)) = (report.plan_ready, &mut line) {
            let plan_ms = ready.saturating_duration_since(since).as_secs_f64() * 1000.0;
            o.insert("planMs".into(), ((plan_ms * 10.0).round() / 10.0).into());
        }
        // Taken last, once the line is built: it is written right after.
        if let serde_json::Value::Object(o) = &mut line {
            let ms = since.elapsed().as_secs_f64() * 1000.0;
            o.insert("replanMs".into(), ((ms * 10.0).round() / 10.0).into());
        }
        match write_line(&line) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn redraw(&mut self) -> Result<()> {
        Ok(())
    }
}

fn write_line(v: &serde_json::Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string(v).map_err(std::io::Error::other)?;
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Each model's version and metadata as of the last successful plan.
#[derive(Debug, Default)]
struct Baseline {
    fingerprints: HashMap<ModelName, Fingerprint>,
    metadata: HashMap<ModelName, String>,
}

/// The watch loop's state: the session and what the last re-plan saw.
struct Watch {
    session: Session,
    options: Options,
    filter: Filter,
    /// The last successful plan's versions; `None` until one succeeds.
    baseline: Option<Baseline>,
    /// Models whose definition the reloads since the last successful plan changed
    /// ([`crate::session::Reload::changed_models`]), compared with the baseline then.
    pending: BTreeSet<ModelName>,
    /// `efmesh check`'s column problems per model, kept up to date for changed models and
    /// their children.
    column_errors: BTreeMap<ModelName, Vec<LoadError>>,
    /// Each model's columns as children see them, when `column_errors` was last updated: a
    /// model whose columns did not change does not make its children checked again.
    columns: HashMap<ModelName, Vec<String>>,
    /// The inputs reached through a symlink, by their real path (a change reported under the
    /// target's path is one of the input); `None` once the inputs changed, until built again
    /// ([`Watch::index_aliases`], after each line, or by the first event that needs it).
    aliases: Option<Aliases>,
}

impl Watch {
    fn new(session: Session, options: Options) -> Watch {
        let filter = Filter::new(session.config());
        Watch { session, options, filter, baseline: None, pending: BTreeSet::new(), column_errors: BTreeMap::new(), columns: HashMap::new(), aliases: None }
    }

    fn root(&self) -> &Path {
        &self.session.config().root
    }

    /// The changed paths that matter, absolute, sorted, de-duplicated. A path that is another
    /// name of inputs (reached through a symlink, [`Aliases`]) stands for them; while the
    /// project does not load, the inputs of the last good load count
    /// ([`Session::kept_inputs`]), and so does a link or a vanished entry in a directory the
    /// discovery globs walk ([`Filter::may_change_discovery`]).
    fn relevant(&mut self, paths: Vec<PathBuf>) -> Vec<PathBuf> {
        let failed = self.session.project().is_err();
        let mut set = BTreeSet::new();
        for p in paths {
            let p = self.filter.under_root(&p);
            // (What efmesh writes itself is no other name of an input, but for an input kept
            // where efmesh writes: a seed in the lake directory.)
            if !self.filter.own(&p) || self.holds_input(&p) || self.filter.discovered(&p) {
                // (An input, or a file a glob matches, is also itself: a new link to a model file.)
                let (aliased, exact) = self.aliased(&p);
                set.extend(aliased);
                if exact && !self.is_input(&p) && !self.filter.discovered(&p) {
                    continue;
                }
            }
            let kept = self.session.kept_inputs();
            if self.filter.relevant(&p, self.session.inputs())
                || (!kept.is_empty() && self.filter.relevant(&p, kept))
                || (failed && self.filter.may_change_discovery(&p))
            {
                set.insert(p);
            }
        }
        set.into_iter().collect()
    }

    /// True when `path` is an input of the last load or, while the project does not load, of the
    /// loads before it ([`Session::kept_inputs`]).
    fn is_input(&self, path: &Path) -> bool {
        self.session.inputs().contains(path) || self.session.kept_inputs().contains(path)
    }

    /// True when `path` is an input ([`Watch::is_input`]) or a directory holding one.
    fn holds_input(&self, path: &Path) -> bool {
        paths::holds_input(self.session.inputs(), path) || paths::holds_input(self.session.kept_inputs(), path)
    }

    /// The other inputs `path` is another name of, and whether it names one exactly
    /// ([`Aliases::inputs_at`]); the aliases are built first if the inputs changed since.
    fn aliased(&mut self, path: &Path) -> (Vec<PathBuf>, bool) {
        let (filter, session) = (&self.filter, &self.session);
        let aliases = self.aliases.get_or_insert_with(|| Aliases::new(filter, session.inputs().iter().chain(session.kept_inputs())));
        aliases.inputs_at(filter, path, |p| session.inputs().contains(p) || session.kept_inputs().contains(p))
    }

    /// Builds the aliases of the current inputs if they changed since they were last built: after
    /// a line is shown, so that the next save does not wait for it, and while the files behind
    /// a link still resolve (a deleted target is then still known by its real path).
    fn index_aliases(&mut self) {
        if self.aliases.is_none() {
            self.aliases = Some(Aliases::new(&self.filter, self.session.inputs().iter().chain(self.session.kept_inputs())));
        }
    }

    /// True when one of `changed` matches a discovery glob or is (or holds) an input.
    fn touches(&self, changed: &[PathBuf]) -> bool {
        changed.iter().any(|p| self.filter.discovered(p) || self.holds_input(p))
    }

    /// Every input, for a rescan (events were lost) or `r`.
    fn all_paths(&self) -> Vec<PathBuf> {
        self.session.inputs().iter().chain(self.session.kept_inputs()).cloned().collect::<BTreeSet<_>>().into_iter().collect()
    }

    /// True when the configuration file is gone and stays gone a moment (an editor replacing
    /// it by rename is not a deletion).
    fn config_gone(&self, debounce: Duration) -> bool {
        let path = &self.session.config().path;
        if path.exists() {
            return false;
        }
        std::thread::sleep((debounce * 2).max(Duration::from_millis(100)));
        !path.exists()
    }

    fn now(&self) -> Millis {
        self.options.now.unwrap_or_else(interval::now_millis)
    }

    /// True when the watched environment expired (invalidated, or past its ttl) and still
    /// serves something (`crate::lifecycle`); false when the store cannot say.
    fn expired(&self, project: &crate::project::Project, now: crate::core::interval::Millis) -> bool {
        let Ok(state) = self.session.state() else { return false };
        super::envlife::expired_serving(&*state, &self.options.env, project.config.environments.ttl, now).is_ok_and(|(_, serving)| serving)
    }

    /// The first report. `early` is shown the report with its plan while previews, the apply or
    /// tests still run.
    fn start(&mut self, early: &mut dyn FnMut(&Report)) -> Report {
        let mut r = Report::new(Event::Start, &self.options.env, self.root());
        if let Ok(project) = self.session.project() {
            check_columns(project, None, &mut self.column_errors, &mut self.columns);
        }
        self.evaluate(&mut r, None, early);
        r
    }

    /// Reloads after `changed` (absolute paths) and re-plans (`early`: as [`Watch::start`]).
    /// `None` when the changed files turned out to be none of the project's: not an input before
    /// or after the reload, not matched by a discovery glob (a `.jsonl` the watch's own output
    /// is redirected to, a CSV nothing reads), and the reload changed no model and left the
    /// load's outcome as it was (loaded, or failing with the same errors): nothing to show. A
    /// reload that now fails, fails otherwise, or loads again is always shown, whatever path
    /// caused it (a symlinked folder that leads out of the project).
    fn replan(&mut self, changed: &[PathBuf], early: &mut dyn FnMut(&Report)) -> Option<Report> {
        let root = self.root().to_path_buf();
        let mut r = Report::new(Event::Replan, &self.options.env, &root);
        r.changed_files = changed.iter().map(|p| p.strip_prefix(&root).unwrap_or(p).to_path_buf()).collect();
        let touched_before = self.touches(changed);
        let errors_before = self.session.project().err().cloned();
        // After a load that failed, every model's columns are checked again, as at start (a
        // recovery is rare; no error of a model deleted meanwhile can stay).
        let failed_before = errors_before.is_some();
        let inputs_before = (self.session.inputs().len(), self.session.kept_inputs().len());
        let reload = match self.session.reload(changed) {
            Ok(reload) => reload,
            Err(e) => {
                // The configuration is invalid: the session keeps its previous state.
                r.event = Event::Error;
                r.errors = Problem::from_error("config", &e);
                return Some(r);
            }
        };
        // A reload in full may read other files (a link added or removed): their aliases are
        // built again when next needed.
        if !reload.in_place || inputs_before != (self.session.inputs().len(), self.session.kept_inputs().len()) {
            self.aliases = None;
        }
        // (Whatever the reload evaluated: after a failed load it evaluates every file, and what
        // no file reads changes none of them.)
        if !touched_before
            && !reload.config_changed
            && reload.changed_models.is_empty()
            && self.session.project().err() == errors_before.as_ref()
            && !self.touches(changed)
        {
            tracing::debug!(files = ?r.changed_files, "changed files the project does not read: nothing to re-plan");
            return None;
        }
        r.config_changed = reload.config_changed;
        r.evaluated = reload.evaluated.clone();
        if reload.config_changed {
            self.filter = Filter::new(self.session.config());
        }
        self.pending.extend(reload.changed_models.iter().cloned());
        if let Ok(project) = self.session.project() {
            let only = (!reload.config_changed && !failed_before).then_some(&reload.changed_models);
            check_columns(project, only, &mut self.column_errors, &mut self.columns);
        }
        let files: BTreeSet<PathBuf> = r.changed_files.iter().cloned().collect();
        self.evaluate(&mut r, Some(&files), early);
        Some(r)
    }

    /// Fills `r` from the session's project: errors, plan, changed models, previews, apply,
    /// tests. `files` are the changed files (`None` at start). Once the plan is ready, when
    /// previews, an apply or tests follow, `r` is handed to `early` with the plan and what is
    /// still under way (`pending`), so a screen shows the plan without waiting for them.
    fn evaluate(&mut self, r: &mut Report, files: Option<&BTreeSet<PathBuf>>, early: &mut dyn FnMut(&Report)) {
        let now = self.now();
        let project = match self.session.project() {
            Ok(p) => p,
            Err(errors) => {
                r.errors.extend(errors.0.iter().map(|e| Problem::from_load("load", e)));
                return;
            }
        };
        r.models = Some(project.dag.len());
        let mut check: Vec<&LoadError> = self.column_errors.values().flatten().collect();
        check.sort_by(|a, b| (&a.location, &a.model).cmp(&(&b.location, &b.model)));
        r.errors.extend(check.into_iter().map(|e| Problem::from_load("check", e)));
        let mut plan = match self.session.plan(&self.options.env, now, &plan::Options::default()) {
            Ok(p) => p,
            Err(e) => {
                r.errors.extend(Problem::from_error("plan", &e));
                return;
            }
        };
        // What the apply writes besides the plan's builds and backfills (`full` and `view`
        // models downstream of new intervals), as `efmesh plan` lists it.
        let refreshes = self.session.state().and_then(|state| Ok(plan::work::decide(project, &plan, &*state, false)?.refreshes));
        match refreshes {
            Ok(refreshes) => plan.also_writes = refreshes,
            Err(e) => {
                r.errors.extend(Problem::from_error("plan", &e));
                return;
            }
        }
        r.plan_ready = Some(Instant::now());
        let actions = actions_by_name(&plan);
        if files.is_some() {
            r.changed_models = changed_since(self.baseline.as_ref(), &self.pending, project, &plan, &actions);
        }
        self.baseline = Some(new_baseline(self.baseline.take(), &std::mem::take(&mut self.pending), project, &actions));
        let previewed = if self.options.preview_rows > 0 { preview_wanted(&r.changed_models, &actions) } else { Vec::new() };
        drop(actions);
        // With nothing to apply, an expired environment (invalidated, past its ttl) is renewed
        // all the same, as `efmesh apply` renews it.
        let renew = self.options.apply && !plan.has_changes && self.expired(project, now);
        let applying = self.options.apply && (plan.has_changes || renew) && !r.errors.iter().any(|e| e.kind == "load" || e.kind == "plan");
        let testing = self.options.test && files.is_some();
        let mut pending = Vec::new();
        if !previewed.is_empty() {
            pending.push(format!("previewing {} model{}", previewed.len().min(MAX_PREVIEWS), if previewed.len() == 1 { "" } else { "s" }));
        }
        if applying {
            pending.push("applying".to_string());
        }
        if testing {
            pending.push("running the changed models' unit tests".to_string());
        }
        let plan = if pending.is_empty() {
            plan
        } else {
            r.pending = Some(pending.join(", "));
            r.plan = Some(plan);
            early(r);
            r.pending = None;
            r.plan.take().expect("set above")
        };
        if !previewed.is_empty() {
            preview(&self.session, project, previewed, &self.options, now, r);
        }
        if applying {
            let applied = match plan::history_refusal(&plan) {
                Some(refusal) => Err(anyhow!(refusal)),
                None => self.session.apply(&plan, &apply::Options { applied_by: super::applied_by(), jobs: 0, ..Default::default() }),
            };
            r.applied = Some(match applied {
                Ok(report) => Applied::Done(report),
                Err(e) => {
                    let problems = Problem::from_error("apply", &e);
                    let message = problems.first().map(Problem::text).unwrap_or_default();
                    r.errors.extend(problems);
                    Applied::Failed(message)
                }
            });
        }
        if self.options.test
            && let Some(files) = files
        {
            r.tests = Some(run_tests(self.session.config(), &r.changed_models, files, &mut r.errors));
        }
        r.plan = Some(plan);
    }
}

/// Runs `efmesh check`'s column checks (queries and audits): for every model (`only` = `None`),
/// or for the models in `only` and the children of those whose columns changed, and the models
/// whose audits read them.
fn check_columns(
    project: &Project,
    only: Option<&BTreeSet<ModelName>>,
    errors: &mut BTreeMap<ModelName, Vec<LoadError>>,
    columns: &mut HashMap<ModelName, Vec<String>>,
) {
    let names = |m: &crate::core::Model| m.relation_columns().into_iter().map(|c| c.name).collect::<Vec<_>>();
    let Some(changed) = only else {
        *errors = project.dag.models().map(|m| (m.name.clone(), super::check::column_errors(project, m))).collect();
        *columns = project.dag.models().map(|m| (m.name.clone(), names(m))).collect();
        return;
    };
    let mut recheck: BTreeSet<&ModelName> = BTreeSet::new();
    for name in changed {
        recheck.insert(name);
        let now = project.dag.get(name).map(names);
        if now.as_ref() != columns.get(name) {
            recheck.extend(project.dag.children(name));
            // And the models whose audits read it (`relationships`' `to`).
            recheck.extend(project.dag.models().filter(|m| m.audit_refs().contains(name)).map(|m| &m.name));
        }
        match now {
            Some(cols) => columns.insert(name.clone(), cols),
            None => columns.remove(name),
        };
    }
    for name in recheck {
        match project.dag.get(name) {
            Some(m) => errors.insert(name.clone(), super::check::column_errors(project, m)),
            None => errors.remove(name),
        };
    }
}

/// The plan's actions by model name (removed models excluded), so that per-model lookups stay
/// linear in the project size.
fn actions_by_name(plan: &Plan) -> HashMap<&ModelName, &Action> {
    plan.actions.iter().filter(|a| a.change != Change::Removed).map(|a| (&a.name, a)).collect()
}

/// The models the saves since the last successful plan changed: among the models whose
/// definition the reloads since changed (`pending`: compared with the last load that succeeded,
/// so never a model whose version moved only because a parent's did, the plan's `indirect`),
/// those whose version or metadata differs from the baseline, in plan order; every pending
/// model when there is no baseline yet. These are the models previewed: an indirect child's
/// preview would read its parent as the environment serves it, the data it already has.
fn changed_since(
    baseline: Option<&Baseline>,
    pending: &BTreeSet<ModelName>,
    project: &Project,
    plan: &Plan,
    actions: &HashMap<&ModelName, &Action>,
) -> Vec<ModelName> {
    let Some(base) = baseline else { return pending.iter().cloned().collect() };
    let mut changed: Vec<ModelName> = pending
        .iter()
        .filter(|name| match (base.fingerprints.get(*name), actions.get(name).map(|a| &a.fingerprint)) {
            (None, None) => false,
            (Some(old), Some(new)) => old != new || project.dag.get(name).map(plan::metadata_text).as_ref() != base.metadata.get(*name),
            _ => true,
        })
        .cloned()
        .collect();
    let order: HashMap<&ModelName, usize> = plan.actions.iter().enumerate().map(|(i, a)| (&a.name, i)).collect();
    changed.sort_by_key(|n| order.get(n).copied().unwrap_or(usize::MAX));
    changed
}

/// The baseline after a successful plan: every model's fingerprint; metadata recomputed for the
/// models reloaded since (all of them the first time).
fn new_baseline(old: Option<Baseline>, pending: &BTreeSet<ModelName>, project: &Project, actions: &HashMap<&ModelName, &Action>) -> Baseline {
    let Some(Baseline { mut fingerprints, mut metadata }) = old else {
        let fingerprints = actions.iter().map(|(name, a)| ((*name).clone(), a.fingerprint.clone())).collect();
        let metadata = project.dag.models().map(|m| (m.name.clone(), plan::metadata_text(m))).collect();
        return Baseline { fingerprints, metadata };
    };
    // Updated in place: only the versions that changed are copied.
    fingerprints.retain(|n, _| actions.contains_key(n));
    for (name, a) in actions {
        match fingerprints.get_mut(*name) {
            Some(fp) => {
                if *fp != a.fingerprint {
                    fp.clone_from(&a.fingerprint);
                }
            }
            None => {
                fingerprints.insert((*name).clone(), a.fingerprint.clone());
            }
        }
    }
    for name in pending {
        match project.dag.get(name) {
            Some(m) => metadata.insert(name.clone(), plan::metadata_text(m)),
            None => metadata.remove(name),
        };
    }
    Baseline { fingerprints, metadata }
}

/// The changed models the plan builds (or adds): the ones to preview.
fn preview_wanted(changed: &[ModelName], actions: &HashMap<&ModelName, &Action>) -> Vec<ModelName> {
    changed
        .iter()
        .filter(|n| actions.get(n).is_some_and(|a| a.build || matches!(a.change, Change::Added | Change::Breaking | Change::NonBreaking)))
        .cloned()
        .collect()
}

/// Previews `wanted` (from [`preview_wanted`]), at most [`MAX_PREVIEWS`].
fn preview(session: &Session, project: &Project, wanted: Vec<ModelName>, options: &Options, now: Millis, r: &mut Report) {
    if wanted.is_empty() {
        return;
    }
    r.previews_omitted = wanted.len().saturating_sub(MAX_PREVIEWS);
    let models = &wanted[..wanted.len().min(MAX_PREVIEWS)];
    let popts = crate::preview::Options { rows: options.preview_rows, now };
    match session.state().and_then(|state| crate::preview::preview(project, &*state, &options.env, models, &popts)) {
        Ok(previews) => r.previews = previews,
        Err(e) => r.errors.extend(Problem::from_error("preview", &e)),
    }
}

/// Runs the unit tests of the changed models and the tests defined in changed files.
fn run_tests(config: &crate::config::Config, changed: &[ModelName], files: &BTreeSet<PathBuf>, errors: &mut Vec<Problem>) -> Vec<crate::unittest::TestResult> {
    let test_globs = Filter::test_globs(config);
    if changed.is_empty() && !files.iter().any(|f| test_globs.is_match(f)) {
        return Vec::new();
    }
    let suite = match crate::unittest::load(config) {
        Ok(s) => s,
        Err(e) => {
            errors.extend(e.0.iter().map(|e| Problem::from_load("test", e)));
            return Vec::new();
        }
    };
    let changed: BTreeSet<&ModelName> = changed.iter().collect();
    let selected: Vec<_> = suite.tests.iter().filter(|t| changed.contains(&t.model) || files.contains(&t.location.file)).collect();
    if selected.is_empty() {
        return Vec::new();
    }
    match crate::engine::open(&suite.project.config, crate::engine::Access::Scratch) {
        Ok(mut engine) => crate::unittest::run(&suite.project, &selected, &mut *engine),
        Err(e) => {
            errors.push(Problem { kind: "test", file: None, line: None, model: None, message: e.to_string(), hint: None });
            Vec::new()
        }
    }
}
