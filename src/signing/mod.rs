//! Signed provenance: OpenSSF Model Signing (OMS v1.0) signatures. A
//! detached `model.sig` is a Sigstore bundle whose DSSE envelope signs an
//! in-toto statement listing every file's (or shard's) digest. This layer
//! parses and verifies it ([`check_signature`]) and compares the signed
//! manifest with the folder ([`folder::compare`]); the audit runs both in
//! its pass and reuses its own SHA-256 of the payload files.

pub mod bundle;
pub mod crypto;
pub mod folder;
mod methods;
pub mod statement;
pub mod timestamp;
pub mod tlog;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::finding::{Finding, Severity, checks};
use bundle::Material;
use crypto::{Cert, PublicKey};
use statement::Statement;

/// The signature file OMS places in the model folder.
pub const SIGNATURE_FILE: &str = "model.sig";

/// What the user trusts: keys, certificate roots, a Sigstore trusted root.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// `--key PUB.pem`: (file, key).
    pub keys: Vec<(String, PublicKey)>,
    /// `--cert-root ROOT.pem` (every certificate of every file).
    pub roots: Vec<Cert>,
    /// The certificate authorities of `--trusted-root trusted_root.json`.
    pub sigstore_roots: Option<Vec<Cert>>,
    /// The transparency logs of `--trusted-root` (`tlogs`).
    pub sigstore_logs: Vec<tlog::LogKey>,
    /// The timestamp authorities of `--trusted-root`
    /// (`timestampAuthorities`).
    pub sigstore_tsas: Vec<timestamp::Authority>,
}

/// Where the keys and roots come from (paths as the user gave them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustPaths {
    /// `--key`.
    pub keys: Vec<PathBuf>,
    /// `--cert-root`.
    pub roots: Vec<PathBuf>,
    /// `--trusted-root`.
    pub trusted_root: Option<PathBuf>,
}

fn read_small(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let name = path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    use crate::format::payload::PayloadError;
    // Said of the signature, key or root file itself, not as a payload file.
    let (f, _) = crate::format::payload::open_regular(&name, path).map_err(|e| match e {
        PayloadError::Missing { .. } => "no such file".to_string(),
        PayloadError::NotRegular { kind, .. } => format!("it is {kind}, not a regular file"),
        PayloadError::Io { op, source, .. } => format!("cannot {op} it: {source}"),
        other => crate::format::error_chain(&other),
    })?;
    let mut bytes = Vec::new();
    f.take(bundle::MAX_SIGNATURE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > bundle::MAX_SIGNATURE_BYTES {
        return Err(format!(
            "over the {}-byte limit",
            bundle::MAX_SIGNATURE_BYTES
        ));
    }
    Ok(bytes)
}

impl Trust {
    /// Reads every key and root; a file that cannot be used is an error
    /// finding (`oms.key` or `oms.certificate`) naming it.
    pub fn load(paths: &TrustPaths) -> (Trust, Vec<Finding>) {
        let mut t = Trust::default();
        let mut findings = Vec::new();
        for p in &paths.keys {
            let shown = p.display().to_string();
            let key = read_small(p)
                .and_then(|b| String::from_utf8(b).map_err(|_| "not PEM text".to_string()))
                .and_then(|s| PublicKey::from_pem(&s));
            match key {
                Ok(k) => t.keys.push((shown, k)),
                Err(e) => findings.push(
                    Finding::error(checks::OMS_KEY, format!("--key {shown}: {e}")).field(shown),
                ),
            }
        }
        for p in &paths.roots {
            let shown = p.display().to_string();
            let certs = read_small(p)
                .and_then(|b| String::from_utf8(b).map_err(|_| "not PEM text".to_string()))
                .map(|s| crypto::pem_blocks(&s, "CERTIFICATE"));
            match certs {
                Ok(blocks) if !blocks.is_empty() => {
                    for b in blocks {
                        match b.and_then(|der| Cert::from_der(&der)) {
                            Ok(c) => t.roots.push(c),
                            Err(e) => findings.push(
                                Finding::error(
                                    checks::OMS_CERTIFICATE,
                                    format!("--cert-root {shown}: {e}"),
                                )
                                .field(shown.clone()),
                            ),
                        }
                    }
                }
                Ok(_) => findings.push(
                    Finding::error(
                        checks::OMS_CERTIFICATE,
                        format!("--cert-root {shown}: no -----BEGIN CERTIFICATE----- block"),
                    )
                    .field(shown),
                ),
                Err(e) => findings.push(
                    Finding::error(checks::OMS_CERTIFICATE, format!("--cert-root {shown}: {e}"))
                        .field(shown),
                ),
            }
        }
        if let Some(p) = &paths.trusted_root {
            let shown = p.display().to_string();
            match read_small(p).and_then(|b| trusted_root(&b)) {
                Ok((cas, logs, tsas)) => {
                    t.sigstore_roots = Some(cas);
                    t.sigstore_logs = logs;
                    t.sigstore_tsas = tsas;
                }
                Err(e) => findings.push(
                    Finding::error(checks::OMS_SIGSTORE, format!("--trusted-root {shown}: {e}"))
                        .field(shown),
                ),
            }
        }
        (t, findings)
    }
}

/// The certificate authorities of a Sigstore `trusted_root.json`
/// (`certificateAuthorities[].certChain.certificates[].rawBytes`) and its
/// transparency logs (`tlogs`) and timestamp authorities
/// (`timestampAuthorities`).
#[allow(clippy::type_complexity)]
fn trusted_root(
    bytes: &[u8],
) -> Result<(Vec<Cert>, Vec<tlog::LogKey>, Vec<timestamp::Authority>), String> {
    let v = crate::format::json::parse_bounded(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let cas = v
        .get("certificateAuthorities")
        .and_then(|c| c.as_array())
        .ok_or("no certificateAuthorities array")?;
    let mut out = Vec::new();
    for (i, ca) in cas.iter().enumerate().take(64) {
        out.extend(cert_chain(ca, &format!("certificateAuthorities[{i}]"))?);
    }
    if out.is_empty() {
        return Err("no certificate authority".into());
    }
    Ok((out, tlog::log_keys(&v)?, timestamp::authorities(&v)?))
}

/// The certificates of a trusted-root entry's `certChain` (at most 16;
/// `field` names the entry in messages).
fn cert_chain(entry: &serde_json::Value, field: &str) -> Result<Vec<Cert>, String> {
    use base64::Engine as _;
    let certs = entry
        .pointer("/certChain/certificates")
        .and_then(serde_json::Value::as_array)
        .ok_or(format!("{field}.certChain.certificates is missing"))?;
    let mut chain = Vec::new();
    for (j, c) in certs.iter().enumerate().take(16) {
        let at = format!("{field}.certChain.certificates[{j}]");
        let raw = c
            .get("rawBytes")
            .and_then(serde_json::Value::as_str)
            .ok_or(format!("{at} has no rawBytes"))?;
        let der = base64::engine::general_purpose::STANDARD
            .decode(raw)
            .map_err(|e| format!("{at}: rawBytes is not base64: {e}"))?;
        chain.push(Cert::from_der(&der).map_err(|e| format!("{at}: {e}"))?);
    }
    Ok(chain)
}

/// `start` and `end` of a trusted root's `validFor` object (absent or
/// null: unbounded), in seconds since the epoch; `field` names it in
/// messages.
fn valid_for(
    v: Option<&serde_json::Value>,
    field: &str,
) -> Result<(Option<u64>, Option<u64>), String> {
    let when = |k: &str| match v.and_then(|v| v.get(k)) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(t) => t
            .as_str()
            .and_then(tlog::rfc3339)
            .map(Some)
            .ok_or(format!("{field}.{k} is not an RFC 3339 time")),
    };
    Ok((when("start")?, when("end")?))
}

/// Which OMS signing method a bundle uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SigningMethod {
    /// A bare public key.
    Key,
    /// A certificate chain to a private root.
    Certificate,
    /// A Sigstore (Fulcio) certificate with a transparency-log entry.
    Sigstore,
}

impl SigningMethod {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            SigningMethod::Key => "key",
            SigningMethod::Certificate => "certificate",
            SigningMethod::Sigstore => "sigstore",
        }
    }
}

/// The `signature` field of the report.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SignatureReport {
    /// The signature file.
    pub file: String,
    /// `key`, `certificate` or `sigstore` (null when the bundle did not parse).
    pub method: Option<SigningMethod>,
    /// True only when the signature verified against a key or root the user
    /// gave AND every signed digest matched AND no file is unsigned (or
    /// `--ignore-unsigned` accepts those, which the headline still counts).
    pub verified: bool,
    /// Whether the DSSE signature itself verified (null: not checked).
    pub signature_valid: Option<bool>,
    /// Key method: hex SHA-256 of the verifying key's PEM (the OMS hint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_fingerprint: Option<String>,
    /// Key method: the hint the bundle carries, or the fingerprint of the
    /// key it carries whole (`rawBytes`), in the same form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_hint: Option<String>,
    /// Certificate method: the leaf's subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_subject: Option<String>,
    /// Certificate and Sigstore methods: the leaf's validity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_validity: Option<[String; 2]>,
    /// Sigstore method: the signing times that verified, each with its
    /// source ("… (signed entry timestamp of log …)", "… (RFC 3161
    /// timestamp by …)"); the chain was checked at each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signing_times: Vec<String>,
    /// Sigstore method: the signer's identity (SAN e-mail or URI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The certificate's issuer (Sigstore: the OIDC issuer; certificate:
    /// the root the chain reached, or the leaf's issuer name).
    pub issuer: Option<String>,
    /// Sigstore bundle media type.
    pub media_type: Option<String>,
    /// The statement's predicate type (the pre-1.0 one is labelled).
    pub predicate_type: Option<String>,
    /// `files` or `shards:N`, and the hash type.
    pub serialization: Option<String>,
    /// Signed resources.
    pub resources: usize,
    /// Files whose every signed digest was recomputed and matched.
    pub files_checked: usize,
    /// Those files (relative paths, sorted), for the report's per-file
    /// `as_signed`.
    #[serde(skip)]
    pub matched_files: Vec<String>,
    /// Files in the folder the signature does not cover.
    pub unsigned_files: Vec<String>,
    /// What was NOT verified, in words (empty when everything was).
    pub not_verified: Vec<String>,
}

impl SignatureReport {
    /// One line a person reads first: "signed by …, 14 files, all digests
    /// match", or what failed.
    pub fn headline(&self) -> String {
        let who = self
            .identity
            .clone()
            .or_else(|| self.certificate_subject.clone())
            .or_else(|| {
                self.key_fingerprint
                    .as_ref()
                    .map(|f| format!("key {}", head(f)))
            })
            .or_else(|| {
                self.key_hint
                    .as_ref()
                    .map(|h| format!("key hint {}", head(h)))
            })
            .unwrap_or_else(|| "an unknown signer".into());
        let Some(method) = self.method.map(SigningMethod::name) else {
            // No bundle read or parsed: nothing says the folder is signed.
            let what = if self.not_verified.is_empty() {
                "see the oms.* findings".to_string()
            } else {
                self.not_verified.join("; ")
            };
            return format!("signature NOT verified ({}): {what}", self.file);
        };
        if self.verified {
            let mut line = format!(
                "signed by {who} ({method}), {} files, all digests match",
                self.files_checked
            );
            // Accepted with --ignore-unsigned: still said, never hidden.
            match self.unsigned_files.len() {
                0 => {}
                1 => line.push_str("; 1 file in the folder is not signed"),
                n => line.push_str(&format!("; {n} files in the folder are not signed")),
            }
            line
        } else if self.signature_valid == Some(false) {
            format!("signature INVALID ({method}, {who}): the signature does not verify")
        } else {
            let what = if self.not_verified.is_empty() {
                "see the oms.* findings".to_string()
            } else {
                self.not_verified.join("; ")
            };
            format!("signed ({method}, {who}) but NOT verified: {what}")
        }
    }
}

/// The first 16 characters of a fingerprint or hint (which came from a
/// file, so may be any text).
fn head(s: &str) -> String {
    s.chars().take(16).collect()
}

/// The outcome of checking the bundle and its envelope (before the folder
/// is compared).
#[derive(Debug, Clone)]
pub struct Checked {
    /// The report so far.
    pub report: SignatureReport,
    /// The statement, when the payload parsed (whether or not the
    /// signature verified: its digests are still compared, to say more).
    pub statement: Option<Statement>,
    /// Every finding so far.
    pub findings: Vec<Finding>,
}

/// Reads and checks the signature file at `path`.
pub fn check_file(path: &Path, trust: &Trust) -> Checked {
    match read_small(path) {
        Ok(bytes) => check_signature(&path.display().to_string(), &bytes, trust),
        Err(e) => {
            let mut c = empty(&path.display().to_string());
            c.findings.push(
                Finding::error(
                    checks::OMS_BUNDLE,
                    format!("the signature file {} cannot be read: {e}", path.display()),
                )
                .field(path.display().to_string()),
            );
            c.report
                .not_verified
                .push("the signature file could not be read".into());
            c
        }
    }
}

fn empty(file: &str) -> Checked {
    Checked {
        report: SignatureReport {
            file: file.to_string(),
            method: None,
            verified: false,
            signature_valid: None,
            key_fingerprint: None,
            key_hint: None,
            certificate_subject: None,
            certificate_validity: None,
            signing_times: Vec::new(),
            identity: None,
            issuer: None,
            media_type: None,
            predicate_type: None,
            serialization: None,
            resources: 0,
            files_checked: 0,
            matched_files: Vec::new(),
            unsigned_files: Vec::new(),
            not_verified: Vec::new(),
        },
        statement: None,
        findings: Vec::new(),
    }
}

/// Parses the bundle, verifies the DSSE signature by the method the bundle
/// uses against what `trust` holds, and parses the statement.
pub fn check_signature(file: &str, bytes: &[u8], trust: &Trust) -> Checked {
    let mut c = empty(file);
    let b = match bundle::parse(bytes) {
        Ok(b) => b,
        Err(f) => {
            c.findings.push(f);
            c.report
                .not_verified
                .push("the signature bundle could not be read".into());
            return c;
        }
    };
    c.report.media_type = Some(b.media_type.clone());
    let pae = bundle::pae(&b.payload_type, &b.payload);
    if b.signatures.len() > 1 {
        c.findings.push(
            Finding::warning(
                checks::OMS_ENVELOPE,
                format!("the envelope carries {} signatures; only the first is checked (OMS signs with one)", b.signatures.len()),
            )
            .field("dsseEnvelope.signatures"),
        );
    }
    let sig = b.signatures[0].clone();
    // Verifies with `key`: the 1.0 encoding, then the pre-1.0 one (whose
    // signer hashed with SHA-256 whatever the curve).
    let verify_with = |key: &PublicKey| -> Option<bool> {
        if key.verify(key.hash(), &pae, &sig) {
            Some(false)
        } else {
            let old = bundle::pae_pre_1_0(&b.payload_type, &b.payload);
            (key.verify(key.hash(), &old, &sig) || key.verify(crypto::Hash::Sha256, &old, &sig))
                .then_some(true)
        }
    };
    let mut anchored = false;
    let mut pre_1_0_pae = false;
    match &b.material {
        Material::PublicKey { hint, raw } => {
            c.report.method = Some(SigningMethod::Key);
            // A bundle that carries the key itself names it by the same
            // fingerprint a hint would give (SHA-256 of its PEM).
            c.report.key_hint = hint.clone().or_else(|| {
                raw.as_deref()
                    .and_then(|r| PublicKey::from_spki_der(&crypto::raw_key_der(r)).ok())
                    .map(|k| k.fingerprint())
            });
            anchored = methods::key_method(
                &mut c,
                &b,
                hint.as_deref(),
                raw.as_deref(),
                trust,
                &verify_with,
                &mut pre_1_0_pae,
            );
        }
        Material::Certificates(ders) => {
            let chain: Result<Vec<Cert>, String> = ders.iter().map(|d| Cert::from_der(d)).collect();
            match chain {
                Ok(chain) => {
                    anchored = methods::cert_method(
                        &mut c,
                        &b,
                        &chain,
                        trust,
                        &verify_with,
                        &mut pre_1_0_pae,
                    );
                }
                Err(e) => {
                    c.report.method = Some(SigningMethod::Certificate);
                    c.findings.push(
                        Finding::error(
                            checks::OMS_CERTIFICATE,
                            format!("the bundle's certificate: {e}"),
                        )
                        .field("verificationMaterial.certificates"),
                    );
                    c.report
                        .not_verified
                        .push("the signer's certificate could not be read".into());
                }
            }
        }
    }
    if pre_1_0_pae {
        c.findings.push(Finding::info(
            checks::OMS_ENVELOPE,
            "the signature is over the pre-1.0 signer's encoding of the envelope (model-signing 0.2), read for compatibility",
        ));
    }
    match statement::parse(&b.payload) {
        Ok(s) => {
            c.report.predicate_type = Some(if s.is_pre_1_0() {
                format!(
                    "{} (pre-1.0 format, read for compatibility)",
                    s.predicate_type
                )
            } else {
                s.predicate_type.clone()
            });
            c.report.serialization = Some(match s.serialization.method {
                statement::Method::Files => format!("files, {}", s.serialization.hash_type.name()),
                statement::Method::Shards { shard_size } => {
                    format!(
                        "shards of {shard_size} bytes, {}",
                        s.serialization.hash_type.name()
                    )
                }
            });
            c.report.resources = s.resources.len();
            if let (false, Some((a, b))) = (s.is_pre_1_0(), statement::out_of_order(&s.resources)) {
                c.findings.push(
                    Finding::warning(
                        checks::OMS_MANIFEST,
                        format!(
                            "resources are not in the signer's order: {:?} (resources[{a}]) comes before {:?} (resources[{b}]); model-signing sorts them by path, then shard start, so another tool wrote this statement (each digest is still checked by name)",
                            s.resources[a].name, s.resources[b].name
                        ),
                    )
                    .field(format!("predicate.resources[{b}]")),
                );
            }
            if s.is_pre_1_0() {
                c.findings.push(
                    Finding::info(
                        checks::OMS_STATEMENT,
                        format!(
                            "the statement uses the pre-1.0 predicate {}, read for compatibility",
                            statement::PREDICATE_V0_1
                        ),
                    )
                    .field("predicateType"),
                );
            }
            c.statement = Some(s);
        }
        Err(f) => {
            c.findings.push(f);
            c.report
                .not_verified
                .push("the signed statement could not be read".into());
        }
    }
    c.report.verified = anchored && c.report.signature_valid == Some(true);
    c
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}
