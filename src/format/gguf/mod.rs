//! GGUF files (llama.cpp): one file, or split parts
//! `NAME-00001-of-0000N.gguf`, each with its own header. The header is read
//! through a memory map by the strict parser in [`header`]; the tensor
//! data is hashed and scanned by the audit pass, never read whole here.

pub mod header;
pub mod types;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

pub use header::{Header, Kv, Value};
pub use types::GgmlType;

use super::payload::map_file;
use super::{
    Bundle, FormatKind, Layout, OpenError, PayloadFile, Precision, Provenance, TensorInfo,
    sha256_hex,
};
use crate::finding::Finding;
use crate::finding::checks as c;

/// The metadata of a GGUF bundle, for the Summary and the report.
#[derive(Debug, Clone, Serialize)]
pub struct Metadata {
    /// GGUF version of the (first) file.
    pub version: u32,
    /// `general.alignment` in effect.
    pub alignment: u64,
    /// Absolute offset of the first file's data section.
    pub data_start: u64,
    /// Key/value pairs of the first file, in file order.
    pub kvs: Vec<Kv>,
}

impl Metadata {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kvs.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
    }
}

/// Does `path` look like a GGUF bundle: a `.gguf` file, or a folder without
/// a manifest.json that holds one?
pub fn claims(path: &Path, meta: &fs::Metadata) -> bool {
    if meta.is_dir() {
        !path.join("manifest.json").exists() && !gguf_files(path).is_empty()
    } else {
        is_gguf_name(path)
    }
}

fn is_gguf_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

fn gguf_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_gguf_name(Path::new(n)))
        .collect();
    names.sort();
    names
}

/// `(prefix, part, count)` of a split part name `PREFIX-00001-of-00003.gguf`.
pub fn split_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, part) = rest.rsplit_once('-')?;
    let ok = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !ok(part) || !ok(count) {
        return None;
    }
    let (part, count) = (part.parse().ok()?, count.parse().ok()?);
    (part >= 1 && part <= count).then_some((prefix, part, count))
}

/// Opens a `.gguf` file, or the folder holding one (or one set of split parts).
pub fn open(path: &Path, meta: &fs::Metadata) -> Result<Bundle, OpenError> {
    let not = |reason: String| OpenError::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let (dir, first) = if meta.is_dir() {
        let names = gguf_files(path);
        let first = match names.as_slice() {
            [one] => one.clone(),
            many => {
                // One set of split parts is one model; anything else is ambiguous.
                let parts: Vec<_> = many.iter().filter_map(|n| split_name(n)).collect();
                let same = parts.len() == many.len()
                    && parts
                        .windows(2)
                        .all(|w| w[0].0 == w[1].0 && w[0].2 == w[1].2);
                if !same {
                    return Err(not(format!(
                        "the folder holds {} .gguf files that are not the parts of one split model ({}); name the file to open",
                        many.len(),
                        many.join(", ")
                    )));
                }
                many[0].clone()
            }
        };
        (path.to_path_buf(), first)
    } else {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| not("the file name is not UTF-8".into()))?
            .to_string();
        (dir, name)
    };
    let names = match split_name(&first) {
        Some((prefix, _, count)) => (1..=count)
            .map(|k| format!("{prefix}-{k:05}-of-{count:05}.gguf"))
            .collect(),
        None => vec![first],
    };
    Ok(build(dir, names))
}

fn build(dir: PathBuf, names: Vec<String>) -> Bundle {
    let mut findings = Vec::new();
    let mut files = Vec::new();
    let mut tensors = Vec::new();
    let mut metadata = None;
    let mut header_bytes = Vec::new();
    for name in &names {
        files.push(PayloadFile {
            name: name.clone(),
            path: dir.join(name),
            expected_bytes: None,
            expected_sha256: None,
        });
    }
    super::checksums::apply(&dir, &mut files, &mut findings);
    for (i, name) in names.iter().enumerate() {
        let path = dir.join(name);
        // A missing or unreadable part is reported by the pass (payload.file).
        let Ok(map) = map_file(name, &path) else {
            continue;
        };
        let h = header::parse(&map, name, &mut findings);
        let data_start = h.data_start;
        let file_len = map.len() as u64;
        if i == 0 {
            let end = usize::try_from(data_start.min(file_len)).unwrap_or(map.len());
            header_bytes = map.get(..end).unwrap_or_default().to_vec();
            metadata = Some(Metadata {
                version: h.version,
                alignment: h.alignment,
                data_start,
                kvs: h.kvs.clone(),
            });
        }
        if h.complete {
            tensor_infos(&h, name, i, file_len, &mut tensors, &mut findings);
        }
    }
    unique_names(&tensors, &mut findings);
    let version = metadata.as_ref().map_or(0, |m| m.version);
    let provenance = Provenance {
        format: Some(format!("GGUF v{version}")),
        manifest_sha256: sha256_hex(&header_bytes),
        gguf: metadata.map(Arc::new),
        ..Provenance::default()
    };
    let manifest_path = dir.join(&names[0]);
    Bundle {
        dir,
        manifest_path,
        manifest_bytes: header_bytes,
        format: FormatKind::Gguf,
        tensors,
        files,
        provenance,
        findings,
    }
}

/// The tensor index of one file, with the per-tensor and layout checks.
fn tensor_infos(
    h: &Header,
    file_name: &str,
    file: usize,
    file_len: u64,
    out: &mut Vec<TensorInfo>,
    findings: &mut Vec<Finding>,
) {
    let first = out.len();
    for t in &h.tensors {
        let name = t.name.clone();
        let err = |check, msg: String| {
            Finding::error(check, format!("{file_name}: {name}: {msg}"))
                .tensor(name.clone())
                .field(file_name.to_string())
                .offset(t.info_offset)
        };
        let ty = GgmlType::from_u32(t.type_number);
        let mut ok = true;
        if ty.is_none() {
            findings.push(err(
                c::GGUF_TENSOR_TYPE,
                format!(
                    "ggml type {} is not a type ggml knows today (retired numbers 4, 5, 31–33 and 36–38 included)",
                    t.type_number
                ),
            ));
            ok = false;
        }
        let count =
            t.ne.iter()
                .try_fold(1u64, |a, &d| if d == 0 { None } else { a.checked_mul(d) });
        let bytes = match (ty, count) {
            (_, None) => {
                findings.push(err(
                    c::GGUF_DIMS,
                    format!(
                        "ne {:?}: every dimension must be > 0 and their product fit in 64 bits",
                        t.ne
                    ),
                ));
                ok = false;
                None
            }
            (Some(ty), Some(count)) => {
                let ne0 = t.ne[0];
                if !ne0.is_multiple_of(ty.block_size()) {
                    findings.push(err(
                        c::GGUF_DIMS,
                        format!(
                            "ne[0] = {ne0} is not a multiple of {}'s block size {}",
                            ty.name(),
                            ty.block_size()
                        ),
                    ));
                    ok = false;
                    None
                } else {
                    let b = (count / ty.block_size()).checked_mul(ty.type_size());
                    if b.is_none() {
                        findings.push(err(
                            c::GGUF_DIMS,
                            format!("ne {:?}: the byte size overflows 64 bits", t.ne),
                        ));
                        ok = false;
                    }
                    b
                }
            }
            (None, Some(_)) => None,
        };
        let abs = h.data_start.checked_add(t.offset);
        if !t.offset.is_multiple_of(h.alignment) {
            findings.push(err(
                c::GGUF_OFFSET_ALIGNED,
                format!(
                    "offset {} is not a multiple of the alignment {}",
                    t.offset, h.alignment
                ),
            ));
        }
        if let Some(b) = bytes {
            match abs.and_then(|a| a.checked_add(b)) {
                Some(end) if end <= file_len => {}
                _ => {
                    findings.push(err(
                        c::GGUF_OFFSET_RANGE,
                        format!(
                            "bytes {}..+{b} (data section at {}) do not lie inside the file of {file_len} bytes",
                            t.offset, h.data_start
                        ),
                    ));
                    ok = false;
                }
            }
        }
        // PyTorch order: ne reversed.
        let shape: Vec<u64> = t.ne.iter().rev().copied().collect();
        let cols = t.ne[0];
        let rows = count.map_or(0, |n| n / cols.max(1));
        let layout = match (ok, ty) {
            (true, Some(ty)) => Some(Layout::Gguf { ty, rows, cols }),
            _ => None,
        };
        let type_name = ty.map_or_else(|| format!("type {}", t.type_number), |t| t.name().into());
        out.push(TensorInfo {
            quant: None,
            record: serde_json::json!({
                "ne": t.ne, "type": type_name, "offset": t.offset,
                "info_offset": t.info_offset,
            }),
            name,
            precision: ty.map_or(Precision::Other(type_name.clone()), Precision::Gguf),
            shape: Some(shape),
            source_dtype: Some(type_name),
            encoding: None,
            offset: abs,
            bytes,
            resident_bytes: bytes,
            alias_of: None,
            file,
            layout,
        });
    }
    coverage(&out[first..], h, file_name, file_len, findings);
}

fn unique_names(tensors: &[TensorInfo], findings: &mut Vec<Finding>) {
    let mut seen = std::collections::HashSet::new();
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            findings.push(
                Finding::error(
                    c::GGUF_NAME,
                    format!("tensor name {:?} appears more than once", t.name),
                )
                .tensor(t.name.clone())
                .maybe_offset(t.record["info_offset"].as_u64()),
            );
        }
    }
}

/// Overlaps between tensors, and data-section bytes no tensor covers
/// beyond the alignment padding that follows each tensor.
fn coverage(
    tensors: &[TensorInfo],
    h: &Header,
    file_name: &str,
    file_len: u64,
    findings: &mut Vec<Finding>,
) {
    let mut spans: Vec<(u64, u64, &str)> = Vec::new();
    for t in tensors {
        match t.range() {
            Some((a, b)) if b <= file_len => spans.push((a, b, &t.name)),
            // A tensor of unknown size or outside the file: coverage
            // cannot be told, and that tensor has its finding already.
            _ => return,
        }
    }
    spans.sort();
    let align = h.alignment;
    let mut covered_to = h.data_start;
    let mut gaps: Vec<(u64, u64)> = Vec::new();
    let mut prev: Option<(u64, &str)> = None;
    for &(a, b, name) in &spans {
        if let Some((end, other)) = prev
            && a < end
        {
            findings.push(
                Finding::error(
                    c::GGUF_OVERLAP,
                    format!(
                        "{file_name}: {name} (bytes {a}..{b}) overlaps {other}, which ends at byte {end}"
                    ),
                )
                .tensor(name)
                .field(file_name.to_string())
                .offset(a),
            );
        }
        if a > covered_to {
            gaps.push((covered_to, a));
        }
        let padded = b.div_ceil(align).saturating_mul(align);
        covered_to = covered_to.max(padded);
        prev = Some((prev.map_or(b, |(e, _)| e.max(b)), name));
    }
    if file_len > covered_to && !spans.is_empty() {
        gaps.push((covered_to, file_len));
    }
    if let Some(&(a, _)) = gaps.first() {
        let total: u64 = gaps.iter().map(|(a, b)| b - a).sum();
        findings.push(
            Finding::warning(
                c::GGUF_UNCOVERED,
                format!(
                    "{file_name}: {total} bytes of the data section in {} run(s) belong to no tensor (beyond alignment padding); the first run is bytes {a}..{}",
                    gaps.len(),
                    gaps[0].1
                ),
            )
            .field(file_name.to_string())
            .offset(a),
        );
    }
}

#[cfg(test)]
mod tests;
