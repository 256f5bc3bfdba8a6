//! The parquet lake target (`target = "parquet"`): model versions stored as parquet files in a
//! local directory or under `s3://bucket/prefix` (`[lake] path`), read through a view.
//!
//! Layout, per version (the directory of the version that owns the physical relation; versions
//! that inherit storage, by indirect reuse or forward-only, write into it too):
//!
//! ```text
//! <lake>/<schema>__<table>/<fingerprint>/
//!     data.parquet                 full models: the whole version
//!     2026-01-01.parquet           time-range models, grain day: one file per interval
//!     2026-01-01T05.parquet        time-range models, grain hour
//!     manifest.json                files, intervals, schema, model, fingerprint
//! ```
//!
//! The version's physical relation `"_efmesh"."<schema>__<table>__<fp>"` is a view:
//!
//! ```sql
//! SELECT * FROM (<declared columns as typed NULLs> LIMIT 0)
//! UNION ALL BY NAME
//! SELECT * FROM read_parquet([<every file>], union_by_name = true, hive_partitioning = false)
//! ```
//!
//! The typed empty relation anchors the declared columns (in declared order) even before any
//! file exists or when older files lack a column a forward-only version added. It declares the
//! columns of every version stored in the relation, not only those of the version re-listing it
//! (`view_columns`): an environment still serving the version a forward-only change kept re-lists
//! the view it shares with `prod`'s (a parent's change reused, the project moved, the DuckDB file
//! lost), and `prod`'s view of it selects the added columns. The file list is explicit (no glob
//! at query time), and hive detection is off, so path segments never become columns. The list
//! comes from the ledger and the previous manifest, never from a directory
//! listing: one file per interval done for a version stored in the relation (plus the batch just
//! written), and the files the previous manifest listed that remain (intervals not done now keep
//! their old rows, as a table's do, while their file exists), so a file left in the directory by
//! hand is never served. One listing of the directory (on S3, of the version's prefix) at each
//! re-list says which files exist: a done interval whose file is missing, or a full version
//! without `data.parquet`, is refused before the view is re-created, naming the file (locally the
//! plan's integrity check schedules its recompute, `repair.lakeFilesMissing`; S3 is not listed
//! while planning, and the error's hint restates the interval, whose file is then dropped from
//! the list and recomputed by the next run). A done interval outside the model's `start`/`end`
//! (done under wider bounds) is never recomputed: locally the plan's repair forgets it (clears it
//! from the ledger) when its file is missing; on S3 the re-list does, with a warning.
//!
//! Only the process that writes re-creates the view, in its own DuckDB file: an older copy of that
//! file restored after a run wrote more intervals (writes to the lake alone raise no engine epoch),
//! or another DuckDB file sharing the lake and the state store, holds a view listing fewer files
//! than the ledger says are done. The plan's integrity check reads the list back from the view's
//! definition in the engine catalog ([`crate::core::target::lake_view_files`]) and compares it with the ledger (and, for a
//! file of an interval not done, with the local manifest; on a local lake also with the
//! directory, so a kept file deleted by hand — which fails every query of the view — is found):
//! such a view is re-listed by `apply` (`repair.lakeViewStale`, [`refresh`]), and `status
//! --check` and `run` refuse it until then.
//!
//! Writes never expose a partial file, and an interval is marked done only after its file is
//! complete: locally each file is written to `<name>.tmp` and renamed over the final name (an
//! atomic replace on POSIX filesystems); on S3 the final key is written directly (an object
//! appears only when its upload completes). For each time-range batch: the query runs once into
//! a temporary table, one file is written per grain interval (an interval without rows still gets
//! its file, so every done interval has exactly one), then the view and the manifest are
//! refreshed, and only then are the intervals marked done. A crash at any point leaves at most
//! complete files of intervals that are not done; the next apply rewrites them. Re-creating the
//! view binds every file it lists, so a backfill of many small batches publishes it for a group
//! of batches at a time (see [`build`]): when the batches since the last publish took nine times
//! as long as it did, and after the last batch or a failed one.
//!
//! Files hold each column cast to its declared type. A value the cast would change (rounded, cut,
//! a time column's value moved past its interval's end) is refused before anything is written,
//! as the table target refuses a value its stored type would change
//! (`check_declared_types_hold`).

use super::resolve::{ExecResolver, typed_empty, typed_empty_of};
use super::{ApplyError, ApplyReport};
use crate::core::interval::{self, Grain, Interval, Millis};
use crate::core::name::{quote_ident, quote_literal};
use crate::core::{Column, Kind, Model, Target};
use crate::engine::Engine;
use crate::plan::Action;
use crate::project::Project;
use crate::state::{IntervalStatus, SnapshotRecord, StateStore};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;

/// Version of the `manifest.json` layout.
pub const MANIFEST_VERSION: u32 = 1;

/// File name of a version's manifest.
pub const MANIFEST: &str = "manifest.json";

/// File name of a full model's data.
pub const FULL_FILE: &str = "data.parquet";

/// Name of the DuckDB secret created for an `s3://` lake (temporary: never persisted).
pub const S3_SECRET: &str = "_efmesh_lake";

/// The directory (local path or `s3://` URL) holding one version's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionDir {
    /// `<lake>/<schema>__<table>/<fingerprint>`, without a trailing `/`.
    pub url: String,
    /// True for `s3://` lakes.
    pub s3: bool,
    /// The fingerprint of the version owning the directory.
    pub fingerprint: String,
}

impl VersionDir {
    /// The directory of the physical relation `physical` (`"_efmesh"."<s>__<t>__<fp>"`) under
    /// the lake root `root` (as [`crate::config::Config::lake_root`] gives it).
    pub fn of(root: &str, physical: &str) -> Option<Self> {
        let table = physical.rsplit("\".\"").next()?.trim_matches('"');
        let (model, fp) = table.rsplit_once("__")?;
        Some(Self { url: format!("{root}/{model}/{fp}"), s3: root.starts_with("s3://"), fingerprint: fp.to_string() })
    }

    /// The full path or URL of `name` in this directory.
    pub fn file(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }
}

/// The file name of the grain interval starting at `start`
/// ([`crate::plan::integrity::lake_interval_file`]).
pub fn interval_file(start: Millis, grain: Grain) -> String {
    crate::plan::integrity::lake_interval_file(start, grain)
}

/// The interval a file written by [`interval_file`] holds, if `name` is one.
pub fn file_interval(name: &str, grain: Grain) -> Option<Interval> {
    let stem = name.strip_suffix(".parquet")?;
    let text = match (grain, stem.len()) {
        (Grain::Day | Grain::Week, 10) => stem.to_string(),
        (Grain::Hour, 13) => format!("{stem}:00:00Z"),
        (Grain::FiveMinute | Grain::QuarterHour, 16) => format!("{}:{}:00Z", stem.get(..13)?, stem.get(14..)?),
        (Grain::Month, 7) => format!("{stem}-01"),
        _ => return None,
    };
    let start = interval::parse_instant(&text).ok()?;
    // Only a file named by an aligned start (a week's Monday, a quarter's :00/:15/:30/:45).
    (grain.floor(start) == start && interval_file(start, grain) == name).then(|| Interval::new(start, grain.next(start)))
}

/// One file of a version, as the manifest lists it.
#[derive(Debug, Clone, Serialize)]
struct ManifestInterval {
    start: String,
    end: String,
    file: String,
}

/// One declared column, as the manifest lists it.
#[derive(Debug, Clone, Serialize)]
struct ManifestColumn {
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

/// `manifest.json`: what outside readers need to use a version without efmesh.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    manifest_version: u32,
    model: String,
    fingerprint: String,
    kind: String,
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_column: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grain: Option<&'static str>,
    schema: Vec<ManifestColumn>,
    files: Vec<String>,
    intervals: Vec<ManifestInterval>,
    generated_at: String,
}

/// Makes the engine ready for an `s3://` lake when the project has parquet models: loads
/// `httpfs` and creates a temporary S3 secret from the environment variables named in
/// `[lake]`. The secret's values are never logged nor stored.
///
/// # Errors
/// [`ApplyError::Target`] naming a missing environment variable, a missing extension (with a
/// hint to provision it), or the engine's refusal (values redacted).
pub fn prepare(project: &Project, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    if !project.dag.models().any(|m| m.target == Target::Parquet) {
        return Ok(());
    }
    let Some(lake) = project.config.lake.as_ref() else {
        return Err(target_error(None, None, "models with `target = \"parquet\"` need a `[lake]` section in efmesh.toml".into()));
    };
    if !lake.is_s3() {
        return Ok(());
    }
    engine
        .load_extension("httpfs")
        .map_err(|e| target_error(None, None, crate::engine::extension_needed(&format!("the S3 lake `{}`", lake.path), "httpfs", &e)))?;
    create_s3_secret(engine, S3_SECRET, &lake.path, &lake.s3(), "the S3 lake").map_err(|message| target_error(None, None, message))
}

/// Creates (replaces) the session's temporary S3 secret `name` for the bucket of `location`
/// (`s3://bucket/…`) from `s3`'s settings and the environment variables it names; `what` names
/// the location in messages (`the S3 lake`). The values are never logged nor shown.
///
/// # Errors
/// A message naming an unset variable, or the engine's refusal (values redacted).
pub fn create_s3_secret(engine: &mut dyn Engine, name: &str, location: &str, s3: &crate::config::S3Settings, what: &str) -> Result<(), String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let key_id = var(&s3.access_key_id_env)
        .ok_or_else(|| format!("{what} `{location}` needs an access key id in the environment variable `{}`, which is not set", s3.access_key_id_env))?;
    let secret = var(&s3.secret_access_key_env)
        .ok_or_else(|| format!("{what} `{location}` needs a secret access key in the environment variable `{}`, which is not set", s3.secret_access_key_env))?;
    let token = var(&s3.session_token_env);
    let bucket = location.trim_start_matches("s3://").split('/').next().unwrap_or_default();
    let mut options = vec![
        "TYPE s3".to_string(),
        format!("KEY_ID {}", quote_literal(&key_id)),
        format!("SECRET {}", quote_literal(&secret)),
        format!("REGION {}", quote_literal(s3.region.as_deref().unwrap_or("us-east-1"))),
    ];
    if let Some(t) = &token {
        options.push(format!("SESSION_TOKEN {}", quote_literal(t)));
    }
    if let Some(e) = &s3.endpoint {
        options.push(format!("ENDPOINT {}", quote_literal(e)));
    }
    if let Some(s) = &s3.url_style {
        options.push(format!("URL_STYLE {}", quote_literal(s)));
    }
    if let Some(ssl) = s3.use_ssl {
        options.push(format!("USE_SSL {ssl}"));
    }
    options.push(format!("SCOPE {}", quote_literal(&format!("s3://{bucket}"))));
    let sql = format!("CREATE OR REPLACE TEMPORARY SECRET {} ({})", quote_ident(name), options.join(", "));
    engine.execute_secret(&format!("CREATE SECRET for {what}"), &sql).map_err(|e| {
        let mut message = e.message;
        for v in [Some(&key_id), Some(&secret), token.as_ref()].into_iter().flatten() {
            message = message.replace(v.as_str(), "<redacted>");
        }
        format!("cannot create the S3 secret for {what} `{location}`: {message}")
    })
}

/// Builds one action of a parquet model: writes its files, refreshes its view and manifest,
/// records the snapshot (with its new data generation and `built_from`, for `full` models) and
/// marks intervals done, in that order.
///
/// # Errors
/// [`ApplyError::Build`] for engine failures, [`ApplyError::Target`] for filesystem failures;
/// the failing batch's intervals are marked failed, never done.
#[allow(clippy::too_many_arguments)] // one call site, in `apply::execute`, passing its own state
pub fn build(
    project: &Project,
    model: &Model,
    action: &Action,
    exec: &ExecResolver<'_>,
    snapshot: &SnapshotRecord,
    built_from: Option<&str>,
    sharers: &[(String, String, String)],
    state: &dyn StateStore,
    engine: &mut dyn Engine,
    report: &mut ApplyReport,
) -> Result<(), ApplyError> {
    let physical = action.physical.clone().unwrap_or_default();
    let dir = version_dir(project, model, &physical)?;
    let body = model.body.as_ref().expect("materialised models have a body");
    // Each column cast to its declared type, as a table target's insert into a table storing
    // another type does: the file holds the declared types (a `sum()` declared `bigint` is not
    // written as a wider type). A value the cast would change is refused first, as the table
    // target refuses it ([`check_declared_types_hold`]).
    let cols: Vec<String> = model.schema.0.iter().map(|c| format!("CAST({q} AS {}) AS {q}", c.ty, q = quote_ident(&c.name))).collect();
    let cols = cols.join(", ");
    let batches = model.kind.time_range().map(|t| interval::batches(&action.backfill, t.grain, t.batch_size));
    check_declared_types_hold(model, body, batches.as_deref(), exec, engine)?;
    make_dir(model, &dir, None)?;
    match &model.kind {
        Kind::IncrementalByTimeRange(t) => {
            // The view exists (typed, possibly empty) before the snapshot that announces it. The
            // files it lists, kept for the batches: each adds its own (no other process writes
            // the version meanwhile).
            let relisted = std::time::Instant::now();
            let (listed, columns) = relist(project, model, &physical, Some(&snapshot.fingerprint), state, engine)?;
            let mut listed: BTreeSet<String> = listed.into_iter().collect();
            // Every publish anchors the columns the re-list did (those of every version stored
            // here: [`view_columns`]).
            let view = (&dir, columns.as_slice());
            let mut publish_cost = relisted.elapsed();
            state.put_snapshot(snapshot)?;
            // Before any batch reads its inputs: a restatement committed from here on makes the
            // batches' done records refused (SPEC §4 invariant 33; [`super::record_done`]).
            let mut seen = super::data_generation(state, &snapshot.name, &snapshot.fingerprint)?;
            let tc = quote_ident(&t.time_column);
            let batches = batches.unwrap_or_default();
            let n = batches.len();
            // Intervals whose files are written but not yet listed by the view, hence not done.
            let mut pending: Vec<Interval> = Vec::new();
            let mut since_publish = std::time::Instant::now();
            for (i, batch) in batches.into_iter().enumerate() {
                tracing::info!(model = %model.name, interval = %batch, batch = i + 1, batches = n, "lake batch");
                let pieces = batch.split(t.grain);
                if let Err(err) = write_batch(model, &dir, exec, body, &cols, &tc, batch, &pieces, engine) {
                    let _ = engine.execute("DROP TABLE IF EXISTS temp._efmesh_lake_batch");
                    // The batches before this one are complete: they are published and done, as
                    // they would have been one by one; this batch's intervals are failed. The
                    // batch's own error is the one reported; what goes wrong while keeping the
                    // earlier batches is a warning (they are then not done, and the next apply
                    // rewrites them).
                    if !pending.is_empty() {
                        let count = pending.len();
                        let published = publish_pending(project, model, &physical, view, &listed, &mut pending, snapshot, (state, &mut seen), engine, report);
                        if let Err(e) = published {
                            tracing::warn!(model = %model.name, intervals = count, error = %e, "the batches written before the failed one could not be listed and marked done: the next apply rewrites them")
                        }
                    }
                    let _ = state.mark_intervals(&snapshot.name, &snapshot.fingerprint, &pieces, IntervalStatus::Failed, interval::now_millis());
                    return Err(err);
                }
                listed.extend(pieces.iter().map(|p| interval_file(p.start, t.grain)));
                pending.extend(pieces);
                // Re-creating the view binds every file it lists, so publishing after each batch
                // costs time proportional to the files squared (a `5m` model over a month: 8640
                // files). The view is published when the batches written since the last publish
                // took at least nine times as long as that publish (so publishing stays under a
                // tenth of the build), and after the last batch. No batch reads the view: a lake
                // model cannot read itself (`@this` is a load error with a `parquet` target).
                // Intervals are marked done only once the view lists their files; a crash in
                // between leaves complete files of intervals that are not done, rewritten by the
                // next apply.
                let last = i + 1 == n;
                if last || since_publish.elapsed() >= publish_cost * 9 {
                    publish_cost = publish_pending(project, model, &physical, view, &listed, &mut pending, snapshot, (state, &mut seen), engine, report)?;
                    since_publish = std::time::Instant::now();
                }
            }
        }
        _ => {
            let sql = body.render(&exec.with_bounds(None));
            let query = format!("SELECT {cols} FROM (\n{sql}\n) AS _efmesh_q");
            write_file(model, &dir, FULL_FILE, &query, None, engine)?;
            relist(project, model, &physical, None, state, engine)?;
            state.record_build(snapshot, built_from, sharers, interval::now_millis())?;
        }
    }
    Ok(())
}

/// Refuses, before anything is written, a column the query returns in another type than the
/// model declares (the type its files store: each column is cast to it) when the cast would
/// change a value written — round or cut it (`0.5` declared `integer` is served as `0`), or move
/// a time column's value past its interval's end (`23:59:59.6` declared `timestamp_s` becomes the
/// next midnight: the batch filters the value the query returns, each interval's file is cut by
/// the cast one, so the row would be served in the next interval's file, or in none, the
/// intervals marked done all the same). The table target refuses a value its stored type would
/// change the same way ([`super::check_batches_fit`]). `batches`: a time-range model's, checked
/// each on its own rows (none: nothing to check); `None` for a `full` model, checked whole. One
/// description of the query and of the declared types; then, only when there is such a column,
/// one query per batch counting every such column's changed values (the model's query scanned
/// once, [`super::contract::first_changed`]).
///
/// # Errors
/// [`ApplyError::Rejected`] naming the column, both types, the batch and an example; a query
/// fails.
fn check_declared_types_hold(
    model: &Model,
    body: &crate::core::Fragment,
    batches: Option<&[Interval]>,
    exec: &ExecResolver<'_>,
    engine: &mut dyn Engine,
) -> Result<(), ApplyError> {
    let first = match batches {
        Some([]) => return Ok(()),
        Some(b) => b.first().copied(),
        None => None,
    };
    let sql = body.render(&exec.with_bounds(first));
    let declared = format!("SELECT * FROM {}", typed_empty(model));
    // The declared types as the engine names them (`int` is `INTEGER`), as it names the query's.
    let mut described = engine.describe_many(&[sql.clone(), declared]).into_iter();
    let (Some(returned), Some(declared)) = (described.next(), described.next()) else { return Ok(()) };
    let returned = returned.map_err(|e| ApplyError::build(model, first, e))?;
    let declared = declared.map_err(|e| ApplyError::build(model, first, e))?;
    let lossy = super::contract::lossy_columns(&returned, &declared);
    if lossy.is_empty() {
        return Ok(());
    }
    match (model.kind.time_range(), batches) {
        (Some(t), Some(batches)) => super::check_batches_fit(model, t, body, batches, exec, &lossy, super::Holder::Lake, engine),
        _ => super::check_rows_fit(model, &sql, &lossy, super::Holder::Lake, engine),
    }
}

/// Publishes the view in `dir` over `listed` (the files of every batch written so far), anchored
/// on `columns` (those [`relist`] found: every version stored there needs them), and marks the
/// `pending` intervals (written since the last publish, emptied) done, counting them in
/// `report`; returns how long the publish took. The record is refused, leaving them not done
/// (their files listed, as a restated interval's kept file is, rewritten by the next run), when
/// the version's data generation moved from `seen` (a restatement committed meanwhile:
/// [`super::record_done`], which warns and reports them). When the publish or the record fails
/// they are marked failed (their complete files are rewritten by the next apply) and the error
/// is returned.
#[allow(clippy::too_many_arguments)] // `build`'s own state, from its two publishing points
fn publish_pending(
    project: &Project,
    model: &Model,
    physical: &str,
    (dir, columns): (&VersionDir, &[Column]),
    listed: &BTreeSet<String>,
    pending: &mut Vec<Interval>,
    snapshot: &SnapshotRecord,
    (state, seen): (&dyn StateStore, &mut i64),
    engine: &mut dyn Engine,
    report: &mut ApplyReport,
) -> Result<std::time::Duration, ApplyError> {
    let done = std::mem::take(pending);
    let started = std::time::Instant::now();
    let published = publish(project, model, physical, (dir, columns), &listed.iter().cloned().collect::<Vec<_>>(), engine);
    let took = started.elapsed();
    let kept = match published {
        Ok(()) => super::record_done(state, &model.name, snapshot, &done, seen, report).map_err(ApplyError::from),
        Err(e) => Err(e),
    };
    match kept {
        Ok(recorded) => {
            if recorded {
                report.computed(&model.name, done.len());
            }
            Ok(took)
        }
        Err(e) => {
            let _ = state.mark_intervals(&snapshot.name, &snapshot.fingerprint, &done, IntervalStatus::Failed, interval::now_millis());
            Err(e)
        }
    }
}

/// One time-range batch: the query once into a temporary table, one file per grain interval
/// (`pieces`). The caller publishes the view listing them, then marks the intervals done.
#[allow(clippy::too_many_arguments)]
fn write_batch(
    model: &Model,
    dir: &VersionDir,
    exec: &ExecResolver<'_>,
    body: &crate::core::Fragment,
    cols: &str,
    tc: &str,
    batch: Interval,
    pieces: &[Interval],
    engine: &mut dyn Engine,
) -> Result<(), ApplyError> {
    let t = model.kind.time_range().ok_or_else(|| ApplyError::build(model, Some(batch), crate::engine::EngineError::new("", "not a time-range model")))?;
    let grain = t.grain;
    let (s, e) = super::batch::time_column_bounds(model, t, batch);
    let sql = body.render(&exec.with_bounds(Some(batch)));
    let fill = format!("CREATE OR REPLACE TEMP TABLE _efmesh_lake_batch AS\nSELECT {cols} FROM (\n{sql}\n) AS _efmesh_q\nWHERE {tc} >= {s} AND {tc} < {e}");
    engine.execute(&fill).map_err(|e| ApplyError::build(model, Some(batch), e))?;
    for piece in pieces {
        let (ps, pe) = super::batch::time_column_bounds(model, t, *piece);
        let query = format!("SELECT * FROM temp._efmesh_lake_batch WHERE {tc} >= {ps} AND {tc} < {pe}");
        write_file(model, dir, &interval_file(piece.start, grain), &query, Some(*piece), engine)?;
    }
    engine.execute("DROP TABLE IF EXISTS temp._efmesh_lake_batch").map_err(|e| ApplyError::build(model, Some(batch), e))
}

/// Writes `query`'s rows to `name` in `dir` so that the final name only ever holds a complete
/// file: locally through `<name>.tmp` and a rename, on S3 directly (uploads are atomic).
fn write_file(model: &Model, dir: &VersionDir, name: &str, query: &str, interval: Option<Interval>, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    let target = dir.file(name);
    let written = if dir.s3 { target.clone() } else { format!("{target}.tmp") };
    let copy = format!("COPY (\n{query}\n) TO {} (FORMAT parquet)", quote_literal(&written));
    engine.execute(&copy).map_err(|e| ApplyError::build(model, interval, e))?;
    if !dir.s3 {
        fs_err::rename(&written, &target).map_err(|e| target_error(Some(model), interval, e.to_string()))?;
    }
    Ok(())
}

/// Re-creates the version's view over the files its ledger says are done (and those its
/// previous manifest listed that remain, [`relist`]) and rewrites its manifest. Used when a lost
/// view is re-created, when a version inherits the storage (indirect reuse; a forward-only
/// version adds declared columns), when a view created under another project root is
/// re-created, and when the plan finds the view stale. `model` is the acting environment's
/// version; the view anchors the columns of every version stored in `physical`
/// ([`view_columns`]), never only `model`'s: another environment may serve a forward-only
/// version with more.
///
/// # Errors
/// [`ApplyError`] when the state cannot be read, the directory (S3 prefix) cannot be listed, a
/// done interval's file or a full version's `data.parquet` is missing (nothing is changed then),
/// or the view or manifest cannot be written.
pub fn refresh(project: &Project, model: &Model, physical: &str, state: &dyn StateStore, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    relist(project, model, physical, None, state, engine).map(drop)
}

/// Takes back the files of `intervals` (grain intervals on `grain`) from the version directory
/// of `physical`, then re-lists its view ([`refresh`]): what an apply that fails wrote there for
/// a version no environment serves, the directory being another version's too (a forward-only
/// change keeps it; [`super::inherited::take_back`], which clears those intervals from every
/// ledger first). A view re-lists a file no ledger calls done while the file exists (a table
/// keeps a row of an interval not done, invariant 15): deleted, it is no longer listed. A file
/// that is not there is skipped (never written, or taken back already).
///
/// # Errors
/// [`ApplyError::Target`] naming the model, the interval and why its file could not be deleted
/// (the files before it are deleted; the view is not re-listed); [`refresh`]'s.
pub fn take_back(
    project: &Project,
    model: &Model,
    physical: &str,
    grain: Grain,
    intervals: &[Interval],
    state: &dyn StateStore,
    engine: &mut dyn Engine,
) -> Result<(), ApplyError> {
    let dir = version_dir(project, model, physical)?;
    let s3 = if dir.s3 { crate::ownership::s3_lake(&project.config).map_err(|e| target_error(Some(model), None, e))? } else { None };
    for &i in intervals {
        let url = dir.file(&interval_file(i.start, grain));
        let deleted = match (&s3, dir.s3) {
            (Some(s3), _) => s3.key_of_url(&url).and_then(|key| s3.delete(&key)),
            (None, true) => Err("an S3 lake directory, but no S3 lake is configured".to_string()),
            (None, false) => match fs_err::remove_file(&url) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
                _ => Ok(()),
            },
        };
        deleted.map_err(|e| target_error(Some(model), Some(i), format!("cannot delete the lake file `{url}`: {e}")))?;
    }
    refresh(project, model, physical, state, engine)
}

/// The columns the view of `physical` anchors (its typed empty relation, [`publish`]): `model`'s
/// own (declared, in order), then each column another version stored there declares that
/// `model` lacks, with the type the newest version declaring it records (a snapshot written by
/// an apply that failed before serving it may declare an older type). Versions
/// sharing a relation differ in their columns only by what forward-only versions added (a
/// forward-only version never drops nor retypes one), so this is every column an environment
/// served by the relation selects: re-listed from an older definition (an environment still
/// serving the version a forward-only change kept, reusing it for a parent's change, moving the
/// project, losing the DuckDB file), the view keeps the columns of the newer one — as a table
/// keeps a column `ALTER TABLE … ADD COLUMN` added — and `prod`'s view of it still binds.
fn view_columns(model: &Model, physical: &str, state: &dyn StateStore) -> Result<Vec<Column>, ApplyError> {
    let mut columns = model.relation_columns();
    let name = model.name.to_string();
    let mut others = Vec::new();
    for fp in stored_versions(model, physical, state)? {
        others.extend(state.snapshot(&name, &fp)?);
    }
    others.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    for record in &others {
        for column in declared_columns(&record.metadata) {
            if !columns.iter().any(|c| c.name.eq_ignore_ascii_case(&column.name)) {
                columns.push(column);
            }
        }
    }
    Ok(columns)
}

/// The columns a version of `model` stored in `physical` and served by some environment declares
/// that `model` lacks (names, as declared): what a relation rebuilt from `model` alone would
/// lose for that environment (a forward-only version adding columns).
///
/// # Errors
/// The state store's reads.
pub(crate) fn served_columns_lacking(model: &Model, physical: &str, state: &dyn StateStore) -> Result<Vec<String>, ApplyError> {
    let name = model.name.to_string();
    let mut served = BTreeSet::new();
    for env in state.environments()? {
        if let Some(fp) = state.env_pointers(&env)?.remove(&name) {
            served.insert(fp);
        }
    }
    let own = model.relation_columns();
    let mut lacking: Vec<String> = Vec::new();
    for fp in stored_versions(model, physical, state)?.into_iter().filter(|fp| served.contains(fp)) {
        for column in state.snapshot(&name, &fp)?.map(|r| declared_columns(&r.metadata)).unwrap_or_default() {
            let known = |n: &String| n.eq_ignore_ascii_case(&column.name);
            if !own.iter().any(|o| known(&o.name)) && !lacking.iter().any(known) {
                lacking.push(column.name);
            }
        }
    }
    Ok(lacking)
}

/// The columns a snapshot's metadata declares (`schema`: `[[name, type(, "exact")]…]`,
/// [`crate::plan::metadata_text`]); none when it records no schema.
fn declared_columns(metadata: &serde_json::Value) -> Vec<Column> {
    let entries = metadata["schema"].as_array().map(Vec::as_slice).unwrap_or_default();
    entries.iter().filter_map(|e| Some(Column { name: e.get(0)?.as_str()?.to_string(), ty: e.get(1)?.as_str()?.to_string() })).collect()
}

/// The fingerprints of every version of `model` stored in `physical` (its own, those inheriting
/// its storage): the ledgers whose done intervals have their files in its directory.
fn stored_versions(model: &Model, physical: &str, state: &dyn StateStore) -> Result<Vec<String>, ApplyError> {
    let name = model.name.to_string();
    let mut fps: Vec<String> = state.snapshot_index()?.into_iter().filter(|((n, _), (p, _))| *n == name && p == physical).map(|((_, fp), _)| fp).collect();
    if let Some(dir) = VersionDir::of("", physical) {
        fps.push(dir.fingerprint);
    }
    fps.sort();
    fps.dedup();
    Ok(fps)
}

/// The view and manifest of the version in `physical` (re-)created, listing one file per
/// interval done in the ledger of a version stored there (or of `building`, the version a build
/// is about to record), and the files the previous manifest listed that are still there
/// (intervals not done now keep their old rows, as a table's do) — never what a directory listing
/// finds, so a stray file is never served; or `data.parquet` for a full model. One listing of
/// the version's directory (or S3 prefix) says which files exist: a done interval (or a full
/// version) whose file is missing is refused before the view is touched, so a view never lists
/// fewer files than the ledger says are done, nor an object that is gone. The view anchors the
/// columns of every version stored there ([`view_columns`]). Returns the files listed and those
/// columns.
fn relist(
    project: &Project,
    model: &Model,
    physical: &str,
    building: Option<&str>,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
) -> Result<(Vec<String>, Vec<Column>), ApplyError> {
    let dir = version_dir(project, model, physical)?;
    // What the directory holds now (one listing; on S3 one listing of the version's prefix).
    let present: std::collections::BTreeSet<String> = list_files(model, &dir, engine)?.into_iter().collect();
    let done = done_present(model, physical, &dir, &present, building, state, Stopped::Relist)?;
    let files: Vec<String> = match (model.kind.time_range(), done) {
        (Some(t), Some(mut done)) => {
            // Intervals the view served before and that are not done now (restated, failed,
            // cleared for a recompute, moved outside the bounds) keep serving their old file until
            // a batch replaces it, as a table keeps its old rows — while it exists: one deleted
            // (an S3 object deleted by hand, then restated) is dropped, and the batch recomputing
            // its interval writes it anew; a file no manifest listed (put there by hand) is never
            // served.
            let mut kept: std::collections::BTreeSet<Millis> = listed_before(&dir, engine)
                .into_iter()
                .filter_map(|f| file_interval(&f, t.grain).filter(|i| interval_file(i.start, t.grain) == f).map(|i| i.start))
                .collect();
            kept.retain(|s| !done.contains(s) && present.contains(&interval_file(*s, t.grain)));
            done.extend(kept);
            done.into_iter().map(|s| interval_file(s, t.grain)).collect()
        }
        _ => vec![FULL_FILE.to_string()],
    };
    let columns = view_columns(model, physical, state)?;
    publish(project, model, physical, (&dir, &columns), &files, engine)?;
    Ok((files, columns))
}

/// What a lake file found missing stops, for its error ([`done_present`]).
#[derive(Debug, Clone, Copy)]
enum Stopped<'a> {
    /// A re-list ([`relist`]): the version's view was not re-created.
    Relist,
    /// The promotion of environment `promoted`, whose view swap binds the version's view
    /// ([`lost_promoted_file`]); `serving` is an environment whose pointer names the version
    /// (where it can be restated), `None` when none does.
    Promotion {
        /// The environment being promoted.
        promoted: &'a str,
        /// An environment serving the version.
        serving: Option<&'a str>,
    },
}

impl Stopped<'_> {
    /// What did not happen, after the colon of the error: `its view … was not re-created`.
    fn consequence(self, physical: &str) -> String {
        match self {
            Self::Relist => format!("its view {physical} was not re-created"),
            Self::Promotion { promoted, .. } => format!("environment `{promoted}` was not promoted (its view of this version reads it)"),
        }
    }
}

/// The intervals done in the ledgers of the versions of `model` stored in `physical` (and of
/// `building`, the version a build is about to record) — `None` for a model that is not
/// time-range — once `present` (the files the version's directory holds) was found to hold each
/// one's file, or a `full` version's `data.parquet`. On S3, a re-list forgets (clears from those
/// ledgers) the done intervals outside the model's `start`/`end` whose object is missing: none
/// recomputes them, and no plan lists S3 (a local lake's are forgotten by the plan's repair).
///
/// # Errors
/// [`ApplyError::Target`] naming the model, the first missing file and its interval, what it
/// stopped (`stopped`) and how to recompute it ([`missing_interval`]), or the `full` version's
/// missing `data.parquet` ([`missing_full`]); [`ApplyError::State`] when a ledger cannot be read.
fn done_present(
    model: &Model,
    physical: &str,
    dir: &VersionDir,
    present: &std::collections::BTreeSet<String>,
    building: Option<&str>,
    state: &dyn StateStore,
    stopped: Stopped<'_>,
) -> Result<Option<std::collections::BTreeSet<Millis>>, ApplyError> {
    let Some(t) = model.kind.time_range() else {
        // Every caller checks a built version: its file is gone.
        return if present.contains(FULL_FILE) { Ok(None) } else { Err(missing_full(model, physical, dir, stopped)) };
    };
    let name = model.name.to_string();
    let mut versions = stored_versions(model, physical, state)?;
    versions.extend(building.map(str::to_string));
    let mut done: std::collections::BTreeSet<Millis> = std::collections::BTreeSet::new();
    for fp in &versions {
        done.extend(state.done_intervals(&name, fp)?);
    }
    let mut missing: Vec<Millis> = done.iter().copied().filter(|s| !present.contains(&interval_file(*s, t.grain))).collect();
    // Forgetting below writes the ledger: only when nothing inside the bounds is missing (else the
    // refusal below comes first, nothing changed) and the prefix holds something at all (an
    // empty listing is more likely a wrong path or endpoint than every object deleted).
    if dir.s3 && matches!(stopped, Stopped::Relist) && !present.is_empty() && missing.iter().all(|s| !t.holds(*s)) && missing.iter().any(|s| !t.holds(*s)) {
        // Outside the model's `start`/`end` (done under wider bounds) no plan, run or restatement
        // recomputes an interval, and S3 is not listed while planning: one whose object is gone
        // is forgotten here (cleared from the ledgers), as the plan's repair does for a local
        // lake, never left done without its file (every re-list would refuse it).
        let outside: Vec<Interval> = missing.iter().filter(|s| !t.holds(**s)).map(|s| Interval::new(*s, t.grain.next(*s))).collect();
        for fp in &versions {
            // (Each merged range holds only forgotten grain starts.)
            for range in interval::merge(&outside) {
                state.clear_intervals(&name, fp, range.start, range.end)?;
            }
        }
        tracing::warn!(model = %model.name, intervals = outside.len(), "done intervals outside its start/end lost their lake objects: forgotten, not recomputed");
        missing.retain(|s| t.holds(*s));
        for i in &outside {
            done.remove(&i.start);
        }
    }
    if let (Some(&start), Some(&last)) = (missing.first(), missing.last()) {
        return Err(missing_interval(model, physical, dir, t.grain, (start, last, missing.len()), stopped));
    }
    Ok(Some(done))
}

/// The error of a built `full` version whose `data.parquet` is missing: names the model and the
/// file, what it stopped, and the remedy — locally the plan schedules its rebuild
/// (`repair.lakeFilesMissing`); S3 lakes are not listed while planning, so the object is
/// restored by hand or the model edited (a new version is built).
fn missing_full(model: &Model, physical: &str, dir: &VersionDir, stopped: Stopped<'_>) -> ApplyError {
    let hint = if dir.s3 {
        format!(
            "S3 lakes are not listed while planning, so no plan schedules its rebuild: \
             restore the object, or edit `{}` so that a new version is built",
            model.name
        )
    } else {
        "`efmesh plan` schedules its rebuild (repair.lakeFilesMissing); apply it first".to_string()
    };
    target_error(
        Some(model),
        None,
        format!(
            "the lake file `{}` of this built version is missing (deleted or never restored outside efmesh): {}\n  hint: {hint}",
            dir.file(FULL_FILE),
            stopped.consequence(physical)
        ),
    )
}

/// After the view swap promoting `env` failed (not transiently, with the engine's raw error —
/// an S3 endpoint's `HTTP 404`): the first lake file missing among the parquet versions of
/// `swapped` (the actions whose views it created), a done interval's file or a `full` version's
/// `data.parquet` deleted outside efmesh (S3 lakes are not listed while planning), as the error
/// naming the model, the file and the remedy (restating the interval where the version is
/// served, [`missing_interval`]). `None` when every such file is there, or a directory cannot
/// be listed or a ledger read, or when `failure` (the engine's message) does not name the
/// version's directory (`<schema>__<table>/<fingerprint>`: the swap failed for another reason):
/// the engine's error stands then.
pub fn lost_promoted_file(
    project: &Project,
    env: &str,
    swapped: &[&Action],
    failure: &str,
    state: &dyn StateStore,
    engine: &mut dyn Engine,
) -> Option<ApplyError> {
    for action in swapped {
        let (Some(physical), Some(model)) = (action.physical.as_deref(), project.dag.get(&action.name)) else { continue };
        if model.target != Target::Parquet {
            continue;
        }
        let Ok(dir) = version_dir(project, model, physical) else { continue };
        if !failure.contains(&format!("{}/{}", crate::core::target::lake_dir_name(&model.name), dir.fingerprint)) {
            continue;
        }
        let Ok(listed) = list_files(model, &dir, engine) else { continue };
        let present: std::collections::BTreeSet<String> = listed.into_iter().collect();
        let serving = serving_env(state, env, &action.name.to_string(), action.fingerprint.as_str());
        let stopped = Stopped::Promotion { promoted: env, serving: serving.as_deref() };
        if let Err(e @ ApplyError::Target { .. }) = done_present(model, physical, &dir, &present, None, state, stopped) {
            return Some(e);
        }
    }
    None
}

/// An environment whose pointer of `model` names the version `fingerprint`: `promoted` itself
/// if it does, else the first other one; `None` when none does or the state cannot be read.
fn serving_env(state: &dyn StateStore, promoted: &str, model: &str, fingerprint: &str) -> Option<String> {
    let serves = |env: &str| state.env_pointers(env).is_ok_and(|p| p.get(model).is_some_and(|fp| fp == fingerprint));
    if serves(promoted) {
        return Some(promoted.to_string());
    }
    state.environments().ok()?.into_iter().find(|env| env.as_str() != promoted && serves(env.as_str()))
}

/// The error of `count` done intervals of a time-range model whose file is missing, the first
/// starting at `start` and the last at `last` (`missing`), met by a re-list or a promotion
/// (`stopped`): names the model, the first interval and its file, what it stopped, and how to
/// recompute them — locally the plan schedules it (`repair.lakeFilesMissing`); S3 lakes are not
/// listed while planning, so the hint restates the intervals (they are then not done, their
/// files are dropped from the list, and the next `run` or `apply` recomputes them) — for a
/// promotion in an environment serving the version, which is then promoted again.
fn missing_interval(model: &Model, physical: &str, dir: &VersionDir, grain: Grain, missing: (Millis, Millis, usize), stopped: Stopped<'_>) -> ApplyError {
    let (start, last, count) = missing;
    let file = dir.file(&interval_file(start, grain));
    let more =
        if count > 1 { format!(", as are those of {} more done interval(s) up to {}", count - 1, interval::to_iso(grain.next(last))) } else { String::new() };
    let hint = if dir.s3 {
        let (env, promote) = match stopped {
            Stopped::Relist => ("<env>", String::new()),
            Stopped::Promotion { promoted, serving } => (serving.unwrap_or("<env>"), format!(", and `efmesh apply {promoted}` promotes it again")),
        };
        format!(
            "restate {} (`efmesh restate {env} --model {} --from {} --to {}`), then `efmesh run {env}` recomputes {}{promote}",
            if count > 1 { "those intervals" } else { "that interval" },
            model.name,
            interval::to_iso(start),
            interval::to_iso(grain.next(last)),
            if count > 1 { "them" } else { "it" }
        )
    } else {
        "`efmesh plan` schedules its repair (repair.lakeFilesMissing: recomputed, or forgotten when outside the model's `start`/`end`); apply it first"
            .to_string()
    };
    let what = if dir.s3 { "object" } else { "file" };
    target_error(
        Some(model),
        Some(Interval::new(start, grain.next(start))),
        format!(
            "the lake {what} `{file}` of this done interval is missing (deleted or never restored outside efmesh){more}: {}\n  hint: {hint}",
            stopped.consequence(physical)
        ),
    )
}

/// Creates the version's directory (a repair's may be gone), then its view over `files`, anchored
/// on `columns` (typed, in order: [`view_columns`]), and its manifest.
fn publish(
    project: &Project,
    model: &Model,
    physical: &str,
    (dir, columns): (&VersionDir, &[Column]),
    files: &[String],
    engine: &mut dyn Engine,
) -> Result<(), ApplyError> {
    super::fault::delay_point(&format!("lake-publish:{}", model.name));
    tracing::debug!(model = %model.name, files = files.len(), columns = columns.len(), "lake view published");
    make_dir(model, dir, None)?;
    let anchor = format!("SELECT * FROM {}", typed_empty_of(columns));
    let select = if files.is_empty() {
        anchor
    } else {
        let list: Vec<String> = files.iter().map(|f| quote_literal(&dir.file(f))).collect();
        format!("{anchor}\nUNION ALL BY NAME\nSELECT * FROM read_parquet([{}], union_by_name = true, hive_partitioning = false)", list.join(", "))
    };
    let mut statements = vec![format!("CREATE OR REPLACE VIEW {physical} AS\n{select}")];
    if super::resolve::embeds_project_root(project, model) {
        // The file list is absolute under the project: record the root (SPEC §4).
        statements.push(crate::engine::root_comment_sql(physical, &project.config.root.to_string_lossy()));
    }
    engine.transaction(&statements).map_err(|e| ApplyError::build(model, None, e))?;
    write_manifest(model, (dir, columns), files, engine)
}

/// The files the version's `manifest.json` lists (what its view served at the last re-list);
/// none when there is no manifest or it cannot be read.
fn listed_before(dir: &VersionDir, engine: &mut dyn Engine) -> Vec<String> {
    let path = dir.file(MANIFEST);
    let text = if dir.s3 {
        let sql = format!("SELECT content FROM read_text({})", quote_literal(&path));
        engine.query(&sql).ok().and_then(|rows| rows.into_iter().next()).and_then(|r| r.into_iter().next().flatten())
    } else {
        fs_err::read_to_string(&path).ok()
    };
    text.map(|t| crate::core::target::lake_manifest_files(&t)).unwrap_or_default()
}

/// The parquet files of a version directory, sorted by name (temporary files excluded).
fn list_files(model: &Model, dir: &VersionDir, engine: &mut dyn Engine) -> Result<Vec<String>, ApplyError> {
    let mut names: Vec<String> = if dir.s3 {
        let sql = format!("SELECT file FROM glob({})", quote_literal(&dir.file("*.parquet")));
        let rows = engine.query(&sql).map_err(|e| ApplyError::build(model, None, e))?;
        rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).filter_map(|f| f.rsplit('/').next().map(str::to_string)).collect()
    } else {
        match fs_err::read_dir(&dir.url) {
            Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(target_error(Some(model), None, format!("cannot list `{}`: {e}", dir.url))),
        }
    };
    names.retain(|n| n.ends_with(".parquet"));
    names.sort();
    Ok(names)
}

/// Writes the version's `manifest.json`: its files, and the columns its view serves (`columns`,
/// those of every version stored there: [`view_columns`]).
fn write_manifest(model: &Model, (dir, columns): (&VersionDir, &[Column]), files: &[String], engine: &mut dyn Engine) -> Result<(), ApplyError> {
    let t = model.kind.time_range();
    let intervals = t
        .map(|t| {
            files
                .iter()
                .filter_map(|f| file_interval(f, t.grain).map(|i| (i, f)))
                .map(|(i, f)| ManifestInterval { start: interval::to_iso(i.start), end: interval::to_iso(i.end), file: f.clone() })
                .collect()
        })
        .unwrap_or_default();
    let manifest = Manifest {
        manifest_version: MANIFEST_VERSION,
        model: model.name.to_string(),
        fingerprint: dir.fingerprint.clone(),
        kind: model.kind.tag().to_string(),
        format: "parquet",
        time_column: t.map(|t| t.time_column.clone()),
        grain: t.map(|t| t.grain.as_str()),
        schema: columns.iter().map(|c| ManifestColumn { name: c.name.clone(), ty: c.ty.clone() }).collect(),
        files: files.to_vec(),
        intervals,
        generated_at: interval::to_iso(interval::now_millis()),
    };
    let text = serde_json::to_string(&manifest).unwrap_or_default();
    let target = dir.file(MANIFEST);
    if dir.s3 {
        // No rename on S3: DuckDB writes the JSON document as the one row of a JSON COPY.
        let build_err = |e| ApplyError::build(model, None, e);
        let structure = engine.query(&format!("SELECT json_structure({}::JSON)", quote_literal(&text))).map_err(build_err)?;
        let structure = structure.into_iter().next().and_then(|r| r.into_iter().next().flatten()).unwrap_or_default();
        let copy = format!(
            "COPY (SELECT unnest(json_transform({}, {}))) TO {} (FORMAT json)",
            quote_literal(&text),
            quote_literal(&structure),
            quote_literal(&target)
        );
        engine.execute(&copy).map_err(build_err)?;
    } else {
        let tmp = format!("{target}.tmp");
        fs_err::write(&tmp, format!("{text}\n"))
            .and_then(|()| fs_err::rename(&tmp, &target))
            .map_err(|e| target_error(Some(model), None, format!("cannot write `{target}`: {e}")))?;
    }
    Ok(())
}

fn version_dir(project: &Project, model: &Model, physical: &str) -> Result<VersionDir, ApplyError> {
    let root = project.config.lake_root().ok_or_else(|| target_error(Some(model), None, "target `parquet` needs a `[lake]` section in efmesh.toml".into()))?;
    VersionDir::of(&root, physical).ok_or_else(|| target_error(Some(model), None, format!("`{physical}` is not a physical relation name")))
}

fn make_dir(model: &Model, dir: &VersionDir, interval: Option<Interval>) -> Result<(), ApplyError> {
    if dir.s3 {
        return Ok(());
    }
    fs_err::create_dir_all(Path::new(&dir.url)).map_err(|e| target_error(Some(model), interval, e.to_string()))
}

fn target_error(model: Option<&Model>, interval: Option<Interval>, message: String) -> ApplyError {
    ApplyError::Target { model: model.map(|m| m.name.clone()), interval, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_directories_come_from_the_physical_name() {
        let fp = "a".repeat(64);
        let dir = VersionDir::of("/lake", &format!("\"_efmesh\".\"med__moves__{fp}\"")).unwrap();
        assert_eq!(dir.url, format!("/lake/med__moves/{fp}"));
        assert!(!dir.s3);
        assert_eq!(dir.fingerprint, fp);
        let s3 = VersionDir::of("s3://b/p", &format!("\"_efmesh\".\"s__t__{fp}\"")).unwrap();
        assert_eq!(s3.file("x.parquet"), format!("s3://b/p/s__t/{fp}/x.parquet"));
        assert!(s3.s3);
    }

    #[test]
    fn a_views_file_list_is_read_as_publish_writes_it_and_as_duckdb_renders_it() {
        let fp = "a".repeat(64);
        let dir = VersionDir::of("/l/it's", &format!("\"_efmesh\".\"s__t__{fp}\"")).unwrap();
        let file = |name: &str| quote_literal(&dir.file(name));
        // What the plan reads back from the view's definition, for this version's directory.
        let view_files = |sql: &str| crate::core::target::lake_view_files(sql, "s__t", &fp);
        // As `publish` writes it.
        let written = format!(
            "CREATE OR REPLACE VIEW x AS\nSELECT * FROM (SELECT CAST(NULL AS INTEGER) AS id LIMIT 0)\nUNION ALL BY NAME\nSELECT * FROM read_parquet([{}, {}], union_by_name = true, hive_partitioning = false)",
            file("2024-01-01.parquet"),
            file("2024-01-02.parquet")
        );
        let both: BTreeSet<String> = ["2024-01-01.parquet", "2024-01-02.parquet"].map(str::to_string).into_iter().collect();
        assert_eq!(view_files(&written), both);
        // As DuckDB's catalog renders it (`duckdb_views().sql`, DuckDB 1.5).
        let rendered = format!(
            "CREATE VIEW _efmesh.s__t__{fp} AS (SELECT * FROM (SELECT CAST(NULL AS INTEGER) AS id LIMIT 0)) UNION ALL BY NAME (SELECT * FROM read_parquet(main.list_value({}, {}), (union_by_name = CAST('t' AS BOOLEAN)), (hive_partitioning = CAST('f' AS BOOLEAN))));",
            file("2024-01-01.parquet"),
            file("2024-01-02.parquet")
        );
        assert_eq!(view_files(&rendered), both);
        // The same version's files under another spelling of the lake's root (a symbolic link).
        let linked = format!("SELECT * FROM read_parquet(['/m/s__t/{fp}/2024-01-01.parquet'])");
        assert_eq!(view_files(&linked), ["2024-01-01.parquet".to_string()].into_iter().collect());
        // No file yet; another version's directory; a nested path.
        assert!(view_files("CREATE VIEW x AS SELECT * FROM (SELECT CAST(NULL AS INTEGER) AS id LIMIT 0)").is_empty());
        let other = format!(
            "SELECT * FROM read_parquet(['/l/it''s/s__t/{}/2024-01-01.parquet', {}])",
            "b".repeat(64),
            quote_literal(&dir.file("sub/2024-01-02.parquet"))
        );
        assert!(view_files(&other).is_empty());
    }

    /// A snapshot's recorded columns, as [`view_columns`] reads another version's: name and type,
    /// an `"exact"` mark ignored; none without a schema.
    #[test]
    fn a_snapshots_declared_columns_are_read_from_its_metadata() {
        let meta = serde_json::json!({"kind": {}, "schema": [["ts", "timestamp"], ["e", "enum('A', 'b')", "exact"]]});
        let cols = declared_columns(&meta);
        let pairs: Vec<(&str, &str)> = cols.iter().map(|c| (c.name.as_str(), c.ty.as_str())).collect();
        assert_eq!(pairs, [("ts", "timestamp"), ("e", "enum('A', 'b')")]);
        assert!(declared_columns(&serde_json::Value::Null).is_empty());
        assert!(declared_columns(&serde_json::json!({"schema": "x"})).is_empty());
    }

    #[test]
    fn interval_files_round_trip_without_colons() {
        let t = interval::parse_instant("2026-03-04T05:00:00Z").unwrap();
        assert_eq!(interval_file(t, Grain::Hour), "2026-03-04T05.parquet");
        assert_eq!(file_interval("2026-03-04T05.parquet", Grain::Hour), Some(Interval::new(t, t + 3_600_000)));
        let d = interval::parse_instant("2026-03-04").unwrap();
        assert_eq!(interval_file(d, Grain::Day), "2026-03-04.parquet");
        assert_eq!(file_interval("2026-03-04.parquet", Grain::Day), Some(Interval::new(d, d + 86_400_000)));
        assert_eq!(file_interval("data.parquet", Grain::Day), None);
        assert_eq!(file_interval("2026-03-04.parquet.tmp", Grain::Day), None);
        assert_eq!(file_interval("2026-02-30.parquet", Grain::Day), None);
        let q = interval::parse_instant("2026-03-04T05:45:00Z").unwrap();
        assert_eq!(interval_file(q, Grain::QuarterHour), "2026-03-04T05-45.parquet");
        assert_eq!(file_interval("2026-03-04T05-45.parquet", Grain::QuarterHour), Some(Interval::new(q, q + 900_000)));
        assert_eq!(file_interval("2026-03-04T05-40.parquet", Grain::QuarterHour), None);
        assert_eq!(file_interval("2026-03-04T05-40.parquet", Grain::FiveMinute), Some(Interval::new(q - 300_000, q)));
        let m = interval::parse_instant("2024-02-01").unwrap();
        assert_eq!(interval_file(m, Grain::Month), "2024-02.parquet");
        assert_eq!(file_interval("2024-02.parquet", Grain::Month), Some(Interval::new(m, interval::parse_instant("2024-03-01").unwrap())));
        // A week file is named by its Monday; another day is not a week file.
        let w = interval::parse_instant("2026-03-02").unwrap();
        assert_eq!(file_interval("2026-03-02.parquet", Grain::Week), Some(Interval::new(w, w + 7 * 86_400_000)));
        assert_eq!(file_interval("2026-03-04.parquet", Grain::Week), None);
    }
}
