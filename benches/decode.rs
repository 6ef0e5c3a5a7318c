//! Decode throughput per precision, in GB/s of packed bytes, at 1 and 2
//! threads: the scanner's decode + histogram (what `audit` and `hist` run)
//! and dequantisation to f32 (what `export` runs).
//!
//! `cargo bench --bench decode -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use bundlescope::audit::scan::Scanner;
use bundlescope::decode::{self, dequant};
use bundlescope::format::{Layout, PackedKind, TensorInfo};
use bundlescope::sample;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// About this many packed bytes per tensor: far past every cache.
const TARGET_BYTES: usize = 64 << 20;
const COLS: usize = 4096;
/// Rows quantised from real (heavy-tailed) values, then tiled: quantising
/// 64 MiB three times would dominate the run.
const DISTINCT_ROWS: usize = 64;
/// The audit's read size, so the scanner sees pieces as it does there.
const PIECE: usize = 8 << 20;
/// f32 values per dequantisation block, as `export` uses.
const BLOCK_VALUES: usize = 1 << 20;

const KINDS: [PackedKind; 3] = [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4];

struct Tensor {
    kind: PackedKind,
    rows: usize,
    bytes: Vec<u8>,
}

impl Tensor {
    fn new(kind: PackedKind) -> Self {
        let bits = kind.bits();
        let (rb, sb) = (
            dequant::row_bytes(kind, COLS),
            dequant::row_scale_bytes(COLS),
        );
        let rows = TARGET_BYTES / (rb + sb);
        let mut codes_rows = vec![0u8; DISTINCT_ROWS * rb];
        let mut scale_rows = vec![0u16; DISTINCT_ROWS * COLS / 64];
        let mut values = vec![0f32; COLS];
        let mut codes = vec![0u8; COLS];
        for r in 0..DISTINCT_ROWS {
            sample::packed_source_row(1, "bench", r as u64, &mut values);
            let scales = &mut scale_rows[r * COLS / 64..(r + 1) * COLS / 64];
            sample::quantize_row(kind, &values, &mut codes, scales);
            decode::pack_row(&codes, bits, &mut codes_rows[r * rb..(r + 1) * rb]);
        }
        let mut bytes = Vec::with_capacity(rows * (rb + sb));
        for r in 0..rows {
            let d = r % DISTINCT_ROWS;
            bytes.extend_from_slice(&codes_rows[d * rb..(d + 1) * rb]);
        }
        for r in 0..rows {
            let d = r % DISTINCT_ROWS;
            for s in &scale_rows[d * COLS / 64..(d + 1) * COLS / 64] {
                bytes.extend_from_slice(&s.to_le_bytes());
            }
        }
        Self { kind, rows, bytes }
    }

    fn info(&self) -> TensorInfo {
        TensorInfo {
            name: format!("bench.{}", self.kind.precision().as_str()),
            precision: self.kind.precision(),
            shape: Some(vec![self.rows as u64, COLS as u64]),
            source_dtype: None,
            encoding: None,
            offset: Some(0),
            bytes: Some(self.bytes.len() as u64),
            resident_bytes: Some(self.bytes.len() as u64),
            alias_of: None,
            file: 0,
            layout: Some(Layout::Packed {
                kind: self.kind,
                rows: self.rows as u64,
                cols: COLS as u64,
            }),
            quant: None,
            record: serde_json::Value::Null,
        }
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(p) => p,
        Err(e) => panic!("cannot build a {threads}-thread pool: {e}"),
    }
}

fn scan(info: &TensorInfo, bytes: &[u8]) -> u64 {
    let Some(mut s) = Scanner::for_tensor(0, info) else {
        panic!("bench tensor is not scannable")
    };
    for piece in bytes.chunks(PIECE) {
        s.feed(piece);
    }
    let out = s.finish();
    out.stats.codes.map_or(0, |c| c.total())
}

fn dequantise(t: &Tensor, buf: &mut [f32]) -> f32 {
    let (rb, sb) = (
        dequant::row_bytes(t.kind, COLS),
        dequant::row_scale_bytes(COLS),
    );
    let (codes, scales) = t.bytes.split_at(t.rows * rb);
    let block_rows = buf.len() / COLS;
    let mut acc = 0f32;
    for r0 in (0..t.rows).step_by(block_rows) {
        let n = block_rows.min(t.rows - r0);
        let block = &mut buf[..n * COLS];
        if let Err(e) =
            dequant::dequantize_rows(t.kind, COLS, &codes[r0 * rb..], &scales[r0 * sb..], block)
        {
            panic!("{e}");
        }
        acc += block[0];
    }
    acc
}

fn benches(c: &mut Criterion) {
    let tensors: Vec<Tensor> = KINDS.into_iter().map(Tensor::new).collect();
    let mut g = c.benchmark_group("scan");
    g.sample_size(10);
    for t in &tensors {
        let info = t.info();
        g.throughput(Throughput::Bytes(t.bytes.len() as u64));
        for threads in [1, 2] {
            let p = pool(threads);
            let id = BenchmarkId::new(t.kind.precision().as_str(), format!("{threads}t"));
            g.bench_function(id, |b| {
                p.install(|| b.iter(|| black_box(scan(&info, black_box(&t.bytes)))))
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("dequant");
    g.sample_size(10);
    let mut buf = vec![0f32; BLOCK_VALUES];
    for t in &tensors {
        g.throughput(Throughput::Bytes(t.bytes.len() as u64));
        for threads in [1, 2] {
            let p = pool(threads);
            let id = BenchmarkId::new(t.kind.precision().as_str(), format!("{threads}t"));
            g.bench_function(id, |b| {
                p.install(|| b.iter(|| black_box(dequantise(t, &mut buf))))
            });
        }
    }
    g.finish();
}

criterion_group!(decode_benches, benches);
criterion_main!(decode_benches);
