//! Model scripts: discovery, the Lua host and the language-neutral model builder.
//!
//! Loading is two-phase. Phase one evaluates every discovered file (and what it `require`s) in a
//! restricted interpreter, recording models and every `ref()`/`cols()` call with its file:line.
//! Phase two ([`crate::core::Dag::build`]) checks the whole set: unknown refs, columns, cycles.

pub mod audits;
pub mod builder;
pub mod foreign;
pub mod loader;
pub mod lua;
pub mod macros;
pub mod rhai;
pub mod sandbox;
pub mod signals;
pub mod sql_audit;
pub mod sql_file;
pub mod test_spec;
pub mod watchdog;

use crate::config::Config;
use crate::core::{LoadError, LoadErrors, Model};
use std::path::{Path, PathBuf};

/// Files matched by the config's discovery globs, relative to the project root, sorted.
///
/// # Errors
/// A [`LoadError`] for an invalid glob.
pub fn discover(config: &Config) -> Result<Vec<PathBuf>, LoadErrors> {
    discover_matching(config, &config.project.models)
}

/// Files matched by `globs` (relative to the project root), sorted; the same walk as
/// [`discover`] (hidden directories skipped, symlinks leaving the project refused).
///
/// # Errors
/// A [`LoadError`] for an invalid glob or a file resolving outside the project.
pub fn discover_matching(config: &Config, globs: &[String]) -> Result<Vec<PathBuf>, LoadErrors> {
    Ok(discover_each(config, &[globs])?.pop().unwrap_or_default())
}

/// For each glob list of `sets`, the files it matches (relative to the project root, sorted),
/// in one walk of the project: hidden directories skipped, symlinks leaving the project
/// refused.
///
/// # Errors
/// A [`LoadError`] for an invalid glob or a file resolving outside the project.
pub fn discover_each(config: &Config, sets: &[&[String]]) -> Result<Vec<Vec<PathBuf>>, LoadErrors> {
    let mut matchers = Vec::with_capacity(sets.len());
    for globs in sets {
        let mut builder = globset::GlobSetBuilder::new();
        for g in *globs {
            let glob = globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|e| LoadErrors(vec![LoadError::new(None, None, format!("invalid discovery glob `{g}` in `{}`: {e}", config.path.display()))]))?;
            builder.add(glob);
        }
        matchers.push(builder.build().map_err(|e| LoadErrors(vec![LoadError::new(None, None, e.to_string())]))?);
    }
    let mut found: Vec<Vec<PathBuf>> = vec![Vec::new(); sets.len()];
    let real_root = config.root.canonicalize().unwrap_or_else(|_| config.root.clone());
    let mut outside = Vec::new();
    let walker = walkdir::WalkDir::new(&config.root).follow_links(true).into_iter().filter_entry(|e| {
        // Skip hidden directories (.git, .efmesh) below the root.
        e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.')
    });
    // Per depth, whether the directory walked at that depth was reached through a symbolic link.
    let mut linked: Vec<bool> = Vec::new();
    // Files the project means but efmesh cannot read by name: a file name that is not UTF-8
    // (the globs match text), an entry the walk could not read under a glob's directory. Left
    // out, their models would silently be `removed` from the plan.
    let mut unreadable: Vec<LoadError> = Vec::new();
    let literal_dirs: Vec<String> = sets.iter().flat_map(|g| g.iter()).map(|g| literal_dir(g)).collect();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                // A hidden entry is skipped like every hidden file or directory (an editor's
                // lock link `.#a.sql`, dangling while a buffer has unsaved edits).
                if e.path().and_then(Path::file_name).is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                    continue;
                }
                // Only what may hold model files: a path a glob matches (a dangling link named
                // like a model), or a directory (not a link) under a glob's own directory. A
                // dangling `notes.txt` link or an unreadable directory elsewhere is not the
                // project's business.
                let rel = e.path().and_then(|p| p.strip_prefix(&config.root).ok()).map(Path::to_path_buf).unwrap_or_default();
                let lossy = rel.to_string_lossy().replace('\\', "/");
                let matched = matchers.iter().any(|m| m.is_match(Path::new(&lossy)));
                let is_dir = e.path().and_then(|p| fs_err::symlink_metadata(p).ok()).is_some_and(|m| m.is_dir());
                let under = literal_dirs.iter().any(|d| !d.is_empty() && (lossy.starts_with(d.as_str()) || d.starts_with(&format!("{lossy}/"))));
                if matched || (is_dir && under) {
                    unreadable.push(LoadError::new(
                        Some(crate::core::Location { file: rel, line: 0 }),
                        None,
                        format!("cannot read it while looking for model files: {e}"),
                    ));
                }
                continue;
            }
        };
        let depth = entry.depth();
        let through_link = depth > 0 && (linked.get(depth - 1).copied().unwrap_or(true) || entry.path_is_symlink());
        if entry.file_type().is_dir() {
            linked.truncate(depth);
            linked.push(through_link);
            continue;
        }
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&config.root) else { continue };
        if rel.to_str().is_none() {
            let lossy = PathBuf::from(rel.to_string_lossy().into_owned());
            if matchers.iter().any(|m| m.is_match(&lossy)) {
                unreadable.push(
                    LoadError::new(
                        Some(crate::core::Location { file: lossy, line: 0 }),
                        None,
                        "the file name is not valid UTF-8: efmesh reads model files by UTF-8 names",
                    )
                    .with_hint("rename the file (its name shown with `�` where a byte is not UTF-8)"),
                );
            }
            continue;
        }
        let hits: Vec<usize> = matchers.iter().enumerate().filter(|(_, m)| m.is_match(rel)).map(|(i, _)| i).collect();
        if hits.is_empty() {
            continue;
        }
        // A symlink may lead out of the project: model files stay inside it. A file reached
        // through no link below the root is inside it as walked; only the others are resolved.
        let real = if through_link { entry.path().canonicalize() } else { Ok(real_root.join(rel)) };
        match real {
            Ok(real) if real.starts_with(&real_root) => {
                for i in hits {
                    found[i].push(rel.to_path_buf());
                }
            }
            _ => outside.push(rel.to_path_buf()),
        }
    }
    if !unreadable.is_empty() {
        return Err(LoadErrors(unreadable));
    }
    if !outside.is_empty() {
        return Err(LoadErrors(
            outside
                .into_iter()
                .map(|f| {
                    LoadError::new(Some(crate::core::Location { file: f, line: 0 }), None, "this model file resolves outside the project (through a symlink)")
                })
                .collect(),
        ));
    }
    for files in &mut found {
        files.sort();
    }
    Ok(found)
}

/// The 1-based line of the first NUL byte (`\0`) of a model, audit or macro file's `code`, if it
/// holds one. Such a file is refused at load ([`NUL_BYTE`]): Lua keeps a NUL inside a string or
/// a comment, and the SQL reaching the engine would then be cut or fail at it, far from the file.
pub(crate) fn nul_byte_line(code: &[u8]) -> Option<u32> {
    let at = memchr::memchr(0, code)?;
    Some(u32::try_from(memchr::memchr_iter(b'\n', &code[..at]).count() + 1).unwrap_or(u32::MAX))
}

/// The load error of a file holding a NUL byte, at its line ([`nul_byte_line`]).
pub(crate) const NUL_BYTE: &str =
    "the file holds a NUL byte (`\\0`) on this line: a model file is text, and the NUL would reach the engine inside the SQL (or cut it); remove it";

/// The directory part of `glob` before its first wildcard, with a trailing `/` (`models/` of
/// `models/**/*.lua`); empty when the glob starts with one.
fn literal_dir(glob: &str) -> String {
    let head = glob.find(['*', '?', '[', '{']).map_or(glob, |i| &glob[..i]);
    head.rfind('/').map_or_else(String::new, |i| head[..=i].to_string())
}

/// Evaluates every model file `files` under `root` (no cache), each by the host of its language
/// (`.lua`, `.rhai`, `.sql`) and in isolation ([`loader`]), and merges the models. Files of
/// other extensions are errors.
///
/// # Errors
/// Every load error found (script errors, invalid specs), each with file:line, sorted.
pub fn load_models(root: &Path, files: &[PathBuf]) -> Result<Vec<Model>, LoadErrors> {
    let files = loader::Discovered { audits: Vec::new(), models: files.to_vec() };
    loader::load_models_and_tests(root, &files, &[]).map(|(models, _)| models)
}
