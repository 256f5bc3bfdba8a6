//! `efmesh lineage` (issue #15): column lineage from the project alone, through a CTE, a join,
//! `*` and an embedded model, down to an external and a seed; and the other direction. And the
//! plan's column impact: children that read none of a breaking change's columns keep their data.

use crate::common::{EngineBackend, Project, set, string_set};
use crate::on_every_engine;
use serde_json::Value;
use std::collections::BTreeSet;

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

/// Two parents sharing `id` and `x`; children reading them through a qualified `EXCLUDE` (on
/// an `ON` and a `USING` join) and through table functions; `x_expr` is `s.a`'s `x`.
fn shared_models(x_expr: &str) -> String {
    format!(
        r#"local a = define_model {{ name = "s.a", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "x", "integer" }}, {{ "y", "integer" }} }},
  query = "SELECT 1 AS id, {x_expr} AS x, 100 AS y" }}
local b = define_model {{ name = "s.b", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "x", "integer" }} }}, query = "SELECT 1 AS id, 11 AS x" }}
define_model {{ name = "t.f", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "y", "integer" }}, {{ "x", "integer" }} }},
  query = "SELECT * EXCLUDE (a.x, b.id) FROM " .. ref(a) .. " AS a JOIN " .. ref(b) .. " AS b ON a.id = b.id" }}
define_model {{ name = "t.g", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "y", "integer" }}, {{ "x", "integer" }} }},
  query = "SELECT * EXCLUDE (a.x) FROM " .. ref(a) .. " AS a JOIN " .. ref(b) .. " AS b USING (id)" }}
define_model {{ name = "t.u", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "u", "integer" }} }},
  query = "SELECT id, u FROM " .. ref(a) .. " AS a, unnest([a.x, a.y]) AS t(u)" }}
define_model {{ name = "t.gs", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "g", "bigint" }} }},
  query = "SELECT id, g FROM " .. ref(a) .. " AS a, generate_series(1, a.x) AS t(g)" }}
"#
    )
}

/// `EXCLUDE (a.x)` over two parents that both have `x` serves the other's: lineage names that
/// one (certain), and its reader downstream, as what the engine serves says.
#[test]
fn a_qualified_exclude_keeps_the_other_parents_column_and_lineage_says_which() {
    let p = Project::new();
    p.write("models/m.lua", &shared_models("10"));
    p.run(&["check"]).expect_code(0);
    p.apply("dev");
    for m in ["t.f", "t.g"] {
        assert_eq!(p.rows(&format!("dev__{m}")), vec![vec![Some("1".into()), Some("100".into()), Some("11".into())]], "{m} serves `s.b.x`");
        let v = p.run(&["lineage", &format!("{m}.x"), "--json"]).expect_code(0).json();
        let mut lines = Vec::new();
        flatten(&v["lineage"][0], &mut lines, 0);
        assert_eq!(lines, [format!("{m}.x (full)"), "  s.b.x (full)".to_string()], "{v:#}");
        assert_eq!(v["lineage"][0]["certain"], true, "{v:#}");
    }
    let v = p.run(&["lineage", "s.b.x", "--downstream", "--json"]).expect_code(0).json();
    let mut lines = Vec::new();
    flatten(&v["lineage"][0], &mut lines, 0);
    assert_eq!(lines, ["s.b.x (full)", "  t.f.x (full)", "  t.g.x (full)"], "{v:#}");
    assert_eq!(v["alsoReadBy"][0]["models"], serde_json::json!([]), "they take values from it, not only filter by it: {v:#}");
    // `s.a.x` is excluded: neither reads it.
    let text = p.run(&["lineage", "s.a.x", "--downstream"]).expect_code(0).stdout.clone();
    assert!(!text.contains("t.f") && !text.contains("t.g."), "{text}");
}

/// A table function's output column (`unnest(…) AS t(u)`, `generate_series(…) AS t(g)`) is
/// uncertain and may take values from the column the function reads: its model is one that
/// may read the column, never "only a filter"; and the plan rebuilds it when that column changes.
#[test]
fn a_model_with_a_table_functions_column_may_read_what_the_function_reads() {
    let p = Project::new();
    p.write("models/m.lua", &shared_models("10"));
    for column in ["x", "y"] {
        let v = p.run(&["lineage", &format!("s.a.{column}"), "--downstream", "--json"]).expect_code(0).json();
        assert_eq!(v["alsoReadBy"][0]["models"], serde_json::json!([]), "{column}: {v:#}");
        assert_eq!(v["possiblyReadBy"][0]["models"], serde_json::json!(["t.gs", "t.u"]), "{column}: {v:#}");
    }
    let text = p.run(&["lineage", "s.a.y", "--downstream"]).expect_code(0).stdout.clone();
    assert!(text.contains("may be read by (their lineage cannot tell): t.gs, t.u") && !text.contains("also read by"), "{text}");

    p.apply("dev");
    p.write("models/m.lua", &shared_models("12"));
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    let read_by = action("s.a")["explain"]["columnImpact"]["readBy"].clone();
    for m in ["t.gs", "t.u"] {
        assert!(read_by.as_array().is_some_and(|r| r.iter().any(|x| x == m)), "{m}: {plan:#}");
        assert_eq!(action(m)["build"], true, "{:#}", action(m));
    }
}

/// A query returning a column twice (`*` over a `USING` join whose sides share `x`, or
/// `a.x, b.x`): `check` names the model, its file:line and the column, as `apply`'s contract
/// would; lineage claims no single certain source for it.
#[test]
fn a_column_returned_twice_fails_check_and_has_no_certain_source() {
    let p = Project::new();
    p.write("models/m.lua", &shared_models("10"));
    p.write(
        "models/dup.lua",
        r#"define_model { name = "t.j", kind = kind.full(), schema = { { "id", "integer" }, { "x", "integer" }, { "y", "integer" } },
  query = "SELECT * FROM " .. ref("s.a") .. " AS a JOIN " .. ref("s.b") .. " AS b USING (id)" }
define_model { name = "t.j2", kind = kind.full(), schema = { { "id", "integer" }, { "x", "integer" } },
  query = "SELECT a.id, a.x, b.x FROM " .. ref("s.a") .. " AS a JOIN " .. ref("s.b") .. " AS b USING (id)" }
"#,
    );
    let run = p.run(&["check", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let found: Vec<(String, u64, String, String)> = v["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("model"), e["line"].as_u64().unwrap_or(0), s("column"), s("message"))
        })
        .collect();
    let twice = "the query returns column `x` more than once (name each output column once)".to_string();
    assert_eq!(found, [("t.j".to_string(), 1, "x".to_string(), twice.clone()), ("t.j2".to_string(), 3, "x".to_string(), twice)], "{v:#}");
    let text = p.run(&["check"]).stdout.clone();
    assert!(text.contains("models/dup.lua:3: model `t.j2`: the query returns column `x` more than once"), "{text}");

    for m in ["t.j", "t.j2"] {
        let v = p.run(&["lineage", &format!("{m}.x"), "--json"]).expect_code(0).json();
        let mut lines = Vec::new();
        flatten(&v["lineage"][0], &mut lines, 0);
        assert_eq!(lines, [format!("{m}.x (full)"), "  s.a.x (full)".to_string(), "  s.b.x (full)".to_string()], "{v:#}");
        assert_eq!(v["lineage"][0]["certain"], false, "{v:#}");
    }
}

on_every_engine!(plan_column_impact_keeps_children_that_read_none_of_the_changed_columns_and_matches_a_fresh_build);

/// A parent of three columns and children reading it in different ways; `b_expr` is `b`'s.
fn impact_models(b_expr: &str) -> String {
    format!(
        r#"local p = define_model {{ name = "s.p", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "a", "bigint" }}, {{ "b", "bigint" }} }},
  query = "SELECT CAST(i AS BIGINT) AS id, CAST(i * 2 AS BIGINT) AS a, CAST({b_expr} AS BIGINT) AS b FROM generate_series(0, 4) AS t(i)" }}
local reads_a = define_model {{ name = "s.reads_a", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "a", "bigint" }} }},
  query = "SELECT id, a FROM " .. ref(p) }}
define_model {{ name = "s.sums_a", kind = kind.view(), schema = {{ {{ "total", "bigint" }} }},
  query = "SELECT CAST(sum(a) AS BIGINT) AS total FROM " .. ref(reads_a) }}
define_model {{ name = "s.reads_b", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "b", "bigint" }} }},
  query = "SELECT id, b FROM " .. ref(p) }}
define_model {{ name = "s.filters_b", kind = kind.full(), schema = {{ {{ "id", "bigint" }} }},
  query = "SELECT id FROM " .. ref(p) .. " WHERE b > 3" }}
define_model {{ name = "s.star", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "a", "bigint" }}, {{ "b", "bigint" }} }},
  query = "SELECT * FROM " .. ref(p) }}
"#
    )
}

const IMPACT_MODELS: [&str; 6] = ["s.p", "s.reads_a", "s.sums_a", "s.reads_b", "s.filters_b", "s.star"];

fn plan_column_impact_keeps_children_that_read_none_of_the_changed_columns_and_matches_a_fresh_build(engine: EngineBackend) {
    let p = Project::on_engine(engine.clone());
    p.write("models/m.lua", &impact_models("i * 3"));
    p.apply("dev");
    // A breaking edit confined to `b`.
    p.write("models/m.lua", &impact_models("i * 4"));
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    let parent = action("s.p");
    assert_eq!(parent["change"], "breaking", "{parent:#}");
    assert_eq!(
        parent["explain"]["columnImpact"],
        serde_json::json!({"changed": ["b"], "readBy": ["s.filters_b", "s.reads_b", "s.star"], "notReadBy": ["s.reads_a"]}),
        "{parent:#}"
    );
    let kept = action("s.reads_a");
    assert_eq!((kept["change"].as_str(), kept["build"].as_bool()), (Some("indirect"), Some(false)), "{kept:#}");
    assert!(kept["explain"]["reason"].as_str().unwrap().contains("column impact: `s.p` changed only `b`, which this model does not read"), "{kept:#}");
    let text = p.run(&["plan", "dev", "--explain"]).expect_code(0).stdout.clone();
    assert!(text.contains("columns changed: `b`\n") && text.contains("read by: `s.filters_b`, `s.reads_b`, `s.star`; not read by: `s.reads_a`"), "{text}");

    // Apply builds the parent and the children reading `b` (a filter and `*` count), nothing else.
    let applied = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(
        string_set(&applied["built"]),
        ["s.p", "s.reads_b", "s.filters_b", "s.star"].iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(),
        "{applied:#}"
    );

    // Every model serves what a fresh build of the edited project serves.
    let fresh = Project::on_engine(engine.another());
    fresh.write("models/m.lua", &impact_models("i * 4"));
    fresh.apply("dev");
    for m in IMPACT_MODELS {
        let view = format!("dev__{m}");
        assert_eq!(p.rows(&view), fresh.rows(&view), "{m} differs from a fresh build");
    }
    assert_eq!(p.rows("dev__s.filters_b").len(), 4, "the filter sees the new `b`");

    // A model no query reads: its impact says so, not "read by: none; not read by: none".
    p.write("models/m.lua", &impact_models("i * 4").replace("SELECT id, b FROM", "SELECT id, b + 1 AS b FROM"));
    let text = p.run(&["plan", "dev", "--explain"]).expect_code(0).stdout.clone();
    assert!(text.contains("columns changed: `b`\n      read by: no model's query\n") && !text.contains("not read by: none"), "{text}");
}

/// `s.p` deletes its own `open` rows in a (metadata) post-statement; `label` is its label's
/// expression; `s.c` reads only `cents`.
fn statement_models(label: &str) -> String {
    format!(
        r#"local p = define_model {{ name = "s.p", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "label", "varchar" }}, {{ "cents", "bigint" }} }},
  post_statements = "DELETE FROM @this WHERE label = 'open'",
  query = "SELECT CAST(i AS BIGINT) AS id, {label} AS label, CAST(i * 100 AS BIGINT) AS cents FROM (SELECT i, CASE WHEN i % 2 = 0 THEN 'open' ELSE 'paid' END AS status FROM generate_series(0, 4) AS t(i))" }}
define_model {{ name = "s.c", kind = kind.full(), schema = {{ {{ "total", "bigint" }} }},
  query = "SELECT CAST(sum(cents) AS BIGINT) AS total FROM " .. ref(p) }}
"#
    )
}

/// A parent with pre/post statements gets no column impact: a statement on its own table may
/// delete or rewrite rows by the changed column, so a child reading only other columns rebuilds
/// and serves the new rows.
#[test]
fn plan_column_impact_never_keeps_a_child_of_a_model_with_statements() {
    let p = Project::new();
    p.write("models/m.lua", &statement_models("lower(status)"));
    p.apply("dev");
    assert_eq!(p.rows("dev__s.c"), vec![vec![Some("400".into())]], "the `open` rows (0, 2, 4) are deleted");
    // Only `label` changes, but the post-statement now deletes nothing.
    p.write("models/m.lua", &statement_models("upper(status)"));
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    assert_eq!(action("s.p")["change"], "breaking", "{:#}", action("s.p"));
    assert!(action("s.p")["explain"]["columnImpact"].is_null(), "{:#}", action("s.p"));
    assert_eq!(action("s.c")["build"], true, "{:#}", action("s.c"));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    assert_eq!(p.rows("dev__s.c"), vec![vec![Some("1000".into())]], "the child sums every row the parent now keeps");
}

on_every_engine!(plan_column_impact_never_keeps_a_child_whose_parent_has_a_changed_parent_or_a_changed_join_key);

/// `s.p`'s own edit touches only `y`, but its parent `s.pp` changes `v`, which reaches `x`;
/// `s.q`'s edit touches only `k`, which a child joins on with `USING`.
fn chained_models(v_expr: &str, y: i64, k_expr: &str) -> String {
    format!(
        r#"local pp = define_model {{ name = "s.pp", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "v", "bigint" }} }},
  query = "SELECT CAST(i AS BIGINT) AS id, CAST({v_expr} AS BIGINT) AS v FROM generate_series(0, 4) AS t(i)" }}
local p = define_model {{ name = "s.p", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "x", "bigint" }}, {{ "y", "bigint" }} }},
  query = "SELECT id, v AS x, CAST({y} AS BIGINT) AS y FROM " .. ref(pp) }}
define_model {{ name = "s.c", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "x", "bigint" }} }},
  query = "SELECT id, x FROM " .. ref(p) }}
local base = define_model {{ name = "s.base", kind = kind.full(), schema = {{ {{ "k", "bigint" }}, {{ "id", "bigint" }} }},
  query = "SELECT CAST(i AS BIGINT) AS k, CAST(i AS BIGINT) AS id FROM generate_series(0, 4) AS t(i)" }}
local q = define_model {{ name = "s.q", kind = kind.full(), schema = {{ {{ "k", "bigint" }}, {{ "label", "bigint" }} }},
  query = "SELECT CAST({k_expr} AS BIGINT) AS k, CAST(i * 100 AS BIGINT) AS label FROM generate_series(0, 4) AS t(i)" }}
define_model {{ name = "s.j", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "label", "bigint" }} }},
  query = "SELECT b.id, q.label FROM " .. ref(base) .. " AS b JOIN " .. ref(q) .. " AS q USING (k)" }}
"#
    )
}

fn plan_column_impact_never_keeps_a_child_whose_parent_has_a_changed_parent_or_a_changed_join_key(engine: EngineBackend) {
    let p = Project::on_engine(engine.clone());
    p.write("models/m.lua", &chained_models("i", 1, "i"));
    p.apply("dev");
    p.write("models/m.lua", &chained_models("i * 10", 2, "i + 1"));
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    // `s.p`'s column impact would say "only `y`", but `x` changes through `s.pp`: none is claimed.
    assert!(action("s.p")["explain"]["columnImpact"].is_null(), "{:#}", action("s.p"));
    assert_eq!(action("s.c")["build"], true, "{:#}", action("s.c"));
    // `s.q` changed only `k`; `s.j` outputs none of it but joins on it.
    assert_eq!(action("s.q")["explain"]["columnImpact"]["readBy"], serde_json::json!(["s.j"]), "{:#}", action("s.q"));
    assert_eq!(action("s.j")["build"], true, "{:#}", action("s.j"));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);

    let fresh = Project::on_engine(engine.another());
    fresh.write("models/m.lua", &chained_models("i * 10", 2, "i + 1"));
    fresh.apply("dev");
    for m in ["s.pp", "s.p", "s.c", "s.base", "s.q", "s.j"] {
        let view = format!("dev__{m}");
        assert_eq!(p.rows(&view), fresh.rows(&view), "{m} differs from a fresh build");
    }
    assert_eq!(p.rows("dev__s.j").len(), 4, "the join sees the new keys");
}

#[test]
fn a_diamond_chain_shows_each_columns_lineage_once_and_unreadable_readers_are_named() {
    // Each view reads both columns of the one before for both of its own: without sharing the
    // tree of the last would double at every level (2^12 paths here).
    let p = project();
    let mut text = String::from(
        "local prev = define_model { name = \"d.m0\", kind = kind.view(), schema = { { \"v\", \"bigint\" }, { \"w\", \"bigint\" } }, query = \"SELECT 1 AS v, 2 AS w\" }\n",
    );
    for i in 1..=12 {
        text.push_str(&format!(
            "prev = define_model {{ name = \"d.m{i}\", kind = kind.view(), schema = {{ {{ \"v\", \"bigint\" }}, {{ \"w\", \"bigint\" }} }}, query = \"SELECT v + w AS v, v - w AS w FROM \" .. ref(prev) }}\n"
        ));
    }
    p.write("models/diamond.lua", &text);
    let out = p.run(&["lineage", "d.m12.v"]).expect_code(0).stdout.clone();
    assert!(out.lines().count() < 60 && out.contains("(its lineage is shown above)"), "{out}");
    let v = p.run(&["lineage", "d.m12.v", "--json"]).expect_code(0).json();
    assert!(v.to_string().contains("\"shownAbove\":true"), "{v:#}");
    let down = p.run(&["lineage", "d.m0.v", "--downstream"]).expect_code(0).stdout.clone();
    assert!(down.lines().count() < 60 && down.contains("d.m12.v"), "{down}");

    // A reader whose query lineage cannot read (sqlparser knows no `USING SAMPLE`) may read any
    // column of its parent: named as such, not left out.
    p.write(
        "models/sampled.lua",
        r#"define_model { name = "mart.sampled", kind = kind.full(), schema = { { "id", "bigint" }, { "cents", "bigint" } },
  query = "SELECT id, cents FROM " .. ref("raw.orders") .. " USING SAMPLE 10%" }
"#,
    );
    let v = p.run(&["lineage", "raw.orders.cents", "--downstream", "--json"]).expect_code(0).json();
    assert_eq!(v["possiblyReadBy"][0]["models"], serde_json::json!(["mart.sampled"]), "{v:#}");
    let text = p.run(&["lineage", "raw.orders.cents", "--downstream"]).expect_code(0).stdout.clone();
    assert!(text.contains("may be read by (their lineage cannot tell): mart.sampled"), "{text}");
}

/// A time-range parent `s.p` whose `label` is `label_expr`, with a metadata-only post-statement
/// deleting its `OPEN` rows when `delete`, and a time-range child summing its `cents` per day.
fn later_statement_models(label_expr: &str, delete: bool) -> String {
    let post = if delete { r#"post_statements = [[DELETE FROM @this WHERE label = 'OPEN' AND day BETWEEN @start_date AND @end_date]],"# } else { "" };
    format!(
        r#"local p = define_model {{ name = "s.p", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "date" }}, {{ "label", "varchar" }}, {{ "cents", "integer" }} }},
  {post}
  query = [[SELECT day, {label_expr} AS label, cents FROM (VALUES (DATE '2026-01-01', 'open', 100), (DATE '2026-01-01', 'paid', 10), (DATE '2026-01-02', 'open', 200), (DATE '2026-01-02', 'paid', 20)) t(day, status, cents) WHERE day BETWEEN @start_date AND @end_date]] }}
define_model {{ name = "s.c", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "date" }}, {{ "total", "integer" }} }},
  query = "SELECT day, CAST(sum(cents) AS INTEGER) AS total FROM " .. ref(p) .. " WHERE day BETWEEN @start_date AND @end_date GROUP BY day" }}
"#
    )
}

/// A post-statement added to a version as a metadata change (its snapshot records none) ran on
/// its table; removing it together with an edit of `label` alone still gives no column impact:
/// the child is rebuilt and agrees with the parent (it kept the day the statement had emptied).
#[test]
fn column_impact_counts_statements_a_version_was_served_with_after_its_snapshot() {
    let mut p = Project::new();
    p.write("models/m.lua", &later_statement_models("upper(status)", false));
    p.now = "2026-01-02T01:00:00Z".into();
    p.apply("dev");
    p.write("models/m.lua", &later_statement_models("upper(status)", true));
    p.now = "2026-01-02T02:00:00Z".into();
    p.apply("dev");
    p.now = "2026-01-03T01:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(0);
    p.write("models/m.lua", &later_statement_models("lower(status)", false));
    p.now = "2026-01-03T02:00:00Z".into();
    let plan = p.run(&["plan", "dev", "--json"]).expect_code(0).json();
    let c = plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == "s.c").cloned().unwrap_or_else(|| panic!("{plan:#}"));
    assert_eq!(c["build"], true, "{c:#}");
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    let sums = |rel: &str, col: &str| p.query(&format!("SELECT CAST(day AS VARCHAR), CAST(sum({col}) AS VARCHAR) FROM {rel} GROUP BY day ORDER BY day"));
    assert_eq!(sums("dev__s.p", "cents"), sums("dev__s.c", "total"), "the child agrees with the parent");
}

/// `m.p`'s `s` is `'<prefix>' || id`; `m.len_s` reads it only through DuckDB's dot call
/// `s.len()` (`len(s)`), `m.abs_v` reads `v` the same way.
fn dot_call_models(prefix: &str) -> String {
    format!(
        r#"local p = define_model {{ name = "m.p", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "v", "bigint" }}, {{ "s", "varchar" }} }},
  query = "SELECT CAST(i AS BIGINT) AS id, CAST(i * -10 AS BIGINT) AS v, '{prefix}' || CAST(i AS VARCHAR) AS s FROM generate_series(1, 2) AS t(i)" }}
define_model {{ name = "m.len_s", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "n", "bigint" }} }},
  query = "SELECT id, s.len() AS n FROM " .. ref(p) }}
define_model {{ name = "m.abs_v", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "a", "bigint" }} }},
  query = "SELECT id, v.abs() AS a FROM " .. ref(p) }}
"#
    )
}

/// A dot call reads the column before its dot: lineage lists it, and a change of `m.p` confined
/// to `s` rebuilds `m.len_s` (its lengths change) and keeps `m.abs_v`. DuckDB's syntax: not on
/// Postgres.
#[test]
fn a_dot_call_reads_the_column_before_its_dot_for_lineage_and_column_impact() {
    let p = Project::new();
    p.write("models/m.lua", &dot_call_models("ab"));
    p.apply("dev");
    let v = p.run(&["lineage", "m.len_s.n", "--json"]).expect_code(0).json();
    let mut lines = Vec::new();
    flatten(&v["lineage"][0], &mut lines, 0);
    assert_eq!(lines, ["m.len_s.n (full)", "  m.p.s (full)"], "{v:#}");
    assert_eq!(v["lineage"][0]["certain"], true, "{v:#}");
    let v = p.run(&["lineage", "m.abs_v.a", "--json"]).expect_code(0).json();
    let mut lines = Vec::new();
    flatten(&v["lineage"][0], &mut lines, 0);
    assert_eq!(lines, ["m.abs_v.a (full)", "  m.p.v (full)"], "{v:#}");

    p.write("models/m.lua", &dot_call_models("abcd"));
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    assert_eq!(
        action("m.p")["explain"]["columnImpact"],
        serde_json::json!({"changed": ["s"], "readBy": ["m.len_s"], "notReadBy": ["m.abs_v"]}),
        "{:#}",
        action("m.p")
    );
    assert_eq!(action("m.len_s")["build"], true, "{:#}", action("m.len_s"));
    assert_eq!(action("m.abs_v")["build"], false, "{:#}", action("m.abs_v"));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    let want: Vec<Vec<Option<String>>> = vec![vec![Some("1".into()), Some("5".into())], vec![Some("2".into()), Some("5".into())]];
    assert_eq!(p.rows("dev__m.len_s"), want, "`abcd1` is five characters");
}

/// The files of a SQL project whose children read parent columns in ways sqlparser's tree hides:
/// `s.pivoted` and `s.unpivoted` count the rows of a `PIVOT` (it groups by every column it does
/// not name, `s` here) and an `UNPIVOT` (it drops the NULL values of `v`) of `s.p`; `s.struct_m`'s
/// correlated subquery reads `z.k`, which DuckDB binds to the field of `s.q`'s struct column `z`
/// before the outer relation `z`; `s.today` reads `current_date`, which DuckDB binds to `s.q`'s
/// column of that name; `s.counts` reads `a` in `count_if(a = 1)` and `if(a = 7, b, 0)`
/// (sqlparser's arguments named `a`, DuckDB's comparisons). `s.keys` and `s.ids` read none of
/// what `edited` changes: `v` and `s` of `s.p`, `a`, `z` and `current_date` of `s.q`.
fn hidden_read_models(edited: bool) -> Vec<(String, String)> {
    let (v, s, a, z, d) = if edited { ("coalesce(v, 0)", "'q'", "7", "b", "2001-01-01") } else { ("v", "s", "1", "a", "2000-01-01") };
    let model = |name: &str, schema: &str, refs: &str, query: &str| {
        (format!("models/{}.sql", name.replace('.', "_")), format!("-- name: {name}\n-- kind: full\n-- schema: {schema}\n-- refs: {refs}\n{query}\n"))
    };
    vec![
        ("models/src_t.sql".into(), "-- name: src.t\n-- kind: external(path = data/t.csv)\n-- schema: id integer, k varchar, v integer, s varchar\n".into()),
        model("s.p", "k varchar, v integer, s varchar", "src.t", &format!("SELECT k, {v} AS v, {s} AS s FROM @ref(src.t)")),
        model("s.pivoted", "n bigint", "s.p", "SELECT count(*) AS n FROM @ref(s.p) PIVOT (sum(v) FOR k IN ('a', 'b'))"),
        model("s.unpivoted", "n bigint", "s.p", "SELECT count(*) AS n FROM @ref(s.p) UNPIVOT (val FOR nm IN (v))"),
        model("s.keys", "k varchar", "s.p", "SELECT k FROM @ref(s.p)"),
        model(
            "s.q",
            "id integer, k varchar, a integer, b integer, z struct(k varchar), \"current_date\" date",
            "src.t",
            &format!("SELECT id, k, {a} AS a, id * 5 AS b, {{'k': '{z}'}} AS z, DATE '{d}' AS \"current_date\" FROM @ref(src.t)"),
        ),
        model(
            "s.struct_m",
            "k varchar, m integer",
            "s.q, src.t",
            "SELECT z.k, (SELECT max(q.id) FROM @ref(s.q) AS q WHERE q.k = z.k) AS m FROM @ref(src.t) AS z",
        ),
        model("s.today", "id integer, d date", "s.q", "SELECT id, current_date AS d FROM @ref(s.q)"),
        model(
            "s.counts",
            "id integer, c bigint, t integer",
            "s.q",
            "SELECT id, count_if(a = 1) AS c, CAST(sum(if(a = 7, b, 0)) AS INTEGER) AS t FROM @ref(s.q) GROUP BY id",
        ),
        model("s.ids", "id integer, b integer", "s.q", "SELECT id, b FROM @ref(s.q)"),
    ]
}

const HIDDEN_READ_MODELS: [&str; 10] = ["src.t", "s.p", "s.pivoted", "s.unpivoted", "s.keys", "s.q", "s.struct_m", "s.today", "s.counts", "s.ids"];

/// A SQL project of [`hidden_read_models`] (DuckDB).
fn hidden_read_project(edited: bool) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("data/t.csv", "id,k,v,s\n1,a,10,x\n2,b,,y\n3,a,30,y\n");
    for (file, text) in hidden_read_models(edited) {
        p.write(&file, &text);
    }
    p
}

/// A breaking change confined to some columns keeps only the children that read none of them:
/// a child whose read sqlparser's tree hides — a `PIVOT` or `UNPIVOT` over the parent, a
/// subquery's dotted name DuckDB binds to the parent's struct column before an outer relation,
/// a keyword (`current_date`) DuckDB binds to the parent's column of that name, a comparison
/// sqlparser reads as a named argument (`count_if(a = 1)`) — counts as reading them, is rebuilt,
/// and serves what a fresh build of the edited project serves.
#[test]
fn plan_column_impact_rebuilds_children_whose_reads_sqlparser_hides_and_matches_a_fresh_build() {
    let p = hidden_read_project(false);
    p.apply("dev");
    for (file, text) in hidden_read_models(true) {
        p.write(&file, &text);
    }
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    assert_eq!(
        action("s.p")["explain"]["columnImpact"],
        serde_json::json!({"changed": ["s", "v"], "readBy": ["s.pivoted", "s.unpivoted"], "notReadBy": ["s.keys"]}),
        "{:#}",
        action("s.p")
    );
    assert_eq!(
        action("s.q")["explain"]["columnImpact"],
        serde_json::json!({"changed": ["a", "current_date", "z"], "readBy": ["s.counts", "s.struct_m", "s.today"], "notReadBy": ["s.ids"]}),
        "{:#}",
        action("s.q")
    );
    for m in ["s.pivoted", "s.unpivoted", "s.struct_m", "s.today", "s.counts"] {
        assert_eq!(action(m)["build"], true, "{m}: {:#}", action(m));
    }
    for m in ["s.keys", "s.ids"] {
        assert_eq!(action(m)["build"], false, "{m}: {:#}", action(m));
    }
    p.run(&["apply", "dev", "--yes"]).expect_code(0);

    let fresh = hidden_read_project(true);
    fresh.apply("dev");
    // (`src.t` is external: no environment view.)
    for m in HIDDEN_READ_MODELS.iter().filter(|m| **m != "src.t") {
        let view = format!("dev__{m}");
        assert_eq!(p.rows(&view), fresh.rows(&view), "{m} differs from a fresh build");
    }
    let one = |v: &str| vec![vec![Some(v.to_string())]];
    assert_eq!(p.rows("dev__s.pivoted"), one("1"), "one group: every `s` is `q`");
    assert_eq!(p.rows("dev__s.unpivoted"), one("3"), "no `v` is NULL");
    let column = |view: &str, at: usize| p.rows(view).into_iter().map(|r| r[at].clone().unwrap_or_default()).collect::<BTreeSet<_>>();
    assert_eq!(column("dev__s.struct_m", 1), BTreeSet::from(["2".to_string()]), "`z.k` is `s.q`'s `z`'s `b`");
    assert_eq!(column("dev__s.today", 1), BTreeSet::from(["2001-01-01".to_string()]), "`current_date` is `s.q`'s column");
    assert_eq!(column("dev__s.counts", 1), BTreeSet::from(["0".to_string()]), "no `a` is 1 any more");
}

/// The files of a SQL project whose parents' breaking changes, though confined to one column,
/// reshape their column lists. `m.p (id, k, y)` drops `y` when `edited`: `m.p_json` reads whole
/// rows (`to_json(p)`), `m.p_excl` every column but `id` (`DISTINCT * EXCLUDE (id)`), and
/// `m.p_alias` filters on `y`, the parent's column until it is dropped and then its own select
/// alias (`k AS y`); `m.p_keys` and `m.p_counts` name only `id` and `k`. `m.q (id, k, y)` moves
/// `y` before `k` and upper-cases `k` when `edited`: `m.q_pos` reads its second column through a
/// column-alias list (`AS q(a, b)`: `k`, then `y`), `m.q_ys` names `id` and `y`.
fn reshape_models(edited: bool) -> Vec<(String, String)> {
    let model = |name: &str, schema: &str, refs: &str, query: &str| {
        (format!("models/{}.sql", name.replace('.', "_")), format!("-- name: {name}\n-- kind: full\n-- schema: {schema}\n-- refs: {refs}\n{query}\n"))
    };
    let (p, q) = if edited {
        (
            model("m.p", "id bigint, k varchar", "src.t", "SELECT id, k FROM @ref(src.t)"),
            model("m.q", "id bigint, y varchar, k varchar", "src.t", "SELECT id, s AS y, upper(k) AS k FROM @ref(src.t)"),
        )
    } else {
        (
            model("m.p", "id bigint, k varchar, y varchar", "src.t", "SELECT id, k, s AS y FROM @ref(src.t)"),
            model("m.q", "id bigint, k varchar, y varchar", "src.t", "SELECT id, k, s AS y FROM @ref(src.t)"),
        )
    };
    vec![
        ("models/src_t.sql".into(), "-- name: src.t\n-- kind: external(path = data/t.csv)\n-- schema: id bigint, k varchar, s varchar\n".into()),
        p,
        q,
        model("m.p_json", "id bigint, j varchar", "m.p", "SELECT id, to_json(p)::VARCHAR AS j FROM @ref(m.p) AS p"),
        model("m.p_excl", "n bigint", "m.p", "SELECT count(*) AS n FROM (SELECT DISTINCT * EXCLUDE (id) FROM @ref(m.p))"),
        model("m.p_alias", "id bigint, y varchar", "m.p", "SELECT id, k AS y FROM @ref(m.p) WHERE y = 'x'"),
        model("m.p_keys", "id bigint, k varchar", "m.p", "SELECT id, k FROM @ref(m.p)"),
        model("m.p_counts", "k varchar, n bigint", "m.p", "SELECT k, count(*) AS n FROM @ref(m.p) GROUP BY k"),
        model("m.q_pos", "b varchar", "m.q", "SELECT b FROM @ref(m.q) AS q(a, b)"),
        model("m.q_ys", "id bigint, y varchar", "m.q", "SELECT id, y FROM @ref(m.q)"),
    ]
}

/// A SQL project of [`reshape_models`] (DuckDB).
fn reshape_project(edited: bool) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("data/t.csv", "id,k,s\n1,a,x\n2,a,y\n3,b,x\n");
    for (file, text) in reshape_models(edited) {
        p.write(&file, &text);
    }
    p
}

/// A breaking change confined to one column that drops a column or moves one reshapes the
/// parent's column list, which lineage against the new columns cannot see: a child reading whole
/// rows (`to_json(p)`), every column (`* EXCLUDE`), a name that binds elsewhere once the column
/// is gone (`k AS y … WHERE y = 'x'`) or columns by position (`AS q(a, b)` after a reorder plus a
/// change) reads the change, is rebuilt, and serves what a fresh build of the edited project
/// serves; children naming other columns explicitly still keep their tables.
#[test]
fn plan_column_impact_rebuilds_children_that_may_see_a_dropped_or_moved_column_and_matches_a_fresh_build() {
    let p = reshape_project(false);
    p.apply("dev");
    for (file, text) in reshape_models(true) {
        p.write(&file, &text);
    }
    let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
    let action =
        |name: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {plan:#}"));
    let impact = |name: &str| action(name)["explain"]["columnImpact"].clone();
    let (p_impact, q_impact) = (impact("m.p"), impact("m.q"));
    assert_eq!(
        (&p_impact["changed"], &p_impact["removed"], &p_impact["moved"]),
        (&serde_json::json!(["y"]), &serde_json::json!(["y"]), &Value::Null),
        "{p_impact:#}"
    );
    assert_eq!(string_set(&p_impact["readBy"]), set(&["m.p_alias", "m.p_excl", "m.p_json"]), "{p_impact:#}");
    assert_eq!(string_set(&p_impact["notReadBy"]), set(&["m.p_counts", "m.p_keys"]), "{p_impact:#}");
    assert_eq!((&q_impact["changed"], &q_impact["removed"], &q_impact["moved"]), (&serde_json::json!(["k"]), &Value::Null, &Value::Bool(true)), "{q_impact:#}");
    assert_eq!(string_set(&q_impact["readBy"]), set(&["m.q_pos"]), "{q_impact:#}");
    assert_eq!(string_set(&q_impact["notReadBy"]), set(&["m.q_ys"]), "{q_impact:#}");
    for (m, why) in
        [("m.p_json", "`m.p` removes `y`"), ("m.p_excl", "`m.p` removes `y`"), ("m.p_alias", "`m.p` removes `y`"), ("m.q_pos", "`m.q` moves columns")]
    {
        let a = action(m);
        assert_eq!(a["build"], true, "{m}: {a:#}");
        let reason = a["explain"]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!("(column impact: {why}, and this model's query may see that")) && reason.contains("not confined for it"),
            "{m}: {reason}"
        );
    }
    for (m, parent, column) in [("m.p_keys", "m.p", "y"), ("m.p_counts", "m.p", "y"), ("m.q_ys", "m.q", "k")] {
        let a = action(m);
        assert_eq!(a["build"], false, "{m}: {a:#}");
        let reason = a["explain"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("column impact: `{parent}` changed only `{column}`, which this model does not read")), "{m}: {reason}");
    }
    let text = p.run(&["plan", "dev", "--explain"]).expect_code(0).stdout.clone();
    assert!(text.contains("read by: `m.p_alias`, `m.p_excl`, `m.p_json`; not read by: `m.p_counts`, `m.p_keys`\n"), "{text}");
    assert!(text.contains("read by: `m.q_pos`; not read by: `m.q_ys`\n"), "{text}");
    assert!(text.contains("column list: the change removes `y` (dropped or renamed); a child whose query may see that"), "{text}");
    assert!(text.contains("column list: the change moves columns; a child whose query may see that"), "{text}");
    let applied = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(string_set(&applied["built"]), set(&["m.p", "m.q", "m.p_json", "m.p_excl", "m.p_alias", "m.q_pos"]), "{applied:#}");

    let fresh = reshape_project(true);
    fresh.apply("dev");
    for m in ["m.p", "m.q", "m.p_json", "m.p_excl", "m.p_alias", "m.p_keys", "m.p_counts", "m.q_pos", "m.q_ys"] {
        let view = format!("dev__{m}");
        assert_eq!(p.rows(&view), fresh.rows(&view), "{m} differs from a fresh build");
    }
    let one = |v: &str| vec![vec![Some(v.to_string())]];
    assert_eq!(p.rows("dev__m.p_excl"), one("2"), "two distinct `k` once `y` is gone");
    assert!(p.rows("dev__m.p_alias").is_empty(), "`WHERE y = 'x'` filters on the alias `k AS y` now");
    let bs: Vec<Vec<Option<String>>> = ["x", "x", "y"].iter().map(|b| vec![Some(b.to_string())]).collect();
    assert_eq!(p.rows("dev__m.q_pos"), bs, "`b` is `m.q`'s second column, `y` now");
}
