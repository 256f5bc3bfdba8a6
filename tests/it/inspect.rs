//! Seeing the project (issue #15): `efmesh diff` of two environments' versions, read from the
//! state store alone, and of their data (`--data`, read-only on the engine).

use crate::common::{EngineBackend, Project, Run, action, env_view};
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(
    diff_lists_models_added_removed_and_at_another_version_between_two_environments,
    diff_data_counts_rows_only_on_one_side_matched_and_mismatched_values,
    diff_data_tells_intervals_and_signed_zeros_their_equality_calls_equal_apart,
    diff_data_never_takes_a_model_column_for_its_own_marker_columns,
    diff_data_matches_and_samples_a_key_retyped_between_exact_numbers_by_value,
);

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

/// `apply dev` stopped right after its view swap (`EFMESH_FAULT=after-view-swap`): `dev`'s
/// pointers still name the old `s.b` while its views serve the new one. `diff` (state only, no
/// engine) still compares the pointers, and says the promotion is under way, naming `s.b`, in
/// the text and in `promotionsUnderWay` (with `--model`, only when it changes a model asked
/// for); once a command that reads views undid it, no more.
#[test]
fn diff_warns_of_an_interrupted_promotion_whose_views_may_differ_from_its_pointers() {
    let p = Project::new();
    p.write("models/m.lua", &models("SELECT x", true, false));
    p.apply("prod");
    p.apply("dev");
    p.write("models/m.lua", &models("SELECT x + 1 AS x", true, false));
    let out = p.command(&["apply", "dev", "--yes"]).env(efmesh::apply::fault::FAULT_ENV, "after-view-swap").output().expect("spawn efmesh");
    let crashed = Run::from_output(out, "EFMESH_FAULT=after-view-swap efmesh apply dev --yes".to_string());
    assert!(crashed.stderr.contains("aborting at `after-view-swap`"), "{}", crashed.stderr);
    assert_eq!(p.rows(&env_view("dev", "s.b")), vec![vec![Some("2".to_string())]], "dev's view serves the new version");

    let v = p.run(&["diff", "prod", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["same"], 3, "the pointers are compared: {v:#}");
    let under_way = v["promotionsUnderWay"].as_array().expect("promotionsUnderWay");
    assert_eq!(under_way.len(), 1, "{v:#}");
    assert_eq!((under_way[0]["env"].as_str(), under_way[0]["models"].clone()), (Some("dev"), serde_json::json!(["s.b"])), "{v:#}");
    let text = p.run(&["diff", "prod", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("warning: a promotion of `dev` started at "), "{text}");
    assert!(
        text.contains("`dev`'s views may serve other versions than its pointers compared here (`s.b`) until the next command undoes the interrupted promotion"),
        "{text}"
    );
    // `--model` lists only the models asked for: a promotion changing none of them is not said.
    let v = p.run(&["diff", "prod", "dev", "--model", "s.a", "--json"]).expect_code(0).json();
    assert_eq!(v["promotionsUnderWay"], serde_json::json!([]), "{v:#}");
    assert!(!p.run(&["diff", "prod", "dev", "--model", "s.a"]).expect_code(0).stdout.contains("warning:"));
    let v = p.run(&["diff", "prod", "dev", "--model", "s.b,s.a", "--json"]).expect_code(0).json();
    assert_eq!(v["promotionsUnderWay"][0]["models"], serde_json::json!(["s.b"]), "{v:#}");

    // `status dev` reads views: it undoes the promotion first; diff has nothing to warn of.
    p.run(&["status", "dev"]).expect_code(0);
    assert_eq!(p.rows(&env_view("dev", "s.b")), vec![vec![Some("1".to_string())]]);
    let v = p.run(&["diff", "prod", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["promotionsUnderWay"], serde_json::json!([]), "{v:#}");
    assert!(!p.run(&["diff", "prod", "dev"]).stdout.contains("warning:"));
}

/// The project of the data diff: `s.t` keyed by its grain `id`, `s.u` by its unique key `code`,
/// `s.k` without a key, `s.h` (`scd_type2`) by its key `id`, `s.e` embedded (no data of its own); `second` is what `dev` serves: in
/// `s.t` row 2 changed, row 3's name NULL where `prod` has a value, row 4 only in `dev`, row 6
/// only in `prod`, a column `extra` only in `dev` and `v` at another type; in `s.u` one value
/// changed; in `s.k` one of two duplicate rows gone and a new row; in `s.h` one value changed (and
/// every `valid_from` differs: each environment built its version at another time); `s.only`
/// only in `dev`.
fn data_models(second: bool) -> String {
    let t = if second {
        "SELECT id, name, CAST(v AS DECIMAL(12,4)) AS v, CAST(9007199254740993 AS FLOAT8) AS big, 'x' AS extra FROM (VALUES (1, 'a', 10), (2, 'B', 20), (3, NULL, 30), (4, 'd', 40), (5, NULL, 50), (NULL, 'z', 0)) AS t(id, name, v)"
    } else {
        "SELECT id, name, v, CAST(9007199254740993 AS BIGINT) AS big FROM (VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30), (5, NULL, 50), (6, 'f', 60), (NULL, 'z', 0)) AS t(id, name, v)"
    };
    let t_schema = if second {
        r#"{ "id", "integer" }, { "name", "varchar" }, { "v", "decimal(12,4)" }, { "big", "float8" }, { "extra", "varchar" }"#
    } else {
        r#"{ "id", "integer" }, { "name", "varchar" }, { "v", "integer" }, { "big", "bigint" }"#
    };
    let u = if second { "(1, 'one'), (2, 'TWO'), (3, 'three')" } else { "(1, 'one'), (2, 'two'), (3, 'three')" };
    let k = if second { "(1, 'x'), (2, 'y'), (3, 'z')" } else { "(1, 'x'), (1, 'x'), (2, 'y')" };
    let h = if second { "(1, 'a'), (2, 'c')" } else { "(1, 'a'), (2, 'b')" };
    let mut s = format!(
        "define_model {{ name = \"s.t\", kind = kind.full(), grain = {{ \"id\" }}, schema = {{ {t_schema} }}, query = [[{t}]] }}\n\
         define_model {{ name = \"s.u\", kind = kind.incremental_by_unique_key {{ key = \"code\" }}, schema = {{ {{ \"code\", \"integer\" }}, {{ \"label\", \"varchar\" }} }}, query = [[SELECT code, label FROM (VALUES {u}) AS u(code, label)]] }}\n\
         define_model {{ name = \"s.k\", kind = kind.full(), schema = {{ {{ \"n\", \"integer\" }}, {{ \"w\", \"varchar\" }} }}, query = [[SELECT n, w FROM (VALUES {k}) AS k(n, w)]] }}\n\
         define_model {{ name = \"s.h\", kind = kind.scd_type2 {{ key = \"id\" }}, schema = {{ {{ \"id\", \"integer\" }}, {{ \"w\", \"varchar\" }} }}, query = [[SELECT id, w FROM (VALUES {h}) AS h(id, w)]] }}\n\
         define_model {{ name = \"s.e\", kind = kind.embedded(), schema = {{ {{ \"n\", \"integer\" }} }}, query = [[SELECT 1 AS n]] }}\n"
    );
    if second {
        s.push_str("define_model { name = \"s.only\", kind = kind.full(), schema = { { \"n\", \"integer\" } }, query = [[SELECT 1 AS n]] }\n");
    }
    s
}

fn entry<'a>(v: &'a Value, model: &str) -> &'a Value {
    v["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data array: {v:#}"))
        .iter()
        .find(|d| d["model"] == model)
        .unwrap_or_else(|| panic!("no entry for {model}: {v:#}"))
}

fn count(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("{field} is not a count: {v:#}"))
}

/// The mismatches of `column` in a data diff entry (0 when it is not listed).
fn mismatches(v: &Value, column: &str) -> u64 {
    v["columns"].as_array().unwrap().iter().find(|c| c["column"] == column).map_or(0, |c| count(c, "mismatches"))
}

fn diff_data_counts_rows_only_on_one_side_matched_and_mismatched_values(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("models/m.lua", &data_models(false));
    p.apply("prod");
    p.write("models/m.lua", &data_models(true));
    p.apply("dev");

    let v = p.run(&["diff", "prod", "dev", "--data", "--json"]).expect_code(0).json();
    // The version half is still there, and the data half lists the models both serve that have
    // data, in topological order (not the embedded `s.e`, not `s.only`).
    assert_eq!(v["added"][0]["model"], "s.only", "{v:#}");
    let listed: Vec<&str> = v["data"].as_array().unwrap().iter().map(|d| d["model"].as_str().unwrap()).collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["s.h", "s.k", "s.t", "s.u"], "{v:#}");

    // Keyed by the grain: a NULL key matches a NULL key; row 2 changed and row 3's NULL name
    // against `c` are the two mismatches of `name` (row 5's NULL against NULL is none).
    let t = entry(&v, "s.t");
    assert_eq!(t["key"], serde_json::json!(["id"]), "{t:#}");
    assert_eq!(t["keyless"], false);
    assert_eq!((count(t, "rowsA"), count(t, "rowsB")), (6, 6), "{t:#}");
    assert_eq!((count(t, "onlyInA"), count(t, "onlyInB"), count(t, "matched")), (1, 1, 5), "{t:#}");
    assert_eq!(mismatches(t, "name"), 2, "{t:#}");
    let name = t["columns"].as_array().unwrap().iter().find(|c| c["column"] == "name").unwrap();
    assert!((name["rate"].as_f64().unwrap() - 0.4).abs() < 1e-9, "{t:#}");
    // `v` is at another type (an integer in A, `decimal(12,4)` in B) but the same value in every
    // row: compared as numbers, no mismatch (as text, `10` and `10.0000` would differ).
    assert_eq!(mismatches(t, "v"), 0, "{t:#}");
    // `big` served as 9007199254740993 in A and as a double (…992) in B: compared as doubles they
    // would be equal; every matched row differs.
    assert_eq!(mismatches(t, "big"), 5, "{t:#}");
    assert_eq!(t["columns"].as_array().unwrap().len(), 2, "{t:#}");
    assert_eq!(t["columnsOnlyInA"], serde_json::json!([]), "{t:#}");
    assert_eq!(t["columnsOnlyInB"], serde_json::json!(["extra"]), "{t:#}");
    let retyped = t["typeChanged"].as_array().unwrap();
    assert_eq!(retyped.len(), 2, "{t:#}");
    assert_eq!(retyped[0]["column"], "v");
    assert_ne!(retyped[0]["typeA"], retyped[0]["typeB"]);
    assert_eq!(t["onlyInAKeys"], serde_json::json!([["6"]]), "{t:#}");
    assert_eq!(t["onlyInBKeys"], serde_json::json!([["4"]]), "{t:#}");
    assert_eq!(t["sampledPercent"], Value::Null);

    // Keyed by the unique key of its kind.
    let u = entry(&v, "s.u");
    assert_eq!(u["key"], serde_json::json!(["code"]), "{u:#}");
    assert_eq!((count(u, "onlyInA"), count(u, "onlyInB"), count(u, "matched"), mismatches(u, "label")), (0, 0, 3, 1), "{u:#}");

    // `scd_type2`: the open versions by key, the managed columns left out.
    let h = entry(&v, "s.h");
    assert_eq!((h["key"].clone(), h["scope"].clone()), (serde_json::json!(["id"]), Value::from("open")), "{h:#}");
    assert_eq!((count(h, "onlyInA"), count(h, "onlyInB"), count(h, "matched"), mismatches(h, "w")), (0, 0, 2, 1), "{h:#}");
    assert_eq!(h["columns"].as_array().unwrap().len(), 1, "valid_from/valid_to are never compared: {h:#}");

    // No key: a multiset, the duplicate row counted.
    let k = entry(&v, "s.k");
    assert_eq!((k["keyless"].clone(), k["key"].clone(), k["matched"].clone()), (Value::Bool(true), Value::Null, Value::Null), "{k:#}");
    assert_eq!((count(k, "rowsA"), count(k, "rowsB"), count(k, "onlyInA"), count(k, "onlyInB")), (3, 3, 1, 1), "{k:#}");
    assert!(k["note"].as_str().unwrap().contains("no grain or key declared"), "{k:#}");

    // The text report.
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("data \"prod\" ↔ \"dev\":\n"), "{text}");
    assert!(text.contains("  ≠ s.t  A=6 B=6  key (id): only in A 1, only in B 1, matched 5\n"), "{text}");
    assert!(text.contains("      name: 2 of 5 (40.00%)\n"), "{text}");
    assert!(text.contains("      columns only in B: extra\n"), "{text}");
    assert!(text.contains("      only in A: id=6\n") && text.contains("      only in B: id=4\n"), "{text}");
    assert!(text.contains("  ≠ s.k  A=3 B=3  no key (declare a grain): only in A 1, only in B 1\n"), "{text}");
    // Comparing an environment with itself finds nothing.
    let same = p.run(&["diff", "dev", "dev", "--data"]).expect_code(0).stdout.clone();
    let line = same.lines().find(|l| l.contains(" s.t ")).unwrap_or_else(|| panic!("{same}"));
    assert!(line.starts_with("  ✓ s.t ") && line.ends_with("  A=6 B=6  key (id): only in A 0, only in B 0, matched 6"), "{same}");
    assert!(!same.contains('≠'), "{same}");

    // Sampling: the same keys on both sides, so it never finds a row missing that the full
    // comparison does not; the same sample twice is the same result; row counts stay full;
    // a larger share compares a superset of keys, so no count shrinks as the share grows.
    let full = [count(t, "onlyInA"), count(t, "onlyInB"), count(t, "matched"), mismatches(t, "name")];
    let mut previous = [0u64; 4];
    for percent in ["1", "10", "25", "50", "75", "99"] {
        let s = p.run(&["diff", "prod", "dev", "--data", "--model", "s.t", "--sample", percent, "--json"]).expect_code(0).json();
        let again = p.run(&["diff", "prod", "dev", "--data", "--model", "s.t", "--sample", percent, "--json"]).expect_code(0).json();
        assert_eq!(s["data"], again["data"], "sampling is deterministic");
        assert_eq!(s["data"].as_array().unwrap().len(), 1, "{s:#}");
        let st = entry(&s, "s.t");
        assert_eq!(st["sampledPercent"].as_u64(), percent.parse().ok(), "{st:#}");
        assert_eq!((count(st, "rowsA"), count(st, "rowsB")), (6, 6), "row counts are never sampled: {st:#}");
        let got = [count(st, "onlyInA"), count(st, "onlyInB"), count(st, "matched"), mismatches(st, "name")];
        for i in 0..4 {
            assert!(got[i] <= full[i], "sample {percent}%: {got:?} exceeds the full comparison {full:?}");
            assert!(got[i] >= previous[i], "sample {percent}%: {got:?} shrank from {previous:?}");
        }
        if percent == "1" {
            // The smallest share leaves keys out (md5 is fixed: the same keys every run).
            assert!(got[2] < full[2], "sample 1%: {got:?} against {full:?}");
        }
        previous = got;
        // Each key reported only on one side is, in the data, only on that side.
        for (field, here, there) in [("onlyInAKeys", "prod", "dev"), ("onlyInBKeys", "dev", "prod")] {
            for key in st[field].as_array().unwrap() {
                let id = key[0].as_str().unwrap();
                let n = |env: &str| p.query(&format!("SELECT count(*) FROM {} WHERE id = {id}", env_view(env, "s.t")))[0][0].clone();
                assert_eq!((n(here), n(there)), (Some("1".into()), Some("0".into())), "key {id} of {field}: {st:#}");
            }
        }
        // The unique-key model's keys are the same in both: sampling them finds none missing.
        let su = p.run(&["diff", "prod", "dev", "--data", "--model", "s.u", "--sample", percent, "--json"]).expect_code(0).json();
        let su = entry(&su, "s.u");
        assert_eq!((count(su, "onlyInA"), count(su, "onlyInB")), (0, 0), "sample {percent}%: {su:#}");
        assert!(count(su, "matched") <= 3);
        // The keyless model samples whole rows, alike on both sides.
        let sk = p.run(&["diff", "prod", "dev", "--data", "--model", "s.k", "--sample", percent, "--json"]).expect_code(0).json();
        let sk = entry(&sk, "s.k");
        assert!(count(sk, "onlyInA") <= 1 && count(sk, "onlyInB") <= 1, "sample {percent}%: {sk:#}");
    }
    let text = p.run(&["diff", "prod", "dev", "--data", "--sample", "50"]).expect_code(0).stdout.clone();
    assert!(text.contains("  (sample 50%)\n"), "{text}");

    // Bad input: a share outside 1..99, a sample without --data, a model not served by both or
    // without data of its own; each exits 1 naming what is wrong.
    // With `--json`, each is a command line refused: kind `usage`.
    for bad in ["0", "100", "x"] {
        let r = p.run(&["diff", "prod", "dev", "--data", "--sample", bad, "--json"]);
        r.expect_code(1);
        let v = r.json();
        assert_eq!((v["apiVersion"].as_u64(), v["error"]["kind"].as_str()), (Some(1), Some("usage")), "{v:#}");
        assert!(r.stderr.contains("--sample expects a percent from 1 to 99"), "{}", r.stderr);
    }
    let r = p.run(&["diff", "prod", "dev", "--sample", "50"]);
    r.expect_code(1);
    assert!(r.stderr.contains("use it with --data"), "{}", r.stderr);
    let r = p.run(&["diff", "prod", "dev", "--data", "--model", "s.t,s.only"]);
    r.expect_code(1);
    assert!(r.stderr.contains("model `s.only` is not served by both environments (`prod` does not serve it)"), "{}", r.stderr);
    let r = p.run(&["diff", "prod", "dev", "--data", "--model", "s.e"]);
    r.expect_code(1);
    assert!(r.stderr.contains("model `s.e` is an embedded model"), "{}", r.stderr);
    for args in [&["--sample", "50"][..], &["--data", "--model", "s.t,s.only"], &["--data", "--model", "s.e"]] {
        let mut all = vec!["diff", "prod", "dev", "--json"];
        all.extend_from_slice(args);
        let v = p.run(&all).expect_code(1).json();
        assert_eq!(v["error"]["kind"], "usage", "{args:?}: {v:#}");
    }
}

#[test]
fn diff_data_with_a_key_on_several_rows_compares_the_rows_as_multisets() {
    // The grain's key repeats: pairing every row with every row of its key gives equal counts
    // for different data. The rows themselves are compared then.
    let p = Project::new();
    let models = |g: &str, h: &str| {
        format!(
            r#"define_model {{ name = "s.g", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "integer" }}, {{ "v", "varchar" }} }}, query = "SELECT * FROM (VALUES {g}) t(id, v)" }}
define_model {{ name = "s.h", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "integer" }}, {{ "v", "varchar" }} }}, query = "SELECT * FROM (VALUES {h}) t(id, v)" }}
"#
        )
    };
    p.write("models/m.lua", &models("(1,'a'),(1,'a'),(2,'b')", "(1,'a'),(1,'a'),(3,'c')"));
    p.apply("prod");
    p.write("models/m.lua", &models("(1,'a'),(2,'b'),(2,'b')", "(3,'c'),(1,'a'),(1,'a'),(4,'d')"));
    p.write("models/m.lua", &p.read("models/m.lua").replace(",(4,'d')", ""));
    p.apply("dev");
    let run = p.run(&["diff", "prod", "dev", "--data", "--json"]);
    let v = run.expect_code(0).json();
    let g = entry(&v, "s.g");
    assert_eq!(g["multiset"], serde_json::json!([1, 1]), "{g:#}");
    // The same rows in another order (and another version): the same data.
    let h = entry(&v, "s.h");
    assert_eq!(h["multiset"], serde_json::json!([0, 0]), "{h:#}");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("≠ s.g"), "{text}");
    assert!(text.contains("rows compared as multisets (keys on several rows): only in A 1, only in B 1"), "{text}");
    assert!(text.contains("✓ s.h"), "{text}");
    // A key on several rows with different values, the same rows on both sides: the same data
    // (the join's cross pairs mismatch, the rows do not).
    p.write("models/m.lua", &models("(1,'a'),(1,'b'),(2,'c')", "(1,'a')"));
    p.apply("prod");
    p.write("models/m.lua", &models("(1,'b'),(2,'c'),(1,'a')", "(1,'a')"));
    p.apply("dev");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("✓ s.g"), "{text}");
    // A model both serve but the project no longer has: said, not left out silently.
    p.write("models/m.lua", p.read("models/m.lua").lines().next().unwrap_or_default());
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("data not compared: `s.h` (served by both, no longer in the project"), "{text}");
    let v = p.run(&["diff", "prod", "dev", "--data", "--json"]).expect_code(0).json();
    assert_eq!(v["dataNotCompared"], serde_json::json!([{"model": "s.h", "reason": "not in the project"}]), "{v:#}");
}

#[test]
fn diff_data_compares_a_postgres_json_column() {
    // Postgres's `json` has no equality operator: compared as `jsonb` (keyed, repeated key, and
    // keyless), the same rows are the same and another value differs.
    let Some(target) = crate::pg::fresh_database() else { return };
    let p = Project::on_engine(EngineBackend::Postgres(target));
    let models = |rows: &str| {
        format!(
            r#"define_model {{ name = "s.k", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "integer" }}, {{ "doc", "json" }} }}, query = [[SELECT id, CAST(doc AS json) AS doc FROM (VALUES {rows}) t(id, doc)]] }}
define_model {{ name = "s.n", kind = kind.full(), schema = {{ {{ "id", "integer" }}, {{ "doc", "json" }} }}, query = [[SELECT id, CAST(doc AS json) AS doc FROM (VALUES {rows}) t(id, doc)]] }}
"#
        )
    };
    p.write("models/m.lua", &models(r#"(1, '{"a": 1}'), (1, '{"b": 2}'), (2, '{"c": 3}')"#));
    p.apply("prod");
    p.write("models/m.lua", &models(r#"(2, '{"c": 3}'), (1, '{"b": 2}'), (1, '{"a": 1}')"#));
    p.apply("dev");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("✓ s.k") && text.contains("✓ s.n"), "{text}");
    p.write("models/m.lua", &models(r#"(2, '{"c": 4}'), (1, '{"b": 2}'), (1, '{"a": 1}')"#));
    p.apply("dev");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("≠ s.k") && text.contains("≠ s.n"), "{text}");
}

/// Both engines' equality calls `1 month` equal to `30 days`, `1 day` to `24 hours` and `-0.0`
/// to `0.0`, values a child tells apart (`DATE '2026-01-31' + d`, `1 / x`): the data diff
/// compares such columns as text, keyed and keyless, and still calls the same values the same.
fn diff_data_tells_intervals_and_signed_zeros_their_equality_calls_equal_apart(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    let models = |d: &str, z: &str| {
        format!(
            r#"define_model {{ name = "s.k", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "integer" }}, {{ "d", "interval" }}, {{ "z", "double precision" }}, {{ "l", "double precision[]" }} }}, query = [[SELECT 1 AS id, CAST('{d}' AS interval) AS d, CAST('{z}' AS double precision) AS z, ARRAY[CAST('{z}' AS double precision)] AS l]] }}
define_model {{ name = "s.n", kind = kind.full(), schema = {{ {{ "d", "interval" }} }}, query = [[SELECT CAST('{d}' AS interval) AS d]] }}
"#
        )
    };
    p.write("models/m.lua", &models("1 month", "0.0"));
    p.apply("prod");
    p.write("models/m.lua", &models("30 days", "-0.0"));
    p.apply("dev");
    let v = p.run(&["diff", "prod", "dev", "--data", "--json"]).expect_code(0).json();
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("≠ s.k") && text.contains("≠ s.n"), "{text}\n{v:#}");
    let k = entry(&v, "s.k");
    assert_eq!((mismatches(k, "d"), mismatches(k, "z"), mismatches(k, "l")), (1, 1, 1), "{k:#}");
    // The same values under another version's query: the same data.
    p.write("models/m.lua", &models("1 month", "0.0").replace("SELECT 1 AS id", "SELECT 2 - 1 AS id").replace("AS d]]", "AS d WHERE true]]"));
    p.apply("dev");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("✓ s.k") && text.contains("✓ s.n"), "{text}");
}

/// The join marks each side's rows with a column of its own (TRUE on its rows, NULL where the
/// join found none): a model's own column of that name is never taken for it. `s.w` has columns
/// named `_efmesh_a` and `_efmesh_b` (the markers' first names): a value changed in one is a
/// mismatch, and NULL against NULL in both is no row missing from either side.
fn diff_data_never_takes_a_model_column_for_its_own_marker_columns(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    let model = |rows: &str| {
        format!(
            r#"define_model {{ name = "s.w", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "integer" }}, {{ "_efmesh_a", "boolean" }}, {{ "_efmesh_b", "boolean" }} }}, query = [[SELECT id, a AS _efmesh_a, b AS _efmesh_b FROM (VALUES {rows}) AS t(id, a, b)]] }}
"#
        )
    };
    p.write("models/m.lua", &model("(1, FALSE, FALSE), (2, NULL, NULL)"));
    p.apply("prod");
    p.write("models/m.lua", &model("(1, TRUE, FALSE), (2, NULL, NULL)"));
    p.apply("dev");
    let v = p.run(&["diff", "prod", "dev", "--data", "--json"]).expect_code(0).json();
    let w = entry(&v, "s.w");
    assert_eq!((count(w, "onlyInA"), count(w, "onlyInB"), count(w, "matched")), (0, 0, 2), "{w:#}");
    assert_eq!((mismatches(w, "_efmesh_a"), mismatches(w, "_efmesh_b")), (1, 0), "{w:#}");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("  ≠ s.w  A=2 B=2  key (id): only in A 0, only in B 0, matched 2\n      _efmesh_a: 1 of 2 (50.00%)\n"), "{text}");
    // The same rows again (in another order, another version): the same data.
    p.write("models/m.lua", &model("(2, NULL, NULL), (1, FALSE, FALSE)"));
    p.apply("dev");
    let v = p.run(&["diff", "prod", "dev", "--data", "--json"]).expect_code(0).json();
    let w = entry(&v, "s.w");
    assert_eq!((count(w, "onlyInA"), count(w, "onlyInB"), count(w, "matched")), (0, 0, 2), "{w:#}");
    assert_eq!(w["columns"], serde_json::json!([]), "{w:#}");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains("  ✓ s.w  A=2 B=2  key (id): only in A 0, only in B 0, matched 2\n"), "{text}");
}

/// A key retyped between exact numbers — an integer in `prod`, `decimal(10,2)` in `dev`; or a
/// `decimal(10,2)` against a `decimal(12,4)` — holds the same keys: they match by value (`1`
/// against `1.00`), on Postgres (whose full join compares text) as on DuckDB, a value column
/// retyped so is no mismatch, and sampling takes a key on both sides or on neither. A key on
/// one side only is counted and listed alike (the counts and the keys listed agree).
fn diff_data_matches_and_samples_a_key_retyped_between_exact_numbers_by_value(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    let models = |id: &str, v: &str, d: &str, ids: &str| {
        format!(
            r#"define_model {{ name = "s.k", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "{id}" }}, {{ "v", "{v}" }} }}, query = [[SELECT CAST(n AS {id}) AS id, CAST(n * 10 AS {v}) AS v FROM (VALUES {ids}) AS t(n)]] }}
define_model {{ name = "s.d", kind = kind.full(), grain = {{ "id" }}, schema = {{ {{ "id", "{d}" }} }}, query = [[SELECT CAST(n AS {d}) AS id FROM (VALUES (1.25), (2.5), (3)) AS t(n)]] }}
"#
        )
    };
    let ids = "(1), (2), (3), (4), (5), (6), (7), (8), (9), (10)";
    p.write("models/m.lua", &models("integer", "integer", "decimal(10,2)", ids));
    p.apply("prod");
    p.write("models/m.lua", &models("decimal(10,2)", "decimal(12,4)", "decimal(12,4)", ids));
    p.apply("dev");
    let v = p.run(&["diff", "prod", "dev", "--data", "--json"]).expect_code(0).json();
    let k = entry(&v, "s.k");
    assert_eq!((count(k, "onlyInA"), count(k, "onlyInB"), count(k, "matched")), (0, 0, 10), "{k:#}");
    assert_eq!(k["columns"], serde_json::json!([]), "`v` holds the same values: {k:#}");
    assert_eq!(k["typeChanged"].as_array().map(Vec::len), Some(2), "{k:#}");
    let d = entry(&v, "s.d");
    assert_eq!((count(d, "onlyInA"), count(d, "onlyInB"), count(d, "matched")), (0, 0, 3), "{d:#}");
    let text = p.run(&["diff", "prod", "dev", "--data"]).expect_code(0).stdout.clone();
    assert!(text.contains(" s.k  A=10 B=10  key (id): only in A 0, only in B 0, matched 10\n"), "{text}");
    // Sampled: the same keys on both sides, none missing from either.
    for percent in ["10", "25", "50", "75", "90"] {
        let s = p.run(&["diff", "prod", "dev", "--data", "--sample", percent, "--json"]).expect_code(0).json();
        for model in ["s.k", "s.d"] {
            let e = entry(&s, model);
            assert_eq!((count(e, "onlyInA"), count(e, "onlyInB")), (0, 0), "sample {percent}%: {e:#}");
        }
    }
    // A key only in `prod` (3) and one only in `dev` (11): counted and listed.
    p.write("models/m.lua", &models("decimal(10,2)", "decimal(12,4)", "decimal(12,4)", &ids.replace("(3), ", "").replace("(10)", "(10), (11)")));
    p.apply("dev");
    let v = p.run(&["diff", "prod", "dev", "--data", "--model", "s.k", "--json"]).expect_code(0).json();
    let k = entry(&v, "s.k");
    assert_eq!((count(k, "onlyInA"), count(k, "onlyInB"), count(k, "matched")), (1, 1, 9), "{k:#}");
    assert_eq!((k["onlyInAKeys"].as_array().map(Vec::len), k["onlyInBKeys"].as_array().map(Vec::len)), (Some(1), Some(1)), "{k:#}");
    // Each side's key as it serves it.
    assert_eq!((k["onlyInAKeys"].clone(), k["onlyInBKeys"].clone()), (serde_json::json!([["3"]]), serde_json::json!([["11.00"]])), "{k:#}");
}
