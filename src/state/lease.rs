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

/// The lease every writer of a project with a lake (`[lake]` or `[ducklake]`) takes, whatever
/// its environment: machines sharing the lake and the state store could otherwise build one
/// lake version for two environments at once.
pub const LAKE_LEASE: &str = "lake";

/// The lease a writer of `env` takes (`apply`, `run`, `restate`): [`LAKE_LEASE`] when the project
/// writes a lake, else the environment's own ([`env_lease`]).
pub fn writer_lease(env: &str, writes_a_lake: bool) -> String {
    if writes_a_lake { LAKE_LEASE.to_string() } else { env_lease(env) }
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

/// This process's identity beyond its pid: the kernel boot id, the pid namespace and the
/// process start time (clock ticks since boot, `/proc/<pid>/stat` field 22). `None` where `/proc`
/// does not tell (then only expiry reclaims a lease this process left).
pub fn own_identity() -> Option<Identity> {
    let boot = fs_err::read_to_string("/proc/sys/kernel/random/boot_id").ok()?.trim().to_string();
    let ns = fs_err::read_link("/proc/self/ns/pid").ok()?.to_string_lossy().chars().filter(char::is_ascii_digit).collect::<String>();
    let start = start_ticks(std::process::id())?;
    (!boot.is_empty() && !ns.is_empty()).then_some(Identity { boot, ns, start })
}

/// Where a lease holder ran and when its process started, as recorded in its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `/proc/sys/kernel/random/boot_id`: another value is another machine or another boot.
    pub boot: String,
    /// The pid namespace's inode (`/proc/self/ns/pid`): another value is another container.
    pub ns: String,
    /// Process start time in clock ticks since boot: another value with the same pid is another
    /// process (the pid was reused).
    pub start: u64,
}

impl Identity {
    /// The token prefix recording this identity.
    fn encode(&self) -> String {
        format!("v2:{}:{}:{}", self.boot, self.ns, self.start)
    }

    /// The identity a token records (`None` for tokens without one).
    pub fn of_token(token: &str) -> Option<Identity> {
        let mut parts = token.strip_prefix("v2:")?.split(':');
        let (boot, ns, start) = (parts.next()?.to_string(), parts.next()?.to_string(), parts.next()?.parse().ok()?);
        Some(Identity { boot, ns, start })
    }
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22, clock ticks since boot), if
/// it exists and is not a zombie.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs_err::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (in parentheses, may hold spaces) start at field 3.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if matches!(rest.first(), Some(&"Z" | &"X")) {
        return None;
    }
    rest.get(22 - 3)?.parse().ok()
}

/// True when `pid` names no process visible to this one: `kill(pid, 0)` fails with `ESRCH`
/// (`EPERM` means it exists under another user: alive), or it is a zombie.
pub fn pid_is_dead(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else { return false };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is delivered.
    if unsafe { libc::kill(p, 0) } == 0 {
        let zombie = fs_err::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string)))
            .is_some_and(|state| state == "Z" || state == "X");
        return zombie;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// True when the holder of `lease` is known to be gone, from this process's point of view:
/// its token records the same boot and pid namespace as `me`, and its pid is dead, or now names
/// another process (another start time). A holder on another machine, boot or container, or
/// with no recorded identity, is never known dead: only expiry reclaims its lease.
fn holder_is_gone(lease: &LeaseRecord, me: Option<&Identity>) -> bool {
    let (Some(me), Some(them)) = (me, Identity::of_token(&lease.token)) else { return false };
    if me.boot != them.boot || me.ns != them.ns {
        return false;
    }
    if lease.holder.pid == std::process::id() {
        return me.start != them.start;
    }
    pid_is_dead(lease.holder.pid) || start_ticks(lease.holder.pid).is_some_and(|start| start != them.start)
}

/// True when `lease` is stale: expired at `now`, or its holder is known gone
/// ([`holder_is_gone`]: same boot and pid namespace, pid dead or reused).
pub fn is_stale(lease: &LeaseRecord, now: Millis, _host: &str) -> bool {
    lease.expires_at.as_str() <= to_iso(now).as_str() || holder_is_gone(lease, own_identity().as_ref())
}

/// Why `state import` refuses while `held` is live ([`StateStore::import_state`]): who holds it,
/// until when, and how to proceed. A holder known gone ([`is_stale`]) never gets here.
pub fn import_refusal(held: &LeaseRecord) -> String {
    format!(
        "the lock `{}` is held by {} until {}: a command is running against this store (an import would replace the state under it); \
         retry when it is done. A holder that was killed on this host is known gone and does not block; one on another machine, boot \
         or container, or whose identity is not recorded, holds the lock until it expires: retry after {}",
        held.name, held.holder, held.expires_at, held.expires_at
    )
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
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        // The token records the holder's identity, so another process can tell it is gone.
        let token = match own_identity() {
            Some(id) => format!("{}:{pid}:{}:{nanos}", id.encode(), now_millis()),
            None => format!("v1:{pid}:{host}:{}:{nanos}", now_millis()),
        };
        let deadline = std::time::Instant::now() + wait;
        loop {
            // The store's clock: every process sharing the store measures expiry by it.
            let now = store.clock().map_err(Refused::State)?;
            let holder = LeaseHolder { pid, host: host.clone(), command: command.to_string(), started_at: to_iso(now) };
            let stale = |l: &LeaseRecord| is_stale(l, now, &host);
            match store.try_acquire_lease(name, &token, &holder, now + ttl.as_millis() as Millis, now, &stale).map_err(Refused::State)? {
                LeaseClaim::Acquired { reclaimed } => {
                    if let Some(old) = reclaimed {
                        let why = if old.expires_at.as_str() <= to_iso(now).as_str() { "expired" } else { "its owner is no longer running" };
                        tracing::warn!(lock = name, "reclaimed the stale lock `{name}` held by {} ({why}, expiry {})", old.holder, old.expires_at);
                    }
                    let guard = match store.reopen() {
                        Ok(handle) => Self::start(handle, name, token.clone(), ttl),
                        Err(e) => {
                            // No heartbeat, no lease: give it back rather than let it expire under us.
                            let _ = store.release_lease(name, &token);
                            return Err(Refused::State(e));
                        }
                    };
                    store.set_fence(Some((name.to_string(), token)));
                    return Ok(guard);
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

    fn start(heartbeat: Box<dyn StateStore>, name: &str, token: String, ttl: Duration) -> LeaseGuard {
        let lost = Arc::new(AtomicBool::new(false));
        let handle: Arc<Mutex<Option<Box<dyn StateStore>>>> = Arc::new(Mutex::new(Some(heartbeat)));
        let (tx, rx) = mpsc::channel::<()>();
        let thread = {
            let (name, token, lost, handle) = (name.to_string(), token.clone(), lost.clone(), handle.clone());
            std::thread::Builder::new()
                .name("efmesh-lease".into())
                .spawn(move || {
                    let every = ttl / 3;
                    let mut renewed = std::time::Instant::now();
                    loop {
                        match rx.recv_timeout(every) {
                            Err(mpsc::RecvTimeoutError::Timeout) => {}
                            _ => return,
                        }
                        let guard = handle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        let Some(store) = guard.as_ref() else { return };
                        let renewal = store.clock().and_then(|now| store.renew_lease(&name, &token, now + ttl.as_millis() as Millis, now));
                        match renewal {
                            Ok(true) => {
                                renewed = std::time::Instant::now();
                                tracing::debug!(lock = %name, "lock renewed");
                            }
                            Ok(false) => {
                                lost.store(true, Ordering::SeqCst);
                                tracing::error!(lock = %name, "this process lost the lock `{name}` (another process reclaimed it); it stops before its next write");
                                return;
                            }
                            // A failed renewal is retried at the next beat; the lease may expire meanwhile.
                            Err(e) => tracing::warn!(lock = %name, "cannot renew the lock: {e}"),
                        }
                        // Renewals failing for most of a ttl: the lease is as good as lost (the
                        // fence refuses writes once it expires, and engine steps a quarter ttl before).
                        if renewed.elapsed() > ttl - ttl / 4 && !lost.swap(true, Ordering::SeqCst) {
                            tracing::error!(lock = %name, "this process could not renew the lock `{name}` for {} ms; it stops before its next write", renewed.elapsed().as_millis());
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

/// The promotions recorded as under way that this process may undo: those of environments
/// whose lease this process holds (its own command's, or one [`take_for_recovery`] reclaimed).
/// A promotion of an environment whose lease is held by another process, live or stale, or by
/// none, is left alone: whoever undoes it must first take the lease, so the process that
/// started it, should it resume, fails with [`StateError::LeaseLost`] instead of recording
/// pointers over the views the recovery put back.
///
/// # Errors
/// The store cannot be read.
pub fn interrupted_promotions(state: &dyn StateStore, writes_a_lake: bool) -> Result<Vec<PendingPromotion>, StateError> {
    let mut pending = state.pending_promotions()?;
    if pending.is_empty() {
        return Ok(pending);
    }
    let host = host_name();
    let mut keep = Vec::with_capacity(pending.len());
    for p in pending.drain(..) {
        if state.lease(&writer_lease(&p.env, writes_a_lake))?.is_some_and(|l| l.holder.pid == std::process::id() && l.holder.host == host) {
            keep.push(p);
        }
    }
    Ok(keep)
}

/// Takes, on `handle`, the lease of every environment with a promotion recorded as under way
/// whose lease this process does not hold already: a free or stale lease is taken (reclaimed,
/// with a warning), one a live process holds is left (its promotion is under way). The
/// returned guards hold them until released; then [`interrupted_promotions`] lists the
/// promotions to undo.
///
/// # Errors
/// The store fails.
pub fn take_for_recovery(state: &dyn StateStore, handle: &dyn StateStore, writes_a_lake: bool) -> Result<Vec<LeaseGuard>, StateError> {
    let host = host_name();
    let mut guards = Vec::new();
    for p in state.pending_promotions()? {
        // The lease its writer held: in a project with a lake, the one `lake` of every
        // environment (taken once, then found held by this process).
        let name = writer_lease(&p.env, writes_a_lake);
        if state.lease(&name)?.is_some_and(|l| l.holder.pid == std::process::id() && l.holder.host == host) {
            continue;
        }
        match LeaseGuard::acquire(handle, &name, "efmesh (undoing an interrupted promotion)", Duration::ZERO) {
            Ok(g) => guards.push(g),
            Err(Refused::Held(_)) => {}
            Err(Refused::State(e)) => return Err(e),
        }
    }
    Ok(guards)
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
        let ttl = Duration::from_millis(600);
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
        // pid 1 exists (alive, or EPERM when it belongs to another user: alive too).
        assert!(!pid_is_dead(1));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(pid_is_dead(pid));
    }

    fn leased(store: &SqliteStore, name: &str, token: &str, pid: u32, expires: Millis) {
        let holder = LeaseHolder { pid, host: host_name(), command: "efmesh apply".into(), started_at: to_iso(now_millis()) };
        let always = |_: &LeaseRecord| true;
        store.try_acquire_lease(name, token, &holder, expires, now_millis(), &always).unwrap();
    }

    #[test]
    fn recovery_takes_a_stale_holders_lease_and_leaves_a_live_holders_promotion_alone() {
        let Some(me) = own_identity() else { return };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let a = SqliteStore::open(&path).unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let live = Identity { start: start_ticks(child.id()).unwrap(), ..me };
        let token = format!("{}:{}:0:0", live.encode(), child.id());
        let now = now_millis();
        // `live`: a live process holds the lease, not expired. `stale`: same process, expired.
        leased(&a, "env:live", &token, child.id(), now + 60_000);
        leased(&a, "env:stale", &token, child.id(), now - 1);
        for env in ["live", "stale"] {
            a.begin_promotion(env, &std::collections::BTreeMap::new(), &["SELECT 1".to_string()], now).unwrap();
        }
        // The stale holder's own handle (fenced by its token) as if it resumed later.
        let holder = SqliteStore::open(&path).unwrap();
        holder.set_fence(Some(("env:stale".into(), token.clone())));
        assert!(interrupted_promotions(&a, false).unwrap().is_empty(), "nothing is undone before its lease is taken");
        let handle = SqliteStore::open(&path).unwrap();
        let guards = take_for_recovery(&a, &handle, false).unwrap();
        assert_eq!(guards.len(), 1);
        let envs: Vec<String> = interrupted_promotions(&a, false).unwrap().into_iter().map(|p| p.env).collect();
        assert_eq!(envs, ["stale"]);
        assert_eq!(a.lease("env:live").unwrap().unwrap().token, token, "the live holder keeps its lease");
        assert!(holder.check_fence().unwrap_err().is_lease_lost());
        assert!(holder.abandon_promotion("stale").unwrap_err().is_lease_lost());
        for g in guards {
            g.release(&handle);
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_reused_pid_or_another_boot_or_container_is_told_apart() {
        let Some(me) = own_identity() else { return };
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let start = start_ticks(pid).unwrap();
        let lease = |id: &Identity, pid: u32| LeaseRecord {
            name: "env:dev".into(),
            token: format!("{}:{pid}:0:0", id.encode()),
            holder: LeaseHolder { pid, host: host_name(), command: "efmesh run dev".into(), started_at: String::new() },
            expires_at: "2999-01-01T00:00:00.000Z".into(),
            heartbeat_at: String::new(),
        };
        let same = Identity { start, ..me.clone() };
        assert!(!holder_is_gone(&lease(&same, pid), Some(&me)), "a live holder");
        let reused = Identity { start: start + 1, ..me.clone() };
        assert!(holder_is_gone(&lease(&reused, pid), Some(&me)), "its pid now names another process");
        let mine_reused = Identity { start: me.start + 1, ..me.clone() };
        assert!(holder_is_gone(&lease(&mine_reused, std::process::id()), Some(&me)), "an earlier process with this pid");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(holder_is_gone(&lease(&same, pid), Some(&me)), "a dead holder");
        let other_boot = Identity { boot: "another-boot".into(), ..same.clone() };
        assert!(!holder_is_gone(&lease(&other_boot, pid), Some(&me)), "another machine or boot: only expiry tells");
        let other_ns = Identity { ns: "1".into(), ..same };
        assert!(!holder_is_gone(&lease(&other_ns, pid), Some(&me)), "another container: only expiry tells");
        let mut old = lease(&me, pid);
        old.token = format!("{pid}-h-0-0");
        assert!(!holder_is_gone(&old, Some(&me)), "no recorded identity: only expiry tells");
    }

    #[test]
    fn a_lease_without_a_heartbeat_is_refused() {
        let store = SqliteStore::open_in_memory().unwrap();
        match LeaseGuard::acquire_with_ttl(&store, "env:dev", "efmesh apply dev", Duration::ZERO, Duration::from_secs(5)) {
            Err(Refused::State(e)) => assert!(e.to_string().contains(":memory:"), "{e}"),
            _ => panic!("a lease was taken with no handle to renew it"),
        }
        assert!(store.lease("env:dev").unwrap().is_none(), "the lease is given back");
    }
}
