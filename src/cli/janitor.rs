//! `efmesh janitor [--ttl DAYS] [--dry-run] [--json] [--wait DUR]`: drops the physical storage
//! no environment reaches any more and that is older than the ttl, and the orphans the state
//! store no longer knows ([`crate::janitor`]), under the global `janitor` lock. Only the
//! configuration is needed (a project that does not load can still be cleaned). Exit 1 when a
//! drop failed (it stays claimed: the next janitor tries again).

use super::Exit;
use super::lock::{LockHeld, command_line};
use super::printer::Printer;
use crate::core::interval::Millis;
use crate::engine::{Engine, EngineError};
use crate::janitor::{ExpiredEnv, KeptOrphan, KeptShared, Options, Report, Victim, collect};
use crate::ownership::Storage;
use crate::state::lease::{LeaseGuard, Refused};
use anyhow::{Result, anyhow, bail};
use std::time::Duration;

/// The janitor's global lock.
pub const JANITOR_LEASE: &str = "janitor";

/// The janitor's request.
pub(super) struct Request {
    /// `--ttl` in days.
    pub ttl_days: f64,
    pub dry_run: bool,
    /// `--adopt`: take the storage over first.
    pub adopt: bool,
    pub json: bool,
    /// `--wait` for the janitor lock.
    pub wait: Duration,
    pub now: Millis,
}

/// Runs the janitor for the project at `config`.
pub(super) fn run(config: &std::path::Path, req: Request, out: &Printer) -> Result<Exit> {
    if !req.ttl_days.is_finite() || req.ttl_days < 0.0 {
        bail!("--ttl {} must be a number of days, 0 or more", req.ttl_days);
    }
    let config = crate::config::Config::load(config)?;
    let Some(state) = crate::state::open_existing(&config)? else {
        // Without the store every relation would look like an orphan: refuse rather than guess.
        bail!(
            "no state store at `{}`: the janitor needs it to know what is reachable; nothing was done\n  hint: check `[state]` in the configuration",
            crate::state::location(&config)
        );
    };
    let state = &*state;
    let engine_config = config.clone();
    let dry_run = req.dry_run;
    let mut open = move || -> Result<Option<Box<dyn Engine>>, EngineError> {
        if engine_config.engine_file().is_some_and(|path| !path.exists()) {
            return Ok(None);
        }
        // A dry run reads the engine only.
        let access = if dry_run { crate::engine::Access::ReadOnly } else { crate::engine::Access::ReadWrite };
        Ok(Some(crate::engine::open(&engine_config, access)?))
    };
    // `--ttl=-0` passes the check above (-0 is not below 0) and would print as `ttl -0 days`.
    let ttl_days = req.ttl_days.abs();
    let options = Options { ttl_days, dry_run: req.dry_run, now: req.now, adopt: req.adopt, env_ttl: config.environments.ttl };
    let report = if req.dry_run {
        collect(&config, state, &mut open, &options)?
    } else {
        let guard = match LeaseGuard::acquire(state, JANITOR_LEASE, &command_line(), req.wait) {
            Ok(g) => g,
            Err(Refused::Held(r)) => {
                return Err(anyhow!(LockHeld(format!(
                    "the janitor is locked: `{JANITOR_LEASE}` is held by {}; nothing was done\n  hint: another janitor is running; retry when it is done, or wait for it with `--wait 10m`",
                    r.holder
                ))));
            }
            Err(Refused::State(e)) => return Err(e.into()),
        };
        let result = collect(&config, state, &mut open, &options);
        guard.release(state);
        result?
    };
    if req.json {
        out.json(serde_json::to_value(&report)?)?;
    } else {
        out.text(&text(&report))?;
    }
    for f in &report.failed {
        crate::ewriteln!("error: janitor: cannot drop {} (model `{}`): {}", f.physical, f.model, f.error);
    }
    Ok(if report.failed.is_empty() { Exit::Success } else { Exit::Error })
}

fn line(v: &Victim) -> String {
    let mut s = format!("  {} @{}", v.model, v.fingerprint);
    if !v.kind.is_empty() {
        s.push_str(&format!(" ({})", v.kind));
    }
    if !v.physical.is_empty() {
        s.push_str(&format!(" {}", v.physical));
    } else {
        s.push_str(" (no storage: rows only)");
    }
    if let Some(a) = v.age_days {
        s.push_str(&format!(", {a:.2} days old"));
    }
    if v.versions.len() > 1 {
        s.push_str(&format!(", shared by {}", v.versions.join(", ")));
    }
    if let Some(d) = &v.lake_dir {
        s.push_str(&format!(", lake directory {d}"));
    }
    if let Some(f) = &v.first_seen {
        s.push_str(&format!(", first seen {f}"));
    }
    if v.left_over {
        s.push_str(", claimed by an earlier janitor");
    }
    if v.already_absent {
        s.push_str(", already gone from the engine (nothing to drop: its rows in the state store went)");
    }
    s.push('\n');
    s
}

fn kept_line(k: &KeptOrphan) -> String {
    let why = match k.reason.as_str() {
        "young" => "seen for less than the ttl".to_string(),
        "unmarked" => "its storage has no owner marker (`efmesh janitor --adopt` takes it over)".to_string(),
        "read" => format!("view(s) {} read it", k.read_by.join(", ")),
        _ => format!("its storage is also owned by state store(s) {}", k.owners.join(", ")),
    };
    let seen = if k.first_seen.is_empty() { String::new() } else { format!(", first seen {}", k.first_seen) };
    format!("  {} @{} {}{seen}: {why}\n", k.model, k.fingerprint, k.physical)
}

fn shared_line(k: &KeptShared) -> String {
    let forgot = if k.forgotten { " (this store already forgot the version: the relation is its orphan now)" } else { "" };
    let storage = match k.storage {
        Storage::Engine => "the engine database",
        Storage::Lake => "the lake root",
        Storage::Ducklake => "the DuckLake catalog",
    };
    format!("  {} @{} {}: state store(s) {} of {storage} may serve it{forgot}\n", k.model, k.fingerprint, k.physical, k.owners.join(", "))
}

fn env_line(e: &ExpiredEnv, dry_run: bool) -> String {
    let why = if e.reason == "invalidated" { "invalidated".to_string() } else { format!("not applied since {}", e.last_applied_at.as_deref().unwrap_or("?")) };
    let what = format!("{} view(s){}", e.views.len(), if e.schemas.is_empty() { String::new() } else { format!(", schema(s) {}", e.schemas.join(", ")) });
    match (e.kept.as_deref(), dry_run) {
        (Some(kept), _) => {
            let because = match kept {
                "locked" => "an apply or run of it holds its lock",
                "promoting" => "a promotion of it was interrupted (the next command reading it undoes it)",
                "renewed" => "it was applied or invalidated again meanwhile",
                _ => "the engine refused to drop its views (see below)",
            };
            format!("janitor kept the expired environment `{}` (expired at {}, {why}) this time: {because}\n", e.env, e.expired_at)
        }
        (None, true) => format!("janitor would drop the expired environment `{}` (expired at {}, {why}): {what}\n", e.env, e.expired_at),
        (None, false) => format!("janitor dropped the expired environment `{}` (expired at {}, {why}): {what}\n", e.env, e.expired_at),
    }
}

/// The report for people.
fn text(r: &Report) -> String {
    let verb = if r.dry_run { "would drop" } else { "dropped" };
    let mut s = String::new();
    if r.adopted {
        s.push_str(&format!("janitor: this state store ({}) is now the only owner of the project's storage\n", r.store_id));
    }
    for e in &r.environments {
        s.push_str(&env_line(e, r.dry_run));
    }
    if r.dropped.is_empty() && r.orphans.is_empty() && r.failed.is_empty() && r.kept_orphans.is_empty() && r.kept_shared.is_empty() {
        // After an environment's lines, what is left is only that no storage was unreachable.
        let what = if r.environments.is_empty() { "nothing to collect" } else { "no storage past its ttl to collect" };
        s.push_str(&format!("janitor: {what} (ttl {} days)\n", r.ttl_days));
        s.push_str(&ducklake_line(r));
        return s;
    }
    if !r.dropped.is_empty() {
        // Those the engine no longer had were not dropped: said apart.
        let absent = r.dropped.iter().filter(|v| v.already_absent).count();
        let forget = if r.dry_run { "would forget" } else { "forgot" };
        let head = match (r.dropped.len() - absent, absent) {
            (_, 0) => format!("janitor {verb} {} unreachable version storage(s)", r.dropped.len()),
            (0, a) => format!("janitor {forget} {a} unreachable version(s) whose storage was already gone from the engine"),
            (d, a) => format!("janitor {verb} {d} unreachable version storage(s) and {forget} {a} whose storage was already gone from the engine"),
        };
        s.push_str(&format!("{head} (ttl {} days):\n", r.ttl_days));
        s.extend(r.dropped.iter().map(line));
    }
    if !r.orphans.is_empty() {
        s.push_str(&format!("janitor {verb} {} orphan(s) the state store does not know:\n", r.orphans.len()));
        s.extend(r.orphans.iter().map(line));
    }
    if !r.kept_orphans.is_empty() {
        s.push_str(&format!("janitor kept {} orphan(s):\n", r.kept_orphans.len()));
        s.extend(r.kept_orphans.iter().map(kept_line));
    }
    if !r.kept_shared.is_empty() {
        s.push_str(&format!("janitor kept {} unreachable version storage(s) another state store may serve:\n", r.kept_shared.len()));
        s.extend(r.kept_shared.iter().map(shared_line));
    }
    s.push_str(&ducklake_line(r));
    if !r.failed.is_empty() {
        s.push_str(&format!("janitor could not drop {} (still claimed; the next janitor tries again):\n", r.failed.len()));
        for f in &r.failed {
            s.push_str(&format!("  {} ({}): {}\n", f.physical, f.model, f.error));
        }
    }
    s
}

/// The DuckLake catalog's line: the files removed and the snapshots expired (or that would be),
/// when files were (snapshots alone are in the JSON report only),
/// and, when DuckLake tables were dropped (or would be) under a ttl above 0, that their files a
/// younger snapshot references stay until a later janitor. Empty when there is nothing to say.
fn ducklake_line(r: &Report) -> String {
    let (Some(files), Some(snapshots)) = (r.ducklake_files_removed, r.ducklake_snapshots_expired) else { return String::new() };
    let before = r.ducklake_expired_before.as_deref().unwrap_or("?");
    let dropped_tables = r.dropped.iter().chain(&r.orphans).any(|v| !v.already_absent && crate::apply::ducklake::table_of(&v.physical).is_some());
    let mut s = String::new();
    if files > 0 {
        let (remove, expire) = if r.dry_run { ("would remove", "would expire") } else { ("removed", "expired") };
        s.push_str(&format!(
            "janitor {remove} {files} DuckLake file(s) (data and delete files) no kept snapshot references ({expire} {snapshots} DuckLake snapshot(s) taken before {before}, ttl {} days)\n",
            r.ttl_days
        ));
    }
    if dropped_tables && r.ttl_days > 0.0 {
        s.push_str(&format!(
            "janitor: a file of a dropped DuckLake table that a DuckLake snapshot taken since {before} references stays; a later janitor removes it once that snapshot is older than the ttl ({} days; `--ttl 0` now)\n",
            r.ttl_days
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_report_says_how_many_ducklake_files_went() {
        let mut r = Report { ttl_days: 0.0, ..Report::default() };
        assert_eq!(text(&r), "janitor: nothing to collect (ttl 0 days)\n", "no DuckLake catalog: no DuckLake line");
        r.ducklake_files_removed = Some(3);
        r.ducklake_snapshots_expired = Some(5);
        r.ducklake_expired_before = Some("2026-01-10T00:00:00.000Z".into());
        assert!(
            text(&r).contains(
                "janitor removed 3 DuckLake file(s) (data and delete files) no kept snapshot references (expired 5 DuckLake snapshot(s) taken before 2026-01-10T00:00:00.000Z"
            ),
            "{}",
            text(&r)
        );
        r.dry_run = true;
        assert!(text(&r).contains("janitor would remove 3 DuckLake file(s) (data and delete files)"), "{}", text(&r));
        r.ducklake_files_removed = Some(0);
        assert!(!text(&r).contains("DuckLake file(s) (data and delete files)"), "{}", text(&r));
    }
}
