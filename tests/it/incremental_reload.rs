//! A session's project and plan after random edits equal a load and a plan from scratch:
//! `Session::reload` updating the DAG in place (`Dag::try_replace`, its digest updated from the
//! replaced models' digests) or loading in full, and `Session::plan` reusing the actions of the
//! plan before (`plan::VersionMemo`: same state store, same catalog) or computing them. A save
//! a load from scratch refuses is refused by the reload too, with the same errors, and the
//! caches the session then writes never let a warm `efmesh check` or `apply` accept it.

use crate::common::*;
use efmesh::core::interval::parse_instant;
use efmesh::plan;
use efmesh::project::Project as Loaded;
use efmesh::script::loader::LoadCache;
use efmesh::session::{Session, open_state, plan_checked};

crate::on_every_engine!(a_session_after_random_edits_equals_a_load_and_a_plan_from_scratch, a_promotion_between_two_session_plans_is_seen);

/// A tiny deterministic generator (tests must not depend on a seed source).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

/// One model file: `s.m<i>` reading `parents` (none: a root over `generate_series`), its `WHERE` bound
/// `bound`, `extra` more columns (`e0`, …), `lib` requiring `lib/util.lua`, `comment` lines on top.
#[derive(Clone)]
struct Spec {
    parents: Vec<usize>,
    bound: i64,
    extra: usize,
    lib: bool,
    comment: usize,
    view: bool,
}

fn text(i: usize, s: &Spec) -> String {
    let mut cols: Vec<String> = vec!["id".into(), "v".into()];
    cols.extend((0..s.extra).map(|e| format!("e{e}")));
    let schema: Vec<String> = cols.iter().map(|c| format!("{{ \"{c}\", \"bigint\" }}")).collect();
    let extra: String = (0..s.extra).map(|e| format!(", id + {e} AS e{e}")).collect();
    let bound = if s.lib { format!("\" .. (u.base + {}) .. \"", s.bound) } else { s.bound.to_string() };
    let from = match s.parents.as_slice() {
        [] => "generate_series(0, 19) AS t(id)".to_string(),
        [p] => format!("\" .. ref(\"s.m{p}\") .. \" m{p}"),
        [p, q, ..] => format!("\" .. ref(\"s.m{p}\") .. \" m{p} JOIN \" .. ref(\"s.m{q}\") .. \" m{q} USING (id)"),
    };
    let v = match s.parents.first() {
        None => "id * 2".to_string(),
        Some(p) => format!("m{p}.v"),
    };
    let mut out = String::new();
    for c in 0..s.comment {
        out.push_str(&format!("-- comment {c}\n"));
    }
    if s.lib {
        out.push_str("local u = require(\"lib.util\")\n");
    }
    let kind = if s.view { "kind.view()" } else { "kind.full()" };
    out.push_str(&format!(
        "define_model {{ name = \"s.m{i}\", kind = {kind}, schema = {{ {} }}, query = \"SELECT id, {v} AS v{extra} FROM {from} WHERE id >= {bound}\" }}\n",
        schema.join(", ")
    ));
    out
}

fn scratch_project(p: &Project) -> Loaded {
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    let (project, _) = Loaded::load_with(&config, &mut LoadCache::in_memory());
    project.expect("the project loads from scratch")
}

fn a_session_after_random_edits_equals_a_load_and_a_plan_from_scratch(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    p.engine_url_in_process();
    p.write("lib/util.lua", "return { base = 1 }\n");
    let mut specs: Vec<Option<Spec>> = Vec::new();
    let mut path_of: Vec<String> = Vec::new();
    for i in 0..10 {
        let parents = match i {
            0 => vec![],
            1 | 2 => vec![0],
            _ => vec![i - 1 - (i % 3), i - 1].into_iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
        };
        let spec = Spec { parents, bound: 0, extra: 0, lib: i % 4 == 1, comment: 0, view: i % 5 == 2 };
        path_of.push(format!("models/m{i}.lua"));
        p.write(&path_of[i], &text(i, &spec));
        specs.push(Some(spec));
    }
    p.apply("dev");
    let now = parse_instant(NOW).unwrap();
    let mut session = Session::open(&p.root().join("efmesh.toml")).expect("session");
    let options = plan::Options::default();
    let check = |session: &Session, what: &str| {
        let scratch = scratch_project(&p);
        let mine = session.project().expect("the session's project loads");
        assert_eq!(mine.dag.digest(), scratch.dag.digest(), "DAG digest after {what}");
        assert_eq!(mine.dag.order(), scratch.dag.order(), "order after {what}");
        for (a, b) in mine.dag.models().zip(scratch.dag.models()) {
            assert_eq!(a, b, "model after {what}");
        }
        let incremental = session.plan("dev", now, &options).expect("session plan");
        let state = open_state(&scratch, false).expect("state");
        let full = plan_checked(&scratch, &*state, "dev", now, &options).expect("plan from scratch");
        assert_eq!(serde_json::to_value(&incremental).unwrap(), serde_json::to_value(&full).unwrap(), "plan after {what}");
        incremental.has_changes
    };
    assert!(!check(&session, "opening"));

    let mut rng = Lcg(0x5eed_0001);
    let (mut in_place, mut full) = (0, 0);
    for step in 0..40 {
        let live: Vec<usize> = (0..specs.len()).filter(|i| specs[*i].is_some()).collect();
        let k = live[rng.below(live.len())];
        let mut changed = vec![path_of[k].clone()];
        let what = match rng.below(10) {
            0..=2 => {
                specs[k].as_mut().unwrap().bound += 1;
                "a new WHERE bound"
            }
            3 => {
                specs[k].as_mut().unwrap().comment += 1;
                "a comment line"
            }
            4 => {
                specs[k].as_mut().unwrap().extra += 1;
                "an added column"
            }
            5 => {
                p.write("lib/util.lua", &format!("return {{ base = {} }}\n", step + 2));
                changed = vec!["lib/util.lua".into()];
                "a module edit"
            }
            6 => {
                // A new leaf model in a new file.
                let i = specs.len();
                let spec = Spec { parents: vec![k], bound: 0, extra: 0, lib: false, comment: 0, view: false };
                path_of.push(format!("models/new/m{i}.lua"));
                specs.push(Some(spec));
                changed = vec![path_of[i].clone()];
                "a new file"
            }
            7 => {
                // Moved to another file name.
                let old = path_of[k].clone();
                p.remove(&old);
                path_of[k] = format!("models/moved/m{k}_{step}.lua");
                changed = vec![old, path_of[k].clone()];
                "a renamed file"
            }
            8 => {
                // Reads one more parent (an edge added), or one fewer.
                let s = specs[k].as_mut().unwrap();
                if s.parents.len() > 1 {
                    s.parents.pop();
                } else if k > 0 && !s.parents.contains(&0) {
                    s.parents.push(0);
                }
                "a changed ref"
            }
            _ => {
                // Deleted, when nothing reads it.
                let read = specs.iter().flatten().any(|s| s.parents.contains(&k));
                if read || live.len() < 4 {
                    specs[k].as_mut().unwrap().bound += 1;
                    "a new WHERE bound"
                } else {
                    specs[k] = None;
                    p.remove(&path_of[k]);
                    "a deleted file"
                }
            }
        };
        for (i, s) in specs.iter().enumerate() {
            if let Some(s) = s
                && changed.contains(&path_of[i])
            {
                p.write(&path_of[i], &text(i, s));
            }
        }
        let paths: Vec<std::path::PathBuf> = changed.iter().map(|c| p.root().join(c)).collect();
        let r = session.reload(&paths).expect("reload");
        if r.in_place {
            in_place += 1;
        } else {
            full += 1;
        }
        check(&session, &format!("step {step}: {what} of m{k}"));
        session.save_caches();
        if step % 13 == 12 {
            // Another process applies (the generation moves), then reverts to what dev served
            // before: that apply only promotes (no new snapshot, the generation may stay).
            p.apply("dev");
            assert!(!check(&session, &format!("an apply after step {step}")));
        }
    }
    assert!(in_place >= 10 && full >= 5, "both paths taken: {in_place} in place, {full} full");
}

/// A pure promotion (versions that exist already) does not bump the store's generation; the
/// session still sees it (the id of the environment's last promotion is part of its key).
fn a_promotion_between_two_session_plans_is_seen(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    p.engine_url_in_process();
    p.apply("dev");
    let now = parse_instant(NOW).unwrap();
    let mut session = Session::open(&p.root().join("efmesh.toml")).expect("session");
    let options = plan::Options::default();
    assert!(!session.plan("dev", now, &options).unwrap().has_changes);
    p.write("models/a.lua", &portable_sample(&p, &model_a("AND range < 7")));
    session.reload(&[p.root().join("models/a.lua")]).unwrap();
    assert!(session.plan("dev", now, &options).unwrap().has_changes);
    p.apply("dev");
    let after = session.plan("dev", now, &options).unwrap();
    assert!(!after.has_changes, "dev serves the edit now");
    p.write("models/a.lua", &portable_sample(&p, &model_a("")));
    session.reload(&[p.root().join("models/a.lua")]).unwrap();
    assert!(session.plan("dev", now, &options).unwrap().has_changes);
    // Back to versions that exist: a view swap only.
    let applied = p.apply("dev");
    assert!(string_set(&applied["built"]).is_empty(), "{applied:#}");
    let replanned = session.plan("dev", now, &options).unwrap();
    assert!(!replanned.has_changes, "the promotion is seen: {}", serde_json::to_string_pretty(&replanned).unwrap());
}

/// The errors of a load of `p` from scratch (no cache of any kind), which must refuse it.
fn cold_errors(p: &Project) -> Vec<efmesh::core::LoadError> {
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).expect("config");
    match Loaded::load_with(&config, &mut LoadCache::in_memory()).0 {
        Ok(_) => panic!("a load from scratch refuses the edited project"),
        Err(e) => e.0,
    }
}

/// Writes `text` to `file` and reloads `session` with it: the session must report exactly the
/// errors a load from scratch reports (one of them containing `wanted`), and once it saved its
/// caches (as `watch` does after each re-plan), a warm `efmesh check` must refuse the project
/// too, with the same error.
#[track_caller]
fn assert_reload_refused_as_from_scratch(p: &Project, session: &mut Session, file: &str, text: &str, wanted: &str) {
    p.write(file, text);
    let r = session.reload(&[p.root().join(file)]).expect("reload");
    let cold = cold_errors(p);
    assert!(cold.iter().any(|e| e.message.contains(wanted)), "a load from scratch says `{wanted}`: {cold:#?}");
    let mine = session.project().expect_err("the session refuses what a load from scratch refuses");
    assert_eq!(mine.0, cold, "the session's load errors are those of a load from scratch");
    assert!(!r.in_place, "not accepted in place: {r:?}");
    session.save_caches();
    let run = p.run(&["check"]);
    assert_ne!(run.code, 0, "a warm `efmesh check` refuses it\n--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains(wanted) || run.stderr.contains(wanted), "`{wanted}`\n--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
}

/// Opens a session on `p` (which must load).
fn session_of(p: &Project) -> Session {
    let session = Session::open(&p.root().join("efmesh.toml")).expect("session");
    assert!(session.project().is_ok(), "the project loads before the edit: {:?}", session.project().err());
    session
}

/// A post-statement the engine's grammar cannot parse, saved over one it could, with the same
/// model names, refs and columns: a query edit still reloads in place, but this save is refused
/// as a load from scratch refuses it, and neither a warm `check` nor a warm `apply` accepts it.
#[test]
fn a_post_statement_that_does_not_parse_is_refused_after_a_reload_as_from_scratch() {
    let p = Project::new();
    let model = |query: &str, statement: &str| {
        format!(
            "define_model {{ name = \"s.a\", kind = kind.full(), schema = {{ {{\"x\",\"integer\"}} }}, query = \"{query}\", post_statements = {{ \"{statement}\" }} }}\n"
        )
    };
    p.write("models/a.lua", &model("SELECT 1 AS x", "ANALYZE @this"));
    let mut session = session_of(&p);
    p.write("models/a.lua", &model("SELECT 2 AS x", "ANALYZE @this"));
    let r = session.reload(&[p.root().join("models/a.lua")]).expect("reload");
    assert!(r.in_place && session.project().is_ok(), "a query edit reloads in place: {r:?}");
    assert_reload_refused_as_from_scratch(&p, &mut session, "models/a.lua", &model("SELECT 2 AS x", "ANALYZE @this garbage here"), "post-statement 1");
    let run = p.run(&["apply", "dev", "--yes"]);
    assert_ne!(run.code, 0, "a warm `apply` refuses it\n--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("post-statement 1") || run.stderr.contains("post-statement 1"), "{}\n{}", run.stdout, run.stderr);
}

/// A model file that stops requiring a library the model globs match: the library defines no
/// model now, and the reload says so as a load from scratch does.
#[test]
fn a_library_no_file_requires_any_more_is_refused_after_a_reload_as_from_scratch() {
    let p = Project::new();
    p.write("models/lib.lua", "return { k = \"1\" }\n");
    p.write(
        "models/b.lua",
        "local l = require(\"lib\")\ndefine_model { name = \"s.b\", kind = kind.full(), schema = { {\"k\",\"integer\"} }, query = \"SELECT \" .. l.k .. \" AS k\" }\n",
    );
    let mut session = session_of(&p);
    let text = "define_model { name = \"s.b\", kind = kind.full(), schema = { {\"k\",\"integer\"} }, query = \"SELECT 1 AS k\" }\n";
    assert_reload_refused_as_from_scratch(&p, &mut session, "models/b.lua", text, "this file defines no model");
}

/// A time-range model turned into an embedded model that keeps `@start`, read by a `full`
/// grandchild through another embedded model: the grandchild's check is the full load's, and
/// a warm `apply` fails with that load error, not with the engine's.
#[test]
fn an_embedded_model_with_bounds_read_by_a_grandchild_is_refused_after_a_reload_as_from_scratch() {
    let p = Project::new();
    p.write(
        "models/t.lua",
        "define_model { name = \"s.t\", kind = kind.incremental_by_time_range { time_column = \"d\", start = \"2026-12-01\", grain = \"day\" }, schema = { {\"d\",\"timestamp\"} }, query = \"SELECT @start AS d\" }\n",
    );
    p.write(
        "models/e2.lua",
        "define_model { name = \"s.e2\", kind = kind.embedded(), schema = { {\"d\",\"timestamp\"} }, query = \"SELECT d FROM \" .. ref(\"s.t\") }\n",
    );
    p.write(
        "models/g.lua",
        "define_model { name = \"s.g\", kind = kind.full(), schema = { {\"d\",\"timestamp\"} }, query = \"SELECT d FROM \" .. ref(\"s.e2\") }\n",
    );
    let mut session = session_of(&p);
    let text = "define_model { name = \"s.t\", kind = kind.embedded(), schema = { {\"d\",\"timestamp\"} }, query = \"SELECT @start AS d\" }\n";
    let wanted = "embedded model `s.t` uses `@start`/`@end`";
    assert_reload_refused_as_from_scratch(&p, &mut session, "models/t.lua", text, wanted);
    let run = p.run(&["apply", "dev", "--yes"]);
    assert_ne!(run.code, 0, "a warm `apply` refuses it\n--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains(wanted) || run.stderr.contains(wanted), "the load error, not the engine's\n{}\n{}", run.stdout, run.stderr);
}

/// The same change to a model another model's `relationships` audit reads.
#[test]
fn an_embedded_model_with_bounds_read_by_an_audit_is_refused_after_a_reload_as_from_scratch() {
    let p = Project::new();
    p.write(
        "models/t.lua",
        "define_model { name = \"s.t\", kind = kind.incremental_by_time_range { time_column = \"d\", start = \"2026-12-01\", grain = \"day\" }, schema = { {\"d\",\"timestamp\"} }, query = \"SELECT @start AS d\" }\n",
    );
    p.write(
        "models/a.lua",
        "define_model { name = \"s.a\", kind = kind.full(), schema = { {\"d\",\"timestamp\"} }, query = \"SELECT TIMESTAMP '2026-12-01' AS d\", audits = { audit.relationships { column = \"d\", to = \"s.t\" } } }\n",
    );
    let mut session = session_of(&p);
    let text = "define_model { name = \"s.t\", kind = kind.embedded(), schema = { {\"d\",\"timestamp\"} }, query = \"SELECT @start AS d\" }\n";
    assert_reload_refused_as_from_scratch(&p, &mut session, "models/t.lua", text, "reads embedded model `s.t`, which uses `@start`/`@end`");
}

/// An external pointed at the relation of a model of the project.
#[test]
fn an_external_reading_a_models_relation_is_refused_after_a_reload_as_from_scratch() {
    let p = Project::new();
    p.write("x.csv", "k\n1\n");
    p.write("models/a.lua", "define_model { name = \"s.a\", kind = kind.full(), schema = { {\"k\",\"integer\"} }, query = \"SELECT 1 AS k\" }\n");
    p.write("models/x.lua", "define_model { name = \"s.x\", kind = kind.external { path = \"x.csv\" }, schema = { {\"k\",\"integer\"} } }\n");
    let mut session = session_of(&p);
    let text = "define_model { name = \"s.x\", kind = kind.external { table = \"s.a\" }, schema = { {\"k\",\"integer\"} } }\n";
    assert_reload_refused_as_from_scratch(&p, &mut session, "models/x.lua", text, "is named like the relation `s.a` that external `s.x`");
}
