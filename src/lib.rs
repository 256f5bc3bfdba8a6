//! # efmesh
//!
//! SQL transformations with plans, snapshots and virtual environments, in one binary. Models are
//! small Lua scripts (Rhai and raw SQL follow) that call `define_model`, `ref` and `cols`; the
//! host evaluates them in a restricted interpreter, builds the DAG, fingerprints every model by
//! its canonical SQL AST, diffs the project against an environment (the *plan*) and applies
//! exactly that plan on DuckDB: physical tables are rebuilt only where something changed, and
//! environments are views over shared physical storage, so promotion costs no recomputation.
//!
//! Layers, one direction only (see `SPEC.md`):
//! [`core`] (no I/O) ← [`sql`] ← [`script`]; [`state`]; [`engine`] ← [`plan`] / [`apply`] ← `cli`.
//!
//! ```no_run
//! use efmesh::{config::Config, project::Project, plan, apply};
//! let config = Config::load("efmesh.toml".as_ref())?;
//! let project = Project::load(&config)?;
//! let state = efmesh::state::open(&config)?; // SQLite or Postgres, as `[state]` says
//! let now = efmesh::core::interval::now_millis();
//! let plan = plan::plan(&project, &*state, "dev", now)?;
//! let mut engine = efmesh::engine::open(&config, efmesh::engine::Access::ReadWrite)?;
//! let report = apply::apply(&project, &plan, &*state, &mut *engine, &apply::Options::default())?;
//! println!("built {:?}", report.built);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

/// `eprintln!` that never panics: the line is dropped when stderr cannot be written (stderr on a
/// full disk must not turn an error, or a warning mid-apply, into a panic and exit 101).
#[macro_export]
macro_rules! ewriteln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// `eprint!` that never panics ([`ewriteln!`]).
#[macro_export]
macro_rules! ewrite {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

pub mod apply;
pub mod cli;
pub mod config;
pub mod core;
pub mod datadiff;
pub mod engine;
pub mod file;
pub mod janitor;
pub mod lifecycle;
pub mod ownership;
pub mod pg;
pub mod plan;
pub mod preview;
pub mod project;
pub mod s3;
pub mod script;
pub mod seed;
pub mod session;
pub mod sql;
pub mod state;
pub mod unittest;
