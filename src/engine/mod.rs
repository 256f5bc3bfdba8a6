//! Engines run SQL: DuckDB today, Postgres behind the same trait later.
//!
//! The trait is deliberately small (reference `core-semantics.md` §5.8): execute, an
//! all-or-nothing transaction, `describe` for the schema contract, and a query returning rows as
//! text for reports and tests. Capability differences belong in methods, not in `match engine`.

pub mod dialect;
pub mod duckdb;
pub mod epoch;
pub mod postgres;
pub mod record;

use crate::config::Config;
use std::collections::BTreeMap;

/// How [`open`] opens the project's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-write, created if absent, with every `[engine]` setting: `apply`, `run`, `audit`,
    /// the janitor, the undo of an interrupted promotion. Held until dropped.
    ReadWrite,
    /// Read-only with every `[engine]` setting (time zone, threads, memory limit, extensions):
    /// data previews and `janitor --dry-run`. Never writes; fails at once when the database does
    /// not exist or another process writes it.
    ReadOnly,
    /// Read-only for catalog queries alone (what `plan` reads): no extension, the fewest
    /// resources the engine allows. Never writes.
    Catalog,
    /// A private, empty, throw-away database with every `[engine]` setting: unit tests of models
    /// and the fixtures they build.
    Scratch,
}

/// Says whether the running command takes `--retries N` and the count it was given (`None`: no
/// such flag), for the hint of an engine file another process holds: set by the CLI before it
/// runs the command.
pub fn offer_retries(given: Option<u32>) {
    duckdb::offer_retries(given);
}

/// Says whether the running command writes nothing (`plan`, `status`, `diff`, `preview`, …):
/// then a Postgres engine's read-only sessions wait at most a few seconds for a lock and say
/// which relations are locked; a writing command's reads wait as long as the lock is held (another
/// application's lock under a view of the database must not fail an apply or a run). Set by the
/// CLI before it runs the command; off until then. DuckDB has no lock waits.
pub fn bound_lock_waits(writes_nothing: bool) {
    postgres::bound_lock_waits(writes_nothing);
}

/// Opens the engine the project's `[engine]` configures, as `access` says: the one place the
/// rest of efmesh gets an engine from (plan, apply and the commands never name one).
///
/// # Errors
/// [`EngineError`] naming the database and why it cannot be opened (locked by another process,
/// absent for a read-only open, a setting the engine refused).
pub fn open(config: &Config, access: Access) -> Result<Box<dyn Engine + Send>, EngineError> {
    if let Some(url) = postgres_url(config)? {
        return Ok(match access {
            Access::ReadWrite => Box::new(postgres::Postgres::open_writer(&url)?),
            Access::ReadOnly | Access::Catalog => Box::new(postgres::Postgres::open(&url, true)?),
            Access::Scratch => Box::new(postgres::Postgres::scratch(&url)?),
        });
    }
    let (path, settings) = (config.engine_path(), &config.engine);
    // The project directory swapped since the configuration was read: the file would be another
    // project's than the state store's. Checked before opening (nothing created there) and once
    // the file is held.
    let root_kept = || match config.root_replaced() {
        Some(message) => Err(EngineError::new("", message)),
        None => Ok(()),
    };
    Ok(match access {
        Access::ReadWrite => {
            root_kept()?;
            let engine = duckdb::DuckDb::open(&path, settings)?;
            root_kept()?;
            Box::new(engine)
        }
        Access::ReadOnly => Box::new(duckdb::DuckDb::open_read_only_with(&path, settings)?),
        Access::Catalog => Box::new(duckdb::DuckDb::open_read_only(&path, settings)?),
        Access::Scratch => Box::new(duckdb::DuckDb::in_memory_with(settings)?),
    })
}

/// The statements of the engine `config` configures ([`dialect::Dialect`]), without opening it:
/// what the planner spells and parses with (the canonical parser, identifier limits).
#[must_use]
pub fn dialect_for(config: &Config) -> &'static dyn dialect::Dialect {
    if config.engine.url_env.is_some() { &dialect::Standard } else { &duckdb::DuckDbDialect }
}

/// The Postgres URL of `config`'s engine, read from the environment variable `[engine] url_env`
/// names (never from the file), or `None` for DuckDB.
///
/// # Errors
/// [`EngineError`] naming the variable and the configuration file when it is unset or empty.
pub fn postgres_url(config: &Config) -> Result<Option<String>, EngineError> {
    let Some(var) = &config.engine.url_env else { return Ok(None) };
    let why = match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => return Ok(Some(url)),
        Ok(_) | Err(std::env::VarError::NotPresent) => "is unset or empty",
        Err(std::env::VarError::NotUnicode(_)) => "is not Unicode",
    };
    Err(EngineError::new("", format!("the environment variable `{var}` (named by `[engine] url_env` in `{}`) {why}", config.path.display())))
}

/// Where `config`'s engine database is, for messages: the DuckDB file, or the Postgres database
/// (`postgres://user@host:port/db`, never the password).
#[must_use]
pub fn location(config: &Config) -> String {
    match &config.engine.url_env {
        None => config.engine_path().display().to_string(),
        Some(var) => match std::env::var(var).ok().filter(|u| !u.trim().is_empty()) {
            Some(url) => crate::pg::describe_url(&url).unwrap_or_else(|| format!("the Postgres database in `${var}`")),
            None => format!("the Postgres database in `${var}` (unset)"),
        },
    }
}

/// The canonical form of a model body of the DuckDB engine, the project's engine today
/// ([`dialect::Dialect::canonicalize`] gives each engine's; [`crate::sql::canon`]): sqlparser's
/// tree, and for the bodies sqlparser cannot parse, the engine's own parse tree (DuckDB's
/// `json_serialize_sql`, from a private in-memory database opened only then). The engine
/// supplies the parser it executes with, so a body only the engine understands still gets a
/// fingerprint that ignores formatting.
///
/// # Errors
/// [`crate::sql::canon::SqlError`] as [`crate::sql::canon::canonicalize_with_fallback`].
pub fn canonicalize(sql: &str) -> Result<crate::sql::canon::Canonical, crate::sql::canon::SqlError> {
    let fallback = |sql: &str| duckdb::DuckDb::in_memory().map_err(|e| e.to_string())?.serialize_sql(sql);
    crate::sql::canon::canonicalize_with_fallback(sql, &fallback)
}

/// True when `message` is DuckDB refusing a file whose blocks fail their checksums (what DuckDB
/// 1.5.5 can leave when killed during a checkpoint: SPEC §4 invariant 8).
pub fn is_corrupt_file(message: &str) -> bool {
    message.contains("Corrupt database file")
}

/// True when `message` is DuckDB refusing to open a file because another process holds its lock
/// (it is writing the file): the one reason a read of the file may be retried later.
pub fn is_locked_file(message: &str) -> bool {
    message.contains("Could not set lock on file")
}

/// The `hint:` line an engine's message may end with (`…\n  hint: …`, as [`duckdb::DuckDb::open`]
/// words a file another process holds), on its own: the message before it, and the hint's text
/// (`None` when there is none).
pub fn split_hint(message: &str) -> (&str, Option<&str>) {
    match message.split_once("\n  hint: ") {
        Some((cause, hint)) => (cause, Some(hint)),
        None => (message, None),
    }
}

/// `message` with `text` added to what it says, before the `hint:` line it may end with
/// ([`split_hint`]): the hint stays last, where the CLI prints it and `--json` reports it apart.
pub fn before_hint(message: &str, text: &str) -> String {
    match split_hint(message) {
        (cause, Some(hint)) => format!("{cause}{text}\n  hint: {hint}"),
        (cause, None) => format!("{cause}{text}"),
    }
}

/// The types among `types` (distinct) that `engine` refuses, each with the engine's message:
/// one statement casting NULL to every type, and one per type only when that fails. What the
/// schema contract checks before any build, and `efmesh check` in a private database.
pub fn refused_types(engine: &mut dyn Engine, types: &[&str]) -> Vec<(String, String)> {
    if types.is_empty() {
        return Vec::new();
    }
    let casts: Vec<String> = types.iter().enumerate().map(|(i, t)| format!("CAST(NULL AS {t}) AS c{i}")).collect();
    if engine.describe(&format!("SELECT {}", casts.join(", "))).is_ok() {
        return Vec::new();
    }
    types.iter().filter_map(|t| engine.describe(&format!("SELECT CAST(NULL AS {t}) AS x")).err().map(|e| ((*t).to_string(), e.message))).collect()
}

/// How a column whose declared type the engine (`engine`, as messages spell it) refused with
/// `message` is reported, by the contract and by `efmesh check` alike.
pub fn not_a_type(column: &str, ty: &str, engine: &str, message: &str) -> String {
    format!("column `{column}` has type `{ty}`, which is not a {engine} type: {}", type_message(message))
}

/// The declared column types among `types` that `config`'s engine does not know without a
/// database, each with the engine's message ([`refused_types`]), for `efmesh check`: DuckDB's are
/// tried in a private in-memory database (its built-in types; one created with `CREATE TYPE` in
/// the project's database is not there). A Postgres project's types are not judged (no server
/// is reached): empty. Empty, too, when the in-memory database cannot be opened.
pub fn unknown_types(config: &Config, types: &[&str]) -> Vec<(String, String)> {
    if config.engine.url_env.is_some() || types.is_empty() {
        return Vec::new();
    }
    let Ok(mut db) = duckdb::DuckDb::in_memory() else { return Vec::new() };
    // Never an install from the network: a type of an extension the project may load is
    // refused with a message naming the extension, and is no finding.
    if db.execute("SET autoinstall_known_extensions = false; SET autoload_known_extensions = false").is_err() {
        return Vec::new();
    }
    refused_types(&mut db, types).into_iter().filter(|(_, message)| !message.contains("extension")).collect()
}

/// True when the local file path or glob `resolved` (as the engine opens it: absolute against
/// the project directory, `crate::apply::resolve::resolve_source_path`) matches no file, by the
/// engine's own `glob()`, which is what reads an external's files; `None` when the engine cannot
/// tell (the query failed). What `apply`'s source check asks before reading an external.
pub fn matches_no_file(engine: &mut dyn Engine, resolved: &str) -> Option<bool> {
    let rows = engine.query(&format!("SELECT count(*) FROM glob({})", crate::core::name::quote_literal(resolved))).ok()?;
    Some(rows.first().and_then(|r| r.first().cloned().flatten()).as_deref() == Some("0"))
}

/// The paths among `resolved` (local file paths or globs of file externals, resolved as the
/// engine opens them) that match no file ([`matches_no_file`]), for `efmesh check`: asked of a
/// private in-memory DuckDB (never the project's database), whose `glob()` is the one `apply`
/// reads the files with. Empty on an engine that reads no files (Postgres: `plan` refuses file
/// externals there), and when the in-memory database cannot be opened or a path cannot be
/// globbed (never a guess).
pub fn unmatched_files(config: &Config, resolved: &[&str]) -> std::collections::BTreeSet<String> {
    if resolved.is_empty() || !dialect_for(config).supports(dialect::Feature::FileExternal) {
        return std::collections::BTreeSet::new();
    }
    let Ok(mut db) = duckdb::DuckDb::in_memory() else { return std::collections::BTreeSet::new() };
    resolved.iter().filter(|p| matches_no_file(&mut db, p) == Some(true)).map(|p| (*p).to_string()).collect()
}

/// An engine's message refusing a type, on one line: its first line, and DuckDB's suggestion
/// (`Did you mean "bigint"?`, on a line of its own) as `(did you mean `bigint`?)`.
pub fn type_message(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut first = lines.next().unwrap_or(message).to_string();
    // A first line that announces its cause (`…: `) is followed by it.
    if first.ends_with(':')
        && let Some(next) = lines.next()
    {
        first = format!("{first} {next}");
    }
    let suggestion = message.lines().find_map(|l| l.trim().strip_prefix("Did you mean \"")?.strip_suffix("\"?").map(str::to_string));
    match suggestion {
        Some(s) => format!("{first} (did you mean `{s}`?)"),
        None => first.to_string(),
    }
}

/// The line of the statement an engine's error points at: the `LINE n:` of the excerpt DuckDB
/// puts under its message; `None` without one (efmesh's Postgres errors carry none).
pub fn error_line(message: &str) -> Option<u64> {
    message.lines().find_map(|l| l.trim_start().strip_prefix("LINE ")?.split_once(':')?.0.trim().parse().ok())
}

/// Runs `sql` for a signal's `db.query`: only one read statement (a `SELECT`, `WITH … SELECT`,
/// `VALUES`, `FROM …` query) is accepted, checked by parsing it; it runs in a transaction that
/// is rolled back, so nothing it might do is kept. Rows' values as text.
///
/// # Errors
/// A message: refused (not one read-only query), or the engine's error.
pub fn read_only_query(engine: &mut dyn Engine, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    use sqlparser::dialect::{DuckDbDialect, PostgreSqlDialect};
    use sqlparser::parser::Parser;
    let refuse = |why: &str| format!("`db.query` runs one read-only query (SELECT, WITH … SELECT, VALUES); refused {why}: {}", sql.trim());
    let parsed = Parser::parse_sql(&DuckDbDialect {}, sql).or_else(|_| Parser::parse_sql(&PostgreSqlDialect {}, sql));
    match parsed {
        Ok(statements) if statements.len() == 1 => match &statements[0] {
            sqlparser::ast::Statement::Query(q) if !query_writes(q) => {}
            _ => return Err(refuse("a statement that is not a query")),
        },
        Ok(statements) if statements.is_empty() => return Err(refuse("an empty statement")),
        Ok(_) => return Err(refuse("several statements")),
        Err(e) => return Err(refuse(&format!("a statement that does not parse ({e})"))),
    }
    engine.begin().map_err(|e| e.to_string())?;
    let rows = engine.query(sql).map_err(|e| e.to_string());
    let _ = engine.rollback();
    rows
}

/// True when a query writes (`SELECT … INTO t`, a data-modifying `WITH`).
fn query_writes(q: &sqlparser::ast::Query) -> bool {
    use sqlparser::ast::SetExpr;
    fn body(b: &SetExpr) -> bool {
        match b {
            SetExpr::Select(s) => s.into.is_some(),
            SetExpr::Query(q) => query_writes(q),
            SetExpr::SetOperation { left, right, .. } => body(left) || body(right),
            SetExpr::Values(_) | SetExpr::Table(_) => false,
            _ => true,
        }
    }
    q.with.as_ref().is_some_and(|w| w.cte_tables.iter().any(|c| query_writes(&c.query))) || body(&q.body)
}

/// The relations (tables and views) of an engine database as one catalog query lists them, with
/// their comments and (views) definitions. `plan` and `apply` verify against it that the physical
/// relations and environment views the state store relies on exist and select from what the
/// state says (SPEC §4), and read from the comments the project root a relation embedding
/// project paths was created under ([`root_comment`]).
///
/// Names are keyed and looked up ignoring case, as DuckDB resolves them: `Sales.a` and `sales.b`
/// live in one schema, spelled as it was first created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// `(schema, name)`, lowercased → the relation's comment and definition.
    pub relations: BTreeMap<(String, String), CatalogEntry>,
}

/// One relation of a [`Catalog`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The relation's comment, if it has one.
    pub comment: Option<String>,
    /// A view's definition as the engine renders it (`CREATE VIEW … AS …`); `None` for tables
    /// and for engines that do not report it.
    pub sql: Option<String>,
}

fn catalog_key(schema: &str, name: &str) -> (String, String) {
    (schema.to_lowercase(), name.to_lowercase())
}

impl Catalog {
    /// True when `schema.name` exists (ignoring case).
    pub fn contains(&self, schema: &str, name: &str) -> bool {
        self.relations.contains_key(&catalog_key(schema, name))
    }

    /// The comment of `schema.name`, when it exists and has one.
    pub fn comment(&self, schema: &str, name: &str) -> Option<&str> {
        self.relations.get(&catalog_key(schema, name)).and_then(|c| c.comment.as_deref())
    }

    /// The definition of the view `schema.name`, when it exists and the engine reports it.
    pub fn view_sql(&self, schema: &str, name: &str) -> Option<&str> {
        self.relations.get(&catalog_key(schema, name)).and_then(|c| c.sql.as_deref())
    }
}

/// True when the view definition `sql` names the relation `relation` (a quoted, qualified name
/// such as `"_efmesh"."s__t__ab"`): compared ignoring case and identifier quotes, and only as a
/// whole name (`…__ab` does not match `…__abc`).
pub fn view_names(sql: &str, relation: &str) -> bool {
    if sql.is_ascii() && relation.is_ascii() { view_names_ascii(sql.as_bytes(), relation.as_bytes()) } else { view_names_text(sql, relation) }
}

/// [`view_names`] for any text: both stripped of quotes and lowercased, then searched.
fn view_names_text(sql: &str, relation: &str) -> bool {
    let strip = |s: &str| s.replace('"', "").to_lowercase();
    let (sql, relation) = (strip(sql), strip(relation));
    if relation.is_empty() {
        return false;
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    sql.match_indices(&relation).any(|(at, _)| {
        let before = sql[..at].chars().next_back();
        let after = sql[at + relation.len()..].chars().next();
        !before.is_some_and(|c| ident(c) || c == '.') && !after.is_some_and(|c| ident(c) || c == '.')
    })
}

/// [`view_names`] for ASCII text, without copying `sql` (a plan checks every view): the same
/// comparison, reading past quotes and comparing ASCII case-insensitively in place.
fn view_names_ascii(sql: &[u8], relation: &[u8]) -> bool {
    let rel: Vec<u8> = relation.iter().filter(|&&b| b != b'"').map(u8::to_ascii_lowercase).collect();
    let Some(&first) = rel.first() else { return false };
    let joins = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.');
    let mut prev: Option<u8> = None;
    for (i, &c) in sql.iter().enumerate() {
        if c == b'"' {
            continue;
        }
        if c.to_ascii_lowercase() == first && !prev.is_some_and(joins) {
            let (mut j, mut k) = (i, 0);
            while k < rel.len() && j < sql.len() {
                if sql[j] == b'"' {
                    j += 1;
                    continue;
                }
                if sql[j].to_ascii_lowercase() != rel[k] {
                    break;
                }
                j += 1;
                k += 1;
            }
            if k == rel.len() && !sql[j..].iter().copied().find(|&b| b != b'"').is_some_and(joins) {
                return true;
            }
        }
        prev = Some(c);
    }
    false
}

/// Prefix of the comment efmesh puts on a relation whose definition embeds project paths.
const ROOT_COMMENT: &str = "efmesh: created under project root ";

/// The comment recording that a relation was created under project root `root`.
pub fn root_comment(root: &str) -> String {
    format!("{ROOT_COMMENT}{root}")
}

/// The project root a comment written by [`root_comment`] records.
pub fn comment_root(comment: &str) -> Option<&str> {
    comment.strip_prefix(ROOT_COMMENT)
}

/// `COMMENT ON VIEW <relation> IS '<root_comment(root)>'`: run in the transaction that creates a
/// view embedding project paths, so the view carries the root it resolves paths against.
pub fn root_comment_sql(relation: &str, root: &str) -> String {
    format!("COMMENT ON VIEW {relation} IS {}", crate::core::name::quote_literal(&root_comment(root)))
}

/// An engine failure, with the statement that failed (if any: opening a database runs none).
#[derive(Debug, thiserror::Error)]
pub struct EngineError {
    /// The statement (truncated to 300 characters); empty when the failure ran no statement
    /// (opening the database, a bad extension name), and then the message says what failed.
    pub sql: String,
    /// The engine's message.
    pub message: String,
    /// True when the engine knows that retrying the same work may succeed (a serialization
    /// failure, a deadlock, a lock wait that timed out, a lost connection): `--retries` retries
    /// it. Engines whose errors carry no code leave it false and are classified by their
    /// message (`apply::retry::is_transient_message`).
    pub transient: bool,
    /// The SQLSTATE of the server's error (Postgres's five characters, `42P01`); `None` for an
    /// engine whose errors carry no code (DuckDB) and for a failure that is not the server's.
    /// What [`Engine::is_unbindable`] judges a Postgres error by.
    pub code: Option<String>,
}

/// `engine error: <message>`, then `while running: <statement>` when there is one, before the
/// `hint:` line the message may end with ([`before_hint`]): the hint stays last, where the CLI
/// prints it and `--json` reports it apart (the statement stays in the message).
impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.sql.is_empty() {
            write!(f, "engine error: {}", self.message)
        } else {
            write!(f, "engine error: {}", before_hint(&self.message, &format!("\n  while running: {}", self.sql)))
        }
    }
}

impl EngineError {
    /// Builds an error, truncating the statement for display.
    pub fn new(sql: &str, message: impl Into<String>) -> Self {
        let one_line: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let sql = if one_line.chars().count() > 300 { format!("{}…", one_line.chars().take(300).collect::<String>()) } else { one_line };
        Self { sql, message: message.into(), transient: false, code: None }
    }

    /// The same error, marked as one retrying may cure ([`EngineError::transient`]).
    #[must_use]
    pub fn transient(mut self) -> Self {
        self.transient = true;
        self
    }

    /// True when the database could not be opened for writing because another process is
    /// writing it: DuckDB's file lock held, or efmesh's writer lock on a Postgres database
    /// ([`postgres::Postgres::open_writer`]'s `Lock Error: …`). The CLI reports it as its own
    /// `--json` kind, `engine-locked`: the database is fine and a later attempt may succeed.
    pub fn is_writer_busy(&self) -> bool {
        is_locked_file(&self.message) || open_failure_message(&self.message).starts_with("Lock Error: ")
    }
}

/// What a failed [`Engine::load_extension`] of `name` says when `what` needs it: "`what` needs
/// the `name` extension, which is not installed and could not be downloaded …" when the
/// engine's message is about the extension itself (it starts "the `name` extension "), else
/// "`what` needs the `name` extension: <message>".
pub fn extension_needed(what: &str, name: &str, error: &EngineError) -> String {
    match error.message.strip_prefix(&format!("the `{name}` extension ")) {
        Some(rest) => format!("{what} needs the `{name}` extension, which {rest}"),
        None => format!("{what} needs the `{name}` extension: {}", error.message),
    }
}

/// The engine's own message inside a failure to open a database file (`cannot open <engine>
/// database `<file>`: <message>`, as the engines word it), or `message` itself: what callers
/// classify (a lock held by another process is transient).
pub fn open_failure_message(message: &str) -> &str {
    let engine = message
        .strip_prefix("cannot open ")
        .and_then(|rest| rest.split_once(" database `"))
        .and_then(|(_, rest)| rest.split_once('`'))
        .and_then(|(_, tail)| tail.split_once(": "))
        .map(|(_, engine)| engine.trim_start());
    engine.unwrap_or(message)
}

/// A failure of the engine's CSV reader at one record of a file ([`Engine::csv_line_error`]): what
/// a build restates in the terms of the external model that reads the file
/// (`apply::source_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvLineError {
    /// The first line of the engine's message, e.g. `Conversion Error: CSV Error on Line: 473`.
    pub head: String,
    /// The record of the file at fault (1-based, a header counted), as the engine numbers it in
    /// `CSV Error on Line: N`: records, not the file's lines (a quoted field spanning lines is in
    /// one record, so a later record's number is below its line's).
    pub record: u64,
    /// The record's text as the engine quotes it, when it does.
    pub text: Option<String>,
    /// What is wrong with the record in the engine's words: `Error when converting column "n".
    /// Could not convert string "NA" to 'INTEGER'`, `Expected Number of Columns: 3 Found: 4`.
    pub problem: String,
    /// The value the reader could not convert to its column's type, when that is the problem.
    pub conversion: Option<CsvConversion>,
    /// The file, as the engine names it: the path efmesh gave it, or the file of a glob.
    pub file: String,
}

/// A value a CSV reader could not convert ([`CsvLineError::conversion`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvConversion {
    /// The column, as the file's header (or the declared schema) names it.
    pub column: String,
    /// The value as written in the file.
    pub value: String,
    /// The type it was converted to, in the engine's spelling (`INTEGER`).
    pub ty: String,
}

/// One output column of a query: name and engine type spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedColumn {
    /// Output column name.
    pub name: String,
    /// Engine type, e.g. `VARCHAR`, `TIMESTAMP WITH TIME ZONE`.
    pub ty: String,
}

/// A query's output columns and rows (each value as text, `None` for NULL):
/// [`Engine::query_with_columns`].
pub type Described = (Vec<DescribedColumn>, Vec<Vec<Option<String>>>);

/// What the planner and executor need from a database.
pub trait Engine {
    /// How this engine spells the statements efmesh writes ([`dialect::Dialect`]); its
    /// `name()` (`duckdb`, `postgres`) names the engine in messages.
    fn sql(&self) -> &'static dyn dialect::Dialect;

    /// True when `error`, this engine's failure of a statement, says the statement's SQL cannot
    /// bind as it is written — a relation, schema, column or file it names does not exist — and
    /// so will not bind by being run again: what the undo of an interrupted promotion drops a
    /// view for instead of failing every command (`apply::recover_promotions`). False for
    /// everything else (a lost connection, an S3 endpoint answering 503 or 404, a lock, a full
    /// disk), whatever words its message holds. Each engine judges its own errors by their exact
    /// shape ([`duckdb::is_unbindable`], [`postgres::is_unbindable`]); an engine that cannot
    /// tell says false (the undo then fails and is tried again by the next command).
    fn is_unbindable(&self, error: &EngineError) -> bool {
        let _ = error;
        false
    }

    /// The failure of the engine's CSV reader at one record of a file that `error` reports, if it
    /// is one (DuckDB's `CSV Error on Line: N` family, [`duckdb::csv_line_error`]): a build
    /// restates it in the terms of the external that reads the file. `None` for every other
    /// error, and from an engine that reads no files.
    fn csv_line_error(&self, error: &EngineError) -> Option<CsvLineError> {
        let _ = error;
        None
    }

    /// Runs one or more statements outside any explicit transaction.
    ///
    /// # Errors
    /// [`EngineError`] naming the statement.
    fn execute(&mut self, sql: &str) -> Result<(), EngineError>;

    /// Runs `statements` in one transaction: all commit or none do.
    ///
    /// # Errors
    /// [`EngineError`] naming the failing statement; the transaction is rolled back.
    fn transaction(&mut self, statements: &[String]) -> Result<(), EngineError>;

    /// Runs `statements` in one transaction as [`Engine::transaction`] does, and asks `commit_if`
    /// after the last of them ran, right before the `COMMIT`: when it answers false the
    /// transaction is rolled back (nothing of it lands) and `Ok(false)` is returned; `Ok(true)`
    /// once committed. A promotion's view swap checks its lock there (SPEC §4 invariant 30): its
    /// statements may have waited on readers' locks for longer than the lock lives.
    ///
    /// # Errors
    /// [`EngineError`] naming the failing statement (the transaction is rolled back), or the
    /// failed `COMMIT` or `ROLLBACK`.
    fn transaction_if(&mut self, statements: &[String], commit_if: &mut dyn FnMut() -> bool) -> Result<bool, EngineError> {
        self.begin()?;
        for s in statements {
            if let Err(e) = self.execute(s) {
                let _ = self.rollback();
                return Err(e);
            }
        }
        if !commit_if() {
            self.rollback()?;
            return Ok(false);
        }
        self.commit()?;
        Ok(true)
    }

    /// Output columns of `query` without running it.
    ///
    /// # Errors
    /// [`EngineError`] when the query does not bind (unknown column, bad type…).
    fn describe(&mut self, query: &str) -> Result<Vec<DescribedColumn>, EngineError>;

    /// Describes many queries; engines with several connections may do it in parallel.
    /// Results come back in input order.
    fn describe_many(&mut self, queries: &[String]) -> Vec<Result<Vec<DescribedColumn>, EngineError>> {
        queries.iter().map(|q| self.describe(q)).collect()
    }

    /// Runs a query and returns every row with each value as text (`None` for NULL).
    ///
    /// # Errors
    /// [`EngineError`].
    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError>;

    /// Output columns of `query` (names and engine types, as [`Engine::describe`]) and its first
    /// `limit` rows with every value as the engine's text rendering (`None` for NULL): what a
    /// data preview shows.
    ///
    /// # Errors
    /// [`EngineError`] when the query does not bind or fails.
    fn query_with_columns(&mut self, query: &str, limit: usize) -> Result<Described, EngineError> {
        use crate::core::name::quote_ident;
        let columns = self.describe(query)?;
        let list: Vec<String> = columns.iter().map(|c| format!("CAST({q} AS VARCHAR) AS {q}", q = quote_ident(&c.name))).collect();
        let rows = self.query(&format!("SELECT {} FROM ({query}) AS q LIMIT {limit}", list.join(", ")))?;
        Ok((columns, rows))
    }

    /// Creates (or replaces) a temporary table `table` of `VARCHAR` `columns`, visible to this
    /// session only, holding `rows` (one text value or NULL per column). Seeds stage their parsed
    /// text this way in the contract phase, before type checks and the build. The default
    /// inserts literal rows in batches; engines with a bulk path (DuckDB's appender) override it.
    ///
    /// # Errors
    /// [`EngineError`] naming the statement that failed.
    fn stage_text(&mut self, table: &str, columns: &[String], rows: &[Vec<Option<String>>]) -> Result<(), EngineError> {
        use crate::core::name::{quote_ident, quote_literal};
        let cols: Vec<String> = columns.iter().map(|c| format!("{} VARCHAR", quote_ident(c))).collect();
        self.execute(&self.sql().drop_table_if_exists(&self.sql().temp_relation(table)))?;
        self.execute(&format!("CREATE TEMP TABLE {} ({})", quote_ident(table), cols.join(", ")))?;
        for chunk in rows.chunks(1000) {
            let values: Vec<String> = chunk
                .iter()
                .map(|r| format!("({})", r.iter().map(|v| v.as_deref().map_or("NULL".to_string(), quote_literal)).collect::<Vec<_>>().join(", ")))
                .collect();
            self.execute(&format!("INSERT INTO {} VALUES {}", quote_ident(table), values.join(", ")))?;
        }
        Ok(())
    }

    /// Runs a statement that carries a secret (e.g. DuckDB's `CREATE SECRET` with S3 keys): it
    /// is never logged, and a failure names `label` instead of the statement and keeps only the
    /// first line of the engine's message (callers redact the secret values from it too).
    ///
    /// # Errors
    /// [`EngineError`] whose `sql` is `label`; engines without the capability always fail.
    fn execute_secret(&mut self, label: &str, sql: &str) -> Result<(), EngineError> {
        let _ = sql;
        Err(EngineError::new(label, format!("the {} engine cannot run {label}", self.sql().name())))
    }

    /// Opens a transaction that the caller ends with [`Engine::commit`] or
    /// [`Engine::rollback`]; statements and queries in between see its uncommitted writes
    /// (write-audit-publish: a batch's audits run inside the batch's transaction).
    ///
    /// # Errors
    /// [`EngineError`].
    fn begin(&mut self) -> Result<(), EngineError> {
        self.execute("BEGIN TRANSACTION")
    }

    /// Commits the transaction opened by [`Engine::begin`].
    ///
    /// # Errors
    /// [`EngineError`]; the transaction is then rolled back.
    fn commit(&mut self) -> Result<(), EngineError> {
        self.execute("COMMIT").inspect_err(|_| {
            let _ = self.execute("ROLLBACK");
        })
    }

    /// Rolls back the transaction opened by [`Engine::begin`].
    ///
    /// # Errors
    /// [`EngineError`].
    fn rollback(&mut self) -> Result<(), EngineError> {
        self.execute("ROLLBACK")
    }

    /// Makes everything this connection committed durable in the engine's own storage, so that
    /// closing the connection afterwards writes nothing more (DuckDB's `CHECKPOINT` of its file;
    /// a server engine has nothing to do).
    ///
    /// # Errors
    /// [`EngineError`] (e.g. another connection of this process holds a transaction open).
    fn checkpoint(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Another connection to the same database, for a worker thread of a parallel apply
    /// (`--jobs N`): its own session (settings re-applied, no temporary relations of this one)
    /// over the same catalog and data; `None` when the engine cannot open one (then the apply
    /// runs sequentially).
    fn worker(&mut self) -> Option<Box<dyn Engine + Send>> {
        None
    }

    /// A way to stop, from another thread, the statement this connection is running (it then
    /// fails); `None` when the engine has none. Used to cut work short that no longer matters
    /// (the audits a failed apply will never use).
    fn canceller(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        None
    }

    /// Tells the engine that `builds` models are being built at once on its connections (this
    /// one and its [`Engine::worker`]s): an engine whose statements run on a thread pool of the
    /// database's own may shrink the pool so that the build connections' own threads and the
    /// pool's add up to what it had alone (DuckDB: `threads` becomes `max(1, T − builds + 1)`,
    /// T being `[engine] threads` or DuckDB's default, one per core; back to T when `builds` ≤ 1).
    /// A hint for speed only: nothing a statement computes depends on it, so a failure to apply
    /// it is logged, never reported. The default does nothing.
    fn share_threads(&mut self, builds: usize) {
        let _ = builds;
    }

    /// True when `schema.name` exists as a table or view.
    ///
    /// # Errors
    /// [`EngineError`].
    fn relation_exists(&mut self, schema: &str, name: &str) -> Result<bool, EngineError>;

    /// Every table and view of the database (attached catalogs and temporary objects excluded),
    /// with its comment where the engine keeps one: ONE catalog query.
    ///
    /// # Errors
    /// [`EngineError`].
    fn catalog(&mut self) -> Result<Catalog, EngineError> {
        let rows = self.query("SELECT table_schema, table_name, NULL FROM information_schema.tables WHERE table_catalog = current_database()")?;
        Ok(catalog_of(rows))
    }

    /// Every relation of efmesh's storage: the tables and views of schema `_efmesh` of this
    /// database (but the use records' table, [`USES_TABLE`], the epoch stamps,
    /// [`epoch::VIEW_PREFIX`], and the environment records,
    /// [`crate::ownership::ENV_RECORD_PREFIX`] then a name without `__`) and, when the DuckLake catalog is
    /// attached (`_efmesh_ducklake`), the tables of its `main` schema; ONE catalog query. What
    /// the janitor lists and drops.
    ///
    /// # Errors
    /// [`EngineError`].
    fn storage_relations(&mut self) -> Result<Vec<StoredRelation>, EngineError> {
        use crate::core::name::{quote_ident, quote_literal};
        use crate::core::target::DUCKLAKE_ALIAS;
        let rows = self.query(&format!(
            "SELECT table_catalog, table_schema, table_name, table_type FROM information_schema.tables \
             WHERE (table_catalog = current_database() AND table_schema = {} AND table_name <> {} AND left(table_name, {}) <> {} \
                    AND NOT (left(table_name, {}) = {} AND strpos(substr(table_name, {}, length(table_name)), '__') = 0)) \
                OR (table_catalog = {} AND table_schema = 'main') \
             ORDER BY table_catalog, table_name",
            quote_literal(STORAGE_SCHEMA),
            quote_literal(USES_TABLE),
            epoch::VIEW_PREFIX.len(),
            quote_literal(epoch::VIEW_PREFIX),
            crate::ownership::ENV_RECORD_PREFIX.len(),
            quote_literal(crate::ownership::ENV_RECORD_PREFIX),
            crate::ownership::ENV_RECORD_PREFIX.len() + 1,
            quote_literal(DUCKLAKE_ALIAS)
        ))?;
        let mut out = Vec::new();
        for r in rows {
            let mut r = r.into_iter();
            let (Some(catalog), Some(schema), Some(name), ty) = (r.next().flatten(), r.next().flatten(), r.next().flatten(), r.next().flatten()) else {
                continue;
            };
            let qualified = if catalog == DUCKLAKE_ALIAS {
                format!("{}.{}.{}", quote_ident(&catalog), quote_ident(&schema), quote_ident(&name))
            } else {
                format!("{}.{}", quote_ident(&schema), quote_ident(&name))
            };
            out.push(StoredRelation { qualified, name, view: ty.is_some_and(|t| t.eq_ignore_ascii_case("VIEW")) });
        }
        Ok(out)
    }

    /// Drops the relation `qualified` (a view when `view`), if it exists.
    ///
    /// # Errors
    /// [`EngineError`] naming the statement.
    fn drop_relation(&mut self, qualified: &str, view: bool) -> Result<(), EngineError> {
        self.execute(&format!("DROP {} IF EXISTS {qualified}", if view { "VIEW" } else { "TABLE" }))
    }

    /// The data and delete files the attached DuckLake catalog (`_efmesh_ducklake`) lists for the
    /// current snapshot of `tables` (unquoted names in its schema `main`, compared ignoring
    /// case), as `(table lowercased, path)`: a relative path (schema, table and file paths
    /// relative, as DuckLake writes them) resolved under `data_path` (the data path the catalog
    /// is attached through, ending in `/`), or under the data path the catalog records when
    /// `None`; an absolute one as recorded. A delete file counts while its data file is current
    /// (DuckLake may leave its end unset when the data file ends); rows inlined in the catalog
    /// have no file. ONE query of the catalog's metadata (`__ducklake_metadata__efmesh_ducklake`);
    /// empty for no tables. What a DuckLake table needs to be read: a query of it fails while one
    /// is missing.
    ///
    /// # Errors
    /// [`EngineError`] (no DuckLake catalog attached, or metadata of another layout).
    fn ducklake_files(&mut self, tables: &[String], data_path: Option<&str>) -> Result<Vec<(String, String)>, EngineError> {
        use crate::core::name::{quote_ident, quote_literal};
        use crate::core::target::{DUCKLAKE_ALIAS, DUCKLAKE_SCHEMA};
        if tables.is_empty() {
            return Ok(Vec::new());
        }
        let meta = quote_ident(&format!("__ducklake_metadata_{DUCKLAKE_ALIAS}"));
        let names: Vec<String> = tables.iter().map(|t| quote_literal(&t.to_lowercase())).collect();
        let root = data_path.map_or_else(|| "NULL".to_string(), quote_literal);
        let rows = self.query(&format!(
            "WITH dp AS (SELECT coalesce({root}, (SELECT value FROM {meta}.ducklake_metadata WHERE key = 'data_path' LIMIT 1)) AS root), \
             t AS (SELECT t.table_id, lower(t.table_name) AS name, \
                          CASE WHEN t.path_is_relative THEN (CASE WHEN s.path_is_relative THEN dp.root || s.path ELSE s.path END) || t.path ELSE t.path END AS dir \
                   FROM {meta}.ducklake_table t JOIN {meta}.ducklake_schema s ON s.schema_id = t.schema_id AND s.end_snapshot IS NULL CROSS JOIN dp \
                   WHERE t.end_snapshot IS NULL AND s.schema_name = {schema} AND lower(t.table_name) IN ({names})), \
             f AS (SELECT table_id, path, path_is_relative FROM {meta}.ducklake_data_file WHERE end_snapshot IS NULL \
                   UNION ALL SELECT d.table_id, d.path, d.path_is_relative FROM {meta}.ducklake_delete_file d \
                   JOIN {meta}.ducklake_data_file df ON df.data_file_id = d.data_file_id AND df.end_snapshot IS NULL WHERE d.end_snapshot IS NULL) \
             SELECT t.name, CASE WHEN f.path_is_relative THEN t.dir || f.path ELSE f.path END FROM f JOIN t ON t.table_id = f.table_id ORDER BY 1, 2",
            schema = quote_literal(DUCKLAKE_SCHEMA),
            names = names.join(", ")
        ))?;
        Ok(pairs(rows))
    }

    /// The store ids of the owner marker (SPEC §4, invariant 39 (d)) of this database's `_efmesh`
    /// schema (`ducklake = false`: one sequence `"_efmesh"."_efmesh_owner__<id>"` per owning
    /// store, so the marker is no relation) or of the attached DuckLake catalog (`ducklake`:
    /// the rows of its table `"_efmesh"."_efmesh_owners"`); `None` when there is no marker.
    ///
    /// # Errors
    /// [`EngineError`].
    fn owner_marker(&mut self, ducklake: bool) -> Result<Option<Vec<String>>, EngineError> {
        use crate::core::name::quote_literal;
        use crate::core::target::DUCKLAKE_ALIAS;
        if !ducklake {
            let rows = self.query(&format!(
                "SELECT sequence_name FROM duckdb_sequences() WHERE database_name = current_database() AND schema_name = {} AND starts_with(sequence_name, {}) ORDER BY 1",
                quote_literal(STORAGE_SCHEMA),
                quote_literal(OWNER_SEQUENCE_PREFIX)
            ))?;
            let ids: Vec<String> =
                rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).map(|n| n[OWNER_SEQUENCE_PREFIX.len()..].to_string()).collect();
            return Ok((!ids.is_empty()).then_some(ids));
        }
        let exists = self.query(&format!(
            "SELECT count(*) FROM information_schema.tables WHERE table_catalog = {} AND table_schema = {} AND table_name = {}",
            quote_literal(DUCKLAKE_ALIAS),
            quote_literal(STORAGE_SCHEMA),
            quote_literal(OWNER_TABLE)
        ))?;
        if exists.first().and_then(|r| r.first().cloned().flatten()).as_deref() == Some("0") {
            return Ok(None);
        }
        let rows = self.query(&format!("SELECT DISTINCT store_id FROM {} ORDER BY 1", ducklake_owner_table()))?;
        Ok(Some(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect()))
    }

    /// Adds `id` to the owner marker of [`Engine::owner_marker`]'s storage, creating it; with
    /// `only`, every other owner is removed first (the janitor's `--adopt`). `id` must be
    /// lowercase hex or `unknown`.
    ///
    /// # Errors
    /// [`EngineError`]; an `id` of other characters is refused.
    fn write_owner_marker(&mut self, ducklake: bool, id: &str, only: bool, at: &str) -> Result<(), EngineError> {
        use crate::core::name::{quote_ident, quote_literal};
        use crate::core::target::DUCKLAKE_ALIAS;
        if !plain_id(id) {
            return Err(EngineError::new("", format!("`{id}` is not a store id")));
        }
        if !ducklake {
            self.execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(STORAGE_SCHEMA)))?;
            if only {
                for other in self.owner_marker(false)?.unwrap_or_default().into_iter().filter(|o| o != id) {
                    self.execute(&format!(
                        "DROP SEQUENCE IF EXISTS {}.{}",
                        quote_ident(STORAGE_SCHEMA),
                        quote_ident(&format!("{OWNER_SEQUENCE_PREFIX}{other}"))
                    ))?;
                }
            }
            return self.execute(&format!(
                "CREATE SEQUENCE IF NOT EXISTS {}.{}",
                quote_ident(STORAGE_SCHEMA),
                quote_ident(&format!("{OWNER_SEQUENCE_PREFIX}{id}"))
            ));
        }
        let table = ducklake_owner_table();
        self.execute(&format!("CREATE SCHEMA IF NOT EXISTS {}.{}", quote_ident(DUCKLAKE_ALIAS), quote_ident(STORAGE_SCHEMA)))?;
        self.execute(&format!("CREATE TABLE IF NOT EXISTS {table} (store_id VARCHAR NOT NULL, since VARCHAR NOT NULL)"))?;
        if only {
            self.execute(&format!("DELETE FROM {table} WHERE store_id <> {}", quote_literal(id)))?;
        }
        self.execute(&format!(
            "INSERT INTO {table} SELECT {id}, {at} WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE store_id = {id})",
            id = quote_literal(id),
            at = quote_literal(at)
        ))
    }

    /// The use records of this database's `_efmesh` schema (SPEC §4, invariant 39 (e)), as
    /// `(store id, key)`: one row `(store id, key)` of the table `"_efmesh"."_efmesh_uses"`
    /// ([`USES_TABLE`], which [`Engine::storage_relations`] leaves out) per physical relation a
    /// state store may serve (`key` = [`use_key`] of the relation) and one `(store id,
    /// registered)` per store that records its uses. Records an older efmesh wrote as sequences
    /// `"_efmesh"."_efmesh_use__<store id>__<key>"` count too, until
    /// [`Engine::prepare_storage_uses`] turns them into rows. The table's existence is asked of
    /// the catalog (≈ 10 ms at 2000 tables: the janitor's cost, not an apply's).
    ///
    /// # Errors
    /// [`EngineError`].
    fn storage_uses(&mut self) -> Result<Vec<(String, String)>, EngineError> {
        let mut out = legacy_uses(self)?;
        if self.relation_exists(STORAGE_SCHEMA, USES_TABLE)? {
            out.extend(use_rows(self)?);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Adds the use records `(store, key)` of [`Engine::storage_uses`] (`add`) and removes those
    /// of `remove` (rows, and the sequences an older efmesh wrote), in ONE transaction; records
    /// already there (or already gone) are fine. Store ids and keys must be lowercase letters
    /// and digits.
    ///
    /// # Errors
    /// [`EngineError`]; an id or key of other characters is refused.
    fn write_storage_uses(&mut self, add: &[(String, String)], remove: &[(String, String)]) -> Result<(), EngineError> {
        if add.is_empty() && remove.is_empty() {
            return Ok(());
        }
        if let Some((store, key)) = add.iter().chain(remove).find(|(s, k)| !plain_id(s) || !plain_id(k)) {
            return Err(EngineError::new("", format!("`{store}`/`{key}` cannot name a use record")));
        }
        let mut statements = uses_table_statements();
        if !add.is_empty() {
            statements.push(insert_uses(add));
        }
        if !remove.is_empty() {
            statements.push(format!("DELETE FROM {} WHERE (store_id, key) IN (SELECT * FROM (VALUES {}) v(store_id, key))", uses_table(), use_pairs(remove)));
            let wanted: std::collections::HashSet<&(String, String)> = remove.iter().collect();
            let legacy: Vec<(String, String)> = legacy_uses(self)?.into_iter().filter(|r| wanted.contains(r)).collect();
            statements.extend(drop_legacy_uses(&legacy));
        }
        self.transaction(&statements)
    }

    /// [`Engine::storage_uses`] for a store about to record its own (`apply` and `run`): makes
    /// sure [`USES_TABLE`] exists and turns the records of `store` that an older efmesh wrote
    /// as sequences into rows, in ONE transaction, then lists every record. Three cheap
    /// statements (no listing of the database's tables, ≈ 10 ms at 2000 of them): the
    /// sequences, the transaction, the rows. Only `store`'s own sequences move: an older
    /// efmesh sharing the file sees this store without its sequence `…__registered` and so
    /// keeps every version (SPEC §4, 39 (e)), while moving its records would hide them from it.
    /// Why rows: DuckDB loads every sequence of a file each time it opens it, and creating one
    /// costs a statement (≈ 0.15 ms) where a row costs next to nothing.
    ///
    /// # Errors
    /// [`EngineError`]; a store id of other characters than lowercase letters and digits.
    fn prepare_storage_uses(&mut self, store: &str) -> Result<Vec<(String, String)>, EngineError> {
        if !plain_id(store) {
            return Err(EngineError::new("", format!("`{store}` is not a store id")));
        }
        let (mine, mut out): (Vec<_>, Vec<_>) = legacy_uses(self)?.into_iter().partition(|(s, _)| s == store);
        let mut statements = uses_table_statements();
        if !mine.is_empty() {
            statements.push(insert_uses(&mine));
            statements.extend(drop_legacy_uses(&mine));
        }
        self.transaction(&statements)?;
        out.extend(use_rows(self)?);
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// For each `(schema, view)` of `views` that exists as a view now, one statement that
    /// re-creates it exactly as it is (`CREATE OR REPLACE VIEW …`), keyed by the pair; views
    /// that do not exist are absent. A promotion records these before it moves any view, so an
    /// interrupted promotion can be undone.
    ///
    /// # Errors
    /// [`EngineError`]; engines without the capability always fail.
    fn view_definitions(&mut self, views: &[(String, String)]) -> Result<std::collections::BTreeMap<(String, String), String>, EngineError> {
        let _ = views;
        Err(EngineError::new("", format!("the {} engine cannot read view definitions", self.sql().name())))
    }

    /// [`Engine::view_definitions`] taken from `catalog` (this engine's [`Engine::catalog`],
    /// known to be current) instead of a query: the same statements, or `None` when this engine
    /// cannot tell them from its catalog (then the caller queries).
    fn view_definitions_in(&self, catalog: &Catalog, views: &[(String, String)]) -> Option<std::collections::BTreeMap<(String, String), String>> {
        let _ = (catalog, views);
        None
    }

    /// Loads the engine extension `name` (DuckDB: `httpfs`, `ducklake`, …) once per session,
    /// from the configured extension directory or file (never from the network when one is set).
    ///
    /// # Errors
    /// [`EngineError`] saying where the extension was looked for; engines without extensions
    /// always fail.
    fn load_extension(&mut self, name: &str) -> Result<(), EngineError> {
        Err(EngineError::new("", format!("the {} engine has no extension `{name}`", self.sql().name())))
    }
}

/// The schema of physical relations in the engine database.
pub const STORAGE_SCHEMA: &str = "_efmesh";

/// Prefix of the owner marker sequences in `_efmesh` ([`Engine::owner_marker`]).
pub const OWNER_SEQUENCE_PREFIX: &str = "_efmesh_owner__";

/// Prefix of the use record sequences an older efmesh wrote in `_efmesh` ([`Engine::storage_uses`]).
pub const USE_SEQUENCE_PREFIX: &str = "_efmesh_use__";

/// True for a store id or use-record key efmesh may put in a name or literal: lowercase ASCII
/// letters and digits, at least one.
pub(crate) fn plain_id(x: &str) -> bool {
    !x.is_empty() && x.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// The table of use records in `_efmesh` ([`Engine::storage_uses`]); no physical relation's
/// name (`<schema>__<table>__<hex>`) can be it.
pub const USES_TABLE: &str = "_efmesh_uses";

/// `"_efmesh"."_efmesh_uses"`.
fn uses_table() -> String {
    use crate::core::name::quote_ident;
    format!("{}.{}", quote_ident(STORAGE_SCHEMA), quote_ident(USES_TABLE))
}

/// The statements that make sure [`USES_TABLE`] exists.
fn uses_table_statements() -> Vec<String> {
    use crate::core::name::quote_ident;
    vec![
        format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(STORAGE_SCHEMA)),
        format!("CREATE TABLE IF NOT EXISTS {} (store_id VARCHAR NOT NULL, key VARCHAR NOT NULL)", uses_table()),
    ]
}

/// `('<store>', '<key>'), …` of `records`, checked plain by the caller.
fn use_pairs(records: &[(String, String)]) -> String {
    use crate::core::name::quote_literal;
    records.iter().map(|(s, k)| format!("({}, {})", quote_literal(s), quote_literal(k))).collect::<Vec<_>>().join(", ")
}

/// `INSERT` of the use records `records` (checked plain) not in [`USES_TABLE`] yet.
fn insert_uses(records: &[(String, String)]) -> String {
    let table = uses_table();
    format!(
        "INSERT INTO {table} SELECT DISTINCT v.store_id, v.key FROM (VALUES {}) v(store_id, key) \
         WHERE NOT EXISTS (SELECT 1 FROM {table} u WHERE u.store_id = v.store_id AND u.key = v.key)",
        use_pairs(records)
    )
}

/// `DROP SEQUENCE` of each of `records` as an older efmesh wrote it.
fn drop_legacy_uses(records: &[(String, String)]) -> Vec<String> {
    use crate::core::name::quote_ident;
    records
        .iter()
        .map(|(store, key)| format!("DROP SEQUENCE IF EXISTS {}.{}", quote_ident(STORAGE_SCHEMA), quote_ident(&format!("{USE_SEQUENCE_PREFIX}{store}__{key}"))))
        .collect()
}

/// The rows of [`USES_TABLE`], which must exist.
fn use_rows<E: Engine + ?Sized>(engine: &mut E) -> Result<Vec<(String, String)>, EngineError> {
    Ok(pairs(engine.query(&format!("SELECT store_id, key FROM {}", uses_table()))?))
}

/// The rows of a two-column query whose columns are both non-NULL, as pairs (the others
/// skipped).
pub(crate) fn pairs(rows: Vec<Vec<Option<String>>>) -> Vec<(String, String)> {
    rows.into_iter()
        .filter_map(|r| {
            let mut r = r.into_iter();
            Some((r.next().flatten()?, r.next().flatten()?))
        })
        .collect()
}

/// `(store id, key)` of a use record sequence's name, if it is one.
fn legacy_use(name: &str) -> Option<(String, String)> {
    name.strip_prefix(USE_SEQUENCE_PREFIX)?.split_once("__").map(|(s, k)| (s.to_string(), k.to_string()))
}

/// The use records an older efmesh wrote as sequences: one query of the sequences (cheap:
/// no listing of the database's tables).
fn legacy_uses<E: Engine + ?Sized>(engine: &mut E) -> Result<Vec<(String, String)>, EngineError> {
    use crate::core::name::quote_literal;
    let rows = engine.query(&format!(
        "SELECT sequence_name FROM duckdb_sequences() WHERE database_name = current_database() AND schema_name = {} AND starts_with(sequence_name, {})",
        quote_literal(STORAGE_SCHEMA),
        quote_literal(USE_SEQUENCE_PREFIX)
    ))?;
    Ok(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).filter_map(|n| legacy_use(&n)).collect())
}

/// The key of a store's use record meaning "this store records its uses here" ([`Engine::storage_uses`]).
pub const USES_REGISTERED: &str = "registered";

/// The key of the use record of a physical relation ([`Engine::storage_uses`]): the first 32 hex
/// digits of blake3 over its lowercased qualified name (case-insensitive, as DuckDB's names).
pub fn use_key(physical: &str) -> String {
    blake3::hash(physical.to_lowercase().as_bytes()).to_hex()[..32].to_string()
}

/// The start of the name of the copy of a table an apply refreshes in place and may have to
/// put back ([`kept_copy_name`]).
pub const KEPT_COPY_PREFIX: &str = "_efmesh_kept_";

/// The name of the table holding the copy of the table `physical` that an apply takes before
/// refreshing it in place and puts back if the apply promotes nothing
/// ([`dialect::Dialect::copy_table`], [`dialect::Dialect::restore_from_copy`]):
/// [`KEPT_COPY_PREFIX`] then [`use_key`] of `physical` (45 bytes: within every engine's
/// identifier limit; no physical relation's shape, so never a janitor's orphan). One name per
/// table, the same at every attempt: an attempt of a retried apply, or the next apply after a
/// killed one, replaces the copy an earlier one left.
#[must_use]
pub fn kept_copy_name(physical: &str) -> String {
    format!("{KEPT_COPY_PREFIX}{}", use_key(physical))
}

/// [`kept_copy_name`] of `physical`, qualified in the schema of physical relations
/// (`"_efmesh"."_efmesh_kept_…"`): a table of the database, which a process killed before it
/// put the copy back leaves for the next apply or run of its environment
/// (`apply::inherited::recover_kept`).
#[must_use]
pub fn kept_copy_relation(physical: &str) -> String {
    format!("{}.{}", crate::core::name::quote_ident(crate::core::name::PHYSICAL_SCHEMA), crate::core::name::quote_ident(&kept_copy_name(physical)))
}

/// The owner marker table of a DuckLake catalog, in its schema `_efmesh` ([`Engine::owner_marker`]).
pub const OWNER_TABLE: &str = "_efmesh_owners";

/// `"_efmesh_ducklake"."_efmesh"."_efmesh_owners"`.
fn ducklake_owner_table() -> String {
    use crate::core::name::quote_ident;
    format!("{}.{}.{}", quote_ident(crate::core::target::DUCKLAKE_ALIAS), quote_ident(STORAGE_SCHEMA), quote_ident(OWNER_TABLE))
}

/// One relation of efmesh's storage ([`Engine::storage_relations`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRelation {
    /// Quoted, qualified name as physical relations are written (`"_efmesh"."<name>"`, or
    /// `"_efmesh_ducklake"."main"."<name>"`).
    pub qualified: String,
    /// The relation's own name, as the engine spells it.
    pub name: String,
    /// True for a view.
    pub view: bool,
}

/// A [`Catalog`] from rows of `(schema, name, comment[, sql])`.
pub fn catalog_of(rows: Vec<Vec<Option<String>>>) -> Catalog {
    let relations = rows
        .into_iter()
        .filter_map(|r| {
            let mut r = r.into_iter();
            let (schema, name, comment, sql) = (r.next().flatten()?, r.next().flatten()?, r.next().flatten(), r.next().flatten());
            Some((catalog_key(&schema, &name), CatalogEntry { comment, sql }))
        })
        .collect();
    Catalog { relations }
}

/// The view an engine statement re-creates or drops (an undo statement of a promotion,
/// [`crate::state::PendingPromotion::rollback`]): its qualified name as the statement writes it (`"dev__s"."a"`,
/// `mart.events_view`), and for messages (quotes taken off, `dev__s.a`). It is the name after
/// the statement's first `VIEW ` (and `IF EXISTS `): DuckDB's `CREATE OR REPLACE VIEW …`,
/// Postgres's `DO` block around one, `DROP VIEW IF EXISTS …`. `None` for any other shape.
pub fn statement_view(statement: &str) -> Option<(String, String)> {
    let (_, rest) = statement.split_once("VIEW ")?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("IF EXISTS ").map_or(rest, str::trim_start);
    let mut parts = Vec::new();
    let mut tail = rest;
    loop {
        let (part, after) = identifier_prefix(tail)?;
        parts.push(part);
        tail = after;
        match tail.strip_prefix('.') {
            Some(next) => tail = next,
            None => break,
        }
    }
    let written = &rest[..rest.len() - tail.len()];
    Some((written.to_string(), parts.join(".")))
}

/// The identifier `text` starts with, unquoted (double-quoted, `""` standing for a quote; or a
/// run of letters, digits, `_` and `$`), and the text after it; `None` when it starts with none.
fn identifier_prefix(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut part = String::new();
        let mut rest = quoted;
        loop {
            let (inside, after) = rest.split_once('"')?;
            part.push_str(inside);
            match after.strip_prefix('"') {
                Some(more) => {
                    part.push('"');
                    rest = more;
                }
                None => return Some((part, after)),
            }
        }
    }
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$')).unwrap_or(text.len());
    (end > 0).then(|| (text[..end].to_string(), &text[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed extension load reads as one sentence after what needed it ("…, which is not
    /// installed …"), not "needs the `x` extension: the `x` extension is not installed …".
    #[test]
    fn what_needs_an_extension_that_failed_to_load_reads_as_one_sentence() {
        let offline = EngineError::new("", "the `ducklake` extension is not installed and could not be downloaded (offline?): provision it");
        assert_eq!(
            extension_needed("the DuckLake target", "ducklake", &offline),
            "the DuckLake target needs the `ducklake` extension, which is not installed and could not be downloaded (offline?): provision it"
        );
        let other = EngineError::new("", "cannot load extension `httpfs` from `/x.duckdb_extension` ([engine.extensions]): bad file");
        assert_eq!(
            extension_needed("the S3 lake `s3://b/l`", "httpfs", &other),
            "the S3 lake `s3://b/l` needs the `httpfs` extension: cannot load extension `httpfs` from `/x.duckdb_extension` ([engine.extensions]): bad file"
        );
    }

    #[test]
    fn the_failing_statement_is_shown_before_the_hint_which_ends_the_error() {
        let hinted = EngineError::new("SELECT 1", "Conversion Error: bad\n  in the file of external `raw.a`\n  hint: declare it");
        assert_eq!(hinted.to_string(), "engine error: Conversion Error: bad\n  in the file of external `raw.a`\n  while running: SELECT 1\n  hint: declare it");
        assert_eq!(split_hint(&hinted.to_string()).1, Some("declare it"));
        assert_eq!(EngineError::new("SELECT 1", "boom").to_string(), "engine error: boom\n  while running: SELECT 1");
        assert_eq!(EngineError::new("", "locked\n  hint: wait").to_string(), "engine error: locked\n  hint: wait");
    }

    #[test]
    fn text_added_to_a_message_goes_before_its_hint() {
        assert_eq!(split_hint("locked\n  hint: wait"), ("locked", Some("wait")));
        assert_eq!(split_hint("locked"), ("locked", None));
        assert_eq!(before_hint("locked\n  hint: wait", " (after 5 s)"), "locked (after 5 s)\n  hint: wait");
        assert_eq!(before_hint("locked", " (after 5 s)"), "locked (after 5 s)");
    }

    #[test]
    fn the_view_of_each_undo_statement_shape_is_found() {
        let duckdb = "CREATE OR REPLACE VIEW mart.events_view AS SELECT event_at FROM _efmesh.mart__events_view__05;";
        assert_eq!(statement_view(duckdb), Some(("mart.events_view".to_string(), "mart.events_view".to_string())));
        let quoted = "CREATE OR REPLACE VIEW \"dev__s\".\"a \"\"b\"\"\" AS SELECT 1";
        assert_eq!(statement_view(quoted), Some(("\"dev__s\".\"a \"\"b\"\"\"".to_string(), "dev__s.a \"b\"".to_string())));
        let dropped = super::dialect::Dialect::drop_view_if_exists(&super::dialect::Standard, "\"dev__s\".\"c\"");
        assert_eq!(statement_view(&dropped), Some(("\"dev__s\".\"c\"".to_string(), "dev__s.c".to_string())));
        let postgres = super::dialect::Dialect::replace_view_as(&super::dialect::Standard, "\"dev__s\".\"b\"", "SELECT 1 AS x").concat();
        assert_eq!(statement_view(&postgres), Some(("\"dev__s\".\"b\"".to_string(), "dev__s.b".to_string())));
        assert_eq!(statement_view("CREATE SCHEMA IF NOT EXISTS \"dev__s\""), None);
        assert_eq!(statement_view("DROP VIEW IF EXISTS (SELECT 1)"), None);
    }

    #[test]
    fn a_refused_type_is_one_line_with_duckdbs_suggestion_and_check_finds_only_unknown_types() {
        let m = "Catalog Error: Type with name bignt does not exist!\nDid you mean \"bigint\"?\n\nLINE 1: SELECT CAST(NULL AS bignt) AS x";
        assert_eq!(type_message(m), "Catalog Error: Type with name bignt does not exist! (did you mean `bigint`?)");
        assert_eq!(type_message("Parser Error: syntax error at end of input\nLINE 1: …"), "Parser Error: syntax error at end of input");
        let binder = "Binder Error: Referenced column \"nosuch\" not found in FROM clause!\nCandidate bindings: \"revenue\"\n\nLINE 4: WHERE revenue > nosuch\n                        ^";
        assert_eq!((error_line(binder), error_line("Conversion Error: no excerpt")), (Some(4), None));
        assert_eq!(
            type_message("Extension Autoloading Error: An error occurred:\nFailed to download"),
            "Extension Autoloading Error: An error occurred: Failed to download"
        );
        let config = Config::parse(std::path::Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"models/*.lua\"]\n").expect("config");
        // `inet` is the inet extension's: never installed from here, and no finding.
        let found = unknown_types(&config, &["bigint", "bignt", "inet", "int8", "decimal(18, 2)", "varchar[]", "struct(x integer)", "decimal(18,"]);
        let found: Vec<(&str, bool)> = found.iter().map(|(t, m)| (t.as_str(), type_message(m).ends_with("(did you mean `bigint`?)"))).collect();
        assert_eq!(found, [("bignt", true), ("decimal(18,", false)]);
        assert!(unknown_types(&config, &["bigint"]).is_empty());
    }

    /// `check`'s file lookup globs as `apply` does: a missing file and a glob matching nothing
    /// (in a directory that does not exist either) are found, a present file and a glob matching
    /// one are not; on Postgres, which reads no files, nothing is looked for.
    #[test]
    fn unmatched_files_are_the_paths_the_engines_glob_finds_no_file_for() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::create_dir_all(dir.path().join("parts")).unwrap();
        fs_err::write(dir.path().join("parts/a.csv"), "id\n1\n").unwrap();
        let at = |rel: &str| dir.path().join(rel).to_string_lossy().into_owned();
        let (present, glob, missing, nothing) = (at("parts/a.csv"), at("parts/*.csv"), at("parts/b.csv"), at("partz/*.csv"));
        let paths = [present.as_str(), glob.as_str(), missing.as_str(), nothing.as_str()];
        let config = Config::parse(std::path::Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"models/*.lua\"]\n").expect("config");
        assert_eq!(unmatched_files(&config, &paths), std::collections::BTreeSet::from([missing.clone(), nothing.clone()]));
        let pg = Config::parse(std::path::Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"models/*.lua\"]\n[engine]\nurl_env = \"PG_ENGINE_URL\"\n")
            .expect("config");
        assert!(unmatched_files(&pg, &paths).is_empty());
    }

    #[test]
    fn catalog_lookups_ignore_case_and_views_name_whole_relations() {
        let c = catalog_of(vec![vec![Some("Sales".into()), Some("B".into()), None, Some("CREATE VIEW x AS SELECT 1".into())]]);
        assert!(c.contains("sales", "b") && c.contains("SALES", "B"));
        assert_eq!(c.view_sql("sales", "b"), Some("CREATE VIEW x AS SELECT 1"));
        assert!(view_names("CREATE VIEW \"d\".\"t\" AS SELECT a FROM _efmesh.s__t__ab;", "\"_efmesh\".\"s__t__ab\""));
        assert!(view_names("SELECT a FROM \"_EFMESH\".\"S__T__AB\"", "\"_efmesh\".\"s__t__ab\""));
        assert!(!view_names("SELECT a FROM _efmesh.s__t__abc", "\"_efmesh\".\"s__t__ab\""));
        assert!(!view_names("SELECT a FROM x._efmesh.s__t__ab", "\"_efmesh\".\"s__t__ab\""));
        // The in-place ASCII comparison agrees with the copying one on every case.
        let sqls = [
            "SELECT a FROM \"_efmesh\".\"s__t__ab\"",
            "SELECT a FROM _efmesh.s__t__abc",
            "SELECT a FROM _efmesh.s__t__ab.x",
            "SELECT * FROM \"_EFMESH\".\"S__T__AB\" JOIN _efmesh.s__t__ab ON 1",
            "_efmesh.s__t__ab",
            "x_efmesh.s__t__ab",
            "(_efmesh\"\".s__t__ab)",
            "$_efmesh.s__t__ab",
            "",
        ];
        for sql in sqls {
            for rel in ["\"_efmesh\".\"s__t__ab\"", "_efmesh.s__t__ab", "\"\"", "s__t__ab", "ab"] {
                assert_eq!(view_names_ascii(sql.as_bytes(), rel.as_bytes()), view_names_text(sql, rel), "{sql} / {rel}");
            }
        }
    }
}
