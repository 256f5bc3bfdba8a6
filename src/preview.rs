//! Data preview: what a changed model's query returns against what an environment serves for
//! its parents, next to what the environment serves for the model now.
//!
//! (API fixed for `watch`; the implementation is in progress on its own branch.)

use crate::core::ModelName;
use crate::core::interval::Millis;
use crate::project::Project;
use crate::state::StateStore;
use serde::Serialize;

/// How much to preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Rows shown per model (`--preview-rows`, default 10).
    pub rows: usize,
    /// The current instant: time-range models preview their newest complete interval before it.
    pub now: Millis,
}

/// The column-level comparison of the previewed query with what the environment serves now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Columns the new query has and the served relation lacks.
    pub added: Vec<String>,
    /// Columns the served relation has and the new query lacks.
    pub removed: Vec<String>,
    /// Columns in both whose type differs: (name, served type, new type).
    pub retyped: Vec<(String, String, String)>,
    /// Rows the served relation has in the preview window.
    pub rows_now: u64,
    /// Rows the new query returns in the preview window.
    pub rows_new: u64,
}

/// The preview of one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// The model previewed.
    pub model: ModelName,
    /// Output columns of the new query: (name, engine type).
    pub columns: Vec<(String, String)>,
    /// The first rows (at most `Options::rows`), values as text, `None` for NULL.
    pub rows: Vec<Vec<Option<String>>>,
    /// The interval previewed, for time-range models: `[start, end)` as ISO-8601 UTC.
    pub window: Option<(String, String)>,
    /// The comparison with what the environment serves now; `None` when it serves no such model.
    pub comparison: Option<Comparison>,
    /// Why the preview failed (an SQL error), with the model's file:line; then the fields above are empty.
    pub error: Option<String>,
}

/// Previews `models` of `project` against what `env` serves: each model's query with its
/// parents resolved to `env`'s views (parents `env` does not serve yet are inlined as their own
/// queries; externals read their source), limited to `options.rows` rows, on a read-only
/// connection to the engine opened for this call and closed before it returns.
///
/// # Errors
/// Only failures that concern every model (the state store cannot be read); a model whose query
/// fails gets a [`Preview`] with `error` set.
pub fn preview(project: &Project, state: &StateStore, env: &str, models: &[ModelName], options: &Options) -> anyhow::Result<Vec<Preview>> {
    let _ = (project, state, env, options);
    Ok(models
        .iter()
        .map(|m| Preview {
            model: m.clone(),
            columns: Vec::new(),
            rows: Vec::new(),
            window: None,
            comparison: None,
            error: Some("preview: not implemented yet".into()),
        })
        .collect())
}
