//! The Postgres engine: models run on a Postgres database (`[engine] url_env`).
//!
//! One connection per [`Postgres`] (a worker of a parallel apply opens its own). Every session
//! runs with `TimeZone = 'UTC'` (as DuckDB's), so naive bound literals compare as they do there.
//! Statements are spelled by [`super::dialect::Standard`]; what Postgres does differently from
//! DuckDB lives here and in that dialect:
//! - `describe` prepares the query and reads its result columns (nothing runs); their types are
//!   named in SQL's spelling ([`type_name`]) so the contract's type families apply;
//! - identifiers are at most 63 bytes ([`MAX_IDENTIFIER_BYTES`]): longer physical names are
//!   shortened by the planner ([`crate::sql::fingerprint::physical_table_within`]);
//! - the owner marker and the storage-use records are rows of two tables in schema
//!   `_efmesh_meta` (DuckDB keeps them as sequences, whose names would pass the limit here);
//! - a scratch database ([`super::Access::Scratch`], unit tests) is a database created for the
//!   session and dropped when it ends.

use super::{DescribedColumn, Engine, EngineError};
use crate::core::name::{quote_ident, quote_literal};
use std::sync::atomic::{AtomicBool, Ordering};

/// Postgres's limit on identifiers (`NAMEDATALEN - 1`); longer ones are truncated by the server
/// with only a notice, so efmesh never sends one.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// The schema of efmesh's own records in a Postgres engine database (owner marker, storage uses).
pub const META_SCHEMA: &str = "_efmesh_meta";

/// The key of efmesh's writer lock on a Postgres engine database ([`Postgres::open_writer`]).
const WRITER_LOCK: &str = "efmesh engine writer";

/// The key every writing connection of the writer holds shared ([`Postgres::open_writer`]): a
/// new writer takes it exclusively once, so it never starts while connections of an earlier
/// writer whose lock connection ended are still writing.
const WRITING_LOCK: &str = "efmesh engine writing";

/// A Postgres database.
pub struct Postgres {
    client: postgres::Client,
    config: postgres::Config,
    /// The database as messages name it (no password).
    location: String,
    /// The password, scrubbed from every message.
    secret: Option<String>,
    read_only: bool,
    /// This read-only session waits at most [`READ_LOCK_TIMEOUT`] for a lock (the running
    /// command writes nothing: [`bound_lock_waits`]).
    bounded: bool,
    /// The writer's backend process id, on the writer's connection and its workers'
    /// ([`Postgres::open_writer`]): a worker holds [`WRITING_LOCK`] shared only while that
    /// backend still holds the writer lock.
    writer: Option<i64>,
    /// `server_version_num`, when the server says it.
    server_version: Option<u32>,
    /// A scratch database this session created: dropped, through a connection to the database
    /// the URL names, when this value is dropped.
    scratch: Option<(postgres::Config, String)>,
    /// The server refuses unnamed subqueries in `FROM` (before Postgres 16).
    names_subqueries: bool,
    /// The server's notice that it cut an identifier to 63 bytes, if one came since the last
    /// check ([`Postgres::check_cut`]).
    cut: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Postgres({})", self.location)
    }
}

static SCRATCH_COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Postgres {
    /// Connects to the database at `url` (a `postgres://` URL or a `key=value` string);
    /// `read_only` sessions cannot write (`default_transaction_read_only`).
    ///
    /// # Errors
    /// [`EngineError`] naming the database (never the password) and why.
    pub fn open(url: &str, read_only: bool) -> Result<Self, EngineError> {
        let config = crate::pg::parse(url).map_err(|e| EngineError::new("", format!("cannot open the Postgres engine database: {e}")))?;
        Self::connect(config, read_only)
    }

    /// [`Postgres::open`] for writing, as the one writer efmesh allows per database: the
    /// session takes efmesh's writer lock (a session advisory lock, released when the
    /// connection ends, a killed process's too), as DuckDB allows one writing process per file.
    /// Two applies of different environments could otherwise build the same version at once.
    /// The lock lives on this connection, idle while `--jobs` workers build on theirs: were it to
    /// end (a server's `idle_session_timeout`, which efmesh's writing sessions turn off, a proxy, an
    /// administrator), another process could take the lock while those workers still write. So
    /// every writing connection of the writer (this one and each worker's) also holds a second
    /// lock shared, and a new writer first takes that one exclusively, for a moment: it refuses
    /// while any connection of an earlier writer is alive.
    ///
    /// # Errors
    /// As [`Postgres::open`]; another process holding either lock after a second of asking
    /// ([`Postgres::try_lock_awhile`]) fails with a message `apply --retries` treats as transient
    /// (`Lock Error: …`). A writer that let go within that second may have written the state
    /// store meanwhile: the caller's plan is then stale, which `--retries` also plans again.
    pub fn open_writer(url: &str) -> Result<Self, EngineError> {
        let mut db = Self::open(url, false)?;
        let busy = |db: &Postgres, why: &str| {
            EngineError::new("", format!("cannot open Postgres database `{}`: Lock Error: {why}; try again when it is done", db.location))
        };
        if !db.try_lock_awhile(&format!("pg_try_advisory_lock(hashtextextended({}, 0))", quote_literal(WRITER_LOCK)))? {
            return Err(busy(&db, "another efmesh process is writing this database (it holds efmesh's writer lock)"));
        }
        let writing = quote_literal(WRITING_LOCK);
        if !db.try_lock_awhile(&format!("pg_try_advisory_lock(hashtextextended({writing}, 0))"))? {
            return Err(busy(
                &db,
                "connections of another efmesh process are still writing this database (its connection holding efmesh's writer lock ended, its builds have not)",
            ));
        }
        db.execute(&format!("SELECT pg_advisory_unlock(hashtextextended({writing}, 0)), pg_advisory_lock_shared(hashtextextended({writing}, 0))"))?;
        let pid = db.rows("SELECT pg_backend_pid()")?;
        db.writer = pid.first().and_then(|r| r.first().cloned().flatten()).and_then(|p| p.parse().ok());
        db.keep_when_idle();
        Ok(db)
    }

    /// On a worker of the writer whose backend is `writer`: takes [`WRITING_LOCK`] shared, then
    /// checks that the writer's backend still holds the writer lock; when it does not (its
    /// connection ended: another process may be writing already), lets the lock go and refuses.
    /// In that order, a new writer either finds this worker's lock (and refuses) or has the
    /// writer lock, which this check then sees the old writer lacks.
    fn join_writer(&mut self, writer: i64) -> Result<(), EngineError> {
        let writing = quote_literal(WRITING_LOCK);
        if !self.try_lock(&format!("pg_try_advisory_lock_shared(hashtextextended({writing}, 0))"))? {
            return Err(EngineError::new("", "another efmesh process holds the writing lock of this database".to_string()));
        }
        let held = self.try_lock(&format!(
            "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND granted AND pid = {writer} AND objsubid = 1 \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended({}, 0))",
            quote_literal(WRITER_LOCK)
        ))?;
        if !held {
            self.execute(&format!("SELECT pg_advisory_unlock_shared(hashtextextended({writing}, 0))"))?;
            return Err(EngineError::new("", "the writer's connection no longer holds efmesh's writer lock (it ended)".to_string()));
        }
        self.writer = Some(writer);
        self.keep_when_idle();
        Ok(())
    }

    /// Runs `SELECT <call>` of a `pg_try_advisory_lock…` function: whether it got the lock.
    fn try_lock(&mut self, call: &str) -> Result<bool, EngineError> {
        let got = self.rows(&format!("SELECT {call}"))?;
        Ok(got.first().and_then(|r| r.first().cloned().flatten()).as_deref() == Some("t"))
    }

    /// [`Postgres::try_lock`], asked again for up to a second: a process that just ended (killed,
    /// or exited) holds its session locks a moment longer — its server session ends when the
    /// server notices the closed connection. A live writer holds them far longer.
    fn try_lock_awhile(&mut self, call: &str) -> Result<bool, EngineError> {
        for _ in 0..20 {
            if self.try_lock(call)? {
                return Ok(true);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.try_lock(call)
    }

    fn connect(config: postgres::Config, read_only: bool) -> Result<Self, EngineError> {
        let location = crate::pg::describe(&config);
        let secret = crate::pg::secret(&config);
        // Postgres cuts an identifier longer than 63 bytes with only a notice: caught here and
        // turned into an error by `check_cut` (two long names cut alike would be one relation).
        let cut = std::sync::Arc::new(std::sync::Mutex::new(None));
        let mut with_notices = config.clone();
        let seen = cut.clone();
        with_notices.notice_callback(move |notice| {
            if *notice.code() == postgres::error::SqlState::NAME_TOO_LONG {
                *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(notice.message().to_string());
            }
        });
        let client = crate::pg::connect(with_notices).map_err(|e| {
            let error = EngineError::new("", format!("cannot open Postgres database `{location}`: {}", crate::pg::scrubbed(&e, secret.as_deref())));
            // A server starting or shutting down, or out of connections, may take us later; an
            // unreachable or silent host or a refused login will not.
            if e.is_transient_refusal() { error.transient() } else { error }
        })?;
        let bounded = read_only && lock_waits_bounded();
        let mut db =
            Self { client, config, location, secret, read_only, bounded, writer: None, server_version: None, scratch: None, names_subqueries: false, cut };
        let setup = session_setup(read_only, bounded);
        db.execute(&setup)?;
        let version = db.rows("SHOW server_version_num")?;
        let version = version.first().and_then(|r| r.first().cloned().flatten()).and_then(|v| v.parse::<u32>().ok());
        db.names_subqueries = version.is_none_or(|v| v < 160_000);
        db.server_version = version;
        Ok(db)
    }

    /// A writing connection idle while others build (the writer's, holding its lock) must not
    /// be closed by the server's `idle_session_timeout` (Postgres 14 and later): turned off for
    /// this session, or a warning when the server (a pooler) refuses.
    fn keep_when_idle(&mut self) {
        if self.server_version.is_some_and(|v| v >= 140_000)
            && let Err(e) = self.execute("SET idle_session_timeout = 0")
        {
            tracing::warn!("cannot turn off `idle_session_timeout` for efmesh's writing session: {}", e.message);
        }
    }

    /// An error when the server cut an identifier since the last check (`sql` ran with it).
    fn check_cut(&mut self, sql: &str) -> Result<(), EngineError> {
        match self.cut.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            Some(notice) => Err(EngineError::new(
                sql,
                format!("Postgres cut an identifier longer than {MAX_IDENTIFIER_BYTES} bytes ({notice}); efmesh never uses a cut name: shorten the name"),
            )),
            None => Ok(()),
        }
    }

    /// `sql`, with its unnamed `FROM` subqueries named when the server needs it.
    fn fixed(&self, sql: &str) -> Option<String> {
        if self.names_subqueries { with_subquery_aliases(sql) } else { None }
    }

    /// A new, empty database on the server of `url`, for this session alone (unit tests):
    /// created now, dropped when the returned value is dropped.
    ///
    /// # Errors
    /// [`EngineError`]: the server cannot be reached, or the role may not create databases.
    pub fn scratch(url: &str) -> Result<Self, EngineError> {
        let config = crate::pg::parse(url).map_err(|e| EngineError::new("", format!("cannot open the Postgres engine database: {e}")))?;
        let mut admin = Self::connect(config.clone(), false)?;
        admin.drop_abandoned_scratch();
        let n = SCRATCH_COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("efmesh_scratch_{}_{}_{n}", std::process::id(), crate::core::interval::now_millis());
        tracing::info!(database = %name, "unit tests run in a scratch database, dropped when they end");
        admin.execute(&format!("CREATE DATABASE {}", quote_ident(&name))).map_err(|e| EngineError {
            message: format!("{} (unit tests on Postgres run in a database created for them: the role needs CREATEDB)", e.message),
            ..e
        })?;
        let mut scratch_config = config.clone();
        scratch_config.dbname(&name);
        match Self::connect(scratch_config, false) {
            Ok(mut db) => {
                db.scratch = Some((config, name));
                Ok(db)
            }
            Err(e) => {
                let _ = admin.execute(&format!("DROP DATABASE IF EXISTS {}", quote_ident(&name)));
                Err(e)
            }
        }
    }

    /// Drops the scratch databases a killed run left behind: named `efmesh_scratch_<pid>_<ms>_<n>`,
    /// created more than [`SCRATCH_ABANDONED_MS`] ago by their name's clock, and with no session
    /// connected (a live run holds its connection for as long as it uses the database; one that
    /// has just been created is younger than the margin). Best effort: a database someone
    /// connects to meanwhile is not dropped (no `FORCE`), and failures only log.
    fn drop_abandoned_scratch(&mut self) {
        let listed = self.rows(
            "SELECT d.datname FROM pg_database AS d WHERE d.datname LIKE 'efmesh\\_scratch\\_%' \
             AND NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.datname = d.datname)",
        );
        let now = crate::core::interval::now_millis();
        for name in listed.unwrap_or_default().into_iter().filter_map(|r| r.into_iter().next().flatten()) {
            let created = name.strip_prefix("efmesh_scratch_").and_then(|rest| rest.split('_').nth(1)).and_then(|ms| ms.parse::<i64>().ok());
            if created.is_some_and(|ms| now - ms > SCRATCH_ABANDONED_MS) {
                match self.client.batch_execute(&format!("DROP DATABASE IF EXISTS {}", quote_ident(&name))) {
                    Ok(()) => tracing::info!(database = %name, "dropped a scratch database a killed run left behind"),
                    Err(e) => tracing::debug!(database = %name, "not dropped: {e}"),
                }
            }
        }
    }

    fn error(&self, sql: &str, e: &postgres::Error) -> EngineError {
        // A server error's own message, without the driver's `db error: ` prefix.
        let message = match e.as_db_error() {
            Some(db) => {
                let mut m = format!("{}: {}", db.severity(), db.message());
                if let Some(detail) = db.detail() {
                    m.push_str(&format!("\n  detail: {}", detail.replace('\n', "\n    ")));
                }
                let ours = refusal_hint(db.code(), db.message(), !self.read_only, &self.location, (self.config.get_user(), self.config.get_dbname()));
                if *db.code() == postgres::error::SqlState::DEPENDENT_OBJECTS_STILL_EXIST {
                    // The server suggests `CASCADE`, which would drop what others serve.
                    m.push_str("\n  hint: drop or re-point the dependent views named above first (efmesh never drops with CASCADE)");
                } else if let Some(hint) = ours {
                    m.push_str(&format!("\n  hint: {hint}"));
                } else if let Some(hint) = db.hint() {
                    m.push_str(&format!("\n  hint: {hint}"));
                }
                // Where in the statement, as DuckDB's excerpt says it (`LINE n: …`): the model's
                // file:line is found from it ([`super::error_line`]).
                if let Some(postgres::error::ErrorPosition::Original(pos)) = db.position() {
                    let before: String = sql.chars().take((*pos as usize).saturating_sub(1)).collect();
                    let line = before.matches('\n').count() + 1;
                    let text = sql.lines().nth(line - 1).unwrap_or_default().trim_end();
                    m.push_str(&format!("\n\nLINE {line}: {text}"));
                }
                m
            }
            None => crate::pg::scrubbed(e, self.secret.as_deref()),
        };
        let mut error = EngineError::new(sql, crate::pg::redact_passwords(&message, self.secret.as_deref()));
        error.code = e.code().map(|c| c.code().to_string());
        if crate::pg::is_transient(e) { error.transient() } else { error }
    }

    fn rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        tracing::debug!(sql, "query");
        let fixed = self.fixed(sql);
        let result = self.client.simple_query(fixed.as_deref().unwrap_or(sql));
        let messages = match result {
            Ok(messages) => messages,
            Err(e) => return Err(self.failed(sql, &e)),
        };
        self.check_cut(sql)?;
        Ok(messages
            .into_iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect()),
                _ => None,
            })
            .collect())
    }

    /// [`Postgres::error`], or [`Postgres::lock_wait_error`] for a bounded read-only session's
    /// lock wait past [`READ_LOCK_TIMEOUT`].
    fn failed(&mut self, sql: &str, e: &postgres::Error) -> EngineError {
        if self.bounded && e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) { self.lock_wait_error(sql, e) } else { self.error(sql, e) }
    }

    /// The error of a read-only statement that waited longer than [`READ_LOCK_TIMEOUT`] for a
    /// lock: lists the relations another session holds or awaits an `ACCESS EXCLUSIVE` lock on
    /// (those awaited first), as `pg_locks` lists them now, the one waited for among them, and
    /// says who usually holds it.
    fn lock_wait_error(&mut self, sql: &str, e: &postgres::Error) -> EngineError {
        let mut error = self.error(sql, e);
        let locked: Vec<String> = match self.client.simple_query(LOCKED_RELATIONS) {
            Ok(messages) => messages
                .into_iter()
                .filter_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|r| format!("`{r}`")),
                    _ => None,
                })
                .collect(),
            Err(err) => {
                tracing::debug!("cannot list the relations locked by other sessions: {err}");
                Vec::new()
            }
        };
        let among = if locked.is_empty() {
            String::new()
        } else {
            // The list is cut at eight: past that the one waited for may be left out.
            let which = if locked.len() < 8 { "the one waited for among them" } else { "the first eight, the one waited for among them or not" };
            format!("; relations other sessions hold or await an exclusive lock on now ({which}): {}", locked.join(", "))
        };
        error.message = format!(
            "waited more than {READ_LOCK_TIMEOUT} for a lock on a relation it reads: another session holds or awaits an exclusive lock on it \
             (an efmesh promotion under way, itself waiting for readers of the environment's views to finish, or another session's DDL){among}; \
             try again when it is done ({})",
            error.message
        );
        error
    }

    /// [`Self::rows`] of a query reading view definitions, run with an empty `search_path`:
    /// `pg_get_viewdef` leaves out the schema of every relation the session's `search_path`
    /// finds (a role's `search_path` naming `_efmesh`), and a definition must name its
    /// relations wherever it is read or re-created. `set_config(…, true)` lasts until the end of
    /// the implicit transaction of the two statements.
    fn rows_qualified(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        let rows = self.rows(&format!("SELECT set_config('search_path', '', true); {sql}"))?;
        Ok(rows.into_iter().skip(1).collect())
    }

    /// [`Self::rows_qualified`] of a catalog query (the catalog, the views' definitions), run
    /// again while it loses a race with another session changing the catalog under it
    /// ([`lost_catalog_race`]: a view dropped between the query's snapshot and `pg_get_viewdef`,
    /// as a promotion of another process drops and re-creates an environment's views; a
    /// deadlock with that session's locks), at most [`CATALOG_READS`] times, a moment apart:
    /// each read is a new snapshot, which no longer lists the view dropped. One that keeps losing
    /// fails with [`catalog_race_error`] (transient), never with the server's internal message.
    fn catalog_rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        let mut reads = 1;
        loop {
            match self.rows_qualified(sql) {
                Err(e) if lost_catalog_race(e.code.as_deref(), &e.message) => {
                    if reads >= CATALOG_READS {
                        return Err(catalog_race_error(&self.location, reads, &e));
                    }
                    tracing::debug!(reads, "the catalog changed while it was read ({}): reading it again", e.message);
                    std::thread::sleep(std::time::Duration::from_millis(25 * u64::from(reads)));
                    reads += 1;
                }
                other => return other,
            }
        }
    }

    fn ensure_meta(&mut self) -> Result<(), EngineError> {
        let s = quote_ident(META_SCHEMA);
        self.transaction(&[
            // Two processes creating the tables at once would collide in the catalog.
            format!("SELECT pg_advisory_xact_lock(hashtextextended({}, 0))", quote_literal(META_SCHEMA)),
            format!("CREATE SCHEMA IF NOT EXISTS {s}"),
            format!("CREATE TABLE IF NOT EXISTS {s}.owners (store_id TEXT PRIMARY KEY, since TEXT NOT NULL)"),
            format!("CREATE TABLE IF NOT EXISTS {s}.uses (store_id TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (store_id, key))"),
        ])
    }

    fn meta_exists(&mut self) -> Result<bool, EngineError> {
        let rows = self.rows(&format!("SELECT to_regclass({}) IS NOT NULL", quote_literal(&format!("{}.uses", quote_ident(META_SCHEMA)))))?;
        Ok(rows.first().and_then(|r| r.first().cloned().flatten()).as_deref() == Some("t"))
    }
}

/// How many times a catalog query that lost a race with another session's change of the
/// catalog ([`lost_catalog_race`]) is run before it fails ([`Postgres::catalog_rows`]).
const CATALOG_READS: u32 = 5;

/// True when a catalog query failed with `code` (its SQLSTATE) and `message` because another
/// session changed the catalog while it ran, which reading it again does not meet: a relation its
/// snapshot lists was dropped before `pg_get_viewdef` opened it (`XX000`, `could not open
/// relation with OID …` or `cache lookup failed for relation …`: the view of an environment a
/// promotion of another process drops and re-creates when its columns change, a version the
/// janitor drops), or the server broke a deadlock between the locks `pg_get_viewdef` takes on
/// what a view reads and those of a session replacing views (`40P01`). `XX000` is the server's
/// code for any internal error: only those two texts count under it.
fn lost_catalog_race(code: Option<&str>, message: &str) -> bool {
    match code {
        Some("XX000") => message.contains("could not open relation with OID") || message.contains("cache lookup failed for relation"),
        Some("40P01") => true,
        _ => false,
    }
}

/// The failure of a catalog query of the engine database `location` that lost its race with
/// another session ([`lost_catalog_race`]) `reads` times in a row, `last` the last of them:
/// transient (`--retries` runs the command again), its SQLSTATE kept, saying what happened in
/// efmesh's words — never the server's internal message naming an OID, nor the catalog query.
fn catalog_race_error(location: &str, reads: u32, last: &EngineError) -> EngineError {
    let why = if last.code.as_deref() == Some("40P01") {
        "each read ended in a deadlock with another session's locks on the views it reads"
    } else {
        "another session dropped a view while each read listed it"
    };
    let mut error = EngineError::new(
        "",
        format!(
            "cannot read the catalog of the Postgres engine database `{location}`: {why} ({reads} reads in a row; another efmesh process promoting an \
             environment drops and re-creates its views, the janitor drops versions); try again when it is done"
        ),
    )
    .transient();
    error.code.clone_from(&last.code);
    error
}

/// Whether the running command writes nothing (`plan`, `status`, `diff`, `preview`, ...: set by
/// the CLI before it runs the command, [`bound_lock_waits`]). Off by default: a writer's reads
/// wait for their locks.
static LOCK_WAITS_BOUNDED: AtomicBool = AtomicBool::new(false);

/// Says whether the running command writes nothing: its read-only sessions (every
/// [`super::Access::ReadOnly`] and [`super::Access::Catalog`] connection opened from now on)
/// then wait at most [`READ_LOCK_TIMEOUT`] for a lock. A command that writes (`apply`, `run`,
/// `restate`, the janitor, `audit`) reads the catalog on sessions that wait as long as a lock
/// is held: another application's lock under any view of the database (`pg_get_viewdef` locks
/// what a view reads) must not fail it.
pub fn bound_lock_waits(writes_nothing: bool) {
    LOCK_WAITS_BOUNDED.store(writes_nothing, Ordering::Relaxed);
}

/// The switch [`bound_lock_waits`] set.
fn lock_waits_bounded() -> bool {
    LOCK_WAITS_BOUNDED.load(Ordering::Relaxed)
}

/// efmesh's hint for the server's refusal `code` (`message`, its text) on a session of the engine
/// database `location` (as messages name it: no password) connected as `role` to `database`,
/// where it knows what to do better than the server: a writing session (`writes`) that is
/// read-only by its role's or database's default (`default_transaction_read_only`), or on a
/// standby; a role without `CREATE` on the database, where efmesh creates its schemas. `None`
/// otherwise.
fn refusal_hint(
    code: &postgres::error::SqlState,
    message: &str,
    writes: bool,
    location: &str,
    (role, database): (Option<&str>, Option<&str>),
) -> Option<String> {
    use postgres::error::SqlState;
    let role = role.map_or_else(|| "<role>".to_string(), quote_ident);
    if writes && *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        return Some(format!(
            "efmesh writes the engine database `{location}`, and this session is read-only: its role or database defaults to read-only transactions \
             (`default_transaction_read_only` is on; `ALTER ROLE {role} SET default_transaction_read_only = off` lifts it), or the server is a read-only \
             standby (connect to the primary)"
        ));
    }
    if *code == SqlState::INSUFFICIENT_PRIVILEGE && message.starts_with("permission denied for database") {
        let database = database.map_or_else(|| "<database>".to_string(), quote_ident);
        return Some(format!(
            "efmesh creates its schemas (`{META_SCHEMA}`, `{}`, one per environment and model schema) in the engine database `{location}`: its role \
             needs CREATE there (`GRANT CREATE ON DATABASE {database} TO {role}`)",
            crate::core::name::PHYSICAL_SCHEMA
        ));
    }
    None
}

/// The statements that set up every engine session: UTC, notices, standard strings; a
/// `read_only` session cannot write (`default_transaction_read_only`), and a `bounded` one
/// (read-only, of a command that writes nothing) waits at most [`READ_LOCK_TIMEOUT`] for a
/// lock. A command that writes nothing never queues without end behind a lock (a promotion
/// waiting for readers of an environment's views holds the lock queue): `lock_wait_error` names
/// what it waited for. A writer's reads (its plan's catalog) wait as long as the lock is held:
/// another application holding a lock for a while (an ETL's `TRUNCATE` under a view the
/// catalog reads) must not fail an apply or a run.
fn session_setup(read_only: bool, bounded: bool) -> String {
    let mut setup = String::from("SET TimeZone = 'UTC'; SET client_min_messages = notice; SET standard_conforming_strings = on");
    if read_only {
        setup.push_str("; SET default_transaction_read_only = on");
    }
    if bounded {
        setup.push_str(&format!("; SET lock_timeout = '{READ_LOCK_TIMEOUT}'"));
    }
    setup
}

/// How long a statement of a read-only session of a command that writes nothing (`status`,
/// `plan`, `diff`, previews: [`bound_lock_waits`]) waits for a lock before failing
/// ([`Postgres::lock_wait_error`]). A promotion waiting for a reader's lock on an
/// environment view queues its `ACCESS EXCLUSIVE` request, and every later reader of that view
/// (a catalog query's `pg_get_viewdef` included) queues behind it: without a bound, `status
/// --check` would wait as long as the promotion does, saying nothing.
pub const READ_LOCK_TIMEOUT: &str = "3s";

/// The relations of this database another session holds or awaits an `ACCESS EXCLUSIVE` lock
/// on (those awaited first, then views; other sessions' temporary tables and TOAST tables left
/// out), as `schema.name`: what a reader past [`READ_LOCK_TIMEOUT`] waited behind is among them
/// (`pg_locks` does not say which one it was). Reading `pg_locks` and the catalog takes no lock on them.
const LOCKED_RELATIONS: &str = "SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_locks l \
     JOIN pg_catalog.pg_class c ON c.oid = l.relation JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock' AND l.pid <> pg_backend_pid() \
       AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast%' \
       AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) \
     GROUP BY n.nspname, c.relname ORDER BY bool_and(l.granted), bool_and(c.relkind <> 'v'), n.nspname, c.relname LIMIT 8";

/// How old (by the creating machine's clock, in its name) an unconnected scratch database must
/// be before another run drops it as abandoned: one hour.
pub const SCRATCH_ABANDONED_MS: i64 = 3_600_000;

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some((config, name)) = self.scratch.take() {
            // The session's own connection must be gone before its database can be dropped.
            let placeholder = std::mem::replace(
                &mut self.client,
                match crate::pg::connect(config.clone()) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("cannot drop the scratch database `{name}`: {}", crate::pg::scrubbed(&e, self.secret.as_deref()));
                        return;
                    }
                },
            );
            drop(placeholder);
            if let Err(e) = self.client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(&name))) {
                tracing::warn!("cannot drop the scratch database `{name}`: {}", crate::pg::scrubbed(&e, self.secret.as_deref()));
            }
        }
    }
}

/// The SQLSTATEs of a statement whose SQL cannot bind as it is written ([`is_unbindable`]):
/// `42P01` undefined_table (`relation "_efmesh.s__a__ab" does not exist`), `42703`
/// undefined_column, `3F000` invalid_schema_name, `42883` undefined_function, `42704`
/// undefined_object (a type dropped since).
const UNBINDABLE: [&str; 5] = ["42P01", "42703", "3F000", "42883", "42704"];

/// True when `code`, the SQLSTATE of a Postgres error ([`EngineError::code`]), says the
/// statement cannot bind as it is written ([`UNBINDABLE`]). Judged by the code alone, never by
/// the message's words: a failure without a code (a lost connection, efmesh's own) or with any
/// other (`58P01` undefined_file, `08006` a connection failure, `53100` a full disk) is not.
pub fn is_unbindable(code: Option<&str>) -> bool {
    code.is_some_and(|c| UNBINDABLE.contains(&c))
}

/// `sql` with a name given to every subquery in `FROM` that has none (`_efmesh_subquery_<n>`),
/// or `None` when none lacks one (or the text does not parse: then it runs as written and the
/// server names the error). DuckDB and Postgres 16 accept `FROM (SELECT …)`; Postgres 15 and
/// older refuse it, and efmesh renders references to embedded models, external sources and (in
/// the contract check) models not built yet as such subqueries. Only text the server would
/// refuse is rewritten (libpg_query's deparser), so a statement that runs as written is sent
/// byte for byte.
#[must_use]
pub fn with_subquery_aliases(sql: &str) -> Option<String> {
    if !sql.contains('(') {
        return None;
    }
    let mut parsed = pg_query::parse(sql, 0).ok()?;
    let mut named = 0usize;
    // SAFETY: the pointers `nodes_mut` returns point into `parsed.protobuf`, which outlives
    // them and is not otherwise touched until they are gone; each is dereferenced once.
    for (node, _, _) in unsafe { parsed.protobuf.nodes_mut() } {
        if let pg_query::NodeMut::RangeSubselect(r) = node {
            let Some(r) = (unsafe { r.as_mut() }) else { continue };
            if r.alias.is_none() {
                named += 1;
                r.alias = Some(pg_query::protobuf::Alias { aliasname: format!("_efmesh_subquery_{named}"), colnames: Vec::new() });
            }
        }
    }
    if named == 0 {
        return None;
    }
    parsed.protobuf.deparse(pg_query::DeparseOptions::default()).ok()
}

/// A Postgres type as SQL spells it (`int8` → `BIGINT`, `timestamptz` → `TIMESTAMP WITH TIME
/// ZONE`, `_int4` → `INTEGER[]`): what `describe` reports, so the schema contract's type
/// families ([`crate::core::schema::TypeFamily`]) read Postgres types as they read DuckDB's.
#[must_use]
pub fn type_name(ty: &postgres::types::Type) -> String {
    use postgres::types::Kind;
    if let Kind::Array(inner) = ty.kind() {
        return format!("{}[]", type_name(inner));
    }
    let name = ty.name();
    match name {
        "int2" => "SMALLINT",
        "int4" => "INTEGER",
        "int8" => "BIGINT",
        "float4" => "REAL",
        "float8" => "DOUBLE PRECISION",
        "numeric" => "NUMERIC",
        "bool" => "BOOLEAN",
        "text" => "TEXT",
        "varchar" => "VARCHAR",
        "bpchar" => "CHAR",
        "date" => "DATE",
        "time" => "TIME",
        "timetz" => "TIME WITH TIME ZONE",
        "timestamp" => "TIMESTAMP",
        "timestamptz" => "TIMESTAMP WITH TIME ZONE",
        "interval" => "INTERVAL",
        "uuid" => "UUID",
        "json" => "JSON",
        "jsonb" => "JSONB",
        "bytea" => "BYTEA",
        other => return other.to_ascii_uppercase(),
    }
    .to_string()
}

/// [`type_name`] with the size its type modifier gives (`atttypmod`, as a result column carries
/// it when it is a table's column or a cast to a sized type): `NUMERIC(10,2)`, `VARCHAR(5)`,
/// `CHAR(3)`, `TIMESTAMP(0)`, `TIME(3) WITH TIME ZONE`. Without it a table storing
/// `numeric(10,2)` described as `NUMERIC` like the query writing `3.14159` into it, and the check
/// that refuses values a stored type would round or cut ([`crate::apply::contract::lossy_columns`])
/// saw nothing to check.
#[must_use]
pub fn sized_type_name(ty: &postgres::types::Type, modifier: i32) -> String {
    let name = type_name(ty);
    if modifier < 0 || matches!(ty.kind(), postgres::types::Kind::Array(_)) {
        return name;
    }
    match ty.name() {
        // `((precision << 16) | scale) + 4`; the scale 11 bits, signed since Postgres 15.
        "numeric" if modifier >= 4 => {
            let m = modifier - 4;
            let precision = (m >> 16) & 0xffff;
            let scale = m & 0x7ff;
            let scale = if scale > 1000 { scale - 2048 } else { scale };
            format!("NUMERIC({precision},{scale})")
        }
        "varchar" | "bpchar" if modifier >= 4 => format!("{name}({})", modifier - 4),
        "timestamp" | "time" => format!("{name}({modifier})"),
        "timestamptz" | "timetz" => name.replacen(" WITH TIME ZONE", &format!("({modifier}) WITH TIME ZONE"), 1),
        _ => name,
    }
}

impl Engine for Postgres {
    fn sql(&self) -> &'static dyn super::dialect::Dialect {
        &super::dialect::Standard
    }

    fn is_unbindable(&self, error: &EngineError) -> bool {
        is_unbindable(error.code.as_deref())
    }

    fn execute(&mut self, sql: &str) -> Result<(), EngineError> {
        tracing::debug!(sql, "execute");
        let fixed = self.fixed(sql);
        if let Err(e) = self.client.batch_execute(fixed.as_deref().unwrap_or(sql)) {
            return Err(self.failed(sql, &e));
        }
        self.check_cut(sql)
    }

    fn transaction(&mut self, statements: &[String]) -> Result<(), EngineError> {
        self.execute("BEGIN")?;
        for s in statements {
            tracing::debug!(sql = %s, "execute in transaction");
            let fixed = self.fixed(s);
            let result = self.client.batch_execute(fixed.as_deref().unwrap_or(s)).map_err(|e| self.error(s, &e)).and_then(|()| self.check_cut(s));
            if let Err(err) = result {
                let _ = self.client.batch_execute("ROLLBACK");
                return Err(err);
            }
        }
        if let Err(e) = self.client.batch_execute("COMMIT") {
            let err = self.error("COMMIT", &e);
            let _ = self.client.batch_execute("ROLLBACK");
            return Err(err);
        }
        Ok(())
    }

    fn describe(&mut self, query: &str) -> Result<Vec<DescribedColumn>, EngineError> {
        tracing::debug!(sql = query, "describe");
        // Preparing binds the query (names, types) and runs nothing.
        let fixed = self.fixed(query);
        let statement = match self.client.prepare(fixed.as_deref().unwrap_or(query)) {
            Ok(statement) => statement,
            Err(e) => return Err(self.failed(query, &e)),
        };
        self.check_cut(query)?;
        Ok(statement.columns().iter().map(|c| DescribedColumn { name: c.name().to_string(), ty: sized_type_name(c.type_(), c.type_modifier()) }).collect())
    }

    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        self.rows(sql)
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        // Postgres answers the COMMIT of a transaction an error aborted with a rollback and no
        // error: a statement first, which fails in an aborted transaction.
        if let Err(e) = self.client.simple_query("SELECT 1") {
            let err = self.error("COMMIT", &e);
            let _ = self.client.batch_execute("ROLLBACK");
            return Err(EngineError::new("COMMIT", format!("nothing was committed: the transaction was aborted by an earlier error ({})", err.message)));
        }
        self.client.batch_execute("COMMIT").map_err(|e| {
            let err = self.error("COMMIT", &e);
            let _ = self.client.batch_execute("ROLLBACK");
            err
        })
    }

    fn query_with_columns(&mut self, query: &str, limit: usize) -> Result<super::Described, EngineError> {
        let columns = self.describe(query)?;
        // The text protocol renders every value as Postgres prints it: no casts to write.
        let rows = self.rows(&format!("SELECT * FROM (\n{query}\n) AS _efmesh_q LIMIT {limit}"))?;
        Ok((columns, rows))
    }

    fn worker(&mut self) -> Option<Box<dyn Engine + Send>> {
        // One more connection of the same database (the `--jobs` workers' pool); a server out of
        // connections leaves the build with fewer workers, said so.
        let connected = Self::connect(self.config.clone(), self.read_only).and_then(|mut db| {
            // A worker of the writer writes: it holds the writing lock shared, as the writer does
            // ([`Postgres::open_writer`]), for as long as it lives.
            if let Some(writer) = self.writer {
                db.join_writer(writer)?;
            }
            Ok(db)
        });
        match connected {
            Ok(db) => Some(Box::new(db) as Box<dyn Engine + Send>),
            Err(e) => {
                tracing::warn!("cannot open another connection for a --jobs worker, building with fewer: {}", e.message);
                None
            }
        }
    }

    fn relation_exists(&mut self, schema: &str, name: &str) -> Result<bool, EngineError> {
        let rows = self.rows(&format!(
            "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = {} AND c.relname = {}",
            quote_literal(schema),
            quote_literal(name)
        ))?;
        Ok(rows.first().and_then(|r| r.first().cloned().flatten()).is_some_and(|n| n != "0"))
    }

    fn catalog(&mut self) -> Result<super::Catalog, EngineError> {
        // Views carry their definition as `CREATE VIEW <name> AS <query>`, as DuckDB reports it.
        let rows = self.catalog_rows(
            "SELECT n.nspname, c.relname, obj_description(c.oid, 'pg_class'), \
                    CASE WHEN c.relkind = 'v' THEN 'CREATE VIEW ' || quote_ident(n.nspname) || '.' || quote_ident(c.relname) || ' AS ' || pg_get_viewdef(c.oid) END \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
               AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'",
        )?;
        Ok(super::catalog_of(rows))
    }

    fn view_definitions(&mut self, views: &[(String, String)]) -> Result<std::collections::BTreeMap<(String, String), String>, EngineError> {
        let mut out = std::collections::BTreeMap::new();
        if views.is_empty() {
            return Ok(out);
        }
        let schemas: std::collections::BTreeSet<&str> = views.iter().map(|(s, _)| s.as_str()).collect();
        let list: Vec<String> = schemas.iter().map(|s| quote_literal(s)).collect();
        let wanted: std::collections::BTreeSet<&(String, String)> = views.iter().collect();
        let rows = self.catalog_rows(&format!(
            "SELECT n.nspname, c.relname, pg_get_viewdef(c.oid) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'v' AND n.nspname IN ({})",
            list.join(", ")
        ))?;
        for row in rows {
            let [Some(schema), Some(view), Some(query)] = [row.first().cloned().flatten(), row.get(1).cloned().flatten(), row.get(2).cloned().flatten()] else {
                continue;
            };
            let key = (schema, view);
            if !wanted.contains(&key) {
                continue;
            }
            // Re-created as any replaced view is (in place; dropped and created only when its
            // columns changed since, never `CASCADE`), in the one transaction the caller runs
            // this in: a view of the user's over it does not block the undo.
            let name = format!("{}.{}", quote_ident(&key.0), quote_ident(&key.1));
            let query = query.trim().trim_end_matches(';').trim_end();
            out.insert(key, super::dialect::Dialect::replace_view_as(&super::dialect::Standard, &name, query).concat());
        }
        Ok(out)
    }

    fn owner_marker(&mut self, ducklake: bool) -> Result<Option<Vec<String>>, EngineError> {
        if ducklake {
            return Err(EngineError::new("", "the Postgres engine has no DuckLake catalog"));
        }
        if !self.meta_exists()? {
            return Ok(None);
        }
        let rows = self.rows(&format!("SELECT store_id FROM {}.owners ORDER BY 1", quote_ident(META_SCHEMA)))?;
        let ids: Vec<String> = rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect();
        Ok((!ids.is_empty()).then_some(ids))
    }

    fn write_owner_marker(&mut self, ducklake: bool, id: &str, only: bool, at: &str) -> Result<(), EngineError> {
        if ducklake {
            return Err(EngineError::new("", "the Postgres engine has no DuckLake catalog"));
        }
        if !super::plain_id(id) {
            return Err(EngineError::new("", format!("`{id}` is not a store id")));
        }
        self.ensure_meta()?;
        let table = format!("{}.owners", quote_ident(META_SCHEMA));
        let mut statements = Vec::new();
        if only {
            statements.push(format!("DELETE FROM {table} WHERE store_id <> {}", quote_literal(id)));
        }
        statements.push(format!(
            "INSERT INTO {table} (store_id, since) VALUES ({}, {}) ON CONFLICT (store_id) DO NOTHING",
            quote_literal(id),
            quote_literal(at)
        ));
        self.transaction(&statements)
    }

    fn storage_uses(&mut self) -> Result<Vec<(String, String)>, EngineError> {
        if !self.meta_exists()? {
            return Ok(Vec::new());
        }
        Ok(super::pairs(self.rows(&format!("SELECT store_id, key FROM {}.uses", quote_ident(META_SCHEMA)))?))
    }

    fn prepare_storage_uses(&mut self, _store: &str) -> Result<Vec<(String, String)>, EngineError> {
        // Rows from the start (SPEC §4, invariant 48 (g)): nothing to move.
        self.storage_uses()
    }

    fn write_storage_uses(&mut self, add: &[(String, String)], remove: &[(String, String)]) -> Result<(), EngineError> {
        if add.is_empty() && remove.is_empty() {
            return Ok(());
        }
        if let Some((store, key)) = add.iter().chain(remove).find(|(s, k)| !super::plain_id(s) || !super::plain_id(k)) {
            return Err(EngineError::new("", format!("`{store}`/`{key}` cannot name a use record")));
        }
        self.ensure_meta()?;
        let table = format!("{}.uses", quote_ident(META_SCHEMA));
        let pairs =
            |records: &[(String, String)]| records.iter().map(|(s, k)| format!("({}, {})", quote_literal(s), quote_literal(k))).collect::<Vec<_>>().join(", ");
        let mut statements = Vec::new();
        if !add.is_empty() {
            statements.push(format!("INSERT INTO {table} (store_id, key) VALUES {} ON CONFLICT DO NOTHING", pairs(add)));
        }
        if !remove.is_empty() {
            statements.push(format!("DELETE FROM {table} WHERE (store_id, key) IN ({})", pairs(remove)));
        }
        self.transaction(&statements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writing session read-only by its role's default, and a role without `CREATE` on the
    /// engine database, get a hint naming the setting, or the privilege and the database (its
    /// URL without a password); other refusals, and a read-only session's own, get none.
    #[test]
    fn refusals_efmesh_knows_the_remedy_of_get_a_hint_naming_it() {
        use postgres::error::SqlState;
        let location = "postgres://etl@db:5432/eng2";
        let who = (Some("etl"), Some("eng2"));
        let read_only = "cannot execute CREATE SCHEMA in a read-only transaction";
        let hint = refusal_hint(&SqlState::READ_ONLY_SQL_TRANSACTION, read_only, true, location, who).unwrap_or_default();
        assert!(hint.contains("default_transaction_read_only") && hint.contains(location) && hint.contains("ALTER ROLE \"etl\""), "{hint}");
        assert_eq!(refusal_hint(&SqlState::READ_ONLY_SQL_TRANSACTION, read_only, false, location, who), None, "a read-only session of efmesh's own");
        let hint = refusal_hint(&SqlState::INSUFFICIENT_PRIVILEGE, "permission denied for database eng2", true, location, who).unwrap_or_default();
        assert!(hint.contains(location) && hint.contains("GRANT CREATE ON DATABASE \"eng2\" TO \"etl\""), "{hint}");
        assert_eq!(refusal_hint(&SqlState::INSUFFICIENT_PRIVILEGE, "permission denied for table t", true, location, who), None);
        assert_eq!(refusal_hint(&SqlState::UNDEFINED_TABLE, "relation \"t\" does not exist", true, location, who), None);
    }

    /// The lock timeout is set on the read-only sessions of a command that writes nothing
    /// ([`bound_lock_waits`]) and on no other session: a writer's catalog reads wait for their
    /// locks; every session gets UTC.
    #[test]
    fn only_read_only_sessions_of_a_command_writing_nothing_bound_their_lock_waits() {
        let timeout = format!("SET lock_timeout = '{READ_LOCK_TIMEOUT}'");
        for (read_only, bounded, wants) in [(true, true, true), (true, false, false), (false, false, false)] {
            let setup = session_setup(read_only, bounded);
            assert_eq!(setup.contains(&timeout), wants, "read_only {read_only}, bounded {bounded}: {setup}");
            assert_eq!(setup.contains("default_transaction_read_only = on"), read_only, "{setup}");
            assert!(setup.starts_with("SET TimeZone = 'UTC'"), "{setup}");
        }
        // The switch decides, for read-only sessions only (the value `connect` computes).
        bound_lock_waits(false);
        assert!(!lock_waits_bounded());
        bound_lock_waits(true);
        assert!(lock_waits_bounded());
        bound_lock_waits(false);
        assert!(!lock_waits_bounded());
    }

    #[test]
    fn only_the_sqlstates_of_a_missing_name_are_unbindable() {
        use postgres::error::SqlState;
        // The codes the server sends for an undo statement whose definition names what is gone.
        for yes in
            [SqlState::UNDEFINED_TABLE, SqlState::UNDEFINED_COLUMN, SqlState::INVALID_SCHEMA_NAME, SqlState::UNDEFINED_FUNCTION, SqlState::UNDEFINED_OBJECT]
        {
            assert!(is_unbindable(Some(yes.code())), "{}", yes.code());
        }
        for no in [
            SqlState::UNDEFINED_FILE,
            SqlState::CONNECTION_FAILURE,
            SqlState::DISK_FULL,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::IO_ERROR,
            SqlState::INVALID_TABLE_DEFINITION,
        ] {
            assert!(!is_unbindable(Some(no.code())), "{}", no.code());
        }
        assert!(!is_unbindable(None), "a failure without a code");
        // The message's words count for nothing: a server error mentioning `does not exist` under
        // another code, or a failure with none, is not judged unbindable.
        let gone = EngineError {
            code: Some(SqlState::UNDEFINED_TABLE.code().to_string()),
            ..EngineError::new("", "ERROR: relation \"_efmesh.s__a__ab\" does not exist")
        };
        let io = EngineError {
            code: Some(SqlState::UNDEFINED_FILE.code().to_string()),
            ..EngineError::new("", "ERROR: could not open file \"base/1/2\": the file does not exist")
        };
        let lost = EngineError::new("", "connection closed: the server does not exist any more");
        assert_eq!([&gone, &io, &lost].map(|e| is_unbindable(e.code.as_deref())), [true, false, false]);
    }

    /// A catalog query read again is one that lost a race with another session changing the
    /// catalog (a view dropped under `pg_get_viewdef`, a deadlock with a promotion's locks): by
    /// the SQLSTATE, and under the server's catch-all `XX000` by those two texts alone. One that
    /// keeps losing fails transient, in efmesh's words: neither the server's OID nor the query.
    #[test]
    fn a_catalog_read_losing_a_race_with_a_drop_is_read_again_and_then_fails_transient() {
        for (code, message) in [
            (Some("XX000"), "ERROR: could not open relation with OID 116328"),
            (Some("XX000"), "ERROR: cache lookup failed for relation 116328"),
            (Some("40P01"), "ERROR: deadlock detected"),
        ] {
            assert!(lost_catalog_race(code, message), "{code:?} {message}");
        }
        for (code, message) in [
            (Some("XX000"), "ERROR: unexpected chunk number 0 (expected 1) for toast value 1 in pg_toast_2618"),
            (Some("42P01"), "ERROR: could not open relation with OID 116328"),
            (Some("55P03"), "ERROR: canceling statement due to lock timeout"),
            (None, "could not open relation with OID 116328"),
        ] {
            assert!(!lost_catalog_race(code, message), "{code:?} {message}");
        }
        let query = "SELECT set_config('search_path', '', true); SELECT pg_get_viewdef(c.oid) FROM pg_catalog.pg_class c";
        let last = EngineError { code: Some("XX000".to_string()), ..EngineError::new(query, "ERROR: could not open relation with OID 116328") };
        let e = catalog_race_error("postgres://etl@db:5432/eng", CATALOG_READS, &last);
        // `--retries` retries it (`EngineError::transient`).
        assert!(e.transient, "{e}");
        assert_eq!(e.code.as_deref(), Some("XX000"));
        let said = e.to_string();
        assert!(said.contains("`postgres://etl@db:5432/eng`") && said.contains("another session dropped a view") && said.contains("try again"), "{said}");
        for raw in ["OID", "pg_get_viewdef", "set_config", "while running"] {
            assert!(!said.contains(raw), "{raw}: {said}");
        }
        let deadlock = EngineError { code: Some("40P01".to_string()), ..EngineError::new("SELECT 1", "ERROR: deadlock detected") };
        assert!(catalog_race_error("db", 2, &deadlock).to_string().contains("deadlock"));
    }

    #[test]
    fn only_unnamed_subqueries_are_named_and_named_text_is_left_alone() {
        // Nothing to name: the text is sent as written.
        assert_eq!(with_subquery_aliases("SELECT a FROM (SELECT 1 AS a) AS q"), None);
        assert_eq!(with_subquery_aliases("SELECT 1"), None);
        assert_eq!(with_subquery_aliases("not sql ("), None);
        // Every unnamed subquery in FROM, in joins and nested, gets a name of its own.
        let fixed =
            with_subquery_aliases("SELECT x.a FROM (SELECT 1 AS a) AS x JOIN (SELECT 1 AS a) ON true WHERE a IN (SELECT a FROM (SELECT 2 AS a))").unwrap();
        assert!(fixed.contains("_efmesh_subquery_1") && fixed.contains("_efmesh_subquery_2"), "{fixed}");
        assert!(!fixed.contains("_efmesh_subquery_3"), "{fixed}");
        // Inside DDL too (the builds wrap bodies in CREATE TABLE … AS and INSERT … SELECT).
        let ddl = with_subquery_aliases("CREATE TABLE s.t AS SELECT * FROM (SELECT 1 AS a) LIMIT 0").unwrap();
        assert!(ddl.starts_with("CREATE TABLE s.t AS SELECT") && ddl.contains("_efmesh_subquery_1"), "{ddl}");
        let insert = with_subquery_aliases("INSERT INTO s.t SELECT * FROM (SELECT 1 AS a)").unwrap();
        assert!(insert.contains("_efmesh_subquery_1"), "{insert}");
    }

    #[test]
    fn postgres_types_are_named_as_sql_spells_them() {
        use crate::core::schema::TypeFamily;
        use postgres::types::Type;
        assert_eq!(type_name(&Type::INT8), "BIGINT");
        assert_eq!(type_name(&Type::TIMESTAMPTZ), "TIMESTAMP WITH TIME ZONE");
        assert_eq!(type_name(&Type::INT4_ARRAY), "INTEGER[]");
        for (ty, family) in [
            (Type::INT2, TypeFamily::Numeric),
            (Type::FLOAT8, TypeFamily::Numeric),
            (Type::NUMERIC, TypeFamily::Numeric),
            (Type::TEXT, TypeFamily::Text),
            (Type::BPCHAR, TypeFamily::Text),
            (Type::BOOL, TypeFamily::Boolean),
            (Type::DATE, TypeFamily::Temporal),
            (Type::TIMESTAMP, TypeFamily::Temporal),
            (Type::INTERVAL, TypeFamily::Temporal),
            (Type::JSONB, TypeFamily::Json),
            (Type::TEXT_ARRAY, TypeFamily::Nested),
        ] {
            assert_eq!(TypeFamily::of(&type_name(&ty)), family, "{ty}");
        }
    }
}
