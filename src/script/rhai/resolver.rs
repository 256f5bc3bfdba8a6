//! `import "path" as alias`: project files only.
//!
//! A path names a `.rhai` file (the extension may be left out) relative to the importing file's
//! directory, then to the project root. Absolute paths, paths leaving the project (lexically or
//! through a symlink) and other extensions are errors. Each file is evaluated once; a file
//! imported while it is still being evaluated is an import cycle.

use super::SharedModule;
use super::{Refs, evaluate, rt};
use ::rhai::{Engine, EvalAltResult, ModuleResolver, Position};
use std::path::{Component, Path, PathBuf};

/// The engine's only module resolver.
pub(super) struct ProjectResolver {
    refs: Refs,
}

impl ProjectResolver {
    pub(super) fn new(refs: Refs) -> Self {
        Self { refs }
    }
}

impl ModuleResolver for ProjectResolver {
    fn resolve(&self, engine: &Engine, source: Option<&str>, path: &str, pos: Position) -> Result<SharedModule, Box<EvalAltResult>> {
        let at = |msg: String| {
            let mut e = rt(format!("`import \"{path}\"`: {msg}"));
            e.set_position(pos);
            e
        };
        let root = self.refs.state.borrow().root.clone();
        let importer = source.map(PathBuf::from).unwrap_or_default();
        let found = find(&root, &importer, path);
        let mut s = self.refs.state.borrow_mut();
        let (rel, probes) = match found {
            Ok(found) => found,
            Err((msg, probes)) => {
                // The paths tried are inputs even when none exists (`try { import … } catch {}`):
                // a file created there changes the result.
                if let Some(r) = s.reached.as_mut() {
                    r.probes.extend(probes);
                }
                return Err(at(msg));
            }
        };
        s.definitions.libraries.insert(rel.clone());
        if let Some(r) = s.reached.as_mut() {
            r.files.insert(rel.clone());
            r.probes.extend(probes);
        }
        drop(s);
        evaluate(engine, &self.refs, &rel).map_err(|e| {
            let mut e = e;
            // Keep the message, prefixed with the import statement, at the import's position.
            if let EvalAltResult::ErrorRuntime(msg, ..) = &*e {
                e = at(msg.to_string());
            }
            e.set_position(pos);
            e
        })
    }
}

/// Lexically normalises a relative path (`a/./b/../c` → `a/c`); `None` when it is absolute or
/// climbs above its start.
pub(super) fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The project file an import names, relative to the root, and the candidates tried before it
/// and absent (a file appearing there would change the resolution); on error, the message and
/// the candidates tried and absent.
fn find(root: &Path, importer: &Path, path: &str) -> Result<(PathBuf, Vec<PathBuf>), (String, Vec<PathBuf>)> {
    let mut absent = Vec::new();
    match find_candidate(root, importer, path, &mut absent) {
        Ok(rel) => Ok((rel, absent)),
        Err(msg) => Err((msg, absent)),
    }
}

/// [`find`]'s search; the absent candidates are pushed on `absent`.
fn find_candidate(root: &Path, importer: &Path, path: &str, absent: &mut Vec<PathBuf>) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("empty module path".into());
    }
    let p = Path::new(path);
    if p.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err("imports are paths relative to the importing file or the project root, not absolute paths".into());
    }
    let file = match p.extension().and_then(|e| e.to_str()) {
        Some("rhai") => p.to_path_buf(),
        Some(ext) => return Err(format!("efmesh imports `.rhai` files only, not `.{ext}`")),
        None => p.with_extension("rhai"),
    };
    let base = importer.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut candidates: Vec<Option<PathBuf>> = vec![normalize(&base.join(&file)), normalize(&file)];
    candidates.dedup();
    let mut escaped = false;
    for c in &candidates {
        let Some(rel) = c else {
            escaped = true;
            continue;
        };
        let full = root.join(rel);
        if !full.is_file() {
            absent.push(rel.clone());
            continue;
        }
        // Stay inside the project even through symlinks.
        let real = full.canonicalize().map_err(|e| format!("cannot resolve `{}`: {e}", rel.display()))?;
        let real_root = root.canonicalize().map_err(|e| format!("cannot resolve the project root: {e}"))?;
        if !real.starts_with(&real_root) {
            return Err(format!("`{}` resolves outside the project", rel.display()));
        }
        return Ok(rel.clone());
    }
    if escaped {
        return Err("the path leaves the project".into());
    }
    let tried = candidates.iter().flatten().map(|c| format!("`{}`", c.display())).collect::<Vec<_>>().join(" or ");
    Err(format!("no file {tried} in the project"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_refuses_escapes() {
        assert_eq!(normalize(Path::new("a/./b/../c.rhai")), Some(PathBuf::from("a/c.rhai")));
        assert_eq!(normalize(Path::new("../x.rhai")), None);
        assert_eq!(normalize(Path::new("/etc/passwd")), None);
    }

    #[test]
    fn finds_next_to_the_importer_then_at_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs_err::create_dir_all(root.join("models/med")).unwrap();
        fs_err::write(root.join("models/med/near.rhai"), "").unwrap();
        fs_err::write(root.join("top.rhai"), "").unwrap();
        let importer = Path::new("models/med/a.rhai");
        assert_eq!(find(root, importer, "near").unwrap(), (PathBuf::from("models/med/near.rhai"), vec![]));
        assert_eq!(find(root, importer, "top.rhai").unwrap(), (PathBuf::from("top.rhai"), vec![PathBuf::from("models/med/top.rhai")]));
        assert_eq!(find(root, importer, "../med/near").unwrap().0, PathBuf::from("models/med/near.rhai"));
        assert!(find(root, importer, "data.csv").unwrap_err().0.contains("`.rhai` files only"));
        assert!(find(root, importer, "/etc/passwd").unwrap_err().0.contains("not absolute"));
        assert!(find(root, importer, "../../../etc/x").unwrap_err().0.contains("leaves the project"));
        let (msg, tried) = find(root, importer, "missing").unwrap_err();
        assert!(msg.contains("no file `models/med/missing.rhai` or `missing.rhai`"), "{msg}");
        assert_eq!(tried, vec![PathBuf::from("models/med/missing.rhai"), PathBuf::from("missing.rhai")], "a missing import records what it tried");
    }
}
