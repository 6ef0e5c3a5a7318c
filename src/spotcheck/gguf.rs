//! Spot checks of GGUF block-quantised tensors on MLX. Q4_0, Q4_1 and
//! Q8_0 are MLX affine quantisation with groups of 32 (`d·q − 8d`,
//! `d·q + m`, `d·q − 128d`; the biases are exact in f32), so their rows go
//! through `quantized_matmul` as stored; every other decoded type goes
//! through MLX `matmul` as the decoder's dequantised rows. Both are held
//! against an f64 product of the decoder's rows.

use std::time::Instant;

use super::{
    CHECK_MLX, CHECK_REFERENCE, Kind, Options, SpotError, SpotResult, XDtype, random_x, reference,
    sample_rows,
};
use crate::decode::f16_to_f32;
use crate::decode::gguf::{MAX_BLOCK, block_codes, dequantize};
use crate::finding::Finding;
use crate::format::gguf::GgmlType;
use crate::format::{Bundle, Layout, Payload};
use crate::mlx::{self, AffineWeights, Floats};

use super::gguf_reference;

/// Does tensor `t` get a GGUF spot check?
pub(super) fn checkable(layout: Option<Layout>) -> bool {
    matches!(layout, Some(Layout::Gguf { ty, .. }) if ty.decoded() && !ty.is_dense())
}

/// A block's MLX affine bias from its `d` and `m` (as f32).
pub(super) type Bias = fn(f32, f32) -> f32;

/// Affine bits and the bias of a block for the types MLX quantises the same way.
pub(super) fn affine(ty: GgmlType) -> Option<(u32, Bias)> {
    match ty {
        GgmlType::Q4_0 => Some((4, |d, _| -8.0 * d)),
        GgmlType::Q4_1 => Some((4, |_, m| m)),
        GgmlType::Q8_0 => Some((8, |d, _| -128.0 * d)),
        _ => None,
    }
}

/// MLX's affine words, scales and biases of whole Q4_0/Q4_1/Q8_0 rows.
pub(super) fn to_affine(
    ty: GgmlType,
    bits: u32,
    bias: Bias,
    rows: &[u8],
) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let ts = ty.type_size() as usize;
    let blocks = rows.len() / ts;
    let mut words = Vec::with_capacity(blocks * 32 * bits as usize / 32);
    let (mut scales, mut biases) = (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
    let mut q = [0u8; MAX_BLOCK];
    for b in rows.chunks_exact(ts) {
        block_codes(ty, b, &mut q);
        let per = 32 / bits as usize;
        for w in q[..32].chunks_exact(per) {
            words.push(w.iter().enumerate().fold(0u32, |acc, (k, &c)| {
                acc | u32::from(c) << (bits as usize * k)
            }));
        }
        let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        let m = if ty == GgmlType::Q4_1 {
            f16_to_f32(u16::from_le_bytes([b[2], b[3]]))
        } else {
            0.0
        };
        scales.push(d);
        biases.push(bias(d, m));
    }
    (words, scales, biases)
}

/// The matmul check of GGUF tensor `index`.
pub(super) fn matmul_check(
    payload: &Payload<&Bundle>,
    index: usize,
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    let t = payload.bundle().tensor(index)?;
    let Some(Layout::Gguf { ty, rows, cols }) = t.layout.filter(|_| checkable(t.layout)) else {
        return Err(SpotError::Tensor {
            tensor: t.name.clone(),
            reason: "not a decoded GGUF block-quantised tensor".into(),
        });
    };
    let (rows, cols) = (rows as usize, cols as usize);
    let row_bytes = cols / ty.block_size() as usize * ty.type_size() as usize;
    let bytes = payload.tensor_bytes(index)?;
    let ids = sample_rows(opts.seed, &t.name, rows, opts.max_rows.unwrap_or(rows));
    let mut gathered = Vec::with_capacity(ids.len() * row_bytes);
    for &r in &ids {
        let r = r as usize;
        let row = bytes
            .get(r * row_bytes..(r + 1) * row_bytes)
            .ok_or_else(|| SpotError::Tensor {
                tensor: t.name.clone(),
                reason: format!("row {r} lies past its {} bytes", bytes.len()),
            })?;
        gathered.extend_from_slice(row);
    }
    let n = ids.len();
    let mut w = vec![0f32; n * cols];
    dequantize(ty, &gathered, &mut w).map_err(|e| SpotError::Tensor {
        tensor: t.name.clone(),
        reason: e.to_string(),
    })?;
    // GGUF checks feed float32 x: the CPU's bf16 quantized_matmul
    // accumulates in bf16 and would hide nothing this check looks for.
    let (x, _) = random_x(opts.seed, &t.name, opts.batch, cols, XDtype::F32);
    let started = Instant::now();
    let (y, op) = match affine(ty) {
        Some((bits, bias)) => {
            let (words, scales, biases) = to_affine(ty, bits, bias, &gathered);
            let aw = AffineWeights {
                words: &words,
                scales: Floats::F32(&scales),
                biases: Floats::F32(&biases),
                rows: n,
                cols,
                bits,
                group_size: 32,
            };
            (
                mlx::quantized_matmul(opts.device, Floats::F32(&x), opts.batch, &aw)?,
                "quantized_matmul",
            )
        }
        None => (
            mlx::matmul_nt(opts.device, &x, opts.batch, &w, n, cols)?,
            "matmul (dequantised rows)",
        ),
    };
    let time_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut y_ref = vec![0f64; opts.batch * n];
    for (b, out) in y_ref.chunks_exact_mut(n).enumerate() {
        let xb = &x[b * cols..(b + 1) * cols];
        for (r, o) in out.iter_mut().enumerate() {
            let wr = &w[r * cols..(r + 1) * cols];
            *o = wr
                .iter()
                .zip(xb)
                .map(|(&a, &c)| f64::from(a) * f64::from(c))
                .sum();
        }
    }
    let ref_time_s = started.elapsed().as_secs_f64();
    let a = reference::agreement(&y, &y_ref);
    let flops = 2.0 * opts.batch as f64 * n as f64 * cols as f64;
    let tolerance = XDtype::F32.tolerance();
    let mlx_pass = a.rel_err <= tolerance;
    let mut findings = Vec::new();
    if !mlx_pass {
        findings.push(
            Finding::error(
                CHECK_MLX,
                format!(
                    "MLX {op} on {device} (f32 x, batch {}) is {:.3e} (relative) from the decoder's f64 product of {} rows; at most {tolerance:.1e} expected (max abs {:.3e}, cosine {:.6})",
                    opts.batch,
                    a.rel_err,
                    ty.name(),
                    a.max_abs_err,
                    a.cosine
                ),
            )
            .tensor(t.name.clone()),
        );
    }
    let mut reference = None;
    if let Some(ckpt) = &opts.reference {
        let meta = payload.bundle().provenance.gguf.as_deref();
        let (source, map, mapped) = gguf_reference::source(meta, &t.name);
        let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        match gguf_reference::rows(ckpt, &source, &map, [rows as u64, cols as u64], &ids) {
            Ok(src) => {
                let q = gguf_reference::judge(ty, &w, &src, &x64, opts.batch, cols, &ids);
                if !q.pass {
                    findings.push(
                        Finding::error(
                            CHECK_REFERENCE,
                            format!(
                                "against {source} of the reference checkpoint: output error {:.4} (bound {:.2}), worst group {:.3} at row {} group {} (bound {:.2}), weight error {:.4}, SNR {:.1} dB",
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
                reference = Some(q);
            }
            Err(why) => findings.push(
                Finding::warning(
                    CHECK_REFERENCE,
                    format!(
                        "the reference checkpoint {}{why}; its quality was not measured{}",
                        ckpt.path().display(),
                        if mapped {
                            ""
                        } else {
                            " (this architecture's names are not mapped: compared by identical name)"
                        }
                    ),
                )
                .tensor(t.name.clone()),
            ),
        }
    }
    let pass = mlx_pass && reference.as_ref().is_none_or(|q| q.pass);
    Ok(SpotResult {
        tensor: t.name.clone(),
        kind: Kind::Matmul,
        expert: None,
        mlx_op: op.to_string(),
        precision: ty.name().to_string(),
        device: device.to_string(),
        dtype: XDtype::F32,
        batch: opts.batch,
        shape: [rows as u64, cols as u64],
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
        reference,
        pass,
        findings,
    })
}
