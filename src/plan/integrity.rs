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
//!   the ledger rows of every version stored in that relation failed before rebuilding it;
//! - a **relation embedding project paths created under another project root** (a `view` over
//!   project files, a parquet lake view; the root is recorded in the relation's comment,
//!   [`crate::engine::root_comment`]) is re-created: a view is rebuilt, a lake view re-listed;
//! - an **environment view missing** is re-created by the promotion.
//!
//! `apply` repeats the check on its own connection before writing anything and refuses a plan
//! that missed something ([`unplanned`]), so a plan computed without the check, or before a
//! relation vanished, is never trusted.

use super::{Action, Change, Plan, PlanError, env_schema};
use crate::core::Kind;
use crate::core::interval;
use crate::engine::{Catalog, comment_root};
use crate::project::Project;
use crate::sql::fingerprint::Fingerprint;
use crate::state::StateStore;
use serde::Serialize;
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
    /// Versions of the model stored in the lost relation, whose done intervals apply marks
    /// failed before rebuilding it (time-range models).
    #[serde(skip)]
    pub ledger_reset: Vec<Fingerprint>,
}

/// The `created_under` of a relation that records no project root.
pub const UNKNOWN_ROOT: &str = "(unknown)";

impl Repair {
    /// True when nothing needs restoring.
    pub fn is_empty(&self) -> bool {
        !self.physical_missing && self.created_under.is_none() && !self.view_missing
    }

    /// One line per thing restored, naming the relation, for warnings and errors.
    pub fn describe(&self, action: &Action, env: &str, root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let physical = action.physical.as_deref().unwrap_or_default();
        if self.physical_missing {
            let ledger =
                if self.ledger_reset.is_empty() { String::new() } else { format!(" (its ledger is not trusted: {} interval(s) recomputed)", action.intervals) };
            out.push(format!("physical relation {physical} of `{}` is missing: rebuilt{ledger}", action.name));
        }
        if let Some(old) = &self.created_under {
            out.push(format!(
                "physical relation {physical} of `{}` reads project files under the project root `{old}`, not `{}`: re-created",
                action.name,
                root.display()
            ));
        }
        if self.view_missing {
            let view = format!("\"{}\".\"{}\"", env_schema(env, action.name.schema()), action.name.table());
            out.push(format!("view {view} of `{}` in environment `{env}` is missing: restored", action.name));
        }
        out
    }
}

/// Every repair of `plan`, described (see [`Repair::describe`]).
pub fn describe(project: &Project, plan: &Plan) -> Vec<String> {
    plan.actions.iter().flat_map(|a| a.repair.as_ref().map(|r| r.describe(a, &plan.env, &project.config.root)).unwrap_or_default()).collect()
}

/// `"schema"."name"` split into its parts; `None` for names in attached catalogs (three parts,
/// e.g. DuckLake tables, which the main catalog does not list).
fn split_relation(qualified: &str) -> Option<(String, String)> {
    let mut parts = Vec::new();
    let mut chars = qualified.chars().peekable();
    while chars.peek().is_some() {
        if chars.next()? != '"' {
            return None;
        }
        let mut part = String::new();
        loop {
            match chars.next()? {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    part.push('"');
                }
                '"' => break,
                c => part.push(c),
            }
        }
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => {}
            Some(_) => return None,
        }
    }
    let [schema, name]: [String; 2] = parts.try_into().ok()?;
    Some((schema, name))
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

fn needed_at(project: &Project, env: &str, action: &Action, catalog: &Catalog, root: &Root) -> Repair {
    let mut repair = Repair::default();
    if action.change == Change::Removed {
        return repair;
    }
    let (Some(model), Some(physical)) = (project.dag.get(&action.name), action.physical.as_deref()) else { return repair };
    // A relation this plan builds is created anyway; one it relies on must exist.
    if !action.build
        && let Some((schema, name)) = split_relation(physical)
    {
        if !catalog.contains(&schema, &name) {
            repair.physical_missing = true;
        } else if crate::apply::resolve::embeds_project_root(project, model) {
            let recorded = catalog.comment(&schema, &name).and_then(comment_root);
            if !recorded.is_some_and(|r| root.is(r)) {
                repair.created_under = Some(recorded.unwrap_or(UNKNOWN_ROOT).to_string());
            }
        }
    }
    // The promotion re-creates the views of every other change.
    if matches!(action.change, Change::Unchanged | Change::Metadata) && !catalog.contains(&env_schema(env, model.name.schema()), model.name.table()) {
        repair.view_missing = true;
    }
    repair
}

/// Checks `plan` against the engine's `catalog` and turns what is missing into work of the plan
/// (see the module docs); `has_changes` follows.
///
/// # Errors
/// [`PlanError::State`] when the snapshots sharing a lost table cannot be read.
pub fn check(project: &Project, state: &StateStore, plan: &mut Plan, catalog: &Catalog) -> Result<(), PlanError> {
    let root = Root::of(project);
    let mut index = None;
    for action in &mut plan.actions {
        let mut repair = needed_at(project, &plan.env, action, catalog, &root);
        if repair.is_empty() {
            continue;
        }
        let model = project.dag.get(&action.name).expect("repairs are only found for project models");
        if repair.physical_missing || (repair.created_under.is_some() && matches!(model.kind, Kind::View)) {
            action.build = true;
            if action.metadata.is_null() {
                action.metadata = super::metadata(model);
            }
        }
        if let (true, Some(t)) = (repair.physical_missing, model.kind.time_range()) {
            // The table is gone, so are its intervals, whatever the ledger says.
            let wanted = interval::wanted(t.start, t.end, t.grain, plan.now);
            action.intervals = wanted.len();
            action.backfill = interval::merge(&wanted);
            if index.is_none() {
                index = Some(state.snapshot_index()?);
            }
            let name = action.name.to_string();
            let physical = action.physical.clone().unwrap_or_default();
            let mut fps: Vec<Fingerprint> =
                index.iter().flatten().filter(|(key, stored)| key.0 == name && stored.0 == physical).map(|(key, _)| Fingerprint::from(key.1.clone())).collect();
            fps.extend([Some(action.fingerprint.clone()), action.reused_from.clone()].into_iter().flatten());
            fps.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            fps.dedup_by(|a, b| a.as_str() == b.as_str());
            repair.ledger_reset = fps;
        }
        action.repair = Some(repair);
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// What the engine's `catalog` says must be restored but `plan` does not restore, described:
/// `apply` refuses such a plan (computed without the check, or before a relation vanished).
pub fn unplanned(project: &Project, plan: &Plan, catalog: &Catalog) -> Vec<String> {
    let root = Root::of(project);
    let mut out = Vec::new();
    for action in &plan.actions {
        let live = needed_at(project, &plan.env, action, catalog, &root);
        let planned = action.repair.clone().unwrap_or_default();
        let missed = Repair {
            physical_missing: live.physical_missing,
            created_under: live.created_under.filter(|_| planned.created_under.is_none()),
            view_missing: live.view_missing && !planned.view_missing,
            ledger_reset: Vec::new(),
        };
        out.extend(missed.describe(action, &plan.env, &project.config.root));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_split_into_schema_and_name() {
        assert_eq!(split_relation("\"_efmesh\".\"s__t__ab\""), Some(("_efmesh".into(), "s__t__ab".into())));
        assert_eq!(split_relation("\"a\"\"b\".\"c.d\""), Some(("a\"b".into(), "c.d".into())));
        assert_eq!(split_relation("\"_efmesh_ducklake\".\"main\".\"t\""), None);
        assert_eq!(split_relation("_efmesh.t"), None);
    }
}
