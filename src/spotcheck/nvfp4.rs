//! Spot checks of stacked NVFP4 experts (mlx-nvfp4 artifacts), one expert
//! at a time: MLX computes `x · W_eᵀ` from the stored E2M1 words, E4M3
//! scales and the expert's global scale (`gather_qmm` with `global_scale`
//! where MLX can, on a GPU; `dequantize(mode="nvfp4", global_scale=…)`
//! then `matmul` on the CPU), and the f64 product with `W_e` decoded by
//! [`crate::decode::nvfp4`] must agree with it.
//!
//! `x` is float32 (or rounded to bfloat16 for `--dtype bf16`; MLX still
//! computes in float32, so the bfloat16 tolerance is generous here).

use std::time::Instant;

use super::{CHECK_MLX, Kind, Options, SpotError, SpotResult, random_x, reference, sample_rows};
use crate::decode::nvfp4::{GROUP, dequantize_expert};
use crate::finding::Finding;
use crate::format::{Bundle, Layout, Payload, TensorInfo};
use crate::mlx::{self, Nvfp4Path};

/// Rows each expert keeps when a tensor-wide row bound is shared by its
/// experts (so a 128-expert tensor is still checked on every expert).
pub const MIN_ROWS_PER_EXPERT: usize = 16;

/// The dimensions of a stacked weight, or why it cannot be checked.
pub(super) fn dims(t: &TensorInfo) -> Option<(usize, usize, usize)> {
    match t.layout {
        Some(Layout::Fp4 {
            experts,
            rows,
            cols,
        }) if experts > 0 && rows > 0 && cols > 0 && cols % GROUP as u64 == 0 => {
            Some((experts as usize, rows as usize, cols as usize))
        }
        _ => None,
    }
}

/// Rows of one expert a check covers: every row, or the tensor's bound
/// shared among the experts (at least [`MIN_ROWS_PER_EXPERT`]).
pub(super) fn rows_per_expert(
    opts: &Options,
    experts: usize,
    rows: usize,
    only_one: bool,
) -> usize {
    match opts.max_rows {
        None => rows,
        Some(m) if only_one => m.min(rows),
        Some(m) => (m / experts).max(MIN_ROWS_PER_EXPERT).min(rows),
    }
}

/// The matmul check of expert `expert` of the stacked weight `index`.
pub(super) fn check_expert(
    payload: &Payload<&Bundle>,
    index: usize,
    expert: usize,
    opts: &Options,
    device: &str,
) -> Result<SpotResult, SpotError> {
    let bundle = payload.bundle();
    let t = bundle.tensor(index)?;
    let err = |reason: String| SpotError::Tensor {
        tensor: t.name.clone(),
        reason,
    };
    let (experts, rows, cols) = dims(t).ok_or_else(|| {
        err("its shape or dtype is broken, so its bytes cannot be read; `bundlescope audit` lists what is wrong".into())
    })?;
    if expert >= experts {
        return Err(err(format!("expert {expert} is outside 0..{experts}")));
    }
    let set = bundle.expert_siblings(index)?;
    let groups = cols / GROUP;
    let (wrow, srow) = (cols / 2, groups);

    // The expert's global scale.
    let gbytes = payload.tensor_bytes(set.global_scale)?;
    let global = gbytes
        .get(expert * 4..expert * 4 + 4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| {
            err(format!(
                "its global_scale holds no value for expert {expert}"
            ))
        })?;

    let k = rows_per_expert(opts, experts, rows, opts.expert.is_some());
    let seed = opts.seed ^ (expert as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let ids = sample_rows(seed, &t.name, rows, k);

    let scales_all = payload.tensor_bytes(set.scales)?;
    if scales_all.len() != experts * rows * srow {
        return Err(err(format!(
            "its scales hold {} bytes; {experts}×{rows}×{groups} expected",
            scales_all.len()
        )));
    }
    let mut scales = Vec::with_capacity(ids.len() * srow);
    for &r in &ids {
        let at = (expert * rows + r as usize) * srow;
        scales.extend_from_slice(&scales_all[at..at + srow]);
    }
    let words_all = payload.tensor_bytes(index)?;
    if words_all.len() != experts * rows * wrow {
        return Err(err(format!(
            "it holds {} bytes; {experts}×{rows}×{} expected",
            words_all.len(),
            cols / 8 * 4
        )));
    }
    let mut wbytes = Vec::with_capacity(ids.len() * wrow);
    for &r in &ids {
        let at = (expert * rows + r as usize) * wrow;
        wbytes.extend_from_slice(&words_all[at..at + wrow]);
    }
    let words: Vec<u32> = wbytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();

    let n = ids.len();
    let name = format!("{}#expert{expert}", t.name);
    let (x, _) = random_x(opts.seed, &name, opts.batch, cols, opts.dtype);

    let started = Instant::now();
    let (y, path) = mlx::nvfp4_matmul(
        opts.device,
        &x,
        opts.batch,
        &words,
        &scales,
        &[global],
        n,
        cols,
        0,
    )?;
    let time_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut w = vec![0f32; n * cols];
    dequantize_expert(&wbytes, &scales, global, cols, &mut w).ok_or_else(|| {
        SpotError::ExpertDecode {
            tensor: t.name.clone(),
            expert,
        }
    })?;
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let y_ref = reference::dense_matmul(&w, cols, &x64, opts.batch);
    let ref_time_s = started.elapsed().as_secs_f64();

    let flops = 2.0 * opts.batch as f64 * n as f64 * cols as f64;
    let a = reference::agreement(&y, &y_ref);
    let tolerance = opts.dtype.tolerance();
    let mlx_pass = a.rel_err <= tolerance;
    let op = match path {
        Nvfp4Path::GatherQmm => "gather_qmm",
        Nvfp4Path::DequantizeMatmul => "dequantize+matmul",
    };
    let mut findings = Vec::new();
    if !mlx_pass {
        findings.push(
            Finding::error(
                CHECK_MLX,
                format!(
                    "expert {expert}: MLX {op} on {device} ({} x, batch {}, global scale {global}) is {:.3e} (relative) from the decoder's f64 product; at most {tolerance:.0e} expected (max abs {:.3e}, cosine {:.6})",
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
    if let Some(ckpt) = &opts.reference
        && ckpt.tensor(&t.name).is_some()
    {
        findings.push(
            Finding::warning(
                super::CHECK_REFERENCE,
                "quality against a reference checkpoint is measured for audio8 tensors only; this NVFP4 expert was checked against the decoder alone".to_string(),
            )
            .tensor(t.name.clone()),
        );
    }
    Ok(SpotResult {
        tensor: t.name.clone(),
        kind: Kind::Matmul,
        expert: Some(expert),
        mlx_op: op.to_string(),
        precision: t.precision.as_str().to_string(),
        device: device.to_string(),
        dtype: opts.dtype,
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
        reference: None,
        pass: mlx_pass,
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spotcheck::XDtype;

    #[test]
    fn a_shared_row_bound_still_reaches_every_expert() {
        let o = |m| Options {
            max_rows: m,
            dtype: XDtype::F32,
            ..Options::default()
        };
        assert_eq!(rows_per_expert(&o(None), 128, 5760, false), 5760);
        assert_eq!(rows_per_expert(&o(Some(4096)), 128, 5760, false), 32);
        assert_eq!(rows_per_expert(&o(Some(64)), 128, 5760, false), 16);
        assert_eq!(rows_per_expert(&o(Some(64)), 128, 8, false), 8);
        assert_eq!(rows_per_expert(&o(Some(100)), 128, 5760, true), 100);
    }
}
