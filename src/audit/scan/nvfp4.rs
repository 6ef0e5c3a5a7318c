//! The scanners of NVFP4 scale tensors: stacked E4M3 block scales (per-expert
//! byte histograms, the first NaN byte located) and per-expert F32 global
//! scales.

use super::Carry;
use crate::decode::stats::{self, TensorStats};
use crate::finding::Finding;
use crate::finding::checks as c;

/// Stacked E4M3 scales of `experts` experts.
pub(super) struct E4m3Scan {
    per_expert_bytes: u64,
    hists: Vec<[u64; 256]>,
    first_nan: Option<u64>,
}

impl E4m3Scan {
    /// `experts` experts of `per_expert_bytes` scale bytes each.
    pub(super) fn new(experts: u64, per_expert_bytes: u64) -> Self {
        Self {
            per_expert_bytes: per_expert_bytes.max(1),
            // experts is bounded (<= 1024) by the metadata checks.
            hists: vec![[0u64; 256]; experts as usize],
            first_nan: None,
        }
    }

    /// Feeds the bytes at `pos` (tensor-relative) onwards; `start` is the
    /// tensor's absolute offset.
    pub(super) fn feed(&mut self, start: u64, mut pos: u64, data: &[u8]) {
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
            e4m3: Some(e4),
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
