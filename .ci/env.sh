# Shared build environment for efmesh's scripts (sourced, not run).
# CARGO_TARGET_DIR lives outside the clone so CI and sessions share a warm build.
export EFMESH_CACHE="${EFMESH_CACHE:-/work/.efmesh-cache}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$EFMESH_CACHE/target}"
