//! The detail of one changed tensor: what differs and by how much, one row
//! per tensor, or one per changed expert of a stacked NVFP4 tensor.

use super::compare::{
    Matrix, ScaleType, fp4_codes, mlx_codes, packed_codes, scale_ratios, weight_error,
};
use super::{Side, Status, TensorDiff};
use crate::format::{DenseDtype, Layout, QuantMode, TensorInfo};

fn us(v: u64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// The rows of changed tensor `i` of `a` against `j` of `b` (same name).
pub(super) fn compare(a: &Side, b: &Side, i: usize, j: usize) -> Vec<TensorDiff> {
    let (ta, tb) = (&a.bundle.tensors[i], &b.bundle.tensors[j]);
    let mut row = TensorDiff {
        name: ta.name.clone(),
        status: Status::Changed,
        expert: None,
        differs: Vec::new(),
        a: a.describe(i),
        b: b.describe(j),
        codes: None,
        scales: None,
        weight_rel_err: None,
        worst_row: None,
    };
    if ta.precision != tb.precision {
        row.differs.push("precision");
    }
    if ta.shape != tb.shape {
        row.differs.push("shape");
    }
    if ta.source_dtype != tb.source_dtype {
        row.differs.push("dtype");
    }
    // An alias changed with its target: compare the bytes it stands for.
    let (Ok(ra), Ok(rb)) = (a.bundle.resolve_alias(i), b.bundle.resolve_alias(j)) else {
        return vec![finish(row)];
    };
    let (ta, tb) = (&a.bundle.tensors[ra], &b.bundle.tensors[rb]);
    let (Ok(xa), Ok(xb)) = (a.payload.tensor_bytes(ra), b.payload.tensor_bytes(rb)) else {
        return vec![finish(row)];
    };
    if let Some(r) = mlx_module(a, b, ra, rb, &row) {
        return vec![finish(r)];
    }
    match (ta.layout, tb.layout) {
        (
            Some(la @ Layout::Packed { kind: ka, cols, .. }),
            Some(Layout::Packed { kind: kb, .. }),
        ) if ka == kb && ta.shape == tb.shape => {
            let split = us(la.codes_bytes()).unwrap_or(usize::MAX);
            if let (Some((ca, sa)), Some((cb, sb))) =
                (xa.split_at_checked(split), xb.split_at_checked(split))
            {
                if ca != cb {
                    row.differs.push("codes");
                }
                if sa != sb {
                    row.differs.push("scales");
                }
                row.codes = us(cols).and_then(|c| packed_codes(ka, c, ca, cb));
                row.scales = scale_ratios(ScaleType::F16, sa, sb);
            }
        }
        (
            Some(la @ (Layout::Fp4 { .. } | Layout::E4m3 { .. } | Layout::GlobalScale { .. })),
            Some(lb),
        ) if la == lb => {
            let rows = experts(a, b, ra, rb, la, xa, xb, &row);
            if !rows.is_empty() {
                return rows;
            }
        }
        _ => {}
    }
    if ta.shape.is_some()
        && ta.shape == tb.shape
        && let (Some(ma), Some(mb)) = (matrix(ta, xa), matrix(tb, xb))
        && let Some(e) = weight_error(&ma, &mb)
    {
        row.weight_rel_err = e.rel_err;
        row.worst_row = Some(e.worst);
        if e.values_differ {
            row.differs.push("values");
        }
    }
    vec![finish(row)]
}

/// The quantized weight of the MLX-LM module tensor `i` belongs to (its
/// weight, scales, biases or global scale), by name.
fn mlx_weight(side: &Side, i: usize) -> Option<usize> {
    let t = side.bundle.tensors.get(i)?;
    let prefix = [".weight", ".scales", ".biases", ".global_scale"]
        .iter()
        .find_map(|s| t.name.strip_suffix(s))?;
    let w = *side.names.get(format!("{prefix}.weight").as_str())?;
    matches!(side.bundle.tensors[w].layout, Some(Layout::MlxCodes { .. })).then_some(w)
}

/// A changed part of an MLX-LM module (on both sides, same layout): which
/// parts differ and the module's weight error, decoded as `mx.dequantize`
/// decodes it (a change to its scales or biases shows there too).
fn mlx_module(a: &Side, b: &Side, i: usize, j: usize, row: &TensorDiff) -> Option<TensorDiff> {
    let (wa, wb) = (mlx_weight(a, i)?, mlx_weight(b, j)?);
    if a.bundle.tensors[wa].layout != b.bundle.tensors[wb].layout {
        return None;
    }
    let ma = crate::decode::mlxlm::module_of(&a.payload, wa).ok()?;
    let mb = crate::decode::mlxlm::module_of(&b.payload, wb).ok()?;
    let mut out = row.clone();
    if ma.weight != mb.weight {
        out.differs.push("codes");
    }
    if ma.scales != mb.scales || ma.biases != mb.biases || ma.global != mb.global {
        out.differs.push("scales");
    }
    // Code deltas in E2M1 levels for the 4-bit float modes (as NVFP4's),
    // in raw codes for affine and mxfp8; scale ratios in the scales' type.
    out.codes = match ma.mode {
        QuantMode::Mxfp4 | QuantMode::Nvfp4 => fp4_codes(ma.weight, mb.weight),
        _ => mlx_codes(ma.bits, ma.cols, ma.weight, mb.weight),
    };
    let ty = match ma.scale_dtype {
        Some(DenseDtype::F16) => Some(ScaleType::F16),
        Some(DenseDtype::Bf16) => Some(ScaleType::Bf16),
        Some(DenseDtype::F32) => Some(ScaleType::F32),
        // Affine scales are BF16, F16 or F32 (`DenseDtype::parse`).
        Some(DenseDtype::F64 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 | DenseDtype::Int(_)) => {
            None
        }
        None if ma.mode == QuantMode::Nvfp4 => Some(ScaleType::E4m3),
        None => Some(ScaleType::E8m0),
    };
    out.scales = ty.and_then(|ty| scale_ratios(ty, ma.scales, mb.scales));
    if let Some(e) = weight_error(&Matrix::Mlx { module: ma }, &Matrix::Mlx { module: mb }) {
        out.weight_rel_err = e.rel_err;
        out.worst_row = Some(e.worst);
        if e.values_differ && out.differs.is_empty() {
            out.differs.push("values");
        }
    }
    Some(out)
}

/// Bytes differ, so something does: when no finer reason was found (a
/// record whose layout is broken), say its values.
fn finish(mut row: TensorDiff) -> TensorDiff {
    if row.differs.is_empty() {
        row.differs.push("values");
    }
    row
}

/// A packed or dense tensor as a matrix of rows (a dense tensor's first
/// dimension is its rows; a 1-D one is one row).
fn matrix<'a>(t: &TensorInfo, bytes: &'a [u8]) -> Option<Matrix<'a>> {
    match t.layout? {
        l @ Layout::Packed { kind, rows, cols } => {
            let (codes, scales) = bytes.split_at_checked(us(l.codes_bytes())?)?;
            Some(Matrix::Packed {
                kind,
                rows: us(rows)?,
                cols: us(cols)?,
                codes,
                scales,
            })
        }
        Layout::Dense { dtype, count } => {
            let shape = t.shape.as_ref()?;
            let rows = if shape.len() >= 2 { *shape.first()? } else { 1 };
            if rows == 0 || count % rows != 0 {
                return None;
            }
            Some(Matrix::Dense {
                dtype,
                rows: us(rows)?,
                cols: us(count / rows)?,
                bytes,
            })
        }
        _ => None,
    }
}

/// Expert `e` of the expert set tensor `index` of `side` belongs to, as a
/// matrix: its words, its scales and its global scale.
fn expert_matrix<'a>(side: &'a Side, index: usize, e: usize) -> Option<Matrix<'a>> {
    let sib = side.bundle.expert_siblings(index).ok()?;
    let Some(Layout::Fp4 { rows, cols, .. }) = side.bundle.tensors.get(sib.weight)?.layout else {
        return None;
    };
    let (rows, cols) = (us(rows)?, us(cols)?);
    let per_words = rows.checked_mul(cols)? / 2;
    let per_scales = rows * cols / crate::decode::nvfp4::GROUP;
    let words = side.payload.tensor_bytes(sib.weight).ok()?;
    let scales = side.payload.tensor_bytes(sib.scales).ok()?;
    let globals = side.payload.tensor_bytes(sib.global_scale).ok()?;
    let g = globals.get(e * 4..e * 4 + 4)?;
    Some(Matrix::Fp4 {
        rows,
        cols,
        words: words.get(e * per_words..(e + 1) * per_words)?,
        scales: scales.get(e * per_scales..(e + 1) * per_scales)?,
        global: f32::from_le_bytes([g[0], g[1], g[2], g[3]]),
    })
}

/// One row per expert whose slice of a stacked NVFP4 tensor (weights,
/// E4M3 scales or global scales, `layout` on both sides) differs.
#[allow(clippy::too_many_arguments)]
fn experts(
    a: &Side,
    b: &Side,
    ia: usize,
    ib: usize,
    layout: Layout,
    xa: &[u8],
    xb: &[u8],
    template: &TensorDiff,
) -> Vec<TensorDiff> {
    let (n, per) = match layout {
        Layout::Fp4 {
            experts,
            rows,
            cols,
        } => (experts, rows.saturating_mul(cols) / 2),
        Layout::E4m3 {
            experts,
            rows,
            groups,
        } => (experts, rows.saturating_mul(groups)),
        Layout::GlobalScale { experts } => (experts, 4),
        _ => return Vec::new(),
    };
    let (Some(n), Some(per)) = (us(n), us(per)) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for e in 0..n {
        let range = e
            .checked_mul(per)
            .and_then(|s| Some(s..s.checked_add(per)?));
        let (Some(sa), Some(sb)) = (
            range.clone().and_then(|r| xa.get(r)),
            range.and_then(|r| xb.get(r)),
        ) else {
            break;
        };
        if sa == sb {
            continue;
        }
        let mut row = template.clone();
        row.expert = Some(e as u64);
        match layout {
            Layout::Fp4 { .. } => {
                row.differs.push("codes");
                row.codes = fp4_codes(sa, sb);
            }
            Layout::E4m3 { .. } => {
                row.differs.push("scales");
                row.scales = scale_ratios(ScaleType::E4m3, sa, sb);
            }
            _ => {
                row.differs.push("scales");
                row.scales = scale_ratios(ScaleType::F32, sa, sb);
            }
        }
        if let (Some(ma), Some(mb)) = (expert_matrix(a, ia, e), expert_matrix(b, ib, e))
            && let Some(err) = weight_error(&ma, &mb)
        {
            row.weight_rel_err = err.rel_err;
            row.worst_row = Some(err.worst);
            if err.values_differ {
                row.differs.push("values");
            }
        }
        rows.push(row);
    }
    rows
}
