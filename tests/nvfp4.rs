//! mlx-nvfp4 artifacts: the sample is valid, every check fires on its own
//! corruption (naming shard, tensor and offset), nothing panics or hangs, and
//! our NVFP4 decoder equals MLX's bit for bit.

mod common;

use std::fs;
use std::path::Path;

use common::nvfp4::Artifact;
use common::*;
use serde_json::{Value, json};

const LAYER0_UP: &str = "model.decoder.layers.0.experts.gate_up_proj";
const LAYER1_DOWN: &str = "model.decoder.layers.1.experts.down_proj";

impl Artifact {
    fn audit(&self) -> Value {
        let run = audit_json(&self.dir);
        assert!(
            run.code == 0 || run.code == 1,
            "exit {}: {}",
            run.code,
            run.stderr
        );
        let report = run.json();
        assert_eq!(
            run.code == 0,
            report["verdict"] == "valid",
            "exit code and verdict disagree"
        );
        report
    }

    /// Audits and asserts the error checks are exactly `expected`.
    fn expect(&self, expected: &[&str]) -> Value {
        let report = self.audit();
        assert_eq!(error_checks(&report), expected, "{report:#}");
        report
    }
}

#[test]
fn the_sample_is_valid_and_indexes_every_tensor() {
    let a = Artifact::from_cli(&[]);
    let report = a.expect(&[]);
    let m = a.manifest();
    let names = m["weight_map"].as_object().unwrap().len();
    assert_eq!(report["tensors"].as_array().unwrap().len(), names);
    let shards = m["shards"].as_array().unwrap().len();
    assert!(shards >= 2, "several shards");
    assert_eq!(report["files"].as_array().unwrap().len(), shards);
    for f in report["files"].as_array().unwrap() {
        assert_eq!(f["ok"], true, "{f}");
    }
    // Experts are a dimension; resident bytes are the stored bytes.
    let w = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == format!("{LAYER0_UP}.weight"))
        .unwrap();
    assert_eq!(w["precision"], "nvfp4");
    assert_eq!(w["shape"], json!([8, 128, 128]));
    assert_eq!(w["resident_bytes"], json!(8 * 128 * 128 / 2));
}

#[test]
fn wrong_layout_is_refused_with_the_seed_message() {
    for layout in [json!("absolute-scale"), Value::Null] {
        let a = Artifact::from_cli(&[]);
        a.edit(|m| {
            if layout.is_null() {
                m["quantization"].as_object_mut().unwrap().remove("layout");
            } else {
                m["quantization"]["layout"] = layout.clone();
            }
        });
        let r = a.expect(&["nvfp4.layout"]);
        let f = findings_of(&r, "nvfp4.layout");
        assert!(
            f[0]["message"]
                .as_str()
                .unwrap()
                .contains("~5% off and must be regenerated"),
            "{f:?}"
        );
    }
}

#[test]
fn missing_shard() {
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&format!("{LAYER1_DOWN}.weight"));
    fs::remove_file(&shard).unwrap();
    let r = a.expect(&["payload.file"]);
    let f = findings_of(&r, "payload.file");
    assert!(f[0]["message"].as_str().unwrap().contains("missing"));
}

#[test]
fn weight_map_pointing_at_the_wrong_shard() {
    let a = Artifact::from_cli(&[]);
    let name = format!("{LAYER1_DOWN}.scales");
    let other = a.manifest()["shards"][0]["file"].clone();
    assert_ne!(a.manifest()["weight_map"][&name], other);
    a.edit(|m| m["weight_map"][&name] = other);
    let r = a.expect(&["nvfp4.weight_map"]);
    let f = findings_of(&r, "nvfp4.weight_map");
    assert_eq!(f[0]["tensor"], name.as_str());
    // A tensor missing from weight_map, and one naming no listed shard.
    let a = Artifact::from_cli(&[]);
    a.edit(|m| {
        m["weight_map"]
            .as_object_mut()
            .unwrap()
            .remove("model.norm.weight");
        m["weight_map"]["ghost.weight"] = json!("model-00009-of-00009.safetensors");
    });
    let r = a.expect(&["nvfp4.weight_map"]);
    let tensors: Vec<&str> = findings_of(&r, "nvfp4.weight_map")
        .iter()
        .map(|f| f["tensor"].as_str().unwrap())
        .collect();
    assert!(tensors.contains(&"model.norm.weight") && tensors.contains(&"ghost.weight"));
}

#[test]
fn truncated_shard() {
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&format!("{LAYER1_DOWN}.weight"));
    let bytes = fs::read(&shard).unwrap();
    fs::write(&shard, &bytes[..bytes.len() - 100]).unwrap();
    a.rehash();
    let r = a.expect(&["shard.offsets"]);
    let f = findings_of(&r, "shard.offsets");
    assert!(f[0]["field"].as_str().unwrap().ends_with(".safetensors"));
    assert!(f[0]["offset"].as_u64().is_some());
}

#[test]
fn header_length_2_pow_62() {
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&format!("{LAYER1_DOWN}.weight"));
    let mut bytes = fs::read(&shard).unwrap();
    bytes[..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    fs::write(&shard, bytes).unwrap();
    a.rehash();
    let r = a.expect(&["shard.header"]);
    assert_eq!(findings_of(&r, "shard.header")[0]["offset"], 0);
}

#[test]
fn overlapping_offsets() {
    let a = Artifact::from_cli(&[]);
    let name = format!("{LAYER1_DOWN}.global_scale");
    let shard = a.shard_of(&name);
    a.edit_header(&shard, |h| {
        let o = h[&name]["data_offsets"].clone();
        let (b, e) = (o[0].as_u64().unwrap(), o[1].as_u64().unwrap());
        h[&name]["data_offsets"] = json!([b - 8, e - 8]);
    });
    let r = a.expect(&["shard.offsets"]);
    let f = findings_of(&r, "shard.offsets");
    assert!(
        f.iter()
            .any(|f| f["message"].as_str().unwrap().contains("overlaps")),
        "{f:?}"
    );
}

#[test]
fn scales_of_the_wrong_dtype_or_shape() {
    let a = Artifact::from_cli(&[]);
    let name = format!("{LAYER1_DOWN}.scales");
    let shard = a.shard_of(&name);
    a.edit_header(&shard, |h| {
        // Same bytes, read as I8: the size still matches, the dtype does not.
        h[&name]["dtype"] = json!("I8");
    });
    let r = a.expect(&["nvfp4.experts"]);
    assert_eq!(findings_of(&r, "nvfp4.experts")[0]["tensor"], name.as_str());

    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&name);
    a.edit_header(&shard, |h| {
        let s = h[&name]["shape"].clone();
        let (e, o, g) = (
            s[0].as_u64().unwrap(),
            s[1].as_u64().unwrap(),
            s[2].as_u64().unwrap(),
        );
        h[&name]["shape"] = json!([e, o * 2, g / 2]);
    });
    let r = a.expect(&["nvfp4.experts"]);
    assert_eq!(findings_of(&r, "nvfp4.experts")[0]["tensor"], name.as_str());
}

#[test]
fn global_scale_nan_zero_or_wrong_length() {
    let name = format!("{LAYER1_DOWN}.global_scale");
    for (bad, what) in [(f32::NAN, "NaN"), (0.0, "0")] {
        let a = Artifact::from_cli(&[]);
        let (start, _) = a.range(&name);
        a.patch(&name, |b| b[12..16].copy_from_slice(&bad.to_le_bytes()));
        let r = a.expect(&["nvfp4.global_scale"]);
        let f = findings_of(&r, "nvfp4.global_scale");
        assert_eq!(f[0]["tensor"], name.as_str());
        assert_eq!(f[0]["offset"].as_u64().unwrap() as usize, start + 12);
        assert!(
            f[0]["message"].as_str().unwrap().contains("expert 3"),
            "{what}: {f:?}"
        );
    }
    // Wrong length: one expert short in the header (the data no longer covered).
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&name);
    a.edit_header(&shard, |h| {
        h[&name]["shape"] = json!([7]);
        let o = h[&name]["data_offsets"].clone();
        h[&name]["data_offsets"] = json!([o[0], o[1].as_u64().unwrap() - 4]);
    });
    let r = a.expect(&["shard.offsets"]);
    let f = findings_of(&r, "shard.offsets");
    assert!(
        f[0]["offset"].as_u64().is_some() && f[0]["field"].is_string(),
        "{f:?}"
    );
    // Wrong length with a consistent header: 8 F32 values read as 4 F64.
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&name);
    a.edit_header(&shard, |h| {
        h[&name]["shape"] = json!([4]);
        h[&name]["dtype"] = json!("F64");
    });
    let r = a.expect(&["nvfp4.experts"]);
    let msgs: Vec<&str> = findings_of(&r, "nvfp4.experts")
        .iter()
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert!(msgs.iter().any(|m| m.contains("expected [8]")), "{msgs:?}");
}

#[test]
fn nan_e4m3_scale_byte() {
    for nan in [0x7fu8, 0xff] {
        let a = Artifact::from_cli(&[]);
        let name = format!("{LAYER0_UP}.scales");
        let (start, end) = a.range(&name);
        let per_expert = (end - start) / 8;
        a.patch(&name, |b| b[2 * per_expert + 5] = nan);
        let r = a.expect(&["nvfp4.scales"]);
        let f = findings_of(&r, "nvfp4.scales");
        assert_eq!(f[0]["tensor"], name.as_str());
        assert_eq!(
            f[0]["offset"].as_u64().unwrap() as usize,
            start + 2 * per_expert + 5
        );
        assert!(f[0]["message"].as_str().unwrap().contains("expert 2"));
    }
}

#[test]
fn non_finite_bf16() {
    let a = Artifact::from_cli(&[]);
    a.patch("model.norm.weight", |b| {
        b[6..8].copy_from_slice(&0x7fc0u16.to_le_bytes())
    });
    let r = a.expect(&["dense.finite"]);
    assert_eq!(
        findings_of(&r, "dense.finite")[0]["tensor"],
        "model.norm.weight"
    );
}

#[test]
fn shard_path_with_dot_dot_or_a_symlink() {
    let a = Artifact::from_cli(&[]);
    a.edit(|m| m["shards"][1]["file"] = json!("../outside.safetensors"));
    let r = a.audit();
    let ids = error_checks(&r);
    assert!(ids.contains(&"shard.name".to_string()), "{ids:?}");
    assert_eq!(r["verdict"], "invalid");

    #[cfg(unix)]
    {
        let a = Artifact::from_cli(&[]);
        let m = a.manifest();
        let file = m["shards"][1]["file"].as_str().unwrap();
        let real = a.dir.parent().unwrap().join("elsewhere.safetensors");
        fs::rename(a.dir.join(file), &real).unwrap();
        std::os::unix::fs::symlink(&real, a.dir.join(file)).unwrap();
        let r = a.audit();
        let f = findings_of(&r, "payload.file");
        assert_eq!(f[0]["severity"], "warning", "{f:?}");
        assert!(f[0]["message"].as_str().unwrap().contains("symbolic link"));
    }
}

#[test]
fn shard_hash_mismatch() {
    let a = Artifact::from_cli(&[]);
    let name = format!("{LAYER1_DOWN}.weight");
    let path = a.shard_of(&name);
    let (start, _) = a.range(&name);
    let mut bytes = fs::read(&path).unwrap();
    bytes[start] ^= 0x11; // every nibble is a valid code: only the hash can tell
    fs::write(&path, bytes).unwrap();
    let r = a.expect(&["payload.sha256"]);
    assert!(
        findings_of(&r, "payload.sha256")[0]["field"]
            .as_str()
            .unwrap()
            .ends_with(".safetensors")
    );
}

#[test]
fn the_audit_never_writes_to_the_artifact() {
    let a = Artifact::from_cli(&[]);
    let snapshot = |dir: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&a.dir);
    a.expect(&[]);
    assert!(cli(&["list", a.dir.to_str().unwrap()]).code == 0);
    assert_eq!(before, snapshot(&a.dir));
}

#[test]
fn hist_counts_codes_over_all_experts_or_one() {
    let a = Artifact::from_cli(&[]);
    let w = format!("{LAYER0_UP}.weight");
    let dir = a.dir.to_str().unwrap();
    let all = cli(&["hist", dir, "--tensor", &w, "--json"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    let all = all.json();
    let total: u64 = all["codes"]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(total, 8 * 128 * 128);
    let mut sum = vec![0u64; 16];
    for e in 0..8 {
        let one = cli(&[
            "hist",
            dir,
            "--tensor",
            &w,
            "--expert",
            &e.to_string(),
            "--json",
        ])
        .json();
        for (s, c) in sum
            .iter_mut()
            .zip(one["codes"]["counts"].as_array().unwrap())
        {
            *s += c.as_u64().unwrap();
        }
    }
    let all_counts: Vec<u64> = all["codes"]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(sum, all_counts);
    let bad = cli(&["hist", dir, "--tensor", &w, "--expert", "8"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("out of range"));
}

/// Our decoder (through `export`) equals MLX's dequantize(mode="nvfp4",
/// global_scale=...) bit for bit, for every stacked weight of the sample.
#[test]
fn export_equals_mlx_dequantize_exactly() {
    let py = run_python(&["-c", "import mlx.core, numpy"]);
    if !require_or_skip("Python with mlx", py.is_some_and(|o| o.status.success())) {
        return;
    }
    let a = Artifact::from_cli(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut pairs = Vec::new();
    let m = a.manifest();
    for name in m["weight_map"].as_object().unwrap().keys() {
        if !name.ends_with(".experts.gate_up_proj.weight")
            && !name.ends_with(".experts.down_proj.weight")
        {
            continue;
        }
        let out = tmp.path().join(format!("{name}.npy"));
        let run = common::export_tensor(a.dir.to_str().unwrap(), name, out.to_str().unwrap());
        assert_eq!(run.code, 0, "{}", run.stderr);
        pairs.push(format!("{name}={}", out.display()));
    }
    assert_eq!(pairs.len(), 8);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mlx/nvfp4_mlx.py");
    let mut args = vec![script.to_str().unwrap(), "compare", a.dir.to_str().unwrap()];
    args.extend(pairs.iter().map(String::as_str));
    let out = run_python(&args).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, mismatches) in result.as_object().unwrap() {
        assert_eq!(mismatches, &json!(0), "{name}");
    }
    // One expert alone is that expert's slice.
    let w = format!("{LAYER0_UP}.weight");
    let one = tmp.path().join("one.npy");
    let run = cli(&[
        "export",
        a.dir.to_str().unwrap(),
        "--tensor",
        &w,
        "--expert",
        "3",
        "--out",
        one.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let whole = fs::read(tmp.path().join(format!("{w}.npy"))).unwrap();
    let part = fs::read(&one).unwrap();
    let per = 128 * 128 * 4;
    assert_eq!(
        &part[part.len() - per..],
        &whole[whole.len() - 5 * per..whole.len() - 4 * per]
    );
}

/// MLX's own quantize(mode="nvfp4") output, written as an artifact, audits
/// valid and reads back through our index to MLX's own dequantisation.
#[test]
fn mlx_quantized_weights_read_back_through_our_index() {
    let py = run_python(&["-c", "import mlx.core, numpy"]);
    if !require_or_skip("Python with mlx", py.is_some_and(|o| o.status.success())) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("mlx-art");
    let reference = tmp.path().join("ref.npy");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mlx/nvfp4_mlx.py");
    let out = run_python(&[
        script.to_str().unwrap(),
        "make",
        art.to_str().unwrap(),
        reference.to_str().unwrap(),
    ])
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = audit_json(&art);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let ours = tmp.path().join("ours.npy");
    let run = common::export_tensor(
        art.to_str().unwrap(),
        "model.decoder.layers.0.experts.down_proj.weight",
        ours.to_str().unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (a, b) = (fs::read(&ours).unwrap(), fs::read(&reference).unwrap());
    let n = 4 * 32 * 64 * 4;
    assert!(a.len() >= n && b.len() >= n);
    assert_eq!(a[a.len() - n..], b[b.len() - n..]);
}

#[test]
fn hostile_manifests_never_panic() {
    for m in [
        json!({"quantization": {"layout": "stacked-global-scale"}}),
        json!({"quantization": 5, "shards": "x", "weight_map": []}),
        json!({"quantization": {"mode": "nvfp4", "bits": 4, "group_size": 16, "layout": "stacked-global-scale"},
               "shards": [{"file": "/etc/passwd"}, {"file": "a"}, {"file": "a"}, {}], "weight_map": {"x": 3}}),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("manifest.json"), m.to_string()).unwrap();
        fs::write(tmp.path().join("a"), b"garbage").unwrap();
        let run = audit_json(tmp.path());
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert_eq!(run.json()["verdict"], "invalid");
    }
}

#[test]
fn manifest_shards_or_weight_map_of_the_wrong_type() {
    let a = Artifact::from_cli(&[]);
    a.edit(|m| m["shards"] = json!("model-00001-of-00004.safetensors"));
    let r = a.audit();
    assert!(
        error_checks(&r).contains(&"nvfp4.manifest".to_string()),
        "{r:#}"
    );
    assert_eq!(findings_of(&r, "nvfp4.manifest")[0]["field"], "shards");

    let a = Artifact::from_cli(&[]);
    a.edit(|m| m["weight_map"] = json!(["not", "an", "object"]));
    let r = a.audit();
    assert!(
        error_checks(&r).contains(&"nvfp4.manifest".to_string()),
        "{r:#}"
    );
    assert_eq!(r["verdict"], "invalid");
}

#[test]
fn a_non_bf16_tensor_outside_the_experts_is_reported() {
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of("model.norm.weight");
    a.edit_header(&shard, |h| h["model.norm.weight"]["dtype"] = json!("F16"));
    let r = a.audit();
    let f = findings_of(&r, "nvfp4.dtype");
    assert_eq!(f.len(), 1, "{r:#}");
    assert_eq!(f[0]["severity"], "warning");
    assert_eq!(f[0]["tensor"], "model.norm.weight");
    assert!(f[0]["message"].as_str().unwrap().contains("F16"));
}

#[cfg(unix)]
#[path = "nvfp4/fifo.rs"]
mod fifo;
