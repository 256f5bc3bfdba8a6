//! Storage targets: where a materialised model version keeps its data.
//!
//! Every version of a model has one *physical relation* that environment views select from
//! (reference `core-semantics.md` §1.5). The target decides what that relation is:
//!
//! | target | physical relation | data |
//! |---|---|---|
//! | `table` (default) | table `"_efmesh"."<s>__<t>__<fp>"` | in the DuckDB file |
//! | `parquet` | view `"_efmesh"."<s>__<t>__<fp>"` over `read_parquet([...])` | parquet files in the lake (`[lake] path`: a local directory or `s3://bucket/prefix`) |
//! | `ducklake` | table `"_efmesh_ducklake"."main"."<s>__<t>__<fp>"` | a DuckLake catalog attached under a fixed alias (`[ducklake]`) |
//!
//! The target is part of a model's data-shaping definition: it enters the fingerprint (only
//! when it is not the default `table`, so existing fingerprints never move), and changing it is
//! a breaking change. Only `full` and `incremental_by_time_range` models may name a non-default
//! target.

use super::error::LoadError;
use super::fragment::skip_literal_or_comment;
use super::kind::Kind;
use super::model::Model;
use super::name::{ModelName, quote_ident};

/// The alias a DuckLake catalog is attached under (`ATTACH 'ducklake:…' AS "_efmesh_ducklake"`).
pub const DUCKLAKE_ALIAS: &str = "_efmesh_ducklake";

/// The schema of the attached DuckLake catalog that holds the versions' tables.
pub const DUCKLAKE_SCHEMA: &str = "main";

/// The longest file or directory name a lake's file system keeps, in bytes: `NAME_MAX` of
/// Linux's ext4, xfs, btrfs and tmpfs, and the limit of macOS's APFS and Windows' NTFS, is 255.
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// The name of a `parquet` model's directory in the lake: `<schema>__<table>`, the physical
/// table name without its `__<fingerprint>` (one directory per version under it, named by the
/// 64-hex fingerprint, holding files named at most 28 bytes: `2026-01-01T05-15.parquet.tmp`).
pub fn lake_dir_name(name: &ModelName) -> String {
    format!("{}__{}", name.schema(), name.table())
}

/// Where a model version's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum Target {
    /// A table in the engine's own database (schema `_efmesh`).
    #[default]
    Table,
    /// Parquet files in the lake (`[lake] path`), one per grain interval for time-range models,
    /// read through a view in `_efmesh`.
    Parquet,
    /// A table inside the DuckLake catalog configured in `[ducklake]`.
    DuckLake,
}

/// Every target name, for messages and "did you mean".
pub const TARGET_NAMES: &[&str] = &["table", "parquet", "ducklake"];

impl Target {
    /// Parses `table`, `parquet` or `ducklake`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "table" => Some(Self::Table),
            "parquet" => Some(Self::Parquet),
            "ducklake" => Some(Self::DuckLake),
            _ => None,
        }
    }

    /// The name as written in model files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Parquet => "parquet",
            Self::DuckLake => "ducklake",
        }
    }

    /// True when `kind` can be stored in this target. Every materialised kind can use `table`;
    /// `parquet` and `ducklake` take `full` and `incremental_by_time_range` models.
    pub fn supports(self, kind: &Kind) -> bool {
        match self {
            Self::Table => true,
            Self::Parquet | Self::DuckLake => matches!(kind, Kind::Full | Kind::IncrementalByTimeRange(_)),
        }
    }

    /// The qualified physical relation of a version whose unquoted physical table name is
    /// `table` (`<schema>__<table>__<fp>`, see [`crate::sql::fingerprint::physical_table`]).
    /// `physical_schema` is the engine schema of physical relations (`_efmesh`).
    pub fn physical_relation(self, physical_schema: &str, table: &str) -> String {
        match self {
            Self::Table | Self::Parquet => format!("{}.{}", quote_ident(physical_schema), quote_ident(table)),
            Self::DuckLake => format!("{}.{}.{}", quote_ident(DUCKLAKE_ALIAS), quote_ident(DUCKLAKE_SCHEMA), quote_ident(table)),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Load errors for models whose target needs a configuration section that is missing:
/// `parquet` needs `[lake]`, `ducklake` needs `[ducklake]` in `efmesh.toml`. One error per
/// model, at its `define_model` location.
pub fn unconfigured<'a>(models: impl IntoIterator<Item = &'a Model>, lake: bool, ducklake: bool) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for m in models {
        let (section, example) = match m.target {
            Target::Parquet if !lake => ("lake", "`[lake]` with `path = \"lake\"` (a local directory) or `path = \"s3://bucket/prefix\"`"),
            Target::DuckLake if !ducklake => ("ducklake", "`[ducklake]` with `catalog = \"lake.ducklake\"` and `data_path = \"lake_data\"`"),
            _ => continue,
        };
        errors.push(
            LoadError::new(
                Some(m.location.clone()),
                Some(m.name.clone()),
                format!("target `{}` needs a `[{section}]` section in efmesh.toml, and there is none", m.target),
            )
            .with_hint(format!("add {example} to efmesh.toml (see docs/targets.md)")),
        );
    }
    errors
}

/// Load errors for columns a `parquet` target cannot store exactly: DuckDB writes `hugeint`
/// (`int128`), `uhugeint` (`uint128`) and `bignum` to parquet as `DOUBLE`, so `9007199254740993`
/// would be served as `9007199254740992.0` and the column typed `DOUBLE`; `time_ns` comes back as
/// text. One error per column, at the
/// model's `define_model` location.
pub fn unstorable<'a>(models: impl IntoIterator<Item = &'a Model>) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for m in models.into_iter().filter(|m| m.target == Target::Parquet) {
        for c in &m.schema.0 {
            // Nested ones too (`hugeint[]`, `struct(a hugeint)`, `map(varchar, uhugeint)`);
            // `bignum` (`varint`) is written as a DOUBLE too, and `time_ns` read back as text.
            let ty = c.ty.to_ascii_lowercase();
            if ty
                .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .any(|w| matches!(w, "hugeint" | "int128" | "uhugeint" | "uint128" | "bignum" | "varint" | "time_ns"))
            {
                errors.push(
                    LoadError::new(
                        Some(m.location.clone()),
                        Some(m.name.clone()),
                        format!(
                            "column `{}` is declared `{}`, which the `parquet` target cannot store exactly (DuckDB writes `hugeint`, `uhugeint` and `bignum` to parquet as DOUBLE, digits past the 53rd bit lost, and reads `time_ns` back as text)",
                            c.name, c.ty
                        ),
                    )
                    .with_hint("declare `decimal(38,0)` (exact up to 38 digits) or `bigint`, or use target `table`"),
                );
            }
        }
    }
    errors
}

/// Load errors for models whose storage directory name is longer than a file system keeps
/// ([`MAX_FILE_NAME_BYTES`]): `check` and `plan` passed them, and the first apply failed creating
/// the directory with the operating system's "File name too long". A `parquet` model's lake
/// directory is [`lake_dir_name`] (`<schema>__<table>`); DuckLake writes a table's files under a
/// directory named like the table, `<schema>__<table>__<fingerprint>` (66 bytes more). An S3 key
/// has no such per-step limit, but the layout is the same on every lake (a project moves between
/// a local lake and S3), so the rule is too. DuckDB itself keeps identifiers of any length, so a
/// `table` model is not concerned. One error per model, at its `define_model` location.
pub fn unnameable<'a>(models: impl IntoIterator<Item = &'a Model>) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for m in models {
        let dir = lake_dir_name(&m.name);
        let (what, layout, extra) = match m.target {
            Target::Parquet => ("`parquet` target keeps this model's files in a lake directory", "`<schema>__<table>`", 0),
            // `__` and the fingerprint's 64 hex digits.
            Target::DuckLake => ("`ducklake` target keeps each version's files in a directory of the data path", "`<schema>__<table>__<fingerprint>`", 66),
            Target::Table => continue,
        };
        let len = dir.len() + extra;
        if len <= MAX_FILE_NAME_BYTES {
            continue;
        }
        errors.push(
            LoadError::new(
                Some(m.location.clone()),
                Some(m.name.clone()),
                format!(
                    "the {what} named {layout}, here {len} bytes long, and file systems keep names of at most {MAX_FILE_NAME_BYTES} bytes: the first apply would fail creating it"
                ),
            )
            .with_hint({
                let over = len - MAX_FILE_NAME_BYTES;
                format!("shorten the schema or table name by at least {over} byte{}, or store the model with target `table`", if over == 1 { "" } else { "s" })
            }),
        );
    }
    errors
}

/// The names of the files a parquet version's physical view definition `sql` lists: the string
/// literals of its `read_parquet` list naming a parquet file directly in the version's
/// directory, recognised by its last two segments (`<table>/<fingerprint>`, `table` being the
/// lake directory name [`lake_dir_name`]), so a local lake reached through another spelling of
/// the project root (a symbolic link: the same root) lists the same files. The apply writes the
/// list as `read_parquet(['<dir>/<file>', …], …)`, and DuckDB's catalog (`duckdb_views().sql`)
/// renders it `read_parquet(main.list_value('<dir>/<file>', …), …)`: both are read (a literal's
/// `''` is one quote). Empty for a view listing no file (a version without any yet). The plan's
/// integrity check compares it with the ledger (`repair.lakeViewStale`), so a view left listing
/// fewer files than are done (an older copy of the DuckDB file restored, a checkout sharing the
/// lake and the state store that ran the version further) is re-listed.
pub fn lake_view_files(sql: &str, table: &str, fingerprint: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    // (ASCII lowercasing keeps every byte offset.)
    let Some(at) = sql.to_ascii_lowercase().find("read_parquet(") else { return out };
    // `/<schema>__<table>/<fingerprint>`: the end of the directory of every file listed.
    let parent = format!("/{table}/{fingerprint}");
    let mut rest = &sql[at..];
    while let Some(open) = rest.find('\'') {
        let mut text = String::new();
        let mut tail = &rest[open + 1..];
        loop {
            let Some(close) = tail.find('\'') else { return out };
            text.push_str(&tail[..close]);
            tail = &tail[close + 1..];
            match tail.strip_prefix('\'') {
                Some(after) => {
                    text.push('\'');
                    tail = after;
                }
                None => break,
            }
        }
        rest = tail;
        if let Some((directory, name)) = text.rsplit_once('/')
            && directory.ends_with(&parent)
            && name.ends_with(".parquet")
        {
            out.insert(name.to_string());
        }
    }
    out
}

/// Whether the view definition `sql` of a time-range parquet lake version (its files in the lake
/// directory `<table>/<fingerprint>`) lists something other than a re-list would (the plan's
/// `repair.lakeViewStale`): `Some(n)`, the number of `done_files` (one per interval done for the
/// versions stored in its relation) it does not list; `Some(0)` when it lists them all and also
/// a file of an interval not done that the version's local manifest no longer lists
/// (`manifest`: the local manifest's files, read only then; `None` for an S3 lake, whose
/// manifest is read through the engine only, so not compared); `None` when it lists every done
/// interval's file.
pub fn lake_view_stale(
    sql: &str,
    (table, fingerprint): (&str, &str),
    done_files: &std::collections::BTreeSet<String>,
    manifest: impl FnOnce() -> Option<std::collections::BTreeSet<String>>,
) -> Option<usize> {
    let listed = lake_view_files(sql, table, fingerprint);
    let unlisted = done_files.iter().filter(|f| !listed.contains(*f)).count();
    if unlisted > 0 {
        return Some(unlisted);
    }
    let extra: Vec<&String> = listed.iter().filter(|f| !done_files.contains(*f)).collect();
    if extra.is_empty() {
        return None;
    }
    let manifest = manifest()?;
    extra.iter().any(|f| !manifest.contains(*f)).then_some(0)
}

/// The files the view definition `sql` of a parquet lake version (its files in the lake directory
/// `<table>/<fingerprint>`, [`lake_view_files`]) lists that `present` — the file names its local
/// lake directory holds — lacks, sorted: a file deleted outside efmesh that the view still lists
/// (a restated interval's kept file, served until a batch rewrites it, or one left outside the
/// model's `start`/`end`, which no batch ever rewrites). Every query of the view fails while it
/// lists one, so the plan re-lists it (`repair.lakeViewStale`), and the re-list drops a file that
/// is gone. (A done interval's missing file is `repair.lakeFilesMissing`, found first.)
pub fn lake_view_lost_files(sql: &str, (table, fingerprint): (&str, &str), present: &std::collections::BTreeSet<String>) -> Vec<String> {
    lake_view_files(sql, table, fingerprint).into_iter().filter(|f| !present.contains(f)).collect()
}

/// The columns the typed empty relation of a parquet lake version's view definition `sql`
/// declares, in order: the aliases of its `CAST(NULL AS <type>) AS <column>, … LIMIT 0`, as the
/// apply writes it (every name quoted) and as DuckDB's catalog renders it (a name quoted only
/// when it must be), unquoted. `None` when `sql` has no such relation. The plan's integrity check
/// compares them with the columns its version declares (`repair.lakeViewLacks`): a view
/// re-created from a version with fewer columns (by an efmesh that anchored the view on the
/// re-listing version alone) fails every query of an environment selecting the others.
pub fn lake_view_anchor_columns(sql: &str) -> Option<Vec<String>> {
    // (ASCII lowercasing keeps every byte offset.)
    let lower = sql.to_ascii_lowercase();
    let start = lower.find("cast(null as ")?;
    let bytes = sql.as_bytes();
    let mut items: Vec<&str> = Vec::new();
    let (mut depth, mut from, mut i) = (0usize, start, start);
    let limit_at = |i: usize| lower[i..].trim_start().strip_prefix("limit").is_some_and(|r| r.starts_with(char::is_whitespace));
    // Up to the `LIMIT` (or the parenthesis closing the relation), items split at commas
    // outside parentheses and quoted text (a type's `decimal(18, 3)`, an enum's labels).
    let end = loop {
        if let Some(next) = skip_literal_or_comment(bytes, i) {
            i = next;
            continue;
        }
        match *bytes.get(i)? {
            b'(' => depth += 1,
            b')' if depth == 0 => break i,
            b')' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&sql[from..i]);
                from = i + 1;
            }
            b if depth == 0 && b.is_ascii_whitespace() && limit_at(i) => break i,
            _ => {}
        }
        i += 1;
    };
    items.push(&sql[from..end]);
    items.into_iter().map(anchor_alias).collect()
}

/// The column an item `CAST(NULL AS <type>) AS <column>` of a lake view's typed empty relation
/// names, unquoted ([`lake_view_anchor_columns`]).
fn anchor_alias(item: &str) -> Option<String> {
    let bytes = item.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while i < bytes.len() {
        if let Some(next) = skip_literal_or_comment(bytes, i) {
            i = next;
            continue;
        }
        match bytes[i] {
            b'(' => depth += 1,
            b')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    let (keyword, name) = item[i + 1..].trim().split_once(char::is_whitespace)?;
                    if !keyword.eq_ignore_ascii_case("as") {
                        return None;
                    }
                    let name = name.trim();
                    return Some(match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
                        Some(quoted) => quoted.replace("\"\"", "\""),
                        None => name.to_string(),
                    });
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The files a parquet version's `manifest.json` text lists; none when it cannot be parsed.
pub fn lake_manifest_files(text: &str) -> Vec<String> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("files").and_then(|f| f.as_array()).map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns of a lake view's typed empty relation are read as the apply writes it (every
    /// name quoted) and as DuckDB's catalog renders it (quoted only when needed), through types
    /// with commas and quotes; a view without one reads as `None`.
    #[test]
    fn a_lake_views_anchored_columns_are_read_as_written_and_as_rendered() {
        let fp = "a".repeat(64);
        let written = format!(
            "CREATE OR REPLACE VIEW x AS\nSELECT * FROM (SELECT CAST(NULL AS TIMESTAMP) AS \"ts\", CAST(NULL AS decimal(18, 3)) AS \"Amount\", CAST(NULL AS enum('a, b', 'c)')) AS \"we\"\"ird\" LIMIT 0)\nUNION ALL BY NAME\nSELECT * FROM read_parquet(['/l/s__t/{fp}/2024-01-01.parquet'], union_by_name = true, hive_partitioning = false)"
        );
        let names = |v: &[&str]| Some(v.iter().map(ToString::to_string).collect::<Vec<_>>());
        assert_eq!(lake_view_anchor_columns(&written), names(&["ts", "Amount", "we\"ird"]));
        let rendered = format!(
            "CREATE VIEW _efmesh.s__t__{fp} AS (SELECT * FROM (SELECT CAST(NULL AS TIMESTAMP) AS ts, CAST(NULL AS BIGINT) AS v, CAST(NULL AS BIGINT) AS \"limit\" LIMIT 0)) UNION ALL BY NAME (SELECT * FROM read_parquet(main.list_value('/l/s__t/{fp}/2024-01-01.parquet'), (union_by_name = CAST('t' AS BOOLEAN)), (hive_partitioning = CAST('f' AS BOOLEAN))));"
        );
        assert_eq!(lake_view_anchor_columns(&rendered), names(&["ts", "v", "limit"]));
        // No file yet: the relation alone; a name starting like the keyword is no `LIMIT`.
        assert_eq!(lake_view_anchor_columns("CREATE VIEW x AS SELECT * FROM (SELECT CAST(NULL AS INTEGER) AS limited LIMIT 0);"), names(&["limited"]));
        assert_eq!(lake_view_anchor_columns("CREATE VIEW x AS SELECT * FROM read_parquet(['/l/a.parquet'])"), None);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for n in TARGET_NAMES {
            assert_eq!(Target::parse(n).map(Target::as_str), Some(*n));
        }
        assert_eq!(Target::parse("Parquet"), None);
        assert_eq!(Target::default(), Target::Table);
    }

    #[test]
    fn lake_targets_take_full_and_time_range_models_only() {
        assert!(Target::Parquet.supports(&Kind::Full));
        assert!(Target::DuckLake.supports(&Kind::Full));
        assert!(!Target::Parquet.supports(&Kind::View));
        assert!(!Target::DuckLake.supports(&Kind::Embedded));
        assert!(Target::Table.supports(&Kind::View));
    }

    /// A `parquet` model whose lake directory `<schema>__<table>` would be longer than 255 bytes,
    /// or a `ducklake` model whose table directory `<schema>__<table>__<fingerprint>` would, is a
    /// load error naming the model, the length and the limit (it passed `check` and failed the
    /// first apply with the OS's "File name too long"); 255 bytes exactly, or a `table` model of
    /// any length (DuckDB keeps long identifiers), passes.
    #[test]
    fn a_lake_or_ducklake_model_whose_directory_name_is_too_long_is_refused() {
        let named = |table: &str, target: Target| {
            let mut m = Model::fixture(&format!("s.{table}"), Kind::Full, &[]);
            m.target = target;
            m
        };
        // `s__` + table: 3 + 252 = 255 bytes.
        let fits = named("t".repeat(252).as_str(), Target::Parquet);
        let long = named("t".repeat(253).as_str(), Target::Parquet);
        let table = named("t".repeat(400).as_str(), Target::Table);
        // DuckLake's directory is the table's name: `s__` + table + `__` + 64 hex digits.
        let lake_fits = named("t".repeat(186).as_str(), Target::DuckLake);
        let lake_long = named("t".repeat(187).as_str(), Target::DuckLake);
        assert_eq!(lake_dir_name(&fits.name).len(), 255);
        let errors = unnameable([&fits, &long, &table, &lake_fits, &lake_long]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        let d = errors[1].to_string();
        assert!(d.contains("`<schema>__<table>__<fingerprint>`, here 256 bytes long"), "{d}");
        let e = errors[0].to_string();
        assert!(e.starts_with("m.lua:1: model `s.ttt"), "{e}");
        assert!(e.contains("here 256 bytes long, and file systems keep names of at most 255 bytes"), "{e}");
        assert!(errors[0].hint.as_deref().is_some_and(|h| h.contains("by at least 1 byte,")), "{errors:?}");
    }

    #[test]
    fn ducklake_versions_live_in_the_attached_catalog() {
        assert_eq!(Target::Parquet.physical_relation("_efmesh", "s__t__ab"), "\"_efmesh\".\"s__t__ab\"");
        assert_eq!(Target::DuckLake.physical_relation("_efmesh", "s__t__ab"), "\"_efmesh_ducklake\".\"main\".\"s__t__ab\"");
    }

    #[test]
    fn a_lake_view_is_stale_when_it_lists_fewer_files_than_the_ledger_has_done() {
        let fp = "a".repeat(64);
        let view = |days: &[&str]| {
            let files: Vec<String> = days.iter().map(|d| crate::core::name::quote_literal(&format!("s3://b/l/s__t/{fp}/{d}.parquet"))).collect();
            format!("CREATE VIEW x AS SELECT * FROM read_parquet(main.list_value({}))", files.join(", "))
        };
        let done: std::collections::BTreeSet<String> = ["2026-01-01", "2026-01-02", "2026-01-03"].iter().map(|d| format!("{d}.parquet")).collect();
        let stale = |days: &[&str], manifest: Option<&[&str]>| {
            lake_view_stale(&view(days), ("s__t", &fp), &done, || manifest.map(|m| m.iter().map(|d| format!("{d}.parquet")).collect()))
        };
        assert_eq!(stale(&["2026-01-01"], None), Some(2));
        assert_eq!(stale(&[], None), Some(3));
        assert_eq!(stale(&["2026-01-01", "2026-01-02", "2026-01-03"], None), None);
        // A file of an interval not done: kept (a restated interval serves its old rows) unless a
        // local manifest dropped it; an S3 manifest is not read while planning.
        let four = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"];
        assert_eq!(stale(&four, None), None);
        assert_eq!(stale(&four, Some(&four)), None);
        assert_eq!(stale(&four, Some(&four[..3])), Some(0));
    }

    /// A file the view lists that the local lake directory no longer holds is found, whether its
    /// interval is done or only kept (restated, or outside the bounds); files the directory holds
    /// beyond the list (a stray copy) are not.
    #[test]
    fn a_lake_view_listing_a_file_the_directory_lacks_names_it() {
        let fp = "b".repeat(64);
        let sql = format!(
            "CREATE VIEW x AS SELECT * FROM read_parquet(main.list_value('/p/lake/s__t/{fp}/2026-01-01.parquet', '/p/lake/s__t/{fp}/2026-01-02.parquet', '/p/lake/s__t/{fp}/2026-01-03.parquet'))"
        );
        let present = |names: &[&str]| -> std::collections::BTreeSet<String> { names.iter().map(|d| format!("{d}.parquet")).collect() };
        let all = present(&["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-20", "manifest"]);
        assert!(lake_view_lost_files(&sql, ("s__t", &fp), &all).is_empty());
        let lost = lake_view_lost_files(&sql, ("s__t", &fp), &present(&["2026-01-01", "2026-01-03"]));
        assert_eq!(lost, ["2026-01-02.parquet"]);
        assert_eq!(lake_view_lost_files(&sql, ("s__t", &fp), &present(&[])).len(), 3);
    }
}
