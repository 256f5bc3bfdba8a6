//! The lifecycle commands of environments and of the state store: `efmesh invalidate <env>`
//! ([`crate::lifecycle`]: expire an environment now, the janitor drops it), `efmesh state
//! export [FILE|-]` and `efmesh state import FILE [--force] [--engine-ahead]` ([`crate::state::dump`]: the whole
//! store as one versioned JSON document, through the `StateStore` trait, so a SQLite store
//! moves into Postgres and back).

use super::Exit;
use super::printer::Printer;
use crate::core::interval::{Millis, to_iso};
use crate::lifecycle::PROD;
use anyhow::{Result, bail};
use serde_json::json;

/// Where `env` stands in its lifecycle at `now` ([`crate::lifecycle::judge`], the configured
/// `ttl`), and whether it is expired while it still serves something: what `plan` warns of,
/// what an `apply` (or `watch --apply`) with nothing to build renews.
pub(crate) fn expired_serving(state: &dyn crate::state::StateStore, env: &str, ttl: Option<Millis>, now: Millis) -> Result<(crate::lifecycle::Expiry, bool)> {
    let expiry = crate::lifecycle::judge(env, &state.journal(env)?, ttl, now);
    let serving = expiry.expired && !state.env_pointers(env)?.is_empty();
    Ok((expiry, serving))
}

/// When the janitor dropped `env` (the newest row of its apply journal is the drop:
/// [`crate::lifecycle::judge`]), for the commands that find it serving nothing: they say it
/// [`dropped_phrase`] rather than that nothing was ever applied to it. `None` otherwise (never
/// applied, or applied again since).
///
/// # Errors
/// The journal cannot be read.
pub(super) fn dropped_at(state: &dyn crate::state::StateStore, env: &str) -> Result<Option<String>> {
    Ok(crate::lifecycle::judge(env, &state.journal(env)?, None, 0).dropped_at)
}

/// How every command words an environment the janitor dropped at `at` ([`dropped_at`]).
pub(super) fn dropped_phrase(at: &str) -> String {
    format!("expired and was dropped by the janitor at {at}")
}

/// `efmesh invalidate <env> [--json]`: records the environment as expired now (a journal row),
/// so the next janitor drops it. Refuses `prod` and an environment the store does not hold
/// (with the closest name when one is near). Only the configuration is needed. The journal row
/// is stamped with the real clock, never `--now` (what the store records as having happened).
pub(super) fn invalidate(config: &std::path::Path, env: &str, json: bool, out: &Printer) -> Result<Exit> {
    let config = crate::config::Config::load(config)?;
    crate::core::name::validate_env(env)?;
    if env == PROD {
        bail!(
            "`prod` never expires and cannot be invalidated; nothing was done\n  hint: only environments other than prod expire (`[environments] ttl`) or are invalidated"
        );
    }
    // `dropped`: when the janitor dropped it (its journal says so), else it was never applied.
    let unknown = |known: &[String], dropped: Option<String>| {
        if let Some(at) = dropped {
            return anyhow::anyhow!(
                "environment `{env}` {}: there is nothing to invalidate; nothing was done\n  hint: `efmesh apply {env}` creates it again",
                dropped_phrase(&at)
            );
        }
        // `prod` is suggested too (`prd` means it), saying it cannot be invalidated.
        let hint = crate::core::error::did_you_mean(env, known.iter().map(String::as_str)).map_or_else(
            || "\n  hint: `efmesh status <env>` shows an environment; only an applied environment can be invalidated".to_string(),
            |s| match s {
                PROD => format!("\n  hint: did you mean `{PROD}`? (`{PROD}` never expires and cannot be invalidated)"),
                s => format!("\n  hint: did you mean `{s}`?"),
            },
        );
        anyhow::anyhow!("unknown environment `{env}`: nothing was applied to it in this state store; nothing was done{hint}")
    };
    let Some(state) = crate::state::open_existing(&config)? else { return Err(unknown(&[], None)) };
    let known = state.environments()?;
    if !known.iter().any(|e| e == env) {
        return Err(unknown(&known, dropped_at(state.as_ref(), env)?));
    }
    let models = state.env_pointers(env)?.len();
    let views = crate::janitor::env_views(state.as_ref(), env)?.len();
    // `None`: the janitor dropped it between the two reads.
    let now = crate::core::interval::now_millis();
    let Some(id) = state.invalidate_environment(env, &super::applied_by(), now)? else { return Err(unknown(&[], dropped_at(state.as_ref(), env)?)) };
    tracing::debug!(env, journal = id, "environment invalidated");
    if json {
        out.json(json!({"env": env, "invalidated": true, "invalidatedAt": to_iso(now), "models": models, "views": views}))?;
    } else {
        out.text(&format!(
            "environment `{env}` invalidated at {}: the next `efmesh janitor` drops its {views} view(s) and its state; `efmesh apply {env}` before that renews it\n",
            to_iso(now)
        ))?;
    }
    Ok(Exit::Success)
}

/// `efmesh state export [FILE|-] [--json]`: the whole store as one document, written to FILE
/// (atomically: a temporary file renamed over it) or to stdout.
pub(super) fn export(config: &std::path::Path, file: Option<&std::path::Path>, json: bool, now: Millis, out: &Printer) -> Result<Exit> {
    let config = crate::config::Config::load(config)?;
    let Some(state) = crate::state::open_existing(&config)? else {
        bail!("no state store at `{}`: nothing to export\n  hint: check `[state]` in the configuration", crate::state::location(&config));
    };
    let dump = state.export_state()?;
    let doc = dump.to_document(&to_iso(now));
    let to_stdout = file.is_none_or(|f| f.as_os_str() == "-");
    if to_stdout {
        // The document is the output (its first key is `"apiVersion": 1`).
        out.json(doc)?;
        return Ok(Exit::Success);
    }
    let given = file.unwrap_or_else(|| std::path::Path::new("-"));
    // Through a symbolic link, the file it names is replaced (the rename would replace the link).
    let resolved = fs_err::symlink_metadata(given).ok().filter(|m| m.file_type().is_symlink()).map(|_| fs_err::canonicalize(given)).transpose()?;
    let path = resolved.as_deref().unwrap_or(given);
    refuse_overwrite(path)?;
    let text = serde_json::to_string_pretty(&doc)?;
    let tmp = path.with_file_name(format!(".{}.tmp-{}", path.file_name().map_or("export".into(), |n| n.to_string_lossy()), std::process::id()));
    crate::file::replace(path, &tmp, format!("{text}\n").as_bytes())?;
    let counts = dump.counts();
    if json {
        out.json(json!({"exported": true, "file": path.display().to_string(), "store": state.location(), "stateVersion": crate::state::STATE_VERSION, "storeId": dump.store_id, "rows": counts}))?;
    } else {
        out.text(&format!(
            "exported the state store `{}` (layout {}) to {}: {} snapshot(s), {} environment pointer(s), {} ledger interval(s), {} journal row(s)\n",
            state.location(),
            crate::state::STATE_VERSION,
            path.display(),
            counts["snapshots"],
            counts["environments"],
            counts["intervals"],
            counts["plans"]
        ))?;
    }
    Ok(Exit::Success)
}

/// Refuses to replace an existing `path` that is not an earlier export (its first bytes name the
/// document's kind, as [`crate::state::dump::StateDump::to_document`] writes it first after the
/// API version): the export renames its file over whatever is there, which may be the state
/// store itself, the engine's database file or anything else a typo names.
fn refuse_overwrite(path: &std::path::Path) -> Result<()> {
    let head = match fs_err::File::open(path) {
        Ok(f) => {
            let mut head = Vec::with_capacity(256);
            std::io::Read::read_to_end(&mut std::io::Read::take(f, 256), &mut head)?;
            head
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let marker = format!("\"kind\": \"{}\"", crate::state::dump::DUMP_KIND);
    // Pretty-printed as the export writes it, or compacted since (`jq -c`).
    let compact: String = String::from_utf8_lossy(&head).chars().filter(|c| !c.is_whitespace()).collect();
    if compact.contains(&marker.replace(' ', "")) {
        return Ok(());
    }
    bail!(
        "`{}` exists and is not an efmesh state export (it does not begin with an export's `{marker}`): nothing was written\n  hint: export to a new file name, or move that file away first (is it the state store or the engine's database file?)",
        path.display()
    )
}

/// `efmesh state import FILE|- [--force] [--engine-ahead] [--json]`: validates the document (its
/// format and layout versions, every table and value), compares it with the project's engine
/// database ([`refuse_engine_ahead`]), then writes it into the project's state store (created
/// when absent) in one transaction — refused there when an engine epoch was issued since the
/// comparison (the store's counter, read before it, moved: a writer started or finished in
/// between, [`crate::state::StateStore::import_state`]), so the comparison and the write are
/// atomic with respect to every `apply` and `run`.
pub(super) fn import(config: &std::path::Path, file: &std::path::Path, force: bool, engine_ahead: bool, json: bool, out: &Printer) -> Result<Exit> {
    let config = crate::config::Config::load(config)?;
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        s
    } else {
        fs_err::read_to_string(file)?
    };
    let name = if file.as_os_str() == "-" { "stdin".to_string() } else { file.display().to_string() };
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("`{name}` is not JSON ({e}); nothing was imported"))?;
    let dump = crate::state::dump::StateDump::from_document(&doc).map_err(|e| anyhow::anyhow!("cannot import `{name}`: {e}; nothing was imported"))?;
    // The store's issued engine epoch BEFORE the engine database is read: a writer that starts
    // after this read raises it before its first write, and one running now holds its lock
    // until its closing raise, so the import's transaction, finding the counter unchanged and
    // no live lock, knows the comparison below still holds (SPEC §4, invariant 63). A store
    // that does not exist yet is only looked at (0: a new store's counter), not created.
    let existing = crate::state::open_existing(&config)?;
    let issued = existing.as_deref().map(|state| state.epoch_issued()).transpose()?.unwrap_or(0);
    // Before any store is created or written: a refused import leaves everything as it was.
    refuse_engine_ahead(&config, &dump, &name, engine_ahead)?;
    // Test hook: a writer run here, between the comparison and the write, must be found.
    crate::apply::fault::delay_point("import-after-compare");
    // A SQLite store this import creates is removed again when the import fails: a failed
    // import leaves no store where there was none.
    let (state, created) = match existing {
        Some(state) => (state, None),
        None => {
            let created = config.state.url_env.is_none().then(|| config.state_path()).filter(|p| !p.exists());
            (crate::state::open(&config)?, created)
        }
    };
    // Leases expire by the store's clock (SPEC invariant 30), not by `--now`. A lock whose
    // holder is known gone (killed on this host) does not block, as it does not block the
    // commands that reclaim it.
    let host = crate::state::lease::host_name();
    let imported = state.clock().and_then(|clock| {
        let stale = |l: &crate::state::LeaseRecord| crate::state::lease::is_stale(l, clock, &host);
        state.import_state(&dump, force, issued, clock, &stale)
    });
    if let Err(e) = imported {
        drop(state);
        if let Some(path) = created {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut file = path.clone().into_os_string();
                file.push(suffix);
                if let Err(remove) = fs_err::remove_file(&file)
                    && remove.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!("{remove}");
                }
            }
        }
        return Err(e.into());
    }
    let counts = dump.counts();
    if json {
        out.json(json!({"imported": true, "file": name, "store": state.location(), "stateVersion": crate::state::STATE_VERSION, "storeId": dump.store_id, "rows": counts}))?;
    } else {
        out.text(&format!(
            "imported {name} into the state store `{}`: {} snapshot(s), {} environment pointer(s), {} ledger interval(s), {} journal row(s)\n",
            state.location(),
            counts["snapshots"],
            counts["environments"],
            counts["intervals"],
            counts["plans"]
        ))?;
    }
    Ok(Exit::Success)
}

/// Refuses (nothing imported) the export `dump` (read from `name`) when the project's engine
/// database holds writes made after it: the stamp of the document's store there
/// ([`crate::engine::epoch::stamped`]) is past the document's `engineEpoch` (SPEC §4, invariant
/// 63). A later `apply` or `run` wrote into tables the document's versions own; when it replaced
/// intervals the export records as done (a forward-only change, a restatement, a lookback
/// rewrite) its ledger would call them done as the export describes them, and nothing (plan,
/// `status --check`, run) would see that the rows are others. `engine_ahead`
/// imports anyway, with a warning: the ledger is trusted as it is. A database that cannot be
/// opened (locked by a running command, a Postgres server out of reach) refuses too, naming
/// why, unless `engine_ahead`. A DuckDB file that does not exist holds nothing to compare: the
/// import goes on with a warning (a database kept elsewhere is not compared).
fn refuse_engine_ahead(config: &crate::config::Config, dump: &crate::state::dump::StateDump, name: &str, engine_ahead: bool) -> Result<()> {
    let location = crate::engine::location(config);
    if config.engine_file().is_some_and(|path| !path.exists()) {
        tracing::warn!(
            "no engine database at {location}: {name} could not be compared with one; the next `efmesh apply <env>` builds what the imported state store records there (a database kept elsewhere must be from the same moment as the export)"
        );
        return Ok(());
    }
    let stamped = crate::engine::open(config, crate::engine::Access::Catalog)
        .and_then(|mut engine| engine.catalog())
        .map(|catalog| crate::engine::epoch::stamped(&catalog, &dump.store_id));
    let stamped = match stamped {
        Ok(stamped) => stamped,
        Err(e) => {
            // The engine's own hint (`--retries`, what to do with a damaged file) speaks of other
            // commands: only its cause is kept.
            let cause = e.message.split("\n  hint: ").next().unwrap_or(e.message.as_str()).trim_end();
            if engine_ahead {
                tracing::warn!("cannot open the engine database {location} to compare it with {name} ({cause}); imported without comparing (`--engine-ahead`)");
                return Ok(());
            }
            bail!(
                "cannot open the engine database {location} to compare it with {name}: {cause}; nothing was imported\n  hint: an import is refused when the database holds writes made after the export; retry once it can be opened (the command writing it is done, the server is reachable), move a damaged file aside (nothing is compared then), or import with `--engine-ahead` to skip the comparison"
            )
        }
    };
    tracing::debug!(stamped, exported = dump.engine_epoch, "engine epoch compared with the export");
    if stamped <= dump.engine_epoch {
        return Ok(());
    }
    let message = crate::engine::epoch::ahead_message(&location, stamped, dump.engine_epoch);
    if engine_ahead {
        let (what, _) = message.split_once("; nothing was imported").unwrap_or((message.as_str(), ""));
        tracing::warn!("{what}; imported anyway (`--engine-ahead`): the imported ledger is trusted as it is");
        return Ok(());
    }
    bail!("{message}")
}
