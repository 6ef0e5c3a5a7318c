//! GGUF files: files written by gguf-py's GGUFWriter audited, exported and
//! compared bit for bit with gguf-py's own `gguf.quants.dequantize`; code
//! counts against an independent numpy unpacking; checksums, split parts
//! and the metadata in the report.

mod common;

use std::path::{Path, PathBuf};

use bundlescope::format::gguf::GgmlType;
use bundlescope::sample::gguf as sg;
use common::{audit_json, cli, error_checks, findings_of, require_or_skip, run_python};
use serde_json::Value;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf/gguf_py.py")
}

/// `(shape, f32 bits)` of a little-endian float32 `.npy` file.
fn read_npy(path: &Path) -> (Vec<u64>, Vec<u32>) {
    let n = common::npy::read(path);
    let bits = n.bits();
    (n.shape, bits)
}

fn gguf_py_files() -> Option<(tempfile::TempDir, PathBuf)> {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("gp");
    let run = run_python(&[script().to_str().unwrap(), out.to_str().unwrap()]);
    let ok = run.as_ref().is_some_and(|o| o.status.success());
    if !ok && let Some(o) = &run {
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    }
    require_or_skip("gguf-py in .pydeps (scripts/install-mlx.sh)", ok).then_some((tmp, out))
}

#[test]
fn gguf_py_files_audit_valid_and_export_equals_gguf_py_dequantize() {
    let Some((tmp, dir)) = gguf_py_files() else {
        return;
    };
    let file = dir.join("model.gguf");
    let run = audit_json(&file);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let report = run.json();
    assert_eq!(report["verdict"], "valid");
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let index = index.as_object().unwrap();
    // Every type gguf-py quantizes or dequantizes that bundlescope decodes.
    for ty in [
        "F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
        "Q8_0", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "NVFP4",
    ] {
        assert!(
            index.values().any(|e| e["type"] == ty),
            "the gguf-py file has no {ty} tensor"
        );
    }
    // Each report row carries ggml's `ne` (gguf-py's shape reversed) beside
    // the PyTorch-order shape.
    let rows = report["tensors"].as_array().unwrap();
    for (name, entry) in index {
        let row = rows.iter().find(|t| t["name"] == name.as_str()).unwrap();
        let mut ne = entry["shape"].as_array().unwrap().clone();
        assert_eq!(row["shape"], Value::from(ne.clone()), "{name}");
        ne.reverse();
        assert_eq!(row["ne"], Value::from(ne), "{name}: ne in the report");
    }
    for (name, entry) in index {
        let out = tmp.path().join(format!("{name}.bs.npy"));
        let run = common::export_tensor(file.to_str().unwrap(), name, out.to_str().unwrap());
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let (shape, ours) = read_npy(&out);
        let (want_shape, theirs) = read_npy(&dir.join(format!("{name}.npy")));
        assert_eq!(shape, want_shape, "{name}");
        let want: Vec<u64> = entry["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(shape, want, "{name}: PyTorch order");
        let diff = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        assert_eq!(ours.len(), theirs.len(), "{name}");
        assert_eq!(
            diff, 0,
            "{name} ({}): {diff} values differ from gguf-py",
            entry["type"]
        );
        if let Some(counts) = entry.get("counts") {
            let run = cli(&["hist", file.to_str().unwrap(), "--tensor", name, "--json"]);
            assert_eq!(run.code, 0, "{}", run.stderr);
            let h = run.json();
            assert_eq!(&h["codes"]["counts"], counts, "{name}: code counts");
            assert_eq!(h["ne"], serde_json::json!([want[1], want[0]]), "{name}");
        }
    }
    // The metadata travels in the report; long arrays as type and count.
    let kvs = report["provenance"]["gguf"]["kvs"].as_array().unwrap();
    let get = |k: &str| kvs.iter().find(|kv| kv["key"] == k).map(|kv| &kv["value"]);
    assert_eq!(get("general.architecture"), Some(&Value::from("llama")));
    assert_eq!(
        get("tokenizer.ggml.tokens"),
        Some(&serde_json::json!({"type": "ARRAY[STRING]", "count": 300}))
    );
}

/// Q8_K: gguf-py has no dequantizer for it; decoded here from its layout
/// (F32 d, 256 int8, 16 int16 sums) and compared with `export`.
#[test]
fn the_lineage_names_the_base_models_gguf_py_wrote() {
    let Some((_tmp, dir)) = gguf_py_files() else {
        return;
    };
    // gguf-py's reading of the source keys.
    let source: Value =
        serde_json::from_slice(&std::fs::read(dir.join("source.json")).unwrap()).unwrap();
    let key = |k: &str| {
        source[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}: {source:#}"))
    };
    let first = format!(
        "{}/{} {}",
        key("general.base_model.0.organization"),
        key("general.base_model.0.name"),
        key("general.base_model.0.version")
    );
    let second = key("general.base_model.1.name");
    let run = cli(&[
        "audit",
        dir.join("model.gguf").to_str().unwrap(),
        "--markdown",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let md = &run.stdout;
    assert!(
        md.contains(&format!("base model: {first}, {second}")),
        "{md}"
    );
    for url in [
        key("general.base_model.0.repo_url"),
        key("general.source.url"),
    ] {
        assert!(md.contains(url), "{url}: {md}");
    }
    assert!(md.contains("**source**: base model:"), "{md}");
}

#[test]
fn q8_k_export_equals_a_decoder_written_here() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("m")).unwrap();
    let file = tmp.path().join("m/q8k.gguf");
    let mut rng = bundlescope::sample::Rng::new(5);
    let data = sg::random_blocks(GgmlType::Q8_K, 6, &mut rng);
    let t = sg::Tensor {
        name: "w".into(),
        ty: GgmlType::Q8_K,
        ne: vec![512, 3],
        data: data.clone(),
    };
    std::fs::write(&file, sg::encode(&sg::sample_kvs(3), &[t], 32)).unwrap();
    let out = tmp.path().join("w.npy");
    let run = common::export_tensor(file.to_str().unwrap(), "w", out.to_str().unwrap());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (shape, bits) = read_npy(&out);
    assert_eq!(shape, vec![3, 512]);
    let want: Vec<u32> = data
        .chunks_exact(292)
        .flat_map(|b| {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            b[4..260]
                .iter()
                .map(move |&q| (d * f32::from(q as i8)).to_bits())
        })
        .collect();
    assert_eq!(bits, want);
}

fn sample(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("model.gguf");
    sg::write(&file, 11).unwrap();
    file
}

fn sha(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    common::hex(&Sha256::digest(std::fs::read(path).unwrap()))
}

#[test]
fn the_sample_is_valid_and_a_folder_opens_its_one_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let file = sample(&tmp.path().join("m"));
    let run = audit_json(&tmp.path().join("m"));
    assert_eq!(run.code, 0, "{}", run.stdout);
    let r = run.json();
    assert_eq!(r["bundle"]["format"], "gguf");
    assert_eq!(r["files"][0]["sha256"], sha(&file));
    // Every decoded quantised tensor has codes and quality in the report.
    let run = cli(&[
        "hist",
        file.to_str().unwrap(),
        "--tensor",
        "token_embd.weight",
        "--json",
    ]);
    let h = run.json();
    assert_eq!(h["gguf"]["ggml_type"], "Q4_K");
    assert_eq!(h["codes"]["counts"].as_array().unwrap().len(), 16);
    assert_eq!(
        h["gguf"]["sub_scales"]["counts"].as_array().unwrap().len(),
        64
    );
    assert_eq!(
        h["gguf"]["sub_mins"]["counts"].as_array().unwrap().len(),
        64
    );
    assert_eq!(h["shape"], serde_json::json!([32, 256]));
    assert_eq!(h["ne"], serde_json::json!([256, 32]));
    // The F16 block minima (Q4_1's m, Q2_K's dmin): one per block, in
    // `hist` beside the d distribution.
    for (name, block) in [("blk.0.attn_k.weight", 32u64), ("blk.0.ffn_up.weight", 256)] {
        let row = r["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        let elements: u64 = row["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .product();
        let run = cli(&["hist", file.to_str().unwrap(), "--tensor", name]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let want = format!("block mins |m|/|dmin| (F16, {})", elements / block);
        assert!(run.stdout.contains(&want), "{name}: {want}\n{}", run.stdout);
    }
}

#[test]
fn checksums_beside_the_file_and_expect_are_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let file = sample(&dir);
    let good = sha(&file);
    std::fs::write(dir.join("SHA256SUMS"), format!("{good}  model.gguf\n")).unwrap();
    let r = audit_json(&file).json();
    assert_eq!(r["files"][0]["ok"], true, "{:#}", r["files"]);
    // A hub's list names the repository's other variants too: those not
    // downloaded are said (info), not errors; this file is still checked.
    let other = "ab".repeat(32);
    std::fs::write(
        dir.join("SHA256SUMS"),
        format!("{other}  model-Q8_0.gguf\n{good}  model.gguf\n"),
    )
    .unwrap();
    let run = audit_json(&file);
    let r = run.json();
    assert_eq!(run.code, 0, "{r:#}");
    assert_eq!(r["files"][0]["ok"], true, "{:#}", r["files"]);
    let said = findings_of(&r, "checksums.file");
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["severity"], "info");
    assert!(
        said[0]["message"]
            .as_str()
            .unwrap()
            .contains("model-Q8_0.gguf")
    );
    // A line that is not a hash is an error, not skipped.
    std::fs::write(
        dir.join("SHA256SUMS"),
        format!("{good}  model.gguf\nsha256:{good}  model.gguf\n"),
    )
    .unwrap();
    let run = audit_json(&file);
    assert_eq!(run.code, 1);
    assert_eq!(error_checks(&run.json()), ["checksums.file"]);
    let bad = format!("{}0", &good[..63]);
    std::fs::write(dir.join("SHA256SUMS"), format!("{bad} *model.gguf\n")).unwrap();
    let run = audit_json(&file);
    assert_eq!(run.code, 1);
    assert_eq!(error_checks(&run.json()), ["payload.sha256"]);
    std::fs::remove_file(dir.join("SHA256SUMS")).unwrap();
    std::fs::write(dir.join("model.gguf.sha256"), format!("{bad}\n")).unwrap();
    assert_eq!(error_checks(&audit_json(&file).json()), ["payload.sha256"]);
    std::fs::remove_file(dir.join("model.gguf.sha256")).unwrap();
    let expect = format!("model.gguf={good}");
    let run = cli(&[
        "audit",
        file.to_str().unwrap(),
        "--json",
        "--expect",
        &expect,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["files"][0]["ok"], true);
    let expect = format!("model.gguf={bad}");
    let run = cli(&[
        "audit",
        file.to_str().unwrap(),
        "--json",
        "--expect",
        &expect,
    ]);
    assert_eq!(run.code, 1);
    assert!(!findings_of(&run.json(), "payload.sha256").is_empty());
}

#[test]
fn split_parts_open_as_one_model() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("split");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = bundlescope::sample::Rng::new(2);
    for (k, name) in [(1, "a.weight"), (2, "b.weight")] {
        let t = sg::Tensor {
            name: name.into(),
            ty: GgmlType::Q8_0,
            ne: vec![64, 4],
            data: sg::random_blocks(GgmlType::Q8_0, 8, &mut rng),
        };
        let path = dir.join(format!("m-{k:05}-of-00002.gguf"));
        std::fs::write(path, sg::encode(&sg::sample_kvs(2), &[t], 32)).unwrap();
    }
    let run = audit_json(&dir.join("m-00001-of-00002.gguf"));
    assert_eq!(run.code, 0, "{}", run.stdout);
    let r = run.json();
    assert_eq!(r["files"].as_array().unwrap().len(), 2);
    let run = cli(&["list", dir.to_str().unwrap()]);
    assert!(run.stdout.contains("a.weight") && run.stdout.contains("b.weight"));
    std::fs::remove_file(dir.join("m-00002-of-00002.gguf")).unwrap();
    let run = audit_json(&dir.join("m-00001-of-00002.gguf"));
    assert_eq!(error_checks(&run.json()), ["payload.file"]);
}

/// Random corruptions of the header and the data never panic, hang or
/// pass silently as the same file: every mutated copy opens or is refused,
/// and an opened one audits to a verdict.
#[test]
fn mutated_files_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("model.gguf");
    let mut rng = bundlescope::sample::Rng::new(99);
    let mut t = sg::Tensor {
        name: "w".into(),
        ty: GgmlType::Q4_K,
        ne: vec![256, 2],
        data: Vec::new(),
    };
    t.data = sg::random_blocks(GgmlType::Q4_K, 2, &mut rng);
    let good = sg::encode(&sg::sample_kvs(20), &[t], 32);
    let header_end = good.len() - 2 * 144;
    for round in 0..300 {
        let mut bytes = good.clone();
        let flips = 1 + rng.next_u64() % 4;
        for _ in 0..flips {
            // Mostly the header, where the lengths and counts are.
            let at = if round % 4 == 0 {
                (rng.next_u64() as usize) % bytes.len()
            } else {
                (rng.next_u64() as usize) % header_end
            };
            bytes[at] = match rng.next_u64() % 3 {
                0 => 0xff,
                1 => 0,
                _ => rng.next_u64() as u8,
            };
        }
        if round % 7 == 0 {
            let cut = (rng.next_u64() as usize) % bytes.len();
            bytes.truncate(cut);
        }
        std::fs::write(&file, &bytes).unwrap();
        let events = std::sync::Mutex::new(Vec::new());
        bundlescope::audit::run(
            &file,
            &bundlescope::audit::Options::default(),
            &bundlescope::audit::CancelToken::default(),
            &|e| events.lock().unwrap().push(e),
        );
        let events = events.into_inner().unwrap();
        assert!(
            matches!(events.last(), Some(bundlescope::audit::Event::Finished(_))),
            "round {round}: the audit did not finish"
        );
    }
}
