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
    engine.load_extension("ducklake").map_err(|e| format!("the DuckLake target needs the `ducklake` extension: {}", e.message))?;
    let target = match (&url, &file) {
        (Some(url), _) => {
            engine
                .load_extension("postgres_scanner")
                .map_err(|e| format!("a DuckLake catalog in Postgres needs the `postgres_scanner` extension: {}", e.message))?;
            format!("ducklake:postgres:{url}")
        }
        (None, Some(file)) => format!("ducklake:{}", file.to_string_lossy()),
        (None, None) => return Ok(false),
    };
    let data = match dl.data_path.as_ref().map(|d| d.to_string_lossy().into_owned()) {
        Some(s3) if s3.starts_with("s3://") => {
            engine.load_extension("httpfs").map_err(|e| format!("the DuckLake data path `{s3}` needs the `httpfs` extension: {}", e.message))?;
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
        None => None,
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
    let mut options = Vec::new();
    if read_only {
        options.push("READ_ONLY".to_string());
    } else if let Some(d) = &data {
        options.push(format!("DATA_PATH {}", quote_literal(d)));
    }
    let mut sql = format!("ATTACH IF NOT EXISTS {} AS {}", quote_literal(&target), quote_ident(DUCKLAKE_ALIAS));
    if !options.is_empty() {
        sql.push_str(&format!(" ({})", options.join(", ")));
    }
    let what = if read_only { "ATTACH of the DuckLake catalog (read-only)" } else { "ATTACH of the DuckLake catalog" };
    engine.execute_secret(what, &sql).map_err(|e| {
        let mut message = crate::config::redact_url_passwords(&e.message);
        if let Some(pw) = url.as_deref().and_then(|u| crate::pg::parse(u).ok()).and_then(|c| crate::pg::secret(&c)).filter(|p| !p.is_empty()) {
            message = message.replace(&pw, crate::config::REDACTED);
        }
        format!("cannot attach the DuckLake catalog {}{}: {message}", catalog_location(config), if read_only { " read-only" } else { "" })
    })?;
    Ok(true)
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
///
/// # Errors
/// As [`prepare`]; [`ApplyError::Rejected`] naming the model, its table and the catalog when a
/// table it relies on is missing; [`ApplyError::State`] when the ledger cannot be read.
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
    if stored.is_empty() || catalog_lost {
        // A new catalog: every version in it is built by this apply.
        return Ok(());
    }
    let held = tables(engine)?;
    refuse_lost(project, plan, state, rebuilt, &stored, &held, false)
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
    let held = if project.config.ducklake_catalog_file().is_some_and(|f| !f.exists()) {
        std::collections::HashSet::new()
    } else {
        let mut engine = crate::engine::open(&project.config, crate::engine::Access::Scratch).map_err(|e| e.message)?;
        attach(&project.config, engine.as_mut(), true)?;
        tables(engine.as_mut()).map_err(|e| e.to_string())?
    };
    let rebuilt = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for s in served.iter().filter(|s| !held.contains(&s.table.to_lowercase())) {
        if relied_on(s, state, &rebuilt).map_err(|e| e.to_string())?.is_some() {
            out.push(format!("`{}` (DuckLake table {} missing)", s.model.name, s.action.physical.as_deref().unwrap_or_default()));
        }
    }
    Ok(out)
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
fn tables(engine: &mut dyn Engine) -> Result<std::collections::HashSet<String>, ApplyError> {
    let rows = engine.query(&format!(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = {} AND table_schema = {}",
        quote_literal(DUCKLAKE_ALIAS),
        quote_literal(DUCKLAKE_SCHEMA)
    ))?;
    Ok(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).map(|t| t.to_lowercase()).collect())
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
                    plan.env,
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
}
