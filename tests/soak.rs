//! Soak: the engine and the app used for a long session do not leak. The
//! engine audits 1,000 small bundles one after another, in this process,
//! building each report as the CLI does; the app, driven through
//! egui_kittest, opens 200 bundles one after another (each open cancelling
//! the audit still running) and spot-checks some. Afterwards the threads
//! (/proc/self/task) and the resident memory (/proc/self/statm) are back at
//! the level they had after a warm-up, within a small bound, and nothing
//! panicked (a panic on any thread is caught by the hook below).
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bundlescope::audit::{self, Event, Failure};
use bundlescope::report::ReportBuilder;
use common::bundles;

const MIB: u64 = 1 << 20;

/// Both tests count this process's threads and memory: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Panics on any thread (an audit worker, a job), counted.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    });
}

/// The names of this process's threads (for the app test's message).
#[cfg(feature = "gui")]
fn thread_names() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    v.sort();
    v
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Resident bytes (the second field of /proc/self/statm, in pages).
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page
}

/// The thread count once it has not changed for 200 ms (workers that
/// were cancelled stop at their next chunk, not at once).
fn steady_threads() -> usize {
    let mut last = threads();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let n = threads();
        if n == last {
            return n;
        }
        last = n;
    }
    last
}

/// Waits (up to 10 s) for the thread count to come down to `at_most`.
fn settle_threads(at_most: usize) -> usize {
    let start = Instant::now();
    loop {
        let n = threads();
        if n <= at_most || start.elapsed() > Duration::from_secs(10) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn safetensors(dir: &Path, seed: usize) {
    let names = ["a.weight", "b.bias", "c.norm"];
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let count = 4 + (seed + i) % 13;
        header.insert(
            format!("{n}.{seed}"),
            serde_json::json!({"dtype": "F32", "shape": [count],
                "data_offsets": [data.len(), data.len() + 4 * count]}),
        );
        for k in 0..count {
            data.extend_from_slice(&((seed * 31 + k) as f32 * 0.01).to_le_bytes());
        }
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(&h);
    f.extend_from_slice(&data);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), f).unwrap();
}

/// `n` small bundles: every format's sample (copied, so each path is its
/// own bundle) and small safetensors checkpoints, each different, some of
/// them damaged (a finding, not a clean pass, is part of the soak too).
fn small_bundles(root: &Path, n: usize, with_samples: bool) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(n);
    let samples = if with_samples { bundles::all() } else { &[] };
    for i in 0..n {
        let dir = root.join(format!("b{i:04}"));
        if !samples.is_empty() && i % 4 == 0 {
            out.push(bundles::copy(&samples[i / 4 % samples.len()], &dir));
            continue;
        }
        safetensors(&dir, i);
        if i % 10 == 3 {
            // Cut one byte: the last tensor's range runs past the end.
            let p = dir.join("model.safetensors");
            let mut b = std::fs::read(&p).unwrap();
            b.pop();
            std::fs::write(&p, b).unwrap();
        }
        out.push(dir);
    }
    out
}

/// Audits `dir` in this process as `bundlescope audit --json` does, to the
/// serialised report; returns whether it was valid.
fn audit_to_report(dir: &Path) -> bool {
    let handle = audit::spawn(dir.to_path_buf(), audit::Options::default(), None).unwrap();
    let mut builder = ReportBuilder::default();
    for event in handle.events.iter() {
        let done = matches!(event, Event::Finished(_));
        builder.apply(&event);
        if done {
            break;
        }
    }
    match &builder.outcome {
        Some(Ok(_)) => {}
        Some(Err(Failure::Open(e))) => panic!("{}: {e}", dir.display()),
        other => panic!("{}: {other:?}", dir.display()),
    }
    let report = builder.report(&dir.display().to_string()).unwrap();
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.len() > 100);
    report.verdict == "valid"
}

#[test]
fn the_engine_audits_a_thousand_bundles_with_flat_threads_and_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    count_panics();
    let panics = PANICS.load(Ordering::SeqCst);
    let tmp = tempfile::tempdir().unwrap();
    let dirs = small_bundles(tmp.path(), 1000, true);
    // Warm-up, a whole round: the thread pools, the allocator's arenas
    // and free lists at their working size, lazy statics. A leak shows as
    // growth in the second round.
    for d in &dirs {
        audit_to_report(d);
    }
    let (t0, m0) = (steady_threads(), resident());
    let started = Instant::now();
    let mut valid = 0;
    for d in &dirs {
        valid += usize::from(audit_to_report(d));
    }
    let elapsed = started.elapsed();
    let (t1, m1) = (settle_threads(t0), resident());
    eprintln!(
        "1000 audits in {:.1} s; threads {t0} -> {t1}; resident {} -> {} MiB",
        elapsed.as_secs_f64(),
        m0 / MIB,
        m1 / MIB
    );
    // The damaged checkpoints are invalid, the rest valid: every audit ran.
    assert!(valid > 800 && valid < 1000, "{valid} valid");
    assert!(t1 <= t0, "threads {t0} -> {t1}");
    assert!(
        m1 <= m0 + 16 * MIB,
        "resident {} -> {} MiB",
        m0 / MIB,
        m1 / MIB
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), panics, "a thread panicked");
}

#[cfg(feature = "gui")]
#[test]
fn the_app_opens_two_hundred_bundles_cancelling_each_audit() {
    use bundlescope::app::Command;
    use common::harness::{Gui, GuiOptions};

    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    count_panics();
    let panics = PANICS.load(Ordering::SeqCst);
    let tmp = tempfile::tempdir().unwrap();
    let dirs = small_bundles(tmp.path(), 200, true);
    // No cache: every open is a real audit.
    let mut g = Gui::new(GuiOptions {
        cache: false,
        ..GuiOptions::default()
    });
    // Without MLX built in, nothing is spot-checked and the closure changes
    // nothing of its own.
    #[cfg_attr(not(feature = "mlx"), allow(unused_mut))]
    let mut spot_checked = 0;
    #[cfg_attr(not(feature = "mlx"), allow(unused_mut))]
    let mut round = |g: &mut Gui, i: usize, d: &Path| {
        g.send(Command::Open(d.to_path_buf()));
        // One frame: the open starts its audit; the next open replaces it.
        g.harness.step();
        if i % 25 == 24 {
            // Some run to the end, and a spot check of every packed tensor
            // runs on them where MLX is built in.
            g.finish();
            assert!(g.state().session().is_some());
            #[cfg(feature = "mlx")]
            if g.tensor_count() > 0 {
                g.send(Command::SpotCheck(None));
                g.harness.run_steps(2);
                g.wait_spot();
                spot_checked += 1;
            }
        }
    };
    // Warm-up, a whole round (see the engine's soak above); the first spot
    // check starts the app's MLX thread and MLX's own, which stay.
    for _ in 0..1 {
        for (i, d) in dirs.iter().enumerate() {
            round(&mut g, i, d);
        }
        g.finish();
    }
    g.finish();
    let (t0, m0) = (steady_threads(), resident());
    let started = Instant::now();
    for (i, d) in dirs.iter().enumerate() {
        round(&mut g, i, d);
    }
    g.finish();
    let elapsed = started.elapsed();
    let (t1, m1) = (settle_threads(t0), resident());
    eprintln!(
        "200 opens in {:.1} s ({spot_checked} spot-checked); threads {t0} -> {t1}; resident {} -> {} MiB",
        elapsed.as_secs_f64(),
        m0 / MIB,
        m1 / MIB
    );
    // The replaced audits were told to stop.
    assert!(g.state().replaced_audits().iter().all(|t| t.is_cancelled()));
    assert!(t1 <= t0, "threads {t0} -> {t1}: {:?}", thread_names());
    assert!(
        m1 <= m0 + 32 * MIB,
        "resident {} -> {} MiB",
        m0 / MIB,
        m1 / MIB
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), panics, "a thread panicked");
}
