//! Per-tensor scanners fed from the payload's chunks: the value checks and
//! the histograms of the single pass. A scanner sees its tensor's bytes in
//! order, in pieces of any size, and carries partial units across pieces.

mod tally;

use tally::*;

use rayon::prelude::*;

use crate::decode::stats::{self, CodeCounts, Moments, Pattern16, Quality, TensorStats};
use crate::decode::{self, f16_to_f32};
use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::{DenseDtype, Layout, PackedKind, TensorInfo};

/// Partial-unit carry: hands whole units of `unit` bytes to a callback,
/// keeping the tail of one piece until the next completes it.
struct Carry {
    buf: [u8; 32],
    len: usize,
    unit: usize,
}

impl Carry {
    fn new(unit: usize) -> Self {
        debug_assert!(unit <= 32 && unit > 0);
        Self {
            buf: [0; 32],
            len: 0,
            unit,
        }
    }

    fn feed(&mut self, mut data: &[u8], mut f: impl FnMut(&[u8])) {
        let unit = self.unit;
        if self.len > 0 {
            let take = (unit - self.len).min(data.len());
            self.buf[self.len..self.len + take].copy_from_slice(&data[..take]);
            self.len += take;
            data = &data[take..];
            if self.len < unit {
                return;
            }
            f(&self.buf[..unit]);
            self.len = 0;
        }
        let whole = data.len() / unit * unit;
        if whole > 0 {
            f(&data[..whole]);
        }
        let rest = &data[whole..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }
}

/// What a finished scanner learned.
pub struct ScanOutcome {
    /// Value findings (reserved codes, bad scales, non-finite values).
    pub findings: Vec<Finding>,
    /// Histograms and statistics.
    pub stats: TensorStats,
}

/// Scans one tensor's byte range.
pub struct Scanner {
    /// Index of the tensor in the bundle's index.
    pub tensor: usize,
    /// Absolute start offset in its file.
    pub start: u64,
    /// Absolute end offset (exclusive).
    pub end: u64,
    name: String,
    pos: u64,
    kind: Kind,
}

enum Kind {
    Packed(Box<Packed>),
    Dense(Box<Dense>),
    /// NVFP4 codes: every nibble is a valid E2M1 code, so the pass only
    /// hashes them; code histograms are computed when asked for.
    Codes,
    /// Stacked E4M3 scales: per-expert byte histograms, NaN bytes located.
    E4m3(Box<E4m3Scan>),
    /// Per-expert F32 global scales.
    Global(Box<GlobalScan>),
}

struct E4m3Scan {
    per_expert_bytes: u64,
    hists: Vec<[u64; 256]>,
    first_nan: Option<u64>,
}

struct GlobalScan {
    carry: Carry,
    values: Vec<f32>,
}

struct Packed {
    kind: PackedKind,
    codes_bytes: u64,
    groups_per_row: u64,
    rows: u64,
    codes: Carry,
    scales: Carry,
    acc: PackedAcc,
}

struct PackedAcc {
    start: u64,
    kind: PackedKind,
    codes_pos: u64,
    zero_group: Vec<u8>,
    tally: CodeTally,
    scale_hist: Vec<u32>,
    scale_index: u64,
    /// Row and group within it of the next scale (a division per scale costs
    /// more than the rest of its work).
    scale_row: usize,
    scale_in_row: u64,
    groups_per_row: u64,
    row_max: Vec<u16>,
    first_bad_scale: Option<(u64, u16)>,
}

struct Dense {
    dtype: DenseDtype,
    carry: Carry,
    acc: DenseAcc,
}

struct DenseAcc {
    start: u64,
    dtype: DenseDtype,
    pos: u64,
    hist: Vec<u32>,
    moments: Moments,
    first_bad: Option<u64>,
}

impl PackedAcc {
    fn codes(&mut self, units: &[u8]) {
        let ctx = CodeCtx {
            kind: self.kind,
            start: self.start,
            zero_group: &self.zero_group,
        };
        let threads = rayon::current_num_threads();
        if threads > 1 && units.len() >= PARALLEL_MIN_BYTES {
            // Pieces of whole groups, a few per thread so uneven cores even out.
            let group = ctx.zero_group.len().max(1);
            let piece = (units.len() / (threads * 4)).max(PARALLEL_MIN_BYTES / 4);
            let piece = piece.div_ceil(group) * group;
            let pos = self.codes_pos;
            let tallies: Vec<CodeTally> = units
                .par_chunks(piece)
                .enumerate()
                .map(|(i, part)| {
                    let mut t = CodeTally::new(ctx.kind);
                    t.run(&ctx, pos + (i * piece) as u64, part);
                    t
                })
                .collect();
            for t in tallies {
                self.tally.merge(t);
            }
        } else {
            self.tally.run(&ctx, self.codes_pos, units);
        }
        self.codes_pos += units.len() as u64;
    }

    fn scales(&mut self, units: &[u8], scales_start: u64) {
        for s in units.chunks_exact(2) {
            let h = u16::from_le_bytes([s[0], s[1]]);
            self.scale_hist[usize::from(h)] += 1;
            if decode::f16_is_positive_finite(h) {
                if let Some(m) = self.row_max.get_mut(self.scale_row) {
                    *m = (*m).max(h);
                }
            } else if self.first_bad_scale.is_none() {
                self.first_bad_scale = Some((scales_start + self.scale_index * 2, h));
            }
            self.scale_index += 1;
            self.scale_in_row += 1;
            if self.scale_in_row == self.groups_per_row {
                self.scale_in_row = 0;
                self.scale_row += 1;
            }
        }
    }

    fn code_counts(&self) -> CodeCounts {
        let mut counts = vec![0u64; 1 << self.kind.bits()];
        let hist = self.tally.totals();
        match self.kind {
            PackedKind::Q4 => {
                for (b, &n) in hist.iter().enumerate() {
                    counts[b & 15] += n;
                    counts[b >> 4] += n;
                }
            }
            _ => {
                for (p, &n) in hist.iter().enumerate() {
                    if n > 0 {
                        for k in 0..4 {
                            counts[(p >> (3 * k)) & 7] += n;
                        }
                    }
                }
            }
        }
        CodeCounts {
            bits: self.kind.bits(),
            zero: self.kind.zero(),
            max_code: self.kind.max_code(),
            counts,
        }
    }
}

impl DenseAcc {
    fn values(&mut self, units: &[u8]) {
        match self.dtype {
            DenseDtype::F16 | DenseDtype::Bf16 => {
                let bf16 = self.dtype == DenseDtype::Bf16;
                // Converted a block at a time: `half`'s slice conversion is
                // vectorised where the per-value one is not.
                let mut values = [0f32; 512];
                for (b, block) in units.chunks(2 * values.len()).enumerate() {
                    let values = &mut values[..block.len() / 2];
                    decode::halves_to_f32(bf16, block, values);
                    for (i, (s, &v)) in block.chunks_exact(2).zip(values.iter()).enumerate() {
                        self.hist[usize::from(u16::from_le_bytes([s[0], s[1]]))] += 1;
                        if !v.is_finite() && self.first_bad.is_none() {
                            let at = 2 * (b * 512 + i) as u64;
                            self.first_bad = Some(self.start + self.pos + at);
                        }
                        self.moments.push(v);
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

impl Scanner {
    /// A scanner for tensor `index`, if its metadata passed and it has bytes.
    pub fn for_tensor(index: usize, t: &TensorInfo) -> Option<Self> {
        let layout = t.layout?;
        let (start, end) = t.range()?;
        let kind = match layout {
            Layout::Dense { dtype, .. } => Kind::Dense(Box::new(Dense {
                dtype,
                carry: Carry::new(dtype.size() as usize),
                acc: DenseAcc {
                    start,
                    dtype,
                    pos: 0,
                    hist: vec![0; 1 << 16],
                    moments: Moments::default(),
                    first_bad: None,
                },
            })),
            Layout::Packed { kind, rows, cols } => {
                let bits = kind.bits();
                let group = (64 * bits / 8) as usize;
                let mut zero_group = vec![0u8; group];
                decode::pack_row(&[kind.zero() as u8; 64], bits, &mut zero_group);
                Kind::Packed(Box::new(Packed {
                    kind,
                    codes_bytes: layout.codes_bytes(),
                    groups_per_row: cols / 64,
                    rows,
                    codes: Carry::new(group),
                    scales: Carry::new(2),
                    acc: PackedAcc {
                        start,
                        kind,
                        codes_pos: 0,
                        zero_group,
                        tally: CodeTally::new(kind),
                        scale_hist: vec![0; 1 << 16],
                        scale_index: 0,
                        scale_row: 0,
                        scale_in_row: 0,
                        groups_per_row: cols / 64,
                        // rows is bounded (<= 262144) by the metadata checks.
                        row_max: vec![0; rows as usize],
                        first_bad_scale: None,
                    },
                }))
            }
            Layout::Fp4 { .. } => Kind::Codes,
            Layout::E4m3 {
                experts,
                rows,
                groups,
            } => Kind::E4m3(Box::new(E4m3Scan {
                per_expert_bytes: (rows * groups).max(1),
                // experts is bounded (<= 1024) by the metadata checks.
                hists: vec![[0u64; 256]; experts as usize],
                first_nan: None,
            })),
            Layout::GlobalScale { experts } => Kind::Global(Box::new(GlobalScan {
                carry: Carry::new(4),
                values: Vec::with_capacity(experts as usize),
            })),
        };
        Some(Self {
            tensor: index,
            start,
            end,
            name: t.name.clone(),
            pos: 0,
            kind,
        })
    }

    /// Bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.end - self.start - self.pos
    }

    /// Feeds the next bytes of the tensor (never more than [`Self::remaining`]).
    pub fn feed(&mut self, mut data: &[u8]) {
        let remaining = self.remaining();
        if data.len() as u64 > remaining {
            data = &data[..remaining as usize];
        }
        match &mut self.kind {
            Kind::Dense(d) => {
                let acc = &mut d.acc;
                d.carry.feed(data, |u| acc.values(u));
            }
            Kind::Codes => {}
            Kind::E4m3(e) => {
                let mut pos = self.pos;
                let mut rest = data;
                while !rest.is_empty() {
                    let expert = (pos / e.per_expert_bytes) as usize;
                    let left = e.per_expert_bytes - pos % e.per_expert_bytes;
                    let n = (left as usize).min(rest.len());
                    let Some(h) = e.hists.get_mut(expert) else {
                        break;
                    };
                    byte_hist(&rest[..n], h);
                    if e.first_nan.is_none() && h[0x7f] + h[0xff] > 0 {
                        e.first_nan = rest[..n]
                            .iter()
                            .position(|&b| b & 0x7f == 0x7f)
                            .map(|k| self.start + pos + k as u64);
                    }
                    pos += n as u64;
                    rest = &rest[n..];
                }
            }
            Kind::Global(g) => {
                let values = &mut g.values;
                g.carry.feed(data, |u| {
                    values.extend(
                        u.chunks_exact(4)
                            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                    );
                });
            }
            Kind::Packed(p) => {
                let mut rest = data;
                if self.pos < p.codes_bytes {
                    let n = ((p.codes_bytes - self.pos) as usize).min(rest.len());
                    let acc = &mut p.acc;
                    p.codes.feed(&rest[..n], |u| acc.codes(u));
                    rest = &rest[n..];
                }
                if !rest.is_empty() {
                    let scales_start = self.start + p.codes_bytes;
                    let acc = &mut p.acc;
                    p.scales.feed(rest, |u| acc.scales(u, scales_start));
                }
            }
        }
        self.pos += data.len() as u64;
    }

    /// Findings and statistics, once every byte has been fed.
    pub fn finish(self) -> ScanOutcome {
        let name = self.name;
        let mut findings = Vec::new();
        let stats = match self.kind {
            Kind::Codes => TensorStats::default(),
            Kind::E4m3(e) => {
                let e4 = stats::E4m3Stats::from_hists(&e.hists);
                if e4.nan > 0 {
                    let at = e.first_nan.unwrap_or(self.start);
                    let index = at - self.start;
                    findings.push(
                        Finding::error(
                            c::E4M3_SCALES,
                            format!(
                                "{} E4M3 scale bytes are NaN (0x7F/0xFF); the first is in expert {}, byte {} of its scales",
                                e4.nan,
                                index / e.per_expert_bytes,
                                index % e.per_expert_bytes
                            ),
                        )
                        .tensor(&name)
                        .offset(at),
                    );
                }
                TensorStats {
                    e4m3: Some(e4),
                    ..Default::default()
                }
            }
            Kind::Global(g) => {
                let bad: Vec<(usize, f32)> = g
                    .values
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|(_, v)| !(v.is_finite() && *v > 0.0))
                    .collect();
                if let Some(&(i, v)) = bad.first() {
                    findings.push(
                        Finding::error(
                            c::GLOBAL_SCALE,
                            format!(
                                "{} of {} global scales are not finite and > 0; expert {i}'s is {v}",
                                bad.len(),
                                g.values.len()
                            ),
                        )
                        .tensor(&name)
                        .offset(self.start + 4 * i as u64),
                    );
                }
                TensorStats {
                    global_scales: Some(g.values.iter().map(|&v| f64::from(v)).collect()),
                    ..Default::default()
                }
            }
            Kind::Dense(d) => {
                let acc = d.acc;
                if let Some(at) = acc.first_bad {
                    let index = (at - acc.start) / d.dtype.size();
                    findings.push(
                        Finding::error(
                            c::DENSE_FINITE,
                            format!(
                                "{} of {} {} values are NaN or infinite; the first is element {index}",
                                acc.moments.nonfinite,
                                acc.moments.count,
                                d.dtype.as_str()
                            ),
                        )
                        .tensor(&name)
                        .offset(at),
                    );
                }
                let pattern = match d.dtype {
                    DenseDtype::F16 => Pattern16::F16,
                    _ => Pattern16::Bf16,
                };
                TensorStats {
                    values: Some(stats::summarise_values(&acc.hist, pattern, &acc.moments)),
                    ..Default::default()
                }
            }
            Kind::Packed(p) => {
                let acc = &p.acc;
                let codes = acc.code_counts();
                let reserved = codes.reserved();
                if reserved > 0 {
                    let at = acc.tally.first_reserved.map(|(at, _)| at);
                    let cols = p.groups_per_row * 64;
                    let place = acc
                        .tally
                        .first_reserved
                        .map_or(String::new(), |(_, index)| {
                            format!(
                                "; the first is row {}, column {}",
                                index / cols,
                                index % cols
                            )
                        });
                    findings.push(
                        Finding::error(
                            c::PACKED_RESERVED_CODE,
                            format!(
                                "{reserved} stored codes exceed the maximum code {} of {}{place}",
                                p.kind.max_code(),
                                p.kind.precision().as_str()
                            ),
                        )
                        .tensor(&name)
                        .field("codes")
                        .maybe_offset(at),
                    );
                }
                let scales = stats::summarise_scales(&acc.scale_hist);
                if let Some((at, h)) = acc.first_bad_scale {
                    let index = (at - acc.start - p.codes_bytes) / 2;
                    findings.push(
                        Finding::error(
                            c::PACKED_SCALES,
                            format!(
                                "{} of {} scales are not finite and > 0; the first, row {} group {}, is {}",
                                scales.invalid,
                                scales.count,
                                index / p.groups_per_row,
                                index % p.groups_per_row,
                                f16_to_f32(h)
                            ),
                        )
                        .tensor(&name)
                        .field("scales")
                        .offset(at),
                    );
                }
                let limit = scales.median * 8.0;
                let outlier_rows = acc
                    .row_max
                    .iter()
                    .filter(|&&h| h != 0 && f64::from(f16_to_f32(h)) > limit)
                    .count() as u64;
                let mut quality = Quality {
                    entropy_bits: codes.entropy_bits(),
                    clipping_share: codes.clipping_share(),
                    unused_levels: codes.unused_levels(),
                    zero_groups: acc.tally.zero_groups,
                    groups: p.rows * p.groups_per_row,
                    scale_dynamic_range: scales.max / scales.min,
                    outlier_rows,
                    reserved_codes: reserved,
                    suspicion: 0.0,
                };
                quality.suspicion = stats::suspicion(&quality, p.kind.bits());
                TensorStats {
                    codes: Some(codes),
                    scales: Some(scales),
                    values: None,
                    quality: Some(quality),
                    ..Default::default()
                }
            }
        };
        ScanOutcome { findings, stats }
    }
}

/// Adds `data`'s bytes to a 256-bin histogram (four interleaved tables, so
/// runs of equal bytes do not serialise on one counter).
fn byte_hist(data: &[u8], h: &mut [u64; 256]) {
    let mut t = [[0u32; 256]; 4];
    for block in data.chunks(1 << 30) {
        let mut quads = block.chunks_exact(4);
        for q in &mut quads {
            t[0][usize::from(q[0])] += 1;
            t[1][usize::from(q[1])] += 1;
            t[2][usize::from(q[2])] += 1;
            t[3][usize::from(q[3])] += 1;
        }
        for &b in quads.remainder() {
            t[0][usize::from(b)] += 1;
        }
        for (b, slot) in h.iter_mut().enumerate() {
            *slot += u64::from(t[0][b] + t[1][b] + t[2][b] + t[3][b]);
        }
        t = [[0u32; 256]; 4];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packed tensor big enough for the parallel path, with zero groups,
    /// reserved codes in two different pieces and a bad scale.
    fn big_tensor(kind: PackedKind) -> (TensorInfo, Vec<u8>) {
        let (rows, cols) = (1400u64, 4096u64);
        let layout = Layout::Packed { kind, rows, cols };
        let codes_bytes = layout.codes_bytes() as usize;
        let mut bytes = Vec::with_capacity(codes_bytes + layout.scale_count() as usize * 2);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let (bits, max) = (kind.bits(), kind.max_code());
        let mut codes = vec![0u8; cols as usize];
        let mut row = vec![0u8; layout.row_bytes() as usize];
        for r in 0..rows {
            for (j, c) in codes.iter_mut().enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = if r % 7 == 3 && j < 128 {
                    kind.zero() as u8
                } else {
                    (x % (u64::from(max) + 1)) as u8
                };
            }
            if r == 900 || r == 1300 {
                codes[77] = (1 << bits) - 1; // reserved in q3 and q4
            }
            decode::pack_row(&codes, bits, &mut row);
            bytes.extend_from_slice(&row);
        }
        for g in 0..layout.scale_count() {
            let h: u16 = if g == 5000 {
                0xfc00
            } else {
                0x2000 + (g % 3000) as u16
            };
            bytes.extend_from_slice(&h.to_le_bytes());
        }
        let info = TensorInfo {
            name: "big".into(),
            precision: kind.precision(),
            shape: Some(vec![rows, cols]),
            source_dtype: None,
            encoding: None,
            offset: Some(64),
            bytes: Some(bytes.len() as u64),
            resident_bytes: None,
            alias_of: None,
            file: 0,
            layout: Some(layout),
            record: serde_json::Value::Null,
        };
        (info, bytes)
    }

    #[test]
    fn parallel_scans_equal_sequential_ones() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for kind in [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4] {
            let (info, bytes) = big_tensor(kind);
            let mut whole = Scanner::for_tensor(0, &info).unwrap();
            pool.install(|| whole.feed(&bytes));
            let whole = whole.finish();
            let mut pieces = Scanner::for_tensor(0, &info).unwrap();
            for piece in bytes.chunks(4097) {
                pieces.feed(piece);
            }
            let pieces = pieces.finish();
            assert_eq!(whole.findings, pieces.findings, "{kind:?}");
            assert_eq!(whole.stats, pieces.stats, "{kind:?}");
            let q = whole.stats.quality.unwrap();
            assert_eq!(q.zero_groups, 200 * 2, "{kind:?}");
            if kind != PackedKind::Q3Full8 {
                assert_eq!(q.reserved_codes, 2, "{kind:?}");
                assert!(whole.findings[0].message.contains("row 900, column 77"));
            }
        }
    }

    #[test]
    fn carry_hands_out_whole_units_across_pieces() {
        let mut c = Carry::new(3);
        let mut seen = Vec::new();
        for piece in [&[1u8, 2][..], &[3, 4, 5, 6, 7], &[8], &[9]] {
            c.feed(piece, |u| {
                assert_eq!(u.len() % 3, 0);
                seen.extend_from_slice(u);
            });
        }
        assert_eq!(seen, (1..=9).collect::<Vec<u8>>());
    }

    #[test]
    fn nibble_15_detection() {
        assert!(!has_nibble_15(&[0xee; 17]));
        let mut b = [0x11u8; 17];
        b[9] = 0xf1;
        assert!(has_nibble_15(&b));
        b[9] = 0x1f;
        assert!(has_nibble_15(&b));
        b[9] = 0x11;
        b[16] = 0x0f;
        assert!(has_nibble_15(&b));
    }

    #[test]
    fn code_7_detection() {
        let mut row = [0u8; 3];
        for j in 0..8 {
            let mut codes = [6u8; 8];
            codes[j] = 7;
            decode::pack_row(&codes, 3, &mut row);
            let w = u32::from(row[0]) | u32::from(row[1]) << 8 | u32::from(row[2]) << 16;
            assert!(has_code_7(w), "position {j}");
        }
        decode::pack_row(&[6, 5, 3, 6, 6, 0, 1, 6], 3, &mut row);
        let w = u32::from(row[0]) | u32::from(row[1]) << 8 | u32::from(row[2]) << 16;
        assert!(!has_code_7(w));
    }
}
