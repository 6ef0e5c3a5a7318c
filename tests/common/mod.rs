//! Shared helpers for the integration tests: build a sample with the
//! project's own writer, corrupt a copy, run the real binary.
#![allow(dead_code)]

pub mod bundles;
pub mod codes;
pub mod damage;
pub mod gptq;
#[cfg(feature = "gui")]
pub mod harness;
pub mod mlxlm;
pub mod npy;
pub mod nvfp4;
pub mod oms;

use std::path::{Path, PathBuf};
use std::process::Command;

use bundlescope::sample::{self, SampleFormat, SampleOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A bundle in its own temporary folder.
pub struct TestBundle {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl TestBundle {
    /// A fresh valid sample.
    pub fn sample(format: SampleFormat) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("bundle");
        sample::write(
            &dir,
            &SampleOptions {
                format,
                seed: 7,
                size_mib: None,
            },
        )
        .expect("sample");
        Self { tmp, dir }
    }

    pub fn v2() -> Self {
        Self::sample(SampleFormat::Audio8V2)
    }

    pub fn manifest(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("manifest.json")).unwrap()).unwrap()
    }

    pub fn write_manifest(&self, m: &Value) {
        std::fs::write(
            self.dir.join("manifest.json"),
            serde_json::to_vec_pretty(m).unwrap(),
        )
        .unwrap();
    }

    /// Edits the manifest in place.
    pub fn edit(&self, f: impl FnOnce(&mut Value)) {
        let mut m = self.manifest();
        f(&mut m);
        self.write_manifest(&m);
    }

    pub fn payload(&self) -> PathBuf {
        self.dir.join("weights.bin")
    }

    /// Edits the payload bytes, then (optionally) re-hashes so only the
    /// intended rule breaks.
    pub fn patch_payload(&self, rehash: bool, f: impl FnOnce(&mut Vec<u8>)) {
        let mut bytes = std::fs::read(self.payload()).unwrap();
        f(&mut bytes);
        std::fs::write(self.payload(), &bytes).unwrap();
        if rehash {
            self.rehash();
        }
    }

    /// Sets weights_sha256 to the payload's actual hash.
    pub fn rehash(&self) {
        let bytes = std::fs::read(self.payload()).unwrap();
        let sha = hex(&Sha256::digest(&bytes));
        self.edit(|m| m["weights_sha256"] = Value::String(sha));
    }

    /// The record of tensor `name`.
    pub fn record(&self, name: &str) -> Value {
        self.manifest()["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no record {name}"))
            .clone()
    }

    /// Index of tensor `name` in the records.
    pub fn index(&self, name: &str) -> usize {
        self.manifest()["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .position(|r| r["name"] == name)
            .unwrap()
    }

    /// The first record with this precision.
    pub fn first_of(&self, precision: &str) -> Value {
        self.manifest()["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["precision"] == precision)
            .unwrap()
            .clone()
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Output of one CLI run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bundlescope"))
}

/// Runs the real binary with a 120 s guard against hangs. Output is read on
/// threads while waiting, so a large report cannot fill the pipe and stall.
pub fn cli(args: &[&str]) -> Run {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    run_guarded(cmd, args)
}

/// Runs the real binary as root without the capabilities that let root
/// read through file permissions (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`,
/// dropped from the bounding set by `setpriv`), for the cases that
/// permissions decide and that CI, running as root, would read through.
/// It stays uid 0, so the checkout's path needs no opening up. `None` when
/// that is not possible here.
pub fn cli_without_dac(args: &[&str]) -> Option<Run> {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--bounding-set=-dac_override,-dac_read_search",
        "--inh-caps=-dac_override,-dac_read_search",
        "--",
    ])
    .arg(bin())
    .args(args);
    let run = run_guarded(cmd, args);
    // 126/127: setpriv or the binary could not be started.
    (run.code != 126 && run.code != 127 && !run.stderr.contains("setpriv:")).then_some(run)
}

fn run_guarded(mut cmd: Command, args: &[&str]) -> Run {
    use std::io::Read;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bundlescope");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            panic!("bundlescope {args:?} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out_t.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_t.join().unwrap()).into_owned(),
    }
}

pub fn audit_json(dir: &Path) -> Run {
    cli(&["audit", dir.to_str().unwrap(), "--json"])
}

/// Error check ids of a report, sorted and de-duplicated.
pub fn error_checks(report: &Value) -> Vec<String> {
    let mut ids: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| f["check"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// `bundlescope export BUNDLE --tensor NAME --out OUT`.
pub fn export_tensor(bundle: &str, name: &str, out: &str) -> Run {
    cli(&["export", bundle, "--tensor", name, "--out", out])
}

/// Findings of check `id`.
pub fn findings_of<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == id)
        .collect()
}

/// Where the shared folder sits: beside the checkout.
pub fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("shared")
}

/// The Python that has mlx and numpy: BUNDLESCOPE_PYTHON, else the one that
/// installed the project-local `.pydeps` (`.pydeps/python`, which may be a
/// python3.12 where python3 is too old), else python3; with `.pydeps` on its
/// path.
pub fn python() -> (String, Option<PathBuf>) {
    let deps = Path::new(env!("CARGO_MANIFEST_DIR")).join(".pydeps");
    let recorded = deps.join("python");
    let py = std::env::var("BUNDLESCOPE_PYTHON").unwrap_or_else(|_| {
        if recorded.exists() {
            recorded.display().to_string()
        } else {
            "python3".into()
        }
    });
    (py, deps.is_dir().then_some(deps))
}

/// Runs a Python script with the project's Python; None when Python with
/// mlx is not available (the caller decides whether that is a skip or a failure).
pub fn run_python(args: &[&str]) -> Option<std::process::Output> {
    let (py, deps) = python();
    let mut cmd = Command::new(py);
    cmd.args(args);
    if let Some(d) = deps {
        cmd.env("PYTHONPATH", d);
    }
    cmd.output().ok()
}

/// Is the seed-parity machinery present? In CI it must be.
pub fn require_or_skip(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required in CI but missing");
    }
    eprintln!("SKIPPED: {what} is not available here");
    false
}
