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

/// How a cron expression is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// A model's `cron` (sqlmesh's): read in UTC, croner's whole syntax (`L`, `W`, `#`, `?`),
    /// nicknames in lower case, `@weekly` on Monday (the `week` grain's start).
    Model,
    /// The schedule of a crontab line (`efmesh schedule`): only what cron itself understands
    /// (`*`, numbers, three-letter names, `a-b`, `,`, `/step`), nicknames in any case, `@weekly`
    /// on Sunday (as cron), `@reboot` refused.
    Crontab,
}

/// The five fields of a cron, by name.
const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

/// The values each field of [`FIELDS`] takes, as an error naming the field says them (croner's
/// own text, "Number out of bounds", says neither).
const VALUES: [&str; 5] =
    ["minutes are 0-59", "hours are 0-23", "days of the month are 1-31", "months are 1-12 or jan-dec", "days of the week are 0-6 or sun-sat, 7 is Sunday too"];

/// Every nickname [`nickname`] reads, as an unknown one's error lists them.
const NICKNAMES: [&str; 7] = ["@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"];

/// A cron expression read: croner's schedule and its five fields (a nickname expanded).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The schedule.
    pub cron: Cron,
    /// `minute hour day-of-month month day-of-week` as written (or as the nickname stands).
    pub fields: [String; 5],
}

/// Parses a model's `cron`: five fields or a nickname ([`Dialect::Model`]).
///
/// # Errors
/// A message saying what is wrong with the expression.
pub fn parse(expr: &str) -> Result<Cron, String> {
    parse_as(expr, Dialect::Model).map(|p| p.cron)
}

/// Parses `expr` read as `dialect`: five fields or a nickname, refusing a cron that never fires.
/// The one cron parser of efmesh (models' `cron` and `efmesh schedule`).
///
/// # Errors
/// A message saying what is wrong with the expression, naming the field at fault when one is.
pub fn parse_as(expr: &str, dialect: Dialect) -> Result<Parsed, String> {
    let text = expr.trim();
    if text.is_empty() {
        return Err("the cron expression is empty".into());
    }
    let five = nickname(text, dialect)?.unwrap_or(text);
    let parts: Vec<&str> = five.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = parts[..] else {
        let clock = if dialect == Dialect::Model { " (UTC)" } else { "" };
        return Err(format!("cron `{text}` has {} field(s); a cron has 5: minute hour day-of-month month day-of-week{clock}", parts.len()));
    };
    let fields = [minute, hour, dom, month, dow];
    for (i, field) in fields.iter().enumerate() {
        if dialect == Dialect::Crontab {
            crontab_grammar(i, field).map_err(|why| format!("cron `{text}`: the {} field `{field}` {why}", FIELDS[i]))?;
        }
        ranges_run_upwards(i, field, dialect).map_err(|why| format!("cron `{text}` is invalid in its {} field `{field}`: {why}", FIELDS[i]))?;
    }
    let parser = croner::parser::CronParser::builder().seconds(croner::parser::Seconds::Disallowed).year(croner::parser::Year::Disallowed).build();
    let cron = parser.parse(&fields.join(" ")).map_err(|e| {
        let why = e.to_string().trim_end_matches('.').to_string();
        // Name the field: the first that fails alone (every other field `*`).
        let culprit = (0..5).find(|&i| {
            let alone: Vec<&str> = (0..5).map(|j| if j == i { fields[i] } else { "*" }).collect();
            parser.parse(&alone.join(" ")).is_err()
        });
        match culprit {
            Some(i) => format!("cron `{text}` is invalid in its {} field `{}`: {why} ({})", FIELDS[i], fields[i], VALUES[i]),
            None => format!("cron `{text}` is invalid: {why}"),
        }
    })?;
    // A cron that never fires (e.g. `0 0 31 2 *`) would hold the model back forever.
    if cron.find_next_occurrence(&Utc(0), false).is_err() || (dialect == Dialect::Crontab && !crontab_fires(&cron, dow)) {
        return Err(format!("cron `{text}` never fires"));
    }
    Ok(Parsed { cron, fields: fields.map(str::to_string) })
}

/// Whether cron itself fires `cron` (whose day-of-week field is `dow`) on some day. Unlike
/// croner, cron reads the two day fields as "both" as soon as one starts with `*` (`*/5`
/// included): `0 0 30 2 */5` never fires for cron. Some day matches when the day of week
/// restricts on its own, or a listed day of month exists in a listed month (February has 29
/// days in leap years).
fn crontab_fires(cron: &Cron, dow: &str) -> bool {
    let p = &cron.pattern;
    let (days, months) = (p.days.values(), p.months.values());
    let sets = [p.minutes.values(), p.hours.values(), days.clone(), months.clone(), p.days_of_week.values()];
    if sets.iter().any(Vec::is_empty) {
        return false;
    }
    if !dow.starts_with('*') {
        return true;
    }
    let days_in = |m: u16| match m {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    months.iter().any(|&m| days.iter().any(|&d| d <= days_in(m)))
}

/// The five fields a nickname stands for in `dialect`; `None` for an expression that is not one.
fn nickname(text: &str, dialect: Dialect) -> Result<Option<&'static str>, String> {
    let name = match dialect {
        Dialect::Model => text.to_string(),
        Dialect::Crontab => text.to_ascii_lowercase(),
    };
    Ok(Some(match name.as_str() {
        "@hourly" => "0 * * * *",
        "@daily" | "@midnight" => "0 0 * * *",
        "@weekly" if dialect == Dialect::Model => "0 0 * * 1",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@reboot" if dialect == Dialect::Crontab => return Err("`@reboot` runs once at boot, not on a schedule".into()),
        n if n.starts_with('@') => {
            let close = crate::core::error::did_you_mean(text, NICKNAMES).map(|s| format!(": did you mean `{s}`?")).unwrap_or_default();
            let (first, last) = NICKNAMES.split_at(NICKNAMES.len() - 1);
            return Err(format!("unknown cron nickname `{text}`{close} (use {} or {})", first.join(", "), last.join("")));
        }
        _ => return Ok(None),
    }))
}

/// A cron field's grammar, as crontab reads it: comma-separated items, each `*`, a number or a
/// name (months and weekdays only), or a range `a-b`, optionally followed by `/step`.
fn crontab_grammar(field: usize, text: &str) -> Result<(), String> {
    let names = field >= 3;
    let value_ok = |v: &str| !v.is_empty() && (v.bytes().all(|b| b.is_ascii_digit()) || (names && v.len() == 3 && v.bytes().all(|b| b.is_ascii_alphabetic())));
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        if let Some(s) = step
            && (s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.bytes().all(|b| b == b'0'))
        {
            return Err(format!("has a bad step `/{s}` (a positive number)"));
        }
        let ok = range == "*"
            || match range.split_once('-') {
                Some((a, b)) => value_ok(a) && value_ok(b),
                None => value_ok(range),
            };
        if !ok {
            let hint = if names { "`*`, numbers, three-letter names, `a-b`, `,` and `/step`" } else { "`*`, numbers, `a-b`, `,` and `/step`" };
            return Err(format!("is not understood by cron at `{item}` (use {hint})"));
        }
    }
    Ok(())
}

/// The smallest and largest value of each field, as cron numbers them (day of week: Sunday 0,
/// Saturday 6; 7 is Sunday too).
const BOUNDS: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)];

/// The number a value of field `field` (0 = minute … 4 = day-of-week) stands for: digits, or in
/// the month and day-of-week fields a three-letter name as cron reads it (`jan` = 1, `sun` = 0).
/// `None` for anything else (croner's extensions: `L`, `5#2`, …).
fn field_value(field: usize, v: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse().ok();
    }
    let (names, first): (&[&str], u32) = match field {
        3 => (&MONTHS[..], 1),
        4 => (&DAYS[..], 0),
        _ => return None,
    };
    names.iter().position(|n| n.eq_ignore_ascii_case(v)).and_then(|i| u32::try_from(i).ok()).map(|i| i + first)
}

/// Refuses a range `a-b` of field `field` that runs backwards (`22-2`, `fri-mon`, `sat-sun`:
/// cron numbers Sunday 0), naming it and how to write it. Cron implementations disagree on
/// one: cronie up to 1.5 refuses it at `crontab -`, vixie cron 3 (Debian's) and cronie 1.6 to
/// 1.7.2 accept it and never fire it, later cronie reads a day-of-week range ending in Sunday
/// (`0`, `sun`) as ending in 7; croner refuses it but for `…-sun`, which it reads as `…-7`. So
/// in the [`Dialect::Crontab`] every one is refused, before anything is written. In the
/// [`Dialect::Model`], which efmesh evaluates itself with croner, a day-of-week range ending in
/// `sun` stays what croner and sqlmesh's croniter read (`sat-sun`: Saturday and Sunday); others
/// get this message rather than croner's "Range out of bounds". In both, a day-of-week range
/// starting at Sunday and ending in `sun` (`sun-sun`, `0-sun`) is refused: croner reads it as
/// every day, cron as Sunday. A range starting at Sunday written 7 (`7-1`) is told to start at
/// 0 (`0-1`).
fn ranges_run_upwards(field: usize, text: &str, dialect: Dialect) -> Result<(), String> {
    let (min, max) = BOUNDS[field];
    // Sunday may be written 7 in the day-of-week field.
    let top = if field == 4 { 7 } else { max };
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Some(from), Some(to)) = (field_value(field, a), field_value(field, b)) else { continue };
        // Values out of bounds are croner's to name.
        if from > top || to > top || from < min || to < min {
            continue;
        }
        let sunday_end = field == 4 && b.eq_ignore_ascii_case("sun");
        if sunday_end && from == 0 {
            return Err(format!(
                "the range `{range}` reads as every day to croner (it takes a range ending in `sun` as ending in 7) but as Sunday to cron; write `sun`"
            ));
        }
        if from <= to || (sunday_end && dialect == Dialect::Model) {
            continue;
        }
        let span = |a: u32, b: u32| if a == b { a.to_string() } else { format!("{a}-{b}") };
        let hint = match (step, field == 4 && to == 0) {
            // A start beyond the field's largest value (Sunday written 7) is its smallest: `7-1`
            // is Sunday to Monday, `0-1`.
            (Some(step), _) if from > max && to > min => format!("write `{min}-{to}/{step}`"),
            _ if from > max => format!("write `{}`", span(min, to)),
            (Some(_), _) => "split it in two ranges that run upwards, each with its step".to_string(),
            (None, true) => format!("write `{}`", span(from, 7)),
            (None, false) => format!("write `{},{}`", span(from, max), span(min, to)),
        };
        let sunday = match field {
            4 if from > max => "; a range starting on Sunday starts at 0",
            4 => ", Sunday being 0",
            _ => "",
        };
        let cron = match dialect {
            Dialect::Crontab => ": cron refuses it, or never fires it, or reads it otherwise, depending on its version",
            Dialect::Model => "",
        };
        return Err(format!("the range `{range}` runs backwards ({from} down to {to}{sunday}){cron}; {hint}"));
    }
    Ok(())
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
        let fits: Vec<&str> = Grain::ALL.iter().filter(|g| two_ticks_in_one(cron, **g).is_none()).map(|g| g.spelling()).collect();
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
/// that fires more often than every five minutes (two consecutive ticks less than five minutes apart),
/// as sqlmesh refuses crons faster than five minutes.
///
/// # Errors
/// A message naming the two ticks.
pub fn check_refresh(cron: &Cron, expr: &str) -> Result<(), String> {
    const FIVE_MINUTES: Millis = 300_000;
    match first_pair(cron, |prev, next| next - prev < FIVE_MINUTES) {
        Some((a, b)) => Err(format!(
            "cron `{expr}` fires more often than every five minutes (at {} and {}); a model is refreshed at most every five minutes",
            super::interval::to_iso(a),
            super::interval::to_iso(b)
        )),
        None => Ok(()),
    }
}

/// Two consecutive ticks within one `grain` interval ([`first_pair`]).
fn two_ticks_in_one(cron: &Cron, grain: Grain) -> Option<(Millis, Millis)> {
    first_pair(cron, |prev, next| grain.floor(next) == grain.floor(prev))
}

/// The first two consecutive ticks of `cron` for which `close(prev, next)` holds, over up to two
/// years of ticks from 2024 (a leap year), bounded to 1 000 ticks so the load-time checks stay
/// cheap: a dense cron (every few minutes) repeats its minute/hour pattern daily, which 1 000
/// ticks cover many times over, and a sparse one reaches the two-year bound first.
fn first_pair(cron: &Cron, close: impl Fn(Millis, Millis) -> bool) -> Option<(Millis, Millis)> {
    // 2024-01-01T00:00:00Z, a Monday.
    const FROM: Millis = 1_704_067_200_000;
    const UNTIL: Millis = FROM + 2 * 366 * 86_400_000;
    let mut prev = next_tick(cron, FROM - 1000)?;
    for _ in 0..1_000 {
        let next = next_tick(cron, prev)?;
        if close(prev, next) {
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

    /// An error in one field says the values the field takes; an unknown nickname is told the
    /// closest one and every one `nickname` reads (`@midnight` and `@annually` included).
    #[test]
    fn errors_say_what_a_field_takes_and_which_nickname_was_meant() {
        for (expr, values) in [
            ("61 * * * *", "(minutes are 0-59)"),
            ("0 0 32 * *", "(days of the month are 1-31)"),
            ("0 0 * 13 *", "(months are 1-12 or jan-dec)"),
            ("0 0 * * 9", "(days of the week are 0-6 or sun-sat, 7 is Sunday too)"),
        ] {
            let e = parse(expr).unwrap_err();
            assert!(e.ends_with(values), "{e}");
        }
        assert_eq!(
            parse("@dayly").unwrap_err(),
            "unknown cron nickname `@dayly`: did you mean `@daily`? (use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually)"
        );
        assert_eq!(parse("@often").unwrap_err(), "unknown cron nickname `@often` (use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually)");
        for name in NICKNAMES {
            assert!(parse(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn the_crontab_dialect_reads_as_cron_does_with_the_same_messages() {
        let fields = |e: &str, d: Dialect| parse_as(e, d).map(|p| p.fields.join(" "));
        assert_eq!(fields("@weekly", Dialect::Model).unwrap(), "0 0 * * 1");
        assert_eq!(fields("@Weekly", Dialect::Crontab).unwrap(), "0 0 * * 0");
        assert!(fields("@Weekly", Dialect::Model).unwrap_err().contains("unknown cron nickname `@Weekly`: did you mean `@weekly`?"));
        assert!(fields("@reboot", Dialect::Crontab).unwrap_err().contains("boot"));
        // croner's extensions are a model's, not crontab's.
        assert!(fields("0 0 L * *", Dialect::Model).is_ok());
        assert!(fields("0 0 L * *", Dialect::Crontab).unwrap_err().contains("the day-of-month field `L` is not understood by cron"));
        // cron reads `*/5` as unrestricting: both day fields must match, and Feb 30 never comes.
        assert!(fields("0 0 30 2 */5", Dialect::Model).is_ok());
        assert!(fields("0 0 30 2 */5", Dialect::Crontab).unwrap_err().contains("never fires"));
        for d in [Dialect::Model, Dialect::Crontab] {
            let e = fields("0 25 * * *", d).unwrap_err();
            assert!(e.starts_with("cron `0 25 * * *` is invalid in its hour field `25`: "), "{e}");
            assert!(e.ends_with(" (hours are 0-23)"), "{e}");
            assert!(fields("0 0 31 4 *", d).unwrap_err().ends_with("cron `0 0 31 4 *` never fires"));
        }
    }

    #[test]
    fn a_range_running_backwards_is_refused_naming_the_field_and_the_range() {
        let crontab = |e: &str| parse_as(e, Dialect::Crontab).map(|p| p.fields.join(" "));
        // cron numbers Sunday 0: `sat-sun` runs backwards, which cron refuses, never fires or
        // wraps depending on its version (croner read it as Saturday and Sunday).
        let e = crontab("0 0 * * sat-sun").unwrap_err();
        assert!(e.starts_with("cron `0 0 * * sat-sun` is invalid in its day-of-week field `sat-sun`: "), "{e}");
        assert!(e.contains("the range `sat-sun` runs backwards (6 down to 0, Sunday being 0): cron refuses it"), "{e}");
        assert!(e.ends_with("; write `6-7`"), "{e}");
        for (expr, field, range, hint) in [
            ("0 0 * * 6-0", "day-of-week", "6-0", "`6-7`"),
            ("0 0 * * fri-mon", "day-of-week", "fri-mon", "`5-6,0-1`"),
            // Sunday written 7 at a range's start is 0 there: `7-1` is Sunday to Monday.
            ("0 0 * * 7-1", "day-of-week", "7-1", "`0-1`"),
            ("0 0 * * 7-3/2", "day-of-week", "7-3", "`0-3/2`"),
            ("0 0 * * 7-0", "day-of-week", "7-0", "`0`"),
            ("0 0 * * FRI-Sun", "day-of-week", "FRI-Sun", "`5-7`"),
            ("0 22-2 * * *", "hour", "22-2", "`22-23,0-2`"),
            ("50-10 * * * *", "minute", "50-10", "`50-59,0-10`"),
            ("0 0 31-1 * *", "day-of-month", "31-1", "`31,1`"),
            ("0 0 * nov-feb *", "month", "nov-feb", "`11-12,1-2`"),
            ("0 0 1 1,12-3 *", "month", "12-3", "`12,1-3`"),
        ] {
            let e = crontab(expr).unwrap_err();
            assert!(e.starts_with(&format!("cron `{expr}` is invalid in its {field} field `")), "{e}");
            assert!(e.contains(&format!("the range `{range}` runs backwards")) && e.ends_with(&format!("write {hint}")), "{e}");
        }
        let e = crontab("0 22-2/2 * * *").unwrap_err();
        assert!(e.contains("the range `22-2` runs backwards") && e.ends_with("split it in two ranges that run upwards, each with its step"), "{e}");
        // Ranges that run upwards, Sunday as 7 included, stay as they were.
        for ok in ["0 0 * * 6-7", "0 0 * * sat,sun", "0 0 * * sat-7", "0 9-17 * * mon-fri", "0 0 * jan-mar *", "0 0 * * 0-6"] {
            assert!(crontab(ok).is_ok(), "{ok}: {:?}", crontab(ok));
        }
        // A model's cron, which efmesh evaluates itself, keeps croner's (and sqlmesh's croniter's)
        // reading of a day-of-week range ending in `sun`: Saturday and Sunday.
        let weekend = parse("0 0 * * sat-sun").expect("a model's `sat-sun`");
        let friday = t("2026-01-09T12:00:00Z");
        assert_eq!(next_tick(&weekend, friday), Some(t("2026-01-10T00:00:00Z")));
        assert_eq!(next_tick(&weekend, t("2026-01-10T00:00:00Z")), Some(t("2026-01-11T00:00:00Z")));
        assert_eq!(next_tick(&weekend, t("2026-01-11T00:00:00Z")), Some(t("2026-01-17T00:00:00Z")));
        // Other ranges running backwards are refused there too, with the same message (croner
        // said "Range out of bounds").
        let e = parse_as("0 0 * * fri-mon", Dialect::Model).unwrap_err();
        assert!(e.starts_with("cron `0 0 * * fri-mon` is invalid in its day-of-week field `fri-mon`: "), "{e}");
        assert!(e.ends_with("the range `fri-mon` runs backwards (5 down to 1, Sunday being 0); write `5-6,0-1`"), "{e}");
        assert!(parse("0 22-2 * * *").unwrap_err().contains("the range `22-2` runs backwards (22 down to 2); write `22-23,0-2`"));
        let e = parse_as("0 0 * * 7-1", Dialect::Model).unwrap_err();
        assert!(e.ends_with("the range `7-1` runs backwards (7 down to 1; a range starting on Sunday starts at 0); write `0-1`"), "{e}");
        // `sun-sun` is every day to croner (`-sun` read as 7) and Sunday to cron: refused in both.
        for d in [Dialect::Model, Dialect::Crontab] {
            for expr in ["0 0 * * sun-sun", "0 0 * * 0-sun"] {
                let e = parse_as(expr, d).unwrap_err();
                assert!(e.contains("reads as every day to croner") && e.ends_with("write `sun`"), "{d:?} {e}");
            }
        }
        // Values out of bounds keep croner's message.
        assert!(crontab("0 30-2 * * *").unwrap_err().contains("Range out of bounds"));
    }

    #[test]
    fn a_cron_finer_than_the_grain_is_refused() {
        let quarter = parse("*/15 * * * *").unwrap();
        assert!(check(&quarter, "*/15 * * * *", Grain::QuarterHour).is_ok());
        assert!(check(&quarter, "*/15 * * * *", Grain::Hour).is_err());
        let e = check(&quarter, "*/15 * * * *", Grain::Day).unwrap_err();
        assert!(e.contains("the grains it fits: `5m`, `15m` (or use a cron firing at most once per day)"), "{e}");
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
