//! The operator surface: log formats on stderr (logfmt parsed by a logfmt parser, JSON lines,
//! NO_COLOR at a real terminal), `--log-level` validation, stdout staying one JSON object while
//! logs flow, config discovery from a subdirectory, and shell completions.

use crate::common::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

crate::on_every_engine!(
    logs_off_a_terminal_are_logfmt_one_line_per_event,
    json_log_lines_parse_and_stdout_stays_one_json_object,
    an_unknown_log_level_is_refused_and_rust_log_overrides,
    at_a_terminal_logs_are_coloured_unless_no_color,
    at_a_terminal_the_progress_never_reaches_stdout,
    commands_in_a_subdirectory_find_the_config_above,
);

// ---------------------------------------------------------------------------------------------
// A logfmt parser (https://brandur.org/logfmt, as go-logfmt reads it)

/// Parses one logfmt line into its pairs, in order; `Err` names what is malformed. Keys are bare;
/// values are bare (up to the next space) or double-quoted with `\"`, `\\`, `\n`, `\r`, `\t` and
/// `\uXXXX` escapes.
fn parse_logfmt(line: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ' ' {
                break;
            }
            if c == '"' || c.is_control() {
                return Err(format!("bad character {c:?} in a key: {line}"));
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() || chars.next() != Some('=') {
            return Err(format!("expected `key=` at `{key}`: {line}"));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted value of `{key}`: {line}")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('"') => value.push('"'),
                        Some('\\') => value.push('\\'),
                        Some('n') => value.push('\n'),
                        Some('r') => value.push('\r'),
                        Some('t') => value.push('\t'),
                        Some('u') => {
                            let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                            let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).ok_or(format!("bad \\u{hex}: {line}"))?;
                            value.push(c);
                        }
                        other => return Err(format!("bad escape {other:?}: {line}")),
                    },
                    Some(c) if c.is_control() => return Err(format!("raw control character {c:?} inside a quoted value: {line}")),
                    Some(c) => value.push(c),
                }
            }
            if chars.peek().is_some_and(|&c| c != ' ') {
                return Err(format!("garbage after the quoted value of `{key}`: {line}"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                if c == '"' || c == '=' || c.is_control() {
                    return Err(format!("unquoted value of `{key}` has {c:?}: {line}"));
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

#[test]
fn the_logfmt_parser_rejects_what_is_not_logfmt() {
    assert_eq!(parse_logfmt(r#"a=1 b="x y" c="q\"\n""#).expect("ok"), vec![("a".into(), "1".into()), ("b".into(), "x y".into()), ("c".into(), "q\"\n".into())]);
    for bad in [r#"a="open"#, "INFO build done model=x", r#"a=x"y"#, "a=\u{1b}[31m"] {
        assert!(parse_logfmt(bad).is_err(), "{bad}");
    }
}

/// Stderr lines as maps (every line must parse).
fn logfmt_lines(stderr: &str) -> Vec<BTreeMap<String, String>> {
    stderr
        .lines()
        .map(|l| {
            let pairs = parse_logfmt(l).unwrap_or_else(|e| panic!("not logfmt: {e}\n--- stderr\n{stderr}"));
            let keys: Vec<&str> = pairs.iter().take(3).map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["ts", "level", "msg"], "{l}");
            pairs.into_iter().collect()
        })
        .collect()
}

fn logs_off_a_terminal_are_logfmt_one_line_per_event(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let run = p.run(&["--log-level", "debug", "apply", "dev", "--yes"]);
    run.expect_code(0);
    let lines = logfmt_lines(&run.stderr);
    assert!(lines.len() > 10, "{}", run.stderr);
    for l in &lines {
        assert!(["error", "warn", "info", "debug", "trace"].contains(&l["level"].as_str()), "{l:?}");
        assert!(l["ts"].ends_with('Z') && l["ts"].contains('T'), "{l:?}");
    }
    // A start and a finish line with its duration for every model built.
    for model in ["s.a", "s.c", "t.d", "t.daily"] {
        let of = |msg: &str| lines.iter().filter(|l| l["msg"] == msg && l.get("model").map(String::as_str) == Some(model)).count();
        assert_eq!(of("build start"), 1, "{model}:\n{}", run.stderr);
        let done: Vec<_> = lines.iter().filter(|l| l["msg"] == "build done" && l.get("model").map(String::as_str) == Some(model)).collect();
        assert_eq!(done.len(), 1, "{model}:\n{}", run.stderr);
        assert!(done[0]["ms"].parse::<u64>().is_ok(), "{:?}", done[0]);
        assert_eq!(done[0]["level"], "info");
    }
    // Batches carry their numbers.
    let batch = lines.iter().find(|l| l["msg"] == "backfill batch").unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(batch["batch"].parse::<u64>().is_ok() && batch["batches"].parse::<u64>().is_ok() && batch["interval"].starts_with('['), "{batch:?}");
    // Multi-line SQL at debug level is escaped onto its line and comes back intact.
    let sql = lines.iter().filter_map(|l| l.get("sql")).find(|s| s.contains('\n')).unwrap_or_else(|| panic!("no multi-line SQL logged:\n{}", run.stderr));
    assert!(sql.contains("CREATE") || sql.contains("INSERT") || sql.contains("SELECT"), "{sql}");
    assert!(!run.stderr.contains('\u{1b}'), "no ANSI in logfmt");
}

fn json_log_lines_parse_and_stdout_stays_one_json_object(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let run = p.run(&["--log-level", "debug", "--log-format", "json", "apply", "dev", "--yes", "--json"]);
    run.expect_code(0);
    let v = run.json();
    assert_eq!(v["applied"], true, "{v:#}");
    let mut messages = Vec::new();
    for line in run.stderr.lines() {
        let e: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}\n{}", run.stderr));
        assert!(e["timestamp"].is_string() && e["level"].is_string(), "{line}");
        messages.push(e["message"].as_str().unwrap_or_else(|| panic!("{line}")).to_string());
    }
    assert!(messages.iter().any(|m| m == "build done"), "{}", run.stderr);
    assert!(messages.len() > 10, "debug logs flowed: {}", run.stderr);

    // The same with logfmt on stderr: stdout is still exactly the report object.
    let run = p.run(&["--log-level", "trace", "plan", "dev", "--json"]);
    run.expect_code(0);
    assert!(!run.stderr.is_empty());
    run.json();
}

fn an_unknown_log_level_is_refused_and_rust_log_overrides(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let run = p.run(&["--log-level", "verbose", "plan", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("verbose") && run.stderr.contains("--log-level") && run.stderr.contains("debug"), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    let run = p.run(&["--log-format", "xml", "plan", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("logfmt"), "{}", run.stderr);

    // `--log-level error` hides debug lines; RUST_LOG brings them back.
    let quiet = p.run(&["--log-level", "error", "plan", "dev"]);
    quiet.expect_code(0);
    assert!(!quiet.stderr.contains("level=debug"), "{}", quiet.stderr);
    let out = p.command(&["--log-level", "error", "plan", "dev"]).env("RUST_LOG", "efmesh=debug").output().expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("level=debug"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// At a real terminal (a pseudo-terminal on stderr)

/// Runs `cmd` with stderr on a fresh pseudo-terminal (stdout stays a pipe): exit code, stdout,
/// and the bytes the terminal received.
fn with_tty_stderr(mut cmd: Command) -> (i32, String, Vec<u8>) {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: plain libc calls on a descriptor this function owns; the name buffer is sized and
    // NUL-terminated by ptsname_r.
    let (master, name) = unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0, "grantpt");
        assert_eq!(libc::unlockpt(master), 0, "unlockpt");
        let mut buf = [0 as libc::c_char; 256];
        assert_eq!(libc::ptsname_r(master, buf.as_mut_ptr(), buf.len()), 0, "ptsname_r");
        let size = libc::winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
        libc::ioctl(master, libc::TIOCSWINSZ, &size);
        (std::fs::File::from_raw_fd(master), std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
    };
    let slave = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(&name).expect("open the terminal");
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        // EIO once the last writer (the child) closed the terminal.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(slave));
    let out = cmd.output().expect("spawn efmesh");
    drop(cmd); // closes this process's copy of the terminal
    let tty = reader.join().expect("reader");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), tty)
}

fn at_a_terminal_logs_are_coloured_unless_no_color(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let args = ["--log-level", "debug", "plan", "dev"];
    let (code, stdout, tty) = with_tty_stderr(p.command(&args));
    assert_eq!(code, 0, "{stdout}");
    let text = String::from_utf8_lossy(&tty);
    assert!(tty.windows(2).any(|w| w == b"\x1b["), "colours at a terminal:\n{text}");
    assert!(text.contains("DEBUG"), "pretty lines at a terminal:\n{text}");

    let mut cmd = p.command(&args);
    cmd.env("NO_COLOR", "1");
    let (code, stdout, tty) = with_tty_stderr(cmd);
    assert_eq!(code, 0, "{stdout}");
    let text = String::from_utf8_lossy(&tty);
    assert!(text.contains("DEBUG"), "the same lines:\n{text}");
    assert!(!tty.contains(&0x1b), "NO_COLOR: no ANSI byte at all:\n{text:?}");
}

fn at_a_terminal_the_progress_never_reaches_stdout(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let (code, stdout, _) = with_tty_stderr(p.command(&["apply", "dev", "--yes", "--json"]));
    assert_eq!(code, 0, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["applied"], true);
    p.write("models/a.lua", &portable_sample(&p, &model_a("AND range > 2")));
    let (code, stdout, tty) = with_tty_stderr(p.command(&["apply", "dev", "--yes"]));
    assert_eq!(code, 0, "{stdout}\n--- terminal\n{}", String::from_utf8_lossy(&tty));
    assert!(stdout.contains("promoted") && !stdout.contains('\u{1b}') && !stdout.contains('\r'), "{stdout:?}");
    // The bar was drawn, on the terminal (stderr) only.
    let text = String::from_utf8_lossy(&tty);
    assert!(text.contains(" models · "), "a progress bar on the terminal:\n{text:?}");
    assert!(!stdout.contains(" models · "), "{stdout:?}");
}

// ---------------------------------------------------------------------------------------------
// Config discovery

/// `efmesh <args>` run in `dir` without `--config`.
fn run_in(dir: &Path, args: &[&str]) -> Run {
    run_in_with(Command::new(BIN), dir, args)
}

/// [`run_in`] for a project in or above `dir`: its Postgres engine's URL is in the environment.
fn run_for(p: &Project, dir: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.env_remove(PG_ENGINE_URL_ENV);
    if let EngineBackend::Postgres(t) = &p.engine {
        cmd.env(PG_ENGINE_URL_ENV, &t.url);
    }
    run_in_with(cmd, dir, args)
}

fn run_in_with(mut cmd: Command, dir: &Path, args: &[&str]) -> Run {
    let out = cmd
        .current_dir(dir)
        .arg("--now")
        .arg(NOW)
        .args(args)
        .env_remove("EFMESH_NOW")
        .env_remove("RUST_LOG")
        .env("EFMESH_APPLIED_BY", "it")
        .stdin(Stdio::null())
        .output()
        .expect("spawn efmesh");
    Run::from_output(out, format!("(in {}) efmesh {}", dir.display(), args.join(" ")))
}

fn commands_in_a_subdirectory_find_the_config_above(engine: EngineBackend) {
    let p = sample_project_with(StateBackend::Sqlite, engine);
    let deep = p.root().join("notebooks").join("deep");
    fs_err::create_dir_all(&deep).expect("mkdir");
    let run = run_for(&p, &deep, &["--log-level", "debug", "apply", "dev", "--yes", "--json"]);
    run.expect_code(0);
    assert_eq!(run.json()["applied"], true);
    let config = p.root().join("efmesh.toml");
    let said = run.stderr.lines().find(|l| l.contains("using the config")).unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(said.contains(&config.display().to_string()) && said.contains("level=debug"), "{said}");
    // Relative paths in the config resolve against its directory, not the current one.
    // (On Postgres there is no engine file: none appears anywhere.)
    assert!(p.state_path().exists());
    assert_eq!(p.engine_path().exists(), !p.on_postgres());
    assert!(fs_err::read_dir(&deep).expect("ls").next().is_none(), "nothing written in the subdirectory");
    assert_eq!(p.rows(&env_view("dev", "s.c")).len(), 1);
    let again = run_for(&p, &deep, &["plan", "dev", "--json"]);
    assert_eq!(again.expect_code(0).json()["hasChanges"], false, "{}", again.stdout);

    // An explicit --config is used as given (relative to the current directory).
    let other = p.root().join("other");
    fs_err::create_dir_all(&other).expect("mkdir");
    fs_err::write(other.join("efmesh.toml"), "[project]\nmodels = [\"nothing/*.lua\"]\n").expect("write");
    let run = run_for(&p, &deep, &["--config", "../../efmesh.toml", "plan", "dev", "--json"]);
    assert_eq!(run.expect_code(0).json()["hasChanges"], false);
    // The nearest config wins.
    let run = run_for(&p, &other, &["--log-level", "debug", "check"]);
    assert!(run.stderr.contains(&other.join("efmesh.toml").display().to_string()), "{}", run.stderr);
}

#[test]
fn without_any_config_above_the_error_says_where_it_looked() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = run_in(dir.path(), &["plan", "dev"]);
    run.expect_code(1);
    assert!(run.stderr.contains("efmesh.toml") && run.stderr.contains("parent directory"), "{}", run.stderr);
}

// ---------------------------------------------------------------------------------------------
// Completions

#[test]
fn completions_name_the_subcommands() {
    let dir = tempfile::tempdir().expect("tmp");
    for shell in ["bash", "zsh", "fish"] {
        let run = run_in(dir.path(), &["completions", shell]);
        run.expect_code(0);
        for word in ["plan", "apply", "schedule", "completions", "log-format"] {
            assert!(run.stdout.contains(word), "{shell} completions lack `{word}`");
        }
        assert!(run.stderr.is_empty(), "{}", run.stderr);
    }
    run_in(dir.path(), &["completions", "tcsh"]).expect_code(1);
}

/// `completions` reads no project: a `--config` it would ignore is refused (exit 1, no script
/// on stdout) rather than passed over.
#[test]
fn completions_refuse_a_config_they_would_ignore() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = run_in(dir.path(), &["--config", "elsewhere/efmesh.toml", "completions", "bash"]);
    run.expect_code(1);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(run.stderr.contains("`--config elsewhere/efmesh.toml`") && run.stderr.contains("completions"), "{}", run.stderr);
}
