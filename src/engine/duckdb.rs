//! The embedded DuckDB engine (v1.5.5).
//!
//! One connection per process; DuckDB allows one writing process per database file, so a second
//! `apply` on the same file fails to open it with a clear message. Every session runs with
//! `TimeZone = 'UTC'` so naive `TIMESTAMP` bound literals compare correctly with `TIMESTAMPTZ`
//! columns.

use super::{DescribedColumn, Engine, EngineError};
use crate::config::EngineSection;
use duckdb::types::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};

/// A DuckDB database.
pub struct DuckDb {
    conn: duckdb::Connection,
    /// The effective extension directory (config, else `EFMESH_EXTENSION_DIRECTORY`); when set,
    /// extensions are never downloaded.
    extension_directory: Option<PathBuf>,
    /// Per-extension files from `[engine.extensions]` (absolute).
    extension_files: BTreeMap<String, PathBuf>,
    /// Extensions loaded in this session.
    loaded: BTreeSet<String>,
    /// `(T, now)`: the `threads` setting the database was configured with, and what it is now
    /// ([`Engine::share_threads`]); read from DuckDB on first use.
    threads: Option<(usize, usize)>,
}

impl std::fmt::Debug for DuckDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DuckDb")
    }
}

impl DuckDb {
    /// Opens a transaction and runs `statements` in it, leaving it open for the caller to commit
    /// ([`Self::commit_open`]) or roll back; a failing statement rolls it back and is the error.
    /// Statements that touch the catalog alone go in one round trip (an environment's view swap
    /// is thousands of statements), each ending on its own line so that a trailing `--` comment
    /// cannot swallow the separator; naming the culprit of a failure then runs them again
    /// (`culprit`), which must never repeat a long data write, so other statements go one by one.
    fn begin_with(&mut self, statements: &[String]) -> Result<(), EngineError> {
        if statements.len() > 1 && statements.iter().all(|s| catalog_only(s)) {
            let mut batch = String::from("BEGIN TRANSACTION;\n");
            for s in statements {
                tracing::debug!(sql = %s, "execute in transaction");
                batch.push_str(s);
                batch.push_str("\n;\n");
            }
            if let Err(e) = self.conn.execute_batch(&batch) {
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(self.culprit(statements, e.to_string()));
            }
            return Ok(());
        }
        self.execute("BEGIN TRANSACTION")?;
        for s in statements {
            tracing::debug!(sql = %s, "execute in transaction");
            if let Err(e) = self.conn.execute_batch(s) {
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(EngineError::new(s, e.to_string()));
            }
        }
        Ok(())
    }

    /// Commits the transaction [`Self::begin_with`] left open (rolled back if the commit fails).
    fn commit_open(&mut self) -> Result<(), EngineError> {
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(EngineError::new("COMMIT", e.to_string()));
        }
        Ok(())
    }

    /// Opens (creating if needed) the database file at `path` with the `[engine]` settings.
    ///
    /// # Errors
    /// [`EngineError`] when the file cannot be opened (e.g. locked by another process).
    pub fn open(path: &Path, settings: &EngineSection) -> Result<Self, EngineError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            fs_err::create_dir_all(dir).map_err(|e| EngineError::new("", e.to_string()))?;
        }
        let conn = duckdb::Connection::open(path)
            .map_err(|e| EngineError::new("", format!("cannot open DuckDB database `{}`: {e}{}", path.display(), open_hint(&e.to_string()))))?;
        let mut db = Self::new(conn);
        db.configure(settings)?;
        Ok(db)
    }

    /// Opens the existing database file at `path` read-only for catalog queries: what `plan`
    /// reads the catalog through, so planning never writes the engine. No extension is loaded;
    /// `[engine] memory_limit` applies, and one thread (a catalog query needs no worker threads,
    /// and starting them is most of an open), which is within any `[engine] threads`. Fails when
    /// the file does not exist or another process holds it open for writing.
    ///
    /// # Errors
    /// [`EngineError`] naming the file, or the setting that failed.
    pub fn open_read_only(path: &Path, settings: &EngineSection) -> Result<Self, EngineError> {
        let conn = duckdb::Config::default()
            .access_mode(duckdb::AccessMode::ReadOnly)
            .and_then(|config| config.threads(1))
            .and_then(|config| duckdb::Connection::open_with_flags(path, config))
            .map_err(|e| EngineError::new("", format!("cannot open DuckDB database `{}` read-only: {e}{}", path.display(), open_hint(&e.to_string()))))?;
        let mut db = Self::new(conn);
        db.set_memory_limit(settings)?;
        Ok(db)
    }

    /// Opens the existing database file at `path` read-only with the `[engine]` settings (time
    /// zone, threads, memory limit, extensions): what a data preview runs its queries on, so it
    /// never writes the engine. Fails at once (never waits) when the file does not exist or
    /// another process holds it open for writing.
    ///
    /// # Errors
    /// [`EngineError`] naming the file, or the setting that failed.
    pub fn open_read_only_with(path: &Path, settings: &EngineSection) -> Result<Self, EngineError> {
        let conn = duckdb::Config::default()
            .access_mode(duckdb::AccessMode::ReadOnly)
            .and_then(|config| duckdb::Connection::open_with_flags(path, config))
            .map_err(|e| EngineError::new("", format!("cannot open DuckDB database `{}` read-only: {e}{}", path.display(), open_hint(&e.to_string()))))?;
        let mut db = Self::new(conn);
        db.configure(settings)?;
        Ok(db)
    }

    /// An in-memory database with the `[engine]` settings.
    ///
    /// # Errors
    /// [`EngineError`].
    pub fn in_memory_with(settings: &EngineSection) -> Result<Self, EngineError> {
        let conn = duckdb::Connection::open_in_memory().map_err(|e| EngineError::new("", e.to_string()))?;
        let mut db = Self::new(conn);
        db.configure(settings)?;
        Ok(db)
    }

    /// After a batched transaction failed (and was rolled back) with `message`: the statement at
    /// fault, found by running them one by one in a transaction that is always rolled back, so
    /// the error names it as an unbatched transaction would; the whole batch when none fails
    /// alone (e.g. the `COMMIT`).
    fn culprit(&mut self, statements: &[String], message: String) -> EngineError {
        if self.conn.execute_batch("BEGIN TRANSACTION").is_err() {
            return EngineError::new("COMMIT", message);
        }
        let mut found = None;
        for s in statements {
            if let Err(e) = self.conn.execute_batch(s) {
                found = Some(EngineError::new(s, e.to_string()));
                break;
            }
        }
        let _ = self.conn.execute_batch("ROLLBACK");
        found.unwrap_or_else(|| EngineError::new("COMMIT", message))
    }

    fn new(conn: duckdb::Connection) -> Self {
        Self { conn, extension_directory: None, extension_files: BTreeMap::new(), loaded: BTreeSet::new(), threads: None }
    }

    /// An in-memory database (tests, parsing fallbacks).
    ///
    /// # Errors
    /// [`EngineError`].
    pub fn in_memory() -> Result<Self, EngineError> {
        let conn = duckdb::Connection::open_in_memory().map_err(|e| EngineError::new("", e.to_string()))?;
        let mut db = Self::new(conn);
        db.configure(&EngineSection::default())?;
        Ok(db)
    }

    fn configure(&mut self, settings: &EngineSection) -> Result<(), EngineError> {
        // Without ICU there is no TimeZone setting and timestamps are UTC already.
        let _ = self.conn.execute_batch("SET TimeZone = 'UTC'");
        if let Some(t) = settings.threads {
            let sql = format!("SET threads = {t}");
            self.execute(&sql).map_err(|e| EngineError::new(&sql, format!("`[engine] threads` = {t}: DuckDB refused it: {}", e.message)))?;
        }
        self.set_memory_limit(settings)?;
        self.extension_files = settings.extensions.clone();
        self.extension_directory = settings
            .extension_directory
            .clone()
            .or_else(|| std::env::var_os(crate::config::EXTENSION_DIRECTORY_ENV).filter(|v| !v.is_empty()).map(PathBuf::from));
        if let Some(dir) = &self.extension_directory {
            // Autoloading (e.g. httpfs for an s3:// path) still works, from this directory only.
            let dir = crate::core::name::quote_literal(&dir.to_string_lossy());
            self.execute(&format!("SET extension_directory = {dir}; SET autoinstall_known_extensions = false"))?;
        }
        for name in &settings.load {
            self.load_extension(name)?;
        }
        Ok(())
    }

    /// Applies `[engine] memory_limit` (a global setting: every connection of this database,
    /// clones included, runs under it).
    fn set_memory_limit(&mut self, settings: &EngineSection) -> Result<(), EngineError> {
        if let Some(m) = &settings.memory_limit {
            let sql = format!("SET memory_limit = {}", crate::core::name::quote_literal(m));
            self.execute(&sql).map_err(|e| EngineError::new(&sql, format!("`[engine] memory_limit` = \"{m}\": DuckDB refused it: {}", e.message)))?;
        }
        Ok(())
    }

    /// Loads the DuckDB extension `name` (e.g. `httpfs`, `ducklake`) once per session: from its
    /// `[engine.extensions]` file when one is configured, else from the extension directory; with
    /// no extension directory configured, DuckDB may install it from the network first.
    ///
    /// # Errors
    /// [`EngineError`] saying where the `.duckdb_extension` file was looked for and how to
    /// provision it (`scripts/provision-extensions` fills a directory from the PyPI wheels
    /// `duckdb-extension-<name>==1.5.5`).
    pub fn load_extension(&mut self, name: &str) -> Result<(), EngineError> {
        if self.loaded.contains(name) {
            return Ok(());
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.is_empty() {
            return Err(EngineError::new("", format!("`{name}` is not an extension name")));
        }
        let result = if let Some(file) = self.extension_files.get(name).cloned() {
            let sql = format!("LOAD {}", crate::core::name::quote_literal(&file.to_string_lossy()));
            self.execute(&sql)
                .map_err(|e| EngineError::new(&sql, format!("cannot load extension `{name}` from `{}` ([engine.extensions]): {}", file.display(), e.message)))
        } else if let Some(dir) = self.extension_directory.clone() {
            let sql = format!("LOAD {name}");
            self.execute(&sql).map_err(|e| {
                let platform = self.platform().unwrap_or_else(|| "<platform>".into());
                EngineError::new(
                    &sql,
                    format!(
                        "the `{name}` extension is not available offline: expected {}/v1.5.5/{platform}/{name}.duckdb_extension \
                         (extension_directory); provision it with `scripts/provision-extensions {} {name}` (PyPI wheel \
                         duckdb-extension-{name}==1.5.5) or set [engine.extensions] {name} = \"<file>\". DuckDB said: {}",
                        dir.display(),
                        dir.display(),
                        // Its next lines say `INSTALL` it, which a set directory turns off.
                        e.message.lines().next().unwrap_or_default()
                    ),
                )
            })
        } else {
            self.execute(&format!("LOAD {name}"))
                .or_else(|_| self.execute(&format!("INSTALL {name}; LOAD {name}")))
                .map_err(|e| EngineError::new(&e.sql, extension_not_installed(name, &e.message)))
        };
        result?;
        self.loaded.insert(name.to_string());
        Ok(())
    }

    /// DuckDB's platform string, e.g. `linux_amd64` (the extension directory's sub-folder).
    pub fn platform(&mut self) -> Option<String> {
        self.query("SELECT platform FROM pragma_platform()").ok()?.into_iter().next()?.into_iter().next().flatten()
    }

    /// DuckDB's version string, e.g. `v1.5.5`.
    ///
    /// # Errors
    /// [`EngineError`].
    pub fn version(&mut self) -> Result<String, EngineError> {
        let rows = self.query("SELECT version()")?;
        Ok(rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()).unwrap_or_default())
    }

    /// DuckDB's own parse tree of `sql` as JSON (`json_serialize_sql`), the canonicalisation
    /// fallback for bodies sqlparser cannot parse.
    ///
    /// # Errors
    /// A message when DuckDB cannot run the function.
    pub fn serialize_sql(&mut self, sql: &str) -> Result<String, String> {
        let mut stmt = self.conn.prepare("SELECT json_serialize_sql(?::VARCHAR)").map_err(|e| e.to_string())?;
        let mut rows = stmt.query([sql]).map_err(|e| e.to_string())?;
        let row = rows.next().map_err(|e| e.to_string())?.ok_or("no result")?;
        let v: String = row.get(0).map_err(|e| e.to_string())?;
        Ok(v)
    }
}

/// The message of an extension `name` DuckDB could neither load nor install (`message`,
/// DuckDB's). A failed download (offline) is said in efmesh's words, starting "the `name`
/// extension " as [`super::extension_needed`] expects, with DuckDB's cause when it gives a short
/// one (its message is otherwise a URL and a troubleshooting link); other failures keep DuckDB's
/// message.
fn extension_not_installed(name: &str, message: &str) -> String {
    if !message.contains("Failed to download extension") {
        return format!("cannot load DuckDB extension `{name}`: {message}; offline machines set [engine] extension_directory (see docs/extensions.md)");
    }
    // DuckDB ends the message with the cause in parentheses: `(ERROR Could not establish connection)`.
    let trimmed = message.trim_end();
    let cause = trimmed
        .strip_suffix(')')
        .and_then(|m| m.rsplit_once('('))
        .map(|(_, c)| c.trim_start_matches("ERROR ").trim())
        .filter(|c| !c.is_empty() && c.len() <= 80 && !c.contains("://"));
    let mut s = format!(
        "the `{name}` extension is not installed and could not be downloaded (offline?): provision it (`scripts/provision-extensions`) and set [engine] extension_directory (docs/extensions.md)"
    );
    if let Some(c) = cause {
        s.push_str(&format!(" (DuckDB: {c})"));
    }
    s
}

/// How many queries one combined `DESCRIBE` binds (see [`describe_grouped`]).
const DESCRIBE_GROUP: usize = 16;

/// Describes `queries` in order, [`DESCRIBE_GROUP`] at a time in one statement each: binding is
/// the cost a contract check cannot avoid, but a statement of its own per query also pays
/// DuckDB's per-statement cost (parse, transaction, result), which is more than half of a small
/// query's `DESCRIBE` (2000 contract queries: 0.84 s one by one, 0.34 s sixteen at a time, in
/// DuckDB 1.5.5's Python package). Each query becomes a CTE — a CTE is bound on its own, so a
/// column a query does not have can never resolve to another query's (a subquery in `FROM`
/// could bind it laterally) — and the select list puts a marker column, named with a nonce no
/// query can know, before each CTE's columns. A group that does not bind, whose markers do not
/// come back as sent, or whose columns DuckDB may have renamed (a CTE's duplicate names come back
/// as `name_1`), is described again one query at a time, so every result and every error is
/// exactly what [`Engine::describe`] of that query alone gives. (The statement is text: a body
/// that closed its CTE's parenthesis and opened another could bind here and not alone. Bodies
/// reach this as one statement that sqlparser or DuckDB parsed when the project was loaded, and
/// the build runs each alone, so such a body would at worst fail at its build, never pass it.)
/// DuckDB's parser errors place their `LINE n:` excerpt by a character offset counted as bytes:
/// in a statement with multi-byte characters before the error, they name an earlier line (the
/// `json_serialize_sql` position, in characters, is right). For such a message about `sql`
/// (one statement), the excerpt is replaced by `LINE n:` and that line of `sql`, the line taken
/// from `json_serialize_sql` on `conn`; any other message is returned as it is.
fn parser_line_fixed(conn: &duckdb::Connection, sql: &str, message: String) -> String {
    if sql.is_ascii() || !message.starts_with("Parser Error") {
        return message;
    }
    let json: Option<String> = conn.query_row("SELECT json_serialize_sql(?)", [sql], |r| r.get(0)).ok();
    let Some(line) = json.and_then(|j| crate::sql::canon::duckdb_error_line(&j, sql)) else { return message };
    let head: Vec<&str> = message.lines().take_while(|l| !l.trim_start().starts_with("LINE ")).collect();
    let text = usize::try_from(line).ok().and_then(|n| sql.lines().nth(n.saturating_sub(1))).unwrap_or_default().trim();
    format!("{}\n\nLINE {line}: {text}", head.join("\n").trim_end())
}

fn describe_grouped(db: &mut dyn Engine, queries: &[String]) -> Vec<Result<Vec<DescribedColumn>, EngineError>> {
    use std::hash::{BuildHasher, Hasher};
    let mut out = Vec::with_capacity(queries.len());
    for group in queries.chunks(DESCRIBE_GROUP) {
        if group.len() < 2 {
            out.extend(group.iter().map(|q| db.describe(q)));
            continue;
        }
        let nonce = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let marker = |j: usize| format!("__efmesh_{nonce:016x}_{j}");
        let ctes: Vec<String> = group.iter().enumerate().map(|(j, q)| format!("\"{}\" AS (\n{}\n)", marker(j), q.trim_end().trim_end_matches(';'))).collect();
        let list: Vec<String> = (0..group.len()).map(|j| format!("NULL AS \"{0}\", \"{0}\".*", marker(j))).collect();
        let from: Vec<String> = (0..group.len()).map(|j| format!("\"{}\"", marker(j))).collect();
        let sql = format!("WITH {} SELECT {} FROM {}", ctes.join(", "), list.join(", "), from.join(", "));
        let split = db.describe(&sql).ok().and_then(|columns| {
            let mut parts: Vec<Vec<DescribedColumn>> = Vec::with_capacity(group.len());
            for c in columns {
                if parts.len() < group.len() && c.name == marker(parts.len()) {
                    parts.push(Vec::new());
                } else {
                    parts.last_mut()?.push(c);
                }
            }
            (parts.len() == group.len()).then_some(parts)
        });
        match split {
            Some(parts) => out.extend(parts.into_iter().zip(group).map(|(cols, q)| if maybe_renamed(&cols) { db.describe(q) } else { Ok(cols) })),
            None => out.extend(group.iter().map(|q| db.describe(q))),
        }
    }
    out
}

/// True when a column's name is another's (ignoring ASCII case, as DuckDB's binder does)
/// followed by `_` and digits: what DuckDB makes of a duplicate name in a CTE (`A, a` comes
/// back as `A, a_1`), so the query alone may return other names.
fn maybe_renamed(columns: &[DescribedColumn]) -> bool {
    columns.iter().any(|c| {
        c.name
            .rsplit_once('_')
            .is_some_and(|(base, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && columns.iter().any(|o| o.name.eq_ignore_ascii_case(base)))
    })
}

fn value_text(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Boolean(b) => Some(b.to_string()),
        Value::TinyInt(i) => Some(i.to_string()),
        Value::SmallInt(i) => Some(i.to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::BigInt(i) => Some(i.to_string()),
        Value::HugeInt(i) => Some(i.to_string()),
        Value::UTinyInt(i) => Some(i.to_string()),
        Value::USmallInt(i) => Some(i.to_string()),
        Value::UInt(i) => Some(i.to_string()),
        Value::UBigInt(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Double(f) => Some(f.to_string()),
        Value::Text(s) => Some(s),
        other => Some(format!("{other:?}")),
    }
}

/// The starts of DuckDB's messages for a statement whose SQL cannot bind as it is written
/// ([`is_unbindable`]): a relation, schema or catalog it names is missing (`Catalog Error: Table
/// with name … does not exist!`), a column or an unattached catalog it names is (`Binder Error:
/// Referenced column …`, `Binder Error: Catalog "…" does not exist!`), or the path or pattern of
/// a file it reads matches nothing (a file under a project's previous root).
const UNBINDABLE: [&str; 3] = ["Catalog Error:", "Binder Error:", "IO Error: No files found that match the pattern"];

/// True when `message`, a DuckDB error, says the statement cannot bind as it is written: the
/// message starts with one of DuckDB's own shapes for a missing name or file ([`UNBINDABLE`]).
/// Never a message that merely holds such words further on: an S3 or HTTP error (`HTTP Error: …
/// (HTTP 503 …)`, `… (HTTP 404 Not Found)`), an IO error (`IO Error: Could not set lock …`,
/// `… does not exist`), a conversion error (a wrong value, not a wrong name).
pub fn is_unbindable(message: &str) -> bool {
    let message = message.trim_start();
    UNBINDABLE.iter().any(|start| message.starts_with(start))
}

/// The words before the record number in the first line of DuckDB's message for a CSV record its
/// reader failed on (`Conversion Error: CSV Error on Line: 473`: DuckDB says line, and counts
/// records, a quoted field spanning lines being in one). The lines after it quote the record
/// (`Original Line: …`), say what is wrong with it, list possible fixes in DuckDB's reader
/// options, then the reader's settings one per line, the first naming the file (`  file = …`).
const CSV_LINE: &str = "CSV Error on Line: ";

/// The failure of DuckDB's CSV reader at one record of a file that `message` reports (its `CSV
/// Error on Line: N` family: `Conversion Error: …` for a value the declared type refuses,
/// `Invalid Input Error: …` for a line with too many or too few fields), with the file its
/// settings name; `None` for any other message, or one naming no file. The possible fixes and the
/// settings after the problem are DuckDB's reader options, not efmesh's, and are left out.
pub fn csv_line_error(message: &str) -> Option<super::CsvLineError> {
    let mut lines = message.lines();
    let head = lines.next()?.trim_end();
    let (_, number) = head.split_once(CSV_LINE)?;
    let record: u64 = number.trim().parse().ok()?;
    let (mut text, mut problem, mut file) = (None, None, None);
    for l in lines {
        if let Some(t) = l.strip_prefix("Original Line: ") {
            if text.is_none() {
                text = Some(t.trim_end().to_string());
            }
        } else if let Some(f) = l.trim_start().strip_prefix("file = ") {
            file = Some(f.trim_end().to_string());
            break;
        } else if problem.is_none() && !l.trim().is_empty() {
            problem = Some(l.trim().to_string());
        }
    }
    let problem = problem.unwrap_or_default();
    let conversion = csv_conversion(&problem);
    Some(super::CsvLineError { head: head.to_string(), record, text, problem, conversion, file: file.filter(|f| !f.is_empty())? })
}

/// The column, value and type of DuckDB's `Error when converting column "c". Could not convert
/// string "v" to 'T'`; `None` for any other problem.
fn csv_conversion(problem: &str) -> Option<super::CsvConversion> {
    let rest = problem.strip_prefix("Error when converting column \"")?;
    let (column, rest) = rest.split_once("\". Could not convert string \"")?;
    let (value, ty) = rest.rsplit_once("\" to '")?;
    let ty = ty.strip_suffix('\'')?;
    Some(super::CsvConversion { column: column.to_string(), value: value.to_string(), ty: ty.to_string() })
}

/// True for a statement that changes the catalog only (views, schemas, comments): cheap to run
/// again, so a transaction of them may be sent as one batch.
fn catalog_only(statement: &str) -> bool {
    let head: String = statement.trim_start().chars().take(40).collect::<String>().to_ascii_uppercase();
    let head = head.split_whitespace().collect::<Vec<_>>().join(" ");
    ["CREATE VIEW", "CREATE OR REPLACE VIEW", "DROP VIEW", "ALTER VIEW", "CREATE SCHEMA", "COMMENT ON"].iter().any(|p| head.starts_with(p))
}

/// The statement re-creating a view from its `duckdb_views().sql` (`CREATE VIEW …`, schema-
/// qualified): `CREATE OR REPLACE VIEW …`; `None` for any other text.
fn recreate_view(sql: &str) -> Option<String> {
    sql.trim().strip_prefix("CREATE VIEW ").map(|rest| format!("CREATE OR REPLACE VIEW {rest}"))
}

/// The `hint:` for DuckDB's message refusing to open a file: [`lock_hint`], or what to do with a
/// file DuckDB finds corrupt.
fn open_hint(message: &str) -> String {
    if super::is_corrupt_file(message) {
        return "\n  hint: DuckDB cannot read this file (a block failed its checksum: DuckDB 1.5.5 can leave a file so when its process is killed during a checkpoint, see docs/operations.md); \
                move it aside (keep it for a bug report) and run `efmesh apply <env>` for each environment: every version the state store records is rebuilt"
            .to_string();
    }
    lock_hint(message)
}

/// The `--retries` the running command was given when it takes the flag (`apply`, `run`), for
/// the hint for a file another process holds ([`lock_hint`]); negative (the default) when it does
/// not: the other commands (and a library caller) have no such flag, and their hint only says to
/// run them again.
static RETRIES_OFFERED: AtomicI64 = AtomicI64::new(-1);

/// Says whether the running command takes `--retries N` and the count it was given (`None`: no
/// such flag), for the hint of a DuckDB file another process holds ([`lock_hint`]): set by the
/// CLI before it runs the command.
pub fn offer_retries(given: Option<u32>) {
    RETRIES_OFFERED.store(given.map_or(-1, i64::from), Ordering::Relaxed);
}

/// The hint for an open that failed because another process holds the file (DuckDB's `Could
/// not set lock on file … Conflicting lock is held in <program> (PID n)`): every environment of
/// a project lives in the one DuckDB file, which one process writes at a time. `--retries N` is
/// offered only when the running command takes it ([`offer_retries`]). Empty for any other
/// failure.
fn lock_hint(message: &str) -> String {
    lock_hint_with(message, u32::try_from(RETRIES_OFFERED.load(Ordering::Relaxed)).ok())
}

/// [`lock_hint`] for a command given `retries` (`None`: it takes no `--retries`): one given none
/// (0) is offered `--retries N`; one that already retried N times, a larger `--retries`.
fn lock_hint_with(message: &str, retries: Option<u32>) -> String {
    if !super::is_locked_file(message) {
        return String::new();
    }
    let pid =
        message.split_once("(PID ").and_then(|(_, rest)| rest.split_once(')')).map(|(pid, _)| pid.trim()).filter(|p| p.chars().all(|c| c.is_ascii_digit()));
    let who = pid.map_or_else(|| "another process".to_string(), |p| format!("another process (pid {p})"));
    let retry = match retries {
        None => String::new(),
        Some(0) => ", or pass `--retries N` to retry with backoff".to_string(),
        Some(n) => format!(", or pass a larger `--retries` than {n} to retry longer"),
    };
    format!(
        "\n  hint: {who} is writing this DuckDB file (every environment of the project lives in it, and DuckDB lets one process write it at a time); run this again once that process is done{retry}"
    )
}

/// DuckDB's spelling ([`super::dialect::Dialect`]): `CREATE OR REPLACE` for tables, views and
/// temporary tables (one statement each), temporary relations in `temp.main`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DuckDbDialect;

impl super::dialect::Dialect for DuckDbDialect {
    fn max_identifier_bytes(&self) -> Option<usize> {
        None
    }

    /// One process writes a DuckDB file at a time (its lock): the caller's comment is current.
    fn comment_guard(&self, _relation: &str) -> Option<[String; 2]> {
        None
    }

    fn sqlparser_first(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "duckdb"
    }

    fn title(&self) -> &'static str {
        "DuckDB"
    }

    fn supports(&self, _feature: super::dialect::Feature) -> bool {
        true
    }

    fn canonicalize(&self, sql: &str) -> Result<crate::sql::canon::Canonical, crate::sql::canon::SqlError> {
        super::canonicalize(sql)
    }

    fn replace_table_as(&self, relation: &str, query: &str) -> Vec<String> {
        vec![format!("CREATE OR REPLACE TABLE {relation} AS{}", super::dialect::after_as(query))]
    }

    fn refills_tables(&self) -> bool {
        false
    }

    fn replace_view_as(&self, relation: &str, query: &str) -> Vec<String> {
        vec![format!("CREATE OR REPLACE VIEW {relation} AS{}", super::dialect::after_as(query))]
    }

    fn try_cast(&self, expr: &str, ty: &str) -> Option<String> {
        Some(format!("TRY_CAST({expr} AS {ty})"))
    }

    fn array_text(&self, _items: &[crate::core::json::Json]) -> Option<String> {
        None
    }

    fn temp_relation(&self, name: &str) -> String {
        format!("temp.main.{}", crate::core::name::quote_ident(name))
    }

    fn begin_read_only(&self) -> String {
        // The connection is read-only already; a DuckDB transaction reads one snapshot.
        "BEGIN TRANSACTION".to_string()
    }

    fn comparable(&self, expr: &str, ty: &str) -> String {
        // Every DuckDB type a model may have compares (JSON too); intervals and floats compare
        // equal when they differ ([`super::dialect::equal_when_different`]): as text.
        if super::dialect::equal_when_different(ty) { self.text_of(expr) } else { expr.to_string() }
    }

    fn full_join_match(&self, left: &str, right: &str, _exact_numbers: bool) -> String {
        // DuckDB joins on any condition: the values themselves, `1` equal to `1.00`.
        format!("{left} IS NOT DISTINCT FROM {right}")
    }

    fn replace_temp_table_as(&self, name: &str, query: &str) -> Vec<String> {
        vec![format!("CREATE OR REPLACE TEMP TABLE {} AS {query}", crate::core::name::quote_ident(name))]
    }
}

impl Engine for DuckDb {
    fn sql(&self) -> &'static dyn super::dialect::Dialect {
        &DuckDbDialect
    }

    fn is_unbindable(&self, error: &EngineError) -> bool {
        is_unbindable(&error.message)
    }

    fn csv_line_error(&self, error: &EngineError) -> Option<super::CsvLineError> {
        csv_line_error(&error.message)
    }

    fn load_extension(&mut self, name: &str) -> Result<(), EngineError> {
        DuckDb::load_extension(self, name)
    }

    fn checkpoint(&mut self) -> Result<(), EngineError> {
        self.execute("CHECKPOINT")
    }

    fn execute(&mut self, sql: &str) -> Result<(), EngineError> {
        tracing::debug!(sql, "execute");
        self.conn.execute_batch(sql).map_err(|e| EngineError::new(sql, parser_line_fixed(&self.conn, sql, e.to_string())))
    }

    fn transaction(&mut self, statements: &[String]) -> Result<(), EngineError> {
        self.begin_with(statements)?;
        self.commit_open()
    }

    fn transaction_if(&mut self, statements: &[String], commit_if: &mut dyn FnMut() -> bool) -> Result<bool, EngineError> {
        self.begin_with(statements)?;
        if !commit_if() {
            self.conn.execute_batch("ROLLBACK").map_err(|e| EngineError::new("ROLLBACK", e.to_string()))?;
            return Ok(false);
        }
        self.commit_open()?;
        Ok(true)
    }

    fn describe_many(&mut self, queries: &[String]) -> Vec<Result<Vec<DescribedColumn>, EngineError>> {
        // Binding is CPU-bound (and binding a file source reads the file): spread the queries over
        // a few connections of this database, each a session like a build worker's.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4).min(queries.len());
        if threads < 2 {
            return describe_grouped(self, queries);
        }
        let parts: Vec<&[String]> = queries.chunks(queries.len().div_ceil(threads)).collect();
        let mut others: Vec<Option<Box<dyn Engine + Send>>> = (1..parts.len()).map(|_| self.worker()).collect();
        let mut results = Vec::with_capacity(queries.len());
        std::thread::scope(|scope| {
            let handles: Vec<_> = parts[1..]
                .iter()
                .zip(others.iter_mut())
                .map(|(&part, db)| (part, db.take().map(|mut db| scope.spawn(move || describe_grouped(&mut *db, part)))))
                .collect();
            results.extend(describe_grouped(self, parts[0]));
            for (part, handle) in handles {
                match handle.map(|h| h.join()) {
                    Some(Ok(described)) if described.len() == part.len() => results.extend(described),
                    // No second connection, or its thread stopped: described here, one by one,
                    // so every query still gets its own answer in its place.
                    _ => results.extend(part.iter().map(|q| self.describe(q))),
                }
            }
        });
        results
    }

    fn describe(&mut self, query: &str) -> Result<Vec<DescribedColumn>, EngineError> {
        let sql = format!("DESCRIBE {query}");
        let rows = self.query(&sql).map_err(|e| EngineError::new(query, parser_line_fixed(&self.conn, query, e.message)))?;
        Ok(rows
            .into_iter()
            .map(|r| DescribedColumn { name: r.first().cloned().flatten().unwrap_or_default(), ty: r.get(1).cloned().flatten().unwrap_or_default() })
            .collect())
    }

    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        tracing::debug!(sql, "query");
        let mut stmt = self.conn.prepare(sql).map_err(|e| EngineError::new(sql, e.to_string()))?;
        let mut rows = stmt.query([]).map_err(|e| EngineError::new(sql, e.to_string()))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| EngineError::new(sql, e.to_string()))? {
            let n = row.as_ref().column_count();
            let mut vals = Vec::with_capacity(n);
            for i in 0..n {
                let v: Value = row.get(i).map_err(|e| EngineError::new(sql, e.to_string()))?;
                vals.push(value_text(v));
            }
            out.push(vals);
        }
        Ok(out)
    }

    fn query_with_columns(&mut self, sql: &str, limit: usize) -> Result<super::Described, EngineError> {
        let columns = self.describe(sql)?;
        // `COLUMNS(*)` keeps duplicate output names apart, which a list of quoted names cannot.
        let rows = self.query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM (\n{sql}\n) AS _efmesh_q LIMIT {limit}"))?;
        Ok((columns, rows))
    }

    fn stage_text(&mut self, table: &str, columns: &[String], rows: &[Vec<Option<String>>]) -> Result<(), EngineError> {
        use crate::core::name::quote_ident;
        let cols: Vec<String> = columns.iter().map(|c| format!("{} VARCHAR", quote_ident(c))).collect();
        let create = format!("CREATE OR REPLACE TEMP TABLE {} ({})", quote_ident(table), cols.join(", "));
        self.execute(&create)?;
        // The appender binds values directly: no SQL text per row, no literal escaping.
        let what = format!("appending {} rows to temporary table {}", rows.len(), quote_ident(table));
        let mut appender = self.conn.appender_to_catalog_and_db(table, "temp", "main").map_err(|e| EngineError::new(&what, e.to_string()))?;
        for row in rows {
            appender.append_row(duckdb::appender_params_from_iter(row)).map_err(|e| EngineError::new(&what, e.to_string()))?;
        }
        appender.flush().map_err(|e| EngineError::new(&what, e.to_string()))
    }

    fn execute_secret(&mut self, label: &str, sql: &str) -> Result<(), EngineError> {
        tracing::debug!(statement = label, "execute (secret, not logged)");
        self.conn.execute_batch(sql).map_err(|e| {
            let message = e.to_string();
            EngineError::new(label, message.lines().next().unwrap_or_default().to_string())
        })
    }

    fn catalog(&mut self) -> Result<super::Catalog, EngineError> {
        let rows = self.query(
            "SELECT schema_name, view_name, comment, sql FROM duckdb_views() WHERE database_name = current_database() AND NOT internal AND NOT temporary \
             UNION ALL SELECT schema_name, table_name, comment, NULL FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary",
        )?;
        Ok(super::catalog_of(rows))
    }

    fn view_definitions(&mut self, views: &[(String, String)]) -> Result<std::collections::BTreeMap<(String, String), String>, EngineError> {
        use crate::core::name::quote_literal;
        let mut out = std::collections::BTreeMap::new();
        if views.is_empty() {
            return Ok(out);
        }
        // DuckDB's names are case-insensitive: a view is found whatever case it was created in
        // (`s.A` and `s.a` are one view), as [`Engine::view_definitions_in`] finds it.
        let lower = |(s, v): &(String, String)| (s.to_lowercase(), v.to_lowercase());
        let schemas: std::collections::BTreeSet<String> = views.iter().map(|(s, _)| s.to_lowercase()).collect();
        let list: Vec<String> = schemas.iter().map(|s| quote_literal(s)).collect();
        // `sql` is DuckDB's own rendering of the `CREATE VIEW` statement, schema-qualified.
        let sql = format!(
            "SELECT schema_name, view_name, sql FROM duckdb_views() WHERE database_name = current_database() AND NOT internal AND lower(schema_name) IN ({})",
            list.join(", ")
        );
        let mut found = std::collections::HashMap::new();
        for row in self.query(&sql)? {
            let [Some(schema), Some(view), Some(text)] = [row.first().cloned().flatten(), row.get(1).cloned().flatten(), row.get(2).cloned().flatten()] else {
                continue;
            };
            found.insert(lower(&(schema, view)), text);
        }
        for key in views {
            let Some(text) = found.get(&lower(key)) else { continue };
            let Some(statement) = recreate_view(text) else {
                return Err(EngineError::new(&sql, format!("unexpected definition of view {}.{}: {}", key.0, key.1, text.trim())));
            };
            out.insert(key.clone(), statement);
        }
        Ok(out)
    }

    fn view_definitions_in(&self, catalog: &super::Catalog, views: &[(String, String)]) -> Option<std::collections::BTreeMap<(String, String), String>> {
        // The catalog's `sql` is the same `duckdb_views().sql` the query above reads (it lists
        // no temporary view; no environment view is one); its keys are lowercased, as the query
        // above matches. A view absent, or a table of that name, is absent here as there.
        let mut out = std::collections::BTreeMap::new();
        for (schema, view) in views {
            let Some(entry) = catalog.relations.get(&(schema.to_lowercase(), view.to_lowercase())) else { continue };
            let Some(text) = &entry.sql else { continue };
            out.insert((schema.clone(), view.clone()), recreate_view(text)?);
        }
        Some(out)
    }

    fn canceller(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        let handle = self.conn.interrupt_handle();
        Some(Box::new(move || handle.interrupt()))
    }

    fn worker(&mut self) -> Option<Box<dyn Engine + Send>> {
        // One database instance, so one catalog, buffer pool and thread pool (`threads`,
        // `memory_limit` and loaded extensions are the instance's); the session's own settings
        // are set again.
        let conn = self.conn.try_clone().ok()?;
        let mut db = DuckDb::new(conn);
        // A worker that cannot read time zones as the main session does builds nothing: the
        // caller falls back to the main connection alone.
        db.conn.execute_batch("SET TimeZone = 'UTC'").ok()?;
        db.extension_directory = self.extension_directory.clone();
        db.extension_files = self.extension_files.clone();
        db.loaded = self.loaded.clone();
        Some(Box::new(db))
    }

    fn share_threads(&mut self, builds: usize) {
        // DuckDB runs a statement on the calling thread plus `threads − 1` background threads
        // shared by every connection of the database. With several models built at once, each
        // build connection's own thread executes too: the pool shrinks by one per extra build,
        // so on 2 cores two builds run one thread each instead of three threads contending
        // (measured in docs/benchmark.md, "DuckDB's threads under `--jobs`").
        let (full, now) = match self.threads {
            Some(t) => t,
            None => {
                let read = self.query("SELECT CAST(current_setting('threads') AS VARCHAR)").ok();
                let Some(t) = read.and_then(|r| r.first().and_then(|r| r.first().cloned().flatten())).and_then(|t| t.parse::<usize>().ok()) else {
                    return;
                };
                self.threads = Some((t, t));
                (t, t)
            }
        };
        let want = if builds <= 1 { full } else { full.saturating_sub(builds - 1).max(1) };
        if want == now {
            return;
        }
        match self.conn.execute_batch(&format!("SET threads = {want}")) {
            Ok(()) => {
                tracing::debug!(builds, threads = want, "DuckDB threads");
                self.threads = Some((full, want));
            }
            Err(e) => tracing::debug!(builds, threads = want, error = %e, "DuckDB refused a thread count; left as it was"),
        }
    }

    fn relation_exists(&mut self, schema: &str, name: &str) -> Result<bool, EngineError> {
        let sql = format!(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = {} AND table_name = {}",
            crate::core::name::quote_literal(schema),
            crate::core::name::quote_literal(name)
        );
        let rows = self.query(&sql)?;
        Ok(rows.first().and_then(|r| r.first().cloned().flatten()).is_some_and(|n| n != "0"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed download of an extension (offline) is said in efmesh's words with DuckDB's short
    /// cause, not as DuckDB's URL and troubleshooting link; other failures keep DuckDB's message.
    #[test]
    fn an_extension_that_could_not_be_downloaded_is_said_in_a_sentence() {
        // DuckDB 1.5.5's message, offline.
        let offline = "IO Error: Failed to download extension \"ducklake\" at URL \"http://extensions.duckdb.org/v1.5.5/linux_amd64/ducklake.duckdb_extension.gz\"\n\
                       Extension \"ducklake\" is an existing extension.\n\n\
                       For more info, visit https://duckdb.org/docs/stable/extensions/troubleshooting?version=v1.5.5&platform=linux_amd64&extension=ducklake (ERROR Could not establish connection)";
        assert_eq!(
            extension_not_installed("ducklake", offline),
            "the `ducklake` extension is not installed and could not be downloaded (offline?): provision it (`scripts/provision-extensions`) and set \
             [engine] extension_directory (docs/extensions.md) (DuckDB: Could not establish connection)"
        );
        let no_cause = "IO Error: Failed to download extension \"httpfs\" at URL \"http://extensions.duckdb.org/x.gz\"";
        assert!(extension_not_installed("httpfs", no_cause).ends_with("set [engine] extension_directory (docs/extensions.md)"));
        let other = "Invalid Input Error: Extension \"x\" has an unsupported ABI";
        assert_eq!(
            extension_not_installed("x", other),
            format!("cannot load DuckDB extension `x`: {other}; offline machines set [engine] extension_directory (see docs/extensions.md)")
        );
    }

    #[test]
    fn duckdb_is_v1_5_5_whichever_build_linked_it() {
        let mut db = DuckDb::in_memory().unwrap();
        assert_eq!(db.version().unwrap(), "v1.5.5");
    }

    /// An environment's record (SPEC §4, invariant 64), written as a promotion writes it, is read
    /// back from the catalog and is never listed as efmesh's storage (the janitor's listing),
    /// while a physical relation of a model in a schema `_efmesh_env` still is.
    #[test]
    fn an_environment_record_is_read_from_the_catalog_and_is_no_storage() {
        use crate::engine::Engine as _;
        let mut db = DuckDb::in_memory().unwrap();
        let physical = format!("_efmesh_env__t__{}", "ab".repeat(16));
        db.execute(&format!("CREATE SCHEMA _efmesh; CREATE TABLE _efmesh.{physical} (a INTEGER)")).unwrap();
        let record = crate::ownership::env_record_sql(&DuckDbDialect, "prod", "ab12");
        db.transaction(&record).unwrap();
        // Written again by the next promotion: replaced, re-commented.
        db.transaction(&crate::ownership::env_record_sql(&DuckDbDialect, "prod", "cd34")).unwrap();
        let catalog = db.catalog().unwrap();
        assert_eq!(crate::ownership::env_recorded_by(&catalog, "prod"), Some("cd34"));
        assert_eq!(crate::ownership::env_recorded_by(&catalog, "dev"), None);
        let listed: Vec<String> = db.storage_relations().unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(listed, vec![physical]);
    }

    #[test]
    fn a_transaction_commits_whole_or_not_at_all_whether_one_statement_or_a_text_of_several() {
        let mut db = DuckDb::in_memory().unwrap();
        let exists = |db: &mut DuckDb, t: &str| db.relation_exists("main", t).unwrap();
        // One statement: committed, or on failure nothing and a usable session.
        db.transaction(&["CREATE TABLE t AS SELECT 1 AS x;".to_string()]).unwrap();
        assert!(exists(&mut db, "t"));
        assert!(db.transaction(&["CREATE TABLE u AS SELECT CAST('x' AS INTEGER) AS y".to_string()]).is_err());
        assert!(!exists(&mut db, "u"));
        db.transaction(&["CREATE TABLE u AS SELECT 2 AS y".to_string()]).unwrap();
        assert!(exists(&mut db, "u"));
        // One text holding two statements: the first is rolled back with the second.
        let two = "CREATE TABLE v AS SELECT 1 AS x; CREATE TABLE w AS SELECT CAST('x' AS INTEGER) AS y".to_string();
        assert!(db.transaction(&[two]).is_err());
        assert!(!exists(&mut db, "v") && !exists(&mut db, "w"));
        // A `;` inside a literal is data, not a separator.
        db.transaction(&["CREATE TABLE s AS SELECT ';' AS s".to_string()]).unwrap();
        assert_eq!(db.query("SELECT s FROM s").unwrap(), vec![vec![Some(";".to_string())]]);
    }

    #[test]
    fn only_duckdbs_own_shapes_of_a_missing_name_or_file_are_unbindable() {
        // DuckDB 1.5.5's messages, each the engine's own for an undo statement's definition.
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE SCHEMA _efmesh; CREATE TABLE _efmesh.t (a INTEGER)").unwrap();
        let missing = std::env::temp_dir().join(format!("efmesh-unbindable-{}", std::process::id()));
        let definitions = [
            "CREATE OR REPLACE VIEW v AS SELECT * FROM _efmesh.gone".to_string(),
            "CREATE OR REPLACE VIEW v AS SELECT nosuch FROM _efmesh.t".to_string(),
            "CREATE OR REPLACE VIEW nosch.v AS SELECT 1 AS x".to_string(),
            "CREATE OR REPLACE VIEW v AS SELECT * FROM \"_efmesh_ducklake\".\"main\".\"m__t__ab\"".to_string(),
            format!("CREATE OR REPLACE VIEW v AS SELECT * FROM read_csv('{}/e.csv')", missing.display()),
            format!("CREATE OR REPLACE VIEW v AS SELECT * FROM read_parquet(['{}/2026-01-01.parquet'])", missing.display()),
        ];
        for sql in &definitions {
            let e = db.transaction(std::slice::from_ref(sql)).expect_err(sql);
            assert!(db.is_unbindable(&e), "{sql}: {}", e.message);
        }
        for yes in [
            "Catalog Error: Table with name s__a__ab does not exist!\nDid you mean \"pg_catalog.pg_index\"?\n\nLINE 1: …",
            "Binder Error: Referenced column \"x\" not found in FROM clause!\nCandidate bindings: \"a\"",
            "Binder Error: Catalog \"_efmesh_ducklake\" does not exist!",
            "IO Error: No files found that match the pattern \"/old/root/data/e.csv\"\n\nLINE 1: …",
        ] {
            assert!(is_unbindable(yes), "{yes}");
        }
        // Failures of the moment, or of the data, never of the definition: whatever they say.
        let e = db.query("SELECT CAST('x' AS INTEGER)").expect_err("a conversion fails");
        assert!(!db.is_unbindable(&e), "{}", e.message);
        for no in [
            "HTTP Error: HTTP GET error reading 's3://lake/w/m__d/ab/2026-01-02.parquet' in region 'us-east-1' (HTTP 503 Service Unavailable)",
            "HTTP Error: HTTP GET error reading 's3://lake/w/m__d/ab/2026-01-02.parquet' in region 'us-east-1' (HTTP 404 Not Found)",
            "HTTP Error: Unable to connect to URL \"http://127.0.0.1:9/b/x.parquet\": 503 (SlowDown): the key does not exist",
            "IO Error: Cannot open file \"/mnt/lake/x.parquet\": the mount point does not exist",
            "IO Error: Could not set lock on file \"/p/efmesh.duckdb\": Conflicting lock is held",
            "IO Error: No space left on device",
            "Conversion Error: Could not convert string 'x' to INT32",
            "engine error: the relation does not exist",
            "connection closed",
        ] {
            assert!(!is_unbindable(no), "{no}");
        }
    }

    #[test]
    fn data_diff_samples_like_every_engine_and_joins_keys_null_safely() {
        use crate::engine::dialect::{Dialect, Standard};
        // The sample's hash bucket is the same text on both engines, so samples pair up.
        assert_eq!(DuckDbDialect.sample_filter(&["\"id\"".into()], 50), Standard.sample_filter(&["\"id\"".into()], 50));
        assert_eq!(DuckDbDialect.full_join_match("a.k", "b.k", false), "a.k IS NOT DISTINCT FROM b.k");
        // Exact numbers too: DuckDB compares the values (`1` equal to `1.00`), not their text.
        assert_eq!(DuckDbDialect.full_join_match("a.k", "b.k", true), "a.k IS NOT DISTINCT FROM b.k");
        // A decimal key hashes as the same text on both engines.
        assert_eq!(DuckDbDialect.exact_number_text("\"id\""), Standard.exact_number_text("\"id\""));
    }

    #[test]
    fn exact_numbers_of_any_type_and_scale_read_as_one_text_for_one_value() {
        use crate::engine::dialect::Dialect;
        let mut db = DuckDb::in_memory().unwrap();
        let text = |db: &mut DuckDb, value: &str| {
            let rows = db.query(&format!("SELECT {} FROM (SELECT {value} AS n) AS t", DuckDbDialect.exact_number_text("n"))).unwrap();
            rows[0][0].clone().unwrap_or_default()
        };
        for (value, wanted) in [
            ("CAST(1 AS INTEGER)", "1"),
            ("CAST(1 AS DECIMAL(10,2))", "1"),
            ("CAST(1.5 AS DECIMAL(12,4))", "1.5"),
            ("CAST(10 AS DECIMAL(10,2))", "10"),
            ("CAST(100 AS HUGEINT)", "100"),
            ("CAST(0 AS DECIMAL(10,2))", "0"),
            ("CAST(-2.5 AS DECIMAL(10,2))", "-2.5"),
            ("CAST(0.05 AS DECIMAL(10,3))", "0.05"),
        ] {
            assert_eq!(text(&mut db, value), wanted, "{value}");
        }
    }

    #[test]
    fn view_definitions_recreate_views_exactly() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE SCHEMA \"dev__s\"; CREATE TABLE t1 AS SELECT 1 AS a, 'x' AS \"b c\"; CREATE TABLE t2 AS SELECT 2 AS a, 'y' AS \"b c\";").unwrap();
        db.execute("CREATE VIEW \"dev__s\".\"v\" AS SELECT a, \"b c\" FROM t1").unwrap();
        let wanted = vec![("dev__s".to_string(), "v".to_string()), ("dev__s".to_string(), "missing".to_string())];
        let defs = db.view_definitions(&wanted).unwrap();
        assert_eq!(defs.len(), 1, "{defs:?}");
        let restore = defs[&wanted[0]].clone();
        assert!(restore.starts_with("CREATE OR REPLACE VIEW "), "{restore}");
        db.execute("CREATE OR REPLACE VIEW \"dev__s\".\"v\" AS SELECT a, \"b c\" FROM t2").unwrap();
        db.transaction(&[restore]).unwrap();
        assert_eq!(db.query("SELECT a, \"b c\" FROM \"dev__s\".\"v\"").unwrap(), vec![vec![Some("1".to_string()), Some("x".to_string())]]);
    }

    #[test]
    fn view_definitions_from_the_catalog_equal_the_queried_ones_whatever_the_case() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute(
            "CREATE SCHEMA \"Dev__S\"; CREATE TABLE t1 AS SELECT 1 AS a; \
             CREATE VIEW \"Dev__S\".\"V\" AS SELECT a FROM t1; CREATE VIEW \"Dev__S\".w AS SELECT 2 AS a; \
             CREATE TABLE \"Dev__S\".t AS SELECT 3 AS a",
        )
        .unwrap();
        // The same view asked for in two cases (a rename that only changes case), one absent,
        // one that is a table.
        let wanted: Vec<(String, String)> = [("dev__s", "v"), ("Dev__S", "V"), ("DEV__S", "W"), ("dev__s", "missing"), ("dev__s", "t")]
            .iter()
            .map(|(s, v)| (s.to_string(), v.to_string()))
            .collect();
        let queried = db.view_definitions(&wanted).unwrap();
        assert_eq!(queried.len(), 3, "{queried:?}");
        assert_eq!(queried[&wanted[0]], queried[&wanted[1]]);
        let catalog = db.catalog().unwrap();
        assert_eq!(db.view_definitions_in(&catalog, &wanted), Some(queried));
    }

    #[test]
    fn transactions_roll_back_whole() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE TABLE t (x INTEGER)").unwrap();
        let err = db.transaction(&["INSERT INTO t VALUES (1)".into(), "INSERT INTO nope VALUES (2)".into()]).unwrap_err();
        assert!(err.sql.contains("nope"), "{err}");
        assert_eq!(db.query("SELECT count(*) FROM t").unwrap(), vec![vec![Some("0".to_string())]]);
    }

    #[test]
    fn a_transaction_commits_only_when_asked_right_before_its_commit() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE TABLE t (x INTEGER)").unwrap();
        // Catalog-only statements (one round trip) and data statements, each path.
        let views: Vec<String> = vec!["CREATE OR REPLACE VIEW v1 AS SELECT x FROM t".into(), "CREATE OR REPLACE VIEW v2 AS SELECT x FROM t".into()];
        let inserts: Vec<String> = vec!["INSERT INTO t VALUES (1)".into(), "INSERT INTO t VALUES (2)".into()];
        for statements in [&views, &inserts] {
            let mut asked = 0;
            let committed = db
                .transaction_if(statements, &mut || {
                    asked += 1;
                    false
                })
                .unwrap();
            assert!(!committed);
            assert_eq!(asked, 1, "asked once, after the statements ran");
        }
        let count = "SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM duckdb_views() WHERE view_name IN ('v1', 'v2'))";
        assert_eq!(db.query(count).unwrap(), vec![vec![Some("0".to_string())]], "nothing of a transaction refused its commit lands");
        for statements in [&views, &inserts] {
            assert!(db.transaction_if(statements, &mut || true).unwrap());
        }
        assert_eq!(db.query(count).unwrap(), vec![vec![Some("4".to_string())]]);
        let failing: Vec<String> = vec!["INSERT INTO t VALUES (3)".into(), "INSERT INTO nope VALUES (4)".into()];
        let err = db.transaction_if(&failing, &mut || -> bool { panic!("asked after a failure") }).unwrap_err();
        assert!(err.sql.contains("nope"), "{err}");
        assert_eq!(db.query("SELECT count(*) FROM t").unwrap(), vec![vec![Some("2".to_string())]]);
    }

    #[test]
    fn describe_reports_names_and_types_without_running() {
        let mut db = DuckDb::in_memory().unwrap();
        let cols = db.describe("SELECT 1::BIGINT AS a, 'x' AS b, TIMESTAMP '2026-01-01' AS c").unwrap();
        let got: Vec<(String, String)> = cols.into_iter().map(|c| (c.name, c.ty)).collect();
        assert_eq!(got, vec![("a".into(), "BIGINT".into()), ("b".into(), "VARCHAR".into()), ("c".into(), "TIMESTAMP".into())]);
    }

    #[test]
    fn serialize_sql_returns_duckdbs_parse_tree() {
        let mut db = DuckDb::in_memory().unwrap();
        let json = db.serialize_sql("SELECT 1 AS a").unwrap();
        assert!(json.contains("SELECT_NODE"), "{json}");
    }

    #[test]
    fn the_catalog_lists_tables_and_views_with_their_comments() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE SCHEMA s; CREATE TABLE s.t (x INTEGER); CREATE VIEW s.v AS SELECT 1 AS x; CREATE TEMP TABLE tmp (x INTEGER)").unwrap();
        db.execute(&crate::engine::root_comment_sql("s.v", "/p/it's")).unwrap();
        let c = db.catalog().unwrap();
        assert!(c.contains("s", "t") && c.contains("s", "v") && !c.contains("temp", "tmp") && !c.contains("main", "tmp"), "{c:?}");
        assert_eq!(c.comment("s", "v").and_then(crate::engine::comment_root), Some("/p/it's"));
        assert_eq!(c.comment("s", "t"), None);
        db.execute("CREATE SCHEMA \"_efmesh\"; CREATE TABLE \"_efmesh\".\"s__t__ab\" (x INTEGER); CREATE VIEW s.w AS SELECT x FROM \"_efmesh\".\"s__t__ab\"")
            .unwrap();
        let c = db.catalog().unwrap();
        let sql = c.view_sql("S", "W").expect("a view's definition");
        assert!(crate::engine::view_names(sql, "\"_efmesh\".\"s__t__ab\""), "{sql}");
        assert_eq!(c.view_sql("s", "t"), None);
    }

    /// `threads` and `memory_limit` as DuckDB reports them on `db`.
    fn resources(db: &mut DuckDb) -> (String, String) {
        let rows = db.query("SELECT CAST(current_setting('threads') AS VARCHAR), current_setting('memory_limit')").unwrap();
        (rows[0][0].clone().unwrap(), rows[0][1].clone().unwrap())
    }

    #[test]
    fn engine_settings_reach_every_database_efmesh_opens() {
        let settings = EngineSection { threads: Some(2), memory_limit: Some("123MiB".into()), ..EngineSection::default() };
        let want = ("2".to_string(), "123.0 MiB".to_string());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.duckdb");
        {
            let mut db = DuckDb::open(&path, &settings).unwrap();
            assert_eq!(resources(&mut db), want, "the writable open (apply, run, audit, janitor)");
            // `describe_many`'s worker connections are clones: the settings are global to the database.
            let mut clone = DuckDb::new(db.conn.try_clone().unwrap());
            assert_eq!(resources(&mut clone), want, "a cloned connection");
        }
        let mut db = DuckDb::open_read_only_with(&path, &settings).unwrap();
        assert_eq!(resources(&mut db), want, "the read-only open with settings (preview, janitor --dry-run)");
        drop(db);
        let mut db = DuckDb::open_read_only(&path, &settings).unwrap();
        assert_eq!(resources(&mut db), ("1".to_string(), want.1.clone()), "the catalog open: one thread, the memory limit");
        let mut db = DuckDb::in_memory_with(&settings).unwrap();
        assert_eq!(resources(&mut db), want, "the in-memory engine (efmesh test, watch's tests, preview without a file)");
        // Without settings, DuckDB's defaults stay.
        let mut db = DuckDb::in_memory().unwrap();
        assert_ne!(resources(&mut db).1, want.1);
    }

    #[test]
    fn the_memory_limit_grammar_agrees_with_duckdb() {
        let valid = ["4GB", "4 GB", " 4gb ", "512MiB", "1.5GB", "100KB", "1e3MB", "4 gigabytes", "2 Bytes", "4G", "3 tib", "-1", "none", "null"];
        let invalid = ["80%", "1000", "NONE", "bogus", "", "4XB", "GB", "1 kibibyte", "1.5.3GB", "1-2GB", "e", "1e30GB", " -x"];
        let mut db = DuckDb::in_memory().unwrap();
        for v in valid.iter().chain(&invalid) {
            let ours = crate::config::memory_limit_problem(v);
            let duckdb = db.execute(&format!("SET memory_limit = {}", crate::core::name::quote_literal(v)));
            assert_eq!(ours.is_none(), duckdb.is_ok(), "`{v}`: efmesh says {ours:?}, DuckDB says {duckdb:?}");
            assert_eq!(ours.is_none(), valid.contains(v), "`{v}`");
        }
        // Stricter than DuckDB on purpose: it ignores what follows the unit; a config error names it.
        assert!(crate::config::memory_limit_problem("4GB x").is_some());
    }

    #[test]
    fn sessions_run_in_utc() {
        let mut db = DuckDb::in_memory().unwrap();
        let rows = db.query("SELECT (TIMESTAMPTZ '2026-01-01 00:00:00+00' = TIMESTAMP '2026-01-01 00:00:00')::VARCHAR").unwrap();
        assert_eq!(rows, vec![vec![Some("true".to_string())]]);
    }

    #[test]
    fn a_csv_line_error_names_the_file_line_value_and_type_and_nothing_else_is_one() {
        // DuckDB 1.5.5's own message for a value its declared type refuses.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.csv");
        fs_err::write(&file, "id,n\n1,2\n2,NA\n").unwrap();
        let path = file.to_string_lossy().to_string();
        let mut db = DuckDb::in_memory().unwrap();
        let sql = format!("SELECT * FROM read_csv('{path}', header = true, delim = ',', types = {{'id': 'integer', 'n': 'integer'}})");
        let e = db.query(&sql).expect_err("NA is not an integer");
        let found = db.csv_line_error(&e).unwrap_or_else(|| panic!("{}", e.message));
        assert_eq!((found.head.as_str(), found.record), ("Conversion Error: CSV Error on Line: 3", 3));
        assert_eq!((found.text.as_deref(), found.file.as_str()), (Some("2,NA"), path.as_str()));
        assert_eq!(found.problem, "Error when converting column \"n\". Could not convert string \"NA\" to 'INTEGER'");
        let conversion = found.conversion.expect("a conversion");
        assert_eq!((conversion.column.as_str(), conversion.value.as_str(), conversion.ty.as_str()), ("n", "NA", "INTEGER"));
        // A line with another number of fields: no conversion, the file still named.
        let fields = "Invalid Input Error: CSV Error on Line: 25002\nOriginal Line: 1,2,3,9\nExpected Number of Columns: 3 Found: 4\nPossible fixes:\n* Enable null padding (null_padding=true) to replace missing values with NULL\n\n  file = /d/big.csv\n  delimiter = , (Set By User)\n";
        let found = csv_line_error(fields).expect("a CSV line error");
        assert_eq!((found.record, found.problem.as_str(), found.file.as_str()), (25002, "Expected Number of Columns: 3 Found: 4", "/d/big.csv"));
        assert_eq!(found.conversion, None);
        for no in [
            "Conversion Error: Could not convert string 'x' to INT32",
            "Invalid Input Error: Error when sniffing file \"/d/c.csv\".",
            "Conversion Error: CSV Error on Line: 3\nOriginal Line: 2,NA\n",
        ] {
            assert_eq!(csv_line_error(no), None, "{no}");
        }
    }

    #[test]
    fn a_file_held_by_another_process_is_named_with_its_pid_and_a_hint() {
        let held = "IO Error: Could not set lock on file \"/p/efmesh.duckdb\": Conflicting lock is held in /usr/bin/efmesh (PID 28536). See also https://duckdb.org/docs/stable/connect/concurrency";
        let hint = lock_hint_with(held, Some(0));
        assert!(hint.starts_with("\n  hint: another process (pid 28536) is writing this DuckDB file"), "{hint}");
        assert!(hint.ends_with("run this again once that process is done, or pass `--retries N` to retry with backoff"), "{hint}");
        assert_eq!(lock_hint_with("IO Error: Cannot open file \"/nope/x.duckdb\": No such file or directory", Some(0)), "");
        assert_eq!(open_hint(held), lock_hint(held));
        // A command without `--retries` (audit, preview, janitor…) is not told to pass it.
        let plain = lock_hint_with(held, None);
        assert!(plain.ends_with("run this again once that process is done") && !plain.contains("--retries"), "{plain}");
        // A command that already passed `--retries 3` is not told to pass `--retries N`.
        let retried = lock_hint_with(held, Some(3));
        assert!(retried.ends_with("run this again once that process is done, or pass a larger `--retries` than 3 to retry longer"), "{retried}");
        assert!(!retried.contains("--retries N"), "{retried}");
        let corrupt = open_hint("IO Error: Corrupt database file: computed checksum 1 does not match stored checksum 2 in block at location 12288");
        assert!(corrupt.starts_with("\n  hint: DuckDB cannot read this file") && corrupt.contains("`efmesh apply <env>`"), "{corrupt}");
    }

    #[test]
    fn workers_are_utc_sessions_of_the_same_database() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE SCHEMA s; CREATE TABLE s.t AS SELECT 41 AS x").unwrap();
        let mut w = db.worker().expect("a second connection");
        assert_eq!(w.query("SELECT x + 1 FROM s.t").unwrap(), vec![vec![Some("42".to_string())]]);
        let rows = w.query("SELECT (TIMESTAMPTZ '2026-01-01 00:00:00+00' = TIMESTAMP '2026-01-01 00:00:00')::VARCHAR").unwrap();
        assert_eq!(rows, vec![vec![Some("true".to_string())]]);
        // A temporary relation of one session is not the other's.
        db.execute("CREATE TEMP TABLE stage AS SELECT 1 AS x").unwrap();
        assert!(w.query("SELECT * FROM temp.main.stage").is_err());
    }

    #[test]
    fn builds_under_way_share_the_threads_and_a_build_alone_has_them_all() {
        let settings = EngineSection { threads: Some(3), ..EngineSection::default() };
        let mut db = DuckDb::in_memory_with(&settings).unwrap();
        let threads = |db: &mut DuckDb| db.query("SELECT CAST(current_setting('threads') AS VARCHAR)").unwrap()[0][0].clone().unwrap();
        for (builds, want) in [(2, "2"), (3, "1"), (5, "1"), (1, "3"), (4, "1"), (0, "3")] {
            db.share_threads(builds);
            assert_eq!(threads(&mut db), want, "{builds} builds under way");
        }
        // The setting is the database's: a worker connection sees it.
        let mut w = db.worker().unwrap();
        db.share_threads(2);
        assert_eq!(w.query("SELECT CAST(current_setting('threads') AS VARCHAR)").unwrap()[0][0].as_deref(), Some("2"));
        db.share_threads(0);
    }

    #[test]
    fn many_descriptions_come_back_in_the_order_asked_each_with_its_own_answer() {
        let mut db = DuckDb::in_memory().unwrap();
        let queries: Vec<String> = (0..9).map(|i| if i == 6 { "SELECT nope FROM nowhere".to_string() } else { format!("SELECT {i} AS c{i}") }).collect();
        let described = db.describe_many(&queries);
        assert_eq!(described.len(), queries.len());
        for (i, d) in described.iter().enumerate() {
            match d {
                Ok(cols) => assert_eq!(cols[0].name, format!("c{i}"), "query {i}"),
                Err(e) => assert!(i == 6 && e.message.contains("nowhere"), "query {i}: {e}"),
            }
        }
        assert!(described[6].is_err());
    }

    /// What a failed apply relies on to stop a source's audit under way: cancelling from another
    /// thread makes the connection's running statement fail (a sum over ten billion rows would
    /// otherwise run for many seconds).
    #[test]
    fn a_canceller_stops_the_statement_running_on_its_connection() {
        let mut db = DuckDb::in_memory().unwrap();
        let mut worker = db.worker().unwrap();
        let cancel = worker.canceller().expect("DuckDB connections can be interrupted");
        let started = std::time::Instant::now();
        let result = std::thread::scope(|s| {
            let h = s.spawn(move || worker.query("SELECT sum(i) FROM range(10000000000) AS t(i)"));
            std::thread::sleep(std::time::Duration::from_millis(200));
            cancel();
            h.join().unwrap()
        });
        let e = result.expect_err("the statement was interrupted");
        assert!(e.message.to_lowercase().contains("interrupt"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "it stopped when cancelled, not when done");
        db.query("SELECT 1").unwrap();
    }

    /// Describing sixteen queries in one statement must answer exactly what describing each alone
    /// does: the same columns, and an error where (and only where) the query alone has one —
    /// even for a column only another query of the group has, or duplicate output names.
    #[test]
    fn grouped_descriptions_equal_each_query_described_alone() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE TABLE t AS SELECT 1 AS z, 'x' AS y").unwrap();
        // The first group binds whole (so its columns come from the one statement); each later
        // one holds a query that does not bind alone, so it must not bind in the group either.
        let binds = [
            "SELECT 1 AS z",
            "SELECT 1 AS a, 2 AS a",
            "SELECT 1 AS A, 2 AS a",
            "SELECT 1 AS a, 'b' AS a_1",
            "SELECT * FROM t -- a comment at the end",
            "SELECT z + 1 AS n FROM t;",
            "WITH x AS (SELECT y FROM t) SELECT y AS v FROM x",
            "FROM t SELECT y, z",
            "SELECT count(*), sum(z) FROM t",
            "SELECT CAST(NULL AS DECIMAL(10, 2)) AS d, [1, 2] AS l, {'k': 1} AS s",
            "SELECT 1 AS \"__efmesh_0000000000000000_1\"",
        ];
        let fails = ["SELECT z FROM range(1)", "SELECT (SELECT y) AS w", "SELECT nope FROM nowhere"];
        // Each failing query in a group of its own whose other queries bind.
        let mut queries: Vec<String> = binds.iter().cycle().take(DESCRIBE_GROUP).map(|q| (*q).to_string()).collect();
        for f in fails {
            queries.extend(binds.iter().take(DESCRIBE_GROUP - 1).map(|q| (*q).to_string()));
            queries.push(f.to_string());
        }
        let alone: Vec<_> = queries.iter().map(|q| db.describe(q)).collect();
        let grouped = describe_grouped(&mut db, &queries);
        assert_eq!(grouped.len(), alone.len());
        for ((q, a), g) in queries.iter().zip(&alone).zip(&grouped) {
            match (a, g) {
                (Ok(a), Ok(g)) => assert_eq!(a, g, "{q}"),
                (Err(a), Err(g)) => assert_eq!(a.message, g.message, "{q}"),
                _ => panic!("{q}: alone {a:?}, grouped {g:?}"),
            }
        }
        assert!(alone[..DESCRIBE_GROUP].iter().all(Result::is_ok));
        assert!(fails.iter().all(|f| alone[queries.iter().position(|q| q == f).unwrap()].is_err()));
        assert_eq!(alone[1].as_ref().unwrap().iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a", "a"]);
    }

    /// What `apply --jobs N` relies on: connections of one database create and fill different
    /// tables and views of ONE schema at the same time, each in its own transaction, without a
    /// catalog conflict.
    #[test]
    fn workers_write_different_tables_of_one_schema_at_once() {
        let mut db = DuckDb::in_memory().unwrap();
        db.execute("CREATE SCHEMA \"_efmesh\"; CREATE TABLE \"_efmesh\".src AS SELECT range AS x FROM range(20000)").unwrap();
        let workers: Vec<Box<dyn Engine + Send>> = (0..4).map(|_| db.worker().expect("a connection")).collect();
        let errors: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = workers
                .into_iter()
                .enumerate()
                .map(|(w, mut engine)| {
                    s.spawn(move || {
                        let mut errors = Vec::new();
                        for i in 0..25 {
                            let t = format!("\"_efmesh\".t_{w}_{i}");
                            let statements = vec![
                                format!("CREATE OR REPLACE TABLE {t} AS SELECT x, x * {i} AS y FROM \"_efmesh\".src"),
                                format!("CREATE OR REPLACE VIEW \"_efmesh\".v_{w}_{i} AS SELECT * FROM {t}"),
                                format!("INSERT INTO {t} SELECT x, 0 FROM \"_efmesh\".src WHERE x < 10"),
                            ];
                            if let Err(e) = engine.transaction(&statements) {
                                errors.push(e.to_string());
                            }
                        }
                        errors
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert!(errors.is_empty(), "{errors:#?}");
        let n = db.query("SELECT count(*) FROM duckdb_tables() WHERE schema_name = '_efmesh' AND table_name LIKE 't\\_%' ESCAPE '\\'").unwrap();
        assert_eq!(n, vec![vec![Some("100".to_string())]]);
        assert_eq!(db.query("SELECT count(*) FROM \"_efmesh\".v_3_24").unwrap(), vec![vec![Some("20010".to_string())]]);
    }
}
