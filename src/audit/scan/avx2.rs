//! AVX2 kernels of the code tally: the same counts as the portable kernel,
//! at a fraction of the instructions per byte, so that one scanning thread
//! outruns the SHA-256 stream it runs beside.
//!
//! The 64 codes of a group are brought into one 256-bit vector of 4-bit
//! fields (4-bit codes already are; 3-bit codes are spread out), then each
//! nibble is looked up (`vpshufb`) in a table that maps code `c` to a one in
//! the 2-bit field `c % 4` of a byte, one table per four codes. Adding the
//! low and high nibbles' lookups gives per-byte counts of at most 2 per
//! field; these are widened into 4-bit fields and summed over up to
//! [`BLOCK_GROUPS`] groups (at most 14, so they cannot overflow), then into
//! u64 lanes with `vpsadbw`.

use std::arch::x86_64::*;

use super::tally::Counted;
use crate::format::PackedKind;

/// Groups summed into 4-bit fields before they are widened: each group adds
/// at most 2 per field, and 7 × 2 = 14 fits in 4 bits.
const BLOCK_GROUPS: usize = 7;

/// Counts the codes and zero groups of `units` (whole groups; a partial one
/// at the end is ignored), or `None` when the CPU has no AVX2.
pub(super) fn count(kind: PackedKind, units: &[u8], zero_group: &[u8; 32]) -> Option<Counted> {
    if !std::arch::is_x86_feature_detected!("avx2") {
        return None;
    }
    // SAFETY: the only requirement of these functions is a CPU with AVX2,
    // detected just above.
    Some(unsafe {
        match kind {
            PackedKind::Q4 => count_q4(units, zero_group),
            PackedKind::Q3 | PackedKind::Q3Full8 => count_q3(units, zero_group),
        }
    })
}

#[inline]
#[target_feature(enable = "avx2")]
fn load_q4(g: &[u8; 32]) -> __m256i {
    // SAFETY: `g` is 32 readable bytes, and this load needs no alignment.
    unsafe { _mm256_loadu_si256(g.as_ptr().cast()) }
}

/// The eight 3-byte units of a 3-bit group, one per 32-bit lane (top byte 0).
#[inline]
#[target_feature(enable = "avx2")]
fn load_q3(g: &[u8; 24]) -> __m256i {
    // SAFETY: `g` is 24 readable bytes; the loads read bytes 0..16 and
    // 8..24, and need no alignment.
    let (lo, hi) = unsafe {
        (
            _mm_loadu_si128(g.as_ptr().cast()),
            _mm_loadu_si128(g.as_ptr().add(8).cast()),
        )
    };
    // Units 0..4 are bytes 0..12 of `lo`; units 4..8 are bytes 4..16 of `hi`.
    let units = _mm256_setr_epi8(
        0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, //
        4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1,
    );
    _mm256_shuffle_epi8(_mm256_set_m128i(hi, lo), units)
}

/// The lookup table for codes `4k..4k + 4`: code `c` to `1 << 2 * (c - 4k)`.
#[inline]
#[target_feature(enable = "avx2")]
fn field_table(k: usize) -> __m256i {
    let mut t = [0i8; 16];
    for (c, v) in t.iter_mut().enumerate() {
        if c / 4 == k {
            *v = 1 << (2 * (c % 4));
        }
    }
    let half = _mm_setr_epi8(
        t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13],
        t[14], t[15],
    );
    _mm256_set_m128i(half, half)
}

/// Counts of `T` tables' codes (4 each) over a block of groups, in 4-bit
/// fields: `acc[2k]` holds codes 4k (low nibble) and 4k + 2 (high nibble),
/// `acc[2k + 1]` codes 4k + 1 and 4k + 3.
struct Fields<const T: usize> {
    tables: [__m256i; T],
    /// Accumulators in pairs, one pair per table (`[T; 2]` arrays cannot
    /// be sized by `T` on stable Rust, so pairs past `T` stay unused).
    acc: [__m256i; 8],
    /// u64 lanes of each code's count; summed at the end.
    totals: [__m256i; 16],
}

impl<const T: usize> Fields<T> {
    #[inline]
    #[target_feature(enable = "avx2")]
    fn new() -> Self {
        Self {
            tables: std::array::from_fn(|k| field_table(k)),
            acc: [_mm256_setzero_si256(); 8],
            totals: [_mm256_setzero_si256(); 16],
        }
    }

    /// Adds the 64 codes in the nibbles of `lo` and `hi` (each byte < 16).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn add(&mut self, lo: __m256i, hi: __m256i) {
        let m33 = _mm256_set1_epi8(0x33);
        for (table, [even, odd]) in self.tables.iter().zip(self.acc.as_chunks_mut::<2>().0) {
            let s = _mm256_add_epi8(
                _mm256_shuffle_epi8(*table, lo),
                _mm256_shuffle_epi8(*table, hi),
            );
            *even = _mm256_add_epi8(*even, _mm256_and_si256(s, m33));
            *odd = _mm256_add_epi8(*odd, _mm256_and_si256(_mm256_srli_epi16(s, 2), m33));
        }
    }

    /// Moves the 4-bit fields into the u64 totals; due every [`BLOCK_GROUPS`] groups.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn widen(&mut self) {
        let (m0f, zero) = (_mm256_set1_epi8(0x0f), _mm256_setzero_si256());
        for (i, acc) in self.acc.iter_mut().take(2 * T).enumerate() {
            // acc[i] (k = i / 2, h = i % 2) holds codes 4k + h and 4k + h + 2.
            let code = 4 * (i / 2) + i % 2;
            let low = _mm256_sad_epu8(_mm256_and_si256(*acc, m0f), zero);
            let high = _mm256_sad_epu8(_mm256_and_si256(_mm256_srli_epi16(*acc, 4), m0f), zero);
            if let Some(t) = self.totals.get_mut(code) {
                *t = _mm256_add_epi64(*t, low);
            }
            if let Some(t) = self.totals.get_mut(code + 2) {
                *t = _mm256_add_epi64(*t, high);
            }
            *acc = zero;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn counts(&self) -> [u64; 16] {
        self.totals.map(|t| {
            let lanes = [
                _mm256_extract_epi64::<0>(t),
                _mm256_extract_epi64::<1>(t),
                _mm256_extract_epi64::<2>(t),
                _mm256_extract_epi64::<3>(t),
            ];
            lanes.iter().map(|&n| n as u64).sum()
        })
    }
}

/// Is every byte of `v` equal to the same byte of `zero`?
#[inline]
#[target_feature(enable = "avx2")]
fn all_equal(v: __m256i, zero: __m256i) -> bool {
    _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero)) == -1
}

/// Counts the groups of `units`, each loaded by `load` into a vector that
/// equals `zero` for a zero group, and split by `nibbles` into the low and
/// high nibbles holding its 64 codes.
#[inline]
#[target_feature(enable = "avx2")]
fn count_groups<const N: usize, const T: usize>(
    units: &[u8],
    zero: __m256i,
    load: impl Fn(&[u8; N]) -> __m256i,
    nibbles: impl Fn(__m256i) -> (__m256i, __m256i),
) -> Counted {
    let mut fields = Fields::<T>::new();
    let mut zero_groups = 0;
    for block in units.as_chunks::<N>().0.chunks(BLOCK_GROUPS) {
        for g in block {
            let v = load(g);
            zero_groups += u64::from(all_equal(v, zero));
            let (lo, hi) = nibbles(v);
            fields.add(lo, hi);
        }
        fields.widen();
    }
    Counted {
        counts: fields.counts(),
        zero_groups,
    }
}

#[target_feature(enable = "avx2")]
fn count_q4(units: &[u8], zero_group: &[u8; 32]) -> Counted {
    let m0f = _mm256_set1_epi8(0x0f);
    count_groups::<32, 4>(
        units,
        load_q4(zero_group),
        |g| load_q4(g),
        |v| {
            (
                _mm256_and_si256(v, m0f),
                _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f),
            )
        },
    )
}

#[target_feature(enable = "avx2")]
fn count_q3(units: &[u8], zero_group: &[u8; 32]) -> Counted {
    let m07 = _mm256_set1_epi8(0x07);
    let zero = load_q3(&std::array::from_fn(|i| zero_group[i]));
    count_groups::<24, 2>(
        units,
        zero,
        |g| load_q3(g),
        |u| {
            // Code k of a unit sits at bits 3k..3k + 3; split the 24 bits into
            // 12-bit halves 16 bits apart, then those into 6-bit quarters 8 bits
            // apart: every byte then holds two codes, at bits 0..3 and 3..6.
            let halves = _mm256_or_si256(
                _mm256_and_si256(u, _mm256_set1_epi32(0x0000_0fff)),
                _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x00ff_f000)), 4),
            );
            let quarters = _mm256_or_si256(
                _mm256_and_si256(halves, _mm256_set1_epi32(0x003f_003f)),
                _mm256_slli_epi32(_mm256_and_si256(halves, _mm256_set1_epi32(0x0fc0_0fc0)), 2),
            );
            (
                _mm256_and_si256(quarters, m07),
                _mm256_and_si256(_mm256_srli_epi16(quarters, 3), m07),
            )
        },
    )
}
