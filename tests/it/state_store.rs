//! The state store's behaviour, written once against the `StateStore` trait and run on every
//! backend: a SQLite file and a Postgres schema (`tests/it/pg.rs` provides the server). Each
//! behaviour is a function taking a [`Backend`] (which opens as many handles on ONE store as a
//! test needs); `on_every_backend!` makes one test of it per backend. Postgres-only behaviour
//! (the URL never shown, versions refused, races on creation) follows.

use crate::pg;
use efmesh::core::Interval;
use efmesh::core::interval::{now_millis, parse_instant, to_iso};
use efmesh::state::{
    AuditPass, Claim, Condemned, DoneMark, Intent, IntervalStatus, LeaseClaim, LeaseHolder, LeaseRecord, PostgresStore, RestateTarget, Restated,
    SnapshotRecord, StateError, StateStore, Tick,
};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};

/// One store of one backend; every [`Backend::open`] is another handle on it.
pub trait Backend: Sync {
    fn open(&self) -> Box<dyn StateStore>;
}

/// A SQLite file in a temporary directory.
pub struct Sqlite {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Sqlite {
    pub fn new() -> Sqlite {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("efmesh.state.sqlite");
        Sqlite { _dir: dir, path }
    }
}

impl Backend for Sqlite {
    fn open(&self) -> Box<dyn StateStore> {
        Box::new(efmesh::state::SqliteStore::open(&self.path).expect("open the SQLite store"))
    }
}

/// A fresh schema on the test Postgres.
pub struct Postgres(pub pg::PgTarget);

impl Backend for Postgres {
    fn open(&self) -> Box<dyn StateStore> {
        Box::new(self.0.open())
    }
}

macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(&super::Sqlite::new()) })*
        }
        mod postgres {
            $(#[test] fn $name() { if let Some(t) = crate::pg::fresh() { super::$name(&super::Postgres(t)) } })*
        }
    };
}

on_every_backend!(
    snapshots_round_trip_and_keep_their_first_payload,
    promotion_replaces_the_pointer_set_journals_and_releases_what_it_stops_serving,
    a_promotion_with_a_missing_snapshot_changes_nothing,
    the_ledger_records_failed_then_done_per_name_and_fingerprint_and_clears_ranges,
    a_restatement_clears_every_target_or_none,
    a_done_record_is_refused_once_a_restatement_moved_the_version_since_its_build_began,
    the_generation_counts_data_writes_and_plan_state_sees_every_promotion,
    the_plan_memo_round_trips_and_a_promotion_drops_only_its_environments_memo,
    a_lease_is_held_between_two_handles_until_released_expired_or_stale,
    a_fenced_writer_that_lost_its_lease_to_another_handle_stops_before_writing,
    intents_are_refused_on_claimed_storage_and_a_claim_deletes_the_versions_rows,
    data_generations_bump_for_sharers_and_an_untouched_write_mark_is_taken_back,
    a_version_inheriting_a_ledger_moves_alone_and_a_write_into_the_table_moves_every_version_on_it,
    caches_ticks_promotions_under_way_orphans_and_audit_passes_round_trip,
    concurrent_writers_on_separate_handles_lose_no_write_and_journal_in_commit_order,
    concurrent_lease_takers_on_separate_handles_get_exactly_one_lease,
    every_store_has_its_own_identity_shared_by_its_handles,
    a_recorded_refresh_is_the_newest_done_end_and_moves_no_data_generation,
    an_import_never_lowers_the_issued_epoch_counter,
    an_import_is_refused_when_an_epoch_was_issued_since_the_counter_it_was_given,
    dropping_an_environment_deletes_its_run_ticks_and_creating_it_again_starts_with_none,
);

const DAY: i64 = 86_400_000;

fn fp(c: char) -> String {
    c.to_string().repeat(64)
}

fn t(s: &str) -> i64 {
    parse_instant(s).unwrap()
}

fn rec(name: &str, fingerprint: &str) -> SnapshotRecord {
    SnapshotRecord {
        name: name.to_string(),
        fingerprint: fingerprint.to_string(),
        fingerprint_version: 2,
        kind: "incremental_by_time_range".to_string(),
        physical: format!("\"_efmesh\".\"{}__{fingerprint}\"", name.replace('.', "__")),
        canonical: Some("SELECT 1 AS \"x\"".to_string()),
        rendered_sql: "SELECT 1 AS x WHERE t >= $start AND t < $end".to_string(),
        // Key order is kept (not alphabetical).
        metadata: json!({"schema": [["x", "INTEGER"]], "description": "d", "kind": {"grain": "day"}}),
        created_at: "2026-01-01T10:00:00.123Z".to_string(),
    }
}

fn days(from: &str, n: i64) -> Vec<Interval> {
    let s = t(from);
    (0..n).map(|i| Interval::new(s + i * DAY, s + (i + 1) * DAY)).collect()
}

fn holder(pid: u32) -> LeaseHolder {
    LeaseHolder { pid, host: "h".into(), command: "efmesh apply dev".into(), started_at: "2026-01-01T00:00:00.000Z".into() }
}

fn pointers(list: &[(&str, char)]) -> BTreeMap<String, String> {
    list.iter().map(|(n, c)| (n.to_string(), fp(*c))).collect()
}

fn snapshots_round_trip_and_keep_their_first_payload(b: &dyn Backend) {
    let store = b.open();
    assert_eq!(store.snapshot("a.b", &fp('1')).unwrap(), None);
    let mut external = rec("src.raw", &fp('2'));
    external.physical = String::new();
    external.canonical = None;
    external.kind = "external".to_string();
    store.put_snapshot(&rec("a.b", &fp('1'))).unwrap();
    store.put_snapshot(&external).unwrap();
    let mut changed = rec("a.b", &fp('1'));
    changed.rendered_sql = "SELECT 2".into();
    store.put_snapshot(&changed).unwrap();
    let other = b.open();
    let read = other.snapshot("a.b", &fp('1')).unwrap().unwrap();
    assert_eq!(read, rec("a.b", &fp('1')));
    assert_eq!(serde_json::to_string(&read.metadata).unwrap(), r#"{"schema":[["x","INTEGER"]],"description":"d","kind":{"grain":"day"}}"#);
    assert_eq!(other.snapshot("src.raw", &fp('2')).unwrap(), Some(external));
    assert_eq!(other.snapshot_keys().unwrap(), [("a.b".to_string(), fp('1')), ("src.raw".to_string(), fp('2'))].into_iter().collect());
    let index = other.snapshot_index().unwrap();
    assert_eq!(index[&("src.raw".to_string(), fp('2'))], (String::new(), "external".to_string()));
    assert_eq!(store.schema_version().unwrap(), efmesh::state::STATE_VERSION);
}

fn promotion_replaces_the_pointer_set_journals_and_releases_what_it_stops_serving(b: &dyn Backend) {
    let store = b.open();
    for (n, c) in [("a.one", '1'), ("a.two", '2'), ("a.one", '3'), ("a.three", '4')] {
        store.put_snapshot(&rec(n, &fp(c))).unwrap();
    }
    assert!(store.environments().unwrap().is_empty());
    let first = pointers(&[("a.one", '1'), ("a.two", '2')]);
    let meta = BTreeMap::from([("a.one".to_string(), r#"{"description":"one"}"#.to_string())]);
    let id1 = store.promote("dev", &first, &meta, &first.keys().cloned().collect(), &json!({"n": 1}), "alice", t("2026-01-02")).unwrap();
    assert_eq!(store.env_pointers("dev").unwrap(), first);
    assert_eq!(store.env_metadata("dev").unwrap()["a.one"], r#"{"description":"one"}"#);
    assert_eq!(store.env_metadata("dev").unwrap()["a.two"], "{}");
    store.record_intents("dev", &[Intent { name: "a.one".into(), fingerprint: fp('1'), physical: String::new(), must_exist: true }], t("2026-01-02")).unwrap();
    let second = pointers(&[("a.one", '3'), ("a.three", '4'), ("src.raw", '9')]);
    let req: BTreeSet<String> = ["a.one".to_string(), "a.three".to_string()].into();
    let id2 = store.promote("dev", &second, &BTreeMap::new(), &req, &json!({"n": 2}), "bob", t("2026-01-03T04:05:06.007Z")).unwrap();
    assert!(id2 > id1);
    assert_eq!(b.open().env_pointers("dev").unwrap(), second);
    let id3 = store.promote("prod", &first, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", t("2026-01-04")).unwrap();
    assert!(id3 > id2);
    assert_eq!(store.environments().unwrap(), vec!["dev".to_string(), "prod".to_string()]);
    let journal = store.journal("dev").unwrap();
    assert_eq!(
        journal.iter().map(|j| (j.id, j.summary.clone(), j.applied_at.as_str(), j.applied_by.as_str())).collect::<Vec<_>>(),
        vec![(id1, json!({"n": 1}), "2026-01-02T00:00:00.000Z", "alice"), (id2, json!({"n": 2}), "2026-01-03T04:05:06.007Z", "bob")]
    );
    // The versions dev stopped serving are released at its promotion; its intents are gone.
    let inv = store.janitor_inventory().unwrap();
    let released: BTreeMap<(String, String), Option<String>> =
        inv.versions.iter().map(|v| ((v.name.clone(), v.fingerprint.clone()), v.released_at.clone())).collect();
    assert_eq!(released[&("a.one".to_string(), fp('1'))].as_deref(), Some("2026-01-03T04:05:06.007Z"));
    assert_eq!(released[&("a.three".to_string(), fp('4'))], None);
    assert!(inv.intents.is_empty(), "{:?}", inv.intents);
    assert!(inv.served.contains(&("a.two".to_string(), fp('2'))), "prod serves a.two");
}

fn a_promotion_with_a_missing_snapshot_changes_nothing(b: &dyn Backend) {
    let store = b.open();
    store.put_snapshot(&rec("a.one", &fp('1'))).unwrap();
    let good = pointers(&[("a.one", '1')]);
    store.promote("dev", &good, &BTreeMap::new(), &good.keys().cloned().collect(), &json!({}), "ci", t("2026-01-02")).unwrap();
    let journal = store.journal("dev").unwrap();
    let bad = pointers(&[("a.one", '1'), ("a.gone", '7')]);
    let err = store.promote("dev", &bad, &BTreeMap::new(), &bad.keys().cloned().collect(), &json!({}), "ci", t("2026-01-03")).unwrap_err();
    assert!(err.is_missing_snapshot(), "{err:?}");
    assert!(err.to_string().contains("`a.gone`"), "{err}");
    let req: BTreeSet<String> = ["a.one".to_string(), "a.other".to_string()].into();
    let err = store.promote("dev", &good, &BTreeMap::new(), &req, &json!({}), "ci", t("2026-01-03")).unwrap_err();
    assert!(matches!(&err, StateError::MissingPointer { name, .. } if name == "a.other"), "{err:?}");
    assert_eq!(store.env_pointers("dev").unwrap(), good);
    assert_eq!(store.journal("dev").unwrap(), journal);
}

fn the_ledger_records_failed_then_done_per_name_and_fingerprint_and_clears_ranges(b: &dyn Backend) {
    let store = b.open();
    let (a, other) = (fp('a'), fp('b'));
    store.mark_intervals("m.x", &a, &days("2026-01-01", 3), IntervalStatus::Failed, t("2026-01-05")).unwrap();
    assert!(store.done_intervals("m.x", &a).unwrap().is_empty());
    let stats = store.ledger_stats("m.x", &a).unwrap();
    assert_eq!((stats.done, stats.failed, stats.done_up_to, stats.done_from), (0, 3, None, None));
    store.mark_intervals("m.x", &a, &days("2026-01-02", 3), IntervalStatus::Done, t("2026-01-06")).unwrap();
    store.mark_intervals("m.y", &a, &days("2026-01-09", 1), IntervalStatus::Done, t("2026-01-06")).unwrap();
    store.mark_intervals("m.x", &other, &days("2026-01-20", 1), IntervalStatus::Done, t("2026-01-06")).unwrap();
    let done: Vec<i64> = store.done_intervals("m.x", &a).unwrap().into_iter().collect();
    assert_eq!(done, vec![t("2026-01-02"), t("2026-01-03"), t("2026-01-04")]);
    let stats = store.ledger_stats("m.x", &a).unwrap();
    // The oldest DONE start: the failed Jan 1 before it does not count.
    assert_eq!((stats.done, stats.failed, stats.done_up_to, stats.done_from), (3, 1, Some(t("2026-01-05")), Some(t("2026-01-02"))));
    let all = store.all_done_intervals().unwrap();
    assert_eq!(all.len(), 3, "keyed by name AND fingerprint: {all:?}");
    assert_eq!(all[&("m.y".to_string(), a.clone())], BTreeSet::from([t("2026-01-09")]));
    // Clearing a range deletes only the done intervals whose start lies in it.
    assert_eq!(store.clear_intervals("m.x", &a, t("2026-01-03"), t("2026-01-04")).unwrap(), 1);
    assert_eq!(b.open().done_intervals("m.x", &a).unwrap(), BTreeSet::from([t("2026-01-02"), t("2026-01-04")]));
    // Nothing recorded for an empty batch.
    let g = store.generation().unwrap();
    store.mark_intervals("m.x", &a, &[], IntervalStatus::Done, 0).unwrap();
    assert_eq!(store.generation().unwrap(), g);
}

fn a_restatement_clears_every_target_or_none(b: &dyn Backend) {
    let store = b.open();
    for (n, c) in [("m.a", '1'), ("m.b", '2')] {
        store.put_snapshot(&rec(n, &fp(c))).unwrap();
        store.mark_intervals(n, &fp(c), &days("2026-01-01", 4), IntervalStatus::Done, t("2026-01-05")).unwrap();
    }
    let ptrs = pointers(&[("m.a", '1'), ("m.b", '2')]);
    store.promote("prod", &ptrs, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", t("2026-01-05")).unwrap();
    let target = |n: &str, c: char, from: &str, to: &str| RestateTarget { name: n.into(), fingerprint: fp(c), from: t(from), to: t(to) };
    // The second target names a version prod does not serve: nothing is cleared.
    let err = store.restate_intervals("prod", &[target("m.a", '1', "2026-01-01", "2026-01-03"), target("m.b", '9', "2026-01-01", "2026-01-03")]).unwrap_err();
    assert!(err.is_pointer_moved(), "{err:?}");
    assert_eq!(store.done_intervals("m.a", &fp('1')).unwrap().len(), 4);
    let cleared = store.restate_intervals("prod", &[target("m.a", '1', "2026-01-01", "2026-01-03"), target("m.b", '2', "2026-01-04", "2026-01-10")]).unwrap();
    assert_eq!(cleared, vec![2, 1]);
    assert_eq!(store.done_intervals("m.a", &fp('1')).unwrap().len(), 2);
}

/// A batch's done record is a compare-and-set on its version's data generation
/// (`mark_done_unless_moved`, SPEC §4 invariant 33): recorded while the generation is the one
/// the build expects, each record handing on the next one; refused, writing nothing (no ledger
/// row, neither the version's nor the store's generation moved), once a restatement on another
/// handle moved it — also a restatement that cleared nothing while an apply or run of another
/// environment relies on the version (its intents), but not one that cleared nothing with none
/// relying on it (its own environment's intents do not count: it holds that environment's lock).
fn a_done_record_is_refused_once_a_restatement_moved_the_version_since_its_build_began(b: &dyn Backend) {
    let (store, other) = (b.open(), b.open());
    let (name, v) = ("m.a", fp('1'));
    store.put_snapshot(&rec(name, &v)).unwrap();
    store.promote("prod", &pointers(&[("m.a", '1')]), &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", 0).unwrap();
    let key = vec![(name.to_string(), v.clone())];
    let generation = || other.data_versions(&key).unwrap().get(&key[0]).map_or(0, |d| d.generation);
    // One build's records, one after another: each expects what the previous one left.
    assert_eq!(generation(), 0);
    assert_eq!(store.mark_done_unless_moved(name, &v, &days("2026-01-01", 2), 0, 0).unwrap(), DoneMark::Recorded { generation: 1 });
    assert_eq!(store.mark_done_unless_moved(name, &v, &days("2026-01-03", 1), 1, 0).unwrap(), DoneMark::Recorded { generation: 2 });
    assert_eq!((generation(), other.done_intervals(name, &v).unwrap().len()), (2, 3));
    // `restate prod` on another handle while the build's next batch runs.
    let target = RestateTarget { name: name.into(), fingerprint: v.clone(), from: t("2026-01-01"), to: t("2026-01-06") };
    assert_eq!(other.restate_intervals("prod", std::slice::from_ref(&target)).unwrap(), vec![3]);
    let (moved, writes) = (generation(), other.generation().unwrap());
    assert_eq!(moved, 3);
    assert_eq!(store.mark_done_unless_moved(name, &v, &days("2026-01-04", 1), 2, 0).unwrap(), DoneMark::Moved { found: 3 });
    assert!(other.done_intervals(name, &v).unwrap().is_empty(), "not recorded: the restated range stays missing");
    assert_eq!((generation(), other.generation().unwrap()), (moved, writes), "a refused record writes nothing");
    // A build begun after the restatement records.
    assert_eq!(store.mark_done_unless_moved(name, &v, &days("2026-01-04", 1), 3, 0).unwrap(), DoneMark::Recorded { generation: 4 });
    assert_eq!(other.done_intervals(name, &v).unwrap(), BTreeSet::from([t("2026-01-04")]));
    // Nothing done in the range: nothing moves while no other environment's apply or run
    // relies on the version...
    let empty = RestateTarget { from: t("2026-02-01"), to: t("2026-02-03"), ..target.clone() };
    let intent = Intent { name: name.into(), fingerprint: v.clone(), physical: rec(name, &v).physical, must_exist: true };
    store.record_intents("prod", std::slice::from_ref(&intent), 0).unwrap();
    assert_eq!(other.restate("prod", std::slice::from_ref(&empty)).unwrap(), vec![Restated { cleared: 0, fenced: false }]);
    assert_eq!(generation(), 4, "no batch of the range can be under way");
    // ... while one does (`run dev` under way), its batch of the range is refused: the
    // restatement says it moved the generation as a fence.
    store.record_intents("dev", std::slice::from_ref(&intent), 0).unwrap();
    assert_eq!(other.restate("prod", std::slice::from_ref(&empty)).unwrap(), vec![Restated { cleared: 0, fenced: true }]);
    assert_eq!(generation(), 5);
    assert_eq!(store.mark_done_unless_moved(name, &v, &days("2026-02-01", 1), 4, 0).unwrap(), DoneMark::Moved { found: 5 });
    assert!(!other.done_intervals(name, &v).unwrap().contains(&t("2026-02-01")));
    // An empty record writes and checks nothing.
    assert_eq!(store.mark_done_unless_moved(name, &v, &[], 0, 0).unwrap(), DoneMark::Recorded { generation: 0 });
}

fn the_generation_counts_data_writes_and_plan_state_sees_every_promotion(b: &dyn Backend) {
    let store = b.open();
    let other = b.open();
    let g0 = store.generation().unwrap();
    store.put_snapshot(&rec("m.a", &fp('1'))).unwrap();
    assert_eq!(other.generation().unwrap(), g0 + 1);
    let key = other.plan_state("dev").unwrap().expect("the store can say");
    // Neither a memo, a lease nor a tick moves the generation.
    store.plan_memo_put("dev", "k", "body").unwrap();
    store.try_acquire_lease("env:x", "tok", &holder(1), now_millis() + 60_000, now_millis(), &|_| false).unwrap();
    store
        .record_tick(&Tick {
            env: "dev".into(),
            started_at: to_iso(0),
            finished_at: to_iso(1),
            outcome: "nothing-due".into(),
            processed: BTreeMap::new(),
            detail: None,
        })
        .unwrap();
    assert_eq!(other.plan_state("dev").unwrap(), Some(key));
    // A promotion of another environment does not move the generation but moves the key.
    store.promote("prod", &pointers(&[("m.a", '1')]), &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", 0).unwrap();
    assert_eq!(other.generation().unwrap(), g0 + 1);
    let after = other.plan_state("dev").unwrap().unwrap();
    assert_ne!(after, key);
    assert!(after.2 > key.2);
    assert_eq!(after.0, other.generation().unwrap(), "the generation itself, claims apart");
}

fn the_plan_memo_round_trips_and_a_promotion_drops_only_its_environments_memo(b: &dyn Backend) {
    let store = b.open();
    assert_eq!(store.plan_memo_get("dev").unwrap(), None);
    store.plan_memo_put("dev", "k1", "b1").unwrap();
    store.plan_memo_put("dev", "k2", "b2").unwrap();
    store.plan_memo_put("prod", "kp", "bp").unwrap();
    assert_eq!(b.open().plan_memo_get("dev").unwrap(), Some(("k2".to_string(), "b2".to_string())));
    store.promote("dev", &BTreeMap::new(), &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", 0).unwrap();
    assert_eq!(store.plan_memo_get("dev").unwrap(), None);
    assert_eq!(store.plan_memo_get("prod").unwrap(), Some(("kp".to_string(), "bp".to_string())));
}

fn a_lease_is_held_between_two_handles_until_released_expired_or_stale(b: &dyn Backend) {
    let (one, two) = (b.open(), b.open());
    let never = |_: &LeaseRecord| false;
    let always = |_: &LeaseRecord| true;
    let now = t("2026-01-01");
    assert_eq!(one.try_acquire_lease("env:dev", "a", &holder(1), now + 1000, now, &never).unwrap(), LeaseClaim::Acquired { reclaimed: None });
    match two.try_acquire_lease("env:dev", "b", &holder(2), now + 1000, now, &never).unwrap() {
        LeaseClaim::Held(l) => assert_eq!((l.holder.pid, l.token.as_str(), l.holder.command.as_str()), (1, "a", "efmesh apply dev")),
        other => panic!("{other:?}"),
    }
    // The holder taking it again keeps it.
    assert_eq!(one.try_acquire_lease("env:dev", "a", &holder(1), now + 1000, now, &never).unwrap(), LeaseClaim::Acquired { reclaimed: None });
    assert!(matches!(two.try_acquire_lease("env:prod", "b", &holder(2), now + 1000, now, &never).unwrap(), LeaseClaim::Acquired { .. }));
    assert!(one.renew_lease("env:dev", "a", now + 5000, now).unwrap());
    assert!(!two.renew_lease("env:dev", "b", now + 5000, now).unwrap());
    assert!(matches!(two.try_acquire_lease("env:dev", "b", &holder(2), now + 9000, now + 4000, &never).unwrap(), LeaseClaim::Held(_)));
    match two.try_acquire_lease("env:dev", "b", &holder(2), now + 9000, now + 5000, &never).unwrap() {
        LeaseClaim::Acquired { reclaimed: Some(old) } => assert_eq!(old.token, "a"),
        other => panic!("expired: reclaimed, got {other:?}"),
    }
    assert!(matches!(one.try_acquire_lease("env:dev", "c", &holder(3), now + 9000, now + 5000, &always).unwrap(), LeaseClaim::Acquired { reclaimed: Some(_) }));
    two.release_lease("env:dev", "b").unwrap();
    assert_eq!(two.lease("env:dev").unwrap().unwrap().token, "c");
    one.release_lease("env:dev", "c").unwrap();
    assert!(two.lease("env:dev").unwrap().is_none());
}

fn a_fenced_writer_that_lost_its_lease_to_another_handle_stops_before_writing(b: &dyn Backend) {
    let (a, other) = (b.open(), b.open());
    let now = now_millis();
    let never = |_: &LeaseRecord| false;
    a.try_acquire_lease("env:dev", "a", &holder(1), now + 60_000, now, &never).unwrap();
    a.set_fence(Some(("env:dev".into(), "a".into())));
    a.put_snapshot(&rec("m.a", &fp('1'))).unwrap();
    a.check_fence().unwrap();
    assert!(matches!(other.try_acquire_lease("env:dev", "b", &holder(2), now + 190_000, now + 70_000, &never).unwrap(), LeaseClaim::Acquired { .. }));
    let err = a.put_snapshot(&rec("m.b", &fp('2'))).unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    assert!(err.to_string().contains("env:dev") && err.to_string().contains("pid 2"), "{err}");
    assert!(a.check_fence().unwrap_err().is_lease_lost());
    assert!(!other.snapshot_keys().unwrap().contains(&("m.b".to_string(), fp('2'))));
    // Ticks are journaled all the same (why it stopped).
    a.record_tick(&Tick {
        env: "dev".into(),
        started_at: "2026-01-01T00:00:00.000Z".into(),
        finished_at: "2026-01-01T00:00:01.000Z".into(),
        outcome: "error".into(),
        processed: BTreeMap::new(),
        detail: Some(err.to_string()),
    })
    .unwrap();
    assert_eq!(other.ticks("dev", 5).unwrap()[0].outcome, "error");
    // An expired lease fences its holder even when nobody reclaimed it.
    let c = b.open();
    let now = now_millis();
    c.try_acquire_lease("env:qa", "c", &holder(3), now + 300, now, &never).unwrap();
    c.set_fence(Some(("env:qa".into(), "c".into())));
    c.put_snapshot(&rec("m.c", &fp('3'))).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(350));
    assert!(c.put_snapshot(&rec("m.d", &fp('4'))).unwrap_err().is_lease_lost());
}

fn intents_are_refused_on_claimed_storage_and_a_claim_deletes_the_versions_rows(b: &dyn Backend) {
    let store = b.open();
    for (n, c) in [("m.a", '1'), ("m.b", '2')] {
        store.put_snapshot(&rec(n, &fp(c))).unwrap();
        store.mark_intervals(n, &fp(c), &days("2026-01-01", 2), IntervalStatus::Done, t("2026-01-03")).unwrap();
    }
    store.plan_memo_put("dev", "k", "b").unwrap();
    let key = store.plan_state("dev").unwrap();
    let victim = rec("m.a", &fp('1'));
    let claims = store
        .janitor_claim(
            &mut |inv| {
                assert_eq!(inv.versions.len(), 2);
                vec![Claim {
                    versions: vec![("m.a".to_string(), fp('1'))],
                    storage: Some(Condemned {
                        physical: victim.physical.clone(),
                        name: "m.a".into(),
                        fingerprint: fp('1'),
                        kind: victim.kind.clone(),
                        detail: json!({"age": 1}),
                        claimed_at: String::new(),
                    }),
                }]
            },
            t("2026-02-01"),
        )
        .unwrap();
    assert_eq!(claims.len(), 1);
    let other = b.open();
    assert_eq!(other.snapshot("m.a", &fp('1')).unwrap(), None);
    assert!(other.done_intervals("m.a", &fp('1')).unwrap().is_empty());
    assert_eq!(other.done_intervals("m.b", &fp('2')).unwrap().len(), 2);
    assert_eq!(other.plan_memo_get("dev").unwrap(), None, "every memo dropped");
    assert_ne!(other.plan_state("dev").unwrap(), key, "a claim moves the plan state");
    let inv = other.janitor_inventory().unwrap();
    assert_eq!(inv.condemned.len(), 1);
    assert_eq!(
        (inv.condemned[0].physical.as_str(), &inv.condemned[0].detail, inv.condemned[0].claimed_at.as_str()),
        (victim.physical.as_str(), &json!({"age": 1}), "2026-02-01T00:00:00.000Z")
    );
    // An apply relying on the claimed storage or the vanished snapshot is refused, writing nothing.
    let on_storage = Intent { name: "m.z".into(), fingerprint: fp('9'), physical: victim.physical.clone(), must_exist: false };
    let err = other.record_intents("dev", &[on_storage], 0).unwrap_err();
    assert!(err.is_reclaimed(), "{err:?}");
    let gone = Intent { name: "m.a".into(), fingerprint: fp('1'), physical: String::new(), must_exist: true };
    assert!(other.record_intents("dev", &[gone], 0).unwrap_err().is_reclaimed());
    assert!(other.janitor_inventory().unwrap().intents.is_empty());
    let fine = Intent { name: "m.b".into(), fingerprint: fp('2'), physical: rec("m.b", &fp('2')).physical, must_exist: true };
    other.record_intents("dev", &[fine], 0).unwrap();
    assert!(other.janitor_inventory().unwrap().intent_physicals.contains(&rec("m.b", &fp('2')).physical));
    other.clear_intents("dev").unwrap();
    other.release_condemned(&victim.physical).unwrap();
    assert!(store.janitor_inventory().unwrap().condemned.is_empty() && store.janitor_inventory().unwrap().intents.is_empty());
    // A claim deciding nothing writes nothing.
    assert!(store.janitor_claim(&mut |_| Vec::new(), 0).unwrap().is_empty());
}

fn a_recorded_refresh_is_the_newest_done_end_and_moves_no_data_generation(b: &dyn Backend) {
    let store = b.open();
    let a = rec("m.full", &fp('1'));
    store.put_snapshot(&a).unwrap();
    let key = vec![("m.full".to_string(), fp('1'))];
    let w = store.begin_data_write("m.full", &fp('1'), 0).unwrap();
    store.end_data_write(&w, true, 0).unwrap();
    let before = store.data_versions(&key).unwrap()[&key[0]].generation;
    // Refreshed for the 2 March tick, then the 3 March one: the newest end is the last tick.
    store.record_refresh("m.full", &fp('1'), t("2026-03-02"), None, 0).unwrap();
    store.record_refresh("m.full", &fp('1'), t("2026-03-03"), None, 0).unwrap();
    // Recorded again for the same tick, or an older one: one row, the newest tick kept.
    b.open().record_refresh("m.full", &fp('1'), t("2026-03-03"), None, 0).unwrap();
    b.open().record_refresh("m.full", &fp('1'), t("2026-03-01"), None, 0).unwrap();
    let stats = b.open().ledger_stats("m.full", &fp('1')).unwrap();
    assert_eq!((stats.done, stats.failed, stats.done_up_to), (1, 0, Some(t("2026-03-03"))));
    let until = |b: &dyn Backend| efmesh::state::refreshed_until(b.open().as_ref(), "m.full", &fp('1')).unwrap();
    assert_eq!(until(b), Some(t("2026-03-03")));
    // Rows read complete only up to 1 March (an ancestor lacked intervals): the tick stays the
    // newest done end, the record says how far the rows go; the next refresh replaces it.
    b.open().record_refresh("m.full", &fp('1'), t("2026-03-04"), Some(t("2026-03-01")), 0).unwrap();
    assert_eq!(b.open().ledger_stats("m.full", &fp('1')).unwrap().done_up_to, Some(t("2026-03-04")));
    assert_eq!(until(b), Some(t("2026-03-01")));
    b.open().record_refresh("m.full", &fp('1'), t("2026-03-04"), None, 0).unwrap();
    assert_eq!((b.open().ledger_stats("m.full", &fp('1')).unwrap().done, until(b)), (1, Some(t("2026-03-04"))));
    assert_eq!(store.data_versions(&key).unwrap()[&key[0]].generation, before, "a refresh record is not a data change");
    assert!(store.ledger_stats("m.full", &fp('2')).unwrap().done_up_to.is_none(), "per version");
}

fn data_generations_bump_for_sharers_and_an_untouched_write_mark_is_taken_back(b: &dyn Backend) {
    let store = b.open();
    let a = rec("m.a", &fp('1'));
    let mut sharer = rec("m.a", &fp('2'));
    sharer.physical = a.physical.clone();
    store.put_snapshot(&a).unwrap();
    store.put_snapshot(&sharer).unwrap();
    let keys = vec![("m.a".to_string(), fp('1')), ("m.a".to_string(), fp('2'))];
    assert!(store.data_versions(&keys).unwrap().is_empty());
    store.mark_intervals("m.a", &fp('1'), &days("2026-01-01", 1), IntervalStatus::Done, 0).unwrap();
    let dv = store.data_versions(&keys).unwrap();
    assert_eq!((dv[&keys[0]].generation, dv[&keys[1]].generation), (1, 1), "the sharer of the table moves too");
    // A failed batch that was never done changes no data.
    store.mark_intervals("m.a", &fp('1'), &days("2026-03-01", 1), IntervalStatus::Failed, 0).unwrap();
    assert_eq!(store.data_versions(&keys).unwrap()[&keys[0]].generation, 1);
    // A write mark: bumped, then taken back when nothing changed.
    let w = store.begin_data_write("m.a", &fp('1'), 0).unwrap();
    assert_eq!(w.marked, vec![("m.a".to_string(), fp('1'), 2), ("m.a".to_string(), fp('2'), 2)]);
    store.end_data_write(&w, false, 0).unwrap();
    assert_eq!(store.data_versions(&keys).unwrap()[&keys[0]].generation, 1);
    let w = store.begin_data_write("m.a", &fp('1'), 0).unwrap();
    store.end_data_write(&w, true, 0).unwrap();
    assert_eq!(store.data_versions(&keys).unwrap()[&keys[1]].generation, 3);
    // A build records what it was built from and makes other records on its table untrue.
    store.record_reuse(&sharer, "\"from-x\"", 0).unwrap();
    let mut full = rec("m.a", &fp('1'));
    full.kind = "full".into();
    store.record_build(&full, Some("\"parents\""), &[], 0).unwrap();
    let dv = store.data_versions(&keys).unwrap();
    assert_eq!(dv[&keys[0]].built_from.as_deref(), Some("\"parents\""));
    assert_eq!(dv[&keys[1]].built_from.as_deref(), Some("\"rebuilt for another version\""));
    // Pending rebuilds: the first record of a version is kept; a build forgets it.
    store.record_pending_rebuilds(&[("m.a".into(), fp('2'), "first".into()), ("m.a".into(), fp('2'), "second".into())], t("2026-01-01")).unwrap();
    let pending = store.pending_rebuilds().unwrap();
    assert_eq!((pending.len(), pending[0].reason.as_str()), (1, "first"));
    store.record_build(&sharer, None, &[], 0).unwrap();
    assert!(store.pending_rebuilds().unwrap().is_empty());
}

/// A new version on an older version's table (indirect reuse, forward-only) takes over its done
/// intervals: nothing is written into the table, so the older version's generation (what its
/// readers' `built_from` names) stays; the new one moves (its table is no longer empty to it).
/// A write into the table afterwards, by either, moves both.
fn a_version_inheriting_a_ledger_moves_alone_and_a_write_into_the_table_moves_every_version_on_it(b: &dyn Backend) {
    let store = b.open();
    let old = rec("m.a", &fp('1'));
    let mut new = rec("m.a", &fp('2'));
    new.physical = old.physical.clone();
    store.put_snapshot(&old).unwrap();
    store.mark_intervals("m.a", &fp('1'), &days("2026-01-01", 2), IntervalStatus::Done, 0).unwrap();
    let keys = vec![("m.a".to_string(), fp('1')), ("m.a".to_string(), fp('2'))];
    let generations = || {
        let dv = b.open().data_versions(&keys).unwrap();
        (dv.get(&keys[0]).map(|d| d.generation), dv.get(&keys[1]).map(|d| d.generation))
    };
    assert_eq!(generations(), (Some(1), None));
    store.put_snapshot(&new).unwrap();
    store.inherit_done("m.a", &fp('1'), &fp('2'), 0).unwrap();
    assert_eq!(store.done_intervals("m.a", &fp('2')).unwrap(), store.done_intervals("m.a", &fp('1')).unwrap());
    assert_eq!(generations(), (Some(1), Some(1)), "the inheriting version moves, the table's other version does not");
    // Inheriting nothing moves nothing.
    store.inherit_done("m.a", &fp('3'), &fp('2'), 0).unwrap();
    assert_eq!(generations(), (Some(1), Some(1)));
    store.mark_intervals("m.a", &fp('2'), &days("2026-01-03", 1), IntervalStatus::Done, 0).unwrap();
    assert_eq!(generations(), (Some(2), Some(2)), "a write into the shared table moves both");
    store.clear_intervals("m.a", &fp('1'), t("2026-01-01"), t("2026-01-02")).unwrap();
    assert_eq!(generations(), (Some(3), Some(3)), "either way round");
}

fn dropping_an_environment_deletes_its_run_ticks_and_creating_it_again_starts_with_none(b: &dyn Backend) {
    let store = b.open();
    store.put_snapshot(&rec("a.one", &fp('1'))).unwrap();
    let ptrs = pointers(&[("a.one", '1')]);
    let promote = |env: &str, at: &str| store.promote(env, &ptrs, &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", t(at)).unwrap();
    let tick = |env: &str, outcome: &str| Tick {
        env: env.into(),
        started_at: to_iso(0),
        finished_at: to_iso(5),
        outcome: outcome.to_string(),
        processed: BTreeMap::new(),
        detail: None,
    };
    for env in ["dev", "prod"] {
        promote(env, "2026-01-02");
        store.record_tick(&tick(env, "error")).unwrap();
    }
    // Applied again while it exists (a renewal too): its run journal goes on.
    promote("dev", "2026-01-03");
    assert_eq!(store.ticks("dev", 5).unwrap().len(), 1, "a promotion of an environment that exists keeps its ticks");
    let seen = store.journal("dev").unwrap().last().map(|j| j.id).unwrap();
    assert!(store.drop_environment("dev", seen, &json!({"event": "dropped"}), t("2026-01-04")).unwrap());
    assert!(b.open().ticks("dev", 5).unwrap().is_empty(), "its ticks went with it");
    assert_eq!(store.ticks("prod", 5).unwrap().len(), 1, "another environment's ticks stay");
    // A run of it refused while it does not exist is journaled (its apply journal has rows); the
    // promotion creating it again starts its run journal afresh.
    store.record_tick(&tick("dev", "blocked")).unwrap();
    assert_eq!(store.ticks("dev", 5).unwrap().len(), 1);
    promote("dev", "2026-01-05");
    assert!(b.open().ticks("dev", 5).unwrap().is_empty(), "the new environment has no run of its own yet");
    assert_eq!(store.ticks("prod", 5).unwrap().len(), 1);
}

fn caches_ticks_promotions_under_way_orphans_and_audit_passes_round_trip(b: &dyn Backend) {
    let store = b.open();
    store.canon_cache_put(&[("k1".into(), "c1".into()), ("k2".into(), "c2".into())]).unwrap();
    store.canon_cache_put(&[("k1".into(), "c1'".into())]).unwrap();
    let got = store.canon_cache_get(&["k1".into(), "k2".into(), "k3".into()]).unwrap();
    assert_eq!((got.len(), got["k1"].as_str(), got["k2"].as_str()), (2, "c1'", "c2"));
    for (i, outcome) in ["processed", "nothing-due", "lock-held"].iter().enumerate() {
        store
            .record_tick(&Tick {
                env: "prod".into(),
                started_at: to_iso(i as i64),
                finished_at: to_iso(i as i64 + 5),
                outcome: outcome.to_string(),
                processed: BTreeMap::from([("a.b".to_string(), i)]),
                detail: (i == 2).then(|| "held".to_string()),
            })
            .unwrap();
    }
    let ticks = store.ticks("prod", 2).unwrap();
    assert_eq!(ticks.iter().map(|t| t.outcome.as_str()).collect::<Vec<_>>(), vec!["lock-held", "nothing-due"]);
    assert_eq!((ticks[0].detail.as_deref(), ticks[1].processed["a.b"]), (Some("held"), 1));
    assert!(store.ticks("dev", 5).unwrap().is_empty());
    let ptrs = pointers(&[("m.a", '1')]);
    store.begin_promotion("dev", &ptrs, &["CREATE OR REPLACE VIEW v AS SELECT 1".to_string()], t("2026-01-01")).unwrap();
    assert!(store.begin_promotion("dev", &ptrs, &[], 0).is_err(), "one promotion under way per environment");
    let pending = b.open().pending_promotions().unwrap();
    assert_eq!((pending.len(), &pending[0].pointers, pending[0].rollback.len()), (1, &ptrs, 1));
    store.abandon_promotion("dev").unwrap();
    assert!(store.pending_promotions().unwrap().is_empty());
    let first = store.record_orphans_seen(&["p.one".into(), "p.two".into()], t("2026-01-01")).unwrap();
    assert_eq!(first["p.one"], "2026-01-01T00:00:00.000Z");
    let again = store.record_orphans_seen(&["p.two".into(), "p.three".into()], t("2026-01-05")).unwrap();
    assert_eq!((again["p.two"].as_str(), again["p.three"].as_str()), ("2026-01-01T00:00:00.000Z", "2026-01-05T00:00:00.000Z"));
    assert_eq!(store.orphans_seen().unwrap().keys().cloned().collect::<Vec<_>>(), vec!["p.three".to_string(), "p.two".to_string()]);
    assert_eq!(store.audit_pass("m.a", &fp('1')).unwrap(), None);
    let g = store.generation().unwrap();
    store.record_audit_pass("m.a", &fp('1'), &AuditPass { digest: "d1".into(), generation: 4 }, 0).unwrap();
    store.record_audit_pass("m.a", &fp('1'), &AuditPass { digest: "d2".into(), generation: 5 }, 0).unwrap();
    assert_eq!(store.audit_pass("m.a", &fp('1')).unwrap(), Some(AuditPass { digest: "d2".into(), generation: 5 }));
    assert_eq!(store.generation().unwrap(), g, "an audit pass is not a data write");
}

fn concurrent_writers_on_separate_handles_lose_no_write_and_journal_in_commit_order(b: &dyn Backend) {
    const WRITERS: usize = 4;
    const EACH: usize = 15;
    let g0 = b.open().generation().unwrap();
    let start = Arc::new(Barrier::new(WRITERS));
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let start = start.clone();
            s.spawn(move || {
                let store = b.open();
                start.wait();
                for i in 0..EACH {
                    let name = format!("m.w{w}");
                    let fp = format!("{w:02}{i:062}");
                    store.put_snapshot(&rec(&name, &fp)).unwrap();
                    store.mark_intervals(&name, &fp, &days("2026-01-01", 2), IntervalStatus::Done, 0).unwrap();
                    store.promote(&format!("env{w}"), &BTreeMap::from([(name, fp)]), &BTreeMap::new(), &BTreeSet::new(), &json!({}), "", 0).unwrap();
                }
            });
        }
    });
    let store = b.open();
    // Every data write bumped the generation once; every promotion has its own journal id.
    assert_eq!(store.generation().unwrap(), g0 + (WRITERS * EACH * 2) as i64);
    assert_eq!(store.snapshot_keys().unwrap().len(), WRITERS * EACH);
    assert_eq!(store.all_done_intervals().unwrap().values().map(BTreeSet::len).sum::<usize>(), WRITERS * EACH * 2);
    let mut ids = BTreeSet::new();
    for w in 0..WRITERS {
        let journal = store.journal(&format!("env{w}")).unwrap();
        assert_eq!(journal.len(), EACH);
        assert!(journal.windows(2).all(|p| p[0].id < p[1].id));
        ids.extend(journal.iter().map(|j| j.id));
    }
    assert_eq!(ids.len(), WRITERS * EACH);
    assert_eq!(store.plan_state("x").unwrap().unwrap().2, *ids.last().unwrap(), "the last promotion's id is the largest");
}

fn concurrent_lease_takers_on_separate_handles_get_exactly_one_lease(b: &dyn Backend) {
    const TAKERS: usize = 6;
    for round in 0..3 {
        let lease = format!("env:race{round}");
        let start = Arc::new(Barrier::new(TAKERS));
        let won: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..TAKERS)
                .map(|i| {
                    let (start, lease) = (start.clone(), lease.clone());
                    s.spawn(move || {
                        let store = b.open();
                        let now = now_millis();
                        start.wait();
                        matches!(
                            store.try_acquire_lease(&lease, &format!("tok{i}"), &holder(i as u32 + 1), now + 60_000, now, &|_| false).unwrap(),
                            LeaseClaim::Acquired { .. }
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}: {won:?}");
        let winner = won.iter().position(|w| *w).unwrap();
        assert_eq!(b.open().lease(&lease).unwrap().unwrap().token, format!("tok{winner}"));
    }
}

fn every_store_has_its_own_identity_shared_by_its_handles(b: &dyn Backend) {
    let (one, two) = (b.open(), b.open());
    let id = one.store_id().unwrap();
    assert_eq!(id.len(), 32);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    assert_eq!(two.store_id().unwrap(), id);
    assert_eq!(one.reopen().unwrap().store_id().unwrap(), id);
    assert!(!one.is_in_memory());
    let elsewhere = Sqlite::new().open().store_id().unwrap();
    assert_ne!(elsewhere, id);
}

/// An import sets the store's epochs to the export's, but never lowers the issued counter: an
/// older export imported into a store that issued further would otherwise issue again a number
/// an earlier writer was given (and may have stamped into its database).
fn an_import_never_lowers_the_issued_epoch_counter(b: &dyn Backend) {
    let store = b.open();
    store.issue_epoch(0).unwrap();
    store.record_engine_epoch(1, None).unwrap();
    let older = store.export_state().unwrap();
    for _ in 0..4 {
        store.issue_epoch(0).unwrap();
    }
    assert_eq!(store.export_state().unwrap().epoch_issued, 5);
    store.import_state(&older, true, store.epoch_issued().unwrap(), now_millis(), &|_| false).unwrap();
    assert_eq!(store.engine_epoch().unwrap(), 1, "the export's epoch is the store's");
    let next = store.issue_epoch(0).unwrap();
    assert_eq!((next.epoch, next.before), (6, 5), "no number is issued twice");
}

/// `state import` reads the issued counter before comparing the export with the engine's
/// database and gives it to the import: an epoch issued since (a writer's opening raise, or its
/// closing record, from another handle) refuses the import in its transaction, naming both
/// values and the way out, and nothing is written; given the counter as it is, it imports.
fn an_import_is_refused_when_an_epoch_was_issued_since_the_counter_it_was_given(b: &dyn Backend) {
    let (store, writer) = (b.open(), b.open());
    store.issue_epoch(0).unwrap();
    store.record_engine_epoch(1, None).unwrap();
    let older = store.export_state().unwrap();
    let given = store.epoch_issued().unwrap();
    assert_eq!(given, 1);
    // A writer's opening raise between the comparison and the import.
    assert_eq!(writer.issue_epoch(0).unwrap().epoch, 2);
    let before = store.export_state().unwrap();
    let err = store.import_state(&older, true, given, now_millis(), &|_| false).unwrap_err();
    assert!(matches!(err, StateError::Import { .. }), "{err:?}");
    let message = err.to_string();
    for wanted in ["the store's issued epoch moved from 1 to 2", "run the import again", "nothing was written"] {
        assert!(message.contains(wanted), "{wanted}: {message}");
    }
    assert_eq!(store.export_state().unwrap(), before, "nothing written");
    // Its closing record alone moves the counter too.
    let given = store.epoch_issued().unwrap();
    writer.record_engine_epoch(3, None).unwrap();
    let err = store.import_state(&older, true, given, now_millis(), &|_| false).unwrap_err();
    assert!(err.to_string().contains("moved from 2 to 3"), "{err}");
    // The counter as it is: imported (the export's epoch, the counter kept).
    store.import_state(&older, true, store.epoch_issued().unwrap(), now_millis(), &|_| false).unwrap();
    assert_eq!((store.engine_epoch().unwrap(), store.epoch_issued().unwrap()), (1, 3));
}

// ---- Postgres only ----

/// `target`'s URL carrying a password, and that password: ours added when the URL has none (the
/// test cluster trusts every local connection, so any password is accepted), else its own.
fn with_password(target: &pg::PgTarget, password: &str) -> (String, String) {
    match target.url.split_once("://").and_then(|(scheme, rest)| rest.split_once('@').map(|(user, host)| (scheme, user, host))) {
        Some((scheme, user, host)) if !user.contains(':') => (format!("{scheme}://{user}:{password}@{host}"), password.to_string()),
        Some((_, user, _)) => (target.url.clone(), user.rsplit(':').next().unwrap_or_default().to_string()),
        None => panic!("EFMESH_TEST_PG_URL must be a `postgres://user@host/db` URL"),
    }
}

#[test]
fn a_postgres_store_names_itself_without_the_password_in_its_location_debug_and_errors() {
    let Some(target) = pg::fresh() else { return };
    let (url, password) = with_password(&target, "pw-do-not-show-7f3a");
    let password = password.as_str();
    assert!(!password.is_empty() && url.contains(password));
    let store = PostgresStore::open(&url, &target.schema).unwrap();
    let location = store.location();
    assert!(location.starts_with("postgres://") && location.contains(&target.schema), "{location}");
    assert!(!location.contains(password), "{location}");
    assert!(!format!("{store:?}").contains(password));
    // An error on a store of another version quotes the location: no password in it either.
    target.client().batch_execute(&format!("UPDATE {}.meta SET version = 99", target.schema)).unwrap();
    let err = PostgresStore::open(&url, &target.schema).unwrap_err();
    let text = format!("{err} {err:?} {}", err.hint().unwrap_or(""));
    assert!(err.is_version_mismatch() && !text.contains(password), "{text}");
    // A server that cannot be reached: the error names the store, never the password.
    let err = PostgresStore::open(&format!("postgres://efmesh:{password}@127.0.0.1:1/db?connect_timeout=2"), "s").unwrap_err();
    let text = format!("{err} {err:?} {}", std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default());
    assert!(!text.contains(password) && text.contains("127.0.0.1"), "{text}");
}

/// A Postgres state store whose server is down (nothing listening: refused) or accepts the
/// connection but never answers gets, within the connect bound, an error naming the store and
/// the hint that its server cannot be reached — never the hint that another efmesh process is
/// writing it. Needs no Postgres.
#[test]
fn a_postgres_store_whose_server_is_down_or_silent_is_said_unreachable_not_busy() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
    let port = silent.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        let held: Vec<std::net::TcpStream> = silent.incoming().take(1).filter_map(Result::ok).collect();
        std::thread::sleep(std::time::Duration::from_secs(30));
        drop(held);
    });
    for (what, url) in [
        ("refused", "postgres://efmesh:pw@127.0.0.1:1/db?connect_timeout=2".to_string()),
        ("silent", format!("postgres://efmesh:pw@127.0.0.1:{port}/db?connect_timeout=1")),
    ] {
        let started = std::time::Instant::now();
        let err = PostgresStore::open(&url, "s").unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(8), "{what}: gave up after {:?}", started.elapsed());
        let text = format!("{err}: {}", std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default());
        assert!(text.contains("127.0.0.1") && !text.contains(":pw@"), "{what}: {text}");
        if what == "silent" {
            assert!(text.contains("no answer from the server within 1 s"), "{text}");
        }
        let hint = err.hint().unwrap_or_default();
        assert!(hint.contains("cannot be reached") && !hint.contains("another efmesh process"), "{what}: {text}\nhint: {hint}");
    }
}

#[test]
fn every_text_column_of_a_postgres_store_compares_bytes_whatever_the_database_locale() {
    let Some(target) = pg::fresh() else { return };
    drop(target.open());
    let rows = target
        .client()
        .query("SELECT table_name::text, column_name::text, coalesce(collation_name::text, '') FROM information_schema.columns WHERE table_schema = $1 AND data_type = 'text'", &[&target.schema])
        .unwrap();
    assert!(rows.len() > 20, "the store's text columns: {}", rows.len());
    let other: Vec<String> = rows
        .iter()
        .filter(|r| r.get::<_, String>(2) != "C")
        .map(|r| format!("{}.{} {}", r.get::<_, String>(0), r.get::<_, String>(1), r.get::<_, String>(2)))
        .collect();
    assert!(other.is_empty(), "text columns not in byte order (COLLATE \"C\"): {other:?}");
}

#[test]
fn a_postgres_store_of_another_version_or_a_foreign_schema_is_refused_and_left_as_it_was() {
    let Some(target) = pg::fresh() else { return };
    drop(target.open());
    let mut client = target.client();
    client.batch_execute(&format!("UPDATE {}.meta SET version = {}", target.schema, efmesh::state::STATE_VERSION + 1)).unwrap();
    let err = PostgresStore::open(&target.url, &target.schema).unwrap_err();
    assert!(matches!(err, StateError::Version { found, .. } if found == efmesh::state::STATE_VERSION + 1), "{err:?}");
    assert!(err.hint().unwrap().contains("newer"), "{err:?}");
    let version: i64 = client.query_one(&format!("SELECT version FROM {}.meta", target.schema), &[]).unwrap().get(0);
    assert_eq!(version, efmesh::state::STATE_VERSION + 1, "left as it was");
    // A schema holding other tables is not a store: version 0, nothing created in it.
    let foreign = format!("{}_foreign", target.schema);
    client.batch_execute(&format!("CREATE SCHEMA {foreign}; CREATE TABLE {foreign}.things (x int)")).unwrap();
    let err = PostgresStore::open(&target.url, &foreign).unwrap_err();
    assert!(matches!(err, StateError::Version { found: 0, .. }), "{err:?}");
    let tables: i64 = client.query_one("SELECT count(*) FROM pg_tables WHERE schemaname = $1", &[&foreign]).unwrap().get(0);
    assert_eq!(tables, 1);
    // No store yet: `open_existing` creates nothing.
    let absent = format!("{}_absent", target.schema);
    assert!(PostgresStore::open_existing(&target.url, &absent).unwrap().is_none());
    let schemas: i64 = client.query_one("SELECT count(*) FROM pg_namespace WHERE nspname = $1", &[&absent]).unwrap().get(0);
    assert_eq!(schemas, 0);
}

#[test]
fn processes_creating_one_postgres_store_at_once_get_one_store() {
    let Some(target) = pg::fresh() else { return };
    let start = Arc::new(Barrier::new(6));
    let ids: BTreeSet<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let (start, target) = (start.clone(), target.clone());
                s.spawn(move || {
                    start.wait();
                    PostgresStore::open(&target.url, &target.schema).unwrap().store_id().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(ids.len(), 1, "{ids:?}");
    let rows: i64 = target.client().query_one(&format!("SELECT count(*) FROM {}.meta", target.schema), &[]).unwrap().get(0);
    assert_eq!(rows, 1);
}

#[test]
fn a_postgres_state_is_opened_from_the_variable_url_env_names_and_an_unset_one_is_named() {
    let Some(target) = pg::fresh() else { return };
    let dir = tempfile::tempdir().unwrap();
    let var = format!("EFMESH_IT_PG_URL_{}", target.schema.to_uppercase());
    let text = format!("[project]\nmodels = [\"m/*.lua\"]\n[state]\nurl_env = \"{var}\"\nschema = \"{}\"\n", target.schema);
    let config = efmesh::config::Config::parse(&dir.path().join("efmesh.toml"), &text).unwrap();
    let err = efmesh::state::open(&config).unwrap_err();
    let message = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(message.contains(&var) && message.contains("efmesh.toml") && message.contains("unset"), "{message}");
    // SAFETY: this variable is this test's own; no other thread reads it.
    unsafe { std::env::set_var(&var, &target.url) };
    assert!(efmesh::state::open_existing(&config).unwrap().is_none(), "nothing created by a read");
    let store = efmesh::state::open(&config).unwrap();
    assert!(store.location().contains(&target.schema));
    assert_eq!(efmesh::state::migrate_store(&config, 0).unwrap().applied, Vec::<i64>::new());
    assert!(efmesh::state::open_existing(&config).unwrap().is_some());
    unsafe { std::env::remove_var(&var) };
}

#[test]
fn a_fresh_postgres_store_has_the_tables_columns_and_version_of_a_fresh_sqlite_store() {
    let Some(target) = pg::fresh() else { return };
    drop(target.open());
    let sqlite = Sqlite::new();
    drop(sqlite.open());
    let conn = rusqlite::Connection::open(&sqlite.path).unwrap();
    let mut lite: BTreeSet<(String, String)> = BTreeSet::new();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for t in tables {
        let cols: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        lite.extend(cols.into_iter().map(|c| (t.clone(), c)));
    }
    let pg: BTreeSet<(String, String)> = target
        .client()
        .query("SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = $1", &[&target.schema])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(pg, lite, "the same tables and columns");
    let version: i64 = target.client().query_one(&format!("SELECT version FROM {}.meta", target.schema), &[]).unwrap().get(0);
    assert_eq!(version, efmesh::state::STATE_VERSION);
}

#[test]
fn a_role_owning_a_schema_made_for_it_creates_the_store_there_without_create_on_the_database() {
    let Some(target) = pg::fresh() else { return };
    let role = format!("{}_owner", target.schema);
    let mut admin = target.client();
    if let Err(e) = admin.batch_execute(&format!("CREATE ROLE {role} LOGIN; CREATE SCHEMA {} AUTHORIZATION {role}", target.schema)) {
        // A server given by EFMESH_TEST_PG_URL may not let this test create roles.
        return eprintln!("SKIPPED: cannot create a role on the test Postgres: {e}");
    }
    let may_create: bool = admin.query_one("SELECT has_database_privilege($1, current_database(), 'CREATE')", &[&role]).unwrap().get(0);
    assert!(!may_create, "the role must lack CREATE on the database for this test to prove anything");
    let url = match target.url.split_once("://").and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?.1))) {
        Some((scheme, host)) => format!("{scheme}://{role}@{host}"),
        None => return eprintln!("SKIPPED: the test URL has no user part"),
    };
    // A server's refusal is reported with its own message, not a bare "db error".
    let err = PostgresStore::open(&url.replace(&role, &format!("{role}_missing")), &target.schema).unwrap_err();
    let why = std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default();
    assert!(why.contains(&format!("{role}_missing")) && why.contains("does not exist"), "{err}: {why}");
    let store = PostgresStore::open(&url, &target.schema).unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    store.put_snapshot(&rec("m.a", &fp('1'))).unwrap();
    let owner: String =
        admin.query_one("SELECT tableowner::text FROM pg_tables WHERE schemaname = $1 AND tablename = 'snapshots'", &[&target.schema]).unwrap().get(0);
    assert_eq!(owner, role);
}

/// A role whose transactions are read-only by default (`ALTER ROLE … SET
/// default_transaction_read_only = on`): the store's writes (the environment's lock first) fail
/// with the server's refusal and a hint naming that setting, never the hint about another
/// process writing; a store not created yet is refused so at its opening.
#[test]
fn a_role_read_only_by_default_is_told_about_default_transaction_read_only() {
    let Some(target) = pg::fresh() else { return };
    let role = format!("{}_ro", target.schema);
    let mut admin = target.client();
    let made = format!("CREATE ROLE {role} LOGIN; CREATE SCHEMA {0} AUTHORIZATION {role}; CREATE SCHEMA {0}_b AUTHORIZATION {role}", target.schema);
    if let Err(e) = admin.batch_execute(&made) {
        // A server given by EFMESH_TEST_PG_URL may not let this test create roles.
        return eprintln!("SKIPPED: cannot create a role on the test Postgres: {e}");
    }
    let url = match target.url.split_once("://").and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?.1))) {
        Some((scheme, host)) => format!("{scheme}://{role}@{host}"),
        None => return eprintln!("SKIPPED: the test URL has no user part"),
    };
    // Created while the role may write; its sessions are read-only from then on.
    drop(PostgresStore::open(&url, &target.schema).unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e))));
    admin.batch_execute(&format!("ALTER ROLE {role} SET default_transaction_read_only = on")).unwrap();
    let store = PostgresStore::open(&url, &target.schema).unwrap_or_else(|e| panic!("reading needs no write: {e}"));
    let err = store.try_acquire_lease("env:dev", "token", &holder(1), now_millis() + 60_000, now_millis(), &|_| false).unwrap_err();
    let why = std::error::Error::source(&err).map(|s| efmesh::pg::scrubbed(s, None)).unwrap_or_default();
    assert!(err.to_string().contains("cannot take the lock `env:dev`") && why.contains("in a read-only transaction"), "{err}: {why}");
    let hint = err.hint().unwrap_or_default();
    assert!(hint.contains("default_transaction_read_only") && !hint.contains("another efmesh process"), "{hint}");
    let err = PostgresStore::open(&url, &format!("{}_b", target.schema)).unwrap_err();
    assert!(err.hint().unwrap_or_default().contains("default_transaction_read_only"), "{err}: {:?}", std::error::Error::source(&err));
}

/// A Postgres store whose connection the server ended (a restart, `pg_terminate_backend`): the
/// operation that meets it fails with a transient error (`--retries` retries it), and the next
/// one reconnects and works.
#[test]
fn a_postgres_store_whose_connection_was_ended_fails_transiently_then_reconnects() {
    let Some(target) = pg::fresh() else { return };
    // Its own application name: only this store's session is ended (other tests share the server).
    let name = format!("efmesh-{}", target.schema);
    let url = format!("{}{}application_name={name}", target.url, if target.url.contains('?') { '&' } else { '?' });
    let store = PostgresStore::open(&url, &target.schema).unwrap();
    assert!(store.environments().unwrap().is_empty());
    let mut admin = target.client();
    let ended: i64 = admin
        .query_one("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) AS t", &[&name])
        .unwrap()
        .get(0);
    assert!(ended >= 1, "the store's session was ended");
    let err = store.environments().unwrap_err();
    assert!(err.is_busy(), "a lost connection is transient: {err:?}");
    assert!(store.environments().unwrap().is_empty(), "the next operation reconnects");
}
