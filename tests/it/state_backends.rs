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
    // A password of our own, or the one EFMESH_TEST_PG_URL carries (a server that checks it).
    let (url, password) = match target.url.split_once('@') {
        Some((user, host)) if !user.trim_start_matches("postgres://").contains(':') => {
            (format!("{user}:pw-never-printed-91c2@{host}"), "pw-never-printed-91c2".to_string())
        }
        Some((user, _)) => (target.url.clone(), user.rsplit(':').next().unwrap_or_default().to_string()),
        None => panic!("EFMESH_TEST_PG_URL must be a `postgres://user@host/db` URL"),
    };
    let password = password.as_str();
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

/// The URL of `target` in the forms the postgres crate reads, each carrying `password`: in the
/// query (`?password=`), as `key=value` pairs, and one the crate cannot parse (an unknown option).
fn url_forms(target: &crate::pg::PgTarget, password: &str) -> Vec<(&'static str, String)> {
    use postgres::config::Host;
    let config: postgres::Config = target.url.parse().expect("the test URL parses");
    let host = match config.get_hosts().first().expect("a host") {
        Host::Tcp(h) => h.clone(),
        Host::Unix(p) => p.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let (user, db) = (config.get_user().unwrap_or("postgres"), config.get_dbname().unwrap_or("postgres"));
    let sep = if target.url.contains('?') { '&' } else { '?' };
    vec![
        ("query parameter", format!("{}{sep}password={password}", target.url)),
        ("key=value", format!("host={host} port={port} user={user} dbname={db} password={password}")),
        ("unparsable", format!("{}{sep}password={password}&no_such_option=1", target.url)),
    ]
}

#[test]
fn the_password_never_reaches_the_output_whatever_the_url_form() {
    let Some(target) = crate::pg::fresh() else { return };
    let password = "pw-in-another-form-5d1e";
    for (form, url) in url_forms(&target, password) {
        let p = sample_project_on(StateBackend::Postgres(crate::pg::PgTarget { url: url.clone(), ..target.clone() }));
        // The janitor names the store it cannot find; apply opens (or fails to open) it; status reads it.
        for args in [&["janitor", "--dry-run"][..], &["apply", "dev", "--yes"], &["status", "dev"], &["apply", "dev", "--yes", "--json"]] {
            let run = p.run(args);
            assert!(!run.stdout.contains(password) && !run.stderr.contains(password), "{form}: {args:?}: {run:#?}");
            if form == "unparsable" {
                assert_eq!(run.code, 1, "{form}: {args:?}: {run:#?}");
            }
        }
    }
}
