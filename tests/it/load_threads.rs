//! Loader threads (`EFMESH_LOAD_THREADS`): model files are evaluated in parallel, each in
//! isolation, with exactly the result of one thread — the same models, the same errors in the
//! same order — and no file can change what another file sees, whichever thread evaluates it.

use crate::common::{Project, Run};

const CONFIG: &str =
    "[project]\nmodels = [\"models/**/*.lua\", \"models/**/*.sql\"]\n\n[engine]\npath = \"efmesh.duckdb\"\n\n[state]\npath = \"efmesh.state.sqlite\"\n";

/// Runs `args` with `EFMESH_LOAD_THREADS=threads`, from an empty load cache and state.
fn run_on(p: &Project, threads: usize, args: &[&str]) -> Run {
    for gone in [".efmesh", "efmesh.state.sqlite", "efmesh.state.sqlite-wal", "efmesh.state.sqlite-shm"] {
        let path = p.root().join(gone);
        if path.is_dir() {
            fs_err::remove_dir_all(&path).unwrap();
        } else if path.exists() {
            fs_err::remove_file(&path).unwrap();
        }
    }
    let out = p.command(args).env("EFMESH_LOAD_THREADS", threads.to_string()).output().expect("spawn efmesh");
    Run::from_output(out, format!("EFMESH_LOAD_THREADS={threads} efmesh {}", args.join(" ")))
}

/// The loader's own count of the threads it used (debug log).
fn threads_used(run: &Run) -> Option<usize> {
    run.stderr.lines().find_map(|l| l.split(" files on ").nth(1)).and_then(|t| t.split_whitespace().next()).and_then(|n| n.parse().ok())
}

/// 64 files: Lua models sharing a required module (which each file mutates), `.sql` models,
/// and with `broken`, errors in several files of every kind (syntax, runtime, spec, failing
/// require, `.sql` header, a duplicate name across files).
fn project(broken: bool) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", CONFIG);
    p.write("lib/util.lua", "local M = { n = 7 }\nreturn M\n");
    p.write("lib/bad.lua", "return { n = 1 } +\n");
    for i in 0..64u32 {
        let good_lua = format!(
            "local u = require(\"lib.util\")\nu.n = u.n + {i}\ndefine_model {{ name = \"s.m{i}\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT \" .. u.n .. \" AS x\" }}\n"
        );
        let good_sql = format!("-- name: q.m{i}\n-- kind: full\n-- schema: y integer\nSELECT {i} AS y\n");
        let (ext, text) = match (broken, i % 8) {
            (_, 1) => ("sql", good_sql),
            (true, 2) => ("lua", format!("local x = \ndefine_model {{ name = \"s.m{i}\"\n")),
            (true, 3) => ("lua", format!("local u = require(\"lib.util\")\n\nerror(\"boom {i}\")\n")),
            (true, 4) => (
                "lua",
                format!("define_model {{ name = \"s.m{i}\", kind = kind.fuul(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT 1 AS x\" }}\n"),
            ),
            (true, 5) => ("lua", "local b = require(\"lib.bad\")\n".to_string()),
            (true, 6) => ("sql", format!("-- name: q.m{i}\n-- kind: fulll\nSELECT {i} AS y\n")),
            (true, 7) => {
                ("lua", "define_model { name = \"s.m0\", kind = kind.view(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 2 AS x\" }\n".to_string())
            }
            _ => ("lua", good_lua),
        };
        p.write(&format!("models/f{i:03}.{ext}"), &text);
    }
    p
}

#[test]
fn several_loader_threads_report_the_same_errors_in_the_same_order_as_one() {
    let p = project(true);
    let one = run_on(&p, 1, &["check", "--json", "--log-level", "debug"]);
    one.expect_code(1);
    assert_eq!(threads_used(&one), Some(1), "{}", one.stderr);
    for needle in ["boom 11", "lib/bad.lua", "fuul", "fulll"] {
        assert!(one.stdout.contains(needle), "`{needle}` in {}", one.stdout);
    }
    for threads in [2, 3] {
        let many = run_on(&p, threads, &["check", "--json", "--log-level", "debug"]);
        many.expect_code(1);
        assert_eq!(threads_used(&many), Some(threads), "{}", many.stderr);
        assert_eq!(many.stdout, one.stdout, "{threads} threads");
    }
}

#[test]
fn several_loader_threads_plan_the_same_models_as_one() {
    let p = project(false);
    let one = run_on(&p, 1, &["plan", "dev", "--json"]);
    one.expect_code(0);
    assert!(one.stdout.contains("s.m63") && one.stdout.contains("q.m57"), "{}", one.stdout);
    let many = run_on(&p, 3, &["plan", "dev", "--json", "--log-level", "debug"]);
    many.expect_code(0);
    assert_eq!(threads_used(&many), Some(3), "{}", many.stderr);
    assert_eq!(many.stdout, one.stdout);
}

#[test]
fn no_file_changes_what_another_file_sees_whichever_thread_evaluates_it() {
    let p = Project::new();
    // Each file checks that no earlier file leaked a global, a library field or a module
    // change into its environment, then leaks all three itself.
    p.write("lib/shared.lua", "return { hits = 0 }\n");
    for i in 0..48u32 {
        p.write(
            &format!("models/f{i:03}.lua"),
            &format!(
                r#"local shared = require("lib.shared")
assert(leaked == nil and rawget(_G, "leaked") == nil, "a global leaked")
assert(string.leaked == nil and table.leaked == nil and math.leaked == nil and rawget(kind, "leaked") == nil, "a library field leaked")
assert(shared.hits == 0, "a module change leaked")
assert(string.format ~= nil and kind.full ~= nil and define_model ~= nil, "the API was changed")
leaked, string.leaked, table.leaked, math.leaked, kind.leaked = 1, 1, 1, 1, 1
shared.hits = shared.hits + 1
local format, full = string.format, kind.full
define_model {{ name = "s.m{i}", kind = full(), schema = {{ {{ "x", "integer" }} }}, query = format("SELECT %d AS x", {i}) }}
string.format, kind.full, define_model = nil, nil, nil
"#
            ),
        );
    }
    for threads in [1, 2] {
        let run = run_on(&p, threads, &["check", "--json", "--log-level", "debug"]);
        run.expect_code(0);
        assert_eq!(threads_used(&run), Some(threads), "{}", run.stderr);
        assert_eq!(run.json()["models"], 48, "{}", run.stdout);
    }
}

#[test]
fn each_file_keeps_its_own_budget_on_loader_threads() {
    let p = Project::new();
    for i in 0..40u32 {
        let text = if i == 13 {
            "while true do end\n".to_string()
        } else {
            format!("define_model {{ name = \"s.m{i}\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT {i} AS x\" }}\n")
        };
        p.write(&format!("models/f{i:03}.lua"), &text);
    }
    let run = run_on(&p, 2, &["check", "--json", "--log-level", "debug"]);
    run.expect_code(1);
    assert_eq!(threads_used(&run), Some(2), "{}", run.stderr);
    let errors = run.json()["errors"].as_array().cloned().unwrap_or_default();
    assert_eq!(errors.len(), 1, "only the looping file fails: {}", run.stdout);
    assert_eq!(errors[0]["file"], "models/f013.lua", "{}", run.stdout);
    assert!(errors[0]["message"].as_str().unwrap_or("").contains("budget"), "{}", run.stdout);
}
