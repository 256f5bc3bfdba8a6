//! `efmesh preview <env> [MODEL…]`: models' queries run read-only against what an environment
//! serves for their parents, compared with what it serves for them now.

use crate::common::{EngineBackend, Project, Rows, env_view, sorted_in_memory};
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(
    a_changed_model_previews_its_new_rows_and_compares_with_the_dev_view,
    a_new_model_whose_parent_is_new_too_previews_through_the_inlined_parent,
    an_environment_never_applied_previews_every_parent_inlined_without_creating_the_engine,
    a_time_range_model_previews_only_its_newest_complete_interval,
    a_sql_error_names_the_model_file_and_line_once,
    the_rows_limit_is_honoured_and_the_count_is_not_limited,
    without_models_it_previews_what_the_plan_would_build_or_change,
    a_seed_parent_not_served_is_a_clear_error_and_a_seed_previews_its_file,
    an_scd_type2_model_compares_its_open_versions,
    an_embedded_parent_is_inlined_and_an_unknown_model_is_refused,
    null_values_are_null_in_json_and_prod_is_previewed_like_any_environment,
    the_text_report_shows_a_table_and_the_comparison_line,
    an_inlined_parent_has_the_types_its_build_would_store,
);

const EVENTS: &str = "event_at,region,amount\n\
    2026-01-01 00:00:00,north,100\n\
    2026-02-08 14:00:00,north,150\n\
    2026-02-09 01:00:00,south,90\n\
    2026-02-09 20:00:00,south,20\n\
    2026-02-09 21:00:00,east,7\n\
    2026-02-10 03:00:00,west,1000\n";

/// `s.b` (full, over `s.a`) with the given schema and query (`{a}` stands for `ref(a)`).
fn model_b(schema: &str, query: &str) -> String {
    format!(
        "local a = require(\"a\")\nreturn define_model {{\n  name = \"s.b\",\n  kind = kind.full(),\n  schema = {{ {schema} }},\n  query = [[{}]],\n}}\n",
        query.replace("{a}", "]] .. ref(a) .. [[")
    )
}

const B_SCHEMA: &str = r#"{ "id", "integer" }, { "label", "varchar" }, { "twice", "integer" }"#;
const B_QUERY: &str = "SELECT id, label, id * 2 AS twice FROM {a} WHERE id > 2";

/// An external CSV `raw.events` (on Postgres, which reads no files, a seed of the same file),
/// `s.a` (full, ids 1..7) → `s.b` (full), and `t.daily` (time range, day grain, over the CSV).
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("data/events.csv", EVENTS);
    let raw = r#"return define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.csv" },
  schema = { { "event_at", "timestamp" }, { "region", "varchar" }, { "amount", "bigint" } },
}
"#;
    let raw = if p.on_postgres() { raw.replace("kind.external {", "kind.seed {") } else { raw.to_string() };
    p.write("models/raw.lua", &raw);
    p.write(
        "models/a.lua",
        r#"return define_model {
  name = "s.a",
  kind = kind.full(),
  schema = { { "id", "integer" }, { "label", "varchar" } },
  query = "SELECT CAST(range AS INTEGER) AS id, 'item ' || range AS label FROM generate_series(1, 7) AS g(range)",
}
"#,
    );
    p.write("models/b.lua", &model_b(B_SCHEMA, B_QUERY));
    p.write(
        "models/daily.lua",
        r#"local raw = require("raw")
return define_model {
  name = "t.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", grain = "day" },
  schema = { { "day", "timestamp" }, { "region", "varchar" }, { "revenue", "bigint" } },
  query = [[
    SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region, CAST(sum(amount) AS BIGINT) AS revenue
    FROM ]] .. ref(raw) .. [[
    WHERE event_at >= @start AND event_at < @end
    GROUP BY 1, 2
  ]],
}
"#,
    );
    p
}

/// `preview <env> <models…> --json`: the previews, by model name.
#[track_caller]
fn previews(p: &Project, args: &[&str], code: i32) -> Vec<Value> {
    let mut all = vec!["preview"];
    all.extend_from_slice(args);
    all.push("--json");
    let v = p.run(&all).expect_code(code).json();
    v["previews"].as_array().unwrap_or_else(|| panic!("no previews in {v:#}")).clone()
}

#[track_caller]
fn one<'a>(previews: &'a [Value], model: &str) -> &'a Value {
    previews.iter().find(|p| p["model"] == model).unwrap_or_else(|| panic!("no preview of `{model}` in {previews:#?}"))
}

/// A preview's rows, sorted (values as text, NULL as `None`).
#[track_caller]
fn rows(preview: &Value) -> Rows {
    let mut r: Rows = serde_json::from_value(preview["rows"].clone()).unwrap_or_else(|e| panic!("rows of {preview:#}: {e}"));
    r.sort();
    r
}

fn count(p: &Project, sql: &str) -> u64 {
    p.query(&format!("SELECT CAST(count(*) AS VARCHAR) FROM ({sql}) AS q"))[0][0].as_deref().expect("count").parse().expect("number")
}

fn a_changed_model_previews_its_new_rows_and_compares_with_the_dev_view(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let served_rows = count(&p, &format!("SELECT * FROM {}", env_view("dev", "s.b")));
    // Drop `label`, add `tag`, retype `twice` (integer → bigint), keep fewer rows.
    p.write(
        "models/b.lua",
        &model_b(
            r#"{ "id", "integer" }, { "twice", "bigint" }, { "tag", "varchar" }"#,
            "SELECT id, CAST(id * 2 AS BIGINT) AS twice, 'v2' AS tag FROM {a} WHERE id > 4",
        ),
    );
    let all = previews(&p, &["dev", "s.b"], 0);
    let b = one(&all, "s.b");
    assert_eq!(b["error"], Value::Null, "{b:#}");
    let cols: Vec<String> = b["columns"].as_array().expect("columns").iter().map(|c| c[0].as_str().expect("name").to_string()).collect();
    assert_eq!(cols, ["id", "twice", "tag"], "{b:#}");
    let expected = sorted_in_memory("SELECT i AS id, i * 2 AS twice, 'v2' AS tag FROM range(5, 8) AS t(i)");
    assert_eq!(rows(b), expected, "{b:#}");
    let c = &b["comparison"];
    assert_eq!(c["added"], serde_json::json!(["tag"]), "{c:#}");
    assert_eq!(c["removed"], serde_json::json!(["label"]), "{c:#}");
    assert_eq!(c["retyped"], serde_json::json!([["twice", "INTEGER", "BIGINT"]]), "{c:#}");
    assert_eq!(c["rowsNow"], served_rows, "{c:#}");
    assert_eq!(c["rowsNew"], 3, "{c:#}");
    assert_eq!(c["scope"], "all", "{c:#}");
    // The dev view still serves the old rows.
    assert_eq!(count(&p, &format!("SELECT * FROM {}", env_view("dev", "s.b"))), served_rows);
}

fn a_new_model_whose_parent_is_new_too_previews_through_the_inlined_parent(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    p.write(
        "models/n.lua",
        r#"local a = require("a")
local one = define_model {
  name = "n.one",
  kind = kind.full(),
  schema = { { "x", "integer" } },
  query = "SELECT CAST(id * 10 AS INTEGER) AS x FROM " .. ref(a),
}
return define_model {
  name = "n.two",
  kind = kind.view(),
  schema = { { "y", "integer" } },
  query = "SELECT x + 1 AS y FROM " .. ref(one) .. " WHERE x > 30",
}
"#,
    );
    let all = previews(&p, &["dev", "n.two"], 0);
    let two = one(&all, "n.two");
    assert_eq!(two["error"], Value::Null, "{two:#}");
    assert_eq!(rows(two), sorted_in_memory("SELECT i * 10 + 1 AS y FROM range(4, 8) AS t(i)"), "{two:#}");
    assert_eq!(two["comparison"], Value::Null, "dev does not serve n.two: {two:#}");
    // Nothing was built for the preview.
    assert!(!p.relations().iter().any(|r| r.contains("n__")), "{:?}", p.relations());
}

fn an_environment_never_applied_previews_every_parent_inlined_without_creating_the_engine(engine: EngineBackend) {
    let p = project(engine);
    let all = previews(&p, &["dev", "s.b"], 0);
    let b = one(&all, "s.b");
    assert_eq!(b["error"], Value::Null, "{b:#}");
    assert_eq!(rows(b), sorted_in_memory("SELECT i AS id, 'item ' || i AS label, i * 2 AS twice FROM range(3, 8) AS t(i)"), "{b:#}");
    if p.on_postgres() {
        let schemas = p.query(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('public', 'information_schema') AND schema_name NOT LIKE 'pg\\_%'",
        );
        assert_eq!(schemas, Rows::new(), "a preview created a schema");
    } else {
        assert!(!p.engine_path().exists(), "a preview created the DuckDB file");
    }
    assert!(!p.state_path().exists(), "a preview created the state store");
}

fn a_time_range_model_previews_only_its_newest_complete_interval(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    // A new version: revenue doubled.
    p.write("models/daily.lua", &p.read("models/daily.lua").replace("sum(amount)", "sum(amount) * 2"));
    let all = previews(&p, &["dev", "t.daily"], 0);
    let d = one(&all, "t.daily");
    assert_eq!(d["error"], Value::Null, "{d:#}");
    // now = 2026-02-10T00:00: the newest complete day is 2026-02-09 (02-10 is partial).
    assert_eq!(d["window"], serde_json::json!(["2026-02-09T00:00:00.000Z", "2026-02-10T00:00:00.000Z"]), "{d:#}");
    let expected = sorted_in_memory(
        "SELECT TIMESTAMP '2026-02-09' AS day, region, sum(amount) * 2 AS revenue FROM (VALUES ('south', 90), ('south', 20), ('east', 7)) AS t(region, amount) GROUP BY ALL",
    );
    assert_eq!(rows(d), expected, "{d:#}");
    let c = &d["comparison"];
    assert_eq!(c["scope"], "window", "{c:#}");
    let served_in_window =
        count(&p, &format!("SELECT * FROM {} WHERE day >= TIMESTAMP '2026-02-09' AND day < TIMESTAMP '2026-02-10'", env_view("dev", "t.daily")));
    let served_all = count(&p, &format!("SELECT * FROM {}", env_view("dev", "t.daily")));
    assert!(served_all > served_in_window, "the served view must hold rows outside the window for this test to mean anything");
    assert_eq!(c["rowsNow"], served_in_window, "{c:#}");
    assert_eq!(c["rowsNew"], 2, "{c:#}");
}

fn a_sql_error_names_the_model_file_and_line_once(engine: EngineBackend) {
    let p = project(engine);
    p.write("models/b.lua", &model_b(B_SCHEMA, "SELECT id, label, nope * 2 AS twice FROM {a}"));
    let run = p.run(&["preview", "dev", "s.b", "s.a", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let all = v["previews"].as_array().expect("previews");
    let err = one(all, "s.b")["error"].as_str().unwrap_or_else(|| panic!("no error in {v:#}")).to_string();
    assert!(err.starts_with("models/b.lua:2: model `s.b`: "), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
    let engine_says = if p.on_postgres() { r#"ERROR: column "nope" does not exist"# } else { "Binder Error" };
    assert_eq!(err.matches(engine_says).count(), 1, "the engine's message once: {err}");
    // The other model still previews.
    assert_eq!(one(all, "s.a")["error"], Value::Null, "{v:#}");
    assert!(run.stderr.contains(&err), "{}", run.stderr);
}

fn the_rows_limit_is_honoured_and_the_count_is_not_limited(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let all = previews(&p, &["dev", "s.a", "--rows", "3"], 0);
    let a = one(&all, "s.a");
    assert_eq!(a["rows"].as_array().expect("rows").len(), 3, "{a:#}");
    assert_eq!(a["comparison"]["rowsNew"], 7, "{a:#}");
    assert_eq!(a["comparison"]["rowsNow"], 7, "{a:#}");
    // The most an engine's `LIMIT` takes (a 64-bit signed integer) shows every row; one more is
    // a usage error naming the flag, never the engine's conversion error blamed on the model.
    let all = previews(&p, &["dev", "s.a", "--rows", &i64::MAX.to_string()], 0);
    assert_eq!(one(&all, "s.a")["rows"].as_array().expect("rows").len(), 7);
    let run = p.run(&["preview", "dev", "s.a", "--rows", "9223372036854775808", "--json"]);
    let v = run.expect_code(1).json();
    assert_eq!(v["error"]["kind"], "usage", "{v:#}");
    assert!(run.stderr.contains("--rows") && !run.stderr.contains("model `s.a`"), "{}", run.stderr);
}

#[test]
fn preview_changes_nothing_and_releases_the_engine_file() {
    let p = project(EngineBackend::DuckDb);
    p.apply("dev");
    p.write("models/b.lua", &model_b(B_SCHEMA, "SELECT id, label, id * 3 AS twice FROM {a}"));
    let relations = p.all_relations();
    let state = p.state_summary();
    let engine_bytes = fs_err::read(p.engine_path()).expect("engine file");
    let state_bytes = fs_err::read(p.state_path()).expect("state file");
    previews(&p, &["dev"], 0);
    assert_eq!(p.all_relations(), relations);
    assert_eq!(p.state_summary(), state);
    assert!(fs_err::read(p.engine_path()).expect("engine file") == engine_bytes, "the DuckDB file changed");
    assert!(fs_err::read(p.state_path()).expect("state file") == state_bytes, "the state store changed");

    // In one process (as `watch` runs it), the engine is released when `preview` returns: the
    // same process can open the file for writing right after.
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let project = efmesh::project::Project::load(&config).expect("project");
    let store = efmesh::state::SqliteStore::open(&p.state_path()).expect("state");
    let name = efmesh::core::ModelName::parse("s.b").expect("name");
    let now = efmesh::core::interval::parse_instant(crate::common::NOW).expect("now");
    let out = efmesh::preview::preview(&project, &store, "dev", &[name], &efmesh::preview::Options { rows: 5, now }).expect("preview");
    assert_eq!(out[0].error, None, "{out:?}");
    assert_eq!(out[0].rows.len(), 5, "{out:?}");
    let mut writer = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &config.engine).expect("open the DuckDB file for writing after a preview");
    efmesh::engine::Engine::execute(&mut writer, "CREATE TABLE after_preview (x INTEGER)").expect("write");
}

#[test]
fn a_file_held_by_a_writer_fails_the_preview_instead_of_waiting() {
    let p = project(EngineBackend::DuckDb);
    p.apply("dev");
    let _writer = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("hold the file");
    let run = p.run(&["preview", "dev", "s.b", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let err = v["previews"][0]["error"].as_str().unwrap_or_else(|| panic!("no error in {v:#}"));
    assert!(err.contains("efmesh.duckdb") && err.contains("read-only"), "{err}");
}

fn without_models_it_previews_what_the_plan_would_build_or_change(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let all = previews(&p, &["dev"], 0);
    assert!(all.is_empty(), "nothing changed: {all:#?}");
    p.write("models/b.lua", &model_b(B_SCHEMA, "SELECT id, label, id * 3 AS twice FROM {a}"));
    let all = previews(&p, &["dev"], 0);
    let names: Vec<&str> = all.iter().map(|p| p["model"].as_str().expect("name")).collect();
    assert_eq!(names, ["s.b"], "{all:#?}");
}

fn a_seed_parent_not_served_is_a_clear_error_and_a_seed_previews_its_file(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/regions.csv", "region,label\nnorth,North\nsouth,South\n");
    p.write(
        "models/seed.lua",
        r#"local regions = define_model {
  name = "s.regions",
  kind = kind.seed { path = "seeds/regions.csv" },
  schema = { { "region", "varchar" }, { "label", "varchar" } },
}
return define_model {
  name = "s.labels",
  kind = kind.full(),
  schema = { { "label", "varchar" } },
  query = "SELECT label FROM " .. ref(regions),
}
"#,
    );
    let run = p.run(&["preview", "dev", "s.labels", "s.regions", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let all = v["previews"].as_array().expect("previews");
    let err = one(all, "s.labels")["error"].as_str().unwrap_or_else(|| panic!("{v:#}"));
    assert!(err.contains("models/seed.lua:") && err.contains("seed `s.regions`") && err.contains("not served by environment `dev`"), "{err}");
    let seed = one(all, "s.regions");
    assert_eq!(seed["error"], Value::Null, "{seed:#}");
    assert_eq!(rows(seed), sorted_in_memory("SELECT * FROM (VALUES ('north', 'North'), ('south', 'South'))"), "{seed:#}");
    // Once applied, the seed is served and its child previews against it.
    p.apply("dev");
    let all = previews(&p, &["dev", "s.labels"], 0);
    assert_eq!(rows(one(&all, "s.labels")), sorted_in_memory("SELECT * FROM (VALUES ('North'), ('South'))"));
}

fn the_text_report_shows_a_table_and_the_comparison_line(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    p.write("models/b.lua", &model_b(B_SCHEMA, "SELECT id, label, id * 3 AS twice FROM {a} WHERE id > 5"));
    let run = p.run(&["preview", "dev", "s.b"]);
    run.expect_code(0);
    assert!(run.stdout.contains("id │ label  │ twice"), "{}", run.stdout);
    assert!(run.stdout.contains("6  │ item 6 │ 18"), "{}", run.stdout);
    assert!(run.stdout.contains("vs `dev`: same columns; rows 5 → 2 (whole relation)"), "{}", run.stdout);
}

#[test]
fn a_ducklake_model_previews_against_the_served_views_through_a_read_only_attach() {
    let mut p = Project::new();
    p.now = "2026-01-10T06:00:00Z".to_string();
    p.write("efmesh.toml", &format!("{}\n[ducklake]\ncatalog = \"catalog/lake.ducklake\"\ndata_path = \"lake_data\"\n", crate::common::CONFIG));
    let models = |filter: &str| {
        format!(
            r#"local daily = define_model {{
  name = "m.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day" }},
  target = "ducklake",
  schema = {{ {{ "day", "timestamp" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(range AS TIMESTAMP) AS day, CAST(epoch(range) / 86400 AS BIGINT) AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 DAY)",
}}
define_model {{
  name = "m.total",
  kind = kind.full(),
  target = "ducklake",
  schema = {{ {{ "days", "bigint" }} }},
  query = "SELECT count(*) AS days FROM " .. ref(daily) .. " {filter}",
}}
"#
        )
    };
    p.write("models/m.lua", &models(""));
    p.apply("dev");
    let catalog_bytes = fs_err::read(p.root().join("catalog/lake.ducklake")).expect("catalog");
    p.write("models/m.lua", &models("WHERE day >= TIMESTAMP '2026-01-05'"));
    let all = previews(&p, &["dev", "m.total"], 0);
    let total = one(&all, "m.total");
    assert_eq!(total["error"], Value::Null, "{total:#}");
    // Nine complete days served (2026-01-01 … 01-09); five from 01-05.
    assert_eq!(rows(total), vec![vec![Some("5".to_string())]], "{total:#}");
    assert_eq!(total["comparison"]["rowsNow"], 1, "{total:#}");
    assert!(fs_err::read(p.root().join("catalog/lake.ducklake")).expect("catalog") == catalog_bytes, "the DuckLake catalog changed");
}

fn an_scd_type2_model_compares_its_open_versions(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    // The source is a table of the engine's that the project does not manage.
    p.execute_on_engine("CREATE SCHEMA src");
    p.execute_on_engine("CREATE TABLE src.people (id BIGINT, team VARCHAR)");
    p.execute_on_engine("INSERT INTO src.people VALUES (1, 'red'), (2, 'blue')");
    p.write(
        "models/people.lua",
        r#"local raw = define_model {
  name = "raw.people",
  kind = kind.external { table = "src.people" },
  schema = { { "id", "bigint" }, { "team", "varchar" } },
}
return define_model {
  name = "m.people",
  kind = kind.scd_type2 { key = "id" },
  schema = { { "id", "bigint" }, { "team", "varchar" } },
  query = "SELECT id, team FROM " .. ref(raw),
}
"#,
    );
    p.apply("dev");
    // A second refresh closes id 2's version and opens a new one: two open rows, three in all.
    p.execute_on_engine("UPDATE src.people SET team = 'green' WHERE id = 2");
    p.run(&["run", "dev", "--json"]).expect_code(0);
    assert_eq!(count(&p, &format!("SELECT * FROM {}", env_view("dev", "m.people"))), 3);
    let all = previews(&p, &["dev", "m.people"], 0);
    let m = one(&all, "m.people");
    assert_eq!(m["error"], Value::Null, "{m:#}");
    let c = &m["comparison"];
    assert_eq!((c["scope"].as_str(), c["rowsNow"].as_u64(), c["rowsNew"].as_u64()), (Some("open"), Some(2), Some(2)), "{c:#}");
    assert_eq!(c["removed"], serde_json::json!([]), "managed columns are not reported as removed: {c:#}");
}

fn an_embedded_parent_is_inlined_and_an_unknown_model_is_refused(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/e.lua",
        r#"local a = require("a")
local e = define_model {
  name = "e.odd",
  kind = kind.embedded(),
  schema = { { "id", "integer" } },
  query = "SELECT id FROM " .. ref(a) .. " WHERE id % 2 = 1",
}
return define_model {
  name = "e.sum",
  kind = kind.full(),
  schema = { { "total", "bigint" } },
  query = "SELECT CAST(sum(id) AS BIGINT) AS total FROM " .. ref(e),
}
"#,
    );
    p.apply("dev");
    let all = previews(&p, &["dev", "e.sum"], 0);
    assert_eq!(rows(one(&all, "e.sum")), vec![vec![Some("16".to_string())]]);
    let run = p.run(&["preview", "dev", "e.summ"]);
    run.expect_code(1);
    assert!(run.stderr.contains("unknown model `e.summ`") && run.stderr.contains("did you mean `e.sum`"), "{}", run.stderr);
}

fn null_values_are_null_in_json_and_prod_is_previewed_like_any_environment(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/n.lua",
        r#"return define_model {
  name = "n.nulls",
  kind = kind.full(),
  schema = { { "id", "integer" }, { "v", "varchar" } },
  query = "SELECT 1 AS id, CAST(NULL AS VARCHAR) AS v",
}
"#,
    );
    p.apply("prod");
    let all = previews(&p, &["prod", "n.nulls"], 0);
    let n = one(&all, "n.nulls");
    assert_eq!(n["rows"], serde_json::json!([["1", null]]), "{n:#}");
    assert_eq!(n["comparison"]["rowsNow"], 1, "prod serves it: {n:#}");
    let text = p.run(&["preview", "prod", "n.nulls"]).expect_code(0).stdout.clone();
    assert!(text.contains("1  │ NULL"), "{text}");
    assert!(text.contains("vs `prod`: same columns; rows 1 → 1 (whole relation)"), "{text}");
    // dev was never applied: nothing to compare with.
    let all = previews(&p, &["dev", "n.nulls"], 0);
    assert_eq!(one(&all, "n.nulls")["comparison"], Value::Null);
}

#[test]
fn an_s3_lake_model_previews_through_a_prepared_read_only_connection() {
    let moto = crate::s3::Moto::start();
    moto.create_bucket("lake");
    let lake = format!("[lake]\npath = \"s3://lake/warehouse\"\ns3_endpoint = \"{}\"\ns3_url_style = \"path\"\ns3_use_ssl = false\n", moto.endpoint());
    let p = project(EngineBackend::DuckDb);
    p.write("efmesh.toml", &format!("{}\n{lake}", crate::common::CONFIG));
    p.write("models/daily.lua", &p.read("models/daily.lua").replace("  schema = {", "  target = \"parquet\",\n  schema = {"));
    let with_credentials = |args: &[&str]| {
        let out = p
            .command(args)
            .env("AWS_ACCESS_KEY_ID", crate::s3::KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", crate::s3::SECRET)
            .env_remove("AWS_SESSION_TOKEN")
            .output()
            .expect("spawn efmesh");
        crate::common::Run::from_output(out, format!("efmesh {}", args.join(" ")))
    };
    with_credentials(&["apply", "dev", "--yes"]).expect_code(0);
    let objects = moto.keys("lake");
    p.write(
        "models/total.lua",
        r#"local daily = require("daily")
return define_model {
  name = "n.total",
  kind = kind.full(),
  schema = { { "total", "bigint" } },
  query = "SELECT CAST(sum(revenue) AS BIGINT) AS total FROM " .. ref(daily),
}
"#,
    );
    let run = with_credentials(&["preview", "dev", "n.total", "--json"]);
    let v = run.expect_code(0).json();
    let total = one(v["previews"].as_array().expect("previews"), "n.total");
    // Every complete day before 2026-02-10, read from the parquet files dev serves.
    assert_eq!(rows(total), vec![vec![Some((100 + 150 + 90 + 20 + 7).to_string())]], "{total:#}");
    assert!(!run.stdout.contains(crate::s3::SECRET) && !run.stderr.contains(crate::s3::SECRET), "the secret reached the output");
    assert_eq!(moto.keys("lake"), objects, "a preview wrote to the lake");
    // Without credentials, each preview says which variable is missing.
    let out = p.command(&["preview", "dev", "n.total", "--json"]).env_remove("AWS_ACCESS_KEY_ID").env_remove("AWS_SECRET_ACCESS_KEY").output().expect("spawn");
    let run = crate::common::Run::from_output(out, "efmesh preview dev n.total --json".into());
    let v = run.expect_code(1).json();
    let err = v["previews"][0]["error"].as_str().unwrap_or_else(|| panic!("{v:#}"));
    assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
}

/// An unapplied parent is inlined in the types its table would have: the query's own (a
/// `decimal(10,4)` declared `decimal(10,2)` keeps its places, as the built table does), so the
/// preview shows the rows `apply` then builds.
fn an_inlined_parent_has_the_types_its_build_would_store(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    p.write(
        "models/n.lua",
        r#"local parent = define_model {
  name = "n.parent",
  kind = kind.full(),
  schema = { { "amt", "decimal(10,2)" } },
  query = "SELECT CAST(1.2345 AS decimal(10,4)) AS amt",
}
return define_model {
  name = "n.child",
  kind = kind.full(),
  schema = { { "total", "decimal(18,4)" } },
  query = "SELECT amt * 1000 AS total FROM " .. ref(parent),
}
"#,
    );
    let all = previews(&p, &["dev", "n.child"], 0);
    let previewed = rows(one(&all, "n.child"));
    p.apply("dev");
    let built = p.query("SELECT CAST(total AS VARCHAR) FROM dev__n.child");
    assert_eq!(previewed, built, "{all:#?}");
    assert!(built[0][0].as_deref().is_some_and(|v| v.starts_with("1234.5")), "{built:?}");
}
