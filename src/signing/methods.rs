//! The three OMS signing methods: a bare key, a certificate chain to a
//! private root, and Sigstore. Each verifies the DSSE signature with its key
//! and says exactly what it could not verify.

use super::bundle::SigBundle;
use super::crypto::{self, Cert, PublicKey};
use super::{Checked, SigningMethod, Trust, timestamp, tlog};
use crate::finding::{Finding, checks};

pub(super) fn key_method(
    c: &mut Checked,
    _b: &SigBundle,
    hint: Option<&str>,
    raw: Option<&[u8]>,
    trust: &Trust,
    verify_with: &dyn Fn(&PublicKey) -> Option<bool>,
    pre: &mut bool,
) -> bool {
    // What the bundle names: its hint, else the fingerprint of the key it
    // carries whole (the report's key_hint holds either).
    let named_fp = c.report.key_hint.clone();
    let naming = match (hint, &named_fp) {
        (Some(h), _) => format!("the bundle's key hint is {h}"),
        (None, Some(fp)) => format!("the bundle carries the key itself, fingerprint {fp}"),
        (None, None) => "the bundle names no key".into(),
    };
    if trust.keys.is_empty() {
        c.findings.push(
            Finding::warning(
                checks::OMS_KEY,
                format!("signature not checked: no key given ({naming}); pass --key PUB.pem"),
            )
            .field("verificationMaterial.publicKey"),
        );
        c.report
            .not_verified
            .push("signature not checked: no key given".into());
        return false;
    }
    // The given key the bundle names (by hint or raw key), else the first.
    let named = trust.keys.iter().find(|(_, k)| {
        hint.is_some_and(|h| h.eq_ignore_ascii_case(&k.fingerprint()))
            || raw.is_some_and(|r| crypto::raw_key_der(r) == k.spki_der())
    });
    let (file, key) = named.unwrap_or(&trust.keys[0]);
    c.report.key_fingerprint = Some(key.fingerprint());
    if named.is_none() && (hint.is_some() || raw.is_some()) {
        c.findings.push(
            Finding::error(
                checks::OMS_KEY,
                format!(
                    "{naming}, but --key {file} is {} ({}); the signature was made with another key",
                    key.fingerprint(),
                    key.curve()
                ),
            )
            .field(if hint.is_some() {
                "verificationMaterial.publicKey.hint"
            } else {
                "verificationMaterial.publicKey.rawBytes"
            }),
        );
        c.report.signature_valid = Some(false);
        c.report
            .not_verified
            .push("the given key is not the signer's".into());
        return false;
    }
    match verify_with(key) {
        Some(old) => {
            *pre = old;
            c.report.signature_valid = Some(true);
            true
        }
        None => {
            c.findings.push(
                Finding::error(
                    checks::OMS_SIGNATURE,
                    format!("the DSSE signature does not verify with --key {file} ({}): the statement or the signature was changed", key.curve()),
                )
                .field("dsseEnvelope.signatures[0].sig"),
            );
            c.report.signature_valid = Some(false);
            false
        }
    }
}

pub(super) fn cert_method(
    c: &mut Checked,
    b: &SigBundle,
    chain: &[Cert],
    trust: &Trust,
    verify_with: &dyn Fn(&PublicKey) -> Option<bool>,
    pre: &mut bool,
) -> bool {
    let leaf = &chain[0];
    let fulcio = leaf.oidc_issuer();
    let sigstore = !b.tlog.is_empty() || fulcio.is_some();
    let (nb, na) = leaf.validity();
    c.report.certificate_validity = Some([crypto::date(nb), crypto::date(na)]);
    if sigstore {
        c.report.method = Some(SigningMethod::Sigstore);
        c.report.identity = leaf
            .identities()
            .into_iter()
            .next()
            .or_else(|| Some(leaf.subject()));
        c.report.issuer = fulcio;
    } else {
        c.report.method = Some(SigningMethod::Certificate);
        c.report.certificate_subject = Some(leaf.subject());
        c.report.issuer = Some(leaf.issuer_name());
    }
    // The signature with the leaf's key.
    let key = match leaf.public_key() {
        Ok(k) => k,
        Err(e) => {
            c.findings.push(
                Finding::error(
                    checks::OMS_CERTIFICATE,
                    format!("the signing certificate's key: {e}"),
                )
                .field("verificationMaterial.certificates[0]"),
            );
            c.report
                .not_verified
                .push("the signing certificate's key is unusable".into());
            return false;
        }
    };
    let sig_ok = match verify_with(&key) {
        Some(old) => {
            *pre = old;
            true
        }
        None => {
            c.findings.push(
                Finding::error(
                    checks::OMS_SIGNATURE,
                    format!(
                        "the DSSE signature does not verify with the key of \"{}\": the statement or the signature was changed",
                        leaf.subject()
                    ),
                )
                .field("dsseEnvelope.signatures[0].sig"),
            );
            false
        }
    };
    c.report.signature_valid = Some(sig_ok);
    if !leaf.can_sign() {
        c.findings.push(
            Finding::error(
                checks::OMS_CERTIFICATE,
                format!("\"{}\" may not sign: neither digitalSignature key usage nor the code-signing extended key usage", leaf.subject()),
            )
            .field("verificationMaterial.certificates[0]"),
        );
        return false;
    }
    let roots: Option<&[Cert]> = if sigstore {
        trust.sigstore_roots.as_deref()
    } else if trust.roots.is_empty() {
        None
    } else {
        Some(&trust.roots)
    };
    // With a trusted root, the Sigstore log entry comes first: a verified
    // signed entry timestamp gives the signing time the chain is checked
    // at. Otherwise the chain is checked at the signing time as the
    // certificate gives it (its notBefore), as the reference verifier does.
    let logged = match (sigstore, roots) {
        (true, Some(_)) => {
            let o = tlog::verify(b, leaf, &trust.sigstore_logs);
            c.findings.extend(o.findings.iter().cloned());
            c.report.not_verified.extend(o.not_verified.iter().cloned());
            Some(o)
        }
        _ => None,
    };
    // The signing times that verified: the log's (a verified signed entry
    // timestamp, Rekor v1) and every RFC 3161 timestamp by an authority
    // of the trusted root (Rekor v2 gives no other). The chain is checked
    // at each; with none, at the certificate's notBefore.
    let mut times = Vec::new();
    let mut stamps_ok = true;
    if let Some(o) = &logged {
        if let Some(t) = o.time {
            times.push(t);
            c.report.signing_times.push(format!(
                "{} (signed entry timestamp of the log)",
                crypto::date(t)
            ));
        }
        stamps_ok = stamps(c, b, trust, &mut times);
    }
    let ats: &[u64] = if times.is_empty() { &[nb] } else { &times };
    let chain_ok = match roots {
        None => {
            let (what, flag) = if sigstore {
                (
                    "the certificate chain up to the Sigstore (Fulcio) root",
                    "--trusted-root trusted_root.json",
                )
            } else {
                ("the certificate chain", "--cert-root ROOT.pem")
            };
            c.findings.push(
                Finding::warning(
                    if sigstore {
                        checks::OMS_SIGSTORE
                    } else {
                        checks::OMS_CERTIFICATE
                    },
                    format!("{what} was not verified: no root given ({flag})"),
                )
                .field("verificationMaterial"),
            );
            c.report
                .not_verified
                .push(format!("{what} (no root given)"));
            false
        }
        Some(roots) => {
            let mut ok = true;
            for &at in ats {
                match crypto::verify_chain(chain, roots, at) {
                    Ok(root) => {
                        if !sigstore {
                            c.report.issuer = Some(root);
                        }
                    }
                    Err(e) => {
                        c.findings.push(
                            Finding::error(
                                checks::OMS_CERTIFICATE,
                                format!("the certificate chain does not verify: {e}"),
                            )
                            .field("verificationMaterial.certificates"),
                        );
                        c.report.not_verified.push("the certificate chain".into());
                        ok = false;
                        break;
                    }
                }
            }
            ok
        }
    };
    if !sigstore {
        return sig_ok && chain_ok;
    }
    match logged {
        // Without a trusted root there are no log keys: say so, every time.
        None => {
            let stamps = match b.timestamps.len() {
                0 => String::new(),
                1 => ", its RFC 3161 timestamp".to_string(),
                n => format!(", its {n} RFC 3161 timestamps"),
            };
            let what = format!(
                "the transparency-log entry ({} in the bundle){stamps}, and so the signing time",
                b.tlog.len()
            );
            c.findings.push(
                Finding::warning(
                    checks::OMS_SIGSTORE,
                    format!("not verified: {what}; the log's keys come only from --trusted-root (bundlescope never contacts the log)"),
                )
                .field("verificationMaterial.tlogEntries"),
            );
            c.report.not_verified.push(what);
            false
        }
        Some(o) => {
            if o.verified && times.is_empty() && stamps_ok {
                // The log holds the entry, but nothing signed says when.
                c.findings.push(
                    Finding::warning(
                        checks::OMS_TLOG,
                        "the entry is in the log, but neither a signed entry timestamp nor an RFC 3161 timestamp signs a signing time: the certificate's validity at signing time was not verified".to_string(),
                    )
                    .field("verificationMaterial.tlogEntries[0].inclusionPromise"),
                );
                c.report
                    .not_verified
                    .push("the signing time (nothing signed gives it)".into());
            }
            sig_ok && chain_ok && o.verified && stamps_ok && !times.is_empty()
        }
    }
}

/// Verifies the bundle's RFC 3161 timestamps against the trusted root's
/// timestamp authorities, adding each verified time to `times`; every one
/// that does not verify is an `oms.timestamp` error. False when any failed.
fn stamps(c: &mut Checked, b: &SigBundle, trust: &Trust, times: &mut Vec<u64>) -> bool {
    const FIELD: &str = "verificationMaterial.timestampVerificationData.rfc3161Timestamps";
    if b.timestamps.is_empty() {
        return true;
    }
    if trust.sigstore_tsas.is_empty() {
        c.findings.push(
            Finding::error(
                checks::OMS_TIMESTAMP,
                format!(
                    "the bundle carries {} signed timestamp(s), but --trusted-root lists no timestamp authority to verify them with",
                    b.timestamps.len()
                ),
            )
            .field(FIELD),
        );
        c.report
            .not_verified
            .push("the RFC 3161 timestamps (no timestamp authority in --trusted-root)".into());
        return false;
    }
    let Some(message) = b.signatures.first() else {
        return false;
    };
    let mut ok = true;
    for (i, der) in b.timestamps.iter().enumerate() {
        if b.timestamps[..i].contains(der) {
            c.findings.push(
                Finding::error(
                    checks::OMS_TIMESTAMP,
                    format!("RFC 3161 timestamp {i} repeats an earlier one"),
                )
                .field(format!("{FIELD}[{i}].signedTimestamp")),
            );
            ok = false;
            continue;
        }
        match timestamp::verify(der, message, &trust.sigstore_tsas) {
            Ok(s) => {
                times.push(s.time);
                c.report.signing_times.push(format!(
                    "{} (RFC 3161 timestamp by {})",
                    crypto::date(s.time),
                    s.authority
                ));
            }
            Err(why) => {
                c.findings.push(
                    Finding::error(
                        checks::OMS_TIMESTAMP,
                        format!("RFC 3161 timestamp {i} does not verify: {why}"),
                    )
                    .field(format!("{FIELD}[{i}].signedTimestamp")),
                );
                c.report.not_verified.push(format!("signed timestamp {i}"));
                ok = false;
            }
        }
    }
    ok
}
