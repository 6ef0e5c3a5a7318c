//! The transparency-log (Rekor) entry of a Sigstore bundle, verified
//! offline against the log keys of a `trusted_root.json`: the entry's body
//! must record this bundle's payload, signature and certificate; its signed
//! entry timestamp (the log's promise over the canonical entry) and its
//! inclusion proof (RFC 6962 Merkle path up to a root hash that the log
//! signed in a checkpoint) must verify with the log's key. Only a verified
//! signed entry timestamp makes the integration time trusted: the caller
//! checks the certificate chain at that time.

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::bundle::SigBundle;
use super::crypto::{self, Cert, PublicKey};
use crate::finding::{Finding, checks};

/// A transparency log the trusted root lists.
#[derive(Debug, Clone)]
pub struct LogKey {
    /// `logId.keyId`: SHA-256 of the key's DER.
    pub log_id: Vec<u8>,
    /// The key, or why it cannot be used (RSA logs are not supported).
    pub key: Result<LogVerifier, String>,
    /// `baseUrl`, for messages.
    pub url: String,
    /// `publicKey.validFor` (seconds since the epoch).
    pub valid_from: Option<u64>,
    /// `publicKey.validFor.end`.
    pub valid_to: Option<u64>,
}

/// A log's key: ECDSA (Rekor v1 logs) or Ed25519 (Rekor v2 logs sign
/// their checkpoints with it).
#[derive(Debug, Clone)]
pub enum LogVerifier {
    /// ECDSA on P-256/P-384/P-521, over the curve's SHA-2 digest.
    Ecdsa(PublicKey),
    /// Ed25519 (RFC 8032).
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// The algorithm identifier of Ed25519 (RFC 8410).
const ID_ED25519: &str = "1.3.101.112";

impl LogVerifier {
    /// Reads a SubjectPublicKeyInfo (DER).
    pub fn from_spki_der(der: &[u8]) -> Result<Self, String> {
        use x509_cert::der::Decode;
        if let Ok(spki) = spki::SubjectPublicKeyInfoRef::from_der(der)
            && spki.algorithm.oid.to_string() == ID_ED25519
        {
            let raw: [u8; 32] = spki
                .subject_public_key
                .as_bytes()
                .and_then(|b| b.try_into().ok())
                .ok_or("an Ed25519 key is not 32 bytes")?;
            return ed25519_dalek::VerifyingKey::from_bytes(&raw)
                .map(LogVerifier::Ed25519)
                .map_err(|e| format!("Ed25519 key: {e}"));
        }
        PublicKey::from_spki_der(der)
            .map(LogVerifier::Ecdsa)
            .map_err(|_| "not an ECDSA (P-256, P-384, P-521) or Ed25519 public key".into())
    }

    /// Verifies a signature over `msg`: DER ECDSA over the curve's digest,
    /// or a 64-byte Ed25519 signature.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        match self {
            LogVerifier::Ecdsa(k) => k.verify(k.hash(), msg, sig),
            LogVerifier::Ed25519(k) => {
                use ed25519_dalek::Verifier as _;
                ed25519_dalek::Signature::from_slice(sig).is_ok_and(|s| k.verify(msg, &s).is_ok())
            }
        }
    }
}

/// The `tlogs` of a trusted root. A log whose entry is malformed is an
/// error; an unsupported key is kept, and said when an entry needs it.
pub fn log_keys(root: &Value) -> Result<Vec<LogKey>, String> {
    let Some(tlogs) = root.get("tlogs") else {
        return Ok(Vec::new());
    };
    let tlogs = tlogs.as_array().ok_or("tlogs is not an array")?;
    let mut out = Vec::new();
    for (i, t) in tlogs.iter().enumerate().take(64) {
        let der = t
            .pointer("/publicKey/rawBytes")
            .and_then(Value::as_str)
            .ok_or(format!("tlogs[{i}].publicKey.rawBytes is missing"))
            .and_then(|s| b64(s).map_err(|e| format!("tlogs[{i}].publicKey.rawBytes: {e}")))?;
        let log_id = match t.pointer("/logId/keyId").and_then(Value::as_str) {
            Some(s) => b64(s).map_err(|e| format!("tlogs[{i}].logId.keyId: {e}"))?,
            None => Sha256::digest(&der).to_vec(),
        };
        let (valid_from, valid_to) = super::valid_for(
            t.pointer("/publicKey/validFor"),
            &format!("tlogs[{i}].publicKey.validFor"),
        )?;
        out.push(LogKey {
            log_id,
            key: LogVerifier::from_spki_der(&der),
            url: t
                .get("baseUrl")
                .and_then(Value::as_str)
                .unwrap_or("(no baseUrl)")
                .chars()
                .take(200)
                .collect(),
            valid_from,
            valid_to,
        });
    }
    Ok(out)
}

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` to seconds since the epoch.
pub(super) fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !s.ends_with('Z') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<u16>().ok();
    let d = x509_cert::der::DateTime::new(
        n(0..4)?,
        n(5..7)? as u8,
        n(8..10)? as u8,
        n(11..13)? as u8,
        n(14..16)? as u8,
        n(17..19)? as u8,
    )
    .ok()?;
    Some(d.unix_duration().as_secs())
}

fn b64(s: &str) -> Result<Vec<u8>, String> {
    if s.len() > 8 << 20 {
        return Err("over the size limit".into());
    }
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("not base64: {e}"))
}

/// What the log entry proved.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The entry is this bundle's, and the log vouches for it (a verified
    /// signed entry timestamp, or an inclusion proof up to a checkpoint
    /// the log signed).
    pub verified: bool,
    /// The integration time, when a verified signed entry timestamp binds it.
    pub time: Option<u64>,
    /// Every problem, one finding each (`oms.tlog`, the part named).
    pub findings: Vec<Finding>,
    /// What was not verified, in words.
    pub not_verified: Vec<String>,
}

const FIELD: &str = "verificationMaterial.tlogEntries[0]";

impl Outcome {
    fn fail(&mut self, part: &str, message: String) {
        let field = if part.is_empty() {
            FIELD.to_string()
        } else {
            format!("{FIELD}.{part}")
        };
        self.findings
            .push(Finding::error(checks::OMS_TLOG, message).field(field));
    }
}

fn int(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::String(s) => s.parse().ok(),
        other => other.as_u64(),
    }
}

/// Verifies the bundle's (first) log entry for the signature made with
/// `leaf`, against `logs`.
pub fn verify(b: &SigBundle, leaf: &Cert, logs: &[LogKey]) -> Outcome {
    let mut o = Outcome::default();
    let Some(entry) = b.tlog.first() else {
        o.fail(
            "",
            "the bundle carries no transparency-log entry, so nothing shows the signature was logged or when".into(),
        );
        o.not_verified
            .push("the transparency-log entry (there is none)".into());
        return o;
    };
    if b.tlog.len() > 1 {
        o.findings.push(
            Finding::warning(
                checks::OMS_TLOG,
                format!(
                    "the bundle carries {} log entries; only the first is checked (a Sigstore bundle has one)",
                    b.tlog.len()
                ),
            )
            .field("verificationMaterial.tlogEntries"),
        );
    }
    let e = &entry.raw;
    // The log, by its key id.
    let Some(log_id) = e
        .pointer("/logId/keyId")
        .and_then(Value::as_str)
        .and_then(|s| b64(s).ok())
    else {
        o.fail("logId", "the log entry has no readable logId.keyId".into());
        o.not_verified.push("the transparency-log entry".into());
        return o;
    };
    let Some(log) = logs.iter().find(|l| l.log_id == log_id) else {
        o.fail(
            "logId",
            format!(
                "the entry was logged by log {}, which --trusted-root does not list ({} logs listed)",
                crate::format::hex(&log_id),
                logs.len()
            ),
        );
        o.not_verified.push("the transparency-log entry".into());
        return o;
    };
    let key = match &log.key {
        Ok(k) => k,
        Err(err) => {
            o.fail(
                "logId",
                format!("the key of log {} cannot be used: {err}", log.url),
            );
            o.not_verified.push("the transparency-log entry".into());
            return o;
        }
    };
    let Some(body) = e
        .get("canonicalizedBody")
        .and_then(Value::as_str)
        .and_then(|s| b64(s).ok())
    else {
        o.fail(
            "canonicalizedBody",
            "the log entry has no readable canonicalizedBody".into(),
        );
        o.not_verified.push("the transparency-log entry".into());
        return o;
    };

    // (1) The body records this bundle's signature.
    let body_ok = match body_matches(&body, e, b, leaf) {
        Ok(()) => true,
        Err(why) => {
            o.fail(
                "canonicalizedBody",
                format!("the log entry does not record this bundle's signature: {why}"),
            );
            false
        }
    };

    // (2) The signed entry timestamp.
    let log_index = int(e.get("logIndex"));
    let integrated = int(e.get("integratedTime"));
    let set = e
        .pointer("/inclusionPromise/signedEntryTimestamp")
        .and_then(Value::as_str);
    let mut time = None;
    match (set, log_index, integrated) {
        // No signed entry timestamp (a Rekor v2 log gives none): the
        // signing time must come from an RFC 3161 timestamp, which the
        // caller checks.
        (None, _, _) => {}
        (Some(_), None, _) | (Some(_), _, None) => o.fail(
            "inclusionPromise",
            "the entry has a signed entry timestamp but no integer logIndex and integratedTime for it to sign".into(),
        ),
        (Some(s), Some(index), Some(t)) => {
            let msg = set_payload(&body, t, &log_id, index);
            match b64(s) {
                Ok(sig) if key.verify(&msg, &sig) => time = Some(t),
                Ok(_) => o.fail(
                    "inclusionPromise.signedEntryTimestamp",
                    format!(
                        "the signed entry timestamp does not verify with the key of log {} (entry, index {index} or time {} changed)",
                        log.url,
                        crypto::date(t)
                    ),
                ),
                Err(err) => o.fail(
                    "inclusionPromise.signedEntryTimestamp",
                    format!("the signed entry timestamp is {err}"),
                ),
            }
        }
    }

    // (3) The inclusion proof, and the checkpoint that signs its root.
    let mut proof_ok = false;
    if let Some(p) = e.get("inclusionProof").filter(|p| !p.is_null()) {
        match inclusion(&body, p) {
            Err(why) => o.fail(
                "inclusionProof",
                format!("the inclusion proof does not hold: {why}"),
            ),
            Ok((root, size)) => match p.pointer("/checkpoint/envelope").and_then(Value::as_str) {
                None => o
                    .not_verified
                    .push("the inclusion proof's root hash (no checkpoint signs it)".into()),
                Some(note) => match checkpoint(note, key, &log_id, &root, size) {
                    Ok(()) => proof_ok = true,
                    Err(why) => o.fail(
                        "inclusionProof.checkpoint",
                        format!("the checkpoint does not vouch for the proof's root: {why}"),
                    ),
                },
            },
        }
    } else {
        o.not_verified
            .push("the entry's inclusion in the log (no inclusion proof)".into());
    }

    // (4) The log's key was in service at the integration time.
    if let Some(t) = time
        && (log.valid_from.is_some_and(|a| t < a) || log.valid_to.is_some_and(|z| t > z))
    {
        o.fail(
            "logId",
            format!(
                "log {} was not in service at the integration time {}",
                log.url,
                crypto::date(t)
            ),
        );
    }
    let clean = !o
        .findings
        .iter()
        .any(|f| f.severity == crate::finding::Severity::Error);
    o.verified = clean && body_ok && (time.is_some() || proof_ok);
    o.time = time.filter(|_| o.verified);
    if !clean {
        o.not_verified.push("the transparency-log entry".into());
    }
    o
}

/// The bytes the log signs as the signed entry timestamp: the RFC 8785
/// form of `{body, integratedTime, logID, logIndex}`. Every value is
/// base64, hex or an integer, none needs escaping, and the keys are
/// written in sorted order, so this is the canonical form.
fn set_payload(body: &[u8], time: u64, log_id: &[u8], index: u64) -> Vec<u8> {
    format!(
        "{{\"body\":\"{}\",\"integratedTime\":{time},\"logID\":\"{}\",\"logIndex\":{index}}}",
        base64::engine::general_purpose::STANDARD.encode(body),
        crate::format::hex(log_id)
    )
    .into_bytes()
}

/// The entry's body must record this bundle's signature: a Rekor v1
/// `dsse` 0.0.1 body, or the Rekor v2 `hashedrekord` 0.0.2 body that
/// records a DSSE envelope (the digest of its PAE, its one signature and
/// the leaf).
fn body_matches(body: &[u8], entry: &Value, b: &SigBundle, leaf: &Cert) -> Result<(), String> {
    let v = crate::format::json::parse_bounded(body)
        .map_err(|e| format!("the body is not JSON: {e}"))?;
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if let Some(kv) = entry.get("kindVersion") {
        let k = kv.get("kind").and_then(Value::as_str).unwrap_or("");
        let ver = kv.get("version").and_then(Value::as_str).unwrap_or("");
        if (k, ver) != (kind, version) {
            return Err(format!(
                "kindVersion says {k:?} {ver:?} but the body is {kind:?} {version:?}"
            ));
        }
    }
    match (kind, version) {
        ("dsse", "0.0.1") => dsse_v001(&v, b, leaf),
        ("hashedrekord", "0.0.2") => hashedrekord_v002(&v, b, leaf),
        _ => Err(format!(
            "its kind is {kind:?} version {version:?}; bundlescope verifies DSSE envelopes logged as \"dsse\" 0.0.1 (Rekor v1) or \"hashedrekord\" 0.0.2 (Rekor v2)"
        )),
    }
}

/// A Rekor v2 `hashedrekord` 0.0.2 body for a DSSE envelope: `data` is
/// the digest of the envelope's PAE with the hash the leaf's key signs,
/// `signature.content` the envelope's one signature, `signature.verifier`
/// the leaf certificate and its key details.
fn hashedrekord_v002(v: &Value, b: &SigBundle, leaf: &Cert) -> Result<(), String> {
    let spec = v
        .pointer("/spec/hashedRekordV002")
        .ok_or("the body has no spec.hashedRekordV002")?;
    let [sig] = b.signatures.as_slice() else {
        return Err(format!(
            "a hashedrekord entry records one signature; the envelope carries {}",
            b.signatures.len()
        ));
    };
    let key = leaf.public_key()?;
    let (alg, details, hash) = match key {
        PublicKey::P256(_) => ("SHA2_256", "PKIX_ECDSA_P256_SHA_256", crypto::Hash::Sha256),
        PublicKey::P384(_) => ("SHA2_384", "PKIX_ECDSA_P384_SHA_384", crypto::Hash::Sha384),
        PublicKey::P521(_) => ("SHA2_512", "PKIX_ECDSA_P521_SHA_512", crypto::Hash::Sha512),
    };
    let got_alg = spec.pointer("/data/algorithm").and_then(Value::as_str);
    if got_alg != Some(alg) {
        return Err(format!(
            "data.algorithm is {got_alg:?}; the leaf's {} key signs {alg}",
            key.curve()
        ));
    }
    let pae = super::bundle::pae(&b.payload_type, &b.payload);
    let want = hash.digest(&pae);
    let got = spec
        .pointer("/data/digest")
        .and_then(Value::as_str)
        .and_then(|s| b64(s).ok());
    if got.as_deref() != Some(want.as_slice()) {
        return Err(format!(
            "data.digest is {}, the envelope's PAE hashes to {}",
            got.map_or("absent".into(), |g| crate::format::hex(&g)),
            crate::format::hex(&want)
        ));
    }
    let content = spec
        .pointer("/signature/content")
        .and_then(Value::as_str)
        .and_then(|s| b64(s).ok());
    if content.as_deref() != Some(sig.as_slice()) {
        return Err("signature.content is not the envelope's signature".into());
    }
    let cert = spec
        .pointer("/signature/verifier/x509Certificate/rawBytes")
        .and_then(Value::as_str)
        .and_then(|s| b64(s).ok());
    if cert.as_deref() != Some(leaf.der.as_slice()) {
        return Err("signature.verifier is not the bundle's signing certificate".into());
    }
    let got_details = spec
        .pointer("/signature/verifier/keyDetails")
        .and_then(Value::as_str);
    if got_details != Some(details) {
        return Err(format!(
            "signature.verifier.keyDetails is {got_details:?}, the leaf's key is {details}"
        ));
    }
    Ok(())
}

/// A `dsse` v0.0.1 entry body must hold the SHA-256 of the payload and,
/// for every envelope signature, that signature with the leaf as verifier.
fn dsse_v001(v: &Value, b: &SigBundle, leaf: &Cert) -> Result<(), String> {
    let spec = v.get("spec").ok_or("the body has no spec")?;
    let alg = spec
        .pointer("/payloadHash/algorithm")
        .and_then(Value::as_str);
    let hash = spec.pointer("/payloadHash/value").and_then(Value::as_str);
    if alg != Some("sha256") {
        return Err(format!("payloadHash.algorithm is {alg:?}, not \"sha256\""));
    }
    let want = crate::format::sha256_hex(&b.payload);
    if hash.map(str::to_ascii_lowercase) != Some(want.clone()) {
        return Err(format!(
            "payloadHash is {}, the envelope's payload hashes to {want}",
            hash.unwrap_or("absent")
        ));
    }
    let sigs = spec
        .get("signatures")
        .and_then(Value::as_array)
        .ok_or("the body lists no signatures")?;
    if sigs.len() != b.signatures.len() {
        return Err(format!(
            "the body lists {} signatures, the envelope carries {}",
            sigs.len(),
            b.signatures.len()
        ));
    }
    for (i, (s, ours)) in sigs.iter().zip(&b.signatures).enumerate() {
        let sig = s
            .get("signature")
            .and_then(Value::as_str)
            .and_then(|x| b64(x).ok());
        if sig.as_deref() != Some(ours.as_slice()) {
            return Err(format!("signatures[{i}] is not the envelope's signature"));
        }
        let verifier = s
            .get("verifier")
            .and_then(Value::as_str)
            .and_then(|x| b64(x).ok())
            .and_then(|pem| String::from_utf8(pem).ok())
            .map(|pem| crypto::pem_blocks(&pem, "CERTIFICATE"));
        let same = matches!(verifier.as_deref(), Some([Ok(der)]) if *der == leaf.der);
        if !same {
            return Err(format!(
                "signatures[{i}].verifier is not the bundle's signing certificate"
            ));
        }
    }
    Ok(())
}

fn node(l: &[u8], r: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

/// RFC 6962 leaf hash.
pub fn leaf_hash(body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

/// The root an RFC 6962 / RFC 9162 audit path leads to (RFC 9162
/// §2.1.3.2), or why it cannot be followed.
pub fn root_from_path(
    leaf: [u8; 32],
    index: u64,
    size: u64,
    path: &[[u8; 32]],
) -> Result<[u8; 32], String> {
    if index >= size {
        return Err(format!(
            "leaf index {index} is not below the tree size {size}"
        ));
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = leaf;
    for p in path {
        if s == 0 {
            return Err(format!(
                "the path has {} hashes, more than a tree of {size} needs",
                path.len()
            ));
        }
        if f & 1 == 1 || f == s {
            r = node(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(format!(
            "the path has {} hashes, fewer than a tree of {size} needs",
            path.len()
        ));
    }
    Ok(r)
}

/// Checks the Merkle path; returns the proven root and tree size.
fn inclusion(body: &[u8], p: &Value) -> Result<([u8; 32], u64), String> {
    let index = int(p.get("logIndex")).ok_or("no integer logIndex")?;
    let size = int(p.get("treeSize")).ok_or("no integer treeSize")?;
    let root = p
        .get("rootHash")
        .and_then(Value::as_str)
        .ok_or("no rootHash")
        .and_then(|s| b64(s).map_err(|_| "rootHash is not base64"))?;
    let hashes = p
        .get("hashes")
        .and_then(Value::as_array)
        .ok_or("no hashes array")?;
    if hashes.len() > 64 {
        return Err(format!("{} hashes; a path is at most 64", hashes.len()));
    }
    let mut path = Vec::new();
    for (i, h) in hashes.iter().enumerate() {
        let h = h
            .as_str()
            .and_then(|s| b64(s).ok())
            .and_then(|v| <[u8; 32]>::try_from(v).ok())
            .ok_or(format!("hashes[{i}] is not a base64 SHA-256"))?;
        path.push(h);
    }
    let got = root_from_path(leaf_hash(body), index, size, &path)?;
    if got.as_slice() != root.as_slice() {
        return Err(format!(
            "the path from the entry (index {index} of {size}) leads to {}, the proof's rootHash is {}",
            crate::format::hex(&got),
            crate::format::hex(&root)
        ));
    }
    Ok((got, size))
}

/// A signed note (`origin\nsize\nbase64 root\n[more lines]\n\n— name
/// base64(key hint ‖ signature)\n`): one signature line whose 4-byte hint
/// is the log id's prefix must verify with the log's key over the note's
/// text, and the note must give the proof's root and size.
fn checkpoint(
    text: &str,
    key: &LogVerifier,
    log_id: &[u8],
    root: &[u8; 32],
    size: u64,
) -> Result<(), String> {
    if text.len() > 64 << 10 {
        return Err("the checkpoint is over 64 KiB".into());
    }
    let mut parts = text.splitn(2, "\n\n");
    let note_head = parts.next().unwrap_or("");
    let sigs = parts.next().ok_or("no blank line before the signatures")?;
    if sigs.contains("\n\n") {
        return Err("more than one blank line".into());
    }
    let note = format!("{note_head}\n");
    let mut lines = note_head.lines();
    let _origin = lines
        .next()
        .filter(|o| !o.is_empty())
        .ok_or("no origin line")?;
    let n: u64 = lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or("no tree size line")?;
    let r = lines
        .next()
        .and_then(|l| b64(l).ok())
        .ok_or("no base64 root hash line")?;
    let hint = log_id
        .get(..4)
        .ok_or("the log id is shorter than 4 bytes")?;
    let mut tried = false;
    let mut verified = false;
    for line in sigs.lines().take(64) {
        let Some(rest) = line.strip_prefix("\u{2014} ") else {
            continue;
        };
        let Some(sig) = rest.split(' ').nth(1).and_then(|s| b64(s).ok()) else {
            continue;
        };
        if sig.len() > 4 && &sig[..4] == hint {
            tried = true;
            if key.verify(note.as_bytes(), &sig[4..]) {
                verified = true;
                break;
            }
        }
    }
    if !verified {
        return Err(if tried {
            "its signature does not verify with the log's key".into()
        } else {
            format!(
                "no signature by the log (key hint {})",
                crate::format::hex(hint)
            )
        });
    }
    if n != size || r.as_slice() != root.as_slice() {
        return Err(format!(
            "it signs tree size {n} and root {}, the proof is for size {size} and root {}",
            crate::format::hex(&r),
            crate::format::hex(root)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6962 §2.1's tree head, computed the recursive way.
    fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
        if leaves.len() == 1 {
            return leaves[0];
        }
        let k = leaves.len().next_power_of_two() / 2;
        node(&mth(&leaves[..k]), &mth(&leaves[k..]))
    }

    /// RFC 6962 §2.1.1's audit path, the recursive way.
    fn path(m: usize, leaves: &[[u8; 32]]) -> Vec<[u8; 32]> {
        if leaves.len() == 1 {
            return Vec::new();
        }
        let k = leaves.len().next_power_of_two() / 2;
        if m < k {
            let mut p = path(m, &leaves[..k]);
            p.push(mth(&leaves[k..]));
            p
        } else {
            let mut p = path(m - k, &leaves[k..]);
            p.push(mth(&leaves[..k]));
            p
        }
    }

    #[test]
    fn every_leaf_of_every_small_tree_proves_and_a_changed_hash_does_not() {
        for n in 1..=33usize {
            let leaves: Vec<[u8; 32]> = (0..n).map(|i| leaf_hash(&[i as u8])).collect();
            let root = mth(&leaves);
            for m in 0..n {
                let p = path(m, &leaves);
                assert_eq!(
                    root_from_path(leaves[m], m as u64, n as u64, &p),
                    Ok(root),
                    "{m} of {n}"
                );
                if !p.is_empty() {
                    let mut bad = p.clone();
                    bad[0][0] ^= 1;
                    assert_ne!(
                        root_from_path(leaves[m], m as u64, n as u64, &bad),
                        Ok(root)
                    );
                    assert!(root_from_path(leaves[m], m as u64, n as u64, &p[1..]).is_err());
                }
                let mut long = p.clone();
                long.push(root);
                assert!(root_from_path(leaves[m], m as u64, n as u64, &long).is_err());
            }
            assert!(root_from_path(leaves[0], n as u64, n as u64, &[]).is_err());
        }
    }

    #[test]
    fn malformed_proofs_checkpoints_and_roots_are_errors_never_panics() {
        let body = b"entry";
        let secret = p256::SecretKey::from_slice(&[7u8; 32]).unwrap();
        let key = LogVerifier::Ecdsa(PublicKey::P256(p256::ecdsa::VerifyingKey::from(
            secret.public_key(),
        )));
        let proofs = [
            serde_json::json!({}),
            serde_json::json!({"logIndex": "x", "treeSize": "1", "rootHash": "", "hashes": []}),
            serde_json::json!({"logIndex": "5", "treeSize": "3", "rootHash": "AA==", "hashes": []}),
            serde_json::json!({"logIndex": "0", "treeSize": "1", "rootHash": "@", "hashes": []}),
            serde_json::json!({"logIndex": "0", "treeSize": "2", "rootHash": "AA==", "hashes": ["AA=="]}),
            serde_json::json!({"logIndex": "0", "treeSize": "1", "rootHash": "AA==", "hashes": [1]}),
            serde_json::json!({"logIndex": 0, "treeSize": u64::MAX, "rootHash": "AA==", "hashes": vec!["AA=="; 65]}),
        ];
        for p in &proofs {
            assert!(inclusion(body, p).is_err(), "{p}");
        }
        {
            let root = [0u8; 32];
            for note in [
                "",
                "\n\n",
                "origin\n1\nAAAA\n\n",
                "origin\nx\nAAAA\n\n\u{2014} n AAAAAAAA\n",
                "origin\n1\n@@\n\n\u{2014} n AAAAAAAA\n",
                "origin\n1\nAAAA\n\n\u{2014} n\n\n\n",
                "origin\n1\nAAAA\n\n\u{2014} n AAAAAAAAAAAA\n",
            ] {
                assert!(
                    checkpoint(note, &key, &[0; 32], &root, 1).is_err(),
                    "{note:?}"
                );
            }
        }
        for bad in [
            serde_json::json!({"tlogs": 3}),
            serde_json::json!({"tlogs": [{}]}),
            serde_json::json!({"tlogs": [{"publicKey": {"rawBytes": "@"}}]}),
            serde_json::json!({"tlogs": [{"publicKey": {"rawBytes": "AA==", "validFor": {"start": "yesterday"}}}]}),
        ] {
            assert!(log_keys(&bad).is_err(), "{bad}");
        }
        // A key of a kind bundlescope cannot use is kept, and said when needed.
        let odd =
            log_keys(&serde_json::json!({"tlogs": [{"publicKey": {"rawBytes": "AA=="}}]})).unwrap();
        assert!(odd[0].key.is_err());
    }

    /// RFC 8032 §7.1, test 2: an Ed25519 key (as SubjectPublicKeyInfo, the
    /// way a trusted root carries a Rekor v2 log key), a one-byte message
    /// and its signature.
    #[test]
    fn an_ed25519_log_key_verifies_the_rfc_8032_vector_and_nothing_else() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let mut spki = hex("302a300506032b6570032100");
        spki.extend(hex(
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        ));
        let sig = hex(concat!(
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da",
            "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        ));
        let key = LogVerifier::from_spki_der(&spki).unwrap();
        assert!(matches!(key, LogVerifier::Ed25519(_)));
        assert!(key.verify(&[0x72], &sig));
        assert!(!key.verify(&[0x73], &sig));
        assert!(!key.verify(&[0x72], &sig[..63]));
        let mut bad = sig.clone();
        bad[0] ^= 1;
        assert!(!key.verify(&[0x72], &bad));
        // A truncated key is an error, not a panic.
        assert!(LogVerifier::from_spki_der(&spki[..40]).is_err());
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339("2021-01-12T11:53:27.000Z"), Some(1_610_452_407));
        assert_eq!(rfc3339("2021-01-12 11:53:27"), None);
    }
}
