//! The project cache (`.efmesh/project-cache`, docs/load-cache.md): the validated project of the
//! last load, restored only while every input is byte for byte what it was loaded from. Every
//! model file prints `EVAL <tag>` when evaluated, and `--log-level debug` says when the project
//! was restored, so each test sees which path a command took — and, above all, that what it
//! reports is the project as it is on disk now.

use crate::common::{Project, check_debug as check, evaluated, printing_lua_model as lua_model, rendered as render};
use std::time::{Duration, SystemTime};

const RESTORED: &str = "restored from the project cache";

/// `a` requires `lib/util.lua`; `b` does not.
fn project() -> Project {
    let p = Project::new();
    p.write("lib/util.lua", "return { n = 1 }\n");
    p.write("models/a.lua", &lua_model("a", "s.a", "local u = require(\"lib.util\")", "\"SELECT \" .. u.n .. \" AS x\""));
    p.write("models/b.lua", &lua_model("b", "s.b", "", "\"SELECT 2 AS x\""));
    p
}

fn cache_path(p: &Project) -> std::path::PathBuf {
    p.root().join(".efmesh/project-cache")
}

/// Writes `text` (of the same length as the file's content) and puts its modification time back.
fn write_keeping_mtime(p: &Project, rel: &str, text: &str) {
    let path = p.root().join(rel);
    let before = fs_err::metadata(&path).unwrap();
    assert_eq!(before.len(), text.len() as u64, "the same size");
    let mtime = before.modified().unwrap();
    fs_err::write(&path, text).unwrap();
    fs_err::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    let after = fs_err::metadata(&path).unwrap();
    assert_eq!((after.len(), after.modified().unwrap()), (before.len(), mtime), "same size, same mtime");
}

#[test]
fn an_unchanged_project_is_restored_and_plans_as_a_loaded_one() {
    let p = project();
    let first = check(&p);
    assert_eq!(evaluated(&first), ["a", "b"]);
    assert!(!first.stderr.contains(RESTORED), "{}", first.stderr);
    assert!(cache_path(&p).is_file(), "stored beside the load cache");
    let second = check(&p);
    assert!(second.stderr.contains(RESTORED), "{}", second.stderr);
    assert_eq!(evaluated(&second), Vec::<String>::new());
    let restored = p.plan("dev");
    fs_err::remove_dir_all(p.root().join(".efmesh")).unwrap();
    assert_eq!(p.plan("dev"), restored, "the restored project plans exactly as one evaluated afresh");
}

#[test]
fn an_edit_keeping_size_and_mtime_is_seen() {
    let p = project();
    check(&p);
    check(&p);
    let text = p.read("models/b.lua").replace("SELECT 2 AS x", "SELECT 7 AS x");
    write_keeping_mtime(&p, "models/b.lua", &text);
    let run = check(&p);
    assert!(!run.stderr.contains(RESTORED), "{}", run.stderr);
    assert_eq!(evaluated(&run), ["b"]);
    assert!(render(&p, "s.b").contains("7 AS x"));
    // A module reached through `require`, alike.
    write_keeping_mtime(&p, "lib/util.lua", "return { n = 5 }\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a"], "{}", run.stderr);
    assert!(render(&p, "s.a").contains("5 AS x"));
    assert!(check(&p).stderr.contains(RESTORED), "stored again after the load");
}

/// After a restore that read and hashed every input, the next one proves them by their
/// recorded stat (`.efmesh/input-stats`, git's index rule) without reading them; an edit that
/// keeps size and modification time still moves the status-change time, so it is seen.
#[test]
fn inputs_proven_by_their_stat_still_see_an_edit_keeping_size_and_mtime() {
    let p = project();
    check(&p);
    let second = check(&p);
    assert!(second.stderr.contains("0 input(s) proven by their recorded stat, 3 to read and hash"), "{}", second.stderr);
    assert!(p.root().join(".efmesh/input-stats").is_file());
    let third = check(&p);
    assert!(third.stderr.contains(RESTORED) && third.stderr.contains("3 input(s) proven by their recorded stat, 0 to read"), "{}", third.stderr);
    let text = p.read("models/b.lua").replace("SELECT 2 AS x", "SELECT 7 AS x");
    write_keeping_mtime(&p, "models/b.lua", &text);
    let run = check(&p);
    assert!(!run.stderr.contains(RESTORED), "{}", run.stderr);
    assert_eq!(evaluated(&run), ["b"]);
    assert!(render(&p, "s.b").contains("7 AS x"));
    // A damaged input-stats file is never trusted: every input is read and hashed again.
    check(&p);
    p.write(".efmesh/input-stats", "efmesh-input-stats 1 garbage\n\u{0}");
    let run = check(&p);
    assert!(run.stderr.contains(RESTORED) && run.stderr.contains("0 input(s) proven by their recorded stat, 3 to read and hash"), "{}", run.stderr);
}

#[test]
fn a_new_a_deleted_file_and_a_module_appearing_in_front_are_seen() {
    let p = project();
    check(&p);
    p.write("models/c.lua", &lua_model("c", "s.c", "", "\"SELECT 3 AS x\""));
    let run = check(&p);
    assert!(!run.stderr.contains(RESTORED), "{}", run.stderr);
    assert!(render(&p, "s.c").contains("3 AS x"));
    p.remove("models/c.lua");
    check(&p);
    assert_eq!(p.run(&["render", "s.c"]).code, 1, "the deleted file's model is gone");
    // `require("lib.util")` from `models/a.lua` looks in `models/` first: a file there wins.
    check(&p);
    p.write("models/lib/util.lua", "return { n = 40 }\n");
    let run = check(&p);
    assert!(!run.stderr.contains(RESTORED), "{}", run.stderr);
    assert!(render(&p, "s.a").contains("40 AS x"));
}

#[test]
fn a_configuration_change_is_seen() {
    let p = project();
    check(&p);
    let config = p.read("efmesh.toml");
    // Discovery narrows to `a` only.
    p.write("efmesh.toml", &config.replace("models/**/*.lua", "models/a.lua"));
    let run = check(&p);
    assert!(!run.stderr.contains(RESTORED), "{}", run.stderr);
    assert_eq!(p.run(&["render", "s.b"]).code, 1, "`s.b` is no longer discovered");
}

#[test]
fn a_seed_edit_keeping_size_and_mtime_changes_the_plan() {
    let p = Project::new();
    p.write("seeds/t.csv", "id\n1\n2\n");
    p.write("models/seed.lua", "define_model { name = \"ref.t\", kind = kind.seed { path = \"seeds/t.csv\" }, schema = { { \"id\", \"integer\" } } }\n");
    p.apply("dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    write_keeping_mtime(&p, "seeds/t.csv", "id\n1\n3\n");
    assert_eq!(p.plan("dev")["hasChanges"], true);
}

#[test]
fn a_corrupt_or_foreign_cache_is_ignored_with_a_warning_and_rewritten() {
    let p = project();
    check(&p);
    let expected = render(&p, "s.a");
    let path = cache_path(&p);
    let mut bytes = fs_err::read(&path).unwrap();
    let body = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    for b in bytes[body..].iter_mut().step_by(5) {
        *b ^= 0x33;
    }
    fs_err::write(&path, &bytes).unwrap();
    let run = check(&p);
    let warning: Vec<&str> = run.stderr.lines().filter(|l| l.contains("ignoring the project cache")).collect();
    assert_eq!(warning.len(), 1, "one warning line:\n{}", run.stderr);
    assert!(warning[0].contains(".efmesh/project-cache") && warning[0].contains("corrupt"), "{}", warning[0]);
    assert!(!run.stderr.contains(RESTORED));
    assert_eq!(render(&p, "s.a"), expected);
    let again = check(&p);
    assert!(again.stderr.contains(RESTORED) && !again.stderr.contains("ignoring"), "rewritten:\n{}", again.stderr);

    // Another efmesh version's cache, garbage, an empty file.
    let bytes = fs_err::read(&path).unwrap();
    let nl = bytes.iter().position(|&b| b == b'\n').unwrap();
    let head = String::from_utf8(bytes[..nl].to_vec()).unwrap();
    let other: Vec<String> = head.split(' ').map(|w| if w.starts_with("efmesh=") { "efmesh=0.0.1-older".to_string() } else { w.to_string() }).collect();
    let mut out = other.join(" ").into_bytes();
    out.extend_from_slice(&bytes[nl..]);
    fs_err::write(&path, out).unwrap();
    let run = check(&p);
    assert!(run.stderr.contains("ignoring the project cache") && run.stderr.contains("another efmesh version"), "{}", run.stderr);
    for garbage in [&b"not a cache"[..], b""] {
        fs_err::write(&path, garbage).unwrap();
        let run = check(&p);
        assert!(run.stderr.contains("ignoring the project cache"), "{}", run.stderr);
        assert!(!run.stderr.contains(RESTORED));
    }
}

/// An edit made while the cache is being used never leaves a stale project behind: a file
/// changed between two commands (mtime in the past, same size) is always seen by the next one.
#[test]
fn repeated_edits_are_each_seen() {
    let p = project();
    check(&p);
    let old = SystemTime::now() - Duration::from_secs(3600);
    for n in 3..8 {
        let text = p.read("models/b.lua").replace(&format!("SELECT {} AS x", n - 1), &format!("SELECT {n} AS x"));
        let path = p.root().join("models/b.lua");
        fs_err::write(&path, &text).unwrap();
        fs_err::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(render(&p, "s.b").contains(&format!("{n} AS x")), "edit {n}");
    }
}
