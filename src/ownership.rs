//! Owner markers: which state stores have written into a storage (SPEC §4, invariant 39 (d)).
//!
//! Each storage efmesh writes physical versions into carries a marker listing the state stores
//! (`meta.store_id`) that applied there:
//!
//! - the engine database's `_efmesh` schema: one sequence `"_efmesh"."_efmesh_owner__<id>"` per
//!   store (DuckDB has no comment on a schema; a sequence is no relation, so nothing listing the
//!   schema's tables and views sees it, and adding an owner is one atomic statement);
//! - a DuckLake catalog: the table `"_efmesh"."_efmesh_owners"` (its tables live in `main`);
//! - a parquet lake root, local or on S3: one file or object `<root>/.efmesh-owner.d/<id>` per
//!   store, created once and never rewritten (S3 has no conditional put: a shared file rewritten
//!   by two stores at once would lose one), read by listing.
//!
//! `apply` adds its store to the marker of every storage it is about to write; a storage that
//! holds versions but had no marker (written before markers existed) gets the owner `unknown`
//! too, since other stores may have written there. The janitor collects orphans of a storage
//! only when its marker names this store alone; `janitor --adopt` makes it so.

use crate::config::Config;
use crate::engine::Engine;
use crate::s3::S3Lake;
use serde::Serialize;
use std::path::Path;

/// Name of the lake root's marker directory (or S3 prefix): one file or object per store,
/// named by its id.
pub const OWNER_DIR: &str = ".efmesh-owner.d";

/// The owner recorded beside the first known one in a storage that already held versions
/// without a marker: stores unknown may have written there.
pub const UNKNOWN_OWNER: &str = "unknown";

/// A storage that carries a marker.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// The engine database's `_efmesh` schema.
    Engine,
    /// The parquet lake root (local or S3).
    Lake,
    /// The DuckLake catalog.
    Ducklake,
}

/// Who owns a storage, relative to this store.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The marker names this store alone: its orphans are this store's to collect.
    Ours,
    /// The marker names this store and others (or `unknown`).
    Shared,
    /// The marker names other stores only.
    Foreign,
    /// No marker (storage written before markers existed, or nothing written yet).
    Unmarked,
    /// The marker could not be read (e.g. S3 unreachable): treated as not ours.
    Unreadable,
}

/// The marker of one storage.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Owners {
    /// Which storage.
    pub storage: Storage,
    /// Where it is (database file, lake root, DuckLake catalog).
    pub location: String,
    /// The store ids the marker names (`None`: no marker).
    pub owners: Option<Vec<String>>,
    /// What that means for this store.
    pub status: Status,
}

impl Owners {
    fn new(storage: Storage, location: String, owners: Option<Vec<String>>, me: &str) -> Self {
        let status = match &owners {
            None => Status::Unmarked,
            Some(o) if o.is_empty() => Status::Unmarked,
            Some(o) if o.iter().all(|x| x == me) => Status::Ours,
            Some(o) if o.iter().any(|x| x == me) => Status::Shared,
            Some(_) => Status::Foreign,
        };
        Self { storage, location, owners, status }
    }

    /// The owners other than `me`.
    pub fn others(&self, me: &str) -> Vec<String> {
        self.owners.iter().flatten().filter(|o| *o != me).cloned().collect()
    }
}

/// The storages a physical relation was found in: `"_efmesh_ducklake".…` lives in the DuckLake
/// catalog; `"_efmesh".…` in the engine database when listed there (`in_engine`), and in the
/// lake when a version directory of that name was listed there (`in_lake`). A project with
/// `[lake]` but no parquet version in it never needs the lake's marker for its engine orphans.
pub fn storages_of(physical: &str, in_engine: bool, in_lake: bool) -> Vec<Storage> {
    let p = physical.to_lowercase();
    if p.starts_with(&format!("\"{}\".", crate::core::target::DUCKLAKE_ALIAS)) {
        return vec![Storage::Ducklake];
    }
    let mut out = Vec::new();
    if in_engine {
        out.push(Storage::Engine);
    }
    if in_lake {
        out.push(Storage::Lake);
    }
    out
}

/// The owners a lake root's marker directory names (`<root>/.efmesh-owner.d/<store_id>`, one
/// file or object per store, read by listing): `Ok(None)` when there is none.
fn read_lake(config: &Config, s3: Option<&S3Lake>) -> Result<Option<Vec<String>>, String> {
    let root = config.lake_root().unwrap_or_default();
    let mut ids: Vec<String> = match s3 {
        Some(s3) => {
            let (keys, _) = s3.list(&s3.key(&format!("{OWNER_DIR}/")), None)?;
            keys.iter().filter_map(|k| k.rsplit('/').next()).filter(|id| !id.is_empty()).map(str::to_string).collect()
        }
        None => match fs_err::read_dir(Path::new(&root).join(OWNER_DIR)) {
            Ok(entries) => entries
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|n| !n.starts_with('.'))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        },
    };
    ids.sort();
    Ok((!ids.is_empty()).then_some(ids))
}

/// A store id is a file or object name in the marker directory: letters, digits, `-` and `_` only.
fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("the state store id `{id}` cannot name an owner marker (letters, digits, `-`, `_` only)"));
    }
    Ok(())
}

/// Creates the marker of store `id` in the lake root (never rewritten once there: each store
/// writes its own, so two stores registering at once both end up listed).
fn write_lake(config: &Config, s3: Option<&S3Lake>, id: &str, now: &str) -> Result<(), String> {
    check_id(id)?;
    let text = serde_json::to_string(&serde_json::json!({ "storeId": id, "since": now })).map_err(|e| e.to_string())? + "\n";
    if let Some(s3) = s3 {
        let key = s3.key(&format!("{OWNER_DIR}/{id}"));
        if s3.get(&key)?.is_some() {
            return Ok(());
        }
        return s3.put(&key, &text);
    }
    let dir = Path::new(&config.lake_root().unwrap_or_default()).join(OWNER_DIR);
    fs_err::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(id);
    if path.exists() {
        return Ok(());
    }
    let tmp = dir.join(format!(".{id}.tmp"));
    crate::file::replace(&path, &tmp, text.as_bytes()).map_err(|e| e.to_string())
}

/// Removes the markers of every store but `me` from the lake root (`janitor --adopt`).
fn remove_other_lake_markers(config: &Config, s3: Option<&S3Lake>, me: &str) -> Result<(), String> {
    for id in read_lake(config, s3)?.unwrap_or_default().into_iter().filter(|id| id != me) {
        match s3 {
            Some(s3) => s3.delete(&s3.key(&format!("{OWNER_DIR}/{id}")))?,
            None => fs_err::remove_file(Path::new(&config.lake_root().unwrap_or_default()).join(OWNER_DIR).join(&id)).map_err(|e| e.to_string())?,
        }
    }
    Ok(())
}

/// The S3 client of the project's lake, when it is on S3.
///
/// # Errors
/// A missing credential or an invalid endpoint.
pub fn s3_lake(config: &Config) -> Result<Option<S3Lake>, String> {
    config.lake.as_ref().filter(|l| l.is_s3()).map(S3Lake::open).transpose()
}

/// Version directories of the lake (`<root>/<schema>__<table>/<64 hex>`), as the relation
/// names `<schema>__<table>__<fp>` they belong to; empty without a lake.
///
/// # Errors
/// A failed S3 listing.
pub fn lake_version_dirs(config: &Config, s3: Option<&S3Lake>) -> Result<Vec<String>, String> {
    let Some(root) = config.lake_root() else { return Ok(Vec::new()) };
    let shape = |model: &str, fp: &str| {
        let name = format!("{model}__{fp}");
        crate::janitor::physical_shape(&name).is_some().then_some(name)
    };
    let mut out = Vec::new();
    if let Some(s3) = s3 {
        let base = s3.key("");
        let (_, models) = s3.list(&base, Some("/"))?;
        for m in models {
            let model = m.trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_string();
            if crate::janitor::physical_shape(&format!("{model}__{}", "0".repeat(64))).is_none() {
                continue;
            }
            let (_, versions) = s3.list(&m, Some("/"))?;
            out.extend(versions.iter().filter_map(|v| shape(&model, v.trim_end_matches('/').rsplit('/').next().unwrap_or_default())));
        }
        return Ok(out);
    }
    let Ok(models) = fs_err::read_dir(&root) else { return Ok(out) };
    for m in models.flatten() {
        if !m.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let model = m.file_name().to_string_lossy().into_owned();
        let Ok(versions) = fs_err::read_dir(m.path()) else { continue };
        for v in versions.flatten() {
            if v.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink()) {
                out.extend(shape(&model, &v.file_name().to_string_lossy()));
            }
        }
    }
    Ok(out)
}

/// The markers of every storage the project has: the engine database (when `engine` is
/// open), the lake (when configured), the DuckLake catalog (when attached).
///
/// # Errors
/// A failed engine query (an unreadable lake marker is [`Status::Unreadable`]).
pub fn read_all(config: &Config, engine: Option<&mut (dyn Engine + '_)>, s3: Option<&S3Lake>, me: &str) -> Result<Vec<Owners>, String> {
    let mut out = Vec::new();
    let db = crate::engine::location(config);
    match engine {
        Some(engine) => {
            out.push(Owners::new(Storage::Engine, db, engine.owner_marker(false).map_err(|e| e.to_string())?, me));
            if config.ducklake_catalog_exists() {
                let owners = engine.owner_marker(true).map_err(|e| e.to_string())?;
                out.push(Owners::new(Storage::Ducklake, crate::apply::ducklake::catalog_location(config), owners, me));
            }
        }
        None => out.push(Owners::new(Storage::Engine, db, None, me)),
    }
    if let Some(root) = config.lake_root() {
        match read_lake(config, s3) {
            Ok(owners) => out.push(Owners::new(Storage::Lake, root, owners, me)),
            Err(e) => {
                // Unreadable (an S3 outage): nothing of the lake is ours to collect this time.
                tracing::warn!("the lake's owner markers cannot be read: {e}");
                out.push(Owners { storage: Storage::Lake, location: root, owners: None, status: Status::Unreadable });
            }
        }
    }
    Ok(out)
}

/// Adds `me` to the marker of the storages an apply is about to write (the engine database
/// always, the lake and the DuckLake catalog when `lake` / `ducklake`): a storage without a
/// marker that already holds versions gets [`UNKNOWN_OWNER`] too. Warns when the marker names
/// other stores.
///
/// # Errors
/// A failed engine statement or lake read/write.
pub fn register(config: &Config, me: &str, engine: &mut dyn Engine, lake: bool, ducklake: bool, now: &str) -> Result<(), String> {
    let engine_err = |e: crate::engine::EngineError| format!("cannot record this state store as an owner of the storage: {}", e.message);
    let mut stored: Option<Vec<crate::engine::StoredRelation>> = None;
    for (storage, on) in [(Storage::Engine, true), (Storage::Ducklake, ducklake)] {
        if !on {
            continue;
        }
        let dl = storage == Storage::Ducklake;
        let owners = engine.owner_marker(dl).map_err(engine_err)?;
        let location = if dl { "the DuckLake catalog" } else { "the engine database's `_efmesh` schema" };
        match owners {
            Some(o) if o.iter().any(|x| x == me) => continue,
            Some(o) => warn_shared(location, &o, me),
            None => {
                if stored.is_none() {
                    stored = Some(engine.storage_relations().map_err(engine_err)?);
                }
                let alias = format!("\"{}\".", crate::core::target::DUCKLAKE_ALIAS);
                let held = stored.iter().flatten().any(|r| r.qualified.starts_with(&alias) == dl && crate::janitor::physical_shape(&r.name).is_some());
                if held {
                    engine.write_owner_marker(dl, UNKNOWN_OWNER, false, now).map_err(engine_err)?;
                }
            }
        }
        engine.write_owner_marker(dl, me, false, now).map_err(engine_err)?;
    }
    if lake && config.lake.is_some() {
        let s3 = s3_lake(config)?;
        match read_lake(config, s3.as_ref())? {
            Some(o) if o.iter().any(|x| x == me) => return Ok(()),
            Some(o) => warn_shared("the lake", &o, me),
            None if !lake_version_dirs(config, s3.as_ref())?.is_empty() => {
                write_lake(config, s3.as_ref(), UNKNOWN_OWNER, now).map_err(|e| format!("cannot record this state store as an owner of the lake: {e}"))?;
            }
            None => {}
        }
        write_lake(config, s3.as_ref(), me, now).map_err(|e| format!("cannot record this state store as an owner of the lake: {e}"))?;
    }
    Ok(())
}

fn warn_shared(location: &str, others: &[String], me: &str) {
    tracing::warn!(
        "{location} is also written by other state store(s) ({}; this one is {me}): the janitor collects no orphans there while they share it; \
         if they are gone for good (a state file deleted or replaced), take the storage over with `efmesh janitor --adopt`",
        others.join(", ")
    );
}

/// Records, in the engine database, that store `me` may serve each of `physicals` (SPEC §4,
/// invariant 39 (e)); the first time this store records uses there, every relation its
/// snapshots name (`known`) is recorded too, then the store's `registered` record. Relations of
/// the DuckLake catalog are not recorded (that storage is gated by its owner marker alone).
/// Writes nothing when every record is there already. Called by `apply` and `run` on the
/// connection they hold for the whole apply, before they check the relations they rely on.
///
/// # Errors
/// A failed engine statement or `known`.
pub fn register_uses(engine: &mut dyn Engine, me: &str, physicals: &[String], known: &mut dyn FnMut() -> Result<Vec<String>, String>) -> Result<(), String> {
    use crate::engine::{USES_REGISTERED, use_key};
    let err = |e: crate::engine::EngineError| format!("cannot record which relations this state store serves: {}", e.message);
    let mine: std::collections::HashSet<String> = engine.prepare_storage_uses(me).map_err(err)?.into_iter().filter(|(s, _)| s == me).map(|(_, k)| k).collect();
    let in_engine = |p: &&String| !p.is_empty() && !p.to_lowercase().starts_with(&format!("\"{}\".", crate::core::target::DUCKLAKE_ALIAS));
    let mut keys: std::collections::BTreeSet<String> = physicals.iter().filter(in_engine).map(|p| use_key(p)).collect();
    if !mine.contains(USES_REGISTERED) {
        keys.extend(known()?.iter().filter(in_engine).map(|p| use_key(p)));
        keys.insert(USES_REGISTERED.to_string());
    }
    let add: Vec<(String, String)> = keys.into_iter().filter(|k| !mine.contains(k)).map(|k| (me.to_string(), k)).collect();
    engine.write_storage_uses(&add, &[]).map_err(err)
}

/// The other state stores that may serve `physical`, and the storage that says so (SPEC §4,
/// invariant 39 (e)), or `None` when no other store may: in the engine database, every other
/// store with a use record of it and every other owner of its marker that records no uses
/// there (an older efmesh, or `unknown`); in a lake root or a DuckLake catalog (no use records),
/// every other owner of the marker (an unreadable marker: `unreadable`).
pub fn sharers(physical: &str, in_engine: bool, in_lake: bool, owners: &[Owners], uses: &[(String, String)], me: &str) -> Option<(Storage, Vec<String>)> {
    use crate::engine::{USES_REGISTERED, use_key};
    for storage in storages_of(physical, in_engine, in_lake) {
        let Some(o) = owners.iter().find(|o| o.storage == storage) else { continue };
        let mut others: Vec<String> = match storage {
            Storage::Engine => {
                let key = use_key(physical);
                let registered = |s: &String| uses.iter().any(|(u, k)| u == s && k == USES_REGISTERED);
                let mut v: Vec<String> = uses.iter().filter(|(s, k)| s != me && *k == key).map(|(s, _)| s.clone()).collect();
                v.extend(o.others(me).into_iter().filter(|s| !registered(s)));
                v
            }
            _ if o.status == Status::Unreadable => vec!["unreadable".to_string()],
            _ => o.others(me),
        };
        others.sort();
        others.dedup();
        if !others.is_empty() {
            return Some((storage, others));
        }
    }
    None
}

/// Prefix of the name of an environment's record in the engine database's `_efmesh` schema,
/// before the environment's name: the view `"_efmesh"."_efmesh_env__<env>"` (a hashed name past 63
/// bytes, [`env_record_name`]), whose comment names the state store that promoted the environment
/// last (SPEC §4, invariant 64). An environment
/// name holds no `__` and does not end with `_`, so a record's name holds exactly one `__`,
/// while a physical relation's (`<schema>__<table>__<fp>`) holds at least two: no physical
/// relation is ever taken for a record, even of a model in a schema `_efmesh_env`.
pub const ENV_RECORD_PREFIX: &str = "_efmesh_env__";

/// The text of an environment record's comment, before the store id.
const ENV_RECORD_COMMENT: &str = "efmesh: environment views of state store ";

/// The longest record name: Postgres cuts identifiers at 63 bytes (and efmesh refuses a cut
/// name), so a record is named within them on every engine.
const ENV_RECORD_MAX_BYTES: usize = 63;

/// The name (unquoted, in `_efmesh`) of the record of environment `env`:
/// `_efmesh_env__<env>`, or, when that exceeds 63 bytes (an environment name whose schemas
/// `<env>__<schema>` still fit), `_efmesh_env__<env's first characters>_<16 hex of blake3(env)>`
/// within them. Either holds exactly one `__` (the characters kept lose their trailing `_`, an
/// environment name holds no `__`) and is [`is_env_record`].
pub fn env_record_name(env: &str) -> String {
    const HASH_HEX: usize = 16;
    let plain = format!("{ENV_RECORD_PREFIX}{env}");
    if plain.len() <= ENV_RECORD_MAX_BYTES {
        return plain;
    }
    let hash = blake3::hash(env.as_bytes()).to_hex().to_string();
    let room = ENV_RECORD_MAX_BYTES - ENV_RECORD_PREFIX.len() - 1 - HASH_HEX;
    let mut head = String::new();
    for c in env.chars() {
        if head.len() + c.len_utf8() > room {
            break;
        }
        head.push(c);
    }
    format!("{ENV_RECORD_PREFIX}{}_{}", head.trim_end_matches('_'), &hash[..HASH_HEX])
}

/// The record of environment `env`, qualified and quoted.
pub fn env_record_relation(env: &str) -> String {
    use crate::core::name::quote_ident;
    format!("{}.{}", quote_ident(crate::engine::STORAGE_SCHEMA), quote_ident(&env_record_name(env)))
}

/// True when `name` (a relation of `_efmesh`) is an environment record: [`ENV_RECORD_PREFIX`]
/// then a valid environment name (a hashed record name, `<first characters>_<hex>`, is one).
pub fn is_env_record(name: &str) -> bool {
    name.strip_prefix(ENV_RECORD_PREFIX).is_some_and(|env| crate::core::name::validate_env(env).is_ok())
}

/// The statements that make store `me` the one that promoted environment `env` last: its
/// record created or replaced and commented. Run in the transaction of the view swap, ONE
/// record per environment whatever the number of views it moves.
pub fn env_record_sql(dialect: &dyn crate::engine::dialect::Dialect, env: &str, me: &str) -> Vec<String> {
    let relation = env_record_relation(env);
    let mut out = vec![dialect.create_schema_if_absent(crate::engine::STORAGE_SCHEMA)];
    out.extend(dialect.replace_view_as(&relation, "SELECT 1 AS efmesh_env"));
    out.push(format!("COMMENT ON VIEW {relation} IS {}", crate::core::name::quote_literal(&format!("{ENV_RECORD_COMMENT}{me}"))));
    out
}

/// The state store an environment record's comment (written by [`env_record_sql`]) names.
pub fn env_record_owner(comment: &str) -> Option<&str> {
    comment.strip_prefix(ENV_RECORD_COMMENT).map(str::trim).filter(|id| !id.is_empty())
}

/// The state store that promoted environment `env` last into the database `catalog` describes,
/// read from its record at no extra query; `None` without a record (a new environment, or one
/// last promoted before records existed).
pub fn env_recorded_by<'c>(catalog: &'c crate::engine::Catalog, env: &str) -> Option<&'c str> {
    catalog.comment(crate::engine::STORAGE_SCHEMA, &env_record_name(env)).and_then(env_record_owner)
}

/// An existing environment view a promotion would replace or drop that reads efmesh's storage
/// but not the version this store's environment serves, so another state store may serve it
/// (SPEC §4, invariant 64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignView {
    /// The view, `schema.table`.
    pub view: String,
    /// The other store the environment's record names (the one that promoted the environment
    /// last, for the message only); `None` when the record names this store or there is none.
    pub owner: Option<String>,
    /// The relations of efmesh's storage the view reads, unquoted and lowercased, each with its
    /// physical name as this store records it when this store knows it (a snapshot of its own, an
    /// action of the plan).
    pub reads: Vec<(String, Option<String>)>,
}

/// The views of `candidates` (views this store's environment does not serve) another live
/// state store may serve, while another store is present in the engine database (`living`: every
/// other store with a use record or an owner marker there; none present: none). A view is
/// another's when a relation it reads is one this store does not know ([`ForeignView::reads`]
/// without a physical name), or one another store recorded a use of (`uses`, keyed by
/// [`crate::engine::use_key`]); a view of this store's own reading a relation only it uses
/// (pointed by hand at another of its versions, or restored from an older export) is its own to
/// repair. The environment's record only names a store, it decides nothing.
pub fn foreign_views(candidates: Vec<ForeignView>, living: &[String], uses: &[(String, String)], me: &str) -> Vec<ForeignView> {
    if living.is_empty() {
        return Vec::new();
    }
    let used_by_another = |physical: &str| {
        let key = crate::engine::use_key(physical);
        uses.iter().any(|(store, k)| store != me && *k == key)
    };
    candidates.into_iter().filter(|v| v.reads.iter().any(|(_, physical)| physical.as_deref().is_none_or(used_by_another))).collect()
}

/// The other state stores present in the engine database: those with a use record
/// (`uses`, [`crate::engine::Engine::storage_uses`]) and the owners of its marker (`marker`),
/// `unknown` included, but `me`; sorted, once each.
pub fn living_stores(uses: &[(String, String)], marker: Option<&[String]>, me: &str) -> Vec<String> {
    let mut out: Vec<String> = uses.iter().map(|(s, _)| s.clone()).chain(marker.into_iter().flatten().cloned()).filter(|s| s != me).collect();
    out.sort();
    out.dedup();
    out
}

/// The refusal of a promotion of environment `env` into the engine database `engine` over the
/// environment views of other state stores (`views`, [`foreign_views`]; `others`: the other
/// stores present there), naming the views, the stores and the ways out.
pub fn foreign_views_message(env: &str, engine: &str, me: &str, views: &[ForeignView], others: &[String]) -> String {
    const SHOWN: usize = 8;
    let shown: Vec<String> = views
        .iter()
        .take(SHOWN)
        .map(|v| match &v.owner {
            Some(o) => format!("`{}` (reads no version this state store's `{env}` serves; `{env}` last promoted by state store {o})", v.view),
            None => format!("`{}` (reads no version this state store's `{env}` serves)", v.view),
        })
        .collect();
    let more = if views.len() > SHOWN { format!(" and {} more", views.len() - SHOWN) } else { String::new() };
    format!(
        "environment `{env}` would re-point {} view(s) of the engine database {engine} that another state store serves: {}{more}; \
         other state store(s) write this database ({}; this one is {me}), and replacing their views would silently change what they serve, \
         so nothing was done\n  \
         hint: use one state store per engine database (point this project's `[engine]` at another database), or apply under another \
         environment name; if the other store is gone for good (its state deleted or replaced, this store's own included: a state \
         store deleted and applied again is a new store, and the views its lost state made are another's), take the database over \
         with `efmesh janitor --adopt`, then apply again",
        views.len(),
        shown.join(", "),
        others.join(", ")
    )
}

/// Makes `me` the only owner of every storage the project has (`janitor --adopt`): the
/// storage other stores wrote becomes this store's orphans, collected after the ttl.
///
/// # Errors
/// A failed engine statement or lake write.
pub fn adopt(config: &Config, engine: Option<&mut (dyn Engine + '_)>, s3: Option<&S3Lake>, me: &str, now: &str) -> Result<(), String> {
    if let Some(engine) = engine {
        engine.write_owner_marker(false, me, true, now).map_err(|e| e.to_string())?;
        // Other stores' use records go with their ownership (SPEC §4, 39 (e)).
        let others: Vec<(String, String)> = engine.storage_uses().map_err(|e| e.to_string())?.into_iter().filter(|(s, _)| s != me).collect();
        engine.write_storage_uses(&[], &others).map_err(|e| e.to_string())?;
        if config.ducklake_catalog_exists() {
            engine.write_owner_marker(true, me, true, now).map_err(|e| e.to_string())?;
        }
    }
    if config.lake.is_some() {
        write_lake(config, s3, me, now)?;
        remove_other_lake_markers(config, s3, me)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lake_config(dir: &Path) -> Config {
        Config::parse(&dir.join("efmesh.toml"), "[project]\nmodels = [\"models/*.lua\"]\n\n[lake]\npath = \"lake\"\n").unwrap()
    }

    #[test]
    fn two_stores_registering_in_one_lake_root_at_once_are_both_listed() {
        let dir = tempfile::tempdir().unwrap();
        let config = lake_config(dir.path());
        let ids: Vec<String> = (0..8).map(|i| format!("{i:032x}")).collect();
        std::thread::scope(|s| {
            for id in &ids {
                let config = &config;
                s.spawn(move || write_lake(config, None, id, "2026-01-01T00:00:00.000Z").unwrap());
            }
        });
        assert_eq!(read_lake(&config, None).unwrap(), Some(ids.clone()), "every store that registered is listed");
        // Registering again rewrites nothing; adopting leaves only the adopter.
        write_lake(&config, None, &ids[0], "2027-01-01T00:00:00.000Z").unwrap();
        let text = fs_err::read_to_string(Path::new(&config.lake_root().unwrap()).join(OWNER_DIR).join(&ids[0])).unwrap();
        assert!(text.contains("2026-01-01"), "a marker is never rewritten: {text}");
        adopt(&config, None, None, &ids[3], "2027-01-01T00:00:00.000Z").unwrap();
        assert_eq!(read_lake(&config, None).unwrap(), Some(vec![ids[3].clone()]));
    }

    /// An environment's record (one view in `_efmesh`, never a physical relation's name) names
    /// the store that promoted it last but decides nothing: every view this store's environment
    /// does not serve is another's while any other store is present in the database, whichever
    /// store the record names, and none once no other store is; the refusal names the views,
    /// the stores and the ways out (the lost state store's own views included).
    #[test]
    fn a_view_is_anothers_while_another_store_is_present_whatever_the_record_names() {
        assert_eq!(env_record_relation("prod"), "\"_efmesh\".\"_efmesh_env__prod\"");
        let sql = env_record_sql(&crate::engine::dialect::Standard, "dev", "ab12");
        assert_eq!(sql.len(), 3, "one schema, one view, one comment: {sql:?}");
        assert_eq!(sql[2], "COMMENT ON VIEW \"_efmesh\".\"_efmesh_env__dev\" IS 'efmesh: environment views of state store ab12'");
        assert_eq!(env_record_owner("efmesh: environment views of state store ab12"), Some("ab12"));
        assert_eq!(env_record_owner("efmesh engine epoch 4"), None);
        assert_eq!(env_record_owner("efmesh: environment views of state store "), None);
        assert!(is_env_record("_efmesh_env__prod") && is_env_record("_efmesh_env__dev_2"));
        // A physical relation of a model `_efmesh_env.prod` is no record: it holds a second `__`.
        assert!(!is_env_record("_efmesh_env__prod__0123456789abcdef0123456789abcdef"));
        assert!(!is_env_record("_efmesh_epoch__ab12") && !is_env_record("_efmesh_env__"));
        let uses = vec![("ab12".to_string(), "registered".to_string()), ("cd34".to_string(), "registered".to_string())];
        let marker = ["ab12".to_string(), UNKNOWN_OWNER.to_string()];
        let living = living_stores(&uses, Some(&marker[..]), "ab12");
        assert_eq!(living, vec!["cd34".to_string(), UNKNOWN_OWNER.to_string()]);
        // `s.a` reads a relation this store does not know, `s.b` one another store uses, `s.c`
        // one only this store uses (its own view, pointed elsewhere: its own to repair).
        let view = |v: &str, o: Option<&str>| {
            let t = v.replace('.', "__");
            let physical = (v != "s.a").then(|| format!("\"_efmesh\".\"{t}\""));
            ForeignView { view: v.to_string(), owner: o.map(str::to_string), reads: vec![(format!("_efmesh.{t}"), physical)] }
        };
        let mut uses = uses.clone();
        uses.push(("cd34".to_string(), crate::engine::use_key("\"_efmesh\".\"s__b\"")));
        uses.push(("ab12".to_string(), crate::engine::use_key("\"_efmesh\".\"s__c\"")));
        let candidates = vec![view("s.a", Some("cd34")), view("s.b", Some("ef56")), view("s.c", None)];
        assert_eq!(foreign_views(candidates.clone(), &living, &uses, "ab12"), candidates[..2].to_vec(), "the record names, it never spares a view");
        assert!(foreign_views(candidates, &[], &uses, "ab12").is_empty(), "a store taken over leaves its views");
        let m = foreign_views_message("prod", "/p/efmesh.duckdb", "ab12", &[view("s.a", Some("cd34")), view("s.c", None)], &living);
        for wanted in [
            "environment `prod`",
            "`s.a` (reads no version this state store's `prod` serves; `prod` last promoted by state store cd34)",
            "`s.c` (reads no version this state store's `prod` serves)",
            "/p/efmesh.duckdb",
            "this one is ab12",
            "nothing was done",
            "one state store per engine database",
            "a state store deleted and applied again is a new store",
            "janitor --adopt",
        ] {
            assert!(m.contains(wanted), "{wanted}: {m}");
        }
    }

    /// An environment's record is named within Postgres's 63 bytes whatever the length of the
    /// environment's name (its schemas `<env>__<schema>` may fit while `_efmesh_env__<env>` would
    /// not): a long name's record is its first characters then a hash, one `__` only, a record
    /// still, distinct for names sharing their first characters, the same at every call.
    #[test]
    fn a_long_environment_names_record_fits_63_bytes() {
        let short = "feature_abcdefghij_abcdefghij_abcdefghij_abcdefghi";
        assert_eq!(env_record_name(short), format!("_efmesh_env__{short}"), "a name that fits is kept whole");
        assert_eq!(env_record_name(short).len(), 63);
        let long = "feature_abcdefghij_abcdefghij_abcdefghij_abcdefghij1";
        // The first characters kept end at a `_`: dropped, so the name holds one `__` only.
        let cut = "feature_abcdefghij_abcdefghij_ab_cdefghijklmnopqrstuvwxyz";
        let (many, longer) = ("a".repeat(200), format!("{cut}f"));
        for env in [long, many.as_str(), cut, longer.as_str()] {
            let name = env_record_name(env);
            assert!(name.len() <= 63, "{name}: {} bytes", name.len());
            assert!(name.starts_with(ENV_RECORD_PREFIX) && name.matches("__").count() == 1, "{name}");
            assert!(is_env_record(&name), "{name}");
            assert_eq!(env_record_name(env), name, "stable");
        }
        assert_ne!(env_record_name(long), env_record_name(&format!("{long}2")), "names sharing their first characters differ");
        let hashed = env_record_name(long);
        let hex = hashed.rsplit('_').next().unwrap_or_default();
        assert!(hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{hashed}");
        assert!(hashed.starts_with("_efmesh_env__feature_abcdefghij"), "{hashed}");
    }

    #[test]
    fn a_store_id_that_is_no_plain_name_names_no_marker() {
        let dir = tempfile::tempdir().unwrap();
        let config = lake_config(dir.path());
        assert!(write_lake(&config, None, "../x", "2026-01-01T00:00:00.000Z").is_err());
        assert_eq!(read_lake(&config, None).unwrap(), None);
    }
}
