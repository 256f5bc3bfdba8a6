//! Model kinds: how a model's data is materialised.
//!
//! Kinds and defaults follow the original (reference `core-semantics.md` §1.4): `full`, `view`,
//! `embedded`, `incremental_by_time_range` (batch size 30, lookback 0, grain `day`), external
//! sources, `incremental_by_unique_key` (upsert by `key`) and `scd_type2` (history by `key`,
//! see `apply::scd2`). Only data-shaping fields enter the fingerprint ([`Kind::fingerprint_payload`]):
//! `start`, `end`, `batch_size` and `lookback` (and `auto_restatement_intervals`) change how much history is computed and
//! how, not what a row means, so editing them never rebuilds. Unique-key and SCD type 2 hash every field
//! (`key`, the managed column names, the watched `columns`, `invalidate_hard_deletes`), but not
//! SCD type 2's `renamed`, which only says how to carry history over to a new version.
//! `incremental_by_partition` hashes its `partitioned_by` columns.

use super::interval::{Grain, Millis};
use super::name::{quote_ident, quote_literal};
use serde_json::{Value, json};

/// How a model is materialised.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Kind {
    /// Rebuilt as a whole table whenever its version changes.
    Full,
    /// A view in the physical schema; the environment view points at it.
    View,
    /// Never materialised: inlined as a subquery wherever it is referenced.
    Embedded,
    /// Built interval by interval on a time column.
    IncrementalByTimeRange(TimeRange),
    /// Raw data that enters the DAG; never built.
    External(External),
    /// A CSV or JSON file of the project loaded into a table; its content hash is fingerprinted.
    Seed(Seed),
    /// A table upserted by key on every build and every `run`; rows absent from the query stay.
    IncrementalByUniqueKey(UniqueKey),
    /// A history table (slowly changing dimension, type 2) reconciled by key on every build and
    /// every `run`.
    ScdType2(ScdType2),
    /// A table whose partitions (distinct tuples of `partitioned_by`) present in the query's
    /// output replace the stored ones on every build and every `run`; other partitions stay.
    IncrementalByPartition(Partitioned),
}

/// Parameters of an `incremental_by_partition` model.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Partitioned {
    /// Declared columns whose value tuple names a partition (at least one). Fingerprinted: they
    /// decide which stored rows a build replaces. NULL is a partition value like any other
    /// (compared with `IS NOT DISTINCT FROM`).
    pub partitioned_by: Vec<String>,
}

/// Parameters of an `incremental_by_unique_key` model.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct UniqueKey {
    /// Declared columns identifying a row (at least one).
    pub key: Vec<String>,
}

/// Parameters of an `scd_type2` model.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ScdType2 {
    /// Declared columns identifying an entity (at least one).
    pub key: Vec<String>,
    /// Name of the managed column holding when a version became current (default `valid_from`).
    pub valid_from: String,
    /// Name of the managed column holding when a version stopped being current, NULL while it is
    /// (default `valid_to`).
    pub valid_to: String,
    /// Watched columns: a change in one of them opens a new version. `None` = every declared
    /// non-key column.
    pub columns: Option<Vec<String>>,
    /// Whether a key missing from the source closes its open version (default true).
    pub invalidate_hard_deletes: bool,
    /// Declared column renames `(old, new)`, sorted by old name: when the environment's version
    /// has `old` and this version declares `new` instead, the new version's table is created
    /// from the old one's rows (every version, open and closed, `valid_from`/`valid_to` kept)
    /// with the column renamed, instead of starting the history over. A migration instruction,
    /// not data shape: never fingerprinted nor part of the snapshot's metadata, and ignored when
    /// the environment's version has no column `old` (e.g. once applied).
    pub renamed: Vec<(String, String)>,
}

/// Default name of the `scd_type2` column holding when a version became current.
pub const DEFAULT_VALID_FROM: &str = "valid_from";
/// Default name of the `scd_type2` column holding when a version stopped being current.
pub const DEFAULT_VALID_TO: &str = "valid_to";
/// Engine type of the managed `scd_type2` columns (UTC instants).
pub const MANAGED_TYPE: &str = "TIMESTAMP";

impl ScdType2 {
    /// The watched columns of a model declaring `declared` columns: the explicit list, or every
    /// declared non-key column.
    pub fn watched<'a>(&'a self, declared: &'a super::schema::Schema) -> Vec<&'a str> {
        match &self.columns {
            Some(c) => c.iter().map(String::as_str).collect(),
            None => declared.names().filter(|n| !self.key.iter().any(|k| k == n)).collect(),
        }
    }
}

/// Parameters of an `incremental_by_time_range` model.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TimeRange {
    /// Output column holding each row's instant; must be declared in the schema.
    pub time_column: String,
    /// First instant to compute (floored to the grain), UTC.
    pub start: Millis,
    /// Exclusive end of history to compute, UTC; `None` = up to the last finished interval.
    pub end: Option<Millis>,
    /// Interval width.
    pub grain: Grain,
    /// Grain intervals per engine transaction (default 30).
    pub batch_size: u32,
    /// Intervals before a missing one that are recomputed with it (default 0).
    pub lookback: u32,
    /// Done intervals right before the newest due one that every `run` computing that newest
    /// interval recomputes too, with the same range of the model's time-range descendants
    /// (default 0: none). Late-arriving data without a lookback on every batch. Metadata: never
    /// fingerprinted (as `lookback`), and `apply` never restates.
    #[serde(default)]
    pub auto_restatement_intervals: u32,
}

impl TimeRange {
    /// True when the grain interval starting at `start` lies within the model's `start`/`end`
    /// (its first interval starts at `start` floored to the grain).
    pub fn holds(&self, start: Millis) -> bool {
        start >= self.grain.floor(self.start) && self.end.is_none_or(|e| start < e)
    }
}

/// Default `batch_size` of time-range models.
pub const DEFAULT_BATCH_SIZE: u32 = 30;

/// Where an external source's rows come from.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub enum External {
    /// An existing engine relation, `[catalog.]schema.table`, rendered with each part quoted.
    Table {
        /// Dotted relation name as written.
        name: String,
    },
    /// Files read by the engine (a path or glob, relative to the project directory or absolute).
    Files {
        /// Path or glob as written in the model (this text is fingerprinted).
        path: String,
        /// File format.
        format: FileFormat,
        /// `union_by_name` reader option, rendered only when set.
        union_by_name: Option<bool>,
        /// `hive_partitioning` reader option, rendered only when set.
        hive_partitioning: Option<bool>,
        /// Extra CSV null markers (e.g. `NA`); rendered only when non-empty.
        null_markers: Vec<String>,
        /// CSV reader options (`delimiter`, `header`), rendered only when set; `None` for other
        /// formats.
        csv: Option<CsvOptions>,
    },
}

/// Reader options of CSV externals beyond the defaults (`,` or a tab for `.tsv`, a header row).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CsvOptions {
    /// Field delimiter (`delim`), one character; when `None`, a tab for a path ending in `.tsv`
    /// (or `.tsv.gz`), else `,` (never sniffed).
    pub delimiter: Option<String>,
    /// Whether the first line names the columns (default `true`).
    pub header: Option<bool>,
}

/// A seed: a small CSV or JSON file of the project, loaded into the seed's physical table by
/// `apply` (see `crate::seed`). The file's bytes are hashed when the project loads, and that hash
/// is part of the fingerprint: editing the file makes a new version; an unchanged file rebuilds
/// nothing.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Seed {
    /// The file as written in the model, relative to the project directory (or absolute). This
    /// text is fingerprinted, not the resolved path, so moving the project never rebuilds.
    pub path: String,
    /// `csv` or `json` (never `parquet`: parquet files are externals).
    pub format: FileFormat,
    /// Unquoted CSV values read as NULL besides the empty field (e.g. `NA`).
    pub null_markers: Vec<String>,
    /// CSV field delimiter; `None` = `,` (or a tab for `.tsv` files).
    pub delimiter: Option<char>,
    /// blake3 of the file's bytes (64 hex), filled when the project loads; empty before.
    pub content_hash: String,
}

impl Seed {
    /// The delimiter the CSV reader uses: the declared one, else a tab for `.tsv`, else `,`.
    pub fn effective_delimiter(&self) -> char {
        self.delimiter.unwrap_or_else(|| if self.path.to_ascii_lowercase().ends_with(".tsv") { '\t' } else { ',' })
    }

    /// The fingerprinted fields: `{"tag": "seed", "path", "format", "null_markers",
    /// ["delimiter",] "content": <blake3 hex of the file>}`.
    pub fn fingerprint_payload(&self) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("tag".into(), json!("seed"));
        o.insert("path".into(), json!(self.path));
        o.insert("format".into(), json!(self.format.as_str()));
        o.insert("null_markers".into(), json!(self.null_markers));
        if let Some(d) = self.delimiter {
            o.insert("delimiter".into(), json!(d.to_string()));
        }
        o.insert("content".into(), json!(self.content_hash));
        Value::Object(o)
    }
}

/// Formats of file-backed externals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FileFormat {
    /// `read_csv`, header row expected.
    Csv,
    /// `read_parquet`.
    Parquet,
    /// `read_json`.
    Json,
}

impl FileFormat {
    /// Parses `csv`, `parquet` or `json`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "csv" => Some(Self::Csv),
            "parquet" => Some(Self::Parquet),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    /// Infers the format from a path's extension.
    pub fn infer(path: &str) -> Option<Self> {
        let lower = path.to_ascii_lowercase();
        let lower = lower.strip_suffix(".gz").unwrap_or(&lower);
        if lower.ends_with(".csv") || lower.ends_with(".tsv") {
            Some(Self::Csv)
        } else if lower.ends_with(".parquet") {
            Some(Self::Parquet)
        } else if lower.ends_with(".json") || lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
            Some(Self::Json)
        } else {
            None
        }
    }

    /// `csv`, `parquet` or `json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Parquet => "parquet",
            Self::Json => "json",
        }
    }
}

impl Kind {
    /// The kind's tag as written in model files: `full`, `view`, `embedded`,
    /// `incremental_by_time_range`, `external`.
    pub fn tag(&self) -> &'static str {
        match self {
            Kind::Full => "full",
            Kind::View => "view",
            Kind::Embedded => "embedded",
            Kind::IncrementalByTimeRange(_) => "incremental_by_time_range",
            Kind::External(_) => "external",
            Kind::Seed(_) => "seed",
            Kind::IncrementalByUniqueKey(_) => "incremental_by_unique_key",
            Kind::ScdType2(_) => "scd_type2",
            Kind::IncrementalByPartition(_) => "incremental_by_partition",
        }
    }

    /// True for kinds that `run` re-executes on the environment's current version
    /// (`incremental_by_unique_key`, `scd_type2`, `incremental_by_partition`).
    pub fn is_refreshed(&self) -> bool {
        matches!(self, Kind::IncrementalByUniqueKey(_) | Kind::ScdType2(_) | Kind::IncrementalByPartition(_))
    }

    /// True for kinds a `cron` gates as a whole (`full` and the [`Kind::is_refreshed`] ones):
    /// `run` refreshes them at its ticks, not interval by interval.
    pub fn is_refreshed_whole(&self) -> bool {
        matches!(self, Kind::Full) || self.is_refreshed()
    }

    /// Columns efmesh adds to the physical table and the environment view after the declared
    /// ones (the query does not produce them): `scd_type2`'s `valid_from` and `valid_to`
    /// (`TIMESTAMP`, UTC). Empty for other kinds.
    pub fn managed_columns(&self) -> Vec<super::schema::Column> {
        match self {
            Kind::ScdType2(s) => [&s.valid_from, &s.valid_to].into_iter().map(|n| super::schema::Column { name: n.clone(), ty: MANAGED_TYPE.into() }).collect(),
            _ => Vec::new(),
        }
    }

    /// The time-range parameters, if this is a time-range kind.
    pub fn time_range(&self) -> Option<&TimeRange> {
        match self {
            Kind::IncrementalByTimeRange(t) => Some(t),
            _ => None,
        }
    }

    /// True for kinds that own a physical relation (`full`, `view`, time-range, unique-key,
    /// SCD type 2, partition, `seed`).
    pub fn is_materialized(&self) -> bool {
        matches!(
            self,
            Kind::Full
                | Kind::View
                | Kind::IncrementalByTimeRange(_)
                | Kind::IncrementalByUniqueKey(_)
                | Kind::ScdType2(_)
                | Kind::IncrementalByPartition(_)
                | Kind::Seed(_)
        )
    }

    /// True for kinds that take no query: externals and seeds.
    pub fn is_bodiless(&self) -> bool {
        matches!(self, Kind::External(_) | Kind::Seed(_))
    }

    /// The data-shaping fields, as hashed into the fingerprint. Excludes `start`, `end`,
    /// `batch_size` and `lookback` (see the module docs).
    pub fn fingerprint_payload(&self) -> Value {
        match self {
            Kind::IncrementalByTimeRange(t) => json!({
                "tag": self.tag(),
                "time_column": t.time_column,
                "grain": t.grain.as_str(),
            }),
            Kind::External(External::Table { name }) => json!({"tag": self.tag(), "table": name}),
            Kind::External(External::Files { path, format, union_by_name, hive_partitioning, null_markers, csv }) => {
                let mut payload = json!({
                    "tag": self.tag(),
                    "path": path,
                    "format": format.as_str(),
                    "union_by_name": union_by_name,
                    "hive_partitioning": hive_partitioning,
                    "null_markers": null_markers,
                });
                // How the reader reads changed for these (rows change: a new version): an empty
                // field beside null markers is NULL (it was ''), a JSON file's columns are cast
                // to their declared types (a column DuckDB left `JSON` was served as JSON text).
                if let Some(o) = payload.as_object_mut() {
                    if *format == FileFormat::Csv && !null_markers.is_empty() {
                        o.insert("empty_is_null".into(), json!(true));
                    }
                    if *format == FileFormat::Json {
                        o.insert("cast_to_declared".into(), json!(true));
                    }
                }
                // CSV reader options arrived later: hashed only when set, so the fingerprints of
                // externals that do not use them stay what they were.
                if let (Some(csv), Some(o)) = (csv, payload.as_object_mut()) {
                    if let Some(d) = &csv.delimiter {
                        o.insert("delimiter".into(), json!(d));
                    }
                    if let Some(h) = csv.header {
                        o.insert("header".into(), json!(h));
                    }
                }
                payload
            }
            Kind::Seed(seed) => seed.fingerprint_payload(),
            Kind::IncrementalByUniqueKey(u) => json!({"tag": self.tag(), "key": u.key}),
            Kind::IncrementalByPartition(p) => json!({"tag": self.tag(), "partitioned_by": p.partitioned_by}),
            Kind::ScdType2(s) => json!({
                "tag": self.tag(),
                "key": s.key,
                "valid_from": s.valid_from,
                "valid_to": s.valid_to,
                "columns": s.columns,
                "invalidate_hard_deletes": s.invalidate_hard_deletes,
            }),
            _ => json!({"tag": self.tag()}),
        }
    }
}

impl External {
    /// True when the reader cannot be given the declared types, so the relation consumers read
    /// casts each declared column instead: CSV files read with `union_by_name` (DuckDB's `types`
    /// option must name columns that every file has), and JSON files (DuckDB infers `JSON` for a
    /// field it cannot type, e.g. null in every row sampled, or of several types: the cast makes
    /// it the declared type, or fails the build naming the value).
    pub fn typed_by_consumers(&self) -> bool {
        matches!(self, External::Files { format: FileFormat::Csv, union_by_name: Some(true), .. } | External::Files { format: FileFormat::Json, .. })
    }

    /// True when this source reads a column declared `ty` as text, for the relation consumers
    /// read to cast ([`crate::core::schema::csv_reader_nulls_bad_values`]): a CSV file given its
    /// declared types (not one [`Self::typed_by_consumers`], whose columns are all cast there).
    pub fn reads_as_text(&self, ty: &str) -> bool {
        self.guards_zoned(ty) && !self.typed_by_consumers()
    }

    /// True when the relation consumers read casts a column declared `ty` of this source with a
    /// failing guard ([`Self::read_column`]): a zoned time in a CSV file, read as text — given
    /// `varchar` among the declared types ([`Self::reads_as_text`]), or, for a CSV glob read
    /// with `union_by_name` (no declared types), never sniffed as a zoned time (its
    /// `auto_type_candidates` leave them out, so DuckDB's reader cannot turn a later value into
    /// NULL: the column is text, or a naive `TIMESTAMP`, which fails on a bad value).
    pub fn guards_zoned(&self, ty: &str) -> bool {
        matches!(self, External::Files { format: FileFormat::Csv, .. }) && super::schema::csv_reader_nulls_bad_values(ty)
    }

    /// The column the relation consumers read has each row's file in when it names the file of
    /// a refused value ([`Self::names_files`]): a reserved name, since DuckDB's `filename`
    /// virtual column is shadowed by a real column of that name. The relation's projection of
    /// the declared columns leaves it out.
    pub const FILE_COLUMN: &'static str = "__efmesh_file";

    /// True when the relation consumers read names the file holding a value its guard refuses
    /// ([`Self::read_column`]): a CSV glob (the path as written holds `*`, `?`, `[` or `{`),
    /// some column of which (`columns`, the declared ones) is guarded ([`Self::guards_zoned`]).
    /// A single file is named by the path as written already.
    pub fn names_files(&self, columns: &[super::schema::Column]) -> bool {
        matches!(self, External::Files { path, format: FileFormat::Csv, .. } if path.contains(['*', '?', '[', '{']))
            && columns.iter().any(|c| self.guards_zoned(&c.ty))
    }

    /// The expression the relation consumers read selects for column `c` of this source (as
    /// `c`): a column read as text ([`Self::reads_as_text`]) cast to its declared type, a value
    /// that is none failing the build with a message naming `what` (the model and where the
    /// file is), the column and the value — and, given `in_file` (the source read by
    /// [`Self::render_for_consumers`] for a source that [`Self::names_files`]), ending with
    /// ` (in <the matched file>)`; any other column as read.
    pub fn read_column(&self, c: &super::schema::Column, what: &str, in_file: bool) -> String {
        let q = quote_ident(&c.name);
        if !self.guards_zoned(&c.ty) {
            return q;
        }
        let before = format!("{what}: column `{}` holds `", c.name);
        let after = format!("`, which is no `{}` (a value meaning no value belongs in the model's `null_markers`)", c.ty);
        let file = if in_file { format!(" || ' (in ' || {} || ')'", quote_ident(Self::FILE_COLUMN)) } else { String::new() };
        format!(
            "CASE WHEN {q} IS NULL THEN NULL ELSE coalesce(TRY_CAST({q} AS {ty}), error({} || {q} || {}{file})) END AS {q}",
            quote_literal(&before),
            quote_literal(&after),
            ty = c.ty
        )
    }

    /// The SQL relation expression reading this source. `resolve_path` turns the path as
    /// written into the one the engine should open (e.g. absolute against the project dir).
    /// Its columns are the source's own (what the contract check describes and `efmesh render`
    /// shows); see [`Self::render_for_consumers`].
    pub fn render(&self, resolve_path: &dyn Fn(&str) -> String, columns: &[super::schema::Column]) -> String {
        self.render_reading(resolve_path, columns, false)
    }

    /// [`Self::render`] for the relation consumers read, which projects the declared columns:
    /// for a source that [`Self::names_files`], read with DuckDB's `filename` option too, each
    /// row's file in [`Self::FILE_COLUMN`] for the guard's message ([`Self::read_column`]).
    pub fn render_for_consumers(&self, resolve_path: &dyn Fn(&str) -> String, columns: &[super::schema::Column]) -> String {
        self.render_reading(resolve_path, columns, self.names_files(columns))
    }

    /// [`Self::render`], with `filename = '<FILE_COLUMN>'` among a CSV reader's options when
    /// `file_column`.
    fn render_reading(&self, resolve_path: &dyn Fn(&str) -> String, columns: &[super::schema::Column], file_column: bool) -> String {
        match self {
            External::Table { name } => name.split('.').map(quote_ident).collect::<Vec<_>>().join("."),
            External::Files { path, format, union_by_name, hive_partitioning, null_markers, csv } => {
                let mut args = vec![quote_literal(&resolve_path(path))];
                if *format == FileFormat::Csv {
                    let csv = csv.clone().unwrap_or_default();
                    args.push(format!("header = {}", csv.header.unwrap_or(true)));
                    // Never sniffed: the declared delimiter, else a tab for `.tsv` files, else
                    // `,` (as seeds are read): DuckDB's sniffer may pick a character that splits
                    // a field (`Smith; John` read as `Smith`), and no line but the header is
                    // skipped (it may take a short first record for a preamble and drop it).
                    let tsv = path.to_ascii_lowercase().trim_end_matches(".gz").ends_with(".tsv");
                    let delimiter = csv.delimiter.clone().unwrap_or_else(|| if tsv { "\t".to_string() } else { ",".to_string() });
                    args.push(format!("delim = {}", quote_literal(&delimiter)));
                    // The quote is RFC 4180's, never sniffed either: DuckDB samples the first
                    // rows for it, and a file whose first 20 480 rows quote nothing was read with
                    // no quote at all (`"q"` served with its quotes, a quoted `""` as two quote
                    // characters rather than NULL). The escape inside quotes is still sniffed
                    // (`""`, or `\"` in a dump that escapes with backslashes).
                    args.push("quote = '\"'".to_string());
                    args.push("skip = 0".to_string());
                    if csv.header == Some(false) && !columns.is_empty() {
                        // Without a header the declared columns name the fields, in order.
                        let names = columns.iter().map(|c| quote_literal(&c.name)).collect::<Vec<_>>();
                        args.push(format!("names = [{}]", names.join(", ")));
                    }
                    // A zoned time is read as text: DuckDB's reader turns a value it cannot convert
                    // into NULL ([`Self::reads_as_text`]).
                    let types = columns
                        .iter()
                        .map(|c| format!("{}: {}", quote_literal(&c.name), quote_literal(if self.reads_as_text(&c.ty) { "varchar" } else { &c.ty })))
                        .collect::<Vec<_>>();
                    if !types.is_empty() && !self.typed_by_consumers() {
                        args.push(format!("types = {{{}}}", types.join(", ")));
                    } else if self.typed_by_consumers() && columns.iter().any(|c| self.guards_zoned(&c.ty)) {
                        // Sniffed, never as a zoned time ([`Self::guards_zoned`]): DuckDB's
                        // default candidates less the zoned ones.
                        args.push("auto_type_candidates = ['BOOLEAN', 'BIGINT', 'DOUBLE', 'TIME', 'DATE', 'TIMESTAMP', 'VARCHAR']".to_string());
                    }
                    if !null_markers.is_empty() {
                        // The empty field stays NULL besides the markers (as without them, and
                        // as seeds read it).
                        let mut list = null_markers.iter().map(|m| quote_literal(m)).collect::<Vec<_>>();
                        if !null_markers.iter().any(String::is_empty) {
                            list.push("''".to_string());
                        }
                        args.push(format!("nullstr = [{}]", list.join(", ")));
                    }
                }
                if let Some(b) = union_by_name {
                    args.push(format!("union_by_name = {b}"));
                }
                if let Some(b) = hive_partitioning {
                    args.push(format!("hive_partitioning = {b}"));
                }
                if file_column && *format == FileFormat::Csv {
                    args.push(format!("filename = {}", quote_literal(Self::FILE_COLUMN)));
                }
                let func = match format {
                    FileFormat::Csv => "read_csv",
                    FileFormat::Parquet => "read_parquet",
                    FileFormat::Json => "read_json",
                };
                format!("{func}({})", args.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduling_fields_stay_out_of_the_fingerprint_payload() {
        let mk = |batch_size, lookback, start| {
            Kind::IncrementalByTimeRange(TimeRange {
                time_column: "t".into(),
                start,
                end: None,
                grain: Grain::Day,
                batch_size,
                lookback,
                auto_restatement_intervals: lookback,
            })
        };
        assert_eq!(mk(30, 0, 0).fingerprint_payload(), mk(7, 2, 86_400_000).fingerprint_payload());
    }

    /// A zoned time is read from a CSV file as text and cast for the consumers, a value that is
    /// none failing with the message; other columns, and other formats, keep their types. A
    /// glob's relation for the consumers (only it) reads each row's file too, and the message
    /// ends naming it; a single file's does not.
    #[test]
    fn csv_zoned_times_are_read_as_text_and_cast_with_a_failing_guard() {
        let col = |n: &str, ty: &str| super::super::schema::Column { name: n.into(), ty: ty.into() };
        let files = |p: &str, format| External::Files { path: p.into(), format, union_by_name: None, hive_partitioning: None, null_markers: vec![], csv: None };
        let ext = |format| files("x", format);
        let cols = [col("t", "timestamptz"), col("w", "TIME WITH TIME ZONE"), col("n", "timestamp")];
        let csv = ext(FileFormat::Csv);
        assert!(csv.render(&|p| p.to_string(), &cols).ends_with("types = {'t': 'varchar', 'w': 'varchar', 'n': 'timestamp'})"));
        assert_eq!(
            csv.read_column(&cols[0], "external `r.x`", false),
            "CASE WHEN \"t\" IS NULL THEN NULL ELSE coalesce(TRY_CAST(\"t\" AS timestamptz), error('external `r.x`: column `t` holds `' || \"t\" || '`, which is no `timestamptz` (a value meaning no value belongs in the model''s `null_markers`)')) END AS \"t\""
        );
        assert_eq!(csv.read_column(&cols[2], "external `r.x`", false), "\"t\"".replace('t', "n"));
        assert!(!ext(FileFormat::Parquet).reads_as_text("timestamptz") && !ext(FileFormat::Json).reads_as_text("timestamptz"));
        // A single file: read as `render` reads it, the message unchanged.
        assert!(!csv.names_files(&cols));
        assert_eq!(csv.render_for_consumers(&|p| p.to_string(), &cols), csv.render(&|p| p.to_string(), &cols));
        // A glob (any of `*`, `?`, `[`, `{`) with a guarded column: the consumers' read adds the
        // file column, `render` (the contract's DESCRIBE, `efmesh render`) does not.
        for path in ["d/*.csv", "d/?.csv", "d/[ab].csv", "d/{a,b}.csv"] {
            assert!(files(path, FileFormat::Csv).names_files(&cols), "{path}");
        }
        let glob = files("d/*.csv", FileFormat::Csv);
        assert!(glob.render_for_consumers(&|p| p.to_string(), &cols).ends_with("'n': 'timestamp'}, filename = '__efmesh_file')"));
        assert!(!glob.render(&|p| p.to_string(), &cols).contains("filename"));
        assert_eq!(
            glob.read_column(&cols[0], "external `r.x`", true),
            "CASE WHEN \"t\" IS NULL THEN NULL ELSE coalesce(TRY_CAST(\"t\" AS timestamptz), error('external `r.x`: column `t` holds `' || \"t\" || '`, which is no `timestamptz` (a value meaning no value belongs in the model''s `null_markers`)' || ' (in ' || \"__efmesh_file\" || ')')) END AS \"t\""
        );
        // No guarded column, or no CSV: nothing to name.
        assert!(!glob.names_files(&cols[2..]));
        assert!(!files("d/*.parquet", FileFormat::Parquet).names_files(&cols));
        assert!(!files("d/*.parquet", FileFormat::Parquet).render_for_consumers(&|p| p.to_string(), &cols).contains("filename"));
    }

    #[test]
    fn csv_externals_render_declared_types_and_null_markers() {
        let ext = External::Files {
            path: "data/x.csv".into(),
            format: FileFormat::Csv,
            union_by_name: None,
            hive_partitioning: None,
            null_markers: vec!["NA".into()],
            csv: None,
        };
        let cols = [super::super::schema::Column { name: "a".into(), ty: "bigint".into() }];
        let sql = ext.render(&|p| format!("/root/{p}"), &cols);
        assert_eq!(sql, "read_csv('/root/data/x.csv', header = true, delim = ',', quote = '\"', skip = 0, types = {'a': 'bigint'}, nullstr = ['NA', ''])");
        let tsv = External::Files {
            path: "data/x.tsv.gz".into(),
            format: FileFormat::Csv,
            union_by_name: None,
            hive_partitioning: None,
            null_markers: vec![],
            csv: None,
        };
        assert_eq!(
            tsv.render(&|p| p.to_string(), &cols),
            "read_csv('data/x.tsv.gz', header = true, delim = '\t', quote = '\"', skip = 0, types = {'a': 'bigint'})"
        );
    }

    #[test]
    fn csv_options_are_hashed_only_when_set() {
        let ext = |csv: Option<CsvOptions>| {
            Kind::External(External::Files {
                path: "data/*.csv".into(),
                format: FileFormat::Csv,
                union_by_name: None,
                hive_partitioning: None,
                null_markers: vec![],
                csv,
            })
        };
        // The payload of an external without the options is what it was before they existed.
        assert_eq!(
            ext(None).fingerprint_payload().to_string(),
            r#"{"tag":"external","path":"data/*.csv","format":"csv","union_by_name":null,"hive_partitioning":null,"null_markers":[]}"#
        );
        let with = ext(Some(CsvOptions { delimiter: Some("|".into()), header: Some(false) })).fingerprint_payload();
        assert_eq!((with["delimiter"].as_str(), with["header"].as_bool()), (Some("|"), Some(false)));
    }

    #[test]
    fn seeds_hash_their_content_and_declaration() {
        let seed = |hash: &str, delimiter| {
            Kind::Seed(Seed { path: "seeds/x.csv".into(), format: FileFormat::Csv, null_markers: vec![], delimiter, content_hash: hash.into() })
        };
        let p = seed("ab", None).fingerprint_payload();
        assert_eq!(p.to_string(), r#"{"tag":"seed","path":"seeds/x.csv","format":"csv","null_markers":[],"content":"ab"}"#);
        assert_ne!(p, seed("cd", None).fingerprint_payload());
        assert_ne!(p, seed("ab", Some(';')).fingerprint_payload());
        assert!(seed("ab", None).is_materialized() && seed("ab", None).is_bodiless());
    }
}
