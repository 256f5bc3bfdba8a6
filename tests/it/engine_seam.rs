//! The engine seam (SPEC §4 invariant 47): outside `src/engine/` nothing names the DuckDB type,
//! plan/apply/session/preview spell no DuckDB-only statement, and a model needing a feature the
//! engine lacks is refused by `apply` before anything is written.

use crate::common::*;
use efmesh::engine::dialect::{Dialect, Feature, Standard};
use efmesh::engine::duckdb::{DuckDb, DuckDbDialect};
use efmesh::engine::{DescribedColumn, Engine, EngineError};
use efmesh::state::StateStore;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its path relative to the crate root.
fn sources(dir: &Path) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root.join(dir)).into_iter().filter_map(Result::ok) {
        let path: PathBuf = entry.path().to_path_buf();
        if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, fs_err::read_to_string(&path).unwrap()));
        }
    }
    assert!(out.len() > 2, "the sources were not found under {}", root.join(dir).display());
    out
}

/// True when `line` (code, not a comment) names the DuckDB engine: the type `DuckDb` as a whole
/// word (not `DuckDbJson`, nor the parser error `SqlError::DuckDb`), or a `duckdb::` path (the
/// engine module or the duckdb crate).
fn names_duckdb(line: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let word_at = |i: usize, len: usize| !line[..i].chars().next_back().is_some_and(ident) && !line[i + len..].chars().next().is_some_and(ident);
    let typ = line.match_indices("DuckDb").any(|(i, _)| word_at(i, 6) && !line[..i].ends_with("SqlError::"));
    let path = line.match_indices("duckdb::").any(|(i, _)| !line[..i].chars().next_back().is_some_and(ident));
    typ || path
}

#[test]
fn the_duckdb_pattern_finds_every_spelling_of_the_engine() {
    for hit in [
        "use crate::engine::duckdb::DuckDb;",
        "use crate::engine::{duckdb::DuckDb, Engine};",
        "fn f(e: &DuckDb) {}",
        "let x = DuckDb::open(p, s)?;",
        "duckdb::Connection::open_in_memory()",
        "Box<DuckDb>",
    ] {
        assert!(names_duckdb(hit), "{hit}");
    }
    for miss in ["CanonSource::DuckDbJson", "SqlError::DuckDb { message }", "BadDuckDbJson", "a DuckDB file", "engine::open(&config, Access::ReadWrite)"] {
        assert!(!names_duckdb(miss), "{miss}");
    }
}

#[test]
fn no_module_outside_the_engine_names_the_duckdb_engine() {
    let mut found = Vec::new();
    for (file, text) in sources(Path::new("src")) {
        // `sql::canon` is the DuckDB grammar's canonicaliser (its error `SqlError::DuckDb` says
        // DuckDB's parser rejected a body), as `sql::pg_canon` is Postgres's: the engine's
        // Dialect chooses between them.
        if file.starts_with("src/engine/") || file == "src/sql/canon.rs" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if !line.trim_start().starts_with("//") && names_duckdb(line) {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "open engines through engine::open and reach them through the Engine trait:\n{}", found.join("\n"));
}

#[test]
fn plan_apply_session_and_previews_spell_no_duckdb_only_statement() {
    let mut found = Vec::new();
    let mut files = sources(Path::new("src/apply"));
    files.extend(
        sources(Path::new("src/plan")).into_iter().chain(sources(Path::new("src")).into_iter().filter(|(f, _)| f == "src/session.rs" || f == "src/preview.rs")),
    );
    // The parquet lake and DuckLake targets are DuckDB features by nature (COPY … TO, ATTACH):
    // an engine without them is refused before any write (Dialect::supports).
    for (file, text) in files.iter().filter(|(f, _)| f != "src/apply/lake.rs" && f != "src/apply/ducklake.rs") {
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if ["CREATE OR REPLACE", "temp.main", "TRY_CAST", "USING SAMPLE", "json_serialize_sql", "read_parquet", "read_csv"].iter().any(|p| line.contains(p))
            {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "spell these through the engine's Dialect (Engine::sql()):\n{}", found.join("\n"));
}

/// DuckDB underneath, the standard spelling and none of DuckDB's features on top: an engine that
/// lacks the parquet lake, DuckLake and file externals.
struct Plain(DuckDb);

impl Engine for Plain {
    fn sql(&self) -> &'static dyn Dialect {
        &Standard
    }
    fn execute(&mut self, sql: &str) -> Result<(), EngineError> {
        self.0.execute(sql)
    }
    fn transaction(&mut self, statements: &[String]) -> Result<(), EngineError> {
        self.0.transaction(statements)
    }
    fn describe(&mut self, query: &str) -> Result<Vec<DescribedColumn>, EngineError> {
        self.0.describe(query)
    }
    fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, EngineError> {
        self.0.query(sql)
    }
    fn relation_exists(&mut self, schema: &str, name: &str) -> Result<bool, EngineError> {
        self.0.relation_exists(schema, name)
    }
}

#[test]
fn a_model_needing_a_feature_the_engine_lacks_is_refused_before_anything_is_written() {
    let p = sample_project();
    let config = efmesh::config::Config::load(&p.root().join("efmesh.toml")).unwrap();
    let project = efmesh::project::Project::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let state = efmesh::state::SqliteStore::open_in_memory().unwrap();
    let now = efmesh::core::interval::parse_instant("2026-03-01T00:00:00Z").unwrap();
    let plan = efmesh::plan::plan(&project, &state, "dev", now).unwrap();

    // DuckDB has every feature; the standard spelling none.
    efmesh::apply::check_features(&project, &plan, &DuckDbDialect).unwrap();
    let raw = project.dag.get(&efmesh::core::ModelName::parse("raw.events").unwrap()).unwrap();
    assert_eq!(Feature::needed_by(raw), Some(Feature::FileExternal));

    let generation = state.generation().unwrap();
    let mut engine = Plain(DuckDb::in_memory().unwrap());
    let err = efmesh::apply::apply(&project, &plan, &state, &mut engine, &Default::default()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, efmesh::apply::ApplyError::EngineFeature { .. }), "{err:?}");
    assert!(text.starts_with("models/raw.lua:2: model `raw.events` needs an external source read from files"), "{text}");
    assert!(text.contains("which the Postgres engine does not have; nothing was done"), "{text}");
    assert_eq!(err.located().map(|(l, m)| (l.line, m.to_string())), Some((2, "raw.events".to_string())));
    // Nothing written: no relation in the engine, the store's generation and environments as they were.
    assert!(engine.query("SELECT table_name FROM information_schema.tables").unwrap().is_empty());
    assert_eq!(state.generation().unwrap(), generation);
    assert!(state.env_pointers("dev").unwrap().is_empty());
}
