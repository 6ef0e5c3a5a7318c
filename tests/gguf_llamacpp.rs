//! GGUF files written by llama.cpp itself: the vocabulary-only files of
//! llama.cpp's `models/` folder (made by its `convert_hf_to_gguf.py`),
//! fetched pinned by scripts/fetch-llamacpp-vocab.sh. No small GGUF with
//! tensors written by llama.cpp ships on PyPI, so these test the header,
//! metadata and tokenizer side only: the file is valid, and every key,
//! type, value and array count in the report equals gguf-py's reading.

mod common;

use std::path::{Path, PathBuf};

use common::{audit_json, require_or_skip, run_python};
use serde_json::Value;

/// `(file name, SHA-256, tokens)` of the fetched files.
const FILES: [(&str, &str, u64); 2] = [
    (
        "ggml-vocab-qwen2.gguf",
        "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c",
        151_936,
    ),
    (
        "ggml-vocab-llama-spm.gguf",
        "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69",
        32_000,
    ),
];

fn cached(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".cache/llamacpp")
        .join(name);
    require_or_skip(
        "llama.cpp's vocabulary GGUF files (scripts/fetch-llamacpp-vocab.sh)",
        p.exists(),
    )
    .then_some(p)
}

fn gguf_py_kvs(file: &Path) -> Option<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf/kvs.py");
    let out = run_python(&[script.to_str().unwrap(), file.to_str().unwrap()]);
    let ok = out.as_ref().is_some_and(|o| o.status.success());
    if !ok && let Some(o) = &out {
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    }
    require_or_skip("gguf-py in .pydeps (scripts/install-mlx.sh)", ok)
        .then(|| serde_json::from_slice(&out.unwrap().stdout).unwrap())
}

#[test]
fn llama_cpp_vocabulary_files_are_valid_and_their_metadata_equals_gguf_py() {
    for (name, sha, tokens) in FILES {
        let Some(file) = cached(name) else { return };
        let Some(want) = gguf_py_kvs(&file) else {
            return;
        };
        let run = audit_json(&file);
        assert_eq!(run.code, 0, "{name}: {}", run.stdout);
        let r = run.json();
        assert_eq!(r["verdict"], "valid", "{name}");
        assert_eq!(r["files"][0]["sha256"], sha, "{name}");
        assert_eq!(
            r["tensors"].as_array().unwrap().len() as u64,
            want["tensors"]
        );
        assert_eq!(want["tensors"], 0, "{name}: vocabulary only");
        let got = r["provenance"]["gguf"]["kvs"].as_array().unwrap();
        let want = want["kvs"].as_array().unwrap();
        let keys = |kvs: &[Value]| kvs.iter().map(|kv| kv["key"].clone()).collect::<Vec<_>>();
        assert_eq!(keys(got), keys(want), "{name}: keys in file order");
        for (g, w) in got.iter().zip(want) {
            let key = &w["key"];
            let v = &g["value"];
            if let Some(count) = w.get("count") {
                // A long array is its type and count, never laid out.
                assert_eq!(v["type"], w["type"], "{name} {key}");
                assert_eq!(&v["count"], count, "{name} {key}");
            } else if w["type"] == "FLOAT32" || w["type"] == "FLOAT64" {
                let (a, b) = (v.as_f64().unwrap(), w["value"].as_f64().unwrap());
                assert!((a - b).abs() <= 1e-6 * b.abs(), "{name} {key}: {a} vs {b}");
            } else {
                assert_eq!(v, &w["value"], "{name} {key}");
            }
        }
        let tokens_kv = got
            .iter()
            .find(|kv| kv["key"] == "tokenizer.ggml.tokens")
            .unwrap();
        assert_eq!(
            tokens_kv["value"],
            serde_json::json!({"type": "ARRAY[STRING]", "count": tokens}),
            "{name}"
        );
    }
}
