//! `bundlescope sample DIR --format nvfp4`: a small mlx-nvfp4 MoE artifact
//! written with bundlescope's own encoder: stacked experts per layer, BF16
//! embeddings, norms and routers, spread over several shards.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::decode::f32_to_bf16;
use crate::decode::nvfp4::{self, GROUP};
use crate::format::hex;
use crate::format::safetensors::{self, WriteTensor};
use crate::util::Rng;

/// What to write.
#[derive(Debug, Clone)]
pub struct Nvfp4Options {
    /// Seed of every random value.
    pub seed: u64,
    /// MoE layers.
    pub layers: u64,
    /// Experts per layer.
    pub experts: u64,
    /// Hidden size (a multiple of 16).
    pub hidden: u64,
    /// Expert intermediate size (a multiple of 16); gate/up is twice this.
    pub intermediate: u64,
    /// Grow to about this many MiB by adding layers; their codes and scales
    /// are random valid bytes rather than quantised values (fast to write).
    pub size_mib: Option<u64>,
    /// Also write the per-shard `sha256` and `bytes` into the manifest.
    pub shard_hashes: bool,
}

impl Default for Nvfp4Options {
    fn default() -> Self {
        Self {
            seed: 1,
            layers: 4,
            experts: 8,
            hidden: 128,
            intermediate: 64,
            size_mib: None,
            shard_hashes: true,
        }
    }
}

fn file_sha256(path: &Path) -> Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut fs::File::open(path)?, &mut h)?;
    Ok(hex(&h.finalize()))
}

/// Name of shard `i` of `n`.
pub fn shard_name(i: usize, n: usize) -> String {
    format!("model-{:05}-of-{:05}.safetensors", i + 1, n)
}

struct Tensor {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn bf16_tensor(rng: &mut Rng, name: String, shape: Vec<u64>, scale: f32) -> Tensor {
    let n: u64 = shape.iter().product();
    let mut data = Vec::with_capacity(n as usize * 2);
    for _ in 0..n {
        let v = (rng.uniform() * 2.0 - 1.0) * scale;
        data.extend_from_slice(&f32_to_bf16(v).to_le_bytes());
    }
    Tensor {
        name,
        dtype: "BF16",
        shape,
        data,
    }
}

/// The source value of expert `e`'s element `(o, k)` in a stacked weight:
/// heavy-tailed, with a per-expert spread so experts differ.
fn source_rows(rng: &mut Rng, e: u64, rows: u64, cols: u64) -> Vec<f32> {
    let spread = 0.02 * (1.0 + (e % 5) as f32 * 0.25);
    (0..rows * cols).map(|_| rng.student_t() * spread).collect()
}

/// Quantises a stacked weight with our encoder: `weight`, `scales`, `global_scale`.
fn experts(rng: &mut Rng, base: &str, e: u64, rows: u64, cols: u64, random: bool) -> [Tensor; 3] {
    let per = (rows * cols) as usize;
    let mut words = vec![0u8; e as usize * per / 2];
    let mut scales = vec![0u8; e as usize * per / GROUP];
    let mut globals = Vec::with_capacity(e as usize * 4);
    for x in 0..e as usize {
        let w = &mut words[x * per / 2..(x + 1) * per / 2];
        let s = &mut scales[x * per / GROUP..(x + 1) * per / GROUP];
        let global = if random {
            for chunk in w.chunks_mut(8) {
                let r = rng.next_u64().to_le_bytes();
                chunk.copy_from_slice(&r[..chunk.len()]);
            }
            for b in s.iter_mut() {
                // Valid positive E4M3 bytes in a realistic range.
                *b = 0x28 + (rng.next_u64() % 0x30) as u8;
            }
            0.5 + (x % 7) as f32 * 0.1
        } else {
            let src = source_rows(rng, x as u64, rows, cols);
            let amax = src.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
            for ((row, wr), sr) in src
                .chunks_exact(cols as usize)
                .zip(w.chunks_exact_mut(cols as usize / 2))
                .zip(s.chunks_exact_mut(cols as usize / GROUP))
            {
                nvfp4::quantize_row(row, amax, wr, sr);
            }
            amax
        };
        globals.extend_from_slice(&global.to_le_bytes());
    }
    [
        Tensor {
            name: format!("{base}.weight"),
            dtype: "U32",
            shape: vec![e, rows, cols / 8],
            data: words,
        },
        Tensor {
            name: format!("{base}.scales"),
            dtype: "U8",
            shape: vec![e, rows, cols / GROUP as u64],
            data: scales,
        },
        Tensor {
            name: format!("{base}.global_scale"),
            dtype: "F32",
            shape: vec![e],
            data: globals,
        },
    ]
}

fn layer(rng: &mut Rng, i: u64, o: &Nvfp4Options, random: bool) -> Vec<Tensor> {
    let p = format!("model.decoder.layers.{i}");
    let (h, m, e) = (o.hidden, o.intermediate, o.experts);
    let mut v = Vec::new();
    v.push(bf16_tensor(
        rng,
        format!("{p}.input_layernorm.weight"),
        vec![h],
        1.0,
    ));
    v.push(bf16_tensor(
        rng,
        format!("{p}.mlp.router.weight"),
        vec![e, h],
        0.05,
    ));
    v.extend(experts(
        rng,
        &format!("{p}.experts.gate_up_proj"),
        e,
        2 * m,
        h,
        random,
    ));
    v.extend(experts(
        rng,
        &format!("{p}.experts.down_proj"),
        e,
        h,
        m,
        random,
    ));
    v
}

/// Writes the artifact; returns (tensors, shard bytes).
pub fn write(dir: &Path, o: &Nvfp4Options) -> Result<(usize, u64)> {
    if !o.hidden.is_multiple_of(16)
        || !o.intermediate.is_multiple_of(16)
        || o.hidden == 0
        || o.intermediate == 0
    {
        bail!("hidden and intermediate sizes must be positive multiples of 16");
    }
    if o.layers == 0 || o.experts == 0 {
        bail!("--layers and --experts must be at least 1");
    }
    if dir.exists() && fs::read_dir(dir)?.next().is_some() {
        bail!("{} exists and is not empty", dir.display());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut rng = Rng::new(o.seed);
    let per_layer = {
        let (h, m, e) = (o.hidden, o.intermediate, o.experts);
        e * (2 * m * h + h * m) / 2 + e * (2 * m * h + h * m) / 16 + 8 * e + 2 * (e * h + h)
    };
    let extra_layers = o.size_mib.map_or(0, |mib| {
        ((mib << 20) / per_layer.max(1)).saturating_sub(o.layers)
    });
    let layers = o.layers + extra_layers;
    // About one shard per layer for small artifacts, at least 4 shards for big ones.
    let shards = if o.size_mib.is_some() {
        (layers as usize).clamp(1, 4.max(((layers * per_layer) >> 30) as usize))
    } else {
        (layers as usize).min(4)
    };
    let per_shard = (layers as usize).div_ceil(shards);
    let mut weight_map = serde_json::Map::new();
    let mut shard_entries = Vec::new();
    let mut total_tensors = 0;
    let mut total_bytes = 0u64;
    for s in 0..shards {
        let name = shard_name(s, shards);
        let mut tensors = Vec::new();
        if s == 0 {
            let vocab = 256;
            tensors.push(bf16_tensor(
                &mut rng,
                "model.embed_tokens.weight".into(),
                vec![vocab, o.hidden],
                0.1,
            ));
            tensors.push(bf16_tensor(
                &mut rng,
                "model.norm.weight".into(),
                vec![o.hidden],
                1.0,
            ));
        }
        for i in (s * per_shard) as u64..(((s + 1) * per_shard) as u64).min(layers) {
            tensors.extend(layer(&mut rng, i, o, i >= o.layers));
        }
        let wt: Vec<WriteTensor<'_>> = tensors
            .iter()
            .map(|t| WriteTensor {
                name: &t.name,
                dtype: t.dtype,
                shape: &t.shape,
                data: &t.data,
            })
            .collect();
        let path = dir.join(&name);
        safetensors::write(&path, &wt).with_context(|| format!("writing {}", path.display()))?;
        for t in &tensors {
            weight_map.insert(t.name.clone(), json!(name));
        }
        total_tensors += tensors.len();
        let mut entry = json!({"file": name});
        let len = fs::metadata(&path)?.len();
        total_bytes += len;
        if o.shard_hashes {
            entry["bytes"] = json!(len);
            entry["sha256"] = json!(file_sha256(&path)?);
        }
        shard_entries.push(entry);
    }
    let manifest = json!({
        "quantization": {"mode": "nvfp4", "bits": 4, "group_size": 16, "layout": "stacked-global-scale"},
        "shards": shard_entries,
        "weight_map": weight_map,
    });
    fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    Ok((total_tensors, total_bytes))
}
