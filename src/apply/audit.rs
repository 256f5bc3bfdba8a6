//! Running audits: write-audit-publish during `apply`, and `efmesh audit <env>`.
//!
//! An audit's SQL selects the violating rows of the relation under audit; this module counts
//! them, keeps a few as samples (each row as a JSON object) and decides:
//!
//! - **inside a transaction** ([`transaction`]): the statements that write a batch (or create a
//!   table) run first, then the audits over the uncommitted rows; a blocking violation rolls
//!   the whole transaction back, so the failing rows never reach a table anyone reads;
//! - **read-only** ([`run`]): before a view swap, and for `efmesh audit`.
//!
//! `warn` audits never block: their violations are logged on stderr and reported.

use crate::core::ModelName;
use crate::core::audit::{Audit, AuditScope};
use crate::core::interval::Interval;
use crate::core::name::quote_ident;
use crate::engine::{Engine, EngineError};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Violating rows a result keeps as samples.
pub const SAMPLE_ROWS: usize = 3;

/// The outcome of one audit on one model (over one relation, or summed over several batches).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditResult {
    /// The audited model.
    pub model: ModelName,
    /// The audit and its arguments, e.g. `not_null(tailnum)`.
    pub audit: String,
    /// The definition's name, e.g. `not_null`.
    pub name: String,
    /// The bound arguments.
    pub args: Map<String, Value>,
    /// `interval` or `whole`.
    pub scope: AuditScope,
    /// Whether a violation blocks.
    pub blocking: bool,
    /// How many times it ran (batches of a time-range model).
    pub runs: usize,
    /// Violating rows, over every run.
    pub violations: u64,
    /// Up to [`SAMPLE_ROWS`] violating rows, each a JSON object (column → value), first run first.
    pub sample: Vec<Value>,
    /// The batches `[start, end)` (UTC) in which violations were found.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<Interval>,
    /// The engine's message when the audit's SQL could not run (`efmesh audit`, which goes on
    /// with the other audits): a failure, blocking or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the audit is attached (`file:line` of its use in the model's definition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Why `efmesh audit` did not run the audit (a failure, blocking or not): the embedded
    /// models or externals its SQL inlines whose project definition differs from the version
    /// the environment serves ([`audit_environment`]). Never set during `apply`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

impl AuditResult {
    /// The result of `audit` on `model` before anything is known of it: not run, nothing found.
    fn of(model: &ModelName, audit: &Audit) -> AuditResult {
        AuditResult {
            model: model.clone(),
            audit: audit.label(),
            name: audit.name.clone(),
            args: audit.args.clone(),
            scope: audit.scope,
            blocking: audit.blocking,
            runs: 0,
            violations: 0,
            sample: Vec::new(),
            intervals: Vec::new(),
            error: None,
            location: Some(audit.location.to_string()),
            not_run: None,
        }
    }

    /// True for a blocking audit that found violating rows, and for any audit whose SQL could
    /// not run or that was not run ([`AuditResult::not_run`]).
    pub fn failed(&self) -> bool {
        (self.blocking && self.violations > 0) || self.error.is_some() || self.not_run.is_some()
    }

    /// One line naming the audit, the model, where and how many rows, then the samples.
    pub fn describe(&self) -> String {
        let mut s = self.headline();
        for row in &self.sample {
            s.push_str(&format!("\n    {row}"));
        }
        let more = self.violations.saturating_sub(self.sample.len() as u64);
        if more > 0 && !self.sample.is_empty() {
            s.push_str(&format!("\n    … and {more} more"));
        }
        s
    }

    /// The first line of [`AuditResult::describe`], without the sample rows: the audit, the
    /// model, where (the batch) and how many rows.
    pub fn headline(&self) -> String {
        let rows = if self.violations == 1 { "row" } else { "rows" };
        let at = match self.intervals.as_slice() {
            [one] => format!(" in {one}"),
            [] => String::new(),
            many => format!(" in {} batches", many.len()),
        };
        let place = self.location.as_deref().map(|l| format!("{l}: ")).unwrap_or_default();
        format!("{place}audit `{}` on model `{}`{at}: {} violating {rows}", self.audit, self.model, self.violations)
    }

    /// Folds another run of the same audit into this one.
    fn absorb(&mut self, other: AuditResult) {
        self.runs += other.runs;
        self.violations += other.violations;
        let room = SAMPLE_ROWS.saturating_sub(self.sample.len());
        self.sample.extend(other.sample.into_iter().take(room));
        self.intervals.extend(other.intervals);
    }
}

/// Results of every audit run during one apply, one entry per (model, audit, scope).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct AuditReport(pub Vec<AuditResult>);

impl AuditReport {
    /// Replaces what was reported for each audit of `results` (a pass over the whole relation
    /// after its batches' own: the rows they saw are counted once).
    pub fn supersede(&mut self, results: Vec<AuditResult>) {
        self.0.retain(|x| !results.iter().any(|r| r.model == x.model && r.audit == x.audit));
        self.add(results);
    }

    /// Adds runs, summing those of an audit already reported.
    pub fn add(&mut self, results: Vec<AuditResult>) {
        for r in results {
            match self.0.iter_mut().find(|x| x.model == r.model && x.audit == r.audit && x.scope == r.scope) {
                Some(x) => x.absorb(r),
                None => self.0.push(r),
            }
        }
    }
}

/// Why audited work stopped.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A statement the audits guard failed (nothing committed).
    #[error(transparent)]
    Statement(EngineError),
    /// An audit's query failed to run (nothing committed).
    #[error("{location}: audit `{audit}` on model `{model}` could not run: {error}")]
    Query {
        /// The model.
        model: ModelName,
        /// The audit's label.
        audit: String,
        /// Where the audit is attached (its use in the model's definition).
        location: crate::core::Location,
        /// The engine error.
        error: EngineError,
    },
    /// Blocking audits found violating rows (nothing committed, nothing promoted).
    #[error("{}", render_failures(.0, true))]
    Failed(Vec<AuditResult>),
    /// [`AuditError::Failed`] in `efmesh run`, which never promotes: its message does not say
    /// that nothing was promoted ([`AuditError::in_run`]).
    #[error("{}", render_failures(.0, false))]
    FailedInRun(Vec<AuditResult>),
}

impl AuditError {
    /// This failure as `efmesh run` reports it: blocking failures are
    /// [`AuditError::FailedInRun`] (a run promotes nothing, so saying so would mislead).
    #[must_use]
    pub fn in_run(self) -> AuditError {
        match self {
            AuditError::Failed(failures) => AuditError::FailedInRun(failures),
            other => other,
        }
    }
}

/// The message of blocking failures: each audit, model, count and sample rows; `promoting`
/// (an apply) says that nothing was promoted.
pub fn render_failures(failures: &[AuditResult], promoting: bool) -> String {
    let n = failures.len();
    let mut s = format!("{n} blocking audit{} failed{}:", if n == 1 { "" } else { "s" }, if promoting { ", nothing was promoted" } else { "" });
    for f in failures {
        s.push_str(&format!("\n  {}", f.describe()));
    }
    s
}

/// The relation an `interval` audit sees for a batch of a time-range model: its physical
/// table restricted to `[start, end)` on the time column (the literals of the batch's `DELETE`
/// and `INSERT`, [`super::batch::time_column_bounds`]).
pub fn batch_relation(model: &crate::core::Model, t: &crate::core::TimeRange, physical: &str, batch: Interval) -> String {
    let tc = quote_ident(&t.time_column);
    let (s, e) = super::batch::time_column_bounds(model, t, batch);
    format!("(SELECT * FROM {physical} WHERE {tc} >= {s} AND {tc} < {e})")
}

/// Runs one audit, rendered as `sql` ([`checks`]): the number of violating rows and the first
/// few of them.
///
/// # Errors
/// [`AuditError::Query`] when the audit's SQL does not run.
pub fn run_one(engine: &mut dyn Engine, model: &ModelName, audit: &Audit, sql: &str, batch: Option<Interval>) -> Result<AuditResult, AuditError> {
    let err = |error| AuditError::Query { model: model.clone(), audit: audit.label(), location: audit.location.clone(), error };
    let count = engine.query(&format!("SELECT count(*) FROM (\n{sql}\n) AS _efmesh_audit")).map_err(err)?;
    let violations: u64 = count.first().and_then(|r| r.first().cloned().flatten()).and_then(|n| n.parse().ok()).unwrap_or(0);
    let sample = if violations > 0 {
        engine
            .query(&format!("SELECT {} FROM (\n{sql}\n) AS _efmesh_audit LIMIT {SAMPLE_ROWS}", engine.sql().row_json_text("_efmesh_audit")))
            .map_err(err)?
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .map(|j| serde_json::from_str(&j).unwrap_or(Value::String(j)))
            .collect()
    } else {
        Vec::new()
    };
    Ok(AuditResult {
        runs: 1,
        violations,
        sample,
        // A `whole` audit run with a batch saw the whole table, not the batch.
        intervals: batch.filter(|_| violations > 0 && audit.scope == AuditScope::Interval).into_iter().collect(),
        ..AuditResult::of(model, audit)
    })
}

/// Logs every `warn` audit that found violating rows: one short line at level warn (the audit,
/// the model, the batch, the count; a backfill logs one per batch), and its sample rows at level
/// debug only. The command's summary on stdout reports the samples once, for every batch together.
pub fn log_warnings(results: &[AuditResult]) {
    for r in results.iter().filter(|r| !r.blocking && r.violations > 0) {
        tracing::warn!("{}", r.headline());
        for row in &r.sample {
            tracing::debug!(audit = %r.audit, model = %r.model, row = %row, "warn audit: violating row");
        }
    }
}

/// Runs `checks` (each an audit and its SQL, [`checks`]) read-only and returns every result;
/// blocking failures are results too (the caller decides).
///
/// # Errors
/// [`AuditError::Query`] for the first audit whose SQL does not run.
pub fn run(engine: &mut dyn Engine, model: &ModelName, checks: &[(&Audit, String)], batch: Option<Interval>) -> Result<Vec<AuditResult>, AuditError> {
    checks.iter().map(|(a, sql)| run_one(engine, model, a, sql, batch)).collect()
}

/// Runs `statements` and then `checks` in ONE engine transaction, and commits only when no
/// blocking audit found a violating row (write-audit-publish). Without checks this is
/// [`Engine::transaction`].
///
/// # Errors
/// [`AuditError`]; in every case the transaction was rolled back.
pub fn transaction(
    engine: &mut dyn Engine,
    statements: &[String],
    model: &ModelName,
    checks: &[(&Audit, String)],
    batch: Option<Interval>,
) -> Result<Vec<AuditResult>, AuditError> {
    if checks.is_empty() {
        engine.transaction(statements).map_err(AuditError::Statement)?;
        return Ok(Vec::new());
    }
    engine.begin().map_err(AuditError::Statement)?;
    let results = within(engine, statements, model, checks, batch).inspect_err(|_| {
        let _ = engine.rollback();
    })?;
    engine.commit().map_err(AuditError::Statement)?;
    Ok(results)
}

/// Runs `statements` and then `checks` inside the transaction the caller opened
/// ([`Engine::begin`]), neither committing nor rolling back: the caller commits when every part
/// of the transaction succeeded and rolls back otherwise (a time-range model's batches sharing a
/// transaction, [`super::schedule::Job::group`]).
///
/// # Errors
/// [`AuditError`]: a statement failed, an audit could not run, or blocking audits found rows.
pub fn within(
    engine: &mut dyn Engine,
    statements: &[String],
    model: &ModelName,
    checks: &[(&Audit, String)],
    batch: Option<Interval>,
) -> Result<Vec<AuditResult>, AuditError> {
    for s in statements {
        engine.execute(s).map_err(AuditError::Statement)?;
    }
    let results = run(engine, model, checks, batch)?;
    log_warnings(&results);
    let failures: Vec<AuditResult> = results.iter().filter(|r| r.failed()).cloned().collect();
    if !failures.is_empty() {
        return Err(AuditError::Failed(failures));
    }
    Ok(results)
}

/// What an audit pass over a whole relation of `model` checks, as text for
/// [`crate::state::AuditPass::digest`]: the scope (`None`: every audit; `Whole`: the `whole`
/// ones), every audit of the model as defined (name, arguments, blocking, scope, SQL — not
/// where it is written: a line moved by an edit above it changes no audit) and the efmesh
/// version. A pass recorded under another digest proves nothing about these audits.
pub fn pass_digest(model: &crate::core::Model, scope: Option<AuditScope>) -> String {
    let audits: Vec<serde_json::Value> = model
        .audits
        .iter()
        .map(|a| {
            let mut v = serde_json::to_value(a).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("location");
            }
            v
        })
        .collect();
    let text = serde_json::json!({
        "efmesh": env!("CARGO_PKG_VERSION"),
        "scope": scope,
        "audits": audits,
    })
    .to_string();
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

/// True when the data of `model`'s versions is tracked by a data generation that moves with every
/// write to it (SPEC §4 invariant 36), so audits that passed at one generation passed on the same
/// data: `full`, seed and time-range tables in the engine. Not views (their data is their
/// parents'), externals (written outside efmesh), keyed kinds (re-executed by every run), lake
/// and DuckLake targets.
/// Only audits whose SQL provably reads nothing but the audited relation and calls no volatile
/// function ([`crate::sql::audit_reads::reads_only`]) qualify: another table's data or the clock
/// could change their result at the same generation.
/// An audit that `ref`s another model never qualifies (the other model's data is not tracked by
/// this version's generation), so it runs at every promotion.
pub fn pass_is_provable(model: &crate::core::Model) -> bool {
    generation_tracks(model) && read_only_the_audited(model)
}

/// True when the data generation of `model`'s versions tracks every write efmesh makes to their
/// data (SPEC §4 invariant 44): a `full`, seed or time-range model stored in an engine table.
pub fn generation_tracks(model: &crate::core::Model) -> bool {
    use crate::core::Kind;
    model.target == crate::core::Target::Table && matches!(model.kind, Kind::Full | Kind::Seed(_) | Kind::IncrementalByTimeRange(_))
}

/// True when every audit of `model` provably reads nothing but the audited relation: no `ref`
/// of another model, and SQL that [`crate::sql::audit_reads::reads_only`] proves reads no other
/// relation and calls no volatile function.
pub fn read_only_the_audited(model: &crate::core::Model) -> bool {
    model.audits.iter().all(|a| a.sql.refs().next().is_none() && crate::sql::audit_reads::reads_only(|this| a.sql.render(this, &|m| m.to_string())))
}

/// True when no audit in `results` found a violating row (warn audits included): only then is a
/// pass recorded, so a reused pass never hides a warning.
pub fn clean(results: &[AuditResult]) -> bool {
    results.iter().all(|r| r.violations == 0)
}

/// The audits of `model` that run in a pass of `scope`, each with its SQL over `relation` (the
/// relation it sees); the models an audit references render through `resolver` (apply: the
/// physical relation of the version being applied; `efmesh audit`: the environment's view).
pub fn checks<'a>(model: &'a crate::core::Model, scope: Option<AuditScope>, relation: &str, resolver: &dyn crate::core::Resolver) -> Vec<(&'a Audit, String)> {
    model.audits.iter().filter(|a| scope.is_none_or(|s| a.scope == s)).map(|a| (a, a.sql.render(relation, &|m| resolver.relation(m)))).collect()
}

/// The models `efmesh audit` audits: those of `project` with audits that `env` serves
/// (`served`: the environment's pointer names), restricted to `only` when it is not empty, in
/// topological order.
fn audited<'a>(
    project: &'a crate::project::Project,
    served: &'a BTreeSet<String>,
    only: &'a BTreeSet<ModelName>,
) -> impl Iterator<Item = &'a crate::core::Model> {
    project.dag.models().filter(move |m| !m.audits.is_empty() && served.contains(&m.name.to_string()) && (only.is_empty() || only.contains(&m.name)))
}

/// Adds `name` to `out` when it is an embedded model or an external, with the embedded models
/// and externals its own query inlines in turn: what rendering `name` against an environment's
/// views ([`super::resolve::ExecResolver`], `Mode::Env`) takes from the project's definitions
/// rather than from the environment (every other model reads the environment's view).
fn inline_into(project: &crate::project::Project, name: &ModelName, out: &mut BTreeSet<ModelName>) {
    let Some(model) = project.dag.get(name) else { return };
    if !matches!(model.kind, crate::core::Kind::Embedded | crate::core::Kind::External(_)) || !out.insert(name.clone()) {
        return;
    }
    for parent in model.parents() {
        inline_into(project, &parent, out);
    }
}

/// The embedded models and externals that `audit` of `model`, rendered against an
/// environment's views, inlines from the project's definitions: the audited model itself when
/// it is one, and those its query and the models the audit `ref`s inline.
pub fn inlined_by(project: &crate::project::Project, model: &crate::core::Model, audit: &Audit) -> BTreeSet<ModelName> {
    let mut out = BTreeSet::new();
    inline_into(project, &model.name, &mut out);
    for r in audit.sql.refs() {
        inline_into(project, &r.target, &mut out);
    }
    out
}

/// Every embedded model and external that some audit `efmesh audit` runs
/// inlines from the project's definitions ([`inlined_by`]).
pub fn inlined_by_audits(project: &crate::project::Project, served: &BTreeSet<String>, only: &BTreeSet<ModelName>) -> BTreeSet<ModelName> {
    audited(project, served, only).flat_map(move |m| m.audits.iter().flat_map(move |a| inlined_by(project, m, a))).collect()
}

/// Why `efmesh audit` cannot vouch that an environment serves the project's definition of an
/// embedded model or an external ([`unserved_definitions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unserved {
    /// The project's definition differs from the version the environment serves.
    Differs,
    /// The project's body cannot be parsed (the parse error, naming its `file:line`): it cannot
    /// be compared with what the environment serves.
    Unparsable(String),
}

/// The models of `names` (embedded models and externals, [`inlined_by_audits`]) whose project
/// definition is not known to be the version the environment serves (`pointers`: its pointer
/// set, model name → fingerprint): auditing the project's definition of one would not audit
/// what the environment serves.
///
/// A model serves its project definition when the fingerprint of the project's definition over
/// the versions the environment serves of its parents equals the environment's pointer (a
/// pointer was fingerprinted over its parents' pointers at the same apply; an unapplied edit of
/// a parent that is a view or a table changes the model's fingerprint in a plan, not what its
/// rendering reads: that parent renders as the environment's view). A model or parent the
/// environment does not serve differs. Only the bodies of `names` are canonicalised (the
/// canonical-body cache of the state store first), as the plan does: an unrelated model whose
/// SQL does not parse changes nothing here, and a model of `names` whose body does not parse is
/// [`Unserved::Unparsable`], never an error.
///
/// # Errors
/// Reading the state store's cache fails.
pub fn unserved_definitions(
    project: &crate::project::Project,
    state: &dyn crate::state::StateStore,
    pointers: &BTreeMap<String, String>,
    names: &BTreeSet<ModelName>,
) -> Result<BTreeMap<ModelName, Unserved>, crate::state::StateError> {
    let mut out = BTreeMap::new();
    if names.is_empty() {
        return Ok(out);
    }
    let keyed: Vec<(ModelName, Option<(String, String)>)> =
        names.iter().filter_map(|n| project.dag.get(n)).map(|m| (m.name.clone(), crate::plan::rendered_body(project, m))).collect();
    let keys: Vec<String> = keyed.iter().filter_map(|(_, k)| k.as_ref().map(|(key, _)| key.clone())).collect();
    let cache = state.canon_cache_get(&keys)?;
    let mut bodies: BTreeMap<ModelName, Option<(String, String)>> = keyed.into_iter().collect();
    for name in names {
        let (Some(model), Some(served)) = (project.dag.get(name), pointers.get(&name.to_string())) else {
            out.insert(name.clone(), Unserved::Differs);
            continue;
        };
        let digest = match crate::plan::digest_of(project, model, bodies.remove(name).flatten(), &cache) {
            Ok(digest) => digest,
            Err(e) => {
                out.insert(name.clone(), Unserved::Unparsable(e.to_string()));
                continue;
            }
        };
        if !serves_definition(model, digest.as_deref(), pointers, served) {
            out.insert(name.clone(), Unserved::Differs);
        }
    }
    Ok(out)
}

/// True when `served` (the environment's pointer of `model`) is the fingerprint of the
/// project's definition of `model` (`digest`: its canonical-body digest) over the versions the
/// environment (`pointers`) serves of its parents; see [`unserved_definitions`].
fn serves_definition(model: &crate::core::Model, digest: Option<&str>, pointers: &BTreeMap<String, String>, served: &str) -> bool {
    use crate::sql::fingerprint::{Fingerprint, fingerprint_with_digest};
    let mut parents: BTreeMap<ModelName, Fingerprint> = BTreeMap::new();
    for parent in model.parents() {
        let Some(fp) = pointers.get(&parent.to_string()) else { return false };
        parents.insert(parent, Fingerprint::from(fp.clone()));
    }
    fingerprint_with_digest(model, digest, &parents).as_str() == served
}

/// Runs every audit of the project's models that `env` serves (`served`: the environment's
/// pointer names), over what the environment serves now: its views, externals' sources and
/// embedded models rendered against its views (so are the models an audit `ref`s). Models are
/// visited in topological order and audits in declaration order; every audit runs over the
/// whole relation, whatever its scope. `only`, when not empty, restricts the models.
///
/// Every audit runs: one whose SQL fails against the environment (a column that no longer
/// exists) is a failed result carrying the engine's message and the audit's `file:line`, and
/// the others still run.
///
/// Except an audit whose SQL inlines ([`inlined_by`]) one of `differs` (embedded models and
/// externals whose project definition differs from what `env` serves, or cannot be parsed to
/// tell, [`unserved_definitions`]): it would audit a query or a source the environment may not
/// serve, so it is not run, and its result is a failure saying why ([`AuditResult::not_run`]).
pub fn audit_environment(
    project: &crate::project::Project,
    env: &str,
    served: &BTreeSet<String>,
    only: &BTreeSet<ModelName>,
    differs: &BTreeMap<ModelName, Unserved>,
    engine: &mut dyn Engine,
) -> Vec<AuditResult> {
    use crate::core::Resolver;
    let physicals = BTreeMap::new();
    let exec = super::resolve::ExecResolver::new(project, &physicals, super::resolve::Mode::Env(env));
    let mut out = Vec::new();
    for model in audited(project, served, only) {
        let relation = exec.relation(&model.name);
        for (audit, sql) in checks(model, None, &relation, &exec) {
            let stale: Vec<(&ModelName, &Unserved)> = inlined_by(project, model, audit).iter().filter_map(|n| differs.get_key_value(n)).collect();
            if !stale.is_empty() {
                out.push(not_run(&model.name, audit, env, &stale));
                continue;
            }
            out.push(run_one(engine, &model.name, audit, &sql, None).unwrap_or_else(|e| errored(&model.name, audit, &e)));
        }
    }
    out
}

/// The result of an audit `efmesh audit` did not run: it inlines `stale`, embedded models or
/// externals whose project definition differs from what `env` serves, or cannot be parsed.
fn not_run(model: &ModelName, audit: &Audit, env: &str, stale: &[(&ModelName, &Unserved)]) -> AuditResult {
    let differing: Vec<String> = stale.iter().filter(|(_, why)| matches!(why, Unserved::Differs)).map(|(n, _)| format!("`{n}`")).collect();
    let mut reasons = Vec::new();
    if !differing.is_empty() {
        let (definition, differ, them) = if differing.len() == 1 { ("definition", "differs", "it") } else { ("definitions", "differ", "them") };
        reasons.push(format!(
            "{}: the project's {definition} {differ} from what `{env}` serves; apply {them} (or revert the edit), then audit again",
            differing.join(", ")
        ));
    }
    for (name, why) in stale {
        if let Unserved::Unparsable(error) = why {
            reasons.push(format!(
                "`{name}`: the project's definition cannot be parsed, so whether `{env}` serves it is not known ({error}); fix it (or revert the edit), then audit again"
            ));
        }
    }
    AuditResult { not_run: Some(reasons.join("; ")), ..AuditResult::of(model, audit) }
}

/// The result of an audit whose SQL could not run: a failure carrying the engine's message.
fn errored(model: &ModelName, audit: &Audit, e: &AuditError) -> AuditResult {
    let message = match e {
        AuditError::Query { error, .. } => error.to_string(),
        other => other.to_string(),
    };
    AuditResult { runs: 1, error: Some(message), ..AuditResult::of(model, audit) }
}
