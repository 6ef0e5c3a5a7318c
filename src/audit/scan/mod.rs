//! Per-tensor scanners fed from the payload's chunks: the value checks and
//! the histograms of the single pass. A scanner sees its tensor's bytes in
//! order, in pieces of any size, and carries partial units across pieces.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod dense;
#[cfg(test)]
mod expert_tests;
mod gguf;
mod mlx;
#[cfg(test)]
mod mlx_reference_tests;
#[cfg(target_arch = "aarch64")]
mod neon;
mod nvfp4;
mod packed;
mod pool;
#[cfg(test)]
mod reference_tests;
mod tally;

use dense::Dense;
use gguf::GgufScan;
use nvfp4::{E4m3Scan, Fp4Scan, GlobalScan};
use packed::Packed;

use crate::decode::stats::TensorStats;
use crate::finding::Finding;
use crate::format::{Layout, TensorInfo};

/// Partial-unit carry: hands whole units of `unit` bytes to a callback,
/// keeping the tail of one piece until the next completes it.
struct Carry {
    buf: [u8; 32],
    len: usize,
    unit: usize,
}

impl Carry {
    fn new(unit: usize) -> Self {
        debug_assert!(unit <= 32 && unit > 0);
        Self {
            buf: [0; 32],
            len: 0,
            unit,
        }
    }

    fn feed(&mut self, mut data: &[u8], mut f: impl FnMut(&[u8])) {
        let unit = self.unit;
        if self.len > 0 {
            let take = (unit - self.len).min(data.len());
            self.buf[self.len..self.len + take].copy_from_slice(&data[..take]);
            self.len += take;
            data = &data[take..];
            if self.len < unit {
                return;
            }
            f(&self.buf[..unit]);
            self.len = 0;
        }
        let whole = data.len() / unit * unit;
        if whole > 0 {
            f(&data[..whole]);
        }
        let rest = &data[whole..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.len = rest.len();
    }
}

/// What a finished scanner learned.
pub struct ScanOutcome {
    /// Value findings (reserved codes, bad scales, non-finite values).
    pub findings: Vec<Finding>,
    /// Histograms and statistics.
    pub stats: TensorStats,
}

/// Scans one tensor's byte range.
pub struct Scanner {
    /// Index of the tensor in the bundle's index.
    pub tensor: usize,
    /// Absolute start offset in its file.
    pub start: u64,
    /// Absolute end offset (exclusive).
    pub end: u64,
    name: String,
    pos: u64,
    kind: Kind,
}

enum Kind {
    Packed(Box<Packed>),
    Dense(Box<Dense>),
    /// Codes the pass only hashes (GGUF types listed, not decoded).
    Codes,
    /// Stacked NVFP4 codes: every nibble is a valid E2M1 code; counted
    /// expert by expert for the weight's quality and its experts' peers.
    Fp4(Box<Fp4Scan>),
    /// Stacked E4M3 scales: per-expert byte histograms, NaN bytes located.
    E4m3(Box<E4m3Scan>),
    /// Per-expert F32 global scales.
    Global(Box<GlobalScan>),
    /// GGUF block-quantised codes and scales.
    Gguf(Box<GgufScan>),
    /// MLX packed codes: the code histogram.
    MlxCodes(Box<mlx::CodesScan>),
    /// MLX U8 scales (E8M0, E4M3).
    MlxScales(Box<mlx::ScalesScan>),
    /// MLX affine scales: the dense checks, and their magnitudes' range.
    MlxAffineScales(Box<Dense>, Box<mlx::AbsRange>),
}

/// Scales per row of an MLX scales tensor: its last dimension.
fn groups_per_row(t: &TensorInfo) -> u64 {
    t.shape
        .as_ref()
        .and_then(|s| s.last().copied())
        .unwrap_or(1)
}

impl Scanner {
    /// A scanner for tensor `index`, if its metadata passed and it has bytes.
    pub fn for_tensor(index: usize, t: &TensorInfo) -> Option<Self> {
        let layout = t.layout?;
        let (start, end) = t.range()?;
        let kind = match layout {
            Layout::Dense { dtype, .. } => Kind::Dense(Box::new(Dense::new(dtype, start))),
            Layout::Packed { kind, rows, cols } => Kind::Packed(Box::new(Packed::new(
                kind,
                rows,
                cols,
                layout.codes_bytes(),
                start,
            ))),
            Layout::Fp4 {
                experts,
                rows,
                cols,
            } => Kind::Fp4(Box::new(Fp4Scan::new(experts, rows, cols))),
            Layout::E4m3 {
                experts,
                rows,
                groups,
            } => Kind::E4m3(Box::new(E4m3Scan::new(experts, rows, groups))),
            Layout::GlobalScale { experts } => Kind::Global(Box::new(GlobalScan::new(experts))),
            Layout::Gguf { ty, rows, cols } => {
                use crate::format::gguf::GgmlType as T;
                let dense = |dtype| {
                    Kind::Dense(Box::new(Dense::with_check(
                        dtype,
                        start,
                        crate::finding::checks::GGUF_FINITE,
                    )))
                };
                match ty {
                    T::F32 => dense(crate::format::DenseDtype::F32),
                    T::F16 => dense(crate::format::DenseDtype::F16),
                    T::BF16 => dense(crate::format::DenseDtype::Bf16),
                    T::F64 => dense(crate::format::DenseDtype::F64),
                    _ if let Some(it) = ty.int_dtype() => dense(crate::format::DenseDtype::Int(it)),
                    // Listed and size-checked types are hashed only.
                    _ if !ty.decoded() => Kind::Codes,
                    _ => Kind::Gguf(Box::new(GgufScan::new(ty, rows, cols, start))),
                }
            }
            Layout::MlxCodes {
                mode,
                bits,
                group,
                experts,
                rows,
                cols,
            } => Kind::MlxCodes(Box::new(mlx::CodesScan::new(
                mode,
                bits,
                experts * rows * (cols / group.max(1)),
                start,
                (end - start, experts, rows),
            ))),
            Layout::MlxScales {
                kind,
                experts,
                per_expert,
            } => Kind::MlxScales(Box::new(mlx::ScalesScan::new(
                kind,
                experts,
                per_expert,
                groups_per_row(t),
            ))),
            Layout::MlxParams { dtype, .. } => {
                let dense = Box::new(Dense::with_check(
                    dtype,
                    start,
                    crate::finding::checks::MLXLM_SCALES,
                ));
                if t.name.ends_with(".scales") {
                    // A stacked module's scales are `[experts, rows, groups]`.
                    let (experts, rows) = match t.shape.as_deref() {
                        Some(&[e, r, _]) => (e, r),
                        _ => (1, 0),
                    };
                    Kind::MlxAffineScales(
                        dense,
                        Box::new(
                            mlx::AbsRange::new(dtype, groups_per_row(t)).per_expert(experts, rows),
                        ),
                    )
                } else {
                    Kind::Dense(dense)
                }
            }
        };
        Some(Self {
            tensor: index,
            start,
            end,
            name: t.name.clone(),
            pos: 0,
            kind,
        })
    }

    /// The rough CPU time of scanning one of its bytes, in SHA-256 bytes
    /// (from profiles of the pass: a BF16 tensor's checks cost about half
    /// of hashing it, a GGUF block scan a little more, codes only hashed
    /// nothing). Only for spreading work over threads, never for results.
    pub fn cost_per_byte(&self) -> f64 {
        match self.kind {
            Kind::Codes => 0.0,
            Kind::Dense(_) => 0.45,
            Kind::Gguf(_) => 0.6,
            _ => 0.5,
        }
    }

    /// Bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.end - self.start - self.pos
    }

    /// Feeds the next bytes of the tensor (never more than [`Self::remaining`]).
    pub fn feed(&mut self, mut data: &[u8]) {
        let remaining = self.remaining();
        if data.len() as u64 > remaining {
            data = &data[..remaining as usize];
        }
        match &mut self.kind {
            Kind::Dense(d) => d.feed(data),
            Kind::Codes => {}
            Kind::Fp4(f) => f.feed(data),
            Kind::E4m3(e) => e.feed(self.start, self.pos, data),
            Kind::Global(g) => g.feed(data),
            Kind::Packed(p) => p.feed(self.pos, data),
            Kind::Gguf(g) => g.feed(data),
            Kind::MlxCodes(m) => m.feed(data),
            Kind::MlxScales(m) => m.feed(self.start, self.pos, data),
            Kind::MlxAffineScales(d, r) => {
                d.feed(data);
                r.feed(data);
            }
        }
        self.pos += data.len() as u64;
    }

    /// Findings and statistics, once every byte has been fed.
    pub fn finish(self) -> ScanOutcome {
        let name = &self.name;
        let mut findings = Vec::new();
        let stats = match self.kind {
            Kind::Codes => TensorStats::default(),
            Kind::Fp4(f) => f.finish(),
            Kind::E4m3(e) => e.finish(name, self.start, &mut findings),
            Kind::Global(g) => g.finish(name, self.start, &mut findings),
            Kind::Dense(d) => d.finish(name, &mut findings),
            Kind::Packed(p) => p.finish(name, &mut findings),
            Kind::Gguf(g) => g.finish(name, &mut findings),
            Kind::MlxCodes(m) => m.finish(name, &mut findings),
            Kind::MlxScales(m) => m.finish(name, self.start, &mut findings),
            Kind::MlxAffineScales(d, r) => {
                let found = r.finish(d.patterns());
                TensorStats {
                    abs_range: found.range,
                    row_outliers: Some(found.outliers),
                    zero_scales: Some(found.zeros),
                    scales: Some(Box::new(found.summary)),
                    experts: found.experts,
                    ..d.finish(name, &mut findings)
                }
            }
        };
        ScanOutcome { findings, stats }
    }
}

#[cfg(test)]
mod tests {
    use super::tally::{has_code_7, has_nibble_15};
    use super::*;
    use crate::decode;
    use crate::format::PackedKind;

    /// A packed tensor big enough for the parallel path, with zero groups,
    /// reserved codes in two different pieces and a bad scale.
    fn big_tensor(kind: PackedKind) -> (TensorInfo, Vec<u8>) {
        let (rows, cols) = (1400u64, 4096u64);
        let layout = Layout::Packed { kind, rows, cols };
        let codes_bytes = layout.codes_bytes() as usize;
        let mut bytes = Vec::with_capacity(codes_bytes + layout.scale_count() as usize * 2);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let (bits, max) = (kind.bits(), kind.max_code());
        let mut codes = vec![0u8; cols as usize];
        let mut row = vec![0u8; layout.row_bytes() as usize];
        for r in 0..rows {
            for (j, c) in codes.iter_mut().enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = if r % 7 == 3 && j < 128 {
                    kind.zero() as u8
                } else {
                    (x % (u64::from(max) + 1)) as u8
                };
            }
            if r == 900 || r == 1300 {
                codes[77] = (1 << bits) - 1; // reserved in q3 and q4
            }
            decode::pack_row(&codes, bits, &mut row);
            bytes.extend_from_slice(&row);
        }
        for g in 0..layout.scale_count() {
            let h: u16 = if g == 5000 {
                0xfc00
            } else {
                0x2000 + (g % 3000) as u16
            };
            bytes.extend_from_slice(&h.to_le_bytes());
        }
        let info = TensorInfo {
            name: "big".into(),
            precision: kind.precision(),
            shape: Some(vec![rows, cols]),
            source_dtype: None,
            encoding: None,
            offset: Some(64),
            bytes: Some(bytes.len() as u64),
            resident_bytes: None,
            alias_of: None,
            file: 0,
            layout: Some(layout),
            quant: None,
            record: serde_json::Value::Null,
        };
        (info, bytes)
    }

    #[test]
    fn parallel_scans_equal_sequential_ones() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for kind in [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4] {
            let (info, bytes) = big_tensor(kind);
            let mut whole = Scanner::for_tensor(0, &info).unwrap();
            pool.install(|| whole.feed(&bytes));
            let whole = whole.finish();
            let mut pieces = Scanner::for_tensor(0, &info).unwrap();
            for piece in bytes.chunks(4097) {
                pieces.feed(piece);
            }
            let pieces = pieces.finish();
            assert_eq!(whole.findings, pieces.findings, "{kind:?}");
            assert_eq!(whole.stats, pieces.stats, "{kind:?}");
            let q = whole.stats.quality.unwrap();
            assert_eq!(q.zero_groups, 200 * 2, "{kind:?}");
            if kind != PackedKind::Q3Full8 {
                assert_eq!(q.reserved_codes, 2, "{kind:?}");
                assert!(whole.findings[0].message.contains("row 900, column 77"));
            }
        }
    }

    #[test]
    fn carry_hands_out_whole_units_across_pieces() {
        let mut c = Carry::new(3);
        let mut seen = Vec::new();
        for piece in [&[1u8, 2][..], &[3, 4, 5, 6, 7], &[8], &[9]] {
            c.feed(piece, |u| {
                assert_eq!(u.len() % 3, 0);
                seen.extend_from_slice(u);
            });
        }
        assert_eq!(seen, (1..=9).collect::<Vec<u8>>());
    }

    #[test]
    fn nibble_15_detection() {
        assert!(!has_nibble_15(&[0xee; 17]));
        let mut b = [0x11u8; 17];
        b[9] = 0xf1;
        assert!(has_nibble_15(&b));
        b[9] = 0x1f;
        assert!(has_nibble_15(&b));
        b[9] = 0x11;
        b[16] = 0x0f;
        assert!(has_nibble_15(&b));
    }

    #[test]
    fn code_7_detection() {
        let mut row = [0u8; 3];
        for j in 0..8 {
            let mut codes = [6u8; 8];
            codes[j] = 7;
            decode::pack_row(&codes, 3, &mut row);
            let w = u32::from(row[0]) | u32::from(row[1]) << 8 | u32::from(row[2]) << 16;
            assert!(has_code_7(w), "position {j}");
        }
        decode::pack_row(&[6, 5, 3, 6, 6, 0, 1, 6], 3, &mut row);
        let w = u32::from(row[0]) | u32::from(row[1]) << 8 | u32::from(row[2]) << 16;
        assert!(!has_code_7(w));
    }
}
