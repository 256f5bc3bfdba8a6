//! The same project on both engines (DuckDB and Postgres): what each builds, serves, refreshes
//! and refuses. Every model here is written in SQL both engines read the same way, so the rows
//! must be equal; the Postgres-only behaviours (identifier limits, DuckDB-only features) follow.

use crate::common::{EngineBackend, Project, Rows, Run, StateBackend, action, actions};
use crate::{on_every_engine, pg};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// A seed, a `full` model, a `view` over both, a daily time-range model, a unique-key model and
/// an SCD type 2 model, in SQL both engines run.
fn portable_project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("seeds/depts.csv", "code,name\nA,Alpha\nB,Beta\n");
    p.write("models/m.lua", PORTABLE_MODELS);
    p
}

const PORTABLE_MODELS: &str = r#"local M = {}
M.depts = define_model {
  name = "raw.depts",
  kind = kind.seed { path = "seeds/depts.csv" },
  schema = { { "code", "varchar" }, { "name", "varchar" } },
}
M.events = define_model {
  name = "s.events",
  kind = kind.full(),
  schema = { { "id", "integer" }, { "code", "varchar" }, { "happened_at", "timestamp" } },
  query = [[SELECT CAST(i AS INTEGER) AS id, CASE WHEN i % 2 = 0 THEN 'A' ELSE 'B' END AS code,
                   TIMESTAMP '2026-01-01 00:00:00' + i * INTERVAL '7 hours' AS happened_at
            FROM generate_series(1, 40) AS g(i)]],
}
M.named = define_model {
  name = "s.named",
  kind = kind.view(),
  schema = { { "id", "integer" }, { "name", "varchar" } },
  query = "SELECT e.id, d.name FROM " .. ref(M.events) .. " AS e JOIN " .. ref(M.depts) .. " AS d ON d.code = e.code",
}
M.daily = define_model {
  name = "s.daily",
  kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01", ["end"] = "2026-01-05", grain = "day" },
  schema = { { "day", "timestamp" }, { "n", "bigint" } },
  query = "SELECT date_trunc('day', happened_at) AS day, count(*) AS n FROM " .. ref(M.events) .. " WHERE happened_at >= @start AND happened_at < @end GROUP BY 1",
}
M.latest = define_model {
  name = "s.latest",
  kind = kind.incremental_by_unique_key { key = "code" },
  schema = { { "code", "varchar" }, { "n", "bigint" } },
  query = "SELECT code, count(*) AS n FROM " .. ref(M.events) .. " GROUP BY code",
}
M.hist = define_model {
  name = "s.hist",
  kind = kind.scd_type2 { key = "code", columns = { "name" } },
  schema = { { "code", "varchar" }, { "name", "varchar" } },
  query = "SELECT code, name FROM " .. ref(M.depts),
}
return M
"#;

fn strs(rows: &[&[&str]]) -> Vec<Vec<Option<String>>> {
    rows.iter().map(|r| r.iter().map(|v| Some(v.to_string())).collect()).collect()
}

fn built(v: &Value) -> Vec<String> {
    let mut b: Vec<String> = v["built"].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default();
    b.sort();
    b
}

on_every_engine!(
    a_query_that_does_not_bind_is_reported_at_the_line_of_its_sql_file,
    a_project_builds_promotes_and_versions_with_the_same_rows_on_every_engine,
    unique_key_and_scd_type2_models_refresh_on_run,
    restated_intervals_are_recomputed_by_the_next_run,
    the_janitor_drops_unreachable_versions_views_before_the_tables_they_read,
    audits_previews_and_external_tables_work_on_every_engine,
    environment_views_follow_versions_that_drop_reorder_or_add_columns,
    a_value_a_stored_column_would_round_after_its_source_widened_is_refused_on_every_engine,
);

/// `land.acc.amount` is `numeric(10,2)`; a time-range, a unique-key and a `full` model (on a
/// cron) pass it through, so their tables store `numeric(10,2)` too. The source then widens to a
/// double holding 2.504: stored, it would be 2.50. Refused by name, nothing written — on Postgres
/// too, whose described types now carry their sizes (they read `NUMERIC` on both sides, and no
/// value was checked), and whose `full` table is refilled in place rather than replaced. On
/// DuckDB a `full` table is replaced with the query's types: it serves 2.504.
fn a_value_a_stored_column_would_round_after_its_source_widened_is_refused_on_every_engine(engine: EngineBackend) {
    let kinds = [
        (
            "t.acc",
            r#"kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" }"#,
            r#"[[SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, id, amount FROM ]] .. ref("raw.acc") .. [[ WHERE ts >= @start AND ts < @end]]"#,
        ),
        (
            "u.acc",
            r#"kind.incremental_by_unique_key { key = "id" }"#,
            r#"[[SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, id, amount FROM ]] .. ref("raw.acc")"#,
        ),
        ("f.acc", r#"kind.full(), cron = "@daily""#, r#"[[SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, id, amount FROM ]] .. ref("raw.acc")"#),
    ];
    for (name, kind, query) in kinds {
        let mut p = Project::on_engine(engine.another());
        p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.acc (ts TIMESTAMP, id INTEGER, amount NUMERIC(10,2))");
        p.execute_on_engine("INSERT INTO land.acc VALUES (TIMESTAMP '2026-01-01 10:00', 1, 1.25)");
        p.now = "2026-01-02T01:00:00Z".into();
        p.write(
            "models/m.lua",
            &format!(
                r#"define_model {{ name = "raw.acc", kind = kind.external {{ table = "land.acc" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "id", "integer" }}, {{ "amount", "decimal(10,2)" }} }} }}
define_model {{
  name = "{name}", kind = {kind},
  schema = {{ {{ "day", "timestamp" }}, {{ "id", "integer" }}, {{ "amount", "decimal(10,2)" }} }},
  query = {query},
}}
"#
            ),
        );
        p.apply("prod");
        let double = if p.on_postgres() { "DOUBLE PRECISION" } else { "DOUBLE" };
        p.execute_on_engine(&format!("ALTER TABLE land.acc ALTER COLUMN amount SET DATA TYPE {double}"));
        p.execute_on_engine("INSERT INTO land.acc VALUES (TIMESTAMP '2026-01-02 10:00', 2, 2.504)");
        p.now = "2026-01-03T01:00:00Z".into();
        let served = format!("SELECT CAST(amount AS VARCHAR) FROM {} ORDER BY id", crate::common::env_view("prod", name));
        let served = |p: &Project| p.query(&served);
        let before = served(&p);
        let run = p.run(&["run", "prod"]);
        if name == "f.acc" && !p.on_postgres() {
            run.expect_code(0);
            assert_eq!(served(&p).last().and_then(|r| r[0].clone()).as_deref(), Some("2.504"), "{name}: DuckDB replaces the table");
            continue;
        }
        run.expect_code(1);
        assert!(
            run.stderr.contains("models/m.lua:2")
                && run.stderr.contains("column `amount`")
                && run.stderr.contains("which would change 1 of its values")
                && run.stderr.contains("2.504"),
            "{name}: {}",
            run.stderr
        );
        assert_eq!(served(&p), before, "{name}: nothing written");
    }
}

fn environment_views_follow_versions_that_drop_reorder_or_add_columns(engine: EngineBackend) {
    let p = portable_project(engine);
    p.apply("dev");
    let columns = || -> Vec<String> {
        p.query("SELECT column_name FROM information_schema.columns WHERE table_schema = 'dev__s' AND table_name = 'named' ORDER BY ordinal_position")
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect()
    };
    let named = |schema: &str, select: &str| {
        PORTABLE_MODELS.replace(r#"schema = { { "id", "integer" }, { "name", "varchar" } },"#, schema).replace("SELECT e.id, d.name FROM", select)
    };
    assert_eq!(columns(), ["id", "name"]);
    // A view of the user's over the environment view: a new version with the same columns is
    // promoted under it (the view is replaced in place), and it reads the new version.
    p.query("CREATE SCHEMA usr");
    p.query("CREATE VIEW usr.mine AS SELECT * FROM dev__s.named");
    p.write("models/m.lua", &named(r#"schema = { { "id", "integer" }, { "name", "varchar" } },"#, "SELECT e.id * 1 AS id, d.name FROM"));
    let v = p.apply("dev");
    assert_eq!(built(&v), ["s.named"], "{v:#}");
    assert_eq!(p.query("SELECT count(*), min(name) FROM usr.mine")[0], [Some("40".into()), Some("Alpha".into())]);
    p.query("DROP VIEW usr.mine");
    // A column dropped: the environment view (and the view model's own) cannot keep it.
    p.write("models/m.lua", &named(r#"schema = { { "id", "integer" } },"#, "SELECT e.id FROM"));
    p.apply("dev");
    assert_eq!(columns(), ["id"]);
    assert_eq!(p.query("SELECT count(*) FROM dev__s.named")[0][0].as_deref(), Some("40"));
    // Reordered, with a column added.
    p.write("models/m.lua", &named(r#"schema = { { "name", "varchar" }, { "id", "integer" } },"#, "SELECT d.name, e.id FROM"));
    if p.on_postgres() {
        // A view of the user's over the environment view: Postgres cannot re-create the view
        // under it and efmesh never cascades: the promotion fails naming it, nothing changes.
        p.query("CREATE VIEW public.mine AS SELECT * FROM dev__s.named");
        let r = p.run(&["apply", "dev", "--yes"]);
        r.expect_code(1);
        assert!(r.stderr.contains("view mine depends on view dev__s.named") && r.stderr.contains("never drops with CASCADE"), "{}", r.stderr);
        assert_eq!(columns(), ["id"], "the environment still serves what it served");
        assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(true));
        p.query("DROP VIEW public.mine");
    }
    p.apply("dev");
    assert_eq!(columns(), ["name", "id"]);
    assert_eq!(p.query("SELECT count(DISTINCT name), count(*) FROM dev__s.named")[0], [Some("2".into()), Some("40".into())]);
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

fn audits_previews_and_external_tables_work_on_every_engine(engine: EngineBackend) {
    let p = portable_project(engine);
    p.apply("dev");
    // A source table the project does not manage, read through an external model.
    p.query("CREATE SCHEMA IF NOT EXISTS ext");
    p.query("CREATE TABLE ext.src (k INTEGER, v VARCHAR)");
    p.query("INSERT INTO ext.src VALUES (1, 'one'), (2, 'two'), (4, 'four')");
    p.write(
        "models/x.lua",
        r#"local src = define_model {
  name = "ext.src", kind = kind.external { table = "ext.src" },
  schema = { { "k", "integer" }, { "v", "varchar" } },
}
return define_model {
  name = "s.fromext", kind = kind.full(),
  schema = { { "k", "integer" }, { "v", "varchar" }, { "at", "timestamp" } },
  audits = {
    audit.not_null("k", "v"),
    audit.unique("k"),
    audit.accepted_range { column = "k", min = 1, max = 9 },
    audit.accepted_values { column = "v", values = { "one", "two", "four" } },
    audit.row_count { min = 3 },
    audit.contiguous { column = "k", blocking = false },
    audit.no_gaps { column = "at", blocking = false },
  },
  query = "SELECT k, v, TIMESTAMP '2026-01-01 00:00:00' + k * INTERVAL '1 day' AS at FROM " .. ref(src),
}
"#,
    );
    let v = p.apply("dev");
    assert!(built(&v).contains(&"s.fromext".to_string()), "{v:#}");
    assert_eq!(p.rows("dev__s.fromext").len(), 3);
    // The two warnings (k = 3 and the day it stands for are missing) are reported, not blocking.
    let audit = p.run(&["audit", "dev", "--json"]).expect_code(0).json();
    let violations = |name: &str| {
        let list = audit["results"].as_array().unwrap_or_else(|| panic!("{audit:#}"));
        let r = list
            .iter()
            .find(|r| r["model"] == "s.fromext" && r["audit"].as_str().is_some_and(|a| a.starts_with(name)))
            .unwrap_or_else(|| panic!("{name}: {audit:#}"));
        r["violations"].as_u64()
    };
    assert_eq!(
        (violations("contiguous"), violations("no_gaps"), violations("unique"), violations("not_null")),
        (Some(1), Some(1), Some(0), Some(0)),
        "{audit:#}"
    );
    // A blocking violation fails the apply and promotes nothing, naming the audit.
    p.query("INSERT INTO ext.src VALUES (2, 'two')");
    p.write("models/x.lua", &p.read("models/x.lua").replace("AS at FROM \" .. ref(src)", "AS at FROM \" .. ref(src) .. \" WHERE k > 0\""));
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("unique") && r.stderr.contains("s.fromext"), "{}", r.stderr);
    assert_eq!(p.rows("dev__s.fromext").len(), 3, "the environment still serves the old version");
    // A preview runs the model's query read-only and compares it with what dev serves.
    let preview = p.run(&["preview", "dev", "s.daily", "--json"]).expect_code(0).json();
    assert!(preview.to_string().contains("s.daily"), "{preview:#}");
}

fn the_janitor_drops_unreachable_versions_views_before_the_tables_they_read(engine: EngineBackend) {
    let mut p = portable_project(engine);
    p.apply("dev");
    let first = p.physical_tables();
    // A breaking edit of s.events gives new versions of it and of everything reading it (the
    // view s.named among them); the old view reads the old table.
    p.write("models/m.lua", &PORTABLE_MODELS.replace("generate_series(1, 40)", "generate_series(1, 42)"));
    p.apply("dev");
    let second = p.physical_tables();
    assert!(second.len() > first.len(), "{second:?}");
    // Versions record the real instant they were left: collect as if long after.
    p.now = "2099-01-01T00:00:00Z".to_string();
    let v = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    let after = p.physical_tables();
    // Exactly the relations dev serves now are left: the old versions are gone, views first.
    let gone: Vec<&String> = first.iter().filter(|t| !after.contains(t)).collect();
    assert!(!gone.is_empty() && gone.iter().any(|t| t.starts_with("s__named__")) && gone.iter().any(|t| t.starts_with("s__events__")), "{v:#}\n{after:?}");
    assert_eq!(after.len(), first.len(), "one relation per model is left: {after:?}");
    assert_eq!(p.query("SELECT count(*) FROM dev__s.named")[0][0].as_deref(), Some("42"));
    // An orphan of the physical-name shape that no state knows of is dropped too.
    let orphan = if p.on_postgres() { format!("s__ghost__{}", "ab".repeat(20)) } else { format!("s__ghost__{}", "ab".repeat(32)) };
    p.query(&format!("CREATE TABLE \"_efmesh\".\"{orphan}\" AS SELECT 1 AS a"));
    p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0);
    assert!(!p.physical_tables().contains(&orphan), "{:?}", p.physical_tables());
}

fn a_project_builds_promotes_and_versions_with_the_same_rows_on_every_engine(engine: EngineBackend) {
    let p = portable_project(engine);
    let v = p.apply("dev");
    assert_eq!(built(&v), ["raw.depts", "s.daily", "s.events", "s.hist", "s.latest", "s.named"]);
    assert_eq!(
        p.rows("dev__s.daily"),
        strs(&[&["2026-01-01 00:00:00", "3"], &["2026-01-02 00:00:00", "3"], &["2026-01-03 00:00:00", "4"], &["2026-01-04 00:00:00", "3"]])
    );
    assert_eq!(p.query("SELECT count(*), count(DISTINCT name) FROM dev__s.named")[0], [Some("40".into()), Some("2".into())]);
    assert_eq!(p.rows("dev__raw.depts"), strs(&[&["A", "Alpha"], &["B", "Beta"]]));
    // Promotion to another environment builds nothing: the views point at the same tables.
    let prod = p.apply("prod");
    assert!(built(&prod).is_empty(), "{prod:#}");
    assert_eq!(p.rows("s.daily"), p.rows("dev__s.daily"));
    // Nothing changed: a no-op plan.
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
    // A breaking edit builds a new version in dev, in parallel, and leaves prod as it was.
    p.write(
        "models/m.lua",
        &PORTABLE_MODELS.replace("count(*) AS n FROM \" .. ref(M.events) .. \" WHERE", "count(*) * 10 AS n FROM \" .. ref(M.events) .. \" WHERE"),
    );
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "s.daily")["change"], "breaking", "{plan:#}");
    let v = p.run(&["apply", "dev", "--yes", "--json", "--jobs", "4"]).expect_code(0).json();
    assert_eq!(built(&v), ["s.daily"]);
    assert_eq!(p.query("SELECT sum(n) FROM dev__s.daily")[0][0].as_deref(), Some("130"));
    assert_eq!(p.query("SELECT sum(n) FROM s.daily")[0][0].as_deref(), Some("13"));
    // Two versions of s.daily are stored side by side.
    assert_eq!(p.physical_tables().iter().filter(|t| t.starts_with("s__daily__")).count(), 2, "{:?}", p.physical_tables());
    // Every physical name fits Postgres's identifiers on Postgres.
    if p.on_postgres() {
        assert!(p.physical_tables().iter().all(|t| t.len() <= 63), "{:?}", p.physical_tables());
    }
}

fn unique_key_and_scd_type2_models_refresh_on_run(engine: EngineBackend) {
    let p = portable_project(engine);
    p.apply("dev");
    assert_eq!(p.query("SELECT code, name FROM dev__s.hist WHERE valid_to IS NULL ORDER BY code"), strs(&[&["A", "Alpha"], &["B", "Beta"]]));
    // The seed changes: a breaking change of the seed, its children follow; the SCD type 2 model
    // keeps its history (forward-only) and the next run closes and opens rows.
    p.write("seeds/depts.csv", "code,name\nA,Alpha2\nB,Beta\nC,Gamma\n");
    p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "s.hist"]).expect_code(0);
    p.run(&["run", "dev", "--json"]).expect_code(0);
    assert_eq!(p.query("SELECT code, name FROM dev__s.hist WHERE valid_to IS NULL ORDER BY code"), strs(&[&["A", "Alpha2"], &["B", "Beta"], &["C", "Gamma"]]));
    assert_eq!(p.query("SELECT code, name FROM dev__s.hist WHERE valid_to IS NOT NULL ORDER BY code"), strs(&[&["A", "Alpha"]]));
    assert_eq!(p.rows("dev__s.latest"), strs(&[&["A", "20"], &["B", "20"]]));
}

fn restated_intervals_are_recomputed_by_the_next_run(engine: EngineBackend) {
    let p = portable_project(engine);
    p.apply("dev");
    let physical = p.physical_tables().into_iter().find(|t| t.starts_with("s__daily__")).expect("s.daily's table");
    // Someone damages one day; restating it and running puts it back.
    p.query(&format!("UPDATE \"_efmesh\".\"{physical}\" SET n = 0 WHERE day = TIMESTAMP '2026-01-02 00:00:00'"));
    assert_eq!(p.query("SELECT sum(n) FROM dev__s.daily")[0][0].as_deref(), Some("10"));
    p.run(&["restate", "dev", "--model", "s.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "dev", "--json"]).expect_code(0);
    assert_eq!(p.query("SELECT sum(n) FROM dev__s.daily")[0][0].as_deref(), Some("13"));
}

/// A Postgres project, or `None` (skipped) as [`pg::fresh_database`].
fn postgres_project() -> Option<Project> {
    pg::fresh_database().map(|t| portable_project(EngineBackend::Postgres(t)))
}

#[test]
fn postgres_refuses_duckdb_only_features_at_plan_time_naming_the_model() {
    let Some(p) = postgres_project() else { return };
    p.write("data/x.csv", "a\n1\n");
    p.write(
        "models/lake.lua",
        "return define_model { name = \"s.filey\", kind = kind.external { path = \"data/x.csv\" }, schema = { { \"a\", \"integer\" } } }\n",
    );
    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(1);
    let v = r.json();
    assert_eq!(v["error"]["kind"], "engine-feature", "{v:#}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("models/lake.lua:1") && message.contains("s.filey") && message.contains("read from files") && message.contains("Postgres"),
        "{message}"
    );
    // Nothing was written to the engine.
    assert!(p.physical_tables().is_empty());
}

#[test]
fn long_names_fit_postgres_identifiers_or_are_refused_by_name() {
    let Some(p) = postgres_project() else { return };
    let table = "t".repeat(60);
    p.write(
        "models/long.lua",
        &format!("return define_model {{ name = \"s.{table}\", kind = kind.full(), schema = {{ {{ \"a\", \"integer\" }} }}, query = \"SELECT 1 AS a\" }}\n"),
    );
    p.apply("dev");
    let physical: Vec<String> = p.physical_tables().into_iter().filter(|t| t.starts_with("s__ttt")).collect();
    assert_eq!(physical.len(), 1, "{physical:?}");
    assert!(physical[0].len() <= 63, "{}", physical[0]);
    // The mapping is recorded with the snapshot: the state names the shortened table.
    let store = p.store().expect("state");
    let snapshots = store.snapshot_keys().expect("snapshots");
    let (_, fp) = snapshots.iter().find(|(n, _)| *n == format!("s.{table}")).expect("snapshot").clone();
    assert!(physical[0].ends_with(&fp[..32]) || physical[0].contains(&fp[..32]), "{} / {fp}", physical[0]);
    assert_eq!(p.query(&format!("SELECT a FROM dev__s.\"{table}\""))[0][0].as_deref(), Some("1"));
    // An environment schema past the limit is refused with the model and the name.
    let env = "e".repeat(60);
    let r = p.run(&["plan", &env, "--json"]);
    r.expect_code(1);
    let v = r.json();
    assert_eq!(v["error"]["kind"], "engine-feature", "{v:#}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("`{env}__")) && message.contains("63 bytes") && message.contains("models/"), "{v:#}");
}

/// A role without `CREATE` on the Postgres engine database: `apply` fails before anything is
/// built, with the server's refusal and a hint naming the engine database by its URL (no
/// password) and the grant efmesh needs there.
#[test]
fn a_role_without_create_on_the_engine_database_is_told_what_to_grant_where() {
    let Some(t) = pg::fresh_database() else { return };
    let Some(database) = t.url.parse::<postgres::Config>().ok().and_then(|c| c.get_dbname().map(str::to_string)) else {
        return eprintln!("SKIPPED: the test URL names no database");
    };
    let role = format!("{database}_nocreate");
    let mut admin = t.client();
    if let Err(e) = admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")) {
        // A server given by EFMESH_TEST_PG_URL may not let this test create roles.
        return eprintln!("SKIPPED: cannot create a role on the test Postgres: {e}");
    }
    let may_create: bool = admin.query_one("SELECT has_database_privilege($1, current_database(), 'CREATE')", &[&role]).unwrap().get(0);
    assert!(!may_create, "the role must lack CREATE on the database for this test to prove anything");
    let url = match t.url.split_once("://").and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?.1))) {
        Some((scheme, host)) => format!("{scheme}://{role}@{host}"),
        None => return eprintln!("SKIPPED: the test URL has no user part"),
    };
    let p = portable_project(EngineBackend::Postgres(pg::PgTarget { url: url.clone(), schema: String::new() }));
    let r = p.run(&["apply", "dev", "--yes", "--json"]);
    r.expect_code(1);
    let v = r.json();
    let (message, hint) = (v["error"]["message"].as_str().unwrap_or_default(), v["error"]["hint"].as_str().unwrap_or_default());
    assert!(message.contains(&format!("permission denied for database {database}")), "{v:#}");
    let location = efmesh::pg::describe_url(&url).expect("the URL parses");
    assert!(
        hint.contains(&format!("engine database `{location}`")) && hint.contains(&format!("GRANT CREATE ON DATABASE \"{database}\" TO \"{role}\"")),
        "{v:#}"
    );
    assert!(p.physical_tables().is_empty(), "nothing was built");
}

#[test]
fn an_unset_engine_url_is_named_with_the_config_file_and_nothing_else_is_shown() {
    let Some(t) = pg::fresh_database() else { return };
    let p = portable_project(EngineBackend::Postgres(t));
    let out = p.command(&["apply", "dev", "--yes"]).env_remove(crate::common::PG_ENGINE_URL_ENV).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(crate::common::PG_ENGINE_URL_ENV) && err.contains("efmesh.toml") && err.contains("url_env"), "{err}");
}

#[test]
fn bad_input_on_postgres_names_the_file_line_row_and_column() {
    let Some(p) = postgres_project() else { return };
    p.write("seeds/depts.csv", "code,name\nA,Alpha\nB,Beta\n");
    p.write(
        "models/bad.lua",
        "return define_model { name = \"s.bad\", kind = kind.full(), schema = { { \"a\", \"integer\" } },\n  query = \"SELECT no_such_column AS a FROM \" .. ref(\"s.events\") }\n",
    );
    p.write("seeds/nums.csv", "n\n1\n2\nthree\n4\n");
    p.write(
        "models/nums.lua",
        "return define_model { name = \"raw.nums\", kind = kind.seed { path = \"seeds/nums.csv\" }, schema = { { \"n\", \"integer\" } } }\n",
    );
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("models/bad.lua:2") && r.stderr.contains("no_such_column"), "{}", r.stderr);
    assert!(r.stderr.contains("seeds/nums.csv") && r.stderr.contains("row 4") && r.stderr.contains("`three`"), "{}", r.stderr);
    assert!(p.physical_tables().is_empty(), "nothing is built when the contract fails");
}

#[test]
fn unit_tests_of_a_postgres_project_run_on_postgres_in_a_database_of_their_own() {
    let Some(p) = postgres_project() else { return };
    let config = p.read("efmesh.toml").replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\"]\ntests = [\"tests/**/*.lua\"]");
    p.write("efmesh.toml", &config);
    // `string_agg(… ORDER BY …)` and `::text` are Postgres; the expected row proves it ran there.
    p.write(
        "models/agg.lua",
        "return define_model { name = \"s.agg\", kind = kind.full(), schema = { { \"names\", \"varchar\" } },\n  query = \"SELECT string_agg(name::text, ',' ORDER BY name DESC) AS names FROM \" .. ref(\"raw.depts\") }\n",
    );
    p.write(
        "tests/agg.lua",
        "define_test { name = \"agg_orders\", model = \"s.agg\", inputs = { [\"raw.depts\"] = { { code = \"A\", name = \"x\" }, { code = \"B\", name = \"y\" } } }, expect = { { names = \"y,x\" } } }\n",
    );
    // What killed runs left: one long ago, unconnected (collected), one just now (kept: it may be
    // a run between creating its database and connecting to it).
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let (abandoned, young) = (format!("efmesh_scratch_{}_1000_0", std::process::id()), format!("efmesh_scratch_{}_{now_ms}_0", std::process::id()));
    for db in [&abandoned, &young] {
        p.execute_on_engine(&format!("CREATE DATABASE \"{db}\""));
    }
    let exists = |db: &str| p.query(&format!("SELECT count(*) FROM pg_database WHERE datname = '{db}'"))[0][0].as_deref() == Some("1");
    let r = p.run(&["test"]);
    r.expect_code(0);
    // The run's own scratch database is gone afterwards.
    let line = r.stderr.lines().find(|l| l.contains("scratch database, dropped when they end")).unwrap_or_else(|| panic!("{}", r.stderr));
    let own = line.split("database=").nth(1).and_then(|d| d.split_whitespace().next()).unwrap_or_else(|| panic!("{line}")).to_string();
    assert!(own.starts_with("efmesh_scratch_"), "{line}");
    assert!(!exists(&own), "{own} was left behind");
    assert!(!exists(&abandoned), "an abandoned scratch database is collected");
    assert!(exists(&young), "a young one is kept");
    p.execute_on_engine(&format!("DROP DATABASE \"{young}\""));
}

#[test]
fn engine_and_state_both_in_postgres() {
    let (Some(engine), Some(state)) = (pg::fresh_database(), pg::fresh()) else { return };
    let p = Project::with(StateBackend::Postgres(state), EngineBackend::Postgres(engine));
    p.write("seeds/depts.csv", "code,name\nA,Alpha\nB,Beta\n");
    p.write("models/m.lua", PORTABLE_MODELS);
    p.apply("dev");
    assert!(!p.state_path().exists() && !p.engine_path().exists(), "no local database file");
    assert_eq!(p.rows("dev__s.latest"), vec![vec![Some("A".to_string()), Some("20".to_string())], vec![Some("B".to_string()), Some("20".to_string())]]);
    assert!(actions(&p.plan("dev")).iter().all(|a| a["change"] == "unchanged"));
}

// The hospital example on both engines (issue #14): `examples/hospital_portable` is
// `examples/hospital` in SQL that DuckDB and Postgres run alike. Every model must have the same
// rows on both engines, and on DuckDB the rows of its counterpart in `examples/hospital`.

/// The instant the hospital projects are applied at: after the feed's last day, so every
/// interval of `med.moves` is built (as in `tests/it/examples.rs`).
const HOSPITAL_NOW: &str = "2026-11-30T00:00:00Z";

/// A project running the shipped example `examples/<dir>` on `engine`: its files copied with its
/// own `efmesh.toml`, plus `[engine] url_env` on Postgres (what its README tells a user to add).
fn example_project(dir: &str, engine: EngineBackend) -> Project {
    /// Copies a directory, without the outputs of earlier runs (databases, state stores, load
    /// caches, the lake and DuckLake directories).
    fn copy_tree(from: &Path, to: &Path, top: bool) {
        fs_err::create_dir_all(to).expect("mkdir");
        for entry in fs_err::read_dir(from).expect("read the example") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if (top && ["lake", "ducklake", ".efmesh"].contains(&name.as_str())) || name.contains(".duckdb") || name.contains(".state.sqlite") {
                continue;
            }
            let (src, dst) = (entry.path(), to.join(&name));
            if src.is_dir() {
                copy_tree(&src, &dst, false);
            } else {
                fs_err::copy(&src, &dst).expect("copy");
            }
        }
    }
    let mut p = Project::on_engine(engine);
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(dir), p.root(), true);
    if p.on_postgres() {
        let config = p.read("efmesh.toml");
        p.write("efmesh.toml", &format!("{config}\n[engine]\nurl_env = \"{}\"\n", crate::common::PG_ENGINE_URL_ENV));
    }
    p.now = HOSPITAL_NOW.to_string();
    p
}

/// Every model of a plan, by name, with its kind.
fn models_of(plan: &Value) -> BTreeMap<String, String> {
    actions(plan).iter().map(|a| (a["name"].as_str().expect("name").to_string(), a["kind"].as_str().expect("kind").to_string())).collect()
}

/// The type family a column of `information_schema.columns.data_type` is compared by, named the
/// same for both engines' spellings (DuckDB: `VARCHAR`, `DOUBLE`, `TIMESTAMP`; Postgres:
/// `character varying`, `double precision`, `timestamp without time zone`).
fn portable_type(data_type: &str) -> &'static str {
    match data_type.to_ascii_lowercase().as_str() {
        // Postgres types what a string function returns (`upper(…)`, `||`) `text`, the type its
        // `varchar` is with no length limit; DuckDB names both VARCHAR.
        "varchar" | "character varying" | "text" => "text",
        "integer" => "integer",
        "bigint" => "bigint",
        "double" | "double precision" => "double",
        "boolean" => "boolean",
        "date" => "date",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "timestamp with time zone" => "timestamptz",
        other => panic!("no portable text form for the type `{other}` yet: add it to portable_type and portable_text"),
    }
}

/// SQL giving `column` (of the portable type `ty`) as text both engines spell alike. The values
/// are cast to text in SQL by each engine, never rendered by the client, so a Postgres boolean
/// is `true`/`false` (its cast to text), not `t`/`f` (its wire form), as DuckDB's cast gives.
fn portable_text(column: &str, ty: &str) -> String {
    let c = format!("\"{column}\"");
    match ty {
        // An instant as text carries the session's time zone (`+00`); as the UTC wall-clock time
        // (`timezone('UTC', …)`, a plain timestamp) it is the same whatever the session's zone.
        "timestamptz" => format!("CAST(timezone('UTC', {c}) AS VARCHAR)"),
        // A whole double prints `100.0` on DuckDB and `100` on Postgres; a decimal of fixed
        // scale prints alike. Six places are far more than the one place the model rounds to.
        "double" => format!("CAST(CAST({c} AS DECIMAL(18, 6)) AS VARCHAR)"),
        // Integers, text, dates and timestamps (ISO) cast to the same text on both engines.
        _ => format!("CAST({c} AS VARCHAR)"),
    }
}

/// The columns of the relation `schema.table` of `p`'s engine, with their portable types.
fn portable_columns(p: &Project, schema: &str, table: &str) -> Vec<(String, &'static str)> {
    let columns: Vec<(String, &'static str)> = p
        .query(&format!(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position"
        ))
        .into_iter()
        .map(|r| (r[0].clone().expect("column name"), portable_type(r[1].as_deref().expect("data type"))))
        .collect();
    assert!(!columns.is_empty(), "no relation {schema}.{table}");
    columns
}

/// Every row of `from` (a relation or a subquery), its `columns` as portable text, sorted.
fn portable_rows(p: &Project, from: &str, columns: &[(String, &'static str)]) -> Rows {
    let select: Vec<String> = columns.iter().map(|(c, ty)| portable_text(c, ty)).collect();
    let mut rows = p.query(&format!("SELECT {} FROM {from}", select.join(", ")));
    rows.sort();
    rows
}

/// Asserts two sorted row lists are the same multiset; otherwise names the counts and a few
/// rows only one side has.
#[track_caller]
fn assert_same_rows(what: &str, (left_name, left): (&str, &Rows), (right_name, right): (&str, &Rows)) {
    if left == right {
        return;
    }
    let counts = |rows: &Rows| {
        let mut m: BTreeMap<Vec<Option<String>>, usize> = BTreeMap::new();
        for r in rows {
            *m.entry(r.clone()).or_default() += 1;
        }
        m
    };
    let (l, r) = (counts(left), counts(right));
    let only = |a: &BTreeMap<Vec<Option<String>>, usize>, b: &BTreeMap<Vec<Option<String>>, usize>| -> Vec<String> {
        a.iter().filter(|(row, n)| b.get(*row).copied().unwrap_or(0) < **n).take(5).map(|(row, _)| format!("{row:?}")).collect()
    };
    panic!(
        "{what}: {} rows on {left_name}, {} on {right_name}\n  only on {left_name}: {}\n  only on {right_name}: {}",
        left.len(),
        right.len(),
        only(&l, &r).join("\n    "),
        only(&r, &l).join("\n    ")
    );
}

/// The models of `examples/hospital_portable`.
const HOSPITAL_MODELS: [&str; 8] =
    ["med.assignments", "med.census_daily", "med.current_location", "med.moves", "med.stays", "raw.departments", "raw.moves", "stg.moves"];

/// Asserts that every model of `examples/hospital_portable` has the same columns (by type) and
/// the same rows in the environment `env` of `left` and of `right`.
#[track_caller]
fn assert_hospital_models_agree(env: &str, (left_name, left): (&str, &Project), (right_name, right): (&str, &Project)) {
    for name in HOSPITAL_MODELS {
        let (schema, table) = name.split_once('.').expect("schema.table");
        let schema = efmesh::plan::env_schema(env, schema);
        let relation = format!("{schema}.{table}");
        let columns = portable_columns(left, &schema, table);
        assert_eq!(portable_columns(right, &schema, table), columns, "{relation}: the same columns, of the same types");
        let rows = portable_rows(left, &relation, &columns);
        assert!(!rows.is_empty(), "{relation} is empty");
        assert_same_rows(&relation, (left_name, &rows), (right_name, &portable_rows(right, &relation, &columns)));
    }
}

#[test]
fn the_hospital_example_gives_the_same_rows_on_duckdb_and_postgres() {
    let Some(target) = pg::fresh_database() else { return };
    let duck = example_project("hospital_portable", EngineBackend::DuckDb);
    let pg = example_project("hospital_portable", EngineBackend::Postgres(target));
    let models = models_of(&duck.plan("prod"));
    assert_eq!(models.keys().collect::<Vec<_>>(), HOSPITAL_MODELS, "{models:?}");
    assert_eq!(models_of(&pg.plan("prod")), models, "the same models, of the same kinds");
    // `efmesh check` reads every column of every model in Postgres's grammar too.
    let check = pg.run(&["check", "--json"]).expect_code(0).json();
    assert!(check["ok"] == Value::Bool(true) && check["unchecked"].as_array().is_some_and(Vec::is_empty), "{check:#}");
    let (on_duck, on_pg) = (duck.apply("prod"), pg.apply("prod"));
    assert_eq!(built(&on_duck), HOSPITAL_MODELS);
    assert_eq!(built(&on_pg), HOSPITAL_MODELS);
    // Postgres describes what it built as the plan expects: nothing to do right after.
    assert_eq!(pg.plan("prod")["hasChanges"], Value::Bool(false));
    assert_hospital_models_agree("prod", ("DuckDB", &duck), ("Postgres", &pg));
    // Its unit tests (the hospital example's) pass on Postgres too (on DuckDB: tests/it/examples.rs).
    let tests = pg.run(&["test", "--json"]).expect_code(0).json();
    let passed: Vec<&str> = tests["tests"].as_array().expect("tests").iter().filter(|t| t["status"] == "passed").filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(passed, ["stg_moves_cleans_the_feed", "med_moves_keeps_only_its_interval", "stays_follow_each_case", "stays_of_no_moves_is_empty"], "{tests:#}");
}

/// `efmesh run` refreshes the hospital example alike on both engines: applied on 2026-03-01 and
/// run on each of the next three days (as examples/hospital's README replays the feed), every
/// model has the same rows, the upserted current locations and the SCD type 2 history of the
/// assignments included.
#[test]
fn daily_runs_of_the_hospital_example_give_the_same_rows_on_duckdb_and_postgres() {
    let Some(target) = pg::fresh_database() else { return };
    let mut duck = example_project("hospital_portable", EngineBackend::DuckDb);
    let mut pg = example_project("hospital_portable", EngineBackend::Postgres(target));
    for p in [&mut duck, &mut pg] {
        p.now = "2026-03-01T00:00:00Z".to_string();
        p.apply("dev");
        for day in ["2026-03-02", "2026-03-03", "2026-03-04"] {
            p.now = format!("{day}T00:00:00Z");
            p.run(&["run", "dev", "--json"]).expect_code(0);
        }
    }
    assert_hospital_models_agree("dev", ("DuckDB", &duck), ("Postgres", &pg));
    // The history grew as examples/hospital's README measures it: 2,449 versions, one open per
    // patient in the house (1,342).
    let history = "SELECT count(*), count(*) FILTER (WHERE valid_to IS NULL) FROM dev__med.assignments";
    assert_eq!(pg.query(history)[0], [Some("2449".to_string()), Some("1342".to_string())]);
}

#[test]
fn the_portable_hospital_example_gives_the_original_rows_on_duckdb() {
    let port = example_project("hospital_portable", EngineBackend::DuckDb);
    // The original as shipped, its lake and DuckLake models included (the ducklake extension
    // comes from EFMESH_EXTENSION_DIRECTORY, as for tests/it/examples.rs).
    let original = example_project("hospital", EngineBackend::DuckDb);
    let (port_models, original_models) = (models_of(&port.plan("prod")), models_of(&original.plan("prod")));
    // What the port leaves out is exactly the two DuckDB-only storage targets.
    let left_out: Vec<&String> = original_models.keys().filter(|m| !port_models.contains_key(*m)).collect();
    assert_eq!(left_out, ["lake.dept_load", "lake.dept_moves_daily"]);
    port.apply("prod");
    original.apply("prod");
    for (name, kind) in &port_models {
        let original_kind = &original_models[name];
        let (schema, table) = name.split_once('.').expect("schema.table");
        let columns = portable_columns(&port, schema, table);
        let rows = portable_rows(&port, name, &columns);
        assert!(!rows.is_empty(), "{name} is empty");
        // The original's `raw.moves` is an external model (no view): its rows are what the
        // query `efmesh render` prints for it reads (the CSV file, typed as declared).
        let from = if original_kind == "external" {
            assert_eq!((name.as_str(), kind.as_str()), ("raw.moves", "seed"));
            let source = original.run(&["render", name]).expect_code(0).stdout.trim().to_string();
            assert!(source.contains("read_csv("), "{source}");
            format!("({source}) AS source")
        } else {
            assert_eq!(original_kind, kind, "{name}: the same kind");
            assert_eq!(portable_columns(&original, schema, table), columns, "{name}: the same columns, of the same types");
            name.clone()
        };
        assert_same_rows(name, ("examples/hospital_portable", &rows), ("examples/hospital", &portable_rows(&original, &from, &columns)));
    }
}

#[test]
fn one_process_writes_a_postgres_engine_at_a_time_and_readers_are_not_held() {
    let Some(t) = pg::fresh_database() else { return };
    let p = portable_project(EngineBackend::Postgres(t.clone()));
    p.apply("dev");
    p.write("models/m.lua", &PORTABLE_MODELS.replace("generate_series(1, 40)", "generate_series(1, 44)"));
    // Another efmesh process writing the database (here: this test holding the writer lock).
    let holder = efmesh::engine::postgres::Postgres::open_writer(&t.url).expect("the writer lock");
    let r = p.run(&["apply", "dev", "--yes", "--json"]);
    r.expect_code(1);
    assert!(r.stderr.contains("another efmesh process is writing this database"), "{}", r.stderr);
    assert_eq!(r.json()["error"]["kind"], "engine-locked", "{}", r.stdout);
    // Nothing moved, and reading is not held up: plan and preview still work.
    assert_eq!(p.query("SELECT count(*) FROM dev__s.named")[0][0].as_deref(), Some("40"));
    assert_eq!(p.plan("dev")["hasChanges"], serde_json::Value::Bool(true));
    // A second writer is refused while the first holds the lock; once it is gone, the apply runs.
    assert!(efmesh::engine::postgres::Postgres::open_writer(&t.url).is_err());
    drop(holder);
    p.apply("dev");
    assert_eq!(p.query("SELECT count(*) FROM dev__s.named")[0][0].as_deref(), Some("44"));
}

/// Readers of the catalog never queue without end behind a lock on an environment view (a
/// promotion waiting for a reader holds the lock queue with its `ACCESS EXCLUSIVE` request;
/// here another session holds that lock): `plan dev` and `status dev --check` fail within the
/// read lock timeout, exit 1, naming the view and saying another session holds or awaits a lock
/// on it — never healthy, never silent. Once the lock is gone they work again.
#[test]
fn catalog_readers_fail_naming_a_view_another_session_locks_instead_of_waiting() {
    let Some(t) = pg::fresh_database() else { return };
    let p = portable_project(EngineBackend::Postgres(t.clone()));
    p.apply("dev");
    let mut holder = t.client();
    let mut tx = holder.transaction().expect("a transaction");
    tx.batch_execute("LOCK TABLE dev__s.latest IN ACCESS EXCLUSIVE MODE").expect("lock the dev view");
    for args in [&["plan", "dev"][..], &["status", "dev", "--check"][..]] {
        let started = std::time::Instant::now();
        let r = p.run(args);
        let waited = started.elapsed();
        r.expect_code(1);
        assert!(waited < std::time::Duration::from_secs(20), "`{}` waited {waited:?}", r.cmd);
        assert!(r.stderr.contains("`dev__s.latest`"), "names the locked view: {}", r.stderr);
        assert!(r.stderr.contains("another session holds or awaits an exclusive lock on it"), "{}", r.stderr);
        assert!(!r.stdout.contains("health: ok"), "{}", r.stdout);
    }
    tx.rollback().expect("release the lock");
    p.plan("dev");
    let after = p.run(&["status", "dev", "--check"]);
    after.expect_code(0);
    assert!(!after.stderr.contains("another session holds"), "{}", after.stderr);
    assert!(after.stdout.contains("health: ok"), "{}", after.stdout);
}

/// Another application's lock held longer than the read lock timeout (an ETL truncating and
/// reloading its own table, under its own view, in a schema efmesh does not use) fails no
/// writer: `run dev` reads the catalog (whose view definitions lock what every view reads) on a
/// session that waits for the lock, and succeeds once it is released. `plan dev`, which writes
/// nothing, still gives up within the bound, listing the locked table among the relations
/// other sessions hold an exclusive lock on.
#[test]
fn another_applications_lock_under_its_own_view_fails_no_writer() {
    let Some(t) = pg::fresh_database() else { return };
    let p = portable_project(EngineBackend::Postgres(t.clone()));
    p.apply("dev");
    t.client()
        .batch_execute("CREATE SCHEMA etl; CREATE TABLE etl.load_target (x int); CREATE VIEW etl.report AS SELECT x FROM etl.load_target")
        .expect("another application's table and view");
    let etl = t.clone();
    let load = std::thread::spawn(move || {
        etl.client()
            .batch_execute("BEGIN; TRUNCATE etl.load_target; INSERT INTO etl.load_target SELECT 1; SELECT pg_sleep(8); COMMIT")
            .expect("the ETL's load");
    });
    // Until the load holds its lock.
    let mut watcher = t.client();
    let held = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                WHERE c.relname = 'load_target' AND l.mode = 'AccessExclusiveLock' AND l.granted";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while watcher.query_one(held, &[]).expect("pg_locks").get::<_, i64>(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "the ETL's load never took its lock");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let started = std::time::Instant::now();
    let r = p.run(&["plan", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("`etl.load_target`") && r.stderr.contains("among them"), "{}", r.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(7), "plan waited {:?}", started.elapsed());
    let r = p.run(&["run", "dev"]);
    r.expect_code(0);
    assert!(!r.stderr.contains("waited more than"), "{}", r.stderr);
    load.join().expect("the ETL's load");
    p.run(&["status", "dev", "--check"]).expect_code(0);
}

#[test]
fn a_writer_whose_lock_connection_ended_keeps_others_out_until_its_workers_are_done() {
    use efmesh::engine::Engine;
    use efmesh::engine::postgres::Postgres;
    let Some(t) = pg::fresh_database() else { return };
    // A writer and one `--jobs` worker of it; then its lock connection ends (an administrator,
    // a proxy) while the worker still builds.
    let mut holder = Postgres::open_writer(&t.url).expect("the writer lock");
    let worker = holder.worker().expect("a worker connection");
    let mut admin = Postgres::open(&t.url, false).expect("an admin connection");
    let exclusive = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND granted";
    admin
        .execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND granted")
        .expect("terminate the lock connection");
    // Wait until the server released the ended session's writer lock.
    let released = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        admin.query(exclusive).expect("pg_locks")[0][0].as_deref() == Some("0")
    });
    assert!(released, "the ended session's lock is released");
    // A worker the writer opens now (its lock gone) does not join it.
    assert!(holder.worker().is_none(), "no worker joins a writer whose lock connection ended");
    // Another process may not start writing while the worker lives (it would write the same
    // intervals at once: rows duplicated).
    let refused = Postgres::open_writer(&t.url).map(|_| ()).expect_err("refused while the worker writes");
    assert!(refused.message.contains("Lock Error: connections of another efmesh process are still writing this database"), "{}", refused.message);
    drop(worker);
    drop(holder);
    let next = (0..100).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        Postgres::open_writer(&t.url).ok()
    });
    assert!(next.is_some(), "once the worker is gone, the next writer opens");
}

#[test]
fn long_seed_names_values_and_foreign_storage_never_pass_silently_on_postgres() {
    let Some(t) = pg::fresh_database() else { return };
    let p = Project::on_engine(EngineBackend::Postgres(t));
    // Two seeds whose stage names share their first 63 bytes each serve their own rows.
    let stem = "patient_admissions_by_ward_and_month_2024_quarter";
    for (q, row) in [("1", "A,Alpha"), ("2", "B,Beta")] {
        p.write(&format!("seeds/q{q}.csv"), &format!("code,name\n{row}\n"));
        p.write(
            &format!("models/q{q}.lua"),
            &format!("return define_model {{ name = \"raw.{stem}{q}\", kind = kind.seed {{ path = \"seeds/q{q}.csv\" }}, schema = {{ {{ \"code\", \"varchar\" }}, {{ \"name\", \"varchar\" }} }} }}\n"),
        );
    }
    p.apply("dev");
    assert_eq!(p.rows(&format!("dev__raw.{stem}1")), vec![vec![Some("A".to_string()), Some("Alpha".to_string())]]);
    assert_eq!(p.rows(&format!("dev__raw.{stem}2")), vec![vec![Some("B".to_string()), Some("Beta".to_string())]]);
    // A value longer than its declared `varchar(n)` is refused by row and column, never cut.
    p.write("seeds/short.csv", "code\nabc\nabcdef\n");
    p.write(
        "models/short.lua",
        "return define_model { name = \"raw.short\", kind = kind.seed { path = \"seeds/short.csv\" }, schema = { { \"code\", \"varchar(3)\" } } }\n",
    );
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("seeds/short.csv") && r.stderr.contains("row 3") && r.stderr.contains("`abcdef`") && r.stderr.contains("longer"), "{}", r.stderr);
    p.remove("models/short.lua");
    // A column name longer than Postgres's identifiers is refused at plan time by name.
    let long = "c".repeat(70);
    p.write(
        "models/wide.lua",
        &format!(
            "return define_model {{ name = \"s.wide\", kind = kind.full(), schema = {{ {{ \"{long}\", \"integer\" }} }}, query = \"SELECT 1 AS {long}\" }}\n"
        ),
    );
    let r = p.run(&["plan", "dev", "--json"]);
    r.expect_code(1);
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("column") && m.contains(&long) && m.contains("models/wide.lua")), "{}", r.stdout);
}

#[test]
fn a_state_store_recording_duckdb_storage_is_refused_by_a_postgres_engine_not_cut() {
    let Some(t) = pg::fresh_database() else { return };
    // A DuckDB project records a seed version (no SQL body: the same fingerprint on any engine)
    // whose physical name is longer than 63 bytes.
    let p = Project::on_engine(EngineBackend::DuckDb);
    p.write("seeds/d.csv", "code\nA\n");
    p.write(
        "models/d.lua",
        "return define_model { name = \"raw.departments_of_hospital\", kind = kind.seed { path = \"seeds/d.csv\" }, schema = { { \"code\", \"varchar\" } } }\n",
    );
    p.apply("dev");
    // The same project and state store, the engine switched to Postgres.
    let config =
        p.read("efmesh.toml").replace("[engine]\npath = \"efmesh.duckdb\"\n", &format!("[engine]\nurl_env = \"{}\"\n", crate::common::PG_ENGINE_URL_ENV));
    p.write("efmesh.toml", &config);
    let r = Run::from_output(p.command(&["plan", "dev", "--json"]).env(crate::common::PG_ENGINE_URL_ENV, &t.url).output().unwrap(), "plan".into());
    r.expect_code(1);
    let v = r.json();
    assert_eq!(v["error"]["kind"], "engine-feature", "{v:#}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("raw.departments_of_hospital") && m.contains("another engine")), "{v:#}");
}

#[test]
fn the_postgres_engine_refuses_cut_identifiers_and_commits_of_aborted_transactions() {
    use efmesh::engine::Engine;
    let Some(t) = pg::fresh_database() else { return };
    let mut db = efmesh::engine::postgres::Postgres::open(&t.url, false).expect("open");
    // Postgres would cut the name to 63 bytes with a notice only: an error here.
    let e = db.execute(&format!("CREATE TABLE \"{}\" (a INTEGER)", "n".repeat(70))).unwrap_err();
    assert!(e.message.contains("cut an identifier"), "{e}");
    let e = db.transaction(&[format!("CREATE TABLE \"{}\" (a INTEGER)", "m".repeat(70))]).unwrap_err();
    assert!(e.message.contains("cut an identifier"), "{e}");
    assert_eq!(db.query("SELECT count(*) FROM pg_class WHERE relname LIKE 'mmmm%'").unwrap()[0][0].as_deref(), Some("0"), "rolled back");
    // An error inside begin … commit aborts the transaction: the commit must not report success.
    db.execute("CREATE TABLE t (a INTEGER)").unwrap();
    db.begin().unwrap();
    db.execute("INSERT INTO t VALUES (1)").unwrap();
    assert!(db.execute("SELECT no_such_column FROM t").is_err());
    let e = db.commit().unwrap_err();
    assert!(e.message.contains("nothing was committed"), "{e}");
    assert_eq!(db.query("SELECT count(*) FROM t").unwrap()[0][0].as_deref(), Some("0"));
}

#[test]
fn server_errors_that_retrying_cures_are_retried_by_retries_and_otherwise_change_nothing() {
    let Some(t) = pg::fresh_database() else { return };
    let p = portable_project(EngineBackend::Postgres(t.clone()));
    p.apply("dev");
    // Every session of this database gives up waiting for a lock after 300 ms (SQLSTATE 55P03).
    let mut admin = t.client();
    let db: String = admin.query_one("SELECT current_database()", &[]).expect("current_database").get(0);
    admin.batch_execute(&format!("ALTER DATABASE \"{db}\" SET lock_timeout = '300ms'")).expect("set lock_timeout");
    p.write("models/m.lua", &PORTABLE_MODELS.replace("generate_series(1, 40)", "generate_series(1, 44)"));
    let count = || p.query("SELECT count(*) FROM dev__s.events")[0][0].clone();

    // A reader of the environment (a long query) holds its view: the promotion cannot replace it.
    let mut holder = t.client();
    holder.batch_execute("BEGIN; LOCK TABLE dev__s.events IN ACCESS SHARE MODE").expect("lock the view");
    let r = p.run(&["apply", "dev", "--yes", "--json"]);
    r.expect_code(1);
    assert!(r.stderr.contains("lock timeout"), "the server's reason is shown: {}", r.stderr);
    assert_eq!(r.json()["apiVersion"], 1);
    holder.batch_execute("ROLLBACK").expect("release");
    assert_eq!(count().as_deref(), Some("40"), "the environment still serves what it served");
    // The swap failed transiently, so its intent was kept (a lost connection may hide a landed
    // commit): the next command puts the views back as they were and plans the change again.
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], Value::Bool(true), "{plan:#}");
    assert_eq!(count().as_deref(), Some("40"));

    // With `--retries`, the same failure is retried with backoff until the reader lets go.
    holder.batch_execute("BEGIN; LOCK TABLE dev__s.events IN ACCESS SHARE MODE").expect("lock the view");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        holder.batch_execute("COMMIT").expect("release");
    });
    let r = p.run(&["apply", "dev", "--yes", "--json", "--retries", "6"]);
    release.join().expect("the holder thread");
    r.expect_code(0);
    assert!(r.stderr.contains("transient error, retrying") && r.stderr.contains("lock timeout"), "{}", r.stderr);
    assert_eq!(count().as_deref(), Some("44"));
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false), "{}", r.stdout);
}

/// The engine's error position gives the model's file:line on both engines (Postgres reports a
/// character position, DuckDB a `LINE n:` excerpt): the unknown column is on line 7 of the file.
fn a_query_that_does_not_bind_is_reported_at_the_line_of_its_sql_file(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("models/a.sql", "-- name: s.a\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x\n");
    p.write("models/t.sql", "-- name: s.t\n-- kind: full\n-- schema: x integer\n-- refs: s.a\nSELECT\n  x\n  + nosuch AS x\nFROM @ref(s.a)\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/t.sql:7: model `s.t`"), "{}", run.stderr);
    assert!(run.stderr.contains("nosuch"), "{}", run.stderr);
}

/// A `.sql` model whose query Postgres's grammar refuses (DuckDB's `GROUP BY ALL`, a DuckDB list
/// literal) is placed at the line of its file where the parser stopped, with the line of the
/// query, by `plan` and by `check` alike (`check` asks the same parser `plan` fingerprints
/// with, although sqlparser's Postgres dialect reads both): the query starts at line 6.
#[test]
fn a_query_postgres_cannot_parse_is_placed_at_its_line_by_plan_and_check() {
    let Some(t) = pg::fresh_database() else { return };
    let p = Project::on_engine(EngineBackend::Postgres(t));
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("models/src.sql", "-- name: m.src\n-- kind: full\n-- schema: region varchar, amount integer\nSELECT 'a'::varchar AS region, 1 AS amount\n");
    for (query, file_line) in [
        ("SELECT region, sum(amount)::bigint AS total\nFROM @ref(m.src)\nGROUP BY ALL", 8),
        ("SELECT region,\n  list_sum([amount])::bigint AS total\nFROM @ref(m.src)\nGROUP BY region", 7),
    ] {
        p.write("models/d.sql", &format!("-- name: m.d\n-- kind: full\n-- schema: region varchar, total bigint\n-- refs: m.src\n\n{query}\n"));
        let at = format!("models/d.sql:{file_line}: model `m.d`: Postgres cannot parse SQL at line {}: syntax error", file_line - 5);
        let plan = p.run(&["plan", "dev"]);
        plan.expect_code(1);
        assert!(plan.stderr.contains(&at), "{at}\n{}", plan.stderr);
        let check = p.run(&["check"]);
        check.expect_code(1);
        assert!(check.stdout.contains(&at), "{at}\n{}", check.stdout);
    }
}
