//! What a [`Session`] keeps between re-plans (the project restored from the project cache, the
//! discovered files, the engine catalog at the DuckDB file's identity) is trusted only while its
//! key proves it current: another process's apply, or a relation dropped behind efmesh's back,
//! between two re-plans is seen by the next one, exactly as by a fresh `efmesh plan`. On DuckDB
//! and on Postgres (whose catalog the session reads again for every plan) alike.

use crate::common::*;
use crate::on_every_engine;
use efmesh::plan::{self, Change};
use efmesh::session::Session;
use serde_json::Value;

on_every_engine!(
    another_processs_apply_between_two_re_plans_is_seen,
    a_relation_dropped_behind_efmesh_between_two_re_plans_is_seen,
    reloads_see_new_deleted_and_edited_files_as_a_fresh_load_does,
);

/// The sample project on `engine`, in SQL both engines read the same way; the session this test
/// process opens reaches the engine too.
fn sample(engine: EngineBackend) -> Project {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.engine_url_in_process();
    p
}

fn now() -> efmesh::core::interval::Millis {
    efmesh::core::interval::parse_instant(NOW).unwrap()
}

fn session_plan(s: &Session) -> Value {
    serde_json::to_value(s.plan("dev", now(), &plan::Options::default()).unwrap()).unwrap()
}

/// The session's project (restored, or reloaded incrementally) equals the project loaded from
/// scratch (no cache of any kind), model for model and in the same order.
fn assert_same_as_fresh_load(s: &Session) {
    let config = s.config();
    let (fresh, _) = efmesh::project::Project::load_with(config, &mut efmesh::script::loader::LoadCache::in_memory());
    let fresh: Vec<_> = fresh.unwrap().dag.models().cloned().collect();
    let kept: Vec<_> = s.project().unwrap().dag.models().cloned().collect();
    assert!(kept == fresh, "the session's project differs from a fresh load");
}

/// The session's plan equals the plan a new process computes, field for field.
fn assert_same_as_cli(p: &Project, s: &Session) {
    assert_same_as_fresh_load(s);
    let mut cli = p.plan("dev");
    // The command's own keys around the plan: the envelope, the environment's lifecycle, and
    // whether it is new (`Plan::mark_new_environment`, what the command shows of the store).
    for key in ["apiVersion", "expired", "expiry", "newEnvironment"] {
        cli.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(session_plan(s), cli, "the session's re-plan equals `efmesh plan dev`");
}

fn another_processs_apply_between_two_re_plans_is_seen(engine: EngineBackend) {
    let p = sample(engine);
    p.apply("dev");
    // Restored from the project cache the apply's load stored.
    let mut s = Session::open(&p.root().join("efmesh.toml")).unwrap();
    let first = s.plan("dev", now(), &plan::Options::default()).unwrap();
    assert!(!first.has_changes);

    p.write("models/a.lua", &portable_sample(&p, &model_a("AND range < 6")));
    s.reload(&[p.root().join("models/a.lua")]).unwrap();
    let edited = s.plan("dev", now(), &plan::Options::default()).unwrap();
    assert!(edited.has_changes);
    assert_eq!(edited.actions.iter().find(|a| a.name.to_string() == "s.a").unwrap().change, Change::Breaking);
    assert_same_as_cli(&p, &s);

    // Another process applies the edit: the session's next plan has nothing left to do.
    p.apply("dev");
    let after = s.plan("dev", now(), &plan::Options::default()).unwrap();
    assert!(!after.has_changes, "{after:?}");
    assert_same_as_cli(&p, &s);
}

fn a_relation_dropped_behind_efmesh_between_two_re_plans_is_seen(engine: EngineBackend) {
    let p = sample(engine);
    p.apply("dev");
    let s = Session::open(&p.root().join("efmesh.toml")).unwrap();
    assert!(!s.plan("dev", now(), &plan::Options::default()).unwrap().has_changes);
    // Another client drops the environment's view of `s.a` (on DuckDB, the file's mtime is put
    // back).
    let drop_view = format!("DROP VIEW {}", env_view("dev", "s.a"));
    if p.on_postgres() {
        p.execute_on_engine(&drop_view);
    } else {
        let mtime = fs_err::metadata(p.engine_path()).unwrap().modified().unwrap();
        let conn = duckdb::Connection::open(p.engine_path()).unwrap();
        conn.execute_batch(&drop_view).unwrap();
        drop(conn);
        fs_err::File::options().write(true).open(p.engine_path()).unwrap().set_modified(mtime).unwrap();
    }
    let plan = session_plan(&s);
    assert_eq!(action(&plan, "s.a")["repair"]["viewMissing"], true, "{plan:#}");
    assert_same_as_cli(&p, &s);
}

fn reloads_see_new_deleted_and_edited_files_as_a_fresh_load_does(engine: EngineBackend) {
    let p = sample(engine);
    p.apply("dev");
    let mut s = Session::open(&p.root().join("efmesh.toml")).unwrap();
    // An edit of a known file (the discovered files are reused), then a new and a deleted file
    // (walked again): after each, the session's project plans as a new process's.
    p.write("models/c.lua", &p.read("models/c.lua").replace("count(*) AS n", "count(*) + 1 AS n"));
    s.reload(&[p.root().join("models/c.lua")]).unwrap();
    assert_same_as_cli(&p, &s);
    p.write("models/f.lua", "define_model { name = \"s.f\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    s.reload(&[p.root().join("models/f.lua")]).unwrap();
    assert!(s.project().unwrap().dag.get(&efmesh::core::ModelName::parse("s.f").unwrap()).is_some());
    assert_same_as_cli(&p, &s);
    p.remove("models/f.lua");
    s.reload(&[p.root().join("models/f.lua")]).unwrap();
    assert!(s.project().unwrap().dag.get(&efmesh::core::ModelName::parse("s.f").unwrap()).is_none());
    assert_same_as_cli(&p, &s);
}
