//! The OMS signature parser: any bytes as `model.sig` (the Sigstore bundle
//! JSON, its DSSE envelope, the in-toto statement inside, the certificates
//! and keys it carries), checked against the keys and roots that verify the
//! seeds (fuzz/oms/, written with them by scripts/fuzz_seeds.py) and with
//! none, then its signed manifest compared with the seeds' model folder.
#![no_main]

use std::collections::HashMap;
use std::sync::OnceLock;

use bundlescope::signing::crypto::{Cert, PublicKey, pem_blocks};
use bundlescope::signing::{self, Trust, folder, timestamp, tlog};
use bundlescope::util::cancel::CancelToken;
use libfuzzer_sys::fuzz_target;

/// The keys and roots of the seeds, read once.
fn trust() -> &'static Trust {
    static T: OnceLock<Trust> = OnceLock::new();
    T.get_or_init(|| {
        let key = |pem: &str| PublicKey::from_pem(pem).expect("a seed key");
        let certs = |pem: &str| -> Vec<Cert> {
            pem_blocks(pem, "CERTIFICATE")
                .into_iter()
                .map(|b| Cert::from_der(&b.expect("seed PEM")).expect("a seed root"))
                .collect()
        };
        let v2: serde_json::Value =
            serde_json::from_str(include_str!("../oms/sigstore_v2_root.json")).expect("seed JSON");
        Trust {
            keys: vec![
                ("key-p256.pub.pem".into(), key(include_str!("../oms/key-p256.pub.pem"))),
                ("key-p384.pub.pem".into(), key(include_str!("../oms/key-p384.pub.pem"))),
            ],
            roots: certs(include_str!("../oms/root.pem")),
            sigstore_roots: Some(certs(include_str!("../oms/fulcio_root.pem"))),
            // The Rekor v2 seed's log key (Ed25519) and timestamp
            // authority: its entry, checkpoint and RFC 3161 timestamp are
            // verified all the way. The v1 seed's entry stops at the log
            // lookup (its proofs and checkpoint have unit tests of
            // malformed input in src/signing/tlog.rs).
            sigstore_logs: tlog::log_keys(&v2).expect("the seed log key"),
            sigstore_tsas: timestamp::authorities(&v2).expect("the seed TSA"),
        }
    })
}

/// The model folder the seeds sign (scripts/fuzz_seeds.py `oms_model`),
/// written once and only read after.
fn model() -> &'static tempfile::TempDir {
    static D: OnceLock<tempfile::TempDir> = OnceLock::new();
    D.get_or_init(|| {
        let d = tempfile::tempdir().expect("a temp folder");
        let weights: Vec<u8> = (0..256u32).map(|i| (i * 7 % 256) as u8).collect();
        bundlescope_fuzz::write_all(
            d.path(),
            &[
                ("config.json", b"{\"model_type\": \"fuzz\"}\n"),
                ("weights.bin", &weights),
            ],
        );
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let none = signing::check_signature("model.sig", data, &Trust::default());
    let c = signing::check_signature("model.sig", data, trust());
    // Verified only with a key or root, and never without a statement.
    assert!(!none.report.verified);
    assert!(!c.report.verified || (c.statement.is_some() && c.report.signature_valid == Some(true)));
    if c.statement.is_none() {
        assert!(!c.report.verified && signing::has_errors(&c.findings));
    }
    let _ = c.report.headline();
    if let Some(s) = &c.statement {
        let cmp = folder::compare(
            model().path(),
            s,
            None,
            &folder::Known::default(),
            false,
            &CancelToken::default(),
        );
        assert!(cmp.files_checked <= 2, "{cmp:?}");
    }
});
