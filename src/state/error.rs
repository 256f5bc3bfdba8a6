//! [`StateError`]: every way a state-store operation can fail, whatever the backend.

/// The backend's own error, kept as the [`source`](std::error::Error::source).
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The source of a [`StateError::Open`] whose connection could not be made or was cut while
/// opening (refused, reset, no route, a server that did not answer, starting up, shutting down,
/// out of connections): the driver's message, the password scrubbed. [`StateError::hint`] tells
/// it from another process's lock.
#[derive(Debug)]
pub struct ConnectionFailed(pub String);

impl std::fmt::Display for ConnectionFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectionFailed {}

/// A failed state-store operation. Each variant names the store (its file, `:memory:` for an
/// in-memory store) and what was being done; the backend's own error is kept as the
/// [`source`](std::error::Error::source). Messages follow `STYLE.md`: no trailing period, names
/// in backticks. [`StateError::hint`] gives the CLI's `hint:` line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The store could not be opened, is not a store of this backend, or could not be configured
    /// or initialised.
    #[error("cannot open the state store `{store}`")]
    Open {
        /// The store.
        store: String,
        /// The backend's error.
        #[source]
        source: BackendError,
        /// True when another process holding the store's lock caused it (retrying may succeed).
        transient: bool,
    },
    /// The store was written with another layout version (older or newer). It is never
    /// upgraded silently: `efmesh migrate` upgrades an older one.
    #[error("the state store `{store}` has version {found}, this efmesh needs version {wanted}")]
    Version {
        /// The store.
        store: String,
        /// Version found in `meta` (0 when `meta` is missing or empty).
        found: i64,
        /// [`STATE_VERSION`](super::STATE_VERSION).
        wanted: i64,
    },
    /// A read or write failed in the backend (including a lock still held by another process
    /// after the busy timeout, see [`StateError::is_busy`]).
    #[error("state store `{store}`: cannot {op}")]
    Backend {
        /// The store.
        store: String,
        /// What was being done, e.g. "read the pointers of environment `dev`".
        op: String,
        /// The backend's error.
        #[source]
        source: BackendError,
        /// True when another process holding the store's lock caused it (retrying may succeed).
        transient: bool,
    },
    /// A stored value cannot be read back (malformed JSON or timestamp, unknown status).
    #[error("state store `{store}`: cannot {op}: {detail}")]
    Corrupt {
        /// The store.
        store: String,
        /// What was being done.
        op: String,
        /// Which value is malformed, naming its row.
        detail: String,
    },
    /// [`StateStore::promote`](super::StateStore::promote): a snapshot the new pointer set needs
    /// is not in the store (another process removed it after the plan).
    /// Nothing was changed.
    #[error(
        "cannot promote `{env}`: snapshot `{name}` `{fingerprint}` disappeared from the state store \
         (removed by another process after the plan was made); nothing was changed, re-run `efmesh apply`"
    )]
    MissingSnapshot {
        /// Environment being promoted.
        env: String,
        /// Model name.
        name: String,
        /// Fingerprint the pointer names.
        fingerprint: String,
    },
    /// [`StateStore::promote`](super::StateStore::promote): a model listed as requiring a
    /// snapshot has no pointer in the new set (a caller bug). Nothing was changed.
    #[error("cannot promote `{env}`: model `{name}` requires a snapshot but the new pointer set has no entry for it")]
    MissingPointer {
        /// Environment being promoted.
        env: String,
        /// Model name.
        name: String,
    },
    /// This process held lease `lease` (e.g. `env:prod`) and lost it (it expired and another
    /// process reclaimed it): it stopped before writing anything more.
    #[error(
        "state store `{store}`: this process lost the lock `{lease}`{}; stopped before writing anything more",
        .holder.as_ref().map(|h| format!(" (now held by {h})")).unwrap_or_default()
    )]
    LeaseLost {
        /// The store.
        store: String,
        /// Lease name.
        lease: String,
        /// Who holds it now, if anyone.
        holder: Option<String>,
    },
    /// [`StateStore::restate_intervals`](super::StateStore::restate_intervals): the environment
    /// no longer points at a version the restatement names (another process applied meanwhile).
    /// Nothing was changed.
    #[error("state store `{store}`: environment `{env}` no longer serves the version of `{name}` being restated")]
    PointerMoved {
        /// The store.
        store: String,
        /// Environment.
        env: String,
        /// Model name.
        name: String,
    },
    /// [`StateStore::record_intents`](super::StateStore::record_intents): a version the apply
    /// or run relies on was reclaimed by the janitor after its plan was made. Nothing was done.
    #[error(
        "model `{name}` version `{short}`: reclaimed by the janitor after this plan was made ({why}); nothing was done; plan again",
        short = .fingerprint.get(..12).unwrap_or(.fingerprint.as_str())
    )]
    Reclaimed {
        /// The store.
        store: String,
        /// Model name.
        name: String,
        /// Fingerprint.
        fingerprint: String,
        /// What was found: its storage claimed, or its snapshot gone.
        why: String,
    },
    /// [`StateStore::import_state`](super::StateStore::import_state) refused: the store is not
    /// empty (without `replace`), or a live process holds one of its locks. Nothing was written.
    #[error("state store `{store}`: cannot import: {detail}; nothing was written")]
    Import {
        /// The store.
        store: String,
        /// Why.
        detail: String,
    },
}

impl StateError {
    /// True when another process held the store's write lock for longer than the busy timeout
    /// (about 5 s); retrying later may succeed.
    pub fn is_busy(&self) -> bool {
        matches!(self, StateError::Open { transient: true, .. } | StateError::Backend { transient: true, .. })
    }

    /// True when the store has another layout version than [`STATE_VERSION`](super::STATE_VERSION).
    pub fn is_version_mismatch(&self) -> bool {
        matches!(self, StateError::Version { .. })
    }

    /// True when a promotion found a required snapshot missing.
    pub fn is_missing_snapshot(&self) -> bool {
        matches!(self, StateError::MissingSnapshot { .. })
    }

    /// True when this process lost a lease it held.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, StateError::LeaseLost { .. })
    }

    /// True when a restatement found a pointer moved ([`StateError::PointerMoved`]).
    pub fn is_pointer_moved(&self) -> bool {
        matches!(self, StateError::PointerMoved { .. })
    }

    /// True when a version an apply relies on was reclaimed by the janitor
    /// ([`StateError::Reclaimed`]).
    pub fn is_reclaimed(&self) -> bool {
        matches!(self, StateError::Reclaimed { .. })
    }

    /// A `hint:` line for the CLI, when one helps.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StateError::Version { found: 0, .. } => {
                Some("this database is not an efmesh state store (it has no layout version); point `[state] path` (or `schema`) elsewhere")
            }
            StateError::Version { found, wanted, .. } if found < wanted => {
                Some("the store was written by an older efmesh: run `efmesh migrate` (it backs a SQLite store up beside itself first)")
            }
            StateError::Version { .. } => Some("the store was written by a newer efmesh; upgrade efmesh to use it"),
            StateError::LeaseLost { .. } => Some("the lock expired while this process was stalled; run the command again"),
            StateError::Reclaimed { .. } => Some("plan again: the plan then rebuilds what the janitor dropped"),
            StateError::Open { source, .. } | StateError::Backend { source, .. } if read_only(source.as_ref()) => Some(
                "the state store's session is read-only: its role or database defaults to read-only transactions (`default_transaction_read_only` is on; \
                 `ALTER ROLE <role> SET default_transaction_read_only = off` lifts it), or the server is a read-only standby; efmesh writes the store: \
                 connect as a role that may write, to the primary",
            ),
            StateError::Open { source, .. } if unreachable(source.as_ref()) => Some(
                "the state store's server cannot be reached or refused the connection (not running, starting or shutting down, out of connections, \
                 or the URL names another host or port): check that it runs and the URL, then run the command again",
            ),
            StateError::Open { source, .. } | StateError::Backend { source, .. } if self.is_busy() && lost_connection(source.as_ref()) => Some(
                "the connection to the state store was lost (a server restart, a network cut): run the command again when the server is back (`--retries N` retries by itself)",
            ),
            _ if self.is_busy() => Some("another efmesh process is writing the state store; retry when it is done"),
            _ => None,
        }
    }
}

/// True when `e` is a Postgres error saying the connection is gone or the server is shutting
/// down or starting (not another process's lock).
fn lost_connection(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<postgres::Error>().is_some_and(crate::pg::connection_trouble)
}

/// True when `e` is the server's refusal to write in a read-only transaction (SQLSTATE 25006,
/// `cannot execute … in a read-only transaction`): the session defaults to read-only (the role's
/// or the database's `default_transaction_read_only`), or the server is a standby. Also judged by
/// the server's words, for an opening failure, whose source keeps only the text.
fn read_only(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    use postgres::error::SqlState;
    let coded = e.downcast_ref::<postgres::Error>().and_then(postgres::Error::code).is_some_and(|c| *c == SqlState::READ_ONLY_SQL_TRANSACTION);
    coded || crate::pg::scrubbed(e, None).contains("in a read-only transaction")
}

/// True when `e`, the source of a [`StateError::Open`], says the connection could not be made
/// ([`ConnectionFailed`], or a Postgres error of [`lost_connection`]).
fn unreachable(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<ConnectionFailed>().is_some() || lost_connection(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state store whose server is down (refused, reset at connect, silent) gets the hint
    /// that the server cannot be reached, never the hint about another efmesh process writing;
    /// a lock held past the timeout keeps the busy hint.
    #[test]
    fn a_server_that_cannot_be_reached_is_not_called_busy() {
        let store = "postgres://u@127.0.0.1:55699/db schema s".to_string();
        for text in [
            "error connecting to server: Connection refused (os error 111)",
            "error connecting to server: Connection reset by peer (os error 104)",
            "no answer from the server within 10 s",
        ] {
            for transient in [true, false] {
                let e = StateError::Open { store: store.clone(), source: Box::new(ConnectionFailed(text.to_string())), transient };
                let hint = e.hint().unwrap_or_default();
                assert!(hint.contains("cannot be reached") && hint.contains("the URL"), "{text}: {hint}");
                assert!(!hint.contains("another efmesh process"), "{text}: {hint}");
            }
        }
        // Another process's lock, past the lock timeout: busy.
        let busy = StateError::Backend {
            store: store.clone(),
            op: "record the plan".to_string(),
            source: "canceling statement due to lock timeout".into(),
            transient: true,
        };
        assert_eq!(busy.hint(), Some("another efmesh process is writing the state store; retry when it is done"));
        let busy_open = StateError::Open { store: store.clone(), source: "database is locked".into(), transient: true };
        assert_eq!(busy_open.hint(), Some("another efmesh process is writing the state store; retry when it is done"));
        // A session read-only by default (the role's `default_transaction_read_only`, a standby):
        // the setting is named, not another process.
        let refused = StateError::Open { store, source: "db error: ERROR: cannot execute CREATE TABLE in a read-only transaction".into(), transient: false };
        let hint = refused.hint().unwrap_or_default();
        assert!(hint.contains("default_transaction_read_only") && hint.contains("standby"), "{hint}");
        assert!(!hint.contains("another efmesh process"), "{hint}");
    }
}
