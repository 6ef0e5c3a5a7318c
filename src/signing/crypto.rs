//! Keys and certificates of OMS signatures, through RustCrypto's crates:
//! ECDSA on P-256, P-384 and P-521 (each with the digest its curve pairs
//! with), X.509 chains up to a root the user gives. Nothing here is
//! hand-written cryptography: this file picks the digest, decodes the
//! structures and calls the crates' verifiers.

use std::time::Duration;

use base64::Engine as _;
use ecdsa::signature::hazmat::PrehashVerifier;
use sha2::{Digest, Sha256, Sha384, Sha512};
use spki::DecodePublicKey;
use x509_cert::Certificate;
use x509_cert::der;
use x509_cert::der::{Decode, Encode};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName};

/// An ECDSA public key on one of the curves OMS allows.
#[derive(Clone)]
pub enum PublicKey {
    /// NIST P-256 (signs SHA-256).
    P256(p256::ecdsa::VerifyingKey),
    /// NIST P-384 (signs SHA-384).
    P384(p384::ecdsa::VerifyingKey),
    /// NIST P-521 (signs SHA-512).
    P521(p521::ecdsa::VerifyingKey),
}

/// The digest an ECDSA signature was made over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl Hash {
    /// The digest of `msg`.
    pub fn digest(self, msg: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(msg).to_vec(),
            Hash::Sha384 => Sha384::digest(msg).to_vec(),
            Hash::Sha512 => Sha512::digest(msg).to_vec(),
        }
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({}, {})", self.curve(), self.fingerprint())
    }
}

impl PublicKey {
    /// Reads a SubjectPublicKeyInfo (DER).
    pub fn from_spki_der(der: &[u8]) -> Result<Self, String> {
        if let Ok(k) = p256::PublicKey::from_public_key_der(der) {
            return Ok(PublicKey::P256(k.into()));
        }
        if let Ok(k) = p384::PublicKey::from_public_key_der(der) {
            return Ok(PublicKey::P384(k.into()));
        }
        if let Ok(k) = p521::PublicKey::from_public_key_der(der) {
            return p521::ecdsa::VerifyingKey::from_affine(*k.as_affine())
                .map(PublicKey::P521)
                .map_err(|e| format!("P-521 key: {e}"));
        }
        Err("not an ECDSA public key on P-256, P-384 or P-521".into())
    }

    /// Reads the first `PUBLIC KEY` block of a PEM file.
    pub fn from_pem(text: &str) -> Result<Self, String> {
        let der = pem_blocks(text, "PUBLIC KEY")
            .into_iter()
            .next()
            .ok_or("no -----BEGIN PUBLIC KEY----- block")??;
        Self::from_spki_der(&der)
    }

    /// The curve's name.
    pub fn curve(&self) -> &'static str {
        match self {
            PublicKey::P256(_) => "P-256",
            PublicKey::P384(_) => "P-384",
            PublicKey::P521(_) => "P-521",
        }
    }

    /// The digest the curve signs (as the OMS signer pairs them).
    pub fn hash(&self) -> Hash {
        match self {
            PublicKey::P256(_) => Hash::Sha256,
            PublicKey::P384(_) => Hash::Sha384,
            PublicKey::P521(_) => Hash::Sha512,
        }
    }

    /// The key as SubjectPublicKeyInfo DER.
    pub fn spki_der(&self) -> Vec<u8> {
        use spki::EncodePublicKey;
        let doc = match self {
            PublicKey::P256(k) => p256::PublicKey::from(k).to_public_key_der(),
            PublicKey::P384(k) => p384::PublicKey::from(k).to_public_key_der(),
            PublicKey::P521(k) => p521::PublicKey::from_affine(*k.as_affine())
                .map_err(|_| spki::Error::KeyMalformed)
                .and_then(|k| k.to_public_key_der()),
        };
        doc.map(|d| d.as_bytes().to_vec()).unwrap_or_default()
    }

    /// The OMS key hint: lower-case hex SHA-256 of the key's PEM
    /// (SubjectPublicKeyInfo, 64-column lines, LF endings), which is also
    /// the fingerprint the report shows.
    pub fn fingerprint(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(self.spki_der());
        let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or(""));
            pem.push('\n');
        }
        pem.push_str("-----END PUBLIC KEY-----\n");
        crate::format::sha256_hex(pem.as_bytes())
    }

    /// Verifies a DER-encoded ECDSA signature over `msg` hashed with `hash`.
    pub fn verify(&self, hash: Hash, msg: &[u8], sig_der: &[u8]) -> bool {
        let prehash = hash.digest(msg);
        match self {
            PublicKey::P256(k) => p256::ecdsa::Signature::from_der(sig_der)
                .is_ok_and(|s| k.verify_prehash(&prehash, &s).is_ok()),
            PublicKey::P384(k) => p384::ecdsa::Signature::from_der(sig_der)
                .is_ok_and(|s| k.verify_prehash(&prehash, &s).is_ok()),
            PublicKey::P521(k) => p521::ecdsa::Signature::from_der(sig_der)
                .is_ok_and(|s| k.verify_prehash(&prehash, &s).is_ok()),
        }
    }
}

/// A signature algorithm of a certificate or a timestamp: ECDSA, or RSA
/// PKCS #1 v1.5, each over a SHA-2 digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigAlg {
    /// ECDSA over this digest.
    Ecdsa(Hash),
    /// RSASSA-PKCS1-v1_5 over this digest.
    RsaPkcs1(Hash),
}

impl SigAlg {
    /// The algorithm a signature-algorithm OID names: `ecdsa-with-SHA*` or
    /// `sha*WithRSAEncryption`. A bare key OID (`id-ecPublicKey`,
    /// `rsaEncryption`, as CMS signer infos may write) takes `digest`, the
    /// signer's digest algorithm.
    pub fn of_oid(oid: &str, digest: Option<Hash>) -> Option<SigAlg> {
        Some(match oid {
            "1.2.840.10045.4.3.2" => SigAlg::Ecdsa(Hash::Sha256),
            "1.2.840.10045.4.3.3" => SigAlg::Ecdsa(Hash::Sha384),
            "1.2.840.10045.4.3.4" => SigAlg::Ecdsa(Hash::Sha512),
            "1.2.840.113549.1.1.11" => SigAlg::RsaPkcs1(Hash::Sha256),
            "1.2.840.113549.1.1.12" => SigAlg::RsaPkcs1(Hash::Sha384),
            "1.2.840.113549.1.1.13" => SigAlg::RsaPkcs1(Hash::Sha512),
            "1.2.840.10045.2.1" => SigAlg::Ecdsa(digest?),
            "1.2.840.113549.1.1.1" => SigAlg::RsaPkcs1(digest?),
            _ => return None,
        })
    }
}

/// The smallest RSA modulus accepted, in bits.
const RSA_MIN_BITS: usize = 2048;
/// The largest (the `rsa` crate's own bound).
const RSA_MAX_BITS: usize = 4096;

/// A key that signs certificates or timestamps: an ECDSA key on the OMS
/// curves, or an RSA key (2048 to 4096 bits), which certificate and
/// timestamp authorities still use. A DSSE envelope is ECDSA only.
#[derive(Debug, Clone)]
pub enum IssuerKey {
    /// ECDSA.
    Ec(PublicKey),
    /// RSA.
    Rsa(Box<rsa::RsaPublicKey>),
}

impl IssuerKey {
    /// Reads a SubjectPublicKeyInfo (DER).
    pub fn from_spki_der(der: &[u8]) -> Result<Self, String> {
        use rsa::traits::PublicKeyParts;
        if let Ok(k) = PublicKey::from_spki_der(der) {
            return Ok(IssuerKey::Ec(k));
        }
        match rsa::RsaPublicKey::from_public_key_der(der) {
            Ok(k) if (RSA_MIN_BITS..=RSA_MAX_BITS).contains(&(k.n().bits())) => {
                Ok(IssuerKey::Rsa(Box::new(k)))
            }
            Ok(k) => Err(format!(
                "an RSA key of {} bits (bundlescope accepts {RSA_MIN_BITS} to {RSA_MAX_BITS})",
                k.n().bits()
            )),
            Err(_) => Err("not an ECDSA key on P-256, P-384 or P-521, nor an RSA key".into()),
        }
    }

    /// Verifies `sig` (DER for ECDSA, the raw block for RSA) over `msg`
    /// with `alg`; a key of the other kind never verifies.
    pub fn verify(&self, alg: SigAlg, msg: &[u8], sig: &[u8]) -> bool {
        match (self, alg) {
            (IssuerKey::Ec(k), SigAlg::Ecdsa(h)) => k.verify(h, msg, sig),
            (IssuerKey::Rsa(k), SigAlg::RsaPkcs1(h)) => {
                let scheme = match h {
                    Hash::Sha256 => rsa::Pkcs1v15Sign::new::<Sha256>(),
                    Hash::Sha384 => rsa::Pkcs1v15Sign::new::<Sha384>(),
                    Hash::Sha512 => rsa::Pkcs1v15Sign::new::<Sha512>(),
                };
                k.verify(scheme, &h.digest(msg), sig).is_ok()
            }
            _ => false,
        }
    }

    /// What kind of key, for messages.
    pub fn kind(&self) -> String {
        use rsa::traits::PublicKeyParts;
        match self {
            IssuerKey::Ec(k) => format!("ECDSA {}", k.curve()),
            IssuerKey::Rsa(k) => format!("RSA-{}", k.n().bits()),
        }
    }
}

/// The DER of a bundle's `publicKey.rawBytes`: the pre-1.1 signer wrote
/// the key's PEM text there, later ones its DER.
pub fn raw_key_der(raw: &[u8]) -> Vec<u8> {
    if raw.starts_with(b"-----BEGIN")
        && let Ok(text) = std::str::from_utf8(raw)
        && let Some(Ok(der)) = pem_blocks(text, "PUBLIC KEY").into_iter().next()
    {
        return der;
    }
    raw.to_vec()
}

/// Every `label` block of a PEM text, decoded (or why one could not be).
pub fn pem_blocks(text: &str, label: &str) -> Vec<Result<Vec<u8>, String>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&begin) {
        let after = &rest[i + begin.len()..];
        let Some(j) = after.find(&end) else {
            out.push(Err(format!("{begin} without {end}")));
            break;
        };
        let body: String = after[..j].chars().filter(|c| !c.is_whitespace()).collect();
        out.push(
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .map_err(|e| format!("{label} block is not base64: {e}")),
        );
        rest = &after[j + end.len()..];
        if out.len() > 1000 {
            break;
        }
    }
    out
}

/// A certificate with what the report and the chain check need.
#[derive(Debug, Clone)]
pub struct Cert {
    /// The decoded certificate.
    pub cert: Certificate,
    /// Its DER.
    pub der: Vec<u8>,
}

/// The Fulcio extension with the OIDC issuer (v1, raw string).
const FULCIO_ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// The Fulcio extension with the OIDC issuer (v2, DER UTF8String).
const FULCIO_ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// The code-signing extended key usage.
const EKU_CODE_SIGNING: &str = "1.3.6.1.5.5.7.3.3";

impl Cert {
    /// Decodes a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Self, String> {
        Certificate::from_der(der)
            .map(|cert| Cert {
                cert,
                der: der.to_vec(),
            })
            .map_err(|e| format!("not an X.509 certificate: {e}"))
    }

    /// The subject, RFC 4514.
    pub fn subject(&self) -> String {
        self.cert.tbs_certificate.subject.to_string()
    }

    /// The issuer's name, RFC 4514.
    pub fn issuer_name(&self) -> String {
        self.cert.tbs_certificate.issuer.to_string()
    }

    /// `notBefore` and `notAfter`, seconds since the epoch.
    pub fn validity(&self) -> (u64, u64) {
        let v = &self.cert.tbs_certificate.validity;
        (
            v.not_before.to_unix_duration().as_secs(),
            v.not_after.to_unix_duration().as_secs(),
        )
    }

    /// The subject's SubjectPublicKeyInfo (DER).
    fn spki_der(&self) -> Result<Vec<u8>, String> {
        self.cert
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .map_err(|e| e.to_string())
    }

    /// The subject's public key.
    pub fn public_key(&self) -> Result<PublicKey, String> {
        PublicKey::from_spki_der(&self.spki_der()?)
    }

    /// The subject's public key as one that may sign certificates and
    /// timestamps (ECDSA or RSA).
    pub fn issuer_key(&self) -> Result<IssuerKey, String> {
        IssuerKey::from_spki_der(&self.spki_der()?)
    }

    /// The subject alternative names a Sigstore identity is read from
    /// (e-mail addresses and URIs).
    pub fn identities(&self) -> Vec<String> {
        let Ok(Some((_, san))) = self.cert.tbs_certificate.get::<SubjectAltName>() else {
            return Vec::new();
        };
        san.0
            .iter()
            .filter_map(|n| match n {
                GeneralName::Rfc822Name(s) | GeneralName::UniformResourceIdentifier(s) => {
                    Some(s.to_string())
                }
                _ => None,
            })
            .collect()
    }

    /// The OIDC issuer a Fulcio certificate records, if any.
    pub fn oidc_issuer(&self) -> Option<String> {
        let exts = self.cert.tbs_certificate.extensions.as_ref()?;
        for e in exts {
            let id = e.extn_id.to_string();
            let raw = e.extn_value.as_bytes();
            if id == FULCIO_ISSUER_V2 {
                if let Ok(s) = der::asn1::Utf8StringRef::from_der(raw) {
                    return Some(s.as_str().to_string());
                }
            } else if id == FULCIO_ISSUER_V1 {
                return Some(String::from_utf8_lossy(raw).into_owned());
            }
        }
        None
    }

    /// Whether the certificate may sign (digitalSignature key usage, or
    /// the code-signing extended key usage).
    pub fn can_sign(&self) -> bool {
        let ku = matches!(self.cert.tbs_certificate.get::<KeyUsage>(), Ok(Some((_, k))) if k.digital_signature());
        let eku = matches!(self.cert.tbs_certificate.get::<ExtendedKeyUsage>(),
            Ok(Some((_, e))) if e.0.iter().any(|o| o.to_string() == EKU_CODE_SIGNING));
        ku || eku
    }

    /// Whether the certificate is a CA (basicConstraints cA).
    pub fn is_ca(&self) -> bool {
        matches!(self.cert.tbs_certificate.get::<BasicConstraints>(), Ok(Some((_, b))) if b.ca)
    }

    /// Whether `issuer`'s key signed this certificate.
    pub fn signed_by(&self, issuer: &Cert) -> Result<(), String> {
        if self.cert.tbs_certificate.issuer != issuer.cert.tbs_certificate.subject {
            return Err(format!(
                "its issuer is \"{}\", not \"{}\"",
                self.issuer_name(),
                issuer.subject()
            ));
        }
        let oid = self.cert.signature_algorithm.oid.to_string();
        let Some(alg) = SigAlg::of_oid(&oid, None) else {
            return Err(format!(
                "it is signed with algorithm {oid}; only ECDSA and RSA (PKCS #1 v1.5) with SHA-256/384/512 are supported"
            ));
        };
        let key = issuer
            .issuer_key()
            .map_err(|e| format!("the issuer's key: {e}"))?;
        let tbs = self
            .cert
            .tbs_certificate
            .to_der()
            .map_err(|e| e.to_string())?;
        let sig = self
            .cert
            .signature
            .as_bytes()
            .ok_or("its signature has unused bits")?;
        if key.verify(alg, &tbs, sig) {
            Ok(())
        } else {
            Err(format!(
                "its signature does not verify with the {} key of \"{}\"",
                key.kind(),
                issuer.subject()
            ))
        }
    }
}

/// Verifies `chain` (leaf first, then the intermediates the bundle
/// carries) up to one of `roots`, every certificate valid at `at` (seconds
/// since the epoch), every issuer a CA. Returns the root's subject.
pub fn verify_chain(chain: &[Cert], roots: &[Cert], at: u64) -> Result<String, String> {
    let Some(leaf) = chain.first() else {
        return Err("the bundle carries no certificate".into());
    };
    let valid_at = |c: &Cert| {
        let (a, b) = c.validity();
        a <= at && at <= b
    };
    let mut current = leaf;
    let mut used = vec![false; chain.len()];
    used[0] = true;
    for _ in 0..=chain.len() {
        if !valid_at(current) {
            let (a, b) = current.validity();
            return Err(format!(
                "\"{}\" is not valid at the signing time {} (valid {} to {})",
                current.subject(),
                date(at),
                date(a),
                date(b)
            ));
        }
        // A root the user gave, by name and signature (the root itself
        // given as the leaf counts too).
        for r in roots {
            if r.der == current.der {
                return Ok(r.subject());
            }
            if current.cert.tbs_certificate.issuer == r.cert.tbs_certificate.subject
                && current.signed_by(r).is_ok()
            {
                if !r.is_ca() {
                    return Err(format!(
                        "the root \"{}\" is not a CA certificate",
                        r.subject()
                    ));
                }
                if !valid_at(r) {
                    return Err(format!(
                        "the root \"{}\" is not valid at the signing time",
                        r.subject()
                    ));
                }
                return Ok(r.subject());
            }
        }
        // Else the next certificate of the bundle's chain.
        let next = chain.iter().enumerate().find(|(i, c)| {
            !used[*i] && current.cert.tbs_certificate.issuer == c.cert.tbs_certificate.subject
        });
        let Some((i, issuer)) = next else {
            return Err(format!(
                "\"{}\" (issued by \"{}\") does not lead to any given root ({})",
                current.subject(),
                current.issuer_name(),
                roots
                    .iter()
                    .map(|r| format!("\"{}\"", r.subject()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        current
            .signed_by(issuer)
            .map_err(|e| format!("\"{}\": {e}", current.subject()))?;
        if !issuer.is_ca() {
            return Err(format!(
                "\"{}\" issues a certificate but is not a CA",
                issuer.subject()
            ));
        }
        used[i] = true;
        current = issuer;
    }
    Err("the chain loops".into())
}

/// A UTC date for messages.
pub fn date(secs: u64) -> String {
    let d = der::DateTime::from_unix_duration(Duration::from_secs(secs));
    match d {
        Ok(d) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            d.year(),
            d.month(),
            d.day(),
            d.hour(),
            d.minutes(),
            d.seconds()
        ),
        Err(_) => format!("{secs} s after 1970"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_oids_name_their_digest_and_bare_key_oids_take_the_signers() {
        use SigAlg::*;
        assert_eq!(
            SigAlg::of_oid("1.2.840.113549.1.1.12", None),
            Some(RsaPkcs1(Hash::Sha384))
        );
        assert_eq!(
            SigAlg::of_oid("1.2.840.10045.4.3.4", None),
            Some(Ecdsa(Hash::Sha512))
        );
        // rsaEncryption and id-ecPublicKey say nothing of the digest.
        assert_eq!(SigAlg::of_oid("1.2.840.113549.1.1.1", None), None);
        assert_eq!(
            SigAlg::of_oid("1.2.840.113549.1.1.1", Some(Hash::Sha256)),
            Some(RsaPkcs1(Hash::Sha256))
        );
        assert_eq!(
            SigAlg::of_oid("1.2.840.10045.2.1", Some(Hash::Sha384)),
            Some(Ecdsa(Hash::Sha384))
        );
        // RSASSA-PSS and SHA-1 with RSA are not accepted.
        assert_eq!(
            SigAlg::of_oid("1.2.840.113549.1.1.10", Some(Hash::Sha256)),
            None
        );
        assert_eq!(SigAlg::of_oid("1.2.840.113549.1.1.5", None), None);
    }

    #[test]
    fn an_rsa_key_under_2048_bits_is_refused_by_name() {
        use rsa::pkcs8::EncodePublicKey;
        // Any odd modulus of 1024 bits: the size is refused before any use.
        let n = (rsa::BigUint::from(1u8) << 1023usize) + rsa::BigUint::from(1u8);
        let key = rsa::RsaPublicKey::new(n, rsa::BigUint::from(65537u32)).unwrap();
        let der = key.to_public_key_der().unwrap();
        let err = IssuerKey::from_spki_der(der.as_bytes()).unwrap_err();
        assert!(err.contains("1024 bits"), "{err}");
        // A key of one kind never verifies a signature of the other.
        let n = (rsa::BigUint::from(1u8) << 2047usize) + rsa::BigUint::from(1u8);
        let key = rsa::RsaPublicKey::new(n, rsa::BigUint::from(65537u32)).unwrap();
        let der = key.to_public_key_der().unwrap();
        let k = IssuerKey::from_spki_der(der.as_bytes()).unwrap();
        assert_eq!(k.kind(), "RSA-2048");
        assert!(!k.verify(SigAlg::Ecdsa(Hash::Sha256), b"m", &[0x30, 0]));
        assert!(!k.verify(SigAlg::RsaPkcs1(Hash::Sha256), b"m", &[0; 256]));
    }
}
