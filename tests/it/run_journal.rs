//! The run journal of `efmesh run`: a tick that fails after committing intervals records (and
//! reports, with `--json`) what it committed; a run of an environment that was never applied
//! names a similarly named one and journals nothing.

use crate::common::{Project, set, string_set};
use efmesh::state::StateStore;
use std::collections::BTreeMap;

/// `m.daily`: one interval per batch, failing from 4 January on while `data/switch.csv` says
/// `fail`.
pub(crate) const FAILS_FROM_THE_4TH: &str = r#"local switch = define_model {
  name = "raw.switch",
  kind = kind.external { path = "data/switch.csv" },
  schema = { { "mode", "varchar" } },
}
define_model {
  name = "m.daily",
  kind = kind.incremental_by_time_range { time_column = "d", start = "2026-01-01", grain = "day", batch_size = 1 },
  schema = { { "d", "timestamp" }, { "n", "bigint" } },
  query = [[
    SELECT CAST(@start AS TIMESTAMP) AS d,
           CAST(max(CASE WHEN s.mode = 'fail' AND @start >= TIMESTAMP '2026-01-04' THEN error('disk on fire') ELSE 1 END) AS BIGINT) AS n
    FROM ]] .. ref(switch) .. [[ AS s
  ]],
}
"#;

/// The done interval count of `model`'s version served by `env`.
fn done(p: &Project, env: &str, model: &str) -> usize {
    let s = p.state();
    let fp = s.env_pointers(env).expect("pointers").get(model).cloned().unwrap_or_else(|| panic!("`{model}` not served by `{env}`"));
    s.done_intervals(model, &fp).expect("ledger").len()
}

#[test]
fn a_run_failing_after_committing_batches_journals_and_reports_what_it_committed() {
    let mut p = Project::new();
    p.write("data/switch.csv", "mode\nok\n");
    p.write("models/m.lua", FAILS_FROM_THE_4TH);
    p.now = "2026-01-02T01:00:00Z".into();
    p.apply("prod");
    assert_eq!(done(&p, "prod", "m.daily"), 1);

    // 2 and 3 January commit (each batch its own transaction), 4 January fails.
    p.write("data/switch.csv", "mode\nfail\n");
    p.now = "2026-01-06T01:00:00Z".into();
    let r = p.run(&["run", "prod", "--json"]);
    r.expect_code(1);
    assert_eq!(done(&p, "prod", "m.daily"), 3, "two intervals were committed before the failure");
    assert!(r.stderr.contains("error: ") && r.stderr.contains("disk on fire"), "{}", r.stderr);
    let v = r.json();
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("disk on fire")), "{v:#}");
    assert_eq!((v["env"].as_str(), v["outcome"].as_str(), v["intervals"].as_u64()), (Some("prod"), Some("error"), Some(2)), "{v:#}");
    assert_eq!(string_set(&v["processed"]), set(&["m.daily"]), "{v:#}");
    let ticks = p.state().ticks("prod", 5).expect("ticks");
    assert_eq!(ticks[0].outcome, "error");
    assert_eq!(ticks[0].processed, BTreeMap::from([("m.daily".to_string(), 2)]), "the journal says what was committed");
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    assert_eq!(status["ticks"][0]["processed"]["m.daily"], 2, "{status:#}");

    // The next tick fails at once: it committed nothing (the intervals of the tick before are
    // not counted again), in the text output's journal too.
    let r = p.run(&["run", "prod"]);
    r.expect_code(1);
    assert!(r.stderr.contains("disk on fire"), "{}", r.stderr);
    let ticks = p.state().ticks("prod", 5).expect("ticks");
    assert_eq!((ticks.len(), ticks[0].outcome.as_str()), (2, "error"));
    assert!(ticks[0].processed.is_empty(), "{:?}", ticks[0].processed);
}

#[test]
fn a_run_of_a_never_applied_environment_names_the_one_meant_and_journals_nothing() {
    let p = Project::new();
    p.write("models/m.lua", "define_model { name = \"s.one\", kind = kind.full(), schema = { { \"a\", \"integer\" } }, query = \"SELECT 1 AS a\" }\n");
    p.apply("prod");

    // `prd`, a typo of `prod`: refused (exit 2, as any environment never applied), said so.
    let r = p.run(&["run", "prd"]);
    r.expect_code(2);
    assert!(r.stderr.contains("environment `prd` does not exist (nothing was applied to it)"), "{}", r.stderr);
    assert!(r.stderr.contains("did you mean `efmesh run prod`?"), "{}", r.stderr);
    assert!(!r.stderr.contains("apply needed") && !r.stderr.contains("s.one: added"), "not a list of changes to apply: {}", r.stderr);
    let v = p.run(&["run", "prd", "--json"]).expect_code(2).json();
    assert_eq!((v["outcome"].as_str(), v["exists"].as_bool(), v["didYouMean"].as_str()), (Some("blocked"), Some(false), Some("prod")), "{v:#}");

    // A new name like no other: the hint to create it, no suggestion.
    let r = p.run(&["run", "staging"]);
    r.expect_code(2);
    assert!(r.stderr.contains("environment `staging` does not exist") && r.stderr.contains("create it with `efmesh apply staging`"), "{}", r.stderr);
    assert!(!r.stderr.contains("did you mean"), "{}", r.stderr);

    // Nothing journaled for environments that do not exist; `prod`'s ticks as before.
    let s = p.state();
    for env in ["prd", "staging"] {
        assert!(s.ticks(env, 5).expect("ticks").is_empty(), "a tick journaled for `{env}`");
    }
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(p.state().ticks("prod", 5).expect("ticks").len(), 1);
}
