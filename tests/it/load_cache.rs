//! The persistent load cache (`.efmesh/load-cache` next to the state store) and per-file
//! isolated evaluation, driven through the binary. Every model file prints `EVAL <file>` when
//! it is evaluated (Lua `print` and Rhai `print` log on stderr), so a test sees which files a
//! command evaluated; `--log-level debug` adds the loader's own count.

use crate::common::{Project, check_debug as check, evaluated, printing_lua_model as lua_model, rendered as render};

/// `check` (which loads the project), which must succeed.
/// Three Lua models: `a` and `b` require `lib/util.lua` (outside the model globs), `c` does not.
fn project() -> Project {
    let p = Project::new();
    p.write("lib/util.lua", "return { n = 1 }\n");
    p.write("models/a.lua", &lua_model("a", "s.a", "local u = require(\"lib.util\")", "\"SELECT \" .. u.n .. \" AS x\""));
    p.write("models/b.lua", &lua_model("b", "s.b", "local u = require(\"lib.util\")", "\"SELECT \" .. (u.n + 10) .. \" AS x\""));
    p.write("models/c.lua", &lua_model("c", "s.c", "", "\"SELECT 3 AS x\""));
    p
}

fn cache_path(p: &Project) -> std::path::PathBuf {
    p.root().join(".efmesh/load-cache")
}

#[test]
fn an_unchanged_project_evaluates_no_script_on_the_second_command() {
    let p = project();
    let first = check(&p);
    assert_eq!(evaluated(&first), ["a", "b", "c"]);
    assert!(first.stderr.contains("load: 3 files evaluated, 0 from the cache"), "{}", first.stderr);
    assert!(cache_path(&p).is_file(), "the cache is written next to the state store");
    // Without the project cache (which would restore the whole project), the load cache alone.
    p.remove(".efmesh/project-cache");
    let second = check(&p);
    assert_eq!(evaluated(&second), Vec::<String>::new(), "{}", second.stderr);
    assert!(second.stderr.contains("load: 0 files evaluated, 3 from the cache"), "{}", second.stderr);
    // The plan of a cached load is the plan of an evaluated one.
    let plan_cached = p.plan("dev");
    fs_err::remove_dir_all(p.root().join(".efmesh")).unwrap();
    assert_eq!(p.plan("dev"), plan_cached);
}

#[test]
fn an_edit_in_a_required_lua_module_re_evaluates_exactly_its_importers() {
    let p = project();
    check(&p);
    p.write("lib/util.lua", "return { n = 5 }\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a", "b"], "{}", run.stderr);
    assert!(render(&p, "s.a").contains("5 AS x"), "the new module value is used");
    assert!(render(&p, "s.b").contains("15 AS x"));
    assert_eq!(evaluated(&check(&p)), Vec::<String>::new());
}

#[test]
fn an_edit_in_an_imported_rhai_module_re_evaluates_exactly_its_importers() {
    let p = Project::new();
    p.write("efmesh.toml", "[project]\nmodels = [\"models/**/*.rhai\"]\n");
    p.write("lib/u.rhai", "export const N = 1;\n");
    let model = |tag: &str, name: &str, import: bool, expr: &str| {
        let imp = if import { "import \"lib/u\" as u;\n" } else { "" };
        format!(
            "print(\"EVAL {tag}\");\n{imp}define_model(#{{ name: \"{name}\", kind: kind::full(), schema: [[\"x\", \"integer\"]], query: `SELECT ${{{expr}}} AS x` }});\n"
        )
    };
    p.write("models/a.rhai", &model("a", "s.a", true, "u::N"));
    p.write("models/b.rhai", &model("b", "s.b", true, "u::N + 10"));
    p.write("models/c.rhai", &model("c", "s.c", false, "3"));
    assert_eq!(evaluated(&check(&p)), ["a", "b", "c"]);
    assert_eq!(evaluated(&check(&p)), Vec::<String>::new());
    p.write("lib/u.rhai", "export const N = 7;\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a", "b"], "{}", run.stderr);
    assert!(render(&p, "s.b").contains("17 AS x"));
}

#[test]
fn editing_one_model_file_re_evaluates_only_it() {
    let p = project();
    check(&p);
    p.write("models/c.lua", &lua_model("c", "s.c", "", "\"SELECT 4 AS x\""));
    let run = check(&p);
    assert_eq!(evaluated(&run), ["c"], "{}", run.stderr);
    assert!(run.stderr.contains("load: 1 files evaluated, 2 from the cache"), "{}", run.stderr);
    assert!(render(&p, "s.c").contains("4 AS x"));
}

#[test]
fn a_new_file_and_a_deleted_file_are_seen() {
    let p = project();
    check(&p);
    p.write("models/e.lua", &lua_model("e", "s.e", "", "\"SELECT 5 AS x\""));
    let run = check(&p);
    assert_eq!(evaluated(&run), ["e"], "{}", run.stderr);
    assert!(render(&p, "s.e").contains("5 AS x"));
    p.remove("models/c.lua");
    let run = check(&p);
    assert_eq!(evaluated(&run), Vec::<String>::new());
    let gone = p.run(&["render", "s.c"]);
    assert_eq!(gone.code, 1, "a deleted file's model is gone: {}", gone.stdout);
    // A file appearing where `require` looks first changes the resolution.
    p.write("models/lib/util.lua", "return { n = 40 }\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a", "b"], "{}", run.stderr);
    assert!(render(&p, "s.a").contains("40 AS x"));
}

#[test]
fn a_corrupt_cache_is_ignored_with_a_warning_and_rewritten() {
    let p = project();
    check(&p);
    let expected = render(&p, "s.b");
    let path = cache_path(&p);
    let mut bytes = fs_err::read(&path).unwrap();
    let body = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    // Flip bytes in the body: the header's checksum no longer matches.
    for b in bytes[body..].iter_mut().step_by(7) {
        *b ^= 0x5a;
    }
    fs_err::write(&path, &bytes).unwrap();
    // The project cache would restore the project without reading the load cache.
    p.remove(".efmesh/project-cache");
    let run = check(&p);
    let warning: Vec<&str> = run.stderr.lines().filter(|l| l.contains("ignoring the load cache")).collect();
    assert_eq!(warning.len(), 1, "one warning line:\n{}", run.stderr);
    assert!(warning[0].contains(".efmesh/load-cache") && warning[0].contains("corrupt"), "{}", warning[0]);
    assert_eq!(evaluated(&run), ["a", "b", "c"], "nothing is trusted from a corrupt cache");
    assert_eq!(render(&p, "s.b"), expected);
    p.remove(".efmesh/project-cache");
    let again = check(&p);
    assert!(!again.stderr.contains("ignoring the load cache"), "the cache was rewritten:\n{}", again.stderr);
    assert_eq!(evaluated(&again), Vec::<String>::new());

    // Garbage and an empty file alike.
    fs_err::write(&path, b"not a cache at all").unwrap();
    p.remove(".efmesh/project-cache");
    let run = check(&p);
    assert!(run.stderr.contains("ignoring the load cache"), "{}", run.stderr);
    assert_eq!(evaluated(&run), ["a", "b", "c"]);
}

/// Rewrites one `key=value` word of the cache's header line.
fn edit_header(p: &Project, key: &str, value: &str) {
    let path = cache_path(p);
    // The project cache would restore the project without reading the load cache.
    let _ = fs_err::remove_file(p.root().join(".efmesh/project-cache"));
    let bytes = fs_err::read(&path).unwrap();
    let nl = bytes.iter().position(|&b| b == b'\n').unwrap();
    let head = String::from_utf8(bytes[..nl].to_vec()).unwrap();
    let prefix = format!("{key}=");
    assert!(head.contains(&prefix), "the header records {key}: {head}");
    let new: Vec<String> = head.split(' ').map(|w| if w.starts_with(&prefix) { format!("{prefix}{value}") } else { w.to_string() }).collect();
    let mut out = new.join(" ").into_bytes();
    out.extend_from_slice(&bytes[nl..]);
    fs_err::write(&path, out).unwrap();
}

#[test]
fn a_cache_from_another_efmesh_version_or_stdlib_re_evaluates_everything() {
    let p = project();
    check(&p);
    edit_header(&p, "efmesh", "0.0.1-older");
    let run = check(&p);
    assert!(run.stderr.contains("another efmesh version"), "{}", run.stderr);
    assert_eq!(evaluated(&run), ["a", "b", "c"]);
    p.remove(".efmesh/project-cache");
    assert_eq!(evaluated(&check(&p)), Vec::<String>::new(), "rewritten by this version");

    edit_header(&p, "stdlib", &"0".repeat(64));
    let run = check(&p);
    assert!(run.stderr.contains("another embedded stdlib"), "{}", run.stderr);
    assert_eq!(evaluated(&run), ["a", "b", "c"]);
}

/// A binary rebuilt from changed sources keeps its version number but not its build identity:
/// it trusts neither cache of the other build (its evaluation code may differ).
#[test]
fn a_cache_from_another_build_of_the_same_version_re_evaluates_everything() {
    let p = project();
    check(&p);
    edit_header(&p, "build", &"0".repeat(32));
    let run = check(&p);
    assert!(run.stderr.contains("another build of efmesh"), "{}", run.stderr);
    assert_eq!(evaluated(&run), ["a", "b", "c"]);
    p.remove(".efmesh/project-cache");
    assert_eq!(evaluated(&check(&p)), Vec::<String>::new(), "rewritten by this build");
}

#[test]
fn a_seed_edit_changes_the_plan() {
    let p = Project::new();
    p.write("seeds/t.csv", "id\n1\n2\n");
    p.write(
        "models/seed.lua",
        "print(\"EVAL seed\")\ndefine_model { name = \"ref.t\", kind = kind.seed { path = \"seeds/t.csv\" }, schema = { { \"id\", \"integer\" } } }\n",
    );
    p.apply("dev");
    assert_eq!(p.plan("dev")["hasChanges"], false);
    p.write("seeds/t.csv", "id\n1\n2\n3\n");
    let run = p.run(&["plan", "dev", "--json"]);
    run.expect_code(0);
    assert_eq!(evaluated(&run), Vec::<String>::new(), "the model file is cached; the seed is hashed again");
    assert_eq!(run.json()["hasChanges"], true, "{}", run.stdout);
}

#[test]
fn a_file_mutating_a_required_modules_table_does_not_affect_another_file() {
    let p = Project::new();
    p.write("lib/shared.lua", "return { n = 1 }\n");
    // `a` is evaluated first (files are sorted) and mutates the module's table.
    p.write("models/a.lua", &lua_model("a", "s.a", "local s = require(\"lib.shared\")\ns.n = 99", "\"SELECT 1 AS x\""));
    p.write("models/b.lua", &lua_model("b", "s.b", "local s = require(\"lib.shared\")", "\"SELECT \" .. s.n .. \" AS x\""));
    check(&p);
    assert!(render(&p, "s.b").contains("1 AS x"), "b sees the module as it evaluates, not as a left it");
    // Evaluated alone after an edit of b, the result is the same.
    p.write("models/b.lua", &lua_model("b", "s.b", "local s = require(\"lib.shared\")", "\"SELECT \" .. s.n .. \" AS x \""));
    let run = check(&p);
    assert_eq!(evaluated(&run), ["b"]);
    assert!(render(&p, "s.b").contains("1 AS x"));
}

#[test]
fn a_model_a_required_module_defines_is_merged_but_a_real_duplicate_is_an_error() {
    let p = Project::new();
    // `models/a.lua` defines `s.a`; `b` and `c` require it: one model, seen in three evaluations.
    p.write("models/a.lua", "return define_model { name = \"s.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    for f in ["b", "c"] {
        p.write(&format!("models/{f}.lua"), &lua_model(f, &format!("s.{f}"), "local a = require(\"a\")", "\"SELECT x FROM \" .. ref(a)"));
    }
    check(&p);
    p.write("models/d.lua", "define_model { name = \"s.a\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 2 AS x\" }\n");
    let run = p.run(&["check"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(all.contains("s.a") && all.contains("models/d.lua"), "{all}");
}

/// `pcall(require, ...)` of a module that does not exist yet: the paths `require` tried are
/// inputs, so creating the module invalidates the cached result.
#[test]
fn a_lua_module_created_after_a_failed_require_is_seen() {
    let p = Project::new();
    p.write("models/a.lua", &lua_model("a", "s.a", "local ok, o = pcall(require, \"overrides\")\nlocal n = ok and o.n or 1", "\"SELECT \" .. n .. \" AS x\""));
    check(&p);
    assert!(render(&p, "s.a").contains("1 AS x"));
    p.write("overrides.lua", "return { n = 7 }\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a"], "{}", run.stderr);
    assert!(render(&p, "s.a").contains("7 AS x"), "the new module is used");
}

/// The Rhai counterpart: `try { import … } catch {}` of a file that does not exist yet.
#[test]
fn a_rhai_module_created_after_a_failed_import_is_seen() {
    let p = Project::new();
    p.write("efmesh.toml", "[project]\nmodels = [\"models/**/*.rhai\"]\n");
    p.write(
        "models/r.rhai",
        "print(\"EVAL r\");\nlet n = 1;\ntry { import \"overrides\" as o; n = o::N; } catch {}\ndefine_model(#{ name: \"s.r\", kind: kind::full(), schema: [[\"x\", \"integer\"]], query: `SELECT ${n} AS x` });\n",
    );
    check(&p);
    assert!(render(&p, "s.r").contains("1 AS x"));
    p.write("overrides.rhai", "export const N = 7;\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["r"], "{}", run.stderr);
    assert!(render(&p, "s.r").contains("7 AS x"), "the new module is used");
}

/// Audit definitions are seen by every model file: editing one re-evaluates every model file.
#[test]
fn an_edit_in_an_audit_definition_file_re_evaluates_the_model_files() {
    let p = project();
    let audit = |q: &str| format!("define_audit {{ name = \"mine\", params = {{ \"column\" }}, query = function(self, a) return '{q} ' .. self end }}\n");
    p.write("audits/mine.lua", &audit("SELECT * FROM"));
    let first = check(&p);
    assert_eq!(evaluated(&first), ["a", "b", "c"]);
    assert_eq!(evaluated(&check(&p)), Vec::<String>::new());
    p.write("audits/mine.lua", &audit("SELECT 1 FROM"));
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a", "b", "c"], "{}", run.stderr);
}

/// Discovery resolves only what it reached through a symbolic link: a model file under a
/// directory linked out of the project is refused, one linked inside the project is loaded.
#[cfg(unix)]
#[test]
fn discovery_refuses_model_files_reached_through_a_directory_link_out_of_the_project() {
    let outside = tempfile::tempdir().unwrap();
    fs_err::write(outside.path().join("x.lua"), lua_model("x", "s.x", "", "\"SELECT 1 AS x\"")).unwrap();
    let p = project();
    std::os::unix::fs::symlink(outside.path(), p.root().join("models/ext")).unwrap();
    let run = p.run(&["check"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(all.contains("models/ext/x.lua") && all.contains("resolves outside the project"), "{all}");
    fs_err::remove_file(p.root().join("models/ext")).unwrap();
    // A directory linked inside the project is walked like any other.
    p.write("shared/y.lua", &lua_model("y", "s.y", "", "\"SELECT 2 AS x\""));
    std::os::unix::fs::symlink(p.root().join("shared"), p.root().join("models/inner")).unwrap();
    check(&p);
    assert!(render(&p, "s.y").contains("2 AS x"));
}

/// A module an audit definition file requires is kept for every model file (evaluated once);
/// a model file that requires it too is cached under the bytes that module was evaluated from,
/// so an unchanged project evaluates nothing, and an edit of the module re-evaluates everything.
#[test]
fn a_lua_module_shared_with_an_audit_file_keeps_its_importers_cached() {
    let p = project();
    p.write(
        "audits/mine.lua",
        "local u = require(\"lib.util\")\ndefine_audit { name = \"mine\", query = function(self) return 'SELECT ' .. u.n .. ' FROM ' .. self end }\n",
    );
    assert_eq!(evaluated(&check(&p)), ["a", "b", "c"]);
    assert!(p.root().join(".efmesh/project-cache").is_file(), "every input was hashed, so the project cache is stored");
    p.remove(".efmesh/project-cache");
    let run = check(&p);
    assert_eq!(evaluated(&run), Vec::<String>::new(), "{}", run.stderr);
    assert!(run.stderr.contains("load: 0 files evaluated, 4 from the cache"), "{}", run.stderr);
    p.write("lib/util.lua", "return { n = 6 }\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a", "b", "c"], "{}", run.stderr);
    assert!(render(&p, "s.b").contains("16 AS x"), "the new module value is used");
}

/// As above, for a Rhai module an audit definition file imports.
#[test]
fn a_rhai_module_shared_with_an_audit_file_keeps_its_importers_cached() {
    let p = Project::new();
    p.write("efmesh.toml", "[project]\nmodels = [\"models/**/*.rhai\"]\n");
    p.write("lib/u.rhai", "export const N = 1;\n");
    p.write("audits/mine.rhai", "import \"lib/u\" as u;\ndefine_audit(#{ name: \"mine\", query: |rel, args| `SELECT ${u::N} FROM ${rel}` });\n");
    let model = |tag: &str, name: &str, expr: &str| {
        format!(
            "print(\"EVAL {tag}\");\nimport \"lib/u\" as u;\ndefine_model(#{{ name: \"{name}\", kind: kind::full(), schema: [[\"x\", \"integer\"]], query: `SELECT ${{{expr}}} AS x` }});\n"
        )
    };
    p.write("models/a.rhai", &model("a", "s.a", "u::N"));
    p.write("models/b.rhai", &model("b", "s.b", "u::N + 10"));
    assert_eq!(evaluated(&check(&p)), ["a", "b"]);
    assert!(p.root().join(".efmesh/project-cache").is_file(), "every input was hashed, so the project cache is stored");
    p.remove(".efmesh/project-cache");
    let run = check(&p);
    assert_eq!(evaluated(&run), Vec::<String>::new(), "{}", run.stderr);
    assert!(run.stderr.contains("load: 0 files evaluated, 3 from the cache"), "{}", run.stderr);
    p.write("lib/u.rhai", "export const N = 7;\n");
    let run = check(&p);
    assert_eq!(evaluated(&run), ["a", "b"], "{}", run.stderr);
    assert!(render(&p, "s.b").contains("17 AS x"));
}
