//! Macros: `@name(arg, …)` in the query text of any model (`.sql`, Lua, Rhai) calls a function
//! defined with `define_macro` in a macro file (`[project] macros`, default
//! `macros/**/*.{lua,rhai}`), and is replaced by the SQL text it returns — at load time, in the
//! sandbox, before the query is parsed. The rendered SQL is what the builder parses and what is
//! fingerprinted: a macro edit changes exactly the models whose rendered SQL changes.
//!
//! This module finds the calls and splits their arguments; the call itself goes through
//! [`super::foreign::Foreign`] to the interpreter of the macro's language.
//!
//! # What a macro receives
//!
//! Each argument is the text written between the call's top-level commas (commas inside
//! parentheses, brackets, braces, string literals, quoted identifiers and comments do not
//! split), with surrounding whitespace trimmed, as a string: `@m(amount, 'EUR', round(x, 2))`
//! passes `"amount"`, `"'EUR'"` and `"round(x, 2)"`. A macro call inside an argument is expanded
//! first (`@a(@b(x))` passes what `@b(x)` returned). `@m()` passes no argument; an empty
//! argument (`@m(a,)`) is an error. What the macro returns (a string) replaces the call as is
//! (followed by a newline when it ends in a `--` line comment, which would otherwise swallow the
//! rest of the calling line); it is not scanned for macro calls again.

use super::foreign::Foreign;
use crate::core::fragment::skip_literal_or_comment;
use crate::core::{LoadError, Location};

/// Names efmesh gives a meaning after `@`: never macro names.
/// (`crate::core::fragment::Bound::ALL` lists the bound forms; a unit test keeps them here.)
pub const RESERVED: &[&str] = &["ref", "start", "end", "start_date", "end_date", "start_ds", "end_ds", "start_ts", "end_ts", "this_model", "this"];

/// Why a macro call failed, in words for a load error at the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The message (naming the macro, and where it is defined when known).
    pub message: String,
    /// A hint (a "did you mean").
    pub hint: Option<String>,
}

impl Failure {
    /// A failure without a hint.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), hint: None }
    }
}

/// The error of a model-definition function (`ref`, `cols`, `define_model`) called while a macro
/// runs: a macro is evaluated in the interpreter of the macro files, not in the calling model's,
/// so a reference it made would be resolved against the caller's own references (another model,
/// read silently). Its SQL must come from its arguments alone: `@m(@ref(s.t))`.
pub fn not_in_macros(function: &str) -> String {
    let instead = match function {
        "ref" => "pass `@ref(model)` as an argument instead",
        "cols" => "pass the columns (and `@ref(model)`) as arguments instead",
        // One defined by a call would outlive it: later audit uses would depend on the call.
        "define_audit" => "audits are defined at the top of audit or macro files",
        _ => "models are defined in model files",
    };
    format!("`{function}()` is not available in macros: {instead}")
}

/// Something that runs a macro by name with its arguments.
pub trait Caller {
    /// Runs macro `name` with `args`.
    ///
    /// # Errors
    /// An unknown macro, a wrong arity, a macro raising an error or returning a non-string.
    fn call(&self, name: &str, args: Vec<String>) -> Result<String, Failure>;
}

impl Caller for Foreign {
    fn call(&self, name: &str, args: Vec<String>) -> Result<String, Failure> {
        self.call_macro(name, args)
    }
}

/// The first macro call left in `sql`, a macro's output (outside literals and comments): it is
/// not expanded again, and the engine would read what is left (`@greatest(…)` is DuckDB's
/// `abs(greatest(…))`); in a model's own text the same call is a macro call (or an unknown one).
fn call_left_in(sql: &str) -> Option<String> {
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        if let Some((name_end, _)) = call_head(b, i) {
            let name = &sql[i + 1..name_end];
            // `@ref(…)` is read from the model's text before macros run: in a macro's output it
            // would reach the engine as written.
            if !RESERVED.contains(&name) || name == "ref" {
                return Some(name.to_string());
            }
            i = name_end;
            continue;
        }
        i += 1;
    }
    None
}

/// Whether `sql` (a macro's output) ends inside a line comment: a `--` outside string literals,
/// quoted identifiers and block comments with no newline after it.
fn ends_in_line_comment(sql: &str) -> bool {
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match skip_literal_or_comment(b, i) {
            Some(end) if end >= b.len() => return b[i] == b'-',
            Some(end) => i = end.max(i + 1),
            None => i += 1,
        }
    }
    false
}

/// No macro is defined.
struct Nothing;

impl Caller for Nothing {
    fn call(&self, name: &str, _args: Vec<String>) -> Result<String, Failure> {
        Err(Failure { message: format!("unknown macro `@{name}`"), hint: Some(no_macro_hint()) })
    }
}

/// The hint for an unknown macro without a close name.
pub fn no_macro_hint() -> String {
    "define it with `define_macro(\"name\", function …)` in a file under `macros/` (`[project] macros`)".into()
}

/// Whether `text` may hold a macro call (a cheap test before [`expand`]).
pub fn may_call(text: &str) -> bool {
    memchr::memchr(b'@', text.as_bytes()).is_some()
}

/// Expands the macro calls of a Lua or Rhai model: its `query` (returned, with the
/// [`SourceMap`] back to the text the script built, which places its lines in the file:
/// [`super::builder::script_query_lines`]) and its pre/post statement strings (in `spec`,
/// [`expand_statements`]); every call's errors at `location`.
///
/// # Errors
/// Every failed call, the query's first.
pub fn expand_model(
    query: Option<String>,
    spec: &mut serde_json::Map<String, serde_json::Value>,
    foreign: Option<&Foreign>,
    location: &Location,
) -> Result<(Option<String>, SourceMap), Vec<LoadError>> {
    let mut errors = Vec::new();
    let (query, map) = match query {
        Some(q) if may_call(&q) => match expand_mapped(&q, foreign, &|_| location.clone()) {
            Ok((q, map)) => (Some(q), map),
            Err(e) => {
                errors.extend(e);
                (None, SourceMap::default())
            }
        },
        q => (q, SourceMap::default()),
    };
    errors.extend(expand_statements(spec, foreign, location));
    if errors.is_empty() { Ok((query, map)) } else { Err(errors) }
}

/// Expands, in place, the macro calls of a Lua or Rhai model's `pre_statements` and
/// `post_statements` strings in its `spec` (a `.sql` model's statements are expanded with its
/// body); every call's errors are at `location` (the `define_model` call).
fn expand_statements(spec: &mut serde_json::Map<String, serde_json::Value>, foreign: Option<&Foreign>, location: &Location) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for key in ["pre_statements", "post_statements"] {
        // A list of statements, or one statement as a string.
        let items: Vec<&mut serde_json::Value> = match spec.get_mut(key) {
            Some(serde_json::Value::Array(items)) => items.iter_mut().collect(),
            Some(one @ serde_json::Value::String(_)) => vec![one],
            _ => continue,
        };
        for item in items {
            if let serde_json::Value::String(text) = item
                && may_call(text)
            {
                match expand(text, foreign, &|_| location.clone()) {
                    Ok(t) => *text = t,
                    Err(e) => errors.extend(e),
                }
            }
        }
    }
    errors
}

/// Expands every macro call of `text`; `at(offset)` is the location of a call starting at byte
/// `offset` of `text` (the calling file:line).
///
/// # Errors
/// Every failed call (unknown macro, arity, error raised, non-string result) and every
/// malformed call (no closing parenthesis, an empty argument), each at its call.
pub fn expand(text: &str, foreign: Option<&Foreign>, at: &dyn Fn(usize) -> Location) -> Result<String, Vec<LoadError>> {
    if !may_call(text) {
        return Ok(text.to_string());
    }
    let caller: &dyn Caller = match foreign {
        Some(f) => f,
        None => &Nothing,
    };
    expand_with(text, caller, at)
}

/// Where the text [`expand_mapped`] returns came from: for each run of its output, its start
/// and the offset in the input it starts at, and whether it is a macro's expansion (every
/// offset in it maps to its call's `@`) or text copied as is.
#[derive(Debug, Clone, Default)]
pub struct SourceMap(Vec<(usize, usize, bool)>);

impl SourceMap {
    /// The input offset of output offset `off`: the same character for copied text, the call's
    /// `@` inside an expansion.
    pub fn input_offset(&self, off: usize) -> usize {
        match self.0.partition_point(|(out, _, _)| *out <= off).checked_sub(1).map(|k| self.0[k]) {
            Some((out, input, false)) => input + (off - out),
            Some((_, input, true)) => input,
            None => off,
        }
    }
}

/// [`expand`], with the [`SourceMap`] from the expanded text back to `text`: a multi-line
/// expansion shifts nothing that follows it when located through the map.
///
/// # Errors
/// As [`expand`].
pub fn expand_mapped(text: &str, foreign: Option<&Foreign>, at: &dyn Fn(usize) -> Location) -> Result<(String, SourceMap), Vec<LoadError>> {
    if !may_call(text) {
        return Ok((text.to_string(), SourceMap::default()));
    }
    let caller: &dyn Caller = match foreign {
        Some(f) => f,
        None => &Nothing,
    };
    let mut errors = Vec::new();
    let mut map = vec![(0, 0, false)];
    let out = expand_from(text, 0, caller, at, &mut errors, Some(&mut map));
    if errors.is_empty() { Ok((out, SourceMap(map))) } else { Err(errors) }
}

/// [`expand`] with any [`Caller`].
///
/// # Errors
/// As [`expand`].
pub fn expand_with(text: &str, caller: &dyn Caller, at: &dyn Fn(usize) -> Location) -> Result<String, Vec<LoadError>> {
    let mut errors = Vec::new();
    let out = expand_from(text, 0, caller, at, &mut errors, None);
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The macro name of a call starting at `i` (`@name(`), and the index of its `(`.
fn call_head(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if b.get(i) != Some(&b'@') || !b.get(i + 1).copied().is_some_and(is_ident_start) {
        return None;
    }
    if i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b'@') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() && is_ident(b[j]) {
        j += 1;
    }
    (b.get(j) == Some(&b'(')).then_some((j, j))
}

/// `map`, when given, gets the [`SourceMap`] runs of the output (the calls of `text`, not of
/// their arguments).
fn expand_from(
    text: &str,
    base: usize,
    caller: &dyn Caller,
    at: &dyn Fn(usize) -> Location,
    errors: &mut Vec<LoadError>,
    mut map: Option<&mut Vec<(usize, usize, bool)>>,
) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        let Some((name_end, open)) = call_head(b, i) else {
            i += 1;
            continue;
        };
        let name = &text[i + 1..name_end];
        if RESERVED.contains(&name) {
            i = name_end;
            continue;
        }
        let (args, close) = match split_args(text, open + 1) {
            Ok(x) => x,
            Err(msg) => {
                errors.push(LoadError::new(Some(at(base + i)), None, format!("macro call `@{name}(`: {msg}")));
                return out;
            }
        };
        out.push_str(&text[copied..i]);
        if let Some(m) = map.as_deref_mut() {
            m.push((out.len(), base + i, true));
        }
        let before = errors.len();
        let args: Vec<String> = args.into_iter().map(|(a, off)| expand_from(a, base + off, caller, at, errors, None)).collect();
        if errors.len() == before {
            let passed = args.concat();
            match caller.call(name, args) {
                Ok(sql) if call_left_in(&sql).as_deref() == Some("ref") => errors.push(
                    LoadError::new(Some(at(base + i)), None, format!("macro `@{name}` returned `@ref(…)`, which is not resolved in a macro's output: the engine would read it as SQL"))
                        .with_hint(format!("write `@ref(…)` in the model and pass it to `@{name}` as an argument (`@{name}(@ref(s.t))`): it is resolved there")),
                ),
                Ok(sql) if let Some(inner) = call_left_in(&sql) => errors.push(
                    LoadError::new(Some(at(base + i)), None, format!("macro `@{name}` returned a macro call `@{inner}(…)`, which is not expanded again: the engine would read it as SQL (DuckDB: `abs({inner}(…))`)"))
                        .with_hint(format!("call `@{inner}` in the model and pass its result to `@{name}` as an argument, or have `@{name}` compute the SQL itself")),
                ),
                Ok(sql) if foreign_reference(&sql, &passed) => errors.push(
                    LoadError::new(Some(at(base + i)), None, format!("macro `@{name}` returned a reference to a model it was not given as an argument (one its file made with `ref()` outside its function, or a forged one): it would read another model of the calling one"))
                        .with_hint(format!("write `@ref(…)` in the model and pass it to `@{name}` as an argument (`@{name}(@ref(s.t))`): a macro's output may only hold the references it was given")),
                ),
                Ok(sql) => {
                    out.push_str(&sql);
                    // An output ending in a line comment (`status = 'paid' -- settled`) would
                    // swallow the rest of the calling line (`AND amount > 500`): the newline ends
                    // the comment there. Inside the expansion's source-map run, so nothing after
                    // it moves.
                    if ends_in_line_comment(&sql) && b.get(close + 1) != Some(&b'\n') {
                        out.push('\n');
                    }
                }
                Err(f) => {
                    let mut e = LoadError::new(Some(at(base + i)), None, f.message);
                    if let Some(h) = f.hint {
                        e = e.with_hint(h);
                    }
                    errors.push(e);
                }
            }
        }
        i = close + 1;
        copied = i;
        if let Some(m) = map.as_deref_mut() {
            m.push((out.len(), base + i, false));
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The arguments of a call whose `(` is just before `from`: each trimmed, with its offset in
/// `text`; and the index of the closing `)`.
/// Arguments of a call (text, offset) and the index of its `)`.
type Args<'a> = (Vec<(&'a str, usize)>, usize);

fn split_args(text: &str, from: usize) -> Result<Args<'_>, String> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut start = from;
    let mut i = from;
    // Trimmed, except that an argument ending in a line comment keeps the newline that ends
    // it: trimmed away, the macro's output after the argument would land inside the comment
    // (`@m(x -- note⏎)` giving `x -- note / 100.0`).
    let piece = |s: usize, e: usize| -> (&str, usize) {
        let raw = &text[s..e];
        let lead = raw.len() - raw.trim_start().len();
        let (from, to) = (s + lead, s + lead + raw.trim().len());
        let mut j = from;
        while j < to {
            match crate::core::fragment::skip_literal_or_comment(b, j) {
                Some(end) if b[j] == b'-' && end >= to && end < e => return (&text[from..=end], from),
                Some(end) => j = end.max(j + 1),
                None => j += 1,
            }
        }
        (&text[from..to], from)
    };
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' if depth > 0 => depth -= 1,
            b')' => {
                let last = piece(start, i);
                if !(args.is_empty() && last.0.is_empty()) {
                    args.push(last);
                }
                if let Some(n) = args.iter().position(|(a, _)| a.is_empty()) {
                    return Err(format!("argument {} is empty", n + 1));
                }
                return Ok((args, i));
            }
            b',' if depth == 0 => {
                args.push(piece(start, i));
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    Err("no closing `)`".into())
}

/// True when a macro's output `sql` holds a reference marker (`\u{1}<index>\u{2}`, what `ref()`
/// and `@ref(…)` leave in query text) that none of its arguments (`passed`, concatenated)
/// held: a marker stands for the calling model's reference of that index, so one made
/// elsewhere (a `ref()` at the top of the macro's file, a forged one) would read another model.
fn foreign_reference(sql: &str, passed: &str) -> bool {
    let mut rest = sql;
    while let Some(open) = rest.find('\u{1}') {
        let after = &rest[open..];
        let Some(close) = after.find('\u{2}') else { return true };
        if !passed.contains(&after[..=close]) {
            return true;
        }
        rest = &after[close + 1..];
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_bound_form_is_reserved() {
        for (m, _) in crate::core::fragment::Bound::ALL {
            assert!(super::RESERVED.contains(&m), "{m}");
        }
    }

    use super::*;
    use std::path::PathBuf;

    /// Echoes its calls: `name[arg|arg]`; `boom` fails.
    struct Echo;
    impl Caller for Echo {
        fn call(&self, name: &str, args: Vec<String>) -> Result<String, Failure> {
            if name == "boom" {
                return Err(Failure::new("macro `@boom` failed"));
            }
            Ok(format!("{name}[{}]", args.join("|")))
        }
    }

    fn at(off: usize) -> Location {
        Location { file: PathBuf::from("m.sql"), line: off as u32 }
    }

    fn x(text: &str) -> Result<String, Vec<LoadError>> {
        expand_with(text, &Echo, &at)
    }

    #[test]
    fn arguments_split_on_top_level_commas_only() {
        assert_eq!(x("SELECT @m(a, 'x,y', f(b, c), [1, 2], \"q,r\" /* c, d */) AS v").unwrap(), "SELECT m[a|'x,y'|f(b, c)|[1, 2]|\"q,r\" /* c, d */] AS v");
        assert_eq!(x("@m()").unwrap(), "m[]");
        assert_eq!(x("@m( a )").unwrap(), "m[a]");
        assert_eq!(x("@m('it''s)', b)").unwrap(), "m['it''s)'|b]");
    }

    #[test]
    fn a_ref_in_a_macros_output_is_a_load_error_naming_the_macro() {
        struct Refs;
        impl Caller for Refs {
            fn call(&self, _name: &str, _args: Vec<String>) -> Result<String, Failure> {
                Ok("@ref(s.b)".to_string())
            }
        }
        let e = expand_with("SELECT * FROM @orders()", &Refs, &at).unwrap_err();
        assert!(e[0].message.contains("macro `@orders` returned `@ref(…)`"), "{:?}", e[0]);
    }

    #[test]
    fn an_argument_ending_in_a_line_comment_keeps_its_newline() {
        assert_eq!(x("SELECT @m(amount -- in cents\n) AS v").unwrap(), "SELECT m[amount -- in cents\n] AS v");
        assert_eq!(x("@m(a -- one, two\n, b -- three\n  )").unwrap(), "m[a -- one, two\n|b -- three\n]");
        assert_eq!(x("@m('--', b)").unwrap(), "m['--'|b]");
        assert_eq!(x("@m(a /* c */ )").unwrap(), "m[a /* c */]");
    }

    #[test]
    fn an_output_ending_in_a_line_comment_ends_with_a_newline() {
        /// Returns its first argument followed by `-- note`, or `b` as given (`'--'`, a
        /// block comment, a comment already ended).
        struct Commented;
        impl Caller for Commented {
            fn call(&self, name: &str, args: Vec<String>) -> Result<String, Failure> {
                Ok(match name {
                    "c" => format!("{} = 'paid' -- settled orders only", args.join("")),
                    _ => args.join(""),
                })
            }
        }
        let y = |text: &str| expand_with(text, &Commented, &at).unwrap();
        // The comment ends at the call: the rest of the line stays SQL.
        assert_eq!(y("WHERE @c(status) AND amount > 500"), "WHERE status = 'paid' -- settled orders only\n AND amount > 500");
        // Already followed by a newline: none added.
        assert_eq!(y("WHERE @c(status)\nAND amount > 500"), "WHERE status = 'paid' -- settled orders only\nAND amount > 500");
        // As an argument: the outer macro's output after it is not swallowed either.
        assert_eq!(y("WHERE @o(@c(status)) AND x"), "WHERE status = 'paid' -- settled orders only\n AND x");
        // `--` in a literal or a block comment, or a comment the output already ends: nothing added.
        assert_eq!(y("SELECT @o('a--b') AS v"), "SELECT 'a--b' AS v");
        assert_eq!(y("SELECT @o(a /* -- */) AS v"), "SELECT a /* -- */ AS v");
        assert_eq!(y("SELECT @o(a -- n\n) AS v"), "SELECT a -- n\n AS v");
        assert!(ends_in_line_comment("a -- b") && !ends_in_line_comment("a -- b\n") && !ends_in_line_comment("'--'"));
    }

    #[test]
    fn nested_calls_expand_inside_out_and_reserved_names_stay() {
        assert_eq!(x("@a(@b(x), y)").unwrap(), "a[b[x]|y]");
        assert_eq!(x("@ref(s.t) WHERE t >= @start AND @end_date(x)").unwrap(), "@ref(s.t) WHERE t >= @start AND @end_date(x)");
        assert_eq!(x("'@m(x)' -- @m(y)\n\"@m\"(z)").unwrap(), "'@m(x)' -- @m(y)\n\"@m\"(z)");
        assert_eq!(x("a@m(x) @@m(y) @ m(z)").unwrap(), "a@m(x) @@m(y) @ m(z)");
    }

    #[test]
    fn malformed_and_failed_calls_name_their_offset() {
        let e = x("SELECT 1, @m(a,)").unwrap_err();
        assert_eq!(e[0].location.as_ref().unwrap().line, 10);
        assert!(e[0].message.contains("argument 2 is empty"), "{:?}", e[0]);
        let e = x("SELECT @m(a").unwrap_err();
        assert!(e[0].message.contains("no closing `)`"), "{:?}", e[0]);
        let e = x("SELECT @boom(1), @boom(2)").unwrap_err();
        assert_eq!(e.iter().map(|e| e.location.as_ref().unwrap().line).collect::<Vec<_>>(), vec![7, 17]);
    }
}
