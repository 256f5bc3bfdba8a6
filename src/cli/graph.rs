//! `efmesh graph [--json] [--html FILE] [--select EXPR] [--env E]`: the project's DAG as text
//! (models in topological order, by layer), as JSON (nodes and edges), or as one self-contained
//! HTML page (`html`). With `--env`, each model's state against that environment, taken from the
//! very plan `efmesh plan E` computes ([`crate::session::plan_checked`]); with `--select`, only
//! the models a selection expression ([`crate::core::select`]) picks.

mod html;
mod layout;

use super::printer::Printer;
use super::{Exit, load, open_state, plan_checked};
use crate::core::interval::Millis;
use crate::core::select::Selection;
use crate::core::{Kind, Model, ModelName};
use crate::plan::{self, Action, Change, Plan};
use crate::project::Project;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What `efmesh graph` was asked.
pub(super) struct Request<'a> {
    /// Print the graph as JSON.
    pub json: bool,
    /// Write the HTML page there.
    pub html: Option<&'a Path>,
    /// Only the models this expression selects.
    pub select: Option<&'a str>,
    /// Compare with this environment.
    pub env: Option<&'a str>,
    /// The instant the plan is computed at (`--now`).
    pub now: Millis,
}

/// Prints (or writes) the graph.
pub(super) fn run(config: &Path, req: Request<'_>, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    let selected = match req.select {
        Some(expr) => Some(Selection::parse(expr)?.eval(&project.dag)?),
        None => None,
    };
    let env = match req.env {
        Some(name) => {
            crate::core::name::validate_env(name)?;
            let state = open_state(&project, false)?;
            let plan = plan_checked(&project, &*state, name, req.now, &plan::Options::default())?;
            let served = state.env_pointers(name)?;
            let known = state.environments()?.iter().any(|e| e == name);
            // One the janitor dropped is said so, not "never applied" (as `status` and `diff` say it).
            let dropped_at = if known { None } else { super::envlife::dropped_at(&*state, name)? };
            Some(EnvView { plan, served, known, dropped_at })
        }
        None => None,
    };
    let graph = Graph::of(&project, selected.as_ref(), env.as_ref(), req.select);
    if let Some(path) = req.html {
        let page = html::page(&project, &graph);
        fs_err::write(path, page).with_context(|| format!("cannot write the graph page to {}", path.display()))?;
        if !req.json {
            out.text(&format!("DAG written: {}\n", path.display()))?;
        }
    }
    if req.json {
        let mut v = graph.json();
        if let (Some(path), Value::Object(m)) = (req.html, &mut v) {
            m.insert("html".into(), path.display().to_string().into());
        }
        out.json(v)?;
    } else if req.html.is_none() {
        out.text(&graph.text())?;
    }
    Ok(Exit::Success)
}

/// The environment the graph is compared with.
pub(super) struct EnvView {
    /// What `efmesh plan <env>` says.
    plan: Plan,
    /// Model → the fingerprint the environment serves.
    served: BTreeMap<String, String>,
    /// False when the state store does not hold the environment (every model is then added):
    /// never applied, or dropped by the janitor.
    known: bool,
    /// When the janitor dropped it (an environment the store does not hold).
    dropped_at: Option<String>,
}

/// One model of the graph.
pub(super) struct GraphNode<'a> {
    /// The model.
    model: &'a Model,
    /// Its line in the environment's plan.
    action: Option<&'a Action>,
    /// The version the environment serves.
    served: Option<&'a str>,
}

impl GraphNode<'_> {
    /// Its state against the environment, in the JSON report and the page alike: `state`,
    /// `category`, `fingerprint`, `served` (nothing without an environment).
    fn insert_state(&self, o: &mut serde_json::Map<String, Value>) {
        if let Some(a) = self.action {
            o.insert("state".into(), state_of(a.change).into());
            o.insert("category".into(), a.change.as_str().into());
            o.insert("fingerprint".into(), a.fingerprint.as_str().into());
            o.insert("served".into(), self.served.into());
        }
    }
}

/// The models shown, their edges and layout.
pub(super) struct Graph<'a> {
    /// In topological order.
    nodes: Vec<GraphNode<'a>>,
    /// `(parent, child)` indexes into `nodes`.
    edges: Vec<(usize, usize)>,
    layout: layout::Layout,
    /// Models in the whole project.
    total: usize,
    /// The selection expression.
    select: Option<&'a str>,
    /// The environment's name, plan and pointers.
    env: Option<(&'a str, &'a EnvView)>,
}

/// What a plan category says of a model, in the words of `graph`: `added`, `changed` (its own
/// definition changed: the category says how), `indirect` (a parent changed), `unchanged` or
/// `removed`.
fn state_of(change: Change) -> &'static str {
    match change {
        Change::Added => "added",
        Change::Unchanged => "unchanged",
        Change::Removed => "removed",
        Change::Indirect => "indirect",
        // Breaking, non-breaking, forward-only, metadata: the model's own definition changed.
        _ => "changed",
    }
}

impl<'a> Graph<'a> {
    fn of(project: &'a Project, selected: Option<&BTreeSet<ModelName>>, env: Option<&'a EnvView>, select: Option<&'a str>) -> Graph<'a> {
        let models: Vec<&Model> = project.dag.models().filter(|m| selected.is_none_or(|s| s.contains(&m.name))).collect();
        let index: BTreeMap<&ModelName, usize> = models.iter().enumerate().map(|(i, m)| (&m.name, i)).collect();
        let mut edges = Vec::new();
        for (c, m) in models.iter().enumerate() {
            for p in m.parents() {
                if let Some(&pi) = index.get(&p) {
                    edges.push((pi, c));
                }
            }
        }
        // Names in 13px monospace are about 7.8px a character, the kind line in 11px about 6.3;
        // the card stays between bounds (longer text is cut with an ellipsis, the full name in
        // the tooltip and the panel), with room for the state mark against an environment.
        let mark = if env.is_some() { 22.0 } else { 0.0 };
        let card_w = models
            .iter()
            .map(|m| (m.name.to_string().chars().count() as f64 * 7.8 + 36.0 + mark).max(html::kind_label(m).chars().count() as f64 * 6.3 + 36.0))
            .fold(190.0, f64::max)
            .min(360.0);
        let layout = layout::layered(models.len(), &edges, card_w);
        let env_name = env.map(|e| e.plan.env.as_str());
        let nodes = models
            .into_iter()
            .map(|model| GraphNode {
                model,
                action: env.and_then(|e| e.plan.action(&model.name)),
                served: env.and_then(|e| e.served.get(&model.name.to_string()).map(String::as_str)),
            })
            .collect();
        Graph { nodes, edges, layout, total: project.dag.len(), select, env: env_name.zip(env) }
    }

    /// Models the environment serves and the project no longer has (only without `--select`:
    /// a selection names models of the project).
    fn removed(&self) -> Vec<&'a Action> {
        match (self.env, self.select) {
            (Some((_, e)), None) => e.plan.actions.iter().filter(|a| a.change == Change::Removed).collect(),
            _ => Vec::new(),
        }
    }

    /// Each node's parents among the shown nodes.
    fn parents(&self) -> Vec<Vec<usize>> {
        let mut parents = vec![Vec::new(); self.nodes.len()];
        for &(p, c) in &self.edges {
            parents[c].push(p);
        }
        parents
    }

    /// The first line of the text report.
    fn summary(&self) -> String {
        let n = self.nodes.len();
        let mut s = match self.select {
            Some(expr) => format!("{n} of {} models selected by `{expr}`", self.total),
            None => format!("{n} model{}", if n == 1 { "" } else { "s" }),
        };
        let layers = self.layout.layers();
        s.push_str(&format!(" in {layers} layer{}", if layers == 1 { "" } else { "s" }));
        if let Some((name, e)) = self.env {
            let mut counts: BTreeMap<Change, usize> = BTreeMap::new();
            for a in self.nodes.iter().filter_map(|n| n.action).chain(self.removed()) {
                *counts.entry(a.change).or_default() += 1;
            }
            let list = counts.iter().map(|(c, k)| format!("{k} {}", c.as_str())).collect::<Vec<_>>().join(", ");
            let never = match (e.known, &e.dropped_at) {
                (true, _) => String::new(),
                (false, Some(at)) => format!(" ({}: the next apply creates it again)", super::envlife::dropped_phrase(at)),
                (false, None) => " (never applied)".to_string(),
            };
            s.push_str(&format!(", against environment `{name}`{never}: {list}"));
        }
        s
    }

    fn text(&self) -> String {
        let mut s = format!("{}\n", self.summary());
        let parents = self.parents();
        let width = self.nodes.iter().map(|n| n.model.name.to_string().len()).max().unwrap_or(0);
        let kwidth = self.nodes.iter().map(|n| n.model.kind.tag().len()).max().unwrap_or(0);
        let cwidth = self.nodes.iter().filter_map(|n| n.action).map(|a| a.change.as_str().len()).max().unwrap_or(0);
        let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); self.layout.layers()];
        for (i, &l) in self.layout.layer.iter().enumerate() {
            by_layer[l].push(i);
        }
        // Within a layer, the order the picture draws them (top to bottom).
        for nodes in &mut by_layer {
            nodes.sort_by_key(|&i| self.layout.row[i]);
        }
        for (l, nodes) in by_layer.iter().enumerate() {
            s.push_str(&format!("layer {l}\n"));
            for &i in nodes {
                let n = &self.nodes[i];
                let name = n.model.name.to_string();
                let state = match n.action {
                    Some(a) => format!("{} {:<cwidth$}  ", a.change.mark(), a.change.as_str()),
                    None => String::new(),
                };
                let mut line = format!("  {state}{name:<width$}  {:<kwidth$}  {}", n.model.kind.tag(), n.model.location);
                if !parents[i].is_empty() {
                    let names: Vec<String> = parents[i].iter().map(|&p| self.nodes[p].model.name.to_string()).collect();
                    line.push_str(&format!("  ← {}", names.join(", ")));
                }
                s.push_str(line.trim_end());
                s.push('\n');
            }
        }
        let removed = self.removed();
        if let Some((name, _)) = self.env.filter(|_| !removed.is_empty()) {
            s.push_str(&format!("removed (served by `{name}`, no longer in the project)\n"));
            for a in removed {
                s.push_str(&format!("  {} {}  @{}\n", a.change.mark(), a.name, a.fingerprint.as_str().chars().take(12).collect::<String>()));
            }
        }
        s
    }

    fn json(&self) -> Value {
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let m = n.model;
                let mut o = serde_json::Map::new();
                o.insert("name".into(), m.name.to_string().into());
                o.insert("kind".into(), m.kind.tag().into());
                o.insert("location".into(), m.location.to_string().into());
                o.insert("file".into(), m.location.file.display().to_string().into());
                o.insert("line".into(), m.location.line.into());
                o.insert("layer".into(), self.layout.layer[i].into());
                if let Some(d) = &m.description {
                    o.insert("description".into(), d.clone().into());
                }
                insert_properties(m, &mut o);
                n.insert_state(&mut o);
                Value::Object(o)
            })
            .collect();
        let edges: Vec<Value> =
            self.edges.iter().map(|&(p, c)| json!({"from": self.nodes[p].model.name.to_string(), "to": self.nodes[c].model.name.to_string()})).collect();
        let mut v = json!({
            "select": self.select,
            "env": self.env.map(|(n, _)| n),
            "models": self.nodes.len(),
            "layers": self.layout.layers(),
            "nodes": nodes,
            "edges": edges,
        });
        if let (Some(_), None, Value::Object(o)) = (self.env, self.select, &mut v) {
            let removed: Vec<Value> =
                self.removed().iter().map(|a| json!({"name": a.name.to_string(), "state": "removed", "served": a.fingerprint.as_str()})).collect();
            o.insert("removed".into(), removed.into());
        }
        // Whether the state store holds the environment, and when the janitor dropped it (`null`
        // otherwise): against one it does not hold, every model is `added`.
        if let (Some((_, e)), Value::Object(o)) = (self.env, &mut v) {
            o.insert("envExists".into(), e.known.into());
            o.insert("envDroppedAt".into(), e.dropped_at.clone().into());
        }
        v
    }
}

/// A model's properties, as every `--json` output describing a model shows them: `"owner"`,
/// `"tags"` and `"columnDescriptions"` (`{column: text}`), each only when the model has it.
pub(super) fn insert_properties(m: &Model, o: &mut serde_json::Map<String, Value>) {
    if let Some(owner) = &m.owner {
        o.insert("owner".into(), owner.clone().into());
    }
    if !m.tags.is_empty() {
        o.insert("tags".into(), m.tags.clone().into());
    }
    if !m.column_descriptions.is_empty() {
        let d: serde_json::Map<String, Value> = m.column_descriptions.iter().map(|(c, t)| (c.clone(), Value::String(t.clone()))).collect();
        o.insert("columnDescriptions".into(), Value::Object(d));
    }
}

/// A model's SQL as `efmesh render` prints it without `--env`: the canonical body (logical
/// names, `$start`/`$end`), an external's source, a seed's file.
fn canonical_sql(project: &Project, m: &Model) -> String {
    let sql = match (&m.body, &m.kind) {
        (Some(body), _) => body.render(&crate::core::fragment::CanonicalResolver),
        (None, Kind::External(ext)) => format!("SELECT * FROM {}", crate::apply::resolve::external_source(project, m, ext)),
        (None, Kind::Seed(s)) => format!("-- seed: rows of `{}` ({}, blake3 {})", s.path, s.format.as_str(), s.content_hash),
        (None, _) => String::new(),
    };
    sql.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_categories_map_to_graph_states() {
        assert_eq!(state_of(Change::Added), "added");
        assert_eq!(state_of(Change::Breaking), "changed");
        assert_eq!(state_of(Change::NonBreaking), "changed");
        assert_eq!(state_of(Change::ForwardOnly), "changed");
        assert_eq!(state_of(Change::Metadata), "changed");
        assert_eq!(state_of(Change::Indirect), "indirect");
        assert_eq!(state_of(Change::Unchanged), "unchanged");
        assert_eq!(state_of(Change::Removed), "removed");
    }
}
