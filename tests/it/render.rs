//! `efmesh render <model> --interval FROM TO` (issue #15 part 4): the statements apply runs for
//! each batch of an interval of a time-range model, with literal bounds; compared with what
//! apply and run execute (the engine's debug log of every statement).

use crate::common::{EngineBackend, Project, Run};
use crate::on_every_engine;
use serde_json::Value;

on_every_engine!(
    render_interval_of_a_new_table_is_what_apply_executes_when_it_creates_it,
    render_interval_of_a_served_table_is_delete_and_insert_per_batch_as_run_executes,
);

/// `s.src` (full) → `t.x` (time range by day from 2026-01-01, 3 days a batch).
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("models/src.lua", "define_model { name = \"s.src\", kind = kind.full(), schema = { { \"k\", \"bigint\" } }, query = \"SELECT 7 AS k\" }\n");
    p.write("models/t.lua", &time_range("a.k"));
    p
}

/// `t.x`, its `n` column computed by `n`.
fn time_range(n: &str) -> String {
    format!(
        r#"define_model {{
  name = "t.x",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", grain = "day", batch_size = 3 }},
  schema = {{ {{ "day", "timestamp" }}, {{ "n", "bigint" }} }},
  query = "SELECT d.day, {n} AS n FROM (SELECT day FROM generate_series(TIMESTAMP '2026-01-01', TIMESTAMP '2026-03-01', INTERVAL '1 day') AS g(day)) AS d, " .. ref("s.src") .. " AS a WHERE d.day >= @start AND d.day < @end",
}}
"#
    )
}

/// The statements that wrote the table `physical` in a run with `--log-level debug
/// --log-format json` (the engine logs every statement it executes, with its text in `sql`),
/// in the order executed: creations of, deletions from and insertions into it.
fn writes_of(run: &Run, physical: &str) -> Vec<String> {
    let prefixes = [
        format!("CREATE TABLE {physical} "),
        format!("CREATE TABLE IF NOT EXISTS {physical} "),
        format!("DELETE FROM {physical} "),
        format!("INSERT INTO {physical} "),
    ];
    run.stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["sql"].as_str().map(str::to_string))
        .filter(|s| prefixes.iter().any(|p| s.starts_with(p.as_str())))
        .collect()
}

/// Every statement of a `render --interval --json` report, in order: `before`, then each batch's.
fn rendered(v: &Value) -> Vec<String> {
    let mut all: Vec<String> = v["before"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect();
    for b in v["batches"].as_array().into_iter().flatten() {
        all.extend(b["statements"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)));
    }
    all
}

/// `[from, to)` of each batch.
fn bounds(v: &Value) -> Vec<(String, String)> {
    v["batches"].as_array().into_iter().flatten().map(|b| (b["from"].as_str().unwrap_or("").to_string(), b["to"].as_str().unwrap_or("").to_string())).collect()
}

fn render_interval_of_a_new_table_is_what_apply_executes_when_it_creates_it(engine: EngineBackend) {
    let p = project(engine);
    // The whole first backfill (the project's `--now` is 2026-02-10): 40 days, 3 a batch.
    let v = p.run(&["render", "t.x", "--env", "dev", "--interval", "2026-01-01", "2026-02-10", "--json"]).expect_code(0).json();
    assert_eq!(
        (v["model"].as_str(), v["env"].as_str(), v["version"].as_str(), v["tableExists"].as_bool()),
        (Some("t.x"), Some("dev"), Some("planned"), Some(false)),
        "{v:#}"
    );
    assert_eq!(v["servedFingerprint"], Value::Null, "dev serves nothing yet: {v:#}");
    assert_eq!((v["interval"]["from"].as_str(), v["interval"]["to"].as_str()), (Some("2026-01-01T00:00:00.000Z"), Some("2026-02-10T00:00:00.000Z")));
    let b = bounds(&v);
    assert_eq!(b.len(), 14, "40 days in batches of 3: {b:?}");
    assert_eq!(b.first().map(|(f, t)| (f.as_str(), t.as_str())), Some(("2026-01-01T00:00:00.000Z", "2026-01-04T00:00:00.000Z")));
    assert_eq!(b.last().map(|(f, t)| (f.as_str(), t.as_str())), Some(("2026-02-09T00:00:00.000Z", "2026-02-10T00:00:00.000Z")));
    let writes: Vec<&str> = v["batches"].as_array().into_iter().flatten().filter_map(|b| b["write"].as_str()).collect();
    assert_eq!(writes.first(), Some(&"create"), "the first batch creates the new table");
    assert!(writes[1..].iter().all(|w| *w == "insert"), "later batches insert only: {writes:?}");
    assert_eq!(v["before"].as_array().map(Vec::len), Some(0), "nothing before a batch that creates the table");
    let physical = v["physical"].as_str().expect("physical").to_string();
    let first = v["batches"][0]["statements"][0].as_str().unwrap_or_default();
    assert!(first.starts_with(&format!("CREATE TABLE {physical} AS ")), "{first}");
    // Literal bounds, never placeholders; the parent's physical table, not a view of dev.
    assert!(first.contains("TIMESTAMP '2026-01-01 00:00:00'") && first.contains("TIMESTAMP '2026-01-04 00:00:00'"), "{first}");
    let script = v["sql"].as_str().unwrap_or_default();
    assert!(!script.contains("@start") && !script.contains("$start") && !script.contains("dev"), "{script}");

    let apply = p.run(&["--log-level", "debug", "--log-format", "json", "apply", "dev", "--yes"]);
    apply.expect_code(0);
    let executed = writes_of(&apply, &physical);
    assert_eq!(executed, rendered(&v), "render prints exactly the statements apply executed for the interval");
    assert_eq!(p.rows("dev__t.x").len(), 40, "and they computed the 40 days");
}

fn render_interval_of_a_served_table_is_delete_and_insert_per_batch_as_run_executes(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    p.run(&["restate", "dev", "--model", "t.x", "--from", "2026-01-02", "--to", "2026-01-09"]).expect_code(0);
    let v = p.run(&["render", "t.x", "--env", "dev", "--interval", "2026-01-02", "2026-01-09", "--json"]).expect_code(0).json();
    assert_eq!((v["version"].as_str(), v["tableExists"].as_bool()), (Some("served"), Some(true)), "{v:#}");
    assert_eq!(v["servedFingerprint"], v["fingerprint"], "{v:#}");
    assert_eq!(
        bounds(&v),
        [("2026-01-02", "2026-01-05"), ("2026-01-05", "2026-01-08"), ("2026-01-08", "2026-01-09")]
            .map(|(f, t)| (format!("{f}T00:00:00.000Z"), format!("{t}T00:00:00.000Z")))
            .to_vec(),
        "7 days split as batch_size 3 splits them"
    );
    let physical = v["physical"].as_str().expect("physical").to_string();
    for b in v["batches"].as_array().into_iter().flatten() {
        assert_eq!(b["write"], "replace");
        let s: Vec<&str> = b["statements"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let from = b["from"].as_str().unwrap_or_default().replace('T', " ").replace(".000Z", "");
        let to = b["to"].as_str().unwrap_or_default().replace('T', " ").replace(".000Z", "");
        assert_eq!(s.len(), 2, "DELETE then INSERT: {s:?}");
        assert_eq!(s[0], format!("DELETE FROM {physical} WHERE \"day\" >= TIMESTAMP '{from}' AND \"day\" < TIMESTAMP '{to}'"));
        assert!(s[1].starts_with(&format!("INSERT INTO {physical} (\"day\", \"n\")")) && s[1].contains(&format!("d.day >= TIMESTAMP '{from}'")), "{}", s[1]);
    }

    // The text form: the same statements, each ended by `;`, under a header naming the version.
    let text = p.run(&["render", "t.x", "--env", "dev", "--interval", "2026-01-02", "2026-01-09"]).expect_code(0).stdout.clone();
    assert!(text.contains("the version environment `dev` serves") && text.contains(&physical), "{text}");
    for s in rendered(&v) {
        assert!(text.contains(&format!("{s};\n")), "text lacks {s}\n{text}");
    }

    let run = p.run(&["--log-level", "debug", "--log-format", "json", "run", "dev"]);
    run.expect_code(0);
    assert_eq!(writes_of(&run, &physical), rendered(&v), "render prints exactly the statements run executed to recompute the interval");

    // The project moves on: render shows the version apply would build, not the served one.
    p.write("models/t.lua", &time_range("a.k + 1"));
    let changed = p.run(&["render", "t.x", "--env", "dev", "--interval", "2026-01-02", "2026-01-09", "--json"]).expect_code(0).json();
    assert_eq!(changed["version"], "planned", "{changed:#}");
    assert_eq!(changed["servedFingerprint"], v["fingerprint"]);
    assert_ne!(changed["physical"], v["physical"], "a breaking change builds another table");
    let text = p.run(&["render", "t.x", "--env", "dev", "--interval", "2026-01-02", "2026-01-09"]).expect_code(0).stdout.clone();
    assert!(text.contains("the version apply would build: `dev` serves @"), "{text}");
}

#[test]
fn render_interval_refuses_bad_input_naming_it() {
    let p = project(EngineBackend::DuckDb);
    p.write("models/f.lua", "define_model { name = \"s.full\", kind = kind.full(), schema = { { \"k\", \"bigint\" } }, query = \"SELECT 1 AS k\" }\n");
    let cases: [(&[&str], &str); 7] = [
        (&["t.x", "--interval", "2026-01-02T03:00:00Z", "2026-01-09"], "--interval 2026-01-02T03:00:00Z is not aligned to the day grain of `t.x`"),
        (&["t.x", "--interval", "2026-01-09", "2026-01-02"], "FROM 2026-01-09 must be before TO 2026-01-02"),
        (&["t.x", "--interval", "2026-01-09", "2026-01-09"], "FROM 2026-01-09 must be before TO 2026-01-09"),
        (&["t.xx", "--interval", "2026-01-02", "2026-01-09"], "unknown model `t.xx`"),
        (&["s.full", "--interval", "2026-01-02", "2026-01-09"], "`s.full` is a full model, which has no intervals"),
        (&["t.x", "--interval", "yesterday", "2026-01-09"], "--interval FROM: `yesterday` is not a date or timestamp"),
        (&["t.x", "--interval", "2025-12-01", "2026-01-09"], "`t.x` starts at 2026-01-01T00:00:00.000Z"),
    ];
    for (args, wanted) in cases {
        let mut all = vec!["render"];
        all.extend_from_slice(args);
        let r = p.run(&all);
        r.expect_code(1);
        assert!(r.stderr.contains(wanted), "`{}`: wanted {wanted:?} in\n{}", all.join(" "), r.stderr);
        // `--json`: one error object on stdout, the same message, of kind `usage` (a command
        // line refused: an argument malformed or naming nothing, a model without intervals).
        all.push("--json");
        let j = p.run(&all);
        j.expect_code(1);
        let v = j.json();
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains(wanted)), "{v:#}");
        assert_eq!(v["error"]["kind"], "usage", "`{}`: {v:#}", all.join(" "));
    }
    let r = p.run(&["render", "t.xx", "--interval", "2026-01-02", "2026-01-09"]);
    assert!(r.stderr.contains("did you mean `t.x`?"), "{}", r.stderr);
    let r = p.run(&["render", "s.full", "--interval", "2026-01-02", "2026-01-09"]);
    assert!(r.stderr.contains("apply rebuilds the whole table from its query"), "{}", r.stderr);
    // Without --interval, a full model still renders its query.
    let sql = p.run(&["render", "s.full", "--env", "dev"]).expect_code(0).stdout.clone();
    assert_eq!(sql.trim(), "SELECT 1 AS k");
    // Render changes nothing: no engine file was created by any of this.
    assert!(!p.engine_path().exists(), "render wrote the engine");
}
