//! `efmesh state export` / `efmesh state import`: the whole state store as one versioned JSON
//! document, the same for every backend (export from SQLite, import into Postgres).
//!
//! ```json
//! {"apiVersion": 1, "kind": "efmesh-state", "stateVersion": 10, "exportedAt": "…", "storeId": "…",
//!  "generation": 42, "claims": 0, "engineEpoch": 7, "epochIssued": 8, "duckLakeEpoch": 6,
//!  "tables": {"snapshots": {"columns": ["name", …], "rows": [["s.m", …], …]}, …}}
//! ```
//!
//! `tables` holds every table a plan, an apply, a run, `status` and the janitor read as data
//! ([`TABLES`]: snapshots, pointers, promotions under way, the ledger, the apply journal, run
//! ticks, the janitor's bookkeeping, pending rebuilds, data generations, audit passes). Left out:
//! caches (`plan_memo`, `canon_cache`: recomputed), and what belongs to running processes
//! (`leases`, `intents`). `meta` travels as `storeId`, `generation`, `claims`, `engineEpoch`, `epochIssued` and `duckLakeEpoch`. Rows are
//! arrays in the declared column order, integers as JSON numbers, text as strings, NULL as
//! `null`; each table's rows are sorted by its key, so exporting an unchanged store gives the
//! same bytes (but `exportedAt`).
//!
//! This module is pure (no I/O): the document's shape, its validation, and the list of tables
//! both backends read and write ([`crate::state::StateStore::export_state`],
//! [`crate::state::StateStore::import_state`]).

use super::STATE_VERSION;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The document format's version (`apiVersion`).
pub const DUMP_API_VERSION: i64 = 1;

/// The document's `kind`.
pub const DUMP_KIND: &str = "efmesh-state";

/// A column's type in the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    /// A 64-bit integer (`INTEGER` / `BIGINT`).
    Int,
    /// Text.
    Text,
    /// Text or NULL.
    TextOrNull,
    /// Text holding an instant ([`crate::core::interval::to_iso`]: ISO-8601 UTC with
    /// milliseconds); an import refuses one [`crate::core::interval::parse_instant`] cannot read.
    Instant,
    /// Text holding JSON; an import refuses text that does not parse.
    Json,
}

/// One exported table: its name, its columns in order, and the key its rows are sorted by.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// Table name (the same in both backends).
    pub name: &'static str,
    /// Columns, in the document's order.
    pub columns: &'static [(&'static str, Col)],
    /// `ORDER BY` of the export: the table's primary key (its columns, comma-separated).
    pub order: &'static str,
}

impl Table {
    /// The column names, comma-separated, for SQL.
    pub fn column_list(&self) -> String {
        self.columns.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
    }

    /// The positions of the primary key's columns ([`Table::order`]) in [`Table::columns`].
    pub fn key(&self) -> Vec<usize> {
        self.order.split(',').filter_map(|k| self.columns.iter().position(|(c, _)| *c == k.trim())).collect()
    }
}

use Col::{Instant, Int, Json, Text, TextOrNull};

/// Every exported table, in the order an import writes them.
pub const TABLES: &[Table] = &[
    Table {
        name: "snapshots",
        columns: &[
            ("name", Text),
            ("fingerprint", Text),
            ("fingerprint_version", Int),
            ("kind", Text),
            ("physical", Text),
            ("canonical", TextOrNull),
            ("rendered_sql", Text),
            ("metadata", Json),
            ("created_at", Instant),
        ],
        order: "name, fingerprint",
    },
    Table {
        name: "environments",
        columns: &[("env", Text), ("name", Text), ("fingerprint", Text), ("promoted_at", Instant), ("metadata", Json)],
        order: "env, name",
    },
    Table { name: "promotions", columns: &[("env", Text), ("pointers", Json), ("rollback", Json), ("started_at", Instant)], order: "env" },
    Table {
        name: "intervals",
        columns: &[("name", Text), ("fingerprint", Text), ("start_ts", Instant), ("end_ts", Instant), ("status", Text), ("updated_at", Instant)],
        order: "name, fingerprint, start_ts",
    },
    Table { name: "plans", columns: &[("id", Int), ("env", Text), ("summary", Json), ("applied_at", Instant), ("applied_by", Text)], order: "id" },
    Table {
        name: "ticks",
        columns: &[
            ("id", Int),
            ("env", Text),
            ("started_at", Instant),
            ("finished_at", Instant),
            ("outcome", Text),
            ("processed", Json),
            ("detail", TextOrNull),
        ],
        order: "id",
    },
    Table { name: "released", columns: &[("name", Text), ("fingerprint", Text), ("released_at", Instant)], order: "name, fingerprint" },
    Table {
        name: "condemned",
        columns: &[("physical", Text), ("name", Text), ("fingerprint", Text), ("kind", Text), ("detail", Json), ("claimed_at", Instant)],
        order: "physical",
    },
    Table {
        name: "pending_rebuilds",
        columns: &[("name", Text), ("fingerprint", Text), ("reason", Text), ("recorded_at", Instant)],
        order: "name, fingerprint",
    },
    Table {
        name: "data_versions",
        columns: &[("name", Text), ("fingerprint", Text), ("generation", Int), ("built_from", TextOrNull), ("updated_at", Instant)],
        order: "name, fingerprint",
    },
    Table { name: "orphans_seen", columns: &[("physical", Text), ("first_seen", Instant)], order: "physical" },
    Table {
        name: "audit_passes",
        columns: &[("name", Text), ("fingerprint", Text), ("digest", Text), ("generation", Int), ("passed_at", Instant)],
        order: "name, fingerprint",
    },
];

/// Tables an import empties besides [`TABLES`] (with `--force`): caches keyed by what the
/// store held before, and the intents of applies that are not running against the new content.
pub const CLEARED_ON_IMPORT: &[&str] = &["plan_memo", "canon_cache", "intents"];

/// The whole store's data ([`crate::state::StateStore::export_state`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateDump {
    /// `meta.store_id`.
    pub store_id: String,
    /// `meta.generation`.
    pub generation: i64,
    /// `meta.claims`.
    pub claims: i64,
    /// `meta.engine_epoch` (0 in a document of layout 8, which had none).
    pub engine_epoch: i64,
    /// `meta.epoch_issued` (the engine epoch in a document of layout 8 or 9, which had none:
    /// what the migration to layout 10 gives a store).
    pub epoch_issued: i64,
    /// `meta.ducklake_epoch` (0 in a document of layout 8 or 9, which had none).
    pub ducklake_epoch: i64,
    /// Rows per table of [`TABLES`], each in its columns' order.
    pub tables: BTreeMap<String, Vec<Vec<Value>>>,
}

impl StateDump {
    /// Rows per table, for a report: table → count.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        TABLES.iter().map(|t| (t.name.to_string(), self.tables.get(t.name).map_or(0, Vec::len))).collect()
    }

    /// The JSON document (`apiVersion` first), stamped `exported_at`.
    pub fn to_document(&self, exported_at: &str) -> Value {
        let mut tables = Map::new();
        for t in TABLES {
            let rows = self.tables.get(t.name).cloned().unwrap_or_default();
            tables.insert(t.name.to_string(), json!({"columns": t.columns.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "rows": rows}));
        }
        let mut doc = Map::new();
        doc.insert("apiVersion".into(), DUMP_API_VERSION.into());
        doc.insert("kind".into(), DUMP_KIND.into());
        doc.insert("stateVersion".into(), STATE_VERSION.into());
        doc.insert("exportedAt".into(), exported_at.into());
        doc.insert("storeId".into(), self.store_id.clone().into());
        doc.insert("generation".into(), self.generation.into());
        doc.insert("claims".into(), self.claims.into());
        doc.insert("engineEpoch".into(), self.engine_epoch.into());
        doc.insert("epochIssued".into(), self.epoch_issued.into());
        doc.insert("duckLakeEpoch".into(), self.ducklake_epoch.into());
        doc.insert("tables".into(), Value::Object(tables));
        Value::Object(doc)
    }

    /// Reads and validates a document: its `apiVersion` and `kind`, its `stateVersion` (this
    /// efmesh's layout, or layout 8 or 9 read as their migrations would (engine epoch 0 for 8,
    /// issued epoch = engine epoch and DuckLake epoch 0 for both): a newer one is refused, upgrade
    /// efmesh; an older one too, export it again after `efmesh migrate`), every table of [`TABLES`] with exactly its columns,
    /// every value's type, and the content the stores' reads rely on (instants, JSON, unique
    /// keys, snapshot kinds and their metadata's, pointers, promotions and done ledger rows
    /// naming snapshots, claimed storage, a `storeId`, counters that are not negative).
    ///
    /// # Errors
    /// A message naming what is wrong (the table, row and column for a value).
    pub fn from_document(doc: &Value) -> Result<StateDump, String> {
        let obj = doc.as_object().ok_or("the document is not a JSON object")?;
        let api = obj.get("apiVersion").and_then(Value::as_i64).ok_or("the document has no `apiVersion`: it is not an efmesh state export")?;
        if api != DUMP_API_VERSION {
            return Err(format!(
                "the document has `apiVersion` {api}, this efmesh reads {DUMP_API_VERSION}{}",
                if api > DUMP_API_VERSION { ": it was written by a newer efmesh; upgrade efmesh to import it" } else { "" }
            ));
        }
        if obj.get("kind").and_then(Value::as_str) != Some(DUMP_KIND) {
            return Err(format!("the document's `kind` is not `{DUMP_KIND}`: it is not an efmesh state export"));
        }
        let version = obj.get("stateVersion").and_then(Value::as_i64).ok_or("the document has no `stateVersion`")?;
        if version > STATE_VERSION {
            return Err(format!(
                "the document holds a state store of layout {version}, newer than this efmesh's {STATE_VERSION}: it was exported by a newer efmesh; upgrade efmesh to import it"
            ));
        }
        // Layouts 9 and 10 only added columns of `meta`: a document of layout 8 or 9 has the same
        // tables and is read with the values the migrations give a store (engine epoch 0 for
        // layout 8; the issued counter at the engine epoch, DuckLake epoch 0).
        if version < 8 {
            return Err(format!(
                "the document holds a state store of layout {version}, older than this efmesh's {STATE_VERSION}: run `efmesh migrate` on the store it came from with this efmesh, then export it again"
            ));
        }
        let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string).ok_or(format!("the document has no `{k}`"));
        let int = |k: &str| obj.get(k).and_then(Value::as_i64).ok_or(format!("the document has no integer `{k}`"));
        let (store_id, generation, claims) = (text("storeId")?, int("generation")?, int("claims")?);
        let engine_epoch = if version >= 9 { int("engineEpoch")? } else { 0 };
        let (epoch_issued, ducklake_epoch) = if version >= 10 { (int("epochIssued")?, int("duckLakeEpoch")?) } else { (engine_epoch, 0) };
        let tables_obj = obj.get("tables").and_then(Value::as_object).ok_or("the document has no `tables` object")?;
        if let Some(unknown) = tables_obj.keys().find(|k| !TABLES.iter().any(|t| t.name == k.as_str())) {
            return Err(format!("the document has a table `{unknown}` this efmesh does not know"));
        }
        let mut tables = BTreeMap::new();
        for t in TABLES {
            let table = tables_obj.get(t.name).ok_or(format!("the document has no table `{}`", t.name))?;
            let columns: Vec<&str> = table.get("columns").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            let wanted: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
            if columns != wanted {
                return Err(format!("table `{}` has the columns {columns:?}, layout {STATE_VERSION} has {wanted:?}", t.name));
            }
            let rows = table.get("rows").and_then(Value::as_array).ok_or(format!("table `{}` has no `rows` array", t.name))?;
            let mut out = Vec::with_capacity(rows.len());
            for (i, row) in rows.iter().enumerate() {
                let cells = row.as_array().filter(|r| r.len() == t.columns.len()).ok_or(format!(
                    "table `{}` row {}: not an array of {} values",
                    t.name,
                    i + 1,
                    t.columns.len()
                ))?;
                for ((column, col), v) in t.columns.iter().zip(cells) {
                    let ok = match col {
                        Int => v.as_i64().is_some(),
                        Text | Instant | Json => v.is_string(),
                        TextOrNull => v.is_string() || v.is_null(),
                    };
                    if !ok {
                        return Err(format!("table `{}` row {} column `{column}`: {v} is not {}", t.name, i + 1, col_name(*col)));
                    }
                }
                out.push(cells.clone());
            }
            tables.insert(t.name.to_string(), out);
        }
        let dump = StateDump { store_id, generation, claims, engine_epoch, epoch_issued, ducklake_epoch, tables };
        dump.check_content()?;
        Ok(dump)
    }

    /// What the stores' reads rely on beyond types, each refusal naming the table, row and
    /// column (and the row's key):
    ///
    /// - the document's `storeId` is not empty (the janitor tells the storage its store owns by
    ///   it, and refuses to run without one), and its `generation`, `claims`, `engineEpoch`,
    ///   `epochIssued` and `duckLakeEpoch` are not negative, nor any [`Col::Int`] value (journal and tick ids, fingerprint
    ///   versions, data and audit generations): every counter starts at 0 and only grows;
    /// - every [`Col::Instant`] value of every table is an instant, and every [`Col::Json`] value
    ///   is JSON (snapshot and pointer metadata, a promotion's pointers and undo, the journal's
    ///   summaries, ticks' counts, a claim's detail): a store holding one that is not fails the
    ///   reads of it later, or compares it as text with instants;
    /// - no two rows of a table have the same primary key ([`Table::key`]; the store would refuse
    ///   the second one);
    /// - every snapshot's kind is one a model declares ([`crate::script::builder::KIND_TAGS`],
    ///   what apply records), the kind its metadata names (if it names one), and its storage
    ///   efmesh's (none, or a relation in its storage schema or DuckLake catalog: the janitor
    ///   would otherwise claim a relation of the user's);
    /// - every environment name is one efmesh accepts, and every pointer names a snapshot, but
    ///   for an external model, which has none: a pointer without its snapshot is accepted only
    ///   when its metadata's kind is `external`, or its metadata holds no kind at all (`{}`, what
    ///   the migration to layout 3 gave a pointer without a snapshot: an external's). A promotion
    ///   requires the snapshot of every other pointer, so a store efmesh wrote holds none other.
    ///   A pointer's metadata names its snapshot's kind, if any (the kind is in the fingerprint);
    /// - every promotion under way is of an environment name efmesh accepts, its pointers an
    ///   object of model name → fingerprint and its undo an array of statements (what the
    ///   janitor and the recovery read), and each pointer names a snapshot, but a model's with no
    ///   snapshot at all or one a pointer says is external (an external's: apply records every
    ///   other snapshot before it records the promotion);
    /// - every storage the janitor claimed (`condemned`, which it drops) is efmesh's, as a
    ///   snapshot's, and its kind one efmesh records or `orphan`;
    /// - every ledger row's start and end are instants, the start before the end, its status
    ///   `done` or `failed`, and a `done` row's version has a snapshot (a `failed` row may have
    ///   none: the first batch of a new version that failed before its snapshot was recorded).
    ///
    /// A store imported without them fails later plans, runs or janitor passes.
    fn check_content(&self) -> Result<(), String> {
        use crate::core::interval::parse_instant;
        use std::collections::BTreeSet;
        if self.store_id.trim().is_empty() {
            return Err("the document's `storeId` is empty: every state store has an identity (the janitor tells the storage a store owns by it)".into());
        }
        for (counter, n) in [
            ("generation", self.generation),
            ("claims", self.claims),
            ("engineEpoch", self.engine_epoch),
            ("epochIssued", self.epoch_issued),
            ("duckLakeEpoch", self.ducklake_epoch),
        ] {
            if n < 0 {
                return Err(format!("the document's `{counter}` is {n}: the store's counters start at 0 and only grow"));
            }
        }
        let rows = |t: &str| self.tables.get(t).map(Vec::as_slice).unwrap_or_default();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        for t in TABLES {
            let key = t.key();
            let mut seen: BTreeMap<Vec<String>, usize> = BTreeMap::new();
            for (i, r) in rows(t.name).iter().enumerate() {
                for ((column, col), v) in t.columns.iter().zip(r) {
                    let at = || format!("table `{}` row {} column `{column}` ({})", t.name, i + 1, row_label(t, r));
                    if let Some(n) = v.as_i64().filter(|n| *n < 0) {
                        return Err(format!("{}: {n} is negative (ids, fingerprint versions and generations start at 0 and only grow)", at()));
                    }
                    let Some(s) = v.as_str() else { continue };
                    match col {
                        Instant => {
                            parse_instant(s).map_err(|e| format!("{}: {e}", at()))?;
                        }
                        Json => {
                            serde_json::from_str::<Value>(s).map_err(|e| format!("{}: not JSON: {e}", at()))?;
                        }
                        Int | Text | TextOrNull => {}
                    }
                }
                let values: Vec<String> = key.iter().filter_map(|&c| r.get(c)).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect();
                if let Some(first) = seen.get(&values) {
                    let columns: Vec<String> = key.iter().filter_map(|&c| t.columns.get(c)).map(|(c, _)| format!("`{c}`")).collect();
                    return Err(format!(
                        "table `{}` rows {first} and {} have the same {} ({}): each appears once in a store",
                        t.name,
                        i + 1,
                        columns.join(", "),
                        values.join(" ")
                    ));
                }
                seen.insert(values, i + 1);
            }
        }
        let storage = [crate::core::name::PHYSICAL_SCHEMA, crate::core::target::DUCKLAKE_ALIAS].map(|s| format!("\"{s}\"."));
        let ours = |physical: &str| physical.is_empty() || storage.iter().any(|s| physical.to_ascii_lowercase().starts_with(s));
        // Checked to be JSON above.
        let json = |v: &Value| serde_json::from_str::<Value>(v.as_str().unwrap_or_default()).unwrap_or_default();
        let kinds = crate::script::builder::KIND_TAGS;
        // (name, fingerprint) → the snapshot's kind.
        let mut snapshots = BTreeMap::new();
        for (i, r) in rows("snapshots").iter().enumerate() {
            let at = |column: &str| format!("table `snapshots` row {} column `{column}` ({} {})", i + 1, text(&r[0]), text(&r[1]));
            let kind = text(&r[3]);
            if !kinds.contains(&kind.as_str()) {
                return Err(format!("{}: `{kind}` is not a kind efmesh records (one of {})", at("kind"), kinds.join(", ")));
            }
            let physical = text(&r[4]);
            if !ours(&physical) {
                return Err(format!("{}: `{physical}` is not in efmesh's storage (`{}` or `{}`)", at("physical"), storage[0], storage[1]));
            }
            let metadata = json(&r[7]);
            if let Some(tag) = metadata_kind(&metadata).filter(|t| *t != "?" && *t != kind) {
                return Err(format!("{}: its kind is `{tag}`, column `kind` says `{kind}`: a snapshot's metadata describes its own version", at("metadata")));
            }
            snapshots.insert((text(&r[0]), text(&r[1])), kind);
        }
        // Models an environment pointer says are external (they have no snapshot).
        let mut externals = BTreeSet::new();
        for (i, r) in rows("environments").iter().enumerate() {
            let env = text(&r[0]);
            crate::core::name::validate_env(&env).map_err(|e| format!("table `environments` row {} column `env`: {e}", i + 1))?;
            let (name, fp) = (text(&r[1]), text(&r[2]));
            let metadata = json(&r[4]);
            let kind = metadata_kind(&metadata);
            if kind == Some("external") {
                externals.insert(name.clone());
            }
            if let Some(snapshot_kind) = snapshots.get(&(name.clone(), fp.clone())) {
                if let Some(tag) = kind.filter(|t| *t != "?" && *t != snapshot_kind.as_str()) {
                    return Err(format!(
                        "table `environments` row {} column `metadata` ({env} {name}): its kind is `{tag}`, the snapshot it points to (`{name}` `{fp}`) is `{snapshot_kind}`",
                        i + 1
                    ));
                }
                continue;
            }
            if let Some(kind) = kind.filter(|k| *k != "external") {
                return Err(format!(
                    "table `environments` row {} column `fingerprint` ({env} {name}): no snapshot of `{name}` `{fp}` (table `snapshots`); \
                     only an external model's pointer has none, and its metadata says `{kind}`",
                    i + 1
                ));
            }
        }
        for (i, r) in rows("promotions").iter().enumerate() {
            let env = text(&r[0]);
            let at = |column: &str| format!("table `promotions` row {} column `{column}` ({env})", i + 1);
            crate::core::name::validate_env(&env).map_err(|e| format!("{}: {e}", at("env")))?;
            let pointers = json(&r[1]);
            let pointers = pointers
                .as_object()
                .filter(|o| o.values().all(Value::is_string))
                .ok_or_else(|| format!("{}: not an object of model name → fingerprint (the janitor and the recovery read it as one)", at("pointers")))?;
            if !json(&r[2]).as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                return Err(format!("{}: not an array of statements (the recovery reads it as one)", at("rollback")));
            }
            for (name, fp) in pointers {
                let fp = text(fp);
                // A promotion records a snapshot of every model it points to but an external,
                // which never has one: a model with no snapshot at all, or one a pointer says
                // is external.
                let snapshotted = snapshots.keys().any(|(n, _)| n == name);
                if snapshotted && !externals.contains(name) && !snapshots.contains_key(&(name.clone(), fp.clone())) {
                    return Err(format!(
                        "{}: `{name}` points to `{fp}`, which has no snapshot (table `snapshots`); a promotion under way records only versions \
                         it has a snapshot of, but an external model's (if the store it came from had an interrupted promotion, any \
                         efmesh command there undoes it: export again after one)",
                        at("pointers")
                    ));
                }
            }
        }
        for (i, r) in rows("condemned").iter().enumerate() {
            let at = |column: &str| format!("table `condemned` row {} column `{column}` ({})", i + 1, text(&r[0]));
            let physical = text(&r[0]);
            if !ours(&physical) {
                return Err(format!(
                    "{}: `{physical}` is not in efmesh's storage (`{}` or `{}`): the janitor drops what it claimed",
                    at("physical"),
                    storage[0],
                    storage[1]
                ));
            }
            let kind = text(&r[3]);
            if kind != "orphan" && !kinds.contains(&kind.as_str()) {
                return Err(format!("{}: `{kind}` is neither a kind efmesh records (one of {}) nor `orphan`", at("kind"), kinds.join(", ")));
            }
        }
        for (i, r) in rows("intervals").iter().enumerate() {
            let at = |column: &str| format!("table `intervals` row {} column `{column}` ({} {})", i + 1, text(&r[0]), text(&r[1]));
            let start = parse_instant(&text(&r[2])).map_err(|e| format!("{}: {e}", at("start_ts")))?;
            let end = parse_instant(&text(&r[3])).map_err(|e| format!("{}: {e}", at("end_ts")))?;
            if end <= start {
                return Err(format!("{}: the interval ends at {} before it starts at {}", at("end_ts"), text(&r[3]), text(&r[2])));
            }
            if !matches!(r[4].as_str(), Some("done" | "failed")) {
                return Err(format!("{}: {} is neither `done` nor `failed`", at("status"), r[4]));
            }
            if r[4].as_str() == Some("done") && !snapshots.contains_key(&(text(&r[0]), text(&r[1]))) {
                return Err(format!(
                    "{}: a done interval of a version with no snapshot (table `snapshots` has no `{}` `{}`)",
                    at("fingerprint"),
                    text(&r[0]),
                    text(&r[1])
                ));
            }
        }
        Ok(())
    }
}

/// The kind a snapshot's or pointer's metadata names: its `kind`'s `tag` (`{"kind": {"tag":
/// "full", …}}`, what apply records) or its `kind` when a string; `?` for a `kind` with neither;
/// `None` when it has no `kind` (a pointer the migration to layout 3 gave `{}`).
fn metadata_kind(metadata: &Value) -> Option<&str> {
    metadata.get("kind").map(|k| k.as_str().or_else(|| k.get("tag").and_then(Value::as_str)).unwrap_or("?"))
}

/// A row's key for a message: its primary key's values ([`Table::key`]) but instants (an
/// interval's start is named by its own column), space-separated, text unquoted.
fn row_label(t: &Table, r: &[Value]) -> String {
    t.key()
        .into_iter()
        .filter(|&c| t.columns.get(c).is_some_and(|(_, col)| *col != Instant))
        .filter_map(|c| r.get(c))
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect::<Vec<_>>()
        .join(" ")
}

fn col_name(c: Col) -> &'static str {
    match c {
        Int => "an integer",
        Text | Instant | Json => "a string",
        TextOrNull => "a string or null",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instant, as the stores write them.
    const AT: &str = "2026-01-05T00:00:00.000Z";

    /// 64 hex digits, as fingerprints are.
    fn fp(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn sample() -> StateDump {
        let mut d = StateDump { store_id: "ab".repeat(16), generation: 3, claims: 0, ..StateDump::default() };
        d.tables.insert("plans".into(), vec![vec![json!(1), json!("dev"), json!("{}"), json!("2026-01-01T00:00:00.000Z"), json!("me")]]);
        d.tables.insert("ticks".into(), vec![vec![json!(1), json!("dev"), json!(AT), json!(AT), json!("processed"), json!("{}"), Value::Null]]);
        for t in TABLES {
            d.tables.entry(t.name.to_string()).or_default();
        }
        d
    }

    #[test]
    fn ledger_rows_are_checked_for_what_the_stores_read() {
        let interval =
            |start: &str, end: &str, status: &str| vec![json!("s.m"), json!("fp"), json!(start), json!(end), json!(status), json!("2026-01-05T00:00:00.000Z")];
        let snapshot = |physical: &str, created: &str| {
            vec![json!("s.m"), json!("fp"), json!(1), json!("full"), json!(physical), Value::Null, json!("SELECT 1"), json!("{}"), json!(created)]
        };
        let with = |table: &str, rows: Vec<Vec<Value>>| {
            let mut d = sample();
            // The version the ledger rows are of.
            d.tables.insert("snapshots".into(), vec![snapshot("", "2026-01-05T00:00:00.000Z")]);
            d.tables.insert(table.into(), rows);
            StateDump::from_document(&d.to_document("t"))
        };
        assert!(with("intervals", vec![interval("2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z", "done")]).is_ok());
        let bad = with("intervals", vec![interval("not a time", "2026-01-02T00:00:00.000Z", "done")]).unwrap_err();
        assert!(bad.starts_with("table `intervals` row 1 column `start_ts` (s.m fp)"), "{bad}");
        let bad = with("intervals", vec![interval("2026-01-02T00:00:00.000Z", "2026-01-01T00:00:00.000Z", "done")]).unwrap_err();
        assert!(bad.contains("ends at 2026-01-01T00:00:00.000Z before it starts"), "{bad}");
        assert!(with("intervals", vec![interval("2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z", "maybe")]).unwrap_err().contains("neither"));
        // A snapshot naming storage outside efmesh's (the janitor would claim it), a bad
        // creation time, an environment name efmesh refuses, a promotion that is not JSON.
        let at = "2026-01-05T00:00:00.000Z";
        let mut other = snapshot("", at);
        other[1] = json!("fp2");
        assert!(with("snapshots", vec![snapshot("\"_efmesh\".\"s__m__fp\"", at), other]).is_ok());
        assert!(with("snapshots", vec![snapshot("\"landing\".\"events\"", at)]).unwrap_err().contains("is not in efmesh's storage"));
        assert!(with("snapshots", vec![snapshot("\"_efmesh\".\"s__m__fp\"", "yesterday")]).unwrap_err().contains("column `created_at`"));
        let bad = with("environments", vec![vec![json!("Dev-X; drop"), json!("s.m"), json!("fp"), json!(at), json!("{}")]]).unwrap_err();
        assert!(bad.starts_with("table `environments` row 1 column `env`"), "{bad}");
        let bad = with("promotions", vec![vec![json!("dev"), json!("{"), json!("[]"), json!(at)]]).unwrap_err();
        assert!(bad.contains("column `pointers` (dev): not JSON"), "{bad}");
    }

    #[test]
    fn a_document_reads_back_as_written() {
        let d = sample();
        let doc = d.to_document("2026-01-02T00:00:00.000Z");
        assert_eq!(doc.as_object().unwrap().keys().next().map(String::as_str), Some("apiVersion"));
        assert_eq!(StateDump::from_document(&doc), Ok(d));
    }

    /// Layout 9 only added `meta.engine_epoch`: a document of layout 8 (which has no
    /// `engineEpoch`) is read with epoch 0.
    #[test]
    fn a_layout_8_document_is_read_with_engine_epoch_0() {
        let mut d = sample();
        d.engine_epoch = 5;
        let mut doc = d.to_document("t");
        doc["stateVersion"] = json!(8);
        doc.as_object_mut().unwrap().remove("engineEpoch");
        assert_eq!(StateDump::from_document(&doc), Ok(StateDump { engine_epoch: 0, ..d }));
    }

    /// Layout 10 only added `meta.epoch_issued` and `meta.ducklake_epoch`: a document of layout 9
    /// (which has neither) is read as the migration gives a store, the issued counter at the
    /// engine epoch and the DuckLake epoch 0; a layout-10 document keeps both.
    #[test]
    fn a_layout_9_document_is_read_with_epoch_issued_at_the_engine_epoch_and_ducklake_epoch_0() {
        let mut d = sample();
        (d.engine_epoch, d.epoch_issued, d.ducklake_epoch) = (5, 9, 4);
        let mut doc = d.to_document("t");
        assert_eq!((doc["epochIssued"].as_i64(), doc["duckLakeEpoch"].as_i64()), (Some(9), Some(4)));
        assert_eq!(StateDump::from_document(&doc), Ok(d.clone()));
        doc["stateVersion"] = json!(9);
        doc.as_object_mut().unwrap().remove("epochIssued");
        doc.as_object_mut().unwrap().remove("duckLakeEpoch");
        assert_eq!(StateDump::from_document(&doc), Ok(StateDump { engine_epoch: 5, epoch_issued: 5, ducklake_epoch: 0, ..d }));
    }

    #[test]
    fn newer_older_foreign_and_malformed_documents_are_refused_by_name() {
        let doc = sample().to_document("t");
        let with = |k: &str, v: Value| {
            let mut d = doc.clone();
            d[k] = v;
            StateDump::from_document(&d).unwrap_err()
        };
        assert!(with("stateVersion", json!(STATE_VERSION + 1)).contains("upgrade efmesh"));
        assert!(with("stateVersion", json!(7)).contains("efmesh migrate"));
        assert!(with("epochIssued", json!("7")).contains("no integer `epochIssued`"));
        assert!(with("engineEpoch", json!("7")).contains("no integer `engineEpoch`"));
        assert!(with("apiVersion", json!(2)).contains("newer efmesh"));
        assert!(with("kind", json!("other")).contains("not an efmesh state export"));
        let mut bad = doc.clone();
        bad["tables"]["plans"]["rows"][0][0] = json!("one");
        assert_eq!(StateDump::from_document(&bad).unwrap_err(), "table `plans` row 1 column `id`: \"one\" is not an integer");
        let mut extra = doc.clone();
        extra["tables"]["leases"] = json!({"columns": [], "rows": []});
        assert!(StateDump::from_document(&extra).unwrap_err().contains("`leases`"));
        let mut missing = doc;
        missing["tables"].as_object_mut().unwrap().remove("snapshots");
        assert!(StateDump::from_document(&missing).unwrap_err().contains("no table `snapshots`"));
    }

    /// One row in every table, each naming the others consistently: the pointer and the ledger
    /// row are of the one snapshot.
    fn full() -> StateDump {
        let mut d = sample();
        let (v, physical) = (fp('a'), "\"_efmesh\".\"s__m\"");
        let rows: [(&str, Vec<Value>); 12] = [
            ("snapshots", vec![json!("s.m"), json!(v), json!(1), json!("full"), json!(physical), Value::Null, json!("SELECT 1"), json!("{}"), json!(AT)]),
            ("environments", vec![json!("dev"), json!("s.m"), json!(v), json!(AT), json!(r#"{"kind":{"tag":"full"}}"#)]),
            ("promotions", vec![json!("dev"), json!("{}"), json!("[]"), json!(AT)]),
            ("intervals", vec![json!("s.m"), json!(v), json!("2026-01-01T00:00:00.000Z"), json!("2026-01-02T00:00:00.000Z"), json!("done"), json!(AT)]),
            ("plans", vec![json!(1), json!("dev"), json!("{}"), json!(AT), json!("me")]),
            ("ticks", vec![json!(1), json!("dev"), json!(AT), json!(AT), json!("processed"), json!("{}"), Value::Null]),
            ("released", vec![json!("s.m"), json!(v), json!(AT)]),
            ("condemned", vec![json!("\"_efmesh\".\"old\""), json!("s.m"), json!(fp('0')), json!("full"), json!("{}"), json!(AT)]),
            ("pending_rebuilds", vec![json!("s.m"), json!(v), json!("parents changed"), json!(AT)]),
            ("data_versions", vec![json!("s.m"), json!(v), json!(1), Value::Null, json!(AT)]),
            ("orphans_seen", vec![json!("\"_efmesh\".\"stray\""), json!(AT)]),
            ("audit_passes", vec![json!("s.m"), json!(v), json!("digest"), json!(1), json!(AT)]),
        ];
        for (table, row) in rows {
            d.tables.insert(table.into(), vec![row]);
        }
        d
    }

    /// `full()` with `edit` applied to its document.
    fn refused(edit: impl FnOnce(&mut Value)) -> String {
        let mut doc = full().to_document("t");
        edit(&mut doc);
        StateDump::from_document(&doc).unwrap_err()
    }

    #[test]
    fn every_table_key_names_its_columns() {
        for t in TABLES {
            assert_eq!(t.key().len(), t.order.split(',').count(), "table `{}`: its order {:?} names a column it does not have", t.name, t.order);
        }
    }

    /// Every column declared an instant refuses a value that is no instant (a promotion time of
    /// `2026-13-45` was imported), every JSON column text that is not JSON, naming table, row,
    /// column and the row's key.
    #[test]
    fn every_instant_and_json_column_is_checked() {
        assert_eq!(StateDump::from_document(&full().to_document("t")), Ok(full()));
        let mut checked = 0;
        for t in TABLES {
            for (c, (column, col)) in t.columns.iter().enumerate() {
                let bad = match col {
                    Instant => "2026-13-45",
                    Json => "{not json",
                    Int | Text | TextOrNull => continue,
                };
                let err = refused(|doc| doc["tables"][t.name]["rows"][0][c] = json!(bad));
                let at = format!("table `{}` row 1 column `{column}` (", t.name);
                assert!(err.starts_with(&at), "{err}");
                assert!(err.contains(if *col == Instant { "`2026-13-45` is not a date or timestamp" } else { ": not JSON: " }), "{err}");
                checked += 1;
            }
        }
        assert_eq!(checked, 22, "every instant and JSON column of TABLES");
        let err = refused(|doc| doc["tables"]["environments"]["rows"][0][3] = json!("2026-13-45"));
        assert!(err.starts_with("table `environments` row 1 column `promoted_at` (dev s.m): `2026-13-45`"), "{err}");
        let err = refused(|doc| doc["tables"]["snapshots"]["rows"][0][7] = json!("{not json"));
        assert!(err.starts_with(&format!("table `snapshots` row 1 column `metadata` (s.m {}): not JSON", fp('a'))), "{err}");
    }

    /// A row twice (the store refused it with a raw UNIQUE error, after the checks) is refused
    /// by the table's key, naming both rows.
    #[test]
    fn duplicate_keys_are_refused_naming_the_table_and_both_rows() {
        for t in TABLES {
            let err = refused(|doc| {
                let row = doc["tables"][t.name]["rows"][0].clone();
                doc["tables"][t.name]["rows"].as_array_mut().unwrap().push(row);
            });
            assert!(err.starts_with(&format!("table `{}` rows 1 and 2 have the same ", t.name)), "{err}");
        }
        let err = refused(|doc| {
            let row = doc["tables"]["snapshots"]["rows"][0].clone();
            doc["tables"]["snapshots"]["rows"].as_array_mut().unwrap().push(row);
        });
        assert_eq!(err, format!("table `snapshots` rows 1 and 2 have the same `name`, `fingerprint` (s.m {}): each appears once in a store", fp('a')));
        // Another version of the same model, or another day of its ledger, is another key.
        let mut d = full();
        let mut other = d.tables["snapshots"][0].clone();
        other[1] = json!(fp('b'));
        d.tables.get_mut("snapshots").unwrap().push(other);
        let mut day = d.tables["intervals"][0].clone();
        day[2] = json!("2026-01-02T00:00:00.000Z");
        day[3] = json!("2026-01-03T00:00:00.000Z");
        d.tables.get_mut("intervals").unwrap().push(day);
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
    }

    /// A snapshot kind efmesh never records, a pointer or a done ledger row of a version with
    /// no snapshot (but an external's pointer, which has none), and an empty `storeId` (the
    /// janitor then failed with `meta.store_id is empty`) are refused by name.
    #[test]
    fn kinds_pointers_ledger_rows_and_the_store_id_are_checked() {
        let err = refused(|doc| doc["tables"]["snapshots"]["rows"][0][3] = json!("nonsense"));
        assert!(err.starts_with(&format!("table `snapshots` row 1 column `kind` (s.m {}): `nonsense` is not a kind efmesh records", fp('a'))), "{err}");
        for kind in crate::script::builder::KIND_TAGS {
            let mut d = full();
            d.tables.get_mut("snapshots").unwrap()[0][3] = json!(kind);
            // The pointer's metadata names its snapshot's kind.
            d.tables.get_mut("environments").unwrap()[0][4] = json!(format!(r#"{{"kind":{{"tag":"{kind}"}}}}"#));
            assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d), "kind `{kind}`");
        }
        let dangling = fp('c');
        let err = refused(|doc| doc["tables"]["environments"]["rows"][0][2] = json!(dangling));
        assert!(err.starts_with(&format!("table `environments` row 1 column `fingerprint` (dev s.m): no snapshot of `s.m` `{dangling}`")), "{err}");
        assert!(err.contains("its metadata says `full`"), "{err}");
        // An external's pointer has no snapshot: its metadata says so, or (a pointer the
        // migration to layout 3 gave no metadata) holds no kind.
        for metadata in [r#"{"kind":{"tag":"external","path":"data/e.csv"}}"#, "{}"] {
            let mut d = full();
            d.tables.get_mut("environments").unwrap().push(vec![json!("dev"), json!("raw.e"), json!(dangling), json!(AT), json!(metadata)]);
            assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d), "{metadata}");
        }
        let err = refused(|doc| doc["tables"]["intervals"]["rows"][0][1] = json!(dangling));
        let at = format!("table `intervals` row 1 column `fingerprint` (s.m {dangling}): a done interval of a version with no snapshot");
        assert!(err.starts_with(&at), "{err}");
        // A failed row may have none: a new version's first batch failed before its snapshot.
        let mut d = full();
        d.tables.get_mut("intervals").unwrap()[0][1] = json!(dangling);
        d.tables.get_mut("intervals").unwrap()[0][4] = json!("failed");
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
        for empty in ["", "  "] {
            let err = refused(|doc| doc["storeId"] = json!(empty));
            assert!(err.starts_with("the document's `storeId` is empty"), "{err}");
        }
    }

    /// A snapshot whose metadata names another kind than its `kind` column, and a pointer whose
    /// metadata names another kind than its snapshot's (the kind is in the fingerprint), are
    /// refused naming the table, row, column and key.
    #[test]
    fn a_kind_its_metadata_contradicts_is_refused() {
        let err = refused(|doc| doc["tables"]["snapshots"]["rows"][0][7] = json!(r#"{"kind":{"tag":"view"}}"#));
        let at = format!("table `snapshots` row 1 column `metadata` (s.m {}): its kind is `view`, column `kind` says `full`", fp('a'));
        assert!(err.starts_with(&at), "{err}");
        let err = refused(|doc| doc["tables"]["environments"]["rows"][0][4] = json!(r#"{"kind":{"tag":"view"}}"#));
        let at =
            format!("table `environments` row 1 column `metadata` (dev s.m): its kind is `view`, the snapshot it points to (`s.m` `{}`) is `full`", fp('a'));
        assert!(err.starts_with(&at), "{err}");
        // Metadata naming the same kind, or none (a store of an older layout), is accepted.
        let mut d = full();
        d.tables.get_mut("snapshots").unwrap()[0][7] = json!(r#"{"kind":{"tag":"full","target":"parquet"}}"#);
        d.tables.get_mut("environments").unwrap()[0][4] = json!("{}");
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
    }

    /// A promotion under way pointing to a version with no snapshot (but an external's), of an
    /// environment name efmesh refuses, or whose pointers or undo are not what the janitor and
    /// the recovery read, is refused naming the row and column.
    #[test]
    fn a_promotion_to_a_version_with_no_snapshot_or_of_another_shape_is_refused() {
        let dangling = fp('c');
        let err = refused(|doc| doc["tables"]["promotions"]["rows"][0][1] = json!(format!(r#"{{"s.m":"{dangling}"}}"#)));
        let at = format!("table `promotions` row 1 column `pointers` (dev): `s.m` points to `{dangling}`, which has no snapshot");
        assert!(err.starts_with(&at), "{err}");
        for (c, bad, wanted) in [
            (1_usize, "[]", "pointers` (dev): not an object"),
            (1, r#"{"s.m":1}"#, "pointers` (dev): not an object"),
            (2, "{}", "rollback` (dev): not an array"),
            (2, "[1]", "rollback` (dev): not an array"),
        ] {
            let err = refused(|doc| doc["tables"]["promotions"]["rows"][0][c] = json!(bad));
            assert!(err.starts_with(&format!("table `promotions` row 1 column `{wanted}")), "{bad}: {err}");
        }
        let err = refused(|doc| doc["tables"]["promotions"]["rows"][0][0] = json!("Dev-X"));
        assert!(err.starts_with("table `promotions` row 1 column `env` (Dev-X): "), "{err}");
        // Its snapshot's version, and an external's: a model with no snapshot at all ...
        let mut d = full();
        d.tables.get_mut("promotions").unwrap()[0][1] = json!(format!(r#"{{"raw.e":"{dangling}","s.m":"{}"}}"#, fp('a')));
        d.tables.get_mut("promotions").unwrap()[0][2] = json!(r#"["CREATE OR REPLACE VIEW v AS SELECT 1"]"#);
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
        // ... or one a pointer says is external now (it had a snapshot as another kind).
        let mut d = full();
        d.tables.get_mut("environments").unwrap()[0][2] = json!(dangling);
        d.tables.get_mut("environments").unwrap()[0][4] = json!(r#"{"kind":{"tag":"external","table":"raw.events"}}"#);
        d.tables.get_mut("promotions").unwrap()[0][1] = json!(format!(r#"{{"s.m":"{}"}}"#, fp('d')));
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
    }

    /// A negative `generation`, `claims`, `engineEpoch`, `epochIssued` or `duckLakeEpoch`, and a
    /// negative value of any integer
    /// column (ids, fingerprint versions, generations), are refused by name.
    #[test]
    fn negative_counters_ids_and_generations_are_refused() {
        for counter in ["generation", "claims", "engineEpoch", "epochIssued", "duckLakeEpoch"] {
            let err = refused(|doc| doc[counter] = json!(-1));
            assert_eq!(err, format!("the document's `{counter}` is -1: the store's counters start at 0 and only grow"));
        }
        let mut checked = 0;
        for t in TABLES {
            for (c, (column, col)) in t.columns.iter().enumerate() {
                if *col != Int {
                    continue;
                }
                let err = refused(|doc| doc["tables"][t.name]["rows"][0][c] = json!(-1));
                assert!(err.starts_with(&format!("table `{}` row 1 column `{column}` (", t.name)) && err.contains("): -1 is negative"), "{err}");
                checked += 1;
            }
        }
        assert_eq!(checked, 5, "every integer column of TABLES");
        // 0 is a count like any other.
        let mut d = full();
        (d.generation, d.claims, d.engine_epoch) = (0, 0, 0);
        d.tables.get_mut("data_versions").unwrap()[0][2] = json!(0);
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
    }

    /// A claim of storage outside efmesh's (the janitor drops what it claimed) or of a kind
    /// efmesh never records is refused by name; an orphan's claim is accepted.
    #[test]
    fn claimed_storage_outside_efmeshs_or_of_an_unknown_kind_is_refused() {
        let err = refused(|doc| doc["tables"]["condemned"]["rows"][0][0] = json!(r#""landing"."events""#));
        assert!(err.starts_with(r#"table `condemned` row 1 column `physical` ("landing"."events"): `"landing"."events"` is not in efmesh's storage"#), "{err}");
        let err = refused(|doc| doc["tables"]["condemned"]["rows"][0][3] = json!("nonsense"));
        assert!(err.starts_with(r#"table `condemned` row 1 column `kind` ("_efmesh"."old"): `nonsense` is neither a kind efmesh records"#), "{err}");
        let mut d = full();
        d.tables.get_mut("condemned").unwrap()[0][3] = json!("orphan");
        assert_eq!(StateDump::from_document(&d.to_document("t")), Ok(d));
    }
}
