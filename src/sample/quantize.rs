//! Quantises a real checkpoint (a plain safetensors file of F32, BF16 or
//! F16 tensors) into a valid audio8 v2 bundle with the sample writer's
//! encoder ([`super::quantize_row`]): every 2-D tensor whose rows are a
//! whole number of 64-groups becomes packed, the rest stays as stored. The
//! tied embedding the format requires is the checkpoint's word embedding.
//! With `reference`, the checkpoint's values under the bundle's names are
//! written beside it, so `spotcheck --reference` can measure the bundle.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{SampleSummary, WEIGHTS_FILE, packed_record, quantize_row};
use crate::decode::{self, bf16_to_f32, f16_to_f32};
use crate::format::audio8::{EMBED, LM_HEAD};
use crate::format::safetensors::header_bytes;
use crate::format::{self, DenseDtype, Layout, PackedKind, Payload, hex};

/// A tensor of the checkpoint as it goes into the bundle.
struct Source {
    name: String,
    shape: Vec<u64>,
    dtype: DenseDtype,
    /// Packed as this kind, or kept dense.
    kind: Option<PackedKind>,
    index: usize,
}

/// Whether `name` is the checkpoint's token embedding.
fn is_embedding(name: &str) -> bool {
    ["word_embeddings", "embed_tokens", "token_embd", "wte"]
        .iter()
        .any(|k| name.contains(k))
}

fn values(dtype: DenseDtype, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DenseDtype::F32 => bytes
            .as_chunks::<4>()
            .0
            .iter()
            .map(|b| f32::from_le_bytes(*b))
            .collect(),
        DenseDtype::Bf16 => bytes
            .as_chunks::<2>()
            .0
            .iter()
            .map(|b| bf16_to_f32(u16::from_le_bytes(*b)))
            .collect(),
        DenseDtype::F16 => bytes
            .as_chunks::<2>()
            .0
            .iter()
            .map(|b| f16_to_f32(u16::from_le_bytes(*b)))
            .collect(),
        DenseDtype::F64 | DenseDtype::F8E4m3 | DenseDtype::F8E5m2 | DenseDtype::Int(_) => {
            let size = dtype.size() as usize;
            let mut out = vec![0f32; bytes.len() / size];
            let whole = &bytes[..out.len() * size];
            match decode::dequant::dense_to_f32(dtype, whole, &mut out) {
                Ok(()) => out,
                Err(_) => Vec::new(),
            }
        }
    }
}

/// Writes the bundle of `checkpoint` into `dir` (new or empty), its
/// matrices packed as `kind`, and with `reference`, the source values
/// into `reference/model.safetensors`.
pub fn from_checkpoint(
    checkpoint: &Path,
    dir: &Path,
    kind: PackedKind,
    reference: Option<&Path>,
) -> Result<SampleSummary> {
    for d in std::iter::once(dir).chain(reference) {
        if d.exists() && fs::read_dir(d)?.next().is_some() {
            bail!(
                "{} is not empty; nothing is written into a full folder",
                d.display()
            );
        }
    }
    let src =
        format::open(checkpoint).with_context(|| format!("opening {}", checkpoint.display()))?;
    let payload = Payload::open(&src);
    let mut sources = Vec::new();
    let mut embed = false;
    for (index, t) in src.tensors.iter().enumerate() {
        // Integer and BOOL buffers (position ids, masks) are no weights:
        // left out, decoded or not.
        let Some(Layout::Dense { dtype, count }) = t.layout else {
            continue;
        };
        if let DenseDtype::Int(_) = dtype {
            continue;
        }
        let shape = t.shape.clone().unwrap_or(vec![count]);
        let matrix = shape.len() == 2 && shape[1] % 64 == 0 && shape[0] > 0 && shape[1] > 0;
        let mut name = t.name.clone();
        if matrix && !embed && is_embedding(&name) {
            name = EMBED.to_string();
            embed = true;
        }
        sources.push(Source {
            name,
            shape,
            dtype,
            kind: matrix.then_some(kind),
            index,
        });
    }
    if !embed {
        bail!(
            "{} has no token embedding matrix (a name with word_embeddings, embed_tokens, token_embd or wte) to tie",
            checkpoint.display()
        );
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(WEIGHTS_FILE);
    let mut w = BufWriter::new(
        File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut hash = Sha256::new();
    let (mut offset, mut records) = (0u64, Vec::new());
    for s in &sources {
        let bytes = payload.tensor_bytes(s.index)?;
        let (out, record) = match s.kind {
            Some(kind) => {
                let (rows, cols) = (s.shape[0], s.shape[1]);
                let vals = values(s.dtype, bytes);
                let row_bytes = (cols * u64::from(kind.bits()) / 8) as usize;
                let groups = (cols / 64) as usize;
                let mut codes = vec![0u8; row_bytes * rows as usize];
                let mut scales = vec![0u16; groups * rows as usize];
                codes
                    .par_chunks_mut(row_bytes)
                    .zip(scales.par_chunks_mut(groups))
                    .zip(vals.par_chunks(cols as usize))
                    .for_each_init(
                        || vec![0u8; cols as usize],
                        |cs, ((packed, sc), v)| {
                            quantize_row(kind, v, cs, sc);
                            decode::pack_row(cs, kind.bits(), packed);
                        },
                    );
                codes.extend(scales.iter().flat_map(|h| h.to_le_bytes()));
                let rec = packed_record(&s.name, kind, rows, cols, offset);
                (codes, rec)
            }
            None => {
                let rec = json!({"name": s.name, "precision": "original", "encoding": "original",
                    "source_dtype": s.dtype.as_str(), "shape": s.shape, "offset": offset,
                    "bytes": bytes.len()});
                (bytes.to_vec(), rec)
            }
        };
        hash.update(&out);
        w.write_all(&out)?;
        offset += out.len() as u64;
        records.push(record);
    }
    w.flush()?;
    let manifest = json!({
        "format": "audio8-mixed-bundle-v2",
        "group_size": 64,
        "tie_word_embeddings": true,
        "weights_file": WEIGHTS_FILE,
        "weights_bytes": offset,
        "weights_sha256": hex(&hash.finalize()),
        "source_revision": format!("bundlescope-quantized-{}", checkpoint.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned())),
        "profile": "mixed-q3full8-q3-q4",
        "external_assets_not_included": {"config.json": {"sha256": hex(&Sha256::digest(b"{}"))}},
        "tensors": records,
        "aliases": {LM_HEAD: EMBED},
    });
    fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    if let Some(r) = reference {
        write_reference(&payload, &sources, r)?;
    }
    Ok(SampleSummary {
        dir: dir.to_path_buf(),
        tensors: sources.len(),
        payload_bytes: offset,
    })
}

/// The source values under the bundle's names: packed tensors as F32,
/// dense ones as stored.
fn write_reference(
    payload: &Payload<&format::Bundle>,
    sources: &[Source],
    dir: &Path,
) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let entries: Vec<(&str, &str, &[u64])> = sources
        .iter()
        .map(|s| {
            let dtype = if s.kind.is_some() {
                "F32"
            } else {
                s.dtype.as_str()
            };
            (s.name.as_str(), dtype, s.shape.as_slice())
        })
        .collect();
    let path = dir.join(super::reference::REFERENCE_FILE);
    let mut w = BufWriter::new(
        File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    w.write_all(&header_bytes(&entries, &[]))?;
    for s in sources {
        let bytes = payload.tensor_bytes(s.index)?;
        if s.kind.is_some() && s.dtype != DenseDtype::F32 {
            for v in values(s.dtype, bytes) {
                w.write_all(&v.to_le_bytes())?;
            }
        } else {
            w.write_all(bytes)?;
        }
    }
    w.flush()?;
    Ok(())
}
