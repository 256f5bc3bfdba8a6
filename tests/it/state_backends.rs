//! The `efmesh` binary on a Postgres state store (`[state] url_env`): what differs from a
//! SQLite one. The behaviours both share run on both where they are written
//! (`crate::on_every_state_backend!` in `cli_apply.rs`, `deployment.rs`; `state_store.rs`).

use crate::common::*;

#[test]
fn a_postgres_project_keeps_its_state_in_its_schema_and_writes_no_state_file() {
    let Some(target) = crate::pg::fresh() else { return };
    let p = sample_project_on(StateBackend::Postgres(target.clone()));
    // A plan before any apply creates nothing, in Postgres either.
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], serde_json::Value::Bool(true));
    let schemas: i64 = target.client().query_one("SELECT count(*) FROM pg_namespace WHERE nspname = $1", &[&target.schema]).unwrap().get(0);
    assert_eq!(schemas, 0, "a plan created the schema");
    p.apply("dev");
    assert!(!p.state_path().exists(), "a SQLite state file was written beside a Postgres state");
    let tables: i64 = target.client().query_one("SELECT count(*) FROM pg_tables WHERE schemaname = $1", &[&target.schema]).unwrap().get(0);
    assert_eq!(tables, 17, "the tables of the layout (state_store.rs compares them with SQLite's)");
    let store = p.store().expect("the store");
    assert_eq!(store.journal("dev").unwrap().len(), 1);
    assert!(store.env_pointers("dev").unwrap().contains_key("s.c"));
    // `status` and `migrate` read the same store.
    p.run(&["status", "dev"]).expect_code(0);
    let migrate = p.run(&["migrate", "--json"]);
    migrate.expect_code(0);
    assert!(migrate.stdout.contains(&target.schema) && migrate.stdout.contains("\"applied\": []"), "{}", migrate.stdout);
}

#[test]
fn an_unset_url_variable_fails_naming_it_and_the_config_file() {
    let Some(target) = crate::pg::fresh() else { return };
    let p = sample_project_on(StateBackend::Postgres(target));
    let mut c = p.command(&["apply", "dev", "--yes"]);
    c.env_remove(PG_URL_ENV);
    let run = Run::from_output(c.output().expect("spawn"), "efmesh apply dev --yes (no URL)".into());
    run.expect_code(1);
    assert!(run.stderr.contains(PG_URL_ENV) && run.stderr.contains("efmesh.toml") && run.stderr.contains("unset"), "{run:#?}");
    assert!(p.physical_tables().is_empty(), "nothing built without a state store");
}

#[test]
fn the_url_password_never_reaches_the_output() {
    let Some(target) = crate::pg::fresh() else { return };
    let password = "pw-never-printed-91c2";
    let url = match target.url.split_once('@') {
        Some((user, host)) if !user.trim_start_matches("postgres://").contains(':') => format!("{user}:{password}@{host}"),
        _ => return eprintln!("SKIPPED: EFMESH_TEST_PG_URL has a password of its own"),
    };
    let target = crate::pg::PgTarget { url, ..target };
    let p = sample_project_on(StateBackend::Postgres(target.clone()));
    p.apply("dev");
    // A broken store (another layout version) makes every command name it in its error.
    let (plan, status) = (p.run(&["plan", "dev"]), p.run(&["status", "dev", "--json"]));
    for run in [&plan, &status] {
        assert!(!run.stdout.contains(password) && !run.stderr.contains(password), "{run:#?}");
    }
    let mut c = p.command(&["plan", "dev"]);
    c.env("RUST_LOG", "trace");
    let traced = Run::from_output(c.output().expect("spawn"), "efmesh plan dev (trace)".into());
    assert!(!traced.stderr.contains(password) && !traced.stdout.contains(password), "the password in a trace log");
    let schema = &target.schema;
    target.client().batch_execute(&format!("UPDATE {schema}.meta SET version = 99")).unwrap();
    let broken = p.run(&["plan", "dev"]);
    assert_eq!(broken.code, 1, "{broken:#?}");
    assert!(broken.stderr.contains("version 99") && broken.stderr.contains(schema.as_str()), "{broken:#?}");
    assert!(!broken.stderr.contains(password), "{broken:#?}");
    // `migrate` refuses a store newer than this efmesh, naming it, and leaves it as it was.
    let migrate = p.run(&["migrate"]);
    assert_eq!(migrate.code, 1, "{migrate:#?}");
    assert!(migrate.stderr.contains("version 99") && migrate.stderr.contains("newer") && !migrate.stderr.contains(password), "{migrate:#?}");
    let version: i64 = target.client().query_one(&format!("SELECT version FROM {schema}.meta"), &[]).unwrap().get(0);
    assert_eq!(version, 99);
}
