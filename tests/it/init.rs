//! `efmesh init`: a scaffold that checks, plans and applies as is, with editor support, and
//! that never overwrites anything.

use std::process::{Command, Stdio};

fn efmesh(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_efmesh")).args(args).arg("--now").arg("2026-01-04T00:00:00Z").current_dir(dir).stdin(Stdio::null()).output().unwrap()
}

#[test]
fn init_scaffold_checks_plans_and_applies_as_is() {
    let tmp = tempfile::tempdir().unwrap();
    let out = efmesh(tmp.path(), &["init", "shop"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = tmp.path().join("shop");
    for f in ["efmesh.toml", "models/raw.lua", "models/mart.lua", "data/events.csv", ".luarc.json", ".efmesh/lua/efmesh.d.lua"] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    let luarc = fs_err::read_to_string(dir.join(".luarc.json")).unwrap();
    assert!(luarc.contains(".efmesh/lua"), "{luarc}");
    // The definitions `.luarc.json` points at are committed (a clone gets completion; `init`
    // cannot write them again), while efmesh's caches under `.efmesh/` are ignored.
    let gitignore = fs_err::read_to_string(dir.join(".gitignore")).unwrap();
    let lines: Vec<&str> = gitignore.lines().collect();
    assert!(lines.contains(&".efmesh/*") && lines.contains(&"!.efmesh/lua/"), "{gitignore}");
    assert!(!lines.iter().any(|l| [".efmesh", ".efmesh/"].contains(l)), "ignores the definitions: {gitignore}");
    // It checks clean: no error and no lint warning (a newcomer's first `check`).
    let check = efmesh(&dir, &["check"]);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success() && text.ends_with("ok: 4 models checked\n"), "{text}");
    let apply = efmesh(&dir, &["apply", "dev", "--yes", "--json"]);
    assert!(apply.status.success(), "{}", String::from_utf8_lossy(&apply.stderr));
    let v: serde_json::Value = serde_json::from_slice(&apply.stdout).unwrap();
    assert_eq!(v["built"], serde_json::json!(["stg.events", "mart.daily_revenue", "mart.region_revenue"]));
    // The published numbers of the scaffold: south 490 over 3 days, north 450 over 3 days.
    let mut db = efmesh::engine::duckdb::DuckDb::open(&dir.join("efmesh.duckdb"), &Default::default()).unwrap();
    let rows = efmesh::engine::Engine::query(&mut db, "SELECT region, revenue::VARCHAR, days::VARCHAR FROM dev__mart.region_revenue ORDER BY region").unwrap();
    assert_eq!(rows, vec![vec![Some("north".into()), Some("450".into()), Some("3".into())], vec![Some("south".into()), Some("490".into()), Some("3".into())],]);
}

#[test]
fn init_overwrites_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    fs_err::create_dir_all(tmp.path().join("models")).unwrap();
    fs_err::write(tmp.path().join("models/raw.lua"), "-- mine").unwrap();
    let out = efmesh(tmp.path(), &["init", "."]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(fs_err::read_to_string(tmp.path().join("models/raw.lua")).unwrap(), "-- mine");
    assert!(!tmp.path().join("efmesh.toml").exists(), "nothing else may be written");
}

/// The README's quickstart as a newcomer follows it: its model files are the scaffold's, and the
/// plans it prints are the ones these commands give.
#[test]
fn the_readme_shows_the_scaffold_and_the_plans_its_commands_give() {
    let readme = fs_err::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    // The text of the fenced block that starts with `start` (that line excluded).
    let block = |start: &str| -> String {
        let at = readme.find(start).unwrap_or_else(|| panic!("no README block starting {start:?}"));
        let body = &readme[at + start.len()..];
        body[..body.find("```").unwrap()].to_string()
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_efmesh"))
            .args(args)
            .args(["--now", "2026-11-30T12:00:00Z"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    run(tmp.path(), &["init", "shop"]);
    let dir = tmp.path().join("shop");
    for file in ["models/raw.lua", "models/mart.lua"] {
        assert_eq!(block(&format!("```lua\n-- {file}\n")), fs_err::read_to_string(dir.join(file)).unwrap(), "README's {file}");
    }
    assert_eq!(run(&dir, &["plan", "dev"]), block("A plan looks like this:\n\n```\n"));
    run(&dir, &["apply", "dev", "--yes"]);
    run(&dir, &["apply", "prod", "--yes"]);
    let mart = fs_err::read_to_string(dir.join("models/mart.lua")).unwrap();
    let edited = mart.replacen("{ \"revenue\", \"bigint\" } },\n  grain", "{ \"revenue\", \"bigint\" }, { \"sales\", \"bigint\" } },\n  grain", 1).replacen(
        "AS revenue\n",
        "AS revenue, count(*) AS sales\n",
        1,
    );
    assert_eq!(edited.matches("sales").count(), 2, "{edited}");
    fs_err::write(dir.join("models/mart.lua"), edited).unwrap();
    assert_eq!(run(&dir, &["plan", "dev", "--explain"]), block("```\n$ efmesh plan dev --explain\n"));
}

/// The scaffold's staging table re-reads the CSV on its daily cron: rows appended to
/// `data/events.csv` reach the marts at the next day's `run` (without the cron, `run` computed
/// the new day from the stale staging table and recorded it done with no rows).
#[test]
fn the_scaffold_runs_pick_up_rows_appended_to_its_csv() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(efmesh(tmp.path(), &["init", "shop"]).status.success());
    let dir = tmp.path().join("shop");
    let apply = efmesh(&dir, &["apply", "dev", "--yes"]);
    assert!(apply.status.success(), "{}", String::from_utf8_lossy(&apply.stderr));
    let mut csv = fs_err::OpenOptions::new().append(true).open(dir.join("data/events.csv")).unwrap();
    std::io::Write::write_all(&mut csv, b"2026-01-04 10:00:00,north,70\n").unwrap();
    drop(csv);
    let run = Command::new(env!("CARGO_BIN_EXE_efmesh"))
        .args(["run", "dev", "--now", "2026-01-05T00:30:00Z"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut db = efmesh::engine::duckdb::DuckDb::open(&dir.join("efmesh.duckdb"), &Default::default()).unwrap();
    let day =
        efmesh::engine::Engine::query(&mut db, "SELECT region, revenue::VARCHAR FROM dev__mart.daily_revenue WHERE day = TIMESTAMP '2026-01-04'").unwrap();
    assert_eq!(day, vec![vec![Some("north".into()), Some("70".into())]]);
    let rows = efmesh::engine::Engine::query(&mut db, "SELECT region, revenue::VARCHAR, days::VARCHAR FROM dev__mart.region_revenue ORDER BY region").unwrap();
    assert_eq!(rows, vec![vec![Some("north".into()), Some("520".into()), Some("4".into())], vec![Some("south".into()), Some("490".into()), Some("3".into())],]);
}

/// `init` writes `efmesh.toml` and reads no configuration: a `--config` it would ignore (the
/// next command given that path would find nothing there) is refused, exit 1, nothing written.
/// (`init` takes no `--json`: clap refuses that flag before the refusal of `--config` runs.)
#[test]
fn init_refuses_a_config_it_would_ignore() {
    let tmp = tempfile::tempdir().unwrap();
    let out = efmesh(tmp.path(), &["init", "proj", "--config", "proj/custom.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`--config proj/custom.toml`") && stderr.contains("nothing was done") && stderr.contains("hint:"), "{stderr}");
    assert!(stderr.contains("`efmesh init` writes its configuration as") && stderr.contains("so `--config` would be ignored"), "{stderr}");
    assert!(!tmp.path().join("proj").exists(), "nothing may be written");
    // Without `--config`, the same command writes the scaffold.
    assert!(efmesh(tmp.path(), &["init", "proj"]).status.success());
    assert!(tmp.path().join("proj/efmesh.toml").is_file());
}
