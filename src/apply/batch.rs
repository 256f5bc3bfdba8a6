//! The statements of a time-range model's batches, rendered in one place: `apply` (and `run`,
//! which builds through it) executes them, and `efmesh render <model> --interval FROM TO`
//! prints them, so what render shows is the text apply runs (no copy that can drift).

use super::resolve::ExecResolver;
use crate::core::interval::{self, Interval};
use crate::core::name::quote_ident;
use crate::core::{Fragment, Model, TimeRange};
use crate::engine::dialect::Dialect;

/// How one batch writes its rows into the model's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchWrite {
    /// The table does not exist yet: the batch creates it (`CREATE TABLE … AS` the batch).
    Create,
    /// The table was created by an earlier batch of the same build: the batch has nothing to
    /// delete (`INSERT` only).
    Insert,
    /// The table exists: the batch replaces its interval (`DELETE` then `INSERT`).
    Replace,
}

impl BatchWrite {
    /// The write of batch `i` (0-based) of a build whose first batch creates the table
    /// (`create_with_first`) or not.
    pub fn of(create_with_first: bool, i: usize) -> BatchWrite {
        match (create_with_first, i) {
            (true, 0) => BatchWrite::Create,
            (true, _) => BatchWrite::Insert,
            (false, _) => BatchWrite::Replace,
        }
    }

    /// `create`, `insert` or `replace` (the `--json` spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            BatchWrite::Create => "create",
            BatchWrite::Insert => "insert",
            BatchWrite::Replace => "replace",
        }
    }
}

/// Whether the engine lacks the table `physical` (per `catalog`): a time-range table the engine
/// does not hold is created by the first batch that computes it.
pub fn table_absent(physical: &str, catalog: &crate::engine::Catalog) -> bool {
    crate::plan::integrity::split_relation(physical).is_some_and(|(s, r)| !catalog.contains(&s, &r))
}

/// Whether the first batch of a build of `model` may create its table when the engine lacks it
/// ([`BatchWrite::Create`]): not when the model reads itself (`@this`: the table must exist,
/// empty, before the query runs) nor when it has pre-statements (they run before the write and
/// may name the table with `@this`). Those get [`ensure_table`] first.
pub fn may_create_with_first(model: &Model, body: &Fragment) -> bool {
    !body.reads_itself() && model.statements.pre.is_empty()
}

/// The model's pre- and post-statements rendered for execution: bounds of `batch` (time-range
/// models), `@this` as the version's table. Each is led by a comment naming it and where it is
/// written (`/* efmesh: pre-statement 1 of model `m.x` (models/x.sql:4) */`), which an engine
/// error's `while running:` line shows.
pub fn pre_post(model: &Model, exec: &ExecResolver<'_>, batch: Option<Interval>) -> (Vec<String>, Vec<String>) {
    let exec = exec.with_bounds(batch);
    let render = |when: &str, list: &[crate::core::Statement]| -> Vec<String> {
        list.iter()
            .enumerate()
            .map(|(i, st)| format!("/* efmesh: {when}-statement {} of model `{}` ({}) */\n{}", i + 1, model.name, st.location, st.sql.render(&exec)))
            .collect()
    };
    (render("pre", &model.statements.pre), render("post", &model.statements.post))
}

/// `write` (the statements of one transaction that write the model) with the model's
/// pre-statements before it and its post-statements after it ([`pre_post`]). The first `keep`
/// statements of `write` stay first (a `CREATE TABLE IF NOT EXISTS`, so `@this` exists for the
/// pre-statements).
pub fn around(model: &Model, exec: &ExecResolver<'_>, batch: Option<Interval>, mut write: Vec<String>, keep: usize) -> Vec<String> {
    if model.statements.is_empty() {
        return write;
    }
    let (pre, post) = pre_post(model, exec, batch);
    let keep = keep.min(write.len());
    let rest = write.split_off(keep);
    write.extend(pre);
    write.extend(rest);
    write.extend(post);
    write
}

/// The statement run before the batches when the table exists (or no batch creates it): creates
/// it empty, with the query's columns and types, unless it exists (a no-op then).
///
/// A model reading itself (`@this`) cannot be typed by its query before its table exists: its
/// table takes the declared schema (the contract the query is checked against).
pub fn ensure_table(model: &Model, body: &Fragment, physical: &str, exec: &ExecResolver<'_>, dialect: &dyn Dialect) -> String {
    if body.reads_itself() {
        return dialect.create_empty_table_if_absent(physical, &format!("SELECT * FROM {}", super::resolve::typed_empty(model)));
    }
    let skeleton = body.render(&exec.with_bounds(Some(Interval::new(0, 0))));
    dialect.create_empty_table_if_absent(physical, &skeleton)
}

/// The intervals per batch of time-range model `model`: its `batch_size`, but one for a model
/// reading its own table (`@this`), so every interval sees the rows of every earlier one.
pub fn batch_size(model: &Model, t: &TimeRange) -> u32 {
    if model.body.as_ref().is_some_and(Fragment::reads_itself) { 1 } else { t.batch_size }
}

/// The statements of one batch of `model` (a time-range model of kind `t`, query `body`) over
/// `batch` into `physical`: its query rendered with the batch's literal bounds (references
/// resolved by `exec`), restricted to the batch on the time column, written as `write` says,
/// between the model's pre- and post-statements ([`around`]). They run in one engine
/// transaction.
#[allow(clippy::too_many_arguments)]
pub fn statements(
    model: &Model,
    t: &TimeRange,
    body: &Fragment,
    physical: &str,
    batch: Interval,
    exec: &ExecResolver<'_>,
    dialect: &dyn Dialect,
    write: BatchWrite,
) -> Vec<String> {
    let cols: Vec<String> = model.schema.names().map(quote_ident).collect();
    let cols = cols.join(", ");
    let tc = quote_ident(&t.time_column);
    let (s, e) = time_column_bounds(model, t, batch);
    let sql = body.render(&exec.with_bounds(Some(batch)));
    let insert = format!("INSERT INTO {physical} ({cols})\nSELECT {cols} FROM (\n{sql}\n) AS _efmesh_q\nWHERE {tc} >= {s} AND {tc} < {e}");
    let write = match write {
        BatchWrite::Create => vec![dialect.create_table_as(physical, &format!("SELECT * FROM (\n{sql}\n) AS _efmesh_q\nWHERE {tc} >= {s} AND {tc} < {e}"))],
        BatchWrite::Insert => vec![insert],
        BatchWrite::Replace => vec![delete(model, t, physical, batch), insert],
    };
    // The model's pre/post statements, with the batch's bounds, in the same transaction.
    around(model, exec, Some(batch), write, 0)
}

/// The statement deleting the rows of `range` from `physical`, the table of time-range model
/// `model` (kind `t`): what a batch replacing the range deletes first, and what an apply that
/// fails takes back of the rows it wrote into a table it inherits
/// ([`super::inherited::take_back`]).
pub fn delete(model: &Model, t: &TimeRange, physical: &str, range: Interval) -> String {
    let tc = quote_ident(&t.time_column);
    let (s, e) = time_column_bounds(model, t, range);
    format!("DELETE FROM {physical} WHERE {tc} >= {s} AND {tc} < {e}")
}

/// The literals `[start, end)` of `batch` compared with the time column: `DATE '…'` when the
/// column is declared `date` (its grain is a day or coarser, [`crate::core::dag`] checks it, so
/// the bounds are midnights and the comparison is the same, without casting the column),
/// `TIMESTAMPTZ '…+00'` when it is declared `timestamptz` (the interval's instants whatever time
/// zone a pre-statement set on the session), `TIMESTAMP '…'` otherwise.
pub fn time_column_bounds(model: &Model, t: &TimeRange, batch: Interval) -> (String, String) {
    let ty = model.schema.get(&t.time_column).map_or("", |c| c.ty.trim());
    let literal: fn(interval::Millis) -> String = if ty.eq_ignore_ascii_case("date") {
        interval::to_date_literal
    } else if crate::core::schema::is_zoned_timestamp(ty) {
        interval::to_tz_literal
    } else {
        interval::to_sql_literal
    };
    (literal(batch.start), literal(batch.end))
}
