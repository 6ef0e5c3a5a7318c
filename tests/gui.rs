//! The real app driven through egui_kittest: open, audit, browse, filter,
//! sort, select, drop, keyboard, cache.
#![cfg(feature = "gui")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bundlescope::app::{App, Command, RowStatus, SortColumn};
use common::harness::*;
use common::*;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

/// Is some node's label containing `text` on screen?
fn shows(h: &Harness<'static, App>, text: &str) -> bool {
    h.query_all_by_label_contains(text).next().is_some()
}

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

#[test]
fn demo_opens_audits_valid_and_lists_every_tensor() {
    let mut g = gui();
    g.harness.get_by_label("Open demo bundle").click();
    g.harness.step();
    g.finish();
    assert_eq!(g.verdict(), "Valid");
    assert!(shows(&g.harness, "✔ Valid"));
    let n = g.tensor_count();
    assert!(n > 20);
    assert_eq!(
        g.app().rows().len(),
        n,
        "every tensor of the index is a row"
    );
    // The summary tab shows the verified payload.
    assert!(shows(&g.harness, "verified"));
}

#[test]
fn filter_narrows_and_escape_clears() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    let all = g.app().rows().len();
    g.harness
        .key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    g.harness.run_steps(2);
    g.harness
        .get_by_role(egui::accesskit::Role::TextInput)
        .type_text("q_proj");
    g.harness.run_steps(2);
    let rows = g.app().rows().to_vec();
    assert_eq!(g.app().view().filter, "q_proj");
    assert!(!rows.is_empty() && rows.len() < all);
    let names: Vec<String> = {
        let s = g.app().session().unwrap();
        let b = s.model.bundle.as_ref().unwrap();
        rows.iter().map(|&i| b.tensors[i].name.clone()).collect()
    };
    assert!(names.iter().all(|n| n.contains("q_proj")), "{names:?}");
    g.harness.key_press(egui::Key::Escape);
    g.harness.run_steps(2);
    assert_eq!(g.app().rows().len(), all);
}

#[test]
fn precision_chip_shows_only_that_precision() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    // The chip is the button of that name (table cells and totals are plain labels).
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::Button, "q3_full8")
        .click();
    g.harness.run_steps(2);
    let s = g.app().session().unwrap();
    let bundle = s.model.bundle.clone().unwrap();
    let rows = g.app().rows().to_vec();
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter()
            .all(|&i| bundle.tensors[i].precision.as_str() == "q3_full8")
    );
}

#[test]
fn sorting_by_resident_bytes_orders_the_table() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.harness.get_by_label("resident").click_accesskit();
    g.harness.run_steps(2);
    assert_eq!(g.app().view().sort, SortColumn::Resident);
    let s = g.app().session().unwrap();
    let bundle = s.model.bundle.clone().unwrap();
    let resident: Vec<u64> = g
        .app()
        .rows()
        .iter()
        .map(|&i| bundle.tensors[i].resident_bytes.unwrap_or(0))
        .collect();
    assert!(resident.windows(2).all(|w| w[0] >= w[1]), "{resident:?}");
    // A second click reverses.
    g.harness
        .get_by_label_contains("resident")
        .click_accesskit();
    g.harness.run_steps(2);
    let s = g.app().session().unwrap();
    let bundle = s.model.bundle.clone().unwrap();
    let resident: Vec<u64> = g
        .app()
        .rows()
        .iter()
        .map(|&i| bundle.tensors[i].resident_bytes.unwrap_or(0))
        .collect();
    assert!(resident.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn a_corrupted_bundle_marks_its_tensor_and_shows_the_finding() {
    let b = TestBundle::v2();
    let name = "language_model.model.layers.0.self_attn.v_proj.weight";
    let at = b.record(name)["scales_offset"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| p[at..at + 2].copy_from_slice(&0u16.to_le_bytes()));
    let mut g = gui();
    g.open(&b.dir);
    assert_eq!(g.verdict(), "Invalid (1 error)");
    assert!(shows(&g.harness, "Invalid (1 error)"));
    let i = {
        let s = g.app().session().unwrap();
        s.model.bundle.as_ref().unwrap().find(name).unwrap()
    };
    assert_eq!(g.app().session().unwrap().status(i), RowStatus::Error);
    // Sort errors first, then click the row by its name.
    g.send(Command::SortTable(SortColumn::Status, true));
    g.harness.run_steps(2);
    assert_eq!(g.app().rows().first(), Some(&i));
    // The check log lists the error (and its tensor) first too: click the
    // table's row, the topmost.
    g.harness
        .get_all_by_label(name)
        .min_by(|a, b| a.rect().top().total_cmp(&b.rect().top()))
        .unwrap()
        .click();
    g.harness.run_steps(2);
    assert_eq!(g.app().selected(), Some(i));
    assert!(shows(&g.harness, "scales are not finite and > 0"));
    assert!(shows(&g.harness, &format!("offset {at}")));
}

#[test]
fn dropping_a_folder_opens_it() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.harness
        .input_mut()
        .dropped_files
        .push(Arc::new(Dropped(b.dir.clone())));
    g.harness.step();
    g.finish();
    assert_eq!(g.app().session().unwrap().path, b.dir);
    assert_eq!(g.verdict(), "Valid");
    // Dropping the manifest file opens its folder too.
    let other = TestBundle::v2();
    g.harness
        .input_mut()
        .dropped_files
        .push(Arc::new(Dropped(other.dir.join("manifest.json"))));
    g.harness.step();
    g.finish();
    assert_eq!(g.verdict(), "Valid");
    assert_eq!(
        g.app().session().unwrap().path,
        other.dir.join("manifest.json")
    );
}

#[test]
fn arrows_move_the_selection() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.harness.key_press(egui::Key::ArrowDown);
    g.harness.run_steps(2);
    let first = g.app().rows()[0];
    assert_eq!(g.app().selected(), Some(first));
    g.harness.key_press(egui::Key::ArrowDown);
    g.harness.run_steps(2);
    let second = g.app().rows()[1];
    assert_eq!(g.app().selected(), Some(second));
    g.harness.key_press(egui::Key::ArrowUp);
    g.harness.run_steps(2);
    assert_eq!(g.app().selected(), Some(first));
    let name = g.app().selected_name().unwrap();
    assert!(
        g.harness.query_all_by_label(&name).count() >= 2,
        "table row and detail panel"
    );
}

#[test]
fn reopening_an_unchanged_bundle_uses_the_cache_and_a_change_invalidates_it() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    assert!(g.app().session().unwrap().cached.is_none());
    g.open(&b.dir);
    let s = g.app().session().unwrap();
    assert!(s.cached.is_some(), "second open should come from the cache");
    assert!(!s.running());
    assert_eq!(g.verdict(), "Valid");
    assert!(shows(&g.harness, "cached audit of"));
    // Re-verify runs the full audit.
    g.harness.get_by_label("Re-verify").click();
    g.harness.step();
    g.finish();
    assert!(g.app().session().unwrap().cached.is_none());
    // Change the payload: the cache must miss.
    b.patch_payload(false, |p| p[0] ^= 1);
    g.open(&b.dir);
    assert!(g.app().session().unwrap().cached.is_none());
    assert_eq!(g.verdict(), "Invalid (1 error)");
}

#[test]
fn opening_another_bundle_cancels_the_running_audit() {
    let a = TestBundle::v2();
    let b = TestBundle::v2();
    let mut g = gui();
    // Commands are carried out without a frame in between, so a's audit
    // cannot finish (be drained) before b replaces it.
    g.send(Command::Open(a.dir.clone()));
    g.app().handle_commands();
    // The first audit is running (its job is alive, nothing replaced yet).
    assert!(g.state().session().unwrap().running());
    assert!(g.state().replaced_audits().is_empty());
    g.send(Command::Open(b.dir.clone()));
    g.app().handle_commands();
    // Opening b told a's audit to stop: its token is the one replaced, and set.
    let replaced = g.state().replaced_audits();
    assert_eq!(replaced.len(), 1, "one audit was replaced");
    assert!(
        replaced[0].is_cancelled(),
        "the replaced audit was cancelled"
    );
    g.finish();
    assert_eq!(g.app().session().unwrap().path, b.dir);
    assert_eq!(g.verdict(), "Valid");
}

/// Sets a file's mtime back to `t` (what `touch -r` does).
fn set_mtime(path: &Path, t: std::time::SystemTime) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

#[test]
fn an_edit_with_its_mtime_set_back_misses_the_cache() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    assert_eq!(g.verdict(), "Valid");
    // Flip a payload byte in place (same size, same inode), then put the
    // mtime back as `touch -r` would: only the ctime tells.
    let payload = b.payload();
    let before = std::fs::metadata(&payload).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut bytes = std::fs::read(&payload).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&payload, &bytes).unwrap();
    set_mtime(&payload, before.modified().unwrap());
    let after = std::fs::metadata(&payload).unwrap();
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    assert_eq!(after.len(), before.len());
    g.open(&b.dir);
    let s = g.state().session().unwrap();
    assert!(
        s.cached.is_none(),
        "the edited bundle must not come from the cache"
    );
    assert_eq!(g.verdict(), "Invalid (1 error)");
    assert!(!g.shows("verified"), "the payload is no longer verified");
}

#[test]
fn a_cached_verdict_says_so_until_the_background_reverify_hashes_the_bytes() {
    let b = TestBundle::v2();
    let mut g = Gui::new(GuiOptions {
        reverify_limit: bundlescope::app::REVERIFY_LIMIT,
        ..GuiOptions::default()
    });
    g.open(&b.dir);
    assert!(g.app().wait_for_reverify(Duration::from_secs(60)));
    g.harness.run_steps(2);
    assert!(g.shows("✔ verified"));
    assert!(!g.shows("verified (cached)"), "hashed in this session");
    // Reopen: the verdict comes from the cache at once, and says so. Frames
    // are run one by one: the frame that applies the cached verdict starts
    // the re-verify, whose result cannot arrive before the next frame.
    g.send(Command::Open(b.dir.clone()));
    for _ in 0..2000 {
        g.harness.step();
        if g.state().session().is_some_and(|s| !s.running()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(g.state().session().unwrap().cached.is_some());
    assert_eq!(g.verdict(), "Valid");
    assert!(g.shows("✔ verified (cached)"), "cached, not hashed yet");
    assert!(
        g.state().reverifying(),
        "the re-verify runs in the background"
    );
    assert!(g.app().wait_for_reverify(Duration::from_secs(60)));
    g.harness.run_steps(2);
    assert!(g.state().session().unwrap().cached.is_none());
    assert_eq!(g.verdict(), "Valid");
    assert!(g.shows("✔ verified"));
    assert!(!g.shows("verified (cached)"), "re-hashed now");
    // The re-verified session, which replaced the cached one, gets its
    // range hashes too.
    assert!(g.app().wait_for_range_hashes(Duration::from_secs(60)));
    let s = g.state().session().unwrap();
    let bundle = s.model.bundle.clone().unwrap();
    for (i, t) in bundle.tensors.iter().enumerate() {
        if t.alias_of.is_none() && t.range().is_some() {
            assert!(s.model.range_hashes[i].is_some(), "{} not hashed", t.name);
        }
    }
}

#[test]
fn not_a_bundle_is_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = gui();
    g.open(tmp.path());
    assert_eq!(g.verdict(), "Not a bundle");
    assert!(shows(&g.harness, "no manifest.json"));
}

#[test]
fn quality_view_ranks_the_broken_tensor_first_and_selects_it() {
    let b = TestBundle::v2();
    let name = "language_model.model.layers.1.mlp.up_proj.weight";
    let at = b.record(name)["offset"].as_u64().unwrap() as usize + 40;
    b.patch_payload(true, |p| p[at] |= 0x0f); // a reserved q4 code
    let mut g = gui();
    g.open(&b.dir);
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::Button, "Quality")
        .click();
    g.harness.run_steps(2);
    let rows = bundlescope::app::quality_rows(g.app());
    let i = g.index(name);
    assert_eq!(rows.first().map(|r| r.0), Some(i), "worst tensor first");
    assert!(rows[0].1.reserved_codes > 0);
    assert!(rows.windows(2).all(|w| w[0].2.score >= w[1].2.score));
    // The name also shows in the check log below; click the quality table's row.
    let row = g
        .harness
        .get_all_by_label(name)
        .min_by(|a, b| a.rect().top().total_cmp(&b.rect().top()))
        .unwrap();
    row.click();
    g.harness.run_steps(2);
    assert_eq!(g.app().selected(), Some(i));
    // The detail panel now shows the charts and the statistics of that tensor.
    for text in [
        "Codes",
        "Scales",
        "reserved codes",
        "exceed the maximum code 14",
    ] {
        assert!(shows(&g.harness, text), "{text}");
    }
}

#[test]
fn save_report_writes_the_cli_report_and_never_into_the_bundle() {
    let b = TestBundle::v2();
    let name = "language_model.model.layers.0.self_attn.v_proj.weight";
    let at = b.record(name)["scales_offset"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| {
        p[at..at + 2].copy_from_slice(&0xbc00u16.to_le_bytes())
    });
    let mut g = gui();
    g.open(&b.dir);
    let out = b.tmp.path().join("report.json");
    g.app().send(Command::SaveReport(out.clone()));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let cli = audit_json(&b.dir).json();
    for key in ["verdict", "findings", "files", "totals", "provenance"] {
        assert_eq!(saved[key], cli[key], "{key}");
    }
    assert_eq!(
        saved["tensors"].as_array().unwrap().len(),
        cli["tensors"].as_array().unwrap().len()
    );
    // Inside the bundle folder: refused, with a message, and nothing written.
    let inside = b.dir.join("report.json");
    g.app().send(Command::SaveReport(inside.clone()));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    g.harness.run_steps(2);
    assert!(!inside.exists());
    assert!(
        g.app()
            .notice()
            .is_some_and(|n| n.is_error && n.message.contains("never writes"))
    );
}

/// Saves a report to `out` and says whether the app refused (and wrote nothing).
fn refused(g: &mut Gui, out: &Path) -> bool {
    g.send(Command::SaveReport(out.to_path_buf()));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    g.harness.run_steps(2);
    !out.exists()
        && g.state()
            .notice()
            .is_some_and(|n| n.is_error && n.message.contains("never writes"))
}

#[test]
fn save_report_refuses_the_bundle_folder_however_it_was_opened() {
    let b = TestBundle::v2();
    let mut g = gui();
    // Through its manifest: the folder is the manifest's parent.
    g.open(&b.dir.join("manifest.json"));
    assert_eq!(g.verdict(), "Valid");
    assert!(refused(&mut g, &b.dir.join("report.json")));
    // Through a symlink to the folder: the real folder is still refused,
    // and so is the same place reached through the link.
    let link = b.tmp.path().join("link");
    std::os::unix::fs::symlink(&b.dir, &link).unwrap();
    g.open(&link);
    assert_eq!(g.verdict(), "Valid");
    assert!(refused(&mut g, &b.dir.join("report.json")));
    assert!(refused(&mut g, &link.join("report.json")));
    // Beside the folder is fine.
    let beside = b.tmp.path().join("report.json");
    g.send(Command::SaveReport(beside.clone()));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    assert!(beside.exists());
}

#[test]
fn detail_panel_shows_range_hashes_hashed_after_the_audit() {
    use sha2::{Digest, Sha256};
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    let bundle = g
        .state()
        .session()
        .and_then(|s| s.model.bundle.clone())
        .unwrap();
    let payload = std::fs::read(&bundle.files[0].path).unwrap();
    // Each tensor's hash, computed here from the payload bytes.
    let expected: Vec<Option<String>> = bundle
        .tensors
        .iter()
        .map(|t| {
            t.range().filter(|_| t.alias_of.is_none()).map(|(s, e)| {
                let d = Sha256::digest(&payload[s as usize..e as usize]);
                d.iter().map(|x| format!("{x:02x}")).collect()
            })
        })
        .collect();
    // The background job fills them after the audit.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        g.harness.run_steps(1);
        let have = &g.state().session().unwrap().model.range_hashes;
        if expected
            .iter()
            .zip(have)
            .all(|(e, h)| e.is_none() || h.is_some())
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "range hashes did not arrive"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let have = g.state().session().unwrap().model.range_hashes.clone();
    for (i, e) in expected.iter().enumerate() {
        if e.is_some() {
            assert_eq!(&have[i], e, "range hash of {}", bundle.tensors[i].name);
        }
    }
    // The detail panel shows the selected tensor's hash…
    let packed = bundle
        .tensors
        .iter()
        .position(|t| t.alias_of.is_none() && t.precision.packed().is_some())
        .unwrap();
    g.select(&bundle.tensors[packed].name.clone());
    let h = expected[packed].clone().unwrap();
    assert!(g.shows(&h), "the detail panel shows {h}");
    // …and an alias its target's.
    let alias = bundle
        .tensors
        .iter()
        .position(|t| t.alias_of.is_some())
        .unwrap();
    let target = bundle.resolve_alias(alias).unwrap();
    g.select(&bundle.tensors[alias].name.clone());
    assert!(g.shows("range SHA-256 (its target's)"));
    assert!(g.shows(expected[target].as_deref().unwrap()));
    // The saved report carries them as tensors[].sha256.
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("report.json");
    g.send(Command::SaveReport(path.clone()));
    g.harness.step();
    assert!(g.app().wait_for_writes(Duration::from_secs(30)));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let row = &report["tensors"][packed];
    assert_eq!(row["sha256"].as_str(), expected[packed].as_deref());
    assert_eq!(
        report["tensors"][alias]["sha256"].as_str(),
        expected[target].as_deref()
    );
}
