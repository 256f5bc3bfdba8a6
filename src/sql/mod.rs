//! Canonical SQL, fingerprints and column lineage.
//!
//! - [`canon`]: one deterministic text per query body, whatever its formatting (sqlparser's
//!   DuckDB dialect, with DuckDB's `json_serialize_sql` as the fallback).
//! - [`fingerprint`]: blake3 over a versioned payload of name, kind, columns, grain, canonical
//!   body and parent fingerprints; and the physical table name a fingerprint gives.
//! - [`prefetch`]: canonical digests computed in the background ahead of a cold plan.
//! - [`lineage`]: which parent columns a body reads, resolved through the AST (`efmesh check`).
//! - [`pushdown`]: time-range models whose batches re-read a whole relation (a `check` warning).
//!
//! The rules come from `DECISIONS.md`, "Canonical SQL and fingerprints".

pub mod audit_reads;
pub mod canon;
pub mod fingerprint;
pub mod lineage;
pub mod prefetch;
pub mod pushdown;

pub use canon::{CanonSource, Canonical, SqlError, canonicalize, canonicalize_with_fallback, normalize_duckdb_json};
pub use fingerprint::{FINGERPRINT_VERSION, Fingerprint, FingerprintError, fingerprint, physical_table};
