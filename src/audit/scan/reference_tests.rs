//! The scanners against naive references written here, per code and per
//! value, on random bytes (reserved codes, bad scales and non-finite values
//! included), odd row counts, and pieces cut at every kind of boundary.

use super::tally::{self, CodeCtx};
use super::{Kind, Scanner};
use crate::decode::stats::{self, Moments, Pattern16, TensorStats};
use crate::format::{DenseDtype, Layout, PackedKind, TensorInfo};

/// Absolute offset the test tensors start at.
const START: u64 = 1000;

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

fn info(layout: Layout, bytes: usize) -> TensorInfo {
    TensorInfo {
        name: "t".into(),
        precision: match layout {
            Layout::Packed { kind, .. } => kind.precision(),
            _ => crate::format::Precision::Original,
        },
        shape: None,
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

/// Codes then scales of a packed tensor: mostly valid codes around the
/// zero level, some whole zero groups, reserved codes at `reserved_rate`
/// per million codes (or uniformly random bytes when `uniform`), and a few
/// bad scales.
fn packed_bytes(kind: PackedKind, rows: u64, cols: u64, rng: &mut Rng, uniform: bool) -> Vec<u8> {
    let layout = Layout::Packed { kind, rows, cols };
    let codes_bytes = layout.codes_bytes() as usize;
    let mut out = vec![0u8; codes_bytes];
    let bits = kind.bits();
    if uniform {
        out.iter_mut().for_each(|b| *b = rng.next() as u8);
    } else {
        let mut codes = vec![0u8; (rows * cols) as usize];
        for group in codes.chunks_mut(64) {
            let zero_group = rng.below(10) == 0;
            for c in group.iter_mut() {
                let z = kind.zero() as u64;
                *c = match rng.below(1000) {
                    _ if zero_group => z as u8,
                    0..3 => ((1u64 << bits) - 1) as u8, // reserved in q3 and q4
                    3..600 => z as u8,
                    r => ((z + r % 5).saturating_sub(2)).min(u64::from(kind.max_code())) as u8,
                };
            }
        }
        crate::decode::pack_row(&codes, bits, &mut out);
    }
    for _ in 0..rows * cols / 64 {
        let h: u16 = match rng.below(100) {
            0 => [0x0000, 0x8000, 0x7c00, 0x7e01, 0xbc00][rng.below(5) as usize],
            _ => 0x1000 + rng.below(0x6000) as u16,
        };
        out.extend_from_slice(&h.to_le_bytes());
    }
    out
}

/// The naive per-code reference of a packed scan.
fn packed_reference(kind: PackedKind, rows: u64, cols: u64, bytes: &[u8]) -> super::packed::Totals {
    let bits = u64::from(kind.bits());
    let codes_bytes = (rows * cols * bits / 8) as usize;
    let code = |i: u64| -> u8 {
        (0..bits)
            .map(|b| {
                let bit = i * bits + b;
                ((bytes[(bit / 8) as usize] >> (bit % 8)) & 1) << b
            })
            .sum()
    };
    let mut counts = [0u64; 16];
    let (mut zero_groups, mut first_reserved) = (0, None);
    for g in 0..rows * cols / 64 {
        let mut all_zero = true;
        for i in g * 64..g * 64 + 64 {
            let c = code(i);
            counts[usize::from(c)] += 1;
            all_zero &= i32::from(c) == kind.zero();
            if c > kind.max_code() && first_reserved.is_none() {
                first_reserved = Some((START + i * bits / 8, i));
            }
        }
        zero_groups += u64::from(all_zero);
    }
    let mut scale_hist = vec![0u32; 1 << 16];
    let mut row_max = vec![0u16; rows as usize];
    let mut first_bad_scale = None;
    let groups_per_row = cols / 64;
    for (i, s) in bytes[codes_bytes..].chunks_exact(2).enumerate() {
        let h = u16::from_le_bytes([s[0], s[1]]);
        scale_hist[usize::from(h)] += 1;
        let v = crate::decode::f16_to_f32(h);
        if v.is_finite() && v > 0.0 {
            let m = &mut row_max[i / groups_per_row as usize];
            *m = (*m).max(h);
        } else if first_bad_scale.is_none() {
            first_bad_scale = Some((START + (codes_bytes + 2 * i) as u64, h));
        }
    }
    super::packed::Totals {
        counts,
        zero_groups,
        first_reserved,
        scale_hist,
        row_max,
        first_bad_scale,
    }
}

/// Feeds `bytes` in pieces cut at random places (single bytes, cuts inside
/// a group and inside a scale), returning the scanner.
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

fn packed_totals(s: &Scanner) -> super::packed::Totals {
    match &s.kind {
        Kind::Packed(p) => p.totals(),
        _ => panic!("not a packed scanner"),
    }
}

#[test]
fn packed_scans_equal_the_naive_reference() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let kinds = [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4];
    for kind in kinds {
        for (rows, cols) in [(1, 64), (7, 64), (13, 192), (3, 4096), (33, 1024)] {
            for uniform in [false, true] {
                let bytes = packed_bytes(kind, rows, cols, &mut rng, uniform);
                let info = info(Layout::Packed { kind, rows, cols }, bytes.len());
                let want = packed_reference(kind, rows, cols, &bytes);
                let mut whole = Scanner::for_tensor(0, &info).unwrap();
                whole.feed(&bytes);
                assert_eq!(packed_totals(&whole), want, "{kind:?} {rows}x{cols} whole");
                let whole = whole.finish();
                for max_piece in [1, 7, 100, 5000] {
                    let pieces = scan_in_pieces(&info, &bytes, &mut rng, max_piece);
                    let case = format!("{kind:?} {rows}x{cols} pieces <= {max_piece}");
                    assert_eq!(packed_totals(&pieces), want, "{case}");
                    let pieces = pieces.finish();
                    assert_eq!(pieces.findings, whole.findings, "{case}");
                    assert_eq!(pieces.stats, whole.stats, "{case}");
                }
            }
        }
    }
}

#[test]
fn every_kernel_counts_alike() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for kind in [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4] {
        let ctx = CodeCtx::new(kind, START);
        let group = tally::group_bytes(kind);
        // Random groups, zero groups and zero groups but for one byte
        // (anywhere: a kernel that compares only part of a group counts
        // them as zero), in runs that are not a multiple of the kernels'
        // blocks of groups.
        for groups in [0usize, 1, 2, 3, 4, 6, 7, 8, 15, 1000] {
            let mut units = vec![0u8; groups * group];
            for g in units.chunks_exact_mut(group) {
                match rng.below(4) {
                    0 => g.copy_from_slice(&ctx.zero_group[..group]),
                    1 => {
                        g.copy_from_slice(&ctx.zero_group[..group]);
                        let at = rng.below(group as u64) as usize;
                        g[at] ^= 1 + rng.below(255) as u8;
                    }
                    _ => g.iter_mut().for_each(|b| *b = rng.next() as u8),
                }
            }
            let fast = tally::count(&ctx, &units);
            let portable = tally::count_portable(&ctx, &units);
            assert_eq!(fast.counts, portable.counts, "{kind:?} {groups}");
            assert_eq!(fast.zero_groups, portable.zero_groups, "{kind:?} {groups}");
            assert_eq!(fast.counts.iter().sum::<u64>(), 64 * groups as u64);
        }
    }
}

#[test]
fn dense_scans_equal_the_naive_reference() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let dtypes = [
        DenseDtype::F16,
        DenseDtype::Bf16,
        DenseDtype::F32,
        DenseDtype::F64,
        DenseDtype::F8E4m3,
        DenseDtype::F8E5m2,
    ]
    .into_iter()
    .chain(crate::format::IntDtype::ALL.map(DenseDtype::Int));
    for dtype in dtypes {
        // 70,001 values: past the count whose blocks are marked one by one.
        for values in [1usize, 511, 512, 513, 3001, 70_001] {
            let size = dtype.size() as usize;
            let mut bytes: Vec<u8> = (0..values * size).map(|_| rng.next() as u8).collect();
            // Mostly finite values: random bit patterns are often NaN in BF16.
            for v in bytes.chunks_exact_mut(size) {
                if let Some(top) = v.last_mut()
                    && rng.below(50) != 0
                {
                    *top &= 0xbf;
                }
                // F64: mostly values within f32's range (an exponent field
                // near the bias), some NaN and infinite.
                if dtype == DenseDtype::F64 {
                    let x = match rng.below(60) {
                        0 => f64::NAN,
                        1 => f64::NEG_INFINITY,
                        _ => f64::from(f32::from_bits(rng.next() as u32 & 0xbfff_ffff)),
                    };
                    v.copy_from_slice(&x.to_le_bytes());
                }
            }
            let layout = Layout::Dense {
                dtype,
                count: values as u64,
            };
            let info = info(layout, bytes.len());
            let mut hist = vec![0u32; 1 << 16];
            let mut moments = Moments::default();
            let mut first_bad = None;
            for (i, v) in bytes.chunks_exact(size).enumerate() {
                let (bits, x) = match dtype {
                    DenseDtype::F32 => {
                        let x = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                        ((x >> 16) as u16, f32::from_bits(x))
                    }
                    // The integer read into an i128 (sign-extended where
                    // signed), rounded once to f64 and once to f32.
                    DenseDtype::Int(t) => {
                        let signed = t.as_str().starts_with('I');
                        let mut wide = [if signed && v[size - 1] & 0x80 != 0 {
                            0xff
                        } else {
                            0
                        }; 16];
                        wide[..size].copy_from_slice(v);
                        let n = i128::from_le_bytes(wide);
                        let n = if t == crate::format::IntDtype::Bool {
                            i128::from(n != 0)
                        } else {
                            n
                        };
                        hist[((n as f32).to_bits() >> 16) as usize] += 1;
                        moments.push_f64(n as f64);
                        continue;
                    }
                    DenseDtype::F64 => {
                        let x = f64::from_le_bytes(v.try_into().unwrap());
                        hist[((x as f32).to_bits() >> 16) as usize] += 1;
                        moments.push_f64(x);
                        if !x.is_finite() && first_bad.is_none() {
                            first_bad = Some(START + (i * size) as u64);
                        }
                        continue;
                    }
                    // The F16 holding the value (every F8 value is one).
                    DenseDtype::F8E4m3 | DenseDtype::F8E5m2 => {
                        let x = if dtype == DenseDtype::F8E4m3 {
                            crate::decode::nvfp4::e4m3(v[0])
                        } else {
                            half::f16::from_bits(u16::from(v[0]) << 8).to_f32()
                        };
                        (half::f16::from_f32(x).to_bits(), x)
                    }
                    _ => {
                        let h = u16::from_le_bytes([v[0], v[1]]);
                        let x = if dtype == DenseDtype::F16 {
                            half::f16::from_bits(h).to_f32()
                        } else {
                            half::bf16::from_bits(h).to_f32()
                        };
                        (h, x)
                    }
                };
                hist[usize::from(bits)] += 1;
                moments.push(x);
                if !x.is_finite() && first_bad.is_none() {
                    first_bad = Some(START + (i * size) as u64);
                }
            }
            let pattern = match dtype {
                DenseDtype::F16 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 => Pattern16::F16,
                _ => Pattern16::Bf16,
            };
            let want = TensorStats {
                values: Some(stats::summarise_values(&hist, pattern, &moments)),
                ..Default::default()
            };
            // Every scan after the first takes the histogram the one
            // before returned to this thread's pool (cleared block by
            // block: after 70,001 values the blocks found holding counts,
            // before, the blocks marked as values came): a count left behind
            // would show here.
            for max_piece in [1, 3, 1025, 1 << 20] {
                let out = scan_in_pieces(&info, &bytes, &mut rng, max_piece).finish();
                // F16 and BF16 sums come from the pattern histogram, in
                // pattern order rather than file order: the mean and spread
                // may differ in the last bits, everything else is exact.
                let mut got = out.stats.clone();
                if let (Some(g), Some(w)) = (got.values.as_mut(), want.values.as_ref()) {
                    for (a, b) in [(&mut g.mean, w.mean), (&mut g.std, w.std)] {
                        let close = (*a - b).abs() <= 1e-12 * b.abs().max(1e-300)
                            || (a.is_nan() && b.is_nan());
                        assert!(close, "{dtype:?} {values}: {a} vs {b}");
                        *a = b;
                    }
                }
                assert_eq!(got, want, "{dtype:?} {values} <= {max_piece}");
                let offsets: Vec<_> = out.findings.iter().map(|f| f.offset).collect();
                assert_eq!(offsets, first_bad.into_iter().map(Some).collect::<Vec<_>>());
            }
        }
    }
}
