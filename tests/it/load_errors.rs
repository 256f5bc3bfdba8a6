//! Every load error: `plan` and `apply` exit 1, stderr names file:line and the culprit, and
//! neither the state store nor the DuckDB file changes.

use crate::common::*;
use serde_json::json;

/// Applies the sample project to `dev`, breaks it with `break_it`, then checks that `plan dev`
/// and `apply dev --yes` both fail with exit 1 and every needle on stderr, leaving the state
/// store and the engine as they were. Returns apply's stderr.
#[track_caller]
fn assert_load_error(break_it: impl FnOnce(&Project), needles: &[&str]) -> String {
    let p = sample_project();
    p.apply("dev");
    let state = p.state_summary();
    assert_eq!(state.journal["dev"].len(), 1);
    assert!(!state.pointers["dev"].is_empty());
    let relations = p.all_relations();

    break_it(&p);
    let mut stderr = String::new();
    for args in [&["plan", "dev", "--json"][..], &["apply", "dev", "--yes", "--json"][..], &["apply", "prod", "--yes"][..]] {
        let run = p.run(args);
        run.expect_code(1);
        if args.contains(&"--json") {
            // `--json` failures print one error object, nothing else.
            let v = run.json();
            assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "`{}`: {v:#}", run.cmd);
        } else {
            assert!(run.stdout.is_empty(), "`{}` printed on stdout despite failing:\n{}", run.cmd, run.stdout);
        }
        for needle in needles {
            assert!(run.stderr.contains(needle), "stderr of `{}` lacks {needle:?}:\n{}", run.cmd, run.stderr);
        }
        stderr = run.stderr.clone();
    }
    assert_eq!(p.state_summary(), state, "the state store changed");
    assert_eq!(p.all_relations(), relations, "the engine changed");
    stderr
}

#[test]
fn unknown_ref_names_the_site_and_suggests() {
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "-- a consumer of s.b with a typo\ndefine_model { name = \"z.x\", kind = kind.full(), schema = { { \"n\", \"bigint\" } },\n  query = \"SELECT count(*) AS n FROM \" .. ref(\"s.bb\") }\n",
            );
        },
        &["models/extra.lua:3", "unknown ref `s.bb`", "did you mean `s.b`?"],
    );
}

/// A marker efmesh does not know (sqlmesh's `@start_millis`, a typo of `@start_date`) would be
/// DuckDB's `abs()` of a column of that name: a load error at the model, with a did-you-mean.
#[test]
fn an_unknown_marker_in_a_query_is_a_load_error_not_an_abs_call() {
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "define_model { name = \"z.x\", kind = kind.incremental_by_time_range { time_column = \"d\", start = \"2026-01-01\" },\n  schema = { { \"d\", \"date\" } },\n  query = \"SELECT d FROM (SELECT DATE '2026-01-01' AS d, 1 AS start_dat) WHERE d >= @start AND '@x' <> '' AND start_dat = @start_dat -- @not_this\" }\n",
            );
        },
        &["models/extra.lua:1", "unknown marker `@start_dat`", "did you mean `@start_date`?", "abs(start_dat)"],
    );
}

#[test]
fn duplicate_model_names_show_both_locations() {
    assert_load_error(
        |p| {
            p.write(
                "models/sub/dup.lua",
                "-- s.c again\n\ndefine_model { name = \"s.c\", kind = kind.view(), schema = { { \"n\", \"bigint\" } }, query = \"SELECT 1 AS n\" }\n",
            );
        },
        &["models/sub/dup.lua:3", "`s.c`", "duplicate model name", "models/c.lua:1"],
    );
}

#[test]
fn cycle_is_printed() {
    let err = assert_load_error(
        |p| {
            // s.a now reads s.c, closing s.a → s.b → s.c → s.a.
            p.write(
                "models/a.lua",
                "return define_model {\n  name = \"s.a\",\n  kind = kind.full(),\n  schema = { { \"id\", \"integer\" }, { \"label\", \"varchar\" } },\n  query = \"SELECT CAST(n AS INTEGER) AS id, 'x' AS label FROM \" .. ref(\"s.c\"),\n}\n",
            );
        },
        &["dependency cycle", "models/"],
    );
    let line = err.lines().find(|l| l.contains("dependency cycle")).expect("cycle line");
    // The printed cycle goes round once: it names every member and ends where it started.
    for m in ["`s.a`", "`s.b`", "`s.c`"] {
        assert!(line.contains(m), "{line}");
    }
    let path: Vec<&str> = line.split("dependency cycle: ").nth(1).expect("path").split(" → ").collect();
    assert_eq!(path.len(), 4, "{line}");
    assert_eq!(path.first(), path.last(), "{line}");
    let loc = line.split(':').take(2).collect::<Vec<_>>();
    assert!(loc[0].starts_with("models/") && loc[1].parse::<u32>().is_ok(), "no file:line in {line}");
}

#[test]
fn cols_naming_an_undeclared_parent_column() {
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "local a = require(\"a\")\ndefine_model { name = \"z.x\", kind = kind.full(), schema = { { \"id\", \"integer\" } },\n  query = \"SELECT \" .. cols(a, \"id\", \"lable\") .. \" FROM \" .. ref(a) }\n",
            );
        },
        &["models/extra.lua:3", "column `lable` is not declared by parent `s.a`", "did you mean `label`?"],
    );
}

#[test]
fn start_in_a_non_time_range_model() {
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "\ndefine_model { name = \"z.x\", kind = kind.full(), schema = { { \"id\", \"integer\" } },\n  query = \"SELECT 1 AS id WHERE now() > @start\" }\n",
            );
        },
        &["models/extra.lua:2", "model `z.x`", "`@start`", "`full`"],
    );
}

#[test]
fn invalid_model_name() {
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "\n\ndefine_model { name = \"z-bad.x\", kind = kind.full(), schema = { { \"id\", \"integer\" } }, query = \"SELECT 1 AS id\" }\n",
            );
        },
        &["models/extra.lua:3", "invalid model name `z-bad.x`"],
    );
}

#[test]
fn unknown_config_key() {
    assert_load_error(
        |p| {
            p.write("efmesh.toml", &format!("{CONFIG}wal_mode = true\n"));
        },
        &["efmesh.toml", "line 9", "wal_mode"],
    );
}

#[test]
fn unknown_config_section() {
    assert_load_error(
        |p| {
            p.write("efmesh.toml", &format!("[engin]\npath = \"other.duckdb\"\n\n{CONFIG}"));
        },
        &["efmesh.toml", "line 1", "engin"],
    );
}

#[test]
fn lua_syntax_error() {
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "define_model {\n  name = \"z.x\",\n  kind = kind.full(),\n  query = \"SELECT 1 AS id\"\n  schema = { { \"id\", \"integer\" } },\n}\n",
            );
        },
        &["models/extra.lua:5", "syntax error", "'}' expected"],
    );
}

#[test]
fn lua_runtime_error() {
    assert_load_error(
        |p| {
            p.write("models/extra.lua", "local regions = {}\nerror(\"no regions configured for \" .. #regions .. \" markets\")\n");
        },
        &["models/extra.lua:2", "no regions configured for 0 markets"],
    );
}

/// A misspelled kind constructor in Lua (`kind.ful()`) is the error a `.sql` model's
/// `-- kind: ful` gets, at its line, not Lua's "attempt to call a nil value (field 'ful')"; every
/// file's copy of `kind` says so, and its metatable is out of a file's reach.
#[test]
fn a_misspelled_lua_kind_is_an_unknown_kind_with_a_did_you_mean() {
    let p = Project::new();
    p.write("efmesh.toml", CONFIG);
    p.write("models/a.lua", "-- a\ndefine_model { name = \"z.a\", kind = kind.ful(), schema = { { \"n\", \"bigint\" } }, query = \"SELECT 1 AS n\" }\n");
    p.write(
        "models/b.lua",
        "assert(getmetatable(kind) == false)\nlocal ok, e = pcall(function() return kind.table end)\nassert(not ok)\ndefine_model { name = \"z.b\", kind = kind.scd_type(), schema = { { \"n\", \"bigint\" } }, query = \"SELECT 1 AS n\" }\n",
    );
    let run = p.run(&["check", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let errors = v["errors"].as_array().unwrap();
    let at = |file: &str| errors.iter().find(|e| e["file"] == file).unwrap_or_else(|| panic!("no error in {file}: {v:#}"));
    assert_eq!(at("models/a.lua")["line"], 2, "{v:#}");
    assert!(at("models/a.lua")["message"].as_str().unwrap().contains("unknown kind `ful` (did you mean `full`?)"), "{v:#}");
    assert_eq!(at("models/b.lua")["line"], 4, "{v:#}");
    assert!(at("models/b.lua")["message"].as_str().unwrap().contains("unknown kind `scd_type` (did you mean `scd_type2`?)"), "{v:#}");
    assert!(!run.stdout.contains("nil value"), "{}", run.stdout);
}

#[test]
fn a_failing_module_required_by_another_model_file_is_reported_once() {
    let p = Project::new();
    // `models/lib.lua` is a top-level file and `models/w.lua` requires it: it is evaluated for
    // each, and fails the same way both times.
    p.write("models/lib.lua", "local M = {}\nlocal t = nil\nM.v = t.x\nreturn M\n");
    p.write(
        "models/w.lua",
        "local lib = require(\"models.lib\")\ndefine_model { name = \"t.w\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n",
    );
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert_eq!(run.stdout.matches("attempt to index a nil value").count(), 1, "{}", run.stdout);
    assert!(run.stdout.contains("models/lib.lua:3: runtime error"), "{}", run.stdout);
    // The requiring file still says why it failed.
    assert!(run.stdout.contains("models/w.lua:1:") && run.stdout.contains("`models/lib.lua` failed to load"), "{}", run.stdout);
    assert!(run.stdout.contains("check failed: 2 errors"), "{}", run.stdout);
    // The module's own error first, the requiring file's after it, without a traceback; Lua's
    // `file:line:` is said once.
    let (own, knock_on) = (run.stdout.find("models/lib.lua:3:").unwrap(), run.stdout.find("models/w.lua:1:").unwrap());
    assert!(own < knock_on, "{}", run.stdout);
    assert!(!run.stdout[knock_on..].contains("stack traceback"), "{}", run.stdout);
    let line = run.stdout[own..].lines().next().unwrap_or_default();
    assert!(!line["models/lib.lua:3:".len()..].contains("models/lib.lua:3:"), "{line}");
}

#[test]
fn a_syntax_error_in_a_required_module_is_reported_first_with_its_location_once() {
    let p = Project::new();
    // `models/a.lua` sorts before the module it requires.
    p.write("models/z.lua", "local M = {}\nM.x = { 1, 2\nreturn M\n");
    p.write(
        "models/a.lua",
        "local z = require(\"models.z\")\ndefine_model { name = \"t.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n",
    );
    let run = p.run(&["check"]);
    run.expect_code(1);
    let first = run.stdout.lines().find(|l| l.starts_with("models/")).unwrap_or_default();
    assert!(first.starts_with("models/z.lua:3: syntax error:") && !first["models/z.lua:3:".len()..].contains("models/z.lua:3:"), "{}", run.stdout);
}

/// A `.sql` model over the sample's `raw.events`: a header of five lines (one continued), a
/// blank line, then the query from line 7, `tail` from line 9.
fn sql_model(tail: &str) -> String {
    format!(
        "-- name: mart.bad\n-- kind: full\n-- schema: region varchar,\n--         revenue bigint\n-- refs: raw.events\n\nSELECT region, -- per region\n       CAST(sum(amount) AS BIGINT) AS revenue\n{tail}\n"
    )
}

#[test]
fn a_sql_file_whose_query_no_parser_reads_is_reported_at_the_line_of_the_file() {
    // sqlparser and DuckDB both reject it, DuckDB at `BY` on line 10 of the file (4 of the query).
    assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
            p.write("models/bad.sql", &sql_model("FROM @ref(raw.events)\nGROUPY BY region"));
        },
        &["models/bad.sql:10: model `mart.bad`: DuckDB cannot parse SQL at line 4: syntax error at or near \"BY\""],
    );
}

#[test]
fn a_dynamic_pivot_is_refused_at_its_line_with_a_hint_to_list_its_values() {
    // DuckDB serialises no `PIVOT` without an `IN (…)` list (several statements to it), and its
    // own message ("Only SELECT statements can be serialized to json!") would not say why.
    let stderr = assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
            p.write("models/bad.sql", &sql_model("FROM (PIVOT @ref(raw.events) ON region USING count(*))"));
        },
        &[
            "models/bad.sql:9: model `mart.bad`: a dynamic `PIVOT` (one without an `IN (…)` list) at line 3 cannot be analysed",
            "hint: list the pivoted values, e.g. `PIVOT … ON k IN ('a', 'b') USING …`",
        ],
    );
    assert!(!stderr.contains("Only SELECT statements"), "{stderr}");
}

#[test]
fn a_sql_file_whose_query_does_not_bind_is_reported_at_the_line_of_the_file() {
    let p = sample_project();
    let apply_fails_with = |needle: &str| {
        let run = p.run(&["apply", "dev", "--yes"]);
        run.expect_code(1);
        assert!(run.stderr.contains(needle), "stderr lacks {needle:?}:\n{}", run.stderr);
    };
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("models/bad.sql", &sql_model("FROM @ref(raw.events)\nWHERE amount > nosuch\nGROUP BY region"));
    apply_fails_with("models/bad.sql:10: model `mart.bad`: the query does not bind: Binder Error: Referenced column \"nosuch\" not found");
    // A Lua model's query built with escapes (`\n`) is not in its file as it is: no line of the
    // file, the message gives the line of the query.
    fs_err::remove_file(p.root().join("models/bad.sql")).expect("rm");
    p.write(
        "models/bad.lua",
        "local raw = require(\"models.raw\")\ndefine_model {\n  name = \"mart.bad\",\n  kind = kind.full(),\n  schema = { { \"region\", \"varchar\" } },\n  query = \"SELECT region\\nFROM \" .. ref(raw.events) .. \"\\nWHERE nosuch\",\n}\n",
    );
    apply_fails_with(
        "models/bad.lua:2: model `mart.bad`: the query does not bind (line 3 of the query as `efmesh render` shows it): Binder Error: Referenced column \"nosuch\" not found",
    );
}

/// `models/bad.lua` over the sample's `raw.events`: a long string `:format`ted with the ref, its
/// first line on line 8 of the file; `tail` is line 4 of the query, line 11 of the file.
fn lua_model(tail: &str) -> String {
    format!(
        "local raw = require(\"raw\")\n-- revenue per region\ndefine_model {{\n  name = \"mart.bad\",\n  kind = kind.full(),\n  \
         schema = {{ {{ \"region\", \"varchar\" }}, {{ \"revenue\", \"bigint\" }} }},\n  query = ([[\n    SELECT region,\n           \
         CAST(sum(amount) AS BIGINT) AS revenue\n    FROM %s\n    {tail}\n  ]]):format(ref(raw.events)),\n}}\n"
    )
}

/// A Lua or Rhai query written in its file as it is (a long string `:format`ted with a `ref()`,
/// a Rhai backtick string with `${ref(…)}`) is reported at the line of the file an error is on,
/// as a `.sql` file's: a query no parser reads (`check`, `plan`, `apply`), one that does not
/// bind (`apply`'s contract), a column `check` cannot resolve.
#[test]
fn a_script_query_written_in_its_file_is_reported_at_the_line_of_the_file() {
    // `GROUPY` is read as an alias: DuckDB stops at `BY`, line 4 of the query, 11 of the file
    // (the `define_model` call is on line 3).
    let at_11 = "models/bad.lua:11: model `mart.bad`: DuckDB cannot parse SQL at line 4: syntax error at or near \"BY\"";
    assert_load_error(
        |p| {
            p.write("models/bad.lua", &lua_model("GROUPY BY region"));
        },
        &[at_11],
    );
    let p = sample_project();
    p.write("models/bad.lua", &lua_model("GROUPY BY region"));
    let check = p.run(&["check", "--json"]);
    check.expect_code(1);
    let v = check.json();
    let e = error_of(&v, "mart.bad");
    assert_eq!((&e["file"], &e["line"]), (&json!("models/bad.lua"), &json!(11)), "{v:#}");
    assert!(e["message"].as_str().is_some_and(|m| m.starts_with("DuckDB cannot parse SQL at line 4")), "{v:#}");
    // A function DuckDB does not have: `check` passes, `apply`'s contract refuses it at its line.
    p.write("models/bad.lua", &lua_model("GROUP BY nope_fn(region)"));
    p.run(&["check"]).expect_code(0);
    let apply = p.run(&["apply", "dev", "--yes"]);
    apply.expect_code(1);
    assert!(
        apply.stderr.contains("models/bad.lua:11: model `mart.bad`: the query does not bind: Catalog Error: Scalar Function with name nope_fn does not exist!"),
        "{}",
        apply.stderr
    );
    // A Rhai backtick string: `check`'s column error at line 2 of the query, 6 of the file.
    fs_err::remove_file(p.root().join("models/bad.lua")).expect("rm");
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,rhai}"));
    p.write(
        "models/col.rhai",
        "define_model(#{\n  name: \"mart.col\",\n  kind: kind::full(),\n  schema: [[\"region\", \"varchar\"], [\"n\", \"bigint\"]],\n  \
         query: `SELECT region,\n       count(amont) AS n\nFROM ${ref(\"raw.events\")}\nGROUP BY region`,\n});\n",
    );
    let check = p.run(&["check", "--json"]);
    check.expect_code(1);
    let v = check.json();
    let e = error_of(&v, "mart.col");
    assert_eq!((&e["file"], &e["line"], &e["sqlLine"], &e["column"]), (&json!("models/col.rhai"), &json!(6), &json!(2), &json!("amont")), "{v:#}");
    let text = p.run(&["check"]);
    assert!(text.stdout.contains("models/col.rhai:6: model `mart.col`: column `amont` is not declared by parent `raw.events`, at line 2"), "{}", text.stdout);
    // The same text written twice in the file (in a comment too) places no line: the error is at
    // the `define_model` line (7), naming the query's (2); not at line 9, nor 3.
    p.write(
        "models/col.rhai",
        "// the query:\n/*\nSELECT region,\n       count(amont) AS n\nFROM \n*/\ndefine_model(#{ name: \"mart.col\", kind: kind::full(), \
         schema: [[\"region\", \"varchar\"], [\"n\", \"bigint\"]],\n  query: `SELECT region,\n       count(amont) AS n\nFROM ${ref(\"raw.events\")}\n\
         GROUP BY region` });\n",
    );
    let v = p.run(&["check", "--json"]).json();
    let e = error_of(&v, "mart.col");
    assert_eq!((&e["line"], &e["sqlLine"]), (&json!(7), &json!(2)), "{v:#}");
}

/// The error of `check --json` (`v`) naming `model`.
#[track_caller]
fn error_of<'v>(v: &'v serde_json::Value, model: &str) -> &'v serde_json::Value {
    v["errors"].as_array().and_then(|errors| errors.iter().find(|e| e["model"] == model)).unwrap_or_else(|| panic!("no error of `{model}`: {v:#}"))
}

/// A Lua runtime error is one line, the error at its file:line, in every report (`check`,
/// `plan`, `apply`, `--json` or not); Lua's `stack traceback:` is `check --json`'s `traceback`
/// and the debug log's, never the message's. A Rhai error's `at file:line:col` call stack
/// likewise.
#[test]
fn a_script_error_is_one_line_with_its_call_stack_apart() {
    let p = Project::new();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,rhai}"));
    p.write(
        "models/e.lua",
        "local function helper(t)\n  return t.x.y\nend\ndefine_model {\n  name = \"z.e\",\n  kind = kind.full(),\n  schema = { { \"n\", \"bigint\" } },\n  \
         query = function() return \"SELECT \" .. helper({}) .. \" AS n\" end,\n}\n",
    );
    p.write("models/r.rhai", "fn helper(t) {\n  t.x.y\n}\nlet q = helper(#{});\n");
    let run = p.run(&["check", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let errors = v["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 2, "{v:#}");
    let (lua, rhai) = (&errors[0], &errors[1]);
    assert_eq!((&lua["file"], &lua["line"]), (&json!("models/e.lua"), &json!(2)), "{v:#}");
    assert_eq!(lua["message"], json!("runtime error: attempt to index a nil value (field 'x')"), "{v:#}");
    let traceback = lua["traceback"].as_str().unwrap_or_default();
    // Through the `query` function (line 8) that called `helper`.
    assert!(traceback.starts_with("stack traceback:") && traceback.contains("models/e.lua:8:"), "{v:#}");
    assert_eq!((&rhai["file"], &rhai["line"], &rhai["message"]), (&json!("models/r.rhai"), &json!(2), &json!("unknown property `x`")), "{v:#}");
    assert_eq!(rhai["traceback"], json!("at models/r.rhai:2:5 in `helper`\nat models/r.rhai:4:9"), "{v:#}");
    // The text of every command: the error's own line, no call stack.
    let lines = ["models/e.lua:2: runtime error: attempt to index a nil value (field 'x')\n", "models/r.rhai:2: unknown property `x`\n"];
    let check = p.run(&["check"]);
    for args in [&["plan", "dev"][..], &["apply", "dev", "--yes"], &["plan", "dev", "--json"]] {
        let run = p.run(args);
        run.expect_code(1);
        let out = format!("{}{}", run.stdout, run.stderr);
        assert!(!out.contains("stack traceback") && !out.contains("at models/r.rhai"), "`{}`: {out}", run.cmd);
        assert!(out.contains("models/e.lua:2: runtime error: attempt to index a nil value (field 'x')"), "`{}`: {out}", run.cmd);
    }
    for line in lines {
        assert!(check.stdout.contains(line), "{}", check.stdout);
    }
    assert!(!check.stdout.contains("stack traceback") && !check.stdout.contains("at models/r.rhai"), "{}", check.stdout);
    // `--log-level debug` logs it.
    let debug = p.run(&["--log-level", "debug", "check"]);
    assert!(debug.stderr.contains("stack traceback") && debug.stderr.contains("models/r.rhai:2:5"), "{}", debug.stderr);
}

#[test]
fn a_parser_error_after_multi_byte_characters_is_reported_at_its_own_line() {
    // DuckDB's own excerpt counts the comment's characters as bytes and names line 9 (3 of the
    // query); `FROM FROM` is on line 10 of the file, 4 of the query. sqlparser reads the query.
    let p = sample_project();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write(
        "models/bad.sql",
        &sql_model("-- 日本日本日本日本日本日本日本日本日本日本日本日本\nFROM @ref(raw.events) WHERE region = ANY (SELECT 1 FROM FROM)\nGROUP BY region"),
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/bad.sql:10: model `mart.bad`"), "{}", run.stderr);
    assert!(run.stderr.contains("syntax error at or near \"FROM\""), "{}", run.stderr);
}

#[test]
fn a_declared_type_that_would_end_the_statement_it_is_written_into_is_refused_at_load() {
    // Types are written into engine statements (`CAST(NULL AS <type>)` of the contract): one that
    // closes the cast and adds a statement never reaches the engine, and nothing changes.
    assert_load_error(
        |p| {
            p.write(
                "models/extra.lua",
                "define_model {\n  name = \"z.x\",\n  kind = kind.full(),\n  schema = { { \"n\", \"bigint); DROP VIEW dev__a.a; --\" } },\n  query = \"SELECT 1 AS n\",\n}\n",
            );
        },
        &["models/extra.lua:1", "model `z.x`", "schema entry 1 (`n`): type `bigint); DROP VIEW dev__a.a; --` closes a `)` it never opened"],
    );
}

#[test]
fn a_model_file_whose_name_is_not_utf8_is_an_error_not_a_removal() {
    // Left out of the globs (which match text), its models would be `removed` from the plan.
    use std::os::unix::ffi::OsStrExt;
    assert_load_error(
        |p| {
            let latin1 = std::ffi::OsStr::from_bytes(b"models/m\xe4rt.lua");
            fs_err::rename(p.root().join("models/c.lua"), p.root().join(latin1)).expect("rename");
        },
        &["models/m\u{FFFD}rt.lua", "the file name is not valid UTF-8"],
    );
}

#[test]
fn a_start_centuries_early_on_a_fine_grain_is_refused_not_listed() {
    // 1026 instead of 2026 on a 5-minute grain: about 105 million intervals, which the plan
    // would list one by one (gigabytes) before saying anything; `preview` finds its window
    // without listing them.
    let p = sample_project();
    p.write(
        "models/extra.lua",
        "local raw = require(\"models.raw\")\ndefine_model {\n  name = \"z.fine\",\n  kind = kind.incremental_by_time_range { time_column = \"event_at\", start = \"1026-01-01\", grain = \"5m\" },\n  schema = { { \"event_at\", \"timestamp\" } },\n  query = \"SELECT event_at FROM \" .. ref(raw.events) .. \" WHERE event_at >= @start AND event_at < @end\",\n}\n",
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("models/extra.lua:2: model `z.fine`: `start` 1026-01-01T00:00:00.000Z on grain `5m` gives ")
            && run.stderr.contains("intervals up to now (or its `end`), more than the 10000000 a model may have; is the `start` a typo?"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_dangling_link_named_like_a_model_is_an_error_and_one_named_otherwise_is_ignored() {
    let p = sample_project();
    std::os::unix::fs::symlink("/nonexistent/notes", p.root().join("models/notes.txt")).expect("link");
    p.run(&["plan", "dev"]).expect_code(0);
    // An editor's lock link (Emacs: `.#a.lua` → `user@host.pid`) is hidden: skipped.
    std::os::unix::fs::symlink("root@host.1234:1700000000", p.root().join("models/.#a.lua")).expect("link");
    p.run(&["plan", "dev"]).expect_code(0);
    std::os::unix::fs::symlink("/nonexistent/x", p.root().join("models/x.lua")).expect("link");
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/x.lua: cannot read it while looking for model files"), "{}", run.stderr);
}

#[test]
fn a_sql_models_kind_cron_and_target_errors_are_at_their_header_lines() {
    let p = Project::new();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.sql"));
    p.write(
        "models/bad.sql",
        "-- name: t.bad\n-- kind: incremental_by_time_range(time_column = d, start = yesterday)\n-- cron: every day\n-- target: parquett\n-- schema: d date\nSELECT DATE '2026-01-01' AS d\n",
    );
    let run = p.run(&["check"]);
    run.expect_code(1);
    let out = format!("{}{}", run.stdout, run.stderr);
    for needle in
        ["models/bad.sql:2: model `t.bad`: `start`", "models/bad.sql:3: model `t.bad`: ", "models/bad.sql:4: model `t.bad`: unknown target `parquett`"]
    {
        assert!(out.contains(needle), "lacks {needle:?}:\n{out}");
    }
}

/// An unknown kind option names every option the kind takes, sorted, after the one meant when a
/// name is close (it said only "unknown option `x` for kind `external`"): in a `.sql` model at
/// its `-- kind:` line, in a Lua model at its `define_model`; a kind without options says so.
#[test]
fn an_unknown_kind_option_lists_the_options_of_the_kind() {
    let p = Project::new();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("data/x.csv", "n\n1\n");
    p.write("models/ext.sql", "-- name: raw.x\n-- kind: external(path = data/x.csv, delimeter = ';')\n-- schema: n bigint\n");
    p.write("models/typo.sql", "-- name: raw.y\n-- kind: external(path = data/x.csv, zzzz = 1)\n-- schema: n bigint\n");
    p.write("models/full.lua", "define_model { name = \"s.f\", kind = kind.full { x = 1 }, schema = { { \"n\", \"bigint\" } }, query = \"SELECT 1 AS n\" }\n");
    let run = p.run(&["check"]);
    run.expect_code(1);
    let out = format!("{}{}", run.stdout, run.stderr);
    let options = "its options: `delimiter`, `format`, `header`, `hive_partitioning`, `null_markers`, `path`, `table`, `union_by_name`";
    for needle in [
        format!("models/ext.sql:2: model `raw.x`: unknown option `delimeter` for kind `external` (did you mean `delimiter`?); {options}"),
        format!("models/typo.sql:2: model `raw.y`: unknown option `zzzz` for kind `external`; {options}"),
        "models/full.lua:1: model `s.f`: unknown option `x` for kind `full`; kind `full` takes no options".to_string(),
    ] {
        assert!(out.contains(&needle), "lacks {needle:?}:\n{out}");
    }
}

/// A `.sql` model without a `-- schema:` or `-- kind:` line is told about that header line in
/// `.sql` words, at its `-- name:` line: it was "`define_model` needs a `schema`" (Lua's field)
/// with a hint about "(column, type) pairs".
#[test]
fn a_sql_model_missing_its_schema_or_kind_line_is_told_in_sql_terms() {
    let p = Project::new();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.sql"));
    p.write("models/no_schema.sql", "-- name: t.no_schema\n-- kind: full\nSELECT 1 AS n\n");
    p.write("models/no_kind.sql", "-- Daily counts.\n-- name: t.no_kind\n-- schema: n bigint\nSELECT 1 AS n\n");
    let run = p.run(&["check"]);
    run.expect_code(1);
    let out = format!("{}{}", run.stdout, run.stderr);
    for needle in [
        "models/no_schema.sql:1: model `t.no_schema`: missing header `-- schema: <column> <type>, …`\n  hint: declare the output columns as `name type` pairs, e.g. `-- schema: id bigint, day date`",
        "models/no_kind.sql:2: model `t.no_kind`: missing header `-- kind: <kind>`\n  hint: say how the model is built, e.g. `-- kind: full`",
    ] {
        assert!(out.contains(needle), "lacks {needle:?}:\n{out}");
    }
    assert!(!out.contains("define_model") && !out.contains("(column, type)"), "{out}");
}

/// dbt's Jinja in a model — `{{ ref('x') }}` in a `.sql` body, `{{ source(…) }}` in a Lua query,
/// `{{ this }}` in a Rhai one — is a load error naming the file:line and the model, saying efmesh
/// does not use Jinja and what the file's language writes instead (`@ref(…)` in `.sql`,
/// `ref("…")` in Lua and Rhai): it reached the engine's parser as SQL at plan.
#[test]
fn dbt_jinja_in_a_model_is_a_load_error_naming_its_line() {
    assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
            p.write("models/j.sql", "-- name: z.j\n-- kind: full\n-- schema: n bigint\nSELECT count(*) AS n\nFROM {{ ref('events') }}\n");
            p.write(
                "models/jl.lua",
                "define_model { name = \"z.jl\", kind = kind.full(), schema = { { \"n\", \"bigint\" } }, query = \"SELECT count(*) AS n\\nFROM {{ source('raw', 'events') }}\" }\n",
            );
            p.write(
                "models/jr.rhai",
                "define_model(#{ name: \"z.jr\", kind: kind::incremental_by_unique_key(#{ key: \"n\" }), schema: [[\"n\", \"bigint\"]], query: \"SELECT n FROM {{this}}\" });\n",
            );
        },
        &[
            "models/j.sql:5: model `z.j`: `{{ ref('events') }}` is Jinja (dbt's templating), which efmesh does not use: a model's query is plain SQL",
            "hint: write `@ref(<schema>.events)` (and list `<schema>.events` in `-- refs:`); a model's name is `<schema>.<table>`",
            "models/jl.lua:1: model `z.jl`: `{{ source('raw', 'events') }}` (line 2 of the query) is Jinja (dbt's templating), which efmesh does not use",
            "hint: a dbt source is a model of kind `external` here: declare `raw.events` as one (`kind = kind.external { table = \"raw.events\" }`), then read it with `ref(\"raw.events\")`",
            "models/jr.rhai:1: model `z.jr`: `{{this}}` (line 1 of the query) is Jinja",
            "hint: write `@this`",
        ],
    );
}

/// An operator DuckDB reads as one it does not have where efmesh's SQL parser reads two —
/// `3^-2` is DuckDB's `^-` (a `Catalog Error` when built) and sqlparser's `3 ^ -2`, one
/// fingerprint for the broken text and the fixed one — is a load error at its line with the
/// spelling to write; `3 * -2` (DuckDB's `*` then `-`) and a run in a comment are not.
#[test]
fn an_operator_duckdb_reads_as_one_it_lacks_is_a_load_error_at_its_line() {
    let stderr = assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
            p.write("models/g.sql", "-- name: z.g\n-- kind: full\n-- schema: m integer, n double\nSELECT 3*-2 AS m,\n  3^-2 AS n -- not 3%-2\n");
            p.write(
                "models/gl.lua",
                "define_model { name = \"z.gl\", kind = kind.full(), schema = { { \"n\", \"boolean\" } },\n  query = \"SELECT true AS n\\nWHERE 2!=-1\" }\n",
            );
        },
        &[
            "models/g.sql:5: model `z.g`: the query's `^-` is one operator to DuckDB, which has none of that name",
            "while efmesh's SQL parser reads `^ -`",
            "hint: write `^ -` (with a space)",
            "models/gl.lua:1: model `z.gl`: the query's `!=-` (line 2 of its query) is one operator to DuckDB",
            "hint: write `!= -` (with a space)",
        ],
    );
    assert_eq!(stderr.matches("is one operator to DuckDB").count(), 2, "{stderr}");
}

/// `//` written against a sign is DuckDB's `//` cut from it, read as a generic operator ranked
/// below `+` (`1 + 7//-2` is `(1 + 7) // -2`, -4, where `1 + 7 // -2` is -2), while efmesh's SQL
/// parser reads one tree for both: a load error at its line too, saying the operator is ranked
/// otherwise (it builds, computing something else than the spelling apart).
#[test]
fn an_operator_duckdb_ranks_otherwise_once_cut_from_its_sign_is_a_load_error() {
    let stderr = assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
            p.write("models/g.sql", "-- name: z.g\n-- kind: full\n-- schema: v integer, w integer\nSELECT 1 + 7 // -2 AS v,\n  1 + 7//-2 AS w\n");
        },
        &["models/g.sql:5: model `z.g`: the query's `//-` is `//` and `-` to DuckDB", "generic operator", "hint: write `// -` (with a space)"],
    );
    assert!(!stderr.contains("none of that name"), "{stderr}");
}

#[test]
fn columns_differing_only_in_case() {
    // `n` and `N` are one column to the engine: the view served `n`'s value under both names.
    assert_load_error(
        |p| {
            p.write("models/extra.lua", "\ndefine_model { name = \"z.x\", kind = kind.full(), schema = { { \"n\", \"bigint\" }, { \"N\", \"bigint\" } },\n  query = [[SELECT 1 AS n, 2 AS \"N\"]] }\n");
        },
        &["models/extra.lua:2", "model `z.x`", "columns `n` and `N` differ only in case"],
    );
}

#[test]
fn a_model_named_like_the_relation_an_external_reads_is_refused() {
    // Its `prod` view would replace the user's relation (`CREATE OR REPLACE VIEW`), and the
    // external would then read the model itself.
    assert_load_error(
        |p| {
            p.write(
                "models/clash.lua",
                "define_model { name = \"lz.ext\", kind = kind.external { table = \"landing.v\" }, schema = { { \"n\", \"bigint\" } } }\n\
                 define_model { name = \"landing.v\", kind = kind.view(), schema = { { \"n\", \"bigint\" } }, query = \"SELECT 1 AS n\" }\n",
            );
        },
        &["models/clash.lua:2", "model `landing.v` is named like the relation `landing.v` that external `lz.ext`", "rename the model"],
    );
}

#[test]
fn an_empty_macro_or_audit_file_is_told_what_definition_files_are_for() {
    for file in ["macros/empty.lua", "audits/empty.rhai"] {
        let stderr = assert_load_error(
            |p| {
                p.write(file, "-- nothing yet\n".replace("--", if file.ends_with(".rhai") { "//" } else { "--" }).as_str());
            },
            &[file, "this definition file defines nothing: it never called `define_macro`, `define_audit` or `define_signal`", "project.macros"],
        );
        assert!(!stderr.contains("defines no model"), "{stderr}");
    }
}

/// A query naming another model's table directly (by hand, or through a macro) instead of through
/// `ref` records no dependency and reads `prod`'s view in every environment: a load error at the
/// name's line, with the `ref` to write. Names come from the SQL's AST: a literal, a column or a
/// CTE named like a model is no read of it.
#[test]
fn a_query_naming_a_model_outside_ref_is_a_load_error() {
    let stderr = assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
            p.write("macros/m.lua", "define_macro(\"b_table\", function() return \"s.b\" end)\n");
            p.write(
                "models/x.sql",
                "-- name: z.x\n-- kind: full\n-- schema: n bigint\nWITH b AS (SELECT 1 AS id)\nSELECT count(*) AS n\nFROM @b_table() AS sb JOIN b USING (id)\nWHERE 's.b' <> ''\n",
            );
            p.write(
                "models/y.lua",
                "define_model { name = \"z.y\", kind = kind.full(), schema = { { \"n\", \"bigint\" } },\n  query = \"SELECT count(*) AS n\\nFROM dev__s.b\" }\n",
            );
        },
        &[
            "models/x.sql:6: model `z.x`: the query reads model `s.b` by the name `s.b` instead of through a reference: the name `s.b` is `prod`'s view",
            "hint: use `@ref(s.b)` (and list `s.b` in `-- refs:`)",
            "models/y.lua:1: model `z.y`: the query reads model `s.b` by the name `dev__s.b` (line 2 of its query)",
            "`dev__s.b` is environment `dev`'s view of it",
            "hint: use `ref(\"s.b\")`",
        ],
    );
    // The CTE `b` and the literal `'s.b'` are not reads of a model: one error per file.
    assert_eq!(stderr.matches("by the name").count(), 2, "{stderr}");
    // `TABLE s.b` and a catalog-qualified name read it too.
    assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
            p.write("models/t.sql", "-- name: z.t\n-- kind: full\n-- schema: n bigint\nSELECT 2 AS n UNION ALL TABLE s.b\n");
            p.write("models/c.sql", "-- name: z.c\n-- kind: full\n-- schema: n bigint\nSELECT n FROM efmesh.s.b\n");
        },
        &[
            "models/t.sql:4: model `z.t`: the query reads model `s.b` by the name `s.b`",
            "models/c.sql:4: model `z.c`: the query reads model `s.b` by the name `efmesh.s.b`",
        ],
    );
    // The catalog is the DuckDB file's name up to its first dot, as DuckDB names it; another
    // catalog (an attached database) is not the model's.
    let p = sample_project();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}").replace("efmesh.duckdb", "my.data.duckdb"));
    p.write("models/c.sql", "-- name: z.c\n-- kind: full\n-- schema: n bigint\nSELECT n FROM my.s.b\n");
    let check = p.run(&["check"]);
    check.expect_code(1);
    assert!(format!("{}{}", check.stdout, check.stderr).contains("by the name `my.s.b`"), "{}{}", check.stdout, check.stderr);
    p.write("models/c.sql", "-- name: z.c\n-- kind: full\n-- schema: n bigint\nSELECT n FROM other.s.b\n");
    let check = p.run(&["check"]);
    assert!(!format!("{}{}", check.stdout, check.stderr).contains("by the name"), "{}{}", check.stdout, check.stderr);
    // DuckDB names the database of `main.duckdb` (`temp…`, `system…`) `main_db`: a read through
    // that name is a read of the model too, and a schema of that name is refused.
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}").replace("efmesh.duckdb", "main.duckdb"));
    p.write("models/c.sql", "-- name: z.c\n-- kind: full\n-- schema: n bigint\nSELECT n FROM main_db.s.b\n");
    let check = p.run(&["check"]);
    check.expect_code(1);
    assert!(format!("{}{}", check.stdout, check.stderr).contains("by the name `main_db.s.b`"), "{}{}", check.stdout, check.stderr);
    p.write("models/c.sql", "-- name: main_db.c\n-- kind: full\n-- schema: n bigint\nSELECT 1 AS n\n");
    let check = p.run(&["check"]);
    check.expect_code(1);
    assert!(
        format!("{}{}", check.stdout, check.stderr).contains("models/c.sql:1: model `main_db.c`: the schema `main_db` of model `main_db.c` cannot hold models"),
        "{}{}",
        check.stdout,
        check.stderr
    );
}

/// What is not a model read by name loads: a CTE, a column and a literal named like a model, a
/// table function, and an external named like the relation it reads (the name reads what its
/// `ref` does).
#[test]
fn names_like_a_models_that_do_not_read_it_load() {
    let p = sample_project();
    p.write(
        "models/ok.lua",
        "define_model { name = \"landing.v\", kind = kind.external { table = \"landing.v\" }, schema = { { \"n\", \"bigint\" } } }\n\
         define_model { name = \"z.ok\", kind = kind.full(), schema = { { \"n\", \"bigint\" } },\n  \
         query = \"WITH b AS (SELECT 1 AS twice) SELECT s.twice AS n FROM (SELECT 's.b' AS label, twice FROM b) AS s, range(1) AS c UNION ALL SELECT n FROM landing.v\" }\n",
    );
    let out = rendered(&p, "z.ok");
    assert!(out.contains("FROM b"), "{out}");
}

/// A query naming a relation of efmesh's own storage — a model's physical table, as `plan
/// --json` shows it, or any other relation of schema `_efmesh` — records no dependency and keeps
/// reading that version after the model changes: a load error at the query's line naming the
/// name, with the `ref` to write when the name is a model's version.
#[test]
fn a_query_reading_efmesh_storage_by_name_is_a_load_error() {
    let stderr = assert_load_error(
        |p| {
            let physical = action(&p.plan("dev"), "s.a")["physical"].as_str().expect("the physical relation of `s.a`").to_string();
            assert!(physical.starts_with("\"_efmesh\".\"s__a__"), "{physical}");
            p.write(
                "models/r.lua",
                &format!("define_model {{ name = \"z.r\", kind = kind.full(), schema = {{ {{ \"id\", \"integer\" }} }},\n  query = [[SELECT id\nFROM {physical}]] }}\n"),
            );
            p.write(
                "models/u.lua",
                "define_model { name = \"z.u\", kind = kind.full(), schema = { { \"n\", \"bigint\" } },\n  query = \"SELECT count(*) AS n FROM efmesh._efmesh._efmesh_uses\" }\n",
            );
        },
        &[
            // Both queries are written in their files as they are: at the line of the name.
            "models/r.lua:3: model `z.r`: the query reads `_efmesh.s__a__",
            "`, a relation of efmesh's own storage (`_efmesh`), by its name instead of through a reference",
            "no dependency is recorded and the query keeps reading that version after the model changes",
            "hint: use `ref(\"s.a\")` (`_efmesh.s__a__",
            "models/u.lua:2: model `z.u`: the query reads `efmesh._efmesh._efmesh_uses`, a relation of efmesh's own storage (`_efmesh`)",
            "hint: read a model through a reference",
        ],
    );
    assert_eq!(stderr.matches("a relation of efmesh's own storage").count(), 2, "{stderr}");
    assert!(!stderr.contains("of its query"), "{stderr}");
}

/// An external declared over a relation of efmesh's own storage (a model's physical table, as
/// `plan --json` shows it) reads one version of the model by name, as a query would: a load
/// error at the external's file:line naming the relation, with the model to reference instead.
#[test]
fn an_external_over_a_relation_of_efmesh_storage_is_a_load_error() {
    assert_load_error(
        |p| {
            // As `plan --json` shows it, unquoted (an external's `table` is dotted identifiers).
            let physical = action(&p.plan("dev"), "s.a")["physical"].as_str().expect("the physical relation of `s.a`").replace('"', "");
            assert!(physical.starts_with("_efmesh.s__a__"), "{physical}");
            p.write(
                "models/x.lua",
                &format!(
                    "define_model {{ name = \"landing.x\", kind = kind.external {{ table = {physical:?} }}, schema = {{ {{ \"id\", \"integer\" }} }} }}\n"
                ),
            );
        },
        &[
            "models/x.lua:1: model `landing.x`: external `landing.x` reads `_efmesh.s__a__",
            "a relation of efmesh's own storage (`_efmesh`), by its name",
            "hint: drop this external and read model `s.a` through a reference",
        ],
    );
}

/// On a DuckDB engine without `[ducklake]`, `_efmesh_meta` and `_efmesh_ducklake` are schemas
/// like any other (efmesh makes neither there): a query reading them by name loads.
#[test]
fn meta_and_ducklake_schemas_are_not_efmesh_storage_on_duckdb_without_a_ducklake() {
    let p = sample_project();
    p.write(
        "models/m.lua",
        "define_model { name = \"z.m\", kind = kind.full(), schema = { { \"n\", \"bigint\" } },\n  query = \"SELECT count(*) AS n FROM _efmesh_meta.owners UNION ALL SELECT count(*) FROM _efmesh_ducklake.t\" }\n",
    );
    let out = rendered(&p, "z.m");
    assert!(out.contains("_efmesh_meta.owners") && out.contains("_efmesh_ducklake.t"), "{out}");
}

/// `ref()` placed inside a string literal inlines the relation's name there as text (an
/// external's `read_csv('…')` would end the literal: a parser error at build time only), and
/// inside a comment reads nothing: a load error at the call's file:line naming the model
/// referenced, in Lua, in Rhai and through a macro of a `.sql` model that quotes its argument.
#[test]
fn a_reference_inside_a_string_literal_or_a_comment_is_a_load_error() {
    assert_load_error(
        |p| {
            p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
            p.write(
                "models/lit.lua",
                "local raw = require(\"raw\")\ndefine_model { name = \"z.lit\", kind = kind.full(), schema = { { \"src\", \"varchar\" }, { \"n\", \"bigint\" } },\n  query = \"SELECT 'read from \" .. ref(raw.events) .. \"' AS src, count(*) AS n FROM \" .. ref(raw.events) }\n",
            );
            p.write(
                "models/com.lua",
                "define_model { name = \"z.com\", kind = kind.full(), schema = { { \"n\", \"bigint\" } },\n  query = \"SELECT count(*) AS n -- from \" .. ref(\"s.c\") .. \"\\nFROM \" .. ref(\"s.c\") }\n",
            );
            p.write(
                "models/r.rhai",
                "define_model(#{ name: \"z.rh\", kind: kind::full(), schema: [[\"t\", \"varchar\"]], query: \"SELECT '\" + ref(\"s.c\") + \"' AS t\" });\n",
            );
            p.write("macros/q.lua", "define_macro(\"quoted\", function(x) return \"'\" .. x .. \"'\" end)\n");
            p.write("models/q.sql", "-- name: z.q\n-- kind: full\n-- schema: t varchar\n-- refs: s.c\nSELECT @quoted(@ref(s.c)) AS t\n");
        },
        &[
            "models/lit.lua:3: model `z.lit`: the reference to model `raw.events` is inside a string literal of the query: a reference inside a string literal inlines the relation's name there as text: nothing is read",
            "hint: move it out of the quotes",
            "models/com.lua:2: model `z.com`: the reference to model `s.c` is inside a comment of the query",
            "models/r.rhai:1: model `z.rh`: the reference to model `s.c` is inside a string literal of the query",
            "models/q.sql:5: model `z.q`: the reference to model `s.c` is inside a string literal of the query",
        ],
    );
}

/// A `ref()` beside string literals — one holding `--`, one holding a doubled quote, an empty
/// one after it — and after a block comment is no reference inside a literal: the model loads,
/// builds and reads its parent.
#[test]
fn a_reference_beside_string_literals_loads_and_builds() {
    let p = sample_project();
    p.write(
        "models/beside.lua",
        "define_model { name = \"z.beside\", kind = kind.full(), schema = { { \"d\", \"varchar\" }, { \"n\", \"bigint\" } },\n  query = \"SELECT '--' || 'it''s' AS d, count(*) AS n /* c */ FROM \" .. ref(\"s.b\") .. \" WHERE label <> ''\" }\n",
    );
    p.run(&["check"]).expect_code(0);
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "z.beside")), vec![vec![Some("--it's".to_string()), Some("6".to_string())]]);
}
