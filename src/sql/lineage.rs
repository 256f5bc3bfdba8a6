//! Column resolution: which columns a model's SQL reads from its parents, and which of those
//! cannot exist.
//!
//! [`unknown_columns`] parses a canonically rendered body (references already spelled as logical
//! names `schema.table`, bounds as `$start` / `$end`) with sqlparser's DuckDB dialect and resolves
//! every column reference through the AST, scope by scope, against the declared columns of the
//! model's parents. It is what `efmesh check` runs for every model with a body, without any
//! database.
//!
//! # What is resolved
//!
//! - Relations in `FROM`: parents (by logical name, usable as `table` or `schema.table`, or by
//!   alias), CTEs (their output names, `*` expanded), subqueries (their output names), joins with
//!   `ON`, `USING` (each named column must exist on both sides) and `NATURAL`, nested joins,
//!   positional column aliases (`AS t(a, b)`), implicit lateral subqueries (DuckDB lets a
//!   subquery in `FROM` see the items to its left), `PIVOT` and `UNPIVOT` (their output open,
//!   every column of the relation they turn read: a `PIVOT` groups by each column it does not
//!   name, an `UNPIVOT` drops NULL values, so any of them changes which rows come out).
//! - References: unqualified `col`, qualified `alias.col`, `table.col`, `schema.table.col`,
//!   struct field access on any of them (`t.s.field`, `s['key']`, `s.a[1].b`), a relation used as
//!   a row value (`SELECT t FROM t`), select-list aliases anywhere in their `SELECT` (DuckDB allows
//!   them in `WHERE`, `GROUP BY`, `HAVING`, `QUALIFY`, `ORDER BY` and later select items),
//!   lambda parameters (`x -> x + 1`, `lambda x: x + 1`), correlated references to outer scopes
//!   (in DuckDB's grammar a dotted `z.k` is a struct column `z` of a subquery's own relations
//!   before an outer relation `z`), keyword functions written without parentheses that a relation
//!   has a column of that name for (`current_date`), the `a` of `count_if(a = 1)` (a comparison
//!   DuckDB reads, which sqlparser reads as an argument named `a`),
//!   window specifications and named windows, `*`, `t.*` and their `EXCLUDE`, `REPLACE` and
//!   `RENAME` options, `GROUP BY ALL`, `ORDER BY ALL`, set operations (`UNION [BY NAME]`, …),
//!   recursive CTEs.
//!
//! # Conservative by design
//!
//! A problem is reported only when the reference cannot exist whatever the interpretation:
//!
//! - a qualified reference whose qualifier names a relation with fully known columns (a parent,
//!   or a CTE or subquery whose every output name is known) that has no such column, and no
//!   other reading (struct field of a column, column of an outer scope) is possible;
//! - an unqualified reference when every relation of every visible scope has fully known
//!   columns, none has it, and it is not a select-list alias, a lambda parameter, a relation used
//!   as a row, or a DuckDB pseudo-column (`rowid`, `current_date`, …);
//! - a `USING` column missing from a side whose columns are fully known.
//!
//! A scope is *open* (no unqualified problem can be reported there) as soon as it holds a relation
//! whose columns are not fully known: an unknown table, a table function (`range()`,
//! `read_csv()`, `unnest()`), a `PIVOT`, or a CTE/subquery with an output column whose name
//! DuckDB generates from the expression text (`SELECT count(*) FROM …`) or that repeats a name.
//! Matching is case-insensitive, as DuckDB's identifiers are, quoted or not.

use super::canon::{self, SqlError};
use crate::core::error::did_you_mean;
use sqlparser::ast::{
    AccessExpr, Distinct, ExceptSelectItem, ExcludeSelectItem, Expr, FunctionArg, FunctionArgExpr, FunctionArgOperator, FunctionArguments, GroupByExpr, Ident,
    JoinConstraint, JoinOperator, NamedWindowDefinition, NamedWindowExpr, ObjectName, ObjectNamePart, OrderByKind, Query, RenameSelectItem, Select,
    SelectFlavor, SelectItem, SelectItemQualifiedWildcardKind, SetExpr, SetOperator, SetQuantifier, TableAlias, TableAliasColumnDef, TableFactor,
    TableWithJoins, Visit, Visitor, WildcardAdditionalOptions, WindowSpec, WindowType,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::ControlFlow;

/// One column reference in a model's SQL that cannot exist.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ColumnProblem {
    /// The missing column, as written (for an unresolvable qualifier, the whole reference).
    pub column: String,
    /// The reference as written, e.g. `o.amount` or `amount`.
    pub reference: String,
    /// The parent model (logical name `schema.table`) the column would have to come from, when
    /// that is certain: the parent itself, or the one parent a CTE or subquery reads `*` from.
    pub relation: Option<String>,
    /// What is wrong, in `STYLE.md` form (no trailing period, names in backticks), without the
    /// model's name, e.g. "column `amount` is not declared by parent `raw.orders` (as `o`)".
    pub detail: String,
    /// The closest existing name, for a "did you mean" hint.
    pub suggestion: Option<String>,
    /// 1-based line of the reference in the rendered SQL, when known.
    pub line: Option<u64>,
    /// 1-based column of the reference in the rendered SQL, when known.
    pub col: Option<u64>,
    /// True when the column may well exist and the problem is a parent qualified by its own
    /// name (`schema.table.col` over an unaliased ref), which a model's query cannot do.
    pub by_name: bool,
}

/// Every column reference of `sql` that cannot exist, given the declared columns of the parents
/// it reads, sorted by position.
///
/// `sql` is a model body rendered with
/// [`CanonicalResolver`](crate::core::fragment::CanonicalResolver): one query, parents named
/// `schema.table`. `parents` maps each parent's logical name to its declared columns (names
/// compare case-insensitively). Relations that are neither a parent nor a CTE are unknown and
/// make their scope open. See the [module docs](self) for what is resolved and what is
/// deliberately left open: an empty result never means "wrong", a problem always does.
///
/// # Errors
/// [`SqlError`] when sqlparser cannot parse `sql` as exactly one query (DuckDB might still
/// accept it: the columns are then simply not checked).
///
/// # Example
/// ```
/// use std::collections::BTreeMap;
/// let parents = BTreeMap::from([("raw.orders".to_string(), vec!["id".to_string(), "amount_cents".to_string()])]);
/// let problems = efmesh::sql::lineage::unknown_columns("SELECT o.id, o.amount FROM raw.orders AS o", &parents)?;
/// assert_eq!(problems.len(), 1);
/// assert_eq!(problems[0].column, "amount");
/// assert_eq!(problems[0].relation.as_deref(), Some("raw.orders"));
/// assert_eq!(problems[0].suggestion.as_deref(), Some("amount_cents"));
/// Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn unknown_columns(sql: &str, parents: &BTreeMap<String, Vec<String>>) -> Result<Vec<ColumnProblem>, SqlError> {
    unknown_columns_in(Grammar::Embedded, sql, parents)
}

/// The SQL grammar a project's bodies are written in: its engine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grammar {
    /// The embedded engine's (sqlparser's DuckDB dialect), the default.
    Embedded,
    /// Postgres's: parsed with sqlparser's Postgres dialect; a body it cannot read is reported
    /// with libpg_query's own message when Postgres's grammar refuses it too.
    Postgres,
}

/// [`unknown_columns`] for a body written in `grammar`.
///
/// # Errors
/// As [`unknown_columns`].
pub fn unknown_columns_in(grammar: Grammar, sql: &str, parents: &BTreeMap<String, Vec<String>>) -> Result<Vec<ColumnProblem>, SqlError> {
    Ok(analyze_in(grammar, sql, parents)?.unknown)
}

/// Every unqualified column reference of `sql` that more than one relation of its scope has
/// (DuckDB refuses it as ambiguous, or binds it where the author did not mean to), sorted by
/// position; `detail` names the relations. Rendered and resolved as for [`unknown_columns`].
///
/// # Errors
/// As [`unknown_columns`].
pub fn ambiguous_columns_in(grammar: Grammar, sql: &str, parents: &BTreeMap<String, Vec<String>>) -> Result<Vec<ColumnProblem>, SqlError> {
    Ok(analyze_in(grammar, sql, parents)?.ambiguous)
}

/// A parent's column that a query reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct SourceColumn {
    /// The parent model's logical name, as the parents map spells it.
    pub model: String,
    /// The column, as the parent declares it.
    pub column: String,
}

/// Where one output column of a query takes its values from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ColumnLineage {
    /// The output column's name; `None` where DuckDB generates it from the expression text.
    pub column: Option<String>,
    /// The parents' columns its expression reads, through CTEs, subqueries, joins, aliases,
    /// `*` and window definitions, named ones included (not the columns of filters, joins,
    /// groupings or orderings, a subquery's included, which are only in [`QueryLineage::reads`]).
    pub sources: Vec<SourceColumn>,
    /// False when something the list cannot name may feed it too: a relation whose columns are
    /// not known (an unknown table, a table function), a name that does not resolve,
    /// `COLUMNS(…)`. A certain empty list is a constant or a row count.
    pub certain: bool,
}

/// Column-level lineage of one query against its parents' declared columns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueryLineage {
    /// The output columns, in order.
    pub columns: Vec<ColumnLineage>,
    /// False when `columns` may not be in the engine's order (a `*` over a `USING` join, whose
    /// key columns Postgres puts first).
    pub ordered: bool,
    /// False when the output may have columns `columns` does not list (`*` over an unknown
    /// relation, a relation repeating a name, which DuckDB renames…). A name the output itself
    /// repeats is listed each time, as the engine returns it (a model's query doing so is
    /// refused by the schema contract), and none of its columns is certain.
    pub complete: bool,
    /// Every parent column the query reads anywhere: select lists, `WHERE`, joins, `GROUP BY`,
    /// windows, CTEs and subqueries (a change to any other column of a parent cannot change
    /// what the query returns, unless it changes the parent's rows).
    pub reads: Vec<SourceColumn>,
    /// False when the query may read parent columns `reads` does not list.
    pub reads_certain: bool,
    /// Parents whose `*` reaches the output: a column added to or removed from one of them adds
    /// or removes an output column.
    pub whole: Vec<String>,
}

/// The column-level lineage of `sql` (rendered as for [`unknown_columns`]) given the declared
/// columns of the parents it reads.
///
/// # Errors
/// As [`unknown_columns`].
///
/// # Example
/// ```
/// use std::collections::BTreeMap;
/// use efmesh::sql::lineage::{Grammar, column_lineage_in};
/// let parents = BTreeMap::from([
///     ("raw.orders".to_string(), vec!["id".to_string(), "customer_id".to_string(), "cents".to_string()]),
///     ("raw.customers".to_string(), vec!["id".to_string(), "region".to_string()]),
/// ]);
/// let sql = "WITH o AS (SELECT *, cents / 100 AS amount FROM raw.orders) \
///            SELECT c.region, sum(o.amount) AS revenue FROM o JOIN raw.customers AS c ON c.id = o.customer_id GROUP BY 1";
/// let l = column_lineage_in(Grammar::Embedded, sql, &parents)?;
/// let revenue = &l.columns[1];
/// assert_eq!(revenue.column.as_deref(), Some("revenue"));
/// assert_eq!(revenue.sources.iter().map(|s| format!("{}.{}", s.model, s.column)).collect::<Vec<_>>(), ["raw.orders.cents"]);
/// assert!(l.reads.iter().any(|s| s.model == "raw.customers" && s.column == "id"));
/// Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn column_lineage_in(grammar: Grammar, sql: &str, parents: &BTreeMap<String, Vec<String>>) -> Result<QueryLineage, SqlError> {
    Ok(analyze_in(grammar, sql, parents)?.lineage)
}

/// All that one analysis of a query finds: what [`unknown_columns_in`], [`ambiguous_columns_in`]
/// and [`column_lineage_in`] each return, from one parse and one walk (`check` wants all three).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// The column references no relation of their scope has, sorted by position.
    pub unknown: Vec<ColumnProblem>,
    /// The unqualified references more than one relation of their scope has, sorted by position.
    pub ambiguous: Vec<ColumnProblem>,
    /// The query's column-level lineage.
    pub lineage: QueryLineage,
}

/// Analyses `sql` (in `grammar`) against its parents' declared columns once: see [`Analysis`].
///
/// # Errors
/// As [`unknown_columns`].
pub fn analyze_in(grammar: Grammar, sql: &str, parents: &BTreeMap<String, Vec<String>>) -> Result<Analysis, SqlError> {
    analyze_named(grammar, sql, parents, Naming::default())
}

/// How messages name the relations a query reads. A model's query reads its parents, named
/// "parent `raw.orders` (as `o`)" (the default); an audit's query reads the model it audits and
/// the models it refs, under aliases of the audit's own SQL, which no file the user wrote shows.
#[derive(Debug, Clone, Default)]
pub struct Naming {
    /// The relation the messages call "the model" (an audit's audited model), by its name as
    /// the parents map spells it.
    pub subject: Option<String>,
    /// Whether the other relations are "model `x`" rather than "parent `x`".
    pub models: bool,
    /// Whether the aliases the query gives relations are left out.
    pub no_aliases: bool,
}

impl Naming {
    /// The naming of an audit's messages: `subject` is "the model", the others "model `x`", no
    /// aliases.
    #[must_use]
    pub fn audit(subject: &str) -> Self {
        Naming { subject: Some(subject.to_string()), models: true, no_aliases: true }
    }

    /// How a message names the known relation `name`.
    fn known(&self, name: &str) -> String {
        match &self.subject {
            Some(s) if lower(s) == lower(name) => "the model".to_string(),
            _ => format!("{} `{name}`", if self.models { "model" } else { "parent" }),
        }
    }
}

/// [`analyze_in`] with messages naming the relations as `naming` says.
///
/// # Errors
/// As [`unknown_columns`].
pub fn analyze_named(grammar: Grammar, sql: &str, parents: &BTreeMap<String, Vec<String>>, naming: Naming) -> Result<Analysis, SqlError> {
    let query = parse_in(grammar, sql)?;
    let mut an = Analyzer::new(parents, naming, grammar);
    let out = an.query(&query, None);
    an.reads.add(&out.all_sources());
    let by_position = |mut found: Vec<ColumnProblem>| {
        found.sort_by(|a, b| (a.line, a.col, &a.reference).cmp(&(b.line, b.col, &b.reference)));
        found.dedup();
        found
    };
    let named = |from: &BTreeSet<(String, String)>| -> Vec<SourceColumn> {
        let mut v: Vec<SourceColumn> = from
            .iter()
            .map(|(p, c)| match an.parents.get(p) {
                Some((model, declared)) => {
                    SourceColumn { model: model.clone(), column: declared.iter().find(|d| lower(d) == *c).cloned().unwrap_or_else(|| c.clone()) }
                }
                None => SourceColumn { model: p.clone(), column: c.clone() },
            })
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let columns = out.items.iter().map(|c| ColumnLineage { column: c.name.clone(), sources: named(&c.src.from), certain: !c.src.uncertain }).collect();
    let lineage = QueryLineage {
        columns,
        ordered: !out.unordered,
        complete: !out.more,
        reads: named(&an.reads.from),
        reads_certain: !an.reads.uncertain && !out.more,
        whole: out.star_of.iter().map(|p| an.parents.get(p).map_or_else(|| p.clone(), |(n, _)| n.clone())).collect(),
    };
    Ok(Analysis { unknown: by_position(std::mem::take(&mut an.problems)), ambiguous: by_position(std::mem::take(&mut an.ambiguous)), lineage })
}

/// The single query of `sql` in `grammar`.
fn parse_in(grammar: Grammar, sql: &str) -> Result<Query, SqlError> {
    match grammar {
        Grammar::Embedded => parse(sql),
        Grammar::Postgres => {
            Ok(*canon::parse_query_in(&sqlparser::dialect::PostgreSqlDialect {}, sql).map_err(|e| match super::pg_canon::canonicalize(sql) {
                Err(pg) => pg,
                Ok(_) => e,
            })?)
        }
    }
}

/// The single query of `sql`; on failure, canonicalisation's error (same parser, same message).
fn parse(sql: &str) -> Result<Query, SqlError> {
    let fail = || match canon::canonicalize(sql) {
        Err(e) => e,
        Ok(_) => SqlError::NotAQuery { found: "a statement that is not a query".into() },
    };
    canon::parse_query(sql).map(|q| *q).map_err(|_| fail())
}

/// Names DuckDB resolves without any relation: pseudo-columns and keyword functions. A column of
/// that name of the query's own relations comes first ([`Analyzer::unqualified_source`]).
const PSEUDO_COLUMNS: &[&str] = &[
    "rowid",
    "current_date",
    "current_time",
    "current_timestamp",
    "localtime",
    "localtimestamp",
    "current_user",
    "session_user",
    "user",
    "current_role",
    "current_catalog",
    "current_schema",
];

fn lower(s: &str) -> String {
    s.to_lowercase()
}

/// Where one column's values come from: parents' columns (lower-case parent key, lower-case
/// column), and whether that list is certain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Src {
    from: BTreeSet<(String, String)>,
    /// Something the list cannot name may feed the column too: a relation whose columns are not
    /// known, a reference that does not resolve, `COLUMNS(…)`, a name DuckDB might bind elsewhere.
    uncertain: bool,
}

impl Src {
    fn uncertain() -> Self {
        Src { uncertain: true, ..Src::default() }
    }

    fn add(&mut self, other: &Src) {
        self.from.extend(other.from.iter().cloned());
        self.uncertain |= other.uncertain;
    }
}

/// One output column: its name (`None` where DuckDB generates it from the expression text) and
/// where its values come from.
#[derive(Debug, Clone, Default)]
struct Col {
    name: Option<String>,
    src: Src,
}

impl Col {
    fn named(name: impl Into<String>, src: Src) -> Self {
        Col { name: Some(name.into()), src }
    }

    /// Its name is `name` (lower-case), ignoring case.
    fn is(&self, name: &str) -> bool {
        self.name.as_ref().is_some_and(|n| lower(n) == name)
    }
}

/// The columns of a relation or a query's output.
#[derive(Debug, Clone, Default)]
struct Cols {
    /// Columns in order.
    items: Vec<Col>,
    /// There may be columns beyond `items` (an unknown relation, or `*` over one).
    more: bool,
    /// `items` may not be in DuckDB's order (a `*` over a `USING` join), so positional aliases
    /// cannot be applied.
    unordered: bool,
    /// Parents whose `*` expansion fed these columns (lower-case keys into the parents map).
    star_of: BTreeSet<String>,
}

impl Cols {
    fn open() -> Self {
        Cols { more: true, ..Cols::default() }
    }

    /// A parent's declared columns (`key` lower-case), each its own source.
    fn of_parent(key: &str, names: impl IntoIterator<Item = String>) -> Self {
        let items = names.into_iter().map(|n| Col::named(n.clone(), Src { from: BTreeSet::from([(key.to_string(), lower(&n))]), uncertain: false })).collect();
        Cols { items, star_of: BTreeSet::from([key.to_string()]), ..Cols::default() }
    }

    /// Some column may exist that `items` does not list.
    fn is_open(&self) -> bool {
        self.more || self.items.iter().any(|c| c.name.is_none())
    }

    /// `name` (lower-case) is one of the known names.
    fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The first known column called `name` (lower-case).
    fn get(&self, name: &str) -> Option<&Col> {
        self.items.iter().find(|c| c.is(name))
    }

    fn known_names(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|c| c.name.as_deref())
    }

    /// Every column's sources together (a relation used whole: a row value, `*` in a function).
    fn all_sources(&self) -> Src {
        let mut src = Src { uncertain: self.more, ..Src::default() };
        for c in &self.items {
            src.add(&c.src);
        }
        src
    }

    /// The names `items` repeats (lower-case, ignoring case as DuckDB does), each once, in the
    /// order of their second occurrence.
    fn repeated(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut out: Vec<String> = Vec::new();
        for n in self.known_names().map(lower) {
            if !seen.insert(n.clone()) && !out.contains(&n) {
                out.push(n);
            }
        }
        out
    }

    /// Ends an output: every column of a repeated name may take its values from any column of
    /// that name (a lookup by name finds the first, which DuckDB may not have meant), so each
    /// reads all of their sources and none is certain. The columns stay listed: a top-level
    /// query returns them all (which the schema contract refuses); a relation renames the
    /// repeats ([`Self::into_relation`]).
    fn finish(mut self) -> Self {
        for name in self.repeated() {
            let mut src = Src::uncertain();
            for c in self.items.iter().filter(|c| c.is(&name)) {
                src.add(&c.src);
            }
            for c in self.items.iter_mut().filter(|c| c.is(&name)) {
                c.src = src.clone();
            }
        }
        self
    }

    /// These columns as a relation's (a CTE, a subquery, an aliased join): DuckDB renames a
    /// repeated name there (`x`, `x_1`), so such a relation has columns `items` does not name.
    fn into_relation(self) -> Self {
        let mut cols = self.finish();
        if !cols.repeated().is_empty() {
            cols.more = true;
        }
        cols
    }

    /// Applies a positional column alias list (`AS t(a, b)`, `WITH c(a, b) AS …`).
    fn rename(mut self, aliases: &[TableAliasColumnDef]) -> Self {
        if aliases.is_empty() {
            return self;
        }
        if self.more || self.unordered || aliases.len() > self.items.len() {
            let items = aliases.iter().map(|a| Col::named(a.name.value.clone(), Src::uncertain())).collect();
            return Cols { items, more: true, unordered: true, star_of: self.star_of };
        }
        for (slot, alias) in self.items.iter_mut().zip(aliases) {
            slot.name = Some(alias.name.value.clone());
        }
        self.finish()
    }
}

/// Where a relation in scope comes from, for messages and blame.
#[derive(Debug, Clone)]
enum Origin {
    /// A parent model; its logical name as given.
    Parent(String),
    /// A CTE, by name.
    Cte(String),
    /// A subquery in `FROM` (or a parenthesised join with an alias).
    Subquery,
    /// Anything else: unknown tables, table functions…
    Other,
}

/// A relation in a `FROM` scope.
#[derive(Debug, Clone)]
struct Rel {
    /// Qualifiers that name it, lower-case parts (`[["o"]]`, or `[["raw", "orders"], ["orders"]]`).
    quals: Vec<Vec<String>>,
    /// False when DuckDB gives it a generated name (an unaliased subquery or table function).
    named: bool,
    /// The alias, as written.
    alias: Option<String>,
    cols: Cols,
    origin: Origin,
    /// Columns a `*` does not expand again (the right side of `USING` / `NATURAL`), lower-case.
    star_skip: Vec<String>,
}

impl Rel {
    fn new(quals: Vec<Vec<String>>, named: bool, alias: Option<&TableAlias>, cols: Cols, origin: Origin) -> Self {
        let (quals, named) = match alias {
            Some(a) => (vec![vec![lower(&a.name.value)]], true),
            None => (quals, named),
        };
        Rel { quals, named, alias: alias.map(|a| a.name.value.clone()), cols: cols.into_relation(), origin, star_skip: Vec::new() }
    }

    /// How a message names it: "parent `raw.orders` (as `o`)", "CTE `c`", "subquery `s`", and
    /// for a CTE or subquery over one parent's `*`, which parent.
    fn describe(&self, parents: &BTreeMap<String, (String, Vec<String>)>, naming: &Naming) -> String {
        let mut s = self.name(naming);
        if !matches!(self.origin, Origin::Parent(_))
            && let Some(p) = self.single_star_parent()
        {
            s.push_str(&format!(", which reads `*` from {}", naming.known(parents.get(p).map_or(p, |(n, _)| n.as_str()))));
        }
        s
    }

    /// How a list names it: "parent `raw.orders` (as `o`)", "CTE `c`", "subquery `s`".
    fn name(&self, naming: &Naming) -> String {
        let as_alias = |name: &str| match &self.alias {
            Some(a) if !naming.no_aliases && lower(a) != lower(name) => format!(" (as `{a}`)"),
            _ => String::new(),
        };
        match &self.origin {
            Origin::Parent(p) => format!("{}{}", naming.known(p), as_alias(p)),
            Origin::Cte(c) => format!("CTE `{c}`{}", as_alias(c)),
            Origin::Subquery => match &self.alias {
                Some(a) => format!("subquery `{a}`"),
                None => "an unnamed subquery".into(),
            },
            Origin::Other => match &self.alias {
                Some(a) => format!("`{a}`"),
                None => "a relation".into(),
            },
        }
    }

    fn single_star_parent(&self) -> Option<&str> {
        match (self.cols.star_of.len(), self.cols.star_of.first()) {
            (1, Some(p)) => Some(p),
            _ => None,
        }
    }

    /// The parent a missing column of this relation is blamed on, when certain (lower-case key).
    fn blame(&self) -> Option<String> {
        match &self.origin {
            Origin::Parent(p) => Some(lower(p)),
            _ => self.single_star_parent().map(str::to_string),
        }
    }
}

/// One level of name resolution, innermost first through `up`.
struct Frame<'a> {
    up: Option<&'a Frame<'a>>,
    data: FrameData<'a>,
}

enum FrameData<'a> {
    /// A `FROM` scope and the select-list aliases visible in it.
    Scope { rels: &'a [Rel], aliases: &'a [String] },
    /// CTEs defined by a `WITH` (lower-case name, columns).
    Ctes(&'a [(String, Cols)]),
    /// Lambda parameters around a subquery (lower-case).
    Params(&'a [String]),
}

impl<'a> Frame<'a> {
    fn chain(&'a self) -> impl Iterator<Item = &'a FrameData<'a>> {
        std::iter::successors(Some(self), |f| f.up).map(|f| &f.data)
    }
}

fn scope<'a>(up: Option<&'a Frame<'a>>, rels: &'a [Rel], aliases: &'a [String]) -> Frame<'a> {
    Frame { up, data: FrameData::Scope { rels, aliases } }
}

struct Analyzer {
    /// Lower-case logical name → (name as given, declared columns).
    parents: BTreeMap<String, (String, Vec<String>)>,
    problems: Vec<ColumnProblem>,
    /// Unqualified references that more than one relation of their scope has (a lint, not an
    /// error: [`ambiguous_columns_in`]).
    ambiguous: Vec<ColumnProblem>,
    /// The sources of the select items being resolved, innermost last: every resolved reference
    /// is added to the top one.
    sinks: Vec<Src>,
    /// Every parent column the query reads anywhere (select lists, filters, joins, groupings…).
    reads: Src,
    /// Per `SELECT` being resolved (keyed by its alias list's address): the sources of the
    /// select-list aliases resolved so far, for references to them (lower-case names).
    alias_srcs: Vec<(usize, Vec<(String, Src)>)>,
    /// The named windows (`WINDOW w AS (…)`) of each `SELECT` being resolved, innermost last:
    /// a window function's `OVER w` reads its definition like an inline `OVER (…)`.
    windows: Vec<Vec<NamedWindowDefinition>>,
    /// How messages name the relations.
    naming: Naming,
    /// Whether `x.f(…)` may be DuckDB's dot call `f(x, …)` ([`Analyzer::receiver_source`]);
    /// in Postgres's grammar it is only a function `f` of a schema `x`.
    dot_calls: bool,
    /// The grammar the query is read in: DuckDB's and Postgres's bind some names differently
    /// ([`Analyzer::source_of`], [`Analyzer::unqualified_source`]).
    grammar: Grammar,
}

impl Analyzer {
    fn new(parents: &BTreeMap<String, Vec<String>>, naming: Naming, grammar: Grammar) -> Self {
        Analyzer {
            naming,
            dot_calls: grammar == Grammar::Embedded,
            grammar,
            parents: parents.iter().map(|(name, cols)| (lower(name), (name.clone(), cols.clone()))).collect(),
            problems: Vec::new(),
            ambiguous: Vec::new(),
            sinks: Vec::new(),
            reads: Src::default(),
            alias_srcs: Vec::new(),
            windows: Vec::new(),
        }
    }

    /// Resolves a query; returns its output columns.
    fn query(&mut self, q: &Query, up: Option<&Frame<'_>>) -> Cols {
        let mut ctes: Vec<(String, Cols)> = Vec::new();
        if let Some(with) = &q.with {
            for cte in &with.cte_tables {
                let name = lower(&cte.alias.name.value);
                if with.recursive {
                    // The recursive reference reads the CTE itself: unknown until resolved.
                    let placeholder = Cols::open().rename(&cte.alias.columns);
                    ctes.push((name.clone(), placeholder));
                }
                let cols = {
                    let frame = Frame { up, data: FrameData::Ctes(&ctes) };
                    self.query(&cte.query, Some(&frame)).rename(&cte.alias.columns)
                };
                if with.recursive {
                    ctes.pop();
                }
                ctes.push((name, cols));
            }
        }
        let frame = Frame { up, data: FrameData::Ctes(&ctes) };
        let up = Some(&frame);
        let cols = match q.body.as_ref() {
            SetExpr::Select(s) => self.select(s, up, Some(q)),
            body => {
                let cols = self.set_expr(body, up);
                // ORDER BY / LIMIT of a set operation see its output columns (left open: which
                // branch's names DuckDB accepts there is not worth a false positive).
                let rels = [Rel::new(Vec::new(), false, None, Cols { more: true, ..cols.clone() }, Origin::Subquery)];
                let f = scope(up, &rels, &[]);
                self.walk_read(&q.order_by, &f);
                self.walk_read(&q.limit_clause, &f);
                self.walk_read(&q.fetch, &f);
                cols
            }
        };
        if q.pipe_operators.is_empty() { cols } else { Cols::open() }
    }

    fn set_expr(&mut self, body: &SetExpr, up: Option<&Frame<'_>>) -> Cols {
        match body {
            SetExpr::Select(s) => self.select(s, up, None),
            SetExpr::Query(q) => self.query(q, up),
            SetExpr::SetOperation { left, right, op, set_quantifier } => {
                let l = self.set_expr(left, up);
                let r = self.set_expr(right, up);
                // `UNION` (distinct), `EXCEPT` and `INTERSECT` compare whole rows: every column of
                // both branches decides which rows come out, whether or not it reaches the output.
                if !(*op == SetOperator::Union && matches!(set_quantifier, SetQuantifier::All | SetQuantifier::AllByName)) {
                    self.reads.add(&l.all_sources());
                    self.reads.add(&r.all_sources());
                }
                let mut out = if matches!(set_quantifier, SetQuantifier::ByName | SetQuantifier::AllByName | SetQuantifier::DistinctByName) {
                    // Matching by name a branch that repeats one is not followed.
                    let mut out = Cols { more: l.more || !l.repeated().is_empty() || !r.repeated().is_empty(), ..l.clone() };
                    for c in &r.items {
                        match c.name.as_ref().map(|n| lower(n)) {
                            Some(n) if out.has(&n) => {
                                if let Some(slot) = out.items.iter_mut().find(|o| o.name.as_ref().is_some_and(|o| lower(o) == n)) {
                                    slot.src.add(&c.src);
                                }
                            }
                            _ => out.items.push(c.clone()),
                        }
                    }
                    out.more |= r.more;
                    out.unordered = true;
                    out
                } else {
                    // Positional: each output column reads both branches' columns at its place.
                    let mut out = l;
                    for (slot, c) in out.items.iter_mut().zip(&r.items) {
                        slot.src.add(&c.src);
                    }
                    out.more |= r.more;
                    out
                };
                out.star_of.extend(r.star_of);
                out
            }
            SetExpr::Values(v) => {
                let up = up.map_or_else(|| scope(None, &[], &[]), |u| scope(Some(u), &[], &[]));
                self.walk(&v.rows, &up);
                // DuckDB names them `col0`, `col1`…: known count, generated names.
                let width = v.rows.first().map_or(0, |r| r.content.len());
                Cols { items: vec![Col::default(); width], ..Cols::default() }
            }
            _ => Cols::open(),
        }
    }

    /// Resolves a `SELECT` (and, for the body of `tail`, its `ORDER BY` and `LIMIT`); returns
    /// its output columns.
    fn select(&mut self, s: &Select, up: Option<&Frame<'_>>, tail: Option<&Query>) -> Cols {
        self.windows.push(s.named_window.clone());
        let rels = self.scope_of_from(&s.from, up);
        let aliases: Vec<String> = s
            .projection
            .iter()
            .flat_map(|item| match item {
                SelectItem::ExprWithAlias { alias, .. } => vec![alias.value.clone()],
                SelectItem::ExprWithAliases { aliases, .. } => aliases.iter().map(|a| a.value.clone()).collect(),
                _ => Vec::new(),
            })
            .collect();
        let frame = scope(up, &rels, &aliases);
        let alias_key = aliases.as_ptr() as usize;
        self.alias_srcs.push((alias_key, Vec::new()));
        let mut out = Cols::default();
        if s.projection.is_empty() || s.flavor == SelectFlavor::FromFirstNoSelect {
            out = star(&rels);
        }
        for item in &s.projection {
            match item {
                SelectItem::UnnamedExpr(e) => {
                    let src = self.sourced(e, &frame);
                    out.items.push(Col { name: output_name(e, &rels), src });
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    let src = self.sourced(expr, &frame);
                    self.note_alias(alias_key, &alias.value, &src);
                    out.items.push(Col::named(alias.value.clone(), src));
                }
                SelectItem::ExprWithAliases { expr, aliases } => {
                    let src = self.sourced(expr, &frame);
                    for a in aliases {
                        self.note_alias(alias_key, &a.value, &src);
                    }
                    out.items.extend(aliases.iter().map(|a| Col::named(a.value.clone(), src.clone())));
                }
                SelectItem::Wildcard(opts) => {
                    let (cols, of) = star_owned(&rels);
                    let merged = rels.iter().flat_map(|r| r.star_skip.iter().cloned()).collect();
                    let cols = self.wildcard(cols, Some(Owners { rels: &rels, of, merged }), opts, &frame);
                    append(&mut out, cols);
                }
                SelectItem::QualifiedWildcard(kind, opts) => {
                    let (base, owners) = match kind {
                        SelectItemQualifiedWildcardKind::ObjectName(name) => {
                            let q: Vec<String> = name_parts(name).iter().map(|p| lower(p)).collect();
                            // `t.*` expands all of `t`, `USING` columns included.
                            match rels.iter().position(|r| r.quals.contains(&q)) {
                                Some(i) => {
                                    let cols = rels[i].cols.clone();
                                    let of = vec![i; cols.items.len()];
                                    (cols, Some(Owners { rels: &rels, of, merged: Vec::new() }))
                                }
                                None => (Cols::open(), None),
                            }
                        }
                        SelectItemQualifiedWildcardKind::Expr(e) => {
                            self.walk(e, &frame);
                            (Cols::open(), None)
                        }
                    };
                    let cols = self.wildcard(base, owners, opts, &frame);
                    append(&mut out, cols);
                }
            }
        }
        // The clauses below decide which rows come out, and in which order: read, but no
        // column's source (also when this `SELECT` is a subquery inside a select item).
        if let Some(Distinct::On(exprs)) = &s.distinct {
            self.walk_read(exprs, &frame);
        }
        self.walk_read(&s.prewhere, &frame);
        self.walk_read(&s.selection, &frame);
        if let GroupByExpr::Expressions(exprs, _) = &s.group_by {
            self.walk_read(exprs, &frame);
        }
        self.walk_read(&s.cluster_by, &frame);
        self.walk_read(&s.distribute_by, &frame);
        self.walk_read(&s.sort_by, &frame);
        self.walk_read(&s.having, &frame);
        // Named windows are checked here, used or not; a window function that uses one reads
        // its definition as a source where it is called (`Walker::window`).
        for window in &s.named_window {
            if let NamedWindowExpr::WindowSpec(spec) = &window.1 {
                self.walk_read(spec, &frame);
            }
        }
        self.walk_read(&s.qualify, &frame);
        if let Some(q) = tail {
            self.walk_read(&q.order_by, &frame);
            self.walk_read(&q.limit_clause, &frame);
            self.walk_read(&q.fetch, &frame);
        }
        if !s.lateral_views.is_empty() || !s.connect_by.is_empty() {
            out.more = true;
        }
        // `DISTINCT`, `GROUP BY ALL` and `ORDER BY ALL` (with a `LIMIT`, which rows) depend on
        // every output column: a `*` expansion is then read whole even where an outer query
        // keeps only some of its columns (explicit items are read already).
        let order_by_all = tail.and_then(|q| q.order_by.as_ref()).is_some_and(|o| matches!(o.kind, OrderByKind::All(_)));
        if s.distinct.is_some() || matches!(s.group_by, GroupByExpr::All(_)) || order_by_all {
            self.reads.add(&out.all_sources());
        }
        self.alias_srcs.pop();
        self.windows.pop();
        out.finish()
    }

    /// Applies `* EXCLUDE / EXCEPT / RENAME / REPLACE` to an expansion; `owners` says which
    /// relation each of its columns comes from, when known.
    fn wildcard(&mut self, mut cols: Cols, owners: Option<Owners<'_>>, opts: &WildcardAdditionalOptions, frame: &Frame<'_>) -> Cols {
        let mut drop: Vec<String> = Vec::new();
        let mut dropped = vec![false; cols.items.len()];
        let excluded: Vec<&ObjectName> = match &opts.opt_exclude {
            Some(ExcludeSelectItem::Single(n)) => vec![n],
            Some(ExcludeSelectItem::Multiple(ns)) => ns.iter().collect(),
            None => Vec::new(),
        };
        for n in excluded {
            let parts: Vec<String> = name_parts(n).iter().map(|p| lower(p)).collect();
            let Some((col, qual)) = parts.split_last() else { continue };
            if qual.is_empty() {
                drop.push(col.clone());
                continue;
            }
            // `EXCLUDE (c.k)` drops `c`'s `k` and keeps another relation's `k`.
            match owners.as_ref().and_then(|o| o.item(qual, col, &cols)) {
                Some(j) => dropped[j] = true,
                None => {
                    // Which `k` it drops is not followed (a qualifier that names no relation
                    // of the scope, a `USING` key…): any column `k` may be the other's, or
                    // gone, so none is certain and the output is not either.
                    cols.more = true;
                    for c in cols.items.iter_mut().filter(|c| c.is(col)) {
                        c.src.uncertain = true;
                    }
                }
            }
        }
        if let Some(ExceptSelectItem { first_element, additional_elements }) = &opts.opt_except {
            drop.push(lower(&first_element.value));
            drop.extend(additional_elements.iter().map(|i| lower(&i.value)));
        }
        let mut at = 0;
        cols.items.retain(|c| {
            let keep = !dropped.get(at).copied().unwrap_or(false) && c.name.as_ref().is_none_or(|n| !drop.contains(&lower(n)));
            at += 1;
            keep
        });
        let renames: Vec<(String, String)> = match &opts.opt_rename {
            Some(RenameSelectItem::Single(r)) => vec![(lower(&r.ident.value), r.alias.value.clone())],
            Some(RenameSelectItem::Multiple(rs)) => rs.iter().map(|r| (lower(&r.ident.value), r.alias.value.clone())).collect(),
            None => Vec::new(),
        };
        for n in cols.items.iter_mut().filter_map(|c| c.name.as_mut()) {
            if let Some((_, to)) = renames.iter().find(|(from, _)| *from == lower(n)) {
                *n = to.clone();
            }
        }
        if let Some(replace) = &opts.opt_replace {
            for item in &replace.items {
                let src = self.sourced(&item.expr, frame);
                let name = lower(&item.column_name.value);
                // DuckDB replaces the first column of that name and drops any other (`*` over a
                // join whose sides both have it returns it once).
                let mut replaced = false;
                cols.items.retain_mut(|c| {
                    if !c.is(&name) {
                        true
                    } else if replaced {
                        false
                    } else {
                        c.src = src.clone();
                        replaced = true;
                        true
                    }
                });
                if !replaced {
                    cols.more = true;
                }
            }
        }
        cols
    }

    /// The relations of a `FROM` clause, resolving join conditions and lateral items on the way.
    fn scope_of_from(&mut self, from: &[TableWithJoins], up: Option<&Frame<'_>>) -> Vec<Rel> {
        let mut rels: Vec<Rel> = Vec::new();
        for twj in from {
            let start = rels.len();
            let new = self.factor(&twj.relation, &rels, up);
            rels.extend(new);
            for join in &twj.joins {
                let left_end = rels.len();
                let new = self.factor(&join.relation, &rels, up);
                rels.extend(new);
                let constraint = super::sight::constraint(&join.join_operator);
                let condition = if let JoinOperator::AsOf { match_condition, .. } = &join.join_operator { Some(match_condition) } else { None };
                {
                    let frame = scope(up, &rels, &[]);
                    if let Some(c) = condition {
                        self.walk_read(c, &frame);
                    }
                    if let Some(JoinConstraint::On(e)) = constraint {
                        self.walk_read(e, &frame);
                    }
                }
                let skip: Vec<String> = match constraint {
                    Some(JoinConstraint::Using(names) | JoinConstraint::UsingAlias(names, _)) => {
                        let mut skip = Vec::new();
                        for name in names {
                            if let Some(ObjectNamePart::Identifier(id)) = name.0.last() {
                                self.using_column(id, &rels[start..left_end], &rels[left_end..]);
                                skip.push(lower(&id.value));
                            }
                        }
                        skip
                    }
                    Some(JoinConstraint::Natural) => {
                        let left = star(&rels[start..left_end]);
                        let right = star(&rels[left_end..]);
                        let keys: Vec<String> = right.known_names().filter(|n| left.has(&lower(n))).map(lower).collect();
                        // The shared names are the join keys: read on both sides. A side whose
                        // columns are not all known may share more: the reads are then uncertain.
                        for k in &keys {
                            for side in [&left, &right] {
                                if let Some(c) = side.get(k) {
                                    self.reads.add(&c.src);
                                }
                            }
                        }
                        if left.is_open() || right.is_open() {
                            self.reads.uncertain = true;
                        }
                        keys
                    }
                    _ => Vec::new(),
                };
                // A semi or anti join returns the left side's columns only: `*` expands none of
                // the right side's (which stay in scope for the `ON` condition). A right semi or
                // anti join (the right side's only) is not followed: its output is not certain.
                let semi = matches!(join.join_operator, JoinOperator::Semi(_) | JoinOperator::LeftSemi(_) | JoinOperator::Anti(_) | JoinOperator::LeftAnti(_));
                let right_only = matches!(join.join_operator, JoinOperator::RightSemi(_) | JoinOperator::RightAnti(_));
                for r in &mut rels[left_end..] {
                    r.star_skip.extend(skip.iter().cloned());
                    if semi {
                        let names: Vec<String> = r.cols.items.iter().filter_map(|c| c.name.as_deref().map(lower)).collect();
                        r.star_skip.extend(names);
                    }
                    if right_only {
                        r.cols.more = true;
                    }
                }
            }
        }
        rels
    }

    /// Reports a `USING` column missing from a side whose columns are fully known.
    fn using_column(&mut self, id: &Ident, left: &[Rel], right: &[Rel]) {
        let col = lower(&id.value);
        // A `USING` key is read on both sides (it decides which rows match).
        for side in [left, right] {
            match side.iter().find_map(|r| r.cols.get(&col)) {
                Some(c) => self.reads.add(&c.src),
                None if side.iter().any(|r| r.cols.is_open()) => self.reads.uncertain = true,
                None => {}
            }
        }
        for side in [left, right] {
            if side.is_empty() || side.iter().any(|r| r.cols.is_open() || r.cols.has(&col)) {
                continue;
            }
            let what = match side {
                [one] => one.describe(&self.parents, &self.naming),
                many => many.iter().map(|r| r.name(&self.naming)).collect::<Vec<_>>().join(", "),
            };
            let relation = match side {
                [one] => one.blame(),
                _ => None,
            };
            let suggestion = suggest(&id.value, side.iter().flat_map(|r| r.cols.known_names()));
            let detail = match side {
                [one] if matches!(one.origin, Origin::Parent(_)) => format!("column `{}` in `USING` is not declared by {what}", id.value),
                _ => format!("column `{}` in `USING` is not a column of {what}", id.value),
            };
            self.push(id, &id.value, &id.value, relation, detail, suggestion);
        }
    }

    /// The relations one `FROM` item brings into scope. `left` are the items before it, which
    /// DuckDB lets subqueries and table functions see (implicit `LATERAL`).
    fn factor(&mut self, f: &TableFactor, left: &[Rel], up: Option<&Frame<'_>>) -> Vec<Rel> {
        let lateral = scope(up, left, &[]);
        let rel = match f {
            TableFactor::Table { name, alias, args, .. } => {
                let parts = name_parts(name);
                let lowered: Vec<String> = parts.iter().map(|p| lower(p)).collect();
                if let Some(args) = args {
                    self.walk(&args.args, &lateral);
                    Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
                } else if parts.len() != name.0.len() {
                    Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
                } else if let Some(cols) = (lowered.len() == 1).then(|| cte_lookup(up, &lowered[0])).flatten() {
                    let rel = Rel::new(vec![lowered.clone()], true, alias.as_ref(), cols.clone(), Origin::Cte(parts[0].clone()));
                    renamed(rel, alias.as_ref())
                } else if let Some((display, declared)) = self.parents.get(&lowered.join(".")) {
                    let cols = Cols::of_parent(&lowered.join("."), declared.iter().cloned());
                    let quals = (0..lowered.len()).map(|i| lowered[i..].to_vec()).collect();
                    renamed(Rel::new(quals, true, alias.as_ref(), cols, Origin::Parent(display.clone())), alias.as_ref())
                } else {
                    // Unknown: anything goes, but it still has a name.
                    let quals = (0..lowered.len()).map(|i| lowered[i..].to_vec()).collect();
                    Rel::new(quals, true, alias.as_ref(), Cols::open(), Origin::Other)
                }
            }
            TableFactor::Derived { subquery, alias, .. } => {
                let cols = self.query(subquery, Some(&lateral));
                renamed(Rel::new(Vec::new(), false, alias.as_ref(), cols, Origin::Subquery), alias.as_ref())
            }
            TableFactor::TableFunction { expr, alias } => {
                self.walk(expr, &lateral);
                Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
            }
            TableFactor::Function { args, alias, .. } => {
                self.walk(args, &lateral);
                Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
            }
            TableFactor::UNNEST { alias, array_exprs, .. } => {
                self.walk(array_exprs, &lateral);
                Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
            }
            TableFactor::NestedJoin { table_with_joins, alias } => {
                let inner = self.scope_of_from(std::slice::from_ref(table_with_joins.as_ref()), Some(&lateral));
                match alias {
                    None => return inner,
                    Some(a) => renamed(Rel::new(Vec::new(), true, Some(a), star(&inner), Origin::Subquery), Some(a)),
                }
            }
            // A `PIVOT` groups by every column it does not name, an `UNPIVOT` drops the rows whose
            // value is NULL: every column of the relation turned decides which rows come out
            // (`SELECT count(*) FROM p PIVOT (…)` reads all of `p`). Its own expressions are not
            // resolved (the names of an `IN` list are values, not columns); a subquery among them
            // leaves the reads uncertain. Its output is open.
            TableFactor::Pivot { table, aggregate_functions, value_column, value_source, default_on_null, alias } => {
                for rel in self.factor(table, left, up) {
                    self.reads.add(&rel.cols.all_sources());
                }
                if holds_query(aggregate_functions) || holds_query(value_column) || holds_query(value_source) || holds_query(default_on_null) {
                    self.reads.uncertain = true;
                }
                Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
            }
            TableFactor::Unpivot { table, value, columns, alias, .. } => {
                for rel in self.factor(table, left, up) {
                    self.reads.add(&rel.cols.all_sources());
                }
                if holds_query(value) || holds_query(columns) {
                    self.reads.uncertain = true;
                }
                Rel::new(Vec::new(), false, alias.as_ref(), Cols::open(), Origin::Other)
            }
            // JSON_TABLE, MATCH_RECOGNIZE…: not resolved, open, and what they read is not known.
            other => {
                self.reads.uncertain = true;
                Rel::new(Vec::new(), false, table_factor_alias(other), Cols::open(), Origin::Other)
            }
        };
        vec![rel]
    }

    /// Resolves every column reference inside `node` (an expression or any AST part holding
    /// expressions) in `frame`.
    fn walk<V: Visit + ?Sized>(&mut self, node: &V, frame: &Frame<'_>) {
        let mut walker = Walker { an: self, frame, params: Vec::new(), skip: None, ignore: HashSet::new() };
        let _ = node.visit(&mut walker);
    }

    /// Checks one reference (`parts` as written) against `frame`; `params` are the lambda
    /// parameters around it.
    fn reference(&mut self, parts: &[&Ident], frame: &Frame<'_>, params: &[Vec<String>]) {
        let lowered: Vec<String> = parts.iter().map(|p| lower(&p.value)).collect();
        let src = self.source_of(&lowered, frame, params);
        self.record(&src);
        let head = lowered[0].as_str();
        if params.iter().flatten().any(|p| p == head) {
            return;
        }
        if lowered.len() == 1 {
            self.note_ambiguity(parts[0], head, frame);
        }
        // Qualified readings: `q.col…` where `q` names a relation (innermost scope first).
        let mut failure: Option<(&Rel, usize)> = None;
        let mut unnamed = false;
        if lowered.len() > 1 {
            for data in frame.chain() {
                let FrameData::Scope { rels, .. } = data else { continue };
                for rel in rels.iter() {
                    unnamed |= !rel.named;
                    for q in &rel.quals {
                        // `q.col…`, or `catalog.schema.table.col…` for a `schema.table` name.
                        let offset = if lowered.starts_with(q) {
                            0
                        } else if q.len() == 2 && lowered.len() > 1 && lowered[1..].starts_with(q) {
                            1
                        } else {
                            continue;
                        };
                        // The whole reference names the relation: a row value.
                        let Some(col) = lowered.get(offset + q.len()) else { return };
                        // A parent read without an alias has no such name when the query runs:
                        // a ref renders as a physical relation (or a subquery), never as
                        // `schema.table`, so `table.col` would not bind in DuckDB.
                        if let (Origin::Parent(p), None) = (&rel.origin, &rel.alias) {
                            let p = p.clone();
                            let detail = format!(
                                "`{}` qualifies parent `{p}` by its name, which does not exist when the query runs (a ref becomes a physical relation); alias the ref (`… AS t`) and write `t.{col}`",
                                dotted(parts)
                            );
                            self.push(parts[0], &dotted(parts), &dotted(parts), Some(lower(&p)), detail, None);
                            if let Some(last) = self.problems.last_mut() {
                                last.by_name = true;
                            }
                            return;
                        }
                        if rel.cols.is_open() || rel.cols.has(col) || col == "rowid" {
                            return;
                        }
                        if failure.is_none() {
                            failure = Some((rel, offset + q.len()));
                        }
                    }
                }
            }
        }
        // The unqualified reading: `head` is a column (any further parts are struct fields).
        // Once the qualifier named a relation with known columns, only a known column `head`
        // (a struct) still saves the reference: an open relation elsewhere does not.
        if self.unqualified_ok(head, frame, lowered.len() == 1, failure.is_none()) {
            return;
        }
        if let Some((rel, k)) = failure {
            let id = parts[k];
            let detail = missing_in(&id.value, rel, &self.parents, &self.naming);
            let suggestion = suggest(&id.value, rel.cols.known_names());
            self.push(parts[0], &id.value, &dotted(parts), rel.blame(), detail, suggestion);
            return;
        }
        if unnamed {
            // `unnamed_subquery.x`, `range.range`…: generated relation names are not tracked.
            return;
        }
        let innermost = frame.chain().find_map(|d| match d {
            FrameData::Scope { rels, aliases } => Some((*rels, *aliases)),
            _ => None,
        });
        let (rels, aliases) = innermost.unwrap_or((&[], &[]));
        if parts.len() > 1 {
            let quals = rels.iter().flat_map(|r| r.quals.iter().filter(|q| q.len() == 1).map(|q| q[0].as_str()));
            let suggestion = suggest(head, quals);
            let detail = format!("cannot resolve `{}`: no relation or column `{}` is in scope", dotted(parts), parts[0].value);
            self.push(parts[0], &dotted(parts), &dotted(parts), None, detail, suggestion);
            return;
        }
        let name = &parts[0].value;
        let candidates = rels.iter().flat_map(|r| r.cols.known_names()).chain(aliases.iter().map(String::as_str));
        let suggestion = suggest(name, candidates);
        let (detail, relation) = match rels {
            [] => (format!("column `{name}` cannot be resolved: the query reads no relation"), None),
            [one] => (missing_in(name, one, &self.parents, &self.naming), one.blame()),
            many => {
                let list = many.iter().map(|r| r.name(&self.naming)).collect::<Vec<_>>().join(", ");
                let blamed: BTreeSet<String> = many.iter().filter_map(Rel::blame).collect();
                let relation = if blamed.len() == 1 {
                    blamed.into_iter().next()
                } else {
                    suggestion.as_ref().and_then(|s| many.iter().find(|r| r.cols.has(&lower(s)))).and_then(Rel::blame)
                };
                (format!("column `{name}` is not a column of any relation in scope: {list}"), relation)
            }
        };
        self.push(parts[0], name, name, relation, detail, suggestion);
    }

    /// Records an unqualified `name` (lower-case) that several relations of the scope it
    /// resolves in declare: not the two sides of `USING`/`NATURAL` (merged), not a select-list
    /// alias, not a lambda parameter.
    fn note_ambiguity(&mut self, at: &Ident, name: &str, frame: &Frame<'_>) {
        if PSEUDO_COLUMNS.contains(&name) {
            return;
        }
        for data in frame.chain() {
            match data {
                FrameData::Params(ps) if ps.iter().any(|p| p == name) => return,
                FrameData::Scope { rels, aliases } => {
                    if aliases.iter().any(|a| lower(a) == name) {
                        return;
                    }
                    let holders: Vec<&Rel> = rels.iter().filter(|r| r.cols.has(name) && !r.star_skip.iter().any(|k| k == name)).collect();
                    if holders.len() > 1 {
                        let list = holders.iter().map(|r| r.name(&self.naming)).collect::<Vec<_>>().join(" and ");
                        let pos = at.span.start;
                        self.ambiguous.push(ColumnProblem {
                            column: at.value.clone(),
                            reference: at.value.clone(),
                            relation: None,
                            detail: format!("column `{}` is ambiguous: {list} all have it; qualify it (`alias.{}`)", at.value, at.value),
                            suggestion: None,
                            line: (pos.line > 0).then_some(pos.line),
                            col: (pos.column > 0).then_some(pos.column),
                            by_name: false,
                        });
                    }
                    if rels.iter().any(|r| r.cols.has(name) || r.cols.is_open()) {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// True when `name` (lower-case) may be a column, alias, parameter or (with `row_value`) a
    /// relation used as a row, in some scope of `frame`. With `open_counts`, a relation whose
    /// columns are not fully known may hold it too.
    fn unqualified_ok(&self, name: &str, frame: &Frame<'_>, row_value: bool, open_counts: bool) -> bool {
        if PSEUDO_COLUMNS.contains(&name) {
            return true;
        }
        frame.chain().any(|data| match data {
            FrameData::Params(ps) => ps.iter().any(|p| p == name),
            FrameData::Scope { rels, aliases } => {
                aliases.iter().any(|a| lower(a) == name)
                    || rels.iter().any(|r| {
                        (open_counts && r.cols.is_open())
                            || r.cols.has(name)
                            || (row_value && r.quals.iter().any(|q| q.len() == 1 && q[0] == name))
                            || (!r.named && name.starts_with("unnamed_subquery"))
                    })
            }
            FrameData::Ctes(_) => false,
        })
    }

    /// Resolves the references of one expression (a select item) and returns its sources.
    fn sourced<V: Visit + ?Sized>(&mut self, node: &V, frame: &Frame<'_>) -> Src {
        self.sinks.push(Src::default());
        self.walk(node, frame);
        self.sinks.pop().unwrap_or_default()
    }

    /// Resolves the references of a clause that decides which rows a query returns or in which
    /// order (a filter, a join condition, a grouping, an ordering, a limit): they are read, but
    /// they are no column's source, not even of the select item a subquery is part of
    /// (`(SELECT max(u.b) FROM u WHERE u.id = t.id) AS mb` takes its values from `u.b` only).
    fn walk_read<V: Visit + ?Sized>(&mut self, node: &V, frame: &Frame<'_>) {
        let _ = self.sourced(node, frame);
    }

    /// The window specifications the window named `name` stands for in the innermost `SELECT`
    /// being resolved: its definition and those of the windows it builds on (`WINDOW w2 AS (w
    /// ORDER BY b)`, `WINDOW w2 AS w`), innermost first, and whether every window of that chain
    /// is defined there (if not, the engine refuses the query).
    fn named_window(&self, name: &Ident) -> (Vec<WindowSpec>, bool) {
        let mut specs = Vec::new();
        let Some(defs) = self.windows.last() else { return (specs, false) };
        let mut wanted = lower(&name.value);
        // A chain takes each definition at most once: one still wanted after as many steps as
        // there are definitions is a cycle (refused by the engine too).
        for _ in 0..defs.len() {
            let Some(NamedWindowDefinition(_, expr)) = defs.iter().find(|d| lower(&d.0.value) == wanted) else { return (specs, false) };
            match expr {
                NamedWindowExpr::NamedWindow(base) => wanted = lower(&base.value),
                NamedWindowExpr::WindowSpec(spec) => {
                    specs.push(spec.clone());
                    match &spec.window_name {
                        Some(base) => wanted = lower(&base.value),
                        None => return (specs, true),
                    }
                }
            }
        }
        (specs, false)
    }

    /// Adds `src` to the select item being resolved and to the query's reads.
    fn record(&mut self, src: &Src) {
        if let Some(top) = self.sinks.last_mut() {
            top.add(src);
        }
        self.reads.add(src);
    }

    fn note_alias(&mut self, key: usize, alias: &str, src: &Src) {
        if let Some((k, list)) = self.alias_srcs.last_mut()
            && *k == key
        {
            list.push((lower(alias), src.clone()));
        }
    }

    /// Where a reference (lower-case parts as written) takes its values from.
    ///
    /// A dotted one `z.k` is read scope by scope from the innermost in DuckDB's grammar: a
    /// relation `z` of the scope, else a column `z` of one of its relations (a struct, `k` its
    /// field) or a select-list alias `z`, before any outer scope. DuckDB binds `z.k` in a
    /// correlated subquery to its own relation's struct column `z` before the outer query's
    /// relation `z`. In Postgres's grammar a relation `z` of any scope comes first (a composite
    /// column's field is written `(z).k`).
    fn source_of(&self, lowered: &[String], frame: &Frame<'_>, params: &[Vec<String>]) -> Src {
        let head = lowered[0].as_str();
        if params.iter().flatten().any(|p| p == head) {
            return Src::default();
        }
        if lowered.len() == 1 {
            return self.unqualified_source(head, frame, true).unwrap_or_else(Src::uncertain);
        }
        if self.grammar == Grammar::Postgres {
            for data in frame.chain() {
                if let FrameData::Scope { rels, .. } = data
                    && let Some(src) = self.qualified_in(lowered, rels, frame)
                {
                    return src;
                }
            }
            return self.unqualified_source(head, frame, false).unwrap_or_else(Src::uncertain);
        }
        for data in frame.chain() {
            match data {
                FrameData::Params(ps) if ps.iter().any(|p| p == head) => return Src::default(),
                FrameData::Scope { rels, aliases } => {
                    if let Some(src) = self.qualified_in(lowered, rels, frame) {
                        return src;
                    }
                    if let Some(src) = self.in_scope(head, rels, aliases, false) {
                        return src;
                    }
                }
                FrameData::Params(_) | FrameData::Ctes(_) => {}
            }
        }
        Src::uncertain()
    }

    /// Where the dotted reference `lowered` (lower case, two parts or more) takes its values from
    /// when its first parts name a relation of `rels` (`q.col…`, or `catalog.schema.table.col…`
    /// for a `schema.table` name): that relation's column (the whole row when nothing follows the
    /// name). Uncertain when the relation lists no such column (it may have one it does not
    /// list, or the first part may be a struct column of another relation). `None` when no
    /// relation of `rels` is named so.
    fn qualified_in(&self, lowered: &[String], rels: &[Rel], frame: &Frame<'_>) -> Option<Src> {
        for rel in rels {
            for q in &rel.quals {
                let offset = if lowered.starts_with(q) {
                    0
                } else if q.len() == 2 && lowered[1..].starts_with(q) {
                    1
                } else {
                    continue;
                };
                let Some(col) = lowered.get(offset + q.len()) else { return Some(rel.cols.all_sources()) };
                if let Some(c) = rel.cols.get(col) {
                    return Some(c.src.clone());
                }
                let mut src = Src::uncertain();
                if let Some(other) = self.unqualified_source(&lowered[0], frame, false) {
                    src.add(&other);
                }
                return Some(src);
            }
        }
        None
    }

    /// Where the receiver of a call whose name is qualified takes its values from: `lowered`
    /// (lower-case) are the name parts before the function's. sqlparser reads DuckDB's dot call
    /// `d.abs()` (`abs(d)`) as a call of a function `abs` in a schema `d`; DuckDB looks for such
    /// a function first and, finding none, binds `d` as a column reference (`p.v.abs()`: a
    /// relation's column or a struct's field), a select-list alias or a lambda parameter. So the
    /// receiver is read as that reference wherever it may be one (uncertain where the scope holds
    /// a relation whose columns are not known), and is no read only when nothing in scope can be
    /// it: then the call is a schema's function (`main.f(x)`, a macro in a schema), or the
    /// engine refuses the query. Never a problem of [`unknown_columns`]: a schema's name is fine.
    fn receiver_source(&self, lowered: &[String], frame: &Frame<'_>, params: &[Vec<String>]) -> Option<Src> {
        let head = lowered.first()?;
        if params.iter().flatten().any(|p| p == head) {
            return Some(Src::default());
        }
        // `q.col` where `q` names a relation (`schema.table.col` for a `schema.table` name).
        let qualified = lowered.len() > 1
            && frame.chain().any(|data| match data {
                FrameData::Scope { rels, .. } => {
                    rels.iter().any(|r| r.quals.iter().any(|q| lowered.starts_with(q) || (q.len() == 2 && lowered[1..].starts_with(q))))
                }
                _ => false,
            });
        if qualified {
            return Some(self.source_of(lowered, frame, params));
        }
        // A column (any further parts are struct fields), an alias, a relation used as a row.
        self.unqualified_source(head, frame, lowered.len() == 1)
    }

    /// Where an unqualified name takes its values from, innermost scope first: a column of a
    /// relation in scope, a select-list alias, a lambda parameter, a relation used as a row.
    /// `None` when nothing in scope can be it.
    ///
    /// A pseudo-column's or keyword function's name ([`PSEUDO_COLUMNS`]: `rowid`,
    /// `current_date`, `user`…) reads nothing unless a relation has a column of that name: in
    /// DuckDB's grammar one of the innermost scope (or its select-list alias; DuckDB binds
    /// `current_date` to them, and to the function otherwise, never to an outer query's column);
    /// in Postgres's, where such a name reaching here was quoted, one of any scope.
    fn unqualified_source(&self, name: &str, frame: &Frame<'_>, row_value: bool) -> Option<Src> {
        let pseudo = PSEUDO_COLUMNS.contains(&name);
        for data in frame.chain() {
            match data {
                FrameData::Params(ps) if ps.iter().any(|p| p == name) => return Some(Src::default()),
                FrameData::Scope { rels, aliases } => {
                    if let Some(src) = self.in_scope(name, rels, aliases, row_value) {
                        return Some(src);
                    }
                    if pseudo && self.grammar == Grammar::Embedded {
                        return Some(Src::default());
                    }
                }
                FrameData::Params(_) | FrameData::Ctes(_) => {}
            }
        }
        pseudo.then(Src::default)
    }

    /// Where the unqualified `name` (lower case) takes its values from in one `FROM` scope: a
    /// column of its relations, a select-list alias of its `SELECT`, a relation used as a row
    /// (with `row_value`); uncertain when a relation whose columns are not all known may have
    /// it. `None` when nothing of this scope can be it.
    fn in_scope(&self, name: &str, rels: &[Rel], aliases: &[String], row_value: bool) -> Option<Src> {
        let hits: Vec<&Col> = rels.iter().filter_map(|r| r.cols.get(name)).collect();
        if !hits.is_empty() {
            // Several hits: the two sides of `USING` (merged), or a query the engine refuses as
            // ambiguous.
            let mut src = Src::default();
            for c in hits {
                src.add(&c.src);
            }
            return Some(src);
        }
        if aliases.iter().any(|a| lower(a) == name) {
            let key = aliases.as_ptr() as usize;
            let known = self.alias_srcs.iter().rev().find(|(k, _)| *k == key).and_then(|(_, list)| list.iter().find(|(a, _)| a == name));
            return Some(known.map_or_else(Src::uncertain, |(_, src)| src.clone()));
        }
        if row_value && let Some(r) = rels.iter().find(|r| r.quals.iter().any(|q| q.len() == 1 && q[0] == name)) {
            return Some(r.cols.all_sources());
        }
        if rels.iter().any(|r| r.cols.is_open()) {
            return Some(Src::uncertain());
        }
        None
    }

    /// The columns `*` reads in the innermost scope of `frame` (`qualifier`: only that relation's).
    fn star_source(frame: &Frame<'_>, qualifier: Option<&[String]>) -> Src {
        let rels = frame.chain().find_map(|d| match d {
            FrameData::Scope { rels, .. } => Some(*rels),
            _ => None,
        });
        let rels = rels.unwrap_or(&[]);
        match qualifier {
            None => star(rels).all_sources(),
            Some(q) => rels.iter().find(|r| r.quals.iter().any(|x| x.as_slice() == q)).map_or_else(Src::uncertain, |r| r.cols.all_sources()),
        }
    }

    fn push(&mut self, at: &Ident, column: &str, reference: &str, relation: Option<String>, detail: String, suggestion: Option<String>) {
        let pos = at.span.start;
        let relation = relation.map(|r| self.parents.get(&r).map_or(r, |(n, _)| n.clone()));
        self.problems.push(ColumnProblem {
            column: column.to_string(),
            reference: reference.to_string(),
            relation,
            detail,
            suggestion,
            line: (pos.line > 0).then_some(pos.line),
            col: (pos.column > 0).then_some(pos.column),
            by_name: false,
        });
    }
}

/// "column `x` is not declared by parent `p`" or "… is not a column of CTE `c`".
fn missing_in(col: &str, rel: &Rel, parents: &BTreeMap<String, (String, Vec<String>)>, naming: &Naming) -> String {
    match rel.origin {
        Origin::Parent(_) => format!("column `{col}` is not declared by {}", rel.describe(parents, naming)),
        _ => format!("column `{col}` is not a column of {}", rel.describe(parents, naming)),
    }
}

/// The only candidate that contains `wanted` or is contained in it (a renamed column such as
/// `amount` → `amount_cents`), or else the closest one by edit distance ([`did_you_mean`]).
fn suggest<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let w = lower(wanted);
    let mut hits: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| {
            let c = lower(c);
            w.chars().count() >= 3 && c.chars().count() >= 3 && c != w && (c.contains(&w) || w.contains(&c))
        })
        .collect();
    hits.sort_unstable();
    hits.dedup();
    if let [one] = hits.as_slice() {
        return Some((*one).to_string());
    }
    did_you_mean(wanted, candidates).map(str::to_string)
}

fn dotted(parts: &[&Ident]) -> String {
    parts.iter().map(|p| p.value.as_str()).collect::<Vec<_>>().join(".")
}

/// The identifier parts of a name; shorter than the name when a part is not an identifier.
fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map_while(|p| match p {
            ObjectNamePart::Identifier(id) => Some(id.value.clone()),
            ObjectNamePart::Function(_) => None,
        })
        .collect()
}

fn cte_lookup(up: Option<&Frame<'_>>, name: &str) -> Option<Cols> {
    let frame = up?;
    frame.chain().find_map(|d| match d {
        FrameData::Ctes(ctes) => ctes.iter().rev().find(|(n, _)| n == name).map(|(_, c)| c.clone()),
        _ => None,
    })
}

/// Applies the alias's column list to the relation's columns (which may repeat a name then:
/// `AS t(x, x)`, renamed by DuckDB as any relation's).
fn renamed(mut rel: Rel, alias: Option<&TableAlias>) -> Rel {
    if let Some(a) = alias {
        rel.cols = std::mem::take(&mut rel.cols).rename(&a.columns).into_relation();
    }
    rel
}

fn table_factor_alias(f: &TableFactor) -> Option<&TableAlias> {
    match f {
        TableFactor::Pivot { alias, .. }
        | TableFactor::Unpivot { alias, .. }
        | TableFactor::JsonTable { alias, .. }
        | TableFactor::OpenJsonTable { alias, .. }
        | TableFactor::MatchRecognize { alias, .. }
        | TableFactor::XmlTable { alias, .. }
        | TableFactor::SemanticView { alias, .. } => alias.as_ref(),
        _ => None,
    }
}

/// `*` over `rels`: their columns in order, minus the right side of `USING` / `NATURAL`.
fn star(rels: &[Rel]) -> Cols {
    star_owned(rels).0
}

/// [`star`], and for each of its columns the index in `rels` of the relation it comes from (a
/// `USING` / `NATURAL` key: the left side's, which it is merged into).
fn star_owned(rels: &[Rel]) -> (Cols, Vec<usize>) {
    let mut out = Cols::default();
    let mut owners = Vec::new();
    for (i, r) in rels.iter().enumerate() {
        for c in &r.cols.items {
            if let Some(name) = &c.name
                && r.star_skip.contains(&lower(name))
            {
                out.unordered = true;
                // Merged into the left side's column of that name, which reads both (a `FULL`
                // join's merged key is either side's value).
                if let Some(left) = out.items.iter_mut().find(|o| o.name.as_deref().is_some_and(|n| lower(n) == lower(name))) {
                    left.src.add(&c.src);
                }
                continue;
            }
            out.items.push(c.clone());
            owners.push(i);
        }
        out.more |= r.cols.more;
        out.unordered |= r.cols.unordered;
        out.star_of.extend(r.cols.star_of.iter().cloned());
    }
    (out, owners)
}

/// Which relation of a `FROM` scope each column of a `*` or `t.*` expansion comes from, for an
/// `EXCLUDE (t.col)`, which drops that relation's `col` only.
struct Owners<'r> {
    /// The relations of the scope.
    rels: &'r [Rel],
    /// Per column of the expansion, its relation's index in `rels`.
    of: Vec<usize>,
    /// Names whose columns `*` merges across relations or leaves out (`USING` and `NATURAL`
    /// keys, a semi join's right side), lower-case: which column a qualified exclude of one
    /// drops (DuckDB then shows the other side's) is not followed.
    merged: Vec<String>,
}

impl Owners<'_> {
    /// The index in `cols` of the one column `EXCLUDE (qual.col)` drops (`qual` and `col`
    /// lower-case), when certain: `qual` names a relation of the scope (`t`, or `schema.t`
    /// for an alias `t`) that gave the expansion exactly one column `col`.
    fn item(&self, qual: &[String], col: &str, cols: &Cols) -> Option<usize> {
        if self.merged.iter().any(|m| m == col) {
            return None;
        }
        let rel = self
            .rels
            .iter()
            .position(|r| r.quals.iter().any(|q| q == qual))
            .or_else(|| self.rels.iter().position(|r| r.quals.iter().any(|q| qual.len() > q.len() && qual.ends_with(q))))?;
        let mut found = cols.items.iter().enumerate().filter(|(j, c)| self.of.get(*j) == Some(&rel) && c.is(col)).map(|(j, _)| j);
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }
}

fn append(out: &mut Cols, cols: Cols) {
    out.items.extend(cols.items);
    out.more |= cols.more;
    out.unordered |= cols.unordered;
    out.star_of.extend(cols.star_of);
}

/// The name DuckDB gives an unaliased select item, when it is certain: a column reference keeps
/// its column's name. Anything else gets a name generated from the expression text (`None`).
fn output_name(e: &Expr, rels: &[Rel]) -> Option<String> {
    match e {
        Expr::Identifier(id) => Some(id.value.clone()),
        Expr::CompoundIdentifier(ids) if ids.len() > 1 => {
            let qual: Vec<String> = ids[..ids.len() - 1].iter().map(|i| lower(&i.value)).collect();
            rels.iter().any(|r| r.quals.contains(&qual)).then(|| ids[ids.len() - 1].value.clone())
        }
        _ => None,
    }
}

/// Whether `node` holds a query (a subquery anywhere in it).
fn holds_query<V: Visit + ?Sized>(node: &V) -> bool {
    struct Finder;
    impl Visitor for Finder {
        type Break = ();

        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }
    node.visit(&mut Finder).is_break()
}

fn addr<T>(x: &T) -> usize {
    std::ptr::from_ref(x) as usize
}

/// Walks the expressions of one AST part, checking column references and handing subqueries
/// back to the analyzer with the current scope as their outer scope.
struct Walker<'w, 'f> {
    an: &'w mut Analyzer,
    frame: &'w Frame<'f>,
    /// Lambda parameters in scope, innermost last (lower-case).
    params: Vec<Vec<String>>,
    /// A subtree being skipped: (is a query, address).
    skip: Option<(bool, usize)>,
    /// Expressions that are not column references (field names after `.`, named-argument names).
    ignore: HashSet<usize>,
}

impl Walker<'_, '_> {
    /// Resolves the definition of the named window `name` (and of those it builds on) where a
    /// window function uses it, so its partitioning and ordering feed that function's select
    /// item exactly as an inline `OVER (PARTITION BY … ORDER BY …)` does. A window the `SELECT`
    /// does not define makes the item uncertain.
    fn window(&mut self, name: &Ident) {
        let (specs, defined) = self.an.named_window(name);
        for spec in &specs {
            self.an.walk(spec, self.frame);
        }
        if !defined {
            self.an.record(&Src::uncertain());
        }
    }
}

impl Visitor for Walker<'_, '_> {
    type Break = ();

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        if self.skip.is_none() {
            let params: Vec<String> = self.params.concat();
            let frame = Frame { up: Some(self.frame), data: FrameData::Params(&params) };
            let cols = self.an.query(q, Some(&frame));
            // A scalar / `IN` / `EXISTS` subquery: what it returns feeds the expression.
            self.an.record(&cols.all_sources());
            self.skip = Some((true, addr(q)));
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        if self.skip == Some((true, addr(q))) {
            self.skip = None;
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if self.skip.is_some() {
            return ControlFlow::Continue(());
        }
        if self.ignore.contains(&addr(e)) {
            self.skip = Some((false, addr(e)));
            return ControlFlow::Continue(());
        }
        match e {
            Expr::Identifier(id) => self.an.reference(&[id], self.frame, &self.params),
            Expr::CompoundIdentifier(ids) if !ids.is_empty() => {
                let parts: Vec<&Ident> = ids.iter().collect();
                self.an.reference(&parts, self.frame, &self.params);
            }
            Expr::CompoundFieldAccess { root, access_chain } => {
                let mut path: Vec<&Ident> = match root.as_ref() {
                    Expr::Identifier(id) => vec![id],
                    Expr::CompoundIdentifier(ids) => ids.iter().collect(),
                    _ => Vec::new(),
                };
                let resolve = !path.is_empty();
                if resolve {
                    self.ignore.insert(addr(root.as_ref()));
                }
                let mut leading = true;
                for access in access_chain {
                    match access {
                        AccessExpr::Dot(field @ Expr::Identifier(id)) => {
                            self.ignore.insert(addr(field));
                            if leading {
                                path.push(id);
                            }
                        }
                        _ => leading = false,
                    }
                }
                if resolve {
                    self.an.reference(&path, self.frame, &self.params);
                }
            }
            Expr::Lambda(l) => self.params.push(l.params.iter().map(|p| lower(&p.name.value)).collect()),
            Expr::Function(f) => {
                // `OVER w` and `OVER (w ORDER BY …)` read the named window as `OVER (…)` would;
                // the inline part, if any, is walked below like any other expression.
                if let Some(WindowType::NamedWindow(name) | WindowType::WindowSpec(WindowSpec { window_name: Some(name), .. })) = &f.over {
                    self.window(name);
                }
                let fname = f.name.0.last().and_then(|p| p.as_ident()).map(|i| lower(&i.value)).unwrap_or_default();
                if fname == "columns" {
                    // DuckDB's `COLUMNS(…)`: columns chosen by a pattern or a lambda.
                    self.an.record(&Src::uncertain());
                }
                // A keyword function without parentheses (`current_date`, `localtime`): DuckDB
                // binds a column of that name of the query's own relations first
                // ([`Analyzer::unqualified_source`]); to Postgres the unquoted keyword is the
                // function.
                if self.an.grammar == Grammar::Embedded
                    && matches!(f.args, FunctionArguments::None)
                    && let [ObjectNamePart::Identifier(id)] = f.name.0.as_slice()
                {
                    if PSEUDO_COLUMNS.contains(&fname.as_str()) {
                        self.an.reference(&[id], self.frame, &self.params);
                    } else if let Some(src) = self.an.unqualified_source(&fname, self.frame, false) {
                        self.an.record(&src);
                    }
                }
                // DuckDB's dot call `d.abs()`, `p.v.abs()`: `abs(d)`, `abs(p.v)`.
                if let Some((_, receiver)) = f.name.0.split_last()
                    && !receiver.is_empty()
                    && self.an.dot_calls
                {
                    let src = match receiver.iter().map(|p| p.as_ident().map(|i| lower(&i.value))).collect::<Option<Vec<String>>>() {
                        Some(lowered) => self.an.receiver_source(&lowered, self.frame, &self.params),
                        None => Some(Src::uncertain()),
                    };
                    if let Some(src) = src {
                        self.an.record(&src);
                    }
                }
                if let FunctionArguments::List(list) = &f.args {
                    for arg in &list.args {
                        match arg {
                            // `count_if(a = 1)`, `if(a = 7, b, 0)`: sqlparser's argument named `a`
                            // with the value `1`, DuckDB's comparison of a column `a` (a scalar
                            // function's named parameters are `name := value`).
                            FunctionArg::Named { name, operator: FunctionArgOperator::Equals, .. } => self.an.reference(&[name], self.frame, &self.params),
                            // A parameter's name (`name := value`, `name => value`); a name written
                            // `name = value` is walked as the expression it is.
                            FunctionArg::ExprNamed { name, operator, .. } if !matches!(operator, FunctionArgOperator::Equals) => {
                                self.ignore.insert(addr(name));
                            }
                            _ => {}
                        }
                        let wildcard = match arg {
                            FunctionArg::Unnamed(a) | FunctionArg::Named { arg: a, .. } | FunctionArg::ExprNamed { arg: a, .. } => Some(a),
                        };
                        // `f(*)` / `f(t.*)` reads whole rows; `count(*)` reads none of their columns.
                        match wildcard {
                            Some(FunctionArgExpr::Wildcard) if fname != "count" => {
                                let src = Analyzer::star_source(self.frame, None);
                                self.an.record(&src);
                            }
                            Some(FunctionArgExpr::QualifiedWildcard(q)) => {
                                let q: Vec<String> = name_parts(q).iter().map(|p| lower(p)).collect();
                                let src = Analyzer::star_source(self.frame, Some(&q));
                                self.an.record(&src);
                            }
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if let Some(skip) = self.skip {
            if skip == (false, addr(e)) {
                self.skip = None;
            }
            return ControlFlow::Continue(());
        }
        if matches!(e, Expr::Lambda(_)) {
            self.params.pop();
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parents() -> BTreeMap<String, Vec<String>> {
        let p = |cols: &[&str]| cols.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        BTreeMap::from([
            ("raw.orders".to_string(), p(&["id", "customer_id", "amount_cents", "ordered_at", "items", "meta"])),
            ("raw.customers".to_string(), p(&["id", "name", "region"])),
            ("core.regions".to_string(), p(&["region", "label"])),
        ])
    }

    fn problems(sql: &str) -> Vec<ColumnProblem> {
        unknown_columns(sql, &parents()).unwrap_or_else(|e| panic!("{e}\n{sql}"))
    }

    #[test]
    fn ambiguous_unqualified_columns_are_found_and_merged_or_aliased_ones_are_not() {
        let amb = |sql: &str| -> Vec<String> {
            ambiguous_columns_in(Grammar::Embedded, sql, &parents()).unwrap_or_else(|e| panic!("{e}")).into_iter().map(|p| p.column).collect()
        };
        // `id` is in both parents; `name` only in customers; `region` in customers and regions.
        assert_eq!(amb("SELECT id, name FROM raw.orders AS o JOIN raw.customers AS c ON c.id = o.customer_id"), ["id"]);
        assert_eq!(amb("SELECT c.id, region FROM raw.customers AS c JOIN core.regions AS r ON r.region = c.region WHERE id > 0"), ["region"]);
        // Qualified, merged by `USING`/`NATURAL`, a select-list alias, one relation, a subquery's own scope.
        assert!(amb("SELECT o.id, name FROM raw.orders AS o JOIN raw.customers AS c ON c.id = o.customer_id").is_empty());
        assert!(amb("SELECT region, label FROM raw.customers JOIN core.regions USING (region)").is_empty());
        assert!(amb("SELECT region FROM raw.customers NATURAL JOIN core.regions").is_empty());
        assert!(amb("SELECT o.id AS id FROM raw.orders AS o JOIN raw.customers AS c ON c.id = o.customer_id ORDER BY id").is_empty());
        assert!(amb("SELECT id FROM raw.orders WHERE customer_id IN (SELECT id FROM raw.customers)").is_empty());
    }

    #[track_caller]
    fn ok(sql: &str) {
        let p = problems(sql);
        assert!(p.is_empty(), "false positive in\n{sql}\n{p:#?}");
    }

    /// The single problem of `sql`, whose column must be `column`.
    #[track_caller]
    fn one(sql: &str, column: &str) -> ColumnProblem {
        let p = problems(sql);
        assert_eq!(p.len(), 1, "wanted exactly one problem in\n{sql}\n{p:#?}");
        assert_eq!(p[0].column, column, "{p:#?}");
        p[0].clone()
    }

    /// Each output column as `name <- parent.col, …` (`?` when uncertain).
    fn lineage(sql: &str) -> (Vec<String>, QueryLineage) {
        lineage_over(Grammar::Embedded, sql, &parents())
    }

    /// [`lineage`] of `sql` read in `grammar` over `parents`.
    fn lineage_over(grammar: Grammar, sql: &str, parents: &BTreeMap<String, Vec<String>>) -> (Vec<String>, QueryLineage) {
        let l = column_lineage_in(grammar, sql, parents).unwrap_or_else(|e| panic!("{e}\n{sql}"));
        let cols = l
            .columns
            .iter()
            .map(|c| {
                let mut srcs: Vec<String> = c.sources.iter().map(|s| format!("{}.{}", s.model, s.column)).collect();
                if !c.certain {
                    srcs.push("?".into());
                }
                format!("{} <- {}", c.column.as_deref().unwrap_or("?"), srcs.join(", "))
            })
            .collect();
        (cols, l)
    }

    #[test]
    fn the_output_of_semi_joins_using_joins_and_qualified_excludes_is_told_as_far_as_known() {
        // A semi or anti join returns the left side's columns, in order.
        for join in ["SEMI", "ANTI"] {
            let (cols, l) = lineage(&format!("SELECT * FROM raw.customers AS c {join} JOIN core.regions AS r ON c.region = r.region"));
            assert_eq!(cols.iter().map(|c| c.split(' ').next().unwrap()).collect::<Vec<_>>(), ["id", "name", "region"], "{join}");
            assert!(l.complete, "{join}");
        }
        // `*` over a `USING` join: the columns are known, their order is not (Postgres puts the
        // keys first).
        let (_, l) = lineage("SELECT * FROM core.regions JOIN raw.customers USING (region)");
        assert!(l.complete && !l.ordered);
        assert!(lineage("SELECT id, name FROM raw.customers").1.ordered);
        // `EXCLUDE (r.region)` drops `r`'s `region` and keeps the other side's.
        let (cols, l) = lineage("SELECT * EXCLUDE (r.region) FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region");
        assert_eq!(cols, ["id <- raw.customers.id", "name <- raw.customers.name", "region <- raw.customers.region", "label <- core.regions.label"]);
        assert!(l.complete);
    }

    #[test]
    fn a_qualified_exclude_drops_the_named_relations_column_and_keeps_the_others() {
        // The first relation's `region` goes: the one left is the second's, certain.
        let (cols, l) = lineage("SELECT * EXCLUDE (c.region) FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region");
        assert_eq!(cols, ["id <- raw.customers.id", "name <- raw.customers.name", "region <- core.regions.region", "label <- core.regions.label"]);
        assert!(l.complete);
        assert!(reads(&l).contains(&"raw.customers.region".to_string()), "the join still reads it: {:?}", reads(&l));
        // Two at once, one of each side; a `USING` join (the key is not the excluded column);
        // `schema.alias.col` as DuckDB accepts it; case ignored.
        let (cols, _) = lineage("SELECT * EXCLUDE (c.region, R.Label) FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region");
        assert_eq!(cols, ["id <- raw.customers.id", "name <- raw.customers.name", "region <- core.regions.region"]);
        let (cols, l) = lineage("SELECT * EXCLUDE (c.id) FROM core.regions AS r JOIN raw.customers AS c USING (region)");
        assert_eq!(cols, ["region <- core.regions.region, raw.customers.region", "label <- core.regions.label", "name <- raw.customers.name"]);
        assert!(l.complete);
        let (cols, _) = lineage("SELECT * EXCLUDE (main.c.region) FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region");
        assert_eq!(cols[2], "region <- core.regions.region");
        // `t.* EXCLUDE`, qualified or not, drops from `t` alone.
        for sql in [
            "SELECT c.* EXCLUDE (c.name), r.label FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region",
            "SELECT c.* EXCLUDE (name), r.label FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region",
        ] {
            let (cols, l) = lineage(sql);
            assert_eq!(cols, ["id <- raw.customers.id", "region <- raw.customers.region", "label <- core.regions.label"], "{sql}");
            assert!(l.complete, "{sql}");
        }
        // Not followed: a qualifier naming no relation, a `USING` key (excluding one side's
        // shows the other's): every column of that name is uncertain, and the output too.
        for sql in [
            "SELECT * EXCLUDE (z.region) FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region",
            "SELECT * EXCLUDE (c.region) FROM raw.customers AS c JOIN core.regions AS r USING (region)",
        ] {
            let (cols, l) = lineage(sql);
            assert!(!l.complete, "{sql}");
            let regions: Vec<&String> = cols.iter().filter(|c| c.starts_with("region <-")).collect();
            assert!(!regions.is_empty() && regions.iter().all(|c| c.ends_with('?')), "{sql}: {cols:?}");
        }
    }

    #[test]
    fn a_replace_over_a_repeated_name_replaces_the_first_and_drops_the_others() {
        // DuckDB returns `region` once, the replacement, where the first `region` was.
        let (cols, l) = lineage("SELECT * REPLACE (c.region || r.label AS region) FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region");
        assert_eq!(
            cols,
            ["id <- raw.customers.id", "name <- raw.customers.name", "region <- core.regions.label, raw.customers.region", "label <- core.regions.label"]
        );
        assert!(l.complete);
    }

    #[test]
    fn a_repeated_output_name_is_listed_each_time_and_never_certain() {
        // A top-level query returns both (the schema contract refuses it): both listed, each
        // reading either source, neither certain.
        let (cols, l) = lineage("SELECT c.id, c.region, r.region FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region");
        assert_eq!(
            cols,
            ["id <- raw.customers.id", "region <- core.regions.region, raw.customers.region, ?", "region <- core.regions.region, raw.customers.region, ?"]
        );
        assert!(l.complete);
        let (cols, l) = lineage("SELECT * FROM raw.customers AS c JOIN raw.orders AS o ON o.customer_id = c.id");
        assert_eq!(cols.iter().filter(|c| c.starts_with("id <- ")).count(), 2, "{cols:?}");
        assert!(cols.iter().filter(|c| c.starts_with("id <- ")).all(|c| c == "id <- raw.customers.id, raw.orders.id, ?"), "{cols:?}");
        assert!(l.complete);
        // A relation repeating a name gets it renamed by DuckDB (`region_1`): its columns are
        // not all known, so neither is the output of `*` over it; positional aliases that
        // repeat one, likewise.
        for sql in [
            "SELECT * FROM (SELECT c.region, r.region FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region) AS s",
            "WITH s AS (SELECT * FROM raw.customers AS c JOIN core.regions AS r ON c.region = r.region) SELECT * FROM s",
            "SELECT * FROM (SELECT id, name FROM raw.customers) AS s(k, k)",
        ] {
            assert!(!lineage(sql).1.complete, "{sql}");
        }
    }

    fn reads(l: &QueryLineage) -> Vec<String> {
        l.reads.iter().map(|s| format!("{}.{}", s.model, s.column)).collect()
    }

    #[test]
    fn lineage_through_ctes_joins_aliases_and_star() {
        let (cols, l) = lineage(
            "WITH o AS (SELECT * FROM raw.orders WHERE amount_cents > 0), c AS (SELECT id AS cid, region FROM raw.customers)
             SELECT o.id, amount_cents / 100 AS amount, c.region, r.label
             FROM o JOIN c ON c.cid = o.customer_id JOIN core.regions AS r ON r.region = c.region",
        );
        assert_eq!(cols, ["id <- raw.orders.id", "amount <- raw.orders.amount_cents", "region <- raw.customers.region", "label <- core.regions.label"]);
        assert!(l.complete && l.reads_certain);
        assert_eq!(
            reads(&l),
            [
                "core.regions.label",
                "core.regions.region",
                "raw.customers.id",
                "raw.customers.region",
                "raw.orders.amount_cents",
                "raw.orders.customer_id",
                "raw.orders.id"
            ],
            "a filter, a join key and a renamed key are read"
        );
        assert!(l.whole.is_empty(), "no `*` reaches the output: {:?}", l.whole);
    }

    #[test]
    fn lineage_of_star_expansions_using_and_set_operations() {
        let (cols, l) = lineage("SELECT * EXCLUDE (items, meta) FROM raw.orders");
        assert_eq!(
            cols,
            ["id <- raw.orders.id", "customer_id <- raw.orders.customer_id", "amount_cents <- raw.orders.amount_cents", "ordered_at <- raw.orders.ordered_at"]
        );
        assert_eq!(l.whole, ["raw.orders"]);
        let (cols, _) = lineage("SELECT * FROM raw.customers, (SELECT id, amount_cents FROM raw.orders) AS o(order_id, cents)");
        assert_eq!(
            cols,
            [
                "id <- raw.customers.id",
                "name <- raw.customers.name",
                "region <- raw.customers.region",
                "order_id <- raw.orders.id",
                "cents <- raw.orders.amount_cents"
            ]
        );
        let (cols, _) = lineage("SELECT * REPLACE (amount_cents * 2 AS amount_cents) FROM (SELECT id, amount_cents, customer_id FROM raw.orders) AS s");
        assert_eq!(cols, ["id <- raw.orders.id", "amount_cents <- raw.orders.amount_cents", "customer_id <- raw.orders.customer_id"]);
        // `USING` merges both sides' key into one column, also under `*`.
        let (cols, _) = lineage("SELECT region, label FROM raw.customers JOIN core.regions USING (region)");
        assert_eq!(cols, ["region <- core.regions.region, raw.customers.region", "label <- core.regions.label"]);
        let (cols, _) = lineage("SELECT * FROM core.regions FULL JOIN raw.customers USING (region)");
        assert!(cols.iter().any(|c| c == "region <- core.regions.region, raw.customers.region"), "{cols:?}");
        // A union's column reads both branches at its position.
        let (cols, _) = lineage("SELECT id AS k FROM raw.orders UNION ALL SELECT id FROM raw.customers");
        assert_eq!(cols, ["k <- raw.customers.id, raw.orders.id"]);
    }

    fn reads_of(sql: &str) -> Vec<String> {
        reads(&lineage(sql).1)
    }

    #[test]
    fn join_keys_and_whole_row_comparisons_are_reads() {
        // `USING` and `NATURAL` keys decide which rows match: read on both sides.
        assert_eq!(
            reads_of("SELECT label FROM raw.customers JOIN core.regions USING (region)"),
            ["core.regions.label", "core.regions.region", "raw.customers.region"]
        );
        assert_eq!(
            reads_of("SELECT c.name, r.label FROM raw.customers AS c NATURAL JOIN core.regions AS r"),
            ["core.regions.label", "core.regions.region", "raw.customers.name", "raw.customers.region"]
        );
        // A `*` that only reaches the output in part still reads every column where whole rows
        // are compared: DISTINCT, UNION / EXCEPT / INTERSECT, GROUP BY ALL, ORDER BY ALL.
        let all = ["raw.customers.id", "raw.customers.name", "raw.customers.region"];
        assert_eq!(reads_of("SELECT id FROM (SELECT DISTINCT * FROM raw.customers) AS q"), all);
        assert_eq!(reads_of("SELECT id FROM (SELECT * FROM raw.customers GROUP BY ALL) AS q"), all);
        assert_eq!(reads_of("SELECT id FROM (SELECT * FROM raw.customers ORDER BY ALL LIMIT 3) AS q"), all);
        assert_eq!(reads_of("SELECT id FROM (SELECT * FROM raw.customers EXCEPT SELECT * FROM raw.customers WHERE id = 1) AS q"), all);
        // A plain `*` projection passes columns through: only what the outer query uses is read.
        assert_eq!(reads_of("WITH c AS (SELECT * FROM raw.customers) SELECT id FROM c"), ["raw.customers.id"]);
        assert_eq!(reads_of("SELECT id FROM (SELECT * FROM raw.customers UNION ALL SELECT * FROM raw.customers) AS q"), ["raw.customers.id"]);
    }

    #[test]
    fn lineage_of_subqueries_windows_aliases_and_aggregates() {
        let (cols, _) = lineage(
            "SELECT o.id,
                    (SELECT max(c.region) FROM raw.customers AS c WHERE c.id = o.customer_id) AS region,
                    lead(ordered_at) OVER (PARTITION BY customer_id ORDER BY ordered_at) AS next_at,
                    amount_cents AS a, a * 2 AS doubled, count(*) OVER () AS n, 1 AS one
             FROM raw.orders AS o",
        );
        assert_eq!(
            cols,
            [
                "id <- raw.orders.id",
                "region <- raw.customers.region",
                "next_at <- raw.orders.customer_id, raw.orders.ordered_at",
                "a <- raw.orders.amount_cents",
                "doubled <- raw.orders.amount_cents",
                "n <- ",
                "one <- ",
            ]
        );
        // A relation used as a row value, or `*` inside a function, reads every column.
        let (cols, _) = lineage("SELECT to_json(c) AS j, hash(*) AS h FROM raw.customers AS c");
        assert_eq!(
            cols,
            ["j <- raw.customers.id, raw.customers.name, raw.customers.region", "h <- raw.customers.id, raw.customers.name, raw.customers.region"]
        );
    }

    #[test]
    fn a_named_window_is_read_like_the_same_window_written_inline() {
        let inline = "SELECT lead(ordered_at) OVER (PARTITION BY customer_id ORDER BY ordered_at) AS next_at FROM raw.orders";
        let want = ["next_at <- raw.orders.customer_id, raw.orders.ordered_at"];
        assert_eq!(lineage(inline).0, want);
        for named in [
            "SELECT lead(ordered_at) OVER w AS next_at FROM raw.orders WINDOW w AS (PARTITION BY customer_id ORDER BY ordered_at)",
            // Case-insensitive, like DuckDB's identifiers.
            "SELECT lead(ordered_at) OVER W AS next_at FROM raw.orders WINDOW w AS (PARTITION BY customer_id ORDER BY ordered_at)",
            // A window defined from another, and an inline window building on a named one.
            "SELECT lead(ordered_at) OVER w2 AS next_at FROM raw.orders WINDOW w AS (PARTITION BY customer_id), w2 AS (w ORDER BY ordered_at)",
            "SELECT lead(ordered_at) OVER (w ORDER BY ordered_at) AS next_at FROM raw.orders WINDOW w AS (PARTITION BY customer_id)",
        ] {
            assert_eq!(lineage(named).0, want, "{named}");
        }
        // Only the item using the window reads it; the window's columns stay reads of the query.
        let (cols, l) = lineage("SELECT id, sum(amount_cents) OVER w AS running FROM raw.orders WINDOW w AS (PARTITION BY customer_id ORDER BY ordered_at)");
        assert_eq!(cols, ["id <- raw.orders.id", "running <- raw.orders.amount_cents, raw.orders.customer_id, raw.orders.ordered_at"]);
        assert_eq!(reads(&l), ["raw.orders.amount_cents", "raw.orders.customer_id", "raw.orders.id", "raw.orders.ordered_at"]);
        // A window the query does not define (the engine refuses it): not certain.
        assert_eq!(lineage("SELECT sum(amount_cents) OVER nope AS s FROM raw.orders").0, ["s <- raw.orders.amount_cents, ?"]);
    }

    #[test]
    fn a_subquerys_filters_joins_and_orderings_are_reads_not_sources() {
        // As at the top level, the columns a subquery filters, joins or orders on decide which
        // rows its value comes from, not where the value comes from.
        let top = "SELECT r.label FROM raw.orders AS o JOIN raw.customers AS c ON c.id = o.customer_id JOIN core.regions AS r ON r.region = c.region";
        assert_eq!(lineage(top).0, ["label <- core.regions.label"]);
        let (cols, l) = lineage(
            "SELECT o.id,
                    (SELECT max(c.name) FROM raw.customers AS c WHERE c.id = o.customer_id) AS name,
                    (SELECT r.label FROM raw.customers AS c JOIN core.regions AS r ON r.region = c.region
                     WHERE c.id = o.customer_id GROUP BY r.label HAVING count(*) > 0 ORDER BY min(c.name) LIMIT 1) AS label,
                    CASE WHEN EXISTS (SELECT 1 FROM raw.customers AS c WHERE c.id = o.customer_id) THEN 'known' END AS known,
                    amount_cents IN (SELECT id FROM raw.customers WHERE region = 'x') AS hit
             FROM raw.orders AS o",
        );
        assert_eq!(
            cols,
            [
                "id <- raw.orders.id",
                "name <- raw.customers.name",
                "label <- core.regions.label",
                "known <- ",
                "hit <- raw.customers.id, raw.orders.amount_cents",
            ]
        );
        // Still read (what `plan`'s column impact and `--downstream`'s "also read by" use).
        assert_eq!(
            reads(&l),
            [
                "core.regions.label",
                "core.regions.region",
                "raw.customers.id",
                "raw.customers.name",
                "raw.customers.region",
                "raw.orders.amount_cents",
                "raw.orders.customer_id",
                "raw.orders.id"
            ]
        );
        assert!(l.reads_certain);
    }

    #[test]
    fn lineage_is_uncertain_where_columns_are_not_known() {
        let (cols, l) = lineage("SELECT x, o.id FROM somewhere AS s, raw.orders AS o");
        assert_eq!(cols, ["x <- ?", "id <- raw.orders.id"]);
        assert!(!l.reads_certain);
        let (cols, _) = lineage("SELECT COLUMNS('amount.*') FROM raw.orders");
        assert_eq!(cols, ["? <- ?"]);
        let (_, l) = lineage("SELECT * FROM read_csv('x.csv')");
        assert!(!l.complete && !l.reads_certain);
        let (_, l) = lineage("SELECT id FROM raw.orders");
        assert!(l.complete && l.reads_certain);
    }

    #[test]
    fn a_dot_calls_receiver_is_read_like_the_column_it_names() {
        // DuckDB's `x.f()` is `f(x)`; sqlparser reads a call of a function `f` in a schema `x`.
        let (cols, l) = lineage(
            "SELECT o.id, items.len() AS n, o.amount_cents.abs() AS a, items.list_sum().abs() AS s, \
                    list_transform(items, x -> x * customer_id.abs()) AS t, items.list_transform(x -> x.abs()) AS u \
             FROM raw.orders AS o WHERE ordered_at.year() > 2000",
        );
        assert_eq!(
            cols,
            [
                "id <- raw.orders.id",
                "n <- raw.orders.items",
                "a <- raw.orders.amount_cents",
                "s <- raw.orders.items",
                "t <- raw.orders.customer_id, raw.orders.items",
                "u <- raw.orders.items",
            ]
        );
        assert!(l.reads_certain);
        assert!(reads(&l).contains(&"raw.orders.ordered_at".to_string()), "a dot call in a filter is a read: {:?}", reads(&l));
        // A select alias as the receiver reads what the alias reads.
        let (_, l) = lineage("SELECT o.id, o.customer_id * 2 AS d FROM raw.orders AS o WHERE d.abs() > 30");
        assert!(l.reads_certain);
        assert_eq!(reads(&l), ["raw.orders.customer_id", "raw.orders.id"]);
        // Nothing in scope can be `util`: a function in a schema `util`, no read, and no
        // problem either.
        assert_eq!(lineage("SELECT util.split(name) AS parts FROM raw.customers").0, ["parts <- raw.customers.name"]);
        ok("SELECT util.split(name) AS parts, main.upper(region) AS r FROM raw.customers");
        // A relation whose columns are not known may hold it: uncertain.
        let (cols, l) = lineage("SELECT util.split(c.name) AS parts FROM raw.customers AS c, read_csv('x.csv') AS f");
        assert_eq!(cols, ["parts <- raw.customers.name, ?"]);
        assert!(!l.reads_certain);
        // To Postgres `util.split(…)` is a function of a schema `util` only.
        let sql = "SELECT util.split(c.name) AS parts FROM raw.customers AS c, somewhere AS f";
        assert!(!column_lineage_in(Grammar::Embedded, sql, &parents()).unwrap().columns[0].certain);
        assert!(column_lineage_in(Grammar::Postgres, sql, &parents()).unwrap().columns[0].certain);
    }

    #[test]
    fn qualified_through_an_alias() {
        let p = one("SELECT o.id, o.amount FROM raw.orders AS o", "amount");
        assert_eq!(p.relation.as_deref(), Some("raw.orders"));
        assert_eq!(p.reference, "o.amount");
        assert_eq!(p.suggestion.as_deref(), Some("amount_cents"));
        assert_eq!(p.detail, "column `amount` is not declared by parent `raw.orders` (as `o`)");
        assert_eq!((p.line, p.col), (Some(1), Some(14)));
    }

    #[test]
    fn an_audits_naming_calls_the_audited_relation_the_model_and_leaves_aliases_out() {
        let sql = "SELECT t.amount FROM raw.orders AS t JOIN raw.customers AS c ON c.id = t.customer_id \
                   WHERE c.nation IS NULL AND t.id IN (SELECT id FROM (SELECT * FROM raw.customers) AS s WHERE s.zone = 1)";
        let a = analyze_named(Grammar::Embedded, sql, &parents(), Naming::audit("raw.orders")).unwrap();
        let details: Vec<&str> = a.unknown.iter().map(|p| p.detail.as_str()).collect();
        assert_eq!(
            details,
            [
                "column `amount` is not declared by the model",
                "column `nation` is not declared by model `raw.customers`",
                "column `zone` is not a column of subquery `s`, which reads `*` from model `raw.customers`",
            ]
        );
        // The same query as a model's: parents, with their aliases.
        let a = analyze_in(Grammar::Embedded, sql, &parents()).unwrap();
        assert_eq!(a.unknown[0].detail, "column `amount` is not declared by parent `raw.orders` (as `t`)");
        assert_eq!(a.unknown[2].detail, "column `zone` is not a column of subquery `s`, which reads `*` from parent `raw.customers`");
    }

    #[test]
    fn qualified_by_table_and_schema_table() {
        // A ref runs as a physical relation (or a subquery), never under its logical name:
        // qualifying an unaliased parent by `table` or `schema.table` cannot bind in DuckDB.
        for (sql, reference) in [
            ("SELECT orders.id FROM raw.orders", "orders.id"),
            ("SELECT raw.orders.amount_cents FROM raw.orders", "raw.orders.amount_cents"),
            ("SELECT \"RAW\".\"Orders\".\"ID\" FROM raw.orders", "RAW.Orders.ID"),
            ("SELECT efmesh.raw.orders.id FROM raw.orders", "efmesh.raw.orders.id"),
        ] {
            let p = one(sql, reference);
            assert_eq!(p.relation.as_deref(), Some("raw.orders"));
            assert!(p.detail.contains("does not exist when the query runs"), "{p:#?}");
            assert!(p.detail.contains("alias the ref"), "{p:#?}");
        }
        // Through an alias it is fine, and a missing column is still found.
        ok("SELECT o.id FROM raw.orders o");
        one("SELECT o.amount FROM raw.orders o", "amount");
    }

    #[test]
    fn unqualified_with_one_and_two_relations() {
        let p = one("SELECT id,\n  amount FROM raw.orders", "amount");
        assert_eq!(p.relation.as_deref(), Some("raw.orders"));
        assert_eq!((p.line, p.col), (Some(2), Some(3)));
        ok("SELECT name, amount_cents FROM raw.orders o JOIN raw.customers c ON c.id = o.customer_id");
        let p = one("SELECT nmae FROM raw.orders o JOIN raw.customers c ON c.id = o.customer_id", "nmae");
        assert_eq!(p.suggestion.as_deref(), Some("name"));
        assert_eq!(p.relation.as_deref(), Some("raw.customers"), "blamed on the relation holding the suggestion");
        assert!(p.detail.contains("any relation in scope"), "{}", p.detail);
    }

    #[test]
    fn joins_on_and_using() {
        let p = one("SELECT o.id FROM raw.orders o JOIN raw.customers c ON c.id = o.customer AND c.region = 'x'", "customer");
        assert_eq!(p.relation.as_deref(), Some("raw.orders"));
        ok("SELECT region, label, name FROM raw.customers JOIN core.regions USING (region)");
        let p = one("SELECT * FROM raw.orders JOIN core.regions USING (region)", "region");
        assert_eq!(p.relation.as_deref(), Some("raw.orders"));
        assert!(p.detail.contains("`USING`"), "{}", p.detail);
        ok("SELECT * FROM raw.customers NATURAL JOIN core.regions");
        // `USING` keeps one `region`, so the CTE's output is known and has `label`.
        ok("WITH j AS (SELECT * FROM raw.customers JOIN core.regions USING (region)) SELECT region, label FROM j");
        one("WITH j AS (SELECT * FROM raw.customers JOIN core.regions USING (region)) SELECT lable FROM j", "lable");
    }

    #[test]
    fn ctes_expose_their_output_names() {
        let p = one("WITH o AS (SELECT * FROM raw.orders) SELECT o.id, o.amount FROM o", "amount");
        assert_eq!(p.relation.as_deref(), Some("raw.orders"), "blamed through the CTE's `*`");
        assert!(p.detail.contains("CTE `o`") && p.detail.contains("reads `*` from parent `raw.orders`"), "{}", p.detail);
        let p = one("WITH o AS (SELECT id, amount FROM raw.orders) SELECT id FROM o", "amount");
        assert_eq!(p.relation.as_deref(), Some("raw.orders"));
        let p = one("WITH o AS (SELECT id, amount_cents AS cents FROM raw.orders) SELECT amount_cents FROM o", "amount_cents");
        assert_eq!(p.relation, None, "the CTE chose its columns: nothing to blame on a parent");
        ok("WITH o AS (SELECT id, amount_cents AS cents FROM raw.orders), t AS (SELECT sum(cents) AS total FROM o) SELECT total FROM t");
        ok("WITH o(a, b) AS (SELECT id, amount_cents FROM raw.orders) SELECT a, b FROM o");
        one("WITH o(a, b) AS (SELECT id, amount_cents FROM raw.orders) SELECT id FROM o", "id");
        // An expression without alias gets a generated name: the CTE is open.
        ok("WITH o AS (SELECT id, count(*) FROM raw.orders GROUP BY id) SELECT \"count_star()\" FROM o");
    }

    #[test]
    fn subqueries_in_from_expose_their_output_names() {
        ok("SELECT s.id, s.total FROM (SELECT id, amount_cents * 2 AS total FROM raw.orders) AS s");
        one("SELECT s.amount_cents FROM (SELECT id, amount_cents * 2 AS total FROM raw.orders) AS s", "amount_cents");
        ok("SELECT x, y FROM (SELECT id, region FROM raw.customers) AS s(x, y)");
        ok("SELECT lo, hi FROM (SELECT min(id) AS lo, max(id) AS hi FROM raw.orders)");
        one("SELECT lo, hi FROM (SELECT min(id) AS lo, max(idd) AS hi FROM raw.orders)", "idd");
        // Implicit lateral: a subquery sees the items to its left.
        ok("SELECT * FROM raw.orders o, (SELECT o.id + 1 AS next_id) AS n");
    }

    #[test]
    fn select_aliases_are_visible_in_later_clauses() {
        ok("SELECT amount_cents / 100 AS amount, amount * 2 AS twice FROM raw.orders \
            WHERE amount > 1 GROUP BY amount HAVING amount > 2 QUALIFY row_number() OVER (ORDER BY amount) = 1 ORDER BY twice");
        one("SELECT amount_cents / 100 AS amount FROM raw.orders ORDER BY amonut", "amonut");
    }

    #[test]
    fn expressions_windows_and_lambdas() {
        ok("SELECT id, CASE WHEN amount_cents > 0 THEN 'a' ELSE 'b' END AS k, CAST(ordered_at AS date) AS d, \
            list_transform(items, x -> x + 1) AS l1, list_filter(items, lambda y: y > id) AS l2, \
            sum(amount_cents) OVER w AS running, count(*) FILTER (WHERE amount_cents > 0) AS n, \
            string_agg(id::VARCHAR, ',' ORDER BY ordered_at) AS s, EXTRACT(year FROM ordered_at) AS y, \
            date_trunc('day', ordered_at) + INTERVAL 1 DAY AS t, $start AS lo, current_date AS today, rowid AS r \
            FROM raw.orders WINDOW w AS (PARTITION BY customer_id ORDER BY ordered_at)");
        one("SELECT list_transform(items, x -> x + amount) AS l FROM raw.orders", "amount");
        one("SELECT sum(amount_cents) OVER (PARTITION BY customer ORDER BY id) AS s FROM raw.orders", "customer");
        one("SELECT id FROM raw.orders WINDOW w AS (PARTITION BY cust)", "cust");
    }

    #[test]
    fn struct_field_access() {
        ok("SELECT meta.source, o.meta.source, meta['k'], o.meta.a[1].b, (meta).x FROM raw.orders o");
        one("SELECT o.metadata.source FROM raw.orders o", "metadata");
        one("SELECT metadata.source FROM raw.orders o", "metadata.source");
        // A relation used as a row value.
        ok("SELECT o, orders FROM raw.orders o, raw.orders");
    }

    #[test]
    fn star_and_qualified_star() {
        ok("SELECT * FROM raw.orders");
        ok("SELECT o.*, c.name FROM raw.orders o JOIN raw.customers c ON c.id = o.customer_id");
        ok("WITH x AS (SELECT * EXCLUDE (meta) FROM raw.orders) SELECT id, items FROM x");
        one("WITH x AS (SELECT * EXCLUDE (meta) FROM raw.orders) SELECT meta FROM x", "meta");
        ok("WITH x AS (SELECT c.* FROM raw.customers c) SELECT region FROM x");
        ok("WITH x AS (SELECT r.* FROM raw.customers c JOIN core.regions r USING (region)) SELECT region, label FROM x");
        ok("WITH x AS (SELECT * REPLACE (amount_cents / 100 AS amount_cents) FROM raw.orders) SELECT amount_cents FROM x");
        ok("FROM raw.orders SELECT id");
        ok("WITH x AS (FROM raw.orders) SELECT items FROM x");
    }

    #[test]
    fn group_by_all_order_by_all_and_set_operations() {
        ok("SELECT region, count(*) AS n FROM raw.customers GROUP BY ALL ORDER BY ALL");
        ok("SELECT id FROM raw.orders UNION ALL SELECT id FROM raw.customers ORDER BY id");
        one("SELECT id FROM raw.orders UNION ALL SELECT ident FROM raw.customers", "ident");
        ok("WITH u AS (SELECT id AS k FROM raw.orders UNION SELECT id FROM raw.customers) SELECT k FROM u");
        one("WITH u AS (SELECT id AS k FROM raw.orders UNION SELECT id FROM raw.customers) SELECT id FROM u", "id");
        ok("WITH u AS (SELECT id FROM raw.orders UNION BY NAME SELECT name FROM raw.customers) SELECT id, name FROM u");
    }

    #[test]
    fn correlated_subqueries_see_outer_scopes() {
        ok("SELECT id FROM raw.customers c WHERE EXISTS (SELECT 1 FROM raw.orders o WHERE o.customer_id = c.id AND region = 'x')");
        ok("SELECT id, (SELECT max(amount_cents) FROM raw.orders o WHERE o.customer_id = c.id) AS top FROM raw.customers c");
        ok("SELECT id FROM raw.customers WHERE id IN (SELECT customer_id FROM raw.orders)");
        one("SELECT id FROM raw.customers c WHERE EXISTS (SELECT 1 FROM raw.orders o WHERE o.customer = c.id)", "customer");
        one("SELECT id FROM raw.customers WHERE id IN (SELECT customer FROM raw.orders)", "customer");
        ok("SELECT list_transform(items, x -> (SELECT x + 1)) AS l FROM raw.orders");
    }

    #[test]
    fn open_scopes_report_nothing_unqualified() {
        ok("SELECT whatever FROM raw.orders, range(3) AS r");
        ok("SELECT whatever FROM raw.orders, unknown_table");
        ok("SELECT whatever FROM read_csv('x.csv')");
        ok("SELECT whatever FROM raw.orders o, unnest(o.items) AS u(v)");
        ok("SELECT range FROM range(3)");
        ok("SELECT unnamed_subquery.x FROM (SELECT 1 AS x)");
        // Qualified references to a known parent are still checked next to an open relation.
        one("SELECT o.nope FROM raw.orders o, range(3) AS r", "nope");
    }

    #[test]
    fn recursive_ctes_values_and_no_from() {
        ok("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT n FROM t");
        ok("SELECT a, b FROM (VALUES (1, 2)) AS v(a, b)");
        ok("SELECT 1 AS a, 'x' AS b");
        one("SELECT nope", "nope");
    }

    #[test]
    fn case_insensitive_like_duckdb() {
        ok("SELECT ID, O.Amount_Cents FROM RAW.ORDERS AS o");
    }

    #[test]
    fn unknown_qualifier() {
        let p = one("SELECT x.id FROM raw.orders AS o", "x.id");
        assert_eq!(p.relation, None);
        assert!(p.detail.contains("no relation or column `x`"), "{}", p.detail);
        // With an alias, the table name no longer qualifies.
        one("SELECT orders.id FROM raw.orders AS o", "orders.id");
    }

    /// No problem, or sqlparser cannot read it (then nothing is checked): never a false positive.
    #[track_caller]
    fn ok_or_unparsable(sql: &str) {
        if let Ok(p) = unknown_columns(sql, &parents()) {
            assert!(p.is_empty(), "false positive in\n{sql}\n{p:#?}");
        }
    }

    #[test]
    fn duckdb_syntax_never_gives_false_positives() {
        ok_or_unparsable("SELECT [x * 2 FOR x IN items IF x > 0] AS l FROM raw.orders");
        ok_or_unparsable("SELECT items.list_sum() AS s, o.items.list_sum() AS t FROM raw.orders o");
        ok_or_unparsable("SELECT list_reduce(items, (acc, x) -> acc + x) AS total FROM raw.orders");
        ok_or_unparsable("SELECT min(COLUMNS(*)), max(COLUMNS(c -> c LIKE 'a%')) FROM raw.orders");
        ok_or_unparsable("SELECT meta.* FROM raw.orders");
        ok_or_unparsable("SELECT o.rowid, {'a': id, 'b': customer_id}.a AS k FROM raw.orders o");
        ok_or_unparsable("SELECT struct_pack(k := id) AS s, map_extract(meta, 'k') AS m FROM raw.orders");
        ok_or_unparsable("SELECT * FROM raw.orders o ASOF JOIN raw.customers c ON o.customer_id = c.id AND o.id >= c.id");
        ok_or_unparsable("SELECT * FROM raw.orders POSITIONAL JOIN raw.customers");
        ok_or_unparsable("SELECT region, count(*) AS n FROM raw.customers GROUP BY GROUPING SETS ((region), ())");
        ok_or_unparsable("SELECT id FROM raw.orders WHERE id = ANY (SELECT customer_id FROM raw.orders) ORDER BY id NULLS LAST LIMIT 3");
        ok_or_unparsable("SELECT * FROM (WITH c AS (SELECT id FROM raw.orders) SELECT id FROM c) AS s USING SAMPLE 10%");
        ok_or_unparsable("PIVOT raw.customers ON region USING count(*)");
        ok_or_unparsable("SELECT * FROM raw.customers PIVOT (count(*) FOR region IN ('a', 'b')) AS p");
        ok_or_unparsable("SELECT 1 AS 'x', \"quoted col\" FROM (SELECT 2 AS \"quoted col\")");
        ok_or_unparsable("SELECT try_cast(id AS INT) AS i, id::INT[] AS l, INTERVAL (id) DAY AS d FROM raw.orders");
    }

    /// TPC-H's tables, as parents `tpch.<table>`.
    fn tpch(drop: &str) -> BTreeMap<String, Vec<String>> {
        let tables: &[(&str, &str)] = &[
            ("part", "p_partkey p_name p_mfgr p_brand p_type p_size p_container p_retailprice p_comment"),
            ("supplier", "s_suppkey s_name s_address s_nationkey s_phone s_acctbal s_comment"),
            ("partsupp", "ps_partkey ps_suppkey ps_availqty ps_supplycost ps_comment"),
            ("customer", "c_custkey c_name c_address c_nationkey c_phone c_acctbal c_mktsegment c_comment"),
            ("orders", "o_orderkey o_custkey o_orderstatus o_totalprice o_orderdate o_orderpriority o_clerk o_shippriority o_comment"),
            (
                "lineitem",
                "l_orderkey l_partkey l_suppkey l_linenumber l_quantity l_extendedprice l_discount l_tax l_returnflag \
                 l_linestatus l_shipdate l_commitdate l_receiptdate l_shipinstruct l_shipmode l_comment",
            ),
            ("nation", "n_nationkey n_name n_regionkey n_comment"),
            ("region", "r_regionkey r_name r_comment"),
        ];
        tables.iter().map(|(t, cols)| (format!("tpch.{t}"), cols.split_whitespace().filter(|c| *c != drop).map(str::to_string).collect())).collect()
    }

    /// Eleven TPC-H queries (correlated subqueries, derived tables with column lists, a CTE in
    /// place of Q15's view, self-joins through aliases), tables prefixed `tpch.`.
    const TPCH: &[&str] = &[
        "select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty, sum(l_extendedprice) as sum_base_price, \
         sum(l_extendedprice * (1 - l_discount)) as sum_disc_price, sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge, \
         avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price, avg(l_discount) as avg_disc, count(*) as count_order \
         from tpch.lineitem where l_shipdate <= date '1998-12-01' - interval '90' day \
         group by l_returnflag, l_linestatus order by l_returnflag, l_linestatus",
        "select s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment \
         from tpch.part, tpch.supplier, tpch.partsupp, tpch.nation, tpch.region \
         where p_partkey = ps_partkey and s_suppkey = ps_suppkey and p_size = 15 and p_type like '%BRASS' \
         and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'EUROPE' \
         and ps_supplycost = (select min(ps_supplycost) from tpch.partsupp, tpch.supplier, tpch.nation, tpch.region \
           where p_partkey = ps_partkey and s_suppkey = ps_suppkey and s_nationkey = n_nationkey \
           and n_regionkey = r_regionkey and r_name = 'EUROPE') \
         order by s_acctbal desc, n_name, s_name, p_partkey limit 100",
        "select o_orderpriority, count(*) as order_count from tpch.orders \
         where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-07-01' + interval '3' month \
         and exists (select * from tpch.lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate) \
         group by o_orderpriority order by o_orderpriority",
        "select supp_nation, cust_nation, l_year, sum(volume) as revenue from ( \
           select n1.n_name as supp_nation, n2.n_name as cust_nation, extract(year from l_shipdate) as l_year, \
                  l_extendedprice * (1 - l_discount) as volume \
           from tpch.supplier, tpch.lineitem, tpch.orders, tpch.customer, tpch.nation n1, tpch.nation n2 \
           where s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey \
           and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey \
           and ((n1.n_name = 'FRANCE' and n2.n_name = 'GERMANY') or (n1.n_name = 'GERMANY' and n2.n_name = 'FRANCE')) \
           and l_shipdate between date '1995-01-01' and date '1996-12-31') as shipping \
         group by supp_nation, cust_nation, l_year order by supp_nation, cust_nation, l_year",
        "select nation, o_year, sum(amount) as sum_profit from ( \
           select n_name as nation, extract(year from o_orderdate) as o_year, \
                  l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity as amount \
           from tpch.part, tpch.supplier, tpch.lineitem, tpch.partsupp, tpch.orders, tpch.nation \
           where s_suppkey = l_suppkey and ps_suppkey = l_suppkey and ps_partkey = l_partkey and p_partkey = l_partkey \
           and o_orderkey = l_orderkey and s_nationkey = n_nationkey and p_name like '%green%') as profit \
         group by nation, o_year order by nation, o_year desc",
        "select c_count, count(*) as custdist from ( \
           select c_custkey, count(o_orderkey) from tpch.customer left outer join tpch.orders \
             on c_custkey = o_custkey and o_comment not like '%special%requests%' group by c_custkey \
         ) as c_orders (c_custkey, c_count) group by c_count order by custdist desc, c_count desc",
        "with revenue0 (supplier_no, total_revenue) as ( \
           select l_suppkey, sum(l_extendedprice * (1 - l_discount)) from tpch.lineitem \
           where l_shipdate >= date '1996-01-01' and l_shipdate < date '1996-01-01' + interval '3' month group by l_suppkey) \
         select s_suppkey, s_name, s_address, s_phone, total_revenue from tpch.supplier, revenue0 \
         where s_suppkey = supplier_no and total_revenue = (select max(total_revenue) from revenue0) order by s_suppkey",
        "select sum(l_extendedprice) / 7.0 as avg_yearly from tpch.lineitem, tpch.part \
         where p_partkey = l_partkey and p_brand = 'Brand#23' and p_container = 'MED BOX' \
         and l_quantity < (select 0.2 * avg(l_quantity) from tpch.lineitem where l_partkey = p_partkey)",
        "select c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) \
         from tpch.customer, tpch.orders, tpch.lineitem \
         where o_orderkey in (select l_orderkey from tpch.lineitem group by l_orderkey having sum(l_quantity) > 300) \
         and c_custkey = o_custkey and o_orderkey = l_orderkey \
         group by c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice order by o_totalprice desc, o_orderdate limit 100",
        "select s_name, count(*) as numwait from tpch.supplier, tpch.lineitem l1, tpch.orders, tpch.nation \
         where s_suppkey = l1.l_suppkey and o_orderkey = l1.l_orderkey and o_orderstatus = 'F' \
         and l1.l_receiptdate > l1.l_commitdate \
         and exists (select * from tpch.lineitem l2 where l2.l_orderkey = l1.l_orderkey and l2.l_suppkey <> l1.l_suppkey) \
         and not exists (select * from tpch.lineitem l3 where l3.l_orderkey = l1.l_orderkey and l3.l_suppkey <> l1.l_suppkey \
           and l3.l_receiptdate > l3.l_commitdate) \
         and s_nationkey = n_nationkey and n_name = 'SAUDI ARABIA' group by s_name order by numwait desc, s_name limit 100",
        "select cntrycode, count(*) as numcust, sum(c_acctbal) as totacctbal from ( \
           select substring(c_phone from 1 for 2) as cntrycode, c_acctbal from tpch.customer \
           where substring(c_phone from 1 for 2) in ('13', '31', '23', '29', '30', '18', '17') \
           and c_acctbal > (select avg(c_acctbal) from tpch.customer where c_acctbal > 0.00 \
             and substring(c_phone from 1 for 2) in ('13', '31', '23', '29', '30', '18', '17')) \
           and not exists (select * from tpch.orders where o_custkey = c_custkey)) as custsale \
         group by cntrycode order by cntrycode",
    ];

    #[test]
    fn tpch_queries_resolve_cleanly_and_a_dropped_column_is_caught() {
        for q in TPCH {
            let p = unknown_columns(q, &tpch("")).unwrap_or_else(|e| panic!("{e}\n{q}"));
            assert!(p.is_empty(), "false positive in\n{q}\n{p:#?}");
        }
        for (column, queries) in [("l_discount", 4), ("c_custkey", 4), ("n_name", 4), ("ps_supplycost", 2)] {
            let hit = TPCH
                .iter()
                .filter(|q| {
                    let p = unknown_columns(q, &tpch(column)).expect("parses");
                    assert!(p.iter().all(|p| p.column == column), "{column}: {p:#?}");
                    !p.is_empty()
                })
                .count();
            assert_eq!(hit, queries, "queries reading `{column}` once it is dropped");
        }
    }

    #[test]
    fn unparsable_sql_is_an_error() {
        assert!(unknown_columns("SELEC 1", &parents()).is_err());
        assert!(unknown_columns("DELETE FROM raw.orders", &parents()).is_err());
    }

    /// Parents from `(name, "column column …")` pairs.
    fn declared(list: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
        list.iter().map(|(name, cols)| (name.to_string(), cols.split_whitespace().map(str::to_string).collect())).collect()
    }

    #[test]
    fn a_pivot_or_an_unpivot_reads_every_column_of_the_relation_it_turns() {
        let parents = declared(&[("m.p", "k v s"), ("m.q", "k")]);
        // `count(*)` names no column, but the `PIVOT` groups by `s` (every column it does not
        // name) and the `UNPIVOT` drops the rows whose `v` is NULL: `s` or `v` changed, the
        // count changes.
        for sql in [
            "SELECT count(*) AS n FROM m.p PIVOT (sum(v) FOR k IN ('a', 'b'))",
            "SELECT count(*) AS n FROM m.p UNPIVOT (val FOR nm IN (v))",
            "SELECT count(*) AS n FROM (SELECT k, v, s FROM m.p) AS t PIVOT (sum(v) FOR k IN ('a', 'b')) AS x",
        ] {
            let (cols, l) = lineage_over(Grammar::Embedded, sql, &parents);
            assert_eq!(cols, ["n <- "], "{sql}");
            assert_eq!(reads(&l), ["m.p.k", "m.p.s", "m.p.v"], "{sql}");
            assert!(l.reads_certain, "{sql}");
        }
        // Its output's columns are not known: what reads them is uncertain.
        assert_eq!(lineage_over(Grammar::Embedded, "SELECT a FROM m.p PIVOT (sum(v) FOR k IN ('a', 'b'))", &parents).0, ["a <- ?"]);
        // A subquery among its values may read anything.
        let (_, l) = lineage_over(Grammar::Embedded, "SELECT count(*) AS n FROM m.p PIVOT (sum(v) FOR k IN (SELECT k FROM m.q))", &parents);
        assert!(!l.reads_certain);
        // The names of an `IN` list are values, not columns: no problem.
        assert_eq!(unknown_columns("SELECT count(*) AS n FROM m.p PIVOT (sum(v) FOR k IN (a, b))", &parents).unwrap(), vec![]);
    }

    #[test]
    fn a_dotted_name_in_a_subquery_reads_its_own_relations_struct_column_before_an_outer_relation() {
        let parents = declared(&[("m.p", "id k z"), ("src.z", "k zone")]);
        // DuckDB binds the subquery's `z.k` to the field `k` of `m.p`'s struct column `z`, not
        // to the outer relation `z`'s column `k`.
        let sql = "SELECT z.k, (SELECT max(p.id) FROM m.p AS p WHERE p.k = z.k) AS m FROM src.z AS z";
        let (cols, l) = lineage_over(Grammar::Embedded, sql, &parents);
        assert_eq!(cols, ["k <- src.z.k", "m <- m.p.id"]);
        assert_eq!(reads(&l), ["m.p.id", "m.p.k", "m.p.z", "src.z.k"]);
        let (_, l) = lineage_over(Grammar::Embedded, "SELECT z.k, z.zone FROM src.z AS z WHERE EXISTS (SELECT 1 FROM m.p AS p WHERE p.k = z.k)", &parents);
        assert!(reads(&l).contains(&"m.p.z".to_string()), "{:?}", reads(&l));
        // Within one scope the relation comes first.
        let (cols, l) = lineage_over(Grammar::Embedded, "SELECT z.k FROM src.z AS z, m.p AS p WHERE p.id > 0", &parents);
        assert_eq!(cols, ["k <- src.z.k"]);
        assert_eq!(reads(&l), ["m.p.id", "src.z.k"]);
        // Postgres reads `z.k` as the relation's column (a composite column's field is `(z).k`).
        assert_eq!(reads(&lineage_over(Grammar::Postgres, sql, &parents).1), ["m.p.id", "m.p.k", "src.z.k"]);
    }

    #[test]
    fn a_keyword_function_without_parentheses_reads_a_column_of_its_name_in_its_own_scope() {
        let parents = declared(&[("m.p", "id current_date user"), ("m.q", "id")]);
        // DuckDB binds `current_date` (sqlparser's call without parentheses) and `user` (an
        // identifier to sqlparser) to the relation's column of that name.
        let (cols, l) = lineage_over(Grammar::Embedded, "SELECT id, current_date AS d, user AS u, localtime AS t FROM m.p", &parents);
        assert_eq!(cols, ["id <- m.p.id", "d <- m.p.current_date", "u <- m.p.user", "t <- "]);
        assert!(l.reads_certain);
        // Without such a column it is the function: no read, certain, no problem.
        let sql = "SELECT id, current_date AS d, user AS u FROM m.q";
        let (cols, l) = lineage_over(Grammar::Embedded, sql, &parents);
        assert_eq!(cols, ["id <- m.q.id", "d <- ", "u <- "]);
        assert!(l.reads_certain);
        assert_eq!(reads(&l), ["m.q.id"]);
        assert_eq!(unknown_columns(sql, &parents).unwrap(), vec![]);
        // An outer query's column of that name is not one: DuckDB calls the function.
        let sql = "SELECT p.id, (SELECT current_date FROM m.q AS q WHERE q.id = p.id) AS d FROM m.p AS p";
        assert_eq!(lineage_over(Grammar::Embedded, sql, &parents).0, ["id <- m.p.id", "d <- "]);
        // A relation whose columns are not known may have one.
        assert_eq!(lineage_over(Grammar::Embedded, "SELECT current_date AS d FROM somewhere", &parents).0, ["d <- ?"]);
        // To Postgres the unquoted keyword is the function, the quoted name the column.
        let sql = "SELECT id, current_date AS d, \"current_date\" AS c FROM m.p";
        assert_eq!(lineage_over(Grammar::Postgres, sql, &parents).0, ["id <- m.p.id", "d <- ", "c <- m.p.current_date"]);
    }

    #[test]
    fn an_argument_written_name_equals_value_is_a_comparison_reading_the_column() {
        let parents = declared(&[("s.p", "id a b")]);
        // sqlparser reads `count_if(a = 1)` as an argument named `a` with the value `1`; DuckDB
        // compares the column `a` with 1.
        let sql = "SELECT id, count_if(a = 1) AS c1, count_if(a = 1 OR b = 5) AS c2, sum(if(a = 7, b, 0)) AS c3 FROM s.p GROUP BY id";
        let (cols, l) = lineage_over(Grammar::Embedded, sql, &parents);
        assert_eq!(cols, ["id <- s.p.id", "c1 <- s.p.a", "c2 <- s.p.a, s.p.b", "c3 <- s.p.a, s.p.b"]);
        assert!(l.reads_certain);
        // A named parameter (`name := value`, a table function's `name = value`) names none.
        assert_eq!(lineage_over(Grammar::Embedded, "SELECT struct_pack(a := b) AS s FROM s.p", &parents).0, ["s <- s.p.b"]);
        assert_eq!(unknown_columns("SELECT x FROM read_csv('x.csv', header = true)", &parents).unwrap(), vec![]);
        // One no relation has is a problem, as it is to DuckDB's binder.
        let p = unknown_columns("SELECT count_if(nope = 1) AS c FROM s.p", &parents).unwrap();
        assert_eq!(p.iter().map(|p| p.column.as_str()).collect::<Vec<_>>(), ["nope"], "{p:#?}");
    }
}

#[cfg(test)]
mod postgres_grammar {
    use super::*;

    fn parents() -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([("raw.orders".to_string(), vec!["id".to_string(), "customer_id".to_string(), "amount".to_string()])])
    }

    #[test]
    fn a_postgres_body_is_resolved_in_postgres_grammar() {
        // Postgres spellings (`::`, `E''` strings, `string_agg … ORDER BY`, `DISTINCT ON`).
        let ok = "SELECT DISTINCT ON (o.customer_id) o.customer_id, string_agg(o.id::text, E'\\t' ORDER BY o.id) AS ids FROM raw.orders AS o GROUP BY o.customer_id, o.id ORDER BY o.customer_id";
        assert_eq!(unknown_columns_in(Grammar::Postgres, ok, &parents()).unwrap(), vec![]);
        let bad = ok.replace("o.id::text", "o.idd::text");
        let p = unknown_columns_in(Grammar::Postgres, &bad, &parents()).unwrap();
        assert_eq!(p.iter().map(|p| p.column.as_str()).collect::<Vec<_>>(), ["idd"], "{p:#?}");
        // What Postgres itself refuses is reported with its own message.
        let e = unknown_columns_in(Grammar::Postgres, "SELECT a FROM raw.orders USING SAMPLE 10%", &parents()).unwrap_err();
        assert!(matches!(e, SqlError::Postgres { .. }), "{e:?}");
    }
}
