//! `efmesh preview <env> [MODEL…]`: what models' queries return against what an environment
//! serves for their parents, next to what it serves for them now (sqlmesh's `evaluate`, plus the
//! comparison). Read-only; see `docs/preview.md`.

use super::printer::Printer;
use super::{Exit, UsageError, load, open_state, plan_checked};
use crate::core::ModelName;
use crate::core::interval::Millis;
use crate::plan::Change;
use crate::preview::{self, Comparison, Preview};
use anyhow::{Result, anyhow};
use serde_json::json;

/// Runs the command: exit 1 when a model's preview failed (its error is in the report and on stderr).
///
/// # Errors
/// Load errors, an invalid environment, an unknown model, an unreadable state store.
pub(super) fn run(config: &std::path::Path, env: &str, models: &[String], rows: usize, json: bool, now: Millis, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    crate::core::name::validate_env(env)?;
    let mut names = Vec::new();
    for m in models {
        let name = ModelName::parse(m)?;
        if project.dag.get(&name).is_none() {
            let hint = project.dag.suggest(m).map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default();
            return Err(anyhow!(UsageError(format!("unknown model `{m}`{hint}"))));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let state = open_state(&project, false)?;
    if names.is_empty() {
        let plan = plan_checked(&project, &*state, env, now, &crate::plan::Options::default())?;
        names = plan
            .actions
            .iter()
            .filter(|a| a.change != Change::Removed && (a.build || !a.backfill.is_empty() || !matches!(a.change, Change::Unchanged | Change::Metadata)))
            .map(|a| a.name.clone())
            .collect();
    }
    let previews = preview::preview(&project, &*state, env, &names, &preview::Options { rows, now })?;
    if json {
        out.json(json!({ "env": env, "previews": previews }))?;
    } else {
        out.text(&report_text(env, &previews))?;
    }
    let failed: Vec<&Preview> = previews.iter().filter(|p| p.error.is_some()).collect();
    if failed.is_empty() {
        return Ok(Exit::Success);
    }
    for p in &failed {
        crate::ewriteln!("error: {}", p.error.as_deref().unwrap_or_default());
    }
    crate::ewriteln!("error: {} of {} preview{} failed", failed.len(), previews.len(), if previews.len() == 1 { "" } else { "s" });
    Ok(Exit::Error)
}

/// The text report: per model, its name (and window), a table of its rows and the comparison
/// line, or its error (shared with `watch`).
pub(crate) fn report_text(env: &str, previews: &[Preview]) -> String {
    if previews.is_empty() {
        return format!("nothing to preview: the plan for `{env}` builds and changes no model\n");
    }
    let mut s = String::new();
    for p in previews {
        let window = p.window.as_ref().map(|(a, b)| format!(" [{a}, {b})")).unwrap_or_default();
        s.push_str(&format!("{}{window}\n", p.model));
        if let Some(e) = &p.error {
            s.push_str(&format!("  ✗ {e}\n\n"));
            continue;
        }
        s.push_str(&table(p));
        s.push_str(&format!("  {}\n\n", comparison_text(env, p.comparison.as_ref())));
    }
    s
}

/// The preview's rows as an aligned table, header first; NULL shown as `NULL`.
pub(crate) fn table(p: &Preview) -> String {
    let header: Vec<&str> = p.columns.iter().map(|(n, _)| n.as_str()).collect();
    let cells: Vec<Vec<String>> = p.rows.iter().map(|r| r.iter().map(|v| cell(v.as_deref())).collect()).collect();
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| cells.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).chain([h.chars().count()]).max().unwrap_or(0))
        .collect();
    let line = |vals: Vec<&str>| {
        let padded: Vec<String> = vals.iter().zip(&widths).map(|(v, w)| format!("{v:<w$}", w = *w)).collect();
        format!("  {}\n", padded.join(" │ ").trim_end())
    };
    let mut s = line(header.clone());
    s.push_str(&format!("  {}\n", widths.iter().map(|w| "─".repeat(*w)).collect::<Vec<_>>().join("─┼─")));
    for r in &cells {
        s.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    if p.rows.is_empty() {
        s.push_str("  (no rows)\n");
    }
    s
}

/// Widest value shown in a text table cell (JSON has every value whole).
const CELL_WIDTH: usize = 40;

/// A value as a table cell: `NULL`, newlines shown as `⏎`, cut at [`CELL_WIDTH`] characters with `…`.
fn cell(v: Option<&str>) -> String {
    let v = v.unwrap_or("NULL").replace('\n', "⏎");
    if v.chars().count() > CELL_WIDTH { format!("{}…", v.chars().take(CELL_WIDTH - 1).collect::<String>()) } else { v }
}

/// One line: the comparison with what `env` serves now.
pub(crate) fn comparison_text(env: &str, c: Option<&Comparison>) -> String {
    let Some(c) = c else { return format!("not served by `{env}` yet: nothing to compare") };
    let mut parts = Vec::new();
    if !c.added.is_empty() {
        parts.push(format!("added {}", c.added.join(", ")));
    }
    if !c.removed.is_empty() {
        parts.push(format!("removed {}", c.removed.join(", ")));
    }
    if !c.retyped.is_empty() {
        let r: Vec<String> = c.retyped.iter().map(|(n, old, new)| format!("{n} {old} → {new}")).collect();
        parts.push(format!("retyped {}", r.join(", ")));
    }
    if parts.is_empty() {
        parts.push("same columns".into());
    }
    let scope = match c.scope {
        "window" => "in the window",
        "open" => "open versions",
        _ => "whole relation",
    };
    format!("vs `{env}`: {}; rows {} → {} ({scope})", parts.join("; "), c.rows_now, c.rows_new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_in_the_table_and_nulls_named() {
        let long = "x".repeat(100);
        assert_eq!(cell(Some(&long)).chars().count(), CELL_WIDTH);
        assert!(cell(Some(&long)).ends_with('…'));
        assert_eq!(cell(None), "NULL");
        assert_eq!(cell(Some("a\nb")), "a⏎b");
    }
}
