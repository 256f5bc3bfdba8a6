//! Seeds: CSV and JSON files of the project loaded into tables, end to end through the binary.
//! CSV details (BOM, quoted empty vs empty, null markers), typing errors that stop the apply
//! before anything is built, the content hash in the fingerprint (edit → the seed and its
//! descendants rebuild, nothing else), JSON seeds, and one fingerprint in Lua, Rhai and SQL.

use crate::common::{EngineBackend, Project, action, actions, set, string_set};
use crate::on_every_engine;

/// A project on `engine` whose models may be Lua, Rhai or SQL.
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
    p
}

/// `models/seed.lua`: seed `ref.depts` over `file` with the given schema and extra options.
fn seed_model(file: &str, schema: &str, options: &str) -> String {
    format!("return define_model {{\n  name = \"ref.depts\",\n  kind = kind.seed {{ path = \"{file}\"{options} }},\n  schema = {schema},\n}}\n")
}

const DEPT_SCHEMA: &str = r#"{ { "code", "varchar" }, { "name", "varchar" }, { "beds", "integer" }, { "note", "varchar" } }"#;

on_every_engine!(
    csv_seed_strips_the_bom_and_tells_quoted_empty_text_from_null,
    rows_come_in_file_order_with_header_columns_in_any_order,
    a_value_that_does_not_fit_fails_the_apply_before_anything_is_built,
    every_bad_column_is_named_and_fractions_are_not_rounded_into_integers_or_decimals,
    header_must_name_exactly_the_declared_columns,
    editing_the_seed_rebuilds_the_seed_and_its_descendants_only,
    a_seed_has_one_fingerprint_in_lua_rhai_and_sql,
    a_seed_changed_between_plan_and_apply_is_refused,
    a_seed_is_audited_when_it_is_built,
    a_utc_offset_a_timestamp_column_would_drop_is_refused,
    every_utc_offset_form_a_timestamp_or_time_column_would_drop_is_refused,
    a_time_finer_than_its_type_keeps_is_refused_before_anything_is_built,
);

/// Children of `ref.depts`: `m.big` (full), `m.top` (full, over `m.big`), and an unrelated
/// `m.other`.
fn write_children(p: &Project) {
    p.write(
        "models/children.lua",
        r#"local big = define_model {
  name = "m.big", kind = kind.full(),
  schema = { { "code", "varchar" }, { "beds", "integer" } },
  query = "SELECT code, beds FROM " .. ref("ref.depts") .. " WHERE beds >= 50",
}
define_model {
  name = "m.top", kind = kind.full(),
  schema = { { "n", "bigint" }, { "beds", "bigint" } },
  query = "SELECT count(*) AS n, CAST(sum(beds) AS BIGINT) AS beds FROM " .. ref(big),
}
define_model {
  name = "m.other", kind = kind.full(),
  schema = { { "x", "integer" } },
  query = "SELECT 1 AS x",
}
"#,
    );
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

fn built(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    string_set(&v["built"])
}

fn csv_seed_strips_the_bom_and_tells_quoted_empty_text_from_null(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "seeds/depts.csv",
        "\u{feff}code,name,beds,note\r\n\
         ER,\"Emergency, Department\",32,\"\"\r\n\
         ICU,Intensive Care,NA,\r\n\
         WARD,\"General\r\nWard\",600,\"NA\"\r\n\
         LAB,\"Lab \"\"B\"\"\",0,NA\r\n",
    );
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, r#", null_markers = { "NA" }"#));
    let applied = p.apply("dev");
    assert_eq!(built(&applied), set(&["ref.depts"]));
    assert_eq!(action(&applied, "ref.depts")["kind"], "seed");

    // The column's type as each engine names it.
    let (type_of, integer) = if p.on_postgres() { ("CAST(pg_typeof(beds) AS VARCHAR)", "integer") } else { ("typeof(beds)", "INTEGER") };
    let rows =
        p.query(&format!("SELECT code, name, CAST(beds AS VARCHAR), note, CAST(note IS NULL AS VARCHAR), {type_of} FROM \"dev__ref\".\"depts\" ORDER BY code"));
    let expect = |code: &str, name: &str, beds: Option<&str>, note: Option<&str>| {
        vec![s(code), s(name), beds.map(str::to_string), note.map(str::to_string), s(if note.is_none() { "true" } else { "false" }), s(integer)]
    };
    assert_eq!(
        rows,
        vec![
            expect("ER", "Emergency, Department", Some("32"), Some("")), // quoted empty: text
            expect("ICU", "Intensive Care", None, None),                 // NA and unquoted empty: NULL
            expect("LAB", "Lab \"B\"", Some("0"), None),                 // unquoted NA: NULL
            expect("WARD", "General\r\nWard", Some("600"), Some("NA")),  // quoted "NA": text
        ]
    );
    // The first header column was read as `code`, not `\u{feff}code`.
    let cols = p.query("SELECT column_name FROM information_schema.columns WHERE table_schema = 'dev__ref' AND table_name = 'depts' ORDER BY ordinal_position");
    assert_eq!(cols, vec![vec![s("code")], vec![s("name")], vec![s("beds")], vec![s("note")]]);
}

fn rows_come_in_file_order_with_header_columns_in_any_order(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/depts.csv", "beds,note,name,code\n5,,E,z\n3,,C,a\n4,,D,m\n");
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, ""));
    p.apply("dev");
    // A physical table keeps insertion order for a plain scan; the view selects declared columns.
    let rows = p.query("SELECT * FROM \"dev__ref\".\"depts\"");
    assert_eq!(rows, vec![vec![s("z"), s("E"), s("5"), None], vec![s("a"), s("C"), s("3"), None], vec![s("m"), s("D"), s("4"), None]]);
}

fn a_value_that_does_not_fit_fails_the_apply_before_anything_is_built(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,Intensive,120,\n");
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, ""));
    write_children(&p);
    p.apply("dev");
    let (tables, relations, state) = (p.physical_tables(), p.relations(), p.state_summary());
    let before = p.rows("\"dev__ref\".\"depts\"");

    // Row 4 (the header is row 1) holds `abc` in the INTEGER column `beds`; a new, valid model
    // would be built too if the contract did not stop everything.
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,Intensive,120,\nWARD,Ward,abc,\n");
    p.write("models/fine.lua", "define_model { name = \"z.fine\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let line = run.stderr.lines().find(|l| l.contains("seeds/depts.csv")).unwrap_or_else(|| panic!("no line names the seed file:\n{}", run.stderr));
    // The engine's own wording of the failed cast closes the line.
    let cast_error = if p.on_postgres() { "invalid input syntax for type integer: \"abc\"" } else { "INT32" };
    for needle in ["models/seed.lua:1", "`ref.depts`", "row 4", "column `beds`", "`abc` is not a valid `integer`", cast_error] {
        assert!(line.contains(needle), "{needle:?} missing from {line:?}\n{}", run.stderr);
    }
    assert!(run.stderr.contains("nothing was built"), "{}", run.stderr);
    assert_eq!(p.physical_tables(), tables, "something was built");
    assert_eq!(p.relations(), relations);
    assert_eq!(p.state_summary(), state, "the state store changed");
    assert_eq!(p.rows("\"dev__ref\".\"depts\""), before);
}

fn every_bad_column_is_named_and_fractions_are_not_rounded_into_integers_or_decimals(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "seeds/t.csv",
        "id,ratio,day,flag,label,amount,wide,big,sep\n1,0.5,2026-01-01,true,a,1.25,9418509394911681.08,1,1\n2.5,x,2026-02-30,maybe,\"\",3.555,9418509394911681.08,833629687074913.637,1_000.125\n3,1,2026-01-03,false,c,2,1.50,2,2\n",
    );
    // Declared types are the engine's: Postgres spells `double` `double precision`.
    let double = if p.on_postgres() { "double precision" } else { "double" };
    p.write(
        "models/seed.lua",
        &format!(
            r#"define_model {{ name = "ref.t", kind = kind.seed {{ path = "seeds/t.csv" }},
  schema = {{ {{ "id", "bigint" }}, {{ "ratio", "{double}" }}, {{ "day", "date" }}, {{ "flag", "boolean" }}, {{ "label", "varchar" }}, {{ "amount", "decimal(10,2)" }}, {{ "wide", "decimal(18,2)" }}, {{ "big", "decimal(18,2)" }}, {{ "sep", "decimal(18,2)" }} }} }}
"#
        ),
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    // DuckDB would round `2.5` into a BIGINT (efmesh refuses it); Postgres's cast refuses it itself.
    let fraction =
        if p.on_postgres() { "`2.5` is not a valid `bigint`: ERROR: invalid input syntax for type bigint: \"2.5\"" } else { "`2.5` is not a whole number" };
    // A value with more decimals than the column holds would be rounded (by either engine).
    let rounded = "`3.555` has more than the 2 decimal(s) of `decimal(10,2)`, which would round it to 3.56";
    // Exactly, however wide: 16 digits before the point fit `decimal(18,2)` (not refused), one
    // more decimal than it holds does not (a double would see neither).
    let wide_rounded = "`833629687074913.637` has more than the 2 decimal(s)";
    for (column, value) in
        [("id", fraction), ("ratio", "`x`"), ("day", "`2026-02-30`"), ("flag", "`maybe`"), ("amount", rounded), ("big", wide_rounded), ("sep", "`1_000.125`")]
    {
        let line = err.lines().find(|l| l.contains(&format!("column `{column}`"))).unwrap_or_else(|| panic!("no problem for `{column}`:\n{err}"));
        assert!(line.contains("row 3") && line.contains(value), "{line}");
    }
    assert!(!err.contains("column `label`"), "a quoted empty string fits varchar:\n{err}");
    assert!(!err.contains("column `wide`"), "every value fits `decimal(18,2)`:\n{err}");
    assert!(p.physical_tables().is_empty());
}

fn header_must_name_exactly_the_declared_columns(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/depts.csv", "code,title,beds,note,floor\nER,Emergency,32,,0\n");
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, ""));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("the header lacks declared column `name`"), "{}", run.stderr);
    assert!(run.stderr.contains("`title`, `floor` that the schema does not declare"), "{}", run.stderr);
    assert!(p.physical_tables().is_empty());

    // A row with a missing field is named by its row.
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,Intensive\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("`seeds/depts.csv`: row 3: the row has 2 fields, the header has 4"), "{}", run.stderr);
}

fn editing_the_seed_rebuilds_the_seed_and_its_descendants_only(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,Intensive,120,\n");
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, ""));
    write_children(&p);
    let first = p.apply("dev");
    assert_eq!(built(&first), set(&["ref.depts", "m.big", "m.top", "m.other"]));
    assert_eq!(p.rows("\"dev__m\".\"top\""), vec![vec![s("1"), s("120")]]);

    // Rewriting identical bytes changes nothing: the fingerprint follows the content.
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,Intensive,120,\n");
    assert_eq!(p.plan("dev")["hasChanges"], false);

    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,Intensive,120,\nWARD,Ward,600,\n");
    let plan = p.plan("dev");
    let seed = action(&plan, "ref.depts");
    assert_eq!((seed["change"].as_str(), seed["build"].as_bool()), (Some("breaking"), Some(true)), "{plan:#}");
    assert_eq!(seed["explain"]["reason"], "the seed file's content changed");
    assert_ne!(seed["fingerprint"], seed["previous"]);
    for child in ["m.big", "m.top"] {
        let a = action(&plan, child);
        assert_eq!((a["change"].as_str(), a["build"].as_bool()), (Some("indirect"), Some(true)), "{child}: {plan:#}");
    }
    assert_eq!(action(&plan, "m.other")["change"], "unchanged");

    let applied = p.apply("dev");
    assert_eq!(built(&applied), set(&["ref.depts", "m.big", "m.top"]));
    assert_eq!(p.rows("\"dev__m\".\"top\""), vec![vec![s("2"), s("720")]]);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    // Promotion to prod is a view swap: environments view the seed like any model.
    let prod = p.apply("prod");
    assert!(built(&prod).is_empty(), "{prod:#}");
    assert_eq!(p.rows("\"ref\".\"depts\""), p.rows("\"dev__ref\".\"depts\""));
}

on_every_engine!(json_seeds_read_arrays_and_newline_delimited_objects, json_numbers_load_every_digit, numbers_a_double_cannot_tell_are_refused_by_their_text);

/// A fraction past a double's 53 bits (`9007199254740993.5` and the integer next to it are one
/// double) into an integer column, and a list element in exponent notation with more decimals
/// than its type holds, are refused like any other rounding, on both engines.
fn numbers_a_double_cannot_tell_are_refused_by_their_text(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/n.json", r#"[{"id": 1, "n": 9007199254740993.5, "d": [1.25]}, {"id": 2, "n": 1, "d": [1.5555E1, 2]}]"#);
    p.write(
        "models/seed.lua",
        r#"define_model { name = "ref.n", kind = kind.seed { path = "seeds/n.json" }, schema = { { "id", "bigint" }, { "n", "bigint" }, { "d", "decimal(10,2)[]" } } }
"#,
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let line =
        |column: &str| run.stderr.lines().find(|l| l.contains(&format!("column `{column}`"))).unwrap_or_else(|| panic!("{column}: {}", run.stderr)).to_string();
    assert!(line("n").contains("row 1") && line("n").contains("`9007199254740993.5` is not a"), "{}", line("n"));
    assert!(line("d").contains("row 2") && line("d").contains("holds a value its elements' type would round"), "{}", line("d"));
    assert!(p.physical_tables().is_empty());
}

/// A JSON number past a double's 17 digits loads as written, alone or in a list: not the nearest
/// double (`12345678901234567.89` stored as `12345678901234568.00`).
fn json_numbers_load_every_digit(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/n.json", r#"[{"id": 1, "big": 123456789012345678901234567890, "amount": 12345678901234567.89, "amounts": [12345678901234567.89, 1]}]"#);
    p.write(
        "models/seed.lua",
        r#"define_model { name = "ref.n", kind = kind.seed { path = "seeds/n.json" },
  schema = { { "id", "bigint" }, { "big", "decimal(38,0)" }, { "amount", "decimal(20,2)" }, { "amounts", "decimal(20,2)[]" } } }
"#,
    );
    p.apply("dev");
    let rows = p.rows("\"dev__ref\".\"n\"");
    assert_eq!(rows[0][1].as_deref(), Some("123456789012345678901234567890"), "{rows:?}");
    assert_eq!(rows[0][2].as_deref(), Some("12345678901234567.89"), "{rows:?}");
    let list = rows[0][3].as_deref().unwrap_or_default();
    assert!(list.contains("12345678901234567.89") && list.contains("1.00"), "{rows:?}");
}

/// JSON lists load into array columns (`varchar[]`) on both engines: DuckDB casts the JSON text,
/// Postgres gets its own array literal.
fn json_seeds_read_arrays_and_newline_delimited_objects(engine: EngineBackend) {
    let p = project(engine);
    let schema = r#"{ { "code", "varchar" }, { "beds", "integer" }, { "open", "boolean" }, { "tags", "varchar[]" } }"#;
    p.write(
        "seeds/a.json",
        r#"[
  {"code": "ER", "beds": 32, "open": true, "tags": ["front", "24h"]},
  {"code": "ICU", "beds": "120", "open": false},
  {"code": "", "beds": null, "open": null, "tags": []}
]"#,
    );
    p.write("seeds/b.ndjson", "{\"code\": \"ER\", \"beds\": 32, \"open\": true, \"tags\": [\"front\", \"24h\"]}\n{\"code\": \"ICU\", \"beds\": \"120\", \"open\": false}\n{\"code\": \"\", \"beds\": null, \"open\": null, \"tags\": []}\n");
    p.write(
        "models/seed.lua",
        &format!(
            "define_model {{ name = \"ref.a\", kind = kind.seed {{ path = \"seeds/a.json\" }}, schema = {schema} }}\n\
             define_model {{ name = \"ref.b\", kind = kind.seed {{ path = \"seeds/b.ndjson\" }}, schema = {schema} }}\n"
        ),
    );
    p.apply("dev");
    // Each engine's own text of booleans and arrays.
    let (yes, no, empty, two) = if p.on_postgres() { ("t", "f", "{}", "{front,24h}") } else { ("true", "false", "[]", "[front, 24h]") };
    let expect = vec![vec![s(""), None, None, s(empty)], vec![s("ER"), s("32"), s(yes), s(two)], vec![s("ICU"), s("120"), s(no), None]];
    assert_eq!(p.rows("\"dev__ref\".\"a\""), expect);
    assert_eq!(p.rows("\"dev__ref\".\"b\""), expect);
    // The preview reads the file as apply does.
    let preview = p.run(&["preview", "dev", "ref.a", "--json"]).expect_code(0).json();
    assert_eq!(preview["previews"][0]["rows"].as_array().map(Vec::len), Some(3), "{preview:#}");

    // A value that does not fit is named by its row (the n-th object) and key.
    p.write(
        "seeds/b.ndjson",
        "{\"code\": \"ER\", \"beds\": 32, \"open\": true, \"tags\": []}\n{\"code\": \"ICU\", \"beds\": 1.5}\n{\"code\": \"X\", \"beds\": true}\n",
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    // DuckDB: "is not a whole number"; Postgres: "is not a valid `integer`: ERROR: invalid input syntax …".
    assert!(run.stderr.contains("`seeds/b.ndjson`: row 2, column `beds`: `1.5` is not a"), "{}", run.stderr);
    // Keys must be declared columns.
    p.write("seeds/b.ndjson", "{\"code\": \"ER\", \"bed\": 32, \"beds\": 1, \"open\": true, \"tags\": []}\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("row 1, column `bed`: the key is not a declared column (did you mean `beds`?)"), "{}", run.stderr);
}

#[test]
fn a_missing_seed_file_is_a_load_error_naming_the_model_and_the_path() {
    let p = project(EngineBackend::DuckDb);
    p.write("models/seed.lua", &seed_model("seeds/nope.csv", DEPT_SCHEMA, ""));
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/seed.lua:1: model `ref.depts`: cannot read seed file `seeds/nope.csv`"), "{}", run.stderr);
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(run.stderr.contains("seeds/nope.csv") || run.stdout.contains("seeds/nope.csv"), "{run:?}");
}

fn a_seed_has_one_fingerprint_in_lua_rhai_and_sql(engine: EngineBackend) {
    let csv = "code;name;beds;note\nER;Emergency;32;NA\n";
    let variants = [
        ("seed.lua", seed_model("seeds/d.csv", DEPT_SCHEMA, r#", null_markers = { "NA" }, delimiter = ";""#)),
        (
            "seed.rhai",
            r#"define_model(#{ name: "ref.depts", kind: kind::seed(#{ path: "seeds/d.csv", null_markers: ["NA"], delimiter: ";" }),
  schema: [["code", "varchar"], ["name", "varchar"], ["beds", "integer"], ["note", "varchar"]] });"#
                .to_string(),
        ),
        ("seed.sql", "-- name: ref.depts\n-- kind: seed(path = seeds/d.csv, null_markers = [NA], delimiter = ';')\n-- schema: code varchar, name varchar, beds integer, note varchar\n".to_string()),
    ];
    let mut fps = Vec::new();
    for (file, text) in &variants {
        let p = project(engine.another());
        p.write("seeds/d.csv", csv);
        p.write(&format!("models/{file}"), text);
        let applied = p.apply("dev");
        fps.push(action(&applied, "ref.depts")["fingerprint"].as_str().unwrap().to_string());
        assert_eq!(p.rows("\"dev__ref\".\"depts\""), vec![vec![s("ER"), s("Emergency"), s("32"), None]], "{file}");
    }
    assert_eq!(fps[0], fps[1], "Lua vs Rhai");
    assert_eq!(fps[0], fps[2], "Lua vs SQL");

    // The hash is the file's content: the same declaration over other bytes is another version.
    let p = project(engine.another());
    p.write("seeds/d.csv", "code;name;beds;note\nER;Emergency;33;NA\n");
    p.write("models/seed.lua", &variants[0].1);
    assert_ne!(action(&p.plan("dev"), "ref.depts")["fingerprint"].as_str().unwrap(), fps[0]);
}

#[test]
fn seed_declarations_are_checked_at_load() {
    let p = project(EngineBackend::DuckDb);
    for (options, message) in [
        (r#"path = "seeds/*.csv""#, "a seed is one file, not a glob"),
        (r#"path = "seeds/x.parquet""#, "read parquet `seeds/x.parquet` with `kind.external`"),
        (r#"path = "seeds/x.json", null_markers = { "NA" }"#, "`null_markers` applies to CSV seeds only"),
        (r#"path = "seeds/x.csv", delimiter = ";;""#, "`delimiter` of kind `seed` must be one character"),
        (r#"path = "seeds/x.csv", union_by_name = true"#, "unknown option `union_by_name` for kind `seed`"),
        (r#"file = "seeds/x.csv""#, "unknown option `file` for kind `seed`"),
    ] {
        p.write(
            "models/seed.lua",
            &format!("define_model {{ name = \"ref.x\", kind = kind.seed {{ {options} }}, schema = {{ {{ \"a\", \"varchar\" }} }} }}\n"),
        );
        let run = p.run(&["check"]);
        run.expect_code(1);
        let out = format!("{}{}", run.stdout, run.stderr);
        assert!(out.contains(message), "{options}: {out}");
    }
    p.write("seeds/x.csv", "a\n1\n");
    p.write(
        "models/seed.lua",
        "define_model { name = \"ref.x\", kind = kind.seed { path = \"seeds/x.csv\" }, schema = { { \"a\", \"varchar\" } }, query = \"SELECT 1\" }\n",
    );
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(format!("{}{}", run.stdout, run.stderr).contains("a seed has no query"), "{run:?}");
}

fn a_seed_changed_between_plan_and_apply_is_refused(engine: EngineBackend) {
    // The library path: plan, then the file changes, then apply with the old plan.
    use efmesh::config::Config;
    let p = project(engine.clone());
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\n");
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, ""));
    let config = Config::load(&p.root().join("efmesh.toml")).unwrap();
    let project = efmesh::project::Project::load(&config).unwrap();
    let state = efmesh::state::SqliteStore::open_in_memory().unwrap();
    let plan = efmesh::plan::plan(&project, &state, "dev", efmesh::core::interval::parse_instant("2026-02-10").unwrap()).unwrap();
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,99,\n");
    let mut engine: Box<dyn efmesh::engine::Engine> = match &engine {
        EngineBackend::DuckDb => Box::new(efmesh::engine::duckdb::DuckDb::in_memory().unwrap()),
        EngineBackend::Postgres(t) => Box::new(efmesh::engine::postgres::Postgres::open(&t.url, false).unwrap()),
    };
    let err = efmesh::apply::apply(&project, &plan, &state, engine.as_mut(), &Default::default()).unwrap_err().to_string();
    assert!(err.contains("seed file `seeds/depts.csv` changed after the plan was computed"), "{err}");
    assert!(actions(&serde_json::to_value(&plan).unwrap()).iter().any(|a| a["name"] == "ref.depts"));
}

fn a_seed_is_audited_when_it_is_built(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,,120,\n");
    p.write(
        "models/seed.lua",
        r#"define_model { name = "ref.depts", kind = kind.seed { path = "seeds/depts.csv" },
  schema = { { "code", "varchar" }, { "name", "varchar" }, { "beds", "integer" }, { "note", "varchar" } },
  audits = { audit.not_null("name") } }
"#,
    );
    // The empty `name` of ICU is NULL: the blocking audit stops the apply, nothing is served.
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("not_null") && run.stderr.contains("ref.depts"), "{}", run.stderr);
    assert!(p.state_summary().envs.is_empty(), "nothing was promoted");
    // Quoting the empty name makes it text: the audit passes.
    p.write("seeds/depts.csv", "code,name,beds,note\nER,Emergency,32,\nICU,\"\",120,\n");
    p.apply("dev");
    assert_eq!(p.rows("\"dev__ref\".\"depts\""), vec![vec![s("ER"), s("Emergency"), s("32"), None], vec![s("ICU"), s(""), s("120"), None]]);
}

#[test]
fn the_dec_alias_and_list_elements_round_nothing_either() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "seeds/t.csv",
        "id,amount,nums,nested,bigs,exps\n1,1.25,\"[1,2,1.5e3]\",\"[[1]]\",\"[14677563290226445.16, 1.255e2]\",\"[1]\"\n2,1.555,\"[1.5,2]\",\"[[1.5]]\",\"[1.10]\",\"[1]\"\n3,1,\"[1]\",\"[[1]]\",\"[1]\",\"[15e-1]\"\n",
    );
    p.write(
        "models/seed.lua",
        r#"define_model { name = "ref.t", kind = kind.seed { path = "seeds/t.csv" },
  schema = { { "id", "bigint" }, { "amount", "dec(10,2)" }, { "nums", "integer[]" }, { "nested", "integer[][]" }, { "bigs", "decimal(38,2)[]" }, { "exps", "integer[]" } } }
"#,
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(!run.stderr.contains("column `bigs`"), "exact long decimals fit: {}", run.stderr);
    // In exponent notation: by value (1.5e3 is a whole 1500, 1.255e2 fits two decimals; 15e-1
    // is no integer).
    assert!(run.stderr.contains("row 4, column `exps`: `[15e-1]` holds a value"), "{}", run.stderr);
    for (column, value) in [
        ("amount", "`1.555` has more than the 2 decimal(s) of `dec(10,2)`"),
        ("nums", "`[1.5,2]` holds a value its elements' type would round"),
        ("nested", "`[[1.5]]` holds a value its elements' type would round"),
    ] {
        let line =
            run.stderr.lines().find(|l| l.contains(&format!("column `{column}`"))).unwrap_or_else(|| panic!("no problem for `{column}`:\n{}", run.stderr));
        assert!(line.contains("row 3") && line.contains(value), "{line}");
    }
    assert!(p.physical_tables().is_empty());
}

/// `CAST('… 10:00:00+02:00' AS timestamp)` drops the offset on both engines (10:00 stored for
/// 08:00 UTC): refused, naming the offset; `Z` and `+00:00` change nothing and load.
fn a_utc_offset_a_timestamp_column_would_drop_is_refused(engine: EngineBackend) {
    let p = project(engine);
    p.write("seeds/t.csv", "id,at\n1,2026-01-02T10:00:00Z\n2,2026-01-02 10:00:00+00:00\n3,2026-01-02T10:00:00+02:00\n");
    p.write(
        "models/seed.lua",
        r#"define_model { name = "ref.t", kind = kind.seed { path = "seeds/t.csv" }, schema = { { "id", "bigint" }, { "at", "timestamp" } } }
"#,
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let line = run.stderr.lines().find(|l| l.contains("column `at`")).unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(line.contains("row 4") && line.contains("has the UTC offset `+02:00`"), "{line}");
    p.write("seeds/t.csv", "id,at\n1,2026-01-02T10:00:00Z\n2,2026-01-02 10:00:00+00:00\n3,2026-01-02T08:00:00\n");
    p.apply("dev");
    assert_eq!(p.rows("\"dev__ref\".\"t\"").len(), 3);
}

/// Every offset form DuckDB reads is dropped as silently as `+02:00` by a cast to a `timestamp`
/// (or a `time`) without a time zone, and was loaded two hours off: `+02:00:00` (hours, minutes
/// and seconds), `+02` after a one-digit second, `+02` followed by a tab in a quoted field (the
/// cast skips it), `10:00:00+02` in a `time` column. Each is refused, naming the file, the row,
/// the column and the offset, before anything is built; the same forms with a zero offset load.
fn every_utc_offset_form_a_timestamp_or_time_column_would_drop_is_refused(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/t.sql",
        "-- name:   ref.t\n-- kind:   seed(path = seeds/t.csv)\n-- schema: id integer, hms timestamp, short timestamp, tab timestamp, t time\n",
    );
    let header = "id,hms,short,tab,t\n";
    let fine = "1,2026-01-02 10:00:00,2026-01-02 10:00:00,2026-01-02 10:00:00,10:00:00\n";
    p.write("seeds/t.csv", &format!("{header}{fine}2,2026-01-02 10:00:00+02:00:00,2026-01-02 10:00:0+02,\"2026-01-02 10:00:00+02\t\",10:00:00+02\n"));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    for (column, offset) in [("hms", "+02:00:00"), ("short", "+02"), ("tab", "+02"), ("t", "+02")] {
        let line =
            run.stderr.lines().find(|l| l.contains(&format!("column `{column}`"))).unwrap_or_else(|| panic!("no problem for `{column}`:\n{}", run.stderr));
        let offset = format!("has the UTC offset `{offset}`");
        for needle in ["`seeds/t.csv`", "row 3", offset.as_str(), "(no time zone) would drop"] {
            assert!(line.contains(needle), "{needle:?} missing from {line:?}");
        }
    }
    let time = run.stderr.lines().find(|l| l.contains("column `t`")).unwrap_or_default();
    assert!(time.contains("declare `timetz`"), "{time}");
    assert!(p.physical_tables().is_empty(), "something was built");

    // A zero offset, in the same forms, changes nothing and loads.
    p.write("seeds/t.csv", &format!("{header}{fine}2,2026-01-02 10:00:00+00:00:00,2026-01-02 10:00:0-00,\"2026-01-02 10:00:00+00\t\",10:00:00+00\n"));
    p.apply("dev");
    let at = s("2026-01-02 10:00:00");
    assert_eq!(
        p.rows("\"dev__ref\".\"t\""),
        vec![vec![s("1"), at.clone(), at.clone(), at.clone(), s("10:00:00")], vec![s("2"), at.clone(), at.clone(), at, s("10:00:00")]]
    );
}

/// `2026-01-02 23:59:59.9999999+00` is cut to `…59.999999` by DuckDB's cast but rounded to
/// `2026-01-03 00:00:00` by Postgres's (another day): a seven-digit fraction in a `timestamp`,
/// `timestamptz` or `time` column, and a time of day in a `date` column, are refused, naming the
/// file, the row and the column, before anything is built (the database and the state store are
/// unchanged); six digits, and trailing zeros past them, load.
fn a_time_finer_than_its_type_keeps_is_refused_before_anything_is_built(engine: EngineBackend) {
    let p = project(engine);
    let header = "id,ts,tsz,t,day\n";
    let fine = "1,2026-01-02 10:00:00,2026-01-02 10:00:00+00,10:00:00,2026-01-02\n";
    p.write("seeds/t.csv", &format!("{header}{fine}"));
    p.write(
        "models/seed.lua",
        r#"define_model { name = "ref.t", kind = kind.seed { path = "seeds/t.csv" },
  schema = { { "id", "bigint" }, { "ts", "timestamp" }, { "tsz", "timestamptz" }, { "t", "time" }, { "day", "date" } } }
"#,
    );
    p.apply("dev");
    let (tables, relations, state) = (p.physical_tables(), p.relations(), p.state_summary());
    let before = p.rows("\"dev__ref\".\"t\"");

    let row3 = "2,2026-01-02 23:59:59.9999999,2026-01-02 10:00:00.5+00,10:00:00,2026-01-02\n";
    let row4 = "3,2026-01-02 10:00:00,2026-01-02 23:59:59.9999999+00,12:00:00.1234567,2026-01-02 23:59:59\n";
    p.write("seeds/t.csv", &format!("{header}{fine}{row3}{row4}"));
    // A new, valid model would be built too if the contract did not stop everything.
    p.write("models/fine.lua", "define_model { name = \"z.fine\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    for (column, row, why) in [
        ("ts", "row 3", "\"2026-01-02 23:59:59.9999999\" has 7 digits of a second's fraction and `timestamp` keeps 6"),
        ("tsz", "row 4", "\"2026-01-02 23:59:59.9999999+00\" has 7 digits of a second's fraction and `timestamptz` keeps 6"),
        ("t", "row 4", "\"12:00:00.1234567\" has 7 digits of a second's fraction and `time` keeps 6"),
        ("day", "row 4", "\"2026-01-02 23:59:59\" has a time of day, which `date` would drop"),
    ] {
        let line =
            run.stderr.lines().find(|l| l.contains(&format!("column `{column}`"))).unwrap_or_else(|| panic!("no problem for `{column}`:\n{}", run.stderr));
        for needle in ["models/seed.lua:1", "`ref.t`", "`seeds/t.csv`", row, why] {
            assert!(line.contains(needle), "{needle:?} missing from {line:?}");
        }
    }
    assert!(run.stderr.contains("nothing was built"), "{}", run.stderr);
    assert_eq!(p.physical_tables(), tables, "something was built");
    assert_eq!(p.relations(), relations);
    assert_eq!(p.state_summary(), state, "the state store changed");
    assert_eq!(p.rows("\"dev__ref\".\"t\""), before);

    // Six digits, or trailing zeros past them, change nothing and load.
    let exact = "2,2026-01-02 23:59:59.999999,2026-01-02 23:59:59.9999990+00,12:00:00.123456,2026-01-02 00:00:00\n";
    p.write("seeds/t.csv", &format!("{header}{fine}{exact}"));
    p.apply("dev");
    assert_eq!(p.rows("\"dev__ref\".\"t\"").len(), 2);
}

/// A seed path naming a FIFO (or a device, a directory) is refused at load, naming the model and
/// the path: reading a FIFO would block forever, a device never end. The check is bounded by a
/// timeout so that a regression fails instead of hanging the suite.
#[test]
fn a_seed_path_that_is_not_a_regular_file_is_a_load_error_not_a_hang() {
    let p = Project::new();
    let made = std::process::Command::new("mkfifo").arg(p.root().join("seeds.csv")).status().expect("mkfifo");
    assert!(made.success());
    p.write("models/seed.lua", &seed_model("seeds.csv", DEPT_SCHEMA, ""));
    let mut child = p.command(&["plan", "dev"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn efmesh");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("`plan dev` still reads the FIFO after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("models/seed.lua") && stderr.contains("seeds.csv") && stderr.contains("not a regular file"), "{stderr}");
}

#[test]
fn crlf_and_blank_lines_give_the_true_line_and_text_after_a_closing_quote_is_refused() {
    let p = project(EngineBackend::DuckDb);
    p.write("models/seed.lua", &seed_model("seeds/depts.csv", DEPT_SCHEMA, ""));
    // CRLF line ends and two blank lines: the bad value is on line 5, data row 3 (the reader's
    // own count said `row 3 (line 2)`).
    p.write("seeds/depts.csv", "code,name,beds,note\r\nER,Emergency,32,\r\n\r\n\r\nICU,Intensive,abc,\r\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("`seeds/depts.csv`: row 3 (line 5), column `beds`: `abc`"), "{}", run.stderr);
    assert!(p.physical_tables().is_empty());

    // `"x" ` would load as `x `: refused at its row, column, line and character.
    p.write("seeds/depts.csv", "code,name,beds,note\nER,\"Emergency\" ,32,\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("`seeds/depts.csv`: row 2, column `name`: text after the closing quote of a quoted value (\" \" at line 2, character 15)"),
        "{}",
        run.stderr
    );
    assert!(p.physical_tables().is_empty());
}
