"""gguf-py's reading of a GGUF file written by llama.cpp
(scripts/make-llamacpp-gguf.sh), for tests/gguf_llamacpp.rs.

Usage: llamacpp_read.py FILE.gguf OUT_DIR

Reads the file with GGUFReader and writes, per tensor gguf-py can
dequantize, gguf.quants.dequantize(...) as OUT_DIR/NAME.npy (float32,
PyTorch order), and OUT_DIR/index.json: name -> type, shape, whether gguf-py
dequantized it, and for the types below the histogram of the stored codes,
unpacked here with numpy from the block layouts of llama.cpp's
ggml-common.h (independently of bundlescope's decoder):
Q4_0, Q4_1, MXFP4, NVFP4 (4-bit), Q5_0, Q5_1 (4 low bits and a high bit
from qh), Q8_0 (int8 + 128), Q2_K (2-bit), Q3_K (2 low bits and a high
bit from hmask), Q4_K (4-bit), Q5_K (4 low bits and a high bit from qh),
Q6_K (4 low bits from ql and 2 high bits from qh).
"""
import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES


def nibbles(b):
    return np.concatenate([b & 15, b >> 4], axis=1)


def codes(qt, raw):
    _, size = GGML_QUANT_SIZES[qt]
    b = raw.reshape(-1, size)
    if qt in (T.Q4_0, T.Q4_1, T.MXFP4):
        return nibbles(b[:, {T.Q4_0: 2, T.Q4_1: 4, T.MXFP4: 1}[qt]:]), 16
    if qt == T.NVFP4:
        return nibbles(b[:, 4:]), 16
    if qt in (T.Q5_0, T.Q5_1):
        off = 2 if qt == T.Q5_0 else 4
        qh = b[:, off:off + 4].copy().view(np.uint32).ravel()
        high = ((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
        return nibbles(b[:, off + 4:]) | (high << 4), 32
    if qt == T.Q8_0:
        return b[:, 2:].view(np.int8).astype(np.int16) + 128, 256
    if qt == T.Q2_K:
        qs = b[:, 16:80]
        return np.concatenate([(qs >> (2 * s)) & 3 for s in range(4)], axis=1), 4
    if qt == T.Q3_K:
        hmask, qs = b[:, 0:32], b[:, 32:96]
        out = []
        for g in range(2):  # two halves of 128 elements
            for s in range(4):  # four runs of 32 in a half
                low = (qs[:, g * 32:(g + 1) * 32] >> (2 * s)) & 3
                high = (hmask >> (g * 4 + s)) & 1
                out.append(low | (high << 2))
        return np.concatenate(out, axis=1), 8
    if qt in (T.Q4_K, T.Q5_K):
        qh, qs = (None, b[:, 16:144]) if qt == T.Q4_K else (b[:, 16:48], b[:, 48:176])
        out = []
        for g in range(4):  # four runs of 64 elements
            for s in range(2):  # low nibbles, then high nibbles
                low = (qs[:, g * 32:(g + 1) * 32] >> (4 * s)) & 15
                high = 0 if qh is None else (qh >> (2 * g + s)) & 1
                out.append(low | (high << 4))
        return np.concatenate(out, axis=1), 16 if qt == T.Q4_K else 32
    if qt == T.Q6_K:
        ql, qh = b[:, 0:128], b[:, 128:192]
        out = []
        for g in range(2):  # two halves of 128 elements
            for j in range(128):
                s, i = divmod(j, 64)
                low = (ql[:, g * 64 + i] >> (4 * s)) & 15
                s2, i2 = divmod(j, 32)
                high = (qh[:, g * 32 + i2] >> (2 * s2)) & 3
                out.append((low | (high << 4))[:, None])
        return np.concatenate(out, axis=1), 64
    return None, None


out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
index = {}
for t in gguf.GGUFReader(sys.argv[1]).tensors:
    qt = T(t.tensor_type)
    shape = [int(d) for d in reversed(t.shape.tolist())]
    entry = {"type": qt.name, "shape": shape, "dequantized": False}
    try:
        values = gguf.quants.dequantize(t.data, qt)
    except NotImplementedError:
        values = None
    if values is not None:
        values = np.ascontiguousarray(values.reshape(shape), dtype=np.float32)
        np.save(out / f"{t.name}.npy", values)
        entry["dequantized"] = True
    c, levels = codes(qt, np.asarray(t.data).view(np.uint8))
    if c is not None:
        entry["counts"] = np.bincount(c.ravel(), minlength=levels).tolist()
    index[t.name] = entry
(out / "index.json").write_text(json.dumps(index, indent=1))
print(json.dumps({k: v["type"] for k, v in index.items()}))
