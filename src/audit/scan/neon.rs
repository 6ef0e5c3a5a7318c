//! NEON kernels of the code tally, for aarch64 (Apple Silicon): the same
//! counts as the portable kernel, by the method of the AVX2 kernels
//! (`avx2.rs`) on 128-bit vectors.
//!
//! A group's 64 codes are brought into two 128-bit vectors of 4-bit fields
//! (4-bit codes already are; 3-bit codes are spread out), then each nibble
//! is looked up (`tbl`) in a table that maps code `c` to a one in the 2-bit
//! field `c % 4` of a byte, one table per four codes. Adding the low and high
//! nibbles' lookups gives per-byte counts of at most 2 per field; both
//! halves of a group add to the same accumulators (at most 4 per field a
//! group), which are widened into 4-bit fields and summed over up to
//! [`BLOCK_GROUPS`] groups (at most 12, so they cannot overflow), then added
//! across the vector into the u64 totals.

use std::arch::aarch64::*;

use super::tally::Counted;
use crate::format::PackedKind;

/// Groups summed into 4-bit fields before they are widened: each group adds
/// at most 4 per field, and 3 × 4 = 12 fits in 4 bits.
const BLOCK_GROUPS: usize = 3;

/// Counts the codes and zero groups of `units` (whole groups; a partial one
/// at the end is ignored). NEON is part of every aarch64 CPU.
pub(super) fn count(kind: PackedKind, units: &[u8], zero_group: &[u8; 32]) -> Counted {
    // SAFETY: these functions need NEON, which every aarch64 target has
    // enabled (it is part of the architecture's baseline).
    unsafe {
        match kind {
            PackedKind::Q4 => count_q4(units, zero_group),
            PackedKind::Q3 | PackedKind::Q3Full8 => count_q3(units, zero_group),
        }
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn load16(bytes: &[u8; 16]) -> uint8x16_t {
    // SAFETY: `bytes` is 16 readable bytes, and this load needs no alignment.
    unsafe { vld1q_u8(bytes.as_ptr()) }
}

/// Bytes `at..at + 16` of `g`.
#[inline]
#[target_feature(enable = "neon")]
fn load_at<const N: usize>(g: &[u8; N], at: usize) -> uint8x16_t {
    let mut b = [0u8; 16];
    b.copy_from_slice(&g[at..at + 16]);
    load16(&b)
}

/// The eight 3-byte units of a 3-bit group, four per vector, one per
/// 32-bit lane (top byte 0).
#[inline]
#[target_feature(enable = "neon")]
fn load_q3(g: &[u8; 24]) -> [uint8x16_t; 2] {
    // Units 0..4 are bytes 0..12 of the first 16 bytes; units 4..8 are
    // bytes 4..16 of bytes 8..24. Index 0xff gives 0.
    let units_lo = load16(&[0, 1, 2, 0xff, 3, 4, 5, 0xff, 6, 7, 8, 0xff, 9, 10, 11, 0xff]);
    let units_hi = load16(&[
        4, 5, 6, 0xff, 7, 8, 9, 0xff, 10, 11, 12, 0xff, 13, 14, 15, 0xff,
    ]);
    [
        vqtbl1q_u8(load_at(g, 0), units_lo),
        vqtbl1q_u8(load_at(g, 8), units_hi),
    ]
}

/// The lookup table for codes `4k..4k + 4`: code `c` to `1 << 2 * (c - 4k)`.
#[target_feature(enable = "neon")]
fn field_table(k: usize) -> uint8x16_t {
    let mut t = [0u8; 16];
    for (c, v) in t.iter_mut().enumerate() {
        if c / 4 == k {
            *v = 1 << (2 * (c % 4));
        }
    }
    load16(&t)
}

/// Counts of `T` tables' codes (4 each) over a block of groups, in 4-bit
/// fields: `acc[2k]` holds codes 4k (low nibble) and 4k + 2 (high nibble),
/// `acc[2k + 1]` codes 4k + 1 and 4k + 3.
struct Fields<const T: usize> {
    tables: [uint8x16_t; T],
    /// Accumulators in pairs, one pair per table (pairs past `T` unused).
    acc: [uint8x16_t; 8],
    counts: [u64; 16],
}

impl<const T: usize> Fields<T> {
    #[target_feature(enable = "neon")]
    fn new() -> Self {
        Self {
            tables: std::array::from_fn(|k| field_table(k)),
            acc: [vdupq_n_u8(0); 8],
            counts: [0; 16],
        }
    }

    /// Adds the 32 codes in the nibbles of `lo` and `hi` (each byte < 16).
    #[inline]
    #[target_feature(enable = "neon")]
    fn add(&mut self, lo: uint8x16_t, hi: uint8x16_t) {
        let m33 = vdupq_n_u8(0x33);
        for (table, [even, odd]) in self.tables.iter().zip(self.acc.as_chunks_mut::<2>().0) {
            let s = vaddq_u8(vqtbl1q_u8(*table, lo), vqtbl1q_u8(*table, hi));
            *even = vaddq_u8(*even, vandq_u8(s, m33));
            *odd = vaddq_u8(*odd, vandq_u8(vshrq_n_u8::<2>(s), m33));
        }
    }

    /// Moves the 4-bit fields into the u64 totals; due every [`BLOCK_GROUPS`] groups.
    #[inline]
    #[target_feature(enable = "neon")]
    fn widen(&mut self) {
        let m0f = vdupq_n_u8(0x0f);
        for (i, acc) in self.acc.iter_mut().take(2 * T).enumerate() {
            // acc[i] (k = i / 2, h = i % 2) holds codes 4k + h and 4k + h + 2.
            let code = 4 * (i / 2) + i % 2;
            let low = vaddlvq_u8(vandq_u8(*acc, m0f));
            let high = vaddlvq_u8(vshrq_n_u8::<4>(*acc));
            if let Some(n) = self.counts.get_mut(code) {
                *n += u64::from(low);
            }
            if let Some(n) = self.counts.get_mut(code + 2) {
                *n += u64::from(high);
            }
            *acc = vdupq_n_u8(0);
        }
    }
}

/// Is every byte of `a` and `b` equal to the same byte of `za` and `zb`?
#[inline]
#[target_feature(enable = "neon")]
fn all_equal(a: uint8x16_t, b: uint8x16_t, za: uint8x16_t, zb: uint8x16_t) -> bool {
    vminvq_u8(vandq_u8(vceqq_u8(a, za), vceqq_u8(b, zb))) == 0xff
}

/// Counts the groups of `units`, each loaded by `load` into two vectors that
/// equal `zero` for a zero group, and split by `nibbles` into the low and
/// high nibbles holding its codes.
#[inline]
#[target_feature(enable = "neon")]
fn count_groups<const N: usize, const T: usize>(
    units: &[u8],
    zero: [uint8x16_t; 2],
    load: impl Fn(&[u8; N]) -> [uint8x16_t; 2],
    nibbles: impl Fn(uint8x16_t) -> (uint8x16_t, uint8x16_t),
) -> Counted {
    let mut fields = Fields::<T>::new();
    let mut zero_groups = 0;
    for block in units.as_chunks::<N>().0.chunks(BLOCK_GROUPS) {
        for g in block {
            let [a, b] = load(g);
            zero_groups += u64::from(all_equal(a, b, zero[0], zero[1]));
            for v in [a, b] {
                let (lo, hi) = nibbles(v);
                fields.add(lo, hi);
            }
        }
        fields.widen();
    }
    Counted {
        counts: fields.counts,
        zero_groups,
    }
}

#[target_feature(enable = "neon")]
fn count_q4(units: &[u8], zero_group: &[u8; 32]) -> Counted {
    let m0f = vdupq_n_u8(0x0f);
    let halves = |g: &[u8; 32]| [load_at(g, 0), load_at(g, 16)];
    count_groups::<32, 4>(units, halves(zero_group), halves, |v| {
        (vandq_u8(v, m0f), vshrq_n_u8::<4>(v))
    })
}

#[target_feature(enable = "neon")]
fn count_q3(units: &[u8], zero_group: &[u8; 32]) -> Counted {
    let m07 = vdupq_n_u8(0x07);
    let zero = load_q3(&std::array::from_fn(|i| zero_group[i]));
    count_groups::<24, 2>(
        units,
        zero,
        |g| load_q3(g),
        |v| {
            // Code k of a unit sits at bits 3k..3k + 3; split the 24 bits into
            // 12-bit halves 16 bits apart, then those into 6-bit quarters 8 bits
            // apart: every byte then holds two codes, at bits 0..3 and 3..6.
            let u = vreinterpretq_u32_u8(v);
            let halves = vorrq_u32(
                vandq_u32(u, vdupq_n_u32(0x0000_0fff)),
                vshlq_n_u32::<4>(vandq_u32(u, vdupq_n_u32(0x00ff_f000))),
            );
            let quarters = vorrq_u32(
                vandq_u32(halves, vdupq_n_u32(0x003f_003f)),
                vshlq_n_u32::<2>(vandq_u32(halves, vdupq_n_u32(0x0fc0_0fc0))),
            );
            let q = vreinterpretq_u8_u32(quarters);
            (vandq_u8(q, m07), vshrq_n_u8::<3>(q))
        },
    )
}
