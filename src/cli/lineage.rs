//! `efmesh lineage <model[.column]> [--depth N] [--downstream] [--json]`: column-level lineage
//! from the project alone ([`crate::plan::lineage`]): where each column takes its values from,
//! down to externals and seeds, or (`--downstream`) which columns read it.

use super::printer::Printer;
use super::{Exit, UsageError, load};
use crate::core::error::did_you_mean;
use crate::plan::lineage::{LineageNode, ProjectLineage, split_target};
use anyhow::{Result, anyhow};
use serde_json::json;

/// Prints the lineage of `target` (`schema.table` or `schema.table.column`).
pub(super) fn run(config: &std::path::Path, target: &str, depth: Option<usize>, downstream: bool, json: bool, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    // A target naming nothing (no such model, a malformed name) is a usage error, as elsewhere.
    let (name, column) = split_target(&project, target).map_err(|e| anyhow!(UsageError(format!("{e:#}"))))?;
    let model = name.to_string();
    let lineage = ProjectLineage::of(&project);
    let ml = lineage.model(&model).ok_or_else(|| anyhow!(UsageError(format!("unknown model `{model}`"))))?;
    let names: Vec<String> = ml.columns.iter().filter_map(|c| c.column.clone()).collect();
    let columns: Vec<String> = match &column {
        None => names.clone(),
        Some(c) => match names.iter().find(|n| n.eq_ignore_ascii_case(c)) {
            Some(n) => vec![n.clone()],
            None => {
                let hint = did_you_mean(c, names.iter().map(String::as_str)).map(|s| format!("\n  hint: did you mean `{model}.{s}`?")).unwrap_or_default();
                return Err(anyhow!(UsageError(format!("model `{model}` has no column `{c}` (columns: {}){hint}", names.join(", ")))));
            }
        },
    };
    // Each column's tree is expanded once per answer: a diamond-shaped DAG would double it at
    // every level (2^40 lines for 40 of them).
    let mut expanded = crate::plan::lineage::Expanded::new();
    let trees: Vec<LineageNode> = columns
        .iter()
        .filter_map(|c| if downstream { lineage.downstream(&model, c, depth, &mut expanded) } else { lineage.upstream(&model, c, depth, &mut expanded) })
        .collect();
    let filtered: Vec<(String, Vec<String>)> =
        if downstream { columns.iter().map(|c| (c.clone(), lineage.filtered_by(&model, c))).collect() } else { Vec::new() };
    let possible: Vec<(String, Vec<String>)> =
        if downstream { columns.iter().map(|c| (c.clone(), lineage.possibly_read_by(&model, c))).collect() } else { Vec::new() };
    if json {
        let mut v = json!({
            "model": model,
            "column": column.as_ref().and(columns.first()),
            "direction": if downstream { "downstream" } else { "upstream" },
            "lineage": trees,
        });
        if downstream {
            v["alsoReadBy"] = filtered.iter().map(|(c, ms)| json!({"column": c, "models": ms})).collect();
            v["possiblyReadBy"] = possible.iter().map(|(c, ms)| json!({"column": c, "models": ms})).collect();
        }
        if let Some(why) = &ml.unreadable {
            v["unreadable"] = json!(why);
        }
        // The model's properties; `columnDescriptions` only for the columns shown.
        if let (Some(m), Some(o)) = (project.dag.get(&name), v.as_object_mut()) {
            let mut props = serde_json::Map::new();
            super::graph::insert_properties(m, &mut props);
            if let Some(serde_json::Value::Object(d)) = props.get_mut("columnDescriptions") {
                d.retain(|c, _| columns.iter().any(|s| s.eq_ignore_ascii_case(c)));
                if d.is_empty() {
                    props.remove("columnDescriptions");
                }
            }
            o.extend(props);
        }
        out.json(v)?;
        return Ok(Exit::Success);
    }
    let mut s = String::new();
    if let Some(why) = &ml.unreadable {
        s.push_str(&format!(
            "note: the query of `{model}` ({}) could not be read, so its columns' lineage is unknown: {why}\n",
            project.dag.get(&name).map(|m| m.location.to_string()).unwrap_or_default()
        ));
    }
    let arrow = if downstream { "→" } else { "←" };
    let mut uncertain = false;
    for tree in &trees {
        write_tree(&mut s, tree, 0, arrow, &mut uncertain);
        if let Some((_, models)) = filtered.iter().find(|(c, _)| *c == tree.column)
            && !models.is_empty()
        {
            s.push_str(&format!("  also read by (filters, joins, groupings): {}\n", models.join(", ")));
        }
        if let Some((_, models)) = possible.iter().find(|(c, _)| *c == tree.column)
            && !models.is_empty()
        {
            s.push_str(&format!("  may be read by (their lineage cannot tell): {}\n", models.join(", ")));
        }
    }
    if uncertain {
        s.push_str("? uncertain: a relation whose columns are not known (an unknown table, a table function), `COLUMNS(…)` or a name that does not resolve may feed this column too\n");
    }
    out.text(&s)?;
    Ok(Exit::Success)
}

fn write_tree(s: &mut String, node: &LineageNode, depth: usize, arrow: &str, uncertain: &mut bool) {
    let lead = if depth == 0 { String::new() } else { format!("{}{arrow} ", "  ".repeat(depth)) };
    let mark = if node.certain { "" } else { " ?" };
    *uncertain |= !node.certain;
    let above = if node.shown_above { "  (its lineage is shown above)" } else { "" };
    s.push_str(&format!("{lead}{}.{}  ({}){mark}{above}\n", node.model, node.column, node.kind));
    for next in node.next.iter().flatten() {
        write_tree(s, next, depth + 1, arrow, uncertain);
    }
    if node.truncated {
        s.push_str(&format!("{}{arrow} … (--depth reached)\n", "  ".repeat(depth + 1)));
    }
}
