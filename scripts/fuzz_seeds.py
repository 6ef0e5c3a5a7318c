#!/usr/bin/env python3
"""Writes the fuzz seed corpora (fuzz/corpus/<target>/) from the sample
writers: `bundlescope sample` of every format, shrunk to a few KiB each
(fewer tensors, re-laid out, hashes and sizes recomputed) so libFuzzer runs
fast on them; and the OMS signature seeds (fuzz/corpus/oms_signature/),
signed by the real model-signing (.pydeps-oms) over the fuzz target's
model folder, with the keys and roots that verify them in fuzz/oms/.
Usage: scripts/fuzz_seeds.py [BUNDLESCOPE_BINARY] [--only oms_signature]"""

import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = [a for a in sys.argv[1:] if a not in ("--only", "oms_signature")]
ONLY_OMS = "--only" in sys.argv[1:]
BIN = ARGS[0] if ARGS else os.path.join(ROOT, "target", "ci", "bundlescope")
OUT = os.path.join(ROOT, "fuzz", "corpus")


def join(parts):
    """The fuzz crate's `join`: every part but the last prefixed by its u32 length."""
    out = b""
    for i, p in enumerate(parts):
        if i + 1 < len(parts):
            out += struct.pack("<I", len(p))
        out += p
    return out


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def sample(tmp, fmt, *extra):
    d = os.path.join(tmp, fmt)
    subprocess.run([BIN, "sample", "--format", fmt, d, *extra], check=True,
                   stdout=subprocess.DEVNULL)
    return d


def read(path):
    with open(path, "rb") as f:
        return f.read()


def shrink_audio8(d, budget=1024):
    """The manifest's small dense records only, packed from offset 0, with the
    payload's size and hash recomputed (a valid small bundle)."""
    m = json.loads(read(os.path.join(d, "manifest.json")))
    payload = read(os.path.join(d, "weights.bin"))
    kept, out = [], b""
    for t in m["tensors"]:
        if t["precision"] == "original" and t["bytes"] <= 512 and len(out) + t["bytes"] <= budget:
            src = payload[t["offset"]:t["offset"] + t["bytes"]]
            t = dict(t, offset=len(out))
            out += src
            kept.append(t)
    m["tensors"] = kept
    m["tie_word_embeddings"] = False
    names = {t["name"] for t in kept}
    m["aliases"] = {k: v for k, v in m.get("aliases", {}).items() if v in names}
    m["weights_bytes"] = len(out)
    m["weights_sha256"] = hashlib.sha256(out).hexdigest()
    return json.dumps(m, indent=1).encode(), out


def st_parse(b):
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return h, b[8 + n:]


def st_write(entries):
    """entries: [(name, dtype, shape, bytes)] -> a safetensors file."""
    header, data = {}, b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    j = json.dumps(header, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    return struct.pack("<Q", len(j)) + j + data


def shrink_safetensors(files, group_budget, budget):
    """Keeps whole modules (tensors sharing the name up to the last dot)
    whose bytes fit `group_budget`, up to `budget` in all, across `files`;
    returns one safetensors file and the kept names."""
    groups = {}
    for b in files:
        h, data = st_parse(b)
        for name, t in h.items():
            if name == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            groups.setdefault(name.rsplit(".", 1)[0], []).append(
                (name, t["dtype"], t["shape"], data[lo:hi]))
    kept, total = [], 0
    for g in sorted(groups.values(), key=lambda g: sum(len(t[3]) for t in g)):
        size = sum(len(t[3]) for t in g)
        if size <= group_budget and total + size <= budget:
            kept += g
            total += size
    kept.sort(key=lambda t: t[0])
    return st_write(kept), [t[0] for t in kept]


def gguf_string(s):
    s = s.encode()
    return struct.pack("<Q", len(s)) + s


def tiny_gguf():
    """A GGUF v3 file written here from the format's rules: two key/values
    (a string and an array of strings) and two tensors (F32 [32], Q8_0 [32])."""
    kvs = gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama")
    kvs += gguf_string("tokenizer.ggml.tokens") + struct.pack("<II", 9, 8) + struct.pack("<Q", 2)
    kvs += gguf_string("a") + gguf_string("b")
    f32 = struct.pack("<32f", *[i / 8 for i in range(32)])
    q8 = struct.pack("<e", 0.05) + bytes((i * 7) % 256 for i in range(32))
    infos = gguf_string("t.f32") + struct.pack("<IQIQ", 1, 32, 0, 0)
    infos += gguf_string("t.q8_0") + struct.pack("<IQIQ", 1, 32, 8, 128)
    head = b"GGUF" + struct.pack("<IQQ", 3, 2, 2) + kvs + infos
    head += b"\0" * (-len(head) % 32)
    return head + f32 + b"\0" * (128 - len(f32)) + q8


def oms_model(d):
    """The model folder the oms_signature fuzz target compares signatures
    with (fuzz_targets/oms_signature.rs writes the same two files)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "wb") as f:
        f.write(b'{"model_type": "fuzz"}\n')
    with open(os.path.join(d, "weights.bin"), "wb") as f:
        f.write(bytes((i * 7) % 256 for i in range(256)))


def oms_seeds():
    """Real model.sig files of every method, signed by model-signing."""
    deps = os.environ.get("BUNDLESCOPE_OMS_DEPS", os.path.join(ROOT, ".pydeps-oms"))
    if not os.path.isdir(os.path.join(deps, "model_signing")):
        print("oms_signature: skipped (model-signing is not in .pydeps-oms)")
        return
    # The project's Python (the one model-signing was installed for).
    py = os.path.join(ROOT, ".pydeps", "python")
    py = py if os.path.exists(py) else sys.executable
    env = dict(os.environ, PYTHONPATH=deps)

    def oms(*args):
        subprocess.run([py, os.path.join(ROOT, "tests", "oms", "oms.py"), *args],
                       check=True, env=env, stdout=subprocess.DEVNULL)

    trust = os.path.join(ROOT, "fuzz", "oms")
    os.makedirs(trust, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        def signed(name, *sign):
            d = os.path.join(tmp, name)
            oms_model(d)
            oms(*sign[:1], d, *sign[1:])
            put("oms_signature", name + ".sig", read(os.path.join(d, "model.sig")))
            return d

        for curve in ("p256", "p384"):
            priv = os.path.join(tmp, curve + ".key")
            oms("keygen", curve, priv, os.path.join(trust, "key-" + curve + ".pub.pem"))
            signed("key-" + curve, "sign-key", priv)
        signed("key-p256-shards", "sign-key", os.path.join(tmp, "p256.key"), "64")
        pki = os.path.join(tmp, "pki")
        oms("pki", pki)
        signed("certificate", "sign-cert", os.path.join(pki, "leaf.key"),
               os.path.join(pki, "leaf.pem"), os.path.join(pki, "root.pem"))
        with open(os.path.join(trust, "root.pem"), "wb") as f:
            f.write(read(os.path.join(pki, "root.pem")))
        ss = os.path.join(tmp, "sigstore-out")
        d = os.path.join(tmp, "sigstore")
        oms_model(d)
        oms("sigstore-like", d, ss)
        put("oms_signature", "sigstore.sig", read(os.path.join(d, "model.sig")))
        with open(os.path.join(trust, "fulcio_root.pem"), "wb") as f:
            f.write(read(os.path.join(ss, "fulcio_root.pem")))
        # Rekor v2: a hashedrekord 0.0.2 entry under an Ed25519 checkpoint
        # and an RFC 3161 timestamp; the target verifies both with the log
        # key and timestamp authority of this trusted root.
        ss2 = os.path.join(tmp, "sigstore-v2-out")
        d = os.path.join(tmp, "sigstore-v2")
        oms_model(d)
        oms("sigstore-v2", d, ss2)
        put("oms_signature", "sigstore-v2.sig", read(os.path.join(d, "model.sig")))
        v2 = json.loads(read(os.path.join(ss2, "trusted_root.json")))
        with open(os.path.join(trust, "sigstore_v2_root.json"), "w") as f:
            json.dump({"tlogs": v2["tlogs"], "timestampAuthorities": v2["timestampAuthorities"]}, f, indent=1)


def main():
    if ONLY_OMS:
        oms_seeds()
        return
    oms_seeds()
    with tempfile.TemporaryDirectory() as tmp:
        a8 = {f: shrink_audio8(sample(tmp, f)) for f in ("audio8-v2", "audio8-v1")}
        g = sample(tmp, "gptq-q4", "--parent", os.path.join(tmp, "audio8-v2"))
        for f, (m, p) in a8.items():
            put("audio8_manifest", f + ".json", m)
            put("audit_bundle", f, bytes([0]) + join([m, p]))
        put("audio8_manifest", "gptq-q4.json", read(os.path.join(g, "manifest.json")))
        put("audio8_manifest", "audio8-v2-full.json", read(os.path.join(tmp, "audio8-v2", "manifest.json")))

        nv = sample(tmp, "nvfp4", "--layers", "1", "--experts", "2")
        m = json.loads(read(os.path.join(nv, "manifest.json")))
        put("nvfp4_manifest", "full-manifest", join([json.dumps(m).encode(), b""]))
        shards = [read(os.path.join(nv, s["file"])) for s in m["shards"]]
        shard, names = shrink_safetensors(shards, 12288, 16384)
        name = "model-00001-of-00001.safetensors"
        m["shards"] = [{"file": name, "bytes": len(shard), "sha256": hashlib.sha256(shard).hexdigest()}]
        m["weight_map"] = {n: name for n in names}
        mb = json.dumps(m, indent=1).encode()
        put("nvfp4_manifest", "small", join([mb, shard]))
        put("audit_bundle", "nvfp4", bytes([1]) + join([mb, shard]))
        put("safetensors_header", "nvfp4-shard.safetensors", shard)

        ml = sample(tmp, "mlx-lm", "--layers", "1", "--experts", "2")
        config = read(os.path.join(ml, "config.json"))
        shards = [read(os.path.join(ml, f)) for f in sorted(os.listdir(ml)) if f.endswith(".safetensors")]
        shard, names = shrink_safetensors(shards, 10240, 16384)
        index = json.dumps({"metadata": {"total_size": len(shard)},
                            "weight_map": {n: name for n in names}}, indent=1).encode()
        put("mlxlm_config_index", "small", join([config, index, shard]))
        put("mlxlm_config_index", "full-index",
            join([config, read(os.path.join(ml, "model.safetensors.index.json")), b""]))
        put("audit_bundle", "mlx-lm", bytes([2]) + join([config, index, shard]))
        put("audit_bundle", "safetensors", bytes([3]) + shard)
        put("safetensors_header", "mlx-lm-shard.safetensors", shard)

        gg = read(os.path.join(sample(tmp, "gguf"), "model.gguf"))
        put("gguf_header", "tiny.gguf", tiny_gguf())
        # The sample's header and tensor infos (one tensor of each decoded
        # type); its data section is cut, which the header parser never reads.
        put("gguf_header", "sample-head.gguf", gg[:8192])
        put("audit_bundle", "gguf", bytes([4]) + tiny_gguf())
    for t in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, t))
        size = sum(os.path.getsize(os.path.join(OUT, t, f)) for f in files)
        print(f"{t}: {len(files)} seeds, {size} bytes")


main()
