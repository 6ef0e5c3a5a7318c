//! The code tally of packed tensors: per-byte (q4) or per-12-bit (q3)
//! histograms in interleaved u32 tables, reserved-code detection, and the
//! split of large pieces over rayon with results identical to a sequential scan.

use crate::decode;
use crate::format::PackedKind;

pub(super) const LO_NIBBLES: u64 = 0x0f0f_0f0f_0f0f_0f0f;
pub(super) const ONES: u64 = 0x0101_0101_0101_0101;
pub(super) const BIT4: u64 = 0x1010_1010_1010_1010;

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

/// Code bytes fed at once above which a scanner splits them over rayon's
/// threads: below it the split costs more than it saves.
pub(super) const PARALLEL_MIN_BYTES: usize = 2 << 20;

/// Bytes one tally takes between emptying its u32 sub-tables into u64
/// totals, so no sub-table count can overflow. A multiple of both group sizes.
pub(super) const FLUSH_BYTES: u64 = 3 << 28;

/// What a scanner needs to know to tally a run of code groups.
pub(super) struct CodeCtx<'a> {
    pub(super) kind: PackedKind,
    /// Absolute offset of the tensor's first byte.
    pub(super) start: u64,
    /// The bytes of a group whose 64 codes are all the zero level.
    pub(super) zero_group: &'a [u8],
}

/// Counting tables. Several interleaved tables break the store-to-load
/// chain a single table suffers when one pattern repeats (the zero level,
/// above all); u32 cells keep them small enough for L1.
pub(super) enum Sub {
    /// Four tables of byte values (two 4-bit codes each).
    Q4(Box<[[u32; 256]; 4]>),
    /// Two tables of 12-bit halves of 3-byte units (four 3-bit codes each).
    Q3(Box<[[u32; 4096]; 2]>),
}

/// The code statistics of a run of whole groups. Runs tallied apart (on
/// different threads) and merged in order give exactly what one sequential
/// tally of the same bytes gives.
pub(super) struct CodeTally {
    pub(super) sub: Sub,
    /// Bytes counted into `sub` since it was last emptied into `hist`.
    pub(super) pending: u64,
    /// q4: counts of byte values; q3: counts of 12-bit halves.
    pub(super) hist: Vec<u64>,
    pub(super) zero_groups: u64,
    /// Absolute byte offset and tensor-relative code index of the first reserved code.
    pub(super) first_reserved: Option<(u64, u64)>,
}

impl CodeTally {
    pub(super) fn new(kind: PackedKind) -> Self {
        let (sub, cells) = match kind {
            PackedKind::Q4 => (Sub::Q4(Box::new([[0; 256]; 4])), 256),
            PackedKind::Q3 | PackedKind::Q3Full8 => (Sub::Q3(Box::new([[0; 4096]; 2])), 4096),
        };
        Self {
            sub,
            pending: 0,
            hist: vec![0; cells],
            zero_groups: 0,
            first_reserved: None,
        }
    }

    /// Tallies `units` (whole groups) that start `pos` bytes into the codes.
    pub(super) fn run(&mut self, ctx: &CodeCtx, mut pos: u64, units: &[u8]) {
        for part in units.chunks(FLUSH_BYTES as usize) {
            if self.pending + part.len() as u64 > u64::from(u32::MAX) {
                self.flush();
            }
            match ctx.kind {
                PackedKind::Q4 => self.q4(ctx, pos, part),
                PackedKind::Q3 | PackedKind::Q3Full8 => self.q3(ctx, pos, part),
            }
            self.pending += part.len() as u64;
            pos += part.len() as u64;
        }
    }

    pub(super) fn q4(&mut self, ctx: &CodeCtx, pos: u64, units: &[u8]) {
        let Sub::Q4(t) = &mut self.sub else { return };
        let (groups, _) = units.as_chunks::<32>();
        for (i, g) in groups.iter().enumerate() {
            for w in g.as_chunks::<8>().0 {
                let x = u64::from_le_bytes(*w);
                for k in 0..8 {
                    t[k & 3][((x >> (8 * k)) & 0xff) as usize] += 1;
                }
            }
            if self.first_reserved.is_none() && has_nibble_15(g) {
                self.first_reserved = locate_reserved(ctx, pos + 32 * i as u64, g);
            }
            if g.as_slice() == ctx.zero_group {
                self.zero_groups += 1;
            }
        }
    }

    pub(super) fn q3(&mut self, ctx: &CodeCtx, pos: u64, units: &[u8]) {
        let Sub::Q3(t) = &mut self.sub else { return };
        let (groups, _) = units.as_chunks::<24>();
        for (i, g) in groups.iter().enumerate() {
            let mut bad = false;
            for u in g.as_chunks::<3>().0 {
                let w = u32::from(u[0]) | u32::from(u[1]) << 8 | u32::from(u[2]) << 16;
                t[0][(w & 0xfff) as usize] += 1;
                t[1][(w >> 12) as usize] += 1;
                bad |= has_code_7(w);
            }
            if bad && ctx.kind == PackedKind::Q3 && self.first_reserved.is_none() {
                self.first_reserved = locate_reserved(ctx, pos + 24 * i as u64, g);
            }
            if g.as_slice() == ctx.zero_group {
                self.zero_groups += 1;
            }
        }
    }

    /// Empties the sub-tables into the u64 totals.
    pub(super) fn flush(&mut self) {
        match &mut self.sub {
            Sub::Q4(t) => drain(&mut self.hist, t.as_mut_slice()),
            Sub::Q3(t) => drain(&mut self.hist, t.as_mut_slice()),
        }
        self.pending = 0;
    }

    /// Adds a later run's tally to this one.
    pub(super) fn merge(&mut self, mut later: CodeTally) {
        later.flush();
        for (a, b) in self.hist.iter_mut().zip(&later.hist) {
            *a += b;
        }
        self.zero_groups += later.zero_groups;
        self.first_reserved = self.first_reserved.or(later.first_reserved);
    }

    /// The totals, sub-tables included, without emptying them.
    pub(super) fn totals(&self) -> Vec<u64> {
        let mut out = self.hist.clone();
        match &self.sub {
            Sub::Q4(t) => add_tables(&mut out, t.as_slice()),
            Sub::Q3(t) => add_tables(&mut out, t.as_slice()),
        }
        out
    }
}

pub(super) fn add_tables<const N: usize>(out: &mut [u64], tables: &[[u32; N]]) {
    for table in tables {
        for (o, &n) in out.iter_mut().zip(table) {
            *o += u64::from(n);
        }
    }
}

pub(super) fn drain<const N: usize>(out: &mut [u64], tables: &mut [[u32; N]]) {
    add_tables(out, tables);
    for table in tables {
        table.fill(0);
    }
}

/// Byte offset and code index of the first reserved code in group `g`,
/// which starts `pos` bytes into the codes.
pub(super) fn locate_reserved(ctx: &CodeCtx, pos: u64, g: &[u8]) -> Option<(u64, u64)> {
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
