//! `efmesh graph --html FILE`: one self-contained page (no network: no `<link>`, no `src=`, no
//! `@import`; the CSS and the script inlined). The DAG is drawn here as SVG from the layout
//! ([`super::layout`]), so the page shows the graph even with scripts off; the script adds the
//! search, hover and zoom, and the side panel a click opens (SQL, schema, kind, file:line, the
//! environment's version, column lineage), from the data embedded as JSON in a
//! `<script type="application/json">`. A fragment `#select=<model>` clicks that model's node on
//! load (a real `click` event, the handler a user's click runs), so a link can point at a model.

use super::layout::CARD_H;
use super::{Graph, canonical_sql, state_of};
use crate::core::Model;
use crate::project::Project;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The colour of each kind (the original's palette), and the order of the legend.
const KIND_COLOURS: [(&str, &str); 9] = [
    ("external", "#8899aa"),
    ("seed", "#b08968"),
    ("view", "#5fa8d3"),
    ("embedded", "#9d8cd6"),
    ("full", "#4f772d"),
    ("incremental_by_time_range", "#e07a5f"),
    ("incremental_by_unique_key", "#d4a373"),
    ("incremental_by_partition", "#c9a227"),
    ("scd_type2", "#c05299"),
];

fn kind_colour(tag: &str) -> &'static str {
    KIND_COLOURS.iter().find(|(k, _)| *k == tag).map_or("#666666", |(_, c)| c)
}

/// Text made safe inside HTML elements and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON safe inside a `<script>` element: no `<` (so no `</script>` nor `<!--`), `>` or `&`
/// outside `\u` escapes, which JSON strings read back as the same characters.
pub fn script_json(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026")
}

/// `s` cut to `max` characters, with an ellipsis when cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_string() } else { format!("{}…", s.chars().take(max.saturating_sub(1)).collect::<String>()) }
}

/// The whole page.
pub(super) fn page(project: &Project, g: &Graph<'_>) -> String {
    let project_name = project.config.root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "project".into());
    let data = data(project, g, &project_name);
    let mut s = String::with_capacity(64 * 1024);
    s.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"color-scheme\" content=\"light dark\">\n");
    let _ = writeln!(s, "<title>efmesh — model DAG · {}</title>", escape(&project_name));
    let _ = writeln!(s, "<style>\n{CSS}</style>\n</head>\n<body>");
    s.push_str("<header class=\"top\">\n<div class=\"brand\"><svg class=\"logo\" viewBox=\"0 0 20 20\" aria-hidden=\"true\"><circle cx=\"4\" cy=\"10\" r=\"3\"/><circle cx=\"16\" cy=\"4\" r=\"3\"/><circle cx=\"16\" cy=\"16\" r=\"3\"/><path d=\"M6.5 9 L13.5 5 M6.5 11 L13.5 15\"/></svg>");
    let _ = writeln!(s, "<h1>efmesh — model DAG</h1><span class=\"sub\">{}</span></div>", escape(&format!("{project_name} · {}", g.summary())));
    s.push_str("<div class=\"tools\"><label class=\"search\"><input id=\"search\" type=\"search\" placeholder=\"Search models  /\" autocomplete=\"off\" spellcheck=\"false\" aria-label=\"Search models\"><span id=\"search-count\"></span></label>");
    s.push_str("<div class=\"zoom\" role=\"group\" aria-label=\"Zoom\"><button id=\"zoom-out\" title=\"Zoom out\">−</button><button id=\"zoom-fit\" title=\"Fit to window\">fit</button><button id=\"zoom-in\" title=\"Zoom in\">+</button></div></div>\n");
    s.push_str(&legend(g));
    let removed = g.removed();
    if let Some((env, _)) = g.env.filter(|_| !removed.is_empty()) {
        let names: Vec<String> = removed.iter().map(|a| format!("<code>{}</code>", escape(&a.name.to_string()))).collect();
        let _ = writeln!(s, "<p class=\"removed-note\">removed from the project, still served by <code>{}</code>: {}</p>", escape(env), names.join(", "));
    }
    s.push_str("</header>\n<main>\n<div id=\"canvas\" class=\"canvas\">\n");
    s.push_str(&svg(g));
    s.push_str("</div>\n<aside id=\"panel\" class=\"panel\" aria-live=\"polite\" hidden><button id=\"panel-close\" class=\"close\" title=\"Close (Esc)\" aria-label=\"Close\">×</button><div id=\"panel-body\"></div></aside>\n</main>\n");
    let _ = writeln!(s, "<script type=\"application/json\" id=\"efmesh-data\">{}</script>", script_json(&data));
    let _ = writeln!(s, "<script>\n{JS}</script>\n</body>\n</html>");
    s
}

/// The legend: kinds present (with counts), and the states against the environment.
fn legend(g: &Graph<'_>) -> String {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &g.nodes {
        *kinds.entry(n.model.kind.tag()).or_default() += 1;
    }
    let mut s = String::from("<ul class=\"legend\" id=\"legend\">");
    for (k, c) in KIND_COLOURS.iter().filter(|(k, _)| kinds.contains_key(k)) {
        let _ = write!(
            s,
            "<li data-kind=\"{k}\"><span class=\"swatch\" style=\"background:{c}\"></span>{}<span class=\"n\">{}</span></li>",
            k.replace('_', " "),
            kinds[k]
        );
    }
    if g.env.is_some() {
        let mut states: BTreeMap<crate::plan::Change, usize> = BTreeMap::new();
        for a in g.nodes.iter().filter_map(|n| n.action).chain(g.removed()) {
            *states.entry(a.change).or_default() += 1;
        }
        for (c, k) in states {
            let _ = write!(
                s,
                "<li class=\"state st-{}\" data-category=\"{}\"><span class=\"mark\">{}</span>{}<span class=\"n\">{k}</span></li>",
                state_of(c),
                c.as_str(),
                c.mark(),
                c.as_str()
            );
        }
    }
    s.push_str("</ul>\n");
    s
}

/// The DAG as SVG: edges first (under the cards), then one group per model.
fn svg(g: &Graph<'_>) -> String {
    let l = &g.layout;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg id=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w:.0} {h:.0}\" width=\"{w:.0}\" height=\"{h:.0}\" data-width=\"{w:.0}\" data-height=\"{h:.0}\" role=\"img\" aria-label=\"model DAG\">",
        w = l.width.max(1.0),
        h = l.height.max(1.0)
    );
    s.push_str("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,1 L9,5 L0,9 z\"/></marker></defs>\n<g class=\"edges\">\n");
    for &(p, c) in &g.edges {
        let _ = writeln!(
            s,
            "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"{}\" marker-end=\"url(#arrow)\"/>",
            escape(&g.nodes[p].model.name.to_string()),
            escape(&g.nodes[c].model.name.to_string()),
            l.edge_path(p, c)
        );
    }
    s.push_str("</g>\n<g class=\"nodes\">\n");
    for (i, n) in g.nodes.iter().enumerate() {
        let m = n.model;
        let name = m.name.to_string();
        let tag = m.kind.tag();
        let state = n.action.map(|a| state_of(a.change));
        let class = state.map(|st| format!(" st-{st}")).unwrap_or_default();
        let tip = match &m.description {
            Some(d) => format!("{name} — {d}"),
            None => name.clone(),
        };
        // Room for the name: the card less the stripe and padding, and the state mark.
        let room = l.card_w - 30.0 - if n.action.is_some() { 22.0 } else { 0.0 };
        let _ = write!(
            s,
            "<g class=\"node{class}\" data-name=\"{}\" data-kind=\"{tag}\" transform=\"translate({:.1},{:.1})\" tabindex=\"0\" role=\"button\" aria-label=\"{}\"><title>{}</title>",
            escape(&name),
            l.x[i],
            l.y[i],
            escape(&format!("{name} ({tag})")),
            escape(&tip)
        );
        let _ = write!(
            s,
            "<rect class=\"card\" width=\"{w:.0}\" height=\"{CARD_H:.0}\" rx=\"8\"/><rect class=\"stripe\" width=\"6\" height=\"{CARD_H:.0}\" rx=\"3\" fill=\"{}\"/><text class=\"name\" x=\"18\" y=\"22\">{}</text><text class=\"meta\" x=\"18\" y=\"40\">{}</text>",
            kind_colour(tag),
            escape(&cut(&name, (room / 7.8) as usize)),
            escape(&kind_label(m)),
            w = l.card_w
        );
        if let Some(a) = n.action.filter(|a| a.change != crate::plan::Change::Unchanged) {
            let _ = write!(
                s,
                "<g class=\"mark\" transform=\"translate({:.0},16)\"><title>{}</title><circle r=\"9\"/><text y=\"4\">{}</text></g>",
                l.card_w - 16.0,
                escape(a.change.as_str()),
                escape(&a.change.mark().to_string())
            );
        }
        s.push_str("</g>\n");
    }
    s.push_str("</g>\n</svg>\n");
    s
}

/// The second line of a card: the kind, and what shapes it (a time-range model's column and
/// grain, a key, a seed's file, a target).
pub(super) fn kind_label(m: &Model) -> String {
    use crate::core::Kind;
    let mut s = m.kind.tag().replace('_', " ");
    match &m.kind {
        Kind::IncrementalByTimeRange(t) => {
            let grain = match t.grain {
                crate::core::Grain::FiveMinute => "every 5 minutes",
                crate::core::Grain::QuarterHour => "every 15 minutes",
                crate::core::Grain::Hour => "hourly",
                crate::core::Grain::Day => "daily",
                crate::core::Grain::Week => "weekly",
                crate::core::Grain::Month => "monthly",
            };
            s = format!("time range · {} · {grain}", t.time_column);
        }
        Kind::IncrementalByUniqueKey(k) => s = format!("unique key · {}", k.key.join(", ")),
        Kind::ScdType2(k) => s = format!("scd type 2 · {}", k.key.join(", ")),
        Kind::IncrementalByPartition(k) => s = format!("partition · {}", k.partitioned_by.join(", ")),
        Kind::Seed(seed) => s = format!("seed · {}", seed.path),
        _ => {}
    }
    if m.target != crate::core::Target::Table {
        s.push_str(&format!(" · {}", m.target.as_str()));
    }
    cut(&s, 40)
}

/// The data the panel reads: every shown model's facts and SQL.
fn data(project: &Project, g: &Graph<'_>, project_name: &str) -> Value {
    let nodes: Vec<Value> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let m = n.model;
            let mut o = serde_json::Map::new();
            o.insert("name".into(), m.name.to_string().into());
            o.insert("kind".into(), m.kind.tag().into());
            o.insert("kindLabel".into(), kind_label(m).into());
            o.insert("colour".into(), kind_colour(m.kind.tag()).into());
            o.insert("file".into(), m.location.file.display().to_string().into());
            o.insert("line".into(), m.location.line.into());
            o.insert("layer".into(), g.layout.layer[i].into());
            o.insert("x".into(), json!(g.layout.x[i]));
            o.insert("y".into(), json!(g.layout.y[i]));
            o.insert("description".into(), m.description.clone().into());
            o.insert("grain".into(), m.grain.clone().into());
            o.insert("owner".into(), m.owner.clone().into());
            o.insert("tags".into(), m.tags.clone().into());
            o.insert(
                "columns".into(),
                m.relation_columns()
                    .iter()
                    .map(|c| json!({"name": c.name, "type": c.ty, "description": m.column_description(&c.name)}))
                    .collect::<Vec<_>>()
                    .into(),
            );
            o.insert("parents".into(), m.parents().iter().map(ToString::to_string).collect::<Vec<_>>().into());
            o.insert("children".into(), project.dag.children(&m.name).map(ToString::to_string).collect::<Vec<_>>().into());
            o.insert("sql".into(), canonical_sql(project, m).into());
            let (lineage, note) = lineage_of(project, m);
            o.insert("lineage".into(), lineage);
            o.insert("lineageNote".into(), note.into());
            n.insert_state(&mut o);
            if let Some(e) = n.action.and_then(|a| a.explain.as_ref()) {
                o.insert("reason".into(), e.reason.clone().into());
            }
            Value::Object(o)
        })
        .collect();
    json!({
        "project": project_name,
        "env": g.env.map(|(n, _)| n),
        "envKnown": g.env.map(|(_, e)| e.known),
        "envDroppedAt": g.env.and_then(|(_, e)| e.dropped_at.clone()),
        "select": g.select,
        "total": g.total,
        "cardWidth": g.layout.card_w,
        "nodes": nodes,
        "removed": g.removed().iter().map(|a| json!({"name": a.name.to_string(), "served": a.fingerprint.as_str()})).collect::<Vec<_>>(),
    })
}

/// Each exposed column of `m` and the parents' columns it reads ([`crate::plan::lineage`], what
/// `efmesh lineage` prints one level deep), with a note where the list is not the whole story;
/// and a note on the whole model when its query could not be read.
fn lineage_of(project: &Project, m: &Model) -> (Value, Option<String>) {
    let lineage = crate::plan::lineage::model_lineage(project, m);
    let managed: Vec<String> = m.kind.managed_columns().into_iter().map(|c| c.name).collect();
    let columns = lineage
        .columns
        .iter()
        .map(|c| {
            let name = c.column.clone().unwrap_or_default();
            let note = match (m.body.is_some(), c.sources.is_empty(), c.certain) {
                (false, _, _) => Some(format!("a source: its values enter the project here ({})", m.kind.tag())),
                (true, true, true) if managed.contains(&name) => Some("managed by efmesh".to_string()),
                (true, true, true) => Some("no parent column: a constant or a row count".to_string()),
                (true, true, false) => Some("not known (a relation or expression lineage cannot follow)".to_string()),
                (true, false, false) => Some("and maybe more".to_string()),
                (true, false, true) => None,
            };
            json!({
                "column": name,
                "sources": c.sources.iter().map(|s| json!({"model": s.model, "column": s.column})).collect::<Vec<_>>(),
                "certain": c.certain,
                "note": note,
            })
        })
        .collect::<Vec<_>>();
    (columns.into(), lineage.unreadable.map(|e| format!("the query could not be read for lineage: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_data_cannot_break_out_of_the_page() {
        assert_eq!(escape("<b a=\"x\">'&'</b>"), "&lt;b a=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/b&gt;");
        let v = json!({"sql": "SELECT '</script><!--' AS x, 1 > 0 && true"});
        let s = script_json(&v);
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&'), "{s}");
        assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v);
        assert_eq!(cut("analytics.patients", 9), "analytic…");
        assert_eq!(cut("s.a", 9), "s.a");
    }

    #[test]
    fn the_inlined_script_and_style_load_nothing() {
        // Inlined as is: nothing may close the element early or reach the network.
        for (what, text) in [("page.js", JS), ("page.css", CSS)] {
            for banned in ["</", "<link", "src=", "@import", "url(http", "//cdn", "fetch(", "XMLHttpRequest"] {
                assert!(!text.contains(banned), "{what} contains `{banned}`");
            }
        }
    }
}
