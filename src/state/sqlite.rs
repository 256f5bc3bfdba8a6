//! [`SqliteStore`]: the state store in one SQLite file (WAL journaling, 5 s busy timeout).
//!
//! Layout (version [`STATE_VERSION`]) is [`SCHEMA`]; older layouts are upgraded by
//! [`MIGRATIONS`] through [`migrate`] only. Reads are single prepared, cached statements (the
//! planner reads every pointer, snapshot key and ledger row of a 2000-model project on each
//! plan); writes are one `BEGIN IMMEDIATE` transaction each, rolled back on drop, fenced by the
//! handle's lease when one is set ([`StateStore::set_fence`]).

use super::{
    AuditPass, Claim, Condemned, DataVersion, DataWrite, DoneMark, Intent, IntervalStatus, JanitorInventory, JournalEntry, LeaseClaim, LeaseHolder,
    LeaseRecord, LedgerStats, PendingPromotion, PendingRebuild, RestateTarget, Restated, STATE_VERSION, SnapshotRecord, StateError, StateStore, Tick,
    VersionRow,
};
use crate::core::interval::{Interval, Millis, parse_instant, to_iso};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a statement waits for another process's write lock before failing with
/// `SQLITE_BUSY` ([`StateError::is_busy`]).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection (rusqlite's default is 16; we use about 30).
const STATEMENT_CACHE: usize = 48;

/// The tables layout version 4 added (environment leases, the run journal): one text for the
/// fresh layout ([`SCHEMA`]) and the migration to 4.
macro_rules! leases_and_ticks {
    () => {
        r#"
CREATE TABLE leases (
    name         TEXT    NOT NULL PRIMARY KEY,
    token        TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    host         TEXT    NOT NULL,
    command      TEXT    NOT NULL,
    started_at   TEXT    NOT NULL,
    expires_at   TEXT    NOT NULL,
    heartbeat_at TEXT    NOT NULL
);
CREATE TABLE ticks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    env         TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    processed   TEXT NOT NULL DEFAULT '{}',
    detail      TEXT
);
CREATE INDEX ticks_by_env ON ticks (env, id);
"#
    };
}

/// The tables layout version 5 added (the janitor's bookkeeping, pending rebuilds): one text
/// for the fresh layout ([`SCHEMA`]) and the migration to 5.
///
/// - `released`: when each version last stopped being served by an environment (the janitor's
///   TTL counts from the later of this and the snapshot's creation).
/// - `intents`: per environment, the versions (and their physical relations) an apply or run in
///   progress reads or writes; the janitor never claims them.
/// - `condemned`: physical storage the janitor has claimed (in the transaction that removed its
///   snapshot rows) and not yet dropped; an apply relying on it is refused.
/// - `pending_rebuilds`: `full`/`view` versions an apply or run decided to rebuild (downstream of
///   new intervals) and has not rebuilt yet, and unique-key, partition and SCD type 2 versions it
///   decided to refresh because a parent has new data and has not refreshed yet; the next apply
///   or run of an environment serving them (and writing their table) does them, so a process
///   stopped in between never leaves them stale.
macro_rules! v5_tables {
    () => {
        r#"
ALTER TABLE meta ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
CREATE TABLE released (
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    released_at TEXT NOT NULL,
    PRIMARY KEY (name, fingerprint)
) WITHOUT ROWID;
CREATE TABLE intents (
    env         TEXT NOT NULL,
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    physical    TEXT NOT NULL DEFAULT '',
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (env, name, fingerprint)
) WITHOUT ROWID;
CREATE TABLE condemned (
    physical    TEXT NOT NULL PRIMARY KEY,
    name        TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL DEFAULT '',
    detail      TEXT NOT NULL DEFAULT '{}',
    claimed_at  TEXT NOT NULL
);
CREATE TABLE pending_rebuilds (
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (name, fingerprint)
) WITHOUT ROWID;
"#
    };
}

/// The tables layout version 6 added: one text for the fresh layout ([`SCHEMA`]) and the
/// migration to 6.
///
/// - `meta.store_id`: a random identity of this store, written when the store is created (or
///   migrated); the janitor compares it with the owner marker it keeps in the engine, so two
///   stores sharing one catalog or lake root never collect each other's storage as orphans.
/// - `data_versions`: per version, a counter of changes to its data (`generation`: bumped when
///   intervals are recorded done, done ones are reset or cleared, the version is rebuilt,
///   upserted or reconciled) and, for `full` versions, `built_from`: the parents'
///   `(name, fingerprint, generation)` the last build read (JSON, `plan::generations`), so a
///   plan can tell that a rollup is stale whichever environment refreshed its parents.
/// - `orphans_seen`: when a janitor first saw each orphan (storage the state does not know);
///   orphans are dropped only once seen for longer than the ttl.
macro_rules! v6_tables {
    () => {
        r#"
ALTER TABLE meta ADD COLUMN store_id TEXT NOT NULL DEFAULT '';
CREATE TABLE data_versions (
    name        TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    generation  INTEGER NOT NULL DEFAULT 0,
    built_from  TEXT,
    updated_at  TEXT    NOT NULL,
    PRIMARY KEY (name, fingerprint)
) WITHOUT ROWID;
CREATE TABLE orphans_seen (
    physical   TEXT NOT NULL PRIMARY KEY,
    first_seen TEXT NOT NULL
) WITHOUT ROWID;
"#
    };
}

/// The table layout version 7 added: `audit_passes`, per version, the audits that passed on its
/// data (`digest`: the audits and the scope they saw, [`crate::apply::audit::pass_digest`]) and
/// the data generation they saw (`data_versions.generation`); a promotion of that version at the
/// same generation with the same digest does not run them again. Not data: writing a row does
/// not move `meta.generation`.
macro_rules! v7_tables {
    () => {
        r#"
CREATE TABLE audit_passes (
    name        TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    digest      TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    passed_at   TEXT    NOT NULL,
    PRIMARY KEY (name, fingerprint)
) WITHOUT ROWID;
"#
    };
}

/// The index layout version 8 added: snapshots by physical relation. Recording a build, a batch
/// or an upsert finds the other versions on the same table (`bump_data_generation`, the record
/// of a rebuild, `begin_data_write`) by this index; without it each of those scanned every
/// snapshot, so an apply of n models read the table n times (quadratic in the project).
macro_rules! v8_indexes {
    () => {
        r#"
CREATE INDEX snapshots_by_physical ON snapshots (physical);
"#
    };
}

/// The column layout version 9 added: `meta.engine_epoch`, the engine epoch this store last
/// recorded ([`crate::engine::epoch`]): every `apply` or `run` that wrote tables into the engine's
/// own database raises the epoch stamped in that database, then records it here, so a database
/// holding an older stamp than the store records (a backup restored after later writes, or
/// another database applied with this store since) is refused instead of being served as what
/// the ledger says.
macro_rules! v9_columns {
    () => {
        r#"
ALTER TABLE meta ADD COLUMN engine_epoch INTEGER NOT NULL DEFAULT 0;
"#
    };
}

/// The columns layout version 10 added: `meta.epoch_issued`, the last engine epoch this store
/// issued ([`StateStore::issue_epoch`]: every raise of an engine epoch takes a new number from
/// it, so two writers of two databases sharing this store never stamp the same epoch, and a
/// command finds at its closing raise whether another writer was issued one since its opening);
/// `meta.ducklake_epoch`, the epoch of the last stamp of the DuckLake catalog
/// ([`crate::apply::ducklake`]), which only commands stamping the catalog raise. The issued
/// counter starts at the store's epoch.
macro_rules! v10_columns {
    () => {
        r#"
ALTER TABLE meta ADD COLUMN epoch_issued INTEGER NOT NULL DEFAULT 0;
ALTER TABLE meta ADD COLUMN ducklake_epoch INTEGER NOT NULL DEFAULT 0;
UPDATE meta SET epoch_issued = engine_epoch;
"#
    };
}

/// The layout of [`STATE_VERSION`] 10. Every timestamp column holds ISO-8601 UTC text with
/// milliseconds (`to_iso`), so comparisons and ordering are lexicographic. `meta.generation`
/// counts committed writes (every data write transaction bumps it), so a reader can tell in one
/// query whether anything changed since it last looked — except a promotion, which only changes
/// its own environment's pointers and deletes that environment's memo instead;
/// `plan_memo` holds, per environment, the memo of its last no-op plan (see `plan::memo`).
/// `environments.metadata` is the metadata the environment serves for each pointer (written only
/// by the promotion that makes it live; snapshot rows never change after they are written).
/// `promotions` holds, per environment, a promotion under way: recorded before its views move,
/// removed by the transaction that records its pointers (see [`PendingPromotion`]).
/// `leases` holds the environment locks (one row per held lease, see [`super::lease`]);
/// `ticks` is the run journal (one row per `efmesh run`); the tables, index and column of
/// versions 5 to 10 are described at `v5_tables!`, `v6_tables!`, `v7_tables!`, `v8_indexes!`,
/// `v9_columns!` and `v10_columns!`.
pub const SCHEMA: &str = concat!(
    r#"
CREATE TABLE meta (
    version    INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE plan_memo (
    env  TEXT NOT NULL PRIMARY KEY,
    key  TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE snapshots (
    name                TEXT    NOT NULL,
    fingerprint         TEXT    NOT NULL,
    fingerprint_version INTEGER NOT NULL,
    kind                TEXT    NOT NULL,
    physical            TEXT    NOT NULL DEFAULT '',
    canonical           TEXT,
    rendered_sql        TEXT    NOT NULL,
    metadata            TEXT    NOT NULL DEFAULT '{}',
    created_at          TEXT    NOT NULL,
    PRIMARY KEY (name, fingerprint)
);
CREATE TABLE environments (
    env         TEXT NOT NULL,
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    promoted_at TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (env, name)
) WITHOUT ROWID;
CREATE TABLE promotions (
    env        TEXT NOT NULL PRIMARY KEY,
    pointers   TEXT NOT NULL,
    rollback   TEXT NOT NULL,
    started_at TEXT NOT NULL
);
CREATE TABLE intervals (
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    start_ts    TEXT NOT NULL,
    end_ts      TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (name, fingerprint, start_ts)
) WITHOUT ROWID;
CREATE TABLE plans (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    env        TEXT NOT NULL,
    summary    TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    applied_by TEXT NOT NULL DEFAULT ''
);
CREATE INDEX plans_by_env ON plans (env, id);
CREATE TABLE canon_cache (
    key       TEXT NOT NULL PRIMARY KEY,
    canonical TEXT NOT NULL
);
"#,
    leases_and_ticks!(),
    v5_tables!(),
    v6_tables!(),
    v7_tables!(),
    v8_indexes!(),
    v9_columns!(),
    v10_columns!()
);

/// One step of the layout's history: the statements that turn a store of version `to - 1` into
/// version `to` (they end by recording `to` in `meta`).
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The version this migration produces.
    pub to: i64,
    /// What it changes, for the `migrate` report.
    pub description: &'static str,
    /// The SQL, run inside the migration transaction.
    pub sql: &'static str,
}

/// Every migration, oldest first: version 1 (the first released layout) is upgraded by each
/// in turn up to [`STATE_VERSION`].
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        to: 2,
        description: "the write counter and the plan memo",
        sql: r#"
ALTER TABLE meta ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
CREATE TABLE plan_memo (
    env  TEXT NOT NULL PRIMARY KEY,
    key  TEXT NOT NULL,
    body TEXT NOT NULL
);
UPDATE meta SET version = 2;
"#,
    },
    Migration {
        // Every pointer gets the metadata its snapshot held (the best knowledge a version-2
        // store has of what the environment serves), the promotion intents table is created,
        // and every plan memo is dropped (plans now compare metadata against the pointers).
        to: 3,
        description: "metadata per pointer and promotion intents",
        sql: r#"
ALTER TABLE environments ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
UPDATE environments SET metadata = COALESCE(
    (SELECT s.metadata FROM snapshots s WHERE s.name = environments.name AND s.fingerprint = environments.fingerprint),
    '{}');
CREATE TABLE promotions (
    env        TEXT NOT NULL PRIMARY KEY,
    pointers   TEXT NOT NULL,
    rollback   TEXT NOT NULL,
    started_at TEXT NOT NULL
);
DELETE FROM plan_memo;
UPDATE meta SET version = 3;
"#,
    },
    Migration { to: 4, description: "environment leases and the run journal", sql: concat!(leases_and_ticks!(), "UPDATE meta SET version = 4;\n") },
    Migration {
        // Every version no environment serves counts as released now: the janitor's TTL starts
        // at the upgrade, never earlier (the store did not record when they stopped being served).
        to: 5,
        description: "janitor bookkeeping (released versions, intents, claims) and pending rebuilds",
        sql: concat!(
            v5_tables!(),
            r#"
INSERT INTO released (name, fingerprint, released_at)
    SELECT s.name, s.fingerprint, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM snapshots s
    WHERE NOT EXISTS (SELECT 1 FROM environments e WHERE e.name = s.name AND e.fingerprint = s.fingerprint);
UPDATE meta SET version = 5;
"#
        ),
    },
    Migration {
        to: 6,
        description: "the store's identity, data generations of versions, orphans seen by the janitor",
        sql: concat!(v6_tables!(), "UPDATE meta SET store_id = lower(hex(randomblob(16)));\nUPDATE meta SET version = 6;\n"),
    },
    Migration {
        to: 7,
        description: "audits passed on a version's data (promotion does not re-run them)",
        sql: concat!(v7_tables!(), "UPDATE meta SET version = 7;\n"),
    },
    Migration { to: 8, description: "an index of snapshots by physical relation", sql: concat!(v8_indexes!(), "UPDATE meta SET version = 8;\n") },
    Migration {
        to: 9,
        description: "the engine epoch (an engine database older than the store is refused)",
        sql: concat!(v9_columns!(), "UPDATE meta SET version = 9;\n"),
    },
    Migration {
        to: 10,
        description: "issued engine epochs and the DuckLake catalog's epoch (two databases sharing the store, a catalog only some projects stamp)",
        sql: concat!(v10_columns!(), "UPDATE meta SET version = 10;\n"),
    },
];

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationReport {
    /// The store.
    pub store: String,
    /// Its version before.
    pub from: i64,
    /// Its version after ([`STATE_VERSION`]).
    pub to: i64,
    /// The versions applied, in order (empty: the store was current).
    pub applied: Vec<i64>,
    /// The copy of the store taken before migrating (`None` when nothing was migrated).
    pub backup: Option<PathBuf>,
}

/// The layout version of the SQLite store at `path` without changing anything: `None` when the
/// file does not exist or holds no table.
///
/// # Errors
/// [`StateError::Open`] when the file cannot be read as a SQLite database.
pub fn stored_version_of(path: &Path) -> Result<Option<i64>, StateError> {
    if !path.exists() {
        return Ok(None);
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| open_error(path, e))?;
    stored_version(&conn).map_err(|e| open_error(path, e))
}

/// Upgrades the store at `path` to [`STATE_VERSION`]: an older store is first copied beside
/// itself (`VACUUM INTO <path>.v<found>-<stamp>.bak`), then every missing migration runs in ONE
/// transaction (a failure leaves the store as it was). A current store is left untouched.
///
/// # Errors
/// [`StateError::Version`] for a store newer than this efmesh (or one that is not a store:
/// version 0); [`StateError::Open`] when there is no store at `path` or it cannot be read;
/// [`StateError::Backend`] when the backup or a migration fails (nothing is changed then).
pub fn migrate(path: &Path, now: Millis) -> Result<MigrationReport, StateError> {
    let store = path.display().to_string();
    if !path.exists() {
        let source: super::error::BackendError = format!("no state store at `{store}`").into();
        return Err(StateError::Open { store, source, transient: false });
    }
    let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| open_error(path, e))?;
    let found = stored_version(&conn).map_err(|e| open_error(path, e))?.unwrap_or(STATE_VERSION);
    if found == STATE_VERSION {
        return Ok(MigrationReport { store, from: found, to: STATE_VERSION, applied: Vec::new(), backup: None });
    }
    if !(1..=STATE_VERSION).contains(&found) {
        return Err(StateError::Version { store, found, wanted: STATE_VERSION });
    }
    let backend = |op: &str, e: rusqlite::Error| StateError::Backend {
        store: path.display().to_string(),
        op: op.to_string(),
        transient: is_transient(&e),
        source: Box::new(e),
    };
    // Take the write lock first, and re-read under it: another process may have migrated
    // meanwhile (to this version: nothing to do; a newer efmesh, past it: refuse).
    let tx = Transaction::new_unchecked(&conn, TransactionBehavior::Immediate).map_err(|e| backend("start the migration", e))?;
    let from = stored_version(&tx).map_err(|e| backend("read the layout version", e))?.unwrap_or(STATE_VERSION);
    if from == STATE_VERSION {
        return Ok(MigrationReport { store, from, to: STATE_VERSION, applied: Vec::new(), backup: None });
    }
    if !(1..=STATE_VERSION).contains(&from) {
        return Err(StateError::Version { store, found: from, wanted: STATE_VERSION });
    }
    let stamp = to_iso(now).replace([':', '.'], "-");
    let mut backup = path.as_os_str().to_owned();
    backup.push(format!(".v{from}-{stamp}.bak"));
    let backup = PathBuf::from(backup);
    // The backup, while this connection holds the write lock: no other writer can commit
    // between the backup and the migration. `VACUUM INTO` cannot run inside a transaction, so
    // a second connection runs it; it only reads (a consistent snapshot), which the write lock
    // allows, and the snapshot is exactly what this transaction starts from (it wrote nothing).
    let reader = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| open_error(path, e))?;
    reader.busy_timeout(BUSY_TIMEOUT).map_err(|e| open_error(path, e))?;
    reader.execute("VACUUM INTO ?1", [backup.to_string_lossy()]).map_err(|e| backend(&format!("back the store up into `{}`", backup.display()), e))?;
    drop(reader);
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.to > from) {
        tx.execute_batch(m.sql).map_err(|e| backend(&format!("migrate to version {} ({})", m.to, m.description), e))?;
        applied.push(m.to);
    }
    tx.commit().map_err(|e| backend("commit the migration", e))?;
    Ok(MigrationReport { store, from, to: STATE_VERSION, applied, backup: Some(backup) })
}

fn open_error(path: &Path, e: rusqlite::Error) -> StateError {
    StateError::Open { store: path.display().to_string(), transient: is_transient(&e), source: Box::new(e) }
}

/// True for SQLite's "another connection holds the lock" errors.
fn is_transient(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// The state store in SQLite: one connection to the store file (or to a private in-memory
/// database).
///
/// Methods take `&self`; the store is `Send` but not `Sync` (one connection). Several processes
/// may open the same file: reads never block (WAL), and each write takes the file's write lock
/// at `BEGIN IMMEDIATE`, waiting up to 5 s for another writer before failing with an error for
/// which [`StateError::is_busy`] is true.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    /// Store file, or `:memory:`; named in every error.
    path: PathBuf,
    /// The lease every write checks first: (lease name, token).
    fence: RefCell<Option<(String, String)>>,
}

/// What went wrong inside one operation, before the operation's name is attached.
enum Fault {
    Sql(rusqlite::Error),
    Corrupt(String),
    Fail(StateError),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Fault::Sql(e)
    }
}

impl SqliteStore {
    /// Opens the store at `path`, creating the file and the layout of [`STATE_VERSION`] when it
    /// does not exist (or is an empty database). Turns on WAL journaling (persistent in the
    /// file), `synchronous = NORMAL` and a busy timeout of about 5 s. Two processes creating the
    /// same store at once get one store: the layout is written under the write lock, re-checked
    /// there.
    ///
    /// # Errors
    /// - [`StateError::Open`] when the file cannot be opened or created (e.g. a missing parent
    ///   directory), is not a SQLite database, or cannot be initialised.
    /// - [`StateError::Version`] when the store has another layout version, older (run
    ///   `efmesh migrate`) or newer (a database with tables but no `meta` counts as version 0).
    ///   The file is left untouched.
    ///
    /// # Example
    /// ```no_run
    /// use efmesh::state::StateStore;
    /// let store = efmesh::state::SqliteStore::open("efmesh.state.sqlite".as_ref())?;
    /// println!("environments: {:?}", store.environments()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
        Self::init(conn, path.to_path_buf(), true)
    }

    /// Opens a private, empty in-memory store (for tests and dry runs); it vanishes on drop.
    ///
    /// # Errors
    /// [`StateError::Open`] if SQLite cannot allocate the database.
    pub fn open_in_memory() -> Result<Self, StateError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| open_error(&path, e))?;
        Self::init(conn, path, false)
    }

    /// The store file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn init(conn: Connection, path: PathBuf, file: bool) -> Result<Self, StateError> {
        let open_err = |e| open_error(&path, e);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // SQLite does not always wait through the busy handler while another process creates
        // the store or switches it to WAL (it can answer `SQLITE_BUSY` at once); every step here
        // is idempotent, so a busy answer is retried for up to the busy timeout.
        let started = std::time::Instant::now();
        loop {
            match Self::prepare(&conn, &path, file) {
                Err(Fault::Sql(e)) if is_transient(&e) && started.elapsed() < BUSY_TIMEOUT => std::thread::sleep(Duration::from_millis(25)),
                Err(Fault::Sql(e)) => return Err(open_err(e)),
                Err(Fault::Fail(e)) => return Err(e),
                Err(Fault::Corrupt(detail)) => return Err(StateError::Corrupt { store: path.display().to_string(), op: "open".to_string(), detail }),
                Ok(()) => break,
            }
        }
        Ok(Self { conn, path, fence: RefCell::new(None) })
    }

    /// Checks the layout version, sets the journal mode and creates a fresh layout.
    fn prepare(conn: &Connection, path: &Path, file: bool) -> Result<(), Fault> {
        let check = |found: i64| {
            if found == STATE_VERSION {
                Ok(())
            } else {
                Err(Fault::Fail(StateError::Version { store: path.display().to_string(), found, wanted: STATE_VERSION }))
            }
        };
        // Check the version before touching anything, so a foreign, older or newer store stays
        // as it was (an older one is upgraded by `migrate` only).
        let found = stored_version(conn)?;
        if let Some(v) = found {
            check(v)?;
        }
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if file && !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), mode, "the state store cannot use WAL journaling here; concurrent readers will wait for writers");
        }
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        if found.is_none() {
            // Fresh: create the layout under the write lock, re-checking in case another
            // process created it since we looked.
            let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
            match stored_version(&tx)? {
                Some(v) => check(v)?,
                None => {
                    tx.execute_batch(SCHEMA)?;
                    tx.execute("INSERT INTO meta (version, store_id) VALUES (?1, lower(hex(randomblob(16))))", [STATE_VERSION])?;
                }
            }
            tx.commit()?;
        }
        Ok(())
    }

    /// Runs one operation, naming it (lazily) in any error.
    fn run<T>(&self, op: impl FnOnce() -> String, f: impl FnOnce() -> Result<T, Fault>) -> Result<T, StateError> {
        f().map_err(|fault| match fault {
            Fault::Sql(source) => StateError::Backend { store: self.location(), op: op(), transient: is_transient(&source), source: Box::new(source) },
            Fault::Corrupt(detail) => StateError::Corrupt { store: self.location(), op: op(), detail },
            Fault::Fail(e) => e,
        })
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction: committed if `f` succeeds, rolled back
    /// (on drop) otherwise. Checks the fence lease first, inside the transaction.
    ///
    /// Bumps [`StateStore::generation`] in the same transaction: whatever `f` wrote may change
    /// any environment's plan.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, Fault>) -> Result<T, Fault> {
        self.write_tx(true, f)
    }

    fn write_tx<T>(&self, bump: bool, f: impl FnOnce(&Transaction<'_>) -> Result<T, Fault>) -> Result<T, Fault> {
        self.write_unfenced(bump, |tx| {
            self.fence_check(tx, None)?;
            f(tx)
        })
    }

    fn write_unfenced<T>(&self, bump: bool, f: impl FnOnce(&Transaction<'_>) -> Result<T, Fault>) -> Result<T, Fault> {
        // `new_unchecked` because methods take `&self`; the connection is private and no method
        // nests transactions.
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        if bump {
            tx.prepare_cached("UPDATE meta SET generation = generation + 1")?.execute([])?;
        }
        tx.commit()?;
        Ok(out)
    }

    /// Fails with [`StateError::LeaseLost`] when the fence lease no longer has our token, or has
    /// expired (`expires_at <= now`): an expired lease may be reclaimed at any moment (an
    /// interrupted promotion's recovery does), so its holder must not write on. `margin_den`
    /// (`Some(d)`) also requires `1/d` of the lease's time to live to remain (the check before an
    /// engine step, which the state store cannot fence).
    fn fence_check(&self, conn: &Connection, margin_den: Option<i64>) -> Result<(), Fault> {
        let Some((name, token)) = self.fence.borrow().clone() else { return Ok(()) };
        let row: Option<LeaseRecord> =
            conn.prepare_cached(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = ?1"))?.query_row([&name], lease_row).optional()?;
        let now = super::process_clock();
        let live = |l: &LeaseRecord| -> bool {
            let (Ok(expires), Ok(beat)) = (crate::core::interval::parse_instant(&l.expires_at), crate::core::interval::parse_instant(&l.heartbeat_at)) else {
                return false;
            };
            let margin = margin_den.map_or(0, |d| (expires - beat).max(0) / d.max(1));
            expires - margin > now
        };
        match row {
            Some(l) if l.token == token && live(&l) => Ok(()),
            Some(l) if l.token == token => Err(Fault::Fail(StateError::LeaseLost { store: self.location(), lease: name, holder: None })),
            other => Err(Fault::Fail(StateError::LeaseLost { store: self.location(), lease: name, holder: other.map(|l| l.holder.to_string()) })),
        }
    }
}

fn lease_row(r: &Row<'_>) -> rusqlite::Result<LeaseRecord> {
    Ok(LeaseRecord {
        name: r.get(0)?,
        token: r.get(1)?,
        holder: LeaseHolder { pid: r.get(2)?, host: r.get(3)?, command: r.get(4)?, started_at: r.get(5)? },
        expires_at: r.get(6)?,
        heartbeat_at: r.get(7)?,
    })
}

/// [`StateStore::check_fence`] (before an engine step) requires a quarter of the lease's time
/// to live left: a holder whose renewals stalled stops before its lease can be reclaimed.
const FENCE_MARGIN_DEN: i64 = 4;

const LEASE_COLUMNS: &str = "name, token, pid, host, command, started_at, expires_at, heartbeat_at";

impl StateStore for SqliteStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn is_in_memory(&self) -> bool {
        self.path.as_os_str() == ":memory:"
    }

    fn reopen(&self) -> Result<Box<dyn StateStore>, StateError> {
        if self.is_in_memory() {
            let source: super::error::BackendError = "an in-memory store cannot be opened twice".into();
            return Err(StateError::Open { store: self.location(), source, transient: false });
        }
        Ok(Box::new(SqliteStore::open(&self.path)?))
    }

    fn ledger_stats(&self, name: &str, fp: &str) -> Result<LedgerStats, StateError> {
        self.run(
            || format!("read the ledger of `{name}` `{fp}`"),
            || {
                let (done, failed, up_to, from): (i64, i64, Option<String>, Option<String>) = self
                    .conn
                    .prepare_cached(
                        "SELECT COALESCE(SUM(status = 'done'), 0), COALESCE(SUM(status = 'failed'), 0), MAX(CASE WHEN status = 'done' THEN end_ts END), \
                         MIN(CASE WHEN status = 'done' THEN start_ts END) FROM intervals WHERE name = ?1 AND fingerprint = ?2",
                    )?
                    .query_row([name, fp], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
                let done_up_to = match up_to {
                    Some(t) => Some(instant(&t, || format!("`{name}` `{fp}`"))?),
                    None => None,
                };
                let done_from = match from {
                    Some(t) => Some(instant(&t, || format!("`{name}` `{fp}`"))?),
                    None => None,
                };
                Ok(LedgerStats { done: done as usize, failed: failed as usize, done_up_to, done_from })
            },
        )
    }

    fn record_refresh(&self, name: &str, fp: &str, tick: Millis, complete: Option<Millis>, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the refresh of `{name}` `{fp}` for the tick {}", to_iso(tick)),
            || {
                self.write(|tx| {
                    // One row: the end only moves forward; the start says how far the rows read
                    // were complete (the epoch: as far as the end).
                    let old: Option<String> = tx
                        .prepare_cached("SELECT max(end_ts) FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done'")?
                        .query_row(params![name, fp], |r| r.get(0))?;
                    let end = old.filter(|o| *o > to_iso(tick)).unwrap_or_else(|| to_iso(tick));
                    let start = complete.map(to_iso).filter(|c| *c < end).unwrap_or_else(|| to_iso(0));
                    tx.prepare_cached("DELETE FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done'")?.execute(params![name, fp])?;
                    tx.prepare_cached("INSERT INTO intervals (name, fingerprint, start_ts, end_ts, status, updated_at) VALUES (?1, ?2, ?3, ?4, 'done', ?5)")?
                        .execute(params![name, fp, start, end, to_iso(now)])?;
                    Ok(())
                })
            },
        )
    }

    fn clear_intervals(&self, name: &str, fp: &str, from: Millis, to: Millis) -> Result<usize, StateError> {
        self.run(
            || format!("clear the intervals of `{name}` `{fp}` in [{}, {})", to_iso(from), to_iso(to)),
            || {
                self.write(|tx| {
                    let cleared = tx
                        .prepare_cached("DELETE FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done' AND start_ts >= ?3 AND start_ts < ?4")?
                        .execute(params![name, fp, to_iso(from), to_iso(to)])?;
                    if cleared > 0 {
                        bump_data_generation(tx, name, fp, &to_iso(crate::core::interval::now_millis()))?;
                    }
                    Ok(cleared)
                })
            },
        )
    }

    fn try_acquire_lease(
        &self,
        name: &str,
        token: &str,
        holder: &LeaseHolder,
        expires: Millis,
        now: Millis,
        is_stale: &dyn Fn(&LeaseRecord) -> bool,
    ) -> Result<LeaseClaim, StateError> {
        self.run(
            || format!("take the lock `{name}`"),
            || {
                self.write_unfenced(false, |tx| {
                    let current = tx.prepare_cached(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = ?1"))?.query_row([name], lease_row).optional()?;
                    let reclaimed = match current {
                        Some(held) if held.token == token => None,
                        Some(held) if held.expires_at.as_str() > to_iso(now).as_str() && !is_stale(&held) => return Ok(LeaseClaim::Held(held)),
                        other => other,
                    };
                    let now_iso = to_iso(now);
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO leases (name, token, pid, host, command, started_at, expires_at, heartbeat_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    )?
                    .execute(params![
                        name,
                        token,
                        holder.pid,
                        holder.host,
                        holder.command,
                        holder.started_at,
                        to_iso(expires),
                        now_iso
                    ])?;
                    Ok(LeaseClaim::Acquired { reclaimed })
                })
            },
        )
    }

    fn renew_lease(&self, name: &str, token: &str, expires: Millis, now: Millis) -> Result<bool, StateError> {
        self.run(
            || format!("renew the lock `{name}`"),
            || {
                self.write_unfenced(false, |tx| {
                    let n = tx.prepare_cached("UPDATE leases SET expires_at = ?3, heartbeat_at = ?4 WHERE name = ?1 AND token = ?2")?.execute(params![
                        name,
                        token,
                        to_iso(expires),
                        to_iso(now)
                    ])?;
                    Ok(n == 1)
                })
            },
        )
    }

    fn release_lease(&self, name: &str, token: &str) -> Result<(), StateError> {
        self.run(
            || format!("release the lock `{name}`"),
            || {
                self.write_unfenced(false, |tx| {
                    tx.prepare_cached("DELETE FROM leases WHERE name = ?1 AND token = ?2")?.execute([name, token])?;
                    Ok(())
                })
            },
        )
    }

    fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StateError> {
        self.run(
            || format!("read the lock `{name}`"),
            || Ok(self.conn.prepare_cached(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = ?1"))?.query_row([name], lease_row).optional()?),
        )
    }

    fn set_fence(&self, fence: Option<(String, String)>) {
        *self.fence.borrow_mut() = fence;
    }

    fn check_fence(&self) -> Result<(), StateError> {
        self.run(|| "check the lock this process holds".to_string(), || self.fence_check(&self.conn, Some(FENCE_MARGIN_DEN)))
    }

    fn record_tick(&self, tick: &Tick) -> Result<i64, StateError> {
        self.run(
            || format!("record a run tick of environment `{}`", tick.env),
            || {
                let processed = serde_json::to_string(&tick.processed).map_err(|e| Fault::Corrupt(format!("cannot encode the tick: {e}")))?;
                self.write_unfenced(false, |tx| {
                    tx.prepare_cached("INSERT INTO ticks (env, started_at, finished_at, outcome, processed, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
                        .execute(params![tick.env, tick.started_at, tick.finished_at, tick.outcome, processed, tick.detail])?;
                    Ok(tx.last_insert_rowid())
                })
            },
        )
    }

    fn ticks(&self, env: &str, limit: usize) -> Result<Vec<Tick>, StateError> {
        self.run(
            || format!("read the run ticks of environment `{env}`"),
            || {
                let mut stmt = self
                    .conn
                    .prepare_cached("SELECT id, started_at, finished_at, outcome, processed, detail FROM ticks WHERE env = ?1 ORDER BY id DESC LIMIT ?2")?;
                let rows = stmt.query_map(params![env, limit as i64], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?, r.get::<_, String>(4)?, r.get(5)?))
                })?;
                let mut out = Vec::new();
                for row in rows {
                    let (id, started_at, finished_at, outcome, processed, detail) = row?;
                    let processed = serde_json::from_str(&processed).map_err(|e| Fault::Corrupt(format!("tick {id} is not JSON: {e}")))?;
                    out.push(Tick { env: env.to_string(), started_at, finished_at, outcome, processed, detail });
                }
                Ok(out)
            },
        )
    }

    fn pending_rebuilds(&self) -> Result<Vec<PendingRebuild>, StateError> {
        self.run(
            || "read the pending rebuilds".to_string(),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT name, fingerprint, reason, recorded_at FROM pending_rebuilds ORDER BY recorded_at, name")?;
                let rows = stmt.query_map([], |r| Ok(PendingRebuild { name: r.get(0)?, fingerprint: r.get(1)?, reason: r.get(2)?, recorded_at: r.get(3)? }))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            },
        )
    }

    fn record_pending_rebuilds(&self, rebuilds: &[(String, String, String)], now: Millis) -> Result<(), StateError> {
        if rebuilds.is_empty() {
            return Ok(());
        }
        self.run(
            || format!("record {} pending rebuilds", rebuilds.len()),
            || {
                self.write(|tx| {
                    let mut stmt =
                        tx.prepare_cached("INSERT OR IGNORE INTO pending_rebuilds (name, fingerprint, reason, recorded_at) VALUES (?1, ?2, ?3, ?4)")?;
                    let at = to_iso(now);
                    for (name, fp, reason) in rebuilds {
                        stmt.execute(params![name, fp, reason, at])?;
                    }
                    Ok(())
                })
            },
        )
    }

    fn clear_pending_rebuild(&self, name: &str, fp: &str) -> Result<(), StateError> {
        self.run(
            || format!("clear the pending rebuild of `{name}` `{fp}`"),
            || {
                self.write(|tx| {
                    tx.prepare_cached("DELETE FROM pending_rebuilds WHERE name = ?1 AND fingerprint = ?2")?.execute(params![name, fp])?;
                    Ok(())
                })
            },
        )
    }

    fn schema_version(&self) -> Result<i64, StateError> {
        self.run(|| "read the layout version".to_string(), || Ok(self.conn.prepare_cached("SELECT MAX(version) FROM meta")?.query_row([], |r| r.get(0))?))
    }

    /// How many write transactions the store has committed (the `meta.generation` counter):
    /// equal values mean nothing was written in between, except promotions, which change only
    /// their own environment's pointers and delete that environment's plan memo.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn generation(&self) -> Result<i64, StateError> {
        self.run(|| "read the store's generation".to_string(), || Ok(self.conn.prepare_cached("SELECT generation FROM meta")?.query_row([], |r| r.get(0))?))
    }

    /// The generation and the id of `env`'s last row in the apply journal, which every
    /// promotion of `env` writes in the transaction that moves its pointers (`AUTOINCREMENT`:
    /// ids are never reused), in one statement.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn plan_state(&self, env: &str) -> Result<Option<(i64, i64, i64)>, StateError> {
        self.run(
            || format!("read the store's generation and the last promotion (planning `{env}`)"),
            || {
                Ok(Some(
                    self.conn
                        .prepare_cached("SELECT generation, claims, (SELECT coalesce(max(id), 0) FROM plans) FROM meta")?
                        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?,
                ))
            },
        )
    }

    /// The plan memo of `env`: `(key, body)` as [`StateStore::plan_memo_put`] stored it.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn plan_memo_get(&self, env: &str) -> Result<Option<(String, String)>, StateError> {
        self.run(
            || format!("read the plan memo of `{env}`"),
            || Ok(self.conn.prepare_cached("SELECT key, body FROM plan_memo WHERE env = ?1")?.query_row([env], |r| Ok((r.get(0)?, r.get(1)?))).optional()?),
        )
    }

    /// Stores the plan memo of `env`, replacing the previous one. Unlike every other write it
    /// does not bump [`StateStore::generation`]: a memo is a cache of what the store already
    /// says, keyed by the generation it was computed at.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the write fails (nothing is written).
    fn plan_memo_put(&self, env: &str, key: &str, body: &str) -> Result<(), StateError> {
        self.run(
            || format!("write the plan memo of `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached("INSERT OR REPLACE INTO plan_memo (env, key, body) VALUES (?1, ?2, ?3)")?.execute([env, key, body])?;
                    Ok(())
                })
            },
        )
    }

    /// The pointer set of environment `env`: model name (`schema.table`) → fingerprint.
    /// Includes externals. Empty for an unknown environment.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn env_pointers(&self, env: &str) -> Result<BTreeMap<String, String>, StateError> {
        self.run(
            || format!("read the pointers of environment `{env}`"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT name, fingerprint FROM environments WHERE env = ?1")?;
                let rows = stmt.query_map([env], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            },
        )
    }

    /// The metadata environment `env` serves for each pointer: model name → metadata JSON text,
    /// as the promotion that made the pointer live recorded it (`{}` when unknown). Empty for an
    /// unknown environment.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn env_metadata(&self, env: &str) -> Result<BTreeMap<String, String>, StateError> {
        self.run(
            || format!("read the metadata of environment `{env}`"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT name, metadata FROM environments WHERE env = ?1")?;
                let rows = stmt.query_map([env], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            },
        )
    }

    /// Every environment with at least one pointer, sorted. (An environment promoted with an
    /// empty pointer set has only journal rows and is not listed.)
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn environments(&self) -> Result<Vec<String>, StateError> {
        self.run(
            || "list environments".to_string(),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT DISTINCT env FROM environments ORDER BY env")?;
                let rows = stmt.query_map([], |r| r.get(0))?;
                Ok(rows.collect::<Result<_, _>>()?)
            },
        )
    }

    /// The snapshot `(name, fp)`, or `None` if the store has none.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails; [`StateError::Corrupt`] if its metadata is not
    /// JSON.
    fn snapshot(&self, name: &str, fp: &str) -> Result<Option<SnapshotRecord>, StateError> {
        self.run(
            || format!("read snapshot `{name}` `{fp}`"),
            || {
                let mut stmt = self.conn.prepare_cached(
                    "SELECT fingerprint_version, kind, physical, canonical, rendered_sql, metadata, created_at \
                     FROM snapshots WHERE name = ?1 AND fingerprint = ?2",
                )?;
                let row = stmt
                    .query_row([name, fp], |r| {
                        Ok((
                            r.get::<_, u32>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, String>(4)?,
                            r.get::<_, String>(5)?,
                            r.get::<_, String>(6)?,
                        ))
                    })
                    .optional()?;
                let Some((fingerprint_version, kind, physical, canonical, rendered_sql, metadata, created_at)) = row else {
                    return Ok(None);
                };
                let metadata =
                    serde_json::from_str(&metadata).map_err(|e| Fault::Corrupt(format!("the metadata of snapshot `{name}` `{fp}` is not JSON: {e}")))?;
                Ok(Some(SnapshotRecord {
                    name: name.to_string(),
                    fingerprint: fp.to_string(),
                    fingerprint_version,
                    kind,
                    physical,
                    canonical,
                    rendered_sql,
                    metadata,
                    created_at,
                }))
            },
        )
    }

    /// Every snapshot id `(name, fingerprint)` in the store, in one query.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn snapshot_keys(&self) -> Result<HashSet<(String, String)>, StateError> {
        self.run(
            || "list snapshots".to_string(),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT name, fingerprint FROM snapshots")?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            },
        )
    }

    fn was_released(&self, name: &str, fp: &str) -> Result<bool, StateError> {
        self.run(
            || format!("read whether `{name}` `{fp}` was ever served"),
            || Ok(self.conn.prepare_cached("SELECT 1 FROM released WHERE name = ?1 AND fingerprint = ?2")?.exists(params![name, fp])?),
        )
    }

    /// Every snapshot's physical relation and kind tag, keyed by `(name, fingerprint)`, in one
    /// query. A version that inherited another's storage (indirect reuse, forward-only) records
    /// that storage here.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn snapshot_index(&self) -> Result<super::SnapshotIndex, StateError> {
        self.run(
            || "list snapshots".to_string(),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT name, fingerprint, physical, kind FROM snapshots")?;
                let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))))?;
                Ok(rows.collect::<Result<_, _>>()?)
            },
        )
    }

    /// Records a snapshot. If `(rec.name, rec.fingerprint)` is already stored, nothing changes:
    /// the first payload (and `created_at`) is kept, so repeating a write is harmless.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the write fails (nothing is written).
    fn put_snapshot(&self, rec: &SnapshotRecord) -> Result<(), StateError> {
        self.run(|| format!("write snapshot `{}` `{}`", rec.name, rec.fingerprint), || self.write(|tx| insert_snapshot(tx, rec)))
    }

    /// Starts (UTC epoch ms) of the intervals of snapshot `(name, fp)` recorded as
    /// [`IntervalStatus::Done`]. Failed intervals are not included.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails; [`StateError::Corrupt`] if a stored start is
    /// not a timestamp.
    fn done_intervals(&self, name: &str, fp: &str) -> Result<BTreeSet<Millis>, StateError> {
        self.run(
            || format!("read the intervals of `{name}` `{fp}`"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT start_ts FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done'")?;
                let mut rows = stmt.query([name, fp])?;
                let mut out = BTreeSet::new();
                while let Some(row) = rows.next()? {
                    out.insert(instant(text(row, 0)?, || format!("`{name}` `{fp}`"))?);
                }
                Ok(out)
            },
        )
    }

    fn failed_intervals(&self, name: &str, fp: &str) -> Result<BTreeSet<Millis>, StateError> {
        self.run(
            || format!("read the failed intervals of `{name}` `{fp}`"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT start_ts FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'failed'")?;
                let mut rows = stmt.query([name, fp])?;
                let mut out = BTreeSet::new();
                while let Some(row) = rows.next()? {
                    out.insert(instant(text(row, 0)?, || format!("`{name}` `{fp}`"))?);
                }
                Ok(out)
            },
        )
    }

    fn done_ledger(&self, name: &str, fp: &str) -> Result<BTreeMap<Millis, (Millis, Millis)>, StateError> {
        self.run(
            || format!("read the intervals of `{name}` `{fp}`"),
            || {
                let mut stmt =
                    self.conn.prepare_cached("SELECT start_ts, end_ts, updated_at FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done'")?;
                let mut rows = stmt.query([name, fp])?;
                let mut out = BTreeMap::new();
                let owner = || format!("`{name}` `{fp}`");
                while let Some(row) = rows.next()? {
                    out.insert(instant(text(row, 0)?, owner)?, (instant(text(row, 1)?, owner)?, instant(text(row, 2)?, owner)?));
                }
                Ok(out)
            },
        )
    }

    /// The done interval starts (UTC epoch ms) of every snapshot, keyed by `(name, fingerprint)`,
    /// in one query. Snapshots with no done interval are absent.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails; [`StateError::Corrupt`] if a stored start is
    /// not a timestamp.
    fn all_done_intervals(&self) -> Result<HashMap<(String, String), BTreeSet<Millis>>, StateError> {
        self.run(
            || "read the interval ledger".to_string(),
            || {
                // The primary key order groups each snapshot's rows together: allocate its key once.
                let mut stmt = self.conn.prepare_cached(
                    "SELECT name, fingerprint, start_ts FROM intervals WHERE status = 'done' \
                     ORDER BY name, fingerprint, start_ts",
                )?;
                let mut rows = stmt.query([])?;
                let mut out = HashMap::new();
                let mut current: Option<((String, String), BTreeSet<Millis>)> = None;
                while let Some(row) = rows.next()? {
                    let (name, fp) = (text(row, 0)?, text(row, 1)?);
                    let same = matches!(&current, Some(((n, f), _)) if n == name && f == fp);
                    if !same {
                        if let Some((key, set)) = current.take() {
                            out.insert(key, set);
                        }
                        current = Some(((name.to_string(), fp.to_string()), BTreeSet::new()));
                    }
                    let start = instant(text(row, 2)?, || format!("`{name}` `{fp}`"))?;
                    if let Some((_, set)) = current.as_mut() {
                        set.insert(start);
                    }
                }
                if let Some((key, set)) = current {
                    out.insert(key, set);
                }
                Ok(out)
            },
        )
    }

    fn inherit_done(&self, name: &str, from: &str, to: &str, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the done intervals of `{name}` `{from}` as `{to}`'s"),
            || {
                self.write(|tx| {
                    let copied = tx.execute(
                        "INSERT INTO intervals (name, fingerprint, start_ts, end_ts, status, updated_at) \
                         SELECT name, ?3, start_ts, end_ts, 'done', updated_at FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done' \
                         ON CONFLICT (name, fingerprint, start_ts) DO UPDATE SET \
                         end_ts = excluded.end_ts, status = excluded.status, updated_at = excluded.updated_at",
                        params![name, from, to],
                    )?;
                    // Nothing is written into the table: the versions already on it hold what
                    // they held (their readers are not stale), so `to` alone moves.
                    if copied > 0 {
                        bump_own_generation(tx, name, to, &to_iso(now))?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// Records `intervals` (half-open UTC ranges) of snapshot `(name, fp)` with `status`,
    /// `updated_at = now`, in one transaction. A row with the same `(name, fp, start)` is
    /// replaced (its end, status and `updated_at`), so a failed interval later done reads as
    /// done. An empty slice writes nothing.
    ///
    /// # Errors
    /// [`StateError::Backend`] if a write fails; then none of `intervals` is recorded.
    fn mark_intervals(&self, name: &str, fp: &str, intervals: &[Interval], status: IntervalStatus, now: Millis) -> Result<(), StateError> {
        if intervals.is_empty() {
            return Ok(());
        }
        self.run(
            || format!("record {} interval(s) of `{name}` `{fp}` as {}", intervals.len(), status.as_str()),
            || {
                self.write(|tx| {
                    let mut stmt = tx.prepare_cached(UPSERT_INTERVAL_SQL)?;
                    let now = to_iso(now);
                    // The data a child reads changes when intervals are done, or when done ones
                    // are marked failed (a ledger reset: their rows are gone); a failed batch
                    // rolled back changes nothing.
                    let mut changed = status == IntervalStatus::Done;
                    if !changed {
                        let mut was_done =
                            tx.prepare_cached("SELECT count(*) FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND start_ts = ?3 AND status = 'done'")?;
                        for iv in intervals {
                            changed |= was_done.query_row(params![name, fp, to_iso(iv.start)], |r| r.get::<_, i64>(0))? > 0;
                        }
                    }
                    for iv in intervals {
                        stmt.execute(params![name, fp, to_iso(iv.start), to_iso(iv.end), status.as_str(), now])?;
                    }
                    if changed {
                        bump_data_generation(tx, name, fp, &now)?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// [`StateStore::mark_done_unless_moved`]: under the write lock (`BEGIN IMMEDIATE`), the
    /// version's data generation is read and compared with `seen`; the rows, the bump and the
    /// store's generation are written only when they are equal, in the same transaction.
    fn mark_done_unless_moved(&self, name: &str, fp: &str, intervals: &[Interval], seen: i64, now: Millis) -> Result<DoneMark, StateError> {
        if intervals.is_empty() {
            return Ok(DoneMark::Recorded { generation: seen });
        }
        self.run(
            || format!("record {} interval(s) of `{name}` `{fp}` as done", intervals.len()),
            || {
                // The store's generation moves only with the record: a refusal writes nothing.
                self.write_tx(false, |tx| {
                    let found: Option<i64> = tx
                        .prepare_cached("SELECT generation FROM data_versions WHERE name = ?1 AND fingerprint = ?2")?
                        .query_row(params![name, fp], |r| r.get(0))
                        .optional()?;
                    let found = found.unwrap_or(0);
                    if found != seen {
                        return Ok(DoneMark::Moved { found });
                    }
                    let now = to_iso(now);
                    let mut stmt = tx.prepare_cached(UPSERT_INTERVAL_SQL)?;
                    for iv in intervals {
                        stmt.execute(params![name, fp, to_iso(iv.start), to_iso(iv.end), IntervalStatus::Done.as_str(), now])?;
                    }
                    bump_data_generation(tx, name, fp, &now)?;
                    tx.prepare_cached("UPDATE meta SET generation = generation + 1")?.execute([])?;
                    Ok(DoneMark::Recorded { generation: seen + 1 })
                })
            },
        )
    }

    /// Replaces the whole pointer set of `env` with `pointers` (model name → fingerprint), each
    /// with the metadata the environment now serves for it (`metadata`: model name → JSON text,
    /// `{}` for a name it lacks), appends a journal row, removes the environment's promotion
    /// intent ([`StateStore::begin_promotion`]) and its intents ([`StateStore::record_intents`]),
    /// and records every version it stops serving as released at `now`, in one transaction. Every name in `require_snapshot` (all
    /// non-external models) must have a pointer whose `(name, fingerprint)` snapshot is stored;
    /// this is checked under the write lock, so a concurrent janitor cannot remove it in
    /// between. Pointers get `promoted_at = now`; the journal row gets `summary`, `applied_by`
    /// and `applied_at = now`.
    ///
    /// Returns the journal id of the new row.
    ///
    /// # Errors
    /// - [`StateError::MissingSnapshot`] naming the model and fingerprint when a required
    ///   snapshot is gone; [`StateError::MissingPointer`] when a required name has no pointer.
    /// - [`StateError::Backend`] if a read or write fails.
    ///
    /// In every error case nothing is changed: the old pointers and journal stay as they were.
    // Each argument is a separate part of the one promotion transaction (pointers, their
    // metadata, the snapshot check, the journal row); bundling them would only rename them.
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
    ) -> Result<i64, StateError> {
        self.run(
            || format!("promote environment `{env}`"),
            || {
                // Only `env`'s plan can change (pointers are per environment, the journal is
                // never planned from): drop its memo instead of invalidating every memo.
                self.write_tx(false, |tx| {
                    tx.prepare_cached("DELETE FROM plan_memo WHERE env = ?1")?.execute([env])?;
                    {
                        let mut exists = tx.prepare_cached("SELECT 1 FROM snapshots WHERE name = ?1 AND fingerprint = ?2")?;
                        for name in require_snapshot {
                            let Some(fp) = pointers.get(name) else {
                                return Err(Fault::Fail(StateError::MissingPointer { env: env.to_string(), name: name.clone() }));
                            };
                            if !exists.exists([name, fp])? {
                                return Err(Fault::Fail(StateError::MissingSnapshot { env: env.to_string(), name: name.clone(), fingerprint: fp.clone() }));
                            }
                        }
                    }
                    let at = to_iso(now);
                    // Every version this promotion stops serving is released now: the janitor's
                    // TTL counts from here (SPEC §4, the janitor's claim protocol).
                    {
                        let mut old = tx.prepare_cached("SELECT name, fingerprint FROM environments WHERE env = ?1")?;
                        let replaced: Vec<(String, String)> = old
                            .query_map([env], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                            .collect::<Result<Vec<_>, _>>()?
                            .into_iter()
                            .filter(|(name, fp)| pointers.get(name) != Some(fp))
                            .collect();
                        let mut release = tx.prepare_cached(
                            "INSERT INTO released (name, fingerprint, released_at) VALUES (?1, ?2, ?3) \
                             ON CONFLICT (name, fingerprint) DO UPDATE SET released_at = excluded.released_at",
                        )?;
                        for (name, fp) in &replaced {
                            release.execute(params![name, fp, at])?;
                        }
                    }
                    tx.prepare_cached("DELETE FROM intents WHERE env = ?1")?.execute([env])?;
                    // A promotion that creates the environment (anew, or again after the janitor
                    // dropped it) starts its run journal: ticks of runs refused while it did not
                    // exist are not its own.
                    tx.prepare_cached("DELETE FROM ticks WHERE env = ?1 AND NOT EXISTS (SELECT 1 FROM environments WHERE env = ?1)")?.execute([env])?;
                    tx.prepare_cached("DELETE FROM environments WHERE env = ?1")?.execute([env])?;
                    tx.prepare_cached("DELETE FROM promotions WHERE env = ?1")?.execute([env])?;
                    let mut insert =
                        tx.prepare_cached("INSERT INTO environments (env, name, fingerprint, promoted_at, metadata) VALUES (?1, ?2, ?3, ?4, ?5)")?;
                    for (name, fp) in pointers {
                        insert.execute(params![env, name, fp, at, metadata.get(name).map_or("{}", String::as_str)])?;
                    }
                    tx.prepare_cached("INSERT INTO plans (env, summary, applied_at, applied_by) VALUES (?1, ?2, ?3, ?4)")?.execute(params![
                        env,
                        journal_summary.to_string(),
                        at,
                        applied_by
                    ])?;
                    Ok(tx.last_insert_rowid())
                })
            },
        )
    }

    /// Records that a promotion of `env` is under way, BEFORE any of its views moves: the
    /// intended pointer set and the engine statements that restore the views as they are now.
    /// Removed by [`StateStore::promote`] (the promotion completed) or
    /// [`StateStore::abandon_promotion`] (its views were restored). Does not bump the
    /// generation: until the promotion commits, the environment serves what its pointers say.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the write fails, including when a promotion of `env` is
    /// already recorded (another process is promoting it, or one was interrupted and not yet
    /// undone); nothing is written.
    fn begin_promotion(&self, env: &str, pointers: &BTreeMap<String, String>, rollback: &[String], now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the promotion of environment `{env}` as under way"),
            || {
                let pointers = serde_json::to_string(pointers).map_err(|e| Fault::Corrupt(format!("cannot encode the pointers: {e}")))?;
                let rollback = serde_json::to_string(rollback).map_err(|e| Fault::Corrupt(format!("cannot encode the statements: {e}")))?;
                self.write_tx(false, |tx| {
                    tx.prepare_cached("INSERT INTO promotions (env, pointers, rollback, started_at) VALUES (?1, ?2, ?3, ?4)")?.execute(params![
                        env,
                        pointers,
                        rollback,
                        to_iso(now)
                    ])?;
                    Ok(())
                })
            },
        )
    }

    /// Every promotion recorded as under way ([`StateStore::begin_promotion`]) and not completed
    /// or abandoned since, by environment.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails; [`StateError::Corrupt`] if a row is not JSON.
    fn pending_promotions(&self) -> Result<Vec<PendingPromotion>, StateError> {
        self.run(
            || "read the promotions under way".to_string(),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT env, pointers, rollback, started_at FROM promotions ORDER BY env")?;
                let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?)))?;
                let mut out = Vec::new();
                for row in rows {
                    let (env, pointers, rollback, started_at) = row?;
                    let corrupt = |e: serde_json::Error| Fault::Corrupt(format!("the promotion of `{env}` under way is not JSON: {e}"));
                    let pointers = serde_json::from_str(&pointers).map_err(corrupt)?;
                    let rollback = serde_json::from_str(&rollback).map_err(corrupt)?;
                    out.push(PendingPromotion { env, pointers, rollback, started_at });
                }
                Ok(out)
            },
        )
    }

    /// Forgets the promotion of `env` under way, once its views are back to what the pointers
    /// say. Does nothing when none is recorded. Does not bump the generation.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the write fails.
    fn abandon_promotion(&self, env: &str) -> Result<(), StateError> {
        self.run(
            || format!("forget the interrupted promotion of environment `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached("DELETE FROM promotions WHERE env = ?1")?.execute([env])?;
                    Ok(())
                })
            },
        )
    }

    /// The journal of `env`, oldest first. Empty for an unknown environment.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails; [`StateError::Corrupt`] if a summary is not
    /// JSON.
    fn journal(&self, env: &str) -> Result<Vec<JournalEntry>, StateError> {
        self.run(
            || format!("read the journal of environment `{env}`"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT id, summary, applied_at, applied_by FROM plans WHERE env = ?1 ORDER BY id")?;
                let rows = stmt.query_map([env], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?)))?;
                let mut out = Vec::new();
                for row in rows {
                    let (id, summary, applied_at, applied_by) = row?;
                    let summary = serde_json::from_str(&summary).map_err(|e| Fault::Corrupt(format!("the summary of journal row {id} is not JSON: {e}")))?;
                    out.push(JournalEntry { id, env: env.to_string(), summary, applied_at, applied_by });
                }
                Ok(out)
            },
        )
    }

    fn invalidate_environment(&self, env: &str, by: &str, now: Millis) -> Result<Option<i64>, StateError> {
        self.run(
            || format!("invalidate environment `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    if !tx.prepare_cached("SELECT 1 FROM environments WHERE env = ?1")?.exists([env])? {
                        return Ok(None);
                    }
                    let summary = crate::lifecycle::invalidated_summary().to_string();
                    tx.prepare_cached("INSERT INTO plans (env, summary, applied_at, applied_by) VALUES (?1, ?2, ?3, ?4)")?.execute(params![
                        env,
                        summary,
                        to_iso(now),
                        by
                    ])?;
                    Ok(Some(tx.last_insert_rowid()))
                })
            },
        )
    }

    fn drop_environment(&self, env: &str, seen: i64, summary: &serde_json::Value, now: Millis) -> Result<bool, StateError> {
        self.run(
            || format!("drop the expired environment `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    let newest: i64 = tx.prepare_cached("SELECT coalesce(max(id), 0) FROM plans WHERE env = ?1")?.query_row([env], |r| r.get(0))?;
                    let promoting = tx.prepare_cached("SELECT 1 FROM promotions WHERE env = ?1")?.exists([env])?;
                    if newest != seen || promoting {
                        // Renewed (or being promoted) since it was judged: nothing is written.
                        return Ok(false);
                    }
                    let at = to_iso(now);
                    let served: Vec<(String, String)> = tx
                        .prepare_cached("SELECT name, fingerprint FROM environments WHERE env = ?1")?
                        .query_map([env], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut release = tx.prepare_cached(
                        "INSERT INTO released (name, fingerprint, released_at) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET released_at = excluded.released_at",
                    )?;
                    for (name, fp) in &served {
                        release.execute(params![name, fp, at])?;
                    }
                    tx.prepare_cached("DELETE FROM environments WHERE env = ?1")?.execute([env])?;
                    tx.prepare_cached("DELETE FROM intents WHERE env = ?1")?.execute([env])?;
                    tx.prepare_cached("DELETE FROM plan_memo WHERE env = ?1")?.execute([env])?;
                    // Its run journal goes with it: an apply creating it again starts a new one.
                    tx.prepare_cached("DELETE FROM ticks WHERE env = ?1")?.execute([env])?;
                    tx.prepare_cached("INSERT INTO plans (env, summary, applied_at, applied_by) VALUES (?1, ?2, ?3, '')")?.execute(params![
                        env,
                        summary.to_string(),
                        at
                    ])?;
                    tx.prepare_cached("UPDATE meta SET generation = generation + 1")?.execute([])?;
                    Ok(true)
                })
            },
        )
    }

    fn export_state(&self) -> Result<super::dump::StateDump, StateError> {
        use super::dump::{Col, StateDump, TABLES};
        use rusqlite::types::ValueRef;
        self.run(
            || "export the state store".to_string(),
            || {
                // One read transaction: every table as of one commit (WAL snapshot isolation).
                let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Deferred)?;
                let (store_id, generation, claims, engine_epoch, epoch_issued, ducklake_epoch): (String, i64, i64, i64, i64, i64) =
                    tx.query_row("SELECT store_id, generation, claims, engine_epoch, epoch_issued, ducklake_epoch FROM meta", [], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                    })?;
                let mut dump = StateDump { store_id, generation, claims, engine_epoch, epoch_issued, ducklake_epoch, ..StateDump::default() };
                for t in TABLES {
                    let mut stmt = tx.prepare(&format!("SELECT {} FROM {} ORDER BY {}", t.column_list(), t.name, t.order))?;
                    let mut rows = stmt.query([])?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next()? {
                        let mut cells = Vec::with_capacity(t.columns.len());
                        for (i, (column, col)) in t.columns.iter().enumerate() {
                            let v = match (row.get_ref(i)?, col) {
                                (ValueRef::Integer(n), Col::Int) => serde_json::Value::from(n),
                                (ValueRef::Text(b), Col::Text | Col::TextOrNull | Col::Instant | Col::Json) => {
                                    serde_json::Value::from(String::from_utf8_lossy(b).into_owned())
                                }
                                (ValueRef::Null, Col::TextOrNull) => serde_json::Value::Null,
                                (other, _) => {
                                    return Err(Fault::Corrupt(format!(
                                        "table `{}` column `{column}` holds {:?}, not the layout's type",
                                        t.name,
                                        other.data_type()
                                    )));
                                }
                            };
                            cells.push(v);
                        }
                        out.push(cells);
                    }
                    dump.tables.insert(t.name.to_string(), out);
                }
                tx.commit()?;
                Ok(dump)
            },
        )
    }

    fn import_state(
        &self,
        dump: &super::dump::StateDump,
        replace: bool,
        issued: i64,
        now: Millis,
        is_stale: &dyn Fn(&LeaseRecord) -> bool,
    ) -> Result<(), StateError> {
        use super::dump::{CLEARED_ON_IMPORT, TABLES};
        let store = self.location();
        self.run(
            || "import a state export".to_string(),
            || {
                self.write_tx(false, |tx| {
                    let unexpired: Vec<LeaseRecord> = tx
                        .prepare(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE expires_at > ?1 ORDER BY name"))?
                        .query_map([to_iso(now)], lease_row)?
                        .collect::<Result<_, _>>()?;
                    if let Some(held) = unexpired.iter().find(|l| !is_stale(l)) {
                        let detail = super::lease::import_refusal(held);
                        return Err(Fault::Fail(StateError::Import { store: store.clone(), detail }));
                    }
                    // Under the store's write lock (IMMEDIATE), as every raise of the counter:
                    // no writer issues an epoch between this read and the commit.
                    let found: i64 = tx.prepare("SELECT epoch_issued FROM meta")?.query_row([], |r| r.get(0))?;
                    if found != issued {
                        let detail = super::import_race_refusal(issued, found);
                        return Err(Fault::Fail(StateError::Import { store: store.clone(), detail }));
                    }
                    for t in TABLES {
                        if !replace && tx.prepare(&format!("SELECT 1 FROM {} LIMIT 1", t.name))?.exists([])? {
                            let detail =
                                format!("it is not empty (table `{}` has rows); import into a fresh store, or replace its content with `--force`", t.name);
                            return Err(Fault::Fail(StateError::Import { store: store.clone(), detail }));
                        }
                    }
                    for name in TABLES.iter().map(|t| t.name).chain(CLEARED_ON_IMPORT.iter().copied()) {
                        tx.execute(&format!("DELETE FROM {name}"), [])?;
                    }
                    for t in TABLES {
                        let marks: Vec<String> = (1..=t.columns.len()).map(|i| format!("?{i}")).collect();
                        let mut insert = tx.prepare(&format!("INSERT INTO {} ({}) VALUES ({})", t.name, t.column_list(), marks.join(", ")))?;
                        for row in dump.tables.get(t.name).map(Vec::as_slice).unwrap_or_default() {
                            let values: Vec<rusqlite::types::Value> = row
                                .iter()
                                .map(|v| match v {
                                    serde_json::Value::Null => rusqlite::types::Value::Null,
                                    serde_json::Value::Number(n) => n.as_i64().map_or(rusqlite::types::Value::Null, rusqlite::types::Value::Integer),
                                    serde_json::Value::String(s) => rusqlite::types::Value::Text(s.clone()),
                                    other => rusqlite::types::Value::Text(other.to_string()),
                                })
                                .collect();
                            insert.execute(rusqlite::params_from_iter(values))?;
                        }
                    }
                    tx.execute(
                        "UPDATE meta SET store_id = ?1, generation = max(generation, ?2) + 1, claims = max(claims, ?3), engine_epoch = ?4, \
                         epoch_issued = max(epoch_issued, ?4, ?5), ducklake_epoch = ?6",
                        params![dump.store_id, dump.generation, dump.claims, dump.engine_epoch, dump.epoch_issued, dump.ducklake_epoch],
                    )?;
                    Ok(())
                })
            },
        )
    }

    /// The cached canonical forms of those `keys` that are cached (key → canonical text), in
    /// one query. Unknown keys are absent from the result.
    ///
    /// # Errors
    /// [`StateError::Backend`] if the read fails.
    fn canon_cache_get(&self, keys: &[String]) -> Result<HashMap<String, String>, StateError> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        self.run(
            || format!("read the canonicalisation cache ({} keys)", keys.len()),
            || {
                // One statement for any number of keys: the keys travel as one JSON array.
                let keys = serde_json::to_string(keys).map_err(|e| Fault::Corrupt(format!("cannot encode the keys: {e}")))?;
                let mut stmt = self.conn.prepare_cached("SELECT key, canonical FROM canon_cache WHERE key IN (SELECT value FROM json_each(?1))")?;
                let rows = stmt.query_map([keys], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            },
        )
    }

    /// Stores `(key, canonical)` pairs in one transaction, replacing the text of a key already
    /// cached.
    ///
    /// # Errors
    /// [`StateError::Backend`] if a write fails; then none of `entries` is stored.
    fn canon_cache_put(&self, entries: &[(String, String)]) -> Result<(), StateError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.run(
            || format!("write the canonicalisation cache ({} entries)", entries.len()),
            || {
                self.write(|tx| {
                    let mut stmt = tx.prepare_cached(
                        "INSERT INTO canon_cache (key, canonical) VALUES (?1, ?2) \
                         ON CONFLICT (key) DO UPDATE SET canonical = excluded.canonical",
                    )?;
                    for (key, canonical) in entries {
                        stmt.execute([key, canonical])?;
                    }
                    Ok(())
                })
            },
        )
    }

    fn record_kept_copy(&self, env: &str, copy: &super::KeptCopy, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record that the apply of `{env}` copied the table of `{}`", copy.name),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached(
                        "INSERT INTO intents (env, name, fingerprint, physical, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                         ON CONFLICT (env, name, fingerprint) DO UPDATE SET physical = excluded.physical",
                    )?
                    .execute(params![env, copy.name, copy.mark(), copy.physical, to_iso(now)])?;
                    Ok(())
                })
            },
        )
    }

    fn kept_copies(&self, env: &str) -> Result<Vec<super::KeptCopy>, StateError> {
        self.run(
            || format!("read the tables the last apply of `{env}` copied"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT name, fingerprint, physical FROM intents WHERE env = ?1 ORDER BY name")?;
                let rows = stmt.query_map([env], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))?;
                let rows: Vec<(String, String, String)> = rows.collect::<Result<_, _>>()?;
                Ok(rows.into_iter().filter_map(|(name, mark, physical)| super::KeptCopy::from_mark(name, &mark, physical)).collect())
            },
        )
    }

    fn record_intents(&self, env: &str, intents: &[Intent], now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record what the apply of environment `{env}` relies on"),
            || {
                // Intents are not data a plan reads: the generation stays.
                self.write_tx(false, |tx| {
                    {
                        let mut condemned = tx.prepare_cached("SELECT 1 FROM condemned WHERE physical = ?1")?;
                        let mut exists = tx.prepare_cached("SELECT 1 FROM snapshots WHERE name = ?1 AND fingerprint = ?2")?;
                        for i in intents {
                            let why = if !i.physical.is_empty() && condemned.exists([&i.physical])? {
                                Some(format!("its storage {} is claimed", i.physical))
                            } else if i.must_exist && !exists.exists([&i.name, &i.fingerprint])? {
                                Some("its snapshot is gone".to_string())
                            } else {
                                None
                            };
                            if let Some(why) = why {
                                return Err(Fault::Fail(StateError::Reclaimed {
                                    store: self.location(),
                                    name: i.name.clone(),
                                    fingerprint: i.fingerprint.clone(),
                                    why,
                                }));
                            }
                        }
                    }
                    tx.prepare_cached("DELETE FROM intents WHERE env = ?1")?.execute([env])?;
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO intents (env, name, fingerprint, physical, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                         ON CONFLICT (env, name, fingerprint) DO UPDATE SET physical = excluded.physical",
                    )?;
                    let at = to_iso(now);
                    for i in intents {
                        insert.execute(params![env, i.name, i.fingerprint, i.physical, at])?;
                    }
                    Ok(())
                })
            },
        )
    }

    fn clear_intents(&self, env: &str) -> Result<(), StateError> {
        self.run(
            || format!("forget the intents of environment `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached("DELETE FROM intents WHERE env = ?1")?.execute([env])?;
                    Ok(())
                })
            },
        )
    }

    fn janitor_inventory(&self) -> Result<JanitorInventory, StateError> {
        self.run(
            || "read what the janitor decides from".to_string(),
            || {
                // One read transaction: every table seen at the same instant.
                let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Deferred)?;
                let inv = Self::inventory_on(&tx)?;
                tx.commit()?;
                Ok(inv)
            },
        )
    }

    fn janitor_claim(&self, decide: &mut dyn FnMut(&JanitorInventory) -> Vec<Claim>, now: Millis) -> Result<Vec<Claim>, StateError> {
        self.run(
            || "claim unreachable storage for the janitor".to_string(),
            || {
                self.write_tx(false, |tx| {
                    let inv = Self::inventory_on(tx)?;
                    let claims = decide(&inv);
                    if claims.is_empty() {
                        return Ok(claims);
                    }
                    let at = to_iso(now);
                    for c in &claims {
                        for (name, fp) in &c.versions {
                            for table in ["snapshots", "intervals", "released", "pending_rebuilds", "data_versions", "audit_passes"] {
                                tx.prepare_cached(&format!("DELETE FROM {table} WHERE name = ?1 AND fingerprint = ?2"))?.execute([name, fp])?;
                            }
                        }
                        if let Some(s) = &c.storage {
                            tx.prepare_cached(
                                "INSERT INTO condemned (physical, name, fingerprint, kind, detail, claimed_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                                 ON CONFLICT (physical) DO NOTHING",
                            )?
                            .execute(params![s.physical, s.name, s.fingerprint, s.kind, s.detail.to_string(), at])?;
                        }
                    }
                    // The plan memo's key does not see these deletions: forget every memo. A session's
                    // kept state reads are keyed by `plan_state`, which counts claims.
                    tx.prepare_cached("DELETE FROM plan_memo")?.execute([])?;
                    tx.prepare_cached("UPDATE meta SET claims = claims + 1")?.execute([])?;
                    Ok(claims)
                })
            },
        )
    }

    fn data_versions(&self, keys: &[(String, String)]) -> Result<HashMap<(String, String), DataVersion>, StateError> {
        self.run(
            || format!("read the data generations of {} version(s)", keys.len()),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT generation, built_from FROM data_versions WHERE name = ?1 AND fingerprint = ?2")?;
                let mut out = HashMap::new();
                for (name, fp) in keys {
                    let row = stmt.query_row(params![name, fp], |r| Ok(DataVersion { generation: r.get(0)?, built_from: r.get(1)? })).optional()?;
                    if let Some(row) = row {
                        out.insert((name.clone(), fp.clone()), row);
                    }
                }
                Ok(out)
            },
        )
    }

    fn audit_pass(&self, name: &str, fp: &str) -> Result<Option<AuditPass>, StateError> {
        self.run(
            || format!("read the audits passed on `{name}` `{fp}`"),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT digest, generation FROM audit_passes WHERE name = ?1 AND fingerprint = ?2")?;
                Ok(stmt.query_row(params![name, fp], |r| Ok(AuditPass { digest: r.get(0)?, generation: r.get(1)? })).optional()?)
            },
        )
    }

    fn record_audit_pass(&self, name: &str, fp: &str, pass: &AuditPass, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the audits passed on `{name}` `{fp}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached(
                        "INSERT INTO audit_passes (name, fingerprint, digest, generation, passed_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET digest = excluded.digest, generation = excluded.generation, passed_at = excluded.passed_at",
                    )?
                    .execute(params![name, fp, pass.digest, pass.generation, to_iso(now)])?;
                    Ok(())
                })
            },
        )
    }

    fn record_build(&self, rec: &SnapshotRecord, built_from: Option<&str>, sharers: &[(String, String, String)], now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the build of `{}` `{}`", rec.name, rec.fingerprint),
            || {
                self.write(|tx| {
                    insert_snapshot(tx, rec)?;
                    let at = to_iso(now);
                    bump_data_generation(tx, &rec.name, &rec.fingerprint, &at)?;
                    // Every other version on the same table whose record this build made untrue
                    // (not one of `sharers`, set below) gets a record no sources match: the
                    // table now holds what this version's sources hold.
                    if !rec.physical.is_empty() {
                        tx.prepare_cached(UNTRUE_SHARERS_SQL)?.execute(params![rec.name, rec.fingerprint, rec.physical])?;
                    }
                    let mut set = tx.prepare_cached("UPDATE data_versions SET built_from = ?3 WHERE name = ?1 AND fingerprint = ?2")?;
                    set.execute(params![rec.name, rec.fingerprint, built_from])?;
                    for (name, fp, from) in sharers {
                        set.execute(params![name, fp, from])?;
                    }
                    tx.prepare_cached("DELETE FROM pending_rebuilds WHERE name = ?1 AND fingerprint = ?2")?.execute(params![rec.name, rec.fingerprint])?;
                    Ok(())
                })
            },
        )
    }

    fn record_reuse(&self, rec: &SnapshotRecord, built_from: &str, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record `{}` `{}` inheriting `{}`", rec.name, rec.fingerprint, rec.physical),
            || {
                self.write(|tx| {
                    insert_snapshot(tx, rec)?;
                    tx.prepare_cached(
                        "INSERT INTO data_versions (name, fingerprint, generation, built_from, updated_at) VALUES (?1, ?2, 0, ?3, ?4) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET built_from = excluded.built_from, updated_at = excluded.updated_at",
                    )?
                    .execute(params![rec.name, rec.fingerprint, built_from, to_iso(now)])?;
                    Ok(())
                })
            },
        )
    }

    fn begin_data_write(&self, name: &str, fp: &str, now: Millis) -> Result<DataWrite, StateError> {
        self.run(
            || format!("mark a write of the data of `{name}` `{fp}`"),
            || {
                self.write(|tx| {
                    bump_data_generation(tx, name, fp, &to_iso(now))?;
                    let mut stmt = tx.prepare_cached(MARKED_SQL)?;
                    let marked = stmt.query_map(params![name, fp], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<Vec<_>, _>>()?;
                    Ok(DataWrite { version: (name.to_string(), fp.to_string()), marked })
                })
            },
        )
    }

    fn end_data_write(&self, write: &DataWrite, changed: bool, now: Millis) -> Result<(), StateError> {
        let (name, fp) = &write.version;
        self.run(
            || format!("record the end of a write of the data of `{name}` `{fp}`"),
            || {
                self.write(|tx| {
                    if changed {
                        return bump_data_generation(tx, name, fp, &to_iso(now));
                    }
                    // Only a mark still in place is taken back: a generation moved since by
                    // anything else stays moved.
                    let mut stmt = tx.prepare_cached(
                        "UPDATE data_versions SET generation = generation - 1, updated_at = ?4 WHERE name = ?1 AND fingerprint = ?2 AND generation = ?3",
                    )?;
                    for (n, f, g) in &write.marked {
                        stmt.execute(params![n, f, g, to_iso(now)])?;
                    }
                    Ok(())
                })
            },
        )
    }

    fn release_condemned(&self, physical: &str) -> Result<(), StateError> {
        self.run(
            || format!("forget the claim on `{physical}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached("DELETE FROM condemned WHERE physical = ?1")?.execute([physical])?;
                    // A dropped orphan's sighting goes with its claim.
                    tx.prepare_cached("DELETE FROM orphans_seen WHERE physical = ?1")?.execute([physical])?;
                    Ok(())
                })
            },
        )
    }

    fn store_id(&self) -> Result<String, StateError> {
        self.run(
            || "read the store's identity".to_string(),
            || {
                let id: String = self.conn.prepare_cached("SELECT store_id FROM meta")?.query_row([], |r| r.get(0))?;
                if id.is_empty() {
                    return Err(Fault::Corrupt("`meta.store_id` is empty (the store has no identity)".to_string()));
                }
                Ok(id)
            },
        )
    }

    fn engine_epoch(&self) -> Result<i64, StateError> {
        self.run(|| "read the engine epoch".to_string(), || Ok(self.conn.prepare_cached("SELECT engine_epoch FROM meta")?.query_row([], |r| r.get(0))?))
    }

    fn ducklake_epoch(&self) -> Result<i64, StateError> {
        self.run(|| "read the DuckLake epoch".to_string(), || Ok(self.conn.prepare_cached("SELECT ducklake_epoch FROM meta")?.query_row([], |r| r.get(0))?))
    }

    fn epoch_issued(&self) -> Result<i64, StateError> {
        self.run(|| "read the issued engine epoch".to_string(), || Ok(self.conn.prepare_cached("SELECT epoch_issued FROM meta")?.query_row([], |r| r.get(0))?))
    }

    fn issue_epoch(&self, found: i64) -> Result<super::IssuedEpoch, StateError> {
        self.run(
            || "issue an engine epoch".to_string(),
            || {
                // One IMMEDIATE transaction: the read and the raise under the store's write lock.
                self.write_tx(false, |tx| {
                    let before: i64 = tx.prepare_cached("SELECT epoch_issued FROM meta")?.query_row([], |r| r.get(0))?;
                    let epoch: i64 = tx
                        .prepare_cached("UPDATE meta SET epoch_issued = max(epoch_issued, engine_epoch, ?1) + 1 RETURNING epoch_issued")?
                        .query_row([found], |r| r.get(0))?;
                    Ok(super::IssuedEpoch { epoch, before })
                })
            },
        )
    }

    fn record_engine_epoch(&self, epoch: i64, ducklake: Option<i64>) -> Result<(), StateError> {
        self.run(
            || format!("record the engine epoch {epoch}"),
            || {
                self.write_tx(false, |tx| {
                    tx.prepare_cached(
                        "UPDATE meta SET engine_epoch = max(engine_epoch, ?1), epoch_issued = max(epoch_issued, ?1), \
                         ducklake_epoch = max(ducklake_epoch, coalesce(?2, 0))",
                    )?
                    .execute(params![epoch, ducklake])?;
                    Ok(())
                })
            },
        )
    }

    fn record_orphans_seen(&self, present: &[String], now: Millis) -> Result<BTreeMap<String, String>, StateError> {
        self.run(
            || format!("record the {} orphan(s) the janitor sees", present.len()),
            || {
                self.write_tx(false, |tx| {
                    let at = to_iso(now);
                    let mut seen = BTreeMap::new();
                    {
                        let mut rows = tx.prepare_cached("SELECT physical, first_seen FROM orphans_seen")?;
                        let rows = rows.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
                        for row in rows {
                            let (physical, first) = row?;
                            seen.insert(physical, first);
                        }
                    }
                    let wanted: BTreeSet<&String> = present.iter().collect();
                    for gone in seen.keys().filter(|p| !wanted.contains(p)) {
                        tx.prepare_cached("DELETE FROM orphans_seen WHERE physical = ?1")?.execute([gone])?;
                    }
                    let mut out = BTreeMap::new();
                    for p in present {
                        let first = match seen.get(p) {
                            Some(f) => f.clone(),
                            None => {
                                tx.prepare_cached("INSERT INTO orphans_seen (physical, first_seen) VALUES (?1, ?2)")?.execute(params![p, at])?;
                                at.clone()
                            }
                        };
                        out.insert(p.clone(), first);
                    }
                    Ok(out)
                })
            },
        )
    }

    fn orphans_seen(&self) -> Result<BTreeMap<String, String>, StateError> {
        self.run(
            || "read the orphans the janitor saw".to_string(),
            || {
                let mut stmt = self.conn.prepare_cached("SELECT physical, first_seen FROM orphans_seen")?;
                let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
                let mut out = BTreeMap::new();
                for row in rows {
                    let (physical, first) = row?;
                    out.insert(physical, first);
                }
                Ok(out)
            },
        )
    }

    fn restate(&self, env: &str, targets: &[RestateTarget]) -> Result<Vec<Restated>, StateError> {
        self.run(
            || format!("restate {} version(s) of environment `{env}`", targets.len()),
            || {
                self.write(|tx| {
                    let mut pointer = tx.prepare_cached("SELECT fingerprint FROM environments WHERE env = ?1 AND name = ?2")?;
                    let mut clear = tx.prepare_cached(
                        "DELETE FROM intervals WHERE name = ?1 AND fingerprint = ?2 AND status = 'done' AND start_ts >= ?3 AND start_ts < ?4",
                    )?;
                    let mut relied_on = tx.prepare_cached("SELECT 1 FROM intents WHERE name = ?1 AND fingerprint = ?2 AND env <> ?3")?;
                    let mut cleared = Vec::with_capacity(targets.len());
                    for t in targets {
                        let served: Option<String> = pointer.query_row(params![env, t.name], |r| r.get(0)).optional()?;
                        if served.as_deref() != Some(t.fingerprint.as_str()) {
                            // Dropping the transaction rolls back every range cleared so far.
                            return Err(Fault::Fail(StateError::PointerMoved { store: self.location(), env: env.to_string(), name: t.name.clone() }));
                        }
                        let n = clear.execute(params![t.name, t.fingerprint, to_iso(t.from), to_iso(t.to)])?;
                        let mut fenced = false;
                        if n > 0 {
                            bump_data_generation(tx, &t.name, &t.fingerprint, &to_iso(crate::core::interval::now_millis()))?;
                        } else if relied_on.exists(params![t.name, t.fingerprint, env])? {
                            // Nothing done in the range, but an apply or run of another environment
                            // may have a batch of the range under way over the rows as they were:
                            // its done record is refused (`mark_done_unless_moved`). No data
                            // changed: the table's other versions keep theirs.
                            bump_own_generation(tx, &t.name, &t.fingerprint, &to_iso(crate::core::interval::now_millis()))?;
                            fenced = true;
                        }
                        cleared.push(Restated { cleared: n, fenced });
                    }
                    Ok(cleared)
                })
            },
        )
    }
}

/// Writes snapshot `rec` unless `(name, fingerprint)` is stored (the first payload is kept).
fn insert_snapshot(tx: &Transaction<'_>, rec: &SnapshotRecord) -> Result<(), Fault> {
    tx.prepare_cached(
        "INSERT INTO snapshots \
         (name, fingerprint, fingerprint_version, kind, physical, canonical, rendered_sql, metadata, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
         ON CONFLICT (name, fingerprint) DO NOTHING",
    )?
    .execute(params![
        rec.name,
        rec.fingerprint,
        rec.fingerprint_version,
        rec.kind,
        rec.physical,
        rec.canonical,
        rec.rendered_sql,
        rec.metadata.to_string(),
        rec.created_at,
    ])?;
    Ok(())
}

/// Records one ledger row `(?1 name, ?2 fingerprint, ?3 start, ?4 end, ?5 status, ?6 at)`; a
/// row with the same start is replaced (its end, status and time), so a failed interval later
/// done reads as done.
const UPSERT_INTERVAL_SQL: &str = "INSERT INTO intervals (name, fingerprint, start_ts, end_ts, status, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT (name, fingerprint, start_ts) DO UPDATE SET \
     end_ts = excluded.end_ts, status = excluded.status, updated_at = excluded.updated_at";

/// Bumps the data generation of `(name, fp)` (a row is created at 1 when there is none), and of
/// every other version whose snapshot names the same non-empty physical relation (data lives per
/// relation: a version reusing another's table reads what the other's writes put there), inside
/// the caller's transaction: the transaction that changes the version's data state.
fn bump_data_generation(tx: &Transaction<'_>, name: &str, fp: &str, at: &str) -> Result<(), Fault> {
    bump_own_generation(tx, name, fp, at)?;
    tx.prepare_cached(BUMP_SHARERS_SQL)?.execute(params![name, fp, at])?;
    Ok(())
}

/// Bumps the data generation of `(name, fp)` alone (a row is created at 1 when there is none),
/// inside the caller's transaction: for a change of its own ledger that writes nothing into its
/// table (inheriting another version's done intervals, [`StateStore::inherit_done`]), which
/// leaves what every other version on that table holds, and so their generations, as they were.
fn bump_own_generation(tx: &Transaction<'_>, name: &str, fp: &str, at: &str) -> Result<(), Fault> {
    tx.prepare_cached(
        "INSERT INTO data_versions (name, fingerprint, generation, updated_at) VALUES (?1, ?2, 1, ?3) \
         ON CONFLICT (name, fingerprint) DO UPDATE SET generation = generation + 1, updated_at = excluded.updated_at",
    )?
    .execute(params![name, fp, at])?;
    Ok(())
}

/// Bumps the generation of every other version on the table of `(?1, ?2)` (at `?3`); found by
/// `snapshots_by_physical`, never by a scan of the snapshots.
const BUMP_SHARERS_SQL: &str = "INSERT INTO data_versions (name, fingerprint, generation, updated_at) \
     SELECT s.name, s.fingerprint, 1, ?3 FROM snapshots s \
     WHERE s.physical <> '' AND s.physical = (SELECT o.physical FROM snapshots o WHERE o.name = ?1 AND o.fingerprint = ?2) \
     AND NOT (s.name = ?1 AND s.fingerprint = ?2) \
     ON CONFLICT (name, fingerprint) DO UPDATE SET generation = generation + 1, updated_at = excluded.updated_at";

/// Makes untrue the `full` build record of every version on the table `?3` but `(?1, ?2)`.
const UNTRUE_SHARERS_SQL: &str = "UPDATE data_versions SET built_from = '\"rebuilt for another version\"' \
     WHERE built_from IS NOT NULL AND NOT (name = ?1 AND fingerprint = ?2) \
     AND (name, fingerprint) IN (SELECT s.name, s.fingerprint FROM snapshots s WHERE s.physical = ?3)";

/// The generations of `(?1, ?2)` and of every version on its table, after a write was marked.
const MARKED_SQL: &str = "SELECT d.name, d.fingerprint, d.generation FROM data_versions d WHERE d.name = ?1 AND d.fingerprint = ?2 \
     UNION SELECT d.name, d.fingerprint, d.generation FROM snapshots s \
     JOIN data_versions d ON d.name = s.name AND d.fingerprint = s.fingerprint \
     WHERE s.physical <> '' AND s.physical = (SELECT o.physical FROM snapshots o WHERE o.name = ?1 AND o.fingerprint = ?2) \
     ORDER BY 1, 2";

impl SqliteStore {
    /// The janitor's inventory, read on `conn` (a plain connection or a transaction).
    fn inventory_on(conn: &Connection) -> Result<JanitorInventory, Fault> {
        let mut inv = JanitorInventory::default();
        {
            let mut stmt = conn.prepare_cached(
                "SELECT s.name, s.fingerprint, s.kind, s.physical, s.created_at, r.released_at FROM snapshots s \
                 LEFT JOIN released r ON r.name = s.name AND r.fingerprint = s.fingerprint ORDER BY s.name, s.fingerprint",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(VersionRow { name: r.get(0)?, fingerprint: r.get(1)?, kind: r.get(2)?, physical: r.get(3)?, created_at: r.get(4)?, released_at: r.get(5)? })
            })?;
            inv.versions = rows.collect::<Result<_, _>>()?;
        }
        {
            let mut stmt = conn.prepare_cached("SELECT name, fingerprint FROM environments")?;
            inv.served = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        }
        {
            let mut stmt = conn.prepare_cached("SELECT env, pointers FROM promotions")?;
            let rows: Vec<(String, String)> = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
            for (env, pointers) in rows {
                let pointers: BTreeMap<String, String> =
                    serde_json::from_str(&pointers).map_err(|e| Fault::Corrupt(format!("the promotion of `{env}` under way is not JSON: {e}")))?;
                inv.pending.extend(pointers);
            }
        }
        {
            let mut stmt = conn.prepare_cached("SELECT name, fingerprint, physical FROM intents")?;
            let rows: Vec<(String, String, String)> = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
            for (name, fp, physical) in rows {
                if !physical.is_empty() {
                    inv.intent_physicals.insert(physical);
                }
                inv.intents.insert((name, fp));
            }
        }
        {
            let mut stmt = conn.prepare_cached("SELECT physical, name, fingerprint, kind, detail, claimed_at FROM condemned ORDER BY physical")?;
            let rows: Vec<(String, String, String, String, String, String)> =
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?.collect::<Result<_, _>>()?;
            for (physical, name, fingerprint, kind, detail, claimed_at) in rows {
                let detail =
                    serde_json::from_str(&detail).map_err(|e| Fault::Corrupt(format!("the claim of `{physical}` has a detail that is not JSON: {e}")))?;
                inv.condemned.push(Condemned { physical, name, fingerprint, kind, detail, claimed_at });
            }
        }
        Ok(inv)
    }
}

/// The layout version stored in the database, or `None` for a fresh database (no tables at
/// all). A database with tables but no (or an empty) `meta` is version 0.
fn stored_version(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if tables.is_empty() {
        return Ok(None);
    }
    if !tables.iter().any(|t| t == "meta") {
        return Ok(Some(0));
    }
    conn.query_row("SELECT COALESCE(MAX(version), 0) FROM meta", [], |r| r.get(0)).map(Some)
}

/// Column `i` of `row` as text, without copying.
fn text<'r>(row: &'r Row<'_>, i: usize) -> Result<&'r str, Fault> {
    row.get_ref(i)?.as_str().map_err(|e| Fault::Corrupt(format!("column {i} of an interval row is not text: {e}")))
}

/// Parses a stored ISO timestamp back to epoch ms.
fn instant(s: &str, owner: impl FnOnce() -> String) -> Result<Millis, Fault> {
    parse_instant(s).map_err(|e| Fault::Corrupt(format!("an interval start of {} is not a timestamp: {e}", owner())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DAY: Millis = 86_400_000;

    fn fp(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn t(s: &str) -> Millis {
        parse_instant(s).unwrap()
    }

    fn rec(name: &str, fingerprint: &str) -> SnapshotRecord {
        SnapshotRecord {
            name: name.to_string(),
            fingerprint: fingerprint.to_string(),
            fingerprint_version: 2,
            kind: "incremental_by_time_range".to_string(),
            physical: format!("\"_efmesh\".\"{}__{fingerprint}\"", name.replace('.', "__")),
            canonical: Some("SELECT 1 AS \"x\"".to_string()),
            rendered_sql: "SELECT 1 AS x WHERE t >= $start AND t < $end".to_string(),
            metadata: json!({"schema": [["x", "INTEGER"]], "description": "d", "kind": {"grain": "day"}}),
            created_at: to_iso(t("2026-01-01T10:00:00.123Z")),
        }
    }

    fn days(from: &str, n: i64) -> Vec<Interval> {
        let s = t(from);
        (0..n).map(|i| Interval::new(s + i * DAY, s + (i + 1) * DAY)).collect()
    }

    fn temp_store() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("efmesh.state.sqlite");
        (dir, path)
    }

    fn count(store: &SqliteStore, sql: &str) -> i64 {
        store.conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn snapshot_round_trip() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(store.snapshot("a.b", &fp('1')).unwrap(), None);
        let mut external = rec("src.raw", &fp('2'));
        external.physical = String::new();
        external.canonical = None;
        external.kind = "external".to_string();
        store.put_snapshot(&rec("a.b", &fp('1'))).unwrap();
        store.put_snapshot(&external).unwrap();
        assert_eq!(store.snapshot("a.b", &fp('1')).unwrap(), Some(rec("a.b", &fp('1'))));
        assert_eq!(store.snapshot("src.raw", &fp('2')).unwrap(), Some(external));
        assert_eq!(store.snapshot("a.b", &fp('2')).unwrap(), None);
        let keys = store.snapshot_keys().unwrap();
        assert_eq!(keys, HashSet::from([("a.b".to_string(), fp('1')), ("src.raw".to_string(), fp('2'))]));
    }

    #[test]
    fn metadata_key_order_survives() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut r = rec("a.b", &fp('1'));
        r.metadata = json!({"zeta": 1, "alpha": [1, 2], "mid": {"y": null, "b": "s"}});
        store.put_snapshot(&r).unwrap();
        let back = store.snapshot("a.b", &fp('1')).unwrap().unwrap();
        assert_eq!(back.metadata.to_string(), r.metadata.to_string());
    }

    #[test]
    fn put_snapshot_is_idempotent_and_keeps_the_first_payload() {
        let store = SqliteStore::open_in_memory().unwrap();
        let first = rec("a.b", &fp('1'));
        store.put_snapshot(&first).unwrap();
        store.put_snapshot(&first).unwrap();
        let mut second = first.clone();
        second.rendered_sql = "SELECT 2".to_string();
        second.created_at = to_iso(t("2027-01-01"));
        store.put_snapshot(&second).unwrap();
        assert_eq!(store.snapshot("a.b", &fp('1')).unwrap(), Some(first));
        assert_eq!(count(&store, "SELECT count(*) FROM snapshots"), 1);
    }

    #[test]
    fn promote_replaces_the_whole_pointer_set_and_journals() {
        let store = SqliteStore::open_in_memory().unwrap();
        for (n, c) in [("a.one", '1'), ("a.two", '2'), ("a.one", '3'), ("a.three", '4')] {
            store.put_snapshot(&rec(n, &fp(c))).unwrap();
        }
        assert!(store.environments().unwrap().is_empty());
        assert!(store.env_pointers("dev").unwrap().is_empty());

        let first: BTreeMap<_, _> = [("a.one".to_string(), fp('1')), ("a.two".to_string(), fp('2'))].into();
        let req: BTreeSet<_> = first.keys().cloned().collect();
        let id1 = store.promote("dev", &first, &BTreeMap::new(), &req, &json!({"n": 1}), "alice", t("2026-01-02")).unwrap();
        assert_eq!(store.env_pointers("dev").unwrap(), first);

        // a.two is dropped, a.one changes, a.three is new, and an external needs no snapshot.
        let second: BTreeMap<_, _> = [("a.one".to_string(), fp('3')), ("a.three".to_string(), fp('4')), ("src.raw".to_string(), fp('9'))].into();
        let req: BTreeSet<_> = ["a.one".to_string(), "a.three".to_string()].into();
        let id2 = store.promote("dev", &second, &BTreeMap::new(), &req, &json!({"n": 2}), "bob", t("2026-01-03T04:05:06.007Z")).unwrap();
        assert!(id2 > id1);
        assert_eq!(store.env_pointers("dev").unwrap(), second);
        assert_eq!(count(&store, "SELECT count(*) FROM environments WHERE env = 'dev' AND promoted_at = '2026-01-03T04:05:06.007Z'"), 3);

        // Another environment is independent, but a plan of `dev` reads its pointers (rebuild
        // marks, shared tables): the key of dev's kept plan state moves with prod's promotion.
        let dev_key = store.plan_state("dev").unwrap();
        let id3 = store.promote("prod", &first, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", t("2026-01-04")).unwrap();
        assert_ne!(store.plan_state("dev").unwrap(), dev_key, "another environment's promotion ends dev's kept plan state");
        assert_eq!(store.env_pointers("dev").unwrap(), second);
        assert_eq!(store.env_pointers("prod").unwrap(), first);
        assert_eq!(store.environments().unwrap(), vec!["dev".to_string(), "prod".to_string()]);

        let journal = store.journal("dev").unwrap();
        assert_eq!(
            journal,
            vec![
                JournalEntry {
                    id: id1,
                    env: "dev".into(),
                    summary: json!({"n": 1}),
                    applied_at: "2026-01-02T00:00:00.000Z".into(),
                    applied_by: "alice".into(),
                },
                JournalEntry { id: id2, env: "dev".into(), summary: json!({"n": 2}), applied_at: "2026-01-03T04:05:06.007Z".into(), applied_by: "bob".into() },
            ]
        );
        assert_eq!(store.journal("prod").unwrap().iter().map(|j| j.id).collect::<Vec<_>>(), vec![id3]);
        assert!(store.journal("nope").unwrap().is_empty());
    }

    #[test]
    fn promote_with_a_missing_snapshot_changes_nothing() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.put_snapshot(&rec("a.one", &fp('1'))).unwrap();
        let good: BTreeMap<_, _> = [("a.one".to_string(), fp('1'))].into();
        let req: BTreeSet<_> = good.keys().cloned().collect();
        store.promote("dev", &good, &BTreeMap::new(), &req, &json!({}), "ci", t("2026-01-02")).unwrap();
        let journal = store.journal("dev").unwrap();

        let bad: BTreeMap<_, _> = [("a.one".to_string(), fp('1')), ("a.gone".to_string(), fp('7'))].into();
        let req: BTreeSet<_> = bad.keys().cloned().collect();
        let err = store.promote("dev", &bad, &BTreeMap::new(), &req, &json!({}), "ci", t("2026-01-03")).unwrap_err();
        assert!(err.is_missing_snapshot(), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("`a.gone`") && msg.contains(&fp('7')) && msg.contains("disappeared"), "{msg}");
        assert!(msg.contains("re-run `efmesh apply`") && !msg.ends_with('.'), "{msg}");
        assert_eq!(store.env_pointers("dev").unwrap(), good);
        assert_eq!(store.journal("dev").unwrap(), journal);

        // A required model with no pointer at all is refused the same way.
        let req: BTreeSet<_> = ["a.one".to_string(), "a.other".to_string()].into();
        let err = store.promote("dev", &good, &BTreeMap::new(), &req, &json!({}), "ci", t("2026-01-03")).unwrap_err();
        assert!(matches!(&err, StateError::MissingPointer { name, .. } if name == "a.other"), "{err:?}");
        assert_eq!(store.env_pointers("dev").unwrap(), good);
        assert_eq!(store.journal("dev").unwrap(), journal);
    }

    #[test]
    fn promote_failing_mid_way_rolls_back() {
        let store = SqliteStore::open_in_memory().unwrap();
        let old: BTreeMap<_, _> = [("a.one".to_string(), fp('1'))].into();
        store.promote("dev", &old, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "ci", t("2026-01-02")).unwrap();
        // Make the last step (the journal insert) fail after the pointers were rewritten.
        store.conn.execute_batch("CREATE TRIGGER boom BEFORE INSERT ON plans WHEN NEW.applied_by = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END;").unwrap();
        let new: BTreeMap<_, _> = [("a.two".to_string(), fp('2'))].into();
        let err = store.promote("dev", &new, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "boom", t("2026-01-03")).unwrap_err();
        assert!(matches!(err, StateError::Backend { .. }), "{err:?}");
        assert_eq!(err.to_string(), "state store `:memory:`: cannot promote environment `dev`");
        assert_eq!(store.env_pointers("dev").unwrap(), old);
        assert_eq!(store.journal("dev").unwrap().len(), 1);
        // And the connection is usable afterwards (the transaction was rolled back).
        store.promote("dev", &new, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "ci", t("2026-01-03")).unwrap();
        assert_eq!(store.env_pointers("dev").unwrap(), new);
    }

    #[test]
    fn intervals_upsert_failed_then_done() {
        let store = SqliteStore::open_in_memory().unwrap();
        let (name, f) = ("a.b", fp('1'));
        let ivs = days("2026-01-01", 3);
        store.mark_intervals(name, &f, &ivs, IntervalStatus::Failed, t("2026-01-05")).unwrap();
        assert!(store.done_intervals(name, &f).unwrap().is_empty());
        assert!(store.all_done_intervals().unwrap().is_empty());

        store.mark_intervals(name, &f, &ivs[1..], IntervalStatus::Done, t("2026-01-06T01:02:03.004Z")).unwrap();
        let done: BTreeSet<_> = ivs[1..].iter().map(|i| i.start).collect();
        assert_eq!(store.done_intervals(name, &f).unwrap(), done);
        assert_eq!(count(&store, "SELECT count(*) FROM intervals"), 3);
        assert_eq!(count(&store, "SELECT count(*) FROM intervals WHERE status = 'failed'"), 1);
        let (end, updated): (String, String) = store
            .conn
            .query_row("SELECT end_ts, updated_at FROM intervals WHERE start_ts = '2026-01-03T00:00:00.000Z'", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!((end.as_str(), updated.as_str()), ("2026-01-04T00:00:00.000Z", "2026-01-06T01:02:03.004Z"));

        // Done can go back to failed (e.g. a restated interval that failed again).
        store.mark_intervals(name, &f, &ivs[2..], IntervalStatus::Failed, t("2026-01-07")).unwrap();
        assert_eq!(store.done_intervals(name, &f).unwrap(), BTreeSet::from([ivs[1].start]));
        assert_eq!(store.all_done_intervals().unwrap(), HashMap::from([((name.to_string(), f.clone()), BTreeSet::from([ivs[1].start]))]));
        store.mark_intervals(name, &f, &[], IntervalStatus::Done, 0).unwrap();
    }

    #[test]
    fn ledger_is_keyed_by_name_and_fingerprint() {
        let store = SqliteStore::open_in_memory().unwrap();
        let same = fp('5');
        store.mark_intervals("a.x", &same, &days("2026-01-01", 2), IntervalStatus::Done, 0).unwrap();
        store.mark_intervals("a.y", &same, &days("2026-02-01", 1), IntervalStatus::Done, 0).unwrap();
        store.mark_intervals("a.y", &fp('6'), &days("2026-03-01", 1), IntervalStatus::Done, 0).unwrap();
        assert_eq!(store.done_intervals("a.x", &same).unwrap(), BTreeSet::from([t("2026-01-01"), t("2026-01-02")]));
        assert_eq!(store.done_intervals("a.y", &same).unwrap(), BTreeSet::from([t("2026-02-01")]));
        let all = store.all_done_intervals().unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[&("a.x".to_string(), same.clone())].len(), 2);
        assert_eq!(all[&("a.y".to_string(), same.clone())], BTreeSet::from([t("2026-02-01")]));
        assert_eq!(all[&("a.y".to_string(), fp('6'))], BTreeSet::from([t("2026-03-01")]));
    }

    #[test]
    fn canon_cache_round_trip() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert!(store.canon_cache_get(&[]).unwrap().is_empty());
        store.canon_cache_put(&[("k1".into(), "c1".into()), ("k2".into(), "c2".into()), ("it's \"odd\"".into(), "c3".into())]).unwrap();
        let got = store.canon_cache_get(&["k1".into(), "nope".into(), "it's \"odd\"".into(), "k1".into()]).unwrap();
        assert_eq!(got, HashMap::from([("k1".into(), "c1".into()), ("it's \"odd\"".into(), "c3".into())]));
        store.canon_cache_put(&[("k1".into(), "c1b".into())]).unwrap();
        assert_eq!(store.canon_cache_get(&["k1".into()]).unwrap()["k1"], "c1b");
    }

    #[test]
    fn reopening_a_file_keeps_the_data() {
        let (_dir, path) = temp_store();
        let pointers: BTreeMap<_, _> = [("a.b".to_string(), fp('1'))].into();
        {
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(store.path(), path);
            store.put_snapshot(&rec("a.b", &fp('1'))).unwrap();
            store.mark_intervals("a.b", &fp('1'), &days("2026-01-01", 2), IntervalStatus::Done, 0).unwrap();
            store.promote("prod", &pointers, &BTreeMap::new(), &pointers.keys().cloned().collect(), &json!({"x": 1}), "me", 0).unwrap();
            store.canon_cache_put(&[("k".into(), "c".into())]).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.snapshot("a.b", &fp('1')).unwrap(), Some(rec("a.b", &fp('1'))));
        assert_eq!(store.done_intervals("a.b", &fp('1')).unwrap().len(), 2);
        assert_eq!(store.env_pointers("prod").unwrap(), pointers);
        assert_eq!(store.journal("prod").unwrap()[0].applied_by, "me");
        assert_eq!(store.canon_cache_get(&["k".into()]).unwrap()["k"], "c");
        assert_eq!(count(&store, "SELECT count(*) FROM meta"), 1);
    }

    #[test]
    fn every_new_store_has_its_own_identity() {
        let ids: Vec<String> = (0..2)
            .map(|_| {
                let (_dir, path) = temp_store();
                let store = SqliteStore::open(&path).unwrap();
                store.conn.query_row("SELECT store_id FROM meta", [], |r| r.get(0)).unwrap()
            })
            .collect();
        assert!(ids.iter().all(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit())), "{ids:?}");
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn wal_mode_is_on() {
        let (_dir, path) = temp_store();
        let store = SqliteStore::open(&path).unwrap();
        let mode: String = store.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(count(&store, "PRAGMA synchronous"), 1); // NORMAL
        drop(store);
        // WAL is persistent: a plain connection sees it too.
        let plain = Connection::open(&path).unwrap();
        let mode: String = plain.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }

    /// Turns the store at `path` back into the layout of `version` (1 to 7), as the
    /// historical DDL had it.
    fn downgrade(path: &Path, version: i64) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch("ALTER TABLE meta DROP COLUMN epoch_issued; ALTER TABLE meta DROP COLUMN ducklake_epoch; UPDATE meta SET version = 9;").unwrap();
        if version <= 8 {
            conn.execute_batch("ALTER TABLE meta DROP COLUMN engine_epoch; UPDATE meta SET version = 8;").unwrap();
        }
        if version <= 7 {
            conn.execute_batch("DROP INDEX snapshots_by_physical; UPDATE meta SET version = 7;").unwrap();
        }
        if version <= 6 {
            conn.execute_batch("DROP TABLE audit_passes; UPDATE meta SET version = 6;").unwrap();
        }
        if version <= 5 {
            conn.execute_batch("DROP TABLE data_versions; DROP TABLE orphans_seen; ALTER TABLE meta DROP COLUMN store_id; UPDATE meta SET version = 5;")
                .unwrap();
        }
        if version <= 4 {
            conn.execute_batch(
                "DROP TABLE released; DROP TABLE intents; DROP TABLE condemned; DROP TABLE pending_rebuilds; ALTER TABLE meta DROP COLUMN claims; UPDATE meta SET version = 4;",
            )
            .unwrap();
        }
        if version <= 3 {
            conn.execute_batch("DROP TABLE leases; DROP TABLE ticks; UPDATE meta SET version = 3;").unwrap();
        }
        if version <= 2 {
            conn.execute_batch("DROP TABLE promotions; ALTER TABLE environments DROP COLUMN metadata; UPDATE meta SET version = 2;").unwrap();
        }
        if version <= 1 {
            conn.execute_batch("DROP TABLE plan_memo; ALTER TABLE meta DROP COLUMN generation; UPDATE meta SET version = 1;").unwrap();
        }
    }

    #[test]
    fn an_older_store_is_refused_until_migrated_with_a_backup() {
        for version in 1..STATE_VERSION {
            let (_dir, path) = temp_store();
            let store = SqliteStore::open(&path).unwrap();
            let mut r = rec("m.a", &fp('a'));
            r.metadata = json!({"description": "old"});
            store.put_snapshot(&r).unwrap();
            let pointers: BTreeMap<_, _> = [("m.a".to_string(), fp('a'))].into();
            store.promote("prod", &pointers, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "me", 0).unwrap();
            drop(store);
            downgrade(&path, version);
            let err = SqliteStore::open(&path).unwrap_err();
            assert!(matches!(err, StateError::Version { found, .. } if found == version), "{err:?}");
            assert!(err.hint().unwrap().contains("efmesh migrate"), "{:?}", err.hint());
            assert_eq!(stored_version_of(&path).unwrap(), Some(version), "refusing changed nothing");

            let report = migrate(&path, t("2026-03-04")).unwrap();
            assert_eq!((report.from, report.to), (version, STATE_VERSION));
            assert_eq!(report.applied, ((version + 1)..=STATE_VERSION).collect::<Vec<_>>());
            let backup = report.backup.clone().unwrap();
            assert_eq!(stored_version_of(&backup).unwrap(), Some(version), "the backup is the store as it was");
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(store.env_pointers("prod").unwrap(), pointers);
            assert_eq!(store.journal("prod").unwrap()[0].applied_by, "me");
            if version <= 2 {
                assert_eq!(store.env_metadata("prod").unwrap()["m.a"], r#"{"description":"old"}"#);
            }
            assert!(store.pending_promotions().unwrap().is_empty());
            assert!(store.ticks("prod", 5).unwrap().is_empty());
            let id: String = store.conn.query_row("SELECT store_id FROM meta", [], |r| r.get(0)).unwrap();
            assert_eq!(id.len(), 32, "the migration gives the store an identity: {id:?}");
            // Migrating a current store changes nothing and takes no backup.
            let again = migrate(&path, t("2026-03-05")).unwrap();
            assert!(again.applied.is_empty() && again.backup.is_none());
        }
    }

    /// The statements run when a build, a batch or a write is recorded find the versions on a
    /// table through `snapshots_by_physical` and primary keys: none scans `snapshots` or
    /// `data_versions` (a scan per record made an apply of n models read them n times).
    fn assert_sharers_found_by_index(conn: &Connection) {
        for sql in [BUMP_SHARERS_SQL, UNTRUE_SHARERS_SQL, MARKED_SQL] {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let args = ["m.a".to_string(), fp('a'), "p".to_string()];
            let args = &args[..stmt.parameter_count()];
            let steps: Vec<String> = stmt.query_map(rusqlite::params_from_iter(args), |r| r.get(3)).unwrap().collect::<Result<_, _>>().unwrap();
            assert!(steps.iter().any(|s| s.contains("USING INDEX snapshots_by_physical")), "{sql}: {steps:?}");
            assert!(!steps.iter().any(|s| s.starts_with("SCAN")), "a full scan in {sql}: {steps:?}");
        }
    }

    #[test]
    fn the_versions_sharing_a_table_are_found_by_index_in_a_fresh_and_a_migrated_store() {
        let (_dir, path) = temp_store();
        let store = SqliteStore::open(&path).unwrap();
        assert_sharers_found_by_index(&store.conn);
        drop(store);
        downgrade(&path, 7);
        let old = Connection::open(&path).unwrap();
        let mut stmt = old.prepare(&format!("EXPLAIN QUERY PLAN {BUMP_SHARERS_SQL}")).unwrap();
        let before: Vec<String> = stmt.query_map(params!["m.a", fp('a'), "p"], |r| r.get(3)).unwrap().collect::<Result<_, _>>().unwrap();
        drop(stmt);
        assert!(before.iter().any(|s| s == "SCAN s"), "layout 7 scans the snapshots: {before:?}");
        drop(old);
        migrate(&path, t("2026-03-04")).unwrap();
        assert_sharers_found_by_index(&SqliteStore::open(&path).unwrap().conn);
    }

    /// The layout of the store on `conn` as text: per table (name order) whether it is `WITHOUT
    /// ROWID`, its columns (name, type, not null, default, primary-key position) and its indexes
    /// (name, unique, origin, partial, and their columns).
    fn layout_of(conn: &Connection) -> Vec<String> {
        let tables: Vec<(String, String)> = conn
            .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut out = Vec::new();
        for (table, sql) in tables {
            out.push(format!("table {table} without_rowid={}", sql.to_uppercase().contains("WITHOUT ROWID")));
            let mut cols = conn.prepare(&format!("PRAGMA table_xinfo({})", crate::core::name::quote_ident(&table))).unwrap();
            let rows = cols.query_map([], |r| {
                Ok(format!(
                    "  column {:?}",
                    (r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, i64>(3)?, r.get::<_, Option<String>>(4)?, r.get::<_, i64>(5)?)
                ))
            });
            out.extend(rows.unwrap().map(Result::unwrap));
            let mut indexes = conn.prepare(&format!("PRAGMA index_list({})", crate::core::name::quote_ident(&table))).unwrap();
            let mut list: Vec<(String, i64, String, i64)> =
                indexes.query_map([], |r| Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))).unwrap().collect::<Result<_, _>>().unwrap();
            list.sort();
            for (index, unique, origin, partial) in list {
                let mut cols = conn.prepare(&format!("PRAGMA index_info({})", crate::core::name::quote_ident(&index))).unwrap();
                let names: Vec<Option<String>> = cols.query_map([], |r| r.get(2)).unwrap().collect::<Result<_, _>>().unwrap();
                out.push(format!("  index {index} unique={unique} origin={origin} partial={partial} {names:?}"));
            }
        }
        out
    }

    /// Every historical layout (`tests/fixtures/state-v<N>.sql`), migrated, has exactly the
    /// layout of a fresh store: tables, columns, keys and indexes.
    #[test]
    fn a_store_migrated_from_every_older_layout_has_the_fresh_layout() {
        let (_dir, fresh) = temp_store();
        drop(SqliteStore::open(&fresh).unwrap());
        let want = layout_of(&Connection::open(&fresh).unwrap());
        assert!(want.iter().any(|l| l.contains("index snapshots_by_physical")), "{want:#?}");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for version in 1..STATE_VERSION {
            let (_dir, path) = temp_store();
            let sql = fs_err::read_to_string(fixtures.join(format!("state-v{version}.sql"))).unwrap();
            Connection::open(&path).unwrap().execute_batch(&sql).unwrap();
            assert_eq!(stored_version_of(&path).unwrap(), Some(version));
            migrate(&path, t("2026-03-04")).unwrap();
            assert_eq!(layout_of(&Connection::open(&path).unwrap()), want, "migrated from layout {version}");
        }
    }

    /// Epochs are issued from the store, each one past the counter, the store's epoch and the
    /// stamp found, with the counter before (so a closing raise tells whether another writer
    /// was issued one since its opening); recording raises the counter too, never lowers
    /// anything, and moves the DuckLake epoch only when given one.
    #[test]
    fn epochs_are_issued_past_every_number_issued_or_recorded() {
        use crate::state::IssuedEpoch;
        let store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(store.issue_epoch(0).unwrap(), IssuedEpoch { epoch: 1, before: 0 });
        assert_eq!(store.issue_epoch(0).unwrap(), IssuedEpoch { epoch: 2, before: 1 });
        assert_eq!(store.issue_epoch(7).unwrap(), IssuedEpoch { epoch: 8, before: 2 });
        store.record_engine_epoch(10, None).unwrap();
        assert_eq!((store.engine_epoch().unwrap(), store.ducklake_epoch().unwrap()), (10, 0));
        assert_eq!(store.issue_epoch(0).unwrap(), IssuedEpoch { epoch: 11, before: 10 });
        store.record_engine_epoch(4, Some(4)).unwrap();
        assert_eq!((store.engine_epoch().unwrap(), store.ducklake_epoch().unwrap()), (10, 4), "never lowered");
        assert_eq!(store.issue_epoch(0).unwrap(), IssuedEpoch { epoch: 12, before: 11 });
    }

    /// The migration to layout 10 starts the issued counter at the store's epoch (the fixture's
    /// 3) and the DuckLake epoch at 0 (no catalog stamp recorded yet).
    #[test]
    fn the_migration_to_layout_10_issues_past_the_engine_epoch() {
        let (_dir, path) = temp_store();
        let sql = fs_err::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-v9.sql")).unwrap();
        Connection::open(&path).unwrap().execute_batch(&sql).unwrap();
        migrate(&path, t("2026-03-04")).unwrap();
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!((store.engine_epoch().unwrap(), store.ducklake_epoch().unwrap()), (3, 0));
        assert_eq!(store.issue_epoch(0).unwrap(), crate::state::IssuedEpoch { epoch: 4, before: 3 });
    }

    /// A writer holding the write lock when `migrate` starts commits before the backup (taken
    /// under migrate's own write lock) and before the migration; one that migrated the store past
    /// this efmesh meanwhile makes `migrate` refuse, changing nothing.
    #[test]
    fn migrate_backs_up_under_the_write_lock_and_rereads_the_version_there() {
        for (sql, newer) in [("CREATE TABLE scratch (x); INSERT INTO scratch VALUES (1)", false), ("UPDATE meta SET version = 99", true)] {
            let (_dir, path) = temp_store();
            drop(SqliteStore::open(&path).unwrap());
            downgrade(&path, STATE_VERSION - 1);
            let writer = Connection::open(&path).unwrap();
            writer.execute_batch(&format!("BEGIN IMMEDIATE; {sql}")).unwrap();
            let committer = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                writer.execute_batch("COMMIT").unwrap();
            });
            let result = migrate(&path, t("2026-03-04"));
            committer.join().unwrap();
            if newer {
                assert!(matches!(result, Err(StateError::Version { found: 99, .. })), "{result:?}");
                assert_eq!(stored_version_of(&path).unwrap(), Some(99));
            } else {
                let backup = result.unwrap().backup.unwrap();
                let n: i64 = Connection::open(&backup).unwrap().query_row("SELECT COUNT(*) FROM scratch", [], |r| r.get(0)).unwrap();
                assert_eq!(n, 1, "the backup holds what was committed before the migration");
            }
        }
    }

    #[test]
    fn a_newer_store_is_not_migrated() {
        let (_dir, path) = temp_store();
        SqliteStore::open(&path).unwrap();
        Connection::open(&path).unwrap().execute("UPDATE meta SET version = ?1", [STATE_VERSION + 1]).unwrap();
        assert!(matches!(migrate(&path, 0).unwrap_err(), StateError::Version { .. }));
        assert_eq!(stored_version_of(&path).unwrap(), Some(STATE_VERSION + 1));
    }

    fn holder(pid: u32) -> LeaseHolder {
        LeaseHolder { pid, host: "h".into(), command: "efmesh apply dev".into(), started_at: "2026-01-01T00:00:00.000Z".into() }
    }

    #[test]
    fn a_lease_is_held_until_released_expired_or_stale() {
        let store = SqliteStore::open_in_memory().unwrap();
        let never = |_: &LeaseRecord| false;
        let always = |_: &LeaseRecord| true;
        let now = t("2026-01-01");
        assert_eq!(store.try_acquire_lease("env:dev", "a", &holder(1), now + 1000, now, &never).unwrap(), LeaseClaim::Acquired { reclaimed: None });
        // Another token meets it held, naming the holder.
        match store.try_acquire_lease("env:dev", "b", &holder(2), now + 1000, now, &never).unwrap() {
            LeaseClaim::Held(l) => assert_eq!((l.holder.pid, l.token.as_str()), (1, "a")),
            other => panic!("{other:?}"),
        }
        // Other leases are independent.
        assert!(matches!(store.try_acquire_lease("env:prod", "b", &holder(2), now + 1000, now, &never).unwrap(), LeaseClaim::Acquired { .. }));
        // Renewal extends only the holder's lease.
        assert!(store.renew_lease("env:dev", "a", now + 5000, now).unwrap());
        assert!(!store.renew_lease("env:dev", "b", now + 5000, now).unwrap());
        assert!(matches!(store.try_acquire_lease("env:dev", "b", &holder(2), now + 9000, now + 4000, &never).unwrap(), LeaseClaim::Held(_)));
        // Expired: reclaimed, the old record returned.
        match store.try_acquire_lease("env:dev", "b", &holder(2), now + 9000, now + 5000, &never).unwrap() {
            LeaseClaim::Acquired { reclaimed: Some(old) } => assert_eq!(old.token, "a"),
            other => panic!("{other:?}"),
        }
        // Stale (dead owner) before expiry: reclaimed too.
        assert!(matches!(
            store.try_acquire_lease("env:dev", "c", &holder(3), now + 9000, now + 5000, &always).unwrap(),
            LeaseClaim::Acquired { reclaimed: Some(_) }
        ));
        // Releasing with a stale token does nothing; with the right one frees it.
        store.release_lease("env:dev", "b").unwrap();
        assert_eq!(store.lease("env:dev").unwrap().unwrap().token, "c");
        store.release_lease("env:dev", "c").unwrap();
        assert!(store.lease("env:dev").unwrap().is_none());
    }

    #[test]
    fn an_expired_lease_fences_its_holder_before_anyone_reclaims_it() {
        let (_dir, path) = temp_store();
        let a = SqliteStore::open(&path).unwrap();
        let never = |_: &LeaseRecord| false;
        let now = crate::core::interval::now_millis();
        a.try_acquire_lease("env:dev", "a", &holder(1), now + 400, now, &never).unwrap();
        a.set_fence(Some(("env:dev".into(), "a".into())));
        a.put_snapshot(&rec("m.a", &fp('1'))).unwrap();
        // Past three quarters of the ttl the check before an engine step already refuses,
        // while state writes (fenced by expiry itself) still pass.
        std::thread::sleep(std::time::Duration::from_millis(330));
        if crate::core::interval::now_millis() < now + 400 {
            assert!(a.check_fence().unwrap_err().is_lease_lost());
        }
        // Expired, nobody reclaimed it (the row still carries our token): the next write fails.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(a.lease("env:dev").unwrap().unwrap().token, "a");
        let err = a.put_snapshot(&rec("m.b", &fp('2'))).unwrap_err();
        assert!(err.is_lease_lost(), "{err:?}");
        assert!(a.check_fence().unwrap_err().is_lease_lost());
        assert!(!a.snapshot_keys().unwrap().contains(&("m.b".to_string(), fp('2'))));
    }

    #[test]
    fn a_fenced_writer_that_lost_its_lease_stops_before_writing() {
        let (_dir, path) = temp_store();
        let a = SqliteStore::open(&path).unwrap();
        let b = SqliteStore::open(&path).unwrap();
        let now = crate::core::interval::now_millis();
        let never = |_: &LeaseRecord| false;
        a.try_acquire_lease("env:dev", "a", &holder(1), now + 60_000, now, &never).unwrap();
        a.set_fence(Some(("env:dev".into(), "a".into())));
        a.put_snapshot(&rec("m.a", &fp('1'))).unwrap();
        a.check_fence().unwrap();
        // `b` reclaims the expired lease; `a`'s next write is refused and writes nothing.
        assert!(matches!(b.try_acquire_lease("env:dev", "b", &holder(2), now + 190_000, now + 70_000, &never).unwrap(), LeaseClaim::Acquired { .. }));
        let err = a.put_snapshot(&rec("m.b", &fp('2'))).unwrap_err();
        assert!(err.is_lease_lost(), "{err:?}");
        assert!(err.to_string().contains("env:dev") && err.to_string().contains("pid 2"), "{err}");
        assert!(a.check_fence().unwrap_err().is_lease_lost());
        assert!(!b.snapshot_keys().unwrap().contains(&("m.b".to_string(), fp('2'))));
        // Ticks are journaled all the same (why it stopped).
        a.record_tick(&Tick {
            env: "dev".into(),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            finished_at: "2026-01-01T00:00:01.000Z".into(),
            outcome: "error".into(),
            processed: BTreeMap::new(),
            detail: Some(err.to_string()),
        })
        .unwrap();
        assert_eq!(b.ticks("dev", 5).unwrap()[0].outcome, "error");
    }

    #[test]
    fn ticks_are_listed_newest_first_per_environment() {
        let store = SqliteStore::open_in_memory().unwrap();
        for (i, outcome) in ["processed", "nothing-due", "lock-held"].iter().enumerate() {
            let tick = Tick {
                env: "prod".into(),
                started_at: to_iso(t("2026-01-01") + i as i64),
                finished_at: to_iso(t("2026-01-01") + i as i64 + 5),
                outcome: outcome.to_string(),
                processed: BTreeMap::from([("a.b".to_string(), i)]),
                detail: None,
            };
            store.record_tick(&tick).unwrap();
        }
        let ticks = store.ticks("prod", 2).unwrap();
        assert_eq!(ticks.iter().map(|t| t.outcome.as_str()).collect::<Vec<_>>(), ["lock-held", "nothing-due"]);
        assert_eq!(ticks[1].processed["a.b"], 1);
        assert!(store.ticks("dev", 5).unwrap().is_empty());
    }

    #[test]
    fn ledger_stats_count_done_and_failed() {
        let store = SqliteStore::open_in_memory().unwrap();
        let f = fp('1');
        assert_eq!(store.ledger_stats("a.b", &f).unwrap(), LedgerStats::default());
        let ivs = days("2026-01-01", 4);
        store.mark_intervals("a.b", &f, &ivs[..3], IntervalStatus::Done, 0).unwrap();
        store.mark_intervals("a.b", &f, &ivs[3..], IntervalStatus::Failed, 0).unwrap();
        assert_eq!(
            store.ledger_stats("a.b", &f).unwrap(),
            LedgerStats { done: 3, failed: 1, done_up_to: Some(t("2026-01-04")), done_from: Some(t("2026-01-01")) }
        );
    }

    #[test]
    fn a_promotion_under_way_is_recorded_until_promoted_or_abandoned() {
        let store = SqliteStore::open_in_memory().unwrap();
        let pointers: BTreeMap<_, _> = [("a.one".to_string(), fp('1'))].into();
        let undo = vec!["DROP VIEW IF EXISTS \"dev__a\".\"one\"".to_string()];
        let generation = store.generation().unwrap();
        store.begin_promotion("dev", &pointers, &undo, t("2026-01-02")).unwrap();
        assert_eq!(store.generation().unwrap(), generation);
        let pending = store.pending_promotions().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].env.as_str(), &pending[0].pointers, &pending[0].rollback), ("dev", &pointers, &undo));
        assert_eq!(pending[0].started_at, "2026-01-02T00:00:00.000Z");
        // A second one for the same environment is refused (someone else is promoting it).
        assert!(store.begin_promotion("dev", &pointers, &undo, t("2026-01-02")).is_err());
        // The promotion's own transaction removes it, and records the metadata per pointer.
        let meta: BTreeMap<_, _> = [("a.one".to_string(), r#"{"x":1}"#.to_string())].into();
        store.promote("dev", &pointers, &meta, &BTreeSet::new(), &json!({}), "ci", t("2026-01-02")).unwrap();
        assert!(store.pending_promotions().unwrap().is_empty());
        assert_eq!(store.env_metadata("dev").unwrap(), meta);
        // Abandoning removes it too, and is idempotent.
        store.begin_promotion("dev", &BTreeMap::new(), &undo, t("2026-01-03")).unwrap();
        store.abandon_promotion("dev").unwrap();
        store.abandon_promotion("dev").unwrap();
        assert!(store.pending_promotions().unwrap().is_empty());
        assert_eq!(store.env_pointers("dev").unwrap(), pointers);
    }

    #[test]
    fn another_version_refuses_to_open() {
        let (_dir, path) = temp_store();
        SqliteStore::open(&path).unwrap();
        for (found, hint) in [(STATE_VERSION + 1, "newer"), (0, "not an efmesh state store")] {
            Connection::open(&path).unwrap().execute("UPDATE meta SET version = ?1", [found]).unwrap();
            let err = SqliteStore::open(&path).unwrap_err();
            assert!(err.is_version_mismatch(), "{err:?}");
            assert!(matches!(err, StateError::Version { found: f, wanted: STATE_VERSION, .. } if f == found));
            let msg = err.to_string();
            assert!(msg.contains(&format!("version {found}")) && msg.contains(&format!("needs version {STATE_VERSION}")), "{msg}");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(err.hint().unwrap().contains(hint));
        }
        // An empty `meta` counts as version 0, and the store is left as it was.
        Connection::open(&path).unwrap().execute("DELETE FROM meta", []).unwrap();
        assert!(matches!(SqliteStore::open(&path).unwrap_err(), StateError::Version { found: 0, .. }));
        let left: i64 = Connection::open(&path).unwrap().query_row("SELECT count(*) FROM meta", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0);
        // Back at the right version it opens again.
        Connection::open(&path).unwrap().execute("INSERT INTO meta (version) VALUES (?1)", [STATE_VERSION]).unwrap();
        SqliteStore::open(&path).unwrap();
    }

    #[test]
    fn a_foreign_database_is_not_adopted() {
        let (dir, path) = temp_store();
        Connection::open(&path).unwrap().execute_batch("CREATE TABLE other (x INTEGER);").unwrap();
        assert!(matches!(SqliteStore::open(&path).unwrap_err(), StateError::Version { found: 0, .. }));

        let junk = dir.path().join("junk.sqlite");
        fs_err::write(&junk, "this is not a database, just some text that is long enough to have a header").unwrap();
        let err = SqliteStore::open(&junk).unwrap_err();
        assert!(matches!(err, StateError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains("junk.sqlite"), "{err}");

        let err = SqliteStore::open(&dir.path().join("missing-dir").join("s.sqlite")).unwrap_err();
        assert!(matches!(err, StateError::Open { .. }), "{err:?}");
    }

    #[test]
    fn a_second_process_opening_the_same_file_sees_writes() {
        let (_dir, path) = temp_store();
        let a = SqliteStore::open(&path).unwrap();
        let b = SqliteStore::open(&path).unwrap();
        a.put_snapshot(&rec("a.b", &fp('1'))).unwrap();
        assert!(b.snapshot_keys().unwrap().contains(&("a.b".to_string(), fp('1'))));
        // A reader in the middle of a read does not block a writer (WAL).
        let mut stmt = b.conn.prepare("SELECT name FROM snapshots").unwrap();
        let mut rows = stmt.query([]).unwrap();
        assert!(rows.next().unwrap().is_some());
        a.mark_intervals("a.b", &fp('1'), &days("2026-01-01", 1), IntervalStatus::Done, 0).unwrap();
    }

    #[test]
    fn a_held_write_lock_is_a_busy_error_and_writes_nothing() {
        let (_dir, path) = temp_store();
        let store = SqliteStore::open(&path).unwrap();
        store.conn.busy_timeout(Duration::from_millis(50)).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let err = store.put_snapshot(&rec("a.b", &fp('1'))).unwrap_err();
        assert!(err.is_busy(), "{err:?}");
        assert!(err.hint().unwrap().contains("another efmesh process"));
        assert!(err.to_string().contains("cannot write snapshot `a.b`"), "{err}");
        // Reads still work while the other process writes (WAL).
        assert!(store.snapshot_keys().unwrap().is_empty());
        other.execute_batch("COMMIT").unwrap();
        store.put_snapshot(&rec("a.b", &fp('1'))).unwrap();
        assert_eq!(store.snapshot_keys().unwrap().len(), 1);
    }

    #[test]
    fn corrupt_rows_are_reported_with_their_owner() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.conn.execute("INSERT INTO intervals VALUES ('a.b', ?1, 'yesterday', 'today', 'done', '')", [fp('1')]).unwrap();
        let err = store.all_done_intervals().unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("`a.b`") && msg.contains("yesterday") && !msg.ends_with('.'), "{msg}");
    }

    /// Timing of the three per-plan reads at 2000 models (run with `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn bench_plan_reads_at_2000_models() {
        let (_dir, path) = temp_store();
        let store = SqliteStore::open(&path).unwrap();
        let mut pointers = BTreeMap::new();
        for i in 0..2000 {
            let name = format!("s{}.model_{i}", i % 20);
            let f = format!("{i:064x}");
            store.put_snapshot(&rec(&name, &f)).unwrap();
            if i % 4 == 0 {
                store.mark_intervals(&name, &f, &days("2025-01-01", 365), IntervalStatus::Done, 0).unwrap();
            }
            pointers.insert(name, f);
        }
        store.promote("prod", &pointers, &BTreeMap::new(), &pointers.keys().cloned().collect(), &json!({}), "", 0).unwrap();
        let keys: Vec<String> = (0..2000).map(|i| format!("key-{i}")).collect();
        store.canon_cache_put(&keys.iter().map(|k| (k.clone(), "x".repeat(200))).collect::<Vec<_>>()).unwrap();
        for _ in 0..3 {
            let t0 = std::time::Instant::now();
            let p = store.env_pointers("prod").unwrap();
            let t1 = std::time::Instant::now();
            let k = store.snapshot_keys().unwrap();
            let t2 = std::time::Instant::now();
            let d = store.all_done_intervals().unwrap();
            let t3 = std::time::Instant::now();
            let c = store.canon_cache_get(&keys).unwrap();
            let t4 = std::time::Instant::now();
            crate::ewriteln!(
                "env_pointers {} rows {:?}, snapshot_keys {} {:?}, all_done_intervals {} snapshots/{} rows {:?}, canon_cache_get {} {:?}",
                p.len(),
                t1 - t0,
                k.len(),
                t2 - t1,
                d.len(),
                d.values().map(|s| s.len()).sum::<usize>(),
                t3 - t2,
                c.len(),
                t4 - t3
            );
        }
    }

    #[test]
    fn restate_intervals_clears_every_target_or_none() {
        let (_dir, path) = temp_store();
        let store = SqliteStore::open(&path).unwrap();
        for (name, c) in [("m.a", 'a'), ("m.b", 'b')] {
            store.put_snapshot(&rec(name, &fp(c))).unwrap();
            store.mark_intervals(name, &fp(c), &days("2026-01-01", 5), IntervalStatus::Done, 0).unwrap();
        }
        let pointers: BTreeMap<_, _> = [("m.a".to_string(), fp('a')), ("m.b".to_string(), fp('b'))].into();
        store.promote("prod", &pointers, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "me", 0).unwrap();
        let target = |name: &str, c: char| RestateTarget { name: name.into(), fingerprint: fp(c), from: t("2026-01-02"), to: t("2026-01-04") };
        // The second target's pointer moved (prod serves `m.b` `b…`, not `c…`): nothing is cleared,
        // not even the first target's range.
        let err = store.restate_intervals("prod", &[target("m.a", 'a'), target("m.b", 'c')]).unwrap_err();
        assert!(err.is_pointer_moved() && err.to_string().contains("m.b"), "{err}");
        assert_eq!(store.done_intervals("m.a", &fp('a')).unwrap().len(), 5);
        // A model the environment does not serve at all is refused the same way.
        assert!(store.restate_intervals("dev", &[target("m.a", 'a')]).unwrap_err().is_pointer_moved());
        assert_eq!(store.done_intervals("m.a", &fp('a')).unwrap().len(), 5);
        // Both pointers current: both ranges cleared, in one call.
        assert_eq!(store.restate_intervals("prod", &[target("m.a", 'a'), target("m.b", 'b')]).unwrap(), vec![2, 2]);
        let left = |name: &str, c: char| store.done_intervals(name, &fp(c)).unwrap().into_iter().collect::<Vec<_>>();
        assert_eq!(left("m.a", 'a'), vec![t("2026-01-01"), t("2026-01-04"), t("2026-01-05")]);
        assert_eq!(left("m.b", 'b'), vec![t("2026-01-01"), t("2026-01-04"), t("2026-01-05")]);
    }

    fn intent(name: &str, c: char, must_exist: bool) -> Intent {
        Intent { name: name.into(), fingerprint: fp(c), physical: rec(name, &fp(c)).physical, must_exist }
    }

    #[test]
    fn promotion_releases_replaced_versions_and_drops_the_environments_intents() {
        let store = SqliteStore::open_in_memory().unwrap();
        for c in ['a', 'b'] {
            store.put_snapshot(&rec("m.a", &fp(c))).unwrap();
        }
        let required = BTreeSet::from(["m.a".to_string()]);
        let point = |c: char| BTreeMap::from([("m.a".to_string(), fp(c))]);
        store.promote("dev", &point('a'), &BTreeMap::new(), &required, &json!({}), "me", t("2026-01-01")).unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM released"), 0, "nothing replaced yet");
        store.record_intents("dev", &[intent("m.a", 'b', true)], t("2026-01-02")).unwrap();
        store.record_intents("prod", &[intent("m.a", 'a', true)], t("2026-01-02")).unwrap();
        store.promote("dev", &point('b'), &BTreeMap::new(), &required, &json!({}), "me", t("2026-01-03")).unwrap();
        let released: String = store.conn.query_row("SELECT released_at FROM released WHERE fingerprint = ?1", [fp('a')], |r| r.get(0)).unwrap();
        assert_eq!(released, to_iso(t("2026-01-03")));
        assert_eq!(count(&store, "SELECT count(*) FROM intents WHERE env = 'dev'"), 0, "the promotion ends dev's intents");
        assert_eq!(count(&store, "SELECT count(*) FROM intents WHERE env = 'prod'"), 1, "another environment's stay");
        // Removing every pointer releases the served version too.
        store.promote("dev", &BTreeMap::new(), &BTreeMap::new(), &BTreeSet::new(), &json!({}), "me", t("2026-01-04")).unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM released"), 2);
    }

    #[test]
    fn intents_are_refused_on_claimed_storage_or_a_vanished_snapshot_and_write_nothing() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.put_snapshot(&rec("m.a", &fp('a'))).unwrap();
        store.record_intents("dev", &[intent("m.a", 'a', true), intent("m.b", 'b', false)], 0).unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM intents"), 2);
        // A version this apply reuses but whose snapshot is gone.
        let err = store.record_intents("dev", &[intent("m.c", 'c', true)], 0).unwrap_err();
        assert!(
            err.is_reclaimed() && err.to_string().contains("reclaimed by the janitor after this plan was made") && err.to_string().contains("plan again"),
            "{err}"
        );
        assert_eq!(count(&store, "SELECT count(*) FROM intents"), 2, "the earlier intents stand, nothing written");
        // Claimed storage: refused even for a version this apply builds.
        let mut decided = false;
        let claims = store
            .janitor_claim(
                &mut |inv| {
                    decided = true;
                    assert!(inv.intents.contains(&("m.a".to_string(), fp('a'))));
                    vec![Claim {
                        versions: vec![],
                        storage: Some(Condemned {
                            physical: rec("m.d", &fp('d')).physical,
                            name: "m.d".into(),
                            fingerprint: fp('d'),
                            kind: "orphan".into(),
                            detail: json!({"orphan": true}),
                            claimed_at: String::new(),
                        }),
                    }]
                },
                0,
            )
            .unwrap();
        assert!(decided && claims.len() == 1);
        let err = store.record_intents("dev", &[intent("m.d", 'd', false)], 0).unwrap_err();
        assert!(err.is_reclaimed() && err.to_string().contains("claimed"), "{err}");
        store.release_condemned(&rec("m.d", &fp('d')).physical).unwrap();
        store.record_intents("dev", &[intent("m.d", 'd', false)], 0).unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM intents"), 1, "replaces the environment's rows");
        store.clear_intents("dev").unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM intents"), 0);
    }

    #[test]
    fn a_claim_deletes_the_versions_rows_and_condemns_their_storage_in_one_transaction() {
        let store = SqliteStore::open_in_memory().unwrap();
        for c in ['a', 'b'] {
            store.put_snapshot(&rec("m.a", &fp(c))).unwrap();
            store.mark_intervals("m.a", &fp(c), &days("2026-01-01", 2), IntervalStatus::Done, 0).unwrap();
        }
        let required = BTreeSet::from(["m.a".to_string()]);
        store.promote("dev", &BTreeMap::from([("m.a".to_string(), fp('a'))]), &BTreeMap::new(), &required, &json!({}), "me", 0).unwrap();
        store.promote("dev", &BTreeMap::from([("m.a".to_string(), fp('b'))]), &BTreeMap::new(), &required, &json!({}), "me", 0).unwrap();
        store.plan_memo_put("dev", "k", "b").unwrap();
        let generation = store.generation().unwrap();
        let inv = store.janitor_inventory().unwrap();
        assert_eq!(inv.versions.len(), 2);
        assert!(inv.served.contains(&("m.a".to_string(), fp('b'))));
        assert_eq!(inv.versions.iter().find(|v| v.fingerprint == fp('a')).and_then(|v| v.released_at.clone()), Some(to_iso(0)));
        let victim = |inv: &JanitorInventory| -> Vec<Claim> {
            inv.versions
                .iter()
                .filter(|v| !inv.served.contains(&(v.name.clone(), v.fingerprint.clone())))
                .map(|v| Claim {
                    versions: vec![(v.name.clone(), v.fingerprint.clone())],
                    storage: Some(Condemned {
                        physical: v.physical.clone(),
                        name: v.name.clone(),
                        fingerprint: v.fingerprint.clone(),
                        kind: v.kind.clone(),
                        detail: json!({}),
                        claimed_at: String::new(),
                    }),
                })
                .collect()
        };
        let claims = store.janitor_claim(&mut |inv| victim(inv), t("2026-02-01")).unwrap();
        assert_eq!(claims.len(), 1);
        assert!(store.snapshot("m.a", &fp('a')).unwrap().is_none() && store.snapshot("m.a", &fp('b')).unwrap().is_some());
        assert!(store.done_intervals("m.a", &fp('a')).unwrap().is_empty(), "its ledger went with it");
        assert_eq!(count(&store, "SELECT count(*) FROM released"), 0);
        assert_eq!(store.plan_memo_get("dev").unwrap(), None, "every plan memo is dropped");
        assert_eq!(store.generation().unwrap(), generation, "a claim does not bump the generation");
        let condemned = store.janitor_inventory().unwrap().condemned;
        assert_eq!(condemned.len(), 1);
        assert_eq!((condemned[0].physical.clone(), condemned[0].claimed_at.clone()), (rec("m.a", &fp('a')).physical, to_iso(t("2026-02-01"))));
        // Nothing left to claim: an empty claim writes nothing.
        assert!(store.janitor_claim(&mut |inv| victim(inv), 0).unwrap().is_empty());
        store.release_condemned(&condemned[0].physical).unwrap();
        assert!(store.janitor_inventory().unwrap().condemned.is_empty());
    }

    #[test]
    fn a_change_of_data_bumps_every_version_sharing_the_physical_relation() {
        let store = SqliteStore::open_in_memory().unwrap();
        let generation = |name: &str, c: char| store.data_versions(&[(name.to_string(), fp(c))]).unwrap().get(&(name.to_string(), fp(c))).map(|d| d.generation);
        let old = rec("m.c", &fp('a'));
        // A second version reusing the first's table (indirect reuse), and a third with its own.
        let reuser = SnapshotRecord { fingerprint: fp('b'), ..old.clone() };
        store.put_snapshot(&old).unwrap();
        store.put_snapshot(&reuser).unwrap();
        store.put_snapshot(&rec("m.c", &fp('c'))).unwrap();
        store.record_build(&old, None, &[], 0).unwrap();
        assert_eq!(generation("m.c", 'a'), Some(1));
        assert_eq!(generation("m.c", 'b'), Some(1), "the version reading the same table is bumped too");
        assert_eq!(generation("m.c", 'c'), None, "a version with its own table is not");
        store.mark_intervals("m.c", &fp('b'), &days("2026-01-01", 1), IntervalStatus::Done, 0).unwrap();
        assert_eq!((generation("m.c", 'a'), generation("m.c", 'b')), (Some(2), Some(2)), "either way round");
        let write = store.begin_data_write("m.c", &fp('c'), 0).unwrap();
        store.end_data_write(&write, true, 0).unwrap();
        assert_eq!((generation("m.c", 'a'), generation("m.c", 'b'), generation("m.c", 'c')), (Some(2), Some(2), Some(2)));
    }

    #[test]
    fn data_generations_bump_with_every_change_of_data() {
        let store = SqliteStore::open_in_memory().unwrap();
        let generation = |name: &str, c: char| store.data_versions(&[(name.to_string(), fp(c))]).unwrap().get(&(name.to_string(), fp(c))).cloned();
        store.put_snapshot(&rec("m.a", &fp('a'))).unwrap();
        assert_eq!(generation("m.a", 'a'), None, "no data change yet: no row (generation 0)");
        let meta = store.generation().unwrap();
        store.mark_intervals("m.a", &fp('a'), &days("2026-01-01", 3), IntervalStatus::Done, 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(1));
        assert!(store.generation().unwrap() > meta, "the write bumps the store's generation too (the plan memo's key)");
        // A failed batch rolled back changes no data; done intervals marked failed (a ledger reset) do.
        store.mark_intervals("m.a", &fp('a'), &days("2026-01-05", 1), IntervalStatus::Failed, 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(1));
        store.mark_intervals("m.a", &fp('a'), &days("2026-01-01", 1), IntervalStatus::Failed, 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(2));
        // Clearing nothing changes nothing; clearing done intervals does (restatement).
        assert_eq!(store.clear_intervals("m.a", &fp('a'), t("2025-01-01"), t("2025-02-01")).unwrap(), 0);
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(2));
        assert_eq!(store.clear_intervals("m.a", &fp('a'), t("2026-01-02"), t("2026-01-03")).unwrap(), 1);
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(3));
        let pointers: BTreeMap<_, _> = [("m.a".to_string(), fp('a'))].into();
        store.promote("prod", &pointers, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "me", 0).unwrap();
        let target = RestateTarget { name: "m.a".into(), fingerprint: fp('a'), from: t("2026-01-01"), to: t("2026-01-10") };
        assert_eq!(store.restate_intervals("prod", std::slice::from_ref(&target)).unwrap(), vec![1]);
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(4));
        let write = store.begin_data_write("m.a", &fp('a'), 0).unwrap();
        store.end_data_write(&write, false, 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(4), "a write that changed nothing moves nothing");
        let write = store.begin_data_write("m.a", &fp('a'), 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(5), "a write in progress is marked");
        store.end_data_write(&write, true, 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(6));
        let write = store.begin_data_write("m.a", &fp('a'), 0).unwrap();
        store.end_data_write(&write, false, 0).unwrap();
        assert_eq!(generation("m.a", 'a').map(|d| d.generation), Some(6));
        // A build: snapshot, generation, what it was built from and the end of its pending
        // rebuild in one transaction.
        let rollup = rec("m.r", &fp('r'));
        store.record_pending_rebuilds(&[("m.r".into(), fp('r'), "downstream".into())], 0).unwrap();
        let from = crate::plan::generations::built_from(&[("m.a".to_string(), fp('a'), 6)]);
        store.record_build(&rollup, Some(&from), &[], 0).unwrap();
        assert!(store.snapshot("m.r", &fp('r')).unwrap().is_some());
        assert_eq!(generation("m.r", 'r'), Some(DataVersion { generation: 1, built_from: Some(from.clone()) }));
        assert!(store.pending_rebuilds().unwrap().is_empty(), "a build ends its pending rebuild, whatever decided it");
        assert!(crate::plan::generations::changed(&from, &[("m.a".to_string(), fp('a'), 6)]).is_empty());
        store.mark_intervals("m.a", &fp('a'), &days("2026-01-01", 1), IntervalStatus::Done, 0).unwrap();
        assert_eq!(crate::plan::generations::changed(&from, &[("m.a".to_string(), fp('a'), 7)]), vec!["m.a".to_string()]);
        store.record_build(&rollup, None, &[], 0).unwrap();
        assert_eq!(generation("m.r", 'r'), Some(DataVersion { generation: 2, built_from: None }));
        // The janitor's claim deletes the rows of its victims.
        let claims = store.janitor_claim(&mut |_| vec![Claim { versions: vec![("m.r".into(), fp('r'))], storage: None }], 0).unwrap();
        assert_eq!(claims.len(), 1);
        assert_eq!(generation("m.r", 'r'), None);
        assert!(generation("m.a", 'a').is_some());
    }

    #[test]
    fn a_write_mark_left_behind_stays_moved_and_only_an_untouched_mark_is_taken_back() {
        let store = SqliteStore::open_in_memory().unwrap();
        let generation = |name: &str, c: char| store.data_versions(&[(name.to_string(), fp(c))]).unwrap().get(&(name.to_string(), fp(c))).map(|d| d.generation);
        let u = rec("m.u", &fp('a'));
        let sharer = SnapshotRecord { fingerprint: fp('b'), ..u.clone() };
        store.put_snapshot(&u).unwrap();
        store.put_snapshot(&sharer).unwrap();
        // A process killed after its engine write: the mark stays (the generation moved).
        let _lost = store.begin_data_write("m.u", &fp('a'), 0).unwrap();
        assert_eq!((generation("m.u", 'a'), generation("m.u", 'b')), (Some(1), Some(1)));
        // The next write that changes nothing takes back its own mark only.
        let write = store.begin_data_write("m.u", &fp('a'), 0).unwrap();
        assert_eq!((generation("m.u", 'a'), generation("m.u", 'b')), (Some(2), Some(2)));
        store.end_data_write(&write, false, 0).unwrap();
        assert_eq!((generation("m.u", 'a'), generation("m.u", 'b')), (Some(1), Some(1)), "the mark left behind still counts");
        // A generation moved by something else during the write is not taken back.
        let write = store.begin_data_write("m.u", &fp('a'), 0).unwrap();
        store.mark_intervals("m.u", &fp('b'), &days("2026-01-01", 1), IntervalStatus::Done, 0).unwrap();
        store.end_data_write(&write, false, 0).unwrap();
        assert_eq!((generation("m.u", 'a'), generation("m.u", 'b')), (Some(3), Some(3)));
    }

    #[test]
    fn a_reuse_records_its_built_from_without_moving_data_and_a_build_rewrites_its_sharers_records() {
        let store = SqliteStore::open_in_memory().unwrap();
        let version = |name: &str, c: char| store.data_versions(&[(name.to_string(), fp(c))]).unwrap().get(&(name.to_string(), fp(c))).cloned();
        let r = rec("m.r", &fp('a'));
        let reuser = SnapshotRecord { fingerprint: fp('b'), ..r.clone() };
        store.record_build(&r, Some("[]"), &[], 0).unwrap();
        store.record_reuse(&reuser, "[1]", 0).unwrap();
        assert!(store.snapshot("m.r", &fp('b')).unwrap().is_some());
        assert_eq!(version("m.r", 'b'), Some(DataVersion { generation: 0, built_from: Some("[1]".into()) }));
        assert_eq!(version("m.r", 'a').map(|d| d.generation), Some(1));
        store.record_build(&r, Some("[2]"), &[("m.r".into(), fp('b'), "[3]".into())], 0).unwrap();
        assert_eq!(version("m.r", 'a'), Some(DataVersion { generation: 2, built_from: Some("[2]".into()) }));
        assert_eq!(version("m.r", 'b'), Some(DataVersion { generation: 1, built_from: Some("[3]".into()) }), "the sharer is bumped and its record rewritten");
    }

    #[test]
    fn a_build_makes_the_record_of_every_other_version_on_its_table_but_its_sharers_untrue() {
        let store = SqliteStore::open_in_memory().unwrap();
        let built_from =
            |c: char| store.data_versions(&[("m.r".to_string(), fp(c))]).unwrap().get(&("m.r".to_string(), fp(c))).and_then(|d| d.built_from.clone());
        let r = rec("m.r", &fp('a'));
        let other = SnapshotRecord { fingerprint: fp('b'), ..r.clone() };
        let sharer = SnapshotRecord { fingerprint: fp('c'), ..r.clone() };
        let elsewhere = SnapshotRecord { fingerprint: fp('d'), physical: "\"_efmesh\".\"other\"".into(), ..r.clone() };
        store.record_build(&r, Some("[]"), &[], 0).unwrap();
        store.record_reuse(&other, "[1]", 0).unwrap();
        store.record_reuse(&sharer, "[2]", 0).unwrap();
        store.record_build(&elsewhere, Some("[4]"), &[], 0).unwrap();
        store.record_build(&r, Some("[5]"), &[("m.r".into(), fp('c'), "[6]".into())], 0).unwrap();
        assert_eq!(built_from('a').as_deref(), Some("[5]"));
        assert_eq!(built_from('c').as_deref(), Some("[6]"), "a sharer's record is rewritten");
        let untrue = built_from('b').expect("kept a record");
        assert!(crate::plan::generations::changed(&untrue, &[("m.p".into(), fp('p'), 1)]) == vec!["m.p".to_string()], "no sources match it: {untrue}");
        assert_eq!(built_from('d').as_deref(), Some("[4]"), "a version on another table keeps its record");
    }
}
