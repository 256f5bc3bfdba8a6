//! Golden tests for canonical SQL and fingerprints (`DECISIONS.md`, "Canonical SQL and
//! fingerprints"; `STYLE.md` rule 8): formatting never changes a fingerprint, meaning always
//! does, and a frozen fingerprint pins the payload across runs and releases.
//!
//! Public API only: `efmesh::sql::…` and `efmesh::core::…`; at the end, edits a canonical form
//! once missed, planned end to end through the binary (`crate::common`).

use efmesh::core::fragment::{CanonicalResolver, RefSite};
use efmesh::core::kind::TimeRange;
use efmesh::core::{Column, Fragment, Grain, Kind, Location, Model, ModelName, Node, Schema};
use efmesh::sql::canon::{CanonSource, canonicalize, normalize_duckdb_json, reprint};
use efmesh::sql::fingerprint::{FINGERPRINT_VERSION, Fingerprint, fingerprint, payload, physical_table};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// Helpers

fn canon(sql: &str) -> String {
    let c = canonicalize(sql).unwrap_or_else(|e| panic!("cannot canonicalize:\n{sql}\n{e}"));
    assert_eq!(c.source, CanonSource::SqlParser);
    c.text
}

fn name(s: &str) -> ModelName {
    ModelName::parse(s).unwrap()
}

fn loc() -> Location {
    Location { file: "models/x.lua".into(), line: 1 }
}

fn col(n: &str, ty: &str) -> Column {
    Column { name: n.into(), ty: ty.into() }
}

fn time_range(time_column: &str, grain: Grain) -> Kind {
    Kind::IncrementalByTimeRange(TimeRange {
        time_column: time_column.into(),
        start: 0,
        end: None,
        grain,
        batch_size: 30,
        lookback: 0,
        auto_restatement_intervals: 0,
    })
}

/// A time-range model over `raw.orders`, as a model file would define it. Every field is
/// spelt out (not `..Model::new(…)`): a new field of `Model` must be placed here, in the frozen
/// golden, deciding whether it is fingerprinted.
fn orders_model() -> Model {
    Model {
        name: name("shop.orders"),
        kind: time_range("created_at", Grain::Day),
        schema: Schema(vec![col("id", "BIGINT"), col("amount", "DOUBLE"), col("created_at", "TIMESTAMP")]),
        body: None,
        grain: vec!["id".into()],
        description: Some("Orders, one row per order".into()),
        location: loc(),
        target: Default::default(),
        audits: vec![],
        cron: None,
        statements: Default::default(),
        owner: None,
        tags: Vec::new(),
        column_descriptions: Vec::new(),
        ignored_lints: Vec::new(),
        signals: Vec::new(),
        // Where the query's lines are in its file: for messages, not fingerprinted.
        query_lines: vec![7, 8],
    }
}

const ORDERS_BODY: &str = "SELECT id, amount::DOUBLE AS amount, created_at FROM raw.orders WHERE created_at >= $start AND created_at < $end";

fn parents() -> BTreeMap<ModelName, Fingerprint> {
    BTreeMap::from([(name("raw.orders"), Fingerprint::parse(&"1".repeat(64)).unwrap())])
}

fn fp(model: &Model, body: &str, parents: &BTreeMap<ModelName, Fingerprint>) -> Fingerprint {
    fingerprint(model, Some(&canon(body)), parents)
}

/// Every variant canonicalizes (and so fingerprints) equal to `base`, and so does sqlparser's
/// reprint of each (the round trip: printing the parsed tree changes nothing).
fn assert_all_equal(base: &str, variants: &[&str]) -> usize {
    let want = canon(base);
    assert_eq!(canon(&reprint(base).unwrap()), want, "reprint of base:\n{base}");
    for v in variants {
        assert_eq!(canon(v), want, "variant differs from its base:\n--- base\n{base}\n--- variant\n{v}");
        assert_eq!(canon(&reprint(v).unwrap()), want, "reprint differs:\n{v}");
    }
    variants.len()
}

// ---------------------------------------------------------------------------------------------
// Formatting variants: must canonicalize equal

const BASE_FILTER: &str = ORDERS_BODY;

const BASE_JOIN: &str = r#"
SELECT o.id, c.name AS customer, o.total
FROM shop.orders AS o
JOIN shop.customers AS c ON c.id = o.customer_id
LEFT JOIN shop.refunds AS r ON r.order_id = o.id
WHERE r.order_id IS NULL AND o.total > 0
"#;

const BASE_CTE: &str = r#"
WITH daily AS (
    SELECT s.patient_id, date_trunc('day', s.admitted_at) AS day, count(*) AS n,
           sum(CASE WHEN s.ward = 'ICU' THEN 1 ELSE 0 END) AS icu
    FROM med.stays AS s
    WHERE s.admitted_at >= $start AND s.admitted_at < $end
    GROUP BY s.patient_id, date_trunc('day', s.admitted_at)
    HAVING count(*) > 1
)
SELECT patient_id, day, n, icu::DOUBLE / n AS icu_share
FROM daily
ORDER BY day DESC, patient_id
LIMIT 100
"#;

const BASE_WINDOW: &str = r#"
SELECT patient_id, moved_at, ward,
       row_number() OVER (PARTITION BY patient_id ORDER BY moved_at) AS seq,
       lag(ward) OVER (PARTITION BY patient_id ORDER BY moved_at) AS previous_ward
FROM med.moves
WHERE moved_at >= $start AND moved_at < $end
"#;

const BASE_CASE: &str = r#"
SELECT id,
       CASE WHEN amount < 10 THEN 'small' WHEN amount < 100 THEN 'medium' ELSE 'large' END AS size,
       CAST(created_at AS DATE) AS day,
       coalesce(discount, 0) * (amount + fee) AS adjusted
FROM raw.orders
"#;

const BASE_UNION: &str = r#"
SELECT id, 'web' AS channel FROM raw.web_orders
UNION ALL
SELECT id, 'shop' AS channel FROM raw.shop_orders
"#;

#[test]
fn formatting_variants_canonicalize_equal() {
    let mut n = 0;
    n += assert_all_equal(
        BASE_FILTER,
        &[
            // whitespace and newlines
            "SELECT id,\n       amount::DOUBLE AS amount,\n       created_at\n  FROM raw.orders\n WHERE created_at >= $start\n   AND created_at < $end",
            "\t SELECT  id ,amount::DOUBLE AS amount,created_at FROM raw.orders WHERE created_at>=$start AND created_at<$end \n",
            // comments
            "-- orders in the interval\nSELECT id, /* cast for the sum */ amount::DOUBLE AS amount, created_at\nFROM raw.orders -- source\nWHERE created_at >= $start AND created_at < $end",
            // keyword case
            "select id, amount::double as amount, created_at from raw.orders where created_at >= $start and created_at < $end",
            // identifier quoting
            r#"SELECT "id", "amount"::DOUBLE AS "amount", "created_at" FROM "raw"."orders" WHERE "created_at" >= $start AND "created_at" < $end"#,
            // `::` vs CAST
            "SELECT id, CAST(amount AS DOUBLE) AS amount, created_at FROM raw.orders WHERE created_at >= $start AND created_at < $end",
            // optional AS on a column alias
            "SELECT id, amount::DOUBLE amount, created_at FROM raw.orders WHERE created_at >= $start AND created_at < $end",
            // redundant parentheses
            "SELECT id, (amount)::DOUBLE AS amount, created_at FROM raw.orders WHERE ((created_at >= $start) AND (created_at < $end))",
            // trailing semicolon
            "SELECT id, amount::DOUBLE AS amount, created_at FROM raw.orders WHERE created_at >= $start AND created_at < $end;",
        ],
    );
    n += assert_all_equal(
        BASE_JOIN,
        &[
            // optional AS on table aliases, INNER / OUTER spelled out
            "SELECT o.id, c.name AS customer, o.total FROM shop.orders o INNER JOIN shop.customers c ON c.id = o.customer_id LEFT OUTER JOIN shop.refunds r ON r.order_id = o.id WHERE r.order_id IS NULL AND o.total > 0",
            // quoting, keyword case, parentheses around join conditions
            r#"select "o"."id", "c"."name" as "customer", "o"."total"
               from "shop"."orders" as "o"
               join "shop"."customers" as "c" on ("c"."id" = "o"."customer_id")
               left join "shop"."refunds" as "r" on (("r"."order_id" = "o"."id"))
               where ("r"."order_id" is null) and ("o"."total" > 0);"#,
            // comments everywhere
            "SELECT o.id, c.name AS customer, o.total -- projection\nFROM shop.orders AS o /* the fact */\nJOIN shop.customers AS c ON c.id = o.customer_id\n-- drop refunded\nLEFT JOIN shop.refunds AS r ON r.order_id = o.id\nWHERE r.order_id IS NULL AND o.total > 0",
        ],
    );
    n += assert_all_equal(
        BASE_CTE,
        &[
            // keyword and function-name case, `AS` dropped, CAST for `::`
            r#"with daily as (
                 select s.patient_id, DATE_TRUNC('day', s.admitted_at) day, COUNT(*) n,
                        SUM(case when s.ward = 'ICU' then 1 else 0 end) icu
                 from med.stays s
                 where s.admitted_at >= $start and s.admitted_at < $end
                 group by s.patient_id, DATE_TRUNC('day', s.admitted_at)
                 having COUNT(*) > 1
               )
               select patient_id, day, n, cast(icu as double) / n icu_share
               from daily order by day desc, patient_id limit 100;"#,
            // one line, quoted CTE name and columns, parentheses
            r#"WITH "daily" AS (SELECT "s"."patient_id", date_trunc('day', "s"."admitted_at") AS "day", count(*) AS "n", sum((CASE WHEN ("s"."ward" = 'ICU') THEN 1 ELSE 0 END)) AS "icu" FROM "med"."stays" AS "s" WHERE (("s"."admitted_at" >= $start) AND ("s"."admitted_at" < $end)) GROUP BY "s"."patient_id", date_trunc('day', "s"."admitted_at") HAVING (count(*) > 1)) SELECT "patient_id", "day", "n", ("icu"::DOUBLE) / "n" AS "icu_share" FROM "daily" ORDER BY "day" DESC, "patient_id" LIMIT 100"#,
            // the whole query in parentheses
            "(WITH daily AS (SELECT s.patient_id, date_trunc('day', s.admitted_at) AS day, count(*) AS n, sum(CASE WHEN s.ward = 'ICU' THEN 1 ELSE 0 END) AS icu FROM med.stays AS s WHERE s.admitted_at >= $start AND s.admitted_at < $end GROUP BY s.patient_id, date_trunc('day', s.admitted_at) HAVING count(*) > 1) SELECT patient_id, day, n, icu::DOUBLE / n AS icu_share FROM daily ORDER BY day DESC, patient_id LIMIT 100)",
        ],
    );
    n += assert_all_equal(
        BASE_WINDOW,
        &[
            "select patient_id, moved_at, ward, ROW_NUMBER() over (partition by patient_id order by moved_at) seq, LAG(ward) over (partition by patient_id order by moved_at) previous_ward from med.moves where moved_at >= $start and moved_at < $end",
            "SELECT \"patient_id\", \"moved_at\", \"ward\",\n  row_number() OVER (PARTITION BY \"patient_id\" ORDER BY \"moved_at\") AS \"seq\", -- position\n  lag(\"ward\") OVER (PARTITION BY \"patient_id\" ORDER BY \"moved_at\") AS \"previous_ward\"\nFROM \"med\".\"moves\"\nWHERE (\"moved_at\" >= $start) AND (\"moved_at\" < $end);",
        ],
    );
    n += assert_all_equal(
        BASE_CASE,
        &[
            "select id, case when amount < 10 then 'small' when amount < 100 then 'medium' else 'large' end size, created_at::DATE day, COALESCE(discount, 0) * (amount + fee) adjusted from raw.orders",
            "SELECT id, (CASE WHEN (amount < 10) THEN 'small' WHEN (amount < 100) THEN 'medium' ELSE 'large' END) AS size,\n CAST((created_at) AS DATE) AS day, (coalesce(discount, 0)) * ((amount + fee)) AS adjusted -- parens\nFROM raw.orders;",
        ],
    );
    n += assert_all_equal(
        BASE_UNION,
        &[
            "(SELECT id, 'web' AS channel FROM raw.web_orders) UNION ALL (SELECT id, 'shop' AS channel FROM raw.shop_orders)",
            "select id, 'web' channel from raw.web_orders union all select id, 'shop' channel from raw.shop_orders; -- both",
        ],
    );
    assert!(n >= 20, "only {n} variants");
}

#[test]
fn canonical_bounds_from_a_fragment_parse_and_are_stable() {
    // The body as a model file would write it: `@start` / `@end` and a `ref`, rendered by the
    // canonical resolver into `raw.orders` and `$start` / `$end`.
    let mut body = Fragment::default();
    body.push_text("SELECT id, amount::DOUBLE AS amount, created_at FROM ");
    body.nodes.push(Node::Ref(RefSite { target: name("raw.orders"), location: loc() }));
    body.push_sql_with_bounds(" WHERE created_at >= @start AND created_at < @end");
    let rendered = body.render(&CanonicalResolver);
    assert_eq!(rendered, ORDERS_BODY);
    let text = canon(&rendered);
    assert!(text.contains(r#"{"Placeholder":"$start"}"#), "{text}");
    assert!(text.contains(r#"{"Placeholder":"$end"}"#), "{text}");
    // Same text every call.
    assert_eq!(canon(&rendered), text);
}

// ---------------------------------------------------------------------------------------------
// Semantic edits: must differ

#[test]
fn semantic_edits_change_the_canonical_form() {
    let edits: &[(&str, &str, &str)] = &[
        ("literal", BASE_CASE, &BASE_CASE.replace("'small'", "'tiny'")),
        ("numeric literal", BASE_CASE, &BASE_CASE.replace("amount < 10", "amount < 20")),
        ("predicate operator", BASE_FILTER, &BASE_FILTER.replace("created_at >= $start", "created_at > $start")),
        ("predicate dropped", BASE_JOIN, &BASE_JOIN.replace(" AND o.total > 0", "")),
        ("bounds swapped", BASE_FILTER, &BASE_FILTER.replace("$start AND", "$end AND").replace("< $end", "< $start")),
        ("projection added", BASE_FILTER, &BASE_FILTER.replace("created_at FROM", "created_at, status FROM")),
        ("projection removed", BASE_FILTER, &BASE_FILTER.replace("id, amount", "amount")),
        ("projections reordered", BASE_FILTER, &BASE_FILTER.replace("id, amount::DOUBLE AS amount", "amount::DOUBLE AS amount, id")),
        ("cast type", BASE_FILTER, &BASE_FILTER.replace("::DOUBLE", "::DECIMAL(18, 2)")),
        ("join type", BASE_JOIN, &BASE_JOIN.replace("LEFT JOIN", "JOIN")),
        ("join condition", BASE_JOIN, &BASE_JOIN.replace("c.id = o.customer_id", "c.id = o.seller_id")),
        (
            "group by",
            BASE_CTE,
            &BASE_CTE.replace("GROUP BY s.patient_id, ", "GROUP BY ").replace("SELECT s.patient_id, ", "SELECT any_value(s.patient_id) AS patient_id, "),
        ),
        ("having", BASE_CTE, &BASE_CTE.replace("count(*) > 1", "count(*) > 2")),
        ("order direction", BASE_CTE, &BASE_CTE.replace("day DESC", "day ASC")),
        ("limit", BASE_CTE, &BASE_CTE.replace("LIMIT 100", "LIMIT 10")),
        ("window partition", BASE_WINDOW, &BASE_WINDOW.replacen("PARTITION BY patient_id ", "", 1)),
        ("output alias case", BASE_FILTER, &BASE_FILTER.replace("AS amount", "AS Amount")),
        ("column identifier case", BASE_FILTER, &BASE_FILTER.replace("SELECT id", "SELECT ID")),
        ("source table", BASE_FILTER, &BASE_FILTER.replace("raw.orders", "raw.orders_v2")),
        ("union all vs union", BASE_UNION, &BASE_UNION.replace("UNION ALL", "UNION")),
        ("distinct", BASE_UNION, &BASE_UNION.replacen("SELECT", "SELECT DISTINCT", 1)),
        ("precedence", "SELECT (a + b) * c FROM t", "SELECT a + b * c FROM t"),
        ("string vs identifier", "SELECT 'a' FROM t", "SELECT \"a\" FROM t"),
    ];
    for (what, base, edited) in edits {
        assert_ne!(base, edited, "{what}: the edit did not apply");
        assert_ne!(canon(base), canon(edited), "{what}: edit not seen\n--- base\n{base}\n--- edited\n{edited}");
    }
    assert!(edits.len() >= 10);
}

#[test]
fn metadata_edits_change_the_fingerprint() {
    let base_model = orders_model();
    let base = fp(&base_model, ORDERS_BODY, &parents());

    let mut m = orders_model();
    m.kind = time_range("updated_at", Grain::Day);
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "kind time_column");

    let mut m = orders_model();
    m.kind = time_range("created_at", Grain::Hour);
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "kind grain");

    let mut m = orders_model();
    m.kind = Kind::Full;
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "kind tag");

    let mut m = orders_model();
    m.grain = vec!["id".into(), "created_at".into()];
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "model grain");

    let mut m = orders_model();
    m.schema.0[1].ty = "DECIMAL(18,2)".into();
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "declared column type");

    let mut m = orders_model();
    m.schema.0[1].name = "Amount".into();
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "declared column name");

    let mut m = orders_model();
    m.schema.0.swap(0, 1);
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "declared column order");

    let mut m = orders_model();
    m.name = name("shop.orders_copy");
    assert_ne!(fp(&m, ORDERS_BODY, &parents()), base, "model name");

    let other_parent = BTreeMap::from([(name("raw.orders"), Fingerprint::parse(&"2".repeat(64)).unwrap())]);
    assert_ne!(fp(&base_model, ORDERS_BODY, &other_parent), base, "parent fingerprint");

    assert_ne!(fingerprint(&base_model, None, &parents()), base, "body removed");
}

#[test]
fn non_data_fields_leave_the_fingerprint_alone() {
    let base = fp(&orders_model(), ORDERS_BODY, &parents());

    let mut m = orders_model();
    m.description = Some("something else entirely".into());
    m.location = Location { file: "models/elsewhere.rhai".into(), line: 42 };
    m.kind = Kind::IncrementalByTimeRange(TimeRange {
        time_column: "created_at".into(),
        start: 1_700_000_000_000,
        end: Some(1_800_000_000_000),
        grain: Grain::Day,
        batch_size: 7,
        lookback: 3,
        auto_restatement_intervals: 2,
    });
    // Declared types hash modulo case and whitespace.
    m.schema.0[2].ty = "  timestamp ".into();
    let reformatted = "select id, cast(amount as double) amount, created_at\nfrom raw.orders -- bounds\nwhere created_at >= $start and created_at < $end;";
    assert_eq!(fp(&m, reformatted, &parents()), base);
}

// ---------------------------------------------------------------------------------------------
// Frozen values, names, errors

/// Pins the whole pipeline (sqlparser's AST serialisation, the normalisation, the payload
/// layout, blake3). If this changes, every user's fingerprints change: bump
/// `FINGERPRINT_VERSION` on purpose and update the hex knowingly.
#[test]
fn fingerprints_are_frozen() {
    assert_eq!(FINGERPRINT_VERSION, 1);
    let got = fp(&orders_model(), ORDERS_BODY, &parents());
    assert_eq!(got.as_str(), "4853da49f61f6a42d067b3c607ac27b99d02a5fba439480418a5309f29132c84");
    assert_eq!(got.short(), &got.as_str()[..12]);

    let external = Model {
        name: name("raw.orders"),
        kind: Kind::External(efmesh::core::External::Table { name: "landing.orders".into() }),
        schema: Schema(vec![col("id", "BIGINT")]),
        body: None,
        grain: vec![],
        description: None,
        location: loc(),
        target: Default::default(),
        audits: vec![],
        cron: None,
        statements: Default::default(),
        owner: None,
        tags: Vec::new(),
        column_descriptions: Vec::new(),
        ignored_lints: Vec::new(),
        signals: Vec::new(),
        query_lines: Vec::new(),
    };
    // The readable half of the golden: the exact payload, keys in their fixed order.
    assert_eq!(
        payload(&external, None, &BTreeMap::new()).to_string(),
        r#"{"v":1,"name":"raw.orders","kind":{"tag":"external","table":"landing.orders"},"columns":[["id","bigint"]],"grain":[],"body":null,"parents":[]}"#
    );
    assert_eq!(fingerprint(&external, None, &BTreeMap::new()).as_str(), "e77ba83c5b1c77d7dc96bc1203ce80744f9d38ea277722b2502d55cb4c69c92c");
}

#[test]
fn physical_names_never_collide() {
    // `a__b.c` and `a.b__c` would both read `a__b__c__…`: a schema cannot contain `__`, so the
    // first `__` always ends the schema part; and the full fingerprint, which hashes the model
    // name, ends every physical name, so even identical bodies get different names.
    assert!(efmesh::core::ModelName::parse("a__b.c").is_err());
    let mk = |n: &str| Model { name: name(n), ..orders_model() };
    let (x, y) = (mk("a.b__c"), mk("a.b"));
    let (fx, fy) = (fp(&x, ORDERS_BODY, &parents()), fp(&y, ORDERS_BODY, &parents()));
    let (px, py) = (physical_table(&x.name, &fx), physical_table(&y.name, &fy));
    assert_ne!(fx, fy);
    assert_eq!(px, format!("a__b__c__{fx}"));
    assert_eq!(py, format!("a__b__{fy}"));
    assert_ne!(px, py);
}

#[test]
fn non_queries_are_errors() {
    for (sql, found) in [
        ("DELETE FROM t", "a `DELETE FROM` statement"),
        ("INSERT INTO t SELECT 1", "an `INSERT INTO` statement"),
        ("CREATE TABLE t AS SELECT 1", "a `CREATE TABLE` statement"),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("", "no statement"),
    ] {
        let e = canonicalize(sql).unwrap_err();
        assert!(e.to_string().ends_with(&format!("found {found}")), "{sql}: {e}");
    }
    let e = canonicalize("SELECT a,\n  FROM WHERE").unwrap_err();
    assert_eq!(e.line(), Some(2), "{e}");
}

/// Real `json_serialize_sql` output of DuckDB 1.5.5 for two spellings of one query.
#[test]
fn duckdb_json_loses_query_locations() {
    let a = r#"{"error":false,"statements":[{"node":{"type":"SELECT_NODE","modifiers":[],"cte_map":{"map":[]},"select_list":[{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":7,"column_names":["a"]},{"class":"FUNCTION","type":"FUNCTION","alias":"s","query_location":10,"function_name":"sum","schema":"","children":[{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":14,"column_names":["b"]}],"filter":null,"order_bys":{"type":"ORDER_MODIFIER","orders":[]},"distinct":false,"is_operator":false,"export_state":false,"catalog":""}],"from_table":{"type":"BASE_TABLE","alias":"","sample":null,"query_location":27,"schema_name":"","table_name":"t","column_name_alias":[],"catalog_name":"","at_clause":null},"where_clause":{"class":"COMPARISON","type":"COMPARE_GREATERTHANOREQUALTO","alias":"","query_location":38,"left":{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":35,"column_names":["ts"]},"right":{"class":"PARAMETER","type":"VALUE_PARAMETER","alias":"","query_location":18446744073709551615,"identifier":"start"}},"group_expressions":[{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":57,"column_names":["a"]}],"group_sets":[[0]],"aggregate_handling":"STANDARD_HANDLING","having":null,"sample":null,"qualify":null},"named_param_map":[{"key":"start","value":1}]}]}"#;
    let b = r#"{"error":false,"statements":[{"node":{"type":"SELECT_NODE","modifiers":[],"cte_map":{"map":[]},"select_list":[{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":7,"column_names":["a"]},{"class":"FUNCTION","type":"FUNCTION","alias":"s","query_location":12,"function_name":"sum","schema":"","children":[{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":16,"column_names":["b"]}],"filter":null,"order_bys":{"type":"ORDER_MODIFIER","orders":[]},"distinct":false,"is_operator":false,"export_state":false,"catalog":""}],"from_table":{"type":"BASE_TABLE","alias":"","sample":null,"query_location":35,"schema_name":"","table_name":"t","column_name_alias":[],"catalog_name":"","at_clause":null},"where_clause":{"class":"COMPARISON","type":"COMPARE_GREATERTHANOREQUALTO","alias":"","query_location":46,"left":{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":43,"column_names":["ts"]},"right":{"class":"PARAMETER","type":"VALUE_PARAMETER","alias":"","query_location":18446744073709551615,"identifier":"start"}},"group_expressions":[{"class":"COLUMN_REF","type":"COLUMN_REF","alias":"","query_location":65,"column_names":["a"]}],"group_sets":[[0]],"aggregate_handling":"STANDARD_HANDLING","having":null,"sample":null,"qualify":null},"named_param_map":[{"key":"start","value":1}]}]}"#;
    assert_ne!(a, b);
    let (na, nb) = (normalize_duckdb_json(a).unwrap(), normalize_duckdb_json(b).unwrap());
    assert_eq!(na, nb);
    assert!(!na.contains("query_location"));
    // Everything else is kept, in DuckDB's order.
    assert!(na.starts_with(r#"{"error":false,"statements":[{"node":{"type":"SELECT_NODE","modifiers":[]"#), "{na}");
    assert!(na.contains(r#""function_name":"sum""#));

    let rejected = r#"{"error":true,"error_type":"parser","error_message":"syntax error at or near \"SELEC\"","error_subtype":"SYNTAX_ERROR","position":"0"}"#;
    assert_eq!(normalize_duckdb_json(rejected).unwrap_err().to_string(), r#"DuckDB cannot parse SQL: syntax error at or near "SELEC""#);
}

/// Copies the committed model sources of an example (config, models, seeds, data) into a
/// temporary directory, so loading it writes no cache into the source tree.
fn example_copy(dir: &str) -> tempfile::TempDir {
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        fs_err::create_dir_all(to).unwrap();
        for entry in fs_err::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.contains(".duckdb") || name.contains(".state.sqlite") || ["lake", "ducklake"].contains(&name.as_str()) {
                continue;
            }
            let (src, dst) = (entry.path(), to.join(&name));
            if src.is_dir() { copy(&src, &dst) } else { fs_err::copy(&src, &dst).map(|_| ()).unwrap() }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    copy(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(dir), tmp.path());
    tmp
}

/// The plan hashes each canonical text as it is written (`canonical_digest`), never keeping
/// it: that digest must be the one of the text itself, for every body of the shipped examples
/// and of the golden cases above, or fingerprints would change.
#[test]
fn streamed_canonical_digests_equal_the_digest_of_the_text() {
    use efmesh::sql::canon::canonical_digest;
    use efmesh::sql::fingerprint::body_digest;
    let mut bodies: Vec<String> = vec![ORDERS_BODY.to_string()];
    for example in ["flights", "hospital", "hospital_portable"] {
        let tmp = example_copy(example);
        let config = efmesh::config::Config::load(&tmp.path().join("efmesh.toml")).unwrap();
        let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{example}: {e}"));
        let before = bodies.len();
        bodies.extend(project.dag.models().filter_map(|m| m.body.as_ref().map(|b| b.render(&CanonicalResolver))));
        assert!(bodies.len() > before + 5, "{example}: too few bodies");
    }
    // A body longer than the hashing buffer (16 KiB), so the text is hashed in several pieces.
    let long = format!("SELECT {} FROM s.t", (0..3000).map(|i| format!("c{i} + 1 AS \"x{i}\"")).collect::<Vec<_>>().join(", "));
    bodies.push(long);
    for sql in &bodies {
        match canonicalize(sql) {
            Ok(c) => assert_eq!(canonical_digest(sql).unwrap(), body_digest(&c.text), "{sql}"),
            Err(e) => assert_eq!(canonical_digest(sql).unwrap_err(), e, "{sql}"),
        }
    }
    assert!(canonicalize(&bodies[bodies.len() - 1]).unwrap().text.len() > 3 * 16 * 1024);
}

// ---------------------------------------------------------------------------------------------
// End to end: edits the canonical form once missed are changes

/// A project of `.sql` models with the seed `s.l` (its `lvl` of the declared enum `labels`) and
/// `s.m`, the `id` of the least `lvl` (`arg_min`: the enum's label order decides).
fn enum_project(labels: &str) -> crate::common::Project {
    let p = crate::common::Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write("seeds/l.csv", "id,lvl\n1,a\n2,A\n");
    p.write("models/l.sql", &enum_seed(labels));
    p.write("models/m.sql", "-- name: s.m\n-- kind: full\n-- schema: first_id integer\n-- refs: s.l\nSELECT arg_min(id, lvl) AS first_id FROM @ref(s.l)\n");
    p
}

fn enum_seed(labels: &str) -> String {
    format!("-- name: s.l\n-- kind: seed(path = seeds/l.csv)\n-- schema: id integer, lvl {labels}\n")
}

/// An enum's labels are its type: `ENUM('a', 'A')` and `ENUM('A', 'a')` order the same values
/// otherwise, so reordering them changes what `s.m` computes. The plan must see a change (it
/// said "no changes" when declared types were hashed lower-cased, quotes included) and dev serve
/// the new rows; a re-spelling outside the labels stays no change.
#[test]
fn reordering_an_enums_labels_is_a_change() {
    use crate::common::{action, env_view};
    let p = enum_project("ENUM('a', 'A')");
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.m")), vec![vec![Some("1".to_string())]]);

    p.write("models/l.sql", &enum_seed("ENUM('A', 'a')"));
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    assert_eq!(action(&plan, "s.l")["change"], "breaking", "{plan:#}");
    assert_ne!(action(&plan, "s.m")["change"], "unchanged", "{plan:#}");
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.m")), vec![vec![Some("2".to_string())]], "dev serves the old rows");

    // Case and spacing outside the labels are formatting.
    p.write("models/l.sql", &enum_seed("enum('A',   'a')"));
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// DuckDB reads `url LIKE rule ->> 'prefix'` as `(url LIKE rule) ->> 'prefix'`: dropping the
/// parentheses of `url LIKE (rule ->> 'prefix')` is a change of the query, not formatting.
#[test]
fn dropping_the_parentheses_of_a_json_arrow_is_a_change() {
    use crate::common::{Project, action};
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    p.write(
        "seeds/o.csv",
        "id,url,rule\n1,https://a.example/x,\"{\"\"prefix\"\":\"\"https://a.%\"\"}\"\n2,https://b.example/y,\"{\"\"prefix\"\":\"\"https://a.%\"\"}\"\n",
    );
    p.write("models/o.sql", "-- name: s.orders\n-- kind: seed(path = seeds/o.csv)\n-- schema: id integer, url varchar, rule json\n");
    let matching = |condition: &str| {
        format!("-- name: s.matching\n-- kind: full\n-- schema: id integer\n-- refs: s.orders\nSELECT id FROM @ref(s.orders) WHERE {condition}\n")
    };
    p.write("models/c.sql", &matching("url LIKE (rule ->> 'prefix')"));
    p.apply("dev");
    p.write("models/c.sql", &matching("url LIKE rule ->> 'prefix'"));
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "s.matching")["change"], "breaking", "{plan:#}");
    // Parentheses around the arrow where it starts the condition are still formatting.
    p.write("models/c.sql", &matching("(url LIKE (rule ->> 'prefix'))"));
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// sqlparser reads `@2` as a placeholder and `count_if(a = … OR …)` as an argument `a` named
/// `… OR …`, so `(@2) - 5` and `@2 - 5`, `count_if(a = (1 OR b = 2))` and `count_if(a = 1 OR
/// b = 2)` were one tree each, where DuckDB reads `@(2 - 5)` and `(a = 1) OR (b = 2)`: the edit
/// was "no changes" and dev kept the old rows. Such bodies are read by DuckDB's parser: the edit
/// is a change, and dev serves the new rows.
#[test]
fn edits_sqlparser_reads_as_one_tree_and_duckdb_as_two_are_changes() {
    use crate::common::{Project, action, env_view};
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    let model = |name: &str, select: &str| format!("-- name: s.{name}\n-- kind: full\n-- schema: v integer\n{select}\n");
    let counted = |condition: &str| model("counted", &format!("SELECT CAST(count_if({condition}) AS INTEGER) AS v FROM (VALUES (0, 2)) AS t(a, b)"));
    p.write("models/abs.sql", &model("abs", "SELECT (@2) - 5 AS v"));
    p.write("models/counted.sql", &counted("a = (1 OR b = 2)"));
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.abs")), vec![vec![Some("-3".to_string())]]);
    assert_eq!(p.rows(&env_view("dev", "s.counted")), vec![vec![Some("0".to_string())]]);

    p.write("models/abs.sql", &model("abs", "SELECT @2 - 5 AS v"));
    p.write("models/counted.sql", &counted("a = 1 OR b = 2"));
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    for name in ["s.abs", "s.counted"] {
        assert_ne!(action(&plan, name)["change"], "unchanged", "{name}: {plan:#}");
        assert_eq!(action(&plan, name)["canonicalSource"], "duckdb-json", "{name}: {plan:#}");
    }
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.abs")), vec![vec![Some("3".to_string())]], "dev serves the old rows");
    assert_eq!(p.rows(&env_view("dev", "s.counted")), vec![vec![Some("1".to_string())]], "dev serves the old rows");
}
