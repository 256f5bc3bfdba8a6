//! The DuckLake target (`target = "ducklake"`): model versions stored as tables of a DuckLake
//! catalog, attached under the fixed alias `_efmesh_ducklake` (see [`crate::core::target`]).
//!
//! One table per version, `"_efmesh_ducklake"."main"."<schema>__<table>__<fp>"`, is the
//! version's physical relation: full models are `CREATE OR REPLACE TABLE … AS`, time-range
//! batches `DELETE` + `INSERT` in one transaction, forward-only versions `ALTER TABLE … ADD
//! COLUMN`, exactly as for engine tables; environment views in the DuckDB file select from it.
//! Versioning stays efmesh's: DuckLake's own snapshots are incidental.
//!
//! The catalog (`[ducklake] catalog`, a local DuckLake metadata file) is attached at the start
//! of every apply of a project that has DuckLake models, pure view swaps included (creating a
//! view binds its query). Outside readers of the DuckDB file attach it themselves:
//! `ATTACH 'ducklake:<catalog>' AS "_efmesh_ducklake"`.
//!
//! The plan's integrity check ([`crate::plan::integrity`]) reads the DuckDB file's catalog only,
//! so an apply or run checks the DuckLake tables it relies on itself, before any write
//! ([`prepare_checked`]): a lost one is refused, never created anew holding only new intervals.
//! A table the catalog holds whose data or delete files are missing from a local data path
//! (moved or deleted outside efmesh: every query of it fails) is found by the plan
//! ([`lost_files`], read by [`crate::session`] for [`crate::plan::integrity::ducklake_files_lost`]:
//! `apply` rebuilds it, `run` refuses until then) and refused by an apply or run whose plan does
//! not rebuild it ([`prepare_checked`]). An `s3://` data path is not checked (as a parquet lake on
//! S3 is not listed while planning).
//! A catalog restored from a copy older than the state store holds every table but lacks later
//! intervals: each command of a project with DuckLake models that raises the engine epoch
//! (SPEC §4, invariant 63) stamps the catalog with the same epoch (the table
//! `"_efmesh_ducklake"."_efmesh"."_efmesh_epochs"`, one row per store) and records it as the
//! store's DuckLake epoch (`meta.ducklake_epoch`), and a catalog whose stamp is lower than that
//! is refused while it holds tables with done intervals. Not the engine epoch: an apply of a
//! project without DuckLake models sharing the store (another branch, another checkout) raises
//! that without stamping the catalog, which is still current.

use super::ApplyError;
use crate::core::Target;
use crate::core::name::{quote_ident, quote_literal};
use crate::core::target::{DUCKLAKE_ALIAS, DUCKLAKE_SCHEMA};
use crate::engine::Engine;
use crate::project::Project;

/// The URL of a Postgres DuckLake catalog (`[ducklake] catalog_url_env`), read from the
/// environment; `None` for a local catalog file.
///
/// # Errors
/// A message naming the variable and the configuration file when it is unset or empty.
pub fn catalog_url(config: &crate::config::Config) -> Result<Option<String>, String> {
    let Some(var) = config.ducklake.as_ref().and_then(|dl| dl.catalog_url_env.as_ref()) else { return Ok(None) };
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Ok(Some(url)),
        _ => Err(format!("the environment variable `{var}` (named by `[ducklake] catalog_url_env` in `{}`) is unset or empty", config.path.display())),
    }
}

/// Where the DuckLake catalog is, for messages: its file, or its Postgres database without the
/// password.
pub fn catalog_location(config: &crate::config::Config) -> String {
    match (config.ducklake_catalog_file(), config.ducklake.as_ref().and_then(|dl| dl.catalog_url_env.as_ref())) {
        (Some(file), _) => file.to_string_lossy().into_owned(),
        (None, Some(var)) => match std::env::var(var).ok().and_then(|u| crate::pg::describe_url(&u)) {
            Some(d) => format!("DuckLake catalog {d}"),
            None => format!("the DuckLake catalog in `${var}`"),
        },
        (None, None) => String::new(),
    }
}

/// Attaches the project's DuckLake catalog to `engine` as `_efmesh_ducklake`, loading what it
/// needs first (`ducklake`; `postgres_scanner` for a catalog in Postgres; `httpfs` and a
/// temporary S3 secret for an `s3://` data path). Read-write (creating a local catalog's
/// directories) or `read_only`. `Ok(false)` when there is nothing to attach: no `[ducklake]`,
/// or (read-only) a local catalog file that does not exist yet. The statement naming a Postgres
/// catalog holds its URL: it is run as a secret (never logged) and its failures show no
/// password.
///
/// # Errors
/// A message naming what could not be loaded or attached.
pub fn attach(config: &crate::config::Config, engine: &mut dyn Engine, read_only: bool) -> Result<bool, String> {
    let Some(dl) = config.ducklake.as_ref() else { return Ok(false) };
    let url = catalog_url(config)?;
    let file = config.ducklake_catalog_file();
    if read_only && file.as_ref().is_some_and(|f| !f.exists()) {
        return Ok(false);
    }
    engine.load_extension("ducklake").map_err(|e| crate::engine::extension_needed("the DuckLake target", "ducklake", &e))?;
    let target = match (&url, &file) {
        (Some(url), _) => {
            engine.load_extension("postgres_scanner").map_err(|e| crate::engine::extension_needed("a DuckLake catalog in Postgres", "postgres_scanner", &e))?;
            format!("ducklake:postgres:{url}")
        }
        (None, Some(file)) => format!("ducklake:{}", file.to_string_lossy()),
        (None, None) => return Ok(false),
    };
    let data = match dl.data_path.as_ref().map(|d| d.to_string_lossy().into_owned()) {
        Some(s3) if s3.starts_with("s3://") => {
            engine.load_extension("httpfs").map_err(|e| crate::engine::extension_needed(&format!("the DuckLake data path `{s3}`"), "httpfs", &e))?;
            crate::apply::lake::create_s3_secret(engine, DUCKLAKE_S3_SECRET, &s3, &dl.s3(), "the DuckLake data path")?;
            Some(if s3.ends_with('/') { s3 } else { format!("{s3}/") })
        }
        Some(local) => {
            let mut d = config.resolve(std::path::Path::new(&local)).to_string_lossy().into_owned();
            if !d.ends_with('/') {
                d.push('/');
            }
            Some(d)
        }
        // DuckLake's own default, `<catalog>.files/`, made explicit so it follows the catalog
        // when the project moves (below).
        None => file.as_ref().map(|f| format!("{}.files/", f.to_string_lossy())),
    };
    let moved = match &data {
        Some(configured) => data_path_moved(config, engine, &target, configured, url.as_deref())?,
        None => false,
    };
    if !read_only {
        let dirs = file
            .as_ref()
            .and_then(|f| f.parent().map(std::path::Path::to_path_buf))
            .into_iter()
            .chain(data.iter().filter(|d| !d.starts_with("s3://")).map(std::path::PathBuf::from));
        for dir in dirs {
            fs_err::create_dir_all(&dir).map_err(|e| format!("cannot create the DuckLake directory: {e}"))?;
        }
    }
    // A catalog that moved with its data path ([`data_path_moved`]) is attached at the new
    // place, overriding the path it records (`OVERRIDE_DATA_PATH`, this connection only).
    let mut options = Vec::new();
    if read_only {
        options.push("READ_ONLY".to_string());
    }
    if let Some(d) = data.as_ref().filter(|_| moved || !read_only) {
        options.push(format!("DATA_PATH {}", quote_literal(d)));
        if moved {
            options.push("OVERRIDE_DATA_PATH true".to_string());
        }
    }
    let mut sql = format!("ATTACH IF NOT EXISTS {} AS {}", quote_literal(&target), quote_ident(DUCKLAKE_ALIAS));
    if !options.is_empty() {
        sql.push_str(&format!(" ({})", options.join(", ")));
    }
    let what = if read_only { "ATTACH of the DuckLake catalog (read-only)" } else { "ATTACH of the DuckLake catalog" };
    // A local catalog file another process reads (a `plan` or `status --check` of this project
    // checking its data files: a read-only attach, held for a moment) refuses a read-write
    // attach meanwhile: it is tried again for a few seconds before that is an error.
    let waited = std::time::Instant::now();
    let mut attached = engine.execute_secret(what, &sql);
    while !read_only && attached.as_ref().is_err_and(|e| crate::engine::is_locked_file(&e.message)) && waited.elapsed() < ATTACH_LOCK_WAIT {
        if waited.elapsed() < std::time::Duration::from_millis(50) {
            tracing::debug!("the DuckLake catalog is held by another process's read: waiting for it to let go");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        attached = engine.execute_secret(what, &sql);
    }
    attached.map_err(|e| {
        // The password only where a connection string holds it (a word equal to it elsewhere in
        // the message, the database's name, stays as the engine wrote it).
        let secret = url.as_deref().and_then(|u| crate::pg::parse(u).ok()).and_then(|c| crate::pg::secret(&c)).filter(|p| !p.is_empty());
        let message = crate::pg::redact_passwords(&e.message, secret.as_deref());
        format!("cannot attach the DuckLake catalog {}{}: {message}", catalog_location(config), if read_only { " read-only" } else { "" })
    })?;
    Ok(true)
}

/// How long a read-write [`attach`] waits for another process's read of a local catalog file
/// (a plan checking the data files) to let it go.
const ATTACH_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The words of [`data_path_moved`]'s refusal that `status --check` looks for, to report it as a
/// problem (the catalog cannot be attached as configured) rather than as a catalog it could not
/// read (held by another process).
pub const DATA_PATH_MISMATCH: &str = "records its data path";

/// The alias under which [`data_path_moved`] reads an existing catalog's record.
const PROBE_ALIAS: &str = "_efmesh_ducklake_probe";

/// Whether the existing DuckLake catalog `target` records another data path than `configured`
/// (both ending in `/`) that is nonetheless the catalog's: the same directory spelled otherwise
/// (a symlink, `..`), or a directory holding the catalog's current files (the project moved or
/// was copied with its data path), or one existing while the catalog has no file to split.
/// `false` when they agree, when the local catalog file does not exist yet, when it is attached
/// already, and for a catalog in Postgres. A catalog records its data path, absolute, when it is
/// created, and its files relative to it, so after a move its record names the old place.
///
/// # Errors
/// Any other disagreement — `data_path` edited or removed while the catalog's files are under
/// the recorded directory, files at neither place, an `s3://` path — names both paths and
/// the ways forward: DuckLake keeps each table's files under one data path, so attaching
/// through another would split a table between the two (new files under the configured path,
/// the old ones unreadable through it). Failures to read the record are reported too.
fn data_path_moved(config: &crate::config::Config, engine: &mut dyn Engine, target: &str, configured: &str, url: Option<&str>) -> Result<bool, String> {
    // A catalog in Postgres is left to DuckLake's own check (a read-write attach naming another
    // data path than the record is refused by it).
    if url.is_some() || config.ducklake_catalog_file().is_none_or(|f| !f.exists()) {
        return Ok(false);
    }
    let attached = engine
        .query(&format!("SELECT count(*) FROM duckdb_databases() WHERE database_name IN ({}, {})", quote_literal(DUCKLAKE_ALIAS), quote_literal(PROBE_ALIAS)))
        .map_err(|e| format!("cannot list the attached databases: {}", e.message))?;
    if attached.first().and_then(|r| r.first().cloned().flatten()).is_some_and(|n| n != "0") {
        return Ok(false);
    }
    let what = "ATTACH of the DuckLake catalog to read its data path";
    engine
        .execute_secret(what, &format!("ATTACH {} AS {} (READ_ONLY)", quote_literal(target), quote_ident(PROBE_ALIAS)))
        .map_err(|e| format!("cannot attach the DuckLake catalog {} read-only: {}", catalog_location(config), e.message))?;
    let meta = quote_ident(&format!("__ducklake_metadata_{PROBE_ALIAS}"));
    let recorded = engine.query(&format!("SELECT value FROM {meta}.ducklake_metadata WHERE key = 'data_path'"));
    // A few of the catalog's current files, relative to its data path (schema, table and file
    // paths relative, as DuckLake writes them): where they are tells a move or a copy from an
    // edited `data_path`.
    let files = engine.query(&format!(
        "SELECT s.path || t.path || f.path FROM {meta}.ducklake_data_file f \
         JOIN {meta}.ducklake_table t ON t.table_id = f.table_id AND t.end_snapshot IS NULL \
         JOIN {meta}.ducklake_schema s ON s.schema_id = t.schema_id AND s.end_snapshot IS NULL \
         WHERE f.end_snapshot IS NULL AND f.path_is_relative AND t.path_is_relative AND s.path_is_relative LIMIT 5"
    ));
    let detached = engine.execute(&format!("DETACH {}", quote_ident(PROBE_ALIAS)));
    let unread = |e: crate::engine::EngineError| format!("cannot read the data path the DuckLake catalog {} records: {}", catalog_location(config), e.message);
    let (recorded, files) = (recorded.map_err(unread)?, files.map_err(unread)?);
    detached.map_err(|e| format!("cannot detach the DuckLake catalog {} after reading its data path: {}", catalog_location(config), e.message))?;
    let Some(recorded) = recorded.into_iter().next().and_then(|r| r.into_iter().next().flatten()) else { return Ok(false) };
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    if same(&recorded, configured) {
        return Ok(false);
    }
    let local = |p: &str| !p.contains("://");
    let files: Vec<String> = files.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect();
    let under = |dir: &str| !files.is_empty() && files.iter().all(|f| std::path::Path::new(dir).join(f).is_file());
    if local(&recorded) && local(configured) {
        // The same directory spelled otherwise (through a symlink, with `..`), or the catalog's
        // files under the configured one (the project moved or was copied with its data path),
        // or no file to split (every row inlined in the catalog, or no table yet).
        let canonical = |p: &str| fs_err::canonicalize(p).ok();
        let same_dir = canonical(&recorded).is_some_and(|r| canonical(configured).is_some_and(|c| c == r));
        if same_dir || under(configured) || (files.is_empty() && std::path::Path::new(configured).is_dir()) {
            return Ok(true);
        }
    }
    let hint = if local(&recorded) && under(&recorded) {
        format!(
            "this catalog's files are under `{recorded}`: if this project owns that directory, set `data_path` back to it (without `data_path`, DuckLake's default is `<catalog>.files/`); if this project is a copy of another, copy that directory to `{configured}` too — two catalogs must never share a data path (the janitor of one would delete the other's files)"
        )
    } else {
        format!(
            "neither `{recorded}` nor `{configured}` holds this catalog's files: restore its data directory at `{configured}` (a project moved or copied with it is attached at its new place)"
        )
    };
    Err(format!(
        "the DuckLake catalog {} {DATA_PATH_MISMATCH} `{recorded}`, but `[ducklake] data_path` in `{}` names `{configured}`: DuckLake keeps each table's files under one data path, so efmesh neither reads nor writes through another (a table would be split between the two)\n  hint: {hint}",
        catalog_location(config),
        config.path.display()
    ))
}

/// The name of the temporary S3 secret for an `s3://` DuckLake data path.
const DUCKLAKE_S3_SECRET: &str = "_efmesh_ducklake_s3";

/// Loads the `ducklake` extension and attaches the catalog when the project has DuckLake
/// models; does nothing otherwise.
///
/// # Errors
/// [`ApplyError::Target`] when the extension cannot be loaded (with a hint to provision it) or
/// the catalog cannot be attached.
pub fn prepare(project: &Project, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    if !project.dag.models().any(|m| m.target == Target::DuckLake) {
        return Ok(());
    }
    let err = |message: String| ApplyError::Target { model: None, interval: None, message };
    if project.config.ducklake.is_none() {
        return Err(err("models with `target = \"ducklake\"` need a `[ducklake]` section in efmesh.toml".into()));
    }
    attach(&project.config, engine, false).map_err(err)?;
    Ok(())
}

/// Like [`prepare`], for a read-only connection (a data preview): loads the extension and
/// attaches the catalog read-only, when the project has DuckLake models and the catalog exists
/// (no catalog yet: no version lives there, so nothing to read); creates nothing.
///
/// # Errors
/// [`ApplyError::Target`] when the extension cannot be loaded or the catalog cannot be attached.
pub fn prepare_read_only(project: &Project, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    if !project.dag.models().any(|m| m.target == Target::DuckLake) {
        return Ok(());
    }
    let err = |message: String| ApplyError::Target { model: None, interval: None, message };
    if project.config.ducklake.is_none() {
        return Err(err("models with `target = \"ducklake\"` need a `[ducklake]` section in efmesh.toml".into()));
    }
    attach(&project.config, engine, true).map_err(err)?;
    Ok(())
}

/// [`prepare`], for an `apply` or `run` of `plan`: first refuses, before anything is written, a
/// plan relying on a DuckLake table the catalog does not hold ([`refuse_lost`]). The plan
/// cannot see DuckLake's tables (it reads the DuckDB file's catalog alone), so this is where a
/// lost one is found: one query of the attached catalog's tables, or, when the local catalog
/// file does not exist, before attaching (which would create an empty catalog). `rebuilt` are
/// the models this apply or run builds (a `full` one is rebuilt whole: its table may be gone).
/// Then refuses a plan relying on a table whose data files are missing that it does not
/// rebuild ([`refuse_lost_files`]: one more catalog query, a `stat` per file).
/// Then refuses a catalog whose epoch stamp ([`stamp`]) is lower than the store's DuckLake
/// epoch (the last stamp of the catalog the store recorded) while
/// it holds tables of the store's versions with done intervals ([`behind`]): restored from a
/// copy older than the store. Called before the command raises the epoch, so a refused catalog
/// is never stamped current.
///
/// # Errors
/// As [`prepare`]; [`ApplyError::Rejected`] naming the model, its table and the catalog when a
/// table it relies on is missing; [`ApplyError::EngineBehind`] naming the catalog and both
/// epochs when it is behind; [`ApplyError::State`] when the ledger cannot be read.
pub fn prepare_checked(
    project: &Project,
    plan: &crate::plan::Plan,
    state: &dyn crate::state::StateStore,
    rebuilt: &std::collections::BTreeSet<crate::core::ModelName>,
    engine: &mut dyn Engine,
) -> Result<(), ApplyError> {
    let stored = stored(project, plan);
    let catalog_lost = project.config.ducklake_catalog_file().is_some_and(|f| !f.exists());
    if catalog_lost && !stored.is_empty() {
        // Not attached first: the `ATTACH` would create an empty catalog in its place.
        refuse_lost(project, plan, state, rebuilt, &stored, &std::collections::HashSet::new(), true)?;
    }
    prepare(project, engine)?;
    if catalog_lost || !project.dag.models().any(|m| m.target == Target::DuckLake) {
        // A new catalog: every version in it is built by this apply (or nothing attached).
        return Ok(());
    }
    let held = tables(engine)?;
    if !stored.is_empty() {
        refuse_lost(project, plan, state, rebuilt, &stored, &held, false)?;
        refuse_lost_files(project, plan, engine, &stored, &held)?;
    }
    // Checked whatever this plan stores there: an apply of another environment would stamp the
    // catalog current, and the stale tables of this one would then be served as caught up.
    let recorded = state.ducklake_epoch()?;
    if recorded == 0 || held.is_empty() {
        return Ok(());
    }
    match stamped(engine, &state.store_id()?)? {
        Some(stamp) if stamp < recorded => match behind(project, &plan.env, state, &held, stamp, recorded)? {
            Some(message) => Err(ApplyError::EngineBehind(message)),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The table of the DuckLake catalog's schema `_efmesh` holding each state store's epoch stamp
/// (SPEC §4, invariant 63): one row `(store_id, epoch)` per store that wrote the catalog.
const EPOCH_TABLE: &str = "_efmesh_epochs";

/// [`EPOCH_TABLE`], qualified and quoted.
fn epoch_table() -> String {
    format!("{}.{}.{}", quote_ident(DUCKLAKE_ALIAS), quote_ident(crate::engine::STORAGE_SCHEMA), quote_ident(EPOCH_TABLE))
}

/// The engine epoch of the store `store_id` stamped in the attached DuckLake catalog; `None`
/// when the catalog holds no stamp of it (a new catalog, or one only an efmesh older than the
/// stamp wrote: trusted until its first stamp). Two catalog queries.
///
/// # Errors
/// [`crate::engine::EngineError`] when a query fails.
pub fn stamped(engine: &mut dyn Engine, store_id: &str) -> Result<Option<i64>, crate::engine::EngineError> {
    let exists = engine.query(&format!(
        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = {} AND table_schema = {} AND table_name = {}",
        quote_literal(DUCKLAKE_ALIAS),
        quote_literal(crate::engine::STORAGE_SCHEMA),
        quote_literal(EPOCH_TABLE)
    ))?;
    if exists.first().and_then(|r| r.first().cloned().flatten()).as_deref() == Some("0") {
        return Ok(None);
    }
    let rows = engine.query(&format!("SELECT CAST(max(epoch) AS VARCHAR) FROM {} WHERE store_id = {}", epoch_table(), quote_literal(store_id)))?;
    Ok(rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()).and_then(|n| n.parse().ok()))
}

/// Stamps the attached DuckLake catalog with the engine epoch `epoch` of the store `store_id`
/// (the value [`crate::engine::epoch::stamp`] just stamped the engine database with), replacing
/// a lower stamp of the store in ONE transaction (never lowering it: two DuckDB files sharing
/// the store and the catalog may stamp it in either order). Called at every raise of the epoch
/// by a command of a project with DuckLake models, which then records the epoch as the store's
/// DuckLake epoch, so the stamp follows it: a catalog whose stamp is lower was restored from a
/// copy taken before later writes ([`behind`]).
///
/// # Errors
/// [`crate::engine::EngineError`] naming the statement.
pub fn stamp(engine: &mut dyn Engine, store_id: &str, epoch: i64) -> Result<(), crate::engine::EngineError> {
    let table = epoch_table();
    engine.execute(&format!("CREATE SCHEMA IF NOT EXISTS {}.{}", quote_ident(DUCKLAKE_ALIAS), quote_ident(crate::engine::STORAGE_SCHEMA)))?;
    engine.execute(&format!("CREATE TABLE IF NOT EXISTS {table} (store_id VARCHAR NOT NULL, epoch BIGINT NOT NULL)"))?;
    let id = quote_literal(store_id);
    engine.transaction(&[
        format!("DELETE FROM {table} WHERE store_id = {id} AND epoch < {epoch}"),
        format!("INSERT INTO {table} SELECT {id}, {epoch} WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE store_id = {id})"),
    ])
}

/// Why the DuckLake catalog, stamped with epoch `stamp` while the store records `recorded` (its
/// DuckLake epoch),
/// cannot be trusted: it holds (`held`: its tables in schema `main`, lowercased) the table of
/// one or more of the store's versions with done intervals recorded (every version of the
/// store, not only `env`'s), each of which may lack intervals the ledger records; `None` when it
/// holds none (a catalog holding nothing of the store's is never refused). The message names
/// the catalog, both epochs, up to five such models with their done intervals, and the ways
/// out: the state store restored from the same moment, or every done interval restated (`env`'s
/// command), which leaves nothing of the ledger in the catalog to distrust.
///
/// # Errors
/// [`ApplyError::State`] when the snapshots or the ledger cannot be read.
fn behind(
    project: &Project,
    env: &str,
    state: &dyn crate::state::StateStore,
    held: &std::collections::HashSet<String>,
    stamp: i64,
    recorded: i64,
) -> Result<Option<String>, ApplyError> {
    use crate::core::interval::to_iso;
    let index = state.snapshot_index()?;
    let done = state.all_done_intervals()?;
    // (model, table) -> the done interval starts of every version stored in that table.
    let mut found: std::collections::BTreeMap<(String, String), std::collections::BTreeSet<crate::core::interval::Millis>> = std::collections::BTreeMap::new();
    for (key, (physical, _)) in &index {
        let Some(table) = table_of(physical) else { continue };
        let Some(starts) = done.get(key).filter(|d| !d.is_empty()) else { continue };
        if held.contains(&table.to_lowercase()) {
            found.entry((key.0.clone(), physical.clone())).or_default().extend(starts.iter().copied());
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    let mut listed = Vec::new();
    let mut commands = Vec::new();
    for ((model, physical), starts) in found.iter().take(5) {
        let (Some(&first), Some(&last)) = (starts.first(), starts.last()) else { continue };
        let grain = crate::core::ModelName::parse(model).ok().and_then(|m| project.dag.get(&m)).and_then(|m| m.kind.time_range()).map(|t| t.grain);
        let end = grain.map_or(last + 1, |g| g.next(last));
        listed.push(format!("`{model}` ({physical}: {} done interval(s), {} to {})", starts.len(), to_iso(first), to_iso(end)));
        commands.push(format!("`efmesh restate {env} --model {model} --from {} --to {}`", to_iso(first), to_iso(end)));
    }
    if found.len() > 5 {
        listed.push(format!("and {} more", found.len() - 5));
    }
    let catalog = match project.config.ducklake_catalog_file() {
        Some(file) => format!("the DuckLake catalog `{}`", file.display()),
        None => catalog_location(&project.config),
    };
    Ok(Some(format!(
        "{catalog} is older than the state store {} says: the store records writes to the catalog up to epoch {recorded}, the catalog holds them up to epoch {stamp} \
         (it, or its data path, was restored from an older copy after later runs); its tables may lack intervals and builds the ledger records as done: {}; \
         so nothing is written into it as it is\n  \
         hint: restore the state store from the same moment as the catalog (`efmesh state import <export> --force`), or recompute every done interval \
         the catalog may lack: {}, then apply or run again",
        state.location(),
        listed.join(", "),
        commands.join(", ")
    )))
}

/// A version of the plan stored in the DuckLake catalog: its model, its action, and its table's
/// name in the catalog's schema `main`.
struct Stored<'a> {
    /// The model.
    model: &'a crate::core::Model,
    /// Its action in the plan.
    action: &'a crate::plan::Action,
    /// The version's table in the catalog's schema `main`, unquoted.
    table: String,
}

/// The versions of `plan` (removed models excepted) stored in the DuckLake catalog.
fn stored<'a>(project: &'a Project, plan: &'a crate::plan::Plan) -> Vec<Stored<'a>> {
    plan.actions
        .iter()
        .filter(|a| a.change != crate::plan::Change::Removed)
        .filter_map(|a| {
            let model = project.dag.get(&a.name).filter(|m| m.target == Target::DuckLake)?;
            let table = table_of(a.physical.as_deref()?)?;
            Some(Stored { model, action: a, table })
        })
        .collect()
}

/// For `status --check`: the DuckLake versions `plan`'s environment serves unchanged (its
/// `unchanged`/`metadata` actions) whose table the catalog lacks while the state says it holds
/// something ([`relied_on`]), each as "`model` (DuckLake table … missing)". The catalog is
/// attached read-only to an in-memory database and its tables read in ONE query; a local catalog
/// file that does not exist lacks every table. No DuckLake version served: nothing is loaded.
///
/// # Errors
/// A message when the catalog cannot be attached or read, or the ledger cannot be read.
pub fn lost_served(project: &Project, plan: &crate::plan::Plan, state: &dyn crate::state::StateStore) -> Result<Vec<String>, String> {
    let served: Vec<Stored<'_>> =
        stored(project, plan).into_iter().filter(|s| matches!(s.action.change, crate::plan::Change::Unchanged | crate::plan::Change::Metadata)).collect();
    if served.is_empty() {
        return Ok(Vec::new());
    }
    let held = held_tables(project)?;
    let rebuilt = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for s in served.iter().filter(|s| !held.contains(&s.table.to_lowercase())) {
        if relied_on(s, state, &rebuilt).map_err(|e| e.to_string())?.is_some() {
            out.push(format!("`{}` (DuckLake table {} missing)", s.model.name, s.action.physical.as_deref().unwrap_or_default()));
        }
    }
    Ok(out)
}

/// For `status --check`: which of `versions` (each a model, the fingerprints of every version
/// of it stored in the relation, and that relation: versions an environment serves that the
/// project defines otherwise or no longer, which the plan does not check) are stored in the
/// DuckLake catalog, whose table the catalog lacks while the state store records something
/// there: a `full` version (served, so built), or a time-range version (`time_range`) with a
/// done interval recorded for one of the versions stored there; or whose table the catalog holds
/// while data or delete files it lists for it are missing from its local data path
/// ([`missing_files`]: every query of it fails). Returns their indices in `versions`, each with
/// `None` for a missing table or the first missing file (its full path). The catalog is read as
/// [`lost_served`] reads it, and its files with one more query; none of `versions` in the
/// catalog: nothing is loaded.
///
/// # Errors
/// A message when the catalog cannot be attached or read, or the ledger cannot be read.
pub fn lost_served_versions(
    project: &Project,
    state: &dyn crate::state::StateStore,
    versions: &[(&str, &[String], &str, bool)],
) -> Result<Vec<(usize, Option<String>)>, String> {
    let stored: Vec<(usize, String)> = versions.iter().enumerate().filter_map(|(i, (_, _, physical, _))| table_of(physical).map(|t| (i, t))).collect();
    if stored.is_empty() {
        return Ok(Vec::new());
    }
    let mut engine = attached_read_only(project)?;
    let held = match engine.as_deref_mut() {
        Some(engine) => tables(engine).map_err(|e| e.to_string())?,
        None => std::collections::HashSet::new(),
    };
    let present: Vec<String> = stored.iter().filter(|(_, t)| held.contains(&t.to_lowercase())).map(|(_, t)| t.clone()).collect();
    let missing = match engine.as_deref_mut() {
        Some(engine) if !present.is_empty() => missing_files(&project.config, engine, &present).map_err(|e| e.message)?,
        _ => std::collections::BTreeMap::new(),
    };
    let mut out = Vec::new();
    for (i, table) in stored {
        if held.contains(&table.to_lowercase()) {
            if let Some(first) = missing.get(&table.to_lowercase()).and_then(|files| files.first()) {
                out.push((i, Some(first.clone())));
            }
            continue;
        }
        let (name, sharing, _, time_range) = versions[i];
        let relied = if time_range {
            let mut any = false;
            for fp in sharing {
                if !state.done_intervals(name, fp).map_err(|e| e.to_string())?.is_empty() {
                    any = true;
                    break;
                }
            }
            any
        } else {
            true
        };
        if relied {
            out.push((i, None));
        }
    }
    Ok(out)
}

/// The tables of the DuckLake catalog's schema `main`, lowercased: the catalog attached
/// read-only to an in-memory database and read in ONE query; a local catalog file that does not
/// exist holds none.
///
/// # Errors
/// A message when the catalog cannot be attached or read.
fn held_tables(project: &Project) -> Result<std::collections::HashSet<String>, String> {
    match attached_read_only(project)? {
        Some(mut engine) => tables(engine.as_mut()).map_err(|e| e.to_string()),
        None => Ok(std::collections::HashSet::new()),
    }
}

/// An in-memory database with the project's DuckLake catalog attached read-only ([`attach`]);
/// `None` when there is nothing to attach: no `[ducklake]`, or a local catalog file that does not
/// exist (never created by a read).
///
/// # Errors
/// A message when the database cannot be opened or the catalog cannot be attached.
fn attached_read_only(project: &Project) -> Result<Option<Box<dyn Engine + Send>>, String> {
    if project.config.ducklake_catalog_file().is_some_and(|f| !f.exists()) {
        return Ok(None);
    }
    let mut engine = crate::engine::open(&project.config, crate::engine::Access::Scratch).map_err(|e| e.message)?;
    Ok(attach(&project.config, engine.as_mut(), true)?.then_some(engine))
}

/// Where [`missing_files`] looks for the files of the DuckLake catalog, as [`attach`] attaches it.
enum DataRoot {
    /// A local directory, ending in `/`: the configured `[ducklake] data_path` resolved against
    /// the project, or DuckLake's default `<catalog>.files/` beside a local catalog file.
    Local(String),
    /// The data path the catalog records (a catalog in Postgres without `data_path`): local
    /// files are checked, URLs are not.
    Recorded,
    /// An `s3://` data path: not checked (a parquet lake on S3 is not listed while planning
    /// either); a read of a lost object fails with the engine's error.
    Remote,
}

/// The project's [`DataRoot`].
fn data_root(config: &crate::config::Config) -> DataRoot {
    let configured = config.ducklake.as_ref().and_then(|dl| dl.data_path.as_ref()).map(|d| d.to_string_lossy().into_owned());
    let dir = match configured {
        Some(d) if d.contains("://") => return DataRoot::Remote,
        Some(d) => config.resolve(std::path::Path::new(&d)).to_string_lossy().into_owned(),
        None => match config.ducklake_catalog_file() {
            Some(file) => format!("{}.files", file.to_string_lossy()),
            None => return DataRoot::Recorded,
        },
    };
    DataRoot::Local(if dir.ends_with('/') { dir } else { format!("{dir}/") })
}

/// The local directory DuckLake writes the files of the table of `physical` (a DuckLake physical
/// relation) into, `<data path>/main/<table>`: its status changes when a file in it is deleted
/// or it is moved, so the plan-check token ([`crate::session`]) covers it. `None` for another
/// relation, or a data path that is not a local directory.
pub fn table_dir(config: &crate::config::Config, physical: &str) -> Option<std::path::PathBuf> {
    let table = table_of(physical)?;
    match data_root(config) {
        DataRoot::Local(dir) => Some(std::path::Path::new(&dir).join(DUCKLAKE_SCHEMA).join(table)),
        DataRoot::Recorded | DataRoot::Remote => None,
    }
}

/// The data and delete files of `tables` (unquoted names in the catalog's schema `main`) that the
/// DuckLake catalog attached to `engine` lists for their current snapshot
/// ([`Engine::ducklake_files`]) and that are missing from its local data path, by table
/// (lowercased), each with its missing files' full paths, sorted: ONE catalog query and a `stat`
/// per file. An `s3://` data path is not checked ([`DataRoot::Remote`]: empty), nor a file the
/// catalog records at a URL; a file that cannot be stat'ed for another reason than its absence
/// (permissions) counts as present (the read names it).
///
/// # Errors
/// [`crate::engine::EngineError`] when the catalog's metadata cannot be read.
fn missing_files(
    config: &crate::config::Config,
    engine: &mut dyn Engine,
    tables: &[String],
) -> Result<std::collections::BTreeMap<String, Vec<String>>, crate::engine::EngineError> {
    let root = match data_root(config) {
        DataRoot::Remote => return Ok(std::collections::BTreeMap::new()),
        DataRoot::Local(dir) => Some(dir),
        DataRoot::Recorded => None,
    };
    let mut out: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for (table, path) in engine.ducklake_files(tables, root.as_deref())? {
        if path.contains("://") {
            continue;
        }
        if matches!(fs_err::metadata(&path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            out.entry(table).or_default().push(path);
        }
    }
    Ok(out)
}

/// True when `action` writes its version's table anew whatever it holds: a new version's build
/// (its table does not exist yet; a `full` rebuild replaces it whole), not one inheriting
/// another version's table (`reused_from`).
fn builds_anew(action: &crate::plan::Action) -> bool {
    action.build && action.reused_from.is_none()
}

/// For the plan's check ([`crate::session`], then
/// [`crate::plan::integrity::ducklake_files_lost`]): the DuckLake tables of `plan`'s versions
/// that hold data already (every version stored there but one its build writes anew:
/// [`builds_anew`]) whose data or delete files are missing from the local data path
/// ([`missing_files`]), by physical relation, each with its missing files (full paths, sorted).
/// The catalog is attached read-only to an in-memory database (a local catalog file that does
/// not exist is not: [`lost_served`] and [`prepare_checked`] say what it lacks). Nothing is
/// loaded when the plan stores nothing there that holds data, when the engine has no DuckLake,
/// or for an `s3://` data path (not checked).
///
/// # Errors
/// A message when the catalog cannot be attached or read.
pub fn lost_files(project: &Project, plan: &crate::plan::Plan) -> Result<std::collections::BTreeMap<String, Vec<String>>, String> {
    let stored: Vec<Stored<'_>> = stored(project, plan).into_iter().filter(|s| !builds_anew(s.action)).collect();
    if stored.is_empty()
        || matches!(data_root(&project.config), DataRoot::Remote)
        || !crate::engine::dialect_for(&project.config).supports(crate::engine::dialect::Feature::DuckLake)
    {
        return Ok(std::collections::BTreeMap::new());
    }
    let Some(mut engine) = attached_read_only(project)? else { return Ok(std::collections::BTreeMap::new()) };
    let tables: Vec<String> = stored.iter().map(|s| s.table.clone()).collect();
    let missing = missing_files(&project.config, engine.as_mut(), &tables).map_err(|e| e.message)?;
    Ok(stored.iter().filter_map(|s| Some((s.action.physical.clone()?, missing.get(&s.table.to_lowercase())?.clone()))).collect())
}

/// Refuses the plan when a DuckLake table it relies on (`held`: the catalog's tables,
/// lowercased; one its build writes anew excepted, [`builds_anew`]) lacks data or delete files
/// the catalog lists ([`missing_files`]) and the plan does not rebuild it
/// (`repair.ducklakeFilesMissing`): they went missing after the plan was checked, or its check
/// could not read the catalog. Every query of such a table fails, a batch's `DELETE` too (with the
/// engine's bare `IO Error`), and nothing computed over it would be right: refused before
/// anything is written, naming each model, its table and a missing file, with the ways out.
///
/// # Errors
/// [`ApplyError::Rejected`] for the first such model (in plan order), the others listed in its
/// message; [`ApplyError::Engine`] when the catalog's metadata cannot be read.
fn refuse_lost_files(
    project: &Project,
    plan: &crate::plan::Plan,
    engine: &mut dyn Engine,
    stored: &[Stored<'_>],
    held: &std::collections::HashSet<String>,
) -> Result<(), ApplyError> {
    let checked: Vec<&Stored<'_>> = stored
        .iter()
        .filter(|s| held.contains(&s.table.to_lowercase()) && !builds_anew(s.action))
        .filter(|s| s.action.repair.as_ref().is_none_or(|r| r.ducklake_files_missing.is_empty()))
        .collect();
    if checked.is_empty() {
        return Ok(());
    }
    let tables: Vec<String> = checked.iter().map(|s| s.table.clone()).collect();
    let missing = missing_files(&project.config, engine, &tables)?;
    let lost: Vec<(&Stored<'_>, &Vec<String>)> = checked.iter().filter_map(|s| missing.get(&s.table.to_lowercase()).map(|f| (*s, f))).collect();
    let Some((first, _)) = lost.first() else { return Ok(()) };
    let lines: Vec<String> = lost
        .iter()
        .map(|(s, files)| {
            let more = if files.len() > 1 { format!(" and {} more", files.len() - 1) } else { String::new() };
            format!(
                "`{}`: its DuckLake table {} lacks {} data file(s) its catalog lists ({}{more}): moved or deleted outside efmesh, every query of it fails",
                s.model.name,
                s.action.physical.as_deref().unwrap_or_default(),
                files.len(),
                files.first().map(String::as_str).unwrap_or_default()
            )
        })
        .collect();
    let data = match data_root(&project.config) {
        DataRoot::Local(dir) => format!(" under `{dir}`"),
        DataRoot::Recorded | DataRoot::Remote => String::new(),
    };
    let message = format!(
        "the DuckLake data path lacks files of table(s) this command relies on, which its plan does not rebuild (missing since the plan was checked?); nothing was written:\n  {}\n  \
         hint: put the files back{data} (restore the data path with its catalog), or run `efmesh apply {}`: its plan rebuilds such a table (a time-range version recomputes every interval)",
        lines.join("\n  "),
        plan.env
    );
    Err(ApplyError::Rejected { model: first.model.name.clone(), location: first.model.location.clone(), message })
}

/// For `status --check`: why the DuckLake catalog is behind the state store ([`behind`]: its
/// stamp lower than the store's DuckLake epoch while it holds tables of the store's versions with done
/// intervals), `env` naming the environment in the restate commands of the message; `None` when
/// it is not (or the project has no DuckLake models, or the local catalog file does not exist:
/// [`lost_served`] says what it lacks). The catalog is attached read-only to an in-memory
/// database only when the store records a DuckLake epoch.
///
/// # Errors
/// A message when the catalog cannot be attached or read, or the state store cannot be read.
pub fn catalog_behind(project: &Project, env: &str, state: &dyn crate::state::StateStore) -> Result<Option<String>, String> {
    if !project.dag.models().any(|m| m.target == Target::DuckLake) || project.config.ducklake_catalog_file().is_some_and(|f| !f.exists()) {
        return Ok(None);
    }
    let recorded = state.ducklake_epoch().map_err(|e| e.to_string())?;
    if recorded == 0 {
        return Ok(None);
    }
    let mut engine = crate::engine::open(&project.config, crate::engine::Access::Scratch).map_err(|e| e.message)?;
    if !attach(&project.config, engine.as_mut(), true)? {
        return Ok(None);
    }
    let store_id = state.store_id().map_err(|e| e.to_string())?;
    match stamped(engine.as_mut(), &store_id).map_err(|e| e.to_string())? {
        Some(stamp) if stamp < recorded => {
            let held = tables(engine.as_mut()).map_err(|e| e.to_string())?;
            behind(project, env, state, &held, stamp, recorded).map_err(|e| e.to_string())
        }
        _ => Ok(None),
    }
}

/// What a missing DuckLake table held that the plan relies on.
enum Lost {
    /// A `full` version this apply does not rebuild.
    Whole,
    /// The starts of the done intervals recorded for a time-range version stored there (its own
    /// and those of the version it inherits): a table created anew would serve none of them.
    Intervals(std::collections::BTreeSet<crate::core::interval::Millis>),
}

/// The table name, unquoted, of a DuckLake physical relation `"_efmesh_ducklake"."main"."<t>"`;
/// `None` for any other relation.
pub(crate) fn table_of(physical: &str) -> Option<String> {
    let [catalog, schema, table]: [String; 3] = crate::core::name::quoted_parts(physical)?.try_into().ok()?;
    (catalog == DUCKLAKE_ALIAS && schema == DUCKLAKE_SCHEMA).then_some(table)
}

/// The tables of the attached DuckLake catalog's schema `main`, lowercased (DuckDB resolves
/// names ignoring case): ONE catalog query.
///
/// # Errors
/// [`ApplyError::Engine`] when the query fails.
pub(crate) fn tables(engine: &mut dyn Engine) -> Result<std::collections::HashSet<String>, ApplyError> {
    let rows = engine.query(&format!(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = {} AND table_schema = {}",
        quote_literal(DUCKLAKE_ALIAS),
        quote_literal(DUCKLAKE_SCHEMA)
    ))?;
    Ok(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).map(|t| t.to_lowercase()).collect())
}

/// The environment whose `efmesh restate` recomputes the version `fp` of `model` that `env`
/// serves: `prod` when it serves that version too (restating it from another environment is
/// refused: it is `prod`'s data as well), else `env`.
fn restating_env<'e>(state: &dyn crate::state::StateStore, env: &'e str, model: &str, fp: &str) -> &'e str {
    let prod_serves = env != crate::core::name::PROD && state.env_pointers(crate::core::name::PROD).is_ok_and(|p| p.get(model).is_some_and(|f| f == fp));
    if prod_serves { crate::core::name::PROD } else { env }
}

/// What the missing table of `stored` held that this apply or run relies on, `None` when it
/// relies on nothing there: a time-range version with no done interval recorded (its table is
/// created and every wanted interval computed, as for a new version), or a `full` version it
/// rebuilds (`rebuilt`).
///
/// # Errors
/// [`ApplyError::State`] when the ledger cannot be read.
fn relied_on(
    stored: &Stored<'_>,
    state: &dyn crate::state::StateStore,
    rebuilt: &std::collections::BTreeSet<crate::core::ModelName>,
) -> Result<Option<Lost>, ApplyError> {
    let action = stored.action;
    if stored.model.kind.time_range().is_none() {
        return Ok((!rebuilt.contains(&action.name)).then_some(Lost::Whole));
    }
    let name = action.name.to_string();
    let mut done = std::collections::BTreeSet::new();
    for fp in [Some(&action.fingerprint), action.reused_from.as_ref()].into_iter().flatten() {
        done.extend(state.done_intervals(&name, fp.as_str())?);
    }
    Ok((!done.is_empty()).then_some(Lost::Intervals(done)))
}

/// Refuses the plan when a DuckLake table it relies on ([`relied_on`]) is not among `held`
/// (lowercased names; `catalog_lost`: the local catalog file does not exist), naming every such
/// model, its table and the catalog, with how to recover. Creating the table anew and writing
/// this command's batches into it would serve the new intervals alone, every earlier one silently
/// gone (the table target's lost relation is rebuilt by the plan instead, which cannot see
/// DuckLake's tables).
///
/// # Errors
/// [`ApplyError::Rejected`] for the first such model (in plan order), the others listed in its
/// message; [`ApplyError::State`] when the ledger cannot be read.
fn refuse_lost(
    project: &Project,
    plan: &crate::plan::Plan,
    state: &dyn crate::state::StateStore,
    rebuilt: &std::collections::BTreeSet<crate::core::ModelName>,
    stored: &[Stored<'_>],
    held: &std::collections::HashSet<String>,
    catalog_lost: bool,
) -> Result<(), ApplyError> {
    let mut lost = Vec::new();
    for s in stored.iter().filter(|s| !held.contains(&s.table.to_lowercase())) {
        if let Some(what) = relied_on(s, state, rebuilt)? {
            lost.push((s, what));
        }
    }
    let Some((first, _)) = lost.first() else { return Ok(()) };
    let catalog = match project.config.ducklake_catalog_file() {
        Some(file) => format!("the DuckLake catalog `{}`", file.display()),
        None => catalog_location(&project.config),
    };
    let mut lines = Vec::new();
    for (s, what) in &lost {
        let physical = s.action.physical.as_deref().unwrap_or_default();
        let line = match (what, s.model.kind.time_range()) {
            (Lost::Intervals(done), Some(t)) => {
                let (from, to) = match (done.first(), done.last()) {
                    (Some(&f), Some(&l)) => (crate::core::interval::to_iso(f), crate::core::interval::to_iso(t.grain.next(l))),
                    _ => continue,
                };
                format!(
                    "`{}`: its table {physical} is missing, where the ledger records {} done interval(s) ({from} to {to}); created anew it would serve only the intervals computed now\n  \
                     hint: restore the catalog (with its data path) and the state store from the same backup, or recompute every interval from the sources: \
                     `efmesh restate {} --model {} --from {from} --to {to}`, then apply or run again",
                    s.model.name,
                    done.len(),
                    restating_env(state, &plan.env, &s.model.name.to_string(), s.action.fingerprint.as_str()),
                    s.model.name
                )
            }
            _ => format!(
                "`{}`: its table {physical} is not rebuilt by this command, and environment `{}` serves it\n  \
                 hint: restore the catalog (with its data path) and the state store from the same backup; a run or apply rebuilds it when its parents get new data \
                 (`efmesh restate` a time-range parent), or give the model a new version (edit it) and apply",
                s.model.name, plan.env
            ),
        };
        lines.push(line);
    }
    let what = if catalog_lost {
        format!("{catalog} does not exist (moved or deleted?), and the state records versions stored in it")
    } else {
        format!("{catalog} lacks table(s) the state records (dropped outside efmesh?)")
    };
    let message = format!("{what}; nothing was written, no table re-created:\n  {}", lines.join("\n  "));
    Err(ApplyError::Rejected { model: first.model.name.clone(), location: first.model.location.clone(), message })
}

/// What [`reclaim`] did to the attached DuckLake catalog (or, for a dry run, would do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    /// DuckLake snapshots expired.
    pub snapshots: u64,
    /// Data and delete files removed from the data path.
    pub files: u64,
}

/// The janitor's DuckLake maintenance, on the catalog attached to `engine` as
/// `_efmesh_ducklake`: expires every DuckLake snapshot taken before `older_than` (an ISO-8601
/// UTC instant; DuckLake never expires the newest one) with `ducklake_expire_snapshots`, then
/// removes every file scheduled for deletion — those only expired snapshots referenced: the
/// files of dropped tables, of replaced `full` tables, of deleted time ranges — with
/// `ducklake_cleanup_old_files(cleanup_all => true)`. efmesh reads DuckLake tables at their
/// current snapshot only (environment views select from them by name, never `AT (VERSION …)`),
/// so an expired snapshot is history nobody of efmesh's reads.
///
/// With `dry_run` (the catalog attached read-only) nothing is changed: the snapshots are those
/// `ducklake_expire_snapshots(dry_run => true)` lists, the files are counted from the catalog's
/// metadata — the files already scheduled, the ended files no snapshot taken at or after
/// `older_than` references, and the files of `dropping` (tables the janitor would drop,
/// unquoted names in schema `main`) that no such snapshot references.
///
/// # Errors
/// [`crate::engine::EngineError`] when a DuckLake function or the metadata query fails.
pub fn reclaim(engine: &mut dyn Engine, older_than: &str, dry_run: bool, dropping: &[String]) -> Result<Reclaimed, crate::engine::EngineError> {
    let alias = quote_literal(DUCKLAKE_ALIAS);
    let cutoff = format!("CAST({} AS TIMESTAMPTZ)", quote_literal(older_than));
    let mut count = |sql: &str| -> Result<u64, crate::engine::EngineError> {
        let rows = engine.query(sql)?;
        Ok(rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()).and_then(|n| n.parse().ok()).unwrap_or(0))
    };
    if !dry_run {
        let snapshots = count(&format!("SELECT CAST(count(*) AS VARCHAR) FROM ducklake_expire_snapshots({alias}, older_than => {cutoff})"))?;
        let files = count(&format!("SELECT CAST(count(*) AS VARCHAR) FROM ducklake_cleanup_old_files({alias}, cleanup_all => true)"))?;
        return Ok(Reclaimed { snapshots, files });
    }
    let snapshots = count(&format!("SELECT CAST(count(*) AS VARCHAR) FROM ducklake_expire_snapshots({alias}, dry_run => true, older_than => {cutoff})"))?;
    let meta = quote_ident(&format!("__ducklake_metadata_{DUCKLAKE_ALIAS}"));
    let names = if dropping.is_empty() { "NULL".to_string() } else { dropping.iter().map(|t| quote_literal(&t.to_lowercase())).collect::<Vec<_>>().join(", ") };
    let files = count(&format!(
        "WITH kept AS (SELECT snapshot_id FROM {meta}.ducklake_snapshot WHERE snapshot_time >= {cutoff}), \
         dropping AS (SELECT table_id FROM {meta}.ducklake_table WHERE end_snapshot IS NULL AND lower(table_name) IN ({names})), \
         files AS (SELECT table_id, begin_snapshot, end_snapshot FROM {meta}.ducklake_data_file \
                   UNION ALL SELECT d.table_id, d.begin_snapshot, coalesce(d.end_snapshot, f.end_snapshot) FROM {meta}.ducklake_delete_file d \
                   LEFT JOIN {meta}.ducklake_data_file f ON f.data_file_id = d.data_file_id) \
         SELECT CAST((SELECT count(*) FROM files f \
             WHERE (f.end_snapshot IS NOT NULL OR f.table_id IN (SELECT table_id FROM dropping)) \
               AND NOT EXISTS (SELECT 1 FROM kept k WHERE k.snapshot_id >= f.begin_snapshot AND (f.end_snapshot IS NULL OR k.snapshot_id < f.end_snapshot))) \
           + (SELECT count(*) FROM {meta}.ducklake_files_scheduled_for_deletion) AS VARCHAR)"
    ))?;
    Ok(Reclaimed { snapshots, files })
}

/// Removes the directories a local DuckLake data path kept for `tables` (unquoted names in
/// schema `main`, dropped by the janitor) once they are empty: `ducklake_cleanup_old_files`
/// removes the files, never their directory. Only a real, empty directory goes (never a
/// symbolic link; a non-empty one stays); an `s3://` data path has no directories.
pub fn remove_empty_table_dirs(config: &crate::config::Config, tables: &[String]) {
    let Some(data) = config.ducklake.as_ref().and_then(|dl| dl.data_path.as_ref()) else { return };
    if data.to_string_lossy().starts_with("s3://") {
        return;
    }
    let root = config.resolve(data).join(DUCKLAKE_SCHEMA);
    for table in tables {
        let dir = root.join(table);
        let real_dir = fs_err::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && !m.file_type().is_symlink());
        if real_dir
            && fs_err::read_dir(&dir).is_ok_and(|mut d| d.next().is_none())
            && let Err(e) = fs_err::remove_dir(&dir)
        {
            tracing::debug!("the empty DuckLake table directory stays: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ducklake_physical_relation_names_its_table_in_the_catalog() {
        assert_eq!(table_of("\"_efmesh_ducklake\".\"main\".\"m__daily__ab12\""), Some("m__daily__ab12".to_string()));
        assert_eq!(table_of("\"_efmesh_ducklake\".\"main\".\"a\"\"b\""), Some("a\"b".to_string()));
        assert_eq!(table_of("\"_efmesh\".\"m__daily__ab12\""), None);
        assert_eq!(table_of("\"_efmesh_ducklake\".\"other\".\"t\""), None);
    }

    /// The files of a DuckLake table are looked for under the data path `attach` attaches the
    /// catalog through (its configured one, or DuckLake's default beside the catalog); an
    /// `s3://` data path is not checked.
    #[test]
    fn a_ducklake_tables_directory_is_under_its_local_data_path() {
        let config = |section: &str| {
            crate::config::Config::parse(std::path::Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"models/*.sql\"]\n\n[ducklake]\n{section}"))
                .expect("config")
        };
        let physical = "\"_efmesh_ducklake\".\"main\".\"m__daily__ab12\"";
        let dir = |section: &str| table_dir(&config(section), physical);
        assert_eq!(dir("catalog = \"c/lake.ducklake\"\ndata_path = \"data\"\n"), Some(std::path::PathBuf::from("/p/data/main/m__daily__ab12")));
        assert_eq!(dir("catalog = \"c/lake.ducklake\"\n"), Some(std::path::PathBuf::from("/p/c/lake.ducklake.files/main/m__daily__ab12")));
        assert_eq!(dir("catalog = \"c/lake.ducklake\"\ndata_path = \"s3://bucket/lake\"\n"), None);
        assert!(matches!(data_root(&config("catalog = \"c/lake.ducklake\"\ndata_path = \"s3://bucket/lake\"\n")), DataRoot::Remote));
        assert_eq!(table_dir(&config("catalog = \"c/lake.ducklake\"\n"), "\"_efmesh\".\"m__daily__ab12\""), None);
    }
}
