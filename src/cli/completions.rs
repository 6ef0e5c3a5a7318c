//! `bundlescope completions bash|zsh|fish`: the shell completion script, on
//! stdout, generated from the same clap definition the parser uses (so it
//! cannot drift from the real subcommands and flags).

use anyhow::Result;
use clap::CommandFactory;
use clap_complete::Shell;

/// Arguments of `completions`.
#[derive(clap::Args)]
pub struct Args {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(a: Args) -> Result<i32> {
    let mut cmd = super::Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(a.shell, &mut cmd, "bundlescope", &mut out);
    Ok(super::EXIT_OK)
}
