//! `efmesh check`: load-time validation plus column resolution through the SQL AST, with no
//! database. A renamed parent column is caught through an alias, a CTE and a join; valid
//! projects (ours and the shipped examples) pass; the JSON shape and exit codes hold.

use crate::common::{BIN, Project, Run};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

/// Two external sources; `amount` is the column the tests rename.
fn raw(amount: &str) -> String {
    format!(
        r#"local M = {{}}
M.orders = define_model {{
  name = "raw.orders",
  kind = kind.external {{ path = "data/orders.csv" }},
  schema = {{ {{ "id", "bigint" }}, {{ "customer_id", "bigint" }}, {{ "{amount}", "bigint" }}, {{ "ordered_at", "timestamp" }} }},
}}
M.customers = define_model {{
  name = "raw.customers",
  kind = kind.external {{ path = "data/customers.csv" }},
  schema = {{ {{ "id", "bigint" }}, {{ "name", "varchar" }}, {{ "region", "varchar" }} }},
}}
return M
"#
    )
}

/// Models the test queries may read; each is written `ref("…")` in the Lua source.
const REFS: &[&str] = &["raw.orders", "raw.customers", "stg.orders", "core.named"];

/// A full model `name` with output columns `cols` (all `bigint`) and `query`, at line 2 of its
/// file (line 1 is a comment). Every model name of [`REFS`] in `query` becomes a `ref()`.
fn model(name: &str, cols: &[&str], query: &str) -> String {
    let schema = cols.iter().map(|c| format!("{{ \"{c}\", \"bigint\" }}")).collect::<Vec<_>>().join(", ");
    let query = REFS.iter().fold(query.to_string(), |q, r| q.replace(r, &format!("]] .. ref(\"{r}\") .. [[")));
    format!("-- {name}\ndefine_model {{\n  name = \"{name}\",\n  kind = kind.full(),\n  schema = {{ {schema} }},\n  query = [[\n{query}\n]],\n}}\n")
}

/// Reads a parent through an alias.
const THROUGH_ALIAS: &str = "SELECT o.id,\n       o.amount * 2 AS twice\nFROM   raw.orders AS o";
/// Reads a parent through a CTE that selects `*`, then a CTE with an explicit list.
const THROUGH_CTE: &str =
    "WITH o AS (SELECT * FROM raw.orders),\n     big AS (SELECT id, amount FROM o WHERE amount > 100)\nSELECT id, amount AS twice FROM big";
/// Reads a parent through a join.
const THROUGH_JOIN: &str = "SELECT c.id, sum(o.amount) AS twice\nFROM   raw.customers AS c\nJOIN   raw.orders AS o ON o.customer_id = c.id\nGROUP BY ALL";

/// A project whose `raw.orders` declares `amount` under the name `amount`, and one consumer.
fn project_with(query: &str) -> Project {
    let p = Project::new();
    p.write("models/raw.lua", &raw("amount"));
    p.write("models/mart.lua", &model("mart.m", &["id", "twice"], query));
    p
}

#[track_caller]
fn check(p: &Project) -> (Run, Value) {
    let run = p.run(&["check", "--json"]);
    let v = run.json();
    (run, v)
}

/// The project passes, then fails once `raw.orders.amount` is renamed `amount_cents`: one error
/// naming the model, the column, the parent, with a hint, at the line of the file the query's
/// line is on ([`model`] writes the query from line 7: `sql_line` is line `6 + sql_line`);
/// human output too.
#[track_caller]
fn assert_rename_caught(query: &str, sql_line: u64) {
    let p = project_with(query);
    let (run, v) = check(&p);
    run.expect_code(0);
    assert_eq!(v["ok"], json!(true), "{v:#}");

    p.write("models/raw.lua", &raw("amount_cents"));
    let (run, v) = check(&p);
    run.expect_code(1);
    assert_eq!(v["ok"], json!(false), "{v:#}");
    let errors = v["errors"].as_array().expect("errors");
    assert!(!errors.is_empty(), "{v:#}");
    for e in errors {
        assert_eq!(e["file"], json!("models/mart.lua"), "{v:#}");
        assert_eq!(e["line"], json!(6 + e["sqlLine"].as_u64().expect("sqlLine")), "{v:#}");
        assert_eq!(e["model"], json!("mart.m"), "{v:#}");
        assert_eq!(e["column"], json!("amount"), "{v:#}");
        assert_eq!(e["parent"], json!("raw.orders"), "{v:#}");
        assert_eq!(e["hint"], json!("did you mean `amount_cents`?"), "{v:#}");
        let message = e["message"].as_str().expect("message");
        assert!(message.contains("`amount`") && message.contains("`raw.orders`"), "{message}");
        assert!(!message.ends_with('.'), "STYLE: no trailing period: {message}");
    }
    assert_eq!(errors[0]["sqlLine"], json!(sql_line), "{v:#}");

    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(run.stdout.contains(&format!("models/mart.lua:{}: model `mart.m`: column `amount`", 6 + sql_line)), "{}", run.stdout);
    assert!(run.stdout.contains("`raw.orders`"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("at line {sql_line}, column")), "{}", run.stdout);
    assert!(run.stdout.contains("  hint: did you mean `amount_cents`?"), "{}", run.stdout);
    assert!(run.stdout.contains("check failed:"), "{}", run.stdout);
}

#[test]
fn check_catches_a_renamed_parent_column_through_an_alias() {
    assert_rename_caught(THROUGH_ALIAS, 2);
}

#[test]
fn check_catches_a_renamed_parent_column_through_a_cte() {
    assert_rename_caught(THROUGH_CTE, 2);
    // Through the `*` of the first CTE: the error is blamed on the parent the CTE reads.
    let p = project_with(THROUGH_CTE);
    p.write("models/raw.lua", &raw("amount_cents"));
    let (_, v) = check(&p);
    let message = v["errors"][0]["message"].as_str().expect("message");
    assert!(message.contains("CTE `o`") && message.contains("reads `*` from parent `raw.orders`"), "{message}");
}

#[test]
fn check_catches_a_renamed_parent_column_through_a_join() {
    assert_rename_caught(THROUGH_JOIN, 1);
}

#[test]
fn check_catches_a_renamed_column_of_an_embedded_parent() {
    let p = Project::new();
    p.write("models/raw.lua", &raw("amount"));
    p.write(
        "models/mid.lua",
        "define_model {\n  name = \"core.named\",\n  kind = kind.embedded(),\n  schema = { { \"id\", \"bigint\" }, { \"label\", \"varchar\" } },\n  query = \"SELECT id, name AS label FROM \" .. ref(\"raw.customers\"),\n}\n",
    );
    p.write("models/mart.lua", &model("mart.m", &["id", "twice"], "SELECT id, length(lable) AS twice\nFROM core.named"));
    let (run, v) = check(&p);
    run.expect_code(1);
    let e = &v["errors"][0];
    assert_eq!((&e["column"], &e["parent"], &e["hint"]), (&json!("lable"), &json!("core.named"), &json!("did you mean `label`?")), "{v:#}");
}

#[test]
fn check_passes_a_valid_project_with_star_and_expressions() {
    let p = Project::new();
    p.write("models/raw.lua", &raw("amount"));
    // The externals' files exist: `check` reads none, but warns of one missing
    // (`missing_source_file`, tests/it/lints.rs).
    p.write("data/orders.csv", "id,customer_id,amount,ordered_at\n");
    p.write("data/customers.csv", "id,name,region\n");
    p.write("models/all.lua", &model("stg.orders", &["id", "customer_id", "amount", "ordered_at"], "SELECT * FROM raw.orders"));
    p.write(
        "models/mart.lua",
        &model(
            "mart.m",
            &["region", "n", "total", "first_day", "share"],
            "WITH o AS (SELECT *, amount / 100.0 AS euros FROM stg.orders),\n\
             per AS (\n\
               SELECT c.region, count(*) AS n, CAST(sum(o.euros) AS BIGINT) AS total,\n\
                      min(CAST(ordered_at AS date)) AS first_day\n\
               FROM o JOIN raw.customers AS c ON c.id = o.customer_id\n\
               WHERE o.amount > 0 AND name NOT LIKE 'test%'\n\
               GROUP BY ALL\n\
               QUALIFY row_number() OVER (PARTITION BY region ORDER BY total DESC) = 1\n\
             )\n\
             SELECT region, n, total, first_day,\n\
                    round(100.0 * total / sum(total) OVER (), 1) AS share\n\
             FROM per\n\
             WHERE EXISTS (SELECT 1 FROM raw.orders x WHERE x.customer_id IN (SELECT id FROM raw.customers WHERE region = per.region))\n\
             ORDER BY share DESC",
        ),
    );
    // `ref()` spelled in Lua, with `cols()`: the rendered SQL is what is checked.
    p.write(
        "models/refs.lua",
        "define_model {\n  name = \"mart.r\",\n  kind = kind.view(),\n  schema = { { \"id\", \"bigint\" }, { \"name\", \"varchar\" } },\n  query = \"SELECT \" .. cols(\"raw.customers\", \"id\", \"name\") .. \" FROM \" .. ref(\"raw.customers\"),\n}\n",
    );
    let (run, v) = check(&p);
    run.expect_code(0);
    // No error; the one lint is `stg.orders`' `SELECT *` over the external `raw.orders`
    // (tests/it/lints.rs), a warning.
    let warnings = v["warnings"].as_array().expect("warnings");
    assert_eq!(
        warnings.iter().map(|w| (w["rule"].as_str(), w["model"].as_str())).collect::<Vec<_>>(),
        [(Some("select_star_external"), Some("stg.orders"))],
        "{v:#}"
    );
    let mut rest = v.clone();
    rest["warnings"] = json!([]);
    assert_eq!(rest, json!({"apiVersion": 1, "ok": true, "models": 5, "errors": [], "warnings": [], "unchecked": []}));
    let run = p.run(&["check"]);
    run.expect_code(0);
    assert!(run.stdout.ends_with("ok: 5 models checked, 1 warning\n"), "{}", run.stdout);
}

#[test]
fn check_opens_no_database() {
    for query in [THROUGH_ALIAS, "SELECT id, nope AS twice FROM raw.orders"] {
        let p = project_with(query);
        p.run(&["check"]);
        p.run(&["check", "--json"]);
        assert!(!p.engine_path().exists(), "check created the DuckDB file");
        assert!(!p.state_path().exists(), "check created the state store");
        let mut entries: Vec<String> = fs_err::read_dir(p.root()).expect("ls").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        entries.sort();
        // The load and project caches (docs/load-cache.md) are the one thing a load writes; the
        // second check restored the project and recorded its inputs' stats.
        assert_eq!(entries, [".efmesh", "efmesh.toml", "models"], "check wrote files");
        let mut cache: Vec<String> =
            fs_err::read_dir(p.root().join(".efmesh")).expect("ls").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        cache.sort();
        assert_eq!(cache, ["input-stats", "load-cache", "project-cache"], "check wrote files");
    }
}

#[test]
fn check_json_shape_and_exit_codes() {
    // Two problems: an unknown column with no close name, and an unknown qualifier.
    let p = project_with("SELECT o.id, zzz AS twice FROM raw.orders AS o WHERE q.id > 0");
    let (run, v) = check(&p);
    run.expect_code(1);
    let keys: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, ["apiVersion", "ok", "models", "errors", "warnings", "unchecked"]);
    assert_eq!((&v["ok"], &v["models"]), (&json!(false), &json!(3)));
    let errors = v["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 2, "{v:#}");
    let zzz = &errors[0];
    assert_eq!(zzz["column"], json!("zzz"));
    assert_eq!(zzz["parent"], json!("raw.orders"));
    assert_eq!((&zzz["sqlLine"], &zzz["sqlColumn"]), (&json!(1), &json!(14)));
    assert_eq!(zzz["hint"].as_str().map(|h| h.starts_with("`raw.orders` declares `id`")), Some(true), "{v:#}");
    let q = &errors[1];
    assert_eq!(q["column"], json!("q.id"));
    assert!(q.get("parent").is_none(), "no parent to blame: {v:#}");
    for e in errors {
        for key in ["file", "line", "model", "message"] {
            assert!(e.get(key).is_some(), "`{key}` missing: {v:#}");
        }
    }
    // Usage errors exit 1 too, never 2.
    p.run(&["check", "--nope"]).expect_code(1);
}

#[test]
fn check_reports_load_errors_in_the_same_shape() {
    let p = project_with(THROUGH_ALIAS);
    p.write("models/typo.lua", &model("mart.t", &["n"], "SELECT count(*) AS n FROM ]] .. ref(\"raw.order\") .. [["));
    let (run, v) = check(&p);
    run.expect_code(1);
    assert_eq!((&v["ok"], &v["models"]), (&json!(false), &json!(0)));
    let e = &v["errors"][0];
    assert_eq!((&e["file"], &e["model"]), (&json!("models/typo.lua"), &json!("mart.t")), "{v:#}");
    assert!(e["line"].as_u64().is_some_and(|l| l > 0), "{v:#}");
    assert!(e["message"].as_str().is_some_and(|m| m.contains("unknown ref `raw.order`")), "{v:#}");
    assert!(e["hint"].as_str().is_some_and(|h| h.contains("did you mean `raw.orders`?")), "{v:#}");
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(run.stdout.contains("models/typo.lua:") && run.stdout.contains("model `mart.t`: unknown ref `raw.order`"), "{}", run.stdout);
    assert!(run.stdout.contains("check failed: 1 error (the project did not load)"), "{}", run.stdout);

    // A missing config is an error in the same shape, with its hint.
    let empty = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN).current_dir(empty.path()).args(["check", "--json"]).stdin(Stdio::null()).output().expect("spawn");
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["errors"][0]["file"], json!("efmesh.toml"), "{v:#}");
    assert!(v["errors"][0]["hint"].as_str().is_some_and(|h| h.contains("efmesh init")), "{v:#}");
}

/// `check` on a shipped example: it must pass (no false positive on real models) and leave no
/// database behind.
fn check_example(name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    let db = dir.join("efmesh.duckdb");
    let state = dir.join("efmesh.state.sqlite");
    let before = (db.exists(), state.exists());
    let work = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .current_dir(work.path())
        .arg("--config")
        .arg(dir.join("efmesh.toml"))
        .args(["check", "--json"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn efmesh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "check {name}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["ok"], json!(true), "{v:#}");
    assert!(v["models"].as_u64().is_some_and(|n| n >= 6), "{v:#}");
    assert_eq!(v["unchecked"], json!([]), "every model's SQL is parsed and resolved: {v:#}");
    assert_eq!(v["warnings"], json!([]), "no time-range model of a shipped example re-reads a whole relation per batch: {v:#}");
    assert_eq!((db.exists(), state.exists()), before, "check created a database in examples/{name}");
}

#[test]
fn check_passes_the_flights_example() {
    check_example("flights");
}

#[test]
fn check_passes_the_hospital_example() {
    check_example("hospital");
}

#[test]
fn check_passes_the_hospital_portable_example() {
    check_example("hospital_portable");
}

#[test]
fn a_misspelt_ref_beside_cols_is_one_error_and_cols_without_its_ref_is_named() {
    let p = project_with(THROUGH_ALIAS);
    // `cols()` of `raw.orders`, but the ref misspelt: only the ref is wrong.
    p.write(
        "models/typo.lua",
        "define_model { name = \"mart.t\", kind = kind.full(), schema = { { \"id\", \"bigint\" } },\n  query = \"SELECT \" .. cols(\"raw.orders\", \"id\") .. \" FROM \" .. ref(\"raw.order\") }\n",
    );
    let (run, v) = check(&p);
    run.expect_code(1);
    let messages: Vec<&str> = v["errors"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(messages, ["unknown ref `raw.order`"], "{v:#}");
    // Every ref known, and `cols()` of a model the query does not ref: that is the error.
    p.write(
        "models/typo.lua",
        "define_model { name = \"mart.t\", kind = kind.full(), schema = { { \"id\", \"bigint\" } },\n  query = \"SELECT \" .. cols(\"raw.orders\", \"id\") .. \" FROM \" .. ref(\"mart.m\") }\n",
    );
    let (run, v) = check(&p);
    run.expect_code(1);
    assert!(v["errors"][0]["message"].as_str().is_some_and(|m| m.contains("`cols()` names `raw.orders`, which the query never `ref`s")), "{v:#}");
}

#[test]
fn a_query_the_engine_cannot_parse_fails_check_one_only_the_engine_parses_is_unchecked() {
    let p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("models/raw.lua", &raw("amount"));
    // sqlparser and DuckDB both reject it: `plan` would stop on it, so `check` fails.
    p.write("models/bad.sql", "-- name: mart.bad\n-- kind: full\n-- schema: id bigint, n bigint\n-- refs: raw.orders\nSELECT id, count(*) AS n\nFROM @ref(raw.orders)\nGROUPY BY id\n");
    // Only DuckDB parses it (`USING SAMPLE`): columns unchecked, a warning, not an error.
    p.write(
        "models/sample.sql",
        "-- name: mart.sample\n-- kind: full\n-- schema: id bigint\n-- refs: raw.orders\nSELECT id FROM @ref(raw.orders) USING SAMPLE 10%\n",
    );
    let (run, v) = check(&p);
    run.expect_code(1);
    let errors = v["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{v:#}");
    assert_eq!((&errors[0]["file"], &errors[0]["model"]), (&json!("models/bad.sql"), &json!("mart.bad")), "{v:#}");
    assert!(errors[0]["message"].as_str().is_some_and(|m| m.starts_with("DuckDB cannot parse SQL at line 3: syntax error at or near")), "{v:#}");
    // Line 3 of the query is line 7 of the file.
    assert_eq!(errors[0]["line"], json!(7), "{v:#}");
    let unchecked: Vec<&str> = v["unchecked"].as_array().expect("unchecked").iter().filter_map(|u| u["model"].as_str()).collect();
    assert_eq!(unchecked, ["mart.sample"], "{v:#}");
    let text = p.run(&["check"]);
    text.expect_code(1);
    assert!(text.stdout.contains("models/bad.sql:7: model `mart.bad`: DuckDB cannot parse SQL"), "{}", text.stdout);
    // Without it the project passes, the DuckDB-only query still unchecked.
    fs_err::remove_file(p.root().join("models/bad.sql")).expect("rm");
    let (run, v) = check(&p);
    run.expect_code(0);
    assert_eq!(v["unchecked"].as_array().map(Vec::len), Some(1), "{v:#}");
}

#[test]
fn model_globs_that_match_no_file_are_an_error_not_an_empty_project() {
    let p = Project::new();
    p.write("models/one.lua", "define_model { name = \"t.one\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    p.apply("dev");
    // A typo in the globs: every command that loads the project stops, naming the globs; the
    // applied environment is not planned as if every model had been removed.
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**", "modls/**"));
    for args in [&["check", "--json"][..], &["plan", "dev", "--json"], &["apply", "dev", "--yes", "--json"]] {
        let run = p.run(args);
        run.expect_code(1);
        let out = format!("{}{}", run.stdout, run.stderr);
        assert!(out.contains("no model file matches `[project] models` (`modls/**/*.lua`)"), "{args:?}: {out}");
    }
    let text = p.run(&["plan", "dev"]);
    assert!(text.stderr.contains("hint: the globs are relative to the directory of"), "{}", text.stderr);
    // Fixed: nothing changed meanwhile.
    p.write("efmesh.toml", crate::common::CONFIG);
    let v = p.run(&["plan", "dev", "--json"]).json();
    assert_eq!(v["hasChanges"], json!(false), "{v:#}");
}

/// `check --json`'s errors as (file, line, message), sorted.
fn errors_at(v: &Value) -> Vec<(String, u64, String)> {
    let mut at: Vec<(String, u64, String)> = v["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| (e["file"].as_str().unwrap_or("").to_string(), e["line"].as_u64().unwrap_or(0), e["message"].as_str().unwrap_or("").to_string()))
        .collect();
    at.sort();
    at
}

/// Globs with brace groups are normalized inside each group: `./` in an alternative matched
/// nothing, and the models it should have found were silently planned as removed. Both
/// directories' models load; a `..` alternative is a configuration error naming the key.
#[test]
fn a_brace_glob_with_dot_slash_alternatives_finds_its_models() {
    let p = Project::new();
    p.write("models/a/one.lua", "define_model { name = \"t.one\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    p.write("models/b/two.lua", "define_model { name = \"t.two\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 2 AS x\" }\n");
    p.write("efmesh.toml", &crate::common::CONFIG.replace("\"models/**/*.lua\"", "\"{./models/a/*.lua,models/b/*.lua}\""));
    let (run, v) = check(&p);
    run.expect_code(0);
    assert_eq!(v["models"], json!(2), "{v:#}");
    // Both are planned (as added), neither as removed.
    let plan = p.plan("dev");
    assert_eq!(crate::common::actions(&plan).len(), 2, "{plan:#}");
    crate::common::action(&plan, "t.one");
    crate::common::action(&plan, "t.two");
    p.write("efmesh.toml", &crate::common::CONFIG.replace("\"models/**/*.lua\"", "\"{models/a/*.lua,../b/*.lua}\""));
    let run = p.run(&["check"]);
    run.expect_code(1);
    let out = format!("{}{}", run.stdout, run.stderr);
    assert!(out.contains("`project.models` glob `{models/a/*.lua,../b/*.lua}` (its brace alternative `../b/*.lua`) leaves the project directory"), "{out}");
}

/// A NUL byte in a model file passed `check` (Lua keeps it inside a string or a comment) and
/// reached the engine inside the SQL: it is a load error at the file and line of the first one,
/// in a `.sql` and a Lua model alike.
#[test]
fn a_nul_byte_in_a_model_file_is_a_load_error_at_its_line() {
    let p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    let lua = "-- a\ndefine_model { name = \"t.a\", kind = kind.full(), schema = { { \"x\", \"varchar\" } },\n  query = \"SELECT 'a\0b' AS x\" }\n";
    let sql = "-- name: t.b\n-- kind: full\n-- schema: x integer\n\nSELECT 1 AS x -- \0\n";
    p.write("models/a.lua", lua);
    p.write("models/b.sql", sql);
    let (run, v) = check(&p);
    run.expect_code(1);
    let at: Vec<(String, u64)> = errors_at(&v).into_iter().filter(|(_, _, m)| m.contains("NUL byte")).map(|(f, l, _)| (f, l)).collect();
    assert_eq!(at, [("models/a.lua".to_string(), 3), ("models/b.sql".to_string(), 5)], "{v:#}");
    let text = p.run(&["check"]);
    text.expect_code(1);
    assert!(text.stdout.contains("models/b.sql:5: the file holds a NUL byte"), "{}", text.stdout);
    // Without them, the project passes.
    p.write("models/a.lua", &lua.replace('\0', ""));
    p.write("models/b.sql", &sql.replace('\0', ""));
    check(&p).0.expect_code(0);
}

/// `.sql` model faults are reported at their own line, not at the `-- name:` line: an empty
/// `-- schema:` at its header line; a body that is no query (`EXPLAIN SELECT …`) at the line
/// where it starts, by `check` and by `plan`.
#[test]
fn sql_model_faults_are_reported_at_their_line() {
    let p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("models/ok.sql", "-- name: t.ok\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x\n");
    p.write("models/a.sql", "-- name: t.a\n-- kind: full\n-- schema:\n\nSELECT 1 AS x\n");
    let (run, v) = check(&p);
    run.expect_code(1);
    let at = errors_at(&v);
    assert_eq!(at.len(), 1, "{v:#}");
    assert_eq!((at[0].0.as_str(), at[0].1), ("models/a.sql", 3), "{v:#}");
    assert!(at[0].2.starts_with("`schema`: declares no columns"), "{v:#}");
    p.remove("models/a.sql");
    p.write("models/b.sql", "-- name: t.b\n-- kind: full\n-- schema: x integer\n\n\nEXPLAIN SELECT 1 AS x\n");
    let (run, v) = check(&p);
    run.expect_code(1);
    let at = errors_at(&v);
    assert_eq!(at.len(), 1, "{v:#}");
    assert_eq!((at[0].0.as_str(), at[0].1), ("models/b.sql", 6), "{v:#}");
    assert!(at[0].2.contains("found an `EXPLAIN SELECT` statement"), "{v:#}");
    let plan = p.run(&["plan", "dev"]);
    plan.expect_code(1);
    assert!(plan.stderr.contains("models/b.sql:6: model `t.b`: expected one query"), "{}", plan.stderr);
}

#[test]
fn an_audit_reading_a_column_the_model_does_not_declare_fails_check_at_the_audit_line() {
    let p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("models/raw.lua", &raw("amount"));
    // Line 6: a misspelt column of the model itself; line 7: a field `raw.customers` lacks.
    p.write(
        "models/mart.lua",
        "define_model {\n  name = \"mart.m\",\n  kind = kind.full(),\n  schema = { { \"id\", \"bigint\" }, { \"customer_id\", \"bigint\" } },\n  audits = {\n    audit.not_null(\"id\", \"customerid\"),\n    audit.relationships { column = \"customer_id\", to = \"raw.customers\", field = \"customer\" },\n    audit.unique(\"id\"),\n  },\n  query = \"SELECT id, customer_id FROM \" .. ref(\"raw.orders\"),\n}\n",
    );
    // A `.sql` model's audits line.
    p.write(
        "models/s.sql",
        "-- name: mart.s\n-- kind: full\n-- schema: id bigint\n-- audits: not_null(idd)\n-- refs: raw.orders\nSELECT id FROM @ref(raw.orders)\n",
    );
    let (run, v) = check(&p);
    run.expect_code(1);
    let errors: Vec<(String, u64, String, String)> = v["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| {
            (
                e["file"].as_str().unwrap().to_string(),
                e["line"].as_u64().unwrap(),
                e["column"].as_str().unwrap().to_string(),
                e["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(errors.len(), 3, "{v:#}");
    assert_eq!((errors[0].0.as_str(), errors[0].1, errors[0].2.as_str()), ("models/mart.lua", 6, "customerid"), "{v:#}");
    assert_eq!(errors[0].3, "audit `not_null(id, customerid)`: column `customerid` is not declared by the model", "{v:#}");
    assert_eq!(v["errors"][0]["hint"], "did you mean `customer_id`?", "{v:#}");
    assert_eq!((errors[1].0.as_str(), errors[1].1, errors[1].2.as_str()), ("models/mart.lua", 7, "customer"), "{v:#}");
    assert_eq!(
        errors[1].3, "audit `relationships(customer_id, raw.customers, field = customer)`: column `customer` is not declared by model `raw.customers`",
        "{v:#}"
    );
    assert_eq!(v["errors"][1]["parent"], "raw.customers", "{v:#}");
    assert_eq!((errors[2].0.as_str(), errors[2].1, errors[2].2.as_str()), ("models/s.sql", 4, "idd"), "{v:#}");
    let text = p.run(&["check"]);
    assert!(text.stdout.contains("models/mart.lua:6: model `mart.m`: audit `not_null(id, customerid)`: column `customerid`"), "{}", text.stdout);
    // Spelt right, the project passes.
    p.write("models/mart.lua", &p.read("models/mart.lua").replace("\"customerid\"", "\"customer_id\"").replace("field = \"customer\"", "field = \"id\""));
    p.write("models/s.sql", &p.read("models/s.sql").replace("not_null(idd)", "not_null(id)"));
    let (run, v) = check(&p);
    run.expect_code(0);
    assert_eq!(v["errors"], json!([]), "{v:#}");
}

/// Every built-in audit, on every kind of relation they are used on (an external, a seed, a
/// time-range model, an `scd_type2` model's managed columns, a model an audit refs), plus a
/// `.sql` audit with an expression argument and one qualifying the model by its name: `check`
/// finds nothing, and `apply` runs them all and passes — no false finding.
#[test]
fn every_built_in_audit_on_every_kind_passes_check_when_its_columns_exist() {
    let p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("data/orders.csv", "id,customer_id,amount,ordered_at\n1,1,5,2026-01-01 10:00:00\n2,2,7,2026-01-02 11:00:00\n");
    p.write("seeds/regions.csv", "region,label\nN,north\nS,south\n");
    p.write("audits/pos.sql", "-- name: positive_expr\n-- params: expr\nSELECT * FROM @this_model WHERE NOT (@expr > 0)\n");
    p.write("audits/own.sql", "-- name: own_name\n-- params: column\nSELECT @this_model.@column FROM @this_model WHERE @this_model.@column IS NULL\n");
    p.write(
        "models/all.lua",
        r#"local orders = define_model { name = "raw.orders", kind = kind.external { path = "data/orders.csv" },
  schema = { { "id", "bigint" }, { "customer_id", "bigint" }, { "amount", "bigint" }, { "ordered_at", "timestamp" } },
  audits = { audit.not_null("id", "amount"), audit.unique("id"), audit.accepted_range { column = "amount", min = 0 } } }
local regions = define_model { name = "raw.regions", kind = kind.seed { path = "seeds/regions.csv" },
  schema = { { "region", "varchar" }, { "label", "varchar" } },
  audits = { audit.accepted_values { column = "region", values = { "N", "S" } }, audit.row_count { min = 1 } } }
define_model { name = "m.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", ["end"] = "2026-01-03" }, grain = { "day" },
  schema = { { "day", "timestamp" }, { "n", "bigint" } },
  audits = { audit.no_gaps { column = "day", grain = "day" }, audit.contiguous("n"), audit.expression("n >= 0") },
  query = "SELECT CAST(date_trunc('day', ordered_at) AS TIMESTAMP) AS day, count(*) AS n FROM " .. ref(orders) .. " WHERE ordered_at >= @start AND ordered_at < @end GROUP BY 1" }
define_model { name = "m.hist", kind = kind.scd_type2 { key = "id", columns = { "amount" } },
  schema = { { "id", "bigint" }, { "amount", "bigint" } },
  audits = { audit.not_null("valid_from"), audit.unique("id", "valid_from"), audit.relationships { column = "id", to = "raw.orders" } },
  query = "SELECT id, amount FROM " .. ref(orders) }
"#,
    );
    p.write(
        "models/s.sql",
        "-- name: m.s\n-- kind: full\n-- schema: id bigint, amount bigint\n-- audits: positive_expr(amount * 2), own_name(id), relationships(column = id, to = raw.orders, field = [id])\n-- refs: raw.orders\nSELECT id, amount FROM @ref(raw.orders)\n",
    );
    let (run, v) = check(&p);
    run.expect_code(0);
    assert_eq!((&v["errors"], &v["unchecked"]), (&json!([]), &json!([])), "{v:#}");
    let applied = p.run(&["apply", "dev", "--yes", "--json"]);
    applied.expect_code(0);
}

/// `check` compares each query's output columns with the declared schema as `apply`'s contract
/// does — a column not declared, one declared but not returned, one returned twice, the same
/// columns in another order — and finds nothing where the output is not certain or is right
/// (`* EXCLUDE`, `* REPLACE`, `alias.*`, a union, a CTE renaming in another case, `COLUMNS(…)`,
/// semi and anti joins, qualified `EXCLUDE`s keeping the other side's column, a `REPLACE` of a
/// name both sides have, a subquery whose repeated name the engine renames).
#[test]
fn check_finds_the_output_columns_apply_would_refuse_and_no_others() {
    let p = Project::new();
    p.write(
        "models/m.lua",
        r#"local p = define_model { name = "s.p", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } },
  query = "SELECT CAST(1 AS BIGINT) AS id, CAST(2 AS BIGINT) AS a, 'x' AS b" }
define_model { name = "s.ex", kind = kind.full(), schema = { { "id", "bigint" }, { "b", "varchar" } }, query = "SELECT * EXCLUDE (a) FROM " .. ref(p) }
define_model { name = "s.rep", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT * REPLACE (a + 1 AS a) FROM " .. ref(p) }
define_model { name = "s.star", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT p.* FROM " .. ref(p) .. " AS p" }
define_model { name = "s.un", kind = kind.full(), schema = { { "id", "bigint" } }, query = "SELECT id FROM " .. ref(p) .. " UNION ALL SELECT a FROM " .. ref(p) }
define_model { name = "s.cte", kind = kind.full(), schema = { { "ID", "bigint" }, { "n", "bigint" } }, query = "WITH c AS (SELECT id AS ID FROM " .. ref(p) .. ") SELECT ID, count(*) AS n FROM c GROUP BY ALL" }
define_model { name = "s.cols", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" } }, query = "SELECT COLUMNS('id|a') FROM " .. ref(p) }
define_model { name = "s.swap", kind = kind.full(), schema = { { "n", "bigint" }, { "total", "bigint" } }, query = "SELECT count(*) AS total, sum(a) AS n FROM " .. ref(p) }
define_model { name = "s.extra", kind = kind.full(), schema = { { "n", "bigint" } }, query = "SELECT count(*) AS n, 1 AS x FROM " .. ref(p) }
define_model { name = "s.missing", kind = kind.full(), schema = { { "n", "bigint" }, { "m", "bigint" } }, query = "SELECT count(*) AS n FROM " .. ref(p) }
local q = define_model { name = "s.q", kind = kind.full(), schema = { { "qid", "bigint" } }, query = "SELECT CAST(1 AS BIGINT) AS qid" }
define_model { name = "s.semi", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT * FROM " .. ref(p) .. " AS p SEMI JOIN " .. ref(q) .. " AS q ON p.id = q.qid" }
define_model { name = "s.anti", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT * FROM " .. ref(p) .. " AS p ANTI JOIN " .. ref(q) .. " AS q ON p.id = q.qid" }
define_model { name = "s.exq", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT * EXCLUDE (q.qid) FROM " .. ref(p) .. " AS p JOIN " .. ref(q) .. " AS q ON p.id = q.qid" }
define_model { name = "s.dup", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" } }, query = "SELECT l.id, l.a, r.a FROM " .. ref(p) .. " AS l JOIN " .. ref(p) .. " AS r USING (id)" }
define_model { name = "s.dupstar", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT * FROM " .. ref(p) .. " AS l JOIN " .. ref(p) .. " AS r USING (id)" }
define_model { name = "s.dupsub", kind = kind.full(), schema = { { "a", "bigint" }, { "a_1", "bigint" } }, query = "SELECT * FROM (SELECT l.a, r.a FROM " .. ref(p) .. " AS l JOIN " .. ref(p) .. " AS r USING (id)) AS s" }
define_model { name = "s.exkeep", kind = kind.full(), schema = { { "id", "bigint" }, { "b", "varchar" }, { "a", "bigint" } }, query = "SELECT * EXCLUDE (l.a, r.id, r.b) FROM " .. ref(p) .. " AS l JOIN " .. ref(p) .. " AS r ON l.id = r.id" }
define_model { name = "s.repdup", kind = kind.full(), schema = { { "id", "bigint" }, { "a", "bigint" }, { "b", "varchar" } }, query = "SELECT * EXCLUDE (r.id, r.b) REPLACE (l.a + r.a AS a) FROM " .. ref(p) .. " AS l JOIN " .. ref(p) .. " AS r ON l.id = r.id" }
"#,
    );
    let (run, v) = check(&p);
    run.expect_code(1);
    let found: Vec<(&str, u64, &str, &str)> = v["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| (e["model"].as_str().unwrap(), e["line"].as_u64().unwrap(), e["column"].as_str().unwrap(), e["message"].as_str().unwrap()))
        .collect();
    assert_eq!(
        found,
        [
            ("s.swap", 9, "n", "columns are returned in another order: declared (n, total), returned (total, n)"),
            ("s.extra", 10, "x", "the query returns column `x`, which the schema does not declare"),
            ("s.missing", 11, "m", "declared column `m` is not returned by the query"),
            ("s.dup", 16, "a", "the query returns column `a` more than once (name each output column once)"),
            ("s.dupstar", 17, "a", "the query returns column `a` more than once (name each output column once)"),
            ("s.dupstar", 17, "b", "the query returns column `b` more than once (name each output column once)"),
        ],
        "{v:#}"
    );
    // `apply`'s contract refuses exactly those, in the same words, before building anything.
    let apply = p.run(&["apply", "dev", "--yes"]);
    apply.expect_code(1);
    let refused: Vec<&str> = apply.stderr.lines().filter(|l| l.starts_with("  models/m.lua:")).collect();
    assert_eq!(refused.len(), 6, "{}", apply.stderr);
    for model in ["`s.swap`", "`s.extra`", "`s.missing`", "`s.dup`", "`s.dupstar`"] {
        assert!(refused.iter().any(|l| l.contains(model)), "{model}: {}", apply.stderr);
    }
    for (model, column) in [("s.dup", "a"), ("s.dupstar", "a"), ("s.dupstar", "b")] {
        let said = format!("model `{model}`: the query returns column `{column}` more than once");
        assert!(refused.iter().any(|l| l.contains(&said)), "{said}: {}", apply.stderr);
    }
}
