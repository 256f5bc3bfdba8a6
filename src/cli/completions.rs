//! `efmesh completions <shell>`: the shell completion script (clap_complete) on stdout.

use super::Exit;
use super::args::Args;
use super::printer::Printer;
use anyhow::Result;
use clap::CommandFactory;

/// Prints the completion script of `shell` for every command and flag.
///
/// # Errors
/// When stdout cannot be written.
pub fn run(shell: clap_complete::Shell, out: &Printer) -> Result<Exit> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "efmesh", &mut script);
    out.text(&String::from_utf8_lossy(&script))?;
    Ok(Exit::Success)
}
