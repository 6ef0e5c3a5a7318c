//! How two versions of one tensor differ: code changes, scale ratios and the
//! weight-space error, computed over borrowed payload bytes a row at a
//! time, so memory stays bounded by a row per thread whatever the manifest
//! claims.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::Serialize;

use crate::decode::dequant::{dense_to_f32, dequantize_rows, row_bytes, row_scale_bytes};
use crate::decode::nvfp4::{self, e4m3};
use crate::decode::{f16_to_f32, unpack_row};
use crate::format::{DenseDtype, PackedKind};

/// How the stored codes of a tensor changed (same shape and precision).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CodeDiff {
    /// Share of codes whose stored value differs, 0..=1.
    pub changed_share: f64,
    /// Number of codes per delta `B − A` (0 included, so the counts sum to
    /// the number of codes). NVFP4 deltas (and MLX-LM mxfp4/nvfp4 ones)
    /// are in signed E2M1 levels (the magnitude bits with the sign bit
    /// applied), packed ones (and MLX-LM affine and mxfp8 ones) in raw
    /// codes.
    pub delta_counts: BTreeMap<i32, u64>,
}

/// How the scales of a tensor changed: the distribution of `B / A` over the
/// scales whose A is finite and non-zero.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScaleDiff {
    /// Smallest ratio (null when no ratio is defined).
    pub min_ratio: Option<f64>,
    /// Median ratio (the lower middle one for an even count).
    pub median_ratio: Option<f64>,
    /// Largest ratio.
    pub max_ratio: Option<f64>,
    /// Share of scales stored bit-identically, 0..=1.
    pub equal_share: f64,
}

/// The row of a weight matrix with the largest relative error.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorstRow {
    /// Row index (within the expert, for NVFP4).
    pub row: u64,
    /// `‖row_B − row_A‖ / ‖row_A‖`; null when A's row is all zero and B's
    /// is not (the ratio is infinite).
    pub rel_err: Option<f64>,
}

/// The weight-space comparison of two same-shaped matrices.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightError {
    /// `‖W_B − W_A‖ / ‖W_A‖` (Frobenius, f64 accumulation); `None` when
    /// `W_A` is all zero and `W_B` is not.
    pub rel_err: Option<f64>,
    /// The worst row.
    pub worst: WorstRow,
    /// Whether any decoded value differs.
    pub values_differ: bool,
}

/// A matrix whose rows can be decoded to f32, borrowed from a payload.
#[derive(Debug, Clone, Copy)]
pub enum Matrix<'a> {
    /// Packed audio8 codes and their F16 scales.
    Packed {
        /// Code grid.
        kind: PackedKind,
        /// Rows.
        rows: usize,
        /// Columns (a multiple of 64).
        cols: usize,
        /// The codes region.
        codes: &'a [u8],
        /// The scales region.
        scales: &'a [u8],
    },
    /// Dense little-endian values, rows of `cols`.
    Dense {
        /// Element type.
        dtype: DenseDtype,
        /// Rows.
        rows: usize,
        /// Values per row.
        cols: usize,
        /// The values.
        bytes: &'a [u8],
    },
    /// An MLX-LM module's weight, its experts' rows stacked, decoded as
    /// `mx.dequantize` rounds them.
    Mlx {
        /// The module's weight, scales and biases.
        module: crate::decode::mlxlm::Module<'a>,
    },
    /// One NVFP4 expert: E2M1 words, E4M3 scales and its global scale.
    Fp4 {
        /// Rows.
        rows: usize,
        /// Columns (a multiple of 16).
        cols: usize,
        /// `[rows, cols/8]` U32 words as bytes.
        words: &'a [u8],
        /// `[rows, cols/16]` E4M3 bytes.
        scales: &'a [u8],
        /// The expert's global scale.
        global: f32,
    },
}

impl Matrix<'_> {
    fn dims(&self) -> (usize, usize) {
        match *self {
            Matrix::Packed { rows, cols, .. }
            | Matrix::Dense { rows, cols, .. }
            | Matrix::Fp4 { rows, cols, .. } => (rows, cols),
            Matrix::Mlx { module: m } => (m.experts * m.rows, m.cols),
        }
    }

    /// Decodes rows `r0..r0 + out.len() / cols` into `out`; `None` when the
    /// bytes do not cover them (a record shorter than its layout).
    fn decode(&self, r0: usize, out: &mut [f32]) -> Option<()> {
        let (_, cols) = self.dims();
        let n = out.len() / cols;
        match *self {
            Matrix::Packed {
                kind,
                codes,
                scales,
                ..
            } => {
                let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
                let c = codes.get(r0.checked_mul(rb)?..)?;
                let s = scales.get(r0.checked_mul(sb)?..)?;
                dequantize_rows(kind, cols, c, s, out).ok()
            }
            Matrix::Dense { dtype, bytes, .. } => {
                let size = dtype.size() as usize;
                let from = r0.checked_mul(cols)?.checked_mul(size)?;
                let to = from.checked_add(n * cols * size)?;
                dense_to_f32(dtype, bytes.get(from..to)?, out).ok()
            }
            Matrix::Fp4 {
                words,
                scales,
                global,
                ..
            } => {
                let w = words.get(r0 * cols / 2..(r0 + n) * cols / 2)?;
                let s = scales.get(r0 * cols / nvfp4::GROUP..(r0 + n) * cols / nvfp4::GROUP)?;
                nvfp4::dequantize_expert(w, s, global, cols, out)
            }
            Matrix::Mlx { module: m } => {
                for (k, o) in out.chunks_exact_mut(cols).enumerate() {
                    let r = r0.checked_add(k)?;
                    let (e, row) = (r / m.rows.max(1), r % m.rows.max(1));
                    m.dequantize(e, row..row + 1, o).ok()?;
                }
                Some(())
            }
        }
    }

    /// The stored bytes of row `r` (codes or values, then scales), when
    /// both sides store rows the same way, so equal bytes mean equal values.
    fn row_bytes(&self, r: usize) -> Option<(&[u8], &[u8])> {
        match *self {
            Matrix::Packed {
                kind,
                cols,
                codes,
                scales,
                ..
            } => {
                let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
                Some((
                    codes.get(r * rb..(r + 1) * rb)?,
                    scales.get(r * sb..(r + 1) * sb)?,
                ))
            }
            Matrix::Dense {
                dtype, cols, bytes, ..
            } => {
                let rb = cols * dtype.size() as usize;
                Some((bytes.get(r * rb..(r + 1) * rb)?, &[]))
            }
            // Codes and scales (and biases) live in separate tensors:
            // always decoded.
            Matrix::Mlx { .. } => None,
            Matrix::Fp4 {
                cols,
                words,
                scales,
                ..
            } => Some((
                words.get(r * cols / 2..(r + 1) * cols / 2)?,
                scales.get(r * cols / nvfp4::GROUP..(r + 1) * cols / nvfp4::GROUP)?,
            )),
        }
    }

    /// Whether the two matrices store their rows alike (same variant, grid
    /// or dtype, and global scale), so a row with equal bytes is equal.
    fn same_storage(&self, other: &Matrix) -> bool {
        match (self, other) {
            (Matrix::Packed { kind: x, .. }, Matrix::Packed { kind: y, .. }) => x == y,
            (Matrix::Dense { dtype: x, .. }, Matrix::Dense { dtype: y, .. }) => x == y,
            (Matrix::Fp4 { global: x, .. }, Matrix::Fp4 { global: y, .. }) => {
                x.to_bits() == y.to_bits()
            }
            _ => false,
        }
    }
}

/// `‖B − A‖ / ‖A‖` over the decoded values of two matrices of the same
/// dimensions, and the worst row; `None` when the dimensions differ or a
/// side's bytes do not cover its rows.
pub fn weight_error(a: &Matrix, b: &Matrix) -> Option<WeightError> {
    let (rows, cols) = a.dims();
    if b.dims() != (rows, cols) || cols == 0 {
        return None;
    }
    let same = a.same_storage(b);
    // Rows in parallel, each decoded on its own; a row stored with the same
    // bytes on both sides only needs A's norm, so a re-quantisation that
    // touched a few rows costs little more than one decode of A.
    let per_row: Option<Vec<(f64, f64)>> = (0..rows)
        .into_par_iter()
        .map_init(
            || (vec![0f32; cols], vec![0f32; cols]),
            |(va, vb), r| {
                a.decode(r, va)?;
                let unchanged =
                    same && a.row_bytes(r).is_some() && a.row_bytes(r) == b.row_bytes(r);
                if unchanged {
                    let s = va.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
                    return Some((0.0, s));
                }
                b.decode(r, vb)?;
                Some(
                    va.iter()
                        .zip(vb.iter())
                        .fold((0f64, 0f64), |(d, s), (&x, &y)| {
                            let (x, y) = (f64::from(x), f64::from(y));
                            (d + (y - x) * (y - x), s + x * x)
                        }),
                )
            },
        )
        .collect();
    let (mut num, mut den) = (0f64, 0f64);
    let mut worst: Option<(usize, f64)> = None;
    for (r, (d, s)) in per_row?.into_iter().enumerate() {
        num += d;
        den += s;
        let rel = ratio(d, s);
        if worst.is_none_or(|(_, w)| rel > w) {
            worst = Some((r, rel));
        }
    }
    let (row, rel) = worst.unwrap_or((0, 0.0));
    let finite = |v: f64| v.is_finite().then_some(v);
    Some(WeightError {
        rel_err: finite(ratio(num, den)),
        worst: WorstRow {
            row: row as u64,
            rel_err: finite(rel),
        },
        values_differ: num != 0.0,
    })
}

/// `sqrt(d / s)`, with 0/0 = 0 and x/0 = ∞ (a change to an all-zero row).
fn ratio(d: f64, s: f64) -> f64 {
    if d == 0.0 {
        0.0
    } else if s == 0.0 {
        f64::INFINITY
    } else {
        (d / s).sqrt()
    }
}

/// Offset of delta 0 in a delta histogram; deltas lie in −15..=15.
const DELTA0: i32 = 16;

/// `changed` counts stored codes that differ, which for NVFP4 includes a
/// +0 ↔ −0 flip (delta 0 in levels).
fn code_diff(hist: &[u64; 33], changed: u64, total: u64) -> CodeDiff {
    let delta_counts = (0i32..)
        .zip(hist)
        .filter(|&(_, &n)| n > 0)
        .map(|(i, &n)| (i - DELTA0, n))
        .collect();
    CodeDiff {
        changed_share: if total == 0 {
            0.0
        } else {
            changed as f64 / total as f64
        },
        delta_counts,
    }
}

/// The code changes of two MLX-LM weights of `cols` codes a row, `bits`
/// bits each (LSB-first across the row's 32-bit words): deltas `B − A`
/// in raw codes (−255..=255 for 8-bit codes); `None` when the regions'
/// lengths disagree or are not whole rows.
pub fn mlx_codes(bits: u8, cols: usize, a: &[u8], b: &[u8]) -> Option<CodeDiff> {
    let rb = cols.checked_mul(usize::from(bits))? / 8;
    if !(1..=8).contains(&bits) || rb == 0 || a.len() != b.len() || !a.len().is_multiple_of(rb) {
        return None;
    }
    // Deltas lie in −(2^bits − 1)..=2^bits − 1; `zero` is delta 0's cell.
    let zero = (1usize << bits) - 1;
    let (hist, changed) = a
        .par_chunks(rb)
        .zip(b.par_chunks(rb))
        .fold(
            || {
                (
                    vec![0u64; 2 * zero + 1],
                    0u64,
                    vec![0u8; cols],
                    vec![0u8; cols],
                )
            },
            |(mut h, mut changed, mut ca, mut cb), (ra, rbb)| {
                // Equal rows are all delta 0, without unpacking them.
                if ra == rbb {
                    h[zero] += cols as u64;
                } else if unpack_row(ra, u32::from(bits), &mut ca).is_ok()
                    && unpack_row(rbb, u32::from(bits), &mut cb).is_ok()
                {
                    for (&x, &y) in ca.iter().zip(&cb) {
                        h[zero + usize::from(y) - usize::from(x)] += 1;
                        changed += u64::from(x != y);
                    }
                }
                (h, changed, ca, cb)
            },
        )
        .map(|(h, c, _, _)| (h, c))
        .reduce(
            || (vec![0u64; 2 * zero + 1], 0),
            |(mut h, c), (g, d)| {
                h.iter_mut().zip(g).for_each(|(x, y)| *x += y);
                (h, c + d)
            },
        );
    let total = (a.len() / rb) as u64 * cols as u64;
    let zero = zero as i32;
    Some(CodeDiff {
        changed_share: if total == 0 {
            0.0
        } else {
            changed as f64 / total as f64
        },
        delta_counts: (0i32..)
            .zip(&hist)
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| (i - zero, n))
            .collect(),
    })
}

/// The code changes of two packed code regions of `rows × cols` codes of
/// the same grid; `None` when a region is shorter than that.
pub fn packed_codes(kind: PackedKind, cols: usize, a: &[u8], b: &[u8]) -> Option<CodeDiff> {
    let rb = row_bytes(kind, cols);
    if rb == 0 || a.len() != b.len() || !a.len().is_multiple_of(rb) {
        return None;
    }
    let bits = kind.bits();
    let hist = a
        .par_chunks(rb)
        .zip(b.par_chunks(rb))
        .fold(
            || ([0u64; 33], vec![0u8; cols], vec![0u8; cols]),
            |(mut h, mut ca, mut cb), (ra, rbb)| {
                // Equal rows are all delta 0, without unpacking them.
                if ra == rbb {
                    h[DELTA0 as usize] += cols as u64;
                // Both rows are exactly `rb` bytes, which holds `cols` codes.
                } else if unpack_row(ra, bits, &mut ca).is_ok()
                    && unpack_row(rbb, bits, &mut cb).is_ok()
                {
                    for (&x, &y) in ca.iter().zip(&cb) {
                        h[(i32::from(y) - i32::from(x) + DELTA0) as usize] += 1;
                    }
                }
                (h, ca, cb)
            },
        )
        .map(|(h, _, _)| h)
        .reduce(|| [0u64; 33], add_hist);
    let total = (a.len() / rb * cols) as u64;
    Some(code_diff(&hist, total - hist[DELTA0 as usize], total))
}

/// The code changes of two NVFP4 word regions (8 codes per U32 word, low
/// nibble first), in signed E2M1 levels.
pub fn fp4_codes(a: &[u8], b: &[u8]) -> Option<CodeDiff> {
    if a.len() != b.len() {
        return None;
    }
    let level = |c: u8| {
        let m = i32::from(c & 7);
        if c & 8 != 0 { -m } else { m }
    };
    let (hist, changed) = a
        .par_chunks(4096)
        .zip(b.par_chunks(4096))
        .map(|(ca, cb)| {
            let (mut h, mut changed) = ([0u64; 33], 0u64);
            for (&x, &y) in ca.iter().zip(cb) {
                for shift in [0, 4] {
                    let (x, y) = ((x >> shift) & 15, (y >> shift) & 15);
                    changed += u64::from(x != y);
                    h[(level(y) - level(x) + DELTA0) as usize] += 1;
                }
            }
            (h, changed)
        })
        .reduce(|| ([0u64; 33], 0), |(h, c), (g, d)| (add_hist(h, g), c + d));
    Some(code_diff(&hist, changed, a.len() as u64 * 2))
}

fn add_hist(mut x: [u64; 33], y: [u64; 33]) -> [u64; 33] {
    for (p, q) in x.iter_mut().zip(y) {
        *p += q;
    }
    x
}

/// Which element type a scale region holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleType {
    /// Little-endian IEEE half (audio8 packed scales, MLX-LM affine scales).
    F16,
    /// Little-endian BF16 (MLX-LM affine scales).
    Bf16,
    /// E4M3 bytes (NVFP4 group scales).
    E4m3,
    /// E8M0 bytes (MLX-LM mxfp4 and mxfp8 scales).
    E8m0,
    /// Little-endian f32 (NVFP4 global scales, MLX-LM affine scales).
    F32,
}

impl ScaleType {
    fn size(self) -> usize {
        match self {
            ScaleType::F16 | ScaleType::Bf16 => 2,
            ScaleType::E4m3 | ScaleType::E8m0 => 1,
            ScaleType::F32 => 4,
        }
    }

    fn value(self, b: &[u8]) -> f64 {
        match (self, b) {
            (ScaleType::F16, &[x, y]) => f64::from(f16_to_f32(u16::from_le_bytes([x, y]))),
            (ScaleType::Bf16, &[x, y]) => {
                f64::from(crate::decode::bf16_to_f32(u16::from_le_bytes([x, y])))
            }
            (ScaleType::E4m3, &[x]) => f64::from(e4m3(x)),
            (ScaleType::E8m0, &[x]) => f64::from(crate::decode::mlxlm::e8m0(x)),
            (ScaleType::F32, &[w, x, y, z]) => f64::from(f32::from_le_bytes([w, x, y, z])),
            _ => f64::NAN,
        }
    }
}

/// The distribution of `B / A` over two scale regions of the same type and
/// length; `None` when the lengths disagree.
pub fn scale_ratios(ty: ScaleType, a: &[u8], b: &[u8]) -> Option<ScaleDiff> {
    let size = ty.size();
    if a.len() != b.len() || !a.len().is_multiple_of(size) {
        return None;
    }
    let total = a.len() / size;
    // The ratios' memory is bounded by the scale bytes actually present in
    // the payload, never by a manifest's claim.
    let (mut ratios, equal): (Vec<f64>, usize) = a
        .par_chunks(size)
        .zip(b.par_chunks(size))
        .fold(
            || (Vec::new(), 0usize),
            |(mut v, mut eq), (x, y)| {
                eq += usize::from(x == y);
                let (x, y) = (ty.value(x), ty.value(y));
                let r = y / x;
                if x != 0.0 && r.is_finite() {
                    v.push(r);
                }
                (v, eq)
            },
        )
        .reduce(
            || (Vec::new(), 0),
            |(mut v, e), (w, f)| {
                v.extend(w);
                (v, e + f)
            },
        );
    let median = if ratios.is_empty() {
        None
    } else {
        let mid = (ratios.len() - 1) / 2;
        Some(*ratios.select_nth_unstable_by(mid, f64::total_cmp).1)
    };
    Some(ScaleDiff {
        min_ratio: ratios.iter().copied().min_by(f64::total_cmp),
        median_ratio: median,
        max_ratio: ratios.iter().copied().max_by(f64::total_cmp),
        equal_share: if total == 0 {
            1.0
        } else {
            equal as f64 / total as f64
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{f32_to_f16, pack_row};

    #[test]
    fn one_flipped_code_is_one_delta_and_a_known_error() {
        let (rows, cols) = (3, 64);
        let kind = PackedKind::Q4;
        let codes_a: Vec<u8> = (0..rows * cols).map(|i| (i % 15) as u8).collect();
        let mut codes_b = codes_a.clone();
        codes_b[70] = codes_a[70] + 2; // row 1, code 6 → 8
        let pack = |c: &[u8]| {
            let mut out = vec![0u8; rows * cols / 2];
            for (o, r) in out.chunks_mut(cols / 2).zip(c.chunks(cols)) {
                pack_row(r, 4, o);
            }
            out
        };
        let (pa, pb) = (pack(&codes_a), pack(&codes_b));
        let d = packed_codes(kind, cols, &pa, &pb).unwrap();
        assert_eq!(d.delta_counts, BTreeMap::from([(0, 191), (2, 1)]));
        assert!((d.changed_share - 1.0 / 192.0).abs() < 1e-15);

        let scales: Vec<u8> = (0..rows)
            .flat_map(|_| f32_to_f16(0.5).to_le_bytes())
            .collect();
        let m = |codes| Matrix::Packed {
            kind,
            rows,
            cols,
            codes,
            scales: &scales,
        };
        let e = weight_error(&m(&pa), &m(&pb)).unwrap();
        // The change is 0.5 * 2 = 1 in row 1.
        let norm: f64 = codes_a
            .iter()
            .map(|&c| (0.5 * (f64::from(c) - 7.0)).powi(2))
            .sum();
        assert!((e.rel_err.unwrap() - (1.0 / norm).sqrt()).abs() < 1e-12);
        assert_eq!(e.worst.row, 1);
        assert!(e.values_differ);
    }

    #[test]
    fn scale_ratios_skip_zero_denominators() {
        let a = [1.0f32, 2.0, 0.0, 4.0];
        let b = [1.0f32, 3.0, 1.0, 2.0];
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>();
        let s = scale_ratios(ScaleType::F32, &bytes(&a), &bytes(&b)).unwrap();
        assert_eq!(s.min_ratio, Some(0.5));
        assert_eq!(s.median_ratio, Some(1.0));
        assert_eq!(s.max_ratio, Some(1.5));
        assert_eq!(s.equal_share, 0.25);
    }
}
