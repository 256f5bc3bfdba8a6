//! `efmesh schedule`: crontab entries through a fake `crontab` command first on PATH (it keeps
//! the table in a file, so no real crontab is touched), cron validation, systemd units. Only
//! the entry's run touches the engine: that test runs on both engines; the rest is crontab and
//! command-line work on a DuckDB project.

use crate::common::*;
use crate::on_every_engine;
use std::path::{Path, PathBuf};

/// A project plus a fake `crontab` (`-l` prints the file or "no crontab for …", `-` stores stdin).
struct Cron {
    p: Project,
    bin: tempfile::TempDir,
}

impl Cron {
    fn new() -> Cron {
        Cron::on_engine(EngineBackend::DuckDb)
    }

    /// [`Cron::new`] with the sample project's models on `engine`.
    fn on_engine(engine: EngineBackend) -> Cron {
        let p = sample_project_with(StateBackend::Sqlite, engine);
        let bin = tempfile::tempdir().expect("tmp");
        let script = "#!/bin/sh\nf=\"$FAKE_CRONTAB\"\ncase \"$1\" in\n  -l) if [ -f \"$f\" ]; then cat \"$f\"; else echo \"no crontab for tester\" >&2; exit 1; fi ;;\n  -) cat > \"$f\" ;;\n  *) echo \"fake crontab: unexpected $*\" >&2; exit 2 ;;\nesac\n";
        let path = bin.path().join("crontab");
        fs_err::write(&path, script).expect("write");
        use std::os::unix::fs::PermissionsExt;
        fs_err::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Cron { p, bin }
    }

    fn table_path(&self) -> PathBuf {
        self.bin.path().join("table")
    }

    fn table(&self) -> String {
        fs_err::read_to_string(self.table_path()).unwrap_or_default()
    }

    fn run_with_path(&self, path: &str, args: &[&str]) -> Run {
        let out = self.p.command(args).env("PATH", path).env("FAKE_CRONTAB", self.table_path()).output().expect("spawn");
        Run::from_output(out, format!("efmesh {}", args.join(" ")))
    }

    fn run(&self, args: &[&str]) -> Run {
        let path = format!("{}:{}", self.bin.path().display(), std::env::var("PATH").unwrap_or_default());
        self.run_with_path(&path, args)
    }

    fn config(&self) -> PathBuf {
        fs_err::canonicalize(self.p.root().join("efmesh.toml")).expect("canonical")
    }
}

fn markers(table: &str) -> usize {
    table.lines().filter(|l| l.starts_with("# efmesh schedule:")).count()
}

on_every_engine!(install_twice_is_one_entry_and_other_lines_are_kept);

fn install_twice_is_one_entry_and_other_lines_are_kept(engine: EngineBackend) {
    let c = Cron::on_engine(engine);
    fs_err::write(c.table_path(), "MAILTO=ops@example.com\n0 1 * * * /usr/local/bin/backup\n").expect("seed table");
    c.run(&["schedule", "prod", "--cron", "*/30 * * * *"]).expect_code(0);
    let first = c.table();
    let run = c.run(&["schedule", "prod", "--cron", "15 * * * *"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("replaced"), "{}", run.stdout);
    let table = c.table();
    assert_eq!(markers(&table), 1, "{table}");
    assert!(table.starts_with("MAILTO=ops@example.com\n0 1 * * * /usr/local/bin/backup\n"), "{table}");
    let entry = table.lines().find(|l| l.starts_with("15 * * * * ")).unwrap_or_else(|| panic!("{table}"));
    let bin = fs_err::canonicalize(BIN).expect("bin");
    assert!(entry.contains(&format!("'{}' run prod --config '{}'", bin.display(), c.config().display())), "{entry}");
    assert!(!table.contains("*/30"), "the first entry was replaced:\n{first}\n---\n{table}");
    // The line runs as cron would run it (sh): from the project, its output in the log.
    let command = entry.trim_start_matches("15 * * * * ");
    // Cron passes its own environment: on Postgres, the one naming the engine's URL.
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(command).env("EFMESH_NOW", NOW);
    if let EngineBackend::Postgres(t) = &c.p.engine {
        sh.env(PG_ENGINE_URL_ENV, &t.url);
    }
    // `.efmesh/` is ignored by git: a `git clean -xdf` removes it; the line makes its log's
    // directory again.
    fs_err::remove_dir_all(c.p.root().join(".efmesh")).expect("remove .efmesh");
    let status = sh.status().expect("sh");
    let log = c.p.root().join(".efmesh/logs/run-prod.log");
    assert!(log.exists(), "{}", log.display());
    assert!(status.code().is_some(), "{status}");
}

#[test]
fn list_and_remove() {
    let c = Cron::new();
    let listed = c.run(&["schedule", "--list", "--json"]);
    assert_eq!(listed.expect_code(0).json()["entries"], serde_json::json!([]));
    assert!(c.run(&["schedule", "--list"]).stdout.contains("no efmesh entries"));
    c.run(&["schedule", "prod"]).expect_code(0);
    c.run(&["schedule", "dev", "--cron", "@daily"]).expect_code(0);
    let v = c.run(&["schedule", "--list", "--json"]).expect_code(0).json();
    let entries = v["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2, "{v:#}");
    assert_eq!(entries[0]["env"], "prod");
    assert_eq!(entries[0]["cron"], "@hourly");
    assert_eq!(entries[1]["cron"], "@daily");
    assert_eq!(entries[0]["config"], c.config().display().to_string());
    assert!(entries[0]["command"].as_str().expect("command").contains("run prod"));

    let run = c.run(&["schedule", "prod", "--remove"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("removed"), "{}", run.stdout);
    let table = c.table();
    assert_eq!(markers(&table), 1, "{table}");
    assert!(table.contains("run dev") && !table.contains("run prod"), "{table}");
    let run = c.run(&["schedule", "prod", "--remove"]);
    run.expect_code(0);
    assert!(run.stdout.contains("nothing removed"), "{}", run.stdout);
    let human = c.run(&["schedule", "--list"]);
    assert!(human.expect_code(0).stdout.starts_with("dev  @daily"), "{}", human.stdout);
}

#[test]
fn a_bad_cron_expression_names_the_field_and_touches_nothing() {
    let c = Cron::new();
    c.run(&["schedule", "prod"]).expect_code(0);
    let before = c.table();
    for (expr, field) in
        [("0 25 * * *", "hour field `25`"), ("0 0 * * mon-xyz", "day-of-week field"), ("0 0 L * *", "day-of-month field `L`"), ("*/5 * * *", "has 4 field(s)")]
    {
        let run = c.run(&["schedule", "prod", "--cron", expr]);
        run.expect_code(1);
        assert!(run.stderr.contains(field), "{expr}: {}", run.stderr);
    }
    let run = c.run(&["schedule", "prod", "--cron", "0 0 31 4 *"]);
    run.expect_code(1);
    assert!(run.stderr.contains("never fires"), "{}", run.stderr);
    assert_eq!(c.table(), before);
    // The environment is required, and checked.
    assert!(c.run(&["schedule"]).expect_code(1).stderr.contains("environment required"));
    c.run(&["schedule", "Prod!"]).expect_code(1);
}

#[test]
fn without_a_crontab_command_the_error_points_to_systemd() {
    let c = Cron::new();
    let empty = tempfile::tempdir().expect("tmp");
    let run = c.run_with_path(&empty.path().display().to_string(), &["schedule", "prod"]);
    run.expect_code(1);
    assert!(run.stderr.contains("crontab") && run.stderr.contains("--print-systemd"), "{}", run.stderr);
}

#[test]
fn systemd_units_have_a_persistent_timer_and_a_failure_alert() {
    let c = Cron::new();
    let run = c.run(&["schedule", "prod", "--cron", "30 4 * * mon-fri", "--print-systemd"]);
    run.expect_code(0);
    let units = &run.stdout;
    let name = c.p.root().file_name().expect("name").to_string_lossy().replace(|ch: char| !ch.is_ascii_alphanumeric() && ch != '_' && ch != '-', "-");
    // `efmesh-<directory>-<8 hex digits of the path's hash>-prod`.
    let title = units
        .lines()
        .find_map(|l| l.strip_prefix("# ~/.config/systemd/user/").and_then(|l| l.strip_suffix(".service")))
        .unwrap_or_else(|| panic!("no unit name in:\n{units}"))
        .to_string();
    let hash = title.strip_prefix(&format!("efmesh-{name}-")).and_then(|t| t.strip_suffix("-prod")).unwrap_or_else(|| panic!("{title}"));
    assert!(hash.len() == 8 && hash.chars().all(|ch| ch.is_ascii_hexdigit()), "{title}");
    for needle in [
        format!("# ~/.config/systemd/user/{title}.service"),
        format!("# ~/.config/systemd/user/{title}.timer"),
        format!("# ~/.config/systemd/user/{title}-alert.service"),
        format!("OnFailure={title}-alert.service"),
        "Persistent=true".to_string(),
        "OnCalendar=Mon,Tue,Wed,Thu,Fri *-*-* 04:30:00".to_string(),
        format!("run prod --config {}", c.config().display()),
        format!("status prod --check --config {}", c.config().display()),
        "WantedBy=timers.target".to_string(),
    ] {
        assert!(units.contains(&needle), "no `{needle}` in:\n{units}");
    }
    assert!(!Path::new(&c.table_path()).exists(), "--print-systemd installs nothing");
}

/// `schedule prd` (a typo of `prod`, which is applied): installed all the same (a schedule may be
/// set up before the first apply), with a warning naming `prod`; `prod` itself is not warned of.
#[test]
fn scheduling_an_environment_the_state_store_does_not_hold_warns_and_names_the_one_meant() {
    let c = Cron::new();
    c.p.apply("prod");
    let run = c.run(&["schedule", "prd"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("installed"), "{}", run.stdout);
    assert!(run.stderr.contains("environment `prd` does not exist (nothing was applied to it) (did you mean `prod`?)"), "{}", run.stderr);
    assert!(run.stderr.contains("exits 2 until `efmesh apply prd` creates it"), "{}", run.stderr);
    assert!(c.table().contains(" run prd --config "), "{}", c.table());
    // The systemd units are warned of alike.
    let units = c.run(&["schedule", "prd", "--print-systemd"]);
    assert!(units.expect_code(0).stderr.contains("environment `prd` does not exist"), "{}", units.stderr);
    let ok = c.run(&["schedule", "prod"]);
    assert!(!ok.expect_code(0).stderr.contains("does not exist"), "{}", ok.stderr);
}
