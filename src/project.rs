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
        // Audit definitions first, so every model file can attach them.
        let mut files = script::discover_globs(config, &config.project.audits)?;
        for f in script::discover(config)? {
            if !files.contains(&f) {
                files.push(f);
            }
        }
        let models = script::load_models(&config.root, &files)?;
        let dag = Dag::build(models)?;
        Ok(Project { config: config.clone(), dag })
    }
}
