//! The calibrated GPTQ-Q4 overlay (`audio8-gptq-q4-calibrated-v1`):
//! bundlescope's documented reading (docs/provenance.md) of a format whose
//! provenance module the reference loader imports but nobody published. The
//! payload is an audio8 v2 payload (the audio8 parser does every payload
//! rule, with `q3_full8` refused since only v2 allows it); this module reads
//! the `provenance` block and makes the checks the manifest alone allows
//! (the block's fields, the overlay/copied partition, overlay tensors q4).
//! The checks that need the payload's bytes (copied range hashes, the
//! overlay identity) and the parent's run in the audit.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::json::kind;
use super::{Bundle, FormatKind, Precision, hex};
use crate::finding::Finding;
use crate::finding::checks as c;

/// The `format` string of a calibrated GPTQ-Q4 overlay. Any other format
/// name containing `gptq` stays recognised but not supported.
pub const FORMAT: &str = "audio8-gptq-q4-calibrated-v1";

/// How the UI and the report label everything this module decides.
pub const READING: &str = "bundlescope's documented reading of the calibrated GPTQ-Q4 format";

/// `provenance.parent`: the bundle the overlay was calibrated from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParentRef {
    /// SHA-256 of the parent's manifest.json.
    pub manifest_sha256: Option<String>,
    /// The parent's `weights_sha256`.
    pub weights_sha256: Option<String>,
    /// The parent's `source_revision`.
    pub source_revision: Option<String>,
}

/// One entry of `provenance.copied`: a tensor taken from the parent byte
/// for byte, with the SHA-256 of its byte range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopiedTensor {
    /// Tensor name.
    pub name: String,
    /// SHA-256 of its `[offset, offset + bytes)` (lower-case hex).
    pub range_sha256: String,
}

/// The `provenance` block as the manifest declares it (entries whose type
/// is wrong are left out and reported as `provenance.field`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Declared {
    /// The parent bundle.
    pub parent: ParentRef,
    /// Free-form calibration facts (dataset, samples, method, tool, version).
    pub calibration: Value,
    /// Names of the tensors GPTQ recalibrated (precision q4).
    pub overlay: Vec<String>,
    /// Tensors taken from the parent unchanged.
    pub copied: Vec<CopiedTensor>,
    /// SHA-256 of the canonical overlay identity JSON (see [`overlay_identity`]).
    pub overlay_identity_sha256: Option<String>,
}

/// How a parent check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ParentStatus {
    /// No parent was given and none lies beside the bundle: not checked.
    #[default]
    NotFound,
    /// Found, and every parent check passed.
    Verified,
    /// Found, and some parent check failed.
    Mismatch,
    /// Given or found, but it could not be opened or read.
    Unreadable,
}

/// What the audit measured against the parent bundle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParentCheck {
    /// The outcome.
    pub status: ParentStatus,
    /// The parent folder checked.
    pub path: Option<String>,
    /// `option` (given by `--parent` or picked in the app) or `sibling`
    /// (found beside the bundle by its manifest hash).
    pub found_by: Option<String>,
    /// SHA-256 of the parent's manifest.json as read.
    pub manifest_sha256: Option<String>,
    /// Whether it equals `provenance.parent.manifest_sha256`.
    pub manifest_sha256_ok: Option<bool>,
    /// SHA-256 of the parent's payload as read.
    pub weights_sha256: Option<String>,
    /// Whether it equals `provenance.parent.weights_sha256`.
    pub weights_sha256_ok: Option<bool>,
    /// Whether the parent's `source_revision` equals the declared one.
    pub source_revision_ok: Option<bool>,
    /// Copied tensors byte-identical to the parent's.
    pub copied_identical: usize,
    /// Copied tensors that differ from (or are missing in) the parent.
    pub copied_differing: Vec<String>,
    /// Overlay tensors with the parent's name and shape and other bytes.
    pub overlay_changed: usize,
    /// Overlay tensors missing in the parent, of another shape, or identical to it.
    pub overlay_problems: Vec<String>,
    /// Overlay tensors whose F16 scales equal the parent's exactly.
    pub scales_equal: Vec<String>,
    /// Overlay tensors whose scales differ from the parent's.
    pub scales_differ: Vec<String>,
    /// One sentence on the outcome.
    pub message: String,
}

/// The report's account of a calibrated overlay: the declared block, the
/// four fields the reference loader returns (with their truth as this
/// audit measured it) and the parent checks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvenanceReport {
    /// Always [`READING`]: this is bundlescope's reading, not the loader's.
    pub reading: String,
    /// The block as declared.
    #[serde(flatten)]
    pub declared: Declared,
    /// The overlay identity as recomputed from the payload (null when an
    /// overlay tensor's range could not be hashed).
    pub overlay_identity_recomputed_sha256: Option<String>,
    /// The block is well formed, the partition holds, overlay tensors are
    /// q4, the copied range hashes and the overlay identity verify.
    pub calibration_provenance_verified: bool,
    /// Every copied tensor's range hash equals its bytes' SHA-256.
    pub copied_tensor_range_hashes_verified: bool,
    /// Whether the overlay's scales were compared with the parent's (only
    /// with the parent at hand; the reference loader never does).
    pub static_parent_scale_equality_rechecked: bool,
    /// The parent checks.
    pub parent_check: ParentCheck,
}

/// The canonical JSON whose SHA-256 is the overlay identity: `{"overlay":
/// [{"name", "range_sha256"}] sorted by name, "parent": manifest_sha256}`
/// with sorted keys, no whitespace, UTF-8 (Python: `json.dumps(v,
/// sort_keys=True, separators=(",", ":"), ensure_ascii=False)`).
pub fn overlay_identity_json(parent_manifest_sha256: &str, overlay: &[(String, String)]) -> String {
    let mut items: Vec<&(String, String)> = overlay.iter().collect();
    items.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    // Keys are written in sorted order by hand: the crate's maps keep
    // insertion order (serde_json's preserve_order feature).
    let list: Vec<String> = items
        .iter()
        .map(|(name, hash)| {
            format!(
                "{{\"name\":{},\"range_sha256\":{}}}",
                Value::String(name.clone()),
                Value::String(hash.clone())
            )
        })
        .collect();
    format!(
        "{{\"overlay\":[{}],\"parent\":{}}}",
        list.join(","),
        Value::String(parent_manifest_sha256.to_string())
    )
}

/// SHA-256 (lower-case hex) of [`overlay_identity_json`].
pub fn overlay_identity(parent_manifest_sha256: &str, overlay: &[(String, String)]) -> String {
    hex(&Sha256::digest(
        overlay_identity_json(parent_manifest_sha256, overlay).as_bytes(),
    ))
}

/// Most entries examined in each of `overlay` and `copied`: a bundle has at
/// most [`super::audio8::MAX_TENSORS`] records, so more is already wrong,
/// and findings stay bounded whatever the manifest lists.
pub const MAX_ENTRIES: usize = super::audio8::MAX_TENSORS;

fn is_sha(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Parses a calibrated overlay: the audio8 payload rules, then the
/// provenance block.
pub fn parse(
    dir: PathBuf,
    manifest_path: PathBuf,
    manifest_bytes: Vec<u8>,
    m: &Map<String, Value>,
) -> Bundle {
    let mut bundle = super::audio8::parse(
        dir,
        manifest_path,
        manifest_bytes,
        m,
        FormatKind::GptqQ4Calibrated,
    );
    let mut f = Vec::new();
    let declared = declared(m.get("provenance"), &mut f);
    partition(&bundle, &declared, &mut f);
    bundle.findings.extend(f);
    bundle.provenance.calibrated = Some(Arc::new(declared));
    bundle
}

fn field_error(field: &str, message: String) -> Finding {
    Finding::error(c::PROVENANCE_FIELD, message).field(format!("provenance.{field}"))
}

/// Reads the block, reporting every entry of the wrong type.
fn declared(block: Option<&Value>, f: &mut Vec<Finding>) -> Declared {
    let mut d = Declared::default();
    let Some(block) = block else {
        f.push(field_error(
            "",
            "the calibrated GPTQ-Q4 format requires a 'provenance' object (parent, calibration, overlay, copied, overlay_identity_sha256); the manifest has none".into(),
        ).field("provenance"));
        return d;
    };
    let Some(obj) = block.as_object() else {
        f.push(
            field_error(
                "",
                format!("provenance must be an object, found {}", kind(block)),
            )
            .field("provenance"),
        );
        return d;
    };
    let sha = |v: Option<&Value>, field: &str, f: &mut Vec<Finding>| -> Option<String> {
        match v {
            Some(Value::String(s)) if is_sha(s) => Some(s.clone()),
            other => {
                f.push(field_error(
                    field,
                    format!(
                        "provenance.{field} must be 64 lower-case hex digits, found {}",
                        other.map_or("nothing".into(), kind)
                    ),
                ));
                None
            }
        }
    };
    match obj.get("parent") {
        Some(Value::Object(p)) => {
            d.parent.manifest_sha256 = sha(p.get("manifest_sha256"), "parent.manifest_sha256", f);
            d.parent.weights_sha256 = sha(p.get("weights_sha256"), "parent.weights_sha256", f);
            match p.get("source_revision") {
                Some(Value::String(s)) => d.parent.source_revision = Some(s.clone()),
                other => f.push(field_error(
                    "parent.source_revision",
                    format!(
                        "provenance.parent.source_revision must be a string, found {}",
                        other.map_or("nothing".into(), kind)
                    ),
                )),
            }
        }
        other => f.push(field_error(
            "parent",
            format!(
                "provenance.parent must be an object with manifest_sha256, weights_sha256 and source_revision, found {}",
                other.map_or("nothing".into(), kind)
            ),
        )),
    }
    match obj.get("calibration") {
        Some(v @ Value::Object(_)) => d.calibration = v.clone(),
        other => f.push(field_error(
            "calibration",
            format!(
                "provenance.calibration must be an object (free-form: dataset, samples, method, tool, version), found {}",
                other.map_or("nothing".into(), kind)
            ),
        )),
    }
    match obj.get("overlay") {
        Some(Value::Array(a)) => {
            too_long(a, "overlay", f);
            for (i, v) in a.iter().take(MAX_ENTRIES).enumerate() {
                match v {
                    Value::String(s) => d.overlay.push(s.clone()),
                    other => f.push(field_error(
                        &format!("overlay[{i}]"),
                        format!(
                            "provenance.overlay[{i}] must be a tensor name, found {}",
                            kind(other)
                        ),
                    )),
                }
            }
        }
        other => f.push(field_error(
            "overlay",
            format!(
                "provenance.overlay must be a list of tensor names, found {}",
                other.map_or("nothing".into(), kind)
            ),
        )),
    }
    match obj.get("copied") {
        Some(Value::Array(a)) => {
            too_long(a, "copied", f);
            for (i, v) in a.iter().take(MAX_ENTRIES).enumerate() {
                let name = v.get("name").and_then(Value::as_str);
                let hash = v.get("range_sha256").and_then(Value::as_str);
                match (name, hash) {
                    (Some(n), Some(h)) if is_sha(h) => d.copied.push(CopiedTensor {
                        name: n.to_string(),
                        range_sha256: h.to_string(),
                    }),
                    _ => f.push(
                        field_error(
                            &format!("copied[{i}]"),
                            format!(
                                "provenance.copied[{i}] must be {{\"name\": string, \"range_sha256\": 64 lower-case hex digits}}, found {}",
                                super::json::truncate(&v.to_string(), 160)
                            ),
                        )
                        .maybe_tensor(name),
                    ),
                }
            }
        }
        other => f.push(field_error(
            "copied",
            format!(
                "provenance.copied must be a list of {{name, range_sha256}}, found {}",
                other.map_or("nothing".into(), kind)
            ),
        )),
    }
    d.overlay_identity_sha256 = sha(
        obj.get("overlay_identity_sha256"),
        "overlay_identity_sha256",
        f,
    );
    d
}

fn too_long(a: &[Value], field: &str, f: &mut Vec<Finding>) {
    if a.len() > MAX_ENTRIES {
        f.push(field_error(
            field,
            format!(
                "provenance.{field} lists {} entries; a bundle has at most {MAX_ENTRIES} tensors (only the first {MAX_ENTRIES} are examined)",
                a.len()
            ),
        ));
    }
}

trait MaybeTensor {
    fn maybe_tensor(self, name: Option<&str>) -> Self;
}

impl MaybeTensor for Finding {
    fn maybe_tensor(self, name: Option<&str>) -> Self {
        match name {
            Some(n) => self.tensor(n),
            None => self,
        }
    }
}

/// Every tensor record in exactly one of overlay and copied, every listed
/// name a tensor record, overlay tensors q4.
fn partition(bundle: &Bundle, d: &Declared, f: &mut Vec<Finding>) {
    let mut seen: HashMap<&str, (usize, usize)> = HashMap::new();
    for n in &d.overlay {
        seen.entry(n).or_default().0 += 1;
    }
    for e in &d.copied {
        seen.entry(&e.name).or_default().1 += 1;
    }
    let err = |name: &str, field: &str, msg: String| {
        Finding::error(c::PROVENANCE_PARTITION, msg)
            .tensor(name)
            .field(format!("provenance.{field}"))
    };
    for t in bundle.tensors.iter().filter(|t| t.alias_of.is_none()) {
        match seen.get(t.name.as_str()).copied().unwrap_or((0, 0)) {
            (0, 0) => f.push(err(
                &t.name,
                "overlay",
                format!(
                    "tensor {} is in neither provenance.overlay nor provenance.copied: every tensor must be recalibrated or copied from the parent",
                    t.name
                ),
            )),
            (1, 0) | (0, 1) => {}
            (o, cp) if o > 0 && cp > 0 => f.push(err(
                &t.name,
                "copied",
                format!(
                    "tensor {} is in both provenance.overlay and provenance.copied: a tensor is either recalibrated or copied, not both",
                    t.name
                ),
            )),
            (o, cp) => f.push(err(
                &t.name,
                if o > 1 { "overlay" } else { "copied" },
                format!(
                    "tensor {} is listed {} times in provenance.{}",
                    t.name,
                    o.max(cp),
                    if o > 1 { "overlay" } else { "copied" }
                ),
            )),
        }
    }
    let mut unknown: Vec<&str> = seen
        .keys()
        .copied()
        .filter(|n| {
            bundle
                .find(n)
                .is_none_or(|i| bundle.tensors[i].alias_of.is_some())
        })
        .collect();
    unknown.sort_unstable();
    // Both lists are capped at MAX_ENTRIES, so this is too.
    for n in unknown {
        f.push(err(
            n,
            "overlay",
            format!("provenance lists {n:?}, which is not a tensor record of this bundle (an alias or no tensor at all)"),
        ));
    }
    for n in &d.overlay {
        if let Some(i) = bundle.find(n)
            && let Some(t) = bundle.tensors.get(i)
            && t.alias_of.is_none()
            && t.precision != Precision::Q4
        {
            f.push(
                Finding::error(
                    c::PROVENANCE_OVERLAY_Q4,
                    format!(
                        "overlay tensor {n} is {}; GPTQ recalibrated tensors must be q4",
                        t.precision.as_str()
                    ),
                )
                .tensor(n)
                .field("precision"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_json_is_sorted_and_compact() {
        let j = overlay_identity_json(
            "p",
            &[("b".into(), "2".into()), ("a\"x".into(), "1".into())],
        );
        assert_eq!(
            j,
            r#"{"overlay":[{"name":"a\"x","range_sha256":"1"},{"name":"b","range_sha256":"2"}],"parent":"p"}"#
        );
        // The JSON parses back to the same value.
        let v: Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["overlay"][1]["name"], "b");
        assert_eq!(overlay_identity("p", &[]).len(), 64);
    }

    #[test]
    fn sha_is_lower_case_hex_of_64() {
        assert!(is_sha(&"a".repeat(64)));
        assert!(!is_sha(&"A".repeat(64)));
        assert!(!is_sha(&"a".repeat(63)));
    }
}
