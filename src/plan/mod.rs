//! The plan: the diff between the project and an environment.
//!
//! For every model, in topological order: its fingerprint (canonical body + data-shaping
//! metadata + parents' fingerprints), how it changed against the environment's pointer
//! (`added` / `changed` / `unchanged`; models the environment has but the project lost are
//! `removed`, listed last), whether its version must be built (no snapshot of it exists yet —
//! otherwise promotion is a view swap), and for time-range models the intervals still to compute
//! from `start`, gaps included (reference `core-semantics.md` §4).
//!
//! Planning reads the scripts and the state store only. It never writes the engine or the store;
//! canonical forms it had to compute are returned in [`Plan::canon_cache_misses`] so that `apply`
//! can persist them.

use crate::core::fragment::CanonicalResolver;
use crate::core::interval::{self, Interval, Millis};
use crate::core::name::{ModelName, quote_ident, validate_env};
use crate::core::{Kind, Location, Model};
use crate::project::Project;
use crate::sql::canon::{Canonical, CanonSource, SqlError, canonicalize_with_fallback};
use crate::sql::fingerprint::{FINGERPRINT_VERSION, Fingerprint, fingerprint, physical_table};
use crate::state::{StateError, StateStore};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

pub use crate::core::name::PHYSICAL_SCHEMA;

/// How a model differs from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Not in the environment yet.
    Added,
    /// In the environment, with another fingerprint (its definition or an ancestor's changed).
    Changed,
    /// Same fingerprint as the environment's pointer.
    Unchanged,
    /// In the environment but no longer in the project.
    Removed,
}

impl Change {
    /// `added`, `changed`, `unchanged` or `removed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Changed => "changed",
            Change::Unchanged => "unchanged",
            Change::Removed => "removed",
        }
    }
}

/// One model's line in the plan.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    /// `schema.table`.
    pub name: ModelName,
    /// Kind tag (`full`, `view`, `embedded`, `incremental_by_time_range`, `external`).
    pub kind: &'static str,
    /// How it differs from the environment.
    pub change: Change,
    /// The version the project defines (for `removed`: the environment's).
    pub fingerprint: Fingerprint,
    /// The environment's version, when it has one and it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Fingerprint>,
    /// Qualified physical relation (`"_efmesh"."<schema>__<table>__<fp>"`), for materialised
    /// kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<String>,
    /// True when this version has no snapshot yet and must be built.
    pub build: bool,
    /// Time-range models: the merged `[start, end)` UTC ranges still to compute.
    pub backfill: Vec<Interval>,
    /// Number of grain intervals in `backfill`.
    pub intervals: usize,
    /// Which parser produced the canonical body (`sqlparser`, or the `duckdb-json` fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canonical_source: Option<CanonSource>,
}

impl Action {
    /// True when applying this action writes data or views.
    pub fn has_work(&self) -> bool {
        self.change != Change::Unchanged || self.build || !self.backfill.is_empty()
    }
}

/// The diff of a project against one environment at one instant.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Environment name.
    pub env: String,
    /// The instant intervals were computed for (UTC ms); intervals ending after it are not due.
    #[serde(serialize_with = "ser_iso")]
    pub now: Millis,
    /// True when applying would change anything (a version, a build, a backfill).
    pub has_changes: bool,
    /// Every project model in topological order, then removed ones.
    pub actions: Vec<Action>,
    /// Canonical forms computed because the cache lacked them: (cache key, canonical text).
    #[serde(skip)]
    pub canon_cache_misses: Vec<(String, String)>,
    /// Canonical text per model (what snapshots record).
    #[serde(skip)]
    pub canonical: BTreeMap<ModelName, String>,
}

fn ser_iso<S: serde::Serializer>(t: &Millis, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&interval::to_iso(*t))
}

impl Plan {
    /// The action for `name`.
    pub fn action(&self, name: &ModelName) -> Option<&Action> {
        self.actions.iter().find(|a| &a.name == name)
    }

    /// Counts of actions per change, in a fixed order.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for a in &self.actions {
            *m.entry(a.change.as_str()).or_insert(0) += 1;
        }
        m
    }
}

/// Why a plan could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The environment name is invalid.
    #[error(transparent)]
    Env(#[from] crate::core::name::NameError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A model's SQL has no canonical form.
    #[error("{location}: model `{model}`: {error}")]
    Sql {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: Location,
        /// The parse error.
        error: SqlError,
    },
}

/// Fingerprints and canonical bodies of every model of a project.
#[derive(Debug, Clone, Default)]
pub struct Versions {
    /// Fingerprint per model.
    pub fingerprints: BTreeMap<ModelName, Fingerprint>,
    /// Canonical body per model (absent for externals).
    pub canonical: BTreeMap<ModelName, Canonical>,
    /// Canonical forms computed because the cache lacked them.
    pub misses: Vec<(String, String)>,
}

/// The canon-cache key of a canonically rendered body: blake3 of
/// `"<FINGERPRINT_VERSION>:duckdb:<text>"`, so a version bump or another dialect never reads a
/// stale entry.
pub fn canon_cache_key(rendered: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(format!("{FINGERPRINT_VERSION}:duckdb:").as_bytes());
    h.update(rendered.as_bytes());
    h.finalize().to_hex().to_string()
}

/// Computes every model's canonical body and fingerprint, parents first.
///
/// `cache` maps [`canon_cache_key`]s to canonical texts known from earlier runs. Bodies sqlparser
/// cannot parse fall back to DuckDB's `json_serialize_sql` (an in-memory DuckDB, opened lazily).
///
/// # Errors
/// [`PlanError::Sql`] naming the model whose body is not one valid query.
pub fn versions(project: &Project, cache: &HashMap<String, String>) -> Result<Versions, PlanError> {
    let fallback_db: RefCell<Option<crate::engine::duckdb::DuckDb>> = RefCell::new(None);
    let fallback = |sql: &str| -> Result<String, String> {
        let mut slot = fallback_db.borrow_mut();
        if slot.is_none() {
            *slot = Some(crate::engine::duckdb::DuckDb::in_memory().map_err(|e| e.to_string())?);
        }
        slot.as_mut().expect("opened").serialize_sql(sql)
    };
    let mut out = Versions::default();
    for model in project.dag.models() {
        let canonical = match &model.body {
            None => None,
            Some(body) => {
                let rendered = body.render(&CanonicalResolver);
                let key = canon_cache_key(&rendered);
                let c = match cache.get(&key) {
                    Some(text) => Canonical { text: text.clone(), source: cached_source(text) },
                    None => {
                        let c = canonicalize_with_fallback(&rendered, &fallback).map_err(|error| PlanError::Sql {
                            model: model.name.clone(),
                            location: model.location.clone(),
                            error,
                        })?;
                        out.misses.push((key, c.text.clone()));
                        c
                    }
                };
                Some(c)
            }
        };
        let parents: BTreeMap<ModelName, Fingerprint> =
            model.parents().into_iter().map(|p| { let fp = out.fingerprints[&p].clone(); (p, fp) }).collect();
        let fp = fingerprint(model, canonical.as_ref().map(|c| c.text.as_str()), &parents);
        out.fingerprints.insert(model.name.clone(), fp);
        if let Some(c) = canonical {
            out.canonical.insert(model.name.clone(), c);
        }
    }
    Ok(out)
}

fn cached_source(text: &str) -> CanonSource {
    // DuckDB's serialisation is the only canonical form with this top-level key.
    if text.starts_with("{\"error\":") { CanonSource::DuckDbJson } else { CanonSource::SqlParser }
}

/// Qualified physical relation of a model version, for materialised kinds.
pub fn physical_relation(model: &Model, fp: &Fingerprint) -> Option<String> {
    model.kind.is_materialized().then(|| format!("{}.{}", quote_ident(PHYSICAL_SCHEMA), quote_ident(&physical_table(&model.name, fp))))
}

/// The environment's schema for a model schema: `<schema>` for prod, `<env>__<schema>` otherwise.
pub fn env_schema(env: &str, schema: &str) -> String {
    if env == crate::core::name::PROD { schema.to_string() } else { format!("{env}__{schema}") }
}

/// Computes the plan of `project` against `env` at `now`.
///
/// # Errors
/// [`PlanError`]: an invalid environment name, a state store failure, or a body that does not
/// parse.
pub fn plan(project: &Project, state: &StateStore, env: &str, now: Millis) -> Result<Plan, PlanError> {
    validate_env(env)?;
    let rendered_keys: Vec<String> = project
        .dag
        .models()
        .filter_map(|m| m.body.as_ref().map(|b| canon_cache_key(&b.render(&CanonicalResolver))))
        .collect();
    let cache = state.canon_cache_get(&rendered_keys)?;
    let versions = versions(project, &cache)?;
    let pointers = state.env_pointers(env)?;
    let snapshots = state.snapshot_keys()?;

    let mut actions = Vec::with_capacity(project.dag.len());
    for model in project.dag.models() {
        let name_s = model.name.to_string();
        let fp = versions.fingerprints[&model.name].clone();
        let previous = pointers.get(&name_s).map(|p| Fingerprint::from(p.clone()));
        let change = match &previous {
            None => Change::Added,
            Some(p) if *p == fp => Change::Unchanged,
            Some(_) => Change::Changed,
        };
        let external = matches!(model.kind, Kind::External(_));
        let build = !external && !snapshots.contains(&(name_s.clone(), fp.as_str().to_string()));
        let (backfill, intervals) = match model.kind.time_range() {
            Some(t) => {
                let wanted = interval::wanted(t.start, t.end, t.grain, now);
                // Only this version's ledger: older versions' rows never matter here.
                let done = state.done_intervals(&name_s, fp.as_str())?;
                let missing = interval::missing(&wanted, &done, t.lookback);
                (interval::merge(&missing), missing.len())
            }
            None => (Vec::new(), 0),
        };
        actions.push(Action {
            name: model.name.clone(),
            kind: model.kind.tag(),
            change,
            physical: physical_relation(model, &fp),
            previous: previous.filter(|p| *p != fp),
            fingerprint: fp,
            build,
            backfill,
            intervals,
            canonical_source: versions.canonical.get(&model.name).map(|c| c.source),
        });
    }
    for (name, fp) in &pointers {
        let Ok(model_name) = ModelName::parse(name) else { continue };
        if project.dag.get(&model_name).is_none() {
            actions.push(Action {
                name: model_name,
                kind: "removed",
                change: Change::Removed,
                fingerprint: Fingerprint::from(fp.clone()),
                previous: None,
                physical: None,
                build: false,
                backfill: Vec::new(),
                intervals: 0,
                canonical_source: None,
            });
        }
    }
    let has_changes = actions.iter().any(Action::has_work);
    Ok(Plan {
        env: env.to_string(),
        now,
        has_changes,
        actions,
        canon_cache_misses: versions.misses,
        canonical: versions.canonical.into_iter().map(|(k, v)| (k, v.text)).collect(),
    })
}
