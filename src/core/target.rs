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
use super::kind::Kind;
use super::model::Model;
use super::name::quote_ident;

/// The alias a DuckLake catalog is attached under (`ATTACH 'ducklake:…' AS "_efmesh_ducklake"`).
pub const DUCKLAKE_ALIAS: &str = "_efmesh_ducklake";

/// The schema of the attached DuckLake catalog that holds the versions' tables.
pub const DUCKLAKE_SCHEMA: &str = "main";

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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ducklake_versions_live_in_the_attached_catalog() {
        assert_eq!(Target::Parquet.physical_relation("_efmesh", "s__t__ab"), "\"_efmesh\".\"s__t__ab\"");
        assert_eq!(Target::DuckLake.physical_relation("_efmesh", "s__t__ab"), "\"_efmesh_ducklake\".\"main\".\"s__t__ab\"");
    }
}
