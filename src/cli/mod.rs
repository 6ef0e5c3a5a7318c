//! Command-line interface: one file per subcommand, and `common` for what
//! they share (no subcommand imports another's internals, except the NVFP4
//! views `hist` and `export` hand stacked weights to). Exit codes: 0 valid,
//! 1 invalid, 2 could not run (any error a subcommand returns).

mod audit;
mod checks;
mod common;
mod diff;
mod export;
mod hist;
mod list;
mod nvfp4;
mod sample;
mod spotcheck;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Exit code of a valid bundle / a successful command.
pub const EXIT_OK: i32 = 0;
/// Exit code of an invalid bundle.
pub const EXIT_INVALID: i32 = 1;
/// Exit code when the command could not run.
pub const EXIT_ERROR: i32 = 2;

#[derive(Parser)]
#[command(
    name = "bundlescope",
    version,
    about = "Inspect and audit quantized ML weight bundles"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Bundle folder (or its manifest.json) to open.
    dir: Option<PathBuf>,
    /// Open the built-in demo bundle.
    #[arg(long)]
    demo: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Validate and hash a bundle; exit 0 valid, 1 invalid, 2 could not run.
    Audit(audit::Args),
    /// Print the tensor index from the manifest, without hashing.
    List(list::Args),
    /// Write a valid sample bundle.
    Sample(sample::Args),
    /// List every check with its id and rule.
    Checks(checks::Args),
    /// Code, scale and value histograms of one tensor, or of all, worst first.
    Hist(hist::Args),
    /// Write one tensor, dequantised, as a float32 .npy file.
    Export(export::Args),
    /// MLX's quantized_matmul against the decoder's f64 product (and, with
    /// --reference, each tensor against its unquantised source); exit 0 all
    /// pass, 1 any failure, 2 could not run.
    Spotcheck(spotcheck::Args),
    /// Compare two bundles tensor by tensor (range hashes; changed tensors
    /// decoded); exit 0, or 1 with --fail-on and such a difference, 2 could not run.
    Diff(diff::Args),
}

/// Parses the command line and runs it; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_ERROR } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    let result = match cli.command {
        Some(Command::Audit(a)) => audit::run(a),
        Some(Command::List(a)) => list::run(a),
        Some(Command::Sample(a)) => sample::run(a),
        Some(Command::Checks(a)) => checks::run(a),
        Some(Command::Hist(a)) => hist::run(a),
        Some(Command::Export(a)) => export::run(a),
        Some(Command::Spotcheck(a)) => spotcheck::run(a),
        Some(Command::Diff(a)) => diff::run(a),
        None => open_demo_or_dir(cli.dir, cli.demo),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bundlescope: {e:#}");
            EXIT_ERROR
        }
    }
}

/// Opens the desktop app on a bundle, the demo or the welcome screen.
#[cfg(feature = "gui")]
fn open_demo_or_dir(dir: Option<PathBuf>, demo: bool) -> anyhow::Result<i32> {
    use bundlescope::app::{Start, run};
    run(match (dir, demo) {
        (Some(d), _) => Start::Open(d),
        (None, true) => Start::Demo,
        (None, false) => Start::Welcome,
    })?;
    Ok(EXIT_OK)
}

/// Without the desktop app, opening a bundle audits it in the terminal.
#[cfg(not(feature = "gui"))]
fn open_demo_or_dir(dir: Option<PathBuf>, demo: bool) -> anyhow::Result<i32> {
    let dir = match (dir, demo) {
        (Some(d), _) => d,
        (None, true) => bundlescope::sample::demo_bundle()?,
        (None, false) => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            return Ok(EXIT_OK);
        }
    };
    audit::run(audit::Args {
        dir,
        json: false,
        range_hashes: false,
    })
}
