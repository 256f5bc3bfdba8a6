//! Sandbox rules shared by the Lua and Rhai hosts: the cap on what a model file may print (and
//! on the message of an error a script raises), and the rule that every file of the model globs
//! defines something.

use crate::core::{LoadError, Location, Model};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Bytes one file may print (`print`, and Rhai's `debug`) before the rest is suppressed.
pub const MAX_PRINT_BYTES: usize = 8 * 1024;
/// Lines one file may print before the rest is suppressed.
pub const MAX_PRINT_LINES: usize = 200;

/// Bytes of a script's error message that reach efmesh's report (stderr, `--json`): as many as
/// a file may print ([`MAX_PRINT_BYTES`]); `error(string.rep("x", 10 * 2^20))` must not write
/// 10 MB.
pub const MAX_ERROR_BYTES: usize = MAX_PRINT_BYTES;

/// `msg` cut to [`MAX_ERROR_BYTES`] (at a character boundary), saying it was cut and how long
/// it was; unchanged when it fits.
pub fn capped_message(msg: String) -> String {
    if msg.len() <= MAX_ERROR_BYTES {
        return msg;
    }
    let cut = (0..=MAX_ERROR_BYTES).rev().find(|&i| msg.is_char_boundary(i)).unwrap_or(0);
    format!("{}… (error message cut: {} bytes, of which a report shows the first {MAX_ERROR_BYTES})", &msg[..cut], msg.len())
}

#[derive(Debug, Default)]
struct Printed {
    bytes: usize,
    lines: usize,
    suppressed: bool,
}

/// What each file printed so far; logs on stderr (never stdout) within the caps, then one line
/// saying the rest is suppressed.
#[derive(Debug, Default)]
pub struct PrintCap {
    per_file: HashMap<PathBuf, Printed>,
}

impl PrintCap {
    /// Logs `text`, printed by `file` (at `line` when known), unless the file's quota is spent.
    pub fn print(&mut self, file: &Path, line: Option<usize>, text: &str) {
        let p = self.per_file.entry(file.to_path_buf()).or_default();
        if p.suppressed {
            return;
        }
        let bytes_left = MAX_PRINT_BYTES.saturating_sub(p.bytes);
        let lines_left = MAX_PRINT_LINES.saturating_sub(p.lines);
        let n_lines = text.lines().count().max(1);
        if text.len() <= bytes_left && n_lines <= lines_left {
            p.bytes += text.len();
            p.lines += n_lines;
            tracing::info!(file = %file.display(), line, "{text}");
            return;
        }
        // What still fits, cut at a line and a character boundary, then the notice.
        let mut cut = 0;
        for (i, l) in text.split_inclusive('\n').enumerate() {
            if i >= lines_left || cut + l.len() > bytes_left {
                break;
            }
            cut += l.len();
        }
        if cut == 0 && lines_left > 0 {
            cut = (0..=bytes_left.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        }
        if cut > 0 {
            tracing::info!(file = %file.display(), line, "{}", text[..cut].trim_end_matches('\n'));
        }
        p.suppressed = true;
        tracing::warn!(
            file = %file.display(),
            "{}: further output suppressed (a model file may print {MAX_PRINT_LINES} lines or {MAX_PRINT_BYTES} bytes)",
            file.display()
        );
    }
}

/// Which files defined something during a load, and which are libraries.
#[derive(Debug, Default)]
pub struct Definitions {
    /// Files another file required or imported.
    pub libraries: HashSet<PathBuf>,
    /// Files that called `define_model` or `define_audit` while being evaluated.
    pub defining: HashSet<PathBuf>,
}

/// The load errors for top-level files (matched by the model, audit or macro globs) that define
/// nothing: evaluated without error, called none of the `define_…` functions its kind of file is
/// for, and not a library another top-level file (model, audit or test file) reached through
/// `require` / `import`. `outcomes` are every top-level file's, cached or evaluated;
/// `definitions` the definition files among them (audit and macro globs): told what such a file
/// is for, not to define a model.
pub fn idle_errors<'a>(outcomes: impl Iterator<Item = &'a FileOutcome> + Clone, definitions: &[PathBuf]) -> Vec<LoadError> {
    let libraries: HashSet<&Path> = outcomes.clone().flat_map(|o| o.reached.iter().map(PathBuf::as_path)).collect();
    outcomes
        .filter(|o| !o.failed && !o.defines && !libraries.contains(o.file.as_path()))
        .map(|o| {
            let location = Some(Location { file: o.file.clone(), line: 0 });
            if definitions.contains(&o.file) {
                return LoadError::new(
                    location,
                    None,
                    "this definition file defines nothing: it never called `define_macro`, `define_audit` or `define_signal`, and no other file requires or imports it",
                )
                .with_hint(
                    "a file matched by `project.macros` or `project.audits` must define a macro, an audit or a signal, or be a library another file \
                     `require`s / `import`s; delete it if it is empty, or move it out of those globs",
                );
            }
            LoadError::new(location, None, "this file defines no model: it never called `define_model` (or `define_audit`), and no other file requires or imports it")
                .with_hint(
                    "a file matched by `project.models` must define a model, or be a library another model file `require`s / `import`s; \
                     check that the file does not shadow `define_model` with a function or variable of its own",
                )
        })
        .collect()
}

/// What evaluating one top-level file (with what it requires or imports, evaluated for it
/// alone) produced: the unit the loader caches and re-evaluates.
#[derive(Debug, Clone, Default)]
pub struct FileOutcome {
    /// The top-level file, relative to the project root.
    pub file: PathBuf,
    /// The models defined during its evaluation (also those a required module defines).
    pub models: Vec<Model>,
    /// Every project file reached through `require` / `import`, transitively.
    pub reached: BTreeSet<PathBuf>,
    /// Candidate paths `require` / `import` looked for and did not find before the file it
    /// resolved to: a file appearing there would change the resolution.
    pub probes: BTreeSet<PathBuf>,
    /// blake3 of the exact bytes evaluated, for the file and each file it reached: the load
    /// cache keys an entry by these, never by a later read.
    pub hashes: BTreeMap<PathBuf, [u8; 32]>,
    /// It called `define_model` / `define_audit` (itself or through what it reached).
    pub defines: bool,
    /// Its evaluation recorded an error (never cached).
    pub failed: bool,
}

/// Files reached by the top-level evaluation in progress.
#[derive(Debug, Default)]
pub struct Reached {
    /// Files resolved by `require` / `import`.
    pub files: BTreeSet<PathBuf>,
    /// Candidates tried and absent.
    pub probes: BTreeSet<PathBuf>,
    /// blake3 of the bytes evaluated, per file (the top-level file and every module).
    pub hashes: BTreeMap<PathBuf, [u8; 32]>,
}

impl Reached {
    /// Records that `rel` was evaluated from bytes whose blake3 is `hash`.
    pub fn evaluated(&mut self, rel: &Path, hash: [u8; 32]) {
        self.hashes.insert(rel.to_path_buf(), hash);
    }

    /// Records that `rel`'s value is reused from an earlier evaluation (a module an audit
    /// definition file required, kept for every model file) from bytes whose blake3 was `hash`:
    /// the load cache keys the requiring file by those bytes, as if it had evaluated them.
    pub fn reused(&mut self, rel: &Path, hash: [u8; 32]) {
        self.hashes.entry(rel.to_path_buf()).or_insert(hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message within the cap is kept; a longer one is cut at the cap, at a character
    /// boundary, and says it was cut.
    #[test]
    fn error_messages_are_capped_and_say_so() {
        assert_eq!(capped_message("boom".into()), "boom");
        let long = "é".repeat(MAX_ERROR_BYTES);
        let capped = capped_message(long.clone());
        assert!(capped.len() < MAX_ERROR_BYTES + 200, "{}", capped.len());
        assert!(capped.starts_with(&long[..MAX_ERROR_BYTES]), "cut at the cap");
        assert!(
            capped.ends_with(&format!("(error message cut: {} bytes, of which a report shows the first {MAX_ERROR_BYTES})", long.len())),
            "{}",
            &capped[MAX_ERROR_BYTES..]
        );
    }
}
