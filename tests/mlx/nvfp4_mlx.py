"""MLX's side of the NVFP4 parity tests.

    nvfp4_mlx.py compare ARTIFACT TENSOR=EXPORT.npy ...
        For each stacked weight, MLX dequantises every expert with
        dequantize(mode="nvfp4", global_scale=...) and the result must equal
        bundlescope's export bit for bit. Prints JSON {tensor: mismatches}.
    nvfp4_mlx.py make ARTIFACT REFERENCE.npy
        Quantises random weights with MLX's own quantize(mode="nvfp4") and
        writes them as an mlx-nvfp4 artifact (one layer, one shard), plus MLX's
        dequantisation of them for bundlescope to reproduce.
"""
import json
import os
import sys

import mlx.core as mx
import numpy as np


def dequant(w, s, g):
    out = []
    for e in range(w.shape[0]):
        out.append(
            mx.dequantize(
                w[e], s[e], mode="nvfp4", group_size=16, bits=4,
                global_scale=g[e], dtype=mx.float32,
            )
        )
    return np.stack([np.array(o) for o in out])


def load_all(artifact):
    manifest = json.load(open(os.path.join(artifact, "manifest.json")))
    tensors = {}
    for shard in manifest["shards"]:
        tensors.update(mx.load(os.path.join(artifact, shard["file"])))
    return tensors


def compare(artifact, pairs):
    tensors = load_all(artifact)
    result = {}
    for pair in pairs:
        name, path = pair.split("=", 1)
        base = name[: -len(".weight")]
        ref = dequant(tensors[name], tensors[base + ".scales"], tensors[base + ".global_scale"])
        ours = np.load(path)
        if ours.shape != ref.shape:
            result[name] = f"shape {ours.shape} vs {ref.shape}"
            continue
        same = (ours.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(ours) & np.isnan(ref))
        result[name] = int((~same).sum())
    print(json.dumps(result))


def make(artifact, reference):
    os.makedirs(artifact, exist_ok=True)
    rng = np.random.default_rng(7)
    experts, rows, cols = 4, 32, 64
    w = (rng.standard_t(4, size=(experts, rows, cols)) * 0.02).astype(np.float32)
    words, scales, globals_ = [], [], []
    for e in range(experts):
        g = mx.array(np.abs(w[e]).max().astype(np.float32))
        q = mx.quantize(mx.array(w[e]), group_size=16, bits=4, mode="nvfp4", global_scale=g)
        words.append(np.array(q[0]))
        scales.append(np.array(q[1]))
        globals_.append(np.array(g))
    base = "model.decoder.layers.0.experts.down_proj"
    arrays = {
        base + ".weight": mx.array(np.stack(words)),
        base + ".scales": mx.array(np.stack(scales)),
        base + ".global_scale": mx.array(np.stack(globals_).astype(np.float32)),
    }
    up = "model.decoder.layers.0.experts.gate_up_proj"
    for k in (".weight", ".scales", ".global_scale"):
        arrays[up + k] = arrays[base + k]
    shard = "model-00001-of-00001.safetensors"
    mx.save_safetensors(os.path.join(artifact, shard), arrays)
    manifest = {
        "quantization": {"mode": "nvfp4", "bits": 4, "group_size": 16, "layout": "stacked-global-scale"},
        "shards": [{"file": shard}],
        "weight_map": {k: shard for k in arrays},
    }
    json.dump(manifest, open(os.path.join(artifact, "manifest.json"), "w"))
    ref = dequant(arrays[base + ".weight"], arrays[base + ".scales"], arrays[base + ".global_scale"])
    np.save(reference, ref)
    print(json.dumps({"dtypes": {k: str(v.dtype) for k, v in arrays.items()}}))


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3:])
    else:
        make(sys.argv[2], sys.argv[3])
