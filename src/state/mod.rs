//! The state store: snapshots, environment pointers, the interval ledger, the apply journal,
//! environment leases, the run journal (ticks), promotion intents, the plan memo and the
//! canonicalisation cache, behind one interface, the [`StateStore`] trait. Its first
//! implementation, [`SqliteStore`], keeps everything in one SQLite file (`efmesh.state.sqlite`
//! by default); plan, apply, the session and every command use only the trait.
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
//! - The layout is versioned ([`STATE_VERSION`]) by a list of migrations ([`MIGRATIONS`]). A
//!   store written by a newer efmesh is refused (upgrade efmesh); an older one is refused too,
//!   except by [`migrate`] (`efmesh migrate`), which backs it up beside itself and applies the
//!   missing migrations in one transaction.
//! - Writers that hold an environment lease ([`lease`]) fence their writes: every write of the
//!   store first checks, inside its own transaction, that the lease still has the holder's
//!   token, so a holder that lost its lease stops before its next write
//!   ([`StateError::LeaseLost`]).
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
//! use efmesh::state::{IntervalStatus, SnapshotRecord, SqliteStore, StateStore};
//! use std::collections::{BTreeMap, BTreeSet};
//!
//! let store = SqliteStore::open_in_memory()?;
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

pub mod dump;
mod error;
pub mod lease;
mod postgres;
mod sqlite;

pub use self::postgres::{PG_FIRST_VERSION, PG_MIGRATIONS, PG_SCHEMA, PostgresStore};
pub use error::StateError;
pub use sqlite::{MIGRATIONS, Migration, MigrationReport, SqliteStore, migrate, stored_version_of};

use crate::config::Config;

/// The Postgres URL and schema of `config`'s state store, or `None` for a SQLite store: the URL
/// is read from the environment variable `[state] url_env` names (never from the file).
///
/// # Errors
/// [`StateError::Open`] naming the variable and the configuration file when it is unset, empty
/// or not Unicode.
fn postgres_url(config: &Config) -> Result<Option<(String, String)>, StateError> {
    let Some(var) = &config.state.url_env else { return Ok(None) };
    let why = match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => return Ok(Some((url, config.state.schema.clone()))),
        Ok(_) | Err(std::env::VarError::NotPresent) => "is unset or empty",
        Err(std::env::VarError::NotUnicode(_)) => "is not Unicode",
    };
    Err(StateError::Open {
        store: location(config),
        source: format!("the environment variable `{var}` (named by `[state] url_env` in `{}`) {why}", config.path.display()).into(),
        transient: false,
    })
}

/// Test hook: `EFMESH_TEST_CLOCK_SKEW_MS=<ms>` moves this process's clock (as the lease code
/// reads it, [`process_clock`]) by that many milliseconds, standing in for a machine whose clock
/// is off.
pub const CLOCK_SKEW_ENV: &str = "EFMESH_TEST_CLOCK_SKEW_MS";

/// This process's clock, UTC milliseconds ([`CLOCK_SKEW_ENV`] added): the clock of a store that
/// lives on this machine ([`StateStore::clock`]).
pub fn process_clock() -> Millis {
    static SKEW: std::sync::OnceLock<Millis> = std::sync::OnceLock::new();
    crate::core::interval::now_millis() + *SKEW.get_or_init(|| std::env::var(CLOCK_SKEW_ENV).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

/// Where `config`'s state store lives, for messages, without opening it: the SQLite file, or
/// the Postgres database named by `[state] url_env` (`postgres://user@host:port/db schema s`,
/// never the password).
pub fn location(config: &Config) -> String {
    match &config.state.url_env {
        None => config.state_path().display().to_string(),
        Some(var) => match std::env::var(var).ok().filter(|u| !u.trim().is_empty()) {
            Some(url) => self::postgres::describe_url(&url, &config.state.schema)
                .unwrap_or_else(|| format!("the Postgres database in `${var}`, schema {}", config.state.schema)),
            None => format!("the Postgres database in `${var}` (unset), schema {}", config.state.schema),
        },
    }
}

/// Opens `config`'s state store, creating it when it does not exist: the SQLite file
/// ([`SqliteStore::open`]) or the Postgres schema ([`PostgresStore::open`]).
///
/// # Errors
/// As those; [`StateError::Open`] when `[state] url_env` names an unset variable.
pub fn open(config: &Config) -> Result<Box<dyn StateStore>, StateError> {
    Ok(match postgres_url(config)? {
        Some((url, schema)) => Box::new(PostgresStore::open(&url, &schema)?),
        None => {
            // Before (no store created in another directory) and after (the file is held).
            root_kept(config)?;
            let store = SqliteStore::open(&config.state_path())?;
            root_kept(config)?;
            Box::new(store)
        }
    })
}

/// [`Config::root_replaced`] as a [`StateError::Open`]: a SQLite store opened once the project
/// root named another directory is another project's.
fn root_kept(config: &Config) -> Result<(), StateError> {
    match config.root_replaced() {
        None => Ok(()),
        Some(message) => Err(StateError::Open { store: config.state_path().display().to_string(), source: message.into(), transient: false }),
    }
}

/// Opens `config`'s state store if it exists (`None`: no SQLite file, or no store in the
/// Postgres schema; nothing is created).
///
/// # Errors
/// As [`open`].
pub fn open_existing(config: &Config) -> Result<Option<Box<dyn StateStore>>, StateError> {
    Ok(match postgres_url(config)? {
        Some((url, schema)) => PostgresStore::open_existing(&url, &schema)?.map(|s| Box::new(s) as Box<dyn StateStore>),
        None => {
            let path = config.state_path();
            if path.exists() {
                root_kept(config)?;
                let store = SqliteStore::open(&path)?;
                root_kept(config)?;
                Some(Box::new(store))
            } else {
                None
            }
        }
    })
}

/// `efmesh migrate` for `config`'s store: [`migrate`] for a SQLite file (backed up beside
/// itself first), the Postgres migrations ([`PG_MIGRATIONS`], one transaction, no backup: there
/// is no file to copy) for a Postgres store.
///
/// # Errors
/// As [`migrate`].
pub fn migrate_store(config: &Config, now: Millis) -> Result<MigrationReport, StateError> {
    match postgres_url(config)? {
        Some((url, schema)) => self::postgres::migrate(&url, &schema, now),
        None => migrate(&config.state_path(), now),
    }
}

use crate::core::interval::{Interval, Millis};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Layout version of the store, kept in the single-row table `meta(version)`: the version the
/// last of [`MIGRATIONS`] produces. A store holding any other value is refused with
/// [`StateError`] (see [`StateError::is_version_mismatch`]); an older one is upgraded by
/// [`migrate`].
pub const STATE_VERSION: i64 = 10;

/// An engine epoch issued by [`StateStore::issue_epoch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IssuedEpoch {
    /// The epoch issued (`meta.epoch_issued` now).
    pub epoch: i64,
    /// `meta.epoch_issued` just before: equal to the epoch a command issued at its opening raise
    /// unless another writer was issued one since.
    pub before: i64,
}

/// Why [`StateStore::import_state`] refuses when the issued engine epoch moved from `given`
/// (read before `efmesh state import` compared the export with the engine's database) to
/// `found` (read in the import's transaction): a writer started or finished in between, so
/// the database may hold writes that comparison did not see; the next attempt compares again.
pub fn import_race_refusal(given: i64, found: i64) -> String {
    format!(
        "an engine epoch was issued while importing (the store's issued epoch moved from {given} to {found} after the import compared the \
         export with the engine database): an `apply` or `run` wrote tables in between (or another import ran), which that comparison \
         did not see; run the import again (it compares again)"
    )
}

/// The state store's interface: everything plan, apply, the session and the commands read and
/// write. Implementations keep each write atomic (all or nothing), keep every instant as
/// ISO-8601 UTC text with milliseconds, and fence writes with the lease set by
/// [`StateStore::set_fence`].
///
/// Errors are [`StateError`]s naming the store, the operation and the backend's error as the
/// source, whatever the backend.
pub trait StateStore: Send + std::fmt::Debug {
    /// Where the store lives, for messages (a file path, `:memory:`, a Postgres URL without its
    /// password and the schema).
    fn location(&self) -> String;

    /// True for a store that vanishes with this handle (an in-memory stand-in).
    fn is_in_memory(&self) -> bool;

    /// A second, independent handle on the same store (the lease heartbeat thread uses one).
    ///
    /// # Errors
    /// The store cannot be opened again (an in-memory store never can).
    fn reopen(&self) -> Result<Box<dyn StateStore>, StateError>;

    /// How many write transactions the store has committed: equal values mean nothing was
    /// written in between, except promotions (which change only their own environment's
    /// pointers and delete that environment's plan memo), leases and ticks.
    ///
    /// # Errors
    /// The read fails.
    fn generation(&self) -> Result<i64, StateError>;

    /// [`StateStore::generation`], the count of janitor claims (both only grow; a claim
    /// deletes snapshot and ledger rows without bumping the generation) and the id of the last
    /// promotion of ANY environment (0 before the first; ids only grow), read together: equal
    /// triples mean nothing a plan of `env` reads was written in between (promotions do not bump
    /// the generation, but every one gets a new id; a plan of `env` reads the other
    /// environments' pointers too: the rebuild marks and the tables new versions may share).
    /// The plan records the generation alone (what `apply` compares with
    /// [`StateStore::generation`]). `None` when the store cannot say, and then nothing read
    /// earlier may be reused.
    ///
    /// # Errors
    /// The read fails.
    fn plan_state(&self, env: &str) -> Result<Option<(i64, i64, i64)>, StateError> {
        let _ = env;
        Ok(None)
    }

    /// The plan memo of `env`: `(key, body)` as [`StateStore::plan_memo_put`] stored it.
    ///
    /// # Errors
    /// The read fails.
    fn plan_memo_get(&self, env: &str) -> Result<Option<(String, String)>, StateError>;

    /// Stores the plan memo of `env` (does not bump the generation).
    ///
    /// # Errors
    /// The write fails (nothing is written).
    fn plan_memo_put(&self, env: &str, key: &str, body: &str) -> Result<(), StateError>;

    /// The pointer set of `env`: model name → fingerprint (empty for an unknown environment).
    ///
    /// # Errors
    /// The read fails.
    fn env_pointers(&self, env: &str) -> Result<BTreeMap<String, String>, StateError>;

    /// The metadata `env` serves per pointer: model name → JSON text.
    ///
    /// # Errors
    /// The read fails.
    fn env_metadata(&self, env: &str) -> Result<BTreeMap<String, String>, StateError>;

    /// Every environment with at least one pointer, sorted.
    ///
    /// # Errors
    /// The read fails.
    fn environments(&self) -> Result<Vec<String>, StateError>;

    /// The snapshot `(name, fp)`, or `None`.
    ///
    /// # Errors
    /// The read fails, or its metadata is not JSON.
    fn snapshot(&self, name: &str, fp: &str) -> Result<Option<SnapshotRecord>, StateError>;

    /// Every snapshot id `(name, fingerprint)`.
    ///
    /// # Errors
    /// The read fails.
    fn snapshot_keys(&self) -> Result<HashSet<(String, String)>, StateError>;

    /// Every snapshot's `(physical, kind)` keyed by `(name, fingerprint)`.
    ///
    /// # Errors
    /// The read fails.
    fn snapshot_index(&self) -> Result<SnapshotIndex, StateError>;

    /// True when an environment once served `(name, fp)` and stopped (a promotion moved its
    /// pointer away, or the environment was dropped: the janitor's `released` record). A version
    /// no environment serves and none ever released was never served: recorded by an apply that
    /// promoted nothing (refused, or stopped by a kill), as the plan tells a forward-only
    /// version's leftover from a return to a version served before. A store upgraded from a
    /// layout without the record counts every version unserved then as released.
    ///
    /// # Errors
    /// The read fails.
    fn was_released(&self, name: &str, fp: &str) -> Result<bool, StateError>;

    /// Records a snapshot; an existing `(name, fingerprint)` keeps its first payload.
    ///
    /// # Errors
    /// The write fails (nothing is written), or the fence lease was lost.
    fn put_snapshot(&self, rec: &SnapshotRecord) -> Result<(), StateError>;

    /// Starts of the done intervals of `(name, fp)`.
    ///
    /// # Errors
    /// The read fails, or a stored start is not a timestamp.
    fn done_intervals(&self, name: &str, fp: &str) -> Result<BTreeSet<Millis>, StateError>;

    /// The starts of the intervals of version `(name, fp)` recorded failed (and not done since).
    ///
    /// # Errors
    /// The read fails, or a stored start is not a timestamp.
    fn failed_intervals(&self, name: &str, fp: &str) -> Result<BTreeSet<Millis>, StateError>;

    /// The done intervals of version `(name, fp)` with when each was last written: start →
    /// (end, written at), UTC epoch ms.
    ///
    /// # Errors
    /// The read fails, or a stored instant is not one.
    fn done_ledger(&self, name: &str, fp: &str) -> Result<BTreeMap<Millis, (Millis, Millis)>, StateError>;

    /// The done interval starts of every snapshot, keyed by `(name, fingerprint)`.
    ///
    /// # Errors
    /// The read fails, or a stored start is not a timestamp.
    fn all_done_intervals(&self) -> Result<HashMap<(String, String), BTreeSet<Millis>>, StateError>;

    /// Counts and newest done end of the ledger of `(name, fp)` (for `status`).
    ///
    /// # Errors
    /// The read fails, or a stored end is not a timestamp.
    fn ledger_stats(&self, name: &str, fp: &str) -> Result<LedgerStats, StateError>;

    /// Records `intervals` of `(name, fp)` with `status` in one transaction.
    ///
    /// # Errors
    /// The write fails (none is recorded), or the fence lease was lost.
    fn mark_intervals(&self, name: &str, fp: &str, intervals: &[Interval], status: IntervalStatus, now: Millis) -> Result<(), StateError>;

    /// Records the batches' `intervals` of `(name, fp)` done after the engine committed them,
    /// compare-and-set: in ONE transaction, checks that the version's data generation
    /// ([`DataVersion::generation`]) is still `seen` — the one its build read before any of its
    /// batches read their inputs, or the one its previous record returned — and only then
    /// writes them as [`StateStore::mark_intervals`] does with [`IntervalStatus::Done`] (the
    /// generation moves by one, for its sharers too). When it moved, nothing is written
    /// ([`DoneMark::Moved`]): a restatement committed while the batches ran
    /// ([`StateStore::restate_intervals`], of another environment serving the version), so they
    /// may hold rows read before it; they stay not done, and the next apply or run computes them
    /// (SPEC §4 invariant 33). One process writes a version's table at a time (the engine's
    /// writer lock), so between two records of one build nothing else moves the generation. An
    /// empty `intervals` writes nothing ([`DoneMark::Recorded`] at `seen`).
    ///
    /// # Errors
    /// The read or write fails (none is recorded), or the fence lease was lost.
    fn mark_done_unless_moved(&self, name: &str, fp: &str, intervals: &[Interval], seen: i64, now: Millis) -> Result<DoneMark, StateError>;

    /// Records every done interval of `(name, from)` as done for `(name, to)` too, each with the
    /// time it was written (`from`'s row's, not now: a version inheriting a table by indirect
    /// reuse or a forward-only change did not write those intervals, and
    /// `plan::recompute::taken_over` tells what another query wrote by these times), in one
    /// transaction that moves `to`'s data generation (at `now`) when it copied any, and `to`'s
    /// alone: nothing is written into the table, so every other version on it (`from`, the
    /// version another environment serves there) keeps its generation, and the `full` models
    /// built from it stay current.
    ///
    /// # Errors
    /// The write fails (none is recorded), or the fence lease was lost.
    fn inherit_done(&self, name: &str, from: &str, to: &str, now: Millis) -> Result<(), StateError>;

    /// Records that `(name, fp)`, a model `run` refreshes whole on its `cron` (`full`, unique-key,
    /// partition, SCD type 2; a unique-key, partition or SCD type 2 model without one at each
    /// refresh), was refreshed for the cron tick `tick` ([`crate::core::cron::last_tick`]; else
    /// the command's `now`): one done ledger row per version, `[epoch, tick)`, whose end only
    /// moves forward, so the newest done end ([`LedgerStats::done_up_to`]) is the last tick it was
    /// refreshed for and the ledger does not grow with the ticks. When the rows it read were
    /// complete only up to `complete` (a time-range ancestor lacked an interval from there on),
    /// the row starts there instead, `[complete, tick)` ([`refreshed_until`] reads it back); the
    /// next refresh replaces it. Unlike [`StateStore::mark_intervals`] it does not move the
    /// version's data generation (the write that refreshed it did, when rows changed).
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn record_refresh(&self, name: &str, fp: &str, tick: Millis, complete: Option<Millis>, now: Millis) -> Result<(), StateError>;

    /// Deletes the done intervals of `(name, fp)` whose start lies in `[from, to)` (restatement),
    /// in one transaction, so the next apply or run recomputes them. Returns how many were
    /// cleared.
    ///
    /// # Errors
    /// The write fails (nothing is cleared), or the fence lease was lost.
    fn clear_intervals(&self, name: &str, fp: &str, from: Millis, to: Millis) -> Result<usize, StateError>;

    /// Replaces the pointer set of `env`, appends a journal row, drops its promotion intent
    /// and its intents ([`StateStore::record_intents`]), and records every version it stops
    /// serving as released now (the janitor's ttl counts from there), in one transaction; every
    /// name in `require_snapshot` must have a stored snapshot. A promotion that creates `env`
    /// (it has no pointers: never applied, or dropped by the janitor) also deletes its run ticks:
    /// the runs refused while it did not exist are not the new environment's. Returns the
    /// journal id.
    ///
    /// # Errors
    /// [`StateError::MissingSnapshot`], [`StateError::MissingPointer`], a failed write or a lost
    /// fence lease; nothing is changed then.
    #[allow(clippy::too_many_arguments)]
    fn promote(
        &self,
        env: &str,
        pointers: &BTreeMap<String, String>,
        metadata: &BTreeMap<String, String>,
        require_snapshot: &BTreeSet<String>,
        journal_summary: &serde_json::Value,
        applied_by: &str,
        now: Millis,
    ) -> Result<i64, StateError>;

    /// Records a promotion of `env` as under way, before any view moves.
    ///
    /// # Errors
    /// The write fails (also when one is already recorded), or the fence lease was lost.
    fn begin_promotion(&self, env: &str, pointers: &BTreeMap<String, String>, rollback: &[String], now: Millis) -> Result<(), StateError>;

    /// Every promotion recorded as under way and neither completed nor abandoned.
    ///
    /// # Errors
    /// The read fails, or a row is not JSON.
    fn pending_promotions(&self) -> Result<Vec<PendingPromotion>, StateError>;

    /// Forgets the promotion of `env` under way (idempotent).
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn abandon_promotion(&self, env: &str) -> Result<(), StateError>;

    /// The apply journal of `env`, oldest first.
    ///
    /// # Errors
    /// The read fails, or a summary is not JSON.
    fn journal(&self, env: &str) -> Result<Vec<JournalEntry>, StateError>;

    /// Marks `env` expired now (`efmesh invalidate`): appends a journal row whose summary is
    /// `{"event": "invalidated"}` ([`crate::lifecycle`]), in ONE transaction that first checks
    /// that `env` has pointers. Returns the row's id, or `None` (nothing written) when `env` has
    /// none. Does not bump the generation (no plan reads it; the next promotion of `env` renews
    /// it).
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost (nothing is written).
    fn invalidate_environment(&self, env: &str, by: &str, now: Millis) -> Result<Option<i64>, StateError>;

    /// Forgets the expired environment `env` (the janitor, holding its writer lease, after
    /// dropping its views) in ONE transaction, and only when its newest journal row is still
    /// `seen` (no promotion or invalidation since it was judged expired) and no promotion of it
    /// is under way: deletes its pointers, intents, plan memo and run ticks (an environment
    /// created again under the name starts with none: `status` never judges it by the runs of
    /// the one dropped), records every version it served as released now (the janitor's version
    /// ttl counts from there), appends the journal row `summary` (`{"event": "dropped", …}`) and
    /// bumps the generation (a plan of `env` made before is stale). Returns false, writing
    /// nothing, when the check fails.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost (nothing is written).
    fn drop_environment(&self, env: &str, seen: i64, summary: &serde_json::Value, now: Millis) -> Result<bool, StateError>;

    /// Everything a plan, an apply, a run, `status` and the janitor read as data, in ONE
    /// consistent read ([`dump::TABLES`], and `meta`'s store id, generation and claim count):
    /// `efmesh state export`.
    ///
    /// # Errors
    /// The read fails, or a value has a type the layout does not give it.
    fn export_state(&self) -> Result<dump::StateDump, StateError>;

    /// Writes `dump` into this store in ONE transaction (all or nothing): refused, writing
    /// nothing, when any table of [`dump::TABLES`] holds a row and `replace` is false, when
    /// a lease is held that is unexpired at `now` and not stale by `is_stale` (a live apply, run
    /// or janitor; [`lease::is_stale`]: its holder is known gone, killed on this host), the
    /// refusal naming its holder and expiry ([`lease::import_refusal`]), or when the issued
    /// engine epoch (`meta.epoch_issued`) is no longer `issued` ([`import_race_refusal`]).
    /// `issued` is the counter the caller read ([`StateStore::epoch_issued`], 0 for a store
    /// that did not exist yet) BEFORE it compared the document with the engine's database
    /// (`efmesh state import`'s check that the database holds no later writes): every `apply`
    /// or `run` writing tables raises the counter before its first write and again at its end,
    /// under its lock, so a counter unchanged here, with no live lease, means no such writer
    /// started or finished since that comparison, which therefore still holds (SPEC §4,
    /// invariant 63). A stale lease is left for the next command that wants it to reclaim.
    /// With `replace`, those tables and the caches and intents ([`dump::CLEARED_ON_IMPORT`])
    /// are emptied first. Takes the document's store id, and a generation past both the
    /// store's and the document's (so nothing keyed by the old content is reused). Journal and
    /// tick ids are kept, and the identity counters set past them.
    ///
    /// # Errors
    /// [`StateError::Import`] (not empty, a live lease unexpired at `now`, the store's clock, an
    /// epoch issued since `issued`), a failed write; nothing is written.
    fn import_state(&self, dump: &dump::StateDump, replace: bool, issued: i64, now: Millis, is_stale: &dyn Fn(&LeaseRecord) -> bool) -> Result<(), StateError>;

    /// Cached canonical forms of those `keys` that are cached.
    ///
    /// # Errors
    /// The read fails.
    fn canon_cache_get(&self, keys: &[String]) -> Result<HashMap<String, String>, StateError>;

    /// Stores canonical forms in one transaction.
    ///
    /// # Errors
    /// The write fails (none is stored), or the fence lease was lost.
    fn canon_cache_put(&self, entries: &[(String, String)]) -> Result<(), StateError>;

    /// The store's clock, UTC milliseconds: what every lease's expiry is measured by, so that
    /// the processes sharing a store agree on it whatever their own clocks say. A SQLite store
    /// lives on one machine: its clock ([`process_clock`]); a Postgres store is shared between
    /// machines: the server's.
    ///
    /// # Errors
    /// The store cannot be asked.
    fn clock(&self) -> Result<Millis, StateError> {
        Ok(process_clock())
    }

    /// Tries to take lease `name` for `holder` with `token`, in one transaction: free → taken;
    /// held by a lease that expired at or before `now`, or that `is_stale` says is dead →
    /// reclaimed (the previous record returned); otherwise [`LeaseClaim::Held`] naming the holder.
    ///
    /// # Errors
    /// The read or write fails.
    fn try_acquire_lease(
        &self,
        name: &str,
        token: &str,
        holder: &LeaseHolder,
        expires: Millis,
        now: Millis,
        is_stale: &dyn Fn(&LeaseRecord) -> bool,
    ) -> Result<LeaseClaim, StateError>;

    /// Extends lease `name` to `expires` if it still has `token`; false when it was lost.
    ///
    /// # Errors
    /// The write fails.
    fn renew_lease(&self, name: &str, token: &str, expires: Millis, now: Millis) -> Result<bool, StateError>;

    /// Releases lease `name` if it still has `token` (else does nothing).
    ///
    /// # Errors
    /// The write fails.
    fn release_lease(&self, name: &str, token: &str) -> Result<(), StateError>;

    /// The record of lease `name`, if anyone holds it (expired or not).
    ///
    /// # Errors
    /// The read fails.
    fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StateError>;

    /// Every write of this handle from now on first checks, in its own transaction, that lease
    /// `fence.0` still has token `fence.1` (`None`: no check).
    fn set_fence(&self, fence: Option<(String, String)>);

    /// Checks the fence now (before an engine write).
    ///
    /// # Errors
    /// [`StateError::LeaseLost`] when the lease was taken over; a failed read.
    fn check_fence(&self) -> Result<(), StateError>;

    /// Appends one tick to the run journal (not fenced: a holder that lost its lease still
    /// records why it stopped). Returns its id.
    ///
    /// # Errors
    /// The write fails.
    fn record_tick(&self, tick: &Tick) -> Result<i64, StateError>;

    /// The newest `limit` ticks of `env`, newest first.
    ///
    /// # Errors
    /// The read fails, or a detail is not JSON.
    fn ticks(&self, env: &str, limit: usize) -> Result<Vec<Tick>, StateError>;

    /// The layout version of this store.
    ///
    /// # Errors
    /// The read fails.
    fn schema_version(&self) -> Result<i64, StateError>;

    /// Restatement: in one transaction, checks that `env` still points at every target's
    /// version and deletes the done intervals of each target whose start lies in its range, so
    /// the next apply or run recomputes them. Returns what was done per target, in order: how
    /// many were cleared, and whether the generation moved as a fence ([`Restated`]).
    /// Each target's data generation moves when intervals were cleared (its sharers' too), and
    /// also when none were while an apply or run of another environment relies on the version
    /// (its intents, [`StateStore::record_intents`]): a batch of it under way may have read the
    /// rows as they were before, and its done record is then refused
    /// ([`StateStore::mark_done_unless_moved`]), so the range is recomputed whatever was in flight.
    ///
    /// # Errors
    /// [`StateError::PointerMoved`] when `env` serves another version of a target (nothing is
    /// cleared); a failed write or a lost fence lease (nothing is cleared).
    fn restate(&self, env: &str, targets: &[RestateTarget]) -> Result<Vec<Restated>, StateError>;

    /// [`StateStore::restate`], saying only how many done intervals were cleared per target.
    ///
    /// # Errors
    /// As [`StateStore::restate`].
    fn restate_intervals(&self, env: &str, targets: &[RestateTarget]) -> Result<Vec<usize>, StateError> {
        Ok(self.restate(env, targets)?.into_iter().map(|r| r.cleared).collect())
    }

    /// Every `full`/`view` version an apply or run decided to rebuild (downstream of new
    /// intervals of a parent) and has not rebuilt yet, and every unique-key, partition and SCD
    /// type 2 version it decided to refresh (a parent having new data) and has not refreshed
    /// yet, oldest first.
    ///
    /// # Errors
    /// The read fails.
    fn pending_rebuilds(&self) -> Result<Vec<PendingRebuild>, StateError>;

    /// Records `rebuilds` (`(name, fingerprint, reason)`) as to be rebuilt, in one transaction,
    /// before the work that makes them stale is written; a version already recorded keeps its
    /// first record.
    ///
    /// # Errors
    /// The write fails (nothing is recorded), or the fence lease was lost.
    fn record_pending_rebuilds(&self, rebuilds: &[(String, String, String)], now: Millis) -> Result<(), StateError>;

    /// Forgets the pending rebuild (or refresh) of `(name, fp)` once it is done (idempotent).
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn clear_pending_rebuild(&self, name: &str, fp: &str) -> Result<(), StateError>;

    /// Records, in one transaction, every version an apply or run of `env` is about to read or
    /// write (its intents), replacing that environment's earlier rows, so the janitor never
    /// claims them. The same transaction refuses, writing nothing, when the storage of an
    /// entry is claimed by the janitor (`condemned`) or an entry that must exist
    /// ([`Intent::must_exist`]) has no snapshot row any more.
    ///
    /// # Errors
    /// [`StateError::Reclaimed`] naming the model and version (nothing written); a failed write
    /// or a lost fence lease.
    fn record_intents(&self, env: &str, intents: &[Intent], now: Millis) -> Result<(), StateError>;

    /// Records, among the intents of `env`, that its apply is about to refresh in place the
    /// table `copy.physical` of `(copy.name, copy.fingerprint)` below a version whose writes it
    /// takes back if it fails, about to copy it: the mark
    /// goes with the environment's intents — in the promotion's transaction, or when the apply
    /// ends without promoting, once the table is put back —, so one left is the mark of an
    /// apply stopped (killed) before either ([`StateStore::kept_copies`]). Its `fingerprint`
    /// column holds `kept:` then the fingerprint: no version's, so the janitor's reading of the
    /// intents protects the table (by its storage) and no snapshot.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn record_kept_copy(&self, env: &str, copy: &KeptCopy, now: Millis) -> Result<(), StateError>;

    /// The marks [`StateStore::record_kept_copy`] left among the intents of `env`.
    ///
    /// # Errors
    /// The read fails.
    fn kept_copies(&self, env: &str) -> Result<Vec<KeptCopy>, StateError>;

    /// Forgets the intents of `env` (idempotent): the apply or run ended without promoting.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn clear_intents(&self, env: &str) -> Result<(), StateError>;

    /// Everything the janitor decides from, read in one consistent snapshot of the store.
    ///
    /// # Errors
    /// The read fails.
    fn janitor_inventory(&self) -> Result<JanitorInventory, StateError>;

    /// The janitor's claim, in ONE write transaction: reads the inventory again under the write
    /// lock, lets `decide` pick the victims from it, then for each victim deletes its versions'
    /// snapshot, ledger, released, pending-rebuild and data-generation rows and records its storage (when it has
    /// some) as `condemned`; drops every plan memo when anything was claimed. Returns the
    /// claims made. Does not bump the generation: a plan relying on a claimed version is
    /// refused by [`StateStore::record_intents`] instead.
    ///
    /// # Errors
    /// A failed read or write (nothing is claimed), or the fence lease was lost.
    fn janitor_claim(&self, decide: &mut dyn FnMut(&JanitorInventory) -> Vec<Claim>, now: Millis) -> Result<Vec<Claim>, StateError>;

    /// Forgets the claim on `physical` (and, for an orphan, its sighting) once its storage is gone.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn release_condemned(&self, physical: &str) -> Result<(), StateError>;

    /// This store's identity (`meta.store_id`, 32 hex digits): the janitor and `apply` compare
    /// it with the owner markers kept in the storage ([`crate::ownership`]).
    ///
    /// # Errors
    /// The read fails, or the store has no identity (a damaged `meta` row).
    fn store_id(&self) -> Result<String, StateError>;

    /// The engine epoch this store last recorded (`meta.engine_epoch`, see
    /// [`crate::engine::epoch`]): 0 until an `apply` or `run` wrote tables into the engine's own
    /// database.
    ///
    /// # Errors
    /// The read fails.
    fn engine_epoch(&self) -> Result<i64, StateError>;

    /// The epoch of the last stamp of the DuckLake catalog this store recorded
    /// (`meta.ducklake_epoch`, see [`crate::apply::ducklake`]): raised only by the commands that
    /// stamp the catalog (those of a project with DuckLake models), so an apply of a project
    /// without them (another branch, another checkout sharing the store) never makes a current
    /// catalog look behind. 0 until a catalog was stamped.
    ///
    /// # Errors
    /// The read fails.
    fn ducklake_epoch(&self) -> Result<i64, StateError>;

    /// The store's issued engine epoch counter (`meta.epoch_issued`, see
    /// [`StateStore::issue_epoch`]): it only grows, and every `apply` or `run` writing tables
    /// raises it before its first write. `efmesh state import` reads it before comparing the
    /// export with the engine's database and gives it to [`StateStore::import_state`], which
    /// refuses when it moved since.
    ///
    /// # Errors
    /// The read fails.
    fn epoch_issued(&self) -> Result<i64, StateError>;

    /// Issues a new engine epoch, atomically (ONE write transaction holding the store's write
    /// lock): `meta.epoch_issued` becomes one more than the largest of itself, the store's epoch
    /// and `found` (the stamp the database to be stamped holds), so no two writers, of one
    /// database or of two sharing this store, ever get the same number. Returns the epoch issued
    /// and the counter before it ([`IssuedEpoch`]). Not a data write.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn issue_epoch(&self, found: i64) -> Result<IssuedEpoch, StateError>;

    /// Records that the engine's database holds the epoch stamp `epoch` (written there first):
    /// the store's epoch (and the issued counter) becomes `epoch` unless already higher; with
    /// `ducklake` (the epoch the DuckLake catalog was stamped with, also first), the DuckLake
    /// epoch likewise. A command recording `epoch` higher than its own stamp leaves its database
    /// behind on purpose (it lacks another writer's writes: [`crate::engine::epoch`]). Not a
    /// data write: the store's write counter does not move.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn record_engine_epoch(&self, epoch: i64, ducklake: Option<i64>) -> Result<(), StateError>;

    /// Records, in ONE transaction, the orphans a janitor sees now: each of `present` not seen
    /// before gets `first_seen = now`; rows of orphans not in `present` are deleted. Returns
    /// the first-seen instant (ISO-8601 UTC) of every one of `present`.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost (nothing is recorded).
    fn record_orphans_seen(&self, present: &[String], now: Millis) -> Result<BTreeMap<String, String>, StateError>;

    /// When each orphan recorded by [`StateStore::record_orphans_seen`] was first seen (read only,
    /// for a dry run).
    ///
    /// # Errors
    /// The read fails.
    fn orphans_seen(&self) -> Result<BTreeMap<String, String>, StateError>;

    /// The data generation and recorded build of each of `keys` that has a row; a version
    /// absent from the answer has generation 0 and no recorded build.
    ///
    /// # Errors
    /// The read fails.
    fn data_versions(&self, keys: &[(String, String)]) -> Result<HashMap<(String, String), DataVersion>, StateError>;

    /// The audits recorded as passed on the data of `(name, fp)` ([`StateStore::record_audit_pass`]),
    /// if any.
    ///
    /// # Errors
    /// The read fails.
    fn audit_pass(&self, name: &str, fp: &str) -> Result<Option<AuditPass>, StateError>;

    /// Records that the audits `pass.digest` names found no blocking violation on the data of
    /// `(name, fp)` at data generation `pass.generation` (replacing an earlier record). Not a
    /// data write: the store's write counter does not move.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn record_audit_pass(&self, name: &str, fp: &str, pass: &AuditPass, now: Millis) -> Result<(), StateError>;

    /// Records a build of a `full`/`view`/seed version in ONE transaction: its snapshot (an
    /// existing one keeps its first payload), its data generation bumped, `built_from` (the
    /// parents' data it was built from, read before the build started; `None` when it has no
    /// parents to track), its pending rebuild forgotten, and the `built_from` of each of
    /// `sharers` (`(name, fingerprint, built_from)`: other versions whose snapshot names the same
    /// table, which the build rewrote for them too).
    ///
    /// # Errors
    /// The write fails (nothing is written), or the fence lease was lost.
    fn record_build(&self, rec: &SnapshotRecord, built_from: Option<&str>, sharers: &[(String, String, String)], now: Millis) -> Result<(), StateError>;

    /// Records a `full` version that inherits another version's table (nothing is built) in ONE
    /// transaction: its snapshot (an existing one keeps its first payload) and its `built_from`
    /// (what the inherited table was built from, in terms of this version's sources, or a record
    /// that matches nothing: [`crate::plan::generations::reuse_record`]). Its data generation
    /// does not move (no data changed).
    ///
    /// # Errors
    /// The write fails (nothing is written), or the fence lease was lost.
    fn record_reuse(&self, rec: &SnapshotRecord, built_from: &str, now: Millis) -> Result<(), StateError>;

    /// Before an engine write the ledger does not record (a unique-key upsert, an SCD type 2
    /// reconciliation) of `(name, fp)`: bumps its data generation and that of every version
    /// sharing its table (a mark of a write in progress: a process killed between the engine's
    /// commit and [`StateStore::end_data_write`] leaves the generation moved), and returns the
    /// generations it set, for [`StateStore::end_data_write`].
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn begin_data_write(&self, name: &str, fp: &str, now: Millis) -> Result<DataWrite, StateError>;

    /// After the engine write [`StateStore::begin_data_write`] announced: when rows `changed`,
    /// bumps the generations again; otherwise takes back the mark (each generation still at the
    /// value the mark set goes back by one; one that moved since is left as it is), so a write
    /// that changed nothing leaves the `full` models over it current.
    ///
    /// # Errors
    /// The write fails, or the fence lease was lost.
    fn end_data_write(&self, write: &DataWrite, changed: bool, now: Millis) -> Result<(), StateError>;
}

/// The instant up to which the rows of `(name, fp)`'s last refresh are complete
/// ([`StateStore::record_refresh`]): the start of its refresh row when it is not the epoch (an
/// ancestor lacked intervals from there on), else the tick it was refreshed for; `None` when no
/// refresh is recorded.
///
/// # Errors
/// The read fails.
pub fn refreshed_until(state: &dyn StateStore, name: &str, fp: &str) -> Result<Option<Millis>, StateError> {
    let ledger = state.done_ledger(name, fp)?;
    Ok(ledger.iter().max_by_key(|(_, (end, _))| *end).map(|(start, (end, _))| if *start > 0 { (*start).min(*end) } else { *end }))
}

/// The marks of a write in progress ([`StateStore::begin_data_write`]): `(name, fingerprint,
/// generation set)` of the written version and of every version sharing its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataWrite {
    /// The written version: `(name, fingerprint)`.
    pub version: (String, String),
    /// Each version whose generation the mark moved, with the generation it set.
    pub marked: Vec<(String, String, i64)>,
}

/// What [`StateStore::mark_done_unless_moved`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneMark {
    /// The intervals are recorded done.
    Recorded {
        /// The version's data generation after the record: what the build's next record
        /// expects.
        generation: i64,
    },
    /// Nothing was written: the version's data generation moved since the build saw it (a
    /// restatement committed while its batches ran). The intervals stay not done.
    Moved {
        /// The data generation found.
        found: i64,
    },
}

/// One version's data generation ([`StateStore::data_versions`]): bumped by every transaction
/// that changes the version's data (intervals done, done intervals cleared or reset, a build,
/// an upsert or reconciliation), and by a restatement that clears none of its intervals while
/// another environment's apply or run relies on it ([`StateStore::restate_intervals`]: batches
/// under way then are not recorded done).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataVersion {
    /// How many times its data changed.
    pub generation: i64,
    /// For a `full` version: its parents' data as read before its last build
    /// ([`crate::plan::built_from`]); `None` before layout 6 or for a version never built since.
    pub built_from: Option<String>,
}

/// Audits that passed on a version's data ([`StateStore::audit_pass`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPass {
    /// What ran: the audits and the scope they saw ([`crate::apply::audit::pass_digest`]),
    /// followed by ` warned` when only `warn` audits found rows (they checked the data but are
    /// not reused: `apply::WholePass`).
    pub digest: String,
    /// The version's data generation they saw ([`DataVersion::generation`]).
    pub generation: i64,
}

/// A table an apply refreshes in place below a version whose writes it takes back if it fails
/// ([`StateStore::record_kept_copy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCopy {
    /// Model name.
    pub name: String,
    /// The fingerprint of the version refreshed.
    pub fingerprint: String,
    /// Its table (qualified, quoted).
    pub physical: String,
}

impl KeptCopy {
    /// The mark's `fingerprint` column in the intents: `kept:` then the fingerprint.
    #[must_use]
    pub fn mark(&self) -> String {
        format!("{KEPT_COPIED}{}", self.fingerprint)
    }

    /// The copy a mark's columns record, or `None` for an intent that is no mark.
    #[must_use]
    pub fn from_mark(name: String, mark: &str, physical: String) -> Option<KeptCopy> {
        Some(KeptCopy { name, fingerprint: mark.strip_prefix(KEPT_COPIED)?.to_string(), physical })
    }
}

/// The start of a [`KeptCopy::mark`].
const KEPT_COPIED: &str = "kept:";

/// One version an apply or run relies on ([`StateStore::record_intents`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// Model name.
    pub name: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Its physical relation (`""` for versions without storage).
    pub physical: String,
    /// True when the apply does not create this version's snapshot itself (a view swap to an
    /// existing version, storage it inherits or copies): its snapshot row must still exist.
    pub must_exist: bool,
}

/// One snapshot as the janitor sees it ([`JanitorInventory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRow {
    /// Model name.
    pub name: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Kind tag.
    pub kind: String,
    /// Physical relation (`""`: no storage).
    pub physical: String,
    /// When the snapshot was written: ISO-8601 UTC with milliseconds.
    pub created_at: String,
    /// When an environment last stopped serving it, if one ever did.
    pub released_at: Option<String>,
}

/// Storage the janitor claimed and has not dropped yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Condemned {
    /// The physical relation (its storage: the relation, and a lake version directory).
    pub physical: String,
    /// Model name (empty for an orphan whose name is only the relation's).
    pub name: String,
    /// Fingerprint (for an orphan: the one its name ends with).
    pub fingerprint: String,
    /// Kind tag, or `orphan`.
    pub kind: String,
    /// What the janitor recorded about it (versions sharing it, age, orphan flag), as JSON.
    pub detail: serde_json::Value,
    /// When it was claimed: ISO-8601 UTC with milliseconds.
    pub claimed_at: String,
}

/// What the janitor decides from ([`StateStore::janitor_inventory`]).
#[derive(Debug, Clone, Default)]
pub struct JanitorInventory {
    /// Every snapshot.
    pub versions: Vec<VersionRow>,
    /// `(name, fingerprint)` of every environment pointer.
    pub served: HashSet<(String, String)>,
    /// `(name, fingerprint)` of every pointer of a promotion under way.
    pub pending: HashSet<(String, String)>,
    /// `(name, fingerprint)` of every intent.
    pub intents: HashSet<(String, String)>,
    /// Physical relations named by an intent.
    pub intent_physicals: HashSet<String>,
    /// Storage claimed and not dropped yet.
    pub condemned: Vec<Condemned>,
}

/// One claim of [`StateStore::janitor_claim`]: versions whose rows go, and the storage they
/// leave to drop.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// `(name, fingerprint)` of every version whose rows are deleted.
    pub versions: Vec<(String, String)>,
    /// The storage to drop, recorded as condemned (`None`: versions without storage).
    pub storage: Option<Condemned>,
}

/// A `full`/`view` version whose rebuild an apply or run decided and did not finish, or a
/// unique-key, partition or SCD type 2 version whose refresh it decided and did not do
/// ([`StateStore::pending_rebuilds`]): its relation may predate intervals of its parents that
/// are recorded done. The next apply or run of an environment serving it rebuilds or refreshes
/// it (a refresh: only one writing its table).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRebuild {
    /// Model name.
    pub name: String,
    /// The version to rebuild.
    pub fingerprint: String,
    /// Why, for `status`, as the apply or run that decided it said it before writing anything
    /// (e.g. `downstream of t.daily, whose new intervals that command was to compute`: they may
    /// never have been, when it stopped first).
    pub reason: String,
    /// When it was recorded: ISO-8601 UTC with milliseconds.
    pub recorded_at: String,
}

/// One version's range to restate ([`StateStore::restate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestateTarget {
    /// Model name.
    pub name: String,
    /// The version the environment serves.
    pub fingerprint: String,
    /// Start of the range (inclusive).
    pub from: Millis,
    /// End of the range (exclusive).
    pub to: Millis,
}

/// What a restatement did to one target ([`StateStore::restate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restated {
    /// Done intervals cleared.
    pub cleared: usize,
    /// True when none was cleared and the version's data generation moved all the same, as a
    /// fence: an apply or run of another environment relied on the version (its intents), and
    /// the done records of its batches under way are refused, so their range is recomputed by
    /// its next run.
    pub fenced: bool,
}

/// Ledger counts of one snapshot ([`StateStore::ledger_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerStats {
    /// Intervals recorded done.
    pub done: usize,
    /// Intervals recorded failed (and not done since).
    pub failed: usize,
    /// The newest end of a done interval.
    pub done_up_to: Option<Millis>,
    /// The oldest start of a done interval (done intervals before a `start` moved later count
    /// in `done` too).
    pub done_from: Option<Millis>,
}

/// Who holds a lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseHolder {
    /// Process id on `host`.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// The command line, e.g. `efmesh apply prod`.
    pub command: String,
    /// When it took the lease: ISO-8601 UTC with milliseconds.
    pub started_at: String,
}

impl std::fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` (pid {} on {}) since {}", self.command, self.pid, self.host, self.started_at)
    }
}

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRecord {
    /// Lease name, e.g. `env:prod`.
    pub name: String,
    /// The holder's secret token (fences its writes).
    #[serde(skip)]
    pub token: String,
    /// Who holds it.
    pub holder: LeaseHolder,
    /// When it expires unless renewed: ISO-8601 UTC with milliseconds.
    pub expires_at: String,
    /// Last renewal: ISO-8601 UTC with milliseconds.
    pub heartbeat_at: String,
}

/// What [`StateStore::try_acquire_lease`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseClaim {
    /// Taken; `reclaimed` is the stale lease it replaced, if any.
    Acquired {
        /// The stale lease replaced.
        reclaimed: Option<LeaseRecord>,
    },
    /// Someone else holds it.
    Held(LeaseRecord),
}

/// One `run` tick, as journaled.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tick {
    /// Environment.
    pub env: String,
    /// ISO-8601 UTC with milliseconds.
    pub started_at: String,
    /// ISO-8601 UTC with milliseconds.
    pub finished_at: String,
    /// `processed`, `nothing-due`, `blocked`, `lock-held` or `error`.
    pub outcome: String,
    /// Intervals (or refreshes) done per model: model name → count.
    pub processed: BTreeMap<String, usize>,
    /// The error text (outcome `error`), the blocking changes (`blocked`) or the holder
    /// (`lock-held`).
    pub detail: Option<String>,
}

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

/// The versions of `name` stored in the table `physical`, as `index` records them, sorted: the
/// versions an apply shares a table with (a forward-only version's inherited ledgers, a rebuild's
/// sharers, the last refresh of a keyed table). None for an empty `physical` (a version without
/// a table).
pub fn versions_in(index: &SnapshotIndex, name: &str, physical: &str) -> Vec<String> {
    if physical.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<String> = index.iter().filter(|((n, _), (p, _))| n == name && p == physical).map(|((_, f), _)| f.clone()).collect();
    out.sort();
    out
}

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
