//! `efmesh schedule <env>`: run `efmesh run <env>` on a schedule.
//!
//! - install (default): one entry in the user's crontab, under a marker comment naming the
//!   environment and the project's config, so re-installing replaces it (idempotent) and other
//!   lines of the crontab are kept as they are. The crontab is read with `crontab -l` and
//!   written with `crontab -`, as an operator would.
//! - `--remove`: removes that entry; `--list`: the efmesh entries of the crontab;
//! - `--print-systemd`: prints a service, a timer (`Persistent=true`) and an `OnFailure=` alert
//!   unit running `efmesh status <env> --check`; nothing is installed.
//!
//! An environment the state store does not hold (never applied — a typo such as `prd` for
//! `prod` —, or dropped by the janitor) is warned of on stderr, naming the existing environment
//! most like it, and scheduled all the same: a schedule may be set up before the first apply
//! (until then every tick exits 2, and `status <env> --check` exits 1).
//!
//! Cron expressions are validated by [`crate::core::cron::parse_as`] as crontab reads them (its
//! grammar, its nicknames: an error names the field at fault; one that never fires is refused),
//! and written to the crontab as given.

use super::Exit;
use super::printer::Printer;
use crate::core::cron::{Dialect, Parsed};
use anyhow::{Result, anyhow, bail};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The marker comment before each efmesh entry: `# efmesh schedule: env=<env> config=<path>`.
const MARKER: &str = "# efmesh schedule: env=";

/// The command's flags.
#[derive(Debug)]
pub struct Options {
    /// The environment (`None` only with `--list`).
    pub env: Option<String>,
    /// The cron expression.
    pub cron: String,
    /// Remove the entry.
    pub remove: bool,
    /// List the entries.
    pub list: bool,
    /// Print systemd units instead of touching the crontab.
    pub print_systemd: bool,
    /// `--list` as JSON.
    pub json: bool,
}

/// Runs `schedule`.
///
/// # Errors
/// A missing environment, an invalid environment name or cron expression, an unreadable config,
/// a missing or failing `crontab` command.
pub fn run(config: &Path, o: Options, out: &Printer) -> Result<Exit> {
    if o.list {
        let entries: Vec<Entry> = read_crontab()?.entries().into_iter().filter(|e| o.env.as_ref().is_none_or(|env| &e.env == env)).collect();
        if o.json {
            let entries: Vec<_> = entries.iter().map(|e| json!({"env": e.env, "config": e.config, "cron": e.cron, "command": e.command})).collect();
            out.json(json!({ "entries": entries }))?;
        } else if entries.is_empty() {
            out.text("no efmesh entries in the crontab\n")?;
        } else {
            let width = entries.iter().map(|e| e.env.len()).max().unwrap_or(0);
            let cwidth = entries.iter().map(|e| e.cron.len()).max().unwrap_or(0);
            let lines: String = entries.iter().map(|e| format!("{:width$}  {:cwidth$}  {}\n", e.env, e.cron, e.config)).collect();
            out.text(&lines)?;
        }
        return Ok(Exit::Success);
    }
    if o.json {
        bail!("`--json` goes with `--list` only");
    }
    let Some(env) = o.env else {
        bail!("environment required: efmesh schedule <env> [--cron EXPR] (or `efmesh schedule --list`)");
    };
    crate::core::name::validate_env(&env)?;
    // The identity of an entry: the config's real path, wherever the command runs from.
    let config = fs_err::canonicalize(config).or_else(|_| std::path::absolute(config)).map_err(|e| anyhow!("cannot resolve `{}`: {e}", config.display()))?;
    // A newline (or any control character) in a path would write extra crontab lines.
    let bin = std::env::current_exe().map_err(|e| anyhow!("cannot find the path of this efmesh binary: {e}"))?;
    for path in [&config, &bin] {
        if path.to_string_lossy().chars().any(char::is_control) {
            bail!(
                "`{}` has a control character in its path: a crontab entry cannot name it safely\n  hint: move the project (or efmesh) to a path without newlines or tabs",
                path.display()
            );
        }
    }
    if o.remove {
        let mut tab = read_crontab()?;
        let config = config.to_string_lossy();
        if tab.remove(&env, &config) == 0 {
            out.text(&format!("no crontab entry for `{env}` of {config}: nothing removed\n"))?;
        } else {
            write_crontab(&tab.text())?;
            out.text(&format!("removed the crontab entry for `{env}` of {config}\n"))?;
        }
        return Ok(Exit::Success);
    }
    let loaded = crate::config::Config::load(&config)?;
    let spec = CronSpec::parse(&o.cron).map_err(|e| anyhow!("--cron: {e}"))?;
    match absent(&loaded, &env) {
        Ok(Some(message)) => tracing::warn!(env = %env, "{message}"),
        Ok(None) => {}
        Err(e) => tracing::warn!(env = %env, "cannot read the state store to check that environment `{env}` exists: {e}"),
    }
    let unit = Unit { env: env.clone(), config: config.clone(), root: loaded.root.clone(), bin };
    if o.print_systemd {
        out.text(&unit.systemd(&spec))?;
        return Ok(Exit::Success);
    }
    let log = loaded.root.join(".efmesh").join("logs").join(format!("run-{env}.log"));
    // Before anything is made or written: a path cron cannot be given is refused.
    let command = unit.cron_command(&log)?;
    if let Some(dir) = log.parent() {
        fs_err::create_dir_all(dir)?;
    }
    let mut tab = read_crontab()?;
    let config_text = config.to_string_lossy().into_owned();
    let replaced = tab.remove(&env, &config_text) > 0;
    let line = format!("{} {command}", spec.expr);
    tab.push(&format!("{MARKER}{env} config={config_text}"), &line);
    write_crontab(&tab.text())?;
    out.text(&format!(
        "{} the crontab entry: efmesh run {env} on \"{}\" ({})\n  {line}\n  log: {}\n  hint: `efmesh schedule --list` shows it; `efmesh status {env} --check` says whether the runs succeed\n",
        if replaced { "replaced" } else { "installed" },
        spec.expr,
        spec.describe(),
        log.display()
    ))?;
    Ok(Exit::Success)
}

/// What to warn of when `config`'s state store does not hold `env` (never applied, or dropped
/// by the janitor): every scheduled `run` of it exits 2 until an apply creates it. The message
/// names the existing environment most like `env` (a typo such as `prd`). `None` when the store
/// holds it. Only the store's records are read (no engine, nothing created).
///
/// # Errors
/// The state store cannot be opened or read.
fn absent(config: &crate::config::Config, env: &str) -> Result<Option<String>> {
    let (known, dropped) = match crate::state::open_existing(config)? {
        None => (Vec::new(), None),
        Some(state) => {
            let known = state.environments()?;
            if known.iter().any(|k| k == env) {
                return Ok(None);
            }
            // An environment the janitor dropped has a journal that says so.
            let dropped = super::envlife::dropped_at(state.as_ref(), env)?;
            (known, dropped)
        }
    };
    let what = match dropped {
        Some(at) => super::envlife::dropped_phrase(&at),
        None => "does not exist (nothing was applied to it)".to_string(),
    };
    let like = crate::core::error::did_you_mean(env, known.iter().map(String::as_str)).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
    Ok(Some(format!(
        "environment `{env}` {what}{like}: every scheduled `efmesh run {env}` exits 2 until `efmesh apply {env}` creates it (and `efmesh status {env} --check` exits 1); scheduled all the same"
    )))
}

// ---------------------------------------------------------------------------------------------
// cron expressions

/// A validated cron expression.
#[derive(Debug, Clone)]
pub struct CronSpec {
    /// As written (trimmed); what the crontab line gets.
    pub expr: String,
    /// The five fields (a nickname expanded).
    pub fields: [String; 5],
    /// The schedule.
    cron: croner::Cron,
    /// Minutes, hours, days of month, months, days of week (0 = Sunday) it fires at.
    sets: [BTreeSet<u16>; 5],
}

impl CronSpec {
    /// Validates `expr` as crontab reads it ([`Dialect::Crontab`]): five fields (`minute hour
    /// day-of-month month day-of-week`) or one of `@hourly @daily @midnight @weekly @monthly
    /// @yearly @annually`.
    ///
    /// # Errors
    /// A message naming the field at fault, or saying the expression never fires.
    pub fn parse(expr: &str) -> Result<CronSpec, String> {
        let Parsed { cron, fields } = crate::core::cron::parse_as(expr, Dialect::Crontab)?;
        let p = &cron.pattern;
        let dow: BTreeSet<u16> = p.days_of_week.values().into_iter().map(|d| d % 7).collect();
        let sets = [
            p.minutes.values().into_iter().collect(),
            p.hours.values().into_iter().collect(),
            p.days.values().into_iter().collect(),
            p.months.values().into_iter().collect(),
            dow,
        ];
        Ok(CronSpec { expr: expr.trim().to_string(), fields, cron, sets })
    }

    /// Cron reads day-of-month and day-of-week as "either" when both are restricted (neither
    /// starts with `*`), else as "both": a field starting with `*` (`*/2` too) still restricts
    /// its own values then (as cron itself decides).
    fn dom_restricted(&self) -> bool {
        !self.fields[2].starts_with('*')
    }

    fn dow_restricted(&self) -> bool {
        !self.fields[4].starts_with('*')
    }

    /// A short reading for people (`croner`'s words).
    fn describe(&self) -> String {
        self.cron.describe()
    }

    /// The systemd `OnCalendar=` values firing at the same instants (local time, as cron). Two
    /// values when both day fields are restricted (cron's "either"; a timer fires on any of its
    /// `OnCalendar=` lines).
    pub fn on_calendar(&self) -> Vec<String> {
        let time = format!("{}:{}:00", calendar_list(&self.sets[1], 0, 23, 2), calendar_list(&self.sets[0], 0, 59, 2));
        let month = calendar_list(&self.sets[3], 1, 12, 2);
        let dom = calendar_list(&self.sets[2], 1, 31, 2);
        let weekdays = {
            const NAMES: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
            self.sets[4].iter().map(|&d| NAMES[usize::from(d % 7)]).collect::<Vec<_>>().join(",")
        };
        if self.dom_restricted() && self.dow_restricted() {
            return vec![format!("*-{month}-{dom} {time}"), format!("{weekdays} *-{month}-* {time}")];
        }
        // Otherwise cron requires both fields, a `*/2` in either still restricting its own.
        let weekdays = if self.sets[4].len() == 7 { String::new() } else { format!("{weekdays} ") };
        vec![format!("{weekdays}*-{month}-{dom} {time}")]
    }
}

/// One OnCalendar component: `*` for every value, else a comma list (zero-padded to `width`
/// digits). Never the `a/step` form: systemd 252 (Debian 12) skips the first instant of such a
/// step after the next unit rolls over (`*:00/7` misses 00:00), where the list fires at each.
fn calendar_list(set: &BTreeSet<u16>, min: u16, max: u16, width: usize) -> String {
    let all = (min..=max).all(|v| set.contains(&v));
    if all {
        return "*".into();
    }
    set.iter().map(|x| format!("{x:0width$}")).collect::<Vec<_>>().join(",")
}

// ---------------------------------------------------------------------------------------------
// the command installed

/// What the schedule runs.
struct Unit {
    env: String,
    config: PathBuf,
    root: PathBuf,
    bin: PathBuf,
}

/// Single-quotes `s` for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Quotes one systemd command-line word: specifiers (`%`) and variables (`$`) escaped, double
/// quotes when it has spaces or quotes.
fn sd_word(s: &str) -> String {
    let escaped = s.replace('\\', r"\\").replace('%', "%%").replace('$', "$$").replace('"', "\\\"");
    if escaped.contains([' ', '\t', '"', '\'']) { format!("\"{escaped}\"") } else { escaped }
}

impl Unit {
    /// The crontab command: run from the project directory, output appended to `log`, each `%`
    /// written `\%` (cron ends the command at a bare `%`, the rest becoming the job's stdin).
    ///
    /// Cron reads a backslash before `%` as escaping it, but cron implementations disagree on a
    /// backslash before another backslash: cronie keeps both, vixie cron, Debian's and the BSDs'
    /// make them one. And every cron pairs each backslash with the character after it, so a
    /// path's `\%` written `\\%` is a backslash and then the end of the command. A path with a
    /// backslash before `%` or before another backslash is therefore refused; every other
    /// backslash (before a letter, a quote) is read as itself by all of them.
    ///
    /// # Errors
    /// A path with a backslash before `%` or another backslash, naming it.
    fn cron_command(&self, log: &Path) -> Result<String> {
        // The log's directory is made at every tick: `.efmesh/` is ignored by git, so a
        // `git clean -xdf` or a fresh checkout removes it, and `>>` into a missing directory
        // would fail in the shell before efmesh starts, leaving no trace.
        let dir = log.parent().unwrap_or(log);
        for path in [self.root.as_path(), dir, self.bin.as_path(), self.config.as_path(), log] {
            let text = path.to_string_lossy();
            if text.contains(r"\%") || text.contains(r"\\") {
                bail!(
                    "`{}` has a backslash before `%` or before another backslash in its path: cron implementations read those differently (or end the command there), so a crontab entry cannot name it safely\n  hint: move the project (or efmesh) to a path without them, or use `efmesh schedule {} --print-systemd`",
                    path.display(),
                    self.env
                );
            }
        }
        let cmd = format!(
            "cd {} && mkdir -p {} && {} run {} --config {} >> {} 2>&1",
            sh_quote(&self.root.to_string_lossy()),
            sh_quote(&dir.to_string_lossy()),
            sh_quote(&self.bin.to_string_lossy()),
            self.env,
            sh_quote(&self.config.to_string_lossy()),
            sh_quote(&log.to_string_lossy())
        );
        Ok(cmd.replace('%', r"\%"))
    }

    /// `efmesh-<project directory name>-<hash>-<env>`, every character of the directory name
    /// outside `[A-Za-z0-9_-]` made `-`; `<hash>` is the first 8 hex digits of the BLAKE3 hash
    /// of the project directory's absolute path, so two projects in directories of one name
    /// (`/srv/a/warehouse`, `/srv/b/warehouse`) get units of their own.
    fn title(&self) -> String {
        let project = self.root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "project".into());
        let project: String = project.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '-' }).collect();
        let hash: String = blake3::hash(self.root.as_os_str().as_encoded_bytes()).to_hex().chars().take(8).collect();
        format!("efmesh-{project}-{hash}-{}", self.env)
    }

    /// The three units and how to enable them.
    fn systemd(&self, spec: &CronSpec) -> String {
        let title = self.title();
        let env = &self.env;
        // `Description=` expands specifiers: a `%` of the directory name is written `%%`.
        let project = self.root.file_name().map(|n| n.to_string_lossy().replace('%', "%%")).unwrap_or_default();
        let bin = sd_word(&self.bin.to_string_lossy());
        let config = sd_word(&self.config.to_string_lossy());
        let root = self.root.to_string_lossy().replace('%', "%%");
        let calendars: String = spec.on_calendar().iter().map(|c| format!("OnCalendar={c}\n")).collect();
        format!(
            "# ~/.config/systemd/user/{title}.service
[Unit]
Description=efmesh run {env} ({project})
OnFailure={title}-alert.service

[Service]
Type=oneshot
WorkingDirectory={root}
ExecStart={bin} run {env} --config {config}
# Exit 2 (the project has changes nobody applied: run refuses them) counts as a failure on
# purpose: someone must run `efmesh apply {env}`. Logs: journalctl --user -u {title}.service

# ~/.config/systemd/user/{title}.timer
[Unit]
Description=efmesh run {env} ({project}), cron \"{expr}\"

[Timer]
{calendars}Persistent=true

[Install]
WantedBy=timers.target

# ~/.config/systemd/user/{title}-alert.service
[Unit]
Description=efmesh alert: a scheduled run of {env} failed ({project})

[Service]
Type=oneshot
WorkingDirectory={root}
# The status report lands in the journal (journalctl --user -u {title}-alert.service); add your
# notifier as another ExecStart= line after it.
ExecStart=-{bin} status {env} --check --config {config}

# Enable with:
#   systemctl --user daemon-reload && systemctl --user enable --now {title}.timer
",
            expr = spec.expr
        )
    }
}

// ---------------------------------------------------------------------------------------------
// the crontab

/// One efmesh entry of the crontab.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    env: String,
    config: String,
    cron: String,
    command: String,
}

/// The user's crontab, line by line.
#[derive(Debug, Default)]
struct Crontab {
    lines: Vec<String>,
}

impl Crontab {
    fn parse(text: &str) -> Crontab {
        Crontab { lines: text.lines().map(str::to_string).collect() }
    }

    fn text(&self) -> String {
        let mut s: String = self.lines.iter().map(|l| format!("{l}\n")).collect();
        if s.is_empty() {
            s.push('\n');
        }
        s
    }

    /// Whether `line` is the command `schedule` writes for `env` (`… run <env> --config …`).
    fn runs(line: &str, env: &str) -> bool {
        line.contains(&format!(" run {env} --config "))
    }

    /// `(env, config)` of a marker line.
    fn marker(line: &str) -> Option<(&str, &str)> {
        line.strip_prefix(MARKER)?.split_once(" config=")
    }

    fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for (i, line) in self.lines.iter().enumerate() {
            let Some((env, config)) = Self::marker(line) else { continue };
            let Some(next) = self.lines.get(i + 1).filter(|l| Self::marker(l).is_none() && Self::runs(l, env)) else { continue };
            let words: Vec<&str> = next.split_whitespace().collect();
            let n = if words.first().is_some_and(|w| w.starts_with('@')) { 1 } else { 5 };
            let cron = words.iter().take(n).copied().collect::<Vec<_>>().join(" ");
            let command = words.iter().skip(n).copied().collect::<Vec<_>>().join(" ");
            out.push(Entry { env: env.to_string(), config: config.to_string(), cron, command });
        }
        out
    }

    /// Removes the entries (marker and the line after it) of `env` and `config`; how many.
    fn remove(&mut self, env: &str, config: &str) -> usize {
        let mut kept = Vec::with_capacity(self.lines.len());
        let mut removed = 0;
        let mut i = 0;
        while i < self.lines.len() {
            if Self::marker(&self.lines[i]) == Some((env, config)) {
                removed += 1;
                i += 1;
                // Only our own command line goes with its marker: a line the user wrote after
                // a marker whose entry they deleted by hand is theirs and stays.
                if self.lines.get(i).is_some_and(|l| Self::marker(l).is_none() && Self::runs(l, env)) {
                    i += 1;
                }
                continue;
            }
            kept.push(self.lines[i].clone());
            i += 1;
        }
        self.lines = kept;
        removed
    }

    fn push(&mut self, marker: &str, line: &str) {
        self.lines.push(marker.to_string());
        self.lines.push(line.to_string());
    }
}

fn crontab_missing(e: &std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        anyhow!("no `crontab` command on PATH\n  hint: install cron (e.g. cronie), or use `efmesh schedule <env> --print-systemd` for a systemd timer")
    } else {
        anyhow!("cannot run `crontab`: {e}")
    }
}

/// `crontab -l`; a user without a crontab has an empty one.
fn read_crontab() -> Result<Crontab> {
    // `LC_ALL=C`: the "no crontab for" message is matched in English.
    let out = Command::new("crontab").arg("-l").env("LC_ALL", "C").stdin(Stdio::null()).output().map_err(|e| crontab_missing(&e))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.to_ascii_lowercase().contains("no crontab for") {
            return Ok(Crontab::default());
        }
        bail!("`crontab -l` failed ({}): {}", out.status, stderr.trim());
    }
    Ok(Crontab::parse(&String::from_utf8_lossy(&out.stdout)))
}

/// `crontab -` with `text` on its stdin.
fn write_crontab(text: &str) -> Result<()> {
    let mut child =
        Command::new("crontab").arg("-").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(|e| crontab_missing(&e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes()).map_err(|e| anyhow!("cannot write to `crontab -`: {e}"))?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("`crontab -` refused the new crontab ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(expr: &str) -> String {
        CronSpec::parse(expr).expect_err(expr)
    }

    #[test]
    fn cron_errors_name_the_field() {
        assert!(err("61 * * * *").contains("minute field `61`"), "{}", err("61 * * * *"));
        assert!(err("0 24 * * *").contains("hour field `24`"), "{}", err("0 24 * * *"));
        assert!(err("0 0 32 * *").contains("day-of-month field `32`"));
        assert!(err("0 0 * 13 *").contains("month field `13`"));
        assert!(err("0 0 * * 8").contains("day-of-week field `8`"));
        assert!(err("0 0 L * *").contains("day-of-month field `L`"));
        assert!(err("*/0 * * * *").contains("minute field"));
        assert!(err("0 * * *").contains("has 4 field(s)"));
        assert!(err("@reboot").contains("boot"));
        assert!(err("@often").contains("unknown cron nickname"));
        assert!(err("0 0 30 2 *").contains("never fires"));
        // A range running backwards, which cron refuses, never fires or wraps depending on its
        // version: refused before the crontab is touched (not by `crontab -` afterwards).
        assert!(err("0 0 * * sat-sun").contains("day-of-week field `sat-sun`: the range `sat-sun` runs backwards"), "{}", err("0 0 * * sat-sun"));
        assert!(err("0 0 * * fri-mon").contains("the range `fri-mon` runs backwards"));
        assert!(err("0 22-2 * * *").contains("hour field `22-2`: the range `22-2` runs backwards"));
    }

    #[test]
    fn cron_accepts_what_crontab_accepts() {
        for ok in ["@hourly", "@daily", "*/15 * * * *", "0 9-17 * * mon-fri", "5,35 */2 1,15 jan-jun *", "0 0 29 2 *", "30 4 1-7 * 1"] {
            CronSpec::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        // The weekend, written so that every cron reads it alike (not `sat-sun`).
        for ok in ["0 0 * * 6-7", "0 0 * * sat,sun", "0 0 * * sat-7"] {
            assert_eq!(CronSpec::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}")).on_calendar(), ["Sun,Sat *-*-* 00:00:00"], "{ok}");
        }
    }

    #[test]
    fn on_calendar_matches_cron() {
        let cal = |e: &str| CronSpec::parse(e).expect(e).on_calendar();
        assert_eq!(cal("@hourly"), ["*-*-* *:00:00"]);
        assert_eq!(cal("@daily"), ["*-*-* 00:00:00"]);
        assert_eq!(cal("@weekly"), ["Sun *-*-* 00:00:00"]);
        assert_eq!(cal("*/15 * * * *"), ["*-*-* *:00,15,30,45:00"]);
        assert_eq!(cal("0 9-17 * * mon-fri"), ["Mon,Tue,Wed,Thu,Fri *-*-* 09,10,11,12,13,14,15,16,17:00:00"]);
        assert_eq!(cal("0 0 * * 7"), ["Sun *-*-* 00:00:00"]);
        // Both day fields restricted: cron fires on either, so two calendars.
        assert_eq!(cal("30 4 1,15 * 1"), ["*-*-01,15 04:30:00", "Mon *-*-* 04:30:00"]);
        // A field starting with `*` makes cron require both, its step included: odd days, odd
        // days that are Mondays, the 1st when a Sunday, Tuesday, Thursday or Saturday.
        assert_eq!(cal("0 0 */2 * *"), ["*-*-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00"]);
        assert_eq!(cal("0 0 */10 * *"), ["*-*-01,11,21,31 00:00:00"]);
        assert_eq!(cal("*/7 * * * *"), ["*-*-* *:00,07,14,21,28,35,42,49,56:00"]);
        assert_eq!(cal("0 0 */2 * mon"), ["Mon *-*-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00"]);
        assert_eq!(cal("0 0 1 * */2"), ["Sun,Tue,Thu,Sat *-*-01 00:00:00"]);
    }

    #[test]
    fn crontab_entries_replace_and_remove_only_their_own() {
        let mut tab = Crontab::parse(
            "MAILTO=me\n# mine\n0 1 * * * backup\n# efmesh schedule: env=prod config=/p/efmesh.toml\n0 * * * * cd '/p' && '/bin/efmesh' run prod --config '/p/efmesh.toml' >> '/p/log' 2>&1\n",
        );
        assert_eq!(tab.entries().len(), 1);
        assert_eq!(tab.entries()[0].cron, "0 * * * *");
        assert_eq!(tab.remove("dev", "/p/efmesh.toml"), 0);
        assert_eq!(tab.remove("prod", "/q/efmesh.toml"), 0);
        assert_eq!(tab.remove("prod", "/p/efmesh.toml"), 1);
        assert_eq!(tab.text(), "MAILTO=me\n# mine\n0 1 * * * backup\n");
    }

    #[test]
    fn a_users_line_after_a_marker_whose_entry_was_deleted_by_hand_is_kept() {
        let mut tab = Crontab::parse("# efmesh schedule: env=prod config=/p/efmesh.toml\n0 1 * * * backup\n");
        assert!(tab.entries().is_empty(), "the user's line is not an efmesh entry");
        assert_eq!(tab.remove("prod", "/p/efmesh.toml"), 1);
        assert_eq!(tab.text(), "0 1 * * * backup\n");
    }

    #[test]
    fn systemd_unit_names_tell_apart_two_projects_in_directories_of_one_name() {
        let unit = |root: &str| Unit {
            env: "prod".into(),
            config: PathBuf::from(root).join("efmesh.toml"),
            root: PathBuf::from(root),
            bin: PathBuf::from("/usr/bin/efmesh"),
        };
        let (a, b) = (unit("/srv/a/warehouse").title(), unit("/srv/b/warehouse").title());
        assert_ne!(a, b, "two projects named alike would share (and overwrite) their units");
        for t in [&a, &b] {
            let hash = t.strip_prefix("efmesh-warehouse-").and_then(|t| t.strip_suffix("-prod")).unwrap_or_else(|| panic!("{t}"));
            assert!(hash.len() == 8 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{t}");
        }
        assert_eq!(a, unit("/srv/a/warehouse").title(), "the name is stable for one path");
    }

    #[test]
    fn systemd_descriptions_escape_a_percent_of_the_project_directory() {
        let unit = Unit {
            env: "prod".into(),
            config: PathBuf::from("/srv/50%off/efmesh.toml"),
            root: PathBuf::from("/srv/50%off"),
            bin: PathBuf::from("/usr/bin/efmesh"),
        };
        let units = unit.systemd(&CronSpec::parse("@daily").expect("cron"));
        let descriptions: Vec<&str> = units.lines().filter(|l| l.starts_with("Description=")).collect();
        assert_eq!(descriptions.len(), 3, "{units}");
        for d in descriptions {
            // `%o` would be expanded by systemd (a specifier); `%%` is a literal `%`.
            assert!(d.contains("(50%%off)") && !d.replace("%%", "").contains('%'), "{d}");
        }
        assert!(units.contains("WorkingDirectory=/srv/50%%off\n"), "{units}");
    }

    /// The command cron runs for a crontab line's command field `field`, as its `do_command.c`
    /// reads it: up to the first `%` not escaped, `\%` read as `%`, a backslash before any other
    /// character kept with it — and, with `collapse` (vixie cron, Debian's, the BSDs'; not
    /// cronie), `\\` read as one backslash.
    fn cron_reads(field: &str, collapse: bool) -> String {
        let mut out = String::new();
        let mut escaped = false;
        for c in field.chars() {
            if escaped {
                if c == '%' || (collapse && c == '\\') {
                    out.pop();
                }
                out.push(c);
                escaped = false;
                continue;
            }
            if c == '%' {
                break;
            }
            escaped = c == '\\';
            out.push(c);
        }
        out
    }

    #[test]
    fn every_cron_runs_the_command_as_written_or_the_path_is_refused() {
        let unit = |root: &str| Unit {
            env: "prod".into(),
            config: PathBuf::from(root).join("efmesh.toml"),
            root: PathBuf::from(root),
            bin: PathBuf::from("/usr/bin/efmesh"),
        };
        let log = |root: &str| PathBuf::from(root).join(".efmesh").join("logs").join("run-prod.log");
        for root in ["/srv/warehouse", "/srv/50%off", r"/srv/a\b", "/srv/it's", r"/srv/x\'y%z", r"/srv/end\"] {
            let log = log(root);
            let q = |p: &Path| sh_quote(&p.to_string_lossy());
            let wanted = format!(
                "cd {} && mkdir -p {} && {} run prod --config {} >> {} 2>&1",
                sh_quote(root),
                q(log.parent().expect("a directory")),
                sh_quote("/usr/bin/efmesh"),
                q(PathBuf::from(root).join("efmesh.toml").as_path()),
                q(log.as_path())
            );
            let field = unit(root).cron_command(&log).unwrap_or_else(|e| panic!("{root}: {e}"));
            assert_eq!(cron_reads(&field, false), wanted, "cronie, {root}: {field}");
            assert_eq!(cron_reads(&field, true), wanted, "vixie cron, {root}: {field}");
        }
        // `\%` written `\\%` was a backslash and the end of the command to cron (the rest its
        // stdin); a doubled backslash is one to some crons and two to others: both refused.
        for root in [r"/srv/50\%off", r"/srv/a\\b"] {
            let e = unit(root).cron_command(&log(root)).expect_err(root).to_string();
            assert!(e.starts_with(&format!("`{root}` has a backslash before `%` or before another backslash")) && e.contains("--print-systemd"), "{e}");
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(sd_word("/usr/bin/efmesh"), "/usr/bin/efmesh");
        assert_eq!(sd_word("/my dir/50%"), "\"/my dir/50%%\"");
    }
}
