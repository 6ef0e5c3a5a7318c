//! The spot-check panel of the real app, driven through egui_kittest, with
//! the real MLX (CPU device) behind it.
#![cfg(all(feature = "gui", feature = "mlx"))]

mod common;

use std::path::Path;
use std::time::Duration;

use bundlescope::app::{App, CentralTab, Command};
use bundlescope::sample::{self, SampleFormat, SampleOptions};
use common::*;
use egui::Key;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

fn harness() -> Harness<'static, App> {
    Harness::builder()
        .with_size([1400.0, 900.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), App::new(None))
}

fn open(h: &mut Harness<'static, App>, dir: &Path) {
    h.state_mut()
        .commands
        .push(Command::Open(dir.to_path_buf()));
    h.step();
    assert!(h.state_mut().wait_for_audit(Duration::from_secs(60)));
    h.run_steps(2);
}

fn index(h: &Harness<'static, App>, name: &str) -> usize {
    h.state()
        .session
        .as_ref()
        .unwrap()
        .model
        .bundle
        .as_ref()
        .unwrap()
        .find(name)
        .unwrap()
}

fn select(h: &mut Harness<'static, App>, name: &str) -> usize {
    let i = index(h, name);
    h.state_mut().commands.push(Command::Select(Some(i)));
    h.run_steps(3);
    i
}

fn wait_spot(h: &mut Harness<'static, App>) {
    assert!(
        h.state_mut().spot.wait(Duration::from_secs(90)),
        "spot check did not finish"
    );
    h.run_steps(3);
}

fn shows(h: &Harness<'static, App>, text: &str) -> bool {
    h.query_all_by_label_contains(text).next().is_some()
}

#[test]
fn run_on_mlx_checks_the_selected_tensor_and_shows_the_result() {
    let b = TestBundle::v2();
    let mut h = harness();
    open(&mut h, &b.dir);
    let name = b.first_of("q4")["name"].as_str().unwrap().to_string();
    let i = select(&mut h, &name);
    assert!(h.state().spot.results_of(i).is_none());
    h.get_by_label("Run on MLX").click();
    h.run_steps(2);
    wait_spot(&mut h);
    let r = h.state().spot.results_of(i).expect("results").to_vec();
    assert!(!r.is_empty());
    assert!(r.iter().all(|r| r.pass && r.tensor == name), "{r:?}");
    assert!(r[0].rel_err <= 1e-5);
    assert_eq!(r[0].device, "cpu");
    assert!(shows(&h, "✔ pass"));
    assert!(shows(&h, "cpu"));

    // Cmd+K checks the selection too, here a q3 tensor.
    let q3 = b.first_of("q3")["name"].as_str().unwrap().to_string();
    let j = select(&mut h, &q3);
    h.key_press_modifiers(egui::Modifiers::COMMAND, Key::K);
    h.run_steps(2);
    wait_spot(&mut h);
    let r = h.state().spot.results_of(j).expect("Cmd+K ran the check");
    assert_eq!(r[0].precision, "q3");
}

#[test]
fn a_stored_tensor_offers_no_spot_check() {
    let b = TestBundle::v2();
    let mut h = harness();
    open(&mut h, &b.dir);
    let dense = b.first_of("original")["name"].as_str().unwrap().to_string();
    select(&mut h, &dense);
    assert!(!shows(&h, "Run on MLX"));
}

#[test]
fn spot_check_all_against_a_reference_ranks_the_permuted_tensor_first() {
    let b = TestBundle::v2();
    let reference = b.tmp.path().join("reference");
    sample::reference::write(&b.dir, &reference, 7).unwrap();
    // Codes permuted within every row of one q4 tensor; the payload is
    // rehashed, so the audit still passes.
    let t = b.first_of("q4");
    let name = t["name"].as_str().unwrap().to_string();
    let (offset, row_bytes, codes) = (
        t["offset"].as_u64().unwrap() as usize,
        t["row_bytes"].as_u64().unwrap() as usize,
        t["codes_bytes"].as_u64().unwrap() as usize,
    );
    b.patch_payload(true, |p| {
        for row in p[offset..offset + codes].chunks_exact_mut(row_bytes) {
            row.reverse();
        }
    });

    let mut h = harness();
    open(&mut h, &b.dir);
    assert_eq!(h.state().session.as_ref().unwrap().verdict_text(), "Valid");
    h.state_mut()
        .commands
        .push(Command::SetReference(reference.clone()));
    h.run_steps(2);
    wait_spot(&mut h);
    assert_eq!(h.state().central, CentralTab::SpotChecks);
    assert!(shows(&h, &reference.display().to_string()));

    h.get_by_label("Spot-check all").click();
    h.run_steps(2);
    wait_spot(&mut h);
    let report = h.state().spot.all.clone().expect("a report");
    // The permuted tensor is the tied embedding: its matmul row and its
    // gather row (also measured against the reference) both fail.
    assert_eq!(report.failed, 2, "{:?}", report.results);
    assert_eq!(report.results[0].tensor, name);
    assert!(!report.results[0].pass);
    assert!(
        report.results[0].mlx_pass,
        "MLX still agrees with the bytes"
    );
    assert!(report.results[0].reference.as_ref().unwrap().output_rel_err > 1.0);
    let ranked: Vec<f64> = report
        .results
        .iter()
        .filter_map(|r| r.reference.as_ref().map(|q| q.output_rel_err))
        .collect();
    assert!(ranked.windows(2).all(|w| w[0] >= w[1]), "{ranked:?}");
    assert!(shows(&h, "✖ FAIL"));
    assert!(shows(&h, "2 failed"));
}

#[test]
fn spot_check_all_shows_progress_and_cancels() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    sample::write(
        &dir,
        &SampleOptions {
            format: SampleFormat::Audio8V2,
            seed: 3,
            size_mib: Some(96),
        },
    )
    .unwrap();
    let mut h = harness();
    open(&mut h, &dir);
    let packed = h
        .state()
        .session
        .as_ref()
        .unwrap()
        .model
        .bundle
        .as_ref()
        .unwrap()
        .tensors
        .iter()
        .filter(|t| t.precision.packed().is_some() && t.alias_of.is_none())
        .count();
    h.key_press_modifiers(egui::Modifiers::COMMAND | egui::Modifiers::SHIFT, Key::K);
    h.run_steps(2);
    assert!(h.state().spot.running(), "Shift+Cmd+K started the checks");
    // The stream panel shows the run with its own progress and Cancel.
    assert!(shows(&h, "Spot check"));
    h.state().spot.cancel();
    wait_spot(&mut h);
    let report = h.state().spot.all.clone().expect("a report");
    assert!(report.cancelled);
    assert!(
        report.results.len() < packed,
        "{} of {packed}",
        report.results.len()
    );
    assert!(shows(&h, "(cancelled)"));
}
