//! What efmesh says is what it did (issue 10, defects 5 and 10): a first apply that loses the
//! race for the state store never reports unrecorded work; embedded models are registered, not
//! built; an edited audit is run before it is trusted; build errors name the model's file:line
//! once; open errors carry no empty `while running:`; `--json` failures print one error object;
//! secrets in `efmesh.toml` never appear in an error.

use crate::common::*;
use crate::on_every_engine;
use efmesh::config::EngineSection;
use efmesh::engine::duckdb::DuckDb;
use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A model `s.m` (full) over two rows, one with a NULL `v`, with `audits` (Lua list items).
fn audited_full(audits: &str) -> String {
    format!(
        r#"define_model {{
  name = "s.m",
  kind = kind.full(),
  schema = {{ {{ "id", "integer" }}, {{ "v", "varchar" }} }},
  audits = {{ {audits} }},
  query = "SELECT CAST(range AS INTEGER) AS id, CASE WHEN range = 1 THEN NULL ELSE 'x' END AS v FROM generate_series(0, 1) AS g(range)",
}}
"#
    )
}

/// A time-range model `s.t` (one row a day from 2026-01-01, `v` NULL on the 2nd) with `audits`.
fn audited_daily(audits: &str) -> String {
    format!(
        r#"define_model {{
  name = "s.t",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", batch_size = 1 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "v", "varchar" }} }},
  audits = {{ {audits} }},
  query = [[SELECT CAST(d AS TIMESTAMP) AS day, CASE WHEN d = TIMESTAMP '2026-01-02' THEN NULL ELSE 'x' END AS v
            FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-01-04', INTERVAL '1 day') AS r(d)
            WHERE d >= @start AND d < @end]],
}}
"#
    )
}

on_every_engine!(
    a_first_apply_that_loses_the_race_for_the_state_store_reports_the_stale_plan,
    plan_and_an_apply_with_nothing_to_do_create_no_state_store,
    embedded_models_are_registered_not_built,
    an_edited_blocking_audit_the_served_data_fails_blocks_the_apply,
    a_build_error_names_the_models_file_and_line_once,
    every_json_command_prints_one_error_object_when_it_fails,
);

// ---- defect 5: a concurrent first apply ----------------------------------------------------

/// Shell-quotes `s` for `script -c`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn a_first_apply_that_loses_the_race_for_the_state_store_reports_the_stale_plan(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    assert!(!p.state_path().exists());
    // A: `apply dev` on a terminal (util-linux `script` gives it one), planned against the empty
    // store and stopped at its confirmation prompt.
    let cmd = [BIN, "--config", "efmesh.toml", "--now", &p.now, "apply", "dev"].iter().map(|a| sh_quote(a)).collect::<Vec<_>>().join(" ");
    let mut a = Command::new("script");
    a.args(["-q", "-e", "-c", &cmd, "/dev/null"]).current_dir(p.root()).env("EFMESH_APPLIED_BY", "it").env_remove("RUST_LOG").env_remove(PG_ENGINE_URL_ENV);
    if let EngineBackend::Postgres(t) = &p.engine {
        a.env(PG_ENGINE_URL_ENV, &t.url);
    }
    let mut a =
        a.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn `script` (util-linux) to give `efmesh apply` a terminal");
    let out = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let out = Arc::clone(&out);
        let mut stdout = a.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let text = || String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !text().contains("[y/N]") {
        assert!(Instant::now() < deadline && a.try_wait().unwrap().is_none(), "A never asked for confirmation:\n{}", text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // B: another process applies `prod` meanwhile, creating the store.
    p.apply("prod");
    assert!(p.state_path().exists());
    // A is confirmed only now.
    let mut stdin = a.stdin.take().expect("stdin");
    stdin.write_all(b"y\n").expect("answer");
    let status = loop {
        if let Some(s) = a.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "A did not finish:\n{}", text());
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    reader.join().unwrap();
    let said = text();
    let recorded = p.state_summary().pointers.contains_key("dev");
    // The rule: never "promoted" with nothing recorded.
    assert!(!said.contains("environment `dev` promoted") || recorded, "A reported a promotion the state store does not know:\n{said}");
    // What happens: A's plan was read from an empty store, which is no longer what is on disk.
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(said.contains("the state store changed since this plan of `dev` was computed") && said.contains("plan again"), "{said}");
    assert!(!recorded);
    assert!(!p.relations().iter().any(|r| r.starts_with("dev__")), "{:?}", p.relations());
    // Planned again, it applies and records.
    p.apply("dev");
    assert!(p.state_summary().pointers.contains_key("dev"));
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

fn plan_and_an_apply_with_nothing_to_do_create_no_state_store(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    if p.on_postgres() {
        // Postgres reads no files: the external names a table.
        p.execute_on_engine("CREATE SCHEMA src; CREATE TABLE src.x (a integer); INSERT INTO src.x VALUES (1);");
        p.write("models/x.lua", "define_model { name = \"s.x\", kind = kind.external { table = \"src.x\" }, schema = { { \"a\", \"integer\" } } }\n");
    } else {
        p.write("models/x.lua", "define_model { name = \"s.x\", kind = kind.external { path = \"x.csv\" }, schema = { { \"a\", \"integer\" } } }\n");
        p.write("x.csv", "a\n1\n");
    }
    p.plan("dev");
    assert!(!p.state_path().exists(), "plan never writes");
    // Not confirmed (stdin is not a terminal): nothing applied, nothing created.
    p.run(&["apply", "dev"]).expect_code(2);
    assert!(!p.state_path().exists());
    p.apply("dev");
    assert!(p.state_summary().pointers.contains_key("dev"));
}

// ---- defect 10a: embedded models are registered, not built ----------------------------------

fn embedded_models_are_registered_not_built(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let plan = p.plan("dev");
    let e = action(&plan, "t.e");
    assert_eq!((e["change"].as_str(), e["build"].as_bool(), e["register"].as_bool()), (Some("added"), Some(false), Some(true)), "{e:#}");
    assert_eq!(action(&plan, "t.d")["build"], true);
    assert!(action(&plan, "t.d").get("register").is_none(), "only versions without storage are registered");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    let line = text.lines().find(|l| l.contains("t.e")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("registered") && !line.split(", ").any(|note| note.trim_end() == "build"), "{line}");

    let v = p.apply("dev");
    assert!(!string_set(&v["built"]).contains("t.e"), "{v:#}");
    assert_eq!(string_set(&v["registered"]), set(&["t.e"]));
    // The journal says the same.
    let journal = p.state().journal("dev").expect("journal");
    let summary = &journal[0].summary;
    assert!(!string_set(&summary["built"]).contains("t.e") && string_set(&summary["registered"]).contains("t.e"), "{summary:#}");

    // Human output of an edit of the embedded model: its consumer is built, it is registered.
    p.write("models/d.lua", &portable_sample(&p, &model_d("'z' || id")));
    let out = p.run(&["apply", "dev", "--yes"]).expect_code(0).stdout.clone();
    assert!(out.contains("built: t.d\n") && out.contains("registered (embedded, nothing to build): t.e"), "{out}");
    assert_eq!(p.rows(&env_view("dev", "t.d"))[0], vec![Some("0".to_string()), Some("z0".to_string())]);
}

// ---- defect 10b: an edited audit runs before promotion ----------------------------------------

fn an_edited_blocking_audit_the_served_data_fails_blocks_the_apply(engine: EngineBackend) {
    for (file, old, new, model, audit) in [
        ("models/m.lua", audited_full("audit.not_null(\"id\")"), audited_full("audit.not_null(\"v\")"), "s.m", "not_null(v)"),
        // An `interval` audit of a time-range model: over every interval already served.
        ("models/t.lua", audited_daily("audit.not_null(\"day\")"), audited_daily("audit.not_null(\"v\")"), "s.t", "not_null(v)"),
    ] {
        let mut p = Project::on_engine(engine.another());
        p.now = "2026-01-05T00:00:00Z".into();
        p.write(file, &old);
        p.apply("prod");
        let before = p.state_summary();
        p.write(file, &new);
        let plan = p.plan("prod");
        assert_eq!(action(&plan, model)["change"], "metadata", "{plan:#}");
        let run = p.run(&["apply", "prod", "--yes", "--json"]);
        run.expect_code(1);
        assert!(run.stderr.contains(&format!("audit `{audit}` on model `{model}`: 1 violating row")), "{}", run.stderr);
        assert!(run.stderr.contains("nothing was promoted"), "{}", run.stderr);
        assert_eq!(run.json()["error"]["kind"], "audit");
        let after = p.state_summary();
        assert_eq!((&after.pointers, &after.journal), (&before.pointers, &before.journal), "{model}: nothing promoted");
        // A warn audit reports and does not block.
        p.write(file, &new.replace("audit.not_null(\"v\")", "audit.not_null { \"v\", blocking = false }"));
        let run = p.run(&["apply", "prod", "--yes", "--json"]);
        run.expect_code(0);
        assert!(run.json()["audits"].as_array().unwrap().iter().any(|r| r["audit"] == audit && r["violations"] == 1), "{}", run.stdout);
    }
}

// ---- defect 10c: build errors name the model's file:line, once --------------------------------

fn a_build_error_names_the_models_file_and_line_once(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("models/ok.lua", "define_model { name = \"s.ok\", kind = kind.full(), schema = { { \"n\", \"integer\" } }, query = \"SELECT 1 AS n\" }\n");
    // Binds (so the contract passes), fails when it runs.
    p.write(
        "models/bad.lua",
        "-- a comment\n\ndefine_model {\n  name = \"s.bad\",\n  kind = kind.full(),\n  schema = { { \"id\", \"integer\" } },\n  query = \"SELECT CAST('x' || range AS INTEGER) AS id FROM generate_series(0, 2) AS g(range)\",\n}\n",
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/bad.lua:3: building model `s.bad`: "), "{}", run.stderr);
    let engine_message = if p.on_postgres() { "invalid input syntax for type integer: \"x0\"" } else { "Could not convert string" };
    assert_eq!(run.stderr.matches(engine_message).count(), 1, "the engine error is printed once:\n{}", run.stderr);
    assert!(!run.stderr.contains("caused by"), "{}", run.stderr);
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(1).json();
    assert_eq!(v["error"]["kind"], "build");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("models/bad.lua:3: building model `s.bad`: ") && message.matches(engine_message).count() == 1, "{message}");
}

// ---- defect 10d: no empty `while running:` -----------------------------------------------------

#[test]
fn a_locked_database_error_names_the_file_and_no_empty_statement() {
    let p = sample_project();
    p.apply("dev");
    p.write("models/a.lua", &model_a("AND id < 7"));
    // Another process (this test) holds DuckDB's lock on the database file.
    let _held = DuckDb::open(&p.engine_path(), &EngineSection::default()).expect("open duckdb");
    for args in [&["apply", "dev", "--yes"][..], &["audit", "dev"][..]] {
        let run = p.run(args);
        run.expect_code(1);
        assert!(run.stderr.contains("cannot open DuckDB database") && run.stderr.contains("efmesh.duckdb"), "{}", run.stderr);
        assert!(run.stderr.lines().all(|l| !l.trim_end().ends_with("while running:")), "empty `while running:` in:\n{}", run.stderr);
        assert!(!run.stderr.contains("while running"), "no statement ran:\n{}", run.stderr);
    }
}

// ---- defect 10e: `--json` failures print one error object --------------------------------------

fn every_json_command_prints_one_error_object_when_it_fails(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let config = p.read("efmesh.toml");
    p.write("efmesh.toml", &format!("{config}\n[engine\n"));
    for args in [
        &["plan", "dev", "--json"][..],
        &["apply", "dev", "--yes", "--json"],
        &["run", "dev", "--json"],
        &["audit", "dev", "--json"],
        &["test", "--json"],
        &["render", "s.a", "--json"],
        &["preview", "dev", "--json"],
    ] {
        let run = p.run(args);
        run.expect_code(1);
        let v = run.json();
        assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["apiVersion", "error"], "{v:#}");
        assert_eq!(v["error"]["kind"], "config", "{args:?}: {v:#}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("invalid config") && message.contains("efmesh.toml"), "{args:?}: {message}");
        assert!(run.stderr.contains(message.lines().next().unwrap()), "stderr says the same: {}", run.stderr);
    }
    // `check --json` reports a project that does not load in its own report.
    let v = p.run(&["check", "--json"]).expect_code(1).json();
    assert_eq!(v["ok"], false);
    // At the file and the line TOML names, the path said once.
    let broken = p.read("efmesh.toml").lines().position(|l| l == "[engine").unwrap() as u64 + 1;
    let e = &v["errors"][0];
    assert_eq!((e["file"].as_str().map(|f| f.ends_with("efmesh.toml")), e["line"].as_u64()), (Some(true), Some(broken)), "{v:#}");
    assert!(e["message"].as_str().unwrap().starts_with("invalid config: TOML parse error at line"), "{v:#}");
    let text = p.run(&["check"]).expect_code(1).stdout.clone();
    assert_eq!(text.matches("efmesh.toml").count(), 1, "{text}");
    p.write("efmesh.toml", &config);

    // Failures after loading: an unknown environment of `audit`, a model a plan cannot parse, a
    // stale... and usage errors.
    let v = p.run(&["audit", "nope", "--json"]).expect_code(1).json();
    assert!(v["error"]["message"].as_str().unwrap().contains("environment `nope` does not exist"), "{v:#}");
    assert_eq!(v["error"]["kind"], "usage", "{v:#}");
    let v = p.run(&["plan", "Bad-Env", "--json"]).expect_code(1).json();
    assert_eq!(v["error"]["kind"], "usage", "{v:#}");
    let v = p.run(&["apply", "--json"]).expect_code(1).json();
    assert_eq!(v["error"]["kind"], "usage", "{v:#}");
    // Without `--json`, stdout stays empty on failure.
    assert_eq!(p.run(&["audit", "nope"]).expect_code(1).stdout, "");
    // A successful `--json` command has no `error`.
    assert!(p.plan("dev").get("error").is_none());
}

/// A name given on the command line that names nothing (an unknown model, environment or
/// column) is a `usage` error under `--json`, whichever command was given it, as an unknown
/// model in `graph --select` is: not the catch-all `error`.
#[test]
fn a_name_that_names_nothing_is_a_usage_error_in_json() {
    let p = sample_project();
    for args in [
        &["render", "s.nope", "--json"][..],
        &["render", "s.nope", "--interval", "2026-01-01", "2026-01-02", "--json"],
        &["lineage", "s.nope", "--json"],
        &["lineage", "s.a.nope", "--json"],
        &["preview", "dev", "s.nope", "--json"],
        &["restate", "dev", "--model", "s.nope", "--from", "2026-01-01", "--to", "2026-01-02", "--json"],
    ] {
        let v = p.run(args).expect_code(1).json();
        assert_eq!(v["error"]["kind"], "usage", "{args:?}: {v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("nope"), "{args:?}: {v:#}");
    }
    p.apply("dev");
    for args in
        [&["diff", "dev", "nope", "--json"][..], &["diff", "dev", "dev", "--model", "s.nope", "--json"], &["audit", "dev", "--model", "s.nope", "--json"]]
    {
        let v = p.run(args).expect_code(1).json();
        assert_eq!(v["error"]["kind"], "usage", "{args:?}: {v:#}");
        assert!(v["error"]["message"].as_str().unwrap().contains("nope"), "{args:?}: {v:#}");
    }
}

// ---- defect 10f: secrets in efmesh.toml never appear in errors -----------------------------------

#[test]
fn a_secret_written_in_the_config_never_appears_in_an_error() {
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzz9EXAMPLE";
    let p = sample_project();
    for extra in [
        format!("\n[lake]\npath = \"lake\"\ns3_secret_access_key = \"{secret}\"\n"),
        format!("\n[ducklake]\ncatalog = \"c.ducklake\"\npassword = '{secret}'\n"),
        // Not even valid TOML: the parser quotes the line.
        format!("\n[lake]\npath = \"lake\"\ns3_session_token = {secret}\n"),
    ] {
        p.write("efmesh.toml", &format!("{CONFIG}{extra}"));
        for args in [&["plan", "dev"][..], &["plan", "dev", "--json"], &["check"], &["check", "--json"], &["apply", "dev", "--yes", "--json"]] {
            let run = p.run(args);
            run.expect_code(1);
            for (what, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
                assert!(!text.contains(secret) && !text.contains("wJalrXUtnFEMI"), "{args:?} {what} leaks the secret:\n{text}");
            }
            assert!(run.stderr.contains("<redacted>") || run.stdout.contains("<redacted>"), "{args:?}: {}{}", run.stdout, run.stderr);
        }
    }
    let v: Value = p.run(&["plan", "dev", "--json"]).json();
    assert!(v["error"]["message"].as_str().unwrap().contains("s3_session_token"), "the key is still named: {v:#}");
}
