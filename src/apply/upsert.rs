//! `incremental_by_unique_key`: upsert the query's rows by key; `incremental_by_partition`:
//! replace the partitions present in the query's output ([`replace_partitions`]), by the same
//! staged, single-transaction write without the key checks.
//!
//! Every build of a new version and every `efmesh run` of the environment's current version runs
//! the same steps:
//!
//! 1. the query is evaluated once into a connection-local staging table (`_efmesh_stage`, in the engine's temporary schema)
//!    holding the declared columns in declared order;
//! 2. the staged rows are checked: a value the existing table's column type would round or cut
//!    ([`check_fits`]), a NULL in any key column, or a key that appears more than once, rejects
//!    the refresh with [`ApplyError::Rejected`] naming the model (and the row count
//!    or a key) — nothing is written, the table keeps its rows;
//! 3. ONE engine transaction creates the physical table if it is missing (the staged shape, no
//!    rows), `DELETE`s the rows whose key the query returned and `INSERT`s the staged rows by
//!    column name. Rows whose key the query no longer returns stay (a pure upsert: it never
//!    deletes by absence).
//!
//! Re-running after a crash is idempotent: the same source gives the same table.

use super::ApplyError;
use crate::core::Model;
use crate::core::name::quote_ident;
use crate::engine::Engine;

/// The name of the connection-local staging table holding one evaluation of a keyed model's query.
const STAGE: &str = "_efmesh_stage";

/// The qualified name of [`STAGE`] in `engine`'s spelling of temporary relations.
pub(crate) fn stage_relation(engine: &dyn Engine) -> String {
    engine.sql().temp_relation(STAGE)
}

/// What one upsert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpsertStats {
    /// Rows the query returned (each inserted or replacing the row of the same key).
    pub upserted: usize,
    /// Rows of the query not already in the table as they are (new keys or changed values): 0
    /// when the upsert rewrote the table as it was.
    pub changed: usize,
}

/// Upserts `query` (the model's body rendered against the plan's physical relations) into
/// `physical` by `key`, in one engine transaction after the checks described in the module docs.
///
/// # Errors
/// [`ApplyError::Rejected`] for NULL or duplicate keys (nothing written);
/// [`ApplyError::Build`] when an engine statement fails (the transaction is rolled back).
///
/// `pre`/`post` (the model's pre/post statements, rendered) run inside that transaction, before
/// and after the write. `checks` (the model's audits over `physical`) run inside it after the upsert:
/// a blocking violation rolls it back ([`ApplyError::Audit`]); their results come back with the
/// stats.
pub fn upsert(
    engine: &mut dyn Engine,
    model: &Model,
    key: &[String],
    physical: &str,
    query: &str,
    (pre, post): (&[String], &[String]),
    checks: &[(&crate::core::audit::Audit, String)],
) -> Result<(UpsertStats, Vec<super::audit::AuditResult>), ApplyError> {
    write(engine, model, Match::Key(key), physical, query, (pre, post), checks)
}

/// `incremental_by_partition`: replaces in `physical` every partition (distinct tuple of
/// `partitioned_by`, NULL matching NULL) present in `query`'s output by the query's rows of it,
/// in one engine transaction (created when missing, as [`upsert`]). Partitions absent from the
/// output keep their rows. No key checks: a partition holds any rows. `changed` counts the rows
/// inserted or deleted that were not already there as they are.
///
/// # Errors
/// [`ApplyError::Build`] when an engine statement fails (rolled back); [`ApplyError::Audit`] for
/// a blocking audit violation (rolled back).
pub fn replace_partitions(
    engine: &mut dyn Engine,
    model: &Model,
    partitioned_by: &[String],
    physical: &str,
    query: &str,
    (pre, post): (&[String], &[String]),
    checks: &[(&crate::core::audit::Audit, String)],
) -> Result<(UpsertStats, Vec<super::audit::AuditResult>), ApplyError> {
    write(engine, model, Match::Partition(partitioned_by), physical, query, (pre, post), checks)
}

/// Which stored rows a staged row replaces.
#[derive(Debug, Clone, Copy)]
pub enum Match<'a> {
    /// The row of the same key (no NULLs, no duplicates: checked first).
    Key(&'a [String]),
    /// Every row of the same partition (NULL matches NULL).
    Partition(&'a [String]),
}

/// [`upsert`] or [`replace_partitions`], as `by` says.
///
/// # Errors
/// As those.
pub fn write(
    engine: &mut dyn Engine,
    model: &Model,
    by: Match<'_>,
    physical: &str,
    query: &str,
    (pre, post): (&[String], &[String]),
    checks: &[(&crate::core::audit::Audit, String)],
) -> Result<(UpsertStats, Vec<super::audit::AuditResult>), ApplyError> {
    let staged = stage(engine, model, query)?;
    let st = stage_relation(engine);
    let result = (|| {
        check_fits(engine, model, physical)?;
        let matches = match by {
            Match::Key(key) => {
                check_keys(engine, model, key)?;
                key.iter().map(|k| format!("_s.{k} = _t.{k}", k = quote_ident(k))).collect::<Vec<_>>().join(" AND ")
            }
            Match::Partition(cols) => cols.iter().map(|k| format!("_s.{k} IS NOT DISTINCT FROM _t.{k}", k = quote_ident(k))).collect::<Vec<_>>().join(" AND "),
        };
        let cols = column_list(model);
        // Compared before the write (a table not there yet makes every row a change).
        let new_rows = format!("SELECT count(*) FROM (SELECT {cols} FROM {st} EXCEPT ALL SELECT {cols} FROM {physical}) AS _efmesh_changed");
        let changed = match by {
            Match::Key(_) => engine.query(&new_rows).map_or(staged, |rows| first_number(&rows)),
            // A replaced partition may also lose rows: those count too.
            Match::Partition(_) => {
                let replaced = format!("SELECT {cols} FROM {physical} AS _t WHERE EXISTS (SELECT 1 FROM {st} AS _s WHERE {matches})");
                let gone = format!("SELECT count(*) FROM ({replaced} EXCEPT ALL SELECT {cols} FROM {st}) AS _efmesh_gone");
                match (engine.query(&new_rows), engine.query(&gone)) {
                    (Ok(a), Ok(b)) => first_number(&a) + first_number(&b),
                    _ => staged,
                }
            }
        };
        // The pre-statements after the table exists, the post-statements after the write.
        let mut statements = vec![format!("CREATE TABLE IF NOT EXISTS {physical} AS SELECT {cols} FROM {st} LIMIT 0")];
        statements.extend_from_slice(pre);
        statements.push(format!("DELETE FROM {physical} AS _t WHERE EXISTS (SELECT 1 FROM {st} AS _s WHERE {matches})"));
        statements.push(format!("INSERT INTO {physical} ({cols}) SELECT {cols} FROM {st}"));
        statements.extend_from_slice(post);
        let audits = super::audit::transaction(engine, &statements, &model.name, checks, None).map_err(|e| audit_error(model, e))?;
        Ok((UpsertStats { upserted: staged, changed }, audits))
    })();
    drop_stage(engine);
    result
}

/// An audited transaction's failure as an apply error: a statement that failed is a build error,
/// anything else (a blocking violation, an audit that does not run) an audit error.
pub(crate) fn audit_error(model: &Model, e: super::audit::AuditError) -> ApplyError {
    match e {
        super::audit::AuditError::Statement(e) => build_error(model, e),
        failure => ApplyError::Audit { model: model.name.clone(), interval: None, failure },
    }
}

/// The declared columns, quoted, comma-separated.
pub(crate) fn column_list(model: &Model) -> String {
    model.schema.names().map(quote_ident).collect::<Vec<_>>().join(", ")
}

pub(crate) fn build_error(model: &Model, error: crate::engine::EngineError) -> ApplyError {
    ApplyError::build(model, None, error)
}

/// Evaluates `query` once into the stage ([`stage_relation`]) (declared columns in declared order); returns the row
/// count.
pub(crate) fn stage(engine: &mut dyn Engine, model: &Model, query: &str) -> Result<usize, ApplyError> {
    let cols = column_list(model);
    let st = stage_relation(engine);
    engine
        .transaction(&engine.sql().replace_temp_table_as(STAGE, &format!("SELECT {cols} FROM (\n{query}\n) AS _efmesh_q")))
        .map_err(|e| build_error(model, e))?;
    let rows = engine.query(&format!("SELECT count(*) FROM {st}")).map_err(|e| build_error(model, e))?;
    Ok(first_number(&rows))
}

/// Drops the stage ([`stage_relation`]); a failure only leaves a temporary table that dies with the connection.
pub(crate) fn drop_stage(engine: &mut dyn Engine) {
    if let Err(e) = engine.execute(&engine.sql().drop_table_if_exists(&stage_relation(engine))) {
        tracing::warn!("cannot drop the staging table: {e}");
    }
}

/// Rejects staged rows the existing table `physical` cannot hold as the query returns them: a
/// column the table stores in another type than the query now gives it (a source widened, a
/// table created from a narrower declared schema for `@this`, a column a forward-only change
/// added before its type was the query's) whose values that type would round or cut. Written,
/// such values would be served otherwise than the query returns them, and a key or an SCD type
/// 2 comparison would see equal rows as different (a new version at every run) or different
/// keys as one (duplicate keys). Only built-in scalar columns whose types differ (with their
/// sizes: `NUMERIC(10,2)`, `VARCHAR(5)` on Postgres too), and
/// not into one known to hold every value, are checked ([`super::contract::lossy_columns`], one
/// count each, [`super::contract::changed_values`], as a time-range batch's); a table not there
/// yet takes the stage's types.
pub(crate) fn check_fits(engine: &mut dyn Engine, model: &Model, physical: &str) -> Result<(), ApplyError> {
    let Ok(stored) = engine.describe(&format!("SELECT * FROM {physical}")) else { return Ok(()) };
    let st = stage_relation(engine);
    let staged = engine.describe(&format!("SELECT * FROM {st}")).map_err(|e| build_error(model, e))?;
    for lossy in super::contract::lossy_columns(&staged, &stored) {
        let Some((n, example)) = super::contract::changed_values(engine, &st, "TRUE", &lossy).map_err(|e| super::unfit(model, &lossy, "", None, e))? else {
            continue;
        };
        let (column, returned, stored) = lossy;
        return Err(ApplyError::Rejected {
            model: model.name.clone(),
            location: model.location.clone(),
            message: format!(
                "column `{column}`: the query returns `{returned}` but the table stores `{stored}`, which would change {n} of its values{example}: the table would serve other values than the query's, and compare changed rows as equal or equal ones as changed; nothing was written\n  \
                 hint: cast the column in the query to `{stored}`, or declare the type the query returns (`{returned}`) and give the model a new version (a changed model builds a new table; an SCD type 2 history then needs `--reset-history` or a declared `renamed`)"
            ),
        });
    }
    Ok(())
}

/// Rejects staged rows with a NULL key column or a key that appears more than once.
pub(crate) fn check_keys(engine: &mut dyn Engine, model: &Model, key: &[String]) -> Result<(), ApplyError> {
    let st = stage_relation(engine);
    let reject = |message: String| ApplyError::Rejected { model: model.name.clone(), location: model.location.clone(), message };
    let any_null = key.iter().map(|k| format!("{} IS NULL", quote_ident(k))).collect::<Vec<_>>().join(" OR ");
    let rows = engine.query(&format!("SELECT count(*) FROM {st} WHERE {any_null}")).map_err(|e| build_error(model, e))?;
    let nulls = first_number(&rows);
    if nulls > 0 {
        return Err(reject(format!(
            "{nulls} row{} of the query {} a NULL key ({}); nothing was written",
            if nulls == 1 { "" } else { "s" },
            if nulls == 1 { "has" } else { "have" },
            key_names(key)
        )));
    }
    let key_cols = key.iter().map(|k| quote_ident(k)).collect::<Vec<_>>().join(", ");
    let shown = key.iter().map(|k| format!("CAST({} AS VARCHAR)", quote_ident(k))).collect::<Vec<_>>().join(", ");
    let dup = engine
        .query(&format!(
            "SELECT {shown}, n, count(*) OVER () FROM (SELECT {key_cols}, count(*) AS n FROM {st} GROUP BY {key_cols} HAVING count(*) > 1) \
             ORDER BY n DESC, {} LIMIT 1",
            (1..=key.len()).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
        ))
        .map_err(|e| build_error(model, e))?;
    if let Some(row) = dup.first() {
        let value = key
            .iter()
            .zip(row)
            .map(|(k, v)| format!("{k} = {}", v.as_deref().map(|v| format!("'{v}'")).unwrap_or_else(|| "NULL".into())))
            .collect::<Vec<_>>()
            .join(", ");
        let n = row.get(key.len()).cloned().flatten().unwrap_or_default();
        let keys = row.get(key.len() + 1).cloned().flatten().and_then(|s| s.parse::<usize>().ok()).unwrap_or(1);
        let others = if keys > 1 { format!(" ({} duplicated keys in all)", keys) } else { String::new() };
        return Err(reject(format!("duplicate key in the query's output: ({value}) appears {n} times{others}; nothing was written")));
    }
    Ok(())
}

fn key_names(key: &[String]) -> String {
    key.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
}

fn first_number(rows: &[Vec<Option<String>>]) -> usize {
    rows.first().and_then(|r| r.first().cloned().flatten()).and_then(|n| n.parse().ok()).unwrap_or(0)
}
