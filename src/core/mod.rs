//! The domain, with no I/O: names, schemas, kinds, bodies, models, intervals and the DAG.

pub mod audit;
pub mod cron;
pub mod dag;
pub mod error;
pub mod fragment;
pub mod interval;
pub mod json;
pub mod kind;
pub mod model;
pub mod name;
pub mod schema;
pub mod select;
pub mod target;

pub use dag::Dag;
pub use error::{LoadError, LoadErrors};
pub use fragment::{Fragment, Node, Resolver};
pub use interval::{Grain, Interval, Millis};
pub use kind::{CsvOptions, External, FileFormat, Kind, Partitioned, ScdType2, Seed, TimeRange, UniqueKey};
pub use model::{Location, Model, SignalUse, Statement, Statements};
pub use name::ModelName;
pub use schema::{Column, Schema, TypeFamily};
pub use target::Target;
