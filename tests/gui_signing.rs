//! The Summary tab leads with the OMS signature: a signed bundle verified
//! with the key picked for its folder says "signed by …", a tampered one
//! says what failed; the key is remembered for the folder.
#![cfg(feature = "gui")]

mod common;

use bundlescope::app::signing::TrustFile;
use common::harness::*;
use common::oms::{self, How};

/// The vertical position of the first node whose label contains `text`.
fn top_of(g: &Gui, text: &str) -> f32 {
    use egui_kittest::kittest::Queryable;
    g.harness
        .query_all_by_label_contains(text)
        .next()
        .unwrap_or_else(|| panic!("nothing labelled {text:?}"))
        .rect()
        .min
        .y
}

#[test]
fn summary_leads_with_the_signature_and_shows_a_tampered_one_failing() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let mut g = gui();
    g.open(&s.dir);
    // No key yet: a warning, never "verified".
    assert!(g.shows("Signature: signed (key"), "no signature line");
    assert!(g.shows("signature not checked: no key given"));
    assert!(!g.shows("all digests match"));

    // The key picked for this folder: audited again, verified.
    g.pick_signing_file(TrustFile::Key, &s.work.join("pub.pem"));
    assert!(g.shows("3 files, all digests match"), "not verified");
    assert!(g.shows("Verify with"));
    // At the top of the Summary: above the format row.
    assert!(top_of(&g, "Signature: signed by") < top_of(&g, "source revision"));

    // The Lineage view leads with the same line.
    {
        use egui::accesskit::Role;
        use egui_kittest::kittest::Queryable;
        g.harness
            .get_by_role_and_label(Role::Button, "Lineage")
            .click();
        g.harness.run_steps(3);
    }
    assert_eq!(g.state().central(), bundlescope::app::CentralTab::Lineage);
    {
        use egui_kittest::kittest::Queryable;
        // One line in the Summary side panel, one atop the Lineage view.
        let lines = g
            .harness
            .query_all_by_label_contains("Signature: signed by key")
            .count();
        assert_eq!(lines, 2, "no signature line in Lineage");
    }

    // Tampered: the same folder (the key is remembered), a changed byte.
    s.change_payload_byte();
    g.open(&s.dir);
    assert!(g.shows("Signature: signed (key"), "no failure line");
    assert!(g.shows("NOT verified"));
    assert!(!g.shows("all digests match"));
    // The changed file says so in the Summary's file list, though the
    // folder's own manifest was rewritten to agree with it.
    assert!(g.shows("✖ not as signed"), "file line");
    assert!(
        g.verdict().to_lowercase().contains("invalid"),
        "{}",
        g.verdict()
    );
}

#[test]
fn a_file_signed_by_shards_is_read_not_hashed_whole_and_as_signed_once_verified() {
    if !oms::available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    assert_eq!(
        common::cli(&["sample", dir.to_str().unwrap(), "--format", "gguf"]).code,
        0
    );
    let file = dir.join("model.gguf");
    let w = |n: &str| tmp.path().join(n).display().to_string();
    oms::oms_ok(&["keygen", "p256", &w("k.pem"), &w("pub.pem")]);
    oms::oms_ok(&["sign-key", file.to_str().unwrap(), &w("k.pem"), "4096"]);
    let mut g = gui();
    g.open(&file);
    g.finish();
    // No key: the shards matched a statement nobody checked. Nothing
    // expects the file's whole SHA-256: never "pending" forever.
    assert!(g.shows("signature not checked: no key given"));
    assert!(g.shows("read; not hashed whole (signed shards)"));
    assert!(!g.shows("✔ as signed"));
    assert!(!g.shows("… pending"));
    g.pick_signing_file(TrustFile::Key, &tmp.path().join("pub.pem"));
    assert!(g.shows("all digests match"), "not verified");
    // The GGUF claims no digest of itself: the signature's shards vouch
    // for it, and the file line says so.
    assert!(g.shows("✔ as signed"), "file line");
    assert!(!g.shows("… pending"));
}

#[test]
fn a_sigstore_trusted_root_picked_as_the_root_verifies_a_rekor_v2_bundle() {
    if !oms::available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    assert_eq!(common::cli(&["sample", dir.to_str().unwrap()]).code, 0);
    let out = tmp.path().join("sg");
    oms::oms_ok(&["sigstore-v2", dir.to_str().unwrap(), out.to_str().unwrap()]);
    let mut g = gui();
    g.open(&dir);
    // No trusted root yet: the identity, and never "verified".
    assert!(g.shows("Signature: signed (sigstore, signer@example.com)"));
    assert!(g.shows("NOT verified"));
    // The trusted root picked with Root… (a JSON file, not a PEM): the
    // chain, the v2 log entry and the RFC 3161 timestamp verify.
    g.pick_signing_file(TrustFile::Root, &out.join("trusted_root.json"));
    assert!(
        g.shows("Signature: signed by signer@example.com (sigstore), 2 files, all digests match"),
        "not verified"
    );
    assert!(
        g.shows("trusted root "),
        "the picked trusted root is not listed"
    );
    // Remembered for the folder: opened again, still verified.
    g.open(&dir);
    assert!(g.shows("all digests match"), "not remembered");
}
