//! Canonical digests computed ahead of the plan that needs them.
//!
//! A cold `plan` (no state store yet, so no canonicalisation cache) canonicalises every body.
//! Between the end of the evaluation and the plan's canonicalisation, the main thread does
//! serial work (the DAG, the load and project caches, opening the state store, the plan's
//! reads) while the other cores sit idle. A command that is about to plan says so
//! ([`enable`]); the loader then hands every rendered body to [`start`], whose threads
//! canonicalise them in the background, and the plan takes what they computed ([`take`]),
//! helping with what is left (SPEC §5 "Canonical digests computed ahead").
//!
//! Trust: an entry is the [`canonical_digest`] of its key, the body text itself — a pure
//! function of that text — so an entry is current for any caller asking with the same text;
//! a body the prefetch does not hold is canonicalised by the caller as before. One prefetch
//! at a time, taken once (memory is not kept past the plan).

use super::canon::{SqlError, canonical_digest};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

static WANTED: AtomicBool = AtomicBool::new(false);
static CURRENT: Mutex<Option<Arc<Prefetch>>> = Mutex::new(None);

/// Declares that this process is about to plan: the next successful load with no state store
/// on disk starts a [`Prefetch`] ([`wanted`]). Off by default (library callers, `check`,
/// `watch`: nothing is computed ahead for them).
pub fn enable() {
    WANTED.store(true, Ordering::Relaxed);
}

/// Whether [`enable`] was called in this process.
#[must_use]
pub fn wanted() -> bool {
    WANTED.load(Ordering::Relaxed)
}

/// Bodies canonicalised by background threads, each claimed once by whichever thread gets it
/// first (a background thread or a [`Prefetch::help`]ing caller).
#[derive(Debug)]
pub struct Prefetch {
    bodies: Vec<String>,
    index: HashMap<String, usize>,
    next: AtomicUsize,
    /// `None`: canonicalising that body panicked on a background thread (the caller computes it
    /// again on its own thread, where the panic surfaces as it would without a prefetch).
    results: Vec<OnceLock<Option<Result<String, SqlError>>>>,
}

impl Prefetch {
    fn new(bodies: Vec<String>) -> Prefetch {
        let mut index = HashMap::with_capacity(bodies.len());
        for (i, b) in bodies.iter().enumerate() {
            index.entry(b.clone()).or_insert(i);
        }
        let results = (0..bodies.len()).map(|_| OnceLock::new()).collect();
        Prefetch { bodies, index, next: AtomicUsize::new(0), results }
    }

    /// Canonicalises unclaimed bodies on the calling thread until none is left.
    pub fn help(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(body) = self.bodies.get(i) else { return };
            // Never left unset, or a waiting caller would wait forever.
            let _ = self.results[i].set(std::panic::catch_unwind(|| canonical_digest(body)).ok());
        }
    }

    /// [`canonical_digest`] of `body` when this prefetch holds it: helps until every body is
    /// claimed, then waits for the one asked for. `None` for a body it does not hold (or whose
    /// canonicalisation panicked).
    #[must_use]
    pub fn get(&self, body: &str) -> Option<Result<String, SqlError>> {
        let i = *self.index.get(body)?;
        self.help();
        self.results[i].wait().clone()
    }

    /// Number of bodies held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    /// Whether no body is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }
}

/// Starts canonicalising `bodies` on `threads` background threads (at least one) and makes the
/// prefetch the current one (replacing any earlier, never taken). Threads that cannot be
/// spawned are skipped: the caller of [`Prefetch::get`] then computes what is left.
pub fn start(bodies: Vec<String>, threads: usize) {
    let p = Prefetch::spawn(bodies, threads);
    *CURRENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(p);
}

impl Prefetch {
    /// A prefetch of `bodies` canonicalised on `threads` background threads (at least one),
    /// without making it the current one.
    #[must_use]
    pub fn spawn(bodies: Vec<String>, threads: usize) -> Arc<Prefetch> {
        let p = Arc::new(Prefetch::new(bodies));
        for _ in 0..threads.max(1) {
            let p = p.clone();
            let _ = std::thread::Builder::new().name("efmesh-canon".into()).spawn(move || p.help());
        }
        p
    }
}

/// The current prefetch, removed (a later caller finds none).
#[must_use]
pub fn take() -> Option<Arc<Prefetch>> {
    CURRENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetched_digests_equal_canonical_digest_and_unknown_bodies_are_not_served() {
        let bodies = vec!["SELECT 1 AS a".to_string(), "select  1 as a -- same".to_string(), "SELECT (".to_string(), "SELECT 2".to_string()];
        let p = Prefetch::new(bodies.clone());
        // A background thread racing the caller: every answer is still the digest of its key.
        let q = Arc::new(p);
        let bg = {
            let q = q.clone();
            std::thread::spawn(move || q.help())
        };
        for b in &bodies {
            assert_eq!(q.get(b), Some(canonical_digest(b)), "{b}");
        }
        bg.join().expect("helper");
        assert_eq!(q.get("SELECT 3"), None);
        assert_eq!(q.get(&bodies[0]), q.get(&bodies[1]), "formatting variants share a digest");
        assert!(q.get(&bodies[2]).is_some_and(|r| r.is_err()), "a parse error is kept as the error");
    }
}
