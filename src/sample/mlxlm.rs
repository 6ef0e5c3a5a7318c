//! `bundlescope sample DIR --format mlx-lm`: an MLX-LM quantized checkpoint
//! written with bundlescope's own encoder, laid out as `mlx_lm.convert -q`
//! writes one: `config.json` with its `quantization` (and
//! `quantization_config`) block, `model-XXXXX-of-YYYYY.safetensors` shards
//! (`__metadata__` `{"format": "mlx"}`) and `model.safetensors.index.json`.
//!
//! A small Llama-style model (normal weights): embedding, attention, a dense MLP in layer 0
//! and a stacked MoE (`switch_mlp`, experts as the leading dimension, a
//! dense router) in the others, norms, `lm_head`. Every linear weight is
//! quantized in the chosen mode; `--mixed` gives some modules their own
//! affine bits and group size through per-module entries, as mlx-lm's
//! mixed recipes do.
//!
//! The encoder (round to nearest, per group):
//! - affine: `scale = (max − min) / (2^bits − 1)`, `bias = min`, both
//!   rounded to bfloat16 first, `q = round((w − bias) / scale)` clamped;
//! - mxfp4: E8M0 scale `2^⌈log2(amax / 6)⌉`, E2M1 codes;
//! - nvfp4: E4M3 scale nearest `amax / 6`, E2M1 codes;
//! - mxfp8: E8M0 scale `2^⌈log2(amax / 448)⌉`, E4M3 codes.
//!
//! Codes are packed LSB-first across each row's U32 words. With
//! `size_mib`, layers are added until the shards hold about that much; the
//! added layers' codes and scales are random valid bytes (fast to write).

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use serde_json::{Map, Value, json};

use super::nvfp4::shard_name;
use crate::decode::nvfp4::{e2m1_encode, e4m3, e4m3_encode};
use crate::decode::{bf16_to_f32, f32_to_bf16, pack_row};
use crate::format::QuantMode;
use crate::format::safetensors::{self, WriteTensor};
use crate::util::Rng;

/// What to write.
#[derive(Debug, Clone)]
pub struct MlxLmOptions {
    /// Seed of every random value.
    pub seed: u64,
    /// Mode of the global block.
    pub mode: QuantMode,
    /// Bits (affine: 2, 3, 4, 5, 6 or 8; fixed by the float modes).
    pub bits: u8,
    /// Group size (affine: 32, 64 or 128; fixed by the float modes).
    pub group: u64,
    /// Per-module affine overrides (2, 3, 5, 6, 8 bits) over the global block.
    pub mixed: bool,
    /// Transformer layers (layer 0 dense MLP, the rest MoE).
    pub layers: u64,
    /// Experts per MoE layer.
    pub experts: u64,
    /// Hidden size.
    pub hidden: u64,
    /// Intermediate size.
    pub intermediate: u64,
    /// Shards.
    pub shards: usize,
    /// Grow to about this many MiB by adding layers of random valid bytes.
    pub size_mib: Option<u64>,
}

impl Default for MlxLmOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            mode: QuantMode::Affine,
            bits: 4,
            group: 64,
            mixed: false,
            layers: 2,
            experts: 4,
            hidden: 128,
            intermediate: 256,
            shards: 2,
            size_mib: None,
        }
    }
}

/// Per-module entries of `--mixed`: (module suffix in a layer, bits, group).
const MIXED: &[(&str, u8, u64)] = &[
    ("self_attn.v_proj", 8, 32),
    ("self_attn.o_proj", 2, 128),
    ("mlp.down_proj", 6, 64),
    ("mlp.switch_mlp.down_proj", 5, 32),
    ("self_attn.k_proj", 3, 64),
];

/// What was written.
#[derive(Debug, Clone)]
pub struct Written {
    /// Tensors written.
    pub tensors: usize,
    /// Bytes in shards.
    pub bytes: u64,
}

struct Tensor {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// One linear weight to write: its source values (or none: random bytes).
struct Linear {
    module: String,
    shape: Vec<u64>,
    /// Layer-local suffix, for the mixed recipe.
    suffix: &'static str,
}

fn linears(o: &MlxLmOptions, layer: u64) -> Vec<Linear> {
    let (h, i, e) = (o.hidden, o.intermediate, o.experts);
    let p = format!("model.layers.{layer}");
    let lin = |suffix: &'static str, shape: Vec<u64>| Linear {
        module: format!("{p}.{suffix}"),
        shape,
        suffix,
    };
    let mut v = vec![
        lin("self_attn.q_proj", vec![h, h]),
        lin("self_attn.k_proj", vec![h, h]),
        lin("self_attn.v_proj", vec![h, h]),
        lin("self_attn.o_proj", vec![h, h]),
    ];
    if layer == 0 {
        v.push(lin("mlp.gate_proj", vec![i, h]));
        v.push(lin("mlp.up_proj", vec![i, h]));
        v.push(lin("mlp.down_proj", vec![h, i]));
    } else {
        v.push(lin("mlp.switch_mlp.gate_proj", vec![e, i, h]));
        v.push(lin("mlp.switch_mlp.up_proj", vec![e, i, h]));
        v.push(lin("mlp.switch_mlp.down_proj", vec![e, h, i]));
    }
    v
}

/// Normal source values (Box–Muller), `1/√cols` spread as a trained
/// linear layer's, rounded to bfloat16 (the model's dtype). Not heavy-tailed
/// like the audio8 sample's: min/max affine groups at 2 bits would spend
/// their four levels on the outliers.
fn source(rng: &mut Rng, n: u64, cols: u64) -> Vec<f32> {
    let spread = 1.0 / (cols as f32).sqrt();
    (0..n)
        .map(|_| {
            let u1 = (rng.uniform() + 0.5 / (1u32 << 24) as f32).min(1.0);
            let u2 = rng.uniform();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
            bf16_to_f32(f32_to_bf16(z * spread))
        })
        .collect()
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| f32_to_bf16(x).to_le_bytes())
        .collect()
}

/// `2^e` as an E8M0 byte, `e` clamped to what the byte holds.
fn e8m0_for(amax: f32, top: f32) -> u8 {
    if amax <= 0.0 || !amax.is_finite() {
        return 0;
    }
    let e = (amax / top).log2().ceil() as i32;
    (e + 127).clamp(0, 254) as u8
}

/// Quantizes one row: packed code bytes, scale bytes and (affine) bias bytes.
fn quantize_row(
    row: &[f32],
    mode: QuantMode,
    bits: u8,
    group: usize,
    codes_out: &mut [u8],
    scales: &mut Vec<u8>,
    biases: &mut Vec<u8>,
) {
    let mut codes = vec![0u8; row.len()];
    for (g, cg) in row.chunks_exact(group).zip(codes.chunks_exact_mut(group)) {
        let amax = g.iter().fold(0f32, |m, v| m.max(v.abs()));
        match mode {
            QuantMode::Affine => {
                let levels = ((1u32 << bits) - 1) as f32;
                let (lo, hi) = g
                    .iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                        (a.min(v), b.max(v))
                    });
                let scale = bf16_to_f32(f32_to_bf16(((hi - lo) / levels).max(1e-8)));
                let bias = bf16_to_f32(f32_to_bf16(lo));
                for (c, &v) in cg.iter_mut().zip(g) {
                    *c = ((v - bias) / scale).round().clamp(0.0, levels) as u8;
                }
                scales.extend_from_slice(&f32_to_bf16(scale).to_le_bytes());
                biases.extend_from_slice(&f32_to_bf16(bias).to_le_bytes());
            }
            QuantMode::Mxfp4 | QuantMode::Mxfp8 => {
                let fp8 = mode == QuantMode::Mxfp8;
                let b = e8m0_for(amax, if fp8 { 448.0 } else { 6.0 });
                let scale = crate::decode::mlxlm::e8m0(b);
                for (c, &v) in cg.iter_mut().zip(g) {
                    let x = v / scale;
                    *c = if fp8 {
                        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
                        sign | e4m3_encode(x.abs())
                    } else {
                        e2m1_encode(x)
                    };
                }
                scales.push(b);
            }
            QuantMode::Nvfp4 => {
                let b = e4m3_encode(amax / 6.0);
                let scale = e4m3(b);
                for (c, &v) in cg.iter_mut().zip(g) {
                    *c = if scale > 0.0 {
                        e2m1_encode(v / scale)
                    } else {
                        0
                    };
                }
                scales.push(b);
            }
        }
    }
    pack_row(&codes, u32::from(bits), codes_out);
}

/// The quantized tensors of one module (weight, scales, biases) and, when
/// `keep_source`, its BF16 source.
fn quantize_module(
    rng: &mut Rng,
    l: &Linear,
    mode: QuantMode,
    bits: u8,
    group: u64,
    random: bool,
) -> (Vec<Tensor>, Option<Tensor>) {
    let cols = *l.shape.last().unwrap_or(&0);
    let n: u64 = l.shape.iter().product();
    let rows = (n / cols.max(1)) as usize;
    let cols_u = cols as usize;
    let row_bytes = cols_u * usize::from(bits) / 8;
    let groups = cols_u / group as usize;
    let scale_size = if mode == QuantMode::Affine { 2 } else { 1 };
    let mut words = vec![0u8; rows * row_bytes];
    let (mut scales, mut biases) = (Vec::new(), Vec::new());
    let src = if random {
        for chunk in words.chunks_mut(8) {
            let r = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        if mode == QuantMode::Mxfp8 {
            // 0x7f and 0xff are E4M3's NaN: not a code a quantizer writes.
            for b in words.iter_mut().filter(|b| **b & 0x7f == 0x7f) {
                *b ^= 1;
            }
        }
        for _ in 0..rows * groups {
            match mode {
                QuantMode::Affine => {
                    let s = 0.001 + (rng.next_u64() % 100) as f32 * 1e-5;
                    scales.extend_from_slice(&f32_to_bf16(s).to_le_bytes());
                    biases.extend_from_slice(&f32_to_bf16(-s * 8.0).to_le_bytes());
                }
                // Valid positive scale bytes in a realistic range.
                QuantMode::Nvfp4 => scales.push(0x18 + (rng.next_u64() % 0x20) as u8),
                _ => scales.push(115 + (rng.next_u64() % 8) as u8),
            }
        }
        None
    } else {
        let src = source(rng, n, cols);
        let parts: Vec<(Vec<u8>, Vec<u8>)> = src
            .par_chunks(cols_u)
            .zip(words.par_chunks_mut(row_bytes))
            .map(|(row, out)| {
                let (mut s, mut b) = (Vec::new(), Vec::new());
                quantize_row(row, mode, bits, group as usize, out, &mut s, &mut b);
                (s, b)
            })
            .collect();
        for (s, b) in parts {
            scales.extend(s);
            biases.extend(b);
        }
        Some(src)
    };
    debug_assert_eq!(scales.len(), rows * groups * scale_size);
    let lead = &l.shape[..l.shape.len() - 1];
    let with_last = |last: u64| {
        let mut s = lead.to_vec();
        s.push(last);
        s
    };
    let mut out = vec![
        Tensor {
            name: format!("{}.weight", l.module),
            dtype: "U32",
            shape: with_last(cols * u64::from(bits) / 32),
            data: words,
        },
        Tensor {
            name: format!("{}.scales", l.module),
            dtype: if mode == QuantMode::Affine {
                "BF16"
            } else {
                "U8"
            },
            shape: with_last(groups as u64),
            data: scales,
        },
    ];
    if mode == QuantMode::Affine {
        out.push(Tensor {
            name: format!("{}.biases", l.module),
            dtype: "BF16",
            shape: with_last(groups as u64),
            data: biases,
        });
    }
    let src = src.map(|v| Tensor {
        name: format!("{}.weight", l.module),
        dtype: "BF16",
        shape: l.shape.clone(),
        data: bf16_bytes(&v),
    });
    (out, src)
}

fn dense(rng: &mut Rng, name: &str, shape: Vec<u64>, center: f32, spread: f32) -> Tensor {
    let n: u64 = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| center + (rng.uniform() * 2.0 - 1.0) * spread)
        .collect();
    Tensor {
        name: name.into(),
        dtype: "BF16",
        shape,
        data: bf16_bytes(&v),
    }
}

fn check(o: &MlxLmOptions) -> Result<()> {
    let params = crate::format::mlxlm::modules::Params {
        mode: o.mode,
        bits: o.bits,
        group: o.group,
    };
    if let Some(why) = params.invalid() {
        bail!("{why}");
    }
    for d in [o.hidden, o.intermediate] {
        if d == 0 || !d.is_multiple_of(128) {
            bail!("hidden and intermediate sizes must be positive multiples of 128");
        }
    }
    if o.layers == 0 || o.experts == 0 || o.shards == 0 {
        bail!("layers, experts and shards must be at least 1");
    }
    Ok(())
}

fn write_shards(
    dir: &Path,
    tensors: &[Tensor],
    shards: usize,
) -> Result<(Map<String, Value>, u64)> {
    let per = tensors.len().div_ceil(shards).max(1);
    let n = tensors.len().div_ceil(per);
    let mut weight_map = Map::new();
    let mut bytes = 0u64;
    for (s, part) in tensors.chunks(per).enumerate() {
        let name = if n == 1 {
            "model.safetensors".to_string()
        } else {
            shard_name(s, n)
        };
        let wt: Vec<WriteTensor<'_>> = part
            .iter()
            .map(|t| WriteTensor {
                name: &t.name,
                dtype: t.dtype,
                shape: &t.shape,
                data: &t.data,
            })
            .collect();
        let path = dir.join(&name);
        safetensors::write_with_metadata(&path, &wt, &[("format", "mlx")])
            .with_context(|| format!("writing {}", path.display()))?;
        for t in part {
            weight_map.insert(t.name.clone(), json!(name));
        }
        bytes += fs::metadata(&path)?.len();
    }
    let total: usize = tensors.iter().map(|t| t.data.len()).sum();
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    fs::write(
        dir.join(crate::format::mlxlm::INDEX),
        serde_json::to_vec_pretty(&index)?,
    )?;
    Ok((weight_map, bytes))
}

fn empty_dir(dir: &Path) -> Result<()> {
    if dir.exists() && fs::read_dir(dir)?.next().is_some() {
        bail!("{} exists and is not empty", dir.display());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(())
}

/// Writes the checkpoint to `dir` and, with `source`, the BF16 model it
/// was quantized from (same names, same shards layout) to `source`.
pub fn write(dir: &Path, o: &MlxLmOptions, source: Option<&Path>) -> Result<Written> {
    check(o)?;
    if source.is_some() && o.size_mib.is_some() {
        bail!("--reference cannot be combined with --size-mib (grown layers have no source)");
    }
    empty_dir(dir)?;
    if let Some(s) = source {
        empty_dir(s)?;
    }
    let mut rng = Rng::new(o.seed);
    let (h, i, e, v) = (o.hidden, o.intermediate, o.experts, 256u64);
    let mut quant = Map::new();
    quant.insert("group_size".into(), json!(o.group));
    quant.insert("bits".into(), json!(o.bits));
    quant.insert("mode".into(), json!(o.mode.as_str()));
    let layer_bytes = {
        let w = 4 * h * h + 3 * e * h * i;
        w * u64::from(o.bits) / 8 + w / o.group * 4
    };
    let layers = match o.size_mib {
        Some(mib) => o.layers.max((mib << 20) / layer_bytes.max(1)),
        None => o.layers,
    };
    let mut tensors = Vec::new();
    let mut src = Vec::new();
    let embed = Linear {
        module: "model.embed_tokens".into(),
        shape: vec![v, h],
        suffix: "embed_tokens",
    };
    let head = Linear {
        module: "lm_head".into(),
        shape: vec![v, h],
        suffix: "lm_head",
    };
    let mut all: Vec<(Option<u64>, Linear)> = vec![(None, embed)];
    for l in 0..layers {
        all.extend(linears(o, l).into_iter().map(|x| (Some(l), x)));
    }
    all.push((None, head));
    let mut last_layer = None;
    for (layer, lin) in all {
        if layer != last_layer
            && let Some(l) = layer
        {
            let p = format!("model.layers.{l}");
            for norm in ["input_layernorm", "post_attention_layernorm"] {
                tensors.push(dense(
                    &mut rng,
                    &format!("{p}.{norm}.weight"),
                    vec![h],
                    1.0,
                    0.05,
                ));
            }
            if l > 0 {
                let router = dense(
                    &mut rng,
                    &format!("{p}.mlp.gate.weight"),
                    vec![e, h],
                    0.0,
                    0.05,
                );
                src.push(Tensor {
                    name: router.name.clone(),
                    dtype: router.dtype,
                    shape: router.shape.clone(),
                    data: router.data.clone(),
                });
                // Routers stay dense (no entry), as mlx-lm leaves them.
                tensors.push(router);
            }
            last_layer = layer;
        }
        let (mut mode, mut bits, mut group) = (o.mode, o.bits, o.group);
        if o.mixed
            && let Some(&(_, b, g)) = MIXED.iter().find(|(s, _, _)| *s == lin.suffix)
        {
            (mode, bits, group) = (QuantMode::Affine, b, g);
            quant.insert(
                lin.module.clone(),
                json!({"group_size": g, "bits": b, "mode": "affine"}),
            );
        }
        let random = layer.is_some_and(|l| l >= o.layers);
        let (parts, s) = quantize_module(&mut rng, &lin, mode, bits, group, random);
        tensors.extend(parts);
        src.extend(s);
    }
    let norm = dense(&mut rng, "model.norm.weight", vec![h], 1.0, 0.05);
    for t in tensors
        .iter()
        .filter(|t| {
            t.dtype == "BF16" && !t.name.ends_with(".scales") && !t.name.ends_with(".biases")
        })
        .filter(|t| t.name.contains("layernorm"))
    {
        src.push(Tensor {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            data: t.data.clone(),
        });
    }
    src.push(Tensor {
        name: norm.name.clone(),
        dtype: norm.dtype,
        shape: norm.shape.clone(),
        data: norm.data.clone(),
    });
    tensors.push(norm);
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let mut config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_local_experts": e,
        "vocab_size": v,
        "torch_dtype": "bfloat16",
    });
    let plain = config.clone();
    config["quantization"] = Value::Object(quant.clone());
    config["quantization_config"] = Value::Object(quant);
    let (_, bytes) = write_shards(dir, &tensors, o.shards)?;
    fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
    if let Some(s) = source {
        src.sort_by(|a, b| a.name.cmp(&b.name));
        write_shards(s, &src, o.shards)?;
        fs::write(s.join("config.json"), serde_json::to_vec_pretty(&plain)?)?;
    }
    Ok(Written {
        tensors: tensors.len(),
        bytes,
    })
}
