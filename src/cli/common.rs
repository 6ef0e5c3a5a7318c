//! What every subcommand shares: opening the bundle, finding a tensor by
//! name, the progress bar, and the guard that keeps writes out of the
//! bundle folder. Subcommands import this, never each other's internals.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Result, anyhow, bail};
use bundlescope::finding::checks;
use bundlescope::format::{self, Bundle, Layout, TensorInfo};
use bundlescope::util::paths::{bundle_folder, is_inside};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Opens the bundle at `dir`. Its error goes up through `?`: `cli::main`
/// prints it with its causes and exits 2 (could not run). A bundle whose
/// manifest.json does not parse opens (the audit reports it as invalid),
/// but it has no index to list or read, so here it is an error that says
/// why instead of an empty listing.
pub fn open_bundle(dir: &Path) -> Result<Bundle> {
    let bundle = format::open(dir)?;
    if let Some(f) = bundle
        .findings
        .iter()
        .find(|f| f.check == checks::MANIFEST_PARSE)
    {
        bail!(
            "{}: {}; `bundlescope audit` reports it",
            bundle.manifest_path.display(),
            f.message
        );
    }
    Ok(bundle)
}

/// Index of the tensor `name` means, following aliases to their target.
/// An unknown name is an error that lists the closest names.
pub fn resolve(bundle: &Bundle, name: &str) -> Result<usize> {
    let Some(index) = bundle.find(name) else {
        bail!("{}", unknown_name(bundle, name));
    };
    Ok(bundle.resolve_alias(index)?)
}

/// The validated layout, or an error naming the tensor and why it has
/// none: a dtype bundlescope lists without decoding (a checkpoint's
/// F8_E8M0, F4 or F6 tensor), the packed codes of an MLX quantized module
/// with no quantization block, or broken metadata.
pub fn layout_of(bundle: &Bundle, t: &TensorInfo) -> Result<Layout> {
    if bundle.unannounced_codes(t) {
        bail!(
            "tensor {} holds the packed U32 codes of an MLX quantized module (its scales beside \
             it), but the checkpoint has no quantization block to say their bits, group size \
             and mode, so bundlescope lists them as stored and does not decode them",
            t.name
        );
    }
    if let Some(dtype) = bundle.undecoded_dtype(t) {
        bail!(
            "tensor {} is {dtype}: bundlescope lists {dtype} tensors and checks their size, \
             but does not decode their values",
            t.name
        );
    }
    t.layout.ok_or_else(|| {
        anyhow!(
            "tensor {} has broken metadata (precision {:?}), so its bytes cannot be read; \
             `bundlescope audit` lists what is wrong",
            t.name,
            t.precision.as_str()
        )
    })
}

/// Refuses `out` when it lies inside the folder of the bundle opened as
/// `bundle_path` (a folder, its manifest.json, or either through a
/// symlink): bundlescope never writes to a bundle. Also refuses an `out`
/// that is a folder or names none.
pub fn refuse_inside_bundle(bundle_path: &Path, out: &Path) -> Result<()> {
    let Some(folder) = bundle_folder(bundle_path) else {
        bail!(
            "cannot resolve the bundle folder of {}",
            bundle_path.display()
        );
    };
    if out.file_name().is_none() {
        bail!("{} does not name a file", out.display());
    }
    if out.is_dir() {
        bail!("{} is a folder; --out takes a file name", out.display());
    }
    if is_inside(out, &folder) {
        bail!(
            "refusing to write {} inside the bundle folder {}: bundlescope never writes to a bundle",
            out.display(),
            folder.display()
        );
    }
    Ok(())
}

/// A progress bar on stderr when stderr is a terminal, hidden otherwise (so
/// piped output stays clean), drawn with `template`.
pub fn progress_bar(template: &str) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("█▌ "),
    );
    bar
}

/// "no tensor named X; close names: ..." for a name that is not in the index.
fn unknown_name(bundle: &Bundle, name: &str) -> String {
    let mut scored: Vec<(usize, &str)> = bundle
        .tensors
        .iter()
        .map(|t| {
            let d = edit_distance(name, &t.name);
            // A name containing the query (or contained in it) is close whatever its length.
            let d = if t.name.contains(name) || name.contains(t.name.as_str()) {
                d.min(1)
            } else {
                d
            };
            (d, t.name.as_str())
        })
        .collect();
    scored.sort();
    let limit = (name.chars().count() / 3).max(3);
    let close: Vec<&str> = scored
        .iter()
        .filter(|(d, _)| *d <= limit)
        .take(5)
        .map(|(_, n)| *n)
        .collect();
    if close.is_empty() {
        format!("no tensor named {name:?}; `bundlescope list` shows every name")
    } else {
        format!(
            "no tensor named {name:?}; close names: {}",
            close.join(", ")
        )
    }
}

/// Levenshtein distance over chars, two rows of memory.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
