//! The calibrated GPTQ-Q4 overlay writer: a few tensors of a parent bundle
//! rounded again, the rest copied byte for byte, and the provenance block
//! of bundlescope's documented reading (docs/provenance.md).
//!
//! What it models is a recalibration, not GPTQ itself: the parent's
//! dequantised weights plus seeded noise of about half a quantisation step
//! (standing in for what calibration data changes) are rounded again with
//! error feedback along each row (GPTQ's column-by-column compensation,
//! without the Hessian). A q4 parent tensor keeps its scales ("static
//! parent scales"); a 3-bit one becomes q4 with new scales, since the
//! format has no `q3_full8`.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{Rng, packed_record, quantize_row, tensor_seed};
use crate::decode::{self, dequant::dequantize_packed, f16_to_f32};
use crate::format::audio8::EMBED;
use crate::format::gptq::{FORMAT, overlay_identity};
use crate::format::{self, FormatKind, Layout, PackedKind, Payload, hex, sha256_hex};
use crate::util::paths::app_cache;

/// What to write.
#[derive(Debug, Clone, Default)]
pub struct OverlayOptions {
    /// Seed of the noise.
    pub seed: u64,
    /// Tensors to recalibrate; by default every 3-bit `q3_full8` tensor
    /// (which the format cannot copy) and two q4 projections.
    pub overlay: Option<Vec<String>>,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct OverlaySummary {
    /// The overlay folder.
    pub dir: PathBuf,
    /// The recalibrated tensors.
    pub overlay: Vec<String>,
    /// Tensors copied from the parent.
    pub copied: usize,
    /// Payload bytes.
    pub payload_bytes: u64,
}

/// The default overlay of `parent`: every q3_full8 tensor and the first
/// and last q4 tensor other than the tied embedding.
fn default_overlay(parent: &format::Bundle) -> Vec<String> {
    let real = || parent.tensors.iter().filter(|t| t.alias_of.is_none());
    let mut out: Vec<String> = real()
        .filter(|t| {
            matches!(
                t.layout,
                Some(Layout::Packed {
                    kind: PackedKind::Q3Full8,
                    ..
                })
            )
        })
        .map(|t| t.name.clone())
        .collect();
    let q4: Vec<&str> = real()
        .filter(|t| {
            t.name != EMBED
                && matches!(
                    t.layout,
                    Some(Layout::Packed {
                        kind: PackedKind::Q4,
                        ..
                    })
                )
        })
        .map(|t| t.name.as_str())
        .collect();
    for n in [q4.first(), q4.last()].into_iter().flatten() {
        if !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    }
    out
}

/// Rounds one row again: `values` (the parent's dequantised row) plus
/// noise, with error feedback, onto the q4 grid with `scales`.
fn reround_row(values: &[f32], scales: &[u16], noise: &mut Rng, codes: &mut [u8]) {
    let mut carry = 0f32;
    for (j, (&v, c)) in values.iter().zip(codes.iter_mut()).enumerate() {
        let s = scales.get(j / 64).map_or(1.0, |&h| f16_to_f32(h));
        let x = v / s + (noise.uniform() - 0.5) * 1.2 + carry / s;
        let q = x.round().clamp(-7.0, 7.0);
        carry = (x - q) * s;
        *c = (q as i32 + 7) as u8;
    }
}

/// The recalibrated q4 bytes of parent tensor `i` (codes then scales).
fn recalibrate(
    parent: &Payload<&format::Bundle>,
    i: usize,
    seed: u64,
) -> Result<(Vec<u8>, u64, u64)> {
    let t = &parent.bundle().tensors[i];
    let Some(Layout::Packed { kind, rows, cols }) = t.layout else {
        bail!(
            "{} is not a packed tensor; only packed tensors can be recalibrated to q4",
            t.name
        );
    };
    let bytes = parent.tensor_bytes(i)?;
    let (r, cl) = (rows as usize, cols as usize);
    let mut values = vec![0f32; r * cl];
    dequantize_packed(kind, r, cl, bytes, &mut values)?;
    let groups = cl / 64;
    let parent_scales: Vec<u16> = bytes[(kind.bits() as usize * cl / 8) * r..]
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let row_bytes = cl / 2;
    let mut codes_out = vec![0u8; row_bytes * r];
    let mut scales_out = vec![0u16; groups * r];
    let mut noise = Rng::new(tensor_seed(seed, &t.name));
    let mut row_codes = vec![0u8; cl];
    let mut changed = false;
    for row in 0..r {
        let v = &values[row * cl..(row + 1) * cl];
        let sc = &mut scales_out[row * groups..(row + 1) * groups];
        if kind == PackedKind::Q4 {
            // Static parent scales: only the codes are chosen again.
            sc.copy_from_slice(&parent_scales[row * groups..(row + 1) * groups]);
            reround_row(v, sc, &mut noise, &mut row_codes);
        } else {
            // A new grid: q4 scales from the row, codes by error feedback.
            quantize_row(PackedKind::Q4, v, &mut row_codes, sc);
            reround_row(v, sc, &mut noise, &mut row_codes);
        }
        let out = &mut codes_out[row * row_bytes..(row + 1) * row_bytes];
        decode::pack_row(&row_codes, 4, out);
        changed |=
            kind != PackedKind::Q4 || out[..] != bytes[row * row_bytes..(row + 1) * row_bytes];
    }
    if !changed {
        // A tiny tensor the noise left alone: move one code by one level,
        // so the overlay really differs from its parent.
        let c = codes_out[0] & 0xf;
        codes_out[0] = (codes_out[0] & 0xf0) | if c < 14 { c + 1 } else { c - 1 };
    }
    let mut out = codes_out;
    for s in scales_out {
        out.extend_from_slice(&s.to_le_bytes());
    }
    Ok((out, rows, cols))
}

/// Writes an overlay of the audio8 bundle `parent` into `dir` (new or
/// empty). The parent is only read.
pub fn write_overlay(parent_dir: &Path, dir: &Path, o: &OverlayOptions) -> Result<OverlaySummary> {
    if dir.exists() && fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} is not empty; the sample writer only writes into a new or empty folder",
            dir.display()
        );
    }
    let parent = format::open(parent_dir)
        .with_context(|| format!("opening the parent {}", parent_dir.display()))?;
    if !matches!(parent.format, FormatKind::Audio8V1 | FormatKind::Audio8V2) {
        bail!(
            "the parent must be an audio8-mixed-bundle-v1 or -v2 bundle, found {}",
            parent.format.name()
        );
    }
    if let Some(f) = parent.findings.first() {
        bail!(
            "the parent is not a valid bundle: [{}] {}",
            f.check,
            f.message
        );
    }
    let manifest: Value = serde_json::from_slice(&parent.manifest_bytes)?;
    let Some(pm) = manifest.as_object() else {
        bail!("the parent's manifest is not an object");
    };
    let overlay = o
        .overlay
        .clone()
        .unwrap_or_else(|| default_overlay(&parent));
    for n in &overlay {
        if parent
            .find(n)
            .is_none_or(|i| parent.tensors[i].alias_of.is_some())
        {
            bail!("the parent has no tensor {n:?} to recalibrate");
        }
    }
    for t in parent.tensors.iter().filter(|t| t.alias_of.is_none()) {
        if t.precision == format::Precision::Q3Full8 && !overlay.contains(&t.name) {
            bail!(
                "{} is q3_full8, which the calibrated format refuses: it must be in the overlay",
                t.name
            );
        }
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let payload = Payload::open(&parent);
    let path = dir.join(super::WEIGHTS_FILE);
    let mut w = BufWriter::with_capacity(
        4 << 20,
        File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut hash = Sha256::new();
    let mut offset = 0u64;
    let mut records = Vec::new();
    let mut copied = Vec::new();
    let mut overlay_hashes = Vec::new();
    for (i, t) in parent.tensors.iter().enumerate() {
        if t.alias_of.is_some() {
            continue;
        }
        let (bytes, record) = if overlay.contains(&t.name) {
            let (b, rows, cols) = recalibrate(&payload, i, o.seed)?;
            overlay_hashes.push((t.name.clone(), hex(&Sha256::digest(&b))));
            (
                b,
                packed_record(&t.name, PackedKind::Q4, rows, cols, offset),
            )
        } else {
            let b = payload.tensor_bytes(i)?.to_vec();
            copied.push(json!({"name": t.name, "range_sha256": hex(&Sha256::digest(&b))}));
            let mut rec = t.record.clone();
            if let Some(r) = rec.as_object_mut() {
                let old = t.offset.unwrap_or(0);
                r.insert("offset".into(), json!(offset));
                if let Some(so) = r.get("scales_offset").and_then(Value::as_u64) {
                    r.insert("scales_offset".into(), json!(so - old + offset));
                }
            }
            (b, rec)
        };
        hash.update(&bytes);
        w.write_all(&bytes)?;
        offset += bytes.len() as u64;
        records.push(record);
    }
    w.flush()?;
    drop(w);
    let parent_manifest_sha = sha256_hex(&parent.manifest_bytes);
    let identity = overlay_identity(&parent_manifest_sha, &overlay_hashes);
    let mut m: Map<String, Value> = pm.clone();
    m.insert("format".into(), json!(FORMAT));
    m.insert("profile".into(), json!("gptq-q4-calibrated"));
    m.insert("weights_bytes".into(), json!(offset));
    m.insert("weights_sha256".into(), json!(hex(&hash.finalize())));
    m.insert("tensors".into(), Value::Array(records));
    m.insert(
        "provenance".into(),
        json!({
            "parent": {
                "manifest_sha256": parent_manifest_sha,
                "weights_sha256": pm.get("weights_sha256"),
                "source_revision": pm.get("source_revision"),
            },
            "calibration": {
                "dataset": {"name": "synthetic (bundlescope sample: seeded noise, no data)",
                            "samples": 0},
                "method": {"name": "error-feedback rounding along each row (GPTQ's compensation without the Hessian)",
                           "noise_steps": 0.6,
                           "static_parent_scales": "q4 tensors keep the parent's scales; 3-bit tensors get new q4 scales"},
                "tool": "bundlescope sample --format gptq-q4",
                "version": crate::TOOL_VERSION,
                "seed": o.seed,
            },
            "overlay": overlay,
            "copied": copied,
            "overlay_identity_sha256": identity,
        }),
    );
    fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&Value::Object(m))?,
    )?;
    Ok(OverlaySummary {
        dir: dir.to_path_buf(),
        overlay,
        copied: copied.len(),
        payload_bytes: offset,
    })
}

/// The demo overlay, written once beside the demo bundle (its parent) in
/// the user's cache folder, so the audit finds the parent as a sibling.
pub fn demo_overlay() -> Result<PathBuf> {
    let parent = super::demo_bundle()?;
    let dir = app_cache().join(format!("demo-{}-gptq-overlay", crate::TOOL_VERSION));
    if !dir.join("manifest.json").exists() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Written beside, then renamed: a half-written overlay is never
        // opened (and its manifest, written last, is not the parent's).
        let tmp = dir.with_extension(format!("tmp{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        write_overlay(
            &parent,
            &tmp,
            &OverlayOptions {
                seed: 1,
                overlay: None,
            },
        )?;
        if fs::rename(&tmp, &dir).is_err() {
            let _ = fs::remove_dir_all(&tmp);
            if !dir.join("manifest.json").exists() {
                bail!("could not place the demo overlay at {}", dir.display());
            }
        }
    }
    Ok(dir)
}
