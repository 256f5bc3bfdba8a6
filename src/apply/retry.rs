//! `--retries N`: transient failures (an engine or state-store lock held by another process,
//! I/O errors) are retried with exponential backoff and a warning; SQL errors never are. So is a
//! stale plan ([`ApplyError::StalePlan`]: another `apply` or `run`, of any environment, wrote the
//! state store between an attempt's plan and its apply — on Postgres, typically the writer whose
//! engine lock the attempt waited for): every attempt of the operations retried here plans again
//! (`run` plans each attempt itself; `apply` plans again and goes on only with the versions the
//! user confirmed).
//!
//! Test hook: `EFMESH_TEST_TRANSIENT=<n>` makes the first `n` attempts of a retried operation
//! fail at their start with an injected transient engine error (`IO Error: … (test hook)`),
//! so the integration tests can prove the loop without a flaky lock. Only tests set it.

use super::ApplyError;
use crate::engine::EngineError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The test hook's environment variable (see the module docs).
pub const TRANSIENT_ENV: &str = "EFMESH_TEST_TRANSIENT";

/// First backoff; doubled after each failed attempt, capped at [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

static INJECTED: AtomicU32 = AtomicU32::new(0);

/// The wait after failed attempt `attempt` (0-based): 200 ms, 400 ms, 800 ms, … up to 30 s.
pub fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32 << attempt.min(16)).min(MAX_BACKOFF)
}

/// True when `message` (an engine's error text) says another process holds a lock, a
/// transaction conflicted, or I/O failed: worth retrying. Only the error type at the start of
/// the message counts (`IO Error: …`, `TransactionContext Error: …`, SQLite's `database is
/// locked`), never a word further in; and I/O errors that retrying cannot cure (a file or
/// pattern not found, permission denied) are not transient. Parser, binder, catalog,
/// conversion, constraint and other SQL errors are not.
pub fn is_transient_message(message: &str) -> bool {
    let m = message.trim_start();
    // An open failure names the file before the engine's own message: judge the latter.
    let m = crate::engine::open_failure_message(m);
    if let Some(detail) = m.strip_prefix("IO Error:") {
        // A file that fails its checksums stays so (SPEC §4 invariant 8).
        const DETERMINISTIC: [&str; 7] =
            ["no files found", "no such file", "not found", "does not exist", "permission denied", "read-only file system", "corrupt database file"];
        let d = detail.to_ascii_lowercase();
        return !DETERMINISTIC.iter().any(|t| d.contains(t));
    }
    m.starts_with("TransactionContext Error:") || m.starts_with("database is locked") || m.starts_with("Lock Error:")
}

impl ApplyError {
    /// True for a failure that retrying may cure ([`is_transient_message`] on an engine error, a
    /// busy state store); false for SQL errors, contracts, audits and everything else.
    pub fn is_transient(&self) -> bool {
        match self {
            ApplyError::Engine(e) | ApplyError::Build { error: e, .. } => e.transient || is_transient_message(&e.message),
            ApplyError::State(s) => s.is_busy(),
            ApplyError::Several(all) | ApplyError::SeveralInRun(all) => all.iter().all(ApplyError::is_transient),
            _ => false,
        }
    }
}

/// True when `err` (anywhere in its chain) is transient: an [`ApplyError`] that is, a busy
/// [`crate::state::StateError`], or an [`EngineError`] the engine marked transient or with a
/// transient message (e.g. the engine file locked by another process at open).
pub fn is_transient(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<ApplyError>().is_some_and(ApplyError::is_transient)
            || e.downcast_ref::<crate::state::StateError>().is_some_and(crate::state::StateError::is_busy)
            || e.downcast_ref::<EngineError>().is_some_and(|e| e.transient || is_transient_message(&e.message))
    })
}

/// True when `err` (anywhere in its chain) is a stale plan ([`ApplyError::StalePlan`]: the state
/// store changed between the attempt's plan and its apply; nothing was done). Not transient in
/// itself — the same plan would be refused again — but cured by planning again, which every
/// attempt of [`with_retries`] does: so it is retried there (see the module docs).
pub fn is_stale_plan(err: &anyhow::Error) -> bool {
    err.chain().any(|e| matches!(e.downcast_ref::<ApplyError>(), Some(ApplyError::StalePlan { .. })))
}

/// Runs `attempt` up to `1 + retries` times while it fails with a transient error
/// ([`is_transient`]) or a stale plan ([`is_stale_plan`]: each attempt must plan again),
/// sleeping [`backoff`] between attempts and logging a warning each time.
/// The attempt number (0-based) is passed in.
///
/// # Errors
/// The last failure, or the first that is not transient.
pub fn with_retries<T>(retries: u32, what: &str, mut attempt: impl FnMut(u32) -> anyhow::Result<T>) -> anyhow::Result<T> {
    retry_loop(retries, what, |n| injected().map_err(anyhow::Error::from).and_then(|()| attempt(n)))
}

/// Runs `attempt` (given the attempt's number) until it succeeds, fails with an error that is
/// neither transient nor a stale plan, or `retries` retries were made, waiting [`backoff`] in
/// between.
fn retry_loop<T>(retries: u32, what: &str, mut attempt: impl FnMut(u32) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let mut n = 0;
    loop {
        match attempt(n) {
            Err(e) if n < retries && is_transient(&e) => {
                let wait = backoff(n);
                tracing::warn!(attempt = n + 1, retries, wait_ms = wait.as_millis() as u64, "{what} failed with a transient error, retrying: {e}");
                std::thread::sleep(wait);
                n += 1;
            }
            Err(e) if n < retries && is_stale_plan(&e) => {
                let wait = backoff(n);
                tracing::warn!(
                    attempt = n + 1,
                    retries,
                    wait_ms = wait.as_millis() as u64,
                    "{what}: another apply or run wrote the state store since this attempt's plan (nothing was done); planning again"
                );
                std::thread::sleep(wait);
                n += 1;
            }
            other => return other,
        }
    }
}

/// [`with_retries`] without the test hook's injected failures: for the steps around an attempt
/// (taking an environment's lock while the state store is busy), which the hook's counts do not
/// cover.
pub fn retrying<T>(retries: u32, what: &str, mut attempt: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
    retry_loop(retries, what, |_| attempt())
}

/// The test hook: an injected transient failure while fewer than `EFMESH_TEST_TRANSIENT`
/// were injected in this process.
fn injected() -> Result<(), ApplyError> {
    let Some(limit) = std::env::var(TRANSIENT_ENV).ok().and_then(|v| v.parse::<u32>().ok()) else { return Ok(()) };
    if INJECTED.fetch_add(1, Ordering::SeqCst) < limit {
        return Err(ApplyError::Engine(EngineError::new("", format!("IO Error: injected transient failure ({TRANSIENT_ENV}, test hook)"))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_io_errors_are_transient_sql_errors_are_not() {
        assert!(is_transient_message("IO Error: Could not set lock on file \"x.duckdb\": Conflicting lock is held in /usr/bin/efmesh (PID 12)"));
        assert!(is_transient_message("TransactionContext Error: Catalog write-write conflict on create with \"t\""));
        // The engine's message behind the file an open could not lock.
        assert!(is_transient_message("cannot open DuckDB database `/p/x.duckdb`: IO Error: Could not set lock on file \"/p/x.duckdb\": Conflicting lock"));
        // With the hint the open failure carries after DuckDB's message.
        assert!(is_transient_message(
            "cannot open DuckDB database `/p/x.duckdb`: IO Error: Could not set lock on file \"/p/x.duckdb\": Conflicting lock is held in /usr/bin/efmesh (PID 12)\n  hint: another process (pid 12) is writing this DuckDB file"
        ));
        assert!(!is_transient_message("cannot open DuckDB database `/p/x.duckdb`: Serialization Error: not a DuckDB file"));
        for sql in [
            "Parser Error: syntax error at or near \"SELEC\"",
            "Binder Error: Referenced column \"x\" not found",
            "Conversion Error: Could not convert string 'a' to INT32",
            "Catalog Error: Table with name t does not exist!",
            "Constraint Error: NOT NULL constraint failed",
        ] {
            assert!(!is_transient_message(sql), "{sql}");
        }
    }

    #[test]
    fn only_the_error_type_counts_and_deterministic_io_errors_are_not_transient() {
        for deterministic in [
            "IO Error: No files found that match the pattern \"data/missing.csv\"",
            "IO Error: Cannot open file \"/data/x.csv\": No such file or directory",
            "IO Error: Cannot open file \"/data/x.csv\": Permission denied",
            // A transient word inside another error type's text does not make it transient.
            "Binder Error: table \"IO Error\" has a column \"Conflict on\"",
            "Invalid Input Error: Could not set lock on nothing in particular",
        ] {
            assert!(!is_transient_message(deterministic), "{deterministic}");
        }
        assert!(is_transient_message("IO Error: Could not read from file \"x.parquet\": Resource temporarily unavailable"));
        // A file failing its checksums stays so: never waited on as a lock.
        assert!(!is_transient_message("IO Error: Corrupt database file: computed checksum 1 does not match stored checksum 2 in block at location 12288"));
        assert!(is_transient_message("database is locked"));
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(0), Duration::from_millis(200));
        assert_eq!(backoff(1), Duration::from_millis(400));
        assert_eq!(backoff(3), Duration::from_millis(1600));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    /// A stale plan is retried (every attempt plans again), without being called transient: the
    /// same plan would be refused again. Without retries left, it is returned as it came.
    #[test]
    fn a_stale_plan_is_retried_as_the_next_attempt_plans_again() {
        let stale = || -> anyhow::Error { ApplyError::StalePlan { env: "dev".to_string() }.into() };
        assert!(is_stale_plan(&stale()) && !is_transient(&stale()));
        assert!(is_stale_plan(&stale().context("run `dev`")), "anywhere in the chain");
        assert!(!is_stale_plan(&ApplyError::Engine(EngineError::new("", "IO Error: disk hiccup")).into()));
        let mut calls = 0;
        let r = retry_loop(2, "run `dev`", |n| {
            calls += 1;
            if n < 1 { Err(stale()) } else { Ok(n) }
        });
        assert_eq!((r.unwrap(), calls), (1, 2));
        let mut calls = 0;
        let r: anyhow::Result<()> = retry_loop(0, "run `dev`", |_| {
            calls += 1;
            Err(stale())
        });
        assert!(r.is_err_and(|e| is_stale_plan(&e)));
        assert_eq!(calls, 1, "no retries asked: refused as before");
    }

    #[test]
    fn only_transient_failures_are_retried() {
        let mut calls = 0;
        let r: anyhow::Result<()> = with_retries(3, "test", |_| {
            calls += 1;
            Err(ApplyError::Engine(EngineError::new("SELECT", "Binder Error: nope")).into())
        });
        assert!(r.is_err());
        assert_eq!(calls, 1, "an SQL error is never retried");
        let mut calls = 0;
        let r = with_retries(2, "test", |n| {
            calls += 1;
            if n < 1 { Err(ApplyError::Engine(EngineError::new("", "IO Error: disk hiccup")).into()) } else { Ok(n) }
        });
        assert_eq!(r.unwrap(), 1);
        assert_eq!(calls, 2);
    }
}
