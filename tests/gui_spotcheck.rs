//! The spot-check panel of the real app, driven through egui_kittest, with
//! the real MLX (CPU device) behind it.
#![cfg(all(feature = "gui", feature = "mlx"))]

mod common;

use bundlescope::app::{CentralTab, Command};
use bundlescope::sample::{self, SampleFormat, SampleOptions};
use common::harness::{Gui, GuiOptions};
use common::*;
use egui::Key;
use egui_kittest::kittest::Queryable;

/// A window wide enough for the results table, without an audit cache.
fn harness() -> Gui {
    Gui::new(GuiOptions {
        size: [1400.0, 900.0],
        cache: false,
        ..GuiOptions::default()
    })
}

#[test]
fn run_on_mlx_checks_the_selected_tensor_and_shows_the_result() {
    let b = TestBundle::v2();
    let mut h = harness();
    h.open(&b.dir);
    let name = b.first_of("q4")["name"].as_str().unwrap().to_string();
    let i = h.select(&name);
    assert!(h.state().spot().results_of(i).is_none());
    h.harness.get_by_label("Run on MLX").click();
    h.harness.run_steps(2);
    h.wait_spot();
    let r = h.state().spot().results_of(i).expect("results").to_vec();
    assert!(!r.is_empty());
    assert!(r.iter().all(|r| r.pass && r.tensor == name), "{r:?}");
    assert!(r[0].rel_err <= 1e-5);
    assert_eq!(r[0].device, "cpu");
    assert!(h.shows("✔ pass"));
    assert!(h.shows("cpu"));

    // Cmd+K checks the selection too, here a q3 tensor.
    let q3 = b.first_of("q3")["name"].as_str().unwrap().to_string();
    let j = h.select(&q3);
    h.harness
        .key_press_modifiers(egui::Modifiers::COMMAND, Key::K);
    h.harness.run_steps(2);
    h.wait_spot();
    let r = h.state().spot().results_of(j).expect("Cmd+K ran the check");
    assert_eq!(r[0].precision, "q3");
}

#[test]
fn a_stored_tensor_offers_no_spot_check() {
    let b = TestBundle::v2();
    let mut h = harness();
    h.open(&b.dir);
    let dense = b.first_of("original")["name"].as_str().unwrap().to_string();
    h.select(&dense);
    assert!(!h.shows("Run on MLX"));
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
    h.open(&b.dir);
    assert_eq!(h.state().session().unwrap().verdict_text(), "Valid");
    h.send(Command::SetReference(reference.clone()));
    h.harness.run_steps(2);
    h.wait_spot();
    assert_eq!(h.state().central(), CentralTab::SpotChecks);
    assert!(h.shows(&reference.display().to_string()));

    h.harness.get_by_label("Spot-check all").click();
    h.harness.run_steps(2);
    h.wait_spot();
    let report = h.state().spot().all.clone().expect("a report");
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
    assert!(h.shows("✖ FAIL"));
    assert!(h.shows("2 failed"));
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
    h.open(&dir);
    let packed = h
        .bundle()
        .tensors
        .iter()
        .filter(|t| t.precision.packed().is_some() && t.alias_of.is_none())
        .count();
    // A wide x makes every check take a while, so the run cannot finish
    // in the few frames before Cancel is clicked, however busy the machine.
    h.app().spot_mut().batch = 512;
    h.harness
        .key_press_modifiers(egui::Modifiers::COMMAND | egui::Modifiers::SHIFT, Key::K);
    h.harness.run_steps(2);
    assert!(h.state().spot().running(), "Shift+Cmd+K started the checks");
    // The stream panel shows the run with its own progress and Cancel.
    assert!(h.shows("Spot check"));
    // Its Cancel is a button that sends a command, like every other.
    h.harness
        .get_all_by_label("Cancel")
        .next()
        .expect("a Cancel button")
        .click();
    h.harness.run_steps(2);
    h.wait_spot();
    let report = h.state().spot().all.clone().expect("a report");
    assert!(report.cancelled);
    assert!(
        report.results.len() < packed,
        "{} of {packed}",
        report.results.len()
    );
    assert!(h.shows("(cancelled)"));
}
