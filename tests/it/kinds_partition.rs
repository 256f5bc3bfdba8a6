//! `incremental_by_partition`: the first apply creates and fills the table; every `efmesh run`
//! replaces the partitions (tuples of `partitioned_by`, NULL a value like any other) present in
//! the query's output by the output's rows of them, and keeps the partitions the output lacks.
//! The same model in Lua, Rhai and SQL has one fingerprint; its partition columns are hashed.
//! Load errors name the column, the model and file:line. A new version is built from its query
//! alone, which the plan says (`dropsKept`; the `full` child rebuilds rather than reading the
//! same rows), and `--forward-only` keeps the table and the partitions the query no longer
//! returns.

use crate::common::*;

/// `raw.sales` reads the engine table `land.sales`; `m.by_region` replaces its partitions by
/// `region`; `m.totals` (full) sums it.
const MODELS: &str = r#"
local src = define_model {
  name = "raw.sales", kind = kind.external { table = "land.sales" },
  schema = { { "region", "varchar" }, { "item", "varchar" }, { "amount", "bigint" } },
}
local parts = define_model {
  name = "m.by_region", kind = kind.incremental_by_partition { partitioned_by = "region" },
  schema = { { "region", "varchar" }, { "item", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, item, amount FROM " .. ref(src),
}
define_model {
  name = "m.totals", kind = kind.full(),
  schema = { { "n", "bigint" }, { "total", "bigint" } },
  query = "SELECT count(*) AS n, sum(amount) AS total FROM " .. ref(parts),
}
"#;

crate::on_every_engine!(
    run_replaces_exactly_the_partitions_in_the_output_and_keeps_the_others,
    forward_only_keeps_the_partitions_the_query_no_longer_returns_and_adds_the_column,
);

fn rows(list: &[&[&str]]) -> Rows {
    let mut r: Rows = list.iter().map(|v| v.iter().map(|x| if *x == "NULL" { None } else { Some(x.to_string()) }).collect()).collect();
    r.sort();
    r
}

fn run_replaces_exactly_the_partitions_in_the_output_and_keeps_the_others(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("models/m.lua", MODELS);
    p.execute_on_engine("CREATE SCHEMA land");
    p.execute_on_engine("CREATE TABLE land.sales (region VARCHAR, item VARCHAR, amount BIGINT)");
    p.execute_on_engine("INSERT INTO land.sales VALUES ('a', 'x', 1), ('a', 'y', 2), ('b', 'x', 3), ('c', 'x', 4), (NULL, 'z', 5)");
    // The first build creates the table with every row.
    let applied = p.apply("dev");
    assert_eq!(string_set(&applied["built"]), set(&["m.by_region", "m.totals"]), "{applied:#}");
    let view = env_view("dev", "m.by_region");
    let first = rows(&[&["a", "x", "1"], &["a", "y", "2"], &["b", "x", "3"], &["c", "x", "4"], &["NULL", "z", "5"]]);
    assert_eq!(p.rows(&view), first);

    // Partition `a` changes (a row changes, another goes), the NULL partition changes, `b` is
    // returned as it is, `c` is no longer returned at all.
    p.execute_on_engine("DELETE FROM land.sales WHERE region = 'a' OR region = 'c' OR region IS NULL");
    p.execute_on_engine("INSERT INTO land.sales VALUES ('a', 'x', 10), (NULL, 'z', 6)");
    // `apply` with nothing changed refreshes nothing.
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(p.rows(&view), first, "apply must not refresh");

    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ran["outcome"], "processed", "{ran:#}");
    assert_eq!(string_set(&ran["processed"]), set(&["m.by_region", "m.totals"]), "the full child is rebuilt: {ran:#}");
    // `a` is exactly the new output (`a,y` is gone: a partition is replaced, not upserted), NULL
    // matched NULL (replaced, not duplicated), `b` as it was, `c` kept although absent.
    let second = rows(&[&["a", "x", "10"], &["b", "x", "3"], &["c", "x", "4"], &["NULL", "z", "6"]]);
    assert_eq!(p.rows(&view), second);
    assert_eq!(p.rows(&env_view("dev", "m.totals")), rows(&[&["4", "23"]]));

    // Idempotent: the same source gives the same table.
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&view), second);
}

/// [`MODELS`] with `m.by_region`'s partition block replaced: `item` returned as `sel` and declared
/// `decl` (`item`/`varchar` as it is).
fn by_region(decl: &str, sel: &str) -> String {
    let edited = MODELS.replace(
        r#"schema = { { "region", "varchar" }, { "item", "varchar" }, { "amount", "bigint" } },
  query = "SELECT region, item, amount FROM " .. ref(src),"#,
        &format!(
            r#"schema = {{ {{ "region", "varchar" }}, {{ "item", "varchar" }}, {{ "amount", "bigint" }}{decl} }},
  query = "SELECT region, item, amount{sel} FROM " .. ref(src),"#
        ),
    );
    assert!(decl.is_empty() || edited != MODELS);
    edited
}

fn forward_only_keeps_the_partitions_the_query_no_longer_returns_and_adds_the_column(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("models/m.lua", MODELS);
    p.execute_on_engine("CREATE SCHEMA land");
    p.execute_on_engine("CREATE TABLE land.sales (region VARCHAR, item VARCHAR, amount BIGINT)");
    p.execute_on_engine("INSERT INTO land.sales VALUES ('a', 'x', 1), ('b', 'y', 3)");
    p.apply("dev");
    // The query no longer returns `b`: the run replaces `a` and keeps `b`.
    p.execute_on_engine("DELETE FROM land.sales");
    p.execute_on_engine("INSERT INTO land.sales VALUES ('a', 'x', 10)");
    p.run(&["run", "dev"]).expect_code(0);
    let view = env_view("dev", "m.by_region");
    assert_eq!(p.rows(&view), rows(&[&["a", "x", "10"], &["b", "y", "3"]]));
    let totals = || p.rows(&env_view("dev", "m.totals"));
    assert_eq!(totals(), rows(&[&["2", "13"]]));
    let tables = p.physical_tables();

    // A non-breaking added column: the new version would be built from the query alone, without
    // `b`, and the `full` rollup over it is rebuilt (its parent is served from another table).
    let loud = by_region(r#", { "loud", "varchar" }"#, ", upper(item) AS loud");
    p.write("models/m.lua", &loud);
    let plan = p.plan("dev");
    let parts = action(&plan, "m.by_region");
    assert_eq!(parts["change"], "non-breaking", "{plan:#}");
    assert_eq!((parts["dropsKept"]["built"].as_bool(), parts["dropsKept"]["forwardOnlyOk"].as_bool()), (Some(true), Some(true)), "{plan:#}");
    let roll = action(&plan, "m.totals");
    assert_eq!((roll["change"].as_str(), roll["build"].as_bool()), (Some("indirect"), Some(true)), "{plan:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("built from its query alone") && text.contains("`--forward-only m.by_region` keeps the table"), "{text}");

    // Forward-only keeps the table: `b` stays, the new column NULL until a refresh writes it;
    // the rollup keeps its table.
    let applied = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "m.by_region"]).expect_code(0).json();
    assert_eq!(action(&applied, "m.by_region")["change"], "forward-only", "{applied:#}");
    assert_eq!(action(&applied, "m.totals")["build"], false, "{applied:#}");
    assert_eq!(p.physical_tables(), tables, "no new table");
    assert_eq!(p.rows(&view), rows(&[&["a", "x", "10", "NULL"], &["b", "y", "3", "NULL"]]));
    assert_eq!(totals(), rows(&[&["2", "13"]]));
    // The next run replaces the partitions the new query returns and keeps `b`.
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&view), rows(&[&["a", "x", "10", "X"], &["b", "y", "3", "NULL"]]));
    assert_eq!(totals(), rows(&[&["2", "13"]]));

    // A retyped column cannot keep the table: the plan does not offer it.
    let retyped = loud
        .replace(r#"{ "amount", "bigint" }, { "loud", "varchar" }"#, r#"{ "amount", "varchar" }, { "loud", "varchar" }"#)
        .replace("SELECT region, item, amount, upper(item)", "SELECT region, item, CAST(amount AS VARCHAR) AS amount, upper(item)");
    assert_ne!(retyped, loud);
    p.write("models/m.lua", &retyped);
    let plan = p.plan("dev");
    let parts = action(&plan, "m.by_region");
    assert_eq!((parts["change"].as_str(), parts["dropsKept"]["forwardOnlyOk"].as_bool()), (Some("breaking"), Some(false)), "{plan:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("built from its query alone") && !text.contains("`--forward-only m.by_region`"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Languages, fingerprints, load errors

const LUA: &str = r#"define_model { name = "m.x", kind = kind.incremental_by_partition { partitioned_by = { "day", "k" } },
  schema = { { "day", "date" }, { "k", "varchar" }, { "v", "double" } },
  query = "SELECT day, k, v FROM " .. ref("raw.src") }"#;
const RHAI: &str = r#"define_model(#{ name: "m.x", kind: kind::incremental_by_partition(#{ partitioned_by: ["day", "k"] }),
  schema: [["day", "date"], ["k", "varchar"], ["v", "double"]],
  query: `SELECT day, k, v FROM ${ref("raw.src")}` });"#;
const SQL: &str = "-- name: m.x\n-- kind: incremental_by_partition(partitioned_by = [day, k])\n-- schema: day date, k varchar, v double\n-- refs: raw.src\nselect day, k, v from @ref(raw.src)\n";
const PARENT: &str = r#"define_model { name = "raw.src", kind = kind.external { table = "main.src" },
  schema = { { "day", "date" }, { "k", "varchar" }, { "v", "double" } } }"#;

#[test]
fn the_same_partition_model_has_one_fingerprint_in_lua_rhai_and_sql_and_its_columns_are_hashed() {
    let lua = fingerprint_of(PARENT, "x.lua", LUA);
    assert_eq!(lua, fingerprint_of(PARENT, "x.rhai", RHAI), "Lua vs Rhai");
    assert_eq!(lua, fingerprint_of(PARENT, "x.sql", SQL), "Lua vs SQL");
    assert_ne!(lua, fingerprint_of(PARENT, "x.lua", &LUA.replace(r#"{ "day", "k" }"#, r#"{ "day" }"#)), "the partition columns are hashed");
    let unique = fingerprint_of(PARENT, "x.lua", &LUA.replace("kind.incremental_by_partition { partitioned_by", "kind.incremental_by_unique_key { key"));
    assert_ne!(lua, unique, "the kind is hashed");
}

#[test]
fn load_errors_name_the_partition_column_the_model_and_the_line() {
    let p = Project::new();
    p.write("efmesh.toml", "# defaults\n");
    p.write("models/parent.lua", PARENT);
    let check = |p: &Project| {
        let r = p.run(&["check"]);
        r.expect_code(1);
        format!("{}{}", r.stdout, r.stderr)
    };
    // An undeclared partition column, in Lua and SQL, with a did-you-mean.
    p.write("models/x.lua", &LUA.replace(r#"{ "day", "k" }"#, r#"{ "dya" }"#));
    let out = check(&p);
    assert!(
        out.contains("models/x.lua:1: model `m.x`: partition column (`partitioned_by`) `dya` of kind `incremental_by_partition` is not declared in the schema"),
        "{out}"
    );
    assert!(out.contains("did you mean `day`?"), "{out}");
    p.remove("models/x.lua");
    p.write("models/x.sql", &SQL.replace("partitioned_by = [day, k]", "partitioned_by = [day, nope]"));
    assert!(check(&p).contains("models/x.sql:1: model `m.x`: partition column (`partitioned_by`) `nope`"));
    // A missing or empty `partitioned_by`, an unknown option, a lake target.
    for (text, wanted) in [
        (SQL.replace("(partitioned_by = [day, k])", ""), "kind `incremental_by_partition` needs `partitioned_by`"),
        (SQL.replace("partitioned_by = [day, k]", "partitioned_by = []"), "`partitioned_by` of kind `incremental_by_partition` is empty"),
        (SQL.replace("partitioned_by = [day, k]", "partition_by = day"), "unknown option `partition_by` for kind `incremental_by_partition`"),
        (SQL.replace("-- schema:", "-- target: parquet\n-- schema:"), "target `parquet` does not support kind `incremental_by_partition`"),
    ] {
        p.write("models/x.sql", &text);
        let out = check(&p);
        assert!(out.contains("models/x.sql:") && out.contains(wanted), "{wanted}: {out}");
    }
}
