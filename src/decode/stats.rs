//! Summaries of codes, scales and values: the numbers a researcher reads to
//! judge a tensor's quantisation. Built from exact histograms, so quantiles
//! are exact too.

use serde::{Deserialize, Serialize};

use super::{bf16_to_f32, f16_to_f32};

/// Counts of every stored code `0..2^bits` (raw stored value, before any
/// shift a loader applies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeCounts {
    /// Bits per code.
    pub bits: u32,
    /// Zero point: level = code - zero.
    pub zero: i32,
    /// Largest valid code; codes above it are reserved.
    pub max_code: u8,
    /// `counts[c]` = number of codes equal to `c`.
    pub counts: Vec<u64>,
}

impl CodeCounts {
    /// Total number of codes.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Shannon entropy of the code distribution, in bits.
    pub fn entropy_bits(&self) -> f64 {
        let n = self.total() as f64;
        if n == 0.0 {
            return 0.0;
        }
        self.counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / n;
                -p * p.log2()
            })
            .sum()
    }

    /// Share of codes at the two extreme valid levels (0 and `max_code`).
    pub fn clipping_share(&self) -> f64 {
        let n = self.total();
        if n == 0 {
            return 0.0;
        }
        let lo = self.counts.first().copied().unwrap_or(0);
        let hi = self
            .counts
            .get(usize::from(self.max_code))
            .copied()
            .unwrap_or(0);
        (lo + hi) as f64 / n as f64
    }

    /// Valid levels (`code - zero`) that never occur.
    pub fn unused_levels(&self) -> Vec<i32> {
        (0..=self.max_code)
            .filter(|&c| self.counts.get(usize::from(c)).copied().unwrap_or(0) == 0)
            .map(|c| i32::from(c) - self.zero)
            .collect()
    }

    /// Codes above `max_code`.
    pub fn reserved(&self) -> u64 {
        self.counts
            .iter()
            .skip(usize::from(self.max_code) + 1)
            .sum()
    }
}

/// One histogram bin `[lo, hi)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bin {
    /// Lower edge (inclusive).
    pub lo: f64,
    /// Upper edge (exclusive; inclusive for the last bin).
    pub hi: f64,
    /// Values in the bin.
    pub count: u64,
}

/// Distribution of a tensor's F16 scales (positive finite ones; the rest are
/// counted in `invalid`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleSummary {
    /// Always `F16` for audio8 bundles.
    pub dtype: String,
    /// Number of scales.
    pub count: u64,
    /// Scales that are zero, negative, infinite or NaN.
    pub invalid: u64,
    /// Smallest valid scale.
    pub min: f64,
    /// Largest valid scale.
    pub max: f64,
    /// Median valid scale.
    pub median: f64,
    /// 1st percentile.
    pub p01: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Half-octave (log2-spaced) bins from min to max.
    pub bins: Vec<Bin>,
}

/// Distribution of a dense tensor's values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueSummary {
    /// Number of values.
    pub count: u64,
    /// NaN or infinite values.
    pub nonfinite: u64,
    /// Smallest finite value.
    pub min: f64,
    /// Largest finite value.
    pub max: f64,
    /// Mean of the finite values.
    pub mean: f64,
    /// Standard deviation of the finite values.
    pub std: f64,
    /// Linear bins from min to max (F32, F64 and integer values binned at
    /// bfloat16 precision).
    pub bins: Vec<Bin>,
}

/// Quality statistics of one packed tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    /// Entropy of the code histogram in bits (effective bits per weight).
    pub entropy_bits: f64,
    /// Share of codes at the two extreme levels.
    pub clipping_share: f64,
    /// Valid levels never used.
    pub unused_levels: Vec<i32>,
    /// Groups of 64 whose codes are all the zero level.
    pub zero_groups: u64,
    /// Total groups.
    pub groups: u64,
    /// max scale / min scale.
    pub scale_dynamic_range: f64,
    /// Rows whose largest scale exceeds 8× the tensor's median scale.
    pub outlier_rows: u64,
    /// Rows whose largest scale exceeds 10× the tensor's median scale (a
    /// block of rows scaled by mistake; 0 where the format gives no rows).
    #[serde(default)]
    pub high_rows: u64,
    /// Reserved codes found.
    pub reserved_codes: u64,
    /// Suspicion score: higher is worse (see [`suspicion`]).
    pub suspicion: f64,
}

/// Everything the single pass learns about one tensor's values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TensorStats {
    /// Code histogram (packed tensors).
    pub codes: Option<CodeCounts>,
    /// Scale distribution (packed tensors).
    pub scales: Option<Box<ScaleSummary>>,
    /// Value distribution (dense tensors).
    pub values: Option<ValueSummary>,
    /// Quality statistics (packed tensors).
    pub quality: Option<Box<Quality>>,
    /// E4M3 scale distribution (mlx-nvfp4 `scales` tensors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e4m3: Option<Box<E4m3Stats>>,
    /// Per-expert global scales (mlx-nvfp4 `global_scale` tensors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_scales: Option<Vec<f64>>,
    /// The smallest and largest nonzero finite magnitude of an MLX-LM
    /// module's affine scales (which take either sign): its weight's scale
    /// range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs_range: Option<[f64; 2]>,
    /// An MLX-LM scales tensor's rows whose largest magnitude exceeds 8×
    /// the median magnitude: its weight's outlier rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_outliers: Option<u64>,
    /// An MLX-LM scales tensor's zero scales (+0 or -0): groups whose
    /// values are all one constant (the bias, or 0 in the float modes),
    /// which carry nothing of the weight; its weight's zero groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_scales: Option<u64>,
    /// What a GGUF block-quantised tensor adds: its sub-block scales and mins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf: Option<Box<GgufStats>>,
    /// A stacked MoE tensor's statistics expert by expert (its experts are
    /// peers of each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<Vec<super::experts::ExpertPart>>,
}

/// The sub-block statistics of a GGUF block-quantised tensor (the codes,
/// `d` distribution and quality are in [`TensorStats`]'s own fields; for
/// GGUF, `scales` is the distribution of `|d|`, its `invalid` counting
/// zero and non-finite `d`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GgufStats {
    /// The ggml type's name.
    pub ggml_type: String,
    /// Blocks in the tensor.
    pub blocks: u64,
    /// Histogram of the stored sub-block scales (K-quants' 4-, 6- or 8-bit
    /// scales; MXFP4's E8M0 and NVFP4's UE4M3 scale bytes).
    pub sub_scales: Option<CodeCounts>,
    /// Histogram of the stored sub-block mins (Q2_K, Q4_K, Q5_K).
    pub sub_mins: Option<CodeCounts>,
    /// Distribution of `|m|` or `|dmin|` (types with an F16 min).
    pub mins: Option<ScaleSummary>,
}

/// Distribution of a stacked E4M3 scale tensor, overall and per expert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E4m3Stats {
    /// `hist[b]` = scale bytes equal to `b`.
    pub hist: Vec<u64>,
    /// NaN bytes (0x7F, 0xFF).
    pub nan: u64,
    /// Per expert, in E4M3 units (before the global scale).
    pub experts: Vec<ExpertScales>,
}

/// One expert's E4M3 scales.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpertScales {
    /// Mean of the non-NaN scales.
    pub mean: f64,
    /// Largest scale.
    pub max: f64,
    /// Share of scales equal to zero (groups quantised to all zeros).
    pub zero_share: f64,
    /// NaN scale bytes.
    pub nan: u64,
}

impl E4m3Stats {
    /// Summarises per-expert byte histograms (256 bins each).
    pub fn from_hists(per_expert: &[[u64; 256]]) -> Self {
        let table = super::nvfp4::e4m3_table();
        let mut hist = vec![0u64; 256];
        let mut experts = Vec::with_capacity(per_expert.len());
        for h in per_expert {
            let (mut n, mut sum, mut max, mut nan) = (0u64, 0f64, f64::NEG_INFINITY, 0u64);
            for (b, &k) in h.iter().enumerate() {
                hist[b] += k;
                if k == 0 {
                    continue;
                }
                if super::nvfp4::e4m3_is_nan(b as u8) {
                    nan += k;
                    continue;
                }
                let v = f64::from(table[b]);
                n += k;
                sum += v * k as f64;
                max = max.max(v);
            }
            let zero = h[0] + h[0x80];
            experts.push(ExpertScales {
                mean: if n > 0 { sum / n as f64 } else { 0.0 },
                max: if n > 0 { max } else { 0.0 },
                zero_share: if n > 0 { zero as f64 / n as f64 } else { 0.0 },
                nan,
            });
        }
        let nan = hist[0x7f] + hist[0xff];
        Self { hist, nan, experts }
    }
}

/// Walks a 65536-bin histogram of 16-bit patterns in ascending value order
/// over the positive finite halves and returns the value at quantile `q`.
fn f16_quantile(hist: &[u32], total: u64, q: f64) -> f64 {
    if total == 0 {
        return f64::NAN;
    }
    let target = ((total - 1) as f64 * q).round() as u64;
    let mut seen = 0u64;
    for h in 1u16..=0x7bff {
        seen += u64::from(hist[usize::from(h)]);
        if seen > target {
            return f64::from(f16_to_f32(h));
        }
    }
    f64::NAN
}

/// Summarises a 65536-bin histogram of F16 scale bit patterns.
pub fn summarise_scales(hist: &[u32]) -> ScaleSummary {
    let mut valid = 0u64;
    let mut invalid = 0u64;
    let (mut min_h, mut max_h) = (None, None);
    for (h, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let h = h as u16;
        if super::f16_is_positive_finite(h) {
            valid += u64::from(n);
            min_h.get_or_insert(h);
            max_h = Some(h);
        } else {
            invalid += u64::from(n);
        }
    }
    let min = min_h.map_or(f64::NAN, |h| f64::from(f16_to_f32(h)));
    let max = max_h.map_or(f64::NAN, |h| f64::from(f16_to_f32(h)));
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
        for h in 1u16..=0x7bff {
            let n = hist[usize::from(h)];
            if n == 0 {
                continue;
            }
            let v = f64::from(f16_to_f32(h));
            let k = (v.log2() * 2.0).floor() as i32 - lo_k;
            if let Some(b) = usize::try_from(k).ok().and_then(|k| bins.get_mut(k)) {
                b.count += u64::from(n);
            }
        }
    }
    ScaleSummary {
        dtype: "F16".to_string(),
        count: valid + invalid,
        invalid,
        min,
        max,
        median: f16_quantile(hist, valid, 0.5),
        p01: f16_quantile(hist, valid, 0.01),
        p99: f16_quantile(hist, valid, 0.99),
        bins,
    }
}

/// How a 16-bit pattern histogram of dense values is to be read.
#[derive(Debug, Clone, Copy)]
pub enum Pattern16 {
    /// IEEE half.
    F16,
    /// bfloat16, or the top half of an F32.
    Bf16,
}

/// Number of linear bins in a value histogram.
pub const VALUE_BINS: usize = 64;

/// Which 256-cell blocks of a 16-bit pattern histogram may hold counts (a
/// bit per block, by the pattern's high byte), so that the walks over a
/// small tensor's histogram visit the few blocks its values fall in rather
/// than all 65,536 cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks(pub [u64; 4]);

impl Blocks {
    /// Every block.
    pub const ALL: Blocks = Blocks([u64::MAX; 4]);
    /// No block.
    pub const NONE: Blocks = Blocks([0; 4]);

    /// The blocks whose flag is set (`touched[high byte]`: a plain store per
    /// value in a scanner's loop, where setting a bit here would chain
    /// every value on the one before).
    pub fn from_flags(touched: &[bool; 256]) -> Self {
        let mut b = Blocks::NONE;
        for (i, &t) in touched.iter().enumerate() {
            if t {
                b.0[i >> 6] |= 1 << (i & 63);
            }
        }
        b
    }

    /// The blocks of a 65,536-cell `hist` that hold a count: one pass of
    /// wide ORs (a few microseconds), so that a large tensor's walks and
    /// clearing visit the few blocks its values fall in rather than every
    /// cell, without a mark per value in the scanning loop.
    pub fn holding(hist: &[u32]) -> Self {
        let mut b = Blocks::NONE;
        for (i, block) in hist.chunks(256).take(256).enumerate() {
            if block.iter().fold(0, |a, &n| a | n) != 0 {
                b.0[i >> 6] |= 1 << (i & 63);
            }
        }
        b
    }

    /// Whether block `b` (high byte `b`) is marked.
    pub fn has(self, b: usize) -> bool {
        b < 256 && self.0[b >> 6] & (1 << (b & 63)) != 0
    }

    /// The nonzero cells of `hist` in the marked blocks: `(pattern, count)`.
    pub fn cells(self, hist: &[u32]) -> impl Iterator<Item = (u16, u32)> + '_ {
        (0..256usize)
            .filter(move |&b| self.has(b))
            .flat_map(move |b| {
                hist.get(b << 8..(b + 1) << 8)
                    .unwrap_or(&[])
                    .iter()
                    .enumerate()
                    .filter(|&(_, &n)| n != 0)
                    .map(move |(i, &n)| (((b << 8) + i) as u16, n))
            })
    }
}

/// Summarises dense values from exact moments and a 16-bit pattern histogram.
pub fn summarise_values(hist: &[u32], pattern: Pattern16, moments: &Moments) -> ValueSummary {
    summarise_blocks(hist, Blocks::ALL, pattern, moments)
}

/// [`summarise_values`] over the cells of the `blocks` that may hold counts.
pub fn summarise_blocks(
    hist: &[u32],
    blocks: Blocks,
    pattern: Pattern16,
    moments: &Moments,
) -> ValueSummary {
    let decode = |h: u16| match pattern {
        Pattern16::F16 => f16_to_f32(h),
        Pattern16::Bf16 => bf16_to_f32(h),
    };
    let (min, max) = (moments.min, moments.max);
    let mut bins = Vec::new();
    if moments.count > moments.nonfinite && min.is_finite() && max.is_finite() {
        let width = if max > min {
            (max - min) / VALUE_BINS as f64
        } else {
            1.0
        };
        let n = if max > min { VALUE_BINS } else { 1 };
        for i in 0..n {
            bins.push(Bin {
                lo: min + width * i as f64,
                hi: if i + 1 == n {
                    max
                } else {
                    min + width * (i + 1) as f64
                },
                count: 0,
            });
        }
        for (h, c) in blocks.cells(hist) {
            let v = f64::from(decode(h));
            if !v.is_finite() {
                continue;
            }
            // `as` truncates, which is the floor once negatives are 0 (and
            // a call less: `floor` is a libm call on baseline x86-64).
            let i = (((v - min) / width).max(0.0) as usize).min(n - 1);
            if let Some(b) = bins.get_mut(i) {
                b.count += u64::from(c);
            }
        }
    }
    let finite = (moments.count - moments.nonfinite) as f64;
    let mean = if finite > 0.0 {
        moments.sum / finite
    } else {
        f64::NAN
    };
    let var = if finite > 0.0 {
        (moments.sum_sq / finite - mean * mean).max(0.0)
    } else {
        f64::NAN
    };
    ValueSummary {
        count: moments.count,
        nonfinite: moments.nonfinite,
        min,
        max,
        mean,
        std: var.sqrt(),
        bins,
    }
}

/// Running moments of dense values.
#[derive(Debug, Clone, Copy)]
pub struct Moments {
    /// Values seen.
    pub count: u64,
    /// Non-finite values seen.
    pub nonfinite: u64,
    /// Smallest finite value.
    pub min: f64,
    /// Largest finite value.
    pub max: f64,
    /// Sum of finite values.
    pub sum: f64,
    /// Sum of squares of finite values.
    pub sum_sq: f64,
}

impl Default for Moments {
    fn default() -> Self {
        Self {
            count: 0,
            nonfinite: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
            sum_sq: 0.0,
        }
    }
}

impl Moments {
    /// Adds one value.
    #[inline]
    pub fn push(&mut self, v: f32) {
        self.count += 1;
        if !v.is_finite() {
            self.nonfinite += 1;
            return;
        }
        let v = f64::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
        self.sum_sq += v * v;
    }

    /// Adds one F64 value (or an integer's, as f64), at its own precision.
    #[inline]
    pub fn push_f64(&mut self, v: f64) {
        self.count += 1;
        if !v.is_finite() {
            self.nonfinite += 1;
            return;
        }
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
        self.sum_sq += v * v;
    }
}

/// The moments of every value a 16-bit pattern histogram counts: the same
/// count, non-finite count, extremes and sums a [`Moments::push`] of each
/// value gives (the sums added in pattern order rather than file order, so
/// they may differ in the last bits), at the cost of one pass over the
/// 65,536 cells instead of a conversion per value.
/// Only the cells of `blocks` are visited.
pub fn moments_of_patterns(hist: &[u32], blocks: Blocks, pattern: Pattern16) -> Moments {
    let mut m = Moments::default();
    for (h, n) in blocks.cells(hist) {
        let v = match pattern {
            Pattern16::F16 => f16_to_f32(h),
            Pattern16::Bf16 => bf16_to_f32(h),
        };
        let n64 = u64::from(n);
        m.count += n64;
        if !v.is_finite() {
            m.nonfinite += n64;
            continue;
        }
        let v = f64::from(v);
        m.min = m.min.min(v);
        m.max = m.max.max(v);
        m.sum += v * f64::from(n);
        m.sum_sq += v * v * f64::from(n);
    }
    m
}

/// Suspicion score of a packed tensor: 0 for a healthy one, growing with
/// reserved codes, heavy clipping, scale outliers and low entropy for the
/// bit width. The weights order the causes by how surely they mean harm.
pub fn suspicion(q: &Quality, bits: u32) -> f64 {
    let mut s = 0.0;
    if q.reserved_codes > 0 {
        s += 100.0;
    }
    s += (q.clipping_share - 0.05).max(0.0) * 100.0;
    if q.groups > 0 {
        s += q.outlier_rows as f64 / (q.groups as f64).sqrt();
    }
    let entropy_share = q.entropy_bits / f64::from(bits);
    s += (0.5 - entropy_share).max(0.0) * 40.0;
    if q.groups > 0 {
        s += q.zero_groups as f64 / q.groups as f64 * 20.0;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocks_holding_counts_are_exactly_those_with_a_nonzero_cell() {
        let mut hist = vec![0u32; 1 << 16];
        // A cell at either end of a block, one in the middle, and blocks at
        // each word boundary of the mask.
        for cell in [
            0x0000, 0x00ff, 0x3f80, 0x4000, 0x7fff, 0x8000, 0xc0ff, 0xffff,
        ] {
            hist[cell] = 1;
        }
        let want: Vec<usize> = (0..256)
            .filter(|&b| hist[b << 8..(b + 1) << 8].iter().any(|&n| n != 0))
            .collect();
        let found = Blocks::holding(&hist);
        let got: Vec<usize> = (0..256).filter(|&b| found.has(b)).collect();
        assert_eq!(got, want);
        assert_eq!(got, [0x00, 0x3f, 0x40, 0x7f, 0x80, 0xc0, 0xff]);
        // The walks over the found blocks see every count.
        let seen: Vec<(u16, u32)> = found.cells(&hist).collect();
        assert_eq!(seen.len(), 8);
        assert_eq!(Blocks::holding(&vec![0; 1 << 16]), Blocks::NONE);
    }

    fn counts(bits: u32, zero: i32, max: u8, c: Vec<u64>) -> CodeCounts {
        CodeCounts {
            bits,
            zero,
            max_code: max,
            counts: c,
        }
    }

    #[test]
    fn all_one_level_has_zero_entropy_and_every_other_level_unused() {
        let mut c = vec![0u64; 16];
        c[7] = 640;
        let cc = counts(4, 7, 14, c);
        assert_eq!(cc.entropy_bits(), 0.0);
        assert_eq!(cc.clipping_share(), 0.0);
        assert_eq!(
            cc.unused_levels(),
            vec![-7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn every_level_once_has_log2_entropy_and_two_clipped() {
        let mut c = vec![1u64; 8];
        c[7] = 0; // q3: 7 is reserved
        let cc = counts(3, 3, 6, c);
        assert!((cc.entropy_bits() - 7f64.log2()).abs() < 1e-12);
        assert!((cc.clipping_share() - 2.0 / 7.0).abs() < 1e-12);
        assert!(cc.unused_levels().is_empty());
        assert_eq!(cc.reserved(), 0);
    }

    #[test]
    fn scale_quantiles_are_exact() {
        let mut hist = vec![0u32; 65536];
        // 100 scales: 1.0 ×98, 0.5 ×1, 4.0 ×1
        hist[0x3c00] = 98;
        hist[0x3800] = 1;
        hist[0x4400] = 1;
        hist[0x0000] = 3; // invalid zeros
        let s = summarise_scales(&hist);
        assert_eq!(s.count, 103);
        assert_eq!(s.invalid, 3);
        assert_eq!((s.min, s.max, s.median), (0.5, 4.0, 1.0));
        assert_eq!(s.bins.iter().map(|b| b.count).sum::<u64>(), 100);
    }
}
