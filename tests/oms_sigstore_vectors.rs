//! Real Sigstore signatures: the keyless (Fulcio certificate, Rekor log,
//! RFC 3161 timestamp) `model.sig` files that past releases of the
//! reference signer made and that `sigstore/model-transparency` keeps under
//! `scripts/tests/` (copied to tests/oms/vectors/sigstore/, see its
//! README). They are verified offline against Sigstore's production
//! trusted root as shipped inside the sigstore package that model-signing
//! installs (`.pydeps-oms`). Their certificates expired minutes after
//! signing, so they verify only at the signing time the log and the
//! timestamps prove.
//!
//! Each vector's files are put into a sample bundle (audit needs a bundle;
//! the sample's own files are not signed, hence `--ignore-unsigned`) in a
//! folder named as upstream's (the statement's subject). What the report
//! says is checked against the certificate as parsed by Python's
//! `cryptography`, and the reference verifier (model-signing, given the
//! same root) is asked too.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::{cli, error_checks, findings_of, oms, require_or_skip};

/// Sigstore's production TUF store inside the sigstore package.
const PRODUCTION_STORE: &str = "sigstore/_store/https%3A%2F%2Ftuf-repo-cdn.sigstore.dev";

/// The sample's own files, which no vector signs.
const SAMPLE_FILES: [&str; 2] = ["manifest.json", "weights.bin"];

/// The production store (holding `trusted_root.json`), or None when
/// model-signing or the root is not installed (a skip; in CI a failure).
fn production_store() -> Option<PathBuf> {
    if !oms::available() {
        return None;
    }
    let store = oms::deps().join(PRODUCTION_STORE);
    require_or_skip(
        "Sigstore's production trusted root (.pydeps-oms/sigstore/_store/…/trusted_root.json, \
         shipped by the sigstore package model-signing depends on; scripts/install-mlx.sh)",
        store.join("trusted_root.json").is_file(),
    )
    .then_some(store)
}

/// What the leaf certificate of `sig` says, read by Python's
/// `cryptography` (not by bundlescope).
fn certificate(sig: &Path) -> Value {
    let out = oms::oms(&["leaf-facts", sig.to_str().unwrap()]).expect("model-signing is installed");
    assert!(
        out.status.success(),
        "cert {}: {}",
        sig.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("oms.py leaf-facts prints JSON")
}

/// model-signing's verdict on `dir` with the production root: "ok" or the
/// reason it fails.
fn tool_verdict(store: &Path, work: &Path, dir: &Path, identity: &str, issuer: &str) -> String {
    let out = oms::oms(&[
        "verify-sigstore",
        store.to_str().unwrap(),
        work.to_str().unwrap(),
        dir.to_str().unwrap(),
        identity,
        issuer,
    ])
    .expect("model-signing is installed");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if text.is_empty() {
        String::from_utf8_lossy(&out.stderr).into_owned()
    } else {
        text
    }
}

/// `audit DIR --json --signature DIR/model.sig --ignore-unsigned`, with
/// `--trusted-root ROOT` when given.
fn audit(dir: &Path, root: Option<&Path>) -> (i32, Value) {
    let sig = dir.join("model.sig");
    let mut args = vec![
        "audit",
        dir.to_str().unwrap(),
        "--json",
        "--signature",
        sig.to_str().unwrap(),
        "--ignore-unsigned",
    ];
    if let Some(r) = root {
        args.extend(["--trusted-root", r.to_str().unwrap()]);
    }
    let run = cli(&args);
    (run.code, run.json())
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v:#}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Verifies upstream's `version`-sigstore vector (`rfc3161`: whether its
/// bundle carries an RFC 3161 timestamp), then: without the trusted root
/// it is not verified and says why; one changed byte of a signed file is
/// exactly an `oms.digest` error.
fn check_vector(version: &str, rfc3161: bool) {
    let Some(store) = production_store() else {
        return;
    };
    let root = store.join("trusted_root.json");
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oms/vectors/sigstore")
        .join(version);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(format!("{version}-sigstore"));
    let run = cli(&["sample", dir.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for f in ["model.sig", "signme-1", "signme-2"] {
        std::fs::copy(vectors.join(f), dir.join(f)).unwrap();
    }
    // 1.1.0 signs ignore_paths with "ignore-me" in it: such a file is
    // neither signed nor unsigned.
    if version == "v1.1.0" {
        std::fs::write(dir.join("ignore-me"), "not signed").unwrap();
    }

    let cert = certificate(&dir.join("model.sig"));
    let identity = cert["identities"][0].as_str().expect("a SAN").to_string();
    assert_eq!(
        cert["identities"].as_array().unwrap().len(),
        1,
        "{version}: {cert:#}"
    );
    let issuer = cert["issuer"].as_str().unwrap().to_string();
    let (not_before, not_after) = (
        cert["not_before"].as_str().unwrap(),
        cert["not_after"].as_str().unwrap(),
    );
    // Only the signing time can make it valid.
    assert_eq!(cert["expired"], true, "{version}: {cert:#}");

    // Verified, as the certificate says.
    let (code, r) = audit(&dir, Some(&root));
    let sig = &r["signature"];
    assert_eq!(code, 0, "{version}: {r:#}");
    assert!(error_checks(&r).is_empty(), "{version}: {r:#}");
    assert_eq!(sig["method"], "sigstore", "{version}: {sig:#}");
    assert_eq!(sig["verified"], true, "{version}: {sig:#}");
    assert_eq!(sig["signature_valid"], true, "{version}: {sig:#}");
    assert_eq!(sig["identity"], identity.as_str(), "{version}: {sig:#}");
    assert_eq!(sig["issuer"], issuer.as_str(), "{version}: {sig:#}");
    assert!(
        strings(&sig["not_verified"]).is_empty(),
        "{version}: {sig:#}"
    );
    assert_eq!(
        strings(&sig["certificate_validity"]),
        [not_before, not_after],
        "{version}"
    );
    assert_eq!(sig["resources"], 2, "{version}: {sig:#}");
    assert_eq!(sig["files_checked"], 2, "{version}: {sig:#}");
    assert_eq!(strings(&sig["unsigned_files"]), SAMPLE_FILES, "{version}");
    // The signing times: the log's integrated time (as the bundle has it),
    // each inside the certificate's validity; 1.1.0 adds an RFC 3161 one.
    let times = strings(&sig["signing_times"]);
    for t in cert["integrated"].as_array().unwrap() {
        let t = t.as_str().unwrap();
        assert!(
            times.iter().any(|s| s.starts_with(t) && s.contains("log")),
            "{version}: no log time {t}: {times:?}"
        );
    }
    for t in &times {
        let when = &t[..not_before.len()];
        assert!(
            not_before <= when && when <= not_after,
            "{version}: {t} is outside [{not_before}, {not_after}]"
        );
    }
    assert_eq!(
        times.iter().any(|t| t.contains("RFC 3161")),
        rfc3161,
        "{version}: {times:?}"
    );
    assert_eq!(
        tool_verdict(&store, tmp.path(), &dir, &identity, &issuer),
        "ok",
        "{version}: model-signing rejects it"
    );

    // No trusted root: not verified, and the report says what was not.
    let (_, r) = audit(&dir, None);
    let sig = &r["signature"];
    assert_eq!(sig["method"], "sigstore", "{version}: {sig:#}");
    assert_eq!(sig["verified"], false, "{version}: {sig:#}");
    let not = strings(&sig["not_verified"]);
    assert!(not.iter().any(|n| n.contains("root")), "{version}: {not:?}");
    assert!(
        not.iter().any(|n| n.contains("transparency-log")),
        "{version}: {not:?}"
    );
    let warned = findings_of(&r, "oms.sigstore");
    assert!(
        warned.iter().any(|f| f["severity"] == "warning"
            && f["message"]
                .as_str()
                .is_some_and(|m| m.contains("--trusted-root"))),
        "{version}: {r:#}"
    );
    // Nothing is wrong with the folder itself.
    assert!(error_checks(&r).is_empty(), "{version}: {r:#}");

    // One byte of a signed file changed: exactly an oms.digest error.
    let f = dir.join("signme-1");
    let mut b = std::fs::read(&f).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(&f, &b).unwrap();
    let (code, r) = audit(&dir, Some(&root));
    let sig = &r["signature"];
    assert_eq!(code, 1, "{version}: {r:#}");
    assert_eq!(error_checks(&r), ["oms.digest"], "{version}: {r:#}");
    let digest = findings_of(&r, "oms.digest");
    assert_eq!(digest.len(), 1, "{version}: {r:#}");
    assert_eq!(digest[0]["severity"], "error");
    assert_eq!(digest[0]["field"], "signme-1", "{version}: {r:#}");
    assert_eq!(sig["verified"], false, "{version}: {sig:#}");
    assert_eq!(sig["signature_valid"], true, "{version}: {sig:#}");
    assert!(!strings(&sig["not_verified"]).is_empty(), "{version}");
    let verdict = tool_verdict(&store, tmp.path(), &dir, &identity, &issuer);
    assert!(
        verdict.starts_with("FAIL"),
        "{version}: model-signing accepts a changed file: {verdict}"
    );
}

#[test]
fn upstream_v0_3_1_sigstore_signature_verifies_offline() {
    check_vector("v0.3.1", false);
}

#[test]
fn upstream_v1_0_0_sigstore_signature_verifies_offline() {
    check_vector("v1.0.0", false);
}

#[test]
fn upstream_v1_0_1_sigstore_signature_verifies_offline() {
    check_vector("v1.0.1", false);
}

#[test]
fn upstream_v1_1_0_sigstore_signature_with_rfc3161_timestamp_verifies_offline() {
    check_vector("v1.1.0", true);
}
