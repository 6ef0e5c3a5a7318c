//! The scanner of dense F16, BF16, F32, F64, F8 (E4M3, E5M2), integer
//! and BOOL tensors: a 16-bit pattern histogram, exact moments, and the
//! first non-finite value. An F8 byte is counted at the half that holds its
//! value exactly, so F8 tensors are summarised as F16 ones are; F64 and
//! integer values are binned as F32's (at bfloat16 precision, the integer
//! rounded once to the nearest F32) and their moments kept at F64
//! precision. Integers are always finite.

use super::Carry;
use crate::decode::F8_E4M3_AS_F16;
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
    /// The histogram's 256-cell blocks that hold counts, by high byte.
    touched: Box<[bool; 256]>,
    moments: Moments,
    first_bad: Option<u64>,
    /// Values counted so far (F16, BF16; F8 marks every block).
    values: u64,
    /// The tensor passed [`MARKED_VALUES`]: blocks are no longer marked, and
    /// those holding counts are found in the histogram itself.
    all_blocks: bool,
}

/// F16 and BF16 values whose blocks are marked one by one: a small tensor's
/// walks then visit only its few blocks (a checkpoint of 20,000 tensors),
/// while a large tensor's loop saves the mark, and its blocks are found by
/// one pass over the histogram at the end.
const MARKED_VALUES: u64 = 1 << 16;

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
                touched: Box::new([false; 256]),
                moments: Moments::default(),
                first_bad: None,
                values: 0,
                all_blocks: false,
            },
        }
    }

    /// Feeds the next bytes.
    pub(super) fn feed(&mut self, data: &[u8]) {
        let acc = &mut self.acc;
        self.carry.feed(data, |u| acc.values(u));
    }

    /// The 16-bit pattern histogram so far and its blocks that hold counts
    /// (empty before the first value; F16 patterns for F16 and F8, BF16
    /// ones for BF16, and the top halves of F32 and F64-narrowed-to-F32).
    pub(super) fn patterns(&self) -> (&[u32], stats::Blocks) {
        (&self.acc.hist, self.acc.blocks())
    }

    /// Findings and statistics once every byte has been fed.
    pub(super) fn finish(self, name: &str, findings: &mut Vec<Finding>) -> TensorStats {
        let mut acc = self.acc;
        acc.hist.resize(1 << 16, 0);
        acc.settle_blocks();
        let pattern = pattern_of(self.dtype);
        if !matches!(
            self.dtype,
            DenseDtype::F32 | DenseDtype::F64 | DenseDtype::Int(_)
        ) {
            acc.moments = stats::moments_of_patterns(&acc.hist, acc.blocks(), pattern);
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
        TensorStats {
            // F32 values (and F64 ones narrowed to F32) are binned by their
            // upper 16 bits, read as BF16.
            values: Some(stats::summarise_blocks(
                &acc.hist,
                acc.blocks(),
                pattern,
                &acc.moments,
            )),
            ..Default::default()
        }
    }
}

/// How the pattern histogram of `dtype` is read.
fn pattern_of(dtype: DenseDtype) -> Pattern16 {
    match dtype {
        DenseDtype::F16 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 => Pattern16::F16,
        DenseDtype::Bf16 | DenseDtype::F32 | DenseDtype::F64 | DenseDtype::Int(_) => {
            Pattern16::Bf16
        }
    }
}

impl Drop for DenseAcc {
    fn drop(&mut self) {
        let mut hist = std::mem::take(&mut self.hist);
        if hist.len() != 1 << 16 {
            return;
        }
        let blocks = self.blocks_of(&hist);
        for block in (0..256).filter(|&b| blocks.has(b)) {
            hist[block << 8..(block + 1) << 8].fill(0);
        }
        super::pool::give_cleared(hist);
    }
}

impl DenseAcc {
    fn blocks(&self) -> stats::Blocks {
        self.blocks_of(&self.hist)
    }

    /// Past [`MARKED_VALUES`], finds the blocks holding counts once and
    /// marks them, so the walks at the end and the clearing on drop read
    /// the marks rather than the histogram again.
    fn settle_blocks(&mut self) {
        if !self.all_blocks {
            return;
        }
        let found = stats::Blocks::holding(&self.hist);
        for (b, t) in self.touched.iter_mut().enumerate() {
            *t = found.has(b);
        }
        self.all_blocks = false;
    }

    /// The blocks of `hist` (this tensor's histogram) that may hold counts:
    /// the marked ones, or past [`MARKED_VALUES`] those found holding one.
    fn blocks_of(&self, hist: &[u32]) -> stats::Blocks {
        if self.all_blocks {
            stats::Blocks::holding(hist)
        } else {
            stats::Blocks::from_flags(&self.touched)
        }
    }

    fn values(&mut self, units: &[u8]) {
        if self.hist.is_empty() {
            self.hist = super::pool::take(1 << 16);
        }
        match self.dtype {
            DenseDtype::F16 | DenseDtype::Bf16 => {
                // The histogram alone: the moments come from it at the end
                // (`moments_of_patterns`), and a value is non-finite exactly
                // when its exponent bits are all ones.
                let exp: u16 = if self.dtype == DenseDtype::Bf16 {
                    0x7f80
                } else {
                    0x7c00
                };
                let Ok(hist) = <&mut [u32; 1 << 16]>::try_from(&mut self.hist[..]) else {
                    return;
                };
                // Past the first values, the blocks holding counts are
                // found in the histogram at the end (`Blocks::holding`) and
                // the loop is the histogram alone.
                let mark = !self.all_blocks;
                for (b, block) in units.chunks(2 * BLOCK).enumerate() {
                    let mut bad = false;
                    if mark {
                        for s in block.as_chunks::<2>().0 {
                            let h = u16::from_le_bytes(*s);
                            hist[usize::from(h)] += 1;
                            self.touched[usize::from(h >> 8)] = true;
                            bad |= h & exp == exp;
                        }
                    } else {
                        for s in block.as_chunks::<2>().0 {
                            let h = u16::from_le_bytes(*s);
                            hist[usize::from(h)] += 1;
                            bad |= h & exp == exp;
                        }
                    }
                    if bad && self.first_bad.is_none() {
                        let i = block
                            .chunks_exact(2)
                            .position(|s| u16::from_le_bytes([s[0], s[1]]) & exp == exp)
                            .unwrap_or(0);
                        let at = 2 * (b * BLOCK + i) as u64;
                        self.first_bad = Some(self.start + self.pos + at);
                    }
                }
                self.values += (units.len() / 2) as u64;
                if self.values >= MARKED_VALUES {
                    self.all_blocks = true;
                }
            }
            DenseDtype::F32 => {
                for (i, s) in units.chunks_exact(4).enumerate() {
                    let x = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    self.hist[(x >> 16) as usize] += 1;
                    // Only the blocks that hold counts are walked at the end
                    // (a GGUF of 32,768 one-value tensors walked 2^31 cells).
                    self.touched[(x >> 24) as usize] = true;
                    let v = f32::from_bits(x);
                    if !v.is_finite() && self.first_bad.is_none() {
                        self.first_bad = Some(self.start + self.pos + 4 * i as u64);
                    }
                    self.moments.push(v);
                }
            }
            DenseDtype::F8E4m3 | DenseDtype::F8E5m2 => self.f8(units),
            DenseDtype::F64 => {
                for (i, s) in units.as_chunks::<8>().0.iter().enumerate() {
                    let v = f64::from_le_bytes(*s);
                    // Binned as the F32 it narrows to (F32's binning); the
                    // moments and the finiteness are the F64's own.
                    let x = (v as f32).to_bits();
                    self.hist[(x >> 16) as usize] += 1;
                    self.touched[(x >> 24) as usize] = true;
                    if !v.is_finite() && self.first_bad.is_none() {
                        self.first_bad = Some(self.start + self.pos + 8 * i as u64);
                    }
                    self.moments.push_f64(v);
                }
            }
            DenseDtype::Int(t) => {
                // Binned as the F32 the integer rounds to; the moments at
                // F64 precision. Never non-finite.
                for s in units.chunks_exact(t.size() as usize) {
                    let x = t.to_f32(s).to_bits();
                    self.hist[(x >> 16) as usize] += 1;
                    self.touched[(x >> 24) as usize] = true;
                    self.moments.push_f64(t.to_f64(s));
                }
            }
        }
        self.pos += units.len() as u64;
    }

    /// F8 bytes: each counted at the F16 pattern holding its value (E5M2
    /// is an F16's top byte; E4M3 goes through a table), so the moments
    /// and bins come from the histogram as F16's do. E4M3 ("fn") is NaN at
    /// 0x7F/0xFF and has no infinities; E5M2 is non-finite when its
    /// exponent bits (0x7C) are all ones.
    fn f8(&mut self, units: &[u8]) {
        let Ok(hist) = <&mut [u32; 1 << 16]>::try_from(&mut self.hist[..]) else {
            return;
        };
        let e4m3 = self.dtype == DenseDtype::F8E4m3;
        let is_bad = |b: u8| {
            if e4m3 {
                b & 0x7f == 0x7f
            } else {
                b & 0x7c == 0x7c
            }
        };
        for (k, block) in units.chunks(BLOCK).enumerate() {
            let mut bad = false;
            if e4m3 {
                for &b in block {
                    let h = F8_E4M3_AS_F16[usize::from(b)];
                    hist[usize::from(h)] += 1;
                    self.touched[usize::from(h >> 8)] = true;
                    bad |= b & 0x7f == 0x7f;
                }
            } else {
                for &b in block {
                    hist[usize::from(b) << 8] += 1;
                    self.touched[usize::from(b)] = true;
                    bad |= b & 0x7c == 0x7c;
                }
            }
            if bad && self.first_bad.is_none() {
                let i = block.iter().position(|&b| is_bad(b)).unwrap_or(0);
                self.first_bad = Some(self.start + self.pos + (k * BLOCK + i) as u64);
            }
        }
    }
}
