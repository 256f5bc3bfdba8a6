//! Signals at `run`: which of a model's candidate intervals are ready (SPEC §4).
//!
//! Before `run` computes missing intervals, every time-range model's candidates (its missing
//! due intervals, one per grain interval) are put to its signals ([`crate::core::SignalUse`],
//! evaluated by the caller's `check`); an interval is ready when every signal says so. The
//! intervals not ready *wait*: they are not computed and not recorded, and the next run asks
//! again. A model's data is complete only up to the start of its first waiting interval, so
//! every model downstream (through any kind) waits for its intervals ending after that instant,
//! whatever its own signals say: a child never computes an interval over data its parent has
//! not written yet. Parents come first ([`crate::core::Dag::models`]), so one pass decides.

use crate::core::interval::{self, Interval, Millis, to_iso};
use crate::core::{Dag, Model, ModelName};
use crate::plan::Plan;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A model's intervals held back.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The model.
    pub model: ModelName,
    /// The intervals waiting (grain intervals, in order).
    #[serde(serialize_with = "ser_intervals")]
    pub intervals: Vec<Interval>,
    /// Why: `signal` (its own signals said not ready) or `upstream` (a model it reads waits).
    pub reason: &'static str,
    /// For `upstream`: the waiting model upstream it reads (directly or not) that holds the
    /// earliest data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<ModelName>,
}

fn ser_intervals<S: serde::Serializer>(v: &[Interval], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for i in v {
        seq.serialize_element(&serde_json::json!({"start": to_iso(i.start), "end": to_iso(i.end)}))?;
    }
    seq.end()
}

impl Waiting {
    /// `a.b: 1 interval (2026-01-02T00:00:00Z..) waits on its signals` in words.
    pub fn describe(&self) -> String {
        let from = self.intervals.first().map(|i| to_iso(i.start)).unwrap_or_default();
        let n = self.intervals.len();
        let why = match &self.upstream {
            Some(u) if self.reason == "upstream" => format!("upstream `{u}` waits"),
            _ => "its signals say not ready".to_string(),
        };
        format!("{}: {n} interval{} from {from} ({why})", self.model, if n == 1 { "" } else { "s" })
    }
}

/// What the signals decided: per model, the candidates that are ready, and what waits.
#[derive(Debug, Default)]
pub struct Held {
    /// Per model with candidates, the ready ones.
    pub ready: BTreeMap<ModelName, Vec<Interval>>,
    /// Per model with intervals held back, in topological order.
    pub waiting: Vec<Waiting>,
}

/// The computed intervals (their starts) of a model's version (name, fingerprint).
pub type Done<'a> = dyn FnMut(&ModelName, &str) -> Result<BTreeSet<Millis>, String> + 'a;

/// A signal check: which of `intervals` (in order) are ready for `model`, one verdict each.
pub type Check<'a> = dyn FnMut(&Model, &[Interval]) -> Result<Vec<bool>, String> + 'a;

/// Decides which of `candidates` (per model: grain intervals, in order) are ready, asking
/// `check` for the models that have signals (only about intervals not already held upstream).
/// `done` holds, per model, the starts of candidates already computed (a lookback or an
/// auto-restatement recomputes them): one a signal says is not ready is left as it is — not
/// recomputed, and not waiting, since its data is there — so it holds nothing downstream.
///
/// # Errors
/// The first signal failure (its message names the signal and the model).
pub fn hold(
    dag: &Dag,
    candidates: &BTreeMap<ModelName, Vec<Interval>>,
    done: &BTreeMap<ModelName, BTreeSet<Millis>>,
    check: &mut Check,
) -> Result<Held, String> {
    let mut held = Held::default();
    // Per model: the instant its data is complete up to, when something upstream (or itself)
    // waits, and the waiting model that set it.
    let mut horizon: HashMap<ModelName, (Millis, ModelName)> = HashMap::new();
    for m in dag.models() {
        let cap = m.parents().iter().filter_map(|p| horizon.get(p)).min_by_key(|(t, _)| *t).cloned();
        let mine = candidates.get(&m.name).filter(|c| !c.is_empty());
        let Some(mine) = mine else {
            if let Some(c) = cap {
                horizon.insert(m.name.clone(), c);
            }
            continue;
        };
        let (upstream, rest): (Vec<Interval>, Vec<Interval>) = mine.iter().partition(|i| cap.as_ref().is_some_and(|(t, _)| i.end > *t));
        let verdicts = if m.signals.is_empty() || rest.is_empty() { vec![true; rest.len()] } else { check(m, &rest)? };
        let (mut ready, mut by_signal) = (Vec::new(), Vec::new());
        let computed = done.get(&m.name);
        for (i, ok) in rest.into_iter().zip(verdicts) {
            if ok {
                ready.push(i);
            } else if !computed.is_some_and(|d| d.contains(&i.start)) {
                by_signal.push(i);
            }
        }
        // A model reading its own earlier intervals (`@this`) computes none after one that waits:
        // it would read that interval absent (and not be recomputed when it lands).
        if m.body.as_ref().is_some_and(|b| b.reads_itself())
            && let Some(t) = by_signal.first().map(|i| i.start)
        {
            let after: Vec<Interval>;
            (ready, after) = ready.into_iter().partition(|i| i.start < t);
            by_signal.extend(after.into_iter().filter(|i| !computed.is_some_and(|d| d.contains(&i.start))));
            by_signal.sort();
        }
        let first_wait = by_signal.first().map(|i| i.start).into_iter().chain(upstream.first().map(|i| i.start)).min();
        if let Some(t) = first_wait {
            let own = (t, m.name.clone());
            let h = match &cap {
                Some(c) if c.0 <= t => c.clone(),
                _ => own,
            };
            horizon.insert(m.name.clone(), h);
        } else if let Some(c) = cap.clone() {
            horizon.insert(m.name.clone(), c);
        }
        if !by_signal.is_empty() {
            held.waiting.push(Waiting { model: m.name.clone(), intervals: by_signal, reason: "signal", upstream: None });
        }
        if !upstream.is_empty() {
            held.waiting.push(Waiting { model: m.name.clone(), intervals: upstream, reason: "upstream", upstream: cap.map(|(_, u)| u) });
        }
        held.ready.insert(m.name.clone(), ready);
    }
    Ok(held)
}

/// Applies the signals to a `run`'s plan: every time-range action's backfill (missing intervals,
/// and the done ones a lookback or an auto-restatement recomputes) keeps only its ready
/// intervals ([`companions_of_ready`]); `done` reads a version's computed intervals ([`hold`]);
/// `inherited` are the models an ancestor's auto-restatement reaches. Returns what waits.
///
/// # Errors
/// As [`hold`], or `done`'s failure.
pub fn hold_plan(dag: &Dag, plan: &mut Plan, inherited: &BTreeSet<ModelName>, done: &mut Done, check: &mut Check) -> Result<Vec<Waiting>, String> {
    // Nothing to ask and nothing to hold without a signal in the project.
    if !dag.models().any(|m| !m.signals.is_empty()) {
        return Ok(Vec::new());
    }
    let mut candidates = BTreeMap::new();
    for a in &plan.actions {
        if a.backfill.is_empty() {
            continue;
        }
        let Some(t) = dag.get(&a.name).and_then(|m| m.kind.time_range()) else { continue };
        candidates.insert(a.name.clone(), a.backfill.iter().flat_map(|i| i.split(t.grain)).collect::<Vec<_>>());
    }
    let mut computed = BTreeMap::new();
    for a in plan.actions.iter().filter(|a| candidates.contains_key(&a.name) && dag.get(&a.name).is_some_and(|m| !m.signals.is_empty())) {
        computed.insert(a.name.clone(), done(&a.name, a.fingerprint.as_str())?);
    }
    let held = hold(dag, &candidates, &computed, check)?;
    for a in &mut plan.actions {
        if let Some(ready) = held.ready.get(&a.name) {
            let ready = if inherited.contains(&a.name) { ready.clone() } else { companions_of_ready(ready, computed.get(&a.name), &held.waiting, a) };
            a.backfill = interval::merge(&ready);
            a.intervals = ready.len();
        }
    }
    Ok(held.waiting)
}

/// `ready`, less the done intervals that only accompany missing ones now waiting on the model's
/// own signals: a `lookback` recomputes the intervals before a missing one, an
/// `auto_restatement_intervals` those before the newest, *with* it — recomputed without it, they
/// would be recomputed again by every run until it lands (and every `full` model below rebuilt).
/// A done interval is kept when a ready missing interval ends after it; all are kept for a
/// version a parent's rewrite makes recompute them (`recompute`: they are stale now), and for
/// one an ancestor's auto-restatement reaches (`inherited` in [`hold_plan`]).
fn companions_of_ready(ready: &[Interval], done: Option<&BTreeSet<Millis>>, waiting: &[Waiting], action: &crate::plan::Action) -> Vec<Interval> {
    let waits_on_signal = waiting.iter().any(|w| w.model == action.name && w.reason == "signal");
    let Some(done) = done.filter(|_| waits_on_signal && action.recompute.is_none()) else { return ready.to_vec() };
    let last_ready_missing = ready.iter().filter(|i| !done.contains(&i.start)).map(|i| i.end).max();
    ready.iter().filter(|i| !done.contains(&i.start) || last_ready_missing.is_some_and(|end| i.start < end)).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interval::Grain;
    use crate::core::{Kind, SignalUse, TimeRange};

    const DAY: Millis = 86_400_000;

    fn model(name: &str, time_range: bool, parents: &[&str], signals: &[&str]) -> Model {
        let kind = if time_range {
            Kind::IncrementalByTimeRange(TimeRange {
                time_column: "x".into(),
                start: 0,
                end: None,
                grain: Grain::Day,
                batch_size: 30,
                lookback: 0,
                auto_restatement_intervals: 0,
            })
        } else {
            Kind::View
        };
        let m = Model::fixture(name, kind, parents);
        let uses = signals.iter().map(|s| SignalUse { name: (*s).into(), args: "{}".into(), location: m.location.clone() }).collect();
        Model { signals: uses, ..m }
    }

    fn days(from: i64, to: i64) -> Vec<Interval> {
        (from..to).map(|d| Interval::new(d * DAY, (d + 1) * DAY)).collect()
    }

    #[test]
    fn a_waiting_interval_holds_its_model_and_everything_downstream_from_its_start() {
        // s.a (signal: day 1 not ready) → s.v (a view) → s.c (its own signal); s.a → s.d.
        let dag = Dag::build(vec![
            model("s.a", true, &[], &["landed"]),
            model("s.v", false, &["s.a"], &[]),
            model("s.c", true, &["s.v"], &["landed"]),
            model("s.d", true, &["s.a"], &[]),
            model("s.free", true, &[], &[]),
        ])
        .unwrap();
        let n = |s: &str| ModelName::parse(s).unwrap();
        let candidates: BTreeMap<ModelName, Vec<Interval>> = ["s.a", "s.c", "s.d", "s.free"].iter().map(|m| (n(m), days(0, 4))).collect();
        let mut asked: Vec<(String, Vec<Interval>)> = Vec::new();
        let held = hold(&dag, &candidates, &BTreeMap::new(), &mut |m, intervals| {
            asked.push((m.name.to_string(), intervals.to_vec()));
            Ok(intervals.iter().map(|i| i.start != DAY).collect())
        })
        .unwrap();
        // s.a computes the days its signal finds ready, day 1 waits; its readers stop before day 1.
        assert_eq!(held.ready[&n("s.a")], [days(0, 1), days(2, 4)].concat());
        assert_eq!(held.ready[&n("s.c")], days(0, 1));
        assert_eq!(held.ready[&n("s.d")], days(0, 1));
        assert_eq!(held.ready[&n("s.free")], days(0, 4));
        // s.c's signal is asked only about what upstream does not hold already.
        assert_eq!(asked, vec![("s.a".to_string(), days(0, 4)), ("s.c".to_string(), days(0, 1))]);
        let mut w: Vec<(String, Vec<Interval>, &str, Option<String>)> =
            held.waiting.iter().map(|w| (w.model.to_string(), w.intervals.clone(), w.reason, w.upstream.as_ref().map(ToString::to_string))).collect();
        w.sort();
        assert_eq!(
            w,
            vec![
                ("s.a".to_string(), days(1, 2), "signal", None),
                ("s.c".to_string(), days(1, 4), "upstream", Some("s.a".to_string())),
                ("s.d".to_string(), days(1, 4), "upstream", Some("s.a".to_string())),
            ]
        );
    }

    #[test]
    fn a_signal_failure_is_the_error() {
        let dag = Dag::build(vec![model("s.a", true, &[], &["landed"])]).unwrap();
        let candidates: BTreeMap<ModelName, Vec<Interval>> = [(ModelName::parse("s.a").unwrap(), days(0, 2))].into_iter().collect();
        let e = hold(&dag, &candidates, &BTreeMap::new(), &mut |_, _| Err("signal `landed` failed".to_string())).unwrap_err();
        assert_eq!(e, "signal `landed` failed");
    }
}
