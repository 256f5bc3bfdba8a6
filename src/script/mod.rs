//! Model scripts: discovery, the Lua host and the language-neutral model builder.
//!
//! Loading is two-phase. Phase one evaluates every discovered file (and what it `require`s) in a
//! restricted interpreter, recording models and every `ref()`/`cols()` call with its file:line.
//! Phase two ([`crate::core::Dag::build`]) checks the whole set: unknown refs, columns, cycles.

pub mod builder;
pub mod lua;

use crate::config::Config;
use crate::core::{LoadError, LoadErrors, Model};
use std::path::{Path, PathBuf};

/// Files matched by the config's discovery globs, relative to the project root, sorted.
///
/// # Errors
/// A [`LoadError`] for an invalid glob.
pub fn discover(config: &Config) -> Result<Vec<PathBuf>, LoadErrors> {
    let mut builder = globset::GlobSetBuilder::new();
    for g in &config.project.models {
        let glob = globset::GlobBuilder::new(g).literal_separator(true).build().map_err(|e| {
            LoadErrors(vec![LoadError::new(None, None, format!("invalid discovery glob `{g}` in `{}`: {e}", config.path.display()))])
        })?;
        builder.add(glob);
    }
    let set = builder.build().map_err(|e| LoadErrors(vec![LoadError::new(None, None, e.to_string())]))?;
    let mut files = Vec::new();
    let walker = walkdir::WalkDir::new(&config.root).follow_links(true).into_iter().filter_entry(|e| {
        // Skip hidden directories (.git, .efmesh) below the root.
        e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.')
    });
    for entry in walker.flatten() {
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&config.root) else { continue };
        if set.is_match(rel) {
            files.push(rel.to_path_buf());
        }
    }
    files.sort();
    Ok(files)
}

/// Evaluates every discovered model file under `root`.
///
/// # Errors
/// Every load error found (script errors, invalid specs), each with file:line.
pub fn load_models(root: &Path, files: &[PathBuf]) -> Result<Vec<Model>, LoadErrors> {
    let mut host = lua::LuaHost::new(root).map_err(|e| LoadErrors(vec![LoadError::new(None, None, format!("cannot start the Lua host: {e}"))]))?;
    for f in files {
        host.load_file(f);
    }
    host.finish()
}
