//! The plan memo: the no-op plan of an environment, computed once and replayed until the
//! project or the state store changes.
//!
//! A plan in which every model is `unchanged` depends on three things only: the loaded project,
//! what the state store says (pointers, snapshots, the ledger) and, for time-range models, the
//! instant `now` (which intervals are due). `apply` computes such a plan right after it promotes
//! and stores it per environment ([`crate::state::StateStore::plan_memo_put`]), keyed by
//! [`key`]: a digest of the whole loaded project (every model as loaded, the configuration, the
//! efmesh version) and the store's write counter ([`crate::state::StateStore::generation`]).
//! A later plan with the same key skips canonicalisation lookups, fingerprinting and the
//! per-model diff, and only recomputes what depends on `now`: each time-range model's missing
//! intervals, from the done intervals the memo recorded (then, as every plan, the done intervals
//! a parent's rewrite reaches: [`super::recompute`]). Any edit to a model file (or anything
//! a model reads at load time, such as a seed file's hash), any write to the store (another
//! apply, a ledger row, a promotion of the same environment) or another efmesh version changes
//! the key (and [`MEMO_VERSION`] must be bumped whenever the planner's logic changes what a plan
//! says), and the plan is computed in full.
//!
//! The memo body is text, one line per model in topological order, five tab-separated fields:
//! `name`, `fingerprint`, `physical` (the relation the plan serves; empty for externals and
//! embedded models; stored rather than re-derived, which would be most of a replay's cost),
//! `source` (`sqlparser`, `duckdb-json` or empty) and `done`, the merged `[start, end)` UTC
//! millisecond ranges of the ledger's done intervals as `start/end` joined by `,`. A plan whose
//! fields contain a tab or a newline gets no memo. The format is read zero-copy: parsing it is
//! most of a replay.

use super::{Action, Change, Plan};
use crate::core::interval::{self, Interval, Millis};
use crate::project::Project;
use crate::sql::canon::CanonSource;
use crate::sql::fingerprint::{FINGERPRINT_VERSION, Fingerprint};
use crate::state::{StateError, StateStore};
use std::collections::BTreeSet;

/// Bumped whenever the memo's meaning or body, or the planner's logic, changes, so an older memo
/// is never replayed.
pub const MEMO_VERSION: u32 = 8;

/// A memo ready to store: its key and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memo {
    /// [`key`] at the generation the plan was computed from.
    pub key: String,
    /// The JSON body described in the module docs.
    pub body: String,
}

/// The memo key of `project` planned against `env` with the store at `generation`: blake3 (hex)
/// over the memo and fingerprint versions, efmesh's version, the environment, the generation,
/// the configuration (its `Debug` form) and the digest of every model exactly as loaded
/// ([`crate::core::Dag::digest`]: each model fed through its derived `Hash`, which covers every
/// field, so a field a model gains is covered without listing it here). Only equality matters:
/// the key is compared, never interpreted, and stays on the machine that wrote it.
pub fn key(project: &Project, env: &str, generation: i64) -> String {
    let mut h = blake3::Hasher::new();
    h.update(
        format!(
            "efmesh-plan-memo {MEMO_VERSION} {FINGERPRINT_VERSION}.{} {} {env:?} {generation}\n{:?}\n",
            crate::sql::canon::CANON_RULES,
            env!("CARGO_PKG_VERSION"),
            project.config
        )
        .as_bytes(),
    );
    h.update(&project.dag.digest());
    h.finalize().to_hex().to_string()
}

/// Set to `1` to make every memo hit also compute the plan in full and panic when the two
/// differ (the test suite runs with it).
pub const VERIFY_ENV: &str = "EFMESH_VERIFY_PLAN_MEMO";

/// The memo of the environment as `plan` leaves it once applied: every model of the project
/// then points at the plan's version, with the plan's physical storage, and is `unchanged`.
/// `done` gives, per non-removed action in order, the done interval starts of time-range models
/// as the store holds them after the apply (empty for other kinds). `key` is [`key`] at the
/// store's generation after the apply's last write.
pub fn after_apply(plan: &Plan, project: &Project, key: String, done: &[BTreeSet<Millis>]) -> Option<Memo> {
    let kept: Vec<&Action> = plan.actions.iter().filter(|a| a.change != Change::Removed).collect();
    if kept.len() != project.dag.len() || done.len() != kept.len() {
        return None;
    }
    use std::fmt::Write;
    let mut body = String::with_capacity(kept.len() * 160);
    for ((action, model), done) in kept.into_iter().zip(project.dag.models()).zip(done) {
        if action.name != model.name {
            return None;
        }
        let physical = action.physical.as_deref().unwrap_or("");
        if physical.contains(['\t', '\n']) {
            return None;
        }
        let source = action.canonical_source.map_or("", |s| s.as_str());
        let _ = write!(body, "{}\t{}\t{physical}\t{source}\t", action.name, action.fingerprint.as_str());
        if let Some(t) = model.kind.time_range() {
            let ranges = interval::merge(&done.iter().map(|s| Interval::new(*s, t.grain.next(*s))).collect::<Vec<_>>());
            for (i, r) in ranges.iter().enumerate() {
                let _ = write!(body, "{}{}/{}", if i == 0 { "" } else { "," }, r.start, r.end);
            }
        }
        body.push('\n');
    }
    Some(Memo { key, body })
}

/// The memo of `env` replayed at `now`, when the store holds one whose key matches the project
/// and the store's current generation.
///
/// # Errors
/// [`StateError`] when the store cannot be read.
pub fn lookup(project: &Project, state: &dyn StateStore, env: &str, now: Millis) -> Result<Option<Plan>, StateError> {
    let Some((stored, body)) = state.plan_memo_get(env)? else { return Ok(None) };
    let generation = state.generation()?;
    if stored != key(project, env, generation) {
        return Ok(None);
    }
    let Some(mut plan) = replay(project, env, now, &body) else { return Ok(None) };
    super::recompute::propagate(project, state, &mut plan)?;
    Ok(Some(Plan { generation: Some(generation), ..plan }))
}

/// Panics when a replayed plan differs from the plan computed in full (see [`VERIFY_ENV`]).
pub fn verify(replayed: &Plan, computed: &Plan) {
    let a = serde_json::to_value(replayed).expect("plan serialises");
    let b = serde_json::to_value(computed).expect("plan serialises");
    assert_eq!(a, b, "the plan memo of `{}` disagrees with the full plan", replayed.env);
    assert!(computed.actions.iter().all(|x| x.metadata.is_null() && x.new_columns.is_empty()), "a memo was replayed for a plan with work");
}

/// Rebuilds the plan a memo stands for, at `now`; `None` when the body does not fit the project
/// (then the caller computes the plan in full).
fn replay(project: &Project, env: &str, now: Millis, body: &str) -> Option<Plan> {
    let mut actions = Vec::with_capacity(project.dag.len());
    let mut lines = body.lines();
    for model in project.dag.models() {
        let mut fields = lines.next()?.split('\t');
        let (name, fp, physical, source, done) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        if name.split_once('.') != Some((model.name.schema(), model.name.table())) {
            return None;
        }
        let fingerprint = Fingerprint::parse(fp).ok()?;
        let physical = (!physical.is_empty()).then(|| physical.to_string());
        let canonical_source = match source {
            "" => None,
            other => Some(CanonSource::from_name(other)),
        };
        let mut outside = None;
        let (backfill, intervals) = match model.kind.time_range() {
            Some(t) => {
                let mut starts = BTreeSet::new();
                for range in done.split(',').filter(|r| !r.is_empty()) {
                    let (s, e) = range.split_once('/')?;
                    let (s, e) = (s.parse::<Millis>().ok()?, e.parse::<Millis>().ok()?);
                    starts.extend(Interval::new(s, e).split(t.grain).into_iter().map(|i| i.start));
                }
                let done: BTreeSet<Millis> = starts;
                outside = super::outside_bounds(t, &done);
                let missing = interval::missing(&interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&model.name, now)), &done, t.lookback);
                (interval::merge(&missing), missing.len())
            }
            None => (Vec::new(), 0),
        };
        actions.push(Action {
            name: model.name.clone(),
            kind: model.kind.tag(),
            change: Change::Unchanged,
            reclassified_from: None,
            fingerprint,
            previous: None,
            reused_from: None,
            physical,
            build: false,
            register: false,
            backfill,
            intervals,
            canonical_source,
            explain: None,
            history: None,
            drops_kept: None,
            new_columns: Vec::new(),
            metadata: serde_json::Value::Null,
            repair: None,
            rebuild: false,
            rebuild_reason: None,
            recompute: None,
            outside_bounds: outside,
            undone_outside: None,
            // A memo is recorded only when no time-range or keyed version shares its table with
            // another environment's (`apply::record_memo`).
            writer_holds: super::WriterHolds::Nothing,
            waits_for_writer: None,
            owner: model.owner.clone(),
            tags: model.tags.clone(),
        });
    }
    if lines.next().is_some() {
        return None;
    }
    let has_changes = actions.iter().any(Action::has_work);
    Some(Plan {
        env: env.to_string(),
        new_environment: None,
        did_you_mean: None,
        existing_environments: Vec::new(),
        now,
        has_changes,
        actions,
        canon_cache_misses: Vec::new(),
        from_memo: true,
        generation: None,
        also_writes: Vec::new(),
        refused: None,
    })
}
