//! `efmesh status <env> [--json] [--check]`: what an environment serves and how healthy it is —
//! the last plan applied and by whom (the apply journal), per time-range model the newest done
//! interval and the lag behind now (by grain), failed intervals, the last run ticks and the lock
//! holder, per `full`/unique-key/partition/SCD type 2 model on a `cron` the tick it was last
//! refreshed for and whether a refresh is due, the `full`/`view` rebuilds and the
//! unique-key/partition/SCD type 2 refreshes an interrupted apply or run left pending and the `full`
//! versions whose parents' data changed since they were built (stale rebuilds; not those left to
//! `prod`'s rebuilds outside `prod`, listed as not rebuilt here, `NotRefreshed`). `--check`
//! exits 1 when failed intervals exist, the newest tick errored, or the engine lacks a relation
//! the environment serves (as the plan's integrity check finds it, and, for models whose project
//! version differs from the served one, as [`crate::plan::integrity::served_missing`] finds the
//! served version's relations, [`crate::plan::integrity::served_lake_files_missing`] its local
//! lake files and [`crate::apply::ducklake::lost_served_versions`] its DuckLake table and its files: what the
//! state store says is served, whatever the working tree holds), or the state store never held
//! the environment (no pointers, no journal: a typo such as `prd`, whose every `run` exits 2) or
//! the janitor dropped it (no pointers, the drop the journal's newest row: it serves nothing
//! until an apply creates it again, every `run` exits 2), or a forward-only change of another
//! environment took over the table of a time-range version it serves that lacks intervals there
//! (every `run` of it is refused: [`crate::plan::generations::taken_over_by`]);
//! lag, a due refresh, `lock-held` and `blocked` are healthy (exit 0). The report is printed
//! either way. Lag and refreshes are judged by the schedule the environment serves (the `cron`,
//! grain, `start` and `end` its metadata records: [`Served`]), not the working tree's; a model
//! whose served schedule cannot be read is listed as not judged. What the engine check finds is
//! judged only when read while no promotion of the environment moved its views
//! ([`steady_engine_check`]); another process's promotion under way is reported as such
//! (`promotionInProgress`), never as damage, and an environment whose first promotion is under
//! way is being created, not absent.

use super::printer::Printer;
use super::{Exit, load, open_state};
use crate::core::interval::{Millis, to_iso};
use crate::core::{Kind, ModelName};
use crate::state::lease::{host_name, is_stale, writer_lease};
use crate::state::{STATE_VERSION, Tick};
use anyhow::Result;
use serde_json::json;

/// How many ticks the report lists.
const TICKS: usize = 5;

/// One model's lag and ledger health.
struct Lag {
    model: String,
    grain: &'static str,
    done_up_to: Option<Millis>,
    /// Due grain intervals (ended by the model's last cron tick, or by now without a cron)
    /// after the newest done one: the model is late when it is above 0.
    behind: i64,
    /// The cron the environment serves for the model, if it has one.
    cron: Option<String>,
    /// When the next interval becomes due: the first cron tick after now that has an interval
    /// to hand over (without a cron: the end of the current grain interval).
    next_due: Option<Millis>,
    /// Intervals recorded failed.
    failed: usize,
    /// Intervals from the model's start to its newest done one that are not done (restated,
    /// or failed): the next `run` recomputes them although the model is caught up. Done
    /// intervals outside the model's `start`/`end` (either moved since) never make up for them.
    gaps: i64,
    /// Of the `behind` intervals, those held back by a signal (the model's own, or one
    /// upstream's): the model is `waiting` on them, not late.
    waiting: usize,
    /// Why they wait: `signal`, or the waiting model upstream.
    waiting_on: Option<String>,
    /// Of the intervals before the newest done one that are not done, those held back by a
    /// signal (its own or one upstream's): not counted in `gaps`.
    gaps_waiting: usize,
    /// Outside `prod`: the environment that writes the table this version is on (`prod`, else
    /// the one serving the oldest version there), when its version reads other parent tables,
    /// so this environment computes nothing there (`plan::WriterHolds::All`): its `behind`
    /// intervals are that environment's to compute.
    left_to: Option<String>,
    /// Outside `prod`: a newer version with another query took this version's table over (a
    /// forward-only change, [`crate::plan::generations::taken_over_by`]); `left_to` then names
    /// its environment, and the lag counts what either version has done there (what the view
    /// shows).
    taken_over: Option<TakenOver>,
}

/// The newer version of another query that took a time-range version's table over.
struct TakenOver {
    /// The environment serving it.
    env: String,
    /// Its fingerprint.
    fingerprint: String,
    /// The due intervals this environment's own version lacks (before or after its newest done
    /// one): the ones its `run` would compute there, and is refused.
    missing: i64,
}

/// Outside `prod`: a unique-key, partition or SCD type 2 model whose table another environment
/// writes through another version over other parent tables (`plan::WriterHolds::Refreshes`):
/// never refreshed here, it serves that environment's rows (an SCD history reconciled from that
/// environment's parents), which `plan`, `apply` and `run` say too ("not refreshed here"). Or a
/// `full` model on the table `prod` serves under audits this environment lacks (or other pre/post
/// statements, `plan::WriterHolds::Rebuilds`): never rebuilt here, it serves `prod`'s last build
/// ("not rebuilt here"). Shown, not a problem: as a time-range model's `leftTo`.
struct NotRefreshed {
    model: String,
    kind: &'static str,
    /// The environment that refreshes the table.
    writer: String,
    /// The instant up to which the writer's last refresh holds rows
    /// ([`crate::state::refreshed_until`]); `None` when none is recorded.
    rows_up_to: Option<Millis>,
    /// Left to the writer because of the settings it serves the model under (audits this
    /// environment lacks, other statements), not because of other parent tables.
    settings: bool,
    /// A `full` model's: why it would be rebuilt here (its last build read other data than its
    /// parents hold now), which the writer's next run or apply does.
    behind: Option<String>,
}

/// A `full`, unique-key, partition or SCD type 2 model on a `cron`: what `run` last refreshed
/// it for.
struct Refresh {
    model: String,
    kind: &'static str,
    cron: String,
    /// The last tick it was refreshed for (the newest done end of its ledger).
    refreshed_for: Option<Millis>,
    /// The cron's last tick at or before now, when it is newer than `refreshed_for`: the next
    /// run refreshes the model.
    due: Option<Millis>,
    /// The cron's next tick after now.
    next_due: Option<Millis>,
    /// When its last refresh read rows complete only up to an earlier instant (a time-range
    /// model above it lacked intervals from there on): that instant
    /// ([`crate::state::refreshed_until`]).
    rows_up_to: Option<Millis>,
}

/// A relation (or lake file) of a version the environment serves that the engine (or its
/// storage) lacks, where the project defines another version of its model (or none): the plan
/// does not check it ([`crate::plan::integrity::served_missing`],
/// [`crate::plan::integrity::served_lake_files_missing`],
/// [`crate::apply::ducklake::lost_served_versions`]).
struct LostServed {
    /// The model, `schema.table`.
    model: String,
    /// The served version.
    fingerprint: String,
    /// The relation, qualified: the version's physical relation, the environment's view or the
    /// version's DuckLake table; or the path of a missing lake file or DuckLake data file.
    relation: String,
    /// What the engine lacks of it.
    lack: crate::plan::integrity::Lack,
    /// The project no longer defines the model.
    removed: bool,
}

/// Prints the status report of `env`; with `check`, exit 1 when unhealthy.
pub(super) fn run(config: &std::path::Path, env: &str, json: bool, check: bool, now: Millis, out: &Printer) -> Result<Exit> {
    let project = load(config)?;
    crate::core::name::validate_env(env)?;
    let state = open_state(&project, false)?;
    let pointers = state.env_pointers(env)?;
    let journal = state.journal(env)?;
    // Invalidations and drops are journal rows too ([`crate::lifecycle`]): the last plan is the
    // newest row that is no lifecycle event.
    let last_plan = crate::lifecycle::last_applied(&journal);
    // An environment the state store never held (no pointers, no journal: never applied — a
    // typo such as `prd` for `prod`, a schedule set up before the first apply) serves nothing
    // and every `run` of it exits 2: `Some(the existing environment named most like it)`.
    // One without pointers whose promotion is under way (another process's `apply`: its views
    // created, its pointers not yet recorded) or was recorded since the reads above is being
    // created (anew, or again after the janitor dropped it), neither absent nor dropped (the
    // promotion's intent is read first: it is recorded before the views move and dropped with
    // the pointers' record).
    // Every snapshot's storage, read once on first use by the sections below that need it.
    let mut snapshots = LazyIndex { state: &*state, index: None };
    let creating = pointers.is_empty() && (state.pending_promotions()?.iter().any(|p| p.env == env) || !state.env_pointers(env)?.is_empty());
    let absent: Option<Option<String>> = if pointers.is_empty() && journal.is_empty() && !creating {
        let known = state.environments()?;
        Some(crate::core::error::did_you_mean(env, known.iter().map(String::as_str)).map(str::to_string))
    } else {
        None
    };
    let expiry = crate::lifecycle::judge(env, &journal, project.config.environments.ttl, now);
    // An environment the janitor dropped (its pointers gone, its journal's newest row the drop)
    // serves nothing either, and every `run` of it exits 2 until an apply creates it again: when
    // it was dropped.
    let dropped: Option<String> = expiry.dropped_at.clone().filter(|_| pointers.is_empty() && !creating);
    let ticks = state.ticks(env, TICKS)?;
    let lease_name = writer_lease(env, project.config.writes_a_lake());
    let mut lease = state.lease(&lease_name)?;
    let host = host_name();
    // Judged against the clock read with it: the plan below may take longer than a live
    // holder's lease has left, and its renewal would then read as expired.
    let mut clock = state.clock()?;
    // A holder that released its lock and ended between that read and the judgement (its pid
    // gone by then) did not leave it stale: a lock judged stale is read again, and judged as it
    // is then (gone, another holder's, or the same row: stale indeed).
    if lease.as_ref().is_some_and(|l| is_stale(l, clock, &host)) {
        lease = state.lease(&lease_name)?;
        clock = state.clock()?;
    }
    let lock = lease.as_ref().map(|l| {
        let stale = is_stale(l, clock, &host);
        (l, stale)
    });
    let mut lags = Vec::new();
    let mut failed_other = Vec::new();
    let mut refreshes: Vec<Refresh> = Vec::new();
    // Per late model, its due intervals after the newest done one: what the signals are asked.
    let mut candidates = std::collections::BTreeMap::new();
    // Lag and refreshes are judged by the schedule the environment serves, not the working
    // tree's (an unapplied `cron`, `start` or grain edit changes nothing `run` does).
    let served_metadata = state.env_metadata(env)?;
    let served = served_dag(&project, env, &pointers, &served_metadata);
    let mut unjudged: Vec<(String, String)> = Vec::new();
    for (name, fp) in &pointers {
        let stats = state.ledger_stats(name, fp)?;
        if let Some(why) = served.unjudged.get(name) {
            if stats.failed > 0 {
                failed_other.push((name.clone(), stats.failed));
            }
            unjudged.push((name.clone(), why.clone()));
            continue;
        }
        let model = ModelName::parse(name).ok().and_then(|n| served.dag.get(&n).cloned());
        match model.as_ref().and_then(|m| m.kind.time_range().cloned()) {
            Some(t) if !matches!(model.as_ref().map(|m| &m.kind), Some(Kind::External(_))) => {
                // Only due intervals count: those ended by the model's last cron tick.
                let m = model.as_ref().expect("a time-range kind comes from a model");
                let due = t.grain.floor(served.dag.due_at(&m.name, now));
                let horizon = t.end.map_or(due, |e| e.min(due));
                let from = stats.done_up_to.unwrap_or(t.grain.floor(t.start));
                let behind = t.grain.count(from, horizon).max(0);
                let gaps = match stats.done_up_to {
                    None => 0,
                    Some(up_to) => {
                        let first = t.grain.floor(t.start);
                        // Only intervals inside the model's `start`/`end`: one outside them
                        // (restated, then `end` moved earlier) is never recomputed, whatever is
                        // done after it. Counted from the ledger only when the counts cannot say:
                        // `done` counts the intervals done before a `start` moved later too (a
                        // metadata change keeps the version), which would hide as many gaps.
                        let bound = t.end.map_or(up_to, |e| up_to.min(t.grain.next(t.grain.floor(e - 1))));
                        let gaps = t.grain.count(first, up_to) - stats.done as i64;
                        let none_before = stats.done_from.is_some_and(|f| f >= first);
                        if bound == up_to && none_before && gaps <= 0 {
                            0
                        } else {
                            let done = state.done_intervals(name, fp)?;
                            (t.grain.count(first, bound) - done.range(first..bound.max(first)).count() as i64).max(0)
                        }
                    }
                };
                // Only failed intervals the model still wants: one its `start`/`end` now leave
                // out is never computed again, and would keep `--check` failing for good.
                let failed = match stats.failed {
                    0 => 0,
                    _ => state.failed_intervals(name, fp)?.into_iter().filter(|s| t.holds(*s)).count(),
                };
                lags.push(Lag {
                    model: name.clone(),
                    grain: grain_name(t.grain),
                    done_up_to: stats.done_up_to,
                    behind,
                    failed,
                    gaps,
                    cron: m.cron.clone(),
                    next_due: served.dag.next_due(&m.name, now),
                    waiting: 0,
                    waiting_on: None,
                    gaps_waiting: 0,
                    left_to: None,
                    taken_over: None,
                });
                if behind > 0 {
                    candidates.insert(m.name.clone(), crate::core::Interval::new(from, horizon).split(t.grain));
                }
            }
            _ if stats.failed > 0 => failed_other.push((name.clone(), stats.failed)),
            _ => {
                // A model `run` refreshes whole on a cron: the tick it was last refreshed for.
                if let Some(m) = model.as_ref().filter(|m| m.kind.is_refreshed_whole())
                    && let (Some(text), Some(cron)) = (m.cron.as_deref(), m.schedule())
                {
                    let due = crate::core::cron::last_tick(&cron, now);
                    let until = if m.kind.is_refreshed() { crate::state::refreshed_until(&*state, name, fp)? } else { None };
                    refreshes.push(Refresh {
                        model: name.clone(),
                        kind: m.kind.tag(),
                        cron: text.to_string(),
                        rows_up_to: until.filter(|u| stats.done_up_to.is_some_and(|d| *u < d)),
                        refreshed_for: stats.done_up_to,
                        due: due.filter(|d| stats.done_up_to.is_none_or(|r| r < *d)),
                        next_due: crate::core::cron::next_tick(&cron, now),
                    });
                }
            }
        }
    }
    // Unique-key, partition and SCD type 2 models left to another environment (never refreshed
    // here: `plan::WriterHolds::Refreshes`), with the instant up to which the writer's last
    // refresh holds their rows (`None`: none recorded).
    let mut left_keyed: std::collections::BTreeMap<String, Option<Millis>> = std::collections::BTreeMap::new();
    // The same, as shown: each with the environment writing its table and its kind.
    let mut not_refreshed: Vec<NotRefreshed> = Vec::new();
    let keyed_served = pointers.keys().any(|n| ModelName::parse(n).ok().and_then(|m| served.dag.get(&m)).is_some_and(|m| m.kind.is_refreshed()));
    if env != crate::core::name::PROD && (keyed_served || lags.iter().any(|l| l.behind > 0 || l.gaps > 0)) {
        let others = crate::plan::generations::other_envs(&*state, env, project.config.environments.ttl, now)?;
        let index = snapshots.get()?;
        // Every other environment's pointers, expired ones too, read once for every model
        // looked up below ([`crate::plan::generations::taken_over_by`]).
        let everyone = crate::plan::generations::every_other(&*state, env)?;
        let served_here = |n: &str| pointers.get(n).map(|f| (index.get(&(n.to_string(), f.clone())).map(|(r, _)| r.clone()).unwrap_or_default(), f.clone()));
        let mut prod_serves = None;
        for l in lags.iter_mut().filter(|l| l.behind > 0 || l.gaps > 0) {
            let (Ok(name), Some(fp)) = (ModelName::parse(&l.model), pointers.get(&l.model)) else { continue };
            let Some((physical, _)) = index.get(&(l.model.clone(), fp.clone())) else { continue };
            // A forward-only change of another environment (`prod`'s) took the table over: its
            // version writes there now, and this environment's view shows what it computes. The
            // intervals this version lacks are that environment's to compute, and this one's
            // `run` is refused while it would compute them (a problem, below).
            if let Some((taker, taker_fp)) = crate::plan::generations::taken_over_by(&*state, index, &everyone, &l.model, fp, physical)? {
                let Some(t) = served.dag.get(&name).and_then(|m| m.kind.time_range()) else { continue };
                l.taken_over = Some(TakenOver { env: taker.clone(), fingerprint: taker_fp.clone(), missing: l.behind + l.gaps });
                l.left_to = Some(taker);
                table_lag(&*state, &served.dag, &name, t, l, fp, &taker_fp, now)?;
                continue;
            }
            let Some((writer, writer_fp, writer_pointers)) = crate::plan::generations::writer_elsewhere(&*state, index, &others, env, &l.model, fp, physical)?
            else {
                // `prod` serving this very version under other settings than the ones this
                // environment serves writes it (`plan::prod_writes_it`): its intervals are
                // `prod`'s to compute.
                let ours = || served_metadata.get(&l.model).cloned().unwrap_or_default();
                if served.dag.get(&name).is_some_and(|m| m.kind.time_range().is_some())
                    && crate::plan::prod_writes_under(&*state, &mut prod_serves, env, &l.model, fp, ours)?
                {
                    l.left_to = Some(crate::core::name::PROD.to_string());
                }
                continue;
            };
            let Some(t) = served.dag.get(&name).and_then(|m| m.kind.time_range()) else { continue };
            // The same query: the intervals the writer's version has done are in the table for
            // this version too, as its plan counts them (`plan::WriterHolds`); over other
            // parents, it computes nothing there.
            let canonical = |f: &str| state.snapshot(&l.model, f).map(|r| r.map(|r| r.canonical));
            if canonical(fp)? != canonical(writer_fp)? {
                continue;
            }
            l.left_to = crate::plan::generations::reads_other_parents(&project, &name, &served_here, writer_pointers, index).then(|| writer.to_string());
            table_lag(&*state, &served.dag, &name, t, l, fp, writer_fp, now)?;
        }
        for (name, fp) in &pointers {
            let Ok(model) = ModelName::parse(name) else { continue };
            let Some(kind) = served.dag.get(&model).filter(|m| m.kind.is_refreshed()).map(|m| m.kind.tag()) else { continue };
            let Some((physical, _)) = index.get(&(name.clone(), fp.clone())) else { continue };
            if let Some((writer, writer_fp, writer_pointers)) = crate::plan::generations::writer_elsewhere(&*state, index, &others, env, name, fp, physical)?
                && crate::plan::generations::reads_other_parents(&project, &model, &served_here, writer_pointers, index)
            {
                let rows_up_to = crate::state::refreshed_until(&*state, name, writer_fp)?;
                left_keyed.insert(name.clone(), rows_up_to);
                not_refreshed.push(NotRefreshed { model: name.clone(), kind, writer: writer.to_string(), rows_up_to, settings: false, behind: None });
            }
        }
    }
    // `full` models on the table `prod` serves (this very version, or another stored there) under
    // audits the environment lacks or other pre/post statements, as the environment serves them
    // (`plan::prod_rebuilds_under`): never rebuilt here (`plan::WriterHolds::Rebuilds`), listed
    // with the keyed models left to their writer, never as stale rebuilds this environment does.
    let mut left_full: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    if env != crate::core::name::PROD {
        let full: Vec<(&String, &String)> =
            pointers.iter().filter(|(n, _)| ModelName::parse(n).ok().and_then(|m| served.dag.get(&m)).is_some_and(|m| matches!(m.kind, Kind::Full))).collect();
        if !full.is_empty() {
            let index = snapshots.get()?;
            let mut prod_serves = None;
            for (name, fp) in full {
                let Some((physical, _)) = index.get(&(name.clone(), fp.clone())) else { continue };
                let ours = || served_metadata.get(name).cloned().unwrap_or_default();
                if crate::plan::prod_rebuilds_under(&*state, index, &mut prod_serves, env, (name, fp, physical), ours)? {
                    left_full.insert(name.clone());
                }
            }
        }
    }
    // Models below one left to another environment wait for its rows (`plan::recompute::hold_for_writer`).
    // A time-range model left to the writer holds no rows past what the writer computed; a
    // keyed one, none past the writer's last refresh: the intervals below ending after it wait.
    let mut left: std::collections::BTreeMap<String, Option<Millis>> =
        lags.iter().filter(|l| l.left_to.is_some() && l.behind > 0).map(|l| (l.model.clone(), None)).collect();
    left.extend(left_keyed);
    if !left.is_empty() {
        for l in lags.iter_mut().filter(|l| l.behind > 0 && l.left_to.is_none()) {
            let Ok(name) = ModelName::parse(&l.model) else { continue };
            let Some(t) = served.dag.get(&name).and_then(|m| m.kind.time_range()).cloned() else { continue };
            let from = l.done_up_to.unwrap_or(t.grain.floor(t.start));
            let mut upstream: Option<(String, i64)> = None;
            for a in served.dag.ancestors(&name) {
                let Some(h) = left.get(&a.name.to_string()) else { continue };
                // Those ending by the writer's last refresh are computed by the next run.
                let ready = h.map_or(0, |h| t.grain.count(from, t.grain.floor(h)).clamp(0, l.behind));
                let waiting = l.behind - ready;
                if waiting > 0 && upstream.as_ref().is_none_or(|(_, w)| waiting > *w) {
                    upstream = Some((a.name.to_string(), waiting));
                }
            }
            if let Some((u, waiting)) = upstream {
                l.waiting = waiting as usize;
                l.waiting_on = Some(u);
            }
        }
    }
    // Intervals before the newest done one that are not done may be held by a signal too (a
    // later one was ready): asked as well, before the ones after it.
    if served.dag.models().any(|m| !m.signals.is_empty()) {
        for l in lags.iter().filter(|l| l.gaps > 0 && l.left_to.is_none()) {
            let (Ok(name), Some(fp), Some(up_to)) = (ModelName::parse(&l.model), pointers.get(&l.model), l.done_up_to) else { continue };
            let Some(t) = served.dag.get(&name).and_then(|m| m.kind.time_range()) else { continue };
            let done = state.done_intervals(&l.model, fp)?;
            let mut asked: Vec<crate::core::Interval> = crate::core::Interval::new(t.grain.floor(t.start), up_to)
                .split(t.grain)
                .into_iter()
                .filter(|i| !done.contains(&i.start) && t.holds(i.start))
                .collect();
            let entry: &mut Vec<crate::core::Interval> = candidates.entry(name).or_default();
            asked.append(entry);
            *entry = asked;
        }
    }
    let signals_error = waiting_on_signals(&project, &served.dag, &candidates, &mut lags);
    // Rebuilds and refreshes decided and not done (a process stopped in between): the next
    // apply or run does them.
    let pending: Vec<crate::state::PendingRebuild> =
        state.pending_rebuilds()?.into_iter().filter(|p| pointers.get(&p.name).is_some_and(|fp| *fp == p.fingerprint)).collect();
    // `full` versions built from older data than their parents hold now, whichever environment
    // changed it (SPEC §4 invariant 36): the next run or apply of this environment rebuilds them.
    // Like pending rebuilds, they do not make `--check` fail.
    let candidates: Vec<(ModelName, String)> = pointers
        .iter()
        .filter_map(|(n, fp)| ModelName::parse(n).ok().map(|m| (m, fp.clone())))
        .filter(|(m, fp)| {
            project.dag.get(m).is_some_and(|m| matches!(m.kind, Kind::Full)) && !pending.iter().any(|p| p.name == m.to_string() && p.fingerprint == *fp)
        })
        .collect();
    let stale = crate::plan::generations::stale(&project, &*state, &candidates, &|n: &str| pointers.get(n).cloned())?;
    // Those left to `prod` are not rebuilt here: `prod`'s next run or apply rebuilds them.
    let (stale_left, stale): (Vec<_>, Vec<_>) = stale.into_iter().partition(|(n, _, _)| left_full.contains(&n.to_string()));
    for name in &left_full {
        let behind = stale_left.iter().find(|(n, _, _)| n.to_string() == *name).map(|(_, _, reason)| reason.clone());
        not_refreshed.push(NotRefreshed {
            model: name.clone(),
            kind: "full",
            writer: crate::core::name::PROD.to_string(),
            rows_up_to: None,
            settings: true,
            behind,
        });
    }
    let failed_total: usize = lags.iter().map(|l| l.failed).sum::<usize>() + failed_other.iter().map(|(_, n)| n).sum::<usize>();
    // The newest tick that says whether a run succeeded (`processed`, `nothing-due`, `error`):
    // `lock-held` and `blocked` ticks after an error do not make it green.
    let last_errored = newest_deciding_tick(&*state, env, &ticks)?.is_some_and(|t| t.outcome == "error");
    let mut problems = Vec::new();
    // A promotion of the environment under way while this status read it: its first (the
    // environment being created), or one moving its views while the engine check read them.
    let mut promoting = creating;
    if let Some(like) = &absent {
        let like = like.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
        problems.push(format!("environment `{env}` does not exist: nothing was applied to it, so every `run {env}` exits 2{like}"));
    }
    if let Some(at) = &dropped {
        problems.push(format!(
            "environment `{env}` was dropped by the janitor at {at}: it serves nothing, every `run {env}` exits 2 (`efmesh apply {env}` creates it again)"
        ));
    }
    // What the engine lacks of the served versions of models the project defines differently.
    let mut lost_served: Vec<LostServed> = Vec::new();
    if failed_total > 0 {
        problems.push(format!("{failed_total} failed interval(s)"));
    }
    if last_errored {
        problems.push("the last run tick errored".to_string());
    }
    // A table another environment's forward-only change took over: every `run` of this one is
    // refused (exit 1) while its version lacks intervals there, until an apply moves it.
    for l in &lags {
        if let Some(o) = &l.taken_over {
            problems.push(format!(
                "`{}`: its table was taken over by the newer version {} that `{}` serves (a forward-only change, another query), so every `run {env}` is refused (exit 1) while this version lacks {} interval(s) there; apply `{env}` from the project `{}` serves (it then serves that version too), or apply `{}` without that change, or invalidate one of them",
                l.model,
                &o.fingerprint[..12.min(o.fingerprint.len())],
                o.env,
                o.missing,
                o.env,
                o.env
            ));
        }
    }
    // What the engine lacks of what the environment serves (a table or view dropped, the file
    // replaced), as the plan finds it: `run` refuses then (exit 2) until an apply restores it.
    // Read between two marks of the environment's promotions: views another process's
    // promotion of it is moving are not damage ([`steady_engine_check`]).
    if !pointers.is_empty() {
        let (found, moving) = steady_engine_check(&project, &*state, env, now)?;
        if moving {
            promoting = true;
        } else {
            if !found.repairs.is_empty() {
                crate::session::warn_repairs(&project, env, &found.repairs);
            }
            problems.extend(found.problems);
            lost_served = found.lost_served;
        }
    }
    // Versions served from a table another environment writes under audits lacking one of this
    // environment's (an added audit only refuses more, SPEC §4 invariant 17): when this
    // environment's audits have not checked the table's rows as they stand (no pass, nor a run
    // where only `warn` audits found rows, at its current data generation: `prod`'s runs wrote
    // since, or this environment's last write went unrecorded), they are served unaudited here;
    // `run` audits them (`apply::shared_table_audits`). Judged only where the project's model is
    // the one served.
    let mut unaudited: Vec<(String, Vec<String>)> = Vec::new();
    let shared: Vec<(&crate::core::Model, &String)> = pointers
        .iter()
        .filter_map(|(n, fp)| {
            let m = project.dag.get(&ModelName::parse(n).ok()?)?;
            (crate::apply::audits_shared_tables(m) && served_metadata.get(n).is_some_and(|t| *t == crate::plan::metadata_text(m))).then_some((m, fp))
        })
        .collect();
    if !shared.is_empty() && env != crate::core::name::PROD {
        let others = crate::apply::others_served(&*state, env)?;
        let none = crate::state::SnapshotIndex::default();
        let index = if others.is_empty() { &none } else { snapshots.get()? };
        for (m, fp) in shared {
            let Some((physical, _)) = index.get(&(m.name.to_string(), fp.clone())) else { continue };
            let sharing = crate::apply::sharing_under_other_audits(m, physical, index, &others);
            if !sharing.is_empty() && crate::apply::WholePass::current(&*state, m, fp)?.is_some_and(|p| !p.checked) {
                unaudited.push((m.name.to_string(), sharing.into_iter().cloned().collect()));
            }
        }
    }
    if !unaudited.is_empty() {
        let named: Vec<String> = unaudited.iter().map(|(m, _)| format!("`{m}`")).collect();
        problems.push(format!(
            "{} serve{} {} another environment writes under other audits, and `{env}`'s audits have not checked the rows {} holds now (`efmesh run {env}` runs them)",
            named.join(", "),
            if named.len() == 1 { "s" } else { "" },
            if named.len() == 1 { "a table" } else { "tables" },
            if named.len() == 1 { "it" } else { "each" }
        ));
    }
    // A stale lock is one its holder did not release: a command that stopped without finishing
    // (killed: a `timeout`, systemd's stop, `kill -9`; its host gone), which left no tick, so
    // only the lock says so; or one that finished but could not write the release into the
    // state store (a full disk: it warned `cannot release the lock`). The message claims
    // neither. What reclaims it: the lake's lock is every environment's writer lock.
    let reclaimer = if project.config.writes_a_lake() {
        "the next `apply` or `run` (of any environment)".to_string()
    } else {
        format!("the next `apply` or `run` of `{env}`")
    };
    if let Some((l, true)) = &lock {
        problems.push(format!(
            "the lock `{}` is stale: its holder ({}) did not release it (it stopped, was killed, or could not write the state store; \
             or its host died); {reclaimer} reclaims it",
            l.name, l.holder
        ));
    }
    let healthy = problems.is_empty();
    if json {
        out.json(json!({
            "env": env,
            // `false` when the state store never held the environment (`didYouMean`: the
            // existing one named most like it, or null), its first promotion under way included
            // (`promotionInProgress`: it is being created, and not said absent).
            "exists": absent.is_none() && !(creating && journal.is_empty()),
            "didYouMean": absent.as_ref().and_then(|like| like.as_deref()),
            // `true` when a promotion of it (another process's `apply`) was under way while this
            // status read it: its first (`exists` is then `false`, and it is not said absent), or
            // one moving its views while the engine check read them (what the engine holds of
            // it is not judged: run `status` again once it is recorded).
            "promotionInProgress": promoting,
            // `true` when the janitor dropped it (`expiry.droppedAt` says when): it serves nothing.
            "dropped": dropped.is_some(),
            "storeVersion": STATE_VERSION,
            "models": pointers.len(),
            // `appliedBy` is null when no applier was known (no `$EFMESH_APPLIED_BY`, `$USER`,
            // `$LOGNAME`): the text says "by unknown".
            "lastPlan": last_plan.map(|j| json!({"appliedAt": j.applied_at, "appliedBy": (!j.applied_by.is_empty()).then_some(&j.applied_by), "summary": j.summary})),
            "expiry": expiry,
            "lag": lags.iter().map(|l| json!({
                "model": l.model,
                "grain": l.grain,
                "doneUpTo": l.done_up_to.map(to_iso),
                "behind": l.behind,
                "late": l.behind > l.waiting as i64 && l.left_to.is_none(),
                "leftTo": l.left_to,
                "takenOverBy": l.taken_over.as_ref().map(|o| json!({"env": o.env, "fingerprint": o.fingerprint, "missing": o.missing})),
                "gapsWaiting": l.gaps_waiting,
                "cron": l.cron,
                "nextDueAt": l.next_due.map(to_iso),
                "failed": l.failed,
                "gaps": l.gaps,
                "waiting": l.waiting,
                "waitingOn": l.waiting_on,
            })).collect::<Vec<_>>(),
            "refreshes": refreshes.iter().map(|r| json!({
                "model": r.model,
                "kind": r.kind,
                "cron": r.cron,
                "refreshedFor": r.refreshed_for.map(to_iso),
                "rowsUpTo": r.rows_up_to.map(to_iso),
                "due": r.due.is_some(),
                "dueSince": r.due.map(to_iso),
                "nextDueAt": r.next_due.map(to_iso),
            })).collect::<Vec<_>>(),
            // Unique-key, partition and SCD type 2 models left to another environment's refreshes,
            // `full` models left to `prod`'s rebuilds (`otherSettings`: under audits this
            // environment lacks or other statements, not over other parent tables; `behind`: why
            // the writer's next run or apply rebuilds it, null when its last build is current).
            "notRefreshedHere": not_refreshed.iter().map(|n| json!({
                "model": n.model,
                "kind": n.kind,
                "leftTo": n.writer,
                "rowsUpTo": n.rows_up_to.map(to_iso),
                "otherSettings": n.settings,
                "behind": n.behind,
            })).collect::<Vec<_>>(),
            // Served models whose schedule the served metadata cannot give (no lag judged).
            "unjudged": unjudged.iter().map(|(m, why)| json!({"model": m, "reason": why})).collect::<Vec<_>>(),
            "signalsError": signals_error,
            "failed": failed_other.iter().map(|(m, n)| json!({"model": m, "failed": n})).collect::<Vec<_>>(),
            // Versions served from a table another environment writes under other audits,
            // holding rows this environment's audits have not checked.
            "unaudited": unaudited.iter().map(|(m, writers)| json!({"model": m, "writtenBy": writers})).collect::<Vec<_>>(),
            "lostRelations": lost_served.iter().map(|l| json!({
                "model": l.model,
                "fingerprint": l.fingerprint,
                "relation": l.relation,
                "lack": l.lack,
                "removed": l.removed,
            })).collect::<Vec<_>>(),
            "pendingRebuilds": pending,
            "staleRebuilds": stale.iter().map(|(n, fp, reason)| json!({"name": n.to_string(), "fingerprint": fp, "reason": reason})).collect::<Vec<_>>(),
            "ticks": ticks.iter().map(tick_json).collect::<Vec<_>>(),
            "lock": lock.map(|(l, stale)| json!({"name": l.name, "holder": l.holder, "expiresAt": l.expires_at, "heartbeatAt": l.heartbeat_at, "stale": stale})),
            "healthy": healthy,
            "problems": problems,
        }))?;
    } else {
        let mut text = String::new();
        if let Some(like) = &absent {
            // A typo of an existing environment's name is said so (its health is not this one's).
            let like = like.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
            text.push_str(&format!("environment `{env}` does not exist — the first apply creates it{like}\n"));
        } else if creating {
            let which = if journal.is_empty() { "its first promotion" } else { "a promotion of it" };
            text.push_str(&format!("environment `{env}` is being created: {which} is under way (run `status` again once it is recorded)\n"));
        } else if let Some(at) = &dropped {
            text.push_str(&format!("environment `{env}` {} — the next apply creates it again\n", super::envlife::dropped_phrase(at)));
        } else {
            text.push_str(&format!("environment `{env}`: {} models (state store layout v{STATE_VERSION})\n", pointers.len()));
        }
        match last_plan {
            Some(j) => {
                text.push_str(&format!("last plan: applied {} by {}\n", j.applied_at, if j.applied_by.is_empty() { "unknown" } else { j.applied_by.as_str() }))
            }
            None => text.push_str("last plan: never applied\n"),
        }
        if let Some(line) = crate::lifecycle::describe(&expiry).filter(|_| !pointers.is_empty()) {
            text.push_str(&format!("{line}\n"));
        }
        if promoting && !creating {
            text.push_str(&format!(
                "promotion: one of `{env}` is under way (its views moved while this status read them): what the engine holds of it is not \
                 judged until it is recorded; run `status` again then\n"
            ));
        }
        match &lock {
            Some((l, false)) => text.push_str(&format!("lock: `{}` held by {} (expires {})\n", l.name, l.holder, l.expires_at)),
            Some((l, true)) => text.push_str(&format!("lock: `{}` stale (held by {}, expired or gone; {reclaimer} reclaims it)\n", l.name, l.holder)),
            None => text.push_str("lock: free\n"),
        }
        for l in &lags {
            let up_to = l.done_up_to.map_or("—".to_string(), to_iso);
            let schedule = match (&l.cron, l.next_due) {
                (Some(c), Some(n)) => format!(" (cron `{c}`, next due {})", to_iso(n)),
                (Some(c), None) => format!(" (cron `{c}`)"),
                _ => String::new(),
            };
            let why =
                l.waiting_on.as_deref().map_or(String::new(), |w| if w == "signal" { " on its signals".to_string() } else { format!(" on `{w}` upstream") });
            if l.behind == 0 {
                text.push_str(&format!("  ✓ {}  caught up to {up_to}{schedule}\n", l.model));
            } else if l.waiting as i64 >= l.behind {
                text.push_str(&format!("  ⏸ {}  waiting{why}: {} {} interval(s) not ready, caught up to {up_to}{schedule}\n", l.model, l.waiting, l.grain));
            } else if l.waiting > 0 {
                text.push_str(&format!(
                    "  … {}  behind by {} {} interval(s) ({} waiting{why}), caught up to {up_to}{schedule}\n",
                    l.model, l.behind, l.grain, l.waiting
                ));
            } else {
                text.push_str(&format!("  … {}  behind by {} {} interval(s), caught up to {up_to}{schedule}\n", l.model, l.behind, l.grain));
            }
            if l.gaps_waiting > 0 {
                text.push_str(&format!("    {} {} interval(s) before {up_to} not done, waiting{why}\n", l.gaps_waiting, l.grain));
            }
            if let Some(o) = &l.taken_over {
                text.push_str(&format!(
                    "    ⚠ its table was taken over by the newer version {} that `{}` serves (a forward-only change, another query): `{env}`'s view shows the rows `{}` computes there, and every `run {env}` is refused while this version lacks {} {} interval(s) there\n",
                    &o.fingerprint[..12.min(o.fingerprint.len())],
                    o.env,
                    o.env,
                    o.missing,
                    l.grain
                ));
            } else if let Some(w) = &l.left_to {
                text.push_str(&format!(
                    "    its table is also what `{w}` serves (another version over other parents, or this version under other settings): `{env}` computes nothing there and shows its intervals as `{w}` computes them (never those outside `{w}`'s `start`/`end`)\n"
                ));
            }
            if l.failed > 0 {
                text.push_str(&format!("    ⚠ failed intervals: {}\n", l.failed));
            }
            if l.gaps > 0 {
                if l.left_to.is_some() {
                    text.push_str(&format!("    {} {} interval(s) before {up_to} not done in the table\n", l.gaps, l.grain));
                } else {
                    text.push_str(&format!(
                        "    {} {} interval(s) before {up_to} not done (restated or failed): the next run recomputes them\n",
                        l.gaps, l.grain
                    ));
                }
            }
        }
        for r in &refreshes {
            let mut last = r.refreshed_for.map_or("never refreshed on its cron".to_string(), |t| format!("last refreshed for the tick at {}", to_iso(t)));
            if let Some(u) = r.rows_up_to {
                last.push_str(&format!(", over rows complete only up to {} (a time-range model above it lacked intervals then)", to_iso(u)));
            }
            let next = r.next_due.map_or(String::new(), |n| format!(", next due {}", to_iso(n)));
            match r.due {
                Some(d) => {
                    // A `full` table other environments' versions share is refreshed by `prod`'s run only.
                    let shared = if r.kind == "full" { " (when another environment's version shares this `full` table: only `prod`'s run)" } else { "" };
                    text.push_str(&format!(
                        "  … {}  refresh due: its cron `{}` ticked at {}, {last}; the next run refreshes it{shared}\n",
                        r.model,
                        r.cron,
                        to_iso(d)
                    ))
                }
                None => text.push_str(&format!("  ✓ {}  {last} (cron `{}`{next})\n", r.model, r.cron)),
            }
        }
        for n in &not_refreshed {
            if n.kind == "full" {
                let (w, behind) = (&n.writer, n.behind.as_ref().map_or(String::new(), |b| format!(" ({b}: `{}`'s next run or apply rebuilds it)", n.writer)));
                text.push_str(&format!(
                    "  ⇄ {}  not rebuilt here: its table is also what `{w}` serves, under audits `{env}` lacks or other pre/post statements, so `{env}` serves `{w}`'s last build of it{behind}, until `{env}` serves `{w}`'s audits and statements too\n",
                    n.model
                ));
                continue;
            }
            let (w, what) = (&n.writer, if n.kind == "scd_type2" { "history" } else { "rows" });
            let last = match n.rows_up_to {
                Some(t) => format!("its last refresh there holds rows up to {}", to_iso(t)),
                None => "no refresh of it recorded there yet".to_string(),
            };
            text.push_str(&format!(
                "  ⇄ {}  not refreshed here: its table is also what `{w}` serves (another version, over other parent tables), so `{env}` serves `{w}`'s {what}, refreshed from `{w}`'s parents ({last}), until both serve the same version of it\n",
                n.model
            ));
        }
        for (m, why) in &unjudged {
            text.push_str(&format!("  ? {m}  not judged: {why}\n"));
        }
        if let Some(e) = &signals_error {
            text.push_str(&format!("  ⚠ signals not evaluated: {e}\n"));
        }
        for (m, n) in &failed_other {
            text.push_str(&format!("  ⚠ {m}  failed intervals: {n}\n"));
        }
        for l in &lost_served {
            let differs = if l.removed { "no longer defines the model" } else { "defines another version" };
            text.push_str(&format!(
                "  ⚠ {}  {} (the version `{env}` serves; the project {differs}): `apply` repairs it, serving the project's\n",
                l.model,
                l.lack.describe(&l.relation)
            ));
        }
        for (m, writers) in &unaudited {
            let writers: Vec<String> = writers.iter().map(|w| format!("`{w}`")).collect();
            text.push_str(&format!(
                "  ⚠ {m}  unaudited: {} write{} its shared table under other audits; `{env}`'s audits have not checked the rows it holds now (`efmesh run {env}` runs them)\n",
                writers.join(", "),
                if writers.len() == 1 { "s" } else { "" }
            ));
        }
        // Recorded before anything is written: what the record names may never have happened
        // (the command stopped first), so the reason says what that command was to do.
        for p in &pending {
            // A unique-key, partition or SCD type 2 version's record is a refresh left pending.
            let refreshed = state
                .snapshot(&p.name, &p.fingerprint)?
                .is_some_and(|r| matches!(r.kind.as_str(), "incremental_by_unique_key" | "incremental_by_partition" | "scd_type2"));
            if refreshed {
                text.push_str(&format!(
                    "  … {}  refresh pending since {}: an apply or run decided it ({}) and stopped before refreshing it; the next run or apply refreshes it (outside prod, not while another environment writes its table)\n",
                    p.name, p.recorded_at, p.reason
                ));
            } else {
                text.push_str(&format!(
                    "  … {}  rebuild pending since {}: an apply or run decided it ({}) and stopped before rebuilding it; the next run or apply rebuilds it (outside prod, not while another environment shares its table)\n",
                    p.name, p.recorded_at, p.reason
                ));
            }
        }
        for (n, _, reason) in &stale {
            text.push_str(&format!(
                "  … {n}  stale: {reason}; the next run or apply rebuilds it (outside prod, not while another environment shares its table)\n"
            ));
        }
        if ticks.is_empty() {
            text.push_str("no run ticks yet\n");
        } else {
            text.push_str("recent run ticks:\n");
            for t in &ticks {
                text.push_str(&format!("  {} {}\n", tick_mark(t), tick_text(t)));
            }
        }
        if healthy {
            text.push_str("health: ok\n");
        } else {
            text.push_str(&format!("health: unhealthy ({})\n", problems.join(", ")));
        }
        out.text(&text)?;
    }
    Ok(if check && !healthy { Exit::Error } else { Exit::Success })
}

/// What `status --check` found the engine or its storage lacking of what an environment serves
/// ([`engine_check`]).
struct EngineCheck {
    /// Its problems, as `health: unhealthy (…)` lists them.
    problems: Vec<String>,
    /// What it lacks of the served versions of models the project defines otherwise.
    lost_served: Vec<LostServed>,
    /// The plan's repairs ([`crate::plan::integrity::describe`]), for its warning.
    repairs: Vec<String>,
}

impl EngineCheck {
    /// True when nothing was found lacking (the plan may still repair changed models).
    fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.lost_served.is_empty()
    }
}

/// The state store's snapshot index, read on the first [`LazyIndex::get`] and kept for the
/// command: `status` reads it in several sections, each only in some cases.
struct LazyIndex<'s> {
    state: &'s dyn crate::state::StateStore,
    index: Option<crate::state::SnapshotIndex>,
}

impl LazyIndex<'_> {
    /// The index, read from the state store the first time.
    fn get(&mut self) -> Result<&crate::state::SnapshotIndex, crate::state::StateError> {
        if self.index.is_none() {
            self.index = Some(self.state.snapshot_index()?);
        }
        Ok(self.index.as_ref().expect("read just above"))
    }
}

/// What the engine or its storage lacks of what `env` serves, `pointers` its pointers read before
/// the plan: the plan's integrity check for the versions the project defines as served, and for
/// the served versions the project defines otherwise (or no longer) their relations
/// ([`crate::plan::integrity::served_missing`]), local lake files and DuckLake tables; then the
/// DuckLake catalog's own checks.
///
/// # Errors
/// The plan or the state store's reads fail.
fn engine_check(
    project: &crate::project::Project,
    state: &dyn crate::state::StateStore,
    env: &str,
    now: Millis,
    pointers: &std::collections::BTreeMap<String, String>,
) -> Result<EngineCheck> {
    let mut problems: Vec<String> = Vec::new();
    let mut lost_served: Vec<LostServed> = Vec::new();
    let plan = crate::session::plan_checked_quiet(project, state, env, now, &crate::plan::Options::default())?;
    let repairs = crate::plan::integrity::describe(project, &plan);
    let served = |a: &&crate::plan::Action| matches!(a.change, crate::plan::Change::Unchanged | crate::plan::Change::Metadata);
    let lost: Vec<String> = plan.actions.iter().filter(served).filter_map(|a| a.repair.as_ref().map(|r| format!("`{}` ({})", a.name, r.summary()))).collect();
    if !lost.is_empty() {
        problems.push(format!("the engine lacks what it serves of {} (the next apply restores it; run refuses until then)", lost.join(", ")));
    }
    // The plan checks the project's versions: a model whose project version differs from the
    // one served (an unapplied edit — a `git pull` on a monitoring host —, an older state
    // export imported, a model removed from the project) is checked here, the version the
    // state store says the environment serves against the same catalog.
    let changes: std::collections::HashMap<String, crate::plan::Change> = plan.actions.iter().map(|a| (a.name.to_string(), a.change)).collect();
    let moved: Vec<(&String, &String, bool)> = pointers
        .iter()
        .filter_map(|(name, fp)| match changes.get(name).copied() {
            Some(crate::plan::Change::Unchanged | crate::plan::Change::Metadata) => None,
            change => Some((name, fp, change == Some(crate::plan::Change::Removed))),
        })
        .collect();
    if !moved.is_empty() {
        // Its own read, not the command's: `steady_engine_check` calls this again when a
        // promotion moved the views meanwhile, whose snapshots it must see.
        let index = state.snapshot_index()?;
        // The served versions with storage (embedded and external models have no storage and
        // no view): model, fingerprint, physical relation, kind tag, removed from the project.
        let versions: Vec<(&String, &String, &String, &String, bool)> = moved
            .iter()
            .filter_map(|(name, fp, removed)| {
                let (physical, kind) = index.get(&((*name).clone(), (*fp).clone()))?;
                (!physical.is_empty()).then_some((*name, *fp, physical, kind, *removed))
            })
            .collect();
        if let Some(catalog) = crate::session::engine_catalog(project)? {
            for (name, fp, physical, _, removed) in &versions {
                let Ok(model) = ModelName::parse(name) else { continue };
                for (relation, lack) in crate::plan::integrity::served_missing(env, &model, physical, &catalog) {
                    lost_served.push(LostServed { model: (*name).clone(), fingerprint: (*fp).clone(), relation, lack, removed: *removed });
                }
            }
        }
        // The storage outside the engine's catalog, as the plan's check (lake files) and the
        // DuckLake check below find it for the project's versions, for the served ones: every
        // version of the model stored in the same relation shares its files or table.
        let mut sharing: std::collections::HashMap<(&str, &str), Vec<String>> = std::collections::HashMap::new();
        for ((name, fp), (physical, _)) in &index {
            sharing.entry((name.as_str(), physical.as_str())).or_default().push(fp.clone());
        }
        let shared = |name: &String, fp: &String, physical: &String| -> Vec<String> {
            sharing.get(&(name.as_str(), physical.as_str())).cloned().unwrap_or_else(|| vec![fp.clone()])
        };
        for (name, fp, physical, _, removed) in &versions {
            // Only a local parquet lake has files listed here (its snapshot record says
            // whether this version is stored there).
            if crate::plan::integrity::local_lake_dir(project, physical).is_none() {
                continue;
            }
            let Some(record) = state.snapshot(name, fp)? else { continue };
            let storage = crate::plan::integrity::ServedStorage::of(&record);
            for file in crate::plan::integrity::served_lake_files_missing(project, state, name, physical, storage, &shared(name, fp, physical))? {
                lost_served.push(LostServed {
                    model: (*name).clone(),
                    fingerprint: (*fp).clone(),
                    relation: file.display().to_string(),
                    lack: crate::plan::integrity::Lack::LakeFileMissing,
                    removed: *removed,
                });
            }
        }
        let stored: Vec<Vec<String>> = versions.iter().map(|(name, fp, physical, _, _)| shared(name, fp, physical)).collect();
        let asked: Vec<(&str, &[String], &str, bool)> = versions
            .iter()
            .zip(&stored)
            .map(|((name, _, physical, kind, _), fps)| (name.as_str(), fps.as_slice(), physical.as_str(), kind.as_str() == "incremental_by_time_range"))
            .collect();
        match crate::apply::ducklake::lost_served_versions(project, state, &asked) {
            Ok(lost) => {
                for (i, file) in lost {
                    let Some((name, fp, physical, _, removed)) = versions.get(i) else { continue };
                    // The table missing, or a data file of it (its path names the table).
                    let (relation, lack) = match file {
                        Some(file) => (file, crate::plan::integrity::Lack::DuckLakeFileMissing),
                        None => ((*physical).clone(), crate::plan::integrity::Lack::DuckLakeTableMissing),
                    };
                    lost_served.push(LostServed { model: (*name).clone(), fingerprint: (*fp).clone(), relation, lack, removed: *removed });
                }
            }
            Err(e) if e.contains(crate::apply::ducklake::DATA_PATH_MISMATCH) => problems.push(e),
            Err(e) => tracing::warn!("cannot read the DuckLake catalog's tables, so `--check` does not verify the served versions there: {e}"),
        }
        if !lost_served.is_empty() {
            let named: Vec<String> = lost_served.iter().map(|l| format!("`{}` ({})", l.model, l.lack.describe(&l.relation))).collect();
            problems.push(format!(
                "the engine or its storage lacks what it serves of {}, whose served version the project no longer defines (`apply` repairs it, serving the project's; run refuses until then)",
                named.join(", ")
            ));
        }
    }
    // DuckLake's tables are in another catalog, which the plan does not read: asked here
    // (`apply` and `run` refuse while one the environment relies on is missing).
    match crate::apply::ducklake::lost_served(project, &plan, state) {
        Ok(lost) if !lost.is_empty() => problems.push(format!(
            "the DuckLake catalog lacks what it serves of {} (apply and run refuse until the catalog is restored or the model recomputed)",
            lost.join(", ")
        )),
        Ok(_) => {}
        Err(e) if e.contains(crate::apply::ducklake::DATA_PATH_MISMATCH) => {
            if !problems.contains(&e) {
                problems.push(e);
            }
        }
        Err(e) => tracing::warn!("cannot read the DuckLake catalog's tables, so `--check` does not verify them: {e}"),
    }
    // A catalog restored from a copy older than the store's epoch (SPEC §4, invariant 63):
    // `apply` and `run` refuse it.
    match crate::apply::ducklake::catalog_behind(project, env, state) {
        Ok(Some(message)) => problems.push(message),
        Ok(None) => {}
        Err(e) if e.contains(crate::apply::ducklake::DATA_PATH_MISMATCH) => {
            if !problems.contains(&e) {
                problems.push(e);
            }
        }
        Err(e) => tracing::warn!("cannot read the DuckLake catalog's epoch stamp, so `--check` does not verify it: {e}"),
    }
    Ok(EngineCheck { problems, lost_served, repairs })
}

/// [`engine_check`] of `env` read between two marks of its promotions
/// ([`crate::plan::integrity::ViewsMark`]: the pointers and whether a promotion of it is under
/// way): a check that found something is judged only when no promotion of the environment
/// moved its views between the two (another process's `apply` of it, its views swapped and its
/// pointers not yet recorded, makes its views look as if they did not serve what the pointers
/// say: not damage). Otherwise it is read again, at most [`crate::session::STEADY_READS`] times a
/// moment apart; `true` with the last one when the views were still moving then (a promotion
/// under way: what it found is not judged).
///
/// # Errors
/// As [`engine_check`].
fn steady_engine_check(project: &crate::project::Project, state: &dyn crate::state::StateStore, env: &str, now: Millis) -> Result<(EngineCheck, bool)> {
    use crate::plan::integrity::ViewsMark;
    let mut before = ViewsMark::read(state, env)?;
    let mut reads = 1;
    loop {
        let found = engine_check(project, state, env, now, &before.pointers)?;
        if found.is_clean() {
            return Ok((found, false));
        }
        let after = ViewsMark::read(state, env)?;
        if before.steady(&after) {
            return Ok((found, false));
        }
        if reads >= crate::session::STEADY_READS {
            return Ok((found, true));
        }
        tracing::debug!(env = %env, reads, "a promotion of `{env}` moved its views while they were read: reading them again");
        std::thread::sleep(crate::session::steady_pause(reads));
        before = after;
        reads += 1;
    }
}

/// The project's DAG as an environment serves it, by which `status` judges lag and refreshes:
/// each model the environment serves that the project defines with the same kind has the
/// schedule the metadata the environment serves records for it (SPEC §4 invariant 17) — its
/// `cron` and, for a time-range model, its grain, `start` and `end` — in place of the working
/// tree's ([`as_served`]), so an edit nobody applied (a `git pull` on a monitoring host) never
/// changes what counts as due, as it changes nothing `run` does (`run` refuses it). The DAG's
/// edges, and every model the environment does not serve, stay the project's.
struct Served {
    /// The project's DAG with the served schedules.
    dag: crate::core::Dag,
    /// The models the environment serves whose schedule its metadata cannot give, with why (no
    /// metadata recorded, another kind than the project's, a cron that no longer parses): not
    /// judged, rather than judged by the working tree.
    unjudged: std::collections::BTreeMap<String, String>,
}

/// [`Served`] of `env`, whose pointers are `pointers` and served metadata `metadata` (model →
/// JSON text of [`crate::plan::metadata_text`], as [`crate::state::StateStore::env_metadata`]
/// reads it).
fn served_dag(
    project: &crate::project::Project,
    env: &str,
    pointers: &std::collections::BTreeMap<String, String>,
    metadata: &std::collections::BTreeMap<String, String>,
) -> Served {
    let mut unjudged = std::collections::BTreeMap::new();
    let mut replacements = Vec::new();
    for name in pointers.keys() {
        // A model the project no longer defines has no lag line (its relations are checked below).
        let Some(model) = ModelName::parse(name).ok().and_then(|n| project.dag.get(&n)) else { continue };
        match as_served(model, metadata.get(name).map_or("{}", String::as_str), env) {
            Ok(Some(m)) => replacements.push(m),
            Ok(None) => {}
            Err(why) => {
                unjudged.insert(name.clone(), why);
            }
        }
    }
    let mut dag = project.dag.clone();
    if replacements.is_empty() {
        return Served { dag, unjudged };
    }
    if let Err(replacements) = dag.try_replace(replacements) {
        // Replaced in place only when that provably keeps the DAG's checks; otherwise built in
        // full, and when the served schedules do not pass the checks against the working tree's
        // definitions (another time column type, say), those models are not judged.
        let names: Vec<String> = replacements.iter().map(|m| m.name.to_string()).collect();
        let mut by_name: std::collections::BTreeMap<ModelName, crate::core::Model> = replacements.into_iter().map(|m| (m.name.clone(), m)).collect();
        let models: Vec<crate::core::Model> = project.dag.models().map(|m| by_name.remove(&m.name).unwrap_or_else(|| m.clone())).collect();
        match crate::core::Dag::build(models) {
            Ok(built) => dag = built,
            Err(e) => {
                let error = e.0.first().map_or_else(|| e.to_string(), ToString::to_string);
                let why = error.lines().next().unwrap_or_default();
                let message = format!("the schedule `{env}` serves does not fit the working tree's definition ({why}); apply to judge it");
                for name in names {
                    unjudged.insert(name, message.clone());
                }
            }
        }
    }
    Served { dag, unjudged }
}

/// The tags of the kinds `run` refreshes whole on a cron ([`Kind::is_refreshed_whole`]).
const REFRESHED_WHOLE: [&str; 4] = ["full", "incremental_by_unique_key", "scd_type2", "incremental_by_partition"];

/// `model` (the working tree's) with the schedule the metadata `env` serves for it records
/// (`text`): its `cron`, and for a time-range model its grain, `start` and `end`; `None` when
/// they are the working tree's. Nothing else is taken from the metadata: `status` reads no other
/// setting to judge lag or a refresh.
///
/// # Errors
/// Why the served metadata cannot say, for a model `status` judges (time-range, or on a `cron`
/// in the tree or as served): no metadata recorded, another kind than the tree's (an unapplied
/// kind change), a grain, `start` or `end` missing or unreadable, a cron that no longer parses.
fn as_served(model: &crate::core::Model, text: &str, env: &str) -> Result<Option<crate::core::Model>, String> {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let cron = &v["cron"];
    // Only time-range models and the kinds refreshed whole on a cron get a line.
    let judged = |tag: &str, cron: bool| tag == "incremental_by_time_range" || (cron && REFRESHED_WHOLE.contains(&tag));
    let Some(tag) = v["kind"]["tag"].as_str() else {
        if judged(model.kind.tag(), model.cron.is_some()) {
            return Err(format!("the state store records no metadata `{env}` serves for it, so not its schedule (the next apply records it)"));
        }
        return Ok(None);
    };
    if tag != model.kind.tag() {
        if judged(tag, !cron.is_null()) || judged(model.kind.tag(), model.cron.is_some()) {
            return Err(format!("`{env}` serves it as `{tag}`, the working tree defines it as `{}`: apply to judge it", model.kind.tag()));
        }
        return Ok(None);
    }
    let mut served = model.clone();
    served.cron = match cron {
        serde_json::Value::Null => None,
        serde_json::Value::String(c) => {
            crate::core::cron::parse(c).map_err(|e| format!("the cron `{env}` serves for it no longer parses: {e}"))?;
            Some(c.clone())
        }
        other => return Err(format!("the metadata `{env}` serves for it has an unreadable `cron` ({other})")),
    };
    if let Kind::IncrementalByTimeRange(t) = &mut served.kind {
        let unreadable = |what: &str| format!("the metadata `{env}` serves for it lacks a readable `{what}`");
        let instant = |x: &serde_json::Value| x.as_str().and_then(|s| crate::core::interval::parse_instant(s).ok());
        t.grain = v["kind"]["grain"].as_str().and_then(crate::core::Grain::parse).ok_or_else(|| unreadable("grain"))?;
        t.start = instant(&v["schedule"]["start"]).ok_or_else(|| unreadable("start"))?;
        t.end = match &v["schedule"]["end"] {
            serde_json::Value::Null => None,
            end => Some(instant(end).ok_or_else(|| unreadable("end"))?),
        };
    }
    Ok((served != *model).then_some(served))
}

/// Counts `l`'s lag over the intervals its version `fp` or `other` (another version on its table)
/// has done there: what its view shows, as its plan counts them when both have the same query
/// (`plan::WriterHolds`). Only intervals inside the model's `start`/`end` make gaps: one outside
/// them (restated, then `end` moved earlier) is never recomputed, whatever is done after it.
#[allow(clippy::too_many_arguments)]
fn table_lag(
    state: &dyn crate::state::StateStore,
    dag: &crate::core::Dag,
    name: &ModelName,
    t: &crate::core::TimeRange,
    l: &mut Lag,
    fp: &str,
    other: &str,
    now: Millis,
) -> Result<()> {
    let mut done = state.done_intervals(&l.model, fp)?;
    done.extend(state.done_intervals(&l.model, other)?);
    let due = t.grain.floor(dag.due_at(name, now));
    let horizon = t.end.map_or(due, |e| e.min(due));
    let first = t.grain.floor(t.start);
    l.done_up_to = done.iter().next_back().map(|s| t.grain.next(*s));
    let from = l.done_up_to.unwrap_or(first);
    l.behind = t.grain.count(from, horizon).max(0);
    l.gaps = l.done_up_to.map_or(0, |up_to| {
        let up_to = t.end.map_or(up_to, |e| up_to.min(t.grain.next(t.grain.floor(e - 1))));
        (t.grain.count(first, up_to) - done.range(first..up_to.max(first)).count() as i64).max(0)
    });
    Ok(())
}

/// Asks the signals which of the late models' due intervals (`candidates`) are ready (as `run`
/// would: a model downstream of a waiting one waits too) and records the waiting ones in
/// `lags`. Signals' queries run on a read-only engine connection. `Some(error)` when they could
/// not be evaluated (the lags then stay as they are).
fn waiting_on_signals(
    project: &crate::project::Project,
    dag: &crate::core::Dag,
    candidates: &std::collections::BTreeMap<ModelName, Vec<crate::core::Interval>>,
    lags: &mut [Lag],
) -> Option<String> {
    if candidates.is_empty() || !dag.models().any(|m| !m.signals.is_empty()) {
        return None;
    }
    let signals = match crate::script::signals::Signals::of(&project.config) {
        Ok(s) => s,
        Err(e) => return Some(e.to_string()),
    };
    let mut engine = match crate::engine::open(&project.config, crate::engine::Access::ReadOnly) {
        Ok(e) => e,
        Err(e) => return Some(format!("cannot open the engine: {e}")),
    };
    let held = crate::apply::signals::hold(dag, candidates, &std::collections::BTreeMap::new(), &mut |m, intervals| {
        signals.ready(m, intervals, &mut |sql| crate::engine::read_only_query(&mut *engine, sql))
    });
    match held {
        Ok(held) => {
            for w in held.waiting {
                if let Some(l) = lags.iter_mut().find(|l| l.model == w.model.to_string()) {
                    // Those before its newest done interval are gaps that wait.
                    let gaps = w.intervals.iter().filter(|i| l.done_up_to.is_some_and(|u| i.start < u)).count();
                    l.gaps_waiting += gaps;
                    l.gaps -= gaps as i64;
                    l.waiting += w.intervals.len() - gaps;
                    if l.waiting_on.is_none() || w.reason == "upstream" {
                        l.waiting_on = Some(w.upstream.map_or_else(|| "signal".to_string(), |u| u.to_string()));
                    }
                }
            }
            None
        }
        Err(e) => Some(e),
    }
}

fn grain_name(g: crate::core::interval::Grain) -> &'static str {
    g.as_str()
}

/// The newest tick of `env` whose outcome is `processed`, `nothing-due` or `error`: the first
/// of `recent` (newest first), else read further back.
fn newest_deciding_tick(state: &dyn crate::state::StateStore, env: &str, recent: &[Tick]) -> Result<Option<Tick>> {
    let deciding = |t: &&Tick| matches!(t.outcome.as_str(), "processed" | "nothing-due" | "error");
    if let Some(t) = recent.iter().find(deciding) {
        return Ok(Some(t.clone()));
    }
    if recent.len() < TICKS {
        return Ok(None);
    }
    let mut limit = TICKS;
    loop {
        limit = limit.saturating_mul(8);
        let older = state.ticks(env, limit)?;
        if let Some(t) = older.iter().find(deciding) {
            return Ok(Some(t.clone()));
        }
        if older.len() < limit {
            return Ok(None);
        }
    }
}

fn tick_json(t: &Tick) -> serde_json::Value {
    json!({"startedAt": t.started_at, "finishedAt": t.finished_at, "outcome": t.outcome, "processed": t.processed, "detail": t.detail})
}

fn tick_mark(t: &Tick) -> &'static str {
    match t.outcome.as_str() {
        "processed" | "nothing-due" => "✓",
        "error" => "✗",
        _ => "…",
    }
}

fn tick_text(t: &Tick) -> String {
    let ms = match (crate::core::interval::parse_instant(&t.started_at), crate::core::interval::parse_instant(&t.finished_at)) {
        (Ok(s), Ok(f)) => format!(" ({} ms)", f - s),
        _ => String::new(),
    };
    let processed: Vec<String> = t.processed.iter().map(|(m, n)| if *n > 0 { format!("{m} ({n})") } else { m.clone() }).collect();
    let detail = match (&t.detail, processed.is_empty()) {
        (Some(d), _) => format!("  {}", d.lines().next().unwrap_or_default()),
        (None, false) => format!("  {}", processed.join(", ")),
        (None, true) => String::new(),
    };
    format!("{}  {}{ms}{detail}", t.started_at, t.outcome)
}

#[cfg(test)]
mod tests {
    use super::as_served;
    use crate::core::interval::{Grain, parse_instant};
    use crate::core::kind::DEFAULT_BATCH_SIZE;
    use crate::core::{Column, Fragment, Kind, Location, Model, ModelName, Schema, TimeRange};

    /// The time-range model `s.h` of `grain` from `start`, on `cron`.
    fn model(cron: Option<&str>, grain: Grain, start: &str) -> Model {
        let mut body = Fragment::default();
        body.push_text("SELECT t FROM range(1)");
        let kind = Kind::IncrementalByTimeRange(TimeRange {
            time_column: "t".into(),
            start: parse_instant(start).unwrap(),
            end: None,
            grain,
            batch_size: DEFAULT_BATCH_SIZE,
            lookback: 0,
            auto_restatement_intervals: 0,
        });
        let schema = Schema(vec![Column { name: "t".into(), ty: "timestamp".into() }]);
        let mut m = Model::new(ModelName::parse("s.h").unwrap(), kind, schema, Some(body), Location { file: "m.lua".into(), line: 1 });
        m.cron = cron.map(str::to_string);
        m
    }

    #[test]
    fn a_model_is_judged_by_the_schedule_its_environment_serves() {
        let served = model(Some("0 * * * *"), Grain::Hour, "2026-01-01");
        let text = crate::plan::metadata_text(&served);
        assert_eq!(as_served(&served, &text, "prod"), Ok(None), "the tree's schedule is the served one");
        // Another cron, grain and start in the tree, not applied: the served ones judge it.
        assert_eq!(as_served(&model(Some("0 0 * * *"), Grain::Day, "2026-02-01"), &text, "prod"), Ok(Some(served.clone())));
        let uncronned = as_served(&model(None, Grain::Hour, "2026-01-01"), &text, "prod").unwrap().expect("the served cron");
        assert_eq!(uncronned.cron.as_deref(), Some("0 * * * *"));
        // Nothing recorded, another kind in the tree, a served cron that no longer parses: not
        // judged, saying why, rather than judged by the tree.
        assert!(as_served(&served, "{}", "prod").unwrap_err().starts_with("the state store records no metadata `prod` serves for it"));
        let mut full = served.clone();
        full.kind = Kind::Full;
        full.cron = None;
        assert_eq!(
            as_served(&full, &text, "prod").unwrap_err(),
            "`prod` serves it as `incremental_by_time_range`, the working tree defines it as `full`: apply to judge it"
        );
        let mut stale: serde_json::Value = serde_json::from_str(&text).unwrap();
        stale["cron"] = "0 0 * * sun-sun".into();
        assert!(as_served(&served, &stale.to_string(), "prod").unwrap_err().starts_with("the cron `prod` serves for it no longer parses: "));
        // A kind nothing judges on either side (a view made a `full` model without a cron).
        let mut view = served.clone();
        view.kind = Kind::View;
        view.cron = None;
        assert_eq!(as_served(&full, &crate::plan::metadata_text(&view), "prod"), Ok(None));
    }
}
