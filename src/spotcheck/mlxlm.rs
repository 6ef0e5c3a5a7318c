//! Spot checks of MLX-LM quantized modules (every mode and affine width),
//! one matrix at a time, one expert at a time for stacked `switch_mlp`
//! layers: the rows checked are copied out of the module's weight, scales
//! and biases exactly as stored, MLX computes `x · Wᵀ` with
//! `quantized_matmul(..., mode)` (MLX's CPU has a kernel for every mode;
//! nvfp4 modules with a per-expert global scale go through
//! `dequantize(..., global_scale)` then `matmul`, which MLX's CPU can do),
//! and the f64 product with `W` from bundlescope's decoder
//! ([`crate::decode::mlxlm::Module::exact_row`]: `scale · q + bias` from the
//! stored values, before any rounding of the result) must agree with it.
//!
//! With a reference checkpoint (the BF16/F16 model the quantized one was
//! made from, names matching) the rows are also measured against their
//! source, decoded as `mx.dequantize` rounds them, with bounds per mode and
//! width ([`Thresholds::for_mlx`]) and the worst group over the module's own
//! group size.

use std::time::Instant;

use super::nvfp4::rows_per_expert;
use super::reference::{self, Rows};
use super::{
    CHECK_EMBEDDING, CHECK_MLX, CHECK_REFERENCE, Kind, Options, Quality, SpotError, SpotResult,
    Thresholds, XDtype, matmul_tolerance, random_x, sample_rows,
};
use crate::decode::mlxlm::{Module, module_of};
use crate::finding::Finding;
use crate::format::{Bundle, DenseDtype, Layout, Payload, Precision, TensorInfo};
use crate::mlx::{self, Floats, ModeScales, ModeWeights};

/// Is tensor `t` an MLX-LM quantized weight (checked here)?
pub(super) fn is_mlx(t: &TensorInfo) -> bool {
    matches!(t.precision, Precision::Mlx(..))
}

/// Is `t` an MLX-LM quantized embedding table (`…embed_tokens.weight`,
/// unstacked)? MLX-LM looks its rows up with `dequantize` of the taken
/// rows (and, tied, multiplies with it as `lm_head`), so it gets the
/// gather check beside the matmul check.
pub(super) fn is_embedding(t: &TensorInfo) -> bool {
    is_mlx(t)
        && t.name.ends_with("embed_tokens.weight")
        && matches!(t.layout, Some(Layout::MlxCodes { experts: 1, .. }))
}

/// The experts a check of `t` covers: `[None]` for an unstacked module,
/// one per expert (or only `opts.expert`) for a stacked one.
pub(super) fn experts(t: &TensorInfo, opts: &Options) -> Vec<Option<usize>> {
    match t.layout {
        Some(Layout::MlxCodes { experts, .. }) if experts > 1 => match opts.expert {
            Some(e) => vec![Some(e)],
            None => (0..experts as usize).map(Some).collect(),
        },
        _ => vec![None],
    }
}

/// The rows of one expert gathered for a check, as MLX takes them.
struct Gathered {
    ids: Vec<u64>,
    words: Vec<u32>,
    scales: Vec<u8>,
    biases: Vec<u8>,
}

fn gather(m: &Module<'_>, expert: usize, ids: Vec<u64>) -> Gathered {
    let (rb, sb) = (m.row_bytes(), m.groups() * m.scale_size());
    let mut words = Vec::with_capacity(ids.len() * rb / 4);
    let mut scales = Vec::with_capacity(ids.len() * sb);
    let mut biases = Vec::new();
    for &r in &ids {
        // Module::validate checked every length against the shape.
        let row = expert * m.rows + r as usize;
        words.extend(
            m.weight[row * rb..(row + 1) * rb]
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
        );
        scales.extend_from_slice(&m.scales[row * sb..(row + 1) * sb]);
        if let Some(b) = m.biases {
            biases.extend_from_slice(&b[row * sb..(row + 1) * sb]);
        }
    }
    Gathered {
        ids,
        words,
        scales,
        biases,
    }
}

fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// MLX's scales (and biases) of the gathered rows, as it takes them.
fn mode_scales<'a>(
    m: &Module<'_>,
    g: &'a Gathered,
    s16: &'a mut Vec<u16>,
    b16: &'a mut Vec<u16>,
    s32: &'a mut Vec<f32>,
    b32: &'a mut Vec<f32>,
) -> ModeScales<'a> {
    match m.scale_dtype {
        None => ModeScales::Bytes(&g.scales),
        Some(DenseDtype::F32) => {
            (*s32, *b32) = (f32s(&g.scales), f32s(&g.biases));
            ModeScales::Affine {
                scales: Floats::F32(s32),
                biases: Floats::F32(b32),
            }
        }
        Some(d) => {
            (*s16, *b16) = (u16s(&g.scales), u16s(&g.biases));
            let wrap = if d == DenseDtype::Bf16 {
                Floats::Bf16
            } else {
                Floats::F16
            };
            ModeScales::Affine {
                scales: wrap(s16),
                biases: wrap(b16),
            }
        }
    }
}

/// The gather check of an MLX-LM embedding table: `opts.embedding_rows`
/// rows taken and dequantised by MLX as the loader looks tokens up (in the
/// loader's dtype), which must equal the decoder's rows bit for bit.
pub(super) fn embedding_check(
    payload: &Payload<&Bundle>,
    index: usize,
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    let t = payload.bundle().tensor(index)?;
    let err = |reason: String| SpotError::Tensor {
        tensor: t.name.clone(),
        reason,
    };
    let m = module_of(payload, index).map_err(err)?;
    if m.global.is_some() {
        return Err(err(
            "its rows carry a global scale, which MLX's row lookup does not take; the matmul check covers it".into(),
        ));
    }
    let k = opts.embedding_rows.min(opts.max_rows.unwrap_or(usize::MAX));
    let ids = sample_rows(opts.seed ^ 1, &t.name, m.rows, k);
    let g = gather(&m, 0, ids);
    let n = g.ids.len();
    let (mut s16, mut b16, mut s32, mut b32) = Default::default();
    let w = ModeWeights {
        words: &g.words,
        scales: mode_scales(&m, &g, &mut s16, &mut b16, &mut s32, &mut b32),
        rows: n,
        cols: m.cols,
        bits: u32::from(m.bits),
        group_size: m.group,
        mode: m.mode.as_str(),
    };
    // MLX takes the gathered rows back out of the gathered table in a
    // shuffled order, so its `take` is exercised, not only `dequantize`.
    let picks: Vec<i32> = (0..n as i32).rev().collect();
    let started = Instant::now();
    let got = mlx::dequantize_mode_rows(opts.device, &w, &picks, mlx::OutDtype::Native)?;
    let time_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut want = vec![0f32; n * m.cols];
    for (o, &p) in want.chunks_exact_mut(m.cols).zip(&picks) {
        let row = g.ids[p as usize] as usize;
        m.dequantize(0, row..row + 1, o)
            .map_err(|why| err(why.to_string()))?;
    }
    let ref_time_s = started.elapsed().as_secs_f64();
    let want64: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    let a = reference::agreement(&got, &want64);
    let mismatched = got
        .iter()
        .zip(&want)
        .position(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()));
    let mut findings = Vec::new();
    if let Some(i) = mismatched {
        let row = g.ids[picks[i / m.cols] as usize];
        findings.push(
            Finding::error(
                CHECK_EMBEDDING,
                format!(
                    "embedding row {row} looked up through MLX's dequantize ({} {}-bit, group {}) differs from the decoder's at column {}: {} vs {}",
                    m.mode.as_str(),
                    m.bits,
                    m.group,
                    i % m.cols,
                    got[i],
                    want[i]
                ),
            )
            .tensor(t.name.clone()),
        );
    }
    Ok(SpotResult {
        tensor: t.name.clone(),
        kind: Kind::Embedding,
        expert: None,
        mlx_op: "dequantize".into(),
        precision: t.precision.as_str().to_string(),
        device: device.to_string(),
        dtype: opts.dtype,
        batch: n,
        shape: [m.rows as u64, m.cols as u64],
        rows_checked: n,
        rel_err: a.rel_err,
        max_abs_err: a.max_abs_err,
        cosine: a.cosine,
        time_s,
        gflops: None,
        ref_time_s,
        ref_gflops: None,
        tolerance: 0.0,
        mlx_pass: mismatched.is_none(),
        reference: None,
        pass: mismatched.is_none(),
        findings,
    })
}

/// MLX's product of the gathered rows with `x`.
fn mlx_product(
    m: &Module<'_>,
    g: &Gathered,
    x: Floats<'_>,
    opts: &Options,
) -> Result<Vec<f32>, SpotError> {
    let (mut s16, mut b16, mut s32, mut b32) = Default::default();
    let scales = mode_scales(m, g, &mut s16, &mut b16, &mut s32, &mut b32);
    let w = ModeWeights {
        words: &g.words,
        scales,
        rows: g.ids.len(),
        cols: m.cols,
        bits: u32::from(m.bits),
        group_size: m.group,
        mode: m.mode.as_str(),
    };
    Ok(mlx::quantized_matmul_mode(opts.device, x, opts.batch, &w)?)
}

/// The matmul check of module weight `index` (expert `expert` of a stacked one).
pub(super) fn check(
    payload: &Payload<&Bundle>,
    index: usize,
    expert: Option<usize>,
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    let bundle = payload.bundle();
    let t = bundle.tensor(index)?;
    let err = |reason: String| SpotError::Tensor {
        tensor: t.name.clone(),
        reason,
    };
    let m = module_of(payload, index).map_err(|why| {
        err(if t.layout.is_none() {
            "its module's shapes, dtypes or config disagree, so its bytes cannot be read; `bundlescope audit` lists what is wrong".into()
        } else {
            why
        })
    })?;
    let e = expert.unwrap_or(0);
    if e >= m.experts {
        return Err(err(format!("expert {e} is outside 0..{}", m.experts)));
    }
    let k = rows_per_expert(
        opts,
        m.experts,
        m.rows,
        expert.is_none() || opts.expert.is_some(),
    );
    let (seed, name) = match expert {
        Some(e) => (
            opts.seed ^ (e as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            format!("{}#expert{e}", t.name),
        ),
        None => (opts.seed, t.name.clone()),
    };
    let ids = sample_rows(seed, &t.name, m.rows, k);
    let g = gather(&m, e, ids);
    let n = g.ids.len();
    let (x, x_bits) = random_x(opts.seed, &name, opts.batch, m.cols, opts.dtype);
    let xin = match opts.dtype {
        XDtype::F32 => Floats::F32(&x),
        XDtype::Bf16 => Floats::Bf16(&x_bits),
    };
    let started = Instant::now();
    let (y, op) = match m.global {
        // MLX has no quantized_matmul with a global scale on the CPU (its
        // gather_qmm takes one on the GPU only): dequantize the expert
        // with its global scale, then matmul, as for mlx-nvfp4 experts.
        Some(gb) => {
            let global = gb
                .get(e * 4..e * 4 + 4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| err(format!("its global_scale holds no value for expert {e}")))?;
            let w = mlx::Nvfp4Weights {
                words: &g.words,
                scales: &g.scales,
                rows: n,
                cols: m.cols,
            };
            let wd = mlx::dequantize_nvfp4(opts.device, &w, Some(global))?;
            let y = mlx::matmul_nt(opts.device, &x, opts.batch, &wd, n, m.cols)?;
            (y, "dequantize+matmul")
        }
        None => (mlx_product(&m, &g, xin, opts)?, "quantized_matmul"),
    };
    let time_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut w = vec![0f64; n * m.cols];
    for (o, &r) in w.chunks_exact_mut(m.cols).zip(&g.ids) {
        m.exact_row(e, r as usize, o)
            .map_err(|why| err(why.to_string()))?;
    }
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let y_ref = reference::dense_matmul_f64(&w, m.cols, &x64, opts.batch);
    let ref_time_s = started.elapsed().as_secs_f64();

    let flops = 2.0 * opts.batch as f64 * n as f64 * m.cols as f64;
    let a = reference::agreement(&y, &y_ref);
    let tolerance = matmul_tolerance(opts.dtype, device, m.cols);
    let mlx_pass = a.rel_err <= tolerance;
    let mut findings = Vec::new();
    if !mlx_pass {
        findings.push(
            Finding::error(
                CHECK_MLX,
                format!(
                    "{}MLX {op} ({} {}-bit, group {}) on {device} ({} x, batch {}) is {:.3e} (relative) from the decoder's f64 product; at most {tolerance:.1e} expected (max abs {:.3e}, cosine {:.6})",
                    expert.map_or(String::new(), |e| format!("expert {e}: ")),
                    m.mode.as_str(),
                    m.bits,
                    m.group,
                    opts.dtype.as_str(),
                    opts.batch,
                    a.rel_err,
                    a.max_abs_err,
                    a.cosine
                ),
            )
            .tensor(t.name.clone()),
        );
    }
    let mut r = SpotResult {
        tensor: t.name.clone(),
        kind: Kind::Matmul,
        expert,
        mlx_op: op.into(),
        precision: t.precision.as_str().to_string(),
        device: device.to_string(),
        dtype: opts.dtype,
        batch: opts.batch,
        shape: [m.rows as u64, m.cols as u64],
        rows_checked: n,
        rel_err: a.rel_err,
        max_abs_err: a.max_abs_err,
        cosine: a.cosine,
        time_s,
        gflops: Some(flops / time_s.max(1e-9) / 1e9),
        ref_time_s,
        ref_gflops: Some(flops / ref_time_s.max(1e-9) / 1e9),
        tolerance,
        mlx_pass,
        reference: None,
        pass: mlx_pass,
        findings,
    };
    if let Some(ckpt) = &opts.reference {
        against_source(ckpt, t, &m, e, &g.ids, &x64, opts.batch, &mut r)?;
    }
    r.pass = r.mlx_pass && r.reference.as_ref().is_none_or(|q| q.pass);
    Ok(r)
}

/// The rows checked against the reference checkpoint's tensor of the same
/// name (`[.., out, in]`, the module's logical shape): a warning when the
/// checkpoint lacks it, an error when its shape or dtype is another.
#[allow(clippy::too_many_arguments)]
fn against_source(
    ckpt: &reference::Checkpoint,
    t: &TensorInfo,
    m: &Module<'_>,
    expert: usize,
    ids: &[u64],
    x: &[f64],
    batch: usize,
    r: &mut SpotResult,
) -> Result<(), SpotError> {
    let thresholds = Thresholds::for_mlx(m.mode, m.bits);
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
    let want = t.shape.clone().unwrap_or_default();
    let flat: Vec<u64> = ids.iter().map(|&i| (expert * m.rows) as u64 + i).collect();
    let source = if src.shape != want.as_slice() {
        Err(format!(
            "the reference's {} in {} has shape {:?}; the checkpoint's is {want:?}",
            t.name, src.file, src.shape
        ))
    } else {
        src.rows_f64(&flat, m.cols)
            .map_err(|why| format!("the reference's {} in {}: {why}", t.name, src.file))
    };
    let w = match source {
        Ok(w) => w,
        Err(message) => {
            r.findings
                .push(Finding::error(CHECK_REFERENCE, message).tensor(t.name.clone()));
            r.reference = Some(Quality {
                weight_rel_err: f64::INFINITY,
                snr_db: f64::NEG_INFINITY,
                output_rel_err: f64::INFINITY,
                worst_group_rel_err: f64::INFINITY,
                worst_group: [0, 0],
                thresholds,
                pass: false,
            });
            return Ok(());
        }
    };
    // Decoded as mx.dequantize rounds it: what the model computes with.
    let mut wq = vec![0f32; ids.len() * m.cols];
    for (o, &row) in wq.chunks_exact_mut(m.cols).zip(ids) {
        let row = row as usize;
        m.dequantize(expert, row..row + 1, o)
            .map_err(|why| SpotError::Tensor {
                tensor: t.name.clone(),
                reason: why.to_string(),
            })?;
    }
    let rows = Rows {
        cols: m.cols,
        ids: &flat,
    };
    let q = reference::quality_in_groups(thresholds, m.group, &wq, &w, x, batch, rows);
    if !q.pass {
        r.findings.push(
            Finding::error(
                CHECK_REFERENCE,
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
            )
            .tensor(t.name.clone()),
        );
    }
    r.reference = Some(q);
    Ok(())
}
