//! A sample of every format the project reads, written once per test binary
//! by the real `sample` subcommand, for the hardening tests that run the same
//! operation on each (mutations, read-only, hostile folders).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cli;

/// One sample: its name, the folder that holds it and the path the CLI is
/// given (the folder, or the file for a GGUF).
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: &'static str,
    pub dir: PathBuf,
    pub target: PathBuf,
}

/// Every format: audio8 v1 and v2, the calibrated GPTQ-Q4 overlay (its
/// parent beside it), mlx-nvfp4, MLX-LM, a plain safetensors checkpoint (the
/// MLX-LM sample's BF16 reference) and GGUF.
pub fn all() -> &'static [Sample] {
    static SAMPLES: OnceLock<(tempfile::TempDir, Vec<Sample>)> = OnceLock::new();
    &SAMPLES.get_or_init(write_all).1
}

fn sample(root: &Path, name: &str, args: &[&str]) {
    let dir = root.join(name);
    let mut a = vec!["sample", dir.to_str().unwrap()];
    a.extend_from_slice(args);
    let run = cli(&a);
    assert_eq!(run.code, 0, "sample {name}: {}", run.stderr);
}

fn write_all() -> (tempfile::TempDir, Vec<Sample>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let parent = root.join("audio8-v2");
    sample(root, "audio8-v2", &["--format", "audio8-v2"]);
    sample(root, "audio8-v1", &["--format", "audio8-v1"]);
    sample(
        root,
        "gptq-q4",
        &["--format", "gptq-q4", "--parent", parent.to_str().unwrap()],
    );
    sample(root, "nvfp4", &["--format", "nvfp4", "--layers", "1"]);
    let reference = root.join("safetensors");
    sample(
        root,
        "mlx-lm",
        &[
            "--format",
            "mlx-lm",
            "--layers",
            "1",
            "--reference",
            reference.to_str().unwrap(),
        ],
    );
    sample(root, "gguf", &["--format", "gguf"]);
    let samples = [
        "audio8-v2",
        "audio8-v1",
        "gptq-q4",
        "nvfp4",
        "mlx-lm",
        "safetensors",
        "gguf",
    ]
    .iter()
    .map(|&name| {
        let dir = root.join(name);
        let target = if name == "gguf" {
            dir.join("model.gguf")
        } else {
            dir.clone()
        };
        Sample { name, dir, target }
    })
    .collect();
    (tmp, samples)
}

/// Copies a sample's folder (files only) into `to`, returning the path the
/// CLI is given there.
pub fn copy(s: &Sample, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(&s.dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    match s.target.file_name() {
        Some(f) if s.target != s.dir => to.join(f),
        _ => to.to_path_buf(),
    }
}

/// The regular files of a folder, sorted by name.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}
