//! OMS model signatures made by the real `model-signing` tool: each signing
//! method verifies, each tampering fails with its own finding, and our
//! verdict agrees with the tool's.

mod common;

use common::oms::{self, How, Signed};
use common::{cli, error_checks, findings_of};

fn errors(report: &serde_json::Value) -> Vec<String> {
    error_checks(report)
}

fn assert_verified(s: &Signed, files: usize) {
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["verdict"], "valid");
    let sig = &r["signature"];
    assert_eq!(sig["verified"], true, "{sig:#}");
    assert_eq!(sig["signature_valid"], true);
    assert_eq!(sig["files_checked"], files, "{sig:#}");
    assert_eq!(sig["unsigned_files"].as_array().unwrap().len(), 0);
    assert!(
        sig["not_verified"].as_array().unwrap().is_empty(),
        "{sig:#}"
    );
    assert!(s.tool_accepts(), "the real tool rejects what we accept");
}

#[test]
fn key_method_on_every_curve_verifies_and_agrees_with_the_tool() {
    if !oms::available() {
        return;
    }
    for curve in ["p256", "p384", "p521"] {
        let s = oms::signed(How::Key(curve));
        assert_verified(&s, 3);
        let (_, r) = s.audit(&[]);
        // The fingerprint is the hint the signer wrote (SHA-256 of the PEM).
        assert_eq!(r["signature"]["method"], "key");
        assert_eq!(
            r["signature"]["key_fingerprint"], r["signature"]["key_hint"],
            "{curve}"
        );
    }
}

#[test]
fn certificate_method_verifies_up_to_the_given_root() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Certificate);
    assert_verified(&s, 3);
    let (_, r) = s.audit(&[]);
    assert_eq!(r["signature"]["method"], "certificate");
    assert_eq!(
        r["signature"]["certificate_subject"],
        "CN=bundlescope test signer"
    );
    assert_eq!(r["signature"]["issuer"], "CN=bundlescope test root");
}

#[test]
fn shards_serialization_verifies_and_names_the_changed_shard() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Shards("p256", 65536));
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 0, "{r:#}");
    let sig = &r["signature"];
    assert_eq!(sig["verified"], true, "{sig:#}");
    assert!(
        sig["serialization"]
            .as_str()
            .unwrap()
            .starts_with("shards of 65536 bytes")
    );
    // weights.bin (1045504 bytes) is 16 shards, manifest.json and README.md one each.
    assert_eq!(sig["resources"], 18);
    s.change_payload_byte();
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 1);
    let digest = findings_of(&r, "oms.digest");
    assert!(
        digest.iter().any(|f| f["message"]
            .as_str()
            .unwrap()
            .starts_with("weights.bin:0:65536")
            && f["offset"] == 0),
        "{digest:#?}"
    );
    assert!(!digest.iter().any(|f| {
        f["message"]
            .as_str()
            .unwrap()
            .starts_with("weights.bin:65536:")
    }));
}

/// (what, tampering, the one error check it must cause)
type Tamper = (&'static str, fn(&Signed), &'static str);

fn tamperings() -> Vec<Tamper> {
    vec![
        (
            "a payload byte changed, the manifest's own hash updated",
            |s| s.change_payload_byte(),
            "oms.digest",
        ),
        (
            "a file added",
            |s| std::fs::write(s.dir.join("extra.txt"), "x").unwrap(),
            "oms.unsigned",
        ),
        (
            "a file removed",
            |s| std::fs::remove_file(s.dir.join("README.md")).unwrap(),
            "oms.missing",
        ),
        (
            "an edited statement",
            |s| s.edit_statement(),
            "oms.signature",
        ),
    ]
}

#[test]
fn each_tampering_fails_with_its_own_finding_and_the_tool_agrees() {
    if !oms::available() {
        return;
    }
    for how in [How::Key("p256"), How::Certificate] {
        for (what, tamper, check) in tamperings() {
            let s = oms::signed(how);
            tamper(&s);
            let (code, r) = s.audit(&[]);
            assert_eq!(code, 1, "{how:?} {what}: {r:#}");
            let mut errs = errors(&r);
            errs.dedup();
            assert_eq!(errs, [check], "{how:?} {what}: {r:#}");
            assert_eq!(r["signature"]["verified"], false);
            assert!(
                !s.tool_accepts(),
                "{how:?} {what}: the real tool accepts it"
            );
        }
    }
}

#[test]
fn the_wrong_key_and_a_foreign_root_fail_and_the_tool_agrees() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let other = s.work.join("other.pem");
    oms::oms_ok(&[
        "keygen",
        "p256",
        s.work.join("o.pem").to_str().unwrap(),
        other.to_str().unwrap(),
    ]);
    let run = cli(&[
        "audit",
        s.dir.to_str().unwrap(),
        "--json",
        "--key",
        other.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(errors(&run.json()), ["oms.key"]);
    let out = oms::oms(&[
        "verify-key",
        s.dir.to_str().unwrap(),
        other.to_str().unwrap(),
    ])
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("FAIL"));

    let c = oms::signed(How::Certificate);
    let foreign = c.work.join("pki/other_root.pem");
    let run = cli(&[
        "audit",
        c.dir.to_str().unwrap(),
        "--json",
        "--cert-root",
        foreign.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(errors(&run.json()), ["oms.certificate"]);
    let out = oms::oms(&[
        "verify-cert",
        c.dir.to_str().unwrap(),
        foreign.to_str().unwrap(),
    ])
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("FAIL"));
}

#[test]
fn no_key_is_a_warning_never_a_pass_and_unsigned_is_said() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p384"));
    let run = cli(&["audit", s.dir.to_str().unwrap(), "--json"]);
    let r = run.json();
    assert_eq!(r["signature"]["verified"], false);
    let w = findings_of(&r, "oms.key");
    assert!(w.iter().any(|f| {
        f["severity"] == "warning"
            && f["message"]
                .as_str()
                .unwrap()
                .contains("signature not checked: no key given")
    }));
    let text = cli(&["audit", s.dir.to_str().unwrap()]).stdout;
    assert!(text.contains("NOT verified"), "{text}");
    assert!(!text.contains("all digests match"), "{text}");

    // --ignore-unsigned accepts an added file, and lists it.
    std::fs::write(s.dir.join("notes.txt"), "x").unwrap();
    let (code, r) = s.audit(&["--ignore-unsigned"]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(
        r["signature"]["unsigned_files"],
        serde_json::json!(["notes.txt"])
    );

    std::fs::remove_file(s.dir.join("model.sig")).unwrap();
    let run = cli(&["audit", s.dir.to_str().unwrap(), "--json"]);
    assert!(run.json()["signature"].is_null());
    let text = cli(&["audit", s.dir.to_str().unwrap()]).stdout;
    assert!(text.contains("signature: unsigned"), "{text}");
}

#[test]
fn a_sigstore_bundle_shows_identity_and_says_what_was_not_verified() {
    if !oms::available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    assert_eq!(cli(&["sample", dir.to_str().unwrap()]).code, 0);
    let out = tmp.path().join("sg");
    oms::oms_ok(&[
        "sigstore-like",
        dir.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    for extra in [
        vec![],
        vec![
            "--trusted-root".to_string(),
            out.join("trusted_root.json").display().to_string(),
        ],
    ] {
        let mut args = vec!["audit", dir.to_str().unwrap(), "--json"];
        args.extend(extra.iter().map(String::as_str));
        let r = cli(&args).json();
        let sig = &r["signature"];
        assert_eq!(sig["method"], "sigstore");
        assert_eq!(sig["identity"], "signer@example.com");
        assert_eq!(sig["issuer"], "https://accounts.example.com");
        assert_eq!(sig["signature_valid"], true);
        assert_eq!(sig["verified"], false, "the log entry is never verified");
        let nv = sig["not_verified"].as_array().unwrap();
        assert!(
            nv.iter()
                .any(|n| n.as_str().unwrap().contains("transparency-log"))
        );
        assert_eq!(
            nv.iter().any(|n| n.as_str().unwrap().contains("chain")),
            extra.is_empty(),
            "{nv:?}"
        );
    }
}

#[test]
fn the_markdown_report_and_the_lineage_text_lead_with_the_signature() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let mut args = vec!["audit", s.dir.to_str().unwrap(), "--markdown"];
    args.extend(s.trust.iter().map(String::as_str));
    let md = cli(&args).stdout;
    let first_h2 = md.lines().find(|l| l.starts_with("## ")).unwrap();
    assert_eq!(first_h2, "## Signature");
    assert!(md.contains("3 files, all digests match"), "{md}");
    assert!(md.contains("- verified: yes"), "{md}");
    s.change_payload_byte();
    let md = cli(&args).stdout;
    assert!(md.contains("- verified: **no**"), "{md}");
    assert!(!md.contains("all digests match"), "{md}");
}
