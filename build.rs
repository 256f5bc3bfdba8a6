//! Build script:
//! - when linking a prebuilt `libduckdb.so` (feature `bundled` off and `DUCKDB_LIB_DIR` set),
//!   embed its directory as an rpath so binaries and tests run without `LD_LIBRARY_PATH`;
//! - `EFMESH_BUILD_ID`: a digest of the crate's sources (`src/`, `stdlib/`, `Cargo.toml`,
//!   `Cargo.lock`), the build identity in the header of the load and project caches
//!   (`docs/load-cache.md`): a binary rebuilt from changed code never trusts the caches of
//!   another build, even under the same version number.
use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_BUNDLED").is_none()
        && let Ok(dir) = std::env::var("DUCKDB_LIB_DIR")
    {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    let inputs = ["src", "stdlib", "Cargo.toml", "Cargo.lock"];
    let mut files = Vec::new();
    for i in inputs {
        println!("cargo:rerun-if-changed={i}");
        collect(Path::new(i), &mut files);
    }
    files.sort();
    // Two independent 64-bit SipHash digests over every file's path and content: 128 bits. Only
    // equality matters (same sources, same id), never the value's stability across toolchains.
    let mut a = std::hash::DefaultHasher::new();
    let mut b = std::hash::DefaultHasher::new();
    b.write(b"efmesh-build-id");
    for f in &files {
        // A file that vanished between the walk and the read is part of no build.
        let Ok(bytes) = std::fs::read(f) else { continue };
        for h in [&mut a, &mut b] {
            let name = f.to_string_lossy();
            h.write_usize(name.len());
            h.write(name.as_bytes());
            h.write_usize(bytes.len());
            h.write(&bytes);
        }
    }
    println!("cargo:rustc-env=EFMESH_BUILD_ID={:016x}{:016x}", a.finish(), b.finish());
}

/// Every file under `p` (or `p` itself when it is a file).
fn collect(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_file() {
        out.push(p.to_path_buf());
    } else if let Ok(entries) = std::fs::read_dir(p) {
        for e in entries.flatten() {
            collect(&e.path(), out);
        }
    }
}
