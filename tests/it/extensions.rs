//! Offline DuckDB extensions: `[engine] extension_directory`, `load`, per-extension files, and
//! the error a missing extension gives. The directory comes from `scripts/provision-extensions`
//! (PyPI wheels `duckdb-extension-<name>==1.5.5`), which `scripts/test` runs and exports as
//! `EFMESH_EXTENSION_DIRECTORY`.

use crate::common::*;
use std::path::PathBuf;

/// The provisioned directory; the suite is meant to run through `scripts/test`.
fn provisioned() -> PathBuf {
    let dir = std::env::var_os("EFMESH_EXTENSION_DIRECTORY")
        .map(PathBuf::from)
        .expect("EFMESH_EXTENSION_DIRECTORY is unset: run the suite with scripts/test, which provisions it");
    assert!(dir.join("v1.5.5/linux_amd64/sqlite_scanner.duckdb_extension").is_file(), "{} is not provisioned", dir.display());
    dir
}

/// A project with one model reading a SQLite file through `sqlite_scan` (extension
/// `sqlite_scanner`), and the given `[engine]` extra lines.
fn sqlite_project(engine_extra: &str) -> Project {
    let p = Project::new();
    let db = p.root().join("data/src.sqlite");
    fs_err::create_dir_all(db.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE t (id INTEGER, label TEXT); INSERT INTO t VALUES (1, 'one'), (2, 'two');").unwrap();
    drop(conn);
    p.write("efmesh.toml", &format!("[project]\nmodels = [\"models/**/*.lua\"]\n\n[engine]\npath = \"efmesh.duckdb\"\n{engine_extra}\n"));
    p.write(
        "models/m.lua",
        r#"define_model {
  name = "s.from_sqlite",
  kind = kind.full(),
  schema = { { "id", "bigint" }, { "label", "varchar" } },
  query = "SELECT CAST(id AS BIGINT) AS id, label FROM sqlite_scan('data/src.sqlite', 't')",
}
"#,
    );
    p
}

#[test]
fn an_extension_autoloads_from_the_configured_directory() {
    let dir = provisioned();
    let p = sqlite_project(&format!("extension_directory = {:?}", dir.to_string_lossy()));
    let v = p.apply("prod");
    assert_eq!(string_set(&v["built"]), set(&["s.from_sqlite"]));
    let rows = p.query("SELECT id, label FROM s.from_sqlite ORDER BY id");
    assert_eq!(rows, vec![vec![Some("1".into()), Some("one".into())], vec![Some("2".into()), Some("two".into())]]);
}

#[test]
fn an_extension_file_path_is_loaded_even_with_an_empty_directory() {
    let file = provisioned().join("v1.5.5/linux_amd64/sqlite_scanner.duckdb_extension");
    let p = sqlite_project(&format!(
        "extension_directory = \"empty-ext\"\nload = [\"sqlite_scanner\"]\n\n[engine.extensions]\nsqlite_scanner = {:?}",
        file.to_string_lossy()
    ));
    fs_err::create_dir_all(p.root().join("empty-ext")).unwrap();
    let v = p.apply("prod");
    assert_eq!(string_set(&v["built"]), set(&["s.from_sqlite"]));
}

#[test]
fn a_missing_extension_names_the_expected_file_and_changes_nothing() {
    let p = sqlite_project("extension_directory = \"empty-ext\"\nload = [\"ducklake\"]");
    fs_err::create_dir_all(p.root().join("empty-ext")).unwrap();
    let run = p.run(&["apply", "prod", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("ducklake.duckdb_extension"), "{}", run.stderr);
    assert!(run.stderr.contains("empty-ext/v1.5.5/"), "{}", run.stderr);
    assert!(run.stderr.contains("provision-extensions"), "{}", run.stderr);
    assert_eq!(p.state_summary(), StateSummary::default());
}

#[test]
fn without_a_directory_efmesh_never_downloads_when_one_is_set_by_environment() {
    // An empty EFMESH_EXTENSION_DIRECTORY-style directory: sqlite_scan cannot autoload, and
    // autoinstall is off, so the build fails fast instead of reaching for the network.
    let p = sqlite_project("");
    let empty = p.root().join("no-ext");
    fs_err::create_dir_all(&empty).unwrap();
    let out = p.command(&["apply", "prod", "--yes"]).env("EFMESH_EXTENSION_DIRECTORY", &empty).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sqlite"), "{stderr}");
}
