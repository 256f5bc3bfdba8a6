//! The environment lock as the commands take it ([`crate::state::lease`]): `apply`, `run` and
//! `restate` hold `env:<name>` for as long as they write, or, in a project with a lake, the one
//! lock `lake` of every environment ([`writer_lease`]).
//!
//! Test hook: `EFMESH_TEST_HOLD_LEASE_MS=<ms>` makes a command sleep that long right after
//! taking its lock, so the integration tests can start two commands and know they overlap. Only
//! tests set it.

use crate::state::StateStore;
use crate::state::lease::{LAKE_LEASE, LeaseGuard, Refused, writer_lease};
use anyhow::{Result, anyhow};
use std::time::Duration;

/// The test hook's environment variable (see the module docs).
pub const HOLD_ENV: &str = "EFMESH_TEST_HOLD_LEASE_MS";

/// How a lock attempt ended.
pub(super) enum Locked {
    /// Ours until dropped or released.
    Held(LeaseGuard),
    /// Another live process holds it: `(lock name, holder as text)`.
    Busy(String, String),
}

/// This command's line, as recorded in the lease (`efmesh apply prod --yes`).
pub(super) fn command_line() -> String {
    let mut args = std::env::args();
    let program = args.next().map(|p| std::path::Path::new(&p).file_name().map_or(p.clone(), |f| f.to_string_lossy().into_owned())).unwrap_or_default();
    std::iter::once(program).chain(args).collect::<Vec<_>>().join(" ")
}

/// Takes the writer lock of `env` on `store` (the project's `config` says which:
/// [`writer_lease`]), waiting up to `wait`.
///
/// # Errors
/// The state store fails.
pub(super) fn lock_env(store: &dyn StateStore, config: &crate::config::Config, env: &str, wait: Duration) -> Result<Locked> {
    let name = writer_lease(env, config.writes_a_lake());
    match LeaseGuard::acquire(store, &name, &command_line(), wait) {
        Ok(guard) => {
            if let Some(ms) = std::env::var(HOLD_ENV).ok().and_then(|v| v.parse::<u64>().ok()) {
                std::thread::sleep(Duration::from_millis(ms));
            }
            Ok(Locked::Held(guard))
        }
        Err(Refused::Held(record)) => Ok(Locked::Busy(name, record.holder.to_string())),
        Err(Refused::State(e)) => Err(e.into()),
    }
}

pub use crate::core::interval::parse_duration;

/// The error of `apply` meeting a held lock.
pub(super) fn held_error(env: &str, lock: &str, holder: &str, waited: Duration) -> anyhow::Error {
    let waited = if waited.is_zero() { String::new() } else { format!(" (waited {} ms)", waited.as_millis()) };
    let lock = if lock == LAKE_LEASE { format!("`{lock}` (the lake's one writer lock, for every environment)") } else { format!("`{lock}`") };
    anyhow!(LockHeld(format!(
        "environment `{env}` is locked: {lock} is held by {holder}{waited}; nothing was done\n  hint: retry when it is done, or wait for it with `--wait 10m`"
    )))
}

/// A command met a lock another live process holds.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LockHeld(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5_400)));
        assert!(parse_duration("-1d").is_err());
    }
}
