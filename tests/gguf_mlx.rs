//! GGUF on MLX: bundlescope's reading of Q4_0, Q4_1 and Q8_0 tensors equals
//! what MLX's own GGUF loader (`mx.load`, C++ `load_gguf`) returns, on
//! files of bundlescope's sample writer and on llama.cpp's own
//! (scripts/make-llamacpp-gguf.sh); the spot checks pass on every decoded
//! block type, through `quantized_matmul` where MLX's affine quantisation
//! is the same, `matmul` elsewhere; and the spot check's loader check
//! (`spotcheck.gguf_loader`, MLX's `load_gguf` through the C++ bridge)
//! passes where the readings agree and names the block where they do not.
#![cfg(feature = "mlx")]

mod common;

use std::path::{Path, PathBuf};

use bundlescope::format::gguf::GgmlType;
use bundlescope::sample::gguf as sg;
use common::{cli, require_or_skip, run_python};
use serde_json::Value;

/// The header text and the f32 bits of a float32 `.npy` file.
fn npy_bits(path: &Path) -> (String, Vec<u32>) {
    let n = common::npy::read(path);
    let bits = n.bits();
    (n.header, bits)
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
        let run = common::export_tensor(file.to_str().unwrap(), &t.name, ours.to_str().unwrap());
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
    // The sample holds types MLX's GGUF loader cannot read (BF16, Q5_0,
    // IQ4_XS…), so its Q4_0/Q4_1/Q8_0 loader checks do not run, and a note
    // says why (no fault of the file: the exit code stays 0).
    assert_eq!(results.len(), 14, "{results:#?}");
    for x in results {
        assert_eq!(x["pass"], true, "{x}");
        let affine = ["Q4_0", "Q4_1", "Q8_0"].contains(&x["precision"].as_str().unwrap());
        assert_eq!(x["mlx_op"] == "quantized_matmul", affine, "{x}");
        assert!(x["rel_err"].as_f64().unwrap() < 1e-5);
    }
    assert_eq!(r["skipped"].as_array().unwrap().len(), 0);
    let notes = r["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:#?}");
    let note = notes[0].as_str().unwrap();
    assert!(
        note.starts_with("MLX's GGUF loader check not run: model.gguf holds ")
            && note.contains("reads only F32, F16, Q4_0, Q4_1, Q8_0, Q2_K, Q4_K and Q6_K"),
        "{note}"
    );
}

fn llamacpp_file(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".cache/llamacpp/written")
        .join(name);
    require_or_skip(
        "GGUF files written by llama.cpp (scripts/make-llamacpp-gguf.sh)",
        p.exists(),
    )
    .then_some(p)
}

/// llama.cpp's own Q4_0, Q4_1 and Q8_0 tensors (two of each, quantized by
/// ggml from real weights, in the file of the types MLX reads): `export`
/// equals what MLX's loader returns through Python (`mx.load`), and the
/// spot check's loader check (the same loader through the C++ bridge)
/// passes on each, next to its matmul check.
#[test]
fn llama_cpp_q4_0_q4_1_q8_0_equal_mlx_loader_in_python_and_in_the_spot_check() {
    let Some(file) = llamacpp_file("mlx-types.gguf") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
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
    let names: Vec<String> = ["q4_0", "q4_1", "q8_0"]
        .iter()
        .flat_map(|t| (0..2).map(move |k| format!("blk.{k}.{t}.weight")))
        .collect();
    for name in &names {
        let ours = tmp.path().join(format!("{name}.npy"));
        let run = common::export_tensor(file.to_str().unwrap(), name, ours.to_str().unwrap());
        assert_eq!(run.code, 0, "{}", run.stderr);
        let (h1, a) = npy_bits(&ours);
        let (h2, b) = npy_bits(&out.join(format!("{name}.npy")));
        assert!(
            h1.contains("(256, 1536)") && h2.contains("(256, 1536)"),
            "{h1} / {h2}"
        );
        // As numbers: llama.cpp's Q4_0 and Q8_0 scales are often negative,
        // where d·(q − 8) is −0 at q = 8 and MLX's d·q − 8d is +0.
        let diff = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| f32::from_bits(**x) != f32::from_bits(**y))
            .count();
        assert_eq!(
            (a.len(), diff),
            (256 * 1536, 0),
            "{name}: MLX's loader disagrees"
        );
    }
    let run = cli(&["spotcheck", file.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let r = run.json();
    assert_eq!(
        r["skipped"].as_array().unwrap().len(),
        0,
        "{}",
        r["skipped"]
    );
    let results = r["results"].as_array().unwrap();
    let loader: Vec<&str> = results
        .iter()
        .filter(|x| x["kind"] == "loader")
        .map(|x| {
            assert_eq!(x["pass"], true, "{x}");
            assert_eq!(x["mlx_op"], "load_gguf");
            assert_eq!(x["rel_err"], 0.0);
            x["tensor"].as_str().unwrap()
        })
        .collect();
    assert_eq!(loader, names);
    // The matmul checks: the six affine ones, Q2_K/Q4_K/Q6_K twice.
    assert_eq!(results.len() - loader.len(), 12);
    assert!(results.iter().all(|x| x["pass"] == true));
}

/// MLX's loader computes a Q8_0 block's bias in float16 (−128·d): a finite
/// scale d = 1000 (a valid GGUF block, and a valid affine one with the f32
/// bias bundlescope feeds `quantized_matmul`) makes MLX's bias −inf, so the
/// two readings differ and the loader check fails naming the tensor and
/// block; d = 500 (bias −64000, still a float16) agrees. The matmul check,
/// fed by bundlescope's reading, passes on both.
#[test]
fn loader_check_names_the_block_where_mlx_loader_reads_differently() {
    let spot = |d: u16| {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("q.gguf");
        let mut rng = bundlescope::sample::Rng::new(5);
        // 4 rows of 256: 8 blocks a row; block 13 is row 1, group 5.
        let mut q8 = sg::random_blocks(GgmlType::Q8_0, 32, &mut rng);
        q8[13 * 34..13 * 34 + 2].copy_from_slice(&d.to_le_bytes());
        let tensors = vec![
            sg::Tensor {
                name: "blk.0.q8.weight".into(),
                ty: GgmlType::Q8_0,
                ne: vec![256, 4],
                data: q8,
            },
            sg::Tensor {
                name: "blk.0.q4.weight".into(),
                ty: GgmlType::Q4_0,
                ne: vec![256, 4],
                data: sg::random_blocks(GgmlType::Q4_0, 32, &mut rng),
            },
        ];
        std::fs::write(&file, sg::encode(&sg::sample_kvs(3), &tensors, 32)).unwrap();
        assert_eq!(common::audit_json(&file).code, 0, "a valid file");
        let run = cli(&["spotcheck", file.to_str().unwrap(), "--json"]);
        (run.code, run.json())
    };
    // f16 1000.0 = 0x63d0, 500.0 = 0x5fd0.
    let (code, r) = spot(0x63d0);
    assert_eq!(code, 1, "{r:#}");
    let results = r["results"].as_array().unwrap();
    let failed: Vec<&Value> = results.iter().filter(|x| x["pass"] == false).collect();
    assert_eq!(failed.len(), 1, "{results:#?}");
    let f = failed[0];
    assert_eq!(
        (f["tensor"].as_str(), f["kind"].as_str()),
        (Some("blk.0.q8.weight"), Some("loader"))
    );
    let finding = &f["findings"][0];
    assert_eq!(finding["check"], "spotcheck.gguf_loader");
    let msg = finding["message"].as_str().unwrap();
    assert!(
        msg.contains("blk.0.q8.weight")
            && msg.contains("1 element(s)")
            && msg.contains("biases row 1 group 5: bundlescope -1.28e5, MLX -inf")
            && msg.contains("overflows"),
        "{msg}"
    );
    let (code, r) = spot(0x5fd0);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["results"].as_array().unwrap().len(), 4);
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

/// MLX's loader reads `general.alignment` under a misspelt key, so on a
/// file aligned to 64 it would read every tensor from the wrong place: the
/// loader check does not run there, a note says why, and the exit code
/// stays 0 (the matmul checks run and pass).
#[test]
fn loader_check_does_not_run_on_a_file_mlx_loader_would_misread() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a64.gguf");
    let mut rng = bundlescope::sample::Rng::new(8);
    let tensors = vec![sg::Tensor {
        name: "blk.0.q4.weight".into(),
        ty: GgmlType::Q4_0,
        ne: vec![256, 4],
        data: sg::random_blocks(GgmlType::Q4_0, 32, &mut rng),
    }];
    let mut kvs = sg::sample_kvs(3);
    for kv in &mut kvs {
        if kv.0 == "general.alignment" {
            kv.1 = bundlescope::format::gguf::Value::U32(64);
        }
    }
    std::fs::write(&file, sg::encode(&kvs, &tensors, 64)).unwrap();
    assert_eq!(common::audit_json(&file).code, 0, "a valid file");
    let run = cli(&["spotcheck", file.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let r = run.json();
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["kind"], "matmul");
    assert_eq!(
        r["notes"],
        serde_json::json!([
            "MLX's GGUF loader check not run: general.alignment is 64; MLX's loader (gguflib) reads only the default 32 right"
        ])
    );
    // The same note for the one tensor.
    let run = cli(&[
        "spotcheck",
        file.to_str().unwrap(),
        "--tensor",
        "blk.0.q4.weight",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("note: MLX's GGUF loader check not run: general.alignment is 64"),
        "{}",
        run.stdout
    );
}
