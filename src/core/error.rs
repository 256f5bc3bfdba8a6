//! Load-time diagnostics: what is wrong, in which model, at which file:line, with a hint.
//!
//! Messages follow `STYLE.md`: no trailing period, names in backticks, an optional `hint:` line.

use super::model::Location;
use super::name::ModelName;

/// One problem found while loading or validating a project.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadError {
    /// Where it is (file:line), when known.
    pub location: Option<Location>,
    /// The model at fault, when known.
    pub model: Option<ModelName>,
    /// What is wrong, naming the culprit.
    pub message: String,
    /// A suggestion (e.g. "did you mean `med.moves`?").
    pub hint: Option<String>,
    /// The model property at fault (`kind`, `cron`…), when one is: a `.sql` model places the
    /// error at that property's header line.
    pub field: Option<&'static str>,
    /// The script's call stack when the error is a Lua or Rhai one (Lua's `stack traceback:`
    /// and its frames, Rhai's `at file:line:col` lines): kept out of `message`, which is the
    /// error itself, so every report shows one line per error. `check --json` gives it as
    /// `"traceback"`; the load logs it at debug level.
    pub traceback: Option<String>,
}

/// What starts the call stack Lua appends to an error's text (`luaL_traceback`, called by
/// mlua's and efmesh's message handlers): everything from there on is the traceback.
const LUA_TRACEBACK: &str = "\nstack traceback:";

impl LoadError {
    /// A diagnostic with a location and message (a word of it longer than [`MAX_WORD`]
    /// characters cut: [`bounded_words`]). A Lua traceback in `message` (from its
    /// `\nstack traceback:` on) goes to [`LoadError::traceback`], wherever the error was made
    /// (a file's evaluation, a macro call, an audit body).
    pub fn new(location: Option<Location>, model: Option<ModelName>, message: impl Into<String>) -> Self {
        let mut message = message.into();
        let traceback = message.find(LUA_TRACEBACK).map(|at| {
            let traceback = message[at + 1..].to_string();
            message.truncate(at);
            traceback
        });
        Self { location, model, message: bounded_words(message), hint: None, field: None, traceback: traceback.map(bounded_words) }
    }

    /// Sets the script's call stack ([`LoadError::traceback`]; `None` when `traceback` is empty).
    pub fn with_traceback(mut self, traceback: impl Into<String>) -> Self {
        let traceback = traceback.into();
        self.traceback = (!traceback.is_empty()).then(|| bounded_words(traceback));
        self
    }

    /// Names the model property at fault.
    pub fn in_field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    /// Adds a hint line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(bounded_words(hint.into()));
        self
    }
}

/// Characters of one word of a message (a run without whitespace) shown in full
/// ([`bounded_words`]): above any path or name a user writes (a path quoted in a message stays
/// whole), far below what a macro's output can be.
pub const MAX_WORD: usize = 1024;

/// `s`, or when it has more than `max_chars` characters its first `max_chars` followed by
/// `… (N bytes)`, N being `bytes` (the length of the text `s` stands for): an error quoting
/// text it did not write — a macro's output, an identifier taken from it — stays readable.
pub fn excerpt(s: &str, max_chars: usize, bytes: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((cut, _)) => format!("{}… ({bytes} bytes)", &s[..cut]),
    }
}

/// `message` with each word (a run without whitespace) longer than [`MAX_WORD`] characters
/// cut: its first [`MAX_WORD`] characters, `…`, the punctuation that closed it (a backtick, a
/// quote, a parenthesis) and how long it was — `` column `xxxx…` (62914563 bytes) cannot be
/// resolved ``. A macro returning megabytes would otherwise have each error quoting a name
/// from its output (the column check's, the engine's) paste all of it. Unchanged when no word
/// is that long (the usual case: one pass over the message).
pub fn bounded_words(message: String) -> String {
    use std::fmt::Write as _;
    if message.split_whitespace().all(|w| w.len() <= MAX_WORD) {
        return message;
    }
    let mut out = String::with_capacity(message.len().min(4 * MAX_WORD));
    for piece in message.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end_matches(char::is_whitespace);
        let space = &piece[word.len()..];
        let Some((cut, _)) = word.char_indices().nth(MAX_WORD) else {
            out.push_str(piece);
            continue;
        };
        // The closing punctuation, kept: `` `name` `` stays quoted.
        let body = word.trim_end_matches(['`', '\'', '"', ')', ']', '}', ',', ';', ':', '.']);
        let close = &word[body.len()..];
        let cut = cut.min(body.len());
        out.push_str(&word[..cut]);
        out.push('…');
        out.push_str(close);
        let _ = write!(out, " ({} bytes)", word.len());
        out.push_str(space);
    }
    out
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{loc}: ")?;
        }
        if let Some(m) = &self.model {
            write!(f, "model `{m}`: ")?;
        }
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Every problem found in one load, sorted by location.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct LoadErrors(pub Vec<LoadError>);

impl std::fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.len();
        write!(f, "project failed to load ({n} error{})", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n{e}")?;
        }
        Ok(())
    }
}

/// The closest candidate by edit distance, if it is close enough to be a plausible typo.
pub fn did_you_mean<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        // A name differing only in case is the one meant, however long.
        if c.to_lowercase() == wanted.to_lowercase() {
            return Some(c);
        }
        let d = levenshtein(wanted, c);
        if best.is_none_or(|(bd, bc)| d < bd || (d == bd && c < bc)) {
            best = Some((d, c));
        }
    }
    let limit = (wanted.chars().count() / 3).max(2);
    best.filter(|(d, _)| *d <= limit).map(|(_, c)| c)
}

pub(crate) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_word_of_a_message_is_cut_keeping_its_quotes() {
        let long = "x".repeat(70_000);
        let e = LoadError::new(None, None, format!("column `{long}` cannot be resolved: the query reads no relation"));
        assert_eq!(e.message, format!("column `{}…` (70002 bytes) cannot be resolved: the query reads no relation", "x".repeat(MAX_WORD - 1)));
        let e = e.with_hint(format!("try {long}"));
        assert_eq!(e.hint.as_deref(), Some(format!("try {}… (70000 bytes)", "x".repeat(MAX_WORD)).as_str()));
        // Short words, multi-byte ones included, and whitespace are kept as they are.
        let short = format!("a\n  `{}` b", "é".repeat(MAX_WORD - 2));
        assert_eq!(bounded_words(short.clone()), short);
        assert_eq!(excerpt("abcdef", 3, 60), "abc… (60 bytes)");
        assert_eq!(excerpt("abc", 3, 3), "abc");
    }

    #[test]
    fn a_lua_traceback_is_kept_apart_from_the_message() {
        let e = LoadError::new(None, None, "runtime error: boom\nstack traceback:\n\t[C]: in function 'error'\n\tmodels/x.lua:1: in main chunk");
        assert_eq!(e.message, "runtime error: boom");
        assert_eq!(e.traceback.as_deref(), Some("stack traceback:\n\t[C]: in function 'error'\n\tmodels/x.lua:1: in main chunk"));
        // The report shows the error, not its call stack.
        let located = LoadError { location: Some(Location { file: "models/x.lua".into(), line: 1 }), ..e };
        assert_eq!(located.to_string(), "models/x.lua:1: runtime error: boom");
        // A message of several lines without one keeps them all.
        let e = LoadError::new(None, None, "a\nb");
        assert_eq!((e.message.as_str(), e.traceback.as_deref()), ("a\nb", None));
        assert_eq!(LoadError::new(None, None, "x").with_traceback("at models/x.rhai:1:2").traceback.as_deref(), Some("at models/x.rhai:1:2"));
        assert_eq!(LoadError::new(None, None, "x").with_traceback("").traceback, None);
    }

    #[test]
    fn suggests_close_names_only() {
        let names = ["med.moves", "med.stays", "raw.moves"];
        assert_eq!(did_you_mean("med.mvoes", names), Some("med.moves"));
        assert_eq!(did_you_mean("med.stay", names), Some("med.stays"));
        assert_eq!(did_you_mean("totally.else", names), None);
        // A name differing only in case, however far in edits, before a closer other one.
        assert_eq!(did_you_mean("AMOUNT", ["amount", "count", "AMOUNTS"]), Some("amount"));
        assert_eq!(did_you_mean("Id", ["ad", "id"]), Some("id"));
    }
}
