//! Peers: tensors that play the same role in different layers (the name
//! with its layer index taken out, same precision, same shape; experts of
//! one layer are peers of each other). A tensor is judged against its
//! peers with robust z-scores (median and MAD of the *other* members), so
//! a damaged tensor stands out even without the unquantised source. Every
//! format reuses this grouping; it sees names, shapes and the single
//! pass's statistics only.

use std::collections::BTreeMap;

use serde::Serialize;

use super::stats::{Bin, TensorStats};

/// The role of a tensor name and its layer: `…layers.7.mlp.down_proj.weight`
/// → (`…layers.{N}.mlp.down_proj.weight`, Some(7)); GGUF `blk.3.ffn_down.weight`
/// → (`blk.{N}.ffn_down.weight`, Some(3)). Experts (`…experts.5.…`) keep
/// their layer and lose their expert index (`{E}`): they are peers within
/// the layer. A name without a numeric segment is its own role.
pub fn role_of(name: &str) -> (String, Option<u64>) {
    let parts: Vec<&str> = name.split('.').collect();
    let numeric = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    let expert = parts
        .iter()
        .enumerate()
        .position(|(i, s)| numeric(s) && i > 0 && parts[i - 1].contains("expert"));
    let mut out: Vec<String> = parts.iter().map(|s| (*s).to_string()).collect();
    if let Some(e) = expert {
        out[e] = "{E}".into();
        let layer = parts[..e]
            .iter()
            .rev()
            .find(|s| numeric(s))
            .and_then(|s| s.parse().ok());
        return (out.join("."), layer);
    }
    match parts.iter().position(|s| numeric(s)) {
        Some(i) => {
            out[i] = "{N}".into();
            (out.join("."), parts[i].parse().ok())
        }
        None => (name.to_string(), None),
    }
}

/// The peer group key of a tensor: its role, precision and shape.
pub fn group_key(name: &str, precision: &str, shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("{} · {precision} · [{}]", role_of(name).0, dims.join(", "))
}

/// The statistics compared between peers (each optional: a format may not
/// provide it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// ln of the median scale.
    ScaleMedian,
    /// ln(p99 / median) of the scales.
    ScaleTail,
    /// Share of rows whose largest scale exceeds 8× the median.
    OutlierRows,
    /// Entropy of the codes, in bits.
    Entropy,
    /// Share of codes at the two extreme levels.
    Clipping,
    /// Mean level (`code - zero`).
    LevelMean,
    /// Standard deviation of the levels.
    LevelSpread,
    /// Share of groups whose codes are all the zero level.
    ZeroGroups,
}

impl Feature {
    /// Every feature, in report order.
    pub const ALL: [Feature; 8] = [
        Feature::ScaleMedian,
        Feature::ScaleTail,
        Feature::OutlierRows,
        Feature::Entropy,
        Feature::Clipping,
        Feature::LevelMean,
        Feature::LevelSpread,
        Feature::ZeroGroups,
    ];

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Feature::ScaleMedian => "scale_median",
            Feature::ScaleTail => "scale_p99_over_median",
            Feature::OutlierRows => "outlier_row_share",
            Feature::Entropy => "entropy",
            Feature::Clipping => "clipping_share",
            Feature::LevelMean => "level_mean",
            Feature::LevelSpread => "level_spread",
            Feature::ZeroGroups => "zero_group_share",
        }
    }

    /// The smallest spread a peer group is credited with: peers that agree
    /// closely must not turn a negligible difference into a large z. Set
    /// from undamaged samples and real weights (README, Quality without a
    /// reference).
    pub(crate) fn floor(self) -> f64 {
        match self {
            Feature::ScaleMedian => 0.15,
            Feature::ScaleTail => 0.12,
            Feature::OutlierRows => 0.004,
            Feature::Entropy => 0.08,
            Feature::Clipping => 0.004,
            Feature::LevelMean => 0.08,
            Feature::LevelSpread => 0.08,
            Feature::ZeroGroups => 0.004,
        }
    }
}

/// One tensor's values of the compared statistics.
pub type Features = [Option<f64>; 8];

/// A tensor's features from the single pass's statistics; `rows` is its
/// first dimension (for the outlier-row share).
pub fn features(stats: &TensorStats, rows: u64) -> Features {
    let mut f = [None; 8];
    let finite = |x: f64| x.is_finite().then_some(x);
    if let Some(s) = &stats.scales
        && s.median > 0.0
    {
        f[0] = finite(s.median.ln());
        if s.p99 > 0.0 {
            f[1] = finite((s.p99 / s.median).ln());
        }
    }
    if let Some(q) = &stats.quality {
        if rows > 0 {
            f[2] = Some(q.outlier_rows as f64 / rows as f64);
        }
        f[3] = finite(q.entropy_bits);
        f[4] = finite(q.clipping_share);
        if q.groups > 0 {
            f[7] = Some(q.zero_groups as f64 / q.groups as f64);
        }
    }
    if let Some((mean, spread)) = stats.codes.as_ref().and_then(super::experts::levels) {
        f[5] = Some(mean);
        f[6] = Some(spread);
    }
    f
}

/// A second mode of a scale histogram (half-octave bins): the share of
/// scales beyond the valley that separates it from the main mode, and its
/// distance from the main mode in octaves. Noise in a thin tail does not
/// count: the valley must fall to half the second peak, at least 1.5
/// octaves out, the second mode hold 0.2% of the scales, and there be at
/// least 1000 scales.
pub fn second_mode(bins: &[Bin]) -> Option<(f64, f64)> {
    let total: u64 = bins.iter().map(|b| b.count).sum();
    // A few hundred scales draw no shape.
    if total < 1000 || bins.len() < 4 {
        return None;
    }
    let counts: Vec<u64> = bins.iter().map(|b| b.count).collect();
    let m = (0..counts.len()).max_by_key(|&i| (counts[i], usize::MAX - i))?;
    let mut best: Option<(f64, f64)> = None;
    for k in 0..counts.len() {
        let d = k.abs_diff(m);
        if d < 3 {
            continue;
        }
        let (lo, hi) = (m.min(k), m.max(k));
        let between = &counts[lo + 1..hi];
        let (vi, valley) = between
            .iter()
            .enumerate()
            .min_by_key(|&(_, &c)| c)
            .map(|(i, &c)| (lo + 1 + i, c))?;
        let left = k.checked_sub(1).map_or(0, |j| counts[j]);
        let right = counts.get(k + 1).copied().unwrap_or(0);
        if counts[k] < left || counts[k] < right || valley * 2 > counts[k] {
            continue;
        }
        let mass: u64 = if k > m {
            counts[vi + 1..].iter().sum()
        } else {
            counts[..vi].iter().sum()
        };
        let share = mass as f64 / total as f64;
        if share >= 0.002 && best.is_none_or(|(s, _)| share > s) {
            best = Some((share, d as f64 / 2.0));
        }
    }
    best
}

/// What a tensor brings to the comparison.
#[derive(Debug, Clone)]
pub struct PeerInput<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Precision (manifest spelling).
    pub precision: &'a str,
    /// Shape.
    pub shape: &'a [u64],
    /// The single pass's statistics (None: not scanned).
    pub stats: Option<&'a TensorStats>,
    /// A byte-identical tensor, when there is one.
    pub twin: Option<&'a str>,
}

/// The verdict on one tensor.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerVerdict {
    /// Its peer group (role · precision · shape).
    pub peer_group: String,
    /// Number of other tensors in the group.
    pub peers: usize,
    /// Robust z-score of each feature against the other members (only with
    /// at least [`MIN_PEERS`] of them).
    pub z: BTreeMap<&'static str, f64>,
    /// The combined score: 0 for an ordinary tensor, 1 or more is worth a
    /// look. One strong deviation is enough.
    pub score: f64,
    /// Why, strongest cause first; empty when nothing stands out.
    pub reason: String,
    /// A stacked tensor's expert that deviates most from the other experts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert: Option<usize>,
    /// That expert's robust z-scores against the other experts.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub expert_z: BTreeMap<&'static str, f64>,
}

/// Fewest other members a group needs for z-scores.
pub const MIN_PEERS: usize = 3;
/// |z| that scores 1.0.
pub const Z_UNIT: f64 = 6.0;
/// Score of a byte-identical twin.
pub const TWIN_SCORE: f64 = 3.0;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Robust z of `x` against `others`: median, and MAD scaled to a normal
/// σ, floored.
pub(crate) fn robust_z(x: f64, others: &[f64], floor: f64) -> (f64, f64) {
    let mut o = others.to_vec();
    let med = median(&mut o);
    let mut dev: Vec<f64> = others.iter().map(|v| (v - med).abs()).collect();
    let sigma = (1.4826 * median(&mut dev)).max(floor);
    ((x - med) / sigma, med)
}

fn pct(x: f64) -> String {
    if x < 0.001 && x > 0.0 {
        format!("{:.2}%", x * 100.0)
    } else {
        format!("{:.1}%", x * 100.0)
    }
}

/// The sentence for a deviating feature.
pub(crate) fn describe(f: Feature, x: f64, med: f64, peers: usize) -> String {
    let of = format!("its {peers} peers");
    match f {
        Feature::ScaleMedian => {
            let r = (x - med).exp();
            if r >= 1.0 {
                format!("scale median {r:.1}× that of {of}")
            } else {
                format!("scale median 1/{:.1} of that of {of}", 1.0 / r)
            }
        }
        Feature::ScaleTail => format!(
            "scale p99/median {:.1} against {:.1} in {of}",
            x.exp(),
            med.exp()
        ),
        Feature::OutlierRows => format!("outlier rows {} against {} in {of}", pct(x), pct(med)),
        Feature::Entropy => format!("entropy {x:.2} bits against {med:.2} in {of}"),
        Feature::Clipping => format!("clipping {} against {} in {of}", pct(x), pct(med)),
        Feature::LevelMean => format!("mean level {x:+.2} against {med:+.2} in {of}"),
        Feature::LevelSpread => format!("level spread {x:.2} against {med:.2} in {of}"),
        Feature::ZeroGroups => format!("all-zero groups {} against {} in {of}", pct(x), pct(med)),
    }
}

/// Judges every tensor against its peers. `inputs[i]` gives verdict `[i]`;
/// tensors without statistics get an empty verdict in their group.
pub fn assess(inputs: &[PeerInput]) -> Vec<PeerVerdict> {
    let keys: Vec<String> = inputs
        .iter()
        .map(|t| group_key(t.name, t.precision, t.shape))
        .collect();
    let feats: Vec<Option<Features>> = inputs
        .iter()
        .map(|t| {
            t.stats
                .map(|s| features(s, t.shape.first().copied().unwrap_or(0)))
        })
        .collect();
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        groups.entry(k.as_str()).or_default().push(i);
    }
    let mut out: Vec<PeerVerdict> = Vec::with_capacity(inputs.len());
    for (i, t) in inputs.iter().enumerate() {
        let members = &groups[keys[i].as_str()];
        let mut v = PeerVerdict {
            peer_group: keys[i].clone(),
            peers: members.len() - 1,
            ..Default::default()
        };
        let mut causes: Vec<(f64, String)> = Vec::new();
        // The strongest evidence, also below the threshold of a reason (it
        // still orders the tensors).
        let mut weak = 0f64;
        if let Some(fi) = &feats[i] {
            for (k, f) in Feature::ALL.iter().enumerate() {
                let Some(x) = fi[k] else { continue };
                let others: Vec<f64> = members
                    .iter()
                    .filter(|&&j| j != i)
                    .filter_map(|&j| feats[j].as_ref().and_then(|g| g[k]))
                    .collect();
                if others.len() < MIN_PEERS {
                    continue;
                }
                let (z, med) = robust_z(x, &others, f.floor());
                v.z.insert(f.key(), z);
                let s = z.abs() / Z_UNIT;
                weak = weak.max(s);
                if s >= 0.5 {
                    causes.push((s, describe(*f, x, med, others.len())));
                }
            }
        }
        if let Some(st) = t.stats {
            if let Some(q) = &st.quality {
                if q.reserved_codes > 0 {
                    causes.push((10.0, format!("{} reserved codes", q.reserved_codes)));
                }
                if q.high_rows > 0 {
                    let rows = t.shape.first().copied().unwrap_or(0).max(1) as f64;
                    // A row or two can be a real outlier channel; a block of
                    // them (over 1% of the rows, or 8) cannot.
                    let s = (q.high_rows as f64 / (rows * 0.01).max(8.0)).min(5.0);
                    weak = weak.max(s);
                    if s >= 0.5 {
                        causes.push((
                            s,
                            format!("{} rows with scales > 10× the tensor's median", q.high_rows),
                        ));
                    }
                }
            }
            if let Some((share, octaves)) = st.scales.as_ref().and_then(|s| second_mode(&s.bins)) {
                // A second mode far out holding a real share of the scales.
                let s = (share / 0.01).min(1.0) * (octaves / 2.0).min(2.0);
                weak = weak.max(s);
                if s >= 0.5 {
                    causes.push((
                        s,
                        format!(
                            "scale histogram has a second mode {octaves:.1} octaves from the first ({} of the scales)",
                            pct(share)
                        ),
                    ));
                }
            }
        }
        // A stacked tensor's experts are peers of each other: one expert
        // unlike the rest is named.
        if let Some(x) = t
            .stats
            .and_then(|st| st.experts.as_deref())
            .and_then(super::experts::compare)
        {
            weak = weak.max(x.score);
            if x.score >= 0.5 {
                causes.push((x.score, x.reason));
            }
            v.expert = Some(x.expert);
            v.expert_z = x.z;
        }
        if v.z.is_empty()
            && let Some(q) = t.stats.and_then(|st| st.quality.as_ref())
            && q.suspicion >= 0.5
        {
            // Too few peers to compare with: the tensor's own score.
            causes.push((
                q.suspicion,
                format!(
                    "per-tensor suspicion {:.2} ({} peers, too few to compare with)",
                    q.suspicion, v.peers
                ),
            ));
        }
        if let Some(twin) = t.twin {
            causes.push((TWIN_SCORE, format!("byte-identical to {twin}")));
        }
        causes.sort_by(|a, b| b.0.total_cmp(&a.0));
        v.score = causes.first().map_or(0.0, |c| c.0).max(weak);
        // The two strongest of the causes that reach 1.0, or the strongest.
        let shown: Vec<&str> = causes
            .iter()
            .enumerate()
            .filter(|(k, c)| *k == 0 || (c.0 >= 1.0 && *k < 2))
            .map(|(_, c)| c.1.as_str())
            .collect();
        if v.score >= 0.5 {
            v.reason = shown.join("; ");
        }
        out.push(v);
    }
    twin_order(inputs, &mut out);
    out
}

/// Of two byte-identical twins, the one in the later layer is taken for
/// the copy and scores a little more, so it ranks first: the bytes alone
/// cannot tell which is the original, and the classic mistake writes an
/// earlier layer's tensor into a later slot (a reused buffer, an index off
/// by some layers). The reason names both; a reference settles it.
fn twin_order(inputs: &[PeerInput], out: &mut [PeerVerdict]) {
    let layer = |name: &str| role_of(name).1;
    for (i, t) in inputs.iter().enumerate() {
        let Some(twin) = t.twin else { continue };
        if layer(t.name) > layer(twin) {
            out[i].score += 0.01;
        }
    }
}

/// Bytes sampled from each tensor for [`duplicates_sampled`].
pub const SAMPLE: usize = 4096;

/// The three `[start, end)` ranges of a tensor of `n` bytes sampled for
/// the duplicate search: its first, middle and last [`SAMPLE`] bytes
/// (overlapping or fewer when the tensor is short).
pub fn sample_ranges(n: usize) -> [(usize, usize); 3] {
    let mid = n / 2;
    [
        (0, SAMPLE.min(n)),
        (mid.saturating_sub(SAMPLE / 2), (mid + SAMPLE / 2).min(n)),
        (n.saturating_sub(SAMPLE), n),
    ]
}

/// Byte-identical tensors: for each index, the first earlier tensor with
/// the same bytes. Cheap when there are none: tensors are compared only
/// when their lengths and three 4 KiB samples agree, and a tensor whose
/// sampled bytes are all one value (a constant norm, zero padding) is no
/// evidence of a copy and is skipped.
pub fn duplicates(tensors: &[(usize, &[u8])]) -> Vec<(usize, usize)> {
    let list: Vec<(usize, usize)> = tensors.iter().map(|&(i, b)| (i, b.len())).collect();
    let bytes: std::collections::HashMap<usize, &[u8]> = tensors.iter().copied().collect();
    let by_index = |i: usize| bytes.get(&i).copied();
    duplicates_sampled(
        &list,
        |i, n| {
            let b = by_index(i)?;
            let mut s = Vec::with_capacity(3 * SAMPLE);
            for (x, y) in sample_ranges(n) {
                s.extend_from_slice(b.get(x..y)?);
            }
            Some(s)
        },
        by_index,
    )
}

/// [`duplicates`] over `(index, length)` pairs, the samples read by
/// `sample(index, length)` (the concatenated [`sample_ranges`]) and the
/// whole bytes by `whole(index)` only for tensors whose samples agree: the
/// audit reads the samples with positioned reads, so a checkpoint with no
/// duplicates maps none of its payload.
pub fn duplicates_sampled<'a>(
    tensors: &[(usize, usize)],
    sample: impl Fn(usize, usize) -> Option<Vec<u8>>,
    whole: impl Fn(usize) -> Option<&'a [u8]>,
) -> Vec<(usize, usize)> {
    // (length, the samples' digest) → the tensors seen with them (their
    // bytes once read). A digest, not the samples: 20,000 small tensors
    // would otherwise keep 12 KiB each (240 MB); a collision only costs a
    // comparison of the whole bytes, which decides.
    type Seen<'a> = BTreeMap<(usize, u64), Vec<(usize, Option<&'a [u8]>)>>;
    let mut seen: Seen = BTreeMap::new();
    let mut out = Vec::new();
    for &(i, n) in tensors {
        if n < 256 {
            continue;
        }
        let Some(s) = sample(i, n) else { continue };
        if s.windows(2).all(|w| w[0] == w[1]) {
            continue;
        }
        let mut d = super::experts::Digest::default();
        d.feed(&s);
        let list = seen.entry((n, d.finish())).or_default();
        if list.is_empty() {
            list.push((i, None));
            continue;
        }
        let Some(b) = whole(i) else { continue };
        let mut twin = None;
        for (j, other) in list.iter_mut() {
            if other.is_none() {
                *other = whole(*j);
            }
            if *other == Some(b) {
                twin = Some(*j);
                break;
            }
        }
        match twin {
            Some(j) => out.push((i, j)),
            None => list.push((i, Some(b))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::stats::{CodeCounts, Quality, ScaleSummary};

    #[test]
    fn roles_take_the_layer_index_out() {
        assert_eq!(
            role_of("language_model.model.layers.12.mlp.down_proj.weight"),
            (
                "language_model.model.layers.{N}.mlp.down_proj.weight".into(),
                Some(12)
            )
        );
        assert_eq!(
            role_of("encoder.layer.3.intermediate.dense.weight"),
            (
                "encoder.layer.{N}.intermediate.dense.weight".into(),
                Some(3)
            )
        );
        assert_eq!(
            role_of("blk.0.ffn_down.weight"),
            ("blk.{N}.ffn_down.weight".into(), Some(0))
        );
        assert_eq!(
            role_of("model.layers.4.mlp.experts.17.down_proj.weight"),
            (
                "model.layers.4.mlp.experts.{E}.down_proj.weight".into(),
                Some(4)
            )
        );
        assert_eq!(
            role_of("token_embd.weight"),
            ("token_embd.weight".into(), None)
        );
    }

    #[test]
    fn groups_need_the_same_role_precision_and_shape() {
        let a = group_key("blk.1.ffn_down.weight", "q4_k", &[4096, 11008]);
        assert_eq!(
            a,
            group_key("blk.9.ffn_down.weight", "q4_k", &[4096, 11008])
        );
        assert_ne!(
            a,
            group_key("blk.9.ffn_down.weight", "q6_k", &[4096, 11008])
        );
        assert_ne!(a, group_key("blk.9.ffn_down.weight", "q4_k", &[4096, 4096]));
        assert_ne!(a, group_key("blk.9.ffn_up.weight", "q4_k", &[4096, 11008]));
        // Experts of one layer are peers; experts of two layers are not.
        let e = |n: &str| group_key(n, "nvfp4", &[64, 64]);
        assert_eq!(e("l.0.experts.1.w"), e("l.0.experts.2.w"));
        assert_ne!(e("l.0.experts.1.w"), e("l.1.experts.1.w"));
    }

    fn stats(median: f64, clip: f64) -> TensorStats {
        let mut counts = vec![100u64; 15];
        counts.push(0);
        TensorStats {
            codes: Some(CodeCounts {
                bits: 4,
                zero: 7,
                max_code: 14,
                counts,
            }),
            scales: Some(Box::new(ScaleSummary {
                dtype: "F16".into(),
                count: 100,
                invalid: 0,
                min: median / 2.0,
                max: median * 2.0,
                median,
                p01: median / 2.0,
                p99: median * 2.0,
                bins: Vec::new(),
            })),
            quality: Some(Box::new(Quality {
                entropy_bits: 3.9,
                clipping_share: clip,
                unused_levels: Vec::new(),
                zero_groups: 0,
                groups: 100,
                scale_dynamic_range: 4.0,
                outlier_rows: 0,
                high_rows: 0,
                reserved_codes: 0,
                suspicion: 0.0,
            })),
            ..Default::default()
        }
    }

    #[test]
    fn one_tensor_with_scales_4x_stands_out_and_says_why() {
        let names: Vec<String> = (0..6).map(|i| format!("m.layers.{i}.w")).collect();
        let st: Vec<TensorStats> = (0..6)
            .map(|i| {
                stats(
                    if i == 4 {
                        0.04
                    } else {
                        0.01 * (1.0 + 0.01 * i as f64)
                    },
                    0.01,
                )
            })
            .collect();
        let inputs: Vec<PeerInput> = names
            .iter()
            .zip(&st)
            .map(|(n, s)| PeerInput {
                name: n,
                precision: "q4",
                shape: &[64, 64],
                stats: Some(s),
                twin: None,
            })
            .collect();
        let v = assess(&inputs);
        let worst = (0..6)
            .max_by(|&a, &b| v[a].score.total_cmp(&v[b].score))
            .unwrap();
        assert_eq!(worst, 4);
        assert!(v[4].score >= 1.0, "{:?}", v[4]);
        assert!(
            v[4].reason.contains("scale median 3.9×") || v[4].reason.contains("scale median 4.0×"),
            "{}",
            v[4].reason
        );
        assert!(v[4].reason.contains("5 peers"), "{}", v[4].reason);
        for (i, x) in v.iter().enumerate() {
            if i != 4 {
                assert!(x.score < 0.5, "{i}: {x:?}");
            }
        }
    }

    #[test]
    fn a_separated_bump_is_a_second_mode_and_a_thin_tail_is_not() {
        let bins = |c: &[u64]| -> Vec<Bin> {
            c.iter()
                .map(|&count| Bin {
                    lo: 0.0,
                    hi: 0.0,
                    count,
                })
                .collect()
        };
        let (share, oct) = second_mode(&bins(&[10, 500, 900, 400, 20, 0, 0, 5, 40, 30])).unwrap();
        assert!((share - 75.0 / 1905.0).abs() < 1e-9, "{share}");
        assert_eq!(oct, 3.0);
        assert!(second_mode(&bins(&[10, 500, 900, 400, 100, 40, 10, 2, 1, 1])).is_none());
    }

    #[test]
    fn duplicates_are_found_and_constants_are_not() {
        let a: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut b = a.clone();
        b[6_000] ^= 1; // differs outside the samples
        let c = a.clone();
        let ones = vec![1u8; 10_000];
        let d = ones.clone();
        let found = duplicates(&[(0, &a), (1, &b), (2, &c), (3, &ones), (4, &d)]);
        assert_eq!(found, vec![(2, 0)]);
    }
}
