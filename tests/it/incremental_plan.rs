//! Incremental fingerprints in a session (`plan::VersionMemo`, `Session::plan`): after an edit,
//! only the edited model and its descendants are fingerprinted again, and the plan equals the
//! plan computed from scratch (no memo of any kind) after every edit.

use crate::common::*;
use efmesh::core::interval::parse_instant;
use efmesh::plan::{self, VersionMemo};
use efmesh::project::Project as Loaded;
use efmesh::session::{Session, open_state, plan_checked};

crate::on_every_engine!(only_edited_models_and_their_descendants_are_fingerprinted_again, a_session_plan_after_each_edit_equals_the_plan_from_scratch);

fn load(p: &Project) -> Loaded {
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    Loaded::load(&config).expect("project loads")
}

fn only_edited_models_and_their_descendants_are_fingerprinted_again(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.engine_url_in_process();
    p.apply("dev");
    let mut memo = VersionMemo::default();
    let project = load(&p);
    let state = open_state(&project, false).expect("state");
    let first = memo.versions(&project, &*state).expect("versions");
    assert_eq!(memo.recomputed(), project.dag.len(), "an empty memo fingerprints every model");
    assert_eq!(first.fingerprints, plan::versions(&project, &Default::default()).expect("full").fingerprints);

    let again = memo.versions(&project, &*state).expect("versions");
    assert_eq!(memo.recomputed(), 0, "nothing changed");
    assert_eq!(again.fingerprints, first.fingerprints);

    // `s.a` → `s.b` (view) → `s.c`: editing `s.a` re-fingerprints those three only.
    p.write("models/a.lua", &portable_sample(&p, &model_a("AND range < 7")));
    let project = load(&p);
    let edited = memo.versions(&project, &*state).expect("versions");
    assert_eq!(memo.recomputed(), 3);
    let full = plan::versions(&project, &Default::default()).expect("full");
    assert_eq!(edited.fingerprints, full.fingerprints);
    assert_eq!(edited.digests, full.digests);
    for m in ["s.a", "s.b", "s.c"] {
        let name = efmesh::core::ModelName::parse(m).unwrap();
        assert_ne!(edited.fingerprints[&name], first.fingerprints[&name], "{m}");
    }

    // A comment-only edit changes the definition as loaded (its location and text) but not the
    // canonical body: `s.a` is fingerprinted again, to the same fingerprint, so `s.b` and `s.c`
    // keep theirs without being fingerprinted.
    p.write("models/a.lua", &portable_sample(&p, &format!("-- a comment\n{}", model_a("AND range < 7"))));
    let project = load(&p);
    let commented = memo.versions(&project, &*state).expect("versions");
    assert_eq!(memo.recomputed(), 1);
    assert_eq!(commented.fingerprints, edited.fingerprints);

    // Reverting goes back to the applied versions.
    p.write("models/a.lua", &portable_sample(&p, &model_a("")));
    let project = load(&p);
    assert_eq!(memo.versions(&project, &*state).expect("versions").fingerprints, first.fingerprints);
}

/// The plan `Session::plan` returns, and the plan computed from scratch for the same project.
fn both(session: &Session, now: i64) -> (serde_json::Value, serde_json::Value) {
    let project = session.loaded().expect("loads");
    let state = open_state(project, false).expect("state");
    let incremental = session.plan("dev", now, &plan::Options::default()).expect("session plan");
    let scratch = plan_checked(project, &*state, "dev", now, &plan::Options::default()).expect("plan");
    // The session repeats the cache entries it computed until they are stored; never fewer.
    let misses = |p: &plan::Plan| p.canon_cache_misses.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    assert!(misses(&incremental).is_superset(&misses(&scratch)));
    (serde_json::to_value(&incremental).unwrap(), serde_json::to_value(&scratch).unwrap())
}

fn a_session_plan_after_each_edit_equals_the_plan_from_scratch(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.engine_url_in_process();
    p.apply("dev");
    let now = parse_instant(NOW).unwrap();
    let mut session = Session::open(&p.root().join("efmesh.toml")).expect("session");
    let (inc, scratch) = both(&session, now);
    assert_eq!(inc, scratch);
    assert_eq!(inc["hasChanges"], false, "{inc:#}");

    let edits: Vec<(&str, String)> = vec![
        ("models/a.lua", model_a("AND range < 7")),
        ("models/b.lua", model_b("SELECT id, label, id * 3 AS twice FROM {a} WHERE id > 1")),
        ("models/d.lua", model_d("'y' || id")),
        (
            "models/e.lua",
            "define_model { name = \"s.f\", kind = kind.full(), schema = { { \"n\", \"bigint\" } }, query = \"SELECT count(*) AS n FROM \" .. ref(\"s.c\") }\n"
                .into(),
        ),
        ("models/a.lua", model_a("")),
    ];
    for (file, text) in &edits {
        p.write(file, &portable_sample(&p, text));
        session.reload(&[p.root().join(file)]).expect("reload");
        let (inc, scratch) = both(&session, now);
        assert_eq!(inc, scratch, "after writing {file}");
        assert_eq!(inc["hasChanges"], true, "after writing {file}: {inc:#}");
    }
    // The clock moves on and nothing is written: the session keeps its actions, and the missing
    // intervals of the daily model `t.daily` follow the clock (recomputed once a day boundary is
    // crossed, kept within the day).
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;
    let daily_intervals = |plan: &serde_json::Value| {
        plan["actions"].as_array().and_then(|a| a.iter().find(|x| x["name"] == "t.daily")).map(|x| x["intervals"].clone()).expect("t.daily in the plan")
    };
    let mut seen = Vec::new();
    for later in [now + HOUR, now + DAY, now + DAY + HOUR, now + 3 * DAY] {
        let (inc, scratch) = both(&session, later);
        assert_eq!(inc, scratch, "at {later}");
        seen.push(daily_intervals(&inc));
    }
    assert_ne!(seen[0], seen[1], "a day later, one more interval of `t.daily` is due: {seen:?}");
    assert_ne!(seen[2], seen[3], "{seen:?}");
    // A deleted model file, then every edit undone: the session plans what dev serves.
    p.remove("models/e.lua");
    session.reload(&[p.root().join("models/e.lua")]).expect("reload");
    p.write("models/b.lua", &portable_sample(&p, &model_b(B_QUERY)));
    p.write("models/d.lua", &portable_sample(&p, &model_d("'x' || id")));
    session.reload(&[p.root().join("models/b.lua"), p.root().join("models/d.lua")]).expect("reload");
    let (inc, scratch) = both(&session, now);
    assert_eq!(inc, scratch);
    assert_eq!(inc["hasChanges"], false, "{inc:#}");
}
