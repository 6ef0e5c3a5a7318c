//! The scanner of GGUF block-quantised tensors: every block's codes tallied
//! at their bit width, the sub-block scales and mins tallied, the F16 `d`
//! and `m`/`dmin` distributions, the first non-finite scale located, and
//! the quality statistics made from them. Large pieces are split over the
//! cores in whole blocks.

use rayon::prelude::*;

use super::tally::PARALLEL_MIN_BYTES;
use crate::decode::f16_to_f32;
use crate::decode::gguf::{
    JOINT_TABLE, MAX_BLOCK, MAX_JOINT, block_codes, block_sub_scales, byte_codes, code_format,
    expand_byte_counts, expand_joint_counts, f16_fields, has_joint_codes, joint_indices,
    joint_zero_runs, sub_scale_format,
};
use crate::decode::stats::{self, CodeCounts, GgufStats, Quality, TensorStats};
use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::gguf::GgmlType;

/// A GGUF quantised tensor's scan state.
pub(super) struct GgufScan {
    ty: GgmlType,
    start: u64,
    type_size: usize,
    blocks_per_row: u64,
    carry: Vec<u8>,
    /// Blocks fed so far.
    block: u64,
    acc: Acc,
    /// Largest finite `|d|` (as F16 bits) of each row.
    row_max: Vec<u16>,
}

struct Acc {
    codes: [u64; 256],
    sub: [u64; 256],
    mins: [u64; 256],
    /// Whether the type has F16 scale fields (`d`, and `m` or `dmin`).
    f16: bool,
    /// Their 16-bit pattern histograms: empty until the first block (then
    /// taken from the thread's pool of cleared tables, and given back
    /// cleared at the end), so that opening a file's scanners, on one
    /// thread before the pass, faults in no table.
    d_hist: Vec<u32>,
    m_hist: Vec<u32>,
    zero_blocks: u64,
    bad: u64,
    /// Block index, field name, bits and byte offset in the block of the
    /// first non-finite scale.
    first_bad: Option<(u64, &'static str, u32, usize)>,
}

/// Adds `theirs` into `mine` cell by cell; gives `theirs` back.
fn add_into(mine: &mut [u32], theirs: Vec<u32>) -> Vec<u32> {
    for (a, &b) in mine.iter_mut().zip(&theirs) {
        *a += b;
    }
    theirs
}

/// Clears a histogram table and keeps it in this thread's pool, or drops
/// it uncleared when the pool is full.
fn give_back(mut table: Vec<u32>) {
    if super::pool::wants(table.len()) {
        table.fill(0);
        super::pool::give_cleared(table);
    }
}

impl Acc {
    fn new(f16: bool) -> Self {
        Self {
            codes: [0; 256],
            sub: [0; 256],
            mins: [0; 256],
            f16,
            d_hist: Vec::new(),
            m_hist: Vec::new(),
            zero_blocks: 0,
            bad: 0,
            first_bad: None,
        }
    }

    fn merge(&mut self, o: Acc) {
        for (a, b) in self.codes.iter_mut().zip(o.codes) {
            *a += b;
        }
        for (a, b) in self.sub.iter_mut().zip(o.sub) {
            *a += b;
        }
        for (a, b) in self.mins.iter_mut().zip(o.mins) {
            *a += b;
        }
        for (mine, theirs) in [(&mut self.d_hist, o.d_hist), (&mut self.m_hist, o.m_hist)] {
            if mine.is_empty() {
                *mine = theirs;
            } else {
                give_back(add_into(mine, theirs));
            }
        }
        self.zero_blocks += o.zero_blocks;
        self.bad += o.bad;
        if self.first_bad.is_none() {
            self.first_bad = o.first_bad;
        }
    }

    /// Tallies whole blocks; `first` is the index of the first.
    fn blocks(&mut self, ty: GgmlType, first: u64, data: &[u8], type_size: usize) {
        if self.f16 && self.d_hist.is_empty() {
            self.d_hist = super::pool::take(1 << 16);
            self.m_hist = super::pool::take(1 << 16);
        }
        // Bounded so the u32 tables below cannot overflow.
        let per_call = (1usize << 20) * type_size;
        for (i, part) in data.chunks(per_call).enumerate() {
            self.blocks_bounded(ty, first + (i << 20) as u64, part, type_size);
        }
    }

    fn blocks_bounded(&mut self, ty: GgmlType, first: u64, data: &[u8], type_size: usize) {
        use GgmlType as T;
        // Each common type gets its own copy of the loop, its type and
        // block size constants there: the per-block work (a few fields and
        // checks) then has no branch on the type left in it.
        macro_rules! sized {
            ($($t:ident => $n:literal),* $(,)?) => {
                match ty {
                    $(T::$t if type_size == $n => self.blocks_of::<$n>(T::$t, first, data, $n),)*
                    _ => self.blocks_of::<0>(ty, first, data, type_size),
                }
            };
        }
        sized!(
            Q4_0 => 18, Q4_1 => 20, Q5_0 => 22, Q5_1 => 24, Q8_0 => 34, Q2_K => 84,
            Q3_K => 110, Q4_K => 144, Q5_K => 176, Q6_K => 210, Q8_K => 292,
            MXFP4 => 17, NVFP4 => 36,
        )
    }

    /// [`Self::blocks_bounded`] for blocks of `N` bytes (`N` = 0: any size,
    /// `type_size`).
    #[inline(always)]
    fn blocks_of<const N: usize>(
        &mut self,
        ty: GgmlType,
        first: u64,
        data: &[u8],
        type_size: usize,
    ) {
        if has_joint_codes(ty) {
            // A byte of low bits with its high bits: one increment for two
            // or four codes, expanded once per call.
            let mut t = [0u32; JOINT_TABLE];
            let mut idx = [0u16; MAX_JOINT];
            let runs = joint_zero_runs(ty);
            self.each_block::<N>(ty, first, data, type_size, |b| {
                let n = joint_indices(ty, b, &mut idx);
                for &i in &idx[..n] {
                    t[usize::from(i) & (JOINT_TABLE - 1)] += 1;
                }
                runs.is_some_and(|runs| {
                    runs.iter()
                        .all(|&(off, len, v)| b[off..off + len].iter().all(|&x| x == v))
                })
            });
            let wide: Vec<u64> = t.iter().map(|&n| u64::from(n)).collect();
            expand_joint_counts(ty, &wide, &mut self.codes);
        } else if let Some((off, len)) = byte_codes(ty) {
            // The code bytes of a symmetric type's all-zero block.
            let zero_byte = match ty {
                GgmlType::Q4_0 => Some(0x88u8),
                GgmlType::Q8_0 | GgmlType::Q8_K => Some(0),
                _ => None,
            };
            let is_zero = |qs: &[u8]| zero_byte.is_some_and(|z| qs.iter().all(|&x| x == z));
            if matches!(ty, GgmlType::Q8_0 | GgmlType::Q8_K | GgmlType::Q2_K) {
                // Four interleaved tables, so runs of one value do not serialise.
                let mut t = [[0u32; 256]; 4];
                self.each_block::<N>(ty, first, data, type_size, |b| {
                    let qs = &b[off..off + len];
                    for w in qs.as_chunks::<4>().0 {
                        t[0][usize::from(w[0])] += 1;
                        t[1][usize::from(w[1])] += 1;
                        t[2][usize::from(w[2])] += 1;
                        t[3][usize::from(w[3])] += 1;
                    }
                    is_zero(qs)
                });
                let mut table = [0u64; 256];
                for (v, slot) in table.iter_mut().enumerate() {
                    *slot = u64::from(t[0][v])
                        + u64::from(t[1][v])
                        + u64::from(t[2][v])
                        + u64::from(t[3][v]);
                }
                expand_byte_counts(ty, &table, &mut self.codes);
            } else {
                // Two codes a byte (nibbles): the code bytes gathered and
                // counted by the vectorised nibble kernel.
                let mut nibbles = Nibbles::new();
                self.each_block::<N>(ty, first, data, type_size, |b| {
                    let qs = &b[off..off + len];
                    nibbles.push(qs);
                    is_zero(qs)
                });
                for (c, n) in self.codes.iter_mut().zip(nibbles.finish()) {
                    *c += n;
                }
            }
        } else {
            // Any other decoded type: every code unpacked.
            let n = ty.block_size() as usize;
            let zero = code_format(ty).map_or(0, |(_, z)| z);
            let mut q = [0u8; MAX_BLOCK];
            let mut t = [0u64; 256];
            self.each_block::<N>(ty, first, data, type_size, |b| {
                block_codes(ty, b, &mut q);
                for &c in &q[..n] {
                    t[usize::from(c)] += 1;
                }
                zero != 0 && q[..n].iter().all(|&c| i32::from(c) == zero)
            });
            for (c, n) in self.codes.iter_mut().zip(t) {
                *c += n;
            }
        }
    }

    /// The per-block work besides the codes, which `codes` tallies (and
    /// says whether the block's codes are all the zero level).
    #[inline(always)]
    fn each_block<const N: usize>(
        &mut self,
        ty: GgmlType,
        first: u64,
        data: &[u8],
        type_size: usize,
        mut codes: impl FnMut(&[u8]) -> bool,
    ) {
        let (d_at, m_at) = f16_fields(ty);
        let (mut sc, mut mn) = ([0u8; 16], [0u8; 16]);
        // Q2_K's scale bytes are a scale nibble and a min nibble: counted
        // as bytes and split once at the end.
        let mut q2k = [0u32; 256];
        let (mut d_hist, mut m_hist) = match (
            <&mut [u32; 1 << 16]>::try_from(&mut self.d_hist[..]),
            <&mut [u32; 1 << 16]>::try_from(&mut self.m_hist[..]),
        ) {
            (Ok(d), Ok(m)) => (Some(d), Some(m)),
            _ => (None, None),
        };
        let (sub, mins) = (&mut self.sub, &mut self.mins);
        let (mut bad, mut zero_blocks, mut first_bad) = (0u64, 0u64, self.first_bad);
        let mut block = |k: usize, b: &[u8]| {
            let all_zero = codes(b);
            if ty == GgmlType::Q2_K {
                for &x in &b[..16] {
                    q2k[usize::from(x)] += 1;
                }
            } else {
                let (ns, nm) = block_sub_scales(ty, b, &mut sc, &mut mn);
                for &s in &sc[..ns] {
                    sub[usize::from(s)] += 1;
                }
                for &m in &mn[..nm] {
                    mins[usize::from(m)] += 1;
                }
            }
            let mut d_zero = false;
            if let (Some(at), Some(hist)) = (d_at, d_hist.as_deref_mut()) {
                let h = u16::from_le_bytes([b[at], b[at + 1]]);
                hist[usize::from(h & 0x7fff)] += 1;
                if h & 0x7c00 == 0x7c00 {
                    bad += 1;
                    first_bad.get_or_insert((first + k as u64, "d", u32::from(h), at));
                }
                d_zero = h & 0x7fff == 0;
            }
            if let (Some(at), Some(hist)) = (m_at, m_hist.as_deref_mut()) {
                let h = u16::from_le_bytes([b[at], b[at + 1]]);
                hist[usize::from(h & 0x7fff)] += 1;
                if h & 0x7c00 == 0x7c00 {
                    bad += 1;
                    let name = match ty {
                        GgmlType::Q4_1 | GgmlType::Q5_1 => "m",
                        _ => "dmin",
                    };
                    first_bad.get_or_insert((first + k as u64, name, u32::from(h), at));
                }
            }
            if ty == GgmlType::Q8_K {
                let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                d_zero = d == 0.0;
                if !d.is_finite() {
                    bad += 1;
                    first_bad.get_or_insert((first + k as u64, "d", d.to_bits(), 0));
                }
            }
            // E8M0 0xFF is NaN in the OCP MX format; ggml would scale by 2^127.
            if ty == GgmlType::MXFP4 && b[0] == 0xff {
                bad += 1;
                first_bad.get_or_insert((first + k as u64, "e", 0xff, 0));
            }
            zero_blocks += u64::from(all_zero || d_zero);
        };
        if N > 0 {
            for (k, b) in data.as_chunks::<N>().0.iter().enumerate() {
                block(k, b);
            }
        } else {
            for (k, b) in data.chunks_exact(type_size).enumerate() {
                block(k, b);
            }
        }
        self.bad += bad;
        self.zero_blocks += zero_blocks;
        self.first_bad = first_bad;
        if ty == GgmlType::Q2_K {
            for (x, &n) in q2k.iter().enumerate() {
                self.sub[x & 0xf] += u64::from(n);
                self.mins[x >> 4] += u64::from(n);
            }
        }
    }
}

/// Code bytes of many blocks gathered into one buffer and counted two
/// codes a byte by the vectorised nibble kernel once the buffer is full.
struct Nibbles {
    buf: [u8; Self::SIZE],
    len: usize,
    counts: [u64; 16],
}

impl Nibbles {
    const SIZE: usize = 4096;

    fn new() -> Self {
        Self {
            buf: [0; Self::SIZE],
            len: 0,
            counts: [0; 16],
        }
    }

    #[inline(always)]
    fn push(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > Self::SIZE {
            self.flush();
        }
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            // Longer than the buffer (no such type): counted at once.
            self.add(bytes);
        }
    }

    fn flush(&mut self) {
        let n = self.len;
        self.len = 0;
        let buf = self.buf;
        self.add(&buf[..n]);
    }

    fn add(&mut self, bytes: &[u8]) {
        for (a, b) in self
            .counts
            .iter_mut()
            .zip(super::tally::nibble_counts(bytes))
        {
            *a += b;
        }
    }

    fn finish(mut self) -> [u64; 16] {
        self.flush();
        self.counts
    }
}

impl GgufScan {
    /// The scan state of a `rows` × `cols` tensor of `ty` at absolute offset `start`.
    pub(super) fn new(ty: GgmlType, rows: u64, cols: u64, start: u64) -> Self {
        let f16 = f16_fields(ty).0.is_some();
        let blocks_per_row = (cols / ty.block_size()).max(1);
        Self {
            ty,
            start,
            type_size: ty.type_size() as usize,
            blocks_per_row,
            carry: Vec::with_capacity(ty.type_size() as usize),
            block: 0,
            acc: Acc::new(f16),
            // rows × type_size bytes are in the file, so rows is bounded by it.
            row_max: if f16 {
                vec![0; rows as usize]
            } else {
                Vec::new()
            },
        }
    }

    /// Feeds the next bytes.
    pub(super) fn feed(&mut self, mut data: &[u8]) {
        let ts = self.type_size;
        if !self.carry.is_empty() {
            let take = (ts - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.carry.len() < ts {
                return;
            }
            let block = std::mem::take(&mut self.carry);
            self.whole(&block);
            self.carry = block;
            self.carry.clear();
        }
        let whole = data.len() / ts * ts;
        self.whole(&data[..whole]);
        self.carry.extend_from_slice(&data[whole..]);
    }

    fn whole(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let (ty, ts, first) = (self.ty, self.type_size, self.block);
        // One core is the pass's reader and hasher: the scan splits over
        // the others, and stays on this thread where there is only one.
        let threads = rayon::current_num_threads().saturating_sub(1);
        if threads > 1 && data.len() >= PARALLEL_MIN_BYTES {
            // One piece a thread: each piece zeroes and merges two 256 KiB
            // scale histograms, which smaller pieces would pay for again.
            let piece = data.len().div_ceil(threads).max(PARALLEL_MIN_BYTES / 2);
            let piece = piece.div_ceil(ts) * ts;
            let f16 = self.acc.f16;
            let parts: Vec<Acc> = data
                .par_chunks(piece)
                .enumerate()
                .map(|(i, part)| {
                    let mut a = Acc::new(f16);
                    a.blocks(ty, first + (i * piece / ts) as u64, part, ts);
                    a
                })
                .collect();
            for p in parts {
                self.acc.merge(p);
            }
        } else {
            self.acc.blocks(ty, first, data, ts);
        }
        if let (Some(d_at), false) = (f16_fields(ty).0, self.row_max.is_empty()) {
            // Row and place in it kept by counting: a division per block
            // costs more than the rest of this loop.
            let mut row = (first / self.blocks_per_row) as usize;
            let mut in_row = first % self.blocks_per_row;
            let mut max = 0u16;
            for b in data.chunks_exact(ts) {
                let h = u16::from_le_bytes([b[d_at], b[d_at + 1]]) & 0x7fff;
                if h < 0x7c00 {
                    max = max.max(h);
                }
                in_row += 1;
                if in_row == self.blocks_per_row {
                    if let Some(m) = self.row_max.get_mut(row) {
                        *m = (*m).max(max);
                    }
                    (row, in_row, max) = (row + 1, 0, 0);
                }
            }
            if let Some(m) = self.row_max.get_mut(row) {
                *m = (*m).max(max);
            }
        }
        self.block += (data.len() / ts) as u64;
    }

    /// Findings and statistics once every byte has been fed.
    pub(super) fn finish(self, name: &str, findings: &mut Vec<Finding>) -> TensorStats {
        let ty = self.ty;
        let acc = self.acc;
        if let Some((block, field, bits, at)) = acc.first_bad {
            let offset = self.start + block * self.type_size as u64 + at as u64;
            let shown = match ty {
                GgmlType::Q8_K => f32::from_bits(bits).to_string(),
                GgmlType::MXFP4 => "E8M0 0xFF (NaN)".to_string(),
                _ => f16_to_f32(bits as u16).to_string(),
            };
            findings.push(
                Finding::error(
                    c::GGUF_SCALE,
                    format!(
                        "{} {} block scales are NaN or infinite; the first is {field} = {shown} of block {block} (row {}, block {} of the row)",
                        acc.bad,
                        ty.name(),
                        block / self.blocks_per_row,
                        block % self.blocks_per_row
                    ),
                )
                .tensor(name)
                .field(field)
                .offset(offset),
            );
        }
        let Some((bits, zero)) = code_format(ty) else {
            return TensorStats::default();
        };
        let levels = 1usize << bits;
        let codes = CodeCounts {
            bits,
            zero,
            max_code: (levels - 1) as u8,
            counts: acc.codes[..levels].to_vec(),
        };
        let sub = sub_scale_format(ty);
        let counts = |h: &[u64; 256], bits: u32, zero: i32| CodeCounts {
            bits,
            zero,
            max_code: ((1usize << bits) - 1) as u8,
            counts: h[..1usize << bits].to_vec(),
        };
        let sub_scales = sub.map(|(b, z, _)| counts(&acc.sub, b, z));
        let sub_mins = sub.filter(|s| s.2).map(|(b, _, _)| counts(&acc.mins, b, 0));
        // A summary with no valid (non-zero finite) value is all NaN, which
        // the report's and the cache's JSON cannot carry: left out.
        let summary =
            |hist: &[u32]| Some(stats::summarise_scales(hist)).filter(|s| s.count > s.invalid);
        let scales = if acc.d_hist.is_empty() {
            None
        } else {
            summary(&acc.d_hist)
        };
        let mins = if f16_fields(ty).1.is_some() && !acc.m_hist.is_empty() {
            summary(&acc.m_hist)
        } else {
            None
        };
        for table in [acc.d_hist, acc.m_hist] {
            give_back(table);
        }
        let blocks = self.block;
        let rows_over = |factor: f64| {
            scales.as_ref().map_or(0, |s| {
                let limit = s.median * factor;
                self.row_max
                    .iter()
                    .filter(|&&h| h != 0 && f64::from(f16_to_f32(h)) > limit)
                    .count() as u64
            })
        };
        let (outlier_rows, high_rows) = (rows_over(8.0), rows_over(10.0));
        let mut quality = Quality {
            entropy_bits: codes.entropy_bits(),
            clipping_share: codes.clipping_share(),
            unused_levels: codes.unused_levels(),
            zero_groups: acc.zero_blocks,
            groups: blocks,
            // 0 where the type has no F16 d (Q8_K, MXFP4, NVFP4) or none is
            // valid: a NaN would not survive the JSON of the report and cache.
            scale_dynamic_range: scales
                .as_ref()
                .map(|s| s.max / s.min)
                .filter(|r| r.is_finite())
                .unwrap_or(0.0),
            outlier_rows,
            high_rows,
            reserved_codes: 0,
            suspicion: 0.0,
        };
        quality.suspicion = stats::suspicion(&quality, bits);
        TensorStats {
            codes: Some(codes),
            scales: scales.map(Box::new),
            quality: Some(Box::new(quality)),
            gguf: Some(Box::new(GgufStats {
                ggml_type: ty.name().to_string(),
                blocks,
                sub_scales,
                sub_mins,
                mins,
            })),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Layout, TensorInfo};

    fn tensor(ty: GgmlType, rows: u64) -> (TensorInfo, Vec<u8>) {
        let cols = 512u64;
        let blocks = (rows * cols / ty.block_size()) as usize;
        let mut rng = crate::util::Rng::new(ty.number().into());
        let mut bytes = crate::sample::gguf::random_blocks(ty, blocks, &mut rng);
        // A NaN d in a late block, which only one parallel piece sees.
        if let (Some(d), _) = f16_fields(ty) {
            let at = (blocks - 3) * ty.type_size() as usize + d;
            bytes[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
        }
        let info = TensorInfo {
            name: "t".into(),
            precision: crate::format::Precision::Gguf(ty),
            shape: Some(vec![rows, cols]),
            source_dtype: None,
            encoding: None,
            offset: Some(96),
            bytes: Some(bytes.len() as u64),
            resident_bytes: None,
            alias_of: None,
            file: 0,
            layout: Some(Layout::Gguf { ty, rows, cols }),
            quant: None,
            record: serde_json::Value::Null,
        };
        (info, bytes)
    }

    #[test]
    fn outlier_rows_are_the_rows_whose_largest_finite_d_is_far_above_the_median() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for ty in [GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q6_K] {
            let ts = ty.type_size() as usize;
            let per_row = (512 / ty.block_size()) as usize;
            let rows = (3 * PARALLEL_MIN_BYTES).div_ceil(per_row * ts);
            let (info, mut bytes) = tensor(ty, rows as u64);
            let at = f16_fields(ty).0.unwrap();
            let mut set = |block: usize, d: f32| {
                let h = crate::decode::f32_to_f16(d);
                bytes[block * ts + at..block * ts + at + 2].copy_from_slice(&h.to_le_bytes());
            };
            // Every d 1 (the median), then one block of some rows larger:
            // 9 (over 8 medians), 12 and 100 (over 10), 7 (neither); a NaN
            // and an infinity count for no row's largest.
            for b in 0..rows * per_row {
                set(b, 1.0);
            }
            let planted = [
                (3, 5, 9.0),
                (rows / 2, 0, 12.0),
                (rows - 1, per_row - 1, 100.0),
                (10, 2, 7.0),
                (11, 1, f32::NAN),
                (12, 3, f32::INFINITY),
            ];
            for (row, i, d) in planted {
                set(row * per_row + i, d);
            }
            // Fed whole on three threads, and in pieces on this thread.
            let mut whole = super::super::Scanner::for_tensor(0, &info).unwrap();
            pool.install(|| whole.feed(&bytes));
            let mut pieces = super::super::Scanner::for_tensor(0, &info).unwrap();
            for p in bytes.chunks(4097) {
                pieces.feed(p);
            }
            for out in [whole.finish(), pieces.finish()] {
                let q = out.stats.quality.unwrap();
                assert_eq!((q.outlier_rows, q.high_rows), (3, 2), "{}", ty.name());
            }
        }
    }

    #[test]
    fn parallel_scans_equal_piecewise_ones_and_a_naive_count() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        // Every decoded block type: each has a loop of its own.
        let types = GgmlType::ALL
            .iter()
            .filter(|t| t.decoded() && t.block_size() > 1);
        for &ty in types {
            let rows = (3 * PARALLEL_MIN_BYTES as u64) / (512 / ty.block_size() * ty.type_size());
            let (info, bytes) = tensor(ty, rows);
            let mut whole = super::super::Scanner::for_tensor(0, &info).unwrap();
            pool.install(|| whole.feed(&bytes));
            let whole = whole.finish();
            let mut pieces = super::super::Scanner::for_tensor(0, &info).unwrap();
            for p in bytes.chunks(4097) {
                pieces.feed(p);
            }
            let pieces = pieces.finish();
            assert_eq!(whole.findings, pieces.findings, "{}", ty.name());
            assert_eq!(whole.stats, pieces.stats, "{}", ty.name());
            // The planted NaN d (types with an F16 d).
            let planted = usize::from(f16_fields(ty).0.is_some());
            assert_eq!(whole.findings.len(), planted, "{}", ty.name());
            // Codes counted one block at a time through block_codes.
            let mut want = vec![0u64; 1 << code_format(ty).unwrap().0];
            let mut q = [0u8; MAX_BLOCK];
            for b in bytes.chunks_exact(ty.type_size() as usize) {
                block_codes(ty, b, &mut q);
                for &c in &q[..ty.block_size() as usize] {
                    want[usize::from(c)] += 1;
                }
            }
            assert_eq!(whole.stats.codes.unwrap().counts, want, "{}", ty.name());
            // The d summary against the blocks' own d fields: its tables
            // come from (and go back cleared to) a per-thread pool shared
            // by every type of this loop, so a table given back dirty, or
            // merged twice, moves these.
            let (d_at, _) = f16_fields(ty);
            let got = whole.stats.scales.as_ref();
            let Some(at) = d_at else {
                assert!(got.is_none(), "{}", ty.name());
                continue;
            };
            let ds: Vec<u16> = bytes
                .chunks_exact(ty.type_size() as usize)
                .map(|b| u16::from_le_bytes([b[at], b[at + 1]]) & 0x7fff)
                .collect();
            let valid: Vec<f32> = ds
                .iter()
                .filter(|&&h| h != 0 && h & 0x7c00 != 0x7c00)
                .map(|&h| f16_to_f32(h))
                .collect();
            let got = got.unwrap_or_else(|| panic!("{}: no d summary", ty.name()));
            assert_eq!(got.count, ds.len() as u64, "{}", ty.name());
            assert_eq!(
                got.invalid,
                (ds.len() - valid.len()) as u64,
                "{}",
                ty.name()
            );
            let max = valid.iter().copied().fold(0f32, f32::max);
            let min = valid.iter().copied().fold(f32::INFINITY, f32::min);
            assert_eq!(
                (got.min, got.max),
                (f64::from(min), f64::from(max)),
                "{}",
                ty.name()
            );
        }
    }
}
