//! Property tests: any byte flip, insertion or truncation of a sample of
//! every format, in its manifest, header or payload, gives a finished audit
//! (exit 0 or 1 with a report that has a verdict) or a clear exit-2 error,
//! never a panic, within a time bound proportional to the bundle's size.
//! Cases per format: `MUTATION_CASES` (default 32), so the suite stays fast.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bundles::{self, Sample};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip { at: f64, mask: u8 },
    /// Insert bytes at a position.
    Insert { at: f64, bytes: Vec<u8> },
    /// Cut the file at a position.
    Truncate { at: f64 },
}

/// Where in the file: the first 4 KiB (the manifest, a safetensors or
/// GGUF header) half the time, anywhere the other half.
fn position(len: usize, at: f64, head: bool) -> usize {
    let span = if head { len.min(4096) } else { len };
    ((span as f64) * at) as usize
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation, head: bool) {
    let len = bytes.len();
    match m {
        Mutation::Flip { at, mask } => {
            if len > 0 {
                let i = position(len, *at, head).min(len - 1);
                bytes[i] ^= mask;
            }
        }
        Mutation::Insert { at, bytes: ins } => {
            let i = position(len, *at, head).min(len);
            bytes.splice(i..i, ins.iter().copied());
        }
        Mutation::Truncate { at } => bytes.truncate(position(len, *at, head)),
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0.0..1.0f64, 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        (0.0..1.0f64, prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (0.0..1.0f64).prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// Runs `audit --json` and kills it at `limit`.
fn audit(target: &Path, limit: Duration) -> (i32, String, String, Duration) {
    let start = Instant::now();
    let mut child = Command::new(common::bin())
        .args(["audit", target.to_str().unwrap(), "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("audit of {} ran past {limit:?}", target.display());
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let took = start.elapsed();
    (
        status.code().unwrap_or(-1),
        o.join().unwrap(),
        e.join().unwrap(),
        took,
    )
}

fn cases() -> u32 {
    std::env::var("MUTATION_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32)
}

fn check_format(s: &Sample) {
    let names: Vec<String> = bundles::files(&s.dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let size: u64 = bundles::files(&s.dir)
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum();
    // 20 s for start-up on a loaded 2-core machine, plus 4 s per MiB.
    let limit = Duration::from_secs(20) + Duration::from_secs(4 * (size >> 20).max(1));
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..names.len(), mutation(), any::<bool>());
    let result = runner.run(&strategy, |(file, m, head)| {
        let tmp = tempfile::tempdir().unwrap();
        let target = bundles::copy(s, tmp.path());
        let path = tmp.path().join(&names[file]);
        let mut bytes = std::fs::read(&path).unwrap();
        apply(&mut bytes, &m, head);
        std::fs::write(&path, &bytes).unwrap();
        let (code, stdout, stderr, _) = audit(&target, limit);
        let what = format!("{} {} {m:?} head={head}", s.name, names[file]);
        prop_assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        prop_assert!([0, 1, 2].contains(&code), "{what}: exit {code}\n{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout)
            .map_err(|e| TestCaseError::fail(format!("{what}: report is not JSON ({e})")))?;
        let verdict = report["verdict"].as_str().unwrap_or("");
        prop_assert!(!verdict.is_empty(), "{what}: no verdict in {report}");
        if code == 2 {
            prop_assert!(!stderr.trim().is_empty(), "{what}: exit 2 without a reason");
        } else {
            prop_assert_eq!(verdict == "valid", code == 0, "{}: {}", what, verdict);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

macro_rules! per_format {
    ($($test:ident => $name:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            let s = bundles::all().iter().find(|s| s.name == $name).unwrap();
            check_format(s);
        }
    )*};
}

per_format! {
    audio8_v2_mutations => "audio8-v2",
    audio8_v1_mutations => "audio8-v1",
    gptq_q4_mutations => "gptq-q4",
    nvfp4_mutations => "nvfp4",
    mlx_lm_mutations => "mlx-lm",
    safetensors_mutations => "safetensors",
    gguf_mutations => "gguf",
}

/// The unmutated samples are valid, so a mutation's finding is the
/// mutation's, and the bound above is far from a normal audit's time.
#[test]
fn every_sample_is_valid_and_quick() {
    for s in bundles::all() {
        let (code, stdout, stderr, took) = audit(&s.target, Duration::from_secs(60));
        assert_eq!(code, 0, "{}: {stdout}\n{stderr}", s.name);
        assert!(took < Duration::from_secs(20), "{}: {took:?}", s.name);
    }
}
