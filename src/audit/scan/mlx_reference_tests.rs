//! The MLX-LM scanners against naive references written here, byte by byte
//! and code by code, on random bytes (bad scales included), odd row
//! lengths, and pieces cut anywhere.

use super::Scanner;
use crate::decode::experts::ExpertPart;
use crate::decode::mlxlm as dm;
use crate::decode::stats::{self, TensorStats};
use crate::format::{DenseDtype, Layout, ScaleKind, TensorInfo};

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
        quant: None,
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
        scales: Some(Box::new(dm::summarise_byte_scales(kind, &total))),
        row_outliers: Some(outliers),
        zero_scales: Some(match kind {
            ScaleKind::E8m0 => 0,
            ScaleKind::E4m3 => total[0] + total[0x80],
        }),
        e4m3: (kind == ScaleKind::E4m3).then(|| Box::new(stats::E4m3Stats::from_hists(&hists))),
        experts: (experts > 1).then(|| {
            let rows = (per_expert / groups) as usize;
            bytes
                .chunks_exact(per_expert as usize)
                .zip(maxima.chunks(rows))
                .map(|(own, maxima)| expert_reference(kind, own, maxima))
                .collect()
        }),
        ..Default::default()
    }
}

/// One stacked expert's scale part, from its sorted nonzero magnitudes:
/// the median and p99 at the nearest rank, its rows over 8× the median,
/// and (E4M3) its zero scales.
fn expert_reference(kind: ScaleKind, bytes: &[u8], maxima: &[f32]) -> ExpertPart {
    let mut mags: Vec<f64> = bytes
        .iter()
        .filter(|&&b| !bad(kind, b))
        .map(|&b| f64::from(dm::scale_byte(kind, b).abs()))
        .filter(|&m| m > 0.0)
        .collect();
    mags.sort_by(f64::total_cmp);
    let at =
        |q: f64| (!mags.is_empty()).then(|| mags[((mags.len() - 1) as f64 * q).round() as usize]);
    let median = at(0.5);
    ExpertPart {
        rows: maxima.len() as u64,
        scale_median: median,
        scale_p99: at(0.99),
        outlier_rows: median
            .map(|m| maxima.iter().filter(|&&x| f64::from(x) > 8.0 * m).count() as u64),
        zero_groups: (kind == ScaleKind::E4m3)
            .then(|| bytes.iter().filter(|&&b| b == 0 || b == 0x80).count() as u64),
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

/// Row outliers, range and zeros of affine scales computed one value at a
/// time: each row's largest finite magnitude as an `f32` maximum, the
/// median from the sorted magnitude keys (the half itself for F16 and
/// BF16, its top 16 bits for F32, as the scanner documents).
fn affine_reference(
    dtype: DenseDtype,
    groups: usize,
    bytes: &[u8],
) -> (Option<[f64; 2]>, u64, u64) {
    let size = dtype.size() as usize;
    let decode = |v: &[u8]| -> (f32, u16) {
        match dtype {
            DenseDtype::F32 => {
                let x = f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                (x, (x.to_bits() >> 16) as u16 & 0x7fff)
            }
            DenseDtype::F16 => {
                let h = u16::from_le_bytes([v[0], v[1]]);
                (half::f16::from_bits(h).to_f32(), h & 0x7fff)
            }
            DenseDtype::Bf16 => {
                let h = u16::from_le_bytes([v[0], v[1]]);
                (half::bf16::from_bits(h).to_f32(), h & 0x7fff)
            }
            DenseDtype::F64 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 | DenseDtype::Int(_) => {
                unreachable!("affine scales are BF16, F16 or F32")
            }
        }
    };
    let key_value = |k: u16| match dtype {
        DenseDtype::F16 => half::f16::from_bits(k).to_f32(),
        _ => half::bf16::from_bits(k).to_f32(),
    };
    let (mut lo, mut hi, mut zeros) = (f32::INFINITY, 0f32, 0u64);
    let mut keys = Vec::new();
    let mut maxima = Vec::new();
    for row in bytes.chunks(groups * size) {
        let mut max = 0f32;
        for v in row.chunks_exact(size) {
            let (x, key) = decode(v);
            let a = x.abs();
            if a.is_finite() {
                keys.push(key);
                max = max.max(a);
                if a > 0.0 {
                    lo = lo.min(a);
                    hi = hi.max(a);
                }
            }
            zeros += u64::from(a == 0.0);
        }
        if row.len() == groups * size {
            maxima.push(max);
        }
    }
    keys.sort_unstable();
    let outliers = match keys.len() {
        0 => 0,
        n => {
            let median = key_value(keys[n.div_ceil(2) - 1]);
            maxima.iter().filter(|&&m| m > 8.0 * median).count() as u64
        }
    };
    // The range of F16 and BF16 scales comes from their keys: the same
    // magnitudes.
    let range = (lo <= hi).then(|| [f64::from(lo), f64::from(hi)]);
    (range, outliers, zeros)
}

#[test]
fn affine_scales_equal_the_naive_reference() {
    let mut rng = Rng(0x2f6b_1d4a_99c3_0e57);
    for dtype in [DenseDtype::Bf16, DenseDtype::F16, DenseDtype::F32] {
        for (rows, groups) in [(1, 1), (3, 5), (40, 16), (17, 33), (9, 64), (2, 300)] {
            let n = rows * groups;
            // Magnitudes around 2^-8, some rows far above, some zeros, a
            // few NaN and infinite values, both signs.
            let mut bytes = Vec::new();
            for i in 0..n {
                let x: f32 = match rng.below(400) {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    2..6 => 0.0,
                    6..10 if i / groups % 4 == 1 => 0.5,
                    _ => (1.0 + rng.below(1000) as f32 / 300.0) / 256.0,
                };
                let x = if rng.below(2) == 0 { x } else { -x };
                match dtype {
                    DenseDtype::F32 => bytes.extend_from_slice(&x.to_le_bytes()),
                    DenseDtype::F16 => {
                        bytes.extend_from_slice(&half::f16::from_f32(x).to_le_bytes())
                    }
                    DenseDtype::Bf16 => {
                        bytes.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes())
                    }
                    DenseDtype::F64
                    | DenseDtype::F8E4m3
                    | DenseDtype::F8E5m2
                    | DenseDtype::Int(_) => unreachable!(),
                }
            }
            let layout = Layout::MlxParams {
                dtype,
                count: n as u64,
            };
            let mut info = info(layout, vec![rows as u64, groups as u64], bytes.len());
            info.name = "m.scales".into();
            let (range, outliers, zeros) = affine_reference(dtype, groups, &bytes);
            let mut whole = Scanner::for_tensor(0, &info).unwrap();
            whole.feed(&bytes);
            let whole = whole.finish();
            let case = format!("{dtype:?} {rows}x{groups}");
            assert_eq!(whole.stats.abs_range, range, "{case}");
            assert_eq!(whole.stats.row_outliers, Some(outliers), "{case}");
            assert_eq!(whole.stats.zero_scales, Some(zeros), "{case}");
            for max_piece in [1, 3, 64, 1 << 20] {
                let out = scan_in_pieces(&info, &bytes, &mut rng, max_piece).finish();
                let case = format!("{case} <= {max_piece}");
                assert_eq!(
                    format!("{:?}", out.stats),
                    format!("{:?}", whole.stats),
                    "{case}"
                );
                assert_eq!(out.findings, whole.findings, "{case}");
            }
        }
    }
}
