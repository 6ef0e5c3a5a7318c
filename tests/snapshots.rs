//! A few rendered snapshots of the real app on a CPU adapter (wgpu on
//! Mesa's lavapipe or llvmpipe). State assertions live in tests/gui.rs; these
//! catch layout and drawing regressions a person would see.
//! `UPDATE_SNAPSHOTS=1 cargo test --release --test snapshots` rewrites them.
#![cfg(feature = "gui")]

mod common;

use std::time::Duration;

use bundlescope::app::{App, Command};
use common::*;
use egui_kittest::{Harness, SnapshotOptions};

/// The one options factory of every snapshot: a small per-pixel tolerance
/// so GL and Vulkan CPU adapters both pass, no failed-pixel allowance.
fn options() -> SnapshotOptions {
    SnapshotOptions::new().threshold(0.6)
}

fn harness() -> Harness<'static, App> {
    Harness::builder()
        .with_size([1280.0, 820.0])
        .wgpu()
        .build_ui_state(|ui, app: &mut App| app.ui(ui), App::new(None))
}

fn open(h: &mut Harness<'static, App>, dir: &std::path::Path, select: &str) {
    h.state_mut()
        .commands
        .push(Command::Open(dir.to_path_buf()));
    h.step();
    assert!(h.state_mut().wait_for_audit(Duration::from_secs(60)));
    h.run_steps(2);
    let i = h
        .state()
        .session
        .as_ref()
        .unwrap()
        .model
        .bundle
        .as_ref()
        .unwrap()
        .find(select)
        .unwrap();
    h.state_mut().commands.push(Command::Select(Some(i)));
    h.run_steps(4);
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
    h.snapshot_options("valid_q3_selected", &options());
}

#[test]
fn invalid_bundle_shows_the_error_on_its_tensor() {
    let b = TestBundle::v2();
    let name = "language_model.model.layers.0.self_attn.v_proj.weight";
    let at = b.record(name)["offset"].as_u64().unwrap() as usize + 7;
    b.patch_payload(true, |p| p[at] |= 0xf0);
    let mut h = harness();
    open(&mut h, &b.dir, name);
    h.snapshot_options("invalid_reserved_code", &options());
}
