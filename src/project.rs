//! A loaded project: its configuration and its validated model DAG.

use crate::config::Config;
use crate::core::{Dag, LoadError, LoadErrors};
use crate::script::loader::{self, Discovered, LoadCache, LoadReport};

pub mod cache;

/// Configuration plus the validated DAG of every model.
#[derive(Debug, Clone)]
pub struct Project {
    /// The configuration the project was loaded with.
    pub config: Config,
    /// Every model, validated and topologically ordered.
    pub dag: Dag,
}

impl Project {
    /// Discovers, evaluates and validates every model file of `config`'s project: restored from
    /// the project cache ([`cache`]) when no input changed since the last load, else through the
    /// project's persistent load cache ([`LoadCache`]), where files whose inputs did not change
    /// since the last load are not evaluated again (then the project cache is stored).
    ///
    /// Pure with respect to the databases: reads only the project's files (and writes the load
    /// cache).
    ///
    /// # Errors
    /// [`LoadErrors`]: every problem found, each with file:line, model and culprit.
    pub fn load(config: &Config) -> Result<Project, LoadErrors> {
        if let Some(restored) = cache::restore(config) {
            return Ok(restored.project);
        }
        let mut load_cache = LoadCache::open(config);
        let (project, report) = Self::load_with(config, &mut load_cache);
        load_cache.save();
        if let Ok(p) = &project
            && let Some(key) = cache::key_of(config, p, &report)
        {
            cache::store(config, &key, p);
        }
        project
    }

    /// Like [`Project::load`], with the cache `cache` (not saved); also returns what the load
    /// read and evaluated, filled as far as the load got when it fails.
    pub fn load_with(config: &Config, cache: &mut LoadCache) -> (Result<Project, LoadErrors>, LoadReport) {
        match Discovered::of(config) {
            Ok(files) => Self::load_files(config, files, cache),
            Err(e) => (Err(e), LoadReport::default()),
        }
    }

    /// [`Project::load_with`] of the audit and model files `files` (as [`Discovered::of`] gave
    /// them), without walking the discovery globs.
    pub fn load_files(config: &Config, files: Discovered, cache: &mut LoadCache) -> (Result<Project, LoadErrors>, LoadReport) {
        // Globs that match no model file are a mistake, never an empty project: planned as one,
        // every model of an applied environment would be removed.
        if files.models.is_empty() {
            let globs = config.project.models.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ");
            let error = LoadError::new(None, None, format!("no model file matches `[project] models` ({globs}) under {}", config.root.display()))
                .with_hint(format!("the globs are relative to the directory of `{}`; fix them or add a model file", config.path.display()));
            return (Err(LoadErrors(vec![error])), LoadReport::default());
        }
        let (models, report) = loader::load_project(config, &files, cache);
        let project = models.and_then(|models| {
            prefetch_canonical(config, &models);
            let dag = Dag::build(models)?;
            let reserved = reserved_schemas(config, &dag);
            if !reserved.is_empty() {
                return Err(LoadErrors(reserved));
            }
            let bad_statements = check_statements(config, &dag);
            if !bad_statements.is_empty() {
                return Err(LoadErrors(bad_statements));
            }
            // A storage target needs its section of efmesh.toml: say so at load, not mid-apply.
            let unconfigured = crate::core::target::unconfigured(dag.models(), config.lake.is_some(), config.ducklake.is_some());
            if !unconfigured.is_empty() {
                return Err(LoadErrors(unconfigured));
            }
            Ok(Project { config: config.clone(), dag })
        });
        (project, report)
    }

    /// The files a project loads, in evaluation order: audit definitions first (so every model
    /// file can attach them), then model files.
    ///
    /// # Errors
    /// [`LoadErrors`] for an invalid glob or a file outside the project.
    pub fn files(config: &Config) -> Result<Vec<std::path::PathBuf>, LoadErrors> {
        Ok(Discovered::of(config)?.all().cloned().collect())
    }
}

/// Schemas the engine already names as catalogs or system schemas, and so cannot hold a model:
/// DuckDB's `temp` and `system` catalogs and the database's own (the file's name up to its first
/// dot: `efmesh` for `efmesh.duckdb`), and the `information_schema` / `pg_catalog` schemas. DuckDB refuses a
/// reference to such a schema as ambiguous — at the first promotion to `prod`, whose views live
/// in the models' own schemas — so it is refused at load, at the model's file:line.
pub fn reserved_schemas(config: &Config, dag: &Dag) -> Vec<crate::core::LoadError> {
    // DuckDB names a file's catalog by its file name up to the first dot (`shop.prod.duckdb`: `shop`).
    let database = config.engine_file().and_then(|f| f.file_name().map(|s| s.to_string_lossy().split('.').next().unwrap_or_default().to_lowercase()));
    let mut errors = Vec::new();
    for m in dag.models() {
        let schema = m.name.schema().to_lowercase();
        let why = match schema.as_str() {
            "temp" | "system" => format!("`{schema}` is one of DuckDB's built-in catalogs"),
            "information_schema" | "pg_catalog" => format!("`{schema}` is a system schema"),
            s if database.as_deref() == Some(s) => format!("`{schema}` is the name of the DuckDB database (its file `{}`)", config.engine_path().display()),
            _ => continue,
        };
        errors.push(
            crate::core::LoadError::new(
                Some(m.location.clone()),
                Some(m.name.clone()),
                format!("the schema `{}` of model `{}` cannot hold models: {why}, so the engine cannot tell which one a name means", m.name.schema(), m.name),
            )
            .with_hint("rename the model's schema (or, for the database's name, the file in `[engine] path`)"),
        );
    }
    errors
}

/// Every pre/post statement that is not exactly one statement of the engine's grammar
/// (sqlparser's DuckDB dialect, or libpg_query with `[engine] url_env`), as load errors at the
/// statement's file:line naming the model and which statement.
pub fn check_statements(config: &Config, dag: &Dag) -> Vec<crate::core::LoadError> {
    use crate::sql::statements::{CheckResolver, Grammar, check};
    let grammar = if config.engine.url_env.is_some() { Grammar::Postgres } else { Grammar::Embedded };
    let mut errors = Vec::new();
    for m in dag.models() {
        for (when, i, st) in m.statements.each() {
            if let Err(e) = check(&st.sql.render(&CheckResolver), grammar) {
                errors.push(crate::core::LoadError::new(Some(st.location.clone()), Some(m.name.clone()), format!("{when}-statement {i}: {e}")));
            }
        }
    }
    errors
}

/// For a command about to plan with no state store on disk (so no canonicalisation cache: the
/// plan canonicalises every body), starts canonicalising every body in the background
/// (`sql::prefetch`) on all cores but this one, which goes on with the serial rest of the load
/// and the plan's reads.
fn prefetch_canonical(config: &Config, models: &[crate::core::Model]) {
    // A Postgres store (`url_env`) is taken to exist: it has a canonicalisation cache.
    // The prefetch is sqlparser's digest: the embedded engine's grammar only (no `[engine] url_env`).
    if !crate::sql::prefetch::wanted() || config.engine.url_env.is_some() || config.state.url_env.is_some() || config.state_path().exists() {
        return;
    }
    let bodies: Vec<String> = models.iter().filter_map(|m| m.body.as_ref().map(|b| b.render(&crate::core::fragment::CanonicalResolver))).collect();
    if bodies.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(8);
    crate::sql::prefetch::start(bodies, threads.saturating_sub(1).max(1));
}
