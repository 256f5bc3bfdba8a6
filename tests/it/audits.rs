//! Audits (issue #6): the Lua and Rhai API, the built-ins, write-audit-publish during `apply`,
//! and `efmesh audit <env>`, driven through the binary on temporary projects.

use crate::common::*;
use crate::on_every_engine;
use efmesh::engine::duckdb::DuckDb;
use serde_json::Value;

on_every_engine!(
    every_built_in_passes_on_clean_data_and_fires_on_violations,
    lua_and_rhai_built_ins_render_the_same_sql,
    a_custom_parameterised_audit_in_lua_and_one_in_rhai_each_serve_two_models,
    a_blocking_interval_audit_rolls_its_batch_back_while_earlier_batches_stay,
    a_blocking_whole_audit_leaves_prod_on_the_old_version_and_runs_again_next_apply,
    promoting_an_existing_version_audits_it_before_the_view_swap,
    warn_audits_log_and_never_block,
    an_audit_only_edit_is_a_metadata_change_and_rebuilds_nothing,
    efmesh_audit_catches_a_corrupted_physical_table,
    relationships_catches_an_orphan_key_and_passes_clean_data,
    an_audit_runs_after_the_model_it_references_even_without_a_data_edge,
    a_change_of_the_referenced_model_re_runs_the_audit_before_any_view_moves,
    efmesh_audit_reports_every_failure_when_an_audit_sql_errors,
    a_run_refreshing_the_referenced_model_re_runs_the_audits_reading_it,
    a_leading_zero_in_a_sql_header_is_text_and_accepted_values_match_exactly,
    rows_prod_writes_into_a_table_dev_serves_with_an_audit_more_are_audited_by_devs_run,
    prod_is_never_told_of_the_audits_another_environment_lacks,
    a_warn_audit_that_found_rows_on_a_shared_table_has_checked_it,
    a_warn_audit_on_a_shared_full_table_has_checked_what_devs_own_builds_wrote,
    a_warn_audit_on_a_shared_time_range_table_has_checked_the_batches_devs_runs_add,
    a_full_table_prod_serves_under_an_audit_dev_lacks_is_rebuilt_by_prod_only,
);

/// A project on `engine` whose models may be Lua, Rhai or SQL files.
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
    p
}

/// The `audits` entry of an apply (or `results` entry of `efmesh audit`) for `model` / `audit`.
#[track_caller]
fn result<'a>(v: &'a Value, model: &str, audit: &str) -> &'a Value {
    let list = v.get("audits").or_else(|| v.get("results")).and_then(Value::as_array).unwrap_or_else(|| panic!("no audits in {v:#}"));
    list.iter().find(|r| r["model"] == model && r["audit"] == audit).unwrap_or_else(|| panic!("no audit `{audit}` on `{model}` in {v:#}"))
}

fn violations(v: &Value, model: &str, audit: &str) -> u64 {
    result(v, model, audit)["violations"].as_u64().expect("violations")
}

/// The one physical table of `model` (`schema__table__<fp>`).
fn physical_of(p: &Project, model: &str) -> String {
    let prefix = format!("{}__", model.replace('.', "__"));
    let tables: Vec<String> = p.physical_tables().into_iter().filter(|t| t.starts_with(&prefix)).collect();
    assert_eq!(tables.len(), 1, "{tables:?}");
    format!("\"_efmesh\".\"{}\"", tables[0])
}

/// A timestamp as an audit's sample shows it: Postgres's `to_json` writes ISO 8601 with a `T`
/// (`2026-01-02T00:00:00`), DuckDB's a space (`2026-01-02 00:00:00`).
fn sample_ts(p: &Project, ts: &str) -> String {
    if p.on_postgres() { ts.replacen(' ', "T", 1) } else { ts.to_string() }
}

/// Ledger statuses of a model: (start ISO, status), sorted.
fn ledger(p: &Project, model: &str) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open(p.state_path()).expect("open state");
    let mut stmt = conn.prepare("SELECT start_ts, status FROM intervals WHERE name = ?1 ORDER BY start_ts").expect("prepare");
    stmt.query_map([model], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).expect("query").map(Result::unwrap).collect()
}

// ---- built-ins ---------------------------------------------------------------------------

const ITEMS: &str = r#"define_model {
  name = "t.items",
  kind = kind.full(),
  schema = { { "id", "integer" }, { "seq", "integer" }, { "code", "varchar" }, { "amount", "integer" }, { "seen_at", "timestamp" }, { "d", "timestamp" } },
  audits = {
    -- passing
    audit.not_null("id", "seq"),
    audit.unique("id"),
    audit.unique("code", "amount"),
    audit.accepted_values { column = "code", values = { "a", "b", "c" } },
    audit.accepted_range { column = "amount", min = -10, max = 30 },
    audit.expression("amount IS NULL OR amount > -100"),
    audit.row_count { min = 5, max = 5 },
    audit.contiguous("seq"),
    audit.no_gaps { column = "d", grain = "day" },
    -- firing (warn, so the apply goes on and reports them)
    audit.not_null { "code", blocking = false },
    audit.unique { "code", blocking = false },
    audit.accepted_values { column = "code", values = { "a", "b" }, blocking = false },
    audit.accepted_range { column = "amount", min = 0, blocking = false },
    audit.accepted_range { column = "amount", max = 30, inclusive = false, blocking = false },
    audit.expression { "amount > 0", blocking = false },
    audit.row_count { max = 3, blocking = false },
    audit.contiguous { "id", blocking = false },
    audit.no_gaps { "seen_at", blocking = false },
    audit.no_gaps { "d", grain = "hour", blocking = false },
  },
  query = [[
    SELECT * FROM (VALUES
      (1, 10, 'a', 10, TIMESTAMP '2026-01-01 10:00', TIMESTAMP '2026-01-01'),
      (2, 11, 'b', 20, TIMESTAMP '2026-01-02 11:00', TIMESTAMP '2026-01-02'),
      (3, 12, NULL, 30, TIMESTAMP '2026-01-02 12:00', TIMESTAMP '2026-01-03'),
      (5, 13, 'b', NULL, TIMESTAMP '2026-01-05 00:00', TIMESTAMP '2026-01-04'),
      (6, 14, 'c', -5, TIMESTAMP '2026-01-08 23:59', TIMESTAMP '2026-01-05')
    ) AS v(id, seq, code, amount, seen_at, d)
  ]],
}
"#;

fn every_built_in_passes_on_clean_data_and_fires_on_violations(engine: EngineBackend) {
    let p = project(engine);
    p.write("models/items.lua", ITEMS);
    let run = p.run(&["apply", "dev", "--yes", "--json"]);
    run.expect_code(0);
    let v = run.json();
    let m = "t.items";
    for passing in [
        "not_null(id, seq)",
        "unique(id)",
        "unique(code, amount)",
        "accepted_values(code, a, b, c)",
        "accepted_range(amount, min = -10, max = 30)",
        "expression(amount IS NULL OR amount > -100)",
        "row_count(min = 5, max = 5)",
        "contiguous(seq)",
        "no_gaps(d, grain = day)",
    ] {
        assert_eq!(violations(&v, m, passing), 0, "{passing} should pass: {:#}", result(&v, m, passing));
    }
    // NULL never violates accepted_values / accepted_range; each firing audit counts exactly.
    for (firing, n) in [
        ("not_null(code)", 1),
        ("unique(code)", 1),
        ("accepted_values(code, a, b)", 1),
        ("accepted_range(amount, min = 0)", 1),
        ("accepted_range(amount, max = 30, inclusive = false)", 1),
        ("expression(amount > 0)", 1),
        ("row_count(max = 3)", 1),
        ("contiguous(id)", 1),
        ("no_gaps(seen_at)", 2),
        ("no_gaps(d, grain = hour)", 4),
    ] {
        let r = result(&v, m, firing);
        assert_eq!(r["violations"], n, "{firing}: {r:#}");
        assert_eq!(r["blocking"], false);
        assert!(!r["sample"].as_array().unwrap().is_empty(), "{firing}: {r:#}");
        assert!(run.stderr.contains(&format!("audit `{firing}` on model `t.items`")), "warn not logged for {firing}:\n{}", run.stderr);
    }
    assert_eq!(result(&v, m, "unique(code)")["sample"][0], serde_json::json!({"code": "b", "duplicates": 2}));
    assert_eq!(result(&v, m, "accepted_values(code, a, b)")["sample"][0]["code"], "c");
    assert_eq!(result(&v, m, "row_count(max = 3)")["sample"][0], serde_json::json!({"row_count": 5}));
    assert_eq!(result(&v, m, "contiguous(id)")["sample"][0], serde_json::json!({"covered_through": 3, "resumes_at": 5, "missing": 1}));
    // The first gap first, then how many more.
    let gaps = result(&v, m, "no_gaps(seen_at)");
    assert_eq!(
        gaps["sample"][0],
        serde_json::json!({"covered_through": sample_ts(&p, "2026-01-02 00:00:00"), "resumes_at": sample_ts(&p, "2026-01-05 00:00:00"), "missing": 2})
    );
    assert_eq!(gaps["sample"][1]["covered_through"], sample_ts(&p, "2026-01-05 00:00:00"));
    assert_eq!(gaps["scope"], "whole");
    assert_eq!(result(&v, m, "not_null(code)")["scope"], "interval");
    // The warn audits did not block: the environment serves the model.
    assert_eq!(p.rows(&env_view("dev", m)).len(), 5);
}

fn lua_and_rhai_built_ins_render_the_same_sql(engine: EngineBackend) {
    // Two copies of one model with every built-in, one per language: same audit metadata.
    let p = project(engine);
    let uses_lua = r#"audit.not_null("a", "b"), audit.unique("a"), audit.accepted_values { column = "a", values = { "x", "it's" } },
    audit.accepted_values { column = "b", values = { 1, 2.5 } }, audit.accepted_values { column = "f", values = { true } },
    audit.accepted_range { column = "b", min = -1, max = 2.5, inclusive = false }, audit.expression("a <> 'q'"), audit.row_count { min = 1 },
    audit.contiguous("b"), audit.no_gaps { column = "t", grain = "hour", blocking = false }, audit.unique { "a", "b", scope = "whole" }"#;
    let uses_rhai = r#"audit("not_null", "a", "b"), audit("unique", "a"), audit("accepted_values", #{ column: "a", values: ["x", "it's"] }),
    audit("accepted_values", "b", [1, 2.5]), audit("accepted_values", #{ column: "f", values: [true] }),
    audit("accepted_range", #{ column: "b", min: -1, max: 2.5, inclusive: false }), audit("expression", "a <> 'q'"), audit("row_count", #{ min: 1 }),
    audit("contiguous", "b"), audit("no_gaps", #{ column: "t", grain: "hour", blocking: false }), audit("unique", #{ columns: ["a", "b"], scope: "whole" })"#;
    p.write(
        "models/l.lua",
        &format!("define_model {{ name = \"l.m\", kind = kind.view(), schema = {{ {{ \"a\", \"varchar\" }}, {{ \"b\", \"double precision\" }}, {{ \"t\", \"timestamp\" }}, {{ \"f\", \"boolean\" }} }},\n  audits = {{ {uses_lua} }},\n  query = \"SELECT 'x' AS a, CAST(1.0 AS DOUBLE PRECISION) AS b, TIMESTAMP '2026-01-01' AS t, true AS f\" }}\n"),
    );
    p.write(
        "models/r.rhai",
        &format!("define_model(#{{ name: \"r.m\", kind: kind::view(), schema: [[\"a\", \"varchar\"], [\"b\", \"double precision\"], [\"t\", \"timestamp\"], [\"f\", \"boolean\"]],\n  audits: [{uses_rhai}],\n  query: \"SELECT 'x' AS a, CAST(1.0 AS DOUBLE PRECISION) AS b, TIMESTAMP '2026-01-01' AS t, true AS f\" }});\n"),
    );
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let get = |n: &str| project.dag.get(&efmesh::core::ModelName::parse(n).unwrap()).unwrap().audits.clone();
    let (l, r) = (get("l.m"), get("r.m"));
    assert_eq!(l.len(), 11);
    assert_eq!(r.len(), 11);
    for (a, b) in l.iter().zip(&r) {
        assert_eq!(a.metadata(), b.metadata(), "{} differs between Lua and Rhai", a.label());
    }
    // Both run: every one of them applies cleanly on the one-row views.
    let v = p.apply("dev");
    for m in ["l.m", "r.m"] {
        assert_eq!(violations(&v, m, "accepted_values(a, x, it's)"), 0);
        assert_eq!(violations(&v, m, "accepted_values(b, 1, 2.5)"), 0);
        assert_eq!(violations(&v, m, "accepted_values(f, true)"), 0);
        assert_eq!(violations(&v, m, "no_gaps(t, grain = hour)"), 0);
    }
    assert_eq!(violations(&v, "r.m", "accepted_range(b, min = -1, max = 2.5, inclusive = false)"), 0);
}

// ---- custom audits -----------------------------------------------------------------------

fn a_custom_parameterised_audit_in_lua_and_one_in_rhai_each_serve_two_models(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "audits/positive.lua",
        r#"define_audit {
  name = "positive",
  params = { "column" },
  optional = { "allow_zero" },
  query = function(self, args)
    local op = args.allow_zero and "<" or "<="
    return ("SELECT * FROM %s WHERE %s %s 0"):format(self, args.column, op)
  end,
}
"#,
    );
    // The Rhai definition lives in a model file that the Rhai models import.
    p.write(
        "models/lib/checks.rhai",
        r#"define_audit(#{
  name: "at_most",
  params: ["column", "limit"],
  scope: "whole",
  query: |rel, args| `SELECT * FROM ${rel} WHERE ${args.column} > ${args.limit}`,
});
"#,
    );
    p.write(
        "models/l.lua",
        r#"define_model {
  name = "l.clean", kind = kind.full(),
  schema = { { "x", "integer" } },
  audits = { audit.positive("x") },
  query = "SELECT CAST(i AS INTEGER) AS x FROM generate_series(1, 3) AS g(i)",
}
define_model {
  name = "l.dirty", kind = kind.full(),
  schema = { { "x", "integer" } },
  audits = { audit.positive { "x", blocking = false }, audit.positive { column = "x", allow_zero = true, blocking = false } },
  query = "SELECT CAST(i AS INTEGER) AS x FROM generate_series(-2, 2) AS g(i)",
}
"#,
    );
    p.write(
        "models/r.rhai",
        r#"import "lib/checks" as checks;
define_model(#{
  name: "r.clean", kind: kind::full(),
  schema: [["x", "integer"]],
  audits: [audit("at_most", "x", 10)],
  query: "SELECT CAST(i AS INTEGER) AS x FROM generate_series(1, 3) AS g(i)",
});
define_model(#{
  name: "r.dirty", kind: kind::full(),
  schema: [["x", "integer"]],
  audits: [audit("at_most", #{ column: "x", limit: 10, blocking: false })],
  query: "SELECT CAST(i AS INTEGER) AS x FROM generate_series(8, 13) AS g(i)",
});
"#,
    );
    let v = p.apply("dev");
    assert_eq!(violations(&v, "l.clean", "positive(x)"), 0);
    assert_eq!(violations(&v, "l.dirty", "positive(x)"), 3); // -2, -1, 0
    assert_eq!(violations(&v, "l.dirty", "positive(x, allow_zero = true)"), 2);
    assert_eq!(violations(&v, "r.clean", "at_most(x, 10)"), 0);
    assert_eq!(violations(&v, "r.dirty", "at_most(x, 10)"), 3); // 11, 12, 13
    assert_eq!(result(&v, "r.dirty", "at_most(x, 10)")["scope"], "whole");
    assert_eq!(result(&v, "r.dirty", "at_most(x, 10)")["args"], serde_json::json!({"column": "x", "limit": 10}));

    // Made blocking, the same custom audits stop the apply and name the audit and the model.
    p.write("models/l.lua", &p.read("models/l.lua").replace("audit.positive { \"x\", blocking = false }", "audit.positive(\"x\")"));
    let run = p.run(&["apply", "prod", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `positive(x)` on model `l.dirty`: 3 violating rows"), "{}", run.stderr);
    assert!(!p.relations().iter().any(|r| r.starts_with("l.") || r.starts_with("r.")), "prod must not exist: {:?}", p.relations());
}

// ---- load errors -------------------------------------------------------------------------

#[test]
fn unknown_audits_and_bad_arguments_are_load_errors_with_file_line() {
    let p = project(EngineBackend::DuckDb);
    p.write("audits/mine.lua", "define_audit { name = \"mine\", params = { \"column\" }, query = function(self, a) return 'SELECT * FROM ' .. self end }\n");
    p.write(
        "models/a.lua",
        r#"define_model {
  name = "s.a", kind = kind.full(), schema = { { "x", "integer" } },
  audits = {
    audit.not_nul("x"),
    audit.accepted_range { colum = "x", min = 1 },
    audit.accepted_values("x"),
    audit.mine(),
    audit.accepted_range { column = "x" },
  },
  query = "SELECT 1 AS x",
}
"#,
    );
    p.write(
        "models/b.rhai",
        r#"define_model(#{
  name: "s.b", kind: kind::full(), schema: [["x", "integer"]],
  audits: [audit("uniqe", "x"),
           audit("row_count", #{ min: 1, scope: "batch" })],
  query: "SELECT 1 AS x",
});
"#,
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let e = &run.stderr;
    for want in [
        "models/a.lua:4: unknown audit `not_nul`\n  hint: did you mean `not_null`?",
        "models/a.lua:5: audit `accepted_range` has no parameter `colum` (did you mean `column`?)",
        "models/a.lua:6: audit `accepted_values` needs parameter `values`: `accepted_values(column, values)`",
        "models/a.lua:7: audit `mine` needs parameter `column`",
        "models/a.lua:8: audit `accepted_range` failed to render its SQL: `accepted_range` needs `min`, `max` or both",
        "models/b.rhai:3: unknown audit `uniqe`\n  hint: did you mean `unique`?",
        "models/b.rhai:4: audit `row_count`: `scope` must be \"interval\" or \"whole\", got \"batch\"",
    ] {
        assert!(e.contains(want), "missing `{want}` in:\n{e}");
    }
    // A name taken twice, and an audit body that reads nothing.
    let q = project(EngineBackend::DuckDb);
    q.write("audits/dup.lua", "define_audit { name = \"unique\", params = { \"c\" }, query = function(s, a) return 'SELECT * FROM ' .. s end }\ndefine_audit { name = \"blind\", query = function(s, a) return 'SELECT 1' end }\n");
    q.write(
        "models/a.lua",
        "define_model { name = \"s.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, audits = { audit.blind() }, query = \"SELECT 1 AS x\" }\n",
    );
    let e = q.run(&["plan", "dev"]).expect_code(1).stderr.clone();
    assert!(e.contains("audits/dup.lua:1: audit `unique` is already defined (a built-in audit)"), "{e}");
    assert!(e.contains("models/a.lua:1: audit `blind`: the audit body's SQL never reads the relation under audit"), "{e}");
}

/// `accepted_values` compared with a column of another type made the engine cast one side: the
/// numbers 1, 2 on a `varchar` column matched '001', '2.0' and ' 2' (the column cast to a
/// number), the text '1' on an integer one matched 1.4. Refused at load, at the use's line.
#[test]
fn accepted_values_of_another_type_than_their_column_are_load_errors_at_the_use() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "models/a.sql",
        "-- name: s.dept\n-- kind: full\n-- schema: id integer, code varchar\n-- audits: accepted_values(column = code, values = [1, 2])\nSELECT * FROM (VALUES (1, '01'), (2, '001')) t(id, code)\n",
    );
    p.write(
        "models/b.lua",
        r#"define_model {
  name = "s.b", kind = kind.full(), schema = { { "id", "integer" }, { "code", "varchar" } },
  audits = {
    audit.accepted_values { column = "code", values = { 1, 2 } },
    audit.accepted_values { column = "id", values = { "1", 2 } },
    audit.accepted_values { column = "code", values = { "1", "2" } },
    audit.accepted_values { column = "id", values = { 1, 2 } },
  },
  query = "SELECT 1 AS id, '1' AS code",
}
"#,
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let e = &run.stderr;
    for want in [
        "models/a.sql:4: model `s.dept`: audit `accepted_values(code, 1, 2)`: the values 1, 2 are not text but column `code` is `varchar`: quote them",
        "models/b.lua:4: model `s.b`: audit `accepted_values(code, 1, 2)`: the values 1, 2 are not text but column `code` is `varchar`: quote them",
        "models/b.lua:5: model `s.b`: audit `accepted_values(id, 1, 2)`: the value '1' is text but column `id` is `integer`: write them as numbers",
    ] {
        assert!(e.contains(want), "missing `{want}` in:\n{e}");
    }
    assert!(e.contains("'001'"), "the hint says what the cast would let through:\n{e}");
    assert!(!e.contains("models/b.lua:6") && !e.contains("models/b.lua:7"), "values of the column's type are fine:\n{e}");
}

/// A bare number with a leading zero in a `.sql` header is text: `values = [01, 02]` on a
/// `varchar` column accepts '01' and '02' only, not '1', '001', '2.0' or ' 2' (read as the
/// numbers 1 and 2, they all passed).
fn a_leading_zero_in_a_sql_header_is_text_and_accepted_values_match_exactly(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/a.sql",
        "-- name: s.dept\n-- kind: full\n-- schema: id integer, code varchar\n-- audits: accepted_values(column = code, values = [01, 02], blocking = false)\nSELECT * FROM (VALUES (1, '01'), (2, '1'), (3, '001'), (4, '2.0'), (5, ' 2'), (6, '02')) t(id, code)\n",
    );
    let v = p.apply("dev");
    assert_eq!(violations(&v, "s.dept", "accepted_values(code, 01, 02)"), 4, "{v:#}");
    let audit = p.run(&["audit", "dev"]);
    audit.expect_code(0);
    assert!(audit.stdout.contains("accepted_values(code, 01, 02)"), "{}", audit.stdout);
}

// ---- write-audit-publish -----------------------------------------------------------------

/// A daily time-range model over an external table (one batch per day) with `audits`; the
/// table `src.events` holds the rows of `csv` (see [`load_events`]).
fn daily_project(engine: EngineBackend, csv: &str, audits: &str) -> Project {
    let mut p = project(engine);
    p.now = "2026-01-06T00:00:00Z".into();
    load_events(&p, csv);
    p.write(
        "models/daily.lua",
        &format!(
            r#"local raw = define_model {{
  name = "raw.events",
  kind = kind.external {{ table = "src.events" }},
  schema = {{ {{ "event_at", "timestamp" }}, {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
}}
define_model {{
  name = "s.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "region", "varchar" }}, {{ "amount", "bigint" }} }},
  audits = {{ {audits} }},
  query = "SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region, CAST(sum(amount) AS BIGINT) AS amount FROM " .. ref(raw) .. " WHERE event_at >= @start AND event_at < @end GROUP BY 1, 2",
}}
"#
        ),
    );
    p
}

const EVENTS: &str = "event_at,region,amount\n\
2026-01-01 10:00:00,north,10\n\
2026-01-02 10:00:00,north,20\n\
2026-01-03 10:00:00,,30\n\
2026-01-03 11:00:00,south,5\n\
2026-01-04 10:00:00,south,40\n";

fn a_blocking_interval_audit_rolls_its_batch_back_while_earlier_batches_stay(engine: EngineBackend) {
    let p = daily_project(engine, EVENTS, "audit.not_null(\"region\")");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let e = &run.stderr;
    assert!(
        e.contains("models/daily.lua:10: audit `not_null(region)` on model `s.daily` in [2026-01-03T00:00:00.000Z, 2026-01-04T00:00:00.000Z): 1 violating row"),
        "the audit's use named by file:line: {e}"
    );
    let sample = format!(r#"{{"day":"{}","region":null,"amount":30}}"#, sample_ts(&p, "2026-01-03 00:00:00"));
    assert!(e.contains(&sample), "{e}");
    assert!(e.contains("rolled back and marked failed"), "{e}");
    // The batch of the 3rd has no rows in the table (not even its clean `south` row); the
    // 1st and 2nd stay; nothing after the failure ran; no view was created.
    let physical = physical_of(&p, "s.daily");
    assert_eq!(
        p.rows(&format!("(SELECT day, region FROM {physical}) AS q")),
        vec![vec![Some("2026-01-01 00:00:00".into()), Some("north".into())], vec![Some("2026-01-02 00:00:00".into()), Some("north".into())],]
    );
    assert_eq!(
        ledger(&p, "s.daily"),
        vec![
            ("2026-01-01T00:00:00.000Z".into(), "done".into()),
            ("2026-01-02T00:00:00.000Z".into(), "done".into()),
            ("2026-01-03T00:00:00.000Z".into(), "failed".into()),
        ]
    );
    assert!(!p.relations().contains(&"dev__s.daily".to_string()), "{:?}", p.relations());
    // The next plan wants the failed day and the rest again (the failed one is not done).
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "s.daily")["intervals"], 3);
    // Fixed data: the next apply recomputes from the failed day and publishes.
    load_events(&p, &EVENTS.replace(",,30", ",east,30"));
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "s.daily")).len(), 5);
}

fn a_blocking_whole_audit_leaves_prod_on_the_old_version_and_runs_again_next_apply(engine: EngineBackend) {
    let audits = "audit.unique { \"day\", scope = \"whole\" }";
    let clean = "event_at,region,amount\n2026-01-01 10:00:00,north,10\n2026-01-02 10:00:00,north,20\n2026-01-03 10:00:00,north,30\n";
    let p = daily_project(engine, clean, audits);
    p.apply("prod");
    let before = p.rows(&env_view("prod", "s.daily"));
    let pointers = p.state_summary().pointers;
    assert_eq!(before.len(), 3);
    // v2 groups by region as well: on the 3rd, two regions → two rows of the same day. Each
    // batch alone is fine for an interval check; the whole table is not.
    load_events(&p, &format!("{clean}2026-01-03 11:00:00,south,5\n"));
    p.write("models/daily.lua", &p.read("models/daily.lua").replace("GROUP BY 1, 2", "GROUP BY 1, 2 HAVING true"));
    let run = p.run(&["apply", "prod", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `unique(day)` on model `s.daily`"), "{}", run.stderr);
    let sample = format!(r#"{{"day":"{}","duplicates":2}}"#, sample_ts(&p, "2026-01-03 00:00:00"));
    assert!(run.stderr.contains(&sample), "{}", run.stderr);
    assert_eq!(p.rows(&env_view("prod", "s.daily")), before, "prod's view moved");
    assert_eq!(p.state_summary().pointers, pointers, "prod's pointers moved");
    // The failed whole audit is not forgotten: the next apply runs it again and fails again.
    let again = p.run(&["apply", "prod", "--yes"]);
    again.expect_code(1);
    assert!(again.stderr.contains("audit `unique(day)` on model `s.daily`"), "{}", again.stderr);
    assert_eq!(p.state_summary().pointers, pointers);
    // Demoted to warn (a metadata edit), the apply publishes and reports the violation.
    p.write("models/daily.lua", &p.read("models/daily.lua").replace("scope = \"whole\" }", "scope = \"whole\", blocking = false }"));
    let v = p.apply("prod");
    assert_eq!(violations(&v, "s.daily", "unique(day)"), 1);
    assert_eq!(p.rows(&env_view("prod", "s.daily")).len(), 4);
}

fn promoting_an_existing_version_audits_it_before_the_view_swap(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/a.lua",
        r#"define_model {
  name = "s.a", kind = kind.full(), schema = { { "id", "integer" }, { "label", "varchar" } },
  audits = { audit.not_null("label"), audit.row_count { max = 3, blocking = false } },
  query = "SELECT CAST(i AS INTEGER) AS id, 'n' || i AS label FROM generate_series(0, 2) AS g(i)",
}
"#,
    );
    p.apply("dev");
    // A version whose audits no record shows passed on its data (here: the record removed, as
    // in a store written before layout 7) is audited at promotion. (With the record, the
    // promotion trusts the pass at the same data generation: a write outside efmesh, like the
    // one below, is what `efmesh audit` finds, see `efmesh_audit_catches_a_corrupted_physical_table`.)
    let conn = rusqlite::Connection::open(p.state_path()).expect("open state");
    assert_eq!(conn.execute("DELETE FROM audit_passes WHERE name = 's.a'", []).expect("forget the pass"), 1);
    drop(conn);
    p.execute_on_engine(&format!("INSERT INTO {} VALUES (9, NULL)", physical_of(&p, "s.a")));
    // `apply prod` builds nothing (the version exists) but audits it before pointing prod at it.
    let run = p.run(&["apply", "prod", "--yes", "--json"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `not_null(label)` on model `s.a`: 1 violating row"), "{}", run.stderr);
    assert!(!p.relations().contains(&"s.a".to_string()), "{:?}", p.relations());
    assert!(!p.state_summary().pointers.contains_key("prod"));
}

fn warn_audits_log_and_never_block(engine: EngineBackend) {
    let p = daily_project(engine.clone(), EVENTS, "audit.not_null { \"region\", blocking = false }");
    let run = p.run(&["apply", "dev", "--yes", "--json"]);
    run.expect_code(0);
    let v = run.json();
    let r = result(&v, "s.daily", "not_null(region)");
    assert_eq!(r["violations"], 1);
    assert_eq!(r["runs"], 5);
    assert_eq!(r["intervals"], serde_json::json!([{"start": "2026-01-03T00:00:00.000Z", "end": "2026-01-04T00:00:00.000Z"}]));
    assert!(run.stderr.contains("level=warn") && run.stderr.contains("audit `not_null(region)` on model `s.daily`"), "{}", run.stderr);
    // At level warn one short line per batch: the sample rows are in the report (stdout), and in
    // the log at level debug only.
    let warned: Vec<&str> = run.stderr.lines().filter(|l| l.contains("level=warn") && l.contains("not_null(region)")).collect();
    assert_eq!(warned.len(), 1, "{}", run.stderr);
    assert!(warned[0].contains("1 violating row") && !warned[0].contains("amount") && !warned[0].contains("\\n"), "no sample row: {}", warned[0]);
    assert_eq!(p.rows(&env_view("dev", "s.daily")).len(), 5);
    // Human output says so too, with the sample row; the debug log has it as well.
    let q = daily_project(engine.another(), EVENTS, "audit.not_null { \"region\", blocking = false }");
    let human = q.run(&["apply", "dev", "--yes", "--log-level", "debug"]);
    human.expect_code(0);
    assert!(human.stdout.contains("audits: 1 checked (5 runs), 0 passed, 1 warned"), "{}", human.stdout);
    assert!(human.stdout.contains(r#""amount":30"#), "the report keeps the sample: {}", human.stdout);
    let sample = human.stderr.lines().find(|l| l.contains("warn audit: violating row")).unwrap_or_else(|| panic!("{}", human.stderr));
    assert!(sample.contains("level=debug") && sample.contains("s.daily") && sample.contains("amount"), "{sample}");
}

// ---- audits are metadata -----------------------------------------------------------------

fn an_audit_only_edit_is_a_metadata_change_and_rebuilds_nothing(engine: EngineBackend) {
    let p = daily_project(engine, EVENTS.replace(",,30", ",east,30").as_str(), "");
    p.apply("dev");
    let tables = p.physical_tables();
    for audits in ["audit.not_null(\"region\")", "audit.not_null(\"region\", \"amount\")", "audit.not_null { \"region\", blocking = false }"] {
        p.write(
            "models/daily.lua",
            &p.read("models/daily.lua")
                .replace(&p.read("models/daily.lua").lines().find(|l| l.contains("audits =")).unwrap().to_string(), &format!("  audits = {{ {audits} }},")),
        );
        let plan = p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json();
        let a = action(&plan, "s.daily");
        assert_eq!(a["change"], "metadata", "{audits}: {a:#}");
        assert!(a["explain"]["diverged"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().starts_with("audits")), "{a:#}");
        assert_eq!(a["build"], false);
        let v = p.apply("dev");
        assert_eq!(v["built"], serde_json::json!([]));
        assert_eq!(p.physical_tables(), tables);
        assert_eq!(p.plan("dev")["hasChanges"], false);
    }
}

/// `dev` serves the table of `prod`'s time-range version with an audit more (an added audit only
/// refuses more, so the version is shared): `prod`'s runs write it under `prod`'s audits. The
/// rows they write are not served silently unaudited: `status dev` says so (unhealthy), and
/// `run dev` runs `dev`'s audits over the table before it refreshes anything, failing on the
/// violation (a `dev`-only `full` child is not rebuilt from the refused rows); once the data is
/// clean its pass is recorded and `dev` is healthy again.
fn rows_prod_writes_into_a_table_dev_serves_with_an_audit_more_are_audited_by_devs_run(engine: EngineBackend) {
    let clean = EVENTS.replace(",,30", ",east,30");
    let p = daily_project(engine, &clean, "");
    let without = p.read("models/daily.lua");
    let with = without.replace("audits = {  },", "audits = { audit.not_null(\"region\") },");
    assert_ne!(with, without);
    p.apply("prod");
    p.write("models/daily.lua", &with);
    // A child only `dev` has, counting the rows without a region.
    const CHILD: &str = r#"define_model {
  name = "s.unplaced", kind = kind.full(), schema = { { "n", "bigint" } },
  query = "SELECT count(*) FILTER (WHERE region IS NULL) AS n FROM " .. ref("s.daily"),
}
"#;
    p.write("models/child.lua", CHILD);
    let v = p.apply("dev");
    assert_eq!(v["built"], serde_json::json!(["s.unplaced"]), "the version of s.daily is shared: {v:#}");
    let unplaced = |p: &Project| p.rows(&env_view("dev", "s.unplaced"));
    assert_eq!(unplaced(&p), vec![vec![Some("0".to_string())]]);
    assert_eq!(p.run(&["status", "dev", "--json"]).expect_code(0).json()["unaudited"], serde_json::json!([]));

    // `prod` recomputes a day whose source now lacks its region, under its own (no) audits.
    load_events(&p, &clean.replace("2026-01-04 10:00:00,south,40", "2026-01-04 10:00:00,,40"));
    p.write("models/daily.lua", &without);
    p.remove("models/child.lua");
    p.run(&["restate", "prod", "--model", "s.daily", "--from", "2026-01-04", "--to", "2026-01-05"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    p.write("models/daily.lua", &with);
    p.write("models/child.lua", CHILD);

    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["unaudited"], serde_json::json!([{"model": "s.daily", "writtenBy": ["prod"]}]), "{status:#}");
    assert_eq!(status["healthy"], false, "{status:#}");
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("not_null") && run.stderr.contains("shared with `prod`"), "{}", run.stderr);
    assert_eq!(unplaced(&p), vec![vec![Some("0".to_string())]], "the child was not rebuilt from the refused rows");
    // Nor does an apply build a new child from them (it promoted it, computed from the refused
    // rows, exit 0): the same audits first, the same refusal, nothing promoted.
    p.write("models/child2.lua", &CHILD.replace("s.unplaced", "s.unplaced2"));
    let applied = p.run(&["apply", "dev", "--yes"]);
    applied.expect_code(1);
    assert!(applied.stderr.contains("not_null") && applied.stderr.contains("shared with `prod`"), "{}", applied.stderr);
    assert!(!p.state().env_pointers("dev").expect("pointers").contains_key("s.unplaced2"), "nothing promoted");
    p.remove("models/child2.lua");

    // Clean again: `prod` recomputes the day, `dev`'s run audits the table and records the pass.
    load_events(&p, &clean);
    p.write("models/daily.lua", &without);
    p.remove("models/child.lua");
    p.run(&["restate", "prod", "--model", "s.daily", "--from", "2026-01-04", "--to", "2026-01-05"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    p.write("models/daily.lua", &with);
    p.write("models/child.lua", CHILD);
    assert_eq!(p.run(&["status", "dev", "--json"]).expect_code(0).json()["unaudited"].as_array().map(Vec::len), Some(1));
    p.run(&["run", "dev"]).expect_code(0);
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["unaudited"], serde_json::json!([]), "{status:#}");
    assert_eq!(status["healthy"], true, "{status:#}");
    // `prod`, whose audits `dev` all has, is never told of `dev`'s.
    assert_eq!(p.run(&["status", "prod", "--json"]).expect_code(0).json()["unaudited"], serde_json::json!([]));
}

/// The reverse: `dev` serves `prod`'s version with an audit less (so `prod` writes the table).
/// `prod`'s runs are its own, under its own audits: `status prod` lists nothing unaudited and
/// `run prod` runs no audit over the whole table because of `dev`.
fn prod_is_never_told_of_the_audits_another_environment_lacks(engine: EngineBackend) {
    let clean = EVENTS.replace(",,30", ",east,30");
    let p = daily_project(engine, &clean, "audit.not_null(\"region\")");
    let with = p.read("models/daily.lua");
    let without = with.replace("audits = { audit.not_null(\"region\") },", "audits = {  },");
    assert_ne!(with, without);
    p.apply("prod");
    p.write("models/daily.lua", &without);
    p.apply("dev");
    p.write("models/daily.lua", &with);
    p.run(&["restate", "prod", "--model", "s.daily", "--from", "2026-01-04", "--to", "2026-01-05"]).expect_code(0);
    let run = p.run(&["run", "prod"]);
    run.expect_code(0);
    assert!(!run.stderr.contains("its audits run over the whole table"), "{}", run.stderr);
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    assert_eq!((status["unaudited"].clone(), status["healthy"].clone()), (serde_json::json!([]), serde_json::json!(true)), "{status:#}");
}

/// `dev` adds a `warn` audit to `prod`'s version: once `dev`'s run has run it over the rows
/// `prod` wrote, those rows are checked — the warning is the audit's whole report — so `status
/// dev` is healthy; the audit is not reused as a pass: the next run runs it, and warns, again.
fn a_warn_audit_that_found_rows_on_a_shared_table_has_checked_it(engine: EngineBackend) {
    let clean = EVENTS.replace(",,30", ",east,30");
    let p = daily_project(engine, &clean, "");
    let without = p.read("models/daily.lua");
    let warn = without.replace("audits = {  },", "audits = { audit.not_null { \"region\", blocking = false } },");
    assert_ne!(warn, without);
    p.apply("prod");
    p.write("models/daily.lua", &warn);
    p.apply("dev");
    // `prod` recomputes a day whose source now lacks its region, under its own (no) audits.
    load_events(&p, &clean.replace("2026-01-04 10:00:00,south,40", "2026-01-04 10:00:00,,40"));
    p.write("models/daily.lua", &without);
    p.run(&["restate", "prod", "--model", "s.daily", "--from", "2026-01-04", "--to", "2026-01-05"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
    p.write("models/daily.lua", &warn);
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["unaudited"], serde_json::json!([{"model": "s.daily", "writtenBy": ["prod"]}]), "{status:#}");

    let warned = |run: &Run| run.stderr.lines().filter(|l| l.contains("level=warn") && l.contains("not_null(region)")).count();
    let run = p.run(&["run", "dev"]);
    run.expect_code(0);
    assert_eq!(warned(&run), 1, "{}", run.stderr);
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!((status["unaudited"].clone(), status["healthy"].clone()), (serde_json::json!([]), serde_json::json!(true)), "{status:#}");
    let again = p.run(&["run", "dev"]);
    again.expect_code(0);
    assert_eq!(warned(&again), 1, "the warn audit is not reused as a pass: {}", again.stderr);
}

/// `status dev --json` says every table `dev` shares with `prod` was checked by `dev`'s audits.
#[track_caller]
fn checked_by_devs_audits(p: &Project, when: &str) {
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!((status["unaudited"].clone(), status["healthy"].clone()), (serde_json::json!([]), serde_json::json!(true)), "{when}: {status:#}");
}

/// `dev` adds a `warn` audit to `prod`'s `full` version (one table, `prod` writes it under no
/// audit). `dev`'s own apply and run rebuild it (its parent gets new intervals) and the audit,
/// inside each build, finds its row: those builds checked what they wrote, so `status dev` stays
/// healthy (only a clean build was recorded: `dev` stayed `unaudited` for good, every run's
/// warning notwithstanding). The check is never reused as a pass: another promotion of the same
/// data runs the audit, and warns, again.
fn a_warn_audit_on_a_shared_full_table_has_checked_what_devs_own_builds_wrote(engine: EngineBackend) {
    let clean = EVENTS.replace(",,30", ",east,30");
    let mut p = daily_project(engine, &clean, "");
    let total = |audits: &str| {
        format!(
            r#"define_model {{
  name = "a.total", kind = kind.full(), schema = {{ {{ "total", "bigint" }} }},
  audits = {{ {audits} }},
  query = "SELECT CAST(sum(amount) AS BIGINT) AS total FROM " .. ref("s.daily"),
}}
"#
        )
    };
    p.write("models/total.lua", &total(""));
    p.apply("prod");
    // 105 in all, and more each day: the audit always finds its one row.
    p.write("models/total.lua", &total("audit.expression { \"total < 100\", blocking = false }"));
    let warned = |run: &Run| run.stderr.lines().filter(|l| l.contains("level=warn") && l.contains("expression(total < 100)")).count();
    load_events(&p, &format!("{clean}2026-01-06 10:00:00,north,1\n"));
    p.now = "2026-01-07T00:00:00Z".into();
    let applied = p.run(&["apply", "dev", "--yes", "--json"]);
    applied.expect_code(0);
    let v = applied.json();
    assert!(v["built"].as_array().is_some_and(|b| b.iter().any(|m| m == "a.total")), "`dev`'s apply rebuilds the shared table: {v:#}");
    assert_eq!(violations(&v, "a.total", "expression(total < 100)"), 1, "{v:#}");
    checked_by_devs_audits(&p, "after dev's apply");

    load_events(&p, &format!("{clean}2026-01-06 10:00:00,north,1\n2026-01-07 10:00:00,north,1\n"));
    p.now = "2026-01-08T00:00:00Z".into();
    let run = p.run(&["run", "dev"]);
    run.expect_code(0);
    assert!(warned(&run) >= 1, "{}", run.stderr);
    checked_by_devs_audits(&p, "after dev's run");

    // The same data promoted again (a new environment: a view swap) runs the audit again.
    let staging = p.run(&["apply", "staging", "--yes", "--json"]);
    staging.expect_code(0);
    assert!(warned(&staging) >= 1, "a check is not reused as a pass: {}", staging.stderr);
    let v = staging.json();
    assert_eq!(v["built"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["auditsReused"], serde_json::json!([]), "{v:#}");
}

/// `dev` adds a `warn` audit to `prod`'s time-range version; `prod` computed the 3rd, which lacks
/// its region, under no audit. `dev`'s apply computes the 4th and its promotion audits the whole
/// table (it warns of the 3rd); each `run dev` audits the table again (it warns) and computes a
/// new day over it: that batch was checked, on a table checked before it, so `status dev` stays
/// healthy (it went `unaudited` after every run that computed a day).
fn a_warn_audit_on_a_shared_time_range_table_has_checked_the_batches_devs_runs_add(engine: EngineBackend) {
    let mut p = daily_project(engine, EVENTS, "");
    let without = p.read("models/daily.lua");
    let warn = without.replace("audits = {  },", "audits = { audit.not_null { \"region\", blocking = false } },");
    assert_ne!(warn, without);
    p.now = "2026-01-04T00:00:00Z".into();
    p.apply("prod");
    p.write("models/daily.lua", &warn);
    p.now = "2026-01-05T00:00:00Z".into();
    p.apply("dev");
    checked_by_devs_audits(&p, "after dev's apply");
    let warned = |run: &Run| run.stderr.lines().filter(|l| l.contains("level=warn") && l.contains("not_null(region)")).count();
    for (now, day) in [("2026-01-06T00:00:00Z", "2026-01-05T00:00:00.000Z"), ("2026-01-07T00:00:00Z", "2026-01-06T00:00:00.000Z")] {
        p.now = now.into();
        let run = p.run(&["run", "dev"]);
        run.expect_code(0);
        assert!(warned(&run) >= 1, "{now}: the audit runs, and warns, at every run: {}", run.stderr);
        assert!(ledger(&p, "s.daily").contains(&(day.to_string(), "done".to_string())), "{now}: dev's run computed {day}: {:?}", ledger(&p, "s.daily"));
        checked_by_devs_audits(&p, &format!("after dev's run at {now}"));
    }
}

/// `a.total`, a `full` model summing `s.daily`'s amounts, under `audits`.
fn total_model(audits: &str) -> String {
    format!(
        r#"define_model {{
  name = "a.total", kind = kind.full(), schema = {{ {{ "total", "bigint" }} }},
  audits = {{ {audits} }},
  query = "SELECT CAST(sum(amount) AS BIGINT) AS total FROM " .. ref("s.daily"),
}}
"#
    )
}

/// The note `plan --json` gives `model` in `alsoWrites` (empty when none).
fn also_writes(plan: &Value, model: &str) -> String {
    let also = plan["alsoWrites"].as_array().and_then(|a| a.iter().find(|w| w["model"] == model).cloned());
    also.and_then(|w| w["note"].as_str().map(str::to_string)).unwrap_or_default()
}

/// `dev` serves `prod`'s `full` version without `prod`'s blocking audit (a metadata edit: the same
/// version, the one table), and computes a new day into the `s.daily` table both serve. A rebuild
/// replaces the whole table `prod` serves, so `dev` never rebuilds it: rebuilt from the new day
/// without `prod`'s audit, `prod` would serve a total its audit refuses (it did: 105, with
/// `status prod --check` healthy and `plan prod` finding nothing to do). `dev`'s plan, apply, run
/// and status say it is left to `prod`; `prod`'s run rebuilds it under `prod`'s audit (refused:
/// what `prod` served stays); once `prod`'s audit lets the total through, `prod`'s apply rebuilds
/// it and both serve that build.
fn a_full_table_prod_serves_under_an_audit_dev_lacks_is_rebuilt_by_prod_only(engine: EngineBackend) {
    let clean = EVENTS.replace(",,30", ",east,30");
    let mut p = daily_project(engine, &clean, "");
    let prods = total_model("audit.expression { \"total < 100\" }");
    let devs = total_model("");
    let total = |p: &Project, env: &str| p.rows(&env_view(env, "a.total"));
    let of = |n: &str| vec![vec![Some(n.to_string())]];
    // 65 up to the 3rd; 105 with the 4th, which `prod`'s audit refuses.
    p.write("models/total.lua", &prods);
    p.now = "2026-01-04T00:00:00Z".into();
    p.apply("prod");
    assert_eq!(total(&p, "prod"), of("65"));

    p.write("models/total.lua", &devs);
    p.now = "2026-01-05T00:00:00Z".into();
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "s.daily")["intervals"], 1, "dev computes the 4th into the table prod serves: {plan:#}");
    assert!(
        also_writes(&plan, "a.total")
            .starts_with("not rebuilt here (downstream of new intervals of s.daily): its table is also what `prod` serves, under audits `dev` lacks"),
        "{plan:#}"
    );
    assert_ne!(action(&plan, "a.total")["rebuild"], true, "{plan:#}");
    let applied = p.run(&["apply", "dev", "--yes", "--json"]);
    applied.expect_code(0);
    let v = applied.json();
    assert!(!v["built"].as_array().is_some_and(|b| b.iter().any(|m| m == "a.total")), "{v:#}");
    assert!(applied.stderr.contains("not rebuilt here") && applied.stderr.contains("a.total"), "the apply warns: {}", applied.stderr);
    assert_eq!(total(&p, "prod"), of("65"), "prod serves its audited build, never dev's unaudited rebuild");
    assert_eq!(total(&p, "dev"), of("65"), "dev serves prod's last build");

    // Nothing to do in `dev`, and said so: its plan, run and status leave the table to `prod`.
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(also_writes(&plan, "a.total").starts_with("not rebuilt here (the data of s.daily changed since it was built)"), "{plan:#}");
    let ran = p.run(&["run", "dev"]);
    ran.expect_code(0);
    assert!(ran.stderr.contains("not rebuilt here"), "{}", ran.stderr);
    assert_eq!(total(&p, "prod"), of("65"), "nor does dev's run rebuild it");
    let status = p.run(&["status", "dev", "--check", "--json"]).expect_code(0).json();
    let listed = status["notRefreshedHere"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 1, "{status:#}");
    assert_eq!(
        (listed[0]["model"].as_str(), listed[0]["kind"].as_str(), listed[0]["leftTo"].as_str(), listed[0]["otherSettings"].as_bool()),
        (Some("a.total"), Some("full"), Some("prod"), Some(true)),
        "{status:#}"
    );
    assert_eq!(listed[0]["behind"].as_str(), Some("the data of s.daily changed since it was built"), "{status:#}");
    assert_eq!(status["staleRebuilds"], serde_json::json!([]), "dev's next run does not rebuild it: {status:#}");
    assert_eq!(status["healthy"], true, "{status:#}");
    let text = p.run(&["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("a.total  not rebuilt here") && text.contains("`dev` serves `prod`'s last build of it"), "{text}");

    // `prod`'s project: `prod`'s next run rebuilds it, under `prod`'s audit, which refuses 105.
    p.write("models/total.lua", &prods);
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let stale: Vec<&str> = status["staleRebuilds"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(stale, vec!["a.total"], "{status:#}");
    assert_eq!(status["notRefreshedHere"], serde_json::json!([]), "{status:#}");
    assert_eq!(action(&p.plan("prod"), "a.total")["rebuild"], true);
    let run = p.run(&["run", "prod"]);
    run.expect_code(1);
    assert!(run.stderr.contains("expression(total < 100)"), "{}", run.stderr);
    assert_eq!(total(&p, "prod"), of("65"), "prod's audit refused the rebuild: what prod served stays");
    p.run(&["audit", "prod"]).expect_code(0);

    // `prod`'s audit lets the total through: its apply rebuilds the table under it, and `dev`
    // serves that build (still left to `prod`: `dev` lacks that audit too), current now.
    p.write("models/total.lua", &total_model("audit.expression { \"total < 1000\" }"));
    p.apply("prod");
    assert_eq!((total(&p, "prod"), total(&p, "dev")), (of("105"), of("105")));
    p.write("models/total.lua", &devs);
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let listed = status["notRefreshedHere"].as_array().cloned().unwrap_or_default();
    assert_eq!((listed.len(), listed.first().map(|l| l["behind"].clone())), (1, Some(Value::Null)), "{status:#}");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A lost table of that `full` version (dropped by hand) is not rebuilt by `dev`, which lacks
/// `prod`'s audit: `dev`'s plan says its apply refuses, the apply exits 1 naming the model and
/// `efmesh apply prod`, and its run is blocked; `prod`'s apply rebuilds it under its audit, which
/// `dev` then serves. (DuckDB only: Postgres refuses to drop a table its views read.)
#[test]
fn a_lost_full_table_prod_serves_under_an_audit_dev_lacks_is_rebuilt_by_prod_only() {
    let clean = EVENTS.replace(",,30", ",east,30");
    let mut p = daily_project(EngineBackend::DuckDb, &clean, "");
    let prods = total_model("audit.expression { \"total < 100\" }");
    p.write("models/total.lua", &prods);
    p.now = "2026-01-04T00:00:00Z".into();
    p.apply("prod");
    p.write("models/total.lua", &total_model(""));
    p.apply("dev");
    p.execute_on_engine(&format!("DROP TABLE {}", physical_of(&p, "a.total")));
    let plan = p.plan("dev");
    assert!(plan["applyRefuses"].as_str().is_some_and(|r| r.contains("is lost, and `prod` serves it too")), "{plan:#}");
    let refused = p.run(&["apply", "dev", "--yes"]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("model `a.total`")
            && refused.stderr.contains("is lost, and `prod` serves it too")
            && refused.stderr.contains("efmesh apply prod"),
        "{}",
        refused.stderr
    );
    assert!(!p.physical_tables().iter().any(|t| t.starts_with("a__total__")), "dev rebuilt nothing");
    let blocked = p.run(&["run", "dev"]);
    blocked.expect_code(2);
    assert!(blocked.stderr.contains("`efmesh apply prod` repairs it"), "{}", blocked.stderr);
    p.write("models/total.lua", &prods);
    p.apply("prod");
    p.write("models/total.lua", &total_model(""));
    assert_eq!(p.plan("dev")["hasChanges"], false);
    assert_eq!(p.rows(&env_view("dev", "a.total")), vec![vec![Some("65".to_string())]]);
}

// ---- efmesh audit <env> ------------------------------------------------------------------

fn efmesh_audit_catches_a_corrupted_physical_table(engine: EngineBackend) {
    let p = daily_project(
        engine,
        EVENTS.replace(",,30", ",east,30").as_str(),
        "audit.not_null(\"region\"), audit.accepted_values { column = \"region\", values = { \"north\", \"south\", \"east\" }, blocking = false }",
    );
    p.apply("prod");
    let clean = p.run(&["audit", "prod", "--json"]).expect_code(0).json();
    assert_eq!(clean["blockingViolations"], 0);
    assert_eq!(violations(&clean, "s.daily", "not_null(region)"), 0);
    let human = p.run(&["audit", "prod"]).expect_code(0).stdout.clone();
    assert!(human.contains("✓ s.daily  not_null(region)"), "{human}");

    // Someone writes a NULL and an unknown region into the physical table by hand.
    p.execute_on_engine(&format!("INSERT INTO {} VALUES (TIMESTAMP '2026-01-04', NULL, 1), (TIMESTAMP '2026-01-04', 'west', 2)", physical_of(&p, "s.daily")));
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["env"], "prod");
    assert_eq!(v["blockingViolations"], 1);
    assert_eq!(v["warnViolations"], 1, "NULL is not an accepted_values violation: {v:#}");
    let r = result(&v, "s.daily", "not_null(region)");
    assert_eq!((r["blocking"].as_bool(), r["violations"].as_u64(), r["scope"].as_str()), (Some(true), Some(1), Some("interval")));
    assert_eq!(r["sample"][0], serde_json::json!({"day": sample_ts(&p, "2026-01-04 00:00:00"), "region": null, "amount": 1}));
    assert!(run.stderr.contains("environment `prod`: 1 blocking audit violation"), "{}", run.stderr);
    let human = p.run(&["audit", "prod"]).expect_code(1).stdout.clone();
    assert!(human.contains("✗ s.daily  not_null(region)  1 violating row"), "{human}");
    assert!(human.contains("⚠ s.daily  accepted_values(region, north, south, east)  1 violating row (warn)"), "{human}");
    // dev was never applied; an unknown --model is an error with a suggestion.
    let dev = p.run(&["audit", "dev"]);
    assert!(dev.expect_code(1).stderr.contains("environment `dev` does not exist"), "{}", dev.stderr);
    assert!(dev.stderr.contains("hint: run `efmesh apply dev` first"), "{}", dev.stderr);
    // A typo of an environment's name is told the one meant.
    let typo = p.run(&["audit", "prd"]);
    assert!(typo.expect_code(1).stderr.contains("environment `prd` does not exist"), "{}", typo.stderr);
    assert!(typo.stderr.contains("did you mean `prod`?"), "{}", typo.stderr);
    assert!(p.run(&["audit", "prod", "--model", "s.dialy"]).expect_code(1).stderr.contains("did you mean `s.daily`?"));
    // `--model` restricts: the external has no audits, so nothing runs for it.
    let only = p.run(&["audit", "prod", "--model", "raw.events", "--json"]).expect_code(0).json();
    assert_eq!(only["results"], serde_json::json!([]));
}

// ---- the flights example -----------------------------------------------------------------

#[test]
fn the_flights_example_audits_pass_and_its_warn_audits_fire_on_real_data() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/flights");
    let config = efmesh::config::Config::load(&root.join("efmesh.toml")).unwrap();
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let state = efmesh::state::SqliteStore::open_in_memory().unwrap();
    let mut engine = DuckDb::in_memory().unwrap();
    let now = efmesh::core::interval::parse_instant("2026-11-30T00:00:00Z").unwrap();
    let plan = efmesh::plan::plan(&project, &state, "dev", now).unwrap();
    let report = efmesh::apply::apply(&project, &plan, &state, &mut engine, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let v = serde_json::json!({ "audits": report.audits });
    // Reference numbers straight from the data files.
    let data = root.join("data");
    let early = query_in_memory(&format!("SELECT count(*)::VARCHAR FROM read_parquet('{}') WHERE dep_delay < 0", data.join("flights.parquet").display()));
    let unknown = query_in_memory(&format!(
        "SELECT count(*)::VARCHAR FROM read_parquet('{}') WHERE tailnum IS NOT NULL AND tailnum NOT IN (SELECT tailnum FROM read_csv('{}', nullstr = 'NA'))",
        data.join("flights.parquet").display(),
        data.join("planes.csv").display()
    ));
    assert_eq!(violations(&v, "core.flights", "accepted_range(dep_delay, min = 0)").to_string(), early[0][0].clone().unwrap());
    assert_eq!(violations(&v, "mart.flights_enriched", "expression(has_plane OR tailnum IS NULL)").to_string(), unknown[0][0].clone().unwrap());
    assert_eq!(early[0][0].as_deref(), Some("183575"));
    assert_eq!(unknown[0][0].as_deref(), Some("50094"));
    for (m, a) in [
        ("raw.weather", "not_null(origin, time_hour)"),
        ("core.flights", "not_null(carrier, flight, origin, dest, time_hour)"),
        ("core.flights", "accepted_values(origin, EWR, JFK, LGA)"),
        ("core.flights", "no_gaps(time_hour, grain = day)"),
        ("mart.flights_enriched", "unique(carrier, flight, time_hour)"),
    ] {
        assert_eq!(violations(&v, m, a), 0, "{a} on {m}");
        assert_eq!(result(&v, m, a)["blocking"], true);
    }
    // One interval pass per batch of 30 days (366 days → 13 batches), one whole pass.
    assert_eq!(result(&v, "core.flights", "not_null(carrier, flight, origin, dest, time_hour)")["runs"], 13);
    assert_eq!(result(&v, "core.flights", "no_gaps(time_hour, grain = day)")["runs"], 1);
}

// ---- audits reading another model (relationships, `ref` in a body) ---------------------

/// `s.customers` (ids of `ids`) and `s.orders` (customer ids of `orders`, NULL included), whose
/// audits read `s.customers`: the built-in `relationships` in Lua (one key column and two), and
/// a custom Rhai audit calling `ref()` in its body.
fn shop(engine: EngineBackend, ids: &str, orders: &str) -> Project {
    let p = project(engine);
    p.write(
        "audits/known.rhai",
        r#"define_audit(#{
  name: "known_customer",
  params: ["column", "customers"],
  query: |rel, args| `SELECT * FROM ${rel} WHERE ${args.column} IS NOT NULL AND ${args.column} NOT IN (SELECT id FROM ${ref(args.customers)})`,
});
"#,
    );
    p.write("models/customers.lua", &customers(ids));
    p.write(
        "models/orders.lua",
        &format!(
            r#"define_model {{
  name = "s.orders",
  kind = kind.full(),
  schema = {{ {{ "order_id", "integer" }}, {{ "customer_id", "integer" }}, {{ "region", "varchar" }} }},
  audits = {{
    audit.relationships {{ column = "customer_id", to = "s.customers", field = "id" }},
    audit.relationships {{ column = {{ "customer_id", "region" }}, to = "s.customers", field = {{ "id", "region" }}, blocking = false }},
  }},
  query = "SELECT CAST(o AS INTEGER) AS order_id, CAST(c AS INTEGER) AS customer_id, 'north' AS region FROM (VALUES {orders}) AS v(o, c)",
}}
"#
        ),
    );
    p.write(
        "models/orders_r.rhai",
        r#"define_model(#{
  name: "s.orders_r",
  kind: kind::view(),
  schema: [["order_id", "integer"], ["customer_id", "integer"]],
  audits: [audit("relationships", "customer_id", "s.customers", "id"), audit("known_customer", "customer_id", "s.customers")],
  query: "SELECT order_id, customer_id FROM " + ref("s.orders"),
});
"#,
    );
    p
}

fn customers(ids: &str) -> String {
    format!(
        r#"define_model {{
  name = "s.customers",
  kind = kind.full(),
  schema = {{ {{ "id", "integer" }}, {{ "region", "varchar" }} }},
  query = "SELECT CAST(i AS INTEGER) AS id, 'north' AS region FROM (VALUES {ids}) AS v(i)",
}}
"#
    )
}

const REL: &str = "relationships(customer_id, s.customers, field = id)";

fn relationships_catches_an_orphan_key_and_passes_clean_data(engine: EngineBackend) {
    let p = shop(engine.clone(), "(1), (2)", "(10, 1), (11, 2), (12, NULL)");
    let v = p.apply("dev");
    assert_eq!(violations(&v, "s.orders", REL), 0);
    assert_eq!(violations(&v, "s.orders", "relationships(customer_id, region, s.customers, field = id, region)"), 0);
    assert_eq!(violations(&v, "s.orders_r", REL), 0);
    assert_eq!(violations(&v, "s.orders_r", "known_customer(customer_id, s.customers)"), 0);
    // The Lua and Rhai built-ins render the same SQL.
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let audits = |n: &str| project.dag.get(&efmesh::core::ModelName::parse(n).unwrap()).unwrap().audits.clone();
    assert_eq!(audits("s.orders")[0].metadata(), audits("s.orders_r")[0].metadata());
    // The referenced model is a dependency of the auditing one, not a parent (no rebuild when it changes).
    let orders = project.dag.get(&efmesh::core::ModelName::parse("s.orders").unwrap()).unwrap();
    assert!(orders.parents().is_empty());
    assert_eq!(orders.audit_refs().iter().map(|m| m.to_string()).collect::<Vec<_>>(), ["s.customers"]);

    // An order of customer 3, who does not exist: the apply fails naming the model, the audit
    // and the orphan row, and nothing is promoted.
    let q = shop(engine.another(), "(1), (2)", "(10, 1), (11, 3), (12, NULL)");
    let run = q.run(&["apply", "dev", "--yes", "--json"]);
    run.expect_code(1);
    let e = &run.stderr;
    assert!(e.contains(&format!("audit `{REL}` on model `s.orders`: 1 violating row")), "{e}");
    assert!(e.contains(r#"{"order_id":11,"customer_id":3,"region":"north"}"#), "{e}");
    assert!(!q.relations().iter().any(|r| r.starts_with("dev__")), "{:?}", q.relations());
    // Warn-only composite key: on clean keys it is silent; the Rhai audits fire on the view too.
    let q2 = shop(engine.another(), "(1), (2)", "(10, 1), (11, 3)");
    q2.write("models/orders.lua", &q2.read("models/orders.lua").replace("field = \"id\" },", "field = \"id\", blocking = false },"));
    q2.write(
        "models/orders_r.rhai",
        &q2.read("models/orders_r.rhai").replace(
            r#"audit("relationships", "customer_id", "s.customers", "id"), audit("known_customer", "customer_id", "s.customers")"#,
            r#"audit("relationships", #{ column: "customer_id", to: "s.customers", field: "id", blocking: false }), audit("known_customer", #{ column: "customer_id", customers: "s.customers", blocking: false })"#,
        ),
    );
    let v = q2.apply("dev");
    assert_eq!(violations(&v, "s.orders", REL), 1);
    assert_eq!(violations(&v, "s.orders", "relationships(customer_id, region, s.customers, field = id, region)"), 1);
    assert_eq!(result(&v, "s.orders_r", REL)["sample"][0], serde_json::json!({"order_id": 11, "customer_id": 3}));
    assert_eq!(violations(&v, "s.orders_r", "known_customer(customer_id, s.customers)"), 1);
}

fn an_audit_runs_after_the_model_it_references_even_without_a_data_edge(engine: EngineBackend) {
    // `a.orders` sorts before `z.customers` and does not read it: only the audit's reference
    // orders them. Were the audit run first, the customers' table would not exist yet.
    for jobs in ["1", "4"] {
        let p = project(engine.another());
        p.write("models/customers.lua", &customers("(1), (2)").replace("s.customers", "z.customers"));
        p.write(
            "models/orders.lua",
            r#"define_model {
  name = "a.orders", kind = kind.full(), schema = { { "customer_id", "integer" } },
  audits = { audit.relationships("customer_id", "z.customers", "id") },
  query = "SELECT CAST(1 AS INTEGER) AS customer_id",
}
"#,
        );
        let plan = p.plan("dev");
        let order: Vec<&str> = actions(&plan).iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(order, ["z.customers", "a.orders"], "{plan:#}");
        let run = p.run(&["apply", "dev", "--yes", "--json", "--jobs", jobs]);
        run.expect_code(0);
        let v = run.json();
        assert_eq!(v["built"], serde_json::json!(["z.customers", "a.orders"]));
        assert_eq!(violations(&v, "a.orders", "relationships(customer_id, z.customers, field = id)"), 0);
    }
    // A cycle through an audit is a load error.
    let p = project(engine.another());
    p.write(
        "models/customers.lua",
        &customers("(1)").replace("query =", "audits = { audit.relationships(\"id\", \"s.orders\", \"customer_id\") },\n  query ="),
    );
    p.write(
        "models/orders.lua",
        "define_model { name = \"s.orders\", kind = kind.full(), schema = { { \"customer_id\", \"integer\" } }, query = \"SELECT id AS customer_id FROM \" .. ref(\"s.customers\") }\n",
    );
    let e = p.run(&["check"]).expect_code(1).stdout.clone();
    assert!(e.contains("models/customers.lua:1: model `s.customers`: dependency cycle: `s.customers` → `s.orders` → `s.customers`"), "{e}");
}

fn a_change_of_the_referenced_model_re_runs_the_audit_before_any_view_moves(engine: EngineBackend) {
    // prod: customers 1, 2, 3; an order of customer 3. The audit passes.
    let p = shop(engine, "(1), (2), (3)", "(10, 1), (11, 3)");
    p.apply("prod");
    let served = p.rows(&env_view("prod", "s.customers"));
    let pointers = p.state_summary().pointers;
    // Customer 3 goes away. `s.orders` is unchanged (same version, nothing to build), but the
    // data its audit checks against changes: the audit runs again, against the new version of
    // `s.customers`, and stops the apply before any view moves.
    p.write("models/customers.lua", &customers("(1), (2)"));
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "s.orders")["change"], "unchanged", "{plan:#}");
    let run = p.run(&["apply", "prod", "--yes", "--json"]);
    run.expect_code(1);
    assert!(run.stderr.contains(&format!("audit `{REL}` on model `s.orders`: 1 violating row")), "{}", run.stderr);
    assert!(run.stderr.contains(r#""customer_id":3"#), "{}", run.stderr);
    assert_eq!(p.rows(&env_view("prod", "s.customers")), served, "prod's customers moved");
    assert_eq!(p.state_summary().pointers, pointers, "prod's pointers moved");
    // The same version promoted elsewhere (a fresh `dev` pointing at the versions just built)
    // is not served on the strength of the pass prod recorded against the old customers.
    let dev = p.run(&["apply", "dev", "--yes"]);
    dev.expect_code(1);
    assert!(dev.stderr.contains(&format!("audit `{REL}` on model `s.orders`")), "{}", dev.stderr);
    assert!(!p.state_summary().pointers.contains_key("dev"));
    // With the order fixed, the apply passes and reports the audit it ran.
    p.write("models/orders.lua", &p.read("models/orders.lua").replace("(11, 3)", "(11, 2)"));
    let v = p.apply("prod");
    assert_eq!(violations(&v, "s.orders", REL), 0);
    assert_eq!(p.rows(&env_view("prod", "s.customers")).len(), 2);
}

fn a_run_refreshing_the_referenced_model_re_runs_the_audits_reading_it(engine: EngineBackend) {
    // `s.customers` (full, on a daily cron) copies a source table efmesh does not track;
    // `s.orders` (full) does not read it, but its `relationships` audit does.
    let mut p = project(engine);
    p.execute_on_engine("CREATE SCHEMA src; CREATE TABLE src.cust (id INTEGER); INSERT INTO src.cust VALUES (1), (2), (3)");
    p.write(
        "models/shop.lua",
        r#"define_model { name = "src.cust", kind = kind.external { table = "src.cust" }, schema = { { "id", "integer" } } }
define_model {
  name = "s.customers", kind = kind.full(), cron = "@daily", schema = { { "id", "integer" } },
  query = "SELECT id FROM " .. ref("src.cust"),
}
define_model {
  name = "s.orders", kind = kind.full(), schema = { { "order_id", "integer" }, { "customer_id", "integer" } },
  audits = { audit.relationships { column = "customer_id", to = "s.customers", field = "id" } },
  query = "SELECT CAST(10 AS INTEGER) AS order_id, CAST(3 AS INTEGER) AS customer_id",
}
"#,
    );
    p.now = "2026-05-01T10:00:00Z".into();
    p.apply("prod");
    // Customer 3 leaves the source; at the next tick the run rebuilds `s.customers`: the audit
    // of the unchanged `s.orders` runs again against it and fails the run, naming the audit,
    // the orphan and the model the run refreshed.
    p.execute_on_engine("DELETE FROM src.cust WHERE id = 3");
    p.now = "2026-05-02T00:10:00Z".into();
    let run = p.run(&["run", "prod", "--json"]);
    run.expect_code(1);
    let e = &run.stderr;
    assert!(e.contains(&format!("audit `{REL}` on model `s.orders`: 1 violating row")), "{e}");
    assert!(e.contains(r#""customer_id":3"#), "{e}");
    assert!(e.contains("these audits read `s.customers`, which this run refreshed"), "{e}");
    assert!(!e.contains("nothing was promoted"), "a run never promotes: {e}");
    assert_eq!(run.json()["error"]["kind"], "audit", "{}", run.stdout);
    // The refresh itself passed its own audits: it is committed (the environment serves it).
    assert_eq!(p.rows(&env_view("prod", "s.customers")).len(), 2);
    // Without a breach the run is clean and reports the audit it ran again.
    p.execute_on_engine("INSERT INTO src.cust VALUES (3)");
    p.now = "2026-05-03T00:10:00Z".into();
    let clean = p.run(&["run", "prod"]);
    clean.expect_code(0);
    assert!(clean.stderr.contains("audits run again: `s.customers` changed in this run"), "{}", clean.stderr);
    let v = p.run(&["audit", "prod", "--json"]).expect_code(0).json();
    assert_eq!(violations(&v, "s.orders", REL), 0);
}

/// `efmesh run` never promotes: a blocking audit failing in its rebuild of a model is reported
/// without claiming that nothing was promoted; an apply's failure says it.
#[test]
fn a_blocking_audit_failing_in_a_run_does_not_say_nothing_was_promoted() {
    let mut p = project(EngineBackend::DuckDb);
    p.execute_on_engine("CREATE SCHEMA src; CREATE TABLE src.cust (id INTEGER); INSERT INTO src.cust VALUES (1), (2)");
    let models = |query: &str| {
        format!(
            r#"define_model {{ name = "src.cust", kind = kind.external {{ table = "src.cust" }}, schema = {{ {{ "id", "integer" }} }} }}
define_model {{
  name = "s.customers", kind = kind.full(), cron = "@daily", schema = {{ {{ "id", "integer" }} }},
  audits = {{ audit.not_null("id") }},
  query = "{query} FROM " .. ref("src.cust"),
}}
define_model {{
  name = "s.others", kind = kind.full(), cron = "@daily", schema = {{ {{ "id", "integer" }} }},
  audits = {{ audit.not_null("id") }},
  query = "SELECT id FROM " .. ref("src.cust"),
}}
"#
        )
    };
    p.write("models/c.lua", &models("SELECT id"));
    p.now = "2026-05-01T10:00:00Z".into();
    p.apply("prod");
    p.execute_on_engine("INSERT INTO src.cust VALUES (NULL)");
    p.now = "2026-05-02T00:10:00Z".into();
    let run = p.run(&["run", "prod", "--json", "--jobs", "1"]);
    run.expect_code(1);
    let e = &run.stderr;
    assert!(e.contains("1 blocking audit failed:") && e.contains("audit `not_null(id)` on model `s.") && e.contains(": 1 violating row"), "{e}");
    assert!(!e.contains("nothing was promoted"), "a run never promotes: {e}");
    assert_eq!(run.json()["error"]["kind"], "audit", "{}", run.stdout);
    assert_eq!(p.rows(&env_view("prod", "s.customers")).len(), 2, "the rebuild was rolled back");
    // Two models failing at once in a parallel run: the several failures' header neither. Each
    // build waits at its start (test hook) so that both are under way before either fails: the
    // first failure stops new work from starting.
    let out = p.command(&["run", "prod", "--jobs", "2"]).env("EFMESH_DELAY", "build:s.customers=700,build:s.others=700").output().expect("spawn efmesh");
    let several = Run::from_output(out, "efmesh run prod --jobs 2".into());
    several.expect_code(1);
    assert!(several.stderr.contains("2 failures:") && !several.stderr.contains("nothing was promoted"), "{}", several.stderr);
    // An apply building a new version fails on the same rows, and says nothing was promoted.
    p.write("models/c.lua", &models("SELECT id + 0 AS id"));
    let apply = p.run(&["apply", "prod", "--yes"]);
    apply.expect_code(1);
    assert!(apply.stderr.contains("1 blocking audit failed, nothing was promoted:"), "{}", apply.stderr);
}

fn efmesh_audit_reports_every_failure_when_an_audit_sql_errors(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "models/codes.lua",
        r#"define_model {
  name = "s.codes", kind = kind.full(), schema = { { "code", "varchar" } },
  audits = {
    audit.expression("CAST(code AS INTEGER) > 0"),
    audit.not_null("code"),
  },
  query = "SELECT code FROM (VALUES ('1'), ('2')) AS v(code)",
}
"#,
    );
    p.apply("prod");
    // Someone writes a code that is no number (the first audit's SQL now fails on the engine)
    // and a NULL one (the second audit's violation).
    let physical = physical_of(&p, "s.codes");
    p.execute_on_engine(&format!("INSERT INTO {physical} VALUES ('x'), (NULL)"));
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["apiVersion"], 1);
    assert_eq!(v["errors"], 1);
    assert_eq!(v["blockingViolations"], 1);
    let broken = result(&v, "s.codes", "expression(CAST(code AS INTEGER) > 0)");
    assert_eq!(broken["location"], "models/codes.lua:4", "{broken:#}");
    assert!(broken["error"].as_str().is_some_and(|e| !e.is_empty()), "{broken:#}");
    assert_eq!(violations(&v, "s.codes", "not_null(code)"), 1);
    let e = &run.stderr;
    assert!(e.contains("environment `prod`: 1 blocking audit violation, 1 audit could not run"), "{e}");
    assert!(e.contains("models/codes.lua:4: audit `expression(CAST(code AS INTEGER) > 0)` on model `s.codes` could not run"), "{e}");
    let human = p.run(&["audit", "prod"]).expect_code(1).stdout.clone();
    assert!(human.contains("✗ s.codes  expression(CAST(code AS INTEGER) > 0)  could not run (models/codes.lua:4)"), "{human}");
    assert!(human.contains("✗ s.codes  not_null(code)  1 violating row"), "{human}");
    assert!(human.contains("2 audits run: 0 passed, 2 failed, 0 warned"), "{human}");
    // apply: an audit whose SQL fails stops it, naming the audit's file:line, the audit and the model.
    p.write("models/codes.lua", &p.read("models/codes.lua").replace("('2')", "('2'), ('y')"));
    let run = p.run(&["apply", "prod", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/codes.lua:4: audit `expression(CAST(code AS INTEGER) > 0)` on model `s.codes` could not run"), "{}", run.stderr);
}

#[test]
fn a_relationships_audit_naming_an_unknown_model_is_a_load_error_at_its_use() {
    let p = project(EngineBackend::DuckDb);
    p.write("models/customers.lua", &customers("(1)"));
    p.write(
        "models/orders.lua",
        r#"define_model {
  name = "s.orders", kind = kind.full(), schema = { { "customer_id", "integer" } },
  audits = {
    audit.relationships("customer_id", "s.customer", "id"),
    audit.relationships("customer_id", "s.orders", "id"),
  },
  query = "SELECT CAST(1 AS INTEGER) AS customer_id",
}
"#,
    );
    let run = p.run(&["check"]);
    run.expect_code(1);
    let e = &run.stdout;
    assert!(
        e.contains("models/orders.lua:4: model `s.orders`: audit `relationships` references unknown model `s.customer`\n  hint: did you mean `s.customers`?"),
        "{e}"
    );
    assert!(e.contains("models/orders.lua:5: model `s.orders`: audit `relationships` references its own model `s.orders`"), "{e}");
    // `cols()` stays refused in a body; a `to` that is not a model name is an error at the use.
    p.write(
        "models/orders.lua",
        r#"define_audit { name = "bad", params = { "c" }, query = function(self, args) return "SELECT * FROM " .. self .. " JOIN " .. cols("s.customers") end }
define_model {
  name = "s.orders", kind = kind.full(), schema = { { "customer_id", "integer" } },
  audits = { audit.bad("x"), audit.relationships("customer_id", 3) },
  query = "SELECT CAST(1 AS INTEGER) AS customer_id",
}
"#,
    );
    let e = p.run(&["check"]).expect_code(1).stdout.clone();
    assert!(e.contains("models/orders.lua:4: audit `bad`: `cols()` cannot be used in an audit body"), "{e}");
    assert!(e.contains("models/orders.lua:4: audit `relationships` failed to render its SQL: `to` must be a string"), "{e}");
}

/// An embedded model whose query uses `@start`/`@end` (`s.e1`), or inlines one that does
/// (`s.e2`), has no relation outside its reader's batch: an audit on it is a load error at the
/// audit's `file:line`, never a raw engine error ("Wrong number of parameters") at every apply.
#[test]
fn an_audit_on_an_embedded_model_using_interval_bounds_is_a_load_error_at_the_audit() {
    let p = project(EngineBackend::DuckDb);
    p.write("data/ev.csv", "day,id,status\n2026-01-01,1,paid\n");
    p.write("models/raw.sql", "-- name: raw.ev\n-- kind: external(path = data/ev.csv)\n-- schema: day date, id integer, status varchar\n");
    let e1 = "-- name: s.e1\n-- kind: embedded\n-- schema: day date, id integer, status varchar\n-- refs: raw.ev\n\
        -- audits: not_null(status)\nSELECT day, id, status FROM @ref(raw.ev) WHERE day >= @start AND day < @end\n";
    let e2 = "-- name: s.e2\n-- kind: embedded\n-- schema: day date, id integer, status varchar\n-- refs: s.e1\n\
        -- audits: not_null(id)\nSELECT day, id, status FROM @ref(s.e1)\n";
    p.write("models/e1.sql", e1);
    p.write("models/e2.sql", e2);
    p.write(
        "models/r.sql",
        "-- name: s.r\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = day)\n\
         -- schema: day date, id integer, status varchar\n-- refs: s.e2\nSELECT day, id, status FROM @ref(s.e2)\n",
    );
    let out = p.run(&["check"]).expect_code(1).stdout.clone();
    assert!(
        out.contains(
            "models/e1.sql:5: model `s.e1`: audit `not_null(status)`: `s.e1` is embedded and uses `@start`/`@end`: it has no relation to audit outside a batch"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "models/e2.sql:5: model `s.e2`: audit `not_null(id)`: `s.e2` is embedded and inlines `s.e1`, which uses `@start`/`@end`: it has no relation to audit outside a batch"
        ),
        "{out}"
    );
    assert!(out.contains("audit the models that read it instead"), "{out}");
    let apply = p.run(&["apply", "dev", "--yes"]);
    apply.expect_code(1);
    assert!(!apply.stderr.contains("Wrong number of parameters"), "{}", apply.stderr);
    assert!(apply.stderr.contains("`s.e1` is embedded and uses `@start`/`@end`"), "{}", apply.stderr);
    // Without the audits the same models load: the bounds alone are allowed.
    p.write("models/e1.sql", &e1.replace("-- audits: not_null(status)\n", ""));
    p.write("models/e2.sql", &e2.replace("-- audits: not_null(id)\n", ""));
    p.run(&["check"]).expect_code(0);
}

#[test]
fn an_interval_audit_new_to_the_environment_checks_the_existing_batches_at_promotion() {
    // `dev` builds the days with no audit; `prod` points at that version with a blocking
    // interval audit the 3rd fails: the promotion runs it over the whole table first.
    let p = daily_project(EngineBackend::DuckDb, EVENTS, "");
    p.apply("dev");
    p.write("models/daily.lua", &p.read("models/daily.lua").replace("audits = {  }", "audits = { audit.not_null(\"region\") }"));
    assert!(p.read("models/daily.lua").contains("not_null"));
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "s.daily")["build"], false, "{plan:#}");
    let run = p.run(&["apply", "prod", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `not_null(region)` on model `s.daily`: 1 violating row"), "{}", run.stderr);
    assert!(!p.relations().contains(&"s.daily".to_string()), "{:?}", p.relations());
    assert!(!p.state_summary().pointers.contains_key("prod"));
}

/// `s.y` (time-range, daily) over `landing.events`, with `audits`; `raw.keys` for relationships.
fn y_models(audits: &str) -> String {
    format!(
        r#"define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{"ts","timestamp"}}, {{"k","varchar"}}, {{"v","integer"}} }} }}
define_model {{ name = "raw.keys", kind = kind.external {{ table = "landing.keys" }}, schema = {{ {{"k","varchar"}} }} }}
define_model {{ name = "s.y",
  kind = kind.incremental_by_time_range {{ time_column = "ts", start = "2026-01-01", grain = "day" }},
  schema = {{ {{"ts","timestamp"}}, {{"k","varchar"}} }},
  audits = {{ {audits} }},
  query = "SELECT ts, k FROM " .. ref("raw.events") .. " WHERE ts >= @start AND ts < @end" }}
"#
    )
}

fn y_project() -> Project {
    let mut p = Project::new();
    p.execute_on_engine(
        "CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, k varchar, v integer); CREATE TABLE landing.keys (k varchar); \
         INSERT INTO landing.keys VALUES ('a'), ('c'), ('d'); \
         INSERT INTO landing.events VALUES ('2026-01-01 10:00', 'a', 1), ('2026-01-02 10:00', NULL, 2), ('2026-01-03 10:00', NULL, 3)",
    );
    p.now = "2026-01-03T01:00:00Z".into();
    p.write("models/m.lua", &y_models(""));
    p.apply("dev");
    p.now = "2026-01-04T01:00:00Z".into();
    p
}

#[test]
fn an_interval_audit_reading_another_model_checks_the_existing_batches_when_the_promotion_builds_more() {
    // Its pass cannot be recorded (it reads `raw.keys`): the batches `dev` wrote without it are
    // audited over the whole table before `prod` points at the version, though `prod`'s apply
    // writes a new day of it too.
    let p = y_project();
    p.write("models/m.lua", &y_models(r#"audit.relationships { column = "k", to = "raw.keys", field = "k", blocking = false }, audit.not_null("k")"#));
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "s.y")["intervals"], 1, "{plan:#}");
    let run = p.run(&["apply", "prod", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `not_null(k)` on model `s.y`"), "{}", run.stderr);
    assert!(!p.relations().contains(&"s.y".to_string()), "{:?}", p.relations());
}

#[test]
fn a_warn_audit_run_over_the_whole_table_after_its_batches_reports_each_row_once() {
    let p = y_project();
    p.write("models/m.lua", &y_models(r#"audit.not_null { columns = { "k" }, blocking = false }"#));
    let v = p.apply("prod");
    // The 2nd (written by `dev`) and the 3rd (written now): two rows, each counted once.
    assert_eq!(violations(&v, "s.y", "not_null(k)"), 2, "{v:#}");
}

#[test]
fn a_whole_audit_reading_another_model_runs_once_per_run() {
    // `s.y` has an interval audit and a whole one reading `s.k` (no pass can be recorded): a run
    // writing a day into both runs the whole audit in the last batch, and not again.
    let mut p = Project::new();
    p.execute_on_engine(
        "CREATE SCHEMA landing; CREATE TABLE landing.events (ts timestamp, k varchar, v integer); \
         INSERT INTO landing.events VALUES ('2026-01-01 10:00', 'a', 1), ('2026-01-02 10:00', 'a', 2)",
    );
    p.now = "2026-01-03T01:00:00Z".into();
    p.write(
        "models/m.lua",
        r#"define_model { name = "raw.events", kind = kind.external { table = "landing.events" }, schema = { {"ts","timestamp"}, {"k","varchar"}, {"v","integer"} } }
define_model { name = "s.k",
  kind = kind.incremental_by_time_range { time_column = "ts", start = "2026-01-01", grain = "day" },
  schema = { {"ts","timestamp"}, {"k","varchar"} },
  query = "SELECT ts, 'a' AS k FROM " .. ref("raw.events") .. " WHERE ts >= @start AND ts < @end" }
define_model { name = "s.y",
  kind = kind.incremental_by_time_range { time_column = "ts", start = "2026-01-01", grain = "day" },
  schema = { {"ts","timestamp"}, {"k","varchar"} },
  audits = { audit.not_null("k"), audit.relationships { column = "k", to = "s.k", field = "k", blocking = false, scope = "whole" } },
  query = "SELECT ts, k FROM " .. ref("raw.events") .. " WHERE ts >= @start AND ts < @end" }
"#,
    );
    p.apply("prod");
    p.execute_on_engine("INSERT INTO landing.events VALUES ('2026-01-03 10:00', 'zz', 3)");
    p.now = "2026-01-04T01:00:00Z".into();
    let run = p.run(&["run", "prod"]);
    run.expect_code(0);
    let warned = run.stderr.lines().filter(|l| l.contains("level=warn") && l.contains("audit `relationships(")).count();
    assert_eq!(warned, 1, "{}", run.stderr);
}

// ---- efmesh audit <env> and unapplied edits of what it inlines ------------------------------

/// A project (DuckDB) over `data/orders.csv` (`raw.orders`, an external) with the models of
/// `files` (`path`, text) written too, applied to prod, the CSV then given a NULL status.
fn orders_project(files: &[(&str, &str)]) -> Project {
    let p = project(EngineBackend::DuckDb);
    p.write("data/orders.csv", "id,status\n1,paid\n2,open\n");
    for (path, text) in files {
        p.write(path, text);
    }
    p.apply("prod");
    p.write("data/orders.csv", "id,status\n1,paid\n2,\n");
    p
}

/// The external `raw.orders` over `data/orders.csv`.
const RAW_ORDERS: &str = "-- name: raw.orders\n-- kind: external(path = data/orders.csv)\n-- schema: id integer, status varchar\n";

/// The embedded `s.e` over `raw.orders`, audited `not_null(status)` (line 5).
const EMBEDDED_E: &str = "-- name: s.e\n-- kind: embedded\n-- schema: id integer, status varchar\n-- refs: raw.orders\n\
    -- audits: not_null(status)\nSELECT id, status FROM @ref(raw.orders)\n";

/// A view over `s.e`, with the same audit.
const VIEW_C: &str = "-- name: s.c\n-- kind: view\n-- schema: id integer, status varchar\n-- refs: s.e\n\
    -- audits: not_null(status)\nSELECT id, status FROM @ref(s.e)\n";

/// An embedded model over the table `s.t`.
const EMBEDDED_OVER_T: &str = "-- name: s.e\n-- kind: embedded\n-- schema: id integer, status varchar\n-- refs: s.t\n\
    -- audits: not_null(status)\nSELECT id, status FROM @ref(s.t)\n";

#[test]
fn efmesh_audit_does_not_run_the_audits_inlining_an_unapplied_edit_of_an_embedded_model() {
    let p = orders_project(&[
        ("models/raw.sql", RAW_ORDERS),
        ("models/e.sql", EMBEDDED_E),
        // A view over `s.e`: prod's view inlines the version of `s.e` prod serves.
        ("models/c.sql", VIEW_C),
        // An audit reading `s.e` through `ref` (relationships' `to`) inlines it too.
        ("models/k.sql", "-- name: s.k\n-- kind: full\n-- schema: id integer\n-- audits: relationships(column = id, to = s.e)\nSELECT 1 AS id\n"),
    ]);
    let before = p.run(&["audit", "prod", "--json"]);
    before.expect_code(1);
    assert_eq!(violations(&before.json(), "s.e", "not_null(status)"), 1);

    // `s.e` now filters the NULL out, not applied: prod still serves it.
    p.write("models/e.sql", &EMBEDDED_E.replace("FROM @ref(raw.orders)", "FROM @ref(raw.orders) WHERE status IS NOT NULL"));
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["notRun"], 2, "{v:#}");
    let why = "`s.e`: the project's definition differs from what `prod` serves; apply it (or revert the edit), then audit again";
    for (model, audit) in [("s.e", "not_null(status)"), ("s.k", "relationships(id, s.e)")] {
        let r = result(&v, model, audit);
        assert_eq!((r["notRun"].as_str(), r["runs"].as_u64(), r["violations"].as_u64()), (Some(why), Some(0), Some(0)), "{r:#}");
    }
    // The view's audit reads prod's view, unchanged: it runs and finds the NULL prod serves.
    let served = result(&v, "s.c", "not_null(status)");
    assert!(served.get("notRun").is_none(), "{served:#}");
    assert_eq!(served["violations"], 1, "{served:#}");
    assert!(run.stderr.contains("environment `prod`: 1 blocking audit violation, 2 audits not run"), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("models/e.sql:5: audit `not_null(status)` on model `s.e` not run: {why}")), "{}", run.stderr);
    let human = p.run(&["audit", "prod"]).expect_code(1).stdout.clone();
    assert!(human.contains(&format!("✗ s.e  not_null(status)  not run: {why}")), "{human}");
    assert!(human.contains("1 audit run: 0 passed, 1 failed, 0 warned; 2 not run"), "{human}");

    // Once applied, prod serves the edit: every audit runs, and passes.
    p.apply("prod");
    let after = p.run(&["audit", "prod", "--json"]).expect_code(0).json();
    assert_eq!(after["notRun"], 0, "{after:#}");
    assert_eq!(violations(&after, "s.e", "not_null(status)"), 0);
    assert_eq!(result(&after, "s.e", "not_null(status)")["runs"], 1);
}

#[test]
fn efmesh_audit_does_not_run_the_audits_of_an_external_whose_unapplied_path_differs() {
    let raw = format!("{RAW_ORDERS}-- audits: not_null(status)\n");
    let p = orders_project(&[
        ("models/raw.sql", raw.as_str()),
        ("models/c.sql", "-- name: s.c\n-- kind: view\n-- schema: id integer, status varchar\n-- refs: raw.orders\nSELECT id, status FROM @ref(raw.orders)\n"),
    ]);
    // The external now reads a clean file, not applied: prod's views still read the old one.
    p.write("data/new.csv", "id,status\n1,paid\n");
    p.write("models/raw.sql", &p.read("models/raw.sql").replace("data/orders.csv", "data/new.csv"));
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["notRun"], 1, "{v:#}");
    assert_eq!(v["blockingViolations"], 0, "{v:#}");
    let r = result(&v, "raw.orders", "not_null(status)");
    assert_eq!(r["notRun"], "`raw.orders`: the project's definition differs from what `prod` serves; apply it (or revert the edit), then audit again", "{r:#}");
    assert_eq!(r["runs"], 0, "{r:#}");
    assert!(run.stderr.contains("environment `prod`: 1 audit not run"), "{}", run.stderr);
    let human = p.run(&["audit", "prod"]).expect_code(1).stdout.clone();
    assert!(human.contains("✗ raw.orders  not_null(status)  not run: `raw.orders`: the project's definition differs"), "{human}");
    assert!(human.contains("0 audits run: 0 passed, 0 failed, 0 warned; 1 not run"), "{human}");
}

#[test]
fn efmesh_audit_runs_the_audits_of_unchanged_embedded_models_and_externals_as_before() {
    let raw = format!("{RAW_ORDERS}-- audits: not_null(status)\n");
    let p = orders_project(&[
        ("models/raw.sql", raw.as_str()),
        ("models/t.sql", "-- name: s.t\n-- kind: full\n-- schema: id integer, status varchar\n-- refs: raw.orders\nSELECT id, status FROM @ref(raw.orders)\n"),
        ("models/e.sql", EMBEDDED_OVER_T),
    ]);
    let check = |p: &Project| {
        let run = p.run(&["audit", "prod", "--json"]);
        run.expect_code(1);
        let v = run.json();
        assert_eq!(v["notRun"], 0, "{v:#}");
        // The external's source now holds the NULL; `s.e` reads prod's table of `s.t`, built
        // from the clean file.
        assert_eq!(violations(&v, "raw.orders", "not_null(status)"), 1);
        assert_eq!(violations(&v, "s.e", "not_null(status)"), 0);
        for model in ["raw.orders", "s.e"] {
            let r = result(&v, model, "not_null(status)");
            assert!(r.get("notRun").is_none(), "{r:#}");
            assert_eq!(r["runs"], 1, "{r:#}");
        }
        assert!(!run.stderr.contains("not run"), "{}", run.stderr);
    };
    check(&p);
    // An unapplied edit of `s.t`, a table: `s.e`'s fingerprint changes, not what it renders
    // against prod (`s.t` is prod's view), so its audit still runs.
    p.write("models/t.sql", &p.read("models/t.sql").replace("FROM @ref(raw.orders)", "FROM @ref(raw.orders) WHERE id > 0"));
    assert_eq!(action(&p.plan("prod"), "s.e")["change"], "indirect");
    check(&p);
}

/// An unapplied edit leaving an unrelated model's SQL unparsable does not stop `efmesh audit`:
/// only the bodies of the embedded models and externals its audits inline are parsed. The
/// external's audit runs and reports its violation; an embedded model whose own SQL no longer
/// parses has its audit reported not run, with the parse error as the reason.
#[test]
fn efmesh_audit_runs_despite_an_unparsable_unapplied_edit_of_another_model() {
    let raw = format!("{RAW_ORDERS}-- audits: not_null(status)\n");
    let p = orders_project(&[
        ("models/raw.sql", raw.as_str()),
        ("models/t.sql", "-- name: s.t\n-- kind: full\n-- schema: id integer\nSELECT 1 AS id\n"),
        ("models/e.sql", EMBEDDED_E),
    ]);
    p.write("models/t.sql", "-- name: s.t\n-- kind: full\n-- schema: id integer\nSELECT 1 AS id FROM WHERE\n");
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["notRun"], 0, "{v:#}");
    assert_eq!(violations(&v, "raw.orders", "not_null(status)"), 1);
    assert_eq!(result(&v, "raw.orders", "not_null(status)")["runs"], 1);
    assert_eq!(violations(&v, "s.e", "not_null(status)"), 1);
    assert!(run.stderr.contains("environment `prod`: 2 blocking audit violations"), "{}", run.stderr);
    assert!(!run.stderr.contains("cannot parse") && !run.stderr.contains("models/t.sql"), "{}", run.stderr);

    // `s.e` itself no longer parses: its audit is not run, the reason naming its file; the
    // external's still runs.
    p.write("models/e.sql", &EMBEDDED_E.replace("FROM @ref(raw.orders)", "FROM @ref(raw.orders) WHERE"));
    let run = p.run(&["audit", "prod", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["notRun"], 1, "{v:#}");
    assert_eq!(violations(&v, "raw.orders", "not_null(status)"), 1);
    let r = result(&v, "s.e", "not_null(status)");
    let why = r["notRun"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    assert!(why.starts_with("`s.e`: the project's definition cannot be parsed, so whether `prod` serves it is not known (models/e.sql:"), "{why}");
    assert!(why.ends_with("fix it (or revert the edit), then audit again"), "{why}");
    assert_eq!(r["runs"], 0, "{r:#}");
}

/// A model removed from the project while `dev` still serves it: `efmesh audit dev` runs the
/// project's audits, so the removed model's are not run. The report says so, naming it with the
/// number of audits `dev` recorded for it (`notInProject` in `--json`), instead of "nothing to
/// check"; the exit code stays 0, as for the project's models `dev` does not serve.
#[test]
fn efmesh_audit_names_the_served_models_the_project_no_longer_defines() {
    let p = project(EngineBackend::DuckDb);
    p.write("models/t.sql", "-- name: s.t\n-- kind: full\n-- schema: id integer\n-- audits: not_null(id), unique(id)\nSELECT 1 AS id\n");
    p.write("models/u.sql", "-- name: s.u\n-- kind: full\n-- schema: id integer\nSELECT 1 AS id\n");
    p.apply("dev");
    let before = p.run(&["audit", "dev", "--json"]).expect_code(0).json();
    assert_eq!(before["notInProject"], serde_json::json!([]), "{before:#}");
    assert_eq!(result(&before, "s.t", "not_null(id)")["runs"], 1);

    // `s.t` removed, the removal not applied: `dev` still serves it.
    p.remove("models/t.sql");
    let run = p.run(&["audit", "dev"]);
    run.expect_code(0);
    let human = &run.stdout;
    assert!(!human.contains("nothing to check"), "{human}");
    assert!(human.contains("  · s.t  served by `dev`, no longer in the project: 2 recorded audits not run"), "{human}");
    assert!(human.contains("0 audits run: 0 passed, 0 failed, 0 warned"), "{human}");
    assert!(human.contains("warning: `dev` serves 1 audited model the project no longer defines (`s.t`): its 2 recorded audits were not run"), "{human}");
    assert!(human.contains("as `efmesh audit` runs the project's audits; `efmesh apply dev` stops serving it (or restore its definition)"), "{human}");
    let v = p.run(&["audit", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["results"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["notInProject"], serde_json::json!([{"model": "s.t", "audits": 2}]), "{v:#}");
    // `--model` selects project models only: the removed one is not reported.
    let only = p.run(&["audit", "dev", "--model", "s.u", "--json"]).expect_code(0).json();
    assert_eq!(only["notInProject"], serde_json::json!([]), "{only:#}");

    // Once the removal is applied, `dev` serves no audited model: nothing to check, truly.
    p.apply("dev");
    let after = p.run(&["audit", "dev"]).expect_code(0).stdout.clone();
    assert!(after.contains("no audits in environment `dev`: nothing to check"), "{after}");
}

/// A project for the audits of models that store nothing: a CSV source `raw.orders`, `s.e` of
/// `kind` (`embedded` or `view`) over it (through `s.f`, a `full` model on a daily cron copying
/// the source, with `through_full`) with a blocking `not_null(status)` and a warn
/// `accepted_values(status, [paid])`, and `s.c` (`full`, daily cron) reading `s.e`, its query
/// ending with `tail`.
fn storeless(p: &Project, kind: &str, through_full: bool, tail: &str) {
    let (middle, read) = if through_full {
        (
            "define_model { name = \"s.f\", kind = kind.full(), cron = \"@daily\", schema = { { \"id\", \"integer\" }, { \"status\", \"varchar\" } },\n  \
             query = \"SELECT id, status FROM \" .. ref(\"raw.orders\") }\n",
            "s.f",
        )
    } else {
        ("", "raw.orders")
    };
    p.write(
        "models/m.lua",
        &format!(
            "define_model {{ name = \"raw.orders\", kind = kind.external {{ path = \"data/orders.csv\" }}, schema = {{ {{ \"id\", \"integer\" }}, {{ \"status\", \"varchar\" }} }} }}\n\
             {middle}\
             define_model {{ name = \"s.e\", kind = kind.{kind}(), schema = {{ {{ \"id\", \"integer\" }}, {{ \"status\", \"varchar\" }} }},\n  \
             audits = {{ audit.not_null(\"status\"), audit.accepted_values {{ column = \"status\", values = {{ \"paid\" }}, blocking = false }} }},\n  \
             query = \"SELECT id, status FROM \" .. ref(\"{read}\") }}\n\
             define_model {{ name = \"s.c\", kind = kind.full(), cron = \"@daily\", schema = {{ {{ \"id\", \"integer\" }}, {{ \"status\", \"varchar\" }} }},\n  \
             query = \"SELECT id, status FROM \" .. ref(\"s.e\") .. \"{tail}\" }}\n"
        ),
    );
}

/// How many times the warn audit of `s.e` reported on stderr.
fn storeless_warnings(stderr: &str) -> usize {
    stderr.lines().filter(|l| l.contains("audit `accepted_values(") && l.contains("on model `s.e`")).count()
}

/// An `embedded` or `view` model stores nothing: what it serves follows its source. A `run`
/// rebuilding `s.c` from it (its cron ticked) runs its blocking audit first, against what the
/// write reads, and stops with nothing written (exit 1 naming the audit, its file:line and the
/// model); `dev` still serves the rows it served.
#[test]
fn a_run_reading_an_embedded_or_view_model_failing_its_blocking_audit_writes_nothing() {
    for kind in ["embedded", "view"] {
        let mut p = Project::new();
        p.write("data/orders.csv", "id,status\n1,paid\n2,paid\n");
        storeless(&p, kind, false, "");
        p.now = "2026-01-01T00:00:00Z".into();
        p.apply("dev");
        let served = p.rows(&env_view("dev", "s.c"));
        p.write("data/orders.csv", "id,status\n1,paid\n2,\n");
        p.now = "2026-01-02T00:10:00Z".into();
        let r = p.run(&["run", "dev", "--json"]);
        r.expect_code(1);
        let e = &r.stderr;
        assert!(e.contains("models/m.lua:") && e.contains("audit `not_null(status)` on model `s.e`: 1 violating row"), "{kind}: {e}");
        assert!(e.contains("nothing was written"), "{kind}: {e}");
        assert!(e.contains("hint: fix what they read (or the audit), then run again"), "{kind}: {e}");
        assert_eq!(r.json()["error"]["kind"], "audit", "{kind}: {}", r.stdout);
        assert_eq!(p.rows(&env_view("dev", "s.c")), served, "{kind}: nothing was written");
        // `efmesh audit` agrees.
        p.run(&["audit", "dev"]).expect_code(1);
    }
}

/// An `apply` building a new version of `s.c` (its query changed) over the unchanged `embedded`
/// or `view` model `s.e` runs `s.e`'s audits before that build: a blocking failure writes
/// nothing of `s.c` and promotes nothing.
#[test]
fn an_apply_building_from_an_unchanged_embedded_or_view_model_runs_its_blocking_audit_first() {
    for kind in ["embedded", "view"] {
        let mut p = Project::new();
        p.write("data/orders.csv", "id,status\n1,paid\n2,paid\n");
        storeless(&p, kind, false, "");
        p.now = "2026-01-01T00:00:00Z".into();
        p.apply("dev");
        let served = p.rows(&env_view("dev", "s.c"));
        let table = physical_of(&p, "s.c");
        p.write("data/orders.csv", "id,status\n1,paid\n2,\n");
        storeless(&p, kind, false, " WHERE id > 0");
        assert_eq!(action(&p.plan("dev"), "s.e")["change"], "unchanged", "{kind}");
        p.now = "2026-01-01T00:10:00Z".into();
        let r = p.run(&["apply", "dev", "--yes"]);
        r.expect_code(1);
        let e = &r.stderr;
        assert!(e.contains("models/m.lua:") && e.contains("audit `not_null(status)` on model `s.e`: 1 violating row"), "{kind}: {e}");
        assert_eq!(p.rows(&env_view("dev", "s.c")), served, "{kind}: nothing was promoted");
        assert_eq!(physical_of(&p, "s.c"), table, "{kind}: the new version of `s.c` was never built");
    }
}

/// When the `embedded` model reads a model the same `run` rewrites (`s.f`, on its cron), its
/// audits run once that model is written, just before the write reading it: the new NULL in
/// `s.f` stops `s.c`'s rebuild (exit 1), and `s.c` serves what it served. Embedded only: a
/// `view` model over `s.f` is rebuilt by the run itself (it is downstream of `s.f`), and that
/// build runs its audits, so a view here would pass without the gate; the tests above cover
/// views through the gate.
#[test]
fn a_run_rewriting_what_an_embedded_model_reads_audits_it_before_the_write_reading_it() {
    let kind = "embedded";
    for jobs in ["1", "2"] {
        let mut p = Project::new();
        p.write("data/orders.csv", "id,status\n1,paid\n2,paid\n");
        storeless(&p, kind, true, "");
        p.now = "2026-01-01T00:00:00Z".into();
        p.apply("dev");
        let served = p.rows(&env_view("dev", "s.c"));
        p.write("data/orders.csv", "id,status\n1,paid\n2,\n");
        p.now = "2026-01-02T00:10:00Z".into();
        let r = p.run(&["run", "dev", "--jobs", jobs]);
        r.expect_code(1);
        let e = &r.stderr;
        assert!(e.contains("audit `not_null(status)` on model `s.e`: 1 violating row"), "{kind} --jobs {jobs}: {e}");
        assert!(e.contains("nothing of `s.c` was written"), "{kind} --jobs {jobs}: {e}");
        assert_eq!(p.rows(&env_view("dev", "s.c")), served, "{kind} --jobs {jobs}: nothing of `s.c` was written");
    }
}

/// The control: a passing blocking audit of an `embedded` or `view` model blocks nothing, and
/// its audits run once per command: the warn audit reports once in the `run` (over the source,
/// and, for the embedded model, over a model the run rewrites) and once in an `apply` building
/// from it. Not a view over a model the run rewrites: the run rebuilds that view, whose build
/// runs its audits, so the case would pass without the gate.
#[test]
fn a_passing_audit_of_an_embedded_or_view_model_blocks_nothing_and_runs_once() {
    for (kind, through_full) in [("embedded", false), ("embedded", true), ("view", false)] {
        let mut p = Project::new();
        p.write("data/orders.csv", "id,status\n1,paid\n");
        storeless(&p, kind, through_full, "");
        p.now = "2026-01-01T00:00:00Z".into();
        p.apply("dev");
        // An `open` order: the warn audit reports it, the blocking one passes.
        p.write("data/orders.csv", "id,status\n1,paid\n2,open\n");
        p.now = "2026-01-02T00:10:00Z".into();
        let r = p.run(&["run", "dev"]);
        r.expect_code(0);
        assert_eq!(storeless_warnings(&r.stderr), 1, "{kind} through_full={through_full}: {}", r.stderr);
        assert_eq!(p.rows(&env_view("dev", "s.c")).len(), 2, "{kind} through_full={through_full}: the run rebuilt `s.c`");
        storeless(&p, kind, through_full, " WHERE id > 0");
        let r = p.run(&["apply", "dev", "--yes"]);
        r.expect_code(0);
        assert_eq!(storeless_warnings(&r.stderr), 1, "{kind} through_full={through_full}: {}", r.stderr);
    }
}

/// A Lua or Rhai audit body's SQL holding `@word` or `@macro(…)` reached DuckDB as `abs(…)`:
/// `WHERE @sign(c) < 0` never held and the audit passed over negative rows (exit 0). Macros are
/// not expanded in audit bodies and a body's SQL has no markers: a load error at the use, naming
/// the audit and where it is defined, from a `.sql` model (the definitions' interpreters) and a
/// Lua model (its own). `@` in literals, comments and operators stays allowed.
#[test]
fn an_at_word_or_macro_call_in_a_lua_or_rhai_audit_body_is_a_load_error_naming_the_audit() {
    let p = project(EngineBackend::DuckDb);
    p.write("macros/m.lua", "define_macro(\"sign\", function(c) return (\"sign(%s)\"):format(c) end)\n");
    p.write(
        "audits/a.lua",
        "define_audit { name = \"no_negative\", params = { \"column\" },\n  query = function(self, args) return (\"SELECT * FROM %s WHERE @sign(%s) < 0\"):format(self, args.column) end }\n\
         define_audit { name = \"no_negative_b\", params = { \"column\" },\n  query = function(self, args) return (\"SELECT * FROM %s WHERE @%s < 0\"):format(self, args.column) end }\n\
         define_audit { name = \"fine\", params = { \"column\" },\n  query = function(self, args) return (\"SELECT * FROM %s WHERE %s < 0 AND '@x' <> ''\"):format(self, args.column) end }\n",
    );
    p.write(
        "audits/r.rhai",
        "define_audit(#{ name: \"no_neg_r\", params: [\"column\"], query: |rel, args| `SELECT * FROM ${rel} WHERE @${args.column} < 0` });\n",
    );
    p.write(
        "models/au.sql",
        "-- name:   s.au\n-- kind:   full\n-- schema: id integer, c integer\n-- audits: no_negative(c), no_negative_b(c), no_neg_r(c), fine(c)\nSELECT 1 AS id, -5 AS c\n",
    );
    p.write(
        "models/l.lua",
        "define_model { name = \"s.l\", kind = kind.full(), schema = { { \"c\", \"integer\" } },\n  audits = { audit.no_negative(\"c\") },\n  query = \"SELECT 1 AS c\" }\n",
    );
    for args in [&["check"][..], &["apply", "dev", "--yes"]] {
        let r = p.run(args);
        r.expect_code(1);
        let said = format!("{}{}", r.stdout, r.stderr);
        for (at, want) in [
            (
                "models/au.sql:4:",
                "audit `no_negative` (audits/a.lua:1) returned SQL holding the macro call `@sign(…)`, but macros are not expanded in audit bodies",
            ),
            ("models/au.sql:4:", "audit `no_negative_b` (audits/a.lua:3) returned SQL holding `@c`, but an audit body's SQL has no `@` markers"),
            ("models/au.sql:4:", "audit `no_neg_r` (audits/r.rhai:1) returned SQL holding `@c`"),
            ("models/l.lua:2:", "audit `no_negative` (audits/a.lua:1) returned SQL holding the macro call `@sign(…)`"),
        ] {
            assert!(said.lines().any(|l| l.starts_with(at) && l.contains(want)), "{args:?}: missing `{at} … {want}` in:\n{said}");
        }
        assert!(said.contains("DuckDB would read it as `abs(c)`"), "{args:?}: {said}");
        assert!(!said.contains("audit `fine`"), "{args:?}: {said}");
    }
}

/// A Lua or Rhai audit body keeping state between calls (a counter: its first use rendered the
/// real check, later ones `… AND false`) made a blocking audit depend on load order and the
/// load cache: `apply` passed over a NULL (exit 0, "2 passed"), a comment-only edit of a model
/// file flipped the result, dropping the cache flipped it back. Every body is called twice per
/// use and its answer compared with earlier uses of the same arguments: a load error at every
/// use (Lua models, a `.sql` model, a Lua model using the Rhai audit), naming the audit, where
/// it is defined and both answers — also after a comment-only edit. A use the interpreter of the
/// definition files renders (the `.sql` model's, the Lua models' use of the Rhai audit) sees
/// the counter as the write it is, which poisons that interpreter: its first such use is that
/// write's error, every later one a refusal naming it (nothing more is rendered from the
/// changed state), still an error at every use.
#[test]
fn an_audit_body_keeping_state_between_calls_is_refused_at_every_use() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "audits/no_nulls.lua",
        "local uses = 0\n\
         define_audit { name = \"no_nulls\", params = { \"column\" },\n  query = function(self, args)\n    uses = uses + 1\n    \
         if uses == 1 then return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column) end\n    \
         return (\"SELECT * FROM %s WHERE %s IS NULL AND false\"):format(self, args.column)\n  end }\n",
    );
    p.write(
        "audits/r.rhai",
        r##"let n = [0];
define_audit(#{ name: "rno_nulls", params: ["column"], query: |rel, args| {
  n[0] += 1;
  if n[0] == 1 { `SELECT * FROM ${rel} WHERE ${args.column} IS NULL` } else { `SELECT * FROM ${rel} WHERE ${args.column} IS NULL AND false` }
} });
"##,
    );
    let lua_model = |name: &str, select: &str| {
        format!(
            "define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"integer\" }} }}, query = \"{select}\",\n  audits = {{ audit.no_nulls(\"v\"), audit.rno_nulls(\"v\") }} }}\n"
        )
    };
    p.write("models/a.lua", &lua_model("p.a", "SELECT 1 AS v"));
    p.write("models/b.lua", &lua_model("p.b", "SELECT CAST(NULL AS INTEGER) AS v"));
    p.write("models/c.sql", "-- name: p.c\n-- kind: full\n-- schema: v integer\n-- audits: no_nulls(v), rno_nulls(v)\nSELECT CAST(NULL AS INTEGER) AS v\n");
    // The Lua models render `no_nulls` in their own interpreter: both answers. The `.sql`
    // model's `no_nulls` and every use of `rno_nulls` from a Lua or `.sql` model go to the
    // interpreter of the definition files: the write, or (after it) the refusal naming it.
    let refused = |said: &str, what: &str| {
        let line = |at: &str, want: &str| said.lines().any(|l| l.starts_with(at) && l.contains(want));
        for at in ["models/a.lua:2:", "models/b.lua:2:"] {
            let want = "audit `no_nulls` (audits/no_nulls.lua:2) returned `SELECT * FROM <relation> WHERE v IS NULL`";
            assert!(
                said.lines().any(|l| l.starts_with(at) && l.contains(want) && l.contains("`SELECT * FROM <relation> WHERE v IS NULL AND false`")),
                "{what}: missing `{at} … {want}` in:\n{said}"
            );
        }
        assert!(said.contains("an audit body must depend on its arguments alone (no state kept between calls)"), "{what}: {said}");
        assert!(line("models/c.sql:4:", "audit `no_nulls` (audits/no_nulls.lua:2) writes state that outlives the call (`uses`)"), "{what}: {said}");
        let write = "audit `rno_nulls` (audits/r.rhai:2) writes state that outlives the call (`n`)";
        let after = "audit `rno_nulls` was not run: earlier in this load audit `rno_nulls` (audits/r.rhai:2) wrote state that outlives its call (`n`)";
        let uses = ["models/a.lua:2:", "models/b.lua:2:", "models/c.sql:4:"];
        for at in uses {
            assert!(line(at, write) || line(at, after), "{what}: missing `{at} … {write}` or its refusal in:\n{said}");
        }
        assert_eq!(uses.iter().filter(|at| line(at, write)).count(), 1, "{what}: one write, then refusals:\n{said}");
    };
    for args in [&["check"][..], &["apply", "dev", "--yes"]] {
        let r = p.run(args);
        r.expect_code(1);
        refused(&format!("{}{}", r.stdout, r.stderr), &format!("{args:?}"));
    }
    // A comment-only edit (no file was cached: each had an error): refused too, where it passed
    // over the NULL before.
    p.write("models/b.lua", &format!("{}-- comment\n", p.read("models/b.lua")));
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    refused(&format!("{}{}", r.stdout, r.stderr), "after a comment-only edit");
}

/// What the check of [`an_audit_body_keeping_state_between_calls_is_refused_at_every_use`]
/// leaves alone: a stateless body, and bodies reading a table (Lua) or map (Rhai) built once at
/// the top of their file, used with the same arguments by several Lua models and a `.sql` model
/// (and the Rhai one from Lua), load, pass on clean data and catch their violations.
#[test]
fn stateless_audit_bodies_and_ones_reading_a_constant_table_of_their_file_still_work() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "audits/ok.lua",
        "local ops = { positive = \">\", negative = \"<\" }\n\
         define_audit { name = \"signed\", params = { \"column\", \"sign\" },\n  \
         query = function(self, args) return (\"SELECT * FROM %s WHERE NOT (%s %s 0)\"):format(self, args.column, ops[args.sign]) end }\n\
         define_audit { name = \"no_nulls\", params = { \"column\" },\n  \
         query = function(self, args) return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column) end }\n",
    );
    p.write(
        "audits/ok.rhai",
        r##"let ops = #{ positive: ">", negative: "<" };
define_audit(#{ name: "rsigned", params: ["column", "sign"], query: |rel, args| {
  let op = ops[args.sign];
  `SELECT * FROM ${rel} WHERE NOT (${args.column} ${op} 0)`
} });
"##,
    );
    let lua_model = |name: &str, select: &str, options: &str| {
        format!(
            "define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"integer\" }} }}, query = \"{select}\",\n  \
             audits = {{ audit.signed {{ \"v\", \"positive\"{options} }}, audit.rsigned {{ \"v\", \"positive\"{options} }}, audit.no_nulls {{ \"v\"{options} }} }} }}\n"
        )
    };
    p.write("models/a.lua", &lua_model("p.a", "SELECT 1 AS v", ""));
    p.write("models/b.lua", &lua_model("p.b", "SELECT 2 AS v", ""));
    p.write("models/n.lua", &lua_model("p.n", "SELECT -1 AS v UNION ALL SELECT NULL", ", blocking = false"));
    p.write(
        "models/c.sql",
        "-- name: p.c\n-- kind: full\n-- schema: v integer\n-- audits: signed(v, positive), rsigned(v, positive), no_nulls(v)\nSELECT 3 AS v\n",
    );
    let v = p.apply("dev");
    for m in ["p.a", "p.b", "p.c"] {
        for audit in ["signed(v, positive)", "rsigned(v, positive)", "no_nulls(v)"] {
            assert_eq!(violations(&v, m, audit), 0, "{m} {audit}: {:#}", result(&v, m, audit));
        }
    }
    for audit in ["signed(v, positive)", "rsigned(v, positive)", "no_nulls(v)"] {
        assert_eq!(violations(&v, "p.n", audit), 1, "{audit}: {:#}", result(&v, "p.n", audit));
    }
    // Loaded again (every file evaluated anew, in any order): the same, no load error.
    for cache in [".efmesh/load-cache", ".efmesh/project-cache"] {
        let _ = fs_err::remove_file(p.root().join(cache));
    }
    p.run(&["check"]).expect_code(0);
}

/// The purity check of [`an_audit_body_keeping_state_between_calls_is_refused_at_every_use`]
/// called a body 2 or 3 times per use inside the model file's budget: a pure body costing a
/// fifth of the file's Lua work budget (2·10^8 of 10^9 steps, deterministic: a plain
/// `string.find` is charged subject × pattern length), used 4 times with two arguments, spent
/// 10 times that and the file failed ("more than the … left of this file's work budget"). Its verification calls
/// run outside the file's budget and a use with arguments already rendered calls it once: the
/// file loads (4 calls in its budget, 3 in the verification budget).
#[test]
fn a_pure_audit_body_costing_a_fifth_of_the_file_budget_used_four_times_in_one_file_loads() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "audits/costly.lua",
        "local hay = string.rep(\"x\", 999999)\n\
         define_audit { name = \"costly_nn\", params = { \"column\" },\n  query = function(self, args)\n    \
         for _ = 1, 2 do string.find(hay, string.rep(\"y\", 99), 1, true) end\n    \
         return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column)\n  end }\n",
    );
    p.write(
        "models/m.lua",
        "define_model { name = \"p.m\", kind = kind.full(), schema = { { \"a\", \"integer\" }, { \"b\", \"integer\" } }, query = \"SELECT 1 AS a, 2 AS b\",\n  \
         audits = { audit.costly_nn(\"a\"), audit.costly_nn(\"b\"), audit.costly_nn { \"a\", blocking = false }, audit.costly_nn(\"b\") } }\n",
    );
    let r = p.run(&["check"]);
    assert!(!r.stderr.contains("budget"), "the file's budget was hit:\n{}", r.stderr);
    r.expect_code(0);
    let v = p.apply("dev");
    for audit in ["costly_nn(a)", "costly_nn(b)"] {
        assert_eq!(violations(&v, "p.m", audit), 0, "{audit}: {:#}", result(&v, "p.m", audit));
    }
}

/// The verification calls of a file's audit uses shared one budget (twice the file's), and every
/// use after the first with other arguments calls the body again with the first use's: a pure
/// body costing 0.6 of the file's Lua work budget for its first use's arguments only (six plain
/// `string.find`s of 10^8 steps each, deterministic) and nothing for the others, used with 8
/// arguments in one file, spent 8 × 0.6 of it there and the file failed at the fourth use ("the
/// calls efmesh makes to check that audit bodies keep no state exceeded their own …"). Each
/// use's verification calls have a budget of their own: it loads.
#[test]
fn a_pure_audit_body_costly_for_its_first_uses_arguments_only_used_eight_times_in_one_file_loads() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "audits/slow_first.lua",
        "local hay = string.rep(\"x\", 999999)\n\
         define_audit { name = \"slow_first\", params = { \"column\" },\n  query = function(self, args)\n    \
         if args.column == \"a\" then for _ = 1, 6 do string.find(hay, string.rep(\"y\", 99), 1, true) end end\n    \
         return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column)\n  end }\n",
    );
    let columns = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let schema = columns.iter().map(|c| format!("{{ \"{c}\", \"integer\" }}")).collect::<Vec<_>>().join(", ");
    let select = columns.iter().enumerate().map(|(i, c)| format!("{i} AS {c}")).collect::<Vec<_>>().join(", ");
    let uses = columns.iter().map(|c| format!("audit.slow_first(\"{c}\")")).collect::<Vec<_>>().join(", ");
    p.write(
        "models/m.lua",
        &format!("define_model {{ name = \"p.m\", kind = kind.full(), schema = {{ {schema} }}, query = \"SELECT {select}\",\n  audits = {{ {uses} }} }}\n"),
    );
    let r = p.run(&["check"]);
    assert!(!r.stderr.contains("budget") && !r.stdout.contains("budget"), "a budget was hit:\n{}{}", r.stdout, r.stderr);
    r.expect_code(0);
    let v = p.apply("dev");
    for c in columns {
        let audit = format!("slow_first({c})");
        assert_eq!(violations(&v, "p.m", &audit), 0, "{audit}: {:#}", result(&v, "p.m", &audit));
    }
}

/// A verification call that spins (a counter: the body loops at its fourth call, the second
/// use's call again) trips the budget of that use's verification calls, and the message says
/// it is theirs and gives it in full: Lua said "their own budget of 999 ms" (what the first
/// use's calls had left of one budget shared by the file), Rhai "evaluation exceeded its budget
/// of 500 ms" (the file's). Both now give the budget of one use's verification calls (Lua's
/// time or work budget, whichever a tight loop spends first).
#[test]
fn a_spent_verification_budget_is_reported_as_the_verification_calls_own_per_use_budget() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "audits/spin.lua",
        "local n = 0\n\
         define_audit { name = \"spin\", params = { \"column\" },\n  query = function(self, args)\n    \
         n = n + 1\n    if n == 4 then while true do end end\n    \
         return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column)\n  end }\n",
    );
    p.write(
        "models/m.lua",
        "define_model { name = \"p.m\", kind = kind.full(), schema = { { \"a\", \"integer\" }, { \"b\", \"integer\" } }, query = \"SELECT 1 AS a, 2 AS b\",\n  \
         audits = { audit.spin(\"a\"), audit.spin(\"b\") } }\n",
    );
    p.write(
        "audits/spin.rhai",
        r#"let n = 0;
define_audit(#{ name: "rspin", params: ["column"], query: |rel, args| {
  n += 1;
  if n == 4 { let a = []; a.pad(90000, "some text"); loop { let b = a; b.reverse(); } }
  `SELECT * FROM ${rel} WHERE ${args.column} IS NULL`
} });
"#,
    );
    p.write(
        "models/r.rhai",
        r#"define_model(#{ name: "p.r", kind: kind::full(), schema: [["a", "integer"], ["b", "integer"]], query: "SELECT 1 AS a, 2 AS b",
  audits: [audit("rspin", "a"), audit("rspin", "b")] });
"#,
    );
    let r = p.run(&["check"]);
    r.expect_code(1);
    let said = format!("{}{}", r.stdout, r.stderr);
    let theirs = "the calls efmesh makes to check that audit bodies keep no state exceeded their own";
    let lua = said.lines().find(|l| l.starts_with("models/m.lua:2:") && l.contains(theirs));
    assert!(lua.is_some_and(|l| l.contains("budget of 1000 ms per audit use") || l.contains("work budget of 2000000000 steps per audit use")), "{said}");
    assert!(said.lines().any(|l| l.starts_with("models/r.rhai:2:") && l.contains(&format!("{theirs} budget of 1000 ms per audit use"))), "{said}");
    assert!(!said.contains("evaluation exceeded its budget"), "{said}");
}

/// How many times a body is called, as docs/audits.md says: the first use of given arguments
/// twice (and once more with the first use's arguments when they differ), every later use with
/// them once. A body printing its argument at each call, used with `a`, `b`, `a`, `a` in one
/// model file: `a` printed 2 + 1 + 1 + 1 = 5 times (it was 7: two calls at every use), `b`
/// twice; and a counter still refused there (its one call compared with the recorded answer).
#[test]
fn an_audit_body_is_called_once_at_a_later_use_with_the_same_arguments_and_a_counter_is_still_refused() {
    let p = project(EngineBackend::DuckDb);
    p.write(
        "audits/pnn.lua",
        "define_audit { name = \"pnn\", params = { \"column\" },\n  query = function(self, args)\n    print(\"PNN<\" .. args.column .. \">\")\n    \
         return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column)\n  end }\n",
    );
    p.write(
        "models/m.lua",
        "define_model { name = \"p.m\", kind = kind.full(), schema = { { \"a\", \"integer\" }, { \"b\", \"integer\" } }, query = \"SELECT 1 AS a, 2 AS b\",\n  \
         audits = { audit.pnn(\"a\"), audit.pnn(\"b\"), audit.pnn { \"a\", blocking = false }, audit.pnn { \"a\", scope = \"whole\" } } }\n",
    );
    let r = p.run(&["check"]);
    r.expect_code(0);
    let count = |tag: &str| r.stderr.lines().filter(|l| l.contains(tag)).count();
    assert_eq!((count("PNN<a>"), count("PNN<b>")), (5, 2), "{}", r.stderr);
    // A counter (the real check at its first call, `AND false` after) used three times with
    // the same arguments in one file: the first use's two calls differ, the later uses' one
    // call differs from the recorded answer; each is refused.
    p.write(
        "audits/pnn.lua",
        "local n = 0\n\
         define_audit { name = \"pnn\", params = { \"column\" },\n  query = function(self, args)\n    n = n + 1\n    \
         return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column) .. (n > 1 and \" AND false\" or \"\")\n  end }\n",
    );
    p.write(
        "models/m.lua",
        "define_model { name = \"p.m\", kind = kind.full(), schema = { { \"a\", \"integer\" } }, query = \"SELECT 1 AS a\",\n  \
         audits = { audit.pnn(\"a\"),\n    audit.pnn { \"a\", blocking = false },\n    audit.pnn { \"a\", scope = \"whole\" } } }\n",
    );
    let r = p.run(&["check"]);
    r.expect_code(1);
    let said = format!("{}{}", r.stdout, r.stderr);
    let refused =
        |at: &str, what: &str| said.lines().any(|l| l.starts_with(at) && l.contains(what) && l.contains("an audit body must depend on its arguments alone"));
    assert!(refused("models/m.lua:2:", "and then `SELECT * FROM <relation> WHERE a IS NULL AND false` for the same arguments"), "{said}");
    for at in ["models/m.lua:3:", "models/m.lua:4:"] {
        assert!(refused(at, "for its use at models/m.lua:2 and then `SELECT * FROM <relation> WHERE a IS NULL AND false` here"), "{at}: {said}");
    }
}
