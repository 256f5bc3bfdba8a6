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

use super::ApplyError;
use crate::core::Target;
use crate::core::name::{quote_ident, quote_literal};
use crate::core::target::DUCKLAKE_ALIAS;
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
