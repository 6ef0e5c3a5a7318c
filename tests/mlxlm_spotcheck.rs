//! `bundlescope spotcheck` on MLX-LM checkpoints written by MLX itself
//! (tests/mlx_lm_checkpoint.py): MLX's `quantized_matmul` with the stored
//! scales, biases and mode against the decoder's f64 product, every mode
//! and affine width, one check per expert of a stacked layer; and the
//! checkpoint against its BF16 source, whose weight errors must equal
//! numpy's (from the source and `mx.dequantize`).
#![cfg(feature = "mlx")]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::mlxlm::{Ckpt, py};
use common::*;
use serde_json::Value;

/// Checks of the test model: 13 unstacked modules + 3 stacked (4 experts),
/// and the embedding's gather check.
const CHECKS: usize = 13 + 3 * 4 + 1;
const EMBED: &str = "model.embed_tokens.weight";
const STACKED: &str = "model.layers.1.mlp.switch_mlp.down_proj.weight";

fn spotcheck(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["spotcheck", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let run = cli(&args);
    assert!(
        run.code == 0 || run.code == 1,
        "spotcheck could not run ({}): {}",
        run.code,
        run.stderr
    );
    (run.code, run.json())
}

fn results(report: &Value) -> &Vec<Value> {
    report["results"].as_array().unwrap()
}

#[test]
fn mlx_quantized_matmul_agrees_with_the_decoder_in_every_mode_and_width() {
    let modes: &[(&[&str], &[&str])] = &[
        (&["--mode", "affine"], &["affine4"]),
        (
            &["--mode", "affine", "--bits", "3", "--group", "32"],
            &["affine3"],
        ),
        (
            &["--mode", "affine", "--bits", "8", "--group", "128"],
            &["affine8"],
        ),
        (&["--mode", "mxfp4"], &["mxfp4"]),
        (&["--mode", "nvfp4"], &["nvfp4"]),
        (&["--mode", "mxfp8"], &["mxfp8"]),
        (
            &["--mixed"],
            &[
                "affine2", "affine3", "affine4", "affine5", "affine6", "affine8",
            ],
        ),
    ];
    for (args, precisions) in modes {
        let Some(k) = Ckpt::mlx(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        for dtype in ["f32", "bf16"] {
            let (code, report) = spotcheck(&k.dir, &["--dtype", dtype]);
            assert_eq!(code, 0, "{args:?} {dtype}: {report:#}");
            let rs = results(&report);
            assert_eq!(rs.len(), CHECKS, "{args:?}: {report:#}");
            assert!(report["skipped"].as_array().unwrap().is_empty());
            let mut seen: Vec<&str> = rs
                .iter()
                .map(|r| r["precision"].as_str().unwrap())
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(&seen, precisions, "{args:?}");
            // The embedding's rows looked up through MLX's dequantize (in
            // the loader's dtype) equal the decoder's bit for bit.
            let gathers: Vec<&Value> = rs.iter().filter(|r| r["kind"] == "embedding").collect();
            assert_eq!(gathers.len(), 1, "{args:?}");
            let g = gathers[0];
            assert_eq!(g["tensor"], EMBED);
            assert_eq!(g["mlx_op"], "dequantize");
            assert_eq!(g["pass"], true, "{g}");
            assert_eq!(g["rel_err"].as_f64(), Some(0.0), "{g}");
            assert_eq!(g["rows_checked"], 64, "{g}");
            for r in rs.iter().filter(|r| r["kind"] == "matmul") {
                assert_eq!(r["mlx_op"], "quantized_matmul");
                assert_eq!(r["pass"], true, "{r}");
                let bound = if dtype == "f32" { 1e-5 } else { 0.1 };
                assert!(r["rel_err"].as_f64().unwrap() <= bound, "{r}");
                assert!(r["cosine"].as_f64().unwrap() > 0.999, "{r}");
            }
            // One check per expert of a stacked layer, every row of each.
            let mut experts: Vec<u64> = rs
                .iter()
                .filter(|r| r["tensor"] == STACKED)
                .map(|r| r["expert"].as_u64().unwrap())
                .collect();
            experts.sort_unstable();
            assert_eq!(experts, [0, 1, 2, 3]);
            let r = rs.iter().find(|r| r["tensor"] == STACKED).unwrap();
            assert_eq!(r["shape"], serde_json::json!([128, 256]));
            assert_eq!(r["rows_checked"], 128);
        }
    }
}

#[test]
fn one_tensor_one_expert_and_a_row_bound() {
    let Some(k) = Ckpt::mlx(&["--mixed"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let (code, report) = spotcheck(&k.dir, &["--tensor", STACKED, "--expert", "2"]);
    assert_eq!(code, 0, "{report:#}");
    let rs = results(&report);
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0]["expert"], 2);
    assert_eq!(rs[0]["precision"], "affine5");
    let (code, report) = spotcheck(&k.dir, &["--max-rows", "40"]);
    assert_eq!(code, 0, "{report:#}");
    for r in results(&report) {
        assert!(r["rows_checked"].as_u64().unwrap() <= 40, "{r}");
    }
    // A dense tensor has no matmul to check.
    let run = cli(&[
        "spotcheck",
        k.dir.to_str().unwrap(),
        "--tensor",
        "model.norm.weight",
    ]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("MLX-LM"), "{}", run.stderr);
}

/// The weight error of each result of `tensor`, by expert (0 when unstacked).
fn weight_errors(report: &Value, tensor: &str) -> BTreeMap<u64, f64> {
    results(report)
        .iter()
        .filter(|r| r["tensor"] == tensor && r["kind"] == "matmul")
        .map(|r| {
            (
                r["expert"].as_u64().unwrap_or(0),
                r["reference"]["weight_rel_err"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn against_the_bf16_source_weight_errors_equal_numpys() {
    for args in [
        &["--mixed"][..],
        &["--mode", "affine"],
        &["--mode", "mxfp4"],
        &["--mode", "nvfp4", "--global-scale"],
        &["--mode", "mxfp8"],
    ] {
        let Some((k, src)) = Ckpt::with_source(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        let (code, report) = spotcheck(&k.dir, &["--reference", src.to_str().unwrap()]);
        assert_eq!(code, 0, "{args:?}: {report:#}");
        assert_eq!(results(&report).len(), CHECKS);
        assert!(report["reference_only"].as_array().unwrap().is_empty());
        for r in results(&report).iter().filter(|r| r["kind"] == "matmul") {
            assert_eq!(r["reference"]["pass"], true, "{r}");
        }
        for name in [
            STACKED,
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
            "model.embed_tokens.weight",
        ] {
            let ours = weight_errors(&report, name);
            let numpy: Vec<f64> = serde_json::from_str(
                &py(&[
                    "quality",
                    k.dir.to_str().unwrap(),
                    src.to_str().unwrap(),
                    name,
                ])
                .unwrap(),
            )
            .unwrap();
            assert_eq!(ours.len(), numpy.len(), "{name}");
            for (e, want) in numpy.iter().enumerate() {
                let got = ours[&(e as u64)];
                assert!(
                    (got - want).abs() <= 1e-9 * want,
                    "{args:?} {name} expert {e}: {got} vs numpy {want}"
                );
            }
        }
    }
}

#[test]
fn missing_renamed_and_reshaped_source_tensors_are_listed_not_fatal() {
    let Some((k, src)) = Ckpt::with_source(&["--mode", "affine"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let renamed = "model.layers.0.self_attn.q_proj.weight";
    let reshaped = "model.layers.0.mlp.gate_proj.weight";
    for shard in std::fs::read_dir(&src).unwrap() {
        let shard = shard.unwrap().path();
        if shard.extension().is_none_or(|x| x != "safetensors") {
            continue;
        }
        k.edit_header(&shard, |h| {
            if let Some(v) = h.remove(renamed) {
                h.insert("model.layers.0.self_attn.q_proj.renamed".into(), v);
            }
            if let Some(v) = h.get_mut(reshaped) {
                v["shape"] = serde_json::json!([128, 256]);
            }
        });
    }
    let (code, report) = spotcheck(&k.dir, &["--reference", src.to_str().unwrap()]);
    // The reshaped tensor fails its quality; every other check still runs.
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(results(&report).len(), CHECKS);
    assert_eq!(
        report["reference_only"],
        serde_json::json!(["model.layers.0.self_attn.q_proj.renamed"])
    );
    for r in results(&report) {
        let msgs: Vec<&str> = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["message"].as_str().unwrap())
            .collect();
        if r["tensor"] == renamed {
            assert_eq!(r["reference"], Value::Null);
            assert_eq!(r["pass"], true, "a missing source is a warning: {r}");
            assert!(msgs[0].contains("has no tensor"), "{msgs:?}");
        } else if r["tensor"] == reshaped {
            assert_eq!(r["pass"], false);
            assert!(msgs[0].contains("[128, 256]"), "{msgs:?}");
        } else {
            assert_eq!(r["pass"], true, "{r}");
        }
    }
}

#[test]
fn a_doubled_scale_fails_the_quality_against_the_source() {
    let Some((k, src)) = Ckpt::with_source(&["--mode", "affine"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    // BF16 scales: +0x80 raises the exponent by one, doubling the scale, for
    // every group of row 3.
    let module = "model.layers.0.self_attn.k_proj";
    k.patch(&format!("{module}.scales"), |b| {
        for s in b[3 * 4..4 * 4].chunks_exact_mut(2) {
            let v = u16::from_le_bytes([s[0], s[1]]) + 0x80;
            s.copy_from_slice(&v.to_le_bytes());
        }
    });
    let (code, report) = spotcheck(&k.dir, &["--reference", src.to_str().unwrap()]);
    assert_eq!(code, 1);
    let bad: Vec<&Value> = results(&report)
        .iter()
        .filter(|r| r["pass"] == false)
        .collect();
    assert_eq!(bad.len(), 1, "{report:#}");
    assert_eq!(bad[0]["tensor"], format!("{module}.weight"));
    // MLX and the decoder still agree: both read the doubled scale.
    assert_eq!(bad[0]["mlx_pass"], true);
    assert_eq!(bad[0]["reference"]["worst_group"][0], 3);
    assert_eq!(
        bad[0]["findings"][0]["check"], "spotcheck.reference",
        "{:#}",
        bad[0]
    );
}

#[test]
fn nvfp4_experts_with_a_global_scale_go_through_dequantize_and_matmul() {
    let Some(k) = Ckpt::mlx(&["--mode", "nvfp4", "--global-scale"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let (code, report) = spotcheck(&k.dir, &[]);
    assert_eq!(code, 0, "{report:#}");
    let rs = results(&report);
    assert_eq!(rs.len(), CHECKS);
    let stacked: Vec<&Value> = rs.iter().filter(|r| r["tensor"] == STACKED).collect();
    assert_eq!(stacked.len(), 4);
    for r in &stacked {
        assert_eq!(r["mlx_op"], "dequantize+matmul", "{r}");
        assert!(r["rel_err"].as_f64().unwrap() <= 1e-5, "{r}");
    }
    // Unstacked modules have no global scale: quantized_matmul.
    assert!(rs.iter().any(|r| r["mlx_op"] == "quantized_matmul"));
}
