//! The Postgres mode of the floor bench (`bench --floor N … --postgres`, issue #14 part 7): the
//! generated project written for the Postgres engine (`gen.rs`, [`Sql::Postgres`]) and applied by
//! `efmesh` to a Postgres database, next to the floor's script run on another database of the
//! same server by `bench --floor-exec-pg SCRIPT` (a process with no efmesh in it).
//!
//! The server is the one [`URL_ENV`] names (a URL or `key=value` string of a database the role
//! may connect to; the role needs `CREATEDB`). Per N, untimed: a template database holding the
//! three source tables (`src.*`, created and filled with `COPY` from the project's CSV files,
//! then `ANALYZE`d); before every timed run, the side's database is dropped and created anew
//! from that template (`CREATE DATABASE … TEMPLATE`), so each run starts from the same sources
//! and nothing else. Each child process gets its database's URL in
//! [`PG_ENGINE_URL_ENV`] (the variable the generated `efmesh.toml` names), never on its command
//! line.

use super::generator::{PG_ENGINE_URL_ENV, PG_SOURCES, Sql};
use efmesh::core::Model;
use efmesh::core::name::quote_ident;
use std::path::Path;

/// The variable holding the Postgres server the bench runs on.
pub const URL_ENV: &str = "EFMESH_BENCH_PG_URL";

/// The [`Sql`] of a Postgres bench's projects.
pub const SQL: Sql = Sql::Postgres;

/// A Postgres server, reached through the database [`URL_ENV`] names.
pub struct Server {
    url: String,
    config: postgres::Config,
}

impl Server {
    /// The server of [`URL_ENV`].
    ///
    /// # Errors
    /// The variable is unset or does not parse.
    pub fn from_env() -> anyhow::Result<Server> {
        let url = std::env::var(URL_ENV).map_err(|_| {
            anyhow::anyhow!(
                "--postgres needs {URL_ENV}: the URL of a database on a Postgres server the bench may create databases on \
                 (e.g. postgres://user@%2Ftmp%2Fpg:5432/postgres)"
            )
        })?;
        let config = efmesh::pg::parse(&url).map_err(|e| anyhow::anyhow!("{URL_ENV}: {e}"))?;
        Ok(Server { url, config })
    }

    /// The server as messages name it (no password).
    pub fn describe(&self) -> String {
        efmesh::pg::describe(&self.config)
    }

    /// The URL of database `db` on this server (the URL of [`URL_ENV`] with `dbname` set).
    pub fn url_of(&self, db: &str) -> String {
        if self.url.contains("://") {
            let sep = if self.url.contains('?') { '&' } else { '?' };
            format!("{}{sep}dbname={db}", self.url)
        } else {
            format!("{} dbname={db}", self.url)
        }
    }

    fn connect(&self, db: Option<&str>) -> anyhow::Result<postgres::Client> {
        let mut config = self.config.clone();
        if let Some(db) = db {
            config.dbname(db);
        }
        config.application_name("efmesh-bench");
        efmesh::pg::connect(config)
            .map_err(|e| anyhow::anyhow!("cannot connect to {}: {}", self.describe(), efmesh::pg::scrubbed(&e, efmesh::pg::secret(&self.config).as_deref())))
    }

    fn admin(&self, sql: &str) -> anyhow::Result<()> {
        self.connect(None)?.batch_execute(sql).map_err(|e| anyhow::anyhow!("{sql}: {}", efmesh::pg::scrubbed(&e, None)))
    }

    /// Drops `db` (ending any session left on it) and creates it anew: a copy of `template`.
    pub fn recreate(&self, db: &str, template: &str) -> anyhow::Result<()> {
        self.drop_database(db)?;
        self.admin(&format!("CREATE DATABASE {} TEMPLATE {}", quote_ident(db), quote_ident(template)))
    }

    /// `ANALYZE`s database `db`: the applied state the promotion and the breaking change start
    /// from is the same on both sides whether or not autovacuum reached its tables yet (a
    /// table filled without statistics can turn a join into a nested loop: at 500 models the
    /// floor's breaking change took 0.1 s or 0.8 s depending on it).
    pub fn analyze(&self, db: &str) -> anyhow::Result<()> {
        self.connect(Some(db))?.batch_execute("ANALYZE").map_err(|e| anyhow::anyhow!("ANALYZE {db}: {}", efmesh::pg::scrubbed(&e, None)))
    }

    /// Drops `db` if it exists, ending any session left on it.
    pub fn drop_database(&self, db: &str) -> anyhow::Result<()> {
        self.admin(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(db)))
    }

    /// A new database `db` holding the sources of the project in `dir`: the tables of
    /// [`PG_SOURCES`] filled from its CSV files (`COPY … FROM STDIN`), then `ANALYZE`d.
    /// Returns its size in bytes.
    pub fn load_template(&self, db: &str, dir: &Path) -> anyhow::Result<i64> {
        self.drop_database(db)?;
        self.admin(&format!("CREATE DATABASE {}", quote_ident(db)))?;
        let mut c = self.connect(Some(db))?;
        let err = |e: postgres::Error| anyhow::anyhow!("loading the sources: {}", efmesh::pg::scrubbed(&e, None));
        c.batch_execute("CREATE SCHEMA src").map_err(err)?;
        for (table, columns, file) in PG_SOURCES {
            c.batch_execute(&format!("CREATE TABLE {table} ({columns})")).map_err(err)?;
            let mut w = c.copy_in(&format!("COPY {table} FROM STDIN (FORMAT csv, HEADER true)")).map_err(err)?;
            std::io::copy(&mut fs_err::File::open(dir.join("data").join(file))?, &mut w)?;
            w.finish().map_err(err)?;
        }
        c.batch_execute("ANALYZE").map_err(err)?;
        let size = c.query_one("SELECT pg_database_size(current_database())", &[]).map_err(err)?;
        Ok(size.get(0))
    }

    /// Compares each `(efmesh relation, floor relation, model)`, efmesh's in database `ours`
    /// and the floor's in `theirs`: the same row count and (with `full`) the same multiset of
    /// rows, doubles rounded to 6 decimals. Two databases cannot be joined, so each side's rows
    /// are summarised where they are: the sum of a 64-bit hash of every row's text
    /// (`hashtextextended`), which does not depend on row order. A relation whose rows agree
    /// once the double columns are left out is counted apart (summation order), as on DuckDB.
    /// Returns the number compared and the number differing only in double columns.
    pub fn compare(&self, ours: &str, theirs: &str, pairs: &[(String, String, &Model)], full: bool) -> anyhow::Result<(usize, usize)> {
        let (mut a, mut b) = (self.connect(Some(ours))?, self.connect(Some(theirs))?);
        let is_double = |ty: &str| {
            let t = ty.to_ascii_lowercase();
            t.contains("double") || t.contains("float") || t.contains("real")
        };
        let summary = |c: &mut postgres::Client, rel: &str, m: &Model| -> anyhow::Result<Vec<Option<String>>> {
            let hash = |cols: Vec<String>| {
                if cols.is_empty() { "0".to_string() } else { format!("coalesce(sum(hashtextextended(CAST(ROW({}) AS text), 0)), 0)", cols.join(", ")) }
            };
            let sql = if full {
                let all = m
                    .schema
                    .0
                    .iter()
                    .map(|c| {
                        let q = quote_ident(&c.name);
                        if is_double(&c.ty) { format!("round(CAST({q} AS numeric), 6)") } else { q }
                    })
                    .collect();
                let exact = m.schema.0.iter().filter(|c| !is_double(&c.ty)).map(|c| quote_ident(&c.name)).collect();
                format!("SELECT count(*), {}, {} FROM {rel}", hash(all), hash(exact))
            } else {
                format!("SELECT count(*) FROM {rel}")
            };
            let rows = c.simple_query(&sql).map_err(|e| anyhow::anyhow!("{sql}: {}", efmesh::pg::scrubbed(&e, None)))?;
            rows.into_iter()
                .find_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
                    _ => None,
                })
                .ok_or_else(|| anyhow::anyhow!("no row from {sql}"))
        };
        let mut bad = Vec::new();
        let mut doubles_only = 0;
        for (ef, fl, m) in pairs {
            let (x, y) = (summary(&mut a, ef, m)?, summary(&mut b, fl, m)?);
            if x[0] != y[0] {
                bad.push(format!("{}: efmesh {:?} rows, floor {:?} rows", m.name, x[0], y[0]));
            } else if full && x[1] != y[1] {
                if x[2] == y[2] {
                    doubles_only += 1;
                } else {
                    bad.push(format!("{}: {:?} rows each, different rows outside double columns", m.name, x[0]));
                }
            }
        }
        anyhow::ensure!(bad.is_empty(), "efmesh and the floor disagree on {} relations:\n  {}", bad.len(), bad.join("\n  "));
        Ok((pairs.len(), doubles_only))
    }
}

/// The units of a floor script, each sent in one round trip: every statement (ending with `;`
/// at the end of a line) alone, in autocommit as DuckDB's `execute_batch` runs them, except a
/// `BEGIN TRANSACTION;` … `COMMIT;` block, sent whole (one transaction).
pub fn units(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for stmt in sql.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        match &mut block {
            Some(b) => {
                b.push_str(stmt);
                b.push_str(";\n");
                if stmt == "COMMIT" {
                    out.extend(block.take());
                }
            }
            None if stmt == "BEGIN TRANSACTION" => block = Some(format!("{stmt};\n")),
            None => out.push(stmt.to_string()),
        }
    }
    out.extend(block);
    out
}

/// `bench --floor-exec-pg SCRIPT`: runs the floor's script ([`units`]) on the database in
/// [`PG_ENGINE_URL_ENV`], one connection, no efmesh.
///
/// # Errors
/// The variable is unset, the script cannot be read, or a statement fails.
pub fn exec_main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip_while(|a| a != "--floor-exec-pg").skip(1).collect();
    let [script] = &args[..] else { anyhow::bail!("usage: {PG_ENGINE_URL_ENV}=URL bench --floor-exec-pg SCRIPT") };
    let url = std::env::var(PG_ENGINE_URL_ENV).map_err(|_| anyhow::anyhow!("{PG_ENGINE_URL_ENV} is not set"))?;
    let mut config = efmesh::pg::parse(&url).map_err(|e| anyhow::anyhow!("{e}"))?;
    config.application_name("efmesh-bench-floor");
    let secret = efmesh::pg::secret(&config);
    let mut client = efmesh::pg::connect(config).map_err(|e| anyhow::anyhow!("{}", efmesh::pg::scrubbed(&e, secret.as_deref())))?;
    for unit in units(&fs_err::read_to_string(script)?) {
        client.batch_execute(&unit).map_err(|e| anyhow::anyhow!("{}\nin: {unit}", efmesh::pg::scrubbed(&e, secret.as_deref())))?;
    }
    Ok(())
}

/// The server's process on this machine (the postmaster), when the bench can see it: the role
/// may read `data_directory` (a superuser, or `pg_read_all_settings`) and its `postmaster.pid`
/// is readable here. Its CPU time is then reported beside each run's ([`server_cpu`]).
pub fn postmaster(server: &Server) -> Option<i32> {
    let mut c = server.connect(None).ok()?;
    let dir: String = c.query_one("SHOW data_directory", &[]).ok()?.get(0);
    let pid = fs_err::read_to_string(Path::new(&dir).join("postmaster.pid")).ok()?.lines().next()?.trim().parse().ok()?;
    fs_err::metadata(format!("/proc/{pid}/stat")).ok().map(|_| pid)
}

/// CPU time (user + system) the server has spent so far: the postmaster's, its children's that
/// have ended (`cutime`, `cstime`: the backends of closed connections, parallel workers,
/// autovacuum workers) and its live children's (with theirs). The difference over a run is the
/// server's work for it, give or take a process ending between the reads and 10 ms ticks; it
/// also holds whatever else the server did meanwhile (autovacuum, other clients).
pub fn server_cpu(postmaster: i32) -> std::time::Duration {
    // SAFETY: sysconf reads a constant.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    // (parent pid, utime + stime + cutime + cstime) of a process, from /proc/<pid>/stat.
    let stat = |pid: &str| -> Option<(i32, u64)> {
        let text = fs_err::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
        // After the command: state (0), ppid (1), …, utime (11), stime (12), cutime (13), cstime (14).
        let ppid = fields.get(1)?.parse().ok()?;
        let t: u64 = fields.get(11..15)?.iter().filter_map(|f| f.parse::<u64>().ok()).sum();
        Some((ppid, t))
    };
    let mut ticks = stat(&postmaster.to_string()).map_or(0, |(_, t)| t);
    if let Ok(dir) = fs_err::read_dir("/proc") {
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
            if let Some((_, t)) = stat(pid).filter(|(ppid, _)| *ppid == postmaster) {
                ticks += t;
            }
        }
    }
    std::time::Duration::from_millis(ticks * 1000 / tick)
}
