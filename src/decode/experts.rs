//! Per-expert statistics of a stacked MoE tensor (`[E, out, in]`: an
//! mlx-nvfp4 weight, an MLX-LM `switch_mlp` weight): the experts of one
//! tensor are peers of each other, so each expert carries the numbers the
//! peer comparison reads ([`crate::decode::peers`]). The single pass fills
//! them: codes from the weight's scan, scales from its scales tensor's
//! (merged onto the weight once both are scanned), so no second read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::peers::{self, Feature, Features};
use super::stats::CodeCounts;

/// One expert's share of a stacked tensor's statistics; each part is
/// optional (the codes come from the weight, the scales from its scales
/// tensor, until the two are merged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ExpertPart {
    /// Output rows of the expert.
    pub rows: u64,
    /// Entropy of its codes, in bits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entropy_bits: Option<f64>,
    /// Share of its codes at the extreme levels (as the tensor counts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clipping_share: Option<f64>,
    /// Mean level (`code - zero`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_mean: Option<f64>,
    /// Standard deviation of the levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_spread: Option<f64>,
    /// Groups that carry nothing (all codes at zero, or a zero scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_groups: Option<u64>,
    /// Groups of the expert.
    #[serde(default)]
    pub groups: u64,
    /// Median scale magnitude (NVFP4: times the expert's global scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_median: Option<f64>,
    /// 99th percentile of the scale magnitudes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_p99: Option<f64>,
    /// Rows whose largest scale exceeds 8× the expert's median scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_rows: Option<u64>,
    /// A 64-bit digest of the expert's code bytes ([`Digest`]): two
    /// experts with the same one hold the same codes (one copied over the
    /// other, a classic stacking mistake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<u64>,
}

/// A fast 64-bit digest of a byte stream, the same however the stream is
/// cut: 32 bytes a step over four independent lanes (one lane's chain of
/// multiplies would hold the scan to eight bytes per multiply's latency),
/// so hashing an expert's codes costs little beside counting them. Not
/// cryptographic: it tells copies from different bytes, not a forgery.
#[derive(Debug, Clone, Default)]
pub struct Digest {
    h: [u64; 4],
    len: u64,
    tail: [u8; 32],
    fill: usize,
}

impl Digest {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    #[inline(always)]
    fn mix(h: u64, w: u64) -> u64 {
        (h.rotate_left(5) ^ w).wrapping_mul(Self::K)
    }

    #[inline(always)]
    fn block(&mut self, b: &[u8; 32]) {
        let (words, _) = b.as_chunks::<8>();
        for (h, w) in self.h.iter_mut().zip(words) {
            *h = Self::mix(*h, u64::from_le_bytes(*w));
        }
    }

    /// Adds bytes.
    pub fn feed(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.fill > 0 {
            let take = (32 - self.fill).min(data.len());
            self.tail[self.fill..self.fill + take].copy_from_slice(&data[..take]);
            self.fill += take;
            data = &data[take..];
            if self.fill < 32 {
                return;
            }
            let tail = self.tail;
            self.block(&tail);
            self.fill = 0;
        }
        let (blocks, rest) = data.as_chunks::<32>();
        for b in blocks {
            self.block(b);
        }
        self.tail[..rest.len()].copy_from_slice(rest);
        self.fill = rest.len();
    }

    /// The digest of everything fed; starts over.
    pub fn finish(&mut self) -> u64 {
        if self.fill > 0 {
            let mut last = [0u8; 32];
            last[..self.fill].copy_from_slice(&self.tail[..self.fill]);
            self.block(&last);
        }
        let mut z = self.h.iter().fold(0, |z, &h| Self::mix(z, h));
        z = Self::mix(z, self.len);
        // A final avalanche, so nearby inputs land far apart.
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        *self = Self::default();
        z ^ (z >> 33)
    }
}

/// Mean and standard deviation of the levels (`code - zero`) of `c`'s
/// valid codes; None without codes.
pub fn levels(c: &CodeCounts) -> Option<(f64, f64)> {
    let (mut n, mut sum, mut sq) = (0f64, 0f64, 0f64);
    for (code, &k) in c
        .counts
        .iter()
        .enumerate()
        .take(usize::from(c.max_code) + 1)
    {
        let l = code as f64 - f64::from(c.zero);
        n += k as f64;
        sum += l * k as f64;
        sq += l * l * k as f64;
    }
    (n > 0.0).then(|| {
        let mean = sum / n;
        (mean, (sq / n - mean * mean).max(0.0).sqrt())
    })
}

impl ExpertPart {
    /// The code part of an expert: its code counts (on the tensor's grid)
    /// and its clipping share as the tensor's mode counts it.
    pub fn from_codes(codes: &CodeCounts, clipping: f64, rows: u64, groups: u64) -> Self {
        let (mean, spread) = levels(codes).unzip();
        Self {
            rows,
            groups,
            entropy_bits: Some(codes.entropy_bits()),
            clipping_share: Some(clipping),
            level_mean: mean,
            level_spread: spread,
            ..Default::default()
        }
    }

    /// The scale part of an expert from its scale magnitudes `(value,
    /// count)` and its rows' largest magnitudes: median, p99 and the rows
    /// above 8× the median.
    pub fn from_scales(mut values: Vec<(f64, u64)>, row_maxima: &[f64]) -> Self {
        values.retain(|v| v.0.is_finite() && v.0 > 0.0 && v.1 > 0);
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: u64 = values.iter().map(|v| v.1).sum();
        let quantile = |q: f64| -> Option<f64> {
            if total == 0 {
                return None;
            }
            let target = ((total - 1) as f64 * q).round() as u64;
            let mut seen = 0;
            for &(v, n) in &values {
                seen += n;
                if seen > target {
                    return Some(v);
                }
            }
            None
        };
        let median = quantile(0.5);
        Self {
            rows: row_maxima.len() as u64,
            scale_median: median,
            scale_p99: quantile(0.99),
            outlier_rows: median
                .map(|m| row_maxima.iter().filter(|&&x| x > 8.0 * m).count() as u64),
            ..Default::default()
        }
    }

    /// Takes the scale part of `s` (its scales times `factor`: an NVFP4
    /// expert's global scale over 2688, 1 elsewhere); zero groups from the
    /// scales when the codes gave none.
    pub fn merge_scales(&mut self, s: &ExpertPart, factor: f64) {
        self.scale_median = s.scale_median.map(|m| m * factor);
        self.scale_p99 = s.scale_p99.map(|m| m * factor);
        self.outlier_rows = s.outlier_rows;
        if self.rows == 0 {
            self.rows = s.rows;
        }
        if s.zero_groups.is_some() {
            self.zero_groups = s.zero_groups;
        }
    }
}

impl ExpertPart {
    /// The statistics the comparison reads, as [`peers::features`] gives
    /// them for a whole tensor.
    pub fn features(&self) -> Features {
        let mut f = [None; 8];
        let finite = |x: f64| x.is_finite().then_some(x);
        if let Some(m) = self.scale_median.filter(|&m| m > 0.0) {
            f[0] = finite(m.ln());
            f[1] = self
                .scale_p99
                .filter(|&p| p > 0.0)
                .and_then(|p| finite((p / m).ln()));
        }
        if self.rows > 0 {
            f[2] = self.outlier_rows.map(|n| n as f64 / self.rows as f64);
        }
        f[3] = self.entropy_bits.and_then(finite);
        f[4] = self.clipping_share.and_then(finite);
        f[5] = self.level_mean.and_then(finite);
        f[6] = self.level_spread.and_then(finite);
        if self.groups > 0 {
            f[7] = self.zero_groups.map(|n| n as f64 / self.groups as f64);
        }
        f
    }
}

/// The expert of a stacked tensor that deviates most from the others.
#[derive(Debug, Clone)]
pub struct ExpertVerdict {
    /// Its index in the stack.
    pub expert: usize,
    /// Its score (as a tensor's: |z| / [`peers::Z_UNIT`] of its strongest
    /// deviation).
    pub score: f64,
    /// Its robust z-scores against the other experts.
    pub z: BTreeMap<&'static str, f64>,
    /// "expert 5 of 8: scale median 4.1× that of its 7 peers".
    pub reason: String,
}

/// Compares every expert with the others (median and MAD of the other
/// experts, the same floors as between tensors); None with fewer than
/// [`peers::MIN_PEERS`] + 1 experts.
pub fn compare(parts: &[ExpertPart]) -> Option<ExpertVerdict> {
    if parts.len() <= peers::MIN_PEERS {
        return None;
    }
    let feats: Vec<Features> = parts.iter().map(ExpertPart::features).collect();
    let mut best: Option<ExpertVerdict> = None;
    for (e, fe) in feats.iter().enumerate() {
        let mut z = BTreeMap::new();
        let mut causes: Vec<(f64, String)> = Vec::new();
        // The same codes as an earlier expert: the later one is taken for
        // the copy (as between layers); codes all one level (entropy 0)
        // are no evidence of a copy.
        if let Some(d) = parts[e].digest
            && parts[e].entropy_bits.is_some_and(|h| h > 0.0)
            && let Some(j) = parts[..e].iter().position(|p| p.digest == Some(d))
        {
            causes.push((
                peers::TWIN_SCORE + 0.01,
                format!("the same codes as expert {j} (64-bit digest)"),
            ));
        }
        for (k, f) in Feature::ALL.iter().enumerate() {
            let Some(x) = fe[k] else { continue };
            let others: Vec<f64> = feats
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != e)
                .filter_map(|(_, g)| g[k])
                .collect();
            if others.len() < peers::MIN_PEERS {
                continue;
            }
            let (zk, med) = peers::robust_z(x, &others, f.floor());
            z.insert(f.key(), zk);
            causes.push((
                zk.abs() / peers::Z_UNIT,
                peers::describe(*f, x, med, others.len()),
            ));
        }
        causes.sort_by(|a, b| b.0.total_cmp(&a.0));
        let Some(score) = causes.first().map(|c| c.0) else {
            continue;
        };
        if best.as_ref().is_some_and(|b| b.score >= score) {
            continue;
        }
        // The strongest deviation, and a second one when it too is strong.
        let shown: Vec<&str> = causes
            .iter()
            .enumerate()
            .filter(|(k, c)| *k == 0 || (c.0 >= 1.0 && *k < 2))
            .map(|(_, c)| c.1.as_str())
            .collect();
        best = Some(ExpertVerdict {
            expert: e,
            score,
            z,
            reason: format!("expert {e} of {}: {}", parts.len(), shown.join(", ")),
        });
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_part_counts_rows_above_eight_medians() {
        let p = ExpertPart::from_scales(
            vec![(1.0, 90), (2.0, 9), (9.0, 1), (0.0, 5)],
            &[1.0, 2.0, 9.0, 8.0],
        );
        assert_eq!(p.scale_median, Some(1.0));
        assert_eq!(p.scale_p99, Some(2.0));
        assert_eq!(p.outlier_rows, Some(1));
        assert_eq!(p.rows, 4);
    }

    #[test]
    fn one_expert_with_scales_4x_is_named() {
        let parts: Vec<ExpertPart> = (0..8)
            .map(|e| {
                let m = if e == 5 {
                    0.04
                } else {
                    0.01 * (1.0 + 0.01 * e as f64)
                };
                ExpertPart {
                    rows: 64,
                    groups: 256,
                    scale_median: Some(m),
                    scale_p99: Some(3.0 * m),
                    outlier_rows: Some(0),
                    ..Default::default()
                }
            })
            .collect();
        let v = compare(&parts).unwrap();
        assert_eq!(v.expert, 5);
        assert!(v.score >= 1.0, "{v:?}");
        assert!(
            v.reason
                .starts_with("expert 5 of 8: scale median 3.9× that of its 7 peers"),
            "{}",
            v.reason
        );
        // Alike experts: nothing stands out.
        let alike: Vec<ExpertPart> = parts
            .iter()
            .map(|p| ExpertPart {
                scale_median: Some(0.01),
                scale_p99: Some(0.03),
                ..p.clone()
            })
            .collect();
        assert!(compare(&alike).unwrap().score < 0.5);
        assert!(compare(&alike[..3]).is_none());
    }

    #[test]
    fn digests_do_not_depend_on_the_cuts() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut d = Digest::default();
        d.feed(&bytes);
        let whole = d.finish();
        for cut in [1, 3, 8, 13, 31, 32, 33, 100] {
            for p in bytes.chunks(cut) {
                d.feed(p);
            }
            assert_eq!(d.finish(), whole, "pieces of {cut}");
        }
        d.feed(&bytes[..999]);
        assert_ne!(d.finish(), whole);
        let mut other = bytes.clone();
        other[500] ^= 1;
        d.feed(&other);
        assert_ne!(d.finish(), whole);
        // Swapped words (each in another lane) and a zero byte appended
        // (the same padded last block) differ too.
        let mut swapped = bytes.clone();
        swapped.swap(0, 8);
        d.feed(&swapped);
        assert_ne!(d.finish(), whole);
        d.feed(&bytes);
        d.feed(&[0]);
        assert_ne!(d.finish(), whole);
    }

    #[test]
    fn a_copied_expert_is_named_with_its_twin() {
        let parts: Vec<ExpertPart> = (0..6)
            .map(|e| ExpertPart {
                rows: 8,
                groups: 8,
                entropy_bits: Some(3.5),
                digest: Some(if e == 4 { 1 } else { e }),
                ..Default::default()
            })
            .collect();
        let v = compare(&parts).unwrap();
        assert_eq!(v.expert, 4);
        assert!(v.score > peers::TWIN_SCORE, "{v:?}");
        assert_eq!(
            v.reason,
            "expert 4 of 6: the same codes as expert 1 (64-bit digest)"
        );
    }

    #[test]
    fn code_part_has_level_mean_and_spread() {
        let c = CodeCounts {
            bits: 4,
            zero: 7,
            max_code: 14,
            counts: {
                let mut v = vec![0u64; 16];
                v[6] = 5;
                v[8] = 5;
                v[15] = 100; // reserved: left out of the levels
                v
            },
        };
        let p = ExpertPart::from_codes(&c, 0.0, 2, 1);
        assert_eq!(p.level_mean, Some(0.0));
        assert_eq!(p.level_spread, Some(1.0));
    }
}
