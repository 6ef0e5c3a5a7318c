"""MLX's own GGUF loader (`mx.load`, the C++ `load_gguf`) on a file of
Q4_0, Q4_1 and Q8_0 tensors: each quantized weight MLX returns (uint32
words with F16 scales and biases, group 32) is dequantized by MLX with the
scales and biases widened to float32, and saved as OUT_DIR/NAME.npy, with
OUT_DIR/index.json listing name -> the keys MLX returned for it.

Usage: mlx_load.py FILE.gguf OUT_DIR
"""
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
d = mx.load(sys.argv[1])
index = {}
for key, w in d.items():
    if key.endswith(".scales") or key.endswith(".biases"):
        continue
    stem = key[: -len(".weight")] if key.endswith(".weight") else key
    s, b = d.get(stem + ".scales"), d.get(stem + ".biases")
    if s is None or b is None:
        continue
    bits = w.shape[-1] * 32 // (s.shape[-1] * 32)
    v = mx.dequantize(w, s.astype(mx.float32), b.astype(mx.float32), group_size=32, bits=bits)
    np.save(out / f"{key}.npy", np.array(v.astype(mx.float32)))
    index[key] = {"bits": bits, "keys": sorted(k for k in d if k.startswith(stem))}
(out / "index.json").write_text(json.dumps(index, indent=1))
print(json.dumps(index))
