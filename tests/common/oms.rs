//! OMS model-signing fixtures: bundles signed by the real `model-signing`
//! package (installed project-locally into `.pydeps-oms` by
//! scripts/install-mlx.sh), through tests/oms/oms.py.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{cli, python};

/// Runs tests/oms/oms.py with the project's Python and `.pydeps-oms` on its
/// path. None when model-signing is not installed (the caller skips, or
/// fails in CI).
pub fn oms(args: &[&str]) -> Option<std::process::Output> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/oms/oms.py");
    run_oms(&[script.as_os_str()], args)
}

/// Where model-signing and its dependencies are installed.
pub fn deps() -> PathBuf {
    std::env::var("BUNDLESCOPE_OMS_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join(".pydeps-oms"))
}

/// Runs the project's Python with `.pydeps-oms` on its path: `first`, then
/// `args`. None when model-signing is not installed.
fn run_oms(first: &[&std::ffi::OsStr], args: &[&str]) -> Option<std::process::Output> {
    let deps = deps();
    if !deps.join("model_signing").is_dir() {
        return None;
    }
    let (py, _) = python();
    let out = Command::new(py)
        .args(first)
        .args(args)
        .env("PYTHONPATH", &deps)
        .output()
        .ok()?;
    Some(out)
}

/// Like [`oms`], but the step must succeed.
pub fn oms_ok(args: &[&str]) {
    let out = oms(args).expect("model-signing is installed");
    assert!(
        out.status.success(),
        "oms.py {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether model-signing is here (in CI it must be).
pub fn available() -> bool {
    super::require_or_skip(
        "the model-signing package (.pydeps-oms; scripts/install-mlx.sh)",
        oms(&["--help"]).is_some(),
    )
}

/// A signed sample bundle and the material it was signed with.
pub struct Signed {
    pub _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    /// Verifies it: `--key PUB` or `--cert-root ROOT`.
    pub trust: Vec<String>,
    /// The real tool's verify command for it (minus DIR).
    pub tool_verify: Vec<String>,
    pub work: PathBuf,
    /// How it was signed.
    pub how: How,
}

/// How a sample is signed.
#[derive(Clone, Copy, Debug)]
pub enum How {
    Key(&'static str),
    Shards(&'static str, u64),
    Certificate,
    /// The certificate method under an RSA root (the leaf is ECDSA).
    CertificateRsa,
    /// The key method (P-256) with these hashing options.
    Hashing(Hashing),
}

/// model-signing's hashing options (`hashing.Config`).
#[derive(Clone, Copy, Debug)]
pub struct Hashing {
    /// `hashing_algorithm`: sha256, blake2 (written "blake2b") or blake3.
    pub algorithm: &'static str,
    /// The shards serialization with this shard size (blake3 signs by
    /// files whatever this says).
    pub shard_size: Option<u64>,
    /// `allow_symlinks`.
    pub allow_symlinks: bool,
    /// `ignore_paths`, besides model.sig.
    pub ignore: &'static [&'static str],
}

impl Hashing {
    /// `algorithm` by files, no symbolic links, nothing else ignored.
    pub const fn files(algorithm: &'static str) -> Self {
        Hashing {
            algorithm,
            shard_size: None,
            allow_symlinks: false,
            ignore: &[],
        }
    }

    /// The options as oms.py's `sign-hashing` and `verify-hashing` take them.
    fn args(&self) -> Vec<String> {
        let mut a = vec![format!("hash={}", self.algorithm)];
        a.extend(self.shard_size.map(|s| format!("shard={s}")));
        if self.allow_symlinks {
            a.push("symlinks".into());
        }
        a.extend(self.ignore.iter().map(|p| format!("ignore={p}")));
        a
    }
}

/// Writes a sample (plus a README.md, so a signed file can be removed
/// without breaking the bundle) and signs it.
pub fn signed(how: How) -> Signed {
    signed_prepared(how, |_| {})
}

/// Like [`signed`], but `prepare` changes the folder (given the temporary
/// folder that holds it) before it is signed.
pub fn signed_prepared(how: How, prepare: impl FnOnce(&Path)) -> Signed {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("model");
    let work = tmp.path().join("keys");
    std::fs::create_dir_all(&work).unwrap();
    let run = cli(&["sample", dir.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::fs::write(dir.join("README.md"), "a model card\n").unwrap();
    prepare(tmp.path());
    let d = dir.to_str().unwrap().to_string();
    let w = |n: &str| work.join(n).display().to_string();
    let (trust, tool_verify) = match how {
        How::Key(curve) | How::Shards(curve, _) => {
            oms_ok(&["keygen", curve, &w("k.pem"), &w("pub.pem")]);
            let mut verify = vec!["verify-key".to_string(), d.clone(), w("pub.pem")];
            match how {
                How::Shards(_, size) => {
                    oms_ok(&["sign-key", &d, &w("k.pem"), &size.to_string()]);
                    // The tool verifies shards only when told their size.
                    verify.push(size.to_string());
                }
                _ => oms_ok(&["sign-key", &d, &w("k.pem")]),
            }
            (vec!["--key".to_string(), w("pub.pem")], verify)
        }
        How::Hashing(h) => {
            oms_ok(&["keygen", "p256", &w("k.pem"), &w("pub.pem")]);
            let opts = h.args();
            let k = w("k.pem");
            let mut sign = vec!["sign-hashing", d.as_str(), k.as_str()];
            sign.extend(opts.iter().map(String::as_str));
            oms_ok(&sign);
            let mut verify = vec!["verify-hashing".to_string(), d.clone(), w("pub.pem")];
            verify.extend(opts);
            (vec!["--key".to_string(), w("pub.pem")], verify)
        }
        How::Certificate | How::CertificateRsa => {
            match how {
                How::CertificateRsa => oms_ok(&["pki", &w("pki"), "rsa"]),
                _ => oms_ok(&["pki", &w("pki")]),
            }
            let p = |n: &str| work.join("pki").join(n).display().to_string();
            oms_ok(&[
                "sign-cert",
                &d,
                &p("leaf.key"),
                &p("leaf.pem"),
                &p("root.pem"),
            ]);
            (
                vec!["--cert-root".to_string(), p("root.pem")],
                vec!["verify-cert".to_string(), d.clone(), p("root.pem")],
            )
        }
    };
    Signed {
        _tmp: tmp,
        dir,
        trust,
        tool_verify,
        work,
        how,
    }
}

/// Copies the tree `from` into `to` (folders and plain files).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            assert!(
                ty.is_file(),
                "{}: copies plain files only",
                e.path().display()
            );
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

impl Signed {
    /// `audit DIR --json` plus the trust flags and `extra`.
    pub fn audit(&self, extra: &[&str]) -> (i32, Value) {
        let mut args = vec!["audit", self.dir.to_str().unwrap(), "--json"];
        args.extend(self.trust.iter().map(String::as_str));
        args.extend(extra);
        let run = cli(&args);
        (run.code, run.json())
    }

    /// Whether the real tool accepts the folder as it is now.
    pub fn tool_accepts(&self) -> bool {
        self.tool_accepts_with(None)
    }

    /// The same, with another key or root (`--key PATH` or `--cert-root
    /// PATH`, as audit takes it) in place of the signer's.
    pub fn tool_accepts_with(&self, trust: Option<&[String]>) -> bool {
        let mut args: Vec<&str> = self.tool_verify.iter().map(String::as_str).collect();
        if let Some(t) = trust {
            // verify-key / verify-cert / verify-hashing DIR KEY-OR-ROOT ..
            assert_eq!(t.len(), 2, "{t:?}");
            args[2] = t[1].as_str();
        }
        let out = oms(&args).expect("model-signing is installed");
        String::from_utf8_lossy(&out.stdout).trim() == "ok"
    }

    /// A copy of the signed sample, its keys and its folder, in a fresh
    /// temporary folder: one signing serves many tamperings.
    pub fn copy(&self) -> Signed {
        let tmp = tempfile::tempdir().unwrap();
        let from = self._tmp.path();
        copy_tree(from, tmp.path());
        let (a, b) = (from.to_str().unwrap(), tmp.path().to_str().unwrap());
        let moved = |v: &[String]| v.iter().map(|s| s.replace(a, b)).collect();
        Signed {
            dir: tmp.path().join(self.dir.strip_prefix(from).unwrap()),
            work: tmp.path().join(self.work.strip_prefix(from).unwrap()),
            trust: moved(&self.trust),
            tool_verify: moved(&self.tool_verify),
            how: self.how,
            _tmp: tmp,
        }
    }

    /// The error check that [`Signed::wrong_trust`] must give.
    pub fn wrong_trust_check(&self) -> &'static str {
        match self.how {
            How::Certificate | How::CertificateRsa => "oms.certificate",
            _ => "oms.key",
        }
    }

    /// Trust flags that do not verify this signature: a new key on the
    /// signer's curve (key method), or a root that did not issue the
    /// signer's certificate.
    pub fn wrong_trust(&self) -> Vec<String> {
        let curve = match self.how {
            How::Key(curve) | How::Shards(curve, _) => Some(curve),
            How::Hashing(_) => Some("p256"),
            How::Certificate | How::CertificateRsa => None,
        };
        match curve {
            Some(curve) => {
                let other = self.work.join("other.pem");
                oms_ok(&[
                    "keygen",
                    curve,
                    self.work.join("o.pem").to_str().unwrap(),
                    other.to_str().unwrap(),
                ]);
                vec!["--key".into(), other.display().to_string()]
            }
            None => vec![
                "--cert-root".into(),
                self.work.join("pki/other_root.pem").display().to_string(),
            ],
        }
    }

    /// Changes the low mantissa bit of the first BF16 value of the payload
    /// (still finite, so only a hash can tell) and updates the manifest's
    /// own `weights_sha256`, so that only the signature can tell.
    pub fn change_payload_byte(&self) {
        let w = self.dir.join("weights.bin");
        let mut b = std::fs::read(&w).unwrap();
        b[0] ^= 1;
        std::fs::write(&w, &b).unwrap();
        let m = self.dir.join("manifest.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
        use sha2::Digest;
        v["weights_sha256"] = Value::from(
            sha2::Sha256::digest(&b)
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>(),
        );
        std::fs::write(&m, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }

    /// Rewrites the signed statement (a resource's digest and the subject
    /// made consistent again) without re-signing.
    pub fn edit_statement(&self) {
        use base64::Engine as _;
        let sig = self.dir.join("model.sig");
        let mut b: Value = serde_json::from_slice(&std::fs::read(&sig).unwrap()).unwrap();
        let e = base64::engine::general_purpose::STANDARD;
        let payload = e
            .decode(b["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        let text = String::from_utf8(payload)
            .unwrap()
            .replace("\"model\"", "\"model-renamed\"");
        b["dsseEnvelope"]["payload"] = Value::from(e.encode(text.as_bytes()));
        std::fs::write(&sig, serde_json::to_vec(&b).unwrap()).unwrap();
    }
}

impl Signed {
    /// Edits the signed statement with `edit`, then signs it again with
    /// the P-256 key the sample was signed with (RustCrypto's signer, an
    /// implementation independent of the tool's), so that only the
    /// statement's content is wrong.
    pub fn resign(&self, edit: impl FnOnce(&mut Value)) {
        use base64::Engine as _;
        use p256::ecdsa::signature::Signer as _;
        use p256::pkcs8::DecodePrivateKey;
        let e = base64::engine::general_purpose::STANDARD;
        let sig = self.dir.join("model.sig");
        let mut b: Value = serde_json::from_slice(&std::fs::read(&sig).unwrap()).unwrap();
        let payload = e
            .decode(b["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        let mut st: Value = serde_json::from_slice(&payload).unwrap();
        edit(&mut st);
        let payload = serde_json::to_vec(&st).unwrap();
        let ty = "application/vnd.in-toto+json";
        let mut pae = format!("DSSEv1 {} {ty} {} ", ty.len(), payload.len()).into_bytes();
        pae.extend_from_slice(&payload);
        let pem = std::fs::read_to_string(self.work.join("k.pem")).unwrap();
        let key = p256::ecdsa::SigningKey::from_pkcs8_pem(&pem).expect("a P-256 sample");
        let s: p256::ecdsa::Signature = key.sign(&pae);
        b["dsseEnvelope"]["payload"] = Value::from(e.encode(&payload));
        b["dsseEnvelope"]["signatures"][0]["sig"] = Value::from(e.encode(s.to_der().as_bytes()));
        std::fs::write(&sig, serde_json::to_vec(&b).unwrap()).unwrap();
    }
}

/// A corruption of a signed bundle that must raise `check` with
/// `severity`, and no other error check.
pub struct OmsCase {
    pub check: &'static str,
    pub severity: &'static str,
    pub how: How,
    /// Changes the signed bundle; may return extra audit arguments that
    /// replace the trust flags.
    pub make: fn(&Signed) -> Option<Vec<String>>,
}

/// Re-signs the sample the Sigstore way (`how`: oms.py sigstore-like or
/// sigstore-v2) with `defect`; the audit arguments give its trusted root.
fn logged(s: &Signed, how: &str, defect: &str) -> Option<Vec<String>> {
    let out = s.work.join("sg");
    oms_ok(&[how, s.dir.to_str().unwrap(), out.to_str().unwrap(), defect]);
    Some(vec![
        "--trusted-root".into(),
        out.join("trusted_root.json").display().to_string(),
    ])
}

/// One case per `oms.*` check.
pub fn cases() -> Vec<OmsCase> {
    fn err(check: &'static str, how: How, make: fn(&Signed) -> Option<Vec<String>>) -> OmsCase {
        OmsCase {
            check,
            severity: "error",
            how,
            make,
        }
    }
    let key = How::Key("p256");
    vec![
        err("oms.bundle", key, |s| {
            std::fs::write(s.dir.join("model.sig"), "{\"mediaType\": 3}").unwrap();
            None
        }),
        err("oms.envelope", key, |s| {
            let p = s.dir.join("model.sig");
            let mut b: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            b["dsseEnvelope"]["payloadType"] = Value::from("text/plain");
            std::fs::write(&p, serde_json::to_vec(&b).unwrap()).unwrap();
            None
        }),
        err("oms.signature", key, |s| {
            s.edit_statement();
            None
        }),
        err("oms.key", key, |s| {
            let other = s.work.join("other.pem");
            oms_ok(&[
                "keygen",
                "p256",
                s.work.join("o.pem").to_str().unwrap(),
                other.to_str().unwrap(),
            ]);
            Some(vec!["--key".into(), other.display().to_string()])
        }),
        err("oms.certificate", How::Certificate, |s| {
            Some(vec![
                "--cert-root".into(),
                s.work.join("pki/other_root.pem").display().to_string(),
            ])
        }),
        OmsCase {
            check: "oms.sigstore",
            severity: "warning",
            how: key,
            make: |s| {
                let out = s.work.join("sg");
                oms_ok(&[
                    "sigstore-like",
                    s.dir.to_str().unwrap(),
                    out.to_str().unwrap(),
                ]);
                Some(Vec::new())
            },
        },
        err("oms.statement", key, |s| {
            s.resign(|st| st["predicateType"] = Value::from("https://example.com/other/v9"));
            None
        }),
        err("oms.manifest", key, |s| {
            s.resign(|st| st["subject"][0]["digest"]["sha256"] = Value::from("00".repeat(32)));
            None
        }),
        err("oms.path", key, |s| {
            s.resign(|st| st["predicate"]["resources"][0]["name"] = Value::from("../outside.json"));
            None
        }),
        err("oms.digest", key, |s| {
            s.change_payload_byte();
            None
        }),
        err("oms.missing", key, |s| {
            std::fs::remove_file(s.dir.join("README.md")).unwrap();
            None
        }),
        err("oms.unsigned", key, |s| {
            std::fs::write(s.dir.join("extra.bin"), [0u8; 8]).unwrap();
            None
        }),
        // Signed and logged the Sigstore way, but the signed entry
        // timestamp is over another integration time.
        err("oms.tlog", key, |s| logged(s, "sigstore-like", "set")),
        // Logged the Rekor v2 way; the RFC 3161 timestamp's signature is
        // by a key other than the authority's.
        err("oms.timestamp", key, |s| {
            logged(s, "sigstore-v2", "tsa-sig")
        }),
    ]
}

/// Runs one case: exactly its own error (or its warning and no error).
pub fn assert_case(case: &OmsCase) {
    let s = signed(case.how);
    let extra = (case.make)(&s);
    let mut args = vec![
        "audit".to_string(),
        s.dir.display().to_string(),
        "--json".into(),
    ];
    match extra {
        Some(e) => args.extend(e),
        None => args.extend(s.trust.iter().cloned()),
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = cli(&args);
    let report = run.json();
    let mut errs = super::error_checks(&report);
    errs.dedup();
    let want: Vec<&str> = if case.severity == "error" {
        vec![case.check]
    } else {
        vec![]
    };
    assert_eq!(errs, want, "{}: {report:#}", case.check);
    assert_eq!(
        run.code,
        if want.is_empty() { 0 } else { 1 },
        "{}",
        case.check
    );
    let hits = super::findings_of(&report, case.check);
    assert!(
        hits.iter().any(|f| f["severity"] == case.severity
            && f["message"].as_str().is_some_and(|m| m.len() > 20)),
        "{}: no {} finding: {report:#}",
        case.check,
        case.severity
    );
    assert_eq!(report["signature"]["verified"], false, "{}", case.check);
}
