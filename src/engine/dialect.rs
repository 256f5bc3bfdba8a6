//! The statements efmesh writes, as each engine spells them: the engine seam's SQL half, in the
//! spirit of sqlparser's `Dialect`. `plan`, `apply` and the previews build every statement whose
//! spelling differs between engines through [`Dialect`] ([`crate::engine::Engine::sql`]), never
//! inline; what every engine spells the same (`INSERT INTO … SELECT`, `DELETE FROM … WHERE`,
//! `SELECT count(*)`) stays plain SQL at its call site.
//!
//! The defaults are the standard (Postgres) spelling; an engine overrides what it spells
//! otherwise or does in fewer statements (DuckDB's `CREATE OR REPLACE TABLE`). A method that
//! returns several statements expects them to run in ONE transaction, in order.

use crate::core::json::Json;
use crate::core::name::quote_ident;
use crate::core::{Kind, Model, Target};
use crate::sql::canon::{Canonical, SqlError};

/// A capability beyond tables and views that a model may need of its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// `target = "parquet"`: files written by the engine (`COPY … TO`), read back through a view.
    ParquetLake,
    /// `target = "ducklake"`: a table in an attached DuckLake catalog.
    DuckLake,
    /// An external model read from files by the engine (`read_csv`, `read_parquet`, globs).
    FileExternal,
}

impl Feature {
    /// The feature as messages name it.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Feature::ParquetLake => "the parquet lake target (`target = \"parquet\"`)",
            Feature::DuckLake => "the DuckLake target (`target = \"ducklake\"`)",
            Feature::FileExternal => "an external source read from files (`kind.external { path = … }`)",
        }
    }

    /// The feature `model` needs beyond tables and views, if any.
    #[must_use]
    pub fn needed_by(model: &Model) -> Option<Feature> {
        match (&model.kind, model.target) {
            (Kind::External(crate::core::External::Files { .. }), _) => Some(Feature::FileExternal),
            (_, Target::Parquet) => Some(Feature::ParquetLake),
            (_, Target::DuckLake) => Some(Feature::DuckLake),
            _ => None,
        }
    }
}

/// How one engine spells the statements efmesh writes (see the module documentation).
///
/// # Example
/// ```
/// use efmesh::engine::dialect::{Dialect, Standard};
/// // Postgres has no `CREATE OR REPLACE TABLE`, and views that select from a table keep it from
/// // being dropped: the table is created when absent, then emptied and filled, in one transaction.
/// assert_eq!(
///     Standard.replace_table_as("s.t", "SELECT 1 AS a"),
///     [
///         "CREATE TABLE IF NOT EXISTS s.t AS SELECT * FROM (\nSELECT 1 AS a\n) AS _efmesh_q LIMIT 0",
///         "DELETE FROM s.t",
///         "INSERT INTO s.t SELECT * FROM (\nSELECT 1 AS a\n) AS _efmesh_q",
///     ]
/// );
/// ```
pub trait Dialect: Send + Sync + std::fmt::Debug {
    /// `duckdb` or `postgres`.
    fn name(&self) -> &'static str;

    /// The engine's name as messages spell it (`DuckDB`, `Postgres`).
    fn title(&self) -> &'static str;

    /// The canonical form of a model body in this engine's grammar (what the fingerprint
    /// hashes): the standard spelling parses with the Postgres grammar
    /// ([`crate::sql::pg_canon`]).
    ///
    /// # Errors
    /// [`SqlError`] when the body is not exactly one query the grammar accepts.
    fn canonicalize(&self, sql: &str) -> Result<Canonical, SqlError> {
        crate::sql::pg_canon::canonicalize(sql)
    }

    /// True when [`Dialect::canonicalize`] is sqlparser's canonical form first (DuckDB's), so
    /// the planner may take sqlparser's fast digest ([`crate::sql::canon::canonical_digest`])
    /// and the load's prefetch of it; false for a grammar of its own (Postgres).
    fn sqlparser_first(&self) -> bool {
        false
    }

    /// The longest identifier the engine keeps, in bytes (`None`: no limit). Postgres keeps 63
    /// and cuts longer ones with only a notice: efmesh shortens physical names to fit
    /// ([`crate::sql::fingerprint::physical_table_within`]) and refuses longer model and
    /// environment names at plan time ([`crate::plan::check_engine`]).
    fn max_identifier_bytes(&self) -> Option<usize> {
        Some(63)
    }

    /// True when the engine has `feature` ([`Feature`]); none by default.
    fn supports(&self, feature: Feature) -> bool {
        let _ = feature;
        false
    }

    /// True when [`Dialect::replace_table_as`] keeps an existing table (its column types) and
    /// refills it, so the engine converts each value into the stored type on the way in: the
    /// apply checks first that none would change ([`crate::apply::contract::lossy_columns`]).
    fn refills_tables(&self) -> bool {
        true
    }

    /// Replaces the rows of the table `relation` (qualified, quoted) with the result of `query`,
    /// creating it when absent: the build of a `full` model or a seed. `query` follows `AS`
    /// after a space, or directly when it starts with a line break ([`after_as`]).
    ///
    /// The standard spelling keeps the table itself (create if absent, `DELETE FROM`, `INSERT …
    /// SELECT`): Postgres records which views select from a table (environment views, `view`
    /// models), so dropping a served table fails, and a rebuilt table must stay the one they
    /// read. `DELETE` rather than `TRUNCATE`, so readers keep reading the old rows until the
    /// transaction commits (`TRUNCATE` would lock them out for the whole rebuild). The physical
    /// table of a version always has that version's columns; a query whose columns no longer
    /// fit the table fails loudly (the engine's conversion error, or the apply's check of values
    /// the stored type would round or cut: [`Dialect::refills_tables`]).
    fn replace_table_as(&self, relation: &str, query: &str) -> Vec<String> {
        vec![
            self.create_empty_table_if_absent(relation, query),
            format!("DELETE FROM {relation}"),
            format!("INSERT INTO {relation} SELECT * FROM (\n{query}\n) AS _efmesh_q"),
        ]
    }

    /// Replaces the view `relation` with one selecting `query`, creating it when absent; never
    /// `CASCADE`. The standard spelling is one `DO` block: `CREATE OR REPLACE VIEW`, which keeps
    /// the view itself (its grants, and every view that selects from it: another state store's
    /// environment views over a shared `view` model, a rebuilt physical view under its
    /// environment views); only when the columns change (`invalid_table_definition`: Postgres
    /// cannot rename, retype or drop a view's columns in place) it drops and creates the view,
    /// and that drop fails loudly, naming them, when other views depend on it.
    ///
    /// The server reads the query inside the block's string, where the engine's rewrite of
    /// unnamed subqueries for servers before 16 cannot reach it: they are named here
    /// ([`crate::engine::postgres::with_subquery_aliases`]; harmless on every version).
    fn replace_view_as(&self, relation: &str, query: &str) -> Vec<String> {
        let body = after_as(&crate::engine::postgres::with_subquery_aliases(query).unwrap_or_else(|| query.to_string()));
        let mut tag = String::from("$efmesh_view$");
        while body.contains(&tag) || relation.contains(&tag) {
            tag.insert(tag.len() - 1, '_');
        }
        vec![format!(
            "DO {tag}\nBEGIN\n  CREATE OR REPLACE VIEW {relation} AS{body}\n  ;\nEXCEPTION WHEN invalid_table_definition THEN\n  {};\n  CREATE VIEW {relation} AS{body}\n  ;\nEND\n{tag}",
            self.drop_view_if_exists(relation)
        )]
    }

    /// Creates the table `relation` from `query`; fails when it exists (the first batch of a new
    /// time-range table, an SCD type 2 rebuild).
    fn create_table_as(&self, relation: &str, query: &str) -> String {
        format!("CREATE TABLE {relation} AS {query}")
    }

    /// Creates the table `relation`, empty, with the columns and types of `query`'s output,
    /// unless a relation of that name exists.
    fn create_empty_table_if_absent(&self, relation: &str, query: &str) -> String {
        format!("CREATE TABLE IF NOT EXISTS {relation} AS SELECT * FROM (\n{query}\n) AS _efmesh_q LIMIT 0")
    }

    /// The qualified name of the temporary relation `name` of this session (a stage).
    fn temp_relation(&self, name: &str) -> String {
        format!("pg_temp.{}", quote_ident(name))
    }

    /// Replaces this session's temporary table `name` with the result of `query`.
    fn replace_temp_table_as(&self, name: &str, query: &str) -> Vec<String> {
        vec![self.drop_table_if_exists(&self.temp_relation(name)), format!("CREATE TEMP TABLE {} AS {query}", quote_ident(name))]
    }

    /// Copies every row of the table `relation` (qualified, quoted) into the table `copy`
    /// (qualified, quoted: [`crate::engine::kept_copy_relation`]), replacing one of that name: the
    /// copy an apply keeps of a table it refreshes in place, for [`Dialect::restore_from_copy`].
    /// A table of the database, not of the session: a process killed before it put the copy back
    /// leaves it for the next apply or run of its environment to put back. One transaction.
    fn copy_table(&self, copy: &str, relation: &str) -> Vec<String> {
        vec![self.drop_table_if_exists(copy), format!("CREATE TABLE {copy} AS SELECT * FROM {relation}")]
    }

    /// Puts the rows of the table `copy` (a [`Dialect::copy_table`] of `relation`) back into the
    /// table `relation` in place of every row it holds, `columns` (unquoted, both hold them)
    /// matched by name, then drops `copy`: `DELETE FROM`, `INSERT … SELECT`, `DROP TABLE`, to run
    /// in ONE transaction, so readers see the rows before or the rows put back, and a failure
    /// leaves both tables as they were. The table itself stays (the views selecting from it, on
    /// Postgres, keep it from being dropped: as [`Dialect::replace_table_as`]).
    fn restore_from_copy(&self, relation: &str, copy: &str, columns: &[String]) -> Vec<String> {
        let columns = columns.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
        vec![format!("DELETE FROM {relation}"), format!("INSERT INTO {relation} ({columns}) SELECT {columns} FROM {copy}"), self.drop_table_if_exists(copy)]
    }

    /// Creates the schema `schema` (unquoted name) unless it exists.
    fn create_schema_if_absent(&self, schema: &str) -> String {
        format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema))
    }

    /// For an engine several processes write at once: the statement that, inside a transaction,
    /// makes this process the only one writing `relation`'s comment until it commits (a
    /// transaction-scoped advisory lock), and the query reading that comment (one row, NULL when
    /// there is none). `None` for an engine one process writes at a time (DuckDB's file lock),
    /// whose caller already knows the comment ([`crate::engine::epoch::stamp`]).
    fn comment_guard(&self, relation: &str) -> Option<[String; 2]> {
        let name = crate::core::name::quote_literal(relation);
        Some([format!("SELECT pg_advisory_xact_lock(hashtext({name}))"), format!("SELECT obj_description(to_regclass({name}), 'pg_class')")])
    }

    /// Drops the table `relation` if it exists (never `CASCADE`).
    fn drop_table_if_exists(&self, relation: &str) -> String {
        format!("DROP TABLE IF EXISTS {relation}")
    }

    /// Drops the view `relation` if it exists (never `CASCADE`).
    fn drop_view_if_exists(&self, relation: &str) -> String {
        format!("DROP VIEW IF EXISTS {relation}")
    }

    /// Drops the schema `schema` (unquoted name) if it exists; never `CASCADE`, so a schema that
    /// still holds a relation fails loudly instead of losing it.
    fn drop_schema_if_exists(&self, schema: &str) -> String {
        format!("DROP SCHEMA IF EXISTS {}", quote_ident(schema))
    }

    /// Adds the column `column` (unquoted) of type `ty` to the table `relation`.
    fn add_column(&self, relation: &str, column: &str, ty: &str) -> String {
        format!("ALTER TABLE {relation} ADD COLUMN {} {ty}", quote_ident(column))
    }

    /// The expression `expr` as text.
    fn text_of(&self, expr: &str) -> String {
        format!("CAST({expr} AS VARCHAR)")
    }

    /// The expression `expr` (of the described type `ty`) as a data diff compares it (`IS
    /// DISTINCT FROM`, `EXCEPT ALL`): as is, or cast to a type with an equality operator —
    /// Postgres's `json` has none (`jsonb` has), nor have `xml` and the geometric types (text).
    /// Intervals and floating-point numbers compare as text: both engines call `1 month` equal to
    /// `30 days` (and `1 day` to `24 hours`), and `-0.0` equal to `0.0`, values a child reading
    /// them tells apart (`DATE '2026-01-31' + d`, `1 / x`).
    fn comparable(&self, expr: &str, ty: &str) -> String {
        let t = ty.trim().to_ascii_lowercase();
        match t.as_str() {
            "json" => format!("CAST({expr} AS jsonb)"),
            _ if self.lacks_equality(&t) || equal_when_different(&t) => self.text_of(expr),
            _ => expr.to_string(),
        }
    }

    /// True for a (declared or described) type that has no equality operator, nor has a list of
    /// it: Postgres's `json` (`jsonb` has one), `xml` and the geometric types (`point`, `line`,
    /// `lseg`, `box`, `path`, `polygon`, `circle`). A kind comparing such a column row against row
    /// fails mid-build (`operator does not exist: json = json`): the load refuses it
    /// ([`crate::project::uncomparable_columns`]); a data diff compares it as text
    /// ([`Dialect::comparable`]).
    fn lacks_equality(&self, ty: &str) -> bool {
        let t = ty.trim().to_ascii_lowercase();
        let element = crate::core::schema::innermost_element(&t).unwrap_or(t.as_str()).trim();
        matches!(element, "json" | "xml" | "point" | "line" | "lseg" | "box" | "path" | "polygon" | "circle")
    }

    /// The text `CAST(text AS <array type>)` reads as the array of the JSON array `items` (a JSON
    /// seed's list value); `None` when the engine casts the JSON text itself (DuckDB). The
    /// standard spelling is Postgres's array literal: `{"a","b",NULL}`, each element quoted
    /// (`\` and `"` escaped), nested arrays as nested braces, `null` as `NULL`.
    fn array_text(&self, items: &[Json]) -> Option<String> {
        fn element(v: &Json) -> String {
            let quoted = |t: &str| format!("\"{}\"", t.replace('\\', "\\\\").replace('"', "\\\""));
            match v {
                Json::Null => "NULL".to_string(),
                Json::Array(inner) => format!("{{{}}}", inner.iter().map(element).collect::<Vec<_>>().join(",")),
                Json::String(s) => quoted(s),
                other => quoted(&other.compact()),
            }
        }
        Some(format!("{{{}}}", items.iter().map(element).collect::<Vec<_>>().join(",")))
    }

    /// `expr` cast to `ty`, NULL where the value does not fit (DuckDB's `TRY_CAST`); `None` when
    /// the engine has no such cast (the standard spelling: a failed cast is an error).
    fn try_cast(&self, expr: &str, ty: &str) -> Option<String> {
        let _ = (expr, ty);
        None
    }

    /// One row of the relation aliased `alias` as a JSON object, as text (audit samples).
    fn row_json_text(&self, alias: &str) -> String {
        format!("CAST(to_json({alias}) AS VARCHAR)")
    }

    /// The statement that opens a read-only transaction over one snapshot of the database
    /// (`efmesh diff --data` runs every comparison in it, then rolls it back). The standard
    /// spelling asks Postgres for `REPEATABLE READ, READ ONLY`: every query sees the same
    /// snapshot and none can write.
    fn begin_read_only(&self) -> String {
        "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY".to_string()
    }

    /// The condition of a `FULL OUTER JOIN` under which `left` and `right` (two expressions of
    /// one key column, one per side) match, NULL-safe: NULL matches NULL (`IS NOT DISTINCT
    /// FROM`). Postgres runs a full join only on conditions it can hash or merge, which
    /// `IS NOT DISTINCT FROM` is not: the standard spelling compares each side's
    /// [`Dialect::null_safe_text`] with `=`, which means the same — for text that is the same
    /// for equal values: `exact_numbers` says both are exact numbers whose text may differ for
    /// equal values (a decimal against an integer or another decimal: `1` and `1.00`), compared
    /// then through [`Dialect::exact_number_text`].
    fn full_join_match(&self, left: &str, right: &str, exact_numbers: bool) -> String {
        let side = |e: &str| if exact_numbers { self.null_safe_text(&self.exact_number_text(e)) } else { self.null_safe_text(e) };
        format!("{} = {}", side(left), side(right))
    }

    /// `expr`, an exact number (an integer, or a decimal of any scale), as text that is the same
    /// for equal values: the text without the trailing zeros of its fraction, nor a point left
    /// bare (`1.00`, `1.0` and `1` are all `1`, `1.50` is `1.5`, `10` stays `10`). Both engines
    /// print a decimal with every digit of its scale (and Postgres's bare `numeric` with the
    /// scale of each value), so the text of equal values differs where their comparison does
    /// not: a data diff joins (Postgres, [`Dialect::full_join_match`]) and hashes
    /// ([`Dialect::sample_filter`]) a decimal key through this. Neither engine prints an exact
    /// number with an exponent; `NaN` and the infinities have no point and stay as they are.
    fn exact_number_text(&self, expr: &str) -> String {
        let t = self.text_of(expr);
        format!("CASE WHEN {t} LIKE '%.%' THEN rtrim(rtrim({t}, '0'), '.') ELSE {t} END")
    }

    /// `expr` as text that tells NULL apart from every value, the string `'NULL'` included: a
    /// value is `v` followed by its text, NULL is `n`.
    fn null_safe_text(&self, expr: &str) -> String {
        format!("COALESCE('v' || {}, 'n')", self.text_of(expr))
    }

    /// A condition true for a deterministic share of about `percent` % (1 to 99) of the
    /// distinct values of `exprs` (a key's columns, or a whole row's): the first four hex
    /// digits of the md5 of the values' [`Dialect::null_safe_text`] joined by `|` are below
    /// `percent` % of `ffff`. It depends on the values alone, so a key is in the share on both
    /// sides of a comparison or on neither (`efmesh diff --data --sample`).
    fn sample_filter(&self, exprs: &[String], percent: u8) -> String {
        let text: Vec<String> = exprs.iter().map(|e| self.null_safe_text(e)).collect();
        format!("substr(md5({}), 1, 4) < '{}'", text.join(" || '|' || "), sample_threshold(percent))
    }
}

/// The four lowercase hex digits a sampled hash stays below for `percent` % (1 to 99) of the
/// 65536 four-digit prefixes ([`Dialect::sample_filter`]).
#[must_use]
pub fn sample_threshold(percent: u8) -> String {
    format!("{:04x}", (65536 * u32::from(percent.clamp(1, 99)) / 100))
}

/// What follows `AS` in `CREATE … AS <query>`: the query after a space, or as given when it
/// starts with a line break (`AS\n<query>`, never a trailing space before the break).
#[must_use]
pub fn after_as(query: &str) -> String {
    if query.starts_with('\n') { query.to_string() } else { format!(" {query}") }
}

/// The standard spelling: every default of [`Dialect`] (what Postgres runs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Standard;

impl Dialect for Standard {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn title(&self) -> &'static str {
        "Postgres"
    }
}

/// True for a type (described, lower case) whose equality calls different values equal:
/// intervals (`1 month` = `30 days`, `1 day` = `24 hours`) and floating-point numbers (`-0.0` =
/// `0.0`), on both engines. A data diff compares such columns as text ([`Dialect::comparable`]).
/// Nested ones too (`DOUBLE[]`, `STRUCT(x INTERVAL)`, `MAP(VARCHAR, DOUBLE)`, `interval[]`): any
/// word of the type naming one (a field merely named `real` compares as text too, exactly).
pub(crate) fn equal_when_different(ty: &str) -> bool {
    ty.to_ascii_lowercase().split(|c: char| !c.is_ascii_alphanumeric()).any(|w| matches!(w, "interval" | "double" | "float" | "float4" | "float8" | "real"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_spelling_replaces_views_in_place_and_never_cascades() {
        let d = Standard;
        assert_eq!(
            d.replace_view_as("e.v", "SELECT a FROM t"),
            [
                "DO $efmesh_view$\nBEGIN\n  CREATE OR REPLACE VIEW e.v AS SELECT a FROM t\n  ;\nEXCEPTION WHEN invalid_table_definition THEN\n  DROP VIEW IF EXISTS e.v;\n  CREATE VIEW e.v AS SELECT a FROM t\n  ;\nEND\n$efmesh_view$"
            ]
        );
        // A query holding the dollar-quote tag gets another.
        assert!(d.replace_view_as("e.v", "SELECT '$efmesh_view$' AS a")[0].starts_with("DO $efmesh_view_$\n"));
        // Unnamed subqueries are named inside the block (servers before 16 refuse them).
        assert!(d.replace_view_as("e.v", "SELECT a FROM (SELECT 1 AS a)")[0].contains("_efmesh_subquery_1"));
        assert_eq!(d.replace_temp_table_as("_s", "SELECT 1"), ["DROP TABLE IF EXISTS pg_temp.\"_s\"", "CREATE TEMP TABLE \"_s\" AS SELECT 1"]);
        for s in d.replace_table_as("s.t", "SELECT 1").iter().chain(d.replace_view_as("s.v", "SELECT 1").iter()) {
            assert!(!s.to_uppercase().starts_with("DROP TABLE"), "{s}");
            assert!(!s.to_uppercase().contains("CASCADE"), "{s}");
        }
    }

    /// The copy an apply keeps of a table it refreshes in place is a table of the database (it
    /// outlives a killed process), replaced whole, and goes back by column name in one
    /// transaction that drops it: the table itself is never dropped (views select from it).
    #[test]
    fn a_kept_copy_is_a_table_put_back_by_column_name_and_dropped() {
        use crate::engine::duckdb::DuckDbDialect;
        for dialect in [&Standard as &dyn Dialect, &DuckDbDialect] {
            assert_eq!(dialect.copy_table("c.k", "s.t"), ["DROP TABLE IF EXISTS c.k", "CREATE TABLE c.k AS SELECT * FROM s.t"]);
        }
        let columns = ["k".to_string(), "we\"ird".to_string()];
        assert_eq!(
            Standard.restore_from_copy("s.t", "c.k", &columns),
            ["DELETE FROM s.t", "INSERT INTO s.t (\"k\", \"we\"\"ird\") SELECT \"k\", \"we\"\"ird\" FROM c.k", "DROP TABLE IF EXISTS c.k",]
        );
        // One name per table, in the schema `_efmesh`, within Postgres's 63 bytes, the same
        // however the name is cased.
        let relation = crate::engine::kept_copy_relation("\"_efmesh\".\"k__vals__0123\"");
        assert!(relation.starts_with("\"_efmesh\".\"_efmesh_kept_"), "{relation}");
        let name = crate::engine::kept_copy_name("\"_efmesh\".\"k__vals__0123\"");
        assert!(name.starts_with(crate::engine::KEPT_COPY_PREFIX) && name.len() <= 63, "{name}");
        assert_eq!(name, crate::engine::kept_copy_name("\"_EFMESH\".\"K__VALS__0123\""));
        assert_ne!(name, crate::engine::kept_copy_name("\"_efmesh\".\"k__vals__0124\""));
    }

    #[test]
    fn json_arrays_become_postgres_array_literals() {
        let Ok(Json::Array(items)) = Json::parse(r#"["front", "a \"q\" \\ b", null, 3, [1, 2], 123456789012345678901234567890.5]"#) else { panic!() };
        let text = Standard.array_text(&items).unwrap();
        assert_eq!(text, r#"{"front","a \"q\" \\ b",NULL,"3",{"1","2"},"123456789012345678901234567890.5"}"#);
        assert_eq!(Standard.array_text(&[]).as_deref(), Some("{}"));
        assert_eq!(crate::engine::duckdb::DuckDbDialect.array_text(&[]), None);
    }

    #[test]
    fn each_engine_supplies_the_parser_of_its_own_grammar() {
        use crate::engine::duckdb::DuckDbDialect;
        use crate::sql::canon::CanonSource;
        // DuckDB: sqlparser, DuckDB's own parser for what sqlparser cannot read.
        assert_eq!(DuckDbDialect.canonicalize("SELECT 1 AS a").unwrap().source, CanonSource::SqlParser);
        assert_eq!(DuckDbDialect.canonicalize("SELECT a FROM t USING SAMPLE 10%").unwrap().source, CanonSource::DuckDbJson);
        // Postgres's grammar: DuckDB's `USING SAMPLE` is not Postgres, `x::text COLLATE "C"` is.
        assert_eq!(Standard.canonicalize("SELECT 1 AS a").unwrap().source, CanonSource::PgQuery);
        assert!(matches!(Standard.canonicalize("SELECT a FROM t USING SAMPLE 10%"), Err(SqlError::Postgres { .. })));
        assert_eq!(Standard.canonicalize("SELECT a::text COLLATE \"C\" FROM t").unwrap().source, CanonSource::PgQuery);
    }
}
