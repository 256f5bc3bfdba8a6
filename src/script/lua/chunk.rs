//! Evaluating one file's chunk with the result of mlua's [`Chunk::eval`], compiling it once.
//!
//! `Chunk::eval` first compiles `return <file>` and, when that fails to compile, the file as a
//! block. A file is both a valid block and a valid `return <file>` only when it is a single call
//! statement (`define_model { … }` without `return`, optionally followed by `;`): then `eval`
//! returns that call's values (a model file's handle, which `require` hands to other files),
//! where the block would return nothing. Every other file with more than one statement pays a
//! failed compile of its first statement (≈ 3–4 % of a cold load).
//!
//! [`eval`] keeps `eval`'s result exactly: it compiles the file as a block and runs it when a
//! scan of the file's top-level tokens proves it is not a single call statement
//! ([`not_one_call`]); in every other case (no proof, or the block does not compile) it does what
//! `Chunk::eval` does (`return <file>` when that compiles, else the block). The compiled function
//! is run by the caller's `call` (the Lua host calls project code under its own message
//! handler, see `call_plain`), never by mlua's `Function::call` directly.

use mlua::chunk::Chunk;
use mlua::{Function, Value};

/// Runs the chunk `chunk(code)` builds as [`Chunk::eval`] would, calling the compiled function
/// with `call`; see the module docs. `chunk` builds the same chunk (name, mode, environment) from
/// the source it is given.
///
/// # Errors
/// As [`Chunk::eval`] (`call`'s error when the chunk runs).
pub(super) fn eval<'a>(code: &[u8], chunk: impl Fn(Vec<u8>) -> Chunk<'a>, call: impl Fn(&Function) -> mlua::Result<Value>) -> mlua::Result<Value> {
    if not_one_call(code)
        && let Ok(function) = chunk(code.to_vec()).into_function()
    {
        return call(&function);
    }
    // As `Chunk::eval` for source: the file as an expression, else as a block.
    let mut expression = b"return ".to_vec();
    expression.extend_from_slice(code);
    match chunk(expression).into_function() {
        Ok(function) => call(&function),
        Err(_) => call(&chunk(code.to_vec()).into_function()?),
    }
}

/// What the scan last saw at the top level (outside brackets).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    Start,
    /// A name (or the `.`/`:` of an index or method, which a name follows).
    Name,
    Dot,
    /// A closing bracket or a string literal: the end of a call's arguments or of an index.
    Closer,
    Semicolon,
}

/// True when `code` is certainly not a single call statement (or cannot be a valid block at
/// all): at the top level (outside brackets, strings and comments) it holds a keyword, a number
/// or an operator, a name or bracket after a `;`, or a name right after a name, a closing bracket
/// or a string (a second statement). False means "maybe": the caller falls back to `eval`.
pub(super) fn not_one_call(code: &[u8]) -> bool {
    const KEYWORDS: [&[u8]; 22] = [
        b"and",
        b"break",
        b"do",
        b"else",
        b"elseif",
        b"end",
        b"false",
        b"for",
        b"function",
        b"goto",
        b"if",
        b"in",
        b"local",
        b"nil",
        b"not",
        b"or",
        b"repeat",
        b"return",
        b"then",
        b"true",
        b"until",
        b"while",
    ];
    let n = code.len();
    let mut i = 0;
    let mut depth = 0usize;
    let mut prev = Prev::Start;
    while i < n {
        let c = code[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c => i += 1,
            b'-' if code.get(i + 1) == Some(&b'-') => {
                i += 2;
                if let Some(end) = long_bracket(code, i) {
                    i = end;
                } else {
                    while i < n && code[i] != b'\n' {
                        i += 1;
                    }
                }
            }
            b'\'' | b'"' => {
                let Some(end) = short_string(code, i) else { return false };
                if depth == 0 {
                    if prev == Prev::Semicolon || prev == Prev::Start || prev == Prev::Dot {
                        return true;
                    }
                    prev = Prev::Closer;
                }
                i = end;
            }
            b'[' => {
                if let Some(end) = long_bracket(code, i) {
                    if depth == 0 {
                        if prev == Prev::Semicolon || prev == Prev::Start || prev == Prev::Dot {
                            return true;
                        }
                        prev = Prev::Closer;
                    }
                    i = end;
                } else {
                    if depth == 0 && matches!(prev, Prev::Semicolon | Prev::Start | Prev::Dot) {
                        return true;
                    }
                    depth += 1;
                    i += 1;
                }
            }
            b'(' | b'{' => {
                if depth == 0 && matches!(prev, Prev::Semicolon | Prev::Dot) {
                    return true;
                }
                depth += 1;
                i += 1;
            }
            b')' | b'}' | b']' => {
                let Some(d) = depth.checked_sub(1) else { return false };
                depth = d;
                if depth == 0 {
                    prev = Prev::Closer;
                }
                i += 1;
            }
            c if c == b'_' || c.is_ascii_alphabetic() => {
                let start = i;
                while i < n && (code[i] == b'_' || code[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                if depth == 0 {
                    if KEYWORDS.contains(&&code[start..i]) || matches!(prev, Prev::Name | Prev::Closer | Prev::Semicolon) {
                        return true;
                    }
                    prev = Prev::Name;
                }
            }
            _ if depth > 0 => i += 1,
            b'.' | b':' => {
                // `..`, `...`, `::label::` and numbers such as `.5` are not part of a call statement.
                if code.get(i + 1).is_some_and(|&d| d == c || d.is_ascii_digit()) || prev != Prev::Name && prev != Prev::Closer {
                    return true;
                }
                prev = Prev::Dot;
                i += 1;
            }
            b';' => {
                if prev == Prev::Semicolon || prev == Prev::Dot {
                    return true;
                }
                prev = Prev::Semicolon;
                i += 1;
            }
            // A number, an operator, `=`, `,`, `#`, or a byte Lua does not accept.
            _ => return true,
        }
    }
    false
}

/// The index just past the long bracket (`[[ … ]]`, `[==[ … ]==]`) opening at `at`, or `None`
/// when `at` does not open one or it is not closed.
fn long_bracket(code: &[u8], at: usize) -> Option<usize> {
    if code.get(at) != Some(&b'[') {
        return None;
    }
    let mut j = at + 1;
    while code.get(j) == Some(&b'=') {
        j += 1;
    }
    if code.get(j) != Some(&b'[') {
        return None;
    }
    let level = j - at - 1;
    let mut k = j + 1;
    while k < code.len() {
        if code[k] == b']' {
            let mut m = k + 1;
            while code.get(m) == Some(&b'=') {
                m += 1;
            }
            if m - k - 1 == level && code.get(m) == Some(&b']') {
                return Some(m + 1);
            }
            k = m;
        } else {
            k += 1;
        }
    }
    None
}

/// The index just past the quoted string opening at `at`, or `None` when it is not closed on
/// its line (Lua's rule; `\` escapes the next byte, a line break included).
fn short_string(code: &[u8], at: usize) -> Option<usize> {
    let quote = code[at];
    let mut k = at + 1;
    while k < code.len() {
        match code[k] {
            b'\\' => k += 2,
            b'\n' | b'\r' => return None,
            c if c == quote => return Some(k + 1),
            _ => k += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    /// Sources of every shape: single call statements (with and without `;`, chained, methods,
    /// string and table arguments, comments and long strings), several statements, `return`,
    /// expressions that are no block, blocks that are no expression, syntax errors, runtime
    /// errors, empty files.
    const CASES: &[&str] = &[
        "",
        "-- only a comment\n",
        ";",
        "f{ a = 1 }",
        "f{ a = 1 };",
        "f{ a = 1 };;",
        "-- c\nf { q = [==[ SELECT ]] ]==] .. g(\"x\") }\n",
        "f 'x'",
        "f \"x\" 'y'",
        "f{}{}",
        "f{} g{}",
        "f{}\ng{}",
        "t.m:n{ 1 }",
        "t.m:n{ 1 } t.m:n{ 2 }",
        "f(1)(2)",
        "f(1)\n(2)",
        "local x = f{}\nreturn x",
        "return f{}",
        "return 1, 2",
        "x = 1",
        "1 + 2",
        "f{} + 1",
        "f{} .. 'x'",
        "function() return 7 end",
        "function g() return 7 end",
        "not f{}",
        "f{} and g{}",
        "{ 1, 2 }",
        "'just a string'",
        "f{ --[[ } ]] 1 }",
        "f[[ long ]] g{}",
        "f{} -- ] }",
        "f{",
        "f{}}",
        "error('boom')",
        "error('boom'); f{}",
        "::top:: f{}",
        "f{} ; g{}",
        "f.x{} ; ",
        "(f){}",
        "(f){} (g){}",
        "do f{} end",
        "f{}.x",
        "f{}:m()",
        "f{}[1]{}",
        "f{} .5",
        "f 'a\\'b' g{}",
        "f 'unterminated\n'",
    ];

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.load(
            "function f(t) return function(u) return { t, u } end end
             function g(t) return 'g' end
             t = { m = { n = function(self, v) return v end } }",
        )
        .exec()
        .expect("prelude");
        lua
    }

    /// A comparable rendering of an evaluation's outcome.
    fn outcome(r: mlua::Result<Value>) -> String {
        match r {
            Ok(Value::Table(t)) => format!("table of {}", t.raw_len()),
            Ok(Value::Function(_)) => "function".into(),
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error: {e}"),
        }
    }

    /// The result of [`eval`] is the result of `Chunk::eval` for every case: same value or same
    /// error message.
    #[test]
    fn eval_equals_mluas_eval() {
        for src in CASES {
            let (a, b) = (lua(), lua());
            let ours = outcome(eval(src.as_bytes(), |code| a.load(code).set_name("@case.lua"), |f| f.call(())));
            let theirs = outcome(b.load(*src).set_name("@case.lua").eval::<Value>());
            assert_eq!(ours, theirs, "source: {src:?}");
        }
    }

    /// The scan proves "not one call statement" for the shapes a model file has (so those compile
    /// once), and never for a single call statement.
    #[test]
    fn the_scan_recognises_several_statements_and_never_a_single_call() {
        for src in ["f{} g{}", "local u = require(\"lib.util\")\nf{}", "-- c\nf{ q = [[x]] }\nf{ q = 'y' }\n", "return f{}", "x = 1", "f{};g{}"] {
            assert!(not_one_call(src.as_bytes()), "{src:?}");
        }
        for src in ["f{}", "f{};", "-- c\nf{ q = [==[ ]] ]==] }", "t.m:n{ 1 }", "f 'x' \"y\"", "(f){}", "f{}{}", "", "f{ --[[ } ]] 1 }"] {
            assert!(!not_one_call(src.as_bytes()), "{src:?}");
        }
    }
}
