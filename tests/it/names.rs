//! Names cannot collide: every environment view of a model serves that model's rows, whatever
//! the other models are called. A project whose names would collide must instead fail to load
//! (exit 1, naming the culprit) without touching the engine.

use crate::common::*;

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

#[test]
fn models_differing_only_in_case_do_not_share_a_view() {
    // DuckDB identifiers are case-insensitive, so `s.a` and `s.A` would share the view
    // `"dev__s"."a"`: the project must be rejected naming both.
    let p = Project::new();
    p.write("models/m.lua", &format!("{}{}", model("s.a"), model("s.A")));
    if apply_or_rejected(&p, &["dev"], &["s.a", "s.A"]) {
        assert_serves(&p, "dev", "s.a");
        assert_serves(&p, "dev", "s.A");
    }
}

#[test]
fn prod_view_of_a_double_underscore_schema_does_not_shadow_another_envs_view() {
    // In prod, a model `dev__s.e` would be served as `"dev__s"."e"`, where environment `dev`
    // serves `s.e`: schemas containing `__` are rejected at load.
    let p = Project::new();
    p.write("models/m.lua", &format!("{}{}", model("s.e"), model("dev__s.e")));
    if apply_or_rejected(&p, &["dev", "prod"], &["dev__s.e"]) {
        assert_serves(&p, "prod", "dev__s.e");
        assert_serves(&p, "prod", "s.e");
        assert_serves(&p, "dev", "s.e");
    }
}

#[test]
fn a_model_in_the_physical_schema_cannot_replace_a_physical_relation() {
    // A model in schema `_efmesh` named after a physical relation would have its prod view
    // replace that relation: the schema `_efmesh` is rejected at load.
    let p = Project::new();
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

#[test]
fn physical_names_never_collide() {
    // `a__b.c` and `a.b__c` would both flatten to `a__b__c`: schemas cannot contain `__`, so the
    // first `__` of a physical name always ends the schema, and the full fingerprint (which hashes
    // the model name) ends it. With identical bodies, tables `b__c` and `b` stay apart.
    let same = |name: &str| {
        format!("define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"varchar\" }} }}, query = \"SELECT 'same' AS v\" }}\n")
    };
    let rejected = Project::new();
    rejected.write("models/m.lua", &format!("{}{}", same("a__b.c"), same("a.b__c")));
    let run = rejected.run(&["plan", "dev"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("a__b.c") && run.stderr.contains("`__`"), "{}", run.stderr);

    let p = Project::new();
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
