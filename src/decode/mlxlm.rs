//! MLX quantized modules (MLX-LM checkpoints): codes, scales and values,
//! rounded as MLX's `mx.dequantize` rounds them.
//!
//! Codes are packed LSB-first over each row's little-endian U32 words (one
//! bit stream per row; 3-, 5- and 6-bit codes straddle words). Values:
//! - affine: `round_T(round_T(scale · q) + bias)`, `T` the scales' dtype
//!   (MLX computes each operation in f32 and rounds it to `T`);
//! - mxfp4: `round_bf16(e2m1(q) · 2^(s − 127))`, E8M0 scale byte `s`;
//! - nvfp4: `round_bf16(e2m1(q) · e4m3(s))`; with a per-expert global
//!   scale `g`, `e2m1(q) · (e4m3(s) · (g / 2688))` in float32, each product
//!   rounded to f32 and the result left in float32 (as MLX returns it);
//! - mxfp8: `round_bf16(e4m3(q) · 2^(s − 127))`.
//!
//! (MLX's float modes return bfloat16 unless told otherwise; checked
//! against MLX 0.32.4 for every mode and affine width.)

use super::nvfp4::{E2M1, e4m3, e4m3_table};
use super::stats::{Bin, ScaleSummary};
use super::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::format::{DenseDtype, QuantMode, ScaleKind};

/// The value of an E8M0 byte: `2^(b − 127)`, NaN for 0xFF.
pub fn e8m0(b: u8) -> f32 {
    match b {
        0xff => f32::NAN,
        // 2^-127 is an f32 subnormal.
        0 => f32::from_bits(1 << 22),
        b => f32::from_bits(u32::from(b) << 23),
    }
}

/// The value of a scale byte of `kind`.
pub fn scale_byte(kind: ScaleKind, b: u8) -> f32 {
    match kind {
        ScaleKind::E8m0 => e8m0(b),
        ScaleKind::E4m3 => e4m3(b),
    }
}

/// The dtype MLX rounds a dequantized value to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// float32 (no rounding).
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl Round {
    /// Rounds `x` to this dtype (to nearest even) and back to f32.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            Round::F32 => x,
            Round::F16 => f16_to_f32(f32_to_f16(x)),
            Round::Bf16 => bf16_to_f32(f32_to_bf16(x)),
        }
    }

    /// The dtype of affine scales. Those are BF16, F16 or F32
    /// ([`DenseDtype::parse`]); the wider and 8-bit dtypes never reach a
    /// module and would leave values unrounded.
    pub fn of(dtype: DenseDtype) -> Self {
        match dtype {
            DenseDtype::F32
            | DenseDtype::F64
            | DenseDtype::F8E4m3
            | DenseDtype::F8E5m2
            | DenseDtype::Int(_) => Round::F32,
            DenseDtype::F16 => Round::F16,
            DenseDtype::Bf16 => Round::Bf16,
        }
    }
}

/// The value each code stands for before scaling.
pub fn code_table(mode: QuantMode, bits: u8) -> Vec<f32> {
    match mode {
        QuantMode::Affine => (0..1u32 << bits).map(|q| q as f32).collect(),
        QuantMode::Mxfp4 | QuantMode::Nvfp4 => E2M1.to_vec(),
        QuantMode::Mxfp8 => e4m3_table().to_vec(),
    }
}

/// Labels of the codes of a float mode, for histograms (`None` for affine,
/// whose levels are the codes themselves).
pub fn code_label(mode: QuantMode, code: usize) -> Option<String> {
    match mode {
        QuantMode::Affine => None,
        QuantMode::Mxfp4 | QuantMode::Nvfp4 => super::nvfp4::E2M1_LABELS
            .get(code)
            .map(|s| (*s).to_string()),
        QuantMode::Mxfp8 => Some(format!("{}", e4m3(code as u8))),
    }
}

/// Share of codes at the float grid's largest magnitude (±6 for E2M1, ±448
/// for E4M3): the float modes' clipping.
pub fn extreme_share(mode: QuantMode, counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let at = |c: usize| counts.get(c).copied().unwrap_or(0);
    let clipped = match mode {
        QuantMode::Affine => 0,
        QuantMode::Mxfp4 | QuantMode::Nvfp4 => at(7) + at(15),
        QuantMode::Mxfp8 => at(0x7e) + at(0xfe),
    };
    clipped as f64 / total as f64
}

/// Summarises a 256-bin histogram of U8 scale bytes: the positive finite
/// scales' distribution (half-octave bins); NaN, zero and negative bytes
/// count as invalid.
pub fn summarise_byte_scales(kind: ScaleKind, hist: &[u64; 256]) -> ScaleSummary {
    let mut values: Vec<(f32, u64)> = Vec::new();
    let mut invalid = 0u64;
    for (b, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let v = scale_byte(kind, b as u8);
        if v.is_finite() && v > 0.0 {
            values.push((v, n));
        } else {
            invalid += n;
        }
    }
    let dtype = match kind {
        ScaleKind::E8m0 => "E8M0",
        ScaleKind::E4m3 => "E4M3",
    };
    summarise_weighted(dtype, values, invalid)
}

/// The scale summary of `values` (each a positive finite scale and how
/// often it occurs, in any order) and `invalid` other scales: quantiles,
/// extremes and half-octave bins, as for audio8's F16 scales.
pub fn summarise_weighted(dtype: &str, mut values: Vec<(f32, u64)>, invalid: u64) -> ScaleSummary {
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let valid: u64 = values.iter().map(|v| v.1).sum();
    let quantile = |q: f64| {
        if valid == 0 {
            return f64::NAN;
        }
        let target = ((valid - 1) as f64 * q).round() as u64;
        let mut seen = 0;
        for &(v, n) in &values {
            seen += n;
            if seen > target {
                return f64::from(v);
            }
        }
        f64::NAN
    };
    let (min, max) = match (values.first(), values.last()) {
        (Some(a), Some(b)) => (f64::from(a.0), f64::from(b.0)),
        _ => (f64::NAN, f64::NAN),
    };
    let mut bins = Vec::new();
    if valid > 0 {
        let lo_k = (min.log2() * 2.0).floor() as i32;
        let hi_k = (max.log2() * 2.0).floor() as i32;
        for k in lo_k..=hi_k {
            bins.push(Bin {
                lo: 2f64.powf(f64::from(k) / 2.0),
                hi: 2f64.powf(f64::from(k + 1) / 2.0),
                count: 0,
            });
        }
        for &(v, n) in &values {
            let k = (f64::from(v).log2() * 2.0).floor() as i32 - lo_k;
            if let Some(b) = usize::try_from(k).ok().and_then(|k| bins.get_mut(k)) {
                b.count += n;
            }
        }
    }
    ScaleSummary {
        dtype: dtype.to_string(),
        count: valid + invalid,
        invalid,
        min,
        max,
        median: quantile(0.5),
        p01: quantile(0.01),
        p99: quantile(0.99),
        bins,
    }
}

/// One quantized module's bytes, borrowed from the payload.
#[derive(Debug, Clone, Copy)]
pub struct Module<'a> {
    /// Mode.
    pub mode: QuantMode,
    /// Bits per code.
    pub bits: u8,
    /// Inputs per scale.
    pub group: usize,
    /// Stacked experts (1 when not stacked).
    pub experts: usize,
    /// Rows per expert.
    pub rows: usize,
    /// Columns (inputs).
    pub cols: usize,
    /// The U32 weight's bytes.
    pub weight: &'a [u8],
    /// The scales' bytes.
    pub scales: &'a [u8],
    /// The affine biases' bytes.
    pub biases: Option<&'a [u8]>,
    /// The affine scales' dtype (`None` for the float modes).
    pub scale_dtype: Option<DenseDtype>,
    /// nvfp4 with `global_scale: true`: one F32 global scale per expert
    /// (little-endian bytes).
    pub global: Option<&'a [u8]>,
}

/// Why a module's bytes cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleError {
    /// A byte count disagrees with the shape.
    #[error("{what} has {have} bytes, the shape needs {need}")]
    Length {
        /// Which part.
        what: &'static str,
        /// Bytes present.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// An expert or row outside the tensor.
    #[error("row {row} of expert {expert} is outside the tensor")]
    Range {
        /// Expert.
        expert: usize,
        /// Row.
        row: usize,
    },
    /// The layout cannot be decoded (group 0, columns not a multiple of the group).
    #[error("columns {cols} are not a multiple of group {group}")]
    Shape {
        /// Columns.
        cols: usize,
        /// Group.
        group: usize,
    },
}

impl Module<'_> {
    /// Bytes of one packed row.
    pub fn row_bytes(&self) -> usize {
        self.cols * usize::from(self.bits) / 8
    }

    /// Scales (and biases) per row.
    pub fn groups(&self) -> usize {
        self.cols / self.group.max(1)
    }

    /// Bytes of one scale (or bias): the affine dtype's size, 1 for the
    /// float modes' U8 scales.
    pub fn scale_size(&self) -> usize {
        self.scale_dtype.map_or(1, |d| d.size() as usize)
    }

    /// Checks every byte count against the shape.
    pub fn validate(&self) -> Result<(), ModuleError> {
        if self.group == 0 || !self.cols.is_multiple_of(self.group) {
            return Err(ModuleError::Shape {
                cols: self.cols,
                group: self.group,
            });
        }
        let n = self.experts * self.rows;
        let need = n * self.row_bytes();
        if self.weight.len() != need {
            return Err(ModuleError::Length {
                what: "weight",
                have: self.weight.len(),
                need,
            });
        }
        let need = n * self.groups() * self.scale_size();
        if self.scales.len() != need {
            return Err(ModuleError::Length {
                what: "scales",
                have: self.scales.len(),
                need,
            });
        }
        if let Some(g) = self.global
            && g.len() != self.experts * 4
        {
            return Err(ModuleError::Length {
                what: "global_scale",
                have: g.len(),
                need: self.experts * 4,
            });
        }
        match (self.mode, self.biases) {
            (QuantMode::Affine, Some(b)) if b.len() != need => Err(ModuleError::Length {
                what: "biases",
                have: b.len(),
                need,
            }),
            (QuantMode::Affine, None) => Err(ModuleError::Length {
                what: "biases",
                have: 0,
                need,
            }),
            _ => Ok(()),
        }
    }

    /// The rounding of this module's values.
    pub fn round(&self) -> Round {
        if self.global.is_some() {
            // MLX dequantizes with a float32 global scale to float32.
            return Round::F32;
        }
        self.scale_dtype.map_or(Round::Bf16, Round::of)
    }

    /// Expert `expert`'s global scale divided as MLX divides it
    /// (`g / (448 · 6)` in f32), or `None` without a global scale.
    pub fn global_factor(&self, expert: usize) -> Option<f32> {
        let b = self.global?.get(expert * 4..expert * 4 + 4)?;
        let g = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        Some(g / super::nvfp4::GLOBAL_DIVISOR)
    }

    /// Codes of one row.
    pub fn codes(&self, expert: usize, row: usize, out: &mut [u8]) -> Result<(), ModuleError> {
        self.validate()?;
        if expert >= self.experts || row >= self.rows || out.len() != self.cols {
            return Err(ModuleError::Range { expert, row });
        }
        let rb = self.row_bytes();
        let at = (expert * self.rows + row) * rb;
        super::unpack_row(&self.weight[at..at + rb], u32::from(self.bits), out).map_err(|e| {
            ModuleError::Length {
                what: "row",
                have: e.have,
                need: e.need,
            }
        })
    }

    fn scale_at(&self, index: usize) -> f32 {
        match self.scale_dtype {
            None => {
                let kind = if self.mode == QuantMode::Nvfp4 {
                    ScaleKind::E4m3
                } else {
                    ScaleKind::E8m0
                };
                scale_byte(kind, self.scales[index])
            }
            Some(d) => param(d, self.scales, index),
        }
    }

    /// Row `row` of `expert` in f64 without MLX's rounding of the result:
    /// `scale · q + bias` (affine) or `value(q) · scale` from the stored
    /// scale, bias and code, the product a `quantized_matmul` forms before
    /// it accumulates. The spot checks' reference.
    pub fn exact_row(&self, expert: usize, row: usize, out: &mut [f64]) -> Result<(), ModuleError> {
        let mut codes = vec![0u8; self.cols];
        self.codes(expert, row, &mut codes)?;
        if out.len() != self.cols {
            return Err(ModuleError::Range { expert, row });
        }
        let table = code_table(self.mode, self.bits);
        let base = (expert * self.rows + row) * self.groups();
        for (g, (oc, cc)) in out
            .chunks_exact_mut(self.group)
            .zip(codes.chunks_exact(self.group))
            .enumerate()
        {
            let mut scale = f64::from(self.scale_at(base + g));
            if let Some(f) = self.global_factor(expert) {
                scale *= f64::from(f);
            }
            let bias = match (self.biases, self.scale_dtype) {
                (Some(b), Some(d)) => f64::from(param(d, b, base + g)),
                _ => 0.0,
            };
            for (v, &c) in oc.iter_mut().zip(cc) {
                *v = scale * f64::from(table[usize::from(c)]) + bias;
            }
        }
        Ok(())
    }

    /// Dequantizes rows `rows` of `expert` into `out` (`rows.len() × cols`),
    /// exactly as `mx.dequantize` rounds them.
    pub fn dequantize(
        &self,
        expert: usize,
        rows: std::ops::Range<usize>,
        out: &mut [f32],
    ) -> Result<(), ModuleError> {
        self.validate()?;
        if expert >= self.experts || rows.end > self.rows || out.len() != rows.len() * self.cols {
            return Err(ModuleError::Range {
                expert,
                row: rows.end,
            });
        }
        let table = code_table(self.mode, self.bits);
        let round = self.round();
        let groups = self.groups();
        let mut codes = vec![0u8; self.cols];
        for (k, row) in rows.enumerate() {
            self.codes(expert, row, &mut codes)?;
            let o = &mut out[k * self.cols..(k + 1) * self.cols];
            let base = (expert * self.rows + row) * groups;
            let global = self.global_factor(expert);
            for (g, (oc, cc)) in o
                .chunks_exact_mut(self.group)
                .zip(codes.chunks_exact(self.group))
                .enumerate()
            {
                // nvfp4 with a global scale: value · (scale · (g / 2688)),
                // each product in f32, as MLX computes it.
                let scale = match global {
                    Some(f) => self.scale_at(base + g) * f,
                    None => self.scale_at(base + g),
                };
                match (self.biases, self.scale_dtype) {
                    (Some(b), Some(d)) => {
                        let bias = param(d, b, base + g);
                        for (v, &c) in oc.iter_mut().zip(cc) {
                            let q = table[usize::from(c)];
                            *v = round.round(round.round(scale * q) + bias);
                        }
                    }
                    _ => {
                        for (v, &c) in oc.iter_mut().zip(cc) {
                            *v = round.round(table[usize::from(c)] * scale);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The module of the MLX weight `index`: its scales (and biases) found by
/// name beside it, whichever shards hold them, their bytes read through
/// `payload` and checked against the shape.
pub fn module_of<'p>(
    payload: &'p crate::format::Payload<&crate::format::Bundle>,
    index: usize,
) -> Result<Module<'p>, String> {
    use crate::format::Layout;
    let bundle = payload.bundle();
    let t = bundle.tensor(index).map_err(|e| e.to_string())?;
    let Some(Layout::MlxCodes {
        mode,
        bits,
        group,
        experts,
        rows,
        cols,
    }) = t.layout
    else {
        return Err(format!("{} is not an MLX quantized weight", t.name));
    };
    let prefix = t.name.strip_suffix(".weight").unwrap_or(&t.name);
    let part = |p: &str| -> Result<Option<(usize, &'p [u8])>, String> {
        let Some(i) = bundle.find(&format!("{prefix}.{p}")) else {
            return Ok(None);
        };
        let bytes = payload.tensor_bytes(i).map_err(|e| e.to_string())?;
        Ok(Some((i, bytes)))
    };
    let global = match part("global_scale")? {
        None => None,
        Some((gi, bytes)) => match bundle.tensor(gi).map_err(|e| e.to_string())?.layout {
            Some(Layout::GlobalScale { .. }) if mode == QuantMode::Nvfp4 => Some(bytes),
            _ => return Err(format!("{prefix}.global_scale has broken metadata")),
        },
    };
    let (si, scales) = part("scales")?.ok_or_else(|| format!("{prefix}.scales is missing"))?;
    let scale_dtype = match bundle.tensor(si).map_err(|e| e.to_string())?.layout {
        Some(Layout::MlxParams { dtype, .. }) => Some(dtype),
        Some(Layout::MlxScales { .. }) => None,
        _ => return Err(format!("{prefix}.scales has broken metadata")),
    };
    let biases = part("biases")?.map(|(_, b)| b);
    let n = |v: u64| usize::try_from(v).map_err(|_| format!("{v} does not fit in memory"));
    let m = Module {
        mode,
        bits,
        group: n(group)?,
        experts: n(experts)?,
        rows: n(rows)?,
        cols: n(cols)?,
        weight: payload.tensor_bytes(index).map_err(|e| e.to_string())?,
        scales,
        biases: if mode == QuantMode::Affine {
            biases
        } else {
            None
        },
        scale_dtype,
        global,
    };
    m.validate().map_err(|e| format!("{}: {e}", t.name))?;
    Ok(m)
}

/// Value `index` of an affine scales or biases tensor of `dtype`.
fn param(dtype: DenseDtype, bytes: &[u8], index: usize) -> f32 {
    match dtype {
        DenseDtype::F32 => {
            let b = &bytes[4 * index..4 * index + 4];
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }
        DenseDtype::F16 => f16_to_f32(u16::from_le_bytes([bytes[2 * index], bytes[2 * index + 1]])),
        DenseDtype::Bf16 => {
            bf16_to_f32(u16::from_le_bytes([bytes[2 * index], bytes[2 * index + 1]]))
        }
        // Not affine scales dtypes (`DenseDtype::parse`); decoded all the same.
        DenseDtype::F64 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 | DenseDtype::Int(_) => {
            super::dequant::dense_value(dtype, &bytes[dtype.size() as usize * index..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_is_a_power_of_two() {
        assert_eq!(e8m0(127), 1.0);
        assert_eq!(e8m0(128), 2.0);
        assert_eq!(e8m0(120), 2f32.powi(-7));
        assert_eq!(f64::from(e8m0(0)), 2f64.powi(-127));
        assert_eq!(e8m0(254), 2f32.powi(127));
        assert!(e8m0(255).is_nan());
    }

    #[test]
    fn straddling_codes_decode_from_the_bit_stream() {
        // 32 six-bit codes in 6 words: code j = j + 1 (bits straddle words).
        let codes: Vec<u8> = (1..=32).collect();
        let mut packed = vec![0u8; 24];
        super::super::pack_row(&codes, 6, &mut packed);
        // Independent: build the 192-bit stream from the codes.
        let mut bits = 0u128;
        let mut high = 0u64;
        for (j, &c) in codes.iter().enumerate() {
            let at = j * 6;
            if at < 128 {
                bits |= u128::from(c) << at;
                if at + 6 > 128 {
                    high |= u64::from(c) >> (128 - at);
                }
            } else {
                high |= u64::from(c) << (at - 128);
            }
        }
        let mut want = bits.to_le_bytes().to_vec();
        want.extend_from_slice(&high.to_le_bytes());
        assert_eq!(packed, want);
        let m = Module {
            mode: QuantMode::Affine,
            bits: 6,
            group: 32,
            experts: 1,
            rows: 1,
            cols: 32,
            weight: &packed,
            scales: &1.0f32.to_le_bytes(),
            biases: Some(&(-1.0f32).to_le_bytes()),
            scale_dtype: Some(DenseDtype::F32),
            global: None,
        };
        let mut out = vec![0f32; 32];
        m.dequantize(0, 0..1, &mut out).unwrap();
        let want: Vec<f32> = (0..32).map(|j| j as f32).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn wrong_lengths_are_errors_not_panics() {
        let m = Module {
            mode: QuantMode::Mxfp4,
            bits: 4,
            group: 32,
            experts: 1,
            rows: 2,
            cols: 32,
            weight: &[0u8; 16],
            scales: &[127u8; 2],
            biases: None,
            scale_dtype: None,
            global: None,
        };
        let mut out = vec![0f32; 64];
        assert!(m.dequantize(0, 0..2, &mut out).is_err());
        let m = Module {
            weight: &[0u8; 32],
            ..m
        };
        m.dequantize(0, 0..2, &mut out).unwrap();
        assert!(m.dequantize(1, 0..1, &mut out[..32]).is_err());
    }
}
