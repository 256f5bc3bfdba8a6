//! Test hook for crash tests: `EFMESH_FAULT=<point>` makes the process abort (as `kill -9`
//! would stop it: no destructor, no flush, no rollback) when it reaches that point of an apply.
//!
//! Points: `after-build:<schema.table>` (a model was built and recorded), `before-intent`,
//! `after-intent` (the promotion is recorded as under way, no view moved yet),
//! `after-view-swap` (the views moved, the state store does not know yet). Unset (the normal
//! case), a point costs one environment lookup. Only the integration tests set it.

/// The environment variable naming the point at which the process aborts.
pub const FAULT_ENV: &str = "EFMESH_FAULT";

/// Aborts the process when [`FAULT_ENV`] equals the point `name()` names; does nothing
/// otherwise.
pub fn crash_point(name: impl FnOnce() -> String) {
    let Some(wanted) = std::env::var_os(FAULT_ENV) else { return };
    let point = name();
    if wanted.to_str() == Some(point.as_str()) {
        eprintln!("{FAULT_ENV}: aborting at `{point}` (test hook)");
        std::process::abort();
    }
}
