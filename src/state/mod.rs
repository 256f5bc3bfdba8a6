//! The state store: snapshots, environment pointers, the interval ledger, the apply journal
//! and the canonicalisation cache, in one SQLite file (`efmesh.state.sqlite` by default).
//!
//! The store is the single source of truth for what has been built: a physical table with no
//! ledger rows counts as empty (reference `core-semantics.md` §6.3). Everything is keyed by the
//! snapshot id, the pair (model name, fingerprint), never by a fingerprint alone, so two models
//! whose bodies fingerprint alike never share ledger rows (DECISIONS.md, "Canonical SQL and
//! fingerprints").
//!
//! Rules the implementation keeps:
//! - Every write runs in one `BEGIN IMMEDIATE` transaction that rolls back on drop, so lock
//!   contention shows at `BEGIN` and a failure half-way leaves nothing half-written
//!   (`STYLE.md` rule 7).
//! - Every instant is stored as ISO-8601 UTC text with milliseconds
//!   ([`crate::core::interval::to_iso`], e.g. `2026-01-02T00:00:00.000Z`), so rows compare and
//!   sort lexicographically; the API speaks [`Millis`](crate::core::Millis).
//! - A store written with another [`STATE_VERSION`] is refused, except versions 1 and 2, which
//!   are upgraded in place in one transaction (1 → 2 adds the write counter and the plan memo;
//!   2 → 3 gives every pointer the metadata its snapshot held, and adds promotion intents).
//! - Snapshot rows never change once written. The metadata an environment serves (description,
//!   `start`/`end`, batch size, lookback, audits) belongs to its pointers, written only by the
//!   promotion that makes it live, so `apply dev` never changes what `prod` serves.
//! - A promotion is recorded as under way ([`StateStore::begin_promotion`], with the statements
//!   that restore the views as they were) before any view moves, and the record is removed in
//!   the transaction that writes the new pointers. A record found later is an interrupted
//!   promotion: its views are restored and the record dropped before anything reads the
//!   environment (`apply::recover_promotions`).
//!
//! # Example
//!
//! ```
//! use efmesh::core::Interval;
//! use efmesh::state::{IntervalStatus, SnapshotRecord, StateStore};
//! use std::collections::{BTreeMap, BTreeSet};
//!
//! let store = StateStore::open_in_memory()?;
//! let fp = "ab".repeat(32);
//! store.put_snapshot(&SnapshotRecord {
//!     name: "med.moves".into(),
//!     fingerprint: fp.clone(),
//!     fingerprint_version: 1,
//!     kind: "incremental_by_time_range".into(),
//!     physical: format!("\"_efmesh\".\"med__moves__{fp}\""),
//!     canonical: Some("SELECT 1".into()),
//!     rendered_sql: "SELECT 1".into(),
//!     metadata: serde_json::json!({}),
//!     created_at: "2026-01-01T00:00:00.000Z".into(),
//! })?;
//! let day = 86_400_000;
//! store.mark_intervals("med.moves", &fp, &[Interval::new(0, day)], IntervalStatus::Done, day)?;
//! assert!(store.done_intervals("med.moves", &fp)?.contains(&0));
//!
//! let pointers = BTreeMap::from([("med.moves".to_string(), fp.clone())]);
//! let required = BTreeSet::from(["med.moves".to_string()]);
//! let metadata = BTreeMap::from([("med.moves".to_string(), "{}".to_string())]);
//! let id = store.promote("dev", &pointers, &metadata, &required, &serde_json::json!({}), "ci", day)?;
//! assert_eq!(store.env_pointers("dev")?, pointers);
//! assert_eq!(store.journal("dev")?[0].id, id);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod sqlite;

pub use error::StateError;
pub use sqlite::StateStore;

/// Layout version of the store, kept in the single-row table `meta(version)`. A store holding
/// any other value is refused with [`StateError`] (see [`StateError::is_version_mismatch`]).
pub const STATE_VERSION: i64 = 3;

/// One version of one model, as recorded when apply builds it (or registers it, for models with
/// no storage). Keyed by (`name`, `fingerprint`); once written, the payload never changes (its
/// `metadata` is the metadata at creation: what an environment serves is in its pointers, see
/// [`StateStore::env_metadata`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRecord {
    /// Model name, `schema.table`.
    pub name: String,
    /// Fingerprint, 64 lowercase hex digits.
    pub fingerprint: String,
    /// The `FINGERPRINT_VERSION` that computed `fingerprint`.
    pub fingerprint_version: u32,
    /// Kind tag, e.g. `full`, `view`, `embedded`, `incremental_by_time_range`.
    pub kind: String,
    /// Qualified physical relation, e.g. `"_efmesh"."med__moves__<fp>"`, or `""` when the
    /// model has no storage (embedded, external).
    pub physical: String,
    /// Canonical AST text of the body; `None` for externals.
    pub canonical: Option<String>,
    /// Canonical render of the body (logical names, `$start`/`$end` placeholders).
    pub rendered_sql: String,
    /// Model metadata (schema, kind parameters, description, ...) kept for later diffs. Stored
    /// as JSON text; key order is preserved.
    pub metadata: serde_json::Value,
    /// When the record was written: ISO-8601 UTC with milliseconds
    /// ([`to_iso`](crate::core::interval::to_iso)).
    pub created_at: String,
}

/// Every snapshot's `(physical relation, kind tag)`, keyed by `(name, fingerprint)`
/// ([`StateStore::snapshot_index`]).
pub type SnapshotIndex = std::collections::HashMap<(String, String), (String, String)>;

/// Outcome recorded for one ledger interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntervalStatus {
    /// Computed and committed in the engine; counts as present.
    Done,
    /// Attempted and rolled back; counts as missing, so the next plan recomputes it.
    Failed,
}

impl IntervalStatus {
    /// The text stored in `intervals.status`: `done` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            IntervalStatus::Done => "done",
            IntervalStatus::Failed => "failed",
        }
    }
}

/// One row of the apply journal: an environment promotion.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// Journal id, increasing with every promotion of any environment (never reused).
    pub id: i64,
    /// Environment promoted.
    pub env: String,
    /// Summary of the applied plan, as given to [`StateStore::promote`].
    pub summary: serde_json::Value,
    /// When: ISO-8601 UTC with milliseconds.
    pub applied_at: String,
    /// Who applied it, as given to [`StateStore::promote`] (may be empty).
    pub applied_by: String,
}

/// A promotion recorded as under way ([`StateStore::begin_promotion`]) and neither completed
/// ([`StateStore::promote`]) nor abandoned ([`StateStore::abandon_promotion`]): the process
/// promoting it stopped (crash, `kill -9`, a failed state write) somewhere between recording it
/// and recording the new pointers, so the environment's views may serve the intended versions
/// while its pointers still name the previous ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPromotion {
    /// Environment being promoted.
    pub env: String,
    /// The pointer set it was promoting to (model name → fingerprint), for messages.
    pub pointers: std::collections::BTreeMap<String, String>,
    /// Engine statements that put every view the promotion touches back as it was before,
    /// idempotent (`CREATE OR REPLACE VIEW`, `DROP VIEW IF EXISTS`), run in one transaction.
    pub rollback: Vec<String>,
    /// When it started: ISO-8601 UTC with milliseconds.
    pub started_at: String,
}
