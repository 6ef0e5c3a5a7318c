//! MLX-LM checkpoints written by MLX itself (tests/mlx_lm_checkpoint.py:
//! mx.quantize + mx.save_safetensors, config.json, index), in every mode and
//! in a mixed recipe with 2-, 3-, 5-, 6- and 8-bit modules: each audits
//! valid, `export` equals `mx.dequantize` bit for bit, and `hist`'s code
//! counts equal numpy's unpacking of the U32 words. Plus plain safetensors
//! (a folder and a lone file) and the hash lists.

mod common;

use std::fs;

use common::mlxlm::{Ckpt, py};
use common::*;
use sha2::Digest;

/// Tensors covering an unstacked and a stacked (switch_mlp) module, and
/// every width of the mixed recipe.
const TENSORS: &[&str] = &[
    "model.embed_tokens.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.1.self_attn.v_proj.weight",
    "model.layers.1.mlp.switch_mlp.down_proj.weight",
];

/// The shape and the raw data of a float32 .npy file.
fn npy(path: &std::path::Path) -> (Vec<u64>, Vec<u8>) {
    let n = common::npy::read(path);
    (n.shape, n.data)
}

#[test]
fn mlx_written_checkpoints_audit_valid_and_export_and_counts_match_mlx() {
    let modes: &[&[&str]] = &[
        &["--mode", "affine"],
        &["--mode", "affine", "--bits", "3", "--group", "32"],
        &["--mode", "affine", "--bits", "8", "--group", "128"],
        &["--mode", "mxfp4"],
        &["--mode", "nvfp4"],
        &["--mode", "mxfp8"],
        &["--mixed"],
        // float16 and float32 models (scales, biases and dense tensors in
        // that type), as many mlx-community checkpoints are.
        &["--mode", "affine", "--dtype", "float16"],
        &["--mode", "affine", "--bits", "5", "--dtype", "float32"],
        &["--mode", "nvfp4", "--dtype", "float16"],
        &["--mode", "mxfp8", "--dtype", "float32"],
    ];
    for args in modes {
        let Some(k) = Ckpt::mlx(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        let run = audit_json(&k.dir);
        let report = run.json();
        assert_eq!(run.code, 0, "{args:?}: {report:#}");
        assert_eq!(report["bundle"]["format"], "mlx-lm");
        assert_eq!(report["files"].as_array().unwrap().len(), 2);
        let want = match args.iter().position(|a| *a == "--dtype") {
            Some(i) if args[i + 1] == "float16" => "F16",
            Some(_) => "F32",
            None => "BF16",
        };
        let norm = report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "model.norm.weight")
            .unwrap();
        assert_eq!(norm["source_dtype"], want, "{args:?}");
        let tmp = tempfile::tempdir().unwrap();
        for name in TENSORS {
            let ours = tmp.path().join("ours.npy");
            let theirs = tmp.path().join("mlx.npy");
            let r = common::export_tensor(k.dir.to_str().unwrap(), name, ours.to_str().unwrap());
            assert_eq!(r.code, 0, "{}", r.stderr);
            py(&[
                "dequant",
                k.dir.to_str().unwrap(),
                name,
                theirs.to_str().unwrap(),
            ])
            .unwrap();
            let (a, b) = (npy(&ours), npy(&theirs));
            assert_eq!(a.0, b.0, "{args:?} {name}: shape");
            assert!(
                a.1 == b.1,
                "{args:?} {name}: values differ from mx.dequantize"
            );
            let hist = cli(&["hist", k.dir.to_str().unwrap(), "--tensor", name, "--json"]);
            assert_eq!(hist.code, 0, "{}", hist.stderr);
            let counts = &hist.json()["codes"]["counts"];
            let numpy: serde_json::Value =
                serde_json::from_str(&py(&["counts", k.dir.to_str().unwrap(), name]).unwrap())
                    .unwrap();
            assert_eq!(counts, &numpy, "{args:?} {name}: code counts");
        }
    }
}

#[test]
fn mixed_recipe_modules_carry_their_own_bits() {
    let Some(k) = Ckpt::mlx(&["--mixed"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let report = audit_json(&k.dir).json();
    let precision = |n: &str| {
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .map(|t| t["precision"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(precision("model.layers.0.mlp.down_proj.weight"), "affine6");
    assert_eq!(
        precision("model.layers.0.self_attn.o_proj.weight"),
        "affine2"
    );
    assert_eq!(
        precision("model.layers.1.self_attn.v_proj.weight"),
        "affine3"
    );
    assert_eq!(
        precision("model.layers.1.mlp.switch_mlp.down_proj.weight"),
        "affine5"
    );
    assert_eq!(
        precision("model.layers.0.self_attn.v_proj.weight"),
        "affine8"
    );
    assert_eq!(
        precision("model.layers.0.self_attn.q_proj.weight"),
        "affine4"
    );
    assert_eq!(precision("model.layers.1.mlp.gate.weight"), "original");
}

#[test]
fn plain_safetensors_folders_and_files_open_and_hashes_are_verified() {
    let Some((_k, src)) = Ckpt::with_source(&["--mode", "affine"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let run = audit_json(&src);
    let report = run.json();
    assert_eq!(run.code, 0, "{report:#}");
    assert_eq!(report["bundle"]["format"], "safetensors");
    let shard = src.join("model-00001-of-00002.safetensors");
    let sha = hex(&sha2::Sha256::digest(fs::read(&shard).unwrap()));
    for f in report["files"].as_array().unwrap() {
        assert_eq!(f["ok"], serde_json::Value::Null, "no hash list yet: {f}");
        if f["file"] == "model-00001-of-00002.safetensors" {
            assert_eq!(f["sha256"], sha.as_str());
        }
    }
    // One file on its own.
    let one = audit_json(&shard);
    assert_eq!(one.code, 0, "{}", one.stdout);
    assert_eq!(one.json()["files"].as_array().unwrap().len(), 1);
    // --expect: right hash verified, wrong one an error naming --expect.
    let path = src.to_str().unwrap();
    let good = format!("model-00001-of-00002.safetensors={sha}");
    let r = cli(&["audit", path, "--json", "--expect", &good]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let f = &r.json()["files"][0];
    assert_eq!(f["ok"], true, "{f}");
    let bad = format!("model-00001-of-00002.safetensors={}", "0".repeat(64));
    let r = cli(&["audit", path, "--json", "--expect", &bad]);
    assert_eq!(r.code, 1);
    let report = r.json();
    let hits = findings_of(&report, "payload.sha256");
    assert!(hits[0]["message"].as_str().unwrap().contains("--expect"));
    // SHA256SUMS in the folder.
    fs::write(
        src.join("SHA256SUMS"),
        format!("{sha}  model-00001-of-00002.safetensors\n"),
    )
    .unwrap();
    let r = audit_json(&src);
    assert_eq!(r.code, 0);
    assert_eq!(r.json()["files"][0]["ok"], true);
    fs::remove_file(src.join("SHA256SUMS")).unwrap();
    // A list under any NAME.sha256 (`sha256sum * > all.sha256`): every
    // line counts, so a wrong hash on its second line fails that shard.
    let second = src.join("model-00002-of-00002.safetensors");
    let sha2nd = hex(&sha2::Sha256::digest(fs::read(&second).unwrap()));
    let mut wrong = sha2nd.clone().into_bytes();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).unwrap();
    let list = |second_hash: &str| {
        format!(
            "{sha}  model-00001-of-00002.safetensors\n{second_hash}  model-00002-of-00002.safetensors\n"
        )
    };
    fs::write(src.join("all.sha256"), list(&sha2nd)).unwrap();
    let r = audit_json(&src);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(
        r.json()["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["ok"] == true),
        "{}",
        r.stdout
    );
    fs::write(src.join("all.sha256"), list(&wrong)).unwrap();
    let r = audit_json(&src);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let report = r.json();
    let hits = findings_of(&report, "payload.sha256");
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(
        hits[0]["message"].as_str().unwrap().contains(&wrong),
        "{hits:?}"
    );
    // Two lists that disagree on a file: a finding naming both, whichever
    // hash is right.
    fs::write(src.join("all.sha256"), list(&sha2nd)).unwrap();
    fs::write(
        src.join("SHA256SUMS"),
        format!("{wrong}  model-00002-of-00002.safetensors\n"),
    )
    .unwrap();
    let r = audit_json(&src);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let report = r.json();
    let hits = findings_of(&report, "checksums.file");
    assert_eq!(hits.len(), 1, "{hits:?}");
    let m = hits[0]["message"].as_str().unwrap();
    assert!(m.contains("all.sha256 line 2") && m.contains(&wrong), "{m}");
    fs::remove_file(src.join("all.sha256")).unwrap();
    fs::remove_file(src.join("SHA256SUMS")).unwrap();
    // A malformed --expect is a usage error.
    let r = cli(&["audit", path, "--expect", "model.safetensors=zz"]);
    assert_eq!(r.code, 2);
}

/// The shapes fix only bits × group_size: a config saying bits 8, group 32
/// over MLX's 4-bit, group-64 codes agrees with them arithmetically. The
/// input width it implies (64) is none the checkpoint has, while 4 / 64
/// gives the hidden size: a warning naming both. Checkpoints MLX wrote, in
/// every mode and the mixed recipe, get none.
#[test]
fn a_config_whose_bits_and_group_fit_only_arithmetically_is_a_warning() {
    let quant_config = |dir: &std::path::Path| -> Vec<String> {
        let r = audit_json(dir).json();
        findings_of(&r, "mlxlm.quant_config")
            .iter()
            .map(|f| format!("{} {}", f["severity"], f["message"]))
            .collect()
    };
    for args in [
        &["--mode", "affine"][..],
        &["--mode", "affine", "--mixed"],
        &["--mode", "mxfp4"],
        &["--mode", "nvfp4"],
        &["--mode", "mxfp8"],
    ] {
        let Some(k) = Ckpt::mlx(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        assert_eq!(quant_config(&k.dir), Vec::<String>::new(), "{args:?}");
    }
    let k = Ckpt::mlx(&["--mode", "affine"]).unwrap();
    k.edit_config(|c| {
        for key in ["quantization", "quantization_config"] {
            c[key]["bits"] = serde_json::json!(8);
            c[key]["group_size"] = serde_json::json!(32);
        }
    });
    let run = audit_json(&k.dir);
    let said = quant_config(&k.dir);
    assert_eq!(run.code, 0, "a warning: {said:?}");
    let q = said
        .iter()
        .find(|m| m.contains("model.layers.0.self_attn.q_proj:"))
        .unwrap_or_else(|| panic!("no warning for q_proj: {said:?}"));
    assert!(q.starts_with("\"warning\""), "{q}");
    assert!(
        q.contains("bits 8, group_size 32") && q.contains("bits 4, group_size 64"),
        "{q}"
    );
}

/// MLX quantized modules with no quantization block to read them by: an
/// error where config.json is there and says nothing (mlx-lm would build
/// the layers dense), a warning for a folder without config.json or a
/// lone shard; one finding each, naming the first module.
#[test]
fn packed_modules_without_a_quantization_block_are_said() {
    let Some(k) = Ckpt::mlx(&["--mode", "affine"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let shard = k.shard_of("model.layers.0.self_attn.q_proj.weight");
    let lone = audit_json(&shard);
    let said = |run: &common::Run| -> Vec<(String, String)> {
        findings_of(&run.json(), "mlxlm.config")
            .iter()
            .map(|f| {
                (
                    f["severity"].as_str().unwrap().to_string(),
                    f["tensor"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let first = said(&lone);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].0, "warning");
    assert!(first[0].1.ends_with(".weight"), "{first:?}");
    assert_eq!(lone.code, 0);
    k.edit_config(|c| {
        let m = c.as_object_mut().unwrap();
        m.remove("quantization");
        m.remove("quantization_config");
    });
    let run = audit_json(&k.dir);
    assert_eq!(run.json()["bundle"]["format"], "safetensors");
    assert_eq!(
        said(&run),
        [("error".to_string(), "lm_head.weight".to_string())]
    );
    assert_eq!(run.code, 1);
    fs::remove_file(k.dir.join("config.json")).unwrap();
    let run = audit_json(&k.dir);
    assert_eq!(
        said(&run),
        [("warning".to_string(), "lm_head.weight".to_string())]
    );
    assert_eq!(run.code, 0);
}

/// A Hugging Face repository that ships both layouts: a
/// `consolidated.safetensors` beside the checkpoint is not part of it
/// (mlx-lm loads model*.safetensors, Transformers follows the index), so it
/// is said, not audited: the verdict and the tensor list are those without
/// it. An unlisted model*.safetensors, which mlx-lm does load, stays an error.
#[test]
fn a_consolidated_file_beside_the_checkpoint_is_said_not_audited() {
    let Some((k, src)) = Ckpt::with_source(&["--mode", "affine"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    for dir in [&k.dir, &src] {
        let before = audit_json(dir).json();
        let first = dir.join("model-00001-of-00002.safetensors");
        fs::copy(&first, dir.join("consolidated.safetensors")).unwrap();
        let run = audit_json(dir);
        let after = run.json();
        assert_eq!(run.code, 0, "{}: {after:#}", dir.display());
        assert_eq!(after["tensors"], before["tensors"], "{}", dir.display());
        assert_eq!(after["files"].as_array().unwrap().len(), 2);
        let said = findings_of(&after, "mlxlm.shards");
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0]["severity"], "info");
        assert_eq!(said[0]["field"], "consolidated.safetensors");
        fs::rename(
            dir.join("consolidated.safetensors"),
            dir.join("model-extra.safetensors"),
        )
        .unwrap();
        let run = audit_json(dir);
        assert_eq!(run.code, 1, "{}", dir.display());
        assert!(error_checks(&run.json()).contains(&"mlxlm.shards".to_string()));
        fs::remove_file(dir.join("model-extra.safetensors")).unwrap();
    }
}

/// `max / min` of the nonzero magnitudes of a module's BF16 (affine) or
/// E8M0 (mxfp4) scales, read
/// from the shard's bytes here.
fn scale_range(k: &Ckpt, module: &str, e8m0: bool) -> f64 {
    let name = format!("{module}.scales");
    let path = k.shard_of(&name);
    let bytes = fs::read(&path).unwrap();
    let (header, data) = Ckpt::header(&path);
    let o = &header[&name]["data_offsets"];
    let b = &bytes[data + o[0].as_u64().unwrap() as usize..data + o[1].as_u64().unwrap() as usize];
    let v: Vec<f64> = if e8m0 {
        b.iter().map(|&x| 2f64.powi(i32::from(x) - 127)).collect()
    } else {
        b.chunks_exact(2)
            .map(|c| {
                f64::from(f32::from_bits(
                    u32::from(u16::from_le_bytes([c[0], c[1]])) << 16,
                ))
            })
            .collect()
    };
    // Magnitudes: MLX's affine scales take either sign (a group whose edge
    // is its minimum gets a negative scale).
    let a = v.iter().map(|x| x.abs()).filter(|&x| x > 0.0);
    let max = a.clone().fold(f64::MIN, f64::max);
    let min = a.fold(f64::MAX, f64::min);
    max / min
}

#[test]
fn totals_count_scales_and_biases_with_their_module_and_scale_ranges_are_filled() {
    for (args, label, bpw, e8m0) in [
        (&["--mode", "affine"][..], "affine4", 4.5, false),
        (&["--mode", "mxfp4"][..], "mxfp4", 4.25, true),
    ] {
        let Some((k, src)) = Ckpt::with_source(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        let q = audit_json(&k.dir).json();
        let s = audit_json(&src).json();
        // The quantized model has the parameters of its BF16 source.
        assert_eq!(
            q["totals"]["parameters"], s["totals"]["parameters"],
            "{args:?}"
        );
        assert_eq!(
            q["totals"]["tensors"].as_u64().unwrap(),
            q["tensors"].as_array().unwrap().len() as u64
        );
        let p = &q["totals"]["by_precision"];
        assert!(
            p.get("e8m0").is_none() && p.get("original").is_some(),
            "{p:#}"
        );
        // Codes, scales (and biases) over the module's parameters.
        let got = p[label]["bits_per_weight"].as_f64().unwrap();
        assert!((got - bpw).abs() < 1e-9, "{args:?}: {got} bits per weight");
        for module in [
            "model.layers.0.mlp.up_proj",
            "model.layers.1.mlp.switch_mlp.down_proj",
        ] {
            let t = q["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == format!("{module}.weight"))
                .unwrap();
            let got = t["stats"]["quality"]["scale_dynamic_range"]
                .as_f64()
                .unwrap();
            let want = scale_range(&k, module, e8m0);
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{args:?} {module}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn nvfp4_global_scale_modules_export_as_mx_dequantize_does() {
    let Some(k) = Ckpt::mlx(&["--mode", "nvfp4", "--global-scale"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let run = audit_json(&k.dir);
    let report = run.json();
    assert_eq!(run.code, 0, "{report:#}");
    let globals = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().ends_with(".global_scale"))
        .count();
    assert_eq!(globals, 3, "one per stacked module");
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "model.layers.1.mlp.switch_mlp.down_proj.weight",
        "model.layers.1.mlp.switch_mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
    ] {
        let (ours, theirs) = (tmp.path().join("o.npy"), tmp.path().join("m.npy"));
        let r = common::export_tensor(k.dir.to_str().unwrap(), name, ours.to_str().unwrap());
        assert_eq!(r.code, 0, "{}", r.stderr);
        py(&[
            "dequant",
            k.dir.to_str().unwrap(),
            name,
            theirs.to_str().unwrap(),
        ])
        .unwrap();
        let (a, b) = (npy(&ours), npy(&theirs));
        assert_eq!(a.0, b.0, "{name}: shape");
        assert!(a.1 == b.1, "{name}: values differ from mx.dequantize");
    }
}

#[test]
fn hist_all_aggregates_each_mlx_precision_as_numpy_counts_it() {
    let Some(k) = Ckpt::mlx(&["--mixed"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    let dir = k.dir.to_str().unwrap();
    let report = audit_json(&k.dir).json();
    let r = cli(&["hist", dir, "--all", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.json();
    let aggs = out["aggregates"].as_array().unwrap();
    let labels: Vec<&str> = aggs
        .iter()
        .map(|a| a["precision"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "affine2", "affine3", "affine4", "affine5", "affine6", "affine8"
        ]
    );
    for a in aggs {
        let label = a["precision"].as_str().unwrap();
        let names: Vec<&str> = report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["precision"] == label)
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(a["tensors"], names.len(), "{label}");
        let mut want: Vec<u64> = Vec::new();
        for name in names {
            let c: Vec<u64> = serde_json::from_str(&py(&["counts", dir, name]).unwrap()).unwrap();
            want.resize(c.len(), 0);
            for (w, n) in want.iter_mut().zip(c) {
                *w += n;
            }
        }
        assert_eq!(a["codes"]["counts"], serde_json::json!(want), "{label}");
    }
}

/// The float32 values of a tensor as `export` writes them.
fn exported(dir: &std::path::Path, name: &str, out: &std::path::Path) -> Vec<f32> {
    let r = common::export_tensor(dir.to_str().unwrap(), name, out.to_str().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    common::npy::read(out).values().into_iter().collect()
}

#[test]
fn diff_of_two_mlx_lm_checkpoints_measures_each_changed_module() {
    let (Some(a), Some(b)) = (
        Ckpt::mlx(&["--mode", "affine"]),
        Ckpt::mlx(&["--mode", "affine"]),
    ) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    // B: row 5 of one module's BF16 scales doubled; one word of another's codes flipped.
    let scaled = "model.layers.0.self_attn.k_proj";
    b.patch(&format!("{scaled}.scales"), |s| {
        for v in s[5 * 4..6 * 4].chunks_exact_mut(2) {
            let x = u16::from_le_bytes([v[0], v[1]]) + 0x80;
            v.copy_from_slice(&x.to_le_bytes());
        }
    });
    let coded = "model.layers.1.mlp.switch_mlp.up_proj.weight";
    b.patch(coded, |w| {
        for x in &mut w[1000..1004] {
            *x ^= 0xff;
        }
    });
    let r = cli(&[
        "diff",
        a.dir.to_str().unwrap(),
        b.dir.to_str().unwrap(),
        "--json",
    ]);
    let report = r.json();
    let rows = report["tensors"].as_array().unwrap();
    let changed: Vec<&serde_json::Value> =
        rows.iter().filter(|t| t["status"] == "changed").collect();
    assert_eq!(changed.len(), 2, "{report:#}");
    let tmp = tempfile::tempdir().unwrap();
    for (name, weight, part) in [
        (
            format!("{scaled}.scales"),
            format!("{scaled}.weight"),
            "scales",
        ),
        (coded.to_string(), coded.to_string(), "codes"),
    ] {
        let row = changed.iter().find(|t| t["name"] == name.as_str()).unwrap();
        assert_eq!(row["differs"], serde_json::json!([part]), "{row}");
        let va = exported(&a.dir, &weight, &tmp.path().join("a.npy"));
        let vb = exported(&b.dir, &weight, &tmp.path().join("b.npy"));
        let (mut d, mut s) = (0f64, 0f64);
        for (x, y) in va.iter().zip(&vb) {
            let (x, y) = (f64::from(*x), f64::from(*y));
            d += (y - x) * (y - x);
            s += x * x;
        }
        let want = (d / s).sqrt();
        let got = row["weight_rel_err"].as_f64().unwrap();
        assert!(
            want > 0.0 && (got - want).abs() <= 1e-9 * want,
            "{name}: {got} vs {want}"
        );
    }
    let row = changed
        .iter()
        .find(|t| t["name"] == format!("{scaled}.scales").as_str())
        .unwrap();
    assert_eq!(row["worst_row"]["row"], 5);

    // Scale ratios B / A, from the BF16 scales of both files read here.
    let bf16 = |b: &[u8]| -> Vec<f64> {
        b.chunks_exact(2)
            .map(|c| {
                f64::from(f32::from_bits(
                    u32::from(u16::from_le_bytes([c[0], c[1]])) << 16,
                ))
            })
            .collect()
    };
    let name = format!("{scaled}.scales");
    let (sa, sb) = (bf16(&a.bytes_of(&name)), bf16(&b.bytes_of(&name)));
    let mut ratios: Vec<f64> = sa
        .iter()
        .zip(&sb)
        .filter(|(x, _)| **x != 0.0)
        .map(|(x, y)| y / x)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let equal = sa
        .iter()
        .zip(&sb)
        .filter(|(x, y)| x.to_bits() == y.to_bits())
        .count();
    let scales = &row["scales"];
    assert_eq!(scales["min_ratio"].as_f64(), Some(ratios[0]), "{row}");
    assert_eq!(scales["max_ratio"].as_f64(), Some(2.0), "{row}");
    assert_eq!(
        scales["median_ratio"].as_f64(),
        Some(ratios[(ratios.len() - 1) / 2]),
        "{row}"
    );
    assert_eq!(
        scales["equal_share"].as_f64(),
        Some(equal as f64 / sa.len() as f64)
    );
    assert_eq!(sa.len() - equal, 2, "row 5's two scales changed");

    // Code deltas B − A, unpacked here from both weights as one LSB-first
    // bit stream of `bits`-bit codes (the module has no override).
    let config: serde_json::Value =
        serde_json::from_slice(&fs::read(a.dir.join("config.json")).unwrap()).unwrap();
    let bits = config["quantization"]["bits"].as_u64().unwrap() as usize;
    assert!(
        config["quantization"]
            .get(coded.trim_end_matches(".weight"))
            .is_none()
    );
    let codes = |b: &[u8]| -> Vec<i64> {
        (0..b.len() * 8 / bits)
            .map(|i| {
                (0..bits)
                    .map(|k| i64::from((b[(i * bits + k) / 8] >> ((i * bits + k) % 8)) & 1) << k)
                    .sum()
            })
            .collect()
    };
    let (ca, cb) = (codes(&a.bytes_of(coded)), codes(&b.bytes_of(coded)));
    let mut want = std::collections::BTreeMap::<String, u64>::new();
    for (x, y) in ca.iter().zip(&cb) {
        *want.entry((y - x).to_string()).or_default() += 1;
    }
    let row = changed.iter().find(|t| t["name"] == coded).unwrap();
    let got: std::collections::BTreeMap<String, u64> =
        serde_json::from_value(row["codes"]["delta_counts"].clone()).unwrap();
    assert_eq!(got, want, "{row}");
    let moved = ca.iter().zip(&cb).filter(|(x, y)| x != y).count();
    assert!(moved > 0);
    assert_eq!(
        row["codes"]["changed_share"].as_f64(),
        Some(moved as f64 / ca.len() as f64)
    );
}

#[test]
fn outlier_rows_come_from_the_scales_tensor() {
    for (args, e8m0) in [
        (&["--mode", "affine"][..], false),
        (&["--mode", "mxfp4"][..], true),
    ] {
        let Some(k) = Ckpt::mlx(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        let module = "model.layers.0.mlp.up_proj";
        // Row 7's scales ×16: BF16 exponent +4, E8M0 byte +4.
        k.patch(&format!("{module}.scales"), |s| {
            if e8m0 {
                for b in &mut s[7 * 4..8 * 4] {
                    *b += 4;
                }
            } else {
                for v in s[7 * 4..8 * 4].chunks_exact_mut(2) {
                    let x = u16::from_le_bytes([v[0], v[1]]) + 0x200;
                    v.copy_from_slice(&x.to_le_bytes());
                }
            }
        });
        // Independently: rows of |s|, the median magnitude, rows above 8×.
        let name = format!("{module}.scales");
        let path = k.shard_of(&name);
        let bytes = fs::read(&path).unwrap();
        let (header, data) = Ckpt::header(&path);
        let o = &header[&name]["data_offsets"];
        let groups = header[&name]["shape"][1].as_u64().unwrap() as usize;
        let b =
            &bytes[data + o[0].as_u64().unwrap() as usize..data + o[1].as_u64().unwrap() as usize];
        let mags: Vec<f64> = if e8m0 {
            b.iter().map(|&x| 2f64.powi(i32::from(x) - 127)).collect()
        } else {
            b.chunks_exact(2)
                .map(|c| {
                    f64::from(f32::from_bits(
                        u32::from(u16::from_le_bytes([c[0], c[1]])) << 16,
                    ))
                    .abs()
                })
                .collect()
        };
        let mut sorted = mags.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len().div_ceil(2) - 1];
        let want = mags
            .chunks_exact(groups)
            .filter(|r| r.iter().copied().fold(0.0, f64::max) > 8.0 * median)
            .count();
        assert!(want >= 1, "{args:?}: the patched row is an outlier");
        let report = audit_json(&k.dir).json();
        let t = report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == format!("{module}.weight"))
            .unwrap();
        assert_eq!(t["stats"]["quality"]["outlier_rows"], want, "{args:?}");
    }
}

#[test]
fn groups_with_a_zero_scale_are_the_weights_zero_groups() {
    // Affine (BF16 scales: +0 and -0) and nvfp4 (E4M3 scales: 0x00, 0x80).
    for (args, e4m3) in [
        (&["--mode", "affine"][..], false),
        (&["--mode", "nvfp4"][..], true),
    ] {
        let Some(k) = Ckpt::mlx(args) else {
            require_or_skip("Python with MLX", false);
            return;
        };
        let module = "model.layers.0.mlp.up_proj";
        let name = format!("{module}.scales");
        // Zero five scales from scale 48 on (the last one as -0).
        k.patch(&name, |s| {
            let size = if e4m3 { 1 } else { 2 };
            for (i, v) in s[3 * 16 * size..(3 * 16 + 5) * size]
                .chunks_exact_mut(size)
                .enumerate()
            {
                v.fill(0);
                if i == 4 {
                    v[size - 1] = 0x80;
                }
            }
        });
        // Independently: the zero scales in the file's bytes.
        let path = k.shard_of(&name);
        let bytes = fs::read(&path).unwrap();
        let (header, data) = Ckpt::header(&path);
        let o = &header[&name]["data_offsets"];
        let b =
            &bytes[data + o[0].as_u64().unwrap() as usize..data + o[1].as_u64().unwrap() as usize];
        let want = if e4m3 {
            b.iter().filter(|&&x| x & 0x7f == 0).count()
        } else {
            b.chunks_exact(2)
                .filter(|c| u16::from_le_bytes([c[0], c[1]]) & 0x7fff == 0)
                .count()
        };
        assert!(want >= 5, "{args:?}: {want}");
        let report = audit_json(&k.dir).json();
        let t = report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == format!("{module}.weight"))
            .unwrap();
        assert_eq!(t["stats"]["quality"]["zero_groups"], want, "{args:?}");
    }
}

/// Each tensor's header dtype and shape, as the detail panel shows them,
/// rebuilt from the index row (which keeps no copy of its header entry),
/// equal the shard header's own, and the row's byte range is the entry's
/// `data_offsets` past the header: for packed weights of every bit width
/// (3-, 5- and 6-bit rows straddle words), stacked experts, scales, biases
/// and dense tensors; in bundlescope's samples and in a checkpoint MLX
/// wrote.
#[test]
fn header_entries_are_rebuilt_exactly_from_the_rows() {
    let check = |dir: &std::path::Path| {
        let b = bundlescope::format::open(dir).unwrap();
        assert!(b.tensors.len() > 10);
        let headers: Vec<_> = b.files.iter().map(|f| Ckpt::header(&f.path)).collect();
        let mut packed = 0;
        for t in &b.tensors {
            let (header, data) = &headers[t.file];
            let theirs = &header[&t.name];
            let ours = bundlescope::format::mlxlm::header_entry(t);
            assert_eq!(ours["dtype"], theirs["dtype"], "{}", t.name);
            assert_eq!(ours["shape"], theirs["shape"], "{}", t.name);
            let o = &theirs["data_offsets"];
            let at = |k: usize| *data as u64 + o[k].as_u64().unwrap();
            assert_eq!(t.range(), Some((at(0), at(1))), "{}", t.name);
            packed += usize::from(matches!(
                t.precision,
                bundlescope::format::Precision::Mlx(..)
            ));
        }
        assert!(packed > 0);
    };
    let tmp = tempfile::tempdir().unwrap();
    for (i, (bits, mixed)) in [(3, true), (5, false), (6, false)].into_iter().enumerate() {
        let dir = tmp.path().join(format!("s{i}"));
        let o = bundlescope::sample::mlxlm::MlxLmOptions {
            bits,
            mixed,
            ..Default::default()
        };
        bundlescope::sample::mlxlm::write(&dir, &o, None).unwrap();
        check(&dir);
    }
    let Some(k) = Ckpt::mlx(&["--mixed"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    check(&k.dir);
}
