//! MLX-LM quantized checkpoints (what `mlx_lm.convert -q` writes) and plain
//! safetensors checkpoints (a Hugging Face folder of shards, or one file).
//!
//! A folder is an MLX-LM checkpoint when its `config.json` has a
//! `quantization` block (or an MLX-style `quantization_config`, one without
//! `quant_method`); otherwise a folder of `.safetensors` files is a plain
//! checkpoint. Shards are `model.safetensors.index.json`'s `weight_map`
//! values plus every `.safetensors` file in the folder (mlx-lm loads every
//! `model*.safetensors`, listed or not). Only the shards' headers are read
//! here, through a read-only map; the data is hashed and scanned by the
//! audit pass. The per-module rules are in [`modules`], the hash lists in
//! [`checksums`].

pub mod checksums;
pub mod modules;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::payload::map_file;
use super::safetensors::{Header, StTensor, parse_header};
use super::{
    Bundle, FormatKind, OpenError, PayloadFile, Precision, Provenance, TensorInfo, is_bare_name,
    json::kind, natural_cmp, read_capped, sha256_hex,
};
use crate::finding::Finding;
use crate::finding::checks as c;

/// The index file mlx-lm and Hugging Face write beside the shards.
pub const INDEX: &str = "model.safetensors.index.json";
/// Largest config.json or index bundlescope reads (a 20,000-tensor index is
/// about 2 MiB).
const MAX_JSON_BYTES: u64 = 64 << 20;
/// Most `.safetensors` files one folder may hold.
const MAX_SHARDS: usize = 10_000;
/// Most tensors indexed over all the shards of one checkpoint. Every tensor
/// costs the audit about 1.5 KiB at its peak (its index row, the report's
/// row, the header entry it was parsed from), so this keeps a checkpoint of
/// thousands of shards, each under the per-file limit, within the 256 MiB
/// bound; shards past it are a `shard.header` error and are not indexed.
pub const MAX_TOTAL_TENSORS: usize = 100_000;
/// Up to this many tensors each keeps its header entry as its record (the
/// detail panel shows it); past it the records are left empty, as they
/// repeat the dtype and shape the row already has and would cost 400 bytes
/// a tensor.
pub const RECORDS_KEPT: usize = 1 << 15;

/// Can `path` (a folder without manifest.json, or a file) be opened here?
pub fn recognises(path: &Path) -> bool {
    if path.is_dir() {
        path.join("config.json").is_file()
            || path.join(INDEX).is_file()
            || list_safetensors(path).is_ok_and(|l| !l.is_empty())
    } else {
        is_safetensors_name(path)
            || path
                .file_name()
                .is_some_and(|n| n == "config.json" || n == INDEX)
    }
}

fn is_safetensors_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// `.safetensors` files directly in `dir`, in natural order.
fn list_safetensors(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".safetensors") && !name.starts_with('.') {
            out.push(name.to_string());
            if out.len() > MAX_SHARDS {
                break;
            }
        }
    }
    out.sort_by(|a, b| natural_cmp(a, b));
    Ok(out)
}

/// Opens an MLX-LM or plain safetensors checkpoint: a folder, its
/// `config.json` or index, or a single `.safetensors` file.
pub fn open(path: &Path) -> Result<Bundle, OpenError> {
    let io = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        return open_dir(path.to_path_buf());
    }
    if is_safetensors_name(path) {
        return Ok(open_file(path));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    fs::metadata(&dir).map_err(io)?;
    open_dir(dir)
}

/// A single `.safetensors` file: a plain checkpoint of one shard, whose
/// "manifest" is the file itself (its header is what describes it).
fn open_file(path: &Path) -> Bundle {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut findings = Vec::new();
    let mut files = vec![PayloadFile {
        name: name.clone(),
        path: path.to_path_buf(),
        expected_bytes: None,
        expected_sha256: None,
    }];
    checksums::apply(&dir, &mut files, &mut findings);
    let mut shards = Shards::default();
    shards.read(&files, &mut findings);
    let mut tensors = shards.tensors;
    modules::dense(&mut tensors, &[]);
    sort_by_name(&mut tensors);
    let mut extra = vec![("file".to_string(), name)];
    extra.extend(shards.metadata);
    Bundle {
        dir,
        manifest_path: path.to_path_buf(),
        manifest_bytes: Vec::new(),
        format: FormatKind::Safetensors,
        tensors,
        files,
        provenance: Provenance {
            format: Some("safetensors".into()),
            extra,
            ..Provenance::default()
        },
        findings,
    }
}

fn read_json(
    path: &Path,
    what: &str,
    check: crate::finding::CheckId,
    findings: &mut Vec<Finding>,
) -> Option<(Vec<u8>, Map<String, Value>)> {
    let bytes = match read_capped(path, MAX_JSON_BYTES) {
        Ok(b) => b,
        Err(e) => {
            findings.push(
                Finding::error(
                    check,
                    format!("{what} cannot be read: {}", super::error_chain(&e)),
                )
                .field(what),
            );
            return None;
        }
    };
    let values = super::json::count_values(&bytes);
    if values > super::json::MAX_VALUES {
        findings.push(
            Finding::error(
                check,
                format!(
                    "{what} holds about {values} JSON values, over the limit of {}",
                    super::json::MAX_VALUES
                ),
            )
            .field(what),
        );
        return None;
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Some((bytes, m)),
        Ok(other) => {
            findings.push(
                Finding::error(
                    check,
                    format!("{what} holds {}, expected a JSON object", kind(&other)),
                )
                .field(what),
            );
            None
        }
        Err(e) => {
            findings.push(
                Finding::error(check, format!("{what} is not valid JSON: {e}"))
                    .field(what)
                    .offset(0),
            );
            None
        }
    }
}

/// The MLX quantization block of a config, if it has one: `quantization`,
/// else a `quantization_config` that is not another tool's (no `quant_method`).
pub fn quant_block(config: &Map<String, Value>) -> Option<&Value> {
    config.get("quantization").or_else(|| {
        config
            .get("quantization_config")
            .filter(|q| q.get("quant_method").is_none())
    })
}

fn open_dir(dir: PathBuf) -> Result<Bundle, OpenError> {
    let mut findings = Vec::new();
    let config_path = dir.join("config.json");
    let index_path = dir.join(INDEX);
    let config = if config_path.exists() {
        read_json(&config_path, "config.json", c::MLXLM_CONFIG, &mut findings)
    } else {
        None
    };
    let on_disk = list_safetensors(&dir).map_err(|source| OpenError::Io {
        path: dir.clone(),
        source,
    })?;
    let index = if index_path.exists() {
        read_json(&index_path, INDEX, c::MLXLM_INDEX, &mut findings).map(|(_, m)| m)
    } else {
        None
    };
    if on_disk.is_empty() && !index_path.exists() {
        return Err(OpenError::NotABundle {
            path: dir,
            reason: "the folder has no manifest.json, no model.safetensors.index.json and no .safetensors file".into(),
        });
    }
    if on_disk.len() > MAX_SHARDS {
        return Err(OpenError::NotABundle {
            path: dir,
            reason: format!("the folder holds more than {MAX_SHARDS} .safetensors files"),
        });
    }
    let weight_map = index.as_ref().and_then(|m| weight_map(m, &mut findings));

    // Shards: the index's, then any other file on disk (reported).
    let mut names: Vec<String> = Vec::new();
    if let Some(map) = &weight_map {
        let listed: BTreeSet<&String> = map.values().collect();
        let mut listed: Vec<&String> = listed.into_iter().collect();
        listed.sort_by(|a, b| natural_cmp(a, b));
        for name in listed {
            if !is_bare_name(name) {
                findings.push(
                    Finding::error(
                        c::SHARD_NAME,
                        format!(
                            "the index names shard {name:?}, which is not a bare file name inside the folder (no '/', no '..', not absolute); it is not read"
                        ),
                    )
                    .field(INDEX),
                );
            } else if !on_disk.contains(name) {
                findings.push(
                    Finding::error(
                        c::MLXLM_SHARDS,
                        format!("the index names shard {name}, which is not in the folder"),
                    )
                    .field(name.clone()),
                );
            } else {
                names.push(name.clone());
            }
        }
        for name in &on_disk {
            if !names.contains(name) {
                findings.push(
                    Finding::error(
                        c::MLXLM_SHARDS,
                        format!(
                            "{name} is in the folder but the index names none of its tensors (mlx-lm loads every model*.safetensors, listed or not)"
                        ),
                    )
                    .field(name.clone()),
                );
                names.push(name.clone());
            }
        }
    } else {
        names = on_disk;
    }
    let mut files: Vec<PayloadFile> = names
        .iter()
        .map(|n| PayloadFile {
            name: n.clone(),
            path: dir.join(n),
            expected_bytes: None,
            expected_sha256: None,
        })
        .collect();
    checksums::apply(&dir, &mut files, &mut findings);
    let mut shards = Shards::default();
    shards.read(&files, &mut findings);
    if let Some(map) = &weight_map {
        check_weight_map(map, &files, &shards, &mut findings);
    }
    let mut tensors = std::mem::take(&mut shards.tensors);

    let quant = config.as_ref().and_then(|(_, m)| quant_block(m).cloned());
    let format = if quant.is_some() {
        FormatKind::MlxLm
    } else {
        FormatKind::Safetensors
    };
    let members = match &quant {
        Some(q) => {
            let block = modules::parse_block(q, &mut findings);
            modules::quantized(&mut tensors, block.as_ref(), &mut findings)
        }
        None => Vec::new(),
    };
    modules::dense(&mut tensors, &members);
    sort_by_name(&mut tensors);

    let mut extra = Vec::new();
    if let Some((_, m)) = &config {
        summary(m, quant.as_ref(), &mut extra);
    }
    if let Some(total) = index
        .as_ref()
        .and_then(|m| m.get("metadata"))
        .and_then(|m| m.get("total_size"))
    {
        extra.push(("index total_size".into(), total.to_string()));
    }
    extra.extend(shards.metadata);
    let (manifest_path, manifest_bytes) = match config {
        Some((bytes, _)) => (config_path, bytes),
        None if index_path.exists() => (
            index_path.clone(),
            read_capped(&index_path, MAX_JSON_BYTES).unwrap_or_default(),
        ),
        // No JSON at all: the first shard stands for the checkpoint, and
        // the audit's change check follows it as a payload file.
        None => (
            files
                .first()
                .map_or_else(|| dir.clone(), |f| f.path.clone()),
            Vec::new(),
        ),
    };
    let manifest_sha256 = if manifest_bytes.is_empty() {
        String::new()
    } else {
        sha256_hex(&manifest_bytes)
    };
    Ok(Bundle {
        dir,
        manifest_path,
        manifest_bytes,
        format,
        tensors,
        files,
        provenance: Provenance {
            format: Some(format.name().to_string()),
            manifest_sha256,
            extra,
            ..Provenance::default()
        },
        findings,
    })
}

/// The config facts a person looks for first.
fn summary(config: &Map<String, Value>, quant: Option<&Value>, extra: &mut Vec<(String, String)>) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(a) = config.get("architectures") {
        let list = a
            .as_array()
            .map(|l| l.iter().map(text).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(|| text(a));
        extra.push(("architecture".into(), list));
    }
    for key in [
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "num_local_experts",
        "num_experts",
        "torch_dtype",
    ] {
        if let Some(v) = config.get(key) {
            extra.push((key.into(), text(v)));
        }
    }
    if let Some(q) = quant {
        if let Some(o) = q.as_object() {
            let global: Map<String, Value> = o
                .iter()
                .filter(|(_, v)| !v.is_object() && !v.is_boolean())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            extra.push(("quantization".into(), Value::Object(global).to_string()));
            let overrides = o.values().filter(|v| v.is_object()).count();
            if overrides > 0 {
                extra.push(("per-module overrides".into(), overrides.to_string()));
            }
        } else {
            extra.push(("quantization".into(), q.to_string()));
        }
    }
}

/// The index's map, or `None` (and a finding) when it has none: then the
/// shards on disk are read as if there were no index.
fn weight_map(
    index: &Map<String, Value>,
    findings: &mut Vec<Finding>,
) -> Option<BTreeMap<String, String>> {
    let Some(map) = index.get("weight_map").and_then(Value::as_object) else {
        findings.push(
            Finding::error(
                c::MLXLM_INDEX,
                format!(
                    "{INDEX}'s weight_map is {}, expected an object of tensor name to shard file",
                    index.get("weight_map").map_or("missing".into(), kind)
                ),
            )
            .field("weight_map"),
        );
        return None;
    };
    let mut out = BTreeMap::new();
    for (name, shard) in map {
        match shard.as_str() {
            Some(s) => {
                out.insert(name.clone(), s.to_string());
            }
            None => findings.push(
                Finding::error(
                    c::MLXLM_INDEX,
                    format!(
                        "weight_map[{name:?}] is {}, expected a shard file name",
                        kind(shard)
                    ),
                )
                .tensor(name.clone())
                .field("weight_map"),
            ),
        }
    }
    Some(out)
}

/// The shards' parsed headers.
#[derive(Default)]
struct Shards {
    tensors: Vec<TensorInfo>,
    /// tensor name -> files that hold it
    holders: HashMap<String, Vec<usize>>,
    parsed: Vec<bool>,
    /// `__metadata__` entries, once per distinct value.
    metadata: Vec<(String, String)>,
    /// Set once a shard would take the count past [`MAX_TOTAL_TENSORS`]:
    /// it and every shard after it are left unindexed.
    over_limit: bool,
}

impl Shards {
    fn read(&mut self, files: &[PayloadFile], findings: &mut Vec<Finding>) {
        // Type-checked before it is opened (a FIFO cannot block); only
        // the header's pages of the map are touched. The shards are parsed
        // side by side, a few per thread, and merged in order; a batch at a
        // time, so the tensor limit stops the reading before headers past
        // it are held.
        let parse = |f: &PayloadFile| {
            map_file(&f.name, &f.path)
                .ok()
                .map(|map| parse_header(&f.name, &map))
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(files.len())
            .max(1);
        let batch = threads * 2;
        for (b, chunk) in files.chunks(batch).enumerate() {
            if self.over_limit {
                self.parsed.extend(std::iter::repeat_n(false, chunk.len()));
                continue;
            }
            let headers: Vec<_> = if threads > 1 && chunk.len() > 1 {
                let per = chunk.len().div_ceil(threads);
                std::thread::scope(|s| {
                    let handles: Vec<_> = chunk
                        .chunks(per)
                        .map(|part| {
                            let handle =
                                s.spawn(move || part.iter().map(parse).collect::<Vec<_>>());
                            (part.len(), handle)
                        })
                        .collect();
                    // A thread that failed leaves its shards unread (never
                    // shifts the others): the pass reports them.
                    handles
                        .into_iter()
                        .flat_map(|(n, h)| {
                            h.join().unwrap_or_else(|_| (0..n).map(|_| None).collect())
                        })
                        .collect()
                })
            } else {
                chunk.iter().map(parse).collect()
            };
            for (j, header) in headers.into_iter().enumerate() {
                self.merge(b * batch + j, header, files, findings);
            }
        }
        if self.tensors.len() > RECORDS_KEPT {
            for t in &mut self.tensors {
                t.record = Value::Object(Map::new());
            }
        }
        let mut twice: Vec<(&String, &Vec<usize>)> =
            self.holders.iter().filter(|(_, h)| h.len() > 1).collect();
        twice.sort();
        for (name, held) in twice {
            findings.push(
                Finding::error(
                    c::MLXLM_WEIGHT_MAP,
                    format!(
                        "{name} is stored in {} shards: {}",
                        held.len(),
                        held.iter()
                            .map(|&k| files[k].name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .tensor(name.clone()),
            );
        }
    }

    /// Adds shard `i`'s parsed header (or its findings) to the index.
    fn merge(
        &mut self,
        i: usize,
        header: Option<Result<Header, Vec<Finding>>>,
        files: &[PayloadFile],
        findings: &mut Vec<Finding>,
    ) {
        match header {
            _ if self.over_limit => self.parsed.push(false),
            Some(Ok(h)) if self.tensors.len() + h.tensors.len() > MAX_TOTAL_TENSORS => {
                findings.push(
                    Finding::error(
                        c::SHARD_HEADER,
                        format!(
                            "{} and the {} shards after it are not indexed: its {} tensors would make the checkpoint list more than {MAX_TOTAL_TENSORS} tensors in all ({} before it), the most bundlescope audits",
                            files[i].name,
                            files.len() - i - 1,
                            h.tensors.len(),
                            self.tensors.len()
                        ),
                    )
                    .field(files[i].name.clone()),
                );
                self.parsed.push(false);
                self.over_limit = true;
            }
            Some(Ok(h)) => {
                for (k, v) in h.metadata {
                    let key = format!("metadata {k}");
                    if !self.metadata.iter().any(|(a, b)| *a == key && *b == v) {
                        self.metadata.push((key, v));
                    }
                }
                for t in h.tensors {
                    self.holders.entry(t.name.clone()).or_default().push(i);
                    self.tensors.push(info(t, i));
                }
                self.parsed.push(true);
            }
            Some(Err(f)) => {
                findings.extend(f);
                self.parsed.push(false);
            }
            // Missing or unreadable: the pass reports payload.file.
            None => self.parsed.push(false),
        }
    }
}

fn info(t: StTensor, file: usize) -> TensorInfo {
    let bytes = t.end - t.begin;
    // Room for the module's `quantization` note, so adding it does not
    // grow the map.
    let mut record = Map::with_capacity(4);
    record.insert("dtype".into(), Value::String(t.dtype.clone()));
    record.insert(
        "shape".into(),
        Value::Array(t.shape.iter().map(|&d| Value::from(d)).collect()),
    );
    record.insert(
        "data_offsets".into(),
        Value::Array(vec![Value::from(t.begin), Value::from(t.end)]),
    );
    TensorInfo {
        record: Value::Object(record),
        name: t.name,
        precision: Precision::Original,
        shape: Some(t.shape),
        source_dtype: Some(t.dtype),
        encoding: None,
        offset: Some(t.begin),
        bytes: Some(bytes),
        resident_bytes: Some(bytes),
        alias_of: None,
        file,
        layout: None,
    }
}

fn check_weight_map(
    map: &BTreeMap<String, String>,
    files: &[PayloadFile],
    shards: &Shards,
    findings: &mut Vec<Finding>,
) {
    let err = |name: &str, msg: String| {
        Finding::error(c::MLXLM_WEIGHT_MAP, msg)
            .tensor(name.to_string())
            .field("weight_map")
    };
    for (name, shard) in map {
        // A shard that is missing or not a bare name is reported already.
        let Some(i) = files.iter().position(|f| &f.name == shard) else {
            continue;
        };
        if !shards.parsed.get(i).copied().unwrap_or(false) {
            continue; // its header is reported
        }
        let held = shards
            .holders
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !held.contains(&i) {
            let actual: Vec<&str> = held.iter().map(|&k| files[k].name.as_str()).collect();
            findings.push(err(
                name,
                if actual.is_empty() {
                    format!("weight_map sends {name} to {shard}, but no shard holds it")
                } else {
                    format!(
                        "weight_map sends {name} to {shard}, but it is in {}",
                        actual.join(", ")
                    )
                },
            ));
        }
    }
    // Tensors of a shard the index does not name at all are that shard's
    // finding (mlxlm.shards), not one finding per tensor.
    let listed: BTreeSet<&str> = map.values().map(String::as_str).collect();
    let mut names: Vec<&String> = shards
        .holders
        .iter()
        .filter(|(name, held)| {
            held.iter()
                .any(|&k| listed.contains(files[k].name.as_str()))
                && !map.contains_key(*name)
        })
        .map(|(name, _)| name)
        .collect();
    names.sort();
    for name in names {
        let file = shards.holders[name]
            .first()
            .map_or("?", |&k| files[k].name.as_str());
        findings.push(err(
            name,
            format!("{name} is in {file} but not in the index's weight_map"),
        ));
    }
}

/// Sorts the rows in natural name order (stable), moving each record once.
fn sort_by_name(tensors: &mut Vec<TensorInfo>) {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| natural_cmp(&tensors[a].name, &tensors[b].name));
    // The permutation applied in place, a cycle at a time (row k takes
    // the row at order[k]): no second copy of 10^5 rows at the peak.
    let mut placed = vec![false; order.len()];
    for start in 0..order.len() {
        let mut k = start;
        while !placed[k] {
            placed[k] = true;
            let from = order[k];
            if from == start {
                break;
            }
            tensors.swap(k, from);
            k = from;
        }
    }
    tensors.shrink_to_fit();
}
