//! The `efmesh` binary: parse arguments, run the command, map the outcome to an exit code
//! (0 success · 1 error · 2 awaiting a human). Nothing else lives here.

use clap::Parser;
use efmesh::cli::{self, Exit, args::Args};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // Help and version are successes; usage errors are errors (1), never 2.
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    cli::init_logging(&args.log_level);
    // A model file stuck where the sandbox cannot interrupt it ends the process (exit 1).
    efmesh::script::watchdog::exit_when_stuck(true);
    match cli::run(args) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => {
            let mut msg = format!("error: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!("\n  caused by: {cause}"));
            }
            if let Some(hint) = cli::hint_for(&e) {
                msg.push_str(&format!("\n  hint: {hint}"));
            }
            eprintln!("{msg}");
            ExitCode::from(Exit::Error.code())
        }
    }
}
