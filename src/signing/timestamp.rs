//! RFC 3161 signed timestamps, as a Sigstore bundle carries them in
//! `verificationMaterial.timestampVerificationData.rfc3161Timestamps`: a
//! timestamp authority (TSA) signs, in a CMS SignedData, a `TSTInfo` that
//! holds the digest of the bundle's signature and the time it saw it. A
//! Rekor v2 log gives no signed entry timestamp, so this is where the
//! signing time of a Rekor v2 bundle comes from.
//!
//! A timestamp is trusted only when it verifies against an authority of
//! `--trusted-root` (`timestampAuthorities`): its signer is the first
//! certificate of that authority's chain, which must chain to the chain's
//! last certificate at the stamped time and carry the critical timeStamping
//! extended key usage; the signed attributes must hold the TSTInfo's digest
//! and content type, and the signature over them must verify; the TSTInfo's
//! message imprint must be the digest of the bundle's signature; and the
//! time must fall in the authority's `validFor`.

use cms::cert::x509::ext::pkix::ExtendedKeyUsage;
use cms::content_info::ContentInfo;
use cms::signed_data::{SignedData, SignerIdentifier};
use serde_json::Value;
use x509_cert::der::asn1::OctetString;
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode, Encode};

use super::crypto::{self, Cert, Hash};

/// A timestamp authority of the trusted root.
#[derive(Debug, Clone)]
pub struct Authority {
    /// `certChain.certificates`: the TSA's signing certificate first, the
    /// root last.
    pub chain: Vec<Cert>,
    /// `uri` or the signer's subject, for messages.
    pub name: String,
    /// `validFor.start` (seconds since the epoch).
    pub valid_from: Option<u64>,
    /// `validFor.end`.
    pub valid_to: Option<u64>,
}

/// The `timestampAuthorities` of a trusted root.
pub fn authorities(root: &Value) -> Result<Vec<Authority>, String> {
    let Some(list) = root.get("timestampAuthorities") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or("timestampAuthorities is not an array")?;
    let mut out = Vec::new();
    for (i, a) in list.iter().enumerate().take(64) {
        let field = format!("timestampAuthorities[{i}]");
        let chain = super::cert_chain(a, &field)?;
        let (valid_from, valid_to) =
            super::valid_for(a.get("validFor"), &format!("{field}.validFor"))?;
        let name = a
            .get("uri")
            .and_then(Value::as_str)
            .map(|u| u.chars().take(200).collect())
            .or_else(|| chain.first().map(Cert::subject))
            .unwrap_or(field);
        out.push(Authority {
            chain,
            name,
            valid_from,
            valid_to,
        });
    }
    Ok(out)
}

/// A verified timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// The stamped time (`genTime`, seconds since the epoch).
    pub time: u64,
    /// The authority that signed it.
    pub authority: String,
}

const ID_SIGNED_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.2");
const ID_CT_TST_INFO: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.16.1.4");
const ID_CONTENT_TYPE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.3");
const ID_MESSAGE_DIGEST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.4");
const ID_KP_TIME_STAMPING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.8");

/// The digest an OID names (SHA-2 digests, and the ECDSA signature
/// algorithms over them).
fn hash_of(oid: &ObjectIdentifier) -> Option<Hash> {
    match oid.to_string().as_str() {
        "2.16.840.1.101.3.4.2.1" | "1.2.840.10045.4.3.2" => Some(Hash::Sha256),
        "2.16.840.1.101.3.4.2.2" | "1.2.840.10045.4.3.3" => Some(Hash::Sha384),
        "2.16.840.1.101.3.4.2.3" | "1.2.840.10045.4.3.4" => Some(Hash::Sha512),
        _ => None,
    }
}

/// The single value of the signed attribute `oid`.
fn attribute<'a>(
    attrs: &'a cms::signed_data::SignedAttributes,
    oid: ObjectIdentifier,
    what: &str,
) -> Result<&'a x509_cert::attr::AttributeValue, String> {
    let mut hits = attrs.iter().filter(|a| a.oid == oid);
    let a = hits
        .next()
        .ok_or(format!("the signed attributes have no {what}"))?;
    if hits.next().is_some() || a.values.len() != 1 {
        return Err(format!("the signed attributes hold {what} more than once"));
    }
    a.values.iter().next().ok_or(format!("{what} is empty"))
}

/// Verifies one `signedTimestamp` (a DER TimeStampResp) over `message`
/// (the bundle's signature bytes) against the trusted root's authorities.
pub fn verify(resp_der: &[u8], message: &[u8], authorities: &[Authority]) -> Result<Stamp, String> {
    if resp_der.len() > 64 << 10 {
        return Err(format!(
            "the timestamp is {} bytes, over the 64 KiB limit",
            resp_der.len()
        ));
    }
    let resp = x509_tsp::TimeStampResp::from_der(resp_der)
        .map_err(|e| format!("not a DER RFC 3161 TimeStampResp: {e}"))?;
    use cmpv2::status::PkiStatus;
    if !matches!(
        resp.status.status,
        PkiStatus::Accepted | PkiStatus::GrantedWithMods
    ) {
        return Err(format!(
            "the authority did not grant it (status {:?})",
            resp.status.status
        ));
    }
    let token: &ContentInfo = resp
        .time_stamp_token
        .as_ref()
        .ok_or("the response carries no timeStampToken")?;
    if token.content_type != ID_SIGNED_DATA {
        return Err(format!(
            "the token's content type is {}, not CMS SignedData",
            token.content_type
        ));
    }
    let sd: SignedData = token
        .content
        .decode_as()
        .map_err(|e| format!("the token is not a CMS SignedData: {e}"))?;
    if sd.encap_content_info.econtent_type != ID_CT_TST_INFO {
        return Err(format!(
            "the signed content type is {}, not TSTInfo",
            sd.encap_content_info.econtent_type
        ));
    }
    let content = sd
        .encap_content_info
        .econtent
        .as_ref()
        .ok_or("the token carries no TSTInfo")?
        .decode_as::<OctetString>()
        .map_err(|e| format!("the TSTInfo is not in an OCTET STRING: {e}"))?;
    let content = content.as_bytes();
    let tst =
        x509_tsp::TstInfo::from_der(content).map_err(|e| format!("the TSTInfo is not DER: {e}"))?;
    let time = tst.gen_time.to_unix_duration().as_secs();

    // The message imprint: the digest of the bundle's signature.
    let imprint_hash = hash_of(&tst.message_imprint.hash_algorithm.oid).ok_or(format!(
        "the message imprint's digest {} is not SHA-256, SHA-384 or SHA-512",
        tst.message_imprint.hash_algorithm.oid
    ))?;
    if tst.message_imprint.hashed_message.as_bytes() != imprint_hash.digest(message).as_slice() {
        return Err(
            "its message imprint is not the digest of this bundle's signature: it timestamps something else"
                .into(),
        );
    }

    // The signer, and the authority it belongs to.
    let infos: Vec<_> = sd.signer_infos.0.iter().collect();
    let [si] = infos.as_slice() else {
        return Err(format!("the token has {} signers, not one", infos.len()));
    };
    let is_signer = |c: &x509_cert::Certificate| -> bool {
        match &si.sid {
            SignerIdentifier::IssuerAndSerialNumber(is) => {
                c.tbs_certificate.issuer == is.issuer
                    && c.tbs_certificate.serial_number == is.serial_number
            }
            SignerIdentifier::SubjectKeyIdentifier(ski) => matches!(
                c.tbs_certificate.get::<x509_cert::ext::pkix::SubjectKeyIdentifier>(),
                Ok(Some((_, k))) if k == *ski
            ),
        }
    };
    let Some(auth) = authorities
        .iter()
        .find(|a| a.chain.first().is_some_and(|c| is_signer(&c.cert)))
    else {
        let who = match &si.sid {
            SignerIdentifier::IssuerAndSerialNumber(is) => {
                format!("certificate {} of \"{}\"", is.serial_number, is.issuer)
            }
            SignerIdentifier::SubjectKeyIdentifier(k) => {
                format!("key {}", crate::format::hex(k.0.as_bytes()))
            }
        };
        return Err(format!(
            "it is signed by {who}, which is not the signing certificate of any timestamp authority of --trusted-root ({} listed)",
            authorities.len()
        ));
    };
    let leaf = &auth.chain[0];
    // A certificate the token embeds for its signer must be the one the
    // trusted root names.
    if let Some(set) = &sd.certificates {
        for c in set.0.iter() {
            if let cms::cert::CertificateChoices::Certificate(c) = c
                && is_signer(c)
                && *c != leaf.cert
            {
                return Err(format!(
                    "the certificate the token embeds for its signer is not the one --trusted-root gives for {}",
                    auth.name
                ));
            }
        }
    }
    let eku = leaf
        .cert
        .tbs_certificate
        .get::<ExtendedKeyUsage>()
        .ok()
        .flatten();
    match eku {
        Some((true, e)) if e.0.contains(&ID_KP_TIME_STAMPING) => {}
        Some((false, _)) => {
            return Err(format!(
                "the signing certificate of {} has a non-critical extended key usage; a timestamp authority's must be critical",
                auth.name
            ));
        }
        _ => {
            return Err(format!(
                "the signing certificate \"{}\" of {} may not sign timestamps (no timeStamping extended key usage)",
                leaf.subject(),
                auth.name
            ));
        }
    }

    // The signed attributes bind the TSTInfo; the signature binds them.
    let attrs = si
        .signed_attrs
        .as_ref()
        .ok_or("the signer has no signed attributes")?;
    let ct: ObjectIdentifier = attribute(attrs, ID_CONTENT_TYPE, "content type")?
        .decode_as()
        .map_err(|e| format!("the content-type attribute: {e}"))?;
    if ct != ID_CT_TST_INFO {
        return Err(format!(
            "the signed content-type attribute is {ct}, not TSTInfo"
        ));
    }
    let md: OctetString = attribute(attrs, ID_MESSAGE_DIGEST, "message digest")?
        .decode_as()
        .map_err(|e| format!("the message-digest attribute: {e}"))?;
    let content_hash = hash_of(&si.digest_alg.oid).ok_or(format!(
        "the signer's digest {} is not SHA-256, SHA-384 or SHA-512",
        si.digest_alg.oid
    ))?;
    if md.as_bytes() != content_hash.digest(content).as_slice() {
        return Err(
            "the signed message digest is not the TSTInfo's: the timestamp's content was changed"
                .into(),
        );
    }
    let sig_alg = crypto::SigAlg::of_oid(&si.signature_algorithm.oid.to_string(), Some(content_hash))
        .ok_or(format!(
            "the signature algorithm {} is not ECDSA or RSA (PKCS #1 v1.5) with SHA-256, SHA-384 or SHA-512",
            si.signature_algorithm.oid
        ))?;
    let signed = attrs
        .to_der()
        .map_err(|e| format!("the signed attributes: {e}"))?;
    let key = leaf
        .issuer_key()
        .map_err(|e| format!("the key of {}: {e}", auth.name))?;
    if !key.verify(sig_alg, &signed, si.signature.as_bytes()) {
        return Err(format!(
            "its signature does not verify with the {} key of {}",
            key.kind(),
            auth.name
        ));
    }

    // The authority's chain at the stamped time, and its service period.
    let n = auth.chain.len();
    if n < 2 {
        return Err(format!(
            "the trusted root gives {} only one certificate; its chain needs the signer and a root",
            auth.name
        ));
    }
    crypto::verify_chain(&auth.chain[..n - 1], &auth.chain[n - 1..], time)
        .map_err(|e| format!("the chain of {} does not verify: {e}", auth.name))?;
    if auth.valid_from.is_some_and(|a| time < a) || auth.valid_to.is_some_and(|z| time >= z) {
        return Err(format!(
            "{} was not in service at the stamped time {}",
            auth.name,
            crypto::date(time)
        ));
    }
    Ok(Stamp {
        time,
        authority: auth.name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_authorities_and_responses_are_errors_never_panics() {
        for bad in [
            serde_json::json!({"timestampAuthorities": 3}),
            serde_json::json!({"timestampAuthorities": [{}]}),
            serde_json::json!({"timestampAuthorities": [{"certChain": {"certificates": [{}]}}]}),
            serde_json::json!({"timestampAuthorities": [{"certChain": {"certificates": [{"rawBytes": "@"}]}}]}),
            serde_json::json!({"timestampAuthorities": [{"certChain": {"certificates": [{"rawBytes": "AA=="}]}}]}),
            serde_json::json!({"timestampAuthorities": [{"certChain": {"certificates": []}, "validFor": {"start": "today"}}]}),
        ] {
            assert!(authorities(&bad).is_err(), "{bad}");
        }
        assert!(authorities(&serde_json::json!({})).unwrap().is_empty());
        for der in [
            &[][..],
            &[0x30][..],
            &[0x30, 0x80][..],
            &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff][..],
            &[0x30, 0x03, 0x30, 0x01, 0x00][..],
            // PKIStatusInfo granted, no token.
            &[0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x00][..],
            // Rejected.
            &[0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x02][..],
        ] {
            assert!(verify(der, b"sig", &[]).is_err(), "{der:?}");
        }
        assert!(verify(&vec![0x30; 70_000], b"sig", &[]).is_err());
    }
}
