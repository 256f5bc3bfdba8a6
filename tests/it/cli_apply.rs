//! `plan` / `apply` / `render` end to end on the sample project: promotion is a view swap,
//! no-op plans are empty, edits rebuild exactly the edited model and its descendants,
//! reformatting rebuilds nothing, non-TTY applies wait for a human, contracts build nothing.

use crate::common::*;
use crate::on_every_engine;
use serde_json::Value;

/// Asserts that `plan` (a plan or apply object) has no work at all.
#[track_caller]
fn assert_no_changes(v: &Value) {
    let plan = if v.get("plan").is_some() { &v["plan"] } else { v };
    assert_eq!(plan["hasChanges"], Value::Bool(false), "{plan:#}");
    for a in actions(v) {
        assert_eq!(a["change"], "unchanged", "{a:#}");
        assert_eq!(a["build"], Value::Bool(false), "{a:#}");
        assert_eq!(a["backfill"], Value::Array(vec![]), "{a:#}");
        assert_eq!(a["intervals"], Value::from(0), "{a:#}");
    }
}

// On each engine, and on a Postgres state store.
crate::on_every_engine_and_state_backend!(
    apply_prod_after_dev_builds_nothing_and_serves_devs_rows,
    plan_right_after_apply_has_no_changes,
    edit_rebuilds_only_the_model_and_its_descendants,
);

on_every_engine!(
    reformatting_a_model_rebuilds_nothing,
    non_tty_apply_without_yes_exits_2_prints_json_and_changes_nothing,
    non_tty_apply_without_yes_after_an_edit_changes_nothing,
    schema_contract_mismatch_lists_every_problem_and_builds_nothing,
    render_canonical_and_for_an_environment,
    a_rename_only_in_letter_case_keeps_its_view,
);

/// The models the sample project builds: on Postgres its CSV is a seed (`portable_sample`),
/// built and served like the others.
fn sample_built(p: &Project, models: &[&str]) -> std::collections::BTreeSet<String> {
    let mut s = set(models);
    if p.on_postgres() {
        s.insert("raw.events".to_string());
    }
    s
}

/// True while the project's engine holds nothing: no DuckDB file, or on Postgres no schema
/// but the server's own.
fn engine_untouched(p: &Project) -> bool {
    if !p.on_postgres() {
        return !p.engine_path().exists();
    }
    p.query("SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('public', 'information_schema') AND schema_name NOT LIKE 'pg\\_%'")
        .is_empty()
}

/// Every model that has a view must have rows there, or comparisons would prove nothing.
#[track_caller]
fn assert_views_not_empty(p: &Project, env: &str, models: &[String]) {
    for m in models {
        assert!(!p.rows(&env_view(env, m)).is_empty(), "view of `{m}` in `{env}` is empty");
    }
}

fn apply_prod_after_dev_builds_nothing_and_serves_devs_rows(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    let dev = p.apply("dev");
    assert_eq!(string_set(&dev["built"]), sample_built(&p, &["s.a", "s.b", "s.c", "t.d", "t.daily"]));
    assert_eq!(string_set(&dev["registered"]), set(&["t.e"]), "an embedded model is registered, not built");
    let tables_after_dev = p.physical_tables();
    assert_eq!(tables_after_dev.len(), sample_built(&p, &[]).len() + 5, "{tables_after_dev:?}"); // a, b (view), c, d, daily (and the seed)

    let prod = p.apply("prod");
    assert_eq!(prod["built"], Value::Array(vec![]), "{prod:#}");
    assert_eq!(prod["intervals"], Value::from(0));
    assert_eq!(prod["promoted"], Value::Bool(true));
    for a in actions(&prod) {
        // Prod had nothing: every model is added, yet nothing needs a build or a backfill.
        assert_eq!(a["change"], "added", "{a:#}");
        assert_eq!(a["build"], Value::Bool(false), "{a:#}");
        assert_eq!(a["backfill"], Value::Array(vec![]), "{a:#}");
        let dev_action = action(&dev, a["name"].as_str().unwrap());
        assert_eq!(a["fingerprint"], dev_action["fingerprint"]);
        assert_eq!(a.get("physical"), dev_action.get("physical"));
    }
    assert_eq!(p.physical_tables(), tables_after_dev, "promotion created or dropped physical relations");

    let served = served_models(&prod);
    assert_eq!(served.iter().cloned().collect::<std::collections::BTreeSet<_>>(), sample_built(&p, &["s.a", "s.b", "s.c", "t.d", "t.daily"]));
    assert_views_not_empty(&p, "dev", &served);
    for m in &served {
        assert_eq!(p.rows(&env_view("prod", m)), p.rows(&env_view("dev", m)), "prod and dev differ for `{m}`");
    }
    // Both environments read the same physical relation.
    for m in &served {
        let physical = action(&prod, m)["physical"].as_str().unwrap().to_string();
        assert_eq!(p.rows(&env_view("prod", m)), p.rows(&physical), "`{m}`");
    }
}

fn plan_right_after_apply_has_no_changes(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    let first = p.apply("dev");
    assert!(action(&first, "t.daily")["intervals"].as_u64().unwrap() > 0);

    assert_no_changes(&p.plan("dev"));
    let again = p.apply("dev");
    assert_no_changes(&again);
    assert_eq!(again["built"], Value::Array(vec![]));

    p.apply("prod");
    assert_no_changes(&p.plan("prod"));
    assert_no_changes(&p.plan("dev"));

    // A day later one new interval is due (recomputed with its lookback of 1), so the empty
    // plans above were not blindness.
    let mut later = p;
    later.now = "2026-02-11T00:00:00Z".into();
    let plan = later.plan("dev");
    assert_eq!(plan["hasChanges"], Value::Bool(true));
    let daily = action(&plan, "t.daily");
    assert_eq!(daily["intervals"], Value::from(2), "{daily:#}");
    assert_eq!(daily["backfill"], serde_json::json!([{"start": "2026-02-09T00:00:00.000Z", "end": "2026-02-11T00:00:00.000Z"}]));
    for a in actions(&plan).iter().filter(|a| a["name"] != "t.daily") {
        assert_eq!(a["change"], "unchanged", "{a:#}");
        assert_eq!(a["build"], Value::Bool(false), "{a:#}");
    }
}

fn edit_rebuilds_only_the_model_and_its_descendants(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let c_before = p.rows(&env_view("dev", "s.c"));

    // Edit the middle of the chain s.a → s.b → s.c.
    p.write("models/b.lua", &model_b("SELECT id, label, id * 3 AS twice FROM {a} WHERE id > 1"));
    let plan = p.plan("dev");
    let rebuilt = set(&["s.b", "s.c"]);
    for a in actions(&plan) {
        let name = a["name"].as_str().unwrap();
        if rebuilt.contains(name) {
            // The edited model is breaking (a changed literal and filter); its child indirect.
            assert_eq!(a["change"], if name == "s.b" { "breaking" } else { "indirect" }, "{a:#}");
            assert_eq!(a["build"], Value::Bool(true), "{a:#}");
            assert!(a.get("previous").is_some(), "{a:#}");
        } else {
            assert_eq!(a["change"], "unchanged", "{a:#}");
            assert_eq!(a["build"], Value::Bool(false), "{a:#}");
            assert_eq!(a["backfill"], Value::Array(vec![]), "{a:#}");
        }
    }
    let applied = p.apply("dev");
    assert_eq!(string_set(&applied["built"]), rebuilt);
    assert_eq!(applied["built"], serde_json::json!(["s.b", "s.c"]), "parents first");
    assert_ne!(p.rows(&env_view("dev", "s.c")), c_before, "the edit must show downstream");
    assert_eq!(p.rows(&env_view("dev", "s.c")), vec![vec![Some("6".to_string()), Some("81".to_string())]]);

    // Edit an embedded model: its consumer rebuilds, it is registered, nothing else.
    p.write("models/d.lua", &portable_sample(&p, &model_d("'y' || id")));
    let plan = p.plan("dev");
    for a in actions(&plan) {
        let changed = a["name"] == "t.d";
        let expected = match a["name"].as_str().unwrap() {
            "t.e" => "breaking",
            "t.d" => "indirect",
            _ => "unchanged",
        };
        assert_eq!(a["change"], expected, "{a:#}");
        assert_eq!(a["build"], Value::Bool(changed), "{a:#}");
    }
    let applied = p.apply("dev");
    assert_eq!(string_set(&applied["built"]), set(&["t.d"]));
    assert_eq!(string_set(&applied["registered"]), set(&["t.e"]));
    assert_eq!(p.rows(&env_view("dev", "t.d"))[0], vec![Some("0".to_string()), Some("y0".to_string())]);
}

fn reformatting_a_model_rebuilds_nothing(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let first = p.apply("dev");
    let tables = p.physical_tables();

    // Same query as B_QUERY: whitespace, comments, keyword case, quoting and `AS` changed
    // (identifier case is meaningful in DuckDB output names, so it stays).
    p.write(
        "models/b.lua",
        &model_b("-- the doubled ids\n  select\n\t\"id\",  \"label\" , -- keep the label\n  id*2   twice\n/* upstream */ FROM   {a}\n  where \"id\">1\n"),
    );
    let plan = p.plan("dev");
    assert_no_changes(&plan);
    assert_eq!(action(&plan, "s.b")["fingerprint"], action(&first, "s.b")["fingerprint"]);
    assert_eq!(action(&plan, "s.c")["fingerprint"], action(&first, "s.c")["fingerprint"]);

    let applied = p.apply("dev");
    assert_eq!(applied["built"], Value::Array(vec![]), "{applied:#}");
    assert_eq!(p.physical_tables(), tables);
}

fn non_tty_apply_without_yes_exits_2_prints_json_and_changes_nothing(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    // `plan` never touches the engine either.
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(true));
    assert!(engine_untouched(&p), "plan created the DuckDB file (or a schema on Postgres)");

    let run = p.run(&["apply", "dev", "--json"]);
    run.expect_code(2);
    let v = run.json();
    assert_eq!(v["applied"], Value::Bool(false), "{v:#}");
    assert_eq!(v["promoted"], Value::Bool(false), "{v:#}");
    assert_eq!(v["built"], Value::Array(vec![]), "{v:#}");
    assert_eq!(v["plan"]["hasChanges"], Value::Bool(true), "{v:#}");
    assert_eq!(action(&v, "s.a")["change"], "added");
    assert!(run.stderr.contains("--yes"), "stderr should say how to proceed: {}", run.stderr);

    assert!(engine_untouched(&p), "apply without confirmation created the DuckDB file (or a schema on Postgres)");
    let state = p.state_summary();
    assert!(state.envs.is_empty(), "{state:?}");
    assert!(state.pointers.is_empty() && state.journal.is_empty() && state.snapshots.is_empty() && state.intervals.is_empty(), "{state:?}");

    // Without --json: still exit 2, still nothing.
    p.run(&["apply", "dev"]).expect_code(2);
    assert!(engine_untouched(&p));
    assert_eq!(p.state_summary(), state);
}

fn non_tty_apply_without_yes_after_an_edit_changes_nothing(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    let (tables, relations, state) = (p.physical_tables(), p.relations(), p.state_summary());
    let c_rows = p.rows(&env_view("dev", "s.c"));

    // No changes: nothing to confirm, exit 0.
    let v = p.run(&["apply", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["plan"]["hasChanges"], Value::Bool(false));

    p.write("models/a.lua", &portable_sample(&p, &model_a("AND range < 5")));
    let run = p.run(&["apply", "dev", "--json"]);
    run.expect_code(2);
    let v = run.json();
    assert_eq!(v["applied"], Value::Bool(false));
    assert_eq!(action(&v, "s.a")["change"], "breaking");
    assert_eq!(action(&v, "s.a")["build"], Value::Bool(true));

    assert_eq!(p.physical_tables(), tables);
    assert_eq!(p.relations(), relations);
    assert_eq!(p.state_summary(), state);
    assert_eq!(p.rows(&env_view("dev", "s.c")), c_rows);
}

fn schema_contract_mismatch_lists_every_problem_and_builds_nothing(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    let (tables, relations, state) = (p.physical_tables(), p.relations(), p.state_summary());

    // A new, valid model that would be built if the contract did not stop everything.
    p.write("models/fine.lua", "define_model { name = \"z.fine\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    // One model with a missing column, a wrong type family and an extra column, and another
    // model with a wrong type family.
    p.write(
        "models/bad.lua",
        r#"define_model {
  name = "z.bad",
  kind = kind.full(),
  schema = { { "id", "integer" }, { "name", "varchar" }, { "amount", "bigint" } },
  query = "SELECT 1 AS id, 'n' AS amount, 42 AS surplus",
}

define_model {
  name = "z.worse",
  kind = kind.full(),
  schema = { { "flag", "boolean" } },
  query = "SELECT DATE '2026-01-01' AS flag",
}

define_model {
  name = "z.nested",
  kind = kind.full(),
  schema = { { "e", "varchar" } },
  query = "SELECT ARRAY[1, 2] AS e",
}
"#,
    );
    // A misspelt type stops the contract first, naming it (DuckDB suggests the type meant).
    p.write("models/typo.lua", "define_model { name = \"z.typo\", kind = kind.full(), schema = { { \"x\", \"bignt\" } }, query = \"SELECT 1 AS x\" }\n");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let typo = run
        .stderr
        .lines()
        .find(|l| l.contains("models/typo.lua:1: model `z.typo`: column `x` has type `bignt`, which is not a"))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    if !p.on_postgres() {
        assert!(typo.ends_with("(did you mean `bigint`?)"), "{typo}");
    }
    assert_eq!(p.physical_tables(), tables, "nothing was built");
    assert_eq!(p.state_summary(), state);
    fs_err::remove_file(p.root().join("models/typo.lua")).expect("rm");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    for needle in [
        "nothing was built",
        "models/bad.lua:1",
        "`z.bad`",
        "`name`",    // declared, missing
        "`amount`",  // declared bigint, returned varchar
        "`surplus`", // returned, not declared
        "models/bad.lua:8",
        "`z.worse`",
        "`flag`",
        "models/bad.lua:15", // a list returned for a declared `varchar`
        "`z.nested`",
    ] {
        assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    }
    let problem_lines = err.lines().filter(|l| l.contains("models/bad.lua:")).count();
    assert_eq!(problem_lines, 5, "one line per problem:\n{err}");

    assert_eq!(p.physical_tables(), tables, "a model was built despite the contract failure");
    assert_eq!(p.relations(), relations);
    assert_eq!(p.state_summary(), state);
}

/// A `-- schema:` header missing a comma (`id integer name varchar`) declares one column `id` of
/// type `integer name varchar`: `check` and the apply's contract say a comma seems missing and
/// name the columns meant, at the model's file:line (they said only that the query returns an
/// undeclared `name` and that the type is not one, with hints about correcting the type).
#[test]
fn a_schema_header_missing_a_comma_is_hinted_at_by_check_and_the_contract() {
    let p = Project::new();
    p.write("efmesh.toml", &CONFIG.replace("models/**/*.lua", "models/**/*.sql"));
    p.write("models/m.sql", "-- name: s.m\n-- kind: full\n-- schema: id integer name varchar\nSELECT 1 AS id, 'a' AS name\n");
    let hint =
        "is a comma missing? `id integer name varchar` reads as 2 columns run together; the schema separates columns with commas: `id integer, name varchar`";

    let check = p.run(&["check"]);
    let out = format!("{}{}", check.expect_code(1).stdout, check.stderr);
    for needle in [
        format!("models/m.sql:1: model `s.m`: the query returns column `name`, which the schema does not declare\n  hint: {hint}"),
        "models/m.sql:1: model `s.m`: column `id` has type `integer name varchar`, which is not a DuckDB type".to_string(),
    ] {
        assert!(out.contains(&needle), "lacks {needle:?}:\n{out}");
    }
    assert_eq!(out.matches(hint).count(), 2, "the error and the `unknown_type` warning:\n{out}");
    let v = p.run(&["check", "--json"]).expect_code(1).json();
    assert_eq!(
        (v["errors"][0]["hint"].as_str(), v["warnings"][0]["rule"].as_str(), v["warnings"][0]["hint"].as_str()),
        (Some(hint), Some("unknown_type"), Some(hint)),
        "{v:#}"
    );

    let apply = p.run(&["apply", "dev", "--yes"]);
    let err = &apply.expect_code(1).stderr;
    assert!(err.contains("models/m.sql:1: model `s.m`: column `id` has type `integer name varchar`, which is not a DuckDB type"), "{err}");
    assert!(err.contains(&format!("\n  hint: {hint}")), "{err}");
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(1).json();
    assert_eq!((v["error"]["kind"].as_str(), v["error"]["hint"].as_str()), (Some("contract"), Some(hint)), "{v:#}");
    assert!(!p.engine_path().exists() || p.physical_tables().is_empty(), "nothing was built");

    // With the comma, the columns meant: it applies.
    p.write("models/m.sql", "-- name: s.m\n-- kind: full\n-- schema: id integer, name varchar\nSELECT 1 AS id, 'a' AS name\n");
    p.apply("dev");
}

fn render_canonical_and_for_an_environment(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");

    let canonical = p.run(&["render", "s.c"]).expect_code(0).stdout.clone();
    assert_eq!(canonical.trim(), "SELECT count(*) AS n, CAST(sum(twice) AS BIGINT) AS total FROM s.b");

    let dev = p.run(&["render", "s.c", "--env", "dev", "--json"]).expect_code(0).json();
    assert_eq!(dev["model"], "s.c");
    assert_eq!(dev["env"], "dev");
    let dev_sql = dev["sql"].as_str().unwrap();
    assert_eq!(dev_sql, "SELECT count(*) AS n, CAST(sum(twice) AS BIGINT) AS total FROM \"dev__s\".\"b\"");
    // The rendered SQL runs against the environment and returns what the model's view serves.
    assert_eq!(p.rows(&format!("({dev_sql}) AS q")), p.rows(&env_view("dev", "s.c")));

    assert_eq!(dev["envExists"], true);
    // `prod` was never applied: the SQL over the views it would have, and a warning.
    let run = p.run(&["render", "s.c", "--env", "prod", "--json"]);
    let prod = run.expect_code(0).json();
    assert_eq!(prod["sql"], "SELECT count(*) AS n, CAST(sum(twice) AS BIGINT) AS total FROM \"s\".\"b\"");
    assert_eq!(prod["envExists"], false);
    assert!(run.stderr.contains("environment `prod` does not exist yet"), "{}", run.stderr);

    let canonical_json = p.run(&["render", "s.c", "--json"]).expect_code(0).json();
    assert_eq!(canonical_json["sql"].as_str().unwrap(), canonical.trim());
    assert_eq!(canonical_json["env"], Value::Null);

    // Time-range bodies keep their bounds as placeholders; embedded parents are inlined.
    let daily = p.run(&["render", "t.daily"]).expect_code(0).stdout.clone();
    assert!(daily.contains("FROM raw.events") && daily.contains("event_at >= $start AND event_at < $end"), "{daily}");
    let d_dev = p.run(&["render", "t.d", "--env", "dev"]).expect_code(0).stdout.clone();
    assert!(d_dev.contains("FROM generate_series(0, 2) AS g(range)") && !d_dev.contains("t.e"), "embedded parent not inlined: {d_dev}");

    // Unknown model: exit 1 with a suggestion; bad env name: exit 1.
    let run = p.run(&["render", "s.cc"]);
    run.expect_code(1);
    assert!(run.stderr.contains("s.cc") && run.stderr.contains("did you mean `s.c`"), "{}", run.stderr);
    let run = p.run(&["render", "s.c", "--env", "no-such env"]);
    run.expect_code(1);
    assert!(run.stderr.contains("no-such env"), "{}", run.stderr);
}

/// `render --env E` of a model reading parents `E` does not serve (added to the project since
/// `E` was applied) warns, naming them, that the views the SQL reads do not exist yet, as it
/// warns for an environment never applied: here `s.n` read directly and `s.n2` through the
/// embedded `s.e` (inlined: its own parent is read), never the served `s.a` nor `s.e` itself.
/// Once `E` serves them, no warning.
#[test]
fn render_for_an_environment_warns_of_a_parent_it_does_not_serve() {
    let p = Project::new();
    let full = |name: &str, query: &str| {
        format!("define_model {{ name = \"{name}\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = {query} }}\n")
    };
    p.write("models/a.lua", &full("s.a", "\"SELECT 1 AS x\""));
    p.apply("dev");
    let mut added = full("s.n", "\"SELECT 2 AS x\"");
    added.push_str(&full("s.n2", "\"SELECT 3 AS x\""));
    added.push_str(
        "define_model { name = \"s.e\", kind = kind.embedded(), schema = { { \"x\", \"integer\" } }, query = \"SELECT x FROM \" .. ref(\"s.n2\") }\n",
    );
    added.push_str(&full("s.m", "\"SELECT a.x FROM \" .. ref(\"s.a\") .. \" AS a, \" .. ref(\"s.n\") .. \" AS n, \" .. ref(\"s.e\") .. \" AS e\""));
    added.push_str(&full("s.one", "\"SELECT x FROM \" .. ref(\"s.n\")"));
    p.write("models/n.lua", &added);

    let r = p.run(&["render", "s.m", "--env", "dev", "--json"]);
    let v = r.expect_code(0).json();
    assert_eq!(v["envExists"], Value::Bool(true), "{v:#}");
    let both = "environment `dev` does not serve `s.n`, `s.n2`: this SQL reads their views, which do not exist until `efmesh apply dev` creates them";
    assert!(r.stderr.contains(both), "{}", r.stderr);
    assert!(!r.stderr.contains("`s.a`") && !r.stderr.contains("`s.e`"), "{}", r.stderr);
    let r = p.run(&["render", "s.one", "--env", "dev"]);
    let one = "environment `dev` does not serve `s.n`: this SQL reads its view, which does not exist until `efmesh apply dev` creates it";
    assert!(r.expect_code(0).stderr.contains(one), "{}", r.stderr);
    // A model whose parents `dev` serves, and the same models once applied: no warning.
    p.write("models/b.lua", &full("s.b", "\"SELECT x FROM \" .. ref(\"s.a\")"));
    assert!(!p.run(&["render", "s.b", "--env", "dev"]).expect_code(0).stderr.contains("does not serve"));
    p.apply("dev");
    for model in ["s.m", "s.one"] {
        let r = p.run(&["render", model, "--env", "dev"]);
        assert!(!r.expect_code(0).stderr.contains("does not serve"), "{model}: {}", r.stderr);
    }
}

/// Renaming a model only in letter case (`s.c` → `s.C`), then its schema for every model
/// (`s.*` → `S.*`): each apply exits 0 and the renamed models' views answer queries (on DuckDB,
/// which resolves names ignoring case, through the old spelling too; on Postgres the old views,
/// other relations there, are gone); the next plan has no changes and `status --check` is
/// healthy. The removed model's view was dropped after the added one's was created, which on
/// DuckDB is the same view: the environment was left without it.
fn a_rename_only_in_letter_case_keeps_its_view(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    let rows = |value: &str| vec![vec![Some(value.to_string())]];
    p.write("models/m.lua", &format!("{}{}", one_row_model("s.c", "c"), one_row_model("s.d", "d")));
    for env in ["dev", "prod"] {
        p.apply(env);
    }
    /// The models after a rename (name, value), and the names it removed.
    type Rename<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let renames: [Rename; 2] = [
        // One model renamed in case.
        (&[("s.C", "c"), ("s.d", "d")][..], &["s.c"][..]),
        // The schema renamed in case for every model.
        (&[("S.C", "c"), ("S.d", "d")][..], &["s.C", "s.d"][..]),
    ];
    for (models, gone) in renames {
        p.write("models/m.lua", &models.iter().map(|(name, value)| one_row_model(name, value)).collect::<String>());
        for env in ["dev", "prod"] {
            let applied = p.apply(env);
            for &old in gone {
                assert_eq!(action(&applied, old)["change"], "removed", "{applied:#}");
            }
            for &(name, value) in models {
                assert_eq!(p.rows(&env_view(env, name)), rows(value), "view of `{name}` in `{env}`");
                let lower = name.to_lowercase();
                if !p.on_postgres() {
                    assert_eq!(p.rows(&env_view(env, &lower)), rows(value), "view of `{name}` in `{env}` spelled `{lower}`");
                }
            }
            if p.on_postgres() {
                let relations = p.relations();
                for &old in gone {
                    let (schema, table) = old.split_once('.').expect("schema.table");
                    let schema = if env == "prod" { schema.to_string() } else { format!("{env}__{schema}") };
                    assert!(!relations.contains(&format!("{schema}.{table}")), "the view of removed `{old}` is left in `{env}`: {relations:?}");
                }
            }
            assert_no_changes(&p.plan(env));
            p.run(&["status", env, "--check"]).expect_code(0);
        }
    }
}

/// stderr that cannot be written (a full disk) turns no error or warning into a panic: the exit
/// code stays 1, and `--json`'s error object still reaches stdout.
#[test]
fn an_unwritable_stderr_still_exits_1_with_the_json_error() {
    let p = sample_project();
    let out = p.command(&["plan", "Bad-Env", "--json"]).stderr(fs_err::File::create("/dev/full").unwrap().into_parts().0).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["apiVersion"], 1);
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("Bad-Env")), "{v:#}");
    // A warning on the way (the DuckDB file lost after an apply) does not panic either.
    p.apply("dev");
    p.remove("efmesh.duckdb");
    let out = p.command(&["plan", "dev"]).stderr(fs_err::File::create("/dev/full").unwrap().into_parts().0).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_now_that_is_not_an_instant_fails_only_the_commands_that_read_the_clock() {
    let mut p = sample_project();
    p.now = String::new();
    for args in [&["check"][..], &["test"][..], &["lineage", "s.c"][..], &["graph", "--json"][..]] {
        p.run(args).expect_code(0);
    }
    for args in [&["plan", "dev"][..], &["status", "dev"][..], &["run", "dev"][..]] {
        let run = p.run(args);
        assert!(run.expect_code(1).stderr.contains("--now: `` is not a date or timestamp"), "{}", run.stderr);
    }
}

/// With nothing to apply, `apply --json` says nothing was applied (`"applied": false`, exit 0),
/// as its text says `nothing to apply`; `applied` is true only when the plan's changes were.
#[test]
fn an_apply_with_nothing_to_apply_reports_applied_false() {
    let p = sample_project();
    let first = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!((first["applied"].clone(), first["promoted"].clone()), (Value::Bool(true), Value::Bool(true)), "{first:#}");
    let journal = p.state_summary().journal;
    for args in [&["apply", "dev", "--yes", "--json"][..], &["apply", "dev", "--json"][..]] {
        let v = p.run(args).expect_code(0).json();
        assert_eq!(v["plan"]["hasChanges"], Value::Bool(false), "{v:#}");
        assert_eq!(v["applied"], Value::Bool(false), "nothing was applied: {v:#}");
        assert_eq!(v["promoted"], Value::Bool(false), "{v:#}");
        assert_eq!(v["built"], Value::Array(vec![]), "{v:#}");
    }
    assert!(p.run(&["apply", "dev", "--yes"]).expect_code(0).stdout.ends_with("nothing to apply\n"));
    assert_eq!(p.state_summary().journal, journal, "no promotion was recorded");
}

/// While another process holds the DuckDB file, each command's hint says what that command can
/// do: `--retries N` only where the command has it (`apply`, `run`) and was not given it (a
/// larger `--retries` when it was), else run it again once the writer is done; and with
/// `--json` the hint is the error's `hint`, not part of its `message`, and the kind is
/// `engine-locked` (not a broken engine).
#[test]
fn a_held_duckdb_file_is_hinted_per_command_and_the_hint_is_its_own_json_field() {
    const AGAIN: &str = "run this again once that process is done";
    let p = sample_project();
    p.apply("dev");
    // This test process writes the file: every command below finds it held.
    let writer = efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("hold the file");
    for args in [&["audit", "dev", "--json"][..], &["diff", "dev", "dev", "--data", "--json"][..], &["janitor", "--json"][..]] {
        let run = p.run(args);
        run.expect_code(1);
        assert!(!run.stderr.contains("--retries"), "`{}` has no `--retries`: {}", run.cmd, run.stderr);
        let error = &run.json()["error"];
        assert_eq!(error["kind"], "engine-locked", "`{}`: {error:#}", run.cmd);
        let hint = error["hint"].as_str().unwrap_or_else(|| panic!("`{}`: no hint in {error:#}", run.cmd));
        assert!(hint.contains("is writing this DuckDB file") && hint.ends_with(AGAIN), "`{}`: {hint}", run.cmd);
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("efmesh.duckdb") && !message.contains("hint:"), "`{}`: {error:#}", run.cmd);
    }
    // A preview says it never waits, then the hint on its own line.
    let run = p.run(&["preview", "dev", "s.b", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let err = v["previews"][0]["error"].as_str().unwrap_or_else(|| panic!("no error in {v:#}"));
    let (cause, hint) = err.split_once("\n  hint: ").unwrap_or_else(|| panic!("no hint line: {err}"));
    assert!(cause.contains("never wait") && hint.ends_with(AGAIN) && !err.contains("--retries"), "{err}");
    // `apply` has `--retries`: its hint offers it.
    p.write("models/a.lua", &model_a("AND range < 5"));
    let run = p.run(&["apply", "dev", "--yes", "--json"]);
    run.expect_code(1);
    let error = &run.json()["error"];
    assert_eq!(error["kind"], "engine-locked", "{error:#}");
    let hint = error["hint"].as_str().unwrap_or_else(|| panic!("no hint in {error:#}"));
    assert!(hint.ends_with(&format!("{AGAIN}, or pass `--retries N` to retry with backoff")), "{hint}");
    // An apply that already retried is not told to pass the flag it passed: a larger one.
    let run = p.run(&["apply", "dev", "--yes", "--retries", "1", "--json"]);
    run.expect_code(1);
    let error = &run.json()["error"];
    let hint = error["hint"].as_str().unwrap_or_else(|| panic!("no hint in {error:#}"));
    assert!(hint.ends_with(&format!("{AGAIN}, or pass a larger `--retries` than 1 to retry longer")) && !hint.contains("--retries N"), "{hint}");
    drop(writer);
}
