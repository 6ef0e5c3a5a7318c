//! The Sigstore bundle around an OMS signature, and the DSSE envelope in it:
//! parsed strictly, bounded before anything is allocated, every violation
//! a finding that names the JSON field.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::Value;

use crate::finding::{Finding, checks};

/// Largest signature file read (a bundle listing a million shards stays
/// far below it).
pub const MAX_SIGNATURE_BYTES: u64 = 64 << 20;
/// Largest certificate accepted, in DER bytes.
const MAX_CERT_BYTES: usize = 64 << 10;
/// Most certificates in a chain.
const MAX_CHAIN: usize = 16;

/// The DSSE payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// Sigstore bundle media types this reader accepts (v0.1 to v0.3).
pub const MEDIA_TYPES: &[&str] = &[
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle.v0.3+json",
];

/// What the bundle carries to verify its signature with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Material {
    /// `publicKey`: the verifier brings the key; the bundle may carry a
    /// hint (hex SHA-256 of the key's PEM) or the key's DER (`rawBytes`).
    PublicKey {
        /// `publicKey.hint`.
        hint: Option<String>,
        /// `publicKey.rawBytes`, decoded.
        raw: Option<Vec<u8>>,
    },
    /// `x509CertificateChain.certificates` or `certificate`: DER
    /// certificates, leaf first.
    Certificates(Vec<Vec<u8>>),
}

/// One transparency-log entry, kept only to say what it claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlogEntry {
    /// `logIndex`.
    pub log_index: Option<String>,
    /// `integratedTime` (seconds since the epoch, as the log claims it).
    pub integrated_time: Option<i64>,
    /// The entry as written, for the log verification ([`super::tlog`]).
    pub raw: Value,
}

/// A parsed Sigstore bundle with a DSSE envelope.
#[derive(Debug, Clone)]
pub struct SigBundle {
    /// `mediaType`.
    pub media_type: String,
    /// `verificationMaterial`.
    pub material: Material,
    /// `verificationMaterial.tlogEntries`.
    pub tlog: Vec<TlogEntry>,
    /// `dsseEnvelope.payloadType`.
    pub payload_type: String,
    /// `dsseEnvelope.payload`, decoded: the bytes as signed.
    pub payload: Vec<u8>,
    /// `dsseEnvelope.signatures[].sig`, decoded.
    pub signatures: Vec<Vec<u8>>,
    /// `verificationMaterial.timestampVerificationData.rfc3161Timestamps[].signedTimestamp`,
    /// decoded (DER RFC 3161 TimeStampResp).
    pub timestamps: Vec<Vec<u8>>,
}

/// Base64 as protobuf JSON writes it: standard or URL-safe alphabet,
/// padded or not.
fn b64(field: &str, v: &Value, cap: usize) -> Result<Vec<u8>, Finding> {
    let s = v
        .as_str()
        .ok_or_else(|| bad(field, format!("{field} is not a string ({})", kind(v))))?;
    // Base64 of `cap` bytes is at most 4 * cap / 3 + 4 characters: refuse
    // longer text before decoding it.
    if s.len() > cap / 3 * 4 + 8 {
        return Err(bad(
            field,
            format!(
                "{field} is {} characters, more than the {cap}-byte limit allows",
                s.len()
            ),
        ));
    }
    let cfg = GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let std = GeneralPurpose::new(&base64::alphabet::STANDARD, cfg);
    let url = GeneralPurpose::new(&base64::alphabet::URL_SAFE, cfg);
    std.decode(s)
        .or_else(|_| url.decode(s))
        .map_err(|e| bad(field, format!("{field} is not base64: {e}")))
}

fn bad(field: &str, message: String) -> Finding {
    Finding::error(checks::OMS_BUNDLE, message).field(field.to_string())
}

fn bad_envelope(field: &str, message: String) -> Finding {
    Finding::error(checks::OMS_ENVELOPE, message).field(field.to_string())
}

/// A JSON value's kind, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn object<'a>(
    v: &'a Value,
    field: &str,
    make: fn(&str, String) -> Finding,
) -> Result<&'a serde_json::Map<String, Value>, Finding> {
    v.as_object()
        .ok_or_else(|| make(field, format!("{field} is {}, not an object", kind(v))))
}

fn required<'a>(
    obj: &'a serde_json::Map<String, Value>,
    parent: &str,
    key: &str,
    make: fn(&str, String) -> Finding,
) -> Result<&'a Value, Finding> {
    let field = join(parent, key);
    obj.get(key)
        .ok_or_else(|| make(&field, format!("{field} is missing")))
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Parses a signature file's bytes as a Sigstore bundle whose content is a
/// DSSE envelope. The first violation is returned as a finding naming the
/// field (`oms.bundle` for the bundle, `oms.envelope` for the envelope).
pub fn parse(bytes: &[u8]) -> Result<SigBundle, Finding> {
    if bytes.len() as u64 > MAX_SIGNATURE_BYTES {
        return Err(bad(
            "",
            format!(
                "the signature file is {} bytes, over the {MAX_SIGNATURE_BYTES}-byte limit",
                bytes.len()
            ),
        ));
    }
    if crate::format::json::count_values(bytes) > crate::format::json::MAX_VALUES {
        return Err(Finding::error(
            checks::OMS_BUNDLE,
            format!(
                "the signature file holds over {} JSON values",
                crate::format::json::MAX_VALUES
            ),
        ));
    }
    let root: Value = serde_json::from_slice(bytes).map_err(|e| {
        Finding::error(
            checks::OMS_BUNDLE,
            format!(
                "the signature file is not JSON: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    let top = object(&root, "(top level)", bad)?;
    let media_type = required(top, "", "mediaType", bad)?;
    let media_type = media_type
        .as_str()
        .ok_or_else(|| {
            bad(
                "mediaType",
                format!("mediaType is {}, not a string", kind(media_type)),
            )
        })?
        .to_string();
    if !MEDIA_TYPES.contains(&media_type.as_str()) {
        return Err(bad(
            "mediaType",
            format!(
                "mediaType is {media_type:?}; a Sigstore bundle v0.1 to v0.3 is one of {}",
                MEDIA_TYPES.join(", ")
            ),
        ));
    }
    let vm = object(
        required(top, "", "verificationMaterial", bad)?,
        "verificationMaterial",
        bad,
    )?;
    let material = material(vm)?;
    let tlog = match vm.get("tlogEntries") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .take(64)
            .map(|e| TlogEntry {
                log_index: e.get("logIndex").map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }),
                integrated_time: e.get("integratedTime").and_then(|v| match v {
                    Value::String(s) => s.parse().ok(),
                    other => other.as_i64(),
                }),
                raw: e.clone(),
            })
            .collect(),
        Some(other) => {
            return Err(bad(
                "verificationMaterial.tlogEntries",
                format!(
                    "verificationMaterial.tlogEntries is {}, not an array",
                    kind(other)
                ),
            ));
        }
    };
    let timestamps = timestamps(vm)?;
    if top.contains_key("messageSignature") && !top.contains_key("dsseEnvelope") {
        return Err(bad(
            "messageSignature",
            "the bundle signs a bare message (messageSignature); an OMS signature is a DSSE envelope (dsseEnvelope)".into(),
        ));
    }
    let env = object(
        required(top, "", "dsseEnvelope", bad)?,
        "dsseEnvelope",
        bad_envelope,
    )?;
    let payload_type = required(env, "dsseEnvelope", "payloadType", bad_envelope)?;
    let payload_type = payload_type
        .as_str()
        .ok_or_else(|| {
            bad_envelope(
                "dsseEnvelope.payloadType",
                format!(
                    "dsseEnvelope.payloadType is {}, not a string",
                    kind(payload_type)
                ),
            )
        })?
        .to_string();
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(bad_envelope(
            "dsseEnvelope.payloadType",
            format!(
                "dsseEnvelope.payloadType is {payload_type:?}, expected {IN_TOTO_PAYLOAD_TYPE:?}"
            ),
        ));
    }
    let payload = b64(
        "dsseEnvelope.payload",
        required(env, "dsseEnvelope", "payload", bad_envelope)?,
        MAX_SIGNATURE_BYTES as usize,
    )
    .map_err(|f| retag(f, checks::OMS_ENVELOPE))?;
    let sigs = required(env, "dsseEnvelope", "signatures", bad_envelope)?;
    let sigs = sigs.as_array().ok_or_else(|| {
        bad_envelope(
            "dsseEnvelope.signatures",
            format!("dsseEnvelope.signatures is {}, not an array", kind(sigs)),
        )
    })?;
    if sigs.is_empty() {
        return Err(bad_envelope(
            "dsseEnvelope.signatures",
            "dsseEnvelope.signatures is empty: nothing is signed".into(),
        ));
    }
    let mut signatures = Vec::new();
    for (i, s) in sigs.iter().enumerate().take(16) {
        let field = format!("dsseEnvelope.signatures[{i}]");
        let obj = object(s, &field, bad_envelope)?;
        let sig = required(obj, &field, "sig", bad_envelope)?;
        signatures.push(
            b64(&format!("{field}.sig"), sig, 1024).map_err(|f| retag(f, checks::OMS_ENVELOPE))?,
        );
    }
    Ok(SigBundle {
        media_type,
        material,
        tlog,
        payload_type,
        payload,
        signatures,
        timestamps,
    })
}

/// The signed RFC 3161 timestamps of `timestampVerificationData` (at most
/// 32, each at most 64 KiB).
fn timestamps(vm: &serde_json::Map<String, Value>) -> Result<Vec<Vec<u8>>, Finding> {
    const FIELD: &str = "verificationMaterial.timestampVerificationData.rfc3161Timestamps";
    let list = match vm
        .get("timestampVerificationData")
        .and_then(|t| t.get("rfc3161Timestamps"))
    {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(bad(
                FIELD,
                format!("{FIELD} is {}, not an array", kind(other)),
            ));
        }
    };
    if list.len() > 32 {
        return Err(bad(
            FIELD,
            format!(
                "{FIELD} holds {} timestamps, over the limit of 32",
                list.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let field = format!("{FIELD}[{i}].signedTimestamp");
        let v = t
            .get("signedTimestamp")
            .ok_or_else(|| bad(&field, format!("{field} is missing")))?;
        out.push(b64(&field, v, 64 << 10)?);
    }
    Ok(out)
}

fn retag(mut f: Finding, check: crate::finding::CheckId) -> Finding {
    f.check = check;
    f
}

fn material(vm: &serde_json::Map<String, Value>) -> Result<Material, Finding> {
    let p = "verificationMaterial";
    if let Some(pk) = vm.get("publicKey") {
        let pk = object(pk, "verificationMaterial.publicKey", bad)?;
        let hint = match pk.get("hint") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(bad(
                    "verificationMaterial.publicKey.hint",
                    format!(
                        "verificationMaterial.publicKey.hint is {}, not a string",
                        kind(other)
                    ),
                ));
            }
        };
        let raw = match pk.get("rawBytes") {
            None | Some(Value::Null) => None,
            Some(v) => Some(b64(
                "verificationMaterial.publicKey.rawBytes",
                v,
                MAX_CERT_BYTES,
            )?),
        };
        return Ok(Material::PublicKey { hint, raw });
    }
    let certs: Vec<&Value> = if let Some(chain) = vm.get("x509CertificateChain") {
        let chain = object(chain, "verificationMaterial.x509CertificateChain", bad)?;
        let list = required(
            chain,
            "verificationMaterial.x509CertificateChain",
            "certificates",
            bad,
        )?;
        let list = list.as_array().ok_or_else(|| {
            bad(
                "verificationMaterial.x509CertificateChain.certificates",
                format!(
                    "verificationMaterial.x509CertificateChain.certificates is {}, not an array",
                    kind(list)
                ),
            )
        })?;
        if list.len() > MAX_CHAIN {
            return Err(bad(
                "verificationMaterial.x509CertificateChain.certificates",
                format!(
                    "the chain has {} certificates, over the limit of {MAX_CHAIN}",
                    list.len()
                ),
            ));
        }
        list.iter().collect()
    } else if let Some(cert) = vm.get("certificate") {
        vec![cert]
    } else {
        return Err(bad(
            p,
            "verificationMaterial has none of publicKey, x509CertificateChain, certificate".into(),
        ));
    };
    if certs.is_empty() {
        return Err(bad(
            "verificationMaterial.x509CertificateChain.certificates",
            "the certificate chain is empty".into(),
        ));
    }
    let mut der = Vec::new();
    for (i, c) in certs.iter().enumerate() {
        let field = format!("verificationMaterial.certificates[{i}].rawBytes");
        let obj = object(c, &field, bad)?;
        let raw = obj
            .get("rawBytes")
            .ok_or_else(|| bad(&field, format!("{field} is missing")))?;
        der.push(b64(&field, raw, MAX_CERT_BYTES)?);
    }
    Ok(Material::Certificates(der))
}

/// DSSE's pre-authentication encoding of `payload` (the bytes as
/// received): `DSSEv1 SP LEN(type) SP type SP LEN(payload) SP payload`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let head = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    );
    let mut out = Vec::with_capacity(head.len() + payload.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// The encoding the pre-1.0 signer (model-signing 0.2) signed by mistake:
/// `DSSEV1 LEN(type) type LEN(payload) ` followed by Python's `repr` of
/// the payload bytes. Read so that those signatures still verify; the
/// report labels them.
pub fn pae_pre_1_0(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEV1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    // Python's bytes repr: single quotes unless the bytes hold a single
    // quote and no double quote.
    let quote = if payload.contains(&b'\'') && !payload.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    out.push(b'b');
    out.push(quote);
    for &c in payload {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            c if c == quote => {
                out.push(b'\\');
                out.push(c);
            }
            0x20..=0x7e => out.push(c),
            c => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_follows_the_dsse_example() {
        // The DSSE protocol's own example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn the_pre_1_0_encoding_is_python_repr() {
        assert_eq!(
            pae_pre_1_0("t", b"a'\n\x01"),
            b"DSSEV1 1 t 4 b\"a'\\n\\x01\"".to_vec()
        );
        assert_eq!(
            pae_pre_1_0("t", b"{\"a\"}"),
            b"DSSEV1 1 t 5 b'{\"a\"}'".to_vec()
        );
    }

    #[test]
    fn every_broken_field_is_named() {
        let good = serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": "ab"}, "tlogEntries": []},
            "dsseEnvelope": {"payload": "e30=", "payloadType": IN_TOTO_PAYLOAD_TYPE,
                             "signatures": [{"sig": "AAAA", "keyid": ""}]}
        });
        let b = parse(good.to_string().as_bytes()).unwrap();
        assert_eq!(b.payload, b"{}");
        let cases: &[(&str, Value, &str)] = &[
            ("/mediaType", Value::from("x"), "mediaType"),
            (
                "/dsseEnvelope/payloadType",
                Value::from("text/plain"),
                "dsseEnvelope.payloadType",
            ),
            (
                "/dsseEnvelope/payload",
                Value::from("@@@"),
                "dsseEnvelope.payload",
            ),
            (
                "/dsseEnvelope/signatures",
                Value::Array(vec![]),
                "dsseEnvelope.signatures",
            ),
            (
                "/verificationMaterial",
                serde_json::json!({}),
                "verificationMaterial",
            ),
        ];
        for (ptr, v, field) in cases {
            let mut bad = good.clone();
            *bad.pointer_mut(ptr).unwrap() = v.clone();
            let f = parse(bad.to_string().as_bytes()).unwrap_err();
            assert_eq!(f.field.as_deref(), Some(*field), "{ptr}: {f:?}");
        }
        assert!(parse(b"not json").is_err());
    }
}
