//! Pre/post statements (issue #16 part 5): SQL run before and after a model's write, in the same
//! engine transaction (so a failed batch rolls them back), fingerprinted only when declared
//! data-relevant (`statements_affect_data`).

use crate::common::{EngineBackend, Project, Rows, action};
use crate::on_every_engine;

on_every_engine!(
    pre_and_post_statements_run_in_every_batch_with_its_bounds,
    pre_statements_are_rolled_back_with_a_failed_batch,
    a_failing_post_statement_rolls_back_the_batchs_data,
    a_statement_the_engine_cannot_run_in_the_writes_transaction_is_a_load_error,
    a_post_statement_changing_rows_after_an_upsert_that_changes_none_moves_the_generation,
);

/// A project of `.sql` models on `engine`: the source `raw.ev` (one row a day, 2026-01-01 to
/// 2026-01-04, `v` as text: `v3` on day 3), the log table `ops.log`, the external `s.ev`.
fn project(engine: EngineBackend, v3: &str) -> Project {
    let mut p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.execute_on_engine(&format!(
        "CREATE SCHEMA raw; CREATE TABLE raw.ev (day date, v varchar); \
         INSERT INTO raw.ev VALUES (DATE '2026-01-01', '1'), (DATE '2026-01-02', '2'), (DATE '2026-01-03', '{v3}'), (DATE '2026-01-04', '4'); \
         CREATE SCHEMA ops; CREATE TABLE ops.log (what varchar, d date)"
    ));
    p.write("models/ev.sql", "-- name: s.ev\n-- kind: external(table = raw.ev)\n-- schema: day date, v varchar\n");
    p.now = "2026-01-05T00:00:00Z".into();
    p
}

/// `t.events`: a daily time-range model, one interval per batch, with `pre` and `post` statements
/// around its query (the `.sql` layout: statements before the query are pre-statements, after it
/// post-statements).
fn events(pre: &str, post: &str) -> String {
    format!(
        "-- name: t.events
-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = day, batch_size = 1)
-- schema: day date, n integer
-- refs: s.ev
{pre}
SELECT day, CAST(v AS integer) AS n FROM @ref(s.ev) WHERE day BETWEEN @start_date AND @end_date;
{post}
"
    )
}

/// The log rows, `what` and the day as text, in order.
fn log(p: &Project) -> Rows {
    p.query("SELECT what, CAST(d AS varchar) FROM ops.log ORDER BY d, what")
}

fn row(what: &str, d: &str) -> Vec<Option<String>> {
    vec![Some(what.into()), Some(d.into())]
}

/// The physical table of `t.events` (the only one), qualified.
fn events_table(p: &Project) -> String {
    let tables = p.physical_tables();
    let t = tables.iter().find(|t| t.starts_with("t__events")).unwrap_or_else(|| panic!("no physical table of t.events: {tables:?}"));
    format!("_efmesh.\"{t}\"")
}

fn pre_and_post_statements_run_in_every_batch_with_its_bounds(engine: EngineBackend) {
    let p = project(engine, "3");
    p.write(
        "models/events.sql",
        &events(
            "INSERT INTO ops.log VALUES ('pre', @start_date);",
            "INSERT INTO ops.log SELECT 'post', max(day) FROM @this;\nCREATE INDEX IF NOT EXISTS events_day ON @this (day)",
        ),
    );
    p.apply("dev");
    let days = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"];
    // One pre and one post row per batch (one day each); the post-statement read the model's own
    // table after the batch's write (`@this`), so it saw the batch's day.
    let want: Rows = days.iter().flat_map(|d| [row("post", d), row("pre", d)]).collect();
    assert_eq!(log(&p), want);
    // The index the post-statement created is on the version's table.
    let indexes = if p.on_postgres() {
        p.query("SELECT tablename FROM pg_indexes WHERE schemaname = '_efmesh' AND indexname = 'events_day'")
    } else {
        p.query("SELECT table_name FROM duckdb_indexes() WHERE schema_name = '_efmesh' AND index_name = 'events_day'")
    };
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    assert!(indexes[0][0].as_deref().is_some_and(|t| t.starts_with("t__events")), "{indexes:?}");
    assert_eq!(p.rows("dev__t.events").len(), 4);
}

fn pre_statements_are_rolled_back_with_a_failed_batch(engine: EngineBackend) {
    // Day 3's value does not cast: the third batch's query fails after its pre-statement wrote
    // its log row.
    let p = project(engine, "oops");
    p.write("models/events.sql", &events("INSERT INTO ops.log VALUES ('pre', @start_date);", ""));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/events.sql:1") && run.stderr.contains("t.events") && run.stderr.contains("2026-01-03"), "{}", run.stderr);
    // The failed batch's pre-statement row was rolled back with it; the earlier batches' rows
    // were committed with their data.
    assert_eq!(log(&p), vec![row("pre", "2026-01-01"), row("pre", "2026-01-02")]);
    assert_eq!(p.query(&format!("SELECT count(*) FROM {}", events_table(&p))), vec![vec![Some("2".to_string())]]);
    // Nothing was promoted.
    assert!(!p.relations().iter().any(|r| r.starts_with("dev__t.")), "{:?}", p.relations());
    // The earlier intervals stay done: after the fix, the next apply computes days 3 and 4 only.
    p.execute_on_engine("UPDATE raw.ev SET v = '3' WHERE v = 'oops'");
    p.apply("dev");
    assert_eq!(log(&p).len(), 4, "{:?}", log(&p));
    assert_eq!(p.rows("dev__t.events").len(), 4);
}

fn a_failing_post_statement_rolls_back_the_batchs_data(engine: EngineBackend) {
    let p = project(engine, "3");
    // The log refuses a second row for a day: day 2's post-statement fails.
    p.execute_on_engine("CREATE TABLE ops.seen (d date PRIMARY KEY); INSERT INTO ops.seen VALUES (DATE '2026-01-02')");
    p.write(
        "models/events.sql",
        &events("", "INSERT INTO ops.log VALUES ('post', @start_date);\n-- a comment between statements\nINSERT INTO ops.seen VALUES (@start_date)"),
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    // The error names the model's file:line, the batch and which statement failed (its own line).
    assert!(
        err.contains("models/events.sql:1") && err.contains("2026-01-02") && err.contains("post-statement 2 of model `t.events` (models/events.sql:9)"),
        "{err}"
    );
    // Day 2's rows and its first post-statement's row are gone with the batch; day 1 stays.
    assert_eq!(log(&p), vec![row("post", "2026-01-01")]);
    assert_eq!(p.query(&format!("SELECT CAST(day AS varchar) FROM {}", events_table(&p))), vec![vec![Some("2026-01-01".to_string())]]);
    assert!(!p.relations().iter().any(|r| r.starts_with("dev__t.")), "nothing promoted: {:?}", p.relations());
}

/// A `full` model in Lua whose post-statement logs each build.
const LUA_FULL: &str = r#"
define_model {
  name = "m.full",
  kind = kind.full(),
  schema = { { "x", "integer" } },
  query = "SELECT 1 AS x",
  post_statements = { "INSERT INTO ops.log VALUES ('built-a', DATE '2026-01-01')" },
}
"#;

/// A unique-key model in Rhai whose statements are declared data-relevant.
const RHAI_KEYED: &str = r#"
define_model(#{
  name: "m.keyed",
  kind: kind::incremental_by_unique_key(#{ key: "id" }),
  schema: [["id", "integer"], ["v", "varchar"]],
  query: "SELECT 1 AS id, 'a' AS v",
  pre_statements: ["INSERT INTO ops.log VALUES ('keyed-a', DATE '2026-01-01')"],
  statements_affect_data: true,
});
"#;

#[test]
fn a_metadata_statement_edit_does_not_rebuild_and_a_data_relevant_one_does() {
    let p = Project::new();
    p.write(
        "efmesh.toml",
        &p.config_with("").replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\", \"models/**/*.rhai\", \"models/**/*.sql\"]"),
    );
    p.execute_on_engine("CREATE SCHEMA ops; CREATE TABLE ops.log (what varchar, d date)");
    p.write("models/full.lua", LUA_FULL);
    p.write("models/keyed.rhai", RHAI_KEYED);
    let first = p.apply("dev");
    let whats = |p: &Project| -> Vec<String> { p.query("SELECT what FROM ops.log ORDER BY what").into_iter().filter_map(|r| r[0].clone()).collect() };
    assert_eq!(whats(&p), ["built-a", "keyed-a"]);

    // Statements not declared data-relevant are metadata: an edit is a `metadata` change, no rebuild.
    p.write("models/full.lua", &LUA_FULL.replace("built-a", "built-b"));
    let plan = p.plan("dev");
    let a = action(&plan, "m.full");
    assert_eq!(a["change"], "metadata", "{plan:#}");
    assert_eq!(a["build"], false, "{plan:#}");
    assert_eq!(a["fingerprint"], action(&first, "m.full")["fingerprint"]);
    p.apply("dev");
    assert_eq!(whats(&p), ["built-a", "keyed-a"], "a metadata change builds nothing");

    // Declared data-relevant: the edit is a breaking change that rebuilds, running the new statement.
    p.write("models/keyed.rhai", &RHAI_KEYED.replace("keyed-a", "keyed-b"));
    let plan = p.plan("dev");
    let k = action(&plan, "m.keyed");
    assert_eq!(k["change"], "breaking", "{plan:#}");
    assert_eq!(k["build"], true, "{plan:#}");
    assert!(plan.to_string().contains("pre/post statements changed"), "{plan:#}");
    p.apply("dev");
    assert_eq!(whats(&p), ["built-a", "keyed-a", "keyed-b"]);
    // Formatting is not a data edit: whitespace and keyword case leave the fingerprint alone.
    p.write("models/keyed.rhai", &RHAI_KEYED.replace("keyed-a", "keyed-b").replace("INSERT INTO ops.log VALUES", "insert  into ops.log  values"));
    assert_eq!(action(&p.plan("dev"), "m.keyed")["change"], "metadata");

    // The next build of the full model runs the statement as it now stands (the metadata edit).
    p.write("models/full.lua", &LUA_FULL.replace("built-a", "built-b").replace("SELECT 1 AS x", "SELECT 2 AS x"));
    p.apply("dev");
    assert_eq!(whats(&p), ["built-a", "built-b", "keyed-a", "keyed-b"]);
    // `efmesh run` refreshes the unique-key model: its pre-statement (as last applied, reformatted)
    // runs again in the upsert's transaction.
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(whats(&p), ["built-a", "built-b", "keyed-a", "keyed-b", "keyed-b"]);
}

#[test]
fn an_unparsable_or_misplaced_statement_is_a_load_error_naming_file_and_line() {
    let p = Project::new();
    p.write(
        "efmesh.toml",
        &p.config_with("").replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\", \"models/**/*.rhai\", \"models/**/*.sql\"]"),
    );
    p.write("models/a.sql", "-- name: m.a\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x;\n\nCREATE INDEKS i ON @this (x)\n");
    p.write(
        "models/b.lua",
        "\ndefine_model {\n  name = \"m.b\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\",\n  pre_statements = { \"SET threads = 2\", \"SET a = 1; SET b = 2\" },\n}\n",
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("models/a.sql:6: model `m.a`: post-statement 1: cannot parse SQL"), "{err}");
    assert!(err.contains("models/b.lua:2: model `m.b`: pre-statement 2: the text holds 2 statements"), "{err}");
    assert!(!err.contains("pre-statement 1"), "`SET threads = 2` parses: {err}");

    // Bounds in a model without intervals, a second query in a `.sql` body, a `ref` in a statement.
    p.write("models/a.sql", "-- name: m.a\n-- kind: full\n-- schema: x integer\nDELETE FROM ops.log WHERE d < @start_date;\nSELECT 1 AS x\n");
    p.write("models/b.lua", "define_model {\n  name = \"m.b\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\",\n}\n");
    p.write("models/c.sql", "-- name: m.c\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x;\nSELECT 2 AS x\n");
    p.write(
        "models/d.rhai",
        "let b = ref(\"m.b\");\ndefine_model(#{ name: \"m.d\", kind: kind::full(), schema: [[\"x\", \"integer\"]], query: `SELECT x FROM ${b}`,\n  post_statements: [`ANALYZE ${b}`] });\n",
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("models/a.sql:4: model `m.a`: `pre_statements`[1] uses interval bounds"), "{err}");
    assert!(err.contains("models/c.sql:5: model `m.c`: a second query in the body"), "{err}");
    assert!(err.contains("models/d.rhai:2: model `m.d`: `post_statements`[1] uses `ref`/`cols`"), "{err}");
}

/// A `;` inside a dollar-quoted string (`$$;$$`) is no statement separator: a one-query `.sql`
/// model using one loads, builds and stays a model without statements.
#[test]
fn a_semicolon_inside_a_dollar_quoted_string_does_not_split_the_body() {
    let p = project(EngineBackend::DuckDb, "3");
    p.write(
        "models/parts.sql",
        "-- name: t.parts\n-- kind: full\n-- schema: day date, first varchar\n-- refs: s.ev\nSELECT day, string_split(v || $$;x$$, $$;$$)[1] AS first FROM @ref(s.ev)\n",
    );
    p.apply("dev");
    let rows = p.rows(&format!("(SELECT CAST(day AS VARCHAR), first FROM {} WHERE day = DATE '2026-01-02')", crate::common::env_view("dev", "t.parts")));
    assert_eq!(rows, vec![vec![Some("2026-01-02".to_string()), Some("2".to_string())]]);
}

/// Pre/post statements run inside the write's transaction: a statement the engine refuses in a
/// transaction block (Postgres's `VACUUM`, `CREATE INDEX CONCURRENTLY`…, DuckDB's `CHECKPOINT`),
/// and transaction control on either engine, is a load error at its own line saying why, not a
/// failure at apply; what the engine runs in a transaction (`ANALYZE`, DuckDB's `VACUUM`…) loads
/// and runs.
fn a_statement_the_engine_cannot_run_in_the_writes_transaction_is_a_load_error(engine: EngineBackend) {
    let p = project(engine, "3");
    let pg = p.on_postgres();
    let why = "cannot run inside a transaction block";
    let refused: Vec<(&str, String)> = if pg {
        vec![
            ("VACUUM @this", format!("`VACUUM` {why} (Postgres)")),
            ("CREATE INDEX CONCURRENTLY events_day ON @this (day)", format!("`CREATE INDEX CONCURRENTLY` {why} (Postgres)")),
            ("REINDEX TABLE CONCURRENTLY @this", format!("`REINDEX … CONCURRENTLY` {why} (Postgres)")),
            ("CREATE DATABASE scratch", format!("`CREATE DATABASE` {why} (Postgres)")),
            ("COMMIT", "`COMMIT` controls transactions".to_string()),
        ]
    } else {
        vec![
            ("CHECKPOINT", format!("`CHECKPOINT` {why} (DuckDB")),
            ("FORCE CHECKPOINT", format!("`FORCE CHECKPOINT` {why} (DuckDB)")),
            ("BEGIN TRANSACTION", "`BEGIN` controls transactions".to_string()),
            ("ROLLBACK", "`ROLLBACK` controls transactions".to_string()),
        ]
    };
    let pre: Vec<&str> = refused.iter().map(|(st, _)| *st).collect();
    p.write("models/events.sql", &events(&format!("{};", pre.join(";\n")), ""));
    for cmd in [&["check"][..], &["plan", "dev"]] {
        let run = p.run(cmd);
        run.expect_code(1);
        let out = format!("{}{}", run.stdout, run.stderr);
        // The pre-statements start at line 5 of the file, one a line.
        for (k, (_, needle)) in refused.iter().enumerate() {
            let at = format!("models/events.sql:{}: model `t.events`: pre-statement {}: {needle}", 5 + k, k + 1);
            assert!(out.contains(&at), "{cmd:?}: lacks {at:?}:\n{out}");
        }
        assert!(out.contains("pre/post statements run inside the write's transaction"), "{out}");
    }
    assert!(!p.relations().iter().any(|r| r.starts_with("_efmesh.")), "nothing built: {:?}", p.relations());

    // What the engine runs inside a transaction loads, and runs in every batch.
    let accepted = if pg { "ANALYZE @this;\nREINDEX TABLE @this;\nCHECKPOINT" } else { "VACUUM;\nANALYZE;\nVACUUM @this" };
    p.write("models/events.sql", &events("", accepted));
    p.apply("dev");
    assert_eq!(p.rows("dev__t.events").len(), 4);
}

/// A unique-key model whose query always upserts the same row (the upsert changes nothing after
/// the first build) and whose post-statement adds the rows of `ops.extra` it lacks, and a `full`
/// rollup counting it (`plus` added: dev's edit gives dev a rollup version of its own).
fn keyed_with_post(plus: u32) -> String {
    format!(
        r#"
local u = define_model {{
  name = "t.u", kind = kind.incremental_by_unique_key {{ key = "id" }},
  schema = {{ {{ "id", "bigint" }}, {{ "v", "varchar" }} }},
  query = "SELECT CAST(1 AS BIGINT) AS id, 'a' AS v",
  post_statements = {{ "INSERT INTO @this SELECT id, v FROM ops.extra WHERE id NOT IN (SELECT id FROM @this)" }},
}}
define_model {{
  name = "t.r", kind = kind.full(),
  schema = {{ {{ "n", "bigint" }}, {{ "vs", "varchar" }} }},
  query = "SELECT count(*) + {plus} AS n, string_agg(v, ',' ORDER BY id) AS vs FROM " .. ref(u),
}}
"#
    )
}

/// Pre/post statements count as a data change (invariant 57): a unique-key write whose upsert
/// changes no row but whose post-statement adds one moves the model's data generation, so the
/// `full` rollups over it — the one `run` refreshes in the same environment and the one another
/// environment serves — are rebuilt and see the added row.
fn a_post_statement_changing_rows_after_an_upsert_that_changes_none_moves_the_generation(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.execute_on_engine("CREATE SCHEMA ops; CREATE TABLE ops.extra (id bigint, v varchar)");
    p.now = "2026-01-10T00:00:00Z".to_string();
    p.write("models/m.lua", &keyed_with_post(0));
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    p.write("models/m.lua", &keyed_with_post(10));
    p.run(&["apply", "dev", "--yes"]).expect_code(0);
    let row = |n: &str, vs: &str| vec![vec![Some(n.to_string()), Some(vs.to_string())]];
    assert_eq!(p.rows(&crate::common::env_view("dev", "t.r")), row("11", "a"));
    assert_eq!(p.plan("dev")["hasChanges"], false);

    // prod's run: the upsert writes the same row again (no change), the post-statement adds id 2.
    p.execute_on_engine("INSERT INTO ops.extra VALUES (2, 'b')");
    p.write("models/m.lua", &keyed_with_post(0));
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(p.rows(&crate::common::env_view("prod", "t.u")).len(), 2, "the post-statement added a row");
    assert_eq!(p.rows(&crate::common::env_view("prod", "t.r")), row("2", "a,b"), "prod's rollup was rebuilt in the same run");

    // dev serves the same `t.u` version: its own rollup is marked, naming the parent, and rebuilt.
    p.write("models/m.lua", &keyed_with_post(10));
    let plan = p.plan("dev");
    let r = action(&plan, "t.r");
    assert_eq!(r["rebuild"], true, "{plan:#}");
    assert!(r["rebuildReason"].as_str().unwrap_or_default().contains("t.u"), "{plan:#}");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(p.rows(&crate::common::env_view("dev", "t.r")), row("12", "a,b"));
}

/// A `.sql` statement's line is the line of the file as written: macro calls expanding to
/// several lines (in a pre-statement and in the query) shift no statement after them, at load
/// (a statement that does not parse) or at apply (the statement's comment in an engine error).
#[test]
fn a_statement_after_a_multi_line_macro_is_located_at_its_line_as_written() {
    let p = project(EngineBackend::DuckDb, "3");
    p.write("macros/m.lua", "define_macro(\"flag\", function(c)\n  return \"CASE\\n  WHEN \" .. c .. \" IS NULL THEN 0\\n  ELSE 1\\nEND\"\nend)\n");
    let model = |post: &str| {
        format!(
            "-- name: t.m\n-- kind: full\n-- schema: x integer\nINSERT INTO ops.log VALUES (CAST(@flag(1) AS varchar), DATE '2026-01-01');\n\
             SELECT @flag(2) AS x;\n\n{post}\n"
        )
    };
    p.write("models/m.sql", &model("CREATE INDEKS i ON @this (x)"));
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/m.sql:7: model `t.m`: post-statement 1: cannot parse SQL"), "{}", run.stderr);

    // At apply: the failing statement's comment names its line as written.
    p.write("models/m.sql", &model("INSERT INTO ops.missing VALUES (1)"));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("post-statement 1 of model `t.m` (models/m.sql:7)"), "{}", run.stderr);
    // The pre-statement (line 4) ran with the macro expanded, and was rolled back with the build.
    assert_eq!(log(&p), Vec::<Vec<Option<String>>>::new());
    p.write("models/m.sql", &model("ANALYZE @this"));
    p.apply("dev");
    assert_eq!(log(&p), vec![row("1", "2026-01-01")]);
    assert_eq!(p.rows(&crate::common::env_view("dev", "t.m")), vec![vec![Some("1".to_string())]]);
}

#[test]
fn a_time_zone_set_by_a_pre_statement_moves_no_interval_bound() {
    // `SET TimeZone` in a pre-statement (for local calendar days) stays on the session; the
    // batch's output filter and `DELETE` compare the `timestamptz` time column with UTC instants
    // all the same, so each UTC day holds exactly its rows (the query reads `@start`, a naive
    // UTC literal, as UTC with `AT TIME ZONE 'UTC'`, as docs/models.md says).
    let mut p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.sql"));
    p.write(
        "data/ev.csv",
        "ts,v\n2026-03-01 01:00:00+00,1\n2026-03-01 12:00:00+00,2\n2026-03-02 01:00:00+00,3\n2026-03-02 23:30:00+00,4\n2026-03-03 01:00:00+00,5\n",
    );
    p.write("models/raw.sql", "-- name: raw.ev\n-- kind: external(path = data/ev.csv)\n-- schema: ts timestamptz, v bigint\n");
    p.write(
        "models/ev.sql",
        "-- name: s.ev\n-- kind: incremental_by_time_range(time_column = ts, start = 2026-03-01, grain = day, batch_size = 1)\n\
         -- schema: ts timestamptz, v bigint, local_day date\n-- refs: raw.ev\n\
         SET TimeZone = 'America/New_York';\nSELECT ts, v, ts::date AS local_day FROM @ref(raw.ev) WHERE ts >= @start AT TIME ZONE 'UTC' AND ts < @end AT TIME ZONE 'UTC'\n",
    );
    p.now = "2026-03-03T00:00:00Z".into();
    p.apply("prod");
    let rows = |p: &Project| p.query("SELECT v, CAST(local_day AS VARCHAR) FROM s.ev ORDER BY v");
    let want = |vs: &[(&str, &str)]| -> Rows { vs.iter().map(|(v, d)| vec![Some(v.to_string()), Some(d.to_string())]).collect() };
    // New York's days: 03-01 01:00 UTC is the evening of 02-28 there.
    assert_eq!(rows(&p), want(&[("1", "2026-02-28"), ("2", "2026-03-01"), ("3", "2026-03-01"), ("4", "2026-03-02")]));
    // A day later the next UTC day comes, the first two untouched (their rows are not rewritten
    // into a shifted window).
    p.now = "2026-03-04T00:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(rows(&p), want(&[("1", "2026-02-28"), ("2", "2026-03-01"), ("3", "2026-03-01"), ("4", "2026-03-02"), ("5", "2026-03-02")]));
}

#[test]
fn a_local_day_time_column_filtered_in_the_sessions_zone_holds_whole_local_days() {
    // docs/models.md's recipe for local calendar days: the time column is `CAST(ts AS DATE)` in
    // the session's zone, and the query filters `ts` with the plain bounds, which a session in
    // New York reads as local midnights. (Filtered `AT TIME ZONE 'UTC'`, each batch kept 19 of
    // its last local day's 24 hours, the other 5 dropped by both batches' output filters.)
    let mut p = Project::new();
    p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.sql"));
    // One row an hour, 2026-01-01 00:00 to 2026-01-05 04:00 UTC: New York's 2026-01-01 to
    // 2026-01-04 complete.
    p.execute_on_engine(
        "CREATE SCHEMA land; CREATE TABLE land.ev AS SELECT CAST(range AS TIMESTAMPTZ) AS ts \
         FROM range(TIMESTAMPTZ '2026-01-01 00:00:00+00', TIMESTAMPTZ '2026-01-05 05:00:00+00', INTERVAL 1 HOUR)",
    );
    p.write("models/raw.sql", "-- name: raw.ev\n-- kind: external(table = land.ev)\n-- schema: ts timestamptz\n");
    p.write(
        "models/daily.sql",
        "-- name: s.local_daily\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, grain = day, batch_size = 2)\n\
         -- schema: day date, n bigint\n-- refs: raw.ev\n\
         SET TimeZone = 'America/New_York';\nSELECT CAST(ts AS DATE) AS day, count(*) AS n FROM @ref(raw.ev) WHERE ts >= @start AND ts < @end GROUP BY 1;\n\
         SET TimeZone = 'UTC'\n",
    );
    p.now = "2026-01-05T06:00:00Z".into();
    p.apply("prod");
    let days = p.query("SELECT CAST(day AS VARCHAR), CAST(n AS VARCHAR) FROM s.local_daily ORDER BY day");
    let want: Rows = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"].iter().map(|d| vec![Some(d.to_string()), Some("24".to_string())]).collect();
    assert_eq!(days, want, "every local day whole, the last of each batch included");
}

#[test]
fn a_time_column_declared_with_a_zone_the_query_does_not_give_is_refused() {
    // Declared `timestamptz`, returned `timestamp` (or the other way round): the table keeps the
    // query's type, the bounds are written as declared, and the comparison converts one side in
    // the session's time zone, which a `SET TimeZone` moves (rows of each batch's last hours
    // were lost, the interval recorded done). Refused before anything is built.
    for (declared, expr) in [("timestamptz", "CAST(ts AS TIMESTAMP)"), ("timestamp", "ts")] {
        let mut p = Project::new();
        p.write("efmesh.toml", &crate::common::CONFIG.replace("models/**/*.lua", "models/**/*.sql"));
        p.write("data/ev.csv", "ts,v\n2026-03-01 01:00:00+00,1\n2026-03-01 23:00:00+00,2\n");
        p.write("models/raw.sql", "-- name: raw.ev\n-- kind: external(path = data/ev.csv)\n-- schema: ts timestamptz, v bigint\n");
        p.write(
            "models/ev.sql",
            &format!(
                "-- name: s.ev\n-- kind: incremental_by_time_range(time_column = t, start = 2026-03-01, grain = day)\n\
                 -- schema: t {declared}, v bigint\n-- refs: raw.ev\n\
                 SET TimeZone = 'America/New_York';\nSELECT {expr} AS t, v FROM @ref(raw.ev) WHERE ts >= @start AT TIME ZONE 'UTC' AND ts < @end AT TIME ZONE 'UTC'\n"
            ),
        );
        p.now = "2026-03-02T00:00:00Z".into();
        let run = p.run(&["apply", "prod", "--yes"]);
        run.expect_code(1);
        assert!(run.stderr.contains("models/ev.sql:"), "{}", run.stderr);
        assert!(
            run.stderr.contains(&format!("column `t` is declared `{declared}` but the query returns"))
                && run.stderr.contains("one has a time zone and the other none"),
            "{}",
            run.stderr
        );
        assert!(efmesh::state::StateStore::env_pointers(&p.state(), "prod").expect("pointers").is_empty(), "nothing was promoted");
    }
}
