//! The batch-overhead warning of `efmesh check` (`efmesh::sql::pushdown`): a time-range model
//! whose `@start`/`@end` filter cannot reach the scan of what it reads re-reads or re-computes
//! all of it in every batch. The rule agrees with DuckDB's own optimizer on a corpus of view
//! shapes (EXPLAIN shows whether the filter reached the table scan); the hospital example's old
//! shape is warned about and its shipped shape is not; warnings never change the exit code.
//! DuckDB only: the corpus is checked against DuckDB's optimizer, and the other projects read
//! files (externals, the hospital example's lake and DuckLake), which Postgres refuses.

use crate::common::{BIN, Project};
use efmesh::engine::Engine;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// View shapes over `{src}` (a table with `id`, `k`, `t`, `v`), with their output columns.
const SHAPES: &[(&str, &[&str])] = &[
    ("SELECT id, k, t FROM {src}", &["id", "k", "t"]),
    ("SELECT id, k, t FROM {src} QUALIFY row_number() OVER (PARTITION BY id ORDER BY t) = 1", &["id", "k", "t"]),
    ("SELECT id, k, t FROM {src} QUALIFY row_number() OVER (PARTITION BY t, k ORDER BY id) = 1", &["id", "k", "t"]),
    ("SELECT id, k, timezone('UTC', t) AS t FROM {src} QUALIFY row_number() OVER (PARTITION BY id ORDER BY t) = 1", &["id", "k", "t"]),
    ("SELECT DISTINCT k, t FROM {src}", &["k", "t"]),
    ("SELECT k, t, count(*) AS n FROM {src} GROUP BY k, t", &["k", "t", "n"]),
    ("SELECT k, t, count(*) AS n FROM {src} GROUP BY ALL", &["k", "t", "n"]),
    ("SELECT k, max(t) AS t FROM {src} GROUP BY k", &["k", "t"]),
    ("SELECT max(t) AS t FROM {src}", &["t"]),
    ("SELECT id, k, t FROM {src} ORDER BY t LIMIT 1000", &["id", "k", "t"]),
    ("SELECT DISTINCT ON (id) id, k, t FROM {src} ORDER BY id, t", &["id", "k", "t"]),
    ("SELECT DISTINCT ON (t) id, k, t FROM {src} ORDER BY t, id", &["id", "k", "t"]),
    ("SELECT id, k, t, sum(v) OVER (PARTITION BY k ORDER BY t) AS running FROM {src}", &["id", "k", "t", "running"]),
    ("WITH x AS (SELECT id, k, t FROM {src}) SELECT * FROM x", &["id", "k", "t"]),
    ("WITH x AS (SELECT *, row_number() OVER (PARTITION BY id) AS rn FROM {src}) SELECT id, k, t FROM x WHERE rn = 1", &["id", "k", "t"]),
    ("SELECT e.id, e.k, e.t FROM (SELECT *, row_number() OVER (PARTITION BY id) AS rn FROM {src}) AS e WHERE rn = 1", &["id", "k", "t"]),
    ("SELECT id, k, t + INTERVAL 1 HOUR AS t FROM {src}", &["id", "k", "t"]),
    ("SELECT e.id, e.k, e.t FROM {src} AS e LEFT JOIN (SELECT DISTINCT k FROM {src}) AS d ON d.k = e.k", &["id", "k", "t"]),
    ("SELECT * FROM {src} WINDOW w AS (PARTITION BY k ORDER BY t) QUALIFY row_number() OVER w = 1", &["id", "k", "t", "v"]),
    // Keys spelled otherwise than the output column: by position, qualified, and `*` against a
    // qualified partition key.
    ("SELECT t, k, count(*) AS n FROM {src} GROUP BY 1, 2", &["t", "k", "n"]),
    ("SELECT t, count(*) AS n FROM {src} AS e GROUP BY e.t", &["t", "n"]),
    ("SELECT *, row_number() OVER (PARTITION BY e.t ORDER BY e.id) AS rn FROM {src} AS e", &["id", "k", "t", "v", "rn"]),
];

const EVENTS: &str =
    "CREATE TABLE main.events AS SELECT i AS id, 'k' || (i % 5) AS k, TIMESTAMP '2026-01-01' + to_minutes(i) AS t, i * 1.0 AS v FROM range(20000) r(i)";

fn ty(c: &str) -> &'static str {
    match c {
        "t" => "timestamp",
        "k" => "varchar",
        "v" | "running" => "double",
        _ => "bigint",
    }
}

/// A project with the external table `raw.events` and, per shape `i`, the view `s.v<i>` and the
/// daily time-range model `m.b<i>` reading it on `t`.
fn shapes_project() -> Project {
    let p = Project::new();
    let mut lua = String::from(
        "define_model { name = \"raw.events\", kind = kind.external { table = \"main.events\" },\n  schema = { { \"id\", \"bigint\" }, { \"k\", \"varchar\" }, { \"t\", \"timestamp\" }, { \"v\", \"double\" } } }\n",
    );
    for (i, (sql, cols)) in SHAPES.iter().enumerate() {
        let schema = cols.iter().map(|c| format!("{{ \"{c}\", \"{}\" }}", ty(c))).collect::<Vec<_>>().join(", ");
        let query = sql.replace("{src}", "]] .. ref(\"raw.events\") .. [[");
        lua.push_str(&format!("define_model {{ name = \"s.v{i}\", kind = kind.view(), schema = {{ {schema} }}, query = [[{query}]] }}\n"));
        lua.push_str(&format!(
            "define_model {{ name = \"m.b{i}\", kind = kind.incremental_by_time_range {{ time_column = \"t\", start = \"2026-01-01\" }},\n  schema = {{ {{ \"t\", \"timestamp\" }} }},\n  query = \"SELECT t FROM \" .. ref(\"s.v{i}\") .. \" WHERE t >= @start AND t < @end\" }}\n"
        ));
    }
    p.write("models/all.lua", &lua);
    p
}

/// The filters DuckDB put into each table scan of `plan` (an `EXPLAIN (FORMAT JSON)` tree).
fn scan_filters(node: &Value, out: &mut Vec<String>) {
    if node["name"].as_str().is_some_and(|n| n.ends_with("_SCAN")) {
        out.push(node["extra_info"]["Filters"].as_str().unwrap_or_default().to_string());
    }
    for c in node["children"].as_array().into_iter().flatten() {
        scan_filters(c, out);
    }
}

#[test]
fn the_warning_agrees_with_duckdbs_filter_pushdown() {
    let p = shapes_project();
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).unwrap();
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let mut db = efmesh::engine::duckdb::DuckDb::in_memory().unwrap();
    db.execute(EVENTS).unwrap();
    let (mut warned, mut pushed) = (0, 0);
    for (i, (sql, _)) in SHAPES.iter().enumerate() {
        let model = project.dag.get(&efmesh::core::ModelName::parse(&format!("m.b{i}")).unwrap()).unwrap();
        let rescans = efmesh::sql::pushdown::batch_rescans(&project.dag, model);
        db.execute(&format!("CREATE OR REPLACE VIEW main.vv AS {}", sql.replace("{src}", "main.events"))).unwrap();
        let rows = db.query("EXPLAIN (FORMAT JSON) SELECT t FROM main.vv WHERE t >= TIMESTAMP '2026-01-02' AND t < TIMESTAMP '2026-01-03'").unwrap();
        let plan: Value = serde_json::from_str(rows[0][1].as_deref().unwrap()).unwrap();
        let mut filters = Vec::new();
        scan_filters(&plan[0], &mut filters);
        // The batch's bound reached a scan of the events table as a filter.
        let reached = filters.iter().any(|f| f.contains("2026-01-02"));
        assert_eq!(rescans.is_empty(), reached, "shape {i} `{sql}`: efmesh says {rescans:?}, DuckDB's scans filter {filters:?}");
        if let Some(r) = rescans.first() {
            assert_eq!((r.parent.to_string(), r.column.as_str(), r.culprit.to_string()), (format!("s.v{i}"), "t", format!("s.v{i}")));
            warned += 1;
        } else {
            pushed += 1;
        }
    }
    assert!(warned >= 8 && pushed >= 8, "the corpus covers both outcomes: {warned} warned, {pushed} pushed");
}

#[test]
fn a_time_range_model_filtering_a_csv_is_warned_about_and_exit_codes_stay() {
    let p = Project::new();
    p.write("data/events.csv", "id,t\n1,2026-01-01 10:00:00\n");
    // Every external's files exist: `check` reads none (the parquet file's bytes do not matter),
    // but warns of a path that matches no file (`missing_source_file`).
    p.write("data/day=2026-01-01/events.csv", "id\n1\n");
    p.write("data/events.parquet", "");
    p.write(
        "models/m.lua",
        r#"local raw = define_model { name = "raw.events", kind = kind.external { path = "data/events.csv" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } } }
define_model { name = "raw.daily_csv", kind = kind.external { path = "data/day=*/events.csv", hive_partitioning = true },
  schema = { { "id", "bigint" }, { "day", "date" } } }
define_model { name = "m.from_hive", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "day", "date" } },
  query = "SELECT id, day FROM " .. ref("raw.daily_csv") .. " WHERE day >= @start AND day < @end" }
local pq = define_model { name = "raw.events_pq", kind = kind.external { path = "data/events.parquet" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } } }
define_model { name = "m.daily", kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } },
  query = "SELECT r.id, r.t FROM " .. ref(raw) .. " AS r WHERE r.t BETWEEN @start AND @end - INTERVAL 1 MICROSECOND" }
define_model { name = "m.daily_pq", kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } },
  query = "SELECT id, t FROM " .. ref(pq) .. " WHERE t >= @start AND t < @end" }
"#,
    );
    let run = p.run(&["check", "--json"]);
    run.expect_code(0);
    let v = run.json();
    assert_eq!(v["ok"], true, "{v:#}");
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "only the CSV is warned about, not the parquet file nor the hive-partitioned CSV files: {v:#}");
    assert_eq!((w[0]["model"].as_str(), w[0]["parent"].as_str(), w[0]["culprit"].as_str()), (Some("m.daily"), Some("raw.events"), Some("raw.events")));
    assert_eq!((w[0]["rule"].as_str(), w[0]["severity"].as_str()), (Some("batch_rescan"), Some("warning")), "{:#}", w[0]);
    assert!(w[0]["file"].as_str().unwrap().ends_with("models/m.lua") && w[0]["line"] == 10, "{:#}", w[0]);
    assert!(w[0]["message"].as_str().unwrap().contains("data/events.csv"), "{:#}", w[0]);
    // The hint's staging table re-reads the file only on a cron (a `full` model without one is
    // rebuilt only when it changes).
    let hint = w[0]["hint"].as_str().unwrap();
    assert!(hint.starts_with("load the file once into a table (a `full` or `incremental_by_unique_key` model reading `raw.events`)"), "{hint}");
    assert!(hint.contains("a `full` one needs a `cron` (e.g. `cron = \"@daily\"`) for `run` to re-read the file"), "{hint}");
    let text = p.run(&["check"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("warning[batch_rescan]: models/m.lua:10: model `m.daily`") && text.stdout.contains("ok: 6 models checked, 1 warning"),
        "{}",
        text.stdout
    );
}

/// The batch_rescan hint's example cron is written in the language of the model warned about:
/// `-- cron: @daily` for a `.sql` model, `cron: "@daily"` for a Rhai one (never Lua's
/// `cron = "@daily"`, which neither language reads).
#[test]
fn the_batch_rescan_hint_spells_the_cron_in_the_models_language() {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
    p.write("data/events.csv", "id,t\n1,2026-01-01 10:00:00\n");
    p.write("models/raw.sql", "-- name:   raw.events\n-- kind:   external(path = data/events.csv)\n-- schema: id bigint, t timestamp\n");
    p.write(
        "models/daily.sql",
        "-- name:   m.daily\n-- kind:   incremental_by_time_range(time_column = t, start = 2026-01-01)\n-- schema: id bigint, t timestamp\n-- refs:   raw.events\n\
         SELECT id, t FROM @ref(raw.events) WHERE t >= @start AND t < @end\n",
    );
    p.write(
        "models/hourly.rhai",
        r#"define_model(#{ name: "m.hourly", kind: kind::incremental_by_time_range(#{ time_column: "t", start: "2026-01-01" }),
  schema: [["id", "bigint"], ["t", "timestamp"]],
  query: `SELECT id, t FROM ${ref("raw.events")} WHERE t >= @start AND t < @end` });
"#,
    );
    let run = p.run(&["check", "--json"]);
    run.expect_code(0);
    let v = run.json();
    let w = v["warnings"].as_array().unwrap_or_else(|| panic!("no warnings: {v:#}"));
    let hint_of = |model: &str| -> String {
        let found = w.iter().find(|w| w["rule"] == "batch_rescan" && w["model"] == model).unwrap_or_else(|| panic!("no batch_rescan for {model}: {v:#}"));
        found["hint"].as_str().unwrap_or_default().to_string()
    };
    let sql = hint_of("m.daily");
    assert!(sql.contains("a `full` one needs a `cron` (e.g. `-- cron: @daily`)") && !sql.contains("cron = "), "{sql}");
    let rhai = hint_of("m.hourly");
    assert!(rhai.contains("a `full` one needs a `cron` (e.g. `cron: \"@daily\"`)") && !rhai.contains("cron = "), "{rhai}");
}

/// `stg.moves` as the hospital example first shipped it: a view deduplicating the CSV feed with
/// a window, which every weekly batch of `med.moves` recomputed over the whole file.
const OLD_STG_MOVES: &str = r#"local src = require("models.sources")

return define_model {
  name        = "stg.moves",
  kind        = kind.view(),
  grain       = { "move_id" },
  schema = {
    { "move_id", "bigint" }, { "case_id", "varchar" }, { "patient_id", "varchar" },
    { "dept", "varchar" }, { "dept_name", "varchar" }, { "event", "varchar" },
    { "moved_at", "timestamptz" }, { "recorded_at", "timestamptz" }, { "is_late", "boolean" },
  },
  query = ([[
SELECT m.move_id, m.case_id, m.patient_id, upper(trim(m.dept)) AS dept, d.name AS dept_name,
       lower(trim(m.event)) AS event, timezone('UTC', m.moved_at) AS moved_at,
       timezone('UTC', m.recorded_at) AS recorded_at,
       m.recorded_at - m.moved_at >= INTERVAL 1 DAY AS is_late
FROM   %s AS m
LEFT JOIN %s AS d ON d.code = upper(trim(m.dept))
QUALIFY row_number() OVER (PARTITION BY m.move_id ORDER BY m.recorded_at) = 1
]]):format(ref(src.moves), ref(src.departments)),
}
"#;

/// `efmesh check --json` on a copy of the hospital example, with `models/stg/moves.lua`
/// replaced when `stg` is given.
fn check_hospital(stg: Option<&str>) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hospital");
    // The external's file too: `check` reads none, but warns of one missing (`missing_source_file`).
    for rel in ["efmesh.toml", "seeds/departments.csv", "data/moves.csv"] {
        fs_err::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
        fs_err::copy(src.join(rel), dir.path().join(rel)).unwrap();
    }
    fn copy_dir(from: &Path, to: &Path) {
        fs_err::create_dir_all(to).unwrap();
        for e in fs_err::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.path().is_dir() { copy_dir(&e.path(), &to.join(e.file_name())) } else { fs_err::copy(e.path(), to.join(e.file_name())).map(|_| ()).unwrap() }
        }
    }
    copy_dir(&src.join("models"), &dir.path().join("models"));
    if let Some(text) = stg {
        fs_err::write(dir.path().join("models/stg/moves.lua"), text).unwrap();
    }
    let out = Command::new(BIN).current_dir(dir.path()).args(["check", "--json"]).env_remove("RUST_LOG").stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_hospital_examples_old_shape_is_warned_about_and_its_shipped_shape_is_not() {
    let old = check_hospital(Some(OLD_STG_MOVES));
    let w = old["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{old:#}");
    assert_eq!((w[0]["model"].as_str(), w[0]["parent"].as_str(), w[0]["column"].as_str()), (Some("med.moves"), Some("stg.moves"), Some("moved_at")));
    let message = w[0]["message"].as_str().unwrap();
    assert!(message.contains("QUALIFY") && message.contains("PARTITION BY") && message.contains("models/stg/moves.lua:3"), "{message}");
    assert!(w[0]["file"].as_str().unwrap().ends_with("models/med/moves.lua"), "{:#}", w[0]);
    assert!(w[0]["hint"].as_str().unwrap().contains("materialise `stg.moves`"), "{:#}", w[0]);
    let shipped = check_hospital(None);
    assert_eq!(shipped["warnings"], serde_json::json!([]), "{shipped:#}");
}
