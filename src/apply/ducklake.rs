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

/// The `ATTACH` statement for the project's DuckLake catalog, with paths made absolute against
/// the project root; `None` without `[ducklake]`.
pub fn attach_sql(project: &Project) -> Option<String> {
    attach_sql_for(&project.config)
}

/// [`attach_sql`] from the configuration alone.
pub fn attach_sql_for(config: &crate::config::Config) -> Option<String> {
    let dl = config.ducklake.as_ref()?;
    let catalog = config.resolve(&dl.catalog);
    let mut sql = format!("ATTACH IF NOT EXISTS {} AS {}", quote_literal(&format!("ducklake:{}", catalog.to_string_lossy())), quote_ident(DUCKLAKE_ALIAS));
    if let Some(data) = &dl.data_path {
        let mut data = config.resolve(data).to_string_lossy().into_owned();
        if !data.ends_with('/') {
            data.push('/');
        }
        sql.push_str(&format!(" (DATA_PATH {})", quote_literal(&data)));
    }
    Some(sql)
}

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
    let Some(attach) = attach_sql(project) else {
        return Err(err("models with `target = \"ducklake\"` need a `[ducklake]` section in efmesh.toml".into()));
    };
    engine.load_extension("ducklake").map_err(|e| err(format!("the DuckLake target needs the `ducklake` extension: {}", e.message)))?;
    let dl = project.config.ducklake.as_ref().expect("attach_sql checked it");
    let catalog_dir = project.config.resolve(&dl.catalog).parent().map(std::path::Path::to_path_buf);
    let data_dir = dl.data_path.as_ref().map(|d| project.config.resolve(d));
    for dir in catalog_dir.iter().chain(data_dir.iter()) {
        fs_err::create_dir_all(dir).map_err(|e| err(format!("cannot create the DuckLake directory: {e}")))?;
    }
    engine.execute(&attach).map_err(|e| err(format!("cannot attach the DuckLake catalog: {}", e.message)))?;
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
    let Some(dl) = project.config.ducklake.as_ref() else {
        return Err(err("models with `target = \"ducklake\"` need a `[ducklake]` section in efmesh.toml".into()));
    };
    let catalog = project.config.resolve(&dl.catalog);
    if !catalog.exists() {
        return Ok(());
    }
    engine.load_extension("ducklake").map_err(|e| err(format!("the DuckLake target needs the `ducklake` extension: {}", e.message)))?;
    let attach =
        format!("ATTACH IF NOT EXISTS {} AS {} (READ_ONLY)", quote_literal(&format!("ducklake:{}", catalog.to_string_lossy())), quote_ident(DUCKLAKE_ALIAS));
    engine.execute(&attach).map_err(|e| err(format!("cannot attach the DuckLake catalog read-only: {}", e.message)))?;
    Ok(())
}
