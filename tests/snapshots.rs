//! A few rendered snapshots of the real app on a CPU adapter (wgpu on
//! Mesa's lavapipe or llvmpipe). State assertions live in tests/gui.rs; these
//! catch layout and drawing regressions a person would see.
//! `UPDATE_SNAPSHOTS=1 cargo test --release --test snapshots` rewrites them.
#![cfg(feature = "gui")]

mod common;

use common::TestBundle;
use common::harness::{Gui, GuiOptions};
use egui_kittest::SnapshotOptions;

/// The one options factory of every snapshot: a small per-pixel tolerance
/// so GL and Vulkan CPU adapters both pass, no failed-pixel allowance.
fn options() -> SnapshotOptions {
    SnapshotOptions::new().threshold(0.6)
}

fn harness() -> Gui {
    Gui::new(GuiOptions {
        wgpu: true,
        cache: false,
        ..GuiOptions::default()
    })
}

fn open(h: &mut Gui, dir: &std::path::Path, select: &str) {
    h.open(dir);
    h.select(select);
    h.harness.run_steps(1);
}

#[test]
fn valid_bundle_with_a_q3_tensor_selected() {
    let b = TestBundle::v2();
    let mut h = harness();
    open(
        &mut h,
        &b.dir,
        "language_model.model.layers.0.mlp.gate_proj.weight",
    );
    h.harness.snapshot_options("valid_q3_selected", &options());
}

#[test]
fn invalid_bundle_shows_the_error_on_its_tensor() {
    let b = TestBundle::v2();
    let name = "language_model.model.layers.0.self_attn.v_proj.weight";
    let at = b.record(name)["offset"].as_u64().unwrap() as usize + 7;
    b.patch_payload(true, |p| p[at] |= 0xf0);
    let mut h = harness();
    open(&mut h, &b.dir, name);
    h.harness
        .snapshot_options("invalid_reserved_code", &options());
}
