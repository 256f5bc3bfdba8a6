//! Per-model cron schedules (sqlmesh's `cron` model property): when a model's intervals are due.
//!
//! A time-range model with a `cron` wants, at `now`, only the intervals that ended by its last
//! cron tick at or before `now` ([`due_at`]); without a `cron` every interval that has ended is
//! due (one tick per grain). The cron is read in UTC, five fields (minute hour day-of-month month
//! day-of-week) or a nickname (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`).
//!
//! As in sqlmesh, a cron may not fire more often than the model's grain (two ticks in one grain
//! interval would find nothing new to compute at the second): [`check`] refuses it, naming the
//! grain to pick instead. A cron coarser than the grain is fine: at each tick every interval that
//! ended since the previous one is computed.

use super::interval::{Grain, Millis};
use croner::{CivilDate, CivilDateTime, CivilTime, Cron, CronDateTime, Resolution, Weekday};
use std::cmp::Ordering;

/// An instant in UTC, as croner searches over it (whole seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Utc(i64);

impl Utc {
    fn civil(self) -> Option<jiff::civil::DateTime> {
        jiff::Timestamp::from_second(self.0).ok().map(|ts| jiff::tz::Offset::UTC.to_datetime(ts))
    }
}

impl CronDateTime for Utc {
    fn to_civil(&self) -> CivilDateTime {
        // Out of jiff's range (years beyond ±9999): the epoch, which croner never reaches from a
        // model's instants.
        let d = self.civil().unwrap_or_default();
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(i32::from(d.year()), d.month().unsigned_abs().into(), d.day().unsigned_abs().into()),
            CivilTime::from_parts_unchecked(d.hour().unsigned_abs().into(), d.minute().unsigned_abs().into(), d.second().unsigned_abs().into()),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        let d = self.civil().unwrap_or_default();
        Weekday::from_days_from_sunday(u32::from(d.weekday().to_sunday_zero_offset().unsigned_abs()))
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, croner::errors::CronError> {
        let bad = || croner::errors::CronError::InvalidDate;
        let part = |v: u32| i8::try_from(v).map_err(|_| bad());
        let dt = jiff::civil::DateTime::new(
            i16::try_from(civil.year()).map_err(|_| bad())?,
            part(civil.month())?,
            part(civil.day())?,
            part(civil.hour())?,
            part(civil.minute())?,
            part(civil.second())?,
            0,
        )
        .map_err(|_| bad())?;
        let ts = jiff::tz::Offset::UTC.to_timestamp(dt).map_err(|_| bad())?;
        Ok(Resolution::Single(Utc(ts.as_second())))
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0.checked_add(seconds).map(Utc)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

/// Parses a model's `cron`: five fields or a nickname.
///
/// # Errors
/// A message saying what is wrong with the expression.
pub fn parse(expr: &str) -> Result<Cron, String> {
    let text = expr.trim();
    let five = match text {
        "@hourly" => "0 * * * *",
        "@daily" | "@midnight" => "0 0 * * *",
        "@weekly" => "0 0 * * 1",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        n if n.starts_with('@') => return Err(format!("unknown cron nickname `{n}` (use @hourly, @daily, @weekly, @monthly or @yearly)")),
        other => other,
    };
    let fields = five.split_whitespace().count();
    if fields != 5 {
        return Err(format!("cron `{text}` has {fields} field(s); a cron has 5: minute hour day-of-month month day-of-week (UTC)"));
    }
    let parser = croner::parser::CronParser::builder().seconds(croner::parser::Seconds::Disallowed).year(croner::parser::Year::Disallowed).build();
    let cron = parser.parse(five).map_err(|e| format!("cron `{text}` is invalid: {}", e.to_string().trim_end_matches('.')))?;
    // A cron that never fires (e.g. `0 0 31 2 *`) would hold the model back forever.
    if cron.find_next_occurrence(&Utc(0), false).is_err() {
        return Err(format!("cron `{text}` never fires"));
    }
    Ok(cron)
}

/// The last tick of `cron` at or before `now` (milliseconds); `None` when it never fired before.
pub fn last_tick(cron: &Cron, now: Millis) -> Option<Millis> {
    let secs = now.div_euclid(1000);
    cron.find_previous_occurrence(&Utc(secs), true).ok().map(|t| t.0.saturating_mul(1000))
}

/// The first tick of `cron` strictly after `t` (milliseconds).
pub fn next_tick(cron: &Cron, t: Millis) -> Option<Millis> {
    let secs = t.div_euclid(1000);
    cron.find_next_occurrence(&Utc(secs), false).ok().map(|t| t.0.saturating_mul(1000))
}

/// The instant up to which a model with `cron` has its intervals due at `now`: its last tick
/// (`now` itself without a cron). Intervals ending after it are not due yet.
pub fn due_at(cron: Option<&Cron>, now: Millis) -> Millis {
    match cron {
        None => now,
        Some(c) => last_tick(c, now).unwrap_or(Millis::MIN / 2),
    }
}

/// Refuses a cron that fires more often than `grain` (two ticks within one grain interval),
/// as sqlmesh refuses a cron more frequent than the interval unit.
///
/// # Errors
/// A message naming the two ticks and the grains the cron fits.
pub fn check(cron: &Cron, expr: &str, grain: Grain) -> Result<(), String> {
    if let Some((a, b)) = two_ticks_in_one(cron, grain) {
        let fits: Vec<&str> = Grain::ALL.iter().filter(|g| two_ticks_in_one(cron, **g).is_none()).map(|g| g.as_str()).collect();
        let hint = if fits.is_empty() {
            String::new()
        } else {
            format!("; the grains it fits: `{}` (or use a cron firing at most once per {})", fits.join("`, `"), grain.as_str())
        };
        return Err(format!(
            "cron `{expr}` fires more often than the model's grain `{}` (at {} and {}, both in one interval){hint}",
            grain.as_str(),
            super::interval::to_iso(a),
            super::interval::to_iso(b)
        ));
    }
    Ok(())
}

/// Refuses a cron on a model `run` refreshes whole (`full`, unique-key, partition, SCD type 2)
/// that fires more often than every five minutes (two ticks within one five-minute interval),
/// as sqlmesh refuses crons faster than five minutes.
///
/// # Errors
/// A message naming the two ticks.
pub fn check_refresh(cron: &Cron, expr: &str) -> Result<(), String> {
    match two_ticks_in_one(cron, Grain::FiveMinute) {
        Some((a, b)) => Err(format!(
            "cron `{expr}` fires more often than every five minutes (at {} and {}); a model is refreshed at most every five minutes",
            super::interval::to_iso(a),
            super::interval::to_iso(b)
        )),
        None => Ok(()),
    }
}

/// The tick a refresh of a model with `cron` at `now` is for: the last tick at or before `now`,
/// as the interval `[previous tick, tick)` (sqlmesh's interval of a non-time-range model), so
/// the ledger records it like a grain interval. `None` when the cron never fired before `now`.
pub fn refresh_tick(cron: &Cron, now: Millis) -> Option<super::interval::Interval> {
    let tick = last_tick(cron, now)?;
    let before = cron.find_previous_occurrence(&Utc(tick.div_euclid(1000)), false).ok().map_or(tick - 1, |t| t.0.saturating_mul(1000));
    Some(super::interval::Interval::new(before.min(tick - 1), tick))
}

/// Two consecutive ticks within one `grain` interval, over up to two years of ticks from 2024 (a
/// leap year), bounded to 1 000 ticks so the check stays cheap at load: a dense cron (every few
/// minutes) repeats its minute/hour pattern daily, which 1 000 ticks cover many times over, and
/// a sparse one reaches the two-year bound first.
fn two_ticks_in_one(cron: &Cron, grain: Grain) -> Option<(Millis, Millis)> {
    // 2024-01-01T00:00:00Z, a Monday.
    const FROM: Millis = 1_704_067_200_000;
    const UNTIL: Millis = FROM + 2 * 366 * 86_400_000;
    let mut prev = next_tick(cron, FROM - 1000)?;
    for _ in 0..1_000 {
        let next = next_tick(cron, prev)?;
        if grain.floor(next) == grain.floor(prev) {
            return Some((prev, next));
        }
        if next > UNTIL {
            break;
        }
        prev = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interval::parse_instant;

    fn t(s: &str) -> Millis {
        parse_instant(s).unwrap()
    }

    #[test]
    fn due_at_is_the_last_tick_at_or_before_now() {
        let quarter = parse("*/15 * * * *").unwrap();
        assert_eq!(due_at(Some(&quarter), t("2026-01-05T10:07:00Z")), t("2026-01-05T10:00:00Z"));
        assert_eq!(due_at(Some(&quarter), t("2026-01-05T10:15:00Z")), t("2026-01-05T10:15:00Z"));
        let six = parse("0 6 * * *").unwrap();
        assert_eq!(due_at(Some(&six), t("2026-01-05T03:00:00Z")), t("2026-01-04T06:00:00Z"));
        assert_eq!(due_at(None, 42), 42);
        assert_eq!(next_tick(&six, t("2026-01-05T06:00:00Z")), Some(t("2026-01-06T06:00:00Z")));
        let weekly = parse("@weekly").unwrap();
        assert_eq!(due_at(Some(&weekly), t("2026-01-07T12:00:00Z")), t("2026-01-05"), "@weekly ticks on Monday");
    }

    #[test]
    fn invalid_and_never_firing_crons_are_refused() {
        assert!(parse("*/15 * * *").unwrap_err().contains("4 field(s)"));
        assert!(parse("61 * * * *").unwrap_err().contains("invalid"));
        assert!(parse("@often").unwrap_err().contains("unknown cron nickname"));
        assert!(parse("0 0 31 2 *").unwrap_err().contains("never fires"));
    }

    #[test]
    fn a_cron_finer_than_the_grain_is_refused() {
        let quarter = parse("*/15 * * * *").unwrap();
        assert!(check(&quarter, "*/15 * * * *", Grain::QuarterHour).is_ok());
        assert!(check(&quarter, "*/15 * * * *", Grain::Hour).is_err());
        let e = check(&quarter, "*/15 * * * *", Grain::Day).unwrap_err();
        assert!(e.contains("the grains it fits: `five_minute`, `quarter_hour` (or use a cron firing at most once per day)"), "{e}");
        let daily = parse("@daily").unwrap();
        for g in [Grain::FiveMinute, Grain::QuarterHour, Grain::Hour, Grain::Day] {
            assert!(check(&daily, "@daily", g).is_ok(), "{g:?}");
        }
        assert!(check(&daily, "@daily", Grain::Week).is_err());
        assert!(check(&parse("@monthly").unwrap(), "@monthly", Grain::Month).is_ok());
        assert!(check(&parse("@weekly").unwrap(), "@weekly", Grain::Week).is_ok());
        assert!(check(&parse("@weekly").unwrap(), "@weekly", Grain::Month).is_err());
        assert!(check(&parse("0,30 * * * *").unwrap(), "0,30 * * * *", Grain::Hour).is_err());
    }
}
