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

pub mod modules;

use std::collections::BTreeSet;
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
    super::checksums::apply(&dir, &mut files, &mut findings);
    let mut shards = Shards::default();
    shards.read(&files, &mut findings);
    Holders::new(&shards.tensors).report_twice(&files, &mut findings);
    let mut tensors = shards.tensors;
    modules::unannounced(&tensors, modules::NoBlock::LoneFile, &mut findings);
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
    let bytes = read_json_bytes(path, what, check, findings)?;
    let map = json_object(&bytes, what, check, findings)?;
    Some((bytes, map))
}

/// The bytes of a JSON file, when it can be read and holds no more values
/// than bundlescope parses.
fn read_json_bytes(
    path: &Path,
    what: &str,
    check: crate::finding::CheckId,
    findings: &mut Vec<Finding>,
) -> Option<Vec<u8>> {
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
    Some(bytes)
}

/// `bytes` as a JSON object, or a finding that says what they are instead.
fn json_object(
    bytes: &[u8],
    what: &str,
    check: crate::finding::CheckId,
    findings: &mut Vec<Finding>,
) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Some(m),
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
        read_json_bytes(&index_path, INDEX, c::MLXLM_INDEX, &mut findings)
            .and_then(|bytes| read_index(&bytes, &mut findings))
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
    let (weight_map, total_size) = index.unwrap_or_default();
    // Files beside the checkpoint that no loader reads as part of it (a
    // Mistral-style consolidated.safetensors, LoRA adapters): mlx-lm loads
    // model*.safetensors and Transformers follows the index, so with an
    // index or a model*.safetensors present, other names are said, not read.
    let loaded = |n: &str| n.starts_with("model");
    let on_disk = if weight_map.is_some() || on_disk.iter().any(|n| loaded(n)) {
        let (kept, aside): (Vec<String>, Vec<String>) = on_disk.into_iter().partition(|n| {
            loaded(n)
                || weight_map
                    .as_ref()
                    .is_some_and(|m| m.iter().any(|(_, shard)| shard == n))
        });
        for name in aside {
            findings.push(
                Finding::info(
                    c::MLXLM_SHARDS,
                    format!(
                        "{name} is in the folder but not part of the checkpoint: the index does not list it and its name is not model*.safetensors, so neither mlx-lm nor Transformers loads it; not audited"
                    ),
                )
                .field(name),
            );
        }
        kept
    } else {
        on_disk
    };

    // Shards: the index's, then any other file on disk (reported).
    let mut names: Vec<String> = Vec::new();
    if let Some(map) = &weight_map {
        let listed: BTreeSet<&String> = map.iter().map(|(_, shard)| shard).collect();
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
    super::checksums::apply(&dir, &mut files, &mut findings);
    let mut shards = Shards::default();
    shards.read(&files, &mut findings);
    let holders = Holders::new(&shards.tensors);
    holders.report_twice(&files, &mut findings);
    if let Some(map) = &weight_map {
        check_weight_map(map, &files, &shards.parsed, &holders, &mut findings);
    }
    drop(holders);
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
        None => {
            let missing = if config_path.exists() {
                modules::NoBlock::Config
            } else {
                modules::NoBlock::NoConfig
            };
            modules::unannounced(&tensors, missing, &mut findings);
            Vec::new()
        }
    };
    modules::dense(&mut tensors, &members);
    sort_by_name(&mut tensors);

    let mut extra = Vec::new();
    if let Some((_, m)) = &config {
        summary(m, quant.as_ref(), &mut extra);
    }
    if let Some(total) = total_size {
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
) -> Option<Vec<(String, String)>> {
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
    let mut out = Vec::with_capacity(map.len());
    for (name, shard) in map {
        match shard.as_str() {
            Some(s) => out.push((name.clone(), s.to_string())),
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
    Some(by_name(out))
}

/// The weight map sorted by tensor name; of entries with the same name
/// the last one counts (as it does for a JSON object read as a map).
fn by_name(mut entries: Vec<(String, String)>) -> Vec<(String, String)> {
    entries.sort_by(|a, b| a.0.cmp(&b.0)); // stable: equal names keep their order
    let mut out: Vec<(String, String)> = Vec::with_capacity(entries.len());
    for e in entries {
        match out.last_mut() {
            Some(last) if last.0 == e.0 => *last = e,
            _ => out.push(e),
        }
    }
    out
}

/// What the index gives: its weight map (sorted by name) and its
/// `metadata.total_size`.
type IndexParts = (Option<Vec<(String, String)>>, Option<Value>);

/// Reads the index. A well-formed one (an object whose `weight_map` is an
/// object of strings) is read straight into the sorted map, without a JSON
/// map of its own: a 20,000-tensor index is a 20,000-entry object, which as
/// a `Value` cost a tenth of opening the checkpoint. Any other index is read
/// as a `Value`, whose findings say what is wrong.
fn read_index(bytes: &[u8], findings: &mut Vec<Finding>) -> Option<IndexParts> {
    if let Ok(fast) = serde_json::from_slice::<WellFormedIndex>(bytes) {
        return Some((fast.weight_map.map(by_name), fast.total_size));
    }
    let m = json_object(bytes, INDEX, c::MLXLM_INDEX, findings)?;
    let total = m.get("metadata").and_then(|m| m.get("total_size")).cloned();
    Some((weight_map(&m, findings), total))
}

/// An index whose `weight_map` is an object of strings (once, and there),
/// with its `metadata.total_size`; anything else fails to parse.
struct WellFormedIndex {
    weight_map: Option<Vec<(String, String)>>,
    total_size: Option<Value>,
}

impl<'de> serde::Deserialize<'de> for WellFormedIndex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, IgnoredAny, MapAccess, Visitor};
        /// `weight_map`'s entries, in file order.
        struct Entries(Vec<(String, String)>);
        impl<'de> serde::Deserialize<'de> for Entries {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Entries;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object of tensor name to shard file")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Entries, A::Error> {
                        let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0).min(1 << 16));
                        while let Some(entry) = m.next_entry::<String, String>()? {
                            out.push(entry);
                        }
                        Ok(Entries(out))
                    }
                }
                d.deserialize_map(V)
            }
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WellFormedIndex;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an index object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<WellFormedIndex, A::Error> {
                let mut out = WellFormedIndex {
                    weight_map: None,
                    total_size: None,
                };
                while let Some(key) = m.next_key::<String>()? {
                    match key.as_str() {
                        "weight_map" if out.weight_map.is_some() => {
                            return Err(A::Error::custom("weight_map twice"));
                        }
                        "weight_map" => out.weight_map = Some(m.next_value::<Entries>()?.0),
                        "metadata" => {
                            let v: Value = m.next_value()?;
                            out.total_size = v.get("total_size").cloned();
                        }
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                // Without one, the `Value` reading says it is missing.
                if out.weight_map.is_none() {
                    return Err(A::Error::missing_field("weight_map"));
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Tensor `t`'s `dtype` and `shape` as its shard's header gives them, for
/// the detail panel (which shows the byte range from the row itself):
/// rebuilt from the row, whose shape is the logical one for a packed
/// weight (the header's last dimension is in 32-bit words, `in · bits /
/// 32`, which the module's check made exact).
pub fn header_entry(t: &TensorInfo) -> Value {
    let mut shape = t.shape.clone().unwrap_or_default();
    if let (Precision::Mlx(_, bits), Some(last)) = (&t.precision, shape.last_mut()) {
        *last = *last * u64::from(*bits) / 32;
    }
    serde_json::json!({ "dtype": t.source_dtype, "shape": shape })
}

/// The shards' parsed headers.
#[derive(Default)]
struct Shards {
    tensors: Vec<TensorInfo>,
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
                self.tensors
                    .extend(h.tensors.into_iter().map(|t| info(t, i)));
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

/// A row of the index. It keeps no copy of its header entry (a JSON map
/// per tensor was a fifth of opening a 20,000-tensor checkpoint):
/// [`header_entry`] rebuilds its dtype and shape from the row.
fn info(t: StTensor, file: usize) -> TensorInfo {
    let bytes = t.end - t.begin;
    TensorInfo {
        quant: None,
        record: Value::Null,
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

/// Which shards hold each tensor name, borrowed from the index rows: one
/// file for almost every name, the whole list only for names held twice.
struct Holders<'a> {
    /// The first file, and whether the weight map names it (set by
    /// [`Holders::mapped`]).
    first: foldhash::HashMap<&'a str, (usize, std::cell::Cell<bool>)>,
    twice: foldhash::HashMap<&'a str, Vec<usize>>,
}

impl<'a> Holders<'a> {
    fn new(tensors: &'a [TensorInfo]) -> Self {
        use std::collections::hash_map::Entry;
        let mut first =
            foldhash::HashMap::with_capacity_and_hasher(tensors.len(), Default::default());
        let mut twice: foldhash::HashMap<&str, Vec<usize>> = Default::default();
        for t in tensors {
            match first.entry(t.name.as_str()) {
                Entry::Vacant(e) => {
                    e.insert((t.file, std::cell::Cell::new(false)));
                }
                Entry::Occupied(e) => twice
                    .entry(t.name.as_str())
                    .or_insert_with(|| vec![e.get().0])
                    .push(t.file),
            }
        }
        Self { first, twice }
    }

    /// The files holding `name`, in shard order.
    fn files(&self, name: &str) -> &[usize] {
        match self.twice.get(name) {
            Some(all) => all,
            None => self
                .first
                .get(name)
                .map(|(file, _)| std::slice::from_ref(file))
                .unwrap_or_default(),
        }
    }

    /// The files holding `name`, which the weight map names.
    fn mapped(&self, name: &str) -> &[usize] {
        if let Some((_, named)) = self.first.get(name) {
            named.set(true);
        }
        self.files(name)
    }

    /// A finding for each name stored in more than one shard.
    fn report_twice(&self, files: &[PayloadFile], findings: &mut Vec<Finding>) {
        let mut twice: Vec<(&&str, &Vec<usize>)> = self.twice.iter().collect();
        twice.sort();
        for (name, held) in twice {
            findings.push(
                Finding::error(
                    c::MLXLM_WEIGHT_MAP,
                    super::stored_in_shards(name, held.iter().map(|&k| files[k].name.as_str())),
                )
                .tensor(name.to_string()),
            );
        }
    }
}

/// `map` is sorted by name (see [`by_name`]).
fn check_weight_map(
    map: &[(String, String)],
    files: &[PayloadFile],
    parsed: &[bool],
    holders: &Holders<'_>,
    findings: &mut Vec<Finding>,
) {
    let err = |name: &str, msg: String| {
        Finding::error(c::MLXLM_WEIGHT_MAP, msg)
            .tensor(name.to_string())
            .field("weight_map")
    };
    let file_index: foldhash::HashMap<&str, usize> = files
        .iter()
        .enumerate()
        .rev() // the first of equal names wins
        .map(|(i, f)| (f.name.as_str(), i))
        .collect();
    for (name, shard) in map {
        let held = holders.mapped(name);
        // A shard that is missing or not a bare name is reported already.
        let Some(&i) = file_index.get(shard.as_str()) else {
            continue;
        };
        if !parsed.get(i).copied().unwrap_or(false) {
            continue; // its header is reported
        }
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
    let listed_shards: BTreeSet<&str> = map.iter().map(|(_, s)| s.as_str()).collect();
    let listed: Vec<bool> = files
        .iter()
        .map(|f| listed_shards.contains(f.name.as_str()))
        .collect();
    let mut names: Vec<(&str, usize)> = holders
        .first
        .iter()
        .filter(|(name, (_, named))| !named.get() && holders.files(name).iter().any(|&k| listed[k]))
        .map(|(name, (file, _))| (*name, *file))
        .collect();
    names.sort_unstable();
    for (name, file) in names {
        findings.push(err(
            name,
            format!(
                "{name} is in {} but not in the index's weight_map",
                files[file].name
            ),
        ));
    }
}

/// Sorts the rows in natural name order (stable), moving each record once.
fn sort_by_name(tensors: &mut Vec<TensorInfo>) {
    // The names sorted beside their row numbers (not read through the
    // rows, which are far apart in memory).
    let mut keyed: Vec<(&str, usize)> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    keyed.sort_by(|a, b| natural_cmp(a.0, b.0));
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The index as the `Value` reading gives it, which names every fault.
    fn read_as_value(bytes: &[u8]) -> (IndexParts, Vec<Finding>) {
        let mut f = Vec::new();
        let m = json_object(bytes, INDEX, c::MLXLM_INDEX, &mut f).unwrap();
        let total = m.get("metadata").and_then(|m| m.get("total_size")).cloned();
        ((weight_map(&m, &mut f), total), f)
    }

    #[test]
    fn a_well_formed_index_reads_the_same_both_ways() {
        let cases: [&[u8]; 3] = [
            br#"{"metadata": {"total_size": 123}, "weight_map": {"b.weight": "s2", "a.weight": "s1", "b.weight": "s3"}, "other": [1, {"x": 2}]}"#,
            br#"{"weight_map": {}}"#,
            br#"{"metadata": 5, "weight_map": {"x": "y"}}"#,
        ];
        for bytes in cases {
            let fast: WellFormedIndex = serde_json::from_slice(bytes).unwrap();
            let (slow, findings) = read_as_value(bytes);
            assert!(findings.is_empty(), "{findings:?}");
            assert_eq!((fast.weight_map.map(by_name), fast.total_size), slow);
        }
        // The last of a repeated name counts, as in a JSON map.
        let mut f = Vec::new();
        let (map, total) = read_index(cases[0], &mut f).unwrap();
        assert_eq!(
            map.unwrap(),
            [("a.weight", "s1"), ("b.weight", "s3")].map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert_eq!(total, Some(Value::from(123)));
    }

    #[test]
    fn any_other_index_is_read_as_a_value_with_its_findings() {
        let bad: [&[u8]; 5] = [
            br#"{"weight_map": {"a": 1, "b": "s"}}"#,
            br#"{"weight_map": ["s"]}"#,
            br#"{"metadata": {"total_size": 3}}"#,
            br#"{"weight_map": {}, "weight_map": {"a": "s"}}"#,
            br#"[1]"#,
        ];
        for bytes in bad {
            assert!(serde_json::from_slice::<WellFormedIndex>(bytes).is_err());
        }
        let mut f = Vec::new();
        let (map, _) = read_index(bad[0], &mut f).unwrap();
        assert_eq!(map.unwrap(), [("b".to_string(), "s".to_string())]);
        assert!(
            f[0].message.contains(r#"weight_map["a"] is the integer 1"#),
            "{f:?}"
        );
        let mut f = Vec::new();
        let (map, _) = read_index(bad[1], &mut f).unwrap();
        assert!(
            map.is_none() && f[0].message.contains("a list of 1 items"),
            "{f:?}"
        );
        let mut f = Vec::new();
        let (map, total) = read_index(bad[2], &mut f).unwrap();
        assert!(
            map.is_none() && f[0].message.contains("weight_map is missing"),
            "{f:?}"
        );
        assert_eq!(total, Some(Value::from(3)));
        let mut f = Vec::new();
        let (map, _) = read_index(bad[3], &mut f).unwrap();
        assert_eq!(map.unwrap(), [("a".to_string(), "s".to_string())]);
        let mut f = Vec::new();
        assert!(read_index(bad[4], &mut f).is_none());
        assert!(f[0].message.contains("expected a JSON object"), "{f:?}");
    }
}
