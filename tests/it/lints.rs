//! `efmesh check`'s lint rules (issue #16 part 9, `efmesh::sql::lint`): each rule fires on a
//! positive case and stays quiet on its negative twin, `[lint]` in `efmesh.toml` switches rules
//! off or makes them errors (exit 1), a model's `ignored_lints` (Lua, Rhai, `.sql`) silences a
//! rule for that model, unknown rule names are errors with a "did you mean", and the `--json`
//! shape. The rules read SQL only (and `missing_source_file` whether the externals' files
//! exist): no database is opened, so DuckDB alone.

use crate::common::Project;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Externals `raw.events` (a table: no batch re-read) and `raw.people`, a CSV `raw.feed`, and a
/// positive and a negative model per rule.
const MODELS: &str = r#"local ev = define_model { name = "raw.events", kind = kind.external { table = "main.events" },
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "loaded_at", "timestamp" } } }
local people = define_model { name = "raw.people", kind = kind.external { table = "main.people" },
  schema = { { "id", "bigint" }, { "name", "varchar" } } }
local feed = define_model { name = "raw.feed", kind = kind.external { path = "data/feed.csv" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } } }

-- select_star_external
local listed = define_model { name = "m.star", kind = kind.view(),
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "loaded_at", "timestamp" } },
  query = "SELECT * FROM " .. ref(ev) }
define_model { name = "m.listed", kind = kind.view(),
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "loaded_at", "timestamp" } },
  query = "SELECT id, t, loaded_at FROM " .. ref(ev) }
define_model { name = "m.star_of_a_view", kind = kind.view(),
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "loaded_at", "timestamp" } },
  query = "SELECT * FROM " .. ref("m.listed") }

-- ambiguous_column
define_model { name = "m.ambiguous", kind = kind.full(),
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT id, name FROM " .. ref(ev) .. " AS e JOIN " .. ref(people) .. " AS p ON p.id = e.id" }
define_model { name = "m.qualified", kind = kind.full(),
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT e.id, name FROM " .. ref(ev) .. " AS e JOIN " .. ref(people) .. " AS p ON p.id = e.id" }
define_model { name = "m.using", kind = kind.full(),
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT id, name FROM " .. ref(ev) .. " JOIN " .. ref(people) .. " USING (id)" }

-- missing_grain (a unique-key model's key is its grain: no finding)
define_model { name = "m.no_grain", kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } },
  query = "SELECT id, t FROM " .. ref(ev) .. " WHERE t >= @start AND t < @end" }
define_model { name = "m.grained", kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01" }, grain = { "id", "t" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } },
  query = "SELECT id, t FROM " .. ref(ev) .. " WHERE t >= @start AND t < @end" }
define_model { name = "m.keyed", kind = kind.incremental_by_unique_key { key = { "id" } },
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT id, name FROM " .. ref(people) }
define_model { name = "m.partition_no_grain", kind = kind.incremental_by_partition { partitioned_by = "name" },
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT id, name FROM " .. ref(people) }
define_model { name = "m.partition_grained", kind = kind.incremental_by_partition { partitioned_by = "name" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT id, name FROM " .. ref(people) }

-- time_filter_column
define_model { name = "m.other_filter", kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } },
  query = "SELECT id, t FROM " .. ref(ev) .. " WHERE loaded_at >= @start AND loaded_at < @end" }
define_model { name = "m.time_filter", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "day", "timestamp" } },
  query = "SELECT e.id, date_trunc('day', e.t) AS day FROM " .. ref(ev) .. " AS e WHERE e.t >= @start AND e.t < @end" }

-- unknown_type (a misspelt type; DuckDB's aliases and nested types are types)
define_model { name = "m.bad_type", kind = kind.view(), schema = { { "id", "bignt" }, { "n", "int8" }, { "l", "varchar[]" }, { "s", "struct(x integer)" } },
  query = "SELECT 1 AS id, 2 AS n, ['a'] AS l, {'x': 1} AS s" }

-- batch_rescan
define_model { name = "m.rescan", kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01" }, grain = { "id" },
  schema = { { "id", "bigint" }, { "t", "timestamp" } },
  query = "SELECT id, t FROM " .. ref(feed) .. " WHERE t >= @start AND t < @end" }
"#;

/// The test config in every language, with `lint` appended.
fn config(p: &Project, lint: &str) -> String {
    p.config_with(lint).replace("models = [\"models/**/*.lua\"]", "models = [\"models/**/*.lua\", \"models/**/*.rhai\", \"models/**/*.sql\"]")
}

fn project(lint: &str) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &config(&p, lint));
    p.write("data/feed.csv", "id,t\n1,2026-01-01 10:00:00\n");
    p.write("models/all.lua", MODELS);
    p
}

fn found(list: &Value) -> BTreeSet<(String, String)> {
    list.as_array().expect("a list").iter().filter_map(|f| Some((f.get("rule")?.as_str()?.to_string(), f["model"].as_str()?.to_string()))).collect()
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter().map(|(r, m)| (r.to_string(), m.to_string())).collect()
}

const POSITIVES: &[(&str, &str)] = &[
    ("select_star_external", "m.star"),
    ("ambiguous_column", "m.ambiguous"),
    ("missing_grain", "m.no_grain"),
    ("missing_grain", "m.partition_no_grain"),
    ("time_filter_column", "m.other_filter"),
    ("batch_rescan", "m.rescan"),
    ("unknown_type", "m.bad_type"),
];

#[test]
fn each_rule_fires_on_its_positive_case_only_and_warnings_keep_exit_0() {
    let p = project("");
    let run = p.run(&["check", "--json"]);
    run.expect_code(0);
    let v = run.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["apiVersion", "ok", "models", "errors", "warnings", "unchecked"]);
    assert_eq!((&v["apiVersion"], &v["ok"], &v["errors"]), (&json!(1), &json!(true), &json!([])), "{v:#}");
    // Exactly the positive cases: none of the negative twins (listed columns, `*` of a view,
    // qualified or `USING` columns, a grain, a filter on the time column's source).
    assert_eq!(found(&v["warnings"]), pairs(POSITIVES), "{v:#}");
    let by_rule = |rule: &str| v["warnings"].as_array().unwrap().iter().find(|w| w["rule"] == rule).unwrap().clone();
    for w in v["warnings"].as_array().unwrap() {
        assert_eq!(w["severity"], "warning");
        assert_eq!(w["file"], "models/all.lua");
        assert!(w["line"].as_u64().is_some_and(|l| l > 1) && w["message"].is_string() && w["hint"].is_string(), "{w:#}");
    }
    let star = by_rule("select_star_external");
    assert_eq!((star["line"].as_u64(), star["parent"].as_str()), (Some(9), Some("raw.events")), "{star:#}");
    let amb = by_rule("ambiguous_column");
    assert_eq!(amb["column"], "id", "{amb:#}");
    assert_eq!((amb["sqlLine"].as_u64(), amb["sqlColumn"].as_u64()), (Some(1), Some(8)), "{amb:#}");
    assert!(amb["message"].as_str().unwrap().contains("parent `raw.events` (as `e`) and parent `raw.people` (as `p`)"), "{amb:#}");
    let tf = by_rule("time_filter_column");
    assert_eq!((tf["parent"].as_str(), tf["column"].as_str()), (Some("raw.events"), Some("loaded_at")), "{tf:#}");
    assert!(tf["message"].as_str().unwrap().contains("`raw.events.t`"), "{tf:#}");
    assert_eq!(by_rule("batch_rescan")["culprit"], "raw.feed");
    let ty = by_rule("unknown_type");
    assert_eq!((ty["column"].as_str(), ty["type"].as_str()), (Some("id"), Some("bignt")), "{ty:#}");
    assert!(
        ty["message"]
            .as_str()
            .unwrap()
            .starts_with("column `id` has type `bignt`, which is not a DuckDB type: Catalog Error: Type with name bignt does not exist!")
            && ty["message"].as_str().unwrap().ends_with("(did you mean `bigint`?)"),
        "{ty:#}"
    );

    let text = p.run(&["check"]);
    text.expect_code(0);
    assert!(text.stdout.contains("warning[ambiguous_column]: models/all.lua:20: model `m.ambiguous`: column `id` is ambiguous"), "{}", text.stdout);
    assert!(text.stdout.contains(", at line 1, column 8 of the query\n  hint: qualify"), "{}", text.stdout);
    assert!(text.stdout.ends_with("ok: 18 models checked, 7 warnings\n"), "{}", text.stdout);
}

#[test]
fn config_switches_rules_off_and_makes_them_errors() {
    let p = project("\n[lint]\nignore = [\"missing_grain\", \"batch_rescan\"]\nerror = [\"select_star_external\"]\n");
    let run = p.run(&["check", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!(v["ok"], false);
    assert_eq!(found(&v["errors"]), pairs(&[("select_star_external", "m.star")]), "{v:#}");
    assert_eq!(v["errors"][0]["severity"], "error");
    assert_eq!(
        found(&v["warnings"]),
        pairs(&[("ambiguous_column", "m.ambiguous"), ("time_filter_column", "m.other_filter"), ("unknown_type", "m.bad_type")]),
        "{v:#}"
    );
    let text = p.run(&["check"]);
    text.expect_code(1);
    assert!(text.stdout.contains("error[select_star_external]: models/all.lua:9: model `m.star`"), "{}", text.stdout);
    assert!(text.stdout.ends_with("check failed: 1 error (18 models checked)\n"), "{}", text.stdout);

    // `all` switches every rule off.
    p.write("efmesh.toml", &config(&p, "\n[lint]\nignore = [\"all\"]\n"));
    let v = p.run(&["check", "--json"]).expect_code(0).json();
    assert_eq!((&v["errors"], &v["warnings"]), (&json!([]), &json!([])), "{v:#}");

    // An unknown rule is a config error with a suggestion.
    p.write("efmesh.toml", &config(&p, "\n[lint]\nignore = [\"ambiguous_columns\"]\n"));
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(run.stdout.contains("`lint.ignore`: unknown rule `ambiguous_columns` (did you mean `ambiguous_column`?)"), "{}", run.stdout);
}

#[test]
fn a_model_ignores_rules_with_ignored_lints_in_every_language() {
    let p = project("");
    p.write(
        "models/all.lua",
        &MODELS.replace(
            "local listed = define_model { name = \"m.star\", kind = kind.view(),",
            "local listed = define_model { name = \"m.star\", kind = kind.view(), ignored_lints = { \"select_star_external\" },",
        ),
    );
    p.write(
        "models/r.rhai",
        "define_model(#{ name: \"r.no_grain\", kind: kind::incremental_by_partition(#{ partitioned_by: [\"id\"] }), ignored_lints: [\"missing_grain\"],\n  schema: [[\"id\", \"bigint\"]], query: \"SELECT 1 AS id\" });\ndefine_model(#{ name: \"r.still\", kind: kind::incremental_by_partition(#{ partitioned_by: [\"id\"] }),\n  schema: [[\"id\", \"bigint\"]], query: \"SELECT 1 AS id\" });\n",
    );
    p.write(
        "models/s.sql",
        "-- name: s.amb\n-- kind: full\n-- schema: id bigint\n-- refs: raw.events, raw.people\n-- ignored_lints: ambiguous_column\nSELECT id FROM @ref(raw.events) AS e JOIN @ref(raw.people) AS p ON p.id = e.id\n",
    );
    let v = p.run(&["check", "--json"]).expect_code(0).json();
    let mut expected: Vec<(&str, &str)> = POSITIVES.iter().copied().filter(|(r, _)| *r != "select_star_external").collect();
    expected.push(("missing_grain", "r.still"));
    assert_eq!(found(&v["warnings"]), pairs(&expected), "{v:#}");

    // An unknown rule name is a load error at file:line with a suggestion.
    p.write("models/s.sql", &p.read("models/s.sql").replace("ignored_lints: ambiguous_column", "ignored_lints: ambigous_column"));
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(
        run.stdout.contains("models/s.sql:5: model `s.amb`: `ignored_lints`: unknown lint rule `ambigous_column`")
            && run.stdout.contains("did you mean `ambiguous_column`?"),
        "{}",
        run.stdout
    );
}

#[test]
fn missing_grain_says_the_row_identity_grain_not_the_kinds_interval_grain() {
    let p = project("");
    p.write(
        "models/t.lua",
        "define_model { name = \"t.daily\", kind = kind.incremental_by_time_range { time_column = \"t\", start = \"2026-01-01\", grain = \"day\" },\n  \
         schema = { { \"id\", \"bigint\" }, { \"t\", \"timestamp\" } },\n  query = \"SELECT id, t FROM \" .. ref(\"raw.events\") .. \" WHERE t >= @start AND t < @end\" }\n",
    );
    let v = p.run(&["check", "--json"]).expect_code(0).json();
    let warning = |model: &str| {
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["rule"] == "missing_grain" && w["model"] == model)
            .unwrap_or_else(|| panic!("no missing_grain on {model}: {v:#}"))
            .clone()
    };
    let daily = warning("t.daily");
    let msg = daily["message"].as_str().unwrap();
    assert!(
        msg.starts_with("no row-identity `grain` (the columns that identify a row) on this `incremental_by_time_range` model")
            && msg.contains("the kind's `grain` (its interval unit) is another setting"),
        "{daily:#}"
    );
    assert!(daily["hint"].as_str().unwrap().contains("`t` and the columns that tell its rows apart"), "{daily:#}");
    // A partition model has no interval grain to confuse it with.
    let partitioned = warning("m.partition_no_grain");
    let msg = partitioned["message"].as_str().unwrap();
    assert!(
        msg.starts_with("no row-identity `grain` (the columns that identify a row) on this `incremental_by_partition` model") && !msg.contains("interval"),
        "{partitioned:#}"
    );
    assert!(partitioned["hint"].as_str().unwrap().contains("`name` and the columns that tell a partition's rows apart"), "{partitioned:#}");
    // A unique-key model's key identifies its rows (`diff --data` keys on it): no finding.
    assert!(!v["warnings"].as_array().unwrap().iter().any(|w| w["rule"] == "missing_grain" && w["model"] == "m.keyed"), "{v:#}");
}

/// Externals reading every kind of path, at lines 1 to 9 of `models/raw.lua`: a file that exists,
/// one that does not, a glob matching nothing (in a directory that does not exist either) and
/// one matching a file, a hive-partitioned glob matching a file, an absolute path to no file,
/// URLs (`s3://`, `https://`: the engine's to reach, never looked for), and a table.
fn sources_project(lint: &str) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &config(&p, lint));
    p.write("data/present.csv", "id\n1\n");
    p.write("data/parts/a.csv", "id\n1\n");
    p.write("data/day=2026-01-01/e.parquet", "");
    let absolute = p.root().join("elsewhere/gone.parquet");
    p.write(
        "models/raw.lua",
        &format!(
            r#"define_model {{ name = "raw.present", kind = kind.external {{ path = "data/present.csv" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.missing", kind = kind.external {{ path = "data/missing.csv" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.no_parts", kind = kind.external {{ path = "data/partz/*.csv" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.parts", kind = kind.external {{ path = "data/parts/*.csv" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.days", kind = kind.external {{ path = "data/day=*/*.parquet", hive_partitioning = true }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.absolute", kind = kind.external {{ path = "{}" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.s3", kind = kind.external {{ path = "s3://efmesh-no-such-bucket/x/*.parquet" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.web", kind = kind.external {{ path = "https://efmesh.invalid/x.csv" }}, schema = {{ {{ "id", "bigint" }} }} }}
define_model {{ name = "raw.table", kind = kind.external {{ table = "main.nowhere" }}, schema = {{ {{ "id", "bigint" }} }} }}
"#,
            absolute.display()
        ),
    );
    p
}

/// The three externals of [`sources_project`] whose path matches no file.
const MISSING: &[(&str, &str)] = &[("missing_source_file", "raw.missing"), ("missing_source_file", "raw.no_parts"), ("missing_source_file", "raw.absolute")];

/// `missing_source_file` warns of each external whose local file or glob matches no file, at its
/// file:line, naming the path as written and as `apply` reads it (relative to the project
/// directory); a file or glob that matches, a URL and a table are no finding; the warning keeps
/// exit 0 and goes once the file exists.
#[test]
fn missing_source_file_warns_of_each_local_path_that_matches_no_file() {
    let p = sources_project("");
    let run = p.run(&["check", "--json"]);
    run.expect_code(0);
    let v = run.json();
    assert_eq!((&v["ok"], &v["errors"]), (&json!(true), &json!([])), "{v:#}");
    assert_eq!(found(&v["warnings"]), pairs(MISSING), "{v:#}");
    let warning =
        |model: &str| v["warnings"].as_array().unwrap().iter().find(|w| w["model"] == model).unwrap_or_else(|| panic!("no warning on {model}: {v:#}")).clone();
    // The command ran in the project directory, whose path the operating system gives resolved.
    let root = fs_err::canonicalize(p.root()).unwrap();
    let missing = warning("raw.missing");
    let resolved = root.join("data/missing.csv").display().to_string();
    assert_eq!(
        (missing["severity"].as_str(), missing["file"].as_str(), missing["line"].as_u64()),
        (Some("warning"), Some("models/raw.lua"), Some(2)),
        "{missing:#}"
    );
    assert_eq!((missing["path"].as_str(), missing["resolvedPath"].as_str()), (Some("data/missing.csv"), Some(resolved.as_str())), "{missing:#}");
    assert_eq!(missing["message"], format!("file `data/missing.csv` does not exist (read as `{resolved}`, relative to the project directory)"), "{missing:#}");
    assert!(missing["hint"].as_str().unwrap().starts_with("create the file, or correct the external's `path`"), "{missing:#}");
    let glob = warning("raw.no_parts");
    assert_eq!(glob["line"].as_u64(), Some(3), "{glob:#}");
    assert!(glob["message"].as_str().unwrap().starts_with("no file matches the pattern `data/partz/*.csv` (read as `"), "{glob:#}");
    // An absolute path is read as written.
    let absolute = warning("raw.absolute");
    let written = p.root().join("elsewhere/gone.parquet").display().to_string();
    assert_eq!((absolute["line"].as_u64(), absolute["resolvedPath"].as_str()), (Some(6), Some(written.as_str())), "{absolute:#}");
    assert_eq!(absolute["message"], format!("file `{written}` does not exist"), "{absolute:#}");

    let text = p.run(&["check"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains(&format!(
            "warning[missing_source_file]: models/raw.lua:2: model `raw.missing`: file `data/missing.csv` does not exist (read as `{resolved}`, relative to the project directory)\n  hint: create the file"
        )),
        "{}",
        text.stdout
    );
    assert!(text.stdout.ends_with("ok: 9 models checked, 3 warnings\n"), "{}", text.stdout);

    // Once the file and a file the glob matches exist, only the absolute path is missing.
    p.write("data/missing.csv", "id\n1\n");
    p.write("data/partz/b.csv", "id\n2\n");
    let v = p.run(&["check", "--json"]).expect_code(0).json();
    assert_eq!(found(&v["warnings"]), pairs(&[("missing_source_file", "raw.absolute")]), "{v:#}");
}

/// `[lint] error` makes a missing source file fail `check` (exit 1), `[lint] ignore` switches the
/// rule off, a misspelt name gets a "did you mean", and a model's `ignored_lints` (Lua, Rhai,
/// `.sql`) silences it for that model alone.
#[test]
fn missing_source_file_is_an_error_when_asked_and_ignored_when_asked() {
    let p = sources_project("\n[lint]\nerror = [\"missing_source_file\"]\n");
    let run = p.run(&["check", "--json"]);
    run.expect_code(1);
    let v = run.json();
    assert_eq!((&v["ok"], &v["warnings"]), (&json!(false), &json!([])), "{v:#}");
    assert_eq!(found(&v["errors"]), pairs(MISSING), "{v:#}");
    assert!(v["errors"].as_array().unwrap().iter().all(|e| e["severity"] == "error"), "{v:#}");
    let text = p.run(&["check"]);
    text.expect_code(1);
    assert!(
        text.stdout.contains("error[missing_source_file]: models/raw.lua:2: model `raw.missing`: file `data/missing.csv` does not exist"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.ends_with("check failed: 3 errors (9 models checked)\n"), "{}", text.stdout);

    p.write("efmesh.toml", &config(&p, "\n[lint]\nignore = [\"missing_source_file\"]\n"));
    let v = p.run(&["check", "--json"]).expect_code(0).json();
    assert_eq!((&v["errors"], &v["warnings"]), (&json!([]), &json!([])), "{v:#}");

    p.write("efmesh.toml", &config(&p, "\n[lint]\nignore = [\"missing_source_files\"]\n"));
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(run.stdout.contains("`lint.ignore`: unknown rule `missing_source_files` (did you mean `missing_source_file`?)"), "{}", run.stdout);

    // Per model, in every language: only the externals that do not ignore the rule are found.
    p.write("efmesh.toml", &config(&p, "\n[lint]\nerror = [\"missing_source_file\"]\n"));
    p.write(
        "models/raw.lua",
        &p.read("models/raw.lua").replace(
            "name = \"raw.missing\", kind = kind.external { path = \"data/missing.csv\" },",
            "name = \"raw.missing\", kind = kind.external { path = \"data/missing.csv\" }, ignored_lints = { \"missing_source_file\" },",
        ),
    );
    p.write(
        "models/r.rhai",
        "define_model(#{ name: \"r.gone\", kind: kind::external(#{ path: \"data/gone.json\" }), ignored_lints: [\"missing_source_file\"], schema: [[\"id\", \"bigint\"]] });\n\
         define_model(#{ name: \"r.still\", kind: kind::external(#{ path: \"data/gone.json\" }), schema: [[\"id\", \"bigint\"]] });\n",
    );
    p.write("models/s.sql", "-- name: s.gone\n-- kind: external(path = data/gone.csv)\n-- schema: id bigint\n-- ignored_lints: missing_source_file\n");
    let run = p.run(&["check", "--json"]);
    run.expect_code(1);
    let v = run.json();
    let mut expected: Vec<(&str, &str)> = MISSING.iter().copied().filter(|(_, m)| *m != "raw.missing").collect();
    expected.push(("missing_source_file", "r.still"));
    assert_eq!(found(&v["errors"]), pairs(&expected), "{v:#}");
}
