//! `bundlescope sample --format mlx-lm`: checkpoints from bundlescope's own
//! encoder that MLX reads. Each audits valid; MLX loads every shard
//! (`mx.load`) and its `mx.dequantize` of the modules equals our `export`
//! bit for bit; with the MLX bridge, every spot check passes, against the
//! BF16 source the sample also writes.

mod common;

use std::fs;
use std::path::Path;

use common::mlxlm::py;
use common::*;

const TENSORS: &[&str] = &[
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.1.mlp.switch_mlp.down_proj.weight",
    "model.layers.1.mlp.switch_mlp.gate_proj.weight",
];

fn npy_data(path: &Path) -> Vec<u8> {
    let b = fs::read(path).unwrap();
    let n = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + n..].to_vec()
}

#[test]
fn samples_in_every_mode_are_valid_and_read_by_mlx_as_we_read_them() {
    let cases: &[&[&str]] = &[
        &[],
        &["--bits", "3", "--group-size", "32"],
        &["--bits", "8", "--group-size", "128"],
        &["--bits", "2", "--group-size", "128"],
        &["--mode", "mxfp4"],
        &["--mode", "nvfp4"],
        &["--mode", "mxfp8"],
        &["--mixed"],
    ];
    for args in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        let src = tmp.path().join("src");
        let mut a = vec![
            "sample",
            dir.to_str().unwrap(),
            "--format",
            "mlx-lm",
            "--reference",
            src.to_str().unwrap(),
        ];
        a.extend_from_slice(args);
        let r = cli(&a);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        let run = audit_json(&dir);
        let report = run.json();
        assert_eq!(run.code, 0, "{args:?}: {report:#}");
        assert_eq!(report["bundle"]["format"], "mlx-lm");
        assert_eq!(report["files"].as_array().unwrap().len(), 2);
        assert_eq!(audit_json(&src).code, 0, "{args:?}: source");
        for name in TENSORS {
            let ours = tmp.path().join("ours.npy");
            let theirs = tmp.path().join("mlx.npy");
            let r = common::export_tensor(dir.to_str().unwrap(), name, ours.to_str().unwrap());
            assert_eq!(r.code, 0, "{}", r.stderr);
            let Some(_) = py(&[
                "dequant",
                dir.to_str().unwrap(),
                name,
                theirs.to_str().unwrap(),
            ]) else {
                require_or_skip("Python with MLX", false);
                return;
            };
            assert!(
                npy_data(&ours) == npy_data(&theirs),
                "{args:?} {name}: mx.dequantize of our bytes differs from our export"
            );
        }
        #[cfg(feature = "mlx")]
        {
            let r = cli(&[
                "spotcheck",
                dir.to_str().unwrap(),
                "--reference",
                src.to_str().unwrap(),
                "--json",
            ]);
            assert_eq!(r.code, 0, "{args:?}: {}", r.stdout);
            let report = r.json();
            // 25 matmul checks (13 modules, 3 stacked ones of 4 experts)
            // and the embedding's gather check.
            assert_eq!(report["results"].as_array().unwrap().len(), 26);
            assert!(report["reference_only"].as_array().unwrap().is_empty());
        }
    }
}

#[test]
fn the_mixed_sample_carries_per_module_bits_and_bad_options_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ck");
    let r = cli(&[
        "sample",
        dir.to_str().unwrap(),
        "--format",
        "mlx-lm",
        "--mixed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let config: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("config.json")).unwrap()).unwrap();
    let q = &config["quantization"];
    assert_eq!(q["model.layers.0.self_attn.o_proj"]["bits"], 2);
    assert_eq!(q["model.layers.1.mlp.switch_mlp.down_proj"]["bits"], 5);
    let report = audit_json(&dir).json();
    let precision = |n: &str| {
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .map(|t| t["precision"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(
        precision("model.layers.0.self_attn.k_proj.weight"),
        "affine3"
    );
    assert_eq!(precision("model.layers.0.mlp.down_proj.weight"), "affine6");
    assert_eq!(
        precision("model.layers.0.self_attn.q_proj.weight"),
        "affine4"
    );
    for bad in [
        &["--bits", "7"][..],
        &["--mode", "fp16"],
        &["--mode", "mxfp4", "--bits", "8"],
        &["--group-size", "48"],
    ] {
        let out = tmp.path().join(format!("bad{}", bad.join("")));
        let mut a = vec!["sample", out.to_str().unwrap(), "--format", "mlx-lm"];
        a.extend_from_slice(bad);
        let r = cli(&a);
        assert_ne!(r.code, 0, "{bad:?} accepted");
    }
}

#[test]
fn each_format_names_the_file_it_hashes_as_its_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let sample = |name: &str, args: &[&str]| {
        let dir = tmp.path().join(name);
        let mut a = vec!["sample", dir.to_str().unwrap()];
        a.extend(args);
        assert_eq!(cli(&a).code, 0, "{name}");
        dir
    };
    let file_of = |dir: &Path| {
        bundlescope::format::open(dir)
            .unwrap()
            .provenance
            .manifest_file
    };
    let audio8 = sample("a8", &[]);
    assert_eq!(file_of(&audio8).as_deref(), Some("manifest.json"));
    let ck = sample("ck", &["--format", "mlx-lm", "--shards", "2"]);
    assert_eq!(file_of(&ck).as_deref(), Some("config.json"));
    // Without its config.json the checkpoint is plain safetensors: its
    // index is what it hashes.
    fs::remove_file(ck.join("config.json")).unwrap();
    assert_eq!(
        file_of(&ck).as_deref(),
        Some("model.safetensors.index.json")
    );
    // Shards alone: nothing.
    fs::remove_file(ck.join("model.safetensors.index.json")).unwrap();
    assert_eq!(file_of(&ck), None);
    let gguf = sample("gg", &["--format", "gguf"]);
    assert_eq!(file_of(&gguf), None);
}
