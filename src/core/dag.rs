//! The project DAG: validation of the whole model set and a deterministic topological order.
//!
//! Every check that needs more than one model happens here, after all files are loaded, so a
//! ref to a model defined in a file loaded later works, and an error names the file:line of
//! the culprit: unknown refs (with a "did you mean"), duplicate names (both places), `cols()`
//! naming a column the parent does not declare, self-references, cycles (printed in order), and
//! per-model rules (bounds outside time-range models, time column and grain columns declared).
//! The order is Kahn's algorithm with a sorted ready set, so it is identical run after run.

use super::error::{LoadError, LoadErrors, did_you_mean};
use super::kind::Kind;
use super::model::Model;
use super::name::ModelName;
use std::collections::{BTreeMap, BTreeSet};

/// A validated set of models.
///
/// Models are stored in topological order (iterating them costs no lookup; the planner walks
/// them several times per plan), with an index by name.
#[derive(Debug, Clone)]
pub struct Dag {
    models: Vec<Model>,
    index: BTreeMap<ModelName, usize>,
    order: Vec<ModelName>,
    /// Direct children by parent, computed on first use when restored from the project cache.
    children: std::sync::OnceLock<BTreeMap<ModelName, BTreeSet<ModelName>>>,
    /// [`Dag::digest`], computed on first use (or restored with the models).
    digest: std::sync::OnceLock<[u8; 32]>,
    /// [`Dag::model_digest`] of every model, in order, computed on first use (kept by
    /// [`Dag::replace`] for the models it does not replace).
    model_digests: std::sync::OnceLock<Vec<[u8; 32]>>,
    /// [`Dag::due_at`] of every model, in order, at the first `now` asked (a process plans at
    /// one `now`; another `now` is computed without being kept).
    due: std::sync::OnceLock<(super::interval::Millis, Vec<super::interval::Millis>)>,
}

impl Dag {
    /// Validates `models` and orders them.
    ///
    /// # Errors
    /// Every problem found, each with file:line and the model at fault.
    pub fn build(models: Vec<Model>) -> Result<Dag, LoadErrors> {
        let mut errors = Vec::new();
        // Models stay where they are (a model is large: maps of them would move them on every
        // insert); the maps hold indexes.
        let mut slots: Vec<Option<Model>> = Vec::with_capacity(models.len());
        let mut index: BTreeMap<ModelName, usize> = BTreeMap::new();
        // DuckDB identifiers are case-insensitive: `s.a` and `s.A` would share one view.
        let mut folded: std::collections::HashMap<String, ModelName> = std::collections::HashMap::with_capacity(models.len());
        for m in models {
            let lower = m.name.to_string().to_ascii_lowercase();
            if let Some(other) = folded.get(&lower).filter(|o| **o != m.name) {
                let first = slots[index[other]].as_ref().expect("kept");
                errors.push(
                    LoadError::new(
                        Some(m.location.clone()),
                        Some(m.name.clone()),
                        format!("model name differs only in case from `{}` ({}), and DuckDB names are case-insensitive", first.name, first.location),
                    )
                    .with_hint("rename one of them"),
                );
                continue;
            }
            if let Some(&i) = index.get(&m.name) {
                let first = slots[i].as_ref().expect("kept");
                errors.push(
                    LoadError::new(Some(m.location.clone()), Some(m.name.clone()), format!("duplicate model name, first defined at {}", first.location))
                        .with_hint("model names must be unique across the project"),
                );
                continue;
            }
            folded.insert(lower, m.name.clone());
            index.insert(m.name.clone(), slots.len());
            slots.push(Some(m));
        }
        let by_name: BTreeMap<&ModelName, &Model> = index.iter().map(|(n, &i)| (n, slots[i].as_ref().expect("kept"))).collect();
        let lookup = |n: &ModelName| by_name.get(n).copied();
        // Built only on the error path: a project with thousands of models stays linear.
        let suggest = |wanted: &str| {
            let names: Vec<String> = by_name.keys().map(|k| k.to_string()).collect();
            did_you_mean(wanted, names.iter().map(String::as_str)).map(str::to_string)
        };
        for m in by_name.values() {
            errors.extend(validate_model(m));
            errors.extend(validate_edges(m, &lookup, &suggest));
        }
        errors.extend(shadowed_relations(by_name.values().copied(), &|relation: &str| folded.get(relation).and_then(|n| by_name.get(n)).copied()));
        if !errors.is_empty() {
            errors.sort_by(|a, b| a.location.cmp(&b.location));
            return Err(LoadErrors(errors));
        }
        // Kahn's algorithm over ranks in name order (`by_name` is sorted): the ready model with
        // the smallest name goes first. Ranks spare the name comparisons and clones of maps
        // keyed by name; the children map is built on first use ([`Dag::children`]).
        let names: Vec<&ModelName> = by_name.keys().copied().collect();
        let rank: std::collections::HashMap<&ModelName, usize> = names.iter().enumerate().map(|(r, n)| (*n, r)).collect();
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
        let mut indegree: Vec<usize> = vec![0; names.len()];
        for (r, m) in by_name.values().enumerate() {
            // Validated above: every ref names another model of the set. The models its audits
            // read come first too (they run after them in an apply).
            let mut parents: Vec<usize> =
                m.body.iter().flat_map(|b| b.refs()).chain(m.audits.iter().flat_map(|a| a.sql.refs())).map(|p| rank[&p.target]).collect();
            parents.sort_unstable();
            parents.dedup();
            indegree[r] = parents.len();
            for p in parents {
                children[p].push(r);
            }
        }
        let mut ready: BTreeSet<usize> = (0..names.len()).filter(|&r| indegree[r] == 0).collect();
        let mut ranks = Vec::with_capacity(names.len());
        while let Some(r) = ready.pop_first() {
            for &c in &children[r] {
                indegree[c] -= 1;
                if indegree[c] == 0 {
                    ready.insert(c);
                }
            }
            ranks.push(r);
        }
        let order: Vec<ModelName> = ranks.iter().map(|&r| names[r].clone()).collect();
        if order.len() < by_name.len() {
            return Err(LoadErrors(cycle_errors(&by_name, &order)));
        }
        let slot_of: Vec<usize> = names.iter().map(|n| index[*n]).collect();
        drop(rank);
        drop(by_name);
        let models: Vec<Model> = ranks.iter().map(|&r| slots[slot_of[r]].take().expect("ordered models exist once")).collect();
        let index: BTreeMap<ModelName, usize> = order.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        Ok(Dag {
            models,
            index,
            order,
            children: std::sync::OnceLock::new(),
            digest: std::sync::OnceLock::new(),
            model_digests: std::sync::OnceLock::new(),
            due: std::sync::OnceLock::new(),
        })
    }

    /// A DAG of `models` already validated by [`Dag::build`] and in the order it gave them, with
    /// their [`Dag::digest`] (restored from the project cache, `crate::project::cache`, whose
    /// checksum proves them as stored): nothing is checked again. `None` when two models share a
    /// name.
    pub fn from_validated(models: Vec<Model>, digest: [u8; 32]) -> Option<Dag> {
        let order: Vec<ModelName> = models.iter().map(|m| m.name.clone()).collect();
        let index: BTreeMap<ModelName, usize> = order.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        if index.len() != models.len() {
            return None;
        }
        Some(Dag {
            models,
            index,
            order,
            children: std::sync::OnceLock::new(),
            digest: std::sync::OnceLock::from(digest),
            model_digests: std::sync::OnceLock::new(),
            due: std::sync::OnceLock::new(),
        })
    }

    /// The digest of every model exactly as loaded, in order: blake3 over the model count and
    /// each model's [`Dag::model_digest`] (its derived `Hash`, which covers every field): equal
    /// digests, equal projects. Computed once per DAG; the plan memo's key is built from it.
    pub fn digest(&self) -> [u8; 32] {
        *self.digest.get_or_init(|| digest_of(self.model_digests()))
    }

    /// The blake3 digest of the model at position `i` (topological order) exactly as loaded:
    /// equal digests, equal definitions. Computed once per DAG (for every model at once).
    ///
    /// # Panics
    /// `i` is out of range.
    pub fn model_digest(&self, i: usize) -> [u8; 32] {
        self.model_digests()[i]
    }

    fn model_digests(&self) -> &[[u8; 32]] {
        self.model_digests.get_or_init(|| self.models.iter().map(model_digest).collect())
    }

    /// Puts `replacements` in place of the models of the same names, in place, when that
    /// provably leaves everything but those models as it is and every check of [`Dag::build`]
    /// passes as it would on the same models: every replacement names a model of this DAG
    /// (once), reads the same parents, exposes the same relation columns (children expanded
    /// `cols()` from them) and passes the per-model checks; the refs, audits and `cols()` of the
    /// replacements and of every model whose checks they can change pass against their
    /// parents — the models reading a replacement (by a ref or an audit's), and, through
    /// embedded models (inlined with their bounds), the models reading those, transitively; and
    /// no model is named like the relation an external reads (checked again over the whole DAG
    /// when a replacement is an external or changes kind). Then the order, the children and
    /// every other model stay, and so do the digests of the others: the DAG equals
    /// [`Dag::build`] of the same models (`tests/it/dag_replace.rs` compares them).
    ///
    /// # Errors
    /// The replacements, given back with the DAG untouched, when a replacement adds or drops an
    /// edge, renames, changes its exposed columns or fails a check: the caller builds the DAG
    /// in full (which also reports the errors).
    pub fn try_replace(&mut self, replacements: Vec<Model>) -> Result<(), Vec<Model>> {
        let mut at: BTreeMap<usize, usize> = BTreeMap::new();
        // Whether what [`shadowed_relations`] finds can change.
        let mut shadowing = false;
        for (k, m) in replacements.iter().enumerate() {
            let Some(&i) = self.index.get(&m.name) else { return Err(replacements) };
            let old = &self.models[i];
            if at.insert(i, k).is_some()
                || old.dependencies() != m.dependencies()
                || old.relation_columns() != m.relation_columns()
                || !validate_model(m).is_empty()
            {
                return Err(replacements);
            }
            shadowing |= matches!(m.kind, Kind::External(_)) || old.kind.tag() != m.kind.tag();
        }
        let by_name: BTreeMap<&ModelName, &Model> = replacements.iter().map(|m| (&m.name, m)).collect();
        let lookup = |n: &ModelName| by_name.get(n).copied().or_else(|| self.get(n));
        // The models reading each model through an audit (the DAG's children read it through
        // their queries). Dependencies are unchanged: the DAG's models tell them.
        let mut audit_readers: BTreeMap<&ModelName, Vec<&ModelName>> = BTreeMap::new();
        for m in &self.models {
            for r in m.audits.iter().flat_map(|a| a.sql.refs()) {
                audit_readers.entry(&r.target).or_default().push(&m.name);
            }
        }
        // What `validate_edges` of a model reads of others: their names and columns (unchanged
        // but for the replacements), and the kind and bounds of the embedded models a ref
        // inlines (`embedded_with_bounds`). So the models to check again are the replacements,
        // their readers, and the readers of every embedded model reached that way.
        let mut checked: BTreeSet<&ModelName> = replacements.iter().map(|m| &m.name).collect();
        let mut stack: Vec<&ModelName> = checked.iter().copied().collect();
        while let Some(n) = stack.pop() {
            if !by_name.contains_key(n) && !lookup(n).is_some_and(|m| matches!(m.kind, Kind::Embedded)) {
                continue;
            }
            for reader in self.children(n).chain(audit_readers.get(n).into_iter().flatten().copied()) {
                if checked.insert(reader) {
                    stack.push(reader);
                }
            }
        }
        if checked.iter().any(|n| !validate_edges(lookup(n).expect("a model of the DAG"), &lookup, &|_| None).is_empty()) {
            return Err(replacements);
        }
        if shadowing {
            let merged: Vec<&Model> = self.models.iter().map(|m| by_name.get(&m.name).copied().unwrap_or(m)).collect();
            let folded: std::collections::HashMap<String, &Model> = merged.iter().map(|m| (m.name.to_string().to_ascii_lowercase(), *m)).collect();
            if !shadowed_relations(merged.iter().copied(), &|relation: &str| folded.get(relation).copied()).is_empty() {
                return Err(replacements);
            }
        }
        drop(by_name);
        let mut digests = self.model_digests().to_vec();
        for ((&i, _), m) in at.iter().zip(sorted_by_position(replacements, &at)) {
            digests[i] = model_digest(&m);
            self.models[i] = m;
        }
        self.digest = std::sync::OnceLock::from(digest_of(&digests));
        self.model_digests = std::sync::OnceLock::from(digests);
        // A replacement may have another `cron`: the due instants are computed again.
        self.due = std::sync::OnceLock::new();
        Ok(())
    }

    /// The instant up to which `name`'s intervals are due at `now`: its own due instant
    /// ([`Model::due_at`], its cron's last tick), but never past what its parents have: a
    /// time-range parent's data ends at the grain floor of the parent's own due instant, and a
    /// `full`/`view`/`embedded` parent (or any other) passes its parents' on. So a child never
    /// computes, and marks done, an interval whose input a parent holds back (a daily parent on
    /// a `0 6 * * *` cron, an hourly child; a `month` parent, a `day` child): it waits for it,
    /// as sqlmesh's scheduler does. `now` for a name not in the DAG.
    pub fn due_at(&self, name: &ModelName, now: super::interval::Millis) -> super::interval::Millis {
        let Some(&i) = self.index.get(name) else { return now };
        if let Some((at, due)) = self.due.get() {
            if *at == now {
                return due[i];
            }
            return self.due_all(now)[i];
        }
        self.due.get_or_init(|| (now, self.due_all(now))).1[i]
    }

    /// The models `name` reads, directly or through others (its ancestors), parents first; empty
    /// for a name not in the DAG.
    pub fn ancestors(&self, name: &ModelName) -> Vec<&Model> {
        let Some(&i) = self.index.get(name) else { return Vec::new() };
        self.lineage_of(i).into_iter().filter(|&j| j != i).map(|j| &self.models[j]).collect()
    }

    /// The position `i` and its ancestors' positions, ascending (parents first).
    fn lineage_of(&self, i: usize) -> Vec<usize> {
        let mut members = BTreeSet::from([i]);
        let mut stack = vec![i];
        while let Some(j) = stack.pop() {
            for p in self.models[j].parents() {
                if let Some(&k) = self.index.get(&p)
                    && members.insert(k)
                {
                    stack.push(k);
                }
            }
        }
        members.into_iter().collect()
    }

    /// When the next interval of the time-range model `name` becomes due after `now`: the first
    /// instant at which [`Dag::due_at`] of it, floored to its grain, passes the next interval it
    /// wants — its ancestors' crons and grains included (a child of a parent on `0 6 * * *` is
    /// due after 06:00, not at midnight): the first instant at which `run` computes it, its own
    /// cron's tick reached and its parents handing the interval over, whichever comes last (a
    /// `@daily` child of that parent is due at 06:00 too, not at its own next tick). `None` for a name not in the DAG or not time-range, when
    /// its `end` leaves no interval to come, or when nothing becomes due within 10 000 steps (a
    /// cron that never fires again).
    pub fn next_due(&self, name: &ModelName, now: super::interval::Millis) -> Option<super::interval::Millis> {
        use super::interval::Millis;
        let &i = self.index.get(name)?;
        let t = self.models[i].kind.time_range()?;
        let grain = t.grain;
        let graph = DueGraph::of(self, self.lineage_of(i));
        let me = graph.members.binary_search(&i).expect("the model is a member");
        let due_of = |at: Millis| graph.due(self, at)[me];
        // The next wanted interval starts here: where the due instant's floor is now, or at the
        // model's first interval; past its `end`, none is to come.
        let next_start = grain.floor(due_of(now)).max(grain.floor(t.start));
        if t.end.is_some_and(|e| next_start >= e) {
            return None;
        }
        // While the model's own cron has not reached past that interval (its own due instant
        // caps the ancestors'), nothing before its next tick can make it due: the search starts
        // just before that tick (the instant itself is never the answer: its own due instant is
        // still the one at `now`). Once its own tick has passed and only a parent holds it back,
        // the parents' ticks make it due: the search starts at `now`.
        let mut at = match &graph.crons[me] {
            Some(c) if grain.floor(super::cron::due_at(Some(c), now)) <= next_start => super::cron::next_tick(c, now)?.saturating_sub(1).max(now),
            _ => now,
        };
        for _ in 0..10_000 {
            if at > now && grain.floor(due_of(at)) > next_start {
                return Some(at);
            }
            // The next instant any member's due instant can move: a cron's tick, or a grain
            // boundary (its own, the model's).
            at = graph
                .members
                .iter()
                .zip(&graph.crons)
                .filter_map(|(&j, c)| match c {
                    Some(c) => super::cron::next_tick(c, at),
                    None => Some(self.models[j].kind.time_range().map_or(grain, |tr| tr.grain).next(at)),
                })
                .chain(std::iter::once(grain.next(at)))
                .min()?;
        }
        None
    }

    /// [`Dag::due_at`] of every model, in order (parents first, so one pass).
    fn due_all(&self, now: super::interval::Millis) -> Vec<super::interval::Millis> {
        DueGraph::of(self, (0..self.models.len()).collect()).due(self, now)
    }

    /// Model names in topological order (parents first).
    pub fn order(&self) -> &[ModelName] {
        &self.order
    }

    /// Models in topological order.
    pub fn models(&self) -> impl Iterator<Item = &Model> {
        self.models.iter()
    }

    /// The position of a model in topological order ([`Dag::order`], [`Dag::models`]).
    pub fn position(&self, name: &ModelName) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// A model by name.
    pub fn get(&self, name: &ModelName) -> Option<&Model> {
        self.index.get(name).map(|&i| &self.models[i])
    }

    /// Number of models.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// True when the project has no models.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// Direct children of `name`.
    pub fn children(&self, name: &ModelName) -> impl Iterator<Item = &ModelName> {
        let children = self.children.get_or_init(|| {
            let mut children: BTreeMap<ModelName, BTreeSet<ModelName>> = self.order.iter().map(|n| (n.clone(), BTreeSet::new())).collect();
            for m in &self.models {
                for p in m.parents() {
                    children.entry(p).or_default().insert(m.name.clone());
                }
            }
            children
        });
        children.get(name).into_iter().flatten()
    }

    /// The closest model name to `wanted`, for "did you mean" hints.
    pub fn suggest(&self, wanted: &str) -> Option<String> {
        let names: Vec<String> = self.index.keys().map(|k| k.to_string()).collect();
        did_you_mean(wanted, names.iter().map(String::as_str)).map(str::to_string).or_else(|| {
            // A name cut short (`mart.daily` for `mart.daily_revenue`): the one model it begins.
            let wanted = wanted.to_lowercase();
            let mut starting = names.iter().filter(|n| n.len() > wanted.len() && n.to_lowercase().starts_with(&wanted));
            match (starting.next(), starting.next()) {
                (Some(only), None) => Some(only.clone()),
                _ => None,
            }
        })
    }
}

/// `replacements` ordered by the DAG position `at` maps to their index.
fn sorted_by_position(replacements: Vec<Model>, at: &BTreeMap<usize, usize>) -> Vec<Model> {
    let mut slots: Vec<Option<Model>> = replacements.into_iter().map(Some).collect();
    at.values().map(|&k| slots[k].take().expect("one position per replacement")).collect()
}

/// The blake3 digest of one model exactly as loaded, fed through its derived `Hash`.
pub fn model_digest(model: &Model) -> [u8; 32] {
    use std::hash::Hash;
    let mut bytes = HashBytes(Vec::with_capacity(1024));
    model.hash(&mut bytes);
    *blake3::hash(&bytes.0).as_bytes()
}

/// [`Dag::digest`] of models whose [`model_digest`]s are `digests`, in order.
fn digest_of(digests: &[[u8; 32]]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&(digests.len() as u64).to_le_bytes());
    for d in digests {
        h.update(d);
    }
    *h.finalize().as_bytes()
}

/// A [`std::hash::Hasher`] that keeps every byte it is fed, so a derived `Hash` can be digested
/// with blake3 in one call (std's hashers are neither stable nor collision-resistant).
pub struct HashBytes(pub Vec<u8>);

impl std::hash::Hasher for HashBytes {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

/// The models named like the relation an external of `models` reads (`named` finds a model by
/// its lower-case `schema.table`): its `prod` view would replace that relation (the user's table
/// or view), and the external would then read the model itself. [`Dag::build`] runs it over
/// every model; [`Dag::try_replace`] too, when a replacement can change what it finds.
fn shadowed_relations<'a>(models: impl Iterator<Item = &'a Model>, named: &dyn Fn(&str) -> Option<&'a Model>) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for ext in models {
        let Kind::External(super::kind::External::Table { name }) = &ext.kind else { continue };
        // `t` is `main.t`; a catalog-qualified name may be another database's: left alone.
        let relation = name.replace('"', "").to_ascii_lowercase();
        let relation = if relation.contains('.') { relation } else { format!("main.{relation}") };
        // Only a model with a view of its own (not an external, not an embedded model).
        if let Some(model) = named(relation.as_str()).filter(|m| !matches!(m.kind, Kind::External(_) | Kind::Embedded)) {
            errors.push(
                LoadError::new(
                    Some(model.location.clone()),
                    Some(model.name.clone()),
                    format!(
                        "model `{}` is named like the relation `{name}` that external `{}` ({}) reads: its `prod` view would replace that relation, and `{}` would then read this model",
                        model.name, ext.name, ext.location, ext.name
                    ),
                )
                .with_hint("rename the model (or point the external at another relation)"),
            );
        }
    }
    errors
}

/// Rules that concern one model alone.
pub fn validate_model(m: &Model) -> Vec<LoadError> {
    let mut errors = Vec::new();
    let err = |msg: String| LoadError::new(Some(m.location.clone()), Some(m.name.clone()), msg);
    if m.schema.0.is_empty() {
        errors.push(err("the schema declares no columns".into()).with_hint("declare the output columns in `schema`, as (column, type) pairs"));
    }
    // Engines fold unquoted names to one case: `n` and `N` would be one column in the view
    // (DuckDB renames the second in the table, and the view reads the first twice).
    let mut seen: std::collections::BTreeMap<String, &str> = std::collections::BTreeMap::new();
    for c in &m.schema.0 {
        match seen.insert(c.name.to_ascii_lowercase(), c.name.as_str()) {
            Some(first) if first == c.name => errors.push(err(format!("column `{}` is declared twice", c.name))),
            Some(first) => errors.push(
                err(format!("columns `{first}` and `{}` differ only in case, and the engine would take them for one column", c.name))
                    .with_hint("give them names that differ in more than case"),
            ),
            None => {}
        }
        if c.name.is_empty() || c.ty.trim().is_empty() {
            errors.push(err(format!("column `{}` needs a name and a type", c.name)));
        }
    }
    for g in &m.grain {
        if !m.schema.contains(g) {
            errors.push(err(format!("grain column `{g}` is not declared in the schema")));
        }
    }
    errors.extend(validate_keyed_kind(m));
    if m.body.as_ref().is_some_and(|b| b.reads_itself()) {
        if !matches!(m.kind, Kind::IncrementalByTimeRange(_) | Kind::IncrementalByUniqueKey(_)) {
            errors.push(
                err(format!("`@this` used in a `{}` model", m.kind.tag()))
                    .with_hint("only `incremental_by_time_range` and `incremental_by_unique_key` models keep rows between builds to read"),
            );
        } else if m.target != super::target::Target::Table {
            errors.push(
                err(format!("`@this` used in a model stored as `{}`", m.target))
                    .with_hint("a self-referencing model is stored as an engine table: drop `target`"),
            );
        }
    }
    match (&m.kind, &m.body) {
        (Kind::External(_), Some(_)) => errors.push(err("an external source has no query".into())),
        (Kind::External(_), None) => {}
        (Kind::Seed(_), Some(_)) => errors.push(err("a seed has no query: its rows come from its file".into())),
        (Kind::Seed(_), None) => {}
        (_, None) => errors.push(err(format!("a `{}` model needs a query", m.kind.tag()))),
        (Kind::IncrementalByTimeRange(t), Some(body)) => {
            if !m.schema.contains(&t.time_column) {
                errors.push(undeclared(m, err(format!("time column `{}` is not declared in the schema", t.time_column)), &t.time_column));
            }
            if let Some(c) = m.schema.get(&t.time_column)
                && !is_time_type(&c.ty)
            {
                errors.push(
                    err(format!(
                        "time column `{}` is declared `{}`, but a time-range model's intervals are rows whose time column lies between two timestamps",
                        t.time_column, c.ty
                    ))
                    .with_hint(
                        "declare it a `date`, `timestamp` or `timestamptz`, converting in the query (e.g. `to_timestamp(epoch_col)`, `CAST(day_text AS DATE)`)",
                    ),
                );
            }
            if t.batch_size == 0 {
                errors.push(err("`batch_size` must be at least 1".into()));
            }
            if m.schema.get(&t.time_column).is_some_and(|c| c.ty.trim().eq_ignore_ascii_case("date"))
                && matches!(t.grain, super::interval::Grain::FiveMinute | super::interval::Grain::QuarterHour | super::interval::Grain::Hour)
            {
                // The kind option as the model's language writes it.
                let day = match m.location.file.extension().and_then(|e| e.to_str()) {
                    Some("sql") => "`grain = day` in `-- kind:`",
                    Some("rhai") => "`grain: \"day\"`",
                    _ => "`grain = \"day\"`",
                };
                errors.push(
                    err(format!("time column `{}` is a `date`, but the grain `{}` is finer than a day", t.time_column, t.grain.as_str()))
                        .with_hint(format!("a date holds no time of day: use {day} (or coarser), or declare the column a `timestamp`")),
                );
            }
            if t.end.is_some_and(|e| e <= t.start) {
                errors.push(err("`end` must be after `start`".into()));
            }
            let _ = body;
        }
        // An embedded model's bounds are its consumer's: [`validate_edges`] lets only
        // time-range models (and embedded models) read one that uses them.
        (Kind::Embedded, Some(_)) => {}
        (_, Some(body)) => {
            if body.uses_bounds() {
                errors.push(
                    err(format!("`@start`/`@end` used in a `{}` model", m.kind.tag()))
                        .with_hint("interval bounds exist only in `incremental_by_time_range` models"),
                );
            }
        }
    }
    errors
}

/// `e` (a kind option naming `name`, a column the schema does not declare) with its hint. A
/// name in double quotes whose inside is declared was quoted as in `-- schema:`, but in a
/// `.sql` header's `-- kind:` a value's double quotes are part of it (values are bare words or
/// `'quoted strings'`): the hint says to write `'order id'` there. Otherwise, the declared
/// name it is closest to, if any.
fn undeclared(m: &Model, e: LoadError, name: &str) -> LoadError {
    let quoted = name.strip_prefix('"').and_then(|n| n.strip_suffix('"')).filter(|n| !n.is_empty()).map(|n| n.replace("\"\"", "\""));
    let in_sql = m.location.file.extension().and_then(|x| x.to_str()) == Some("sql");
    let hint = match quoted.filter(|n| m.schema.contains(n)) {
        Some(inner) if in_sql => format!(
            "in `-- kind:` double quotes are part of the name: quote a column name with single quotes there, `'{inner}'` \
             (double quotes quote names in `-- schema:` only)"
        ),
        Some(inner) => format!("the double quotes are part of the name as written: write `{inner}`"),
        None => match did_you_mean(name, m.schema.names()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => return e,
        },
    };
    e.with_hint(hint)
}

/// Columns named by `incremental_by_unique_key`, `incremental_by_partition` and `scd_type2`
/// options: keys, partition columns and watched
/// columns must be declared; SCD type 2's managed columns must not be (efmesh adds them).
fn validate_keyed_kind(m: &Model) -> Vec<LoadError> {
    let err = |msg: String| LoadError::new(Some(m.location.clone()), Some(m.name.clone()), msg);
    let mut errors = Vec::new();
    let (key, tag, what) = match &m.kind {
        Kind::IncrementalByUniqueKey(u) => (&u.key, m.kind.tag(), "key column"),
        Kind::ScdType2(s) => (&s.key, m.kind.tag(), "key column"),
        Kind::IncrementalByPartition(p) => (&p.partitioned_by, m.kind.tag(), "partition column (`partitioned_by`)"),
        _ => return errors,
    };
    for k in key.iter().filter(|k| !m.schema.contains(k)) {
        errors.push(undeclared(m, err(format!("{what} `{k}` of kind `{tag}` is not declared in the schema")), k));
    }
    if let Kind::ScdType2(s) = &m.kind {
        for managed in [&s.valid_from, &s.valid_to] {
            if m.schema.names().any(|n| n.eq_ignore_ascii_case(managed)) {
                errors.push(err(format!("column `{managed}` is managed by kind `scd_type2` and cannot be declared")).with_hint(format!(
                    "remove `{managed}` from `schema` (efmesh adds it), or name the managed column otherwise with `valid_from`/`valid_to`"
                )));
            }
        }
        for (old, new) in &s.renamed {
            if !m.schema.contains(new) {
                let e = err(format!("column `{new}` renamed from `{old}` (kind `scd_type2`, `renamed`) is not declared in the schema"));
                errors.push(undeclared(m, e, new));
            }
            if m.schema.contains(old) {
                errors.push(
                    err(format!("column `{old}` is declared renamed to `{new}` (kind `scd_type2`, `renamed`) but is still declared in the schema"))
                        .with_hint("a renamed column is declared under its new name only"),
                );
            }
        }
        for c in s.columns.iter().flatten() {
            if !m.schema.contains(c) {
                errors.push(undeclared(m, err(format!("watched column `{c}` of kind `scd_type2` is not declared in the schema")), c));
            } else if key.contains(c) {
                errors.push(
                    err(format!("watched column `{c}` of kind `scd_type2` is a key column"))
                        .with_hint("`columns` lists the non-key columns whose changes open a new version"),
                );
            }
        }
    }
    errors
}

/// The checks of `m`'s refs and `cols()` against the models `all` finds by name.
/// `suggest` gives the "did you mean" of an unknown name (called on the error path only).
fn validate_edges<'a>(m: &Model, all: &dyn Fn(&ModelName) -> Option<&'a Model>, suggest: &dyn Fn(&str) -> Option<String>) -> Vec<LoadError> {
    let mut errors = Vec::new();
    // The models an audit reads, reported at the audit's use.
    for a in &m.audits {
        for r in a.sql.refs() {
            if r.target == m.name {
                errors.push(
                    LoadError::new(Some(r.location.clone()), Some(m.name.clone()), format!("audit `{}` references its own model `{}`", a.name, m.name))
                        .with_hint("the audit's relation (its first argument) is this model"),
                );
            } else if all(&r.target).is_none() {
                let mut e =
                    LoadError::new(Some(r.location.clone()), Some(m.name.clone()), format!("audit `{}` references unknown model `{}`", a.name, r.target));
                if let Some(s) = suggest(&r.target.to_string()) {
                    e = e.with_hint(format!("did you mean `{s}`?"));
                }
                errors.push(e);
            } else if let Some(inlined) = embedded_with_bounds(&r.target, all) {
                // An audit runs over a whole relation, outside any batch: no interval to give.
                errors.push(
                    LoadError::new(
                        Some(r.location.clone()),
                        Some(m.name.clone()),
                        format!("audit `{}` reads embedded model `{inlined}`, which uses `@start`/`@end`: an audit has no interval to give it", a.name),
                    )
                    .with_hint("reference a model that stores its rows (the time-range model reading it, for instance)"),
                );
            }
        }
    }
    // An embedded model stores nothing: its audits run over its query, outside any batch, so
    // one whose query (or an embedded model it inlines) needs an interval cannot be audited.
    if matches!(m.kind, Kind::Embedded)
        && !m.audits.is_empty()
        && let Some(inlined) = embedded_with_bounds(&m.name, all)
    {
        let uses = if inlined == m.name { "uses `@start`/`@end`".to_string() } else { format!("inlines `{inlined}`, which uses `@start`/`@end`") };
        for a in &m.audits {
            errors.push(
                LoadError::new(
                    Some(a.location.clone()),
                    Some(m.name.clone()),
                    format!("audit `{}`: `{}` is embedded and {uses}: it has no relation to audit outside a batch", a.label(), m.name),
                )
                .with_hint("audit the models that read it instead (the time-range models storing its rows)"),
            );
        }
    }
    let Some(body) = &m.body else { return errors };
    for r in body.refs() {
        if r.target == m.name {
            errors.push(LoadError::new(Some(r.location.clone()), Some(m.name.clone()), "a model cannot reference itself"));
        } else if all(&r.target).is_none() {
            let mut e = LoadError::new(Some(r.location.clone()), Some(m.name.clone()), format!("unknown ref `{}`", r.target));
            if let Some(s) = suggest(&r.target.to_string()) {
                e = e.with_hint(format!("did you mean `{s}`?"));
            }
            errors.push(e);
        }
    }
    if !matches!(m.kind, Kind::IncrementalByTimeRange(_) | Kind::Embedded) {
        for r in body.refs() {
            if let Some(inlined) = embedded_with_bounds(&r.target, all) {
                let via = if inlined == r.target { String::new() } else { format!(" (through `{}`, which inlines it)", r.target) };
                errors.push(
                    LoadError::new(
                        Some(r.location.clone()),
                        Some(m.name.clone()),
                        format!("embedded model `{inlined}` uses `@start`/`@end`{via}, but a `{}` model has no interval to give it", m.kind.tag()),
                    )
                    .with_hint("an embedded model with interval bounds can be read only by `incremental_by_time_range` models (directly or through other embedded models)"),
                );
            }
        }
    }
    for c in body.cols() {
        let Some(parent) = all(&c.parent) else {
            errors.push(LoadError::new(Some(c.location.clone()), Some(m.name.clone()), format!("`cols()` names unknown model `{}`", c.parent)));
            continue;
        };
        // With an unknown ref in the query (reported above), the missing ref is likely that
        // one misspelt: a second error about it would send the user the wrong way.
        if !body.refs().any(|r| r.target == c.parent) && body.refs().all(|r| all(&r.target).is_some()) {
            errors.push(
                LoadError::new(Some(c.location.clone()), Some(m.name.clone()), format!("`cols()` names `{}`, which the query never `ref`s", c.parent))
                    .with_hint(format!("read it with `ref(\"{}\")`", c.parent)),
            );
        }
        let exposed = parent.relation_columns();
        for col in &c.columns {
            if !exposed.iter().any(|e| e.name == *col) {
                let mut e = LoadError::new(
                    Some(c.location.clone()),
                    Some(m.name.clone()),
                    format!("column `{col}` is not declared by parent `{}` ({})", c.parent, parent.location),
                );
                if let Some(s) = did_you_mean(col, exposed.iter().map(|e| e.name.as_str())) {
                    e = e.with_hint(format!("did you mean `{s}`?"));
                }
                errors.push(e);
            }
        }
    }
    errors
}

/// The embedded model using interval bounds that a reference to `name` inlines: `name` itself
/// or, through embedded models, one of their embedded parents. `None` for any other model.
fn embedded_with_bounds<'a>(name: &ModelName, all: &dyn Fn(&ModelName) -> Option<&'a Model>) -> Option<ModelName> {
    let mut stack = vec![name.clone()];
    let mut seen = BTreeSet::new();
    while let Some(n) = stack.pop() {
        let Some(model) = all(&n) else { continue };
        if !matches!(model.kind, Kind::Embedded) || !seen.insert(n.clone()) {
            continue;
        }
        let Some(body) = &model.body else { continue };
        if body.uses_bounds() {
            return Some(n);
        }
        stack.extend(body.refs().map(|r| r.target.clone()));
    }
    None
}

fn cycle_errors(all: &BTreeMap<&ModelName, &Model>, ordered: &[ModelName]) -> Vec<LoadError> {
    use petgraph::graph::DiGraph;
    let done: BTreeSet<&ModelName> = ordered.iter().collect();
    let rest: Vec<&ModelName> = all.keys().copied().filter(|k| !done.contains(k)).collect();
    let mut g = DiGraph::<&ModelName, ()>::new();
    let idx: BTreeMap<&ModelName, _> = rest.iter().map(|n| (*n, g.add_node(*n))).collect();
    for n in &rest {
        for p in all[*n].dependencies() {
            if let Some(pi) = idx.get(&p) {
                g.add_edge(*pi, idx[n], ());
            }
        }
    }
    let mut errors = Vec::new();
    for scc in petgraph::algo::tarjan_scc(&g) {
        if scc.len() < 2 {
            continue;
        }
        // Walk the cycle from its smallest member, following parent → child edges inside it.
        let members: BTreeSet<&ModelName> = scc.iter().map(|i| g[*i]).collect();
        let first = *members.iter().next().expect("non-empty");
        let mut path = vec![first];
        let mut cur = first;
        loop {
            let next = all
                .values()
                .filter(|m| members.contains(&m.name) && m.dependencies().contains(cur))
                .map(|m| &m.name)
                .find(|n| !path.contains(n) || *n == first);
            match next {
                Some(n) if n == first => {
                    path.push(first);
                    break;
                }
                Some(n) => {
                    path.push(n);
                    cur = n;
                }
                None => break,
            }
        }
        let text = path.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" → ");
        let m = &all[first];
        errors.push(
            LoadError::new(Some(m.location.clone()), Some(first.clone()), format!("dependency cycle: {text}"))
                .with_hint("a model cannot depend on its own output; break the cycle"),
        );
    }
    errors
}

/// Models of a DAG closed under parents (positions ascending: parents first), with what
/// [`Dag::due_at`] needs of each read once: its cron and its parents' places among them.
struct DueGraph {
    members: Vec<usize>,
    crons: Vec<Option<croner::Cron>>,
    parents: Vec<Vec<usize>>,
}

impl DueGraph {
    fn of(dag: &Dag, members: Vec<usize>) -> Self {
        let crons = members.iter().map(|&j| dag.models[j].schedule()).collect();
        let parents = members
            .iter()
            .map(|&j| dag.models[j].parents().iter().filter_map(|p| dag.index.get(p)).filter_map(|k| members.binary_search(k).ok()).collect())
            .collect();
        DueGraph { members, crons, parents }
    }

    /// [`Dag::due_at`] of every member at `now`, in the members' order: its own due instant
    /// ([`super::cron::due_at`]), capped by what each parent has (a time-range parent's grain
    /// floor of its own).
    fn due(&self, dag: &Dag, now: super::interval::Millis) -> Vec<super::interval::Millis> {
        let mut due = Vec::with_capacity(self.members.len());
        for (c, ps) in self.crons.iter().zip(&self.parents) {
            let mut cap = super::cron::due_at(c.as_ref(), now);
            for &q in ps {
                let passed = match dag.models[self.members[q]].kind.time_range() {
                    Some(t) => t.grain.floor(due[q]),
                    None => due[q],
                };
                cap = cap.min(passed);
            }
            due.push(cap);
        }
        due
    }
}

/// True for the types a time column may have: a date or a timestamp (`date`, `timestamp`,
/// `timestamp(3)`, `timestamp with[out] time zone`, `timestamptz`, `timestamp_s/ms/us/ns`,
/// `datetime`).
fn is_time_type(ty: &str) -> bool {
    let t = ty.trim().to_ascii_lowercase();
    let t = t.strip_suffix(" with time zone").or_else(|| t.strip_suffix(" without time zone")).unwrap_or(&t).trim_end();
    // `timestamp(3)`: a precision.
    let base = match t.split_once('(') {
        Some((b, rest)) if rest.strip_suffix(')').is_some_and(|p| p.trim().chars().all(|c| c.is_ascii_digit())) => b.trim_end(),
        Some(_) => return false,
        None => t,
    };
    matches!(base, "date" | "timestamp" | "timestamptz" | "timestamp_s" | "timestamp_ms" | "timestamp_us" | "timestamp_ns" | "datetime")
}

#[cfg(test)]
mod time_type_tests {
    #[test]
    fn a_time_column_is_a_date_or_a_timestamp() {
        for ok in ["date", "TIMESTAMP", "timestamp(3)", "timestamp with time zone", "TIMESTAMP(6) WITHOUT TIME ZONE", "timestamptz", "TIMESTAMP_NS", "datetime"]
        {
            assert!(super::is_time_type(ok), "{ok}");
        }
        for bad in
            ["bigint", "varchar", "time", "time with time zone", "interval", "blob", "json", "enum('a','b')", "timestamp_tz", "timestamp[]", "timestamp(x)"]
        {
            assert!(!super::is_time_type(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod next_due_tests {
    use super::Dag;
    use crate::core::fragment::{Fragment, Node, RefSite};
    use crate::core::interval::{Grain, parse_instant, to_iso};
    use crate::core::kind::DEFAULT_BATCH_SIZE;
    use crate::core::{Column, Kind, Location, Model, ModelName, Schema, TimeRange};

    /// A time-range model of `grain` on `cron`, from 2026-01-01, reading `parent` when given.
    fn model(name: &str, grain: Grain, cron: &str, parent: Option<&str>) -> Model {
        let location = Location { file: "m.lua".into(), line: 1 };
        let mut body = Fragment::default();
        body.push_text("SELECT t FROM ");
        match parent {
            Some(p) => body.nodes.push(Node::Ref(RefSite { target: ModelName::parse(p).unwrap(), location: location.clone() })),
            None => body.push_text("range(1)"),
        }
        let kind = Kind::IncrementalByTimeRange(TimeRange {
            time_column: "t".into(),
            start: parse_instant("2026-01-01").unwrap(),
            end: None,
            grain,
            batch_size: DEFAULT_BATCH_SIZE,
            lookback: 0,
            auto_restatement_intervals: 0,
        });
        let mut m = Model::new(ModelName::parse(name).unwrap(), kind, Schema(vec![Column { name: "t".into(), ty: "timestamp".into() }]), Some(body), location);
        m.cron = Some(cron.to_string());
        m
    }

    /// `s.c`'s next due instant (ISO) at `now`, `s.c` on `child_cron` reading `s.p` on
    /// `parent_cron`.
    fn next_due(parent: (Grain, &str), child: (Grain, &str), now: &str) -> String {
        let dag = Dag::build(vec![model("s.p", parent.0, parent.1, None), model("s.c", child.0, child.1, Some("s.p"))]).unwrap();
        to_iso(dag.next_due(&ModelName::parse("s.c").unwrap(), parse_instant(now).unwrap()).expect("a next due instant"))
    }

    #[test]
    fn a_daily_child_of_a_parent_on_0_6_is_due_at_06_00_not_before_its_own_next_tick() {
        // 03:00: the child's own `@daily` ticked at midnight, but the parent hands 2 January
        // over only at its 06:00 tick.
        assert_eq!(next_due((Grain::Day, "0 6 * * *"), (Grain::Day, "@daily"), "2026-01-03T03:00:00Z"), "2026-01-03T06:00:00.000Z");
        // 07:00, the 2nd handed over: the 3rd is due at the later of the child's tick
        // (midnight) and the parent's (06:00).
        assert_eq!(next_due((Grain::Day, "0 6 * * *"), (Grain::Day, "@daily"), "2026-01-03T07:00:00Z"), "2026-01-04T06:00:00.000Z");
    }

    #[test]
    fn a_daily_child_of_an_hourly_parent_on_minute_30_is_due_at_00_30() {
        assert_eq!(next_due((Grain::Hour, "30 * * * *"), (Grain::Day, "@daily"), "2026-01-03T00:10:00Z"), "2026-01-03T00:30:00.000Z");
    }

    #[test]
    fn a_weekly_child_of_a_daily_parent_on_0_3_is_due_at_the_parents_monday_tick() {
        // Monday 12 January 01:00: the child's `@weekly` ticked at midnight, the parent hands
        // Sunday the 11th over at 03:00 (not a week later, at the child's next tick).
        assert_eq!(next_due((Grain::Day, "0 3 * * *"), (Grain::Week, "@weekly"), "2026-01-12T01:00:00Z"), "2026-01-12T03:00:00.000Z");
        // Once the week is computed, the next one is due at the parent's tick after the child's.
        assert_eq!(next_due((Grain::Day, "0 3 * * *"), (Grain::Week, "@weekly"), "2026-01-12T04:00:00Z"), "2026-01-19T03:00:00.000Z");
    }

    #[test]
    fn a_next_due_instant_is_never_a_millisecond_before_a_tick() {
        for (parent, child, now) in [
            ((Grain::Day, "0 6 * * *"), (Grain::Day, "@daily"), "2026-01-03T03:00:00Z"),
            ((Grain::Day, "0 6 * * *"), (Grain::Day, "@daily"), "2026-01-03T12:00:00Z"),
            ((Grain::Hour, "30 * * * *"), (Grain::Day, "@daily"), "2026-01-03T00:10:00Z"),
            ((Grain::Hour, "30 * * * *"), (Grain::Day, "@daily"), "2026-01-03T00:40:00Z"),
            ((Grain::Day, "0 3 * * *"), (Grain::Week, "@weekly"), "2026-01-12T01:00:00Z"),
        ] {
            let at = next_due(parent, child, now);
            assert!(at.ends_with(":00.000Z"), "{parent:?} {child:?} at {now}: {at}");
        }
    }

    /// A `date` time column on an hourly grain: the hint writes `grain` as the model's language
    /// does (it said Lua's `grain = "day"` in a `.sql` file too).
    #[test]
    fn a_date_time_column_on_an_hourly_grain_is_hinted_in_the_models_language() {
        for (file, option) in [("models/m.sql", "`grain = day` in `-- kind:`"), ("models/m.rhai", "`grain: \"day\"`"), ("models/m.lua", "`grain = \"day\"`")] {
            let mut m = model("s.m", Grain::Hour, "@hourly", None);
            m.schema = Schema(vec![Column { name: "t".into(), ty: "date".into() }]);
            m.location.file = file.into();
            let hints: Vec<String> = super::validate_model(&m).into_iter().filter_map(|e| e.hint).collect();
            let want = format!("a date holds no time of day: use {option} (or coarser), or declare the column a `timestamp`");
            assert!(hints.contains(&want), "{file}: {hints:?}");
        }
    }
}

#[cfg(test)]
mod kind_column_tests {
    use crate::core::{Column, Fragment, Kind, Location, Model, ModelName, ScdType2, Schema};

    /// An `scd_type2` model in `file` keyed by `key` (as its language gave it), declaring
    /// `order id`, `b` and `v`.
    fn keyed(file: &str, key: &[&str]) -> Model {
        let kind = Kind::ScdType2(ScdType2 {
            key: key.iter().map(|k| k.to_string()).collect(),
            valid_from: "valid_from".into(),
            valid_to: "valid_to".into(),
            columns: None,
            invalidate_hard_deletes: true,
            renamed: Vec::new(),
        });
        let schema = Schema(["order id", "b", "v"].into_iter().map(|n| Column { name: n.into(), ty: "bigint".into() }).collect());
        let mut body = Fragment::default();
        body.push_text("SELECT 1");
        Model::new(ModelName::parse("s.m").unwrap(), kind, schema, Some(body), Location { file: file.into(), line: 1 })
    }

    fn hints(m: &Model) -> Vec<(String, Option<String>)> {
        super::validate_model(m).into_iter().map(|e| (e.message, e.hint)).collect()
    }

    /// A key double-quoted in a `.sql` header's `-- kind:` (as names are in `-- schema:`) keeps
    /// its quotes: the hint says to single-quote it there (it said "did you mean `order id`?",
    /// which the header cannot spell with double quotes).
    #[test]
    fn a_double_quoted_kind_column_is_hinted_in_the_headers_quotes() {
        let not_declared = "key column `\"order id\"` of kind `scd_type2` is not declared in the schema".to_string();
        let sql = "in `-- kind:` double quotes are part of the name: quote a column name with single quotes there, `'order id'` (double quotes quote names in `-- schema:` only)";
        assert_eq!(hints(&keyed("models/m.sql", &["\"order id\"", "b"])), [(not_declared.clone(), Some(sql.to_string()))]);
        let lua = "the double quotes are part of the name as written: write `order id`";
        assert_eq!(hints(&keyed("models/m.lua", &["\"order id\"", "b"])), [(not_declared, Some(lua.to_string()))]);
        // Another name keeps its "did you mean"; the single-quoted spelling is declared.
        assert_eq!(
            hints(&keyed("models/m.sql", &["bb"])),
            [("key column `bb` of kind `scd_type2` is not declared in the schema".to_string(), Some("did you mean `b`?".to_string()))]
        );
        assert!(hints(&keyed("models/m.sql", &["order id", "b"])).is_empty());
    }
}
