//! The scanners of NVFP4 scale tensors: stacked E4M3 block scales (per-expert
//! byte histograms, the first NaN byte located) and per-expert F32 global
//! scales.

use super::Carry;
use crate::decode::experts::{Digest, ExpertPart};
use crate::decode::mlxlm::extreme_share;
use crate::decode::nvfp4::e4m3_table;
use crate::decode::stats::{self, CodeCounts, Quality, TensorStats};
use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::QuantMode;

/// Stacked E4M3 scales of `experts` experts.
pub(super) struct E4m3Scan {
    per_expert_bytes: u64,
    hists: Vec<[u64; 256]>,
    first_nan: Option<u64>,
    /// Scale bytes a row.
    groups: u64,
    /// Each row's largest scale byte (sign and NaN aside; positive E4M3
    /// bytes order like their values), for each expert's outlier rows.
    row_max: Vec<u8>,
    in_row: u64,
    cur: u8,
}

impl E4m3Scan {
    /// `experts` experts of `rows` rows of `groups` scale bytes each.
    pub(super) fn new(experts: u64, rows: u64, groups: u64) -> Self {
        Self {
            per_expert_bytes: (rows * groups).max(1),
            // experts is bounded (<= 1024) by the metadata checks.
            hists: vec![[0u64; 256]; experts as usize],
            first_nan: None,
            groups: groups.max(1),
            row_max: Vec::new(),
            in_row: 0,
            cur: 0,
        }
    }

    /// Feeds the bytes at `pos` (tensor-relative) onwards; `start` is the
    /// tensor's absolute offset.
    pub(super) fn feed(&mut self, start: u64, mut pos: u64, data: &[u8]) {
        let mut rest = data;
        while !rest.is_empty() {
            let take = usize::try_from(self.groups - self.in_row)
                .map_or(rest.len(), |n| n.min(rest.len()));
            let (now, later) = rest.split_at(take);
            let m = now
                .iter()
                .map(|&b| if b & 0x7f == 0x7f { 0 } else { b & 0x7f })
                .max()
                .unwrap_or(0);
            self.cur = self.cur.max(m);
            self.in_row += take as u64;
            if self.in_row == self.groups {
                self.row_max.push(self.cur);
                self.cur = 0;
                self.in_row = 0;
            }
            rest = later;
        }
        let mut rest = data;
        while !rest.is_empty() {
            let expert = (pos / self.per_expert_bytes) as usize;
            let left = self.per_expert_bytes - pos % self.per_expert_bytes;
            let n = usize::try_from(left).map_or(rest.len(), |left| left.min(rest.len()));
            let Some(h) = self.hists.get_mut(expert) else {
                break;
            };
            let (part, tail) = rest.split_at(n);
            byte_hist(part, h);
            if self.first_nan.is_none() && h[0x7f] + h[0xff] > 0 {
                self.first_nan = part
                    .iter()
                    .position(|&b| b & 0x7f == 0x7f)
                    .map(|k| start + pos + k as u64);
            }
            pos += n as u64;
            rest = tail;
        }
    }

    /// Findings and statistics; `start` is the tensor's absolute offset.
    pub(super) fn finish(self, name: &str, start: u64, findings: &mut Vec<Finding>) -> TensorStats {
        let e4 = stats::E4m3Stats::from_hists(&self.hists);
        if e4.nan > 0 {
            let at = self.first_nan.unwrap_or(start);
            let index = at - start;
            findings.push(
                Finding::error(
                    c::E4M3_SCALES,
                    format!(
                        "{} E4M3 scale bytes are NaN (0x7F/0xFF); the first is in expert {}, byte {} of its scales",
                        e4.nan,
                        index / self.per_expert_bytes,
                        index % self.per_expert_bytes
                    ),
                )
                .tensor(name)
                .offset(at),
            );
        }
        TensorStats {
            e4m3: Some(Box::new(e4)),
            experts: self.expert_parts(),
            ..Default::default()
        }
    }
}

impl E4m3Scan {
    /// Each expert's scale part (in E4M3 units; the report multiplies by
    /// the expert's global scale), from its byte histogram and its rows'
    /// largest bytes; None for a single expert.
    fn expert_parts(&self) -> Option<Vec<ExpertPart>> {
        if self.hists.len() < 2 {
            return None;
        }
        let rows = usize::try_from(self.per_expert_bytes / self.groups).ok()?;
        let table = e4m3_table();
        Some(
            self.hists
                .iter()
                .enumerate()
                .map(|(e, h)| {
                    // Zero and NaN bytes aside; a negative scale counts by
                    // its magnitude.
                    let values: Vec<(f64, u64)> = (0..256usize)
                        .filter(|&b| h[b] > 0 && b & 0x7f != 0 && b & 0x7f != 0x7f)
                        .map(|b| (f64::from(table[b & 0x7f]), h[b]))
                        .collect();
                    let lo = e.saturating_mul(rows).min(self.row_max.len());
                    let hi = lo.saturating_add(rows).min(self.row_max.len());
                    let maxima: Vec<f64> = self.row_max[lo..hi]
                        .iter()
                        .map(|&b| f64::from(table[usize::from(b)]))
                        .collect();
                    let mut p = ExpertPart::from_scales(values, &maxima);
                    p.rows = rows as u64;
                    p.zero_groups = Some(h[0] + h[0x80]);
                    p
                })
                .collect(),
        )
    }
}

/// Stacked NVFP4 codes: each expert's E2M1 code counts and groups of 16
/// codes that are all ±0 (a group that carries nothing), for the weight's
/// quality and the comparison of its experts.
pub(super) struct Fp4Scan {
    carry: Carry,
    per_expert_bytes: u64,
    rows: u64,
    pos: u64,
    counts: Vec<[u64; 16]>,
    zero_groups: Vec<u64>,
    /// Each expert's code bytes, digested (copied experts).
    digests: Vec<Digest>,
}

impl Fp4Scan {
    /// `experts` experts of `rows` rows of `cols` codes.
    pub(super) fn new(experts: u64, rows: u64, cols: u64) -> Self {
        // experts is bounded (<= 1024) by the metadata checks.
        let parts = experts.max(1) as usize;
        Self {
            carry: Carry::new(8),
            per_expert_bytes: (rows * cols / 2).max(8),
            rows,
            pos: 0,
            counts: vec![[0; 16]; parts],
            zero_groups: vec![0; parts],
            digests: vec![Digest::default(); parts],
        }
    }

    /// Feeds the next bytes.
    pub(super) fn feed(&mut self, data: &[u8]) {
        let (counts, zeros, digests, per, pos) = (
            &mut self.counts,
            &mut self.zero_groups,
            &mut self.digests,
            self.per_expert_bytes,
            &mut self.pos,
        );
        // An expert holds whole groups (its columns are a multiple of 16),
        // so a group never straddles two experts.
        self.carry.feed(data, |whole| {
            let mut rest = whole;
            while !rest.is_empty() {
                let e = ((*pos / per) as usize).min(counts.len() - 1);
                let left = per - *pos % per;
                let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                let (now, later) = rest.split_at(n);
                digests[e].feed(now);
                for (a, b) in counts[e].iter_mut().zip(super::tally::nibble_counts(now)) {
                    *a += b;
                }
                zeros[e] += now
                    .as_chunks::<8>()
                    .0
                    .iter()
                    .filter(|g| u64::from_le_bytes(**g) & 0x7777_7777_7777_7777 == 0)
                    .count() as u64;
                *pos += n as u64;
                rest = later;
            }
        });
    }

    /// The weight's codes and quality, expert by expert too.
    pub(super) fn finish(mut self) -> TensorStats {
        let grid = |counts: Vec<u64>| CodeCounts {
            bits: 4,
            zero: 0,
            max_code: 15,
            counts,
        };
        let groups = self.per_expert_bytes / 8;
        let experts: Vec<ExpertPart> = self
            .counts
            .iter()
            .zip(&self.zero_groups)
            .zip(self.digests.iter_mut())
            .map(|((c, &z), d)| {
                let c = grid(c.to_vec());
                let mut p = ExpertPart::from_codes(
                    &c,
                    extreme_share(QuantMode::Nvfp4, &c.counts),
                    self.rows,
                    groups,
                );
                p.zero_groups = Some(z);
                p.digest = Some(d.finish());
                p
            })
            .collect();
        let mut total = [0u64; 16];
        for c in &self.counts {
            for (a, b) in total.iter_mut().zip(c) {
                *a += b;
            }
        }
        let codes = grid(total.to_vec());
        let mut quality = Quality {
            entropy_bits: codes.entropy_bits(),
            clipping_share: extreme_share(QuantMode::Nvfp4, &codes.counts),
            unused_levels: codes.unused_levels(),
            zero_groups: self.zero_groups.iter().sum(),
            groups: groups * self.counts.len() as u64,
            scale_dynamic_range: 0.0,
            outlier_rows: 0,
            high_rows: 0,
            reserved_codes: 0,
            suspicion: 0.0,
        };
        quality.suspicion = stats::suspicion(&quality, 4);
        TensorStats {
            codes: Some(codes),
            quality: Some(Box::new(quality)),
            experts: (experts.len() > 1).then_some(experts),
            ..Default::default()
        }
    }
}

/// Per-expert F32 global scales.
pub(super) struct GlobalScan {
    carry: Carry,
    values: Vec<f32>,
}

impl GlobalScan {
    /// Room for `experts` scales.
    pub(super) fn new(experts: u64) -> Self {
        Self {
            carry: Carry::new(4),
            // experts is bounded (<= 1024) by the metadata checks.
            values: Vec::with_capacity(experts as usize),
        }
    }

    /// Feeds the next bytes.
    pub(super) fn feed(&mut self, data: &[u8]) {
        let values = &mut self.values;
        self.carry.feed(data, |u| {
            values.extend(u.as_chunks::<4>().0.iter().map(|w| f32::from_le_bytes(*w)));
        });
    }

    /// Findings and statistics; `start` is the tensor's absolute offset.
    pub(super) fn finish(self, name: &str, start: u64, findings: &mut Vec<Finding>) -> TensorStats {
        let bad: Vec<(usize, f32)> = self
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
                        self.values.len()
                    ),
                )
                .tensor(name)
                .offset(start + 4 * i as u64),
            );
        }
        TensorStats {
            global_scales: Some(self.values.iter().map(|&v| f64::from(v)).collect()),
            ..Default::default()
        }
    }
}

/// Adds `data`'s bytes to a 256-bin histogram (four interleaved tables, so
/// runs of equal bytes do not serialise on one counter).
pub(super) fn byte_hist(data: &[u8], h: &mut [u64; 256]) {
    let mut t = [[0u32; 256]; 4];
    for block in data.chunks(1 << 30) {
        let (quads, tail) = block.as_chunks::<4>();
        for q in quads {
            t[0][usize::from(q[0])] += 1;
            t[1][usize::from(q[1])] += 1;
            t[2][usize::from(q[2])] += 1;
            t[3][usize::from(q[3])] += 1;
        }
        for &b in tail {
            t[0][usize::from(b)] += 1;
        }
        for (b, slot) in h.iter_mut().enumerate() {
            *slot += u64::from(t[0][b] + t[1][b] + t[2][b] + t[3][b]);
        }
        t = [[0u32; 256]; 4];
    }
}
