//! A loaded project: its configuration and its validated model DAG.

use crate::config::Config;
use crate::core::{Dag, LoadErrors};
use crate::script;

/// Configuration plus the validated DAG of every model.
#[derive(Debug, Clone)]
pub struct Project {
    /// The configuration the project was loaded with.
    pub config: Config,
    /// Every model, validated and topologically ordered.
    pub dag: Dag,
}

impl Project {
    /// Discovers, evaluates and validates every model file of `config`'s project.
    ///
    /// Pure with respect to the databases: reads only the project's files.
    ///
    /// # Errors
    /// [`LoadErrors`]: every problem found, each with file:line, model and culprit.
    pub fn load(config: &Config) -> Result<Project, LoadErrors> {
        let models = script::load_models(&config.root, &Self::files(config)?)?;
        let dag = Dag::build(models)?;
        // A storage target needs its section of efmesh.toml: say so at load, not mid-apply.
        let unconfigured = crate::core::target::unconfigured(dag.models(), config.lake.is_some(), config.ducklake.is_some());
        if !unconfigured.is_empty() {
            return Err(LoadErrors(unconfigured));
        }
        Ok(Project { config: config.clone(), dag })
    }

    /// The files a project loads, in evaluation order: audit definitions first (so every model
    /// file can attach them), then model files.
    ///
    /// # Errors
    /// [`LoadErrors`] for an invalid glob or a file outside the project.
    pub fn files(config: &Config) -> Result<Vec<std::path::PathBuf>, LoadErrors> {
        let mut files = script::discover_matching(config, &config.project.audits)?;
        for f in script::discover(config)? {
            if !files.contains(&f) {
                files.push(f);
            }
        }
        Ok(files)
    }
}
