//! Time intervals: half-open `[start, end)` in UTC, milliseconds since the Unix epoch.
//!
//! This module is the single place that turns instants into text (ISO for JSON and the ledger,
//! SQL literals for every SELECT and DELETE), so a batch, its DELETE, its audit window and its
//! ledger row can never disagree (DECISIONS.md, "Correctness we add").
//!
//! Lookback follows sqlmesh rather than the original: when an interval is missing, the
//! `lookback` intervals before it are recomputed with it. A model with nothing missing has
//! nothing to recompute, so a plan right after an apply is empty (the original re-read the tail
//! on every plan, reference `core-semantics.md` §10 items 9 and 17).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Milliseconds since 1970-01-01T00:00:00Z.
pub type Millis = i64;

/// Width of one interval of a time-range model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Grain {
    /// 86 400 000 ms, aligned on UTC midnight.
    Day,
    /// 3 600 000 ms, aligned on UTC hours.
    Hour,
}

impl Grain {
    /// Width in milliseconds.
    pub fn millis(self) -> Millis {
        match self {
            Grain::Day => 86_400_000,
            Grain::Hour => 3_600_000,
        }
    }

    /// Largest aligned instant `<= t`.
    pub fn floor(self, t: Millis) -> Millis {
        t.div_euclid(self.millis()) * self.millis()
    }

    /// Parses `day` or `hour`.
    pub fn parse(s: &str) -> Option<Grain> {
        match s {
            "day" => Some(Grain::Day),
            "hour" => Some(Grain::Hour),
            _ => None,
        }
    }

    /// `day` or `hour`.
    pub fn as_str(self) -> &'static str {
        match self {
            Grain::Day => "day",
            Grain::Hour => "hour",
        }
    }
}

/// A half-open UTC range `[start, end)` in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval {
    /// Inclusive lower bound.
    pub start: Millis,
    /// Exclusive upper bound.
    pub end: Millis,
}

impl Interval {
    /// `[start, end)`.
    pub fn new(start: Millis, end: Millis) -> Self {
        Self { start, end }
    }

    /// The grain-sized pieces of this range (it must be aligned on `grain`).
    pub fn split(self, grain: Grain) -> Vec<Interval> {
        let g = grain.millis();
        let mut out = Vec::new();
        let mut t = self.start;
        while t < self.end {
            out.push(Interval::new(t, (t + g).min(self.end)));
            t += g;
        }
        out
    }
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {})", to_iso(self.start), to_iso(self.end))
    }
}

impl Serialize for Interval {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Interval", 2)?;
        st.serialize_field("start", &to_iso(self.start))?;
        st.serialize_field("end", &to_iso(self.end))?;
        st.end()
    }
}

/// Every whole interval a time-range model wants at `now`: from `floor(start)` by `grain`, only
/// intervals that have fully ended (`end <= floor(now)`), and, when `until` is set, only those
/// starting before `until`.
pub fn wanted(start: Millis, until: Option<Millis>, grain: Grain, now: Millis) -> Vec<Interval> {
    let g = grain.millis();
    let limit = grain.floor(now);
    let mut out = Vec::new();
    let mut t = grain.floor(start);
    while t + g <= limit && until.is_none_or(|u| t < u) {
        out.push(Interval::new(t, t + g));
        t += g;
    }
    out
}

/// The grain intervals to compute: every wanted interval whose start is not in `done`, each
/// extended backwards by `lookback` wanted intervals (sqlmesh semantics, see the module docs).
/// Failed intervals must not be in `done`. Result is sorted and de-duplicated.
pub fn missing(wanted: &[Interval], done: &BTreeSet<Millis>, lookback: u32) -> Vec<Interval> {
    let mut picked = BTreeSet::new();
    for (i, iv) in wanted.iter().enumerate() {
        if !done.contains(&iv.start) {
            let from = i.saturating_sub(lookback as usize);
            for w in &wanted[from..=i] {
                picked.insert(*w);
            }
        }
    }
    picked.into_iter().collect()
}

/// Merges sorted intervals into maximal contiguous ranges.
pub fn merge(intervals: &[Interval]) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::new();
    for iv in intervals {
        match out.last_mut() {
            Some(last) if last.end == iv.start => last.end = iv.end,
            _ => out.push(*iv),
        }
    }
    out
}

/// Cuts each merged range into consecutive batches of at most `batch_size` grain steps (the last
/// batch of a range may be shorter). `batch_size` of 0 is treated as 1.
pub fn batches(ranges: &[Interval], grain: Grain, batch_size: u32) -> Vec<Interval> {
    let step = grain.millis() * i64::from(batch_size.max(1));
    let mut out = Vec::new();
    for r in ranges {
        let mut t = r.start;
        while t < r.end {
            out.push(Interval::new(t, (t + step).min(r.end)));
            t += step;
        }
    }
    out
}

/// ISO-8601 UTC with milliseconds, e.g. `2026-01-02T00:00:00.000Z`. Sorts lexicographically in
/// time order for years 0000–9999.
pub fn to_iso(t: Millis) -> String {
    match jiff::Timestamp::from_millisecond(t) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => format!("invalid-timestamp({t})"),
    }
}

/// The SQL literal every engine statement uses for an instant:
/// `TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.fff]'`, naive UTC (engines run with `TimeZone = 'UTC'`).
pub fn to_sql_literal(t: Millis) -> String {
    match jiff::Timestamp::from_millisecond(t) {
        Ok(ts) => {
            let base = ts.strftime("%Y-%m-%d %H:%M:%S").to_string();
            if t.rem_euclid(1000) == 0 { format!("TIMESTAMP '{base}'") } else { format!("TIMESTAMP '{base}.{:03}'", t.rem_euclid(1000)) }
        }
        Err(_) => "NULL".to_string(),
    }
}

/// `DATE 'YYYY-MM-DD'`: the UTC date of `t` (a midnight when it bounds a `date` time column).
pub fn to_date_literal(t: Millis) -> String {
    match jiff::Timestamp::from_millisecond(t) {
        Ok(ts) => format!("DATE '{}'", ts.strftime("%Y-%m-%d")),
        Err(_) => "NULL".to_string(),
    }
}

/// Parses an instant: `YYYY-MM-DD` (UTC midnight), `YYYY-MM-DD[T ]HH:MM[:SS[.fff]]` (UTC), or
/// an RFC 3339 timestamp with `Z` or an offset.
///
/// # Errors
/// A message saying which forms are accepted.
pub fn parse_instant(s: &str) -> Result<Millis, String> {
    let s = s.trim();
    if let Ok(ts) = s.parse::<jiff::Timestamp>() {
        return Ok(ts.as_millisecond());
    }
    if let Ok(dt) = s.parse::<jiff::civil::DateTime>()
        && let Ok(ts) = jiff::tz::TimeZone::UTC.to_timestamp(dt)
    {
        return Ok(ts.as_millisecond());
    }
    if let Ok(d) = s.parse::<jiff::civil::Date>()
        && let Ok(ts) = jiff::tz::TimeZone::UTC.to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
    {
        return Ok(ts.as_millisecond());
    }
    Err(format!("`{s}` is not a date or timestamp (use `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS` in UTC, or RFC 3339)"))
}

/// Parses a duration as `--wait` takes it and `[environments] ttl` is written: a number
/// (fractions allowed) followed by `ms`, `s`, `m`, `h`, `d` (24 hours) or `w` (7 days), or a
/// bare number of seconds: `500ms`, `30s`, `10m`, `1.5h`, `7d`, `2w`.
///
/// # Errors
/// Anything else (a negative or unknown unit), naming the value.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let (num, unit) = t.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((t, ""), |i| t.split_at(i));
    let value: f64 = num.parse().map_err(|_| format!("`{text}` is not a duration (e.g. 30s, 10m, 7d)"))?;
    let secs = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        "w" => value * 7.0 * 86_400.0,
        _ => return Err(format!("`{text}` is not a duration (unit must be ms, s, m, h, d or w)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{text}` is not a duration"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The current instant, in milliseconds. Only the CLI and embedders call this; planning takes
/// `now` as an argument so tests can pin it.
pub fn now_millis() -> Millis {
    jiff::Timestamp::now().as_millisecond()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    fn t(s: &str) -> Millis {
        parse_instant(s).unwrap()
    }

    #[test]
    fn wanted_counts_only_finished_intervals() {
        let w = wanted(t("2026-01-01"), None, Grain::Day, t("2026-01-04T10:00:00Z"));
        assert_eq!(w.len(), 3);
        assert_eq!(w[0], Interval::new(t("2026-01-01"), t("2026-01-02")));
        assert_eq!(w[2].end, t("2026-01-04"));
        let until = wanted(t("2026-01-01"), Some(t("2026-01-03")), Grain::Day, t("2026-02-01"));
        assert_eq!(until.len(), 2);
    }

    #[test]
    fn missing_includes_gaps_not_only_the_tail() {
        let w = wanted(t("2026-01-01"), None, Grain::Day, t("2026-01-06"));
        let done: BTreeSet<_> = [t("2026-01-01"), t("2026-01-03"), t("2026-01-04")].into();
        let m = missing(&w, &done, 0);
        assert_eq!(m.iter().map(|i| i.start).collect::<Vec<_>>(), vec![t("2026-01-02"), t("2026-01-05")]);
        let merged = merge(&m);
        assert_eq!(merged.len(), 2);
    }

    #[test]
    fn lookback_extends_missing_backwards_only_when_something_is_missing() {
        let w = wanted(t("2026-01-01"), None, Grain::Day, t("2026-01-06"));
        let all: BTreeSet<_> = w.iter().map(|i| i.start).collect();
        assert!(missing(&w, &all, 2).is_empty());
        let mut some = all.clone();
        some.remove(&t("2026-01-05"));
        let m = missing(&w, &some, 2);
        assert_eq!(merge(&m), vec![Interval::new(t("2026-01-03"), t("2026-01-06"))]);
    }

    #[test]
    fn batches_cut_ranges_by_batch_size() {
        let r = [Interval::new(0, 10 * DAY)];
        let b = batches(&r, Grain::Day, 3);
        assert_eq!(b.len(), 4);
        assert_eq!(b[3], Interval::new(9 * DAY, 10 * DAY));
        assert_eq!(batches(&r, Grain::Day, 30), vec![r[0]]);
    }

    #[test]
    fn rendering_is_utc_with_millis() {
        assert_eq!(to_iso(t("2026-01-02")), "2026-01-02T00:00:00.000Z");
        assert_eq!(to_sql_literal(t("2026-01-02T03:04:05Z")), "TIMESTAMP '2026-01-02 03:04:05'");
        assert_eq!(to_sql_literal(t("2026-01-02T03:04:05.007Z")), "TIMESTAMP '2026-01-02 03:04:05.007'");
        assert_eq!(t("2026-01-02 10:00"), t("2026-01-02T10:00:00Z"));
        assert_eq!(t("2026-01-02T12:00:00+02:00"), t("2026-01-02T10:00:00Z"));
        assert!(parse_instant("yesterday").is_err());
    }
}
