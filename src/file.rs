//! Files efmesh writes whole: a temporary file beside the target, renamed over it, so a reader
//! sees the old content or the new, never a part — and no temporary file left behind when the
//! write fails (a full disk would otherwise keep the part written, holding its space). And files
//! it reads whole: regular files only ([`read_regular`]).

use std::path::Path;

/// Writes `bytes` to `tmp`, then renames it over `path`; on any failure `tmp` is removed.
///
/// # Errors
/// The write or the rename failed.
pub fn replace(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let written = fs_err::write(tmp, bytes).and_then(|()| fs_err::rename(tmp, path));
    if written.is_err() {
        let _ = fs_err::remove_file(tmp);
    }
    written
}

/// The bytes of the file at `path`, refused unless it is a regular file (symbolic links
/// followed): a FIFO would block the read forever, a device (`/dev/zero`) never end it.
///
/// # Errors
/// The file cannot be read (`NotFound` as the read gives it), or is not a regular file.
pub fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    if !fs_err::metadata(path)?.is_file() {
        return Err(std::io::Error::other(format!("`{}` is not a regular file (a directory, a FIFO or a device)", path.display())));
    }
    fs_err::read(path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join(".x.tmp");
        // A directory in the way: the rename fails.
        let target = dir.path().join("occupied");
        fs_err::create_dir_all(target.join("inner")).unwrap();
        assert!(super::replace(&target, &tmp, b"abc").is_err());
        assert!(!tmp.exists());
        super::replace(&dir.path().join("ok"), &tmp, b"abc").unwrap();
        assert_eq!(fs_err::read(dir.path().join("ok")).unwrap(), b"abc");
        assert!(!tmp.exists());
    }
}
