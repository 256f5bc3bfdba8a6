//! The lifecycle of environments (`[environments] ttl`, `efmesh invalidate`, the janitor's
//! expired environments): when an environment other than `prod` expires, judged from its
//! journal alone (pure: no I/O).
//!
//! As sqlmesh's `environment_ttl`: an environment expires a ttl after the last plan applied to
//! it (its newest promotion); `efmesh invalidate` expires it at once; applying it again renews
//! it; `prod` never expires. Unlike sqlmesh, which stores an expiry instant computed at
//! application, efmesh reads the ttl from the configuration when it judges, so editing the ttl
//! moves the expiry of every environment (and removing it stops expiry), and the state layout
//! is unchanged: the journal (`plans`) already records every promotion with its instant, and an
//! invalidation or a drop is one more journal row whose summary names the event
//! (`{"event": "invalidated"}`, `{"event": "dropped", …}`). Such rows are not plans applied:
//! `status` shows the newest row without an event as the last plan.

use crate::core::interval::{Millis, parse_instant, to_iso};
use crate::state::JournalEntry;
use serde::Serialize;
use serde_json::json;

/// The environment that never expires.
pub const PROD: &str = "prod";

/// The journal summary of an invalidation (`efmesh invalidate`).
pub fn invalidated_summary() -> serde_json::Value {
    json!({"event": "invalidated"})
}

/// The journal summary the janitor records when it drops an expired environment.
pub fn dropped_summary(expiry: &Expiry) -> serde_json::Value {
    json!({"event": "dropped", "reason": expiry.reason, "expiredAt": expiry.expires_at})
}

/// The lifecycle event a journal row records (`invalidated`, `dropped`), or `None` for a plan
/// applied (a promotion).
pub fn event(entry: &JournalEntry) -> Option<&str> {
    entry.summary.get("event").and_then(serde_json::Value::as_str)
}

/// The newest plan applied to the environment (a journal row that is no lifecycle event).
pub fn last_applied(journal: &[JournalEntry]) -> Option<&JournalEntry> {
    journal.iter().rev().find(|j| event(j).is_none())
}

/// Where an environment stands in its lifecycle ([`judge`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Expiry {
    /// The environment.
    pub env: String,
    /// The configured ttl in milliseconds (`None`: environments expire only when invalidated).
    pub ttl_ms: Option<Millis>,
    /// When the last plan was applied to it (ISO-8601 UTC).
    pub last_applied_at: Option<String>,
    /// When it expires or expired (ISO-8601 UTC): the last application plus the ttl, or the
    /// invalidation. `None`: it does not expire.
    pub expires_at: Option<String>,
    /// True once `expires_at` is at or before now.
    pub expired: bool,
    /// Why it expires: `ttl` or `invalidated`.
    pub reason: Option<&'static str>,
    /// When the janitor dropped it, when that is the newest thing its journal says.
    pub dropped_at: Option<String>,
    /// The id of the newest journal row (the janitor drops it only while it is still the
    /// newest: [`crate::state::StateStore::drop_environment`]).
    #[serde(skip)]
    pub journal_id: i64,
}

/// Judges `env` from its journal (oldest first), the configured `ttl` and `now`. `prod` never
/// expires; an environment whose newest journal row is an invalidation expired then; otherwise
/// it expires `ttl` after its newest promotion (never without a ttl or a promotion).
pub fn judge(env: &str, journal: &[JournalEntry], ttl: Option<Millis>, now: Millis) -> Expiry {
    let mut out = Expiry {
        env: env.to_string(),
        ttl_ms: ttl,
        last_applied_at: last_applied(journal).map(|j| j.applied_at.clone()),
        expires_at: None,
        expired: false,
        reason: None,
        dropped_at: None,
        journal_id: journal.last().map_or(0, |j| j.id),
    };
    if env == PROD {
        return out;
    }
    let Some(newest) = journal.last() else { return out };
    match event(newest) {
        Some("invalidated") => {
            out.expires_at = Some(newest.applied_at.clone());
            out.expired = true;
            out.reason = Some("invalidated");
        }
        Some("dropped") => out.dropped_at = Some(newest.applied_at.clone()),
        _ => {
            let applied = last_applied(journal).and_then(|j| parse_instant(&j.applied_at).ok());
            if let (Some(applied), Some(ttl)) = (applied, ttl) {
                let at = applied.saturating_add(ttl);
                out.expires_at = Some(to_iso(at));
                out.expired = at <= now;
                out.reason = Some("ttl");
            }
        }
    }
    out
}

/// One line for people: `expired at … (ttl 7d)`, `expires at …`, or `None` when it never
/// expires.
pub fn describe(e: &Expiry) -> Option<String> {
    let at = e.expires_at.as_deref()?;
    let why = match e.reason {
        Some("invalidated") => "invalidated".to_string(),
        _ => format!("ttl {}", e.ttl_ms.map(ttl_text).unwrap_or_default()),
    };
    Some(if e.expired {
        format!("environment `{}` expired at {at} ({why}): the next `efmesh janitor` drops it; `efmesh apply {}` renews it", e.env, e.env)
    } else {
        format!("environment `{}` expires at {at} ({why}) unless applied again", e.env)
    })
}

/// A ttl as people write it: `7d`, `36h`, `90m`, `45s`, `1500ms`.
pub fn ttl_text(ms: Millis) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Millis = 86_400_000;

    fn row(id: i64, at: Millis, summary: serde_json::Value) -> JournalEntry {
        JournalEntry { id, env: "dev".into(), summary, applied_at: to_iso(at), applied_by: String::new() }
    }

    #[test]
    fn an_environment_expires_a_ttl_after_its_last_promotion() {
        let journal = vec![row(1, 0, json!({})), row(2, 2 * DAY, json!({}))];
        let within = judge("dev", &journal, Some(7 * DAY), 9 * DAY - 1);
        assert!(!within.expired);
        assert_eq!(within.expires_at.as_deref(), Some(to_iso(9 * DAY).as_str()));
        let past = judge("dev", &journal, Some(7 * DAY), 9 * DAY);
        assert!(past.expired);
        assert_eq!(past.reason, Some("ttl"));
        assert_eq!(past.journal_id, 2);
        assert!(!judge("dev", &journal, None, 100 * DAY).expired, "no ttl: never");
        assert!(!judge(PROD, &journal, Some(DAY), 100 * DAY).expired, "prod never expires");
        assert!(!judge("dev", &[], Some(DAY), 100 * DAY).expired, "nothing applied: nothing to expire");
    }

    #[test]
    fn an_invalidation_expires_at_once_and_a_later_promotion_renews() {
        let journal = vec![row(1, 0, json!({})), row(2, DAY, invalidated_summary())];
        let e = judge("dev", &journal, None, DAY);
        assert!(e.expired);
        assert_eq!(e.reason, Some("invalidated"));
        assert_eq!(e.last_applied_at.as_deref(), Some(to_iso(0).as_str()));
        let renewed = [journal.clone(), vec![row(3, 2 * DAY, json!({}))]].concat();
        assert!(!judge("dev", &renewed, Some(7 * DAY), 3 * DAY).expired);
        let dropped = [journal, vec![row(3, 2 * DAY, json!({"event": "dropped"}))]].concat();
        let d = judge("dev", &dropped, Some(DAY), 30 * DAY);
        assert!(!d.expired);
        assert_eq!(d.dropped_at.as_deref(), Some(to_iso(2 * DAY).as_str()));
        assert_eq!(last_applied(&dropped).map(|j| j.id), Some(1));
    }

    #[test]
    fn ttls_print_in_their_largest_whole_unit() {
        assert_eq!(ttl_text(7 * DAY), "7d");
        assert_eq!(ttl_text(36 * 3_600_000), "36h");
        assert_eq!(ttl_text(1500), "1500ms");
    }
}
