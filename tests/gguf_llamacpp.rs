//! GGUF files written by llama.cpp itself.
//!
//! - The vocabulary-only files of llama.cpp's `models/` folder (made by its
//!   `convert_hf_to_gguf.py`), fetched pinned by
//!   scripts/fetch-llamacpp-vocab.sh: the header, metadata and tokenizer
//!   side: the file is valid, and every key, type, value and array count
//!   in the report equals gguf-py's reading.
//! - Files with quantized tensors written by llama.cpp's own quantizers and
//!   GGUF writer (scripts/make-llamacpp-gguf.sh builds ggml's base library
//!   from the same pinned sdist and runs scripts/llamacpp/write_gguf.c on
//!   real weights): valid; every decoded type's `export` equals gguf-py's
//!   `gguf.quants.dequantize` bit for bit; code counts equal a numpy
//!   unpacking from llama.cpp's block layouts; the other types say "not
//!   decoded"; and bundlescope's table of ggml types equals ggml's own.
//!   (tests/gguf_mlx.rs holds the MLX side of the same files.)

mod common;

use std::path::{Path, PathBuf};

use bundlescope::format::gguf::GgmlType;
use common::{audit_json, cli, require_or_skip, run_python};
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

/// A file written by scripts/make-llamacpp-gguf.sh, if it is there.
fn written(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".cache/llamacpp/written")
        .join(name);
    require_or_skip(
        "GGUF files written by llama.cpp (scripts/make-llamacpp-gguf.sh)",
        p.exists(),
    )
    .then_some(p)
}

/// `(shape, f32 bits)` of a little-endian float32 `.npy` file.
fn read_npy(path: &Path) -> (Vec<u64>, Vec<u32>) {
    let n = common::npy::read(path);
    let bits = n.bits();
    (n.shape, bits)
}

/// gguf-py's reading of `file` (tests/gguf/llamacpp_read.py) into `out`:
/// its index.json.
fn gguf_py_reading(file: &Path, out: &Path) -> Option<serde_json::Map<String, Value>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf/llamacpp_read.py");
    let run = run_python(&[
        script.to_str().unwrap(),
        file.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    let ok = run.as_ref().is_some_and(|o| o.status.success());
    if !ok && let Some(o) = &run {
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    }
    if !require_or_skip("gguf-py in .pydeps (scripts/install-mlx.sh)", ok) {
        return None;
    }
    let index: Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    Some(index.as_object().unwrap().clone())
}

/// bundlescope's table of ggml types (numbers, names, block sizes, bytes per
/// block) equals the one ggml itself was built with, as write_gguf printed
/// it from `ggml_get_type_traits`: every type today's llama.cpp knows is
/// known here, and nothing else.
#[test]
fn the_ggml_type_table_equals_llama_cpp_own() {
    let Some(tsv) = written("ggml-types.tsv") else {
        return;
    };
    let text = std::fs::read_to_string(tsv).unwrap();
    let mut numbers = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "{line}");
        let n: u32 = f[0].parse().unwrap();
        let ty = GgmlType::from_u32(n)
            .unwrap_or_else(|| panic!("ggml's type {n} ({}) is unknown here", f[1]));
        assert!(
            ty.name().eq_ignore_ascii_case(f[1]),
            "{n}: {} vs ggml's {}",
            ty.name(),
            f[1]
        );
        assert_eq!(ty.block_size().to_string(), f[2], "{}: block size", f[1]);
        assert_eq!(
            ty.type_size().to_string(),
            f[3],
            "{}: bytes per block",
            f[1]
        );
        numbers.push(n);
    }
    let ours: Vec<u32> = GgmlType::ALL.iter().map(|t| t.number()).collect();
    assert_eq!(ours, numbers, "the same numbers, in the same order");
}

/// The file with one tensor in every type llama.cpp quantizes: valid; every
/// decoded type exports exactly what gguf-py dequantizes; the code counts
/// of `hist` equal the numpy unpacking; the others say "not decoded" in
/// `hist` and `export`.
#[test]
fn llama_cpp_quantized_file_is_valid_and_export_equals_gguf_py() {
    let Some(file) = written("all-types.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let Some(index) = gguf_py_reading(&file, &tmp.path().join("gp")) else {
        return;
    };
    let run = audit_json(&file);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let report = run.json();
    assert_eq!(report["verdict"], "valid");
    assert!(
        report["findings"].as_array().unwrap().is_empty(),
        "{:#}",
        report["findings"]
    );
    let rows = report["tensors"].as_array().unwrap();
    assert_eq!(rows.len(), index.len());
    // Every type ggml_quantize_chunk makes but Q2_0 (its own file, below).
    let types: std::collections::BTreeSet<&str> = index
        .values()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    for ty in GgmlType::ALL {
        let made = !matches!(
            ty,
            GgmlType::Q8_1
                | GgmlType::Q8_K
                | GgmlType::Q2_0
                | GgmlType::I8
                | GgmlType::I16
                | GgmlType::I32
                | GgmlType::I64
                | GgmlType::F64
        );
        assert_eq!(types.contains(ty.name()), made, "{}", ty.name());
    }
    let (mut exported, mut counted) = (0, 0);
    for (name, entry) in &index {
        let ty = entry["type"].as_str().unwrap();
        let decoded = GgmlType::ALL.iter().any(|t| t.name() == ty && t.decoded());
        let row = rows.iter().find(|t| t["name"] == name.as_str()).unwrap();
        assert_eq!(row["precision"], ty, "{name}");
        assert_eq!(row["shape"], entry["shape"], "{name}");
        let out = tmp.path().join(format!("{name}.bs.npy"));
        let run = common::export_tensor(file.to_str().unwrap(), name, out.to_str().unwrap());
        let h = cli(&["hist", file.to_str().unwrap(), "--tensor", name, "--json"]);
        assert_eq!(h.code, 0, "{name}: {}", h.stderr);
        let h = h.json();
        if !decoded {
            assert_eq!(run.code, 2, "{name}");
            assert!(run.stderr.contains("not decoded"), "{name}: {}", run.stderr);
            assert_eq!(h["decoded"], false, "{name}: {h}");
            assert!(h["note"].as_str().unwrap().contains("not decoded"), "{h}");
            continue;
        }
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        assert_eq!(
            entry["dequantized"], true,
            "{name}: gguf-py dequantizes every type decoded here"
        );
        let (shape, ours) = read_npy(&out);
        let (want_shape, theirs) = read_npy(&tmp.path().join("gp").join(format!("{name}.npy")));
        assert_eq!(shape, want_shape, "{name}");
        assert_eq!(ours.len(), theirs.len(), "{name}");
        let diff = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        assert_eq!(diff, 0, "{name} ({ty}): {diff} values differ from gguf-py");
        exported += 1;
        if let Some(counts) = entry.get("counts") {
            assert_eq!(&h["codes"]["counts"], counts, "{name}: code counts");
            counted += 1;
        }
    }
    // F16, BF16, F32; Q4_0 … Q8_0; Q2_K … Q6_K; MXFP4, NVFP4.
    assert_eq!((exported, counted), (15, 12));
}

/// Q2_0 (in ggml.h, not yet in gguf-py) in a file of its own: listed with
/// its size checked, valid, not decoded.
#[test]
fn llama_cpp_q2_0_file_is_valid_and_q2_0_is_not_decoded() {
    let Some(file) = written("q2_0.gguf") else {
        return;
    };
    let run = audit_json(&file);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let r = run.json();
    assert_eq!(r["verdict"], "valid");
    let rows = r["tensors"].as_array().unwrap();
    let q2 = rows.iter().find(|t| t["precision"] == "Q2_0").unwrap();
    // 256 rows of 1536: 24 blocks of 64 a row, 18 bytes each.
    assert_eq!(q2["bytes"], 256 * 24 * 18);
    let out = tempfile::tempdir().unwrap();
    let run = common::export_tensor(
        file.to_str().unwrap(),
        q2["name"].as_str().unwrap(),
        out.path().join("x.npy").to_str().unwrap(),
    );
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("not decoded"), "{}", run.stderr);
}
