//! Column lineage across the project: for every model, where each declared column takes its
//! values from ([`crate::sql::lineage::column_lineage_in`] on its canonical SQL, against its
//! parents' declared columns), and the trees that follow it up to the sources (externals,
//! seeds) or down to every column that reads it. Embedded models are parents like any other,
//! so lineage passes through them. No engine and no state store: what `efmesh lineage` prints,
//! the graph page shows, and the plan's column impact reads.

use crate::core::fragment::CanonicalResolver;
use crate::core::{Model, ModelName};
use crate::project::Project;
use crate::sql::lineage::{self, ColumnLineage, Grammar, QueryLineage};
use std::collections::{BTreeMap, BTreeSet};

/// One model's column lineage.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelLineage {
    /// The model's kind tag (`full`, `external`, `seed`…).
    pub kind: &'static str,
    /// One entry per column the model exposes (declared, then the kind's managed ones), in order.
    pub columns: Vec<ColumnLineage>,
    /// The query's lineage; `None` for a model without a query (external, seed) or whose query
    /// sqlparser cannot read (then `unreadable` says why and every column is uncertain).
    pub query: Option<QueryLineage>,
    /// Why the query could not be read, when it could not.
    pub unreadable: Option<String>,
}

/// Column lineage of every model of a project.
#[derive(Debug, Clone, Default)]
pub struct ProjectLineage {
    models: BTreeMap<String, ModelLineage>,
    /// Model names in topological order.
    order: Vec<String>,
    /// Each model's parents, by name.
    parents: BTreeMap<String, Vec<String>>,
}

/// The (model, column) pairs a set of lineage trees has expanded, lower-cased, with the depth
/// left when they were (`None`: unlimited): each is expanded once per answer, again only with
/// more depth left ([`LineageNode::shown_above`]).
pub type Expanded = std::collections::HashMap<(String, String), Option<usize>>;

/// The node of `model.column` (its lineage `m`, `c`) with no `next` yet, to expand (`Ok`), or
/// a leaf (`Err`): nothing next, `--depth` reached, or its tree shown earlier in the answer.
fn start_node(
    model: &str,
    column: &str,
    m: &ModelLineage,
    c: &ColumnLineage,
    has_next: bool,
    depth: Option<usize>,
    expanded: &mut Expanded,
) -> Result<LineageNode, LineageNode> {
    let name = c.column.clone().unwrap_or_else(|| column.to_string());
    let mut node =
        LineageNode { model: model.to_string(), column: name, kind: m.kind, certain: c.certain, next: Some(Vec::new()), truncated: false, shown_above: false };
    if !has_next {
        return Err(node);
    }
    if depth == Some(0) {
        node.truncated = true;
        return Err(node);
    }
    if already_expanded(expanded, (model.to_lowercase(), node.column.to_lowercase()), depth) {
        node.shown_above = true;
        node.next = None;
        return Err(node);
    }
    Ok(node)
}

/// True when `key` was expanded with at least `depth` left; records it otherwise.
fn already_expanded(expanded: &mut Expanded, key: (String, String), depth: Option<usize>) -> bool {
    let covers = |had: Option<usize>| match (had, depth) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(h), Some(d)) => h >= d,
    };
    match expanded.get(&key) {
        Some(had) if covers(*had) => true,
        _ => {
            expanded.insert(key, depth);
            false
        }
    }
}

/// A node of a lineage tree: a model's column, and the columns it reads (upstream) or that read
/// it (downstream).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LineageNode {
    /// The model, `schema.table`.
    pub model: String,
    /// The column, as the model declares it.
    pub column: String,
    /// The model's kind tag.
    pub kind: &'static str,
    /// False when something lineage cannot name may feed this column too (see
    /// [`ColumnLineage::certain`]).
    pub certain: bool,
    /// Upstream: the columns this one reads; downstream: the columns reading this one.
    #[serde(rename = "sources", skip_serializing_if = "Option::is_none")]
    pub next: Option<Vec<LineageNode>>,
    /// The tree was cut here by `--depth` (there is more).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// This column's own tree is shown earlier in the same answer and is not repeated here
    /// (diamond-shaped DAGs would otherwise double the tree at every level): no `sources` then.
    #[serde(rename = "shownAbove", skip_serializing_if = "std::ops::Not::not")]
    pub shown_above: bool,
}

/// The grammar the project's bodies are written in (its engine's).
pub fn grammar(project: &Project) -> Grammar {
    if crate::engine::dialect_for(&project.config).sqlparser_first() { Grammar::Embedded } else { Grammar::Postgres }
}

/// The declared columns of `model`'s parents, by logical name.
pub fn parent_columns(project: &Project, model: &Model) -> BTreeMap<String, Vec<String>> {
    model
        .parents()
        .into_iter()
        .filter_map(|p| project.dag.get(&p).map(|m| (p.to_string(), m.relation_columns().into_iter().map(|c| c.name).collect())))
        .collect()
}

/// One model's lineage (its parents' declared columns are all it needs).
pub fn model_lineage(project: &Project, model: &Model) -> ModelLineage {
    model_lineage_over(project, model, &parent_columns(project, model))
}

/// One model's lineage against the given columns of its parents (by logical name, as
/// [`parent_columns`] gives them): the plan's column impact reads a child against a parent's
/// old columns too, where a column the parent dropped or renamed is still there to be read.
pub fn model_lineage_over(project: &Project, model: &Model, parents: &BTreeMap<String, Vec<String>>) -> ModelLineage {
    let exposed: Vec<String> = model.relation_columns().into_iter().map(|c| c.name).collect();
    let managed: Vec<String> = model.kind.managed_columns().into_iter().map(|c| c.name).collect();
    let (query, unreadable) = match &model.body {
        None => (None, None),
        Some(body) => match lineage::column_lineage_in(grammar(project), &body.render(&CanonicalResolver), parents) {
            Ok(q) => (Some(q), None),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let columns = exposed
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let found = query.as_ref().and_then(|q| {
                let by_name = q.columns.iter().find(|c| c.column.as_deref().is_some_and(|c| c.eq_ignore_ascii_case(name)));
                // The contract makes the query's columns the declared ones, in order: a column
                // whose name the engine generates is matched by its place.
                by_name.or_else(|| (q.complete && q.columns.len() + managed.len() == exposed.len()).then(|| q.columns.get(i)).flatten())
            });
            match (found, &model.body) {
                (Some(c), _) => ColumnLineage { column: Some(name.clone()), sources: c.sources.clone(), certain: c.certain },
                // A source (external, seed) or a column efmesh manages (`valid_from`…): the
                // lineage starts here.
                (None, None) => ColumnLineage { column: Some(name.clone()), sources: Vec::new(), certain: true },
                (None, Some(_)) if managed.iter().any(|m| m == name) => ColumnLineage { column: Some(name.clone()), sources: Vec::new(), certain: true },
                (None, Some(_)) => ColumnLineage { column: Some(name.clone()), sources: Vec::new(), certain: false },
            }
        })
        .collect();
    ModelLineage { kind: model.kind.tag(), columns, query, unreadable }
}

impl ProjectLineage {
    /// The lineage of every model of `project`.
    pub fn of(project: &Project) -> Self {
        let mut out = ProjectLineage::default();
        for model in project.dag.models() {
            out.order.push(model.name.to_string());
            out.models.insert(model.name.to_string(), model_lineage(project, model));
            out.parents.insert(model.name.to_string(), model.parents().into_iter().map(|p| p.to_string()).collect());
        }
        out
    }

    /// One model's lineage.
    pub fn model(&self, name: &str) -> Option<&ModelLineage> {
        self.models.get(name)
    }

    /// Model names in topological order.
    pub fn order(&self) -> &[String] {
        &self.order
    }

    fn column(&self, model: &str, column: &str) -> Option<(&ModelLineage, &ColumnLineage)> {
        let m = self.models.get(model)?;
        let c = m.columns.iter().find(|c| c.column.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(column)))?;
        Some((m, c))
    }

    /// The tree of columns `model.column` reads, down to sources, `depth` levels at most; a
    /// column `expanded` already holds (shown earlier in the same answer) is not expanded again.
    /// `None` when the model has no such column.
    pub fn upstream(&self, model: &str, column: &str, depth: Option<usize>, expanded: &mut Expanded) -> Option<LineageNode> {
        let (m, c) = self.column(model, column)?;
        let mut node = match start_node(model, column, m, c, !c.sources.is_empty(), depth, expanded) {
            Ok(node) => node,
            Err(leaf) => return Some(leaf),
        };
        node.next = Some(
            c.sources
                .iter()
                .map(|s| {
                    self.upstream(&s.model, &s.column, depth.map(|d| d.saturating_sub(1)), expanded).unwrap_or_else(|| LineageNode {
                        model: s.model.clone(),
                        column: s.column.clone(),
                        kind: self.models.get(&s.model).map_or("unknown", |m| m.kind),
                        certain: false,
                        next: Some(Vec::new()),
                        truncated: false,
                        shown_above: false,
                    })
                })
                .collect(),
        );
        Some(node)
    }

    /// The tree of columns that read `model.column` (through their expressions), `depth`
    /// levels at most, each column expanded once per answer (`expanded`, as
    /// [`Self::upstream`]). `None` when the model has no such column.
    pub fn downstream(&self, model: &str, column: &str, depth: Option<usize>, expanded: &mut Expanded) -> Option<LineageNode> {
        let (m, c) = self.column(model, column)?;
        let readers = self.readers_of(model, c.column.as_deref().unwrap_or(column));
        let mut node = match start_node(model, column, m, c, !readers.is_empty(), depth, expanded) {
            Ok(node) => node,
            Err(leaf) => return Some(leaf),
        };
        node.next = Some(readers.iter().filter_map(|(rm, rc)| self.downstream(rm, rc, depth.map(|d| d.saturating_sub(1)), expanded)).collect());
        Some(node)
    }

    /// Models reading `model` that lineage cannot rule out as readers of `model.column` — an
    /// unreadable query, a read or output it cannot name ([`may_read`]) — and that neither take
    /// values from it nor are [`Self::filtered_by`] it, in topological order: they may read it.
    pub fn possibly_read_by(&self, model: &str, column: &str) -> Vec<String> {
        let wanted: BTreeSet<String> = [column.to_lowercase()].into();
        let named: BTreeSet<String> = self.readers_of(model, column).into_iter().map(|(m, _)| m).chain(self.filtered_by(model, column)).collect();
        self.order
            .iter()
            .filter(|name| self.parents.get(*name).is_some_and(|p| p.iter().any(|p| p == model)))
            .filter(|name| !named.contains(*name) && may_read(&self.models[*name], model, &wanted))
            .cloned()
            .collect()
    }

    /// The (model, column) pairs whose expression reads `model.column` directly, in
    /// topological order.
    fn readers_of(&self, model: &str, column: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for name in &self.order {
            let m = &self.models[name];
            for c in &m.columns {
                if c.sources.iter().any(|s| s.model == model && s.column.eq_ignore_ascii_case(column)) {
                    out.push((name.clone(), c.column.clone().unwrap_or_default()));
                }
            }
        }
        out
    }

    /// Models that read `model.column` anywhere (filters, joins, groupings included) but none
    /// of whose columns take values from it, in topological order. Only models whose every
    /// output column lineage knows (all listed, all certain): a column it cannot name (a table
    /// function's `unnest(a.x) AS t(u)`, `COLUMNS(…)`) may take values from the column it reads,
    /// so such a reader is one that may read it ([`Self::possibly_read_by`]), not a filter.
    pub fn filtered_by(&self, model: &str, column: &str) -> Vec<String> {
        self.order
            .iter()
            .filter(|name| {
                let m = &self.models[*name];
                let Some(q) = &m.query else { return false };
                let reads = q.reads.iter().any(|s| s.model == model && s.column.eq_ignore_ascii_case(column));
                let feeds = m.columns.iter().any(|c| c.sources.iter().any(|s| s.model == model && s.column.eq_ignore_ascii_case(column)));
                let known = q.complete && m.columns.iter().chain(&q.columns).all(|c| c.certain);
                reads && !feeds && known
            })
            .cloned()
            .collect()
    }
}

/// True when a model with lineage `l` may read one of `columns` (lower-case) of `parent`
/// ([`may_read`]), or has a `*` over `parent` reaching its output (a column added to or removed
/// from `parent` changes the model's columns). The plan's column impact reuses a child only
/// when this is false.
pub fn reads_any(l: &ModelLineage, parent: &str, columns: &BTreeSet<String>) -> bool {
    may_read(l, parent, columns) || l.query.as_ref().is_some_and(|q| q.whole.iter().any(|w| w == parent))
}

/// True when a model with lineage `l` may read one of `columns` (lower-case) of `parent`: a
/// read lineage names, or anything lineage cannot rule out — an unreadable query, a read or a
/// column it cannot name (a table function's output, `COLUMNS(…)`), an output it cannot list.
pub fn may_read(l: &ModelLineage, parent: &str, columns: &BTreeSet<String>) -> bool {
    let Some(q) = &l.query else { return true };
    if !q.reads_certain || !q.complete || l.columns.iter().any(|c| !c.certain) {
        return true;
    }
    q.reads.iter().any(|s| s.model == parent && columns.contains(&s.column.to_lowercase()))
}

/// `schema.table` or `schema.table.column`, split against the project's models.
///
/// # Errors
/// An unknown model (with a did-you-mean hint) or a malformed name.
pub fn split_target(project: &Project, target: &str) -> anyhow::Result<(ModelName, Option<String>)> {
    let parts: Vec<&str> = target.split('.').collect();
    let (model, column) = match parts.as_slice() {
        [_, _] => (target.to_string(), None),
        [s, t, c] => (format!("{s}.{t}"), Some((*c).to_string())),
        _ => anyhow::bail!("`{target}` is neither a model (`schema.table`) nor a column (`schema.table.column`)"),
    };
    let name = ModelName::parse(&model)?;
    if project.dag.get(&name).is_none() {
        let hint = project.dag.suggest(&model).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
        anyhow::bail!("unknown model `{model}`{hint}");
    }
    Ok((name, column))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::lineage::column_lineage_in;

    /// A project of the source `s.a (id, x, y)` and one model per `(name, sql)` reading it,
    /// each exposing its query's columns, in the order given.
    fn project(models: &[(&str, &str)]) -> ProjectLineage {
        let declared = ["id", "x", "y"];
        let parents = BTreeMap::from([("s.a".to_string(), declared.iter().map(|c| c.to_string()).collect::<Vec<_>>())]);
        let mut out = ProjectLineage::default();
        let columns = declared.iter().map(|c| ColumnLineage { column: Some(c.to_string()), sources: Vec::new(), certain: true }).collect();
        out.order.push("s.a".into());
        out.models.insert("s.a".into(), ModelLineage { kind: "full", columns, query: None, unreadable: None });
        out.parents.insert("s.a".into(), Vec::new());
        for (name, sql) in models {
            let q = column_lineage_in(Grammar::Embedded, sql, &parents).unwrap_or_else(|e| panic!("{e}\n{sql}"));
            out.order.push(name.to_string());
            out.models.insert(name.to_string(), ModelLineage { kind: "full", columns: q.columns.clone(), query: Some(q), unreadable: None });
            out.parents.insert(name.to_string(), vec!["s.a".into()]);
        }
        out
    }

    #[test]
    fn a_reader_with_an_output_column_lineage_cannot_name_may_read_what_it_reads_and_is_no_filter() {
        let l = project(&[
            ("t.f", "SELECT id FROM s.a WHERE x > 0"),
            ("t.u", "SELECT id, u FROM s.a AS a, unnest([a.x, a.y]) AS t(u)"),
            ("t.gs", "SELECT id, g FROM s.a AS a, generate_series(1, a.x) AS t(g)"),
            ("t.ex", "SELECT * EXCLUDE (x) FROM s.a"),
        ]);
        // `t.f` only filters by `x`; `t.u.u` and `t.gs.g` are uncertain and may take values
        // from what the table function reads.
        assert_eq!(l.filtered_by("s.a", "x"), ["t.f"]);
        assert_eq!(l.possibly_read_by("s.a", "x"), ["t.u", "t.gs"]);
        assert!(l.filtered_by("s.a", "y").is_empty());
        assert_eq!(l.possibly_read_by("s.a", "y"), ["t.u", "t.gs"]);
        // The plan's column impact never takes them for children that do not read it.
        let y = BTreeSet::from(["y".to_string()]);
        assert!(reads_any(&l.models["t.u"], "s.a", &y) && reads_any(&l.models["t.gs"], "s.a", &y));
        assert!(!reads_any(&l.models["t.f"], "s.a", &y), "`t.f` reads no `y`");
        // `t.ex` reads no `x`, which lineage can tell (its `*` over `s.a` counts for the plan
        // alone: a column added to `s.a` adds one to it).
        let x = BTreeSet::from(["x".to_string()]);
        assert!(!may_read(&l.models["t.ex"], "s.a", &x) && reads_any(&l.models["t.ex"], "s.a", &x));
    }

    #[test]
    fn a_qualified_exclude_names_the_parent_whose_column_is_served() {
        let parents = BTreeMap::from([
            ("s.a".to_string(), vec!["id".to_string(), "x".to_string(), "y".to_string()]),
            ("s.b".to_string(), vec!["id".to_string(), "x".to_string()]),
        ]);
        for sql in ["SELECT * EXCLUDE (a.x, b.id) FROM s.a AS a JOIN s.b AS b ON a.id = b.id", "SELECT * EXCLUDE (a.x) FROM s.a AS a JOIN s.b AS b USING (id)"]
        {
            let q = column_lineage_in(Grammar::Embedded, sql, &parents).unwrap_or_else(|e| panic!("{e}\n{sql}"));
            let x = q.columns.iter().find(|c| c.column.as_deref() == Some("x")).unwrap_or_else(|| panic!("{sql}: {q:?}"));
            let from: Vec<String> = x.sources.iter().map(|s| format!("{}.{}", s.model, s.column)).collect();
            assert_eq!((from, x.certain), (vec!["s.b.x".to_string()], true), "{sql}");
        }
    }
}
