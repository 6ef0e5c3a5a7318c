//! A stacked tensor's per-expert statistics do not depend on how its bytes
//! are cut into pieces, and agree with each expert scanned on its own and
//! with a naive count written here.

use super::Scanner;
use crate::decode::bf16_to_f32;
use crate::decode::experts::ExpertPart;
use crate::format::{DenseDtype, Layout, Precision, QuantMode, TensorInfo};

fn info(name: &str, shape: Vec<u64>, bytes: usize, layout: Layout) -> TensorInfo {
    TensorInfo {
        name: name.into(),
        precision: Precision::Other("test".into()),
        shape: Some(shape),
        source_dtype: None,
        encoding: None,
        offset: Some(0),
        bytes: Some(bytes as u64),
        resident_bytes: None,
        alias_of: None,
        file: 0,
        layout: Some(layout),
        quant: None,
        record: serde_json::Value::Null,
    }
}

fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn scan(t: &TensorInfo, bytes: &[u8], piece: usize) -> crate::decode::stats::TensorStats {
    let mut s = Scanner::for_tensor(0, t).unwrap();
    for p in bytes.chunks(piece) {
        s.feed(p);
    }
    s.finish().stats
}

/// A stacked `[experts, rows, groups]` BF16 scales tensor holding `vals`.
fn bf16_scales(vals: &[f32], (experts, rows, groups): (u64, u64, u64)) -> (TensorInfo, Vec<u8>) {
    let bytes: Vec<u8> = vals
        .iter()
        .flat_map(|&v| crate::decode::f32_to_bf16(v).to_le_bytes())
        .collect();
    let t = info(
        "m.scales",
        vec![experts, rows, groups],
        bytes.len(),
        Layout::MlxParams {
            dtype: DenseDtype::Bf16,
            count: experts * rows * groups,
        },
    );
    (t, bytes)
}

#[test]
fn stacked_codes_are_counted_expert_by_expert() {
    let (experts, rows, cols) = (5u64, 8u64, 128u64);
    for bits in [3u8, 4, 8] {
        let row_bytes = (cols * u64::from(bits) / 8) as usize;
        let per = rows as usize * row_bytes;
        let bytes = noise(experts as usize * per, u64::from(bits));
        let layout = |experts| Layout::MlxCodes {
            mode: QuantMode::Affine,
            bits,
            group: 64,
            experts,
            rows,
            cols,
        };
        let t = info("w", vec![experts, rows, cols], bytes.len(), layout(experts));
        let whole = scan(&t, &bytes, bytes.len());
        for piece in [1, 7, 4096] {
            assert_eq!(
                scan(&t, &bytes, piece),
                whole,
                "{bits} bits, pieces of {piece}"
            );
        }
        let parts = whole.experts.clone().unwrap();
        assert_eq!(parts.len(), experts as usize);
        for (e, part) in parts.iter().enumerate() {
            let one = info("w", vec![rows, cols], per, layout(1));
            let alone = scan(&one, &bytes[e * per..(e + 1) * per], 13);
            assert!(alone.experts.is_none());
            let q = alone.quality.unwrap();
            assert_eq!(
                part.entropy_bits,
                Some(q.entropy_bits),
                "{bits} bits, expert {e}"
            );
            assert_eq!(part.clipping_share, Some(q.clipping_share));
        }
        // The totals are the experts' sums.
        assert_eq!(
            whole.codes.unwrap().total(),
            experts * rows * cols,
            "{bits} bits"
        );
    }
}

#[test]
fn stacked_affine_scales_give_each_expert_its_median_and_outlier_rows() {
    let (experts, rows, groups) = (4u64, 6u64, 3u64);
    // Expert e's scales: 0.01 × (e + 1), row 2 of expert 3 with one 100× scale.
    let mut vals = Vec::new();
    for e in 0..experts {
        for r in 0..rows {
            for g in 0..groups {
                let s = 0.01
                    * (e + 1) as f32
                    * if e == 3 && r == 2 && g == 1 {
                        100.0
                    } else {
                        1.0
                    };
                vals.push(if g == 0 { -s } else { s });
            }
        }
    }
    let (t, bytes) = bf16_scales(&vals, (experts, rows, groups));
    let whole = scan(&t, &bytes, bytes.len());
    for piece in [1, 3, 5] {
        assert_eq!(scan(&t, &bytes, piece), whole, "pieces of {piece}");
    }
    let parts: Vec<ExpertPart> = whole.experts.unwrap();
    assert_eq!(parts.len(), 4);
    for (e, p) in parts.iter().enumerate() {
        let want = f64::from(bf16_to_f32(crate::decode::f32_to_bf16(
            0.01 * (e + 1) as f32,
        )));
        let m = p.scale_median.unwrap();
        assert_eq!(m, want, "expert {e}");
        assert_eq!(p.outlier_rows, Some(u64::from(e == 3)), "expert {e}");
        assert_eq!(p.rows, rows);
        assert_eq!(p.zero_groups, Some(0));
    }
}

#[test]
fn nvfp4_codes_count_zero_groups_per_expert() {
    let (experts, rows, cols) = (3u64, 4u64, 32u64);
    let per = (rows * cols / 2) as usize;
    let mut bytes = noise(experts as usize * per, 9);
    // Expert 1: its first group all +0, its second all -0 (0x8): both carry nothing.
    bytes[per..per + 8].fill(0);
    bytes[per + 8..per + 16].fill(0x88);
    let t = info(
        "w",
        vec![experts, rows, cols / 8],
        bytes.len(),
        Layout::Fp4 {
            experts,
            rows,
            cols,
        },
    );
    let whole = scan(&t, &bytes, bytes.len());
    for piece in [1, 5, 9] {
        assert_eq!(scan(&t, &bytes, piece), whole, "pieces of {piece}");
    }
    let naive = |e: usize| {
        bytes[e * per..(e + 1) * per]
            .chunks(8)
            .filter(|g| g.iter().all(|b| b & 0x77 == 0))
            .count() as u64
    };
    let parts = whole.experts.unwrap();
    for (e, p) in parts.iter().enumerate() {
        assert_eq!(p.zero_groups, Some(naive(e)), "expert {e}");
    }
    assert!(naive(1) >= 2);
    assert_eq!(
        whole.quality.unwrap().zero_groups,
        (0..3).map(naive).sum::<u64>()
    );
}

/// BF16 scales over many exponents: more than 64 distinct magnitudes, in
/// many 256-key chunks of the key tables.
fn wide_scales(n: usize, seed: u64) -> Vec<f32> {
    noise(2 * n, seed)
        .chunks(2)
        .map(|c| (1.0 + f32::from(c[1]) / 256.0) * 2f32.powi(i32::from(c[0] % 40) - 30))
        .collect()
}

#[test]
fn key_tables_reused_from_an_earlier_tensor_start_empty() {
    let (experts, rows, groups) = (3u64, 40u64, 16u64);
    let per = (rows * groups) as usize;
    let tensor = |vals: &[f32]| bf16_scales(vals, (experts, rows, groups));
    let vals = wide_scales(experts as usize * per, 77);
    let (t, bytes) = tensor(&vals);
    let first = scan(&t, &bytes, bytes.len());
    // Another tensor's scales in between: its tables go back to this
    // thread's pool and are handed to the next scan.
    let (other, other_bytes) = tensor(&wide_scales(experts as usize * per, 5));
    assert_ne!(scan(&other, &other_bytes, 7), first);
    let again = scan(&t, &bytes, 13);
    assert_eq!(again, first);
    // Each expert's median is the one of its own scales, counted here.
    let parts = first.experts.unwrap();
    for (e, p) in parts.iter().enumerate() {
        let mut mags: Vec<f64> = vals[e * per..(e + 1) * per]
            .iter()
            .map(|&v| f64::from(bf16_to_f32(crate::decode::f32_to_bf16(v))).abs())
            .collect();
        mags.sort_by(f64::total_cmp);
        let want = mags[((mags.len() - 1) as f64 * 0.5).round() as usize];
        assert_eq!(p.scale_median, Some(want), "expert {e}");
    }
}
