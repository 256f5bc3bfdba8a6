//! The Rhai host (issue #3): the same API as Lua with the same semantics (fingerprints equal to
//! the Lua twin, refs across languages, load errors with file:line), and a sandbox with one test
//! per threat: each asserts the error text and that loading fails in under two seconds.
//!
//! Public API only: `efmesh::project::Project::load`, `efmesh::plan::versions`.

use efmesh::config::Config;
use efmesh::core::{Fragment, LoadErrors, Model, ModelName, Node};
use efmesh::plan::versions;
use efmesh::project::Project;
use efmesh::sql::fingerprint::Fingerprint;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A temporary project holding `files` (the default discovery covers `.lua`, `.rhai`, `.sql`).
fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("efmesh-rhai-").tempdir().expect("temp dir");
    for (path, text) in files {
        write(dir.path(), path, text);
    }
    dir
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs_err::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs_err::write(p, text).expect("write");
}

fn load(dir: &tempfile::TempDir) -> Result<Project, LoadErrors> {
    Project::load(&Config::with_root(dir.path()))
}

#[track_caller]
fn load_ok(dir: &tempfile::TempDir) -> Project {
    load(dir).unwrap_or_else(|e| panic!("the project should load:\n{e}"))
}

/// Loads the project, expecting failure; returns the whole error text.
#[track_caller]
fn load_err(dir: &tempfile::TempDir) -> String {
    match load(dir) {
        Ok(p) => panic!("the project loaded, with models {:?}", p.dag.order()),
        Err(e) => e.to_string(),
    }
}

/// Loads the project, expecting failure; returns the errors.
#[track_caller]
fn load_errors(dir: &tempfile::TempDir) -> LoadErrors {
    match load(dir) {
        Ok(p) => panic!("the project loaded, with models {:?}", p.dag.order()),
        Err(e) => e,
    }
}

#[track_caller]
fn assert_has(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in:\n{text}");
    }
}

/// A project whose only file is `models/evil.rhai` holding `code`: the load must fail within two
/// seconds (the budget is 500 ms; the margin is for a loaded machine) with an error naming the
/// file and every needle. Returns the error text.
#[track_caller]
fn threat(code: &str, needles: &[&str]) -> String {
    let dir = project(&[("models/evil.rhai", code)]);
    let started = Instant::now();
    let result = load(&dir);
    let took = started.elapsed();
    let err = match result {
        Ok(_) => panic!("the threat loaded without error:\n{code}"),
        Err(e) => e.to_string(),
    };
    assert!(took < LIMIT, "loading took {took:?}:\n{err}");
    assert_has(&err, &["models/evil.rhai:"]);
    assert_has(&err, needles);
    err
}

fn name(s: &str) -> ModelName {
    ModelName::parse(s).expect("model name")
}

fn model<'a>(p: &'a Project, n: &str) -> &'a Model {
    p.dag.get(&name(n)).unwrap_or_else(|| panic!("no model `{n}` in {:?}", p.dag.order()))
}

fn parents(p: &Project, n: &str) -> Vec<String> {
    model(p, n).parents().iter().map(ToString::to_string).collect()
}

fn fingerprints(p: &Project) -> BTreeMap<ModelName, Fingerprint> {
    versions(p, &Default::default()).expect("versions").fingerprints
}

fn cols_nodes(body: &Fragment) -> Vec<Vec<String>> {
    body.nodes.iter().filter_map(|n| if let Node::Cols(c) = n { Some(c.columns.clone()) } else { None }).collect()
}

// ---------------------------------------------------------------------------------------------
// One semantics, two syntaxes

const LUA_MODELS: &str = r#"
define_model { name = "raw.events", kind = kind.external { path = "data/events.csv", null_markers = { "NA" } },
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "v", "double" } } }
define_model { name = "raw.accounts", kind = kind.external { table = "main.accounts" },
  schema = { { "id", "bigint" }, { "name", "varchar" } } }
define_model {
  name = "s.full", kind = kind.full(), grain = { "id" }, description = "accounts",
  schema = { { "id", "bigint" }, { "name", "varchar" } },
  query = "SELECT " .. cols("raw.accounts", "id", "name") .. " FROM " .. ref("raw.accounts"),
}
define_model { name = "s.view", kind = kind.view(), schema = { { "id", "bigint" }, { "v", "double" } },
  query = function() return "SELECT id, v FROM " .. ref("raw.events") .. " WHERE v > 0" end }
define_model { name = "s.embedded", kind = kind.embedded(), schema = { { "id", "bigint" } },
  query = "SELECT id FROM " .. ref("s.full") }
define_model {
  name = "s.inc",
  kind = kind.incremental_by_time_range { time_column = "t", start = "2026-01-01", grain = "day", batch_size = 7, lookback = 1 },
  schema = { { "id", "bigint" }, { "t", "timestamp" }, { "v", "double" } },
  query = "SELECT " .. cols("raw.events") .. " FROM " .. ref("raw.events") .. " WHERE t >= @start AND t < @end",
}
"#;

const RHAI_MODELS: &str = r#"
let events = define_model(#{ name: "raw.events", kind: kind::external(#{ path: "data/events.csv", null_markers: ["NA"] }),
  schema: [["id", "bigint"], ["t", "timestamp"], ["v", "double"]] });
let accounts = define_model(#{ name: "raw.accounts", kind: kind::external(#{ table: "main.accounts" }),
  schema: [["id", "bigint"], ["name", "varchar"]] });
let full = define_model(#{
  name: "s.full", kind: kind::full(), grain: ["id"], description: "accounts",
  schema: [["id", "bigint"], ["name", "varchar"]],
  query: `SELECT ${cols(accounts, "id", "name")} FROM ${ref(accounts)}`,
});
define_model(#{ name: "s.view", kind: kind::view(), schema: [["id", "bigint"], ["v", "double"]],
  query: || `SELECT id, v FROM ${ref("raw.events")} WHERE v > 0` });
define_model(#{ name: "s.embedded", kind: kind::embedded(), schema: [["id", "bigint"]],
  query: "SELECT id FROM " + ref(full) });
define_model(#{
  name: "s.inc",
  kind: kind::incremental_by_time_range(#{ time_column: "t", start: "2026-01-01", grain: "day", batch_size: 7, lookback: 1 }),
  schema: [["id", "bigint"], ["t", "timestamp"], ["v", "double"]],
  query: `SELECT ${cols(events)} FROM ${ref(events)} WHERE t >= @start AND t < @end`,
});
"#;

const EVENTS_CSV: &str = "id,t,v\n1,2026-01-01 10:00:00,1.5\n";

#[test]
fn rhai_models_fingerprint_like_their_lua_twins_for_every_kind() {
    let lua = project(&[("models/all.lua", LUA_MODELS), ("data/events.csv", EVENTS_CSV)]);
    let rhai = project(&[("models/all.rhai", RHAI_MODELS), ("data/events.csv", EVENTS_CSV)]);
    let (lua, rhai) = (load_ok(&lua), load_ok(&rhai));
    let (fl, fr) = (fingerprints(&lua), fingerprints(&rhai));
    assert_eq!(fl.len(), 6);
    assert_eq!(fl, fr, "the same models written in Lua and Rhai must fingerprint equal");
    for m in lua.dag.models() {
        let twin = model(&rhai, &m.name.to_string());
        assert_eq!((&twin.kind, &twin.schema, &twin.grain, &twin.description), (&m.kind, &m.schema, &m.grain, &m.description));
        assert_eq!(twin.location.file, Path::new("models/all.rhai"));
    }
    assert_eq!(parents(&rhai, "s.embedded"), ["s.full"]);
}

#[test]
fn rhai_refs_lua_and_lua_refs_rhai_by_name() {
    let dir = project(&[
        ("models/raw.lua", "define_model { name = \"raw.t\", kind = kind.external { table = \"main.t\" }, schema = { { \"id\", \"bigint\" } } }\n"),
        (
            "models/mid.rhai",
            "define_model(#{ name: \"s.mid\", kind: kind::view(), schema: [[\"id\", \"bigint\"]],\n  query: `SELECT ${cols(\"raw.t\", \"id\")} FROM ${ref(\"raw.t\")}` });\n",
        ),
        (
            "models/top.lua",
            "define_model { name = \"s.top\", kind = kind.full(), schema = { { \"id\", \"bigint\" } }, query = \"SELECT id FROM \" .. ref(\"s.mid\") }\n",
        ),
    ]);
    let p = load_ok(&dir);
    assert_eq!(parents(&p, "s.mid"), ["raw.t"]);
    assert_eq!(parents(&p, "s.top"), ["s.mid"]);
    assert_eq!(model(&p, "s.mid").location.to_string(), "models/mid.rhai:1");
}

#[test]
fn imports_share_handles_and_functions_and_run_each_file_once() {
    let dir = project(&[
        (
            "models/sources.rhai",
            "let raw = define_model(#{ name: \"raw.moves\", kind: kind::external(#{ table: \"main.moves\" }),\n  schema: [[\"case_id\", \"varchar\"], [\"dept\", \"varchar\"], [\"moved_at\", \"timestamptz\"]] });\nfn key_cols(h) { pick(h, \"case_id\") }\nprivate fn pick(h, c) { cols(h, c) }\n",
        ),
        (
            "models/med/stays.rhai",
            "import \"../sources\" as src;\nimport \"models/sources\" as again;\nlet m = src::raw;\ndefine_model(#{ name: \"med.stays\", kind: kind::full(), schema: [[\"case_id\", \"varchar\"], [\"dept\", \"varchar\"]],\n  query: `SELECT ${src::key_cols(m)}, dept FROM ${ref(again::raw)}` });\n",
        ),
    ]);
    let p = load_ok(&dir);
    assert_eq!(p.dag.len(), 2, "sources.rhai ran once although discovered and imported twice");
    assert_eq!(parents(&p, "med.stays"), ["raw.moves"]);
    let body = model(&p, "med.stays").body.as_ref().expect("body");
    assert_eq!(cols_nodes(body), [["case_id"]]);
    // The site of a `cols()` called inside an imported function is in the imported file.
    let site = body.nodes.iter().find_map(|n| if let Node::Cols(c) = n { Some(c.location.to_string()) } else { None });
    assert_eq!(site.as_deref(), Some("models/sources.rhai:4"));
    assert_eq!(model(&p, "med.stays").location.to_string(), "models/med/stays.rhai:4");
}

#[test]
fn cols_takes_names_arrays_or_nothing() {
    let twelve: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
    let schema = twelve.iter().map(|c| format!("[\"{c}\", \"int\"]")).collect::<Vec<_>>().join(", ");
    let args = twelve.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(", ");
    let code = format!(
        "let p = define_model(#{{ name: \"raw.p\", kind: kind::external(#{{ table: \"main.p\" }}), schema: [{schema}] }});\n\
         define_model(#{{ name: \"s.c\", kind: kind::full(), schema: [{schema}],\n\
           query: `SELECT ${{cols(p, {args})}}, ${{cols(p, [\"c1\", \"c2\"])}}, ${{cols(p)}} FROM ${{ref(p)}}` }});\n"
    );
    let dir = project(&[("models/c.rhai", &code)]);
    let p = load_ok(&dir);
    let got = cols_nodes(model(&p, "s.c").body.as_ref().expect("body"));
    assert_eq!(got, vec![twelve.clone(), vec!["c1".to_string(), "c2".to_string()], twelve]);
}

#[test]
fn same_files_give_the_same_models_and_fingerprints_run_after_run() {
    // Maps iterate in key order: a schema built from a map comes out sorted, every time.
    let code = "let types = #{ zeta: \"int\", alpha: \"varchar\", mid: \"double\" };\nlet schema = [];\nfor k in types.keys() { schema.push([k, types[k]]); }\n\
                define_model(#{ name: \"s.m\", kind: kind::full(), schema: schema, query: \"SELECT 1 AS alpha, 2.0 AS mid, 3 AS zeta\" });\n";
    let dir = project(&[("models/m.rhai", code), ("models/all.rhai", RHAI_MODELS), ("data/events.csv", EVENTS_CSV)]);
    let first = load_ok(&dir);
    let cols: Vec<&str> = model(&first, "s.m").schema.names().collect();
    assert_eq!(cols, ["alpha", "mid", "zeta"]);
    let fp = fingerprints(&first);
    for _ in 0..3 {
        let again = load_ok(&dir);
        assert_eq!(again.dag.order(), first.dag.order());
        assert_eq!(again.dag.models().cloned().collect::<Vec<_>>(), first.dag.models().cloned().collect::<Vec<_>>());
        assert_eq!(fingerprints(&again), fp);
    }
}

// ---------------------------------------------------------------------------------------------
// Load errors

#[test]
fn unknown_ref_names_file_line_and_suggests() {
    let dir = project(&[(
        "models/x.rhai",
        "define_model(#{ name: \"s.b\", kind: kind::view(), schema: [[\"n\", \"bigint\"]], query: \"SELECT 1 AS n\" });\n\n\
         define_model(#{ name: \"z.x\", kind: kind::full(), schema: [[\"n\", \"bigint\"]],\n  query: `SELECT count(*) AS n FROM ${ref(\"s.bb\")}` });\n",
    )]);
    assert_has(&load_err(&dir), &["models/x.rhai:4", "unknown ref `s.bb`", "did you mean `s.b`?"]);
}

#[test]
fn cols_naming_an_undeclared_column_names_both() {
    let dir = project(&[(
        "models/x.rhai",
        "let a = define_model(#{ name: \"s.a\", kind: kind::view(), schema: [[\"id\", \"int\"], [\"label\", \"varchar\"]], query: \"SELECT 1 AS id, 'x' AS label\" });\n\
         define_model(#{ name: \"z.x\", kind: kind::full(), schema: [[\"id\", \"int\"]],\n  query: `SELECT ${cols(a, \"id\", \"lable\")} FROM ${ref(a)}` });\n",
    )]);
    assert_has(&load_err(&dir), &["models/x.rhai:3", "column `lable` is not declared by parent `s.a`", "did you mean `label`?"]);
}

#[test]
fn invalid_specs_are_all_reported_and_evaluation_goes_on() {
    let dir = project(&[(
        "models/x.rhai",
        "define_model(#{ name: \"s.a\", kind: kind::full(), schema: [[\"id\", \"int\"]], query: \"SELECT 1 AS id\", grian: [\"id\"] });\n\
         define_model(#{ name: \"s.b\", kind: kind::incremental_by_time_range(#{ time_column: \"t\", start: \"2026-01-01\", batchsize: 3 }),\n  schema: [[\"t\", \"date\"]], query: \"SELECT @start AS t\" });\n\
         define_model(#{ name: \"bad-name\", kind: kind::view(), schema: [], query: \"SELECT 1\" });\n",
    )]);
    assert_has(
        &load_err(&dir),
        &[
            "models/x.rhai:1: model `s.a`: unknown field `grian` in `define_model`",
            "did you mean `grain`?",
            "models/x.rhai:2: model `s.b`: unknown option `batchsize` for kind `incremental_by_time_range` (did you mean `batch_size`?)",
            "models/x.rhai:4: invalid model name `bad-name`",
        ],
    );
}

#[test]
fn script_errors_carry_line_column_and_the_call_stack() {
    let dir = project(&[
        ("models/lib.rhai", "fn make(n) {\n  if n > 1 { throw `no regions for ${n} markets`; }\n  n\n}\n"),
        ("models/x.rhai", "import \"lib\" as lib;\nlet ok = lib::make(1);\nlet bad = lib::make(2);\n"),
    ]);
    let errors = load_errors(&dir);
    let text = errors.to_string();
    assert_has(&text, &["models/x.rhai:3: no regions for 2 markets"]);
    // The call stack, innermost first, is the error's traceback (`check --json`'s `"traceback"`,
    // the debug log), not part of its message: the report has one line per error.
    let e = errors.0.iter().find(|e| e.message.starts_with("no regions for 2 markets")).unwrap_or_else(|| panic!("{text}"));
    let traceback = e.traceback.as_deref().unwrap_or_default();
    assert_has(traceback, &["at models/lib.rhai:2:14 in `make`", "at models/x.rhai:3:"]);
    assert!(traceback.find("models/lib.rhai:2:14") < traceback.find("models/x.rhai:3:"), "{traceback}");
    assert!(!text.contains("at models/"), "{text}");
}

/// A closure converted to text prints `Fn(anon$<hash>)`, the hash different in every process
/// (SQL built from it would get a new fingerprint with no edit): refused naming file:line, however
/// it is converted — `${…}` of it or of a map or array holding it, `+`, `to_string`, its `name`, a
/// map's `to_json()` (also past 64 levels of nesting, which are not looked into) — and no hash
/// reaches the report.
#[test]
fn a_closure_converted_to_text_is_refused_with_file_and_line() {
    let ok = "define_model(#{ name: \"a.ok\", kind: kind::full(), schema: [[\"x\", \"integer\"]], query: \"SELECT 1 AS x\" });";
    for (code, line) in [
        ("let f = |x| x;\nlet s = `${f}`;", 2),
        ("let rules = #{ name: \"upper\", f: |x| x.to_upper() };\n\nlet s = `SELECT '${rules}'`;", 3),
        ("let f = |x| x;\nlet s = `${[1, f]}`;", 2),
        ("let f = |x| x;\nlet s = \"a\" + f;", 2),
        ("let f = |x| x;\nlet s = f.to_string();", 2),
        ("let f = |x| x;\nlet s = f.name;", 2),
        ("let m = #{ rules: [|x| x] };\nlet s = m.to_json();", 2),
        // Deeper than the 64 levels `to_json()` looks into: refused, not written with its hash.
        ("let m = #{ f: |x| x };\nfor i in 0..80 { m = #{ inner: m }; }\nlet s = m.to_json();", 3),
    ] {
        let expected = format!("models/evil.rhai:{line}: a closure converted to text");
        let err = threat(&format!("{code}\n{ok}\n"), &[expected.as_str()]);
        assert!(!err.replace("anon$<hash>", "").contains("anon$"), "a closure's hash reached the report:\n{err}");
    }
}

/// `print` and `debug` of a closure, or of an array or map holding one, write `Fn(closure)` to the
/// log (never to SQL) and are not refused; a named function pointer is allowed everywhere, its
/// text (`Fn(upper)`, its `name` `upper`) the same in every process, also in the model's SQL.
#[test]
fn printing_a_closure_and_named_function_pointers_are_allowed() {
    let code = r#"fn upper(x) { x.to_upper() }
let f = |x| x;
let cfg = #{ name: "upper", f: f, list: [f] };
print(cfg);
debug(cfg);
print(f);
debug([f]);
let g = Fn("upper");
let s = `${g}|${g.name}|${#{ g: g }}|${[g]}|` + g + "|" + g.to_string();
define_model(#{ name: "a.m", kind: kind::full(), schema: [["s", "varchar"]], query: `SELECT '${s}' AS s` });
"#;
    let p = project_of(&[("models/m.rhai", code)]);
    let (run, took) = run_bounded(&p, &["render", "a.m"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(took < LIMIT, "took {took:?}");
    // The log's own quoting aside: the map's closure, its list's, `print(f)`'s and `debug([f])`'s.
    assert!(run.stderr.matches("Fn(closure)").count() >= 6, "{}", run.stderr);
    assert_has(&run.stderr, &["[Fn(closure)]"]);
    assert!(!run.stderr.contains("anon$"), "a closure's hash was printed:\n{}", run.stderr);
    assert_has(&run.stdout, &[r#"SELECT 'Fn(upper)|upper|#{"g": Fn(upper)}|[Fn(upper)]|Fn(upper)|Fn(upper)' AS s"#]);
}

/// A closure converted to text inside a Rhai macro or audit body is refused too, although
/// efmesh runs them in an interpreter of their own when a `.sql`, Lua or Rhai model calls them
/// (the refusal was recorded there and dropped: `check` passed and the SQL held `Fn(closure)`):
/// every model using them fails to load, and the error names the definition file's line.
#[test]
fn a_closure_converted_to_text_in_a_macro_or_an_audit_body_fails_its_users() {
    let macros = ("macros/m.rhai", "let rules = #{ f: |x| x };\ndefine_macro(\"rule_text\", |c| `'${rules}'`);\n");
    let audits = (
        "audits/a.rhai",
        "let rules = #{ f: |x| x };\ndefine_audit(#{ name: \"ruled\", params: [\"column\"],\n  query: |rel, args| `SELECT * FROM ${rel} WHERE ${args.column} = '${rules}'` });\n",
    );
    let dir = project(&[
        macros,
        ("models/s.sql", "-- name: r.s\n-- kind: full\n-- schema: s varchar\nSELECT @rule_text(x) AS s\n"),
        ("models/l.lua", "define_model { name = \"r.l\", kind = kind.full(), schema = {{\"s\",\"varchar\"}}, query = \"SELECT @rule_text(x) AS s\" }\n"),
        ("models/r.rhai", "define_model(#{ name: \"r.r\", kind: kind::full(), schema: [[\"s\",\"varchar\"]], query: \"SELECT @rule_text(x) AS s\" });\n"),
    ]);
    let err = load_err(&dir);
    for model in ["models/s.sql:", "models/l.lua:1:", "models/r.rhai:1:"] {
        assert!(
            err.lines().any(|l| l.starts_with(model) && l.contains("macro `@rule_text` failed: macros/m.rhai:2: a closure converted to text")),
            "{model} is not refused:\n{err}"
        );
    }
    assert!(!err.replace("anon$<hash>", "").contains("anon$") && !err.contains("Fn(closure)"), "{err}");
    // A Lua model using a Rhai audit (rendered by the Rhai definition interpreter), and a Rhai
    // model using it (rendered in the model's own interpreter): the file of the body is named.
    let dir = project(&[
        audits,
        (
            "models/l.lua",
            "define_model { name = \"r.l\", kind = kind.full(), schema = {{\"s\",\"varchar\"}}, query = \"SELECT 'a' AS s\",\n  audits = { audit.ruled(\"s\") } }\n",
        ),
    ]);
    let err = load_err(&dir);
    assert!(
        err.lines()
            .any(|l| l.starts_with("models/l.lua:") && l.contains("audit `ruled` failed to render its SQL: audits/a.rhai:3: a closure converted to text")),
        "the Lua model's use is not refused:\n{err}"
    );
    let dir = project(&[
        audits,
        (
            "models/r.rhai",
            "define_model(#{ name: \"r.r\", kind: kind::full(), schema: [[\"s\",\"varchar\"]], query: \"SELECT 'a' AS s\",\n  audits: [audit(\"ruled\", \"s\")] });\n",
        ),
    ]);
    let err = load_err(&dir);
    assert!(err.lines().any(|l| l.starts_with("audits/a.rhai:3: a closure converted to text")), "the body's file is not named:\n{err}");
}

/// A closure's `anon$<hash>` name reaching SQL by a route no conversion sees — the message of a
/// caught error naming the closure (`Function not found: anon$… (i64, i64)`) — is refused as a
/// catch-all: in a Rhai model's query at its `define_model`, in a Rhai macro's answer at its
/// call, in a Rhai audit body's SQL at its use; no hash reaches the report.
#[test]
fn a_closures_name_reaching_sql_through_a_caught_error_is_refused() {
    let caught = "let f = |x| x;\nlet msg = \"\";\ntry { f.call(1, 2); } catch (e) { msg = e.message; }\n";
    let err = threat(
        &format!("{caught}define_model(#{{ name: \"r.c\", kind: kind::full(), schema: [[\"s\", \"varchar\"]], query: `SELECT '${{msg}}' AS s` }});\n"),
        &["models/evil.rhai:4: model `r.c`: its query holds `anon$<hash>`"],
    );
    assert!(!err.replace("anon$<hash>", "").contains("anon$"), "a closure's hash reached the report:\n{err}");
    let body = "let f = |x| x; let msg = \"\"; try { f.call(1, 2); } catch (e) { msg = e.message; }";
    let macro_file = format!("define_macro(\"caught\", |c| {{ {body} `'${{msg}}'` }});\n");
    let audit_file = format!(
        "define_audit(#{{ name: \"caught\", params: [\"column\"], query: |rel, args| {{ {body} `SELECT * FROM ${{rel}} WHERE ${{args.column}} = '${{msg}}'` }} }});\n"
    );
    let dir = project(&[
        ("macros/m.rhai", macro_file.as_str()),
        ("audits/a.rhai", audit_file.as_str()),
        ("models/s.sql", "-- name: r.s\n-- kind: full\n-- schema: s varchar\nSELECT @caught(x) AS s\n"),
        (
            "models/l.lua",
            "define_model { name = \"r.l\", kind = kind.full(), schema = {{\"s\",\"varchar\"}}, query = \"SELECT 'a' AS s\",\n  audits = { audit.caught(\"s\") } }\n",
        ),
    ]);
    let err = load_err(&dir);
    let line_of = |file: &str, text: &str| err.lines().any(|l| l.starts_with(file) && l.contains(text));
    assert!(line_of("models/s.sql:", "macro `@caught` (macros/m.rhai:1) returned SQL holding `anon$<hash>`"), "{err}");
    assert!(line_of("models/l.lua:", "audit `caught` failed to render its SQL: its SQL holds `anon$<hash>`"), "{err}");
    assert!(!err.replace("anon$<hash>", "").contains("anon$"), "a closure's hash reached the report:\n{err}");
}

#[test]
fn syntax_error_has_line_and_column() {
    let dir = project(&[("models/x.rhai", "define_model(#{\n  name: \"z.x\",\n  kind: kind::full()\n  schema: [],\n});\n")]);
    let errors = load_errors(&dir);
    assert_has(&errors.to_string(), &["models/x.rhai:4: syntax error"]);
    // The column is in the traceback, not the message.
    let e = errors.0.iter().find(|e| e.message.starts_with("syntax error")).unwrap_or_else(|| panic!("{errors}"));
    assert_has(e.traceback.as_deref().unwrap_or_default(), &["at models/x.rhai:4:3"]);
    assert!(!e.message.contains('\n'), "{:?}", e.message);
}

#[test]
fn unknown_variable_is_caught_before_running() {
    let dir = project(&[("models/x.rhai", "let moves = ref(\"a.b\");\nlet q = `SELECT * FROM ${mvoes}`;\n")]);
    assert_has(&load_err(&dir), &["models/x.rhai:2: unknown variable `mvoes`", "hint:"]);
}

#[test]
fn import_of_a_missing_file_is_a_clear_error() {
    let dir = project(&[("models/med/x.rhai", "\nimport \"sources\" as src;\n")]);
    assert_has(&load_err(&dir), &["models/med/x.rhai:2: `import \"sources\"`: no file `models/med/sources.rhai` or `sources.rhai` in the project"]);
}

#[test]
fn import_cycle_is_a_clear_error() {
    let dir = project(&[("models/a.rhai", "import \"b\" as b;\n"), ("models/b.rhai", "\nimport \"a\" as a;\n")]);
    assert_has(
        &load_err(&dir),
        &[
            "models/b.rhai:2: `import \"a\"`: import cycle: `models/a.rhai` → `models/b.rhai` → `models/a.rhai`",
            "models/a.rhai:1: `import \"b\"`: `models/b.rhai` failed to load (see its error)",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Sandbox: one test per threat, each failing the load within one second

#[test]
fn infinite_loop_is_stopped() {
    threat("let n = 0;\nloop { n += 1; }\n", &["models/evil.rhai:2", "infinite loop?"]);
}

#[test]
fn slow_operations_are_stopped_by_the_wall_clock() {
    // Few operations, each expensive: only the wall-clock budget catches this.
    threat("let a = [];\na.pad(90000, \"some text\");\nloop { let b = a; b.reverse(); }\n", &["evaluation exceeded its budget of 500 ms (infinite loop?)"]);
}

#[test]
fn array_memory_bomb_is_stopped() {
    threat("let a = [0];\nloop { a += a; }\n", &["models/evil.rhai:2", "an array exceeded the sandbox limit of 100000 elements"]);
}

#[test]
fn array_preallocation_bomb_is_stopped() {
    threat("let a = [];\na.pad(1000000000, 0);\n", &["models/evil.rhai:2", "an array exceeded the sandbox limit"]);
}

#[test]
fn map_memory_bomb_is_stopped() {
    // Doubling: the map limit stops it in a few milliseconds — unless the machine is so loaded
    // (a CI run's parallel tests on 2 cores) that the wall-clock budget fires first. Either
    // stops it at the line.
    let err = threat("let m = #{ a: 1 };\nloop { m = #{ x: m, y: m }; }\n", &["models/evil.rhai:2"]);
    assert!(
        err.contains("a map exceeded the sandbox limit of 100000 entries") || err.contains("evaluation exceeded its budget of 500 ms"),
        "stopped by neither the map limit nor the budget:\n{err}"
    );
    // One key at a time: the size checks grow with the map, so the clock or the limit stops it.
    threat("let m = #{};\nlet i = 0;\nloop { m[`k${i}`] = i; i += 1; }\n", &["models/evil.rhai:3", "exceeded"]);
}

#[test]
fn closure_memory_bomb_is_stopped() {
    // Values captured by closures or curried into function pointers escape Rhai's size limits;
    // the resident-memory cap (or the clock) stops them.
    for keep in ["fs.push(|| s);", "fs.push(Fn(\"f\").curry(s));"] {
        let code = format!("let big = \"x\";\nbig.pad(1000000, \"y\");\nlet fs = [];\nlet i = 0;\nloop {{ let s = big + i; {keep} i += 1; }}\n");
        threat(&code, &["models/evil.rhai:5", "exceeded"]);
    }
}

#[test]
fn nested_data_bomb_is_stopped() {
    threat("let a = [];\nloop { a = [a, a]; }\n", &["models/evil.rhai:2", "exceeded"]);
}

#[test]
fn gigantic_string_is_stopped() {
    threat("let s = \"xxxxxxxx\";\nloop { s += s; }\n", &["models/evil.rhai:2", "a string exceeded the sandbox limit of 1048576 bytes"]);
}

#[test]
fn gigantic_string_literal_is_refused() {
    let code = format!("let s = \"{}\";\n", "x".repeat(2 << 20));
    threat(&code, &["models/evil.rhai:1", "exceeds the sandbox limit"]);
}

#[test]
fn gigantic_file_is_refused() {
    let code = format!("// {}\n", "x".repeat(5 << 20));
    threat(&code, &["a `.rhai` file may have at most 4194304"]);
}

#[test]
fn deep_recursion_is_stopped() {
    threat("fn down(n) { down(n + 1) }\ndown(0);\n", &["models/evil.rhai:2", "call depth exceeded 64 levels", "hint: look for a function that calls itself"]);
}

#[test]
fn deeply_nested_expression_is_refused() {
    let code = format!("let x = {}1{};\n", "(".repeat(100_000), ")".repeat(100_000));
    threat(&code, &["models/evil.rhai:1", "nested too deeply"]);
}

#[test]
fn no_clock() {
    threat("let t = timestamp();\n", &["models/evil.rhai:1", "unknown function `timestamp", "sandboxed"]);
    threat("sleep(10);\n", &["models/evil.rhai:1", "`sleep` is not available", "sandboxed"]);
    threat("sleep(0.5);\n", &["models/evil.rhai:1", "`sleep` is not available", "sandboxed"]);
    threat("let f = Fn(\"sleep\");\nf.call(3);\n", &["models/evil.rhai:2", "`sleep` is not available"]);
}

#[test]
fn no_eval() {
    threat("let x = eval(\"40 + 2\");\n", &["models/evil.rhai:1", "`eval` is disabled"]);
}

#[test]
fn no_file_access_through_import() {
    threat("import \"/etc/passwd\" as p;\n", &["models/evil.rhai:1", "not absolute paths"]);
    threat("import \"../../../../etc/hosts.rhai\" as p;\n", &["models/evil.rhai:1", "leaves the project"]);
    threat("import \"data.csv\" as p;\n", &["models/evil.rhai:1", "efmesh imports `.rhai` files only"]);
}

#[cfg(unix)]
#[test]
fn no_import_through_a_symlink_leaving_the_project() {
    let outside = tempfile::tempdir().expect("temp dir");
    write(outside.path(), "secret.rhai", "let secret = 42;\n");
    let dir = project(&[("models/evil.rhai", "import \"lib/link\" as l;\n")]);
    fs_err::create_dir_all(dir.path().join("lib")).expect("mkdir");
    std::os::unix::fs::symlink(outside.path().join("secret.rhai"), dir.path().join("lib/link.rhai")).expect("symlink");
    let started = Instant::now();
    let err = load_err(&dir);
    assert!(started.elapsed() < LIMIT);
    assert_has(&err, &["models/evil.rhai:1", "`lib/link.rhai` resolves outside the project"]);
}

#[test]
fn no_process_file_or_random_functions() {
    for f in ["open_file(\"x\")", "system(\"ls\")", "rand()"] {
        threat(&format!("let x = {f};\n"), &["models/evil.rhai:1", "unknown function", "sandboxed"]);
    }
}

#[test]
fn a_file_cannot_change_what_another_file_sees() {
    let dir = project(&[
        // Shadows the API and leaves a variable behind: all local to this file.
        (
            "models/a.rhai",
            "fn ref(x) { \"hijacked\" }\nlet secret = 1;\nlet hijacked = ref(\"s.z\");\n\
             define_model(#{ name: \"s.w\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: \"SELECT 1 AS n\" });\n",
        ),
        (
            "models/b.rhai",
            "define_model(#{ name: \"s.z\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: \"SELECT 1 AS n\" });\n\
             define_model(#{ name: \"s.y\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: `SELECT n FROM ${ref(\"s.z\")}` });\n",
        ),
    ]);
    let p = load_ok(&dir);
    assert_eq!(parents(&p, "s.y"), ["s.z"]);
    write(dir.path(), "models/c.rhai", "let x = secret;\n");
    assert_has(&load_err(&dir), &["models/c.rhai:1: unknown variable `secret`"]);
}

#[test]
fn print_goes_to_the_log_never_stdout() {
    let dir = project(&[
        ("efmesh.toml", "[project]\nmodels = [\"models/**/*.rhai\"]\n"),
        (
            "models/p.rhai",
            "print(\"PRINTED-BY-A-MODEL\");\ndebug(\"DEBUGGED-BY-A-MODEL\");\ndefine_model(#{ name: \"s.p\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: \"SELECT 1 AS n\" });\n",
        ),
    ]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_efmesh"))
        .current_dir(dir.path())
        .args(["render", "s.p"])
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run efmesh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "render failed:\n{stderr}");
    assert!(!stdout.contains("BY-A-MODEL"), "a model printed on stdout:\n{stdout}");
    assert!(stdout.contains("SELECT"), "{stdout}");
    assert_has(&stderr, &["PRINTED-BY-A-MODEL", "DEBUGGED-BY-A-MODEL"]);
}

// ---------------------------------------------------------------------------------------------
// Termination (issue 10, defect 8): through `efmesh check`, each within 2 s wall, naming the file.

use crate::sandbox_lua::{LIMIT, must_stop, project_of, run_bounded};

const RHAI_OK_MODEL: &str = "define_model(#{ name: \"s.ok\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: \"SELECT 1 AS n\" });\n";

#[test]
fn pad_with_an_empty_padding_is_refused() {
    // The package's `pad` loops forever inside Rust on an empty padding string.
    must_stop("models/evil.rhai", "let s = \"\";\ns.pad(100, \"\");\n", &["models/evil.rhai:2", "the padding string is empty"]);
    // Padding still works.
    let p = project_of(&[("models/ok.rhai", &format!("let s = \"ab\";\ns.pad(5, \"xy\");\nif s != \"abxyx\" {{ throw s; }}\n{RHAI_OK_MODEL}"))]);
    p.run(&["check"]).expect_code(0);
}

#[test]
fn the_budget_cannot_be_caught() {
    must_stop("models/evil.rhai", "loop { try { loop {} } catch {} }\n", &["infinite loop?"]);
    // An audit body that spends a budget (operations or time) ends the evaluation with one
    // error, instead of being recorded as that audit's failure while the file goes on.
    let code = "define_audit(#{ name: \"spin\", query: |rel, args| { loop {} } });\nloop { let a = audit(\"spin\"); }\n";
    let err = must_stop("models/evil.rhai", code, &["infinite loop?"]);
    assert!(!err.contains("failed to render"), "the limit was caught as an audit error:\n{err}");
    assert_eq!(err.matches("infinite loop?").count(), 1, "one error, then the evaluation is abandoned:\n{err}");
}

#[test]
fn what_a_file_prints_is_capped() {
    let p = project_of(&[("models/p.rhai", &format!("for i in 0..20000 {{ print(`line ${{i}}`); debug(i); }}\n{RHAI_OK_MODEL}"))]);
    let (run, took) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(took < LIMIT, "took {took:?}");
    assert!(run.stderr.contains("line 0"), "the first lines are printed:\n{}", &run.stderr[..run.stderr.len().min(2000)]);
    assert!(!run.stderr.contains("line 19999"), "the output should be capped");
    assert!(run.stderr.contains("models/p.rhai: further output suppressed"), "{}", &run.stderr[run.stderr.len().saturating_sub(2000)..]);
    assert!(run.stderr.len() < 64 * 1024, "stderr has {} bytes", run.stderr.len());
}

#[test]
fn a_model_file_that_defines_no_model_is_an_error() {
    // Shadowing `define_model` with a function silently defined nothing.
    let shadow = format!("fn define_model(spec) {{}}\n{RHAI_OK_MODEL}");
    must_stop("models/evil.rhai", &shadow, &["defines no model", "shadow `define_model`"]);
    must_stop("models/evil.rhai", "let define_model = 1;\n", &["defines no model"]);
    // A file another model file imports is a library: no model needed.
    let p = project_of(&[
        ("models/lib.rhai", "fn one() { \"SELECT 1 AS n\" }\n"),
        ("models/m.rhai", "import \"lib\" as lib;\ndefine_model(#{ name: \"s.m\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: lib::one() });\n"),
    ]);
    p.run(&["check"]).expect_code(0);
}

#[test]
fn a_file_whose_models_are_defined_by_what_it_imports_defines_models() {
    let marts = "define_model(#{ name: \"m.a\", kind: kind::view(), schema: [[\"n\", \"int\"]], query: \"SELECT 1 AS n\" });\n";
    // `models/all.rhai` defines its models through `lib/marts.rhai`, itself through `lib/inner.rhai`.
    let p = project_of(&[
        ("lib/marts.rhai", marts),
        ("lib/inner.rhai", &marts.replace("m.a", "m.b")),
        ("lib/outer.rhai", "import \"lib/inner\" as inner;\n"),
        ("models/all.rhai", "import \"lib/marts\" as marts;\nimport \"lib/outer\" as outer;\n"),
    ]);
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // A second top-level file importing the same (already evaluated) file is credited too.
    p.write("models/b_again.rhai", "import \"lib/outer\" as outer;\n");
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // Importing a file that defines nothing still leaves the file with no model.
    p.write("lib/helpers.rhai", "fn one() { 1 }\n");
    p.write("models/z.rhai", "import \"lib/helpers\" as h;\n");
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("models/z.rhai") && run.stdout.contains("defines no model"), "{}", run.stdout);
    assert!(!run.stdout.contains("models/all.rhai") && !run.stdout.contains("models/b_again.rhai"), "{}", run.stdout);
}
