//! Rhai errors → load errors: file:line, a message in efmesh's style, and the Rhai call stack as
//! `at file:line:col` lines, innermost first, as the error's traceback ([`LoadError::traceback`]:
//! `check --json`'s `"traceback"`, the debug log), not part of its message.

use super::{
    BUDGET_TAG, FILE_BUDGET, MAX_ARRAY_SIZE, MAX_CALL_LEVELS, MAX_FUNCTIONS, MAX_MAP_SIZE, MAX_MEMORY_GROWTH, MAX_MODULES, MAX_OPERATIONS, MAX_STRING_SIZE,
    MAX_VARIABLES, MEMORY_TAG, VERIFY_BUDGET, VERIFY_TAG,
};
use crate::core::error::did_you_mean;
use crate::core::{LoadError, Location};
use ::rhai::{EvalAltResult, ParseError, ParseErrorType, Position};
use std::path::{Path, PathBuf};

/// Names a model file can call that are not there, with why.
const SANDBOXED: &[&str] = &["timestamp", "sleep", "eval", "open_file", "read_file", "write_file", "rand", "random", "system", "exec"];
/// The efmesh API, for "did you mean" on unknown functions.
const API: &[&str] = &["define_model", "ref", "cols", "print", "debug"];

/// A compile error of `file`.
pub(super) fn parse_error(e: &ParseError, file: &Path) -> LoadError {
    let message = match &*e.0 {
        ParseErrorType::ExprTooDeep => "expression nested too deeply (the sandbox allows 64 levels)".to_string(),
        ParseErrorType::VariableUndefined(v) => format!("unknown variable `{v}`"),
        ParseErrorType::ModuleUndefined(m) => format!("unknown module `{m}` (import it first: `import \"file\" as {m};`)"),
        ParseErrorType::LiteralTooLarge(what, max) => format!("{} exceeds the sandbox limit of {max}", lower_first(what)),
        ParseErrorType::TooManyFunctions => format!("too many functions (the sandbox allows {MAX_FUNCTIONS})"),
        other => {
            let text = other.to_string();
            if text.contains("'eval' is disabled") {
                "`eval` is disabled in efmesh models".to_string()
            } else {
                format!("syntax error: {}", lower_first(&text))
            }
        }
    };
    let mut err = LoadError::new(Some(location(file, e.1)), None, message).with_traceback(format!("at {}", at(file, e.1)));
    if let ParseErrorType::VariableUndefined(_) = &*e.0 {
        err = err.with_hint("variables must be defined (`let`) before use; a handle from another file is `alias::name` after `import`");
    }
    err
}

/// One Rhai call frame: the function called, the source of its body, and where it was called.
struct Frame {
    name: String,
    body_source: Option<PathBuf>,
    call: Position,
}

/// A runtime error of the evaluation of `file`.
pub(super) fn eval_error(e: &EvalAltResult, file: &Path) -> LoadError {
    // Unwind the wrappers, outermost first.
    let mut frames = Vec::new();
    let mut leaf = e;
    loop {
        match leaf {
            EvalAltResult::ErrorInFunctionCall(name, src, inner, pos) => {
                let name = if name.starts_with("anon$") { "closure".to_string() } else { format!("`{name}`") };
                frames.push(Frame { name, body_source: (!src.is_empty()).then(|| PathBuf::from(src)), call: *pos });
                leaf = inner;
            }
            EvalAltResult::ErrorInModule(path, inner, pos) => {
                frames.push(Frame { name: format!("module `{path}`"), body_source: None, call: *pos });
                leaf = inner;
            }
            _ => break,
        }
    }
    // Where each position lies: the call of frame i is in the body of frame i-1 (or the file).
    let mut sources = vec![file.to_path_buf()];
    for f in &frames {
        let prev = sources.last().cloned().unwrap_or_default();
        sources.push(f.body_source.clone().unwrap_or(prev));
    }
    // (source, position, enclosing function), innermost first.
    let mut trace = vec![(sources[frames.len()].clone(), leaf.position(), frames.last().map(|f| f.name.clone()))];
    for i in (0..frames.len()).rev() {
        trace.push((sources[i].clone(), frames[i].call, i.checked_sub(1).map(|j| frames[j].name.clone())));
    }
    // The error's line in the file being loaded: its innermost position there.
    let here = trace.iter().find(|(src, pos, _)| src == file && !pos.is_none()).map_or(Position::NONE, |(_, pos, _)| *pos);
    let message = crate::script::sandbox::capped_message(leaf_message(leaf));
    let mut stack = Vec::new();
    for (src, pos, func) in &trace {
        if pos.is_none() {
            continue;
        }
        stack.push(match func {
            Some(func) => format!("at {} in {func}", at(src, *pos)),
            None => format!("at {}", at(src, *pos)),
        });
    }
    let mut err = LoadError::new(Some(location(file, here)), None, message).with_traceback(stack.join("\n"));
    if let Some(hint) = hint(leaf) {
        err = err.with_hint(hint);
    }
    err
}

fn location(file: &Path, pos: Position) -> Location {
    Location { file: file.to_path_buf(), line: pos.line().and_then(|l| u32::try_from(l).ok()).unwrap_or(0) }
}

/// `file:line:col`.
fn at(file: &Path, pos: Position) -> String {
    match (pos.line(), pos.position()) {
        (Some(l), Some(c)) => format!("{}:{l}:{c}", file.display()),
        (Some(l), None) => format!("{}:{l}", file.display()),
        _ => file.display().to_string(),
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if !s.starts_with("NOT") => f.to_lowercase().chain(c).collect(),
        _ => s.to_string(),
    }
}

fn fn_name(signature: &str) -> &str {
    signature.split([' ', '(']).next().unwrap_or(signature)
}

/// The message of a call of a kind constructor that does not exist (`kind::veiw()`): the one
/// every language gives for an unknown kind, with its did-you-mean (Rhai said "unknown function
/// `kind::veiw ()`"). `None` for any other function, and for a kind that exists called with
/// arguments it does not take (`kind::full(1, 2)`: an unknown function, as Rhai says).
fn unknown_kind_call(signature: &str) -> Option<String> {
    let tag = fn_name(signature).strip_prefix("kind::")?;
    (!crate::script::builder::KIND_TAGS.contains(&tag)).then(|| crate::script::builder::unknown_kind(tag))
}

fn leaf_message(leaf: &EvalAltResult) -> String {
    match leaf {
        EvalAltResult::ErrorRuntime(v, _) if v.is_string() => v.to_string(),
        EvalAltResult::ErrorRuntime(v, _) => format!("thrown: {v}"),
        EvalAltResult::ErrorTerminated(v, _) if v.to_string() == BUDGET_TAG => {
            format!("evaluation exceeded its budget of {} ms (infinite loop?)", FILE_BUDGET.as_millis())
        }
        EvalAltResult::ErrorTerminated(v, _) if v.to_string() == VERIFY_TAG => format!(
            "the calls efmesh makes to check that audit bodies keep no state exceeded their own budget of {} ms per audit use and {} ms in all per file (infinite loop?)",
            VERIFY_BUDGET.as_millis(),
            (FILE_BUDGET * super::super::audits::VERIFY_TOTAL_FACTOR).as_millis()
        ),
        EvalAltResult::ErrorTerminated(v, _) if v.to_string() == MEMORY_TAG => {
            format!("evaluation exceeded {} MiB of new memory (memory bomb?)", MAX_MEMORY_GROWTH >> 20)
        }
        EvalAltResult::ErrorTooManyOperations(_) => format!("evaluation exceeded {MAX_OPERATIONS} operations (infinite loop?)"),
        EvalAltResult::ErrorStackOverflow(_) => format!("call depth exceeded {MAX_CALL_LEVELS} levels (runaway recursion?)"),
        EvalAltResult::ErrorDataTooLarge(what, _) => match what.as_str() {
            "Length of string" => format!("a string exceeded the sandbox limit of {MAX_STRING_SIZE} bytes"),
            "Size of array/BLOB" => format!("an array exceeded the sandbox limit of {MAX_ARRAY_SIZE} elements"),
            "Size of object map" => format!("a map exceeded the sandbox limit of {MAX_MAP_SIZE} entries"),
            other => format!("{} exceeded the sandbox limit", lower_first(other)),
        },
        EvalAltResult::ErrorTooManyVariables(_) => format!("too many variables (the sandbox allows {MAX_VARIABLES})"),
        EvalAltResult::ErrorTooManyModules(_) => format!("too many imports (the sandbox allows {MAX_MODULES})"),
        EvalAltResult::ErrorVariableNotFound(v, _) => format!("unknown variable `{v}`"),
        EvalAltResult::ErrorFunctionNotFound(sig, _) => unknown_kind_call(sig).unwrap_or_else(|| format!("unknown function `{sig}`")),
        EvalAltResult::ErrorPropertyNotFound(p, _) => format!("unknown property `{p}`"),
        EvalAltResult::ErrorModuleNotFound(m, _) => format!("cannot import `{m}`"),
        EvalAltResult::ErrorParsing(p, _) => format!("syntax error: {}", lower_first(&p.to_string())),
        other => {
            let text = other.to_string();
            let pos = other.position();
            let text = if pos.is_none() { text.as_str() } else { text.strip_suffix(&format!(" ({pos})")).unwrap_or(&text) };
            lower_first(text)
        }
    }
}

fn hint(leaf: &EvalAltResult) -> Option<String> {
    match leaf {
        EvalAltResult::ErrorFunctionNotFound(sig, _) if unknown_kind_call(sig).is_some() => None,
        EvalAltResult::ErrorFunctionNotFound(sig, _) => {
            let name = fn_name(sig);
            let name = name.rsplit("::").next().unwrap_or(name);
            if SANDBOXED.contains(&name) {
                Some("efmesh models run sandboxed: no clock, randomness, files, processes or `eval`".into())
            } else {
                did_you_mean(name, API.iter().copied()).filter(|s| *s != name).map(|s| format!("did you mean `{s}`?"))
            }
        }
        EvalAltResult::ErrorTerminated(v, _) if v.to_string() == MEMORY_TAG => {
            Some("look for a loop that keeps collecting values (closures and curried functions count too)".into())
        }
        EvalAltResult::ErrorTerminated(v, _) if v.to_string() == VERIFY_TAG => {
            Some("efmesh calls an audit body again to check that it keeps no state, and a body that fits the file's budget once per use fits: look for a loop that never ends in the body".into())
        }
        EvalAltResult::ErrorTerminated(..) | EvalAltResult::ErrorTooManyOperations(_) => {
            Some("model files must finish quickly: look for a loop that never ends".into())
        }
        EvalAltResult::ErrorStackOverflow(_) => Some("look for a function that calls itself without a base case".into()),
        _ => None,
    }
}

/// The message of an error a macro raised (evaluating `file`'s function): `file:line: message`.
pub(super) fn macro_message(e: &EvalAltResult, file: &Path) -> String {
    let err = eval_error(e, file);
    let first = err.message.lines().next().unwrap_or_default();
    match &err.location {
        Some(l) if l.line > 0 => format!("{l}: {first}"),
        _ => first.to_string(),
    }
}
