//! The scanner of dense F16, BF16 and F32 tensors: a 16-bit pattern
//! histogram, exact moments, and the first non-finite value.

use super::Carry;
use crate::decode;
use crate::decode::stats::{self, Moments, Pattern16, TensorStats};
use crate::finding::checks as c;
use crate::finding::{CheckId, Finding};
use crate::format::DenseDtype;

/// A dense tensor's scan state.
pub(super) struct Dense {
    dtype: DenseDtype,
    check: CheckId,
    carry: Carry,
    acc: DenseAcc,
}

struct DenseAcc {
    start: u64,
    dtype: DenseDtype,
    pos: u64,
    hist: Vec<u32>,
    /// The second table of F16/BF16 patterns (odd values of each pair).
    hist2: Vec<u32>,
    /// F32 values' moments; F16/BF16 ones are made from the histogram.
    moments: Moments,
    first_bad: Option<u64>,
}

/// Values converted at once: `half`'s slice conversion is vectorised where
/// the per-value one is not.
const BLOCK: usize = 512;

impl Dense {
    /// The scan state of a tensor of `dtype` starting at absolute offset `start`.
    pub(super) fn new(dtype: DenseDtype, start: u64) -> Self {
        Self::with_check(dtype, start, c::DENSE_FINITE)
    }

    /// The same, reporting non-finite values under `check` (GGUF's own id).
    pub(super) fn with_check(dtype: DenseDtype, start: u64, check: CheckId) -> Self {
        Self {
            dtype,
            check,
            carry: Carry::new(dtype.size() as usize),
            acc: DenseAcc {
                start,
                dtype,
                pos: 0,
                // Allocated at the first value: a checkpoint of 20,000
                // tensors has a scanner for each before any is fed.
                hist: Vec::new(),
                hist2: Vec::new(),
                moments: Moments::default(),
                first_bad: None,
            },
        }
    }

    /// Feeds the next bytes.
    pub(super) fn feed(&mut self, data: &[u8]) {
        let acc = &mut self.acc;
        self.carry.feed(data, |u| acc.values(u));
    }

    /// Findings and statistics once every byte has been fed.
    pub(super) fn finish(self, name: &str, findings: &mut Vec<Finding>) -> TensorStats {
        let mut acc = self.acc;
        acc.hist.resize(1 << 16, 0);
        for (a, b) in acc.hist.iter_mut().zip(&acc.hist2) {
            *a += b;
        }
        if self.dtype != DenseDtype::F32 {
            acc.moments = moments_of_patterns(&acc.hist, self.dtype == DenseDtype::Bf16);
        }
        if let Some(at) = acc.first_bad {
            let index = (at - acc.start) / self.dtype.size();
            findings.push(
                Finding::error(
                    self.check,
                    format!(
                        "{} of {} {} values are NaN or infinite; the first is element {index}",
                        acc.moments.nonfinite,
                        acc.moments.count,
                        self.dtype.as_str()
                    ),
                )
                .tensor(name)
                .offset(at),
            );
        }
        let pattern = match self.dtype {
            DenseDtype::F16 => Pattern16::F16,
            _ => Pattern16::Bf16,
        };
        TensorStats {
            values: Some(stats::summarise_values(&acc.hist, pattern, &acc.moments)),
            ..Default::default()
        }
    }
}

/// The moments of the values whose 16-bit patterns `hist` counts: each
/// pattern's value (and square) times its count, summed over the patterns
/// in f64 (the products are exact but for F16 squares of huge counts), so
/// closer to the true sums than adding the values one by one.
fn moments_of_patterns(hist: &[u32], bf16: bool) -> Moments {
    let mut m = Moments::default();
    for (p, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let v = if bf16 {
            decode::bf16_to_f32(p as u16)
        } else {
            decode::f16_to_f32(p as u16)
        };
        m.count += u64::from(n);
        if !v.is_finite() {
            m.nonfinite += u64::from(n);
            continue;
        }
        let (v, n) = (f64::from(v), f64::from(n));
        m.min = m.min.min(v);
        m.max = m.max.max(v);
        m.sum += v * n;
        m.sum_sq += v * v * n;
    }
    m
}

impl DenseAcc {
    fn values(&mut self, units: &[u8]) {
        if self.hist.is_empty() {
            self.hist = vec![0; 1 << 16];
        }
        match self.dtype {
            DenseDtype::F16 | DenseDtype::Bf16 => {
                // Each value is its 16-bit pattern, so the histogram alone
                // gives the moments (exactly, at the end); here only the
                // patterns are counted, in two interleaved tables so runs
                // of one pattern do not serialise, and the first
                // non-finite one (exponent all ones) is located.
                if self.hist2.is_empty() {
                    self.hist2 = vec![0; 1 << 16];
                }
                let exp = if self.dtype == DenseDtype::Bf16 {
                    0x7f80u16
                } else {
                    0x7c00
                };
                for (b, block) in units.chunks(2 * BLOCK).enumerate() {
                    let mut worst = 0u16;
                    let (pairs, rest) = block.as_chunks::<4>();
                    for p in pairs {
                        let x = u16::from_le_bytes([p[0], p[1]]);
                        let y = u16::from_le_bytes([p[2], p[3]]);
                        self.hist[usize::from(x)] += 1;
                        self.hist2[usize::from(y)] += 1;
                        worst = worst.max(x & 0x7fff).max(y & 0x7fff);
                    }
                    for s in rest.chunks_exact(2) {
                        let x = u16::from_le_bytes([s[0], s[1]]);
                        self.hist[usize::from(x)] += 1;
                        worst = worst.max(x & 0x7fff);
                    }
                    if worst >= exp && self.first_bad.is_none() {
                        let i = block
                            .chunks_exact(2)
                            .position(|s| u16::from_le_bytes([s[0], s[1]]) & exp == exp)
                            .unwrap_or(0);
                        let at = 2 * (b * BLOCK + i) as u64;
                        self.first_bad = Some(self.start + self.pos + at);
                    }
                }
            }
            DenseDtype::F32 => {
                for (i, s) in units.chunks_exact(4).enumerate() {
                    let x = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    self.hist[(x >> 16) as usize] += 1;
                    let v = f32::from_bits(x);
                    if !v.is_finite() && self.first_bad.is_none() {
                        self.first_bad = Some(self.start + self.pos + 4 * i as u64);
                    }
                    self.moments.push(v);
                }
            }
        }
        self.pos += units.len() as u64;
    }
}
