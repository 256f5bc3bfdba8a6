//! `efmesh lineage` (issue #15): column lineage from the project alone, through a CTE, a join,
//! `*` and an embedded model, down to an external and a seed; and the other direction.

use crate::common::Project;
use serde_json::Value;

const MODELS: &str = r#"local orders = define_model { name = "raw.orders", kind = kind.external { table = "main.orders" },
  schema = { { "id", "bigint" }, { "customer_id", "bigint" }, { "cents", "bigint" }, { "status", "varchar" } } }
local customers = define_model { name = "raw.customers", kind = kind.seed { path = "seeds/customers.csv" },
  schema = { { "id", "bigint" }, { "region", "varchar" } } }
local paid = define_model { name = "core.paid", kind = kind.embedded(),
  schema = { { "id", "bigint" }, { "customer_id", "bigint" }, { "amount", "double" } },
  query = "SELECT id, customer_id, cents / 100.0 AS amount FROM " .. ref(orders) .. " WHERE status = 'paid'" }
define_model { name = "mart.revenue", kind = kind.full(),
  schema = { { "region", "varchar" }, { "revenue", "double" }, { "orders", "bigint" } },
  query = "WITH p AS (SELECT * FROM " .. ref(paid) .. ")\nSELECT c.region, sum(p.amount) AS revenue, count(*) AS orders\nFROM p JOIN " .. ref(customers) .. " AS c ON c.id = p.customer_id\nGROUP BY c.region" }
"#;

fn project() -> Project {
    let p = Project::new();
    p.write("models/m.lua", MODELS);
    p.write("seeds/customers.csv", "id,region\n1,north\n");
    p
}

/// `model.column` of a node and of each node below it, as `model.column` strings, depth first.
fn flatten(node: &Value, out: &mut Vec<String>, depth: usize) {
    out.push(format!("{}{}.{} ({})", "  ".repeat(depth), node["model"].as_str().unwrap(), node["column"].as_str().unwrap(), node["kind"].as_str().unwrap()));
    for n in node["sources"].as_array().into_iter().flatten() {
        flatten(n, out, depth + 1);
    }
}

#[test]
fn lineage_follows_a_column_through_a_cte_a_join_star_and_an_embedded_model_to_its_sources() {
    let p = project();
    let v = p.run(&["lineage", "mart.revenue.revenue", "--json"]).expect_code(0).json();
    assert_eq!(v["apiVersion"], 1);
    assert_eq!((v["model"].as_str(), v["column"].as_str(), v["direction"].as_str()), (Some("mart.revenue"), Some("revenue"), Some("upstream")));
    let mut lines = Vec::new();
    flatten(&v["lineage"][0], &mut lines, 0);
    // `revenue` = sum(p.amount); `p` is `*` over the embedded `core.paid`, whose `amount` is
    // `cents / 100.0` from the external.
    assert_eq!(lines, ["mart.revenue.revenue (full)", "  core.paid.amount (embedded)", "    raw.orders.cents (external)"], "{v:#}");
    assert_eq!(v["lineage"][0]["certain"], true);

    // The whole model: every column, the joined seed included; `count(*)` reads no column.
    let v = p.run(&["lineage", "mart.revenue", "--json"]).expect_code(0).json();
    let mut lines = Vec::new();
    for tree in v["lineage"].as_array().unwrap() {
        flatten(tree, &mut lines, 0);
    }
    assert_eq!(
        lines,
        [
            "mart.revenue.region (full)",
            "  raw.customers.region (seed)",
            "mart.revenue.revenue (full)",
            "  core.paid.amount (embedded)",
            "    raw.orders.cents (external)",
            "mart.revenue.orders (full)",
        ],
        "{v:#}"
    );

    // The text report, and --depth.
    let text = p.run(&["lineage", "mart.revenue.revenue"]).expect_code(0).stdout.clone();
    assert_eq!(text, "mart.revenue.revenue  (full)\n  ← core.paid.amount  (embedded)\n    ← raw.orders.cents  (external)\n", "{text}");
    let text = p.run(&["lineage", "mart.revenue.revenue", "--depth", "1"]).expect_code(0).stdout.clone();
    assert_eq!(text, "mart.revenue.revenue  (full)\n  ← core.paid.amount  (embedded)\n    ← … (--depth reached)\n", "{text}");
}

#[test]
fn lineage_downstream_lists_the_columns_that_read_a_column_and_the_models_that_filter_on_it() {
    let p = project();
    let v = p.run(&["lineage", "raw.orders.cents", "--downstream", "--json"]).expect_code(0).json();
    let mut lines = Vec::new();
    flatten(&v["lineage"][0], &mut lines, 0);
    assert_eq!(lines, ["raw.orders.cents (external)", "  core.paid.amount (embedded)", "    mart.revenue.revenue (full)"], "{v:#}");
    // `status` feeds no column but filters `core.paid`; `customer_id` joins in `mart.revenue`
    // through the embedded model.
    let v = p.run(&["lineage", "raw.orders.status", "--downstream", "--json"]).expect_code(0).json();
    assert_eq!(v["lineage"][0]["sources"], Value::Array(Vec::new()), "{v:#}");
    assert_eq!(v["alsoReadBy"][0]["models"], serde_json::json!(["core.paid"]), "{v:#}");
    let text = p.run(&["lineage", "core.paid.customer_id", "--downstream"]).expect_code(0).stdout.clone();
    assert!(text.contains("also read by (filters, joins, groupings): mart.revenue"), "{text}");
}

#[test]
fn lineage_marks_uncertain_columns_and_names_bad_input() {
    let p = project();
    p.write(
        "models/loose.lua",
        r#"define_model { name = "mart.loose", kind = kind.full(), schema = { { "x", "bigint" }, { "id", "bigint" } },
  query = "SELECT x, o.id FROM read_csv('elsewhere.csv') AS f, " .. ref("raw.orders") .. " AS o" }
"#,
    );
    let v = p.run(&["lineage", "mart.loose", "--json"]).expect_code(0).json();
    assert_eq!((v["lineage"][0]["column"].as_str(), v["lineage"][0]["certain"].as_bool()), (Some("x"), Some(false)), "{v:#}");
    assert_eq!((v["lineage"][1]["column"].as_str(), v["lineage"][1]["certain"].as_bool()), (Some("id"), Some(true)), "{v:#}");
    let text = p.run(&["lineage", "mart.loose.x"]).expect_code(0).stdout.clone();
    assert!(text.starts_with("mart.loose.x  (full) ?\n") && text.contains("? uncertain:"), "{text}");

    let r = p.run(&["lineage", "mart.revenu.revenue"]);
    r.expect_code(1);
    assert!(r.stderr.contains("unknown model `mart.revenu`") && r.stderr.contains("did you mean `mart.revenue`?"), "{}", r.stderr);
    let r = p.run(&["lineage", "mart.revenue.revnue", "--json"]);
    r.expect_code(1);
    assert_eq!(r.json()["apiVersion"], 1);
    assert!(
        r.stderr.contains("model `mart.revenue` has no column `revnue` (columns: region, revenue, orders)")
            && r.stderr.contains("did you mean `mart.revenue.revenue`?"),
        "{}",
        r.stderr
    );
    let r = p.run(&["lineage", "revenue"]);
    r.expect_code(1);
    assert!(r.stderr.contains("`revenue` is neither a model (`schema.table`) nor a column (`schema.table.column`)"), "{}", r.stderr);
}
