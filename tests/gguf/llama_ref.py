"""A small llama model twice: its Hugging Face checkpoint (float32
safetensors, OUT/hf/model.safetensors) and the GGUF llama.cpp's converter
would make of it (OUT/model.gguf, written with gguf-py): llama.cpp names,
the Q and K projections' rows permuted per head as convert_hf_to_gguf.py
does (reshape to [heads, 2, D/2, cols], swap axes 1 and 2), quantized by
gguf-py. OUT/wrong_heads/model.gguf is the same file claiming one head, so
the permutation cannot be undone right.

Usage: llama_ref.py OUT_DIR
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

out = Path(sys.argv[1])
(out / "hf").mkdir(parents=True, exist_ok=True)
(out / "wrong_heads").mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(3)
hidden, heads, kv_heads, inter, vocab, layers = 256, 4, 2, 512, 64, 2
head_dim = hidden // heads


def w(*shape):
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)


hf = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": 1 + w(hidden),
      "lm_head.weight": w(vocab, hidden)}
for i in range(layers):
    p = f"model.layers.{i}."
    hf[p + "self_attn.q_proj.weight"] = w(heads * head_dim, hidden)
    hf[p + "self_attn.k_proj.weight"] = w(kv_heads * head_dim, hidden)
    hf[p + "self_attn.v_proj.weight"] = w(kv_heads * head_dim, hidden)
    hf[p + "self_attn.o_proj.weight"] = w(hidden, hidden)
    hf[p + "mlp.gate_proj.weight"] = w(inter, hidden)
    hf[p + "mlp.up_proj.weight"] = w(inter, hidden)
    hf[p + "mlp.down_proj.weight"] = w(hidden, inter)
    hf[p + "input_layernorm.weight"] = 1 + w(hidden)
    hf[p + "post_attention_layernorm.weight"] = 1 + w(hidden)

# safetensors, written by hand: u64 header length, JSON header, data.
header, offset, blobs = {}, 0, []
for name, a in hf.items():
    b = a.tobytes()
    header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
    offset += len(b)
    blobs.append(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
(out / "hf" / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def permute(a, n_head):
    return a.reshape(n_head, 2, a.shape[0] // n_head // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


NAMES = {"self_attn.q_proj": ("attn_q", T.Q8_0), "self_attn.k_proj": ("attn_k", T.Q8_0),
         "self_attn.v_proj": ("attn_v", T.Q5_0), "self_attn.o_proj": ("attn_output", T.Q4_1),
         "mlp.gate_proj": ("ffn_gate", T.Q4_0), "mlp.up_proj": ("ffn_up", T.Q5_1),
         "mlp.down_proj": ("ffn_down", T.MXFP4)}


def write(path, head_count):
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_block_count(layers)
    wr.add_embedding_length(hidden)
    wr.add_head_count(head_count)
    wr.add_head_count_kv(kv_heads if head_count == heads else 1)
    wr.add_tensor("token_embd.weight", gguf.quants.quantize(hf["model.embed_tokens.weight"], T.Q8_0), raw_dtype=T.Q8_0)
    wr.add_tensor("output_norm.weight", hf["model.norm.weight"])
    wr.add_tensor("output.weight", gguf.quants.quantize(hf["lm_head.weight"], T.Q8_0), raw_dtype=T.Q8_0)
    for i in range(layers):
        p = f"model.layers.{i}."
        for src, (dst, qt) in NAMES.items():
            a = hf[p + src + ".weight"]
            if dst == "attn_q":
                a = permute(a, heads)
            elif dst == "attn_k":
                a = permute(a, kv_heads)
            wr.add_tensor(f"blk.{i}.{dst}.weight", gguf.quants.quantize(a, qt), raw_dtype=qt)
        wr.add_tensor(f"blk.{i}.attn_norm.weight", hf[p + "input_layernorm.weight"])
        wr.add_tensor(f"blk.{i}.ffn_norm.weight", hf[p + "post_attention_layernorm.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


write(out / "model.gguf", heads)
write(out / "wrong_heads" / "model.gguf", 1)
