//! `efmesh init [dir]`: a scaffold that plans and applies as is.

use super::Exit;
use super::printer::Printer;
use anyhow::{Result, bail};
use std::path::Path;

const FILES: &[(&str, &str)] = &[
    ("efmesh.toml", include_str!("../../stdlib/scaffold/efmesh.toml")),
    ("data/events.csv", include_str!("../../stdlib/scaffold/data/events.csv")),
    ("models/raw.lua", include_str!("../../stdlib/scaffold/models/raw.lua")),
    ("models/mart.lua", include_str!("../../stdlib/scaffold/models/mart.lua")),
    (".gitignore", include_str!("../../stdlib/scaffold/gitignore")),
    // Editor support: LuaLS reads `.luarc.json`, which points at the shipped type definitions.
    (".luarc.json", include_str!("../../stdlib/scaffold/luarc.json")),
    (".efmesh/lua/efmesh.d.lua", include_str!("../../stdlib/lua/efmesh.d.lua")),
];

/// Writes the scaffold into `dir`; writes nothing when any file already exists.
pub fn run(dir: &Path, out: &Printer) -> Result<Exit> {
    for (rel, _) in FILES {
        let p = dir.join(rel);
        if p.exists() {
            bail!("`{}` already exists: init overwrites nothing\n  hint: run `efmesh init <new-dir>`", p.display());
        }
    }
    let mut report = String::new();
    for (rel, content) in FILES {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            fs_err::create_dir_all(parent)?;
        }
        fs_err::write(&p, content)?;
        report.push_str(&format!("created {}\n", p.display()));
    }
    let cd = if dir == Path::new(".") { String::new() } else { format!("cd {} && ", shell_quoted(&dir.display().to_string())) };
    report.push_str(&format!("next: {cd}efmesh plan dev && efmesh apply dev\n"));
    out.text(&report)?;
    Ok(Exit::Success)
}

/// `path` as one shell word (quoted when a shell would split or expand it), so the `next:` line
/// can be pasted.
fn shell_quoted(path: &str) -> String {
    shlex::try_quote(path).map_or_else(|_| path.to_string(), |q| q.into_owned())
}

#[cfg(test)]
mod tests {
    use super::shell_quoted;

    #[test]
    fn the_next_line_quotes_a_directory_a_shell_would_split() {
        assert_eq!(shell_quoted("my-proj/v1.2"), "my-proj/v1.2");
        for dir in ["bad dir", "it's $HOME", "a\"b"] {
            let quoted = shell_quoted(dir);
            assert_ne!(quoted, dir);
            assert_eq!(shlex::split(&quoted), Some(vec![dir.to_string()]), "{quoted}");
        }
    }
}
