//! [`StateError`]: every way a state-store operation can fail.

use std::path::PathBuf;

/// A failed state-store operation. Each variant names the store file (`:memory:` for an
/// in-memory store) and what was being done; SQLite's own error is kept as the
/// [`source`](std::error::Error::source). Messages follow `STYLE.md`: no trailing period, names
/// in backticks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The file could not be opened, is not a SQLite database, or could not be configured
    /// (journal mode, busy timeout) or initialised.
    #[error("cannot open the state store `{}`", path.display())]
    Open {
        /// Store file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The store was written with another layout version (older or newer). It is never
    /// upgraded silently.
    #[error(
        "the state store `{}` has version {found}, this efmesh needs version {wanted}",
        path.display()
    )]
    Version {
        /// Store file.
        path: PathBuf,
        /// Version found in `meta` (0 when `meta` is missing or empty).
        found: i64,
        /// [`STATE_VERSION`](super::STATE_VERSION).
        wanted: i64,
    },
    /// A read or write failed in SQLite (including a lock still held by another process after
    /// the busy timeout, see [`StateError::is_busy`]).
    #[error("state store `{}`: cannot {op}", path.display())]
    Sqlite {
        /// Store file.
        path: PathBuf,
        /// What was being done, e.g. "read the pointers of environment `dev`".
        op: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored value cannot be read back (malformed JSON or timestamp, unknown status).
    #[error("state store `{}`: cannot {op}: {detail}", path.display())]
    Corrupt {
        /// Store file.
        path: PathBuf,
        /// What was being done.
        op: String,
        /// Which value is malformed, naming its row.
        detail: String,
    },
    /// [`StateStore::promote`](super::StateStore::promote): a snapshot the new pointer set needs
    /// is not in the store (another process, probably the janitor, removed it after the plan).
    /// Nothing was changed.
    #[error(
        "cannot promote `{env}`: snapshot `{name}` `{fingerprint}` disappeared from the state store \
         (removed by another process, probably `efmesh janitor`); nothing was changed, re-run `efmesh apply`"
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
}

impl StateError {
    /// True when another process held the store's write lock for longer than the busy timeout
    /// (about 5 s); retrying later may succeed.
    pub fn is_busy(&self) -> bool {
        let source = match self {
            StateError::Open { source, .. } | StateError::Sqlite { source, .. } => source,
            _ => return false,
        };
        matches!(source.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
    }

    /// True when the store has another layout version than [`STATE_VERSION`](super::STATE_VERSION).
    pub fn is_version_mismatch(&self) -> bool {
        matches!(self, StateError::Version { .. })
    }

    /// True when a promotion found a required snapshot missing.
    pub fn is_missing_snapshot(&self) -> bool {
        matches!(self, StateError::MissingSnapshot { .. })
    }

    /// A `hint:` line for the CLI, when one helps.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StateError::Version { found, wanted, .. } if found < wanted => {
                Some("the store predates this efmesh's format and cannot be read; move it aside to start afresh")
            }
            StateError::Version { .. } => Some("the store was written by a newer efmesh; use that version"),
            _ if self.is_busy() => Some("another efmesh process is writing the state store; retry when it is done"),
            _ => None,
        }
    }
}
