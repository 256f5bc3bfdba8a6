//! A model: a named, typed, kind-tagged query, and where it was defined.

use super::fragment::Fragment;
use super::kind::Kind;
use super::name::ModelName;
use super::schema::Schema;
use super::target::Target;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// A place in a project file: path relative to the project directory, 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Location {
    /// File path, relative to the project directory when inside it.
    pub file: PathBuf,
    /// 1-based line; 0 when unknown.
    pub line: u32,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 { write!(f, "{}:{}", self.file.display(), self.line) } else { write!(f, "{}", self.file.display()) }
    }
}

/// One model as loaded from the project.
///
/// `Hash` covers every field (the plan memo keys on it, `plan::memo::key`): a field added here
/// must be hashable, so it can never be forgotten by the memo.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Model {
    /// `schema.table`.
    pub name: ModelName,
    /// Materialisation.
    pub kind: Kind,
    /// Declared output columns, in order: the schema contract.
    pub schema: Schema,
    /// The query; `None` for externals.
    pub body: Option<Fragment>,
    /// Columns that identify a row (documentation and later diffing); fingerprinted.
    pub grain: Vec<String>,
    /// Free text; not fingerprinted.
    pub description: Option<String>,
    /// Where `define_model` was called.
    pub location: Location,
    /// Where the model's data is stored (`table` unless the model says `target = …`).
    pub target: Target,
    /// Audits attached to the model (metadata: not fingerprinted).
    pub audits: Vec<super::audit::Audit>,
    /// When the model's intervals are due (sqlmesh's `cron`, UTC), as written; checked at load
    /// ([`super::cron`]). Metadata: not fingerprinted. `None`: every finished interval is due.
    pub cron: Option<String>,
    /// SQL statements run before and after the model's write, in the same engine transaction
    /// (sqlmesh's pre/post statements). Fingerprinted only when `affect_data` is set
    /// ([`Statements::affect_data`]); otherwise metadata (an edit is a `metadata` change).
    pub statements: Statements,
    /// Who answers for the model (sqlmesh's `owner`). Metadata: not fingerprinted.
    pub owner: Option<String>,
    /// Free labels (sqlmesh's `tags`), in the order written, without duplicates; selectable
    /// with `tag:` ([`super::select`]). Metadata: not fingerprinted.
    pub tags: Vec<String>,
    /// Descriptions of declared columns (sqlmesh's `column_descriptions`), in schema order,
    /// each naming a column of the model (checked at load). Metadata: not fingerprinted.
    pub column_descriptions: Vec<(String, String)>,
    /// `efmesh check` lint rules not run on this model (sqlmesh's `ignored_rules`), each a rule
    /// name (checked at load). Not fingerprinted, not metadata: it changes no plan.
    pub ignored_lints: Vec<String>,
    /// Signals gating this model's intervals at `run` (`incremental_by_time_range` models only;
    /// checked at load against the `define_signal` definitions). Neither fingerprinted nor part
    /// of the model's metadata: editing or adding a signal changes no version and blocks no run.
    pub signals: Vec<SignalUse>,
    /// The file line of each line of the query (`body`, as written, macro calls expanded), in
    /// order, so an error the SQL parser or the engine places at a line of the query is reported
    /// at that line of the file ([`Model::query_location`]): every `.sql` model's; a Lua or Rhai
    /// model's when the text its script built is written as it is in the file of its
    /// `define_model` call (literals around `ref()`/`cols()` calls:
    /// `script::builder::script_query_lines`), else empty.
    #[serde(default)]
    pub query_lines: Vec<u32>,
}

/// A model's pre/post statements ([`Model::statements`]).
#[derive(Debug, Clone, PartialEq, Default, Hash, serde::Serialize, serde::Deserialize)]
pub struct Statements {
    /// Run before the write, in order, in the write's transaction.
    pub pre: Vec<Statement>,
    /// Run after the write (and before the audits), in order, in the same transaction.
    pub post: Vec<Statement>,
    /// True when the statements shape the data (`statements_affect_data = true`): their
    /// canonical text then enters the fingerprint, so an edit is a breaking change. False: they
    /// are metadata.
    pub affect_data: bool,
}

/// One pre or post statement: SQL text with the interval bounds and `@this` as markers.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Statement {
    /// The statement (no `ref`/`cols` sites: only text, bounds and `@this`).
    pub sql: Fragment,
    /// Where it is written: its own line in a `.sql` file, the `define_model` call otherwise.
    pub location: Location,
}

impl Statements {
    /// True when the model has no statement.
    pub fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty()
    }

    /// Every statement with its position: `("pre", 1-based index, statement)`, pre first.
    pub fn each(&self) -> impl Iterator<Item = (&'static str, usize, &Statement)> {
        let pre = self.pre.iter().enumerate().map(|(i, s)| ("pre", i + 1, s));
        pre.chain(self.post.iter().enumerate().map(|(i, s)| ("post", i + 1, s)))
    }
}

/// One use of a signal by a model: `signals = { "name", { "name", key = value } }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SignalUse {
    /// The signal's name (as given to `define_signal`).
    pub name: String,
    /// Its named arguments, a JSON object as text (keys sorted).
    pub args: String,
    /// Where the use is written (the model's `define_model`, or the `.sql` header line).
    pub location: Location,
}

impl SignalUse {
    /// The arguments as a JSON object.
    pub fn args_map(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(&self.args).unwrap_or_default()
    }
}

impl Model {
    /// A model of `name`, `kind`, declared `schema`, `body` and `location`, with none of the
    /// optional fields: no grain, description, audits, cron, pre/post statements, properties,
    /// lint opt-outs or signals, stored as a `table`. The start of a model built in code (tests,
    /// tools): `Model { grain, ..Model::new(…) }` sets the rest.
    pub fn new(name: ModelName, kind: Kind, schema: Schema, body: Option<Fragment>, location: Location) -> Model {
        Model {
            name,
            kind,
            schema,
            body,
            grain: Vec::new(),
            description: None,
            location,
            target: Target::Table,
            audits: Vec::new(),
            cron: None,
            statements: Statements::default(),
            owner: None,
            tags: Vec::new(),
            column_descriptions: Vec::new(),
            ignored_lints: Vec::new(),
            signals: Vec::new(),
            query_lines: Vec::new(),
        }
    }

    /// Where line `n` (1-based) of the query is written in the model's file
    /// ([`Model::query_lines`]); `None` when that is not known, or for a line past the query.
    pub fn query_location(&self, n: u64) -> Option<Location> {
        let line = *self.query_lines.get(usize::try_from(n).ok()?.checked_sub(1)?)?;
        Some(Location { file: self.location.file.clone(), line })
    }

    /// Where an error at line `n` of the query (when known) is reported: that line of the model's
    /// file ([`Model::query_location`]), otherwise the model's own location.
    pub fn location_of_query_line(&self, n: Option<u64>) -> Location {
        n.and_then(|n| self.query_location(n)).unwrap_or_else(|| self.location.clone())
    }

    /// A model for unit tests: `name` of `kind` reading `SELECT 1 AS x FROM` each of `parents`
    /// (refs), one column `x` (integer; a timestamp for a time-range model), written at `m.lua:1`.
    #[cfg(test)]
    pub(crate) fn fixture(name: &str, kind: Kind, parents: &[&str]) -> Model {
        use super::fragment::{Node, RefSite};
        let location = Location { file: "m.lua".into(), line: 1 };
        let mut body = Fragment::default();
        body.push_text("SELECT 1 AS x");
        for (i, p) in parents.iter().enumerate() {
            body.push_text(if i == 0 { " FROM " } else { ", " });
            body.nodes.push(Node::Ref(RefSite { target: ModelName::parse(p).unwrap(), location: location.clone() }));
        }
        // A time-range model's time column holds times.
        let ty = if matches!(kind, Kind::IncrementalByTimeRange(_)) { "timestamp" } else { "integer" };
        let columns = Schema(vec![super::schema::Column { name: "x".into(), ty: ty.into() }]);
        Model::new(ModelName::parse(name).unwrap(), kind, columns, Some(body), location)
    }

    /// The description of column `name` (case-insensitive), when the model gives one.
    pub fn column_description(&self, name: &str) -> Option<&str> {
        self.column_descriptions.iter().find(|(c, _)| c.eq_ignore_ascii_case(name)).map(|(_, d)| d.as_str())
    }

    /// The instant up to which this model's intervals are due at `now`: its cron's last tick at
    /// or before `now`, or `now` without a cron ([`super::cron::due_at`]). Intervals are wanted up
    /// to the grain floor of it.
    pub fn due_at(&self, now: super::interval::Millis) -> super::interval::Millis {
        super::cron::due_at(self.schedule().as_ref(), now)
    }

    /// Its `cron`, parsed; `None` without one. The cron was checked at load; one that no longer
    /// parses (never: same text, same parser) leaves the model unscheduled rather than held back.
    pub fn schedule(&self) -> Option<croner::Cron> {
        self.cron.as_deref().and_then(|c| super::cron::parse(c).ok())
    }

    /// `cron = "@daily"` as the language of the model's file writes it, in backquotes, for a hint
    /// to give a model a cron: `-- cron: @daily` in a `.sql` file, `cron: "@daily"` in Rhai,
    /// `cron = "@daily"` in Lua.
    pub fn cron_example(&self) -> &'static str {
        match self.location.file.extension().and_then(|e| e.to_str()) {
            Some("sql") => "`-- cron: @daily`",
            Some("rhai") => "`cron: \"@daily\"`",
            _ => "`cron = \"@daily\"`",
        }
    }

    /// Direct parents: every referenced model, sorted and de-duplicated.
    pub fn parents(&self) -> BTreeSet<ModelName> {
        self.body.iter().flat_map(|b| b.refs().map(|r| r.target.clone())).collect()
    }

    /// The models its audits read besides the model itself (`ref()` in an audit body, e.g.
    /// `relationships`' `to`). Not parents: they never enter the fingerprint; they order the
    /// apply (the audits run after them) and re-run the audits when their data changes.
    pub fn audit_refs(&self) -> BTreeSet<ModelName> {
        self.audits.iter().flat_map(|a| a.sql.refs().map(|r| r.target.clone())).collect()
    }

    /// What must be built before this model's audits can run: its [`Model::parents`] and its
    /// [`Model::audit_refs`]. The DAG's order and cycle check, and apply's scheduling, use these.
    pub fn dependencies(&self) -> BTreeSet<ModelName> {
        let mut d = self.parents();
        d.extend(self.audit_refs());
        d
    }

    /// The columns the model's relation exposes to children and environment views: the declared
    /// ones, then the kind's managed ones (`scd_type2`'s `valid_from`/`valid_to`).
    pub fn relation_columns(&self) -> Vec<super::schema::Column> {
        let mut cols = self.schema.0.clone();
        cols.extend(self.kind.managed_columns());
        cols
    }

    /// The data-shaping definition of the kind as fingerprinted and compared by the plan:
    /// [`Kind::fingerprint_payload`], plus `"target"` when the target is not the default
    /// `table` (so table models keep the fingerprints they always had).
    pub fn kind_payload(&self) -> serde_json::Value {
        let mut v = self.kind.fingerprint_payload();
        if self.target != Target::Table
            && let serde_json::Value::Object(m) = &mut v
        {
            m.insert("target".into(), serde_json::Value::String(self.target.as_str().into()));
        }
        v
    }
}
