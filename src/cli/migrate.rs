//! `efmesh migrate [--json]`: upgrades the state store to this efmesh's layout
//! ([`crate::state::migrate`]): backed up beside itself first (`VACUUM INTO`), then every
//! missing migration in one transaction. Every other command refuses an older store.

use super::Exit;
use super::printer::Printer;
use crate::core::interval::now_millis;
use anyhow::Result;
use serde_json::json;

/// Migrates the store of the project at `config`.
pub(super) fn run(config: &std::path::Path, json: bool, out: &Printer) -> Result<Exit> {
    // Only the configuration is needed: a project that does not load can still be migrated.
    let config = crate::config::Config::load(config)?;
    let report = crate::state::migrate_store(&config, now_millis())?;
    if json {
        out.json(json!({
            "store": report.store,
            "from": report.from,
            "to": report.to,
            "applied": report.applied,
            "backup": report.backup.as_ref().map(|b| b.display().to_string()),
        }))?;
    } else if report.applied.is_empty() {
        out.text(&format!("state store `{}` is at version {}: nothing to migrate\n", report.store, report.to))?;
    } else {
        // A Postgres store is not backed up (no file to copy; its migration is one transaction).
        let backup = report.backup.as_ref().map_or_else(|| "none taken (a Postgres store: back it up with `pg_dump`)".to_string(), |b| b.display().to_string());
        out.text(&format!(
            "state store `{}` migrated from version {} to {} (migrations {})\nbackup of the store as it was: {backup}\n",
            report.store,
            report.from,
            report.to,
            report.applied.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ))?;
    }
    Ok(Exit::Success)
}
