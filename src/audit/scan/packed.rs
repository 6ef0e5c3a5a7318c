//! The scanner of MLX-style packed tensors (3- and 4-bit codes, then one F16
//! scale per group of 64): code tally, scale histogram, per-row scale
//! maxima, and the findings and quality statistics made from them.

use rayon::prelude::*;

use super::Carry;
use super::tally::{CodeCtx, CodeTally, PARALLEL_MIN_BYTES, group_bytes};
use crate::decode::stats::{self, CodeCounts, Quality, TensorStats};
use crate::decode::{self, f16_to_f32};
use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::PackedKind;

/// A packed tensor's scan state: codes, then scales.
pub(super) struct Packed {
    kind: PackedKind,
    codes_bytes: u64,
    groups_per_row: u64,
    rows: u64,
    codes: Carry,
    scales: Carry,
    acc: PackedAcc,
}

struct PackedAcc {
    ctx: CodeCtx,
    codes_pos: u64,
    tally: CodeTally,
    /// Counts of each F16 pattern; an array, so a `u16` index needs no check.
    scale_hist: Box<[u32; 1 << 16]>,
    scale_index: u64,
    /// Row and group within it of the next scale (a division per scale costs
    /// more than the rest of its work).
    scale_row: usize,
    scale_in_row: u64,
    groups_per_row: u64,
    row_max: Vec<u16>,
    first_bad_scale: Option<(u64, u16)>,
}

impl Packed {
    /// The scan state of a `rows` × `cols` tensor of `kind` whose codes take
    /// `codes_bytes` and start at absolute offset `start`.
    pub(super) fn new(
        kind: PackedKind,
        rows: u64,
        cols: u64,
        codes_bytes: u64,
        start: u64,
    ) -> Self {
        let groups_per_row = cols / 64;
        Self {
            kind,
            codes_bytes,
            groups_per_row,
            rows,
            codes: Carry::new(group_bytes(kind)),
            scales: Carry::new(2),
            acc: PackedAcc {
                ctx: CodeCtx::new(kind, start),
                codes_pos: 0,
                tally: CodeTally::new(),
                scale_hist: Box::new([0; 1 << 16]),
                scale_index: 0,
                scale_row: 0,
                scale_in_row: 0,
                groups_per_row,
                // rows is bounded (<= 262144) by the metadata checks.
                row_max: vec![0; rows as usize],
                first_bad_scale: None,
            },
        }
    }

    /// Feeds the bytes at `pos` (tensor-relative) onwards.
    pub(super) fn feed(&mut self, pos: u64, data: &[u8]) {
        let mut rest = data;
        if pos < self.codes_bytes {
            let n =
                usize::try_from(self.codes_bytes - pos).map_or(rest.len(), |n| n.min(rest.len()));
            let (codes, scales) = rest.split_at(n);
            let acc = &mut self.acc;
            self.codes.feed(codes, |u| acc.codes(u));
            rest = scales;
        }
        if !rest.is_empty() {
            let scales_start = self.acc.ctx.start + self.codes_bytes;
            let acc = &mut self.acc;
            self.scales.feed(rest, |u| acc.scales(u, scales_start));
        }
    }

    /// The raw totals so far (the findings and statistics are a function of them).
    #[cfg(test)]
    pub(super) fn totals(&self) -> Totals {
        self.acc.totals()
    }

    /// Findings and statistics once every byte has been fed.
    pub(super) fn finish(self, name: &str, findings: &mut Vec<Finding>) -> TensorStats {
        let acc = &self.acc;
        let codes = acc.code_counts();
        let reserved = codes.reserved();
        if reserved > 0 {
            let at = acc.tally.first_reserved.map(|(at, _)| at);
            let cols = self.groups_per_row * 64;
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
                        self.kind.max_code(),
                        self.kind.precision().as_str()
                    ),
                )
                .tensor(name)
                .field("codes")
                .maybe_offset(at),
            );
        }
        let scales = stats::summarise_scales(&acc.scale_hist[..]);
        if let Some((at, h)) = acc.first_bad_scale {
            let index = (at - acc.ctx.start - self.codes_bytes) / 2;
            findings.push(
                Finding::error(
                    c::PACKED_SCALES,
                    format!(
                        "{} of {} scales are not finite and > 0; the first, row {} group {}, is {}",
                        scales.invalid,
                        scales.count,
                        index / self.groups_per_row,
                        index % self.groups_per_row,
                        f16_to_f32(h)
                    ),
                )
                .tensor(name)
                .field("scales")
                .offset(at),
            );
        }
        let rows_over = |factor: f64| {
            let limit = scales.median * factor;
            acc.row_max
                .iter()
                .filter(|&&h| h != 0 && f64::from(f16_to_f32(h)) > limit)
                .count() as u64
        };
        let (outlier_rows, high_rows) = (rows_over(8.0), rows_over(10.0));
        let mut quality = Quality {
            entropy_bits: codes.entropy_bits(),
            clipping_share: codes.clipping_share(),
            unused_levels: codes.unused_levels(),
            zero_groups: acc.tally.zero_groups,
            groups: self.rows * self.groups_per_row,
            scale_dynamic_range: scales.max / scales.min,
            outlier_rows,
            high_rows,
            reserved_codes: reserved,
            suspicion: 0.0,
        };
        quality.suspicion = stats::suspicion(&quality, self.kind.bits());
        TensorStats {
            codes: Some(codes),
            scales: Some(Box::new(scales)),
            values: None,
            quality: Some(Box::new(quality)),
            ..Default::default()
        }
    }
}

/// The raw totals of a packed scan (see [`Packed::totals`]).
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub(super) struct Totals {
    pub(super) counts: [u64; 16],
    pub(super) zero_groups: u64,
    pub(super) first_reserved: Option<(u64, u64)>,
    pub(super) scale_hist: Vec<u32>,
    pub(super) row_max: Vec<u16>,
    pub(super) first_bad_scale: Option<(u64, u16)>,
}

impl PackedAcc {
    fn codes(&mut self, units: &[u8]) {
        let ctx = &self.ctx;
        let threads = rayon::current_num_threads();
        if threads > 1 && units.len() >= PARALLEL_MIN_BYTES {
            // Pieces of whole groups, a few per thread so uneven cores even out.
            let group = group_bytes(ctx.kind);
            let piece = (units.len() / (threads * 4)).max(PARALLEL_MIN_BYTES / 4);
            let piece = piece.div_ceil(group) * group;
            let pos = self.codes_pos;
            let tallies: Vec<CodeTally> = units
                .par_chunks(piece)
                .enumerate()
                .map(|(i, part)| {
                    let mut t = CodeTally::new();
                    t.run(ctx, pos + (i * piece) as u64, part);
                    t
                })
                .collect();
            for t in tallies {
                self.tally.merge(t);
            }
        } else {
            self.tally.run(ctx, self.codes_pos, units);
        }
        self.codes_pos += units.len() as u64;
    }

    /// Tallies whole scales, a row's worth at a time: the row bookkeeping
    /// and the search for a bad scale leave the per-scale loop.
    fn scales(&mut self, units: &[u8], scales_start: u64) {
        let per_row = self.groups_per_row.max(1);
        let mut rest = units;
        while !rest.is_empty() {
            let left = usize::try_from(per_row - self.scale_in_row).unwrap_or(usize::MAX);
            let (run, tail) = rest.split_at(left.saturating_mul(2).min(rest.len()));
            let mut max = 0u16;
            let mut all_good = true;
            for s in run.as_chunks::<2>().0 {
                let h = u16::from_le_bytes(*s);
                self.scale_hist[usize::from(h)] += 1;
                let good = decode::f16_is_positive_finite(h);
                // Positive finite halves order as their bit patterns do.
                max = max.max(if good { h } else { 0 });
                all_good &= good;
            }
            if !all_good && self.first_bad_scale.is_none() {
                let index = self.scale_index;
                self.first_bad_scale =
                    run.as_chunks::<2>()
                        .0
                        .iter()
                        .enumerate()
                        .find_map(|(i, s)| {
                            let h = u16::from_le_bytes(*s);
                            let at = scales_start + (index + i as u64) * 2;
                            (!decode::f16_is_positive_finite(h)).then_some((at, h))
                        });
            }
            if let Some(m) = self.row_max.get_mut(self.scale_row) {
                *m = (*m).max(max);
            }
            let n = (run.len() / 2) as u64;
            self.scale_index += n;
            self.scale_in_row += n;
            if self.scale_in_row == per_row {
                self.scale_in_row = 0;
                self.scale_row += 1;
            }
            rest = tail;
        }
    }

    /// Everything the findings and statistics are made from, for tests
    /// that compare it with a naive reference.
    #[cfg(test)]
    fn totals(&self) -> Totals {
        Totals {
            counts: self.tally.counts,
            zero_groups: self.tally.zero_groups,
            first_reserved: self.tally.first_reserved,
            scale_hist: self.scale_hist.to_vec(),
            row_max: self.row_max.clone(),
            first_bad_scale: self.first_bad_scale,
        }
    }

    fn code_counts(&self) -> CodeCounts {
        let n = 1usize << self.ctx.kind.bits();
        CodeCounts {
            bits: self.ctx.kind.bits(),
            zero: self.ctx.kind.zero(),
            max_code: self.ctx.kind.max_code(),
            counts: self.tally.counts.iter().take(n).copied().collect(),
        }
    }
}
