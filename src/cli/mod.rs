//! Command-line interface: one file per subcommand, and `common` for what
//! they share (no subcommand imports another's internals, except the NVFP4
//! views `hist` and `export` hand stacked weights to). Exit codes: 0 valid,
//! 1 invalid, 2 could not run (any error a subcommand returns).

mod audit;
mod checks;
mod common;
mod completions;
mod diff;
mod export;
mod hist;
mod list;
mod mlxlm;
mod nvfp4;
mod sample;
mod spotcheck;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

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
    /// Open the demo's calibrated GPTQ-Q4 overlay (its parent, the demo
    /// bundle, written beside it).
    #[arg(long)]
    demo_overlay: bool,
    /// With DIR: compare it with bundle B at once (the app's Compare
    /// with…; without the app, `diff DIR B`).
    #[arg(long, value_name = "B", requires = "dir")]
    compare: Option<PathBuf>,
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
    /// Print the shell completion script (bash, zsh, fish, elvish or powershell).
    Completions(completions::Args),
    /// Compare two bundles tensor by tensor (range hashes; changed tensors
    /// decoded); exit 0, or 1 with --fail-on and such a difference, 2 could not run.
    Diff(diff::Args),
}

/// Parses the command line and runs it; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // `bundlescope audti DIR`: clap reads `audti` as the folder and
            // trips on DIR; the first word is the mistake, so name that.
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(word) = first_positional(std::env::args_os().skip(1))
                && let Some(message) = missing_dir(Path::new(&word))
            {
                eprintln!("bundlescope: {message}");
                return EXIT_ERROR;
            }
            let code = if e.use_stderr() { EXIT_ERROR } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    // A folder that does not exist is refused here, before a window opens
    // on it (or the terminal audit starts), with the path or the typo named.
    if cli.command.is_none()
        && let Some(message) = cli
            .dir
            .iter()
            .chain(&cli.compare)
            .find_map(|d| missing_dir(d))
    {
        eprintln!("bundlescope: {message}");
        return EXIT_ERROR;
    }
    let result = match cli.command {
        Some(Command::Audit(a)) => audit::run(a),
        Some(Command::List(a)) => list::run(a),
        Some(Command::Sample(a)) => sample::run(a),
        Some(Command::Checks(a)) => checks::run(a),
        Some(Command::Hist(a)) => hist::run(a),
        Some(Command::Export(a)) => export::run(a),
        Some(Command::Spotcheck(a)) => spotcheck::run(a),
        Some(Command::Completions(a)) => completions::run(a),
        Some(Command::Diff(a)) => diff::run(a),
        None => match (cli.dir, cli.compare) {
            (Some(a), Some(b)) => open_compare(a, b),
            (dir, _) => open_demo_or_dir(dir, cli.demo, cli.demo_overlay),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Error messages quote names and text from the file: escaped
            // and cut here, once for every subcommand.
            let e = format!("{e:#}");
            eprintln!(
                "bundlescope: {}",
                bundlescope::util::text::shown(&e, 8 * bundlescope::util::text::SHOWN_CHARS)
            );
            EXIT_ERROR
        }
    }
}

/// The first argument that is not a flag (top-level flags take no values),
/// or the one after `--`.
fn first_positional(args: impl Iterator<Item = OsString>) -> Option<OsString> {
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        if a == "--" {
            return args.next();
        }
        if !a.to_string_lossy().starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// Why `dir`, given where a folder or a subcommand may stand, cannot be
/// opened; `None` when it exists. A bare word (no path separator) is as
/// likely a mistyped subcommand as a folder, so it gets clap's suggestion.
fn missing_dir(dir: &Path) -> Option<String> {
    let error = std::fs::metadata(dir).err()?;
    if error.kind() != std::io::ErrorKind::NotFound {
        return Some(format!("cannot read {}: {error}", dir.display()));
    }
    let text = dir.to_string_lossy();
    let bare = dir.components().count() == 1 && !text.starts_with('.') && !dir.is_absolute();
    if !bare {
        return Some(format!(
            "cannot open {}: no such file or folder",
            dir.display()
        ));
    }
    Some(match suggested_subcommand(&text) {
        Some(s) => format!("no such subcommand or folder: '{text}' (did you mean '{s}'?)"),
        None => format!(
            "no such subcommand or folder: '{text}' (`bundlescope --help` lists the subcommands)"
        ),
    })
}

/// The subcommand clap would suggest for `word` (its own similarity rule),
/// asked of the subcommands alone: with the top-level folder argument in
/// the way, clap never treats a word as a subcommand typo.
fn suggested_subcommand(word: &str) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let subcommands = Command::augment_subcommands(clap::Command::new("bundlescope"));
    let error = subcommands
        .try_get_matches_from(["bundlescope", word])
        .err()?;
    match error.get(ContextKind::SuggestedSubcommand)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) => v.first().cloned(),
        _ => None,
    }
}

/// Opens the desktop app on a bundle, the demo or the welcome screen.
#[cfg(feature = "gui")]
fn open_demo_or_dir(dir: Option<PathBuf>, demo: bool, overlay: bool) -> anyhow::Result<i32> {
    use bundlescope::app::{Start, run};
    run(match (dir, demo, overlay) {
        (Some(d), _, _) => Start::Open(d),
        (None, _, true) => Start::DemoOverlay,
        (None, true, false) => Start::Demo,
        (None, false, false) => Start::Welcome,
    })?;
    Ok(EXIT_OK)
}

/// Opens the desktop app on bundle `a` compared with bundle `b`.
#[cfg(feature = "gui")]
fn open_compare(a: PathBuf, b: PathBuf) -> anyhow::Result<i32> {
    bundlescope::app::run(bundlescope::app::Start::Compare(a, b))?;
    Ok(EXIT_OK)
}

/// Without the desktop app, `DIR --compare B` is `diff DIR B`.
#[cfg(not(feature = "gui"))]
fn open_compare(a: PathBuf, b: PathBuf) -> anyhow::Result<i32> {
    diff::run(diff::Args {
        a,
        b,
        json: false,
        markdown: false,
        fail_on: None,
    })
}

/// Without the desktop app, opening a bundle audits it in the terminal.
#[cfg(not(feature = "gui"))]
fn open_demo_or_dir(dir: Option<PathBuf>, demo: bool, overlay: bool) -> anyhow::Result<i32> {
    let dir = match (dir, demo || overlay) {
        (Some(d), _) => d,
        (None, true) if overlay => bundlescope::sample::gptq::demo_overlay()?,
        (None, true) => bundlescope::sample::demo_bundle()?,
        (None, false) => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            return Ok(EXIT_OK);
        }
    };
    audit::run(audit::Args {
        dir,
        ..audit::Args::default()
    })
}
