//! Whole-process benchmark (`bench --process`): the `efmesh` binary timed the way a user runs
//! it, on generated projects (`bench/gen.rs`), next to two floors measured in the same run.
//!
//! ```text
//! scripts/cargo build --bin efmesh && scripts/cargo run --example bench -- --process [N ...]
//!     [--runs K] [--edits E] [--events ROWS] [--seed S] [--keep DIR [--generate-only | --watch-only]]
//! ```
//! Default: N = 100 500 2000 10000, K = 5 runs per command, E = 5 watch edits. The `efmesh`
//! binary is the one beside the example in the target directory (`EFMESH_BIN` overrides); the
//! bench refuses a binary older than the library it was linked with (`cargo run --example`
//! rebuilds the library, not the binary).
//!
//! Per N, in a fresh directory, in this order:
//! - **start floor**: `efmesh --version` (the process start of the same binary: dynamic linking,
//!   DuckDB's and SQLite's libraries, argument parsing);
//! - **read floor**: reading every file of the project's model globs and `efmesh.toml` and
//!   hashing each (blake3), in this process, with no efmesh logic: what any tool that looks at
//!   every model file pays;
//! - **check**: `efmesh check` (load, DAG, column lineage; no database);
//! - **cold plan**: `efmesh plan dev` with no state store, no DuckDB file and no cache under
//!   `<project>/.efmesh/` (each run deletes them first);
//! - **apply**: `efmesh apply dev --yes`, once;
//! - **first no-op plan**: the first `efmesh plan dev` after that apply;
//! - **no-op plan**: K more `efmesh plan dev` runs (the plan is checked to have no changes);
//! - **no-op plan, cold caches**: the same with `<project>/.efmesh/` deleted before each run (no
//!   load cache, no catalog record: every script evaluated, the catalog queried);
//! - **watch re-plan**: in this process, a [`Session`] opened and planned once, then E times: a
//!   one-line edit of one model file (a new `WHERE` term each time, so every edit is a new
//!   definition), then `Session::reload([that file])` + `Session::plan("dev")`, timed from
//!   after the write to the returned plan (what `efmesh watch` does after its debouncer fires);
//!   `Session::save_caches` follows, untimed, as `watch` writes its caches after the redraw.
//!   This process uses the binary's allocator (mimalloc) and reports its CPU time per edit.
//! - with `--watch-only`, also **the `efmesh watch dev --json` process** (`--preview-rows 0`,
//!   then the default): E edits, each waited for; its `planMs` and `replanMs` (from the
//!   debouncer's delivery), `debounceMs` (from the save's last file event to that delivery),
//!   the time from the write to the line read here, and its CPU per edit. Lines are paired
//!   with edits by content (the edited file, the edited model and a new version of it), and a
//!   line that belongs to no edit fails the run: one save must give one line.
//!
//! Each figure is the best of its runs, with the median beside it; `/proc/loadavg` is printed
//! with every table, since the machine is shared.

use efmesh::plan;
use efmesh::session::Session;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Args {
    ns: Vec<usize>,
    runs: usize,
    edits: usize,
    events: i64,
    seed: u64,
    keep: Option<PathBuf>,
    /// Only write the projects (under `--keep DIR`), time nothing.
    generate_only: bool,
    /// Only the watch re-plan, on the projects a previous `--keep DIR` run left applied.
    watch_only: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args { ns: Vec::new(), runs: 5, edits: 5, events: 200_000, seed: 0xEF3E_5B2C_0001, keep: None, generate_only: false, watch_only: false };
    let mut it = std::env::args().skip(1).filter(|x| x != "--process");
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| anyhow::anyhow!("{name} needs a value"));
        match x.as_str() {
            "--runs" => a.runs = val("--runs")?.parse::<usize>()?.max(1),
            "--edits" => a.edits = val("--edits")?.parse::<usize>()?.max(1),
            "--events" => a.events = val("--events")?.parse()?,
            "--seed" => a.seed = val("--seed")?.parse()?,
            "--keep" => a.keep = Some(val("--keep")?.into()),
            "--generate-only" => a.generate_only = true,
            "--watch-only" => a.watch_only = true,
            n => a.ns.push(n.parse().map_err(|e| anyhow::anyhow!("`{n}` is not a model count: {e}"))?),
        }
    }
    if a.ns.is_empty() {
        a.ns = vec![100, 500, 2000, 10_000];
    }
    Ok(a)
}

/// Best and median of a set of runs (wall time), and the median CPU time of the processes run.
#[derive(Debug, Clone, Copy, Default)]
struct Stat {
    best: Duration,
    median: Duration,
    cpu: Option<Duration>,
}

impl Stat {
    fn of(mut v: Vec<Duration>) -> Stat {
        v.sort();
        let mut cpu = take_cpu();
        cpu.sort();
        Stat { best: v[0], median: v[v.len() / 2], cpu: cpu.get(cpu.len() / 2).copied() }
    }
    fn show(&self) -> String {
        let cpu = self.cpu.map(|c| format!(", cpu {}", super::ms(c))).unwrap_or_default();
        format!("{} ({}{cpu})", super::ms(self.best), super::ms(self.median))
    }
}

pub(super) fn loadavg() -> String {
    fs_err::read_to_string("/proc/loadavg").map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_else(|_| "?".into())
}

/// The `efmesh` binary to time, checked not to be older than the library beside it.
pub(super) fn efmesh_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("EFMESH_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe()?;
    // <target>/release/examples/bench → <target>/release/efmesh
    let release = exe.parent().and_then(Path::parent).ok_or_else(|| anyhow::anyhow!("cannot locate the target directory from {}", exe.display()))?;
    let bin = release.join("efmesh");
    let modified = |p: &Path| fs_err::metadata(p).and_then(|m| m.modified());
    let built = modified(&bin).map_err(|_| anyhow::anyhow!("no `efmesh` binary at {}: build it first (`scripts/cargo build --bin efmesh`)", bin.display()))?;
    if let Ok(lib) = modified(&release.join("libefmesh.rlib"))
        && lib > built
    {
        anyhow::bail!("{} is older than the library it is built from: rebuild it (`scripts/cargo build --bin efmesh`)", bin.display());
    }
    Ok(bin)
}

/// CPU time (user + system) of every child this process has waited for.
fn children_cpu() -> Duration {
    rusage(libc::RUSAGE_CHILDREN)
}

/// CPU time (user + system) of this process, all its threads.
fn own_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

thread_local! {
    /// CPU times of the children run since the last [`take_cpu`].
    static CPU: std::cell::RefCell<Vec<Duration>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The CPU times of the processes run since the last call.
fn take_cpu() -> Vec<Duration> {
    CPU.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// Runs `efmesh <args>` in `dir` as a user would (stdout and stderr read to the end), checking
/// it exits 0; returns the wall time and stdout (its CPU time goes to [`take_cpu`]).
fn run(bin: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<(Duration, String)> {
    let cpu0 = children_cpu();
    let t = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_remove("EFMESH_VERIFY_PLAN_MEMO")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()?;
    let d = t.elapsed();
    let cpu = children_cpu().saturating_sub(cpu0);
    CPU.with(|c| c.borrow_mut().push(cpu));
    anyhow::ensure!(out.status.success(), "`efmesh {}` failed ({}):\n{}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr));
    Ok((d, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn runs(k: usize, mut before: impl FnMut() -> anyhow::Result<()>, mut f: impl FnMut() -> anyhow::Result<Duration>) -> anyhow::Result<Stat> {
    let mut v = Vec::with_capacity(k);
    for _ in 0..k {
        before()?;
        v.push(f()?);
    }
    Ok(Stat::of(v))
}

/// Every file under `dir` (recursively), sorted.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for e in fs_err::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            files_under(&e.path(), out)?;
        } else {
            out.push(e.path());
        }
    }
    Ok(())
}

/// Reads and hashes every model file and the config: the read floor.
fn read_floor(dir: &Path) -> anyhow::Result<(Duration, usize, u64)> {
    let t = Instant::now();
    let mut files = vec![dir.join("efmesh.toml")];
    files_under(&dir.join("models"), &mut files)?;
    let mut bytes = 0u64;
    for f in &files {
        let data = fs_err::read(f)?;
        bytes += data.len() as u64;
        std::hint::black_box(blake3::hash(&data));
    }
    Ok((t.elapsed(), files.len(), bytes))
}

/// The directory one size of a bench runs in: `<keep>/<name>` emptied first (kept after the
/// run), or a new temporary directory (`prefix…`) removed with the returned guard.
pub(super) fn bench_dir(keep: Option<&Path>, name: &str, prefix: &str) -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let tmp = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let dir = match keep {
        Some(k) => {
            let d = k.join(name);
            remove(&d)?;
            d
        }
        None => tmp.path().to_path_buf(),
    };
    Ok((tmp, dir))
}

/// Removes the file or directory `p`, if there is one.
pub(super) fn remove(p: &Path) -> anyhow::Result<()> {
    match fs_err::metadata(p) {
        Ok(m) if m.is_dir() => fs_err::remove_dir_all(p)?,
        Ok(_) => fs_err::remove_file(p)?,
        Err(_) => {}
    }
    Ok(())
}

/// The one-line edit of the watch measurement: the model file and the line it edits.
struct Edit {
    file: PathBuf,
    original: String,
    /// Byte offset of the `\nWHERE ` the edit extends.
    at: usize,
    model: String,
}

/// The first model file, from the middle of the project on, whose query has a `WHERE` line.
fn pick_edit(dir: &Path) -> anyhow::Result<Edit> {
    let mut files = Vec::new();
    files_under(&dir.join("models"), &mut files)?;
    files.sort();
    let half = files.len() / 2;
    for f in files[half..].iter().chain(&files[..half]) {
        let text = fs_err::read_to_string(f)?;
        if let Some(at) = text.find("\nWHERE ") {
            let model = text[..at].rfind("name = \"").map(|i| text[i + 8..].split('"').next().unwrap_or("").to_string()).unwrap_or_default();
            return Ok(Edit { file: f.clone(), original: text, at, model });
        }
    }
    anyhow::bail!("no model file with a WHERE line under {}", dir.display())
}

impl Edit {
    /// The file with its `WHERE` line extended by a term unique to `i`.
    fn text(&self, i: usize) -> String {
        let mut t = self.original.clone();
        t.insert_str(self.at + "\nWHERE ".len(), &format!("{} <> {} AND ", i + 1, i + 2));
        t
    }
}

struct Row {
    n: usize,
    files: usize,
    bytes: u64,
    start: Stat,
    read: Stat,
    check: Stat,
    cold: Stat,
    apply: Duration,
    first_noop: Stat,
    noop: Stat,
    noop_cold_caches: Stat,
    watch: Stat,
    watch_reload: Stat,
    watch_plan: Stat,
    watch_model: String,
    watch_changed: usize,
    load: String,
}

fn bench_one(n: usize, args: &Args, bin: &Path) -> anyhow::Result<Row> {
    let (tmp, dir) = bench_dir(args.keep.as_deref(), &format!("p{n}"), "efmesh-bench-process-")?;
    let t = Instant::now();
    let summary = super::generator::generate(&dir, n, args.events, args.seed, false, super::generator::Sql::DuckDb)?;
    eprintln!("[n={n}] generated {} models in {} files in {} ms; load average {}", summary.models, summary.files, super::ms(t.elapsed()), loadavg());
    let k = args.runs;
    let cache = dir.join(".efmesh");
    let state = dir.join("efmesh.state.sqlite");
    let engine = dir.join("efmesh.duckdb");

    take_cpu();
    let start = runs(k, || Ok(()), || Ok(run(bin, &dir, &["--version"])?.0))?;
    let mut files = 0;
    let mut bytes = 0;
    let read = runs(
        k,
        || Ok(()),
        || {
            let (d, f, b) = read_floor(&dir)?;
            (files, bytes) = (f, b);
            Ok(d)
        },
    )?;
    let check = runs(k, || Ok(()), || Ok(run(bin, &dir, &["check"])?.0))?;
    eprintln!("[n={n}] start {}, read {}, check {}", start.show(), read.show(), check.show());

    let fresh = || -> anyhow::Result<()> {
        for p in [&cache, &state, &dir.join("efmesh.state.sqlite-wal"), &dir.join("efmesh.state.sqlite-shm"), &engine, &dir.join("efmesh.duckdb.wal")] {
            remove(p)?;
        }
        Ok(())
    };
    let cold = runs(k, fresh, || Ok(run(bin, &dir, &["plan", "dev"])?.0))?;
    eprintln!("[n={n}] cold plan {}", cold.show());
    fresh()?;

    let (apply, _) = run(bin, &dir, &["apply", "dev", "--yes"])?;
    take_cpu();
    eprintln!("[n={n}] apply {} ms", super::ms(apply));
    let first_noop = runs(1, || Ok(()), || Ok(run(bin, &dir, &["plan", "dev"])?.0))?;
    let noop = runs(k, || Ok(()), || Ok(run(bin, &dir, &["plan", "dev"])?.0))?;
    let (_, json) = run(bin, &dir, &["plan", "dev", "--json"])?;
    take_cpu();
    let v: serde_json::Value = serde_json::from_str(&json)?;
    anyhow::ensure!(v["hasChanges"] == serde_json::Value::Bool(false), "the plan right after apply has changes");
    let noop_cold_caches = runs(k, || remove(&cache), || Ok(run(bin, &dir, &["plan", "dev"])?.0))?;
    eprintln!("[n={n}] first no-op plan {}, no-op plan {}, with cold caches {}", first_noop.show(), noop.show(), noop_cold_caches.show());

    let w = watch(&dir, args.edits)?;
    let row = Row {
        n,
        files,
        bytes,
        start,
        read,
        check,
        cold,
        apply,
        first_noop,
        noop,
        noop_cold_caches,
        watch: w.total,
        watch_reload: w.reload,
        watch_plan: w.plan,
        watch_model: w.model,
        watch_changed: w.changed,
        load: loadavg(),
    };
    eprintln!("[n={n}] watch re-plan {} (reload {}, plan {}); load average {}", row.watch.show(), row.watch_reload.show(), row.watch_plan.show(), row.load);
    drop(tmp);
    Ok(row)
}

/// The watch re-plan measurement of one project.
struct Watch {
    total: Stat,
    reload: Stat,
    plan: Stat,
    model: String,
    changed: usize,
}

/// Watch: one session on the applied project in `dir`, `edits` one-line edits of one model file,
/// each timed from after the write to the returned plan; the file is restored at the end.
fn watch(dir: &Path, edits: usize) -> anyhow::Result<Watch> {
    let edit = pick_edit(dir)?;
    let now = efmesh::core::interval::now_millis();
    let options = plan::Options::default();
    let mut session = Session::open(&dir.join("efmesh.toml"))?;
    let first = session.plan("dev", now, &options)?;
    anyhow::ensure!(!first.has_changes, "the session's first plan has changes");
    let (mut total, mut reloads, mut plans) = (Vec::new(), Vec::new(), Vec::new());
    let mut changed = 0;
    take_cpu();
    for i in 0..edits {
        fs_err::write(&edit.file, edit.text(i))?;
        let cpu0 = own_cpu();
        let t0 = Instant::now();
        let r = session.reload(std::slice::from_ref(&edit.file))?;
        let t1 = Instant::now();
        let p = session.plan("dev", now, &options)?;
        let t2 = Instant::now();
        let cpu = own_cpu().saturating_sub(cpu0);
        CPU.with(|c| c.borrow_mut().push(cpu));
        anyhow::ensure!(p.has_changes && r.changed_models.len() == 1, "edit {i} of `{}` changed {:?}", edit.model, r.changed_models);
        changed = p.actions.iter().filter(|a| a.change != plan::Change::Unchanged).count();
        total.push(t2 - t0);
        reloads.push(t1 - t0);
        plans.push(t2 - t1);
        // As `efmesh watch` does after showing the re-plan: not part of the time to the plan.
        session.save_caches();
    }
    fs_err::write(&edit.file, &edit.original)?;
    Ok(Watch { total: Stat::of(total), reload: Stat::of(reloads), plan: Stat::of(plans), model: edit.model, changed })
}

/// What `efmesh watch dev --json` itself reports per re-plan ([`watch_process`]).
struct WatchProcess {
    /// `planMs` of its JSON lines: from the debouncer's delivery of the file event to the plan
    /// ready (reload, column checks, plan), which a screen draws at once.
    plan: Stat,
    /// `replanMs` of its JSON lines: from the debouncer's delivery of the file event to the line
    /// written (reload, column checks, plan, previews, the line).
    replan: Stat,
    /// `debounceMs` of its JSON lines: from the last file event of the save, as the debouncer
    /// received it, to the delivery (the debounce window and the debouncer's tick).
    debounce: Stat,
    /// From after the write to the line read here: the above plus the file watcher and the
    /// debounce window (`--debounce-ms`, 75 by default).
    end_to_end: Stat,
    /// The watch process's CPU time over all edits (its caches saved after each line included),
    /// divided by the edits (`/proc` counts in 10 ms ticks: only the total is meaningful).
    cpu_per_edit: Duration,
}

/// The `efmesh watch dev --json` process on the applied project in `dir`: `edits` one-line edits
/// of one model file, each waited for, then a pause so the caches it saves after the line are
/// written before the next edit. Extra arguments (e.g. `--preview-rows 0`) go to `watch`. The
/// file is restored at the end.
///
/// Lines are paired with edits by their content, not their order: an edit's line is the first
/// `replan` line read after its write that names the edited file in `changedFiles`, the edited
/// model in `changedModels`, and a version of that model other than the previous edit's. Any
/// other line (read before the write, between the write and its line, or in the pause after)
/// is a stray line: one save must give exactly one line, so a stray line fails the run, named.
fn watch_process(bin: &Path, dir: &Path, edits: usize, extra: &[&str]) -> anyhow::Result<WatchProcess> {
    use std::io::BufRead;
    use std::sync::mpsc;
    let edit = pick_edit(dir)?;
    let rel = edit.file.strip_prefix(dir).unwrap_or(&edit.file).display().to_string();
    let mut child = Command::new(bin)
        .args(["watch", "dev", "--json"])
        .args(extra)
        .current_dir(dir)
        .env_remove("EFMESH_VERIFY_PLAN_MEMO")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    // Each line with the instant it was read, by a thread of its own, so the lines already
    // written can be drained without blocking.
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let result = (|| -> anyhow::Result<WatchProcess> {
        let next = |timeout: Duration| -> anyhow::Result<Option<(Instant, serde_json::Value)>> {
            match rx.recv_timeout(timeout) {
                Ok((at, line)) => Ok(Some((at, serde_json::from_str(&line)?))),
                Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => anyhow::bail!("`efmesh watch` ended"),
            }
        };
        let (_, first) = next(Duration::from_secs(120))?.ok_or_else(|| anyhow::anyhow!("no start line"))?;
        anyhow::ensure!(first["event"] == "start" && first["errors"].as_array().is_some_and(Vec::is_empty), "watch started with {first}");
        std::thread::sleep(Duration::from_millis(300));
        let proc_cpu = |pid: u32| -> Duration {
            // utime and stime, fields 14 and 15 of /proc/<pid>/stat, in clock ticks (100 a second).
            let stat = fs_err::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            let f: Vec<u64> = after.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
            Duration::from_millis(f.iter().sum::<u64>() * 10)
        };
        let version_of = |line: &serde_json::Value| -> Option<String> {
            line["plan"]["models"].as_array()?.iter().find(|m| m["model"] == edit.model.as_str())?["fingerprint"].as_str().map(str::to_string)
        };
        let stray = |when: &str, i: usize, line: &serde_json::Value| {
            anyhow::anyhow!(
                "edit {i}: a stray line {when} (one save must give one line): changedFiles {}, changedModels {}, errors {}",
                line["changedFiles"],
                line["changedModels"],
                line["errors"]
            )
        };
        let cpu0 = proc_cpu(child.id());
        let (mut plan, mut replan, mut debounce, mut end_to_end) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut previous: Option<String> = None;
        for i in 0..edits {
            if let Some((_, line)) = next(Duration::ZERO)? {
                return Err(stray("before the write", i, &line));
            }
            // A text no earlier edit wrote (the in-process measurement used the first ones).
            let t = Instant::now();
            fs_err::write(&edit.file, edit.text(1000 + i))?;
            let (at, line) = next(Duration::from_secs(60))?.ok_or_else(|| anyhow::anyhow!("edit {i}: no line within 60 s"))?;
            let version = version_of(&line);
            let ours = line["event"] == "replan"
                && line["changedFiles"].as_array().is_some_and(|f| f.iter().any(|f| f.as_str() == Some(rel.as_str())))
                && line["changedModels"].as_array().is_some_and(|m| m.iter().any(|m| m.as_str() == Some(edit.model.as_str())))
                && version.is_some()
                && version != previous;
            if !ours {
                return Err(stray("after the write, before its line", i, &line));
            }
            anyhow::ensure!(
                line["changedModels"].as_array().is_some_and(|m| m.len() == 1) && line["errors"].as_array().is_some_and(Vec::is_empty),
                "edit {i}: {line}"
            );
            previous = version;
            end_to_end.push(at - t);
            let ms = |key: &str| -> anyhow::Result<Duration> {
                let ms = line[key].as_f64().ok_or_else(|| anyhow::anyhow!("no {key} in {line}"))?;
                Ok(Duration::from_secs_f64(ms / 1000.0))
            };
            replan.push(ms("replanMs")?);
            plan.push(ms("planMs")?);
            debounce.push(ms("debounceMs")?);
            // The pause: a line in it is a second line for this save.
            if let Some((_, line)) = next(Duration::from_millis(300))? {
                return Err(stray("after its line", i, &line));
            }
        }
        let cpu = proc_cpu(child.id()).saturating_sub(cpu0);
        take_cpu();
        Ok(WatchProcess {
            plan: Stat::of(plan),
            replan: Stat::of(replan),
            debounce: Stat::of(debounce),
            end_to_end: Stat::of(end_to_end),
            cpu_per_edit: cpu / u32::try_from(edits.max(1))?,
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    fs_err::write(&edit.file, &edit.original)?;
    result
}

/// `bench --process`.
pub fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    if args.generate_only {
        let keep = args.keep.as_ref().ok_or_else(|| anyhow::anyhow!("--generate-only needs --keep DIR"))?;
        for &n in &args.ns {
            let d = keep.join(format!("p{n}"));
            remove(&d)?;
            let summary = super::generator::generate(&d, n, args.events, args.seed, false, super::generator::Sql::DuckDb)?;
            eprintln!("[n={n}] generated {} models in {} files under {}", summary.models, summary.files, d.display());
        }
        return Ok(());
    }
    if args.watch_only {
        let keep = args.keep.as_ref().ok_or_else(|| anyhow::anyhow!("--watch-only needs --keep DIR (of an earlier run)"))?;
        let bin = efmesh_bin().ok();
        for &n in &args.ns {
            let dir = keep.join(format!("p{n}"));
            let w = watch(&dir, args.edits)?;
            println!(
                "n={n}: watch re-plan {} (reload {}, plan {}); `{}`; {} models not unchanged; load average {}",
                w.total.show(),
                w.reload.show(),
                w.plan.show(),
                w.model,
                w.changed,
                loadavg()
            );
            if let Some(bin) = &bin {
                for extra in [&["--preview-rows", "0"][..], &[][..]] {
                    let p = watch_process(bin, &dir, args.edits, extra)?;
                    println!(
                        "n={n}: `efmesh watch dev --json {}`: planMs {}, replanMs {}, debounceMs {}, write to line {}, cpu per edit {}; load average {}",
                        extra.join(" "),
                        p.plan.show(),
                        p.replan.show(),
                        p.debounce.show(),
                        p.end_to_end.show(),
                        super::ms(p.cpu_per_edit),
                        loadavg()
                    );
                }
            }
        }
        return Ok(());
    }
    let bin = efmesh_bin()?;
    let version = Command::new(&bin).arg("--version").output()?;
    eprintln!("timing {} ({})", bin.display(), String::from_utf8_lossy(&version.stdout).trim());
    let mut rows = Vec::new();
    for &n in &args.ns {
        rows.push(bench_one(n, &args, &bin)?);
    }
    println!();
    println!(
        "Whole process, times in ms: best (median wall, median CPU of the process) of {} runs; watch: best (median) of {} edits, in this process; load average (1/5/15 min) at the end of each size in the last column.",
        args.runs, args.edits
    );
    println!();
    println!(
        "| models | files (KB) | start floor | read floor | check | cold plan | apply | first no-op plan | no-op plan | no-op plan, cold caches | watch re-plan | load avg |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.n,
            r.files,
            r.bytes / 1024,
            r.start.show(),
            r.read.show(),
            r.check.show(),
            r.cold.show(),
            super::ms(r.apply),
            r.first_noop.show(),
            r.noop.show(),
            r.noop_cold_caches.show(),
            r.watch.show(),
            r.load
        );
    }
    println!();
    println!("Watch re-plan breakdown (ms, best (median)): `Session::reload` / `Session::plan`; the edited model; models not unchanged in the plan");
    println!();
    for r in &rows {
        println!("- n={}: {} / {}; `{}`; {}", r.n, r.watch_reload.show(), r.watch_plan.show(), r.watch_model, r.watch_changed);
    }
    Ok(())
}
