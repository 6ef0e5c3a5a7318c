//! NVFP4: E2M1 codes (8 per little-endian U32 word, low nibble first), one
//! E4M3 scale byte per 16 inputs, one F32 global scale per expert.
//!
//! Value of element (e, o, k) = `fp4(code) * (e4m3(scale) * (global / 2688))`,
//! evaluated in f32 in exactly that order, which is how MLX's
//! `dequantize(mode="nvfp4", global_scale=...)` rounds (2688 = 448 * 6).

/// Inputs per E4M3 scale.
pub const GROUP: usize = 16;
/// FP4 codes per U32 word.
pub const CODES_PER_WORD: usize = 8;
/// Largest E4M3 magnitude times largest E2M1 magnitude.
pub const GLOBAL_DIVISOR: f32 = 448.0 * 6.0;

/// The 16 E2M1 values, by code: 0..7 positive, 8..15 the same negated (8 is -0).
pub const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Labels of the 16 codes, for histograms.
pub const E2M1_LABELS: [&str; 16] = [
    "+0", "+0.5", "+1", "+1.5", "+2", "+3", "+4", "+6", "-0", "-0.5", "-1", "-1.5", "-2", "-3",
    "-4", "-6",
];

/// The value of an E2M1 code (low 4 bits of `code`).
pub fn e2m1(code: u8) -> f32 {
    E2M1[usize::from(code & 15)]
}

/// Whether an E4M3 byte is NaN (0x7F, 0xFF); E4M3 has no infinities.
pub fn e4m3_is_nan(b: u8) -> bool {
    b & 0x7f == 0x7f
}

/// The value of an E4M3 byte (bias 7): subnormal `m/8 * 2^-6` when the
/// exponent field is 0, else `(1 + m/8) * 2^(e-7)`; NaN for 0x7F/0xFF.
pub fn e4m3(b: u8) -> f32 {
    if e4m3_is_nan(b) {
        return f32::NAN;
    }
    let e = i32::from((b >> 3) & 15);
    let m = f32::from(b & 7);
    let v = if e == 0 {
        m / 8.0 * (2.0f32).powi(-6)
    } else {
        (1.0 + m / 8.0) * (2.0f32).powi(e - 7)
    };
    if b & 0x80 != 0 { -v } else { v }
}

/// All 256 E4M3 values, by byte.
pub fn e4m3_table() -> [f32; 256] {
    let mut t = [0.0; 256];
    for (b, v) in t.iter_mut().enumerate() {
        *v = e4m3(b as u8);
    }
    t
}

/// The E2M1 code of `words`' element `j` (words as little-endian bytes).
pub fn code_at(words: &[u8], j: usize) -> u8 {
    let byte = words[j / 2];
    if j.is_multiple_of(2) {
        byte & 15
    } else {
        byte >> 4
    }
}

/// Dequantises one expert: `words` is `[rows, cols/8]` U32 (little-endian
/// bytes), `scales` `[rows, cols/16]` E4M3 bytes, `out` `[rows, cols]`.
/// Returns `None` when the lengths disagree or `cols` is not a multiple of 16.
pub fn dequantize_expert(
    words: &[u8],
    scales: &[u8],
    global: f32,
    cols: usize,
    out: &mut [f32],
) -> Option<()> {
    if cols == 0 || !cols.is_multiple_of(GROUP) {
        return None;
    }
    let rows = out.len() / cols;
    if out.len() != rows * cols
        || words.len() != rows * cols / 2
        || scales.len() != rows * cols / GROUP
    {
        return None;
    }
    let table = e4m3_table();
    let g = global / GLOBAL_DIVISOR;
    for ((o, w), s) in out
        .chunks_exact_mut(GROUP)
        .zip(words.chunks_exact(GROUP / 2))
        .zip(scales)
    {
        let scale = table[usize::from(*s)] * g;
        for (k, &b) in w.iter().enumerate() {
            o[2 * k] = E2M1[usize::from(b & 15)] * scale;
            o[2 * k + 1] = E2M1[usize::from(b >> 4)] * scale;
        }
    }
    Some(())
}

/// The E2M1 code nearest `x` (ties to the even code, as round-to-nearest-even
/// on the E2M1 grid does), for `|x| <= 6` after scaling; larger saturates.
pub fn e2m1_encode(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 8 } else { 0 };
    let a = x.abs();
    // Midpoints between consecutive magnitudes; at a tie the even code wins.
    let code = if a <= 0.25 {
        0
    } else if a < 0.75 {
        1
    } else if a <= 1.25 {
        2
    } else if a < 1.75 {
        3
    } else if a <= 2.5 {
        4
    } else if a < 3.5 {
        5
    } else if a <= 5.0 {
        6
    } else {
        7
    };
    sign | code
}

/// The E4M3 byte nearest a non-negative `x` (round to nearest, ties to even),
/// saturating at 448; used by the sample writer's encoder.
pub fn e4m3_encode(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let table = e4m3_table();
    let mut best = 0u8;
    let mut best_err = f32::INFINITY;
    for b in 0u8..0x7f {
        let err = (table[usize::from(b)] - x).abs();
        if err < best_err || (err == best_err && b % 2 == 0) {
            best = b;
            best_err = err;
        }
    }
    best
}

/// Quantises one row of `cols` values (a multiple of 16) with the expert's
/// global scale: per group, the E4M3 scale is `amax / 6` expressed relative to
/// `global / 2688`, then each value takes its nearest E2M1 code. Writes
/// `cols/2` bytes of packed codes and `cols/16` scale bytes.
pub fn quantize_row(values: &[f32], global: f32, codes: &mut [u8], scales: &mut [u8]) {
    let table = e4m3_table();
    let g = global / GLOBAL_DIVISOR;
    for ((v, c), s) in values
        .chunks_exact(GROUP)
        .zip(codes.chunks_exact_mut(GROUP / 2))
        .zip(scales.iter_mut())
    {
        let amax = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let byte = e4m3_encode(amax / 6.0 / g);
        *s = byte;
        let scale = table[usize::from(byte)] * g;
        for (k, pair) in v.chunks_exact(2).enumerate() {
            let q = |x: f32| {
                if scale > 0.0 {
                    e2m1_encode(x / scale)
                } else {
                    0
                }
            };
            c[k] = q(pair[0]) | (q(pair[1]) << 4);
        }
    }
}

/// One stacked NVFP4 weight with its scales and global scales, borrowed from
/// mapped shards.
pub struct Stacked<'a> {
    /// U32 words `[experts, rows, cols/8]` as little-endian bytes.
    pub words: &'a [u8],
    /// E4M3 bytes `[experts, rows, cols/16]`.
    pub scales: &'a [u8],
    /// One global scale per expert.
    pub globals: Vec<f32>,
    /// Experts.
    pub experts: usize,
    /// Rows per expert.
    pub rows: usize,
    /// Columns per expert.
    pub cols: usize,
}

impl Stacked<'_> {
    /// Whether the byte lengths agree with the dimensions.
    pub fn consistent(&self) -> bool {
        let per = self.rows * self.cols;
        self.cols.is_multiple_of(GROUP)
            && self.words.len() == self.experts * per / 2
            && self.scales.len() == self.experts * per / GROUP
            && self.globals.len() == self.experts
    }

    /// Dequantises expert `e` into `out` (`rows * cols` values).
    pub fn dequantize(&self, e: usize, out: &mut [f32]) -> Option<()> {
        let per = self.rows * self.cols;
        let words = self.words.get(e * per / 2..(e + 1) * per / 2)?;
        let scales = self.scales.get(e * per / GROUP..(e + 1) * per / GROUP)?;
        dequantize_expert(words, scales, *self.globals.get(e)?, self.cols, out)
    }

    /// Counts of the 16 E2M1 codes, over one expert or all of them.
    pub fn code_counts(&self, expert: Option<usize>) -> [u64; 16] {
        let per = self.rows * self.cols / 2;
        let bytes = match expert {
            Some(e) => self.words.get(e * per..(e + 1) * per).unwrap_or_default(),
            None => self.words,
        };
        let mut hist = [0u64; 256];
        for &b in bytes {
            hist[usize::from(b)] += 1;
        }
        let mut counts = [0u64; 16];
        for (b, &n) in hist.iter().enumerate() {
            counts[b & 15] += n;
            counts[b >> 4] += n;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_matches_the_format_description() {
        assert_eq!(e4m3(0x00), 0.0);
        assert_eq!(e4m3(0x01), 1.0 / 8.0 / 64.0);
        assert_eq!(e4m3(0x38), 1.0);
        assert_eq!(e4m3(0x7e), 448.0);
        assert_eq!(e4m3(0xb8), -1.0);
        assert!(e4m3(0x7f).is_nan() && e4m3(0xff).is_nan());
        // Monotone over the positive bytes.
        for b in 1u8..0x7f {
            assert!(e4m3(b) > e4m3(b - 1), "{b:#x}");
        }
    }

    #[test]
    fn encoders_invert_the_decoders() {
        for code in 0u8..16 {
            let v = e2m1(code);
            let back = e2m1_encode(v);
            assert_eq!(e2m1(back), v, "code {code}");
        }
        for b in 0u8..0x7f {
            assert_eq!(e4m3_encode(e4m3(b)), b, "{b:#x}");
        }
    }

    #[test]
    fn quantize_then_dequantize_is_close() {
        let cols = 64;
        let values: Vec<f32> = (0..cols)
            .map(|i| ((i as f32) * 0.37).sin() * 0.05)
            .collect();
        let global = 0.05 * 1.3;
        let mut codes = vec![0u8; cols / 2];
        let mut scales = vec![0u8; cols / 16];
        quantize_row(&values, global, &mut codes, &mut scales);
        let mut out = vec![0f32; cols];
        dequantize_expert(&codes, &scales, global, cols, &mut out).unwrap();
        let err: f32 = values.iter().zip(&out).map(|(a, b)| (a - b).powi(2)).sum();
        let norm: f32 = values.iter().map(|a| a * a).sum();
        assert!((err / norm).sqrt() < 0.15, "{}", (err / norm).sqrt());
    }
}
