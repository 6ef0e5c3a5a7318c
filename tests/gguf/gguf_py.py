"""GGUF files written by gguf-py, and gguf-py's own reading of them.

Usage: gguf_py.py OUT_DIR

Writes OUT_DIR/model.gguf with gguf-py's GGUFWriter: one tensor per type
gguf-py can quantize (`q.TYPE`, float data through gguf.quants.quantize),
and one tensor of random raw blocks with finite F16 scales per type gguf-py
can only dequantize (`raw.TYPE`). Then reads the file back with GGUFReader
and writes, per tensor, gguf.quants.dequantize(...) as OUT_DIR/NAME.npy,
and OUT_DIR/index.json: name -> type, shape (PyTorch order) and, for the
Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 tensors, the code counts unpacked here with numpy
(independently of bundlescope's decoder). The file also names two base
models and a source address (`general.base_model.*`, `general.source.url`);
OUT_DIR/source.json holds gguf-py's reading of those keys.
"""
import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(7)

# Scale fields (byte offset in the block) that must hold finite F16s.
F16_FIELDS = {
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
RAW = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.NVFP4]
QUANT = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4, T.NVFP4]

w = gguf.GGUFWriter(str(out / "model.gguf"), "llama")
w.add_name("gguf-py sample")
w.add_context_length(4096)
w.add_token_list([f"tok{i}" for i in range(300)])
w.add_chat_template("{{ messages }}")
# What llama.cpp's converter writes of a fine-tune's source.
w.add_base_model_count(2)
w.add_base_model_name(0, "Tiny Base")
w.add_base_model_organization(0, "Example Org")
w.add_base_model_version(0, "v1.5")
w.add_base_model_repo_url(0, "https://huggingface.co/example-org/tiny-base")
w.add_base_model_name(1, "Second Parent")
w.add_source_url("https://example.org/paper")
rows, cols = 8, 512
written = {}
for qt in QUANT:
    x = (rng.standard_t(5, size=(rows, cols)) * 0.02).astype(np.float32)
    try:
        q = gguf.quants.quantize(x, qt)
    except (NotImplementedError, gguf.quants.QuantError):
        continue
    name = f"q.{qt.name}"
    w.add_tensor(name, q, raw_dtype=qt)
    written[name] = qt
for qt in RAW:
    if any(v == qt for v in written.values()):
        continue
    block, size = GGML_QUANT_SIZES[qt]
    n = rows * cols // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for f in F16_FIELDS.get(qt, []):
        d = (rng.uniform(1e-3, 3e-2, size=n)).astype(np.float16)
        raw[:, f:f + 2] = d.view(np.uint8).reshape(n, 2)
    name = f"raw.{qt.name}"
    w.add_tensor(name, raw.reshape(rows, cols // block * size), raw_dtype=qt)
    written[name] = qt
# F64: gguf-py types a float64 array as F64 by itself; it has no quantizer
# for it. The values carry more precision than float32 holds, so the
# comparison sees them rounded.
x = rng.standard_t(5, size=(rows, cols)) * np.float64(1e-3) + np.float64(1.0) / 3.0
w.add_tensor("q.F64", x)
written["q.F64"] = T.F64
# Integers: gguf-py types int8/16/32/64 arrays as I8..I64 by themselves.
# Each holds its type's extremes, and values float32 must round.
for np_t, qt in [(np.int8, T.I8), (np.int16, T.I16), (np.int32, T.I32), (np.int64, T.I64)]:
    info = np.iinfo(np_t)
    v = rng.integers(info.min, info.max, size=(rows, cols), dtype=np_t, endpoint=True)
    v[0, :4] = [info.min, info.max, 0, -1]
    if np_t == np.int64:
        v[0, 4:6] = [2**53 + 1, (1 << 62) + (1 << 38) + 1]
    w.add_tensor(f"q.{qt.name}", v)
    written[f"q.{qt.name}"] = qt
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()


def counts(qt, data):
    """Code counts of Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 blocks, unpacked with numpy."""
    block, size = GGML_QUANT_SIZES[qt]
    b = data.reshape(-1, size)
    if qt == T.Q8_0:
        codes = b[:, 2:].astype(np.int16).view(np.int16)
        codes = (b[:, 2:].view(np.int8).astype(np.int16) + 128)
        return np.bincount(codes.ravel(), minlength=256).tolist()
    off = {T.Q4_0: 2, T.Q4_1: 4, T.Q5_0: 2, T.Q5_1: 4}[qt]
    if qt in (T.Q5_0, T.Q5_1):
        qh = b[:, off:off + 4].copy().view(np.uint32).ravel()
        qs = b[:, off + 4:]
        bits = (qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1
        codes = np.concatenate([qs & 15, qs >> 4], axis=1) | (bits.astype(np.uint8) << 4)
        return np.bincount(codes.ravel(), minlength=32).tolist()
    qs = b[:, off:]
    codes = np.concatenate([qs & 15, qs >> 4], axis=1)
    return np.bincount(codes.ravel(), minlength=16).tolist()


index = {}
r = gguf.GGUFReader(str(out / "model.gguf"))
for t in r.tensors:
    qt = T(t.tensor_type)
    ints = {T.I8: np.int8, T.I16: np.int16, T.I32: np.int32, T.I64: np.int64}
    if qt == T.F64:
        # gguf-py 0.19 does not dequantize F64: its bytes read as float64
        # here, rounded to the nearest float32 by numpy.
        values = np.asarray(t.data).view(np.float64).astype(np.float32)
    elif qt in ints:
        # Nor the integers: read as their type, rounded once to float32.
        values = np.asarray(t.data).view(ints[qt]).astype(np.float32)
    else:
        values = gguf.quants.dequantize(t.data, qt)
    shape = [int(d) for d in reversed(t.shape.tolist())]
    values = np.ascontiguousarray(values.reshape(shape), dtype=np.float32)
    np.save(out / f"{t.name}.npy", values)
    entry = {"type": qt.name, "shape": shape}
    if qt in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        entry["counts"] = counts(qt, np.asarray(t.data).view(np.uint8))
    index[t.name] = entry
(out / "index.json").write_text(json.dumps(index, indent=1))
# gguf-py's own reading of the source keys, for the lineage's.
source = {}
for name, field in r.fields.items():
    if name.startswith("general.base_model.") or name.startswith("general.source."):
        source[name] = field.contents()
(out / "source.json").write_text(json.dumps(source, indent=1))
print(json.dumps({k: v["type"] for k, v in index.items()}))
