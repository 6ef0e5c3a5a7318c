//! GGUF on MLX: bundlescope's reading of Q4_0, Q4_1 and Q8_0 tensors equals
//! what MLX's own GGUF loader (`mx.load`, C++ `load_gguf`) returns, and the
//! spot checks pass on every decoded block type, through `quantized_matmul`
//! where MLX's affine quantisation is the same, `matmul` elsewhere.
#![cfg(feature = "mlx")]

mod common;

use std::path::Path;

use bundlescope::format::gguf::GgmlType;
use bundlescope::sample::gguf as sg;
use common::{cli, require_or_skip, run_python};

fn npy_bits(path: &Path) -> (String, Vec<u32>) {
    let b = std::fs::read(path).unwrap();
    let len = usize::from(u16::from_le_bytes([b[8], b[9]]));
    let header = String::from_utf8_lossy(&b[10..10 + len]).into_owned();
    let bits = b[10 + len..]
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    (header, bits)
}

#[test]
fn mlx_load_gguf_returns_what_bundlescope_reads_for_q4_0_q4_1_q8_0() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("m")).unwrap();
    let file = tmp.path().join("m/q.gguf");
    let mut rng = bundlescope::sample::Rng::new(21);
    let tensors: Vec<sg::Tensor> = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0]
        .into_iter()
        .map(|ty| sg::Tensor {
            name: format!("blk.0.{}.weight", ty.name().to_lowercase()),
            ty,
            ne: vec![256, 24],
            data: sg::random_blocks(ty, 24 * 256 / 32, &mut rng),
        })
        .collect();
    std::fs::write(&file, sg::encode(&sg::sample_kvs(3), &tensors, 32)).unwrap();
    let out = tmp.path().join("mlx");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf/mlx_load.py");
    let run = run_python(&[
        script.to_str().unwrap(),
        file.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    let ok = run.as_ref().is_some_and(|o| o.status.success());
    if !ok && let Some(o) = &run {
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    }
    if !require_or_skip("MLX in .pydeps", ok) {
        return;
    }
    for t in &tensors {
        let ours = tmp.path().join(format!("{}.npy", t.name));
        let run = cli(&[
            "export",
            file.to_str().unwrap(),
            "--tensor",
            &t.name,
            "--out",
            ours.to_str().unwrap(),
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let (h1, a) = npy_bits(&ours);
        let (h2, b) = npy_bits(&out.join(format!("{}.npy", t.name)));
        assert!(
            h1.contains("(24, 256)") && h2.contains("(24, 256)"),
            "{h1} / {h2}"
        );
        let diff = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        assert_eq!(
            (a.len(), diff),
            (24 * 256, 0),
            "{}: MLX's loader disagrees",
            t.name
        );
    }
}

#[test]
fn spot_checks_pass_on_every_decoded_block_type() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    sg::write(&dir.join("model.gguf"), 3).unwrap();
    let run = cli(&["spotcheck", dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let r = run.json();
    let results = r["results"].as_array().unwrap();
    // Every quantised decoded type: 15 tensors, no F32/F16/BF16, no IQ4_XS.
    assert_eq!(results.len(), 14, "{results:#?}");
    for x in results {
        assert_eq!(x["pass"], true, "{x}");
        let affine = ["Q4_0", "Q4_1", "Q8_0"].contains(&x["precision"].as_str().unwrap());
        assert_eq!(x["mlx_op"] == "quantized_matmul", affine, "{x}");
        assert!(x["rel_err"].as_f64().unwrap() < 1e-5);
    }
    assert_eq!(r["skipped"].as_array().unwrap().len(), 0);
}

/// `--reference` with the Hugging Face checkpoint a GGUF was converted
/// from (written by tests/gguf/llama_ref.py: the Q/K rows permuted with
/// numpy as llama.cpp's converter does): names mapped, the permutation
/// undone, every tensor within its bounds; the same file claiming one head
/// fails exactly on the Q and K projections.
#[test]
fn reference_checkpoint_names_are_mapped_and_the_qk_permutation_undone() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lr");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf/llama_ref.py");
    let run = run_python(&[script.to_str().unwrap(), out.to_str().unwrap()]);
    let ok = run.as_ref().is_some_and(|o| o.status.success());
    if !ok && let Some(o) = &run {
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    }
    if !require_or_skip("gguf-py in .pydeps", ok) {
        return;
    }
    let hf = out.join("hf");
    let spot = |gguf: &Path| {
        cli(&[
            "spotcheck",
            gguf.to_str().unwrap(),
            "--reference",
            hf.to_str().unwrap(),
            "--json",
        ])
    };
    let run = spot(&out.join("model.gguf"));
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let r = run.json();
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 16);
    for x in results {
        let q = &x["reference"];
        assert_eq!(q["pass"], true, "{x}");
        if x["precision"] == "Q8_0" {
            assert!(q["weight_rel_err"].as_f64().unwrap() < 0.01, "{x}");
        }
    }
    let run = spot(&out.join("wrong_heads/model.gguf"));
    assert_eq!(run.code, 1);
    let r = run.json();
    let mut failed: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["pass"] == false)
        .map(|x| x["tensor"].as_str().unwrap())
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        [
            "blk.0.attn_k.weight",
            "blk.0.attn_q.weight",
            "blk.1.attn_k.weight",
            "blk.1.attn_q.weight"
        ]
    );
}
