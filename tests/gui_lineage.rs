//! The Lineage tab of the real app, driven through egui_kittest and found
//! through AccessKit: each box's title and mark (its badge's accessible
//! label is `TITLE: MARK`), the checks on each arrow, the parent picked in
//! the app, a broken overlay, a plain bundle and the compared-bundle hook.
#![cfg(feature = "gui")]

mod common;

use bundlescope::app::{CentralTab, Command};
use bundlescope::report::lineage::{Compared, Mark, NodeKind};
use common::gptq::{NORM, Overlay};
use common::harness::*;
use common::*;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;
use serde_json::json;

fn open_lineage(g: &mut Gui) {
    g.harness
        .get_by_role_and_label(Role::Button, "Lineage")
        .click();
    g.harness.run_steps(3);
    assert_eq!(g.state().central(), CentralTab::Lineage);
}

fn has(g: &Gui, label: &str) -> bool {
    g.harness.query_by_label(label).is_some()
}

#[test]
fn an_overlay_beside_its_parent_shows_a_verified_chain() {
    let o = Overlay::new(true);
    let mut g = gui();
    g.open(&o.dir);
    assert_eq!(g.verdict(), "Valid");
    // The Summary tab says how the format is read.
    assert!(
        g.shows("bundlescope's documented reading of the calibrated GPTQ-Q4 format (see Lineage)")
    );
    open_lineage(&mut g);
    for label in [
        "source revision: verified",
        "parent bundle: verified",
        "this bundle: verified",
        "compared bundle: unknown",
        "recalibrated into: verified",
        "source of: verified",
    ] {
        assert!(has(&g, label), "no {label:?}");
    }
    for text in [
        "no bundle compared",
        "bundlescope's documented reading of the calibrated GPTQ-Q4 format",
        "✔ provenance.parent_copied",
        "✔ provenance.parent_overlay",
        "✔ provenance.copied_hash",
        "✔ provenance.overlay_identity",
        "✔ provenance.parent_scales",
        // The declared calibration block, as a tree.
        "calibration (provenance.calibration, as declared)",
        "seeded noise, no data",
    ] {
        assert!(g.shows(text), "no {text:?}");
    }
    // The parent box names the sibling folder it found.
    assert!(g.shows(&o.parent.display().to_string()));
    let chain = g.state().lineage().chain().unwrap().clone();
    let kinds: Vec<NodeKind> = chain.nodes.iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            NodeKind::Source,
            NodeKind::Parent,
            NodeKind::Bundle,
            NodeKind::Compared
        ]
    );
}

#[test]
fn without_its_parent_the_parent_is_unknown_until_picked() {
    let o = Overlay::new(false);
    let mut g = gui();
    g.open(&o.dir);
    open_lineage(&mut g);
    assert!(has(&g, "parent bundle: unknown"));
    assert!(has(&g, "this bundle: verified"));
    assert!(g.shows("? provenance.parent_copied"));
    assert!(g.harness.query_by_label("Pick parent…").is_some());
    // Picking it (what the dialog sends) audits the overlay against it.
    g.send(Command::SetParent(o.parent.clone()));
    g.harness.step();
    g.finish();
    assert_eq!(g.state().lineage().parent(), Some(&o.parent));
    assert!(
        has(&g, "parent bundle: verified"),
        "after picking the parent"
    );
    assert!(g.shows("✔ provenance.parent_copied"));
}

#[test]
fn a_broken_overlay_marks_its_link_and_itself_as_mismatch() {
    let o = Overlay::new(true);
    o.edit(|m| {
        for e in m["provenance"]["copied"].as_array_mut().unwrap() {
            if e["name"] == NORM {
                e["range_sha256"] = json!("0".repeat(64));
            }
        }
    });
    let mut g = gui();
    g.open(&o.dir);
    open_lineage(&mut g);
    assert!(has(&g, "this bundle: mismatch"));
    assert!(has(&g, "recalibrated into: mismatch"));
    assert!(g.shows("✖ provenance.copied_hash"));
    // The parent itself is fine.
    assert!(has(&g, "parent bundle: verified"));
}

#[test]
fn a_plain_bundle_has_no_parent_and_the_compared_hook_fills_the_last_box() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    open_lineage(&mut g);
    assert!(!g.shows("parent bundle"));
    assert!(has(&g, "this bundle: verified"));
    assert!(has(&g, "quantised from: unknown"));
    assert!(g.shows("no bundle compared"));
    g.app().lineage_mut().set_compared(Some(Compared {
        path: "/elsewhere/other-bundle".into(),
        format: Some("audio8-mixed-bundle-v2".into()),
        identical: 20,
        changed: 3,
        ..Compared::default()
    }));
    g.harness.run_steps(3);
    assert!(!g.shows("no bundle compared"));
    assert!(g.shows("/elsewhere/other-bundle"));
    assert!(g.shows("20 identical, 3 changed"));
    assert!(has(&g, "compared with: verified"));
    let chain = g.state().lineage().chain().unwrap();
    assert_eq!(chain.nodes.last().unwrap().kind, NodeKind::Compared);
    assert_eq!(chain.links.last().unwrap().mark, Mark::Verified);
}

#[test]
fn replacing_the_compared_bundle_redraws_the_chain() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    open_lineage(&mut g);
    for (path, changed) in [("/first/compared", 1), ("/second/compared", 7)] {
        g.app().lineage_mut().set_compared(Some(Compared {
            path: path.into(),
            changed,
            ..Compared::default()
        }));
        g.harness.run_steps(2);
        assert!(g.shows(path), "{path}");
        assert!(g.shows(&format!("{changed} changed")), "{path}");
    }
    assert!(!g.shows("/first/compared"));
    g.app().lineage_mut().set_compared(None);
    g.harness.run_steps(2);
    assert!(g.shows("no bundle compared"));
}

#[test]
fn the_demo_overlay_opens_beside_its_parent() {
    let mut g = gui();
    g.harness.get_by_label("Open demo GPTQ-Q4 overlay").click();
    g.harness.step();
    g.finish();
    assert_eq!(g.verdict(), "Valid");
    let s = g.state().session().unwrap();
    assert_eq!(
        s.model.bundle.as_ref().unwrap().format.name(),
        "audio8-gptq-q4-calibrated-v1"
    );
    open_lineage(&mut g);
    // The demo bundle, written beside it, is found as its parent.
    assert!(has(&g, "parent bundle: verified"));
    assert!(has(&g, "this bundle: verified"));
}
