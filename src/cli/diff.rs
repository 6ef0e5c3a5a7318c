//! `bundlescope diff A B [--json | --markdown] [--fail-on changed|any]`.

use std::path::PathBuf;

use anyhow::Result;
use bundlescope::diff::{self, DiffReport, Status, TensorDiff};
use bundlescope::util::text::{SHOWN_CHARS, shown};

/// Which differences make `diff` exit 1.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// A tensor on both sides with different bytes.
    Changed,
    /// A changed tensor, or one present on a single side.
    Any,
}

/// Arguments of `diff`.
#[derive(clap::Args)]
pub struct Args {
    /// Bundle A (folder or its manifest.json).
    pub a: PathBuf,
    /// Bundle B.
    pub b: PathBuf,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the comparison as Markdown (for a review).
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Exit 1 on these differences (default: never; a difference is not
    /// an error).
    #[arg(long, value_enum)]
    pub fail_on: Option<FailOn>,
}

pub fn run(a: Args) -> Result<i32> {
    // Either side unreadable is an error (exit 2, with the chain of causes).
    let report = diff::diff(&a.a, &a.b)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if a.markdown {
        print!("{}", diff::markdown::diff_markdown(&report));
    } else {
        print_human(&report);
    }
    let s = &report.summary;
    let fail = match a.fail_on {
        Some(FailOn::Changed) => s.changed > 0,
        Some(FailOn::Any) => s.changed + s.only_a + s.only_b > 0,
        None => false,
    };
    Ok(if fail {
        super::EXIT_INVALID
    } else {
        super::EXIT_OK
    })
}

fn print_human(r: &DiffReport) {
    println!("A: {} ({})", shown(&r.a.path, 4 * SHOWN_CHARS), r.a.format);
    println!("B: {} ({})", shown(&r.b.path, 4 * SHOWN_CHARS), r.b.format);
    let s = &r.summary;
    println!(
        "{} identical, {} changed, {} only in A, {} only in B",
        s.identical, s.changed, s.only_a, s.only_b
    );
    let rows: Vec<&TensorDiff> = r
        .tensors
        .iter()
        .filter(|t| t.status != Status::Identical)
        .collect();
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<8} {:<52} {:>6} {:<28} {:>9} {:>28} {:>10} {:>16}",
        "status",
        "tensor",
        "expert",
        "differs",
        "codes Δ",
        "scale B/A min/med/max",
        "rel err",
        "worst row"
    );
    for t in rows {
        let status = match t.status {
            Status::Changed => "changed",
            Status::OnlyA => "only A",
            Status::OnlyB => "only B",
            Status::Identical => "same",
        };
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".into(), f);
        let codes = t
            .codes
            .as_ref()
            .map_or("-".into(), |c| format!("{:.4}%", c.changed_share * 100.0));
        let scales = t.scales.as_ref().map_or("-".into(), |s| {
            let g = |v: Option<f64>| opt(v, &|x| format!("{x:.4}"));
            format!(
                "{}/{}/{}",
                g(s.min_ratio),
                g(s.median_ratio),
                g(s.max_ratio)
            )
        });
        let err = opt(t.weight_rel_err, &|x| format!("{x:.3e}"));
        let worst = t.worst_row.as_ref().map_or("-".into(), |w| {
            format!("{} ({})", w.row, opt(w.rel_err, &|x| format!("{x:.2e}")))
        });
        println!(
            "{:<8} {:<52} {:>6} {:<28} {:>9} {:>28} {:>10} {:>16}",
            status,
            shown(&t.name, SHOWN_CHARS),
            t.expert.map_or("-".into(), |e| e.to_string()),
            t.differs.join(","),
            codes,
            scales,
            err,
            worst
        );
    }
}
