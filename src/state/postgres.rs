//! [`PostgresStore`]: the state store in a Postgres database, in one schema (`efmesh_state` by
//! default), with the same tables, columns and semantics as [`super::SqliteStore`].
//!
//! - Layout: [`PG_SCHEMA`], version [`STATE_VERSION`] recorded in `meta` as in SQLite. A fresh
//!   store is created at that layout; later layouts are added to [`PG_MIGRATIONS`] and run by
//!   [`migrate`] (`efmesh migrate`) in one transaction. A store of another version is refused as
//!   SQLite refuses it (newer: upgrade efmesh; older: `efmesh migrate`).
//! - Concurrency, by explicit row locks (no `SERIALIZABLE` retries): every write of data (every
//!   write SQLite runs under its file's write lock but the lease and tick writes) first locks the
//!   single `meta` row (`SELECT … FOR UPDATE`), so data writers run one at a time, each in one
//!   `READ COMMITTED` transaction that sees everything committed before it: the same order
//!   SQLite's `BEGIN IMMEDIATE` gives. Journal ids are taken under that lock, so they grow in
//!   commit order ([`StateStore::plan_state`] relies on it). Multi-statement reads
//!   ([`StateStore::janitor_inventory`]) run in one `REPEATABLE READ` read-only transaction.
//! - Leases: each lease operation locks `pg_advisory_xact_lock` on a key derived from the schema
//!   and the lease name inside its transaction, then reads and writes the lease row; a fenced
//!   write locks the lease row it checks (`FOR SHARE`), so a takeover cannot commit between a
//!   writer's fence check and its commit.
//! - A lock wait longer than [`LOCK_TIMEOUT`] fails with an error for which
//!   [`StateError::is_busy`] is true, like SQLite's busy timeout.
//! - The connection URL comes from the environment only; [`StateStore::location`] and every
//!   message name the store by its URL without the password (and its schema).
//! - What SQLite has and Postgres does not: no file whose stat identifies the store (the engine
//!   catalog record and the plan-check token then trust nothing keyed by the store), and no
//!   backup before a migration (take one with `pg_dump --schema <schema>`; the migration is one
//!   transaction, so a failure leaves the store as it was).

use super::{
    AuditPass, Claim, Condemned, DataVersion, DataWrite, DoneMark, Intent, IntervalStatus, JanitorInventory, JournalEntry, LeaseClaim, LeaseHolder,
    LeaseRecord, LedgerStats, Migration, MigrationReport, PendingPromotion, PendingRebuild, RestateTarget, Restated, STATE_VERSION, SnapshotRecord, StateError,
    StateStore, Tick, VersionRow,
};
use crate::core::interval::{Interval, Millis, parse_instant, to_iso};
use postgres::types::ToSql;
use postgres::{Client, GenericClient, Row, Transaction};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// How long a statement waits for a lock another connection holds before failing
/// ([`StateError::is_busy`]), like SQLite's busy timeout.
pub const LOCK_TIMEOUT: &str = "5s";

/// The layout of [`STATE_VERSION`] 10 in Postgres: the tables and columns of the SQLite layout
/// (`SCHEMA` in `sqlite.rs`, described there), with `BIGINT` for SQLite's `INTEGER` and
/// identity columns for its `AUTOINCREMENT` ids. Every instant is ISO-8601 UTC text with
/// milliseconds, as in SQLite, and every text column is `COLLATE "C"` (byte order, as SQLite
/// compares), so both stores compare and sort alike whatever the database's locale.
pub const PG_SCHEMA: &str = r#"
CREATE TABLE meta (
    version    BIGINT NOT NULL,
    generation BIGINT NOT NULL DEFAULT 0,
    claims     BIGINT NOT NULL DEFAULT 0,
    store_id   TEXT COLLATE "C"   NOT NULL DEFAULT '',
    engine_epoch BIGINT NOT NULL DEFAULT 0,
    epoch_issued BIGINT NOT NULL DEFAULT 0,
    ducklake_epoch BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE plan_memo (
    env  TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    key  TEXT COLLATE "C" NOT NULL,
    body TEXT COLLATE "C" NOT NULL
);
CREATE TABLE snapshots (
    name                TEXT COLLATE "C"   NOT NULL,
    fingerprint         TEXT COLLATE "C"   NOT NULL,
    fingerprint_version BIGINT NOT NULL,
    kind                TEXT COLLATE "C"   NOT NULL,
    physical            TEXT COLLATE "C"   NOT NULL DEFAULT '',
    canonical           TEXT COLLATE "C",
    rendered_sql        TEXT COLLATE "C"   NOT NULL,
    metadata            TEXT COLLATE "C"   NOT NULL DEFAULT '{}',
    created_at          TEXT COLLATE "C"   NOT NULL,
    PRIMARY KEY (name, fingerprint)
);
CREATE TABLE environments (
    env         TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    promoted_at TEXT COLLATE "C" NOT NULL,
    metadata    TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    PRIMARY KEY (env, name)
);
CREATE TABLE promotions (
    env        TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    pointers   TEXT COLLATE "C" NOT NULL,
    rollback   TEXT COLLATE "C" NOT NULL,
    started_at TEXT COLLATE "C" NOT NULL
);
CREATE TABLE intervals (
    name        TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    start_ts    TEXT COLLATE "C" NOT NULL,
    end_ts      TEXT COLLATE "C" NOT NULL,
    status      TEXT COLLATE "C" NOT NULL CHECK (status IN ('done', 'failed')),
    updated_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (name, fingerprint, start_ts)
);
CREATE TABLE plans (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    env        TEXT COLLATE "C" NOT NULL,
    summary    TEXT COLLATE "C" NOT NULL,
    applied_at TEXT COLLATE "C" NOT NULL,
    applied_by TEXT COLLATE "C" NOT NULL DEFAULT ''
);
CREATE INDEX plans_by_env ON plans (env, id);
CREATE TABLE canon_cache (
    key       TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    canonical TEXT COLLATE "C" NOT NULL
);
CREATE TABLE leases (
    name         TEXT COLLATE "C"   NOT NULL PRIMARY KEY,
    token        TEXT COLLATE "C"   NOT NULL,
    pid          BIGINT NOT NULL,
    host         TEXT COLLATE "C"   NOT NULL,
    command      TEXT COLLATE "C"   NOT NULL,
    started_at   TEXT COLLATE "C"   NOT NULL,
    expires_at   TEXT COLLATE "C"   NOT NULL,
    heartbeat_at TEXT COLLATE "C"   NOT NULL
);
CREATE TABLE ticks (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    env         TEXT COLLATE "C" NOT NULL,
    started_at  TEXT COLLATE "C" NOT NULL,
    finished_at TEXT COLLATE "C" NOT NULL,
    outcome     TEXT COLLATE "C" NOT NULL,
    processed   TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    detail      TEXT COLLATE "C"
);
CREATE INDEX ticks_by_env ON ticks (env, id);
CREATE TABLE released (
    name        TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    released_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (name, fingerprint)
);
CREATE TABLE intents (
    env         TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    physical    TEXT COLLATE "C" NOT NULL DEFAULT '',
    recorded_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (env, name, fingerprint)
);
CREATE TABLE condemned (
    physical    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name        TEXT COLLATE "C" NOT NULL DEFAULT '',
    fingerprint TEXT COLLATE "C" NOT NULL DEFAULT '',
    kind        TEXT COLLATE "C" NOT NULL DEFAULT '',
    detail      TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    claimed_at  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE pending_rebuilds (
    name        TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    reason      TEXT COLLATE "C" NOT NULL DEFAULT '',
    recorded_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (name, fingerprint)
);
CREATE TABLE data_versions (
    name        TEXT COLLATE "C"   NOT NULL,
    fingerprint TEXT COLLATE "C"   NOT NULL,
    generation  BIGINT NOT NULL DEFAULT 0,
    built_from  TEXT COLLATE "C",
    updated_at  TEXT COLLATE "C"   NOT NULL,
    PRIMARY KEY (name, fingerprint)
);
CREATE TABLE orphans_seen (
    physical   TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    first_seen TEXT COLLATE "C" NOT NULL
);
CREATE TABLE audit_passes (
    name        TEXT COLLATE "C"   NOT NULL,
    fingerprint TEXT COLLATE "C"   NOT NULL,
    digest      TEXT COLLATE "C"   NOT NULL,
    generation  BIGINT NOT NULL,
    passed_at   TEXT COLLATE "C"   NOT NULL,
    PRIMARY KEY (name, fingerprint)
);
CREATE INDEX snapshots_by_physical ON snapshots (physical);
"#;

/// The first layout a Postgres store was ever created at: Postgres stores started at layout 8.
pub const PG_FIRST_VERSION: i64 = 8;

/// The Postgres migrations, oldest first, each from `to - 1` to `to`, with the same `to` as its
/// SQLite step in [`super::MIGRATIONS`].
pub const PG_MIGRATIONS: &[Migration] = &[
    Migration {
        to: 9,
        description: "the engine epoch (an engine database older than the store is refused)",
        sql: "ALTER TABLE meta ADD COLUMN engine_epoch BIGINT NOT NULL DEFAULT 0;\nUPDATE meta SET version = 9;\n",
    },
    Migration {
        to: 10,
        description: "issued engine epochs and the DuckLake catalog's epoch (two databases sharing the store, a catalog only some projects stamp)",
        sql: "ALTER TABLE meta ADD COLUMN epoch_issued BIGINT NOT NULL DEFAULT 0;\nALTER TABLE meta ADD COLUMN ducklake_epoch BIGINT NOT NULL DEFAULT 0;\n\
              UPDATE meta SET epoch_issued = engine_epoch;\nUPDATE meta SET version = 10;\n",
    },
];

/// Where a Postgres store lives, as it is named in messages: its URL without the password
/// (`postgres://user@host:port/db`) and its schema; `None` when the URL does not parse (then
/// nothing of it may be shown: a password can sit anywhere in it).
pub(crate) fn describe_url(url: &str, schema: &str) -> Option<String> {
    crate::pg::describe_url(url).map(|d| format!("{d} schema {schema}"))
}

fn describe(config: &postgres::Config, schema: &str) -> String {
    format!("{} schema {schema}", crate::pg::describe(config))
}

fn scrubbed(e: &dyn std::error::Error, secret: Option<&str>) -> super::error::BackendError {
    crate::pg::scrubbed(e, secret).into()
}

/// [`StateError::Open`] of the store `store` for the driver's error `e`, the password scrubbed;
/// a connection that could not be made or was cut is kept said
/// ([`super::error::ConnectionFailed`]), for the hint to tell it from another process's lock.
fn open_error(store: &str, e: &postgres::Error, secret: Option<&str>) -> StateError {
    let text = crate::pg::scrubbed(e, secret);
    let source: super::error::BackendError = if crate::pg::connection_trouble(e) { Box::new(super::error::ConnectionFailed(text)) } else { text.into() };
    StateError::Open { store: store.to_string(), transient: is_transient(e), source }
}

/// [`StateError::Open`] of the store `store` whose server did not answer the connection attempt
/// `e` in time ([`crate::pg::ConnectError::NoAnswer`]) or whose attempt failed inside efmesh
/// ([`crate::pg::ConnectError::Panicked`]); not transient.
/// Only the former gets the hint that the server cannot be reached.
fn no_answer(store: &str, e: &crate::pg::ConnectError) -> StateError {
    let text = crate::pg::scrubbed(e, None);
    let source: super::error::BackendError =
        if matches!(e, crate::pg::ConnectError::Panicked) { text.into() } else { Box::new(super::error::ConnectionFailed(text)) };
    StateError::Open { store: store.to_string(), transient: false, source }
}

/// [`crate::pg::is_transient`]: another connection's lock (a wait past [`LOCK_TIMEOUT`], a
/// deadlock, a serialization failure) or the connection's trouble, after which the next use of
/// the store reconnects ([`PostgresStore::client`]).
fn is_transient(e: &postgres::Error) -> bool {
    crate::pg::is_transient(e)
}

/// The state store in Postgres: one connection (a second handle is a second connection,
/// [`StateStore::reopen`]).
pub struct PostgresStore {
    client: RefCell<Client>,
    /// The connection settings (with the password: never printed, see the `Debug` impl).
    config: postgres::Config,
    schema: String,
    /// The URL without its password, and the schema: named in every error.
    location: String,
    /// The lease every write checks first: (lease name, token).
    fence: RefCell<Option<(String, String)>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("location", &self.location).finish_non_exhaustive()
    }
}

/// What went wrong inside one operation, before the operation's name is attached.
enum Fault {
    Sql(postgres::Error),
    Corrupt(String),
    Fail(StateError),
}

impl From<postgres::Error> for Fault {
    fn from(e: postgres::Error) -> Self {
        Fault::Sql(e)
    }
}

/// The schema quoted as an identifier (the config allows only lowercase identifiers; quoting
/// keeps it exact anyway).
fn quoted(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

/// The advisory-lock key text of `what` in `schema` (hashed by `hashtextextended` in SQL).
fn lock_key(schema: &str, what: &str) -> String {
    format!("efmesh:{schema}:{what}")
}

impl PostgresStore {
    /// Opens the store in `schema` of the database at `url` (a `postgres://` URL or a
    /// `key=value` connection string), creating the schema and the layout of [`STATE_VERSION`]
    /// when the schema holds no table (under an advisory lock: two processes creating it at once
    /// get one store).
    ///
    /// # Errors
    /// [`StateError::Open`] when the URL is malformed or the database cannot be reached (the
    /// message never holds the password); [`StateError::Version`] when the schema holds another
    /// layout (older: `efmesh migrate`; newer; tables without `meta`: version 0, not a store).
    pub fn open(url: &str, schema: &str) -> Result<Self, StateError> {
        Self::open_with(url, schema, true).map(|s| s.expect("created when missing"))
    }

    /// As [`PostgresStore::open`], but `None` when the schema holds no store yet (nothing is
    /// created).
    ///
    /// # Errors
    /// As [`PostgresStore::open`].
    pub fn open_existing(url: &str, schema: &str) -> Result<Option<Self>, StateError> {
        Self::open_with(url, schema, false)
    }

    fn open_with(url: &str, schema: &str, create: bool) -> Result<Option<Self>, StateError> {
        // An unparsable URL is never shown, not even redacted: a password can sit anywhere in it
        // (`user:pw@`, `?password=`, `password=` of a `key=value` string).
        let config: postgres::Config = url.parse().map_err(|e: postgres::Error| StateError::Open {
            store: format!("a Postgres database, schema {schema}"),
            source: format!("not a Postgres URL or `key=value` connection string: {}", crate::config::redact_url_passwords(&e.to_string())).into(),
            transient: false,
        })?;
        Self::connect(config, schema, create)
    }

    fn connect(config: postgres::Config, schema: &str, create: bool) -> Result<Option<Self>, StateError> {
        let location = describe(&config, schema);
        let secret = crate::pg::secret(&config);
        let open_err = |e: postgres::Error| open_error(&location, &e, secret.as_deref());
        let mut client = session(&config, schema).map_err(|fault| match fault {
            Fault::Sql(e) => open_err(e),
            Fault::Corrupt(detail) => StateError::Corrupt { store: location.clone(), op: "open the store".to_string(), detail },
            Fault::Fail(e) => e,
        })?;
        let check = |found: i64| {
            if found == STATE_VERSION { Ok(()) } else { Err(StateError::Version { store: location.clone(), found, wanted: STATE_VERSION }) }
        };
        // The version first, before touching anything: a foreign, older or newer store stays
        // as it was.
        match stored_version(&mut client, schema).map_err(&open_err)? {
            Some(v) => check(v)?,
            None if !create => return Ok(None),
            None => {
                let mut tx = client.transaction().map_err(&open_err)?;
                tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&lock_key(schema, "layout")]).map_err(&open_err)?;
                match stored_version(&mut tx, schema).map_err(&open_err)? {
                    Some(v) => check(v)?,
                    None => {
                        // Only when missing: a role without CREATE on the database may own a
                        // schema made for it (`CREATE SCHEMA IF NOT EXISTS` checks that privilege first).
                        if tx.query_opt("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1", &[&schema]).map_err(&open_err)?.is_none() {
                            tx.batch_execute(&format!("CREATE SCHEMA {}", quoted(schema))).map_err(&open_err)?;
                        }
                        tx.batch_execute(PG_SCHEMA).map_err(&open_err)?;
                        tx.execute("INSERT INTO meta (version, store_id) VALUES ($1, replace(gen_random_uuid()::text, '-', ''))", &[&STATE_VERSION])
                            .map_err(&open_err)?;
                    }
                }
                tx.commit().map_err(&open_err)?;
            }
        }
        Ok(Some(Self { client: RefCell::new(client), config, schema: schema.to_string(), location, fence: RefCell::new(None) }))
    }

    /// The schema holding the store.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The connection, opened again first when the server closed it (a restart, a terminated
    /// backend: a transient error of the operation that saw it, [`is_transient`]), so a retried
    /// attempt works on a live one. A lease held in the lost session ends with it (Postgres's
    /// advisory locks do; lease rows are checked by token and expiry, [`Self::fence_check`]).
    fn client(&self) -> Result<std::cell::RefMut<'_, Client>, Fault> {
        let mut client = self.client.borrow_mut();
        if client.is_closed() {
            *client = session(&self.config, &self.schema)?;
        }
        Ok(client)
    }

    /// Runs one operation, naming it (lazily) in any error.
    fn run<T>(&self, op: impl FnOnce() -> String, f: impl FnOnce() -> Result<T, Fault>) -> Result<T, StateError> {
        f().map_err(|fault| match fault {
            Fault::Sql(source) => StateError::Backend { store: self.location(), op: op(), transient: is_transient(&source), source: Box::new(source) },
            Fault::Corrupt(detail) => StateError::Corrupt { store: self.location(), op: op(), detail },
            Fault::Fail(e) => e,
        })
    }

    /// A read on the connection (one statement: one snapshot).
    fn read<T>(&self, f: impl FnOnce(&mut Client) -> Result<T, Fault>) -> Result<T, Fault> {
        f(&mut *self.client()?)
    }

    /// Runs `f` in one transaction holding the store's write lock (the `meta` row), after the
    /// fence check: committed if `f` succeeds, rolled back otherwise. Bumps the generation in
    /// the same transaction.
    fn write<T>(&self, f: impl FnOnce(&mut Transaction<'_>) -> Result<T, Fault>) -> Result<T, Fault> {
        self.write_tx(true, f)
    }

    fn write_tx<T>(&self, bump: bool, f: impl FnOnce(&mut Transaction<'_>) -> Result<T, Fault>) -> Result<T, Fault> {
        let mut client = self.client()?;
        let mut tx = client.transaction()?;
        // The store's write lock: one data writer at a time, each seeing every earlier commit.
        tx.query_one("SELECT generation FROM meta FOR UPDATE", &[])?;
        self.fence_check(&mut tx, None, true)?;
        let out = f(&mut tx)?;
        if bump {
            tx.execute("UPDATE meta SET generation = generation + 1", &[])?;
        }
        tx.commit()?;
        Ok(out)
    }

    /// Runs `f` in one transaction holding the advisory lock of lease `name` (not the store's
    /// write lock, not fenced).
    fn lease_tx<T>(&self, name: &str, f: impl FnOnce(&mut Transaction<'_>) -> Result<T, Fault>) -> Result<T, Fault> {
        let mut client = self.client()?;
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&lock_key(&self.schema, &format!("lease:{name}"))])?;
        let out = f(&mut tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Fails with [`StateError::LeaseLost`] when the fence lease no longer has our token or has
    /// expired; `margin_den` as in SQLite (a share of the time to live that must remain). With
    /// `lock`, the lease row is locked (`FOR SHARE`) until the caller's transaction ends, so no
    /// takeover commits in between.
    fn fence_check<C: GenericClient>(&self, conn: &mut C, margin_den: Option<i64>, lock: bool) -> Result<(), Fault> {
        let Some((name, token)) = self.fence.borrow().clone() else { return Ok(()) };
        let sql = format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = $1{}", if lock { " FOR SHARE" } else { "" });
        let row = conn.query_opt(&sql, &[&name])?.map(|r| lease_row(&r)).transpose()?;
        // The server's clock, as every lease of this store is measured ([`StateStore::clock`]).
        let now = server_clock(conn)?;
        let live = |l: &LeaseRecord| -> bool {
            let (Ok(expires), Ok(beat)) = (parse_instant(&l.expires_at), parse_instant(&l.heartbeat_at)) else {
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

/// A connection to the store's database, set up as every store session is: the lock timeout,
/// the store's schema first on the search path, warnings and worse only. A server that does not
/// answer in time is [`Fault::Fail`] ([`no_answer`]); the driver's errors are [`Fault::Sql`].
fn session(config: &postgres::Config, schema: &str) -> Result<Client, Fault> {
    let mut client = crate::pg::connect(config.clone()).map_err(|e| match e {
        crate::pg::ConnectError::Driver(e) => Fault::Sql(e),
        e @ (crate::pg::ConnectError::NoAnswer { .. } | crate::pg::ConnectError::Panicked) => Fault::Fail(no_answer(&describe(config, schema), &e)),
    })?;
    client.batch_execute(&format!("SET lock_timeout = '{LOCK_TIMEOUT}'; SET search_path TO {}; SET client_min_messages = warning", quoted(schema)))?;
    Ok(client)
}

/// The layout version stored in `schema`, or `None` when the schema is missing or holds no
/// table. A schema with tables but no (or an empty) `meta` is version 0.
fn stored_version<C: GenericClient>(conn: &mut C, schema: &str) -> Result<Option<i64>, postgres::Error> {
    let tables: Vec<String> =
        conn.query("SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = $1", &[&schema])?.iter().map(|r| r.get(0)).collect();
    if tables.is_empty() {
        return Ok(None);
    }
    if !tables.iter().any(|t| t == "meta") {
        return Ok(Some(0));
    }
    let v: i64 = conn.query_one(&format!("SELECT COALESCE(MAX(version), 0)::bigint FROM {}.meta", quoted(schema)), &[])?.try_get(0)?;
    Ok(Some(v))
}

/// The server's clock, UTC milliseconds: what the leases of a store shared between machines are
/// measured by (machines' own clocks may disagree).
fn server_clock<C: GenericClient>(conn: &mut C) -> Result<Millis, postgres::Error> {
    conn.query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[])?.try_get(0)
}

const LEASE_COLUMNS: &str = "name, token, pid, host, command, started_at, expires_at, heartbeat_at";

fn lease_row(r: &Row) -> Result<LeaseRecord, Fault> {
    let pid: i64 = r.try_get(2)?;
    Ok(LeaseRecord {
        name: r.try_get(0)?,
        token: r.try_get(1)?,
        holder: LeaseHolder {
            pid: u32::try_from(pid).map_err(|_| Fault::Corrupt(format!("lease pid {pid} is not a process id")))?,
            host: r.try_get(3)?,
            command: r.try_get(4)?,
            started_at: r.try_get(5)?,
        },
        expires_at: r.try_get(6)?,
        heartbeat_at: r.try_get(7)?,
    })
}

/// [`StateStore::check_fence`] requires a quarter of the lease's time to live left, as SQLite.
const FENCE_MARGIN_DEN: i64 = 4;

/// Parses a stored ISO timestamp back to epoch ms.
fn instant(s: &str, owner: impl FnOnce() -> String) -> Result<Millis, Fault> {
    parse_instant(s).map_err(|e| Fault::Corrupt(format!("an interval start of {} is not a timestamp: {e}", owner())))
}

fn pairs(rows: &[Row]) -> Result<Vec<(String, String)>, Fault> {
    rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
}

impl StateStore for PostgresStore {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn is_in_memory(&self) -> bool {
        false
    }

    fn reopen(&self) -> Result<Box<dyn StateStore>, StateError> {
        match Self::connect(self.config.clone(), &self.schema, false)? {
            Some(s) => Ok(Box::new(s)),
            None => Err(StateError::Open { store: self.location(), source: "the store's schema is gone".into(), transient: false }),
        }
    }

    fn generation(&self) -> Result<i64, StateError> {
        self.run(|| "read the store's generation".to_string(), || self.read(|c| Ok(c.query_one("SELECT generation FROM meta", &[])?.try_get(0)?)))
    }

    fn plan_state(&self, env: &str) -> Result<Option<(i64, i64, i64)>, StateError> {
        self.run(
            || format!("read the store's generation and the last promotion (planning `{env}`)"),
            || {
                self.read(|c| {
                    let r = c.query_one("SELECT generation, claims, (SELECT coalesce(max(id), 0)::bigint FROM plans) FROM meta", &[])?;
                    Ok(Some((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                })
            },
        )
    }

    fn plan_memo_get(&self, env: &str) -> Result<Option<(String, String)>, StateError> {
        self.run(
            || format!("read the plan memo of `{env}`"),
            || self.read(|c| c.query_opt("SELECT key, body FROM plan_memo WHERE env = $1", &[&env])?.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()),
        )
    }

    fn plan_memo_put(&self, env: &str, key: &str, body: &str) -> Result<(), StateError> {
        self.run(
            || format!("write the plan memo of `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.execute(
                        "INSERT INTO plan_memo (env, key, body) VALUES ($1, $2, $3) ON CONFLICT (env) DO UPDATE SET key = excluded.key, body = excluded.body",
                        &[&env, &key, &body],
                    )?;
                    Ok(())
                })
            },
        )
    }

    fn env_pointers(&self, env: &str) -> Result<BTreeMap<String, String>, StateError> {
        self.run(
            || format!("read the pointers of environment `{env}`"),
            || self.read(|c| Ok(pairs(&c.query("SELECT name, fingerprint FROM environments WHERE env = $1", &[&env])?)?.into_iter().collect())),
        )
    }

    fn env_metadata(&self, env: &str) -> Result<BTreeMap<String, String>, StateError> {
        self.run(
            || format!("read the metadata of environment `{env}`"),
            || self.read(|c| Ok(pairs(&c.query("SELECT name, metadata FROM environments WHERE env = $1", &[&env])?)?.into_iter().collect())),
        )
    }

    fn environments(&self) -> Result<Vec<String>, StateError> {
        self.run(
            || "list environments".to_string(),
            || self.read(|c| c.query("SELECT DISTINCT env FROM environments ORDER BY env", &[])?.iter().map(|r| Ok(r.try_get(0)?)).collect()),
        )
    }

    fn snapshot(&self, name: &str, fp: &str) -> Result<Option<SnapshotRecord>, StateError> {
        self.run(
            || format!("read snapshot `{name}` `{fp}`"),
            || {
                let row = self.read(|c| {
                    Ok(c.query_opt(
                        "SELECT fingerprint_version, kind, physical, canonical, rendered_sql, metadata, created_at FROM snapshots WHERE name = $1 AND fingerprint = $2",
                        &[&name, &fp],
                    )?)
                })?;
                let Some(r) = row else { return Ok(None) };
                let version: i64 = r.try_get(0)?;
                let metadata: String = r.try_get(5)?;
                let metadata =
                    serde_json::from_str(&metadata).map_err(|e| Fault::Corrupt(format!("the metadata of snapshot `{name}` `{fp}` is not JSON: {e}")))?;
                Ok(Some(SnapshotRecord {
                    name: name.to_string(),
                    fingerprint: fp.to_string(),
                    fingerprint_version: u32::try_from(version)
                        .map_err(|_| Fault::Corrupt(format!("snapshot `{name}` `{fp}` has fingerprint version {version}")))?,
                    kind: r.try_get(1)?,
                    physical: r.try_get(2)?,
                    canonical: r.try_get(3)?,
                    rendered_sql: r.try_get(4)?,
                    metadata,
                    created_at: r.try_get(6)?,
                }))
            },
        )
    }

    fn snapshot_keys(&self) -> Result<HashSet<(String, String)>, StateError> {
        self.run(|| "list snapshots".to_string(), || self.read(|c| Ok(pairs(&c.query("SELECT name, fingerprint FROM snapshots", &[])?)?.into_iter().collect())))
    }

    fn was_released(&self, name: &str, fp: &str) -> Result<bool, StateError> {
        self.run(
            || format!("read whether `{name}` `{fp}` was ever served"),
            || self.read(|c| Ok(c.query_opt("SELECT 1 FROM released WHERE name = $1 AND fingerprint = $2", &[&name, &fp])?.is_some())),
        )
    }

    fn snapshot_index(&self) -> Result<super::SnapshotIndex, StateError> {
        self.run(
            || "list snapshots".to_string(),
            || {
                self.read(|c| {
                    c.query("SELECT name, fingerprint, physical, kind FROM snapshots", &[])?
                        .iter()
                        .map(|r| Ok(((r.try_get(0)?, r.try_get(1)?), (r.try_get(2)?, r.try_get(3)?))))
                        .collect()
                })
            },
        )
    }

    fn put_snapshot(&self, rec: &SnapshotRecord) -> Result<(), StateError> {
        self.run(|| format!("write snapshot `{}` `{}`", rec.name, rec.fingerprint), || self.write(|tx| insert_snapshot(tx, rec)))
    }

    fn done_intervals(&self, name: &str, fp: &str) -> Result<BTreeSet<Millis>, StateError> {
        self.run(
            || format!("read the intervals of `{name}` `{fp}`"),
            || {
                let rows =
                    self.read(|c| Ok(c.query("SELECT start_ts FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done'", &[&name, &fp])?))?;
                rows.iter().map(|r| instant(r.try_get(0)?, || format!("`{name}` `{fp}`"))).collect()
            },
        )
    }

    fn failed_intervals(&self, name: &str, fp: &str) -> Result<BTreeSet<Millis>, StateError> {
        self.run(
            || format!("read the failed intervals of `{name}` `{fp}`"),
            || {
                let rows =
                    self.read(|c| Ok(c.query("SELECT start_ts FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'failed'", &[&name, &fp])?))?;
                rows.iter().map(|r| instant(r.try_get(0)?, || format!("`{name}` `{fp}`"))).collect()
            },
        )
    }

    fn done_ledger(&self, name: &str, fp: &str) -> Result<BTreeMap<Millis, (Millis, Millis)>, StateError> {
        self.run(
            || format!("read the intervals of `{name}` `{fp}`"),
            || {
                let rows = self.read(|c| {
                    Ok(c.query("SELECT start_ts, end_ts, updated_at FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done'", &[&name, &fp])?)
                })?;
                let owner = || format!("`{name}` `{fp}`");
                rows.iter().map(|r| Ok((instant(r.try_get(0)?, owner)?, (instant(r.try_get(1)?, owner)?, instant(r.try_get(2)?, owner)?)))).collect()
            },
        )
    }

    fn all_done_intervals(&self) -> Result<HashMap<(String, String), BTreeSet<Millis>>, StateError> {
        self.run(
            || "read the interval ledger".to_string(),
            || {
                let rows = self.read(|c| Ok(c.query("SELECT name, fingerprint, start_ts FROM intervals WHERE status = 'done'", &[])?))?;
                let mut out: HashMap<(String, String), BTreeSet<Millis>> = HashMap::new();
                for r in &rows {
                    let (name, fp): (String, String) = (r.try_get(0)?, r.try_get(1)?);
                    let start = instant(r.try_get(2)?, || format!("`{name}` `{fp}`"))?;
                    out.entry((name, fp)).or_default().insert(start);
                }
                Ok(out)
            },
        )
    }

    fn ledger_stats(&self, name: &str, fp: &str) -> Result<LedgerStats, StateError> {
        self.run(
            || format!("read the ledger of `{name}` `{fp}`"),
            || {
                let r = self.read(|c| {
                    Ok(c.query_one(
                        "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'), max(end_ts) FILTER (WHERE status = 'done'), \
                         min(start_ts) FILTER (WHERE status = 'done') FROM intervals WHERE name = $1 AND fingerprint = $2",
                        &[&name, &fp],
                    )?)
                })?;
                let (done, failed, up_to, from): (i64, i64, Option<String>, Option<String>) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
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

    fn inherit_done(&self, name: &str, from: &str, to: &str, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the done intervals of `{name}` `{from}` as `{to}`'s"),
            || {
                self.write(|tx| {
                    let copied = tx.execute(
                        "INSERT INTO intervals (name, fingerprint, start_ts, end_ts, status, updated_at) \
                         SELECT name, $3, start_ts, end_ts, 'done', updated_at FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done' \
                         ON CONFLICT (name, fingerprint, start_ts) DO UPDATE SET end_ts = excluded.end_ts, status = excluded.status, updated_at = excluded.updated_at",
                        &[&name, &from, &to],
                    )?;
                    // Nothing is written into the table: `to` alone moves (as SQLite's).
                    if copied > 0 {
                        bump_own_generation(tx, name, to, &to_iso(now))?;
                    }
                    Ok(())
                })
            },
        )
    }

    fn mark_intervals(&self, name: &str, fp: &str, intervals: &[Interval], status: IntervalStatus, now: Millis) -> Result<(), StateError> {
        if intervals.is_empty() {
            return Ok(());
        }
        self.run(
            || format!("record {} interval(s) of `{name}` `{fp}` as {}", intervals.len(), status.as_str()),
            || {
                self.write(|tx| {
                    let now = to_iso(now);
                    let starts: Vec<String> = intervals.iter().map(|iv| to_iso(iv.start)).collect();
                    let ends: Vec<String> = intervals.iter().map(|iv| to_iso(iv.end)).collect();
                    // As in SQLite: the data changes when intervals are done, or when done ones
                    // are marked failed (a ledger reset).
                    let mut changed = status == IntervalStatus::Done;
                    if !changed {
                        let n: i64 = tx
                            .query_one(
                                "SELECT count(*) FROM intervals WHERE name = $1 AND fingerprint = $2 AND start_ts = ANY($3) AND status = 'done'",
                                &[&name, &fp, &starts],
                            )?
                            .try_get(0)?;
                        changed = n > 0;
                    }
                    // One statement for the whole batch; a start given twice keeps its last end.
                    tx.execute(UPSERT_INTERVALS_SQL, &[&name, &fp, &starts, &ends, &status.as_str(), &now])?;
                    if changed {
                        bump_data_generation(tx, name, fp, &now)?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// As SQLite's: under the store's write lock (the `meta` row, taken first by every data
    /// write, a restatement's too), the version's data generation is read (READ COMMITTED: every
    /// write committed before the lock was taken is seen) and compared with `seen`; the rows, the
    /// bump and the store's generation are written only when they are equal.
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
                        .query_opt("SELECT generation FROM data_versions WHERE name = $1 AND fingerprint = $2", &[&name, &fp])?
                        .map(|r| r.try_get(0))
                        .transpose()?;
                    let found = found.unwrap_or(0);
                    if found != seen {
                        return Ok(DoneMark::Moved { found });
                    }
                    let now = to_iso(now);
                    let starts: Vec<String> = intervals.iter().map(|iv| to_iso(iv.start)).collect();
                    let ends: Vec<String> = intervals.iter().map(|iv| to_iso(iv.end)).collect();
                    tx.execute(UPSERT_INTERVALS_SQL, &[&name, &fp, &starts, &ends, &IntervalStatus::Done.as_str(), &now])?;
                    bump_data_generation(tx, name, fp, &now)?;
                    tx.execute("UPDATE meta SET generation = generation + 1", &[])?;
                    Ok(DoneMark::Recorded { generation: seen + 1 })
                })
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
                    let old: Option<String> =
                        tx.query_one("SELECT max(end_ts) FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done'", &[&name, &fp])?.get(0);
                    let end = old.filter(|o| *o > to_iso(tick)).unwrap_or_else(|| to_iso(tick));
                    let start = complete.map(to_iso).filter(|c| *c < end).unwrap_or_else(|| to_iso(0));
                    tx.execute("DELETE FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done'", &[&name, &fp])?;
                    tx.execute(
                        "INSERT INTO intervals (name, fingerprint, start_ts, end_ts, status, updated_at) VALUES ($1, $2, $3, $4, 'done', $5)",
                        &[&name, &fp, &start, &end, &to_iso(now)],
                    )?;
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
                    let cleared = tx.execute(
                        "DELETE FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done' AND start_ts >= $3 AND start_ts < $4",
                        &[&name, &fp, &to_iso(from), &to_iso(to)],
                    )?;
                    if cleared > 0 {
                        bump_data_generation(tx, name, fp, &to_iso(crate::core::interval::now_millis()))?;
                    }
                    Ok(cleared as usize)
                })
            },
        )
    }

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
                self.write_tx(false, |tx| {
                    tx.execute("DELETE FROM plan_memo WHERE env = $1", &[&env])?;
                    let exists = tx.prepare("SELECT 1 FROM snapshots WHERE name = $1 AND fingerprint = $2")?;
                    for name in require_snapshot {
                        let Some(fp) = pointers.get(name) else {
                            return Err(Fault::Fail(StateError::MissingPointer { env: env.to_string(), name: name.clone() }));
                        };
                        if tx.query_opt(&exists, &[name, fp])?.is_none() {
                            return Err(Fault::Fail(StateError::MissingSnapshot { env: env.to_string(), name: name.clone(), fingerprint: fp.clone() }));
                        }
                    }
                    let at = to_iso(now);
                    let replaced: Vec<(String, String)> = pairs(&tx.query("SELECT name, fingerprint FROM environments WHERE env = $1", &[&env])?)?
                        .into_iter()
                        .filter(|(name, fp)| pointers.get(name) != Some(fp))
                        .collect();
                    let release = tx.prepare(
                        "INSERT INTO released (name, fingerprint, released_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET released_at = excluded.released_at",
                    )?;
                    for (name, fp) in &replaced {
                        tx.execute(&release, &[name, fp, &at])?;
                    }
                    tx.execute("DELETE FROM intents WHERE env = $1", &[&env])?;
                    // A promotion that creates the environment (anew, or again after the janitor
                    // dropped it) starts its run journal: ticks of runs refused while it did not
                    // exist are not its own.
                    tx.execute("DELETE FROM ticks WHERE env = $1 AND NOT EXISTS (SELECT 1 FROM environments WHERE env = $1)", &[&env])?;
                    tx.execute("DELETE FROM environments WHERE env = $1", &[&env])?;
                    tx.execute("DELETE FROM promotions WHERE env = $1", &[&env])?;
                    let insert = tx.prepare("INSERT INTO environments (env, name, fingerprint, promoted_at, metadata) VALUES ($1, $2, $3, $4, $5)")?;
                    for (name, fp) in pointers {
                        tx.execute(&insert, &[&env, name, fp, &at, &metadata.get(name).map_or("{}", String::as_str)])?;
                    }
                    let id: i64 = tx
                        .query_one(
                            "INSERT INTO plans (env, summary, applied_at, applied_by) VALUES ($1, $2, $3, $4) RETURNING id",
                            &[&env, &journal_summary.to_string(), &at, &applied_by],
                        )?
                        .try_get(0)?;
                    Ok(id)
                })
            },
        )
    }

    fn begin_promotion(&self, env: &str, pointers: &BTreeMap<String, String>, rollback: &[String], now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the promotion of environment `{env}` as under way"),
            || {
                let pointers = serde_json::to_string(pointers).map_err(|e| Fault::Corrupt(format!("cannot encode the pointers: {e}")))?;
                let rollback = serde_json::to_string(rollback).map_err(|e| Fault::Corrupt(format!("cannot encode the statements: {e}")))?;
                self.write_tx(false, |tx| {
                    tx.execute(
                        "INSERT INTO promotions (env, pointers, rollback, started_at) VALUES ($1, $2, $3, $4)",
                        &[&env, &pointers, &rollback, &to_iso(now)],
                    )?;
                    Ok(())
                })
            },
        )
    }

    fn pending_promotions(&self) -> Result<Vec<PendingPromotion>, StateError> {
        self.run(
            || "read the promotions under way".to_string(),
            || {
                let rows = self.read(|c| Ok(c.query("SELECT env, pointers, rollback, started_at FROM promotions ORDER BY env", &[])?))?;
                let mut out = Vec::new();
                for r in &rows {
                    let (env, pointers, rollback, started_at): (String, String, String, String) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
                    let corrupt = |e: serde_json::Error| Fault::Corrupt(format!("the promotion of `{env}` under way is not JSON: {e}"));
                    let pointers = serde_json::from_str(&pointers).map_err(corrupt)?;
                    let rollback = serde_json::from_str(&rollback).map_err(corrupt)?;
                    out.push(PendingPromotion { env, pointers, rollback, started_at });
                }
                Ok(out)
            },
        )
    }

    fn abandon_promotion(&self, env: &str) -> Result<(), StateError> {
        self.run(
            || format!("forget the interrupted promotion of environment `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.execute("DELETE FROM promotions WHERE env = $1", &[&env])?;
                    Ok(())
                })
            },
        )
    }

    fn journal(&self, env: &str) -> Result<Vec<JournalEntry>, StateError> {
        self.run(
            || format!("read the journal of environment `{env}`"),
            || {
                let rows = self.read(|c| Ok(c.query("SELECT id, summary, applied_at, applied_by FROM plans WHERE env = $1 ORDER BY id", &[&env])?))?;
                let mut out = Vec::new();
                for r in &rows {
                    let id: i64 = r.try_get(0)?;
                    let summary: String = r.try_get(1)?;
                    let summary = serde_json::from_str(&summary).map_err(|e| Fault::Corrupt(format!("the summary of journal row {id} is not JSON: {e}")))?;
                    out.push(JournalEntry { id, env: env.to_string(), summary, applied_at: r.try_get(2)?, applied_by: r.try_get(3)? });
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
                    if tx.query_opt("SELECT 1 FROM environments WHERE env = $1 LIMIT 1", &[&env])?.is_none() {
                        return Ok(None);
                    }
                    let summary = crate::lifecycle::invalidated_summary().to_string();
                    let id: i64 = tx
                        .query_one(
                            "INSERT INTO plans (env, summary, applied_at, applied_by) VALUES ($1, $2, $3, $4) RETURNING id",
                            &[&env, &summary, &to_iso(now), &by],
                        )?
                        .try_get(0)?;
                    Ok(Some(id))
                })
            },
        )
    }

    fn drop_environment(&self, env: &str, seen: i64, summary: &serde_json::Value, now: Millis) -> Result<bool, StateError> {
        self.run(
            || format!("drop the expired environment `{env}`"),
            || {
                self.write_tx(false, |tx| {
                    let newest: i64 = tx.query_one("SELECT coalesce(max(id), 0)::bigint FROM plans WHERE env = $1", &[&env])?.try_get(0)?;
                    let promoting = tx.query_opt("SELECT 1 FROM promotions WHERE env = $1", &[&env])?.is_some();
                    if newest != seen || promoting {
                        // Renewed (or being promoted) since it was judged: nothing is written.
                        return Ok(false);
                    }
                    let at = to_iso(now);
                    let served = pairs(&tx.query("SELECT name, fingerprint FROM environments WHERE env = $1", &[&env])?)?;
                    let release = tx.prepare(
                        "INSERT INTO released (name, fingerprint, released_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET released_at = excluded.released_at",
                    )?;
                    for (name, fp) in &served {
                        tx.execute(&release, &[name, fp, &at])?;
                    }
                    tx.execute("DELETE FROM environments WHERE env = $1", &[&env])?;
                    tx.execute("DELETE FROM intents WHERE env = $1", &[&env])?;
                    tx.execute("DELETE FROM plan_memo WHERE env = $1", &[&env])?;
                    // Its run journal goes with it: an apply creating it again starts a new one.
                    tx.execute("DELETE FROM ticks WHERE env = $1", &[&env])?;
                    tx.execute("INSERT INTO plans (env, summary, applied_at, applied_by) VALUES ($1, $2, $3, '')", &[&env, &summary.to_string(), &at])?;
                    tx.execute("UPDATE meta SET generation = generation + 1", &[])?;
                    Ok(true)
                })
            },
        )
    }

    fn export_state(&self) -> Result<super::dump::StateDump, StateError> {
        use super::dump::{Col, StateDump, TABLES};
        self.run(
            || "export the state store".to_string(),
            || {
                // One snapshot of the whole store: every table seen at the same instant.
                let mut client = self.client()?;
                let mut tx = client.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).read_only(true).start()?;
                let meta = tx.query_one("SELECT store_id, generation, claims, engine_epoch, epoch_issued, ducklake_epoch FROM meta", &[])?;
                let mut dump = StateDump {
                    store_id: meta.try_get(0)?,
                    generation: meta.try_get(1)?,
                    claims: meta.try_get(2)?,
                    engine_epoch: meta.try_get(3)?,
                    epoch_issued: meta.try_get(4)?,
                    ducklake_epoch: meta.try_get(5)?,
                    ..StateDump::default()
                };
                for t in TABLES {
                    let rows = tx.query(&format!("SELECT {} FROM {} ORDER BY {}", t.column_list(), t.name, t.order), &[])?;
                    let mut out = Vec::with_capacity(rows.len());
                    for r in &rows {
                        let mut cells = Vec::with_capacity(t.columns.len());
                        for (i, (_, col)) in t.columns.iter().enumerate() {
                            cells.push(match col {
                                Col::Int => serde_json::Value::from(r.try_get::<_, i64>(i)?),
                                Col::Text | Col::Instant | Col::Json => serde_json::Value::from(r.try_get::<_, String>(i)?),
                                Col::TextOrNull => r.try_get::<_, Option<String>>(i)?.map_or(serde_json::Value::Null, serde_json::Value::from),
                            });
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
        use super::dump::{CLEARED_ON_IMPORT, Col, TABLES};
        use postgres::types::ToSql;
        let store = self.location();
        self.run(
            || "import a state export".to_string(),
            || {
                self.write_tx(false, |tx| {
                    let unexpired = tx.query(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE expires_at > $1 ORDER BY name"), &[&to_iso(now)])?;
                    for row in &unexpired {
                        let held = lease_row(row)?;
                        if !is_stale(&held) {
                            let detail = super::lease::import_refusal(&held);
                            return Err(Fault::Fail(StateError::Import { store: store.clone(), detail }));
                        }
                    }
                    // Under the store's write lock (`meta` locked FOR UPDATE by `write_tx`), as
                    // every raise of the counter: none commits between this read and ours.
                    let found: i64 = tx.query_one("SELECT epoch_issued FROM meta", &[])?.try_get(0)?;
                    if found != issued {
                        let detail = super::import_race_refusal(issued, found);
                        return Err(Fault::Fail(StateError::Import { store: store.clone(), detail }));
                    }
                    for t in TABLES {
                        if !replace && tx.query_opt(&format!("SELECT 1 FROM {} LIMIT 1", t.name), &[])?.is_some() {
                            let detail =
                                format!("it is not empty (table `{}` has rows); import into a fresh store, or replace its content with `--force`", t.name);
                            return Err(Fault::Fail(StateError::Import { store: store.clone(), detail }));
                        }
                    }
                    for name in TABLES.iter().map(|t| t.name).chain(CLEARED_ON_IMPORT.iter().copied()) {
                        tx.execute(&format!("DELETE FROM {name}"), &[])?;
                    }
                    for t in TABLES {
                        let marks: Vec<String> = (1..=t.columns.len()).map(|i| format!("${i}")).collect();
                        // The journal and tick ids are kept: their identity columns take them as given.
                        let overriding = if t.columns.first().is_some_and(|(c, _)| *c == "id") { " OVERRIDING SYSTEM VALUE" } else { "" };
                        let insert = tx.prepare(&format!("INSERT INTO {} ({}){overriding} VALUES ({})", t.name, t.column_list(), marks.join(", ")))?;
                        for row in dump.tables.get(t.name).map(Vec::as_slice).unwrap_or_default() {
                            let values: Vec<Box<dyn ToSql + Sync>> = t
                                .columns
                                .iter()
                                .zip(row)
                                .map(|((_, col), v)| -> Box<dyn ToSql + Sync> {
                                    match col {
                                        Col::Int => Box::new(v.as_i64()),
                                        Col::Text | Col::TextOrNull | Col::Instant | Col::Json => Box::new(v.as_str().map(str::to_string)),
                                    }
                                })
                                .collect();
                            let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|b| &**b).collect();
                            tx.execute(&insert, &refs)?;
                        }
                        if !overriding.is_empty() {
                            // The next id follows the largest one imported.
                            tx.execute(
                                &format!("SELECT setval(pg_get_serial_sequence('{0}', 'id'), coalesce((SELECT max(id) FROM {0}), 0) + 1, false)", t.name),
                                &[],
                            )?;
                        }
                    }
                    tx.execute(
                        "UPDATE meta SET store_id = $1, generation = GREATEST(generation, $2) + 1, claims = GREATEST(claims, $3), engine_epoch = $4, \
                         epoch_issued = GREATEST(epoch_issued, $4::BIGINT, $5::BIGINT), ducklake_epoch = $6::BIGINT",
                        &[&dump.store_id, &dump.generation, &dump.claims, &dump.engine_epoch, &dump.epoch_issued, &dump.ducklake_epoch],
                    )?;
                    Ok(())
                })
            },
        )
    }

    fn canon_cache_get(&self, keys: &[String]) -> Result<HashMap<String, String>, StateError> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        self.run(
            || format!("read the canonicalisation cache ({} keys)", keys.len()),
            || self.read(|c| Ok(pairs(&c.query("SELECT key, canonical FROM canon_cache WHERE key = ANY($1)", &[&keys])?)?.into_iter().collect())),
        )
    }

    fn canon_cache_put(&self, entries: &[(String, String)]) -> Result<(), StateError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.run(
            || format!("write the canonicalisation cache ({} entries)", entries.len()),
            || {
                let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
                let texts: Vec<&str> = entries.iter().map(|(_, c)| c.as_str()).collect();
                self.write(|tx| {
                    tx.execute(
                        "INSERT INTO canon_cache (key, canonical) \
                         SELECT DISTINCT ON (k) k, c FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(k, c, i) ORDER BY k, i DESC \
                         ON CONFLICT (key) DO UPDATE SET canonical = excluded.canonical",
                        &[&keys, &texts],
                    )?;
                    Ok(())
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
                self.lease_tx(name, |tx| {
                    let current = tx
                        .query_opt(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = $1 FOR UPDATE"), &[&name])?
                        .map(|r| lease_row(&r))
                        .transpose()?;
                    let reclaimed = match current {
                        Some(held) if held.token == token => None,
                        Some(held) if held.expires_at.as_str() > to_iso(now).as_str() && !is_stale(&held) => return Ok(LeaseClaim::Held(held)),
                        other => other,
                    };
                    tx.execute(
                        "INSERT INTO leases (name, token, pid, host, command, started_at, expires_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                         ON CONFLICT (name) DO UPDATE SET token = excluded.token, pid = excluded.pid, host = excluded.host, command = excluded.command, \
                         started_at = excluded.started_at, expires_at = excluded.expires_at, heartbeat_at = excluded.heartbeat_at",
                        &[&name, &token, &i64::from(holder.pid), &holder.host, &holder.command, &holder.started_at, &to_iso(expires), &to_iso(now)],
                    )?;
                    Ok(LeaseClaim::Acquired { reclaimed })
                })
            },
        )
    }

    fn renew_lease(&self, name: &str, token: &str, expires: Millis, now: Millis) -> Result<bool, StateError> {
        self.run(
            || format!("renew the lock `{name}`"),
            || {
                self.lease_tx(name, |tx| {
                    let n = tx.execute(
                        "UPDATE leases SET expires_at = $3, heartbeat_at = $4 WHERE name = $1 AND token = $2",
                        &[&name, &token, &to_iso(expires), &to_iso(now)],
                    )?;
                    Ok(n == 1)
                })
            },
        )
    }

    fn release_lease(&self, name: &str, token: &str) -> Result<(), StateError> {
        self.run(
            || format!("release the lock `{name}`"),
            || {
                self.lease_tx(name, |tx| {
                    tx.execute("DELETE FROM leases WHERE name = $1 AND token = $2", &[&name, &token])?;
                    Ok(())
                })
            },
        )
    }

    fn clock(&self) -> Result<Millis, StateError> {
        self.run(|| "read the server's clock".to_string(), || self.read(|c| Ok(server_clock(c)?)))
    }

    fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StateError> {
        self.run(
            || format!("read the lock `{name}`"),
            || self.read(|c| c.query_opt(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = $1"), &[&name])?.map(|r| lease_row(&r)).transpose()),
        )
    }

    fn set_fence(&self, fence: Option<(String, String)>) {
        *self.fence.borrow_mut() = fence;
    }

    fn check_fence(&self) -> Result<(), StateError> {
        self.run(|| "check the lock this process holds".to_string(), || self.read(|c| self.fence_check(c, Some(FENCE_MARGIN_DEN), false)))
    }

    fn record_tick(&self, tick: &Tick) -> Result<i64, StateError> {
        self.run(
            || format!("record a run tick of environment `{}`", tick.env),
            || {
                let processed = serde_json::to_string(&tick.processed).map_err(|e| Fault::Corrupt(format!("cannot encode the tick: {e}")))?;
                self.read(|c| {
                    Ok(c.query_one(
                        "INSERT INTO ticks (env, started_at, finished_at, outcome, processed, detail) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                        &[&tick.env, &tick.started_at, &tick.finished_at, &tick.outcome, &processed, &tick.detail],
                    )?
                    .try_get(0)?)
                })
            },
        )
    }

    fn ticks(&self, env: &str, limit: usize) -> Result<Vec<Tick>, StateError> {
        self.run(
            || format!("read the run ticks of environment `{env}`"),
            || {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let rows = self.read(|c| {
                    Ok(c.query(
                        "SELECT id, started_at, finished_at, outcome, processed, detail FROM ticks WHERE env = $1 ORDER BY id DESC LIMIT $2",
                        &[&env, &limit],
                    )?)
                })?;
                let mut out = Vec::new();
                for r in &rows {
                    let id: i64 = r.try_get(0)?;
                    let processed: String = r.try_get(4)?;
                    let processed = serde_json::from_str(&processed).map_err(|e| Fault::Corrupt(format!("tick {id} is not JSON: {e}")))?;
                    out.push(Tick {
                        env: env.to_string(),
                        started_at: r.try_get(1)?,
                        finished_at: r.try_get(2)?,
                        outcome: r.try_get(3)?,
                        processed,
                        detail: r.try_get(5)?,
                    });
                }
                Ok(out)
            },
        )
    }

    fn schema_version(&self) -> Result<i64, StateError> {
        self.run(|| "read the layout version".to_string(), || self.read(|c| Ok(c.query_one("SELECT MAX(version) FROM meta", &[])?.try_get(0)?)))
    }

    fn restate(&self, env: &str, targets: &[RestateTarget]) -> Result<Vec<Restated>, StateError> {
        self.run(
            || format!("restate {} version(s) of environment `{env}`", targets.len()),
            || {
                self.write(|tx| {
                    let mut cleared = Vec::with_capacity(targets.len());
                    for t in targets {
                        let served: Option<String> = tx
                            .query_opt("SELECT fingerprint FROM environments WHERE env = $1 AND name = $2", &[&env, &t.name])?
                            .map(|r| r.try_get(0))
                            .transpose()?;
                        if served.as_deref() != Some(t.fingerprint.as_str()) {
                            // Returning an error rolls back every range cleared so far.
                            return Err(Fault::Fail(StateError::PointerMoved { store: self.location(), env: env.to_string(), name: t.name.clone() }));
                        }
                        let n = tx.execute(
                            "DELETE FROM intervals WHERE name = $1 AND fingerprint = $2 AND status = 'done' AND start_ts >= $3 AND start_ts < $4",
                            &[&t.name, &t.fingerprint, &to_iso(t.from), &to_iso(t.to)],
                        )?;
                        let mut fenced = false;
                        if n > 0 {
                            bump_data_generation(tx, &t.name, &t.fingerprint, &to_iso(crate::core::interval::now_millis()))?;
                        } else if tx
                            .query_opt("SELECT 1 FROM intents WHERE name = $1 AND fingerprint = $2 AND env <> $3 LIMIT 1", &[&t.name, &t.fingerprint, &env])?
                            .is_some()
                        {
                            // As SQLite's: a batch of the range may be under way in another
                            // environment's apply or run; its done record is then refused.
                            bump_own_generation(tx, &t.name, &t.fingerprint, &to_iso(crate::core::interval::now_millis()))?;
                            fenced = true;
                        }
                        cleared.push(Restated { cleared: n as usize, fenced });
                    }
                    Ok(cleared)
                })
            },
        )
    }

    fn pending_rebuilds(&self) -> Result<Vec<PendingRebuild>, StateError> {
        self.run(
            || "read the pending rebuilds".to_string(),
            || {
                self.read(|c| {
                    c.query("SELECT name, fingerprint, reason, recorded_at FROM pending_rebuilds ORDER BY recorded_at, name", &[])?
                        .iter()
                        .map(|r| Ok(PendingRebuild { name: r.try_get(0)?, fingerprint: r.try_get(1)?, reason: r.try_get(2)?, recorded_at: r.try_get(3)? }))
                        .collect()
                })
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
                    let insert = tx.prepare(
                        "INSERT INTO pending_rebuilds (name, fingerprint, reason, recorded_at) VALUES ($1, $2, $3, $4) ON CONFLICT (name, fingerprint) DO NOTHING",
                    )?;
                    let at = to_iso(now);
                    for (name, fp, reason) in rebuilds {
                        tx.execute(&insert, &[name, fp, reason, &at])?;
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
                    tx.execute("DELETE FROM pending_rebuilds WHERE name = $1 AND fingerprint = $2", &[&name, &fp])?;
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
                    tx.execute(
                        "INSERT INTO intents (env, name, fingerprint, physical, recorded_at) VALUES ($1, $2, $3, $4, $5) \
                         ON CONFLICT (env, name, fingerprint) DO UPDATE SET physical = excluded.physical",
                        &[&env, &copy.name, &copy.mark(), &copy.physical, &to_iso(now)],
                    )?;
                    Ok(())
                })
            },
        )
    }

    fn kept_copies(&self, env: &str) -> Result<Vec<super::KeptCopy>, StateError> {
        self.run(
            || format!("read the tables the last apply of `{env}` copied"),
            || {
                self.read(|c| {
                    let mut out = Vec::new();
                    for r in c.query("SELECT name, fingerprint, physical FROM intents WHERE env = $1 ORDER BY name", &[&env])? {
                        let (name, mark, physical): (String, String, String) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
                        out.extend(super::KeptCopy::from_mark(name, &mark, physical));
                    }
                    Ok(out)
                })
            },
        )
    }

    fn record_intents(&self, env: &str, intents: &[Intent], now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record what the apply of environment `{env}` relies on"),
            || {
                self.write_tx(false, |tx| {
                    let condemned = tx.prepare("SELECT 1 FROM condemned WHERE physical = $1")?;
                    let exists = tx.prepare("SELECT 1 FROM snapshots WHERE name = $1 AND fingerprint = $2")?;
                    for i in intents {
                        let why = if !i.physical.is_empty() && tx.query_opt(&condemned, &[&i.physical])?.is_some() {
                            Some(format!("its storage {} is claimed", i.physical))
                        } else if i.must_exist && tx.query_opt(&exists, &[&i.name, &i.fingerprint])?.is_none() {
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
                    tx.execute("DELETE FROM intents WHERE env = $1", &[&env])?;
                    let insert = tx.prepare(
                        "INSERT INTO intents (env, name, fingerprint, physical, recorded_at) VALUES ($1, $2, $3, $4, $5) \
                         ON CONFLICT (env, name, fingerprint) DO UPDATE SET physical = excluded.physical",
                    )?;
                    let at = to_iso(now);
                    for i in intents {
                        tx.execute(&insert, &[&env, &i.name, &i.fingerprint, &i.physical, &at])?;
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
                    tx.execute("DELETE FROM intents WHERE env = $1", &[&env])?;
                    Ok(())
                })
            },
        )
    }

    fn janitor_inventory(&self) -> Result<JanitorInventory, StateError> {
        self.run(
            || "read what the janitor decides from".to_string(),
            || {
                // One snapshot of the whole store: every table seen at the same instant.
                let mut client = self.client()?;
                let mut tx = client.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).read_only(true).start()?;
                let inv = inventory_on(&mut tx)?;
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
                    let inv = inventory_on(tx)?;
                    let claims = decide(&inv);
                    if claims.is_empty() {
                        return Ok(claims);
                    }
                    let at = to_iso(now);
                    for c in &claims {
                        for (name, fp) in &c.versions {
                            for table in ["snapshots", "intervals", "released", "pending_rebuilds", "data_versions", "audit_passes"] {
                                tx.execute(&format!("DELETE FROM {table} WHERE name = $1 AND fingerprint = $2"), &[name, fp])?;
                            }
                        }
                        if let Some(s) = &c.storage {
                            tx.execute(
                                "INSERT INTO condemned (physical, name, fingerprint, kind, detail, claimed_at) VALUES ($1, $2, $3, $4, $5, $6) \
                                 ON CONFLICT (physical) DO NOTHING",
                                &[&s.physical, &s.name, &s.fingerprint, &s.kind, &s.detail.to_string(), &at],
                            )?;
                        }
                    }
                    tx.execute("DELETE FROM plan_memo", &[])?;
                    tx.execute("UPDATE meta SET claims = claims + 1", &[])?;
                    Ok(claims)
                })
            },
        )
    }

    fn release_condemned(&self, physical: &str) -> Result<(), StateError> {
        self.run(
            || format!("forget the claim on `{physical}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.execute("DELETE FROM condemned WHERE physical = $1", &[&physical])?;
                    tx.execute("DELETE FROM orphans_seen WHERE physical = $1", &[&physical])?;
                    Ok(())
                })
            },
        )
    }

    fn store_id(&self) -> Result<String, StateError> {
        self.run(
            || "read the store's identity".to_string(),
            || {
                let id: String = self.read(|c| Ok(c.query_one("SELECT store_id FROM meta", &[])?.try_get(0)?))?;
                if id.is_empty() {
                    return Err(Fault::Corrupt("`meta.store_id` is empty (the store has no identity)".to_string()));
                }
                Ok(id)
            },
        )
    }

    fn engine_epoch(&self) -> Result<i64, StateError> {
        self.run(|| "read the engine epoch".to_string(), || self.read(|c| Ok(c.query_one("SELECT engine_epoch FROM meta", &[])?.try_get(0)?)))
    }

    fn ducklake_epoch(&self) -> Result<i64, StateError> {
        self.run(|| "read the DuckLake epoch".to_string(), || self.read(|c| Ok(c.query_one("SELECT ducklake_epoch FROM meta", &[])?.try_get(0)?)))
    }

    fn epoch_issued(&self) -> Result<i64, StateError> {
        self.run(|| "read the issued engine epoch".to_string(), || self.read(|c| Ok(c.query_one("SELECT epoch_issued FROM meta", &[])?.try_get(0)?)))
    }

    fn issue_epoch(&self, found: i64) -> Result<super::IssuedEpoch, StateError> {
        self.run(
            || "issue an engine epoch".to_string(),
            || {
                // The store's write lock (`meta` row locked FOR UPDATE) is held from the read of
                // the counter to the commit of its raise: no two writers get the same number.
                self.write_tx(false, |tx| {
                    let before: i64 = tx.query_one("SELECT epoch_issued FROM meta", &[])?.try_get(0)?;
                    let epoch: i64 = tx
                        .query_one("UPDATE meta SET epoch_issued = GREATEST(epoch_issued, engine_epoch, $1::BIGINT) + 1 RETURNING epoch_issued", &[&found])?
                        .try_get(0)?;
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
                    tx.execute(
                        "UPDATE meta SET engine_epoch = GREATEST(engine_epoch, $1), epoch_issued = GREATEST(epoch_issued, $1), \
                         ducklake_epoch = GREATEST(ducklake_epoch, COALESCE($2::BIGINT, 0))",
                        &[&epoch, &ducklake],
                    )?;
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
                    let seen: BTreeMap<String, String> = pairs(&tx.query("SELECT physical, first_seen FROM orphans_seen", &[])?)?.into_iter().collect();
                    let wanted: BTreeSet<&String> = present.iter().collect();
                    let gone: Vec<&String> = seen.keys().filter(|p| !wanted.contains(p)).collect();
                    if !gone.is_empty() {
                        tx.execute("DELETE FROM orphans_seen WHERE physical = ANY($1)", &[&gone])?;
                    }
                    let mut out = BTreeMap::new();
                    for p in present {
                        let first = match seen.get(p) {
                            Some(f) => f.clone(),
                            None => {
                                tx.execute("INSERT INTO orphans_seen (physical, first_seen) VALUES ($1, $2) ON CONFLICT (physical) DO NOTHING", &[p, &at])?;
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
            || self.read(|c| Ok(pairs(&c.query("SELECT physical, first_seen FROM orphans_seen", &[])?)?.into_iter().collect())),
        )
    }

    fn data_versions(&self, keys: &[(String, String)]) -> Result<HashMap<(String, String), DataVersion>, StateError> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        self.run(
            || format!("read the data generations of {} version(s)", keys.len()),
            || {
                let names: Vec<&str> = keys.iter().map(|(n, _)| n.as_str()).collect();
                let fps: Vec<&str> = keys.iter().map(|(_, f)| f.as_str()).collect();
                let rows = self.read(|c| {
                    Ok(c.query(
                        "SELECT d.name, d.fingerprint, d.generation, d.built_from FROM data_versions d \
                         JOIN unnest($1::text[], $2::text[]) AS k(name, fingerprint) ON d.name = k.name AND d.fingerprint = k.fingerprint",
                        &[&names, &fps],
                    )?)
                })?;
                rows.iter().map(|r| Ok(((r.try_get(0)?, r.try_get(1)?), DataVersion { generation: r.try_get(2)?, built_from: r.try_get(3)? }))).collect()
            },
        )
    }

    fn audit_pass(&self, name: &str, fp: &str) -> Result<Option<AuditPass>, StateError> {
        self.run(
            || format!("read the audits passed on `{name}` `{fp}`"),
            || {
                self.read(|c| {
                    c.query_opt("SELECT digest, generation FROM audit_passes WHERE name = $1 AND fingerprint = $2", &[&name, &fp])?
                        .map(|r| Ok(AuditPass { digest: r.try_get(0)?, generation: r.try_get(1)? }))
                        .transpose()
                })
            },
        )
    }

    fn record_audit_pass(&self, name: &str, fp: &str, pass: &AuditPass, now: Millis) -> Result<(), StateError> {
        self.run(
            || format!("record the audits passed on `{name}` `{fp}`"),
            || {
                self.write_tx(false, |tx| {
                    tx.execute(
                        "INSERT INTO audit_passes (name, fingerprint, digest, generation, passed_at) VALUES ($1, $2, $3, $4, $5) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET digest = excluded.digest, generation = excluded.generation, passed_at = excluded.passed_at",
                        &[&name, &fp, &pass.digest, &pass.generation, &to_iso(now)],
                    )?;
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
                    if !rec.physical.is_empty() {
                        tx.execute(UNTRUE_SHARERS_SQL, &[&rec.name, &rec.fingerprint, &rec.physical])?;
                    }
                    let set = tx.prepare("UPDATE data_versions SET built_from = $3 WHERE name = $1 AND fingerprint = $2")?;
                    tx.execute(&set, &[&rec.name, &rec.fingerprint, &built_from])?;
                    for (name, fp, from) in sharers {
                        tx.execute(&set, &[name, fp, from])?;
                    }
                    tx.execute("DELETE FROM pending_rebuilds WHERE name = $1 AND fingerprint = $2", &[&rec.name, &rec.fingerprint])?;
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
                    tx.execute(
                        "INSERT INTO data_versions (name, fingerprint, generation, built_from, updated_at) VALUES ($1, $2, 0, $3, $4) \
                         ON CONFLICT (name, fingerprint) DO UPDATE SET built_from = excluded.built_from, updated_at = excluded.updated_at",
                        &[&rec.name, &rec.fingerprint, &built_from, &to_iso(now)],
                    )?;
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
                    let marked = tx
                        .query(MARKED_SQL, &[&name, &fp])?
                        .iter()
                        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                        .collect::<Result<Vec<_>, Fault>>()?;
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
                    let back = tx.prepare(
                        "UPDATE data_versions SET generation = generation - 1, updated_at = $4 WHERE name = $1 AND fingerprint = $2 AND generation = $3",
                    )?;
                    for (n, f, g) in &write.marked {
                        tx.execute(&back, &[n, f, g, &to_iso(now)])?;
                    }
                    Ok(())
                })
            },
        )
    }
}

/// Writes snapshot `rec` unless `(name, fingerprint)` is stored (the first payload is kept).
fn insert_snapshot(tx: &mut Transaction<'_>, rec: &SnapshotRecord) -> Result<(), Fault> {
    let version = i64::from(rec.fingerprint_version);
    let metadata = rec.metadata.to_string();
    let params: [&(dyn ToSql + Sync); 9] =
        [&rec.name, &rec.fingerprint, &version, &rec.kind, &rec.physical, &rec.canonical, &rec.rendered_sql, &metadata, &rec.created_at];
    tx.execute(
        "INSERT INTO snapshots (name, fingerprint, fingerprint_version, kind, physical, canonical, rendered_sql, metadata, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name, fingerprint) DO NOTHING",
        &params,
    )?;
    Ok(())
}

/// Records the ledger rows `($1 name, $2 fingerprint, $3 starts, $4 ends, $5 status, $6 at)` in
/// one statement, as SQLite's one row at a time: a row with the same start is replaced; a start
/// given twice keeps its last end.
const UPSERT_INTERVALS_SQL: &str = "INSERT INTO intervals (name, fingerprint, start_ts, end_ts, status, updated_at) \
     SELECT DISTINCT ON (s) $1, $2, s, e, $5, $6 FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS t(s, e, i) ORDER BY s, i DESC \
     ON CONFLICT (name, fingerprint, start_ts) DO UPDATE SET end_ts = excluded.end_ts, status = excluded.status, updated_at = excluded.updated_at";

/// Bumps the data generation of `(name, fp)` and of every other version on its table, as SQLite.
fn bump_data_generation(tx: &mut Transaction<'_>, name: &str, fp: &str, at: &str) -> Result<(), Fault> {
    bump_own_generation(tx, name, fp, at)?;
    tx.execute(BUMP_SHARERS_SQL, &[&name, &fp, &at])?;
    Ok(())
}

/// Bumps the data generation of `(name, fp)` alone, as SQLite's: a change of its own ledger that
/// writes nothing into its table ([`StateStore::inherit_done`]).
fn bump_own_generation(tx: &mut Transaction<'_>, name: &str, fp: &str, at: &str) -> Result<(), Fault> {
    tx.execute(
        "INSERT INTO data_versions (name, fingerprint, generation, updated_at) VALUES ($1, $2, 1, $3) \
         ON CONFLICT (name, fingerprint) DO UPDATE SET generation = data_versions.generation + 1, updated_at = excluded.updated_at",
        &[&name, &fp, &at],
    )?;
    Ok(())
}

/// As SQLite's: bumps the generation of every other version on the table of `($1, $2)`.
const BUMP_SHARERS_SQL: &str = "INSERT INTO data_versions (name, fingerprint, generation, updated_at) \
     SELECT s.name, s.fingerprint, 1, $3 FROM snapshots s \
     WHERE s.physical <> '' AND s.physical = (SELECT o.physical FROM snapshots o WHERE o.name = $1 AND o.fingerprint = $2) \
     AND NOT (s.name = $1 AND s.fingerprint = $2) \
     ON CONFLICT (name, fingerprint) DO UPDATE SET generation = data_versions.generation + 1, updated_at = excluded.updated_at";

/// As SQLite's: makes untrue the `full` build record of every version on the table `$3` but `($1, $2)`.
const UNTRUE_SHARERS_SQL: &str = "UPDATE data_versions SET built_from = '\"rebuilt for another version\"' \
     WHERE built_from IS NOT NULL AND NOT (name = $1 AND fingerprint = $2) \
     AND (name, fingerprint) IN (SELECT s.name, s.fingerprint FROM snapshots s WHERE s.physical = $3)";

/// As SQLite's: the generations of `($1, $2)` and of every version on its table.
const MARKED_SQL: &str = "SELECT d.name, d.fingerprint, d.generation FROM data_versions d WHERE d.name = $1 AND d.fingerprint = $2 \
     UNION SELECT d.name, d.fingerprint, d.generation FROM snapshots s \
     JOIN data_versions d ON d.name = s.name AND d.fingerprint = s.fingerprint \
     WHERE s.physical <> '' AND s.physical = (SELECT o.physical FROM snapshots o WHERE o.name = $1 AND o.fingerprint = $2) \
     ORDER BY 1, 2";

/// The janitor's inventory, read on `conn` (inside one transaction).
fn inventory_on<C: GenericClient>(conn: &mut C) -> Result<JanitorInventory, Fault> {
    let mut inv = JanitorInventory::default();
    for r in conn.query(
        "SELECT s.name, s.fingerprint, s.kind, s.physical, s.created_at, r.released_at FROM snapshots s \
         LEFT JOIN released r ON r.name = s.name AND r.fingerprint = s.fingerprint ORDER BY s.name, s.fingerprint",
        &[],
    )? {
        inv.versions.push(VersionRow {
            name: r.try_get(0)?,
            fingerprint: r.try_get(1)?,
            kind: r.try_get(2)?,
            physical: r.try_get(3)?,
            created_at: r.try_get(4)?,
            released_at: r.try_get(5)?,
        });
    }
    inv.served = pairs(&conn.query("SELECT name, fingerprint FROM environments", &[])?)?.into_iter().collect();
    for (env, pointers) in pairs(&conn.query("SELECT env, pointers FROM promotions", &[])?)? {
        let pointers: BTreeMap<String, String> =
            serde_json::from_str(&pointers).map_err(|e| Fault::Corrupt(format!("the promotion of `{env}` under way is not JSON: {e}")))?;
        inv.pending.extend(pointers);
    }
    for r in conn.query("SELECT name, fingerprint, physical FROM intents", &[])? {
        let physical: String = r.try_get(2)?;
        if !physical.is_empty() {
            inv.intent_physicals.insert(physical);
        }
        inv.intents.insert((r.try_get(0)?, r.try_get(1)?));
    }
    for r in conn.query("SELECT physical, name, fingerprint, kind, detail, claimed_at FROM condemned ORDER BY physical", &[])? {
        let physical: String = r.try_get(0)?;
        let detail: String = r.try_get(4)?;
        let detail = serde_json::from_str(&detail).map_err(|e| Fault::Corrupt(format!("the claim of `{physical}` has a detail that is not JSON: {e}")))?;
        inv.condemned.push(Condemned { physical, name: r.try_get(1)?, fingerprint: r.try_get(2)?, kind: r.try_get(3)?, detail, claimed_at: r.try_get(5)? });
    }
    Ok(inv)
}

/// Upgrades the Postgres store in `schema` at `url` to [`STATE_VERSION`]: every missing step of
/// [`PG_MIGRATIONS`] in ONE transaction, under the store's layout lock, the version re-read
/// there. No backup is taken (there is no file to copy: take one with `pg_dump --schema` first);
/// DDL is transactional in Postgres, so a failure leaves the store as it was. A current store is
/// left untouched.
///
/// # Errors
/// [`StateError::Version`] for a store newer than this efmesh, one that is not a store (version
/// 0) or one older than any Postgres layout; [`StateError::Open`] when there is no store or the
/// database cannot be reached; [`StateError::Backend`] when a migration fails.
pub fn migrate(url: &str, schema: &str, now: Millis) -> Result<MigrationReport, StateError> {
    let _ = now;
    let config: postgres::Config =
        url.parse().map_err(|e| StateError::Open { store: format!("a Postgres database, schema {schema}"), source: scrubbed(&e, None), transient: false })?;
    let store = describe(&config, schema);
    let secret = crate::pg::secret(&config);
    let open_err = |e: postgres::Error| open_error(&store, &e, secret.as_deref());
    let backend =
        |op: &str, e: postgres::Error| StateError::Backend { store: store.clone(), op: op.to_string(), transient: is_transient(&e), source: Box::new(e) };
    let mut client = crate::pg::connect(config).map_err(|e| match e {
        crate::pg::ConnectError::Driver(e) => open_err(e),
        e @ (crate::pg::ConnectError::NoAnswer { .. } | crate::pg::ConnectError::Panicked) => no_answer(&store, &e),
    })?;
    client.batch_execute(&format!("SET lock_timeout = '{LOCK_TIMEOUT}'; SET search_path TO {}", quoted(schema))).map_err(&open_err)?;
    let mut tx = client.transaction().map_err(|e| backend("start the migration", e))?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&lock_key(schema, "layout")]).map_err(|e| backend("lock the layout", e))?;
    let Some(from) = stored_version(&mut tx, schema).map_err(|e| backend("read the layout version", e))? else {
        return Err(StateError::Open { store: store.clone(), source: format!("no state store in schema `{schema}`").into(), transient: false });
    };
    if from == STATE_VERSION {
        return Ok(MigrationReport { store, from, to: STATE_VERSION, applied: Vec::new(), backup: None });
    }
    let steps: Vec<&Migration> = PG_MIGRATIONS.iter().filter(|m| m.to > from).collect();
    let chained = steps.iter().enumerate().all(|(i, m)| m.to == from + 1 + i as i64) && steps.last().is_some_and(|m| m.to == STATE_VERSION);
    if !(PG_FIRST_VERSION..STATE_VERSION).contains(&from) || !chained {
        return Err(StateError::Version { store, found: from, wanted: STATE_VERSION });
    }
    let mut applied = Vec::new();
    for m in steps {
        tx.batch_execute(m.sql).map_err(|e| backend(&format!("migrate to version {} ({})", m.to, m.description), e))?;
        applied.push(m.to);
    }
    tx.commit().map_err(|e| backend("commit the migration", e))?;
    Ok(MigrationReport { store, from, to: STATE_VERSION, applied, backup: None })
}
