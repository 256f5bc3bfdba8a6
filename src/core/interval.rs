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

/// Width of one interval of a time-range model. Every grain is aligned in UTC: minutes and hours
/// on the clock, days on midnight, weeks on Monday midnight (ISO weeks), months on the first day
/// of the month at midnight. Month intervals have unequal lengths (28 to 31 days), so interval
/// arithmetic goes through [`Grain::next`] and [`Grain::add`], never a fixed width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Grain {
    /// 5 minutes (`5m`, `five_minute`), aligned on the UTC clock.
    FiveMinute,
    /// 15 minutes (`15m`, `quarter_hour`), aligned on the UTC clock.
    QuarterHour,
    /// 3 600 000 ms, aligned on UTC hours.
    Hour,
    /// 86 400 000 ms, aligned on UTC midnight.
    Day,
    /// 7 days, aligned on Monday 00:00 UTC (ISO 8601 weeks).
    Week,
    /// A calendar month (28 to 31 days), aligned on the 1st at 00:00 UTC.
    Month,
}

const MINUTE_MS: Millis = 60_000;
const DAY_MS: Millis = 86_400_000;
/// 1970-01-01 was a Thursday: Monday-aligned weeks are offset by 3 days from the epoch.
const WEEK_OFFSET_MS: Millis = 3 * DAY_MS;

impl Grain {
    /// Every grain, finest first.
    pub const ALL: [Grain; 6] = [Grain::FiveMinute, Grain::QuarterHour, Grain::Hour, Grain::Day, Grain::Week, Grain::Month];

    /// Width in milliseconds of a fixed-width grain; `None` for `month`.
    pub fn fixed_millis(self) -> Option<Millis> {
        match self {
            Grain::FiveMinute => Some(5 * MINUTE_MS),
            Grain::QuarterHour => Some(15 * MINUTE_MS),
            Grain::Hour => Some(60 * MINUTE_MS),
            Grain::Day => Some(DAY_MS),
            Grain::Week => Some(7 * DAY_MS),
            Grain::Month => None,
        }
    }

    /// The shortest interval of this grain, in milliseconds (28 days for `month`).
    pub fn min_millis(self) -> Millis {
        self.fixed_millis().unwrap_or(28 * DAY_MS)
    }

    /// Largest aligned instant `<= t`.
    pub fn floor(self, t: Millis) -> Millis {
        match self {
            Grain::Week => {
                let w = 7 * DAY_MS;
                (t + WEEK_OFFSET_MS).div_euclid(w) * w - WEEK_OFFSET_MS
            }
            Grain::Month => {
                let (y, m) = year_month(t);
                month_start(y, m)
            }
            g => {
                let w = g.min_millis();
                t.div_euclid(w) * w
            }
        }
    }

    /// The start of the interval after the one holding `t` (for an aligned `t`, the end of the
    /// interval starting at `t`).
    pub fn next(self, t: Millis) -> Millis {
        self.add(t, 1)
    }

    /// The start of the interval `n` intervals after the one holding `t` (`n` may be negative).
    /// Saturates at the ends of the representable range.
    pub fn add(self, t: Millis, n: i64) -> Millis {
        let base = self.floor(t);
        match self.fixed_millis() {
            Some(w) => base.saturating_add(w.saturating_mul(n)),
            None => {
                let (y, m) = year_month(base);
                let index = y * 12 + (m - 1) + n;
                month_start(index.div_euclid(12), index.rem_euclid(12) + 1)
            }
        }
    }

    /// How many whole intervals of this grain lie between the aligned instants `from` and `to`
    /// (negative when `to < from`).
    pub fn count(self, from: Millis, to: Millis) -> i64 {
        match self.fixed_millis() {
            Some(w) => (self.floor(to) - self.floor(from)) / w,
            None => {
                let (fy, fm) = year_month(from);
                let (ty, tm) = year_month(to);
                (ty * 12 + tm) - (fy * 12 + fm)
            }
        }
    }

    /// Parses a grain: `5m`/`five_minute`, `15m`/`quarter_hour`, `hour`, `day`, `week`, `month`.
    pub fn parse(s: &str) -> Option<Grain> {
        match s {
            "5m" | "five_minute" => Some(Grain::FiveMinute),
            "15m" | "quarter_hour" => Some(Grain::QuarterHour),
            "hour" => Some(Grain::Hour),
            "day" => Some(Grain::Day),
            "week" => Some(Grain::Week),
            "month" => Some(Grain::Month),
            _ => None,
        }
    }

    /// The canonical name: `five_minute`, `quarter_hour`, `hour`, `day`, `week` or `month` (what
    /// the fingerprint, the JSON reports and `no_gaps` see).
    pub fn as_str(self) -> &'static str {
        match self {
            Grain::FiveMinute => "five_minute",
            Grain::QuarterHour => "quarter_hour",
            Grain::Hour => "hour",
            Grain::Day => "day",
            Grain::Week => "week",
            Grain::Month => "month",
        }
    }

    /// How a model spells it, as the docs do: `5m`, `15m`, `hour`, `day`, `week` or `month`.
    pub fn spelling(self) -> &'static str {
        match self {
            Grain::FiveMinute => "5m",
            Grain::QuarterHour => "15m",
            other => other.as_str(),
        }
    }

    /// `Ok` when `t` starts an interval of this grain; otherwise the nearest interval bounds
    /// around it, for a message that says which to use instead.
    ///
    /// # Errors
    /// [`Unaligned`] when `t` is inside an interval.
    pub fn aligned(self, t: Millis) -> Result<(), Unaligned> {
        let floor = self.floor(t);
        if floor == t { Ok(()) } else { Err(Unaligned { grain: self, floor, next: self.next(floor) }) }
    }

    /// The spellings [`Grain::parse`] accepts, for error messages.
    pub const EXPECTED: &'static str = "`5m` (five_minute), `15m` (quarter_hour), `hour`, `day`, `week` or `month`";
}

/// An instant inside an interval of `grain` (not on a bound): [`Grain::aligned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unaligned {
    /// The grain the instant is not aligned to.
    pub grain: Grain,
    /// The bound before it.
    pub floor: Millis,
    /// The bound after it.
    pub next: Millis,
}

impl std::fmt::Display for Unaligned {
    /// "the nearest valid bounds are 2026-01-01T00:00:00Z and 2026-01-02T00:00:00Z".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the nearest valid bounds are {} and {}", to_iso(self.floor), to_iso(self.next))
    }
}

/// The UTC year and month (1-12) of `t`.
fn year_month(t: Millis) -> (i64, i64) {
    match jiff::Timestamp::from_millisecond(t) {
        Ok(ts) => {
            let d = jiff::tz::Offset::UTC.to_datetime(ts).date();
            (i64::from(d.year()), i64::from(d.month()))
        }
        // Out of jiff's range: clamp to its ends.
        Err(_) if t < 0 => (-9999, 1),
        Err(_) => (9999, 12),
    }
}

/// `YYYY-MM-01T00:00:00Z` in milliseconds; saturates outside jiff's range.
fn month_start(y: i64, m: i64) -> Millis {
    let date = i16::try_from(y).ok().and_then(|y| jiff::civil::Date::new(y, i8::try_from(m).ok()?, 1).ok());
    match date.and_then(|d| jiff::tz::TimeZone::UTC.to_timestamp(d.to_datetime(jiff::civil::Time::midnight())).ok()) {
        Some(ts) => ts.as_millisecond(),
        None if y < 0 => Millis::MIN,
        None => Millis::MAX,
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
        let mut out = Vec::new();
        let mut t = self.start;
        while t < self.end {
            let next = grain.next(t);
            out.push(Interval::new(t, next.min(self.end)));
            t = next;
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

/// The most grain intervals one model may want ([`wanted_count`]): 5-minute intervals over 95
/// years (≈ 160 MB listed). A plan lists every one, so a `start` centuries early (a typo) on a
/// fine grain would exhaust memory; the plan refuses it instead, naming the model.
pub const MAX_WANTED: u64 = 10_000_000;

/// How many intervals [`wanted`] gives (at most: a month counts as 28 days), without listing
/// them ([`wanted_span`]).
pub fn wanted_count(start: Millis, until: Option<Millis>, grain: Grain, now: Millis) -> u64 {
    wanted_span(start, until, grain, now).map_or(0, |s| u64::try_from((s.end - s.start) / grain.min_millis()).unwrap_or(0))
}

/// From the start of the first interval [`wanted`] gives to the end of its last, without listing
/// them; `None` when it gives none.
pub fn wanted_span(start: Millis, until: Option<Millis>, grain: Grain, now: Millis) -> Option<Interval> {
    let first = grain.floor(start);
    let limit = grain.floor(now);
    let last_end = match until {
        // The last interval starting before `until`.
        Some(u) => limit.min(grain.next(grain.floor(u - 1))),
        None => limit,
    };
    let first_end = grain.next(first);
    (first_end <= last_end && first_end > first).then(|| Interval::new(first, last_end))
}

/// Every whole interval a time-range model wants at `now`: from `floor(start)` by `grain`, only
/// intervals that have fully ended (`end <= floor(now)`), and, when `until` is set, only those
/// starting before `until`.
pub fn wanted(start: Millis, until: Option<Millis>, grain: Grain, now: Millis) -> Vec<Interval> {
    let limit = grain.floor(now);
    let mut out = Vec::new();
    let mut t = grain.floor(start);
    loop {
        let next = grain.next(t);
        if next > limit || next <= t || until.is_some_and(|u| t >= u) {
            break;
        }
        out.push(Interval::new(t, next));
        t = next;
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
    let step = i64::from(batch_size.max(1));
    let mut out = Vec::new();
    for r in ranges {
        let mut t = r.start;
        while t < r.end {
            let next = grain.add(t, step);
            out.push(Interval::new(t, next.min(r.end)));
            if next <= t {
                break;
            }
            t = next;
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

/// Serialises an instant as [`to_iso`] text (`#[serde(serialize_with = …)]`).
///
/// # Errors
/// The serializer's.
pub fn serialize_iso<S: serde::Serializer>(t: &Millis, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&to_iso(*t))
}

/// The instant `t` as a `TIMESTAMPTZ 'YYYY-MM-DD HH:MM:SS[.fff]+00'` literal: the same instant
/// whatever the session's time zone, for comparisons with a `timestamptz` column (a naive
/// literal compared with one is read in the session's zone, which a model's `SET TimeZone`
/// pre-statement may have changed).
pub fn to_tz_literal(t: Millis) -> String {
    utc_text(t).map_or_else(|| "NULL".to_string(), |text| format!("TIMESTAMPTZ '{text}+00'"))
}

/// `YYYY-MM-DD HH:MM:SS[.fff]`, the UTC wall time of `t` the literals spell; `None` out of range.
fn utc_text(t: Millis) -> Option<String> {
    let base = jiff::Timestamp::from_millisecond(t).ok()?.strftime("%Y-%m-%d %H:%M:%S").to_string();
    Some(if t.rem_euclid(1000) == 0 { base } else { format!("{base}.{:03}", t.rem_euclid(1000)) })
}

/// The SQL literal every engine statement uses for an instant:
/// `TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.fff]'`, naive UTC (engines run with `TimeZone = 'UTC'`).
pub fn to_sql_literal(t: Millis) -> String {
    utc_text(t).map_or_else(|| "NULL".to_string(), |text| format!("TIMESTAMP '{text}'"))
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
    // A calendar date or time that parses but is no instant: past the range of timestamps
    // (with a `Z` too: `9999-12-31T00:00:00Z`).
    let civil = s.strip_suffix(['Z', 'z']).unwrap_or(s);
    if civil.parse::<jiff::civil::DateTime>().is_ok() || civil.parse::<jiff::civil::Date>().is_ok() {
        return Err(format!(
            "`{s}` is out of the range of instants efmesh handles ({} to {})",
            jiff::Timestamp::MIN.strftime("%Y-%m-%d"),
            jiff::Timestamp::MAX.strftime("%Y-%m-%d %H:%M:%S UTC")
        ));
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

    #[test]
    fn a_date_past_the_range_of_instants_is_named_as_such_not_as_no_date() {
        let e = parse_instant("9999-12-31").unwrap_err();
        assert!(e.contains("out of the range of instants"), "{e}");
        assert!(parse_instant("2026-13-01").unwrap_err().contains("is not a date or timestamp"));
        assert!(parse_instant("9999-12-31T00:00:00Z").unwrap_err().contains("is out of the range of instants"), "a valid RFC 3339 instant past the range");
        assert!(parse_instant("9999-12-30").is_ok());
    }

    const DAY: i64 = 86_400_000;

    fn t(s: &str) -> Millis {
        parse_instant(s).unwrap()
    }

    #[test]
    fn an_instant_inside_an_interval_names_the_bounds_around_it() {
        assert_eq!(Grain::Week.aligned(t("2026-01-05T00:00:00Z")), Ok(()), "a Monday starts a week");
        let e = Grain::Week.aligned(t("2026-01-07T00:00:00Z")).unwrap_err();
        assert_eq!((e.floor, e.next), (t("2026-01-05T00:00:00Z"), t("2026-01-12T00:00:00Z")));
        let e = Grain::Month.aligned(t("2026-02-10T00:00:00Z")).unwrap_err();
        assert_eq!(e.to_string(), "the nearest valid bounds are 2026-02-01T00:00:00.000Z and 2026-03-01T00:00:00.000Z");
        assert_eq!(Grain::QuarterHour.aligned(t("2026-01-01T00:07:00Z")).unwrap_err().grain.spelling(), "15m");
    }

    #[test]
    fn the_wanted_span_is_the_first_and_last_wanted_interval_without_listing_them() {
        let at = |s: &str| parse_instant(s).unwrap();
        for grain in [Grain::Hour, Grain::Day, Grain::Week, Grain::Month] {
            for start in ["2026-01-01T00:00:00Z", "2026-01-14T05:30:00Z"] {
                for until in [None, Some("2026-02-01T00:00:00Z"), Some("2026-02-10T13:00:00Z"), Some("2026-01-01T00:00:00Z")] {
                    for now in ["2026-01-01T05:00:00Z", "2026-01-20T00:00:00Z", "2026-03-05T07:00:00Z"] {
                        let listed = wanted(at(start), until.map(at), grain, at(now));
                        let want = listed.first().map(|f| Interval::new(f.start, listed.last().expect("first").end));
                        assert_eq!(wanted_span(at(start), until.map(at), grain, at(now)), want, "{grain:?} {start} {until:?} {now}");
                        assert!(wanted_count(at(start), until.map(at), grain, at(now)) >= listed.len() as u64);
                    }
                }
            }
        }
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
    fn week_grain_is_iso_monday_aligned_in_utc() {
        // 2026-01-01 is a Thursday: its week started on Monday 2025-12-29.
        assert_eq!(Grain::Week.floor(t("2026-01-01T13:00:00Z")), t("2025-12-29"));
        assert_eq!(Grain::Week.floor(t("2025-12-29")), t("2025-12-29"));
        assert_eq!(Grain::Week.floor(t("2025-12-28T23:59:59.999Z")), t("2025-12-22"));
        // Before the epoch too (1969-12-29 was a Monday).
        assert_eq!(Grain::Week.floor(t("1970-01-01")), t("1969-12-29"));
        assert_eq!(Grain::Week.next(t("2025-12-29")), t("2026-01-05"));
        // On Tuesday 2026-01-20 the week of Monday the 12th has ended, the 19th's has not.
        let w = wanted(t("2026-01-01"), None, Grain::Week, t("2026-01-20T08:00:00Z"));
        assert_eq!(
            w,
            vec![
                Interval::new(t("2025-12-29"), t("2026-01-05")),
                Interval::new(t("2026-01-05"), t("2026-01-12")),
                Interval::new(t("2026-01-12"), t("2026-01-19"))
            ]
        );
        assert_eq!(Grain::Week.count(t("2025-12-29"), t("2026-01-12")), 2);
    }

    #[test]
    fn month_grain_has_calendar_boundaries_of_unequal_length() {
        assert_eq!(Grain::Month.floor(t("2024-02-29T23:00:00Z")), t("2024-02-01"));
        assert_eq!(Grain::Month.next(t("2024-02-01")), t("2024-03-01"));
        assert_eq!(Grain::Month.next(t("2024-12-01")), t("2025-01-01"));
        assert_eq!(Grain::Month.add(t("2024-03-15"), -3), t("2023-12-01"));
        let w = wanted(t("2024-01-10"), None, Grain::Month, t("2024-04-02"));
        let lengths: Vec<i64> = w.iter().map(|i| (i.end - i.start) / DAY).collect();
        assert_eq!(lengths, vec![31, 29, 31], "{w:?}");
        assert_eq!(w[0].start, t("2024-01-01"));
        assert_eq!(w[2].end, t("2024-04-01"));
        // Batches count months, not a fixed width.
        let b = batches(&[Interval::new(t("2024-01-01"), t("2024-06-01"))], Grain::Month, 2);
        assert_eq!(b.iter().map(|i| (to_iso(i.start), to_iso(i.end))).collect::<Vec<_>>()[1], (to_iso(t("2024-03-01")), to_iso(t("2024-05-01"))));
        assert_eq!(b.len(), 3);
        assert_eq!(Interval::new(t("2024-01-01"), t("2024-04-01")).split(Grain::Month).len(), 3);
        assert_eq!(Grain::Month.count(t("2023-11-01"), t("2024-02-01")), 3);
        // Lookback counts months too.
        let all = wanted(t("2024-01-01"), None, Grain::Month, t("2024-06-01"));
        let done: BTreeSet<_> = all.iter().map(|i| i.start).filter(|s| *s != t("2024-05-01")).collect();
        assert_eq!(merge(&missing(&all, &done, 1)), vec![Interval::new(t("2024-04-01"), t("2024-06-01"))]);
    }

    #[test]
    fn minute_grains_align_on_the_clock() {
        assert_eq!(Grain::QuarterHour.floor(t("2026-01-01T10:07:00Z")), t("2026-01-01T10:00:00Z"));
        assert_eq!(Grain::FiveMinute.floor(t("2026-01-01T10:07:00Z")), t("2026-01-01T10:05:00Z"));
        let w = wanted(t("2026-01-01T10:00:00Z"), None, Grain::QuarterHour, t("2026-01-01T10:44:59Z"));
        assert_eq!(w.len(), 2);
        assert_eq!(w[1], Interval::new(t("2026-01-01T10:15:00Z"), t("2026-01-01T10:30:00Z")));
        for g in Grain::ALL {
            assert_eq!(Grain::parse(g.as_str()), Some(g));
        }
        assert_eq!(Grain::parse("15m"), Some(Grain::QuarterHour));
        assert_eq!(Grain::parse("5m"), Some(Grain::FiveMinute));
        assert_eq!(Grain::parse("minute"), None);
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
