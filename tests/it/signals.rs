//! Signals (issue #16 part 4): a model's signals say which of its missing intervals are ready;
//! `run` computes only those, holds the rest (and what downstream depends on them) and says so;
//! `status` shows the model as waiting, not late. Signals are defined with `define_signal` in
//! macro files (Lua or Rhai), used from Lua, Rhai and `.sql` models, and query the engine
//! read-only through the handle they are given.

use crate::common::{EngineBackend, Project, env_view};
use crate::on_every_engine;
use efmesh::state::StateStore;
use serde_json::Value;
use std::collections::BTreeSet;

on_every_engine!(a_rhai_signal_queries_the_upstream_table_for_rhai_and_sql_models, a_failing_signal_fails_the_run_naming_it_and_computes_nothing);

/// A project whose models may be Lua, Rhai or SQL files.
fn project() -> Project {
    project_on(EngineBackend::DuckDb)
}

/// [`project`] on `engine`.
fn project_on(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
    p
}

/// The done interval starts (dates) of `model`'s version served by `env`.
fn done(p: &Project, env: &str, model: &str) -> BTreeSet<String> {
    let s = p.state();
    let fp = s.env_pointers(env).expect("pointers").get(model).cloned().unwrap_or_else(|| panic!("`{model}` not served by `{env}`"));
    s.done_intervals(model, &fp).expect("ledger").into_iter().map(|t| efmesh::core::interval::to_iso(t)[..10].to_string()).collect()
}

fn days(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(ToString::to_string).collect()
}

/// The waiting entries of a `run --json` answer: (model, first day, intervals, reason).
fn waiting(v: &Value) -> Vec<(String, String, usize, String)> {
    v["waiting"]
        .as_array()
        .expect("waiting")
        .iter()
        .map(|w| {
            let intervals = w["intervals"].as_array().unwrap();
            (
                w["model"].as_str().unwrap().to_string(),
                intervals[0]["start"].as_str().unwrap()[..10].to_string(),
                intervals.len(),
                w["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The `lag` entry of `model` in `status --json`.
fn lag<'a>(status: &'a Value, model: &str) -> &'a Value {
    status["lag"].as_array().unwrap().iter().find(|l| l["model"] == model).unwrap_or_else(|| panic!("no lag for {model}: {status}"))
}

/// `landing/` in the project (created) and the `file_exists` signal ([`FILE_SIGNAL`]) as
/// `macros/signals.lua`: a day is ready once `landing/<day>.csv` exists.
pub(crate) fn landing_with_file_signal(p: &Project) -> std::path::PathBuf {
    let landing = p.root().join("landing");
    fs_err::create_dir_all(&landing).unwrap();
    p.write("macros/signals.lua", FILE_SIGNAL);
    landing
}

const FILE_SIGNAL: &str = r#"-- ready when the day's landing file exists
define_signal("file_exists", function(intervals, args, db)
  local ready = {}
  for i, iv in ipairs(intervals) do
    local rows = db.query(("SELECT count(*) FROM glob('%s/%s.csv')"):format(args.dir, iv.start:sub(1, 10)))
    ready[i] = rows[1][1] ~= "0"
  end
  return ready
end)
"#;

fn events(signals: &str) -> String {
    format!(
        r#"define_model {{
  name = "s.events",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day" }},
  schema = {{ {{ "d", "date" }}, {{ "n", "integer" }} }},
  query = "SELECT CAST(@start AS DATE) AS d, 1 AS n",{signals}
}}
define_model {{
  name = "s.daily",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day" }},
  schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT d, CAST(sum(n) AS bigint) AS n FROM " .. ref("s.events") .. " WHERE d >= @start AND d < @end GROUP BY d",
}}
"#
    )
}

#[test]
fn a_signal_holds_back_one_interval_until_its_file_appears_and_the_child_waits_too() {
    let mut p = project();
    let landing = landing_with_file_signal(&p);
    p.write("models/events.lua", &events(""));
    p.now = "2026-01-02T06:00:00Z".into();
    p.apply("dev");
    assert_eq!(done(&p, "dev", "s.events"), days(&["2026-01-01"]));

    // Adding a signal is no change to the model's version: `run` is not blocked.
    let signals = format!("\n  signals = {{ {{ \"file_exists\", dir = \"{}\" }} }},", landing.display());
    p.write("models/events.lua", &events(&signals));
    assert_eq!(p.plan("dev")["hasChanges"], false, "a signal is neither fingerprinted nor metadata");

    // Two days are due; only the 2nd's file has landed: the 3rd waits, in the child as well.
    p.write("landing/2026-01-02.csv", "x\n1\n");
    p.now = "2026-01-04T06:00:00Z".into();
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["outcome"], "processed");
    assert_eq!(v["intervals"], 2, "{v}");
    assert_eq!(waiting(&v), vec![("s.events".into(), "2026-01-03".into(), 1, "signal".into()), ("s.daily".into(), "2026-01-03".into(), 1, "upstream".into())]);
    assert_eq!(v["waiting"][1]["upstream"], "s.events");
    assert_eq!(done(&p, "dev", "s.events"), days(&["2026-01-01", "2026-01-02"]));
    assert_eq!(done(&p, "dev", "s.daily"), days(&["2026-01-01", "2026-01-02"]));
    assert_eq!(p.rows(&env_view("dev", "s.daily")).len(), 2);

    // `status`: waiting, not late; the text says so.
    let st = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!((lag(&st, "s.events")["waiting"].as_u64(), lag(&st, "s.events")["late"].as_bool()), (Some(1), Some(false)), "{st}");
    assert_eq!(lag(&st, "s.events")["waitingOn"], "signal");
    assert_eq!((lag(&st, "s.daily")["waiting"].as_u64(), lag(&st, "s.daily")["waitingOn"].as_str()), (Some(1), Some("s.events")));
    assert_eq!(st["healthy"], true);
    let text = p.run(&["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("⏸ s.events  waiting on its signals: 1 day interval(s) not ready"), "{text}");
    assert!(text.contains("⏸ s.daily  waiting on `s.events` upstream"), "{text}");

    // Nothing landed: the next run computes nothing and still waits.
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!((v["outcome"].as_str(), waiting(&v).len()), (Some("nothing-due"), 2), "{v}");

    // The file lands: the next run computes that interval, and only it, in both models.
    p.write("landing/2026-01-03.csv", "x\n1\n");
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!((v["intervals"].as_u64(), waiting(&v).len()), (Some(2), 0), "{v}");
    assert_eq!(done(&p, "dev", "s.events"), days(&["2026-01-01", "2026-01-02", "2026-01-03"]));
    assert_eq!(done(&p, "dev", "s.daily"), days(&["2026-01-01", "2026-01-02", "2026-01-03"]));
    let st = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!((lag(&st, "s.events")["behind"].as_u64(), lag(&st, "s.events")["waiting"].as_u64()), (Some(0), Some(0)), "{st}");
}

const ROWS_SIGNAL: &str = r#"// ready when the upstream table has rows dated at or after the interval's end
define_signal("rows_after", |intervals, args, db| {
    intervals.map(|iv| {
        let day = iv.end.sub_string(0, 10);
        let rows = db.query(`SELECT count(*) FROM ${args.table} WHERE d >= DATE '${day}'`);
        rows[0][0] != "0"
    })
});
"#;

fn a_rhai_signal_queries_the_upstream_table_for_rhai_and_sql_models(engine: EngineBackend) {
    let mut p = project_on(engine);
    p.write("macros/rows.rhai", ROWS_SIGNAL);
    p.write(
        "models/a.rhai",
        "define_model(#{ name: \"s.a\", kind: kind::incremental_by_time_range(#{ time_column: \"d\", start: \"2026-01-01\" }),\n  \
         signals: [#{ name: \"rows_after\", table: \"raw.upstream\" }],\n  schema: [[\"d\", \"date\"]], query: \"SELECT CAST(@start AS DATE) AS d\" });\n",
    );
    p.write(
        "models/b.sql",
        "-- name: s.b\n-- kind: incremental_by_time_range(time_column = d, start = 2026-01-01, grain = day)\n\
         -- signals: rows_after(table = 'raw.upstream')\n-- schema: d date\nSELECT CAST(@start AS DATE) AS d\n",
    );
    p.execute_on_engine("CREATE SCHEMA raw; CREATE TABLE raw.upstream (d DATE); INSERT INTO raw.upstream VALUES ('2026-01-02'), ('2026-01-03')");
    p.now = "2026-01-02T06:00:00Z".into();
    p.apply("dev");
    // Upstream has rows up to the 3rd: the 2nd is complete, the 3rd is not yet.
    p.now = "2026-01-04T06:00:00Z".into();
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["intervals"], 2, "{v}");
    let mut w = waiting(&v);
    w.sort();
    assert_eq!(w, vec![("s.a".into(), "2026-01-03".into(), 1, "signal".into()), ("s.b".into(), "2026-01-03".into(), 1, "signal".into())]);
    for m in ["s.a", "s.b"] {
        assert_eq!(done(&p, "dev", m), days(&["2026-01-01", "2026-01-02"]), "{m}");
    }
    p.execute_on_engine("INSERT INTO raw.upstream VALUES ('2026-01-04')");
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!((v["intervals"].as_u64(), waiting(&v).len()), (Some(2), 0), "{v}");
    for m in ["s.a", "s.b"] {
        assert_eq!(done(&p, "dev", m), days(&["2026-01-01", "2026-01-02", "2026-01-03"]), "{m}");
    }
}

#[test]
fn bad_signal_uses_are_load_errors_at_the_use() {
    let p = project();
    p.write("macros/signals.lua", FILE_SIGNAL);
    p.write(
        "models/typo.lua",
        "define_model { name = \"s.typo\", kind = kind.incremental_by_time_range { time_column = \"d\", start = \"2026-01-01\" },\n  \
         signals = { \"file_exist\" }, schema = { { \"d\", \"date\" } }, query = \"SELECT CAST(@start AS DATE) AS d\" }\n",
    );
    p.write(
        "models/full.lua",
        "\ndefine_model { name = \"s.full\", kind = kind.full(), signals = { \"file_exists\" }, schema = { { \"d\", \"date\" } }, query = \"SELECT DATE '2026-01-01' AS d\" }\n",
    );
    p.write(
        "models/pos.sql",
        "-- name: s.pos\n-- kind: incremental_by_time_range(time_column = d, start = 2026-01-01, grain = day)\n-- schema: d date\n\
         -- signals: file_exists('landing')\nSELECT CAST(@start AS DATE) AS d\n",
    );
    p.write(
        "models/nameless.rhai",
        "define_model(#{ name: \"s.nameless\", kind: kind::incremental_by_time_range(#{ time_column: \"d\", start: \"2026-01-01\" }),\n  \
         signals: [#{ dir: \"x\" }], schema: [[\"d\", \"date\"]], query: \"SELECT CAST(@start AS DATE) AS d\" });\n",
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let e = &run.stderr;
    for needle in [
        "models/typo.lua:1",
        "unknown signal `file_exist`",
        "did you mean `file_exists`?",
        "models/full.lua:2",
        "`signals` are only supported on `incremental_by_time_range` models (this one is `full`)",
        "models/pos.sql:4",
        "signal `file_exists`: arguments are named",
        "models/nameless.rhai:1",
        "signal 1 must name its signal",
    ] {
        assert!(e.contains(needle), "stderr lacks {needle:?}:\n{e}");
    }
}

#[test]
fn an_unknown_signal_is_reported_with_the_other_load_errors_of_the_same_pass() {
    let p = project();
    p.write("macros/signals.lua", FILE_SIGNAL);
    // The same model: a description of a column it lacks and a misspelt signal, in each language.
    p.write(
        "models/both.lua",
        "define_model { name = \"s.both\", kind = kind.incremental_by_time_range { time_column = \"d\", start = \"2026-01-01\" },\n  \
         column_descriptions = { dd = \"The day\" },\n  signals = { { \"file_exist\", dir = \"x\" } }, schema = { { \"d\", \"date\" } }, query = \"SELECT CAST(@start AS DATE) AS d\" }\n",
    );
    p.write(
        "models/both.rhai",
        "define_model(#{ name: \"s.both_rhai\", kind: kind::incremental_by_time_range(#{ time_column: \"d\", start: \"2026-01-01\" }),\n  \
         column_descriptions: #{ dd: \"The day\" }, signals: [\"files_exists\"], schema: [[\"d\", \"date\"]], query: \"SELECT CAST(@start AS DATE) AS d\" });\n",
    );
    p.write(
        "models/both.sql",
        "-- name: s.both_sql\n-- kind: incremental_by_time_range(time_column = d, start = 2026-01-01, grain = day)\n-- schema: d date\n\
         -- column_descriptions: dd = 'The day'\n-- signals: file_exist(dir = 'x')\nSELECT CAST(@start AS DATE) AS d\n",
    );
    // Two models: one with a builder error only, the other with a misspelt signal only.
    p.write("models/bad.lua", "define_model { name = \"s.bad\", kind = kind.full(), column_descriptions = { nope = \"x\" }, schema = { { \"d\", \"date\" } }, query = \"SELECT DATE '2026-01-01' AS d\" }\n");
    p.write(
        "models/typo.sql",
        "-- name: s.typo\n-- kind: incremental_by_time_range(time_column = d, start = 2026-01-01, grain = day)\n-- schema: d date\n-- signals: fil_exists\nSELECT CAST(@start AS DATE) AS d\n",
    );
    for cmd in [&["check"][..], &["plan", "dev"]] {
        let run = p.run(cmd);
        run.expect_code(1);
        // `check` reports on stdout, `plan` on stderr.
        let e = &format!("{}{}", run.stdout, run.stderr);
        for needle in [
            "models/both.lua:1: model `s.both`: `column_descriptions`: the model has no column `dd`",
            "models/both.lua:1: model `s.both`: unknown signal `file_exist`",
            "models/both.rhai:1: model `s.both_rhai`: unknown signal `files_exists`",
            "models/both.sql:4: model `s.both_sql`: `column_descriptions`: the model has no column `dd`",
            "models/both.sql:5: model `s.both_sql`: unknown signal `file_exist`",
            "models/bad.lua:1: model `s.bad`: `column_descriptions`: the model has no column `nope`",
            "models/typo.sql:4: model `s.typo`: unknown signal `fil_exists`",
            "did you mean `file_exists`?",
        ] {
            assert!(e.contains(needle), "{cmd:?}: output lacks {needle:?}:\n{e}");
        }
        assert_eq!(e.matches("unknown signal").count(), 4, "{cmd:?}: each unknown signal once:\n{e}");
    }
}

fn a_failing_signal_fails_the_run_naming_it_and_computes_nothing(engine: EngineBackend) {
    let mut p = project_on(engine);
    let model = "define_model { name = \"s.m\", kind = kind.incremental_by_time_range { time_column = \"d\", start = \"2026-01-01\" },\n  \
                 signals = { \"check\" }, schema = { { \"d\", \"date\" } }, query = \"SELECT CAST(@start AS DATE) AS d\" }\n";
    p.write("models/m.lua", model);
    p.write("macros/check.lua", "define_signal(\"check\", function(intervals, args, db)\n  return true\nend)\n");
    p.execute_on_engine("CREATE SCHEMA raw; CREATE TABLE raw.keep (x INTEGER); INSERT INTO raw.keep VALUES (1)");
    p.now = "2026-01-02T06:00:00Z".into();
    p.apply("dev");
    p.now = "2026-01-04T06:00:00Z".into();
    let before = done(&p, "dev", "s.m");

    // A write through the query handle is refused: the run fails, nothing is computed or deleted.
    p.write("macros/check.lua", "define_signal(\"check\", function(intervals, args, db)\n  db.query(\"DELETE FROM raw.keep\")\n  return true\nend)\n");
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    for needle in ["signal `check` (macros/check.lua:1)", "model `s.m` (models/m.lua:1)", "refused a statement that is not a query", "nothing was computed"] {
        assert!(run.stderr.contains(needle), "stderr lacks {needle:?}:\n{}", run.stderr);
    }
    assert_eq!(p.query("SELECT count(*) FROM raw.keep"), vec![vec![Some("1".to_string())]]);
    assert_eq!(done(&p, "dev", "s.m"), before);

    // An error raised in the signal: its file:line.
    p.write("macros/check.lua", "define_signal(\"check\", function(intervals, args, db)\n  error(\"no landing zone\")\nend)\n");
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    for needle in ["signal `check`", "macros/check.lua:2", "no landing zone", "s.m"] {
        assert!(run.stderr.contains(needle), "stderr lacks {needle:?}:\n{}", run.stderr);
    }

    // An answer that is neither a boolean nor one boolean per interval.
    p.write("macros/check.lua", "define_signal(\"check\", function(intervals, args, db)\n  return { true }\nend)\n");
    let run = p.run(&["run", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("returned a list of 1 values for 2 intervals"), "{}", run.stderr);
    assert_eq!(done(&p, "dev", "s.m"), before);
    let ticks = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ticks["ticks"][0]["outcome"], "error");
}

/// `(day, n)` rows of `rel`, by day.
fn three(p: &Project, rel: &str) -> crate::common::Rows {
    p.rows(&format!("(SELECT CAST(d AS VARCHAR) AS d, n FROM {rel} ORDER BY d)"))
}

/// Auto-restatement and signals: the done intervals a run would restate are put to the signals
/// too; one not ready (its landing file archived) is left as it is — not recomputed from a
/// missing file, not waiting (its data is there), holding nothing downstream — while the rest of
/// the restated range is recomputed, and `autoRestated` reports only what was.
#[test]
fn a_done_interval_a_signal_says_is_not_ready_is_not_auto_restated_and_holds_nothing() {
    let mut p = project();
    let landing = landing_with_file_signal(&p);
    let dir = landing.display().to_string();
    p.write(
        "models/events.lua",
        &format!(
            r#"define_model {{
  name = "s.events",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day", batch_size = 1, auto_restatement_intervals = 2 }},
  schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(@start AS DATE) AS d, (SELECT count(*) FROM glob('{dir}/*.csv')) AS n",
  signals = {{ {{ "file_exists", dir = "{dir}" }} }},
}}
define_model {{
  name = "s.daily",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day" }},
  schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT d, CAST(sum(n) AS bigint) AS n FROM " .. ref("s.events") .. " WHERE d >= @start AND d < @end GROUP BY d",
}}
"#
        ),
    );
    for d in ["2026-01-01", "2026-01-02", "2026-01-03"] {
        p.write(&format!("landing/{d}.csv"), "x\n1\n");
    }
    p.now = "2026-01-04T06:00:00Z".into();
    p.apply("dev");
    assert_eq!(three(&p, &env_view("dev", "s.events")).iter().map(|r| r[1].clone().unwrap()).collect::<Vec<_>>(), ["3", "3", "3"]);

    // Day 2's file is archived; day 4's lands with one more: 3 files, then 4 with `extra`.
    std::fs::remove_file(landing.join("2026-01-02.csv")).unwrap();
    p.write("landing/2026-01-04.csv", "x\n1\n");
    p.write("landing/extra.csv", "x\n1\n");
    p.now = "2026-01-05T06:00:00Z".into();
    let v = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(waiting(&v), vec![], "a done interval a signal refuses does not wait: {v}");
    let restated = v["autoRestated"].as_array().expect("autoRestated");
    let events = restated.iter().find(|r| r["model"] == "s.events").unwrap_or_else(|| panic!("{v}"));
    assert_eq!((events["from"].as_str().map(|s| &s[..10]), events["intervals"].as_u64()), (Some("2026-01-03"), Some(1)), "{v}");
    for view in ["s.events", "s.daily"] {
        let got: Vec<(String, String)> =
            three(&p, &env_view("dev", view)).into_iter().map(|r| (r[0].as_deref().unwrap()[..10].to_string(), r[1].clone().unwrap())).collect();
        let want: Vec<(String, String)> =
            [("2026-01-01", "3"), ("2026-01-02", "3"), ("2026-01-03", "4"), ("2026-01-04", "4")].iter().map(|(d, n)| (d.to_string(), n.to_string())).collect();
        assert_eq!(got, want, "{view}: day 2 kept (its file is gone), day 3 restated, day 4 computed");
    }
}

#[test]
fn status_shows_a_held_interval_before_a_ready_one_as_waiting_not_as_a_gap_the_next_run_recomputes() {
    // The 3rd's file has not landed, the 4th's has: the run computes the 4th and holds the 3rd,
    // which lies before the newest done interval. `status` said "restated or failed: the next
    // run recomputes them" for it and showed the child late; both wait.
    let mut p = project();
    let landing = landing_with_file_signal(&p);
    let signals = format!("\n  signals = {{ {{ \"file_exists\", dir = \"{}\" }} }},", landing.display());
    p.write("models/events.lua", &events(&signals));
    p.write("landing/2026-01-01.csv", "x\n1\n");
    p.now = "2026-01-02T06:00:00Z".into();
    p.apply("dev");
    p.write("landing/2026-01-04.csv", "x\n1\n");
    p.now = "2026-01-05T06:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(0);
    assert!(done(&p, "dev", "s.events").contains("2026-01-04"), "the ready day is computed");
    let st = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    let events = lag(&st, "s.events");
    assert_eq!((events["gaps"].as_u64(), events["gapsWaiting"].as_u64(), events["waitingOn"].as_str()), (Some(0), Some(2), Some("signal")), "{st}");
    let daily = lag(&st, "s.daily");
    assert_eq!((daily["late"].as_bool(), daily["waitingOn"].as_str()), (Some(false), Some("s.events")), "{st}");
    let text = p.run(&["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("2 day interval(s) before 2026-01-05T00:00:00.000Z not done, waiting on its signals"), "{text}");
    assert!(!text.contains("the next run recomputes them"), "{text}");
}

/// A `lookback` recomputes the intervals before a missing one, an `auto_restatement_intervals`
/// those before the newest — *with* it. While it waits on its signal, a run recomputes neither
/// (each run would recompute them again until it lands, and rebuild every `full` model below).
#[test]
fn intervals_a_lookback_or_auto_restatement_adds_wait_with_the_missing_interval_they_accompany() {
    let mut p = project();
    let landing = landing_with_file_signal(&p);
    let dir = landing.display().to_string();
    p.write(
        "models/m.lua",
        &format!(
            r#"define_model {{ name = "a.src",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day", auto_restatement_intervals = 2 }},
  signals = {{ {{ "file_exists", dir = "{dir}" }} }}, schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(@start AS DATE) AS d, 1 AS n" }}
define_model {{ name = "a.lb",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day", lookback = 1 }},
  signals = {{ {{ "file_exists", dir = "{dir}" }} }}, schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(@start AS DATE) AS d, 1 AS n" }}
"#
        ),
    );
    for d in ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"] {
        p.write(&format!("landing/{d}.csv"), "x\n1\n");
    }
    p.now = "2026-01-05T06:00:00Z".into();
    p.apply("prod");
    // The 5th has not landed: two runs before it does compute nothing.
    p.now = "2026-01-06T06:00:00Z".into();
    for _ in 0..2 {
        let v = p.run(&["run", "prod", "--json"]).expect_code(0).json();
        assert_eq!((v["intervals"].as_u64(), v["autoRestated"].as_array().map(Vec::len)), (Some(0), Some(0)), "{v:#}");
        assert_eq!(waiting(&v).len(), 2, "{v:#}");
    }
    // It lands: the 5th with its companions (the 3rd and 4th restated, the 4th looked back at).
    p.write("landing/2026-01-05.csv", "x\n1\n");
    let v = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert_eq!(v["intervals"].as_u64(), Some(5), "{v:#}");
}

/// The restatement a model inherits from an ancestor's `auto_restatement_intervals` is not its
/// own companion: recomputed even while its own newest interval waits on its signal (the next
/// run would not restate the ancestor again, and it would keep the old rows for good).
#[test]
fn a_child_waiting_on_its_signal_still_recomputes_what_its_parents_auto_restatement_rewrote() {
    let mut p = project();
    let landing = landing_with_file_signal(&p);
    p.write("v.csv", "v\n1\n");
    let (dir, csv) = (landing.display().to_string(), p.root().join("v.csv").display().to_string());
    p.write(
        "models/m.lua",
        &format!(
            r#"define_model {{ name = "a.src",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day", batch_size = 1, auto_restatement_intervals = 2 }},
  schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(@start AS DATE) AS d, (SELECT max(v) FROM read_csv('{csv}')) AS n" }}
define_model {{ name = "a.child",
  kind = kind.incremental_by_time_range {{ time_column = "d", start = "2026-01-01", grain = "day" }},
  signals = {{ {{ "file_exists", dir = "{dir}" }} }}, schema = {{ {{ "d", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT d, CAST(sum(n) AS bigint) AS n FROM " .. ref("a.src") .. " WHERE d >= @start AND d < @end GROUP BY d" }}
"#
        ),
    );
    for d in ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"] {
        p.write(&format!("landing/{d}.csv"), "x\n1\n");
    }
    p.now = "2026-01-05T06:00:00Z".into();
    p.apply("prod");
    // The source changes; a day later `a.src` restates the 3rd and 4th, `a.child`'s 5th waits.
    p.write("v.csv", "v\n2\n");
    p.now = "2026-01-06T06:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    p.write("landing/2026-01-05.csv", "x\n1\n");
    p.run(&["run", "prod"]).expect_code(0);
    let child: Vec<String> = three(&p, &env_view("prod", "a.child")).into_iter().map(|r| r[1].clone().unwrap_or_default()).collect();
    assert_eq!(child, ["1", "1", "2", "2", "2"], "the 3rd and 4th follow the restated source");
}
