//! `incremental_by_unique_key`: the first apply fills the table, `efmesh run` upserts the query's
//! rows by key (changed rows replaced, new rows added, rows absent from the query kept), a NULL or
//! duplicate key is refused with the table unchanged, and the kind is the same model (same
//! fingerprint) in Lua, Rhai and SQL. `run` refuses to touch an environment the project differs
//! from. Load errors name the column, the model and file:line. A new version is built from its
//! query alone, which the plan says (`dropsKept`); `--forward-only` keeps the table and the rows
//! earlier refreshes kept.

use crate::common::*;

/// `raw.src` reads the engine table `land.src` (see [`set_src`]); `m.latest` upserts it by `id`.
const MODELS: &str = r#"
local src = define_model {
  name = "raw.src", kind = kind.external { table = "land.src" },
  schema = { { "id", "bigint" }, { "name", "varchar" }, { "score", "bigint" } },
}
define_model {
  name = "m.latest", kind = kind.incremental_by_unique_key { key = "id" },
  schema = { { "id", "bigint" }, { "name", "varchar" }, { "score", "bigint" } },
  query = "SELECT id, name, score * 10 AS score FROM " .. ref(src),
}
"#;

fn project_on(backend: StateBackend, engine: EngineBackend, csv: &str) -> Project {
    let p = Project::with(backend, engine);
    p.write("models/m.lua", MODELS);
    set_src(&p, csv);
    p
}

/// Replaces the rows of the engine table `land.src` (created on first use) by those of `csv`: a
/// header line, then one row a line, an empty field NULL.
fn set_src(p: &Project, csv: &str) {
    p.execute_on_engine("CREATE SCHEMA IF NOT EXISTS land");
    p.execute_on_engine("CREATE TABLE IF NOT EXISTS land.src (id BIGINT, name VARCHAR, score BIGINT)");
    p.execute_on_engine("DELETE FROM land.src");
    let values: Vec<String> = csv
        .lines()
        .skip(1)
        .map(|line| {
            let fields: Vec<String> = line.split(',').map(|f| if f.is_empty() { "NULL".to_string() } else { format!("'{f}'") }).collect();
            format!("({})", fields.join(", "))
        })
        .collect();
    p.execute_on_engine(&format!("INSERT INTO land.src VALUES {}", values.join(", ")));
}

// The upsert and SCD type 2 paths write data generations and the ledger: on both engines and
// both state stores.
crate::on_every_engine_and_state_backend!(
    run_upserts_changed_and_new_rows_and_keeps_absent_ones,
    a_null_key_is_refused_naming_the_model_and_the_row_count_and_the_table_is_unchanged,
    a_null_key_on_the_first_apply_builds_and_promotes_nothing,
    duplicate_keys_in_the_query_are_refused_naming_a_key,
    run_refuses_an_environment_the_project_differs_from,
    run_also_computes_missing_intervals_of_time_range_models,
    a_key_change_is_a_breaking_change_that_rebuilds,
    a_blocking_audit_rolls_back_a_run_upsert_and_an_scd_reconcile,
    a_new_version_built_from_its_query_alone_is_reported_as_dropping_the_kept_rows,
    forward_only_keeps_the_rows_earlier_refreshes_kept_and_adds_the_column,
);

crate::on_every_engine!(a_composite_key_upserts_from_an_engine_table_changed_between_runs);
crate::on_every_engine!(values_the_tables_column_type_would_cut_are_refused_not_stored_as_duplicate_keys);

fn row(vals: &[&str]) -> Vec<Option<String>> {
    vals.iter().map(|v| if *v == "NULL" { None } else { Some(v.to_string()) }).collect()
}

fn rows(list: &[&[&str]]) -> Rows {
    let mut r: Rows = list.iter().map(|v| row(v)).collect();
    r.sort();
    r
}

fn run_upserts_changed_and_new_rows_and_keeps_absent_ones(backend: StateBackend, engine: EngineBackend) {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n2,bob,2\n3,cyd,3\n");
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!(["m.latest"]));
    let view = env_view("dev", "m.latest");
    assert_eq!(p.rows(&view), rows(&[&["1", "ann", "10"], &["2", "bob", "20"], &["3", "cyd", "30"]]));

    // The source changes: 1 is renamed, 2 disappears, 4 arrives.
    set_src(&p, "id,name,score\n1,ANN,1\n3,cyd,3\n4,dan,4\n");
    // Nothing changed in the project: apply does nothing, and says how to refresh.
    let noop = p.run(&["apply", "dev", "--yes"]);
    noop.expect_code(0);
    assert!(noop.stdout.contains("nothing to apply"), "{}", noop.stdout);
    assert!(noop.stderr.contains("efmesh run dev"), "{}", noop.stderr);
    assert_eq!(p.rows(&view).len(), 3, "apply must not refresh");

    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ran["outcome"], "processed");
    assert_eq!(ran["processed"], serde_json::json!(["m.latest"]));
    assert_eq!(p.rows(&view), rows(&[&["1", "ANN", "10"], &["2", "bob", "20"], &["3", "cyd", "30"], &["4", "dan", "40"]]));

    // A second run with the same source is idempotent.
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&view).len(), 4);
    // Run never promotes nor journals: the pointer set and journal are as apply left them.
    let before = p.state_summary();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.state_summary(), before);
}

fn a_null_key_is_refused_naming_the_model_and_the_row_count_and_the_table_is_unchanged(backend: StateBackend, engine: EngineBackend) {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n2,bob,2\n");
    p.apply("dev");
    let view = env_view("dev", "m.latest");
    let before = p.rows(&view);
    set_src(&p, "id,name,score\n1,ANN,1\n,nul,5\n,nil,6\n7,new,7\n");
    let r = p.run(&["run", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("model `m.latest`"), "{}", r.stderr);
    assert!(r.stderr.contains("2 rows of the query have a NULL key (`id`)"), "{}", r.stderr);
    assert!(r.stderr.contains("models/m.lua:"), "{}", r.stderr);
    assert_eq!(p.rows(&view), before, "nothing of the batch may be written");
}

fn a_null_key_on_the_first_apply_builds_and_promotes_nothing(backend: StateBackend, engine: EngineBackend) {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n,nul,2\n");
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("1 row of the query has a NULL key"), "{}", r.stderr);
    assert!(p.state_summary().envs.is_empty(), "no environment may be promoted");
    assert!(p.state_summary().snapshots.iter().all(|(n, _)| n != "m.latest"), "no snapshot of a failed build");
    assert!(p.physical_tables().iter().all(|t| !t.starts_with("m__latest")), "{:?}", p.physical_tables());
}

fn duplicate_keys_in_the_query_are_refused_naming_a_key(backend: StateBackend, engine: EngineBackend) {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n");
    p.apply("dev");
    let view = env_view("dev", "m.latest");
    let before = p.rows(&view);
    set_src(&p, "id,name,score\n1,ann,1\n5,eve,1\n5,eva,2\n");
    let r = p.run(&["run", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("model `m.latest`"), "{}", r.stderr);
    assert!(r.stderr.contains("duplicate key in the query's output: (id = '5') appears 2 times"), "{}", r.stderr);
    assert_eq!(p.rows(&view), before);
}

fn a_composite_key_upserts_from_an_engine_table_changed_between_runs(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write(
        "models/m.lua",
        r#"
local landing = define_model {
  name = "raw.landing", kind = kind.external { table = "land.landing" },
  schema = { { "shop", "varchar" }, { "sku", "bigint" }, { "stock", "bigint" } },
}
define_model {
  name = "m.stock", kind = kind.incremental_by_unique_key { key = { "shop", "sku" } },
  schema = { { "shop", "varchar" }, { "sku", "bigint" }, { "stock", "bigint" } },
  query = "SELECT " .. cols(landing) .. " FROM " .. ref(landing),
}
"#,
    );
    p.execute_on_engine("CREATE SCHEMA land");
    p.execute_on_engine("CREATE TABLE land.landing (shop VARCHAR, sku BIGINT, stock BIGINT)");
    p.execute_on_engine("INSERT INTO land.landing VALUES ('a', 1, 10), ('a', 2, 20), ('b', 1, 30)");
    p.apply("dev");
    // Same sku in another shop is another key: only ('a', 1) changes; ('b', 2) is new.
    p.execute_on_engine("DELETE FROM land.landing");
    p.execute_on_engine("INSERT INTO land.landing VALUES ('a', 1, 11), ('b', 2, 5)");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "m.stock")), rows(&[&["a", "1", "11"], &["a", "2", "20"], &["b", "1", "30"], &["b", "2", "5"]]));
}

fn run_refuses_an_environment_the_project_differs_from(backend: StateBackend, engine: EngineBackend) {
    // The source table is not created yet: a refused run must leave the engine as it found it.
    let p = Project::with(backend, engine);
    p.write("models/m.lua", MODELS);
    // Never applied: everything is `added`.
    let r = p.run(&["run", "dev", "--json"]);
    r.expect_code(2);
    let v = r.json();
    assert_eq!(v["outcome"], "blocked");
    assert_eq!(string_set(&v["blockedBy"]), set(&["m.latest: added", "raw.src: added"]));
    if p.on_postgres() {
        // The plan reads the server's catalog; nothing may be created.
        assert_eq!(
            p.query("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE '%efmesh%' OR schema_name LIKE 'dev%'"),
            [[Some("0".to_string())]]
        );
    } else {
        assert!(!p.engine_path().exists(), "a refused run opens no database");
    }
    set_src(&p, "id,name,score\n1,ann,1\n");

    p.apply("dev");
    set_src(&p, "id,name,score\n1,ann,1\n2,bob,2\n");
    p.write("models/m.lua", &MODELS.replace("score * 10", "score * 100"));
    let r = p.run(&["run", "dev"]);
    r.expect_code(2);
    assert!(r.stderr.contains("m.latest: breaking"), "{}", r.stderr);
    assert!(r.stderr.contains("efmesh apply dev"), "{}", r.stderr);
    assert_eq!(p.rows(&env_view("dev", "m.latest")), rows(&[&["1", "ann", "10"]]), "a refused run writes nothing");
}

fn run_also_computes_missing_intervals_of_time_range_models(backend: StateBackend, engine: EngineBackend) {
    let mut p = project_on(backend, engine, "id,name,score\n1,ann,1\n");
    p.write(
        "models/t.lua",
        r#"define_model {
  name = "m.days", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-02-01" },
  schema = { { "day", "timestamp" } },
  query = "SELECT CAST(d AS TIMESTAMP) AS day FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-02-28', INTERVAL '1 day') AS g(d) WHERE d >= @start AND d < @end",
}
"#,
    );
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.days")).len(), 9);
    p.now = "2026-02-12T00:00:00Z".into();
    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ran["intervals"], 2);
    assert_eq!(ran["processed"], serde_json::json!(["m.days", "m.latest"]));
    assert_eq!(p.rows(&env_view("dev", "m.days")).len(), 11);
}

// ---------------------------------------------------------------------------------------------
// Languages, fingerprints, load errors

const LUA: &str = r#"define_model { name = "m.x", kind = kind.incremental_by_unique_key { key = { "id", "k" } },
  schema = { { "id", "bigint" }, { "k", "varchar" }, { "v", "double" } },
  query = "SELECT id, k, v FROM " .. ref("raw.src") }"#;
const RHAI: &str = r#"define_model(#{ name: "m.x", kind: kind::incremental_by_unique_key(#{ key: ["id", "k"] }),
  schema: [["id", "bigint"], ["k", "varchar"], ["v", "double"]],
  query: `SELECT id, k, v FROM ${ref("raw.src")}` });"#;
const SQL: &str = "-- name: m.x\n-- kind: incremental_by_unique_key(key = [id, k])\n-- schema: id bigint, k varchar, v double\n-- refs: raw.src\nselect id, k, v from @ref(raw.src)\n";
const PARENT: &str = r#"define_model { name = "raw.src", kind = kind.external { table = "main.src" },
  schema = { { "id", "bigint" }, { "k", "varchar" }, { "v", "double" } } }"#;

#[test]
fn the_same_unique_key_model_has_one_fingerprint_in_lua_rhai_and_sql_and_the_key_is_hashed() {
    let lua = fingerprint_of(PARENT, "x.lua", LUA);
    assert_eq!(lua, fingerprint_of(PARENT, "x.rhai", RHAI), "Lua vs Rhai");
    assert_eq!(lua, fingerprint_of(PARENT, "x.sql", SQL), "Lua vs SQL");
    let other_key = fingerprint_of(PARENT, "x.lua", &LUA.replace(r#"{ "id", "k" }"#, r#"{ "id" }"#));
    assert_ne!(lua, other_key, "changing the key changes the fingerprint");
    let reordered = fingerprint_of(PARENT, "x.lua", &LUA.replace(r#"{ "id", "k" }"#, r#"{ "k", "id" }"#));
    assert_ne!(lua, reordered, "the key is hashed in its declared order");
    let full = fingerprint_of(PARENT, "x.lua", &LUA.replace(r#"kind.incremental_by_unique_key { key = { "id", "k" } }"#, "kind.full()"));
    assert_ne!(lua, full, "the kind is hashed");
}

fn a_key_change_is_a_breaking_change_that_rebuilds(backend: StateBackend, engine: EngineBackend) {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n");
    p.apply("dev");
    p.write("models/m.lua", &MODELS.replace(r#"key = "id""#, r#"key = { "id", "name" }"#));
    let plan = p.plan("dev");
    let a = action(&plan, "m.latest");
    assert_eq!(a["change"], "breaking", "{plan:#}");
    assert_eq!(a["build"], true);
    assert!(a["explain"]["reason"].as_str().unwrap().contains("data-shaping kind fields"), "{plan:#}");
}

#[test]
fn load_errors_name_the_column_the_model_and_the_line() {
    let p = Project::new();
    p.write("efmesh.toml", "# defaults\n");
    p.write("models/parent.lua", PARENT);
    // An undeclared key column, in each language.
    p.write("models/x.lua", &LUA.replace(r#"{ "id", "k" }"#, r#"{ "id", "kk" }"#));
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("models/x.lua:1: model `m.x`: key column `kk` of kind `incremental_by_unique_key` is not declared in the schema"), "{}", out);
    assert!(out.contains("did you mean `k`?"), "{}", out);
    p.remove("models/x.lua");
    p.write("models/x.rhai", &RHAI.replace(r#"["id", "k"]"#, r#"["ident"]"#));
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("models/x.rhai:1: model `m.x`: key column `ident`"), "{}", out);
    p.remove("models/x.rhai");
    p.write("models/x.sql", &SQL.replace("key = [id, k]", "key = [id, nope]"));
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("models/x.sql:1: model `m.x`: key column `nope`"), "{}", out);

    // An empty key, a missing key, an unknown option.
    for (text, wanted) in [
        (SQL.replace("key = [id, k]", "key = []"), "`key` of kind `incremental_by_unique_key` is empty"),
        (SQL.replace("(key = [id, k])", ""), "kind `incremental_by_unique_key` needs `key`"),
        (SQL.replace("key = [id, k]", "key = id, keys = k"), "unknown option `keys` for kind `incremental_by_unique_key` (did you mean `key`?)"),
        (SQL.replace("key = [id, k]", "key = [id, id]"), "names column `id` twice"),
    ] {
        p.write("models/x.sql", &text);
        let r = p.run(&["check"]);
        r.expect_code(1);
        let out = format!("{}{}", r.stdout, r.stderr);
        assert!(out.contains(wanted) && out.contains("models/x.sql:"), "wanted `{wanted}`:\n{}", out);
    }
    let lua = LUA.replace(r#"key = { "id", "k" }"#, r#"key = { "id" }, unique = true"#);
    p.remove("models/x.sql");
    p.write("models/x.lua", &lua);
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("models/x.lua:1: model `m.x`: unknown option `unique` for kind `incremental_by_unique_key`"), "{}", out);
}

fn a_blocking_audit_rolls_back_a_run_upsert_and_an_scd_reconcile(backend: StateBackend, engine: EngineBackend) {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n2,bob,2\n");
    p.write(
        "models/m.lua",
        &(MODELS.replace(
            "name = \"m.latest\", kind = kind.incremental_by_unique_key { key = \"id\" },",
            "name = \"m.latest\", kind = kind.incremental_by_unique_key { key = \"id\" },\n  audits = { audit.accepted_range { column = \"score\", min = 0 } },",
        ) + r#"
define_model {
  name = "m.hist", kind = kind.scd_type2 { key = "id" },
  audits = { audit.expression("score >= -100") },
  schema = { { "id", "bigint" }, { "name", "varchar" }, { "score", "bigint" } },
  query = "SELECT id, name, score FROM " .. ref(src),
}
"#),
    );
    let applied = p.apply("dev");
    assert!(applied["audits"].as_array().unwrap().iter().any(|a| a["model"] == "m.latest"), "{applied:#}");
    let (latest, hist) = (env_view("dev", "m.latest"), env_view("dev", "m.hist"));
    let before = p.rows(&latest);
    // A negative score arrives: m.hist (first in order) accepts it; m.latest's audit rejects it
    // inside the upsert's transaction.
    set_src(&p, "id,name,score\n1,ann,-5\n3,cyd,3\n");
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("accepted_range") && run.stderr.contains("m.latest"), "{}", run.stderr);
    assert_eq!(p.rows(&latest), before, "a blocked upsert must leave the table unchanged");
    let hist_before = p.rows(&hist);
    assert!(hist_before.iter().any(|r| r[2].as_deref() == Some("-5")), "m.hist reconciled: {hist_before:?}");
    // Now m.hist's own audit rejects its reconciliation: its table is unchanged too.
    set_src(&p, "id,name,score\n1,ann,-500\n3,cyd,3\n");
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("expression(score >= -100)") && run.stderr.contains("m.hist"), "{}", run.stderr);
    assert_eq!(p.rows(&hist), hist_before, "a blocked reconciliation must leave the table unchanged");
}

fn values_the_tables_column_type_would_cut_are_refused_not_stored_as_duplicate_keys(engine: EngineBackend) {
    // A model reading `@this` has its table created from the declared schema: `hr` declared
    // `date`, the query returning the hour (a timestamp). Stored, 10:00 and 11:00 became the
    // same date — two rows of one key, more at every run, exit 0. Now refused, naming the column.
    let p = Project::on_engine(engine);
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.ev (ts TIMESTAMP, v INTEGER)");
    p.execute_on_engine("INSERT INTO land.ev VALUES (TIMESTAMP '2026-01-04 10:15:00', 1), (TIMESTAMP '2026-01-04 11:15:00', 2)");
    p.write(
        "models/m.lua",
        r#"define_model { name = "raw.ev", kind = kind.external { table = "land.ev" }, schema = { { "ts", "timestamp" }, { "v", "integer" } } }
define_model {
  name = "u.hourly", kind = kind.incremental_by_unique_key { key = "hr" },
  schema = { { "hr", "date" }, { "v", "bigint" }, { "seen", "bigint" } },
  query = "SELECT date_trunc('hour', s.ts) AS hr, CAST(sum(s.v) AS BIGINT) AS v, (SELECT count(*) FROM @this) AS seen FROM " .. ref("raw.ev") .. " AS s GROUP BY 1",
}
"#,
    );
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("models/m.lua:2") && r.stderr.contains("column `hr`") && r.stderr.contains("would change 2 of its values"), "{}", r.stderr);
    assert!(p.state().env_pointers("dev").unwrap().is_empty(), "dev was promoted");
}

/// [`MODELS`] with `m.latest` returning one more column, `loud` (the name in capitals): a
/// non-breaking edit.
fn with_loud() -> String {
    let edited = MODELS.replace(
        r#"schema = { { "id", "bigint" }, { "name", "varchar" }, { "score", "bigint" } },
  query = "SELECT id, name, score * 10 AS score FROM " .. ref(src),"#,
        r#"schema = { { "id", "bigint" }, { "name", "varchar" }, { "score", "bigint" }, { "loud", "varchar" } },
  query = "SELECT id, name, score * 10 AS score, upper(name) AS loud FROM " .. ref(src),"#,
    );
    assert_ne!(edited, MODELS);
    edited
}

/// Applies [`MODELS`] to `dev` over ann and bob, then runs it after bob left the source and cyd
/// arrived: the table keeps bob (an upsert never deletes).
fn kept_bob(backend: StateBackend, engine: EngineBackend) -> Project {
    let p = project_on(backend, engine, "id,name,score\n1,ann,1\n2,bob,2\n");
    p.apply("dev");
    set_src(&p, "id,name,score\n1,ann,1\n3,cyd,3\n");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "m.latest")), rows(&[&["1", "ann", "10"], &["2", "bob", "20"], &["3", "cyd", "30"]]));
    p
}

fn a_new_version_built_from_its_query_alone_is_reported_as_dropping_the_kept_rows(backend: StateBackend, engine: EngineBackend) {
    let p = kept_bob(backend, engine);
    p.write("models/m.lua", &with_loud());
    let plan = p.plan("dev");
    let a = action(&plan, "m.latest");
    assert_eq!((a["change"].as_str(), a["build"].as_bool()), (Some("non-breaking"), Some(true)), "{plan:#}");
    let from = a["previous"].as_str().expect("the environment's version");
    assert_eq!(a["dropsKept"], serde_json::json!({"from": from, "built": true, "forwardOnlyOk": true}), "{plan:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    let line = text.lines().find(|l| l.contains("m.latest")).unwrap_or_default();
    assert!(
        line.contains("built from its query alone: rows earlier refreshes kept in the table of @")
            && line.contains("that the query no longer returns are not in the new version; `--forward-only m.latest` keeps the table"),
        "{text}"
    );
    // Applied as planned, the new table holds what the query returns now: bob is gone.
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.latest")), rows(&[&["1", "ann", "10", "ANN"], &["3", "cyd", "30", "CYD"]]));
    // The environment serves that version now: nothing more to say.
    let after = p.plan("dev");
    assert!(action(&after, "m.latest").get("dropsKept").is_none(), "{after:#}");
}

fn forward_only_keeps_the_rows_earlier_refreshes_kept_and_adds_the_column(backend: StateBackend, engine: EngineBackend) {
    let p = kept_bob(backend, engine);
    let view = env_view("dev", "m.latest");
    let tables = p.physical_tables();
    p.write("models/m.lua", &with_loud());
    let applied = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "m.latest"]).expect_code(0).json();
    let a = action(&applied, "m.latest");
    assert_eq!(a["change"], "forward-only", "{applied:#}");
    assert_eq!(a["build"], false, "{applied:#}");
    assert!(a.get("reusedFrom").is_some() && a.get("dropsKept").is_none(), "{applied:#}");
    assert_eq!(p.physical_tables(), tables, "the old table is kept, no new one");
    // The rows earlier refreshes kept stay, bob included; the new column is NULL in them (the
    // apply does not refresh the model).
    assert_eq!(p.rows(&view), rows(&[&["1", "ann", "10", "NULL"], &["2", "bob", "20", "NULL"], &["3", "cyd", "30", "NULL"]]));
    // The next refresh upserts what the new query returns into the kept table: bob stays.
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&view), rows(&[&["1", "ann", "10", "ANN"], &["2", "bob", "20", "NULL"], &["3", "cyd", "30", "CYD"]]));
    // A changed key cannot keep the table.
    p.write("models/m.lua", &with_loud().replace(r#"key = "id""#, r#"key = { "id", "name" }"#));
    let r = p.run(&["apply", "dev", "--yes", "--forward-only", "m.latest"]);
    r.expect_code(1);
    assert!(r.stderr.contains("`--forward-only m.latest`: its kind changed"), "{}", r.stderr);
}

/// A `.sql` project: the events `events` (a CSV of `event_at,region,amount` rows) read by the
/// external `raw.ev`, the daily time-range `m.daily` over them ([`daily`] with no extra column),
/// and the unique-key `m.latest` (key `region`) of schema `latest_schema` over `m.daily` by
/// `latest_sql`.
fn keyed_project(events: &str, latest_schema: &str, latest_sql: &str) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("data/ev.csv", &format!("event_at,region,amount\n{events}"));
    p.write("models/raw.sql", "-- name: raw.ev\n-- kind: external(path = data/ev.csv)\n-- schema: event_at timestamp, region varchar, amount bigint\n");
    p.write("models/daily.sql", &daily("", ""));
    p.write(
        "models/latest.sql",
        &format!("-- name: m.latest\n-- kind: incremental_by_unique_key(key = region)\n-- schema: {latest_schema}\n-- refs: m.daily\n{latest_sql}\n"),
    );
    p
}

/// `m.daily` of [`keyed_project`]: the daily revenue per region, with `extra_col` declared and
/// `extra_item` selected after it (a non-breaking change when both are added).
fn daily(extra_col: &str, extra_item: &str) -> String {
    format!(
        "-- name: m.daily\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01)\n-- schema: day timestamp, region varchar, revenue bigint{extra_col}\n-- refs: raw.ev\n\
         SELECT date_trunc('day', event_at)::TIMESTAMP AS day, region, CAST(sum(amount) AS BIGINT) AS revenue{extra_item}\n\
         FROM @ref(raw.ev) WHERE event_at >= @start AND event_at < @end GROUP BY ALL\n"
    )
}

/// Below a parent's non-breaking change, a unique-key model inherits its older version's table,
/// which holds what its last refresh read. When the parent's new version computes intervals the
/// older one lacked, the apply refreshes the child, as `run` would: it served the total of the
/// days its last refresh saw while `plan` said nothing was left to do.
#[test]
fn a_unique_key_child_of_a_parent_whose_new_version_computes_new_intervals_is_refreshed() {
    let mut p = keyed_project(
        "2026-01-01 03:00:00,n,1\n2026-01-02 03:00:00,n,2\n2026-01-03 03:00:00,n,4\n",
        "region varchar, total bigint",
        "SELECT region, CAST(sum(revenue) AS BIGINT) AS total FROM @ref(m.daily) GROUP BY region",
    );
    p.now = "2026-01-02T00:00:00Z".into();
    p.apply("prod");
    assert_eq!(p.rows(&env_view("prod", "m.latest")), rows(&[&["n", "1"]]));

    p.write("models/daily.sql", &daily(", n bigint", ", count(*) AS n"));
    p.now = "2026-01-03T00:00:00Z".into();
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "m.daily")["change"], "non-breaking", "{plan:#}");
    let text = p.run(&["plan", "prod"]);
    text.expect_code(0);
    assert!(text.stdout.contains("refresh, as `run` would") && text.stdout.contains("m.latest"), "{}", text.stdout);
    // A new version inheriting its older version's table: not one the environment points at anew.
    assert!(text.stdout.contains("the table it inherits holds what its older version's last refresh read"), "{}", text.stdout);
    assert!(!text.stdout.contains("pointed at here"), "{}", text.stdout);
    p.apply("prod");
    assert_eq!(p.rows(&env_view("prod", "m.latest")), rows(&[&["n", "3"]]), "the total of both days");
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// The same change applied to `dev` first: `dev` builds the parent's new version and leaves the
/// child's version (on `prod`'s table, over other parent tables) unrefreshed, to `prod`. `prod`'s
/// plan then builds nothing: it points at `dev`'s versions. The child's table still holds what
/// `prod`'s older version last read, without the day the parent's new version computed: the
/// apply refreshes it, as `run` would: then `prod` serves what a `run` gives, and `plan` (nothing
/// left) and `status` (healthy) say so rightly.
#[test]
fn a_unique_key_child_of_a_parent_changed_in_dev_first_is_refreshed_by_the_prod_apply() {
    let mut p = keyed_project(
        "2026-01-01 03:00:00,a,1\n2026-01-01 03:00:00,n,1\n2026-01-02 03:00:00,n,2\n2026-01-03 03:00:00,n,4\n",
        "region varchar, rev bigint, day timestamp",
        "SELECT region, revenue AS rev, day FROM @ref(m.daily) WHERE day = (SELECT max(day) FROM @ref(m.daily))",
    );
    // `n`'s revenue and day as the environment serves them.
    let latest_n = |p: &Project, env: &str| {
        p.query(&format!("SELECT CAST(rev AS VARCHAR), CAST(CAST(day AS DATE) AS VARCHAR) FROM {} WHERE region = 'n'", env_view(env, "m.latest")))
    };
    p.now = "2026-01-02T00:00:00Z".into();
    p.apply("prod");
    p.apply("dev");
    assert_eq!(latest_n(&p, "prod"), rows(&[&["1", "2026-01-01"]]));

    p.write("models/daily.sql", &daily(", c bigint", ", count(*) AS c"));
    p.now = "2026-01-03T00:00:00Z".into();
    let dev = p.run(&["plan", "dev"]);
    dev.expect_code(0);
    assert!(dev.stdout.contains("not refreshed here"), "`dev` leaves the shared table to `prod`: {}", dev.stdout);
    p.apply("dev");

    let plan = p.plan("prod");
    assert_eq!(action(&plan, "m.daily")["change"], "non-breaking", "{plan:#}");
    assert_eq!(action(&plan, "m.daily")["build"], false, "`dev` built it already: {plan:#}");
    assert_eq!(action(&plan, "m.latest")["build"], false, "{plan:#}");
    assert_eq!(action(&plan, "m.latest")["rebuild"], true, "{plan:#}");
    let text = p.run(&["plan", "prod"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("refresh, as `run` would: pointed at here, its table holds what the last refresh of it")
            && text.stdout.contains("`m.daily`'s new version computes 1 interval its older version lacked"),
        "{}",
        text.stdout
    );
    p.apply("prod");
    let applied = p.rows(&env_view("prod", "m.latest"));
    assert_eq!(latest_n(&p, "prod"), rows(&[&["2", "2026-01-02"]]), "the parent's newest day, as `prod`'s m.daily serves it");
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
    // `dev` serves the same table (the version it inherited, now refreshed by `prod`).
    assert_eq!(p.rows(&env_view("dev", "m.latest")), applied);

    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(p.rows(&env_view("prod", "m.latest")), applied, "a run gives what the apply left");
}
