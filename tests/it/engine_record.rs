//! The engine-catalog record (SPEC §4, invariant 27): a plan of a DuckDB file nobody touched
//! since efmesh last read its catalog takes the catalog from the record; a relation dropped by
//! another process — in place, with the file's modification time put back, or by replacing the
//! file with a copy carrying the same modification time — is still found missing.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

const FROM_RECORD: &str = "taken from";
const QUERIED: &str = "queried and recorded";
const SKIPPED: &str = "engine check skipped";

/// `plan dev --json` at debug level: the plan and what stderr says about the catalog.
fn plan_debug(p: &Project) -> (Value, String) {
    let r = p.run(&["--log-level", "debug", "plan", "dev", "--json"]);
    r.expect_code(0);
    (r.json(), r.stderr)
}

/// The physical relation (`"_efmesh"."…"`) of the full model `s.a` in `plan`.
fn physical_of_a(plan: &Value) -> String {
    action(plan, "s.a")["physical"].as_str().expect("s.a has a physical relation").to_string()
}

/// Drops `relation` in the DuckDB file at `path` through the duckdb crate (another process's
/// view of the file: efmesh is not involved) and closes it.
fn drop_table(path: &Path, relation: &str) {
    let conn = duckdb::Connection::open(path).expect("open duckdb");
    conn.execute_batch(&format!("DROP TABLE {relation}")).expect("drop");
    drop(conn);
}

fn set_mtime(path: &Path, t: std::time::SystemTime) {
    fs_err::File::options().write(true).open(path).expect("open").set_modified(t).expect("set mtime");
}

/// Applies the sample project to dev and plans it twice: the second plan must use the record.
fn recorded_project() -> (Project, String) {
    let p = sample_project();
    let applied = p.apply("dev");
    let physical = physical_of_a(&applied["plan"]);
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(stderr.contains(FROM_RECORD), "apply records the catalog it left, so this plan reads the record:\n{stderr}");
    assert!(p.root().join(".efmesh/engine-catalog").exists());
    (p, physical)
}

#[test]
fn an_unchanged_engine_file_is_planned_from_the_record_and_a_missing_record_is_queried_again() {
    let (p, _) = recorded_project();
    // Without the record of the last clean check either (see the next test).
    p.remove(".efmesh/engine-catalog");
    p.remove(".efmesh/plan-check");
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(stderr.contains(QUERIED) && !stderr.contains(FROM_RECORD), "{stderr}");
    p.remove(".efmesh/plan-check");
    let (_, stderr) = plan_debug(&p);
    assert!(stderr.contains(FROM_RECORD), "{stderr}");
}

/// A replayed no-op plan found clean against the engine file is not checked again while the
/// file keeps its identity (`.efmesh/plan-check`, SPEC §4 invariant 38); a table dropped in
/// place, the file's modification time put back, is found missing all the same.
#[test]
fn a_clean_replayed_plan_is_not_checked_again_until_the_engine_file_changes() {
    let (p, physical) = recorded_project();
    assert!(p.root().join(".efmesh/plan-check").exists(), "the clean check is recorded");
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(stderr.contains(SKIPPED) && !stderr.contains(FROM_RECORD) && !stderr.contains(QUERIED), "{stderr}");
    let engine = p.engine_path();
    let mtime = fs_err::metadata(&engine).expect("stat").modified().expect("mtime");
    drop_table(&engine, &physical);
    set_mtime(&engine, mtime);
    let (plan, stderr) = plan_debug(&p);
    assert!(!stderr.contains(SKIPPED), "the file changed: {stderr}");
    assert_eq!(action(&plan, "s.a")["repair"]["physicalMissing"], true, "{plan:#}");
    // A token that is not this plan's is never trusted.
    p.apply("dev");
    p.write(".efmesh/plan-check", "0000\n");
    let (_, stderr) = plan_debug(&p);
    assert!(!stderr.contains(SKIPPED), "{stderr}");
}

/// The token of a clean replayed plan also stands for its rebuild marks (none), which read the
/// state store: a store put in place of the file (here a copy of the same store) is another
/// store for the token, so the next plan marks and checks again (SPEC §4 invariant 40).
#[test]
fn a_state_store_put_in_place_of_the_file_is_marked_and_checked_again() {
    let (p, _) = recorded_project();
    let (_, stderr) = plan_debug(&p);
    assert!(stderr.contains(SKIPPED), "{stderr}");
    let state = p.state_path();
    let copy = p.root().join("copy.sqlite");
    fs_err::copy(&state, &copy).expect("copy the store");
    fs_err::rename(&copy, &state).expect("put the copy in place");
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(!stderr.contains(SKIPPED), "another store file: {stderr}");
    let (_, stderr) = plan_debug(&p);
    assert!(stderr.contains(SKIPPED), "found clean again, recorded again: {stderr}");
}

#[test]
fn a_table_dropped_in_place_by_another_process_is_found_even_with_its_mtime_put_back() {
    let (p, physical) = recorded_project();
    let engine = p.engine_path();
    let mtime = fs_err::metadata(&engine).expect("stat").modified().expect("mtime");
    drop_table(&engine, &physical);
    set_mtime(&engine, mtime);

    let (plan, stderr) = plan_debug(&p);
    assert!(!stderr.contains(FROM_RECORD), "the file changed: the record must not be used\n{stderr}");
    assert_eq!(plan["hasChanges"], true, "{plan:#}");
    assert_eq!(action(&plan, "s.a")["repair"]["physicalMissing"], true, "{plan:#}");
    assert!(stderr.contains(&physical) && stderr.contains("is missing"), "{stderr}");
    // Restored by apply, and recorded again.
    p.apply("dev");
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(stderr.contains(FROM_RECORD), "{stderr}");
}

#[test]
fn a_file_replaced_by_a_copy_lacking_a_table_is_found_even_with_the_same_mtime() {
    let (p, physical) = recorded_project();
    let engine = p.engine_path();
    let mtime = fs_err::metadata(&engine).expect("stat").modified().expect("mtime");
    // Another tool prepares a copy without the table and moves it into place.
    let copy = p.root().join("copy.duckdb");
    fs_err::copy(&engine, &copy).expect("copy");
    drop_table(&copy, &physical);
    set_mtime(&copy, mtime);
    fs_err::rename(&copy, &engine).expect("replace");

    let (plan, stderr) = plan_debug(&p);
    assert!(!stderr.contains(FROM_RECORD), "{stderr}");
    assert_eq!(action(&plan, "s.a")["repair"]["physicalMissing"], true, "{plan:#}");
    assert!(stderr.contains(&physical) && stderr.contains("is missing"), "{stderr}");
}

#[test]
fn a_corrupt_record_is_ignored() {
    let (p, physical) = recorded_project();
    drop_table(&p.engine_path(), &physical);
    // A record claiming the current identity but with a damaged body is not trusted.
    let record = p.root().join(".efmesh/engine-catalog");
    let text = fs_err::read(&record).expect("record");
    let mut lines: Vec<&[u8]> = text.splitn(5, |b| *b == b'\n').collect();
    let identity = efmesh::engine::record::identity(&p.engine_path()).expect("identity");
    lines[2] = identity.as_bytes();
    let body = lines[4].to_vec();
    let damaged: Vec<u8> = body.iter().map(|b| if *b == b'a' { b'b' } else { *b }).collect();
    lines[4] = &damaged;
    fs_err::write(&record, lines.join(&b'\n')).expect("write");

    let r = p.run(&["--log-level", "debug", "plan", "dev", "--json"]);
    r.expect_code(0);
    assert!(r.stderr.contains("corrupt") && !r.stderr.contains(FROM_RECORD), "{}", r.stderr);
    assert_eq!(action(&r.json(), "s.a")["repair"]["physicalMissing"], true);
}

/// The size, inode, modification and status-change times of `path`.
fn file_stat(path: &Path) -> (u64, u64, i64, i64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs_err::metadata(path).expect("stat");
    (m.size(), m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
}

/// The token of a clean replayed plan stands for its rebuild marks, which read the other
/// environments' pointers (a table another environment's version shares, SPEC §4 invariant
/// 36 (e)). A change of those pointers that moves neither the store's generation nor its file
/// (here written into the write-ahead log by a connection that stays open, so the store file
/// keeps its stat, as while another efmesh process holds the store) must still end the token
/// (invariant 40).
#[test]
fn another_environments_pointers_changing_under_an_unchanged_store_file_end_the_token() {
    let (p, _) = recorded_project();
    let (_, stderr) = plan_debug(&p);
    assert!(stderr.contains(SKIPPED), "{stderr}");
    let state = p.state_path();
    let before = file_stat(&state);
    let conn = rusqlite::Connection::open(&state).expect("open state");
    conn.pragma_update(None, "wal_autocheckpoint", 0).expect("no checkpoint");
    let added = conn
        .execute("INSERT INTO environments (env, name, fingerprint, promoted_at, metadata) SELECT 'qa', name, fingerprint, promoted_at, metadata FROM environments WHERE env = 'dev'", [])
        .expect("another environment's pointers");
    assert!(added > 0);
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(file_stat(&state), before, "the store file kept its stat: only the pointers can end the token");
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(!stderr.contains(SKIPPED), "another environment's pointers changed: {stderr}");
    drop(conn);
}

#[test]
fn apply_records_the_catalog_from_its_own_connection_exactly_as_a_fresh_query_reads_it() {
    let p = sample_project();
    let r = p.run(&["--log-level", "debug", "apply", "dev", "--yes"]);
    r.expect_code(0);
    // No second open of the file after the apply: its own connection read and recorded it.
    assert!(r.stderr.contains("read on the apply's connection and recorded"), "{}", r.stderr);
    assert!(!r.stderr.contains(QUERIED), "{}", r.stderr);
    let record = p.root().join(".efmesh/engine-catalog");
    let from_apply = fs_err::read(&record).expect("the apply wrote the record");
    // The same bytes (identity and catalog) as a read-only query of the closed file records.
    p.remove(".efmesh/engine-catalog");
    let _ = fs_err::remove_file(p.root().join(".efmesh/plan-check"));
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(stderr.contains(QUERIED), "{stderr}");
    assert_eq!(fs_err::read(&record).expect("the plan wrote the record"), from_apply, "the apply recorded another catalog or identity than the file has");
    // And the next plan reads it.
    let _ = fs_err::remove_file(p.root().join(".efmesh/plan-check"));
    let (_, stderr) = plan_debug(&p);
    assert!(stderr.contains(FROM_RECORD), "{stderr}");
}

/// While the apply reads the catalog it records and closes its connection, DuckDB's lock on the
/// file holds: another process cannot open it for writing (identities are taken by `stat` while
/// the connection is open; opening and closing the file would release the process's lock).
#[test]
fn the_engine_file_stays_locked_until_the_apply_closes_its_connection() {
    let p = sample_project();
    let (code, seen) = run_held(
        &p,
        &["apply", "dev", "--yes"],
        "apply-before-close=1500",
        |l| l.contains("closing its connections"),
        |_| {
            // Inside the window: a writer from another process is refused.
            let other = duckdb::Connection::open(p.root().join("efmesh.duckdb"));
            assert!(other.is_err(), "another process opened the engine file while the apply still held it");
        },
    );
    assert_eq!(code, Some(0), "{seen}");
    assert!(seen.contains("read on the apply's connection and recorded"), "{seen}");
}

/// Runs efmesh with `args` at debug level (logfmt) and the test hook `EFMESH_DELAY=delay`;
/// once a stderr line satisfies `reached` (asserted to come), runs `meanwhile` with what stderr
/// said so far, then waits for the process: its exit code and all it wrote on stderr.
pub(crate) fn run_held(p: &Project, args: &[&str], delay: &str, reached: impl Fn(&str) -> bool, meanwhile: impl FnOnce(&str)) -> (Option<i32>, String) {
    use std::io::BufRead;
    let mut cmd = p.command(&[&["--log-level", "debug", "--log-format", "logfmt"][..], args].concat());
    cmd.env("EFMESH_DELAY", delay).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn efmesh");
    let mut lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = String::new();
    let mut came = false;
    for l in lines.by_ref().map_while(Result::ok) {
        seen.push_str(&l);
        seen.push('\n');
        if reached(&l) {
            came = true;
            break;
        }
    }
    assert!(came, "efmesh {} never reached the awaited line:\n{seen}", args.join(" "));
    meanwhile(&seen);
    for l in lines.map_while(Result::ok) {
        seen.push_str(&l);
        seen.push('\n');
    }
    (child.wait().expect("wait").code(), seen)
}

const AT_OPEN: &str = "engine catalog at the open: as this process read it for the plan";
/// Logged where the check uses that catalog instead of a query.
const USED: &str = "the plan checked against the catalog proven at the open";
/// The catalog query a DuckDB connection runs (`Engine::catalog`) and the query of the views'
/// definitions a promotion records its undo from.
const CATALOG_QUERY: &str = "FROM duckdb_views() WHERE database_name = current_database() AND NOT internal AND NOT temporary";
const DEFINITIONS_QUERY: &str = "SELECT schema_name, view_name, sql FROM duckdb_views()";

/// `apply prod` right after `apply dev` (a view swap): the plan reads the catalog from the
/// record, and the apply's connection, finding the file unchanged since, neither queries the
/// catalog again for its check nor the views' definitions for its undo — it queries the
/// catalog once, after the swap, for the record. The promotion serves what its pointers say.
#[test]
fn an_apply_of_an_engine_file_unchanged_since_its_plan_takes_the_catalog_the_plan_read() {
    let (p, _) = recorded_project();
    let r = p.run(&["--log-level", "debug", "apply", "prod", "--yes"]);
    r.expect_code(0);
    assert!(r.stderr.contains(FROM_RECORD), "{}", r.stderr);
    assert!(r.stderr.contains(AT_OPEN) && r.stderr.contains(USED), "{}", r.stderr);
    assert_eq!(r.stderr.matches(CATALOG_QUERY).count(), 1, "one catalog query, for the record after the swap:\n{}", r.stderr);
    assert!(!r.stderr.contains(DEFINITIONS_QUERY), "{}", r.stderr);
    crate::env_consistency::assert_views_serve_pointers(&p, "prod");
    assert_eq!(p.plan("prod")["hasChanges"], false);
}

/// Runs `apply prod` stopped at the test hook `point` (after its plan read the record), drops
/// the physical table of `s.a` from another process while it waits there, and returns what
/// the apply printed on stderr once it went on.
fn apply_prod_with_a_table_dropped_at(p: &Project, physical: &str, point: &str) -> (Option<i32>, String) {
    let at = format!("point={point}");
    run_held(
        p,
        &["apply", "prod", "--yes"],
        &format!("{point}=1500"),
        |l| l.contains("test hook: delaying") && l.contains(&at),
        |seen| {
            assert!(seen.contains(FROM_RECORD), "the plan did not read the record:\n{seen}");
            drop_table(&p.engine_path(), physical);
        },
    )
}

/// A table dropped by another process after the plan read the record — before the apply
/// proves the file unchanged, or between that proof and its open — is found missing by the
/// apply on its own connection: it refuses, naming it, and nothing is promoted.
#[test]
fn a_table_dropped_between_the_plan_and_the_apply_is_found_by_the_apply() {
    for point in ["apply-after-plan", "apply-before-open"] {
        let (p, physical) = recorded_project();
        let (code, seen) = apply_prod_with_a_table_dropped_at(&p, &physical, point);
        assert_eq!(code, Some(1), "{point}: {seen}");
        assert!(!seen.contains(AT_OPEN), "{point}: the file changed after the plan: its catalog must not be taken\n{seen}");
        assert!(seen.contains("does not hold what this plan of `prod` relies on") && seen.contains(&physical), "{point}: {seen}");
        assert!(p.store().expect("store").env_pointers("prod").expect("pointers").is_empty(), "{point}: nothing promoted");
    }
}

/// `run` as `apply`: its connection takes the catalog its plan read from the record (the file
/// unchanged since the apply recorded it), and it records the catalog it leaves, so the next
/// plan reads the record instead of opening DuckDB.
#[test]
fn a_run_takes_the_catalog_its_plan_read_and_records_the_one_it_leaves() {
    let (mut p, _) = recorded_project();
    // Two days later: `t.daily` has new intervals, which the run writes.
    p.now = "2026-02-12T00:00:00Z".to_string();
    // Without the token of the last clean check, the run's plan reads the catalog (from the record).
    let _ = fs_err::remove_file(p.root().join(".efmesh/plan-check"));
    let record = p.root().join(".efmesh/engine-catalog");
    let before = fs_err::read_to_string(&record).expect("the apply's record");
    let r = p.run(&["--log-level", "debug", "run", "dev"]);
    r.expect_code(0);
    assert!(r.stderr.contains(FROM_RECORD) && r.stderr.contains(USED), "{}", r.stderr);
    assert!(r.stderr.contains("read on the apply's connection and recorded"), "{}", r.stderr);
    // The run wrote the file: the record is a new one.
    assert_ne!(fs_err::read_to_string(&record).expect("the run's record"), before, "the run recorded nothing");
    let _ = fs_err::remove_file(p.root().join(".efmesh/plan-check"));
    let (plan, stderr) = plan_debug(&p);
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    assert!(stderr.contains(FROM_RECORD) && !stderr.contains(QUERIED), "{stderr}");
}
