//! The scanners of MLX-LM quantized modules: the code histogram of a
//! packed U32 weight (every code over `2^bits` levels; mxfp8's E4M3 NaN
//! bytes located) and the U8 scales of the float modes (E8M0 or E4M3: NaN
//! and, for E4M3, negative bytes located; the scale distribution).
//!
//! Codes are packed LSB-first over each row's 32-bit little-endian words, so
//! the tensor is one LSB-first bit stream; rows hold a multiple of 32 codes,
//! so `bits` words always hold exactly 32 whole codes. 2-, 4- and 8-bit codes
//! never straddle a byte and are counted from a byte histogram; 3-, 5- and
//! 6-bit codes are counted in fields of two or four codes (10 or 12 bits),
//! whose histogram is folded into the codes' at the end.

use super::Carry;
use crate::decode::experts::{Digest, ExpertPart};
use crate::decode::mlxlm as dm;
use crate::decode::stats::{self, Blocks, CodeCounts, Quality, TensorStats};
use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::{QuantMode, ScaleKind};

/// A packed MLX weight's scan state.
pub(super) struct CodesScan {
    mode: QuantMode,
    bits: u8,
    groups: u64,
    start: u64,
    pos: u64,
    carry: Carry,
    /// Bytes of one stacked expert (the whole tensor when not stacked).
    per_expert: u64,
    /// Rows of one expert.
    rows: u64,
    /// Experts stacked (1 when not stacked).
    experts: usize,
    /// The expert being counted: its byte histogram (2, 8 bits) or field
    /// histogram (3, 5, 6 bits), or its 4-bit code counts (two a byte,
    /// counted by the nibble kernel). An expert's bytes are contiguous, so
    /// one histogram serves them all, folded into the totals (and the
    /// expert's own statistics) as the next begins.
    current: usize,
    hist: Vec<u64>,
    nibbles: [u64; 16],
    /// Code counts of the experts before the current one.
    total: Vec<u64>,
    parts: Vec<ExpertPart>,
    /// The current expert's code bytes, digested (copied experts).
    digest: Digest,
    first_nan: Option<u64>,
}

/// Field width and codes per field for the straddling widths.
fn field(bits: u8) -> (u32, u32) {
    match bits {
        3 => (12, 4),
        5 => (10, 2),
        6 => (12, 2),
        b => (u32::from(b), 1),
    }
}

impl CodesScan {
    /// A weight of `groups` scale groups, in `mode` with `bits`, at absolute
    /// offset `start`, of `bytes` bytes stacking `experts` experts of `rows`
    /// rows (each expert is counted on its own: they are peers).
    pub(super) fn new(
        mode: QuantMode,
        bits: u8,
        groups: u64,
        start: u64,
        (bytes, experts, rows): (u64, u64, u64),
    ) -> Self {
        let straddles = matches!(bits, 3 | 5 | 6);
        let (width, _) = field(bits);
        Self {
            mode,
            bits,
            groups,
            start,
            pos: 0,
            // A block of `bits` words holds 32 whole codes; an expert holds
            // whole blocks (its rows hold a multiple of 32 codes).
            carry: Carry::new(if straddles { 4 * usize::from(bits) } else { 1 }),
            per_expert: (bytes / experts.max(1)).max(1),
            rows,
            // experts is bounded by the module checks.
            experts: experts.max(1) as usize,
            current: 0,
            hist: vec![0; if straddles { 1 << width } else { 256 }],
            nibbles: [0; 16],
            total: vec![0; 1 << bits],
            parts: Vec::new(),
            digest: Digest::default(),
            first_nan: None,
        }
    }

    /// Feeds the next bytes, expert by expert.
    pub(super) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let left = self.per_expert - self.pos % self.per_expert;
            let n = usize::try_from(left).map_or(data.len(), |l| l.min(data.len()));
            let e = ((self.pos / self.per_expert) as usize).min(self.experts - 1);
            while self.current < e {
                self.fold();
            }
            let (now, later) = data.split_at(n);
            self.feed_expert(now);
            data = later;
        }
    }

    /// Feeds bytes of the current expert.
    fn feed_expert(&mut self, data: &[u8]) {
        if self.experts > 1 {
            self.digest.feed(data);
        }
        let (bits, hist) = (self.bits, &mut self.hist);
        if matches!(bits, 3 | 5 | 6) {
            let (width, _) = field(bits);
            let fields = 32 * u32::from(bits) / width;
            let mask = (1u64 << width) - 1;
            self.carry.feed(data, |blocks| {
                for block in blocks.chunks_exact(4 * usize::from(bits)) {
                    // Up to 24 bytes: three little-endian u64 words.
                    let mut w = [0u64; 4];
                    for (k, chunk) in block.chunks(8).enumerate() {
                        let mut b = [0u8; 8];
                        b[..chunk.len()].copy_from_slice(chunk);
                        w[k] = u64::from_le_bytes(b);
                    }
                    for f in 0..fields {
                        let bit = f * width;
                        let (i, sh) = ((bit / 64) as usize, bit % 64);
                        let mut v = w[i] >> sh;
                        if sh + width > 64 {
                            v |= w[i + 1] << (64 - sh);
                        }
                        hist[(v & mask) as usize] += 1;
                    }
                }
            });
        } else if bits == 4 {
            // Affine 4-bit, mxfp4 and nvfp4 codes: a nibble each.
            for (a, b) in self
                .nibbles
                .iter_mut()
                .zip(super::tally::nibble_counts(data))
            {
                *a += b;
            }
        } else {
            let mut h = [0u64; 256];
            super::nvfp4::byte_hist(data, &mut h);
            for (a, b) in hist.iter_mut().zip(h) {
                *a += b;
            }
            if self.mode == QuantMode::Mxfp8 && self.first_nan.is_none() && h[0x7f] + h[0xff] > 0 {
                self.first_nan = data
                    .iter()
                    .position(|&b| b & 0x7f == 0x7f)
                    .map(|k| self.start + self.pos + k as u64);
            }
        }
        self.pos += data.len() as u64;
    }

    /// Adds the current expert's counts to the totals (and, when stacked,
    /// its statistics to the experts'), and starts the next.
    fn fold(&mut self) {
        let counts = self.counts();
        for (a, b) in self.total.iter_mut().zip(&counts) {
            *a += b;
        }
        if self.experts > 1 {
            let c = self.grid(counts);
            let groups = self.groups / self.experts as u64;
            let mut part = ExpertPart::from_codes(&c, self.clipping(&c), self.rows, groups);
            part.digest = Some(self.digest.finish());
            self.parts.push(part);
        }
        self.hist.fill(0);
        self.nibbles = [0; 16];
        self.current += 1;
    }

    /// Counts on this tensor's code grid.
    fn grid(&self, counts: Vec<u64>) -> CodeCounts {
        CodeCounts {
            bits: u32::from(self.bits),
            zero: 0,
            max_code: ((1u32 << self.bits) - 1) as u8,
            counts,
        }
    }

    /// The current expert's code counts (`counts[c]` = codes equal to `c`).
    fn counts(&self) -> Vec<u64> {
        let bits = u32::from(self.bits);
        let levels = 1usize << bits;
        let mask = (levels - 1) as u64;
        let mut counts = vec![0u64; levels];
        if self.bits == 4 {
            counts.copy_from_slice(&self.nibbles);
            return counts;
        }
        let (width, per) = match self.bits {
            3 | 5 | 6 => field(self.bits),
            _ => (8, 8 / bits),
        };
        for (v, &n) in self.hist.iter().enumerate() {
            if n == 0 || v >> width != 0 {
                continue;
            }
            for k in 0..per {
                counts[((v as u64 >> (k * bits)) & mask) as usize] += n;
            }
        }
        counts
    }

    /// The share of `counts` at the extreme levels, as `mode` clips.
    fn clipping(&self, codes: &CodeCounts) -> f64 {
        match self.mode {
            QuantMode::Affine => codes.clipping_share(),
            // The float grids clip at their largest magnitude (±6 for
            // E2M1, ±448 for E4M3).
            _ => dm::extreme_share(self.mode, &codes.counts),
        }
    }

    /// Findings and statistics.
    pub(super) fn finish(mut self, name: &str, findings: &mut Vec<Finding>) -> TensorStats {
        while self.current < self.experts {
            self.fold();
        }
        let counts = std::mem::take(&mut self.total);
        if self.mode == QuantMode::Mxfp8 {
            let nan = counts[0x7f] + counts[0xff];
            if nan > 0 {
                let at = self.first_nan.unwrap_or(self.start);
                findings.push(
                    Finding::error(
                        c::MLXLM_CODES,
                        format!(
                            "{nan} of {} mxfp8 weight bytes are E4M3 NaN (0x7F/0xFF); the first is byte {}",
                            counts.iter().sum::<u64>(),
                            at - self.start
                        ),
                    )
                    .tensor(name)
                    .offset(at),
                );
            }
        }
        let experts = (self.experts > 1).then(|| std::mem::take(&mut self.parts));
        let codes = self.grid(counts);
        let mut quality = Quality {
            entropy_bits: codes.entropy_bits(),
            clipping_share: self.clipping(&codes),
            unused_levels: codes.unused_levels(),
            zero_groups: 0,
            groups: self.groups,
            scale_dynamic_range: 0.0,
            outlier_rows: 0,
            high_rows: 0,
            reserved_codes: 0,
            suspicion: 0.0,
        };
        quality.suspicion = stats::suspicion(&quality, u32::from(self.bits));
        TensorStats {
            codes: Some(codes),
            quality: Some(Box::new(quality)),
            experts,
            ..Default::default()
        }
    }
}

/// Per-row largest scale magnitude and the median magnitude of a scales
/// tensor, fed in order: rows whose largest scale exceeds 8× the median
/// are the weight's outlier rows (as for audio8's F16 scales). The median
/// comes from a histogram of 15-bit magnitude keys: exact for F16, BF16
/// and byte scales, to BF16 precision for F32.
pub(super) struct RowOutliers {
    groups: u64,
    in_row: u64,
    cur: f32,
    /// The row's largest rank so far ([`Self::see_halves`], [`Self::see_bytes`]).
    cur_rank: u16,
    /// Each finished row's largest magnitude ([`Self::see`]).
    maxima: Vec<f32>,
    /// Each finished row's largest rank: 0 when the row has no finite
    /// scale, else 1 + its largest magnitude key (decoded only in
    /// [`Self::count`], once a tensor rather than once a row).
    ranks: Vec<u16>,
    hist: KeyCounts,
    /// A stacked tensor's experts: each one's magnitude keys, for its own
    /// median and p99 (the experts are peers of each other).
    experts: Option<ExpertKeys>,
}

/// Counts of 15-bit magnitude keys: a short list while few distinct keys
/// were seen (a checkpoint of 20,000 small tensors would otherwise zero
/// 128 KiB per scales tensor), the full table beyond.
#[derive(Default)]
struct KeyCounts {
    few: Vec<(u16, u32)>,
    all: Vec<u32>,
}

impl KeyCounts {
    /// Distinct keys kept in the list before the table is made.
    const FEW: usize = 64;

    #[inline]
    fn add(&mut self, key: u16, n: u32) {
        let key = key & 0x7fff;
        if !self.all.is_empty() {
            self.all[usize::from(key)] += n;
        } else if let Some(e) = self.few.iter_mut().find(|e| e.0 == key) {
            e.1 += n;
        } else if self.few.len() < Self::FEW {
            self.few.push((key, n));
        } else {
            self.all = super::pool::take(1 << 15);
            for (k, c) in self.few.drain(..) {
                self.all[usize::from(k)] += c;
            }
            self.all[usize::from(key)] += n;
        }
    }

    /// `(key, count)` in key order, counts > 0.
    fn iter(&self) -> impl Iterator<Item = (u16, u32)> + '_ {
        let mut few = self.few.clone();
        few.sort_unstable();
        let dense = nonzero_cells(&self.all).map(|(k, n)| (k as u16, n));
        few.into_iter().filter(|e| e.1 > 0).chain(dense)
    }
}

impl Drop for KeyCounts {
    fn drop(&mut self) {
        give_table(std::mem::take(&mut self.all));
    }
}

/// Cells a chunk of a key table: chunks that hold no count are skipped
/// whole (a tensor's scales span a few exponents of 2^15 keys).
const CHUNK: usize = 256;

/// Whether a chunk holds a count (a branch-free, vectorised test).
fn holds_counts(chunk: &[u32]) -> bool {
    chunk.iter().fold(0, |a, &n| a | n) != 0
}

/// The nonzero cells of `table`, `(index, count)` in index order.
fn nonzero_cells(table: &[u32]) -> impl Iterator<Item = (usize, u32)> + '_ {
    table
        .chunks(CHUNK)
        .enumerate()
        .filter(|(_, c)| holds_counts(c))
        .flat_map(|(i, c)| {
            c.iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(move |(j, &n)| (i * CHUNK + j, n))
        })
}

/// Zeroes the chunks of `table` that hold counts.
fn clear_table(table: &mut [u32]) {
    for c in table.chunks_mut(CHUNK) {
        if holds_counts(c) {
            c.fill(0);
        }
    }
}

/// Returns `table` to this thread's pool, cleared where it holds counts.
fn give_table(mut table: Vec<u32>) {
    clear_table(&mut table);
    super::pool::give_cleared(table);
}

/// A stacked tensor's experts' scale statistics. An expert's scales are
/// contiguous, so one histogram of magnitude keys `>> shift` serves them
/// all: summarised and cleared as the next expert begins (memory of one
/// histogram and a few numbers an expert, however many experts a file
/// claims).
struct ExpertKeys {
    /// Experts and rows per expert.
    experts: usize,
    rows: u64,
    shift: u32,
    /// Whether bin 0 holds the zero scales (left out of the quantiles,
    /// counted as zero groups).
    zero_bin: bool,
    value: fn(u16) -> f32,
    /// The expert being counted, and its histogram (of `bins` cells, empty
    /// until the first scale is counted).
    current: usize,
    bins: usize,
    hist: Vec<u32>,
    parts: Vec<ExpertPart>,
}

impl Drop for ExpertKeys {
    fn drop(&mut self) {
        give_table(std::mem::take(&mut self.hist));
    }
}

impl ExpertKeys {
    /// Summarises the current expert (its rows' maxima are `rows.0`, or
    /// their ranks `rows.1`: see [`RowOutliers::ranks`]) and clears the
    /// histogram for the next.
    fn flush(&mut self, (maxima, ranks): (&[f32], &[u16])) {
        let rows = usize::try_from(self.rows).unwrap_or(usize::MAX);
        let e = self.current;
        let half = (1u32 << self.shift) >> 1;
        let values: Vec<(f64, u64)> = nonzero_cells(&self.hist)
            .filter(|&(bin, _)| !(self.zero_bin && bin == 0))
            .map(|(bin, n)| {
                let key = (((bin as u32) << self.shift) | half) as u16;
                (f64::from((self.value)(key)), u64::from(n))
            })
            .collect();
        let done = maxima.len() + ranks.len();
        let lo = e.saturating_mul(rows).min(done);
        let hi = lo.saturating_add(rows).min(done);
        let value = self.value;
        let row_max: Vec<f64> = if ranks.is_empty() {
            maxima[lo..hi].iter().map(|&m| f64::from(m)).collect()
        } else {
            ranks[lo..hi.min(ranks.len())]
                .iter()
                .map(|&r| if r == 0 { 0.0 } else { f64::from(value(r - 1)) })
                .collect()
        };
        let mut part = ExpertPart::from_scales(values, &row_max);
        part.rows = self.rows;
        part.zero_groups = self
            .zero_bin
            .then(|| u64::from(self.hist.first().copied().unwrap_or(0)));
        self.parts.push(part);
        clear_table(&mut self.hist);
        self.current += 1;
    }

    /// The histogram of the expert row `row` is in, once the experts
    /// before it are summarised.
    fn at_row(&mut self, row: usize, done: (&[f32], &[u16])) -> Option<&mut Vec<u32>> {
        let e = (row as u64 / self.rows) as usize;
        while self.current < e && self.current < self.experts {
            self.flush(done);
        }
        if self.current == e && e < self.experts {
            if self.hist.is_empty() {
                self.hist = super::pool::take(self.bins);
            }
            Some(&mut self.hist)
        } else {
            None
        }
    }
}

impl RowOutliers {
    /// Scales of `groups` per row.
    pub(super) fn new(groups: u64) -> Self {
        Self {
            groups: groups.max(1),
            in_row: 0,
            cur: 0.0,
            cur_rank: 0,
            maxima: Vec::new(),
            ranks: Vec::new(),
            hist: KeyCounts::default(),
            experts: None,
        }
    }

    /// Also summarises each of `experts` experts' (of `rows` rows each)
    /// scales: keys `key_bits` wide, `2^(key_bits - bits)` keys a bin,
    /// `value` turning a key into its magnitude; `zero_bin`: key 0 is a
    /// zero scale. Nothing for an unstacked tensor.
    pub(super) fn per_expert(
        mut self,
        (experts, rows): (u64, u64),
        (key_bits, bits): (u32, u32),
        value: fn(u16) -> f32,
        zero_bin: bool,
    ) -> Self {
        if experts > 1 && rows > 0 {
            let shift = key_bits.saturating_sub(bits);
            self.experts = Some(ExpertKeys {
                // experts is bounded by the metadata checks.
                experts: experts as usize,
                rows,
                shift,
                zero_bin,
                value,
                current: 0,
                bins: 1 << (key_bits - shift),
                // Allocated at the first scale: a checkpoint of thousands
                // of stacked tensors has a scanner for each before any is
                // fed (128 KiB zeroed each for 15-bit keys).
                hist: Vec::new(),
                parts: Vec::new(),
            });
        }
        self
    }

    /// One scale: its magnitude and its 15-bit key (ordered like the magnitude).
    #[inline]
    fn see(&mut self, magnitude: f32, key: u16) {
        if magnitude.is_finite() {
            self.cur = self.cur.max(magnitude);
            self.hist.add(key, 1);
            if let Some(x) = &mut self.experts {
                let shift = x.shift;
                if let Some(h) = x.at_row(self.maxima.len(), (&self.maxima, &self.ranks))
                    && let Some(n) = h.get_mut(usize::from(key & 0x7fff) >> shift)
                {
                    *n += 1;
                }
            }
        }
        self.in_row += 1;
        if self.in_row == self.groups {
            self.maxima.push(self.cur);
            self.cur = 0.0;
            self.in_row = 0;
        }
    }

    /// F16 or BF16 scales (little-endian, whole values): each row's largest
    /// finite magnitude, as the largest rank (1 + the magnitude key
    /// `h & 0x7fff` when finite, below `inf`, the all-ones exponent; keys
    /// order like magnitudes). The magnitude histogram is not kept here: it
    /// comes from the tensor's pattern histogram at the end
    /// ([`Self::add_patterns`]), so this loop is a plain maximum.
    fn see_halves(&mut self, bytes: &[u8], inf: u16) {
        let row_bytes = usize::try_from(self.groups).map_or(usize::MAX, |g| g.saturating_mul(2));
        let mut rest = bytes;
        while rest.len() >= 2 {
            if self.in_row == 0 && rest.len() >= row_bytes && self.experts.is_none() {
                // Whole rows: no bookkeeping between them (a stacked
                // tensor's rows go one by one: each row's keys go to its
                // expert's histogram).
                let whole = rest.len() / row_bytes * row_bytes;
                let (rows, later) = rest.split_at(whole);
                self.ranks.extend(
                    rows.chunks_exact(row_bytes)
                        .map(|row| max_half_rank(row, inf)),
                );
                rest = later;
                continue;
            }
            let take = usize::try_from(self.groups - self.in_row)
                .map_or(rest.len() / 2, |n| n.min(rest.len() / 2));
            let (now, later) = rest.split_at(2 * take);
            if let Some(x) = &mut self.experts {
                // One row: one expert.
                let shift = x.shift;
                let row = self.maxima.len() + self.ranks.len();
                if let Some(h) = x.at_row(row, (&self.maxima, &self.ranks)) {
                    for c in now.as_chunks::<2>().0 {
                        let key = u16::from_le_bytes(*c) & 0x7fff;
                        if key < inf
                            && let Some(n) = h.get_mut(usize::from(key) >> shift)
                        {
                            *n += 1;
                        }
                    }
                }
            }
            self.cur_rank = self.cur_rank.max(max_half_rank(now, inf));
            self.in_row += take as u64;
            if self.in_row == self.groups {
                self.ranks.push(self.cur_rank);
                self.cur_rank = 0;
                self.in_row = 0;
            }
            rest = later;
        }
    }

    /// Scale bytes: each row's largest magnitude, as the row's largest
    /// `rank` (0 for a bad byte, else 1 + a key that orders like the
    /// magnitude). The magnitude histogram is not kept here: it comes from
    /// the byte histogram at the end ([`Self::add_bytes`]), so this loop
    /// is a plain (vectorised) maximum.
    fn see_bytes(&mut self, bytes: &[u8], max_rank: fn(&[u8]) -> u8) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let take = usize::try_from(self.groups - self.in_row)
                .map_or(rest.len(), |n| n.min(rest.len()));
            let (now, later) = rest.split_at(take);
            self.cur_rank = self.cur_rank.max(u16::from(max_rank(now)));
            self.in_row += take as u64;
            if self.in_row == self.groups {
                self.ranks.push(self.cur_rank);
                self.cur_rank = 0;
                self.in_row = 0;
            }
            rest = later;
        }
    }

    /// Adds the keys of a byte histogram's good bytes (`key(b)` is `None`
    /// for a bad byte) to the magnitude histogram.
    fn add_bytes(&mut self, counts: &[u64; 256], key: impl Fn(u8) -> Option<u16>) {
        for (b, &n) in counts.iter().enumerate() {
            if let (Some(k), true) = (key(b as u8), n > 0) {
                self.hist.add(k, u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
    }

    /// Adds a 16-bit pattern histogram's finite values to the magnitude
    /// histogram, and returns the smallest nonzero and the largest
    /// magnitude keys present (`None` when every value is zero or
    /// non-finite).
    fn add_patterns(
        &mut self,
        (patterns, blocks): (&[u32], Blocks),
        inf: u16,
    ) -> Option<(u16, u16)> {
        let (mut low, mut high) = (u16::MAX, 0u16);
        for (h, n) in blocks.cells(patterns) {
            let key = h & 0x7fff;
            if key >= inf {
                continue;
            }
            self.hist.add(key, n);
            if key > 0 {
                low = low.min(key);
                high = high.max(key);
            }
        }
        (low <= high).then_some((low, high))
    }

    /// Each expert's scale part (median, p99, outlier rows, zero scales),
    /// when the tensor is stacked.
    pub(super) fn expert_parts(&mut self) -> Option<Vec<ExpertPart>> {
        let x = self.experts.as_mut()?;
        while x.current < x.experts {
            x.flush((&self.maxima, &self.ranks));
        }
        Some(std::mem::take(&mut x.parts))
    }

    /// Each expert's scale part from its byte histogram (`hists[e]`, the
    /// byte scales' path: [`Self::see_bytes`] keeps only the row maxima);
    /// `key(b)` is `None` for a bad byte.
    fn expert_parts_from_bytes(
        &mut self,
        hists: &[[u64; 256]],
        key: impl Fn(u8) -> Option<u16>,
    ) -> Option<Vec<ExpertPart>> {
        let x = self.experts.as_mut()?;
        for (e, counts) in hists.iter().enumerate().take(x.experts) {
            x.current = e;
            if x.hist.len() == x.bins {
                clear_table(&mut x.hist);
            } else {
                x.hist = super::pool::take(x.bins);
            }
            for (b, &n) in counts.iter().enumerate() {
                if let Some(bin) =
                    key(b as u8).and_then(|k| x.hist.get_mut(usize::from(k) >> x.shift))
                {
                    *bin = bin.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
                }
            }
            x.flush((&self.maxima, &self.ranks));
        }
        self.expert_parts()
    }

    /// Rows whose largest magnitude exceeds 8× the median; `value` turns a
    /// key back into its magnitude.
    fn count(&self, value: impl Fn(u16) -> f32) -> u64 {
        let total: u64 = self.hist.iter().map(|(_, n)| u64::from(n)).sum();
        if total == 0 {
            return 0;
        }
        let (mut seen, mut median) = (0u64, 0f32);
        for (k, n) in self.hist.iter() {
            seen += u64::from(n);
            if seen * 2 >= total {
                median = value(k);
                break;
            }
        }
        let limit = 8.0 * median;
        let ranked = self.ranks.iter().map(|&r| match r {
            0 => 0.0,
            r => value(r - 1),
        });
        self.maxima
            .iter()
            .copied()
            .chain(ranked)
            .filter(|&m| m > limit)
            .count() as u64
    }
}

/// U8 scales of a float mode, per expert.
pub(super) struct ScalesScan {
    kind: ScaleKind,
    per_expert: u64,
    hists: Vec<[u64; 256]>,
    /// Bytes past the last expert's scales.
    beyond: [u64; 256],
    first_bad: Option<u64>,
    rows: RowOutliers,
}

impl ScalesScan {
    /// `experts` experts of `per_expert` scales each, `groups` a row.
    pub(super) fn new(kind: ScaleKind, experts: u64, per_expert: u64, groups: u64) -> Self {
        Self {
            kind,
            per_expert: per_expert.max(1),
            // experts is bounded by the module checks.
            hists: vec![[0u64; 256]; experts as usize],
            beyond: [0; 256],
            first_bad: None,
            rows: RowOutliers::new(groups).per_expert(
                (experts, per_expert / groups.max(1)),
                (8, 8),
                match kind {
                    ScaleKind::E8m0 => |k| dm::scale_byte(ScaleKind::E8m0, k as u8),
                    ScaleKind::E4m3 => |k| dm::scale_byte(ScaleKind::E4m3, k as u8).abs(),
                },
                kind == ScaleKind::E4m3,
            ),
        }
    }

    fn bad(kind: ScaleKind, b: u8) -> bool {
        match kind {
            ScaleKind::E8m0 => b == 0xff,
            // NaN, or negative (0x80 is -0: a zero scale, allowed).
            ScaleKind::E4m3 => b & 0x7f == 0x7f || (b & 0x80 != 0 && b != 0x80),
        }
    }

    /// The magnitude key of a good byte: E8M0 bytes and positive E4M3
    /// bytes order like their values.
    fn key(kind: ScaleKind, b: u8) -> u16 {
        u16::from(if kind == ScaleKind::E4m3 { b & 0x7f } else { b })
    }

    /// Feeds the bytes at `pos` (tensor-relative); `start` is the tensor's absolute offset.
    pub(super) fn feed(&mut self, start: u64, mut pos: u64, data: &[u8]) {
        // E8M0 bytes and positive E4M3 bytes order like their values; bad
        // bytes (NaN, negative) are left out of the maxima and the median.
        match self.kind {
            ScaleKind::E8m0 => self.rows.see_bytes(data, max_rank_e8m0),
            ScaleKind::E4m3 => self.rows.see_bytes(data, max_rank_e4m3),
        }
        let mut rest = data;
        while !rest.is_empty() {
            let expert = (pos / self.per_expert) as usize;
            let left = self.per_expert - pos % self.per_expert;
            let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
            let Some(h) = self.hists.get_mut(expert) else {
                // Bytes past the last expert (the module checks rule them
                // out) still count towards the median, as they always did.
                super::nvfp4::byte_hist(rest, &mut self.beyond);
                break;
            };
            let (part, tail) = rest.split_at(n);
            let mut local = [0u64; 256];
            super::nvfp4::byte_hist(part, &mut local);
            let kind = self.kind;
            let any_bad = (0..=255u8).any(|b| local[usize::from(b)] > 0 && Self::bad(kind, b));
            for (a, b) in h.iter_mut().zip(local) {
                *a += b;
            }
            if any_bad && self.first_bad.is_none() {
                self.first_bad = part
                    .iter()
                    .position(|&b| Self::bad(kind, b))
                    .map(|k| start + pos + k as u64);
            }
            pos += n as u64;
            rest = tail;
        }
    }

    /// Findings and statistics; `start` is the tensor's absolute offset.
    pub(super) fn finish(
        mut self,
        name: &str,
        start: u64,
        findings: &mut Vec<Finding>,
    ) -> TensorStats {
        let mut total = [0u64; 256];
        for h in &self.hists {
            for (a, b) in total.iter_mut().zip(h) {
                *a += b;
            }
        }
        if let Some(at) = self.first_bad {
            let bad: u64 = (0..=255u8)
                .filter(|&b| Self::bad(self.kind, b))
                .map(|b| total[usize::from(b)])
                .sum();
            let index = at - start;
            let what = match self.kind {
                ScaleKind::E8m0 => "E8M0 scale bytes are NaN (0xFF)",
                ScaleKind::E4m3 => "E4M3 scale bytes are NaN (0x7F/0xFF) or negative",
            };
            findings.push(
                Finding::error(
                    c::MLXLM_SCALES,
                    format!(
                        "{bad} {what}; the first is in expert {}, scale {} of its scales",
                        index / self.per_expert,
                        index % self.per_expert
                    ),
                )
                .tensor(name)
                .offset(at),
            );
        }
        let kind = self.kind;
        let mut keys = self.beyond;
        for (a, b) in keys.iter_mut().zip(&total) {
            *a += b;
        }
        self.rows
            .add_bytes(&keys, |b| (!Self::bad(kind, b)).then(|| Self::key(kind, b)));
        let mut out = TensorStats {
            scales: Some(Box::new(dm::summarise_byte_scales(self.kind, &total))),
            row_outliers: Some(self.rows.count(|k| dm::scale_byte(kind, k as u8))),
            // E8M0 has no zero; E4M3's are 0x00 and 0x80.
            zero_scales: Some(match kind {
                ScaleKind::E8m0 => 0,
                ScaleKind::E4m3 => total[0] + total[0x80],
            }),
            ..Default::default()
        };
        if self.kind == ScaleKind::E4m3 {
            out.e4m3 = Some(Box::new(stats::E4m3Stats::from_hists(&self.hists)));
        }
        out.experts = self.rows.expert_parts_from_bytes(&self.hists, |b| {
            (!Self::bad(kind, b)).then(|| Self::key(kind, b))
        });
        out
    }
}

/// The rank of an F16 or BF16 scale: 1 + its magnitude key when finite
/// (below `inf`), else 0.
#[inline(always)]
fn half_rank(c: [u8; 2], inf: u16) -> u16 {
    let key = u16::from_le_bytes(c) & 0x7fff;
    if key < inf { key + 1 } else { 0 }
}

/// The largest [`half_rank`] of whole halves: 16 lanes, so the loop is
/// vectorised (a plain fold is not).
fn max_half_rank(bytes: &[u8], inf: u16) -> u16 {
    let (blocks, tail) = bytes.as_chunks::<32>();
    let mut lanes = [0u16; 16];
    for b in blocks {
        for (m, c) in lanes.iter_mut().zip(b.as_chunks::<2>().0) {
            *m = (*m).max(half_rank(*c, inf));
        }
    }
    let tail = tail.as_chunks::<2>().0.iter().map(|&c| half_rank(c, inf));
    lanes.into_iter().chain(tail).fold(0, u16::max)
}

/// The largest of `rank` over `bytes`, in 32 lanes (vectorised).
#[inline(always)]
fn max_byte_rank(bytes: &[u8], rank: impl Fn(u8) -> u8) -> u8 {
    let (blocks, tail) = bytes.as_chunks::<32>();
    let mut lanes = [0u8; 32];
    for b in blocks {
        for (m, &x) in lanes.iter_mut().zip(b) {
            *m = (*m).max(rank(x));
        }
    }
    lanes
        .into_iter()
        .chain(tail.iter().map(|&x| rank(x)))
        .fold(0, u8::max)
}

/// The largest rank of E8M0 scale bytes: 0 for NaN (0xFF), else 1 + the
/// byte (which orders like the value).
fn max_rank_e8m0(bytes: &[u8]) -> u8 {
    max_byte_rank(bytes, |b| b.wrapping_add(1))
}

/// The largest rank of E4M3 scale bytes: 0 for NaN (0x7F, 0xFF) and
/// negative bytes, 1 for -0 (0x80), else 1 + the byte (positive bytes
/// order like their values).
fn max_rank_e4m3(bytes: &[u8]) -> u8 {
    max_byte_rank(
        bytes,
        |b| {
            if b < 0x7f { b + 1 } else { u8::from(b == 0x80) }
        },
    )
}

/// The magnitudes of an affine module's scales (F16, BF16 or F32), beside
/// the dense checks the scales get: the smallest and largest nonzero
/// finite `|s|`, for the weight's scale range.
pub(super) struct AbsRange {
    dtype: crate::format::DenseDtype,
    carry: Carry,
    /// F32 scales: the smallest nonzero and the largest finite magnitude.
    min: f32,
    max: f32,
    /// F32 scales equal to zero.
    zeros: u64,
    rows: RowOutliers,
}

impl AbsRange {
    /// Scales of `dtype`, `groups` a row.
    pub(super) fn new(dtype: crate::format::DenseDtype, groups: u64) -> Self {
        Self {
            dtype,
            carry: Carry::new(dtype.size() as usize),
            min: f32::INFINITY,
            max: 0.0,
            zeros: 0,
            rows: RowOutliers::new(groups),
        }
    }

    pub(super) fn feed(&mut self, data: &[u8]) {
        use crate::format::DenseDtype;
        let (dtype, min, max, rows) = (self.dtype, &mut self.min, &mut self.max, &mut self.rows);
        let zeros = &mut self.zeros;
        self.carry.feed(data, |whole| {
            let mut see = |v: f32, key: u16| {
                let a = v.abs();
                if a.is_finite() && a > 0.0 {
                    *min = min.min(a);
                    *max = max.max(a);
                }
                *zeros += u64::from(a == 0.0);
                rows.see(a, key);
            };
            match dtype {
                DenseDtype::F32 => whole.chunks_exact(4).for_each(|c| {
                    let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    see(v, (v.to_bits() >> 16) as u16);
                }),
                DenseDtype::Bf16 => rows.see_halves(whole, 0x7f80),
                DenseDtype::F16 => rows.see_halves(whole, 0x7c00),
                // Not affine scales dtypes (`DenseDtype::parse`): read as F32's.
                DenseDtype::F64 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 | DenseDtype::Int(_) => {
                    for c in whole.chunks_exact(dtype.size() as usize) {
                        let v = crate::decode::dequant::dense_value(dtype, c);
                        see(v, (v.to_bits() >> 16) as u16);
                    }
                }
            }
        });
    }

    /// Also each of `experts` stacked experts' (`rows` rows each) scale
    /// statistics.
    pub(super) fn per_expert(mut self, experts: u64, rows: u64) -> Self {
        use crate::decode::{bf16_to_f32, f16_to_f32};
        let value: fn(u16) -> f32 = match self.dtype {
            crate::format::DenseDtype::F16 => f16_to_f32,
            _ => bf16_to_f32,
        };
        self.rows = self.rows.per_expert((experts, rows), (15, 15), value, true);
        self
    }

    /// `[min, max]` of the nonzero finite magnitudes (when there is one),
    /// the rows whose largest magnitude exceeds 8× the median, and the
    /// number of zero scales.
    /// `patterns` is the tensor's 16-bit pattern histogram (F16 and BF16
    /// scales; the dense scanner keeps it), unused for F32.
    pub(super) fn finish(mut self, patterns: (&[u32], Blocks)) -> ScalesFound {
        use crate::decode::{bf16_to_f32, f16_to_f32};
        use crate::format::DenseDtype;
        let value: fn(u16) -> f32 = match self.dtype {
            DenseDtype::F16 => f16_to_f32,
            _ => bf16_to_f32,
        };
        let range = match self.dtype {
            DenseDtype::F32
            | DenseDtype::F64
            | DenseDtype::F8E4m3
            | DenseDtype::F8E5m2
            | DenseDtype::Int(_) => (self.min <= self.max).then_some((self.min, self.max)),
            DenseDtype::F16 | DenseDtype::Bf16 => {
                let inf = if self.dtype == DenseDtype::F16 {
                    0x7c00
                } else {
                    0x7f80
                };
                self.rows
                    .add_patterns(patterns, inf)
                    .map(|(lo, hi)| (value(lo), value(hi)))
            }
        };
        let outliers = self.rows.count(value);
        let zeros = match self.dtype {
            DenseDtype::F32
            | DenseDtype::F64
            | DenseDtype::F8E4m3
            | DenseDtype::F8E5m2
            | DenseDtype::Int(_) => self.zeros,
            DenseDtype::F16 | DenseDtype::Bf16 => [0usize, 0x8000]
                .iter()
                .map(|&h| patterns.0.get(h).map_or(0, |&n| u64::from(n)))
                .sum(),
        };
        // The magnitudes' distribution (the weight's scale histogram and
        // quantiles): from the pattern histogram's cells for F16/BF16, from
        // the BF16-precision keys for F32.
        let mut magnitudes: Vec<(f32, u64)> = Vec::new();
        match self.dtype {
            DenseDtype::F32
            | DenseDtype::F64
            | DenseDtype::F8E4m3
            | DenseDtype::F8E5m2
            | DenseDtype::Int(_) => {
                for (k, n) in self.rows.hist.iter().filter(|&(k, _)| k > 0) {
                    magnitudes.push((value(k), u64::from(n)));
                }
            }
            DenseDtype::F16 | DenseDtype::Bf16 => {
                let inf = if self.dtype == DenseDtype::F16 {
                    0x7c00
                } else {
                    0x7f80
                };
                for (h, n) in patterns.1.cells(patterns.0) {
                    let key = h & 0x7fff;
                    if key > 0 && key < inf {
                        magnitudes.push((value(key), u64::from(n)));
                    }
                }
            }
        }
        let label = format!("|{}|", self.dtype.as_str());
        let experts = self.rows.expert_parts();
        ScalesFound {
            experts,
            range: range.map(|(lo, hi)| [f64::from(lo), f64::from(hi)]),
            outliers,
            zeros,
            summary: dm::summarise_weighted(&label, magnitudes, zeros),
        }
    }
}

/// What the scan of an affine module's scales found for its weight.
#[derive(Debug, PartialEq)]
pub(super) struct ScalesFound {
    /// `[min, max]` of the nonzero finite magnitudes, when there is one.
    pub(super) range: Option<[f64; 2]>,
    /// Rows whose largest magnitude exceeds 8× the median.
    pub(super) outliers: u64,
    /// Zero scales.
    pub(super) zeros: u64,
    /// The magnitudes' distribution (zeros counted as invalid).
    pub(super) summary: stats::ScaleSummary,
    /// A stacked module's scales, expert by expert.
    pub(super) experts: Option<Vec<ExpertPart>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::f32_to_bf16;
    use crate::format::DenseDtype;

    /// The 16-bit pattern histogram the dense scanner keeps of `bytes`.
    fn patterns(bytes: &[u8]) -> Vec<u32> {
        let mut h = vec![0u32; 1 << 16];
        for c in bytes.chunks_exact(2) {
            h[usize::from(u16::from_le_bytes([c[0], c[1]]))] += 1;
        }
        h
    }

    #[test]
    fn rows_above_eight_medians_are_outliers() {
        // 4 rows of 2 scales: median |s| 1.0; row 2's largest is 9 > 8.
        let vals = [1.0f32, -1.0, 0.5, 1.0, 9.0, 1.0, -8.0, 1.0];
        let bytes: Vec<u8> = vals
            .iter()
            .flat_map(|&v| f32_to_bf16(v).to_le_bytes())
            .collect();
        let mut r = AbsRange::new(DenseDtype::Bf16, 2);
        r.feed(&bytes);
        assert_eq!(r.finish((&patterns(&bytes), Blocks::ALL)).outliers, 1);
    }

    #[test]
    fn abs_range_ignores_signs_zeros_and_how_the_bytes_are_cut() {
        let vals = [0.5f32, -4.0, 0.0, 0.25, -0.125, f32::NAN, 2.0];
        let bytes: Vec<u8> = vals
            .iter()
            .flat_map(|&v| f32_to_bf16(v).to_le_bytes())
            .collect();
        for cut in 0..=bytes.len() {
            let mut r = AbsRange::new(DenseDtype::Bf16, 7);
            r.feed(&bytes[..cut]);
            r.feed(&bytes[cut..]);
            // One row; median of the finite magnitudes 0.25: 4 > 8 × 0.25.
            let found = r.finish((&patterns(&bytes), Blocks::ALL));
            assert_eq!(
                (found.range, found.outliers, found.zeros),
                (Some([0.125, 4.0]), 1, 1),
                "cut at {cut}"
            );
            // Five nonzero finite magnitudes; the zero is invalid.
            assert_eq!((found.summary.count, found.summary.invalid), (6, 1));
            assert_eq!(found.summary.median, 0.5);
        }
        let mut r = AbsRange::new(DenseDtype::F32, 1);
        r.feed(&0f32.to_le_bytes());
        let found = r.finish((&[], Blocks::NONE));
        assert_eq!((found.range, found.outliers, found.zeros), (None, 0, 1));
    }
}
