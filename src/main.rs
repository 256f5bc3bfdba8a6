//! The `efmesh` binary: parse arguments, run the command, map the outcome to an exit code
//! (0 success · 1 error · 2 awaiting a human). Nothing else lives here.

use clap::Parser;
use efmesh::cli::{self, Exit, args::Args};
use std::process::ExitCode;

/// mimalloc instead of the system allocator: the loader threads allocate and free millions of
/// small objects (Lua values, models, SQL syntax trees); see docs/benchmark.md, "Cold load".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // Help and version are successes; usage errors are errors (1), never 2.
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            if code == 1 && std::env::args().skip(1).any(|a| a == "--json") {
                let (message, hint) = cli::clap_message(&e.to_string());
                cli::print_error_json("usage", &message, hint.as_deref());
            }
            return ExitCode::from(code);
        }
    };
    cli::init_logging(&args);
    // A model file stuck where the sandbox cannot interrupt it ends the process (exit 1).
    efmesh::script::watchdog::exit_when_stuck(true);
    let json = args.command.json();
    match cli::run(args) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => {
            cli::logging::clear_progress();
            let msg = cli::error_text(&e);
            let hint = cli::hint_for(&e);
            // Not `eprintln!`, which panics (exit 101) when stderr cannot be written (a full disk).
            efmesh::ewriteln!("error: {msg}{}", hint.as_ref().map(|h| format!("\n  hint: {h}")).unwrap_or_default());
            if json {
                // `--json` promises one object on stdout, failures included.
                cli::print_error_json(cli::error_kind(&e), &msg, hint.as_deref());
            }
            ExitCode::from(Exit::Error.code())
        }
    }
}
