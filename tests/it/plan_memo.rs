//! The plan memo (`src/plan/memo.rs`): after an apply, a plan of the unchanged project is
//! replayed from the memo instead of computed, and it must be exactly the plan computed in full —
//! at the same instant and later ones (new intervals due) — while any edit or store write makes
//! the plan compute in full again.

use crate::common::*;
use efmesh::config::Config;
use efmesh::core::interval::parse_instant;
use efmesh::plan::{self, Options, Plan};
use efmesh::project::Project as Loaded;

fn load(p: &Project) -> Loaded {
    Loaded::load(&Config::load(&p.root().join("efmesh.toml")).expect("config")).expect("project loads")
}

fn at(s: &str) -> i64 {
    parse_instant(s).expect("instant")
}

fn json(plan: &Plan) -> serde_json::Value {
    serde_json::to_value(plan).expect("plan serialises")
}

// On a SQLite and on a Postgres state store, on DuckDB and on Postgres, alike.
crate::on_every_engine_and_state_backend!(
    a_plan_right_after_apply_is_replayed_and_equals_the_full_plan,
    editing_a_model_computes_the_plan_in_full,
    store_writes_compute_the_plan_in_full_and_each_apply_records_a_new_memo,
);

crate::on_every_engine!(
    operator_options_never_use_the_memo,
    promoting_an_existing_version_records_the_metadata_for_that_environment_only,
    a_plan_is_refused_when_the_store_changed_since_it_was_computed,
);

/// Plans `env` through the memo and in full; both must agree. Returns whether the memo served.
#[track_caller]
fn plan_both(p: &Project, env: &str, now: &str) -> (bool, serde_json::Value) {
    let project = load(p);
    let state = p.store().expect("a state store");
    let via = plan::plan_with(&project, &*state, env, at(now), &Options::default()).expect("plan");
    let full = plan::compute(&project, &*state, env, at(now), &Options::default()).expect("plan");
    assert!(!full.from_memo);
    assert_eq!(json(&via), json(&full), "memo and full plan differ at {now}");
    (via.from_memo, json(&via))
}

fn a_plan_right_after_apply_is_replayed_and_equals_the_full_plan(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    let (memo, v) = plan_both(&p, "dev", NOW);
    assert!(memo, "the plan after apply should come from the memo");
    assert_eq!(v["hasChanges"], false);
    // Three days later the time-range model has new intervals due: still replayed, still equal.
    let (memo, v) = plan_both(&p, "dev", "2026-02-13T05:00:00Z");
    assert!(memo);
    assert_eq!(v["hasChanges"], true);
    assert_eq!(action(&v, "t.daily")["intervals"], 3 + 1, "three new days plus the lookback day: {v:#}");
}

fn editing_a_model_computes_the_plan_in_full(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let (memo, v) = plan_both(&p, "dev", NOW);
    assert!(!memo, "an edited project must not replay the memo");
    assert_eq!(action(&v, "s.a")["change"], "breaking");
    // Reformatting is a different load too (another memo key), though the plan has no changes.
    p.write("models/a.lua", &format!("\n\n{}", portable_sample(&p, &model_a(""))));
    let (memo, v) = plan_both(&p, "dev", NOW);
    assert!(!memo);
    assert_eq!(v["hasChanges"], false);
}

fn store_writes_compute_the_plan_in_full_and_each_apply_records_a_new_memo(backend: StateBackend, engine: EngineBackend) {
    let p = sample_project_with(backend, engine);
    p.apply("dev");
    assert!(plan_both(&p, "dev", NOW).0);
    // Promoting prod (a view swap) only changes prod's pointers: dev's memo stays valid.
    p.apply("prod");
    let (memo, v) = plan_both(&p, "dev", NOW);
    assert!(memo, "a promotion of another environment must not invalidate dev's memo");
    assert_eq!(v["hasChanges"], false);
    assert!(plan_both(&p, "prod", NOW).0, "prod's own apply recorded prod's memo");
    // A build writes snapshots and the ledger: every memo is stale.
    p.write("models/d.lua", &portable_sample(&p, &model_d("'y' || id")));
    p.apply("staging");
    p.write("models/d.lua", &portable_sample(&p, &model_d("'x' || id")));
    let (memo, v) = plan_both(&p, "prod", NOW);
    assert!(!memo, "a build must invalidate other environments' memos");
    assert_eq!(v["hasChanges"], false);
    // A ledger write (someone marks an interval failed) also invalidates.
    let state = p.store().expect("a state store");
    let fp = p.plan("prod")["actions"].as_array().unwrap().iter().find(|a| a["name"] == "t.daily").unwrap()["fingerprint"].as_str().unwrap().to_string();
    let day = at("2026-01-03T00:00:00Z");
    state.mark_intervals("t.daily", &fp, &[efmesh::core::Interval::new(day, day + 86_400_000)], efmesh::state::IntervalStatus::Failed, day).unwrap();
    let (memo, v) = plan_both(&p, "prod", NOW);
    assert!(!memo, "a ledger write must invalidate the memo");
    // The failed day is due again, with the day before it (lookback 1).
    assert_eq!(action(&v, "t.daily")["intervals"], 2, "{v:#}");
    assert_eq!(action(&v, "t.daily")["backfill"][0]["end"], "2026-01-04T00:00:00.000Z", "{v:#}");
}

fn operator_options_never_use_the_memo(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    let project = load(&p);
    let options = Options::parse("t.daily", "").unwrap();
    let via = plan::plan_with(&project, &p.state(), "dev", at(NOW), &options).expect("plan");
    assert!(!via.from_memo);
}

fn promoting_an_existing_version_records_the_metadata_for_that_environment_only(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.apply("dev");
    // A description-only edit keeps the fingerprint: prod promotes the existing version.
    let a = p.read("models/a.lua").replacen("define_model {", "define_model {\n  description = \"edited after dev\",", 1);
    p.write("models/a.lua", &a);
    let v = p.apply("prod");
    assert!(v["built"].as_array().unwrap().is_empty(), "{v:#}");
    // Neither the memo nor the full plan may see a leftover `metadata` change in prod.
    let (memo, v) = plan_both(&p, "prod", NOW);
    assert!(memo);
    assert_eq!(v["hasChanges"], false, "{v:#}");
    // Metadata belongs to what an environment serves: dev still serves the old description.
    let (_, v) = plan_both(&p, "dev", NOW);
    assert_eq!(action(&v, "s.a")["change"], "metadata", "{v:#}");
    assert!(p.state().env_metadata("prod").unwrap()["s.a"].contains("edited after dev"));
    assert!(!p.state().env_metadata("dev").unwrap()["s.a"].contains("edited after dev"));
}

fn a_plan_is_refused_when_the_store_changed_since_it_was_computed(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    // This process opens the engine below.
    p.engine_url_in_process();
    p.apply("dev");
    p.write("models/a.lua", &portable_sample(&p, &model_a(" AND range > 2")));
    let project_edited = load(&p);
    let stale = plan::plan(&project_edited, &p.state(), "dev", at(NOW)).expect("plan");
    assert!(stale.has_changes);
    // Another process applies meanwhile (here: the edit, to dev).
    p.apply("dev");
    let before = p.state_summary();
    // The engine the project names, opened in this process for writing.
    let mut engine = efmesh::engine::open(&project_edited.config, efmesh::engine::Access::ReadWrite).unwrap();
    let err = efmesh::apply::apply(&project_edited, &stale, &p.state(), &mut *engine, &efmesh::apply::Options::default()).unwrap_err();
    assert!(err.to_string().contains("changed since this plan"), "{err}");
    assert_eq!(p.state_summary(), before, "a refused plan writes nothing");
    // A fresh plan is fine again (and has nothing left to do).
    let fresh = plan::plan(&project_edited, &p.state(), "dev", at(NOW)).expect("plan");
    assert!(!fresh.has_changes);
}
