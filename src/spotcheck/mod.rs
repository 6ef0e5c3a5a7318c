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

pub mod nvfp4;
pub mod reference;
pub mod repack;

use std::collections::HashSet;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use memmap2::Mmap;
use serde::Serialize;

use crate::decode::dequant::{dequantize_rows, row_bytes, row_scale_bytes};
use crate::decode::{bf16_to_f32, f32_to_bf16};
use crate::finding::Finding;
use crate::format::audio8::{EMBED, LM_HEAD};
use crate::format::{Bundle, Layout, PackedKind, TensorInfo};
use crate::mlx::{self, AffineWeights, Device, Floats, MlxError, OutDtype};
use crate::util::Rng;
pub use reference::{Agreement, Checkpoint, Quality, Thresholds};
use repack::{Meta, MetaDtype};

pub use crate::finding::checks::{
    SPOTCHECK_EMBEDDING as CHECK_EMBEDDING, SPOTCHECK_MLX as CHECK_MLX,
    SPOTCHECK_REFERENCE as CHECK_REFERENCE,
};

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
    /// Stacked NVFP4 experts: check only this expert (`None`: every expert).
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
}

/// One spot check of one tensor.
#[derive(Debug, Clone, Serialize)]
pub struct SpotResult {
    /// Tensor name.
    pub tensor: String,
    /// Which check.
    pub kind: Kind,
    /// The expert checked, for stacked NVFP4 weights.
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
    /// Checks that passed.
    pub passed: usize,
    /// Checks that failed.
    pub failed: usize,
    /// Stopped early by the cancel flag.
    pub cancelled: bool,
    /// Wall time of the whole run, seconds.
    pub duration_s: f64,
}

impl SpotResult {
    /// What was checked: `matmul`, `embedding` or `expert E`.
    pub fn check_label(&self) -> String {
        match (self.expert, self.kind) {
            (Some(e), _) => format!("expert {e}"),
            (None, Kind::Matmul) => "matmul".into(),
            (None, Kind::Embedding) => "embedding".into(),
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

/// Why a spot check could not run.
#[derive(Debug, thiserror::Error)]
pub enum SpotError {
    /// MLX is missing or raised an error.
    #[error(transparent)]
    Mlx(#[from] MlxError),
    /// The tensor cannot be spot-checked.
    #[error("tensor {tensor}: {reason}")]
    Tensor {
        /// Tensor name.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The reference checkpoint is unusable.
    #[error("reference checkpoint: {0}")]
    Reference(String),
    /// The decoder refused the bytes.
    #[error("decoding: {0}")]
    Decode(String),
    /// Options out of range.
    #[error("{0}")]
    Options(String),
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
/// matmul check, the embedding check after the tied embedding's, and for
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
    cancel: &AtomicBool,
) -> Result<Report, SpotError> {
    let start = Instant::now();
    check_options(opts)?;
    let (device, mlx_version) = mlx_info(opts.device)?;
    let plan = plan(bundle, opts);
    let mut payload = Payload::new(bundle);
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut cancelled = false;
    for (done, p) in plan.iter().enumerate() {
        let name = &bundle.tensors[p.index].name;
        if cancel.load(Ordering::Relaxed) {
            cancelled = true;
            break;
        }
        progress(Progress {
            done,
            total: plan.len(),
            tensor: name,
        });
        match check(&mut payload, p, opts, &device) {
            Ok(r) => results.push(r),
            Err(SpotError::Mlx(e @ MlxError::NotBuilt)) => return Err(e.into()),
            Err(e) => skipped.push(Skipped {
                tensor: match p.expert {
                    Some(x) => format!("{name} (expert {x})"),
                    None => name.clone(),
                },
                reason: e.to_string(),
            }),
        }
    }
    progress(Progress {
        done: if cancelled { results.len() } else { plan.len() },
        total: plan.len(),
        tensor: "",
    });
    let passed = results.iter().filter(|r| r.pass).count();
    Ok(Report {
        device,
        mlx_version,
        bundle: bundle.dir.clone(),
        reference_dir: opts.reference.as_ref().map(|r| r.path().to_path_buf()),
        seed: opts.seed,
        failed: results.len() - passed,
        passed,
        results,
        skipped,
        cancelled,
        duration_s: start.elapsed().as_secs_f64(),
    })
}

/// Every check of tensor `index` (an alias checks its target): its matmul
/// check, the embedding check for the tied embedding, one check per expert
/// (or only `opts.expert`) for stacked NVFP4 weights. Fails on the first
/// check that cannot run.
pub fn run_tensor(
    bundle: &Bundle,
    index: usize,
    opts: &Options,
) -> Result<Vec<SpotResult>, SpotError> {
    check_options(opts)?;
    let device = mlx::device_name(opts.device)?;
    let index = resolve(bundle, index)?;
    let planned = plan_tensor(bundle, index, opts);
    if planned.is_empty() {
        let t = &bundle.tensors[index];
        return Err(SpotError::Tensor {
            tensor: t.name.clone(),
            reason: format!(
                "precision {} is stored as is; only packed tensors (q3, q3_full8, q4, nvfp4) have a matmul to check",
                t.precision.as_str()
            ),
        });
    }
    let mut payload = Payload::new(bundle);
    planned
        .iter()
        .map(|p| check(&mut payload, p, opts, &device))
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

/// Follows an alias to its target.
fn resolve(bundle: &Bundle, mut index: usize) -> Result<usize, SpotError> {
    for _ in 0..=bundle.tensors.len() {
        let t = bundle.tensors.get(index).ok_or_else(|| SpotError::Tensor {
            tensor: format!("#{index}"),
            reason: "no such tensor in the index".into(),
        })?;
        let Some(target) = &t.alias_of else {
            return Ok(index);
        };
        index = bundle.find(target).ok_or_else(|| SpotError::Tensor {
            tensor: t.name.clone(),
            reason: format!("alias of {target:?}, which does not exist"),
        })?;
    }
    Err(SpotError::Tensor {
        tensor: bundle.tensors[index].name.clone(),
        reason: "the aliases form a cycle".into(),
    })
}

/// The bundle's payload files, mapped read-only on first use.
struct Payload<'b> {
    bundle: &'b Bundle,
    maps: Vec<Option<Mmap>>,
}

impl<'b> Payload<'b> {
    fn new(bundle: &'b Bundle) -> Self {
        Self {
            bundle,
            maps: (0..bundle.files.len()).map(|_| None).collect(),
        }
    }

    fn bytes(&mut self, t: &TensorInfo) -> Result<&[u8], SpotError> {
        let err = |reason: String| SpotError::Tensor {
            tensor: t.name.clone(),
            reason,
        };
        let info = self
            .bundle
            .files
            .get(t.file)
            .ok_or_else(|| err("its payload file is not in the bundle".into()))?;
        let slot = &mut self.maps[t.file];
        if slot.is_none() {
            let io = |source| SpotError::Io {
                path: info.path.clone(),
                source,
            };
            // Checked before opening: opening a FIFO would block.
            let meta = std::fs::metadata(&info.path).map_err(io)?;
            if !meta.is_file() {
                return Err(err(format!(
                    "{} is not a regular file",
                    info.path.display()
                )));
            }
            let f = File::open(&info.path).map_err(io)?;
            if f.metadata().map_err(io)?.len() == 0 {
                return Err(err(format!("{} is empty", info.path.display())));
            }
            // SAFETY: a read-only map; bundlescope never writes to a bundle.
            // Another process truncating the payload meanwhile would fault.
            *slot = Some(unsafe { Mmap::map(&f) }.map_err(io)?);
        }
        let map = slot.as_ref().map(|m| &m[..]).unwrap_or_default();
        let (start, end) = t
            .range()
            .ok_or_else(|| err("its record has no byte range".into()))?;
        usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| map.get(s..e))
            .ok_or_else(|| {
                err(format!(
                    "{} is {} bytes long; the tensor needs bytes {start}..{end}",
                    info.name,
                    map.len()
                ))
            })
    }
}

/// The rows of a packed tensor gathered for one check.
struct Gathered {
    kind: PackedKind,
    rows: usize,
    cols: usize,
    /// Tensor row of each gathered row.
    ids: Vec<u64>,
    /// Their packed codes, as stored.
    codes: Vec<u8>,
    /// Their F16 scales, as stored.
    scales: Vec<u8>,
}

fn gather(
    payload: &mut Payload<'_>,
    t: &TensorInfo,
    opts: &Options,
) -> Result<Gathered, SpotError> {
    let Some(Layout::Packed { kind, rows, cols }) = t.layout else {
        return Err(SpotError::Tensor {
            tensor: t.name.clone(),
            reason: if t.precision.packed().is_some() {
                "its metadata is broken, so its bytes cannot be read; `bundlescope audit` lists what is wrong".into()
            } else {
                format!(
                    "precision {} is not a packed q3/q3_full8/q4 tensor",
                    t.precision.as_str()
                )
            },
        });
    };
    let (rows, cols) = (rows as usize, cols as usize);
    let bytes = payload.bytes(t)?;
    let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
    let (codes_all, scales_all) = bytes.split_at(rows * rb);
    let ids = sample_rows(opts.seed, &t.name, rows, opts.max_rows.unwrap_or(rows));
    let (codes, scales) = if ids.len() == rows {
        (codes_all.to_vec(), scales_all[..rows * sb].to_vec())
    } else {
        let mut codes = Vec::with_capacity(ids.len() * rb);
        let mut scales = Vec::with_capacity(ids.len() * sb);
        for &r in &ids {
            let r = r as usize;
            codes.extend_from_slice(&codes_all[r * rb..(r + 1) * rb]);
            scales.extend_from_slice(&scales_all[r * sb..(r + 1) * sb]);
        }
        (codes, scales)
    };
    Ok(Gathered {
        kind,
        rows,
        cols,
        ids,
        codes,
        scales,
    })
}

/// `k` distinct rows of `0..n` drawn from the seed and the name (all of
/// them when `k >= n`), ascending.
pub fn sample_rows(seed: u64, name: &str, n: usize, k: usize) -> Vec<u64> {
    if k >= n {
        return (0..n as u64).collect();
    }
    // Floyd's algorithm: k draws, no O(n) table.
    let mut rng = Rng::new(seed ^ name_hash(name) ^ 0x005e_ed0f_7265_7773);
    let mut chosen = HashSet::with_capacity(k);
    for j in (n - k)..n {
        let t = (rng.next_u64() % (j as u64 + 1)) as usize;
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    let mut out: Vec<u64> = chosen.into_iter().map(|r| r as u64).collect();
    out.sort_unstable();
    out
}

/// FNV-1a of a name: the per-tensor part of every seed.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The random input of a tensor's check: `[batch, cols]` standard normal
/// f32 (Box–Muller from the seed and the name), rounded to bfloat16 for
/// `Bf16`. Returns the f32 values (already rounded) and, for `Bf16`, the
/// bit patterns MLX receives.
pub fn random_x(
    seed: u64,
    name: &str,
    batch: usize,
    cols: usize,
    dtype: XDtype,
) -> (Vec<f32>, Vec<u16>) {
    let mut rng = Rng::new(seed ^ name_hash(name));
    let n = batch * cols;
    let mut x = Vec::with_capacity(n + 1);
    while x.len() < n {
        let u1 = (f64::from(rng.uniform()) + 0.5 / f64::from(1u32 << 24)).min(1.0);
        let u2 = f64::from(rng.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let a = std::f64::consts::TAU * u2;
        x.push((r * a.cos()) as f32);
        x.push((r * a.sin()) as f32);
    }
    x.truncate(n);
    match dtype {
        XDtype::F32 => (x, Vec::new()),
        XDtype::Bf16 => {
            let bits: Vec<u16> = x.iter().map(|&v| f32_to_bf16(v)).collect();
            (bits.iter().map(|&b| bf16_to_f32(b)).collect(), bits)
        }
    }
}

fn check(
    payload: &mut Payload<'_>,
    p: &Planned,
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    if let Some(e) = p.expert {
        return nvfp4::check_expert(payload, p.index, e, opts, device);
    }
    let t = &payload.bundle.tensors[p.index];
    let g = gather(payload, t, opts)?;
    let words = repack::words(g.kind, g.cols, &g.codes).map_err(|e| SpotError::Tensor {
        tensor: t.name.clone(),
        reason: e.to_string(),
    })?;
    match p.kind {
        Kind::Matmul => matmul_check(t, &g, &words, opts, device),
        Kind::Embedding => embedding_check(t, &g, &words, opts, device),
    }
}

fn base_result(
    t: &TensorInfo,
    g: &Gathered,
    kind: Kind,
    opts: &Options,
    device: &str,
) -> SpotResult {
    SpotResult {
        tensor: t.name.clone(),
        kind,
        expert: None,
        mlx_op: match kind {
            Kind::Matmul => "quantized_matmul",
            Kind::Embedding => "dequantize",
        }
        .to_string(),
        precision: g.kind.precision().as_str().to_string(),
        device: device.to_string(),
        dtype: opts.dtype,
        batch: opts.batch,
        shape: [g.rows as u64, g.cols as u64],
        rows_checked: g.ids.len(),
        rel_err: 0.0,
        max_abs_err: 0.0,
        cosine: 1.0,
        time_s: 0.0,
        gflops: None,
        ref_time_s: 0.0,
        ref_gflops: None,
        tolerance: opts.dtype.tolerance(),
        mlx_pass: false,
        reference: None,
        pass: false,
        findings: Vec::new(),
    }
}

fn matmul_check(
    t: &TensorInfo,
    g: &Gathered,
    words: &[u32],
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    let n = g.ids.len();
    let (x, x_bits) = random_x(opts.seed, &t.name, opts.batch, g.cols, opts.dtype);
    let meta_dtype = match opts.dtype {
        XDtype::F32 => MetaDtype::F32,
        XDtype::Bf16 => MetaDtype::Bf16,
    };
    let meta = repack::meta(g.kind, &g.scales, meta_dtype);
    let (scales, biases) = match &meta {
        Meta::F32 { scales, biases } => (Floats::F32(scales), Floats::F32(biases)),
        Meta::Bf16 { scales, biases } => (Floats::Bf16(scales), Floats::Bf16(biases)),
    };
    let w = AffineWeights {
        words,
        scales,
        biases,
        rows: n,
        cols: g.cols,
        bits: g.kind.bits(),
        group_size: mlx::AFFINE_GROUP,
    };
    let xin = match opts.dtype {
        XDtype::F32 => Floats::F32(&x),
        XDtype::Bf16 => Floats::Bf16(&x_bits),
    };
    let started = Instant::now();
    let y = mlx::quantized_matmul(opts.device, xin, opts.batch, &w)?;
    let time_s = started.elapsed().as_secs_f64();

    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let started = Instant::now();
    let y_ref = reference::matmul(g.kind, g.cols, &g.codes, &g.scales, &x64, opts.batch)?;
    let ref_time_s = started.elapsed().as_secs_f64();

    let flops = 2.0 * opts.batch as f64 * n as f64 * g.cols as f64;
    let a = reference::agreement(&y, &y_ref);
    let mut r = base_result(t, g, Kind::Matmul, opts, device);
    r.tolerance = matmul_tolerance(opts.dtype, device, g.cols);
    r.rel_err = a.rel_err;
    r.max_abs_err = a.max_abs_err;
    r.cosine = a.cosine;
    r.time_s = time_s;
    r.gflops = Some(flops / time_s.max(1e-9) / 1e9);
    r.ref_time_s = ref_time_s;
    r.ref_gflops = Some(flops / ref_time_s.max(1e-9) / 1e9);
    r.mlx_pass = a.rel_err <= r.tolerance;
    if !r.mlx_pass {
        r.findings.push(
            Finding::error(
                CHECK_MLX,
                format!(
                    "MLX quantized_matmul on {device} ({} x, batch {}) is {:.3e} (relative) from the decoder's f64 product; at most {:.1e} expected (max abs {:.3e}, cosine {:.6})",
                    opts.dtype.as_str(),
                    opts.batch,
                    a.rel_err,
                    r.tolerance,
                    a.max_abs_err,
                    a.cosine
                ),
            )
            .tensor(t.name.clone()),
        );
    }
    if let Some(ckpt) = &opts.reference {
        reference_quality(ckpt, t, g, &x64, opts.batch, &mut r)?;
    }
    r.pass = r.mlx_pass && r.reference.as_ref().is_none_or(|q| q.pass);
    Ok(r)
}

fn reference_quality(
    ckpt: &Checkpoint,
    t: &TensorInfo,
    g: &Gathered,
    x: &[f64],
    batch: usize,
    r: &mut SpotResult,
) -> Result<(), SpotError> {
    let Some(src) = ckpt.tensor(&t.name) else {
        r.findings.push(
            Finding::warning(
                CHECK_REFERENCE,
                format!(
                    "the reference checkpoint {} has no tensor {}; its quality was not measured",
                    ckpt.path().display(),
                    t.name
                ),
            )
            .tensor(t.name.clone()),
        );
        return Ok(());
    };
    let want = [g.rows as u64, g.cols as u64];
    let fail = |r: &mut SpotResult, msg: String| {
        r.findings
            .push(Finding::error(CHECK_REFERENCE, msg).tensor(t.name.clone()));
    };
    if src.shape != want {
        fail(
            r,
            format!(
                "the reference's {} in {} has shape {:?}; the bundle's is {want:?}",
                t.name, src.file, src.shape
            ),
        );
        r.reference = Some(failed_quality(g.kind));
        return Ok(());
    }
    let w = match src.rows_f64(&g.ids, g.cols) {
        Ok(w) => w,
        Err(why) => {
            fail(
                r,
                format!("the reference's {} in {}: {why}", t.name, src.file),
            );
            r.reference = Some(failed_quality(g.kind));
            return Ok(());
        }
    };
    let mut wq = vec![0f32; g.ids.len() * g.cols];
    dequantize_rows(g.kind, g.cols, &g.codes, &g.scales, &mut wq)
        .map_err(|e| SpotError::Decode(e.to_string()))?;
    let q = reference::quality(g.kind, &wq, &w, x, batch, g.cols, &g.ids);
    if !q.pass {
        fail(
            r,
            format!(
                "against the reference checkpoint: output error {:.4} (bound {:.2}), worst group {:.3} at row {} group {} (bound {:.2}), weight error {:.4}, SNR {:.1} dB",
                q.output_rel_err,
                q.thresholds.output_rel_err,
                q.worst_group_rel_err,
                q.worst_group[0],
                q.worst_group[1],
                q.thresholds.group_rel_err,
                q.weight_rel_err,
                q.snr_db
            ),
        );
    }
    r.reference = Some(q);
    Ok(())
}

/// The quality of a tensor whose source could not be compared.
fn failed_quality(kind: PackedKind) -> Quality {
    Quality {
        weight_rel_err: f64::INFINITY,
        snr_db: f64::NEG_INFINITY,
        output_rel_err: f64::INFINITY,
        worst_group_rel_err: f64::INFINITY,
        worst_group: [0, 0],
        thresholds: Thresholds::for_kind(kind),
        pass: false,
    }
}

fn embedding_check(
    t: &TensorInfo,
    g: &Gathered,
    words: &[u32],
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    let n = g.ids.len();
    // Positions within the gathered rows (which are the table MLX sees).
    let picks = sample_rows(opts.seed ^ 1, &t.name, n, opts.embedding_rows);
    let ids: Vec<i32> = picks.iter().map(|&p| p as i32).collect();
    // The seed's embedding: scales cast to float32, bias = -offset * scale.
    let Meta::F32 { scales, biases } = repack::meta(g.kind, &g.scales, MetaDtype::F32) else {
        unreachable!("float32 meta")
    };
    let w = AffineWeights {
        words,
        scales: Floats::F32(&scales),
        biases: Floats::F32(&biases),
        rows: n,
        cols: g.cols,
        bits: g.kind.bits(),
        group_size: mlx::AFFINE_GROUP,
    };
    let out = match opts.dtype {
        XDtype::F32 => OutDtype::F32,
        XDtype::Bf16 => OutDtype::Bf16,
    };
    if i32::try_from(n).is_err() {
        return Err(SpotError::Tensor {
            tensor: t.name.clone(),
            reason: "too many rows for MLX's int32 indices".into(),
        });
    }
    let started = Instant::now();
    let got = mlx::dequantize_affine_rows(opts.device, &w, &ids, out)?;
    let time_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let rb = row_bytes(g.kind, g.cols);
    let sb = row_scale_bytes(g.cols);
    let mut want = vec![0f32; ids.len() * g.cols];
    for (o, &p) in want.chunks_exact_mut(g.cols).zip(&picks) {
        let p = p as usize;
        dequantize_rows(
            g.kind,
            g.cols,
            &g.codes[p * rb..(p + 1) * rb],
            &g.scales[p * sb..(p + 1) * sb],
            o,
        )
        .map_err(|e| SpotError::Decode(e.to_string()))?;
    }
    if opts.dtype == XDtype::Bf16 {
        for v in &mut want {
            *v = bf16_to_f32(f32_to_bf16(*v));
        }
    }
    let ref_time_s = started.elapsed().as_secs_f64();
    let want64: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    let a = reference::agreement(&got, &want64);
    let mismatched = got
        .iter()
        .zip(&want)
        .position(|(a, b)| a.to_bits() != b.to_bits());
    let mut r = base_result(t, g, Kind::Embedding, opts, device);
    r.batch = ids.len();
    r.rel_err = a.rel_err;
    r.max_abs_err = a.max_abs_err;
    r.cosine = a.cosine;
    r.time_s = time_s;
    r.ref_time_s = ref_time_s;
    r.tolerance = 0.0;
    r.mlx_pass = mismatched.is_none();
    if let Some(i) = mismatched {
        let row = g.ids[picks[i / g.cols] as usize];
        r.findings.push(
            Finding::error(
                CHECK_EMBEDDING,
                format!(
                    "embedding row {row} gathered through MLX's dequantize differs from the decoder's at column {}: {} vs {}",
                    i % g.cols,
                    got[i],
                    want[i]
                ),
            )
            .tensor(t.name.clone()),
        );
    }
    r.pass = r.mlx_pass;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_rows_are_distinct_sorted_and_seeded() {
        let a = sample_rows(3, "t", 10_000, 100);
        assert_eq!(a.len(), 100);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(a.iter().all(|&r| r < 10_000));
        assert_eq!(a, sample_rows(3, "t", 10_000, 100));
        assert_ne!(a, sample_rows(4, "t", 10_000, 100));
        assert_ne!(a, sample_rows(3, "u", 10_000, 100));
        assert_eq!(sample_rows(3, "t", 5, 9), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn random_x_is_standard_normal_and_bf16_is_rounded() {
        let (x, bits) = random_x(1, "t", 8, 4096, XDtype::F32);
        assert!(bits.is_empty());
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        let (xb, bits) = random_x(1, "t", 8, 4096, XDtype::Bf16);
        assert_eq!(bits.len(), xb.len());
        for ((&a, &b), &h) in x.iter().zip(&xb).zip(&bits) {
            assert_eq!(b, bf16_to_f32(f32_to_bf16(a)));
            assert_eq!(f32_to_bf16(b), h);
        }
    }
}
