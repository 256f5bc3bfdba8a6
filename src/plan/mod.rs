//! The plan: the diff between the project and an environment.
//!
//! For every model, in topological order: its fingerprint (canonical body + data-shaping
//! metadata + parents' fingerprints), its change category against the environment's pointer
//! (`added`, `breaking`, `non-breaking`, `indirect`, `forward-only`, `metadata`, `unchanged`;
//! models the environment has but the project lost are `removed`, listed last — see
//! [`categorize`]), whether its version must be built (no snapshot of it exists yet and it
//! inherits no storage — otherwise promotion is a view swap), and for time-range models the
//! intervals still to compute from `start`, gaps included (reference `core-semantics.md` §4).
//!
//! Planning reads the scripts and the state store only. It never writes the engine or the store;
//! canonical digests it had to compute are returned in [`Plan::canon_cache_misses`] so that
//! `apply` can persist them.

pub mod categorize;
pub mod generations;
pub mod integrity;
pub mod lineage;
pub mod memo;
pub mod recompute;
pub mod work;

use crate::core::fragment::CanonicalResolver;
use crate::core::interval::{self, Interval, Millis};
use crate::core::name::{ModelName, validate_env};
use crate::core::{Kind, Location, Model};
use crate::engine::dialect::Dialect;
use crate::project::Project;
use crate::sql::canon::{CanonSource, Canonical, SqlError, canonical_digest};
use crate::sql::fingerprint::{FINGERPRINT_VERSION, Fingerprint, body_digest, fingerprint_with_digest, physical_table_within};
use crate::state::{StateError, StateStore};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use crate::core::name::PHYSICAL_SCHEMA;

/// How a model differs from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Not in the environment yet.
    Added,
    /// Its own definition changed in a way that may change existing data; descendants rebuild.
    Breaking,
    /// Only output columns were added; descendants keep their physical tables.
    NonBreaking,
    /// Unchanged itself, a parent changed.
    Indirect,
    /// The operator chose to keep the old storage and history (time-range, unique-key, partition
    /// and SCD type 2 models).
    ForwardOnly,
    /// Only fields that do not shape data changed (description, batch size, lookback…).
    Metadata,
    /// Same fingerprint and metadata as the environment's pointer.
    Unchanged,
    /// In the environment but no longer in the project.
    Removed,
}

impl Change {
    /// The one-character mark of the category in text plans and the watch screen.
    pub fn mark(self) -> char {
        match self {
            Change::Added => '+',
            Change::Breaking => '!',
            Change::NonBreaking => '~',
            Change::Indirect => '↻',
            Change::ForwardOnly => '→',
            Change::Metadata => '*',
            Change::Removed => '-',
            Change::Unchanged => '·',
        }
    }

    /// The category as written in plans and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Breaking => "breaking",
            Change::NonBreaking => "non-breaking",
            Change::Indirect => "indirect",
            Change::ForwardOnly => "forward-only",
            Change::Metadata => "metadata",
            Change::Unchanged => "unchanged",
            Change::Removed => "removed",
        }
    }
}

/// Why a model got its category.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Explain {
    /// AST paths that diverged (e.g. `where`, `projection[3] (added)`); at most 8.
    pub diverged: Vec<String>,
    /// Why the category followed.
    pub reason: String,
    /// For indirect changes: the changed parents that caused it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cascade_from: Vec<String>,
    /// For a breaking change confined to some output columns: which, and which children read
    /// them (column impact, from lineage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column_impact: Option<ColumnImpact>,
}

/// The column impact of a breaking change whose rows provably stay the same
/// ([`categorize::changed_columns`]): children that read none of the changed columns keep their
/// data (indirect, reused), the others rebuild ([`confined_read`]).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ColumnImpact {
    /// The output columns whose values may differ (changed, added, removed or retyped).
    pub changed: Vec<String>,
    /// The columns the change removed (dropped, or renamed away: the new name is among
    /// `changed`), lower case. A child reading one of them by a name that now binds elsewhere,
    /// or reading whole rows or every column, reads the change though its lineage against the
    /// new columns cannot show it ([`Reshape`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// True when a column both versions have changed its place in the column list: a child
    /// reading columns by position or whole rows reads the change ([`Reshape`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub moved: bool,
    /// Children that read one of them (or whose lineage is uncertain, or whose query may see
    /// the column list as it is when the change reshapes it): they rebuild.
    pub read_by: Vec<String>,
    /// Children that read none of them: their data stays the same.
    pub not_read_by: Vec<String>,
    /// How the change reshapes the column list, when it does: what the readers above are
    /// judged by again when the plan is filled in ([`fill_column_impact`]).
    #[serde(skip)]
    pub(crate) reshape: Option<Reshape>,
}

/// How a breaking change confined to some columns ([`categorize::changed_columns`]) reshapes
/// its model's column list: which names it removes (dropped or renamed away) and adds, and
/// whether a column both versions have moves. `changed_columns` compares select items by name
/// only, and a child's lineage is worked out against the parent's new columns, where a removed
/// name no longer is: a child reading it by a name that now binds elsewhere (a select alias, an
/// outer query's column, `current_date`), reading whole rows (`to_json(p)`, `* EXCLUDE (…)`,
/// `NATURAL JOIN`) or columns by position (`AS p(a, b)`) would look like one that reads nothing
/// changed. So a child of a reshaping change keeps its data only when its query provably sees
/// none of the removed or added names and does not take the column list as it is
/// ([`crate::sql::sight`]), and its lineage against the old columns reads none of the changed
/// ones either ([`confined_read`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reshape {
    /// Names the old version has and the new one lacks, lower case.
    pub(crate) removed: BTreeSet<String>,
    /// Names the new version has and the old one lacked, lower case.
    pub(crate) added: BTreeSet<String>,
    /// A column both versions have is at another place in the list.
    pub(crate) moved: bool,
    /// The old version's columns as its relation exposed them (declared, then the kind's
    /// managed ones).
    pub(crate) old_columns: Vec<String>,
}

impl Reshape {
    /// The reshaping from the old declared schema `old` to the new one `new` of a model of
    /// `kind` (the same kind: a confined change never changes it); `None` when it removes, adds
    /// and moves nothing.
    fn of(old: &[(String, String)], new: &[(String, String)], kind: &Kind) -> Option<Self> {
        let managed: Vec<String> = kind.managed_columns().into_iter().map(|c| c.name).collect();
        let old_columns: Vec<String> = old.iter().map(|(n, _)| n.clone()).chain(managed.iter().cloned()).collect();
        let before: Vec<String> = old_columns.iter().map(|n| n.to_lowercase()).collect();
        let after: Vec<String> = new.iter().map(|(n, _)| n.to_lowercase()).chain(managed.iter().map(|n| n.to_lowercase())).collect();
        let removed: BTreeSet<String> = before.iter().filter(|n| !after.contains(n)).cloned().collect();
        let added: BTreeSet<String> = after.iter().filter(|n| !before.contains(n)).cloned().collect();
        let moved = before.iter().enumerate().any(|(i, n)| after.iter().position(|m| m == n).is_some_and(|j| j != i));
        (!removed.is_empty() || !added.is_empty() || moved).then_some(Reshape { removed, added, moved, old_columns })
    }

    /// The removed and added names: those a child's query may bind otherwise now.
    fn names(&self) -> BTreeSet<String> {
        self.removed.union(&self.added).cloned().collect()
    }

    /// What the reshaping does, for a child's reason: "removes `y`", "adds `z`", "moves columns".
    fn describe(&self) -> String {
        let list = |s: &BTreeSet<String>| s.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !self.removed.is_empty() {
            parts.push(format!("removes {}", list(&self.removed)));
        }
        if !self.added.is_empty() {
            parts.push(format!("adds {}", list(&self.added)));
        }
        if self.moved {
            parts.push("moves columns".to_string());
        }
        parts.join(" and ")
    }
}

/// How a child reads a parent's breaking change confined to some columns ([`confined_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfinedRead {
    /// It provably reads none of the changed columns: it keeps its data.
    Unread,
    /// Its lineage against the parent's new columns reads one of them, or cannot rule it out.
    Columns,
    /// The change reshapes the parent's column list ([`Reshape`]) and the child's query may see
    /// that: a removed or added name, whole rows, every column, columns by position; or its
    /// lineage against the old columns reads a changed one.
    Shape,
}

/// How `model` reads `parent`'s breaking change confined to `cols` (lower case), `reshape`
/// being how that change reshapes `parent`'s column list: through its lineage against the new
/// columns (`lineage`, [`lineage::reads_any`]); when the change reshapes the list, also when
/// `sees` (the model's [`crate::sql::sight::ColumnSight`] asked about some names) says its query
/// sees a removed or added name or takes the column list as it is, or when its lineage against
/// the parent's old columns reads one of `cols`. Anything unproven counts as a read: a kept
/// child that should have changed is a wrong answer, a rebuild for nothing only costs time.
fn confined_read(
    project: &Project,
    model: &Model,
    parent: &str,
    cols: &BTreeSet<String>,
    reshape: Option<&Reshape>,
    lineage: &lineage::ModelLineage,
    sees: impl FnOnce(&BTreeSet<String>) -> bool,
) -> ConfinedRead {
    if lineage::reads_any(lineage, parent, cols) {
        return ConfinedRead::Columns;
    }
    let Some(reshape) = reshape else { return ConfinedRead::Unread };
    if sees(&reshape.names()) {
        return ConfinedRead::Shape;
    }
    let mut parents = lineage::parent_columns(project, model);
    parents.insert(parent.to_string(), reshape.old_columns.clone());
    if lineage::reads_any(&lineage::model_lineage_over(project, model, &parents), parent, cols) {
        return ConfinedRead::Shape;
    }
    ConfinedRead::Unread
}

/// The [`crate::sql::sight::ColumnSight`] of `model`'s query, read as its canonical text was
/// (`source`): a body only DuckDB parses, or none, is seen whole.
fn column_sight_of(model: &Model, source: Option<CanonSource>) -> crate::sql::sight::ColumnSight {
    let rendered = model.body.as_ref().map(|b| b.render(&CanonicalResolver)).unwrap_or_default();
    match source {
        Some(CanonSource::SqlParser) => crate::sql::sight::column_sight(&rendered, false),
        Some(CanonSource::PgQuery) => crate::sql::sight::column_sight(&rendered, true),
        _ => crate::sql::sight::ColumnSight::Whole,
    }
}

/// What becomes of an `scd_type2` model's history when its environment moves to another version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryFate {
    /// The new version keeps the old table (forward-only, indirect reuse): nothing is lost.
    Kept,
    /// The new version's table starts from every row of the old one (open and closed versions,
    /// `valid_from`/`valid_to` kept), declared renames applied (`renamed`).
    Carried,
    /// The new version's table starts empty (or is another table): the history the environment
    /// served is no longer served. `apply` refuses unless `--reset-history` names the model.
    StartsOver,
}

impl HistoryFate {
    /// The fate as written in plans.
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryFate::Kept => "kept",
            HistoryFate::Carried => "carried over",
            HistoryFate::StartsOver => "starts over",
        }
    }
}

/// The history line of an `scd_type2` action (see [`HistoryFate`]).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// What becomes of it.
    pub fate: HistoryFate,
    /// The environment's version whose history it is.
    pub from: Fingerprint,
    /// Columns of that version the new one no longer declares (not renamed).
    pub dropped: Vec<String>,
    /// Columns the new version declares that the old one did not have (not renamed).
    pub added: Vec<String>,
    /// Declared renames that apply (old column of that version → new column).
    pub renamed: BTreeMap<String, String>,
    /// Columns declared with another type.
    pub retyped: Vec<String>,
    /// Why, in words.
    pub reason: String,
    /// True when the operator accepted that it starts over (`--reset-history`).
    pub reset_accepted: bool,
    /// The old version's physical relation (the rows a carried history is copied from).
    #[serde(skip)]
    pub from_physical: String,
    /// For a carried history the version holds already (built earlier, for this or another
    /// environment): the rows and closed versions its build copied from `from_physical`. Apply
    /// checks the old table still holds exactly those, so nothing it recorded since is lost.
    #[serde(skip)]
    pub copied: Option<(usize, usize)>,
    /// True when a declared `renamed` can carry it over (a version still to build, still
    /// `scd_type2`, same managed columns).
    #[serde(skip)]
    pub rename_ok: bool,
    /// True when `--forward-only` would be accepted and keep the old table (a version still to
    /// build, the kind's key and managed columns unchanged, columns only added, no other
    /// environment sharing that table).
    #[serde(skip)]
    pub forward_only_ok: bool,
    /// When the history would start over only because unique-key or partition models upstream
    /// are built anew from their query alone ([`DropsKept`]): those models, each of which
    /// `--forward-only` would keep on its table (then this model keeps its table and history,
    /// its inputs unchanged). Empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upstream_drops_kept: Vec<String>,
}

impl History {
    /// The columns changed, in words (`dropped `a`; added `b`; renamed `c` → `d``), or empty.
    pub fn columns_text(&self) -> String {
        let list = |v: &[String]| v.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !self.dropped.is_empty() {
            parts.push(format!("dropped {}", list(&self.dropped)));
        }
        if !self.added.is_empty() {
            parts.push(format!("added {}", list(&self.added)));
        }
        if !self.renamed.is_empty() {
            parts.push(format!("renamed {}", self.renamed.iter().map(|(o, n)| format!("`{o}` → `{n}`")).collect::<Vec<_>>().join(", ")));
        }
        if !self.retyped.is_empty() {
            parts.push(format!("retyped {}", list(&self.retyped)));
        }
        parts.join("; ")
    }

    /// True when applying would discard the history without the operator's consent.
    pub fn refused(&self) -> bool {
        self.fate == HistoryFate::StartsOver && !self.reset_accepted
    }

    /// What a declared `renamed` could carry the history over, when the refusal should offer it:
    /// the dropped columns `renamed` does not name yet and the added ones, `None` unless it would
    /// be accepted (`rename_ok`) and some column was dropped and some added (a retyped column,
    /// or a table built anew upstream, is no rename).
    pub fn rename_candidates(&self) -> Option<(Vec<&str>, Vec<&str>)> {
        let dropped: Vec<&str> = self.dropped.iter().filter(|c| !self.renamed.contains_key(*c)).map(String::as_str).collect();
        let added: Vec<&str> = self.added.iter().map(String::as_str).collect();
        (self.rename_ok && !dropped.is_empty() && !added.is_empty()).then_some((dropped, added))
    }
}

/// The refusal `apply` gives when the plan would start an `scd_type2` model's history over
/// without `--reset-history` naming it: every such model, and the three ways forward.
pub fn history_refusal(plan: &Plan) -> Option<String> {
    let refused: Vec<(&Action, &History)> = plan.actions.iter().filter_map(|a| a.history.as_ref().filter(|h| h.refused()).map(|h| (a, h))).collect();
    if refused.is_empty() {
        return None;
    }
    let mut s = format!(
        "refusing to apply `{}`: the history of {} would start over, and history is never discarded without an explicit choice; nothing was done",
        plan.env,
        refused.iter().map(|(a, _)| format!("scd_type2 model `{}`", a.name)).collect::<Vec<_>>().join(", ")
    );
    for (a, h) in &refused {
        s.push_str(&format!("\n  `{}`: {}", a.name, h.reason));
        let cols = h.columns_text();
        if !cols.is_empty() {
            s.push_str(&format!(" (columns: {cols})"));
        }
    }
    s.push_str("\n  choose, per model:");
    let renames: Vec<_> = refused.iter().filter_map(|(a, h)| h.rename_candidates().map(|c| (*a, c))).collect();
    for (a, (dropped, added)) in &renames {
        if let ([old], [new]) = (dropped.as_slice(), added.as_slice()) {
            s.push_str(&format!(
                "\n  - carry the history over a column rename: declare it in the kind of `{}`, `renamed = {{ {old} = \"{new}\" }}` (Lua; Rhai `renamed: #{{ {old}: \"{new}\" }}`; SQL `renamed = {{{old} = {new}}}`)",
                a.name
            ));
        }
    }
    if renames.iter().any(|(_, (dropped, added))| dropped.len() != 1 || added.len() != 1) {
        s.push_str("\n  - carry the history over a column rename: declare `renamed = { old = \"new\" }` in the model's kind");
    }
    let upstream: BTreeSet<&str> = refused.iter().flat_map(|(_, h)| h.upstream_drops_kept.iter().map(String::as_str)).collect();
    if !upstream.is_empty() {
        let list = upstream.iter().copied().collect::<Vec<_>>().join(",");
        s.push_str(&format!(
            "\n  - keep the rows the unique-key or partition model{} upstream kept, and with them {} table and history: `--forward-only {list}`",
            if upstream.len() == 1 { "" } else { "s" },
            if refused.len() == 1 { "this model's" } else { "these models'" }
        ));
    }
    let forward: Vec<String> = refused.iter().filter(|(_, h)| h.forward_only_ok).map(|(a, _)| a.name.to_string()).collect();
    if !forward.is_empty() {
        let keys = if refused.iter().any(|(_, h)| h.forward_only_ok && !h.upstream_drops_kept.is_empty()) {
            "; its next reconcile then closes the keys that a model upstream, built anew from its query alone, no longer returns"
        } else {
            ""
        };
        s.push_str(&format!("\n  - keep the table and its history (columns only added): `--forward-only {}`{keys}", forward.join(",")));
    }
    for (a, _) in &refused {
        s.push_str(&format!("\n  - start the history of `{}` over: `--reset-history {}`", a.name, a.name));
    }
    Some(s)
}

/// Done intervals a time-range version's table holds outside the model's declared bounds
/// ([`Action::outside_bounds`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutsideBounds {
    /// How many grain intervals.
    pub intervals: usize,
    /// From the start of the first to the end of the last.
    pub range: Interval,
}

/// A unique-key or partition model whose environment served a version on a table its refreshes
/// filled (a build is the first refresh) and whose new version is served from another table
/// ([`Action::drops_kept`]). Such a table keeps what earlier refreshes wrote — keys and
/// partitions the query may no longer return (the kinds never delete by absence) — and a version
/// built anew holds only what its query returns now: those rows are no longer served. The plan
/// reads the state store alone, so it cannot count them; it says they may be there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DropsKept {
    /// The environment's version whose table holds them.
    pub from: Fingerprint,
    /// True when this plan builds the new version from its query alone; false when it is a version
    /// that exists already on a table of its own (built earlier, here or for another
    /// environment), which holds what its own refreshes kept instead.
    pub built: bool,
    /// True when `--forward-only` would be accepted and keep the old table (a version still to
    /// build, the same kind, key or partition columns, columns only added, no other environment
    /// sharing the table outside `prod`).
    pub forward_only_ok: bool,
}

impl DropsKept {
    /// The note the text plan prints for `model`.
    pub fn note(&self, model: &ModelName) -> String {
        let from = self.from.short();
        let what = if self.built {
            format!(
                "built from its query alone: rows earlier refreshes kept in the table of @{from} that the query no longer returns are not in the new version"
            )
        } else {
            format!(
                "served from the table of a version that exists already (built earlier, here or for another environment): rows earlier refreshes kept in the table of @{from} that it lacks are no longer served"
            )
        };
        if self.forward_only_ok { format!("{what}; `--forward-only {model}` keeps the table") } else { what }
    }
}

/// The done intervals (`done`, their starts) outside `[start, end)` of `t` (`start` floored to
/// the grain): they stay in the table, and the environment's view serves them, as sqlmesh's
/// does — moving `start` later or `end` earlier deletes no rows, and an environment pointing at
/// a version another environment computed with wider bounds serves what is in its table. The
/// plan says so rather than letting it pass unseen.
pub fn outside_bounds(t: &crate::core::kind::TimeRange, done: &BTreeSet<Millis>) -> Option<OutsideBounds> {
    let outside: Vec<Millis> = done.iter().copied().filter(|s| !t.holds(*s)).collect();
    let (first, last) = (*outside.first()?, *outside.last()?);
    Some(OutsideBounds { intervals: outside.len(), range: Interval::new(first, t.grain.next(last)) })
}

/// The intervals the bounds of `olds` held up to `due` (each the `schedule` of a metadata
/// ([`metadata_text`]) the table's rows may have been computed under: what the environment
/// served for this version, the version's own first metadata, the one whose table it inherits)
/// that `t` no longer holds and `done` lacks ([`Action::undone_outside`]): a restatement clears
/// done intervals and keeps their rows until a run recomputes them, so moving `start` past a
/// restated range before running — in the same version, or pointing an environment at a
/// version, or a forward-only version, with narrower bounds — would leave those rows served
/// with no ledger entry and no plan line. `None` when no bounds narrowed.
pub fn undone_outside_bounds(t: &crate::core::kind::TimeRange, olds: &[serde_json::Value], done: &BTreeSet<Millis>, due: Millis) -> Option<OutsideBounds> {
    let mut outside = Vec::new();
    for old in olds {
        outside.extend(undone_outside_of(t, old, due).unwrap_or_default());
    }
    outside.retain(|s| !t.holds(*s) && !done.contains(s));
    outside.sort_unstable();
    outside.dedup();
    let (first, last) = (*outside.first()?, *outside.last()?);
    Some(OutsideBounds { intervals: outside.len(), range: Interval::new(first, t.grain.next(last)) })
}

/// The starts of the intervals `old`'s bounds held up to `due` that `t` no longer holds.
fn undone_outside_of(t: &crate::core::kind::TimeRange, old: &serde_json::Value, due: Millis) -> Option<Vec<Millis>> {
    let schedule = old.get("schedule")?;
    let old_start = interval::parse_instant(schedule.get("start")?.as_str()?).ok()?;
    let old_end = match schedule.get("end") {
        Some(serde_json::Value::String(e)) => Some(interval::parse_instant(e).ok()?),
        _ => None,
    };
    // Only the part of the old bounds the new ones leave out: before the new start, after the
    // new end (never the whole history when the bounds did not move).
    let mut outside = Vec::new();
    let new_start = t.grain.floor(t.start);
    if old_start < new_start {
        let until = old_end.map_or(new_start, |e| e.min(new_start));
        outside.extend(interval::wanted(old_start, Some(until), t.grain, due).into_iter().map(|i| i.start));
    }
    if let Some(new_end) = t.end
        && old_end.is_none_or(|e| e > new_end)
    {
        let from = t.grain.floor(new_end).max(t.grain.floor(old_start));
        outside.extend(interval::wanted(from, old_end, t.grain, due).into_iter().map(|i| i.start).filter(|s| !t.holds(*s)));
    }
    Some(outside)
}

/// What, of a time-range version's table outside `prod`, only the table's writer writes: the
/// table is the one another environment's other version of the model (the same query) serves,
/// and that environment writes it — `prod` when it serves one there, else the one serving the
/// oldest version there ([`generations::writer_elsewhere`]; [`Action::writer_holds`]). Missing
/// intervals, recomputations ([`recompute`]) and auto-restatements (a lookback, a parent's
/// rewrite) leave out every interval it holds: rows the writer serves would change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WriterHolds {
    /// Not such a table (or this is `prod`, or this environment's version is the writer's):
    /// this environment writes its own intervals.
    #[default]
    Nothing,
    /// The versions read the same parent tables: the intervals the writer's version has done,
    /// and those before the first of them (this environment computes the others, the rows the
    /// writer's would).
    Done(BTreeSet<Millis>),
    /// The versions read other parent tables (a non-breaking parent change here): every
    /// interval. This environment serves the writer's computation and writes nothing there.
    All {
        /// The environment that writes the table.
        writer: String,
        /// The intervals its version has done.
        done: BTreeSet<Millis>,
        /// The intervals this environment wants that the writer's version has not done: they
        /// appear here as the writer computes them.
        withheld: usize,
        /// Why: `false` for the versions reading other parent tables; `true` for `prod` serving
        /// this very version under other settings that decide its writes ([`prod_writes_it`]).
        settings: bool,
        /// The done intervals (their starts) this environment would recompute because a model
        /// upstream rewrites them or was built anew ([`recompute::stale_on_return`],
        /// [`recompute::propagate`]), left to the writer as every other interval: counted in the
        /// plan's note with `withheld` ([`work::decide`]).
        stale: BTreeSet<Millis>,
    },
    /// A unique-key, partition or SCD type 2 version on such a table, over other parent tables:
    /// never refreshed here (its rows are the writer's last refresh), so the time-range models
    /// below wait for their intervals ending after that refresh ([`recompute::hold_for_writer`]).
    Refreshes {
        /// The environment that writes (refreshes) the table.
        writer: String,
        /// The instant up to which the writer's last refresh of its version holds rows
        /// ([`crate::state::refreshed_until`]: the `now` of that apply or run, for a model on a
        /// `cron` the tick it was refreshed for, or earlier when a time-range ancestor lacked
        /// intervals from there on), `None` when no refresh is recorded.
        at: Option<Millis>,
        /// As [`WriterHolds::All`]'s.
        settings: bool,
    },
    /// A `full` version on the table `prod` serves (this very version, or another version of the
    /// model stored there) while this environment lacks one of the audits `prod` serves it under,
    /// or runs other pre/post statements ([`prod_rebuilds_under`]): never rebuilt here. A rebuild
    /// replaces the whole table `prod` serves, and would serve `prod` rows its audits never
    /// checked; `prod`'s own apply and run rebuild it (under `prod`'s audits), and this
    /// environment serves `prod`'s last build of it ([`work::decide`] says so where a rebuild
    /// would be due here).
    Rebuilds {
        /// The environment that rebuilds the table (`prod`).
        writer: String,
        /// Why a rebuild would be due here besides this plan's own new data upstream: the
        /// version's last build read other data than its parents hold now, or a rebuild is
        /// pending ([`mark_rebuilds`] records it here instead of marking the action, which
        /// would make every plan of this environment one with changes that no apply does).
        behind: Option<String>,
    },
}

impl WriterHolds {
    /// True when the interval starting at `start` is the writer's to write.
    pub fn holds(&self, start: Millis) -> bool {
        match self {
            WriterHolds::Nothing | WriterHolds::Refreshes { .. } | WriterHolds::Rebuilds { .. } => false,
            // Nor one before the first it has done: the writer never computes those (before its
            // `start`), and its view would serve them.
            WriterHolds::Done(done) => done.contains(&start) || done.first().is_some_and(|f| start < *f),
            WriterHolds::All { .. } => true,
        }
    }

    /// The intervals the writer's version has done on the table (served here too).
    pub fn writer_done(&self) -> Option<&BTreeSet<Millis>> {
        match self {
            WriterHolds::Nothing | WriterHolds::Refreshes { .. } | WriterHolds::Rebuilds { .. } => None,
            WriterHolds::Done(done) | WriterHolds::All { done, .. } => Some(done),
        }
    }

    /// Records the done intervals of `held` (starts) that a rewrite upstream would have this
    /// environment recompute and that the writer holds ([`WriterHolds::All`]'s `stale`): the
    /// plan says they are not computed here.
    fn leave_stale(&mut self, held: impl IntoIterator<Item = Millis>) {
        if let WriterHolds::All { stale, .. } = self {
            stale.extend(held);
        }
    }

    /// Records why a `full` version left to `prod` ([`WriterHolds::Rebuilds`]) would be rebuilt
    /// here (the first reason found is kept); nothing for the other holds.
    fn fall_behind(&mut self, why: String) {
        if let WriterHolds::Rebuilds { behind, .. } = self
            && behind.is_none()
        {
            *behind = Some(why);
        }
    }

    /// Keeps, of `missing`, the intervals this environment computes; counts the others the
    /// writer has not done ([`WriterHolds::All`]'s `withheld`).
    fn keep_own(&mut self, missing: &mut Vec<Interval>) {
        if let WriterHolds::All { done, withheld, .. } = self {
            *withheld = missing.iter().filter(|i| !done.contains(&i.start)).count();
        }
        missing.retain(|i| !self.holds(i.start));
    }
}

/// What each model of `plan` is served from: `(relation, fingerprint)` by name (the relation
/// empty for a version without one), for [`generations::direct_reads`].
pub fn served_in(plan: &Plan) -> HashMap<String, (String, String)> {
    plan.actions
        .iter()
        .filter(|a| a.change != Change::Removed)
        .map(|a| (a.name.to_string(), (a.physical.clone().unwrap_or_default(), a.fingerprint.as_str().to_string())))
        .collect()
}

/// A time-range action's intervals held back because a model upstream is left to another
/// environment, its table's writer ([`recompute::hold_for_writer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitsForWriter {
    /// The model upstream, on the writer's table, whose rows here end at `from`.
    pub upstream: ModelName,
    /// The environment that writes the upstream model's table.
    pub writer: String,
    /// The instant from which the action's intervals wait.
    pub from: Millis,
    /// How many of its intervals wait.
    pub intervals: usize,
}

/// One model's line in the plan.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    /// `schema.table`.
    pub name: ModelName,
    /// Kind tag (`full`, `view`, `embedded`, `incremental_by_time_range`, `external`).
    pub kind: &'static str,
    /// The change category.
    pub change: Change,
    /// The automatic category, when `--reclassify` overrode it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclassified_from: Option<Change>,
    /// The version the project defines (for `removed`: the environment's).
    pub fingerprint: Fingerprint,
    /// The environment's version, when it has one and it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Fingerprint>,
    /// The version whose physical storage and done intervals this one inherits (indirect
    /// reuse, forward-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<Fingerprint>,
    /// Qualified physical relation (`"_efmesh"."<schema>__<table>__<fp>"`, or the inherited one),
    /// for materialised kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<String>,
    /// True when this version must be built (no snapshot and no inherited storage).
    pub build: bool,
    /// True when this version has no storage to build (an embedded model, inlined wherever it
    /// is read) and apply only registers it: records its snapshot. Never both with `build`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub register: bool,
    /// Time-range models: the merged `[start, end)` UTC ranges still to compute.
    pub backfill: Vec<Interval>,
    /// Number of grain intervals in `backfill`.
    pub intervals: usize,
    /// Time-range versions: the done intervals in `backfill` recomputed because a time-range
    /// model upstream rewrites them in this plan ([`recompute`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recompute: Option<recompute::Recompute>,
    /// Time-range versions: the done intervals its table holds outside the `start`/`end` this
    /// project declares (computed under wider bounds: an earlier edit, or another environment
    /// serving the same version): the environment's view serves them ([`outside_bounds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_bounds: Option<OutsideBounds>,
    /// Time-range versions whose `start`/`end` this plan narrows (a `metadata` change, or the
    /// environment pointed at a version or a forward-only version on a table computed under
    /// wider bounds): the intervals the wider bounds held, now outside them, that its ledger does
    /// not hold done — restated or failed and not recomputed since, or not yet run. Rows its
    /// table holds there (a restatement keeps the old rows until a run replaces them) are
    /// served as they are, and a run here never recomputes them ([`undone_outside_bounds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undone_outside: Option<OutsideBounds>,
    /// Time-range, unique-key, partition and SCD type 2 versions outside `prod` on a table
    /// another environment's other version serves and writes (or `prod`'s very version, under
    /// other settings), and `full` versions on the table `prod` serves under audits this
    /// environment lacks: what of that table this environment never writes ([`WriterHolds`]).
    #[serde(skip)]
    pub writer_holds: WriterHolds,
    /// Time-range versions whose intervals from some instant wait for rows a model upstream
    /// leaves to `prod` ([`recompute::hold_for_writer`]).
    #[serde(skip)]
    pub waits_for_writer: Option<WaitsForWriter>,
    /// Which parser produced the canonical body (`sqlparser`, or the `duckdb-json` fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canonical_source: Option<CanonSource>,
    /// Why the category followed (absent for `added` and `unchanged`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
    /// `scd_type2` models whose environment served another version: what becomes of the
    /// history that version recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
    /// Unique-key and partition models whose new version is served from another table than the
    /// one the environment's version filled: the rows its refreshes kept there are not served
    /// any more ([`DropsKept`]). Its children are judged as under a change of their parent's
    /// data (they rebuild), never as reading the same rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drops_kept: Option<DropsKept>,
    /// Columns a forward-only version adds to the inherited table.
    #[serde(skip)]
    pub new_columns: Vec<crate::core::Column>,
    /// The metadata a new snapshot records (for versions built or inheriting storage; `null`
    /// otherwise). What an environment serves is recorded with its pointers at promotion.
    #[serde(skip)]
    pub metadata: serde_json::Value,
    /// What the engine lacks of this action's relations and the plan restores (set by
    /// [`integrity::check`]; absent when the engine holds everything).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<integrity::Repair>,
    /// `full`/`view` versions: an earlier apply or run decided to rebuild this version
    /// (downstream of new intervals of a parent) and stopped before it did, so its relation may
    /// be stale, or it was built from older data than its parents hold; apply and run rebuild it
    /// ([`crate::state::StateStore::pending_rebuilds`]). Unique-key, partition and SCD type 2
    /// versions: apply and run refresh it (its refresh is pending likewise, or, not SCD, it is
    /// pointed at anew over changed parents).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rebuild: bool,
    /// Why `rebuild` is set: a pending rebuild's (or refresh's) record, the parents whose data
    /// changed since the version was built ([`generations`]), or a parent rebuilt by this plan.
    /// (On a unique-key or partition version the environment points at anew, or one inheriting
    /// its older version's table: refreshed, as `run` would, its parents' data having changed
    /// since its table's last refresh, `mark_stale_builds`.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_reason: Option<String>,
    /// The model's `owner` (a model property, metadata), for readers of `plan --json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The model's `tags` (a model property, metadata).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl Action {
    /// True when applying this action writes data, views or snapshot metadata.
    pub fn has_work(&self) -> bool {
        self.change != Change::Unchanged || self.build || self.register || !self.backfill.is_empty() || self.repair.is_some() || self.rebuild
    }

    /// True when the environment serves another version of the model after this action (added,
    /// changed or indirect: not unchanged, removed or a `metadata` change, which keeps the one it
    /// serves).
    pub fn points_anew(&self) -> bool {
        !matches!(self.change, Change::Removed | Change::Unchanged | Change::Metadata)
    }

    /// True when the plan points its environment at a version that exists already (built for
    /// another environment, or served before an edit now undone) and that it does not serve now:
    /// nothing built, no table inherited, and neither unchanged, metadata-only nor removed.
    pub fn points_at_existing(&self) -> bool {
        !self.build && self.reused_from.is_none() && self.points_anew()
    }
}

/// Operator choices for a plan.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Time-range, unique-key, partition and SCD type 2 models whose new version keeps the old
    /// storage and history (`--forward-only`).
    pub forward_only: BTreeSet<ModelName>,
    /// The operator's verdict (`breaking` or `non-breaking`) over the automatic one.
    pub reclassify: BTreeMap<ModelName, Change>,
    /// `scd_type2` models whose history the operator accepts to start over (`--reset-history`).
    pub reset_history: BTreeSet<ModelName>,
}

/// The categories `--reclassify` takes, in the order the errors list them.
const RECLASSIFY_CATEGORIES: [&str; 2] = ["breaking", "non-breaking"];

impl Options {
    /// Parses `--forward-only a.b,c.d` and `--reclassify a.b=breaking,c.d=non-breaking`.
    ///
    /// # Errors
    /// A message naming the malformed entry.
    pub fn parse(forward_only: &str, reclassify: &str) -> Result<Options, String> {
        let mut o = Options::default();
        for n in forward_only.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            o.forward_only.insert(ModelName::parse(n).map_err(|e| format!("--forward-only: {e}"))?);
        }
        for entry in reclassify.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (m, c) = entry.split_once('=').ok_or_else(|| format!("--reclassify: `{entry}` must be `model=breaking` or `model=non-breaking`"))?;
            let change = match c.trim() {
                "breaking" => Change::Breaking,
                "non-breaking" => Change::NonBreaking,
                other => {
                    // `nonbreaking`, `non_breaking`, `Breaking`: the category meant, named; a
                    // category before the `=`: the model goes first.
                    let meant = if RECLASSIFY_CATEGORIES.contains(&m.trim()) {
                        format!(" (the model goes first: `{other}={}`)", m.trim())
                    } else {
                        crate::core::error::did_you_mean(other, RECLASSIFY_CATEGORIES).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
                    };
                    return Err(format!("--reclassify: `{other}` is not `breaking` or `non-breaking`{meant}"));
                }
            };
            o.reclassify.insert(ModelName::parse(m.trim()).map_err(|e| format!("--reclassify: {e}"))?, change);
        }
        Ok(o)
    }

    /// Adds `--reset-history` models (each value one name or a comma-separated list).
    ///
    /// # Errors
    /// A message naming the malformed entry.
    pub fn with_reset_history(mut self, names: &[String]) -> Result<Options, String> {
        for n in names.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            self.reset_history.insert(ModelName::parse(n).map_err(|e| format!("--reset-history: {e}"))?);
        }
        Ok(self)
    }

    /// True when the operator made no choice (the only plans the memo covers).
    pub fn is_default(&self) -> bool {
        self.forward_only.is_empty() && self.reclassify.is_empty() && self.reset_history.is_empty()
    }
}

/// The diff of a project against one environment at one instant.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Environment name.
    pub env: String,
    /// True when the environment has no record in the state store yet (no model served: never
    /// applied, or dropped), so that applying the plan creates it. Filled by the commands that
    /// show a plan (`plan`, `apply`: [`Plan::mark_new_environment`]); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_environment: Option<bool>,
    /// For a new environment, the existing one its name is close to (`prod` for `prd`): a typo
    /// would otherwise plan a whole new environment with no sign of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub did_you_mean: Option<String>,
    /// For a new environment, the environments the state store holds, sorted (the text report
    /// names them; empty for a project's first environment, whose plan says nothing of it).
    #[serde(skip)]
    pub existing_environments: Vec<String>,
    /// The instant intervals were computed for (UTC ms); intervals ending after it are not due.
    #[serde(serialize_with = "interval::serialize_iso")]
    pub now: Millis,
    /// True when applying would change anything (a version, a build, a backfill, metadata).
    pub has_changes: bool,
    /// Every project model in topological order, then removed ones.
    pub actions: Vec<Action>,
    /// Canonical digests computed because the cache lacked them: (cache key, cached value).
    #[serde(skip)]
    pub canon_cache_misses: Vec<(String, String)>,
    /// True when this plan was replayed from the environment's memo rather than computed.
    #[serde(skip)]
    pub from_memo: bool,
    /// The state store's write counter ([`StateStore::generation`]) when the plan was read;
    /// `apply` refuses the plan if the store has changed since (another process applied).
    #[serde(skip)]
    pub generation: Option<i64>,
    /// What applying it writes besides its builds and backfills ([`work::decide`]): `full`/`view`
    /// models rebuilt downstream of new data, models refreshed as `run` would. Filled by the
    /// commands that show a plan (`plan`, `apply`); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_writes: Vec<work::Refresh>,
    /// What `apply` would refuse of this plan before writing anything, as it would say it
    /// (`crate::apply::refusal`: a table another environment's version took over, bounds
    /// outside another environment's): filled by `plan`, so that a plan whose work `apply`
    /// refuses says so; `None` otherwise.
    #[serde(rename = "applyRefuses", skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl Plan {
    /// Records whether the plan's environment is new, `known` being the environments the state
    /// store holds ([`StateStore::environments`]): [`Plan::new_environment`], and for a new one
    /// the others and the one its name is close to.
    pub fn mark_new_environment(&mut self, known: Vec<String>) {
        let new = !known.contains(&self.env);
        self.new_environment = Some(new);
        if new {
            self.did_you_mean = crate::core::error::did_you_mean(&self.env, known.iter().map(String::as_str)).map(str::to_string);
            self.existing_environments = known;
        }
    }

    /// The action for `name`.
    pub fn action(&self, name: &ModelName) -> Option<&Action> {
        self.actions.iter().find(|a| &a.name == name)
    }

    /// Counts of actions per change, in a fixed order.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for a in &self.actions {
            *m.entry(a.change.as_str()).or_insert(0) += 1;
        }
        m
    }
}

/// Why a plan could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The environment name is invalid.
    #[error(transparent)]
    Env(#[from] crate::core::name::NameError),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A model's SQL has no canonical form.
    #[error("{location}: model `{model}`: {error}")]
    Sql {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: Location,
        /// The parse error.
        error: SqlError,
    },
    /// `--reclassify` or `--forward-only` cannot be honoured.
    #[error("{0}")]
    Operator(String),
    /// An environment recorded before the naming rules already serves a view this plan would
    /// write (see [`check_legacy_views`]).
    #[error("{0}")]
    ViewConflict(String),
    /// A time-range model wants more intervals than a plan lists
    /// ([`crate::core::interval::MAX_WANTED`]): a `start` long before its data, on a fine grain.
    #[error("{location}: model `{model}`: {message}")]
    TooManyIntervals {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: Location,
        /// How many, and what to do.
        message: String,
    },
    /// A model new to the environment would get its view where a relation efmesh did not create
    /// already stands (a user's own view or table of that name, [`integrity::check`]).
    #[error("{location}: model `{model}`: {message}")]
    ForeignRelation {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: Location,
        /// Which relation, and what to do.
        message: String,
    },
    /// The engine database is older than the state store says (its epoch stamp is behind the
    /// store's, [`crate::engine::epoch`]): a backup restored after later runs, or another
    /// database applied with this store since. The message names both and the ways forward.
    #[error("{0}")]
    EngineBehind(String),
    /// A model needs what the project's engine does not have: a feature (files read by an
    /// external model on Postgres), or a name longer than its identifiers may be
    /// ([`check_engine`]).
    #[error("{location}: model `{model}`: {message}")]
    EngineFeature {
        /// The model.
        model: ModelName,
        /// Where it is defined.
        location: Location,
        /// What the model needs that the engine lacks, and what to do.
        message: String,
    },
}

/// Refuses, before anything is planned, a model the project's engine cannot hold: one needing a
/// [`crate::engine::dialect::Feature`] the engine lacks (DuckDB-only targets and file sources
/// on Postgres), or whose schema, table or environment schema (`<env>__<schema>`) is longer than
/// the engine's identifiers may be (Postgres would cut it silently). Physical names are
/// shortened instead ([`physical_table_within`]): no one types them.
///
/// # Errors
/// [`PlanError::EngineFeature`] naming the first such model, its file:line and what it needs.
pub fn check_engine(project: &Project, env: &str, dialect: &dyn Dialect) -> Result<(), PlanError> {
    let limit = dialect.max_identifier_bytes();
    for model in project.dag.models() {
        let refuse = |message: String| PlanError::EngineFeature { model: model.name.clone(), location: model.location.clone(), message };
        if let Some(feature) = crate::engine::dialect::Feature::needed_by(model).filter(|f| !dialect.supports(*f)) {
            return Err(refuse(format!("needs {}, which the {} engine does not have", feature.describe(), dialect.title())));
        }
        let Some(limit) = limit else { continue };
        let env_schema = env_schema(env, model.name.schema());
        let columns = model.relation_columns();
        let named = [("schema", model.name.schema()), ("table", model.name.table()), ("environment schema", env_schema.as_str())];
        for (what, ident) in named.into_iter().chain(columns.iter().map(|c| ("column", c.name.as_str()))) {
            if ident.len() > limit {
                return Err(refuse(format!(
                    "its {what} name `{ident}` is {} bytes long, and the {} engine keeps identifiers of at most {limit} bytes (it would cut the name): choose a shorter name",
                    ident.len(),
                    dialect.title()
                )));
            }
        }
    }
    Ok(())
}

/// Fingerprints and canonical digests of every model of a project.
#[derive(Debug, Clone, Default)]
pub struct Versions {
    /// Fingerprint per model.
    pub fingerprints: BTreeMap<ModelName, Fingerprint>,
    /// Canonical-body digest per model (absent for externals).
    pub digests: BTreeMap<ModelName, String>,
    /// Which parser produced each canonical body.
    pub sources: BTreeMap<ModelName, CanonSource>,
    /// Cache entries computed because the cache lacked them: (key, `<source>:<digest>`).
    pub misses: Vec<(String, String)>,
}

/// The canon-cache key of a body canonically rendered for the engine `dialect` names (`duckdb`,
/// `postgres`): blake3 of `"<FINGERPRINT_VERSION>.<CANON_RULES>:<dialect>:<text>"`, so a version bump or
/// another engine's grammar never reads a stale entry.
pub fn canon_cache_key(dialect: &str, rendered: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(format!("{FINGERPRINT_VERSION}.{}:{dialect}:", crate::sql::canon::CANON_RULES).as_bytes());
    h.update(rendered.as_bytes());
    h.finalize().to_hex().to_string()
}

/// What `prod` serves: its pointers and its metadata, by model name (read once per plan).
pub type ProdServes = (BTreeMap<String, String>, BTreeMap<String, String>);

/// Outside `prod`: whether `prod` serves this very version — its table too — under other settings
/// that decide what is written there (`lookback`, `auto_restatement_intervals`, `cron`, pre/post
/// statements, or one of `prod`'s audits missing here: [`writes_of`]). `prod`'s settings decide then: this environment writes
/// nothing there (its lookback would rewrite rows `prod` serves, a cron it lacks compute an
/// interval before `prod`'s data lands, an audit it dropped let rows `prod`'s refuses in) and
/// serves what `prod` computes.
///
/// # Errors
/// A state store read.
pub fn prod_writes_it(state: &dyn StateStore, prod: &mut Option<ProdServes>, env: &str, name: &str, fp: &str, model: &Model) -> Result<bool, StateError> {
    prod_writes_under(state, prod, env, name, fp, || metadata_text(model))
}

/// [`prod_writes_it`] for the version `(name, fp)` under the metadata text `our_metadata` gives
/// (asked only when `prod` serves that version): `status` asks it of the metadata an environment serves,
/// whatever the working tree declares.
///
/// # Errors
/// A state store read.
pub fn prod_writes_under(
    state: &dyn StateStore,
    prod: &mut Option<ProdServes>,
    env: &str,
    name: &str,
    fp: &str,
    our_metadata: impl FnOnce() -> String,
) -> Result<bool, StateError> {
    if env == crate::core::name::PROD {
        return Ok(false);
    }
    if prod.is_none() {
        *prod = Some((state.env_pointers(crate::core::name::PROD)?, state.env_metadata(crate::core::name::PROD)?));
    }
    let (pointers, metadata) = prod.as_ref().expect("read just above");
    if pointers.get(name).map(String::as_str) != Some(fp) {
        return Ok(false);
    }
    let Some(served) = metadata.get(name) else { return Ok(false) };
    Ok(writes_differently(served, &our_metadata(), &["lookback", "auto_restatement_intervals", "cron", "statements"]))
}

/// Outside `prod`: whether the `full` version `(name, fp)`, stored on `physical`, is on the table
/// `prod` serves — this very version, or another version of the model stored there (an
/// inherited table, by `snapshots`) — while the metadata `our_metadata` gives lacks one of the audits `prod`
/// serves it under, or declares other pre/post statements ([`writes_of`]). A rebuild replaces
/// the whole table: rebuilt here, `prod` would serve rows its audits never checked (or its
/// statements never shaped), so `prod` rebuilds it ([`WriterHolds::Rebuilds`]) and this
/// environment serves `prod`'s last build. (A `cron` only says when: any environment's rebuild
/// reads the same parent tables; an audit added here only refuses more.) `status` asks it of
/// the metadata an environment serves.
///
/// # Errors
/// A state store read.
pub fn prod_rebuilds_under(
    state: &dyn StateStore,
    snapshots: &crate::state::SnapshotIndex,
    prod: &mut Option<ProdServes>,
    env: &str,
    (name, fp, physical): (&str, &str, &str),
    our_metadata: impl FnOnce() -> String,
) -> Result<bool, StateError> {
    if env == crate::core::name::PROD || physical.is_empty() {
        return Ok(false);
    }
    if prod.is_none() {
        *prod = Some((state.env_pointers(crate::core::name::PROD)?, state.env_metadata(crate::core::name::PROD)?));
    }
    let (pointers, metadata) = prod.as_ref().expect("read just above");
    let Some(theirs) = pointers.get(name) else { return Ok(false) };
    if theirs != fp && snapshots.get(&(name.to_string(), theirs.clone())).is_none_or(|(p, _)| p != physical) {
        return Ok(false);
    }
    let Some(served) = metadata.get(name) else { return Ok(false) };
    Ok(writes_differently(served, &our_metadata(), &["statements"]))
}

/// True when the metadata text `ours` lacks one of the audits of `served` (only one of those
/// lets in rows the other's refuses: an audit added in `ours` refuses more, so what it lets
/// through passes `served`'s too), or differs from it in one of the other `settings`
/// ([`writes_of`]'s keys).
fn writes_differently(served: &str, ours: &str, settings: &[&str]) -> bool {
    let (theirs, ours) = (writes_of(served), writes_of(ours));
    let audits = |v: &serde_json::Value| v["audits"].as_array().cloned().unwrap_or_default();
    let ours_audits = audits(&ours);
    audits(&theirs).iter().any(|a| !ours_audits.contains(a)) || settings.iter().any(|k| theirs[*k] != ours[*k])
}

/// The parts of a model's metadata ([`metadata_text`]) that decide what its runs write into its
/// table (not its description, owner, tags, column descriptions, `start`/`end` — those are
/// `apply::shared_bounds`' — or `batch_size`).
fn writes_of(metadata: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(metadata).unwrap_or_default();
    let schedule = v.get("schedule");
    serde_json::json!({
        "lookback": schedule.and_then(|s| s.get("lookback")).cloned().unwrap_or_default(),
        "auto_restatement_intervals": schedule.and_then(|s| s.get("auto_restatement_intervals")).cloned().unwrap_or(serde_json::json!(0)),
        "audits": v.get("audits").cloned().unwrap_or_else(|| serde_json::json!([])),
        "cron": v.get("cron").cloned().unwrap_or_default(),
        "statements": v.get("statements").cloned().unwrap_or_default(),
    })
}

/// Outside `prod`: the environment that writes the table `own` of `(name, fp)` when other
/// environments' versions share it ([`generations::writer_elsewhere`]), reading what other
/// environments serve once per plan (`served_elsewhere`, then `others` only when the table is
/// shared).
#[allow(clippy::too_many_arguments)]
fn shared_writer<'o>(
    state: &dyn StateStore,
    snapshots: &crate::state::SnapshotIndex,
    served_elsewhere: &mut Option<generations::ServedElsewhere>,
    others: &'o mut Option<generations::OtherEnvs>,
    project: &Project,
    env: &str,
    now: Millis,
    (name, fp, own): (&str, &str, &str),
) -> Result<Option<generations::Writer<'o>>, StateError> {
    if served_elsewhere.is_none() {
        *served_elsewhere = Some(generations::served_elsewhere(state, snapshots, env)?);
    }
    if generations::others_on(served_elsewhere.as_ref().expect("read just above"), name, fp, own).is_empty() {
        return Ok(None);
    }
    if others.is_none() {
        *others = Some(generations::other_envs(state, env, project.config.environments.ttl, now)?);
    }
    generations::writer_elsewhere(state, snapshots, others.as_ref().expect("read just above"), env, name, fp, own)
}

/// True when an environment other than `env` serves the version `fp` of `name` stored on
/// `physical` (other environments' pointers, read once per plan into `served_elsewhere`).
///
/// # Errors
/// A state read fails.
fn served_anywhere(
    state: &dyn StateStore,
    snapshots: &crate::state::SnapshotIndex,
    served_elsewhere: &mut Option<generations::ServedElsewhere>,
    env: &str,
    (name, fp, physical): (&str, &str, &str),
) -> Result<bool, StateError> {
    if served_elsewhere.is_none() {
        *served_elsewhere = Some(generations::served_elsewhere(state, snapshots, env)?);
    }
    Ok(served_elsewhere.as_ref().expect("read just above").get(&(name.to_string(), physical.to_string())).is_some_and(|fps| fps.contains(fp)))
}

/// Canonicalises one body with the canonical parser of the engine `dialect` spells
/// ([`crate::engine::dialect::Dialect::canonicalize`]: for DuckDB sqlparser first, the engine's
/// own parse tree when sqlparser cannot parse it; for Postgres libpg_query's tree).
///
/// # Errors
/// [`PlanError::Sql`] naming the model.
pub fn canonical_of(dialect: &dyn Dialect, model: &Model) -> Result<Option<Canonical>, PlanError> {
    let Some(body) = &model.body else { return Ok(None) };
    let rendered = body.render(&CanonicalResolver);
    canonical_with_fallback(dialect, model, &rendered).map(Some)
}

fn canonical_with_fallback(dialect: &dyn Dialect, model: &Model, rendered: &str) -> Result<Canonical, PlanError> {
    dialect.canonicalize(rendered).map_err(|error| PlanError::Sql { model: model.name.clone(), location: model.location_of_query_line(error.line()), error })
}

/// Computes every model's canonical digest and fingerprint, parents first.
///
/// `cache` maps [`canon_cache_key`]s to `<source>:<digest>` values known from earlier runs.
/// Missing bodies are canonicalised on all cores (sqlparser); the few sqlparser cannot parse go
/// to DuckDB's `json_serialize_sql`.
///
/// # Errors
/// [`PlanError::Sql`] naming the model whose body is not one valid query.
pub fn versions(project: &Project, cache: &HashMap<String, String>) -> Result<Versions, PlanError> {
    versions_keyed(project, &rendered_bodies(project), cache)
}

/// Every model's canonical render and its cache key, in topological order (`None` for
/// externals).
pub fn rendered_bodies(project: &Project) -> Vec<Option<(String, String)>> {
    project.dag.models().map(|m| rendered_body(project, m)).collect()
}

/// One model's canonical render and its cache key, as [`rendered_bodies`] gives them (`None` for
/// an external).
pub fn rendered_body(project: &Project, model: &Model) -> Option<(String, String)> {
    let dialect = crate::engine::dialect_for(&project.config).name();
    model.body.as_ref().map(|b| {
        let r = b.render(&CanonicalResolver);
        (canon_cache_key(dialect, &r), r)
    })
}

/// The canonical-body digest of one model as [`versions`] computes it (`keyed`: its
/// [`rendered_body`]; `cache` first, then the engine's canonical parser), without parsing any
/// other model's body; `None` for an external.
///
/// # Errors
/// [`PlanError::Sql`] naming the model when its body is not one valid query.
pub fn digest_of(project: &Project, model: &Model, keyed: Option<(String, String)>, cache: &HashMap<String, String>) -> Result<Option<String>, PlanError> {
    let (canon, _) = digests(crate::engine::dialect_for(&project.config), &[model], &[keyed], cache, None)?;
    Ok(canon.into_iter().next().flatten().map(|(_, digest)| digest))
}

fn versions_keyed(project: &Project, keyed: &[Option<(String, String)>], cache: &HashMap<String, String>) -> Result<Versions, PlanError> {
    let models: Vec<&Model> = project.dag.models().collect();
    let (canon, misses) = digests(crate::engine::dialect_for(&project.config), &models, keyed, cache, crate::sql::prefetch::take())?;
    let fingerprints = fingerprints_by_level(&models, &canon);
    let mut out = Versions::default();
    for (i, (model, fp)) in models.iter().zip(fingerprints).enumerate() {
        out.record(model, fp, canon[i].clone(), misses[i].clone());
    }
    Ok(out)
}

/// Fewest models one DAG level must have for its fingerprints to be spread over threads (below
/// it, starting threads costs more than it saves).
const PARALLEL_LEVEL: usize = 128;

/// The fingerprint of every model of `models` (in DAG order: parents first), by index. A
/// fingerprint needs its parents' fingerprints, so the models are taken level by level (a
/// model's level is one more than its highest parent's); the models of one level depend only on
/// earlier levels and are fingerprinted on all cores when the level is large. Every fingerprint
/// is [`fingerprint_with_digest`] of the same inputs as one model at a time would give it.
fn fingerprints_by_level(models: &[&Model], canon: &[Option<(CanonSource, String)>]) -> Vec<Fingerprint> {
    let index: HashMap<&ModelName, usize> = models.iter().enumerate().map(|(i, m)| (&m.name, i)).collect();
    let parents: Vec<Vec<usize>> = models
        .iter()
        .map(|m| m.parents().iter().map(|p| *index.get(p).unwrap_or_else(|| panic!("parent `{p}` of `{}` is not in the DAG", m.name))).collect())
        .collect();
    let mut level = vec![0usize; models.len()];
    let mut levels: Vec<Vec<usize>> = Vec::new();
    for i in 0..models.len() {
        // DAG order puts every parent first; a parent after its child is a broken DAG.
        let l = parents[i]
            .iter()
            .map(|&j| if j < i { level[j] + 1 } else { panic!("`{}` comes before its parent in DAG order", models[i].name) })
            .max()
            .unwrap_or(0);
        level[i] = l;
        if levels.len() <= l {
            levels.resize_with(l + 1, Vec::new);
        }
        levels[l].push(i);
    }
    let threads = if models.len() >= PARALLEL_LEVEL { std::thread::available_parallelism().map_or(1, |n| n.get()).min(8) } else { 1 };
    let mut done: Vec<Option<Fingerprint>> = vec![None; models.len()];
    for members in &levels {
        let one = |i: usize, done: &[Option<Fingerprint>]| {
            let ps: BTreeMap<ModelName, Fingerprint> =
                parents[i].iter().map(|&j| (models[j].name.clone(), done[j].clone().expect("parents are fingerprinted first"))).collect();
            fingerprint_with_digest(models[i], canon[i].as_ref().map(|(_, d)| d.as_str()), &ps)
        };
        let computed: Vec<(usize, Fingerprint)> = if threads > 1 && members.len() >= PARALLEL_LEVEL {
            let per = members.len().div_ceil(threads);
            let done = &done;
            std::thread::scope(|scope| {
                let handles: Vec<_> =
                    members[per..].chunks(per).map(|c| scope.spawn(move || c.iter().map(|&i| (i, one(i, done))).collect::<Vec<_>>())).collect();
                let mut all: Vec<(usize, Fingerprint)> = members[..per].iter().map(|&i| (i, one(i, done))).collect();
                for h in handles {
                    all.extend(h.join().expect("fingerprint thread"));
                }
                all
            })
        } else {
            members.iter().map(|&i| (i, one(i, &done))).collect()
        };
        for (i, fp) in computed {
            done[i] = Some(fp);
        }
    }
    done.into_iter().map(|fp| fp.expect("every level fingerprinted")).collect()
}

impl Versions {
    fn record(&mut self, model: &Model, fp: Fingerprint, canon: Option<(CanonSource, String)>, miss: Option<(String, String)>) {
        self.fingerprints.insert(model.name.clone(), fp);
        if let Some((source, digest)) = canon {
            self.sources.insert(model.name.clone(), source);
            self.digests.insert(model.name.clone(), digest);
        }
        self.misses.extend(miss);
    }
}

/// The canonical digest (and its parser) of every body `keyed` names, by index (`None` where
/// `keyed` has none): from `cache`, otherwise canonicalised on all cores (sqlparser; DuckDB's
/// `json_serialize_sql` for the few it cannot parse), those also returned as cache entries.
#[allow(clippy::type_complexity)]
fn digests(
    dialect: &dyn Dialect,
    models: &[&Model],
    keyed: &[Option<(String, String)>],
    cache: &HashMap<String, String>,
    ahead: Option<std::sync::Arc<crate::sql::prefetch::Prefetch>>,
) -> Result<(Vec<Option<(CanonSource, String)>>, Vec<Option<(String, String)>>), PlanError> {
    // Cache misses, canonicalised in parallel.
    let missing: Vec<usize> = keyed.iter().enumerate().filter(|(_, k)| k.as_ref().is_some_and(|(key, _)| !cache.contains_key(key))).map(|(i, _)| i).collect();
    let body = |i: usize| keyed[i].as_ref().expect("has body").1.as_str();
    // Each thread hashes the canonical text as it writes it (`canonical_digest`): the digest is
    // all a plan keeps of it. Digests computed ahead by the load (`sql::prefetch`, keyed by the
    // body text itself) are taken from there, this thread helping with what is left.
    // The fast path (and the prefetch, which takes it) is sqlparser's: DuckDB's grammar. Another
    // engine's bodies are parsed by its own parser alone.
    let duckdb = dialect.sqlparser_first();
    let computed: Vec<(usize, Result<String, SqlError>)> = match ahead.filter(|_| !missing.is_empty() && duckdb) {
        Some(ahead) => missing.iter().map(|&i| (i, ahead.get(body(i)).unwrap_or_else(|| canonical_digest(body(i))))).collect(),
        None if duckdb => canonicalise_all(&missing, &|i| canonical_digest(body(i))),
        None => canonicalise_all(&missing, &|i| dialect.canonicalize(body(i)).map(|c| format!("{}\u{0}{}", c.source.as_str(), body_digest(&c.text)))),
    };
    let mut canon: Vec<Option<(CanonSource, String)>> = keyed.iter().map(|k| k.as_ref().and_then(|(key, _)| cache.get(key)).map(|v| parse_cached(v))).collect();
    let mut misses: Vec<Option<(String, String)>> = vec![None; keyed.len()];
    for (i, result) in computed {
        let (source, digest) = match result {
            Ok(digest) if duckdb => (CanonSource::SqlParser, digest),
            Ok(tagged) => {
                let (source, digest) = tagged.split_once('\u{0}').expect("tagged with its source");
                (CanonSource::from_name(source), digest.to_string())
            }
            Err(SqlError::Parse { .. }) if duckdb => {
                let c = canonical_with_fallback(dialect, models[i], body(i))?;
                (c.source, body_digest(&c.text))
            }
            Err(error) => return Err(PlanError::Sql { model: models[i].name.clone(), location: models[i].location_of_query_line(error.line()), error }),
        };
        misses[i] = Some((keyed[i].as_ref().expect("has body").0.clone(), format!("{}:{digest}", source.as_str())));
        canon[i] = Some((source, digest));
    }
    Ok((canon, misses))
}

/// [`canonical_digest`] of the body of every index in `missing`, on all cores: each thread
/// (this one included) claims the next index until none is left, so a thread slowed down by a
/// busy machine or by long bodies leaves its share to the others.
fn canonicalise_all(missing: &[usize], digest: &(dyn Fn(usize) -> Result<String, SqlError> + Sync)) -> Vec<(usize, Result<String, SqlError>)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8).min(missing.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        while let Some(&i) = missing.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
            out.push((i, digest(i)));
        }
        out
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in handles {
            all.extend(h.join().expect("canonicalisation thread"));
        }
        all
    })
}

/// [`metadata_text`] of every model of `models`, in that order, with its tree as [`metadata`]
/// parses it, on all cores (each thread claims the next model until none is left).
fn metadata_all(models: &[&Model]) -> Vec<(String, serde_json::Value)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8).min(models.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(model) = models.get(i) else { return out };
            let text = metadata_text(model);
            let tree = serde_json::from_str(&text).unwrap_or_default();
            out.push((i, text, tree));
        }
    };
    let mut all: Vec<(usize, String, serde_json::Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in handles {
            all.extend(h.join().expect("metadata thread"));
        }
        all
    });
    all.sort_unstable_by_key(|(i, _, _)| *i);
    all.into_iter().map(|(_, text, tree)| (text, tree)).collect()
}

/// Fingerprints kept across the plans of one session (`Session::plan`, `efmesh watch`), so a plan
/// after an edit re-fingerprints only the models whose definition or ancestors changed.
///
/// Per model: the blake3 digest of its definition as loaded (its derived `Hash`, which covers
/// every field, as the plan memo's key does), its parents' fingerprints, and what they gave: its
/// fingerprint, its canonical digest and parser, and the canonicalisation-cache entry computed
/// for it (repeated in every plan's [`Plan::canon_cache_misses`], so `apply` persists it;
/// writing an entry twice is harmless). A model whose definition is unchanged keeps its
/// canonical digest (a body's canonical form depends on nothing else); one whose parents'
/// fingerprints are unchanged too keeps its fingerprint. Everything else is computed as
/// [`versions`] does. With `EFMESH_VERIFY_PLAN_MEMO=1` every result is compared with
/// [`versions`] computed in full, and a difference panics.
///
/// It also keeps the last plan's actions ([`ActionMemo`]) for [`compute`] to reuse.
#[derive(Debug, Clone, Default)]
pub struct VersionMemo {
    entries: HashMap<ModelName, VersionEntry>,
    /// What `entries` give, as one [`Versions`] (kept in step with `entries`).
    last: Versions,
    recomputed: usize,
    actions: ActionMemo,
    repairs: RepairMemo,
    marks: MarkMemo,
}

/// The rebuild marks ([`mark_rebuilds`]) of the last plan computed with a [`VersionMemo`], under
/// the [`ActionMemo`] key that plan was computed under. What the marks decide for a model depends
/// on its action and its ancestors' (their versions and physical relations) and on the state
/// store's content, which the key proves unchanged (every write that can change the marks bumps
/// the store's generation or, for a promotion of any environment, the last promotion id the key
/// holds: the marks read the other environments' pointers). So when the next plan has the same key and reused a model's action
/// from that plan with every ancestor's (it is not among the models it computed, which include
/// every descendant of a computed model), the model's mark is the one kept here; only the
/// computed models are marked again. With `EFMESH_VERIFY_PLAN_MEMO=1` the marks are also
/// computed in full and a difference panics.
#[derive(Debug, Clone, Default)]
struct MarkMemo {
    key: Option<(String, String, i64, i64)>,
    /// The models marked for rebuild, with their reasons (the others were not marked).
    marked: HashMap<ModelName, String>,
}

/// The models whose integrity check ([`integrity::check`]) found something to repair in the last
/// plan computed with a [`VersionMemo`] (every other model of that plan was found clean), under
/// the key this holds for: the identity of the engine
/// catalog checked against ([`VersionMemo::set_catalog_identity`]), the environment and the
/// project root. A model whose action the next plan reused from that plan, with every ancestor's
/// (see [`ActionMemo`]), checked against a catalog of the same identity, would be checked with
/// exactly the same inputs (its action, its parents' physical relations, the catalog): it is not
/// checked again.
#[derive(Debug, Clone, Default)]
struct RepairMemo {
    /// The catalog identity for the next check (`None`: unknown, nothing is kept).
    catalog: Option<String>,
    key: Option<(String, String, String)>,
    /// The models that plan's check found something to repair for.
    unclean: std::collections::HashSet<ModelName>,
}

/// The actions of the last plan computed with a [`VersionMemo`], with the state reads they came
/// from and the key that proves those reads current: the environment, the identity of the
/// state store's file as the caller took it before opening the store
/// ([`VersionMemo::set_store_identity`]), the store's generation and the id of the
/// environment's last promotion ([`StateStore::plan_state`], read before anything else). When
/// the next plan of the same environment, with no operator options, reads the same key, the
/// pointers, the metadata served and the snapshot index are taken from memory, and every model
/// whose definition, fingerprint and ancestors are unchanged keeps its action (its missing
/// intervals recomputed at the new `now` from the done intervals read then); the changed models
/// and their descendants are computed as always. With `EFMESH_VERIFY_PLAN_MEMO=1` a plan that
/// reused anything is compared with the plan computed from scratch, and a difference panics.
#[derive(Debug, Clone, Default)]
struct ActionMemo {
    /// The store identity for the next plan (`None`: unknown, nothing is kept).
    store: Option<String>,
    key: Option<(String, String, i64, i64)>,
    reads: Option<std::sync::Arc<Reads>>,
    /// One entry per model of the last plan, by DAG position; `order` names them (the DAG's
    /// order then). A plan over a DAG of the same order (an in-place reload keeps it) takes
    /// them by position; any other order is matched by name once.
    entries: Vec<ActionEntry>,
    order: Vec<ModelName>,
    reused: usize,
    /// The models the last plan computed (not reused), when it reused from the plan before it
    /// under the same key; `None` when everything was computed.
    dirty: Option<std::collections::HashSet<ModelName>>,
}

/// What a plan reads of the state store for every model.
#[derive(Debug, Default)]
struct Reads {
    pointers: BTreeMap<String, String>,
    served_metadata: BTreeMap<String, String>,
    snapshots: crate::state::SnapshotIndex,
}

#[derive(Debug, Clone)]
struct ActionEntry {
    definition: [u8; 32],
    action: Action,
    same_data: bool,
    category: Change,
    served: Option<String>,
    changed_columns: Option<BTreeSet<String>>,
    /// [`Decided::reshaped`].
    reshaped: Option<Reshape>,
    /// Non-breaking models: the columns their change added ([`Decided`]).
    added_columns: Option<BTreeSet<String>>,
    /// [`Decided::kept_dropped_by`].
    kept_dropped_by: BTreeSet<ModelName>,
    /// Time-range models: the done intervals the action's missing ones came from.
    done: Option<BTreeSet<Millis>>,
    /// Time-range models outside `prod`: what the missing ones leave out ([`WriterHolds`]; an
    /// entry holding anything is never replayed).
    writer_holds: WriterHolds,
    /// Time-range models: the grain floor of the model's due instant at `now`
    /// ([`Model::due_at`]) the action's missing intervals were computed at. The wanted intervals
    /// depend on `now` only through it ([`interval::wanted`]), so
    /// while it is the same (and `done` too) the missing intervals are the action's.
    floor: Option<Millis>,
}

#[derive(Debug, Clone)]
struct VersionEntry {
    definition: [u8; 32],
    parents: Vec<Fingerprint>,
    fingerprint: Fingerprint,
    canon: Option<(CanonSource, String)>,
    miss: Option<(String, String)>,
}

impl VersionMemo {
    /// True before the first plan (nothing memoised).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many models the last [`VersionMemo::versions`] fingerprinted (the others were reused).
    pub fn recomputed(&self) -> usize {
        self.recomputed
    }

    /// Names the state store the next plan will read: the identity of its file taken before the
    /// store was opened (by `stat` alone, e.g. `crate::engine::record::path_stat`), `absent` style markers
    /// for no file, or `None` when it cannot be told (then no action is reused).
    pub fn set_store_identity(&mut self, identity: Option<String>) {
        self.actions.store = identity;
    }

    /// How many actions the last plan computed with this memo took from the plan before.
    pub fn actions_reused(&self) -> usize {
        self.actions.reused
    }

    /// Names the engine catalog the next plan is checked against: an identity that changes
    /// whenever the catalog may have (`crate::engine::record::identity`), or `None` when it
    /// cannot be told (then every action is checked).
    pub fn set_catalog_identity(&mut self, identity: Option<String>) {
        self.repairs.catalog = identity;
    }

    /// Every model's version, reusing what the memo knows (see [`VersionMemo`]), and the memo
    /// brought up to date (models no longer in the project forgotten). The models fingerprinted
    /// are counted in [`VersionMemo::recomputed`].
    ///
    /// # Errors
    /// As [`versions`]; the memo is then left as it was.
    pub fn versions(&mut self, project: &Project, state: &dyn StateStore) -> Result<Versions, PlanError> {
        self.update(project, state)?;
        Ok(self.last.clone())
    }

    /// [`VersionMemo::versions`] kept in `self.last`, updated in place: only the models whose
    /// definition changed, or one of whose parents' fingerprint did, are looked at.
    fn update(&mut self, project: &Project, state: &dyn StateStore) -> Result<(), PlanError> {
        let models: Vec<&Model> = project.dag.models().collect();
        let dialect = crate::engine::dialect_for(&project.config);
        let definitions: Vec<[u8; 32]> = (0..models.len()).map(|i| project.dag.model_digest(i)).collect();
        let known: Vec<bool> = models.iter().zip(&definitions).map(|(m, d)| self.entries.get(&m.name).is_some_and(|e| e.definition == *d)).collect();
        let keyed: Vec<Option<(String, String)>> = models
            .iter()
            .zip(&known)
            .map(|(m, k)| {
                if *k {
                    return None;
                }
                m.body.as_ref().map(|b| {
                    let r = b.render(&CanonicalResolver);
                    (canon_cache_key(dialect.name(), &r), r)
                })
            })
            .collect();
        let keys: Vec<String> = keyed.iter().flatten().map(|(k, _)| k.clone()).collect();
        let cache = if keys.is_empty() { HashMap::new() } else { state.canon_cache_get(&keys)? };
        let (canon, misses) = digests(dialect, &models, &keyed, &cache, crate::sql::prefetch::take())?;
        // Nothing fails below: the memo changes only from here on.
        let mut changed: std::collections::HashSet<&ModelName> = std::collections::HashSet::new();
        let mut recomputed = 0;
        let mut renamed = false;
        for (i, model) in models.iter().enumerate() {
            let parents_changed = model.body.iter().flat_map(|b| b.refs()).any(|r| changed.contains(&r.target));
            if known[i] && !parents_changed {
                continue;
            }
            renamed |= !self.entries.contains_key(&model.name);
            let parents: Vec<(ModelName, Fingerprint)> = model.parents().into_iter().map(|p| (p.clone(), self.last.fingerprints[&p].clone())).collect();
            let parent_fps: Vec<Fingerprint> = parents.iter().map(|(_, f)| f.clone()).collect();
            let old = self.entries.get(&model.name).filter(|_| known[i]);
            let (canon, miss) = match old {
                Some(e) => (e.canon.clone(), e.miss.clone()),
                None => (canon[i].clone(), misses[i].clone()),
            };
            let fp = match old {
                Some(e) if e.parents == parent_fps => e.fingerprint.clone(),
                _ => {
                    recomputed += 1;
                    fingerprint_with_digest(model, canon.as_ref().map(|(_, d)| d.as_str()), &parents.into_iter().collect())
                }
            };
            if self.last.fingerprints.get(&model.name) != Some(&fp) {
                changed.insert(&model.name);
            }
            match &canon {
                Some((source, digest)) => {
                    self.last.sources.insert(model.name.clone(), *source);
                    self.last.digests.insert(model.name.clone(), digest.clone());
                }
                None => {
                    self.last.sources.remove(&model.name);
                    self.last.digests.remove(&model.name);
                }
            }
            self.last.fingerprints.insert(model.name.clone(), fp.clone());
            self.entries.insert(model.name.clone(), VersionEntry { definition: definitions[i], parents: parent_fps, fingerprint: fp, canon, miss });
        }
        // Models no longer in the project are forgotten.
        if renamed || self.entries.len() != models.len() {
            let names: std::collections::HashSet<&ModelName> = models.iter().map(|m| &m.name).collect();
            self.entries.retain(|n, _| names.contains(n));
            self.last.fingerprints.retain(|n, _| names.contains(n));
            self.last.sources.retain(|n, _| names.contains(n));
            self.last.digests.retain(|n, _| names.contains(n));
        }
        self.last.misses = models.iter().filter_map(|m| self.entries.get(&m.name).and_then(|e| e.miss.clone())).collect();
        self.recomputed = recomputed;
        if std::env::var_os(memo::VERIFY_ENV).is_some_and(|v| v == "1") {
            let full = versions(project, &state.canon_cache_get(&rendered_bodies(project).into_iter().flatten().map(|(k, _)| k).collect::<Vec<_>>())?)?;
            assert_eq!(self.last.fingerprints, full.fingerprints, "memoised fingerprints differ from fingerprints computed in full");
            assert_eq!(self.last.digests, full.digests, "memoised canonical digests differ from those computed in full");
            assert_eq!(self.last.sources, full.sources, "memoised canonical sources differ from those computed in full");
        }
        Ok(())
    }
}

fn parse_cached(value: &str) -> (CanonSource, String) {
    match value.split_once(':') {
        Some((source, d)) => (CanonSource::from_name(source), d.to_string()),
        None => (CanonSource::SqlParser, value.to_string()),
    }
}

/// The metadata a snapshot records: everything about the model but its query and location,
/// deterministic (compared as text to detect `metadata` changes). See [`metadata_text`].
pub fn metadata(model: &Model) -> serde_json::Value {
    serde_json::from_str(&metadata_text(model)).unwrap_or(serde_json::Value::Null)
}

/// The compact JSON text of [`metadata`], written without building a JSON tree (it runs for
/// every model on every plan): `{"kind", "schema": [[name, normalised type(, "exact")]…], "grain",
/// "description", "schedule": {"start", "end", "batch_size", "lookback",
/// "auto_restatement_intervals"?} | null, "audits"?: [{"name", "args", "blocking", "scope",
/// "sql"}], "cron"?, "statements"?: {"pre", "post", "affect_data"}, "owner"?, "tags"?,
/// "column_descriptions"?: [[column, text]…]}` (the optional ones only when the model has some).
pub fn metadata_text(model: &Model) -> String {
    #[derive(Serialize)]
    struct Schedule {
        start: String,
        end: Option<String>,
        batch_size: u32,
        lookback: u32,
        // Absent when 0, so models without it keep their stored text.
        #[serde(skip_serializing_if = "is_zero")]
        auto_restatement_intervals: u32,
    }
    fn is_zero(n: &u32) -> bool {
        *n == 0
    }
    #[derive(Serialize)]
    struct Meta<'a> {
        kind: serde_json::Value,
        // Types as the fingerprint sees them, so a re-spelling is never a change; one with parts
        // kept as written marked `"exact"`, so a snapshot tells which rule recorded it.
        schema: Vec<crate::sql::fingerprint::TypedColumn<'a>>,
        grain: &'a [String],
        description: &'a Option<String>,
        schedule: Option<Schedule>,
        // Audits are metadata: editing them is a `metadata` change, never a rebuild. Absent
        // when there are none, so models without audits keep their stored text.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        audits: Vec<serde_json::Value>,
        // When intervals are due: metadata (a cron change is a `metadata` change, never a
        // rebuild, as in sqlmesh). Absent without a cron, so other models keep their stored text.
        #[serde(skip_serializing_if = "Option::is_none")]
        cron: Option<&'a str>,
        // Pre/post statements as written (placeholders for bounds): metadata unless declared
        // data-relevant, when they also enter the fingerprint. Absent without statements.
        #[serde(skip_serializing_if = "Option::is_none")]
        statements: Option<serde_json::Value>,
        // Model properties (owner, tags, column descriptions): metadata, absent when unset so
        // other models keep their stored text.
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<&'a str>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        tags: &'a [String],
        #[serde(skip_serializing_if = "<[(String, String)]>::is_empty")]
        column_descriptions: &'a [(String, String)],
    }
    let meta = Meta {
        kind: model.kind_payload(),
        schema: model.schema.0.iter().map(|c| crate::sql::fingerprint::TypedColumn::new(&c.name, &c.ty)).collect(),
        grain: &model.grain,
        description: &model.description,
        schedule: model.kind.time_range().map(|t| Schedule {
            start: interval::to_iso(t.start),
            end: t.end.map(interval::to_iso),
            batch_size: t.batch_size,
            lookback: t.lookback,
            auto_restatement_intervals: t.auto_restatement_intervals,
        }),
        audits: model.audits.iter().map(crate::core::audit::Audit::metadata).collect(),
        cron: model.cron.as_deref(),
        statements: (!model.statements.is_empty()).then(|| {
            let texts = |l: &[crate::core::Statement]| -> Vec<String> { l.iter().map(|s| s.sql.render(&CanonicalResolver)).collect() };
            serde_json::json!({"pre": texts(&model.statements.pre), "post": texts(&model.statements.post), "affect_data": model.statements.affect_data})
        }),
        owner: model.owner.as_deref(),
        tags: &model.tags,
        column_descriptions: &model.column_descriptions,
    };
    serde_json::to_string(&meta).unwrap_or_default()
}

/// Qualified physical relation of a model version, for materialised kinds: in `_efmesh` for the
/// `table` and `parquet` targets, in the attached DuckLake catalog for `ducklake`
/// ([`crate::core::Target::physical_relation`]).
pub fn physical_relation(dialect: &dyn Dialect, model: &Model, fp: &Fingerprint) -> Option<String> {
    let table = physical_table_within(&model.name, fp, dialect.max_identifier_bytes());
    model.kind.is_materialized().then(|| model.target.physical_relation(PHYSICAL_SCHEMA, &table))
}

/// The environment's schema for a model schema: `<schema>` for prod, `<env>__<schema>` otherwise.
pub fn env_schema(env: &str, schema: &str) -> String {
    if env == crate::core::name::PROD { schema.to_string() } else { format!("{env}__{schema}") }
}

/// Refuses a plan whose environment views would land on views that another environment already
/// serves. Between valid names this cannot happen (`<env>__<schema>` is injective, see
/// [`crate::core::name`]); but a store may hold environments created before the naming rules
/// (e.g. `dev_`, whose `dev___mart.x` is also `dev`'s view of `_mart.x`). Only those are read,
/// so the common case costs one query.
///
/// # Errors
/// [`PlanError::ViewConflict`] naming both environments, both models and the shared view.
pub fn check_legacy_views(project: &Project, state: &dyn StateStore, env: &str) -> Result<(), PlanError> {
    let legacy: Vec<String> = state.environments()?.into_iter().filter(|e| e != env && validate_env(e).is_err()).collect();
    if legacy.is_empty() {
        return Ok(());
    }
    let view_key = |env: &str, schema: &str, table: &str| (env_schema(env, schema).to_lowercase(), table.to_lowercase());
    let ours: BTreeMap<(String, String), &ModelName> = project.dag.models().map(|m| (view_key(env, m.name.schema(), m.name.table()), &m.name)).collect();
    for other in legacy {
        for name in state.env_pointers(&other)?.keys() {
            let Some((schema, table)) = name.split_once('.') else { continue };
            if let Some(mine) = ours.get(&view_key(&other, schema, table)) {
                let (vs, vt) = view_key(env, mine.schema(), mine.table());
                return Err(PlanError::ViewConflict(format!(
                    "environment `{env}` would serve model `{mine}` as view `{vs}.{vt}`, which environment `{other}` already serves as model `{name}`\n  \
                     (`{other}` predates the rule that environment names neither contain `__` nor end with `_`)\n  \
                     hint: rename the model's schema, or apply to another environment; `{other}` can no longer be applied"
                )));
            }
        }
    }
    Ok(())
}

/// Computes the plan of `project` against `env` at `now`, with no operator choices.
///
/// # Errors
/// As [`plan_with`].
pub fn plan(project: &Project, state: &dyn StateStore, env: &str, now: Millis) -> Result<Plan, PlanError> {
    plan_with(project, state, env, now, &Options::default())
}

/// The old definition of a model, from its snapshot, as [`categorize::compare`] needs it.
struct OldDefinition {
    canonical: Option<String>,
    kind: serde_json::Value,
    schema: Vec<(String, String)>,
    /// The columns whose type the snapshot recorded folded, as an efmesh before quoted parts and
    /// member names were kept did (no `"exact"` mark on a type that has such parts,
    /// [`crate::sql::fingerprint::EXACT_TYPE`]): compared in that form ([`declared_schema`]).
    folded: BTreeSet<String>,
    grain: Vec<String>,
    physical: String,
    statements: Option<serde_json::Value>,
    /// The snapshot records pre/post statements (data-relevant or metadata).
    has_statements: bool,
    /// The body's canonical render as the snapshot recorded it (logical names; empty when none).
    rendered_sql: String,
}

fn old_definition(state: &dyn StateStore, name: &str, fp: &str) -> Result<Option<OldDefinition>, StateError> {
    let Some(rec) = state.snapshot(name, fp)? else { return Ok(None) };
    let m = &rec.metadata;
    let mut schema = Vec::new();
    let mut folded = BTreeSet::new();
    for p in m["schema"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let (Some(name), Some(ty)) = (p.get(0).and_then(serde_json::Value::as_str), p.get(1).and_then(serde_json::Value::as_str)) else { continue };
        let (ty, kept_parts) = crate::sql::fingerprint::normalized_type(ty);
        if kept_parts && p.get(2).and_then(serde_json::Value::as_str) != Some(crate::sql::fingerprint::EXACT_TYPE) {
            folded.insert(name.to_string());
        }
        schema.push((name.to_string(), ty));
    }
    let grain = m["grain"].as_array().map(|a| a.iter().filter_map(|g| g.as_str().map(str::to_string)).collect()).unwrap_or_default();
    let statements = data_statements_of(m);
    // Recorded only when the model has some ([`metadata_text`]); metadata-only statements added
    // to the version later are not here but in what environments serve ([`served_with_statements`]).
    let has_statements = m["statements"].is_object();
    Ok(Some(OldDefinition {
        canonical: rec.canonical,
        kind: m["kind"].clone(),
        schema,
        folded,
        grain,
        physical: rec.physical,
        statements,
        has_statements,
        rendered_sql: rec.rendered_sql,
    }))
}

/// Whether `model`'s own definition is the one `old`'s snapshot recorded, text for text — the
/// body's canonical render, kind, grain, pre/post statements and declared schema (in the form the
/// snapshot compares them) — so that a fingerprint differing beyond its parents can only come
/// from efmesh reading the same text anew (`CANON_RULES`, `FINGERPRINT_VERSION`, a type rule):
/// `plan --explain` says so instead of blaming the query.
fn same_text_read_anew(old: &OldDefinition, model: &Model, new_schema: &[(String, String)], new_kind: &serde_json::Value) -> bool {
    let Some(body) = model.body.as_ref() else { return false };
    !old.rendered_sql.is_empty()
        && old.kind == *new_kind
        && old.grain == model.grain
        && old.schema == new_schema
        && old.statements == crate::sql::fingerprint::statements_payload(model)
        && body.render(&crate::core::fragment::CanonicalResolver) == old.rendered_sql
}

/// `model`'s declared `(column, type)` pairs in the form `old`'s snapshot records types:
/// normalised ([`crate::sql::fingerprint::normalize_type`]), but for a column it recorded folded
/// ([`OldDefinition::folded`], `renamed` mapping an old column to the new one continuing it):
/// folded alike ([`crate::sql::fingerprint::folded_type`]), as the record cannot tell a label's
/// case, so an upgrade alone never reads as a changed type.
fn declared_schema(model: &Model, old: Option<&OldDefinition>, renamed: &BTreeMap<String, String>) -> Vec<(String, String)> {
    model
        .schema
        .0
        .iter()
        .map(|c| {
            let old_name = renamed.iter().find(|(_, new)| **new == c.name).map_or(c.name.as_str(), |(o, _)| o.as_str());
            let ty = if old.is_some_and(|o| o.folded.contains(old_name)) {
                crate::sql::fingerprint::folded_type(&c.ty)
            } else {
                crate::sql::fingerprint::normalize_type(&c.ty)
            };
            (c.name.clone(), ty)
        })
        .collect()
}

/// The versions (model name, fingerprint) some environment serves with pre/post statements:
/// metadata-only statements added to a version after its snapshot was written ran on its table
/// (shared by every environment pointing at it), though its snapshot records none. Read once per
/// plan, and only when a changed model's column impact asks ([`categorize::changed_columns`]).
fn served_with_statements(state: &dyn StateStore) -> Result<BTreeSet<(String, String)>, StateError> {
    let mut out = BTreeSet::new();
    for env in state.environments()? {
        let pointers = state.env_pointers(&env)?;
        for (name, text) in state.env_metadata(&env)? {
            if let Some(fp) = pointers.get(&name)
                && serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v["statements"].is_object())
            {
                out.insert((name, fp.clone()));
            }
        }
    }
    Ok(out)
}

/// The data-relevant statements a snapshot's metadata records, as
/// [`crate::sql::fingerprint::statements_payload`] gives them for a model.
fn data_statements_of(metadata: &serde_json::Value) -> Option<serde_json::Value> {
    let st = &metadata["statements"];
    if st["affect_data"] != serde_json::Value::Bool(true) {
        return None;
    }
    let canon = |k: &str| -> Vec<String> {
        st[k].as_array().map(|a| a.iter().filter_map(|t| t.as_str().map(crate::sql::statements::canonical_text)).collect()).unwrap_or_default()
    };
    Some(serde_json::json!({"pre": canon("pre"), "post": canon("post")}))
}

/// Computes the plan of `project` against `env` at `now`, honouring `options`.
///
/// Categories are decided parents first (see [`categorize`]). A model whose own fingerprint,
/// recomputed with its parents' previous fingerprints, equals its previous one is `indirect`; it
/// keeps its physical table (and done intervals) when every changed parent left existing
/// columns identical, and rebuilds otherwise.
///
/// # Errors
/// [`PlanError`]: an invalid environment name, a state store failure, a body that does not
/// parse, or an operator choice that contradicts the change (`--reclassify` a dropped column as
/// non-breaking, `--forward-only` on a model that is not time-range or drops a column).
pub fn plan_with(project: &Project, state: &dyn StateStore, env: &str, now: Millis, options: &Options) -> Result<Plan, PlanError> {
    plan_with_memo(project, state, env, now, options, None)
}

/// [`plan_with`], taking fingerprints from `versions` when given ([`VersionMemo`]: only models
/// whose definition or ancestors changed since its last plan are fingerprinted again). An empty
/// memo is filled first, even when the plan is replayed from the plan memo, so the first edit
/// after it is incremental too.
///
/// # Errors
/// As [`plan_with`].
pub fn plan_with_memo(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &Options,
    versions: Option<&mut VersionMemo>,
) -> Result<Plan, PlanError> {
    let mut versions = versions;
    // Taken out before anything can fail: a plan that stops half-way keeps no marks.
    let kept = versions.as_deref_mut().map(|m| std::mem::take(&mut m.marks));
    let mut plan = plan_unmarked(project, state, env, now, options, versions.as_deref_mut())?;
    match versions {
        Some(m) => mark_rebuilds_kept(project, state, &mut plan, m, kept.unwrap_or_default())?,
        None => mark_rebuilds(project, state, &mut plan)?,
    }
    Ok(plan)
}

/// [`mark_rebuilds`] with the marks of the previous plan kept in `memo` ([`MarkMemo`]): only the
/// models this plan computed are marked again when the key is the same; then the marks are kept
/// for the next plan.
fn mark_rebuilds_kept(project: &Project, state: &dyn StateStore, plan: &mut Plan, memo: &mut VersionMemo, kept: MarkMemo) -> Result<(), StateError> {
    let key = memo.actions.key.clone();
    let computed = memo.actions.dirty.as_ref().filter(|_| key.is_some() && kept.key == key);
    match computed {
        Some(computed) => {
            let unmarked = std::env::var_os(memo::VERIFY_ENV).is_some_and(|v| v == "1").then(|| plan.clone());
            let n = project.dag.len();
            for a in plan.actions.iter_mut().take(n).filter(|a| !computed.contains(&a.name)) {
                if let Some(reason) = kept.marked.get(&a.name) {
                    a.rebuild = true;
                    a.rebuild_reason = Some(reason.clone());
                }
            }
            let mut shared = None;
            mark_pending_rebuilds(project, state, plan, &mut shared, Some(computed))?;
            mark_stale_builds(project, state, plan, &mut shared, Some(computed))?;
            plan.has_changes = plan.actions.iter().any(Action::has_work);
            if let Some(mut full) = unmarked {
                mark_rebuilds(project, state, &mut full)?;
                verify_marks(plan, &full);
            }
        }
        None => mark_rebuilds(project, state, plan)?,
    }
    memo.marks = MarkMemo {
        key,
        marked: plan
            .actions
            .iter()
            .filter(|a| a.rebuild && a.change != Change::Removed)
            .map(|a| (a.name.clone(), a.rebuild_reason.clone().unwrap_or_default()))
            .collect(),
    };
    Ok(())
}

/// Panics when the marks kept from the previous plan differ from the marks computed in full.
fn verify_marks(kept: &Plan, full: &Plan) {
    assert_eq!(kept.has_changes, full.has_changes, "the plan of `{}` marked with kept marks disagrees on having changes", kept.env);
    for (x, y) in kept.actions.iter().zip(&full.actions) {
        assert_eq!((x.rebuild, &x.rebuild_reason), (y.rebuild, &y.rebuild_reason), "the kept rebuild mark of `{}` disagrees with the full marks", x.name);
    }
}

/// [`plan_with_memo`] without [`mark_rebuilds`]: the plan replayed from the plan memo or
/// computed, before the `full` versions with a pending or stale build are marked for rebuild.
/// A caller that skips the marks must prove them empty ([`crate::session::plan_checked`] does,
/// for a replayed plan, with a token naming the memo key and the state store's identity).
///
/// # Errors
/// As [`plan_with`].
pub fn plan_unmarked(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &Options,
    versions: Option<&mut VersionMemo>,
) -> Result<Plan, PlanError> {
    validate_env(env)?;
    check_interval_counts(project, now)?;
    check_legacy_views(project, state, env)?;
    for n in options.forward_only.iter().chain(options.reclassify.keys()).chain(&options.reset_history) {
        if project.dag.get(n).is_none() {
            let hint = project.dag.suggest(&n.to_string()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
            return Err(PlanError::Operator(format!("unknown model `{n}`{hint}")));
        }
    }
    for n in &options.forward_only {
        if project.dag.get(n).is_some_and(|m| !forward_only_kind(&m.kind)) {
            return Err(PlanError::Operator(format!(
                "`--forward-only {n}`: only `incremental_by_time_range`, `incremental_by_unique_key`, `incremental_by_partition` and `scd_type2` models can be forward-only\n  hint: other kinds rebuild; apply without `--forward-only`"
            )));
        }
    }
    for n in &options.reset_history {
        if project.dag.get(n).is_some_and(|m| !matches!(m.kind, Kind::ScdType2(_))) {
            return Err(PlanError::Operator(format!("`--reset-history {n}`: only `scd_type2` models have a history to reset")));
        }
    }
    // The no-op plan the last apply recorded at this very state: replay it (see [`memo`]). Not
    // with a memo of versions (a session): its plans keep their actions for the next one
    // ([`ActionMemo`]), which a replay does not give.
    let replayed = if options.is_default() && versions.is_none() { memo::lookup(project, state, env, now)? } else { None };
    Ok(match replayed {
        Some(plan) => {
            if std::env::var_os(memo::VERIFY_ENV).is_some_and(|v| v == "1") {
                memo::verify(&plan, &compute(project, state, env, now, options)?);
            }
            plan
        }
        None => compute_with(project, state, env, now, options, versions)?,
    })
}

/// Refuses a time-range model wanting more than [`interval::MAX_WANTED`] intervals at `now`
/// (a plan lists each one): a `start` typed centuries early on a five-minute grain would
/// otherwise exhaust memory before anything is said.
fn check_interval_counts(project: &Project, now: Millis) -> Result<(), PlanError> {
    for m in project.dag.models() {
        let Some(t) = m.kind.time_range() else { continue };
        let count = interval::wanted_count(t.start, t.end, t.grain, project.dag.due_at(&m.name, now));
        if count > interval::MAX_WANTED {
            return Err(PlanError::TooManyIntervals {
                model: m.name.clone(),
                location: m.location.clone(),
                message: format!(
                    "`start` {} on grain `{}` gives {count} intervals up to now (or its `end`), more than the {} a model may have; is the `start` a typo?\n  hint: a later `start` or a coarser grain",
                    interval::to_iso(t.start),
                    t.grain.spelling(),
                    interval::MAX_WANTED
                ),
            });
        }
    }
    Ok(())
}

/// Marks the `full`/`view` versions of `plan` with a pending rebuild and the `full` versions
/// whose build read other data than their parents hold now (and those downstream) for rebuild
/// (the last step of [`plan_with_memo`]). What it marks depends only on the project, the plan's
/// actions and the state store's content (every write that can change it bumps the store's
/// generation).
///
/// # Errors
/// A state read fails.
pub fn mark_rebuilds(project: &Project, state: &dyn StateStore, plan: &mut Plan) -> Result<(), StateError> {
    let mut shared = None;
    mark_pending_rebuilds(project, state, plan, &mut shared, None)?;
    mark_stale_builds(project, state, plan, &mut shared, None)
}

/// `(model name, physical relation)` of every version another environment than `plan.env`
/// serves that is not the version `plan` leads to: a relation listed here is shared with another
/// environment's other version (indirect reuse), so rebuilding it over `plan.env`'s parents
/// would change that environment's data.
///
/// # Errors
/// A state read fails.
pub fn served_by_other_versions(plan: &Plan, state: &dyn StateStore) -> Result<BTreeSet<(String, String)>, StateError> {
    let planned: BTreeMap<String, &str> = plan.actions.iter().map(|a| (a.name.to_string(), a.fingerprint.as_str())).collect();
    let index = state.snapshot_index()?;
    let mut out = BTreeSet::new();
    for env in state.environments()?.into_iter().filter(|e| *e != plan.env) {
        for (name, fp) in state.env_pointers(&env)? {
            if planned.get(&name).is_some_and(|p| *p == fp) {
                continue;
            }
            if let Some((physical, _)) = index.get(&(name.clone(), fp)) {
                out.insert((name, physical.clone()));
            }
        }
    }
    Ok(out)
}

/// True when `a`'s relation is shared with another environment's other version and `plan.env`
/// is not `prod`, unless `a` is a `full` version whose every sharer reads the same relations
/// ([`generations::rebuild_is_shared_rightly`]): such a table is not rebuilt here (apply skips
/// it); a record about it waits for an environment that rebuilds it. `shared` caches
/// [`served_by_other_versions`].
fn shared_elsewhere(
    project: &Project,
    state: &dyn StateStore,
    plan: &Plan,
    a: &Action,
    shared: &mut Option<BTreeSet<(String, String)>>,
) -> Result<bool, StateError> {
    if plan.env == crate::core::name::PROD {
        return Ok(false);
    }
    let Some(physical) = &a.physical else { return Ok(false) };
    if shared.is_none() {
        *shared = Some(served_by_other_versions(plan, state)?);
    }
    if !shared.as_ref().is_some_and(|s| s.contains(&(a.name.to_string(), physical.clone()))) {
        return Ok(false);
    }
    if a.kind != "full" {
        return Ok(true);
    }
    let relation_of = |n: &str| plan.actions.iter().find(|b| b.change != Change::Removed && b.name.to_string() == n).and_then(|b| b.physical.clone());
    let relations = generations::relations(project, &a.name, &relation_of);
    Ok(!generations::rebuild_is_shared_rightly(state, &plan.env, &a.name.to_string(), a.fingerprint.as_str(), physical, relations.as_ref())?)
}

/// Marks the `full`/`view` actions whose version has a pending rebuild (an earlier apply or run
/// stopped between recording new intervals of a parent and rebuilding it), and the unique-key,
/// partition and SCD type 2 actions whose version has a pending refresh (the same, before
/// refreshing it), which makes the plan one with changes: apply and run rebuild or refresh them
/// ([`work::decide`]). A `full`/`view` version whose table another environment's version shares
/// is left to it ([`shared_elsewhere`]); a keyed version another environment writes
/// ([`WriterHolds::Refreshes`]) is not marked either: it is never refreshed here, so a mark
/// would make every plan of this environment one with changes that no apply does. With `only`,
/// just the actions of those models are looked at (the others' marks are kept, [`MarkMemo`]).
fn mark_pending_rebuilds(
    project: &Project,
    state: &dyn StateStore,
    plan: &mut Plan,
    shared: &mut Option<BTreeSet<(String, String)>>,
    only: Option<&std::collections::HashSet<ModelName>>,
) -> Result<(), StateError> {
    let pending = state.pending_rebuilds()?;
    if pending.is_empty() {
        return Ok(());
    }
    let pending: HashMap<(&str, &str), &str> = pending.iter().map(|p| ((p.name.as_str(), p.fingerprint.as_str()), p.reason.as_str())).collect();
    let wanted: Vec<(usize, String)> = plan
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| a.change != Change::Removed && !a.build && (matches!(a.kind, "full" | "view") || refreshed_kind(a.kind)))
        .filter(|(_, a)| only.is_none_or(|o| o.contains(&a.name)))
        .filter_map(|(i, a)| pending.get(&(a.name.to_string().as_str(), a.fingerprint.as_str())).map(|r| (i, r.to_string())))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    for (i, reason) in wanted {
        let a = &plan.actions[i];
        if refreshed_kind(a.kind) {
            if !matches!(a.writer_holds, WriterHolds::Refreshes { .. }) {
                let a = &mut plan.actions[i];
                a.rebuild = true;
                a.rebuild_reason = Some(format!("pending: an earlier apply or run stopped before refreshing it ({reason})"));
            }
        } else if matches!(a.writer_holds, WriterHolds::Rebuilds { .. }) {
            // Left to `prod` (its table is `prod`'s, under audits this environment lacks): not
            // marked, said by the plan ([`work::decide`]).
            plan.actions[i].writer_holds.fall_behind(format!("a rebuild of it is pending: {reason}"));
        } else if !shared_elsewhere(project, state, plan, a, shared)? {
            let a = &mut plan.actions[i];
            a.rebuild = true;
            a.rebuild_reason = Some(format!("pending: an earlier apply or run stopped before rebuilding it ({reason})"));
        }
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// True for the kinds (by [`crate::core::Kind::tag`]) `run` refreshes: unique-key, partition,
/// SCD type 2 ([`crate::core::Kind::is_refreshed`]).
fn refreshed_kind(kind: &str) -> bool {
    matches!(kind, "incremental_by_unique_key" | "incremental_by_partition" | "scd_type2")
}

/// Marks the `full` actions (not built by the plan) whose recorded build read other data than
/// their parents hold now, whichever environment changed it ([`generations::stale`]), and the
/// `full` actions downstream of those (through any parents), parents first; the same sharing
/// rule as pending rebuilds applies. A version built before layout 6 has no record and is not
/// marked. With `only`, just the actions of those models are marked (the others' marks are
/// kept, [`MarkMemo`]; no model in `only` is an ancestor of one outside it).
fn mark_stale_builds(
    project: &Project,
    state: &dyn StateStore,
    plan: &mut Plan,
    shared: &mut Option<BTreeSet<(String, String)>>,
    only: Option<&std::collections::HashSet<ModelName>>,
) -> Result<(), StateError> {
    // Also unique-key and partition versions the environment points at anew (a revert, a
    // promotion): their table holds what their last refresh read, which `run` would bring up to
    // date; the apply refreshes them when their parents' data changed since
    // (`work::decide`). Where the environment serves them already, that is `run`'s work.
    let keyed_switch = |a: &Action| matches!(a.kind, "incremental_by_unique_key" | "incremental_by_partition") && a.points_at_existing();
    // A unique-key or partition version whose table holds what another version's refresh read:
    // one inheriting its older version's table (below a parent's non-breaking change), or one the
    // environment points at anew that never refreshed that table itself (it inherited it for
    // another environment, which left its refresh to the table's writer: `dev` applied the
    // change first, `prod` points at its version now). When a parent's version the plan leads to,
    // built here or not, computes intervals the version that refresh read lacked (or lacks ones
    // it held), the apply refreshes it, as `run` would ([`generations::reuse_outgrown`]; a `full`
    // child in that case gets a table of its own instead, as the plan decided). A version pointed
    // at anew with a refresh of its own recorded is `generations::stale`'s, below.
    let keyed_reuse: Vec<usize> = (0..plan.actions.len())
        .filter(|&i| {
            let a = &plan.actions[i];
            matches!(a.kind, "incremental_by_unique_key" | "incremental_by_partition")
                && a.change != Change::Removed
                && !a.build
                && !a.rebuild
                && (a.reused_from.is_some() || a.points_at_existing())
                && a.physical.as_deref().is_some_and(|p| !p.is_empty())
                && only.is_none_or(|o| o.contains(&a.name))
        })
        .collect();
    let pointed: Vec<(String, String)> = keyed_reuse
        .iter()
        .map(|&i| &plan.actions[i])
        .filter(|a| a.reused_from.is_none())
        .map(|a| (a.name.to_string(), a.fingerprint.as_str().to_string()))
        .collect();
    let own_records = if pointed.is_empty() { HashMap::new() } else { state.data_versions(&pointed)? };
    let mut index: Option<crate::state::SnapshotIndex> = None;
    for i in keyed_reuse {
        let a = &plan.actions[i];
        let name = a.name.to_string();
        let (from, inherited) = match &a.reused_from {
            Some(from) => (from.as_str().to_string(), true),
            None => {
                if own_records.get(&(name.clone(), a.fingerprint.as_str().to_string())).is_some_and(|d| d.built_from.is_some()) {
                    continue;
                }
                let physical = a.physical.clone().unwrap_or_default();
                if index.is_none() {
                    index = Some(state.snapshot_index()?);
                }
                match generations::last_refresh_on(state, index.as_ref().expect("read above"), &name, &physical)? {
                    Some(from) => (from, false),
                    None => continue,
                }
            }
        };
        let why = generations::reuse_outgrown(state, &name, &from, &|parent| served_intervals(project, state, &plan.actions, parent))?;
        if why.is_empty() || work::refreshed(project, plan, state, &plan.actions[i])?.is_none() {
            continue;
        }
        let a = &mut plan.actions[i];
        a.rebuild = true;
        a.rebuild_reason = Some(if inherited {
            format!("the table it inherits holds what its older version's last refresh read, while {}", why.join("; "))
        } else {
            format!("its table holds what the last refresh of it (by version `{}`) read, while {}", Fingerprint::from(from).short(), why.join("; "))
        });
    }
    let candidates: Vec<(ModelName, String)> = plan
        .actions
        .iter()
        .filter(|a| a.change != Change::Removed && !a.build && !a.rebuild && (a.kind == "full" || keyed_switch(a)) && a.physical.is_some())
        .filter(|a| only.is_none_or(|o| o.contains(&a.name)))
        .map(|a| (a.name.clone(), a.fingerprint.as_str().to_string()))
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let fingerprints: HashMap<String, String> =
        plan.actions.iter().filter(|a| a.change != Change::Removed).map(|a| (a.name.to_string(), a.fingerprint.as_str().to_string())).collect();
    let stale = generations::stale(project, state, &candidates, &|n: &str| fingerprints.get(n).cloned())?;
    if stale.is_empty() {
        return Ok(());
    }
    let mut reasons: HashMap<&ModelName, &str> = stale.iter().map(|(n, _, r)| (n, r.as_str())).collect();
    // A keyed version is refreshed only when `run` would refresh it now (no cron, or its cron
    // ticked since its last refresh): otherwise its schedule keeps it as it is, unmarked.
    let mut not_due = Vec::new();
    for a in plan.actions.iter().filter(|a| keyed_switch(a) && reasons.contains_key(&a.name)) {
        if work::refreshed(project, plan, state, a)?.is_none() {
            not_due.push(&a.name);
        }
    }
    for name in not_due {
        reasons.remove(name);
    }
    let mut rebuilt: BTreeSet<ModelName> = BTreeSet::new();
    for i in 0..plan.actions.len() {
        let a = &plan.actions[i];
        if keyed_switch(a) && !a.rebuild {
            if let Some(r) = reasons.get(&a.name) {
                let a = &mut plan.actions[i];
                a.rebuild = true;
                a.rebuild_reason = Some(r.replace("since it was built", "since its last refresh"));
            }
            continue;
        }
        if a.change == Change::Removed || a.build || a.kind != "full" || a.physical.is_none() {
            continue;
        }
        if !a.rebuild && only.is_some_and(|o| !o.contains(&a.name)) {
            continue;
        }
        let reason = match reasons.get(&a.name) {
            Some(r) => Some(r.to_string()),
            // Seen through `view` and `embedded` parents: they read the rebuilt table.
            None if !a.rebuild => {
                generations::data_parents(project, &a.name).into_iter().find(|p| rebuilt.contains(p)).map(|p| format!("downstream of the rebuild of {p}"))
            }
            None => None,
        };
        if a.rebuild {
            rebuilt.insert(a.name.clone());
            continue;
        }
        let Some(reason) = reason else { continue };
        // A `full` version left to `prod` ([`WriterHolds::Rebuilds`]) is not rebuilt here: not
        // marked (every plan would have changes no apply does), said by the plan instead.
        if matches!(a.writer_holds, WriterHolds::Rebuilds { .. }) {
            plan.actions[i].writer_holds.fall_behind(reason);
            continue;
        }
        if shared_elsewhere(project, state, plan, a, shared)? {
            continue;
        }
        let a = &mut plan.actions[i];
        a.rebuild = true;
        a.rebuild_reason = Some(reason);
        rebuilt.insert(a.name.clone());
    }
    plan.has_changes = plan.actions.iter().any(Action::has_work);
    Ok(())
}

/// [`plan_with`], then the plan checked against the engine's catalog (`catalog`, read after the
/// store's engine epoch: [`integrity::Observed`]; [`integrity::check`]): what the engine lacks
/// becomes work of the plan. Replayed and computed plans are checked alike. `None` skips the
/// check (apply still refuses a plan that missed something).
///
/// # Errors
/// As [`plan_with`].
pub fn plan_verified(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &Options,
    catalog: Option<integrity::Observed<'_>>,
) -> Result<Plan, PlanError> {
    plan_verified_with(project, state, env, now, options, catalog, None)
}

/// [`plan_verified`] with fingerprints from `versions` when given ([`plan_with_memo`]).
///
/// # Errors
/// As [`plan_with`].
pub fn plan_verified_with(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &Options,
    catalog: Option<integrity::Observed<'_>>,
    versions: Option<&mut VersionMemo>,
) -> Result<Plan, PlanError> {
    let mut versions = versions;
    // The repair memo is taken out before anything can fail: a plan that stops half-way (an
    // error in the marks or the check) leaves no key that would vouch for its check.
    let (prior_key, unclean) = match versions.as_deref_mut() {
        Some(m) => (m.repairs.key.take(), std::mem::take(&mut m.repairs.unclean)),
        None => (None, Default::default()),
    };
    let mut plan = plan_with_memo(project, state, env, now, options, versions.as_deref_mut())?;
    match (catalog, versions) {
        (Some(catalog), Some(m)) => {
            let key = m.repairs.catalog.clone().map(|c| (c, env.to_string(), project.config.root.to_string_lossy().into_owned()));
            // Models whose check is known empty: reused with every ancestor from the plan the
            // repair memo was recorded for (a model not recomputed was in it), found clean
            // there, against the same catalog.
            let valid = key.is_some() && key == prior_key;
            let dirty = m.actions.dirty.as_ref().filter(|_| valid);
            let skip = |n: &ModelName| dirty.is_some_and(|d| !d.contains(n) && !unclean.contains(n));
            let found = integrity::check_skipping(project, state, &mut plan, catalog, &skip)?;
            if key.is_some() {
                m.repairs.key = key;
                m.repairs.unclean = found;
            }
        }
        (Some(catalog), None) => integrity::check(project, state, &mut plan, catalog)?,
        (None, Some(m)) => m.repairs.key = None,
        (None, None) => {}
    }
    // What the repairs rewrite (a lost table rebuilt, lost lake files recomputed) reaches the
    // time-range models below too.
    if catalog.is_some() && plan.actions.iter().any(|a| a.repair.is_some()) {
        recompute::propagate(project, state, &mut plan)?;
    }
    Ok(plan)
}

/// [`plan_with`] without the memo: always computes the plan in full. Operator options are not
/// validated here (see [`plan_with`]).
///
/// # Errors
/// As [`plan_with`].
pub fn compute(project: &Project, state: &dyn StateStore, env: &str, now: Millis, options: &Options) -> Result<Plan, PlanError> {
    compute_with(project, state, env, now, options, None)
}

fn compute_with(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    now: Millis,
    options: &Options,
    memo: Option<&mut VersionMemo>,
) -> Result<Plan, PlanError> {
    validate_env(env)?;
    let dialect = crate::engine::dialect_for(&project.config);
    check_engine(project, env, dialect)?;
    // Read first: a write landing while we read makes the plan stale, never wrongly fresh.
    // With a memo and no operator options, the key of the reads kept in memory ([`ActionMemo`]).
    let store = memo.as_deref().filter(|_| options.is_default()).and_then(|m| m.actions.store.clone());
    let (generation, key) = match store {
        Some(store) => match state.plan_state(env)? {
            // The key counts the janitor's claims; the plan records the generation `apply`
            // compares with the store's.
            Some((g, claims, p)) => (g, Some((env.to_string(), store, g + claims, p))),
            None => (state.generation()?, None),
        },
        None => (state.generation()?, None),
    };
    let owned: Versions;
    let (versions, mut kept) = match memo {
        Some(m) => {
            m.update(project, state)?;
            (&m.last, Some(&mut m.actions))
        }
        None => {
            let keyed = rendered_bodies(project);
            let keys: Vec<String> = keyed.iter().flatten().map(|(k, _)| k.clone()).collect();
            let cache = state.canon_cache_get(&keys)?;
            owned = versions_keyed(project, &keyed, &cache)?;
            (&owned, None)
        }
    };
    // What the last plan left, when its key is this one; forgotten either way until this plan
    // completes (an error below leaves nothing half-kept).
    let (reads, mut previous, mut order) = match kept.as_deref_mut() {
        Some(k) if key.is_some() && k.key == key => {
            k.key = None;
            k.dirty = None;
            let entries = std::mem::take(&mut k.entries);
            let order = std::mem::take(&mut k.order);
            (k.reads.take(), by_position(project, entries, &order), order)
        }
        Some(k) => {
            *k = ActionMemo { store: k.store.take(), ..ActionMemo::default() };
            (None, Vec::new(), Vec::new())
        }
        None => (None, Vec::new(), Vec::new()),
    };
    let reads = match reads {
        Some(r) => r,
        // The metadata this environment serves: its own, written by its last promotion (another
        // environment's apply never changes it).
        None => {
            std::sync::Arc::new(Reads { pointers: state.env_pointers(env)?, served_metadata: state.env_metadata(env)?, snapshots: state.snapshot_index()? })
        }
    };
    let (pointers, served_metadata, snapshots) = (&reads.pointers, &reads.served_metadata, &reads.snapshots);
    let recording = kept.is_some() && key.is_some();
    let mut entries: Vec<ActionEntry> = Vec::with_capacity(if recording { project.dag.len() } else { 0 });
    // Models computed by this plan (changed, or below one that is): their children are too.
    let mut dirty: std::collections::HashSet<ModelName> = std::collections::HashSet::new();
    let mut reused_count = 0;

    let mut actions: Vec<Action> = Vec::with_capacity(project.dag.len());
    // Per DAG position, as decided so far (parents first): whether the model's data for its
    // existing columns is what the environment served before, its category, and the physical
    // relation its action serves.
    let mut decided = Decided::new(project);
    // The other environments' pointers, read once when a time-range version outside `prod` on
    // a table another environment serves first needs them ([`generations::writer_elsewhere`]).
    let mut others: Option<generations::OtherEnvs> = None;
    let mut served_elsewhere: Option<generations::ServedElsewhere> = None;
    let mut prod_serves: Option<ProdServes> = None;
    // Read once, when a `full` model first considers inheriting a table ([`full_table_read_elsewhere`]).
    let mut elsewhere: Option<generations::ServedElsewhere> = None;
    // Read once, when a changed model's column impact first asks ([`served_with_statements`]).
    let mut with_statements: Option<BTreeSet<(String, String)>> = None;
    // On a store with no snapshot and no pointer, with nothing kept from a last plan, every model
    // is computed below as a new version: its metadata (text and tree) computed first on all
    // cores, as the loop would compute it.
    let mut ahead = if previous.iter().all(Option::is_none) && pointers.is_empty() && snapshots.is_empty() {
        metadata_all(&project.dag.models().collect::<Vec<_>>())
    } else {
        Vec::new()
    };
    for (index, model) in project.dag.models().enumerate() {
        let fp = &versions.fingerprints[&model.name];
        let definition = if recording { project.dag.model_digest(index) } else { [0; 32] };
        if let Some(e) = previous.get_mut(index).and_then(Option::take).filter(|e| {
            e.definition == definition
                && e.action.fingerprint == *fp
                // Whether a `full` model inherits its older table depends on the intervals its
                // parents' new versions compute by `now` ([`generations::reuse_outgrown`]).
                && !(e.action.kind == "full" && e.category == Change::Indirect)
                // Which environment writes a shared table depends on their expiry (`now`, the
                // configured ttl), which no state write marks ([`generations::writer_elsewhere`]).
                && e.writer_holds == WriterHolds::Nothing
                && (dirty.is_empty() || !model.body.iter().flat_map(|b| b.refs()).any(|r| dirty.contains(&r.target)))
        }) {
            let mut e = e;
            let mut action = e.action.clone();
            if let (Some(t), Some(done)) = (model.kind.time_range(), &e.done) {
                // A model's intervals are wanted up to its last due instant (its cron's last tick).
                let due = project.dag.due_at(&model.name, now);
                let floor = t.grain.floor(due);
                if e.floor != Some(floor) {
                    let missing = interval::missing(&interval::wanted(t.start, t.end, t.grain, due), done, t.lookback);
                    action.backfill = interval::merge(&missing);
                    action.intervals = missing.len();
                    e.action.backfill.clone_from(&action.backfill);
                    e.action.intervals = action.intervals;
                    e.floor = Some(floor);
                }
            }
            decided.set(index, e.same_data, e.category, e.served.clone());
            decided.changed_columns[index].clone_from(&e.changed_columns);
            decided.reshaped[index].clone_from(&e.reshaped);
            decided.set_drops_kept(index, model, e.action.drops_kept.is_some());
            decided.kept_dropped_by[index].clone_from(&e.kept_dropped_by);
            decided.added_columns[index].clone_from(&e.added_columns);
            actions.push(action);
            if recording {
                entries.push(e);
            }
            reused_count += 1;
            continue;
        }
        let fp = fp.clone();
        dirty.insert(model.name.clone());
        let name_s = model.name.to_string();
        let (meta_text, meta_tree) = match ahead.get_mut(index).map(std::mem::take) {
            Some((text, tree)) => (text, Some(tree)),
            None => (metadata_text(model), None),
        };
        let previous = pointers.get(&name_s).map(|p| Fingerprint::from(p.clone()));
        let external = matches!(model.kind, Kind::External(_));
        let mut explain = None;
        let mut reused: Option<(Fingerprint, String)> = None;
        // A `view`'s physical relation embeds its parents' physical names (and, through
        // embedded parents, theirs): another version inherits it only when every one of those
        // names is still what it embeds (SPEC §4, invariant 18). Otherwise it gets a new view;
        // its data stays the same when its parents' data does.
        let embeds_parents = matches!(model.kind, Kind::View);
        let mut data_kept = false;
        let mut reclassified_from = None;
        let mut new_columns = Vec::new();
        // Indirect changes: the models upstream whose `--forward-only` would keep this model's
        // inputs as they were ([`Decided::kept_dropped_by`]).
        let mut dropped_upstream: BTreeSet<ModelName> = BTreeSet::new();
        let change = match &previous {
            None => Change::Added,
            Some(p) if *p == fp => {
                // Compared as text first (one bulk read, no parse), parsed only when it differs.
                // Externals too: an audit added to a source or edited is a `metadata` change,
                // which apply runs before it records it (docs/audits.md).
                let served = served_metadata.get(&name_s);
                let differs = served.is_some_and(|m| *m != meta_text);
                let meta: serde_json::Value = if differs { serde_json::from_str(&meta_text).unwrap_or_default() } else { serde_json::Value::Null };
                match served.filter(|_| differs).and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok()) {
                    Some(old) if old != meta => {
                        explain = Some(Explain {
                            diverged: metadata_paths(&old, &meta),
                            reason: "only fields that do not shape data changed".into(),
                            cascade_from: vec![],
                            column_impact: None,
                        });
                        Change::Metadata
                    }
                    _ => Change::Unchanged,
                }
            }
            Some(p) => {
                // Own definition unchanged? Recompute with the parents' previous versions.
                let old_parents: BTreeMap<ModelName, Fingerprint> = model
                    .parents()
                    .into_iter()
                    .map(|q| {
                        let fp = pointers.get(&q.to_string()).map(|f| Fingerprint::from(f.clone())).unwrap_or_else(|| versions.fingerprints[&q].clone());
                        (q, fp)
                    })
                    .collect();
                let own = fingerprint_with_digest(model, versions.digests.get(&model.name).map(String::as_str), &old_parents);
                let changed_parents: Vec<&ModelName> = old_parents.keys().filter(|q| decided.category(q).is_some_and(|c| c != Change::Unchanged)).collect();
                let old = if external { None } else { old_definition(state, &name_s, p.as_str())? };
                if own == *p {
                    // A `*` over a parent that gained columns would change this model's shape,
                    // and other constructs its rows (a `NATURAL JOIN`, a name the new column
                    // captures: [`crate::sql::sight`]): rebuild it (and meet the contract)
                    // rather than keep serving what the old columns gave.
                    let canonical = canonical_of(dialect, model).ok().flatten();
                    let reads_star = canonical.as_ref().is_some_and(|c| categorize::selects_star(&c.text));
                    // Read as the canonical text was: a body only DuckDB parses is seen whole.
                    let sight: std::cell::OnceCell<crate::sql::sight::ColumnSight> = std::cell::OnceCell::new();
                    let sight_of = || sight.get_or_init(|| column_sight_of(model, canonical.as_ref().map(|c| c.source)));
                    let sees_added = |q: &ModelName| reads_star || sight_of().sees(decided.added_columns(q));
                    let mut sees_new_columns = false;
                    // Column impact: a parent whose breaking change is confined to some columns
                    // breaks this model only when it reads one of them (lineage certain) or, when
                    // the change reshapes the parent's column list, may see that ([`confined_read`]).
                    let mut unread: Vec<(String, Vec<String>)> = Vec::new();
                    let mut reshaped_read: Vec<String> = Vec::new();
                    let mut lineage_of: Option<lineage::ModelLineage> = None;
                    // An SCD type 2 model reconciled over a unique-key or partition parent built
                    // anew from its query alone ([`DropsKept`]) would close the keys it lost.
                    let scd = matches!(model.kind, Kind::ScdType2(_));
                    let breaking_names: Vec<&ModelName> = changed_parents
                        .iter()
                        .filter(|q| {
                            !decided.same_data(q).unwrap_or(false)
                                || (scd && decided.lost_kept(q))
                                || (decided.category(q) == Some(Change::NonBreaking) && {
                                    let sees = sees_added(q);
                                    sees_new_columns |= sees;
                                    sees
                                })
                        })
                        .filter(|q| {
                            let Some(cols) = decided.changed_columns(q) else { return true };
                            let l = lineage_of.get_or_insert_with(|| lineage::model_lineage(project, model));
                            let reshape = decided.reshaped(q);
                            match confined_read(project, model, &q.to_string(), cols, reshape, l, |names| sight_of().sees(Some(names))) {
                                ConfinedRead::Unread => {
                                    unread.push((q.to_string(), cols.iter().cloned().collect()));
                                    false
                                }
                                ConfinedRead::Columns => true,
                                ConfinedRead::Shape => {
                                    reshaped_read.push(format!("`{q}` {}", reshape.map(Reshape::describe).unwrap_or_default()));
                                    true
                                }
                            }
                        })
                        .copied()
                        .collect();
                    let breaking: Vec<String> = breaking_names.iter().map(|q| q.to_string()).collect();
                    // Parents whose only change of data is that they are unique-key or partition
                    // models built anew from their query alone, without the rows their refreshes
                    // kept ([`DropsKept`]): their rows change though their columns' data would
                    // not, so this SCD type 2 model rebuilds (reconciled over the new parent table,
                    // it would record the keys it lost as deleted).
                    let dropping = scd && !reads_star && !sees_new_columns && !breaking_names.is_empty() && breaking_names.iter().all(|q| decided.lost_kept(q));
                    dropped_upstream = decided.kept_dropped_by_all(&breaking_names);
                    let cascade: Vec<String> = changed_parents.iter().map(|q| q.to_string()).collect();
                    // A `full` table built from a parent's older version lacks the intervals its
                    // new version computes (or keeps ones it drops): not inherited, built anew.
                    let outgrown = match &old {
                        Some(o) if breaking.is_empty() && !external && matches!(model.kind, Kind::Full) && !o.physical.is_empty() => {
                            let mut why: Vec<String> = generations::data_parents(project, &model.name)
                                .into_iter()
                                .filter(|q| decided.rows_change(q))
                                .map(|q| match project.dag.get(&q).map(|m| &m.kind) {
                                    Some(Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_)) => {
                                        format!("`{q}` is served from another table, which holds other upserted rows")
                                    }
                                    _ => format!("`{q}`'s table is built anew over new intervals"),
                                })
                                .collect();
                            why.extend(generations::reuse_outgrown(state, &name_s, p.as_str(), &|parent| built_intervals(project, state, &actions, parent))?);
                            why
                        }
                        _ => Vec::new(),
                    };
                    let reason = if breaking.is_empty() {
                        match &old {
                            Some(_) if !outgrown.is_empty() => {
                                // Its rows change as a `run` rebuilding it over its parents' new
                                // intervals would change them: its children keep their data
                                // (time-range ones compute the new intervals), `full` ones are
                                // built anew too.
                                data_kept = true;
                                decided.rows_change[index] = true;
                                format!(
                                    "unchanged itself; every changed parent keeps existing columns' data, but {}, so it does not inherit the table it had (a table of its own)",
                                    outgrown.join("; ")
                                )
                            }
                            Some(_) if embeds_parents && !embedded_names_kept(project, model, &decided, pointers, snapshots) => {
                                data_kept = true;
                                "unchanged itself; every changed parent keeps existing columns' data, but a view embeds its parents' physical names, so a new view is created over the new versions".to_string()
                            }
                            Some(o)
                                if !external
                                    && !full_table_read_elsewhere(project, state, env, model, &fp, &o.physical, &decided, snapshots, &mut elsewhere)? =>
                            {
                                reused = Some((p.clone(), o.physical.clone()));
                                "unchanged itself; every changed parent keeps existing columns' data, so the physical table is reused".to_string()
                            }
                            Some(_) if !external => {
                                // Built anew over parents keeping their data: its data stays the same.
                                data_kept = true;
                                "unchanged itself; every changed parent keeps existing columns' data, but its table is also served by another \
                                 environment over other parents' tables, so it gets one of its own"
                                    .to_string()
                            }
                            _ => "unchanged itself; a parent changed".to_string(),
                        }
                    } else {
                        let mut because = format!(
                            "{}parent{} {}",
                            if reads_star {
                                "`*` over a changed "
                            } else if sees_new_columns {
                                "the new columns (which its query may bind) of "
                            } else if dropping {
                                ""
                            } else if breaking_names.iter().all(|q| decided.category(q) == Some(Change::Breaking)) {
                                "breaking "
                            } else if breaking_names.iter().all(|q| decided.category(q) == Some(Change::Indirect)) {
                                // Parents rebuilt for a change above them, not breaking themselves
                                // (the plan marks them `indirect`).
                                "indirectly changed "
                            } else {
                                "changed "
                            },
                            if breaking.len() == 1 { "" } else { "s" },
                            breaking.iter().map(|b| format!("`{b}`")).collect::<Vec<_>>().join(", ")
                        );
                        if dropping && breaking_names.iter().all(|q| decided.drops_kept(q)) {
                            because.push_str(&format!(
                                ", built anew from {} query alone without the rows earlier refreshes kept (its rows change)",
                                if breaking.len() == 1 { "its" } else { "their" }
                            ));
                        } else if dropping {
                            // Read through `full`, `view` or `embedded` models.
                            let above = decided.kept_dropped_by_all(&breaking_names);
                            let above = if above.is_empty() {
                                "unique-key or partition models above".to_string()
                            } else {
                                above.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                            };
                            because.push_str(&format!(
                                ", which no longer hold{} the rows earlier refreshes of {above} kept (its rows change)",
                                if breaking.len() == 1 { "s" } else { "" }
                            ));
                        }
                        // A version that exists already (served here before an edit now undone,
                        // or built for another environment: a first promotion of it here) is
                        // pointed at, not built: what it recomputes or rebuilds the plan's other
                        // notes say.
                        if snapshots.contains_key(&(name_s.clone(), fp.as_str().to_string())) {
                            format!(
                                "unchanged itself; another version because of {because}, one that exists already (built before, here or for another environment): pointed at, not built"
                            )
                        } else {
                            format!("unchanged itself; rebuilt because of {because}")
                        }
                    };
                    let mut reason = reason;
                    if breaking.is_empty() && !unread.is_empty() {
                        let which = unread
                            .iter()
                            .map(|(q, cols)| format!("`{q}` changed only {}", cols.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")))
                            .collect::<Vec<_>>()
                            .join("; ");
                        reason = format!("{reason} (column impact: {which}, which this model does not read)");
                    }
                    if !breaking.is_empty() && !reshaped_read.is_empty() {
                        reason = format!(
                            "{reason} (column impact: {}, and this model's query may see that — whole rows, every column, columns by position, or a name that binds elsewhere once removed — so the change is not confined for it)",
                            reshaped_read.join("; ")
                        );
                    }
                    if !breaking.is_empty() && !dropped_upstream.is_empty() {
                        let list = dropped_upstream.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
                        reason = format!("{reason}; `--forward-only {list}` keeps the rows kept upstream, and this model's inputs as they were");
                    }
                    let mut change = Change::Indirect;
                    if reused.is_none()
                        && options.forward_only.contains(&model.name)
                        && let Some(o) = &old
                    {
                        refuse_shared_history(state, env, &model.name, p)?;
                        // The operator keeps the old table although a parent broke: history
                        // stays as computed, only new intervals see the parent's change.
                        reused = Some((p.clone(), o.physical.clone()));
                        reason = format!("{reason}; forward-only: the old table and its history are kept");
                        change = Change::ForwardOnly;
                    }
                    explain = Some(Explain { diverged: vec![], reason, cascade_from: cascade, column_impact: None });
                    change
                } else {
                    let new_schema = declared_schema(model, old.as_ref(), &BTreeMap::new());
                    let new_kind = model.kind_payload();
                    let mut confined = None;
                    let verdict = match &old {
                        Some(o) if !external => {
                            let new_canonical = canonical_of(dialect, model)?.map(|c| c.text);
                            let old_has_statements = o.has_statements || {
                                if with_statements.is_none() {
                                    with_statements = Some(served_with_statements(state)?);
                                }
                                with_statements.as_ref().is_some_and(|w| w.contains(&(name_s.clone(), p.to_string())))
                            };
                            let new_statements = crate::sql::fingerprint::statements_payload(model);
                            let old_def = categorize::Definition {
                                canonical: o.canonical.as_deref(),
                                kind: &o.kind,
                                schema: &o.schema,
                                grain: &o.grain,
                                statements: o.statements.as_ref(),
                                has_statements: old_has_statements,
                            };
                            let new_def = categorize::Definition {
                                canonical: new_canonical.as_deref(),
                                kind: &new_kind,
                                schema: &new_schema,
                                grain: &model.grain,
                                statements: new_statements.as_ref(),
                                has_statements: !model.statements.is_empty(),
                            };
                            let verdict = categorize::compare(&old_def, &new_def);
                            if !verdict.non_breaking
                                && let Some(keys) = row_key_columns(&model.kind)
                            {
                                confined = categorize::changed_columns(&old_def, &new_def, &keys);
                            }
                            verdict
                        }
                        _ => categorize::OwnChange {
                            non_breaking: false,
                            diverged: vec![if external { "source".into() } else { "snapshot".into() }],
                            reason: if external { "the external source's definition changed".into() } else { "no stored definition to compare with".into() },
                            keeps_columns: false,
                        },
                    };
                    let mut change = if verdict.non_breaking { Change::NonBreaking } else { Change::Breaking };
                    if let Some(o) = &old {
                        decided.added_columns[index] =
                            Some(new_schema.iter().filter(|(n, _)| !o.schema.iter().any(|(c, _)| c == n)).map(|(n, _)| n.to_lowercase()).collect());
                    }
                    let mut reason = verdict.reason.clone();
                    if !verdict.non_breaking
                        && let Some(o) = old.as_ref().filter(|o| !external && same_text_read_anew(o, model, &new_schema, &new_kind))
                    {
                        reason = format!(
                            "the query's text is the one the snapshot recorded; only efmesh's canonical reading of it changed (an upgrade's fingerprint rules{}), so the version is built once more",
                            if o.canonical.is_some() { "" } else { "; no canonical form recorded" }
                        );
                    }
                    if let Some(wanted) = options.reclassify.get(&model.name) {
                        if *wanted == Change::NonBreaking && !verdict.keeps_columns {
                            return Err(PlanError::Operator(format!(
                                "cannot reclassify `{}` as non-breaking: {} (a dropped or renamed column cannot be non-breaking)",
                                model.name, verdict.reason
                            )));
                        }
                        if *wanted != change {
                            reclassified_from = Some(change);
                            reason = format!("{reason}; reclassified {} by the operator", wanted.as_str());
                            change = *wanted;
                        }
                    }
                    if options.forward_only.contains(&model.name) {
                        let Some(o) = old.as_ref().filter(|_| forward_only_kind(&model.kind)) else {
                            return Err(PlanError::Operator(format!(
                                "`--forward-only {}`: only `incremental_by_time_range`, `incremental_by_unique_key`, `incremental_by_partition` and `scd_type2` models can be forward-only\n  hint: apply it as a {} change instead",
                                model.name,
                                change.as_str()
                            )));
                        };
                        if o.kind.get("tag") != new_kind.get("tag") || forward_only_kind_fields(&o.kind) != forward_only_kind_fields(&new_kind) {
                            return Err(PlanError::Operator(format!(
                                "`--forward-only {}`: its kind changed ({}), so the old table cannot be kept\n  hint: apply without `--forward-only` to rebuild it",
                                model.name, verdict.reason
                            )));
                        }
                        if let Some((gone, _)) = o.schema.iter().find(|(c, _)| !new_schema.iter().any(|(n, _)| n == c)) {
                            let hint = if matches!(model.kind, Kind::ScdType2(_)) {
                                "apply without `--forward-only`: a rename declared with `renamed = { old = \"new\" }` carries the history over, `--reset-history` starts it over"
                            } else {
                                "apply without `--forward-only` to rebuild the table with its history"
                            };
                            return Err(PlanError::Operator(format!(
                                "`--forward-only {}`: column `{gone}` is dropped or renamed, and a forward-only version can only add columns\n  hint: {hint}",
                                model.name
                            )));
                        }
                        if let Some((c, t)) = o.schema.iter().find(|(c, t)| new_schema.iter().any(|(n, nt)| n == c && nt != t)) {
                            return Err(PlanError::Operator(format!(
                                "`--forward-only {}`: column `{c}` changes type from `{t}`, and a forward-only version can only add columns\n  hint: apply without `--forward-only` to rebuild it",
                                model.name
                            )));
                        }
                        refuse_shared_history(state, env, &model.name, p)?;
                        new_columns = model.schema.0.iter().filter(|c| !o.schema.iter().any(|(n, _)| *n == c.name)).cloned().collect();
                        reused = Some((p.clone(), o.physical.clone()));
                        reason = if matches!(model.kind, Kind::ScdType2(_)) {
                            format!(
                                "{reason}; forward-only: the old table and its history are kept, added columns are NULL in the versions recorded so far, and the next reconcile (`efmesh run`) records the change"
                            )
                        } else if matches!(model.kind, Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_)) {
                            format!(
                                "{reason}; forward-only: the old table and the rows its refreshes kept are kept, added columns are NULL in those rows, and the next refresh (`efmesh run`) writes what the new query returns into it"
                            )
                        } else {
                            format!("{reason}; forward-only: the old table and its history are kept, only intervals computed from now on see the change")
                        };
                        change = Change::ForwardOnly;
                    }
                    // A confined change that drops, renames, adds or moves columns reshapes the
                    // column list: its children are judged against the old list too ([`Reshape`]).
                    let reshape = old.as_ref().and_then(|o| Reshape::of(&o.schema, &new_schema, &model.kind));
                    let column_impact = confined.filter(|_| change == Change::Breaking).map(|cols| {
                        decided.changed_columns[index] = Some(cols.clone());
                        decided.reshaped[index].clone_from(&reshape);
                        ColumnImpact {
                            changed: cols.into_iter().collect(),
                            removed: reshape.as_ref().map(|r| r.removed.iter().cloned().collect()).unwrap_or_default(),
                            moved: reshape.as_ref().is_some_and(|r| r.moved),
                            reshape: reshape.clone(),
                            ..ColumnImpact::default()
                        }
                    });
                    explain = Some(Explain { diverged: verdict.diverged, reason, cascade_from: vec![], column_impact });
                    change
                }
            }
        };
        let parents_kept = model.body.as_ref().is_none_or(|b| b.refs().all(|r| decided.same_data(&r.target).unwrap_or(false)));
        if !parents_kept {
            // Its own edit is confined to some columns, but a parent's changed data may reach
            // any of the others: its children are judged as under any breaking change.
            decided.changed_columns[index] = None;
            decided.reshaped[index] = None;
            if let Some(e) = explain.as_mut() {
                e.column_impact = None;
            }
        }
        let keeps_data = match change {
            Change::Unchanged | Change::Metadata | Change::ForwardOnly => true,
            // Its own edit only added columns, but a parent's break still changes its rows.
            Change::NonBreaking => parents_kept,
            Change::Indirect => reused.is_some() || data_kept,
            _ => false,
        };
        decided.same_data[index] = Some(keeps_data);
        decided.categories[index] = Some(change);

        let key = (name_s.clone(), fp.as_str().to_string());
        let existing = snapshots.get(&key);
        // `--forward-only` keeps the old table; a version of this query that already exists on
        // another table (its own, which an earlier apply built, perhaps in part; or another
        // version's, which it took forward-only elsewhere) cannot be put on the old one: a
        // version has one table, and served there it would not be what the plan promised.
        if options.forward_only.contains(&model.name)
            && let (Some((phys, _)), Some((_, kept))) = (existing, &reused)
            && !phys.is_empty()
            && phys != kept
        {
            return Err(PlanError::Operator(format!(
                "`--forward-only {}`: its new version {} already exists on another table ({phys}) than the one `{env}` serves ({kept}): a version has one table, so the old table and its history cannot be kept for it\n  \
                 hint: apply without `--forward-only` to serve that version on its table (its intervals computed with this query, the missing ones computed now), or make the edit another query (a new version) to keep the old table",
                model.name,
                fp.short()
            )));
        }
        // A version that already exists on an older version's table was applied forward-only
        // elsewhere: say so, whatever the AST comparison says — when the environment's own
        // version is on that table too (or it has none). From a version on another table (its
        // own), the environment's data changes: its children are judged as under the computed
        // change, never kept (they would keep rows computed from the other table).
        let mut change = change;
        let from_that_table =
            |phys: &String| previous.as_ref().is_none_or(|p| snapshots.get(&(name_s.clone(), p.as_str().to_string())).is_some_and(|(pp, _)| pp == phys));
        if let (Some((phys, _)), Change::Breaking | Change::NonBreaking, false) = (existing, change, embeds_parents)
            && physical_relation(dialect, model, &fp).is_some_and(|own| own != *phys)
            && !phys.is_empty()
            && from_that_table(phys)
        {
            if let Some(e) = explain.as_mut() {
                e.reason = format!("{}; this version was applied forward-only and keeps an older version's table and history", e.reason);
            }
            change = Change::ForwardOnly;
            decided.categories[index] = Some(change);
            decided.same_data[index] = Some(true);
            decided.changed_columns[index] = None;
            decided.reshaped[index] = None;
        }
        let physical = match (existing, &reused) {
            (Some((p, _)), _) if !p.is_empty() => Some(p.clone()),
            (_, Some((_, p))) if !p.is_empty() => Some(p.clone()),
            _ => physical_relation(dialect, model, &fp),
        };
        // A forward-only version an earlier apply recorded on the table it keeps and never
        // promoted (refused, its writes taken back; or stopped by a kill): no environment serves
        // it and none ever did (no `released` record), so it inherits the table as on that first
        // attempt — the kept version's done intervals, and the take-back of what it writes if
        // this apply fails too (`apply::inherited`). As a recorded version it would compute its
        // whole history with the new query into the table the environment serves, none of it
        // taken back. A version served before (a return to the table's own version, or to one a
        // promotion left) keeps its own ledger: its done intervals are its query's rows, and the
        // days another query wrote since are not done for it.
        let mut leftover = false;
        if change == Change::ForwardOnly
            && let (Some((phys, _)), Some(p)) = (existing, previous.as_ref())
            && *p != fp
            && !phys.is_empty()
            && snapshots.get(&(name_s.clone(), p.as_str().to_string())).is_some_and(|(pp, _)| pp == phys)
            && !served_anywhere(state, snapshots, &mut served_elsewhere, env, (&name_s, fp.as_str(), phys))?
            && !state.was_released(&name_s, fp.as_str())?
        {
            reused = Some((p.clone(), phys.clone()));
            leftover = true;
        }
        let existing = existing.filter(|_| !leftover);
        // A unique-key or partition table holds what its refreshes upserted (keys, partitions its
        // query may no longer return): served from another table than the environment's, its
        // rows change though its columns' data is kept, and a `full` child built over the old
        // table is built anew ([`Decided::rows_change`]).
        if matches!(model.kind, Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_))
            && let (Some(now), Some((before, _))) =
                (physical.as_deref(), previous.as_ref().and_then(|p| snapshots.get(&(name_s.clone(), p.as_str().to_string()))))
            && !before.is_empty()
            && now != before
        {
            decided.rows_change[index] = true;
        }
        // A version recorded by a project on another engine sharing this state store may name
        // storage this engine cannot (its identifiers are shorter): refused, never cut.
        if let (Some(limit), Some(p)) = (dialect.max_identifier_bytes(), physical.as_deref())
            && let Some(long) = p.split("\".\"").map(|part| part.trim_matches('"')).find(|part| part.len() > limit)
        {
            return Err(PlanError::EngineFeature {
                model: model.name.clone(),
                location: model.location.clone(),
                message: format!(
                    "its version {} is recorded in the state store with the storage `{long}` ({} bytes), which the {} engine cannot name (at most {limit} bytes): was this state store used with another engine? Give each engine its own state store",
                    fp.short(),
                    long.len(),
                    dialect.title()
                ),
            });
        }
        decided.served[index].clone_from(&physical);
        let new_version = !external && existing.is_none() && reused.is_none();
        // An embedded model has no storage: its new version is registered, nothing is built.
        let register = new_version && matches!(model.kind, Kind::Embedded);
        let build = new_version && !register;
        // A unique-key or partition version on a table the environment's version filled (a build
        // is its first refresh) replaced by one served from another table: what earlier refreshes
        // kept there (keys, partitions the query no longer returns) is not served any more. Its
        // rows change though its columns' data would not, and the plan says so. Its `scd_type2`
        // children are judged as under a change of its data (an SCD child reconciled over the new
        // table would record the keys it lost as deleted); its other children keep their tables as
        // under any change keeping its columns' data (a time-range model's done intervals never
        // follow its parent's current rows, a keyed child never deletes by absence).
        let drops_kept = match &previous {
            Some(p) if *p != fp => match snapshots.get(&(name_s.clone(), p.as_str().to_string())) {
                Some((before, kind))
                    if matches!(kind.as_str(), "incremental_by_unique_key" | "incremental_by_partition")
                        && !before.is_empty()
                        && physical.as_deref() != Some(before.as_str()) =>
                {
                    Some(DropsKept { from: p.clone(), built: build, forward_only_ok: build && forward_only_accepted(state, env, model, p)? })
                }
                _ => None,
            },
            _ => None,
        };
        // Which models upstream (this one included) `--forward-only` would keep the rows of, so
        // that this model's data stays what it was: only when nothing else changes it.
        decided.set_drops_kept(index, model, drops_kept.is_some());
        let kept_by = match change {
            // Its rows lack only what keyed refreshes above kept, read through `full`, `view` and
            // `embedded` models ([`Decided::lost_kept`]).
            Change::Indirect if decided.same_data[index] == Some(true) && decided.lost_kept[index] => {
                let losing: Vec<&ModelName> = model.body.iter().flat_map(|b| b.refs()).map(|r| &r.target).filter(|t| decided.lost_kept(t)).collect();
                decided.kept_dropped_by_all(&losing)
            }
            _ if decided.same_data[index] == Some(true) && drops_kept.is_none() => BTreeSet::new(),
            Change::Indirect => dropped_upstream,
            Change::NonBreaking if drops_kept.as_ref().is_some_and(|d| d.forward_only_ok) => {
                let unkept: Vec<&ModelName> =
                    model.body.iter().flat_map(|b| b.refs()).map(|r| &r.target).filter(|t| !decided.same_data(t).unwrap_or(false)).collect();
                // Its own parents' data kept, or changed only by rebuilds of keyed models above.
                let mut by = decided.kept_dropped_by_all(&unkept);
                if unkept.is_empty() || !by.is_empty() {
                    by.insert(model.name.clone());
                }
                by
            }
            _ => BTreeSet::new(),
        };
        decided.kept_dropped_by[index] = kept_by;
        let reused_any = reused.is_some();
        let mut kept_done = None;
        let mut undone_outside = None;
        let mut kept_holds = WriterHolds::Nothing;
        let mut floor = None;
        // What this version reads here, for a table another environment writes (decided
        // already: parents come first).
        let served_here = |p: &str| {
            let n = ModelName::parse(p).ok()?;
            Some((decided.served(&n).unwrap_or_default().to_string(), versions.fingerprints.get(&n)?.as_str().to_string()))
        };
        let (backfill, intervals) = match model.kind.time_range() {
            Some(t) => {
                let due = project.dag.due_at(&model.name, now);
                floor = Some(t.grain.floor(due));
                let wanted = interval::wanted(t.start, t.end, t.grain, due);
                // Only this version's ledger (and the one it inherits): older rows never matter.
                // (A version whose table another environment's newer version took over never
                // writes into it outside `prod`: `apply::shared_writes`.)
                let mut done = state.done_intervals(&name_s, fp.as_str())?;
                if let (None, Some((from, _))) = (existing, &reused) {
                    done.extend(state.done_intervals(&name_s, from.as_str())?);
                }
                // Outside `prod`, on a table another environment's (other) version of the model
                // serves and writes (`prod`'s, else the oldest version's there): the intervals it
                // computed are in the table, and rewriting them from this environment's parents
                // would change what it serves (a late row only this environment's parent read).
                // Not computed here, lookback included.
                let mut holds = match physical.as_deref() {
                    Some(own) if env != crate::core::name::PROD && !own.is_empty() => {
                        match shared_writer(state, snapshots, &mut served_elsewhere, &mut others, project, env, now, (&name_s, fp.as_str(), own))? {
                            // The same query (an inherited table): its rows are what this version
                            // would write from the same parent tables. Another query (a
                            // forward-only change took the table over) is `apply::shared_writes`'
                            // refusal.
                            Some((writer, f, pointers))
                                if state.snapshot(&name_s, f)?.map(|r| r.canonical) == Some(canonical_of(dialect, model)?.map(|c| c.text)) =>
                            {
                                let done = state.done_intervals(&name_s, f)?;
                                if generations::reads_other_parents(project, &model.name, &served_here, pointers, snapshots) {
                                    WriterHolds::All { writer: writer.to_string(), done, withheld: 0, settings: false, stale: BTreeSet::new() }
                                } else {
                                    WriterHolds::Done(done)
                                }
                            }
                            _ if prod_writes_it(state, &mut prod_serves, env, &name_s, fp.as_str(), model)? => WriterHolds::All {
                                writer: crate::core::name::PROD.to_string(),
                                done: done.clone(),
                                withheld: 0,
                                settings: true,
                                stale: BTreeSet::new(),
                            },
                            _ => WriterHolds::Nothing,
                        }
                    }
                    _ => WriterHolds::Nothing,
                };
                done.extend(holds.writer_done().into_iter().flatten().copied());
                let mut missing = interval::missing(&wanted, &done, t.lookback);
                holds.keep_own(&mut missing);
                kept_holds = holds;
                // Narrower bounds over a table computed under wider ones: what those held and no
                // run will now compute. The bounds the table was computed under: what this
                // environment served for the version, the version's own first metadata (another
                // environment created it), the one whose table it inherits (forward-only).
                let mut olds: Vec<serde_json::Value> = Vec::new();
                if previous.as_ref() == Some(&fp) {
                    if let Some(old) = served_metadata.get(&name_s).filter(|m| **m != meta_text)
                        && let Ok(old) = serde_json::from_str::<serde_json::Value>(old)
                    {
                        olds.push(old);
                    }
                } else if !new_version {
                    if existing.is_some()
                        && let Some(r) = state.snapshot(&name_s, fp.as_str())?
                    {
                        olds.push(r.metadata);
                    }
                    if let Some((from, _)) = &reused
                        && let Some(r) = state.snapshot(&name_s, from.as_str())?
                    {
                        olds.push(r.metadata);
                    }
                }
                if !olds.is_empty() {
                    undone_outside = undone_outside_bounds(t, &olds, &done, due);
                }
                kept_done = Some(done);
                (interval::merge(&missing), missing.len())
            }
            None => {
                // Outside `prod`, a unique-key, partition or SCD type 2 version on a table another
                // environment's version writes over other parent tables is never refreshed here
                // (`work::decide` says so): its rows are the writer's last refresh.
                if model.kind.is_refreshed()
                    && let Some(own) = physical.as_deref().filter(|p| env != crate::core::name::PROD && !p.is_empty())
                {
                    if let Some((writer, f, pointers)) =
                        shared_writer(state, snapshots, &mut served_elsewhere, &mut others, project, env, now, (&name_s, fp.as_str(), own))?
                        && generations::reads_other_parents(project, &model.name, &served_here, pointers, snapshots)
                    {
                        kept_holds =
                            WriterHolds::Refreshes { writer: writer.to_string(), at: crate::state::refreshed_until(state, &name_s, f)?, settings: false };
                    } else if prod_writes_it(state, &mut prod_serves, env, &name_s, fp.as_str(), model)? {
                        kept_holds = WriterHolds::Refreshes {
                            writer: crate::core::name::PROD.to_string(),
                            at: crate::state::refreshed_until(state, &name_s, fp.as_str())?,
                            settings: true,
                        };
                    }
                } else if matches!(model.kind, Kind::Full)
                    && let Some(own) = physical.as_deref()
                    && prod_rebuilds_under(state, snapshots, &mut prod_serves, env, (&name_s, fp.as_str(), own), || meta_text.clone())?
                {
                    // Outside `prod`, a `full` version on the table `prod` serves, lacking one of
                    // `prod`'s audits there (or with other statements), is never rebuilt here: a
                    // rebuild would replace what `prod` serves with rows `prod`'s audits never
                    // checked (`work::decide` says so).
                    kept_holds = WriterHolds::Rebuilds { writer: crate::core::name::PROD.to_string(), behind: None };
                }
                (Vec::new(), 0)
            }
        };
        // Only where the environment's version is an SCD model (its snapshot's kind says so):
        // the others have no history to lose.
        let mut history = match &previous {
            Some(p) if *p != fp && snapshots.get(&(name_s.clone(), p.as_str().to_string())).is_some_and(|(_, kind)| kind == "scd_type2") => {
                scd_history(state, env, model, p, &fp, physical.as_deref(), build, options)?
            }
            _ => None,
        };
        // A history starting over only because a unique-key or partition model upstream is built
        // anew: the refusal names the choice that keeps it (`--forward-only` on that model).
        if let Some(h) = history.as_mut().filter(|h| h.fate == HistoryFate::StartsOver) {
            h.upstream_drops_kept = decided.kept_dropped_by[index].iter().map(ToString::to_string).collect();
        }
        actions.push(Action {
            name: model.name.clone(),
            kind: model.kind.tag(),
            change,
            reclassified_from,
            history,
            drops_kept,
            physical,
            previous: previous.filter(|p| *p != fp),
            reused_from: reused.map(|(f, _)| f).filter(|_| existing.is_none()),
            fingerprint: fp,
            build,
            register,
            backfill,
            intervals,
            canonical_source: versions.sources.get(&model.name).copied(),
            explain,
            new_columns,
            // Parsed only where apply writes a new snapshot (the environment's pointer metadata is
            // written by the promotion, from the project).
            metadata: if new_version || reused_any {
                meta_tree.unwrap_or_else(|| serde_json::from_str(&meta_text).unwrap_or_default())
            } else {
                serde_json::Value::Null
            },
            repair: None,
            rebuild: false,
            rebuild_reason: None,
            recompute: None,
            outside_bounds: model.kind.time_range().zip(kept_done.as_ref()).and_then(|(t, d)| outside_bounds(t, d)),
            undone_outside,
            writer_holds: kept_holds.clone(),
            waits_for_writer: None,
            owner: model.owner.clone(),
            tags: model.tags.clone(),
        });
        if recording {
            let action = actions.last().expect("pushed above").clone();
            let entry = ActionEntry {
                definition,
                action,
                same_data: decided.same_data[index].unwrap_or(false),
                category: decided.categories[index].unwrap_or(change),
                served: decided.served[index].clone(),
                changed_columns: decided.changed_columns[index].clone(),
                reshaped: decided.reshaped[index].clone(),
                added_columns: decided.added_columns[index].clone(),
                kept_dropped_by: decided.kept_dropped_by[index].clone(),
                done: kept_done,
                writer_holds: kept_holds,
                floor,
            };
            entries.push(entry);
        }
    }
    fill_column_impact(project, &mut actions);
    for (name, fp) in pointers.iter() {
        let Ok(model_name) = ModelName::parse(name) else { continue };
        if project.dag.get(&model_name).is_none() {
            actions.push(Action {
                name: model_name,
                kind: "removed",
                change: Change::Removed,
                reclassified_from: None,
                fingerprint: Fingerprint::from(fp.clone()),
                previous: None,
                reused_from: None,
                physical: None,
                build: false,
                register: false,
                backfill: Vec::new(),
                intervals: 0,
                canonical_source: None,
                explain: Some(Explain {
                    diverged: vec![],
                    reason: "no longer in the project; its view is dropped".into(),
                    cascade_from: vec![],
                    column_impact: None,
                }),
                history: None,
                drops_kept: None,
                new_columns: Vec::new(),
                metadata: serde_json::Value::Null,
                repair: None,
                rebuild: false,
                rebuild_reason: None,
                recompute: None,
                outside_bounds: None,
                undone_outside: None,
                writer_holds: WriterHolds::Nothing,
                waits_for_writer: None,
                owner: None,
                tags: Vec::new(),
            });
        }
    }
    let has_changes = actions.iter().any(Action::has_work);
    let mut plan = Plan {
        env: env.to_string(),
        new_environment: None,
        did_you_mean: None,
        existing_environments: Vec::new(),
        now,
        has_changes,
        actions,
        canon_cache_misses: versions.misses.clone(),
        from_memo: false,
        generation: Some(generation),
        also_writes: Vec::new(),
        refused: None,
    };
    recompute::stale_on_return(project, state, snapshots, &mut plan)?;
    recompute::taken_over(project, state, snapshots, &mut plan)?;
    recompute::propagate(project, state, &mut plan)?;
    if let Some(k) = kept {
        k.reused = reused_count;
        if recording {
            k.key = key;
            k.reads = Some(reads);
            k.entries = entries;
            if order.as_slice() != project.dag.order() {
                order = project.dag.order().to_vec();
            }
            k.order = order;
            k.dirty = (reused_count > 0).then_some(dirty);
        }
    }
    if reused_count > 0 && std::env::var_os(memo::VERIFY_ENV).is_some_and(|v| v == "1") {
        verify_reused(&plan, &compute(project, state, env, now, options)?);
    }
    Ok(plan)
}

/// Panics when a plan that reused actions of the plan before differs from the plan computed
/// from scratch (see [`ActionMemo`]).
fn verify_reused(reused: &Plan, computed: &Plan) {
    let a = serde_json::to_value(reused).expect("plan serialises");
    let b = serde_json::to_value(computed).expect("plan serialises");
    assert_eq!(a, b, "the plan of `{}` reusing the previous plan's actions disagrees with the full plan", reused.env);
    assert_eq!(reused.generation, computed.generation, "generations differ");
    for (x, y) in reused.actions.iter().zip(&computed.actions) {
        assert_eq!(x.metadata, y.metadata, "metadata of `{}` differs", x.name);
        assert_eq!(x.new_columns, y.new_columns, "new columns of `{}` differ", x.name);
    }
}

/// True when every physical name `model`'s SQL embeds is the one its previous version embedded:
/// each parent is unchanged, or materialised and served from the same physical relation as the
/// environment's previous version of it (indirect reuse, metadata), or embedded (inlined) with
/// its own definition unchanged and the same holding for its parents.
fn embedded_names_kept(
    project: &Project,
    model: &Model,
    decided: &Decided,
    pointers: &BTreeMap<String, String>,
    snapshots: &crate::state::SnapshotIndex,
) -> bool {
    model.parents().iter().all(|q| {
        let Some(parent) = project.dag.get(q) else { return false };
        match (decided.category(q), &parent.kind) {
            (Some(Change::Unchanged), _) => true,
            (Some(Change::Indirect | Change::Metadata), Kind::Embedded) => embedded_names_kept(project, parent, decided, pointers, snapshots),
            (Some(_), Kind::Embedded | Kind::External(_)) | (None, _) => false,
            (Some(_), _) => {
                let name = q.to_string();
                let old = pointers.get(&name).and_then(|fp| snapshots.get(&(name.clone(), fp.clone()))).map(|(p, _)| p.as_str());
                old.is_some_and(|o| !o.is_empty() && decided.served(q) == Some(o))
            }
        }
    })
}

/// True when `model` is a `full` model and the table `physical` of its previous version is also
/// served by another environment's other version whose build read other relations than the new
/// version `fp` would read (its parents' relations as decided): inheriting it would leave one of
/// them stale as soon as their parents' data diverge, with no rebuild right for both, so the new
/// version gets a table of its own (SPEC §4 invariant 36 (e)).
#[allow(clippy::too_many_arguments)] // one call site, in `compute_with`, passing its own state
fn full_table_read_elsewhere(
    project: &Project,
    state: &dyn StateStore,
    env: &str,
    model: &Model,
    fp: &Fingerprint,
    physical: &str,
    decided: &Decided<'_>,
    snapshots: &crate::state::SnapshotIndex,
    elsewhere: &mut Option<generations::ServedElsewhere>,
) -> Result<bool, StateError> {
    // Other kinds keep the shared table: a time-range version outside `prod` leaves the intervals
    // `prod` computed in it as they are (`compute_with`); an SCD type 2, unique-key or partition
    // table keeps what it recorded, and is not written outside `prod` while `prod` serves it over
    // other parent tables (`apply::shared_writes`).
    if !matches!(model.kind, Kind::Full) || physical.is_empty() {
        return Ok(false);
    }
    if elsewhere.is_none() {
        *elsewhere = Some(generations::served_elsewhere(state, snapshots, env)?);
    }
    let others = generations::others_on(elsewhere.as_ref().expect("read above"), &model.name.to_string(), fp.as_str(), physical);
    if others.is_empty() {
        return Ok(false);
    }
    let relations: Option<BTreeMap<String, String>> = generations::data_parents(project, &model.name)
        .into_iter()
        .map(|p| decided.served(&p).filter(|r| !r.is_empty()).map(|r| (p.to_string(), r.to_string())))
        .collect();
    let Some(relations) = relations else { return Ok(true) };
    Ok(!generations::shares_sources(state, snapshots, &model.name.to_string(), &others, &relations)?)
}

/// For [`generations::reuse_outgrown`]: when this plan builds `parent` (by name) as a new
/// time-range table, its fingerprint and its done interval starts once the plan is applied (its
/// own ledger and its backfill); `None` for any other action. `actions` holds the actions decided
/// so far, by DAG position.
fn built_intervals(project: &Project, state: &dyn StateStore, actions: &[Action], parent: &str) -> Result<Option<generations::Built>, StateError> {
    parent_intervals(project, state, actions, parent, true)
}

/// For [`generations::reuse_outgrown`] over a unique-key or partition table: the version of the
/// time-range model `parent` (by name) this plan leads to, built by it or not (a version another
/// environment built, pointed at here), with its done interval starts once the plan is applied:
/// its own ledger, the one it inherits (indirect reuse, forward-only: copied by the apply), what
/// the writer of a shared table did there (its view serves it), and its backfill. `None` for any
/// other model.
fn served_intervals(project: &Project, state: &dyn StateStore, actions: &[Action], parent: &str) -> Result<Option<generations::Built>, StateError> {
    parent_intervals(project, state, actions, parent, false)
}

/// [`built_intervals`] (`built_only`) or [`served_intervals`].
fn parent_intervals(
    project: &Project,
    state: &dyn StateStore,
    actions: &[Action],
    parent: &str,
    built_only: bool,
) -> Result<Option<generations::Built>, StateError> {
    let Ok(name) = ModelName::parse(parent) else { return Ok(None) };
    let Some(action) = project.dag.position(&name).and_then(|i| actions.get(i)).filter(|a| a.name == name) else { return Ok(None) };
    let Some(t) = project.dag.get(&name).and_then(|m| m.kind.time_range()) else { return Ok(None) };
    if action.change == Change::Removed || (built_only && !action.build) {
        return Ok(None);
    }
    let mut done = state.done_intervals(parent, action.fingerprint.as_str())?;
    // (A version the plan builds has a table of its own: it inherits nothing.)
    if !action.build {
        if let Some(from) = &action.reused_from {
            done.extend(state.done_intervals(parent, from.as_str())?);
        }
        done.extend(action.writer_holds.writer_done().into_iter().flatten().copied());
    }
    done.extend(interval::batches(&action.backfill, t.grain, 1).into_iter().map(|i| i.start));
    Ok(Some((action.fingerprint.as_str().to_string(), done)))
}

/// What a plan decided so far for each model, by DAG position (parents are decided before
/// their children): whether its data for its existing columns is what the environment served
/// before, its category, and the physical relation its action serves. `None`: not decided yet.
struct Decided<'a> {
    project: &'a Project,
    same_data: Vec<Option<bool>>,
    categories: Vec<Option<Change>>,
    served: Vec<Option<String>>,
    /// Breaking models whose change is confined to these output columns (lower-case).
    changed_columns: Vec<Option<BTreeSet<String>>>,
    /// Of those, the ones whose change also reshapes their column list ([`Reshape`]).
    reshaped: Vec<Option<Reshape>>,
    /// `full` models built anew rather than inheriting their older table, because a parent's new
    /// version holds other intervals ([`generations::reuse_outgrown`]): their rows change as a
    /// `run` would change them (never set for a replayed action: those are never indirect `full`);
    /// and unique-key or partition models served from another table than the environment's
    /// (what earlier refreshes upserted differs): their `full` children are built anew.
    rows_change: Vec<bool>,
    /// Non-breaking models: the columns their change added (lower case; `None`: not known).
    added_columns: Vec<Option<BTreeSet<String>>>,
    /// Unique-key and partition models whose new version is served from another table than the
    /// one the environment's version filled ([`DropsKept`]): their rows change (`same_data` is
    /// false), though their columns' data would not.
    drops_kept: Vec<bool>,
    /// Models whose data changes only because unique-key or partition models upstream (or the
    /// model itself) are built anew from their query alone: those models, each of which
    /// `--forward-only` would keep on its table, keeping this model's data as it was. Empty when
    /// something else changes it (or nothing does).
    kept_dropped_by: Vec<BTreeSet<ModelName>>,
    /// Models whose rows lack what refreshes of a unique-key or partition model kept: that model
    /// itself when [`Decided::drops_kept`], and the `full`, `view` and `embedded` models reading
    /// one (a `full` table is rebuilt from its parents' rows, by this apply or the next run): an
    /// SCD type 2 model reconciled over one would record the lost keys as deleted. Time-range
    /// and keyed models stop it (their tables never follow their parents' current rows).
    lost_kept: Vec<bool>,
}

impl<'a> Decided<'a> {
    fn new(project: &'a Project) -> Self {
        let n = project.dag.len();
        Decided {
            project,
            same_data: vec![None; n],
            categories: vec![None; n],
            served: vec![None; n],
            changed_columns: vec![None; n],
            reshaped: vec![None; n],
            rows_change: vec![false; n],
            added_columns: vec![None; n],
            drops_kept: vec![false; n],
            kept_dropped_by: vec![BTreeSet::new(); n],
            lost_kept: vec![false; n],
        }
    }

    /// Records [`Decided::drops_kept`] of the model at `index`, and from it and its parents'
    /// (decided before it) whether its rows lack what keyed refreshes kept
    /// ([`Decided::lost_kept`]).
    fn set_drops_kept(&mut self, index: usize, model: &Model, drops_kept: bool) {
        self.drops_kept[index] = drops_kept;
        self.lost_kept[index] =
            drops_kept || (matches!(model.kind, Kind::Full | Kind::View | Kind::Embedded) && model.parents().iter().any(|q| self.lost_kept(q)));
    }

    fn lost_kept(&self, name: &ModelName) -> bool {
        self.project.dag.position(name).is_some_and(|i| self.lost_kept[i])
    }

    fn set(&mut self, index: usize, same_data: bool, category: Change, served: Option<String>) {
        self.same_data[index] = Some(same_data);
        self.categories[index] = Some(category);
        self.served[index] = served;
    }

    fn rows_change(&self, name: &ModelName) -> bool {
        self.project.dag.position(name).is_some_and(|i| self.rows_change[i])
    }

    fn drops_kept(&self, name: &ModelName) -> bool {
        self.project.dag.position(name).is_some_and(|i| self.drops_kept[i])
    }

    /// The union of the [`Decided::kept_dropped_by`] of `parents` when every one of them has some
    /// (their data changes only because unique-key or partition models upstream are built anew);
    /// empty otherwise (something else changes one of them: keeping those rows would not keep
    /// its data).
    fn kept_dropped_by_all(&self, parents: &[&ModelName]) -> BTreeSet<ModelName> {
        let mut out = BTreeSet::new();
        for q in parents {
            match self.project.dag.position(q).map(|i| &self.kept_dropped_by[i]) {
                Some(by) if !by.is_empty() => out.extend(by.iter().cloned()),
                _ => return BTreeSet::new(),
            }
        }
        out
    }

    fn same_data(&self, name: &ModelName) -> Option<bool> {
        self.project.dag.position(name).and_then(|i| self.same_data[i])
    }

    fn added_columns(&self, name: &ModelName) -> Option<&BTreeSet<String>> {
        self.project.dag.position(name).and_then(|i| self.added_columns[i].as_ref())
    }

    fn changed_columns(&self, name: &ModelName) -> Option<&BTreeSet<String>> {
        self.project.dag.position(name).and_then(|i| self.changed_columns[i].as_ref())
    }

    fn reshaped(&self, name: &ModelName) -> Option<&Reshape> {
        self.project.dag.position(name).and_then(|i| self.reshaped[i].as_ref())
    }

    fn category(&self, name: &ModelName) -> Option<Change> {
        self.project.dag.position(name).and_then(|i| self.categories[i])
    }

    fn served(&self, name: &ModelName) -> Option<&str> {
        self.project.dag.position(name).and_then(|i| self.served[i].as_deref())
    }
}

/// The entries of the last plan ([`ActionMemo`], in `order`) by the position of their model in
/// `project`'s DAG: taken as they are when the order is the same, matched by name otherwise.
fn by_position(project: &Project, entries: Vec<ActionEntry>, order: &[ModelName]) -> Vec<Option<ActionEntry>> {
    if entries.len() != order.len() {
        return Vec::new();
    }
    if order == project.dag.order() {
        return entries.into_iter().map(Some).collect();
    }
    let mut out: Vec<Option<ActionEntry>> = (0..project.dag.len()).map(|_| None).collect();
    for (e, name) in entries.into_iter().zip(order) {
        if let Some(i) = project.dag.position(name) {
            out[i] = Some(e);
        }
    }
    out
}

/// The columns a kind keys its rows by, which a column-confined change must not touch (a time
/// column places rows in intervals, a unique key identifies them); `None` for kinds whose rows
/// depend on every column (`scd_type2` records a version per change) or that have no query.
fn row_key_columns(kind: &Kind) -> Option<Vec<String>> {
    match kind {
        Kind::Full | Kind::View | Kind::Embedded => Some(Vec::new()),
        Kind::IncrementalByTimeRange(t) => Some(vec![t.time_column.clone()]),
        Kind::IncrementalByUniqueKey(u) => Some(u.key.clone()),
        // The partition columns decide which stored rows a build replaces.
        Kind::IncrementalByPartition(p) => Some(p.partitioned_by.clone()),
        Kind::ScdType2(_) | Kind::External(_) | Kind::Seed(_) => None,
    }
}

/// Fills each column-confined breaking change's readers ([`ColumnImpact`]) from its children's
/// lineage and, when the change reshapes the column list, what their queries see of it
/// ([`confined_read`], as the plan judged them; a child's query is read as its action's canonical
/// source says): a pure function of the project and the actions, so a plan replayed from the
/// memo says the same.
fn fill_column_impact(project: &Project, actions: &mut [Action]) {
    let sources: BTreeMap<ModelName, Option<CanonSource>> = actions.iter().map(|a| (a.name.clone(), a.canonical_source)).collect();
    for action in actions.iter_mut() {
        let Some(impact) = action.explain.as_mut().and_then(|e| e.column_impact.as_mut()) else { continue };
        let name = action.name.clone();
        let parent = name.to_string();
        let cols: BTreeSet<String> = impact.changed.iter().cloned().collect();
        impact.read_by.clear();
        impact.not_read_by.clear();
        for child in project.dag.children(&name) {
            let Some(model) = project.dag.get(child) else { continue };
            let source = sources.get(child).copied().flatten();
            let l = lineage::model_lineage(project, model);
            let sees = |names: &BTreeSet<String>| column_sight_of(model, source).sees(Some(names));
            if confined_read(project, model, &parent, &cols, impact.reshape.as_ref(), &l, sees) == ConfinedRead::Unread {
                impact.not_read_by.push(child.to_string());
            } else {
                impact.read_by.push(child.to_string());
            }
        }
    }
}

/// Kinds whose new version may keep the old table (`--forward-only`): those whose table holds
/// more than their query returns now (intervals computed so far, a history, upserted keys,
/// partitions the query no longer returns), which a new table built from the query alone would
/// lose.
fn forward_only_kind(kind: &Kind) -> bool {
    matches!(kind, Kind::IncrementalByTimeRange(_) | Kind::ScdType2(_) | Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_))
}

/// True when `--forward-only` would keep the table of the environment's version `prev` for
/// `model`'s new version (still to build): a kind that may be forward-only, the same kind and
/// kind fields, every column of `prev` kept with its type, and — outside `prod` — no other
/// environment serving that table ([`refuse_shared_history`]). What the plan offers as a way
/// forward ([`DropsKept::forward_only_ok`]) is what it would accept.
fn forward_only_accepted(state: &dyn StateStore, env: &str, model: &Model, prev: &Fingerprint) -> Result<bool, PlanError> {
    if !forward_only_kind(&model.kind) {
        return Ok(false);
    }
    let Some(old) = old_definition(state, &model.name.to_string(), prev.as_str())? else { return Ok(false) };
    let new_kind = model.kind_payload();
    let new_schema = declared_schema(model, Some(&old), &BTreeMap::new());
    Ok(old.kind.get("tag") == new_kind.get("tag")
        && forward_only_kind_fields(&old.kind) == forward_only_kind_fields(&new_kind)
        && old.schema.iter().all(|(c, t)| new_schema.iter().any(|(n, nt)| n == c && nt == t))
        && refuse_shared_history(state, env, &model.name, prev).is_ok())
}

/// The kind fields a forward-only version must keep. SCD type 2 may change its watch list
/// (`columns`) and `invalidate_hard_deletes`: the history recorded so far stays true, and the
/// next reconcile follows the new rules; its key and managed columns must stay.
fn forward_only_kind_fields(kind: &serde_json::Value) -> serde_json::Value {
    let mut k = kind.clone();
    if k.get("tag").and_then(serde_json::Value::as_str) == Some("scd_type2")
        && let Some(o) = k.as_object_mut()
    {
        o.remove("columns");
        o.remove("invalidate_hard_deletes");
    }
    k
}

/// What becomes of the history of an `scd_type2` model whose environment `env` serves version
/// `prev` and moves to version `fp`, served from `physical` (`build`: created by this apply).
/// `None` when the environment's version is not an `scd_type2` model (no history to lose).
///
/// A history is *kept* when the new version serves the old table (forward-only, indirect
/// reuse); *carried over* when a declared rename (`renamed`) applies to the old version's
/// columns, the key and managed columns are the same and no column is dropped or retyped (the
/// new table is created from the old one's rows); otherwise it *starts over*. A version that
/// already exists (built earlier, for another environment or for this one before an edit now
/// undone) is promoted as it stands: carried over only when its snapshot records that its build
/// copied this very version's rows ([`CARRIED`]), starting over otherwise (its table holds
/// another history).
#[allow(clippy::too_many_arguments)]
fn scd_history(
    state: &dyn StateStore,
    env: &str,
    model: &Model,
    prev: &Fingerprint,
    fp: &Fingerprint,
    physical: Option<&str>,
    build: bool,
    options: &Options,
) -> Result<Option<History>, PlanError> {
    let Some(old) = old_definition(state, &model.name.to_string(), prev.as_str())? else { return Ok(None) };
    if old.kind.get("tag").and_then(serde_json::Value::as_str) != Some("scd_type2") {
        return Ok(None);
    }
    let renamed: BTreeMap<String, String> = match &model.kind {
        // Ignored unless the old version has the old column (e.g. once the rename is applied).
        Kind::ScdType2(s) => s.renamed.iter().filter(|(o, _)| old.schema.iter().any(|(c, _)| c == o)).cloned().collect(),
        _ => BTreeMap::new(),
    };
    let new_schema = declared_schema(model, Some(&old), &renamed);
    let mapped = |c: &str| renamed.get(c).cloned().unwrap_or_else(|| c.to_string());
    let dropped: Vec<String> = old.schema.iter().filter(|(c, _)| !new_schema.iter().any(|(n, _)| *n == mapped(c))).map(|(c, _)| c.clone()).collect();
    let added: Vec<String> = new_schema.iter().filter(|(n, _)| !old.schema.iter().any(|(c, _)| mapped(c) == *n)).map(|(n, _)| n.clone()).collect();
    let retyped: Vec<String> = old.schema.iter().filter(|(c, t)| new_schema.iter().any(|(n, nt)| *n == mapped(c) && nt != t)).map(|(c, _)| mapped(c)).collect();
    let mut h = History {
        fate: HistoryFate::StartsOver,
        from: prev.clone(),
        dropped,
        added,
        renamed,
        retyped,
        reason: String::new(),
        reset_accepted: options.reset_history.contains(&model.name),
        from_physical: old.physical.clone(),
        copied: None,
        rename_ok: false,
        forward_only_ok: false,
        upstream_drops_kept: Vec::new(),
    };
    let short = prev.short();
    if physical.is_some_and(|p| p == old.physical) {
        h.fate = HistoryFate::Kept;
        h.reason = format!("the table of @{short} and its history are kept");
        return Ok(Some(h));
    }
    let new_kind = model.kind_payload();
    let is_scd = matches!(model.kind, Kind::ScdType2(_));
    let managed = ["valid_from", "valid_to"].into_iter().find(|f| old.kind.get(*f) != new_kind.get(*f));
    // The ways forward the refusal may offer: only those that would be accepted.
    h.rename_ok = build && is_scd && managed.is_none();
    h.forward_only_ok = build
        && is_scd
        && forward_only_kind_fields(&old.kind) == forward_only_kind_fields(&new_kind)
        && old.schema.iter().all(|(c, t)| new_schema.iter().any(|(n, nt)| n == c && nt == t))
        && refuse_shared_history(state, env, &model.name, prev).is_ok();
    // The key may be renamed too; the managed columns may not.
    let old_key: Option<Vec<String>> = old
        .kind
        .get("key")
        .and_then(serde_json::Value::as_array)
        .map(|k| k.iter().filter_map(serde_json::Value::as_str).map(|c| h.renamed.get(c).cloned().unwrap_or_else(|| c.to_string())).collect());
    let new_key: Option<Vec<String>> = match &model.kind {
        Kind::ScdType2(s) => Some(s.key.clone()),
        _ => None,
    };
    let identity = if old_key != new_key { Some("key") } else { managed };
    let blocker = if !is_scd {
        Some(format!("the model is no longer `scd_type2`, so the history of @{short} is no longer served"))
    } else if !build {
        // What its build copied, as its snapshot recorded it then (snapshots never change).
        let carried = state.snapshot(&model.name.to_string(), fp.as_str())?.map(|rec| rec.metadata[CARRIED].clone()).unwrap_or_default();
        let count = |f: &str| carried[f].as_u64().and_then(|n| usize::try_from(n).ok());
        match carried["from"].as_str() {
            Some(from) if from == prev.as_str() && count("rows").is_some() && count("closed").is_some() => {
                h.copied = count("rows").zip(count("closed"));
                None
            }
            Some(from) => Some(format!(
                "its table started from the history of @{} and holds what was recorded since, not the history of @{short}",
                Fingerprint::from(from.to_string()).short()
            )),
            None => Some(format!("its table holds the history recorded since it was built, not the history of @{short}")),
        }
    } else if let Some(field) = identity {
        Some(format!("`{field}` changed, so the rows of @{short} cannot be carried over"))
    } else if h.renamed.is_empty() {
        Some(format!("the new version's table starts empty: every `valid_from` restarts and the closed versions of @{short} are no longer served"))
    } else if let Some(c) = h.dropped.first() {
        Some(format!("column `{c}` is dropped, so the declared rename cannot carry the history of @{short} over"))
    } else {
        h.retyped.first().map(|c| format!("column `{c}` changes type, so the declared rename cannot carry the history of @{short} over"))
    };
    match blocker {
        Some(why) => {
            h.reason = if build {
                why
            } else {
                format!("the new version exists already (built earlier, for this or another environment) and is promoted as it stands; {why}")
            };
            if h.reset_accepted {
                h.reason = format!("{}; accepted by the operator (`--reset-history`)", h.reason);
            }
        }
        None => {
            h.fate = HistoryFate::Carried;
            h.reason = if build {
                format!(
                    "the new version's table starts from every row of @{short} (open and closed versions, `valid_from`/`valid_to` kept), the declared renames applied"
                )
            } else {
                format!(
                    "the version exists already (its table started from every row of @{short}, the declared renames applied) and is promoted as it stands, provided @{short} recorded nothing since"
                )
            };
        }
    }
    Ok(Some(h))
}

/// The key of a snapshot's metadata recording, for an `scd_type2` version whose build carried a
/// history over, what it copied: `{"from": <fingerprint>, "rows": n, "closed": n}` (the old
/// version, its rows and its closed versions at the copy). Written when the snapshot is
/// created; absent otherwise.
pub const CARRIED: &str = "carried";

/// Forward-only writes new intervals into an older version's table. `prod` owns history and may
/// always do it (environments sharing that version then see the new intervals, as in sqlmesh);
/// any other environment is refused while another environment serves that version — or any
/// version on its table (`prod`'s own forward-only version of it) — whose history would silently
/// change under it.
fn refuse_shared_history(state: &dyn StateStore, env: &str, model: &ModelName, old: &Fingerprint) -> Result<(), PlanError> {
    if env == crate::core::name::PROD {
        return Ok(());
    }
    let name = model.to_string();
    let table = state.snapshot(&name, old.as_str())?.map(|r| r.physical).filter(|p| !p.is_empty());
    for other in state.environments()? {
        if other == env {
            continue;
        }
        let Some(theirs) = state.env_pointers(&other)?.get(&name).cloned() else { continue };
        let on_table = theirs != old.as_str() && table.is_some() && state.snapshot(&name, &theirs)?.map(|r| r.physical) == table;
        if theirs == old.as_str() || on_table {
            return Err(PlanError::Operator(format!(
                "`--forward-only {model}`: environment `{other}` serves the table that would be kept (this version, or its own version on that table), and new intervals would change what `{other}` serves\n  hint: apply the forward-only change to `prod`, or apply `{env}` without `--forward-only`"
            )));
        }
    }
    Ok(())
}

/// Top-level metadata fields that differ, for `metadata` explanations.
fn metadata_paths(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    // A field present on one side only (`audits` is absent when a model has none) compares as
    // null, so the path names the field rather than the whole object.
    let aligned = |side: &serde_json::Value| -> serde_json::Value {
        let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return side.clone() };
        let keys = n.keys().chain(o.keys().filter(|k| !n.contains_key(*k)));
        keys.map(|k| (k.clone(), side.get(k).cloned().unwrap_or(serde_json::Value::Null))).collect::<serde_json::Map<_, _>>().into()
    };
    let mut out = Vec::new();
    categorize::diff(&aligned(old), &aligned(new), "", &mut out);
    out.into_iter().map(|p| p.trim_start_matches('.').to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Column, Location, Schema};
    use crate::sql::prefetch::Prefetch;

    fn model(name: &str) -> Model {
        Model::new(
            ModelName::parse(name).unwrap(),
            Kind::Full,
            Schema(vec![Column { name: "a".into(), ty: "BIGINT".into() }]),
            None,
            Location { file: "m.lua".into(), line: 1 },
        )
    }

    /// The default engine's dialect (DuckDB), as a project without `[engine] url_env` has it.
    fn duckdb_dialect() -> &'static dyn Dialect {
        crate::engine::dialect_for(&crate::config::Config::with_root(std::path::Path::new("/p")))
    }

    /// A `--reclassify` category that is not one names both and, when close, the one meant; a
    /// category written before the `=` says the model goes first.
    #[test]
    fn a_misspelt_reclassify_category_names_the_categories_and_the_one_meant() {
        let refused = |flag: &str| Options::parse("", flag).expect_err(flag);
        assert_eq!(refused("s.a=nonbreaking"), "--reclassify: `nonbreaking` is not `breaking` or `non-breaking` (did you mean `non-breaking`?)");
        assert_eq!(refused("s.a=Breaking"), "--reclassify: `Breaking` is not `breaking` or `non-breaking` (did you mean `breaking`?)");
        assert_eq!(refused("s.a=forward-only"), "--reclassify: `forward-only` is not `breaking` or `non-breaking`");
        assert_eq!(refused("breaking=s.a"), "--reclassify: `s.a` is not `breaking` or `non-breaking` (the model goes first: `s.a=breaking`)");
        let o = Options::parse("", "s.a=breaking, s.b=non-breaking").expect("valid");
        assert_eq!(o.reclassify.values().copied().collect::<Vec<_>>(), [Change::Breaking, Change::NonBreaking]);
    }

    #[test]
    fn digests_taken_from_a_prefetch_equal_digests_computed_here() {
        let bodies = ["SELECT 1 AS a", "select 1 as a -- reformatted", "SELECT a FROM s.t WHERE a > 2", "SELECT 2 AS a", "SELECT a::VARCHAR AS a FROM s.t"];
        let models: Vec<Model> = (0..bodies.len()).map(|i| model(&format!("s.m{i}"))).collect();
        let refs: Vec<&Model> = models.iter().collect();
        let keyed: Vec<Option<(String, String)>> = bodies.iter().map(|b| Some((canon_cache_key("duckdb", b), (*b).to_string()))).collect();
        let without = digests(duckdb_dialect(), &refs, &keyed, &HashMap::new(), None).unwrap();
        // The prefetch lacks one body (computed here) and holds one the plan does not ask for.
        let held: Vec<String> = bodies.iter().take(4).map(|b| (*b).to_string()).chain(["SELECT 9".to_string()]).collect();
        let with = digests(duckdb_dialect(), &refs, &keyed, &HashMap::new(), Some(Prefetch::spawn(held, 1))).unwrap();
        assert_eq!(with, without);
        assert_eq!(without.0[0], without.0[1], "formatting variants share a digest");
        assert_ne!(without.0[0], without.0[3]);
        assert!(without.1.iter().all(Option::is_some), "every body computed is a canonicalisation-cache entry");
    }

    #[test]
    fn fingerprints_by_level_equal_fingerprints_taken_one_model_at_a_time() {
        use crate::core::fragment::{Fragment, Node, RefSite};
        // A layered DAG wide enough for the threads (levels of 300 models), with a few models
        // whose parents sit several levels up, and a body digest on most models.
        let mut models: Vec<Model> = Vec::new();
        for level in 0..4 {
            for j in 0..300 {
                let mut m = model(&format!("s.l{level}m{j:03}"));
                if level > 0 {
                    let mut body = Fragment::default();
                    body.push_text("SELECT a FROM ");
                    for parent in [format!("s.l{}m{:03}", level - 1, j), format!("s.l0m{:03}", (j * 7) % 300)] {
                        let location = Location { file: "m.lua".into(), line: 1 };
                        body.nodes.push(Node::Ref(RefSite { target: ModelName::parse(&parent).unwrap(), location }));
                    }
                    m.body = Some(body);
                }
                models.push(m);
            }
        }
        let refs: Vec<&Model> = models.iter().collect();
        let canon: Vec<Option<(CanonSource, String)>> = (0..refs.len()).map(|i| (i % 5 != 0).then(|| (CanonSource::SqlParser, format!("{i:064x}")))).collect();
        let by_level = fingerprints_by_level(&refs, &canon);
        let mut one_at_a_time: BTreeMap<ModelName, Fingerprint> = BTreeMap::new();
        for (i, m) in refs.iter().enumerate() {
            let parents: BTreeMap<ModelName, Fingerprint> = m.parents().into_iter().map(|p| (p.clone(), one_at_a_time[&p].clone())).collect();
            assert_eq!(parents.is_empty(), i < 300, "model {i}");
            let fp = fingerprint_with_digest(m, canon[i].as_ref().map(|(_, d)| d.as_str()), &parents);
            assert_eq!(by_level[i], fp, "model {} ({i})", m.name);
            one_at_a_time.insert(m.name.clone(), fp);
        }
        assert_eq!(by_level.iter().collect::<BTreeSet<_>>().len(), refs.len(), "every fingerprint differs");
    }

    #[test]
    fn metadata_computed_ahead_equals_the_metadata_of_each_model() {
        let mut project_models: Vec<Model> = (0..40).map(|i| model(&format!("s.m{i:02}"))).collect();
        project_models[3].description = Some("three".into());
        project_models[7].grain = vec!["a".into()];
        let refs: Vec<&Model> = project_models.iter().collect();
        let ahead = metadata_all(&refs);
        let expected: Vec<(String, serde_json::Value)> = refs.iter().map(|m| (metadata_text(m), metadata(m))).collect();
        assert_eq!(ahead, expected);
    }

    #[test]
    fn a_version_whose_text_is_unchanged_is_told_apart_from_an_edited_query() {
        // An efmesh upgrade that reads the same text by new rules changes the fingerprint but not
        // the text the snapshot recorded: `plan --explain` must not blame the query.
        let mut m = model("s.t");
        let mut body = crate::core::fragment::Fragment::default();
        body.push_text("SELECT 1 AS a");
        m.body = Some(body);
        let schema = declared_schema(&m, None, &BTreeMap::new());
        let kind = m.kind_payload();
        let old = |rendered: &str| OldDefinition {
            canonical: Some("{}".into()),
            kind: kind.clone(),
            schema: schema.clone(),
            folded: BTreeSet::new(),
            grain: vec![],
            physical: String::new(),
            statements: None,
            has_statements: false,
            rendered_sql: rendered.into(),
        };
        assert!(same_text_read_anew(&old("SELECT 1 AS a"), &m, &schema, &kind));
        assert!(!same_text_read_anew(&old("SELECT 2 AS a"), &m, &schema, &kind), "an edited query");
        assert!(!same_text_read_anew(&old(""), &m, &schema, &kind), "a snapshot without its text");
        let mut retyped = schema.clone();
        retyped[0].1 = "integer".into();
        assert!(!same_text_read_anew(&old("SELECT 1 AS a"), &m, &retyped, &kind), "a retyped column");
        let mut grained = old("SELECT 1 AS a");
        grained.grain = vec!["a".into()];
        assert!(!same_text_read_anew(&grained, &m, &schema, &kind), "another grain");
    }

    #[test]
    fn a_snapshot_recording_folded_types_is_compared_in_their_folded_form() {
        // An efmesh before quoted parts and member names were kept recorded `ENUM('A', 'b')` as
        // `enum('a', 'b')`, unmarked: the upgrade alone must not read as a retyped column
        // (categories, `--forward-only`, an SCD type 2 history), while a record with the `exact`
        // mark compares exactly.
        let store = crate::state::SqliteStore::open_in_memory().unwrap();
        let snapshot = |fp: char, schema: serde_json::Value| crate::state::SnapshotRecord {
            name: "s.t".into(),
            fingerprint: fp.to_string().repeat(64),
            fingerprint_version: FINGERPRINT_VERSION,
            kind: "full".into(),
            physical: String::new(),
            canonical: None,
            rendered_sql: String::new(),
            metadata: serde_json::json!({ "schema": schema }),
            created_at: interval::to_iso(0),
        };
        store.put_snapshot(&snapshot('a', serde_json::json!([["a", "bigint"], ["lvl", "enum('a', 'b')"]]))).unwrap();
        store.put_snapshot(&snapshot('b', serde_json::json!([["a", "bigint"], ["lvl", "enum('a', 'b')", "exact"]]))).unwrap();
        let mut m = model("s.t");
        m.schema.0.push(Column { name: "lvl".into(), ty: "ENUM('A', 'b')".into() });

        let legacy = old_definition(&store, "s.t", &"a".repeat(64)).unwrap().unwrap();
        assert_eq!(legacy.folded, BTreeSet::from(["lvl".to_string()]));
        assert_eq!(declared_schema(&m, Some(&legacy), &BTreeMap::new()), legacy.schema);
        let marked = old_definition(&store, "s.t", &"b".repeat(64)).unwrap().unwrap();
        assert!(marked.folded.is_empty());
        assert_ne!(declared_schema(&m, Some(&marked), &BTreeMap::new()), marked.schema, "`ENUM('A', 'b')` against a recorded `ENUM('a', 'b')`");
        // Through a declared rename, the old column's record decides.
        let mut renamed_from = legacy;
        renamed_from.folded = BTreeSet::from(["level".to_string()]);
        let renamed = BTreeMap::from([("level".to_string(), "lvl".to_string())]);
        assert_eq!(declared_schema(&m, Some(&renamed_from), &renamed)[1].1, "enum('a', 'b')");
        assert_eq!(declared_schema(&m, Some(&renamed_from), &BTreeMap::new())[1].1, "enum('A', 'b')");
        // What the model records now carries the mark.
        let meta: serde_json::Value = serde_json::from_str(&metadata_text(&m)).unwrap();
        assert_eq!(meta["schema"][1], serde_json::json!(["lvl", "enum('A', 'b')", "exact"]));
        assert_eq!(meta["schema"][0], serde_json::json!(["a", "bigint"]));
    }

    #[test]
    fn a_keyed_rebuild_note_offers_forward_only_only_where_it_is_accepted() {
        let name = ModelName::parse("m.u").unwrap();
        let fresh = DropsKept { from: Fingerprint::from("ab".repeat(32)), built: true, forward_only_ok: true };
        let note = fresh.note(&name);
        assert!(
            note.starts_with("built from its query alone: rows earlier refreshes kept in the table of @abababababab that the query no longer returns"),
            "{note}"
        );
        assert!(note.ends_with("; `--forward-only m.u` keeps the table"), "{note}");
        let existing = DropsKept { built: false, forward_only_ok: false, ..fresh };
        let note = existing.note(&name);
        assert!(note.starts_with("served from the table of a version that exists already") && !note.contains("--forward-only"), "{note}");
    }

    #[test]
    fn forward_only_is_accepted_for_keyed_kinds_only_with_the_same_key_and_columns_only_added() {
        let store = crate::state::SqliteStore::open_in_memory().unwrap();
        let old = "a".repeat(64);
        store
            .put_snapshot(&crate::state::SnapshotRecord {
                name: "s.u".into(),
                fingerprint: old.clone(),
                fingerprint_version: FINGERPRINT_VERSION,
                kind: "incremental_by_unique_key".into(),
                physical: "\"_efmesh\".\"s__u__a\"".into(),
                canonical: None,
                rendered_sql: String::new(),
                metadata: serde_json::json!({ "kind": { "tag": "incremental_by_unique_key", "key": ["id"] }, "schema": [["id", "bigint"], ["v", "bigint"]] }),
                created_at: interval::to_iso(0),
            })
            .unwrap();
        let keyed = |key: &str, columns: &[(&str, &str)]| {
            let mut m = model("s.u");
            m.kind = Kind::IncrementalByUniqueKey(crate::core::UniqueKey { key: vec![key.to_string()] });
            m.schema = Schema(columns.iter().map(|(n, t)| Column { name: (*n).into(), ty: (*t).into() }).collect());
            m
        };
        let prev = Fingerprint::from(old);
        let accepted = |m: &Model| forward_only_accepted(&store, "prod", m, &prev).unwrap();
        assert!(accepted(&keyed("id", &[("id", "BIGINT"), ("v", "BIGINT"), ("w", "VARCHAR")])), "a column added");
        assert!(!accepted(&keyed("id", &[("id", "BIGINT"), ("v", "VARCHAR")])), "a retyped column");
        assert!(!accepted(&keyed("id", &[("id", "BIGINT")])), "a dropped column");
        assert!(!accepted(&keyed("v", &[("id", "BIGINT"), ("v", "BIGINT"), ("w", "VARCHAR")])), "another key");
        let mut partition = keyed("id", &[("id", "BIGINT"), ("v", "BIGINT")]);
        partition.kind = Kind::IncrementalByPartition(crate::core::Partitioned { partitioned_by: vec!["id".into()] });
        assert!(forward_only_kind(&partition.kind) && !accepted(&partition), "another kind");
        let mut full = keyed("id", &[("id", "BIGINT"), ("v", "BIGINT")]);
        full.kind = Kind::Full;
        assert!(!forward_only_kind(&full.kind) && !accepted(&full));
    }

    #[test]
    fn a_reshape_names_the_removed_and_added_columns_and_whether_a_kept_one_moved() {
        let cols = |names: &[&str]| names.iter().map(|n| ((*n).to_string(), "bigint".to_string())).collect::<Vec<_>>();
        let of = |old: &[&str], new: &[&str]| Reshape::of(&cols(old), &cols(new), &Kind::Full);
        // A retype or a changed expression keeps the list: no reshape.
        assert_eq!(of(&["id", "k", "y"], &["id", "k", "y"]), None);
        // `y` dropped last: nothing kept moves.
        let dropped = of(&["id", "k", "Y"], &["id", "k"]).expect("a drop reshapes");
        assert_eq!((dropped.removed, dropped.added.len(), dropped.moved), (BTreeSet::from(["y".to_string()]), 0, false));
        assert_eq!(dropped.old_columns, ["id", "k", "Y"], "the old columns as declared");
        // A drop before a kept column moves it; a rename removes one name and adds another.
        assert!(of(&["id", "y", "k"], &["id", "k"]).is_some_and(|r| r.moved));
        let renamed = of(&["id", "y"], &["id", "zone"]).expect("a rename reshapes");
        assert_eq!(renamed.names(), BTreeSet::from(["y".to_string(), "zone".to_string()]));
        assert_eq!(renamed.describe(), "removes `y` and adds `zone`");
        // A reorder, and an insert in the middle, move kept columns; an append at the end does not.
        assert_eq!(of(&["id", "k", "y"], &["id", "y", "k"]).map(|r| r.describe()).as_deref(), Some("moves columns"));
        assert!(of(&["id", "k"], &["id", "z", "k"]).is_some_and(|r| r.moved));
        assert!(of(&["id", "k"], &["id", "k", "z"]).is_some_and(|r| !r.moved && r.removed.is_empty()));
    }

    #[test]
    fn a_full_version_is_left_to_prod_for_an_audit_it_lacks_or_other_statements_never_for_a_cron() {
        let full = ["statements"];
        let prods = r#"{"audits": [{"name": "a"}], "cron": "@daily", "statements": {"post": ["x"]}}"#;
        assert!(!writes_differently(prods, prods, &full));
        assert!(writes_differently(prods, r#"{"audits": [], "cron": "@daily", "statements": {"post": ["x"]}}"#, &full), "one of prod's audits missing");
        let more = r#"{"audits": [{"name": "a"}, {"name": "b"}], "cron": "@daily", "statements": {"post": ["x"]}}"#;
        assert!(!writes_differently(prods, more, &full), "an audit added only refuses more");
        assert!(writes_differently(prods, r#"{"audits": [{"name": "a"}], "cron": "@daily"}"#, &full), "other statements");
        let no_cron = r#"{"audits": [{"name": "a"}], "statements": {"post": ["x"]}}"#;
        assert!(!writes_differently(prods, no_cron, &full), "a cron only says when a full table is rebuilt");
        assert!(writes_differently(prods, no_cron, &["lookback", "auto_restatement_intervals", "cron", "statements"]), "it decides the other kinds' writes");
    }
}
