//! `bundlescope spotcheck DIR [--tensor NAME | --all]`: MLX's
//! `quantized_matmul` against the decoder's f64 product on random inputs,
//! optionally each tensor against the unquantised reference checkpoint.
//! Exit 0 when every check passes, 1 on any failure, 2 when it could not
//! run (the bundle cannot be opened, MLX is missing, a bad option).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use bundlescope::format::Bundle;
use bundlescope::mlx::Device;
use bundlescope::spotcheck::{
    self, Checkpoint, DEFAULT_EMBEDDING_ROWS, DEFAULT_MAX_ROWS, Options, Report, SpotError,
    SpotResult, XDtype,
};
use bundlescope::util::text::{SHOWN_CHARS, shown};

use super::common::{open_bundle, progress_bar};

/// Arguments of `spotcheck`.
#[derive(clap::Args)]
pub struct Args {
    /// Bundle folder (or its manifest.json).
    pub dir: PathBuf,
    /// Check this tensor (or alias); the tied embedding also gets its gather check.
    #[arg(long, conflicts_with = "all")]
    pub tensor: Option<String>,
    /// Check every packed tensor (the default when no --tensor is given).
    #[arg(long)]
    pub all: bool,
    /// Rows of the random input x.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Seed of x and of the rows sampled.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// dtype of x: f32 (tolerance 1e-5) or bf16 (tolerance 1e-2).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// The unquantised checkpoint (safetensors folder) to measure quality against.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Rows checked per tensor, drawn from the seed; 0 checks every row.
    /// Default: every row with --tensor, 4096 otherwise.
    #[arg(long)]
    pub max_rows: Option<usize>,
    /// Rows the tied embedding's gather check takes (from the rows
    /// checked), drawn from the seed; 0 takes every row.
    #[arg(long, default_value_t = DEFAULT_EMBEDDING_ROWS)]
    pub embedding_rows: usize,
    /// Stacked NVFP4 and MLX-LM experts: check only this expert (default: every expert).
    #[arg(long)]
    pub expert: Option<usize>,
    /// Where MLX runs: default (MLX's default device), cpu or gpu.
    #[arg(long, default_value = "default")]
    pub device: String,
    /// Print the JSON report instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let Some(dtype) = XDtype::parse(&a.dtype) else {
        bail!("--dtype {:?}: expected f32 or bf16", a.dtype);
    };
    let device = match a.device.as_str() {
        "default" => Device::Default,
        "cpu" => Device::Cpu,
        "gpu" => Device::Gpu,
        d => bail!("--device {d:?}: expected default, cpu or gpu"),
    };
    let bundle = open_bundle(&a.dir)?;
    let reference = match &a.reference {
        Some(dir) => Some(Arc::new(Checkpoint::open(dir)?)),
        None => None,
    };
    let max_rows = match a.max_rows {
        Some(0) => None,
        Some(n) => Some(n),
        None if a.tensor.is_some() => None,
        None => Some(DEFAULT_MAX_ROWS),
    };
    let opts = Options {
        batch: a.batch,
        seed: a.seed,
        dtype,
        device,
        max_rows,
        reference,
        expert: a.expert,
        // 0 means every row, as for --max-rows; the sampler caps k at n.
        embedding_rows: match a.embedding_rows {
            0 => usize::MAX,
            n => n,
        },
    };
    let mut report = match &a.tensor {
        Some(name) => one(&bundle, name, &opts)?,
        None => all(&bundle, &opts)?,
    };
    if opts.reference.is_some() {
        report.rank_worst_first();
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    // A packed tensor that could not be checked (broken metadata, a
    // reserved code the seed refuses) counts as a failure too.
    Ok(if report.failed == 0 && report.skipped.is_empty() {
        super::EXIT_OK
    } else {
        super::EXIT_INVALID
    })
}

/// One tensor (its gather check too, for the tied embedding).
fn one(bundle: &Bundle, name: &str, opts: &Options) -> Result<Report> {
    let start = std::time::Instant::now();
    let index = bundle
        .find(name)
        .ok_or_else(|| anyhow!("the bundle has no tensor or alias named {name:?}"))?;
    let (device, mlx_version) = spotcheck::mlx_info(opts.device)?;
    let results = spotcheck::run_tensor(bundle, index, opts)?;
    let info = spotcheck::RunInfo {
        device,
        mlx_version,
        start,
        cancelled: false,
    };
    let mut report = Report::new(bundle, opts, info, results, Vec::new());
    report
        .notes
        .extend(spotcheck::loader_not_run(bundle, index));
    Ok(report)
}

fn all(bundle: &Bundle, opts: &Options) -> Result<Report, SpotError> {
    let bar = progress_bar("{spinner} spot check [{bar:30}] {pos}/{len} {msg}");
    let never = bundlescope::util::CancelToken::default();
    let report = spotcheck::run_all(
        bundle,
        opts,
        |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(p.tensor.to_string());
        },
        &never,
    );
    bar.finish_and_clear();
    report
}

fn print_table(r: &Report) {
    println!(
        "spot check of {} on {} (MLX {}), seed {}{}",
        r.bundle.display(),
        r.device,
        r.mlx_version,
        r.seed,
        r.reference_dir
            .as_ref()
            .map_or(String::new(), |d| format!(", reference {}", d.display()))
    );
    let with_ref = r.reference_dir.is_some();
    let width = r
        .results
        .iter()
        .map(|x| shown(&x.tensor, SHOWN_CHARS).chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut head = format!(
        "{:<width$}  {:<10} {:<8} {:>4} {:>5} {:>11}  {:>9} {:>9} {:>10} {:>8} {:>8} {:>8}",
        "tensor",
        "check",
        "prec",
        "x",
        "batch",
        "rows",
        "rel_err",
        "max_abs",
        "cosine",
        "ms",
        "GFLOP/s",
        "ref GF/s"
    );
    if with_ref {
        head.push_str(&format!(
            "  {:>8} {:>7} {:>8} {:>8}",
            "w_rel", "SNR dB", "out_rel", "group"
        ));
    }
    println!("{head}  result");
    for x in &r.results {
        println!("{}", row(x, width, with_ref));
    }
    for s in &r.skipped {
        println!(
            "{:<width$}  skipped: {}",
            shown(&s.tensor, SHOWN_CHARS),
            shown(&s.reason, 4 * SHOWN_CHARS)
        );
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    for x in &r.results {
        for f in &x.findings {
            println!(
                "{}: {} [{}]",
                f.severity.as_str(),
                shown(&f.message, 4 * SHOWN_CHARS),
                shown(&x.tensor, SHOWN_CHARS)
            );
        }
    }
    if !r.reference_only.is_empty() {
        println!(
            "{} tensor(s) of the reference are not in the bundle: {}",
            r.reference_only.len(),
            shown(&r.reference_only.join(", "), 4 * SHOWN_CHARS)
        );
    }
    println!("{}", r.tally());
}

fn row(x: &SpotResult, width: usize, with_ref: bool) -> String {
    let gf = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let kind = x.check_label();
    // MLX's GGUF loader check multiplies nothing: no x, no batch.
    let (dtype, batch) = if x.kind == spotcheck::Kind::Loader {
        ("-".to_string(), "-".to_string())
    } else {
        (x.dtype.as_str().to_string(), x.batch.to_string())
    };
    let mut s = format!(
        "{:<width$}  {:<10} {:<8} {:>4} {:>5} {:>11}  {:>9.2e} {:>9.2e} {:>10.7} {:>8.2} {:>8} {:>8}",
        shown(&x.tensor, SHOWN_CHARS),
        kind,
        x.precision,
        dtype,
        batch,
        format!("{}/{}", x.rows_checked, x.shape[0]),
        x.rel_err,
        x.max_abs_err,
        x.cosine,
        x.time_s * 1e3,
        gf(x.gflops),
        gf(x.ref_gflops),
    );
    if with_ref {
        match &x.reference {
            Some(q) => s.push_str(&format!(
                "  {:>8.4} {:>7.2} {:>8.4} {:>8.3}",
                q.weight_rel_err, q.snr_db, q.output_rel_err, q.worst_group_rel_err
            )),
            None => s.push_str(&format!("  {:>8} {:>7} {:>8} {:>8}", "-", "-", "-", "-")),
        }
    }
    s.push_str(if x.pass { "  pass" } else { "  FAIL" });
    s
}
