//! The Lua sandbox: one test per threat. Each asserts the load error names the file and the
//! culprit, and that loading returns within two seconds (never a hang or a crash; the budget is
//! 500 ms, the margin is for a loaded machine).

use crate::common;
use efmesh::config::Config;
use efmesh::project::Project;
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

const OK_MODEL: &str = r#"define_model { name = "a.ok", kind = kind.full(), schema = { { "x", "integer" } }, query = "SELECT 1 AS x" }"#;

/// Loads a one-file project whose `models/m.lua` is `code`; returns the error text and time.
fn load_err(code: &str) -> (String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(dir.path().join("models/m.lua"), code).unwrap();
    let config = Config::with_root(dir.path());
    let t = Instant::now();
    let result = Project::load(&config);
    let elapsed = t.elapsed();
    match result {
        Ok(_) => panic!("loading should fail for:\n{code}"),
        Err(e) => (e.to_string(), elapsed),
    }
}

fn assert_refused(code: &str, expected: &str) {
    let (msg, elapsed) = load_err(code);
    assert!(msg.contains("models/m.lua"), "error should name the file: {msg}");
    assert!(msg.contains(expected), "expected `{expected}` in: {msg}");
    assert!(elapsed < LIMIT, "took {elapsed:?}");
}

#[test]
fn no_io_library() {
    assert_refused("local f = io.open('/etc/passwd')", "io");
}

#[test]
fn no_os_library_so_no_clock_or_processes() {
    assert_refused("os.execute('touch /tmp/pwned')", "os");
    assert_refused("local t = os.time()", "os");
    assert_refused("local c = os.clock()", "os");
}

#[test]
fn no_debug_library() {
    assert_refused("debug.sethook()", "debug");
}

#[test]
fn no_package_so_no_loadlib() {
    assert_refused("package.loadlib('/lib/x86_64-linux-gnu/libc.so.6', '*')", "package");
}

#[test]
fn no_load_loadstring_dofile_or_loadfile() {
    assert_refused("load('return 1')()", "load");
    assert_refused("loadstring('return 1')()", "loadstring");
    assert_refused("dofile('/etc/passwd')", "dofile");
    assert_refused("loadfile('/etc/passwd')", "loadfile");
}

#[test]
fn no_bytecode_via_string_dump() {
    assert_refused("local b = string.dump(function() end)", "dump");
}

#[test]
fn no_randomness() {
    assert_refused("local r = math.random()", "random");
    assert_refused("math.randomseed(42)", "randomseed");
}

#[test]
fn no_collectgarbage() {
    assert_refused("collectgarbage('count')", "collectgarbage");
}

#[test]
fn require_stays_inside_the_project() {
    assert_refused("require('..secret')", "module names");
    assert_refused("require('/etc/passwd')", "module names");
    assert_refused("require('nowhere')", "no file");
    assert_refused("require('a..b')", "module names");
}

#[test]
fn require_refuses_symlinks_out_of_the_project() {
    let outside = tempfile::tempdir().unwrap();
    fs_err::write(outside.path().join("evil.lua"), "return {}").unwrap();
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("evil.lua"), dir.path().join("models/evil.lua")).unwrap();
    // Only m.lua is discovered; evil.lua is reached through `require`.
    fs_err::write(dir.path().join("models/m.lua"), "local e = require('evil')").unwrap();
    let mut config = Config::with_root(dir.path());
    config.project.models = vec!["models/m.lua".into()];
    let err = Project::load(&config).unwrap_err().to_string();
    assert!(err.contains("outside the project"), "{err}");
}

#[test]
fn infinite_loop_hits_the_time_budget() {
    assert_refused("while true do end", "budget");
}

#[test]
fn memory_bomb_hits_the_memory_limit() {
    assert_refused("local s = ('x'):rep(2^24) local t = {} for i = 1, 1000 do t[i] = s .. i end", "memory");
}

#[test]
fn deep_recursion_ends_with_a_clear_error() {
    // Lua's own stack limit takes about 0.75 s of recursion to reach on these machines, so on
    // a loaded machine the 500 ms budget may end the file first: either way it ends within the
    // limit, naming the file and saying why.
    let (msg, elapsed) = load_err("local function f(n) return 1 + f(n + 1) end f(1)");
    assert!(msg.contains("models/m.lua"), "error should name the file: {msg}");
    assert!(msg.contains("stack overflow") || msg.contains("budget"), "neither a stack overflow nor the budget: {msg}");
    assert!(elapsed < LIMIT, "took {elapsed:?}");
}

#[test]
fn gigantic_string_is_refused_before_allocation() {
    assert_refused("local s = string.rep('x', 1e12)", "string.rep");
    assert_refused("local s = ('x'):rep(1e12)", "string.rep");
}

#[test]
fn table_move_cannot_loop_inside_c() {
    assert_refused("local t = table.move({}, 1, 1e12, 2)", "table.move");
}

#[test]
fn backtracking_patterns_are_bounded() {
    assert_refused("local s = ('a'):rep(200000) local r = s:find('.-.-.-.-b')", "backtrack");
}

#[test]
fn finalizers_are_refused() {
    assert_refused("setmetatable({}, { __gc = function() while true do end end })", "__gc");
    assert_refused("do local x <close> = setmetatable({}, {}) end", "<close>");
    assert_refused("do local x < close > = nil end", "<close>");
}

#[test]
fn error_objects_with_looping_tostring_do_not_hang() {
    let (msg, elapsed) = load_err("error(setmetatable({}, { __tostring = function() while true do end end }))");
    assert!(elapsed < LIMIT, "took {elapsed:?}: {msg}");
    assert!(msg.contains("models/m.lua"), "{msg}");
}

#[test]
fn string_metatable_and_host_metatables_are_locked() {
    assert_refused("getmetatable('').__index.format = nil", "index a boolean");
    assert_refused(&format!("local h = {} getmetatable(h).__index = nil", OK_MODEL), "index a nil");
}

#[test]
fn a_file_cannot_change_the_api_another_file_sees() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(dir.path().join("models/a.lua"), format!("{OK_MODEL}\nstring.format = nil; kind.full = nil; define_model = nil; table.concat = nil"))
        .unwrap();
    fs_err::write(
        dir.path().join("models/b.lua"),
        r#"define_model { name = "b.m", kind = kind.full(), schema = { { "x", "integer" } }, query = ("SELECT %d AS x"):format(1) .. table.concat({}) }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(project.dag.len(), 2);
}

#[test]
fn pairs_iterates_in_a_deterministic_order() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(
        dir.path().join("models/m.lua"),
        r#"local cols = { zeta = "1", alpha = "2", mid = "3", [2] = "4", [1] = "5" }
local parts = {}
for k, v in pairs(cols) do parts[#parts + 1] = v .. " AS c_" .. tostring(k) end
define_model { name = "a.m", kind = kind.full(), schema = { { "c_1", "integer" }, { "c_2", "integer" }, { "c_alpha", "integer" }, { "c_mid", "integer" }, { "c_zeta", "integer" } },
  query = "SELECT " .. table.concat(parts, ", ") }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    let m = project.dag.models().next().unwrap();
    let sql = m.body.as_ref().unwrap().render(&efmesh::core::fragment::CanonicalResolver);
    assert_eq!(sql, "SELECT 5 AS c_1, 4 AS c_2, 2 AS c_alpha, 3 AS c_mid, 1 AS c_zeta");
}

/// `next` walks the same order as `pairs` (raw `next` follows the hash seed, which differs per
/// interpreter: a `CASE` built with it changed order, and fingerprint, from one load to the
/// next), also from a key in the middle and as an emptiness test.
#[test]
fn next_walks_the_sorted_order_too() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(
        dir.path().join("models/m.lua"),
        r#"local tiers = { gold = "a > 9", silver = "a > 5", bronze = "a > 1", tin = "a > 0", iron = "a > -1", zinc = "a > -5", lead = "a > -9", copper = "a > -20" }
local parts = {}
for name, cond in next, tiers do parts[#parts + 1] = "WHEN " .. cond .. " THEN '" .. name .. "'" end
local after_iron = next(tiers, "iron")
local empty = next({}) == nil and next(tiers) ~= nil
define_model { name = "a.m", kind = kind.full(), schema = { { "t", "varchar" }, { "n", "varchar" }, { "e", "boolean" } },
  query = "SELECT CASE " .. table.concat(parts, " ") .. " END AS t, '" .. after_iron .. "' AS n, " .. tostring(empty) .. " AS e FROM (SELECT 3 AS a)" }"#,
    )
    .unwrap();
    for _ in 0..4 {
        let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
        let m = project.dag.models().next().unwrap();
        let sql = m.body.as_ref().unwrap().render(&efmesh::core::fragment::CanonicalResolver);
        assert_eq!(
            sql,
            "SELECT CASE WHEN a > 1 THEN 'bronze' WHEN a > -20 THEN 'copper' WHEN a > 9 THEN 'gold' WHEN a > -1 THEN 'iron' WHEN a > -9 THEN 'lead' WHEN a > 5 THEN 'silver' WHEN a > 0 THEN 'tin' WHEN a > -5 THEN 'zinc' END AS t, 'lead' AS n, true AS e FROM (SELECT 3 AS a)"
        );
    }
}

/// `next` as Lua code uses it beside a walk: clearing the current key (and testing emptiness)
/// during the walk goes on with the next key; an emptiness test in a loop and draining a big
/// table scan it once per call (three hundred keys: 90 000 steps, far within the budget even on a
/// loaded machine; the budget is wall-clock, and a thousand keys took over 500 ms during a full
/// test run beside other work).
#[test]
fn next_allows_clearing_during_a_walk_and_stays_cheap() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(
        dir.path().join("models/m.lua"),
        r#"local t = { c = 3, a = 1, b = 2, d = 4 }
local seen = {}
for k, v in next, t do
  seen[#seen + 1] = k
  t[k] = nil
  if next(t) ~= nil then seen[#seen + 1] = "+" end
end
local big, n = {}, 0
for i = 1, 300 do big["k" .. i] = i; if next(big) ~= nil then n = n + 1 end end
while next(big) ~= nil do big[next(big)] = nil end
define_model { name = "a.m", kind = kind.full(), schema = { { "s", "varchar" }, { "n", "integer" } }, query = "SELECT '" .. table.concat(seen, ",") .. "' AS s, " .. n .. " AS n" }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    let m = project.dag.models().next().unwrap();
    let sql = m.body.as_ref().unwrap().render(&efmesh::core::fragment::CanonicalResolver);
    assert_eq!(sql, "SELECT 'a,+,b,+,c,+,d' AS s, 300 AS n");
}

/// `next(t, k)` answers from the keys `t` holds when it is called: it kept the keys it sorted for
/// an earlier step (a key since removed, `z`) and walked them again from `a` after `c` was added,
/// giving `b` alone. A walk from a key follows the keys sorted at its first step; a key cleared
/// during it is skipped; starting again from any key sorts again.
#[test]
fn next_from_a_key_answers_from_the_keys_the_table_holds_now() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(
        dir.path().join("models/m.lua"),
        r#"local t = { a = 1, b = 2 }
t.z = 1; local first = next(t, "a"); t.z = nil
t.c = 1
local function walk(from)
  local o = {}
  local k = next(t, from)
  while k do o[#o + 1] = k; k = next(t, k) end
  return table.concat(o, ",")
end
local after_a = walk("a")
local again = next(t, "b")
t.d = 4
local cleared = {}
local k = next(t, "a")
while k do cleared[#cleared + 1] = k; t.c = nil; k = next(t, k) end
define_model { name = "a.m", kind = kind.full(), schema = { { "s", "varchar" } },
  query = "SELECT '" .. first .. "|" .. after_a .. "|" .. again .. "|" .. walk("a") .. "|" .. table.concat(cleared, ",") .. "' AS s" }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    let m = project.dag.models().next().unwrap();
    let sql = m.body.as_ref().unwrap().render(&efmesh::core::fragment::CanonicalResolver);
    assert_eq!(sql, "SELECT 'b|b,c|c|b,d|b,d' AS s");
}

/// Nothing a model builds depends on where the allocator put a value: `tostring` of a table or
/// function is its type's name, `%s` of one too, `%p` is refused, and `pairs`/`next` over a
/// table keyed by tables (ordered by address) is refused naming the line.
#[test]
fn no_address_reaches_what_a_model_builds() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(
        dir.path().join("models/m.lua"),
        r#"local t = setmetatable({}, { __tostring = function() return "named" end })
local text = tostring({}) .. "," .. tostring(print) .. "," .. ("%s"):format({}) .. "," .. string.format("%s|%%p", t)
define_model { name = "a.m", kind = kind.full(), schema = { { "s", "varchar" } }, query = "SELECT '" .. text .. "' AS s" }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    let m = project.dag.models().next().unwrap();
    let sql = m.body.as_ref().unwrap().render(&efmesh::core::fragment::CanonicalResolver);
    assert_eq!(sql, "SELECT 'table,function,table,named|%p' AS s");
    // A model handle keeps its name (its `__tostring`).
    let (msg, _) = load_err(&format!("local h = {}\nlocal x = ('%s'):format(h) .. tostring(h)\nerror(x)", OK_MODEL));
    assert!(msg.contains("a.oka.ok"), "{msg}");
    assert_refused(&format!("local s = string.format('%p', {{}})\n{OK_MODEL}"), "`%p` formats an address");
    assert_refused(&format!("local set = {{ [{{}}] = 1, [{{}}] = 2 }}\n\nfor k in pairs(set) do end\n{OK_MODEL}"), "m.lua:3");
    assert_refused(&format!("local set = {{ [{{}}] = 1 }}\nfor k in pairs(set) do end\n{OK_MODEL}"), "pairs: a key of the table is a table");
    assert_refused(&format!("local set = {{ [print] = 1 }}\nlocal k = next(set)\n{OK_MODEL}"), "next: a key of the table is a function");
    // A `__name` may hold colons: still cut to it, still refused as a key.
    assert_refused(
        &format!(
            "local o = setmetatable({{}}, {{ __name = \"my:obj\" }})\nassert(tostring(o) == \"my:obj\")\nfor k in pairs({{ [o] = 1 }}) do end\n{OK_MODEL}"
        ),
        "m.lua:3",
    );
    // Two keys printing the same text have no order either.
    assert_refused(
        &format!(
            "local mt = {{ __tostring = function() return \"same\" end }}\nlocal set = {{ [setmetatable({{}}, mt)] = 1, [setmetatable({{}}, mt)] = 2 }}\nfor k in pairs(set) do end\n{OK_MODEL}"
        ),
        "two keys of the table print the same (`same`)",
    );
}

/// An error value that is not a string (a table, a function) reaches no text with its address
/// (`table: 0x…` depends on what the interpreter ran before): not the message a `pcall` around
/// `define_model` hands back to the script, from which SQL can be built (its first line is the
/// sandbox's `tostring` of the value), nor the load error of a file raising one, or of a file
/// it requires.
#[test]
fn error_values_reach_no_text_with_their_address() {
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::write(
        dir.path().join("models/m.lua"),
        r#"local function caught(v)
  local _, e = pcall(define_model, { name = "p.x", kind = kind.full(), schema = { { "a", "integer" } }, query = function() error(v) end })
  return tostring(e):match("^[^\n]*") .. (tostring(e):match("0x%x+") or "")
end
local named = setmetatable({}, { __tostring = function() return "named" end })
local text = caught({}) .. "|" .. caught(print) .. "|" .. caught(named) .. "|" .. caught(true)
define_model { name = "a.m", kind = kind.full(), schema = { { "s", "varchar" } }, query = "SELECT '" .. text .. "' AS s" }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(project.dag.len(), 1);
    let m = project.dag.models().next().unwrap();
    let sql = m.body.as_ref().unwrap().render(&efmesh::core::fragment::CanonicalResolver);
    assert_eq!(sql, "SELECT 'runtime error: table|runtime error: function|runtime error: named|runtime error: true' AS s");
    // The load error of a file raising a table, and of a library raising a function.
    let (msg, _) = load_err(&format!("{OK_MODEL}\nerror({{}})"));
    assert!(msg.contains("models/m.lua:") && msg.contains("table") && !msg.contains("0x"), "{msg}");
    let dir = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(dir.path().join("models")).unwrap();
    fs_err::create_dir_all(dir.path().join("lib")).unwrap();
    fs_err::write(dir.path().join("lib/bad.lua"), "error(function() end)\n").unwrap();
    fs_err::write(dir.path().join("models/m.lua"), format!("local ok = pcall(require, \"lib.bad\")\n{OK_MODEL}")).unwrap();
    let msg = Project::load(&Config::with_root(dir.path())).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("lib/bad.lua") && msg.contains("function") && !msg.contains("0x"), "{msg}");
}

/// The message of an error a script raises is reported up to 8 KiB (what a file may print),
/// saying it was cut: `error(string.rep("x", 10 * 2^20))` does not write 10 MB to stderr and
/// `--json`.
#[test]
fn a_huge_error_message_is_cut_in_the_report() {
    let (msg, elapsed) = load_err("error(string.rep(\"x\", 10 * 2^20))");
    assert!(elapsed < LIMIT, "took {elapsed:?}");
    assert!(msg.len() < 16 * 1024, "{} bytes reported", msg.len());
    assert!(msg.contains("models/m.lua:1: "), "{msg}");
    // Cut twice: to what a report shows, then its one long word to a load error's bound.
    assert!(msg.contains("xxxx… (") && msg.contains(" bytes) (error message cut: 10485"), "{msg}");
}

/// Running out of the interpreter's memory is reported as a memory error, as it was before
/// project code ran under efmesh's message handler: Lua calls no handler for an allocation
/// failure, and `xpcall`'s bare `not enough memory` was reported as a runtime error.
#[test]
fn the_memory_limit_is_reported_as_a_memory_error() {
    let (msg, elapsed) = load_err("local s = \"x\"\n\nfor i = 1, 40 do s = s .. s end");
    assert!(elapsed < LIMIT, "took {elapsed:?}");
    assert!(msg.contains("models/m.lua: memory error: not enough memory"), "{msg}");
    assert!(!msg.contains("runtime error"), "{msg}");
}

#[test]
fn print_goes_to_stderr_not_stdout_and_bytecode_chunks_are_refused() {
    // A file starting with the bytecode signature is not loaded as binary.
    let (msg, _) = load_err("\x1bLua\x54\x00garbage");
    assert!(msg.contains("models/m.lua"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Termination (issue 10, defect 8): each hang runs `efmesh check` on a one-file project and must
// end within 2 s wall with exit 1 and an error naming the file. The child is killed after 10 s
// so that a hang fails the test instead of hanging it.

/// Longest a sandbox test may take, wall clock.
pub(crate) const LIMIT: Duration = Duration::from_secs(2);

/// Runs `efmesh <args>` in `p`, draining its output; kills it after 10 s. Returns the run and
/// how long it took.
pub(crate) fn run_bounded(p: &common::Project, args: &[&str]) -> (common::Run, Duration) {
    let started = Instant::now();
    let mut child = p.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn efmesh");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code().unwrap_or(-1);
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`efmesh {}` still running after 10 s: the sandbox hangs", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = started.elapsed();
    let run = common::Run { code, stdout: out.join().expect("stdout"), stderr: err.join().expect("stderr"), cmd: format!("efmesh {}", args.join(" ")) };
    (run, took)
}

/// A project whose model files are `files` (Lua and Rhai globs).
pub(crate) fn project_of(files: &[(&str, &str)]) -> common::Project {
    let p = common::Project::new();
    p.write("efmesh.toml", "[project]\nmodels = [\"models/**/*.{lua,rhai,sql}\"]\n");
    for (path, text) in files {
        p.write(path, text);
    }
    p
}

/// `efmesh check` on a project holding `file` = `code` must fail within [`LIMIT`], naming the
/// file and every needle. Returns the output (the report on stdout, then stderr).
#[track_caller]
pub(crate) fn must_stop(file: &str, code: &str, needles: &[&str]) -> String {
    let p = project_of(&[(file, code)]);
    let (run, took) = run_bounded(&p, &["check"]);
    let out = format!("{}{}", run.stdout, run.stderr);
    assert_eq!(run.code, 1, "exit code of `efmesh check` for:\n{code}\n--- output\n{out}");
    assert!(took < LIMIT, "took {took:?} for:\n{code}\n--- output\n{out}");
    assert!(out.contains(&format!("{file}:")), "the error should name `{file}`:\n{out}");
    for n in needles {
        assert!(out.contains(n), "missing {n:?} for:\n{code}\n--- output\n{out}");
    }
    out
}

#[test]
fn pcall_and_xpcall_cannot_catch_the_budget() {
    for code in [
        "while true do pcall(function() while true do end end) end",
        "while true do xpcall(function() while true do end end, function(e) return e end) end",
        "local function spin() while true do end end\nwhile true do pcall(pcall, spin) end",
        // The handler itself loops: still one budget, still abandoned.
        "while true do xpcall(function() while true do end end, function() while true do end end) end",
    ] {
        must_stop("models/m.lua", code, &["budget", "cannot be caught"]);
    }
}

#[test]
fn a_spent_budget_names_the_file_and_line_it_stopped_at() {
    let code = "local a = 0\nlocal b = 1\nwhile true do a = a + b end\n";
    must_stop("models/m.lua", code, &["models/m.lua:3:", "budget"]);
    let p = project_of(&[("models/m.lua", code)]);
    let (run, _) = run_bounded(&p, &["check", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!((&v["errors"][0]["file"], &v["errors"][0]["line"]), (&serde_json::json!("models/m.lua"), &serde_json::json!(3)), "{v:#}");
}

#[test]
fn an_audit_body_cannot_swallow_the_budget() {
    let code = "define_audit { name = \"spin\", query = function(self, args) while true do end end }\nwhile true do local _ = audit.spin() end";
    let err = must_stop("models/m.lua", code, &["budget"]);
    assert_eq!(err.matches("exceeded its budget").count(), 1, "one budget error, then the evaluation is abandoned:\n{err}");
}

#[test]
fn empty_rep_is_bounded_by_its_work_not_its_size() {
    // Empty results pass any size check, yet the C loop runs `n` times.
    must_stop("models/m.lua", "local s = (\"\"):rep(1e15)", &["`string.rep` would take", "work budget"]);
    must_stop("models/m.lua", "local s = string.rep(\"\", 1e15, \"\")", &["`string.rep` would take", "work budget"]);
    // Small results, many calls: the meter adds up.
    must_stop("models/m.lua", "while true do local s = (\"\"):rep(1e7) end", &["budget"]);
}

#[test]
fn pattern_calls_on_a_big_string_are_charged_by_work() {
    // Each call scans 8 MB inside C, out of the instruction hook's sight.
    for call in ["s:gsub(\"y\", \"\")", "s:find(\"y\")", "s:find(\"y\", 1, true)", "s:match(\"y\")", "s:gmatch(\"y\")()"] {
        let code = format!("local s = (\"x\"):rep(8e6)\nfor i = 1, 1e9 do local _ = {call} end");
        must_stop("models/m.lua", &code, &["budget"]);
    }
    // One call whose worst case exceeds the whole budget is refused before it starts.
    must_stop("models/m.lua", "local s = (\"x\"):rep(8e6)\nlocal _ = s:find((\"x\"):rep(1000) .. \"y\")", &["`string.find` would take"]);
}

#[test]
fn other_library_loops_on_big_data_are_charged_by_work() {
    for body in [
        "local _ = s:upper()",
        "local _ = s:reverse()",
        "local _ = s:sub(2)",
        "local _ = (\"%s\"):format(s)",
        "local _ = table.concat({ s, s })",
        "local _ = utf8.len(s)",
        "local _ = tonumber(s)",
        "local _ = s:byte(1, 100000)",
        "local _ = table.concat({}, \"\", 1, 1e12)",
        "local _ = table.unpack({}, 1, 1e12)",
    ] {
        let code = format!("local s = (\"x\"):rep(8e6)\nfor i = 1, 1e9 do {body} end");
        must_stop("models/m.lua", &code, &["budget"]);
    }
    must_stop("models/m.lua", "local _ = string.pack(\"c1000000000\", \"\")", &["pack"]);
    // One call making a C callback per element, long enough on its own: refused before it starts.
    must_stop("models/m.lua", "local s = \"x\"\nfor i = 1, 25 do s = s .. s end\nlocal _ = s:gsub(\".\", type)", &["`string.gsub` would take"]);
    must_stop("models/m.lua", "local t = { 1 }\nfor i = 1, 22 do table.move(t, 1, #t, #t + 1) end\ntable.sort(t, rawequal)", &["`table.sort` would take"]);
}

#[test]
fn converting_a_nested_spec_value_is_bounded() {
    // The host converts spec values in Rust, out of the hook's sight: each table once, and at
    // most 200 000 values (a table shared at every level doubles the paths at each level).
    let model = |v: &str| {
        format!(
            "local t = {{ 1 }}\nfor i = 1, 30 do t = {v} end\ndefine_model {{ name = \"a.ok\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, query = \"SELECT 1 AS x\", grain = t }}"
        )
    };
    must_stop("models/m.lua", &model("{ t, t }"), &["value too large"]);
    must_stop("models/m.lua", &model("{ t }"), &["grain"]);
}

#[test]
fn an_operation_the_hook_cannot_interrupt_is_stopped_by_the_watchdog() {
    // Comparing two distinct 32 MB strings is one VM instruction doing 32 MB of work inside C;
    // hundreds of them run between two hook calls. The file ends within 2 s either way: by its
    // budget at the next hook call, or by the watchdog, which ends the process naming the file.
    let compares = vec!["a == b"; 600].join(" and ");
    let code = format!("local a = \"x\"\nfor i = 1, 25 do a = a .. a end\nlocal b = \"!\" .. a\na = \"!\" .. a\nwhile true do local _ = {compares} end");
    let err = must_stop("models/m.lua", &code, &[]);
    assert!(err.contains("budget") || err.contains("still running"), "{err}");
}

#[test]
fn what_a_file_prints_is_capped() {
    let p = project_of(&[("models/m.lua", &format!("for i = 1, 20000 do print(\"line \" .. i) end\n{OK_MODEL}"))]);
    let (run, took) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(took < LIMIT, "took {took:?}");
    assert!(
        run.stderr.contains("line 1\n") || run.stderr.contains("line 1 ") || run.stderr.contains("msg=\"line 1\""),
        "the first lines are printed:\n{}",
        &run.stderr[..run.stderr.len().min(2000)]
    );
    assert!(!run.stderr.contains("line 20000"), "the output should be capped");
    assert!(run.stderr.contains("models/m.lua: further output suppressed"), "{}", &run.stderr[run.stderr.len().saturating_sub(2000)..]);
    assert!(run.stderr.len() < 64 * 1024, "stderr has {} bytes", run.stderr.len());
    assert!(!run.stdout.contains("line 1"), "prints never reach stdout");
}

#[test]
fn a_model_file_that_defines_no_model_is_an_error() {
    // Shadowing `define_model` silently defined nothing.
    let shadow = OK_MODEL.replacen("define_model", "local define_model = function() end\ndefine_model", 1);
    must_stop("models/m.lua", &shadow, &["models/m.lua: this file defines no model"]);
    must_stop("models/m.lua", "-- nothing here\nlocal x = 1", &["defines no model"]);
    // A library that another model file requires needs no model of its own.
    let p = project_of(&[
        ("models/lib.lua", "local M = {}\nfunction M.one() return \"SELECT 1 AS x\" end\nreturn M"),
        (
            "models/m.lua",
            "local lib = require(\"lib\")\ndefine_model { name = \"a.ok\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = lib.one() }",
        ),
    ]);
    p.run(&["check"]).expect_code(0);
    // An unused library is reported.
    p.write("models/unused.lua", "return { two = 2 }");
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(run.stdout.contains("models/unused.lua:") && run.stdout.contains("defines no model"), "{}", run.stdout);
    assert!(!run.stdout.contains("models/lib.lua"), "{}", run.stdout);
}

#[test]
fn long_numeric_strings_cannot_bypass_the_work_meter() {
    // C reads a numeric string of any length as its number: 64 zeros then 10^15 is 10^15 to
    // `string.rep` and `table.move`, so the guards must convert it too (and charge what C gets).
    let big = "(\"0\"):rep(64) .. \"1000000000000000\"";
    let cases = [
        (format!("local s = (\"\"):rep({big})"), "`string.rep` would take"),
        (format!("local s = string.rep(\"\", {big}, \"\")"), "`string.rep` would take"),
        (format!("local t = table.move({{}}, 1, {big}, 2)"), "table.move of"),
        (format!("local t = table.move({{}}, (\"0\"):rep(80) .. \"1\", {big}, 2)"), "table.move of"),
    ];
    // The binary: refused by the meter with a load error, not ended by the watchdog.
    for (code, needle) in &cases {
        must_stop("models/m.lua", code, &["models/m.lua:1:", needle]);
    }
    // As a library (no watchdog exit): refused too, never a hang.
    for (code, needle) in cases {
        let (tx, rx) = std::sync::mpsc::channel();
        let code2 = code.clone();
        std::thread::spawn(move || {
            let _ = tx.send(load_err(&code2));
        });
        let (msg, elapsed) = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("loading hangs for:\n{code}"));
        assert!(msg.contains("models/m.lua") && msg.contains(needle), "expected `{needle}` naming the file in: {msg}");
        assert!(elapsed < LIMIT, "took {elapsed:?}");
    }
    // Numeric strings of normal length still work as counts.
    let p = project_of(&[(
        "models/m.lua",
        &format!("assert((\"ab\"):rep(\"3\") == \"ababab\")\nassert(#table.move({{1, 2, 3}}, \"1\", \"3\", \"2\") == 4)\n{OK_MODEL}"),
    )]);
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
}

#[test]
fn a_file_whose_models_are_defined_by_what_it_requires_defines_models() {
    let marts = "define_model { name = \"m.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\nreturn {}";
    // `models/all.lua` defines its models through `lib/marts.lua`, itself through `lib/inner.lua`.
    let p = project_of(&[
        ("lib/marts.lua", marts),
        ("lib/inner.lua", &marts.replace("m.a", "m.b")),
        ("lib/outer.lua", "return require(\"lib.inner\")"),
        ("models/all.lua", "require(\"lib.marts\")\nrequire(\"lib.outer\")"),
    ]);
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // A second top-level file requiring the same (already evaluated) library is credited too.
    p.write("models/again.lua", "require(\"lib.outer\")");
    p.write("models/b_own.lua", &format!("require(\"lib.outer\")\n{OK_MODEL}"));
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // Requiring a library that defines nothing still leaves the file with no model.
    p.write("lib/helpers.lua", "return { one = 1 }");
    p.write("models/z.lua", "require(\"lib.helpers\")");
    let (run, _) = run_bounded(&p, &["check"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("models/z.lua") && run.stdout.contains("defines no model"), "{}", run.stdout);
    assert!(!run.stdout.contains("models/all.lua") && !run.stdout.contains("models/again.lua"), "{}", run.stdout);
}

/// `require` looks first beside the file the calling code is written in — also from inside a
/// function that file defines, called later by another file or as a macro (when no file is being
/// evaluated): it resolved against the file being evaluated, or the project root, loading
/// another module silently.
#[test]
fn require_inside_a_function_resolves_beside_the_file_that_defines_it() {
    let p = project_of(&[
        ("b.lua", "return { v = 2 }"),
        ("lib/b.lua", "return { v = 1 }"),
        ("lib/a.lua", "return { f = function() return require(\"b\").v end }"),
        ("helpers/h.lua", "return { k = 999 }"),
        ("macros/helpers/h.lua", "return { k = 10 }"),
        ("macros/l.lua", "define_macro(\"times\", function(x) return \"(\" .. x .. \" * \" .. require(\"helpers.h\").k .. \")\" end)\n"),
        (
            "models/m.lua",
            "define_model { name = \"a.m\", kind = kind.full(), schema = { { \"v\", \"integer\" }, { \"w\", \"integer\" } }, query = \"SELECT \" .. require(\"lib.a\").f() .. \" AS v, @times(1) AS w\" }",
        ),
    ]);
    let sql = p.run(&["render", "a.m", "--json"]).expect_code(0).json()["sql"].as_str().unwrap_or_default().to_string();
    assert_eq!(sql, "SELECT 1 AS v, (1 * 10) AS w");
}
