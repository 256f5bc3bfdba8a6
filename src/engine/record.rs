//! The engine-catalog record: the engine's catalog as efmesh last read it, kept beside the
//! state store with the identity of the DuckDB file at that read, so a plan of an engine file
//! nobody touched since does not open DuckDB again (SPEC §4, invariant 27).
//!
//! Opening a DuckDB file, even read-only, loads its whole catalog and every table's statistics:
//! at 2000 models that is most of a no-op `plan`. The plan still checks itself against the
//! catalog (invariant 19); only the catalog query is skipped, and only when the file's identity
//! is exactly the one recorded right after efmesh read the catalog:
//!
//! - for the database file and for its write-ahead log (`<file>.wal`, or its absence): device,
//!   inode, size, modification and status-change times in nanoseconds;
//! - a blake3 digest of the database file's first 12 KiB (DuckDB's main header and its two
//!   database headers, whose checkpoint counter every checkpoint bumps).
//!
//! Any other process writing the file changes it: a commit grows the log, a checkpoint rewrites
//! a header and the times, a replacement (rename, copy over) changes the inode or the
//! status-change time, which no process can set back. Anything else — no record, another
//! engine path, another efmesh version, an unreadable, truncated or corrupt record (the body
//! carries its own digest) — is a full catalog query. The record is written only when the
//! identity taken before the query equals the one taken after the connection closed, so a
//! write racing the read is never recorded. It is a cache, not data: a failed write is logged
//! at debug level and changes nothing.

use super::{Catalog, CatalogEntry};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// First line of a record; bump the number whenever the format or the identity changes.
const MAGIC: &str = "efmesh-engine-catalog 1";

/// Bytes of the database file digested into its identity: DuckDB's main header (4 KiB) and its
/// two alternating database headers (4 KiB each).
const HEADER_BYTES: usize = 12 * 1024;

/// The record of the engine catalog for a project whose state store is at `state_path`:
/// `<state dir>/.efmesh/engine-catalog`.
pub fn path_for(state_path: &Path) -> PathBuf {
    state_path.parent().unwrap_or_else(|| Path::new(".")).join(".efmesh").join("engine-catalog")
}

/// The identity of the DuckDB file at `engine` and of its write-ahead log, as one line of text;
/// `None` when the file cannot be read (then nothing is recorded or trusted).
#[cfg(unix)]
pub fn identity(engine: &Path) -> Option<String> {
    use std::io::Read;
    let db = fs_err::metadata(engine).ok()?;
    let mut header = Vec::with_capacity(HEADER_BYTES);
    fs_err::File::open(engine).ok()?.take(HEADER_BYTES as u64).read_to_end(&mut header).ok()?;
    let wal = wal_stat(engine)?;
    Some(format!("db {} header {} wal {wal}", file_stat(&db), blake3::hash(&header).to_hex()))
}

/// A file's device, inode, size, modification and status-change times (nanoseconds), as text:
/// what the identities of the engine file and of the state store are made of.
#[cfg(unix)]
pub fn file_stat(m: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}:{}:{}:{}.{:09}:{}.{:09}", m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
}

/// [`file_stat`] of the file at `path`, `absent` when there is none; `None` when it cannot be
/// read (on other systems than Unix, always `None`).
#[cfg(unix)]
pub fn path_stat(path: &Path) -> Option<String> {
    match fs_err::metadata(path) {
        Ok(m) => Some(file_stat(&m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("absent".to_string()),
        Err(_) => None,
    }
}

/// Without the Unix file identity no file is told apart.
#[cfg(not(unix))]
pub fn path_stat(_path: &Path) -> Option<String> {
    None
}

/// [`path_stat`] of the engine's write-ahead log.
#[cfg(unix)]
fn wal_stat(engine: &Path) -> Option<String> {
    path_stat(&wal_path(engine))
}

/// Without the Unix file identity nothing is ever recorded: every plan queries the catalog.
#[cfg(not(unix))]
pub fn identity(_engine: &Path) -> Option<String> {
    None
}

/// The part of [`identity`] read by `stat` alone (the file's and the WAL's device, inode, size,
/// modification and status-change times), without opening the file: what may be taken while a
/// DuckDB connection of this process holds the file. (DuckDB locks the file with a POSIX
/// `fcntl` lock, which closing ANY descriptor of the file in the same process releases: reading
/// the header, as [`identity`] does, would hand the file to other processes.) Any write changes
/// it: the status-change time cannot be set back.
#[cfg(unix)]
pub fn stat_identity(engine: &Path) -> Option<String> {
    let db = fs_err::metadata(engine).ok()?;
    Some(format!("db {} wal {}", file_stat(&db), wal_stat(engine)?))
}

/// Without the Unix file identity nothing is ever recorded.
#[cfg(not(unix))]
pub fn stat_identity(_engine: &Path) -> Option<String> {
    None
}

fn wal_path(engine: &Path) -> PathBuf {
    let mut p = engine.as_os_str().to_owned();
    p.push(".wal");
    PathBuf::from(p)
}

/// The catalog recorded in `record` for the engine file `engine`, when the record is intact and
/// was taken at exactly the identity `current`.
pub fn read(record: &Path, engine: &Path, current: &str) -> Option<Catalog> {
    let text = fs_err::read(record).ok()?;
    decode(&text, engine, current)
}

/// Writes `catalog` as read at `identity` of `engine` into `record` (a new file renamed over
/// the old one, so readers see the old record or the new one, never a part).
///
/// # Errors
/// The directory or the file cannot be written.
pub fn write(record: &Path, engine: &Path, identity: &str, catalog: &Catalog) -> std::io::Result<()> {
    let dir = record.parent().unwrap_or_else(|| Path::new("."));
    fs_err::create_dir_all(dir)?;
    let tmp = dir.join(format!(".engine-catalog.{}.tmp", std::process::id()));
    crate::file::replace(record, &tmp, encode(engine, identity, catalog).as_ref())
}

/// Reads the catalog of `engine` through the record at `record`: the catalog this process last
/// read when the file still has the identity it was read at ([`recall`]), else the recorded
/// catalog when the file's identity is the recorded one, otherwise `query()` (which must close
/// its connection before returning), recorded when the identity did not change while it ran.
/// Also returns the identity of the engine file the catalog is exactly valid for (`None` when
/// the file changed while it was queried, or has no identity). The catalog is kept in memory
/// with that identity ([`recall`]).
///
/// # Errors
/// What `query` returns.
pub fn read_through<E>(record: &Path, engine: &Path, query: impl FnOnce() -> Result<Catalog, E>) -> Result<(Arc<Catalog>, Option<String>), E> {
    let before = identity(engine);
    if let Some(id) = &before {
        if let Some(catalog) = recall(engine, id) {
            return Ok((catalog, before));
        }
        if let Some(catalog) = read(record, engine, id) {
            tracing::debug!("engine catalog of `{}` taken from {}: the file is unchanged since efmesh last read it", engine.display(), record.display());
            return Ok((remember(engine, id, catalog), before));
        }
    }
    let catalog = query()?;
    match (before, identity(engine)) {
        (Some(b), Some(a)) if a == b => {
            match write(record, engine, &a, &catalog) {
                Ok(()) => tracing::debug!("engine catalog of `{}` queried and recorded in {}", engine.display(), record.display()),
                Err(e) => tracing::debug!("engine catalog of `{}` queried; not recorded: {e}", engine.display()),
            }
            Ok((remember(engine, &a, catalog), Some(a)))
        }
        _ => {
            tracing::debug!("engine catalog of `{}` queried; not recorded: the file changed while it was read", engine.display());
            Ok((Arc::new(catalog), None))
        }
    }
}

/// The last catalog this process read through [`read_through`]: the engine file and
/// the [`identity`] it is exactly valid for.
type Known = (PathBuf, String, Arc<Catalog>);

static KNOWN: std::sync::Mutex<Option<Known>> = std::sync::Mutex::new(None);

/// Keeps `catalog` as the catalog of `engine` at `identity`; returns it, shared.
fn remember(engine: &Path, identity: &str, catalog: Catalog) -> Arc<Catalog> {
    let catalog = Arc::new(catalog);
    *KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((engine.to_path_buf(), identity.to_string(), catalog.clone()));
    catalog
}

/// The catalog of `engine` this process last read (from the record or by a query that
/// recorded it), when it was exactly valid at `identity` — an [`identity`] taken by the
/// caller, so the catalog is the file's catalog at that moment: a watch session's next plan
/// reuses it, and `apply` takes it just before opening the file, so its own connection need not
/// query the catalog again (SPEC §4, invariant 27). `None` otherwise.
pub fn recall(engine: &Path, identity: &str) -> Option<Arc<Catalog>> {
    let known = KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    known.as_ref().filter(|(path, id, _)| path == engine && id == identity).map(|(_, _, catalog)| catalog.clone())
}

fn push_field(out: &mut Vec<u8>, field: Option<&str>) {
    match field {
        None => out.push(b'-'),
        Some(s) => {
            out.extend_from_slice(s.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// `MAGIC efmesh-version \n engine path \n identity \n blake3(body) \n body`, the body holding
/// per relation four fields (schema, name, comment, sql), each `-` (none) or `<len>:<bytes>`,
/// then `\n`.
fn encode(engine: &Path, identity: &str, catalog: &Catalog) -> Vec<u8> {
    let mut body = Vec::with_capacity(catalog.relations.len() * 256);
    for ((schema, name), entry) in &catalog.relations {
        for f in [Some(schema.as_str()), Some(name.as_str()), entry.comment.as_deref(), entry.sql.as_deref()] {
            push_field(&mut body, f);
        }
        body.push(b'\n');
    }
    let mut out = format!("{MAGIC} {}\n{}\n{identity}\n{}\n", env!("CARGO_PKG_VERSION"), engine.display(), blake3::hash(&body).to_hex()).into_bytes();
    out.extend_from_slice(&body);
    out
}

fn decode(text: &[u8], engine: &Path, current: &str) -> Option<Catalog> {
    let mut head = text.splitn(5, |b| *b == b'\n');
    let (magic, path, identity, digest, body) = (head.next()?, head.next()?, head.next()?, head.next()?, head.next()?);
    if magic != format!("{MAGIC} {}", env!("CARGO_PKG_VERSION")).as_bytes() || path != engine.display().to_string().as_bytes() || identity != current.as_bytes()
    {
        return None;
    }
    if digest != blake3::hash(body).to_hex().as_bytes() {
        tracing::warn!("the engine catalog record is corrupt and is ignored (the catalog is queried)");
        return None;
    }
    let mut cursor = Cursor { body, at: 0 };
    let mut relations = Vec::new();
    while cursor.at < body.len() {
        let (schema, name, comment, sql) = (cursor.field()??, cursor.field()??, cursor.field()?, cursor.field()?);
        if body.get(cursor.at) != Some(&b'\n') {
            return None;
        }
        cursor.at += 1;
        relations.push(((schema, name), CatalogEntry { comment, sql }));
    }
    // Written in key order: collected in bulk, not inserted one by one.
    Some(Catalog { relations: relations.into_iter().collect() })
}

struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// One field: `Some(None)` for `-`, `Some(Some(text))` for `<len>:<text>`, `None` when malformed.
    fn field(&mut self) -> Option<Option<String>> {
        let rest = self.body.get(self.at..)?;
        if rest.first() == Some(&b'-') {
            self.at += 1;
            return Some(None);
        }
        let colon = rest.iter().position(|b| *b == b':')?;
        let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        let s = std::str::from_utf8(rest.get(colon + 1..colon + 1 + len)?).ok()?.to_string();
        self.at += colon + 1 + len;
        Some(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Catalog {
        super::super::catalog_of(vec![
            vec![Some("_efmesh".into()), Some("s__a__ab".into()), None, None],
            vec![
                Some("dev__s".into()),
                Some("a".into()),
                Some("efmesh: created under project root /x\ny".into()),
                Some("CREATE VIEW \"dev__s\".a AS\nSELECT 1:2-".into()),
            ],
        ])
    }

    #[test]
    fn a_record_reads_back_only_at_its_identity_path_and_version() {
        let engine = Path::new("/p/efmesh.duckdb");
        let bytes = encode(engine, "db 1:2 header x wal absent", &sample());
        assert_eq!(decode(&bytes, engine, "db 1:2 header x wal absent"), Some(sample()));
        assert_eq!(decode(&bytes, engine, "db 1:3 header x wal absent"), None, "another identity");
        assert_eq!(decode(&bytes, Path::new("/q/efmesh.duckdb"), "db 1:2 header x wal absent"), None, "another engine file");
        let empty = encode(engine, "i", &Catalog::default());
        assert_eq!(decode(&empty, engine, "i"), Some(Catalog::default()));
    }

    #[test]
    fn a_damaged_record_is_never_trusted() {
        let engine = Path::new("/p/efmesh.duckdb");
        let bytes = encode(engine, "i", &sample());
        for cut in [bytes.len() - 1, bytes.len() - 10, bytes.len() / 2] {
            assert_eq!(decode(&bytes[..cut], engine, "i"), None, "truncated at {cut}");
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 1;
        assert_eq!(decode(&flipped, engine, "i"), None);
        let other_version = String::from_utf8(bytes).unwrap().replacen(env!("CARGO_PKG_VERSION"), "0.0.0-other", 1);
        assert_eq!(decode(other_version.as_bytes(), engine, "i"), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_identity_changes_with_content_even_when_size_and_mtime_are_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.duckdb");
        fs_err::write(&f, vec![0u8; 20_000]).unwrap();
        let mtime = fs_err::metadata(&f).unwrap().modified().unwrap();
        let a = identity(&f).unwrap();
        assert_eq!(identity(&f).unwrap(), a, "reading changes nothing");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut bytes = vec![0u8; 20_000];
        bytes[5000] = 1;
        fs_err::write(&f, &bytes).unwrap();
        fs_err::File::options().write(true).open(&f).unwrap().set_modified(mtime).unwrap();
        assert_ne!(identity(&f).unwrap(), a, "same size and mtime, another header and ctime");
        let b = identity(&f).unwrap();
        fs_err::write(dir.path().join("x.duckdb.wal"), b"w").unwrap();
        assert_ne!(identity(&f).unwrap(), b, "a write-ahead log appeared");
    }
}
