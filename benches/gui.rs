//! GUI timings, headless through egui_kittest (no GPU needed):
//! - open → populated table for a 2,000-tensor manifest, and for a
//!   20,000-tensor MLX-LM checkpoint (config, index, two shard headers);
//! - frame time while a 20,000-row and a 200,000-row table scroll from top
//!   to bottom (the frame must not grow with the tensors).
//!
//! Run: `cargo bench --bench gui` (`BENCH_OPEN_ONLY=1` skips the
//! scrolling). Prints the figures the README records.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The binary's allocator (src/main.rs), so the figures are the app's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bundlescope::app::{App, Command};
use bundlescope::format::{self, TensorInfo};
use egui_kittest::Harness;
use serde_json::json;

fn harness(app: App) -> Harness<'static, App> {
    Harness::builder()
        .with_size([1280.0, 820.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app)
}

/// A valid-shaped manifest of `n` small dense tensors, with a payload to match.
fn write_manifest(dir: &std::path::Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut records = Vec::new();
    for i in 0..n {
        records.push(
            json!({"name": format!("model.layers.{}.block.{}.weight", i / 8, i % 8),
            "precision": "original", "encoding": "original", "source_dtype": "BF16",
            "shape": [64], "offset": i * 128, "bytes": 128}),
        );
    }
    let payload = vec![0u8; n * 128];
    std::fs::write(dir.join("weights.bin"), &payload).unwrap();
    let m = json!({"format": "audio8-mixed-bundle-v2", "group_size": 64, "tie_word_embeddings": true,
        "weights_file": "weights.bin", "weights_bytes": payload.len(),
        "weights_sha256": format::sha256_hex(&payload), "tensors": records,
        "aliases": {}, "source_revision": "bench", "profile": "bench"});
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
}

fn open_to_table(n: usize) -> Duration {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    write_manifest(&dir, n);
    let mut h = harness(App::new(None));
    let start = Instant::now();
    h.state_mut().send(Command::Open(dir));
    loop {
        h.step();
        if h.state().rows().len() == n {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "table never filled"
        );
    }
    start.elapsed()
}

/// Frames, then the mean, median, p95 and p99 frame time.
fn scroll_frames(n: usize) -> (usize, Duration, Duration, Duration, Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    write_manifest(&dir, 10);
    let mut bundle = format::open(&dir).unwrap();
    let template: TensorInfo = bundle.tensors[0].clone();
    bundle.tensors = (0..n)
        .map(|i| TensorInfo {
            name: format!("model.layers.{}.experts.{}.weight", i / 128, i % 128),
            offset: Some(i as u64 * 128),
            ..template.clone()
        })
        .collect();
    let mut app = App::new(None);
    app.show_index(Arc::new(bundle));
    let mut h = harness(app);
    h.run_steps(3);
    let mut frames = Vec::new();
    // Scroll with the wheel over the table until the last row is on screen;
    // the step grows with the table so every size takes about 800 frames.
    let step = 600.0 * n as f32 / 20_000.0;
    for _ in 0..4000 {
        // Both events go into the next frame's input: `Harness::event` would
        // queue them, and `step` runs one frame per queued event, so each
        // measured "frame" used to be two.
        let events = &mut h.input_mut().events;
        events.push(egui::Event::PointerMoved(egui::pos2(300.0, 300.0)));
        events.push(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -step),
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Unknown,
            modifiers: egui::Modifiers::NONE,
        });
        let t = Instant::now();
        h.step();
        frames.push(t.elapsed());
        if egui_kittest::kittest::Queryable::query_by_label(
            &h,
            &format!(
                "model.layers.{}.experts.{}.weight",
                (n - 1) / 128,
                (n - 1) % 128
            ),
        )
        .is_some()
        {
            break;
        }
    }
    // One pass per frame (plus the few before the loop), or the figures
    // would hide a discarded pass.
    let passes = h.ctx.cumulative_pass_nr();
    assert!(
        passes <= frames.len() as u64 + 8,
        "{passes} passes for {} frames",
        frames.len()
    );
    frames.sort();
    let mean = frames.iter().sum::<Duration>() / frames.len() as u32;
    let at = |q: usize| frames[(frames.len() * q / 100).min(frames.len() - 1)];
    (frames.len(), mean, at(50), at(95), at(99))
}

/// Open → populated table for an MLX-LM checkpoint of `layers` small
/// layers (about 24 tensors each, two shards), written once.
fn open_mlxlm_to_table(dir: &std::path::Path) -> (Duration, usize) {
    let mut h = harness(App::new(None));
    let start = Instant::now();
    h.state_mut().send(Command::Open(dir.to_path_buf()));
    let mut frames = 0;
    loop {
        let t = Instant::now();
        h.step();
        frames += 1;
        let n = h.state().rows().len();
        if n > 0 {
            if std::env::var_os("BENCH_VERBOSE").is_some() {
                eprintln!(
                    "table after {frames} frames, {:.1} ms; the last frame took {:.1} ms",
                    start.elapsed().as_secs_f64() * 1e3,
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
            return (start.elapsed(), n);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "table never filled"
        );
    }
}

fn main() {
    let mut opens: Vec<Duration> = (0..5).map(|_| open_to_table(2000)).collect();
    opens.sort();
    println!(
        "open → populated table, 2,000 tensors: median {:.1} ms (target < 100 ms)",
        opens[2].as_secs_f64() * 1e3
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mlx");
    let o = bundlescope::sample::mlxlm::MlxLmOptions {
        layers: 833,
        experts: 2,
        ..Default::default()
    };
    bundlescope::sample::mlxlm::write(&dir, &o, None).unwrap();
    // BENCH_OPEN_RUNS=N repeats the open more often (for a profiler).
    let n_runs = std::env::var("BENCH_OPEN_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5usize)
        .max(1);
    let mut runs: Vec<(Duration, usize)> = (0..n_runs).map(|_| open_mlxlm_to_table(&dir)).collect();
    runs.sort();
    println!(
        "open → populated table, MLX-LM checkpoint of {} tensors in 2 shards: median {:.1} ms (target < 100 ms)",
        runs[n_runs / 2].1,
        runs[n_runs / 2].0.as_secs_f64() * 1e3
    );
    if std::env::var_os("BENCH_OPEN_ONLY").is_some() {
        return;
    }
    for (n, label) in [(20_000, "20,000"), (200_000, "200,000")] {
        let (frames, mean, p50, p95, p99) = scroll_frames(n);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{label}-row table scrolled end to end: {frames} frames, mean {:.2} ms, p99 {:.2} ms per frame (target: mean < 2 ms, p99 < 4 ms; median {:.2}, p95 {:.2})",
            ms(mean),
            ms(p99),
            ms(p50),
            ms(p95)
        );
    }
}
