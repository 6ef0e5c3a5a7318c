//! Opening a checkpoint's index: `format::open` on a 20,000-tensor MLX-LM
//! checkpoint (config, index, two shard headers, modules resolved, rows
//! sorted), and the strict safetensors header parser alone on one of its
//! shards (about 10,000 tensors).
//!
//! `cargo bench --profile ci --bench open`

use std::hint::black_box;

use bundlescope::format::{self, safetensors};
use criterion::{Criterion, criterion_group, criterion_main};

/// The binary's allocator (src/main.rs), so the figures are the app's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mlx");
    let o = bundlescope::sample::mlxlm::MlxLmOptions {
        layers: 833,
        experts: 2,
        ..Default::default()
    };
    bundlescope::sample::mlxlm::write(&dir, &o, None).unwrap();
    let n = format::open(&dir).unwrap().tensors.len();
    assert!(n >= 19_000, "{n} tensors");
    let shard = dir.join("model-00001-of-00002.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    let in_shard = safetensors::parse_header("s", &bytes)
        .unwrap()
        .tensors
        .len();
    let mut g = c.benchmark_group("open");
    g.sample_size(20);
    g.bench_function(format!("mlx-lm checkpoint, {n} tensors"), |b| {
        b.iter(|| black_box(format::open(&dir).unwrap()))
    });
    g.bench_function(format!("safetensors header, {in_shard} tensors"), |b| {
        b.iter(|| black_box(safetensors::parse_header("s", &bytes).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
