//! On-device matmul spot checks: MLX against bundlescope's own decoder.
//!
//! For a packed tensor `W` (`[rows, cols]`) a seeded random `x`
//! (`[batch, cols]`, standard normal, float32 or rounded to bfloat16) goes
//! through MLX's `quantized_matmul` on MLX's device, fed exactly as the seed
//! loader feeds it ([`repack`]), and through an f64 product with `W` decoded
//! by [`crate::decode::dequant`] ([`reference::matmul`]). They must agree:
//! relative Frobenius error ≤ 1e-5 for float32, ≤ 1e-2 for bfloat16 (whose
//! `x`, scales and output MLX rounds to bfloat16). The tied embedding is
//! also gathered through MLX (`dequantize` of the taken rows, the seed's
//! `embedding`) and must equal the decoder's rows exactly.
//!
//! With a reference checkpoint (the unquantised weights the bundle was made
//! from) each tensor is also measured against its source
//! ([`reference::quality`]): weight-space error, SNR, output-space error on
//! the same `x`, and the worst 64-column group, each held to a bound per
//! precision ([`reference::Thresholds`]).
//!
//! Work is bounded: a tensor with more rows than [`Options::max_rows`] is
//! checked on that many rows, drawn without replacement from the seed and
//! the tensor's name (so the same options check the same rows), sorted.
//! The CLI's `--all` uses [`DEFAULT_MAX_ROWS`].
//!
//! The bundle is only read: its payload is mapped read-only.

mod gguf;
mod gguf_loader;
mod gguf_reference;
mod mlxlm;
pub mod nvfp4;
mod packed;
pub mod reference;
pub mod repack;
mod sampling;

use crate::util::CancelToken;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::decode::dequant::DequantError;
use crate::finding::Finding;
use crate::format::audio8::{EMBED, LM_HEAD};
use crate::format::{Bundle, Layout, Payload, PayloadError, error_chain};
use crate::mlx::{self, Device, MlxError};
pub use reference::{Agreement, Checkpoint, Quality, Thresholds};
pub use sampling::{random_x, sample_rows};

pub use crate::finding::checks::{
    SPOTCHECK_EMBEDDING as CHECK_EMBEDDING, SPOTCHECK_GGUF_LOADER as CHECK_GGUF_LOADER,
    SPOTCHECK_MLX as CHECK_MLX, SPOTCHECK_REFERENCE as CHECK_REFERENCE,
};
pub use gguf_loader::{MAX_BYTES as GGUF_LOADER_MAX_BYTES, MLX_READS as GGUF_LOADER_TYPES};

/// Tolerance on the relative error for float32 inputs.
pub const TOL_F32: f64 = 1e-5;
/// Tolerance on the relative error for bfloat16 inputs.
pub const TOL_BF16: f64 = 1e-2;
/// The bfloat16 tolerance of `quantized_matmul` on MLX's CPU device, for
/// `cols` inputs per output: `max(1e-2, 2^-8 · √cols)`.
///
/// MLX 0.32.4's CPU `quantized_matmul` accumulates bfloat16 inputs in
/// bfloat16, so its error grows as √K. Measured against an f64 product
/// (same bf16 x, same bf16 scales): 1.9% at K = 256, 3.0% at 704, 5.1% at
/// 2048, 7.1% at 4096, while MLX's dense bf16 `matmul` stays at 0.23%. The
/// bound is about 3× those figures and still far below the ≈ 1 of codes
/// fed in the wrong order or with the wrong shift. Metal kernels accumulate
/// in float32 and are held to [`TOL_BF16`].
pub fn bf16_cpu_tolerance(cols: usize) -> f64 {
    TOL_BF16.max((cols as f64).sqrt() / 256.0)
}

/// The bound on `rel_err` for a `quantized_matmul` check.
pub fn matmul_tolerance(dtype: XDtype, device: &str, cols: usize) -> f64 {
    match dtype {
        XDtype::Bf16 if device == "cpu" => bf16_cpu_tolerance(cols),
        d => d.tolerance(),
    }
}

/// Rows checked per tensor by `--all` (and the GUI's check-all).
pub const DEFAULT_MAX_ROWS: usize = 4096;
/// Embedding rows gathered per embedding check.
pub const DEFAULT_EMBEDDING_ROWS: usize = 64;

/// The dtype of the random input `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XDtype {
    /// float32.
    #[default]
    F32,
    /// bfloat16.
    Bf16,
}

impl XDtype {
    /// Parses `f32` / `bf16` (also `float32` / `bfloat16`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "f32" | "float32" => Some(Self::F32),
            "bf16" | "bfloat16" => Some(Self::Bf16),
            _ => None,
        }
    }

    /// `f32` or `bf16`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }

    /// The agreement tolerance for this dtype.
    pub fn tolerance(self) -> f64 {
        match self {
            Self::F32 => TOL_F32,
            Self::Bf16 => TOL_BF16,
        }
    }
}

/// What a spot check does.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows of `x`.
    pub batch: usize,
    /// Seed of `x` and of the rows sampled.
    pub seed: u64,
    /// dtype of `x`.
    pub dtype: XDtype,
    /// Where MLX runs.
    pub device: Device,
    /// Check at most this many rows of each tensor (`None`: every row).
    pub max_rows: Option<usize>,
    /// Embedding rows gathered by the embedding check.
    pub embedding_rows: usize,
    /// The unquantised checkpoint to measure quality against.
    pub reference: Option<Arc<Checkpoint>>,
    /// Stacked NVFP4 and MLX-LM experts: check only this expert (`None`: every expert).
    pub expert: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            batch: 8,
            seed: 0,
            dtype: XDtype::F32,
            device: Device::Default,
            max_rows: None,
            embedding_rows: DEFAULT_EMBEDDING_ROWS,
            reference: None,
            expert: None,
        }
    }
}

/// Which check a result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `quantized_matmul` against the f64 product.
    Matmul,
    /// Embedding rows gathered through MLX against the decoder's rows.
    Embedding,
    /// A GGUF Q4_0/Q4_1/Q8_0 tensor as MLX's own GGUF loader reads it
    /// against bundlescope's reading (words, scales, biases).
    Loader,
}

/// One spot check of one tensor.
#[derive(Debug, Clone, Serialize)]
pub struct SpotResult {
    /// Tensor name.
    pub tensor: String,
    /// Which check.
    pub kind: Kind,
    /// The expert checked, for stacked NVFP4 and MLX-LM weights.
    pub expert: Option<usize>,
    /// The MLX operation that computed the result (`quantized_matmul`,
    /// `dequantize` for gathers, `gather_qmm` or `dequantize+matmul` for
    /// NVFP4 experts).
    pub mlx_op: String,
    /// The tensor's precision.
    pub precision: String,
    /// The device MLX ran on (`cpu`/`gpu`).
    pub device: String,
    /// dtype of `x` (and of the gathered rows).
    pub dtype: XDtype,
    /// Rows of `x` (for an embedding check, rows gathered).
    pub batch: usize,
    /// The tensor's shape.
    pub shape: [u64; 2],
    /// Tensor rows checked.
    pub rows_checked: usize,
    /// `‖y_mlx − y_ref‖ / ‖y_ref‖`.
    pub rel_err: f64,
    /// `max |y_mlx − y_ref|`.
    pub max_abs_err: f64,
    /// Cosine of `y_mlx` and `y_ref`.
    pub cosine: f64,
    /// Wall time of the MLX call, seconds.
    pub time_s: f64,
    /// MLX's GFLOP/s (`2·batch·rows·cols / time_s`); null for gathers.
    pub gflops: Option<f64>,
    /// Wall time of the f64 reference product, seconds.
    pub ref_time_s: f64,
    /// The reference's GFLOP/s; null for gathers.
    pub ref_gflops: Option<f64>,
    /// Bound on `rel_err` (0 for gathers: they must be exact).
    pub tolerance: f64,
    /// MLX and the reference agree within the tolerance.
    pub mlx_pass: bool,
    /// Quality against the reference checkpoint, when one was given and
    /// holds this tensor.
    pub reference: Option<Quality>,
    /// `mlx_pass`, and the reference quality passes where measured.
    pub pass: bool,
    /// What failed (or what could not be measured), as findings on the tensor.
    pub findings: Vec<Finding>,
}

/// A tensor `run_all` did not check, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Tensor name.
    pub tensor: String,
    /// Why.
    pub reason: String,
}

/// Every spot check of a bundle.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The device MLX ran on.
    pub device: String,
    /// MLX's version.
    pub mlx_version: String,
    /// The bundle folder.
    pub bundle: PathBuf,
    /// The reference checkpoint, if any.
    pub reference_dir: Option<PathBuf>,
    /// Seed of `x` and of the rows sampled.
    pub seed: u64,
    /// One per check, in bundle order.
    pub results: Vec<SpotResult>,
    /// Packed tensors not checked (broken metadata, reserved codes).
    pub skipped: Vec<Skipped>,
    /// Checks not run for a reason that is no fault of the bundle (MLX's
    /// GGUF loader refused by the bounds it runs under), once per reason.
    pub notes: Vec<String>,
    /// Tensors of the reference checkpoint the bundle does not have (listed,
    /// not an error: a quantized checkpoint may drop or rename some).
    pub reference_only: Vec<String>,
    /// Checks that passed.
    pub passed: usize,
    /// Checks that failed.
    pub failed: usize,
    /// Stopped early by the cancel flag.
    pub cancelled: bool,
    /// Wall time of the whole run, seconds.
    pub duration_s: f64,
}

/// What a run found out about MLX and how it ended, besides its results.
pub struct RunInfo {
    /// The device MLX ran on.
    pub device: String,
    /// MLX's version.
    pub mlx_version: String,
    /// When the run began.
    pub start: Instant,
    /// Stopped early by the cancel token.
    pub cancelled: bool,
}

impl Report {
    /// The report of a run over `bundle` with `opts`: counts the passes and
    /// failures of `results` and times the run from `info.start`.
    pub fn new(
        bundle: &Bundle,
        opts: &Options,
        info: RunInfo,
        results: Vec<SpotResult>,
        skipped: Vec<Skipped>,
    ) -> Self {
        let passed = results.iter().filter(|r| r.pass).count();
        Report {
            device: info.device,
            mlx_version: info.mlx_version,
            bundle: bundle.dir.clone(),
            reference_dir: opts.reference.as_ref().map(|r| r.path().to_path_buf()),
            reference_only: opts.reference.as_ref().map_or_else(Vec::new, |r| {
                let names: std::collections::HashSet<&str> =
                    bundle.tensors.iter().map(|t| t.name.as_str()).collect();
                r.names()
                    .into_iter()
                    .filter(|n| !names.contains(n))
                    .map(str::to_string)
                    .collect()
            }),
            seed: opts.seed,
            failed: results.len() - passed,
            passed,
            results,
            skipped,
            notes: Vec::new(),
            cancelled: info.cancelled,
            duration_s: info.start.elapsed().as_secs_f64(),
        }
    }
}

impl SpotResult {
    /// What was checked: `matmul`, `embedding` or `expert E`.
    pub fn check_label(&self) -> String {
        match (self.expert, self.kind) {
            (Some(e), _) => format!("expert {e}"),
            (None, Kind::Matmul) => "matmul".into(),
            (None, Kind::Embedding) => "embedding".into(),
            (None, Kind::Loader) => "loader".into(),
        }
    }
}

impl Report {
    /// `N passed, M failed[, K skipped][ (cancelled)] in T s`.
    pub fn tally(&self) -> String {
        format!(
            "{} passed, {} failed{}{} in {:.2} s",
            self.passed,
            self.failed,
            if self.skipped.is_empty() {
                String::new()
            } else {
                format!(", {} skipped", self.skipped.len())
            },
            if self.cancelled { " (cancelled)" } else { "" },
            self.duration_s
        )
    }

    /// Sorts the results worst first: failures first, then by the reference
    /// output error where measured, then by the MLX relative error.
    pub fn rank_worst_first(&mut self) {
        self.results.sort_by(|a, b| {
            let key = |r: &SpotResult| {
                (
                    !r.pass,
                    r.reference.as_ref().map_or(-1.0, |q| q.output_rel_err),
                    r.rel_err / r.tolerance.max(f64::MIN_POSITIVE),
                )
            };
            let (ka, kb) = (key(a), key(b));
            kb.0.cmp(&ka.0)
                .then(kb.1.total_cmp(&ka.1))
                .then(kb.2.total_cmp(&ka.2))
        });
    }
}

/// Progress of [`run_all`].
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// Checks finished.
    pub done: usize,
    /// Checks in all.
    pub total: usize,
    /// The tensor about to be checked (or just finished, at the end).
    pub tensor: &'a str,
}

/// Why a spot check could not run. Variants that wrap another error and
/// add context (a tensor, a path) hold it as a field and say it in their
/// message; the others are transparent, so no message says a cause twice.
#[derive(Debug, thiserror::Error)]
pub enum SpotError {
    /// MLX is missing or raised an error.
    #[error(transparent)]
    Mlx(#[from] MlxError),
    /// The payload bytes could not be had (file, tensor and offset named).
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The decoder refused the bytes.
    #[error(transparent)]
    Decode(#[from] DequantError),
    /// The tensor cannot be spot-checked.
    #[error("tensor {tensor}: {reason}")]
    Tensor {
        /// Tensor name.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// A stored code is one the seed loader refuses, so MLX cannot be fed it.
    #[error("tensor {tensor}: {error}")]
    ReservedCode {
        /// Tensor name.
        tensor: String,
        /// Which code, where.
        error: repack::ReservedCode,
    },
    /// An NVFP4 expert's bytes do not decode (lengths disagree with its shape).
    #[error("tensor {tensor}: expert {expert} could not be decoded")]
    ExpertDecode {
        /// Tensor name.
        tensor: String,
        /// The expert.
        expert: usize,
    },
    /// A file or folder of the reference checkpoint could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The reference checkpoint is unusable.
    #[error("reference checkpoint: {0}")]
    Reference(String),
    /// Options out of range.
    #[error("{0}")]
    Options(String),
    /// MLX's GGUF loader may not run on this tensor's file (see
    /// [`gguf_loader`]): a note, not a skipped check.
    #[error("tensor {tensor}: MLX's GGUF loader was not run: {reason}")]
    LoaderNotRun {
        /// Tensor name.
        tensor: String,
        /// Which bound stopped it.
        reason: String,
    },
}

/// Why MLX's GGUF loader check of tensor `index` would not run (its file
/// breaks a bound of [`gguf_loader`]), or `None` (it would, or the tensor
/// gets no such check).
pub fn loader_not_run(bundle: &Bundle, index: usize) -> Option<String> {
    let t = bundle.tensors.get(index)?;
    if !gguf_loader::checkable(t.layout) {
        return None;
    }
    gguf_loader::refusal(bundle, t.file)
        .map(|why| format!("MLX's GGUF loader check not run: {why}"))
}

/// The device name and MLX version a run reports, or why MLX cannot run.
pub fn mlx_info(device: Device) -> Result<(String, String), SpotError> {
    Ok((mlx::device_name(device)?, mlx::version()?))
}

/// One check [`run_all`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// The tensor.
    pub index: usize,
    /// Which check.
    pub kind: Kind,
    /// The expert, for stacked NVFP4 weights.
    pub expert: Option<usize>,
}

/// The checks [`run_all`] makes, in bundle order: every packed tensor's
/// matmul check, the embedding check after the tied embedding's, the MLX
/// GGUF loader check after a GGUF Q4_0/Q4_1/Q8_0 tensor's, and for
/// stacked NVFP4 weights one matmul check per expert (or only
/// `opts.expert`).
pub fn plan(bundle: &Bundle, opts: &Options) -> Vec<Planned> {
    let mut out = Vec::new();
    for i in 0..bundle.tensors.len() {
        out.extend(plan_tensor(bundle, i, opts));
    }
    out
}

/// The checks of one tensor (none for an alias or a dense tensor).
fn plan_tensor(bundle: &Bundle, i: usize, opts: &Options) -> Vec<Planned> {
    let t = &bundle.tensors[i];
    let one = |kind, expert| Planned {
        index: i,
        kind,
        expert,
    };
    if t.alias_of.is_some() {
        return Vec::new();
    }
    if mlxlm::is_mlx(t) {
        let mut out: Vec<Planned> = mlxlm::experts(t, opts)
            .into_iter()
            .map(|e| one(Kind::Matmul, e))
            .collect();
        if mlxlm::is_embedding(t) {
            out.push(one(Kind::Embedding, None));
        }
        return out;
    }
    if t.precision == crate::format::Precision::Nvfp4 {
        let experts = t
            .layout
            .as_ref()
            .and_then(Layout::experts)
            .unwrap_or(1)
            .max(1);
        return match opts.expert {
            Some(e) => vec![one(Kind::Matmul, Some(e))],
            None => (0..experts as usize)
                .map(|e| one(Kind::Matmul, Some(e)))
                .collect(),
        };
    }
    if gguf::checkable(t.layout) {
        let mut out = vec![one(Kind::Matmul, None)];
        if gguf_loader::checkable(t.layout) {
            out.push(one(Kind::Loader, None));
        }
        return out;
    }
    if t.precision.packed().is_none() {
        return Vec::new();
    }
    let mut out = vec![one(Kind::Matmul, None)];
    if Some(i) == embedding_index(bundle) {
        out.push(one(Kind::Embedding, None));
    }
    out
}

/// The tied embedding: the target of `lm_head`'s alias, else `embed_tokens`.
pub fn embedding_index(bundle: &Bundle) -> Option<usize> {
    let head = bundle.find(LM_HEAD);
    let target = head
        .and_then(|h| bundle.tensors[h].alias_of.clone())
        .unwrap_or_else(|| EMBED.to_string());
    bundle.find(&target)
}

/// Every packed tensor of `bundle` (see [`plan`]). `progress` is called
/// before each check and once at the end; setting `cancel` stops between
/// checks (the report says `cancelled`). A tensor that cannot be checked
/// is listed in `skipped`; only a missing MLX or an unusable option is an
/// `Err`.
pub fn run_all(
    bundle: &Bundle,
    opts: &Options,
    mut progress: impl FnMut(Progress<'_>),
    cancel: &CancelToken,
) -> Result<Report, SpotError> {
    let start = Instant::now();
    check_options(opts)?;
    let (device, mlx_version) = mlx_info(opts.device)?;
    let plan = plan(bundle, opts);
    let payload = Payload::open(bundle);
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut cancelled = false;
    let mut loaded = gguf_loader::Loaded::default();
    let mut notes: Vec<String> = Vec::new();
    for (done, p) in plan.iter().enumerate() {
        let name = &bundle.tensors[p.index].name;
        if cancel.is_cancelled() {
            cancelled = true;
            break;
        }
        progress(Progress {
            done,
            total: plan.len(),
            tensor: name,
        });
        match check(&payload, p, opts, &device, &mut loaded) {
            Ok(r) => results.push(r),
            Err(SpotError::Mlx(e @ MlxError::NotBuilt)) => return Err(e.into()),
            Err(SpotError::LoaderNotRun { reason, .. }) => {
                let note = format!("MLX's GGUF loader check not run: {reason}");
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
            Err(e) => skipped.push(Skipped {
                tensor: match p.expert {
                    Some(x) => format!("{name} (expert {x})"),
                    None => name.clone(),
                },
                reason: error_chain(&e),
            }),
        }
    }
    progress(Progress {
        done: if cancelled { results.len() } else { plan.len() },
        total: plan.len(),
        tensor: "",
    });
    let info = RunInfo {
        device,
        mlx_version,
        start,
        cancelled,
    };
    let mut report = Report::new(bundle, opts, info, results, skipped);
    report.notes = notes;
    Ok(report)
}

/// Every check of tensor `index` (an alias checks its target): its matmul
/// check, the embedding check for the tied embedding, one check per expert
/// (or only `opts.expert`) for stacked NVFP4 weights, MLX's GGUF loader
/// check where it may run. Fails on the first check that cannot run.
pub fn run_tensor(
    bundle: &Bundle,
    index: usize,
    opts: &Options,
) -> Result<Vec<SpotResult>, SpotError> {
    check_options(opts)?;
    let device = mlx::device_name(opts.device)?;
    let index = bundle.resolve_alias(index)?;
    let planned = plan_tensor(bundle, index, opts);
    if planned.is_empty() {
        let t = &bundle.tensors[index];
        return Err(SpotError::Tensor {
            tensor: t.name.clone(),
            reason: format!(
                "precision {} is stored as is (or not decoded); only packed tensors (q3, q3_full8, q4, nvfp4, GGUF block types, MLX-LM quantized weights) have a matmul to check",
                t.precision.as_str()
            ),
        });
    }
    let payload = Payload::open(bundle);
    let mut loaded = gguf_loader::Loaded::default();
    // A loader check that may not run is left out ([`loader_not_run`] says why).
    planned
        .iter()
        .map(|p| check(&payload, p, opts, &device, &mut loaded))
        .filter(|r| !matches!(r, Err(SpotError::LoaderNotRun { .. })))
        .collect()
}

fn check_options(opts: &Options) -> Result<(), SpotError> {
    if opts.batch == 0 || opts.batch > 4096 {
        return Err(SpotError::Options(format!(
            "batch {} is outside 1..=4096",
            opts.batch
        )));
    }
    if opts.max_rows == Some(0) {
        return Err(SpotError::Options("max_rows must be at least 1".into()));
    }
    if opts.embedding_rows == 0 {
        return Err(SpotError::Options(
            "embedding_rows must be at least 1".into(),
        ));
    }
    Ok(())
}

/// One planned check, its tensor's bytes read through `payload`.
fn check(
    payload: &Payload<&Bundle>,
    p: &Planned,
    opts: &Options,
    device: &str,
    loaded: &mut gguf_loader::Loaded,
) -> Result<SpotResult, SpotError> {
    if mlxlm::is_mlx(&payload.bundle().tensors[p.index]) {
        return match p.kind {
            Kind::Matmul => mlxlm::check(payload, p.index, p.expert, opts, device),
            Kind::Embedding => mlxlm::embedding_check(payload, p.index, opts, device),
            // Only GGUF tensors get it, and gguf_loader refuses the rest.
            Kind::Loader => gguf_loader::check(payload, p.index, loaded),
        };
    }
    if let Some(e) = p.expert {
        return nvfp4::check_expert(payload, p.index, e, opts, device);
    }
    let t = payload.bundle().tensor(p.index)?;
    if gguf::checkable(t.layout) {
        return match p.kind {
            Kind::Loader => gguf_loader::check(payload, p.index, loaded),
            _ => gguf::matmul_check(payload, p.index, opts, device),
        };
    }
    if p.kind == Kind::Loader {
        return gguf_loader::check(payload, p.index, loaded);
    }
    let g = packed::gather(payload, p.index, opts)?;
    let words =
        repack::words(g.kind, g.cols, &g.codes).map_err(|error| SpotError::ReservedCode {
            tensor: t.name.clone(),
            error,
        })?;
    match p.kind {
        Kind::Matmul => packed::matmul_check(t, &g, &words, opts, device),
        Kind::Embedding | Kind::Loader => packed::embedding_check(t, &g, &words, opts, device),
    }
}
