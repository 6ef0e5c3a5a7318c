//! Spot checks of the audio8 packed tensors (q3, q3_full8, q4): the rows
//! checked are gathered from the payload, fed to MLX as the seed loader
//! feeds them, and compared with the decoder's f64 product (and, with a
//! reference checkpoint, with the unquantised source).

use std::time::Instant;

use super::{
    CHECK_EMBEDDING, CHECK_MLX, CHECK_REFERENCE, Checkpoint, Kind, Options, Quality, SpotError,
    SpotResult, Thresholds, XDtype, matmul_tolerance, random_x, reference, repack, sample_rows,
};
use crate::decode::dequant::{dequantize_rows, row_bytes, row_scale_bytes};
use crate::decode::{bf16_to_f32, f32_to_bf16};
use crate::finding::Finding;
use crate::format::{Bundle, Layout, PackedKind, Payload, TensorInfo};
use crate::mlx::{self, AffineWeights, Floats, OutDtype};
use repack::{Meta, MetaDtype};

/// The rows of a packed tensor gathered for one check.
pub(super) struct Gathered {
    /// The code grid.
    pub(super) kind: PackedKind,
    /// Rows of the whole tensor.
    pub(super) rows: usize,
    /// Columns.
    pub(super) cols: usize,
    /// Tensor row of each gathered row.
    pub(super) ids: Vec<u64>,
    /// Their packed codes, as stored.
    pub(super) codes: Vec<u8>,
    /// Their F16 scales, as stored.
    pub(super) scales: Vec<u8>,
}

/// The rows of packed tensor `index` its check covers (all, or
/// `opts.max_rows` drawn from the seed), copied out of the payload.
pub(super) fn gather(
    payload: &Payload<&Bundle>,
    index: usize,
    opts: &Options,
) -> Result<Gathered, SpotError> {
    let t = payload.bundle().tensor(index)?;
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
    let bytes = payload.tensor_bytes(index)?;
    let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
    // The layout was validated against the record's length, which the
    // payload layer checked against the file; a mismatch is still an
    // error here, never a panic.
    let (codes_all, scales_all) = bytes
        .split_at_checked(rows * rb)
        .filter(|(_, s)| s.len() >= rows * sb)
        .ok_or_else(|| SpotError::Tensor {
            tensor: t.name.clone(),
            reason: format!(
                "its {} bytes do not hold {rows} rows of {rb} code bytes and {sb} scale bytes",
                bytes.len()
            ),
        })?;
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
            Kind::Loader => "load_gguf",
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

/// MLX's `quantized_matmul` of the gathered rows against the f64 product.
pub(super) fn matmul_check(
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

/// The matmul row's quality: the rows checked against their source, with
/// the output error on the check's `x`.
fn reference_quality(
    ckpt: &Checkpoint,
    t: &TensorInfo,
    g: &Gathered,
    x: &[f64],
    batch: usize,
    r: &mut SpotResult,
) -> Result<(), SpotError> {
    let Some(w) = source_rows(ckpt, t, g, &g.ids, r) else {
        return Ok(());
    };
    let mut wq = vec![0f32; g.ids.len() * g.cols];
    dequantize_rows(g.kind, g.cols, &g.codes, &g.scales, &mut wq)?;
    let q = reference::quality(g.kind, &wq, &w, x, batch, g.cols, &g.ids);
    judge_quality(t, q, "output error", r);
    Ok(())
}

/// Rows `ids` of `t`'s source in the reference checkpoint, as f64. `None`
/// after recording why when they cannot be had: a warning when the
/// checkpoint lacks the tensor (nothing measured, `reference` stays null),
/// an error and a failed quality when its shape or rows are wrong.
fn source_rows(
    ckpt: &Checkpoint,
    t: &TensorInfo,
    g: &Gathered,
    ids: &[u64],
    r: &mut SpotResult,
) -> Option<Vec<f64>> {
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
        return None;
    };
    let want = [g.rows as u64, g.cols as u64];
    let message = if src.shape != want {
        format!(
            "the reference's {} in {} has shape {:?}; the bundle's is {want:?}",
            t.name, src.file, src.shape
        )
    } else {
        match src.rows_f64(ids, g.cols) {
            Ok(w) => return Some(w),
            Err(why) => format!("the reference's {} in {}: {why}", t.name, src.file),
        }
    };
    r.findings
        .push(Finding::error(CHECK_REFERENCE, message).tensor(t.name.clone()));
    r.reference = Some(failed_quality(g.kind));
    None
}

/// Records `q` on `r`, with an error finding when it is out of bounds;
/// `output` names what `output_rel_err` measured.
fn judge_quality(t: &TensorInfo, q: Quality, output: &str, r: &mut SpotResult) {
    if !q.pass {
        r.findings.push(
            Finding::error(
                CHECK_REFERENCE,
                format!(
                    "against the reference checkpoint: {output} {:.4} (bound {:.2}), worst group {:.3} at row {} group {} (bound {:.2}), weight error {:.4}, SNR {:.1} dB",
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

/// The tied embedding's rows gathered through MLX against the decoder's.
pub(super) fn embedding_check(
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
    let mut decoded = vec![0f32; ids.len() * g.cols];
    for (o, &p) in decoded.chunks_exact_mut(g.cols).zip(&picks) {
        let p = p as usize;
        dequantize_rows(
            g.kind,
            g.cols,
            &g.codes[p * rb..(p + 1) * rb],
            &g.scales[p * sb..(p + 1) * sb],
            o,
        )?;
    }
    let mut want = decoded.clone();
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
    // Against the source, the rows gathered as the decoder decodes them
    // (before any bf16 rounding of the output), like the matmul row's.
    if let Some(ckpt) = &opts.reference {
        let rows: Vec<u64> = picks.iter().map(|&p| g.ids[p as usize]).collect();
        if let Some(w) = source_rows(ckpt, t, g, &rows, &mut r) {
            let q = reference::gather_quality(g.kind, &decoded, &w, g.cols, &rows);
            judge_quality(t, q, "gathered rows' error", &mut r);
        }
    }
    r.pass = r.mlx_pass && r.reference.as_ref().is_none_or(|q| q.pass);
    Ok(r)
}
