//! The audio8 mixed bundle (`audio8-mixed-bundle-v1`, `-v2`): every rule of
//! the reference loader as its own check, reporting all findings instead of
//! stopping at the first.

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::{Map, Value, json};

mod records;

use super::json::{kind, uint};
use super::{
    Bundle, FormatKind, Layout, PayloadFile, Precision, Provenance, TensorInfo, is_bare_name,
    sha256_hex,
};
use crate::finding::checks as c;
use crate::finding::{CheckId, Finding};
use records::{aliases, dense, packed};

/// Most tensor records a bundle may list.
pub const MAX_TENSORS: usize = 2000;
/// Largest dense record.
pub const MAX_DENSE_BYTES: u64 = 64 * 1024 * 1024;
/// Bounds on packed matrices.
pub const MAX_ROWS: u64 = 262_144;
/// Bounds on packed matrices.
pub const MAX_COLS: u64 = 32_768;
/// Quantisation group width.
pub const GROUP: u64 = 64;
/// The tied embedding and head names.
pub const EMBED: &str = "language_model.model.embed_tokens.weight";
/// The tied embedding and head names.
pub const LM_HEAD: &str = "language_model.lm_head.weight";

const REQUIRED: &[&str] = &[
    "format",
    "group_size",
    "tie_word_embeddings",
    "weights_file",
    "weights_bytes",
    "weights_sha256",
    "tensors",
    "aliases",
    "source_revision",
    "profile",
];

/// The exact grid object a `q3_full8` record must carry.
pub fn full8_grid() -> Value {
    json!({"bits": 3, "zero_point": 4, "max_code": 7, "padding_code": 4,
           "signed_min": -4, "signed_max": 3, "inference_permutation_required": false})
}

/// Builds the bundle and every finding the manifest alone allows.
pub fn parse(
    dir: PathBuf,
    manifest_path: PathBuf,
    manifest_bytes: Vec<u8>,
    m: &Map<String, Value>,
    format: FormatKind,
) -> Bundle {
    let mut f = Vec::new();
    for key in REQUIRED {
        if !m.contains_key(*key) {
            f.push(
                Finding::error(
                    c::MANIFEST_FIELD,
                    format!("required key '{key}' is missing"),
                )
                .field(*key),
            );
        }
    }
    if let Some(v) = m.get("group_size")
        && uint(v) != Ok(GROUP)
    {
        f.push(
            Finding::error(
                c::MANIFEST_GROUP_SIZE,
                format!("group_size must be 64, found {}", kind(v)),
            )
            .field("group_size"),
        );
    }
    if let Some(v) = m.get("tie_word_embeddings")
        && v != &Value::Bool(true)
    {
        f.push(
            Finding::error(
                c::MANIFEST_TIED,
                format!("tie_word_embeddings must be true, found {}", kind(v)),
            )
            .field("tie_word_embeddings"),
        );
    }
    let weights_bytes = m.get("weights_bytes").and_then(|v| match uint(v) {
        Ok(n) => Some(n),
        Err(found) => {
            f.push(
                Finding::error(
                    c::MANIFEST_FIELD,
                    format!("weights_bytes must be a non-negative integer, found {found}"),
                )
                .field("weights_bytes"),
            );
            None
        }
    });
    let expected_sha = m.get("weights_sha256").and_then(|v| match v.as_str() {
        Some(s) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            if s.bytes().any(|b| b.is_ascii_uppercase()) {
                f.push(
                    Finding::error(
                        c::MANIFEST_FIELD,
                        "weights_sha256 must be lower-case hex (the loader compares it to a lower-case digest)",
                    )
                    .field("weights_sha256"),
                );
            }
            Some(s.to_string())
        }
        _ => {
            f.push(
                Finding::error(
                    c::MANIFEST_FIELD,
                    format!(
                        "weights_sha256 must be 64 hex digits, found {}",
                        kind(v)
                    ),
                )
                .field("weights_sha256"),
            );
            None
        }
    });
    let mut files = Vec::new();
    match m.get("weights_file") {
        Some(Value::String(name)) if is_bare_name(name) => files.push(PayloadFile {
            name: name.clone(),
            path: dir.join(name),
            expected_bytes: weights_bytes,
            expected_sha256: expected_sha.clone(),
        }),
        Some(Value::String(name)) => f.push(
            Finding::error(
                c::MANIFEST_WEIGHTS_FILE,
                format!(
                    "weights_file {:?} is not a bare file name inside the bundle folder; refusing to read it",
                    super::json::truncate(name, 120)
                ),
            )
            .field("weights_file"),
        ),
        Some(v) => f.push(
            Finding::error(
                c::MANIFEST_FIELD,
                format!("weights_file must be a string, found {}", kind(v)),
            )
            .field("weights_file"),
        ),
        None => {}
    }

    let mut tensors = Vec::new();
    match m.get("tensors") {
        Some(Value::Array(records)) => {
            if records.is_empty() || records.len() > MAX_TENSORS {
                f.push(
                    Finding::error(
                        c::MANIFEST_TENSOR_COUNT,
                        format!(
                            "the manifest lists {} tensor records; between 1 and {MAX_TENSORS} are allowed{}",
                            records.len(),
                            if records.len() > MAX_TENSORS {
                                " (only the first 2000 are examined)"
                            } else {
                                ""
                            }
                        ),
                    )
                    .field("tensors"),
                );
            }
            let mut records_ctx = Records {
                format,
                weights_bytes,
                expected_offset: Some(0),
                last_end: None,
                names: HashSet::new(),
            };
            for (i, r) in records.iter().take(MAX_TENSORS).enumerate() {
                if let Some(t) = records_ctx.record(i, r, &mut f) {
                    tensors.push(t);
                }
            }
            if let (Some(end), Some(total)) = (records_ctx.last_end, weights_bytes)
                && end < total
            {
                f.push(
                    Finding::error(
                        c::PAYLOAD_UNREFERENCED,
                        format!(
                            "the last record ends at byte {end} but weights_bytes is {total}: {} bytes are not referenced by any record",
                            total - end
                        ),
                    )
                    .field("weights_bytes")
                    .offset(end),
                );
            }
            if records_ctx.last_end.is_none()
                && records.is_empty()
                && let Some(total) = weights_bytes
                && total > 0
            {
                f.push(
                    Finding::error(
                        c::PAYLOAD_UNREFERENCED,
                        format!("no record covers the payload's {total} bytes"),
                    )
                    .field("weights_bytes")
                    .offset(0),
                );
            }
        }
        Some(v) => f.push(
            Finding::error(
                c::MANIFEST_FIELD,
                format!("tensors must be a list of records, found {}", kind(v)),
            )
            .field("tensors"),
        ),
        None => {}
    }

    let aliases = aliases(m.get("aliases"), &tensors, &mut f);
    tensors.extend(aliases);

    let text = |key: &str| {
        m.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    let provenance = Provenance {
        format: text("format"),
        source_revision: text("source_revision"),
        profile: text("profile"),
        expected_config_sha256: m
            .get("external_assets_not_included")
            .and_then(|v| v.get("config.json"))
            .and_then(|v| v.get("sha256"))
            .and_then(Value::as_str)
            .map(str::to_string),
        manifest_sha256: sha256_hex(&manifest_bytes),
        ..Provenance::default()
    };
    Bundle {
        dir,
        manifest_path,
        manifest_bytes,
        format,
        tensors,
        files,
        provenance,
        findings: f,
    }
}

struct Records {
    format: FormatKind,
    weights_bytes: Option<u64>,
    expected_offset: Option<u64>,
    last_end: Option<u64>,
    names: HashSet<String>,
}

impl Records {
    fn record(&mut self, i: usize, r: &Value, f: &mut Vec<Finding>) -> Option<TensorInfo> {
        let Some(obj) = r.as_object() else {
            f.push(
                Finding::error(
                    c::RECORD_FIELD,
                    format!("tensor record {i} is {}, expected an object", kind(r)),
                )
                .field(format!("tensors[{i}]")),
            );
            self.expected_offset = None;
            return None;
        };
        let name = match obj.get("name") {
            Some(Value::String(s)) => s.clone(),
            other => {
                f.push(
                    Finding::error(
                        c::RECORD_FIELD,
                        format!(
                            "tensor record {i} has no string 'name' (found {})",
                            other.map_or("nothing".into(), kind)
                        ),
                    )
                    .field(format!("tensors[{i}].name")),
                );
                format!("tensors[{i}]")
            }
        };
        let err = |check: CheckId, field: &str, msg: String| {
            Finding::error(check, msg).tensor(&name).field(field)
        };
        if !self.names.insert(name.clone()) {
            f.push(err(
                c::RECORD_NAME,
                "name",
                format!("tensor name {name:?} appears more than once"),
            ));
        }
        let precision = match obj.get("precision") {
            Some(Value::String(s)) => Precision::parse(s),
            other => {
                f.push(err(
                    c::RECORD_FIELD,
                    "precision",
                    format!(
                        "precision must be a string, found {}",
                        other.map_or("nothing".into(), kind)
                    ),
                ));
                Precision::Other("?".into())
            }
        };
        let offset = match obj.get("offset").map(uint) {
            Some(Ok(o)) => Some(o),
            other => {
                let found = match other {
                    Some(Err(found)) => found,
                    _ => "nothing".into(),
                };
                f.push(err(
                    c::RECORD_FIELD,
                    "offset",
                    format!("offset must be a non-negative integer, found {found}"),
                ));
                None
            }
        };
        let bytes = match obj.get("bytes").map(uint) {
            Some(Ok(b)) if b > 0 => Some(b),
            other => {
                let found = match other {
                    Some(Ok(_)) => "0".into(),
                    Some(Err(found)) => found,
                    None => "nothing".into(),
                };
                f.push(err(
                    c::RECORD_BYTES,
                    "bytes",
                    format!("bytes must be an integer greater than 0, found {found}"),
                ));
                None
            }
        };
        if let (Some(expected), Some(off)) = (self.expected_offset, offset)
            && off != expected
        {
            f.push(
                err(
                    c::RECORD_CONTIGUOUS,
                    "offset",
                    if expected == 0 && self.last_end.is_none() {
                        format!("the first record must start at offset 0, found {off}")
                    } else if off < expected {
                        format!(
                            "starts at offset {off}, inside the previous record (which ends at {expected}): records overlap"
                        )
                    } else {
                        format!(
                            "starts at offset {off}, but the previous record ends at {expected}: {} bytes between them belong to no record",
                            off - expected
                        )
                    },
                )
                .offset(off),
            );
        }
        let end = match (offset, bytes) {
            (Some(o), Some(b)) => match o.checked_add(b) {
                Some(e) => Some(e),
                None => {
                    f.push(
                        err(
                            c::RECORD_WITHIN,
                            "bytes",
                            format!("offset {o} + bytes {b} overflows a 64-bit byte count"),
                        )
                        .offset(o),
                    );
                    None
                }
            },
            _ => None,
        };
        self.expected_offset = end;
        if end.is_some() {
            self.last_end = end;
        }
        let mut within = end.is_some();
        if let (Some(e), Some(total), Some(o)) = (end, self.weights_bytes, offset)
            && e > total
        {
            within = false;
            f.push(
                err(
                    c::RECORD_WITHIN,
                    "bytes",
                    format!(
                        "the record spans bytes {o}..{e} but the payload is {total} bytes (weights_bytes)"
                    ),
                )
                .offset(o),
            );
        }
        if precision == Precision::Q3Full8 && self.format != FormatKind::Audio8V2 {
            f.push(err(
                c::RECORD_FULL8_V2,
                "precision",
                format!(
                    "q3_full8 records are allowed only in audio8-mixed-bundle-v2; this bundle is {}",
                    self.format.name()
                ),
            ));
        }
        let shape = obj.get("shape").and_then(|v| {
            v.as_array()
                .and_then(|a| a.iter().map(|x| uint(x).ok()).collect::<Option<Vec<u64>>>())
        });
        let source_dtype = obj
            .get("source_dtype")
            .and_then(Value::as_str)
            .map(str::to_string);
        let encoding = obj
            .get("encoding")
            .and_then(Value::as_str)
            .map(str::to_string);
        let checked = match &precision {
            Precision::Original => dense(obj, &name, bytes, f),
            p => match p.packed() {
                Some(kind) => packed(obj, &name, kind, offset, bytes, f),
                None => {
                    if !matches!(p, Precision::Other(s) if s == "?") {
                        f.push(err(
                            c::RECORD_PRECISION,
                            "precision",
                            format!(
                                "unknown precision {:?} (expected original, q3, q3_full8 or q4)",
                                p.as_str()
                            ),
                        ));
                    }
                    None
                }
            },
        };
        let resident_bytes = checked.map(|layout| match layout {
            Layout::Dense { dtype, count } => dtype.size() * count,
            Layout::Packed { .. } => layout.codes_bytes() + layout.scale_count() * 2,
            _ => 0,
        });
        let layout = if within && offset.is_some() {
            checked
        } else {
            None
        };
        Some(TensorInfo {
            name,
            precision,
            shape,
            source_dtype,
            encoding,
            offset,
            bytes,
            resident_bytes,
            alias_of: None,
            file: 0,
            layout,
            quant: None,
            record: r.clone(),
        })
    }
}
