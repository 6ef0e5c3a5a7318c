"""Test helper: signs and verifies bundles with the real `model-signing`
package (OpenSSF Model Signing), and makes the keys and certificates the
tests need with `cryptography` (which model-signing brings).

    oms.py keygen CURVE PRIV PUB            CURVE: p256 | p384 | p521
    oms.py sign-key DIR PRIV [SHARD_SIZE]   writes DIR/model.sig (files, or shards);
                                            DIR may be one file (model.sig beside it)
    oms.py pki OUT [rsa]                    OUT/{root,leaf,other_root,forged_root}.pem,
                                            leaf.key (forged_root: root's name, another
                                            key; rsa: the roots are RSA keys)
    oms.py sign-cert DIR KEY CERT [CHAIN..] writes DIR/model.sig (certificate method)
    oms.py sigstore-like DIR OUT [DEFECT]   a Fulcio-shaped leaf (SAN e-mail, OIDC
                                            issuer extension) and a Rekor-shaped dsse
                                            log entry made with a test log key;
                                            OUT/fulcio_root.pem, OUT/trusted_root.json.
                                            DEFECT: body | set | proof | checkpoint |
                                            time (one part of the entry wrong, the
                                            rest signed properly)
    oms.py sigstore-v2 DIR OUT [DEFECT]     the same leaf, logged the Rekor v2 way: a
                                            hashedrekord 0.0.2 entry (the digest of the
                                            envelope's PAE), a checkpoint signed by an
                                            Ed25519 log key, no signed entry timestamp;
                                            the signing time comes from an RFC 3161
                                            timestamp by a test timestamp authority.
                                            DEFECT: body | checkpoint | tsa-sig |
                                            tsa-imprint | tsa-digest | tsa-late |
                                            tsa-unknown | tsa-eku | dsse-v2 (the
                                            envelope logged as a dsse 0.0.2 entry);
                                            tsa-rsa | tsa-rsa-bare: a sound timestamp
                                            by an RSA authority; tsa-rsa-sig: its
                                            signature by another RSA key
    oms.py sigstore-verify DIR ROOT_JSON [chain]
                                            sigstore-python's own checks of the signed
                                            times (timestamps, SET), the log entry
                                            (inclusion proof, checkpoint, body against
                                            the bundle) and, with `chain`, the leaf's
                                            chain at every signed time: ok / FAIL
    oms.py verify-key DIR PUB [SHARD_SIZE]  prints ok / the tool's error; exit 0 / 1
    oms.py verify-cert DIR ROOT..           same, certificate method
    oms.py sign-hashing DIR PRIV OPT..      key method with the hashing options
    oms.py verify-hashing DIR PUB OPT..     model-signing's hashing.Config takes:
                                            hash=sha256|blake2|blake3, shard=SIZE,
                                            symlinks (allow_symlinks), ignore=PATH
                                            (repeatable; model.sig always ignored).
                                            The verifier is given the same options:
                                            the tool's own guess from the signature
                                            (model-signing 1.1.1) fails on "blake2b"
                                            and on allow_symlinks. verify: ok / FAIL
    oms.py leaf-facts SIG                   what a Sigstore bundle's leaf certificate
                                            says (identity from its SANs, issuer from
                                            Fulcio's OIDC issuer extension, v2 .1.8
                                            before v1 .1.1), its validity and the log
                                            entries' integrated times, as JSON
    oms.py verify-sigstore STORE WORK DIR IDENTITY ISSUER
                                            model-signing's Sigstore verifier with
                                            STORE's trusted root and signing config as
                                            its trust configuration (no network), the
                                            vectors' files only: ok / FAIL
"""

import base64
import datetime
import hashlib
import json
import pathlib
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

import model_signing

CURVES = {"p256": ec.SECP256R1, "p384": ec.SECP384R1, "p521": ec.SECP521R1}


def write_key(key, priv, pub):
    pathlib.Path(priv).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    if pub:
        pathlib.Path(pub).write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo,
            )
        )


def sig_of(d):
    """model.sig in the folder, or beside a single signed file."""
    return (d.parent if d.is_file() else d) / "model.sig"


def hashing(shard_size=None):
    h = model_signing.hashing.Config().set_ignored_paths(paths=["model.sig"])
    if shard_size:
        h.use_shard_serialization(shard_size=int(shard_size))
    return h


def hashing_options(opts):
    """A hashing.Config from `sign-hashing` / `verify-hashing` options."""
    alg, shard, links, ignore = "sha256", None, False, ["model.sig"]
    for o in opts:
        k, _, v = o.partition("=")
        if k == "hash":
            alg = v
        elif k == "shard":
            shard = int(v)
        elif k == "symlinks":
            links = True
        elif k == "ignore":
            ignore.append(v)
        else:
            raise SystemExit(f"unknown option {o}")
    h = model_signing.hashing.Config().set_ignored_paths(paths=ignore)
    # Config.hash() hands the serializer the Config's own allow_symlinks,
    # whatever use_*_serialization was given: both are set.
    h.set_allow_symlinks(links)
    if shard:
        h.use_shard_serialization(hashing_algorithm=alg, shard_size=shard, allow_symlinks=links)
    else:
        h.use_file_serialization(hashing_algorithm=alg, allow_symlinks=links)
    return h


def leaf_facts(sig):
    """`leaf-facts`: the Sigstore bundle's leaf certificate, read with
    cryptography (formatted as bundlescope's report formats times)."""

    def utc(t):
        return t.strftime("%Y-%m-%d %H:%M:%S UTC")

    b = json.loads(pathlib.Path(sig).read_text())
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
    return {
        "identities": ids,
        "issuer": issuer,
        "not_before": utc(c.not_valid_before_utc),
        "not_after": utc(c.not_valid_after_utc),
        "expired": c.not_valid_after_utc < now,
        "integrated": times,
    }


def verify_sigstore(store, work, d, identity, issuer):
    """`verify-sigstore`: the tool's verdict on a vector's folder."""
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
    cfg.verify(d, d / "model.sig")


def cert(subject, key, issuer, issuer_key, ca, extra=(), days=30):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if issuer_key is not key:
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    for ext, critical in extra:
        b = b.add_extension(ext, critical=critical)
    return b.sign(issuer_key, hashes.SHA256())


def pem(c):
    return c.public_bytes(serialization.Encoding.PEM)


def b64(b):
    return base64.b64encode(b).decode()


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_head(leaves):
    """RFC 6962 section 2.1: the Merkle tree hash of leaf hashes."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node(tree_head(leaves[:k]), tree_head(leaves[k:]))


def audit_path(m, leaves):
    """RFC 6962 section 2.1.1: the audit path of leaf m."""
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if m < k:
        return audit_path(m, leaves[:k]) + [tree_head(leaves[k:])]
    return audit_path(m - k, leaves[k:]) + [tree_head(leaves[:k])]


def inclusion_proof(index, size, root, path, envelope):
    """A bundle's inclusionProof: the audit path of leaf `index` of a tree
    of `size` up to `root`, and the checkpoint (signed note) `envelope`."""
    return {
        "logIndex": str(index),
        "rootHash": b64(root),
        "treeSize": str(size),
        "hashes": [b64(h) for h in path],
        "checkpoint": {"envelope": envelope},
    }


def tlog_record(url, spki, key_details, log_id):
    """The trusted root's record of a test log (in service since 2020)."""
    return {
        "baseUrl": url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": b64(spki),
            "keyDetails": key_details,
            "validFor": {"start": "2020-01-01T00:00:00Z"},
        },
        "logId": {"keyId": b64(log_id)},
    }


def log_entry(bundle, leaf, defect):
    """A Rekor-v1-shaped dsse 0.0.1 entry for `bundle`, logged at index 6
    of an 11-leaf tree by a fresh P-256 log key; returns (entry, tlog) where
    tlog is the trusted root's record of the log."""
    import rfc8785

    log_key = ec.generate_private_key(ec.SECP256R1())
    spki = log_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    log_id = hashlib.sha256(spki).digest()
    env = bundle["dsseEnvelope"]
    payload = base64.b64decode(env["payload"])
    if defect == "body":
        payload += b" "  # the log recorded some other payload
    body = rfc8785.dumps(
        {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": hashlib.sha256(json.dumps(env).encode()).hexdigest()},
                "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
                "signatures": [{"signature": s["sig"], "verifier": b64(pem(leaf))} for s in env["signatures"]],
            },
        }
    )
    index, size = 6, 11
    leaves = [hashlib.sha256(b"\x00" + (body if i == index else b"other entry %d" % i)).digest() for i in range(size)]
    root = tree_head(leaves)
    path = audit_path(index, leaves)
    if defect == "proof":
        path[1] = bytes([path[1][0] ^ 1]) + path[1][1:]
    origin = "bundlescope-test-log"
    note = f"{origin} - 1\n{size}\n{b64(root)}\n"
    note_key = ec.generate_private_key(ec.SECP256R1()) if defect == "checkpoint" else log_key
    note_sig = note_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
    envelope = note + "\n" + f"\u2014 {origin} {b64(log_id[:4] + note_sig)}\n"
    now = int(datetime.datetime.now(datetime.timezone.utc).timestamp())
    t = now + 60 * 86400 if defect == "time" else now  # after the leaf expired
    signed_t = t + 1 if defect == "set" else t
    set_msg = rfc8785.dumps({"body": b64(body), "integratedTime": signed_t, "logID": log_id.hex(), "logIndex": index})
    entry = {
        "logIndex": str(index),
        "logId": {"keyId": b64(log_id)},
        "kindVersion": {"kind": "dsse", "version": "0.0.1"},
        "integratedTime": str(t),
        "inclusionPromise": {"signedEntryTimestamp": b64(log_key.sign(set_msg, ec.ECDSA(hashes.SHA256())))},
        "inclusionProof": inclusion_proof(index, size, root, path, envelope),
        "canonicalizedBody": b64(body),
    }
    return entry, tlog_record("https://log.example.com", spki, "PKIX_ECDSA_P256_SHA_256", log_id)


def timestamp(message, defect):
    """An RFC 3161 TimeStampResp over `message` (the envelope's signature)
    by a fresh test timestamp authority; returns (response DER, the trusted
    root's record of the authority)."""
    from asn1crypto import cms, tsp
    from asn1crypto import x509 as ax509

    # tsa-rsa*: an RSA authority (RSA-3072 root, RSA-2048 signer), as
    # many timestamp authorities are.
    rsa_tsa = defect is not None and defect.startswith("tsa-rsa")
    root_key = rsa.generate_private_key(65537, 3072) if rsa_tsa else ec.generate_private_key(ec.SECP384R1())
    # The authority's certificates outlive the signing certificate (30
    # days), so that a timestamp after it expired (tsa-late) is sound.
    root = cert("bundlescope test TSA root", root_key, "bundlescope test TSA root", root_key, True, days=365)
    key = rsa.generate_private_key(65537, 2048) if rsa_tsa else ec.generate_private_key(ec.SECP256R1())
    eku = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING if defect == "tsa-eku" else ExtendedKeyUsageOID.TIME_STAMPING])
    leaf = cert("bundlescope test TSA", key, "bundlescope test TSA root", root_key, False, [(eku, True)], days=365)
    leaf_der = leaf.public_bytes(serialization.Encoding.DER)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    gen = now + datetime.timedelta(days=60) if defect == "tsa-late" else now
    stamped = message + b"x" if defect == "tsa-imprint" else message
    tst = tsp.TSTInfo(
        {
            "version": "v1",
            "policy": "1.3.6.1.4.1.57264.2",
            "message_imprint": {"hash_algorithm": {"algorithm": "sha256"}, "hashed_message": hashlib.sha256(stamped).digest()},
            "serial_number": 7,
            "gen_time": gen,
        }
    )
    content = tst.dump()
    digest = hashlib.sha256(content + (b"x" if defect == "tsa-digest" else b"")).digest()
    attrs = cms.CMSAttributes(
        [
            {"type": "content_type", "values": ["tst_info"]},
            {"type": "signing_time", "values": [cms.Time({"utc_time": gen})]},
            {"type": "message_digest", "values": [digest]},
            {"type": "signing_certificate_v2", "values": [{"certs": [{"cert_hash": hashlib.sha256(leaf_der).digest()}]}]},
        ]
    )
    if rsa_tsa:
        signer = rsa.generate_private_key(65537, 2048) if defect == "tsa-rsa-sig" else key
        sig = signer.sign(attrs.dump(), padding.PKCS1v15(), hashes.SHA256())
        # sha256WithRSAEncryption, or the bare rsaEncryption OID (the
        # digest then comes from digest_algorithm), as some authorities write.
        sig_alg = "rsassa_pkcs1v15" if defect == "tsa-rsa-bare" else "sha256_rsa"
    else:
        signer = ec.generate_private_key(ec.SECP256R1()) if defect == "tsa-sig" else key
        sig = signer.sign(attrs.dump(), ec.ECDSA(hashes.SHA256()))
        sig_alg = "sha256_ecdsa"
    a_leaf = ax509.Certificate.load(leaf_der)
    info = cms.SignerInfo(
        {
            "version": "v1",
            "sid": cms.SignerIdentifier(
                {"issuer_and_serial_number": {"issuer": a_leaf.issuer, "serial_number": a_leaf.serial_number}}
            ),
            "digest_algorithm": {"algorithm": "sha256"},
            "signed_attrs": attrs,
            "signature_algorithm": {"algorithm": sig_alg},
            "signature": sig,
        }
    )
    signed = cms.SignedData(
        {
            "version": "v3",
            "digest_algorithms": [{"algorithm": "sha256"}],
            "encap_content_info": {"content_type": "tst_info", "content": tst},
            "certificates": [a_leaf],
            "signer_infos": [info],
        }
    )
    token = cms.ContentInfo({"content_type": "signed_data", "content": signed})
    resp = tsp.TimeStampResp({"status": {"status": "granted"}, "time_stamp_token": token})
    if defect == "tsa-unknown":
        # The trusted root lists some other authority.
        other_key = ec.generate_private_key(ec.SECP384R1())
        root = cert("another TSA root", other_key, "another TSA root", other_key, True)
        leaf = cert("another TSA", other_key, "another TSA root", other_key, False, [(eku, True)])
    der = lambda c: b64(c.public_bytes(serialization.Encoding.DER))
    authority = {
        "subject": {"organization": "bundlescope", "commonName": "bundlescope test TSA"},
        "uri": "https://tsa.example.com",
        "certChain": {"certificates": [{"rawBytes": der(leaf)}, {"rawBytes": der(root)}]},
        "validFor": {"start": "2020-01-01T00:00:00Z"},
    }
    return resp.dump(), authority


def log_entry_v2(bundle, leaf, defect):
    """A Rekor-v2-shaped entry for `bundle`: hashedrekord 0.0.2 recording
    the SHA-256 of the envelope's PAE, the signature and the leaf (built
    with sigstore's own models, as its verifier expects them), at index 6
    of an 11-leaf tree whose checkpoint an Ed25519 log key signs; no signed
    entry timestamp (a v2 log gives none). Returns (entry, tlog)."""
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from sigstore_models.common import v1 as common
    from sigstore_models.rekor.v2 import entry as v2entry
    from sigstore_models.rekor.v2 import dsse, hashedrekord, verifier

    env = bundle["dsseEnvelope"]
    payload = base64.b64decode(env["payload"])
    if defect == "body":
        payload += b" "  # the log recorded some other payload
    ptype = env["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(payload), payload)
    signature = verifier.Signature(
        content=base64.b64encode(base64.b64decode(env["signatures"][0]["sig"])),
        verifier=verifier.Verifier(
            x509_certificate=common.X509Certificate(
                raw_bytes=base64.b64encode(leaf.public_bytes(serialization.Encoding.DER))
            ),
            key_details=common.PublicKeyDetails.PKIX_ECDSA_P256_SHA_256,
        ),
    )
    if defect == "dsse-v2":
        # The envelope logged as a dsse 0.0.2 entry (the payload's digest
        # and the signatures), which a Rekor v2 log's schema has but
        # sigstore's verifier refuses for DSSE (it expects hashedrekord).
        kind = "dsse"
        spec = v2entry.Spec(
            dsse_v002=dsse.DSSELogEntryV002(
                payload_hash=common.HashOutput(algorithm=common.HashAlgorithm.SHA2_256, digest=base64.b64encode(hashlib.sha256(payload).digest())),
                signatures=[signature],
            )
        )
    else:
        kind = "hashedrekord"
        spec = v2entry.Spec(
            hashed_rekord_v002=hashedrekord.HashedRekordLogEntryV002(
                data=common.HashOutput(algorithm=common.HashAlgorithm.SHA2_256, digest=base64.b64encode(hashlib.sha256(pae).digest())),
                signature=signature,
            )
        )
    body = v2entry.Entry(kind=kind, api_version="0.0.2", spec=spec).to_json().encode()
    log_key = ed25519.Ed25519PrivateKey.generate()
    raw = log_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    spki = log_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    origin = "log2025-test.example.com"
    # A signed note's key id (C2SP signed-note): SHA-256(name, LF, 0x01
    # for Ed25519, the raw key); its first 4 bytes are the signature hint.
    log_id = hashlib.sha256(origin.encode() + b"\n\x01" + raw).digest()
    index, size = 6, 11
    leaves = [hashlib.sha256(b"\x00" + (body if i == index else b"other entry %d" % i)).digest() for i in range(size)]
    root = tree_head(leaves)
    path = audit_path(index, leaves)
    note = f"{origin}\n{size}\n{b64(root)}\n"
    signer = ed25519.Ed25519PrivateKey.generate() if defect == "checkpoint" else log_key
    envelope = note + "\n" + f"\u2014 {origin} {b64(log_id[:4] + signer.sign(note.encode()))}\n"
    entry = {
        "logIndex": str(index),
        "logId": {"keyId": b64(log_id)},
        "kindVersion": {"kind": kind, "version": "0.0.2"},
        "inclusionProof": inclusion_proof(index, size, root, path, envelope),
        "canonicalizedBody": b64(body),
    }
    return entry, tlog_record("https://" + origin, spki, "PKIX_ED25519", log_id)


def sigstore_bundle(d, out, defect, v2):
    """A Fulcio-shaped leaf signs DIR; the bundle carries a Rekor v1 entry,
    or (v2) a Rekor v2 entry and an RFC 3161 timestamp."""
    out.mkdir(parents=True, exist_ok=True)
    root_key = ec.generate_private_key(ec.SECP384R1())
    root = cert("sigstore-like root", root_key, "sigstore-like root", root_key, True)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    issuer = "https://accounts.example.com"
    # The OIDC issuer extension (v2) holds a DER UTF8String.
    raw = issuer.encode()
    der = b"\x0c" + bytes([len(raw)]) + raw
    leaf = cert(
        "sigstore",
        leaf_key,
        "sigstore-like root",
        root_key,
        False,
        [
            (x509.SubjectAlternativeName([x509.RFC822Name("signer@example.com")]), False),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False),
            (x509.UnrecognizedExtension(ObjectIdentifier("1.3.6.1.4.1.57264.1.8"), der), False),
        ],
    )
    write_key(leaf_key, out / "leaf.key", None)
    (out / "leaf.pem").write_bytes(pem(leaf))
    (out / "fulcio_root.pem").write_bytes(pem(root))
    cfg = model_signing.signing.Config().use_certificate_signer(
        private_key=out / "leaf.key", signing_certificate=out / "leaf.pem", certificate_chain=[out / "fulcio_root.pem"]
    )
    cfg.set_hashing_config(hashing())
    cfg.sign(d, d / "model.sig")
    # Reshape the verification material as a Sigstore bundle carries
    # it: the leaf alone, and a transparency-log entry. The DSSE
    # signature covers only the payload, so it still holds.
    b = json.loads((d / "model.sig").read_text())
    b["mediaType"] = "application/vnd.dev.sigstore.bundle.v0.3+json"
    b["verificationMaterial"] = {
        "certificate": {"rawBytes": base64.b64encode(leaf.public_bytes(serialization.Encoding.DER)).decode()},
    }
    authorities = []
    if v2:
        entry, tlog = log_entry_v2(b, leaf, defect)
        sig = base64.b64decode(b["dsseEnvelope"]["signatures"][0]["sig"])
        resp, authority = timestamp(sig, defect)
        authorities.append(authority)
        b["verificationMaterial"]["timestampVerificationData"] = {"rfc3161Timestamps": [{"signedTimestamp": b64(resp)}]}
    else:
        entry, tlog = log_entry(b, leaf, defect)
    b["verificationMaterial"]["tlogEntries"] = [entry]
    (d / "model.sig").write_text(json.dumps(b))
    trusted = {
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [tlog],
        "certificateAuthorities": [
            {
                "subject": {"organization": "bundlescope", "commonName": "sigstore-like root"},
                "uri": "https://ca.example.com",
                "certChain": {"certificates": [{"rawBytes": base64.b64encode(root.public_bytes(serialization.Encoding.DER)).decode()}]},
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            }
        ],
        "ctlogs": [],
        "timestampAuthorities": authorities,
    }
    (out / "trusted_root.json").write_text(json.dumps(trusted))


def main(argv):
    cmd = argv[0]
    if cmd == "keygen":
        write_key(ec.generate_private_key(CURVES[argv[1]]()), argv[2], argv[3])
    elif cmd == "sign-key":
        d = pathlib.Path(argv[1])
        cfg = model_signing.signing.Config().use_elliptic_key_signer(private_key=argv[2])
        cfg.set_hashing_config(hashing(argv[3] if len(argv) > 3 else None))
        cfg.sign(d, sig_of(d))
    elif cmd == "pki":
        out = pathlib.Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        # `pki OUT rsa`: an RSA-3072 root (the leaf stays ECDSA: OMS signs
        # with ECDSA); other_root is RSA too.
        rsa_root = argv[2:] == ["rsa"]
        root_key = rsa.generate_private_key(65537, 3072) if rsa_root else ec.generate_private_key(ec.SECP384R1())
        root = cert("bundlescope test root", root_key, "bundlescope test root", root_key, True)
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = cert(
            "bundlescope test signer",
            leaf_key,
            "bundlescope test root",
            root_key,
            False,
            [(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)],
        )
        other_key = rsa.generate_private_key(65537, 2048) if rsa_root else ec.generate_private_key(ec.SECP256R1())
        other = cert("another root", other_key, "another root", other_key, True)
        (out / "root.pem").write_bytes(pem(root))
        (out / "leaf.pem").write_bytes(pem(leaf))
        (out / "other_root.pem").write_bytes(pem(other))
        # The root's name on another key of its kind: only the
        # signature on the leaf can tell them apart.
        forged_key = rsa.generate_private_key(65537, 3072) if rsa_root else ec.generate_private_key(ec.SECP384R1())
        forged = cert("bundlescope test root", forged_key, "bundlescope test root", forged_key, True)
        (out / "forged_root.pem").write_bytes(pem(forged))
        write_key(leaf_key, out / "leaf.key", None)
    elif cmd == "sign-cert":
        d = pathlib.Path(argv[1])
        cfg = model_signing.signing.Config().use_certificate_signer(
            private_key=argv[2], signing_certificate=argv[3], certificate_chain=argv[4:]
        )
        cfg.set_hashing_config(hashing())
        cfg.sign(d, d / "model.sig")
    elif cmd in ("sigstore-like", "sigstore-v2"):
        sigstore_bundle(pathlib.Path(argv[1]), pathlib.Path(argv[2]), argv[3] if len(argv) > 3 else None, cmd == "sigstore-v2")
    elif cmd == "sigstore-verify":
        from sigstore._internal.trust import KeyringPurpose
        from sigstore.models import Bundle, TrustedRoot
        from sigstore.verify.verifier import (
            Verifier,
            _validate_dsse_v001_entry_body,
            _validate_hashedrekord_v002_dsse_entry_body,
        )

        try:
            b = Bundle.from_json((pathlib.Path(argv[1]) / "model.sig").read_text())
            root = TrustedRoot.from_file(argv[2])
            v = Verifier(trusted_root=root)
            # The verifier's own steps, less the SCT (the test leaf has
            # none) and the identity policy.
            times = v._establish_time(b)
            if not times:
                raise ValueError("no verified source of time")
            b.log_entry._verify(root.rekor_keyring(KeyringPurpose.VERIFY))
            kv = b.log_entry._inner.kind_version
            # The entry kinds Verifier.verify_dsse accepts, and its refusal
            # of any other.
            if (kv.kind, kv.version) == ("hashedrekord", "0.0.2"):
                _validate_hashedrekord_v002_dsse_entry_body(b)
            elif (kv.kind, kv.version) == ("dsse", "0.0.1"):
                _validate_dsse_v001_entry_body(b)
            else:
                raise ValueError(f"unsupported DSSE log entry type: {kv.kind}/{kv.version}")
            if argv[3:] == ["chain"]:
                for t in times:
                    v._verify_chain_at_time(b.signing_certificate, t)
        except Exception as e:  # the tool's verdict, whatever raised it
            print(f"FAIL {type(e).__name__}: {e}")
            return 1
        print("ok")
    elif cmd in ("verify-key", "verify-cert"):
        d = pathlib.Path(argv[1])
        cfg = model_signing.verifying.Config()
        if cmd == "verify-key":
            cfg.use_elliptic_key_verifier(public_key=argv[2])
        else:
            cfg.use_certificate_verifier(certificate_chain=argv[2:])
        try:
            cfg.set_hashing_config(hashing(argv[-1] if argv[-1].isdigit() else None))
            cfg.verify(d, sig_of(d))
        except Exception as e:  # the tool's verdict, whatever raised it
            print(f"FAIL {type(e).__name__}: {e}")
            return 1
        print("ok")
    elif cmd == "sign-hashing":
        d = pathlib.Path(argv[1])
        cfg = model_signing.signing.Config().use_elliptic_key_signer(private_key=argv[2])
        cfg.set_hashing_config(hashing_options(argv[3:]))
        cfg.sign(d, d / "model.sig")
    elif cmd in ("verify-hashing", "verify-sigstore"):
        try:
            if cmd == "verify-hashing":
                d = pathlib.Path(argv[1])
                cfg = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=argv[2])
                cfg.set_hashing_config(hashing_options(argv[3:]))
                cfg.verify(d, d / "model.sig")
            else:
                verify_sigstore(*argv[1:6])
        except Exception as e:  # the tool's verdict, whatever raised it
            print(f"FAIL {type(e).__name__}: {e}")
            return 1
        print("ok")
    elif cmd == "leaf-facts":
        print(json.dumps(leaf_facts(argv[1])))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
