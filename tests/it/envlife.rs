//! The lifecycle of environments (issue #16 part 6): `[environments] ttl` expiry, `efmesh
//! invalidate`, and the janitor dropping expired environments (their views and schemas, their
//! state, then the storage only they used), never `prod`, never one whose lock is held.
//!
//! A promotion records the real instant; these tests move the janitor's and the commands'
//! "now" with `--now` (the hidden global flag `EFMESH_NOW` sets) relative to it.

use crate::common::*;
use crate::run_journal::FAILS_FROM_THE_4TH;
use efmesh::core::interval::{now_millis, to_iso};
use serde_json::Value;
use std::collections::BTreeSet;

const DAY: i64 = 86_400_000;

/// `s.m` (full, `SELECT <v> AS x`) and `s.v` (view over it).
fn models(v: i64) -> String {
    format!(
        r#"define_model {{ name = "s.m", kind = kind.full(), schema = {{ {{ "x", "bigint" }} }}, query = "SELECT CAST({v} AS BIGINT) AS x" }}
define_model {{ name = "s.v", kind = kind.view(), schema = {{ {{ "x", "bigint" }} }}, query = "SELECT x FROM " .. ref("s.m") }}
"#
    )
}

fn project(config_extra: &str) -> Project {
    let mut p = Project::new();
    // Versions and promotions record the real instant: the commands run a minute after it.
    p.now = to_iso(now_millis() + 60_000);
    p.write("efmesh.toml", &p.config_with(config_extra));
    p.write("models/m.lua", &models(1));
    p
}

/// Runs `args` with `--now` set to `now`.
fn at(p: &mut Project, now: i64, args: &[&str]) -> Run {
    let saved = std::mem::replace(&mut p.now, to_iso(now));
    let r = p.run(args);
    p.now = saved;
    r
}

/// The `"<schema>"."<table>"` names of the relations in schemas starting with `prefix`.
fn relations_in(p: &Project, prefix: &str) -> BTreeSet<String> {
    p.all_relations().into_iter().filter(|r| r.starts_with(prefix)).collect()
}

/// Every schema of the DuckDB file.
fn schemas(p: &Project) -> BTreeSet<String> {
    p.query("SELECT schema_name FROM duckdb_schemas() WHERE database_name = current_database()").into_iter().map(|r| r[0].clone().unwrap()).collect()
}

/// The relation name inside a quoted physical name.
fn table_name(physical: &str) -> String {
    physical.rsplit("\".\"").next().unwrap().trim_matches('"').to_string()
}

fn physical_of(applied: &Value, model: &str) -> String {
    table_name(action(applied, model)["physical"].as_str().unwrap_or_else(|| panic!("no physical for {model}")))
}

#[test]
fn an_environment_past_its_ttl_is_dropped_with_what_only_it_used_and_one_within_it_is_kept() {
    let mut p = project("\n[environments]\nttl = \"7d\"\n");
    let prod = p.apply("prod");
    p.write("models/m.lua", &models(2));
    let dev = p.apply("dev");
    let applied = now_millis();
    let (prod_tables, dev_tables) = ([physical_of(&prod, "s.m"), physical_of(&prod, "s.v")], [physical_of(&dev, "s.m"), physical_of(&dev, "s.v")]);
    assert_eq!(relations_in(&p, "dev__s."), BTreeSet::from(["dev__s.m".to_string(), "dev__s.v".to_string()]));

    // A day later: within its ttl. status says when it expires; the janitor keeps it.
    let status = at(&mut p, applied + DAY, &["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["expiry"]["expired"], Value::Bool(false), "{status:#}");
    assert_eq!(status["expiry"]["reason"], "ttl");
    let kept = at(&mut p, applied + DAY, &["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert!(kept["environments"].as_array().unwrap().is_empty(), "{kept:#}");
    assert!(p.store().unwrap().environments().unwrap().contains(&"dev".to_string()));
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);

    // Eight days later it expired: plan and status say so; a dry run lists it and changes nothing.
    let later = applied + 8 * DAY;
    let plan = at(&mut p, later, &["plan", "dev", "--json"]).expect_code(0).json();
    assert_eq!((plan["expired"].clone(), plan["expiry"]["reason"].clone()), (Value::Bool(true), Value::from("ttl")), "{plan:#}");
    assert_eq!(at(&mut p, later, &["status", "dev", "--json"]).json()["expiry"]["expired"], Value::Bool(true));
    assert_eq!(at(&mut p, later, &["status", "prod", "--json"]).json()["expiry"]["expired"], Value::Bool(false), "prod never expires");
    let summary = p.state_summary();
    let dry = at(&mut p, later, &["janitor", "--ttl", "0", "--dry-run", "--json"]).expect_code(0).json();
    let envs = dry["environments"].as_array().unwrap();
    assert_eq!(envs.len(), 1, "{dry:#}");
    assert_eq!((envs[0]["env"].as_str(), envs[0]["dropped"].as_bool()), (Some("dev"), Some(false)));
    assert_eq!(string_set(&envs[0]["views"]), set(&["\"dev__s\".\"m\"", "\"dev__s\".\"v\""]));
    assert_eq!(p.state_summary(), summary, "a dry run changes no state");
    assert_eq!(relations_in(&p, "dev__s.").len(), 2, "a dry run drops no view");
    let record = |env: &str| format!("_efmesh.{}", efmesh::ownership::env_record_name(env));
    assert!(p.all_relations().contains(&record("dev")), "dev's record (the store that promoted it): {:?}", p.all_relations());

    // The janitor drops its views, its schema, its state, and the tables only it used.
    let r = at(&mut p, later, &["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    let envs = r["environments"].as_array().unwrap();
    assert_eq!((envs[0]["env"].as_str(), envs[0]["dropped"].as_bool(), envs[0]["reason"].as_str()), (Some("dev"), Some(true), Some("ttl")), "{r:#}");
    assert_eq!(string_set(&envs[0]["schemas"]), set(&["dev__s"]));
    assert!(relations_in(&p, "dev__").is_empty(), "{:?}", p.all_relations());
    assert!(!schemas(&p).contains("dev__s"), "{:?}", schemas(&p));
    assert!(!p.all_relations().contains(&record("dev")), "dev's record goes with its views: {:?}", p.all_relations());
    assert!(p.all_relations().contains(&record("prod")), "prod's record stays");
    let store = p.store().unwrap();
    assert_eq!(store.environments().unwrap(), vec!["prod".to_string()]);
    assert!(store.env_pointers("dev").unwrap().is_empty());
    let tables: BTreeSet<String> = p.physical_tables().into_iter().collect();
    assert!(dev_tables.iter().all(|t| !tables.contains(t)), "dev's versions went with it: {tables:?}");
    assert!(prod_tables.iter().all(|t| tables.contains(t)), "prod's versions stay: {tables:?}");
    assert_eq!(physicals_dropped(&r), dev_tables.iter().cloned().collect::<BTreeSet<_>>(), "{r:#}");
    // prod is untouched.
    assert_eq!(p.rows("s.v"), vec![vec![Some("1".to_string())]]);
    assert_eq!(store.env_pointers("prod").unwrap().len(), 2);
    // status says it was dropped; the next janitor has nothing to do; applying creates it again.
    let text = at(&mut p, later, &["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("dropped by the janitor"), "{text}");
    // It serves nothing and every `run dev` exits 2: `--check` is unhealthy (exit 1), as
    // `schedule dev` warns.
    let check = at(&mut p, later, &["status", "dev", "--check"]);
    let said = &check.expect_code(1).stdout;
    assert!(said.contains("health: unhealthy (environment `dev` was dropped by the janitor at "), "{said}");
    assert!(said.contains("it serves nothing, every `run dev` exits 2 (`efmesh apply dev` creates it again)"), "{said}");
    let v = at(&mut p, later, &["status", "dev", "--check", "--json"]).expect_code(1).json();
    assert_eq!((v["exists"].clone(), v["dropped"].clone(), v["healthy"].clone()), (Value::Bool(true), Value::Bool(true), Value::Bool(false)), "{v:#}");
    assert!(v["problems"][0].as_str().unwrap_or_default().contains("was dropped by the janitor at "), "{v:#}");
    at(&mut p, later, &["run", "dev"]).expect_code(2);
    // Judged as of `later`, stamped with the real clock: never a drop in the future.
    let status = at(&mut p, later, &["status", "dev", "--json"]).expect_code(0).json();
    let dropped_at = efmesh::core::interval::parse_instant(status["expiry"]["droppedAt"].as_str().expect("droppedAt")).unwrap();
    assert!(dropped_at <= now_millis() && dropped_at < later, "{status:#}");
    // So does `diff`, which has nothing to compare it with (not "never applied").
    let diff = at(&mut p, later, &["diff", "prod", "dev"]).expect_code(1).stderr.clone();
    assert!(diff.contains("environment `dev` expired and was dropped by the janitor at ") && !diff.contains("never applied"), "{diff}");
    let again = at(&mut p, later, &["janitor", "--ttl", "0"]).expect_code(0).stdout.clone();
    assert!(again.contains("nothing to collect"), "{again}");
    let back = p.apply("dev");
    assert_eq!(string_set(&back["built"]), set(&["s.m", "s.v"]), "its dropped versions are rebuilt");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);
}

fn physicals_dropped(v: &Value) -> BTreeSet<String> {
    v["dropped"].as_array().unwrap().iter().map(|d| table_name(d["physical"].as_str().unwrap())).collect()
}

#[test]
fn invalidate_expires_an_environment_now_the_janitor_drops_it_and_an_apply_before_renews_it() {
    // No ttl: environments expire only when invalidated.
    let mut p = project("");
    p.apply("prod");
    p.apply("dev");
    let now = now_millis();
    let untouched = at(&mut p, now + 365 * DAY, &["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert!(untouched["environments"].as_array().unwrap().is_empty(), "without a ttl nothing expires: {untouched:#}");

    // At a `--now` a year ahead: the journal records the real instant (docs/cli.md), never `--now`.
    let v = at(&mut p, now + 365 * DAY, &["invalidate", "dev", "--json"]).expect_code(0).json();
    assert_eq!((v["env"].as_str(), v["invalidated"].as_bool(), v["models"].as_u64()), (Some("dev"), Some(true), Some(2)), "{v:#}");
    let stamped = v["invalidatedAt"].as_str().unwrap_or_default().to_string();
    assert!(stamped >= to_iso(now) && stamped < to_iso(now + DAY), "stamped with `--now`, not the clock: {v:#}");
    let status = at(&mut p, now + 365 * DAY, &["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["expiry"]["expiresAt"].as_str(), Some(stamped.as_str()), "{status:#}");
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!((status["expiry"]["expired"].clone(), status["expiry"]["reason"].clone()), (Value::Bool(true), Value::from("invalidated")), "{status:#}");
    assert!(status["lastPlan"]["summary"].get("event").is_none(), "the last plan is the last promotion, not the invalidation: {status:#}");
    let plan = p.run(&["plan", "dev", "--json"]);
    assert_eq!(plan.expect_code(0).json()["expired"], Value::Bool(true));
    assert!(plan.stderr.contains("expired"), "{}", plan.stderr);

    // Applying it before the janitor renews it (the plan is against what it still serves).
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    let kept = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert!(kept["environments"].as_array().unwrap().is_empty(), "renewed: {kept:#}");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("2".to_string())]]);

    // Invalidated again: the janitor drops it, and what only it used.
    p.run(&["invalidate", "dev"]).expect_code(0);
    let tables_before = p.physical_tables();
    let r = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    let envs = r["environments"].as_array().unwrap();
    assert_eq!((envs.len(), envs[0]["dropped"].as_bool(), envs[0]["reason"].as_str()), (1, Some(true), Some("invalidated")), "{r:#}");
    assert!(relations_in(&p, "dev__").is_empty());
    assert!(p.store().unwrap().env_pointers("dev").unwrap().is_empty());
    assert_eq!(p.physical_tables().len(), tables_before.len() - 2, "dev's own versions went, prod's stay");
    assert_eq!(p.rows("s.v"), vec![vec![Some("1".to_string())]]);
    // Invalidating it again is refused, saying the janitor dropped it (as `diff` does), never
    // that nothing was applied to it.
    let gone = p.run(&["invalidate", "dev"]);
    assert!(gone.expect_code(1).stderr.contains("environment `dev` expired and was dropped by the janitor at "), "{}", gone.stderr);
    assert!(!gone.stderr.contains("nothing was applied"), "{}", gone.stderr);
    assert!(gone.stderr.contains("`efmesh apply dev` creates it again"), "{}", gone.stderr);
}

#[test]
fn an_apply_of_an_unchanged_project_renews_an_invalidated_environment() {
    let p = project("");
    p.apply("prod");
    p.apply("dev");
    p.run(&["invalidate", "dev"]).expect_code(0);
    // Nothing to build: the apply still renews it, as the plan's warning says it would.
    let plan = p.run(&["plan", "dev", "--json"]);
    assert!(plan.stderr.contains("renews it"), "{}", plan.stderr);
    let applied = p.run(&["apply", "dev", "--yes"]);
    assert!(applied.expect_code(0).stdout.contains("environment `dev` renewed"), "{}", applied.stdout);
    let status = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(status["expiry"]["expired"], Value::Bool(false), "{status:#}");
    let kept = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert!(kept["environments"].as_array().unwrap().is_empty(), "renewed: {kept:#}");
    assert_eq!(p.rows("dev__s.v"), vec![vec![Some("1".to_string())]]);
    // Not expired: an unchanged apply has nothing to do and records nothing.
    let journal = p.store().unwrap().journal("dev").unwrap().len();
    let again = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(again.get("renewed"), None, "{again:#}");
    assert_eq!(p.store().unwrap().journal("dev").unwrap().len(), journal);
}

#[test]
fn invalidate_refuses_prod_and_an_unknown_environment_with_the_closest_name() {
    let p = project("");
    p.apply("prod");
    p.apply("dev");
    let prod = p.run(&["invalidate", "prod", "--json"]);
    let v = prod.expect_code(1).json();
    assert!(v["error"]["message"].as_str().unwrap().contains("`prod` never expires"), "{v:#}");
    let typo = p.run(&["invalidate", "deb"]);
    assert!(typo.expect_code(1).stderr.contains("unknown environment `deb`"), "{}", typo.stderr);
    assert!(typo.stderr.contains("did you mean `dev`?"), "{}", typo.stderr);
    // A typo of `prod` is told so too, with why `prod` itself would be refused.
    let typo = p.run(&["invalidate", "prd"]);
    assert!(typo.expect_code(1).stderr.contains("did you mean `prod`? (`prod` never expires and cannot be invalidated)"), "{}", typo.stderr);
    // Nothing was recorded.
    let s = p.store().unwrap();
    assert!(s.journal("prod").unwrap().iter().all(|j| j.summary.get("event").is_none()));
    assert_eq!(s.journal("dev").unwrap().len(), 1);
}

#[test]
fn an_expired_environment_whose_lock_is_held_is_kept_until_the_next_janitor() {
    let mut p = project("");
    p.apply("prod");
    p.apply("dev");
    p.run(&["invalidate", "dev"]).expect_code(0);
    // A run of dev holds its lock while the janitor looks.
    let mut holder = p.command(&["run", "dev"]);
    holder.env("EFMESH_TEST_HOLD_LEASE_MS", "3000");
    let mut holder = holder.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while p.store().unwrap().lease("env:dev").unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the run never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = at(&mut p, now_millis(), &["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    let envs = r["environments"].as_array().unwrap();
    assert_eq!((envs[0]["dropped"].as_bool(), envs[0]["kept"].as_str()), (Some(false), Some("locked")), "{r:#}");
    assert_eq!(relations_in(&p, "dev__s.").len(), 2, "nothing of dev dropped");
    assert!(holder.wait().unwrap().success());
    let r = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    assert_eq!(r["environments"][0]["dropped"].as_bool(), Some(true), "{r:#}");
    assert!(relations_in(&p, "dev__").is_empty());
}

/// Removes the SQLite state store of `p` (and its WAL files): the next command sees no store.
fn remove_sqlite_store(p: &Project) {
    for suffix in ["", "-wal", "-shm"] {
        let path = std::path::PathBuf::from(format!("{}{suffix}", p.state_path().display()));
        if path.exists() {
            fs_err::remove_file(&path).unwrap();
        }
    }
}

/// The sample project (every kind, a time-range ledger), applied to `prod`, an edit applied to
/// `dev`, a run of `prod`, `dev` invalidated: every table of the store has rows.
fn busy_sample() -> Project {
    let p = sample_project();
    p.apply("prod");
    p.write("models/d.lua", &model_d("'y' || id"));
    p.apply("dev");
    p.write("models/d.lua", &model_d("'x' || id"));
    p.run(&["run", "prod"]).expect_code(0);
    p.run(&["invalidate", "dev"]).expect_code(0);
    p.write("models/d.lua", &model_d("'y' || id"));
    p
}

#[test]
fn an_export_imported_into_a_fresh_store_plans_a_no_op_and_a_store_that_is_not_empty_needs_force() {
    let p = busy_sample();
    let (summary, dev_plan) = (p.state_summary(), p.plan("dev"));
    let prod_plan = {
        p.write("models/d.lua", &model_d("'x' || id"));
        p.plan("prod")
    };
    assert_eq!((prod_plan["hasChanges"].clone(), dev_plan["hasChanges"].clone()), (Value::Bool(false), Value::Bool(false)));
    let before = p.store().unwrap().export_state().unwrap();

    // To a file (with a report), and to stdout (the document itself): the same content.
    let r = p.run(&["state", "export", "backup.json", "--json"]).expect_code(0).json();
    assert_eq!((r["exported"].as_bool(), r["rows"]["snapshots"].as_u64()), (Some(true), Some(before.tables["snapshots"].len() as u64)), "{r:#}");
    let doc: Value = serde_json::from_str(&p.read("backup.json")).unwrap();
    // Over an earlier export: replaced. Over the state store, the engine's file or any other
    // file: refused, nothing written (the export renames its file over what is there).
    p.run(&["state", "export", "backup.json"]).expect_code(0);
    for file in ["efmesh.state.sqlite", "efmesh.duckdb", "models/d.lua"] {
        let bytes = fs_err::read(p.root().join(file)).unwrap();
        let r = p.run(&["state", "export", file]);
        r.expect_code(1);
        assert!(r.stderr.contains("exists and is not an efmesh state export"), "{file}: {}", r.stderr);
        assert!(fs_err::read(p.root().join(file)).unwrap() == bytes, "{file} left as it was");
    }
    let stdout = p.run(&["state", "export"]).expect_code(0).json();
    assert_eq!((doc["apiVersion"].clone(), doc["stateVersion"].clone()), (Value::from(1), Value::from(efmesh::state::STATE_VERSION)));
    assert_eq!(stdout["tables"], doc["tables"]);
    for t in ["snapshots", "environments", "intervals", "plans", "ticks", "data_versions"] {
        assert!(!before.tables[t].is_empty(), "the sample leaves rows in `{t}`");
    }

    // Into a fresh store: the same state, and the same plans (no-op for both environments).
    remove_sqlite_store(&p);
    let r = p.run(&["state", "import", "backup.json", "--json"]).expect_code(0).json();
    assert_eq!(r["imported"].as_bool(), Some(true), "{r:#}");
    let after = p.store().unwrap().export_state().unwrap();
    assert_eq!(after.tables, before.tables);
    assert_eq!(after.store_id, before.store_id);
    assert!(after.generation > before.generation, "a generation past the exported one");
    assert_eq!(p.state_summary(), summary);
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));
    p.write("models/d.lua", &model_d("'y' || id"));
    let dev = p.run(&["plan", "dev", "--json"]).expect_code(0).json();
    assert_eq!((dev["hasChanges"].clone(), dev["expired"].clone()), (Value::Bool(false), Value::Bool(true)), "the invalidation travelled too");

    // Into a store that is not empty: refused unless --force, and nothing written.
    let refused = p.run(&["state", "import", "backup.json"]);
    assert!(refused.expect_code(1).stderr.contains("not empty"), "{}", refused.stderr);
    assert_eq!(p.store().unwrap().export_state().unwrap(), after);
    p.run(&["state", "import", "backup.json", "--force"]).expect_code(0);
    assert_eq!(p.store().unwrap().export_state().unwrap().tables, before.tables);
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

#[test]
fn an_export_of_a_future_layout_or_a_damaged_one_is_refused_and_nothing_is_created() {
    let p = busy_sample();
    p.run(&["state", "export", "backup.json"]).expect_code(0);
    remove_sqlite_store(&p);
    let mut doc: Value = serde_json::from_str(&p.read("backup.json")).unwrap();
    doc["stateVersion"] = Value::from(efmesh::state::STATE_VERSION + 1);
    p.write("future.json", &doc.to_string());
    let r = p.run(&["state", "import", "future.json", "--json"]);
    let v = r.expect_code(1).json();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("newer than this efmesh") && msg.contains("upgrade efmesh"), "{msg}");
    assert!(!p.state_path().exists(), "nothing created");
    doc["stateVersion"] = Value::from(efmesh::state::STATE_VERSION);
    doc["tables"]["intervals"]["rows"][0][2] = Value::from(3);
    p.write("damaged.json", &doc.to_string());
    let r = p.run(&["state", "import", "damaged.json"]);
    assert!(r.expect_code(1).stderr.contains("table `intervals` row 1 column `start_ts`"), "{}", r.stderr);
    assert!(!p.state_path().exists(), "nothing created");
    // Valid row by row but a snapshot twice: refused by its key, naming both rows (the store
    // refused it with a raw `UNIQUE constraint failed`), before any store is created.
    doc["tables"]["intervals"] = serde_json::from_str::<Value>(&p.read("backup.json")).unwrap()["tables"]["intervals"].clone();
    let first = doc["tables"]["snapshots"]["rows"][0].clone();
    let rows = doc["tables"]["snapshots"]["rows"].as_array_mut().unwrap();
    rows.push(first);
    let last = rows.len();
    p.write("twice.json", &doc.to_string());
    let r = p.run(&["state", "import", "twice.json"]);
    let stderr = &r.expect_code(1).stderr;
    assert!(stderr.contains(&format!("table `snapshots` rows 1 and {last} have the same `name`, `fingerprint`")) && !stderr.contains("UNIQUE"), "{stderr}");
    assert!(!p.state_path().exists(), "nothing created");
    // A promotion time that is no date, a snapshot kind efmesh never records, metadata that is
    // not JSON, a pointer to a version with no snapshot, an empty `storeId`: each refused by
    // name, nothing created.
    let good: Value = serde_json::from_str(&p.read("backup.json")).unwrap();
    let pointer = good["tables"]["environments"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| !r[4].as_str().unwrap().contains("\"external\""))
        .expect("a pointer of a model that is not external");
    let cases: [(&str, &str, usize, usize, Value, &str); 4] = [
        ("promoted", "environments", 0, 3, Value::from("2026-13-45"), "table `environments` row 1 column `promoted_at`"),
        ("kind", "snapshots", 0, 3, Value::from("nonsense"), "table `snapshots` row 1 column `kind`"),
        ("metadata", "snapshots", 0, 7, Value::from("{not json"), "table `snapshots` row 1 column `metadata`"),
        ("pointer", "environments", pointer, 2, Value::from("ab".repeat(32)), "column `fingerprint`"),
    ];
    for (file, table, row, column, value, wanted) in cases {
        let mut bad = good.clone();
        bad["tables"][table]["rows"][row][column] = value;
        let name = format!("{file}.json");
        p.write(&name, &bad.to_string());
        let r = p.run(&["state", "import", name.as_str()]);
        assert!(r.expect_code(1).stderr.contains(wanted), "{file}: {}", r.stderr);
        assert!(!p.state_path().exists(), "{file}: nothing created");
    }
    let mut bad = good;
    bad["storeId"] = Value::from("");
    p.write("anonymous.json", &bad.to_string());
    let r = p.run(&["state", "import", "anonymous.json"]);
    assert!(r.expect_code(1).stderr.contains("`storeId` is empty"), "{}", r.stderr);
    assert!(!p.state_path().exists(), "nothing created");
}

/// `state import` right after a command was killed: the dead command's lock, unexpired, does
/// not block when its holder is known gone (same boot and pid namespace, pid dead), as it does
/// not block the commands that reclaim it; a live holder's lock, or one whose holder cannot be
/// told gone (no recorded identity: another machine), is refused naming the holder, its expiry
/// and when to retry, nothing written.
#[test]
fn an_import_after_a_killed_command_is_not_blocked_by_its_lock_and_a_live_holders_lock_is_named() {
    use efmesh::state::lease::{host_name, own_identity};
    use efmesh::state::{LeaseClaim, LeaseHolder, LeaseRecord};
    let Some(me) = own_identity() else { return };
    let p = busy_sample();
    p.run(&["state", "export", "backup.json"]).expect_code(0);
    let store = p.store().unwrap();
    let expires = now_millis() + 600_000;
    let take = |name: &str, token: &str, pid: u32, host: &str| {
        let holder = LeaseHolder { pid, host: host.to_string(), command: "efmesh run prod".into(), started_at: to_iso(now_millis()) };
        let always = |_: &LeaseRecord| true;
        let claim = store.try_acquire_lease(name, token, &holder, expires, now_millis(), &always).unwrap();
        assert!(matches!(claim, LeaseClaim::Acquired { .. }), "{claim:?}");
    };
    // A `run` killed on this host: its pid is dead, its lock unexpired for ten minutes.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let dead_token = format!("v2:{}:{}:0:{dead}:0:0", me.boot, me.ns);
    take("env:prod", &dead_token, dead, &host_name());
    let r = p.run(&["state", "import", "backup.json", "--force"]);
    assert!(!r.stderr.contains("a command is running"), "{}", r.stderr);
    r.expect_code(0);
    assert_eq!(store.lease("env:prod").unwrap().map(|l| l.token), Some(dead_token), "left for the next command to reclaim");
    let after = store.export_state().unwrap();

    // This test process holds a lock: it is alive, so the import is refused, naming it.
    let live_token = format!("v2:{}:{}:{}:{}:0:0", me.boot, me.ns, me.start, std::process::id());
    take("env:dev", &live_token, std::process::id(), &host_name());
    let r = p.run(&["state", "import", "backup.json", "--force"]);
    let until = to_iso(expires);
    let held = format!("the lock `env:dev` is held by `efmesh run prod` (pid {} on {}) since ", std::process::id(), host_name());
    assert!(r.expect_code(1).stderr.contains(&held), "{}", r.stderr);
    for wanted in [format!("until {until}: a command is running"), format!("retry after {until}"), "nothing was written".to_string()] {
        assert!(r.stderr.contains(&wanted), "{wanted}: {}", r.stderr);
    }
    assert_eq!(store.export_state().unwrap(), after, "nothing written");
    store.release_lease("env:dev", &live_token).unwrap();

    // A holder recorded without its identity (another machine, an older efmesh) is never known
    // gone, even with a pid that is dead here: only its expiry frees the lock.
    take("env:dev", &format!("v1:{dead}:build-1:0:0"), dead, "build-1");
    let r = p.run(&["state", "import", "backup.json", "--force"]);
    assert!(r.expect_code(1).stderr.contains(&format!("pid {dead} on build-1")), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("retry after {until}")), "{}", r.stderr);
    assert_eq!(store.export_state().unwrap(), after, "nothing written");
}

/// Day 2 of `t.daily` restated and run again in `prod` after a source row was corrected: the
/// run rewrites rows of the table the export's version of `t.daily` owns, and stamps the
/// engine database with a later epoch (SPEC §4, invariant 63).
fn rewrite_day_2(p: &Project) {
    p.write("data/events.csv", &p.read("data/events.csv").replace("2026-01-02 09:10:00,north,120", "2026-01-02 09:10:00,north,121"));
    p.run(&["restate", "prod", "--model", "t.daily", "--from", "2026-01-02", "--to", "2026-01-03"]).expect_code(0);
    p.run(&["run", "prod"]).expect_code(0);
}

/// An export taken before a restatement and a run of `prod`, imported (`--force`) while the
/// engine database still holds that run's rows: refused, exit 1, naming the file, both epochs,
/// that nothing was imported and the ways out (`--engine-ahead` among them); the state store
/// and the database file are left as they were (the restored ledger would have called day 2
/// done as the export describes it while `prod` serves the run's rows, and plan, `status
/// --check` and run would have seen nothing), the message saying the ledger may call replaced
/// intervals done. `--engine-ahead` imports it, with a warning.
#[test]
fn an_older_export_onto_an_engine_holding_later_writes_is_refused_and_nothing_changes() {
    let p = sample_project();
    p.apply("prod");
    p.run(&["state", "export", "backup.json"]).expect_code(0);
    let exported: Value = serde_json::from_str(&p.read("backup.json")).unwrap();
    let old_epoch = exported["engineEpoch"].as_i64().expect("an export carries `engineEpoch`");
    let old_rows = p.rows(&env_view("prod", "t.daily"));
    rewrite_day_2(&p);
    let new_rows = p.rows(&env_view("prod", "t.daily"));
    assert_ne!(new_rows, old_rows, "the run rewrote day 2");
    let store = p.store().unwrap();
    let before = store.export_state().unwrap();
    assert!(before.engine_epoch > old_epoch, "the run raised the engine epoch: {} after {old_epoch}", before.engine_epoch);
    let bytes = std::fs::read(p.engine_path()).unwrap();

    let r = p.run(&["state", "import", "backup.json", "--force"]);
    r.expect_code(1);
    let ahead = format!("efmesh.duckdb holds writes made after this export (epoch {} > {old_epoch})", before.engine_epoch);
    for wanted in [ahead.as_str(), "nothing was imported", "from the same moment", "move it aside", "--engine-ahead"] {
        assert!(r.stderr.contains(wanted), "{wanted}: {r:#?}");
    }
    // Worded as what may be wrong: a run that only computed new intervals replaced none.
    assert!(r.stderr.contains("the restored ledger may call done intervals those writes replaced"), "{r:#?}");
    let json = p.run(&["state", "import", "backup.json", "--force", "--json"]);
    json.expect_code(1);
    let v = json.json();
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains(&ahead)), "{v:#}");
    assert!(v["error"]["hint"].as_str().is_some_and(|h| h.contains("--engine-ahead")), "{v:#}");
    assert_eq!(store.export_state().unwrap(), before, "the state store is unchanged");
    assert_eq!(std::fs::read(p.engine_path()).unwrap(), bytes, "nothing was written to the database file");
    assert_eq!(p.rows(&env_view("prod", "t.daily")), new_rows);

    // Told to, the import trusts the ledger as the export has it, and says so.
    let r = p.run(&["state", "import", "backup.json", "--force", "--engine-ahead"]);
    r.expect_code(0);
    assert!(r.stderr.contains(&ahead) && r.stderr.contains("imported anyway (`--engine-ahead`)"), "{r:#?}");
    let imported = store.export_state().unwrap();
    assert_eq!(serde_json::to_value(&imported.tables["intervals"]).unwrap(), exported["tables"]["intervals"]["rows"], "the export's ledger");
}

/// The controls: an export taken at the same moment as the engine database (its `engineEpoch`
/// is the database's stamp) imports silently and plans a no-op; with the database moved aside
/// there is nothing to compare, so the import goes on with a warning saying so; a database that
/// cannot be opened refuses the import naming why (nothing imported) unless `--engine-ahead`.
#[test]
fn an_export_of_the_engines_moment_imports_and_an_absent_or_unreadable_engine_is_named() {
    let p = sample_project();
    p.apply("prod");
    rewrite_day_2(&p);
    p.run(&["state", "export", "same-moment.json"]).expect_code(0);
    let store = p.store().unwrap();
    let before = store.export_state().unwrap();
    let r = p.run(&["state", "import", "same-moment.json", "--force"]);
    r.expect_code(0);
    assert!(!r.stderr.contains("engine database"), "{r:#?}");
    assert_eq!(store.export_state().unwrap().tables, before.tables);
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));

    // Moved aside: nothing to compare with, said as a warning.
    std::fs::rename(p.engine_path(), p.root().join("aside.duckdb")).unwrap();
    let _ = std::fs::remove_file(p.root().join("efmesh.duckdb.wal"));
    let r = p.run(&["state", "import", "same-moment.json", "--force"]);
    r.expect_code(0);
    assert!(r.stderr.contains("no engine database at") && r.stderr.contains("could not be compared"), "{r:#?}");
    assert!(!p.engine_path().exists(), "the import creates no database");

    // A file DuckDB cannot open: refused naming why, the store untouched; `--engine-ahead`
    // imports without comparing, with a warning.
    p.write("efmesh.duckdb", "not a database");
    let after = store.export_state().unwrap();
    let r = p.run(&["state", "import", "same-moment.json", "--force"]);
    r.expect_code(1);
    assert!(r.stderr.contains("cannot open the engine database") && r.stderr.contains("nothing was imported") && r.stderr.contains("--engine-ahead"), "{r:#?}");
    assert_eq!(store.export_state().unwrap(), after, "the state store is unchanged");
    let r = p.run(&["state", "import", "same-moment.json", "--force", "--engine-ahead"]);
    r.expect_code(0);
    assert!(r.stderr.contains("imported without comparing"), "{r:#?}");
    assert_eq!(p.read("efmesh.duckdb"), "not a database");
}

/// `state import` of an export of the engine's moment, held between its comparison with the
/// engine database and its write (the test hook `EFMESH_DELAY=import-after-compare`) while a
/// restatement and a run of `prod` rewrite day 2 there: the comparison saw no later write, but
/// the run raised the issued engine epoch the import read before comparing, so the import's
/// transaction refuses (exit 1, "run the import again", nothing written), on either state
/// store backend. (Before, it imported: the store called day 2 done as the export describes it
/// while `prod` served the run's rows, and plan and `status --check` saw nothing.) The store
/// keeps the run's ledger, which describes what the database holds; run again, the import is
/// refused as older than the database.
#[test]
fn a_run_between_the_imports_comparison_and_its_write_makes_it_refused() {
    let mut backends = vec![StateBackend::Sqlite];
    backends.extend(crate::pg::fresh().map(StateBackend::Postgres));
    for backend in backends {
        let p = sample_project_on(backend);
        p.apply("prod");
        p.run(&["state", "export", "backup.json"]).expect_code(0);
        let old_rows = p.rows(&env_view("prod", "t.daily"));
        let mut after_run = None;
        let (code, seen) = crate::engine_record::run_held(
            &p,
            &["state", "import", "backup.json", "--force"],
            // Long enough for the restatement and the run to finish while the import waits.
            "import-after-compare=6000",
            |l| l.contains("test hook: delaying") && l.contains("point=import-after-compare"),
            |seen| {
                assert!(!seen.contains("holds writes made after this export"), "compared before the run: {seen}");
                rewrite_day_2(&p);
                after_run = Some(p.store().unwrap().export_state().unwrap());
            },
        );
        let after_run = after_run.expect("the run ran while the import waited");
        assert_eq!(code, Some(1), "{seen}");
        for wanted in ["cannot import: an engine epoch was issued while importing", "run the import again", "nothing was written"] {
            assert!(seen.contains(wanted), "{wanted}: {seen}");
        }
        assert!(!seen.contains("a command is running"), "the run was done before the import went on: {seen}");
        assert_eq!(p.store().unwrap().export_state().unwrap(), after_run, "the state store is the run's");
        assert_ne!(p.rows(&env_view("prod", "t.daily")), old_rows, "the run rewrote day 2");
        assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));
        p.run(&["status", "prod", "--check"]).expect_code(0);
        // Again: compared with the run's writes this time, and refused.
        let r = p.run(&["state", "import", "backup.json", "--force"]);
        assert!(r.expect_code(1).stderr.contains("holds writes made after this export"), "{r:#?}");
        assert_eq!(p.store().unwrap().export_state().unwrap(), after_run, "nothing written");
    }
}

#[test]
fn an_export_from_sqlite_imported_into_postgres_plans_a_no_op() {
    let Some(target) = crate::pg::fresh() else { return };
    let mut p = busy_sample();
    p.write("models/d.lua", &model_d("'x' || id"));
    let before = p.store().unwrap().export_state().unwrap();
    p.run(&["state", "export", "backup.json"]).expect_code(0);
    // The same project, its state now in Postgres.
    p.backend = StateBackend::Postgres(target);
    p.write("efmesh.toml", &p.config_with(""));
    assert!(p.store().is_none(), "a fresh Postgres schema");
    p.run(&["state", "import", "backup.json"]).expect_code(0);
    let after = p.store().unwrap().export_state().unwrap();
    assert_eq!((after.tables, after.store_id), (before.tables, before.store_id));
    assert_eq!(p.plan("prod")["hasChanges"], Value::Bool(false));
    p.write("models/d.lua", &model_d("'y' || id"));
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
    // The journal's identity follows the imported ids: the next promotion gets a larger one.
    p.write("models/d.lua", &model_d("'z' || id"));
    p.apply("dev");
    let journal = p.store().unwrap().journal("dev").unwrap();
    let ids: Vec<i64> = journal.iter().map(|j| j.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[test]
fn invalidate_and_the_janitor_count_only_the_views_an_environment_has() {
    // An external and an embedded model are pointers of the environment without a view.
    let p = project("");
    p.execute_on_engine("CREATE SCHEMA land; CREATE TABLE land.e AS SELECT 1 AS x");
    p.write(
        "models/m.lua",
        r#"define_model { name = "raw.e", kind = kind.external { table = "land.e" }, schema = { { "x", "integer" } } }
define_model { name = "s.inl", kind = kind.embedded(), schema = { { "x", "integer" } }, query = "SELECT x FROM " .. ref("raw.e") }
define_model { name = "s.m", kind = kind.full(), schema = { { "x", "integer" } }, query = "SELECT x FROM " .. ref("s.inl") }
"#,
    );
    p.apply("dev");
    assert_eq!(relations_in(&p, "dev__"), set(&["dev__s.m"]), "one view");
    let v = p.run(&["invalidate", "dev", "--json"]).expect_code(0).json();
    assert_eq!((v["models"].as_u64(), v["views"].as_u64()), (Some(3), Some(1)), "{v:#}");
    let text = p.run(&["janitor", "--ttl", "0", "--dry-run"]).expect_code(0).stdout.clone();
    assert!(text.contains("1 view(s), schema(s) dev__s") && !text.contains("dev__raw"), "{text}");
    let r = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    let env = &r["environments"][0];
    assert_eq!(env["views"], serde_json::json!(["\"dev__s\".\"m\""]), "{r:#}");
    assert_eq!(env["schemas"], serde_json::json!(["dev__s"]), "{r:#}");
    assert!(relations_in(&p, "dev__").is_empty() && !schemas(&p).iter().any(|s| s.starts_with("dev__")), "{:?}", schemas(&p));
}

#[test]
fn janitor_ttl_0_drops_an_invalidated_environment_and_its_own_storage_in_one_run_and_the_dry_run_says_so() {
    let p = project("");
    p.apply("prod");
    p.write("models/m.lua", &models(2));
    p.apply("dev");
    p.run(&["invalidate", "dev"]).expect_code(0);
    let dry = p.run(&["janitor", "--ttl", "0", "--dry-run", "--json"]).expect_code(0).json();
    let listed: BTreeSet<String> = dry["dropped"].as_array().unwrap().iter().filter_map(|v| v["model"].as_str().map(String::from)).collect();
    assert_eq!(listed, BTreeSet::from(["s.m".to_string(), "s.v".to_string()]), "dev's own versions would go: {dry:#}");
    let tables_before = p.physical_tables();
    let real = p.run(&["janitor", "--ttl", "0", "--json"]).expect_code(0).json();
    let dropped: BTreeSet<String> = real["dropped"].as_array().unwrap().iter().filter_map(|v| v["model"].as_str().map(String::from)).collect();
    assert_eq!(dropped, listed, "{real:#}");
    assert_eq!(p.physical_tables().len(), tables_before.len() - 2, "dev's own versions went, prod's stay");
    assert_eq!(p.rows("s.v"), vec![vec![Some("1".to_string())]]);
}

#[test]
fn an_apply_past_the_ttl_at_a_later_now_does_not_claim_a_renewal_it_cannot_make() {
    // The promotion is stamped with the clock: judged at a `--now` a month ahead, the ttl has
    // run out again at once. The apply says so instead of `renewed`.
    let mut p = project("\n[environments]\nttl = \"7d\"\n");
    p.apply("prod");
    p.apply("dev");
    let later = now_millis() + 30 * DAY;
    let v = at(&mut p, later, &["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["renewed"], Value::Bool(false), "{v:#}");
    // At the clock's time, an expired environment is renewed by the same apply.
    p.run(&["invalidate", "dev"]).expect_code(0);
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["renewed"], Value::Bool(true), "{v:#}");
}

#[test]
fn status_of_a_mistyped_environment_says_it_does_not_exist_and_names_the_one_meant() {
    let p = project("");
    p.apply("dev");
    let out = p.run(&["status", "dve"]).expect_code(0).stdout.clone();
    assert!(out.contains("environment `dve` does not exist — the first apply creates it (did you mean `dev`?)"), "{out}");
    assert!(out.contains("health: unhealthy (environment `dve` does not exist"), "{out}");
}

/// `status prd --check` of a typo of `prod` (the environment a `schedule prd` would run, every
/// tick exiting 2) is not healthy: exit 1, saying it does not exist and naming `prod`; the JSON
/// says `exists: false`.
#[test]
fn status_check_of_an_environment_the_store_never_held_exits_1_naming_the_one_meant() {
    let p = project("");
    p.apply("prod");
    let text = p.run(&["status", "prd", "--check"]);
    assert!(text.expect_code(1).stdout.contains("health: unhealthy (environment `prd` does not exist"), "{}", text.stdout);
    assert!(text.stdout.contains("(did you mean `prod`?)") && !text.stdout.contains("health: ok"), "{}", text.stdout);
    let v = p.run(&["status", "prd", "--check", "--json"]).expect_code(1).json();
    assert_eq!((v["exists"].clone(), v["didYouMean"].clone(), v["healthy"].clone()), (Value::Bool(false), Value::from("prod"), Value::Bool(false)), "{v:#}");
    assert!(v["problems"][0].as_str().unwrap_or_default().contains("every `run prd` exits 2"), "{v:#}");
    // An existing environment is as before.
    let v = p.run(&["status", "prod", "--check", "--json"]).expect_code(0).json();
    assert_eq!((v["exists"].clone(), v["didYouMean"].clone(), v["dropped"].clone()), (Value::Bool(true), Value::Null, Value::Bool(false)), "{v:#}");
}

/// An invalidated environment whose versions `prod` serves too: the janitor drops its views and
/// says no storage was left to collect, never "nothing to collect" after a line saying it
/// dropped the environment.
#[test]
fn the_janitor_report_of_an_environment_dropped_with_no_storage_of_its_own_does_not_contradict_itself() {
    let mut p = project("");
    p.apply("prod");
    p.apply("dev");
    p.run(&["invalidate", "dev"]).expect_code(0);
    let now = now_millis() + 120_000;
    let out = at(&mut p, now, &["janitor"]).expect_code(0).stdout.clone();
    assert!(out.contains("janitor dropped the expired environment `dev`"), "{out}");
    assert!(out.contains("janitor: no storage past its ttl to collect") && !out.contains("nothing to collect"), "{out}");
}

/// A plan of an environment that does not exist, named like one that does, says so in the report
/// itself — a line under its header on stdout (it was only a log line on stderr, easy to miss
/// above a whole plan), `newEnvironment` and `didYouMean` in JSON — and so does `apply`'s preview,
/// before anyone confirms. It still plans: a new environment is what the first apply creates.
#[test]
fn a_plan_of_a_new_environment_named_like_an_existing_one_asks_did_you_mean() {
    let p = project("");
    // A project's first environment: nothing to mistake it for, no line (the README's plan).
    let first = p.run(&["plan", "prod"]);
    assert!(!first.expect_code(0).stdout.contains("new environment"), "{}", first.stdout);
    let v = p.plan("prod");
    assert_eq!((v["newEnvironment"].clone(), v.get("didYouMean")), (Value::Bool(true), None), "{v:#}");
    p.apply("prod");

    let said = "`prdo` is a new environment: applying this plan creates it (existing: `prod`; did you mean `prod`?)";
    let r = p.run(&["plan", "prdo"]);
    let lines: Vec<&str> = r.expect_code(0).stdout.lines().collect();
    assert!(lines.first().is_some_and(|l| l.starts_with("plan for environment `prdo`")), "{}", r.stdout);
    assert_eq!(lines.get(1).copied(), Some(said), "{}", r.stdout);
    let v = p.run(&["plan", "prdo", "--json"]).expect_code(0).json();
    assert_eq!((v["newEnvironment"].clone(), v["didYouMean"].clone()), (Value::Bool(true), Value::from("prod")), "{v:#}");
    // `apply`'s preview says it too, before asking (stdin is no terminal: nothing applied).
    let preview = p.run(&["apply", "prdo"]);
    assert!(preview.expect_code(2).stdout.lines().any(|l| l == said), "{}", preview.stdout);
    let v = p.run(&["apply", "prdo", "--json"]).expect_code(2).json();
    assert_eq!((v["plan"]["newEnvironment"].clone(), v["plan"]["didYouMean"].clone()), (Value::Bool(true), Value::from("prod")), "{v:#}");

    // A new name close to none: the existing ones, no guess.
    let r = p.run(&["plan", "staging"]);
    assert!(r.expect_code(0).stdout.contains("`staging` is a new environment: applying this plan creates it (existing: `prod`)\n"), "{}", r.stdout);
    // An environment that exists: nothing said, `newEnvironment: false`.
    let r = p.run(&["plan", "prod"]);
    assert!(!r.expect_code(0).stdout.contains("new environment") && !r.stderr.contains("does not exist yet"), "{}{}", r.stdout, r.stderr);
    let v = p.plan("prod");
    assert_eq!((v["newEnvironment"].clone(), v.get("didYouMean")), (Value::Bool(false), None), "{v:#}");
}

/// A `run dev` errored, then the janitor dropped `dev`: its run ticks went with it (the status of
/// the dropped environment does not say its last run errored), a run of it meanwhile is refused
/// saying it was dropped, and `dev` applied again — never run — has no run ticks and is healthy.
#[test]
fn an_environment_created_again_after_the_janitor_dropped_it_is_not_judged_by_the_runs_of_the_one_dropped() {
    let mut p = Project::new();
    p.write("data/switch.csv", "mode\nok\n");
    p.write("models/m.lua", FAILS_FROM_THE_4TH);
    p.now = "2026-01-02T01:00:00Z".into();
    p.apply("dev");
    p.write("data/switch.csv", "mode\nfail\n");
    p.now = "2026-01-06T01:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(1);
    let red = p.run(&["status", "dev", "--check"]);
    assert!(red.expect_code(1).stdout.contains("the last run tick errored"), "{}", red.stdout);
    p.run(&["invalidate", "dev"]).expect_code(0);
    let janitor = p.run(&["janitor", "--ttl", "0"]).expect_code(0).stdout.clone();
    assert!(janitor.contains("janitor dropped the expired environment `dev`"), "{janitor}");

    let gone = p.run(&["status", "dev", "--json"]).expect_code(0).json();
    assert_eq!(gone["dropped"], Value::Bool(true), "{gone:#}");
    assert!(gone["ticks"].as_array().is_some_and(Vec::is_empty), "its ticks went with it: {gone:#}");
    assert!(!gone["problems"].to_string().contains("errored"), "{gone:#}");
    // A scheduled run meanwhile: refused (exit 2) saying so, not listing every model as added.
    let r = p.run(&["run", "dev"]);
    assert!(r.expect_code(2).stderr.contains("run `dev`: environment `dev` expired and was dropped by the janitor at "), "{}", r.stderr);
    assert!(!r.stderr.contains("apply needed") && r.stderr.contains("`efmesh apply dev` creates it again"), "{}", r.stderr);
    assert_eq!(p.store().unwrap().ticks("dev", 5).unwrap().len(), 1, "the refused run is journaled for the dropped environment");

    // Created again (the source fixed), never run: no run tick of its own, healthy.
    p.write("data/switch.csv", "mode\nok\n");
    p.apply("dev");
    let green = p.run(&["status", "dev", "--check"]);
    let said = &green.expect_code(0).stdout;
    assert!(said.contains("no run ticks yet") && said.contains("health: ok") && !said.contains("✗"), "{said}");
    let v = p.run(&["status", "dev", "--check", "--json"]).expect_code(0).json();
    assert!(v["ticks"].as_array().is_some_and(Vec::is_empty) && v["healthy"] == Value::Bool(true), "{v:#}");
}

/// `graph --env`, `render --env`, `audit` and `schedule` of an environment the janitor dropped say
/// so (as `status`, `diff`, `invalidate` and `run` do), never that nothing was applied to it; of
/// one never applied, as before.
#[test]
fn graph_render_audit_and_schedule_of_an_environment_the_janitor_dropped_say_so_not_that_nothing_was_applied() {
    let p = project("");
    p.apply("prod");
    p.apply("dev");
    p.run(&["invalidate", "dev"]).expect_code(0);
    p.run(&["janitor", "--ttl", "0"]).expect_code(0);
    let said = "environment `dev` expired and was dropped by the janitor at ";

    let graph = p.run(&["graph", "--env", "dev"]).expect_code(0).stdout.clone();
    assert!(graph.contains("against environment `dev` (expired and was dropped by the janitor at "), "{graph}");
    assert!(!graph.contains("never applied"), "{graph}");
    let v = p.run(&["graph", "--env", "dev", "--json"]).expect_code(0).json();
    assert_eq!(v["envExists"], Value::Bool(false), "{v:#}");
    assert!(v["envDroppedAt"].as_str().is_some_and(|at| at.ends_with('Z')), "{v:#}");
    let v = p.run(&["graph", "--env", "prod", "--json"]).expect_code(0).json();
    assert_eq!((v["envExists"].clone(), v["envDroppedAt"].clone()), (Value::Bool(true), Value::Null), "{v:#}");
    let never = p.run(&["graph", "--env", "qa"]).expect_code(0).stdout.clone();
    assert!(never.contains("against environment `qa` (never applied)"), "{never}");

    let r = p.run(&["render", "s.v", "--env", "dev", "--json"]);
    let v = r.expect_code(0).json();
    assert!(r.stderr.contains(said) && !r.stderr.contains("nothing was applied"), "{}", r.stderr);
    assert_eq!(v["envExists"], Value::Bool(false), "{v:#}");
    assert!(v["envDroppedAt"].is_string(), "{v:#}");
    let r = p.run(&["render", "s.v", "--env", "qa"]);
    assert!(r.expect_code(0).stderr.contains("environment `qa` does not exist yet (nothing was applied to it)"), "{}", r.stderr);

    let r = p.run(&["audit", "dev"]);
    assert!(r.expect_code(1).stderr.contains(said) && !r.stderr.contains("nothing was applied"), "{}", r.stderr);
    assert!(r.stderr.contains("`efmesh apply dev` creates it again"), "{}", r.stderr);
    let r = p.run(&["audit", "qa"]);
    assert!(r.expect_code(1).stderr.contains("environment `qa` does not exist (nothing was applied to it)"), "{}", r.stderr);

    let r = p.run(&["schedule", "dev", "--print-systemd"]);
    assert!(r.expect_code(0).stderr.contains(said), "{}", r.stderr);
}
