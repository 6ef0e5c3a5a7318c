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
    // Each payload file says it is as signed.
    let rows = r["files"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(row["as_signed"], true, "{row:#}");
    }
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
fn resources_out_of_the_signers_order_verify_with_a_warning() {
    if !oms::available() {
        return;
    }
    // model-signing lists weights.bin's 16 shards by start (0, 65536,
    // 131072, ...), which is not their names' string order: not flagged.
    let s = oms::signed(How::Shards("p256", 65536));
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(
        findings_of(&r, "oms.manifest"),
        Vec::<&serde_json::Value>::new()
    );
    let mut names = Vec::new();
    // Two shards swapped, the subject's digest taken again over the new
    // order, the statement signed again.
    s.resign(|st| {
        let res = st["predicate"]["resources"].as_array_mut().unwrap();
        res.swap(2, 3);
        names = res
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect();
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for r in res.iter() {
            let hex = r["digest"].as_str().unwrap();
            for i in (0..hex.len()).step_by(2) {
                h.update([u8::from_str_radix(&hex[i..i + 2], 16).unwrap()]);
            }
        }
        let root: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        st["subject"][0]["digest"]["sha256"] = serde_json::Value::from(root);
    });
    assert!(
        names[2].starts_with("weights.bin:") && names[3].starts_with("weights.bin:"),
        "{names:?}"
    );
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["signature"]["verified"], true, "{:#}", r["signature"]);
    let said = findings_of(&r, "oms.manifest");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert_eq!(said[0]["severity"], "warning");
    assert_eq!(said[0]["field"], "predicate.resources[3]");
    let m = said[0]["message"].as_str().unwrap();
    assert!(m.contains(&names[2]) && m.contains(&names[3]), "{m}");
}

#[test]
fn model_signing_orders_nested_paths_by_component_and_so_does_the_check() {
    if !oms::available() {
        return;
    }
    // As text "extra.d/x" sorts before "extra/x" ('.' < '/'); by path
    // component "extra" comes first. model-signing writes the latter.
    let s = oms::signed_prepared(How::Key("p256"), |tmp| {
        let d = tmp.join("model");
        for sub in ["extra", "extra.d"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
            std::fs::write(d.join(sub).join("x"), sub).unwrap();
        }
    });
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["signature"]["verified"], true, "{:#}", r["signature"]);
    assert_eq!(r["signature"]["resources"], 5, "{:#}", r["signature"]);
    assert_eq!(
        findings_of(&r, "oms.manifest"),
        Vec::<&serde_json::Value>::new()
    );
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
    // The manifest gives weights.bin's SHA-256: the pass still hashes it whole.
    assert!(r["files"][0]["sha256"].is_string(), "{:#}", r["files"]);
    assert_eq!(r["files"][0]["ok"], true);
    assert_eq!(r["files"][0]["as_signed"], true);
    s.change_payload_byte();
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 1);
    assert_eq!(r["files"][0]["as_signed"], false, "{:#}", r["files"]);
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

/// (what, tampering, the one error check it must cause). A tampering may
/// return the trust flags to audit with in place of the signer's.
type Tamper = (
    &'static str,
    fn(&Signed) -> Option<Vec<String>>,
    fn(&Signed) -> &'static str,
);

fn tamperings() -> Vec<Tamper> {
    vec![
        (
            "a payload byte changed, the manifest's own hash updated",
            |s| {
                s.change_payload_byte();
                None
            },
            |_| "oms.digest",
        ),
        (
            "a file added",
            |s| {
                std::fs::write(s.dir.join("extra.txt"), "x").unwrap();
                None
            },
            |_| "oms.unsigned",
        ),
        (
            "a file removed",
            |s| {
                std::fs::remove_file(s.dir.join("README.md")).unwrap();
                None
            },
            |_| "oms.missing",
        ),
        (
            "the wrong key (or a root that did not issue the certificate)",
            |s| Some(s.wrong_trust()),
            |s| s.wrong_trust_check(),
        ),
        (
            "an edited statement",
            |s| {
                s.edit_statement();
                None
            },
            |_| "oms.signature",
        ),
    ]
}

#[test]
fn each_tampering_fails_with_its_own_finding_and_the_tool_agrees() {
    if !oms::available() {
        return;
    }
    // Signed once per method; each tampering works on a copy.
    for how in [
        How::Key("p256"),
        How::Key("p384"),
        How::Shards("p256", 65536),
        How::Certificate,
    ] {
        let signed = oms::signed(how);
        // The untouched copy verifies, for us and for the tool: what
        // fails below fails for the tampering alone.
        assert_verified(&signed.copy(), 3);
        for (what, tamper, check) in tamperings() {
            let s = signed.copy();
            let trust = tamper(&s);
            let check = check(&s);
            let (code, r) = match &trust {
                Some(t) => {
                    let mut args = vec!["audit", s.dir.to_str().unwrap(), "--json"];
                    args.extend(t.iter().map(String::as_str));
                    let run = cli(&args);
                    (run.code, run.json())
                }
                None => s.audit(&[]),
            };
            assert_eq!(code, 1, "{how:?} {what}: {r:#}");
            let mut errs = errors(&r);
            errs.dedup();
            assert_eq!(errs, [check], "{how:?} {what}: {r:#}");
            assert_eq!(r["signature"]["verified"], false);
            let weights = &r["files"][0];
            assert_eq!(weights["file"], "weights.bin");
            if check == "oms.digest" {
                // The manifest was rewritten to agree: only the signature
                // tells the file is not what was signed.
                assert_eq!(weights["ok"], true, "{how:?} {what}: {weights:#}");
                assert_eq!(weights["as_signed"], false, "{how:?} {what}");
            } else if check == "oms.certificate" {
                // The envelope verifies with the bundle's own leaf, which
                // no given root issued: the chain is what is not verified,
                // and a signer nobody vouched for vouches for no file.
                let sig = &r["signature"];
                assert_eq!(sig["signature_valid"], true, "{how:?} {what}: {sig:#}");
                assert_eq!(
                    sig["not_verified"],
                    serde_json::json!(["the certificate chain"])
                );
                assert!(
                    weights["as_signed"].is_null(),
                    "{how:?} {what}: {weights:#}"
                );
            } else if check == "oms.signature" || check == "oms.key" {
                // Its digest matches a statement that does not verify
                // (or not with the key given): it vouches for nothing.
                assert_ne!(r["signature"]["signature_valid"], true, "{how:?} {what}");
                assert!(
                    weights["as_signed"].is_null(),
                    "{how:?} {what}: {weights:#}"
                );
            } else {
                // Another file was added or removed: this one is as signed.
                assert_eq!(weights["as_signed"], true, "{how:?} {what}");
            }
            assert!(
                !s.tool_accepts_with(trust.as_deref()),
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
fn rsa_and_ecdsa_roots_verify_a_chain_and_a_forged_root_fails_as_for_the_tool() {
    if !oms::available() {
        return;
    }
    for how in [How::Certificate, How::CertificateRsa] {
        let s = oms::signed(how);
        assert_verified(&s, 3);
        let (_, r) = s.audit(&[]);
        assert_eq!(r["signature"]["issuer"], "CN=bundlescope test root");
        // A root of the same name on another key: the leaf's signature
        // (RSA PKCS #1 v1.5 under the RSA root) is what tells them apart.
        let forged = s.work.join("pki/forged_root.pem");
        let forged = forged.to_str().unwrap();
        let run = cli(&[
            "audit",
            s.dir.to_str().unwrap(),
            "--json",
            "--cert-root",
            forged,
        ]);
        assert_eq!(run.code, 1, "{how:?}");
        let r = run.json();
        assert_eq!(errors(&r), ["oms.certificate"], "{how:?}: {r:#}");
        assert_eq!(r["signature"]["verified"], false);
        let out = oms::oms(&["verify-cert", s.dir.to_str().unwrap(), forged]).unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("FAIL"),
            "{how:?}: the tool accepts a forged root"
        );
    }
}

#[test]
fn an_rsa_timestamp_authority_gives_a_signing_time_as_for_sigstore_python() {
    if !oms::available() {
        return;
    }
    // (defect, whether it verifies): sha256WithRSAEncryption, the bare
    // rsaEncryption OID with the digest from the signer's digest
    // algorithm, and a signature by another RSA key.
    for (defect, sound) in [
        ("tsa-rsa", true),
        ("tsa-rsa-bare", true),
        ("tsa-rsa-sig", false),
    ] {
        let (dir, root, _tmp) = sigstore_v2(Some(defect));
        let (code, r) = audit_sigstore(&dir, &root);
        let python = sigstore_python_accepts_chain(&dir, &root);
        assert_eq!(python, sound, "{defect}: sigstore-python");
        if sound {
            assert_sigstore_verified(code, &r);
            let times = r["signature"]["signing_times"].as_array().unwrap();
            assert_eq!(times.len(), 1, "{defect}: {r:#}");
        } else {
            assert_fails_with(
                code,
                &r,
                Some(defect),
                "oms.timestamp",
                "verificationMaterial.timestampVerificationData.rfc3161Timestamps[0].signedTimestamp",
                "does not verify with the RSA-2048 key of",
            );
        }
    }
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
    // The digests match, but a statement nobody checked vouches for nothing.
    assert!(r["files"][0]["as_signed"].is_null(), "{:#}", r["files"]);

    // --ignore-unsigned accepts an added file, and lists it.
    std::fs::write(s.dir.join("notes.txt"), "x").unwrap();
    let (code, r) = s.audit(&["--ignore-unsigned"]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(
        r["signature"]["unsigned_files"],
        serde_json::json!(["notes.txt"])
    );
    // Accepted, but the headline still says it.
    let key = s.work.join("pub.pem");
    let text = cli(&[
        "audit",
        s.dir.to_str().unwrap(),
        "--ignore-unsigned",
        "--key",
        key.to_str().unwrap(),
    ])
    .stdout;
    assert!(
        text.contains("all digests match; 1 file in the folder is not signed"),
        "{text}"
    );

    std::fs::remove_file(s.dir.join("model.sig")).unwrap();
    let run = cli(&["audit", s.dir.to_str().unwrap(), "--json"]);
    assert!(run.json()["signature"].is_null());
    assert!(run.json()["files"][0]["as_signed"].is_null());
    let text = cli(&["audit", s.dir.to_str().unwrap()]).stdout;
    assert!(text.contains("signature: unsigned"), "{text}");
}

/// A sample signed the Sigstore way (see oms.py sigstore-like) with one
/// part of its log entry wrong (`defect`); returns the folder, the trusted
/// root, and the temporary folder that holds them.
fn sigstore_like(defect: Option<&str>) -> (std::path::PathBuf, String, tempfile::TempDir) {
    sigstore_signed("sigstore-like", defect)
}

/// The same, logged the Rekor v2 way (oms.py sigstore-v2): a hashedrekord
/// 0.0.2 entry under an Ed25519 checkpoint, the signing time from an RFC
/// 3161 timestamp.
fn sigstore_v2(defect: Option<&str>) -> (std::path::PathBuf, String, tempfile::TempDir) {
    sigstore_signed("sigstore-v2", defect)
}

fn sigstore_signed(
    how: &str,
    defect: Option<&str>,
) -> (std::path::PathBuf, String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    assert_eq!(cli(&["sample", dir.to_str().unwrap()]).code, 0);
    let out = tmp.path().join("sg");
    let mut args = vec![how, dir.to_str().unwrap(), out.to_str().unwrap()];
    args.extend(defect);
    oms::oms_ok(&args);
    let root = out.join("trusted_root.json").display().to_string();
    (dir, root, tmp)
}

/// Whether sigstore-python's own checks accept the signed times and the
/// log entry.
fn sigstore_python_accepts(dir: &std::path::Path, root: &str) -> bool {
    let out = oms::oms(&["sigstore-verify", dir.to_str().unwrap(), root]).unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

/// The same, and the leaf's chain at every signed time.
fn sigstore_python_accepts_chain(dir: &std::path::Path, root: &str) -> bool {
    let out = oms::oms(&["sigstore-verify", dir.to_str().unwrap(), root, "chain"]).unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

/// `audit DIR --json --trusted-root ROOT` of a Sigstore-signed sample
/// whose DSSE signature is sound: (exit code, report).
fn audit_sigstore(dir: &std::path::Path, root: &str) -> (i32, serde_json::Value) {
    let run = cli(&[
        "audit",
        dir.to_str().unwrap(),
        "--json",
        "--trusted-root",
        root,
    ]);
    let r = run.json();
    let sig = &r["signature"];
    assert_eq!(sig["method"], "sigstore");
    assert_eq!(sig["signature_valid"], true, "{sig:#}");
    (run.code, r)
}

/// The sound Sigstore case: exit 0, verified, nothing left unverified.
fn assert_sigstore_verified(code: i32, r: &serde_json::Value) {
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["signature"]["verified"], true, "{r:#}");
    assert!(
        r["signature"]["not_verified"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{r:#}"
    );
}

/// A broken case: exit 1, not verified, `check` the only error id, and an
/// error of it on `field` whose message contains `words`.
fn assert_fails_with(
    code: i32,
    r: &serde_json::Value,
    defect: Option<&str>,
    check: &str,
    field: &str,
    words: &str,
) {
    assert_eq!(code, 1, "{defect:?}: {r:#}");
    assert_eq!(r["signature"]["verified"], false, "{defect:?}");
    let mut errs = errors(r);
    errs.dedup();
    assert_eq!(errs, [check], "{defect:?}: {r:#}");
    let hits = findings_of(r, check);
    assert!(
        hits.iter().any(|f| f["field"] == field
            && f["severity"] == "error"
            && f["message"].as_str().unwrap().contains(words)),
        "{defect:?}: no {check} finding on {field} saying {words:?}: {hits:#?}"
    );
}

/// A copy of the trusted root `root` (in `tmp`) whose list `key` is empty.
fn root_without(root: &str, tmp: &std::path::Path, key: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(root).unwrap()).unwrap();
    v[key] = serde_json::json!([]);
    let other = tmp.join(format!("no_{key}.json"));
    std::fs::write(&other, v.to_string()).unwrap();
    other.display().to_string()
}

#[test]
fn a_rekor_v2_bundle_verifies_by_its_timestamp_and_each_broken_part_is_named() {
    if !oms::available() {
        return;
    }
    const STAMP: &str =
        "verificationMaterial.timestampVerificationData.rfc3161Timestamps[0].signedTimestamp";
    // (defect, the error check, the field it names, words of the message);
    // sigstore-python's verifier (signed times, log entry, chain at each
    // time) must reach the same verdict on every case.
    let cases: &[(Option<&str>, &str, &str, &str)] = &[
        (None, "", "", ""),
        (
            Some("body"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].canonicalizedBody",
            "data.digest",
        ),
        (
            Some("checkpoint"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].inclusionProof.checkpoint",
            "does not verify with the log's key",
        ),
        (
            Some("tsa-sig"),
            "oms.timestamp",
            STAMP,
            "does not verify with the ECDSA P-256 key of",
        ),
        (
            Some("tsa-imprint"),
            "oms.timestamp",
            STAMP,
            "message imprint",
        ),
        (Some("tsa-digest"), "oms.timestamp", STAMP, "message digest"),
        (
            Some("tsa-unknown"),
            "oms.timestamp",
            STAMP,
            "not the signing certificate of any timestamp authority",
        ),
        (Some("tsa-eku"), "oms.timestamp", STAMP, "timeStamping"),
        // The envelope logged as a dsse 0.0.2 entry: Rekor v2 records DSSE
        // as hashedrekord 0.0.2, and sigstore's verifier refuses this kind.
        (
            Some("dsse-v2"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].canonicalizedBody",
            "its kind is \"dsse\" version \"0.0.2\"",
        ),
        // Stamped (validly) after the signing certificate expired.
        (
            Some("tsa-late"),
            "oms.certificate",
            "verificationMaterial.certificates",
            "not valid at",
        ),
    ];
    for &(defect, check, field, words) in cases {
        let (dir, root, _tmp) = sigstore_v2(defect);
        let (code, r) = audit_sigstore(&dir, &root);
        let python = sigstore_python_accepts_chain(&dir, &root);
        if defect.is_none() {
            assert_sigstore_verified(code, &r);
            let times = r["signature"]["signing_times"].as_array().unwrap();
            assert_eq!(times.len(), 1, "{r:#}");
            assert!(
                times[0]
                    .as_str()
                    .unwrap()
                    .contains("RFC 3161 timestamp by https://tsa.example.com"),
                "{r:#}"
            );
            assert!(python, "sigstore-python rejects the bundle we accept");
            continue;
        }
        assert_fails_with(code, &r, defect, check, field, words);
        assert!(!python, "{defect:?}: sigstore-python accepts the bundle");
        if check == "oms.certificate" {
            // The timestamp and the log are sound; only the chain at the
            // stamped time fails, for sigstore-python too.
            assert!(sigstore_python_accepts(&dir, &root), "{defect:?}");
        }
    }
}

#[test]
fn no_byte_flip_of_a_timestamp_verifies_to_another_time_or_panics() {
    if !oms::available() {
        return;
    }
    use base64::Engine as _;
    use bundlescope::signing::timestamp;
    let (dir, root, _tmp) = sigstore_v2(None);
    let b64 = |s: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(s.as_str().unwrap())
            .unwrap()
    };
    let sig: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("model.sig")).unwrap()).unwrap();
    let der = b64(
        &sig["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"][0]["signedTimestamp"],
    );
    let message = b64(&sig["dsseEnvelope"]["signatures"][0]["sig"]);
    let trusted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&root).unwrap()).unwrap();
    let tsas = timestamp::authorities(&trusted).unwrap();
    let good = timestamp::verify(&der, &message, &tsas).expect("the timestamp verifies");
    // Another message, or no authority: never.
    assert!(timestamp::verify(&der, b"another signature", &tsas).is_err());
    assert!(timestamp::verify(&der, &message, &[]).is_err());
    // Every bit of every byte: an error, or (a change outside what is
    // signed, such as an embedded certificate) the same stamp.
    let mut still = 0;
    for i in 0..der.len() {
        for bit in 0..8 {
            let mut d = der.clone();
            d[i] ^= 1 << bit;
            if let Ok(s) = timestamp::verify(&d, &message, &tsas) {
                assert_eq!(s, good, "byte {i} bit {bit}");
                still += 1;
            }
        }
        // Every truncation.
        assert!(timestamp::verify(&der[..i], &message, &tsas).is_err());
    }
    // Most flips must fail: the TSTInfo, the attributes and the signature
    // are most of the token.
    assert!(
        still < der.len() * 8 / 2,
        "{still} of {} flips verified",
        der.len() * 8
    );
}

#[test]
fn a_timestamp_without_an_authority_in_the_trusted_root_is_not_a_signing_time() {
    if !oms::available() {
        return;
    }
    let (dir, root, tmp) = sigstore_v2(None);
    let other = root_without(&root, tmp.path(), "timestampAuthorities");
    let run = cli(&[
        "audit",
        dir.to_str().unwrap(),
        "--json",
        "--trusted-root",
        &other,
    ]);
    let r = run.json();
    assert_eq!(run.code, 1, "{r:#}");
    assert_eq!(r["signature"]["verified"], false);
    assert_eq!(errors(&r), ["oms.timestamp"], "{r:#}");
    let hits = findings_of(&r, "oms.timestamp");
    assert!(
        hits[0]["message"]
            .as_str()
            .unwrap()
            .contains("lists no timestamp authority"),
        "{hits:#?}"
    );
    // sigstore-python refuses it too.
    assert!(!sigstore_python_accepts(&dir, &other));
}

#[test]
fn a_sigstore_bundle_shows_identity_and_says_what_was_not_verified() {
    if !oms::available() {
        return;
    }
    let (dir, _root, _tmp) = sigstore_like(None);
    let r = cli(&["audit", dir.to_str().unwrap(), "--json"]).json();
    let sig = &r["signature"];
    assert_eq!(sig["method"], "sigstore");
    assert_eq!(sig["identity"], "signer@example.com");
    assert_eq!(sig["issuer"], "https://accounts.example.com");
    assert_eq!(sig["signature_valid"], true);
    assert_eq!(sig["verified"], false, "no trusted root: {sig:#}");
    let nv: Vec<&str> = sig["not_verified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(nv.iter().any(|n| n.contains("transparency-log")), "{nv:?}");
    assert!(nv.iter().any(|n| n.contains("chain")), "{nv:?}");
    assert!(errors(&r).is_empty(), "{r:#}");
}

#[test]
fn a_sigstore_log_entry_verifies_against_the_trusted_root_and_each_broken_part_is_named() {
    if !oms::available() {
        return;
    }
    // (defect, the error check, the field it names); sigstore-python's own
    // log checks must agree on every part of the entry.
    let cases: &[(Option<&str>, &str, &str)] = &[
        (None, "", ""),
        (
            Some("body"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].canonicalizedBody",
        ),
        (
            Some("set"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].inclusionPromise.signedEntryTimestamp",
        ),
        (
            Some("proof"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].inclusionProof",
        ),
        (
            Some("checkpoint"),
            "oms.tlog",
            "verificationMaterial.tlogEntries[0].inclusionProof.checkpoint",
        ),
        // Logged (validly) after the certificate expired: the log is
        // fine, the certificate was not valid at the integration time.
        (
            Some("time"),
            "oms.certificate",
            "verificationMaterial.certificates",
        ),
    ];
    for &(defect, check, field) in cases {
        let (dir, root, _tmp) = sigstore_like(defect);
        let (code, r) = audit_sigstore(&dir, &root);
        let python = sigstore_python_accepts(&dir, &root);
        if defect.is_none() {
            assert_sigstore_verified(code, &r);
            assert_eq!(r["signature"]["files_checked"], 2);
            assert!(python, "sigstore-python rejects the entry we accept");
            continue;
        }
        if check == "oms.tlog" {
            assert_fails_with(code, &r, defect, check, field, "");
            assert!(!python, "{defect:?}: sigstore-python accepts the entry");
        } else {
            assert_fails_with(code, &r, defect, check, field, "not valid at");
            assert!(python, "{defect:?}: the log entry itself is sound");
        }
    }
}

#[test]
fn a_log_the_trusted_root_does_not_list_is_named() {
    if !oms::available() {
        return;
    }
    let (dir, root, tmp) = sigstore_like(None);
    let other = root_without(&root, tmp.path(), "tlogs");
    let run = cli(&[
        "audit",
        dir.to_str().unwrap(),
        "--json",
        "--trusted-root",
        &other,
    ]);
    let r = run.json();
    assert_eq!(run.code, 1);
    assert_eq!(errors(&r), ["oms.tlog"]);
    let hits = findings_of(&r, "oms.tlog");
    assert_eq!(
        hits[0]["field"],
        "verificationMaterial.tlogEntries[0].logId"
    );
    assert!(
        hits[0]["message"]
            .as_str()
            .unwrap()
            .contains("does not list"),
        "{hits:#?}"
    );
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
    // The text summary's file line: the manifest was rewritten to agree
    // with the changed bytes, the signature was not.
    args.retain(|a| *a != "--markdown");
    let text = cli(&args).stdout;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("weights.bin"))
        .unwrap_or_else(|| panic!("no weights.bin line: {text}"));
    assert!(line.ends_with("NOT AS SIGNED"), "{line}");
}

#[test]
fn a_single_signed_file_verifies_and_the_tool_agrees() {
    if !oms::available() {
        return;
    }
    // model-signing given one file names its resource "." (shards ".:a:b").
    for shard in [None, Some("4096")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("g");
        assert_eq!(
            cli(&["sample", dir.to_str().unwrap(), "--format", "gguf"]).code,
            0
        );
        let file = dir.join("model.gguf");
        // Another file beside it: a single-file signature does not cover it.
        std::fs::write(dir.join("notes.txt"), "unsigned, and not the model").unwrap();
        let w = |n: &str| tmp.path().join(n).display().to_string();
        oms::oms_ok(&["keygen", "p256", &w("k.pem"), &w("pub.pem")]);
        let f = file.to_str().unwrap();
        let k = w("k.pem");
        let mut sign = vec!["sign-key", f, &k];
        let mut verify = vec!["verify-key".to_string(), f.to_string(), w("pub.pem")];
        if let Some(s) = shard {
            sign.push(s);
            verify.push(s.to_string());
        }
        oms::oms_ok(&sign);
        assert!(dir.join("model.sig").is_file());
        let tool = || {
            let v: Vec<&str> = verify.iter().map(String::as_str).collect();
            String::from_utf8_lossy(&oms::oms(&v).unwrap().stdout).trim() == "ok"
        };
        let audit = |target: &std::path::Path| {
            let run = cli(&[
                "audit",
                target.to_str().unwrap(),
                "--json",
                "--key",
                &w("pub.pem"),
            ]);
            (run.code, run.json())
        };
        let (code, r) = audit(&file);
        assert_eq!(code, 0, "{shard:?}: {r:#}");
        let sig = &r["signature"];
        assert_eq!(sig["verified"], true, "{sig:#}");
        assert_eq!(sig["files_checked"], 1);
        assert_eq!(r["files"][0]["as_signed"], true, "{shard:?}");
        assert!(tool(), "{shard:?}: the tool rejects what we accept");
        // The text summary's file line: a GGUF claims no digest of its
        // own, the signature's matched.
        let text = cli(&["audit", f, "--key", &w("pub.pem")]).stdout;
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("model.gguf"))
            .unwrap_or_else(|| panic!("no model.gguf line: {text}"));
        assert!(line.ends_with("  as signed"), "{shard:?}: {line}");
        // Nothing expects the GGUF's whole digest: with shards the pass
        // leaves it out (the shards cover every byte); by files it is the
        // signed digest itself.
        assert_eq!(
            r["files"][0]["sha256"].is_null(),
            shard.is_some(),
            "{shard:?}: {:#}",
            r["files"]
        );

        // The folder is not what was signed.
        let (code, r) = audit(&dir);
        assert_eq!(code, 1);
        assert_eq!(errors(&r), ["oms.manifest"], "{r:#}");

        // One byte of the file changed: its digest (or shard) no longer matches.
        let mut b = std::fs::read(&file).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        std::fs::write(&file, &b).unwrap();
        let (code, r) = audit(&file);
        assert_eq!(code, 1);
        let digest = findings_of(&r, "oms.digest");
        assert!(
            digest.iter().any(|f| f["field"] == "model.gguf"
                && f["message"].as_str().unwrap().starts_with("model.gguf")),
            "{shard:?}: {r:#}"
        );
        assert_eq!(r["signature"]["verified"], false);
        assert_eq!(r["files"][0]["as_signed"], false, "{shard:?}");
        assert!(!tool(), "{shard:?}: the tool accepts a changed file");
    }
}

#[test]
fn the_upstream_test_vectors_verify_offline_and_the_tool_agrees() {
    use bundlescope::signing::{self, TrustPaths, folder};
    use bundlescope::util::CancelToken;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oms/vectors");
    let key = root.join("signing-key-pub.pem");
    let (trust, problems) = signing::Trust::load(&TrustPaths {
        keys: vec![key.clone()],
        ..Default::default()
    });
    assert!(problems.is_empty(), "{problems:?}");
    let cancel = CancelToken::default();
    // (vector, the single signed file, or None for the folder)
    for (v, single) in [
        ("v0.3.1-elliptic-key", Some("signme-1")),
        ("v1.0.0-elliptic-key", Some("signme-1")),
        ("v1.1.0-elliptic-key", None),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(v);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(root.join(v)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        let sig = dir.join("model.sig");
        let compare = |dir: &std::path::Path| {
            let c = signing::check_file(&sig, &trust);
            assert!(!signing::has_errors(&c.findings), "{v}: {:?}", c.findings);
            assert_eq!(c.report.signature_valid, Some(true), "{v}");
            assert!(c.report.verified, "{v}: {:?}", c.report);
            let st = c.statement.unwrap();
            assert_eq!(st.single_file, single.is_some(), "{v}");
            match single {
                Some(f) => folder::compare_file(&dir.join(f), &st, &Default::default(), &cancel),
                None => folder::compare(dir, &st, Some(&sig), &Default::default(), false, &cancel),
            }
        };
        let target = dir.join(single.unwrap_or(""));
        let tool = || {
            if !oms::available() {
                return None;
            }
            let out = oms::oms(&[
                "verify-key",
                target.to_str().unwrap(),
                key.to_str().unwrap(),
            ])
            .unwrap();
            // The tool warns first (on stdout) about the pre-1.1 key format.
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            Some(text.lines().last() == Some("ok"))
        };
        // The 1.1.0 folder signature ignores "ignore-me": one there changes nothing.
        if single.is_none() {
            std::fs::write(dir.join("ignore-me"), "not signed").unwrap();
        }
        let cmp = compare(&dir);
        assert!(cmp.findings.is_empty(), "{v}: {:?}", cmp.findings);
        assert_eq!(
            cmp.files_checked,
            if single.is_some() { 1 } else { 2 },
            "{v}"
        );
        if single.is_some() {
            assert_ne!(tool(), Some(false), "{v}: model-signing rejects it");
        }
        // One changed byte fails, with the file named.
        let f = dir.join("signme-1");
        std::fs::write(&f, "signme-X\n").unwrap();
        let cmp = compare(&dir);
        let digest: Vec<_> = cmp
            .findings
            .iter()
            .filter(|f| f.check.as_str() == "oms.digest")
            .collect();
        assert_eq!(digest.len(), 1, "{v}: {:?}", cmp.findings);
        assert_eq!(digest[0].field.as_deref(), Some("signme-1"), "{v}");
        if single.is_some() {
            assert_ne!(
                tool(),
                Some(true),
                "{v}: model-signing accepts a changed file"
            );
        }
    }
}

#[test]
fn blake2b_and_blake3_signatures_verify_and_a_changed_byte_is_a_digest_finding() {
    if !oms::available() {
        return;
    }
    use oms::Hashing;
    // (model-signing's options, how the report names the serialization)
    let cases = [
        (Hashing::files("blake2"), "files, blake2b"),
        (
            Hashing {
                shard_size: Some(65536),
                ..Hashing::files("blake2")
            },
            "shards of 65536 bytes, blake2b",
        ),
        (Hashing::files("blake3"), "files, blake3"),
    ];
    for (h, serialization) in cases {
        let s = oms::signed(How::Hashing(h));
        // What the tool wrote is what the case says.
        let sig: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s.dir.join("model.sig")).unwrap()).unwrap();
        use base64::Engine as _;
        let payload = base64::engine::general_purpose::STANDARD
            .decode(sig["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        let st: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        let want = if h.algorithm == "blake2" {
            "blake2b"
        } else {
            h.algorithm
        };
        assert_eq!(st["predicate"]["serialization"]["hash_type"], want, "{h:?}");

        assert_verified(&s, 3);
        let (_, r) = s.audit(&[]);
        assert_eq!(r["signature"]["serialization"], serialization, "{h:?}");
        let shards = h.shard_size.is_some();
        // weights.bin (1045504 bytes) is 16 shards, manifest.json and README.md one each.
        assert_eq!(r["signature"]["resources"], if shards { 18 } else { 3 });

        s.change_payload_byte();
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 1, "{h:?}: {r:#}");
        assert_eq!(errors(&r), ["oms.digest"], "{h:?}: {r:#}");
        assert_eq!(r["signature"]["verified"], false);
        let digest = findings_of(&r, "oms.digest");
        let named = if shards {
            "weights.bin:0:65536"
        } else {
            "weights.bin"
        };
        assert!(
            digest.iter().any(|f| f["severity"] == "error"
                && f["message"].as_str().unwrap().starts_with(named)
                && f["message"].as_str().unwrap().contains(want)),
            "{h:?}: {digest:#?}"
        );
        // The manifest agrees with the changed bytes; the signature does not.
        assert_eq!(r["files"][0]["ok"], true, "{h:?}");
        assert_eq!(r["files"][0]["as_signed"], false, "{h:?}");
        assert!(!s.tool_accepts(), "{h:?}: the real tool accepts it");
    }
}

#[test]
fn a_signature_outside_the_folder_verifies_with_signature_flag() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let outside = s.work.join("elsewhere.sig");
    std::fs::rename(s.dir.join("model.sig"), &outside).unwrap();
    let flag = ["--signature", outside.to_str().unwrap()];
    let (code, r) = s.audit(&flag);
    assert_eq!(code, 0, "{r:#}");
    let sig = &r["signature"];
    assert_eq!(sig["verified"], true, "{sig:#}");
    assert_eq!(sig["files_checked"], 3, "{sig:#}");
    assert!(
        sig["file"].as_str().unwrap().ends_with("elsewhere.sig"),
        "{sig:#}"
    );
    assert_eq!(r["files"][0]["as_signed"], true);
    // Without the flag the folder is unsigned: the key has nothing to check.
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 1, "{r:#}");
    assert!(r["signature"].is_null(), "{r:#}");
    // The outside signature still checks every digest in the folder.
    s.change_payload_byte();
    let (code, r) = s.audit(&flag);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(errors(&r), ["oms.digest"], "{r:#}");
    assert_eq!(r["signature"]["verified"], false);
}

/// `audit DIR --signature MISSING`: (exit code, JSON report, the text
/// report's stdout and stderr).
fn audit_missing_signature(s: &Signed, missing: &str) -> (i32, serde_json::Value, String) {
    let (code, r) = s.audit(&["--signature", missing]);
    let mut args = vec!["audit", s.dir.to_str().unwrap(), "--signature", missing];
    args.extend(s.trust.iter().map(String::as_str));
    let run = cli(&args);
    assert_eq!(run.code, code);
    (code, r, format!("{}{}", run.stdout, run.stderr))
}

#[test]
fn a_missing_signature_path_is_an_error_that_names_it() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let missing = s.work.join("no-such.sig");
    let missing = missing.to_str().unwrap();
    let (code, r, text) = audit_missing_signature(&s, missing);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(errors(&r), ["oms.bundle"], "{r:#}");
    assert_ne!(r["signature"]["verified"], true, "{r:#}");
    let hits = findings_of(&r, "oms.bundle");
    assert!(
        hits.iter()
            .any(|f| f["severity"] == "error" && f["message"].as_str().unwrap().contains(missing)),
        "{hits:#?}"
    );
    assert!(text.contains(missing), "{text}");
    // Nothing was read: the headline does not call the folder signed.
    assert!(
        text.contains(&format!("signature NOT verified ({missing})")),
        "{text}"
    );
    assert!(!text.contains("signature: signed"), "{text}");
}

#[test]
fn a_missing_signature_path_is_not_called_a_payload_file() {
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let missing = s.work.join("no-such.sig");
    let (_, r, text) = audit_missing_signature(&s, missing.to_str().unwrap());
    for f in findings_of(&r, "oms.bundle") {
        let m = f["message"].as_str().unwrap();
        assert!(m.contains("signature"), "{m}");
        assert!(!m.contains("payload"), "{m}");
    }
    assert!(!text.contains("payload file"), "{text}");
}

/// Sets the bundle's `mediaType`.
fn set_media_type(s: &Signed, media_type: &str) {
    let p = s.dir.join("model.sig");
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    b["mediaType"] = serde_json::Value::from(media_type);
    std::fs::write(&p, serde_json::to_vec(&b).unwrap()).unwrap();
}

#[test]
fn bundle_media_types_v0_1_to_v0_3_verify_and_another_is_refused() {
    if !oms::available() {
        return;
    }
    let signed = oms::signed(How::Key("p256"));
    for version in ["0.1", "0.2", "0.3"] {
        let s = signed.copy();
        let media_type = format!("application/vnd.dev.sigstore.bundle+json;version={version}");
        set_media_type(&s, &media_type);
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 0, "{media_type}: {r:#}");
        let sig = &r["signature"];
        assert_eq!(sig["verified"], true, "{media_type}: {sig:#}");
        assert_eq!(sig["media_type"], media_type.as_str());
        assert_eq!(sig["files_checked"], 3);
        assert!(errors(&r).is_empty(), "{r:#}");
        // Still every digest checked.
        s.change_payload_byte();
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 1, "{media_type}");
        assert_eq!(errors(&r), ["oms.digest"], "{media_type}: {r:#}");
    }
    // A version this reader does not know is a bundle error.
    let s = signed.copy();
    set_media_type(&s, "application/vnd.dev.sigstore.bundle+json;version=0.4");
    let (code, r) = s.audit(&[]);
    assert_eq!(code, 1);
    assert_eq!(errors(&r), ["oms.bundle"], "{r:#}");
    assert_eq!(findings_of(&r, "oms.bundle")[0]["field"], "mediaType");
}

/// Rewrites the signed v1.0 statement as model-signing 0.2 wrote it (the
/// `Digests/v0.1` predicate: one subject per file, its SHA-256 in the
/// subject's digest) and signs it again with the sample's key.
fn to_digests_v0_1(s: &Signed) {
    s.resign(|st| {
        let subjects: Vec<serde_json::Value> = st["predicate"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert_eq!(r["algorithm"], "sha256");
                serde_json::json!({
                    "name": r["name"],
                    "digest": {"sha256": r["digest"]},
                    "annotations": {"actual_hash_algorithm": "file-sha256"},
                })
            })
            .collect();
        *st = serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": subjects,
            "predicateType": "https://model_signing/Digests/v0.1",
            "predicate": {"unused": "Unused, just passed due to API requirements"},
        });
    });
}

#[test]
fn the_pre_1_0_digests_predicate_verifies_and_is_labelled_read_for_compatibility() {
    if !oms::available() {
        return;
    }
    let signed = oms::signed(How::Key("p256"));
    // Under the current bundle type, and under the v0.1 bundle type of its time.
    for media_type in [
        None,
        Some("application/vnd.dev.sigstore.bundle+json;version=0.1"),
    ] {
        let s = signed.copy();
        to_digests_v0_1(&s);
        if let Some(m) = media_type {
            set_media_type(&s, m);
        }
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 0, "{media_type:?}: {r:#}");
        let sig = &r["signature"];
        assert_eq!(sig["verified"], true, "{media_type:?}: {sig:#}");
        assert_eq!(sig["files_checked"], 3, "{sig:#}");
        assert_eq!(sig["resources"], 3, "{sig:#}");
        assert_eq!(
            sig["predicate_type"],
            "https://model_signing/Digests/v0.1 (pre-1.0 format, read for compatibility)"
        );
        let said = findings_of(&r, "oms.statement");
        assert!(
            said.iter().any(|f| f["severity"] == "info"
                && f["field"] == "predicateType"
                && f["message"]
                    .as_str()
                    .unwrap()
                    .contains("read for compatibility")),
            "{media_type:?}: {said:#?}"
        );
        assert_eq!(r["files"][0]["as_signed"], true);
        // Its digests are compared as the new predicate's are.
        s.change_payload_byte();
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 1, "{media_type:?}");
        assert_eq!(errors(&r), ["oms.digest"], "{media_type:?}: {r:#}");
        assert_eq!(r["files"][0]["as_signed"], false);
    }
}

#[test]
fn allow_symlinks_and_ignore_paths_verify_and_a_changed_link_target_is_a_digest_finding() {
    if !oms::available() {
        return;
    }
    use oms::Hashing;
    // A link to a file outside the folder, signed through the link; a
    // file and a folder the signature ignores.
    let prepare = |tmp: &std::path::Path| {
        std::fs::write(tmp.join("outside.txt"), "bytes outside the folder\n").unwrap();
        std::os::unix::fs::symlink("../outside.txt", tmp.join("model/linked.txt")).unwrap();
        std::fs::write(tmp.join("model/scratch.log"), "not signed\n").unwrap();
        std::fs::create_dir(tmp.join("model/cache")).unwrap();
        std::fs::write(tmp.join("model/cache/a.bin"), [1u8; 16]).unwrap();
    };
    for shard_size in [None, Some(65536)] {
        let h = Hashing {
            shard_size,
            allow_symlinks: true,
            ignore: &["scratch.log", "cache"],
            ..Hashing::files("sha256")
        };
        let s = oms::signed_prepared(How::Hashing(h), prepare);
        // README.md, linked.txt, manifest.json, weights.bin.
        assert_verified(&s, 4);
        let (_, r) = s.audit(&[]);
        let sig = &r["signature"];
        assert!(
            sig["unsigned_files"].as_array().unwrap().is_empty(),
            "{sig:#}"
        );

        // What the signature ignores may change.
        std::fs::write(s.dir.join("scratch.log"), "changed, still not signed\n").unwrap();
        std::fs::write(s.dir.join("cache/b.bin"), [2u8; 16]).unwrap();
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 0, "{h:?}: {r:#}");
        assert_eq!(r["signature"]["verified"], true);
        assert!(s.tool_accepts(), "{h:?}: the tool rejects ignored changes");

        // The link's target is what was signed (its length kept, so that
        // by shards too only a digest can tell).
        let target = s.dir.parent().unwrap().join("outside.txt");
        std::fs::write(&target, "BYTES outside the folder\n").unwrap();
        let (code, r) = s.audit(&[]);
        assert_eq!(code, 1, "{h:?}: {r:#}");
        assert_eq!(errors(&r), ["oms.digest"], "{h:?}: {r:#}");
        assert_eq!(r["signature"]["verified"], false);
        let digest = findings_of(&r, "oms.digest");
        assert!(
            digest
                .iter()
                .any(|f| f["message"].as_str().unwrap().starts_with("linked.txt")),
            "{h:?}: {digest:#?}"
        );
        assert!(
            !s.tool_accepts(),
            "{h:?}: the tool accepts a changed target"
        );
    }
}

/// A key-method bundle that carries the key whole (`publicKey.rawBytes`,
/// its DER) instead of a hint names it by the same fingerprint a hint
/// gives, the SHA-256 of the key's PEM file: with no key the warning says
/// it, with the right key it verifies, and a wrong key is an `oms.key`
/// error on `rawBytes` that names both fingerprints.
#[test]
fn a_bundle_that_carries_its_key_names_it_as_a_hint_would() {
    use base64::Engine as _;
    if !oms::available() {
        return;
    }
    let s = oms::signed(How::Key("p256"));
    let pem = std::fs::read_to_string(s.work.join("pub.pem")).unwrap();
    let pem_sha = bundlescope::format::sha256_hex(pem.as_bytes());
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    let sig = s.dir.join("model.sig");
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&sig).unwrap()).unwrap();
    let pk = &mut b["verificationMaterial"]["publicKey"];
    assert_eq!(
        pk["hint"],
        pem_sha.as_str(),
        "the tool's hint is the PEM's SHA-256"
    );
    *pk = serde_json::json!({
        "rawBytes": base64::engine::general_purpose::STANDARD.encode(&der)
    });
    std::fs::write(&sig, serde_json::to_vec(&b).unwrap()).unwrap();

    let run = cli(&["audit", s.dir.to_str().unwrap(), "--json"]);
    let r = run.json();
    assert_eq!(r["signature"]["key_hint"], pem_sha.as_str(), "{r:#}");
    let w = findings_of(&r, "oms.key");
    assert!(
        w.iter().any(|f| f["message"]
            .as_str()
            .unwrap()
            .contains(&format!("carries the key itself, fingerprint {pem_sha}"))),
        "{w:#?}"
    );
    let text = cli(&["audit", s.dir.to_str().unwrap()]).stdout;
    assert!(
        text.contains(&format!("key hint {}", &pem_sha[..16])),
        "{text}"
    );

    let (code, r) = s.audit(&[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["signature"]["verified"], true);
    assert_eq!(r["signature"]["key_fingerprint"], pem_sha.as_str());

    let wrong = s.wrong_trust();
    let mut args = vec!["audit", s.dir.to_str().unwrap(), "--json"];
    args.extend(wrong.iter().map(String::as_str));
    let run = cli(&args);
    assert_eq!(run.code, 1);
    let r = run.json();
    assert_eq!(errors(&r), ["oms.key"], "{r:#}");
    let e = findings_of(&r, "oms.key")[0];
    assert_eq!(e["field"], "verificationMaterial.publicKey.rawBytes");
    assert!(e["message"].as_str().unwrap().contains(&pem_sha), "{e:#}");
}
