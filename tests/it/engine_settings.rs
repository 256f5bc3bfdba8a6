//! `[engine] threads` and `memory_limit`: passed to DuckDB on every database efmesh opens
//! (read back with `current_setting` by a model built by `apply` and by a unit test run by
//! `efmesh test`), and a bad value is a config error naming the key before anything is opened.

use crate::common::Project;

const SETTINGS_MODEL: &str = r#"
return define_model {
  name = "ops.settings", kind = kind.full(),
  schema = { { "memory_limit", "varchar" }, { "threads", "varchar" } },
  query = "SELECT current_setting('memory_limit') AS memory_limit, CAST(current_setting('threads') AS VARCHAR) AS threads",
}
"#;

const SETTINGS_TEST: &str = r#"
define_test {
  name = "engine_runs_with_the_configured_settings", model = "ops.settings",
  inputs = {},
  expect = { { memory_limit = "300.0 MiB", threads = "1" } },
}
"#;

fn config(engine: &str) -> String {
    format!("[project]\nmodels = [\"models/**/*.lua\"]\n\n[engine]\npath = \"efmesh.duckdb\"\n{engine}\n")
}

#[test]
fn engine_settings_reach_the_apply_and_the_unit_test_engines() {
    let p = Project::new();
    p.write("efmesh.toml", &config("threads = 1\nmemory_limit = \"300MiB\""));
    p.write("models/settings.lua", SETTINGS_MODEL);
    p.write("tests/settings.lua", SETTINGS_TEST);
    p.apply("dev");
    let s = |v: &str| Some(v.to_string());
    assert_eq!(p.rows("dev__ops.settings"), vec![vec![s("300.0 MiB"), s("1")]], "the table apply built ran under the configured settings");
    let run = p.run(&["test", "--json"]);
    run.expect_code(0);
    assert_eq!(run.json()["tests"][0]["status"], "passed", "{}", run.stdout);
    // Without the settings the same unit test fails: it observes them, it does not assume them.
    p.write("efmesh.toml", &config(""));
    p.run(&["test", "--json"]).expect_code(1);
}

#[test]
fn bad_engine_settings_are_config_errors_naming_the_key() {
    for (setting, key, shown) in [
        ("memory_limit = \"80%\"", "engine.memory_limit", "80%"),
        ("memory_limit = \"4\"", "engine.memory_limit", "no unit"),
        ("memory_limit = \"lots\"", "engine.memory_limit", "lots"),
        ("threads = 0", "engine.threads", "at least 1"),
    ] {
        let p = Project::new();
        p.write("efmesh.toml", &config(setting));
        p.write("models/settings.lua", SETTINGS_MODEL);
        let run = p.run(&["apply", "dev", "--yes"]);
        run.expect_code(1);
        assert!(run.stderr.contains(key) && run.stderr.contains(shown), "{setting}: {}", run.stderr);
        assert!(!p.engine_path().exists() && !p.state_path().exists(), "{setting}: a bad config opened the engine or the state");
    }
}
