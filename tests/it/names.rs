//! Names cannot collide: every environment view of a model serves that model's rows, whatever
//! the other models are called. A project whose names would collide must instead fail to load
//! (exit 1, naming the culprit) without touching the engine.

use crate::common::*;
use crate::on_every_engine;

on_every_engine!(
    models_differing_only_in_case_do_not_share_a_view,
    prod_view_of_a_double_underscore_schema_does_not_shadow_another_envs_view,
    a_model_in_the_physical_schema_cannot_replace_a_physical_relation,
    physical_names_never_collide,
    environment_dev_underscore_and_model_underscore_schema_cannot_share_a_view,
);

/// A full model `name` returning the single row `name`.
fn model(name: &str) -> String {
    format!("define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"varchar\" }} }}, query = \"SELECT '{name}' AS v\" }}\n")
}

/// Applies `envs` in turn. Returns false when the project was rejected at load (exit 1 naming
/// every `culprits`, nothing in the engine), true when every apply succeeded.
#[track_caller]
fn apply_or_rejected(p: &Project, envs: &[&str], culprits: &[&str]) -> bool {
    for env in envs {
        let run = p.run(&["apply", env, "--yes", "--json"]);
        if run.code == 1 && run.stderr.contains("failed to load") {
            for c in culprits {
                assert!(run.stderr.contains(c), "rejection does not name {c:?}:\n{}", run.stderr);
            }
            assert!(p.physical_tables().is_empty(), "rejected after building");
            return false;
        }
        run.expect_code(0);
    }
    true
}

#[track_caller]
fn assert_serves(p: &Project, env: &str, model: &str) {
    assert_eq!(p.rows(&env_view(env, model)), vec![vec![Some(model.to_string())]], "view of `{model}` in `{env}`");
}

fn models_differing_only_in_case_do_not_share_a_view(engine: EngineBackend) {
    // DuckDB identifiers are case-insensitive, so `s.a` and `s.A` would share the view
    // `"dev__s"."a"`: the project must be rejected naming both.
    let p = Project::on_engine(engine);
    p.write("models/m.lua", &format!("{}{}", model("s.a"), model("s.A")));
    if apply_or_rejected(&p, &["dev"], &["s.a", "s.A"]) {
        assert_serves(&p, "dev", "s.a");
        assert_serves(&p, "dev", "s.A");
    }
}

fn prod_view_of_a_double_underscore_schema_does_not_shadow_another_envs_view(engine: EngineBackend) {
    // In prod, a model `dev__s.e` would be served as `"dev__s"."e"`, where environment `dev`
    // serves `s.e`: schemas containing `__` are rejected at load.
    let p = Project::on_engine(engine);
    p.write("models/m.lua", &format!("{}{}", model("s.e"), model("dev__s.e")));
    if apply_or_rejected(&p, &["dev", "prod"], &["dev__s.e"]) {
        assert_serves(&p, "prod", "dev__s.e");
        assert_serves(&p, "prod", "s.e");
        assert_serves(&p, "dev", "s.e");
    }
}

fn a_model_in_the_physical_schema_cannot_replace_a_physical_relation(engine: EngineBackend) {
    // A model in schema `_efmesh` named after a physical relation would have its prod view
    // replace that relation: the schema `_efmesh` is rejected at load.
    let p = Project::on_engine(engine);
    p.write("models/b.lua", "define_model { name = \"s.b\", kind = kind.view(), schema = { { \"v\", \"varchar\" } }, query = \"SELECT 's.b' AS v\" }\n");
    let plan = p.plan("dev");
    let physical = action(&plan, "s.b")["physical"].as_str().unwrap().to_string();
    let table = physical.trim_start_matches("\"_efmesh\".\"").trim_end_matches('"').to_string();
    p.apply("dev");
    assert_serves(&p, "dev", "s.b");

    let intruder = format!("_efmesh.{table}");
    p.write("models/x.lua", &model(&intruder));
    let before = p.physical_tables();
    let mut rejected = false;
    for env in ["dev", "prod"] {
        let run = p.run(&["apply", env, "--yes"]);
        if run.code == 1 && run.stderr.contains("failed to load") {
            assert!(run.stderr.contains(&intruder) || run.stderr.contains("_efmesh"), "{}", run.stderr);
            assert_eq!(p.physical_tables(), before);
            rejected = true;
            break;
        }
    }
    if !rejected {
        // Whatever prod made of the intruder, `s.b` must still serve its own rows.
        assert_serves(&p, "dev", "s.b");
    }
}

fn physical_names_never_collide(engine: EngineBackend) {
    // `a__b.c` and `a.b__c` would both flatten to `a__b__c`: schemas cannot contain `__`, so the
    // first `__` of a physical name always ends the schema, and the full fingerprint (which hashes
    // the model name) ends it. With identical bodies, tables `b__c` and `b` stay apart.
    let same = |name: &str| {
        format!("define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"varchar\" }} }}, query = \"SELECT 'same' AS v\" }}\n")
    };
    let rejected = Project::on_engine(engine.another());
    rejected.write("models/m.lua", &format!("{}{}", same("a__b.c"), same("a.b__c")));
    let run = rejected.run(&["plan", "dev"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("a__b.c") && run.stderr.contains("`__`"), "{}", run.stderr);

    let p = Project::on_engine(engine);
    p.write("models/m.lua", &format!("{}{}{}{}", same("a.b"), same("a.b__c"), model("x.y"), model("x.y__z")));
    let dev = p.apply("dev");
    let physical: std::collections::BTreeSet<String> = actions(&dev).iter().map(|a| a["physical"].as_str().unwrap().to_string()).collect();
    assert_eq!(physical.len(), 4, "{physical:?}");
    assert_eq!(p.physical_tables().len(), 4);
    p.apply("prod");
    for env in ["dev", "prod"] {
        assert_serves(&p, env, "x.y");
        assert_serves(&p, env, "x.y__z");
        assert_eq!(p.rows(&env_view(env, "a.b")), vec![vec![Some("same".to_string())]]);
        assert_eq!(p.rows(&env_view(env, "a.b__c")), vec![vec![Some("same".to_string())]]);
    }
}

/// Every string of 1 to 4 characters over `a`, `A`, `_` and `1`: underscores at every edge,
/// both cases, `__` inside, digits first.
fn tricky_words() -> Vec<String> {
    let mut words: Vec<String> = vec![String::new()];
    let mut all = Vec::new();
    for _ in 0..4 {
        words = words.iter().flat_map(|w| ['a', 'A', '_', '1'].map(|c| format!("{w}{c}"))).collect();
        all.extend(words.iter().cloned());
    }
    all
}

#[test]
fn environment_view_names_are_injective_over_tricky_names() {
    // `<env>__<schema>` (and `<schema>` for prod) must never give two (environment, schema)
    // pairs the same DuckDB schema, ignoring case as DuckDB does, nor land on `_efmesh`.
    use efmesh::core::name::validate_env;
    let words = tricky_words();
    let mut envs: Vec<String> = words.iter().filter(|w| validate_env(w).is_ok()).cloned().collect();
    envs.push("prod".into());
    let schemas: Vec<String> = words.iter().filter(|w| efmesh::core::ModelName::parse(&format!("{w}.t")).is_ok()).cloned().collect();
    assert!(envs.len() > 20 && schemas.len() > 100, "{} envs, {} schemas", envs.len(), schemas.len());
    // The rules refuse exactly the names that could collide.
    assert!(validate_env("dev_").is_err() && efmesh::core::ModelName::parse("mart_.x").is_err());
    assert!(validate_env("dev").is_ok() && efmesh::core::ModelName::parse("_mart.x").is_ok());
    let mut seen: std::collections::HashMap<String, (String, String)> = std::collections::HashMap::new();
    for env in &envs {
        for schema in &schemas {
            let view = efmesh::plan::env_schema(env, schema).to_lowercase();
            assert_ne!(view, "_efmesh", "({env}, {schema})");
            let key = (env.clone(), schema.to_lowercase());
            if let Some(prev) = seen.insert(view.clone(), key.clone()) {
                assert_eq!(prev, key, "`{view}` serves two environment schemas");
            }
        }
    }
}

#[test]
fn physical_names_are_injective_over_tricky_names_even_with_one_fingerprint() {
    // `<schema>__<table>__<fp>` must tell models apart by structure alone (the fingerprint
    // hashes the name too, but injectivity must not rest on it).
    use efmesh::sql::fingerprint::{Fingerprint, physical_table};
    let fp = Fingerprint::parse(&"0".repeat(64)).unwrap();
    let words = tricky_words();
    let names: Vec<efmesh::core::ModelName> =
        words.iter().flat_map(|s| words.iter().map(move |t| format!("{s}.{t}"))).filter_map(|n| efmesh::core::ModelName::parse(&n).ok()).collect();
    assert!(names.len() > 10_000, "{}", names.len());
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for name in &names {
        let physical = physical_table(name, &fp).to_lowercase();
        let key = name.to_string().to_lowercase();
        if let Some(prev) = seen.insert(physical.clone(), key.clone()) {
            assert_eq!(prev, key, "`{physical}` stores two models");
        }
    }
}

fn environment_dev_underscore_and_model_underscore_schema_cannot_share_a_view(engine: EngineBackend) {
    // `dev_` + `mart.x` and `dev` + `_mart.x` both used to map to `"dev___mart"."x"`.
    let p = Project::on_engine(engine);
    p.write("models/m.lua", &model("mart.x"));
    let run = p.run(&["apply", "dev_", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("dev_") && run.stderr.contains("not ending with `_`"), "{}", run.stderr);
    assert!(p.physical_tables().is_empty(), "a refused environment built something");

    // A store written before the rule may hold `dev_`: applying `dev` over its view is refused,
    // naming both environments and both models, before anything is built.
    p.apply("devx");
    {
        let db = rusqlite::Connection::open(p.state_path()).unwrap();
        db.execute("UPDATE environments SET env = 'dev_' WHERE env = 'devx'", []).unwrap();
    }
    p.write("models/m.lua", &model("_mart.x"));
    let before = p.physical_tables();
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    for needle in ["`dev`", "`dev_`", "_mart.x", "mart.x", "dev___mart"] {
        assert!(run.stderr.contains(needle), "refusal does not name {needle}:\n{}", run.stderr);
    }
    assert_eq!(p.physical_tables(), before);
    assert!(p.state().env_pointers("dev").unwrap().is_empty());
    // Without the legacy environment in the way the same apply serves its model.
    p.run(&["apply", "prod", "--yes"]).expect_code(0);
    assert_serves(&p, "prod", "_mart.x");
}

/// On the Postgres engine, a schema Postgres reserves (`pg_…`: `CREATE SCHEMA` refuses it, at
/// the first promotion to `prod`, after every build) or a reserved word its grammar cannot read
/// unquoted as a schema (`order`, `user`, `select`: every query `ref`ing the model would fail to
/// parse) is refused at load by `plan` and `check`, naming the model's file:line, before
/// anything is built. DuckDB reads them all; a keyword as the table (`sales.order`) is read and
/// served on Postgres too.
#[test]
fn a_schema_postgres_reserves_or_cannot_read_unquoted_is_refused_at_load_on_postgres() {
    let Some(t) = crate::pg::fresh_database() else { return };
    for schema in ["pg_stuff", "pg_temp", "order", "user", "select"] {
        let p = Project::on_engine(EngineBackend::Postgres(t.clone()));
        p.write("models/m.lua", &format!("\n{}", model(&format!("{schema}.x"))));
        let refusal = format!("the schema `{schema}` of model `{schema}.x` cannot hold models on the Postgres engine");
        let plan = p.run(&["plan", "dev"]);
        plan.expect_code(1);
        assert!(plan.stderr.contains("models/m.lua:2") && plan.stderr.contains(&refusal), "{schema}: {}", plan.stderr);
        let check = p.run(&["check"]);
        check.expect_code(1);
        assert!(check.stdout.contains("models/m.lua:2") && check.stdout.contains(&refusal), "{schema}: {}", check.stdout);
        assert!(p.physical_tables().is_empty(), "{schema}: nothing built");
        if matches!(schema, "pg_stuff" | "order") {
            let on_duckdb = Project::new();
            on_duckdb.write("models/m.lua", &model(&format!("{schema}.x")));
            on_duckdb.run(&["plan", "dev"]).expect_code(0);
        }
    }
    let p = Project::on_engine(EngineBackend::Postgres(t));
    p.write(
        "models/m.lua",
        "local o = define_model { name = \"sales.order\", kind = kind.full(), schema = { { \"v\", \"varchar\" } }, query = \"SELECT 'o' AS v\" }\n\
         define_model { name = \"sales.reader\", kind = kind.full(), schema = { { \"v\", \"varchar\" } }, query = \"SELECT v FROM \" .. ref(o) }\n",
    );
    p.apply("dev");
    assert_eq!(p.query("SELECT v FROM dev__sales.reader")[0][0].as_deref(), Some("o"));
}

/// A schema DuckDB already names (its `temp`/`system` catalogs, the database's own name, a system
/// schema) would fail only at the first promotion to prod, with DuckDB's "ambiguous reference":
/// refused at load instead, naming the model's file:line, before anything is built.
#[test]
fn a_schema_the_engine_already_names_is_refused_at_load() {
    let stem = Project::new().engine_path().file_stem().unwrap().to_string_lossy().to_string();
    for schema in ["temp", "System", "information_schema", "pg_catalog", stem.as_str()] {
        let p = Project::new();
        p.write("efmesh.toml", &p.config_with(""));
        p.write("models/m.lua", &format!("\n{}", model(&format!("{schema}.x"))));
        let run = p.run(&["apply", "dev", "--yes"]);
        run.expect_code(1);
        assert!(
            run.stderr.contains("models/m.lua:2") && run.stderr.contains(&format!("the schema `{schema}` of model `{schema}.x` cannot hold models")),
            "{schema}: {}",
            run.stderr
        );
        assert!(p.physical_tables().is_empty(), "{schema}: nothing built");
    }
}
