//! The sample writer: valid bundles with every precision a format allows,
//! heavy-tailed weights quantised per the format's rules. Tests, the demo and
//! the benchmarks all start from it.

pub mod gguf;
pub mod gptq;
pub mod mlxlm;
pub mod nvfp4;
pub mod quantize;
pub mod reference;

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::decode::{self, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::format::audio8::{EMBED, LM_HEAD, full8_grid};
use crate::format::{DenseDtype, IntDtype, PackedKind, hex};
pub use crate::util::Rng;

/// Which format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleFormat {
    /// `audio8-mixed-bundle-v1` (no `q3_full8`).
    Audio8V1,
    /// `audio8-mixed-bundle-v2`.
    Audio8V2,
}

impl SampleFormat {
    /// Parses `audio8-v1` / `audio8-v2`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "audio8-v1" | "audio8-mixed-bundle-v1" => Some(Self::Audio8V1),
            "audio8-v2" | "audio8-mixed-bundle-v2" => Some(Self::Audio8V2),
            _ => None,
        }
    }
}

/// What to write.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Format.
    pub format: SampleFormat,
    /// Seed of every random choice: the same seed writes the same bytes.
    pub seed: u64,
    /// Grow the payload to about this many MiB.
    pub size_mib: Option<u64>,
}

impl Default for SampleOptions {
    fn default() -> Self {
        Self {
            format: SampleFormat::Audio8V2,
            seed: 1,
            size_mib: None,
        }
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct SampleSummary {
    /// The bundle folder.
    pub dir: PathBuf,
    /// Tensor records.
    pub tensors: usize,
    /// Payload bytes.
    pub payload_bytes: u64,
}

/// The payload file name samples use.
pub const WEIGHTS_FILE: &str = "weights.bin";

#[derive(Debug, Clone)]
enum Spec {
    Dense {
        dtype: DenseDtype,
        shape: Vec<u64>,
        /// Values are `center + spread * t`.
        center: f32,
        spread: f32,
    },
    Packed {
        kind: PackedKind,
        rows: u64,
        cols: u64,
    },
}

impl Spec {
    fn bytes(&self) -> u64 {
        match self {
            Spec::Dense { dtype, shape, .. } => shape.iter().product::<u64>() * dtype.size(),
            Spec::Packed { kind, rows, cols } => {
                rows * cols * u64::from(kind.bits()) / 8 + rows * (cols / 64) * 2
            }
        }
    }
}

struct Config {
    hidden: u64,
    inter: u64,
    vocab: u64,
    layers: u64,
}

fn layer_specs(c: &Config, v2: bool, i: u64) -> Vec<(String, Spec)> {
    let full8 = if v2 {
        PackedKind::Q3Full8
    } else {
        PackedKind::Q3
    };
    let p = |kind, rows, cols| Spec::Packed { kind, rows, cols };
    let d = |dtype, n: u64, center, spread| Spec::Dense {
        dtype,
        shape: vec![n],
        center,
        spread,
    };
    let base = format!("language_model.model.layers.{i}");
    let h = c.hidden;
    vec![
        (
            format!("{base}.input_layernorm.weight"),
            d(DenseDtype::Bf16, h, 1.0, 0.05),
        ),
        (format!("{base}.self_attn.q_proj.weight"), p(full8, h, h)),
        (
            format!("{base}.self_attn.q_proj.bias"),
            d(DenseDtype::F16, h, 0.0, 0.02),
        ),
        (format!("{base}.self_attn.k_proj.weight"), p(full8, h, h)),
        (
            format!("{base}.self_attn.k_proj.bias"),
            d(DenseDtype::F16, h, 0.0, 0.02),
        ),
        (
            format!("{base}.self_attn.v_proj.weight"),
            p(PackedKind::Q4, h, h),
        ),
        (
            format!("{base}.self_attn.v_proj.bias"),
            d(DenseDtype::F16, h, 0.0, 0.02),
        ),
        (
            format!("{base}.self_attn.o_proj.weight"),
            p(PackedKind::Q4, h, h),
        ),
        (
            format!("{base}.post_attention_layernorm.weight"),
            d(DenseDtype::F32, h, 1.0, 0.05),
        ),
        (
            format!("{base}.mlp.gate_proj.weight"),
            p(PackedKind::Q3, c.inter, h),
        ),
        (
            format!("{base}.mlp.up_proj.weight"),
            p(PackedKind::Q4, c.inter, h),
        ),
        (
            format!("{base}.mlp.down_proj.weight"),
            p(PackedKind::Q4, h, c.inter),
        ),
    ]
}

fn specs(c: &Config, v2: bool) -> Vec<(String, Spec)> {
    let h = c.hidden;
    let mut out = vec![
        (
            "audio_tower.conv1.weight".to_string(),
            Spec::Dense {
                dtype: DenseDtype::Bf16,
                shape: vec![h, 80, 3],
                center: 0.0,
                spread: 0.05,
            },
        ),
        (
            "audio_tower.conv1.bias".to_string(),
            Spec::Dense {
                dtype: DenseDtype::F32,
                shape: vec![h],
                center: 0.0,
                spread: 0.01,
            },
        ),
        (
            EMBED.to_string(),
            Spec::Packed {
                kind: PackedKind::Q4,
                rows: c.vocab,
                cols: h,
            },
        ),
    ];
    for i in 0..c.layers {
        out.extend(layer_specs(c, v2, i));
    }
    out.push((
        "language_model.model.norm.weight".to_string(),
        Spec::Dense {
            dtype: DenseDtype::F32,
            shape: vec![h],
            center: 1.0,
            spread: 0.05,
        },
    ));
    out
}

fn config(size_mib: Option<u64>, v2: bool) -> Config {
    let small = Config {
        hidden: 256,
        inter: 704,
        vocab: 1024,
        layers: 2,
    };
    let Some(mib) = size_mib else { return small };
    let target = mib.saturating_mul(1 << 20);
    let mut best = small;
    for hidden in [256u64, 512, 1024, 2048, 4096] {
        let c = Config {
            hidden,
            inter: (hidden * 11 / 4).div_ceil(64) * 64,
            vocab: if hidden >= 1024 { 8192 } else { 2048 },
            layers: 1,
        };
        let per_layer: u64 = layer_specs(&c, v2, 0).iter().map(|(_, s)| s.bytes()).sum();
        let fixed: u64 = specs(&Config { layers: 0, ..c }, v2)
            .iter()
            .map(|(_, s)| s.bytes())
            .sum();
        if per_layer * 4 + fixed > target && hidden > 256 {
            break;
        }
        let layers = (target.saturating_sub(fixed) / per_layer).clamp(1, 150);
        best = Config { layers, ..c };
    }
    best
}

/// Seed of one tensor, derived from the bundle seed and the name, so that a
/// tensor's values do not depend on which tensors precede it.
fn tensor_seed(seed: u64, name: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(name.as_bytes());
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Heavy-tailed weights of one row: Student-t(4) values times a per-row
/// scale that is itself heavy-tailed, so some channels stand out.
fn weight_row(seed: u64, row: u64, cols: usize, out: &mut [f32]) {
    let mut r = Rng::new(seed ^ row.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let row_scale = 0.02 * (1.0 + 0.25 * r.student_t().abs());
    for v in out.iter_mut().take(cols) {
        *v = row_scale * r.student_t();
    }
}

/// The unquantised value of element `(row, col)` of a packed tensor, as the
/// sample writer drew it (the reference checkpoint reads the same).
pub fn packed_source_row(seed: u64, name: &str, row: u64, out: &mut [f32]) {
    let cols = out.len();
    weight_row(tensor_seed(seed, name), row, cols, out);
}

/// Quantises one row: codes and F16 scales, per the grid of `kind`.
pub fn quantize_row(kind: PackedKind, values: &[f32], codes: &mut [u8], scales: &mut [u16]) {
    let z = kind.zero();
    let (lo, hi) = (-z, i32::from(kind.max_code()) - z);
    let levels = lo.abs().max(hi) as f32;
    for ((group, cgroup), s) in values
        .chunks(64)
        .zip(codes.chunks_mut(64))
        .zip(scales.iter_mut())
    {
        let amax = group.iter().fold(0f32, |m, v| m.max(v.abs()));
        let mut h = f32_to_f16((amax / levels).max(1e-4));
        if !decode::f16_is_positive_finite(h) {
            h = 0x3c00;
        }
        *s = h;
        let scale = f16_to_f32(h);
        for (v, c) in group.iter().zip(cgroup.iter_mut()) {
            let q = (v / scale).round() as i32;
            *c = (q.clamp(lo, hi) + z) as u8;
        }
    }
}

fn packed_bytes(seed: u64, kind: PackedKind, rows: u64, cols: u64) -> Vec<u8> {
    let bits = kind.bits();
    let row_bytes = (cols * u64::from(bits) / 8) as usize;
    let groups = (cols / 64) as usize;
    let mut codes = vec![0u8; row_bytes * rows as usize];
    let mut scales = vec![0u16; groups * rows as usize];
    codes
        .par_chunks_mut(row_bytes)
        .zip(scales.par_chunks_mut(groups))
        .enumerate()
        .for_each_init(
            || (vec![0f32; cols as usize], vec![0u8; cols as usize]),
            |(vals, cs), (r, (packed, sc))| {
                weight_row(seed, r as u64, cols as usize, vals);
                quantize_row(kind, vals, cs, sc);
                decode::pack_row(cs, bits, packed);
            },
        );
    let mut out = codes;
    out.reserve(scales.len() * 2);
    for s in scales {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

fn dense_bytes(seed: u64, dtype: DenseDtype, count: u64, center: f32, spread: f32) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity((count * dtype.size()) as usize);
    for _ in 0..count {
        let v = center + spread * r.student_t();
        match dtype {
            DenseDtype::Bf16 => out.extend_from_slice(&f32_to_bf16(v).to_le_bytes()),
            DenseDtype::F16 => out.extend_from_slice(&f32_to_f16(v).to_le_bytes()),
            DenseDtype::F32 => out.extend_from_slice(&v.to_le_bytes()),
            DenseDtype::F64 => out.extend_from_slice(&f64::from(v).to_le_bytes()),
            DenseDtype::F8E4m3 => out.push(f8_nearest(true, v)),
            DenseDtype::F8E5m2 => out.push(f8_nearest(false, v)),
            DenseDtype::Int(t) => out.extend_from_slice(&int_nearest(t, v)),
        }
    }
    out
}

/// The little-endian bytes of the integer of `ty` nearest `v` (saturating
/// at the type's range; BOOL is 1 where that integer is nonzero).
fn int_nearest(ty: IntDtype, v: f32) -> Vec<u8> {
    let v = v.round();
    match ty {
        IntDtype::I8 => (v as i8).to_le_bytes().to_vec(),
        IntDtype::U8 => (v as u8).to_le_bytes().to_vec(),
        IntDtype::Bool => vec![u8::from(v != 0.0)],
        IntDtype::I16 => (v as i16).to_le_bytes().to_vec(),
        IntDtype::U16 => (v as u16).to_le_bytes().to_vec(),
        IntDtype::I32 => (v as i32).to_le_bytes().to_vec(),
        IntDtype::U32 => (v as u32).to_le_bytes().to_vec(),
        IntDtype::I64 => (v as i64).to_le_bytes().to_vec(),
        IntDtype::U64 => (v as u64).to_le_bytes().to_vec(),
    }
}

/// The finite F8 byte (E4M3 "fn" when `e4m3`, else E5M2) nearest `v`,
/// ties to the even byte, saturating at the largest magnitude.
fn f8_nearest(e4m3: bool, v: f32) -> u8 {
    let bytes: Vec<u8> = (0..=255).collect();
    let mut values = [0f32; 256];
    decode::f8_to_f32(e4m3, &bytes, &mut values);
    let mut best = (f32::INFINITY, 0u8);
    for (b, x) in values.iter().enumerate() {
        let err = (x - v).abs();
        if x.is_finite() && (err < best.0 || (err == best.0 && b % 2 == 0)) {
            best = (err, b as u8);
        }
    }
    best.1
}

/// Writes a sample bundle into `dir` (created; must be empty or absent).
pub fn write(dir: &Path, opts: &SampleOptions) -> Result<SampleSummary> {
    if dir.exists() && fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} is not empty; the sample writer only writes into a new or empty folder",
            dir.display()
        );
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let v2 = opts.format == SampleFormat::Audio8V2;
    let cfg = config(opts.size_mib, v2);
    let specs = specs(&cfg, v2);
    let payload = dir.join(WEIGHTS_FILE);
    let mut w = BufWriter::with_capacity(
        4 << 20,
        File::create(&payload).with_context(|| format!("creating {}", payload.display()))?,
    );
    let mut hash = Sha256::new();
    let mut offset = 0u64;
    let mut records = Vec::new();
    for (name, spec) in &specs {
        let seed = tensor_seed(opts.seed, name);
        let (bytes, record) = match spec {
            Spec::Dense {
                dtype,
                shape,
                center,
                spread,
            } => {
                let count = shape.iter().product();
                let b = dense_bytes(seed, *dtype, count, *center, *spread);
                let rec = json!({"name": name, "precision": "original", "encoding": "original",
                    "source_dtype": dtype.as_str(), "shape": shape, "offset": offset,
                    "bytes": b.len()});
                (b, rec)
            }
            Spec::Packed { kind, rows, cols } => {
                let b = packed_bytes(seed, *kind, *rows, *cols);
                (b, packed_record(name, *kind, *rows, *cols, offset))
            }
        };
        hash.update(&bytes);
        w.write_all(&bytes)?;
        offset += bytes.len() as u64;
        records.push(record);
    }
    w.flush()?;
    drop(w);
    let format = if v2 {
        "audio8-mixed-bundle-v2"
    } else {
        "audio8-mixed-bundle-v1"
    };
    let manifest = json!({
        "format": format,
        "group_size": 64,
        "tie_word_embeddings": true,
        "weights_file": WEIGHTS_FILE,
        "weights_bytes": offset,
        "weights_sha256": hex(&hash.finalize()),
        "source_revision": format!("bundlescope-sample-seed-{}", opts.seed),
        "profile": if v2 { "mixed-q3full8-q3-q4" } else { "mixed-q3-q4" },
        "external_assets_not_included": {"config.json": {"sha256": hex(&Sha256::digest(b"{}"))}},
        "tensors": records,
        "aliases": {LM_HEAD: EMBED},
    });
    let text = serde_json::to_string_pretty(&manifest)?;
    fs::write(dir.join("manifest.json"), text)?;
    Ok(SampleSummary {
        dir: dir.to_path_buf(),
        tensors: specs.len(),
        payload_bytes: offset,
    })
}

/// The manifest record of a packed tensor, every storage field filled in.
pub fn packed_record(name: &str, kind: PackedKind, rows: u64, cols: u64, offset: u64) -> Value {
    let bits = u64::from(kind.bits());
    let row_bytes = cols * bits / 8;
    let codes_bytes = rows * row_bytes;
    let scales_bytes = rows * (cols / 64) * 2;
    let mut rec = json!({"name": name, "precision": kind.precision().as_str(),
        "encoding": if kind == PackedKind::Q3Full8 { "uniform_lsb_full8" } else { "uniform_lsb" },
        "shape": [rows, cols], "offset": offset, "bytes": codes_bytes + scales_bytes,
        "group_size": 64, "padded_cols": cols, "row_bytes": row_bytes,
        "codes_bytes": codes_bytes, "scales_offset": offset + codes_bytes,
        "scales_bytes": scales_bytes, "scales_dtype": "F16", "scales_shape": [rows, cols / 64]});
    if kind == PackedKind::Q3Full8
        && let Some(o) = rec.as_object_mut()
    {
        o.insert("grid".into(), full8_grid());
    }
    rec
}

/// The demo bundle, written once into the user's cache folder.
pub fn demo_bundle() -> Result<PathBuf> {
    let dir = crate::util::paths::app_cache().join(format!("demo-{}", crate::TOOL_VERSION));
    if !dir.join("manifest.json").exists() {
        // Written beside, then renamed, so a half-written demo is never opened;
        // unique per call so two writers at once do not collide.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.with_extension(format!("tmp{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        write(&tmp, &SampleOptions::default())?;
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            if !dir.join("manifest.json").exists() {
                bail!("could not place the demo bundle at {}", dir.display());
            }
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_uses_the_grid_and_positive_scales() {
        let vals: Vec<f32> = (0..128).map(|i| (i as f32 - 64.0) / 10.0).collect();
        for kind in [PackedKind::Q3, PackedKind::Q3Full8, PackedKind::Q4] {
            let mut codes = vec![0u8; 128];
            let mut scales = vec![0u16; 2];
            quantize_row(kind, &vals, &mut codes, &mut scales);
            assert!(codes.iter().all(|&c| c <= kind.max_code()));
            assert!(scales.iter().all(|&s| decode::f16_is_positive_finite(s)));
            // Every weight is within half a step of its dequantised value, or clipped.
            for (j, (&v, &c)) in vals.iter().zip(&codes).enumerate() {
                let s = f16_to_f32(scales[j / 64]);
                let deq = s * (i32::from(c) - kind.zero()) as f32;
                let clipped = c == 0 || c == kind.max_code();
                assert!(clipped || (deq - v).abs() <= s / 2.0 + 1e-6, "{kind:?} {j}");
            }
        }
    }

    #[test]
    fn size_config_respects_the_tensor_bound() {
        for mib in [1u64, 64, 512, 2048, 20_000] {
            let c = config(Some(mib), true);
            assert!(
                specs(&c, true).len() <= crate::format::audio8::MAX_TENSORS,
                "{mib}"
            );
        }
    }
}
