//! How references render when SQL is executed: against physical relations (apply), typed empty
//! stand-ins (the up-front contract check), or an environment's views (`render --env`).

use crate::core::interval::{self, Interval};
use crate::core::name::quote_ident;
use crate::core::{External, Kind, Model, ModelName, Resolver};
use crate::plan::env_schema;
use crate::project::Project;
use std::collections::{BTreeMap, BTreeSet};

/// Where references point.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Physical relations of the plan's versions.
    Execute,
    /// Like `Execute`, but models in the set (not built yet) render as typed empty relations
    /// built from their declared schemas.
    Contract(&'a BTreeSet<ModelName>),
    /// The views of an environment.
    Env(&'a str),
}

/// A [`Resolver`] for executable SQL; see [`Mode`].
#[derive(Debug, Clone, Copy)]
pub struct ExecResolver<'a> {
    project: &'a Project,
    physicals: &'a BTreeMap<ModelName, String>,
    mode: Mode<'a>,
    bounds: Option<Interval>,
}

impl<'a> ExecResolver<'a> {
    /// A resolver over `physicals` (the physical relation of the plan's version of every
    /// materialised model).
    pub fn new(project: &'a Project, physicals: &'a BTreeMap<ModelName, String>, mode: Mode<'a>) -> Self {
        Self { project, physicals, mode, bounds: None }
    }

    /// The same resolver with interval bounds (`None`: placeholders `$start`/`$end`).
    pub fn with_bounds(&self, bounds: Option<Interval>) -> Self {
        Self { bounds, ..*self }
    }
}

/// `(SELECT CAST(NULL AS <type>) AS "<col>", … LIMIT 0)`: a relation with a model's declared
/// shape (plus its kind's managed columns) and no rows.
pub fn typed_empty(model: &Model) -> String {
    typed_empty_of(&model.relation_columns())
}

/// [`typed_empty`] of `columns`: `(SELECT CAST(NULL AS <type>) AS "<col>", … LIMIT 0)`.
pub fn typed_empty_of(columns: &[crate::core::Column]) -> String {
    let cols: Vec<String> = columns.iter().map(|c| format!("CAST(NULL AS {}) AS {}", c.ty, quote_ident(&c.name))).collect();
    format!("(SELECT {} LIMIT 0)", cols.join(", "))
}

/// The engine expression reading an external source (paths resolved against the project root;
/// URLs such as `https://…` or `s3://…` kept as written).
pub fn external_source(project: &Project, model: &Model, ext: &External) -> String {
    let root = project.config.root.clone();
    ext.render(&|p| resolve_source_path(&root, p), &model.schema.0)
}

/// Where the engine reads an external file path: a URL (`scheme://…`) as written, an absolute
/// path as is, anything else relative to the project root.
pub fn resolve_source_path(root: &std::path::Path, path: &str) -> String {
    if is_url(path) { path.to_string() } else { root.join(path).to_string_lossy().to_string() }
}

pub use crate::plan::integrity::{embeds_project_root, is_url};

/// What is said of an external's local `path` (or glob) that matches no file, by `apply`'s
/// source check and `efmesh check`'s `missing_source_file` alike: the path as written and, when
/// relative, as the engine reads it ([`resolve_source_path`] against `root`, the project
/// directory).
pub fn no_file_message(root: &std::path::Path, path: &str) -> String {
    let what = if path.contains(['*', '?', '[', '{']) { format!("no file matches the pattern `{path}`") } else { format!("file `{path}` does not exist") };
    if std::path::Path::new(path).is_absolute() {
        what
    } else {
        format!("{what} (read as `{}`, relative to the project directory)", resolve_source_path(root, path))
    }
}

/// The expression reading an external source, restricted to its declared columns (cast to
/// their declared types when the reader could not type them, see
/// [`External::typed_by_consumers`]). A CSV glob with a guarded column is read with each row's
/// file too ([`External::names_files`]), for the guard's message to name the file holding the
/// refused value; the projection leaves that column out.
pub fn external_relation(project: &Project, model: &Model, ext: &External) -> String {
    let root = project.config.root.clone();
    let src = ext.render_for_consumers(&|p| resolve_source_path(&root, p), &model.schema.0);
    let in_file = ext.names_files(&model.schema.0);
    // (A JSON file's text columns are left as read: a field DuckDB typed `JSON` cast to text
    // would keep a string's quotes.)
    let json = matches!(ext, External::Files { format: crate::core::FileFormat::Json, .. });
    let what = match ext {
        External::Files { path, .. } => format!("external `{}` ({}) reading {path}", model.name, model.location),
        External::Table { .. } => format!("external `{}` ({})", model.name, model.location),
    };
    let cols: Vec<String> = if ext.typed_by_consumers() {
        model
            .schema
            .0
            .iter()
            .map(|c| {
                let q = quote_ident(&c.name);
                if json && crate::core::schema::TypeFamily::of(&c.ty) == crate::core::schema::TypeFamily::Text {
                    q
                } else if ext.guards_zoned(&c.ty) {
                    ext.read_column(c, &what, in_file)
                } else {
                    format!("CAST({q} AS {}) AS {q}", c.ty)
                }
            })
            .collect()
    } else {
        model.schema.0.iter().map(|c| ext.read_column(c, &what, in_file)).collect()
    };
    format!("(SELECT {} FROM {src})", cols.join(", "))
}

impl Resolver for ExecResolver<'_> {
    fn relation(&self, name: &ModelName) -> String {
        let Some(model) = self.project.dag.get(name) else { return name.to_string() };
        match &model.kind {
            // The contract check reads each source once on its own; queries see typed stand-ins
            // (DuckDB would otherwise sniff a CSV file again for every DESCRIBE).
            Kind::External(_) if matches!(self.mode, Mode::Contract(_)) => typed_empty(model),
            Kind::External(ext) => external_relation(self.project, model, ext),
            Kind::Embedded => format!("(\n{}\n)", model.body.as_ref().map(|b| b.render(self)).unwrap_or_default()),
            _ => match self.mode {
                Mode::Contract(pending) if pending.contains(name) => typed_empty(model),
                Mode::Env(env) => format!("{}.{}", quote_ident(&env_schema(env, name.schema())), quote_ident(name.table())),
                _ => self.physicals.get(name).cloned().unwrap_or_else(|| name.to_string()),
            },
        }
    }

    fn start(&self) -> String {
        self.bounds.map(|b| interval::to_sql_literal(b.start)).unwrap_or_else(|| "$start".into())
    }

    fn end(&self) -> String {
        self.bounds.map(|b| interval::to_sql_literal(b.end)).unwrap_or_else(|| "$end".into())
    }

    fn bound(&self, b: crate::core::fragment::Bound) -> String {
        self.bounds.map(|iv| b.literal(iv)).unwrap_or_else(|| b.placeholder())
    }

    /// The model's own table for the version being applied (created empty before its first
    /// build, so the first build reads no rows); a typed empty relation in the contract check;
    /// the environment's view under `render --env`.
    fn this(&self, model: &ModelName) -> String {
        let Some(m) = self.project.dag.get(model) else { return crate::core::fragment::THIS_PLACEHOLDER.to_string() };
        match self.mode {
            Mode::Contract(pending) if pending.contains(model) => typed_empty(m),
            Mode::Env(env) => format!("{}.{}", quote_ident(&env_schema(env, model.schema())), quote_ident(model.table())),
            _ => self.physicals.get(model).cloned().unwrap_or_else(|| typed_empty(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing file or glob is named as written and, when relative, as the engine reads it.
    #[test]
    fn a_missing_source_is_named_as_written_and_as_read() {
        let root = std::path::Path::new("/p");
        assert_eq!(no_file_message(root, "data/x.csv"), "file `data/x.csv` does not exist (read as `/p/data/x.csv`, relative to the project directory)");
        assert_eq!(
            no_file_message(root, "data/day=*/e.csv"),
            "no file matches the pattern `data/day=*/e.csv` (read as `/p/data/day=*/e.csv`, relative to the project directory)"
        );
        assert_eq!(no_file_message(root, "/srv/x.parquet"), "file `/srv/x.parquet` does not exist");
        assert_eq!(resolve_source_path(root, "s3://b/x.parquet"), "s3://b/x.parquet");
    }
}
