//! Engine relations verified against the state (SPEC §4, invariants 18–20).
//!
//! The state store says which versions exist and which environments point at them; the engine
//! holds the relations that realise them. The two can drift apart outside efmesh: the DuckDB
//! file deleted or replaced by an older copy, a table or view dropped by hand, the project moved
//! so that views reading project files embed paths that no longer exist. A plan computed from
//! the state alone would then say "nothing to apply" while the environment serves nothing, or
//! the wrong thing.
//!
//! So every plan (computed or replayed from the memo) is checked against ONE catalog query
//! ([`crate::engine::Engine::catalog`]), and what the check finds becomes work of the plan:
//!
//! - a **physical relation missing** is rebuilt (`build`); a time-range version whose table is
//!   gone has no done interval any more: every wanted interval is backfilled and apply marks
//!   the ledger rows of every version stored in that relation failed before rebuilding it (and,
//!   once the rebuild has recorded its last batch, gives each of them of the same query with a
//!   failed interval the rebuilt version has done its done intervals: the table holds those rows
//!   again, and another environment's version there may never compute itself, `apply`'s
//!   `heal_stored_with`);
//! - a **relation embedding project paths created under another project root** (a `view` over
//!   project files, a parquet lake view; the root is recorded in the relation's comment,
//!   [`crate::engine::root_comment`]) is re-created: a view is rebuilt, a lake view re-listed;
//! - an **environment view missing**, or one that does not select from its version's physical
//!   relation (an older copy of the DuckDB file), is re-created by the promotion;
//! - a **`view`'s physical view not naming its parents' physical relations** of the plan (left
//!   by an older efmesh that reused it across a parent's new version) is rebuilt;
//! - a **lost parquet lake view** over a local lake directory is re-created over the files
//!   present, keeping the ledger; only intervals whose file is missing are recomputed;
//! - **lake files missing** (a parquet version over a local lake directory whose view exists, with
//!   done intervals whose file is gone, or a built `full` version without `data.parquet`): those
//!   intervals are marked failed and recomputed (the full version rebuilt). Checked for every
//!   model, memo or not: a file deleted by hand changes nothing the memo keys on;
//! - a **lake view not listing the ledger's done intervals** (a time-range parquet version, local
//!   or S3, whose view — refreshed only by the process that writes — lists fewer files than its
//!   ledger says are done: an older copy of the DuckDB file, another DuckDB file sharing the lake
//!   and the state store; or a file of an interval not done that the local manifest no longer
//!   lists), or one listing a file its local lake directory no longer holds (a restated
//!   interval's kept file deleted by hand: every query of the view fails until then), is
//!   re-listed, nothing recomputed (`repair.lakeViewStale`). The list is read from the view's
//!   definition in the catalog ([`crate::core::target::lake_view_files`]) and compared with the
//!   ledger and, on a local lake, the one listing of its directory the check reads anyway.
//!   Checked for every model, memo or not;
//! - a **lake view lacking a column its version declares** (its typed empty relation, read from
//!   its definition: [`crate::core::target::lake_view_anchor_columns`]; re-created from an older
//!   version sharing it by an efmesh that anchored it on that version's columns alone, so every
//!   query of the environment's view fails) is re-listed with the columns of every version
//!   stored there, nothing recomputed (`repair.lakeViewLacks`).
//!
//! A lost file of a done interval outside the model's `start`/`end` (done under wider bounds: an
//! earlier edit, another environment's version sharing the directory) cannot be recomputed under
//! these bounds: such intervals are forgotten ([`Repair::forgotten`]: cleared from the ledger, so
//! the view no longer lists them), never left done — a re-list refuses a done interval without
//! its file, so keeping them would make every apply fail.
//!
//! Names are compared ignoring case, as DuckDB resolves them. DuckLake tables live in another
//! catalog, which the check does not read: `apply` and `run` refuse a plan relying on a missing
//! one ([`crate::apply::ducklake::prepare_checked`]). A DuckLake table the catalog holds whose
//! data or delete files are missing from a local data path is found by the session's plan
//! ([`crate::apply::ducklake::lost_files`]) and rebuilt like a lost relation
//! ([`ducklake_files_lost`], `repair.ducklakeFilesMissing`); an `s3://` data path is not checked.
//!
//! `apply` repeats the check on its own connection before writing anything and refuses a plan
//! that missed something ([`unplanned`]), so a plan computed without the check, or before a
//! relation vanished, is never trusted.
//!
//! A plan checks the project's versions; `status --check` also checks, with [`served_missing`]
//! (relations) and [`served_lake_files_missing`] (local lake files; their DuckLake tables with
//! [`crate::apply::ducklake::lost_served_versions`]), the versions an environment serves whose
//! model the project defines otherwise or no longer.
//!
//! Commands that read what an environment serves without planning (`audit`, `preview`, `diff
//! --data`) refuse an engine database behind the state store with the same [`engine_behind`].

use super::{Action, Change, OutsideBounds, Plan, PlanError, env_schema};
use crate::core::ModelName;
use crate::core::Target;
use crate::core::interval;
use crate::core::{External, Kind, Model};
use crate::engine::{Catalog, comment_root, view_names};
use crate::project::Project;
use crate::sql::fingerprint::Fingerprint;
use crate::state::StateStore;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What an action restores because the engine does not hold what the state says it does.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Repair {
    /// The version's physical relation is missing from the engine: it is rebuilt (a time-range
    /// version: every wanted interval, its ledger no longer trusted).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub physical_missing: bool,
    /// The physical relation embeds project paths and was created under this other project root
    /// (`(unknown)` when it records none): it is re-created under the current one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_under: Option<String>,
    /// The environment's view of the model is missing: the promotion re-creates it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub view_missing: bool,
    /// The environment's view of the model exists but does not select from the version's
    /// physical relation (e.g. the DuckDB file was replaced by an older copy): the promotion
    /// re-creates it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub view_stale: bool,
    /// The physical view of a `view` model does not name its parents' physical relations of this
    /// plan (created by an older efmesh that reused it across a parent's new version): rebuilt.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub physical_stale: bool,
    /// The physical view of a parquet lake version is missing while its (local) lake directory
    /// is not: the view is re-created over the files present, the ledger is kept, and only the
    /// intervals whose file is missing are recomputed ([`Repair::lost_files`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lake_view_missing: bool,
    /// Done intervals of a parquet lake version (in the ledger of a version stored in its
    /// relation) whose file is missing from its local lake directory (deleted by hand, a lake
    /// directory not restored with the state): they are marked failed, the view is re-created
    /// over the done intervals' files, and the wanted ones are recomputed ([`Repair::lost_files`]);
    /// those outside the model's `start`/`end` are forgotten ([`Repair::forgotten`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lake_files_missing: bool,
    /// The physical view of a time-range parquet lake version does not list what the ledger says
    /// it serves: a done interval (of a version stored in its relation) whose file it does not
    /// list — an older copy of the DuckDB file restored after a run wrote more intervals (writes
    /// to the lake alone raise no engine epoch), or another DuckDB file sharing the lake and the
    /// state store ran the version further —, or a file of an interval not done that the
    /// version's local manifest no longer lists, or a file its local lake directory no longer
    /// holds ([`Repair::listed_missing`]). Apply re-lists the view over the ledger and the
    /// manifest's files still there ([`crate::apply::lake::refresh`]), recomputing nothing
    /// ([`Repair::unlisted`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lake_view_stale: bool,
    /// With `lake_view_stale`: how many done intervals have a file the view does not list.
    #[serde(skip)]
    pub unlisted: usize,
    /// With `lake_view_stale`: the files (full paths) the view lists that its local lake
    /// directory no longer holds — a kept file of an interval not done (restated, or outside the
    /// model's `start`/`end`) deleted outside efmesh. Every query of the view fails until the
    /// re-list drops them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listed_missing: Vec<String>,
    /// The columns the version declares that the physical view of its time-range parquet lake
    /// version does not anchor (its typed empty relation,
    /// [`crate::core::target::lake_view_anchor_columns`]): re-created from an older version
    /// sharing it (the one a forward-only change kept, still served elsewhere) by an efmesh that
    /// anchored the view on the re-listing version's columns alone. The environment's view
    /// selects them, so every query of it fails. Apply re-lists the view
    /// ([`crate::apply::lake::refresh`]: anchored on the columns of every version stored there),
    /// recomputing nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lake_view_lacks: Vec<String>,
    /// With `lake_view_missing` or `lake_files_missing`: the grain intervals inside the model's
    /// `start`/`end` whose file is missing from the lake; apply marks them failed (where done)
    /// before recomputing them (those the plan wants now).
    #[serde(skip)]
    pub lost_files: Vec<interval::Interval>,
    /// With `lake_view_missing` or `lake_files_missing`: the done grain intervals (of a version
    /// stored in the relation) outside the model's `start`/`end` whose file is missing. No plan
    /// under these bounds recomputes them, and a re-list refuses a done interval without its
    /// file, so apply clears them from the ledgers of [`Repair::ledger_reset`] (forgotten, not
    /// recomputed: the view stops serving them) before re-creating the view.
    #[serde(skip)]
    pub forgotten: Vec<interval::Interval>,
    /// [`Repair::forgotten`], counted with their span, for `--json` (`lostOutsideBounds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_outside_bounds: Option<OutsideBounds>,
    /// Versions of the model stored in the lost relation, whose done intervals apply marks
    /// failed before rebuilding it (time-range models). Once the rebuild has recorded its last
    /// batch, each of them (the rebuilt version aside) of the same query with a failed interval
    /// the rebuilt version has done takes that version's done intervals (`apply`'s
    /// `heal_stored_with`): another environment's version over other parent tables never
    /// computes in the table it shares, so its failed intervals would otherwise stay failed while
    /// its view serves the rebuilt rows.
    #[serde(skip)]
    pub ledger_reset: Vec<Fingerprint>,
    /// With `physical_missing`: the version's DuckLake table is in its catalog, but these data
    /// or delete files the catalog lists for it (full paths, sorted) are missing from the local
    /// data path (moved or deleted outside efmesh): every query of the table fails, so it is
    /// rebuilt as a lost relation is — a `full` version replaced whole, a time-range table
    /// dropped by apply after its ledger rows are marked failed, then every wanted interval
    /// recomputed ([`ducklake_files_lost`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ducklake_files_missing: Vec<String>,
    /// With `ducklake_files_missing`: the version's DuckLake table (its physical relation), which
    /// [`Repair::summary`] names.
    #[serde(skip)]
    pub ducklake_table: String,
}

/// The first three of `items`, comma-separated, then `and N more` when there are more: how a
/// repair's line names the files or intervals it lists.
fn first_three<T: std::fmt::Display>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().take(3).map(ToString::to_string).collect();
    let more = if items.len() > 3 { format!(" and {} more", items.len() - 3) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

/// The `created_under` of a relation that records no project root.
pub const UNKNOWN_ROOT: &str = "(unknown)";

impl Repair {
    /// True when nothing needs restoring.
    pub fn is_empty(&self) -> bool {
        !self.physical_missing
            && self.created_under.is_none()
            && !self.view_missing
            && !self.view_stale
            && !self.physical_stale
            && !self.lake_view_missing
            && !self.lake_files_missing
            && !self.lake_view_stale
            && self.lake_view_lacks.is_empty()
    }

    /// True when apply re-creates the lake view from the ledger before anything is built, marking
    /// the intervals of [`Repair::lost_files`] failed first.
    pub fn relists_lake(&self) -> bool {
        self.lake_view_missing || self.lake_files_missing || self.lake_view_stale || !self.lake_view_lacks.is_empty()
    }

    /// What is to repair, in a few words: "physical relation missing, view missing".
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = [
            (self.physical_missing && self.ducklake_files_missing.is_empty(), "physical relation missing"),
            (self.created_under.is_some(), "created under another project root"),
            (self.physical_stale, "physical view reads old parent versions"),
            (self.lake_view_missing, "lake view missing"),
            (self.lake_files_missing, "lake files missing"),
            (self.lake_view_stale && (self.unlisted > 0 || self.listed_missing.is_empty()), "lake view does not list the done intervals' files"),
        ]
        .into_iter()
        .filter(|&(on, _)| on)
        .map(|(_, what)| what.to_string())
        .collect();
        if !self.ducklake_files_missing.is_empty() {
            parts.insert(0, self.ducklake_files_note());
        }
        if self.lake_view_stale && !self.listed_missing.is_empty() {
            parts.push(self.listed_missing_note());
        }
        if !self.lake_view_lacks.is_empty() {
            parts.push(self.lacks_note());
        }
        if !self.forgotten.is_empty() {
            parts.push(self.forgotten_note());
        }
        parts.extend(
            [(self.view_missing, "view missing"), (self.view_stale, "view serves another version")]
                .into_iter()
                .filter(|&(on, _)| on)
                .map(|(_, what)| what.to_string()),
        );
        if parts.is_empty() { "the engine does not hold what the state records".to_string() } else { parts.join(", ") }
    }

    /// [`Repair::listed_missing`], in a few words, naming the first file: `lake view lists a file
    /// no longer in the lake: /p/lake/m__daily/ab…/2026-01-02.parquet`.
    pub fn listed_missing_note(&self) -> String {
        let first = self.listed_missing.first().map(String::as_str).unwrap_or_default();
        match self.listed_missing.len() {
            1 => format!("lake view lists a file no longer in the lake: {first}"),
            n => format!("lake view lists {n} files no longer in the lake: {first} and {} more", n - 1),
        }
    }

    /// [`Repair::lake_view_lacks`], in a few words, naming the columns: ``lake view lacks the
    /// declared column(s) `w` ``.
    pub fn lacks_note(&self) -> String {
        let named: Vec<String> = self.lake_view_lacks.iter().map(|c| format!("`{c}`")).collect();
        format!("lake view lacks the declared column(s) {}", named.join(", "))
    }

    /// [`Repair::ducklake_files_missing`], in a few words, naming the table and the first file:
    /// `DuckLake table "_efmesh_ducklake"."main"."m__daily__ab…" lacks 2 data file(s):
    /// /p/dl/main/m__daily__ab…/ducklake-….parquet and 1 more`.
    pub fn ducklake_files_note(&self) -> String {
        let first = self.ducklake_files_missing.first().map(String::as_str).unwrap_or_default();
        let n = self.ducklake_files_missing.len();
        let more = if n > 1 { format!(" and {} more", n - 1) } else { String::new() };
        format!("DuckLake table {} lacks {n} data file(s): {first}{more}", self.ducklake_table)
    }

    /// What becomes of [`Repair::forgotten`], in a few words: `1 done interval(s) outside its
    /// start/end lost their files: forgotten, not recomputed`.
    pub fn forgotten_note(&self) -> String {
        format!("{} done interval(s) outside its start/end lost their files: forgotten, not recomputed", self.forgotten.len())
    }

    /// One line per thing to restore, naming the relation and what `apply` does, for warnings and
    /// errors.
    pub fn describe(&self, action: &Action, env: &str, root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let physical = action.physical.as_deref().unwrap_or_default();
        if self.physical_missing {
            let ledger =
                if self.ledger_reset.is_empty() { String::new() } else { format!(" (its ledger is not trusted: {} interval(s) recomputed)", action.intervals) };
            if self.ducklake_files_missing.is_empty() {
                out.push(format!("physical relation {physical} of `{}` is missing: `apply` rebuilds it{ledger}", action.name));
            } else {
                out.push(format!(
                    "DuckLake table {physical} of `{}` lacks {} data file(s) its catalog lists ({}; moved or deleted outside efmesh: every query of it fails): `apply` rebuilds it{ledger}; to keep what it held instead, put the files back and plan again",
                    action.name,
                    self.ducklake_files_missing.len(),
                    first_three(&self.ducklake_files_missing)
                ));
            }
        }
        if let Some(old) = &self.created_under {
            out.push(format!(
                "physical relation {physical} of `{}` reads project files under the project root `{old}`, not `{}`: `apply` re-creates it",
                action.name,
                root.display()
            ));
        }
        if self.physical_stale {
            out.push(format!("physical view {physical} of `{}` does not read its parents' current versions: `apply` rebuilds it", action.name));
        }
        if self.lake_view_missing {
            out.push(format!(
                "lake view {physical} of `{}` is missing: `apply` re-creates it over the files in the lake (and recomputes the {} interval(s) whose file is missing)",
                action.name,
                self.lost_files.len()
            ));
        }
        // A `full` version's lost `data.parquet` is rebuilt; a time-range version's lost files
        // are recomputed (only forgotten intervals lost their files: said below).
        if self.lake_files_missing && action.kind == "full" {
            out.push(format!(
                "the lake file `data.parquet` of `{}` ({physical}) is missing: `apply` rebuilds the version (writes it anew and re-creates the view over it)",
                action.name
            ));
        } else if self.lake_files_missing && (!self.lost_files.is_empty() || self.forgotten.is_empty()) {
            out.push(format!(
                "lake files of {} done interval(s) of `{}` are missing ({}): `apply` marks them failed, re-creates {physical} over the done intervals' files and recomputes them",
                self.lost_files.len(),
                action.name,
                first_three(&self.lost_files)
            ));
        }
        if self.lake_view_stale && (self.unlisted > 0 || self.listed_missing.is_empty()) {
            let what = if self.unlisted > 0 {
                format!("does not list the files of {} done interval(s)", self.unlisted)
            } else {
                "lists files of intervals not done that its manifest no longer lists".to_string()
            };
            out.push(format!(
                "lake view {physical} of `{}` {what} (an older copy of the engine file, or another one sharing the lake and the state store wrote since): `apply` re-creates it over the ledger's done intervals",
                action.name
            ));
        }
        if self.lake_view_stale && !self.listed_missing.is_empty() {
            out.push(format!(
                "lake view {physical} of `{}` lists {} file(s) no longer in the lake ({}; deleted outside efmesh: every query of it fails): `apply` re-creates it over the ledger's done intervals and the kept files still there",
                action.name,
                self.listed_missing.len(),
                first_three(&self.listed_missing)
            ));
        }
        if !self.lake_view_lacks.is_empty() {
            let named: Vec<String> = self.lake_view_lacks.iter().map(|c| format!("`{c}`")).collect();
            out.push(format!(
                "lake view {physical} of `{}` lacks the declared column(s) {} (re-created from an older version sharing it: every query of the environment's view fails): `apply` re-creates it with the columns of every version stored there",
                action.name,
                named.join(", ")
            ));
        }
        if !self.forgotten.is_empty() {
            let shown: Vec<String> = interval::merge(&self.forgotten).iter().take(3).map(ToString::to_string).collect();
            out.push(format!(
                "lake files of {} done interval(s) of `{}` outside its `start`/`end` are missing ({}): no plan under these bounds recomputes them, so `apply` forgets them (clears them from the ledger: {physical} stops serving them), not recomputed",
                self.forgotten.len(),
                action.name,
                shown.join(", ")
            ));
        }
        let view = format!("\"{}\".\"{}\"", env_schema(env, action.name.schema()), action.name.table());
        if self.view_missing {
            out.push(format!("view {view} of `{}` in environment `{env}` is missing: `apply` restores it", action.name));
        }
        if self.view_stale {
            out.push(format!("view {view} of `{}` in environment `{env}` does not serve {physical}: `apply` restores it", action.name));
        }
        out
    }
}

/// Every repair of `plan`, described (see [`Repair::describe`]).
pub fn describe(project: &Project, plan: &Plan) -> Vec<String> {
    plan.actions.iter().flat_map(|a| a.repair.as_ref().map(|r| r.describe(a, &plan.env, &project.config.root)).unwrap_or_default()).collect()
}

/// True when the physical relation of `model` is a view whose definition embeds paths resolved
/// against the project root: a `view` reading a project file through an external model
/// (directly or through embedded models, which are inlined), or a parquet model whose lake
/// directory is relative to the project. Such a relation records the root it was created under
/// ([`crate::engine::root_comment`]) and is re-created when the project has moved (SPEC §4).
/// Tables never do: their data was copied when they were built.
pub fn embeds_project_root(project: &Project, model: &Model) -> bool {
    if model.target == crate::core::Target::Parquet {
        return project.config.lake.as_ref().is_some_and(|l| !l.is_s3() && std::path::Path::new(&l.path).is_relative());
    }
    matches!(model.kind, Kind::View) && reads_project_files(project, model)
}

/// True when `model`'s body reads a project file: an external parent with a relative local path,
/// or an embedded parent that does.
fn reads_project_files(project: &Project, model: &Model) -> bool {
    model.parents().iter().filter_map(|p| project.dag.get(p)).any(|parent| match &parent.kind {
        Kind::External(External::Files { path, .. }) => !is_url(path) && std::path::Path::new(path).is_relative(),
        Kind::Embedded => reads_project_files(project, parent),
        _ => false,
    })
}

/// True for `scheme://…` paths (`http`, `https`, `s3`, `gs`, …): read by the engine's `httpfs`
/// extension, never joined to the project directory.
pub fn is_url(path: &str) -> bool {
    path.split_once("://").is_some_and(|(scheme, _)| !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
}

pub use crate::core::name::split_relation;

/// What the engine lacks of a version an environment serves ([`served_missing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Lack {
    /// The version's physical relation is missing.
    PhysicalMissing,
    /// The environment's view of the model is missing.
    ViewMissing,
    /// The environment's view exists but does not select from the version's physical relation.
    ViewStale,
    /// A file of the version's local parquet lake directory is missing: a done interval's file,
    /// or a `full` version's `data.parquet` ([`served_lake_files_missing`]).
    LakeFileMissing,
    /// The version's table is missing from the DuckLake catalog while the state store records
    /// something there ([`crate::apply::ducklake::lost_served_versions`]).
    DuckLakeTableMissing,
    /// A data or delete file the DuckLake catalog lists for the version's table is missing from
    /// its local data path ([`crate::apply::ducklake::lost_served_versions`]): every query of the
    /// table fails.
    DuckLakeFileMissing,
}

impl Lack {
    /// `relation` and what it lacks, in a few words: `physical relation "_efmesh"."s__a__ab" missing`.
    pub fn describe(self, relation: &str) -> String {
        match self {
            Lack::PhysicalMissing => format!("physical relation {relation} missing"),
            Lack::ViewMissing => format!("view {relation} missing"),
            Lack::ViewStale => format!("view {relation} does not select from the served version"),
            Lack::LakeFileMissing => format!("lake file {relation} missing"),
            Lack::DuckLakeTableMissing => format!("DuckLake table {relation} missing"),
            Lack::DuckLakeFileMissing => format!("DuckLake data file {relation} missing"),
        }
    }
}

/// What the engine's `catalog` lacks of the version of `model` that `env` serves, stored in
/// `physical` (as its snapshot records it), each with the relation named: the physical relation
/// missing, or the environment's view missing or not selecting from `physical`. For the
/// versions a plan does not check (the project defines another version of the model, or none):
/// `status --check` reads what the state store says the environment serves, whatever the
/// working tree holds. Relations in attached catalogs (DuckLake tables) are not checked, as
/// [`check`] does not check them ([`crate::apply::ducklake::lost_served_versions`] does), nor
/// lake files ([`served_lake_files_missing`]).
pub fn served_missing(env: &str, model: &ModelName, physical: &str, catalog: &Catalog) -> Vec<(String, Lack)> {
    let mut out = Vec::new();
    let physical_missing = split_relation(physical).is_some_and(|(schema, name)| !catalog.contains(&schema, &name));
    if physical_missing {
        out.push((physical.to_string(), Lack::PhysicalMissing));
    }
    let schema = env_schema(env, model.schema());
    let view = format!("{}.{}", crate::core::name::quote_ident(&schema), crate::core::name::quote_ident(model.table()));
    if !catalog.contains(&schema, model.table()) {
        out.push((view, Lack::ViewMissing));
    } else if catalog.view_sql(&schema, model.table()).is_some_and(|sql| !view_names(sql, physical)) {
        // A view whose definition the engine does not report is taken as serving the version.
        out.push((view, Lack::ViewStale));
    }
    out
}

/// How a version an environment serves is stored, read from its snapshot record (its recorded
/// metadata), not from the project, which may define the model otherwise or no longer: for the
/// checks of `status --check` beyond the engine's catalog ([`served_lake_files_missing`],
/// [`crate::apply::ducklake::lost_served_versions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServedStorage {
    /// The version's target (`target` of its recorded kind; `table` when it records none).
    pub target: Target,
    /// True for a time-range version.
    pub time_range: bool,
    /// A time-range version's grain; `None` for other kinds, or when the record has none.
    pub grain: Option<interval::Grain>,
}

impl ServedStorage {
    /// What `record` says of its version's storage.
    pub fn of(record: &crate::state::SnapshotRecord) -> Self {
        let kind = &record.metadata["kind"];
        let target = kind["target"].as_str().and_then(Target::parse).unwrap_or(Target::Table);
        let time_range = record.kind == "incremental_by_time_range";
        let grain = kind["grain"].as_str().and_then(interval::Grain::parse).filter(|_| time_range);
        ServedStorage { target, time_range, grain }
    }
}

/// The files missing from the local parquet lake directory of a version an environment serves
/// (stored in `physical`, as `storage` says; `sharing`: the fingerprints of every version of
/// the model `name` stored there, the served one among them): each done interval's file of
/// those versions, or a `full` version's `data.parquet`, as full paths. What the plan's check
/// finds for the project's versions (`Repair::lake_files_missing`), for a version it does not
/// check (the project defines another version of the model, or none). Empty for another target,
/// an S3 lake (not listed here) or a directory that cannot be read.
///
/// # Errors
/// The ledger cannot be read.
pub fn served_lake_files_missing(
    project: &Project,
    state: &dyn StateStore,
    name: &str,
    physical: &str,
    storage: ServedStorage,
    sharing: &[String],
) -> Result<Vec<PathBuf>, crate::state::StateError> {
    if storage.target != Target::Parquet {
        return Ok(Vec::new());
    }
    let (Some(dir), Some(files)) = (local_lake_dir(project, physical), local_lake_files(project, physical)) else { return Ok(Vec::new()) };
    if !storage.time_range {
        return Ok(if files.contains(LAKE_FULL_FILE) { Vec::new() } else { vec![dir.join(LAKE_FULL_FILE)] });
    }
    let Some(grain) = storage.grain else { return Ok(Vec::new()) };
    let mut lost: BTreeSet<String> = BTreeSet::new();
    for fp in sharing {
        lost.extend(state.done_intervals(name, fp)?.into_iter().map(|s| lake_interval_file(s, grain)).filter(|f| !files.contains(f)));
    }
    Ok(lost.into_iter().map(|f| dir.join(f)).collect())
}

/// The current project root, in the forms a recorded root is compared with.
struct Root {
    text: String,
    canonical: Option<PathBuf>,
}

impl Root {
    fn of(project: &Project) -> Self {
        Self { text: project.config.root.to_string_lossy().into_owned(), canonical: fs_err::canonicalize(&project.config.root).ok() }
    }

    /// True when `recorded` names this root (literally, or the same directory through links).
    fn is(&self, recorded: &str) -> bool {
        recorded == self.text || (self.canonical.is_some() && fs_err::canonicalize(recorded).ok() == self.canonical)
    }
}

/// True when the physical view `sql` of `model` names the physical relation (in `physicals`)
/// of every materialised parent it reads, through embedded models (which are inlined).
fn names_parents(project: &Project, model: &Model, physicals: &Physicals, sql: &str) -> bool {
    model.parents().iter().filter_map(|p| project.dag.get(p)).all(|parent| match &parent.kind {
        Kind::External(_) => true,
        Kind::Embedded => names_parents(project, parent, physicals, sql),
        _ => physicals.get(&parent.name).is_none_or(|physical| view_names(sql, physical)),
    })
}

/// The catalog as the check reads it, lowercasing a name only when it has upper-case letters
/// (the catalog's names are lowercased already): indexed (one hash lookup per relation) for a
/// check of many actions, or looked up in the catalog's own map for a few (a re-plan checks the
/// models it recomputed: indexing thousands of relations for them would cost more).
enum Lookup<'a> {
    Indexed(std::collections::HashMap<(&'a str, &'a str), &'a crate::engine::CatalogEntry>),
    Direct(&'a Catalog),
}

impl<'a> Lookup<'a> {
    fn of(catalog: &'a Catalog) -> Self {
        Lookup::Indexed(catalog.relations.iter().map(|((s, n), e)| ((s.as_str(), n.as_str()), e)).collect())
    }

    /// For `lookups` lookups: indexed when they are many for the catalog's size.
    fn for_lookups(catalog: &'a Catalog, lookups: usize) -> Self {
        if lookups.saturating_mul(16) < catalog.relations.len() { Lookup::Direct(catalog) } else { Lookup::of(catalog) }
    }

    fn get(&self, schema: &str, name: &str) -> Option<&'a crate::engine::CatalogEntry> {
        let (schema, name) = (lowered(schema), lowered(name));
        match self {
            Lookup::Indexed(relations) => relations.get(&(schema.as_ref(), name.as_ref())).copied(),
            Lookup::Direct(catalog) => catalog.relations.get(&(schema.into_owned(), name.into_owned())),
        }
    }
}

/// The physical relation each model's action in a plan serves (removed models excepted), for
/// [`names_parents`]: found by the model's DAG position (a plan lists the project's models in
/// DAG order, removed ones after), checked by name, else searched.
struct Physicals<'a> {
    project: &'a Project,
    plan: &'a Plan,
}

impl<'a> Physicals<'a> {
    fn get(&self, name: &ModelName) -> Option<&'a str> {
        let at = self.project.dag.position(name).and_then(|i| self.plan.actions.get(i)).filter(|a| a.name == *name);
        let action = at.or_else(|| self.plan.actions.iter().find(|a| a.name == *name && a.change != Change::Removed));
        action.filter(|a| a.change != Change::Removed).and_then(|a| a.physical.as_deref())
    }
}

/// `s` lowercased as the catalog's names are, copied only when that changes it.
fn lowered(s: &str) -> std::borrow::Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) { std::borrow::Cow::Owned(s.to_lowercase()) } else { std::borrow::Cow::Borrowed(s) }
}

fn needed_at(project: &Project, env: &str, action: &Action, physicals: &Physicals, catalog: &Lookup, root: &Root) -> Repair {
    let mut repair = Repair::default();
    if action.change == Change::Removed {
        return repair;
    }
    let (Some(model), Some(physical)) = (project.dag.get(&action.name), action.physical.as_deref()) else { return repair };
    // A relation this plan builds is created anyway; one it relies on must exist.
    if !action.build
        && let Some((schema, name)) = split_relation(physical)
    {
        match catalog.get(&schema, &name) {
            None => repair.physical_missing = true,
            Some(entry) => {
                if embeds_project_root(project, model) {
                    let recorded = entry.comment.as_deref().and_then(comment_root);
                    if !recorded.is_some_and(|r| root.is(r)) {
                        repair.created_under = Some(recorded.unwrap_or(UNKNOWN_ROOT).to_string());
                    }
                }
                if matches!(model.kind, Kind::View)
                    && model.target != Target::Parquet
                    && entry.sql.as_deref().is_some_and(|sql| !names_parents(project, model, physicals, sql))
                {
                    repair.physical_stale = true;
                }
            }
        }
    }
    // The promotion re-creates the views of every other change.
    if matches!(action.change, Change::Unchanged | Change::Metadata) {
        let (schema, view) = (env_schema(env, model.name.schema()), model.name.table());
        match catalog.get(&schema, view) {
            None => repair.view_missing = true,
            Some(entry) => {
                // The view must select from this version's relation; an engine that does not
                // report view definitions gets its view re-created whenever the relation is rebuilt.
                repair.view_stale = match entry.sql.as_deref() {
                    Some(sql) => !view_names(sql, physical),
                    None => repair.physical_missing,
                };
            }
        }
    }
    repair
}

/// The file name of the lake file holding the grain interval starting at `start`, UTC:
/// `YYYY-MM-DD.parquet` (day; week: its Monday), `YYYY-MM-DDTHH.parquet` (hour),
/// `YYYY-MM-DDTHH-MM.parquet` (five_minute, quarter_hour) or `YYYY-MM.parquet` (month). No `:`,
/// so the name is safe on every filesystem.
pub fn lake_interval_file(start: interval::Millis, grain: interval::Grain) -> String {
    let iso = interval::to_iso(start);
    match grain {
        interval::Grain::Day | interval::Grain::Week => format!("{}.parquet", &iso[..10]),
        interval::Grain::Hour => format!("{}.parquet", &iso[..13]),
        interval::Grain::FiveMinute | interval::Grain::QuarterHour => format!("{}-{}.parquet", &iso[..13], &iso[14..16]),
        interval::Grain::Month => format!("{}.parquet", &iso[..7]),
    }
}

/// The file names in the local lake directory of the parquet version stored in `physical`
/// (`<lake>/<schema>__<table>/<fingerprint>`); `None` for S3 lakes (not listed while planning)
/// or when the directory cannot be read.
fn local_lake_files(project: &Project, physical: &str) -> Option<BTreeSet<String>> {
    match fs_err::read_dir(local_lake_dir(project, physical)?) {
        Ok(entries) => Some(entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(BTreeSet::new()),
        Err(_) => None,
    }
}

/// The local directory of the parquet lake version stored in `physical`; `None` without a local
/// lake.
pub fn local_lake_dir(project: &Project, physical: &str) -> Option<std::path::PathBuf> {
    if project.config.lake.as_ref().is_none_or(|l| l.is_s3()) {
        return None;
    }
    let root = project.config.lake_root()?;
    let (_, table) = split_relation(physical)?;
    let (model, fp) = table.rsplit_once("__")?;
    Some(Path::new(&root).join(model).join(fp))
}

/// The engine's catalog as a plan checks it, with the state store's engine epoch
/// ([`StateStore::engine_epoch`]) read BEFORE the catalog was queried or recalled. Every writer
/// stamps the engine database with an epoch before it records that epoch in the store
/// ([`crate::engine::epoch`]), so any epoch the store recorded by then is stamped in this
/// catalog: a writer that stamps and records between the two reads (another process's `run` or
/// `apply`, on a Postgres engine shared by two checkouts, or on a DuckDB file between a plan's
/// catalog read and its check) never makes a current database look older than the store
/// ([`engine_behind`]). Read the other way round, the store's epoch could be one the catalog was
/// read too early to hold.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The engine's catalog.
    pub catalog: &'a Catalog,
    /// The store's engine epoch, read before `catalog`.
    pub epoch: i64,
}

impl<'a> Observed<'a> {
    /// `catalog`, read after the store's engine epoch `epoch`.
    pub fn new(catalog: &'a Catalog, epoch: i64) -> Self {
        Observed { catalog, epoch }
    }
}

/// What says whether the views of an environment moved between two reads of the state store
/// ([`ViewsMark::steady`]): its pointers, and whether a promotion of it is recorded as under way
/// ([`StateStore::pending_promotions`]). A promotion records its intent, moves the views (one
/// engine transaction), then records the new pointers and drops the intent in one state
/// transaction; undoing an interrupted one moves the views back under the same intent. So a
/// catalog read between two marks with no promotion under way and the same pointers shows the
/// views those pointers serve; otherwise a promotion of the environment (another process's
/// `apply`, its view swap done, its record not yet) may have moved them while they were read,
/// and views that disagree with the pointers are not damage until a steady read says so
/// (`status --check`, `session::plan_checked_with`). On Postgres readers see the swap as soon as
/// it commits; on DuckDB the promoting process holds the file, so a reader cannot read the
/// catalog meanwhile (a promotion must then fall entirely between its pointers and its catalog).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewsMark {
    /// The environment's pointers: model name → fingerprint.
    pub pointers: std::collections::BTreeMap<String, String>,
    /// A promotion of the environment is recorded as under way (its views may be moving).
    pub promoting: bool,
}

impl ViewsMark {
    /// The mark of `env` now: two reads (the promotions under way, then its pointers).
    ///
    /// # Errors
    /// The state store's reads.
    pub fn read(state: &dyn StateStore, env: &str) -> Result<Self, crate::state::StateError> {
        let promoting = state.pending_promotions()?.iter().any(|p| p.env == env);
        Ok(ViewsMark { pointers: state.env_pointers(env)?, promoting })
    }

    /// The mark `plan` was computed at: the pointers it read (its environment's version of every
    /// model but an added one: [`Action::previous`], or its own version where they agree, a
    /// removed model's included), read before its catalog; no promotion known under way.
    pub fn of_plan(plan: &Plan) -> Self {
        let pointers = plan
            .actions
            .iter()
            .filter(|a| a.change != Change::Added)
            .map(|a| (a.name.to_string(), a.previous.as_ref().unwrap_or(&a.fingerprint).as_str().to_string()))
            .collect();
        ViewsMark { pointers, promoting: false }
    }

    /// True when no view of the environment moved from `self` (read before a catalog read) to
    /// `after` (read after it): no promotion under way at either, and the same pointers.
    pub fn steady(&self, after: &ViewsMark) -> bool {
        !self.promoting && !after.promoting && self.pointers == after.pointers
    }
}

/// Checks `plan` against the engine's catalog (`engine`, read after the store's engine epoch)
/// and turns what is missing into work of the plan (see the module docs); `has_changes` follows.
///
/// # Errors
/// [`PlanError::State`] when the snapshots sharing a lost table cannot be read.
pub fn check(project: &Project, state: &dyn StateStore, plan: &mut Plan, engine: Observed<'_>) -> Result<(), PlanError> {
    check_skipping(project, state, plan, engine, &|_| false).map(|_| ())
}

/// [`check`], taking the actions of the models `skip` says as needing nothing (the caller
/// proves they were found so with the same inputs: `VersionMemo`'s repair memo); returns the
/// models found needing a repair.
///
/// # Errors
/// As [`check`].
pub fn check_skipping(
    project: &Project,
    state: &dyn StateStore,
    plan: &mut Plan,
    engine: Observed<'_>,
    skip: &dyn Fn(&crate::core::ModelName) -> bool,
) -> Result<std::collections::HashSet<crate::core::ModelName>, PlanError> {
    let catalog = engine.catalog;
    let root = Root::of(project);
    let mut index = None;
    refuse_foreign_relations(project, plan, catalog)?;
    if let Some(message) = engine_behind(&project.config, state, engine.epoch, catalog)? {
        return Err(PlanError::EngineBehind(message));
    }
    if let Some(warning) = engine_new_to_store(&project.config, state, engine.epoch, catalog)? {
        tracing::warn!("{warning}");
    }
    let checked: Vec<bool> = plan.actions.iter().map(|a| a.change == Change::Removed || !skip(&a.name)).collect();
    let found: Vec<Repair> = {
        let physicals = Physicals { project, plan };
        let lookup = Lookup::for_lookups(catalog, checked.iter().filter(|c| **c).count());
        plan.actions
            .iter()
            .zip(&checked)
            .map(|(a, checked)| if *checked { needed_at(project, &plan.env, a, &physicals, &lookup, &root) } else { Repair::default() })
            .collect()
    };
    let mut unclean: std::collections::HashSet<crate::core::ModelName> =
        plan.actions.iter().zip(&found).filter(|(a, r)| a.change != Change::Removed && !r.is_empty()).map(|(a, _)| a.name.clone()).collect();
    for (action, mut repair) in plan.actions.iter_mut().zip(found) {
        // The done intervals of the versions stored in a lake version's relation, when read for
        // its files (and all there): compared with its view's file list below.
        let mut lake_done: Option<BTreeSet<interval::Millis>> = None;
        // The file names its local lake directory holds, when listed for that (and no done
        // interval's file is missing): compared with its view's file list below.
        let mut lake_present: Option<BTreeSet<String>> = None;
        // Files of a lake version whose view exists, checked against its ledger (every model,
        // memo or not: a file deleted by hand changes no input of the memo).
        if action.change != Change::Removed
            && !repair.physical_missing
            && let Some(model) = project.dag.get(&action.name)
            && model.target == Target::Parquet
            && let Some(files) = action.physical.as_deref().and_then(|p| local_lake_files(project, p))
        {
            match model.kind.time_range() {
                Some(t) => {
                    let fps = sharing(state, &mut index, action)?;
                    let lost = LostDone::of(state, &action.name.to_string(), &fps, &files, t)?;
                    if !lost.inside.is_empty() || !lost.outside.is_empty() {
                        let wanted: BTreeSet<interval::Interval> =
                            interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&model.name, plan.now)).into_iter().collect();
                        add_to_backfill(action, t.grain, lost.inside.iter().filter(|i| wanted.contains(*i)).copied());
                        repair.lake_files_missing = true;
                        repair.ledger_reset = fps;
                        repair.lost_files = lost.inside.clone();
                        lost.forget(action, &mut repair, t);
                    } else {
                        lake_done = Some(lost.done);
                        lake_present = Some(files);
                    }
                }
                // A full version built into a directory that lost its file: rebuilt.
                None => {
                    if !action.build && !files.contains(LAKE_FULL_FILE) && recorded(state, &mut index, action)? {
                        repair.lake_files_missing = true;
                    }
                }
            }
            if repair.lake_files_missing {
                unclean.insert(action.name.clone());
            }
        }
        // A lake view whose file list is not what its ledger says it serves (an older copy of the
        // DuckDB file, another DuckDB file sharing the lake and the state store), or that lists a
        // file its local directory no longer holds (a kept file deleted by hand): re-listed.
        // Checked for every model, memo or not (a file copied over the engine's, or another
        // process's run, changes no input of the memo); from the view's text, so S3 lakes alike.
        // (A version built, re-created for another root or re-listed anyway is not compared.)
        if action.change != Change::Removed
            && !action.build
            && action.reused_from.is_none()
            && !repair.physical_missing
            && !repair.relists_lake()
            && repair.created_under.is_none()
            && let Some(model) = project.dag.get(&action.name)
            && model.target == Target::Parquet
            && let Some(t) = model.kind.time_range()
            && let Some(physical) = action.physical.as_deref()
            && let Some(sql) = split_relation(physical).and_then(|(schema, name)| catalog.view_sql(&schema, &name))
            && let Some((table, fingerprint)) = split_relation(physical).and_then(|(_, t)| t.rsplit_once("__").map(|(m, fp)| (m.to_string(), fp.to_string())))
        {
            let done = match lake_done {
                Some(done) => done,
                None => {
                    let name = action.name.to_string();
                    let mut done = BTreeSet::new();
                    for fp in sharing(state, &mut index, action)? {
                        done.extend(state.done_intervals(&name, fp.as_str())?);
                    }
                    done
                }
            };
            // The local manifest, read only when the view lists a file of an interval not done.
            let manifest = || {
                let text = fs_err::read_to_string(local_lake_dir(project, physical)?.join("manifest.json")).ok()?;
                Some(crate::core::target::lake_manifest_files(&text).into_iter().collect())
            };
            let done_files: BTreeSet<String> = done.iter().map(|s| lake_interval_file(*s, t.grain)).collect();
            let stale = crate::core::target::lake_view_stale(sql, (&table, &fingerprint), &done_files, manifest);
            // Only a local lake's directory was listed (S3 is not listed while planning).
            let lost: Vec<String> = match (&lake_present, local_lake_dir(project, physical)) {
                (Some(present), Some(dir)) => crate::core::target::lake_view_lost_files(sql, (&table, &fingerprint), present)
                    .into_iter()
                    .map(|f| dir.join(f).to_string_lossy().into_owned())
                    .collect(),
                _ => Vec::new(),
            };
            if stale.is_some() || !lost.is_empty() {
                repair.lake_view_stale = true;
                repair.unlisted = stale.unwrap_or(0);
                repair.listed_missing = lost;
                unclean.insert(action.name.clone());
            }
            // A view anchored on fewer columns than this version declares (re-created from an
            // older version sharing it, by an efmesh that anchored it on the re-listing version
            // alone): every query of the environment's view, which selects them, fails.
            repair.lake_view_lacks = lacks_columns(sql, model);
            if !repair.lake_view_lacks.is_empty() {
                unclean.insert(action.name.clone());
            }
        }
        if repair.is_empty() {
            continue;
        }
        let model = project.dag.get(&action.name).expect("repairs are only found for project models");
        // A lost lake view over an intact local lake directory: re-created over its files, the
        // ledger kept; only intervals whose file is missing are recomputed.
        if repair.physical_missing
            && model.target == Target::Parquet
            && let Some(files) = action.physical.as_deref().and_then(|p| local_lake_files(project, p))
        {
            match model.kind.time_range() {
                Some(t) => {
                    let mut lost_files: Vec<interval::Interval> = interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&model.name, plan.now))
                        .into_iter()
                        .filter(|i| !files.contains(&lake_interval_file(i.start, t.grain)))
                        .collect();
                    add_to_backfill(action, t.grain, lost_files.iter().copied());
                    let fps = sharing(state, &mut index, action)?;
                    // The done intervals whose file is missing too: those inside the bounds the
                    // plan does not want now (not yet due) are marked failed with the others,
                    // those outside them forgotten (the re-list would refuse them done).
                    let lost = LostDone::of(state, &action.name.to_string(), &fps, &files, t)?;
                    lost_files.extend(lost.inside.iter().copied());
                    lost_files.sort_by_key(|i| i.start);
                    lost_files.dedup();
                    repair.physical_missing = false;
                    repair.lake_view_missing = true;
                    repair.ledger_reset = fps;
                    repair.lost_files = lost_files;
                    lost.forget(action, &mut repair, t);
                }
                None if files.contains(LAKE_FULL_FILE) => {
                    repair.physical_missing = false;
                    repair.lake_view_missing = true;
                }
                None => {}
            }
        }
        let lost_full = repair.lake_files_missing && model.kind.time_range().is_none();
        if lost_full || repair.physical_missing || ((repair.created_under.is_some() || repair.physical_stale) && matches!(model.kind, Kind::View)) {
            action.build = true;
            if action.metadata.is_null() {
                action.metadata = super::metadata(model);
            }
        }
        if repair.physical_missing && model.kind.time_range().is_some() {
            // The table is gone, so are its intervals, whatever the ledger says.
            repair.ledger_reset = rebuild_every_interval(project, state, &mut index, model, action, plan.now)?;
        }
        action.repair = Some(repair);
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    // A rebuilt table's intervals wait, as its missing ones do, for rows left to `prod` upstream.
    super::recompute::hold_for_writer(project, state, plan)?;
    Ok(unclean)
}

/// Turns the DuckLake tables of `plan`'s versions whose data or delete files are missing from
/// the local data path into work of the plan (`lost`: by physical relation, the missing files'
/// full paths, as [`crate::apply::ducklake::lost_files`] reads them from the DuckLake catalog,
/// which the engine's catalog [`check`] reads does not hold). Such a table serves nothing (every
/// query of it fails, a batch's `DELETE` too), so it is rebuilt as a lost relation is
/// (`repair.physicalMissing`, with `repair.ducklakeFilesMissing` naming the files): a `full`
/// version built anew, a time-range version's every wanted interval backfilled, apply marking the
/// ledger rows of every version stored in the table failed and dropping it first. Its rows in the
/// files still there are recomputed too: DuckLake keeps no file per interval, and a table missing
/// a file can be neither read nor written. Then what the repairs rewrite reaches the time-range
/// models below ([`super::recompute::propagate`]), and `has_changes` follows. Restoring the files
/// (with the catalog they belong to) and planning again keeps what they held instead.
///
/// # Errors
/// [`PlanError::State`] when the snapshots sharing a table or a ledger cannot be read.
pub fn ducklake_files_lost(
    project: &Project,
    state: &dyn StateStore,
    plan: &mut Plan,
    lost: &std::collections::BTreeMap<String, Vec<String>>,
) -> Result<(), PlanError> {
    if lost.is_empty() {
        return Ok(());
    }
    let now = plan.now;
    let mut index = None;
    let mut marked = false;
    for action in plan.actions.iter_mut().filter(|a| a.change != Change::Removed) {
        let Some(files) = action.physical.as_ref().and_then(|p| lost.get(p)).filter(|f| !f.is_empty()) else { continue };
        let Some(model) = project.dag.get(&action.name).filter(|m| m.target == Target::DuckLake) else { continue };
        let mut repair = action.repair.take().unwrap_or_default();
        repair.physical_missing = true;
        repair.ducklake_files_missing = files.clone();
        repair.ducklake_table = action.physical.clone().unwrap_or_default();
        action.build = true;
        if action.metadata.is_null() {
            action.metadata = super::metadata(model);
        }
        if model.kind.time_range().is_some() {
            // The table is rebuilt, as a lost one is ([`check`]).
            repair.ledger_reset = rebuild_every_interval(project, state, &mut index, model, action, now)?;
        }
        action.repair = Some(repair);
        marked = true;
    }
    if marked {
        super::recompute::propagate(project, state, plan)?;
        plan.has_changes = plan.actions.iter().any(Action::has_work);
    }
    Ok(())
}

/// Why the engine database `catalog` describes cannot be trusted: its epoch stamp for this
/// state store is lower than `recorded`, the epoch the store records ([`StateStore::engine_epoch`],
/// which the caller reads BEFORE it reads the catalog: see [`Observed`]), while it holds a table
/// of one of the store's versions ([`crate::engine::epoch::behind`]); `None` otherwise (a new
/// file: the plan's repairs rebuild what it lacks).
///
/// # Errors
/// The state store's reads.
pub fn engine_behind(
    config: &crate::config::Config,
    state: &dyn StateStore,
    recorded: i64,
    catalog: &Catalog,
) -> Result<Option<String>, crate::state::StateError> {
    if recorded == 0 {
        return Ok(None);
    }
    let store_id = state.store_id()?;
    // The snapshot index is read only for a database actually behind (never on a current one).
    if crate::engine::epoch::stamped(catalog, &store_id) >= recorded {
        return Ok(None);
    }
    let Some((stamped, relation, model)) = crate::engine::epoch::behind(catalog, &store_id, recorded, &state.snapshot_index()?) else {
        return Ok(None);
    };
    Ok(Some(crate::engine::epoch::behind_message(
        &crate::engine::location(config),
        &state.location(),
        stamped,
        recorded,
        &format!("`{relation}` (model `{model}`)"),
    )))
}

/// When the engine database holds none of the tables the state store records although the store
/// records writes ([`engine_behind`] lets it through: a new file, the plan rebuilds what it
/// lacks): a warning saying so, and that once this database is written any other database this
/// store wrote (the one the project used before: moved, or another checkout's) is refused as
/// older. `recorded` is the store's engine epoch, read before the catalog ([`Observed`]).
/// `None` for a database the store's writes went to, or a store that wrote none.
///
/// # Errors
/// The state store's reads.
pub fn engine_new_to_store(
    config: &crate::config::Config,
    state: &dyn StateStore,
    recorded: i64,
    catalog: &Catalog,
) -> Result<Option<String>, crate::state::StateError> {
    if recorded == 0 || crate::engine::epoch::stamped(catalog, &state.store_id()?) >= recorded {
        return Ok(None);
    }
    Ok(Some(format!(
        "the engine database {} holds none of the tables the state store {} records, which records writes up to engine epoch {recorded} to \
         a database: every version is rebuilt here, and once this database is written, a database this store wrote before (one moved \
         away, another checkout's) is refused as older than the store (`engine-behind`); if this project should use that database, point \
         `[engine]` at it before applying",
        crate::engine::location(config),
        state.location()
    )))
}

/// Refuses a plan whose promotion would replace a relation efmesh did not create: a changed model
/// (new to the environment, or one that had no view) gets its view `<env schema>.<table>` by `CREATE OR REPLACE VIEW`, which would
/// silently replace a user's own view of that name (and fail on a table with the engine's
/// message). A view there is efmesh's when it reads efmesh's storage ([`reads_efmesh_storage`]):
/// one an earlier promotion left (a state store lost and started afresh, an interrupted
/// promotion) is replaced, so such views stay recoverable.
fn refuse_foreign_relations(project: &Project, plan: &Plan, catalog: &Catalog) -> Result<(), PlanError> {
    match foreign_relation(project, plan, catalog) {
        Some((model, message)) => Err(PlanError::ForeignRelation { model: model.name.clone(), location: model.location.clone(), message }),
        None => Ok(()),
    }
}

/// The first changed model of `plan` whose view would replace a relation efmesh did not create, with the message saying so ([`refuse_foreign_relations`]; `apply` asks again
/// against the catalog it checks the plan with).
pub fn foreign_relation<'p>(project: &'p Project, plan: &Plan, catalog: &Catalog) -> Option<(&'p Model, String)> {
    // Every view the promotion creates or replaces for a change (a model new here, or one that
    // had no view: an embedded or external model made a table); not an unchanged one's, whose
    // view a repair puts back.
    let creates_view = |a: &&Action| !matches!(a.change, Change::Unchanged | Change::Metadata | Change::Removed) && a.physical.is_some();
    for action in plan.actions.iter().filter(creates_view) {
        let Some(model) = project.dag.get(&action.name) else { continue };
        let schema = env_schema(&plan.env, model.name.schema());
        let Some(entry) = catalog.relations.get(&(schema.to_lowercase(), model.name.table().to_lowercase())) else { continue };
        let found = match entry.sql.as_deref() {
            Some(sql) if reads_efmesh_storage(sql) => continue,
            Some(sql) => {
                let sql: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
                let shown = if sql.chars().count() > 120 { format!("{}…", sql.chars().take(120).collect::<String>()) } else { sql };
                format!("a view efmesh did not create (it reads none of efmesh's storage: `{shown}`)")
            }
            None => "a table efmesh did not create".to_string(),
        };
        let message = format!(
            "environment `{}` would serve it as the view `{schema}.{}`, where {found} stands; efmesh replaces no relation of yours, nothing was done\n  \
             hint: rename the model (or its schema), or move or drop that relation",
            plan.env,
            model.name.table()
        );
        return Some((model, message));
    }
    None
}

/// The actions whose environment view a promotion of `plan` would create, replace or drop, as
/// `promote` decides: not an unchanged pointer's (unless the plan repairs its view), not an
/// added model's without storage (an external, an embedded model).
fn promoted_actions(plan: &Plan) -> impl Iterator<Item = &Action> {
    plan.actions.iter().filter(|a| {
        let keeps_view = matches!(a.change, Change::Unchanged | Change::Metadata) && !a.repair.as_ref().is_some_and(|r| r.view_missing || r.view_stale);
        !(keeps_view || (a.change == Change::Added && a.physical.is_none()))
    })
}

/// The environment views a promotion of `plan` would replace or drop that may be another state
/// store's (SPEC §4, invariant 64), for [`crate::ownership::foreign_views`] to keep while
/// another store is present: each EXISTING view it would move whose definition reads efmesh's
/// storage and is not this store's. A view is this store's only when this store's environment
/// has a pointer for its model and the view reads exactly that version's physical relation; a
/// model without a pointer (added to the environment here) has no view of this store's yet, so
/// one standing there another store made — or this store before its state was lost. Each is
/// labelled with the store the environment's record ([`crate::ownership::env_recorded_by`], read
/// from `catalog`: no extra query) names when that is another: the record only names, it never
/// decides (a store promoting last may meet views another store made before). The
/// environment's pointers and the snapshot index are read once, only when a moved view exists
/// and reads efmesh's storage.
///
/// # Errors
/// [`crate::state::StateError`] when the state store cannot be read.
pub fn views_of_other_stores(
    plan: &Plan,
    catalog: &Catalog,
    state: &dyn StateStore,
    me: &str,
) -> Result<Vec<crate::ownership::ForeignView>, crate::state::StateError> {
    use crate::ownership::ForeignView;
    // The views the promotion moves that exist and read efmesh's storage, with their model
    // (tables and views over anything else are not efmesh's environment views: left alone).
    let existing: Vec<(String, String, Vec<String>)> = promoted_actions(plan)
        .filter_map(|a| {
            let (schema, table) = (env_schema(&plan.env, a.name.schema()), a.name.table().to_string());
            let sql = catalog.relations.get(&(schema.to_lowercase(), table.to_lowercase()))?.sql.as_deref()?;
            let read = efmesh_relations_read(sql);
            (!read.is_empty()).then(|| (a.name.to_string(), format!("{schema}.{table}"), read))
        })
        .collect();
    if existing.is_empty() {
        return Ok(Vec::new());
    }
    // The physical relation each model of this store's environment reads (bare, lowercased).
    let pointers = state.env_pointers(&plan.env)?;
    let index = state.snapshot_index()?;
    let bare = |p: &str| p.replace('"', "").to_lowercase();
    let served: std::collections::HashMap<String, String> =
        pointers.into_iter().filter_map(|(name, fp)| index.get(&(name.clone(), fp)).map(|(physical, _)| (name, bare(physical.as_str())))).collect();
    // The relations this store knows (its snapshots', the plan's), by their bare name, to the
    // physical name its use records are keyed by.
    let known: std::collections::HashMap<String, &str> =
        index.values().map(|(physical, _)| physical.as_str()).chain(plan.actions.iter().filter_map(|a| a.physical.as_deref())).map(|p| (bare(p), p)).collect();
    let owner = crate::ownership::env_recorded_by(catalog, &plan.env).filter(|o| *o != me).map(str::to_string);
    Ok(existing
        .into_iter()
        .filter(|(model, _, read)| !served.get(model).is_some_and(|physical| read.iter().all(|r| r == physical)))
        .map(|(_, view, read)| {
            let reads = read
                .into_iter()
                .map(|r| {
                    let physical = known.get(&r).map(|p| (*p).to_string());
                    (r, physical)
                })
                .collect();
            ForeignView { view, owner: owner.clone(), reads }
        })
        .collect())
}

/// The relations of efmesh's storage a view definition reads, unquoted and lowercased:
/// `_efmesh.<name>` and `_efmesh_ducklake.main.<name>` (compared as whole names, as
/// [`reads_efmesh_storage`]; a column qualified by one is cut to the relation).
fn efmesh_relations_read(sql: &str) -> Vec<String> {
    let text = sql.replace('"', "").to_lowercase();
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut out = Vec::new();
    for (prefix, parts) in [(format!("{}.", crate::core::name::PHYSICAL_SCHEMA), 2), (format!("{}.", crate::core::target::DUCKLAKE_ALIAS), 3)] {
        for (at, _) in text.match_indices(prefix.as_str()) {
            if text[..at].chars().next_back().is_some_and(|c| ident(c) || c == '.') {
                continue;
            }
            let name: String = text[at..].chars().take_while(|c| ident(*c) || *c == '.').collect();
            let name: Vec<&str> = name.split('.').take(parts).collect();
            if name.len() == parts && name.iter().all(|p| !p.is_empty()) {
                out.push(name.join("."));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// True when a view definition reads a relation of efmesh's storage: the schema `_efmesh` of the
/// engine database or the attached DuckLake catalog `_efmesh_ducklake` (compared ignoring case
/// and identifier quotes, as a whole name).
fn reads_efmesh_storage(sql: &str) -> bool {
    let text = sql.replace('"', "").to_lowercase();
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    [format!("{}.", crate::core::name::PHYSICAL_SCHEMA), format!("{}.", crate::core::target::DUCKLAKE_ALIAS)]
        .iter()
        .any(|prefix| text.match_indices(prefix.as_str()).any(|(at, _)| !text[..at].chars().next_back().is_some_and(|c| ident(c) || c == '.')))
}

/// Fingerprints of every snapshot by (model name, physical relation it records), read once per
/// check, so finding the versions sharing each lost relation is a lookup, not a scan of every
/// snapshot per repaired action.
type SharingIndex = std::collections::HashMap<(String, String), Vec<String>>;

/// The name of a full lake version's data file (as `apply::lake::FULL_FILE`).
const LAKE_FULL_FILE: &str = "data.parquet";

/// Makes `action` (of the time-range `model`) rebuild its table whole: every interval wanted at
/// `now` backfilled, none counted as a done one recomputed, none done outside the bounds kept (the
/// ledger rows of every version stored in the table are marked failed by the apply, and those
/// outside the bounds are never recomputed under them; the other versions of the same query take
/// back what the rebuild recomputed once it is done). Returns those versions
/// ([`Repair::ledger_reset`]).
///
/// # Errors
/// [`PlanError::State`] when the snapshots sharing the table cannot be read.
fn rebuild_every_interval(
    project: &Project,
    state: &dyn StateStore,
    index: &mut Option<SharingIndex>,
    model: &Model,
    action: &mut Action,
    now: interval::Millis,
) -> Result<Vec<Fingerprint>, PlanError> {
    if let Some(t) = model.kind.time_range() {
        let wanted = interval::wanted(t.start, t.end, t.grain, project.dag.due_at(&model.name, now));
        action.intervals = wanted.len();
        action.backfill = interval::merge(&wanted);
    }
    action.recompute = None;
    action.outside_bounds = None;
    sharing(state, index, action)
}

/// The versions of `action`'s model stored in its physical relation (its own, the one it reuses,
/// and every snapshot recording that relation).
fn sharing(state: &dyn StateStore, index: &mut Option<SharingIndex>, action: &Action) -> Result<Vec<Fingerprint>, PlanError> {
    if index.is_none() {
        let mut grouped = SharingIndex::new();
        for ((name, fp), (physical, _)) in state.snapshot_index()? {
            grouped.entry((name, physical)).or_default().push(fp);
        }
        *index = Some(grouped);
    }
    let key = (action.name.to_string(), action.physical.clone().unwrap_or_default());
    let mut fps: Vec<Fingerprint> = index.as_ref().and_then(|i| i.get(&key)).into_iter().flatten().map(|fp| Fingerprint::from(fp.clone())).collect();
    fps.extend([Some(action.fingerprint.clone()), action.reused_from.clone()].into_iter().flatten());
    fps.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    fps.dedup_by(|a, b| a.as_str() == b.as_str());
    Ok(fps)
}

/// The done intervals of the versions of a time-range parquet model stored in one relation (read
/// from their ledgers) and those of them whose file is missing from its local lake directory,
/// split by the model's `start`/`end`.
struct LostDone {
    /// The starts of every done interval of those versions.
    done: BTreeSet<interval::Millis>,
    /// The done grain intervals inside the bounds whose file is missing: marked failed, and
    /// recomputed where the plan wants them.
    inside: Vec<interval::Interval>,
    /// The done grain intervals outside the bounds whose file is missing: forgotten.
    outside: Vec<interval::Interval>,
}

impl LostDone {
    /// Reads the ledgers of the versions `fps` of the model `name` (of `t`) and compares them
    /// with `files`, the file names its lake directory holds.
    fn of(state: &dyn StateStore, name: &str, fps: &[Fingerprint], files: &BTreeSet<String>, t: &crate::core::kind::TimeRange) -> Result<Self, PlanError> {
        let mut done: BTreeSet<interval::Millis> = BTreeSet::new();
        for fp in fps {
            done.extend(state.done_intervals(name, fp.as_str())?);
        }
        let (mut inside, mut outside) = (Vec::new(), Vec::new());
        for &s in done.iter().filter(|s| !files.contains(&lake_interval_file(**s, t.grain))) {
            let lost = interval::Interval::new(s, t.grain.next(s));
            if t.holds(s) { inside.push(lost) } else { outside.push(lost) }
        }
        Ok(Self { done, inside, outside })
    }

    /// Records the lost intervals outside the bounds in `repair` ([`Repair::forgotten`]), and
    /// takes them out of what `action` says its table holds outside them (`outsideBounds`: the
    /// view serves those, not these once forgotten).
    fn forget(self, action: &mut Action, repair: &mut Repair, t: &crate::core::kind::TimeRange) {
        if self.outside.is_empty() {
            return;
        }
        let forgotten: BTreeSet<interval::Millis> = self.outside.iter().map(|i| i.start).collect();
        repair.lost_outside_bounds = super::outside_bounds(t, &forgotten);
        if action.outside_bounds.is_some() {
            let kept: BTreeSet<interval::Millis> = self.done.difference(&forgotten).copied().collect();
            action.outside_bounds = super::outside_bounds(t, &kept);
        }
        repair.forgotten = self.outside;
    }
}

/// The columns `model` declares that the typed empty relation of its lake view (definition
/// `sql`, [`crate::core::target::lake_view_anchor_columns`]) does not, in declared order; none
/// when the definition has no such relation (not read, so not judged).
fn lacks_columns(sql: &str, model: &Model) -> Vec<String> {
    let Some(anchored) = crate::core::target::lake_view_anchor_columns(sql) else { return Vec::new() };
    model.relation_columns().into_iter().filter(|c| !anchored.iter().any(|a| a.eq_ignore_ascii_case(&c.name))).map(|c| c.name).collect()
}

/// Adds the grain intervals `more` to `action`'s backfill (merged, each once) and its count.
fn add_to_backfill(action: &mut Action, grain: interval::Grain, more: impl IntoIterator<Item = interval::Interval>) {
    let mut pieces: Vec<interval::Interval> = action.backfill.iter().flat_map(|b| b.split(grain)).collect();
    pieces.extend(more);
    pieces.sort_by_key(|i| i.start);
    pieces.dedup();
    action.intervals = pieces.len();
    action.backfill = interval::merge(&pieces);
}

/// True when a snapshot of `action`'s model records its physical relation (a version stored
/// there was built or inherited it).
fn recorded(state: &dyn StateStore, index: &mut Option<SharingIndex>, action: &Action) -> Result<bool, PlanError> {
    sharing(state, index, action)?;
    let key = (action.name.to_string(), action.physical.clone().unwrap_or_default());
    Ok(index.as_ref().is_some_and(|i| i.contains_key(&key)))
}

/// What the engine's `catalog` says must be restored but `plan` does not restore, described:
/// `apply` refuses such a plan (computed without the check, or before a relation vanished).
pub fn unplanned(project: &Project, plan: &Plan, catalog: &Catalog) -> Vec<String> {
    let root = Root::of(project);
    let physicals = Physicals { project, plan };
    let lookup = Lookup::of(catalog);
    let mut out = Vec::new();
    for action in &plan.actions {
        let live = needed_at(project, &plan.env, action, &physicals, &lookup, &root);
        let planned = action.repair.clone().unwrap_or_default();
        let missed = Repair {
            physical_missing: live.physical_missing && !planned.lake_view_missing,
            created_under: live.created_under.filter(|_| planned.created_under.is_none()),
            view_missing: live.view_missing && !planned.view_missing,
            view_stale: live.view_stale && !planned.view_stale && !planned.view_missing,
            physical_stale: live.physical_stale && !planned.physical_stale,
            ..Repair::default()
        };
        out.extend(missed.describe(action, &plan.env, &project.config.root));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Views found disagreeing with the pointers count only when read between two marks with no
    /// promotion of the environment under way and the same pointers: a promotion recorded as
    /// under way at either read (its views may be moving), or pointers that changed between them
    /// (one completed in between), means the catalog may show another moment than the pointers.
    #[test]
    fn views_read_between_two_marks_are_judged_only_when_no_promotion_moved_them() {
        let mark = |pairs: &[(&str, &str)], promoting: bool| ViewsMark {
            pointers: pairs.iter().map(|(n, f)| ((*n).to_string(), (*f).to_string())).collect(),
            promoting,
        };
        let before = mark(&[("m.t", "aa"), ("m.d", "dd")], false);
        assert!(before.steady(&mark(&[("m.t", "aa"), ("m.d", "dd")], false)), "nothing moved");
        assert!(!before.steady(&mark(&[("m.t", "bb"), ("m.d", "dd")], false)), "a promotion completed in between");
        assert!(!before.steady(&mark(&[("m.t", "aa"), ("m.d", "dd")], true)), "a promotion under way after the read (its swap may be done)");
        assert!(!mark(&[("m.t", "aa")], true).steady(&mark(&[("m.t", "aa")], false)), "one under way before it (an undo moves the views back)");
        assert!(!before.steady(&mark(&[("m.t", "aa")], false)), "a model removed by a promotion in between");
        assert!(mark(&[], false).steady(&mark(&[], false)), "an environment that does not exist, before and after");
        assert!(!mark(&[], false).steady(&mark(&[("m.t", "aa")], false)), "its first promotion completed in between");
    }

    #[test]
    fn a_view_is_efmeshs_when_it_reads_efmeshs_storage_as_either_engine_renders_it() {
        assert!(reads_efmesh_storage("CREATE VIEW s.c AS SELECT n, total FROM \"_efmesh\".\"s__c__ab12\""));
        assert!(reads_efmesh_storage("CREATE VIEW s.c AS  SELECT s__c__ab12.n\n   FROM _efmesh.s__c__ab12;"));
        assert!(reads_efmesh_storage("CREATE VIEW s.c AS SELECT * FROM \"_EFMESH_DUCKLAKE\".\"main\".\"t\""));
        assert!(!reads_efmesh_storage("CREATE VIEW s.c AS SELECT 42 AS answer"));
        assert!(!reads_efmesh_storage("CREATE VIEW s.c AS SELECT * FROM my_efmesh.t"));
        assert!(!reads_efmesh_storage("CREATE VIEW s.c AS SELECT * FROM raw._efmesh.t"));
        assert!(!reads_efmesh_storage("CREATE VIEW s.c AS SELECT '_efmesh' AS x FROM t"));
    }

    /// The relations of efmesh's storage an environment view reads, as DuckDB keeps the text and
    /// Postgres renders it: whole names, a qualified column cut to its relation.
    #[test]
    fn the_relations_a_view_reads_of_efmeshs_storage_are_named_whole() {
        assert_eq!(efmesh_relations_read("CREATE VIEW s.c AS SELECT n FROM \"_efmesh\".\"s__C__ab12\""), vec!["_efmesh.s__c__ab12".to_string()]);
        assert_eq!(efmesh_relations_read("CREATE VIEW s.c AS  SELECT s__c__ab12.n\n   FROM _efmesh.s__c__ab12;"), vec!["_efmesh.s__c__ab12".to_string()]);
        assert_eq!(efmesh_relations_read("SELECT _efmesh.s__c__ab12.n FROM _efmesh.s__c__ab12"), vec!["_efmesh.s__c__ab12".to_string()]);
        assert_eq!(efmesh_relations_read("SELECT * FROM \"_efmesh_ducklake\".\"main\".\"t__x\""), vec!["_efmesh_ducklake.main.t__x".to_string()]);
        assert!(efmesh_relations_read("SELECT * FROM raw._efmesh.t UNION ALL SELECT 42").is_empty());
    }

    #[test]
    fn a_served_versions_storage_is_read_from_its_snapshot_record() {
        let record = |kind: &str, payload: serde_json::Value| crate::state::SnapshotRecord {
            name: "s.a".into(),
            fingerprint: "ab".into(),
            fingerprint_version: 1,
            kind: kind.into(),
            physical: "\"_efmesh\".\"s__a__ab\"".into(),
            canonical: None,
            rendered_sql: String::new(),
            metadata: serde_json::json!({ "kind": payload }),
            created_at: String::new(),
        };
        let daily = record("incremental_by_time_range", serde_json::json!({"tag": "incremental_by_time_range", "grain": "day", "target": "parquet"}));
        assert_eq!(ServedStorage::of(&daily), ServedStorage { target: Target::Parquet, time_range: true, grain: Some(interval::Grain::Day) });
        let full = record("full", serde_json::json!({"tag": "full", "target": "ducklake"}));
        assert_eq!(ServedStorage::of(&full), ServedStorage { target: Target::DuckLake, time_range: false, grain: None });
        // A table version records no target.
        let table = record("full", serde_json::json!({"tag": "full"}));
        assert_eq!(ServedStorage::of(&table).target, Target::Table);
        assert_eq!(Lack::LakeFileMissing.describe("/l/s__a/ab/2026-01-02.parquet"), "lake file /l/s__a/ab/2026-01-02.parquet missing");
    }

    /// A DuckLake table whose data files are missing is rebuilt as a lost relation is, and said
    /// so by the files (whose directory is the table's), not as a relation missing.
    #[test]
    fn lost_ducklake_data_files_are_named_where_the_repair_is_summed_up() {
        let files = |n: usize| (0..n).map(|i| format!("/d/main/s__a__ab/ducklake-{i}.parquet")).collect::<Vec<_>>();
        let table = "\"_efmesh_ducklake\".\"main\".\"s__a__ab\"".to_string();
        let one = Repair { physical_missing: true, ducklake_files_missing: files(1), ducklake_table: table.clone(), ..Repair::default() };
        assert_eq!(one.summary(), format!("DuckLake table {table} lacks 1 data file(s): /d/main/s__a__ab/ducklake-0.parquet"));
        let three = Repair { physical_missing: true, ducklake_files_missing: files(3), ducklake_table: table.clone(), view_missing: true, ..Repair::default() };
        assert_eq!(three.summary(), format!("DuckLake table {table} lacks 3 data file(s): /d/main/s__a__ab/ducklake-0.parquet and 2 more, view missing"));
        assert_eq!(Repair { physical_missing: true, ..Repair::default() }.summary(), "physical relation missing");
        assert_eq!(Lack::DuckLakeFileMissing.describe("/d/main/s__a__ab/ducklake-0.parquet"), "DuckLake data file /d/main/s__a__ab/ducklake-0.parquet missing");
    }

    #[test]
    fn a_served_version_lacks_its_missing_physical_relation_and_its_missing_or_stale_view() {
        let entry = |sql: Option<&str>| crate::engine::CatalogEntry { comment: None, sql: sql.map(str::to_string) };
        let model = ModelName::parse("s.a").expect("name");
        let physical = "\"_efmesh\".\"s__a__ab\"";
        let mut catalog = Catalog::default();
        catalog.relations.insert(("_efmesh".into(), "s__a__ab".into()), entry(None));
        catalog.relations.insert(("dev__s".into(), "a".into()), entry(Some("CREATE VIEW dev__s.a AS SELECT * FROM \"_efmesh\".\"s__a__ab\"")));
        assert!(served_missing("dev", &model, physical, &catalog).is_empty());
        // prod's view is missing; another version's view is stale.
        assert_eq!(served_missing("prod", &model, physical, &catalog), vec![("\"s\".\"a\"".to_string(), Lack::ViewMissing)]);
        assert_eq!(
            served_missing("dev", &model, "\"_efmesh\".\"s__a__cd\"", &catalog),
            vec![("\"_efmesh\".\"s__a__cd\"".to_string(), Lack::PhysicalMissing), ("\"dev__s\".\"a\"".to_string(), Lack::ViewStale)]
        );
        // Case is ignored, as DuckDB resolves names; DuckLake tables are not in this catalog.
        assert!(served_missing("dev", &model, "\"_EFMESH\".\"S__A__AB\"", &catalog).is_empty());
        let lake = "\"_efmesh_ducklake\".\"main\".\"s__a__ab\"";
        catalog
            .relations
            .insert(("dev__s".into(), "a".into()), entry(Some("CREATE VIEW dev__s.a AS SELECT * FROM \"_efmesh_ducklake\".\"main\".\"s__a__ab\"")));
        assert!(served_missing("dev", &model, lake, &catalog).is_empty());
    }

    #[test]
    fn qualified_names_split_into_schema_and_name() {
        assert_eq!(split_relation("\"_efmesh\".\"s__t__ab\""), Some(("_efmesh".into(), "s__t__ab".into())));
        assert_eq!(split_relation("\"a\"\"b\".\"c.d\""), Some(("a\"b".into(), "c.d".into())));
        assert_eq!(split_relation("\"_efmesh_ducklake\".\"main\".\"t\""), None);
        assert_eq!(split_relation("_efmesh.t"), None);
    }
}
