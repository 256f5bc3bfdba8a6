//! `efmesh watch <env> --json`: the binary in a subprocess on a temporary project, one JSON line
//! per re-plan read with a timeout (a reader thread and a channel), the child killed at the end.
//! Each test edits files the way a user does and checks the line that edit produced.

use crate::common::{EngineBackend, PG_ENGINE_URL_ENV, Project, Rows};
use crate::on_every_engine;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// How long to wait for one awaited line (never a timing assertion: only a bound on a hang).
const LINE_TIMEOUT: Duration = Duration::from_secs(10);

// Every test whose watch plans, previews or applies runs on DuckDB and on Postgres; the two
// refused before the watch reaches the engine (below) on DuckDB only.
on_every_engine!(
    an_edit_is_breaking_with_preview_rows_and_a_reformat_changes_nothing,
    a_ref_typo_is_an_error_at_its_file_and_line_and_the_watch_goes_on_until_fixed,
    a_project_that_cannot_load_at_start_still_starts_and_shows_its_errors,
    new_and_deleted_model_files_are_seen,
    an_editor_saving_by_rename_is_one_change,
    a_save_written_in_two_steps_is_one_line_and_a_rewrite_of_the_same_bytes_is_none,
    a_seed_csv_edit_is_a_new_version_of_the_seed,
    an_edit_in_a_file_reached_only_through_require_changes_its_importer,
    a_config_change_is_read_again,
    a_deleted_config_ends_the_watch_with_exit_1,
    apply_serves_the_new_data_in_dev_and_leaves_prod_untouched,
    test_flag_runs_the_unit_tests_of_the_changed_models,
    the_screen_quits_on_q_restores_the_terminal_and_respects_no_color,
    the_screen_draws_the_plan_before_the_preview,
    the_screen_of_watch_apply_is_not_written_over_by_log_lines,
    a_parent_column_renamed_under_a_child_is_a_check_error_of_the_child,
    preview_rows_0_turns_previews_off,
);

/// Two models: `raw.orders` (a full model over literal rows) and `mart.totals` over it, on
/// `engine`.
fn project(engine: EngineBackend) -> Project {
    let p = Project::on_engine(engine);
    p.write("models/raw/orders.lua", &orders("10"));
    p.write("models/mart/totals.lua", &totals("raw.orders"));
    p
}

/// `raw.orders` with the amount of order 2 given.
fn orders(amount2: &str) -> String {
    format!(
        "return define_model {{\n  name = \"raw.orders\",\n  kind = kind.full(),\n  schema = {{ {{ \"id\", \"integer\" }}, {{ \"amount\", \"integer\" }} }},\n  query = \"SELECT 1 AS id, 5 AS amount UNION ALL SELECT 2 AS id, {amount2} AS amount\",\n}}\n"
    )
}

/// `mart.totals`, reading the model named `parent`; its `ref` is on line 5.
fn totals(parent: &str) -> String {
    format!(
        "return define_model {{\n  name = \"mart.totals\",\n  kind = kind.full(),\n  schema = {{ {{ \"total\", \"bigint\" }} }},\n  query = \"SELECT CAST(sum(amount) AS BIGINT) AS total FROM \" .. ref(\"{parent}\"),\n}}\n"
    )
}

/// A running `efmesh watch … --json`, killed when dropped.
struct Watch {
    child: Child,
    lines: Receiver<String>,
    stderr: Receiver<String>,
    cmd: String,
}

impl Watch {
    /// Starts `efmesh watch <args>` (with `--json` and a short debounce) in `p`.
    fn start(p: &Project, args: &[&str]) -> Watch {
        Watch::start_debounced(p, args, "50")
    }

    /// [`Watch::start`] with `--debounce-ms debounce_ms`.
    fn start_debounced(p: &Project, args: &[&str], debounce_ms: &str) -> Watch {
        let mut all = vec!["watch"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--json", "--debounce-ms", debounce_ms]);
        let mut c = p.command(&all);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn efmesh watch");
        let (tx, lines) = channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr) = channel();
        let mut err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        Watch { child, lines, stderr, cmd: format!("efmesh {}", all.join(" ")) }
    }

    /// The next line, parsed; it must be one JSON object whose first key is `"apiVersion": 1`.
    #[track_caller]
    fn next(&mut self) -> Value {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                let first = v.as_object().and_then(|o| o.iter().next()).map(|(k, v)| (k.clone(), v.clone()));
                assert_eq!(first, Some(("apiVersion".to_string(), Value::from(1))), "first key of {line}");
                v
            }
            Err(RecvTimeoutError::Timeout) => {
                let stderr = self.kill_and_stderr();
                panic!("`{}`: no line within {LINE_TIMEOUT:?}; stderr:\n{stderr}", self.cmd)
            }
            Err(RecvTimeoutError::Disconnected) => {
                let stderr = self.kill_and_stderr();
                panic!("`{}` ended early; stderr:\n{stderr}", self.cmd)
            }
        }
    }

    /// The next line whose `changedFiles` lists `file` (lines for other changes, e.g. a
    /// directory created on the way, are skipped).
    #[track_caller]
    fn after(&mut self, file: &str) -> Value {
        loop {
            let v = self.next();
            if v["changedFiles"].as_array().is_some_and(|a| a.iter().any(|f| f == file)) && !read_between_truncation_and_write(&v, file) {
                return v;
            }
        }
    }

    /// The exit code once the process ends by itself.
    #[track_caller]
    fn exit_code(&mut self) -> i32 {
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code().unwrap_or(-1);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let stderr = self.kill_and_stderr();
        panic!("`{}` did not exit; stderr:\n{stderr}", self.cmd);
    }

    fn kill_and_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The plan entry of `model` in a watch line, if it has work.
fn entry<'a>(line: &'a Value, model: &str) -> Option<&'a Value> {
    line["plan"]["models"].as_array()?.iter().find(|m| m["model"] == model)
}

fn changed_models(line: &Value) -> Vec<String> {
    line["changedModels"].as_array().map(|a| a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect()).unwrap_or_default()
}

fn errors(line: &Value) -> &Vec<Value> {
    line["errors"].as_array().expect("errors array")
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

fn an_edit_is_breaking_with_preview_rows_and_a_reformat_changes_nothing(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert_eq!(start["event"], "start");
    assert_eq!(start["models"], 2);
    assert_eq!(start["plan"]["hasChanges"], false, "{start}");
    assert!(errors(&start).is_empty(), "{start}");

    p.write("models/raw/orders.lua", &orders("20"));
    let edit = w.after("models/raw/orders.lua");
    assert_eq!(edit["event"], "replan");
    assert_eq!(changed_models(&edit), ["raw.orders"], "{edit}");
    assert_eq!(entry(&edit, "raw.orders").expect("raw.orders in the plan")["change"], "breaking", "{edit}");
    assert_eq!(entry(&edit, "mart.totals").expect("mart.totals in the plan")["change"], "indirect", "{edit}");
    let previews = edit["previews"].as_array().expect("previews");
    assert_eq!(previews.len(), 1, "{edit}");
    let preview = &previews[0];
    assert_eq!(preview["model"], "raw.orders");
    assert_eq!(preview["error"], Value::Null, "{preview}");
    let mut rows: Vec<Vec<Value>> = serde_json::from_value(preview["rows"].clone()).expect("rows");
    assert_eq!(preview["comparison"]["added"], serde_json::json!([]), "{preview}");
    assert_eq!(preview["comparison"]["rowsNow"], 2, "{preview}");
    assert_eq!(preview["comparison"]["rowsNew"], 2, "{preview}");
    rows.sort_by_key(|r| r[0].to_string());
    assert_eq!(rows, [vec![Value::from("1"), Value::from("5")], vec![Value::from("2"), Value::from("20")]], "{preview}");
    // The line carries when the plan was ready (`planMs`); that the screen draws it before the
    // preview runs is `the_screen_draws_the_plan_before_the_preview`.
    assert!(edit["planMs"].as_f64().is_some() && edit["replanMs"].as_f64().is_some(), "{edit}");

    // Whitespace and keyword case only: the same version, so nothing changed since the last save.
    p.write("models/raw/orders.lua", &orders("20").replace("SELECT 1 AS id", "select  1  as id"));
    let reformat = w.after("models/raw/orders.lua");
    assert_eq!(reformat["event"], "replan");
    assert!(changed_models(&reformat).is_empty(), "{reformat}");
    assert!(reformat["previews"].as_array().expect("previews").is_empty(), "{reformat}");
    assert!(errors(&reformat).is_empty(), "{reformat}");
}

fn a_ref_typo_is_an_error_at_its_file_and_line_and_the_watch_goes_on_until_fixed(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    w.next();

    p.write("models/mart/totals.lua", &totals("raw.ordrs"));
    let typo = w.after("models/mart/totals.lua");
    assert_eq!(typo["plan"], Value::Null, "{typo}");
    let e = errors(&typo).first().unwrap_or_else(|| panic!("no error: {typo}"));
    assert_eq!(e["file"], "models/mart/totals.lua", "{typo}");
    assert_eq!(e["line"], 5, "{typo}");
    assert!(e["message"].as_str().is_some_and(|m| m.contains("raw.ordrs")), "{typo}");

    p.write("models/mart/totals.lua", &totals("raw.orders"));
    let fixed = w.after("models/mart/totals.lua");
    assert!(errors(&fixed).is_empty(), "{fixed}");
    assert_eq!(fixed["plan"]["hasChanges"], false, "{fixed}");
    // Back to the version of the last good plan: nothing changed since.
    assert!(changed_models(&fixed).is_empty(), "{fixed}");
}

fn a_project_that_cannot_load_at_start_still_starts_and_shows_its_errors(engine: EngineBackend) {
    let p = project(engine);
    p.write("models/mart/totals.lua", &totals("raw.ordrs"));
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert_eq!(start["event"], "start");
    assert_eq!(start["models"], Value::Null);
    assert_eq!(errors(&start)[0]["file"], "models/mart/totals.lua", "{start}");
    p.write("models/mart/totals.lua", &totals("raw.orders"));
    let fixed = w.after("models/mart/totals.lua");
    assert!(errors(&fixed).is_empty(), "{fixed}");
    assert_eq!(entry(&fixed, "mart.totals").expect("planned")["change"], "added", "{fixed}");
}

fn new_and_deleted_model_files_are_seen(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    w.next();

    let customers = "return define_model { name = \"raw.customers\", kind = kind.full(), schema = { { \"id\", \"integer\" } }, query = \"SELECT 1 AS id\" }\n";
    p.write("models/raw/customers.lua", customers);
    let added = w.after("models/raw/customers.lua");
    assert_eq!(changed_models(&added), ["raw.customers"], "{added}");
    assert_eq!(entry(&added, "raw.customers").expect("planned")["change"], "added", "{added}");
    assert_eq!(added["models"], 3);

    p.remove("models/raw/customers.lua");
    let deleted = w.after("models/raw/customers.lua");
    assert_eq!(changed_models(&deleted), ["raw.customers"], "{deleted}");
    assert!(entry(&deleted, "raw.customers").is_none(), "{deleted}");
    assert_eq!(deleted["models"], 2);

    // A model file in a directory created after the watch started.
    p.write("models/new/deep/extra.lua", &customers.replace("raw.customers", "raw.extra"));
    let nested = loop {
        let v = w.next();
        if changed_models(&v).iter().any(|m| m == "raw.extra") {
            break v;
        }
    };
    assert_eq!(entry(&nested, "raw.extra").expect("planned")["change"], "added", "{nested}");
}

fn an_editor_saving_by_rename_is_one_change(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    w.next();
    // Write a temporary file beside the model, then rename it over the model (atomic save).
    p.write("models/raw/.orders.lua.tmp", &orders("30"));
    fs_err::rename(p.root().join("models/raw/.orders.lua.tmp"), p.root().join("models/raw/orders.lua")).expect("rename");
    let saved = w.after("models/raw/orders.lua");
    assert_eq!(changed_models(&saved), ["raw.orders"], "{saved}");
    assert_eq!(entry(&saved, "raw.orders").expect("planned")["change"], "breaking", "{saved}");
    assert!(saved["changedFiles"].as_array().expect("files").iter().all(|f| !f.as_str().unwrap_or_default().contains(".tmp")), "{saved}");
}

/// The amount of order 2 in the preview rows of a line (the line's content names its edit).
fn previewed_amount(line: &Value) -> Option<String> {
    let rows = line["previews"].as_array()?.first()?["rows"].as_array()?;
    rows.iter().find(|r| r[0] == "2").and_then(|r| r[1].as_str()).map(str::to_string)
}

fn a_save_written_in_two_steps_is_one_line_and_a_rewrite_of_the_same_bytes_is_none(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    // A long debounce: the debouncer delivers each file event once it is that old, so the two
    // writes below (100 ms apart) arrive as two batches; the first batch already finds the
    // whole file (the second write is long done).
    let mut w = Watch::start_debounced(&p, &["dev"], "500");
    assert_eq!(w.next()["event"], "start");
    let path = p.root().join("models/raw/orders.lua");
    let text = orders("20");
    let (head, tail) = text.split_at(text.len() / 2);
    {
        let mut f = fs_err::OpenOptions::new().write(true).truncate(true).open(&path).expect("open");
        f.write_all(head.as_bytes()).expect("write");
        f.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(100));
        f.write_all(tail.as_bytes()).expect("write");
    }
    let saved = w.next();
    assert_eq!(saved["event"], "replan", "{saved}");
    assert_eq!(changed_models(&saved), ["raw.orders"], "{saved}");
    assert_eq!(previewed_amount(&saved).as_deref(), Some("20"), "{saved}");
    // The same bytes again (an editor saving an unmodified buffer), and a file efmesh writes
    // itself: no change, so no line.
    p.write("models/raw/orders.lua", &text);
    p.write(".efmesh/scratch", "efmesh's own files are never a change");
    // Past the debounce window, so these are a batch of their own.
    std::thread::sleep(Duration::from_millis(900));
    // The next line is the next edit's: nothing came in between.
    p.write("models/raw/orders.lua", &orders("30"));
    let next = w.next();
    assert_eq!(next["changedFiles"], serde_json::json!(["models/raw/orders.lua"]), "{next}");
    assert_eq!(changed_models(&next), ["raw.orders"], "a line after a save that changed nothing: {next}");
    assert_eq!(previewed_amount(&next).as_deref(), Some("30"), "{next}");
}

fn a_seed_csv_edit_is_a_new_version_of_the_seed(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("seeds/depts.csv", "code,beds\nER,32\n");
    p.write(
        "models/depts.lua",
        "return define_model { name = \"ref.depts\", kind = kind.seed { path = \"seeds/depts.csv\" }, schema = { { \"code\", \"varchar\" }, { \"beds\", \"integer\" } } }\n",
    );
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    w.next();
    p.write("seeds/depts.csv", "code,beds\nER,32\nICU,12\n");
    let line = w.after("seeds/depts.csv");
    assert_eq!(changed_models(&line), ["ref.depts"], "{line}");
    assert_eq!(entry(&line, "ref.depts").expect("planned")["change"], "breaking", "{line}");
}

fn an_edit_in_a_file_reached_only_through_require_changes_its_importer(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.write("lib/amounts.lua", "return { factor = 2 }\n");
    p.write(
        "models/scaled.lua",
        "local amounts = require(\"lib.amounts\")\nreturn define_model { name = \"m.scaled\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT \" .. amounts.factor .. \" AS x\" }\n",
    );
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert!(errors(&start).is_empty(), "{start}");
    p.write("lib/amounts.lua", "return { factor = 3 }\n");
    let line = w.after("lib/amounts.lua");
    assert_eq!(changed_models(&line), ["m.scaled"], "{line}");
    assert_eq!(entry(&line, "m.scaled").expect("planned")["change"], "breaking", "{line}");
}

fn a_config_change_is_read_again(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "extra/more.lua",
        "return define_model { name = \"x.more\", kind = kind.full(), schema = { { \"id\", \"integer\" } }, query = \"SELECT 1 AS id\" }\n",
    );
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert_eq!(start["models"], 2, "{start}");
    p.write("efmesh.toml", &p.config_with("").replace("[\"models/**/*.lua\"]", "[\"models/**/*.lua\", \"extra/**/*.lua\"]"));
    let line = w.after("efmesh.toml");
    assert_eq!(line["configChanged"], true, "{line}");
    assert_eq!(line["models"], 3, "{line}");
    assert_eq!(changed_models(&line), ["x.more"], "{line}");

    // An invalid configuration is reported and the previous one kept.
    p.write("efmesh.toml", "[project]\nmodels = 3\n");
    let bad = w.after("efmesh.toml");
    assert_eq!(bad["event"], "error", "{bad}");
    assert_eq!(errors(&bad)[0]["kind"], "config", "{bad}");
    // Named as the other files are, at the line TOML names.
    assert_eq!((errors(&bad)[0]["file"].as_str(), errors(&bad)[0]["line"].as_u64()), (Some("efmesh.toml"), Some(2)), "{bad}");
    assert_eq!(bad["fatal"], Value::Null, "{bad}");
}

fn a_deleted_config_ends_the_watch_with_exit_1(engine: EngineBackend) {
    let p = project(engine);
    let mut w = Watch::start(&p, &["dev"]);
    w.next();
    p.remove("efmesh.toml");
    let last = w.next();
    assert_eq!(last["fatal"], true, "{last}");
    assert!(errors(&last)[0]["message"].as_str().is_some_and(|m| m.contains("efmesh.toml") && m.contains("deleted")), "{last}");
    // A kind docs/watch.md lists: a failure of the watch itself.
    assert_eq!(errors(&last)[0]["kind"], "watch", "{last}");
    assert_eq!(last["error"]["kind"], "watch", "{last}");
    assert_eq!(w.exit_code(), 1);
}

fn apply_serves_the_new_data_in_dev_and_leaves_prod_untouched(engine: EngineBackend) {
    let p = project(engine);
    p.apply("prod");
    p.apply("dev");
    // An edit made before the watch starts is applied by the first plan.
    p.write("models/raw/orders.lua", &orders("20"));
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    assert_eq!(start["applied"]["ok"], true, "{start}");
    assert_eq!(p.rows("\"dev__mart\".\"totals\""), [vec![s("25")]]);

    p.write("models/raw/orders.lua", &orders("30"));
    let line = w.after("models/raw/orders.lua");
    let applied = &line["applied"];
    assert_eq!(applied["ok"], true, "{line}");
    assert_eq!(applied["promoted"], true, "{line}");
    let built: Vec<&str> = applied["built"].as_array().expect("built").iter().filter_map(Value::as_str).collect();
    assert_eq!(built, ["raw.orders", "mart.totals"], "{line}");
    // The watch holds no engine between saves: the file is readable now.
    let dev: Rows = p.rows("\"dev__mart\".\"totals\"");
    let prod: Rows = p.rows("\"mart\".\"totals\"");
    assert_eq!(dev, [vec![s("35")]]);
    assert_eq!(prod, [vec![s("15")]]);
    assert_eq!(p.plan("dev")["hasChanges"], false);
    assert_eq!(p.plan("prod")["hasChanges"], true);

    // A save that changes nothing applies nothing.
    p.write("models/raw/orders.lua", &format!("-- a comment\n{}", orders("30")));
    let noop = w.after("models/raw/orders.lua");
    assert_eq!(noop["applied"], Value::Null, "{noop}");
    assert!(changed_models(&noop).is_empty(), "{noop}");
}

#[test]
fn apply_to_prod_is_refused_at_start() {
    let p = project(EngineBackend::DuckDb);
    let mut w = Watch::start(&p, &["prod", "--apply"]);
    let line = w.next();
    assert_eq!(line["fatal"], true, "{line}");
    assert!(errors(&line)[0]["message"].as_str().is_some_and(|m| m.contains("refused for `prod`") && !m.contains("hint")), "{line}");
    // The hint is its own key in `errors[]`, as in `error`.
    assert!(errors(&line)[0]["hint"].as_str().is_some_and(|h| h.contains("watch another environment")), "{line}");
    assert_eq!(errors(&line)[0]["hint"], line["error"]["hint"], "{line}");
    assert_eq!(line["error"]["kind"], "usage", "{line}");
    assert_eq!(w.exit_code(), 1);
    assert!(!p.state_path().exists(), "nothing was written");
}

#[test]
fn an_invalid_config_at_start_is_a_fatal_error_line_of_kind_config() {
    let p = project(EngineBackend::DuckDb);
    p.write("efmesh.toml", "[project]\nmodels = 3\n");
    let mut w = Watch::start(&p, &["dev"]);
    let line = w.next();
    assert_eq!(line["fatal"], true, "{line}");
    assert_eq!(line["error"]["kind"], "config", "{line}");
    assert!(line["error"]["message"].as_str().is_some_and(|m| m.contains("efmesh.toml")), "{line}");
    assert_eq!(w.exit_code(), 1);
}

fn test_flag_runs_the_unit_tests_of_the_changed_models(engine: EngineBackend) {
    let p = project(engine);
    p.write(
        "tests/totals.lua",
        "define_test { name = \"totals_sum\", model = \"mart.totals\", inputs = { [\"raw.orders\"] = { { id = 1, amount = 2 }, { id = 2, amount = 3 } } }, expect = { { total = 5 } } }\n",
    );
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev", "--test"]);
    let start = w.next();
    assert_eq!(start["tests"], Value::Null, "{start}");
    // Double the total: the test of `mart.totals` now fails; `raw.orders` has no test.
    p.write("models/mart/totals.lua", &totals("raw.orders").replace("sum(amount)", "2 * sum(amount)"));
    let line = w.after("models/mart/totals.lua");
    let tests = line["tests"].as_array().unwrap_or_else(|| panic!("tests: {line}"));
    assert_eq!(tests.len(), 1, "{line}");
    assert_eq!(tests[0]["name"], "totals_sum");
    assert_eq!(tests[0]["status"], "failed", "{line}");
    p.write("models/raw/orders.lua", &orders("11"));
    let other = w.after("models/raw/orders.lua");
    assert_eq!(other["tests"], serde_json::json!([]), "no test of raw.orders: {other}");
}

/// `watch dev` at a pseudo-terminal (util-linux `script`) on an applied project on `engine`,
/// with `NO_COLOR`, and a channel of what it writes; `None` when `script` is not installed.
fn watch_at_a_terminal(engine: EngineBackend) -> Option<(Project, Child, Receiver<Vec<u8>>)> {
    watch_at_a_terminal_with(engine, "")
}

/// [`watch_at_a_terminal`] with `flags` after `watch dev`.
fn watch_at_a_terminal_with(engine: EngineBackend, flags: &str) -> Option<(Project, Child, Receiver<Vec<u8>>)> {
    Command::new("script").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().ok()?;
    let p = project(engine);
    p.apply("dev");
    let cmd = format!("{} --config efmesh.toml --now {} watch dev {flags}", crate::common::BIN, p.now);
    let mut script = Command::new("script");
    if let EngineBackend::Postgres(t) = &p.engine {
        script.env(PG_ENGINE_URL_ENV, &t.url);
    }
    let mut child = script
        .args(["-qfc", &cmd, "/dev/null"])
        .current_dir(p.root())
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .env_remove("EFMESH_NOW")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn script");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    Some((p, child, rx))
}

/// At a terminal (a pseudo-terminal from util-linux `script`, when installed): the screen is
/// drawn on the alternate screen, `q` quits with exit 0 and the terminal is restored; with
/// `NO_COLOR` no colour or style escape is written.
fn the_screen_quits_on_q_restores_the_terminal_and_respects_no_color(engine: EngineBackend) {
    let Some((_project, mut child, rx)) = watch_at_a_terminal(engine) else {
        eprintln!("skipped: no `script` to give the watch a terminal");
        return;
    };
    let mut screen = Vec::new();
    let has = |bytes: &[u8], needle: &str| String::from_utf8_lossy(bytes).contains(needle);
    while !has(&screen, "q quit") {
        match rx.recv_timeout(LINE_TIMEOUT) {
            Ok(chunk) => screen.extend(chunk),
            Err(_) => {
                let _ = child.kill();
                panic!("no screen within {LINE_TIMEOUT:?}: {}", String::from_utf8_lossy(&screen));
            }
        }
    }
    child.stdin.as_mut().expect("stdin").write_all(b"q").expect("send q");
    let status = child.wait().expect("wait");
    while let Ok(chunk) = rx.recv_timeout(Duration::from_secs(2)) {
        screen.extend(chunk);
    }
    let text = String::from_utf8_lossy(&screen).into_owned();
    assert!(status.success(), "exit {status:?}: {text}");
    assert!(text.contains("plan for `dev` (2 unchanged)"), "{text}");
    let enter = text.find("\u{1b}[?1049h").unwrap_or_else(|| panic!("no alternate screen: {text:?}"));
    let leave = text.rfind("\u{1b}[?1049l").unwrap_or_else(|| panic!("alternate screen never left: {text:?}"));
    assert!(enter < leave, "{text:?}");
    // SGR sequences (`ESC [ … m`) are colours and styles; cursor moves and clears are not.
    let sgr = text.split("\u{1b}[").skip(1).find(|rest| {
        rest.chars().take_while(|c| c.is_ascii_digit() || *c == ';').count() < rest.len()
            && rest.chars().find(|c| !(c.is_ascii_digit() || *c == ';')) == Some('m')
    });
    assert!(sgr.is_none(), "a colour escape with NO_COLOR set: {sgr:?}");
}

/// At a terminal, `--apply`'s builds are reported by the screen, not by info log lines written
/// over it (stderr shares the terminal).
fn the_screen_of_watch_apply_is_not_written_over_by_log_lines(engine: EngineBackend) {
    let Some((p, mut child, rx)) = watch_at_a_terminal_with(engine, "--apply") else {
        eprintln!("skipped: no `script` to give the watch a terminal");
        return;
    };
    let mut screen = Vec::new();
    let mut wait_for = |needle: &str, child: &mut Child| {
        while !String::from_utf8_lossy(&screen).contains(needle) {
            match rx.recv_timeout(LINE_TIMEOUT) {
                Ok(chunk) => screen.extend(chunk),
                Err(_) => {
                    let _ = child.kill();
                    panic!("no `{needle}` within {LINE_TIMEOUT:?}: {}", String::from_utf8_lossy(&screen));
                }
            }
        }
        String::from_utf8_lossy(&screen).into_owned()
    };
    wait_for("q quit", &mut child);
    p.write("models/raw/orders.lua", &orders("20"));
    let text = wait_for("; promoted", &mut child);
    child.stdin.as_mut().expect("stdin").write_all(b"q").expect("send q");
    assert!(child.wait().expect("wait").success(), "{text}");
    for log in ["build start", "build done", "builds planned", "INFO"] {
        assert!(!text.contains(log), "a log line on the screen ({log}): {text}");
    }
}

/// At a terminal, an edit that is previewed shows its plan first (saying the preview still
/// runs), then the screen with the preview.
fn the_screen_draws_the_plan_before_the_preview(engine: EngineBackend) {
    let Some((p, mut child, rx)) = watch_at_a_terminal(engine) else {
        eprintln!("skipped: no `script` to give the watch a terminal");
        return;
    };
    let mut screen = Vec::new();
    let wait_for = |screen: &mut Vec<u8>, needle: &str, child: &mut std::process::Child| {
        while !String::from_utf8_lossy(screen).contains(needle) {
            match rx.recv_timeout(LINE_TIMEOUT) {
                Ok(chunk) => screen.extend(chunk),
                Err(_) => {
                    let _ = child.kill();
                    panic!("no `{needle}` within {LINE_TIMEOUT:?}: {}", String::from_utf8_lossy(screen));
                }
            }
        }
    };
    wait_for(&mut screen, "q quit", &mut child);
    let started = screen.len();
    p.write("models/raw/orders.lua", &orders("20"));
    wait_for(&mut screen, "preview raw.orders", &mut child);
    child.stdin.as_mut().expect("stdin").write_all(b"q").expect("send q");
    let status = child.wait().expect("wait");
    let text = String::from_utf8_lossy(&screen[started..]).into_owned();
    assert!(status.success(), "exit {status:?}: {text}");
    let early = text.find("previewing 1 model …").unwrap_or_else(|| panic!("the plan was not drawn before the preview: {text}"));
    let plan = text.find("plan for `dev`").unwrap_or_else(|| panic!("no plan: {text}"));
    let preview = text.find("preview raw.orders").expect("waited for above");
    assert!(plan < early && early < preview, "{text}");
}

fn a_parent_column_renamed_under_a_child_is_a_check_error_of_the_child(engine: EngineBackend) {
    let p = project(engine);
    // A model whose audit (not query) reads `raw.orders.amount`.
    p.write(
        "models/mart/ids.lua",
        "return define_model {\n  name = \"mart.ids\",\n  kind = kind.full(),\n  schema = { { \"id\", \"integer\" } },\n  audits = { audit.relationships { column = \"id\", to = \"raw.orders\", field = \"amount\" } },\n  query = \"SELECT 5 AS id\",\n}\n",
    );
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    assert!(errors(&w.next()).is_empty());
    // `mart.totals` reads `amount`, which `raw.orders` no longer declares.
    p.write("models/raw/orders.lua", &orders("10").replace("\"amount\"", "\"amt\"").replace("AS amount", "AS amt"));
    let line = w.after("models/raw/orders.lua");
    let e = errors(&line).iter().find(|e| e["kind"] == "check" && e["model"] == "mart.totals").unwrap_or_else(|| panic!("no check error: {line}"));
    assert_eq!(e["file"], "models/mart/totals.lua", "{line}");
    assert!(e["message"].as_str().is_some_and(|m| m.contains("amount")), "{line}");
    let audit = errors(&line).iter().find(|e| e["kind"] == "check" && e["model"] == "mart.ids").unwrap_or_else(|| panic!("no audit error: {line}"));
    assert_eq!((audit["file"].as_str(), audit["line"].as_u64()), (Some("models/mart/ids.lua"), Some(5)), "{line}");
    assert!(audit["message"].as_str().is_some_and(|m| m.starts_with("audit `relationships(") && m.contains("`amount`")), "{line}");
    // The plan is still made: a check error is reported, not fatal.
    assert_eq!(entry(&line, "raw.orders").expect("planned")["change"], "breaking", "{line}");

    p.write("models/raw/orders.lua", &orders("10"));
    let fixed = w.after("models/raw/orders.lua");
    assert!(errors(&fixed).is_empty(), "{fixed}");
}

fn preview_rows_0_turns_previews_off(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev", "--preview-rows", "0"]);
    w.next();
    p.write("models/raw/orders.lua", &orders("20"));
    let line = w.after("models/raw/orders.lua");
    assert_eq!(changed_models(&line), ["raw.orders"], "{line}");
    assert!(line["previews"].as_array().expect("previews").is_empty(), "{line}");
}

/// A macro file is watched like an audit file: a save re-plans, and exactly the models whose
/// expanded SQL changed are changed.
#[test]
fn a_macro_file_edit_re_plans_its_callers() {
    let p = Project::new();
    p.write("macros/m.lua", "define_macro(\"scaled\", function(c) return c .. \" * 2\" end)\n");
    p.write(
        "models/a.lua",
        "return define_model { name = \"m.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT @scaled(3) AS x\" }\n",
    );
    p.write("models/b.lua", "return define_model { name = \"m.b\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 4 AS x\" }\n");
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert!(errors(&start).is_empty(), "{start}");
    p.write("macros/m.lua", "define_macro(\"scaled\", function(c) return c .. \" * 3\" end)\n");
    let line = w.after("macros/m.lua");
    assert_eq!(changed_models(&line), ["m.a"], "{line}");
    assert_eq!(entry(&line, "m.a").expect("planned")["change"], "breaking", "{line}");
}

#[test]
fn apply_renews_an_invalidated_environment_with_nothing_to_build() {
    let p = project(EngineBackend::DuckDb);
    p.apply("prod");
    p.apply("dev");
    p.run(&["invalidate", "dev"]).expect_code(0);
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    assert_eq!(start["plan"]["hasChanges"], false, "{start}");
    assert_eq!(start["applied"]["ok"], true, "renewed by a promotion of what it serves: {start}");
    drop(w);
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["expiry"]["expired"], false, "{status:#}");
}

#[test]
fn a_model_deleted_while_the_project_fails_to_load_leaves_no_check_error_behind() {
    let p = project(EngineBackend::DuckDb);
    p.write("models/mart/bad.lua", &totals("raw.orders").replace("mart.totals", "mart.bad").replace("sum(amount)", "sum(w)"));
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert!(errors(&start).iter().any(|e| e["file"] == "models/mart/bad.lua"), "the check error is shown: {start}");
    p.write("models/raw/orders.lua", "return define_model {\n");
    let broken = w.after("models/raw/orders.lua");
    assert_eq!(broken["models"], Value::Null, "{broken}");
    p.remove("models/mart/bad.lua");
    w.after("models/mart/bad.lua");
    p.write("models/raw/orders.lua", &orders("10"));
    let fixed = w.after("models/raw/orders.lua");
    assert!(errors(&fixed).is_empty(), "{fixed}");
}

#[test]
fn a_file_the_project_does_not_read_gets_no_line() {
    // `efmesh watch dev --json > watch.jsonl` in the project: the watch's own output file may be
    // a seed file to be, but once reloaded it is read by nothing: no line (each line would be
    // written to it, and seen again, without end).
    let p = project(EngineBackend::DuckDb);
    let mut w = Watch::start(&p, &["dev"]);
    w.next();
    p.write("watch.jsonl", "{\"apiVersion\": 1}\n");
    std::thread::sleep(Duration::from_millis(500));
    p.write("models/raw/orders.lua", &orders("20"));
    let line = w.next();
    assert_eq!(line["changedFiles"], serde_json::json!(["models/raw/orders.lua"]), "{line}");
    // Also while the project does not load (the reload then evaluates every file).
    p.write("models/raw/orders.lua", "return define_model {\n");
    let broken = w.next();
    assert_eq!(broken["changedFiles"], serde_json::json!(["models/raw/orders.lua"]), "{broken}");
    p.write("watch.jsonl", "{\"apiVersion\": 1}\n{\"apiVersion\": 1}\n");
    std::thread::sleep(Duration::from_millis(500));
    p.write("models/raw/orders.lua", &orders("30"));
    let fixed = w.next();
    assert_eq!(fixed["changedFiles"], serde_json::json!(["models/raw/orders.lua"]), "{fixed}");
}

#[test]
fn apply_still_applies_after_the_janitor_dropped_a_version() {
    // A janitor claim moves the plan state the watch keys its memo on, not the generation an
    // apply compares: the watch's plan must carry the latter (it refused every apply before).
    let p = project(EngineBackend::DuckDb);
    p.apply("dev");
    p.write("models/raw/orders.lua", &orders("20"));
    p.apply("dev");
    let dropped = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert!(dropped.to_string().contains("raw.orders"), "the janitor dropped the first version: {dropped:#}");
    p.write("models/raw/orders.lua", &orders("30"));
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    assert_eq!(start["applied"]["ok"], true, "{start}");
    assert_eq!(p.rows("\"dev__mart\".\"totals\""), [vec![s("35")]]);
    p.write("models/raw/orders.lua", &orders("40"));
    let line = w.after("models/raw/orders.lua");
    assert_eq!(line["applied"]["ok"], true, "{line}");
    assert_eq!(p.rows("\"dev__mart\".\"totals\""), [vec![s("45")]]);
}

#[test]
fn a_line_lists_the_models_rebuilt_downstream_of_new_intervals() {
    // `t.daily` (time-range) starts later, then earlier: the next plan backfills its older days
    // and `mart.sum` (full, over it) is rebuilt for them; the line says so, as `efmesh plan`.
    let mut p = Project::new();
    p.now = "2026-01-06T01:00:00Z".into();
    let daily = |start: &str| {
        format!(
            r#"define_model {{ name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "{start}" }},
  schema = {{ {{ "day", "date" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(d AS DATE) AS day, CAST(1 AS BIGINT) AS n FROM generate_series(DATE '2026-01-01', DATE '2026-01-05', INTERVAL 1 DAY) AS g(d) WHERE d BETWEEN @start_date AND @end_date" }}
define_model {{ name = "mart.sum", kind = kind.full(), schema = {{ {{ "n", "bigint" }} }}, query = "SELECT CAST(sum(n) AS BIGINT) AS n FROM " .. ref("t.daily") }}
"#
        )
    };
    p.write("models/m.lua", &daily("2026-01-03"));
    p.apply("dev");
    p.write("models/m.lua", &daily("2026-01-01"));
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    let also: Vec<&str> = start["plan"]["alsoWrites"].as_array().expect("alsoWrites").iter().filter_map(|a| a["model"].as_str()).collect();
    assert_eq!(also, ["mart.sum"], "{start}");
    assert_eq!(start["applied"]["ok"], true, "{start}");
    drop(w);
    assert_eq!(p.rows("\"dev__mart\".\"sum\""), [vec![s("5")]]);
}

/// A full model `x.<name>` selecting `n` as `v`.
fn linked_model(name: &str, n: &str) -> String {
    format!("return define_model {{ name = \"x.{name}\", kind = kind.full(), schema = {{ {{ \"v\", \"integer\" }} }}, query = \"SELECT {n} AS v\" }}\n")
}

#[test]
fn edits_behind_a_symlink_added_while_watching_are_re_planned_and_applied() {
    // A link made while the watch runs is never followed by the watcher, and inotify names a
    // directory by one path: the edits below are reported under the target's path (`shared/…`,
    // `src/…`), which no load read. They must re-plan the model they are, and `--apply` serve
    // the new value (the stale model was applied and promoted by the next unrelated save).
    let p = project(EngineBackend::DuckDb);
    p.write("shared/e.lua", &linked_model("e", "1"));
    p.write("src/d.lua", &linked_model("d", "1"));
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    assert!(errors(&start).is_empty(), "{start}");

    // A symlinked folder, then an edit through it.
    std::os::unix::fs::symlink("../shared", p.root().join("models/shared")).expect("symlink");
    let linked = w.after("models/shared");
    assert_eq!(changed_models(&linked), ["x.e"], "{linked}");
    assert_eq!(linked["applied"]["ok"], true, "{linked}");
    assert_eq!(p.rows("\"dev__x\".\"e\""), [vec![s("1")]]);
    p.write("models/shared/e.lua", &linked_model("e", "2"));
    let edit = w.after("models/shared/e.lua");
    assert_eq!(changed_models(&edit), ["x.e"], "{edit}");
    assert_eq!(entry(&edit, "x.e").expect("x.e in the plan")["change"], "breaking", "{edit}");
    assert_eq!(edit["applied"]["ok"], true, "{edit}");
    assert_eq!(p.rows("\"dev__x\".\"e\""), [vec![s("2")]], "dev serves what the file says");

    // A symlinked model file, then an edit of its target.
    std::os::unix::fs::symlink("../src/d.lua", p.root().join("models/d.lua")).expect("symlink");
    let added = w.after("models/d.lua");
    assert_eq!(changed_models(&added), ["x.d"], "{added}");
    assert_eq!(p.rows("\"dev__x\".\"d\""), [vec![s("1")]]);
    p.write("src/d.lua", &linked_model("d", "3"));
    let target = w.after("models/d.lua");
    assert_eq!(changed_models(&target), ["x.d"], "{target}");
    assert_eq!(target["applied"]["ok"], true, "{target}");
    assert_eq!(p.rows("\"dev__x\".\"d\""), [vec![s("3")]]);

    // An unrelated save changes only its own model.
    p.write("models/raw/orders.lua", &orders("20"));
    let other = w.after("models/raw/orders.lua");
    assert_eq!(changed_models(&other), ["raw.orders"], "{other}");
    drop(w);
    assert_eq!(p.rows("\"dev__x\".\"e\""), [vec![s("2")]]);
    assert_eq!(p.plan("dev")["hasChanges"], false, "the watch applied what `efmesh plan dev` plans");
}

#[test]
fn a_symlink_that_breaks_the_load_is_reported_and_what_the_project_read_stays_watched() {
    // A symlinked folder leading out of the project fails the load at discovery (its path
    // matches no glob and the failed load reads next to nothing): the failure is a line, and a
    // module the last good load required still re-plans.
    let p = Project::new();
    p.write("lib/helper.lua", "return { n = 2 }\n");
    p.write(
        "models/a.lua",
        "local h = require(\"lib.helper\")\nreturn define_model { name = \"s.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT \" .. h.n .. \" AS x\" }\n",
    );
    let outside = tempfile::tempdir().expect("tempdir");
    fs_err::write(outside.path().join("b.lua"), linked_model("b", "1")).expect("write");
    let mut w = Watch::start(&p, &["dev"]);
    let start = w.next();
    assert!(errors(&start).is_empty(), "{start}");

    std::os::unix::fs::symlink(outside.path(), p.root().join("models/linked")).expect("symlink");
    let broken = w.after("models/linked");
    assert_eq!(broken["models"], Value::Null, "{broken}");
    assert!(errors(&broken).iter().any(|e| e["kind"] == "load" && e["message"].as_str().is_some_and(|m| m.contains("outside the project"))), "{broken}");

    p.write("lib/helper.lua", "return { n = 3 }\n");
    let helper = w.after("lib/helper.lua");
    assert_eq!(helper["models"], Value::Null, "{helper}");
    assert!(!errors(&helper).is_empty(), "{helper}");

    // Removing the link (a path that matches no glob and is gone) loads the project again.
    fs_err::remove_file(p.root().join("models/linked")).expect("remove the link");
    let fixed = w.after("models/linked");
    assert!(errors(&fixed).is_empty(), "{fixed}");
    assert_eq!(fixed["models"], 1, "{fixed}");
    assert_eq!(entry(&fixed, "s.a").expect("s.a in the plan")["change"], "added", "{fixed}");
    drop(w);
    p.apply("dev");
    assert_eq!(p.rows("\"dev__s\".\"a\""), [vec![s("3")]], "the helper's edit made while the load failed");
}

/// `--debounce-ms 0` is refused (the file watcher would poll without pause: a core spinning
/// while idle), naming the option.
#[test]
fn a_debounce_of_zero_is_refused() {
    let p = Project::new();
    let run = p.run(&["watch", "dev", "--debounce-ms", "0"]);
    run.expect_code(1);
    assert!(run.stderr.contains("--debounce-ms"), "{}", run.stderr);
}

/// True when the line is the watch's re-plan of `file` read empty: the test's `write` truncates
/// the file then writes it, and a loaded machine can hold the test between the two for longer
/// than the debounce, so the watch reads (and reports, truthfully) an empty file that defines no
/// model; the write's own event brings the line the test waits for.
fn read_between_truncation_and_write(line: &Value, file: &str) -> bool {
    line["errors"]
        .as_array()
        .is_some_and(|errors| errors.iter().any(|e| e["file"] == file && e["message"].as_str().is_some_and(|m| m.starts_with("this file defines no model"))))
}

/// Replaces `rel` in `p` as an editor saving by rename does (a hidden temporary file renamed
/// over it): the watch never reads it half written.
fn replace(p: &Project, rel: &str, text: &str) {
    let path = p.root().join(rel);
    let tmp = path.with_file_name(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("file")));
    fs_err::write(&tmp, text).expect("write");
    fs_err::rename(&tmp, &path).expect("rename");
}

/// A seed `raw.codes` read from `path`, of `code` and `label`.
fn codes_seed(path: &str) -> String {
    format!(
        "return define_model {{ name = \"raw.codes\", kind = kind.seed {{ path = \"{path}\" }}, schema = {{ {{ \"code\", \"integer\" }}, {{ \"label\", \"varchar\" }} }} }}\n"
    )
}

/// A full model `name` selecting `code` and `label` from `parent`, with `extra` in its definition.
fn codes_child(name: &str, parent: &str, extra: &str) -> String {
    format!(
        "return define_model {{ name = \"{name}\", kind = kind.full(), {extra} schema = {{ {{ \"code\", \"integer\" }}, {{ \"label\", \"varchar\" }} }}, query = \"SELECT code, label FROM \" .. ref(\"{parent}\") }}\n"
    )
}

/// The models a line previews, in its order.
fn previewed(line: &Value) -> Vec<String> {
    line["previews"].as_array().map(|a| a.iter().filter_map(|p| p["model"].as_str().map(str::to_string)).collect()).unwrap_or_default()
}

#[test]
fn files_whose_names_start_with_the_engine_or_state_file_name_are_re_planned() {
    // The engine file `codes` beside a seed `codes.csv`, the state file `shop` beside a model
    // file `shop_orders.lua`: the user's files, not the databases' sidecars (`codes.wal`,
    // `shop-wal`). Each edit re-plans and is applied.
    let p = Project::new();
    let config = p
        .config_with("")
        .replace("path = \"efmesh.duckdb\"", "path = \"codes\"")
        .replace("path = \"efmesh.state.sqlite\"", "path = \"shop\"")
        .replace("[\"models/**/*.lua\"]", "[\"models/**/*.lua\", \"*.lua\"]");
    assert!(config.contains("\"codes\"") && config.contains("\"shop\""), "{config}");
    p.write("efmesh.toml", &config);
    p.write("codes.csv", "code,label\n1,a\n");
    p.write("models/codes.lua", &codes_seed("codes.csv"));
    p.write("shop_orders.lua", &codes_child("s.orders", "raw.codes", ""));
    p.apply("dev");
    assert!(p.root().join("codes").is_file() && p.root().join("shop").is_file(), "the databases are where the test says");
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    assert!(errors(&start).is_empty(), "{start}");
    assert_eq!(start["plan"]["hasChanges"], false, "{start}");

    replace(&p, "codes.csv", "code,label\n1,a\n2,b\n");
    let seed = w.after("codes.csv");
    assert_eq!(changed_models(&seed), ["raw.codes"], "{seed}");
    assert_eq!(entry(&seed, "raw.codes").expect("raw.codes in the plan")["change"], "breaking", "{seed}");
    assert_eq!(seed["applied"]["ok"], true, "{seed}");

    replace(&p, "shop_orders.lua", &codes_child("s.orders", "raw.codes", "").replace("SELECT code, label", "SELECT code, label || 'x' AS label"));
    let model = w.after("shop_orders.lua");
    assert_eq!(changed_models(&model), ["s.orders"], "{model}");
    assert_eq!(model["applied"]["ok"], true, "{model}");
    drop(w);
    assert_eq!(p.plan("dev")["hasChanges"], false, "the watch applied what `efmesh plan dev` plans");
}

#[test]
fn a_seed_kept_in_the_lake_directory_is_re_planned_and_the_lake_files_are_not() {
    // `[lake] path = "data"` with a seed at `data/codes.csv`: efmesh writes the lake's files
    // there (`s.a` is a parquet model), yet the seed is the user's and its edit re-plans.
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("\n[lake]\npath = \"data\"\n"));
    p.write("data/codes.csv", "code,label\n1,a\n");
    p.write("models/codes.lua", &codes_seed("data/codes.csv"));
    p.write("models/a.lua", &codes_child("s.a", "raw.codes", "target = \"parquet\","));
    p.apply("dev");
    assert!(p.root().join("data/s__a").is_dir(), "the lake is written in `data`");
    let mut w = Watch::start(&p, &["dev", "--apply"]);
    let start = w.next();
    assert!(errors(&start).is_empty(), "{start}");

    replace(&p, "data/codes.csv", "code,label\n1,a\n2,b\n");
    let edit = w.after("data/codes.csv");
    assert_eq!(changed_models(&edit), ["raw.codes"], "{edit}");
    assert_eq!(edit["applied"]["ok"], true, "{edit}");
    // At once: the files the apply just wrote in `data` (a new version of `s.a`) may come in the
    // same batch as this edit; they are efmesh's, never a changed file.
    replace(&p, "data/codes.csv", "code,label\n1,a\n2,b\n3,c\n");
    let next = w.next();
    assert_eq!(next["changedFiles"], serde_json::json!(["data/codes.csv"]), "{next}");
    assert_eq!(changed_models(&next), ["raw.codes"], "{next}");
    assert_eq!(next["applied"]["ok"], true, "{next}");
    drop(w);
    assert_eq!(p.plan("dev")["hasChanges"], false, "the watch applied what `efmesh plan dev` plans");
}

#[test]
fn changed_models_are_the_edited_ones_after_a_failed_load_as_after_an_edit() {
    // `raw.codes` (seed) → `s.a` → `s.b`. A seed edit changes the seed; its children are
    // re-versioned (indirect), not changed, and not previewed. The same after a load that failed
    // in between (the seed deleted, then written back edited): the models are compared with the
    // last successful re-plan, not with the failure.
    let p = Project::new();
    p.write("seeds/codes.csv", "code,label\n1,a\n");
    p.write("models/codes.lua", &codes_seed("seeds/codes.csv"));
    p.write("models/a.lua", &codes_child("s.a", "raw.codes", ""));
    p.write("models/b.lua", &codes_child("s.b", "s.a", ""));
    p.apply("dev");
    let mut w = Watch::start(&p, &["dev"]);
    assert!(errors(&w.next()).is_empty());

    replace(&p, "seeds/codes.csv", "code,label\n1,a\n2,b\n");
    let edit = w.after("seeds/codes.csv");
    assert_eq!(changed_models(&edit), ["raw.codes"], "{edit}");
    assert_eq!(previewed(&edit), ["raw.codes"], "{edit}");
    assert_eq!(entry(&edit, "s.b").expect("s.b in the plan")["change"], "indirect", "{edit}");

    p.remove("seeds/codes.csv");
    let failed = w.after("seeds/codes.csv");
    assert_eq!(failed["models"], Value::Null, "{failed}");
    assert!(changed_models(&failed).is_empty(), "{failed}");

    replace(&p, "seeds/codes.csv", "code,label\n1,a\n2,b\n3,c\n");
    let back = w.after("seeds/codes.csv");
    assert!(errors(&back).is_empty(), "{back}");
    assert_eq!(changed_models(&back), ["raw.codes"], "{back}");
    assert_eq!(previewed(&back), ["raw.codes"], "{back}");
    assert_eq!(entry(&back, "s.a").expect("s.a in the plan")["change"], "indirect", "{back}");

    // Written back as it was at the last successful re-plan: nothing changed since.
    p.remove("seeds/codes.csv");
    w.after("seeds/codes.csv");
    replace(&p, "seeds/codes.csv", "code,label\n1,a\n2,b\n3,c\n");
    let same = w.after("seeds/codes.csv");
    assert!(errors(&same).is_empty(), "{same}");
    assert!(changed_models(&same).is_empty(), "{same}");
    assert!(previewed(&same).is_empty(), "{same}");
}
