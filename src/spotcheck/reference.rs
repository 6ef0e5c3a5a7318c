//! The CPU side of a spot check, independent of MLX: the f64 reference
//! product from bundlescope's own decoder, the error measures, and the
//! quality of a bundle against the unquantised checkpoint it was made from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use super::SpotError;
use crate::decode::dequant::{GROUP, dequantize_rows, row_bytes, row_scale_bytes};
use crate::decode::{bf16_to_f32, f16_to_f32};
use crate::format::PackedKind;
use crate::format::payload::{Mapped, map_file};
use crate::format::safetensors::{self, StTensor};

/// Rows decoded per parallel task of the reference product.
const ROW_BLOCK: usize = 16;

/// `y = x · Wᵀ` in f64, `W` decoded from `rows` packed rows (`codes`,
/// `scales` as the payload stores them) by [`dequantize_rows`]; `x` is
/// `[batch, cols]`. Returns `[batch, rows]`, the layout MLX returns.
pub fn matmul(
    kind: PackedKind,
    cols: usize,
    codes: &[u8],
    scales: &[u8],
    x: &[f64],
    batch: usize,
) -> Result<Vec<f64>, SpotError> {
    let (rb, sb) = (row_bytes(kind, cols), row_scale_bytes(cols));
    let rows = codes.len() / rb;
    let xt = transpose(x, batch, cols);
    let mut out_rows = vec![0f64; rows * batch]; // [rows, batch]
    out_rows
        .par_chunks_mut(ROW_BLOCK * batch)
        .zip(codes.par_chunks(ROW_BLOCK * rb))
        .zip(scales.par_chunks(ROW_BLOCK * sb))
        .try_for_each(|((out, c), s)| {
            let n = c.len() / rb;
            let mut w = vec![0f32; n * cols];
            dequantize_rows(kind, cols, c, s, &mut w)?;
            for (o, wr) in out.chunks_exact_mut(batch).zip(w.chunks_exact(cols)) {
                dot_rows(&xt, batch, wr.iter().map(|&v| f64::from(v)), o);
            }
            Ok::<(), SpotError>(())
        })?;
    Ok(transpose(&out_rows, rows, batch))
}

/// `y = x · Wᵀ` in f64 for a decoded `W` (`[rows, cols]` f32); `x` is
/// `[batch, cols]`. Returns `[batch, rows]`.
pub fn dense_matmul(w: &[f32], cols: usize, x: &[f64], batch: usize) -> Vec<f64> {
    let rows = w.len() / cols.max(1);
    let xt = transpose(x, batch, cols);
    let mut out_rows = vec![0f64; rows * batch];
    out_rows
        .par_chunks_mut(batch)
        .zip(w.par_chunks(cols))
        .for_each(|(o, wr)| dot_rows(&xt, batch, wr.iter().map(|&v| f64::from(v)), o));
    transpose(&out_rows, rows, batch)
}

/// [`dense_matmul`] for a `W` already in f64.
pub fn dense_matmul_f64(w: &[f64], cols: usize, x: &[f64], batch: usize) -> Vec<f64> {
    let rows = w.len() / cols.max(1);
    let xt = transpose(x, batch, cols);
    let mut out_rows = vec![0f64; rows * batch];
    out_rows
        .par_chunks_mut(batch)
        .zip(w.par_chunks(cols))
        .for_each(|(o, wr)| dot_rows(&xt, batch, wr.iter().copied(), o));
    transpose(&out_rows, rows, batch)
}

/// `acc[b] = Σ_j xt[j][b] · w[j]`.
#[inline]
fn dot_rows(xt: &[f64], batch: usize, w: impl Iterator<Item = f64>, acc: &mut [f64]) {
    acc.fill(0.0);
    for (xs, wv) in xt.chunks_exact(batch).zip(w) {
        for (a, &xv) in acc.iter_mut().zip(xs) {
            *a += xv * wv;
        }
    }
}

/// `[r, c]` to `[c, r]`.
fn transpose(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut t = vec![0f64; a.len()];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = a[i * c + j];
        }
    }
    t
}

/// How far a result is from its reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    /// `‖got − want‖ / ‖want‖` (Frobenius).
    pub rel_err: f64,
    /// `max |got − want|`.
    pub max_abs_err: f64,
    /// `⟨got, want⟩ / (‖got‖ ‖want‖)`.
    pub cosine: f64,
}

/// Compares `got` (MLX's f32) with `want` (the f64 reference).
pub fn agreement(got: &[f32], want: &[f64]) -> Agreement {
    let (mut d2, mut w2, mut g2, mut gw, mut max) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        let g = f64::from(g);
        let d = g - w;
        d2 += d * d;
        w2 += w * w;
        g2 += g * g;
        gw += g * w;
        max = max.max(d.abs());
    }
    if got.len() != want.len() {
        max = f64::INFINITY;
    }
    Agreement {
        rel_err: ratio(d2.sqrt(), w2.sqrt()),
        max_abs_err: max,
        cosine: if g2 == 0.0 && w2 == 0.0 {
            1.0
        } else {
            gw / (g2.sqrt() * w2.sqrt())
        },
    }
}

/// `a / b`, where `0 / 0` is 0 and `a / 0` is infinite.
fn ratio(a: f64, b: f64) -> f64 {
    if a == 0.0 {
        0.0
    } else if b == 0.0 {
        f64::INFINITY
    } else {
        a / b
    }
}

/// What a correct round-to-nearest quantisation of the sample writer's
/// heavy-tailed weights stays within, per precision; above either bound the
/// bundle does not encode its source (codes moved, a scale changed).
///
/// Derived from `bundlescope sample` bundles (seeds 1..=6 at the default
/// size and seed 9 at `--size-mib 256`, 4096 rows per tensor, random x with
/// batch 8, `bundlescope spotcheck --reference --json`): the largest values
/// seen were, for `output_rel_err`, q3 0.36, q3_full8 0.31, q4 0.17; for
/// the worst 64-column group's weight error, q3 0.61, q3_full8 0.55, q4
/// 0.33. The tensor-level bounds leave about 1.25× headroom, the group
/// bounds more (the worst group grows with the rows checked), and all sit
/// below the ≈ 1.0 a doubled scale gives its group and the ≈ 1.4 of codes
/// permuted within a row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// Bound on `output_rel_err`.
    pub output_rel_err: f64,
    /// Bound on `worst_group_rel_err`.
    pub group_rel_err: f64,
}

impl Thresholds {
    /// Both measures within their bounds.
    pub fn pass(&self, output_rel_err: f64, worst_group_rel_err: f64) -> bool {
        output_rel_err <= self.output_rel_err && worst_group_rel_err <= self.group_rel_err
    }

    /// The bounds for one precision.
    pub fn for_kind(kind: PackedKind) -> Self {
        match kind {
            PackedKind::Q3 => Self {
                output_rel_err: 0.45,
                group_rel_err: 0.85,
            },
            PackedKind::Q3Full8 => Self {
                output_rel_err: 0.40,
                group_rel_err: 0.80,
            },
            PackedKind::Q4 => Self {
                output_rel_err: 0.22,
                group_rel_err: 0.55,
            },
        }
    }
}

impl Thresholds {
    /// The bounds for an MLX-LM module of `mode` and `bits`.
    ///
    /// MLX's round-to-nearest of roughly Gaussian weights leaves a weight
    /// (and output) error that halves with each bit. Measured with
    /// `spotcheck --reference` on the MLX-written test checkpoints
    /// (tests/mlx_lm_checkpoint.py, BF16 source, groups 32–128), output
    /// error / worst group: affine 2-bit 0.44 / 0.54, 3-bit 0.20 / 0.27,
    /// 4-bit 0.094 / 0.14, 5-bit 0.040 / 0.060, 6-bit 0.022 / 0.031,
    /// 8-bit 0.0076 / 0.014; mxfp4 0.12 / 0.20, nvfp4 0.10 / 0.16, mxfp8
    /// 0.028 / 0.045. The bounds leave 1.6–2× headroom on the
    /// output and more on the worst group (which grows with the rows
    /// checked), and stay below the ≈ 1 of a doubled scale.
    pub fn for_mlx(mode: crate::format::QuantMode, bits: u8) -> Self {
        use crate::format::QuantMode;
        let (output_rel_err, group_rel_err) = match (mode, bits) {
            (QuantMode::Affine, 2) => (0.70, 0.95),
            (QuantMode::Affine, 3) => (0.32, 0.60),
            (QuantMode::Affine, 4) => (0.16, 0.35),
            (QuantMode::Affine, 5) => (0.08, 0.20),
            (QuantMode::Affine, 6) => (0.04, 0.10),
            (QuantMode::Affine, _) => (0.015, 0.04),
            (QuantMode::Mxfp4 | QuantMode::Nvfp4, _) => (0.18, 0.40),
            (QuantMode::Mxfp8, _) => (0.05, 0.12),
        };
        Self {
            output_rel_err,
            group_rel_err,
        }
    }
}

/// A tensor's quality against the unquantised source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quality {
    /// `‖Wq − W‖ / ‖W‖` over the rows checked.
    pub weight_rel_err: f64,
    /// `10 · log10(‖W‖² / ‖Wq − W‖²)`.
    pub snr_db: f64,
    /// `‖x(Wq − W)ᵀ‖ / ‖xWᵀ‖` on the spot check's random `x`; for the
    /// embedding gather (no `x`: the output is the rows gathered), equal to
    /// `weight_rel_err` (see [`gather_quality`]).
    pub output_rel_err: f64,
    /// The largest `‖Wq − W‖ / ‖W‖` of one group of columns (64 for the
    /// audio8 formats, the module's group size for MLX-LM).
    pub worst_group_rel_err: f64,
    /// Where that group is: `[row, group]` (row in the tensor).
    pub worst_group: [u64; 2],
    /// The bounds this tensor was held to.
    pub thresholds: Thresholds,
    /// Both measures within their bounds.
    pub pass: bool,
}

/// Measures `wq` (decoded, `[n, cols]`) against `w` (the source rows,
/// `[n, cols]`), with the outputs on `x` (`[batch, cols]`). `row_ids` names
/// the tensor rows the `n` rows are.
pub fn quality(
    kind: PackedKind,
    wq: &[f32],
    w: &[f64],
    x: &[f64],
    batch: usize,
    cols: usize,
    row_ids: &[u64],
) -> Quality {
    let rows = Rows { cols, ids: row_ids };
    quality_in_groups(Thresholds::for_kind(kind), GROUP, wq, w, x, batch, rows)
}

/// Rows measured by [`quality_in_groups`]: their width and which tensor
/// rows they are.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    /// Columns.
    pub cols: usize,
    /// The tensor row of each.
    pub ids: &'a [u64],
}

/// [`quality`] with the bounds given and the worst group taken over groups
/// of `group` columns (an MLX-LM module's own group size).
pub fn quality_in_groups(
    thresholds: Thresholds,
    group: usize,
    wq: &[f32],
    w: &[f64],
    x: &[f64],
    batch: usize,
    rows: Rows<'_>,
) -> Quality {
    let (cols, row_ids, group) = (rows.cols, rows.ids, group.max(1));
    let xt = transpose(x, batch, cols);
    #[derive(Default, Clone, Copy)]
    struct Acc {
        d2: f64,
        w2: f64,
        yd2: f64,
        yw2: f64,
        worst: f64,
        worst_at: [u64; 2],
    }
    let acc = wq
        .par_chunks(cols)
        .zip(w.par_chunks(cols))
        .zip(row_ids.par_iter())
        .fold(Acc::default, |mut a, ((q, s), &row)| {
            // batch 0: no x (a gather); dot_rows needs at least one column of x.
            if batch > 0 {
                let mut yd = vec![0f64; batch];
                let mut yw = vec![0f64; batch];
                dot_rows(
                    &xt,
                    batch,
                    q.iter().zip(s).map(|(&q, &s)| f64::from(q) - s),
                    &mut yd,
                );
                dot_rows(&xt, batch, s.iter().copied(), &mut yw);
                a.yd2 += yd.iter().map(|v| v * v).sum::<f64>();
                a.yw2 += yw.iter().map(|v| v * v).sum::<f64>();
            }
            for (g, (qg, sg)) in q.chunks(group).zip(s.chunks(group)).enumerate() {
                let (mut d2, mut w2) = (0f64, 0f64);
                for (&q, &s) in qg.iter().zip(sg) {
                    let d = f64::from(q) - s;
                    d2 += d * d;
                    w2 += s * s;
                }
                let r = ratio(d2.sqrt(), w2.sqrt());
                if r > a.worst {
                    a.worst = r;
                    a.worst_at = [row, g as u64];
                }
                a.d2 += d2;
                a.w2 += w2;
            }
            a
        })
        .reduce(Acc::default, |a, b| Acc {
            d2: a.d2 + b.d2,
            w2: a.w2 + b.w2,
            yd2: a.yd2 + b.yd2,
            yw2: a.yw2 + b.yw2,
            worst: a.worst.max(b.worst),
            worst_at: if b.worst > a.worst {
                b.worst_at
            } else {
                a.worst_at
            },
        });
    let weight_rel_err = ratio(acc.d2.sqrt(), acc.w2.sqrt());
    let output_rel_err = ratio(acc.yd2.sqrt(), acc.yw2.sqrt());
    let snr_db = if acc.d2 == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (acc.w2 / acc.d2).log10()
    };
    Quality {
        weight_rel_err,
        snr_db,
        output_rel_err,
        worst_group_rel_err: acc.worst,
        worst_group: acc.worst_at,
        thresholds,
        pass: thresholds.pass(output_rel_err, acc.worst),
    }
}

/// The quality of gathered rows (the tied embedding's lookup), `wq` and `w`
/// as in [`quality`]. A gather has no `x`: its output is the rows
/// themselves, so `output_rel_err` is their weight error (the same number
/// as `weight_rel_err`), held to the same bound as a matmul's output.
pub fn gather_quality(
    kind: PackedKind,
    wq: &[f32],
    w: &[f64],
    cols: usize,
    row_ids: &[u64],
) -> Quality {
    let mut q = quality(kind, wq, w, &[], 0, cols, row_ids);
    q.output_rel_err = q.weight_rel_err;
    q.pass = q.thresholds.pass(q.output_rel_err, q.worst_group_rel_err);
    q
}

/// An unquantised reference checkpoint: every `*.safetensors` file of a
/// folder (or one such file), mapped read-only, headers parsed strictly.
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    files: Vec<(String, Mapped)>,
    index: HashMap<String, (usize, StTensor)>,
}

/// One tensor of a [`Checkpoint`].
#[derive(Debug, Clone, Copy)]
pub struct SourceTensor<'a> {
    /// Dtype as written (`BF16`, `F16`, `F32`).
    pub dtype: &'a str,
    /// Shape.
    pub shape: &'a [u64],
    /// The file it is in.
    pub file: &'a str,
    bytes: &'a [u8],
}

impl Checkpoint {
    /// Opens `path`: a folder of safetensors files, or one file.
    pub fn open(path: &Path) -> Result<Self, SpotError> {
        let io = |error: std::io::Error| SpotError::Io {
            path: path.to_path_buf(),
            error,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let mut paths: Vec<PathBuf> = if meta.is_dir() {
            std::fs::read_dir(path)
                .map_err(io)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors") && p.is_file())
                .collect()
        } else {
            vec![path.to_path_buf()]
        };
        paths.sort();
        if paths.is_empty() {
            return Err(SpotError::Reference(format!(
                "{} holds no .safetensors file",
                path.display()
            )));
        }
        let mut files = Vec::new();
        let mut index = HashMap::new();
        for p in paths {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            // Type-checked before it is opened (a FIFO named *.safetensors
            // must not block), then mapped read-only.
            let map = map_file(&name, &p)?;
            let header = safetensors::parse_header(&name, &map).map_err(|findings| {
                let msgs: Vec<String> =
                    findings.iter().take(3).map(|f| f.message.clone()).collect();
                SpotError::Reference(format!(
                    "{} is not a valid safetensors file: {}",
                    p.display(),
                    msgs.join("; ")
                ))
            })?;
            let at = files.len();
            for t in header.tensors {
                if let Some((other, _)) = index.get(&t.name) {
                    let other: &(String, Mapped) = &files[*other];
                    return Err(SpotError::Reference(format!(
                        "tensor {} is in both {} and {name}",
                        t.name, other.0
                    )));
                }
                index.insert(t.name.clone(), (at, t));
            }
            files.push((name, map));
        }
        Ok(Self {
            dir: path.to_path_buf(),
            files,
            index,
        })
    }

    /// The folder (or file) opened.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// No tensors?
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.index.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The tensor called `name`, if the checkpoint has it.
    pub fn tensor(&self, name: &str) -> Option<SourceTensor<'_>> {
        let (file, t) = self.index.get(name)?;
        let (fname, map) = &self.files[*file];
        let bytes = map.get(usize::try_from(t.begin).ok()?..usize::try_from(t.end).ok()?)?;
        Some(SourceTensor {
            dtype: &t.dtype,
            shape: &t.shape,
            file: fname,
            bytes,
        })
    }
}

/// Why rows of a reference tensor could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Not a float dtype the comparison reads.
    #[error("dtype {dtype} (expected BF16, F16 or F32)")]
    Dtype {
        /// The dtype as written.
        dtype: String,
    },
    /// A row lies beyond the tensor's bytes (or its offset overflows).
    #[error("row {row} is outside the tensor's {len} bytes")]
    RowOutside {
        /// The row asked for.
        row: u64,
        /// The tensor's length in bytes.
        len: usize,
    },
}

impl SourceTensor<'_> {
    /// Rows `rows` of a `[_, cols]` tensor as f64 (`[rows.len(), cols]`).
    pub fn rows_f64(&self, rows: &[u64], cols: usize) -> Result<Vec<f64>, SourceError> {
        let size = match self.dtype {
            "F32" => 4,
            "BF16" | "F16" => 2,
            d => {
                return Err(SourceError::Dtype {
                    dtype: d.to_string(),
                });
            }
        };
        let row_len = cols.saturating_mul(size);
        let mut out = Vec::with_capacity(rows.len().saturating_mul(cols));
        for &r in rows {
            let outside = SourceError::RowOutside {
                row: r,
                len: self.bytes.len(),
            };
            let start = usize::try_from(r)
                .ok()
                .and_then(|r| r.checked_mul(row_len))
                .ok_or_else(|| outside.clone())?;
            let b = start
                .checked_add(row_len)
                .and_then(|end| self.bytes.get(start..end))
                .ok_or(outside)?;
            match self.dtype {
                "F32" => out.extend(
                    b.chunks_exact(4)
                        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
                ),
                "BF16" => out.extend(
                    b.chunks_exact(2)
                        .map(|c| f64::from(bf16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
                ),
                _ => out.extend(
                    b.chunks_exact(2)
                        .map(|c| f64::from(f16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
                ),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_measures() {
        let a = agreement(&[1.0, 2.0], &[1.0, 2.0]);
        assert_eq!((a.rel_err, a.max_abs_err), (0.0, 0.0));
        assert!((a.cosine - 1.0).abs() < 1e-15);
        let a = agreement(&[1.0, 0.0], &[0.0, 1.0]);
        assert_eq!(a.cosine, 0.0);
        assert!((a.rel_err - 2f64.sqrt()).abs() < 1e-15);
        assert_eq!(agreement(&[0.0], &[0.0]).rel_err, 0.0);
        assert_eq!(agreement(&[1.0], &[0.0]).rel_err, f64::INFINITY);
    }

    #[test]
    fn quality_of_an_exact_copy_is_perfect_and_of_a_doubled_group_is_not() {
        let cols = 128;
        let w: Vec<f64> = (0..2 * cols)
            .map(|i| ((i * 37 % 11) as f64 - 5.0) / 8.0)
            .collect();
        let wq: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        let x: Vec<f64> = (0..3 * cols).map(|i| (i % 7) as f64 - 3.0).collect();
        let q = quality(PackedKind::Q4, &wq, &w, &x, 3, cols, &[0, 1]);
        assert_eq!((q.weight_rel_err, q.output_rel_err), (0.0, 0.0));
        assert_eq!(q.snr_db, f64::INFINITY);
        assert!(q.pass);
        let mut doubled = wq.clone();
        for v in &mut doubled[cols + 64..cols + 128] {
            *v *= 2.0;
        }
        let q = quality(PackedKind::Q4, &doubled, &w, &x, 3, cols, &[5, 9]);
        assert!((q.worst_group_rel_err - 1.0).abs() < 1e-12);
        assert_eq!(q.worst_group, [9, 1]);
        assert!(!q.pass);
    }
}
