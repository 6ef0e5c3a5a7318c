"""MLX-LM checkpoints written by MLX itself, for bundlescope's tests.

    write OUT --mode M [--bits B] [--group G] [--mixed] [--global-scale] [--shards N] [--source SRC]
              [--dtype bfloat16|float16|float32]
        A small Llama-style model with one stacked MoE layer (switch_mlp),
        quantized with mx.quantize and saved with mx.save_safetensors, with
        config.json (quantization and quantization_config blocks, per-module
        entries with --mixed) and model.safetensors.index.json, as mlx-lm's
        save_model writes them. --source also saves the model unquantized.
        --dtype: the model's float type (bfloat16 by default; many
        mlx-community models are float16), which affine scales and biases
        and the dense tensors take.
        --global-scale (nvfp4): the stacked switch_mlp modules are quantized
        expert by expert with a global scale each (max |W_e|), stored as
        `global_scale` [E] F32 with a `global_scale: true` entry.
    dequant DIR TENSOR OUT.npy
        mx.dequantize of the module whose weight is TENSOR, with the bits,
        group and mode its config gives, as float32 .npy.
    quality DIR SRC TENSOR
        ‖W_q − W‖ / ‖W‖ in float64 numpy, W_q = mx.dequantize of TENSOR's
        module (as the model computes with it), W the source's BF16 tensor;
        one figure per expert for stacked modules, as JSON.
    counts DIR TENSOR
        The code counts of TENSOR, unpacked with numpy from the shard's U32
        words (an LSB-first bit stream per row), as JSON.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

H, I, V, E = 128, 256, 256, 4


def model(seed, dtype=mx.bfloat16):
    mx.random.seed(seed)
    w = {}

    def lin(name, out, inp, experts=None):
        shape = (out, inp) if experts is None else (experts, out, inp)
        w[name] = (mx.random.normal(shape) * (inp ** -0.5)).astype(dtype)

    w["model.embed_tokens.weight"] = (mx.random.normal((V, H)) * 0.02).astype(dtype)
    for layer in range(2):
        p = f"model.layers.{layer}"
        for proj in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            lin(f"{p}.self_attn.{proj}", H, H)
        w[f"{p}.input_layernorm.weight"] = mx.ones((H,), dtype=dtype)
        w[f"{p}.post_attention_layernorm.weight"] = mx.ones((H,), dtype=dtype)
        if layer == 0:
            lin(f"{p}.mlp.gate_proj", I, H)
            lin(f"{p}.mlp.up_proj", I, H)
            lin(f"{p}.mlp.down_proj", H, I)
        else:
            lin(f"{p}.mlp.gate", E, H)
            lin(f"{p}.mlp.switch_mlp.gate_proj", I, H, E)
            lin(f"{p}.mlp.switch_mlp.up_proj", I, H, E)
            lin(f"{p}.mlp.switch_mlp.down_proj", H, I, E)
    w["model.norm.weight"] = mx.ones((H,), dtype=dtype)
    lin("lm_head", V, H)
    return {k if k.endswith(".weight") else k + ".weight": v for k, v in w.items()}


# Per-module entries of the mixed recipe: (bits, group) over a global affine 4/64.
MIXED = {
    "model.layers.0.mlp.down_proj": (6, 64),
    "model.layers.0.self_attn.v_proj": (8, 32),
    "model.layers.1.self_attn.v_proj": (3, 64),
    "model.layers.1.mlp.switch_mlp.down_proj": (5, 32),
    "model.layers.0.self_attn.o_proj": (2, 128),
}
DENSE = {"model.layers.1.mlp.gate"}  # routers stay dense, as mlx-lm leaves them


def save(out, tensors, config, shards):
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    per = -(-len(names) // shards)
    weight_map = {}
    total = 0
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        file = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        mx.save_safetensors(str(out / file), {n: tensors[n] for n in part}, metadata={"format": "mlx"})
        for n in part:
            weight_map[n] = file
            total += tensors[n].nbytes
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=4))
    (out / "config.json").write_text(json.dumps(config, indent=4))


def write(args):
    out = Path(args[0])
    flags = {a for a in args[1:] if a in ("--mixed", "--global-scale")}
    rest = [a for a in args[1:] if a not in flags]
    opts = dict(zip(rest[::2], rest[1::2]))
    mode = opts.get("--mode", "affine")
    defaults = {"affine": (4, 64), "mxfp4": (4, 32), "nvfp4": (4, 16), "mxfp8": (8, 32)}[mode]
    bits = int(opts.get("--bits", defaults[0]))
    group = int(opts.get("--group", defaults[1]))
    shards = int(opts.get("--shards", 2))
    dtype = opts.get("--dtype", "bfloat16")
    weights = model(int(opts.get("--seed", 3)), getattr(mx, dtype))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": V,
        "num_local_experts": E, "torch_dtype": dtype,
    }
    quant = {"group_size": group, "bits": bits, "mode": mode}
    tensors = {}
    for name, w in weights.items():
        module = name[: -len(".weight")]
        if w.ndim == 1 or module in DENSE:
            tensors[name] = w
            continue
        b, g, m = bits, group, mode
        if "--mixed" in flags and module in MIXED:
            b, g = MIXED[module]
            m = "affine"
            quant[module] = {"group_size": g, "bits": b, "mode": m}
        if "--global-scale" in flags and m == "nvfp4" and w.ndim == 3:
            gs = [mx.max(mx.abs(e)).astype(mx.float32) for e in w]
            per = [mx.quantize(e, group_size=g, bits=b, mode=m, global_scale=s) for e, s in zip(w, gs)]
            tensors[name] = mx.stack([p[0] for p in per])
            tensors[module + ".scales"] = mx.stack([p[1] for p in per])
            tensors[module + ".global_scale"] = mx.stack(gs)
            quant[module] = {"group_size": g, "bits": b, "mode": m, "global_scale": True}
            continue
        parts = mx.quantize(w, group_size=g, bits=b, mode=m)
        tensors[name] = parts[0]
        tensors[module + ".scales"] = parts[1]
        if m == "affine":
            tensors[module + ".biases"] = parts[2]
    config["quantization"] = quant
    config["quantization_config"] = quant
    save(out, tensors, config, shards)
    if "--source" in opts:
        src = dict(config)
        del src["quantization"], src["quantization_config"]
        save(Path(opts["--source"]), weights, src, shards)


def params(directory, module):
    config = json.loads((Path(directory) / "config.json").read_text())
    q = config["quantization"]
    entry = q.get(module) if isinstance(q.get(module), dict) else {}
    mode = entry.get("mode", q.get("mode", "affine"))
    return entry.get("bits", q["bits"]), entry.get("group_size", q["group_size"]), mode


def load(directory, name):
    index = json.loads((Path(directory) / "model.safetensors.index.json").read_text())
    return mx.load(str(Path(directory) / index["weight_map"][name]))


def dequantized(directory, name):
    """mx.dequantize of the module whose weight is `name`, with the bits,
    group, mode and (nvfp4) global scales its config and tensors give."""
    module = name[: -len(".weight")]
    bits, group, mode = params(directory, module)
    shard = load(directory, name)
    biases = load(directory, module + ".biases")[module + ".biases"] if mode == "affine" else None
    scales = load(directory, module + ".scales")[module + ".scales"]
    index = json.loads((Path(directory) / "model.safetensors.index.json").read_text())
    if module + ".global_scale" in index["weight_map"]:
        # MLX takes the global scale as a scalar: one expert at a time.
        gs = load(directory, module + ".global_scale")[module + ".global_scale"]
        return mx.stack([
            mx.dequantize(shard[name][e], scales[e], None, group_size=group, bits=bits, mode=mode,
                          global_scale=gs[e])
            for e in range(gs.shape[0])
        ])
    return mx.dequantize(shard[name], scales, biases, group_size=group, bits=bits, mode=mode)


def dequant(args):
    directory, name, out = args
    np.save(out, np.array(dequantized(directory, name).astype(mx.float32)))


def quality(args):
    directory, source, name = args
    wq = np.array(dequantized(directory, name).astype(mx.float32)).astype(np.float64)
    w = np.array(load(source, name)[name].astype(mx.float32)).astype(np.float64)
    wq, w = wq.reshape(-1, *wq.shape[-2:]), w.reshape(-1, *w.shape[-2:])
    errs = [float(np.linalg.norm(a - b) / np.linalg.norm(b)) for a, b in zip(wq, w)]
    print(json.dumps(errs))


def counts(args):
    directory, name = args
    bits, _, _ = params(directory, name[: -len(".weight")])
    words = np.array(load(directory, name)[name]).astype(np.uint32)
    rows = words.reshape(-1, words.shape[-1])
    # Each row's words as one little-endian bit stream: bit k of the row is
    # bit k % 32 of word k // 32.
    bitstream = np.unpackbits(rows.view(np.uint8), axis=1, bitorder="little")
    n = bitstream.shape[1] // bits
    fields = bitstream[:, : n * bits].reshape(rows.shape[0], n, bits).astype(np.int64)
    codes = (fields << np.arange(bits)).sum(axis=2)
    print(json.dumps(np.bincount(codes.ravel(), minlength=1 << bits).tolist()))


if __name__ == "__main__":
    {"write": write, "dequant": dequant, "counts": counts, "quality": quality}[sys.argv[1]](sys.argv[2:])
