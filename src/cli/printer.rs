//! Everything the CLI writes to stdout: human reports and the JSON envelope
//! (`{"apiVersion": 1, …}`, pretty-printed, one object per command).

use crate::core::interval::{Millis, to_iso};
use crate::plan::{Change, Plan};
use std::io::Write;

/// The JSON API version: bumps only on a breaking field change.
pub const API_VERSION: u32 = 1;

/// Writes reports to stdout.
pub struct Printer;

impl Printer {
    /// The process's stdout.
    pub fn stdout() -> Self {
        Printer
    }

    /// Writes text as is. A closed pipe is not an error.
    pub fn text(&self, s: &str) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other,
        }
    }

    /// Writes `payload` (an object) with `"apiVersion": 1` as its first key.
    pub fn json(&self, payload: serde_json::Value) -> std::io::Result<()> {
        let mut obj = serde_json::Map::new();
        obj.insert("apiVersion".into(), API_VERSION.into());
        match payload {
            serde_json::Value::Object(m) => obj.extend(m),
            other => {
                obj.insert("value".into(), other);
            }
        }
        let text = serde_json::to_string_pretty(&serde_json::Value::Object(obj)).map_err(std::io::Error::other)?;
        self.text(&format!("{text}\n"))
    }
}

fn day_or_instant(t: Millis) -> String {
    let iso = to_iso(t);
    if iso.ends_with("T00:00:00.000Z") { iso[..10].to_string() } else { iso.trim_end_matches(":00.000Z").to_string() }
}

/// The human plan: one line per model, marks `+` added, `~` changed, `-` removed, `·` unchanged.
pub fn plan_text(plan: &Plan, explain: bool) -> String {
    let mut s = String::new();
    let counts = plan.counts();
    let mut summary = counts.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ");
    // Repairs of what the engine lost are work too, whatever the models' categories say.
    let repairs = plan.actions.iter().filter(|a| a.repair.is_some()).count();
    if repairs > 0 {
        summary.push_str(&format!(", {repairs} to repair"));
    }
    s.push_str(&format!("plan for environment `{}` ({summary})\n", plan.env));
    if let Some(line) = new_environment_line(plan) {
        s.push_str(&line);
    }
    let width = plan.actions.iter().map(|a| a.name.to_string().len()).max().unwrap_or(0);
    let kwidth = plan.actions.iter().map(|a| a.kind.len()).max().unwrap_or(0);
    for a in &plan.actions {
        let mark = a.change.mark();
        let mut notes = Vec::new();
        if a.change != Change::Unchanged {
            notes.push(a.change.as_str().to_string());
        }
        if let Some(from) = a.reclassified_from {
            notes.push(format!("reclassified, was {}", from.as_str()));
        }
        if a.reused_from.is_some() {
            notes.push("physical table reused".into());
        }
        if let Some(r) = &a.repair {
            if !r.ducklake_files_missing.is_empty() {
                let n = r.ducklake_files_missing.len();
                notes.push(format!("{n} DuckLake data file{} missing: rebuild", if n == 1 { "" } else { "s" }));
            } else if r.physical_missing {
                notes.push("physical relation missing from the engine".into());
            }
            if let Some(root) = &r.created_under {
                notes.push(format!("created under another project root ({root}): re-create"));
            }
            if r.view_missing {
                notes.push("environment view missing: restore".into());
            }
            if r.view_stale {
                notes.push("environment view serves another version: restore".into());
            }
            if r.physical_stale {
                notes.push("physical view reads old parent versions: rebuild".into());
            }
            if r.lake_view_missing {
                notes.push("lake view missing: re-create over the lake's files".into());
            }
            // (Only forgotten intervals lost their files: said below.)
            if r.lake_files_missing && (!r.lost_files.is_empty() || r.forgotten.is_empty()) {
                notes.push(match r.lost_files.len() {
                    0 => "lake file missing: rebuild".to_string(),
                    n => format!("lake files of {n} done interval{} missing: recompute", if n == 1 { "" } else { "s" }),
                });
            }
            if r.lake_view_stale {
                let lost = r.listed_missing.len();
                if lost > 0 {
                    notes.push(format!("lake view lists {lost} file{} no longer in the lake: re-list", if lost == 1 { "" } else { "s" }));
                }
                match r.unlisted {
                    0 if lost > 0 => {}
                    0 => notes.push("lake view lists files its manifest dropped: re-list".to_string()),
                    n => notes.push(format!("lake view lacks the files of {n} done interval{}: re-list", if n == 1 { "" } else { "s" })),
                }
            }
            if !r.lake_view_lacks.is_empty() {
                notes.push(format!("{}: re-list", r.lacks_note()));
            }
            if !r.forgotten.is_empty() {
                notes.push(r.forgotten_note());
            }
        }
        if a.build {
            notes.push("build".into());
        }
        // (A keyed model's refresh is said by the plan's writes, `alsoWrites`.)
        if a.rebuild && !matches!(a.kind, "incremental_by_unique_key" | "incremental_by_partition" | "scd_type2") {
            notes.push(format!("rebuild: {}", a.rebuild_reason.as_deref().unwrap_or("an earlier apply or run stopped before rebuilding it")));
        }
        if a.register {
            notes.push("registered (embedded: nothing to build)".into());
        }
        notes.extend(plan.also_writes.iter().filter(|r| r.model == a.name).map(|r| r.note.clone()));
        if let Some(d) = &a.drops_kept {
            notes.push(d.note(&a.name));
        }
        if let Some(h) = &a.history {
            notes.push(match (h.fate, h.reset_accepted) {
                (crate::plan::HistoryFate::StartsOver, true) => "history starts over (--reset-history)".to_string(),
                (fate, _) => format!("history {}", fate.as_str()),
            });
        }
        if a.intervals > 0 {
            notes.push(format!("backfill {} interval{}", a.intervals, if a.intervals == 1 { "" } else { "s" }));
        }
        // `N <noun>s in [start, end)`.
        let span = |o: &crate::plan::OutsideBounds, noun: &str| {
            use crate::core::interval::to_iso;
            format!("{} {noun}{} in [{}, {})", o.intervals, if o.intervals == 1 { "" } else { "s" }, to_iso(o.range.start), to_iso(o.range.end))
        };
        if let Some(o) = &a.outside_bounds {
            notes.push(format!(
                "its table holds {} outside its `start`/`end` here (computed under wider bounds: an earlier edit, or another environment's): the view serves them",
                span(o, "done interval")
            ));
        }
        if let Some(o) = &a.undone_outside {
            notes.push(format!(
                "{} its old `start`/`end` held, now outside them, {} no done record (restated or failed and not recomputed since, or not yet run): rows its table holds there are served as they are, and no run here recomputes them",
                span(o, "interval"),
                if o.intervals == 1 { "has" } else { "have" }
            ));
        }
        if let Some(r) = &a.recompute {
            if r.reads_itself && r.because == [a.name.clone()] {
                notes.push(format!(
                    "{} of them done, recomputed: its query reads its own table (`@this`), and an earlier interval is computed here",
                    r.intervals
                ));
            } else if r.because == [a.name.clone()] {
                notes.push(format!("{} of them done, recomputed: another version of it (another query) wrote them into its table since", r.intervals));
            } else {
                let by = r.because.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
                notes.push(format!("{} of them done, recomputed: {by} rewrite{} them", r.intervals, if r.because.len() == 1 { "s" } else { "" }));
            }
        }
        s.push_str(&format!(
            "  {mark} {:width$}  {:kwidth$}  @{}{}\n",
            a.name.to_string(),
            a.kind,
            a.fingerprint.short(),
            if notes.is_empty() { String::new() } else { format!("  {}", notes.join(", ")) }
        ));
        for r in &a.backfill {
            s.push_str(&format!("      [{}, {})\n", day_or_instant(r.start), day_or_instant(r.end)));
        }
        if let Some(h) = &a.history {
            let cols = h.columns_text();
            s.push_str(&format!(
                "      history of @{} {}: {}{}\n",
                h.from.short(),
                h.fate.as_str(),
                h.reason,
                if cols.is_empty() { String::new() } else { format!(" (columns: {cols})") }
            ));
            if h.refused() {
                s.push_str(&format!("      {}\n", history_refused_text(&a.name.to_string(), h)));
            }
        }
        if let (true, Some(e)) = (explain, &a.explain) {
            s.push_str(&format!("      why: {}\n", e.reason));
            if !e.diverged.is_empty() {
                s.push_str(&format!("      diverged: {}\n", e.diverged.join(", ")));
            }
            if let Some(ci) = &e.column_impact {
                let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ") };
                s.push_str(&format!("      columns changed: {}\n", list(&ci.changed)));
                if !ci.removed.is_empty() || ci.moved {
                    let mut what = Vec::new();
                    if !ci.removed.is_empty() {
                        what.push(format!("removes {} (dropped or renamed)", list(&ci.removed)));
                    }
                    if ci.moved {
                        what.push("moves columns".to_string());
                    }
                    s.push_str(&format!(
                        "      column list: the change {}; a child whose query may see that (whole rows, every column, columns by position, a name that binds elsewhere once removed) reads the change\n",
                        what.join(" and ")
                    ));
                }
                if ci.read_by.is_empty() && ci.not_read_by.is_empty() {
                    s.push_str("      read by: no model's query\n");
                } else {
                    s.push_str(&format!("      read by: {}; not read by: {}\n", list(&ci.read_by), list(&ci.not_read_by)));
                }
            }
            if !e.cascade_from.is_empty() {
                s.push_str(&format!("      from: {}\n", e.cascade_from.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")));
            }
            if a.canonical_source == Some(crate::sql::canon::CanonSource::DuckDbJson) {
                s.push_str(
                    "      note: sqlparser could not parse the body (or read it as DuckDB does: it holds `==`); its canonical form is DuckDB's `json_serialize_sql`\n",
                );
            }
        }
    }
    if !plan.has_changes {
        s.push_str("  no changes\n");
    }
    if let Some(refused) = &plan.refused {
        s.push_str(&format!("apply refuses this plan: {}\n", refused.replace('\n', "\n  ")));
    }
    s
}

/// How many existing environments the line of a new environment's plan names.
const NAMED_ENVIRONMENTS: usize = 8;

/// The line under a plan's header when its environment is new while others exist (a misspelt
/// `prod` would otherwise show a whole plan with no sign of it): the existing ones (the first
/// [`NAMED_ENVIRONMENTS`]) and the one meant when the name is close to one. `None` for an
/// environment that exists, and for a project's first environment (nothing to mistake it for).
fn new_environment_line(plan: &Plan) -> Option<String> {
    if plan.new_environment != Some(true) || plan.existing_environments.is_empty() {
        return None;
    }
    let all = &plan.existing_environments;
    let mut existing = all.iter().take(NAMED_ENVIRONMENTS).map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", ");
    if all.len() > NAMED_ENVIRONMENTS {
        existing.push_str(&format!(" and {} more", all.len() - NAMED_ENVIRONMENTS));
    }
    let meant = plan.did_you_mean.as_ref().map(|e| format!("; did you mean `{e}`?")).unwrap_or_default();
    Some(format!("`{}` is a new environment: applying this plan creates it (existing: {existing}{meant})\n", plan.env))
}

/// The line under a history `apply` would refuse to start over: only the ways forward it would
/// accept, one sentence whatever their number (`--reset-history` is always one).
fn history_refused_text(model: &str, h: &crate::plan::History) -> String {
    let mut ways = Vec::new();
    match h.rename_candidates().as_ref().map(|(dropped, added)| (dropped.as_slice(), added.as_slice())) {
        None => {}
        Some(([old], [new])) => ways.push(format!("carry it over by declaring `renamed = {{ {old} = \"{new}\" }}` in the kind")),
        Some(_) => ways.push("carry it over by declaring `renamed = { old = \"new\" }` in the kind".to_string()),
    }
    if !h.upstream_drops_kept.is_empty() {
        ways.push(format!("keep the rows kept upstream (and this table) with `--forward-only {}`", h.upstream_drops_kept.join(",")));
    }
    if h.forward_only_ok {
        ways.push(format!("keep the table with `--forward-only {model}`"));
    }
    ways.push(format!("start it over with `--reset-history {model}`"));
    let last = ways.pop().unwrap_or_default();
    if ways.is_empty() { format!("apply refuses this: {last}") } else { format!("apply refuses this: {} or {last}", ways.join(", ")) }
}

/// The apply report's audit lines: warn violations one by one, then a count (empty without
/// audits).
pub fn audits_text(report: &crate::apply::audit::AuditReport) -> String {
    if report.0.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    for r in report.0.iter().filter(|r| r.violations > 0) {
        s.push_str(&format!("  ⚠ {}\n", r.describe().replace('\n', "\n  ")));
    }
    let warned = report.0.iter().filter(|r| r.violations > 0).count();
    let runs: usize = report.0.iter().map(|r| r.runs).sum();
    s.push_str(&format!("audits: {} checked ({runs} runs), {} passed, {warned} warned\n", report.0.len(), report.0.len() - warned));
    s
}

#[cfg(test)]
mod tests {
    use crate::plan::{History, HistoryFate};

    fn refused(rename_ok: bool, dropped: &[&str], added: &[&str], forward_only_ok: bool) -> History {
        History {
            fate: HistoryFate::StartsOver,
            from: String::from("a").into(),
            dropped: dropped.iter().map(|c| c.to_string()).collect(),
            added: added.iter().map(|c| c.to_string()).collect(),
            renamed: Default::default(),
            retyped: Vec::new(),
            reason: String::new(),
            reset_accepted: false,
            from_physical: String::new(),
            copied: None,
            rename_ok,
            forward_only_ok,
            upstream_drops_kept: Vec::new(),
        }
    }

    /// The ways forward under a refused history make one sentence for every combination (with
    /// `--reset-history` alone it read "apply refuses this: or `--reset-history m.h` to start
    /// over").
    #[test]
    fn a_refused_history_names_its_ways_forward_in_one_sentence_whatever_their_number() {
        for (h, want) in [
            (refused(false, &[], &[], false), "apply refuses this: start it over with `--reset-history m.h`"),
            (refused(false, &[], &["b"], true), "apply refuses this: keep the table with `--forward-only m.h` or start it over with `--reset-history m.h`"),
            (
                refused(true, &["a"], &["b"], false),
                "apply refuses this: carry it over by declaring `renamed = { a = \"b\" }` in the kind or start it over with `--reset-history m.h`",
            ),
            (
                refused(true, &["a", "c"], &["b"], true),
                "apply refuses this: carry it over by declaring `renamed = { old = \"new\" }` in the kind, keep the table with `--forward-only m.h` or start it over with `--reset-history m.h`",
            ),
            // `renamed` is offered only when some column was dropped and some added: nothing to
            // rename otherwise (a retyped column, a table built anew upstream).
            (refused(true, &[], &[], false), "apply refuses this: start it over with `--reset-history m.h`"),
            (refused(true, &["a"], &[], false), "apply refuses this: start it over with `--reset-history m.h`"),
            (refused(true, &[], &["b"], true), "apply refuses this: keep the table with `--forward-only m.h` or start it over with `--reset-history m.h`"),
        ] {
            assert_eq!(super::history_refused_text("m.h", &h), want);
        }
        // A dropped column `renamed` names already is not offered again.
        let mut h = refused(true, &["a", "c"], &["b"], false);
        h.renamed = [("a".to_string(), "x".to_string())].into_iter().collect();
        assert_eq!(
            super::history_refused_text("m.h", &h),
            "apply refuses this: carry it over by declaring `renamed = { c = \"b\" }` in the kind or start it over with `--reset-history m.h`"
        );
        h.dropped = vec!["a".into()];
        assert_eq!(super::history_refused_text("m.h", &h), "apply refuses this: start it over with `--reset-history m.h`");
        let mut h = refused(false, &[], &[], true);
        h.upstream_drops_kept = vec!["m.base".into()];
        assert_eq!(
            super::history_refused_text("m.h", &h),
            "apply refuses this: keep the rows kept upstream (and this table) with `--forward-only m.base`, keep the table with `--forward-only m.h` or start it over with `--reset-history m.h`"
        );
    }

    /// A plan with no action, of environment `env`, marked new or not against `known`.
    fn plan_of(env: &str, known: &[&str]) -> crate::plan::Plan {
        let mut plan = crate::plan::Plan { env: env.into(), ..crate::plan::Plan::default() };
        plan.mark_new_environment(known.iter().map(|e| e.to_string()).collect());
        plan
    }

    /// A plan of a new environment says so under its header when other environments exist,
    /// naming them and the one meant when the name is close; not for an existing environment,
    /// nor for a project's first one.
    #[test]
    fn a_new_environments_plan_says_so_when_others_exist() {
        let line = |env: &str, known: &[&str]| super::plan_text(&plan_of(env, known), false).lines().nth(1).unwrap_or_default().to_string();
        assert_eq!(line("prd", &["dev", "prod"]), "`prd` is a new environment: applying this plan creates it (existing: `dev`, `prod`; did you mean `prod`?)");
        assert_eq!(line("staging", &["dev", "prod"]), "`staging` is a new environment: applying this plan creates it (existing: `dev`, `prod`)");
        assert_eq!(line("prod", &["dev", "prod"]), "  no changes");
        assert_eq!(line("dev", &[]), "  no changes");
        let many: Vec<String> = (0..10).map(|i| format!("pr{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(line("qa", &many).ends_with("(existing: `pr0`, `pr1`, `pr2`, `pr3`, `pr4`, `pr5`, `pr6`, `pr7` and 2 more)"), "{}", line("qa", &many));
        let (new, old) = (plan_of("prd", &["prod"]), plan_of("prod", &["prod"]));
        assert_eq!((new.new_environment, new.did_you_mean.as_deref()), (Some(true), Some("prod")));
        assert_eq!((old.new_environment, old.did_you_mean.as_deref(), old.existing_environments.len()), (Some(false), None, 0));
    }
}
