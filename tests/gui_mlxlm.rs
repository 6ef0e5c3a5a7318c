//! An MLX-LM checkpoint in the real app, driven through egui_kittest: it
//! opens like a bundle (verdict, every tensor in the table), the bits
//! column and chips show each module's bits, the bits filter keeps exactly
//! the modules (weight, scales, biases) of the widths picked, and with the
//! MLX bridge "Run on MLX" checks a stacked module one expert at a time.
#![cfg(feature = "gui")]

mod common;

use std::collections::BTreeSet;

use common::harness::{Gui, GuiOptions};
use common::mlxlm::Ckpt;
use egui_kittest::kittest::Queryable;

fn sample(dir: &std::path::Path) {
    let r = common::cli(&[
        "sample",
        dir.to_str().unwrap(),
        "--format",
        "mlx-lm",
        "--mixed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// The mixed sample in the real app (a wide window, no cache), opened and
/// audited; the folder lives as long as the first value.
fn opened() -> (tempfile::TempDir, std::path::PathBuf, Gui) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ck");
    sample(&dir);
    let mut h = Gui::new(GuiOptions {
        size: [1500.0, 900.0],
        cache: false,
        ..GuiOptions::default()
    });
    h.open(&dir);
    (tmp, dir, h)
}

/// Clicks the chip (a button: the bits column's cells are painted text).
fn chip(h: &Gui, label: &str) {
    h.harness
        .get_by_role_and_label(egui::accesskit::Role::Button, label)
        .click();
}

/// The names of the rows the table shows.
fn shown(h: &Gui) -> BTreeSet<String> {
    let b = h.state().session().unwrap().model.bundle.clone().unwrap();
    h.state()
        .rows()
        .iter()
        .map(|&i| b.tensors[i].name.clone())
        .collect()
}

#[test]
fn an_mlx_lm_checkpoint_shows_its_tensors_bits_and_filters_by_bits() {
    let (_tmp, _, mut h) = opened();
    assert_eq!(h.verdict(), "Valid");
    let n = h.tensor_count();
    assert_eq!(n, 54);
    assert_eq!(h.state().rows().len(), n);
    assert_eq!(h.state().session().unwrap().bits, vec![2, 3, 4, 5, 6, 8]);
    // The bits column's header and a chip per width.
    assert!(h.harness.query_by_label("bits").is_some());
    for b in [2, 3, 4, 5, 6, 8] {
        assert!(
            h.harness.query_by_label(&format!("{b}-bit")).is_some(),
            "{b}-bit chip"
        );
    }
    // 6-bit: the one module the mixed recipe gives 6 bits, all three parts.
    chip(&h, "6-bit");
    h.harness.run_steps(3);
    let want: BTreeSet<String> = ["weight", "scales", "biases"]
        .iter()
        .map(|p| format!("model.layers.0.mlp.down_proj.{p}"))
        .collect();
    assert_eq!(shown(&h), want);
    // Adding 5-bit adds the stacked down_proj of layer 1.
    chip(&h, "5-bit");
    h.harness.run_steps(3);
    let rows = shown(&h);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(rows.contains("model.layers.1.mlp.switch_mlp.down_proj.scales"));
    // Clearing both shows every tensor again.
    chip(&h, "6-bit");
    chip(&h, "5-bit");
    h.harness.run_steps(3);
    assert_eq!(h.state().rows().len(), n);
    // The name filter and the bits chips combine.
    chip(&h, "4-bit");
    h.harness.run_steps(3);
    let four = shown(&h);
    assert!(four.contains("model.layers.0.self_attn.q_proj.weight"));
    assert!(
        !four.contains("model.layers.0.self_attn.k_proj.weight"),
        "k_proj is 3-bit"
    );
    assert!(
        !four.iter().any(|t| t.contains("norm")),
        "dense tensors have no bits"
    );
}

#[cfg(feature = "mlx")]
#[test]
fn run_on_mlx_checks_each_expert_of_a_stacked_module() {
    let (_tmp, _, mut h) = opened();
    let i = h.select("model.layers.1.mlp.switch_mlp.down_proj.weight");
    h.harness.get_by_label("Run on MLX").click();
    h.harness.run_steps(2);
    h.wait_spot();
    let r = h.state().spot().results_of(i).expect("results").to_vec();
    assert_eq!(r.len(), 4, "{r:?}");
    assert!(
        r.iter().all(|r| r.pass && r.precision == "affine5"),
        "{r:?}"
    );
    let experts: Vec<_> = r.iter().map(|r| r.expert).collect();
    assert_eq!(experts, [Some(0), Some(1), Some(2), Some(3)]);
    assert!(h.shows("✔ pass"));
    // A norm has no matmul to check.
    h.select("model.norm.weight");
    assert!(!h.shows("Run on MLX"));
}

#[cfg(feature = "mlx")]
#[test]
fn spot_check_all_against_the_bf16_source_passes_every_module_and_expert() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, src) = (tmp.path().join("ck"), tmp.path().join("src"));
    let r = common::cli(&[
        "sample",
        dir.to_str().unwrap(),
        "--format",
        "mlx-lm",
        "--mode",
        "mxfp4",
        "--reference",
        src.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut h = Gui::new(GuiOptions {
        size: [1500.0, 900.0],
        cache: false,
        ..GuiOptions::default()
    });
    h.open(&dir);
    h.send(bundlescope::app::Command::SetReference(src.clone()));
    h.harness.run_steps(2);
    h.wait_spot();
    h.harness.get_by_label("Spot-check all").click();
    h.harness.run_steps(2);
    h.wait_spot();
    let report = h.state().spot().all.clone().expect("a report");
    // 13 modules and 3 stacked ones of 4 experts, each against its source,
    // and the embedding's gather check.
    assert_eq!(
        (report.passed, report.failed),
        (26, 0),
        "{:?}",
        report.results
    );
    use bundlescope::spotcheck::Kind;
    let matmuls = report.results.iter().filter(|r| r.kind == Kind::Matmul);
    assert!(matmuls.clone().all(|r| r.reference.is_some()));
    assert_eq!(matmuls.count(), 25);
    assert!(report.reference_only.is_empty());
    assert!(h.shows("26 passed"));
}

/// The detail panel of a packed weight shows its shard header's dtype and
/// stored shape (words per row: the row keeps the logical shape, and the
/// panel rebuilds the header's; compared here with the header read from
/// the shard) and its module's quantization.
#[test]
fn the_detail_panel_shows_a_packed_weights_header_shape_and_quantization() {
    let (_tmp, dir, mut h) = opened();
    let name = "model.layers.0.mlp.down_proj.weight";
    h.select(name);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    let shard = dir.join(index["weight_map"][name].as_str().unwrap());
    let stored = Ckpt::header(&shard).0[name]["shape"].to_string();
    let logical = h.bundle().tensors[h.index(name)].shape.clone().unwrap();
    assert_ne!(
        serde_json::json!(logical).to_string(),
        stored,
        "6-bit words"
    );
    for text in [
        "Record",
        "dtype",
        "\"U32\"",
        "shape",
        &stored,
        "quantization",
    ] {
        assert!(h.shows(text), "the detail panel shows {text}");
    }
    assert!(h.shows(r#"{"mode":"affine","bits":6"#));
}
