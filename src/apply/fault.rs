//! Test hook for crash tests: `EFMESH_FAULT=<point>` makes the process abort (as `kill -9`
//! would stop it: no destructor, no flush, no rollback) when it reaches that point of an apply.
//!
//! Points: `after-build:<schema.table>` (a model was built and recorded), `after-upsert:<schema.table>`
//! (a unique-key upsert committed in the engine, not yet recorded after it),
//! `after-kept-mark:<schema.table>` (a keyed table's copy marked among the intents, not yet
//! taken: `apply::inherited::keep`),
//! `after-first-batch:<schema.table>` (a new time-range table created by its first batch's commit,
//! its snapshot not yet recorded), `in-group:<schema.table>:<k>` (batch `k`, 1-based, of a
//! time-range build ran inside a transaction shared with earlier batches, nothing of it
//! committed), `group-committed:<schema.table>:<k>` (a shared transaction ending with batch `k`
//! committed, its ledger rows not yet written), `before-intent`,
//! `after-intent` (the promotion is recorded as under way, no view moved yet),
//! `after-view-swap` (the views moved, the state store does not know yet),
//! `janitor-after-claim` (the janitor claimed its victims, nothing is dropped yet),
//! `after-epoch-stamp` (the engine database's epoch stamp raised at the end of an apply or run,
//! the state store's epoch not yet: [`crate::engine::epoch`]; `after-first-epoch-stamp`, the same
//! before its first write). Unset (the normal
//! case), a point costs one environment lookup. Only the integration tests set it.
//!
//! A second hook, `EFMESH_DELAY=<point>=<ms>[,<point>=<ms>…]`, makes the process sleep at a
//! named point ([`delay_point`]): the janitor's race test widens the windows between apply's
//! plan and its intents (`apply-after-plan`, before the engine is opened) and between the
//! janitor's candidate read and its claim (`janitor-before-claim`; also `janitor-before-drop`),
//! so every interleaving happens (each delay logs `test hook: delaying` at debug level); the scheduler tests hold a model's build (`build:<schema.table>`,
//! before its first transaction, on whichever connection builds it) to make builds overlap, and
//! the engine-epoch race test holds two applies there, between their opening and closing epoch
//! raises, to interleave them;
//! the engine-record test holds an apply between its catalog read and the close of its
//! connection (`apply-before-close`) to show the file stays locked, and between its proof that
//! the file is unchanged since the plan and its open (`apply-before-open`, after
//! `apply-after-plan`) to show a write there is still found (`run` passes both of those too:
//! it opens and closes the engine the same way); the lake lease test holds
//! a promotion between its intent and its view swap (`after-intent`); the lake tests make each
//! re-creation of a parquet version's view slow (`lake-publish:<schema.table>`) to show a
//! backfill's batches grouped between two of them; the import race test holds `state import`
//! between its comparison of the export with the engine database and its write
//! (`import-after-compare`) to run a writer (a restatement's run) there; the restatement race
//! test holds a run after a time-range model's batch (or a transaction of several) committed
//! and before its ledger record (`batch-committed:<schema.table>`, on the thread recording it)
//! to restate the range from another environment there; the promotion race tests hold an apply
//! between its view swap and the record of its pointers (`after-view-swap`) to read the
//! environment's status there, and a plan between its read of the engine's catalog and its check
//! (`plan-after-catalog`) to run a writer there.
//!
//! A third hook, `EFMESH_LOSE_LOCK=<point>`, makes the process lose the writer lock it holds
//! at a named point ([`lose_lock_point`]), as a holder stalled past the lock's expiry (suspended,
//! `SIGSTOP`) loses it to another process: the lock's row is deleted behind its back, so its
//! next fence check or fenced state write fails with `LeaseLost` (and its heartbeat finds the
//! lock gone at its next beat). Points: `before-swap-commit` (a promotion's view swap ran its
//! statements, not committed yet) and `after-view-swap` (the swap committed, the state store
//! does not know yet).
//!
//! A fourth hook, `EFMESH_STATE_FAIL=<write>:<how>`, makes a state write fail with the error of
//! a connection cut ([`state_write_point`]): `promote:committed` runs the promotion's state write
//! and then reports it failed (its `COMMIT` landed, the answer was lost); `promote:refused`
//! reports it failed without running it; `promote:refused-once` only the first time the process
//! reaches it (a `--retries` attempt after it writes normally). `record-epoch:<point>` is the
//! record of the engine epoch after the crash point `<point>` (`after-epoch-stamp`, the closing
//! raise; `after-first-epoch-stamp`, the opening one): `record-epoch:after-epoch-stamp:refused`
//! is an apply whose stamp was made and whose record failed (a full disk). `done:<schema.table>`
//! is the done record of a time-range model's batches after their engine commit
//! (`done:t.daily:refused-once`: the first batch of `t.daily` committed, not recorded, the
//! command failed transiently).

use crate::state::{StateError, StateStore};
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable naming the point at which the process aborts.
pub const FAULT_ENV: &str = "EFMESH_FAULT";

/// Aborts the process when [`FAULT_ENV`] equals the point `name()` names; does nothing
/// otherwise.
pub fn crash_point(name: impl FnOnce() -> String) {
    let Some(wanted) = std::env::var_os(FAULT_ENV) else { return };
    let point = name();
    if wanted.to_str() == Some(point.as_str()) {
        crate::ewriteln!("{FAULT_ENV}: aborting at `{point}` (test hook)");
        std::process::abort();
    }
}

/// The environment variable of the delay hook (see the module docs).
pub const DELAY_ENV: &str = "EFMESH_DELAY";

/// Sleeps as long as [`DELAY_ENV`] says for the point `name`; does nothing otherwise.
pub fn delay_point(name: &str) {
    let Some(spec) = std::env::var_os(DELAY_ENV) else { return };
    let spec = spec.to_string_lossy();
    let ms = spec.split(',').filter_map(|e| e.split_once('=')).find(|(p, _)| p.trim() == name).and_then(|(_, ms)| ms.trim().parse::<u64>().ok());
    if let Some(ms) = ms {
        tracing::debug!(point = name, ms, "test hook: delaying");
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The environment variable of the lock-loss hook (see the module docs).
pub const LOSE_LOCK_ENV: &str = "EFMESH_LOSE_LOCK";

/// Deletes the lock `lease` from `state` (whoever holds it) when [`LOSE_LOCK_ENV`] names the
/// point `name`; does nothing otherwise.
pub fn lose_lock_point(name: &str, state: &dyn StateStore, lease: &str) {
    let Some(wanted) = std::env::var_os(LOSE_LOCK_ENV) else { return };
    if wanted.to_str() != Some(name) {
        return;
    }
    let released = state.lease(lease).and_then(|held| match held {
        Some(held) => state.release_lease(lease, &held.token),
        None => Ok(()),
    });
    match released {
        Ok(()) => crate::ewriteln!("{LOSE_LOCK_ENV}: lost the lock `{lease}` at `{name}` (test hook)"),
        Err(e) => crate::ewriteln!("{LOSE_LOCK_ENV}: cannot drop the lock `{lease}` at `{name}` (test hook): {e}"),
    }
}

/// The environment variable of the state-write hook (see the module docs).
pub const STATE_FAIL_ENV: &str = "EFMESH_STATE_FAIL";

/// Set once a `refused-once` write was refused: the process writes normally from then on.
static REFUSED_ONCE: AtomicBool = AtomicBool::new(false);

/// Runs the state write `write`, named `name`, of the store `store` (as messages name it) —
/// unless [`STATE_FAIL_ENV`] is `<name>:committed` (the write runs, then a transient error is
/// returned, as when the connection dies after the server committed), `<name>:refused` (the
/// write does not run; the same error) or `<name>:refused-once` (as `refused`, the first time
/// the process reaches it only).
///
/// # Errors
/// The write's error, or the hook's.
pub fn state_write_point<T>(name: &str, store: &str, write: impl FnOnce() -> Result<T, StateError>) -> Result<T, StateError> {
    let wanted = std::env::var(STATE_FAIL_ENV).ok();
    let how = wanted.as_deref().and_then(|w| w.strip_prefix(name)).and_then(|rest| rest.strip_prefix(':'));
    let cut = |what: &str| {
        crate::ewriteln!("{STATE_FAIL_ENV}: the state write `{name}` {what} (test hook)");
        StateError::Backend {
            store: store.to_string(),
            op: format!("write `{name}`"),
            source: "the connection was closed before the answer came (test hook)".into(),
            transient: true,
        }
    };
    match how {
        Some("committed") => {
            write()?;
            Err(cut("committed, its answer lost"))
        }
        Some("refused") => Err(cut("failed, nothing written")),
        Some("refused-once") if !REFUSED_ONCE.swap(true, Ordering::SeqCst) => Err(cut("failed, nothing written (once)")),
        _ => write(),
    }
}
