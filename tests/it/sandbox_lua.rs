//! The Lua sandbox: one test per threat. Each asserts the load error names the file and the
//! culprit, and that loading returns within one second (never a hang or a crash).

use efmesh::config::Config;
use efmesh::project::Project;
use std::time::{Duration, Instant};

const OK_MODEL: &str = r#"define_model { name = "a.ok", kind = kind.full(), schema = { { "x", "integer" } }, query = "SELECT 1 AS x" }"#;

/// Loads a one-file project whose `models/m.lua` is `code`; returns the error text and time.
fn load_err(code: &str) -> (String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("models")).unwrap();
    std::fs::write(dir.path().join("models/m.lua"), code).unwrap();
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
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
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
    std::fs::write(outside.path().join("evil.lua"), "return {}").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("models")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("evil.lua"), dir.path().join("models/evil.lua")).unwrap();
    // Only m.lua is discovered; evil.lua is reached through `require`.
    std::fs::write(dir.path().join("models/m.lua"), "local e = require('evil')").unwrap();
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
fn deep_recursion_is_a_stack_overflow_error() {
    assert_refused("local function f(n) return 1 + f(n + 1) end f(1)", "stack overflow");
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
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}: {msg}");
    assert!(msg.contains("models/m.lua"), "{msg}");
}

#[test]
fn string_metatable_and_host_metatables_are_locked() {
    assert_refused("getmetatable('').__index.format = nil", "index a boolean");
    assert_refused(&format!("local h = {} getmetatable(h).__index = nil", OK_MODEL.replacen("define_model", "define_model", 1)), "index a nil");
}

#[test]
fn a_file_cannot_change_the_api_another_file_sees() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("models")).unwrap();
    std::fs::write(dir.path().join("models/a.lua"), "string.format = nil; kind.full = nil; define_model = nil; table.concat = nil").unwrap();
    std::fs::write(
        dir.path().join("models/b.lua"),
        r#"define_model { name = "b.m", kind = kind.full(), schema = { { "x", "integer" } }, query = ("SELECT %d AS x"):format(1) .. table.concat({}) }"#,
    )
    .unwrap();
    let project = Project::load(&Config::with_root(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(project.dag.len(), 1);
}

#[test]
fn pairs_iterates_in_a_deterministic_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("models")).unwrap();
    std::fs::write(
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

#[test]
fn print_goes_to_stderr_not_stdout_and_bytecode_chunks_are_refused() {
    // A file starting with the bytecode signature is not loaded as binary.
    let (msg, _) = load_err("\x1bLua\x54\x00garbage");
    assert!(msg.contains("models/m.lua"), "{msg}");
}
