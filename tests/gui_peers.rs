//! The Quality view ranks by the score against peers, through the real
//! app: a sample (7 layers) with one tensor's scales all 4× too large and
//! another layer's tensor replaced by a copy; the damaged tensors come
//! first with their reasons on screen, the selected one is drawn over its
//! peers' median histogram, and the layers × role heat map is there.
#![cfg(feature = "gui")]

mod common;

use bundlescope::sample::{self, SampleFormat, SampleOptions};
use common::TestBundle;
use common::damage::{self, Damage};
use common::harness::gui;
use egui_kittest::kittest::{NodeT, Queryable};

const SCALED: &str = "language_model.model.layers.3.mlp.down_proj.weight";
const COPY: &str = "language_model.model.layers.5.self_attn.o_proj.weight";
const TWIN: &str = "language_model.model.layers.1.self_attn.o_proj.weight";

#[test]
fn quality_view_ranks_the_damaged_tensors_first_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let o = SampleOptions {
        format: SampleFormat::Audio8V2,
        seed: 11,
        size_mib: Some(3),
    };
    sample::write(&dir, &o).unwrap();
    let b = TestBundle { tmp, dir };
    damage::apply(&b, Damage::TensorScales, SCALED, SCALED);
    damage::apply(&b, Damage::CopiedLayer, COPY, TWIN);

    let mut g = gui();
    g.open(&b.dir);
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::Button, "Quality")
        .click();
    g.harness.run_steps(3);
    let rows = bundlescope::app::quality_rows(g.app());
    let names: Vec<String> = {
        let s = g.app().session().unwrap();
        let bundle = s.model.bundle.as_ref().unwrap();
        rows.iter()
            .map(|r| bundle.tensors[r.0].name.clone())
            .collect()
    };
    // The copy (score 3, byte-identical) first, then the scaled tensor;
    // every undamaged tensor below 1, twin aside.
    assert_eq!(names[0], COPY, "{names:?}");
    assert_eq!(names[2], SCALED, "{names:?}");
    assert_eq!(names[1], TWIN, "{names:?}");
    assert!(
        rows[0]
            .2
            .reason
            .contains(&format!("byte-identical to {TWIN}"))
    );
    assert!(
        rows[2].2.reason.starts_with("scale median 4.") && rows[2].2.reason.contains("6 peers"),
        "{}",
        rows[2].2.reason
    );
    assert!(rows[3..].iter().all(|r| r.2.score < 1.0));
    assert!(rows.windows(2).all(|w| w[0].2.score >= w[1].2.score));
    // The reasons are on screen.
    assert!(g.shows(&format!("byte-identical to {TWIN}")));
    assert!(g.shows("scale median 4."));

    // Selecting the scaled tensor shows its peer group and the overlay.
    let i = g.select(SCALED);
    assert!(g.shows(
        "peer group language_model.model.layers.{N}.mlp.down_proj.weight · q4 · [256, 704] · 6 peers"
    ));
    assert!(g.shows("median of its 6 peers"));

    // The heat map: one row per role, one column per layer.
    assert!(g.shows("Heat map: 7 roles × 7 layers"));
    assert_eq!(g.app().selected(), Some(i));
}

/// The heat map (layers × role) on an audio8 bundle, clicked as a user
/// does: pick a statistic, click the damaged tensor's cell; the tensor is
/// selected, and the view shows its peer group and its scales over its
/// peers' median histogram.
#[test]
fn clicking_a_heat_map_cell_selects_its_tensor_and_overlays_its_peers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let o = SampleOptions {
        format: SampleFormat::Audio8V2,
        seed: 11,
        size_mib: Some(3),
    };
    sample::write(&dir, &o).unwrap();
    let b = TestBundle { tmp, dir };
    damage::apply(&b, Damage::TensorScales, SCALED, SCALED);

    let mut g = gui();
    g.open(&b.dir);
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::Button, "Quality")
        .click();
    g.harness.run_steps(3);
    assert_ne!(g.state().selected(), Some(g.index(SCALED)));
    assert!(!g.shows("median of its 6 peers"));

    // The statistic: the z-score of the scale median.
    g.harness
        .get_by_role(egui::accesskit::Role::ComboBox)
        .click();
    g.harness.run_steps(2);
    g.harness.get_by_label("z of scale_median").click();
    g.harness.run_steps(3);
    let cell = format!("heat map cell {SCALED}: scale_median ");
    let label = g
        .harness
        .get_by_label_contains(&cell)
        .accesskit_node()
        .label()
        .unwrap_or_default();
    let z: f64 = label[cell.len()..].parse().unwrap();
    assert!(z >= 6.0, "{label}");
    // Another tensor's cell is unremarkable under that statistic.
    let other = "language_model.model.layers.2.mlp.down_proj.weight";
    let other_label = g
        .harness
        .get_by_label_contains(&format!("heat map cell {other}: scale_median "))
        .accesskit_node()
        .label()
        .unwrap_or_default();
    let z_other: f64 = other_label.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(z_other.abs() < 3.0, "{other_label}");

    // Click the damaged tensor's cell.
    g.harness.get_by_label_contains(&cell).click();
    g.harness.run_steps(3);
    assert_eq!(g.state().selected(), Some(g.index(SCALED)));
    assert!(g.shows(
        "peer group language_model.model.layers.{N}.mlp.down_proj.weight · q4 · [256, 704] · 6 peers"
    ));
    assert!(g.shows("median of its 6 peers"));
    assert!(g.shows("scale median 4."));
}
