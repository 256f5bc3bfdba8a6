//! The categorisation's list of DuckDB functions known to return one value per row
//! (`plan::categorize::DUCKDB_ONE_VALUE`) against the linked DuckDB's `duckdb_functions()`: a
//! DuckDB upgrade that adds a scalar function or macro (a column added calling it would be
//! judged breaking, every child rebuilt) or drops a listed one fails here, naming it.

use efmesh::engine::Engine;
use efmesh::engine::duckdb::DuckDb;
use efmesh::plan::categorize::{DUCKDB_ONE_VALUE, SET_RETURNING};
use efmesh::sql::AGGREGATES;
use std::collections::BTreeSet;

/// DuckDB's scalar functions and macros left off the list on purpose (so taken as possibly
/// changing the rows), with why.
const LEFT_OFF: &[(&str, &str)] = &[
    ("side effects", "setseed sleep_ms write_log pg_sleep"),
    (
        "internal to DuckDB's planner, storage or logs",
        "alias combine finalize parse_duckdb_log_message stats timetz_byte_comparable unpivot_list variant_bytes_to_variant variant_to_parquet_variant",
    ),
    ("DuckDB-only spellings the engine seam keeps out of src/plan (tests/it/engine_seam.rs)", "json_serialize_plan json_serialize_sql"),
    (
        "catalog, session and privilege macros (Postgres compatibility, some over a subquery)",
        "array_to_string_comma_default col_description format_pg_type format_type get_block_size has_any_column_privilege has_column_privilege \
         has_database_privilege has_foreign_data_wrapper_privilege has_function_privilege has_language_privilege has_schema_privilege \
         has_sequence_privilege has_server_privilege has_table_privilege has_tablespace_privilege inet_client_addr inet_client_port \
         inet_server_addr inet_server_port map_to_pg_oid obj_description pg_collation_is_visible pg_conf_load_time pg_conversion_is_visible \
         pg_function_is_visible pg_get_constraintdef pg_get_expr pg_get_viewdef pg_has_role pg_is_other_temp_schema pg_my_temp_schema \
         pg_opclass_is_visible pg_operator_is_visible pg_opfamily_is_visible pg_postmaster_start_time pg_table_is_visible \
         pg_ts_config_is_visible pg_ts_dict_is_visible pg_ts_parser_is_visible pg_ts_template_is_visible pg_type_is_visible shobj_description",
    ),
];

/// Names on the list that are no entry of `duckdb_functions()`: sqlparser reads these as calls
/// where DuckDB's grammar has special forms.
const SYNTAX: &[&str] = &["coalesce", "current_time", "current_timestamp", "grouping", "grouping_id", "if", "ifnull", "localtime", "localtimestamp", "try"];

#[test]
fn the_one_value_list_covers_the_linked_duckdbs_scalar_functions() {
    let mut db = DuckDb::in_memory().expect("in-memory duckdb");
    let rows = db
        .query("SELECT DISTINCT lower(function_name) FROM duckdb_functions() WHERE function_type IN ('scalar', 'macro') ORDER BY 1")
        .expect("duckdb_functions()");
    let duckdb: BTreeSet<String> = rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect();
    assert!(duckdb.len() > 500, "{}", duckdb.len());
    let listed: BTreeSet<&str> = DUCKDB_ONE_VALUE.split_ascii_whitespace().collect();
    let left_off: BTreeSet<&str> = LEFT_OFF.iter().flat_map(|(_, names)| names.split_ascii_whitespace()).collect();
    // Operators (`+`, `||`, `~~`) are no calls; `__internal_…` functions are DuckDB's own;
    // `icu_collate_<locale>` are ICU's collations, one per locale.
    let called = |n: &&String| {
        n.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !n.starts_with("__internal_")
            && !n.starts_with("icu_collate_")
    };
    let unjudged: Vec<&str> = duckdb
        .iter()
        .filter(called)
        .map(String::as_str)
        .filter(|n| !listed.contains(n) && !AGGREGATES.contains(n) && !SET_RETURNING.contains(n) && !left_off.contains(n))
        .collect();
    assert!(unjudged.is_empty(), "DuckDB functions neither on categorize::DUCKDB_ONE_VALUE nor on LEFT_OFF (nor aggregates, nor set-returning): {unjudged:?}");
    // Every listed name, and every name left off, is still one of DuckDB's (or a special form).
    let gone: Vec<&str> = listed.iter().chain(&left_off).copied().filter(|n| !duckdb.contains(*n) && !SYNTAX.contains(n)).collect();
    assert!(gone.is_empty(), "listed but no longer DuckDB scalar functions or macros: {gone:?}");
    // Nothing is both listed and left off.
    let both: Vec<&&str> = listed.intersection(&left_off).collect();
    assert!(both.is_empty(), "{both:?}");
    // The names DuckDB spells in mixed case are compared in lower case.
    assert!(listed.contains("formatreadablesize") && duckdb.contains("formatreadablesize"));
}
