//! A Postgres for the state-store tests: the server `EFMESH_TEST_PG_URL` names when set, else a
//! throwaway cluster this test process starts once (`initdb` + `pg_ctl`, as the `postgres` user
//! when the tests run as root; a unix socket in a temporary directory, no TCP listener, `fsync`
//! off) and stops when it exits (an `atexit` hook, and a watchdog that stops it if the process
//! dies without running it). Each test gets a fresh schema ([`fresh`]).
//!
//! Without a URL and without the Postgres binaries the tests FAIL, naming what is missing
//! (`.ci/run` installs `postgresql`), unless `EFMESH_SKIP_PG=1` is set: then [`fresh`] returns
//! `None` and the test returns without checking anything (and says so on stderr).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable naming an existing server to use instead of a throwaway cluster.
pub const URL_ENV: &str = "EFMESH_TEST_PG_URL";
/// Set to `1` to skip the Postgres tests where no Postgres is available.
pub const SKIP_ENV: &str = "EFMESH_SKIP_PG";

/// One test's store: the database URL and a schema no other test uses.
#[derive(Debug, Clone)]
pub struct PgTarget {
    /// The database URL (it may hold a password: never print it).
    pub url: String,
    /// A fresh schema name.
    pub schema: String,
}

impl PgTarget {
    /// Opens (creating) the store of this target.
    pub fn open(&self) -> efmesh::state::PostgresStore {
        efmesh::state::PostgresStore::open(&self.url, &self.schema).unwrap_or_else(|e| panic!("open the Postgres store: {e:?}"))
    }

    /// A plain client on the target's database.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap_or_else(|e| panic!("connect to the test Postgres: {e}"))
    }
}

/// The running cluster this process started.
struct Cluster {
    /// The URL of its `postgres` database.
    url: String,
    pg_ctl: PathBuf,
    data: PathBuf,
    /// The temporary directory holding the data and the socket (removed at exit).
    dir: PathBuf,
    /// The user the cluster runs as (`None`: this user).
    run_as: Option<String>,
}

static SERVER: OnceLock<Result<String, String>> = OnceLock::new();
static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh schema on the test Postgres, or `None` when [`SKIP_ENV`] is `1` and there is no
/// Postgres. Panics (the test fails) when there is none and skipping was not asked for.
#[track_caller]
pub fn fresh() -> Option<PgTarget> {
    let url = match SERVER.get_or_init(server) {
        Ok(url) => url.clone(),
        Err(why) if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED (EFMESH_SKIP_PG=1): no Postgres for this test: {why}");
            return None;
        }
        Err(why) => panic!(
            "no Postgres for the Postgres state-store tests: {why}\n  hint: install `postgresql` (`.ci/run` does), or set {URL_ENV} to a server's URL, or set {SKIP_ENV}=1 to skip them"
        ),
    };
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    Some(PgTarget { url, schema: format!("t_{}_{n}", std::process::id()) })
}

/// A fresh, empty database on the test Postgres (for a project whose ENGINE is Postgres), or
/// `None` as [`fresh`]. Its `url` names the new database; `schema` is unused.
#[track_caller]
pub fn fresh_database() -> Option<PgTarget> {
    let server = fresh()?;
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let name = format!("e_{}_{n}", std::process::id());
    server.client().batch_execute(&format!("CREATE DATABASE {name}")).unwrap_or_else(|e| panic!("create the test database {name}: {e}"));
    Some(PgTarget { url: with_database(&server.url, &name), schema: String::new() })
}

/// `url` (a `postgres://` URL or a `key=value` string) naming the database `db` instead.
pub fn with_database(url: &str, db: &str) -> String {
    if !url.contains("://") {
        return format!("{url} dbname={db}");
    }
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[after_scheme..].find('/').map_or(base.len(), |i| after_scheme + i);
    let mut out = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// The URL of the server to use: [`URL_ENV`], or a cluster started now.
fn server() -> Result<String, String> {
    if let Some(url) = std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty()) {
        return Ok(url);
    }
    let bin = bin_dir().ok_or_else(|| "neither `initdb` nor `pg_ctl` was found on PATH or in /usr/lib/postgresql/*/bin".to_string())?;
    start_cluster(&bin).map(|c| CLUSTER.get_or_init(|| c).url.clone())
}

/// The directory holding `initdb` and `pg_ctl`: PATH first, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file()));
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<(u32, PathBuf)> = fs_err::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, b)| b.join("initdb").is_file() && b.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

/// `program args…`, as `run_as` when given (`runuser -u <user> --`).
fn command(run_as: Option<&str>, program: &Path) -> Command {
    match run_as {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

fn run(mut c: Command, what: &str) -> Result<(), String> {
    let out = c.stdin(Stdio::null()).output().map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({}): {}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

fn start_cluster(bin: &Path) -> Result<Cluster, String> {
    // Postgres refuses to run as root: run it as `postgres` then, owning its directories.
    let root = unsafe { libc::geteuid() } == 0;
    let run_as = root.then(|| "postgres".to_string());
    let dir = tempfile::Builder::new().prefix("efmesh-pg-").tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?.keep();
    let data = dir.join("data");
    if let Some(user) = &run_as {
        let pw = user_ids(user).ok_or_else(|| format!("running as root, and there is no `{user}` user to run the cluster as"))?;
        chown(&dir, pw)?;
    }
    // A port only names the socket file: there is no TCP listener, so no port is taken.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(54329);
    let options =
        format!("-c listen_addresses='' -k {} -p {port} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", dir.display());
    let cluster =
        Cluster { url: format!("postgres://efmesh@{}:{port}/postgres", percent(&dir.display().to_string())), pg_ctl: bin.join("pg_ctl"), data, dir, run_as };
    // Before anything runs: a process killed while `initdb` or `pg_ctl start` runs still
    // stops its cluster and removes its directory.
    watchdog(&cluster);
    let (data, dir) = (&cluster.data, &cluster.dir);
    let mut init = command(cluster.run_as.as_deref(), &bin.join("initdb"));
    init.arg("-D").arg(data).args(["-U", "efmesh", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"]);
    run(init, "initdb")?;
    let mut start = command(cluster.run_as.as_deref(), &bin.join("pg_ctl"));
    start.arg("-D").arg(data).arg("-l").arg(dir.join("log")).args(["-w", "-t", "60", "-o", &options, "start"]);
    // pg_ctl leaves the server running with inherited pipes: give it none.
    start.stdout(Stdio::null()).stderr(Stdio::null());
    let status = start.stdin(Stdio::null()).status().map_err(|e| format!("cannot run pg_ctl: {e}"))?;
    if !status.success() {
        let log = fs_err::read_to_string(dir.join("log")).unwrap_or_default();
        return Err(format!("pg_ctl start failed ({status}): {log}"));
    }
    unsafe { libc::atexit(stop_at_exit) };
    Ok(cluster)
}

/// `path` percent-encoded for the host part of a URL (a unix socket directory).
fn percent(path: &str) -> String {
    path.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

fn user_ids(user: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().parse().ok())?
    };
    Some((id("-u")?, id("-g")?))
}

fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), String> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    if unsafe { libc::chown(c.as_ptr(), uid, gid) } != 0 {
        return Err(format!("cannot chown {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The `pg_ctl stop` command of `cluster`.
fn stop_command(cluster: &Cluster) -> Command {
    let mut c = command(cluster.run_as.as_deref(), &cluster.pg_ctl);
    c.arg("-D").arg(&cluster.data).args(["-m", "immediate", "-w", "stop"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// Stops the cluster and removes its directory when this process exits normally.
extern "C" fn stop_at_exit() {
    if let Some(cluster) = CLUSTER.get() {
        let _ = stop_command(cluster).status();
        let _ = fs_err::remove_dir_all(&cluster.dir);
    }
}

/// A shell that stops the cluster once this process is gone (killed, aborted): it polls the
/// test process's pid every 200 ms, then tries `pg_ctl stop` for up to 20 s (a `pg_ctl start`
/// the process left running may bring the server up only then), and removes the directory.
fn watchdog(cluster: &Cluster) {
    let stop = stop_command(cluster);
    let mut line = format!("{:?}", stop.get_program());
    for a in stop.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&a.to_string_lossy()));
    }
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; i=0; while [ $i -lt 100 ] && [ -d {dir} ]; do {line} >/dev/null 2>&1 && break; i=$((i+1)); sleep 0.2; done; rm -rf {dir}",
        pid = std::process::id(),
        dir = shell_quote(&cluster.dir.display().to_string())
    );
    let _ = Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
