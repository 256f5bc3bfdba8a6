//! Apply: build exactly what a plan says, then promote the environment.
//!
//! Order of operations (reference `core-semantics.md` §5.1, with the original's holes closed):
//! 1. the schema contract of every model to build is checked *before anything is built*
//!    (parents not built yet stand in as typed empty relations from their declared schemas); a
//!    mismatch lists every problem of every model and builds nothing;
//! 2. models are built parents first — with `--jobs N` up to N at once, each as soon as the models
//!    it reads are built, on its own engine connection, the state store written from this thread
//!    ([`schedule`], SPEC §4 invariant 45): `full` as one `CREATE OR REPLACE TABLE`, `view` as a view
//!    in `_efmesh`, `embedded` only records its snapshot, time-range models batch by batch, each
//!    batch one engine transaction (`DELETE` the range, `INSERT` by column name, output filtered
//!    to `[start, end)` on the time column; a table this apply creates is created by its first
//!    batch, and its later batches have nothing to `DELETE`), the ledger written after the commit;
//!    `incremental_by_unique_key` upserted by key ([`upsert`]) and `scd_type2` reconciled by key
//!    at the plan's instant ([`scd2`]), each in one transaction, the snapshot recorded after.
//!    Audits are write-audit-publish ([`audit`]): a batch's `interval` audits (all audits of a
//!    `full`/`view` model) run inside the transaction that writes it, and the last batch of a
//!    time-range model also runs its `whole` audits over the whole table; a blocking violation
//!    rolls that transaction back (its intervals are marked failed) and stops the apply. The
//!    audits of what a write reads and does not store itself — external sources
//!    ([`source_gate`]), `embedded` and `view` models ([`storeless_gate`]) — run before it;
//! 3. versions about to be (re)pointed whose audits did not run while building (a view swap,
//!    an inherited table, keyed kinds, lake targets, externals, embedded models) run them
//!    (`whole` ones for time-range models) before any view moves; a blocking violation stops
//!    the apply unpromoted;
//! 4. the promotion is recorded as under way in the state store, with the statements that
//!    restore the environment's views as they are now;
//! 5. every view of the environment is swapped in ONE engine transaction, its drops first (a
//!    model renamed only in letter case keeps its view on DuckDB: `promote`), committed only if
//!    the lease is still this process's once its statements ran (rolled back otherwise);
//! 6. the state store records the new pointer set (each pointer with the metadata the
//!    environment now serves), the journal row, and drops the record of step 4, in one
//!    transaction.
//!
//! A crash at any point leaves either the old state or a state from which the next `apply`
//! converges: snapshots and ledger rows are only written after the engine committed, and every
//! engine step is idempotent (`CREATE OR REPLACE`, `DELETE`+`INSERT` of a whole range). A
//! promotion interrupted between steps 4 and 6 is undone by the next command that reads the
//! environment ([`recover_promotions`]): its views are put back as step 4 recorded them, so the
//! views always end up serving exactly what the state store's pointers say. A lease lost between
//! the commit of step 5 and step 6 makes the apply put them back itself
//! (`put_back_after_lost_lock`).
//!
//! A version inheriting a table (forward-only, indirect reuse) writes its batches where the
//! environments serving another version stored there see them before step 5: an apply that
//! fails takes them back ([`inherited`]), so those environments never go on serving rows of a
//! version they do not serve, for intervals their ledgers do not hold (SPEC §4 invariant 65).

pub mod audit;
pub mod batch;
pub mod contract;
pub mod ducklake;
pub mod fault;
mod inherited;
pub mod lake;
pub mod resolve;
pub mod retry;
pub mod run;
pub mod scd2;
mod schedule;
pub mod seed;
pub mod signals;
mod source_error;
pub mod upsert;

use crate::core::interval::{self, Interval};
use crate::core::name::quote_ident;
use crate::core::{Kind, ModelName};
use crate::engine::{Engine, EngineError};
use crate::plan::{Change, Plan, env_schema};
use crate::project::Project;
use crate::sql::fingerprint::FINGERPRINT_VERSION;
use crate::state::{DoneMark, IntervalStatus, SnapshotRecord, StateError, StateStore};
use resolve::{ExecResolver, Mode};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use contract::ContractProblem;

/// Apply options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Who applies (recorded in the journal); empty when unknown.
    pub applied_by: String,
    /// How many models are built at once (`--jobs`), each on its own engine connection; `0`
    /// means the number of cores available, `1` builds one model after another on one
    /// connection (see [`schedule`]).
    pub jobs: usize,
    /// The engine's catalog at the moment the connection opened, when
    /// [`crate::session::open_for_writing`] proved it (the only place one is made: callers
    /// outside the crate can only leave it `None`). The apply then checks the plan against it instead of
    /// querying the catalog again, and a promotion that builds nothing takes the views'
    /// definitions for its undo from it (SPEC §4, invariant 27).
    pub catalog_at_open: Option<ProvenCatalog>,
    /// What earlier attempts of the same command committed (`--retries`), shared by them: each
    /// attempt that fails adds what it built and computed; the one that succeeds reports it with
    /// its own ([`Committed`]). `None`: a single attempt.
    pub committed: Option<std::sync::Arc<std::sync::Mutex<Committed>>>,
}

/// What the failed attempts of one `apply --retries N` or `run --retries N` committed: the
/// models they built (or whose intervals they recorded done, the build unfinished), the embedded
/// models they registered, the intervals they computed, per model, and the intervals whose done
/// record was refused (a restatement committed meanwhile). A failed attempt returns no report,
/// and the retry's plan no longer lists what it committed; the attempt that succeeds reports it
/// with its own ([`Committed::merge_into`]), so `built` lists every model the command built or
/// backfilled, `intervals` counts every interval it computed, and `restated_meanwhile` lists the
/// refused intervals still not done.
#[derive(Debug, Default)]
pub struct Committed {
    /// Models built, or with intervals recorded done.
    built: Vec<ModelName>,
    /// Embedded models registered.
    registered: Vec<ModelName>,
    /// Intervals recorded done, per model (0 for a model built whole).
    per_model: BTreeMap<String, usize>,
    /// Intervals recorded done.
    intervals: usize,
    /// Intervals computed whose done record was refused ([`ApplyReport::restated_meanwhile`]).
    restated_meanwhile: Vec<RestatedMeanwhile>,
}

impl Committed {
    /// What `report` (an attempt's, as far as it went) says was committed: its models built, and
    /// those with intervals recorded done whose build did not finish; the intervals whose record
    /// was refused.
    fn of(report: &ApplyReport) -> Self {
        let mut built = report.built.clone();
        push_new(&mut built, report.per_model.keys().filter_map(|name| ModelName::parse(name).ok()));
        Self {
            built,
            registered: report.registered.clone(),
            per_model: report.per_model.clone(),
            intervals: report.intervals,
            restated_meanwhile: report.restated_meanwhile.clone(),
        }
    }

    /// Adds what another attempt committed.
    fn add(&mut self, other: Committed) {
        add_committed((&mut self.built, &mut self.registered, &mut self.per_model, &mut self.intervals), &other);
        self.restated_meanwhile.extend(other.restated_meanwhile);
    }

    /// `report` (the attempt that succeeded) with what the earlier attempts committed: their
    /// models among its `built` and `registered` ones, each once, in `plan`'s (topological)
    /// order; their intervals added to its counts; their refused intervals this attempt did not
    /// compute again before its own ([`carry_restated_meanwhile`]).
    fn merge_into(&self, report: &mut ApplyReport, plan: &Plan) {
        add_committed((&mut report.built, &mut report.registered, &mut report.per_model, &mut report.intervals), self);
        let backfill = |m: &ModelName| plan.action(m).map_or(&[][..], |a| a.backfill.as_slice());
        carry_restated_meanwhile(&self.restated_meanwhile, &mut report.restated_meanwhile, backfill);
        let position: HashMap<&ModelName, usize> = plan.actions.iter().enumerate().map(|(i, a)| (&a.name, i)).collect();
        let at = |n: &ModelName| position.get(n).copied().unwrap_or(usize::MAX);
        report.built.sort_by_key(|n| at(n));
        report.registered.sort_by_key(|n| at(n));
    }
}

/// Takes the intervals `name` recorded done out of `(per_model, intervals)` (an
/// [`ApplyReport`]'s or a [`Committed`]'s): an apply that failed took them back
/// ([`inherited::take_back`]).
fn forget_intervals(per_model: &mut BTreeMap<String, usize>, intervals: &mut usize, name: &ModelName) {
    if let Some(n) = per_model.remove(&name.to_string()) {
        *intervals = intervals.saturating_sub(n);
    }
}

/// The models of `names` not in `list` yet, appended in their order.
fn push_new(list: &mut Vec<ModelName>, names: impl IntoIterator<Item = ModelName>) {
    for m in names {
        if !list.contains(&m) {
            list.push(m);
        }
    }
}

/// Adds what `from` committed to `(built, registered, per_model, intervals)` (a [`Committed`]'s
/// or an [`ApplyReport`]'s): models once each, counts summed.
fn add_committed(into: (&mut Vec<ModelName>, &mut Vec<ModelName>, &mut BTreeMap<String, usize>, &mut usize), from: &Committed) {
    let (built, registered, per_model, intervals) = into;
    push_new(built, from.built.iter().cloned());
    push_new(registered, from.registered.iter().cloned());
    for (m, n) in &from.per_model {
        *per_model.entry(m.clone()).or_default() += n;
    }
    *intervals += from.intervals;
}

/// Puts in front of `into` (the report of the attempt that succeeded) the entries of `earlier`
/// (the refused done records of failed attempts) whose intervals that attempt did not compute:
/// not wholly inside `backfill(model)`, the ranges its plan computed (every one of them, since
/// it succeeded). Those are still not done, and only the failed attempt's warning said so. An
/// entry it did compute is dropped: its intervals are done now, or refused again and listed in
/// `into` already.
fn carry_restated_meanwhile<'p>(earlier: &[RestatedMeanwhile], into: &mut Vec<RestatedMeanwhile>, backfill: impl Fn(&ModelName) -> &'p [Interval]) {
    let recomputed = |r: &RestatedMeanwhile| {
        let covered: i64 = backfill(&r.model).iter().map(|b| (b.end.min(r.to) - b.start.max(r.from)).max(0)).sum();
        covered >= r.to - r.from
    };
    let mut kept: Vec<RestatedMeanwhile> = Vec::new();
    for r in earlier.iter().filter(|&r| !recomputed(r)) {
        if !kept.contains(r) && !into.contains(r) {
            kept.push(r.clone());
        }
    }
    kept.append(into);
    *into = kept;
}

/// A catalog proven to be the engine's own when the connection of an apply or a run opened
/// (the DuckDB file's identity equal to the one it was read at, and no write between that proof
/// and the connection holding the file): made only by [`crate::session::open_for_writing`].
#[derive(Clone)]
pub struct ProvenCatalog(std::sync::Arc<crate::engine::Catalog>, std::path::PathBuf, String);

impl ProvenCatalog {
    /// `catalog`, valid while the file at `path` has the stat identity `stat`.
    pub(crate) fn new(catalog: std::sync::Arc<crate::engine::Catalog>, path: std::path::PathBuf, stat: String) -> Self {
        Self(catalog, path, stat)
    }

    /// True while nothing wrote the file since the proof (its stat identity unchanged; by
    /// `stat` alone, safe while a connection of this process holds the file).
    pub(crate) fn still_current(&self) -> bool {
        crate::engine::record::stat_identity(&self.1).as_ref() == Some(&self.2)
    }
}

impl std::fmt::Debug for ProvenCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProvenCatalog({} relations)", self.0.relations.len())
    }
}

impl Options {
    /// [`Options::jobs`], with `0` resolved to the number of cores available.
    pub fn effective_jobs(&self) -> usize {
        if self.jobs == 0 { std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get) } else { self.jobs }
    }
}

/// What an apply did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    /// Models whose version was built or backfilled, in topological order.
    pub built: Vec<ModelName>,
    /// Embedded models whose new version was registered (snapshot recorded; nothing to build).
    pub registered: Vec<ModelName>,
    /// Grain intervals computed.
    pub intervals: usize,
    /// True once the environment points at the plan's versions.
    pub promoted: bool,
    /// Every audit run, one entry per (model, audit, scope), warn violations included.
    pub audits: audit::AuditReport,
    /// Models whose audits the promotion did not run again: they passed on the same data (same
    /// version, same data generation, same audits; [`StateStore::audit_pass`]).
    pub audits_reused: Vec<ModelName>,
    /// Intervals computed per model built (0 for a model built or refreshed whole), or whose
    /// intervals were recorded done (a build that failed part-way).
    #[serde(skip)]
    pub per_model: BTreeMap<String, usize>,
    /// The done intervals `run` recomputed for `auto_restatement_intervals`, per model (the
    /// declaring models and their time-range descendants); empty for `apply`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub auto_restated: Vec<run::AutoRestated>,
    /// Intervals computed and committed whose done record was refused because a restatement
    /// committed while their batches ran ([`StateStore::mark_done_unless_moved`]): not done, the
    /// next run or apply computes them; not counted in `intervals`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restated_meanwhile: Vec<RestatedMeanwhile>,
}

impl ApplyReport {
    /// Counts `n` grain intervals of `model` recorded done (in `intervals` and `per_model`).
    pub(crate) fn computed(&mut self, model: &ModelName, n: usize) {
        self.intervals += n;
        *self.per_model.entry(model.to_string()).or_default() += n;
    }
}

/// Intervals of a time-range model that an apply or run computed and committed but did not
/// record done: the version's data generation moved while their batches ran — `efmesh restate`
/// of another environment serving the version committed meanwhile — so they may hold rows read
/// before the restatement, which asks for them to be recomputed (SPEC §4 invariant 33). The
/// ledger leaves them not done: `plan` and `status` count them missing, and the next run or
/// apply computes them again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestatedMeanwhile {
    /// The model.
    pub model: ModelName,
    /// Start of the first interval (ISO-8601 UTC in JSON).
    #[serde(serialize_with = "interval::serialize_iso")]
    pub from: interval::Millis,
    /// End of the last interval, exclusive (ISO-8601 UTC in JSON).
    #[serde(serialize_with = "interval::serialize_iso")]
    pub to: interval::Millis,
    /// Grain intervals not recorded.
    pub intervals: usize,
}

impl RestatedMeanwhile {
    /// The line saying so (`t.daily: 2 interval(s) in [from, to) computed but not recorded done: …`).
    pub fn describe(&self) -> String {
        format!(
            "{}: {} interval(s) in [{}, {}) computed but not recorded done: restated meanwhile (an `efmesh restate` committed while their batches ran); the next run or apply recomputes them",
            self.model,
            self.intervals,
            interval::to_iso(self.from),
            interval::to_iso(self.to)
        )
    }
}

/// Records the grain intervals `done` of the version `snapshot` of `model` done after the engine
/// committed them, unless its data generation moved from `*seen` (the generation the build read
/// before its first batch read its inputs, then the one each record moved it to): compare-and-set
/// in one state transaction ([`StateStore::mark_done_unless_moved`]). Recorded, `*seen` becomes
/// the new generation and true is returned. Refused (a restatement committed meanwhile), nothing
/// is written, `*seen` stays (the build's later batches may have read their inputs before the
/// restatement too, so their records are refused as well), a warning names the model and the
/// intervals, `report.restated_meanwhile` lists them, and false is returned.
///
/// # Errors
/// The state write fails, or the fence lease was lost.
fn record_done(
    state: &dyn StateStore,
    model: &ModelName,
    snapshot: &SnapshotRecord,
    done: &[Interval],
    seen: &mut i64,
    report: &mut ApplyReport,
) -> Result<bool, StateError> {
    // (The state write `done:<model>` of the test hook [`fault::state_write_point`].)
    let marked = fault::state_write_point(&format!("done:{model}"), &state.location(), || {
        state.mark_done_unless_moved(&snapshot.name, &snapshot.fingerprint, done, *seen, interval::now_millis())
    })?;
    match marked {
        DoneMark::Recorded { generation } => {
            *seen = generation;
            Ok(true)
        }
        DoneMark::Moved { found } => {
            let from = done.iter().map(|i| i.start).min().unwrap_or_default();
            let to = done.iter().map(|i| i.end).max().unwrap_or_default();
            let entry = RestatedMeanwhile { model: model.clone(), from, to, intervals: done.len() };
            tracing::warn!(model = %model, generation = *seen, found, "{}", entry.describe());
            match report.restated_meanwhile.last_mut() {
                // The batches of one model, one after another: one entry.
                Some(last) if last.model == *model && last.to == from => {
                    last.to = to;
                    last.intervals += done.len();
                }
                _ => report.restated_meanwhile.push(entry),
            }
            Ok(false)
        }
    }
}

/// Why an apply stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Declared schemas do not match what the queries produce; nothing was built.
    #[error("schema contract failed, nothing was built:\n{}", contract::render(.0))]
    Contract(Vec<ContractProblem>),
    /// An engine statement failed while building a model. The message names the model's
    /// definition (file:line) and carries the engine error once (it is not also a `source`, so
    /// a printed cause chain never repeats it).
    #[error("{location}: building model `{model}`{}: {error}", .interval.map(|i| format!(" interval {i}")).unwrap_or_default())]
    Build {
        /// The model.
        model: ModelName,
        /// Where the model is defined.
        location: crate::core::Location,
        /// The batch, for time-range models.
        interval: Option<Interval>,
        /// The engine error.
        error: EngineError,
    },
    /// A keyed model's query returned rows its kind refuses (a NULL or duplicate key); nothing
    /// of that model was written.
    #[error("{location}: model `{model}`: {message}")]
    Rejected {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: crate::core::Location,
        /// What was refused, with a row count or a key.
        message: String,
    },
    /// A storage target (parquet lake, DuckLake) could not be prepared or written.
    #[error("{}{message}", .model.as_ref().map(|m| format!("building model `{m}`{}: ", .interval.map(|i| format!(" interval {i}")).unwrap_or_default())).unwrap_or_default())]
    Target {
        /// The model, when one was being built.
        model: Option<ModelName>,
        /// The interval being written, for time-range models.
        interval: Option<Interval>,
        /// What went wrong, naming the file, variable or extension.
        message: String,
    },
    /// An audit could not run, or blocking audits found violating rows: the batch or build was
    /// rolled back and nothing was promoted.
    #[error("{}", match .interval { Some(i) => format!("{failure}\n  (batch {i} of model `{model}` rolled back and marked failed)"), None => failure.to_string() })]
    Audit {
        /// The model whose work was audited.
        model: ModelName,
        /// The batch, for time-range models.
        interval: Option<Interval>,
        /// What failed.
        failure: audit::AuditError,
    },
    /// Blocking audits of external sources an apply or run reads into tables an environment
    /// serves, or of `embedded` and `view` models its writes read over nothing it writes, failed
    /// before anything was written ([`source_gate`], [`storeless_gate`]).
    #[error("{} blocking audit{} of the {} this {during} reads failed, nothing was written:{}\n  hint: fix {} (or the audit), then {during} again", .failures.len(), if .failures.len() == 1 { "" } else { "s" }, if *.sources { "sources" } else { "models" }, .failures.iter().map(|f| format!("\n  {}", f.describe())).collect::<String>(), match (*.sources, .failures.len()) { (true, 1) => "the source", (true, _) => "the sources", _ => "what they read" })]
    SourceAudit {
        /// `apply` or `run`.
        during: &'static str,
        /// True when every failure is an external source's ([`source_gate`]): the source itself
        /// is to fix; otherwise ([`storeless_gate`]) what the failing models read.
        sources: bool,
        /// Every blocking failure.
        failures: Vec<audit::AuditResult>,
    },
    /// Blocking audits of `embedded` or `view` models a write reads (directly or through others
    /// of them), over a model this apply or run wrote first, failed just before that write
    /// ([`Builder::gate_reads`]): nothing of the reading model was written, nothing was promoted.
    #[error("{} blocking audit{} of the models `{reader}` reads failed, nothing of `{reader}` was written{}:{}\n  hint: fix what they read (or the audit), then {during} again", .failures.len(), if .failures.len() == 1 { "" } else { "s" }, if .during.starts_with("apply") { ", nothing was promoted" } else { "" }, .failures.iter().map(|f| format!("\n  {}", f.describe())).collect::<String>())]
    ReadAudit {
        /// `apply` or `run`.
        during: &'static str,
        /// The model whose write was stopped.
        reader: ModelName,
        /// Every blocking failure.
        failures: Vec<audit::AuditResult>,
    },
    /// In `run`: blocking audits of models reading what the run wrote (`ref()` in an audit body,
    /// e.g. `relationships`) found violating rows once the writes had committed. The writes stay
    /// (each passed its own model's audits); the run fails so the breach is seen.
    #[error("{failure}\n  (these audits read {}, which this run refreshed; the new data is committed — fix it or the audited model, then check with `efmesh audit`)", .written.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "))]
    RunAudit {
        /// The first failing audit's model.
        model: ModelName,
        /// The models this run wrote that the failing audits read.
        written: Vec<ModelName>,
        /// What failed.
        failure: audit::AuditError,
    },
    /// In `run` or `apply`: blocking audits of a version this environment serves from a table
    /// another environment also serves and writes under other audits (its runs never ran these)
    /// found violating rows in it ([`shared_table_audits`]), before anything was built or
    /// refreshed (no model computes from those rows). The rows are served; the run fails so the breach is
    /// seen (SPEC §4 invariant 17).
    #[error("{failure}\n  (`{model}`'s table is shared with {}, which write{} it under other audits: this environment serves the rows its audits refuse — fix the data (`efmesh restate` where it is written) or the audit, then run again)", .writers.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(", "), if .writers.len() == 1 { "s" } else { "" })]
    SharedAudit {
        /// The first failing audit's model.
        model: ModelName,
        /// The environments writing the shared table under other audits.
        writers: Vec<String>,
        /// What failed.
        failure: audit::AuditError,
    },
    /// The state store changed between the plan and the apply (another process applied or
    /// ran meanwhile): nothing was done.
    #[error("the state store changed since this plan of `{env}` was computed (another apply or run happened meanwhile); nothing was done\n  hint: plan again")]
    StalePlan {
        /// The environment.
        env: String,
    },
    /// The plan would start an `scd_type2` model's history over and the operator did not accept
    /// it (`--reset-history`), or a history it carries over cannot be read or holds more than the
    /// carried version copied: nothing was done. The message lists the ways forward.
    #[error("{0}")]
    HistoryReset(String),
    /// The engine lacks relations the plan relies on and does not restore (the plan was
    /// computed without checking the engine, or something vanished since): nothing was done.
    #[error("the engine does not hold what this plan of `{env}` relies on; nothing was done:\n  {}\n  hint: plan again: the plan rebuilds and restores what is missing", .missing.join("\n  "))]
    EngineChanged {
        /// The environment.
        env: String,
        /// What is missing, one line each, naming the relation and model.
        missing: Vec<String>,
    },
    /// The engine database is older than the state store says ([`crate::engine::epoch`]),
    /// found on the apply's own connection: nothing was done.
    #[error("{0}")]
    EngineBehind(String),
    /// The promotion would create, replace or drop environment views another state store
    /// present in the engine database made (SPEC §4, invariant 64): nothing was done.
    #[error("{0}")]
    ForeignViews(String),
    /// Several failures in a parallel apply or run (`--jobs`), each once, one per model;
    /// the models that were running when the first failed finished and were recorded, none
    /// started after it, nothing was promoted.
    #[error("{} failures; nothing was promoted:\n{}", .0.len(), render_several(.0))]
    Several(Vec<ApplyError>),
    /// [`ApplyError::Several`] in `run`, which never promotes ([`ApplyError::in_run`]).
    #[error("{} failures:\n{}", .0.len(), render_several(.0))]
    SeveralInRun(Vec<ApplyError>),
    /// A model of the plan needs a feature the engine does not have (the parquet lake on
    /// Postgres, say): nothing was done.
    #[error("{location}: model `{model}` needs {feature}, which the {engine} engine does not have; nothing was done")]
    EngineFeature {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: crate::core::Location,
        /// The feature, as [`crate::engine::dialect::Feature::describe`] names it.
        feature: &'static str,
        /// The engine, as messages spell it.
        engine: &'static str,
    },
    /// This process lost its lock (stalled past its expiry) after its view swap committed and
    /// before the state store recorded the promotion; the message says what became of the
    /// views (put back as they were, normally) and what to do.
    #[error("{0}")]
    LockLostAfterSwap(String),
    /// The state store's write recording a promotion failed after the view swap committed, and
    /// what became of the views could not be settled as usual (they could not be put back, or
    /// the store could not be read to tell whether it recorded the promotion); the message says
    /// what the views serve and what the next command does.
    #[error("{0}")]
    PromotionUnsettled(String),
    /// An engine statement failed outside a model build (schema creation, promotion).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
}

/// `e`'s message, then each cause it does not already say on a `caused by:` line (as the CLI
/// prints an error): a failure among several keeps its cause ("database or disk is full").
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(&format!("\n  caused by: {said}"));
        }
        cause = c.source();
    }
    text
}

/// `e` with the step the apply was at (`step`, naming the environment) before its message, for
/// an engine failure that names no model (the statement alone does not say what it was for);
/// still transient when it was, by the engine's mark or by its message (a lost connection, a
/// lock: `--retries` retries it).
fn in_step(step: &str, e: EngineError) -> EngineError {
    let transient = e.transient || retry::is_transient_message(&e.message);
    EngineError { message: format!("{step}: {}", e.message), transient, ..e }
}

/// The failures of [`ApplyError::Several`], each numbered, its lines indented.
fn render_several(failures: &[ApplyError]) -> String {
    let mut out = Vec::new();
    for (i, f) in failures.iter().enumerate() {
        let text = with_causes(f);
        let mut lines = text.lines();
        out.push(format!("  {}. {}", i + 1, lines.next().unwrap_or_default()));
        out.extend(lines.map(|l| format!("     {l}")));
    }
    out.join("\n")
}

impl ApplyError {
    /// This error as `efmesh run` reports it: blocking audit failures, also among
    /// [`ApplyError::Several`], do not say that nothing was promoted (a run never promotes;
    /// [`audit::AuditError::in_run`]).
    #[must_use]
    pub fn in_run(self) -> ApplyError {
        match self {
            ApplyError::Audit { model, interval, failure } => ApplyError::Audit { model, interval, failure: failure.in_run() },
            ApplyError::RunAudit { model, written, failure } => ApplyError::RunAudit { model, written, failure: failure.in_run() },
            ApplyError::SharedAudit { model, writers, failure } => ApplyError::SharedAudit { model, writers, failure: failure.in_run() },
            ApplyError::Several(all) | ApplyError::SeveralInRun(all) => ApplyError::SeveralInRun(all.into_iter().map(ApplyError::in_run).collect()),
            other => other,
        }
    }

    /// [`ApplyError::Build`] for `model`: its name and definition's location, the batch if any.
    pub fn build(model: &crate::core::Model, interval: Option<Interval>, error: EngineError) -> ApplyError {
        ApplyError::Build { model: model.name.clone(), location: model.location.clone(), interval, error }
    }

    /// The definition's location and the model of a failure that names them (a build the engine
    /// refused, a model the target rejected).
    pub fn located(&self) -> Option<(&crate::core::Location, &ModelName)> {
        match self {
            ApplyError::Build { model, location, .. } | ApplyError::Rejected { model, location, .. } | ApplyError::EngineFeature { model, location, .. } => {
                Some((location, model))
            }
            _ => None,
        }
    }
}

/// Applies `plan` (computed for `project`): builds, then promotes `plan.env`.
///
/// # Errors
/// [`ApplyError`]; on error the environment still serves what it served before.
pub fn apply(project: &Project, plan: &Plan, state: &dyn StateStore, engine: &mut dyn Engine, options: &Options) -> Result<ApplyReport, ApplyError> {
    execute(project, plan, state, engine, options, false)
}

/// [`apply`], or with `refresh` (`efmesh run`, see [`run`]): also re-execute the unchanged
/// `incremental_by_unique_key`, `incremental_by_partition` and `scd_type2` models of the plan
/// (upsert / replace / reconcile; on a `cron`, only when it ticked since their last refresh),
/// rebuild the `full` models on a `cron` that ticked, and never promote.
pub(crate) fn execute(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    options: &Options,
    refresh: bool,
) -> Result<ApplyReport, ApplyError> {
    if let Some(planned) = plan.generation
        && state.generation()? != planned
    {
        return Err(ApplyError::StalePlan { env: plan.env.clone() });
    }
    check_features(project, plan, engine.sql())?;
    // A table an earlier apply of this environment refreshed in place below a version whose
    // writes it would take back, and left marked (killed before its promotion or put-back), is
    // put back first (SPEC §4 invariant 65), before the work is decided; its mark goes with the
    // intents recorded below.
    inherited::recover_kept(project, state, engine, &plan.env)?;
    // What this apply or run writes besides the plan's builds and backfills, decided once.
    let work = crate::plan::work::decide(project, plan, state, refresh)?;
    shared_writes(project, plan, state, &work)?;
    shared_bounds(project, plan, state)?;
    // Before any engine write, one state transaction records every version this apply or run
    // reads or writes, so the janitor never claims them, and refuses when the janitor claimed
    // one since the plan was made (SPEC §4, the janitor's claim protocol).
    state.record_intents(&plan.env, &intents(plan), interval::now_millis())?;
    // Whether this apply or run may write tables of the engine's own database or of the DuckLake
    // catalog (builds, batches, refreshes, a forward-only version's added columns): then it
    // raises the epoch before its first write and again once it is done, failed or not (SPEC §4,
    // invariant 63), stamping the DuckLake catalog too when the project has DuckLake models.
    // (A model left to another environment's writes, `Work::left_to_writer`, writes nothing.)
    let refreshes_here = work.refreshes.iter().any(|r| !work.left_to_writer.contains(r));
    let writes_tables = (!work.work.is_empty() || refreshes_here || plan.actions.iter().any(|a| !a.new_columns.is_empty()))
        && project.dag.models().any(|m| {
            matches!(m.target, crate::core::Target::Table | crate::core::Target::DuckLake) && m.kind.is_materialized() && !matches!(m.kind, Kind::View)
        });
    // `(wanted, stamped)`: the closing stamp follows only an opening one (a command refused
    // before it, an older copy among them, must not stamp the database current).
    let mut stamp = (writes_tables, None);
    let result = execute_recorded(project, plan, state, engine, options, refresh, work, &mut stamp);
    // A build failing on a line of a CSV file an external reads names that external and its
    // kind's options, not only the model whose statement read the file.
    let result = result.map_err(|e| source_error::explain(project, &*engine, e));
    // A run never promotes: its audit failures do not say that nothing was promoted.
    let result = if refresh { result.map_err(ApplyError::in_run) } else { result };
    if let (true, Some(found)) = stamp {
        stamp_epoch(state, engine, found, uses_ducklake(project));
    }
    // A promotion removed the intents in its transaction; otherwise they go now (best effort:
    // a row left behind only keeps the janitor away until this environment's next apply or run).
    if (result.is_err() || refresh)
        && let Err(e) = state.clear_intents(&plan.env)
    {
        tracing::warn!("cannot forget the intents of `{}`: {e}", plan.env);
    }
    result
}

/// The closing raise of the epoch, after an opening one that stamped `opened`: raises the
/// engine database's epoch stamp of this state store to a newly issued epoch, then records it in
/// the store ([`crate::engine::epoch`]): the stamp first, so a process stopped in between leaves
/// the database ahead of the store, which later plans accept. With `ducklake`, the attached
/// DuckLake catalog is stamped with the same epoch before the store records it. When another
/// writer was issued an epoch since `opened`, the store records one more than the stamp: the
/// database is left behind ([`raise_epoch`]). A failure is only logged, saying how far the raise
/// went: the command's data and ledger are as its result says, and the database, the catalog and
/// the store keep epochs that later plans accept (the database at most ahead of the store, as
/// after a kill between the stamp and the record; SPEC §4, invariant 63). Until the next `apply`
/// or `run` writing tables raises the epoch again, a copy of the database taken while this
/// command wrote is not told from the current one.
fn stamp_epoch(state: &dyn StateStore, engine: &mut dyn Engine, opened: i64, ducklake: bool) {
    const UNTIL: &str = "until the next `apply` or `run` that writes tables raises the epoch, a copy of the database taken while this command wrote \
                         is not told from the current one";
    // With its cause ("database or disk is full"), on one line.
    let said = |e: ApplyError| with_causes(&e).replace("\n  caused by: ", ": ");
    let raised = match stamp_raised(state, engine, opened, Some(opened)) {
        Ok(raised) => raised,
        Err(e) => {
            let e = said(e);
            tracing::warn!(
                "the engine epoch was not raised at the end of this command: nothing was stamped, so the engine database keeps the stamp of \
                 its opening (epoch {opened}; {UNTIL}): {e}"
            );
            return;
        }
    };
    let epoch = raised.epoch;
    match record_raised(state, engine, &raised, ducklake, "after-epoch-stamp") {
        Ok(()) => tracing::debug!(epoch, "engine epoch stamped and recorded"),
        // The store already records the database behind (written before the stamp).
        Err(e) if raised.others => {
            tracing::warn!("the engine database was stamped with epoch {epoch} at the end of this command, but its last record failed: {}", said(e))
        }
        Err(e) => tracing::warn!(
            "the engine database was stamped with epoch {epoch} at the end of this command, but the state store did not record it: the database \
             is ahead of the store, as after a kill between the two, which is accepted (its data and the ledger are not affected); {UNTIL}, \
             and `state import` refuses an export taken meanwhile as older than the database (`--engine-ahead` imports it): {}",
            said(e)
        ),
    }
}

/// Raises the engine database's epoch stamp of this state store past `found` (the stamp the
/// database holds) to an epoch the store issues ([`StateStore::issue_epoch`]), with `ducklake`
/// stamps the attached DuckLake catalog with the same epoch ([`ducklake::stamp`]), then (after
/// the crash point `point`) records it in the store (the DuckLake epoch too, with `ducklake`);
/// returns the epoch stamped. The store records it last, so the database and the catalog are
/// never behind it by the command's own doing. [`stamp_raised`], then [`record_raised`].
///
/// `opened` is the epoch of this command's opening raise, for its closing one (`None` at the
/// opening): when another writer was issued an epoch since (the issued counter is no longer
/// `opened`) and this database does not hold it (a second writer of the same Postgres database
/// stamps it there), the database may lack that writer's writes, and the store records one more
/// than the stamp, before stamping it: the database is left behind, refused by the next plan
/// (SPEC §4, invariant 63), even when the command is killed between the two.
///
/// # Errors
/// The state store's reads or writes, or the engine's or the catalog's stamp.
fn raise_epoch(state: &dyn StateStore, engine: &mut dyn Engine, found: i64, opened: Option<i64>, ducklake: bool, point: &str) -> Result<i64, ApplyError> {
    let raised = stamp_raised(state, engine, found, opened)?;
    record_raised(state, engine, &raised, ducklake, point)?;
    Ok(raised.epoch)
}

/// An engine epoch [`stamp_raised`] stamped into the engine's database, not yet recorded by
/// [`record_raised`].
struct Raised {
    /// The state store whose stamp it is.
    store_id: String,
    /// The epoch stamped.
    epoch: i64,
    /// Another writer was issued an epoch since the command's opening raise: the store already
    /// records one more than `epoch` (the database behind), and records it so again.
    others: bool,
}

/// The first half of [`raise_epoch`]: issues an epoch and stamps the engine's database with it
/// (recording the store one past it first when another writer was issued one since `opened`).
///
/// # Errors
/// The state store's reads or writes, or the engine's stamp: nothing is stamped then.
fn stamp_raised(state: &dyn StateStore, engine: &mut dyn Engine, found: i64, opened: Option<i64>) -> Result<Raised, ApplyError> {
    let store_id = state.store_id()?;
    let mut others = false;
    let epoch = crate::engine::epoch::stamp(engine, &store_id, found, |held| -> Result<i64, ApplyError> {
        let issued = state.issue_epoch(held)?;
        others = opened.is_some_and(|o| issued.before != o && held < issued.before);
        if others {
            // Recorded before the stamp: this database must end behind the store, and a kill
            // between the two (or a failed record) must not leave it stamped past the store's
            // epoch, as current, while the other writer has already closed.
            state.record_engine_epoch(issued.epoch + 1, None)?;
        }
        Ok(issued.epoch)
    })?;
    Ok(Raised { store_id, epoch, others })
}

/// The second half of [`raise_epoch`]: with `ducklake`, stamps the DuckLake catalog with the
/// epoch `raised` stamped into the database, then (after the crash point `point`) records it in
/// the store (the state write `record-epoch:<point>` of the test hook
/// [`fault::state_write_point`]).
///
/// # Errors
/// The catalog's stamp or the store's write: the database is stamped, the store does not record
/// it (the database ahead, unless `raised.others`).
fn record_raised(state: &dyn StateStore, engine: &mut dyn Engine, raised: &Raised, ducklake: bool, point: &str) -> Result<(), ApplyError> {
    let (epoch, others) = (raised.epoch, raised.others);
    if ducklake {
        ducklake::stamp(engine, &raised.store_id, epoch)?;
    }
    fault::crash_point(|| point.to_string());
    if others {
        tracing::warn!(
            epoch,
            "another writer of this state store (another engine database) raised the engine epoch while this command wrote: this engine database \
             may lack its writes, so the store records it behind (the next plan refuses it, naming the ways out)"
        );
    }
    let recorded = if others { epoch + 1 } else { epoch };
    fault::state_write_point(&format!("record-epoch:{point}"), &state.location(), || state.record_engine_epoch(recorded, ducklake.then_some(epoch)))?;
    Ok(())
}

/// Whether the project has DuckLake models: its commands attach the DuckLake catalog
/// ([`ducklake::prepare_checked`]) and stamp it at every raise of the epoch.
fn uses_ducklake(project: &Project) -> bool {
    project.dag.models().any(|m| m.target == crate::core::Target::DuckLake)
}

/// What `apply` (or `run`) would refuse of `plan` before any write, for the commands that show a
/// plan to say so: a table another environment's version took over ([`shared_writes`]),
/// `start`/`end` outside another environment's bounds ([`shared_bounds`]). `work` is
/// [`crate::plan::work::decide`]'s for `plan`.
///
/// # Errors
/// The state store's reads; a refusal is `Ok(Some(_))`.
pub fn refusal(project: &Project, plan: &Plan, state: &dyn StateStore, work: &crate::plan::work::Work<'_>) -> Result<Option<ApplyError>, ApplyError> {
    match shared_writes(project, plan, state, work).and_then(|()| shared_bounds(project, plan, state)) {
        Ok(()) => Ok(None),
        Err(e @ ApplyError::Rejected { .. }) => Ok(Some(e)),
        Err(e) => Err(e),
    }
}

/// The versions `plan` reads or writes, as intents ([`StateStore::record_intents`]): every
/// action's version (which must exist unless this apply builds or registers it), the versions
/// whose storage it inherits (`reused_from`) or copies (an `scd_type2` history carried over),
/// and the versions stored in a lost relation whose ledger it resets.
pub fn intents(plan: &Plan) -> Vec<crate::state::Intent> {
    use crate::state::Intent;
    let mut out = Vec::new();
    for a in plan.actions.iter().filter(|a| a.change != Change::Removed) {
        let name = a.name.to_string();
        let physical = a.physical.clone().unwrap_or_default();
        // Versions this apply records itself: built, registered, inheriting storage (their
        // snapshot is written before any build), externals (never required).
        let creates = a.build || a.register || a.reused_from.is_some() || a.kind == "external";
        out.push(Intent { name: name.clone(), fingerprint: a.fingerprint.as_str().to_string(), physical: physical.clone(), must_exist: !creates });
        if let Some(from) = &a.reused_from {
            out.push(Intent { name: name.clone(), fingerprint: from.as_str().to_string(), physical: physical.clone(), must_exist: true });
        }
        if let Some(h) = &a.history
            && h.fate == crate::plan::HistoryFate::Carried
        {
            out.push(Intent { name: name.clone(), fingerprint: h.from.as_str().to_string(), physical: h.from_physical.clone(), must_exist: true });
        }
        if let Some(r) = &a.repair {
            for fp in &r.ledger_reset {
                out.push(Intent { name: name.clone(), fingerprint: fp.as_str().to_string(), physical: physical.clone(), must_exist: false });
            }
        }
    }
    out
}

/// Refuses, before anything is written, a plan whose models need a feature the engine lacks
/// ([`crate::engine::dialect::Feature`]): the first such model in plan order, with its file:line
/// and the feature.
///
/// # Errors
/// [`ApplyError::EngineFeature`].
pub fn check_features(project: &Project, plan: &Plan, dialect: &dyn crate::engine::dialect::Dialect) -> Result<(), ApplyError> {
    for action in plan.actions.iter().filter(|a| a.change != Change::Removed) {
        let Some(model) = project.dag.get(&action.name) else { continue };
        if let Some(feature) = crate::engine::dialect::Feature::needed_by(model).filter(|f| !dialect.supports(*f)) {
            return Err(ApplyError::EngineFeature {
                model: model.name.clone(),
                location: model.location.clone(),
                feature: feature.describe(),
                engine: dialect.title(),
            });
        }
    }
    Ok(())
}

/// [`execute`] once the intents are recorded; when `stamp.0` (the command may write tables),
/// raises the engine epoch before the first write and sets `stamp.1` to the epoch stamped (for
/// [`stamp_epoch`] after it, failed or not).
#[allow(clippy::too_many_arguments)]
fn execute_recorded(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    options: &Options,
    refresh: bool,
    work: crate::plan::work::Work<'_>,
    stamp: &mut (bool, Option<i64>),
) -> Result<ApplyReport, ApplyError> {
    // History is never discarded without an explicit choice: checked before anything is written.
    if let Some(refusal) = crate::plan::history_refusal(plan) {
        return Err(ApplyError::HistoryReset(refusal));
    }
    scd2::check_carried(project, plan, engine)?;
    // This store records, on this connection and before the check below, every relation it may
    // serve, so no other store's janitor drops one from now on and one dropped before is found
    // missing just below (SPEC §4, invariant 39 (e)).
    let uses: Vec<String> = intents(plan).into_iter().map(|i| i.physical).collect();
    let mut known =
        || -> Result<Vec<String>, String> { Ok(state.janitor_inventory().map_err(|e| e.to_string())?.versions.into_iter().map(|v| v.physical).collect()) };
    crate::ownership::register_uses(engine, &state.store_id()?, &uses, &mut known).map_err(|message| ApplyError::Target {
        model: None,
        interval: None,
        message,
    })?;
    // The store's engine epoch is read before the catalog: a writer stamps the database before
    // it records its epoch, so an epoch recorded by then is in the catalog read below, and one
    // recorded while it is read never makes the database look behind (SPEC §4, invariant 63;
    // `plan::integrity::Observed`).
    let epoch = state.engine_epoch()?;
    // The relations the plan relies on must exist (one catalog query, on this connection, or
    // the catalog proven current when it opened): what the plan does not restore is refused,
    // never trusted (SPEC §4).
    let catalog = match &options.catalog_at_open {
        Some(known) => {
            tracing::debug!("the plan checked against the catalog proven at the open (not queried again)");
            known.0.clone()
        }
        None => std::sync::Arc::new(engine.catalog()?),
    };
    let missing = crate::plan::integrity::unplanned(project, plan, &catalog);
    if !missing.is_empty() {
        return Err(ApplyError::EngineChanged { env: plan.env.clone(), missing });
    }
    // A database older than the store says (restored, or another one applied since) is refused
    // here too: the plan may have been checked against another catalog (SPEC §4, invariant 63).
    if let Some(message) = crate::plan::integrity::engine_behind(&project.config, state, epoch, &catalog)? {
        return Err(ApplyError::EngineBehind(message));
    }
    let working_set: BTreeSet<ModelName> = work.work.iter().map(|a| a.name.clone()).collect();
    // A DuckLake table the plan relies on and does not build anew must be in the catalog: the
    // plan cannot see DuckLake's tables, so a lost one is refused here, never re-created empty
    // to hold only this command's intervals; and a catalog older than the store's epoch (restored
    // from a copy) is refused too. Before the epoch is raised: a refused catalog is never stamped.
    ducklake::prepare_checked(project, plan, state, &working_set, engine)?;
    // Environment views another state store made are never re-pointed (SPEC §4, invariant 64):
    // checked before the epoch is raised or anything is built; `run` moves no view.
    if !refresh {
        check_view_owners(project, plan, state, engine, &catalog)?;
    }
    // Before its first write to a table, the epoch is raised in the database, then in the store:
    // a copy of the database taken before this command is then behind the store even when the
    // command is stopped part-way (its writes recorded, its closing stamp never made), and a
    // new file (the old one moved aside, holding none of the store's tables: the check above
    // let it through) is current, so a rebuild stopped part-way is not taken for an older copy.
    if stamp.0 {
        let found = crate::engine::epoch::stamped(&catalog, &state.store_id()?);
        stamp.1 = Some(raise_epoch(state, engine, found, None, uses_ducklake(project), "after-first-epoch-stamp")?);
    }
    // A relation of the user's where a new model's view would go (made since the plan).
    if let Some((model, message)) = crate::plan::integrity::foreign_relation(project, plan, &catalog) {
        return Err(ApplyError::Rejected { model: model.name.clone(), location: model.location.clone(), message });
    }
    let physicals: BTreeMap<ModelName, String> =
        plan.actions.iter().filter(|a| a.change != Change::Removed).filter_map(|a| a.physical.clone().map(|p| (a.name.clone(), p))).collect();
    // The relation each model's version in this plan is stored in, by name (SPEC §4 invariant 36 (e)).
    let relation_by_name: HashMap<String, String> = physicals.iter().map(|(n, p)| (n.to_string(), p.clone())).collect();
    let relation_of = |n: &str| relation_by_name.get(n).cloned();
    let crate::plan::work::Work { work, rebuilds, mut shared, left_shared, left_to_writer, .. } = work;
    for name in &left_shared {
        tracing::info!(model = %name, "not rebuilt: its table is also served by another version of it (another environment reads it)");
    }
    for left in &left_to_writer {
        tracing::warn!(model = %left.model, "{}", left.note);
    }

    // Storage targets first: promotion alone binds views over lake files and DuckLake tables
    // (the DuckLake catalog was attached above).
    lake::prepare(project, engine)?;
    // This store is recorded in the owner marker of the storage it is about to write (SPEC §4, 39 (d)).
    if !work.is_empty() || plan.actions.iter().any(|a| a.repair.as_ref().is_some_and(crate::plan::integrity::Repair::relists_lake)) {
        let uses = |t: crate::core::Target| project.dag.models().any(|m| m.target == t);
        let me = state.store_id()?;
        crate::ownership::register(
            &project.config,
            &me,
            engine,
            uses(crate::core::Target::Parquet),
            uses(crate::core::Target::DuckLake),
            &interval::to_iso(interval::now_millis()),
        )
        .map_err(|message| ApplyError::Target { model: None, interval: None, message })?;
    }

    // Lost lake views over intact lake directories, and lake views with done intervals whose file
    // is missing, are re-created first (children's contracts read them); the intervals whose file
    // is missing are marked failed before the view is re-created over the done ones' files and
    // they are recomputed, so the ledger describes the files again. Those outside the model's
    // `start`/`end` (done under wider bounds) cannot be recomputed under these: they are cleared
    // from the ledger (forgotten), never left done without their file (the re-list refuses that).
    let relisted: Vec<&crate::plan::Action> =
        plan.actions.iter().filter(|a| a.repair.as_ref().is_some_and(crate::plan::integrity::Repair::relists_lake)).collect();
    if !relisted.is_empty() {
        engine.execute(&engine.sql().create_schema_if_absent(crate::plan::PHYSICAL_SCHEMA))?;
    }
    for action in relisted {
        let (Some(model), Some(physical), Some(repair)) = (project.dag.get(&action.name), &action.physical, &action.repair) else { continue };
        if repair.lake_files_missing && model.kind.time_range().is_none() {
            // A full version whose file is lost: rebuilt below (its build re-creates the view).
            continue;
        }
        if let Some(t) = model.kind.time_range() {
            let name = action.name.to_string();
            let lost: BTreeSet<i64> = repair.lost_files.iter().map(|i| i.start).collect();
            for fp in &repair.ledger_reset {
                let gone: Vec<Interval> =
                    state.done_intervals(&name, fp.as_str())?.into_iter().filter(|s| lost.contains(s)).map(|s| Interval::new(s, t.grain.next(s))).collect();
                state.mark_intervals(&name, fp.as_str(), &gone, IntervalStatus::Failed, interval::now_millis())?;
                // (Each merged range holds only forgotten grain starts: every done interval there
                // lost its file.)
                for range in interval::merge(&repair.forgotten) {
                    state.clear_intervals(&name, fp.as_str(), range.start, range.end)?;
                }
            }
            if !repair.forgotten.is_empty() {
                tracing::warn!(model = %action.name, intervals = repair.forgotten.len(), "done intervals outside its start/end lost their lake files: forgotten, not recomputed");
            }
        }
        lake::refresh(project, model, physical, state, engine)?;
    }

    if !work.is_empty() {
        engine.execute(&engine.sql().create_schema_if_absent(crate::plan::PHYSICAL_SCHEMA))?;
        let mut problems = contract::check(project, &physicals, &working_set, engine);
        // Seeds are parsed and their values typed here, so a bad value builds nothing.
        let mistyped: BTreeSet<ModelName> = problems.iter().map(|p| p.model.clone()).collect();
        problems.extend(seed::stage(project, &working_set, &mistyped, engine));
        if !problems.is_empty() {
            seed::drop_stages(project, &working_set, engine);
            return Err(ApplyError::Contract(problems));
        }
    }
    let stored = stored_time_range_columns(project, &work, &catalog, engine)?;
    let mut report = ApplyReport::default();
    // Models whose audits ran while they were built in this apply.
    let mut audited: BTreeSet<ModelName> = BTreeSet::new();
    // The external sources this apply or run reads into a write are audited in it: their data
    // changes outside efmesh. Those read into a table an environment already serves (a backfill,
    // a refresh, a rebuild, anything `run` writes) before anything is written, so a source failing
    // a blocking audit never reaches what is served; those read only into the tables of versions
    // the environment points at anew before the promotion, as a source it points at anew.
    let into_served: Vec<&crate::plan::Action> = work.iter().copied().filter(|a| refresh || !writes_a_new_table(a)).collect();
    let during = if refresh { "run" } else { "apply" };
    // The models whose data, as an environment serves it, this command changes: written here, or
    // pointed at anew.
    let mut changing: BTreeSet<ModelName> =
        work.iter().map(|a| a.name.clone()).chain(plan.actions.iter().filter(|a| !refresh && a.points_anew()).map(|a| a.name.clone())).collect();
    through_storeless(project, plan, &mut changing);
    let mut gated = source_gate(project, &into_served, &ExecResolver::new(project, &physicals, Mode::Execute), engine, &mut report, (during, &changing))?;
    // The `embedded` and `view` models the writes read store nothing: what they serve follows
    // what they read, so their audits guard every write reading them, as a source's do. Those
    // over nothing this command writes run here, before anything is written; the others just
    // before the first write reading them, once what they read is written ([`Builder::gate_reads`]).
    let mut upstream_written: BTreeSet<ModelName> =
        work.iter().filter(|a| project.dag.get(&a.name).is_some_and(|m| !matches!(m.kind, Kind::Embedded))).map(|a| a.name.clone()).collect();
    through_storeless(project, plan, &mut upstream_written);
    let writers: Vec<&crate::plan::Action> = work.iter().copied().filter(|a| project.dag.get(&a.name).is_some_and(|m| writes_rows(m, a))).collect();
    let failures = storeless_gate(
        project,
        &writers,
        &ExecResolver::new(project, &physicals, Mode::Execute),
        engine,
        &mut report,
        &mut gated,
        (&changing, &working_set, &upstream_written),
    )?;
    if !failures.is_empty() {
        return Err(ApplyError::SourceAudit { during, sources: false, failures });
    }
    audited.extend(project.dag.models().filter(|m| fully_gated(&gated, m)).map(|m| m.name.clone()));
    // (A version the environment points at anew may have been built by an earlier apply that
    // stopped before its promotion: its source is audited as for a build here.)
    let into_new: Vec<&crate::plan::Action> = if refresh {
        Vec::new()
    } else {
        let pointed = plan.actions.iter().filter(|a| a.points_anew());
        work.iter().copied().filter(|a| writes_a_new_table(a)).chain(pointed).collect()
    };
    let read_anew: BTreeSet<ModelName> =
        sources_read(project, &into_new).into_iter().filter(|m| !m.audits.is_empty() && !fully_gated(&gated, m)).map(|m| m.name.clone()).collect();
    // Of those, time-range models whose batches' audits do not cover their table (it held
    // batches no pass of the same audits covers): audited whole before the view swap.
    let mut uncovered: BTreeSet<ModelName> = BTreeSet::new();
    // The version of every model this plan leads to: a `full` build records its parents' data
    // generations at these versions (SPEC §4 invariant 36).
    let versions: HashMap<String, String> =
        plan.actions.iter().filter(|a| a.change != Change::Removed).map(|a| (a.name.to_string(), a.fingerprint.as_str().to_string())).collect();

    // Versions that inherit storage (indirect reuse, forward-only): recorded before any build,
    // so a resumed apply finds them. Metadata-only changes write nothing here: the metadata an
    // environment serves is recorded with its pointers by the promotion, never in a snapshot
    // that other environments serve too.
    for action in plan.actions.iter().filter(|a| a.change != Change::Removed) {
        let Some(model) = project.dag.get(&action.name) else { continue };
        let Some(from) = &action.reused_from else { continue };
        let physical = action.physical.clone().unwrap_or_default();
        if model.target == crate::core::Target::Parquet {
            // A lake view cannot be altered: re-create it anchored on the new declared columns
            // and those of every other version stored there (an older version re-listing the view
            // a forward-only one shares keeps the added columns, `lake::refresh`); a full version
            // whose file is lost is rebuilt below instead.
            if !(action.repair.as_ref().is_some_and(|r| r.lake_files_missing) && model.kind.time_range().is_none()) {
                lake::refresh(project, model, &physical, state, engine)?;
            }
        } else if !action.new_columns.is_empty() && !physical_missing(action) {
            // (A lost table is rebuilt below with every column; there is nothing to alter.)
            // Forward-only: new columns arrive empty; only intervals computed from now on fill them.
            let present: Vec<String> = engine.describe(&format!("SELECT * FROM {physical}"))?.into_iter().map(|c| c.name).collect();
            // With the query's types, as a build would create them (not the declared ones).
            let described = contract::query_columns(project, &physicals, &working_set, model, engine).map_err(|e| ApplyError::build(model, None, e))?;
            let adds: Vec<String> = action
                .new_columns
                .iter()
                .filter(|c| !present.iter().any(|p| p.eq_ignore_ascii_case(&c.name)))
                .map(|c| engine.sql().add_column(&physical, &c.name, contract::column_type(&described, &c.name, &c.ty)))
                .collect();
            if !adds.is_empty() {
                engine.transaction(&adds).map_err(|e| ApplyError::build(model, None, e))?;
            }
        }
        let snapshot = snapshot_record(crate::engine::dialect_for(&project.config), model, action, &physical)?;
        if matches!(model.kind, Kind::Full) {
            // A record no generation matches until this apply proves the inherited table current
            // (after its parents are built, below): a process stopped in between leaves a version
            // the next plan rebuilds, never one trusted unproven (SPEC §4 invariant 36 (c)).
            let current = read_sources(project, &versions, &model.name, state)?;
            state.record_reuse(&snapshot, &crate::plan::generations::never_matching(&current), interval::now_millis())?;
        } else {
            state.put_snapshot(&snapshot)?;
        }
        if model.kind.time_range().is_some() {
            // With the times they were written: this version did not write them.
            state.inherit_done(&action.name.to_string(), from.as_str(), action.fingerprint.as_str(), interval::now_millis())?;
        }
    }

    // Done intervals recomputed because a model upstream rewrites them (SPEC §4 invariant 62):
    // taken out of the ledger before any model is written (after inherited ledgers are copied
    // above), so an apply or run stopped after the parent's rewrite committed and before the
    // recompute did leaves them missing, not done over the parent's old rows (the next plan
    // would not find them otherwise: the parent is done). As a restatement clears them: missing,
    // not failed.
    for action in &work {
        let (Some(r), Some(t)) = (&action.recompute, project.dag.get(&action.name).and_then(|m| m.kind.time_range())) else { continue };
        let computed: BTreeSet<Interval> = action.backfill.iter().flat_map(|b| b.split(t.grain)).collect();
        let gone: Vec<Interval> = r.added.iter().filter(|i| computed.contains(i)).copied().collect();
        for range in interval::merge(&gone) {
            state.clear_intervals(&action.name.to_string(), action.fingerprint.as_str(), range.start, range.end)?;
        }
    }

    // Lake views created under another project root are re-listed from the lake as it is now.
    for action in plan.actions.iter().filter(|a| !a.build && a.repair.as_ref().is_some_and(|r| r.created_under.is_some())) {
        if let (Some(model), Some(physical)) = (project.dag.get(&action.name), &action.physical)
            && model.target == crate::core::Target::Parquet
        {
            lake::refresh(project, model, physical, state, engine)?;
        }
    }

    state.record_pending_rebuilds(&rebuilds, interval::now_millis())?;
    let pending: BTreeSet<(String, String)> = rebuilds.into_iter().map(|(name, fp, _)| (name, fp)).collect();

    let exec = ExecResolver::new(project, &physicals, Mode::Execute);
    // The lifecycle lines (`builds planned`, `build start`, `backfill batch`, `build done`) also
    // drive the CLI's progress bar: their messages and fields are an interface.
    let builds = work.iter().filter(|a| project.dag.get(&a.name).is_some_and(|m| !matches!(m.kind, Kind::Embedded))).count();
    tracing::info!(env = %plan.env, models = builds, "builds planned");
    // What each model waits for: the models of the working set it reads, directly or through
    // models outside it (an embedded or unchanged model reading one).
    let deps = work_dependencies(project, &work);
    // Built on a worker's connection: the kinds whose build is statements alone, into tables of
    // the engine's own database, without pre/post statements. The rest (seeds, keyed kinds, lake
    // and DuckLake targets) need this connection (its temporary stages, its attachments), and
    // models with statements run here so that no two run theirs at once (two `CREATE SCHEMA IF
    // NOT EXISTS` of one schema conflict in parallel): here, one at a time.
    let parallel: Vec<bool> = work
        .iter()
        .map(|a| {
            project.dag.get(&a.name).is_some_and(|m| {
                m.target == crate::core::Target::Table && matches!(m.kind, Kind::Full | Kind::View | Kind::IncrementalByTimeRange(_)) && m.statements.is_empty()
            })
        })
        .collect();
    // A statement that may change its session (a `SET`, a temporary object…) reaches every later
    // model of a sequential apply, on its one connection: with several connections which models it
    // reached would depend on timing, so such a plan is built one model at a time.
    let jobs = match session_statement(project, &work, &exec) {
        Some(at) if options.effective_jobs() > 1 => {
            tracing::info!("built one model at a time: {at} may change its session's settings, which reach every later model");
            1
        }
        _ => options.effective_jobs(),
    };
    // The audits of file sources the promotion runs (below) read only files: with more than one
    // job they run meanwhile on a connection of their own, and the promotion takes their results.
    let early = early_source_audits(project, plan, &work, &exec, refresh, jobs, (&read_anew, &gated));
    let early_db = if early.is_empty() { None } else { engine.worker() };
    // Set, and the running audit interrupted, when the apply fails meanwhile: their results
    // would never be used, and the failure is reported without waiting for them.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let cancel = early_db.as_ref().and_then(|db| db.canceller());
    // With `--retries`: what this attempt committed, taken before the earlier attempts' is merged
    // into its report (added to theirs if it fails after that).
    let mut own: Option<Committed> = None;
    // What the versions inheriting a table write there, and the done intervals a forward-only
    // version's batches rewrite, taken from the other versions stored there before any write:
    // taken back (and given back) if the apply fails ([`inherited`], SPEC §4 invariant 65).
    let mut wrote = inherited::Wrote::new();
    let mut cleared = inherited::Cleared::new();
    // The copies of the unique-key, partition and SCD type 2 tables refreshed in place below
    // those versions, taken before their refresh: put back if the apply fails.
    let mut kept = inherited::Keeps::new();
    // The versions writing batches into a table other versions are stored in (an apply's only:
    // a run writes its environment's own versions).
    let inheriting = if refresh { BTreeSet::new() } else { inherited::inheriting(project, state, &work)? };
    let outcome = std::thread::scope(|scope| {
        let mut under_way = early_db.map(|db| {
            tracing::debug!(sources = early.len(), "audits of file sources run while the models are built");
            let (dispatch, stop) = (tracing::dispatcher::get_default(Clone::clone), &stop);
            scope.spawn(move || tracing::dispatcher::with_default(&dispatch, || run_early_audits(db, early, stop)))
        });
        let outcome = (|| -> Result<(), ApplyError> {
            let at_risk = if refresh {
                BTreeSet::new()
            } else {
                cleared = inherited::clear_rewritten(project, state, &work, &inheriting)?;
                inherited::at_risk(state, &work, &inheriting)?
            };
            {
                // Tables this environment shares with `prod`, which writes them under other
                // audits: audited before anything is built or refreshed, so no model of this run
                // or apply computes from rows this environment's blocking audits refuse (an apply
                // building a new child of such a table, too).
                let (failures, writers) = shared_table_audits(project, plan, state, engine, &exec, (&working_set, refresh), &mut report)?;
                if let Some(first) = failures.first() {
                    return Err(ApplyError::SharedAudit { model: first.model.clone(), writers, failure: audit::AuditError::Failed(failures) });
                }
            }
            let mut builder = Builder {
                project,
                plan,
                state,
                work: &work,
                exec: &exec,
                versions: &versions,
                pending: &pending,
                relation_of: &relation_of,
                catalog: &catalog,
                stored: &stored,
                shared: &mut shared,
                report: &mut report,
                audited: &mut audited,
                uncovered: &mut uncovered,
                gated: &mut gated,
                changing: &changing,
                working_set: &working_set,
                during,
                flights: HashMap::new(),
                complete: HashMap::new(),
                stored_in: None,
                wrote: &mut wrote,
                at_risk: &at_risk,
                inheriting: &inheriting,
                kept: &mut kept,
            };
            schedule::schedule(&mut builder, &deps, &parallel, engine, jobs)?;
            // Reported in the plan's (topological) order, whichever finished first.
            let position: HashMap<&ModelName, usize> = work.iter().enumerate().map(|(i, a)| (&a.name, i)).collect();
            let at = |n: &ModelName| position.get(n).copied().unwrap_or(usize::MAX);
            report.built.sort_by_key(|n| at(n));
            report.registered.sort_by_key(|n| at(n));
            report.audits.0.sort_by_key(|r| at(&r.model));
            // The models this attempt built (the report lists those of earlier attempts too, below).
            let built_here: BTreeSet<ModelName> = report.built.iter().cloned().collect();
            // What earlier attempts of a retried command committed (their plans' builds and
            // intervals, which this attempt's plan no longer lists) is reported with this one's,
            // journaled with the promotion, and read by the audits of what was written.
            if let Some(committed) = &options.committed {
                own = Some(Committed::of(&report));
                committed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).merge_into(&mut report, plan);
            }

            // `full` versions inheriting a table and not rebuilt: their parents are built now, so what
            // the inherited table was built from can be compared with what their sources hold.
            if plan.actions.iter().any(|a| a.reused_from.is_some() && a.kind == "full") {
                let index = state.snapshot_index()?;
                for action in
                    plan.actions.iter().filter(|a| a.change != Change::Removed && a.kind == "full" && a.reused_from.is_some() && !built_here.contains(&a.name))
                {
                    let (Some(model), Some(from)) = (project.dag.get(&action.name), &action.reused_from) else { continue };
                    let snapshot = snapshot_record(crate::engine::dialect_for(&project.config), model, action, &action.physical.clone().unwrap_or_default())?;
                    let current = read_sources(project, &versions, &model.name, state)?;
                    let record = crate::plan::generations::reuse_record(state, &index, &snapshot.name, from.as_str(), &current)?;
                    state.record_reuse(&snapshot, &record, interval::now_millis())?;
                }
            }

            if !plan.canon_cache_misses.is_empty() {
                // The cache is not data: failing to write it only costs a slower next plan.
                if let Err(e) = state.canon_cache_put(&plan.canon_cache_misses) {
                    tracing::warn!("cannot write the canonicalisation cache: {e}");
                }
            }

            if refresh {
                // Audits of other models reading what this run wrote run again over their whole
                // relation (SPEC §4 invariant 52); the writes are committed, a failure fails the run.
                let mut written: BTreeSet<ModelName> = report.built.iter().cloned().collect();
                through_storeless(project, plan, &mut written);
                let failures = ref_audits(project, plan, engine, &exec, &audited, &BTreeMap::new(), &written, &mut report, "run")?;
                if let Some(first) = failures.first() {
                    let read: BTreeSet<ModelName> =
                        failures.iter().filter_map(|f| project.dag.get(&f.model)).flat_map(|m| m.audit_refs()).filter(|r| written.contains(r)).collect();
                    return Err(ApplyError::RunAudit {
                        model: first.model.clone(),
                        written: read.into_iter().collect(),
                        failure: audit::AuditError::Failed(failures),
                    });
                }
                return Ok(());
            }
            // A thread that stopped (panicked) leaves its audits to the promotion, which runs them here.
            let early = under_way.take().and_then(|h| h.join().ok()).unwrap_or_default();
            pre_promotion_audits(project, plan, state, engine, &exec, &audited, &uncovered, (&read_anew, &gated), early, &mut report)?;
            // With nothing built, no statement of this apply touched a view yet: the catalog
            // proven at the open still holds the views' definitions.
            let known = options.catalog_at_open.as_ref().map(|c| &*c.0).filter(|_| work.is_empty());
            promote(project, plan, state, engine, options, &report, known)?;
            report.promoted = true;
            // The memo is a cache: failing to write it only costs a slower next plan.
            if let Err(e) = record_memo(project, plan, state) {
                tracing::warn!("cannot write the plan memo: {e}");
            }
            Ok(())
        })();
        if outcome.is_err()
            && let Some(handle) = under_way.take()
        {
            tracing::debug!("the apply failed: the audits of file sources under way are interrupted");
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(cancel) = &cancel {
                cancel();
            }
            // Joined here, so a panic of the thread stays its own and the apply's error is reported.
            let _ = handle.join();
        }
        outcome
    });
    if outcome.is_err() && !refresh && !report.promoted {
        // Environments serve exactly what their versions' ledgers record: the rows a version
        // no environment serves wrote into a table they serve are taken back. Not done any
        // more, their intervals are not reported as committed (a `--retries` attempt computes
        // them again and counts them).
        let back = inherited::take_back(project, state, engine, (&work, &inheriting), &wrote, &cleared);
        for name in &back.taken {
            forget_intervals(&mut report.per_model, &mut report.intervals, name);
            if let Some(own) = own.as_mut() {
                forget_intervals(&mut own.per_model, &mut own.intervals, name);
            }
        }
        // The keyed tables refreshed in place below them get what they held back; the others
        // are refreshed again by the next run or apply.
        let restored = inherited::put_back(project, state, engine, &back.refused, &mut kept);
        inherited::refresh_again(project, state, &plan.env, &work, &back.taken, &restored);
    }
    inherited::drop_kept(engine, &mut kept);
    if let (Err(_), Some(committed)) = (&outcome, &options.committed) {
        // A later attempt reports what this one committed before it failed.
        let mine = own.take().unwrap_or_else(|| Committed::of(&report));
        committed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(mine);
    }
    outcome.map(|()| report)
}

/// The first pre/post statement of a model to build that may change its session
/// ([`crate::sql::statements::may_change_session`]), as "the pre-statement 1 of model `m`
/// (file:line)"; `None` when there is none.
fn session_statement(project: &Project, work: &[&crate::plan::Action], exec: &ExecResolver<'_>) -> Option<String> {
    let grammar = crate::plan::lineage::grammar(project);
    work.iter().filter_map(|a| project.dag.get(&a.name)).find_map(|m| {
        m.statements
            .each()
            .find(|(_, _, st)| crate::sql::statements::may_change_session(&st.sql.render(exec), grammar))
            .map(|(when, i, st)| format!("the {when}-statement {i} of model `{}` ({})", m.name, st.location))
    })
}

/// Runs `early` ([`early_source_audits`]) on `db`, in order, until `stop` is set.
fn run_early_audits(
    mut db: Box<dyn Engine + Send>,
    early: Vec<(ModelName, Vec<(&crate::core::audit::Audit, String)>)>,
    stop: &std::sync::atomic::AtomicBool,
) -> HashMap<ModelName, Result<Vec<audit::AuditResult>, audit::AuditError>> {
    let mut out = HashMap::new();
    for (name, checks) in early {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        let results = audit::run(&mut *db, &name, &checks, None);
        out.insert(name, results);
    }
    out
}

/// The audits [`pre_promotion_audits`] will run over file sources (external models reading
/// files) that can run while the models are built, each with its rendered checks: in `apply`
/// with more than one job, for sources this plan adds or changes whose audits provably read
/// nothing but the source ([`audit::read_only_the_audited`]), when no model
/// built here can write files or change the session (no lake or DuckLake target, whose writes
/// a source could read; no pre/post statements, which may `COPY … TO` a file or `SET` what the
/// audits would see on the apply's connection). Their queries then read files nobody in the
/// apply writes, so running them earlier sees what running them after the builds would (SPEC
/// §4 step 5). An apply that fails meanwhile stops them (the one under way is interrupted
/// through [`Engine::canceller`]) before it reports.
fn early_source_audits<'p>(
    project: &'p Project,
    plan: &Plan,
    work: &[&crate::plan::Action],
    exec: &ExecResolver,
    refresh: bool,
    jobs: usize,
    (read_anew, gated): (&BTreeSet<ModelName>, &Gated),
) -> Vec<(ModelName, Vec<(&'p crate::core::audit::Audit, String)>)> {
    use crate::core::Resolver;
    let may_write = work.iter().any(|a| {
        project.dag.get(&a.name).is_some_and(|m| m.target != crate::core::Target::Table || !m.statements.pre.is_empty() || !m.statements.post.is_empty())
    });
    if refresh || jobs < 2 || may_write {
        return Vec::new();
    }
    plan.actions
        .iter()
        .filter(|a| !matches!(a.change, Change::Unchanged | Change::Removed) || read_anew.contains(&a.name))
        .filter_map(|a| project.dag.get(&a.name))
        .filter(|m| !gated.contains_key(&m.name))
        .filter(|m| matches!(m.kind, Kind::External(crate::core::External::Files { .. })) && !m.audits.is_empty() && audit::read_only_the_audited(m))
        .map(|m| (m.name.clone(), audit::checks(m, None, &exec.relation(&m.name), exec)))
        .collect()
}

/// True when `action` writes a table no environment serves yet: a new version's build (not a
/// lost relation rebuilt, which its environments' views name).
fn writes_a_new_table(action: &crate::plan::Action) -> bool {
    action.build && !physical_missing(action)
}

/// The external sources whose rows the models of `work` read when they are written: their
/// parents, and the parents of the `view` and `embedded` models between (which store nothing),
/// in the plan's order.
fn sources_read<'p>(project: &'p Project, work: &[&crate::plan::Action]) -> Vec<&'p crate::core::Model> {
    let parents = work.iter().filter_map(|a| project.dag.get(&a.name)).flat_map(|m| m.parents()).collect();
    let mut out: Vec<&crate::core::Model> = crate::plan::generations::read_through(project, parents)
        .iter()
        .filter_map(|n| project.dag.get(n))
        .filter(|m| matches!(m.kind, Kind::External(_)))
        .collect();
    out.sort_by_key(|m| project.dag.position(&m.name));
    out
}

/// Runs the audits of every external source [`sources_read`] finds for `work` (writes into tables
/// an environment serves) before anything is written (SPEC §4 invariant 44): the rows of a source
/// change outside efmesh, so its audits are not only the promotion's. An audit that `ref`s a
/// model in `changing` (written or pointed at anew by this command) waits for it. A blocking
/// failure stops the apply or run with nothing written. Returns the audits it ran, by source:
/// the promotion does not run them again.
///
/// # Errors
/// [`ApplyError::SourceAudit`] for every blocking failure, together; [`ApplyError::Audit`] for an
/// audit that could not run.
fn source_gate(
    project: &Project,
    work: &[&crate::plan::Action],
    exec: &ExecResolver,
    engine: &mut dyn Engine,
    report: &mut ApplyReport,
    (during, changing): (&'static str, &BTreeSet<ModelName>),
) -> Result<Gated, ApplyError> {
    use crate::core::Resolver;
    let mut failures = Vec::new();
    let mut gated = Gated::new();
    for model in sources_read(project, work).into_iter().filter(|m| !m.audits.is_empty()) {
        // An audit that `ref`s a model whose data this apply or run changes reads it as the
        // command leaves it (written first, invariant 52): it runs after the writes, with the
        // promotion's or `run`'s audits of what was written ([`ref_audits`]); any other, here.
        let checks: Vec<_> = audit::checks(model, None, &exec.relation(&model.name), exec)
            .into_iter()
            .filter(|(a, _)| a.sql.refs().all(|r| !changing.contains(&r.target)))
            .collect();
        if checks.is_empty() {
            continue;
        }
        gated.insert(model.name.clone(), checks.iter().map(|(a, _)| a.label()).collect());
        tracing::info!(model = %model.name, "audits of a source read by this {during}'s writes run before them");
        run_whole_audits(engine, &model.name, &checks, &mut failures, report)?;
    }
    if !failures.is_empty() {
        return Err(ApplyError::SourceAudit { during, sources: true, failures });
    }
    Ok(gated)
}

/// True when the build of `action` writes rows into a table or lake files: not a `view` or an
/// `embedded` model (they store nothing), nor a seed (it reads no model), nor a time-range model
/// with no interval to compute.
fn writes_rows(model: &crate::core::Model, action: &crate::plan::Action) -> bool {
    !matches!(model.kind, Kind::Embedded | Kind::View | Kind::Seed(_) | Kind::External(_)) && (model.kind.time_range().is_none() || !action.backfill.is_empty())
}

/// The `embedded` and `view` models the queries of `readers` read: their parents of those kinds,
/// and the parents of those kinds of these (which store nothing: reading one reads through it),
/// in the project's order.
fn storeless_read<'p>(project: &'p Project, readers: &[&crate::plan::Action]) -> Vec<&'p crate::core::Model> {
    let mut stack: Vec<ModelName> = readers.iter().filter_map(|a| project.dag.get(&a.name)).flat_map(|m| m.parents()).collect();
    let mut seen: BTreeSet<ModelName> = BTreeSet::new();
    let mut out: Vec<&crate::core::Model> = Vec::new();
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(model) = project.dag.get(&name) else { continue };
        if matches!(model.kind, Kind::Embedded | Kind::View) {
            stack.extend(model.parents());
            out.push(model);
        }
    }
    out.sort_by_key(|m| project.dag.position(&m.name));
    out
}

/// True when `model` is an `embedded` model whose inlined query uses interval bounds (its own
/// body, or an embedded model it reads): its rows are those of its time-range reader's batch, so
/// it has no relation of its own to audit before the writes.
fn inlines_bounds(project: &Project, model: &crate::core::Model) -> bool {
    matches!(model.kind, Kind::Embedded)
        && (model.body.as_ref().is_some_and(crate::core::fragment::Fragment::uses_bounds)
            || model.parents().iter().filter_map(|p| project.dag.get(p)).any(|p| inlines_bounds(project, p)))
}

/// Runs the audits of the `embedded` and `view` models the writes of `readers` read
/// ([`storeless_read`]) against what those writes read (SPEC §4 step 5): an embedded model's
/// query as it is inlined, a view model's relation at the version the plan leads to. They store
/// nothing, so what they serve changes with what they read, outside their own builds, as a
/// source's rows do. Left out: a `view` model in `built` (built by this command, before anything
/// reads it: its build ran its audits), an embedded model using interval bounds
/// ([`inlines_bounds`]), the models in `wait` (over something this command writes: they run just
/// before the first write reading them, once that is written, [`Builder::gate_reads`]), audits
/// already run in this command (`gated`), and audits that `ref` a model in `changing` (they run
/// after that model is written, with the promotion's or `run`'s audits of what it wrote,
/// invariant 52). Records what ran in `gated` (the promotion does not run them again) and in
/// `report`; returns the blocking failures (warn ones are logged).
///
/// # Errors
/// [`ApplyError::Audit`] for an audit that could not run.
#[allow(clippy::too_many_arguments)]
fn storeless_gate(
    project: &Project,
    readers: &[&crate::plan::Action],
    exec: &ExecResolver,
    engine: &mut dyn Engine,
    report: &mut ApplyReport,
    gated: &mut Gated,
    (changing, built, wait): (&BTreeSet<ModelName>, &BTreeSet<ModelName>, &BTreeSet<ModelName>),
) -> Result<Vec<audit::AuditResult>, ApplyError> {
    use crate::core::Resolver;
    let mut failures = Vec::new();
    for model in storeless_read(project, readers).into_iter().filter(|m| !m.audits.is_empty()) {
        if wait.contains(&model.name) || (matches!(model.kind, Kind::View) && built.contains(&model.name)) || inlines_bounds(project, model) {
            continue;
        }
        let ran = gated.get(&model.name);
        let checks: Vec<(&crate::core::audit::Audit, String)> = audit::checks(model, None, &exec.relation(&model.name), exec)
            .into_iter()
            .filter(|(a, _)| a.sql.refs().all(|r| !changing.contains(&r.target)) && ran.is_none_or(|r| !r.contains(&a.label())))
            .collect();
        if checks.is_empty() {
            continue;
        }
        gated.entry(model.name.clone()).or_default().extend(checks.iter().map(|(a, _)| a.label()));
        tracing::info!(model = %model.name, "audits of a model read by the writes run before them (it stores nothing: what it serves follows what it reads)");
        run_whole_audits(engine, &model.name, &checks, &mut failures, report)?;
    }
    Ok(failures)
}

/// Runs `checks` of `model` over its whole relation (no batch), logs the warn audits that found
/// rows, adds the failed results to `failures` and every result to `report`: the shared tail of
/// the source and storeless gates and of the audits run again after the writes.
///
/// # Errors
/// [`ApplyError::Audit`] when an audit cannot run at all.
fn run_whole_audits(
    engine: &mut dyn Engine,
    model: &ModelName,
    checks: &[(&crate::core::audit::Audit, String)],
    failures: &mut Vec<audit::AuditResult>,
    report: &mut ApplyReport,
) -> Result<(), ApplyError> {
    let results = audit::run(engine, model, checks, None).map_err(|failure| ApplyError::Audit { model: model.clone(), interval: None, failure })?;
    audit::log_warnings(&results);
    failures.extend(results.iter().filter(|r| r.failed()).cloned());
    report.audits.supersede(results);
    Ok(())
}

/// Adds to `models` the `embedded` and `view` models over one of them (through others): they
/// store nothing, so what reads them reads the new data of what `models` holds. (The plan's
/// order is topological.)
fn through_storeless(project: &Project, plan: &Plan, models: &mut BTreeSet<ModelName>) {
    for a in &plan.actions {
        if let Some(m) = project.dag.get(&a.name).filter(|m| matches!(m.kind, Kind::Embedded | Kind::View))
            && m.parents().iter().any(|p| models.contains(p))
        {
            models.insert(m.name.clone());
        }
    }
}

/// The audits [`source_gate`] ran, by source: their labels.
type Gated = BTreeMap<ModelName, BTreeSet<String>>;

/// True when [`source_gate`] ran every audit of `model`.
fn fully_gated(gated: &Gated, model: &crate::core::Model) -> bool {
    gated.get(&model.name).is_some_and(|ran| model.audits.iter().all(|a| ran.contains(&a.label())))
}

/// The `built_from` record of a `full` build of `name`: its parents' data generations now, at
/// the versions the plan leads to ([`crate::plan::generations`]).
fn read_built_from(project: &Project, versions: &HashMap<String, String>, name: &ModelName, state: &dyn StateStore) -> Result<String, StateError> {
    Ok(crate::plan::generations::built_from(&read_sources(project, versions, name, state)?))
}

/// The other versions other environments serve on `physical` (the table a `full` build of
/// `action` rewrites) with their records after the build, when every one of them reads the same
/// relations as `action`'s version ([`crate::plan::generations::shares_sources`]); none
/// otherwise (their records stay: the next plan marks them).
fn shared_builds(
    project: &Project,
    plan: &Plan,
    action: &crate::plan::Action,
    physical: &str,
    relation_of: &dyn Fn(&str) -> Option<String>,
    state: &dyn StateStore,
) -> Result<Vec<(String, String, String)>, StateError> {
    use crate::plan::generations;
    let name = action.name.to_string();
    let index = state.snapshot_index()?;
    let others = generations::others_on(&generations::served_elsewhere(state, &index, &plan.env)?, &name, action.fingerprint.as_str(), physical);
    if others.is_empty() {
        return Ok(Vec::new());
    }
    let Some(relations) = generations::relations(project, &action.name, relation_of) else { return Ok(Vec::new()) };
    if !generations::shares_sources(state, &index, &name, &others, &relations)? {
        return Ok(Vec::new());
    }
    generations::sharer_records(state, &name, &others)
}

/// The sources of `name` now ([`crate::plan::generations::sources`]) at the versions the plan
/// leads to.
fn read_sources(
    project: &Project,
    versions: &HashMap<String, String>,
    name: &ModelName,
    state: &dyn StateStore,
) -> Result<Vec<crate::plan::generations::Source>, StateError> {
    use crate::plan::generations;
    let keys: Vec<(String, String)> = generations::data_parents(project, name)
        .into_iter()
        .filter_map(|p| {
            let p = p.to_string();
            versions.get(&p).map(|fp| (p, fp.clone()))
        })
        .collect();
    let gens = state.data_versions(&keys)?;
    Ok(generations::sources(project, name, &|n: &str| versions.get(n).cloned(), &gens))
}

/// Only the newest version of a model's table writes into it. A forward-only change keeps an
/// older version's table for a new version with another query; while another environment still
/// serves the other one, the intervals (or SCD history) either writes there are what both serve,
/// and the older query would overwrite the newer one's rows (`dev` left at the version `prod`'s
/// forward-only change kept, or `prod` applying a version whose table `dev`'s forward-only change
/// took over). So, before any write (exit 1, naming the model, the other version W and the
/// environment serving it), when another environment serves W on the table of this plan's
/// version V with another query (an `indirect` reuse has the same query and rows: never
/// refused):
/// - an `apply` or `run` that would backfill or reconcile V there is refused when W was recorded
///   after V (a version new in this plan is the newest);
/// - an `apply` pointing its environment at V (anew or back) is refused whatever W's age — it
///   would serve, as V's, what W's query writes there — unless another environment already
///   serves V there (then V is the table's writer, `prod`'s forward-only version, and W's
///   environments are the ones left behind).
///
/// (Outside `prod`, an SCD type 2, unique-key or partition table `prod` serves through another
/// version over other parent tables is not refreshed at all: [`crate::plan::work::decide`].)
///
/// # Errors
/// [`ApplyError::Rejected`] for the first such model; the state store's reads.
fn shared_writes(project: &Project, plan: &Plan, state: &dyn StateStore, work: &crate::plan::work::Work<'_>) -> Result<(), ApplyError> {
    lost_full_left_to_prod(project, plan)?;
    // What this apply or run writes, as it decided it (`plan::work::decide`): a time-range
    // model's intervals, a table refreshed or reconciled whole.
    let written: BTreeSet<&ModelName> = work.work.iter().map(|a| &a.name).collect();
    let writes = |a: &crate::plan::Action| match project.dag.get(&a.name).map(|m| &m.kind) {
        Some(Kind::IncrementalByTimeRange(_)) => !a.backfill.is_empty(),
        Some(Kind::ScdType2(_) | Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_)) => written.contains(&a.name),
        _ => false,
    };
    // Pointing the environment at an existing version (anew, or back) makes it serve whatever
    // the table's newest version writes there from now on, with nothing of its own written.
    let switches = |a: &crate::plan::Action| {
        a.points_at_existing()
            && matches!(
                project.dag.get(&a.name).map(|m| &m.kind),
                Some(Kind::IncrementalByTimeRange(_) | Kind::ScdType2(_) | Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_))
            )
    };
    let candidates: Vec<&crate::plan::Action> = plan.actions.iter().filter(|a| a.physical.is_some() && (writes(a) || switches(a))).collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let index = state.snapshot_index()?;
    lost_shared_tables(project, plan, state, &index, &candidates)?;
    let served = crate::plan::generations::served_elsewhere(state, &index, &plan.env)?;
    for a in candidates {
        let (name, physical) = (a.name.to_string(), a.physical.clone().unwrap_or_default());
        let others = crate::plan::generations::others_on(&served, &name, a.fingerprint.as_str(), &physical);
        if others.is_empty() {
            continue;
        }
        // A version this plan creates is the newest of its table.
        let Some(own) = state.snapshot(&name, a.fingerprint.as_str())? else { continue };
        // Pointed at anew or back, it must be the only query served on its table, whichever
        // version is older: two environments serving two queries on one table arise only from
        // `prod`'s own forward-only change (the older one's writes refused below).
        // (Unless another environment serves this version there already: then it is the
        // table's writer — `prod`'s forward-only change — and the older one's environments are
        // the ones left behind, whose writes are refused.)
        let joining = served.get(&(name.clone(), physical.clone())).is_some_and(|fps| fps.contains(a.fingerprint.as_str()));
        let switching = switches(a) && !joining;
        for fp in &others {
            let Some(theirs) = state.snapshot(&name, fp)? else { continue };
            let newer = theirs.created_at > own.created_at;
            if theirs.canonical == own.canonical || !(newer || switching) {
                continue;
            }
            // Which environment serves it, for the message.
            let mut other = String::new();
            for env in state.environments()?.into_iter().filter(|e| *e != plan.env) {
                if state.env_pointers(&env)?.get(&name) == Some(fp) {
                    other = env;
                    break;
                }
            }
            let model = project.dag.get(&a.name).expect("a model of the plan");
            let what = match model.kind {
                _ if !a.backfill.is_empty() => format!("writing {} interval(s) with this version's query would change what `{other}` serves", a.intervals),
                Kind::ScdType2(_) if writes(a) => format!("reconciling its history with this version's query would change what `{other}` serves"),
                _ if writes(a) => format!("writing its rows with this version's query would change what `{other}` serves"),
                _ => format!("`{}` would serve, as this version's, the rows `{other}`'s query writes there", plan.env),
            };
            return Err(ApplyError::Rejected {
                model: a.name.clone(),
                location: model.location.clone(),
                message: format!(
                    "its table {physical} {} {} that `{other}` serves (a forward-only change, another query): {what}; nothing was done\n  \
                     hint: apply `{}` from the project `{other}` serves (it then serves that version too), or apply `{other}` without that change, or invalidate one of them",
                    if newer { "was taken over by the newer version" } else { "is also the table of version" },
                    &fp[..12.min(fp.len())],
                    plan.env
                ),
            });
        }
    }
    Ok(())
}

/// Outside `prod`: refuses to rebuild a lost table (or lake file) of a `full` version on the table
/// `prod` serves under audits this environment lacks, or other pre/post statements
/// (`plan::WriterHolds::Rebuilds`: the plan builds such a version only to repair it). Rebuilt
/// here, the table `prod` serves would hold rows `prod`'s audits never checked; `prod`'s apply
/// rebuilds it under its own.
///
/// # Errors
/// [`ApplyError::Rejected`] for the first such model.
fn lost_full_left_to_prod(project: &Project, plan: &Plan) -> Result<(), ApplyError> {
    let held = |a: &&crate::plan::Action| a.build && matches!(a.writer_holds, crate::plan::WriterHolds::Rebuilds { .. });
    let Some((a, model)) = plan.actions.iter().filter(held).find_map(|a| project.dag.get(&a.name).map(|m| (a, m))) else { return Ok(()) };
    let env = &plan.env;
    Err(ApplyError::Rejected {
        model: a.name.clone(),
        location: model.location.clone(),
        message: format!(
            "its table {} is lost, and `prod` serves it too under audits `{env}` lacks or other pre/post statements: rebuilt here, `prod` would serve rows its audits never checked; nothing was done\n  \
             hint: `efmesh apply prod` rebuilds it under `prod`'s audits; then apply `{env}`",
            a.physical.as_deref().unwrap_or_default()
        ),
    })
}

/// Outside `prod`: refuses to rebuild a lost table (dropped by hand) of a time-range, unique-key,
/// partition or SCD type 2 model that another environment writes (`prod`, else the one serving
/// the oldest version there: `plan::generations::writer_elsewhere`) through its other version
/// over other parent tables: rebuilt here, it would hold rows computed from this environment's
/// parents, which the writer would serve (and this environment never writes into it otherwise,
/// `plan::WriterHolds::All`, [`crate::plan::work::Work::left_to_writer`]). The writer rebuilds
/// it from its own parents.
///
/// # Errors
/// [`ApplyError::Rejected`] for the first such model; the state store's reads.
fn lost_shared_tables(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    index: &crate::state::SnapshotIndex,
    candidates: &[&crate::plan::Action],
) -> Result<(), ApplyError> {
    if plan.env == crate::core::name::PROD || !candidates.iter().any(|a| physical_missing(a)) {
        return Ok(());
    }
    let served = crate::plan::served_in(plan);
    let served_here = |n: &str| served.get(n).cloned();
    let others = crate::plan::generations::other_envs(state, &plan.env, project.config.environments.ttl, plan.now)?;
    for a in candidates.iter().filter(|a| physical_missing(a)) {
        let physical = a.physical.as_deref().unwrap_or_default();
        let Some(model) = project.dag.get(&a.name) else { continue };
        let name = a.name.to_string();
        let Some((writer, _, pointers)) =
            crate::plan::generations::writer_elsewhere(state, index, &others, &plan.env, &name, a.fingerprint.as_str(), physical)?
        else {
            continue;
        };
        if crate::plan::generations::reads_other_parents(project, &a.name, &served_here, pointers, index) {
            return Err(ApplyError::Rejected {
                model: a.name.clone(),
                location: model.location.clone(),
                message: format!(
                    "its table {physical} is missing, and `{writer}` serves it too (another version, over other parent tables): rebuilt here, it would hold rows computed from `{}`'s parents, which `{writer}` would serve; nothing was done\n  \
                     hint: `efmesh apply {writer}` rebuilds it from `{writer}`'s parents; then apply `{}`",
                    plan.env, plan.env
                ),
            });
        }
    }
    Ok(())
}

/// Outside `prod`: refuses a metadata edit of a time-range model's `start` or `end` whose backfill
/// would write intervals into a table another environment serves (the same version) outside that
/// environment's own bounds: its view would serve them (and its `full` descendants be rebuilt
/// over them) before the edit is promoted there. Only `metadata` changes can do it: any other
/// backfill lies within the bounds every environment serving the version shares.
///
/// # Errors
/// [`ApplyError::Rejected`] for the first such model; the state store's reads.
fn shared_bounds(project: &Project, plan: &Plan, state: &dyn StateStore) -> Result<(), ApplyError> {
    let candidates: Vec<&crate::plan::Action> =
        plan.actions.iter().filter(|a| a.change == Change::Metadata && !a.backfill.is_empty() && a.physical.is_some()).collect();
    // `prod` writes what it serves; the environments sharing its tables see its rows, as
    // everywhere else (a `full` table rebuilt over prod's parents).
    if candidates.is_empty() || plan.env == crate::core::name::PROD {
        return Ok(());
    }
    for env in state.environments()?.into_iter().filter(|e| *e != plan.env) {
        let pointers = state.env_pointers(&env)?;
        let mut metadata = None;
        for a in &candidates {
            let name = a.name.to_string();
            if pointers.get(&name).map(String::as_str) != Some(a.fingerprint.as_str()) {
                continue;
            }
            let Some(t) = project.dag.get(&a.name).and_then(|m| m.kind.time_range()) else { continue };
            if metadata.is_none() {
                metadata = Some(state.env_metadata(&env)?);
            }
            let served: Option<serde_json::Value> = metadata.as_ref().and_then(|m| m.get(&name)).and_then(|text| serde_json::from_str(text).ok());
            let Some(schedule) = served.as_ref().and_then(|v| v.get("schedule")) else { continue };
            let bound = |key: &str| schedule.get(key).and_then(|v| v.as_str()).and_then(|s| interval::parse_instant(s).ok());
            let (Some(start), end) = (bound("start"), bound("end")) else { continue };
            let start = t.grain.floor(start);
            let outside: Vec<Interval> =
                a.backfill.iter().flat_map(|b| b.split(t.grain)).filter(|i| i.start < start || end.is_some_and(|e| i.start >= e)).collect();
            let (Some(first), Some(last)) = (outside.first(), outside.last()) else { continue };
            let model = project.dag.get(&a.name).expect("a model of the plan");
            return Err(ApplyError::Rejected {
                model: a.name.clone(),
                location: model.location.clone(),
                message: format!(
                    "its new `start`/`end` would write {} interval(s) in [{}, {}) into the table `{env}` serves too (the same version, its bounds there {} to {}): `{env}` would serve them before the edit is applied there; nothing was done\n  \
                     hint: apply the edit to `{env}` first, or edit the query so that `{}` gets a version of its own",
                    outside.len(),
                    interval::to_iso(first.start),
                    interval::to_iso(last.end),
                    interval::to_iso(start),
                    end.map_or_else(|| "now".to_string(), interval::to_iso),
                    plan.env
                ),
            });
        }
    }
    Ok(())
}

/// Stores the no-op plan of the environment as this apply left it ([`crate::plan::memo`]), so
/// the next `plan` of an unchanged project replays it instead of fingerprinting every model.
fn record_memo(project: &Project, plan: &Plan, state: &dyn StateStore) -> Result<(), StateError> {
    // Outside `prod`, a time-range, unique-key, partition or SCD type 2 version sharing its table
    // with another environment's other version may leave out what that one writes
    // (`plan::WriterHolds`), which the memo does not carry (a replayed action holds nothing): no
    // memo then (its plans are computed in full).
    if plan.env != crate::core::name::PROD && state.environments()?.iter().any(|e| *e != plan.env) {
        let index = state.snapshot_index()?;
        let served = crate::plan::generations::served_elsewhere(state, &index, &plan.env)?;
        let written_elsewhere = |a: &&crate::plan::Action| project.dag.get(&a.name).is_some_and(|m| m.kind.time_range().is_some() || m.kind.is_refreshed());
        let shares = plan.actions.iter().filter(|a| a.change != Change::Removed).filter(written_elsewhere).any(|a| {
            a.physical.as_deref().is_some_and(|own| !crate::plan::generations::others_on(&served, &a.name.to_string(), a.fingerprint.as_str(), own).is_empty())
        });
        if shares {
            return Ok(());
        }
    }
    // Nor when `prod` writes a version this environment serves too under other settings
    // (`plan::prod_writes_it`), or rebuilds a `full` table it serves under audits this
    // environment lacks (`plan::prod_rebuilds_under`): the memo carries no holds.
    if plan.actions.iter().any(|a| a.writer_holds != crate::plan::WriterHolds::Nothing) {
        return Ok(());
    }
    let mut done = Vec::with_capacity(project.dag.len());
    for a in plan.actions.iter().filter(|a| a.change != Change::Removed) {
        let is_time_range = project.dag.get(&a.name).is_some_and(|m| m.kind.time_range().is_some());
        done.push(if is_time_range { state.done_intervals(&a.name.to_string(), a.fingerprint.as_str())? } else { BTreeSet::new() });
    }
    let key = crate::plan::memo::key(project, &plan.env, state.generation()?);
    if let Some(memo) = crate::plan::memo::after_apply(plan, project, key, &done) {
        state.plan_memo_put(&plan.env, &memo.key, &memo.body)?;
    }
    Ok(())
}

/// Audits of the versions the environment is about to point at whose audits did not run while
/// building in this apply: a view swap to an existing version, an inherited table, externals
/// and embedded models. Time-range models run their `whole` audits (their `interval` ones ran
/// with each batch when it was written); other kinds run all. A `metadata` change (an edited
/// audit is one) keeps the served data, which its new audits have never seen: every audit of
/// the model runs, over the whole relation. Every blocking failure is reported together, and
/// nothing is promoted.
///
/// Audits that read another model (`ref()` in an audit body) also run again, over the whole
/// relation, when that model's data changes in this apply (a new version pointed at, intervals
/// or a rebuild written), even when the auditing model itself is unchanged: an environment
/// never serves a model whose audit last checked another version of the data it reads (SPEC
/// §4 invariant 52).
#[allow(clippy::too_many_arguments)] // one call site, in `execute_recorded`, passing its own state
fn pre_promotion_audits(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    exec: &ExecResolver,
    audited: &BTreeSet<ModelName>,
    uncovered: &BTreeSet<ModelName>,
    (read_anew, gated): (&BTreeSet<ModelName>, &Gated),
    mut early: HashMap<ModelName, Result<Vec<audit::AuditResult>, audit::AuditError>>,
    report: &mut ApplyReport,
) -> Result<(), ApplyError> {
    use crate::core::Resolver;
    use crate::core::audit::AuditScope;
    let mut failures = Vec::new();
    // Models whose data, as the environment serves it, this apply changes: another version, or
    // data written (a `metadata` change keeps the version the environment serves).
    let mut touched: BTreeSet<ModelName> = plan.actions.iter().filter(|a| a.points_anew() || report.built.contains(&a.name)).map(|a| a.name.clone()).collect();
    through_storeless(project, plan, &mut touched);
    // The pass each model's audits got below (`None`: all of them over the whole relation).
    let mut ran: BTreeMap<ModelName, Option<AuditScope>> = BTreeMap::new();
    // (Unchanged external sources too, when this apply read them into a new version's table.)
    for action in plan.actions.iter().filter(|a| !matches!(a.change, Change::Unchanged | Change::Removed) || read_anew.contains(&a.name)) {
        let Some(model) = project.dag.get(&action.name) else { continue };
        // Audits that ran while building saw the new relation, or the batches written: the
        // table's older batches only when a pass of the same audits covers them (`uncovered`).
        // (A source's audits that ran before the writes ran over what it holds: its metadata
        // change, new audits included, is covered.)
        if model.audits.is_empty()
            || fully_gated(gated, model)
            || (audited.contains(&model.name) && !uncovered.contains(&model.name) && action.change != Change::Metadata)
        {
            continue;
        }
        if uncovered.contains(&model.name) {
            tracing::info!(model = %model.name, "its audits run over the whole table before the view swap: no pass of them covers the batches it held");
        }
        // Every audit over the whole relation: the batches of an existing time-range version
        // were written under the audits of whichever environment wrote them, perhaps not these.
        let scope = None;
        // A view swap to data these audits already passed on (same version, same data
        // generation, same audits) does not run them again (SPEC §4 invariant 44). A time-range
        // version's pass is recorded as its builds record it ([`record_pass`]).
        let (name, fp) = (action.name.to_string(), action.fingerprint.as_str());
        let pass = WholePass::current(state, model, fp)?;
        if let Some(p) = pass.as_ref().filter(|p| p.passed) {
            tracing::info!(model = %model.name, "audits not run again: they passed on this version's data (generation {})", p.generation);
            report.audits_reused.push(model.name.clone());
            continue;
        }
        ran.insert(model.name.clone(), scope);
        // Run already while the models were built ([`early_source_audits`]), or now.
        // (Less those of a source that ran before the writes.)
        let ran_before = gated.get(&model.name);
        let results = match early.remove(&model.name) {
            Some(results) => results,
            None => audit::run(
                engine,
                &model.name,
                &audit::checks(model, scope, &exec.relation(&model.name), exec)
                    .into_iter()
                    .filter(|(a, _)| ran_before.is_none_or(|r| !r.contains(&a.label())))
                    .collect::<Vec<_>>(),
                None,
            ),
        }
        .map_err(|failure| ApplyError::Audit { model: model.name.clone(), interval: None, failure })?;
        audit::log_warnings(&results);
        failures.extend(results.iter().filter(|r| r.failed()).cloned());
        // Recorded only when the generation did not move while they ran; warn audits that found
        // rows as checked, not passed: reusing them would hide their report.
        if let Some(pass) = pass {
            pass.record_if_unmoved(state, &name, fp, &results)?;
        }
        report.audits.supersede(results);
    }
    failures.extend(ref_audits(project, plan, engine, exec, audited, &ran, &touched, report, "apply")?);
    if let Some(first) = failures.first() {
        return Err(ApplyError::Audit { model: first.model.clone(), interval: None, failure: audit::AuditError::Failed(failures) });
    }
    Ok(())
}

/// The audits reading a model in `touched` (`ref()` in an audit body) that have not run over the
/// whole relation against its new data yet — neither in the pre-swap pass (`ran`) nor while their
/// model was built after it in this apply or run (`audited`) — run over the whole relation of
/// their model, which may be `unchanged` (SPEC §4 invariant 52). Returns the failed results
/// (already added to `report`).
#[allow(clippy::too_many_arguments)]
fn ref_audits(
    project: &Project,
    plan: &Plan,
    engine: &mut dyn Engine,
    exec: &ExecResolver,
    audited: &BTreeSet<ModelName>,
    ran: &BTreeMap<ModelName, Option<crate::core::audit::AuditScope>>,
    touched: &BTreeSet<ModelName>,
    report: &mut ApplyReport,
    during: &str,
) -> Result<Vec<audit::AuditResult>, ApplyError> {
    use crate::core::Resolver;
    use crate::core::audit::AuditScope;
    let mut failures = Vec::new();
    for action in plan.actions.iter().filter(|a| a.change != Change::Removed) {
        let Some(model) = project.dag.get(&action.name) else { continue };
        let stale: Vec<&crate::core::audit::Audit> = model
            .audits
            .iter()
            .filter(|a| a.sql.refs().any(|r| touched.contains(&r.target)))
            .filter(|a| {
                let whole_pass = |scope: Option<AuditScope>| scope.is_none_or(|s| s == a.scope && s == AuditScope::Whole);
                let in_pre_swap = ran.get(&model.name).is_some_and(|s| whole_pass(*s));
                // Built in this apply after what it reads: over the whole relation unless it
                // is a time-range model's `interval` audit (which saw the new batches only).
                let at_build = audited.contains(&model.name) && (model.kind.time_range().is_none() || a.scope == AuditScope::Whole);
                !(in_pre_swap || at_build)
            })
            .collect();
        if stale.is_empty() {
            continue;
        }
        let relation = exec.relation(&model.name);
        let changed: Vec<String> = model.audit_refs().into_iter().filter(|r| touched.contains(r)).map(|r| format!("`{r}`")).collect();
        tracing::info!(model = %model.name, "audits run again: {} changed in this {}", changed.join(", "), during);
        let checks: Vec<(&crate::core::audit::Audit, String)> = stale.into_iter().map(|a| (a, a.sql.render(&relation, &|m| exec.relation(m)))).collect();
        run_whole_audits(engine, &model.name, &checks, &mut failures, report)?;
    }
    Ok(failures)
}

/// Every other environment's pointers and served metadata (model → JSON text of
/// [`crate::plan::metadata_text`]), as [`sharing_under_other_audits`] reads them.
pub type OthersServed = Vec<(String, BTreeMap<String, String>, BTreeMap<String, String>)>;

/// [`OthersServed`] of every environment but `env`.
///
/// # Errors
/// A state read fails.
pub fn others_served(state: &dyn StateStore, env: &str) -> Result<OthersServed, StateError> {
    let mut out = Vec::new();
    for other in state.environments()?.into_iter().filter(|e| e != env) {
        let (pointers, metadata) = (state.env_pointers(&other)?, state.env_metadata(&other)?);
        out.push((other, pointers, metadata));
    }
    Ok(out)
}

/// Whether `model`'s audits are run over a table it shares with `prod` under other audits
/// ([`sharing_under_other_audits`], [`shared_table_audits`]): a `full`, seed or time-range model
/// with audits, stored in an engine table (whose data generation can track a pass of them,
/// [`WholePass`]) or a DuckLake table (written audit-first as an engine table is, but with no
/// pass recorded: its audits run at every run or apply of the environment sharing it). Not a
/// parquet lake, whose writes are not audited before they are served.
pub fn audits_shared_tables(model: &crate::core::Model) -> bool {
    use crate::core::{Kind, Target};
    !model.audits.is_empty()
        && (audit::generation_tracks(model)
            || (model.target == Target::DuckLake && matches!(model.kind, Kind::Full | Kind::Seed(_) | Kind::IncrementalByTimeRange(_))))
}

/// `prod`, when it is in `others` and serves a version of `model` on the table `physical` under
/// audits lacking one of `model`'s: an added audit only refuses more (SPEC §4 invariant 17), so
/// `prod` writes the table under its own audits, and the rows its runs write are served by the
/// other environments sharing it without these having seen them. Only `prod`: it is the
/// environment whose runs write a table it shares (an environment lacking one of `prod`'s audits
/// leaves it to `prod`, and two environments other than `prod` sharing a version under other
/// settings are not covered, invariant 17), so `prod` itself is never told of another's audits.
pub fn sharing_under_other_audits<'a>(
    model: &crate::core::Model,
    physical: &str,
    index: &crate::state::SnapshotIndex,
    others: &'a OthersServed,
) -> Vec<&'a String> {
    let name = model.name.to_string();
    let ours: Vec<serde_json::Value> = model.audits.iter().map(crate::core::audit::Audit::metadata).collect();
    others
        .iter()
        .filter(|(env, _, _)| env == crate::core::name::PROD)
        .filter(|(_, pointers, metadata)| {
            pointers.get(&name).and_then(|fp| index.get(&(name.clone(), fp.clone()))).is_some_and(|(p, _)| p == physical) && {
                let theirs = metadata.get(&name).and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok()).unwrap_or_default();
                let theirs = theirs["audits"].as_array().cloned().unwrap_or_default();
                ours.iter().any(|a| !theirs.contains(a))
            }
        })
        .map(|(env, _, _)| env)
        .collect()
}

/// A pass of `model`'s audits over the whole relation of its version `fp` (SPEC §4 invariant 44):
/// the digest and data generation it would be recorded with, and whether one is recorded at that
/// generation already.
pub struct WholePass {
    /// [`audit::pass_digest`] of the audits over the whole relation.
    pub digest: String,
    /// The version's data generation now.
    pub generation: i64,
    /// A pass of the same audits is recorded at that generation: they found nothing (a view swap
    /// to that data does not run them again).
    pub passed: bool,
    /// The same audits ran over the data at that generation and no blocking one found rows: they
    /// passed, or only `warn` audits found some (reported then; they run again at the next
    /// promotion or `run`, which reports them again). What `status` asks of a shared table.
    pub checked: bool,
}

/// The digest a run of audits is recorded with when only `warn` audits found rows: they checked
/// the data, but a view swap must not reuse them ([`WholePass::passed`] compares the digest
/// alone), since that would hide their report.
fn warned_digest(digest: &str) -> String {
    format!("{digest} warned")
}

impl WholePass {
    /// The pass of `model`'s version `fp` as it stands; `None` when none can be recorded
    /// ([`audit::pass_is_provable`]).
    ///
    /// # Errors
    /// A state read fails.
    pub fn current(state: &dyn StateStore, model: &crate::core::Model, fp: &str) -> Result<Option<WholePass>, StateError> {
        if !audit::pass_is_provable(model) {
            return Ok(None);
        }
        let name = model.name.to_string();
        let digest = audit::pass_digest(model, model.kind.time_range().map(|_| crate::core::audit::AuditScope::Whole));
        let generation = data_generation(state, &name, fp)?;
        let recorded = state.audit_pass(&name, fp)?.filter(|p| p.generation == generation);
        let passed = recorded.as_ref().is_some_and(|p| p.digest == digest);
        let checked = passed || recorded.is_some_and(|p| p.digest == warned_digest(&digest));
        Ok(Some(WholePass { digest, generation, passed, checked }))
    }

    /// After the audits ran with `results`: records that they passed (none found rows) or
    /// checked the data (only `warn` audits found rows, [`warned_digest`]) when the generation
    /// did not move while they ran; nothing after a blocking violation.
    fn record_if_unmoved(self, state: &dyn StateStore, name: &str, fp: &str, results: &[audit::AuditResult]) -> Result<(), StateError> {
        let digest = if audit::clean(results) {
            self.digest
        } else if results.iter().any(audit::AuditResult::failed) {
            return Ok(());
        } else {
            warned_digest(&self.digest)
        };
        if data_generation(state, name, fp)? == self.generation {
            state.record_audit_pass(name, fp, &crate::state::AuditPass { digest, generation: self.generation }, interval::now_millis())?;
        }
        Ok(())
    }
}

/// In a `run` or `apply` of an environment other than `prod`: the audits of each version `plan.env` serves
/// from a table `prod` also serves and writes under other audits ([`sharing_under_other_audits`]), over the whole table,
/// unless they passed on its current data ([`WholePass`]); rows that environment
/// wrote would otherwise be served here unaudited while `plan` says nothing changed. A pass is
/// recorded as the promotion's are. Not a `full` model this command rebuilds (`working_set`):
/// its build replaces those rows, under its audits, before any child reads them; in an apply
/// (not `refresh`), only a version the environment goes on serving unchanged: the promotion
/// audits the others (a changed pointer or metadata) before anything is promoted. Returns the failed results (added to `report`) and the
/// environments writing those tables.
fn shared_table_audits(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    exec: &ExecResolver,
    (working_set, refresh): (&BTreeSet<ModelName>, bool),
    report: &mut ApplyReport,
) -> Result<(Vec<audit::AuditResult>, Vec<String>), ApplyError> {
    use crate::core::Resolver;
    let audited: Vec<(&crate::core::Model, &crate::plan::Action)> = plan
        .actions
        .iter()
        .filter(|a| if refresh { a.change != Change::Removed } else { a.change == Change::Unchanged })
        .filter_map(|a| project.dag.get(&a.name).map(|m| (m, a)))
        .filter(|(m, _)| audits_shared_tables(m) && !(matches!(m.kind, Kind::Full) && working_set.contains(&m.name)))
        .collect();
    let (mut failures, mut writers) = (Vec::new(), BTreeSet::new());
    let others = if audited.is_empty() || plan.env == crate::core::name::PROD { Vec::new() } else { others_served(state, &plan.env)? };
    if others.is_empty() {
        return Ok((failures, Vec::new()));
    }
    let index = state.snapshot_index()?;
    for (model, action) in audited {
        let (name, fp) = (model.name.to_string(), action.fingerprint.as_str());
        let Some((physical, _)) = index.get(&(name.clone(), fp.to_string())) else { continue };
        let sharing = sharing_under_other_audits(model, physical, &index, &others);
        if sharing.is_empty() {
            continue;
        }
        let pass = WholePass::current(state, model, fp)?;
        if pass.as_ref().is_some_and(|p| p.passed) {
            continue;
        }
        let names = sharing.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", ");
        let s = if sharing.len() == 1 { "s" } else { "" };
        tracing::info!(model = %model.name, "its audits run over the whole table: {names} serve{s} it too and write{s} it under other audits");
        let results = audit::run(engine, &model.name, &audit::checks(model, None, &exec.relation(&model.name), exec), None)
            .map_err(|failure| ApplyError::Audit { model: model.name.clone(), interval: None, failure })?;
        audit::log_warnings(&results);
        if results.iter().any(audit::AuditResult::failed) {
            writers.extend(sharing.into_iter().cloned());
        }
        failures.extend(results.iter().filter(|r| r.failed()).cloned());
        if let Some(pass) = pass {
            pass.record_if_unmoved(state, &name, fp, &results)?;
        }
        report.audits.supersede(results);
    }
    Ok((failures, writers.into_iter().collect()))
}

/// The data generation of `(name, fp)` (0 when it has none yet).
fn data_generation(state: &dyn StateStore, name: &str, fp: &str) -> Result<i64, StateError> {
    let key = (name.to_string(), fp.to_string());
    Ok(state.data_versions(std::slice::from_ref(&key))?.get(&key).map_or(0, |v| v.generation))
}

/// Before a build of `model`'s version `fp`: its data generation, when a pass of its audits can
/// be recorded after the build ([`record_pass`]: it has audits and its generation tracks its
/// data, [`audit::pass_is_provable`]); `None` otherwise (no read).
fn pass_start(state: &dyn StateStore, model: &crate::core::Model, fp: &str) -> Result<Option<i64>, StateError> {
    if model.audits.is_empty() || !audit::pass_is_provable(model) {
        return Ok(None);
    }
    data_generation(state, &model.name.to_string(), fp).map(Some)
}

/// True when `before` (the data generation of `model`'s version `fp` before its batches:
/// [`pass_start`]) is one at which its audits all passed ([`record_pass`]), or when it has no
/// `interval` audit (its `whole` ones see every batch). A run at `before` where only `warn`
/// audits found rows ([`warned_before`]) does not cover the table: reused, it would hide their
/// report, so the promotion runs them over the whole table again.
fn covered_before(state: &dyn StateStore, model: &crate::core::Model, fp: &str, before: Option<i64>) -> Result<bool, StateError> {
    if model.audits.iter().all(|a| a.scope != crate::core::audit::AuditScope::Interval) {
        return Ok(true);
    }
    let Some(before) = before else { return Ok(false) };
    let digest = audit::pass_digest(model, Some(crate::core::audit::AuditScope::Whole));
    Ok(state.audit_pass(&model.name.to_string(), fp)?.is_some_and(|p| p.digest == digest && p.generation == before))
}

/// True when the same audits ran over the whole table of `model`'s version `fp` at `before`
/// ([`pass_start`]) and only `warn` audits found rows ([`warned_digest`]): what the table held
/// then was checked, so batches written over it leave it checked ([`Found::Warnings`]), though
/// never passed.
fn warned_before(state: &dyn StateStore, model: &crate::core::Model, fp: &str, before: Option<i64>) -> Result<bool, StateError> {
    let Some(before) = before else { return Ok(false) };
    let digest = warned_digest(&audit::pass_digest(model, Some(crate::core::audit::AuditScope::Whole)));
    Ok(state.audit_pass(&model.name.to_string(), fp)?.is_some_and(|p| p.digest == digest && p.generation == before))
}

/// What a build's audits found over the data its pass is recorded for ([`record_pass`]); a
/// blocking audit that found rows failed the build, which records nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// No audit found a row: a pass, which a view swap to the same data reuses.
    Nothing,
    /// Only `warn` audits found rows: the data was checked (what `status` asks of a table shared
    /// with `prod`), recorded under [`warned_digest`] and never reused as a pass, so the next
    /// promotion runs them, and reports them, again.
    Warnings,
}

impl Found {
    /// [`Found::Nothing`] when the audits were `clean` ([`audit::clean`]).
    fn of(clean: bool) -> Found {
        if clean { Found::Nothing } else { Found::Warnings }
    }
}

/// After a build of `model`'s version `fp` whose audits (`scope`) ran inside the transactions
/// that wrote it, no blocking one finding rows: records the pass (`found` nothing) or the check
/// (only `warn` audits found rows, [`warned_digest`]) at the data generation reached, when that
/// is `before` ([`pass_start`]) plus the `writes` this build recorded (another writer's bump in
/// between proves nothing, so nothing is recorded then). Batches of a time-range version add to
/// a record only when the data before them was covered or checked (the caller passes no
/// `before` otherwise: batches another environment wrote under other audits prove nothing).
fn record_pass(
    state: &dyn StateStore,
    model: &crate::core::Model,
    fp: &str,
    scope: Option<crate::core::audit::AuditScope>,
    before: Option<i64>,
    found: Found,
    writes: usize,
) -> Result<(), StateError> {
    let Some(before) = before else { return Ok(()) };
    let name = model.name.to_string();
    let after = data_generation(state, &name, fp)?;
    if after != before + i64::try_from(writes).unwrap_or(i64::MAX) {
        return Ok(());
    }
    let digest = match found {
        Found::Nothing => audit::pass_digest(model, scope),
        Found::Warnings => warned_digest(&audit::pass_digest(model, scope)),
    };
    state.record_audit_pass(&name, fp, &crate::state::AuditPass { digest, generation: after }, interval::now_millis())?;
    Ok(())
}

/// True when the plan found `action`'s physical relation missing from the engine.
fn physical_missing(action: &crate::plan::Action) -> bool {
    action.repair.as_ref().is_some_and(|r| r.physical_missing)
}

/// After `model` (built, rebuilt or refreshed whole by this apply or run) is written: when it is
/// on a `cron` and refreshed whole ([`Kind::is_refreshed_whole`]), records its version as refreshed for the cron's last
/// tick at the plan's `now` ([`StateStore::record_refresh`]), so `run` refreshes it again only
/// at the next tick; a unique-key, partition or SCD type 2 model without one, as refreshed at the
/// plan's `now`.
fn record_refreshed(
    state: &dyn StateStore,
    plan: &Plan,
    action: &crate::plan::Action,
    model: &crate::core::Model,
    complete: Option<interval::Millis>,
) -> Result<(), StateError> {
    if !model.kind.is_refreshed_whole() {
        return Ok(());
    }
    // A unique-key, partition or SCD type 2 model without a cron: refreshed at the plan's `now`
    // (what an environment it is left to waits for, `plan::WriterHolds::Refreshes`). Either way,
    // such a model refreshed while its time-range ancestors lack due intervals (a signal holds
    // them, they failed) holds no rows from the first of them on: recorded with the record (not
    // the tick: a cron's tick is done), so models below it elsewhere do not take its rows as
    // complete past there (`state::refreshed_until`).
    let tick = match model.schedule() {
        Some(cron) => crate::core::cron::last_tick(&cron, plan.now),
        None => model.kind.is_refreshed().then_some(plan.now),
    };
    match tick {
        Some(tick) => state.record_refresh(
            &action.name.to_string(),
            action.fingerprint.as_str(),
            tick,
            complete.filter(|_| model.kind.is_refreshed()),
            interval::now_millis(),
        ),
        None => Ok(()),
    }
}

/// Records the promotion as under way (with the statements that put the views back as they
/// are), swaps the environment's views in one engine transaction, then records the pointer set
/// with each pointer's metadata and the journal row, and drops the record, in one state
/// transaction. When the last step fails, the views are put back before returning the error (or,
/// if that fails too, by the next command: [`recover_promotions`]).
///
/// In the swap every drop runs before every create: a model renamed only in letter case (`s.c`
/// to `s.C`, or its schema `s` to `S`) is a removed model and an added one whose views are one
/// view on DuckDB, which resolves names ignoring case, so dropping the removed one's view after
/// creating the added one's would drop the new view. On Postgres, where the quoted names are two
/// views, the order changes nothing. The undo record does not depend on the order: it re-creates
/// every touched view as the catalog had it before the swap.
fn promote(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    options: &Options,
    report: &ApplyReport,
    known: Option<&crate::engine::Catalog>,
) -> Result<(), ApplyError> {
    let me = state.store_id()?;
    let dialect = engine.sql();
    // The swap's drops, run before its creates (`creates`: schemas and views), see above.
    let mut drops = Vec::new();
    let mut creates = Vec::new();
    let mut schemas = BTreeSet::new();
    // Every view a statement creates, replaces or drops, as (schema, view).
    let mut touched: Vec<(String, String)> = Vec::new();
    // The actions whose environment view a statement creates or replaces.
    let mut swapped: Vec<&crate::plan::Action> = Vec::new();
    // Each statement that creates, replaces or drops a model's view, with the model: a failing
    // one is reported naming it ([`in_view_of`]).
    let mut owners: Vec<(String, &ModelName)> = Vec::new();
    for a in &plan.actions {
        let view = |name: &ModelName| format!("{}.{}", quote_ident(&env_schema(&plan.env, name.schema())), quote_ident(name.table()));
        // Unchanged pointers keep their views, unless the engine lost one (the plan's repair).
        let keeps_view = matches!(a.change, Change::Unchanged | Change::Metadata) && !a.repair.as_ref().is_some_and(|r| r.view_missing || r.view_stale);
        if !keeps_view {
            touched.push((env_schema(&plan.env, a.name.schema()), a.name.table().to_string()));
        }
        match a.change {
            _ if keeps_view => {}
            Change::Removed => {
                drops.push(dialect.drop_view_if_exists(&view(&a.name)));
                owners.extend(drops.last().map(|sql| (sql.clone(), &a.name)));
            }
            _ => match (&a.physical, project.dag.get(&a.name)) {
                (Some(physical), Some(model)) => {
                    let schema = env_schema(&plan.env, a.name.schema());
                    if schemas.insert(schema.clone()) {
                        creates.push(dialect.create_schema_if_absent(&schema));
                    }
                    // The declared columns, in declared order (then the kind's managed columns):
                    // the view's shape is the contract, whatever order an inherited
                    // (forward-only) table has.
                    let cols: Vec<String> = model.relation_columns().iter().map(|c| quote_ident(&c.name)).collect();
                    let replace = dialect.replace_view_as(&view(&a.name), &format!("SELECT {} FROM {physical}", cols.join(", ")));
                    owners.extend(replace.iter().map(|sql| (sql.clone(), &a.name)));
                    creates.extend(replace);
                    swapped.push(a);
                }
                // Externals and embedded models have no view; one may replace a model that had.
                _ if a.change != Change::Added => {
                    drops.push(dialect.drop_view_if_exists(&view(&a.name)));
                    owners.extend(drops.last().map(|sql| (sql.clone(), &a.name)));
                }
                _ => {}
            },
        }
    }
    // A swap that moves a view records this store as the one that promoted the environment
    // last (SPEC §4, invariant 64): ONE record per environment, three statements whatever the
    // number of views, so a promotion costs what creating its views does.
    if !drops.is_empty() || !creates.is_empty() {
        creates.extend(crate::ownership::env_record_sql(dialect, &plan.env, &me));
    }
    let statements: Vec<String> = drops.into_iter().chain(creates).collect();
    let pointers: BTreeMap<String, String> =
        plan.actions.iter().filter(|a| a.change != Change::Removed).map(|a| (a.name.to_string(), a.fingerprint.as_str().to_string())).collect();
    // The metadata the environment serves from now on, per pointer: the project's.
    let metadata: BTreeMap<String, String> =
        project.dag.models().filter(|m| pointers.contains_key(&m.name.to_string())).map(|m| (m.name.to_string(), crate::plan::metadata_text(m))).collect();
    // The lock this process holds while it promotes (its state store handle is fenced by it).
    let lease = crate::state::lease::writer_lease(&plan.env, project.config.writes_a_lake());
    let rollback = if statements.is_empty() {
        Vec::new()
    } else {
        let step = || format!("reading the engine catalog before promoting `{}` (the views' definitions, for the promotion's undo record)", plan.env);
        let now = match known.and_then(|catalog| engine.view_definitions_in(catalog, &touched)) {
            Some(now) => now,
            None => engine.view_definitions(&touched).map_err(|e| in_step(&step(), e))?,
        };
        let undo: Vec<String> = touched
            .iter()
            .map(|key| now.get(key).cloned().unwrap_or_else(|| dialect.drop_view_if_exists(&format!("{}.{}", quote_ident(&key.0), quote_ident(&key.1)))))
            .collect();
        fault::crash_point(|| "before-intent".to_string());
        state.begin_promotion(&plan.env, &pointers, &undo, interval::now_millis())?;
        fault::crash_point(|| "after-intent".to_string());
        fault::delay_point("after-intent");
        // A holder whose lease is (nearly) expired moves no view: the intent stays for whoever
        // takes the lease next to undo (a no-op: nothing moved).
        state.check_fence()?;
        // The swap's statements may wait on readers of the views (Postgres locks them) for longer
        // than the lease lives: it is checked again after they ran, right before the COMMIT.
        // Lost there, the swap is rolled back (nothing moved) and the intent stays, as above.
        let mut fence: Option<StateError> = None;
        let swap = engine.transaction_if(&statements, &mut || {
            fault::lose_lock_point("before-swap-commit", state, &lease);
            match state.check_fence() {
                Ok(()) => true,
                Err(e) => {
                    fence = Some(e);
                    false
                }
            }
        });
        if let Ok(false) = swap {
            let why = match fence {
                Some(e) => e,
                None => StateError::LeaseLost { store: state.location(), lease: lease.clone(), holder: None },
            };
            tracing::warn!(env = %plan.env, "the view swap of `{}` was rolled back before its commit, no view moved: {why}", plan.env);
            return Err(why.into());
        }
        if let Err(e) = swap {
            // Nothing moved: forget the intent (if that fails, the next command finds it and
            // re-creates the views they already are). A transient failure (a lost connection)
            // may have come after the engine committed: the intent stays, and the next command
            // (a `--retries` attempt of this one included) puts the views back as they were.
            if e.transient {
                tracing::warn!(env = %plan.env, "the view swap failed transiently and may have landed; the next command puts the views back");
            } else if let Err(forget) = state.abandon_promotion(&plan.env) {
                tracing::warn!("{forget}");
            }
            // A view over a parquet version one of whose files is gone (an S3 object deleted
            // outside efmesh: S3 lakes are not listed while planning) fails with the engine's
            // raw `HTTP 404`: the error names the model, the file and the remedy instead.
            if !e.transient
                && let Some(lost) = lake::lost_promoted_file(project, &plan.env, &swapped, &e.message, state, engine)
            {
                return Err(lost);
            }
            return Err(in_view_of(project, &plan.env, &owners, e).into());
        }
        fault::crash_point(|| "after-view-swap".to_string());
        // Test hook: the window between the view swap and the record of the pointers, which
        // readers of the environment must not take for damage.
        fault::delay_point("after-view-swap");
        fault::lose_lock_point("after-view-swap", state, &lease);
        undo
    };
    let require: BTreeSet<String> = project.dag.models().filter(|m| !matches!(m.kind, Kind::External(_))).map(|m| m.name.to_string()).collect();
    let summary = json!({
        "actions": plan.actions.iter().filter(|a| a.has_work()).map(|a| json!({
            "name": a.name.to_string(),
            "change": a.change.as_str(),
            "reclassifiedFrom": a.reclassified_from.map(|c| c.as_str()),
            "fingerprint": a.fingerprint.short(),
            "build": a.build,
            "backfill": a.backfill.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "built": report.built.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        "registered": report.registered.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
    });
    let recorded = fault::state_write_point("promote", &state.location(), || {
        state.promote(&plan.env, &pointers, &metadata, &require, &summary, &options.applied_by, interval::now_millis())
    });
    if let Err(e) = recorded {
        if !rollback.is_empty() && e.is_lease_lost() {
            // The lease was lost between the check before the swap's COMMIT and this write.
            return Err(put_back_after_lost_lock(&plan.env, state, engine, &rollback, &pointers, &e));
        }
        if !rollback.is_empty() {
            // The views moved, and the state store answered with an error: it may have recorded
            // the promotion all the same (its COMMIT landed, the answer was lost).
            return put_back_unrecorded(&plan.env, state, engine, &rollback, &pointers, e);
        }
        return Err(e.into());
    }
    tracing::info!(env = %plan.env, "promoted{}", if report.built.is_empty() { " (view swap only)".to_string() } else { format!(", built {}", report.built.len()) });
    Ok(())
}

/// `e`, an engine failure of the view swap promoting `env`, naming the model whose view the
/// failing statement creates, replaces or drops — and where it is defined, when the project
/// still has it — before the engine's message (a view over an unreachable S3 lake fails with
/// the engine's `IO Error`, which names no model); `e` as it is when the statement is not one
/// of `owners` (the schemas, the ownership record). Still transient when it was ([`in_step`]).
fn in_view_of(project: &Project, env: &str, owners: &[(String, &ModelName)], e: EngineError) -> EngineError {
    // The error carries the statement as `EngineError::new` shortens it: compared the same way.
    let Some((_, name)) = owners.iter().find(|(sql, _)| !e.sql.is_empty() && EngineError::new(sql, "").sql == e.sql) else { return e };
    let at = project.dag.get(name).map(|m| format!("{}: ", m.location)).unwrap_or_default();
    in_step(&format!("{at}promoting `{env}`: the view of model `{name}`"), e)
}

/// Whether the state store still records the promotion of `env` to `pointers` (undo record
/// `rollback`) as under way: `Ok(false)` once it recorded the promotion or someone undid it.
fn promotion_pending(state: &dyn StateStore, env: &str, pointers: &BTreeMap<String, String>, rollback: &[String]) -> Result<bool, StateError> {
    state.pending_promotions().map(|pending| pending.iter().any(|p| p.env == env && &p.pointers == pointers && p.rollback == rollback))
}

/// Runs the undo statements `rollback` of the promotion of `env` in one engine transaction,
/// committed only while the state store still records that promotion as under way
/// ([`promotion_pending`]): whether it was put back (the engine's answer), and what the store
/// said (read right before the commit).
fn put_back_if_pending(
    env: &str,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    rollback: &[String],
    pointers: &BTreeMap<String, String>,
) -> (Result<bool, crate::engine::EngineError>, Result<bool, StateError>) {
    let mut pending: Result<bool, StateError> = Ok(false);
    let put_back = engine.transaction_if(rollback, &mut || {
        pending = promotion_pending(state, env, pointers, rollback);
        matches!(pending, Ok(true))
    });
    (put_back, pending)
}

/// After the view swap of `env` committed, the state store's write recording the promotion
/// failed with `failed`, an error other than a lost lease (a lost connection, a timeout). It
/// may have recorded the promotion all the same (its `COMMIT` landed, the answer was lost):
/// the views are put back from the undo record `rollback` in one engine transaction committed
/// only while the store still records this promotion (`pointers`, `rollback`) as under way, as
/// [`put_back_after_lost_lock`] does. Then:
/// - put back: the record is dropped, `failed` is the error (the views serve what the store
///   records, said in a warning);
/// - the store recorded the promotion (no record left, its pointers of `env` are `pointers`):
///   `Ok(())`, the views stay (they serve what the store records), said in a warning;
/// - no record left and other pointers (the process that took the lock over undid it): the
///   error says so;
/// - the store cannot be read: views and record stay for the next command reading `env`, which
///   puts the views back if the store did not record the promotion; the error says so.
///
/// # Errors
/// As above.
fn put_back_unrecorded(
    env: &str,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    rollback: &[String],
    pointers: &BTreeMap<String, String>,
    failed: StateError,
) -> Result<(), ApplyError> {
    let (put_back, pending) = put_back_if_pending(env, state, engine, rollback, pointers);
    let failed_text = with_causes(&failed).replace("\n  caused by: ", ": ");
    let unsettled = |what: String| ApplyError::PromotionUnsettled(format!("cannot record the promotion of `{env}` ({failed_text}): {what}"));
    match (put_back, pending) {
        (Ok(true), _) => {
            tracing::warn!(env = %env, "the promotion could not be recorded; the views of `{env}` were put back as they were");
            if let Err(forget) = state.abandon_promotion(env) {
                tracing::warn!("{forget}; the next command reading `{env}` drops the record of the promotion (the views already serve what the store records)");
            }
            Err(failed.into())
        }
        (Ok(false), Ok(_)) => match state.env_pointers(env) {
            Ok(recorded) if &recorded == pointers => {
                tracing::warn!(
                    env = %env,
                    "the state store recorded the promotion of `{env}` although its answer was lost ({failed_text}): the views serve what it records"
                );
                Ok(())
            }
            Ok(_) => {
                Err(unsettled(format!("the process holding the lock now already undid the promotion: the views of `{env}` serve what the state store records")))
            }
            Err(read) => Err(unsettled(format!(
                "the state store no longer records it as under way, and its pointers of `{env}` cannot be read ({read}); \
                 run `efmesh status {env} --check` to see what the views serve"
            ))),
        },
        (Ok(false), Err(read)) => Err(unsettled(format!(
            "the views of `{env}` were left as the swap made them: the state store cannot be read to tell whether it recorded the promotion ({read}); \
             the next efmesh command reading `{env}` puts them back if it did not"
        ))),
        (Err(undo), _) => Err(unsettled(format!(
            "the views of `{env}` could not be put back ({undo}); the next efmesh command reading `{env}` puts them back if the store did not record the promotion"
        ))),
    }
}

/// After the view swap of `env` committed, the state store refused to record the promotion:
/// this process lost its lease (`lost`, a [`StateError::LeaseLost`]) between the check before
/// the swap's COMMIT and that write (it stalled there past the lease's expiry). Puts the views
/// back from the undo record `rollback` at once, in one engine transaction committed only
/// while the state store still records this promotion (`pointers`, `rollback`) as under way:
/// the process that took the lease over drops that record only after undoing it itself, and
/// no other efmesh process can write the engine while this one holds it (DuckDB's file lock,
/// the Postgres engine's writer lock), so this late undo never overwrites a later promotion.
/// The record stays (dropping it is a write the lost lease forbids): the next command reading
/// `env` undoes it again, a no-op. Returns the error to report, saying what became of the views.
fn put_back_after_lost_lock(
    env: &str,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    rollback: &[String],
    pointers: &BTreeMap<String, String>,
    lost: &StateError,
) -> ApplyError {
    let done = match put_back_if_pending(env, state, engine, rollback, pointers) {
        (Ok(true), _) => {
            tracing::warn!(env = %env, "the promotion could not be recorded (the lock was lost); the views of `{env}` were put back as they were");
            format!("the views of `{env}` were put back as they were: they serve what the state store records")
        }
        (Ok(false), Ok(_)) => format!("the process holding the lock now already undid the promotion: the views of `{env}` serve what the state store records"),
        (Ok(false), Err(read)) => {
            format!(
                "the views of `{env}` could not be put back (the state store cannot be read: {read}); the next efmesh command reading `{env}` puts them back"
            )
        }
        (Err(undo), _) => format!("the views of `{env}` could not be put back ({undo}); the next efmesh command reading `{env}` puts them back"),
    };
    let (lease, holder) = match lost {
        StateError::LeaseLost { lease, holder, .. } => (lease.as_str(), holder.as_ref().map(|h| format!(" (now held by {h})")).unwrap_or_default()),
        _ => ("", String::new()),
    };
    ApplyError::LockLostAfterSwap(format!(
        "this process lost the lock `{lease}`{holder} after its view swap of `{env}` committed, before the state store recorded the promotion: {done}\n  \
         hint: the lock expired while this process was stalled; apply again (everything is built: the promotion is a view swap)"
    ))
}

/// Refuses a promotion of `plan` that would replace or drop an environment view another state
/// store still present in the engine database may serve (SPEC §4, invariant 64): two stores
/// applying one environment name into one database would otherwise re-point each other's views
/// silently. A view is this store's only when it reads the version this store's environment
/// points at ([`crate::plan::integrity::views_of_other_stores`]: the environment's pointers and
/// the snapshot index read once, only when a moved existing view reads efmesh's storage); the
/// database's use records and owner marker are read only when some view is not. The
/// environment's record (read from `catalog`) only names the store that promoted it last.
///
/// # Errors
/// [`ApplyError::ForeignViews`] naming the views, the stores and the ways out; a failed engine
/// or state store read.
fn check_view_owners(
    project: &Project,
    plan: &Plan,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    catalog: &crate::engine::Catalog,
) -> Result<(), ApplyError> {
    let me = state.store_id()?;
    let candidates = crate::plan::integrity::views_of_other_stores(plan, catalog, state, &me)?;
    if candidates.is_empty() {
        return Ok(());
    }
    let uses = engine.storage_uses()?;
    let marker = engine.owner_marker(false)?;
    let living = crate::ownership::living_stores(&uses, marker.as_deref(), &me);
    if living.is_empty() {
        return Ok(());
    }
    let foreign = crate::ownership::foreign_views(candidates, &living, &uses, &me);
    if foreign.is_empty() {
        return Ok(());
    }
    Err(ApplyError::ForeignViews(crate::ownership::foreign_views_message(&plan.env, &crate::engine::location(&project.config), &me, &foreign, &living)))
}

/// The snapshot of an action's version: its canonical AST (for later categorisation), canonical
/// render, metadata and physical storage.
fn snapshot_record(
    dialect: &dyn crate::engine::dialect::Dialect,
    model: &crate::core::Model,
    action: &crate::plan::Action,
    physical: &str,
) -> Result<SnapshotRecord, ApplyError> {
    let canonical = crate::plan::canonical_of(dialect, model).ok().flatten().map(|c| c.text);
    Ok(SnapshotRecord {
        name: model.name.to_string(),
        fingerprint: action.fingerprint.as_str().to_string(),
        fingerprint_version: FINGERPRINT_VERSION,
        kind: model.kind.tag().to_string(),
        physical: physical.to_string(),
        canonical,
        rendered_sql: model.body.as_ref().map(|b| b.render(&crate::core::fragment::CanonicalResolver)).unwrap_or_default(),
        metadata: action.metadata.clone(),
        created_at: interval::to_iso(interval::now_millis()),
    })
}

/// Undoes every promotion recorded as under way that never completed (the process that ran it
/// crashed, was killed, or could not write the state store after moving views): re-creates the
/// views it touched as they were before it started (idempotent), then forgets it. Afterwards
/// every environment's views serve exactly what its pointers in the state store say, but for a
/// view whose old definition no longer binds (it reads a relation or file gone since): that
/// view is dropped with a warning ([`undo_view_by_view`]), a repair the next `apply` makes, so
/// such a record never blocks every command. Commands that read an environment call this
/// first; it returns the environments it repaired (each also logged as a warning).
///
/// Undoing rather than completing: the interrupted `apply` did not report success, so the
/// environment keeps what its pointers (and journal) say it serves, and applying again redoes
/// the promotion (a view swap: everything it needed is built).
///
/// # Errors
/// [`ApplyError`] when the engine fails transiently, a view can neither be re-created nor
/// dropped, or the record cannot be dropped; then the record stays and the next command tries
/// again.
pub fn recover_promotions(project: &Project, state: &dyn StateStore, engine: &mut dyn Engine) -> Result<Vec<String>, ApplyError> {
    // A promotion under way in a live process that holds its environment's lock is not
    // interrupted: it is that process's to finish or undo.
    let pending = crate::state::lease::interrupted_promotions(state, project.config.writes_a_lake())?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    // Views over lake files and DuckLake tables bind only once the targets are prepared. A local
    // DuckLake catalog that is gone is not attached (the `ATTACH` would create an empty one in its
    // place): the views reading it cannot be put back, and their warnings name it as the cause.
    lake::prepare(project, engine)?;
    let lost_catalog = project.config.ducklake_catalog_file().filter(|f| !f.exists());
    if lost_catalog.is_none() {
        ducklake::prepare(project, engine)?;
    }
    let mut repaired = Vec::new();
    for p in pending {
        tracing::warn!(
            env = %p.env,
            "undoing an interrupted promotion of `{}` (started {}): its views are put back to the versions the state store records; apply again to promote",
            p.env,
            p.started_at
        );
        if !p.rollback.is_empty()
            && let Err(e) = engine.transaction(&p.rollback)
        {
            if e.transient || !engine.is_unbindable(&e) {
                return Err(e.into());
            }
            undo_view_by_view(engine, &p, e, lost_catalog.as_deref())?;
        }
        state.abandon_promotion(&p.env)?;
        repaired.push(p.env);
    }
    Ok(repaired)
}

/// Undoes the interrupted promotion `p` one view at a time, after its statements failed in one
/// transaction (`failure`, not transient): a view's old definition no longer binds, because it
/// reads a relation dropped since (the janitor collected that version after a state store
/// holding the record was restored), a file under the project's previous root (the project
/// moved), or a table of the local DuckLake catalog `lost_catalog`, a file that no longer
/// exists (not attached then). A view whose own statement fails is dropped instead, with a
/// warning naming the environment, the view and the failure (the missing DuckLake catalog, for
/// a view reading it): the environment's pointers stay the truth (the promotion never recorded
/// its own), the old definition cannot serve them any more, and the plan finds the missing view
/// (or the changed model) and the next `apply` re-creates it from the pointer. Every other view
/// is put back as it was. Statements are idempotent, so running some of them twice changes
/// nothing.
///
/// # Errors
/// [`ApplyError`] with a failure that is not the definition's (a transient one, an S3 endpoint
/// answering 503: [`Engine::is_unbindable`]), for a statement that names no view (`failure`
/// then), or when the view cannot be dropped either; the record stays and the next command
/// tries again.
fn undo_view_by_view(
    engine: &mut dyn Engine,
    p: &crate::state::PendingPromotion,
    failure: EngineError,
    lost_catalog: Option<&std::path::Path>,
) -> Result<(), ApplyError> {
    for statement in &p.rollback {
        let Err(e) = engine.transaction(std::slice::from_ref(statement)) else { continue };
        if e.transient || !engine.is_unbindable(&e) {
            return Err(e.into());
        }
        let Some((written, shown)) = crate::engine::statement_view(statement) else { return Err(failure.into()) };
        let drop_view = engine.sql().drop_view_if_exists(&written);
        if let Err(d) = engine.transaction(std::slice::from_ref(&drop_view)) {
            return Err(EngineError {
                sql: d.sql,
                message: format!(
                    "undoing the interrupted promotion of `{}`: view `{shown}` can neither be put back as it was ({}) nor dropped: {}",
                    p.env, e.message, d.message
                ),
                transient: d.transient,
                code: d.code,
            }
            .into());
        }
        let cause = e.message.lines().next().unwrap_or_default().trim();
        // A view reading the DuckLake catalog while its file is gone: that is the cause, whatever
        // the engine says of the catalog it could not bind.
        let reads_catalog = statement.to_lowercase().contains(crate::core::target::DUCKLAKE_ALIAS);
        let (cause, then) = match lost_catalog.filter(|_| reads_catalog) {
            Some(catalog) => {
                (format!("its DuckLake catalog `{}` does not exist: moved or deleted since; {cause}", catalog.display()), "restore the catalog, then ")
            }
            None => (cause.to_string(), ""),
        };
        tracing::warn!(
            env = %p.env,
            view = %shown,
            "the interrupted promotion of `{}` cannot put view `{shown}` back as it was ({cause}); dropped it instead: {then}`efmesh apply {}` re-creates it from the version the state store records",
            p.env,
            p.env
        );
    }
    Ok(())
}

/// Milliseconds since `started`, for the `build done` lines.
fn elapsed_ms(started: std::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The models of `work` each work item reads, as indices into `work`: its parents in the working
/// set, and through each parent outside it (an embedded model, an unchanged view) that parent's
/// own, transitively. `work` is in topological order, so every index is lower than the item's.
fn work_dependencies(project: &Project, work: &[&crate::plan::Action]) -> Vec<Vec<usize>> {
    let index: HashMap<&ModelName, usize> = work.iter().enumerate().map(|(i, a)| (&a.name, i)).collect();
    // The working-set models read through a model outside the working set, memoized.
    let mut through: HashMap<ModelName, BTreeSet<usize>> = HashMap::new();
    fn reads(project: &Project, name: &ModelName, index: &HashMap<&ModelName, usize>, through: &mut HashMap<ModelName, BTreeSet<usize>>) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let Some(model) = project.dag.get(name) else { return out };
        // A model's audits may read other models (`ref()` in an audit body): they are built first.
        for p in model.dependencies() {
            if let Some(&i) = index.get(&p) {
                out.insert(i);
            } else if let Some(known) = through.get(&p) {
                out.extend(known.iter().copied());
            } else {
                // The DAG is acyclic: the recursion ends at its roots.
                let found = reads(project, &p, index, through);
                out.extend(found.iter().copied());
                through.insert(p, found);
            }
        }
        out
    }
    work.iter().map(|a| reads(project, &a.name, &index, &mut through).into_iter().collect()).collect()
}

/// A model whose engine work is under way: what its steps and its end record.
struct Flight {
    /// When its build started (the `build done` line's `ms`).
    started: std::time::Instant,
    /// The snapshot its build records.
    snapshot: SnapshotRecord,
    /// Grain intervals computed so far.
    intervals: usize,
    /// What it records.
    what: FlightKind,
}

enum FlightKind {
    /// A `full` or `view` model: one transaction, then the snapshot, the data generation and
    /// what it was built from.
    Whole { built_from: Option<String>, sharers: Vec<(String, String, String)>, before: Option<i64> },
    /// A time-range model: its batches in transactions of one or more batches, their ledger rows
    /// after each commit.
    /// `writes`: the ledger writes recorded so far (each moves the data generation once).
    Batches {
        batches: Vec<Interval>,
        grain: crate::core::interval::Grain,
        create_with_first: bool,
        before: Option<i64>,
        /// The table held nothing the batches' audits did not see or a pass covered ([`covered_before`]).
        covered: bool,
        /// Not covered, but what the table held was checked: only `warn` audits found rows in
        /// it ([`warned_before`]).
        warned: bool,
        /// No audit of the batches (warn ones included) found a row so far.
        clean: bool,
        writes: usize,
        /// The version's data generation its next ledger write expects ([`record_done`]): read
        /// before its first batch was handed out, then the one each record moved it to.
        seen: i64,
    },
}

/// The state side of the builds of one apply or run ([`schedule::Builds`]).
struct Builder<'a, 'p> {
    project: &'p Project,
    plan: &'p Plan,
    state: &'a dyn StateStore,
    work: &'a [&'p crate::plan::Action],
    exec: &'a ExecResolver<'p>,
    versions: &'a HashMap<String, String>,
    pending: &'a BTreeSet<(String, String)>,
    relation_of: &'a dyn Fn(&str) -> Option<String>,
    catalog: &'a crate::engine::Catalog,
    /// Time-range models writing into a table that exists: the types it stores
    /// ([`stored_time_range_columns`]), which the query's must hold ([`check_batches_fit`]).
    stored: &'a BTreeMap<ModelName, Vec<crate::engine::DescribedColumn>>,
    shared: &'a mut Option<BTreeSet<(String, String)>>,
    report: &'a mut ApplyReport,
    audited: &'a mut BTreeSet<ModelName>,
    uncovered: &'a mut BTreeSet<ModelName>,
    /// The audits of sources and of `embedded`/`view` models run in this command before the
    /// writes reading them ([`source_gate`], [`storeless_gate`]): never run twice.
    gated: &'a mut Gated,
    /// The models whose data, as an environment serves it, this command changes (an audit that
    /// `ref`s one runs after it is written).
    changing: &'a BTreeSet<ModelName>,
    /// The models of the working set.
    working_set: &'a BTreeSet<ModelName>,
    /// `apply` or `run`.
    during: &'static str,
    flights: HashMap<usize, Flight>,
    /// Per time-range model asked about: the start of its first interval due and not done, once
    /// it is written ([`Builder::upstream_complete`]).
    complete: HashMap<ModelName, Option<interval::Millis>>,
    /// The snapshot index, read once, when the first time-range build is done: the versions
    /// stored in each table ([`Builder::heal_sharers`]).
    stored_in: Option<crate::state::SnapshotIndex>,
    /// What the versions inheriting a table wrote there, taken back if the apply fails
    /// ([`inherited::take_back`]).
    wrote: &'a mut inherited::Wrote,
    /// The models whose writes into a table they inherit the apply takes back if it fails
    /// ([`inherited::at_risk`]; none for `run`): a unique-key, partition or SCD type 2 table
    /// refreshed in place below one is copied first ([`inherited::keep`]).
    at_risk: &'a BTreeSet<ModelName>,
    /// The models writing batches into a table other versions are stored in
    /// ([`inherited::inheriting`]): what they write is recorded in `wrote`.
    inheriting: &'a BTreeSet<ModelName>,
    /// Those copies, put back if the apply fails ([`inherited::put_back`]).
    kept: &'a mut inherited::Keeps,
}

/// Time-range models of `work` writing into a table that exists before their batches (it held
/// rows before this apply; or a model reading itself, whose table is created from the declared
/// types): by model, the types the table stores. The engine's tables and DuckLake's (one query of
/// the DuckLake catalog says which exist, only when a DuckLake time-range model has batches to
/// write); not the parquet lake's files, which hold the declared types ([`lake::build`] checks
/// them). One description of the existing tables; a table a batch creates from the query has the
/// query's types.
///
/// # Errors
/// An existing table cannot be described, or the DuckLake catalog's tables cannot be listed.
fn stored_time_range_columns(
    project: &Project,
    work: &[&crate::plan::Action],
    catalog: &crate::engine::Catalog,
    engine: &mut dyn Engine,
) -> Result<BTreeMap<ModelName, Vec<crate::engine::DescribedColumn>>, ApplyError> {
    use crate::core::Target;
    let mut out = BTreeMap::new();
    let mut existing: Vec<(&ModelName, String)> = Vec::new();
    let writing: Vec<(&crate::plan::Action, &crate::core::Model, &str)> = work
        .iter()
        .filter(|a| !a.backfill.is_empty())
        .filter_map(|a| Some((*a, project.dag.get(&a.name)?, a.physical.as_deref()?)))
        .filter(|(_, model, _)| model.kind.time_range().is_some() && model.target != Target::Parquet)
        .collect();
    // The DuckLake catalog's tables (the engine's catalog does not hold them), lowercased.
    let held = if writing.iter().any(|(_, model, _)| model.target == Target::DuckLake) { ducklake::tables(engine)? } else { Default::default() };
    for (a, model, physical) in writing {
        let exists = match model.target {
            Target::DuckLake => ducklake::table_of(physical).is_some_and(|t| held.contains(&t.to_lowercase())),
            _ => !batch::table_absent(physical, catalog) && !physical_missing(a),
        };
        if exists {
            existing.push((&a.name, format!("SELECT * FROM {physical}")));
        } else if model.body.as_ref().is_some_and(crate::core::Fragment::reads_itself) {
            // Created empty from the declared schema ([`batch::ensure_table`]).
            out.insert(a.name.clone(), model.schema.0.iter().map(|c| crate::engine::DescribedColumn { name: c.name.clone(), ty: c.ty.clone() }).collect());
        }
    }
    if existing.is_empty() {
        return Ok(out);
    }
    let queries: Vec<String> = existing.iter().map(|(_, q)| q.clone()).collect();
    for ((name, _), stored) in existing.into_iter().zip(engine.describe_many(&queries)) {
        out.insert(name.clone(), stored?);
    }
    Ok(out)
}

/// What a write keeps a model's rows in, for the refusals of a value the stored type would change
/// ([`check_batches_fit`], [`check_rows_fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// A table (the engine's or DuckLake's), created with the query's types: the query returns
    /// another type since (a source widened).
    Table,
    /// The parquet lake's files, which hold each column cast to its declared type
    /// ([`lake::build`]).
    Lake,
}

/// Before a time-range model's batches are written: refuses when one of `columns` (returned in
/// another type than `holder` stores) has a value in some batch that the stored type would
/// change (rounded, cut; a time column's value moved, its row then kept in another interval or
/// in none): written, the table or lake would serve other values than the query returns. One
/// query per batch counting every such column's changed values ([`contract::first_changed`]),
/// only for such models; one more for the example of a column found with some.
///
/// # Errors
/// [`ApplyError::Rejected`] naming the column, the types, the batch and an example; a query fails.
#[allow(clippy::too_many_arguments)] // the batches' own state, from the table's and the lake's builds
fn check_batches_fit(
    model: &crate::core::Model,
    t: &crate::core::TimeRange,
    body: &crate::core::Fragment,
    batches: &[Interval],
    exec: &ExecResolver<'_>,
    columns: &[contract::LossyColumn],
    holder: Holder,
    engine: &mut dyn Engine,
) -> Result<(), ApplyError> {
    let tc = quote_ident(&t.time_column);
    for &b in batches {
        let (s, e) = batch::time_column_bounds(model, t, b);
        let rows = format!("(\n{}\n) AS _efmesh_q", body.render(&exec.with_bounds(Some(b))));
        let in_batch = format!("{tc} >= {s} AND {tc} < {e}");
        let range = format!(" in [{}, {})", interval::to_iso(b.start), interval::to_iso(b.end));
        let found = contract::first_changed(engine, &rows, &in_batch, columns).map_err(|(i, err)| unfit(model, &columns[i], &range, Some(b), err))?;
        if let Some((i, (n, example))) = found {
            return Err(changed_error(model, holder, &columns[i], &n, &example, Some(b)));
        }
    }
    Ok(())
}

/// Before a `full` model's existing table is refilled by an engine that keeps it
/// ([`crate::engine::dialect::Dialect::refills_tables`]): refuses when a column the query returns
/// in another type than the table stores has a value the stored type would change (the refill
/// would convert it silently: `2.5` into an `integer` column serves `3`).
///
/// # Errors
/// [`ApplyError::Rejected`] naming the column, the types and an example; a query fails.
fn check_refill_fits(model: &crate::core::Model, physical: &str, sql: &str, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    let build_err = |e| ApplyError::build(model, None, e);
    let stored = engine.describe(&format!("SELECT * FROM {physical}")).map_err(build_err)?;
    let returned = engine.describe(sql).map_err(build_err)?;
    check_rows_fit(model, sql, &contract::lossy_columns(&returned, &stored), Holder::Table, engine)
}

/// Before the rows of `sql` (a whole relation: a `full` model's) are written: refuses when one of
/// `columns` (returned in another type than `holder` stores) has a value the stored type would
/// change. One query counting every such column's changed values ([`contract::first_changed`]);
/// one more for the example of a column found with some.
///
/// # Errors
/// [`ApplyError::Rejected`] naming the column, the types and an example; a query fails.
fn check_rows_fit(model: &crate::core::Model, sql: &str, columns: &[contract::LossyColumn], holder: Holder, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    let rows = format!("(\n{sql}\n) AS _efmesh_q");
    let found = contract::first_changed(engine, &rows, "TRUE", columns).map_err(|(i, e)| unfit(model, &columns[i], "", None, e))?;
    if let Some((i, (n, example))) = found {
        return Err(changed_error(model, holder, &columns[i], &n, &example, None));
    }
    Ok(())
}

/// The refusal of a write whose stored type (`holder`'s) would change `n` of the values the query
/// returns in `lossy`'s column (`example`: `" (e.g. 2.3456 → 2.35)"`), in `batch` for a
/// time-range model's, else in the whole relation.
fn changed_error(model: &crate::core::Model, holder: Holder, lossy: &contract::LossyColumn, n: &str, example: &str, batch: Option<Interval>) -> ApplyError {
    let (column, returned, stored) = lossy;
    let range = batch.map(|b| format!(" in [{}, {})", interval::to_iso(b.start), interval::to_iso(b.end))).unwrap_or_default();
    let written = if batch.is_some() { "no batch of this model was written" } else { "nothing was written" };
    let message = match (holder, batch) {
        (Holder::Table, Some(_)) => format!(
            "column `{column}`: the query returns `{returned}` but the table stores `{stored}`, which would change {n} of its values{range}{example}: the table would serve other values than the query's; {written}\n  \
             hint: cast the column in the query to `{stored}`, or declare the type the query returns (`{returned}`) and give the model a new version (a changed query builds a new table)"
        ),
        (Holder::Table, None) => format!(
            "column `{column}`: the query returns `{returned}` but the table stores `{stored}`, which would change {n} of its values{example}: the table would serve other values than the query's; {written}\n  \
             hint: cast the column in the query to `{stored}`, or give the model a new version (a changed query builds a new table with the query's types)"
        ),
        (Holder::Lake, _) => {
            // A time column's value moved by the cast leaves the interval whose file it was cut for.
            let time = batch.is_some() && model.kind.time_range().is_some_and(|t| t.time_column.eq_ignore_ascii_case(column));
            let moved = if time { " (a time value moved past its interval's end puts its row in the next interval's file, or in none)" } else { "" };
            format!(
                "column `{column}`: the query returns `{returned}` but the model declares `{stored}`, the type its lake files store, which would change {n} of its values{range}{example}: the lake would serve other values than the query's{moved}; {written}\n  \
                 hint: cast the column in the query to `{stored}` (rounding or cutting its values as they should be), or declare the type the query returns (`{returned}`)"
            )
        }
    };
    ApplyError::Rejected { model: model.name.clone(), location: model.location.clone(), message }
}

/// A value check ([`contract::changed_values`]) that failed: when the engine refused a
/// conversion (Postgres has no `TRY_CAST`: `integer out of range`, `value too long`, `numeric
/// field overflow`), the stored type cannot hold some value at all, said of the column; any
/// other failure is the build's.
pub(crate) fn unfit(
    model: &crate::core::Model,
    (column, returned, stored): &contract::LossyColumn,
    range: &str,
    batch: Option<Interval>,
    e: crate::engine::EngineError,
) -> ApplyError {
    let engine_message = e.message.to_ascii_lowercase();
    if !["out of range", "overflow", "too long", "invalid input"].iter().any(|m| engine_message.contains(m)) {
        return ApplyError::build(model, batch, e);
    }
    let engine_message = &e.message;
    ApplyError::Rejected {
        model: model.name.clone(),
        location: model.location.clone(),
        message: format!(
            "column `{column}`: the query returns `{returned}` but the table stores `{stored}`, which cannot hold some of its values{range} ({}): nothing of this model was written\n  \
             hint: cast the column in the query to `{stored}`, or give the model a new version (a changed query builds a new table with the query's types)",
            engine_message.lines().next().unwrap_or_default().trim()
        ),
    }
}

/// An audited transaction's failure as the apply reports it.
fn audit_failure(model: &crate::core::Model, source: audit::AuditError, interval: Option<Interval>) -> ApplyError {
    match source {
        audit::AuditError::Statement(e) => ApplyError::build(model, interval, e),
        other => ApplyError::Audit { model: model.name.clone(), interval, failure: other },
    }
}

impl<'p> Builder<'_, 'p> {
    fn model(&self, item: usize) -> (&'p crate::plan::Action, &'p crate::core::Model) {
        let action: &'p crate::plan::Action = self.work[item];
        (action, self.project.dag.get(&action.name).expect("plan matches project"))
    }

    /// Before the write of `model` (`action`): the audits of the `embedded` and `view` models its
    /// query reads that have not run in this command yet ([`storeless_gate`]), now that what they
    /// read is written, on the calling thread's connection. A blocking failure stops `model`
    /// before anything of it is written.
    ///
    /// # Errors
    /// [`ApplyError::ReadAudit`] for the blocking failures; [`ApplyError::Audit`] for an audit
    /// that could not run.
    fn gate_reads(&mut self, action: &crate::plan::Action, model: &crate::core::Model, engine: &mut dyn Engine) -> Result<(), ApplyError> {
        let failures =
            storeless_gate(self.project, &[action], self.exec, engine, self.report, self.gated, (self.changing, self.working_set, &BTreeSet::new()))?;
        if failures.is_empty() {
            return Ok(());
        }
        Err(ApplyError::ReadAudit { during: self.during, reader: model.name.clone(), failures })
    }

    /// The end of a model's build: the refresh tick of a model on a `cron` ([`record_refreshed`]),
    /// the `build done` line, the report, the crash point.
    fn built(&mut self, action: &crate::plan::Action, model: &crate::core::Model, started: std::time::Instant, intervals: usize) -> Result<(), ApplyError> {
        let complete = if model.kind.is_refreshed() { self.upstream_complete(&model.name)? } else { None };
        record_refreshed(self.state, self.plan, action, model, complete)?;
        tracing::info!(model = %model.name, ms = elapsed_ms(started), "build done");
        self.report.built.push(model.name.clone());
        self.report.per_model.insert(model.name.to_string(), intervals);
        fault::crash_point(|| format!("after-build:{}", model.name));
        Ok(())
    }
}

impl Builder<'_, '_> {
    /// The instant up to which the rows of `name`'s time-range ancestors are complete here now
    /// (every one written before `name` starts): the earliest start of an interval one of them
    /// wants by the plan's `now` and has not done (held by a signal, failed, waiting upstream);
    /// `None` when each has done all it wants. A unique-key, partition or SCD type 2 model
    /// refreshed now holds no rows from then on ([`record_refreshed`]).
    fn upstream_complete(&mut self, name: &ModelName) -> Result<Option<interval::Millis>, StateError> {
        let mut out: Option<interval::Millis> = None;
        for m in self.project.dag.ancestors(name) {
            if m.kind.time_range().is_none() || matches!(m.kind, Kind::External(_)) {
                continue;
            }
            let first = match self.complete.get(&m.name) {
                Some(f) => *f,
                None => {
                    let Some(a) = self.plan.actions.iter().find(|a| a.name == m.name) else { continue };
                    let first = crate::plan::work::first_missing(self.project, self.plan, self.state, a, false)?;
                    self.complete.insert(m.name.clone(), first);
                    first
                }
            };
            out = match (out, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(out)
    }

    /// After a time-range build of `action` recorded its last intervals in its table: the other
    /// versions stored there take back what it recomputed ([`heal_stored_with`]). The versions
    /// stored in each table are read once per apply or run, at the first build done here.
    ///
    /// # Errors
    /// The state store's reads and writes.
    fn heal_sharers(&mut self, action: &crate::plan::Action) -> Result<(), StateError> {
        let Some(physical) = action.physical.as_deref().filter(|p| !p.is_empty()) else { return Ok(()) };
        let state = self.state;
        let (name, fp) = (action.name.to_string(), action.fingerprint.as_str());
        if self.stored_in.is_none() {
            self.stored_in = Some(state.snapshot_index()?);
        }
        let mut others: BTreeSet<String> =
            self.stored_in.as_ref().map(|index| crate::state::versions_in(index, &name, physical)).into_iter().flatten().collect();
        // The versions a lost table's rebuild reset (read by the plan from the same snapshots).
        others.extend(action.repair.iter().flat_map(|r| r.ledger_reset.iter()).map(|f| f.as_str().to_string()));
        others.remove(fp);
        for (other, healed) in heal_stored_with(state, &name, fp, &others)? {
            let version = &other[..12.min(other.len())];
            tracing::info!(model = %action.name, version, intervals = healed, "failed intervals of another version stored in the table done again: this build wrote them there");
        }
        Ok(())
    }
}

/// After a build of the time-range version `fp` of `name` recorded its last intervals in its
/// table: each version of `others` (stored in the same table) with the same query (its canonical
/// body) whose ledger holds a failed interval `fp` now has done takes `fp`'s done intervals
/// ([`StateStore::inherit_done`], as a version inheriting the table does), so the table holds
/// what its ledger says again, and the environments serving it serve that. A lost table's rebuild
/// marks the done intervals of every version stored there failed first
/// ([`crate::plan::integrity::Repair::ledger_reset`]), and a version another environment serves
/// there over other parents never computes in it ([`crate::plan::WriterHolds`]): without this its
/// intervals stayed failed, and its environment unhealthy, for good. A version of another query
/// is left as it is: the table holds this query's rows, which it recomputes when pointed at
/// ([`crate::plan::recompute::taken_over`] compares the times each ledger records, which
/// `inherit_done` would copy). A build that fails part way never gets here: those stay failed
/// (its own too) until the build completing them. Called once the build's own records are
/// written (their compare-and-set sees no other write); `inherit_done` moves the healed
/// version's data generation alone (nothing is written into the table: the build's records
/// moved every version stored there already). The janitor claims none of them meanwhile: the
/// command's intents name the table. Returns each version healed with how many of its failed
/// intervals are done again.
///
/// # Errors
/// The state store's reads and writes.
fn heal_stored_with(state: &dyn StateStore, name: &str, fp: &str, others: &BTreeSet<String>) -> Result<Vec<(String, usize)>, StateError> {
    let mut out = Vec::new();
    // This version's query and done intervals, read for the first version with a failed one.
    let mut ours: Option<(Option<String>, BTreeSet<interval::Millis>)> = None;
    for other in others.iter().filter(|o| o.as_str() != fp) {
        if state.ledger_stats(name, other)?.failed == 0 {
            continue;
        }
        if ours.is_none() {
            let Some(own) = state.snapshot(name, fp)? else { return Ok(out) };
            ours = Some((own.canonical, state.done_intervals(name, fp)?));
        }
        let Some((query, done)) = ours.as_ref() else { continue };
        if state.snapshot(name, other)?.is_none_or(|theirs| theirs.canonical != *query) {
            continue;
        }
        let healed = state.failed_intervals(name, other)?.iter().filter(|s| done.contains(*s)).count();
        if healed > 0 {
            state.inherit_done(name, fp, other, interval::now_millis())?;
            out.push((other.clone(), healed));
        }
    }
    Ok(out)
}

impl<'p> schedule::Builds<'p> for Builder<'_, 'p> {
    fn start(&mut self, item: usize, engine: &mut dyn Engine) -> Result<Option<schedule::Job<'p>>, ApplyError> {
        let (project, plan, state) = (self.project, self.plan, self.state);
        let (action, model) = self.model(item);
        // A process that lost its environment lease stops before writing anything more.
        state.check_fence()?;
        if writes_rows(model, action) {
            self.gate_reads(action, model, engine)?;
        }
        let intervals_before = self.report.intervals;
        // A DuckLake table with missing data files is rebuilt anew (below), but not when another
        // version stored in it declares a column this one lacks (a forward-only version another
        // environment serves): built from this version, the table would lack the column that
        // environment's view selects. Refused before anything of it changes.
        if action.repair.as_ref().is_some_and(|r| !r.ducklake_files_missing.is_empty())
            && !matches!(model.kind, Kind::Full)
            && let Some(lost) = action.physical.as_deref()
        {
            let missing: Vec<String> = lake::served_columns_lacking(model, lost, state)?.iter().map(|c| format!("`{c}`")).collect();
            if !missing.is_empty() {
                return Err(ApplyError::Target {
                    model: Some(model.name.clone()),
                    interval: None,
                    message: format!(
                        "its DuckLake table {lost} lacks data files and is rebuilt anew, but another version stored in it (a forward-only version another environment serves) declares {} this version does not: built from this version, the table would lose {}\n  hint: apply the environment serving that version first (it rebuilds the table with every column), then this one",
                        missing.join(", "),
                        if missing.len() == 1 { "it" } else { "them" }
                    ),
                });
            }
        }
        if let (Some(repair), Some(t)) = (action.repair.as_ref().filter(|r| r.physical_missing), model.kind.time_range()) {
            // The relation holding these versions' intervals is gone: their ledger rows no
            // longer describe data. Marked failed (not done) before the rebuild, so a crash
            // in between still recomputes them.
            let name = action.name.to_string();
            for fp in &repair.ledger_reset {
                let lost: Vec<Interval> = state.done_intervals(&name, fp.as_str())?.into_iter().map(|s| Interval::new(s, t.grain.next(s))).collect();
                state.mark_intervals(&name, fp.as_str(), &lost, IntervalStatus::Failed, interval::now_millis())?;
            }
        }
        if action.repair.as_ref().is_some_and(|r| !r.ducklake_files_missing.is_empty())
            && !matches!(model.kind, Kind::Full)
            && let Some(lost) = action.physical.as_deref()
        {
            // A DuckLake table whose data files are missing can be neither read nor written (a
            // batch's `DELETE`, an upsert's, read them): dropped, once its ledger rows are marked
            // failed (above), so the build creates it anew. A `full` table is not: its build
            // replaces it whole in one statement.
            engine.execute(&engine.sql().drop_table_if_exists(lost)).map_err(|e| ApplyError::build(model, None, e))?;
            tracing::info!(model = %model.name, table = lost, "DuckLake table with missing data files dropped: rebuilt from its sources");
        }
        let physical = action.physical.clone().unwrap_or_default();
        let started = std::time::Instant::now();
        tracing::info!(model = %model.name, fp = action.fingerprint.short(), "build start");
        let build_err = |error, interval| ApplyError::build(model, interval, error);
        let snapshot = snapshot_record(crate::engine::dialect_for(&project.config), model, action, &physical)?;
        if let Kind::Seed(_) = &model.kind {
            // Parsed, staged and type-checked in the contract phase (on this connection): one
            // statement builds the table from the stage, audited inside the same transaction
            // like a `full` model.
            let checks = audit::checks(model, None, &physical, self.exec);
            let before = pass_start(state, model, &snapshot.fingerprint)?;
            let statements = batch::around(model, self.exec, None, seed::build_statements(model, &physical, engine.sql()), 0);
            let results = audit::transaction(engine, &statements, &model.name, &checks, None).map_err(|e| audit_failure(model, e, None))?;
            let clean = audit::clean(&results);
            self.report.audits.add(results);
            self.audited.insert(model.name.clone());
            state.record_build(&snapshot, None, &[], interval::now_millis())?;
            record_pass(state, model, &snapshot.fingerprint, None, before, Found::of(clean), 1)?;
            seed::drop_stages(project, &BTreeSet::from([model.name.clone()]), engine);
            tracing::info!(model = %model.name, ms = elapsed_ms(started), "build done");
            self.report.built.push(model.name.clone());
            self.report.per_model.insert(model.name.to_string(), 0);
            return Ok(None);
        }
        let body = model.body.as_ref().expect("models other than externals and seeds have a body");
        let version = (snapshot.name.clone(), snapshot.fingerprint.clone());
        // Read before the build starts: a parent changed during the build leaves a mismatch, so
        // the next plan rebuilds (never a record newer than the data).
        let built_from = if matches!(model.kind, Kind::Full) { Some(read_built_from(project, self.versions, &model.name, state)?) } else { None };
        // The other versions on this table, when they read the same relations: the build is
        // theirs too, so their records move with it (SPEC §4 invariant 36 (e)).
        let mut sharers = Vec::new();
        if matches!(model.kind, Kind::Full) {
            if self.shared.is_none() {
                *self.shared = Some(crate::plan::served_by_other_versions(plan, state)?);
            }
            if self.shared.as_ref().is_some_and(|s| s.contains(&(action.name.to_string(), physical.clone()))) {
                sharers = shared_builds(project, plan, action, &physical, self.relation_of, state)?;
            }
        }
        if model.target == crate::core::Target::Parquet {
            if self.inheriting.contains(&action.name)
                && let Some(t) = model.kind.time_range()
            {
                // Its files land in the directory environments serve through another version,
                // published as batches go: every planned interval counts as written.
                self.wrote.entry(model.name.clone()).or_default().extend(action.backfill.iter().flat_map(|b| b.split(t.grain)));
            }
            lake::build(project, model, action, self.exec, &snapshot, built_from.as_deref(), &sharers, state, engine, self.report)?;
            if model.kind.time_range().is_some() && !action.backfill.is_empty() {
                self.heal_sharers(action)?;
            }
            if self.pending.contains(&version) {
                state.clear_pending_rebuild(&version.0, &version.1)?;
            }
            let intervals = self.report.intervals - intervals_before;
            self.built(action, model, started, intervals)?;
            return Ok(None);
        }
        let exec = self.exec;
        match &model.kind {
            Kind::Full | Kind::View => {
                let sql = body.render(&exec.with_bounds(None));
                // Not time-range: every audit sees the whole new relation, inside the build.
                let checks = audit::checks(model, None, &physical, exec);
                let query = format!("\n{sql}");
                if matches!(model.kind, Kind::Full) && engine.sql().refills_tables() && !batch::table_absent(&physical, self.catalog) {
                    check_refill_fits(model, &physical, &sql, engine)?;
                }
                let statements = if matches!(model.kind, Kind::Full) {
                    engine.sql().replace_table_as(&physical, &query)
                } else {
                    engine.sql().replace_view_as(&physical, &query)
                };
                // The model's pre/post statements, in the build's transaction.
                let mut statements = batch::around(model, exec, None, statements, 0);
                if resolve::embeds_project_root(project, model) {
                    // The view resolves project paths: it records the root they were resolved
                    // against, so a moved project is noticed (SPEC §4).
                    statements.push(crate::engine::root_comment_sql(&physical, &project.config.root.to_string_lossy()));
                }
                let before = pass_start(state, model, &snapshot.fingerprint)?;
                self.flights.insert(item, Flight { started, snapshot, intervals: 0, what: FlightKind::Whole { built_from, sharers, before } });
                Ok(Some(schedule::Job {
                    model: model.name.clone(),
                    steps: vec![schedule::Step { statements, checks, batch: None, of: None }],
                    group: std::time::Duration::ZERO,
                }))
            }
            Kind::Embedded => {
                // Inlined wherever it is read: only its snapshot is recorded, nothing is built.
                state.put_snapshot(&snapshot)?;
                self.report.registered.push(model.name.clone());
                Ok(None)
            }
            Kind::IncrementalByTimeRange(t) => {
                let dialect = engine.sql();
                let batches = interval::batches(&action.backfill, t.grain, batch::batch_size(model, t));
                let n = batches.len();
                // A table the engine did not hold when this apply started is created by its first
                // batch's transaction (`CREATE TABLE … AS` the batch: the same columns and types
                // as the query, as an empty `LIMIT 0` creation would give), so a new version
                // costs no extra committed statement and no `DELETE` of nothing. A plain
                // `CREATE` (never `OR REPLACE`): a table that appeared meanwhile fails the batch
                // loudly. The snapshot is recorded after that commit (SPEC §4, "a new time-range table is created by its first batch").
                let create_with_first = batch::table_absent(&physical, self.catalog) && n > 0 && batch::may_create_with_first(model, body);
                if !create_with_first {
                    engine.execute(&batch::ensure_table(model, body, &physical, exec, dialect)).map_err(|e| build_err(e, None))?;
                    state.put_snapshot(&snapshot)?;
                }
                if let (Some(stored), Some(&first)) = (self.stored.get(&model.name), batches.first()) {
                    // The query's types now, over its parents as built (the contract check's
                    // stand-ins for parents this apply computes are typed as declared).
                    let returned = engine.describe(&body.render(&exec.with_bounds(Some(first)))).map_err(|e| build_err(e, None))?;
                    let lossy = contract::lossy_columns(&returned, stored);
                    if !lossy.is_empty() {
                        check_batches_fit(model, t, body, &batches, exec, &lossy, Holder::Table, engine)?;
                    }
                }
                let before = pass_start(state, model, &snapshot.fingerprint)?;
                // Its batches' audits cover the table when they are all it holds, or when what it
                // held passed the same audits: otherwise (batches another environment wrote
                // under other audits, an inherited table) the audits run over the whole table
                // before the view swap, unless the environment already serves it. Audits whose
                // pass cannot be recorded (reading another model, a volatile function) cover it
                // only when the table is this build's own.
                let fresh = create_with_first || (action.build && action.reused_from.is_none());
                let covered = match before {
                    Some(0) => true,
                    None if model.audits.is_empty() || fresh => true,
                    _ => covered_before(state, model, &snapshot.fingerprint, before)?,
                };
                // Checked with warnings: the batches leave it checked, never passed (the
                // promotion still runs its audits over the whole table, `uncovered`).
                let warned = !covered && warned_before(state, model, &snapshot.fingerprint, before)?;
                if n > 0 {
                    self.audited.insert(model.name.clone());
                    if !covered {
                        self.uncovered.insert(model.name.clone());
                    }
                }
                // Every batch's statements, rendered once ([`batch::statements`], which
                // `efmesh render --interval` prints too). The batches of a table this apply
                // creates have nothing to delete (the ranges are disjoint and the table new).
                // Interval audits see their batch, inside the transaction that writes it
                // (write-audit-publish); the last batch also runs the whole ones. Consecutive
                // batches share one engine transaction for up to `[engine] batch_commit_ms`
                // ([`schedule::Job::group`]); their ledger rows are written after its commit
                // ([`schedule::Builds::step`]), and a shared transaction that fails runs its
                // batches again one transaction each, so a failed batch still leaves every
                // earlier batch done and a killed backfill resumes where its last commit left
                // it (SPEC §4 invariant 4).
                let steps: Vec<schedule::Step<'p>> = batches
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| {
                        let statements = batch::statements(model, t, body, &physical, b, exec, dialect, batch::BatchWrite::of(create_with_first, i));
                        let slice = audit::batch_relation(model, t, &physical, b);
                        let mut checks = audit::checks(model, Some(crate::core::audit::AuditScope::Interval), &slice, exec);
                        if i + 1 == n {
                            checks.extend(audit::checks(model, Some(crate::core::audit::AuditScope::Whole), &physical, exec));
                        }
                        schedule::Step { statements, checks, batch: Some(b), of: Some((i, n)) }
                    })
                    .collect();
                // Before any batch reads its inputs: a restatement committed from here on moves
                // the version's data generation, and the batches' done records are refused then
                // (SPEC §4 invariant 33).
                let seen = data_generation(state, &snapshot.name, &snapshot.fingerprint)?;
                self.flights.insert(
                    item,
                    Flight {
                        started,
                        snapshot,
                        intervals: 0,
                        what: FlightKind::Batches { batches, grain: t.grain, create_with_first, before, covered, warned, clean: true, writes: 0, seen },
                    },
                );
                let group = std::time::Duration::from_millis(project.config.engine.batch_commit_ms);
                Ok(Some(schedule::Job { model: model.name.clone(), steps, group }))
            }
            Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_) => {
                let by = match &model.kind {
                    Kind::IncrementalByPartition(p) => upsert::Match::Partition(&p.partitioned_by),
                    Kind::IncrementalByUniqueKey(u) => upsert::Match::Key(&u.key),
                    _ => return Ok(None),
                };
                let sql = body.render(&exec.with_bounds(None));
                // Every audit sees the whole table, inside the upsert's transaction.
                let checks = audit::checks(model, None, &physical, exec);
                // Marked before the engine write (the generation moves), the mark taken back after
                // it when no row changed: a process killed between the engine's commit and the
                // state's leaves the generation moved (SPEC §4 invariant 36 (a)).
                if body.reads_itself() {
                    // `@this` reads the table: its first build finds it, empty.
                    engine.execute(&batch::ensure_table(model, body, &physical, exec, engine.sql())).map_err(|e| build_err(e, None))?;
                }
                // What its parents hold as it reads them, recorded with the write: a version an
                // environment points at anew later is refreshed when they changed since
                // (`plan::mark_stale_builds`).
                let built_from = read_built_from(project, self.versions, &model.name, state)?;
                // Test hook: holds this connection before the upsert (as `run_job` does a job).
                fault::delay_point(&format!("build:{}", model.name));
                // A table environments serve, refreshed in place from rows the apply takes back
                // if it fails: copied first, put back then (SPEC §4 invariant 65).
                if let Some(kept) = inherited::keep(project, (state, &plan.env), self.at_risk, self.catalog, (action, model), &physical, engine)? {
                    self.kept.insert(model.name.clone(), kept);
                }
                let write = state.begin_data_write(&snapshot.name, &snapshot.fingerprint, interval::now_millis())?;
                let (pre, post) = batch::pre_post(model, exec, None);
                let (stats, results) = upsert::write(engine, model, by, &physical, &sql, (&pre, &post), &checks)?;
                fault::crash_point(|| format!("after-upsert:{}", model.name));
                self.report.audits.add(results);
                self.audited.insert(model.name.clone());
                tracing::info!(model = %model.name, "{} {} rows ({} changed)", if matches!(by, upsert::Match::Partition(_)) { "replaced partitions with" } else { "upserted" }, stats.upserted, stats.changed);
                if action.build {
                    state.put_snapshot(&snapshot)?;
                }
                // Pre/post statements may change rows the count above cannot see: a write running
                // any counts as a change.
                state.end_data_write(&write, stats.changed > 0 || !model.statements.is_empty(), interval::now_millis())?;
                state.record_reuse(&snapshot, &built_from, interval::now_millis())?;
                // Its refresh, recorded as pending before anything was written, is done
                // (a process stopped before this line refreshes it again: the same rows).
                if self.pending.contains(&version) {
                    state.clear_pending_rebuild(&version.0, &version.1)?;
                }
                self.built(action, model, started, 0)?;
                Ok(None)
            }
            Kind::ScdType2(s) => {
                let sql = body.render(&exec.with_bounds(None));
                let checks = audit::checks(model, None, &physical, exec);
                // A declared rename carries the old version's rows over into the new table.
                let carry = action.history.as_ref().filter(|h| action.build && h.fate == crate::plan::HistoryFate::Carried);
                let mut snapshot = snapshot;
                if let Some(h) = carry {
                    let described = engine.describe(&sql).map_err(|e| build_err(e, None))?;
                    let (rows, closed) = scd2::carry_over(engine, model, s, &physical, h, &described)?;
                    tracing::info!(model = %model.name, "history carried over from @{}: {rows} versions", h.from.short());
                    // Recorded with the snapshot when it is created (snapshots never change).
                    if let Some(m) = snapshot.metadata.as_object_mut() {
                        m.insert(crate::plan::CARRIED.to_string(), serde_json::json!({"from": h.from.as_str(), "rows": rows, "closed": closed}));
                    }
                } else if action.build && state.snapshot(&snapshot.name, &snapshot.fingerprint)?.is_none() {
                    // No snapshot records this version: a table of its name is what an
                    // interrupted apply left, perhaps from another choice (a carry over).
                    engine.execute(&engine.sql().drop_table_if_exists(&physical)).map_err(|e| build_err(e, None))?;
                }
                // A history environments serve, reconciled in place (as an upsert's table).
                if carry.is_none()
                    && let Some(kept) = inherited::keep(project, (state, &plan.env), self.at_risk, self.catalog, (action, model), &physical, engine)?
                {
                    self.kept.insert(model.name.clone(), kept);
                }
                // Marked before the engine write, taken back when nothing changed (as an upsert).
                let write = state.begin_data_write(&snapshot.name, &snapshot.fingerprint, interval::now_millis())?;
                let (pre, post) = batch::pre_post(model, exec, None);
                let reconciled = scd2::reconcile(engine, model, s, &physical, &sql, plan.now, (&pre, &post), &checks);
                if reconciled.is_err() && carry.is_some() {
                    // No snapshot records the carried table yet: the next apply copies it afresh.
                    let _ = engine.execute(&engine.sql().drop_table_if_exists(&physical));
                }
                let (stats, results) = reconciled?;
                self.report.audits.add(results);
                self.audited.insert(model.name.clone());
                tracing::info!(model = %model.name, "closed {} versions, opened {}", stats.closed, stats.opened);
                if action.build {
                    state.put_snapshot(&snapshot)?;
                }
                state.end_data_write(&write, stats.closed + stats.opened > 0 || carry.is_some() || !model.statements.is_empty(), interval::now_millis())?;
                // As an upsert's: its pending refresh is done.
                if self.pending.contains(&version) {
                    state.clear_pending_rebuild(&version.0, &version.1)?;
                }
                self.built(action, model, started, 0)?;
                Ok(None)
            }
            // Externals are never built; seeds were built above.
            Kind::External(_) | Kind::Seed(_) => Ok(None),
        }
    }

    fn step(&mut self, item: usize, first: usize, results: Vec<schedule::StepResult>) -> Result<(), ApplyError> {
        let state = self.state;
        let (action, model) = self.model(item);
        let inherits = self.inheriting.contains(&action.name);
        let flight = self.flights.get_mut(&item).expect("a step of a started model");
        match &mut flight.what {
            FlightKind::Whole { built_from, sharers, before } => {
                for result in results {
                    let results = result.map_err(|e| audit_failure(model, e, None))?;
                    let clean = audit::clean(&results);
                    self.report.audits.add(results);
                    self.audited.insert(model.name.clone());
                    // The snapshot, the new data generation, what it was built from and the end of
                    // its pending rebuild, in one transaction.
                    state.record_build(&flight.snapshot, built_from.as_deref(), sharers, interval::now_millis())?;
                    record_pass(state, model, &flight.snapshot.fingerprint, None, *before, Found::of(clean), 1)?;
                }
            }
            FlightKind::Batches { batches, grain, create_with_first, clean, writes, seen, .. } => {
                let snapshot = &flight.snapshot;
                // The committed batches' intervals (one engine transaction or several), recorded
                // together in one state transaction after their commit; then the failed batch.
                let mut done = Vec::new();
                let mut failure = None;
                for (k, result) in results.into_iter().enumerate() {
                    let batch = batches[first + k];
                    match result {
                        Ok(results) => {
                            // A pass is recorded only when no audit (warn ones included) found a
                            // row; otherwise the data is recorded as checked ([`Found::Warnings`]).
                            *clean &= audit::clean(&results);
                            self.report.audits.add(results);
                            done.extend(batch.split(*grain));
                        }
                        Err(err) => failure = Some((batch, err)),
                    }
                }
                if inherits {
                    // Committed into a table environments serve through another version: taken
                    // back if the apply fails (so is a batch that failed transiently: its commit
                    // may have landed).
                    let wrote = self.wrote.entry(model.name.clone()).or_default();
                    wrote.extend(done.iter().copied());
                    if let Some((batch, audit::AuditError::Statement(e))) = &failure
                        && e.transient
                    {
                        wrote.extend(batch.split(*grain));
                    }
                }
                if !done.is_empty() {
                    if *create_with_first && first == 0 {
                        // The table exists in the engine; the state store does not know it yet.
                        fault::crash_point(|| format!("after-first-batch:{}", model.name));
                        state.put_snapshot(snapshot)?;
                    }
                    // Test hook: the batches committed, their ledger rows not written yet.
                    fault::delay_point(&format!("batch-committed:{}", model.name));
                    // Refused when a restatement committed since the build began: not done then.
                    if record_done(state, &model.name, snapshot, &done, seen, self.report)? {
                        *writes += 1;
                        self.report.computed(&model.name, done.len());
                        flight.intervals += done.len();
                    }
                }
                if let Some((batch, err)) = failure {
                    let _ = state.mark_intervals(&snapshot.name, &snapshot.fingerprint, &batch.split(*grain), IntervalStatus::Failed, interval::now_millis());
                    return Err(audit_failure(model, err, Some(batch)));
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, item: usize) -> Result<(), ApplyError> {
        let (action, model) = self.model(item);
        let flight = self.flights.remove(&item).expect("a started model");
        if let FlightKind::Batches { batches, before, covered, warned, clean, writes, .. } = &flight.what
            && !batches.is_empty()
        {
            // The last batch ran the `whole` audits over the whole table; the ledger was written
            // once per transaction (one or more batches each). Its `interval` audits saw only
            // the batches written: a pass only when what the table held before was covered; a
            // check (only `warn` audits found rows) when it was checked with warnings, or when a
            // `warn` audit of the batches found rows; nothing when it was neither.
            let scope = Some(crate::core::audit::AuditScope::Whole);
            let found = if *clean && *covered { Found::Nothing } else { Found::Warnings };
            record_pass(self.state, model, &flight.snapshot.fingerprint, scope, before.filter(|_| *covered || *warned), found, *writes)?;
            self.heal_sharers(action)?;
        }
        self.built(action, model, flight.started, flight.intervals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine failure outside any model's build says what the apply was doing, before the
    /// engine's words and the statement; a transient one stays transient (`--retries` retries
    /// it), whether the engine marked it or its message says so.
    #[test]
    fn a_failed_step_is_named_and_stays_as_transient_as_it_was() {
        let step = "reading the engine catalog before promoting `dev`";
        let lost = in_step(step, EngineError::new("SELECT 1", "connection closed").transient());
        assert_eq!(lost.to_string(), "engine error: reading the engine catalog before promoting `dev`: connection closed\n  while running: SELECT 1");
        assert!(ApplyError::Engine(lost).is_transient());
        let io = in_step(step, EngineError::new("SELECT 1", "IO Error: Could not read from file \"x.duckdb\": Resource temporarily unavailable"));
        assert!(ApplyError::Engine(io).is_transient(), "judged by the engine's message before the step was named");
        assert!(!ApplyError::Engine(in_step(step, EngineError::new("SELECT 1", "Binder Error: nope"))).is_transient());
    }

    /// `--retries`: the intervals whose done record a failed attempt saw refused (a restatement
    /// committed meanwhile) reach the report of the attempt that succeeds, before its own, unless
    /// that attempt computed them again (they are done now, or refused again and listed by it).
    #[test]
    fn refused_done_records_of_a_failed_attempt_reach_the_report_of_the_retry_that_succeeds() {
        let day = 86_400_000;
        let refused = |m: &str, from: i64, to: i64| RestatedMeanwhile {
            model: ModelName::parse(m).unwrap(),
            from: from * day,
            to: to * day,
            intervals: usize::try_from(to - from).unwrap(),
        };
        let mut committed = Committed::default();
        committed.add(Committed::of(&ApplyReport { restated_meanwhile: vec![refused("t.daily", 3, 6)], ..ApplyReport::default() }));
        committed.add(Committed::of(&ApplyReport { restated_meanwhile: vec![refused("t.other", 0, 1)], ..ApplyReport::default() }));
        let plan = Plan { env: "dev".into(), has_changes: true, ..Plan::default() };
        let mut report = ApplyReport { restated_meanwhile: vec![refused("t.weekly", 0, 7)], ..ApplyReport::default() };
        committed.merge_into(&mut report, &plan);
        assert_eq!(report.restated_meanwhile, vec![refused("t.daily", 3, 6), refused("t.other", 0, 1), refused("t.weekly", 0, 7)]);

        // Computed again by the attempt that succeeded (wholly inside its backfill): dropped.
        let backfill = [Interval::new(2 * day, 5 * day), Interval::new(5 * day, 8 * day)];
        let daily = ModelName::parse("t.daily").unwrap();
        let mut into = vec![refused("t.other", 0, 1)];
        let earlier = [refused("t.daily", 3, 6), refused("t.daily", 7, 9), refused("t.other", 0, 1)];
        carry_restated_meanwhile(&earlier, &mut into, |m: &ModelName| if *m == daily { &backfill[..] } else { &[][..] });
        assert_eq!(into, vec![refused("t.daily", 7, 9), refused("t.other", 0, 1)], "once each, the partly recomputed range kept");
    }

    #[test]
    fn each_of_several_failures_keeps_its_cause() {
        let full = ApplyError::State(StateError::Backend {
            store: "s.sqlite".into(),
            op: "record 30 interval(s) of `m.a` as done".into(),
            source: Box::new(std::io::Error::other("database or disk is full")),
            transient: false,
        });
        let text = ApplyError::Several(vec![full]).to_string();
        assert!(text.contains("cannot record 30 interval(s) of `m.a` as done") && text.contains("caused by: database or disk is full"), "{text}");
    }

    /// A lost table rebuilt by version `a`: every version stored there had its done intervals
    /// marked failed; once `a` recorded what it recomputed, `b` (the same query, failed where `a`
    /// is done) takes `a`'s done intervals — those `a` did not recompute stay failed — and only
    /// `b`'s data generation moves; `c`, with no failed interval, and `d`, another query (its
    /// rows are not in the table), are left as they are.
    #[test]
    fn a_version_stored_in_a_rebuilt_table_takes_back_what_the_rebuild_recorded_and_nothing_else() {
        let state = crate::state::SqliteStore::open_in_memory().unwrap();
        let physical = format!("\"_efmesh\".\"t__child__{}\"", "a".repeat(64));
        let snapshot = |fp: &str, query: &str| SnapshotRecord {
            name: "t.child".into(),
            fingerprint: fp.to_string(),
            fingerprint_version: 1,
            kind: "incremental_by_time_range".into(),
            physical: physical.clone(),
            canonical: Some(query.into()),
            rendered_sql: "SELECT 1".into(),
            metadata: json!({}),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        };
        let (a, b, c, d) = ("a".repeat(64), "b".repeat(64), "c".repeat(64), "d".repeat(64));
        for fp in [&a, &b, &c] {
            state.put_snapshot(&snapshot(fp, "SELECT 1")).unwrap();
        }
        state.put_snapshot(&snapshot(&d, "SELECT 2")).unwrap();
        let day = 86_400_000;
        let days = |from: i64, n: i64| (from..from + n).map(|k| Interval::new(k * day, (k + 1) * day)).collect::<Vec<_>>();
        state.mark_intervals("t.child", &b, &days(0, 3), IntervalStatus::Failed, 0).unwrap();
        state.mark_intervals("t.child", &d, &days(0, 3), IntervalStatus::Failed, 0).unwrap();
        state.mark_intervals("t.child", &a, &days(2, 1), IntervalStatus::Failed, 0).unwrap();
        state.mark_intervals("t.child", &a, &days(0, 2), IntervalStatus::Done, 0).unwrap();
        state.mark_intervals("t.child", &c, &days(0, 1), IntervalStatus::Done, 0).unwrap();
        let (a_before, c_before) = (data_generation(&state, "t.child", &a).unwrap(), data_generation(&state, "t.child", &c).unwrap());
        let b_before = data_generation(&state, "t.child", &b).unwrap();
        let others: BTreeSet<String> = [a.clone(), b.clone(), c.clone(), d.clone()].into_iter().collect();
        let healed = heal_stored_with(&state, "t.child", &a, &others).unwrap();
        assert_eq!(healed, vec![(b.clone(), 2)]);
        let starts = |fp: &str, failed: bool| -> Vec<i64> {
            let set = if failed { state.failed_intervals("t.child", fp) } else { state.done_intervals("t.child", fp) };
            set.unwrap().into_iter().map(|s| s / day).collect()
        };
        assert_eq!((starts(&b, false), starts(&b, true)), (vec![0, 1], vec![2]), "what `a` did not recompute stays failed");
        assert_eq!((starts(&c, false), starts(&c, true)), (vec![0], vec![]), "no failed interval: left as it is");
        assert_eq!((starts(&d, false), starts(&d, true)), (vec![], vec![0, 1, 2]), "another query: left as it is");
        assert_eq!(data_generation(&state, "t.child", &b).unwrap(), b_before + 1);
        assert_eq!(
            (data_generation(&state, "t.child", &a).unwrap(), data_generation(&state, "t.child", &c).unwrap()),
            (a_before, c_before),
            "nothing is written into the table"
        );
        assert!(heal_stored_with(&state, "t.child", &a, &others).unwrap().is_empty(), "healed once");
    }

    /// A build's done records hand the version's data generation on from one to the next; once
    /// another process moved it (a restatement clearing the range meanwhile), the record is
    /// refused and so is every later one of the build (its batches may have read before the
    /// restatement too): nothing recorded, the refused batches of the model reported as one range.
    #[test]
    fn a_done_record_after_a_restatement_is_refused_with_every_later_one_of_the_build() {
        let state = crate::state::SqliteStore::open_in_memory().unwrap();
        let model = ModelName::parse("t.daily").unwrap();
        let fp = "ab".repeat(32);
        let snapshot = SnapshotRecord {
            name: "t.daily".into(),
            fingerprint: fp.clone(),
            fingerprint_version: 1,
            kind: "incremental_by_time_range".into(),
            physical: format!("\"_efmesh\".\"t__daily__{fp}\""),
            canonical: Some("SELECT 1".into()),
            rendered_sql: "SELECT 1".into(),
            metadata: json!({}),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        };
        state.put_snapshot(&snapshot).unwrap();
        let day = 86_400_000;
        let days = |from: i64, n: i64| (from..from + n).map(|d| Interval::new(d * day, (d + 1) * day)).collect::<Vec<_>>();
        let mut report = ApplyReport::default();
        let mut seen = data_generation(&state, "t.daily", &fp).unwrap();
        assert!(record_done(&state, &model, &snapshot, &days(0, 2), &mut seen, &mut report).unwrap());
        assert!(record_done(&state, &model, &snapshot, &days(2, 1), &mut seen, &mut report).unwrap());
        assert_eq!((seen, data_generation(&state, "t.daily", &fp).unwrap()), (2, 2));
        // The range restated while the next batches run.
        assert_eq!(state.clear_intervals("t.daily", &fp, 0, 3 * day).unwrap(), 3);
        assert!(!record_done(&state, &model, &snapshot, &days(3, 1), &mut seen, &mut report).unwrap());
        assert!(!record_done(&state, &model, &snapshot, &days(4, 2), &mut seen, &mut report).unwrap());
        assert_eq!(seen, 2);
        assert!(state.done_intervals("t.daily", &fp).unwrap().is_empty(), "nothing recorded done");
        assert_eq!(report.restated_meanwhile, vec![RestatedMeanwhile { model: model.clone(), from: 3 * day, to: 6 * day, intervals: 3 }]);
        let line = report.restated_meanwhile[0].describe();
        assert!(line.starts_with("t.daily: 3 interval(s) in [1970-01-04T00:00:00.000Z, 1970-01-07T00:00:00.000Z) computed but not recorded done"), "{line}");
    }
}
