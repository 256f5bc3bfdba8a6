//! The last line of defence of the script sandbox: a wall-clock watchdog on every evaluation.
//!
//! The Lua and Rhai hosts stop a file that exceeds its budget themselves (the Lua instruction
//! hook and the work meter charged by the library wrappers, Rhai's `on_progress`), with a load
//! error naming the file. They can only do so when control comes back to the interpreter. A
//! single operation the sandbox cannot foresee or interrupt (say, comparing two huge strings
//! inside the VM, over and over between two hook calls) could still run for long. So every
//! top-level evaluation is registered here with its budget; one process-wide thread watches
//! them, and when an evaluation is still running [`GRACE`] after its budget ended, it prints an
//! error naming the file on stderr and exits the process with status 1. That happens while the
//! project is being loaded, before anything is written to the engine or the state store.
//!
//! Ending the process is the binary's choice ([`exit_when_stuck`], set by `main`): a program
//! embedding the library (the test harness, say) gets the error logged instead, since nothing
//! short of ending the process can interrupt the stuck thread.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long an evaluation may run past its budget before the process is stopped. The hosts
/// stop a runaway file well within this; only code stuck in one uninterruptible operation
/// reaches it.
pub const GRACE: Duration = Duration::from_millis(1000);

/// Whether a stuck evaluation ends the process (see the module docs).
static EXIT_WHEN_STUCK: AtomicBool = AtomicBool::new(false);

/// Makes a stuck evaluation end the process with status 1 (the `efmesh` binary does); otherwise
/// it is logged as an error.
pub fn exit_when_stuck(on: bool) {
    EXIT_WHEN_STUCK.store(on, Ordering::SeqCst);
}

struct Entry {
    id: u64,
    file: PathBuf,
    budget: Duration,
    /// Time the evaluation may run beyond its budget before the [`GRACE`] starts: the
    /// verification calls of audit bodies, which run outside the file's budget, each use's
    /// under a budget of its own ([`Watch::allow_extra`]).
    extra: Duration,
    started: Instant,
}

impl Entry {
    fn fatal_at(&self) -> Instant {
        self.started + self.budget + self.extra + GRACE
    }
}

#[derive(Default)]
struct Watched {
    entries: Vec<Entry>,
    next_id: u64,
}

struct Watchdog {
    watched: Mutex<Watched>,
    changed: Condvar,
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, Watched> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watching loop: sleeps until the earliest fatal instant, or a change.
    fn watch(&self) {
        let mut watched = self.lock();
        loop {
            let now = Instant::now();
            if let Some(i) = watched.entries.iter().position(|e| now >= e.fatal_at()) {
                let stuck = watched.entries.remove(i);
                fatal(&stuck, now);
                continue;
            }
            watched = match watched.entries.iter().map(Entry::fatal_at).min() {
                None => self.changed.wait(watched).unwrap_or_else(PoisonError::into_inner),
                Some(at) => self.changed.wait_timeout(watched, at.saturating_duration_since(now)).unwrap_or_else(PoisonError::into_inner).0,
            };
        }
    }
}

/// Reports the stuck evaluation and ends the process (status 1) when the binary asked for it.
fn fatal(stuck: &Entry, now: Instant) {
    let msg = stuck_message(stuck, now.duration_since(stuck.started));
    if EXIT_WHEN_STUCK.load(Ordering::SeqCst) {
        crate::ewriteln!("error: project failed to load\n{msg}");
        std::process::exit(1)
    }
    tracing::error!("{msg}");
}

/// What [`fatal`] says of `stuck`, which ran for `ran`: the file, its budget and the time
/// allowed beyond it for the verification calls of its audit bodies, when any.
fn stuck_message(stuck: &Entry, ran: Duration) -> String {
    let extra = if stuck.extra.is_zero() {
        String::new()
    } else {
        format!(", plus {} ms allowed for the calls efmesh made to check that its audit bodies keep no state", stuck.extra.as_millis())
    };
    format!(
        "{}: evaluation still running after {} ms (its budget is {} ms{extra}): it is stuck in one operation the sandbox cannot interrupt \
         (huge strings or tables?); efmesh stops here, nothing was written",
        stuck.file.display(),
        ran.as_millis(),
        stuck.budget.as_millis()
    )
}

/// The process-wide watchdog, its thread started on first use; `None` when the thread cannot
/// be started (the hosts' own budgets still apply).
fn watchdog() -> Option<&'static Watchdog> {
    static WATCHDOG: OnceLock<Option<&'static Watchdog>> = OnceLock::new();
    *WATCHDOG.get_or_init(|| {
        let dog: &'static Watchdog = Box::leak(Box::new(Watchdog { watched: Mutex::new(Watched::default()), changed: Condvar::new() }));
        match std::thread::Builder::new().name("efmesh-watchdog".into()).spawn(move || dog.watch()) {
            Ok(_) => Some(dog),
            Err(e) => {
                tracing::warn!("cannot start the script watchdog thread: {e}");
                None
            }
        }
    })
}

/// One watched evaluation; dropping it ends the watch.
#[derive(Debug)]
pub struct Watch {
    id: Option<u64>,
}

/// Starts watching the evaluation of `file` (relative to the project root), whose budget is
/// `budget`: if it is still running [`GRACE`] after the budget ended, the process exits.
pub fn watch(file: &Path, budget: Duration) -> Watch {
    let Some(dog) = watchdog() else { return Watch { id: None } };
    let mut watched = dog.lock();
    let id = watched.next_id;
    watched.next_id += 1;
    let entry = Entry { id, file: file.to_path_buf(), budget, extra: Duration::ZERO, started: Instant::now() };
    // The watching thread sleeps until the earliest fatal instant: wake it only when this one
    // comes first (one wake-up per file would cost more than the evaluation of a small file).
    let earliest = watched.entries.iter().all(|e| e.fatal_at() > entry.fatal_at());
    watched.entries.push(entry);
    drop(watched);
    if earliest {
        dog.changed.notify_all();
    }
    Watch { id: Some(id) }
}

impl Watch {
    /// Lets the watched evaluation run `extra` in all beyond its budget (before the [`GRACE`]):
    /// the time of the calls the host makes outside the file's budget (the verification calls
    /// of audit bodies: the time earlier uses' calls took plus the whole budget of the use
    /// being verified, so it grows use by use). Only ever lengthens (a smaller `extra` is
    /// ignored): the watching thread, asleep until an earlier instant, need not be woken.
    pub fn allow_extra(&self, extra: Duration) {
        if let (Some(id), Some(dog)) = (self.id, watchdog()) {
            for e in dog.lock().entries.iter_mut().filter(|e| e.id == id) {
                e.extra = e.extra.max(extra);
            }
        }
    }
}

impl Drop for Watch {
    /// Ends the watch. The watching thread is not woken: at worst it wakes at the instant this
    /// entry would have become fatal, finds it gone, and sleeps again.
    fn drop(&mut self) {
        if let (Some(id), Some(dog)) = (self.id, watchdog()) {
            dog.lock().entries.retain(|e| e.id != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stuck_message_names_the_file_its_budget_and_the_time_allowed_for_verification_calls() {
        let entry = |extra: Duration| Entry { id: 0, file: PathBuf::from("models/m.lua"), budget: Duration::from_millis(500), extra, started: Instant::now() };
        let plain = stuck_message(&entry(Duration::ZERO), Duration::from_millis(1600));
        assert!(plain.starts_with("models/m.lua: evaluation still running after 1600 ms (its budget is 500 ms): it is stuck"), "{plain}");
        let verified = stuck_message(&entry(Duration::from_millis(3000)), Duration::from_millis(4600));
        assert!(
            verified.starts_with(
                "models/m.lua: evaluation still running after 4600 ms (its budget is 500 ms, plus 3000 ms allowed for the calls efmesh made to check that its audit bodies keep no state): it is stuck"
            ),
            "{verified}"
        );
    }
}
