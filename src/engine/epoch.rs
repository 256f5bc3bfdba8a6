//! The engine epoch: whether an engine database holds every write the state store records
//! (SPEC §4, invariant 63).
//!
//! The state store's ledger says which intervals are done and which versions are built; the
//! tables holding them live in the engine's own database. The two are written one after the
//! other (the engine first), so after a crash the database may hold more than the ledger says
//! (recomputed, never wrong) but never less — unless the database is replaced behind efmesh's
//! back: an older copy restored from a backup after later runs, or two databases applied with
//! one state store (two machines sharing a Postgres state store, each with its own DuckDB file).
//! Every relation then still exists, so the integrity check (relations missing, views pointing
//! elsewhere) sees nothing, and a table lacking intervals its ledger records as done would be
//! served as caught up.
//!
//! So each state store stamps the databases it writes: the comment of the view
//! `"_efmesh"."_efmesh_epoch__<store id>"` (`efmesh engine epoch <n>`), one per store (several
//! stores may share a database). Every `apply` or `run` that writes into tables of the engine's
//! own database raises that stamp, before its first write and again once it is done, to an
//! epoch the store issues (`meta.epoch_issued`, raised atomically past itself, the store's
//! epoch and the stamp found: no two writers ever get the same number), then records the new
//! epoch in the store (`meta.engine_epoch`): the stamp first, so a process killed in between
//! leaves the database ahead of the store, never behind it.
//!
//! Two writers of two databases sharing one store (two DuckDB files, one Postgres store) may
//! both pass the check below before either raises the epoch; each database then lacks the
//! other's writes. So at its closing raise a command compares the issued counter it finds with
//! the epoch of its opening raise: another writer was issued an epoch since (and its database
//! does not hold that stamp, as a second writer of the same Postgres database's would), so this
//! database may lack that writer's writes, and the command records the store's epoch one past
//! its own stamp, leaving its database behind (refused, with the ways out below). Whichever
//! closes first, the writer that opened first sees the other's opening, and its record puts the
//! store past every stamp issued so far: neither database is accepted afterwards. Left open: a
//! writer killed after its opening raise never closes, so the other database, if it closes
//! later with no other issue since its own opening, is accepted though it lacks the killed
//! writer's ledger writes (SPEC §4, invariant 63). A plan (and the apply or run
//! carrying it out, on its own connection, the janitor, and `audit`, `preview` and `diff --data`,
//! which read what the views serve) refuses a database whose stamp is lower than the store's
//! epoch while it holds a table of any of the store's versions ([`behind`], through
//! `plan::integrity::engine_behind`); a database holding none of them (a new file, the old one moved aside) is
//! rebuilt by the plan's repairs, stamped current before the first write.
//!
//! The stamp is in the catalog (a comment), so a plan reads it with the catalog it already
//! reads or recorded, at no extra query; on an engine several processes write at once
//! (Postgres), stamping holds a transaction-scoped lock and re-reads the stamp under it
//! ([`crate::engine::dialect::Dialect::comment_guard`]), so two stampers never lower it.
//!
//! Whoever compares the two reads the store's epoch BEFORE the catalog
//! (`plan::integrity::Observed`): a writer stamps before it records, so every epoch the store
//! recorded by then is already stamped in the catalog read after it, while a writer stamping and
//! recording between a catalog read and a later read of the store's epoch (another process's
//! `run` on a Postgres database two checkouts share, or on a DuckDB file once the reader let go
//! of it) would make a current database look behind. The one record made before its stamp is
//! the deliberate one above (another writer issued an epoch since: this database is to end
//! behind).

use super::{Catalog, Engine, EngineError, STORAGE_SCHEMA};
use crate::core::name::{quote_ident, quote_literal};

/// The name of the stamp's view in [`STORAGE_SCHEMA`], before the store id.
pub const VIEW_PREFIX: &str = "_efmesh_epoch__";

/// The text of a stamp's comment, before the epoch.
const COMMENT_PREFIX: &str = "efmesh engine epoch ";

/// The stamp view of the store `store_id` (unquoted name).
pub fn view_name(store_id: &str) -> String {
    format!("{VIEW_PREFIX}{store_id}")
}

/// The stamp view of the store `store_id`, qualified and quoted.
pub fn relation(store_id: &str) -> String {
    format!("{}.{}", quote_ident(STORAGE_SCHEMA), quote_ident(&view_name(store_id)))
}

/// The epoch a stamp's comment holds; `None` for any other text.
pub fn parse(comment: &str) -> Option<i64> {
    comment.strip_prefix(COMMENT_PREFIX).and_then(|n| n.parse().ok()).filter(|n: &i64| *n >= 0)
}

/// The epoch of the store `store_id` stamped in the database `catalog` describes: 0 when there
/// is no stamp (nothing written there by this store since stamps exist).
pub fn stamped(catalog: &Catalog, store_id: &str) -> i64 {
    catalog.comment(STORAGE_SCHEMA, &view_name(store_id)).and_then(parse).unwrap_or(0)
}

/// Raises the stamp of the store `store_id` in `engine`'s database to the epoch `issue` returns
/// when given the stamp the database holds: `found` (the stamp the caller read: its catalog)
/// or, on an engine several processes write at once, the larger of it and the stamp read again
/// under its lock, which `issue` holds while it runs. `issue` takes the epoch from the store
/// ([`crate::state::StateStore::issue_epoch`]: one more than the store's counter, its epoch and
/// that stamp), so the stamp only grows and no two writers stamp the same epoch. In ONE
/// transaction. Returns the epoch stamped, for [`crate::state::StateStore::record_engine_epoch`].
///
/// # Errors
/// [`EngineError`] naming the statement, or `issue`'s error (nothing is stamped).
pub fn stamp<E: From<EngineError>>(engine: &mut (dyn Engine + '_), store_id: &str, found: i64, issue: impl FnOnce(i64) -> Result<i64, E>) -> Result<i64, E> {
    let relation = relation(store_id);
    let sql = engine.sql();
    let mut statements = vec![sql.create_schema_if_absent(STORAGE_SCHEMA)];
    statements.extend(sql.replace_view_as(&relation, "SELECT 1 AS efmesh_epoch"));
    let comment = |epoch: i64| format!("COMMENT ON VIEW {relation} IS {}", quote_literal(&format!("{COMMENT_PREFIX}{epoch}")));
    let Some([lock, read]) = sql.comment_guard(&relation) else {
        let epoch = issue(found)?;
        statements.push(comment(epoch));
        engine.transaction(&statements)?;
        return Ok(epoch);
    };
    engine.begin()?;
    let stamped = (|| -> Result<i64, E> {
        engine.execute(&lock)?;
        let again = engine.query(&read)?.into_iter().next().and_then(|r| r.into_iter().next().flatten()).and_then(|c| parse(&c)).unwrap_or(0);
        // Never lower: the issued epoch is past the stamp it is given.
        let epoch = issue(found.max(again))?.max(again + 1);
        statements.push(comment(epoch));
        for s in &statements {
            engine.execute(s)?;
        }
        Ok(epoch)
    })();
    match stamped {
        Ok(epoch) => engine.commit().map(|()| epoch).map_err(E::from),
        Err(e) => {
            let _ = engine.rollback();
            Err(e)
        }
    }
}

/// The table of the store's versions (`index`: every snapshot's physical relation) that the
/// database `catalog` describes holds while its stamp is lower than the store's epoch
/// `recorded`: `(stamp, "schema.table", model)` of the first one in name order; `None` when the
/// stamp is current (or ahead: a process killed between its stamp and its record) or the
/// database holds none of them (a new file, the old one moved aside: what it lacks is rebuilt).
/// Every table the store knows counts, not only those a plan serves: a database holding stale
/// tables of one environment must not be stamped current by an apply of another (which would
/// then serve them as caught up).
pub fn behind(catalog: &Catalog, store_id: &str, recorded: i64, index: &crate::state::SnapshotIndex) -> Option<(i64, String, String)> {
    let stamped = stamped(catalog, store_id);
    if stamped >= recorded {
        return None;
    }
    index
        .iter()
        .filter_map(|((name, _), (physical, _))| {
            let (schema, table) = crate::core::name::split_relation(physical)?;
            // Tables only: a view (a `view` model's, a lake version's) holds no rows of its own.
            let entry = catalog.relations.get(&(schema.to_lowercase(), table.to_lowercase()))?;
            entry.sql.is_none().then(|| (format!("{schema}.{table}"), name.clone()))
        })
        .min()
        .map(|(relation, model)| (stamped, relation, model))
}

/// The refusal of an engine database whose stamp (`stamped`) is lower than the store's epoch
/// (`recorded`), naming both, one of the store's tables it holds (`example`), the likely causes
/// and the ways forward.
pub fn behind_message(engine: &str, store: &str, stamped: i64, recorded: i64, example: &str) -> String {
    format!(
        "the engine database {engine} is older than the state store {store} says: the store records writes up to engine epoch {recorded}, \
         the database holds them up to epoch {stamped} (it was restored from an older copy after later runs, or another database was applied \
         with this state store since); its tables, {example} among them, may lack intervals and builds the state store records as done, \
         so nothing is planned or served from it as it is\n  \
         hint: restore the state store from the same moment as the database (`efmesh state import <export> --force`), or move the database aside: \
         the next `efmesh apply <env>` then rebuilds every version the state store records"
    )
}

/// The refusal of `efmesh state import` of an export whose `engineEpoch` (`exported`) is lower
/// than the stamp the engine database holds for its store (`stamped`): the database holds
/// writes made after the export, and the restored ledger may call done intervals those writes
/// replaced (a forward-only change, a restatement, a lookback rewrite; a run that only computed
/// intervals the export records as not done replaced none, but the stamp cannot tell which).
/// Names the database, both epochs and the ways forward, with when `--engine-ahead` is safe.
pub fn ahead_message(engine: &str, stamped: i64, exported: i64) -> String {
    format!(
        "the engine database {engine} holds writes made after this export (epoch {stamped} > {exported}): the restored ledger may call done \
         intervals those writes replaced (forward-only changes, restatements, lookback rewrites), which would then be served as the export \
         describes them; nothing was imported\n  \
         hint: restore the database from the same moment as the export, or move it aside (the next `efmesh apply <env>` rebuilds every version \
         the state store records), or import with `--engine-ahead` to trust the ledger as it is (safe only when every write since the export \
         went to tables of versions the export does not record or computed only new intervals: no restatement, no forward-only change, no \
         lookback rewrite of an interval the export records as done)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_and_other_comments_are_no_stamp() {
        assert_eq!(parse("efmesh engine epoch 7"), Some(7));
        for other in ["efmesh engine epoch", "efmesh engine epoch -1", "efmesh engine epoch 7x", "efmesh: created under project root /p", ""] {
            assert_eq!(parse(other), None, "{other}");
        }
        let mut catalog = Catalog::default();
        assert_eq!(stamped(&catalog, "ab"), 0);
        catalog
            .relations
            .insert((STORAGE_SCHEMA.to_string(), view_name("ab")), super::super::CatalogEntry { comment: Some("efmesh engine epoch 12".into()), sql: None });
        assert_eq!((stamped(&catalog, "ab"), stamped(&catalog, "cd")), (12, 0));
        assert_eq!(relation("ab"), "\"_efmesh\".\"_efmesh_epoch__ab\"");
    }

    /// The import's refusal names the database, both epochs, that nothing was imported, and
    /// every way forward; it says the ledger *may* call replaced intervals done (a run after the
    /// export that only computed new intervals replaced none) and when `--engine-ahead` is safe.
    #[test]
    fn the_ahead_refusal_names_the_database_both_epochs_and_the_ways_forward() {
        let m = ahead_message("/p/efmesh.duckdb", 9, 4);
        for wanted in [
            "/p/efmesh.duckdb holds writes made after this export (epoch 9 > 4)",
            "the restored ledger may call done intervals those writes replaced (forward-only changes, restatements, lookback rewrites)",
            "nothing was imported",
            "move it aside",
            "--engine-ahead",
            "computed only new intervals: no restatement, no forward-only change, no lookback rewrite",
        ] {
            assert!(m.contains(wanted), "{wanted}: {m}");
        }
        assert!(!m.contains("would call done"), "{m}");
        // `--engine-ahead`'s warning is the message up to this phrase.
        assert_eq!(m.matches("; nothing was imported").count(), 1, "{m}");
    }
}
