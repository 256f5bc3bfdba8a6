//! Signals: `define_signal("name", function(intervals, args, db) … end)` in a macro file
//! (`[project] macros`), used by an `incremental_by_time_range` model's `signals`, say which of
//! the model's candidate intervals are ready to be computed (sqlmesh's signals). `efmesh run`
//! asks them before computing missing intervals; `efmesh status` asks them to tell a model
//! waiting on a signal from a late one.
//!
//! A signal runs in the sandbox of macro files (no clock, no I/O, no randomness) on its
//! language's definition interpreter ([`super::foreign::Foreign`]), under
//! [`super::foreign::SIGNAL_BUDGET`]. It receives the intervals (a list of `{start, end}`,
//! ISO-8601 UTC, `[start, end)`), its named arguments, and a handle `db` whose `db.query(sql)`
//! runs one read-only statement on the engine (answered on the calling thread by the caller's
//! closure) and returns its rows, each a list of values as text (`nil`/`()` for NULL). It
//! returns a boolean (every interval) or a list of booleans, one per interval.

use super::foreign::{Definable, Foreign, Rows};
use crate::config::Config;
use crate::core::{Interval, LoadError, Location, Model};
use std::sync::Arc;

/// The message for `define_signal` outside a definition file.
pub(crate) const DEFINITION_FILES: &str =
    "`define_signal` belongs in macro files (`[project] macros`, default `macros/**/*.{lua,rhai}`), evaluated before every model file";

/// `define_signal`.
pub(crate) static SIGNAL: Definable = Definable {
    function: "define_signal",
    noun: "signal",
    outside: DEFINITION_FILES,
    check_name,
    duplicate,
    lua: ["define_signal(\"file_exists\", function(intervals, args, db) … end)", "a function(intervals, args, db)"],
    rhai: ["define_signal(\"file_exists\", |intervals, args, db| …)", "a closure |intervals, args, db|"],
};

/// A signal's name: an identifier.
fn check_name(name: &str) -> Result<(), String> {
    if crate::core::name::is_identifier(name) { Ok(()) } else { Err(format!("signal name `{name}` must be an identifier (`[A-Za-z_][A-Za-z0-9_]*`)")) }
}

/// A duplicate signal in one language.
pub(crate) fn duplicate(name: &str, first: &Location, at: &Location) -> LoadError {
    LoadError::new(Some(at.clone()), None, format!("signal `{name}` is already defined (defined at {first})")).with_hint("give the signal another name")
}

/// The signals of a loaded project, ready to be evaluated (interpreters start on first use).
pub struct Signals {
    foreign: Arc<Foreign>,
}

impl Signals {
    /// The signals defined by the definition files of `config`'s project.
    ///
    /// # Errors
    /// When the definition files cannot be discovered.
    pub fn of(config: &Config) -> Result<Signals, crate::core::LoadErrors> {
        let files = super::loader::Discovered::of(config)?;
        Ok(Signals { foreign: Arc::new(Foreign::new(&config.root, &files.audits)) })
    }

    /// Which of `intervals` every signal of `model` says are ready (all of them when it has
    /// none); `query` answers the signals' read-only queries.
    ///
    /// # Errors
    /// The first signal that failed: its message names the signal, where it is defined, and
    /// the model and where it uses it.
    pub fn ready(&self, model: &Model, intervals: &[Interval], query: &mut dyn FnMut(&str) -> Result<Rows, String>) -> Result<Vec<bool>, String> {
        let mut ready = vec![true; intervals.len()];
        for s in &model.signals {
            // Only the intervals every earlier signal found ready are asked about.
            let asked: Vec<usize> = (0..intervals.len()).filter(|&i| ready[i]).collect();
            if asked.is_empty() {
                break;
            }
            let spans = asked.iter().map(|&i| (crate::core::interval::to_iso(intervals[i].start), crate::core::interval::to_iso(intervals[i].end))).collect();
            let verdicts =
                self.foreign.call_signal(&s.name, spans, s.args_map(), query).map_err(|e| format!("model `{}` ({}): {e}", model.name, s.location))?;
            for (k, &i) in asked.iter().enumerate() {
                ready[i] = verdicts[k];
            }
        }
        Ok(ready)
    }
}
