//! Build script: when linking a prebuilt `libduckdb.so` (feature `bundled` off and
//! `DUCKDB_LIB_DIR` set), embed its directory as an rpath so binaries and tests run without
//! `LD_LIBRARY_PATH`.
fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_BUNDLED").is_none()
        && let Ok(dir) = std::env::var("DUCKDB_LIB_DIR")
    {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
