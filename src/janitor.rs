//! The janitor (`efmesh janitor`): drops the physical storage no environment can reach any
//! more — tables and views in `_efmesh`, parquet lake version directories, DuckLake tables —
//! once it is older than a time to live, and the orphans the state store no longer knows.
//!
//! The claim protocol (SPEC §4, invariant 39): an apply or run records, in one state
//! transaction before any engine write, every version it relies on (its intents), refusing when
//! the janitor claimed one since its plan; the janitor claims its victims in ONE state
//! transaction that re-reads pointers, promotions under way, intents and claims under the
//! store's write lock, deleting the victims' snapshot and ledger rows and recording their
//! storage as `condemned`; only then does it drop the storage, and it forgets a claim only once
//! the drop succeeded. So a relation is dropped only after no plan can rely on it any more: a
//! plan made before the claim is refused at its intents, a plan made after it builds afresh.
//!
//! Candidates: versions not pointed at by any environment, not in any promotion under way, not
//! named by any intent, whose age — now minus the later of the snapshot's creation and the
//! moment an environment last stopped serving it — is at least the ttl. Storage shared by
//! several versions (forward-only and indirect reuse inherit their parent version's table) is
//! claimed only with every version sharing it. Versions without storage (embedded, external)
//! only lose their rows. Orphans are relations in `_efmesh` (and lake version directories,
//! DuckLake tables) whose name has the physical-name shape `<schema>__<table>__<64 hex>` but no
//! snapshot, intent or claim names them; other relations are left alone. An orphan is claimed
//! only when every storage it lives in carries an owner marker naming this state store alone
//! ([`crate::ownership`]) and a janitor first saw it at least the ttl ago (`orphans_seen`);
//! the others are reported as kept (`young`, `foreign`, `unmarked`).
//!
//! Engine access goes through the [`Engine`] trait, opened by the caller's function for the
//! listing and again for the drops (never held across the claim); lake directories are removed
//! only inside the lake root, never through a symbolic link; on S3, every object under the
//! version directory's prefix is deleted (listed page by page, deleted in batches).
//!
//! A dropped DuckLake table's files stay while DuckLake snapshots reference them: at the end of
//! every run the janitor expires the catalog's snapshots older than the ttl and removes the files
//! only expired snapshots referenced ([`crate::apply::ducklake::reclaim`]), reported as
//! `ducklakeFilesRemoved`.

use crate::apply::fault;
use crate::apply::lake::VersionDir;
use crate::config::Config;
use crate::core::interval::{Millis, parse_instant};
use crate::engine::{Engine, EngineError, STORAGE_SCHEMA, StoredRelation};
use crate::ownership::{Owners, Status, Storage};
use crate::s3::S3Lake;
use crate::state::{Claim, Condemned, JanitorInventory, StateError, StateStore};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

/// Milliseconds in a day (`--ttl` is in days).
pub const DAY_MS: f64 = 86_400_000.0;

/// The default `--ttl`, in days (sqlmesh's default snapshot TTL).
pub const DEFAULT_TTL_DAYS: f64 = 7.0;

/// `--ttl` in days: a plain number is days (`7`, `0.5`, `0`), anything else a duration as the
/// configuration's `[environments] ttl` spells it (`7d`, `12h`, `2w`, `90m`:
/// [`crate::core::interval::parse_duration`]).
///
/// # Errors
/// Text that is neither a number nor a duration, naming the units.
pub fn parse_ttl_days(text: &str) -> Result<f64, String> {
    let t = text.trim();
    if let Ok(days) = t.parse::<f64>() {
        return Ok(days);
    }
    let d = crate::core::interval::parse_duration(t).map_err(|e| format!("{e}; a plain number is days"))?;
    Ok(d.as_secs_f64() / 86_400.0)
}

/// How long the janitor waits for an engine file another process holds, at most.
pub const ENGINE_WAIT: Duration = Duration::from_secs(5);

/// What to collect.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Versions younger than this many days are kept.
    pub ttl_days: f64,
    /// List what would go; claim and drop nothing.
    pub dry_run: bool,
    /// The current instant.
    pub now: Millis,
    /// `--adopt`: make this store the only owner of every storage first (SPEC invariant 39 (d)).
    pub adopt: bool,
    /// `[environments] ttl` in milliseconds: environments other than `prod` not applied for that
    /// long are expired and dropped first ([`crate::lifecycle`]); `None`: only invalidated ones.
    pub env_ttl: Option<Millis>,
}

/// One storage the janitor dropped (or would drop), or versions without storage whose rows it
/// removed.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    /// Model name.
    pub model: String,
    /// Fingerprint, first 12 characters.
    pub fingerprint: String,
    /// Kind tag (`orphan` for an orphan).
    pub kind: String,
    /// The physical relation (`""` for versions without storage).
    pub physical: String,
    /// Age in days when claimed (absent for orphans).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_days: Option<f64>,
    /// Every version (`name@fingerprint-short`) whose rows went with it.
    pub versions: Vec<String>,
    /// The lake version directory removed, if there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lake_dir: Option<String>,
    /// For an orphan: when a janitor first saw it (ISO-8601 UTC), if recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_seen: Option<String>,
    /// True when an earlier janitor claimed it and could not drop it (or was stopped).
    pub left_over: bool,
    /// True when there was nothing to drop: no such relation in the engine (dropped by hand, by
    /// an earlier janitor that was stopped before forgetting it, or named outside efmesh's
    /// storage) and no lake directory; only the state store's rows went.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already_absent: bool,
}

/// A claimed storage the janitor could not drop: it stays claimed, and the next janitor tries
/// again.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The physical relation.
    pub physical: String,
    /// Model name (empty for an orphan of unknown model).
    pub model: String,
    /// Why.
    pub error: String,
}

/// What a janitor run did.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Unreachable versions dropped (or, with `dry_run`, that would be).
    pub dropped: Vec<Victim>,
    /// Orphans dropped (or that would be).
    pub orphans: Vec<Victim>,
    /// Orphans seen and kept: too young, or in a storage this store does not own alone.
    pub kept_orphans: Vec<KeptOrphan>,
    /// Unreachable versions kept because another state store may serve their storage (SPEC
    /// invariant 39 (e)).
    pub kept_shared: Vec<KeptShared>,
    /// The owner marker of every storage (SPEC invariant 39 (d)).
    pub storages: Vec<Owners>,
    /// This state store's identity.
    pub store_id: String,
    /// True when `--adopt` made this store the only owner of every storage.
    pub adopted: bool,
    /// Drops that failed (still claimed).
    pub failed: Vec<Failure>,
    /// True for `--dry-run`.
    pub dry_run: bool,
    /// The ttl used.
    pub ttl_days: f64,
    /// Expired environments dropped (or, with `dry_run`, that would be), or kept (`kept`).
    pub environments: Vec<ExpiredEnv>,
    /// DuckLake snapshots taken before [`Report::ducklake_expired_before`] that were expired
    /// (or, with `dry_run`, would be); absent when the project has no DuckLake catalog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ducklake_snapshots_expired: Option<u64>,
    /// Files removed from the DuckLake data path (or, with `dry_run`, that would be): those only
    /// expired snapshots referenced (dropped tables, replaced `full` tables, deleted ranges).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ducklake_files_removed: Option<u64>,
    /// The instant (ISO-8601 UTC, the clock minus the ttl) before which DuckLake snapshots expire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ducklake_expired_before: Option<String>,
}

/// An expired environment the janitor dropped, would drop, or kept ([`crate::lifecycle`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExpiredEnv {
    /// The environment.
    pub env: String,
    /// `ttl` or `invalidated`.
    pub reason: String,
    /// When it expired (ISO-8601 UTC).
    pub expired_at: String,
    /// When the last plan was applied to it (ISO-8601 UTC).
    pub last_applied_at: Option<String>,
    /// Its views dropped (or that would be), `"<env>__<schema>"."<table>"`.
    pub views: Vec<String>,
    /// Its schemas dropped (or that would be): those holding nothing but its views.
    pub schemas: Vec<String>,
    /// True once its views and state are gone (false for a dry run or a kept environment).
    pub dropped: bool,
    /// Why it was kept this time: `locked` (an apply or run of it holds its lock), `promoting`
    /// (a promotion of it is under way or was interrupted), `renewed` (applied or invalidated
    /// again meanwhile) or `failed` (the engine refused a statement: in [`Report::failed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// An orphan the janitor saw and kept.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KeptOrphan {
    /// Model name (from the relation's name).
    pub model: String,
    /// Fingerprint, first 12 characters.
    pub fingerprint: String,
    /// The physical relation.
    pub physical: String,
    /// When a janitor first saw it (ISO-8601 UTC).
    pub first_seen: String,
    /// `young` (seen for less than the ttl), `foreign` (the storage's marker names other
    /// stores), `unmarked` (the storage has no marker: `efmesh janitor --adopt`) or `read` (a
    /// view outside efmesh's storage reads it, directly or through other orphans).
    pub reason: String,
    /// The other stores the storage's marker names (for `foreign`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// The views reading it (for `read`), `schema.name`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_by: Vec<String>,
}

/// The orphan candidates a view still reads, with the views outside efmesh's storage schema
/// that read them — directly, or through orphan views that such a view reads (an environment's
/// view over an orphan view over an orphan table).
fn read_by_views(candidates: &[(String, String, String)], views: &[((String, String), String)]) -> BTreeMap<String, Vec<String>> {
    let storage = crate::core::name::PHYSICAL_SCHEMA.to_lowercase();
    let qualified = |(s, n): &(String, String)| format!("{s}.{n}");
    let outside: Vec<(&str, String)> = views.iter().filter(|(k, _)| k.0 != storage).map(|(k, sql)| (sql.as_str(), qualified(k))).collect();
    // The view definition of each candidate that is a view.
    let defs: BTreeMap<&str, &str> = candidates
        .iter()
        .filter_map(|(physical, _, _)| {
            views
                .iter()
                .find(|(k, _)| crate::engine::view_names(&format!("\"{}\".\"{}\"", k.0, k.1), physical))
                .map(|(_, sql)| (physical.as_str(), sql.as_str()))
        })
        .collect();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    loop {
        let mut grew = false;
        for (physical, _, _) in candidates {
            let mut by: BTreeSet<String> = outside.iter().filter(|(sql, _)| crate::engine::view_names(sql, physical)).map(|(_, v)| v.clone()).collect();
            // Through an orphan view read so: on behalf of the same views.
            for (reader, reader_by) in &out {
                if reader != physical && defs.get(reader.as_str()).is_some_and(|sql| crate::engine::view_names(sql, physical)) {
                    by.extend(reader_by.iter().cloned());
                }
            }
            if !by.is_empty() && out.get(physical) != Some(&by) {
                out.insert(physical.clone(), by);
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    out.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect()
}

/// An unreachable version's storage the janitor kept because another state store may serve it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KeptShared {
    /// Model name.
    pub model: String,
    /// Fingerprint, first 12 characters.
    pub fingerprint: String,
    /// The physical relation.
    pub physical: String,
    /// Always `shared`.
    pub reason: String,
    /// The storage whose records say so.
    pub storage: Storage,
    /// The other stores that may serve it (`unknown`: stores that wrote before markers existed).
    pub owners: Vec<String>,
    /// True when this store's claim had already removed its rows (another store registered the
    /// relation between the listing and the drop): the relation is an orphan to this store now.
    pub forgotten: bool,
}

/// Why the janitor stopped before claiming anything.
#[derive(Debug, thiserror::Error)]
pub enum JanitorError {
    /// The engine could not be opened or listed (the engine's hint, if any, stays last).
    #[error("janitor: {}", crate::engine::before_hint(&.0.to_string(), "; nothing was claimed or dropped"))]
    Engine(EngineError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The lake could not be listed, or an owner marker read or written.
    #[error("janitor: {0}; nothing was claimed or dropped")]
    Storage(String),
    /// The engine database is older than the state store says ([`crate::engine::epoch`]).
    #[error("janitor: {0}\n  (nothing was claimed or dropped)")]
    EngineBehind(String),
}

/// Opens the engine: `Ok(None)` when there is no database yet (nothing stored).
pub type Opener<'a> = dyn FnMut() -> Result<Option<Box<dyn Engine>>, EngineError> + 'a;

/// `<schema>__<table>` and the fingerprint of a relation name of the physical-name shape
/// `<schema>__<table>__<64 lowercase hex>`, or `None`. A name shortened to an engine's
/// identifier limit ([`crate::sql::fingerprint::physical_table_within`]) keeps at least 32 hex
/// digits (and perhaps a cut model part): it has the shape too, with the fingerprint's prefix.
pub fn physical_shape(name: &str) -> Option<(&str, &str)> {
    let (model, fp) = name.rsplit_once("__")?;
    let hex = (crate::sql::fingerprint::SHORT_FINGERPRINT_HEX..=64).contains(&fp.len()) && fp.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let (schema, table) = model.split_once("__")?;
    (hex && !schema.is_empty() && !table.is_empty()).then_some((model, fp))
}

/// The model name (`schema.table`) a physical-name-shaped relation name belongs to.
fn model_of(model_part: &str) -> String {
    model_part.split_once("__").map_or_else(|| model_part.to_string(), |(s, t)| format!("{s}.{t}"))
}

fn short(fp: &str) -> String {
    fp.get(..12).unwrap_or(fp).to_string()
}

/// The unquoted relation name at the end of a quoted, qualified physical name.
fn relation_name(physical: &str) -> &str {
    physical.rsplit("\".\"").next().unwrap_or(physical).trim_matches('"')
}

/// The age in milliseconds of a version: now minus the later of its creation and its release,
/// 0 at least (released by this janitor run after its `now` was taken, or stamped by a clock
/// ahead of `--now`: `--ttl 0` collects it at once); `None` when a stored instant cannot be
/// read (such a version is never collected).
fn age(v: &crate::state::VersionRow, now: Millis) -> Option<Millis> {
    let created = parse_instant(&v.created_at).ok()?;
    let released = match &v.released_at {
        Some(r) => Some(parse_instant(r).ok()?),
        None => None,
    };
    Some((now - released.map_or(created, |r| r.max(created))).max(0))
}

/// The claims the janitor makes from `inv` (pure): every unreachable version at least
/// `ttl_ms` old, grouped by the storage they share (a group is claimed whole or not at all),
/// and every orphan of `listed` (qualified physical names seen in the engine or the lake) that
/// no snapshot, intent or claim names.
pub fn decide(inv: &JanitorInventory, listed: &[String], ttl_ms: Millis, now: Millis) -> Vec<Claim> {
    let key = |p: &str| p.to_lowercase();
    let condemned: BTreeSet<String> = inv.condemned.iter().map(|c| key(&c.physical)).collect();
    let intent_physicals: BTreeSet<String> = inv.intent_physicals.iter().map(|p| key(p)).collect();
    let candidate = |v: &crate::state::VersionRow| -> Option<Millis> {
        let id = (v.name.clone(), v.fingerprint.clone());
        if inv.served.contains(&id) || inv.pending.contains(&id) || inv.intents.contains(&id) {
            return None;
        }
        if !v.physical.is_empty() && intent_physicals.contains(&key(&v.physical)) {
            return None;
        }
        age(v, now).filter(|a| *a >= ttl_ms)
    };
    let mut claims = Vec::new();
    let mut groups: BTreeMap<String, Vec<&crate::state::VersionRow>> = BTreeMap::new();
    for v in &inv.versions {
        if v.physical.is_empty() {
            if candidate(v).is_some() {
                claims.push(Claim { versions: vec![(v.name.clone(), v.fingerprint.clone())], storage: None });
            }
        } else {
            groups.entry(key(&v.physical)).or_default().push(v);
        }
    }
    for (k, group) in &groups {
        if condemned.contains(k) {
            continue;
        }
        let ages: Option<Vec<Millis>> = group.iter().map(|v| candidate(v)).collect();
        let Some(ages) = ages else { continue };
        let physical = &group[0].physical;
        // The version whose name the relation bears owns it; the others inherited it.
        let owner = group.iter().find(|v| relation_name(physical).to_lowercase().ends_with(&v.fingerprint.to_lowercase())).unwrap_or(&group[0]);
        let youngest = ages.iter().copied().min().unwrap_or(0);
        let versions: Vec<(String, String)> = group.iter().map(|v| (v.name.clone(), v.fingerprint.clone())).collect();
        claims.push(Claim {
            storage: Some(Condemned {
                physical: physical.clone(),
                name: owner.name.clone(),
                fingerprint: owner.fingerprint.clone(),
                kind: owner.kind.clone(),
                detail: json!({"orphan": false, "ageDays": youngest as f64 / DAY_MS, "versions": versions}),
                claimed_at: String::new(),
            }),
            versions,
        });
    }
    for (physical, model, fp) in orphan_candidates(inv, listed) {
        claims.push(Claim {
            versions: Vec::new(),
            storage: Some(Condemned {
                physical,
                name: model,
                fingerprint: fp,
                kind: "orphan".to_string(),
                detail: json!({"orphan": true}),
                claimed_at: String::new(),
            }),
        });
    }
    claims
}

/// The orphans among `listed` (qualified physical names seen in the engine or the lake): of the
/// physical-name shape, named by no snapshot, intent or claim, nor by a pointer or a promotion
/// under way by model and fingerprint (a damaged or restored store: never an orphan). Each as
/// `(physical, model, fingerprint)`, once.
pub fn orphan_candidates(inv: &JanitorInventory, listed: &[String]) -> Vec<(String, String, String)> {
    let key = |p: &str| p.to_lowercase();
    let known: BTreeSet<String> = inv
        .versions
        .iter()
        .map(|v| key(&v.physical))
        .chain(inv.condemned.iter().map(|c| key(&c.physical)))
        .chain(inv.intent_physicals.iter().map(|p| key(p)))
        .collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for physical in listed {
        let k = key(physical);
        if known.contains(&k) || !seen.insert(k) {
            continue;
        }
        let Some((model, fp)) = physical_shape(relation_name(physical)) else { continue };
        // A name shortened to an engine's limit keeps a prefix of the fingerprint (and perhaps
        // of the model): compared as prefixes.
        let named = |set: &HashSet<(String, String)>| {
            let (ms, mt) = model.split_once("__").unwrap_or((model, ""));
            set.iter().any(|(n, f)| {
                let (ns, nt) = n.split_once('.').unwrap_or((n.as_str(), ""));
                let part = |whole: &str, kept: &str| {
                    if fp.len() < 64 { whole.to_ascii_lowercase().starts_with(&kept.to_ascii_lowercase()) } else { whole.eq_ignore_ascii_case(kept) }
                };
                f.to_ascii_lowercase().starts_with(&fp.to_ascii_lowercase()) && part(ns, ms) && part(nt, mt)
            })
        };
        if named(&inv.served) || named(&inv.pending) || named(&inv.intents) {
            tracing::warn!(relation = %physical, "a version an environment names has no snapshot row; its storage is left alone");
            continue;
        }
        out.push((physical.clone(), model_of(model), fp.to_string()));
    }
    out
}

/// Runs the janitor: lists the engine's storage and the lake, claims (unless `dry_run`), drops
/// every claimed storage (the ones earlier janitors left claimed too) and forgets each claim
/// whose drop succeeded. The caller holds the global `janitor` lease on `state`.
///
/// # Errors
/// [`JanitorError`] when the engine cannot be opened for the listing or the state store fails;
/// nothing was claimed then. Failed drops are not errors: they are in [`Report::failed`].
pub fn collect(config: &Config, state: &dyn StateStore, open: &mut Opener<'_>, opts: &Options) -> Result<Report, JanitorError> {
    let ttl_ms = (opts.ttl_days * DAY_MS).round() as Millis;
    let me = state.store_id()?;
    let at = crate::core::interval::to_iso(opts.now);
    let mut report = Report { dry_run: opts.dry_run, ttl_days: opts.ttl_days, store_id: me.clone(), adopted: opts.adopt, ..Report::default() };
    // 0. Expired environments: their views and pointers go first, so the versions only they
    //    served are released now and follow the rules below (claimed once the ttl old).
    expire_environments(config, state, open, opts, &mut report)?;
    let s3 = crate::ownership::s3_lake(config).map_err(JanitorError::Storage)?;
    // An S3 listing failure is a failure (exit 1), but the engine's storage is still collected.
    let lake_names = match lake_listing(config, s3.as_ref()) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("the lake cannot be listed, its orphans are not collected this time: {e}");
            report.failed.push(Failure { physical: config.lake_root().unwrap_or_default(), model: String::new(), error: e });
            Vec::new()
        }
    };
    let in_lake: HashSet<String> = lake_names.iter().map(|p| p.to_lowercase()).collect();
    // 1. What storage exists (the engine's relations, the lake's version directories), who
    //    owns it (the markers) and which relations other stores may serve (their use records),
    //    read on one connection, released before the claim.
    // Every view of the engine, `(schema, name)` → definition (lowercased names).
    let mut views: Vec<((String, String), String)> = Vec::new();
    let (stored, owners, shared) = match open_with_wait(open, config, opts.dry_run).map_err(JanitorError::Engine)? {
        Some(mut engine) => {
            if opts.adopt {
                crate::ownership::adopt(config, Some(engine.as_mut()), s3.as_ref(), &me, &at).map_err(JanitorError::Storage)?;
                tracing::warn!(store = %me, "adopted: this state store is now the only owner of the project's storage; what other stores wrote there is collected as orphans after the ttl");
            }
            let stored = engine.storage_relations().map_err(JanitorError::Engine)?;
            let owners = crate::ownership::read_all(config, Some(engine.as_mut()), s3.as_ref(), &me).map_err(JanitorError::Storage)?;
            let shared = shared_candidates(state, engine.as_mut(), &stored, &in_lake, &owners, &me, ttl_ms, opts)?;
            // The store's epoch before the catalog (`plan::integrity::Observed`).
            let epoch = state.engine_epoch()?;
            let catalog = engine.catalog().map_err(JanitorError::Engine)?;
            // A database older than the store says (restored from a copy, or another one applied
            // with this store since) may still serve versions the store calls unreachable: its
            // storage is not this store's to judge (SPEC §4, invariant 63).
            if let Some(message) = crate::plan::integrity::engine_behind(config, state, epoch, &catalog)? {
                return Err(JanitorError::EngineBehind(message));
            }
            views = catalog.relations.into_iter().filter_map(|((s, n), e)| e.sql.map(|sql| ((s, n), sql))).collect();
            (stored, owners, shared)
        }
        None => {
            if opts.adopt {
                crate::ownership::adopt(config, None, s3.as_ref(), &me, &at).map_err(JanitorError::Storage)?;
            }
            (Vec::new(), crate::ownership::read_all(config, None, s3.as_ref(), &me).map_err(JanitorError::Storage)?, BTreeMap::new())
        }
    };
    if !shared.is_empty() {
        tracing::warn!(
            "{} unreachable version(s) kept: other state stores share their storage and may serve them (see `keptShared`); \
             in the engine database each is dropped by the janitor of the last store to stop serving it; \
             in a lake root or DuckLake catalog shared with another store nothing is dropped until one store remains and adopts it (`efmesh janitor --adopt`)",
            shared.len()
        );
    }
    let mut listed: Vec<String> = stored.iter().filter(|r| physical_shape(&r.name).is_some()).map(|r| r.qualified.clone()).collect();
    for r in stored.iter().filter(|r| physical_shape(&r.name).is_none()) {
        tracing::debug!(relation = %r.qualified, "not a physical-name shape: left alone");
    }
    let in_engine: HashSet<String> = listed.iter().map(|p| p.to_lowercase()).collect();
    listed.extend(lake_names.into_iter().filter(|p| !in_engine.contains(&p.to_lowercase())));
    // 2. Orphans: recorded when first seen; only those of storage this store owns alone and
    //    seen for at least the ttl are eligible for the claim.
    let candidates = orphan_candidates(&state.janitor_inventory()?, &listed);
    let physicals: Vec<String> = candidates.iter().map(|c| c.0.clone()).collect();
    // When an orphan was first seen is something that happened: stamped with the clock, never
    // `--now` (a `--now` in the past would make it look a ttl old at once), and aged on the
    // clock too (below).
    let clock = crate::core::interval::now_millis();
    let seen_at = crate::core::interval::to_iso(clock);
    let seen = if opts.dry_run {
        let mut seen = state.orphans_seen()?;
        seen.retain(|p, _| physicals.contains(p));
        for p in &physicals {
            seen.entry(p.clone()).or_insert_with(|| seen_at.clone());
        }
        seen
    } else {
        state.record_orphans_seen(&physicals, clock)?
    };
    let read_by = read_by_views(&candidates, &views);
    let mut eligible = Vec::new();
    let mut kept_in: BTreeMap<Storage, usize> = BTreeMap::new();
    for (physical, model, fp) in &candidates {
        let first_seen = seen.get(physical).cloned().unwrap_or_else(|| seen_at.clone());
        let key = physical.to_lowercase();
        let blocking = crate::ownership::storages_of(physical, in_engine.contains(&key), in_lake.contains(&key))
            .into_iter()
            .filter_map(|st| owners.iter().find(|o| o.storage == st))
            .find(|o| o.status != Status::Ours);
        // Aged on the clock, never a `--now` later than it: an orphan may be a relation another
        // process is creating, which must outlive one ttl of real time.
        let young = parse_instant(&first_seen).map_or(true, |f| (opts.now.min(clock) - f).max(0) < ttl_ms);
        let (reason, others) = match blocking {
            Some(o) => {
                *kept_in.entry(o.storage).or_default() += 1;
                (kept_reason(o.status), o.others(&me))
            }
            // An orphan a view still reads (an environment's view over a version the store
            // no longer knows: an older export imported, a store restored from a backup) would
            // break that view: kept, the views named.
            None if read_by.contains_key(physical) => {
                let readers = read_by.get(physical).cloned().unwrap_or_default();
                tracing::warn!(relation = %physical, "orphan kept: the view(s) {} read it; `efmesh apply` the environment (its views then serve what the state store records) before the next janitor", readers.join(", "));
                report.kept_orphans.push(KeptOrphan {
                    model: model.clone(),
                    fingerprint: short(fp),
                    physical: physical.clone(),
                    first_seen,
                    reason: "read".to_string(),
                    owners: Vec::new(),
                    read_by: readers,
                });
                continue;
            }
            None if young => ("young", Vec::new()),
            None => {
                eligible.push(physical.clone());
                continue;
            }
        };
        report.kept_orphans.push(KeptOrphan {
            model: model.clone(),
            fingerprint: short(fp),
            physical: physical.clone(),
            first_seen,
            reason: reason.to_string(),
            owners: others,
            read_by: Vec::new(),
        });
    }
    for (storage, n) in &kept_in {
        let Some(o) = owners.iter().find(|o| o.storage == *storage) else { continue };
        if o.status == Status::Unreadable {
            tracing::warn!(storage = ?o.storage, "{n} orphan(s) kept: the owner markers of `{}` cannot be read", o.location);
        } else if o.status == Status::Unmarked {
            tracing::warn!(
                storage = ?o.storage,
                "{n} orphan(s) kept: `{}` has no owner marker (written before efmesh recorded owners), so other state stores may have written there; \
                 if only this project's state store ({me}) ever applied there, adopt it with `efmesh janitor --adopt`",
                o.location
            );
        } else {
            tracing::warn!(
                storage = ?o.storage,
                "{n} orphan(s) kept: `{}` is also owned by state store(s) {} (this one is {me}); they may be theirs. \
                 If those stores are gone for good (a state file deleted or replaced), take the storage over with `efmesh janitor --adopt`",
                o.location,
                o.others(&me).join(", ")
            );
        }
    }
    report.storages = owners;
    report.kept_shared = shared.values().cloned().collect();
    // 3. The claim (or, for a dry run, what it would be).
    let claims = if opts.dry_run {
        let mut inv = state.janitor_inventory()?;
        // The expired environments a real run would drop first: the versions only they serve
        // are released now (a real run's step 0), so listed as it would claim them.
        let dropping: BTreeSet<&str> = report.environments.iter().filter(|e| e.kept.is_none()).map(|e| e.env.as_str()).collect();
        if !dropping.is_empty() {
            let mut served = HashSet::new();
            for env in state.environments()?.into_iter().filter(|e| !dropping.contains(e.as_str())) {
                served.extend(state.env_pointers(&env)?);
            }
            let now = crate::core::interval::to_iso(opts.now);
            for v in &mut inv.versions {
                let key = (v.name.clone(), v.fingerprint.clone());
                if inv.served.contains(&key) && !served.contains(&key) {
                    v.released_at = Some(now.clone());
                }
            }
            inv.served = served;
        }
        let claims = unshared(decide(&inv, &eligible, ttl_ms, opts.now), &shared);
        for c in &inv.condemned {
            push(&mut report, victim(c, config, true), c);
        }
        claims
    } else {
        fault::delay_point("janitor-before-claim");
        let claims = state.janitor_claim(&mut |inv| unshared(decide(inv, &eligible, ttl_ms, opts.now), &shared), opts.now)?;
        fault::crash_point(|| "janitor-after-claim".to_string());
        claims
    };
    let fresh: BTreeSet<String> = claims.iter().filter_map(|c| c.storage.as_ref().map(|s| s.physical.clone())).collect();
    for c in &claims {
        match &c.storage {
            None => report.dropped.push(Victim {
                model: c.versions.first().map(|v| v.0.clone()).unwrap_or_default(),
                fingerprint: c.versions.first().map(|v| short(&v.1)).unwrap_or_default(),
                kind: String::new(),
                physical: String::new(),
                age_days: None,
                versions: c.versions.iter().map(|(n, f)| format!("{n}@{}", short(f))).collect(),
                lake_dir: None,
                first_seen: None,
                left_over: false,
                already_absent: false,
            }),
            Some(s) if opts.dry_run => {
                let mut v = victim(s, config, false);
                v.already_absent = !s.physical.is_empty() && v.lake_dir.is_none() && !in_engine.contains(&s.physical.to_lowercase());
                push(&mut report, v, s);
            }
            Some(_) => {}
        }
    }
    if !opts.dry_run {
        drop_condemned(config, state, open, s3.as_ref(), &me, &fresh, &in_lake, &mut report)?;
    }
    for v in &mut report.orphans {
        v.first_seen = seen.get(&v.physical).cloned();
    }
    // 4. The DuckLake catalog's history: its files outlive a dropped table until the snapshots
    //    referencing them expire.
    reclaim_ducklake(config, open, opts, ttl_ms, &mut report);
    Ok(report)
}

/// Expires the DuckLake catalog's snapshots taken more than the ttl ago and removes the files
/// only they referenced ([`crate::apply::ducklake::reclaim`]): the files of the tables this run
/// dropped (once the snapshots before the drop are a ttl old: at once with `--ttl 0`), of
/// replaced `full` tables and of deleted time ranges. The ttl is measured on the clock, never
/// `--now` (DuckLake stamps its snapshots with the clock); it is the grace a reader of an older
/// snapshot has (a local catalog file admits no other process while the janitor holds it; a
/// catalog in Postgres does). A dry run counts what would go and changes nothing. A failure is
/// in [`Report::failed`] (the files stay; the next janitor tries again). Nothing to do without
/// a DuckLake catalog or an engine database.
fn reclaim_ducklake(config: &Config, open: &mut Opener<'_>, opts: &Options, ttl_ms: Millis, report: &mut Report) {
    if !config.ducklake_catalog_exists() {
        return;
    }
    let older_than = crate::core::interval::to_iso(crate::core::interval::now_millis() - ttl_ms);
    // The DuckLake tables dropped by this run (or that a dry run would drop).
    let tables: Vec<String> =
        report.dropped.iter().chain(&report.orphans).filter(|v| !v.already_absent).filter_map(|v| crate::apply::ducklake::table_of(&v.physical)).collect();
    let result = match open_with_wait(open, config, opts.dry_run) {
        Ok(Some(mut engine)) => crate::apply::ducklake::reclaim(engine.as_mut(), &older_than, opts.dry_run, &tables).map_err(|e| e.to_string()),
        Ok(None) => return,
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(done) => {
            tracing::info!(
                snapshots = done.snapshots,
                files = done.files,
                dry_run = opts.dry_run,
                "DuckLake maintenance: snapshots taken before {older_than} expired, files only they referenced removed"
            );
            if !opts.dry_run {
                crate::apply::ducklake::remove_empty_table_dirs(config, &tables);
            }
            report.ducklake_snapshots_expired = Some(done.snapshots);
            report.ducklake_files_removed = Some(done.files);
            report.ducklake_expired_before = Some(older_than);
        }
        Err(error) => {
            let location = crate::apply::ducklake::catalog_location(config);
            tracing::warn!(
                "cannot expire the old snapshots of the DuckLake catalog {location}: {error}; its unreferenced files stay, the next janitor tries again"
            );
            report.failed.push(Failure {
                physical: location,
                model: String::new(),
                error: format!("expiring the DuckLake catalog's snapshots taken before {older_than} and removing their files failed (the files stay): {error}"),
            });
        }
    }
}

/// Drops every expired environment other than `prod` ([`crate::lifecycle::judge`]): for each,
/// under its writer lease (`env:<name>`, or `lake`; taken on a second handle of the store,
/// never waited for: an apply or run holding it keeps the environment for the next janitor),
/// judged again under it, its views and the schemas holding nothing else are dropped in ONE
/// engine transaction, then its state in ONE state transaction
/// ([`StateStore::drop_environment`], which checks that nothing renewed it). Views first: a
/// janitor stopped in between leaves pointers whose views are missing (the next janitor, or
/// the next apply's repair, finishes), never views over versions the state no longer serves.
/// A dry run lists them and changes nothing. An environment whose engine statements fail is
/// kept (`failed`, in [`Report::failed`]: exit 1) with its state; the others go on.
///
/// # Errors
/// The state store fails, or the engine cannot be opened.
fn expire_environments(config: &Config, state: &dyn StateStore, open: &mut Opener<'_>, opts: &Options, report: &mut Report) -> Result<(), JanitorError> {
    use crate::core::name::quote_ident;
    use crate::lifecycle::{PROD, judge};
    let mut out = Vec::new();
    for env in state.environments()? {
        if env == PROD {
            continue;
        }
        let expiry = judge(&env, &state.journal(&env)?, opts.env_ttl, opts.now);
        if !expiry.expired {
            continue;
        }
        let views = env_views(state, &env)?;
        let schemas: BTreeSet<String> = views.iter().map(|(s, _)| s.clone()).collect();
        out.push(ExpiredEnv {
            env: env.clone(),
            reason: expiry.reason.unwrap_or("ttl").to_string(),
            expired_at: expiry.expires_at.clone().unwrap_or_default(),
            last_applied_at: expiry.last_applied_at.clone(),
            views: views.iter().map(|(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t))).collect(),
            schemas: schemas.iter().cloned().collect(),
            dropped: false,
            kept: None,
        });
    }
    if out.is_empty() || opts.dry_run {
        report.environments = out;
        return Ok(());
    }
    let handle = state.reopen()?;
    let mut engine = open_with_wait(open, config, false).map_err(JanitorError::Engine)?;
    for e in &mut out {
        let lease = crate::state::lease::writer_lease(&e.env, config.writes_a_lake());
        let command = format!("efmesh janitor (dropping the expired environment `{}`)", e.env);
        let guard = match crate::state::lease::LeaseGuard::acquire(&*handle, &lease, &command, Duration::ZERO) {
            Ok(g) => g,
            Err(crate::state::lease::Refused::Held(held)) => {
                tracing::warn!(env = %e.env, "the expired environment `{}` is kept this time: `{lease}` is held by {}", e.env, held.holder);
                e.kept = Some("locked".into());
                continue;
            }
            Err(crate::state::lease::Refused::State(err)) => return Err(err.into()),
        };
        let result = drop_environment(&*handle, engine.as_mut().map(|en| &mut **en as &mut dyn Engine), e, opts);
        guard.release(&*handle);
        if let Err(failure) = result {
            let JanitorError::Engine(err) = failure else { return Err(failure) };
            tracing::warn!(env = %e.env, "cannot drop the expired environment `{}`: {err}", e.env);
            e.kept = Some("failed".into());
            report.failed.push(Failure { physical: e.views.join(", "), model: format!("environment {}", e.env), error: err.to_string() });
        }
    }
    report.environments = out;
    Ok(())
}

/// [`expire_environments`] for one environment, its writer lease held on `state`.
/// The views `env` has, as `(schema, view)`: one per pointer but those of externals and embedded
/// models, which have none (SPEC §4), as the metadata the environment serves says; a pointer whose
/// metadata names no kind counts as having one (dropping a view that is not there is harmless,
/// leaving one is not).
///
/// # Errors
/// The state store's reads.
pub fn env_views(state: &dyn StateStore, env: &str) -> Result<Vec<(String, String)>, StateError> {
    let viewless = |metadata: &str| {
        serde_json::from_str::<serde_json::Value>(metadata).ok().is_some_and(|m| matches!(m["kind"]["tag"].as_str(), Some("external" | "embedded")))
    };
    Ok(state
        .env_metadata(env)?
        .into_iter()
        .filter(|(_, metadata)| !viewless(metadata))
        .filter_map(|(name, _)| name.split_once('.').map(|(schema, table)| (crate::plan::env_schema(env, schema), table.to_string())))
        .collect())
}

fn drop_environment(state: &dyn StateStore, engine: Option<&mut dyn Engine>, e: &mut ExpiredEnv, opts: &Options) -> Result<(), JanitorError> {
    // Judged again under the lease: an apply that promoted it meanwhile renewed it.
    let expiry = crate::lifecycle::judge(&e.env, &state.journal(&e.env)?, opts.env_ttl, opts.now);
    if !expiry.expired {
        e.kept = Some("renewed".into());
        return Ok(());
    }
    if state.pending_promotions()?.iter().any(|p| p.env == e.env) {
        tracing::warn!(env = %e.env, "the expired environment `{}` is kept this time: a promotion of it was interrupted (the next command that reads it undoes it)", e.env);
        e.kept = Some("promoting".into());
        return Ok(());
    }
    let views = env_views(state, &e.env)?;
    e.views = views.iter().map(|(s, t)| format!("{}.{}", crate::core::name::quote_ident(s), crate::core::name::quote_ident(t))).collect();
    e.schemas.clear();
    if let Some(engine) = engine {
        let catalog = engine.catalog().map_err(JanitorError::Engine)?;
        let dialect = engine.sql();
        let mut statements: Vec<String> = e.views.iter().map(|v| dialect.drop_view_if_exists(v)).collect();
        // The environment's record (which store promoted it last) goes with its views (SPEC §4,
        // invariant 64): an environment of that name applied later is new.
        let record = crate::ownership::env_record_name(&e.env);
        if catalog.relations.contains_key(&(STORAGE_SCHEMA.to_string(), record)) {
            statements.push(dialect.drop_view_if_exists(&crate::ownership::env_record_relation(&e.env)));
        }
        let ours: HashSet<(String, String)> = views.iter().map(|(s, t)| (s.to_lowercase(), t.to_lowercase())).collect();
        let schemas: BTreeSet<&String> = views.iter().map(|(s, _)| s).collect();
        for schema in schemas {
            let lower = schema.to_lowercase();
            // A schema holding anything but this environment's views (a relation of the user's) stays.
            let others = catalog.relations.keys().any(|(s, t)| *s == lower && !ours.contains(&(s.clone(), t.clone())));
            if !others {
                statements.push(dialect.drop_schema_if_exists(schema));
                e.schemas.push(schema.clone());
            }
        }
        state.check_fence()?;
        engine.transaction(&statements).map_err(JanitorError::Engine)?;
    }
    // Judged expired as of `--now`, but the drop is stamped with the real clock, as every apply
    // is in the journal: a replay as of another date never records a drop in the future.
    if state.drop_environment(&e.env, expiry.journal_id, &crate::lifecycle::dropped_summary(&expiry), crate::core::interval::now_millis())? {
        e.dropped = true;
        tracing::info!(env = %e.env, views = e.views.len(), "dropped the expired environment `{}`", e.env);
    } else {
        e.kept = Some("renewed".into());
    }
    Ok(())
}

/// The unreachable versions past the ttl whose storage another state store may serve (SPEC §4,
/// invariant 39 (e)), by lowercased physical name, read on the connection of the listing. Unless
/// `dry_run`, this store's own use records of every unreachable version past the ttl are removed
/// on that connection: it no longer serves them, and records them again (apply, run) before it
/// does, so the janitor of the last store to stop serving a relation drops it. The inventory
/// is read with the engine held, so an apply of this store that relies on one of them either
/// recorded its intents before (the version is no candidate) or records its use after.
#[allow(clippy::too_many_arguments)] // one call site, in `collect`, passing its own listing
fn shared_candidates(
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    stored: &[StoredRelation],
    in_lake: &HashSet<String>,
    owners: &[Owners],
    me: &str,
    ttl_ms: Millis,
    opts: &Options,
) -> Result<BTreeMap<String, KeptShared>, JanitorError> {
    let uses = engine.storage_uses().map_err(JanitorError::Engine)?;
    let in_engine: HashSet<String> = stored.iter().map(|r| r.qualified.to_lowercase()).collect();
    let mut out = BTreeMap::new();
    let mut mine = Vec::new();
    for claim in decide(&state.janitor_inventory()?, &[], ttl_ms, opts.now) {
        let Some(c) = &claim.storage else { continue };
        let key = c.physical.to_lowercase();
        let record = (me.to_string(), crate::engine::use_key(&c.physical));
        if uses.contains(&record) {
            mine.push(record);
        }
        if let Some(kept) = kept_shared(c, in_engine.contains(&key), in_lake.contains(&key), owners, &uses, me, false) {
            out.insert(key, kept);
        }
    }
    if !opts.dry_run {
        engine.write_storage_uses(&[], &mine).map_err(JanitorError::Engine)?;
    }
    Ok(out)
}

/// The report entry of a claimed (or candidate) storage another store may serve, if one may.
fn kept_shared(c: &Condemned, in_engine: bool, in_lake: bool, owners: &[Owners], uses: &[(String, String)], me: &str, forgotten: bool) -> Option<KeptShared> {
    let (storage, others) = crate::ownership::sharers(&c.physical, in_engine, in_lake, owners, uses, me)?;
    Some(KeptShared {
        model: c.name.clone(),
        fingerprint: short(&c.fingerprint),
        physical: c.physical.clone(),
        reason: "shared".to_string(),
        storage,
        owners: others,
        forgotten,
    })
}

/// `claims` without the storage another store may serve (`shared`, by lowercased physical name).
fn unshared(claims: Vec<Claim>, shared: &BTreeMap<String, KeptShared>) -> Vec<Claim> {
    claims.into_iter().filter(|c| c.storage.as_ref().is_none_or(|s| !shared.contains_key(&s.physical.to_lowercase()))).collect()
}

/// A use record `(store id, key)` ([`Engine::storage_uses`]).
type UseRecord = (String, String);

/// Drops every claimed storage: this janitor's and what earlier ones left.
#[allow(clippy::too_many_arguments)] // one call site, in `collect`, passing its own listing
fn drop_condemned(
    config: &Config,
    state: &dyn StateStore,
    open: &mut Opener<'_>,
    s3: Option<&S3Lake>,
    me: &str,
    fresh: &BTreeSet<String>,
    listed_in_lake: &HashSet<String>,
    report: &mut Report,
) -> Result<(), JanitorError> {
    let condemned = state.janitor_inventory()?.condemned;
    if condemned.is_empty() {
        return Ok(());
    }
    fault::delay_point("janitor-before-drop");
    let mut engine = match open_with_wait(open, config, false) {
        Ok(e) => e,
        Err(e) => {
            for c in &condemned {
                report.failed.push(Failure { physical: c.physical.clone(), model: c.name.clone(), error: e.to_string() });
            }
            return Ok(());
        }
    };
    // The engine is ours now (a DuckDB file admits one writer): a janitor that stalled past its
    // lease stops here, and only what is still claimed is dropped (another janitor may have
    // dropped and released a claim since, and an apply rebuilt that version).
    state.check_fence()?;
    let still: HashSet<String> = state.janitor_inventory()?.condemned.into_iter().map(|c| c.physical).collect();
    let condemned: Vec<Condemned> = condemned.into_iter().filter(|c| still.contains(&c.physical)).collect();
    let listing =
        engine.as_mut().map(|e| Ok::<_, EngineError>((e.storage_relations()?, e.storage_uses()?))).transpose().map_err(|e| e.to_string()).and_then(|list| {
            // The markers and use records again, with the engine held: a store that registered
            // since the listing keeps its storage (orphan claims in a storage no longer ours alone,
            // and claims of relations another store may serve now, are released).
            let owners = crate::ownership::read_all(config, engine.as_deref_mut(), s3, me)?;
            Ok((list, owners))
        });
    let (present, uses, owners): (HashMap<String, StoredRelation>, Vec<UseRecord>, Vec<Owners>) = match listing {
        Ok((list, owners)) => {
            let (list, uses) = list.unwrap_or_default();
            (list.into_iter().map(|r| (r.qualified.to_lowercase(), r)).collect(), uses, owners)
        }
        Err(e) => {
            for c in &condemned {
                report.failed.push(Failure { physical: c.physical.clone(), model: c.name.clone(), error: e.clone() });
            }
            return Ok(());
        }
    };
    let lake_now: Option<HashSet<String>> = lake_listing(config, s3).ok().map(|l| l.iter().map(|p| p.to_lowercase()).collect());
    // Views before the relations they read (Postgres refuses to drop a relation a view reads).
    let catalog = engine.as_mut().and_then(|e| e.catalog().ok());
    let condemned = dependents_first(condemned, &present, catalog.as_ref());
    for c in &condemned {
        let orphan = c.detail.get("orphan").and_then(serde_json::Value::as_bool).unwrap_or(false);
        let key = c.physical.to_lowercase();
        // The lake counts when the directory is listed there, or when the lake cannot be listed.
        // Unlistable now: what this run's listing saw for its own claims, the lake for older ones.
        let lake = match &lake_now {
            Some(l) => l.contains(&key),
            None if fresh.contains(&c.physical) => listed_in_lake.contains(&key),
            None => config.lake.is_some(),
        };
        let not_ours = crate::ownership::storages_of(&c.physical, present.contains_key(&key), lake)
            .into_iter()
            .filter_map(|st| owners.iter().find(|o| o.storage == st))
            .find(|o| o.status != Status::Ours);
        if orphan && let Some(o) = not_ours {
            tracing::warn!(physical = %c.physical, "not dropped: `{}` is no longer owned by this state store alone; the claim is released", o.location);
            if let Err(e) = state.release_condemned(&c.physical) {
                report.failed.push(Failure { physical: c.physical.clone(), model: c.name.clone(), error: format!("kept, but {e}") });
            }
            report.kept_orphans.push(KeptOrphan {
                model: c.name.clone(),
                fingerprint: short(&c.fingerprint),
                physical: c.physical.clone(),
                first_seen: String::new(),
                reason: kept_reason(o.status).to_string(),
                owners: o.others(me),
                read_by: Vec::new(),
            });
            continue;
        }
        // A version's storage another store recorded since the listing: kept, the claim released
        // (this store forgot the version: the relation is its orphan now, in shared storage).
        if !orphan && let Some(kept) = kept_shared(c, present.contains_key(&key), lake, &owners, &uses, me, true) {
            tracing::warn!(physical = %c.physical, "not dropped: state store(s) {} may serve it now; the claim is released", kept.owners.join(", "));
            if let Err(e) = state.release_condemned(&c.physical) {
                report.failed.push(Failure { physical: c.physical.clone(), model: c.name.clone(), error: format!("kept, but {e}") });
            }
            report.kept_shared.push(kept);
            continue;
        }
        let absent = !present.contains_key(&key);
        match drop_storage(config, engine.as_deref_mut(), s3, &present, c) {
            Ok(lake_dir) => {
                // The storage is gone: the claim can go (if forgetting it fails, the next
                // janitor drops nothing and forgets it then).
                if let Err(e) = state.release_condemned(&c.physical) {
                    report.failed.push(Failure { physical: c.physical.clone(), model: c.name.clone(), error: format!("dropped, but {e}") });
                    continue;
                }
                let mut v = victim(c, config, !fresh.contains(&c.physical));
                v.already_absent = absent && lake_dir.is_none() && !c.physical.is_empty();
                v.lake_dir = lake_dir;
                tracing::info!(physical = %c.physical, model = %c.name, "dropped");
                push(report, v, c);
            }
            Err(error) => {
                tracing::warn!(physical = %c.physical, model = %c.name, "cannot drop: {error}; it stays claimed and the next janitor tries again");
                report.failed.push(Failure { physical: c.physical.clone(), model: c.name.clone(), error });
            }
        }
    }
    Ok(())
}

/// The lake's version directories as the physical names of their views in `_efmesh`.
fn lake_listing(config: &Config, s3: Option<&S3Lake>) -> Result<Vec<String>, String> {
    use crate::core::name::quote_ident;
    let dirs = crate::ownership::lake_version_dirs(config, s3)?;
    Ok(dirs.iter().map(|name| format!("{}.{}", quote_ident(STORAGE_SCHEMA), quote_ident(name))).collect())
}

/// The `keptOrphans` reason of an orphan in storage of that status.
fn kept_reason(status: Status) -> &'static str {
    match status {
        Status::Unmarked => "unmarked",
        Status::Unreadable => "unreadable",
        _ => "foreign",
    }
}

fn push(report: &mut Report, v: Victim, c: &Condemned) {
    if c.detail.get("orphan").and_then(serde_json::Value::as_bool).unwrap_or(false) {
        report.orphans.push(v);
    } else {
        report.dropped.push(v);
    }
}

/// The report line of a claimed storage.
fn victim(c: &Condemned, config: &Config, left_over: bool) -> Victim {
    let versions = c
        .detail
        .get("versions")
        .and_then(serde_json::Value::as_array)
        .map(|vs| vs.iter().filter_map(|v| Some(format!("{}@{}", v.get(0)?.as_str()?, short(v.get(1)?.as_str()?)))).collect::<Vec<_>>())
        .unwrap_or_default();
    Victim {
        model: c.name.clone(),
        fingerprint: short(&c.fingerprint),
        kind: c.kind.clone(),
        physical: c.physical.clone(),
        age_days: c.detail.get("ageDays").and_then(serde_json::Value::as_f64),
        versions,
        lake_dir: lake_dir_of(config, &c.physical).filter(|d| !d.s3 && Path::new(&d.url).exists()).map(|d| d.url),
        first_seen: None,
        left_over,
        already_absent: false,
    }
}

/// The lake version directory of a physical relation in `_efmesh`, when the project has a lake.
fn lake_dir_of(config: &Config, physical: &str) -> Option<VersionDir> {
    let root = config.lake_root()?;
    let in_storage_schema = physical.to_lowercase().starts_with(&format!("\"{STORAGE_SCHEMA}\"."));
    if !in_storage_schema {
        return None;
    }
    let (model, fp) = physical_shape(relation_name(physical))?;
    Some(VersionDir { url: format!("{root}/{model}/{fp}"), s3: root.starts_with("s3://"), fingerprint: fp.to_string() })
}

/// Opens the engine, waiting up to [`ENGINE_WAIT`] while another process holds its file (a
/// lock conflict is transient), and attaches the DuckLake catalog when the project has one
/// (read-only for a dry run).
fn open_with_wait(open: &mut Opener<'_>, config: &Config, read_only: bool) -> Result<Option<Box<dyn Engine>>, EngineError> {
    let deadline = std::time::Instant::now() + ENGINE_WAIT;
    let mut engine = loop {
        match open() {
            Ok(e) => break e,
            Err(e) if crate::apply::retry::is_transient_message(&e.message) && std::time::Instant::now() < deadline => {
                tracing::debug!("the engine is busy, waiting: {}", e.message);
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                let busy = crate::apply::retry::is_transient_message(&e.message);
                return Err(if busy {
                    EngineError::new(
                        &e.sql,
                        crate::engine::before_hint(&e.message, &format!(" (still held by another process after {} s)", ENGINE_WAIT.as_secs())),
                    )
                } else {
                    e
                });
            }
        }
    };
    // No catalog yet: no version lives there.
    if let Some(e) = engine.as_mut()
        && config.ducklake_catalog_exists()
    {
        crate::apply::ducklake::attach(config, &mut **e, read_only).map_err(|m| EngineError::new("", m))?;
    }
    Ok(engine)
}

/// `condemned` in an order that drops every view before the relations it reads: the views
/// first, each taken once no remaining condemned view's definition (`catalog`) names it, then
/// everything else. Engines that do not track view dependencies (DuckDB) lose nothing by it.
fn dependents_first(condemned: Vec<Condemned>, present: &HashMap<String, StoredRelation>, catalog: Option<&crate::engine::Catalog>) -> Vec<Condemned> {
    let is_view = |c: &Condemned| present.get(&c.physical.to_lowercase()).is_some_and(|r| r.view);
    let (mut views, rest): (Vec<Condemned>, Vec<Condemned>) = condemned.into_iter().partition(is_view);
    let sql_of = |c: &Condemned| -> String {
        let name = present.get(&c.physical.to_lowercase()).map(|r| r.name.clone()).unwrap_or_default();
        catalog.and_then(|cat| cat.view_sql(crate::engine::STORAGE_SCHEMA, &name)).unwrap_or_default().to_string()
    };
    let mut ordered = Vec::with_capacity(views.len() + rest.len());
    while !views.is_empty() {
        let sqls: Vec<String> = views.iter().map(sql_of).collect();
        // Views no other remaining view reads: dropped now.
        let free: Vec<bool> =
            views.iter().enumerate().map(|(i, v)| !sqls.iter().enumerate().any(|(j, sql)| i != j && crate::engine::view_names(sql, &v.physical))).collect();
        if !free.iter().any(|f| *f) {
            // A cycle cannot be; keep the rest as listed.
            ordered.append(&mut views);
            break;
        }
        let mut i = 0;
        views.retain(|v| {
            let keep = !free[i];
            i += 1;
            if !keep {
                ordered.push(v.clone());
            }
            keep
        });
    }
    ordered.extend(rest);
    ordered
}

/// Drops one claimed storage: its lake version directory (local, or every object under its
/// S3 prefix) and its relation (as the engine lists it). Returns the directory removed.
fn drop_storage(
    config: &Config,
    engine: Option<&mut (dyn Engine + '_)>,
    s3: Option<&S3Lake>,
    present: &HashMap<String, StoredRelation>,
    c: &Condemned,
) -> Result<Option<String>, String> {
    let mut removed = None;
    if let Some(dir) = lake_dir_of(config, &c.physical) {
        if dir.s3 {
            let Some(s3) = s3 else { return Err("an S3 lake directory, but no S3 client".to_string()) };
            let prefix = format!("{}/", s3.key_of_url(&dir.url)?);
            if s3.delete_prefix(&prefix)? > 0 {
                removed = Some(dir.url.clone());
            }
        } else if let Some(root) = config.lake_root()
            && remove_version_dir(Path::new(&root), &dir)?
        {
            removed = Some(dir.url.clone());
        }
    }
    if let Some(rel) = present.get(&c.physical.to_lowercase()) {
        let Some(engine) = engine else { return Err("no engine to drop it from".to_string()) };
        engine.drop_relation(&rel.qualified, rel.view).map_err(|e| e.to_string())?;
    } else if c.physical.to_lowercase().starts_with(&format!("\"{}\".", crate::core::target::DUCKLAKE_ALIAS)) && config.ducklake.is_none() {
        return Err("a DuckLake table, but the project has no `[ducklake]` section to attach its catalog".to_string());
    }
    Ok(removed)
}

/// Removes a lake version directory `<root>/<model>/<fp>` if it exists: only a real directory
/// inside the lake root (neither it nor its model directory may be a symbolic link); the model
/// directory goes too once empty. Returns whether it removed anything.
fn remove_version_dir(root: &Path, dir: &VersionDir) -> Result<bool, String> {
    let path = Path::new(&dir.url);
    let Some(model_dir) = path.parent() else { return Ok(false) };
    let is_real_dir = |p: &Path| -> Result<bool, String> {
        match fs_err::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                Err(format!("`{}` is a symbolic link; the janitor never follows one out of the lake: remove it yourself", p.display()))
            }
            Ok(m) if m.is_dir() => Ok(true),
            Ok(_) => Err(format!("`{}` is not a directory", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    };
    if !is_real_dir(model_dir)? || !is_real_dir(path)? {
        return Ok(false);
    }
    let root = fs_err::canonicalize(root).map_err(|e| e.to_string())?;
    let real = fs_err::canonicalize(path).map_err(|e| e.to_string())?;
    if !real.starts_with(&root) || real == root {
        return Err(format!("`{}` is not inside the lake root `{}`", real.display(), root.display()));
    }
    // `remove_dir_all` removes symbolic links inside without following them.
    fs_err::remove_dir_all(&real).map_err(|e| e.to_string())?;
    if fs_err::read_dir(model_dir).is_ok_and(|mut d| d.next().is_none()) {
        let _ = fs_err::remove_dir(model_dir);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::VersionRow;

    fn fp(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn row(name: &str, f: &str, physical: &str, created: &str, released: Option<&str>) -> VersionRow {
        VersionRow {
            name: name.into(),
            fingerprint: f.into(),
            kind: "full".into(),
            physical: physical.into(),
            created_at: created.into(),
            released_at: released.map(Into::into),
        }
    }

    /// `--ttl` takes the configuration's duration spellings (`7d`, `12h`, `2w`), and a plain
    /// number stays days (`7d` was refused as "invalid float literal").
    #[test]
    fn the_ttl_flag_takes_days_or_a_duration_as_the_configuration_spells_it() {
        for (text, days) in [("7", 7.0), ("0.5", 0.5), ("0", 0.0), ("7d", 7.0), ("12h", 0.5), ("2w", 14.0), ("36h", 1.5), (" 1d ", 1.0)] {
            assert_eq!(parse_ttl_days(text), Ok(days), "{text}");
        }
        let e = parse_ttl_days("7 parsecs").unwrap_err();
        assert!(e.contains("unit must be ms, s, m, h, d or w") && e.contains("a plain number is days"), "{e}");
    }

    fn phys(model: &str, f: &str) -> String {
        format!("\"_efmesh\".\"{}__{f}\"", model.replace('.', "__"))
    }

    const NOW: &str = "2026-02-10T00:00:00.000Z";

    #[test]
    fn a_shortened_name_an_environment_serves_is_never_an_orphan() {
        use crate::core::ModelName;
        use crate::sql::fingerprint::{Fingerprint, physical_table_within};
        let name = ModelName::parse(&format!("{}.{}", "s".repeat(40), "t".repeat(40))).unwrap();
        let fp = Fingerprint::parse(&fp('c')).unwrap();
        let short = physical_table_within(&name, &fp, Some(63));
        let listed = vec![format!("\"_efmesh\".\"{short}\"")];
        // Served by an environment but without a snapshot row (a damaged store): left alone.
        let mut inv = JanitorInventory::default();
        inv.served.insert((name.to_string(), fp.as_str().to_string()));
        assert!(orphan_candidates(&inv, &listed).is_empty(), "{short}");
        // Named by nothing: an orphan of the physical-name shape, whatever was cut.
        let orphans = orphan_candidates(&JanitorInventory::default(), &listed);
        assert_eq!(orphans.len(), 1, "{short}");
        // Another model sharing the cut prefix is not this one.
        let mut other = JanitorInventory::default();
        other.served.insert((format!("{}.{}x", "s".repeat(40), "u".repeat(40)), fp.as_str().to_string()));
        assert_eq!(orphan_candidates(&other, &listed).len(), 1);
    }

    #[test]
    fn physical_shapes() {
        assert_eq!(physical_shape(&format!("s__t__{}", fp('a'))), Some(("s__t", fp('a').as_str())));
        assert_eq!(physical_shape(&format!("s__t__x__{}", fp('0'))).map(|s| s.0), Some("s__t__x"));
        assert!(physical_shape(&format!("t__{}", fp('a'))).is_none(), "no schema part");
        assert!(physical_shape(&format!("s__t__{}", fp('A'))).is_none(), "uppercase hex is not ours");
        assert!(physical_shape("s__t__abc").is_none());
        assert!(physical_shape("_efmesh_stage_x").is_none());
        // Shortened to Postgres's 63 bytes: at least 32 hex digits.
        assert_eq!(physical_shape(&format!("s__t__{}", &fp('a')[..40])), Some(("s__t", &fp('a')[..40])));
        assert!(physical_shape(&format!("s__t__{}", &fp('a')[..31])).is_none());
    }

    #[test]
    fn only_unreachable_versions_past_the_ttl_are_claimed() {
        let now = parse_instant(NOW).unwrap();
        let day = DAY_MS as Millis;
        let (a, b, c, d, e) = (fp('a'), fp('b'), fp('c'), fp('d'), fp('e'));
        let mut inv = JanitorInventory {
            versions: vec![
                row("s.served", &a, &phys("s.served", &a), "2026-01-01T00:00:00.000Z", None),
                row("s.old", &b, &phys("s.old", &b), "2026-01-01T00:00:00.000Z", Some("2026-02-01T00:00:00.000Z")),
                row("s.young", &c, &phys("s.young", &c), "2026-01-01T00:00:00.000Z", Some("2026-02-09T00:00:00.000Z")),
                row("s.intent", &d, &phys("s.intent", &d), "2026-01-01T00:00:00.000Z", None),
                row("s.embedded", &e, "", "2026-01-01T00:00:00.000Z", None),
            ],
            ..JanitorInventory::default()
        };
        inv.served.insert(("s.served".into(), a.clone()));
        inv.intents.insert(("s.intent".into(), d.clone()));
        let claims = decide(&inv, &[], 7 * day, now);
        let names: Vec<&str> = claims.iter().map(|c| c.versions[0].0.as_str()).collect();
        assert_eq!(names, ["s.embedded", "s.old"], "{claims:?}");
        assert!(claims[0].storage.is_none() && claims[1].storage.as_ref().is_some_and(|s| s.physical == phys("s.old", &b)));
        // ttl 0 takes the young one too; a pending promotion protects like a pointer.
        inv.pending.insert(("s.old".into(), b.clone()));
        let names: BTreeSet<String> = decide(&inv, &[], 0, now).into_iter().map(|c| c.versions[0].0.clone()).collect();
        assert_eq!(names, BTreeSet::from(["s.embedded".to_string(), "s.young".to_string()]));
    }

    #[test]
    fn shared_storage_goes_only_with_every_version_sharing_it() {
        let now = parse_instant(NOW).unwrap();
        let (a, b) = (fp('a'), fp('b'));
        let shared = phys("s.t", &a);
        let mut inv = JanitorInventory {
            versions: vec![
                row("s.t", &a, &shared, "2026-01-01T00:00:00.000Z", Some("2026-01-02T00:00:00.000Z")),
                row("s.t", &b, &shared, "2026-01-01T00:00:00.000Z", None),
            ],
            ..JanitorInventory::default()
        };
        inv.served.insert(("s.t".into(), b.clone()));
        assert!(decide(&inv, &[], 0, now).is_empty(), "the forward-only version still serves the table");
        inv.served.clear();
        let claims = decide(&inv, &[], 0, now);
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].versions.len(), 2);
        assert_eq!(claims[0].storage.as_ref().map(|s| s.fingerprint.clone()), Some(a), "the owner is the version the name bears");
    }

    #[test]
    fn orphans_are_listed_relations_nobody_names() {
        let now = parse_instant(NOW).unwrap();
        let (a, b, c) = (fp('a'), fp('b'), fp('c'));
        let mut inv = JanitorInventory { versions: vec![row("s.t", &a, &phys("s.t", &a), "2026-02-09T23:00:00.000Z", None)], ..JanitorInventory::default() };
        inv.intent_physicals.insert(phys("s.u", &c));
        // Served, but its snapshot row is gone: never an orphan.
        inv.served.insert(("s.w".into(), fp('e')));
        let listed = vec![phys("s.t", &a), phys("s.t", &b), phys("s.u", &c), phys("s.w", &fp('e')), "\"_efmesh\".\"_efmesh_stage\"".to_string()];
        let claims = decide(&inv, &listed, 86_400_000, now);
        assert_eq!(claims.len(), 1, "{claims:?}");
        let s = claims[0].storage.as_ref().unwrap();
        assert_eq!((s.physical.as_str(), s.name.as_str(), s.kind.as_str()), (phys("s.t", &b).as_str(), "s.t", "orphan"));
    }
}
