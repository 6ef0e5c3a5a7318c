//! Per-record checks of the audio8 format: dense and packed storage rules,
//! and the aliases with the tied embedding.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{EMBED, GROUP, LM_HEAD, MAX_COLS, MAX_DENSE_BYTES, MAX_ROWS, full8_grid};
use crate::finding::checks as c;
use crate::finding::{CheckId, Finding};
use crate::format::json::{kind, uint};
use crate::format::{DenseDtype, Layout, PackedKind, Precision, TensorInfo};

pub(super) fn dense(
    obj: &Map<String, Value>,
    name: &str,
    bytes: Option<u64>,
    f: &mut Vec<Finding>,
) -> Option<Layout> {
    let err = |check: CheckId, field: &str, msg: String| {
        Finding::error(check, msg).tensor(name).field(field)
    };
    let mut ok = true;
    match obj.get("encoding") {
        Some(Value::String(s)) if s == "original" => {}
        other => {
            ok = false;
            f.push(err(
                c::DENSE_FORMAT,
                "encoding",
                format!(
                    "a dense record's encoding must be \"original\", found {}",
                    other.map_or("nothing".into(), kind)
                ),
            ));
        }
    }
    let dtype = match obj.get("source_dtype") {
        Some(Value::String(s)) if DenseDtype::parse(s).is_some() => DenseDtype::parse(s),
        other => {
            f.push(err(
                c::DENSE_FORMAT,
                "source_dtype",
                format!(
                    "source_dtype must be BF16, F16 or F32, found {}",
                    other.map_or("nothing".into(), kind)
                ),
            ));
            None
        }
    };
    let shape = match obj.get("shape") {
        Some(Value::Array(a)) if !a.is_empty() => {
            let dims: Result<Vec<u64>, String> = a
                .iter()
                .map(|x| match uint(x) {
                    Ok(0) => Err("the integer 0".to_string()),
                    other => other,
                })
                .collect();
            match dims {
                Ok(d) => Some(d),
                Err(found) => {
                    f.push(err(
                        c::DENSE_SHAPE,
                        "shape",
                        format!("every dimension must be a positive integer, found {found}"),
                    ));
                    None
                }
            }
        }
        other => {
            f.push(err(
                c::DENSE_SHAPE,
                "shape",
                format!(
                    "shape must be a non-empty list of positive integers, found {}",
                    other.map_or("nothing".into(), kind)
                ),
            ));
            None
        }
    };
    let (dtype, shape) = (dtype?, shape?);
    let count = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let expected = count.and_then(|n| n.checked_mul(dtype.size()));
    let bytes = bytes?;
    if expected != Some(bytes) {
        ok = false;
        f.push(err(
            c::DENSE_BYTES,
            "bytes",
            match expected {
                Some(e) => format!(
                    "bytes is {bytes}, but shape {shape:?} of {} needs {e}",
                    dtype.as_str()
                ),
                None => format!("shape {shape:?} has more elements than a 64-bit count holds"),
            },
        ));
    }
    if bytes > MAX_DENSE_BYTES {
        ok = false;
        f.push(err(
            c::DENSE_BYTES,
            "bytes",
            format!("a dense record may hold at most 64 MiB, this one claims {bytes} bytes"),
        ));
    }
    (ok && count.is_some()).then(|| Layout::Dense {
        dtype,
        count: count.unwrap_or(0),
    })
}

pub(super) fn packed(
    obj: &Map<String, Value>,
    name: &str,
    kind_: PackedKind,
    offset: Option<u64>,
    bytes: Option<u64>,
    f: &mut Vec<Finding>,
) -> Option<Layout> {
    let err = |check: CheckId, field: &str, msg: String| {
        Finding::error(check, msg).tensor(name).field(field)
    };
    let mut ok = true;
    let (want_encoding, want_grid) = match kind_ {
        PackedKind::Q3Full8 => ("uniform_lsb_full8", Some(full8_grid())),
        _ => ("uniform_lsb", None),
    };
    let encoding = obj.get("encoding");
    if encoding.and_then(Value::as_str) != Some(want_encoding) {
        ok = false;
        f.push(err(
            c::PACKED_GRID,
            "encoding",
            format!(
                "{} records need encoding {want_encoding:?}, found {}",
                kind_.precision().as_str(),
                encoding.map_or("nothing".into(), kind)
            ),
        ));
    }
    match (&want_grid, obj.get("grid")) {
        (Some(want), Some(got)) if want == got => {}
        (Some(want), got) => {
            ok = false;
            f.push(err(
                c::PACKED_GRID,
                "grid",
                format!(
                    "q3_full8 needs grid {want}, found {}",
                    got.map_or("nothing".into(), |g| crate::format::json::truncate(
                        &g.to_string(),
                        200
                    ))
                ),
            ));
        }
        (None, Some(_)) => {
            ok = false;
            f.push(err(
                c::PACKED_GRID,
                "grid",
                format!(
                    "{} records must not carry a grid (only q3_full8 does)",
                    kind_.precision().as_str()
                ),
            ));
        }
        (None, None) => {}
    }
    let dims = obj.get("shape").and_then(|v| {
        let a = v.as_array()?;
        match a.as_slice() {
            [r, c] => Some((uint(r).ok()?, uint(c).ok()?)),
            _ => None,
        }
    });
    let Some((rows, cols)) =
        dims.filter(|&(r, c)| r > 0 && r <= MAX_ROWS && c > 0 && c <= MAX_COLS && c % GROUP == 0)
    else {
        f.push(err(
            c::PACKED_DIMENSIONS,
            "shape",
            format!(
                "a packed shape must be [rows, cols] with 0 < rows <= {MAX_ROWS}, 0 < cols <= {MAX_COLS} and cols a multiple of 64, found {}",
                obj.get("shape").map_or("nothing".into(), kind_of_shape)
            ),
        ));
        return None;
    };
    let layout = Layout::Packed {
        kind: kind_,
        rows,
        cols,
    };
    let row_bytes = layout.row_bytes();
    let codes_bytes = layout.codes_bytes();
    let scales_bytes = layout.scale_count() * 2;
    let mut expected: Vec<(&str, Option<Value>)> = vec![
        ("group_size", Some(json!(64))),
        ("padded_cols", Some(json!(cols))),
        ("row_bytes", Some(json!(row_bytes))),
        ("codes_bytes", Some(json!(codes_bytes))),
        (
            "scales_offset",
            offset
                .and_then(|o| o.checked_add(codes_bytes))
                .map(|v| json!(v)),
        ),
        ("scales_bytes", Some(json!(scales_bytes))),
        ("scales_dtype", Some(json!("F16"))),
        ("scales_shape", Some(json!([rows, cols / GROUP]))),
    ];
    if bytes.is_some() {
        expected.push(("bytes", Some(json!(codes_bytes + scales_bytes))));
    }
    for (field, want) in expected {
        let Some(want) = want else { continue };
        let got = obj.get(field);
        if got != Some(&want) {
            ok = false;
            f.push(err(
                c::PACKED_STORAGE,
                field,
                format!(
                    "{field} must be {want} for a {} matrix of shape [{rows}, {cols}], found {}",
                    kind_.precision().as_str(),
                    got.map_or("nothing".into(), kind)
                ),
            ));
        }
    }
    ok.then_some(layout)
}

fn kind_of_shape(v: &Value) -> String {
    match v {
        Value::Array(a) if a.len() <= 8 => crate::format::json::truncate(&v.to_string(), 80),
        _ => kind(v),
    }
}

pub(super) fn aliases(
    v: Option<&Value>,
    tensors: &[TensorInfo],
    f: &mut Vec<Finding>,
) -> Vec<TensorInfo> {
    let by_name: HashMap<&str, &TensorInfo> =
        tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut roots: HashMap<String, String> = HashMap::new();
    let mut rows = Vec::new();
    match v {
        Some(Value::Object(map)) => {
            for (alias, target) in map {
                let Some(target) = target.as_str() else {
                    f.push(
                        Finding::error(
                            c::MANIFEST_FIELD,
                            format!(
                                "alias {alias:?} must name its target as a string, found {}",
                                kind(target)
                            ),
                        )
                        .tensor(alias)
                        .field(format!("aliases.{alias}")),
                    );
                    continue;
                };
                if by_name.contains_key(alias.as_str()) {
                    f.push(
                        Finding::error(
                            c::ALIAS_TARGET,
                            format!("alias {alias:?} is also the name of a tensor record"),
                        )
                        .tensor(alias)
                        .field(format!("aliases.{alias}")),
                    );
                    continue;
                }
                let root = if by_name.contains_key(target) {
                    Some(target.to_string())
                } else {
                    roots.get(target).cloned()
                };
                let Some(root) = root else {
                    f.push(
                        Finding::error(
                            c::ALIAS_TARGET,
                            format!("alias {alias:?} points at {target:?}, which is not a tensor of this bundle"),
                        )
                        .tensor(alias)
                        .field(format!("aliases.{alias}")),
                    );
                    continue;
                };
                let base = by_name.get(root.as_str());
                rows.push(TensorInfo {
                    name: alias.clone(),
                    precision: base.map_or(Precision::Other("?".into()), |t| t.precision.clone()),
                    shape: base.and_then(|t| t.shape.clone()),
                    source_dtype: base.and_then(|t| t.source_dtype.clone()),
                    encoding: base.and_then(|t| t.encoding.clone()),
                    offset: None,
                    bytes: None,
                    resident_bytes: Some(0),
                    alias_of: Some(target.to_string()),
                    file: 0,
                    layout: None,
                    quant: None,
                    record: json!({ "alias_of": target }),
                });
                roots.insert(alias.clone(), root);
            }
        }
        Some(other) => f.push(
            Finding::error(
                c::MANIFEST_FIELD,
                format!(
                    "aliases must be an object mapping alias to target, found {}",
                    kind(other)
                ),
            )
            .field("aliases"),
        ),
        None => {}
    }
    if !by_name.contains_key(EMBED) {
        f.push(
            Finding::error(
                c::ALIAS_TIED_HEAD,
                format!("the tied embedding {EMBED} is not a tensor of this bundle"),
            )
            .tensor(EMBED),
        );
    } else if by_name.contains_key(LM_HEAD) {
        f.push(
            Finding::error(
                c::ALIAS_TIED_HEAD,
                format!("{LM_HEAD} is a tensor of its own; tied embeddings need it to be an alias of {EMBED}"),
            )
            .tensor(LM_HEAD),
        );
    } else {
        match roots.get(LM_HEAD) {
            Some(root) if root == EMBED => {}
            Some(root) => f.push(
                Finding::error(
                    c::ALIAS_TIED_HEAD,
                    format!("{LM_HEAD} resolves to {root}, not to {EMBED}"),
                )
                .tensor(LM_HEAD)
                .field(format!("aliases.{LM_HEAD}")),
            ),
            None => f.push(
                Finding::error(
                    c::ALIAS_TIED_HEAD,
                    format!("{LM_HEAD} is missing: it must be an alias of {EMBED}"),
                )
                .tensor(LM_HEAD)
                .field("aliases"),
            ),
        }
    }
    rows
}
