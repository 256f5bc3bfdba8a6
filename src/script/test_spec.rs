//! Model unit tests as scripts: the language-neutral test builder. The test files (`[project]
//! tests`, default `tests/**/*.{lua,rhai}`) are evaluated with the model files, in the same
//! sandboxes, by [`super::loader::load_models_and_tests`].
//!
//! A test file calls `define_test { … }` (Lua) or `define_test(#{ … })` (Rhai); each host turns
//! the table or map into a JSON-like spec and calls [`build_test`], so both languages share one
//! set of rules and messages. Running a test (fixtures → CTEs → the model's SQL → DuckDB → row
//! diff) is [`crate::unittest`]'s job; this module only reads and checks the spec's shape.
//!
//! Spec fields (see `docs/testing.md`):
//!
//! | field | required | meaning |
//! |---|---|---|
//! | `name` | yes | unique test name |
//! | `model` | yes | the model under test: `"schema.table"` or a model handle |
//! | `inputs` | no | parent name → list of rows (maps column → value); a missing key is NULL |
//! | `expect` | yes | list of expected rows |
//! | `vars` | no | `start` / `end`: the interval bounds of a time-range model (UTC, `[start, end)`) |
//! | `ordered` | no | compare rows in order (default: as a multiset) |
//! | `columns` | no | compare only these output columns (default: every declared column) |
//! | `description` | no | free text |

use crate::core::error::did_you_mean;
use crate::core::interval::{Millis, parse_instant};
use crate::core::{LoadError, Location, ModelName};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One fixture or expected row: column name → value (JSON scalars, lists and maps; `null` for
/// NULL). Columns a row leaves out are NULL.
pub type Row = Map<String, Value>;

/// A unit test of one model, as written in a test file.
#[derive(Debug, Clone, PartialEq)]
pub struct TestSpec {
    /// Unique name (across the project's test files).
    pub name: String,
    /// The model under test.
    pub model: ModelName,
    /// Fixture rows per parent, in the order written.
    pub inputs: BTreeMap<ModelName, Vec<Row>>,
    /// Expected output rows.
    pub expect: Vec<Row>,
    /// `@start`: inclusive lower bound, UTC milliseconds.
    pub start: Option<Millis>,
    /// `@end`: exclusive upper bound, UTC milliseconds.
    pub end: Option<Millis>,
    /// Compare rows in order instead of as a multiset.
    pub ordered: bool,
    /// Output columns compared; `None` = every declared column.
    pub columns: Option<Vec<String>>,
    /// Free text.
    pub description: Option<String>,
    /// Where `define_test` was called.
    pub location: Location,
}

const TEST_KEYS: &[&str] = &["name", "model", "inputs", "expect", "vars", "ordered", "columns", "description"];
const VAR_KEYS: &[&str] = &["start", "end"];

/// Builds a test from a host-neutral spec.
///
/// # Errors
/// Every problem found in the spec, each naming the field (and row) at fault, at `location`.
pub fn build_test(spec: &Map<String, Value>, location: Location) -> Result<TestSpec, Vec<LoadError>> {
    let mut errors = Vec::new();
    let name = match spec.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(_) => {
            errors.push(LoadError::new(Some(location.clone()), None, "`define_test`: `name` must be a non-empty string"));
            None
        }
        None => {
            errors.push(LoadError::new(Some(location.clone()), None, "`define_test` needs a `name`"));
            None
        }
    };
    let prefix = match &name {
        Some(n) => format!("test `{n}`: "),
        None => "`define_test`: ".to_string(),
    };
    let err = |msg: String| LoadError::new(Some(location.clone()), None, format!("{prefix}{msg}"));
    // Sorted: the spec keeps the table's order, which Lua does not fix between runs.
    let mut keys: Vec<&String> = spec.keys().collect();
    keys.sort();
    for key in keys {
        if !TEST_KEYS.contains(&key.as_str()) {
            let mut e = err(format!("unknown field `{key}`"));
            if VAR_KEYS.contains(&key.as_str()) {
                // `start`/`end` are the values of `@start`/`@end`: they go in `vars`.
                e = e.with_hint("the values of `@start` and `@end` go in `vars`: `vars = { start = \"2026-01-01\", [\"end\"] = \"2026-01-02\" }`");
            } else if let Some(s) = did_you_mean(key, TEST_KEYS.iter().copied()) {
                e = e.with_hint(format!("did you mean `{s}`?"));
            }
            errors.push(e);
        }
    }
    let model = match spec.get("model") {
        Some(Value::String(s)) => match ModelName::parse(s) {
            Ok(m) => Some(m),
            Err(e) => {
                errors.push(err(format!("`model`: {e}")));
                None
            }
        },
        Some(_) => {
            errors.push(err("`model` must be a model handle or a \"schema.table\" string".into()));
            None
        }
        None => {
            errors.push(err("`define_test` needs a `model` (the model under test)".into()));
            None
        }
    };
    let mut inputs = BTreeMap::new();
    match spec.get("inputs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (parent, rows) in map {
                let parent_name = match ModelName::parse(parent) {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(err(format!("`inputs`: key `{parent}`: {e}")));
                        continue;
                    }
                };
                match rows_of(rows, &format!("`inputs[\"{parent}\"]`")) {
                    Ok(rows) => {
                        if inputs.insert(parent_name, rows).is_some() {
                            errors.push(err(format!("`inputs`: `{parent}` is given twice")));
                        }
                    }
                    Err(msg) => errors.push(err(msg)),
                }
            }
        }
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => errors.push(err("`inputs` must map parent names to lists of rows, e.g. `{ [\"raw.t\"] = { { id = 1 } } }`".into())),
    }
    let expect = match spec.get("expect") {
        Some(v) => match rows_of(v, "`expect`") {
            Ok(rows) => rows,
            Err(msg) => {
                errors.push(err(msg));
                Vec::new()
            }
        },
        None => {
            errors.push(err("`define_test` needs `expect` (the expected rows; an empty list for none)".into()));
            Vec::new()
        }
    };
    let (mut start, mut end) = (None, None);
    match spec.get("vars") {
        None | Some(Value::Null) => {}
        Some(Value::Object(vars)) => {
            for (k, v) in vars {
                let slot = match k.as_str() {
                    "start" => &mut start,
                    "end" => &mut end,
                    _ => {
                        let mut e = err(format!("`vars`: unknown variable `{k}` (tests take `start` and `end`)"));
                        if let Some(s) = did_you_mean(k, VAR_KEYS.iter().copied()) {
                            e = e.with_hint(format!("did you mean `{s}`?"));
                        }
                        errors.push(e);
                        continue;
                    }
                };
                match v.as_str().map(parse_instant) {
                    Some(Ok(t)) => *slot = Some(t),
                    Some(Err(msg)) => errors.push(err(format!("`vars.{k}`: {msg}"))),
                    None => errors.push(err(format!("`vars.{k}` must be a date or timestamp string, e.g. \"2026-01-01\""))),
                }
            }
            if let (Some(s), Some(e)) = (start, end)
                && s >= e
            {
                errors.push(err("`vars.start` must be before `vars.end` (the interval is `[start, end)`)".into()));
            }
        }
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => errors.push(err("`vars` must be a table `{ start = \"…\", [\"end\"] = \"…\" }`".into())),
    }
    let ordered = match spec.get("ordered") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(err("`ordered` must be a boolean".into()));
            false
        }
    };
    let columns = match spec.get("columns") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {
            Some(items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        }
        Some(_) => {
            errors.push(err("`columns` must be a non-empty list of output column names".into()));
            None
        }
    };
    let description = match spec.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            errors.push(err("`description` must be a string".into()));
            None
        }
    };
    match (name, model) {
        (Some(name), Some(model)) if errors.is_empty() => Ok(TestSpec { name, model, inputs, expect, start, end, ordered, columns, description, location }),
        _ => Err(errors),
    }
}

/// A list of rows: an array of maps (an empty map stands for an empty list, as Lua's `{}`).
fn rows_of(v: &Value, what: &str) -> Result<Vec<Row>, String> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, r)| match r {
                Value::Object(m) => Ok(m.clone()),
                // Lua's `{}` (a row of NULLs only) converts to an empty list.
                Value::Array(a) if a.is_empty() => Ok(Row::new()),
                _ => Err(format!("{what} row {}: a row must be a table of column = value", i + 1)),
            })
            .collect(),
        Value::Object(m) if m.is_empty() => Ok(Vec::new()),
        _ => Err(format!("{what} must be a list of rows, e.g. `{{ {{ id = 1, name = \"a\" }} }}`")),
    }
}

/// Rejects duplicate test names (both places are named).
pub(crate) fn check_unique(tests: &[TestSpec]) -> Vec<LoadError> {
    let mut seen: BTreeMap<&str, &Location> = BTreeMap::new();
    let mut errors = Vec::new();
    for t in tests {
        if let Some(first) = seen.insert(t.name.as_str(), &t.location) {
            errors.push(LoadError::new(Some(t.location.clone()), None, format!("test `{}` is defined twice (first at {first})", t.name)));
            seen.insert(t.name.as_str(), first);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn loc() -> Location {
        Location { file: "tests/t.lua".into(), line: 3 }
    }

    fn spec(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn builds_a_full_spec() {
        let t = build_test(
            &spec(json!({
                "name": "t1", "model": "med.moves",
                "inputs": { "stg.moves": [ { "move_id": 1 }, {} ] },
                "expect": {},
                "vars": { "start": "2026-01-01", "end": "2026-01-02" },
                "ordered": true, "columns": ["move_id"],
            })),
            loc(),
        )
        .unwrap();
        assert_eq!(t.model.to_string(), "med.moves");
        assert_eq!(t.inputs.values().next().unwrap().len(), 2);
        assert!(t.expect.is_empty(), "Lua's empty table is an empty list");
        assert_eq!(t.end.unwrap() - t.start.unwrap(), 86_400_000);
        assert!(t.ordered);
    }

    /// Unknown fields come sorted (the spec keeps the Lua table's order, which changes between
    /// runs); `start` and `end` at the top level are told they go in `vars`.
    #[test]
    fn unknown_fields_are_sorted_and_start_and_end_point_to_vars() {
        let errs =
            build_test(&spec(json!({ "zeta": 1, "start": "2026-01-01", "name": "t1", "model": "a.b", "expect": [], "end": "2026-01-02", "alpha": 2 })), loc())
                .unwrap_err();
        let unknown: Vec<&str> = errs.iter().filter_map(|e| e.message.strip_prefix("test `t1`: unknown field ")).collect();
        assert_eq!(unknown, ["`alpha`", "`end`", "`start`", "`zeta`"]);
        let start = errs.iter().find(|e| e.message.ends_with("`start`")).unwrap();
        assert_eq!(
            start.hint.as_deref(),
            Some("the values of `@start` and `@end` go in `vars`: `vars = { start = \"2026-01-01\", [\"end\"] = \"2026-01-02\" }`")
        );
        assert!(errs.iter().find(|e| e.message.ends_with("`end`")).unwrap().hint.as_deref().is_some_and(|h| h.contains("go in `vars`")));
    }

    #[test]
    fn every_spec_problem_is_named() {
        let errs = build_test(
            &spec(json!({
                "name": "t1", "model": "nodot", "expct": [], "vars": { "strat": "2026-01-01", "end": "x" }, "ordered": 1,
            })),
            loc(),
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        let all = text.join("\n");
        assert!(all.contains("tests/t.lua:3: test `t1`: unknown field `expct`"), "{all}");
        assert!(all.contains("did you mean `expect`?"), "{all}");
        assert!(all.contains("`model`"), "{all}");
        assert!(all.contains("needs `expect`"), "{all}");
        assert!(all.contains("unknown variable `strat`") && all.contains("did you mean `start`?"), "{all}");
        assert!(all.contains("`vars.end`: `x` is not a date"), "{all}");
        assert!(all.contains("`ordered` must be a boolean"), "{all}");
    }

    #[test]
    fn bounds_must_be_ordered() {
        let errs =
            build_test(&spec(json!({ "name": "t", "model": "a.b", "expect": [], "vars": { "start": "2026-01-02", "end": "2026-01-01" } })), loc()).unwrap_err();
        assert!(errs[0].message.contains("before `vars.end`"), "{errs:?}");
    }
}
