//! `efmesh test`: model unit tests in Lua and Rhai files, driven through the binary on temporary
//! projects. Fixtures replace parents, values are typed by the declared schemas, rows are
//! compared as NULL-aware multisets (or in order), failures print a row diff, bad fixtures are
//! errors naming test, parent, row and column.

use crate::common::{EngineBackend, PG_ENGINE_URL_ENV, Project};
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(
    comparison_is_a_null_aware_multiset,
    embedded_parents_are_fixtured_or_inlined_over_their_own_fixtures,
    time_range_models_run_with_the_tests_bounds,
    values_are_typed_by_the_declared_schema_and_misfits_are_named,
    ordered_tests_compare_positions,
    schema_contract_breaches_fail_the_test,
    duplicate_names_and_the_test_glob_are_checked,
    a_passing_test_exits_0_and_touches_no_database,
    a_failing_test_exits_1_with_an_aligned_row_diff,
    rhai_test_files_mirror_lua,
    tests_are_selected_by_name_or_model,
    rows_are_compared_as_the_query_returns_them_not_cut_to_narrower_declared_types,
    a_negative_zero_equals_zero,
    numbers_a_type_would_round_are_never_rounded_into_agreement,
    decimals_compare_by_value_whatever_scale_the_computation_left,
    values_a_cast_would_change_are_refused_not_rounded_or_cut,
);

const CONFIG: &str = "[project]\nmodels = [\"models/**/*.{lua,rhai,sql}\"]\n";

/// The project's `efmesh.toml`: [`CONFIG`] with `project_extra` appended to `[project]`, and on
/// Postgres the engine's `url_env`.
fn config(p: &Project, project_extra: &str) -> String {
    let engine = if p.on_postgres() { format!("\n[engine]\nurl_env = \"{PG_ENGINE_URL_ENV}\"\n") } else { String::new() };
    format!("{CONFIG}{project_extra}{engine}")
}

/// Orders and customers (externals), a full rollup with a LEFT JOIN, a daily time-range model
/// using `@start`/`@end`, an embedded lookup and a model reading it.
const MODELS: &str = r#"
local M = {}
M.orders = define_model {
  name = "raw.orders", kind = kind.external { table = "main.orders" },
  schema = { { "id", "bigint" }, { "customer", "varchar" }, { "amount", "decimal(10,2)" }, { "ordered_at", "timestamp" } },
}
M.customers = define_model {
  name = "raw.customers", kind = kind.external { table = "main.customers" },
  schema = { { "customer", "varchar" }, { "region", "varchar" }, { "since", "date" } },
}
M.totals = define_model {
  name = "mart.totals", kind = kind.full(),
  schema = { { "customer", "varchar" }, { "region", "varchar" }, { "orders", "bigint" }, { "total", "decimal(18,2)" } },
  query = ([[
SELECT o.customer, c.region, count(*) AS orders, sum(o.amount) AS total
FROM %s AS o LEFT JOIN %s AS c USING (customer)
GROUP BY o.customer, c.region]]):format(ref(M.orders), ref(M.customers)),
}
M.daily = define_model {
  name = "mart.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "timestamp" }, { "orders", "bigint" } },
  query = ([[
SELECT CAST(@start AS timestamp) AS day, count(*) AS orders
FROM %s WHERE ordered_at >= @start AND ordered_at < @end]]):format(ref(M.orders)),
}
M.tenure = define_model {
  name = "mart.tenure", kind = kind.view(),
  schema = { { "customer", "varchar" }, { "since_type", "varchar" }, { "next_day", "date" } },
  query = "SELECT customer, typeof(since) AS since_type, since + 1 AS next_day FROM " .. ref(M.customers),
}
M.regions = define_model {
  name = "core.regions", kind = kind.embedded(),
  schema = { { "customer", "varchar" }, { "region", "varchar" } },
  query = "SELECT customer, upper(region) AS region FROM " .. ref(M.customers),
}
M.by_region = define_model {
  name = "mart.by_region", kind = kind.full(),
  schema = { { "region", "varchar" }, { "orders", "bigint" } },
  query = ([[
SELECT r.region, count(*) AS orders FROM %s AS o JOIN %s AS r USING (customer) GROUP BY r.region]]):format(ref(M.orders), ref(M.regions)),
}
return M
"#;

/// A passing Lua test of `mart.totals`.
const TOTALS_TEST: &str = r#"
local m = require("models.shop")
define_test {
  name = "totals_per_customer",
  model = m.totals,
  inputs = {
    [m.orders.name] = {
      { id = 1, customer = "ann", amount = 10.5, ordered_at = "2026-01-01 10:00:00" },
      { id = 2, customer = "ann", amount = "4.50", ordered_at = "2026-01-02 10:00:00" },
      { id = 3, customer = "bob", amount = 1, ordered_at = "2026-01-02 11:00:00" },
    },
    ["raw.customers"] = {
      { customer = "ann", region = "north", since = "2024-01-01" },
    },
  },
  expect = {
    { customer = "bob", orders = 1, total = 1 },
    { customer = "ann", region = "north", orders = 2, total = 15 },
  },
}
"#;

/// A project of [`MODELS`] on `engine`; on Postgres, `mart.tenure` names its column's type with
/// `pg_typeof` (DuckDB's `typeof` is not Postgres's), upper-cased as DuckDB names it.
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &config(&p, ""));
    let models = if p.on_postgres() { MODELS.replace("typeof(since)", "upper(CAST(pg_typeof(since) AS text))") } else { MODELS.to_string() };
    p.write("models/shop.lua", &models);
    p
}

/// The JSON entry of test `name`.
#[track_caller]
fn entry<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["tests"].as_array().expect("tests").iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no test `{name}` in {v:#}"))
}

#[track_caller]
fn problems(v: &Value, name: &str) -> String {
    entry(v, name)["problems"].as_array().expect("problems").iter().map(|p| p.as_str().unwrap().to_string()).collect::<Vec<_>>().join("\n")
}

fn a_passing_test_exits_0_and_touches_no_database(engine: EngineBackend) {
    let p = project(engine);
    p.write("tests/totals.lua", TOTALS_TEST);
    let run = p.run(&["test"]);
    run.expect_code(0);
    assert!(run.stdout.contains("✓ totals_per_customer  mart.totals"), "{}", run.stdout);
    assert!(run.stdout.contains("test result: ok. 1 passed, 0 failed, 0 errors"), "{}", run.stdout);
    assert!(!p.engine_path().exists() && !p.state_path().exists(), "efmesh test opens neither the database nor the state store");
    if p.on_postgres() {
        // The run had a database of its own: the project's has no schema, table or view.
        let schemas = p.query(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('public', 'information_schema') AND schema_name NOT LIKE 'pg\\_%'",
        );
        assert_eq!((schemas, p.relations()), (vec![], vec![]), "efmesh test wrote to the project's database");
    }
    let v = p.run(&["test", "--json"]).expect_code(0).json();
    assert_eq!(v["ok"], true);
    let t = entry(&v, "totals_per_customer");
    assert_eq!(t["status"], "passed");
    assert_eq!(t["file"], "tests/totals.lua");
    assert_eq!(t["line"], 3);
    assert_eq!((t["expectedRows"].clone(), t["actualRows"].clone()), (Value::from(2), Value::from(2)));
}

fn a_failing_test_exits_1_with_an_aligned_row_diff(engine: EngineBackend) {
    let p = project(engine);
    p.write("tests/totals.lua", &TOTALS_TEST.replace("orders = 2, total = 15", "orders = 2, total = 16"));
    let run = p.run(&["test"]);
    run.expect_code(1);
    let out = &run.stdout;
    assert!(out.contains("✗ totals_per_customer  mart.totals  tests/totals.lua:3"), "{out}");
    assert!(out.contains("expected 2 rows, got 2: 1 missing (-), 1 unexpected (+)"), "{out}");
    let diff: Vec<&str> = out.lines().skip_while(|l| !l.contains("expected 2 rows")).skip(1).take(3).collect();
    assert_eq!(
        diff,
        ["         customer  region  orders  total", "      -  ann       north   2       16.00", "      +  ann       north   2       15.00",],
        "{out}"
    );
    assert!(out.contains("test result: FAILED. 0 passed, 1 failed, 0 errors"), "{out}");
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(v["ok"], false);
    let t = entry(&v, "totals_per_customer");
    assert_eq!(t["status"], "failed");
    assert_eq!(t["columns"], serde_json::json!(["customer", "region", "orders", "total"]));
    assert_eq!(t["missing"], serde_json::json!([["ann", "north", "2", "16.00"]]));
    assert_eq!(t["unexpected"], serde_json::json!([["ann", "north", "2", "15.00"]]));
}

fn comparison_is_a_null_aware_multiset(engine: EngineBackend) {
    let p = project(engine);
    // bob has no customer row: his region is NULL, and only NULL matches it.
    let base = r#"
define_test { name = "NAME", model = "mart.totals",
  inputs = { ["raw.orders"] = { { id = 1, customer = "bob", amount = 1 }, { id = 2, customer = "bob", amount = 1 } }, ["raw.customers"] = {} },
  expect = { EXPECT } }
"#;
    let t = |name: &str, expect: &str| base.replace("NAME", name).replace("EXPECT", expect);
    p.write(
        "tests/nulls.lua",
        &[
            t("null_matches_null", "{ customer = \"bob\", orders = 2, total = 2 }"),
            t("explicit_text_null_is_not_null", "{ customer = \"bob\", region = \"NULL\", orders = 2, total = 2 }"),
            t("a_value_is_not_null", "{ customer = \"bob\", region = \"north\", orders = 2, total = 2 }"),
            t("duplicates_count", "{ customer = \"bob\", orders = 2, total = 2 }, { customer = \"bob\", orders = 2, total = 2 }"),
        ]
        .concat(),
    );
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "null_matches_null")["status"], "passed");
    for name in ["explicit_text_null_is_not_null", "a_value_is_not_null"] {
        let e = entry(&v, name);
        assert_eq!(e["status"], "failed", "{name}");
        assert_eq!(e["unexpected"], serde_json::json!([["bob", null, "2", "2.00"]]), "{name}");
    }
    let dup = entry(&v, "duplicates_count");
    assert_eq!(dup["status"], "failed");
    assert_eq!(dup["missing"], serde_json::json!([["bob", null, "2", "2.00"]]), "one of the two expected rows is missing");
    assert_eq!(dup["unexpected"], serde_json::json!([]));
    let text = p.run(&["test", "null_matches_null", "a_value_is_not_null"]);
    assert!(text.stdout.contains("-  bob       north   2       2.00"), "{}", text.stdout);
    assert!(text.stdout.contains("+  bob       NULL    2       2.00"), "{}", text.stdout);
}

#[test]
fn missing_and_unknown_fixtures_are_errors_naming_them() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "tests/fixtures.lua",
        r#"
define_test { name = "no_customers", model = "mart.totals",
  inputs = { ["raw.orders"] = {} }, expect = {} }
define_test { name = "stray_fixture", model = "mart.totals",
  inputs = { ["raw.orders"] = {}, ["raw.customers"] = {}, ["mart.daily"] = {}, ["raw.nope"] = {} }, expect = {} }
define_test { name = "unknown_model", model = "mart.totls", expect = {} }
"#,
    );
    let run = p.run(&["test"]);
    run.expect_code(1);
    assert!(run.stdout.contains("! no_customers   mart.totals  tests/fixtures.lua:2"), "{}", run.stdout);
    assert!(run.stdout.contains("error: no fixture for parent `raw.customers`, which `mart.totals` reads"), "{}", run.stdout);
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "no_customers")["status"], "error");
    let stray = problems(&v, "stray_fixture");
    assert!(stray.contains("fixture `mart.daily` is not a parent of `mart.totals` (its parents: `raw.customers`, `raw.orders`)"), "{stray}");
    assert!(stray.contains("fixture `raw.nope` is an unknown model, not a parent of `mart.totals`"), "{stray}");
    assert!(problems(&v, "unknown_model").contains("unknown model `mart.totls` (did you mean `mart.totals`?)"));
    assert_eq!((v["passed"].clone(), v["errors"].clone()), (Value::from(0), Value::from(3)));
}

fn embedded_parents_are_fixtured_or_inlined_over_their_own_fixtures(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "tests/embedded.lua",
        r#"
local orders = { { id = 1, customer = "ann" }, { id = 2, customer = "ann" }, { id = 3, customer = "bob" } }
define_test { name = "inlined", model = "mart.by_region",
  inputs = { ["raw.orders"] = orders, ["raw.customers"] = { { customer = "ann", region = "north" }, { customer = "bob", region = "north" } } },
  expect = { { region = "NORTH", orders = 3 } } }
define_test { name = "fixtured", model = "mart.by_region",
  inputs = { ["raw.orders"] = orders, ["core.regions"] = { { customer = "ann", region = "as is" } } },
  expect = { { region = "as is", orders = 2 } } }
define_test { name = "inlined_without_its_parent", model = "mart.by_region",
  inputs = { ["raw.orders"] = orders }, expect = {} }
"#,
    );
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "inlined")["status"], "passed", "{v:#}");
    assert_eq!(entry(&v, "fixtured")["status"], "passed", "{v:#}");
    let msg = problems(&v, "inlined_without_its_parent");
    assert!(msg.contains("no fixture for `raw.customers`, which the embedded parent `core.regions` reads"), "{msg}");
}

fn time_range_models_run_with_the_tests_bounds(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "tests/daily.lua",
        r#"
local orders = {
  { id = 1, ordered_at = "2026-01-01 23:59:59" },
  { id = 2, ordered_at = "2026-01-02 00:00:00" },
  { id = 3, ordered_at = "2026-01-02 23:59:59.999" },
  { id = 4, ordered_at = "2026-01-03 00:00:00" },
}
define_test { name = "one_day", model = "mart.daily", vars = { start = "2026-01-02", ["end"] = "2026-01-03" },
  inputs = { ["raw.orders"] = orders }, expect = { { day = "2026-01-02", orders = 2 } } }
define_test { name = "no_bounds", model = "mart.daily", inputs = { ["raw.orders"] = orders }, expect = {} }
define_test { name = "bounds_on_a_full_model", model = "mart.totals", vars = { start = "2026-01-02", ["end"] = "2026-01-03" },
  inputs = { ["raw.orders"] = {}, ["raw.customers"] = {} }, expect = {} }
define_test { name = "inside_a_day", model = "mart.daily", vars = { start = "2026-01-02T05:00:00Z", ["end"] = "2026-01-02T07:00:00Z" },
  inputs = { ["raw.orders"] = orders }, expect = {} }
"#,
    );
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "one_day")["status"], "passed", "{v:#}");
    assert!(problems(&v, "no_bounds").contains("`mart.daily` is computed per interval: give the test's bounds as `vars"), "{v:#}");
    assert!(problems(&v, "bounds_on_a_full_model").contains("`vars.start` / `vars.end` are for models that use `@start`/`@end`; `mart.totals` is `full`"));
    // Bounds inside one interval: a window apply never computes.
    let inside = problems(&v, "inside_a_day");
    assert!(
        inside.contains("`vars.start` 2026-01-02T05:00:00.000Z is not aligned to the day grain of `mart.daily` (apply computes whole intervals); the nearest valid bounds are 2026-01-02T00:00:00.000Z and 2026-01-03T00:00:00.000Z")
            && inside.contains("`vars.end` 2026-01-02T07:00:00.000Z is not aligned"),
        "{v:#}"
    );

    // The rows a time-range model emits outside its interval are dropped, as apply drops them.
    p.write(
        "models/leaky.lua",
        r#"define_model { name = "mart.leaky", kind = kind.incremental_by_time_range { time_column = "at", start = "2026-01-01" },
  schema = { { "at", "timestamp" }, { "id", "bigint" } },
  query = "SELECT ordered_at AS at, id FROM " .. ref("raw.orders") }"#,
    );
    p.write(
        "tests/leaky.lua",
        r#"define_test { name = "leaky", model = "mart.leaky", vars = { start = "2026-01-02", ["end"] = "2026-01-03" },
  inputs = { ["raw.orders"] = { { id = 1, ordered_at = "2026-01-01 12:00:00" }, { id = 2, ordered_at = "2026-01-02 12:00:00" } } },
  expect = { { at = "2026-01-02 12:00:00", id = 2 } } }"#,
    );
    let v = p.run(&["test", "leaky", "--json"]).expect_code(0).json();
    assert_eq!(entry(&v, "leaky")["status"], "passed");
}

fn rhai_test_files_mirror_lua(engine: EngineBackend) {
    let p = project(engine);
    p.write("tests/totals.lua", TOTALS_TEST);
    p.write(
        "tests/totals.rhai",
        r#"
define_test(#{
  name: "totals_in_rhai",
  model: "mart.totals",
  inputs: #{
    "raw.orders": [
      #{ id: 1, customer: "ann", amount: 10.5, ordered_at: "2026-01-01 10:00:00" },
      #{ id: 2, customer: "ann", amount: "4.50", ordered_at: () },
    ],
    "raw.customers": [],
  },
  expect: [ #{ customer: "ann", region: (), orders: 2, total: 15.0 } ],
});
define_test(#{
  name: "rhai_ordered",
  model: "mart.totals",
  ordered: true,
  inputs: #{ "raw.orders": [], "raw.customers": [] },
  expect: [],
});
"#,
    );
    let v = p.run(&["test", "--json"]).expect_code(0).json();
    assert_eq!(entry(&v, "totals_in_rhai")["status"], "passed", "{v:#}");
    assert_eq!(entry(&v, "totals_in_rhai")["file"], "tests/totals.rhai");
    assert_eq!(entry(&v, "rhai_ordered")["status"], "passed");
    assert_eq!(entry(&v, "totals_per_customer")["status"], "passed");
}

fn values_are_typed_by_the_declared_schema_and_misfits_are_named(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "tests/types.lua",
        r#"
define_test { name = "dates_from_strings", model = "mart.tenure",
  inputs = { ["raw.customers"] = { { customer = "ann", since = "2024-01-01" }, { customer = "bob" } } },
  expect = { { customer = "ann", since_type = "DATE", next_day = "2024-01-02" }, { customer = "bob", since_type = "DATE" } } }
define_test { name = "bad_date", model = "mart.tenure",
  inputs = { ["raw.customers"] = { { customer = "ann", since = "2024-01-01" }, { customer = "bob", since = "2024-13-45" } } },
  expect = {} }
define_test { name = "bad_number", model = "mart.totals",
  inputs = { ["raw.orders"] = { { id = 1.5, amount = "abc" } }, ["raw.customers"] = {} },
  expect = { { customer = "x", orders = "many" } } }
define_test { name = "unknown_columns", model = "mart.totals",
  inputs = { ["raw.orders"] = { { id = 1, amout = 1 } }, ["raw.customers"] = {} },
  expect = { { customer = "x", totl = 1 } } }
"#,
    );
    let run = p.run(&["test"]);
    run.expect_code(1);
    assert!(run.stdout.contains("! bad_date            mart.tenure  tests/types.lua:5"), "{}", run.stdout);
    // The engine's own words follow.
    let engine_says = if p.on_postgres() { r#"ERROR: date/time field value out of range: "2024-13-45""# } else { "Conversion Error" };
    assert!(
        run.stdout.contains(&format!("error: input `raw.customers` row 2, column `since` (date): value \"2024-13-45\" does not fit: {engine_says}")),
        "{}",
        run.stdout
    );
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "dates_from_strings")["status"], "passed", "{v:#}");
    let bad = problems(&v, "bad_number");
    assert!(
        bad.contains("input `raw.orders` row 1, column `id` (bigint): value 1.5 does not fit: 1.5 has a fraction and `bigint` is an integer type"),
        "{bad}"
    );
    // The fraction check comes first; once fixed, the engine names the next misfits.
    p.write("tests/types.lua", &p.read("tests/types.lua").replace("id = 1.5", "id = 1"));
    let v = p.run(&["test", "bad_number", "--json"]).expect_code(1).json();
    let bad = problems(&v, "bad_number");
    assert!(bad.contains("input `raw.orders` row 1, column `amount` (decimal(10,2)): value \"abc\" does not fit"), "{bad}");
    assert!(bad.contains("expect row 1, column `orders` (bigint): value \"many\" does not fit"), "{bad}");
    let unknown = problems(&v_all(&p), "unknown_columns");
    assert!(unknown.contains("input `raw.orders` row 1: column `amout` is not declared by `raw.orders` (did you mean `amount`?)"), "{unknown}");
    assert!(unknown.contains("expect row 1: column `totl` is not declared by `mart.totals` (did you mean `total`?)"), "{unknown}");
}

fn v_all(p: &Project) -> Value {
    p.run(&["test", "--json"]).expect_code(1).json()
}

fn ordered_tests_compare_positions(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/sorted.lua",
        r#"define_model { name = "mart.sorted", kind = kind.view(), schema = { { "id", "bigint" } },
  query = "SELECT id FROM " .. ref("raw.orders") .. " ORDER BY id DESC" }"#,
    );
    let orders = r#"{ ["raw.orders"] = { { id = 1 }, { id = 3 }, { id = 2 } } }"#;
    p.write(
        "tests/sorted.lua",
        &format!(
            r#"
define_test {{ name = "desc", model = "mart.sorted", ordered = true, inputs = {orders}, expect = {{ {{ id = 3 }}, {{ id = 2 }}, {{ id = 1 }} }} }}
define_test {{ name = "asc", model = "mart.sorted", ordered = true, inputs = {orders}, expect = {{ {{ id = 1 }}, {{ id = 2 }}, {{ id = 3 }} }} }}
define_test {{ name = "any_order", model = "mart.sorted", inputs = {orders}, expect = {{ {{ id = 1 }}, {{ id = 2 }}, {{ id = 3 }} }} }}
"#
        ),
    );
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "desc")["status"], "passed");
    assert_eq!(entry(&v, "any_order")["status"], "passed");
    let asc = entry(&v, "asc");
    assert_eq!(asc["status"], "failed");
    assert_eq!(asc["order"], serde_json::json!({ "row": 1, "expected": ["1"], "actual": ["3"] }));
    let text = p.run(&["test", "asc"]);
    assert!(text.stdout.contains("expected 3 rows, got 3: same rows in another order, first at row 1"), "{}", text.stdout);
    assert!(text.stdout.contains("expected  1") && text.stdout.contains("returned  3"), "{}", text.stdout);
}

fn tests_are_selected_by_name_or_model(engine: EngineBackend) {
    let p = project(engine);
    p.write("tests/totals.lua", TOTALS_TEST);
    p.write(
        "tests/more.lua",
        r#"
define_test { name = "tenure_empty", model = "mart.tenure", inputs = { ["raw.customers"] = {} }, expect = {} }
define_test { name = "tenure_broken", model = "mart.tenure", inputs = { ["raw.customers"] = {} }, expect = { { customer = "x" } } }
"#,
    );
    let names = |v: &Value| v["tests"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    let v = p.run(&["test", "totals_per_customer", "--json"]).expect_code(0).json();
    assert_eq!(names(&v), ["totals_per_customer"]);
    let v = p.run(&["test", "mart.tenure", "--json"]).expect_code(1).json();
    assert_eq!(names(&v), ["tenure_empty", "tenure_broken"]);
    let v = p.run(&["test", "tenure_empty", "mart.totals", "--json"]).expect_code(0).json();
    assert_eq!(names(&v), ["tenure_empty", "totals_per_customer"], "suite order, whatever the selector order");
    let run = p.run(&["test", "tenure_emtpy"]);
    run.expect_code(1);
    assert!(run.stderr.contains("no test and no tested model named `tenure_emtpy`"), "{}", run.stderr);
    assert!(run.stderr.contains("did you mean `tenure_empty`?"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
}

fn schema_contract_breaches_fail_the_test(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/broken.lua",
        r#"define_model { name = "mart.broken", kind = kind.full(), schema = { { "id", "bigint" }, { "label", "varchar" } },
  query = "SELECT 'x' AS label, id FROM " .. ref("raw.orders") }"#,
    );
    p.write("tests/broken.lua", r#"define_test { name = "broken", model = "mart.broken", inputs = { ["raw.orders"] = {} }, expect = {} }"#);
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "broken")["status"], "failed");
    assert!(problems(&v, "broken").contains("schema contract: columns are returned in another order"), "{v:#}");
}

#[test]
fn test_files_and_model_files_keep_to_their_api() {
    let p = project(EngineBackend::DuckDb);
    p.write("tests/a.lua", r#"define_model { name = "x.y", kind = kind.full(), schema = { { "a", "int" } }, query = "SELECT 1 AS a" }"#);
    let run = p.run(&["test"]);
    run.expect_code(1);
    assert!(run.stderr.contains("tests/a.lua:1") && run.stderr.contains("`define_model` is not available in test files"), "{}", run.stderr);
    p.remove("tests/a.lua");
    p.write("models/t.rhai", r#"define_test(#{ name: "t", model: "mart.totals", expect: [] });"#);
    let run = p.run(&["test"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/t.rhai:1") && run.stderr.contains("`define_test` belongs in test files"), "{}", run.stderr);
    // Plans ignore test files, but model files calling define_test fail every command alike.
    p.run(&["plan", "dev"]).expect_code(1);
    p.remove("models/t.rhai");
    p.write(
        "tests/dup.lua",
        "define_test { name = \"t\", model = \"mart.totals\", expect = {} }\ndefine_test { name = \"t\", model = \"mart.tenure\", expect = {}, expct = {} }\n",
    );
    let run = p.run(&["test"]);
    run.expect_code(1);
    assert!(run.stderr.contains("tests/dup.lua:2: test `t`: unknown field `expct`"), "{}", run.stderr);
    assert!(run.stderr.contains("did you mean `expect`?"), "{}", run.stderr);
}

fn duplicate_names_and_the_test_glob_are_checked(engine: EngineBackend) {
    let p = project(engine);
    p.write("tests/a.lua", "define_test { name = \"t\", model = \"mart.tenure\", inputs = { [\"raw.customers\"] = {} }, expect = {} }\n");
    p.write("tests/b.rhai", "define_test(#{ name: \"t\", model: \"mart.tenure\", inputs: #{ \"raw.customers\": [] }, expect: [] });\n");
    let run = p.run(&["test"]);
    run.expect_code(1);
    assert!(run.stderr.contains("tests/b.rhai:1: test `t` is defined twice (first at tests/a.lua:1)"), "{}", run.stderr);
    // `project.tests` moves the test files; files outside it are not tests.
    p.write("efmesh.toml", &config(&p, "tests = [\"spec/*.lua\"]\n"));
    let run = p.run(&["test"]);
    run.expect_code(0);
    assert!(run.stdout.contains("no tests found (`project.tests`: spec/*.lua)"), "{}", run.stdout);
    p.write("spec/one.lua", &p.read("tests/a.lua"));
    let v = p.run(&["test", "--json"]).expect_code(0).json();
    assert_eq!(entry(&v, "t")["file"], "spec/one.lua");
    assert_eq!(v["passed"], 1);
}

/// A self-referencing model (`@this`) is tested with its previous rows as a fixture of its own
/// name; without one it reads none (as its first build does).
#[test]
fn a_self_referencing_model_takes_its_previous_rows_as_a_fixture() {
    let p = Project::new();
    p.write("efmesh.toml", CONFIG);
    p.write(
        "models/running.lua",
        r#"define_model { name = "s.sales", kind = kind.external { table = "main.sales" }, schema = { { "day", "date" }, { "amount", "bigint" } } }
define_model { name = "s.running",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "date" }, { "total", "bigint" } },
  query = "SELECT s.day, s.amount + coalesce((SELECT p.total FROM @this AS p WHERE p.day = s.day - 1), 0) AS total FROM " .. ref("s.sales") .. " AS s WHERE s.day BETWEEN @start_date AND @end_date" }"#,
    );
    p.write(
        "tests/running.lua",
        r#"define_test { name = "with_yesterday", model = "s.running", vars = { start = "2026-01-02", ["end"] = "2026-01-03" },
  inputs = { ["s.sales"] = { { day = "2026-01-02", amount = 5 } }, ["s.running"] = { { day = "2026-01-01", total = 10 } } },
  expect = { { day = "2026-01-02", total = 15 } } }
define_test { name = "first_day", model = "s.running", vars = { start = "2026-01-02", ["end"] = "2026-01-03" },
  inputs = { ["s.sales"] = { { day = "2026-01-02", amount = 5 } } },
  expect = { { day = "2026-01-02", total = 5 } } }"#,
    );
    let v = p.run(&["test", "--json"]).expect_code(0).json();
    assert_eq!(entry(&v, "with_yesterday")["status"], "passed", "{v:#}");
    assert_eq!(entry(&v, "first_day")["status"], "passed", "{v:#}");
}

fn rows_are_compared_as_the_query_returns_them_not_cut_to_narrower_declared_types(engine: EngineBackend) {
    // The contract compares type families only, so a build stores what the query returns:
    // 'Yes' in a column declared `varchar(1)` (Postgres cuts a cast to `varchar(1)` to 'Y'),
    // 0.25 in one declared `decimal(10,1)` (a cast rounds it to 0.3). A test comparing after
    // such casts passed while the table served other values.
    let p = project(engine);
    p.write(
        "models/flags.lua",
        r#"define_model {
  name = "mart.flags", kind = kind.full(),
  schema = { { "customer", "varchar" }, { "flag", "varchar(1)" }, { "share", "decimal(10,1)" }, { "ratio", "float8" }, { "fine", "decimal(10,2)" },
    { "a_column_named_long_enough_to_reach_postgres_limits", "varchar" } },
  query = "SELECT customer, CASE WHEN region = 'north' THEN 'Yes' ELSE 'No' END AS flag, CAST(1 AS DECIMAL(10,2)) / 4 AS share, CAST(3 AS INTEGER) AS ratio, CAST(0.1235 AS DECIMAL(12,4)) AS fine, region AS a_column_named_long_enough_to_reach_postgres_limits FROM " .. ref("raw.customers"),
}
"#,
    );
    // And the other way: a query type narrower than the declared one (an integer `ratio`
    // declared `float8`) never rounds an expected 3.4 into agreement with the 3 it returns.
    // Nor does a query type that rounds (`decimal(12,4)`): an expected 0.12349 is not 0.1235.
    let test = |flag: &str, share: &str, ratio: &str, fine: &str| {
        format!(
            r#"define_test {{
  name = "flags", model = "mart.flags",
  inputs = {{ ["raw.customers"] = {{ {{ customer = "ann", region = "north", since = "2024-01-01" }} }} }},
  expect = {{ {{ customer = "ann", flag = "{flag}", share = {share}, ratio = {ratio}, fine = {fine}, a_column_named_long_enough_to_reach_postgres_limits = "north" }} }},
}}
"#
        )
    };
    for (flag, share, ratio, fine, why) in [
        ("Y", "0.3", "3", "0.1235", "'Yes' compared as 'Y'"),
        ("Yes", "0.3", "3", "0.1235", "0.25 compared as 0.3"),
        ("Yes", "0.25", "3.4", "0.1235", "3.4 compared as the integer 3"),
        ("Yes", "0.25", "3", "0.12349", "0.12349 compared as 0.1235"),
    ] {
        p.write("tests/flags.lua", &test(flag, share, ratio, fine));
        let v = p.run(&["test", "--json"]).expect_code(1).json();
        assert_eq!(entry(&v, "flags")["status"], "failed", "{why}: {v:#}");
    }
    p.write("tests/flags.lua", &test("Yes", "0.25", "3", "0.1235"));
    let v = p.run(&["test", "--json"]).expect_code(0).json();
    assert_eq!(entry(&v, "flags")["status"], "passed", "{v:#}");
}

/// `-0.0` equals `0.0` (SQL's `=`), in a declared `double` and in a `decimal` over one; a
/// negative number is still not its absolute value.
fn a_negative_zero_equals_zero(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/zero.lua",
        r#"define_model {
  name = "mart.zero", kind = kind.full(),
  schema = { { "x", "double precision" }, { "y", "decimal(10,2)" }, { "z", "double precision" } },
  query = "SELECT -CAST(0 AS DOUBLE PRECISION) AS x, CAST(-CAST(0 AS DOUBLE PRECISION) AS DECIMAL(10,2)) AS y, CAST(-0.5 AS DOUBLE PRECISION) AS z",
}
"#,
    );
    let test = |z: &str| format!("define_test {{ name = \"zero\", model = \"mart.zero\", inputs = {{}}, expect = {{ {{ x = 0.0, y = 0, z = {z} }} }} }}\n");
    p.write("tests/zero.lua", &test("-0.5"));
    let run = p.run(&["test", "zero"]);
    run.expect_code(0);
    p.write("tests/zero.lua", &test("0.5"));
    p.run(&["test", "zero"]).expect_code(1);
}

/// A decimal input with more places than its declared scale is refused (the fixture would round
/// it); an expected one the query's type cannot hold fails the test (no stored value equals it),
/// as does a list element of an input that its element type would round.
fn numbers_a_type_would_round_are_never_rounded_into_agreement(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/fine.lua",
        r#"define_model {
  name = "mart.fine", kind = kind.full(),
  schema = { { "customer", "varchar" }, { "amount", "decimal(10,2)" } },
  query = "SELECT customer, amount FROM " .. ref("raw.orders"),
}
"#,
    );
    let test = |input: &str, expected: &str| {
        format!(
            "define_test {{ name = \"fine\", model = \"mart.fine\",\n  inputs = {{ [\"raw.orders\"] = {{ {{ id = 1, customer = \"ann\", amount = {input}, ordered_at = \"2026-01-01\" }} }} }},\n  expect = {{ {{ customer = \"ann\", amount = {expected} }} }} }}\n"
        )
    };
    p.write("tests/fine.lua", &test("1.56", "1.56"));
    p.run(&["test", "fine"]).expect_code(0);
    p.write("tests/fine.lua", &test("1.56", "1.5551"));
    let v = p.run(&["test", "fine", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "fine")["status"], "failed", "{v:#}");
    p.write("tests/fine.lua", &test("\"1.555\"", "1.56"));
    let v = p.run(&["test", "fine", "--json"]).expect_code(1).json();
    assert_eq!(entry(&v, "fine")["status"], "error", "{v:#}");
    assert!(problems(&v, "fine").contains("1.555 has more than the 2 decimal(s) of `decimal(10,2)`"), "{v:#}");
    p.write("tests/fine.lua", &test("1e-7", "0"));
    p.run(&["test", "fine"]).expect_code(1);
    // A long decimal written as a string, as docs/models.md advises, is exact on both sides (a
    // double would see 14677563290226445.16 and 14677563290226446 as different or as equal).
    p.write(
        "models/big.lua",
        r#"local big = define_model { name = "raw.big", kind = kind.external { table = "main.big" }, schema = { { "v", "decimal(22,2)" } } }
define_model { name = "mart.big", kind = kind.full(), schema = { { "v", "decimal(22,2)" } }, query = "SELECT v FROM " .. ref(big) }
"#,
    );
    let big = |expected: &str| {
        format!(
            "define_test {{ name = \"big\", model = \"mart.big\", inputs = {{ [\"raw.big\"] = {{ {{ v = \"14677563290226445.16\" }} }} }}, expect = {{ {{ v = \"{expected}\" }} }} }}\n"
        )
    };
    p.write("tests/big.lua", &big("14677563290226445.16"));
    p.run(&["test", "big"]).expect_code(0);
    p.write("tests/big.lua", &big("14677563290226445.161"));
    p.run(&["test", "big"]).expect_code(1);
}

/// A fixture or expected value its cast would change without an error is refused, naming the
/// test (file:line), the row, the column and the value: a fraction written as a string into an
/// integer column (DuckDB's cast rounds '1.6' to 2, and the test passed against 2), a time of day
/// into a `date` (an input, and an expected value against the `date` the query returns: both
/// were cut to the day), a timestamp past the microsecond (it passed against `00:00:00`).
fn values_a_cast_would_change_are_refused_not_rounded_or_cut(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/cut.lua",
        r#"local src = define_model { name = "raw.src", kind = kind.external { table = "main.src" },
  schema = { { "id", "integer" }, { "d", "date" }, { "ts", "timestamp" } } }
define_model { name = "mart.cut", kind = kind.full(),
  schema = { { "id", "integer" }, { "d", "date" }, { "ts", "timestamp" } },
  query = "SELECT id, d, ts FROM " .. ref(src) }
"#,
    );
    p.write(
        "tests/cut.lua",
        r#"define_test { name = "int_string", model = "mart.cut",
  inputs = { ["raw.src"] = { { id = "1.6" } } }, expect = { { id = 2 } } }
define_test { name = "date_input", model = "mart.cut",
  inputs = { ["raw.src"] = { { id = 1, d = "2026-01-01 23:59:59" } } }, expect = { { id = 1, d = "2026-01-01" } } }
define_test { name = "date_expect", model = "mart.cut",
  inputs = { ["raw.src"] = { { id = 1, d = "2026-01-01" } } }, expect = { { id = 1, d = "2026-01-01 23:59:59" } } }
define_test { name = "ts_expect", model = "mart.cut",
  inputs = { ["raw.src"] = { { id = 1, ts = "2026-01-01 00:00:00" } } }, expect = { { id = 1, ts = "2026-01-01 00:00:00.0000009" } } }
define_test { name = "kept", model = "mart.cut",
  inputs = { ["raw.src"] = { { id = 2, d = "2026-01-01 00:00:00", ts = "2026-01-01 00:00:00.1234560" } } },
  expect = { { id = 2, d = "2026-01-01", ts = "2026-01-01 00:00:00.123456" } } }
"#,
    );
    let v = p.run(&["test", "--json"]).expect_code(1).json();
    for (name, line) in [("int_string", 1), ("date_input", 3), ("date_expect", 5), ("ts_expect", 7)] {
        let t = entry(&v, name);
        assert_eq!(t["status"], "error", "{name}: {v:#}");
        assert_eq!((t["file"].as_str(), t["line"].as_u64()), (Some("tests/cut.lua"), Some(line)), "{name}: {t:#}");
    }
    let int = problems(&v, "int_string");
    assert!(
        int.contains("input `raw.src` row 1, column `id` (integer): value \"1.6\" does not fit: 1.6 has a fraction and `integer` is an integer type"),
        "{int}"
    );
    let date = problems(&v, "date_input");
    assert!(
        date.contains(r#"input `raw.src` row 1, column `d` (date): value "2026-01-01 23:59:59" does not fit: "2026-01-01 23:59:59" has a time of day"#),
        "{date}"
    );
    let expected = problems(&v, "date_expect");
    assert!(expected.contains("expect row 1, column `d` (") && expected.contains(r#"value "2026-01-01 23:59:59" does not fit"#), "{expected}");
    assert!(expected.contains("has a time of day"), "{expected}");
    let ts = problems(&v, "ts_expect");
    assert!(ts.contains("expect row 1, column `ts` (") && ts.contains("has 7 digits of a second's fraction"), "{ts}");
    // A value the cast keeps (midnight into a date, trailing zeros past the microsecond) is fine.
    assert_eq!(entry(&v, "kept")["status"], "passed", "{v:#}");
}

/// An unconstrained `numeric` (Postgres) keeps the scale its computation left (`0.3000` from a
/// `sum()` of `numeric(20,4)`): the expected `0.3` is the same number, and `0.31` is not.
fn decimals_compare_by_value_whatever_scale_the_computation_left(engine: EngineBackend) {
    let p = project(engine);
    let ty = if p.on_postgres() { "numeric" } else { "decimal(38,4)" };
    p.write(
        "models/sum.lua",
        &format!(
            r#"define_model {{
  name = "mart.total", kind = kind.full(),
  schema = {{ {{ "total", "{ty}" }} }},
  query = "SELECT sum(v) AS total FROM (SELECT CAST(0.1 AS decimal(20,4)) AS v UNION ALL SELECT CAST(0.2 AS decimal(20,4))) AS t",
}}
"#
        ),
    );
    let test = |expected: &str| format!("define_test {{ name = \"total\", model = \"mart.total\", inputs = {{}}, expect = {{ {{ total = {expected} }} }} }}\n");
    p.write("tests/total.lua", &test("0.3"));
    p.run(&["test", "total"]).expect_code(0);
    p.write("tests/total.lua", &test("\"0.30\""));
    p.run(&["test", "total"]).expect_code(0);
    p.write("tests/total.lua", &test("0.31"));
    p.run(&["test", "total"]).expect_code(1);
    // A decimal near its type's maximum, whose double rounds past it: compared as it is.
    p.write(
        "models/sum.lua",
        r#"define_model { name = "mart.total", kind = kind.full(), schema = { { "total", "decimal(38,0)" } }, query = "SELECT CAST('99999999999999999999999999999999999999' AS decimal(38,0)) AS total" }
"#,
    );
    p.write("tests/total.lua", &test("\"99999999999999999999999999999999999999\""));
    p.run(&["test", "total"]).expect_code(0);
    p.write("tests/total.lua", &test("\"99999999999999999999999999999999999998\""));
    p.run(&["test", "total"]).expect_code(1);
}
