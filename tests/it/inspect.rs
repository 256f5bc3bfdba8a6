//! Seeing the project (issue #15): `efmesh diff` of two environments' versions, read from the
//! state store alone.

use crate::common::{EngineBackend, Project, action};
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(diff_lists_models_added_removed_and_at_another_version_between_two_environments);

fn models(b_query: &str, with_c: bool, with_d: bool) -> String {
    let mut s = String::from("local a = define_model { name = \"s.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    s.push_str(&format!(
        "define_model {{ name = \"s.b\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"{b_query} FROM \" .. ref(a) }}\n"
    ));
    if with_c {
        s.push_str("define_model { name = \"s.c\", kind = kind.full(), schema = { { \"y\", \"integer\" } }, query = \"SELECT 3 AS y\" }\n");
    }
    if with_d {
        s.push_str("define_model { name = \"s.d\", kind = kind.full(), schema = { { \"z\", \"integer\" } }, query = \"SELECT 4 AS z\" }\n");
    }
    s
}

fn diff_lists_models_added_removed_and_at_another_version_between_two_environments(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("models/m.lua", &models("SELECT x", true, false));
    let first = p.apply("dev");
    p.apply("prod");
    let same = p.run(&["diff", "prod", "dev", "--json"]).expect_code(0).json();
    assert_eq!(same["apiVersion"], 1);
    assert_eq!(
        (same["added"].as_array().map(Vec::len), same["changed"].as_array().map(Vec::len), same["same"].as_u64()),
        (Some(0), Some(0), Some(3)),
        "{same:#}"
    );

    // dev moves on: s.b edited, s.c removed, s.d added; s.a stays.
    p.write("models/m.lua", &models("SELECT x + 1 AS x", false, true));
    let second = p.apply("dev");
    let v = p.run(&["diff", "prod", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["envA"], "prod");
    assert_eq!(v["added"].as_array().unwrap().iter().map(|m| m["model"].clone()).collect::<Vec<_>>(), [Value::from("s.d")], "{v:#}");
    assert_eq!(v["removed"].as_array().unwrap().iter().map(|m| m["model"].clone()).collect::<Vec<_>>(), [Value::from("s.c")], "{v:#}");
    let changed = v["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 1, "{v:#}");
    assert_eq!(changed[0]["model"], "s.b");
    // The fingerprints are the versions each environment serves.
    let (fa, fb) = (changed[0]["fingerprintA"].as_str().unwrap(), changed[0]["fingerprintB"].as_str().unwrap());
    assert!(fa.starts_with(action(&first, "s.b")["fingerprint"].as_str().unwrap()), "{fa} vs {first:#}");
    assert!(fb.starts_with(action(&second, "s.b")["fingerprint"].as_str().unwrap()), "{fb} vs {second:#}");
    assert_eq!(v["same"], 1);

    // The text report, and the other direction.
    let text = p.run(&["diff", "prod", "dev"]).expect_code(0).stdout.clone();
    assert!(text.starts_with("diff `prod` → `dev`: 1 only in `dev`, 1 only in `prod`, 1 at another version, 1 the same\n"), "{text}");
    assert!(text.contains("  + s.d ") && text.contains("  - s.c ") && text.contains("  ~ s.b "), "{text}");
    let back = p.run(&["diff", "dev", "prod", "--json"]).expect_code(0).json();
    assert_eq!(back["added"][0]["model"], "s.c");
    assert_eq!(back["removed"][0]["model"], "s.d");

    // Restricted to some models.
    let only = p.run(&["diff", "prod", "dev", "--model", "s.b", "--json"]).expect_code(0).json();
    assert_eq!(
        (only["added"].as_array().map(Vec::len), only["removed"].as_array().map(Vec::len), only["changed"].as_array().map(Vec::len)),
        (Some(0), Some(0), Some(1))
    );

    // Bad input is named.
    let r = p.run(&["diff", "prod", "qa"]);
    r.expect_code(1);
    assert!(r.stderr.contains("environment `qa` was never applied (environments: `dev`, `prod`)"), "{}", r.stderr);
    let r = p.run(&["diff", "prod", "dev", "--model", "s.bb", "--json"]);
    r.expect_code(1);
    assert_eq!(r.json()["apiVersion"], 1);
    assert!(r.stderr.contains("unknown model `s.bb`") && r.stderr.contains("did you mean `s.b`?"), "{}", r.stderr);
}
