//! Environment leases: a lock named `env:<name>` held in the state store by one process at a
//! time (`apply`, `run`; later `restate` and a global one for `janitor`).
//!
//! A lease records its owner (pid, host, command, when it started) and an expiry. The holder
//! renews it every `ttl / 3` from a background thread ([`LeaseGuard`]), with its own handle on
//! the store. A lease that expired, or whose owner process is dead on this host (checked through
//! `/proc`), is stale: the next process that asks reclaims it, with a warning naming the owner.
//! The holder's store handle is fenced by the lease ([`StateStore::set_fence`]): every state
//! write first checks, in its own transaction, that the lease still carries the holder's token,
//! so a holder that lost its lease (stalled past its expiry, reclaimed by another process) stops
//! before its next write with [`StateError::LeaseLost`].

use super::{LeaseClaim, LeaseHolder, LeaseRecord, PendingPromotion, StateError, StateStore};
use crate::core::interval::{Millis, now_millis, to_iso};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Default lease time to live; overridden by [`TTL_ENV`].
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

/// Environment variable overriding the lease time to live, in milliseconds (tests, operators
/// with very long builds use the default and the heartbeat instead).
pub const TTL_ENV: &str = "EFMESH_LEASE_TTL_MS";

/// The lease name of environment `env`.
pub fn env_lease(env: &str) -> String {
    format!("env:{env}")
}

/// The lease time to live: [`TTL_ENV`] when set to a positive number of ms, else [`DEFAULT_TTL`].
pub fn ttl() -> Duration {
    std::env::var(TTL_ENV).ok().and_then(|v| v.parse::<u64>().ok()).filter(|&ms| ms > 0).map_or(DEFAULT_TTL, Duration::from_millis)
}

/// This host's name (`/proc/sys/kernel/hostname`, `/etc/hostname`, `$HOSTNAME`), or `unknown`.
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| fs_err::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".to_string())
}

/// True when `pid` names no live process on this host: `/proc/<pid>` is gone or the process is a
/// zombie. Where `/proc` does not exist, nothing is known to be dead (expiry alone reclaims).
pub fn pid_is_dead(pid: u32) -> bool {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return false;
    }
    match fs_err::read_to_string(proc.join(pid.to_string()).join("stat")) {
        // The state is the first field after the command name (in parentheses, may hold spaces).
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// True when `lease` is stale: expired at `now`, or owned by a dead process on this host.
pub fn is_stale(lease: &LeaseRecord, now: Millis, host: &str) -> bool {
    lease.expires_at.as_str() <= to_iso(now).as_str() || (lease.holder.host == host && lease.holder.pid != std::process::id() && pid_is_dead(lease.holder.pid))
}

/// A lease held by this process: renewed from a background thread until dropped, then
/// released. The store handle it was taken with is fenced by it until then.
#[derive(Debug)]
pub struct LeaseGuard {
    name: String,
    token: String,
    lost: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// A handle for releasing (the heartbeat's own, returned when the thread stops).
    store: Arc<Mutex<Option<Box<dyn StateStore>>>>,
}

/// Why a lease could not be taken.
#[derive(Debug)]
pub enum Refused {
    /// Another live process holds it.
    Held(LeaseRecord),
    /// The store failed.
    State(StateError),
}

impl LeaseGuard {
    /// Takes lease `name` on `store` for this process running `command`, waiting up to `wait`
    /// (polling every 200 ms) while another live process holds it. A stale lease is reclaimed
    /// with a warning. On success `store` is fenced by the lease and a heartbeat thread renews
    /// it every `ttl / 3`.
    ///
    /// # Errors
    /// [`Refused::Held`] naming the holder when it is still held after `wait`;
    /// [`Refused::State`] when the store fails.
    pub fn acquire(store: &dyn StateStore, name: &str, command: &str, wait: Duration) -> Result<LeaseGuard, Refused> {
        Self::acquire_with_ttl(store, name, command, wait, ttl())
    }

    /// [`LeaseGuard::acquire`] with an explicit time to live.
    ///
    /// # Errors
    /// As [`LeaseGuard::acquire`].
    pub fn acquire_with_ttl(store: &dyn StateStore, name: &str, command: &str, wait: Duration, ttl: Duration) -> Result<LeaseGuard, Refused> {
        let host = host_name();
        let pid = std::process::id();
        let token =
            format!("{pid}-{host}-{}-{}", now_millis(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos()));
        let deadline = std::time::Instant::now() + wait;
        loop {
            let now = now_millis();
            let holder = LeaseHolder { pid, host: host.clone(), command: command.to_string(), started_at: to_iso(now) };
            let stale = |l: &LeaseRecord| is_stale(l, now, &host);
            match store.try_acquire_lease(name, &token, &holder, now + ttl.as_millis() as Millis, now, &stale).map_err(Refused::State)? {
                LeaseClaim::Acquired { reclaimed } => {
                    if let Some(old) = reclaimed {
                        let why = if old.expires_at.as_str() <= to_iso(now).as_str() { "expired" } else { "its owner is no longer running" };
                        tracing::warn!(lock = name, "reclaimed the stale lock `{name}` held by {} ({why}, expiry {})", old.holder, old.expires_at);
                    }
                    store.set_fence(Some((name.to_string(), token.clone())));
                    return Ok(Self::start(store, name, token, ttl));
                }
                LeaseClaim::Held(held) => {
                    if std::time::Instant::now() >= deadline {
                        return Err(Refused::Held(held));
                    }
                    std::thread::sleep(
                        Duration::from_millis(200).min(deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1))),
                    );
                }
            }
        }
    }

    fn start(store: &dyn StateStore, name: &str, token: String, ttl: Duration) -> LeaseGuard {
        let lost = Arc::new(AtomicBool::new(false));
        let handle: Arc<Mutex<Option<Box<dyn StateStore>>>> = Arc::new(Mutex::new(store.reopen().ok()));
        let (tx, rx) = mpsc::channel::<()>();
        let thread = {
            let (name, token, lost, handle) = (name.to_string(), token.clone(), lost.clone(), handle.clone());
            std::thread::Builder::new()
                .name("efmesh-lease".into())
                .spawn(move || {
                    let every = ttl / 3;
                    loop {
                        match rx.recv_timeout(every) {
                            Err(mpsc::RecvTimeoutError::Timeout) => {}
                            _ => return,
                        }
                        let guard = handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        let Some(store) = guard.as_ref() else { return };
                        let now = now_millis();
                        match store.renew_lease(&name, &token, now + ttl.as_millis() as Millis, now) {
                            Ok(true) => tracing::debug!(lock = %name, "lock renewed"),
                            Ok(false) => {
                                lost.store(true, Ordering::SeqCst);
                                tracing::error!(lock = %name, "this process lost the lock `{name}` (another process reclaimed it); it stops before its next write");
                                return;
                            }
                            // A failed renewal is retried at the next beat; the lease may expire meanwhile.
                            Err(e) => tracing::warn!(lock = %name, "cannot renew the lock: {e}"),
                        }
                    }
                })
                .ok()
        };
        LeaseGuard { name: name.to_string(), token, lost, stop: Some(tx), thread, store: handle }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True once the heartbeat found the lease taken over.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stops the heartbeat and releases the lease (if still ours); `store` (the fenced handle)
    /// is unfenced.
    pub fn release(mut self, store: &dyn StateStore) {
        store.set_fence(None);
        self.finish(Some(store));
    }

    fn finish(&mut self, store: Option<&dyn StateStore>) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let own = self.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let target: Option<&dyn StateStore> = store.or(own.as_deref());
        if let Some(s) = target
            && let Err(e) = s.release_lease(&self.name, &self.token)
        {
            tracing::warn!(lock = %self.name, "cannot release the lock (it expires by itself): {e}");
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.finish(None);
        }
    }
}

/// The promotions recorded as under way whose process is gone: those of environments whose
/// lease is free, stale, or held by this very process. A promotion in a live process holding
/// its environment's lease is still under way and is left alone.
///
/// # Errors
/// The store cannot be read.
pub fn interrupted_promotions(state: &dyn StateStore) -> Result<Vec<PendingPromotion>, StateError> {
    let mut pending = state.pending_promotions()?;
    if pending.is_empty() {
        return Ok(pending);
    }
    let host = host_name();
    let now = now_millis();
    let mut keep = Vec::with_capacity(pending.len());
    for p in pending.drain(..) {
        let mine_or_gone = match state.lease(&env_lease(&p.env))? {
            Some(l) => (l.holder.pid == std::process::id() && l.holder.host == host) || is_stale(&l, now, &host),
            None => true,
        };
        if mine_or_gone {
            keep.push(p);
        }
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SqliteStore;

    #[test]
    fn the_heartbeat_keeps_a_short_lease_alive_and_release_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let a = SqliteStore::open(&path).unwrap();
        let b = SqliteStore::open(&path).unwrap();
        let ttl = Duration::from_millis(300);
        let guard = LeaseGuard::acquire_with_ttl(&a, "env:dev", "efmesh apply dev", Duration::ZERO, ttl).map_err(|_| "refused").unwrap();
        let first = b.lease("env:dev").unwrap().unwrap();
        assert_eq!((first.holder.pid, first.holder.command.as_str()), (std::process::id(), "efmesh apply dev"));
        // Three ttls later the lease is still held (renewed every ttl/3), never reclaimable.
        std::thread::sleep(ttl * 3);
        let renewed = b.lease("env:dev").unwrap().unwrap();
        assert!(renewed.expires_at > first.expires_at, "{renewed:?} vs {first:?}");
        assert!(!guard.is_lost());
        match LeaseGuard::acquire_with_ttl(&b, "env:dev", "efmesh run dev", Duration::ZERO, ttl) {
            Err(Refused::Held(h)) => assert_eq!(h.holder.command, "efmesh apply dev"),
            _ => panic!("the lease was taken over while its holder was alive"),
        }
        // The fenced handle writes; after release it is unfenced and the lease is gone.
        a.canon_cache_put(&[("k".into(), "v".into())]).unwrap();
        guard.release(&a);
        assert!(b.lease("env:dev").unwrap().is_none());
        let other = LeaseGuard::acquire_with_ttl(&b, "env:dev", "efmesh run dev", Duration::ZERO, ttl).map_err(|_| "refused").unwrap();
        // `a` is no longer fenced by a lease it gave up.
        a.canon_cache_put(&[("k".into(), "w".into())]).unwrap();
        drop(other);
        assert!(b.lease("env:dev").unwrap().is_none(), "dropping a guard releases its lease");
    }

    #[test]
    fn a_dead_pid_is_dead_and_this_one_is_not() {
        assert!(!pid_is_dead(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(pid_is_dead(pid));
    }
}
