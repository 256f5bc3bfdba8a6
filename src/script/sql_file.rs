//! Raw `.sql` model files (being written).

use crate::core::{LoadError, LoadErrors, Location, Model};
use std::path::{Path, PathBuf};

/// Parses `.sql` model files.
///
/// # Errors
/// Every load error, with file:line.
pub fn load(_root: &Path, files: &[PathBuf]) -> Result<Vec<Model>, LoadErrors> {
    Err(LoadErrors(files.iter().map(|f| LoadError::new(Some(Location { file: f.clone(), line: 0 }), None, ".sql models are not supported yet")).collect()))
}
