//! The code tally of packed tensors: how often each code occurs, how many
//! groups hold only the zero level, and where the first reserved code is.
//! AVX2 kernels count where the CPU has them (see `avx2.rs`), NEON kernels
//! on aarch64 (`neon.rs`), a portable table-driven kernel elsewhere; all
//! give exactly the same tally, and runs tallied apart (on different
//! threads) and merged in order give exactly what one sequential tally of
//! the same bytes gives.

use crate::decode;
use crate::format::PackedKind;

const LO_NIBBLES: u64 = 0x0f0f_0f0f_0f0f_0f0f;
const ONES: u64 = 0x0101_0101_0101_0101;
const BIT4: u64 = 0x1010_1010_1010_1010;

/// Code bytes fed at once above which a scanner splits them over rayon's
/// threads: below it the split costs more than it saves.
pub(super) const PARALLEL_MIN_BYTES: usize = 2 << 20;

/// Bytes the portable kernel counts into its u32 tables before adding them
/// to the u64 totals, so no cell can overflow. A multiple of both group sizes.
#[cfg(any(test, not(target_arch = "aarch64")))]
const TABLE_BYTES: usize = 3 << 28;

/// Bytes of one group of 64 codes: 32 for 4-bit codes, 24 for 3-bit ones.
pub(super) fn group_bytes(kind: PackedKind) -> usize {
    64 * kind.bits() as usize / 8
}

/// What a scanner needs to know to tally a run of code groups.
pub(super) struct CodeCtx {
    pub(super) kind: PackedKind,
    /// Absolute offset of the tensor's first byte.
    pub(super) start: u64,
    /// The packed bytes of a group whose 64 codes are all the zero level
    /// (its first [`group_bytes`] bytes; the rest are zero).
    pub(super) zero_group: [u8; 32],
}

impl CodeCtx {
    pub(super) fn new(kind: PackedKind, start: u64) -> Self {
        let mut zero_group = [0u8; 32];
        let n = group_bytes(kind);
        decode::pack_row(&[kind.zero() as u8; 64], kind.bits(), &mut zero_group[..n]);
        Self {
            kind,
            start,
            zero_group,
        }
    }
}

/// What one kernel call counted.
pub(super) struct Counted {
    /// Occurrences of each code (only the first `1 << bits` can be non-zero).
    pub(super) counts: [u64; 16],
    /// Groups whose 64 codes are all the zero level.
    pub(super) zero_groups: u64,
}

/// The code statistics of a run of whole groups.
pub(super) struct CodeTally {
    /// Occurrences of each code (only the first `1 << bits` can be non-zero).
    pub(super) counts: [u64; 16],
    pub(super) zero_groups: u64,
    /// Absolute byte offset and tensor-relative code index of the first reserved code.
    pub(super) first_reserved: Option<(u64, u64)>,
}

impl CodeTally {
    pub(super) fn new() -> Self {
        Self {
            counts: [0; 16],
            zero_groups: 0,
            first_reserved: None,
        }
    }

    /// Tallies `units` (whole groups) that start `pos` bytes into the codes.
    pub(super) fn run(&mut self, ctx: &CodeCtx, pos: u64, units: &[u8]) {
        let counted = count(ctx, units);
        for (total, n) in self.counts.iter_mut().zip(counted.counts) {
            *total += n;
        }
        self.zero_groups += counted.zero_groups;
        let first_reserved = usize::from(ctx.kind.max_code()) + 1;
        let reserved: u64 = counted.counts.iter().skip(first_reserved).sum();
        // Only the first reserved code is located, so the slow search runs
        // at most once per run, and only over a run known to hold one.
        if reserved > 0 && self.first_reserved.is_none() {
            self.first_reserved = locate_first_reserved(ctx, pos, units);
        }
    }

    /// Adds a later run's tally to this one.
    pub(super) fn merge(&mut self, later: CodeTally) {
        for (a, b) in self.counts.iter_mut().zip(later.counts) {
            *a += b;
        }
        self.zero_groups += later.zero_groups;
        self.first_reserved = self.first_reserved.or(later.first_reserved);
    }
}

/// Counts codes and zero groups of `units` (whole groups) with the fastest
/// kernel this CPU runs.
pub(super) fn count(ctx: &CodeCtx, units: &[u8]) -> Counted {
    #[cfg(target_arch = "x86_64")]
    if let Some(counted) = super::avx2::count(ctx.kind, units, &ctx.zero_group) {
        return counted;
    }
    #[cfg(target_arch = "aarch64")]
    return super::neon::count(ctx.kind, units, &ctx.zero_group);
    #[cfg(not(target_arch = "aarch64"))]
    count_portable(ctx, units)
}

/// Occurrences of each 4-bit value over both nibbles of every byte of
/// `bytes`, whatever order the codes are packed in (MLX's LSB-first words
/// hold two codes a byte, as audio8's groups do): whole 32-byte units go
/// through the group kernel, the tail through a byte loop.
pub(super) fn nibble_counts(bytes: &[u8]) -> [u64; 16] {
    let whole = bytes.len() / 32 * 32;
    let ctx = CodeCtx::new(PackedKind::Q4, 0);
    let mut counts = count(&ctx, &bytes[..whole]).counts;
    for &b in &bytes[whole..] {
        counts[usize::from(b & 15)] += 1;
        counts[usize::from(b >> 4)] += 1;
    }
    counts
}

/// The kernel for CPUs without AVX2 or NEON (on aarch64 built for the
/// tests alone, which check NEON against it): per-byte (4-bit) or
/// per-12-bit (3-bit) histograms in interleaved u32 tables, which break the
/// store-to-load chain a single table suffers when one pattern repeats (the
/// zero level, above all), then folded into code counts.
#[cfg(any(test, not(target_arch = "aarch64")))]
pub(super) fn count_portable(ctx: &CodeCtx, units: &[u8]) -> Counted {
    let mut out = Counted {
        counts: [0; 16],
        zero_groups: 0,
    };
    for part in units.chunks(TABLE_BYTES) {
        match ctx.kind {
            PackedKind::Q4 => portable_q4(ctx, part, &mut out),
            PackedKind::Q3 | PackedKind::Q3Full8 => portable_q3(ctx, part, &mut out),
        }
    }
    out
}

#[cfg(any(test, not(target_arch = "aarch64")))]
fn portable_q4(ctx: &CodeCtx, units: &[u8], out: &mut Counted) {
    let mut t = [[0u32; 256]; 4];
    let zero = ctx.zero_group;
    for g in units.as_chunks::<32>().0 {
        for w in g.as_chunks::<4>().0 {
            t[0][usize::from(w[0])] += 1;
            t[1][usize::from(w[1])] += 1;
            t[2][usize::from(w[2])] += 1;
            t[3][usize::from(w[3])] += 1;
        }
        out.zero_groups += u64::from(*g == zero);
    }
    for table in &t {
        for (b, &n) in table.iter().enumerate() {
            out.counts[b & 15] += u64::from(n);
            out.counts[b >> 4] += u64::from(n);
        }
    }
}

#[cfg(any(test, not(target_arch = "aarch64")))]
fn portable_q3(ctx: &CodeCtx, units: &[u8], out: &mut Counted) {
    let mut t = [[0u32; 4096]; 2];
    let zero: [u8; 24] = std::array::from_fn(|i| ctx.zero_group[i]);
    for g in units.as_chunks::<24>().0 {
        for u in g.as_chunks::<3>().0 {
            let w = u32::from(u[0]) | u32::from(u[1]) << 8 | u32::from(u[2]) << 16;
            t[0][(w & 0xfff) as usize] += 1;
            t[1][(w >> 12) as usize] += 1;
        }
        out.zero_groups += u64::from(*g == zero);
    }
    for table in &t {
        for (p, &n) in table.iter().enumerate() {
            if n > 0 {
                for k in 0..4 {
                    out.counts[(p >> (3 * k)) & 7] += u64::from(n);
                }
            }
        }
    }
}

/// Does this slice (of whole 8-byte words, plus a tail) hold a 4-bit code 15?
#[inline]
pub(super) fn has_nibble_15(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let mut acc = 0u64;
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        let lo = x & LO_NIBBLES;
        let hi = (x >> 4) & LO_NIBBLES;
        acc |= ((lo + ONES) | (hi + ONES)) & BIT4;
    }
    acc != 0
        || words
            .remainder()
            .iter()
            .any(|b| b & 0x0f == 0x0f || b >> 4 == 0x0f)
}

/// Does this 24-bit unit hold a 3-bit code 7?
#[inline]
pub(super) fn has_code_7(w: u32) -> bool {
    w & (w >> 1) & (w >> 2) & 0x0024_9249 != 0
}

/// Byte offset and code index of the first reserved code in `units` (whole
/// groups starting `pos` bytes into the codes), if any.
fn locate_first_reserved(ctx: &CodeCtx, pos: u64, units: &[u8]) -> Option<(u64, u64)> {
    let size = group_bytes(ctx.kind);
    units.chunks_exact(size).enumerate().find_map(|(i, g)| {
        let suspect = match ctx.kind {
            PackedKind::Q4 => has_nibble_15(g),
            PackedKind::Q3 => g.as_chunks::<3>().0.iter().any(|u| {
                has_code_7(u32::from(u[0]) | u32::from(u[1]) << 8 | u32::from(u[2]) << 16)
            }),
            PackedKind::Q3Full8 => false,
        };
        if suspect {
            locate_reserved(ctx, pos + (i * size) as u64, g)
        } else {
            None
        }
    })
}

/// Byte offset and code index of the first reserved code in group `g`,
/// which starts `pos` bytes into the codes.
fn locate_reserved(ctx: &CodeCtx, pos: u64, g: &[u8]) -> Option<(u64, u64)> {
    let bits = ctx.kind.bits();
    let max = ctx.kind.max_code();
    (0..64).find_map(|j| {
        let code = decode::code_at(g, bits, j)?;
        let bit = j as u64 * u64::from(bits);
        (code > max).then(|| {
            (
                ctx.start + pos + bit / 8,
                pos * 8 / u64::from(bits) + j as u64,
            )
        })
    })
}
