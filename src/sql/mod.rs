//! Canonical SQL, fingerprints and column lineage.
//!
//! - [`canon`]: one deterministic text per query body, whatever its formatting (sqlparser's
//!   DuckDB dialect, with DuckDB's `json_serialize_sql` as the fallback).
//! - [`pg_canon`]: the same for Postgres bodies, from the Postgres grammar (libpg_query).
//! - [`fingerprint`]: blake3 over a versioned payload of name, kind, columns, grain, canonical
//!   body and parent fingerprints; and the physical table name a fingerprint gives.
//! - [`prefetch`]: canonical digests computed in the background ahead of a cold plan.
//! - [`lineage`]: which parent columns a body reads, resolved through the AST (`efmesh check`).
//! - [`pushdown`]: time-range models whose batches re-read a whole relation (a `check` warning).
//! - [`relations`]: the relations a query reads by name (a model named outside `ref` is a load
//!   error).
//! - [`operator_runs`]: operators DuckDB reads as one where sqlparser reads two (`3^-2`: a load
//!   error).
//!
//! The rules come from `DECISIONS.md`, "Canonical SQL and fingerprints".

pub mod audit_reads;
pub mod canon;
pub mod fingerprint;
pub mod lineage;
pub mod lint;
pub mod operator_runs;
pub mod pg_canon;
pub mod prefetch;
pub mod pushdown;
pub mod relations;
pub mod sight;
pub mod statements;

pub use canon::{CanonSource, Canonical, SqlError, canonicalize, canonicalize_with_fallback, normalize_duckdb_json};
pub use fingerprint::{FINGERPRINT_VERSION, Fingerprint, FingerprintError, fingerprint, physical_table};

/// Aggregate functions (lower case): DuckDB 1.5.5's (`duckdb_functions()`, `function_type =
/// 'aggregate'`, without the window-only ones such as `row_number`), its macros over an
/// aggregate (`geomean`, `weighted_avg`, `json_group_array`…), and the common Postgres ones. A
/// query computing one aggregates its rows (filter pushdown, [`pushdown`]); a projection item
/// calling one is not a `GROUP BY ALL` key, and one added without `GROUP BY` folds the rows
/// (categorisation, which takes any function it does not know as possibly changing the rows).
pub const AGGREGATES: &[&str] = &[
    "count",
    "count_star",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "median",
    "mode",
    "any_value",
    "arbitrary",
    "first",
    "last",
    "arg_min",
    "arg_max",
    "argmin",
    "argmax",
    "min_by",
    "max_by",
    "list",
    "array_agg",
    "string_agg",
    "group_concat",
    "listagg",
    "bool_and",
    "bool_or",
    "bit_and",
    "bit_or",
    "bit_xor",
    "product",
    "fsum",
    "sumkahan",
    "kahan_sum",
    "favg",
    "quantile",
    "quantile_cont",
    "quantile_disc",
    "approx_quantile",
    "approx_count_distinct",
    "reservoir_quantile",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "covar_pop",
    "covar_samp",
    "corr",
    "entropy",
    "kurtosis",
    "skewness",
    "histogram",
    "countif",
    "count_if",
    "every",
    "regr_slope",
    "regr_intercept",
    "regr_count",
    "bitstring_agg",
    "mad",
    "approx_top_k",
    "arg_max_null",
    "arg_max_nulls_last",
    "arg_min_null",
    "arg_min_nulls_last",
    "histogram_exact",
    "kurtosis_pop",
    "regr_avgx",
    "regr_avgy",
    "regr_r2",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "sem",
    "sum_no_overflow",
    "geomean",
    "geometric_mean",
    "weighted_avg",
    "wavg",
    "json_group_array",
    "json_group_object",
    "json_group_structure",
];
