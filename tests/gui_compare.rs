//! Compare with… driven through the real app and AccessKit: a command and a
//! modifier drop start the comparison, the diff table shows the changed
//! tensors, the status chips hide identical rows, the error header sorts,
//! selecting a changed row overlays A's and B's histograms (counted here
//! from the payload bytes), and reports save as Markdown.
#![cfg(feature = "gui")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bundlescope::app::{CentralTab, Command};
use bundlescope::diff::Status;
use common::codes::{count_codes, plain_q4, recode};
use common::harness::*;
use common::*;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;

#[derive(Debug)]
struct Dropped(PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }
    fn bytes(&self) -> Result<Vec<u8>, String> {
        Err("a folder has no bytes".into())
    }
}

/// A sample (A) and a copy (B) with two q4 tensors re-coded: the first by
/// a few codes, the second by many (so it has the larger error).
struct Pair {
    a: TestBundle,
    b: TestBundle,
    small: String,
    large: String,
}

fn pair() -> Pair {
    let a = TestBundle::v2();
    let b = TestBundle::v2();
    let q4 = plain_q4(&b);
    assert!(q4.len() >= 2, "the sample has two q4 tensors");
    recode(&b, &q4[0], 3);
    recode(&b, &q4[1], 60);
    Pair {
        a,
        b,
        small: q4[0].clone(),
        large: q4[1].clone(),
    }
}

fn wait_compare(g: &mut Gui) {
    assert!(
        g.app().wait_for_compare(Duration::from_secs(60)),
        "comparison did not finish"
    );
    g.harness.run_steps(3);
}

/// Names of the rows the diff table shows, in order.
fn shown(g: &Gui) -> Vec<(String, Status)> {
    let c = g.state().compare();
    let r = c.result().expect("a comparison");
    c.rows()
        .iter()
        .map(|&k| (r.report.tensors[k].name.clone(), r.report.tensors[k].status))
        .collect()
}

#[test]
fn compare_command_shows_the_changed_tensors_filters_sorts_and_overlays() {
    let p = pair();
    let mut g = gui();
    g.open(&p.a.dir);
    g.send(Command::Compare(p.b.dir.clone()));
    g.harness.step();
    wait_compare(&mut g);
    assert_eq!(g.state().central(), CentralTab::Compare);
    let n = g.tensor_count();
    {
        let c = g.state().compare();
        let r = c.result().unwrap();
        let s = &r.report.summary;
        assert_eq!(
            (s.identical, s.changed, s.only_a, s.only_b),
            (n - 2, 2, 0, 0)
        );
        let b = c.compared().unwrap();
        assert_eq!(b.path, p.b.dir);
        let sha = hex(&<sha2::Sha256 as sha2::Digest>::digest(
            std::fs::read(p.b.dir.join("manifest.json")).unwrap(),
        ));
        assert_eq!(b.manifest_sha256, sha);
    }
    assert!(g.shows(&format!("{} identical · 2 changed", n - 2)));
    // Both changed tensors are rows of the table, on screen by name.
    assert!(g.shows(&p.small) && g.shows(&p.large));
    assert_eq!(shown(&g).len(), n);

    // The "identical" chip hides every identical row.
    g.harness
        .get_by_role_and_label(Role::Button, "identical")
        .click();
    g.harness.run_steps(2);
    let rows = shown(&g);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|(_, s)| *s == Status::Changed));
    let identical_name = {
        let r = g.state().compare().result().unwrap();
        r.report
            .tensors
            .iter()
            .find(|t| t.status == Status::Identical)
            .unwrap()
            .name
            .clone()
    };
    // The tensor tab is not shown, so the name would only be in the diff table.
    assert!(!g.shows(&identical_name));

    // The error header sorts largest first, then reverses.
    g.harness.get_by_label("rel error").click_accesskit();
    g.harness.run_steps(2);
    let rows = shown(&g);
    assert_eq!(rows[0].0, p.large, "{rows:?}");
    g.harness
        .get_by_label_contains("rel error")
        .click_accesskit();
    g.harness.run_steps(2);
    assert_eq!(shown(&g)[0].0, p.small);

    // Selecting the changed row: overlays of A's and B's codes and scales,
    // and the delta histogram.
    g.harness.get_by_label(&p.large).click();
    g.harness.run_steps(2);
    wait_compare(&mut g);
    assert!(g.shows("Codes: A vs B"));
    assert!(g.shows("Scales: A vs B"));
    assert!(g.shows("Code deltas (B − A)"));
    assert!(g.shows("codes changed: "));
    let pa = std::fs::read(p.a.payload()).unwrap();
    let pb = std::fs::read(p.b.payload()).unwrap();
    let (want_a, want_b) = (
        count_codes(&p.a, &pa, &p.large),
        count_codes(&p.b, &pb, &p.large),
    );
    assert_ne!(want_a, want_b);
    let c = g.state().compare();
    let stats = c.pair_stats().expect("both sides' statistics");
    let got = |s: &Option<bundlescope::decode::stats::TensorStats>| {
        s.as_ref().unwrap().codes.as_ref().unwrap().counts.clone()
    };
    assert_eq!(got(&stats.a)[..want_a.len()], want_a[..]);
    assert_eq!(got(&stats.b)[..want_b.len()], want_b[..]);
}

#[test]
fn dropping_with_alt_or_shift_compares_instead_of_opening() {
    let p = pair();
    let mut g = gui();
    g.open(&p.a.dir);
    for modifiers in [egui::Modifiers::ALT, egui::Modifiers::SHIFT] {
        g.send(Command::CloseCompare);
        g.harness.step();
        assert!(!g.state().compare().active());
        g.harness
            .input_mut()
            .events
            .push(egui::Event::ModifiersChanged(modifiers));
        g.harness
            .input_mut()
            .dropped_files
            .push(Arc::new(Dropped(p.b.dir.clone())));
        g.harness.step();
        g.harness
            .input_mut()
            .events
            .push(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
        wait_compare(&mut g);
        // A stays open; B is the compared bundle.
        assert_eq!(g.state().session().unwrap().path, p.a.dir);
        let c = g.state().compare();
        assert_eq!(c.compared().unwrap().path, p.b.dir);
        assert_eq!(c.result().unwrap().report.summary.changed, 2);
    }
    assert!(g.shows(&p.large));
    // Without a modifier, a drop opens the folder as before.
    g.harness
        .input_mut()
        .dropped_files
        .push(Arc::new(Dropped(p.b.dir.clone())));
    g.harness.step();
    g.finish();
    assert_eq!(g.state().session().unwrap().path, p.b.dir);
    assert!(
        !g.state().compare().active(),
        "a new A forgets the comparison"
    );
}

#[test]
fn summary_tab_offers_compare_and_a_drop_zone() {
    let p = pair();
    let mut g = gui();
    g.open(&p.a.dir);
    assert!(g.shows("Drop a second bundle here to compare"));
    assert!(
        g.harness
            .query_by_role_and_label(Role::Button, "Compare with…")
            .is_some()
    );
    // A drop with the pointer over the zone compares.
    let zone = g
        .harness
        .get_by_label("Drop a second bundle here to compare")
        .rect()
        .center();
    g.harness
        .input_mut()
        .events
        .push(egui::Event::PointerMoved(zone));
    g.harness.step();
    g.harness
        .input_mut()
        .dropped_files
        .push(Arc::new(Dropped(p.b.dir.clone())));
    g.harness.step();
    wait_compare(&mut g);
    assert_eq!(g.state().session().unwrap().path, p.a.dir);
    assert_eq!(
        g.state().compare().compared().unwrap().path,
        p.b.dir,
        "the drop zone compares"
    );
}

#[test]
fn reports_save_as_markdown_by_extension() {
    let p = pair();
    let out = tempfile::tempdir().unwrap();
    let mut g = gui();
    g.open(&p.a.dir);
    let md = out.path().join("audit.md");
    let json = out.path().join("audit.json");
    g.send(Command::SaveReport(md.clone()));
    g.send(Command::SaveReport(json.clone()));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.starts_with("# bundlescope audit: bundle"), "{text}");
    for section in [
        "## Verdict",
        "## Findings",
        "## Provenance",
        "## Totals by precision",
        "## Tensors",
    ] {
        assert!(text.contains(section), "{section}");
    }
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("JSON beside it");
    assert_eq!(v["verdict"], "valid");

    g.send(Command::Compare(p.b.dir.clone()));
    g.harness.step();
    wait_compare(&mut g);
    let diff_md = out.path().join("diff.md");
    g.send(Command::SaveDiffReport(diff_md.clone()));
    // Never into a bundle folder.
    g.send(Command::SaveDiffReport(p.b.dir.join("diff.md")));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    let text = std::fs::read_to_string(&diff_md).unwrap();
    assert!(text.contains("## Differences") && text.contains(&p.large));
    assert!(!p.b.dir.join("diff.md").exists());
}

#[test]
fn cancelling_a_comparison_leaves_no_result() {
    let p = pair();
    let mut g = gui();
    g.open(&p.a.dir);
    g.send(Command::Compare(p.b.dir.clone()));
    g.send(Command::CancelCompare);
    g.harness.step();
    wait_compare(&mut g);
    // Either it finished before the cancel was seen, or it left nothing.
    let c = g.state().compare();
    assert!(!c.running());
    if c.result().is_none() {
        assert!(c.error().is_none());
        assert!(
            g.state()
                .notice()
                .is_some_and(|n| n.message == "comparison cancelled")
        );
    }
}

#[test]
fn a_comparison_asked_for_while_a_opens_waits_for_it() {
    // What `bundlescope A --compare B` sends.
    let p = pair();
    let mut g = gui();
    g.send(Command::Open(p.a.dir.clone()));
    g.send(Command::Compare(p.b.dir.clone()));
    g.harness.step();
    g.finish();
    g.harness.step();
    wait_compare(&mut g);
    assert_eq!(g.state().session().unwrap().path, p.a.dir);
    assert_eq!(g.state().compare().compared().unwrap().path, p.b.dir);
    assert_eq!(g.state().central(), CentralTab::Compare);
    assert!(g.shows(&p.large));
}

#[test]
fn arrows_move_the_diff_selection_not_the_tensor_tables() {
    let p = pair();
    let mut g = gui();
    g.open(&p.a.dir);
    g.send(Command::Compare(p.b.dir.clone()));
    g.harness.step();
    wait_compare(&mut g);
    use egui::Key::{ArrowDown, ArrowUp};
    for (key, want) in [(ArrowDown, 0), (ArrowDown, 1), (ArrowDown, 2), (ArrowUp, 1)] {
        g.harness.key_press(key);
        g.harness.run_steps(2);
        wait_compare(&mut g);
        let c = g.state().compare();
        assert_eq!(c.selected(), Some(c.rows()[want]), "{key:?} to row {want}");
    }
    assert_eq!(
        g.state().selected(),
        None,
        "the tensor table's selection stays"
    );
    // Row 1 is the second changed tensor: its overlays are shown.
    assert_eq!(shown(&g)[1].1, Status::Changed);
    assert!(g.shows("Codes: A vs B"));
}

#[test]
fn the_comparison_becomes_the_lineage_tabs_last_node() {
    let p = pair();
    let mut g = gui();
    g.open(&p.a.dir);
    assert!(g.state().lineage().compared().is_none());
    g.send(Command::Compare(p.b.dir.clone()));
    g.harness.run_steps(2);
    wait_compare(&mut g);
    let c = g.state().lineage().compared().expect("the compared node");
    assert_eq!(Path::new(&c.path), p.b.dir.as_path());
    assert_eq!(c.changed, 2, "the two re-coded tensors");
    assert_eq!(c.only_a + c.only_b, 0);
    // The node's manifest hash is B's manifest, hashed here.
    let manifest = std::fs::read(p.b.dir.join("manifest.json")).unwrap();
    assert_eq!(
        c.manifest_sha256.as_deref(),
        Some(bundlescope::format::sha256_hex(&manifest).as_str())
    );
    g.send(Command::ShowTab(CentralTab::Lineage));
    g.harness.run_steps(3);
    assert!(!g.shows("no bundle compared"), "the last box is B now");
    // Forgetting the comparison empties the node again.
    g.send(Command::CloseCompare);
    g.harness.run_steps(3);
    assert!(g.state().lineage().compared().is_none());
}
