//! Command-line arguments (clap derive). Only this file knows about clap.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// efmesh: SQL models in Lua, planned and applied on DuckDB with virtual environments.
#[derive(Debug, Parser)]
#[command(
    name = "efmesh",
    version,
    about,
    after_help = "Exit codes: 0 success · 1 error · 2 awaiting a human (apply with changes, no --yes, stdin not a TTY).\n`--json` prints one object whose first key is \"apiVersion\": 1; logs go to stderr."
)]
pub struct Args {
    /// Project configuration file (default: `efmesh.toml` in the current directory or the nearest
    /// parent directory that has one).
    #[arg(long = "config", global = true, value_name = "PATH")]
    pub config_flag: Option<PathBuf>,
    /// The configuration file the command uses: `--config` as given, else the one discovered
    /// (filled by [`Args::resolve_config`]).
    #[arg(skip)]
    pub config: PathBuf,
    /// Minimum log level on stderr; `RUST_LOG` overrides.
    #[arg(long, global = true, value_enum, default_value_t = LogLevel::Info, value_name = "LEVEL")]
    pub log_level: LogLevel,
    /// Log line format on stderr (default: pretty at a terminal, logfmt otherwise).
    #[arg(long, global = true, value_enum, env = "EFMESH_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Pretend the current instant is this UTC timestamp (replays, backfills as of a date, tests).
    #[arg(long, global = true, env = "EFMESH_NOW", value_name = "ISO")]
    pub now: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

impl Args {
    /// Fills [`Args::config`]: `--config` as given, else `efmesh.toml` in `cwd` or its nearest
    /// ancestor that has one (as cargo finds `Cargo.toml`), else `efmesh.toml` (whose absence
    /// the command then reports).
    pub fn resolve_config(&mut self, cwd: &std::path::Path) {
        self.config = match &self.config_flag {
            Some(p) => p.clone(),
            None => crate::config::discover(cwd).unwrap_or_else(|| PathBuf::from(crate::config::CONFIG_FILE)),
        };
    }
}

/// `--log-level`: the minimum level of the log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Lifecycle lines (builds, batches, promotion) and above.
    Info,
    /// Rendered SQL, cache and catalog decisions, and above.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The level as an `EnvFilter` directive names it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// `--log-format`: how log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// For people: one line per event, coloured at a terminal (unless `NO_COLOR` is set).
    Pretty,
    /// For machines and greps: `ts=… level=info msg="build done" model=… ms=…`, one line per event.
    Logfmt,
    /// One JSON object per line (`timestamp`, `level`, `message`, then the fields).
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a project scaffold that plans and applies as is.
    Init {
        /// Directory to create it in.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Show what `apply` would do to an environment: added, changed, removed models and missing intervals.
    Plan {
        /// Environment name (`prod` serves the models' own schemas).
        env: String,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
        /// Show why each model got its category and which AST paths diverged.
        #[arg(long)]
        explain: bool,
        /// Time-range and scd_type2 models whose new version keeps the old table and history (`a.b,c.d`).
        #[arg(long, value_name = "MODELS", default_value = "")]
        forward_only: String,
        /// Override categories: `a.b=breaking,c.d=non-breaking`.
        #[arg(long, value_name = "MODEL=CATEGORY,…", default_value = "")]
        reclassify: String,
        /// Accept that this scd_type2 model's history starts over (repeatable).
        #[arg(long, value_name = "MODEL")]
        reset_history: Vec<String>,
    },
    /// Build what the plan needs, then point the environment's views at the new versions.
    Apply {
        /// Environment name.
        env: String,
        /// Apply without asking.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Time-range and scd_type2 models whose new version keeps the old table and history (`a.b,c.d`).
        #[arg(long, value_name = "MODELS", default_value = "")]
        forward_only: String,
        /// Override categories: `a.b=breaking,c.d=non-breaking` (recorded in the journal).
        #[arg(long, value_name = "MODEL=CATEGORY,…", default_value = "")]
        reclassify: String,
        /// Accept that this scd_type2 model's history starts over (repeatable); without it, apply
        /// refuses a plan that would discard a history.
        #[arg(long, value_name = "MODEL")]
        reset_history: Vec<String>,
        /// When another process holds the environment's lock, wait up to this long (`30s`, `10m`) before giving up.
        #[arg(long, value_name = "DURATION")]
        wait: Option<String>,
        /// Retry transient failures (the engine database or state store locked by another process, I/O errors) up to N times, with exponential backoff; to wait for an environment's lock held by another apply or run, use --wait.
        #[arg(long, value_name = "N", default_value_t = 0)]
        retries: u32,
        /// Build up to N models at once, each on its own engine connection (default: the number of cores; 1 builds one after another).
        #[arg(long, short = 'j', value_name = "N", value_parser = jobs_count)]
        jobs: Option<u32>,
    },
    /// Refresh an environment's current versions (upsert unique-key models, reconcile scd_type2
    /// models, compute missing intervals) without promoting; refuses when the project differs.
    Run {
        /// Environment name.
        env: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Retry transient failures (the engine database or state store locked by another process, I/O errors) up to N times, with exponential backoff; to wait for an environment's lock held by another apply or run, use --wait.
        #[arg(long, value_name = "N", default_value_t = 0)]
        retries: u32,
        /// Build up to N models at once, each on its own engine connection (default: the number of cores; 1 builds one after another).
        #[arg(long, short = 'j', value_name = "N", value_parser = jobs_count)]
        jobs: Option<u32>,
    },
    /// Report an environment's health: last plan applied and by whom, lag per model, failed
    /// intervals, recent run ticks, lock holder. `--check` exits 1 when unhealthy.
    Status {
        /// Environment name.
        env: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Exit 1 on failed intervals or a last run tick that errored (the report is printed either way).
        #[arg(long)]
        check: bool,
    },
    /// Forget the done intervals of a time-range model (and of its time-range descendants) in a
    /// range, for the versions an environment serves, so the next run recomputes them.
    Restate {
        /// Environment name.
        env: String,
        /// The time-range model to restate (`schema.table`).
        #[arg(long, value_name = "MODEL")]
        model: String,
        /// Start of the range (ISO-8601 UTC, aligned to the model's grain).
        #[arg(long, value_name = "ISO")]
        from: String,
        /// End of the range, exclusive (ISO-8601 UTC, aligned to the model's grain).
        #[arg(long, value_name = "ISO")]
        to: String,
        /// Show what would be cleared; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drop the physical storage (tables, views, lake version directories, DuckLake tables) no
    /// environment reaches any more and older than the ttl, and orphans the state store does not know.
    Janitor {
        /// Keep versions that stopped being served (or were created) less than this long ago: days
        /// (fractions allowed; 0 collects at once) or a duration as `[environments] ttl` spells it (`7d`, `12h`, `2w`).
        #[arg(long, value_name = "DAYS", default_value_t = crate::janitor::DEFAULT_TTL_DAYS, value_parser = crate::janitor::parse_ttl_days)]
        ttl: f64,
        /// List what would be dropped; claim and drop nothing.
        #[arg(long, conflicts_with = "adopt")]
        dry_run: bool,
        /// Make this project's state store the only owner of its storage first (the storage's
        /// owner marker), so the orphans there are collected: after the state file was deleted
        /// or replaced, or for storage written before efmesh recorded owners.
        #[arg(long)]
        adopt: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// When another janitor holds the janitor lock, wait up to this long (`30s`, `10m`) before giving up.
        #[arg(long, value_name = "DURATION")]
        wait: Option<String>,
    },
    /// Mark an environment (not `prod`) expired now, so the next `efmesh janitor` drops its views
    /// and state; applying it again before that renews it.
    Invalidate {
        /// Environment name.
        env: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Export or import the whole state store as one versioned JSON document (backup, move
    /// between SQLite and Postgres).
    State {
        /// What to do.
        #[command(subcommand)]
        action: StateAction,
    },
    /// Upgrade the state store to this efmesh's layout, backing it up beside itself first.
    Migrate {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Validate the project without any database: refs, `cols()`, names, cycles, and every column a model reads from a parent.
    Check {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the model unit tests (`project.tests`): fixture rows in, expected rows out, on an in-memory DuckDB.
    Test {
        /// Test names or model names to run (default: every test).
        #[arg(value_name = "NAME_OR_MODEL")]
        selectors: Vec<String>,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the audits against what an environment serves now (its views); exit 1 on a blocking violation.
    Audit {
        /// Environment name.
        env: String,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Only these models (`a.b,c.d`).
        #[arg(long, value_name = "MODELS", default_value = "")]
        model: String,
    },
    /// Keep an environment's plan (and a preview of the changed models' data) up to date while
    /// you edit: re-plan on every save. A screen at a terminal, one JSON line per re-plan otherwise.
    Watch {
        /// Environment name.
        env: String,
        /// One JSON line per re-plan on stdout, even at a terminal.
        #[arg(long)]
        json: bool,
        /// Apply each successful re-plan with changes to the environment (refused for `prod`).
        #[arg(long)]
        apply: bool,
        /// Run the unit tests of the models each save changed.
        #[arg(long)]
        test: bool,
        /// Rows previewed per changed model (0: no preview).
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = row_count())]
        preview_rows: usize,
        /// How old a file event must be before it is re-planned for, in milliseconds, 1 to 60000
        /// (0 would make the file watcher poll without pause; past a minute a save would wait
        /// that long for its line, and a huge window never gives one).
        #[arg(long, value_name = "MS", default_value_t = 75, value_parser = clap::value_parser!(u64).range(1..=MAX_DEBOUNCE_MS))]
        debounce_ms: u64,
    },
    /// Preview models' data: run their queries read-only against what an environment serves for
    /// their parents and compare with what it serves for them now (see docs/preview.md).
    Preview {
        /// Environment name.
        env: String,
        /// Models to preview (default: every model the plan for the environment would build or change).
        #[arg(value_name = "MODEL")]
        models: Vec<String>,
        /// Rows shown per model.
        #[arg(long, default_value_t = 10, value_name = "N", value_parser = row_count())]
        rows: usize,
        /// Print the previews as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a model's SQL: canonical (logical names), or resolved against an environment.
    Render {
        /// Model name `schema.table`.
        model: String,
        /// Resolve references to this environment's views (with `--interval`: the environment
        /// whose tables apply writes, default `prod`).
        #[arg(long)]
        env: Option<String>,
        /// Print the statements apply runs to compute this interval of an
        /// incremental_by_time_range model (DELETE + INSERT per batch, literal bounds); FROM
        /// and TO are ISO-8601 UTC, aligned to the model's grain, TO exclusive.
        #[arg(long, num_args = 2, value_names = ["FROM", "TO"])]
        interval: Option<Vec<String>>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Column-level lineage: where a model's columns (or one column) take their values from,
    /// through CTEs, joins, `*` and embedded models down to externals and seeds; with
    /// `--downstream`, the columns that read it. From the project alone (no engine).
    Lineage {
        /// `schema.table` (every column) or `schema.table.column`.
        #[arg(value_name = "MODEL[.COLUMN]")]
        target: String,
        /// Follow at most N levels of models.
        #[arg(long, value_name = "N")]
        depth: Option<usize>,
        /// The columns that read it (and the models that filter, join or group by it), instead
        /// of the columns it reads.
        #[arg(long)]
        downstream: bool,
        /// Print the lineage trees as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show which models two environments serve differently (added, removed, at another
    /// version), from the state store alone; with `--data`, how their data differs.
    Diff {
        /// The environment compared from.
        env_a: String,
        /// The environment compared to.
        env_b: String,
        /// Only these models (comma-separated `schema.table`).
        #[arg(long, value_name = "M,…")]
        model: Option<String>,
        /// Also compare the data each environment serves (row counts, keys only on one side,
        /// per-column mismatches, schema drift), read-only on the engine.
        #[arg(long)]
        data: bool,
        /// With `--data`: compare only the keys in a deterministic share of P percent (1 to 99).
        #[arg(long, value_name = "P")]
        sample: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the DAG: models by layer with their kinds (and their state against an environment),
    /// as text, JSON, or a self-contained HTML page.
    Graph {
        /// Print the nodes and edges as JSON.
        #[arg(long)]
        json: bool,
        /// Write a self-contained HTML page of the DAG to this file.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Only these models: `m`, `+m` (with ancestors), `m+` (with descendants), `2+m`, `m+1`,
        /// `kind:K`, `schema:S`, `tag:T`; several separated by commas or spaces.
        #[arg(long, value_name = "EXPR")]
        select: Option<String>,
        /// Show each model's state against this environment (the categories `efmesh plan E` gives).
        #[arg(long, value_name = "ENV")]
        env: Option<String>,
    },
    /// Print a shell completion script on stdout (`efmesh completions bash > …`, see docs/operations.md).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run `efmesh run <env>` on a schedule: install it in your crontab (idempotent), remove or
    /// list it, or print systemd units that do the same.
    Schedule {
        /// Environment name (not needed with `--list`).
        env: Option<String>,
        /// When to run, as a 5-field cron expression or `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`.
        #[arg(long, value_name = "EXPR", default_value = "@hourly")]
        cron: String,
        /// Remove this project's entry for the environment from the crontab.
        #[arg(long, conflicts_with_all = ["list", "print_systemd"])]
        remove: bool,
        /// List the efmesh entries of the crontab.
        #[arg(long, conflicts_with = "print_systemd")]
        list: bool,
        /// Print a systemd service, timer and failure-alert unit instead of touching the crontab.
        #[arg(long)]
        print_systemd: bool,
        /// With `--list`: print the entries as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `efmesh state …`.
#[derive(Debug, Subcommand)]
pub enum StateAction {
    /// Write the whole state store (snapshots, environments, ledger, journal, ticks, the
    /// janitor's bookkeeping…) as one JSON document to FILE, or to stdout (`-` or no FILE).
    Export {
        /// Where to write it (`-`: stdout, the default).
        #[arg(value_name = "FILE|-")]
        file: Option<PathBuf>,
        /// With a FILE: print the report as JSON (to stdout the document is the output).
        #[arg(long)]
        json: bool,
    },
    /// Load a document `state export` wrote into this project's state store, in one
    /// transaction; refused when the store is not empty unless `--force` (which replaces it),
    /// and when the project's engine database holds writes made after the export (its epoch
    /// stamp past the document's `engineEpoch`) unless `--engine-ahead`.
    Import {
        /// The document (`-`: stdin).
        #[arg(value_name = "FILE|-")]
        file: PathBuf,
        /// Replace the content of a store that is not empty.
        #[arg(long)]
        force: bool,
        /// Import even when the engine database holds writes made after the export, or cannot be
        /// opened to tell: the imported ledger is trusted as it is (safe only when every later
        /// write went to tables of versions the export does not record or computed only new
        /// intervals: no restatement, forward-only change or lookback rewrite since; see
        /// docs/operations.md).
        #[arg(long)]
        engine_ahead: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// True when the command was asked for `--json` (its report, or its error, is one JSON
    /// object on stdout).
    pub fn json(&self) -> bool {
        match self {
            // `watch` writes its own JSON lines, failures included.
            Command::Init { .. } | Command::Watch { .. } | Command::Completions { .. } => false,
            Command::Plan { json, .. }
            | Command::Apply { json, .. }
            | Command::Run { json, .. }
            | Command::Status { json, .. }
            | Command::Restate { json, .. }
            | Command::Migrate { json }
            | Command::Invalidate { json, .. }
            | Command::State { action: StateAction::Export { json, .. } | StateAction::Import { json, .. } }
            | Command::Janitor { json, .. }
            | Command::Check { json }
            | Command::Test { json, .. }
            | Command::Audit { json, .. }
            | Command::Preview { json, .. }
            | Command::Render { json, .. }
            | Command::Diff { json, .. }
            | Command::Graph { json, .. }
            | Command::Lineage { json, .. }
            | Command::Schedule { json, .. } => *json,
        }
    }
}

/// The largest `watch --debounce-ms`: a minute. A larger window only delays each save's line,
/// and one near `u64::MAX` was taken and then never delivered a save at all.
pub const MAX_DEBOUNCE_MS: u64 = 60_000;

/// The parser of a number of rows to show (`preview --rows`, `watch --preview-rows`): a whole
/// number up to `i64::MAX`. The engines take it as a `LIMIT`, a 64-bit signed integer on both
/// (beyond it DuckDB fails converting it and Postgres calls it out of range, each blamed on the
/// model previewed): a larger number is refused here, naming the flag, as a usage error.
fn row_count() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(..=i64::MAX.unsigned_abs())
}

/// `--jobs N`: a whole number of 1 or more (what 0 or a word would mean is said, not a range).
fn jobs_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("0 jobs build nothing: give 1 or more (1 builds one model after another)".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a number of jobs: give a whole number, 1 or more")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_count_beyond_what_a_limit_takes_is_refused_naming_the_flag() {
        let max = i64::MAX.to_string();
        let rows = |args: &[&str]| match Args::try_parse_from(args).map(|a| a.command) {
            Ok(Command::Preview { rows, .. } | Command::Watch { preview_rows: rows, .. }) => Ok(u64::try_from(rows).ok()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(rows(&["efmesh", "preview", "dev", "--rows", max.as_str()]), Ok(Some(i64::MAX.unsigned_abs())));
        assert_eq!(rows(&["efmesh", "preview", "dev", "--rows", "0"]), Ok(Some(0)));
        assert_eq!(rows(&["efmesh", "preview", "dev"]), Ok(Some(10)));
        assert_eq!(rows(&["efmesh", "watch", "dev", "--preview-rows", max.as_str()]), Ok(Some(i64::MAX.unsigned_abs())));
        let refused: [(&[&str], &str); 3] = [
            (&["efmesh", "preview", "dev", "--rows", "9223372036854775808"], "--rows"),
            (&["efmesh", "preview", "dev", "--rows", "99999999999999999999999"], "--rows"),
            (&["efmesh", "watch", "dev", "--preview-rows", "9223372036854775808"], "--preview-rows"),
        ];
        for (args, flag) in refused {
            let e = rows(args).expect_err("refused");
            assert!(e.contains(flag) && e.contains(args.last().copied().unwrap_or_default()), "{args:?}: {e}");
        }
    }

    /// `watch --debounce-ms` takes 1 to a minute: 0 would poll without pause, and a window near
    /// `u64::MAX` was taken, after which a save never produced a line.
    #[test]
    fn a_debounce_window_past_a_minute_or_zero_is_refused_naming_the_flag() {
        let debounce = |ms: &str| match Args::try_parse_from(["efmesh", "watch", "dev", "--debounce-ms", ms]).map(|a| a.command) {
            Ok(Command::Watch { debounce_ms, .. }) => Ok(debounce_ms),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(debounce("1"), Ok(1));
        assert_eq!(debounce("60000"), Ok(MAX_DEBOUNCE_MS));
        for ms in ["0", "60001", "18446744073709551615", "18446744073709551616"] {
            let e = debounce(ms).expect_err("refused");
            assert!(e.contains("--debounce-ms") && e.contains(ms), "{ms}: {e}");
        }
    }
}
