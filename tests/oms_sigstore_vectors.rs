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
use std::process::Command;

use serde_json::Value;

use common::{cli, error_checks, findings_of, oms, python, require_or_skip};

/// Sigstore's production TUF store inside the sigstore package.
const PRODUCTION_STORE: &str = "sigstore/_store/https%3A%2F%2Ftuf-repo-cdn.sigstore.dev";

/// The sample's own files, which no vector signs.
const SAMPLE_FILES: [&str; 2] = ["manifest.json", "weights.bin"];

/// `cert SIG`: what the bundle's leaf certificate says (the identity from
/// its subject alternative names, the issuer from Fulcio's OIDC issuer
/// extension, v2 `1.3.6.1.4.1.57264.1.8` before v1 `.1.1`), its validity,
/// and the log entries' integrated times, formatted as the report does.
/// `verify STORE WORK DIR IDENTITY ISSUER`: model-signing's Sigstore
/// verifier with the store's trusted root and signing config as its trust
/// configuration (no network), prints ok / FAIL.
const HELPER_PY: &str = r#"
import base64, datetime, json, pathlib, sys

def utc(t):
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")

cmd = sys.argv[1]
if cmd == "cert":
    from cryptography import x509
    b = json.loads(pathlib.Path(sys.argv[2]).read_text())
    der = base64.b64decode(b["verificationMaterial"]["certificate"]["rawBytes"])
    c = x509.load_der_x509_certificate(der)
    san = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ids = san.get_values_for_type(x509.RFC822Name) + san.get_values_for_type(
        x509.UniformResourceIdentifier
    )

    def ext(oid):
        try:
            return c.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value.value
        except x509.ExtensionNotFound:
            return None

    v2 = ext("1.3.6.1.4.1.57264.1.8")
    if v2 and v2[0] == 0x0C and v2[1] == len(v2) - 2:
        issuer = v2[2:].decode()
    else:
        issuer = ext("1.3.6.1.4.1.57264.1.1").decode()
    now = datetime.datetime.now(datetime.timezone.utc)
    times = [
        utc(datetime.datetime.fromtimestamp(int(e["integratedTime"]), datetime.timezone.utc))
        for e in b["verificationMaterial"]["tlogEntries"]
    ]
    print(json.dumps({
        "identities": ids,
        "issuer": issuer,
        "not_before": utc(c.not_valid_before_utc),
        "not_after": utc(c.not_valid_after_utc),
        "expired": c.not_valid_after_utc < now,
        "integrated": times,
    }))
elif cmd == "verify":
    import model_signing
    store, work, d, identity, issuer = sys.argv[2:]
    store, d = pathlib.Path(store), pathlib.Path(d)
    config = {
        "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
        "trustedRoot": json.loads((store / "trusted_root.json").read_text()),
        "signingConfig": json.loads((store / "signing_config.v0.2.json").read_text()),
    }
    tc = pathlib.Path(work) / "trust_config.json"
    tc.write_text(json.dumps(config))
    cfg = model_signing.verifying.Config().use_sigstore_verifier(
        identity=identity, oidc_issuer=issuer, trust_config=tc
    )
    ignore = ["model.sig", "manifest.json", "weights.bin", "ignore-me"]
    cfg.set_hashing_config(model_signing.hashing.Config().set_ignored_paths(paths=ignore))
    try:
        cfg.verify(d, d / "model.sig")
    except Exception as e:
        print(f"FAIL {type(e).__name__}: {e}")
        sys.exit(1)
    print("ok")
else:
    raise SystemExit(f"unknown command {cmd}")
"#;

/// Where model-signing and its dependencies are installed.
fn deps() -> PathBuf {
    std::env::var("BUNDLESCOPE_OMS_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join(".pydeps-oms"))
}

/// The production store (holding `trusted_root.json`), or None when
/// model-signing or the root is not installed (a skip; in CI a failure).
fn production_store() -> Option<PathBuf> {
    if !oms::available() {
        return None;
    }
    let store = deps().join(PRODUCTION_STORE);
    require_or_skip(
        "Sigstore's production trusted root (.pydeps-oms/sigstore/_store/…/trusted_root.json, \
         shipped by the sigstore package model-signing depends on; scripts/install-mlx.sh)",
        store.join("trusted_root.json").is_file(),
    )
    .then_some(store)
}

/// Runs [`HELPER_PY`] with the project's Python and `.pydeps-oms`.
fn helper(args: &[&str]) -> std::process::Output {
    let (py, _) = python();
    Command::new(py)
        .arg("-c")
        .arg(HELPER_PY)
        .args(args)
        .env("PYTHONPATH", deps())
        .output()
        .expect("run the Python helper")
}

/// What the leaf certificate of `sig` says, read by Python's
/// `cryptography` (not by bundlescope).
fn certificate(sig: &Path) -> Value {
    let out = helper(&["cert", sig.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "cert {}: {}",
        sig.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the helper prints JSON")
}

/// model-signing's verdict on `dir` with the production root: "ok" or the
/// reason it fails.
fn tool_verdict(store: &Path, work: &Path, dir: &Path, identity: &str, issuer: &str) -> String {
    let out = helper(&[
        "verify",
        store.to_str().unwrap(),
        work.to_str().unwrap(),
        dir.to_str().unwrap(),
        identity,
        issuer,
    ]);
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
