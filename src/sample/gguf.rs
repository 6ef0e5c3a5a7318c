//! A GGUF writer for the tests, the demo and the benchmarks: a small
//! llama-shaped model with metadata (a tokenizer's token array, a chat
//! template) and one tensor of each decoded ggml type, every block holding
//! random codes and a finite scale.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::format::gguf::{GgmlType, Value};
use crate::util::Rng;

/// One tensor to write: name, type, `ne` (contiguous axis first) and bytes.
pub struct Tensor {
    /// Name.
    pub name: String,
    /// The ggml type.
    pub ty: GgmlType,
    /// `ne[]`.
    pub ne: Vec<u64>,
    /// Its bytes (`prod(ne) / block * type_size`).
    pub data: Vec<u8>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_number(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::Str(_) => 8,
        Value::Array(..) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::Str(s) => put_str(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(t, items) => {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
    }
}

/// The bytes of a GGUF v3 file with these key/values and tensors, each
/// tensor at the next multiple of `alignment`.
pub fn encode(kvs: &[(&str, Value)], tensors: &[Tensor], alignment: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut out, k);
        out.extend_from_slice(&type_number(v).to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
        for d in &t.ne {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.number().to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + t.data.len() as u64).next_multiple_of(alignment);
    }
    let pad = |out: &mut Vec<u8>| {
        let n = (out.len() as u64).next_multiple_of(alignment) as usize;
        out.resize(n, 0);
    };
    pad(&mut out);
    for t in tensors {
        out.extend_from_slice(&t.data);
        pad(&mut out);
    }
    // The last tensor's padding is not part of the file (as gguf-py writes it).
    if let Some(t) = tensors.last() {
        let pad = (t.data.len() as u64).next_multiple_of(alignment) - t.data.len() as u64;
        out.truncate(out.len() - pad as usize);
    }
    out
}

/// Byte offsets, within one block, of the type's F16 scale fields (d, and
/// m or dmin), which must be finite.
pub fn f16_scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// `n` random blocks of `ty`: random bytes, with every scale field finite
/// (F16 d between about 2^-9 and 2^-5, Q8_K's F32 d likewise) and, for the
/// float types, finite values.
pub fn random_blocks(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let size = ty.type_size() as usize;
    let mut out = vec![0u8; n * size];
    for chunk in out.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    let small = |rng: &mut Rng| 0x1800u16 + (rng.next_u64() % 0x1000) as u16;
    match ty {
        GgmlType::F32 => {
            for v in out.chunks_exact_mut(4) {
                v.copy_from_slice(&(rng.student_t() * 0.02).to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for v in out.chunks_exact_mut(2) {
                let h = crate::decode::f32_to_f16(rng.student_t() * 0.02);
                v.copy_from_slice(&h.to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for v in out.chunks_exact_mut(2) {
                let h = crate::decode::f32_to_bf16(rng.student_t() * 0.02);
                v.copy_from_slice(&h.to_le_bytes());
            }
        }
        GgmlType::Q8_K => {
            for b in out.chunks_exact_mut(size) {
                let d = (1 + rng.next_u64() % 64) as f32 / 4096.0;
                b[..4].copy_from_slice(&d.to_le_bytes());
            }
        }
        // Scale bytes that dequantize to finite values of a weight's size.
        GgmlType::MXFP4 => {
            for b in out.chunks_exact_mut(size) {
                b[0] = 118 + (rng.next_u64() % 8) as u8;
            }
        }
        GgmlType::NVFP4 => {
            for b in out.chunks_exact_mut(size) {
                for s in &mut b[..4] {
                    *s = 0x28 + (rng.next_u64() % 0x18) as u8;
                }
            }
        }
        GgmlType::IQ4_XS => {
            for b in out.chunks_exact_mut(size) {
                b[..2].copy_from_slice(&small(rng).to_le_bytes());
            }
        }
        _ => {
            let fields = f16_scale_fields(ty);
            for b in out.chunks_exact_mut(size) {
                for &f in fields {
                    b[f..f + 2].copy_from_slice(&small(rng).to_le_bytes());
                }
            }
        }
    }
    out
}

/// The sample's tensors: `(name, type, ne)`, llama-style names.
pub fn sample_specs() -> Vec<(&'static str, GgmlType, Vec<u64>)> {
    use GgmlType as T;
    vec![
        ("token_embd.weight", T::Q4_K, vec![256, 32]),
        ("blk.0.attn_norm.weight", T::F32, vec![256]),
        ("blk.0.attn_q.weight", T::Q4_0, vec![256, 64]),
        ("blk.0.attn_k.weight", T::Q4_1, vec![256, 64]),
        ("blk.0.attn_v.weight", T::Q5_0, vec![256, 64]),
        ("blk.0.attn_output.weight", T::Q5_1, vec![256, 64]),
        ("blk.0.ffn_gate.weight", T::Q8_0, vec![256, 64]),
        ("blk.0.ffn_up.weight", T::Q2_K, vec![256, 64]),
        ("blk.0.ffn_down.weight", T::Q3_K, vec![256, 64]),
        ("blk.0.ffn_norm.weight", T::F16, vec![256]),
        ("blk.1.attn_q.weight", T::Q5_K, vec![256, 64]),
        ("blk.1.attn_k.weight", T::Q6_K, vec![256, 64]),
        ("blk.1.attn_v.weight", T::Q8_K, vec![256, 64]),
        ("blk.1.ffn_gate.weight", T::MXFP4, vec![256, 64]),
        ("blk.1.ffn_up.weight", T::NVFP4, vec![256, 64]),
        ("blk.1.ffn_down.weight", T::BF16, vec![256, 64]),
        ("blk.1.ffn_gate_exps.weight", T::IQ4_XS, vec![256, 16, 2]),
        ("output_norm.weight", T::F32, vec![256]),
        ("output.weight", T::Q6_K, vec![256, 32]),
    ]
}

/// The sample's metadata: a small llama header with a tokenizer of
/// `tokens` entries and a chat template.
pub fn sample_kvs(tokens: usize) -> Vec<(&'static str, Value)> {
    let s = |x: &str| Value::Str(x.to_string());
    vec![
        ("general.architecture", s("llama")),
        ("general.name", s("bundlescope sample")),
        ("general.size_label", s("tiny")),
        ("general.file_type", Value::U32(15)),
        ("general.quantization_version", Value::U32(2)),
        ("general.alignment", Value::U32(32)),
        ("llama.context_length", Value::U32(4096)),
        ("llama.embedding_length", Value::U32(256)),
        ("llama.block_count", Value::U32(2)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("tokenizer.ggml.model", s("gpt2")),
        (
            "tokenizer.ggml.tokens",
            Value::Array(8, (0..tokens).map(|i| s(&format!("tok{i}"))).collect()),
        ),
        (
            "tokenizer.chat_template",
            s("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"),
        ),
    ]
}

/// Writes the sample GGUF to `path` (seeded: the same seed, the same bytes).
pub fn write(path: &Path, seed: u64) -> Result<()> {
    write_sized(path, seed, None).map(|_| ())
}

/// Writes the sample GGUF, its matrices grown to about `size_mib` MiB in
/// all; returns the file's length.
pub fn write_sized(path: &Path, seed: u64, size_mib: Option<u64>) -> Result<u64> {
    let mut rng = Rng::new(seed);
    let base: u64 = sample_specs()
        .iter()
        .map(|(_, ty, ne)| ne.iter().product::<u64>() / ty.block_size() * ty.type_size())
        .sum();
    let grow = size_mib.map_or(1, |m| ((m << 20) / base).max(1));
    let tensors: Vec<Tensor> = sample_specs()
        .into_iter()
        .map(|(name, ty, mut ne)| {
            if let Some(rows) = ne.get_mut(1) {
                *rows *= grow;
            }
            let n: u64 = ne.iter().product();
            let data = random_blocks(ty, (n / ty.block_size()) as usize, &mut rng);
            Tensor {
                name: name.to_string(),
                ty,
                ne,
                data,
            }
        })
        .collect();
    let bytes = encode(&sample_kvs(1000), &tensors, 32);
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(&bytes)?;
    Ok(bytes.len() as u64)
}
