//! `scd_type2`: keep the history of every key's watched columns.
//!
//! The physical table holds the declared columns, then the two managed columns `valid_from` and
//! `valid_to` (`TIMESTAMP`, UTC; names configurable). A row with `valid_to IS NULL` is the key's
//! *open* (current) version. Every build of a new version and every `efmesh run` of the
//! environment's current version reconciles the table with the query, at ONE instant `now` (the
//! plan's clock, the same for every row and every model of that apply or run):
//!
//! 1. the query is evaluated once into the staging table (see [`super::upsert`]); a NULL key or a
//!    key that appears twice rejects the refresh with [`ApplyError::Rejected`] naming the model
//!    and the key — nothing is written;
//! 2. ONE engine transaction:
//!    - creates the table if missing (staged shape + the managed columns, no rows);
//!    - closes (`valid_to = now`) every open version whose key the query returns with a watched
//!      column that differs (`IS DISTINCT FROM`, so NULL = NULL), and — with
//!      `invalidate_hard_deletes` (the default) — every open version whose key the query no
//!      longer returns;
//!    - opens (`valid_from = now`, `valid_to = NULL`) a version for every staged row whose key
//!      has no open version left: new keys, changed keys, keys that come back after a delete.
//!
//! A new version whose plan carries the history over (a declared `renamed`, see
//! [`crate::plan::HistoryFate::Carried`]) starts from a copy of the old version's rows
//! ([`carry_over`]) before its first reconciliation.
//!
//! Unchanged keys are left alone, so their `valid_from` never moves. A key is matched by its key
//! columns (never by the whole tuple); columns that are neither key nor watched are stored as
//! they were when the version opened (a change in them alone opens no version). Reconciling twice
//! with the same source changes nothing, so a crash before the snapshot is recorded is harmless.

use super::ApplyError;
use super::upsert::{build_error, check_keys, column_list, drop_stage, stage, stage_relation};
use crate::core::Model;
use crate::core::interval::{self, Millis};
use crate::core::kind::ScdType2;
use crate::core::name::quote_ident;
use crate::engine::Engine;

/// What one reconciliation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScdStats {
    /// Open versions closed (changed or hard-deleted keys).
    pub closed: usize,
    /// Versions opened (new, changed or returning keys).
    pub opened: usize,
}

/// Reconciles `physical` with `query` (the model's body rendered against the plan's physical
/// relations) at `now` (UTC ms), as described in the module docs.
///
/// # Errors
/// [`ApplyError::Rejected`] for NULL or duplicate keys (nothing written);
/// [`ApplyError::Build`] when an engine statement fails (the transaction is rolled back).
///
/// `pre`/`post` (the model's pre/post statements, rendered) run inside that transaction, before
/// and after the reconciliation. `checks` (the model's audits over `physical`) run inside it after the
/// reconciliation: a blocking violation rolls it back ([`ApplyError::Audit`]).
#[allow(clippy::too_many_arguments)]
pub fn reconcile(
    engine: &mut dyn Engine,
    model: &Model,
    scd: &ScdType2,
    physical: &str,
    query: &str,
    now: Millis,
    (pre, post): (&[String], &[String]),
    checks: &[(&crate::core::audit::Audit, String)],
) -> Result<(ScdStats, Vec<super::audit::AuditResult>), ApplyError> {
    stage(engine, model, query)?;
    let result = (|| {
        super::upsert::check_fits(engine, model, physical)?;
        check_keys(engine, model, &scd.key)?;
        not_before_history(engine, model, scd, physical, now)?;
        let mut statements = statements(model, scd, physical, now, &stage_relation(engine));
        // The pre-statements after the table exists (the first statement), the post-statements last.
        let write = statements.split_off(1);
        statements.extend_from_slice(pre);
        statements.extend(write);
        statements.extend_from_slice(post);
        // Counted inside the same state the transaction sees: before it, what will close and open.
        let (closed, opened) = counts(engine, model, scd, physical)?;
        let audits = super::audit::transaction(engine, &statements, &model.name, checks, None).map_err(|e| super::upsert::audit_error(model, e))?;
        Ok((ScdStats { closed, opened }, audits))
    })();
    drop_stage(engine);
    result
}

/// Creates the new version's table `physical` from every row of the old version's table
/// (`history.from_physical`): open and closed versions, `valid_from`/`valid_to` as they were,
/// the declared renames applied (`renamed`), columns the new version adds NULL, each column cast
/// to the type the query gives it (`described`, as a fresh build would create it; the declared
/// type when not described): a narrower declared type would round or cut the carried values.
/// A carried value that type would change (the query now returns `DECIMAL(10,2)` where the
/// history stores `DECIMAL(18,4)`) refuses the copy first (`check_carried_values`): the history
/// would no longer say what was recorded.
/// One engine transaction, which first drops a table of that name: only a
/// version no snapshot records is built, so such a table is what an interrupted apply left
/// (perhaps from another choice: a wrong `renamed`, which is not fingerprinted, or a reset).
/// Returns the rows and closed versions copied, which the snapshot records ([`crate::plan::CARRIED`]).
///
/// # Errors
/// [`ApplyError::Rejected`] when a carried value would change (nothing is created);
/// [`ApplyError::Build`] when an engine statement fails (nothing is created).
pub fn carry_over(
    engine: &mut dyn Engine,
    model: &Model,
    scd: &ScdType2,
    physical: &str,
    history: &crate::plan::History,
    described: &[crate::engine::DescribedColumn],
) -> Result<(usize, usize), ApplyError> {
    // Each declared column: the old table's column it is copied from (none: added, NULL) and the
    // type the new table creates it with.
    let columns: Vec<Carried<'_>> = model
        .schema
        .0
        .iter()
        .map(|c| {
            let source = history.renamed.iter().find(|(_, new)| **new == c.name).map(|(old, _)| old.as_str());
            let source = source.or_else(|| (!history.added.contains(&c.name)).then_some(c.name.as_str()));
            Carried { name: &c.name, source, ty: super::contract::column_type(described, &c.name, &c.ty) }
        })
        .collect();
    check_carried_values(engine, model, history, &columns)?;
    let select = columns
        .iter()
        .map(|c| match c.source {
            Some(old) => format!("CAST(_o.{} AS {}) AS {}", quote_ident(old), c.ty, quote_ident(c.name)),
            None => format!("CAST(NULL AS {}) AS {}", c.ty, quote_ident(c.name)),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (vf, vt) = (quote_ident(&scd.valid_from), quote_ident(&scd.valid_to));
    let from = &history.from_physical;
    engine
        .transaction(&[
            engine.sql().drop_table_if_exists(physical),
            engine.sql().create_table_as(physical, &format!("SELECT {select}, _o.{vf}, _o.{vt} FROM {from} AS _o")),
        ])
        .map_err(|e| build_error(model, e))?;
    history_counts(engine, physical, scd).map_err(|e| build_error(model, e))
}

/// One column of a carried history's new table ([`carry_over`]).
struct Carried<'a> {
    /// Its declared name.
    name: &'a str,
    /// The old table's column its values come from; `None` for a column the new version adds.
    source: Option<&'a str>,
    /// The type the new table creates it with.
    ty: &'a str,
}

/// Refuses, before anything is created, a carry over that would change recorded values: each
/// carried column the old table stores in another built-in scalar type than the new table would
/// (not one known to hold every value, [`super::contract::lossy_columns`]) is checked value by
/// value, as staged rows are ([`super::upsert::check_fits`], through the same engine helper,
/// [`super::contract::changed_values`]: on Postgres too, where a cast to `VARCHAR(5)` cuts
/// silently). Copied, such values would be rounded or cut in every version, closed ones too:
/// the history would no longer say what was recorded, and the next reconciliation would compare
/// the query with altered values.
///
/// # Errors
/// [`ApplyError::Rejected`] naming the model, the column, both types and an example, with the
/// ways forward; [`ApplyError::Build`] when the old table cannot be read.
fn check_carried_values(engine: &mut dyn Engine, model: &Model, history: &crate::plan::History, columns: &[Carried<'_>]) -> Result<(), ApplyError> {
    let from = &history.from_physical;
    let stored = engine.describe(&format!("SELECT * FROM {from}")).map_err(|e| build_error(model, e))?;
    let short = history.from.short();
    for c in columns {
        let Some(kept) = c.source.and_then(|old| stored.iter().find(|s| s.name.eq_ignore_ascii_case(old))) else { continue };
        let target = crate::engine::DescribedColumn { name: kept.name.clone(), ty: c.ty.to_string() };
        for lossy in super::contract::lossy_columns(std::slice::from_ref(kept), std::slice::from_ref(&target)) {
            let column = if kept.name == c.name { format!("column `{}`", c.name) } else { format!("column `{}` (`{}` in @{short})", c.name, kept.name) };
            let (_, recorded, created) = &lossy;
            let refuse = |what: String| ApplyError::Rejected {
                model: model.name.clone(),
                location: model.location.clone(),
                message: format!(
                    "cannot carry the history of @{short} over: {column} is stored there as `{recorded}`, but the new version's table would store it as `{created}` (the type the query now returns), {what}: the carried history would no longer say what was recorded; nothing of this model was written\n  \
                     hint: have the query return the column as `{recorded}`, as the history stores it (cast it to that type in the query); or start the history over: remove `renamed` from the kind and apply with `--reset-history {}`",
                    model.name
                ),
            };
            let found = super::contract::changed_values(engine, from, "TRUE", &lossy).map_err(|e| {
                let first = e.message.lines().next().unwrap_or_default().trim().to_string();
                let lowered = first.to_ascii_lowercase();
                if ["out of range", "overflow", "too long", "invalid input"].iter().any(|m| lowered.contains(m)) {
                    refuse(format!("which cannot hold some of its recorded values ({first})"))
                } else {
                    build_error(model, e)
                }
            })?;
            if let Some((n, example)) = found {
                return Err(refuse(format!("which would change {n} of its recorded values{example}")));
            }
        }
    }
    Ok(())
}

/// Rows and closed versions of an SCD table. A reconciliation never deletes a row: whatever it
/// records adds a row or closes a version, so equal counts mean nothing was recorded since.
fn history_counts(engine: &mut dyn Engine, relation: &str, scd: &ScdType2) -> Result<(usize, usize), crate::engine::EngineError> {
    let rows = engine.query(&format!("SELECT count(*), count({}) FROM {relation}", quote_ident(&scd.valid_to)))?;
    let at = |i: usize| rows.first().and_then(|r| r.get(i).cloned().flatten()).and_then(|n| n.parse().ok()).unwrap_or(0);
    Ok((at(0), at(1)))
}

/// Checked before anything is written: every history `plan` carries over is still all there.
/// A version to build copies the old version's table, which must be readable; a version that
/// exists already (built earlier) copied it then, and the old table must hold exactly what it
/// copied — otherwise what the environment recorded since would be lost, and
/// `apply` refuses unless `--reset-history` names the model.
///
/// # Errors
/// [`ApplyError::HistoryReset`] naming the model, the relation and the way forward.
pub fn check_carried(project: &crate::project::Project, plan: &crate::plan::Plan, engine: &mut dyn Engine) -> Result<(), ApplyError> {
    for action in &plan.actions {
        let Some(h) = action.history.as_ref().filter(|h| h.fate == crate::plan::HistoryFate::Carried) else { continue };
        let Some(crate::core::Kind::ScdType2(scd)) = project.dag.get(&action.name).map(|m| &m.kind) else { continue };
        let (name, short, from) = (&action.name, h.from.short(), &h.from_physical);
        match (h.copied, history_counts(engine, from, scd)) {
            (None, Err(e)) => {
                return Err(ApplyError::HistoryReset(format!(
                    "cannot carry the history of scd_type2 model `{name}` over: the table of @{short}, {from}, cannot be read ({e}); nothing was done\n  \
                     hint: restore it; or remove the `renamed` declaration and apply with `--reset-history {name}` to start the history over"
                )));
            }
            (Some(copied), now) if !h.reset_accepted && now.as_ref().ok() != Some(&copied) => {
                let since = match now {
                    Ok((rows, closed)) => {
                        format!("it holds {rows} rows ({closed} closed) where @{} copied {} ({})", action.fingerprint.short(), copied.0, copied.1)
                    }
                    Err(e) => format!("its table {from} cannot be read ({e})"),
                };
                return Err(ApplyError::HistoryReset(format!(
                    "refusing to apply `{}`: scd_type2 model `{name}` would be served by @{}, whose table started from the history of @{short}, but @{short} recorded more since ({since}), and history is never discarded without an explicit choice; nothing was done\n  \
                     choose:\n  - carry the current history over: change the model so a new version is built for `{}`\n  - serve @{} as it stands: `--reset-history {name}`",
                    plan.env,
                    action.fingerprint.short(),
                    plan.env,
                    action.fingerprint.short(),
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses to reconcile at `now` when the table holds history recorded after it (the clock
/// stepped back, or `--now` in the past): a version that started after `now` (closing it at `now`
/// would end it before it began), or a version closed after `now` — a hard delete or a change
/// closes a version later than every `valid_from`, and a key opened again at `now` would be valid
/// twice until that close. Nothing is written.
fn not_before_history(engine: &mut dyn Engine, model: &Model, scd: &ScdType2, physical: &str, now: Millis) -> Result<(), ApplyError> {
    let (schema, table) = split_physical(physical);
    if !engine.relation_exists(&schema, &table).map_err(|e| build_error(model, e))? {
        return Ok(());
    }
    let (vf, vt) = (quote_ident(&scd.valid_from), quote_ident(&scd.valid_to));
    let at = interval::to_sql_literal(now);
    let later = engine
        .query(&format!(
            "SELECT CAST(max(CASE WHEN {vf} > {at} THEN {vf} END) AS VARCHAR), CAST(max(CASE WHEN {vt} > {at} THEN {vt} END) AS VARCHAR) FROM {physical}"
        ))
        .map_err(|e| build_error(model, e))?;
    let newest = |i: usize| later.first().and_then(|r| r.get(i).cloned().flatten());
    let recorded: Vec<String> = [(&scd.valid_from, newest(0)), (&scd.valid_to, newest(1))]
        .into_iter()
        .filter_map(|(column, value)| value.map(|value| format!("`{column}` {value}")))
        .collect();
    if recorded.is_empty() {
        return Ok(());
    }
    Err(build_error(
        model,
        crate::engine::EngineError::new(
            "",
            format!(
                "scd_type2 model `{}` holds history recorded after this run's instant {} (newest {}, UTC): reconciling now would close versions before they began or open versions that overlap closed ones (has the clock stepped back, or is `--now` in the past?); nothing was done",
                model.name,
                interval::to_iso(now),
                recorded.join(", ")
            ),
        ),
    ))
}

/// The condition, over `_t` (the table) and `_s` (the staged query), matching a key.
fn key_match(scd: &ScdType2) -> String {
    scd.key.iter().map(|k| format!("_s.{k} = _t.{k}", k = quote_ident(k))).collect::<Vec<_>>().join(" AND ")
}

/// The condition under which an open version `_t` must close.
fn closes(model: &Model, scd: &ScdType2, st: &str) -> String {
    let matches = key_match(scd);
    let watched = scd.watched(&model.schema);
    let mut reasons = Vec::new();
    if !watched.is_empty() {
        let differs = watched.iter().map(|c| format!("_s.{c} IS DISTINCT FROM _t.{c}", c = quote_ident(c))).collect::<Vec<_>>().join(" OR ");
        reasons.push(format!("EXISTS (SELECT 1 FROM {st} AS _s WHERE {matches} AND ({differs}))"));
    }
    if scd.invalidate_hard_deletes {
        reasons.push(format!("NOT EXISTS (SELECT 1 FROM {st} AS _s WHERE {matches})"));
    }
    if reasons.is_empty() {
        return "FALSE".into();
    }
    reasons.join(" OR ")
}

fn statements(model: &Model, scd: &ScdType2, physical: &str, now: Millis, st: &str) -> Vec<String> {
    let cols = column_list(model);
    let staged_cols = model.schema.names().map(|c| format!("_s.{}", quote_ident(c))).collect::<Vec<_>>().join(", ");
    let (vf, vt) = (quote_ident(&scd.valid_from), quote_ident(&scd.valid_to));
    let now = interval::to_sql_literal(now);
    let matches = key_match(scd);
    vec![
        format!("CREATE TABLE IF NOT EXISTS {physical} AS SELECT {cols}, CAST(NULL AS TIMESTAMP) AS {vf}, CAST(NULL AS TIMESTAMP) AS {vt} FROM {st} LIMIT 0"),
        format!("UPDATE {physical} AS _t SET {vt} = {now} WHERE _t.{vt} IS NULL AND ({})", closes(model, scd, st)),
        format!(
            "INSERT INTO {physical} ({cols}, {vf}, {vt}) SELECT {staged_cols}, {now}, NULL FROM {st} AS _s \
             WHERE NOT EXISTS (SELECT 1 FROM {physical} AS _t WHERE {matches} AND _t.{vt} IS NULL)"
        ),
    ]
}

/// How many open versions will close and how many versions will open (for the log and report).
fn counts(engine: &mut dyn Engine, model: &Model, scd: &ScdType2, physical: &str) -> Result<(usize, usize), ApplyError> {
    let st = stage_relation(engine);
    let (schema, table) = split_physical(physical);
    if !engine.relation_exists(&schema, &table).map_err(|e| build_error(model, e))? {
        let n = engine.query(&format!("SELECT count(*) FROM {st}")).map_err(|e| build_error(model, e))?;
        return Ok((0, number(&n)));
    }
    let vt = quote_ident(&scd.valid_to);
    let matches = key_match(scd);
    let closed = engine
        .query(&format!("SELECT count(*) FROM {physical} AS _t WHERE _t.{vt} IS NULL AND ({})", closes(model, scd, &st)))
        .map_err(|e| build_error(model, e))?;
    // Keys with no open version after closing: staged keys without an open version, plus
    // staged keys whose open version closes for a change.
    let opened = engine
        .query(&format!(
            "SELECT count(*) FROM {st} AS _s WHERE NOT EXISTS (SELECT 1 FROM {physical} AS _t WHERE {matches} AND _t.{vt} IS NULL AND NOT ({}))",
            closes(model, scd, &st)
        ))
        .map_err(|e| build_error(model, e))?;
    Ok((number(&closed), number(&opened)))
}

/// `(schema, table)` of a qualified physical relation `"<schema>"."<table>"` (physical names are
/// identifiers, never containing `.` or `"`).
fn split_physical(physical: &str) -> (String, String) {
    let unquote = |s: &str| s.trim_matches('"').to_string();
    match physical.split_once('.') {
        Some((s, t)) => (unquote(s), unquote(t)),
        None => (crate::plan::PHYSICAL_SCHEMA.to_string(), unquote(physical)),
    }
}

fn number(rows: &[Vec<Option<String>>]) -> usize {
    rows.first().and_then(|r| r.first().cloned().flatten()).and_then(|n| n.parse().ok()).unwrap_or(0)
}
