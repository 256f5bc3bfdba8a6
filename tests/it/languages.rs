//! Lua, Rhai and raw SQL are interchangeable: the same model in any of them has the same
//! fingerprint (for every kind), moving a model to another file or language rebuilds nothing, and
//! one DAG can mix all three.

use crate::common::{EngineBackend, PG_ENGINE_URL_ENV, Project as CliProject, action, actions};
use crate::on_every_engine;
use efmesh::config::Config;
use efmesh::project::Project;
use std::collections::BTreeMap;

/// A parent every variant references (the table `landing.src`, see [`source_table`]; declared
/// types are spelled as both engines name them: `float8`, not DuckDB's `double`), written in
/// Lua in every project.
const PARENT_LUA: &str = r#"
return { src = define_model {
  name = "raw.src", kind = kind.external { table = "landing.src" },
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "v", "float8" } },
} }
"#;

/// One model written three ways.
struct Variant {
    kind: &'static str,
    lua: &'static str,
    rhai: &'static str,
    sql: &'static str,
}

const VARIANTS: &[Variant] = &[
    Variant {
        kind: "full",
        lua: r#"local p = require("models.parent")
define_model { name = "m.x", kind = kind.full(), schema = { { "id", "bigint" }, { "v2", "float8" } }, grain = { "id" },
  query = "SELECT " .. cols(p.src, "id") .. ", v * 2 AS v2 FROM " .. ref(p.src) .. " WHERE v > 0" }"#,
        rhai: r#"define_model(#{ name: "m.x", kind: kind::full(), schema: [["id", "bigint"], ["v2", "float8"]], grain: ["id"],
  query: `SELECT ${cols("raw.src", "id")}, v * 2 AS v2 FROM ${ref("raw.src")} WHERE v > 0` });"#,
        sql: "-- name: m.x\n-- kind: full\n-- schema: id bigint, v2 float8\n-- grain: id\n-- refs: raw.src\nselect \"id\", v*2 as v2\nfrom @ref(raw.src)\nwhere v > 0;\n",
    },
    Variant {
        kind: "view",
        lua: r#"define_model { name = "m.x", kind = kind.view(), schema = { { "id", "bigint" } }, query = function() return "SELECT id FROM " .. ref("raw.src") end }"#,
        rhai: r#"define_model(#{ name: "m.x", kind: kind::view(), schema: [["id", "bigint"]], query: || `SELECT id FROM ${ref("raw.src")}` });"#,
        sql: "-- name: m.x\n-- kind: view\n-- schema: id bigint\n-- refs: raw.src\nSELECT id FROM @ref(raw.src)\n",
    },
    Variant {
        kind: "embedded",
        lua: r#"define_model { name = "m.x", kind = kind.embedded(), schema = { { "n", "bigint" } }, query = "SELECT count(*) AS n FROM " .. ref("raw.src") }"#,
        rhai: r#"define_model(#{ name: "m.x", kind: kind::embedded(), schema: [["n", "bigint"]], query: "SELECT count(*) AS n FROM " + ref("raw.src") });"#,
        sql: "-- name: m.x\n-- kind: embedded\n-- schema: n bigint\n-- refs: raw.src\n/* a comment */ SELECT COUNT(*) n FROM @ref(raw.src)\n",
    },
    Variant {
        kind: "incremental_by_time_range",
        lua: r#"define_model { name = "m.x",
  kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01", grain = "hour", batch_size = 12, lookback = 2 },
  schema = { { "t", "timestamp" }, { "v", "float8" } },
  query = "SELECT t, v FROM " .. ref("raw.src") .. " WHERE t >= @start AND t < @end" }"#,
        rhai: r#"define_model(#{ name: "m.x",
  kind: kind::incremental_by_time_range(#{ time_column: "t", start: "2026-01-01", grain: "hour", batch_size: 12, lookback: 2 }),
  schema: [["t", "timestamp"], ["v", "float8"]],
  query: `SELECT t, v FROM ${ref("raw.src")} WHERE t >= @start AND t < @end` });"#,
        sql: "-- name: m.x\n-- kind: incremental_by_time_range(time_column = t, start = 2026-01-01, grain = hour, batch_size = 12, lookback = 2)\n-- schema: t timestamp, v float8\n-- refs: raw.src\nSELECT t, v FROM @ref(raw.src) WHERE t >= @start AND t < @end\n",
    },
    Variant {
        kind: "external (file)",
        lua: r#"define_model { name = "m.x", kind = kind.external { path = "data/x.csv", null_markers = { "NA", "" } }, schema = { { "a", "varchar" } } }"#,
        rhai: r#"define_model(#{ name: "m.x", kind: kind::external(#{ path: "data/x.csv", null_markers: ["NA", ""] }), schema: [["a", "varchar"]] });"#,
        sql: "-- name: m.x\n-- kind: external(path = data/x.csv, null_markers = [NA, ''])\n-- schema: a varchar\n",
    },
    Variant {
        kind: "external (table)",
        lua: r#"define_model { name = "m.x", kind = kind.external { table = "main.landing" }, schema = { { "a", "varchar" } } }"#,
        rhai: r#"define_model(#{ name: "m.x", kind: kind::external(#{ table: "main.landing" }), schema: [["a", "varchar"]] });"#,
        sql: "-- name: m.x\n-- kind: external(table = main.landing)\n-- schema: a varchar\n",
    },
];

/// Fingerprints of every model of a project made of `models/parent.lua` plus `file`.
fn fingerprints(file: &str, text: &str) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(dir.path().join("models/parent.lua"), PARENT_LUA).unwrap();
    fs_err::write(dir.path().join("models").join(file), text).unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v = efmesh::plan::versions(&project, &Default::default()).unwrap();
    v.fingerprints.into_iter().map(|(k, fp)| (k.to_string(), fp.as_str().to_string())).collect()
}

#[test]
fn the_same_model_has_one_fingerprint_in_lua_rhai_and_sql_for_every_kind() {
    for v in VARIANTS {
        let lua = fingerprints("x.lua", v.lua);
        let rhai = fingerprints("x.rhai", v.rhai);
        let sql = fingerprints("x.sql", v.sql);
        assert_eq!(lua["m.x"], rhai["m.x"], "{}: Lua vs Rhai", v.kind);
        assert_eq!(lua["m.x"], sql["m.x"], "{}: Lua vs SQL", v.kind);
    }
    // And the kinds really differ from each other (the test compares something).
    let all: std::collections::BTreeSet<String> = VARIANTS.iter().map(|v| fingerprints("x.lua", v.lua)["m.x"].clone()).collect();
    assert_eq!(all.len(), VARIANTS.len());
}

#[test]
fn a_file_saved_with_a_byte_order_mark_is_the_same_model_in_every_language() {
    // Some editors save UTF-8 with a byte-order mark: it is not part of the code or the header.
    let v = &VARIANTS[0];
    for (file, text) in [("x.lua", v.lua), ("x.rhai", v.rhai), ("x.sql", v.sql)] {
        let marked = fingerprints(file, &format!("\u{feff}{text}"));
        assert_eq!(marked, fingerprints(file, text), "{file}");
        assert!(marked.contains_key("m.x"), "{file}: {marked:?}");
    }
}

on_every_engine!(moving_a_model_to_another_file_or_language_rebuilds_nothing, a_rhai_model_on_a_lua_model_on_a_sql_model_applies_end_to_end);

/// A project on `engine` with the default configuration (models in `models/**/*.{lua,rhai,sql}`;
/// on Postgres, only `[engine] url_env` is written).
fn project_with_defaults(engine: EngineBackend) -> CliProject {
    let p = CliProject::on_engine(engine);
    if p.on_postgres() {
        p.write("efmesh.toml", &format!("# defaults: models/**/*.{{lua,rhai,sql}}\n[engine]\nurl_env = \"{PG_ENGINE_URL_ENV}\"\n"));
    } else {
        p.write("efmesh.toml", "# defaults: models/**/*.{lua,rhai,sql}\n");
    }
    p
}

/// Creates the source table `landing.src` (`id`, `t`, `v`) on the project's engine with `rows`
/// (`(id, TIMESTAMP '…', v)` tuples).
fn source_table(p: &CliProject, rows: &str) {
    p.execute_on_engine("CREATE SCHEMA IF NOT EXISTS landing");
    p.execute_on_engine("CREATE TABLE landing.src (id BIGINT, t TIMESTAMP, v DOUBLE PRECISION)");
    p.execute_on_engine(&format!("INSERT INTO landing.src VALUES {rows}"));
}

fn moving_a_model_to_another_file_or_language_rebuilds_nothing(engine: EngineBackend) {
    let p = project_with_defaults(engine);
    source_table(&p, "(1, TIMESTAMP '2026-01-01 00:00:00', 1.5), (2, TIMESTAMP '2026-01-01 01:00:00', 2.5)");
    p.write("models/parent.lua", PARENT_LUA);
    let full = &VARIANTS[0];
    p.write("models/x.lua", full.lua);
    let first = p.apply("dev");
    assert_eq!(action(&first, "m.x")["build"], true);
    for (from, to, text) in [
        ("models/x.lua", "models/deep/moved.lua", full.lua),
        ("models/deep/moved.lua", "models/x.rhai", full.rhai),
        ("models/x.rhai", "models/x.sql", full.sql),
    ] {
        p.remove(from);
        p.write(to, text);
        let plan = p.plan("dev");
        assert_eq!(plan["hasChanges"], false, "after moving to {to}: {plan:#}");
        assert!(actions(&plan).iter().all(|a| a["change"] == "unchanged"), "{plan:#}");
    }
}

fn a_rhai_model_on_a_lua_model_on_a_sql_model_applies_end_to_end(engine: EngineBackend) {
    let p = project_with_defaults(engine);
    source_table(&p, "(1, TIMESTAMP '2026-01-01 00:00:00', 1.5), (2, TIMESTAMP '2026-01-01 01:00:00', 2.5), (3, TIMESTAMP '2026-01-02 00:00:00', -1)");
    p.write("models/parent.lua", PARENT_LUA);
    p.write(
        "models/base.sql",
        "-- name: s.base\n-- kind: full\n-- schema: id bigint, v float8\n-- refs: raw.src\nSELECT id, v FROM @ref(raw.src) WHERE v > 0\n",
    );
    p.write(
        "models/mid.lua",
        r#"define_model { name = "s.mid", kind = kind.view(), schema = { { "id", "bigint" }, { "v2", "float8" } },
  query = "SELECT " .. cols("s.base", "id") .. ", v * 2 AS v2 FROM " .. ref("s.base") }"#,
    );
    p.write(
        "models/top.rhai",
        r#"define_model(#{ name: "s.top", kind: kind::full(), schema: [["total", "float8"]], query: `SELECT sum(v2) AS total FROM ${ref("s.mid")}` });"#,
    );
    let applied = p.apply("dev");
    let built: Vec<&str> = applied["built"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(built, vec!["s.base", "s.mid", "s.top"]);
    // A double is spelled `8.0` by DuckDB and `8` by Postgres.
    let total = if p.on_postgres() { "8" } else { "8.0" };
    assert_eq!(p.rows("dev__s.top"), vec![vec![Some(total.to_string())]]);
}

#[test]
fn cols_takes_what_ref_returned_as_well_as_a_handle_or_a_name() {
    let p = crate::common::sample_project();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai}"));
    p.write(
        "models/x.lua",
        "local a = ref(\"s.a\")\ndefine_model { name = \"s.x\", kind = kind.view(), schema = { { \"id\", \"integer\" } }, query = \"SELECT \" .. cols(a, \"id\") .. \" FROM \" .. a }\n",
    );
    p.write(
        "models/y.rhai",
        "let a = ref(\"s.a\");\ndefine_model(#{ name: \"s.y\", kind: kind::view(), schema: [[\"id\", \"integer\"]], query: `SELECT ${cols(a, \"id\")} FROM ${a}` });\n",
    );
    p.run(&["check"]).expect_code(0);
    for model in ["s.x", "s.y"] {
        let sql = crate::common::rendered(&p, model);
        assert!(sql.contains("\"id\"") && sql.contains("FROM s.a"), "{model}: {sql}");
    }
    // An empty list names no column (`cols(x)` is every column): an error, not every column.
    p.write("models/y.rhai", &p.read("models/y.rhai").replace("cols(a, \"id\")", "cols(a, [])"));
    let run = p.run(&["check"]);
    assert!(run.expect_code(1).stdout.contains("models/y.rhai:2") && run.stdout.contains("`cols(x, [])` names no column"), "{}", run.stdout);
}
