//! Model properties (issue #16 part 8): `owner`, `tags` and `column_descriptions` from Lua, Rhai
//! and `.sql` headers, carried into `graph --json`, the graph page's data, `plan --json` and
//! `lineage --json`; `tag:` selection; a property change is a metadata change (no rebuild); a
//! description of a column the model does not have is a load error at file:line.

use crate::common::{Project, action};
use serde_json::Value;

fn all_languages(p: &Project) {
    p.write(
        "efmesh.toml",
        &p.config_with("").replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\", \"models/**/*.rhai\", \"models/**/*.sql\"]"),
    );
}

const LUA: &str = r#"define_model {
  name = "s.orders",
  kind = kind.full(),
  owner = "sales-data",
  tags = { "finance", "daily" },
  column_descriptions = { id = "The order id", amount = "In EUR, with VAT" },
  schema = { { "id", "integer" }, { "amount", "double" } },
  query = "SELECT 1 AS id, 9.5 AS amount",
}
"#;

const RHAI: &str = r#"define_model(#{ name: "s.customers", kind: kind::full(), owner: "crm",
  tags: ["finance"], column_descriptions: #{ cid: "The customer id" },
  schema: [["cid", "integer"], ["city", "varchar"]], query: "SELECT 7 AS cid, 'Bern' AS city" });
"#;

const SQL: &str = "-- name: s.revenue\n-- kind: full\n-- schema: id integer, total double\n-- refs: s.orders\n-- owner: finance-team\n-- tags: finance,\n--   monthly\n-- column_descriptions: id = 'Order id, from s.orders',\n--   total = 'Sum of amounts'\nSELECT id, sum(amount) AS total FROM @ref(s.orders) GROUP BY id\n";

fn node<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["nodes"].as_array().expect("nodes").iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("{name} in {v:#}"))
}

fn names(v: &Value) -> Vec<String> {
    v["nodes"].as_array().expect("nodes").iter().map(|n| n["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn properties_from_lua_rhai_and_sql_reach_every_json_output_and_the_graph_page() {
    let p = Project::new();
    all_languages(&p);
    p.write("models/orders.lua", LUA);
    p.write("models/customers.rhai", RHAI);
    p.write("models/revenue.sql", SQL);
    p.write("models/plain.lua", "define_model { name = \"s.plain\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");

    let expected = [
        ("s.orders", "sales-data", vec!["finance", "daily"], serde_json::json!({"id": "The order id", "amount": "In EUR, with VAT"})),
        ("s.customers", "crm", vec!["finance"], serde_json::json!({"cid": "The customer id"})),
        ("s.revenue", "finance-team", vec!["finance", "monthly"], serde_json::json!({"id": "Order id, from s.orders", "total": "Sum of amounts"})),
    ];

    // graph --json
    let g = p.run(&["graph", "--json"]).expect_code(0).json();
    for (name, owner, tags, descriptions) in &expected {
        let n = node(&g, name);
        assert_eq!(n["owner"], *owner, "{name}");
        assert_eq!(n["tags"], serde_json::json!(tags), "{name}");
        assert_eq!(n["columnDescriptions"], *descriptions, "{name}");
    }
    let plain = node(&g, "s.plain");
    assert!(plain.get("owner").is_none() && plain.get("tags").is_none() && plain.get("columnDescriptions").is_none(), "{plain}");

    // plan --json: owner and tags on each model's entry.
    let plan = p.plan("dev");
    for (name, owner, tags, _) in &expected {
        assert_eq!(action(&plan, name)["owner"], *owner, "{name}");
        assert_eq!(action(&plan, name)["tags"], serde_json::json!(tags), "{name}");
    }
    assert!(action(&plan, "s.plain").get("owner").is_none());

    // lineage --json: the model's properties, descriptions of the columns shown.
    let l = p.run(&["lineage", "s.revenue.total", "--json"]).expect_code(0).json();
    assert_eq!(l["owner"], "finance-team");
    assert_eq!(l["tags"], serde_json::json!(["finance", "monthly"]));
    assert_eq!(l["columnDescriptions"], serde_json::json!({"total": "Sum of amounts"}));

    // `tag:` selects the models carrying the tag (and the graph operators apply).
    let g = p.run(&["graph", "--json", "--select", "tag:finance"]).expect_code(0).json();
    let mut selected = names(&g);
    selected.sort();
    assert_eq!(selected, ["s.customers", "s.orders", "s.revenue"]);
    let g = p.run(&["graph", "--json", "--select", "tag:daily+"]).expect_code(0).json();
    let mut selected = names(&g);
    selected.sort();
    assert_eq!(selected, ["s.orders", "s.revenue"]);
    let run = p.run(&["graph", "--select", "tag:finanse"]);
    run.expect_code(1);
    assert!(run.stderr.contains("no model is tagged `finanse`") && run.stderr.contains("did you mean `finance`?"), "{}", run.stderr);

    // The graph page's data: owner, tags and each column's description.
    p.run(&["graph", "--html", "dag.html"]).expect_code(0);
    let page = p.read("dag.html");
    let open = "<script type=\"application/json\" id=\"efmesh-data\">";
    let start = page.find(open).expect("data script") + open.len();
    let end = start + page[start..].find("</script>").expect("end of data");
    let data: Value = serde_json::from_str(&page[start..end]).expect("page data is JSON");
    for (name, owner, tags, descriptions) in &expected {
        let n = node(&data, name);
        assert_eq!(n["owner"], *owner, "{name}");
        assert_eq!(n["tags"], serde_json::json!(tags), "{name}");
        for col in n["columns"].as_array().unwrap() {
            let c = col["name"].as_str().unwrap();
            assert_eq!(col["description"], descriptions.get(c).cloned().unwrap_or(Value::Null), "{name}.{c}");
        }
    }
}

#[test]
fn a_property_change_is_a_metadata_change_and_rebuilds_nothing() {
    let p = Project::new();
    all_languages(&p);
    p.write("models/orders.lua", LUA);
    p.write("models/revenue.sql", SQL);
    p.apply("dev");
    let before = p.plan("dev");
    let fp = |v: &Value, n: &str| action(v, n)["fingerprint"].as_str().unwrap().to_string();

    p.write("models/orders.lua", &LUA.replace("sales-data", "orders-team").replace("\"daily\"", "\"hourly\"").replace("The order id", "Order number"));
    p.write("models/revenue.sql", &SQL.replace("Sum of amounts", "Total of the amounts").replace("-- owner: finance-team\n", ""));
    let plan = p.plan("dev");
    for name in ["s.orders", "s.revenue"] {
        let a = action(&plan, name);
        assert_eq!(a["change"], "metadata", "{name}: {a}");
        assert_eq!(a["build"], false, "{name}");
        assert_eq!(fp(&plan, name), fp(&before, name), "{name}: properties are not fingerprinted");
    }
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!([]), "{applied:#}");
    assert!(!p.plan("dev")["hasChanges"].as_bool().unwrap(), "the new properties are recorded");
    let g = p.run(&["graph", "--json"]).expect_code(0).json();
    assert_eq!(node(&g, "s.orders")["owner"], "orders-team");
    assert!(node(&g, "s.revenue").get("owner").is_none());
}

#[test]
fn a_description_of_a_column_the_model_lacks_is_a_load_error_at_file_line() {
    let p = Project::new();
    all_languages(&p);
    p.write("models/orders.lua", &format!("\n{}", LUA.replace("amount = \"In EUR", "amont = \"In EUR")));
    p.write("models/customers.rhai", &RHAI.replace("cid: \"The", "citty: \"The"));
    p.write("models/revenue.sql", &SQL.replace("--   total = 'Sum", "--   totl = 'Sum"));
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("models/orders.lua:2") && err.contains("s.orders") && err.contains("the model has no column `amont`"), "{err}");
    assert!(err.contains("did you mean `amount`?"), "{err}");
    assert!(err.contains("models/customers.rhai:1") && err.contains("no column `citty`") && err.contains("did you mean `city`?"), "{err}");
    // `.sql`: at the `-- column_descriptions:` header line.
    assert!(err.contains("models/revenue.sql:8") && err.contains("no column `totl`") && err.contains("did you mean `total`?"), "{err}");

    // Malformed values are errors too, naming the field.
    p.write("models/customers.rhai", &RHAI.replace("tags: [\"finance\"]", "tags: \"finance\""));
    p.write("models/orders.lua", LUA);
    p.write("models/revenue.sql", &SQL.replace("--   total = 'Sum of amounts'", "--   total"));
    let err = p.run(&["plan", "dev"]).stderr;
    assert!(err.contains("models/customers.rhai:1") && err.contains("`tags` must be a list"), "{err}");
    assert!(err.contains("models/revenue.sql:8") && err.contains("`total` must be `column = 'description'`"), "{err}");
}
