//! The MLX-LM scanners against naive references written here, byte by byte
//! and code by code, on random bytes (bad scales included), odd row
//! lengths, and pieces cut anywhere.

use super::Scanner;
use crate::decode::mlxlm as dm;
use crate::decode::stats::{self, TensorStats};
use crate::format::{Layout, ScaleKind, TensorInfo};

/// Absolute offset the test tensors start at.
const START: u64 = 4096;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn info(layout: Layout, shape: Vec<u64>, bytes: usize) -> TensorInfo {
    TensorInfo {
        name: "t".into(),
        precision: crate::format::Precision::Original,
        shape: Some(shape),
        source_dtype: None,
        encoding: None,
        offset: Some(START),
        bytes: Some(bytes as u64),
        resident_bytes: None,
        alias_of: None,
        file: 0,
        layout: Some(layout),
        record: serde_json::Value::Null,
    }
}

/// Feeds `bytes` in pieces of 1..=`max_piece` bytes cut at random places.
fn scan_in_pieces(info: &TensorInfo, bytes: &[u8], rng: &mut Rng, max_piece: u64) -> Scanner {
    let mut s = Scanner::for_tensor(0, info).unwrap();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = (1 + rng.below(max_piece) as usize).min(rest.len());
        s.feed(&rest[..n]);
        rest = &rest[n..];
    }
    s
}

/// Is this scale byte left out (NaN, or a negative E4M3)?
fn bad(kind: ScaleKind, b: u8) -> bool {
    let v = dm::scale_byte(kind, b);
    v.is_nan() || (v < 0.0) || (v == 0.0 && v.is_sign_negative() && b != 0x80)
}

/// The statistics of a U8 scales tensor computed one byte at a time: each
/// row's largest magnitude as an `f32` maximum, the median magnitude from
/// the sorted magnitudes.
fn scales_reference(kind: ScaleKind, experts: u64, groups: u64, bytes: &[u8]) -> TensorStats {
    let mut total = [0u64; 256];
    let per_expert = bytes.len() as u64 / experts;
    let mut hists = vec![[0u64; 256]; experts as usize];
    let mut magnitudes = Vec::new();
    let mut maxima = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        total[usize::from(b)] += 1;
        hists[(i as u64 / per_expert) as usize][usize::from(b)] += 1;
    }
    for row in bytes.chunks_exact(groups as usize) {
        let mut max = 0.0f32;
        for &b in row.iter().filter(|&&b| !bad(kind, b)) {
            max = max.max(dm::scale_byte(kind, b).abs());
        }
        maxima.push(max);
    }
    for &b in bytes.iter().filter(|&&b| !bad(kind, b)) {
        magnitudes.push(dm::scale_byte(kind, b).abs());
    }
    magnitudes.sort_by(f32::total_cmp);
    let outliers = match magnitudes.len() {
        0 => 0,
        n => {
            let median = magnitudes[n.div_ceil(2) - 1];
            maxima.iter().filter(|&&m| m > 8.0 * median).count() as u64
        }
    };
    TensorStats {
        scales: Some(dm::summarise_byte_scales(kind, &total)),
        row_outliers: Some(outliers),
        zero_scales: Some(match kind {
            ScaleKind::E8m0 => 0,
            ScaleKind::E4m3 => total[0] + total[0x80],
        }),
        e4m3: (kind == ScaleKind::E4m3).then(|| stats::E4m3Stats::from_hists(&hists)),
        ..Default::default()
    }
}

#[test]
fn byte_scales_equal_the_naive_reference() {
    let mut rng = Rng(0x51ed_270b_a3c9_e615);
    for kind in [ScaleKind::E8m0, ScaleKind::E4m3] {
        for (experts, rows, groups) in
            [(1, 1, 1), (1, 5, 3), (3, 7, 64), (2, 33, 130), (4, 64, 256)]
        {
            for spread in [4u64, 40, 256] {
                // Bytes around a typical scale, a few far above (outlier
                // rows) and a few bad ones.
                let n = (experts * rows * groups) as usize;
                let centre = if kind == ScaleKind::E8m0 { 120 } else { 0x30 };
                let bytes: Vec<u8> = (0..n)
                    .map(|_| match rng.below(1000) {
                        0..5 => [0xff, 0x7f, 0x80, 0x00, 0x81][rng.below(5) as usize],
                        5..10 => (centre + 30 + rng.below(8)) as u8,
                        _ => (centre + rng.below(spread) - spread.min(centre) / 2) as u8,
                    })
                    .collect();
                let layout = Layout::MlxScales {
                    kind,
                    experts,
                    per_expert: rows * groups,
                };
                let info = info(layout, vec![experts, rows, groups], bytes.len());
                let want = scales_reference(kind, experts, groups, &bytes);
                let first_bad = bytes.iter().position(|&b| bad(kind, b));
                for max_piece in [1, 3, 100, 1 << 20] {
                    let case =
                        format!("{kind:?} {experts}x{rows}x{groups} ~{spread} <= {max_piece}");
                    let out = scan_in_pieces(&info, &bytes, &mut rng, max_piece).finish();
                    // Debug text: a summary of no valid scale is NaN, unequal to itself.
                    assert_eq!(format!("{:?}", out.stats), format!("{want:?}"), "{case}");
                    let offsets: Vec<_> = out.findings.iter().map(|f| f.offset).collect();
                    let want_offsets: Vec<_> = first_bad
                        .map(|i| Some(START + i as u64))
                        .into_iter()
                        .collect();
                    assert_eq!(offsets, want_offsets, "{case}");
                }
            }
        }
    }
}

#[test]
fn byte_scale_values_order_like_their_keys() {
    // The scanner keeps each row's largest key, not its largest value:
    // right only because good bytes order like their magnitudes.
    for kind in [ScaleKind::E8m0, ScaleKind::E4m3] {
        let good: Vec<u8> = (0..=255u8)
            .filter(|&b| !bad(kind, b) && b != 0x80)
            .collect();
        for w in good.windows(2) {
            let (a, b) = (dm::scale_byte(kind, w[0]), dm::scale_byte(kind, w[1]));
            assert!(a < b, "{kind:?} {:#x} {:#x}", w[0], w[1]);
        }
    }
}
