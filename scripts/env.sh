# Build environment shared by every efmesh script (sourced, never run).
#
# - CARGO_TARGET_DIR sits outside the clone so CI and later sessions find the build warm.
# - DuckDB: by default the `bundled` feature compiles DuckDB v1.5.5 from source (about 40 min on
#   2 cores, once). When npm is available we instead fetch the official libduckdb.so v1.5.5 from
#   the npm package @duckdb/node-bindings-linux-x64 and link it (`--no-default-features`), which
#   builds in minutes. Set EFMESH_DUCKDB=bundled to force the source build.
export EFMESH_CACHE="${EFMESH_CACHE:-/work/.efmesh-cache}"
[ -d "$(dirname "$EFMESH_CACHE")" ] && [ -w "$(dirname "$EFMESH_CACHE")" ] || EFMESH_CACHE="$HOME/.cache/efmesh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$EFMESH_CACHE/target}"
EFMESH_DUCKDB_NPM="@duckdb/node-bindings-linux-x64@1.5.5-r.5"
EFMESH_CARGO_FEATURES=()

efmesh_setup_duckdb() {
  if [ "${EFMESH_DUCKDB:-auto}" = bundled ]; then return 0; fi
  local dir="$EFMESH_CACHE/duckdb-1.5.5"
  if [ ! -f "$dir/package/libduckdb.so" ] && command -v npm >/dev/null 2>&1 && [ "$(uname -m)" = x86_64 ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm pack --silent "$EFMESH_DUCKDB_NPM" >/dev/null 2>&1 && tar xzf ./*.tgz) || true
  fi
  if [ -f "$dir/package/libduckdb.so" ]; then
    export DUCKDB_LIB_DIR="$dir/package"
    EFMESH_CARGO_FEATURES=(--no-default-features)
  fi
}
efmesh_setup_duckdb
