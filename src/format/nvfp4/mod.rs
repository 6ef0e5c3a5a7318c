//! The mlx-nvfp4 MoE artifact (`quantization.layout == "stacked-global-scale"`):
//! a manifest, safetensors shards and a tensor → shard map. Only the shards'
//! headers are read here (through a memory map); the data is hashed and
//! scanned by the audit pass.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::mlxlm::MAX_TOTAL_TENSORS;
use super::payload::map_file;
use super::safetensors::{StTensor, parse_header};
use super::{
    Bundle, DenseDtype, FormatKind, Layout, PayloadFile, Precision, Provenance, TensorInfo,
    is_bare_name, json::kind, sha256_hex,
};
use crate::finding::Finding;
use crate::finding::checks as c;

/// The one layout bundlescope audits.
pub const LAYOUT: &str = "stacked-global-scale";
/// Tensors a dtype warning names one by one; the rest are counted.
const DTYPE_NAMED: usize = 100;
/// Most experts per layer bundlescope accepts (real artifacts have 128).
pub const MAX_EXPERTS: u64 = 1024;

/// Builds the bundle of an mlx-nvfp4 artifact.
pub fn parse(
    dir: PathBuf,
    manifest_path: PathBuf,
    bytes: Vec<u8>,
    m: &Map<String, Value>,
) -> Bundle {
    let mut findings = Vec::new();
    quantization(m.get("quantization"), &mut findings);
    let shards = shard_list(m.get("shards"), &mut findings);
    let weight_map = weight_map(m.get("weight_map"), &mut findings);

    let mut files = Vec::new();
    let mut tensors: Vec<TensorInfo> = Vec::new();
    // tensor name -> shard names that hold it
    let mut holders: HashMap<String, Vec<usize>> = HashMap::new();
    let mut parsed = Vec::new();
    // Set once a shard would take the tensors past the limit over all
    // shards (each shard is within the per-file limit): it and the shards
    // after it are not indexed, so thousands of full shards stay within
    // the memory bound.
    let mut over_limit = false;
    for (i, s) in shards.iter().enumerate() {
        let path = dir.join(&s.file);
        files.push(PayloadFile {
            name: s.file.clone(),
            path: path.clone(),
            expected_bytes: s.bytes,
            expected_sha256: s.sha256.clone(),
        });
        if over_limit {
            parsed.push(false);
            continue;
        }
        // Type-checked before it is opened, so a FIFO cannot block here;
        // only the header pages of the map are read.
        let header = map_file(&s.file, &path)
            .ok()
            .map(|map| parse_header(&s.file, &map));
        match header {
            Some(Ok(h)) if tensors.len() + h.tensors.len() > MAX_TOTAL_TENSORS => {
                findings.push(
                    Finding::error(
                        c::SHARD_HEADER,
                        format!(
                            "{} and the {} shards after it are not indexed: its {} tensors would make the artifact list more than {MAX_TOTAL_TENSORS} tensors in all ({} before it), the most bundlescope audits",
                            s.file,
                            shards.len() - i - 1,
                            h.tensors.len(),
                            tensors.len()
                        ),
                    )
                    .field(s.file.clone()),
                );
                parsed.push(false);
                over_limit = true;
            }
            Some(Ok(h)) => {
                for t in &h.tensors {
                    holders.entry(t.name.clone()).or_default().push(i);
                }
                parsed.push(true);
                for t in h.tensors {
                    tensors.push(info(t, i));
                }
            }
            Some(Err(f)) => {
                findings.extend(f);
                parsed.push(false);
            }
            // Missing or unreadable: the pass reports payload.file.
            None => parsed.push(false),
        }
    }
    check_weight_map(&weight_map, &shards, &parsed, &holders, &mut findings);
    expert_sets(&mut tensors, &mut findings);
    // The dtype warnings name at most DTYPE_NAMED tensors, then count the
    // rest in one finding: an artifact of 100,000 integer tensors would
    // otherwise carry 100,000 warnings past the memory bound.
    let dtype_findings = findings.len();
    let (mut more, mut first) = (0usize, Vec::new());
    let mut warn = |findings: &mut Vec<Finding>, t: &str, msg: String| {
        if findings.len() - dtype_findings < DTYPE_NAMED {
            findings.push(Finding::warning(c::NVFP4_DTYPE, msg).tensor(t));
        } else {
            if more < 3 {
                first.push(t.to_string());
            }
            more += 1;
        }
    };
    for t in tensors.iter_mut().filter(|t| is_expert(&t.name).is_none()) {
        if t.layout.is_none()
            && t.precision == Precision::Original
            && let Some(dtype) = t.source_dtype.as_deref().and_then(DenseDtype::parse)
        {
            t.layout = Some(Layout::Dense {
                dtype,
                count: t.parameters().unwrap_or(0),
            });
            if dtype != DenseDtype::Bf16 {
                let msg = format!(
                    "{} is {}; outside the experts the artifact's tensors are BF16",
                    t.name,
                    dtype.as_str()
                );
                warn(&mut findings, &t.name, msg);
            }
        } else if t.layout.is_none() && t.precision == Precision::Original {
            let msg = format!(
                "{} is {}, not a float dtype; its values are not checked",
                t.name,
                t.source_dtype.as_deref().unwrap_or("?")
            );
            warn(&mut findings, &t.name, msg);
        }
    }
    if more > 0 {
        findings.push(
            Finding::warning(
                c::NVFP4_DTYPE,
                format!(
                    "{more} more tensors outside the experts are not BF16 (the first: {}); only the first {DTYPE_NAMED} are named",
                    first.join(", ")
                ),
            )
            .field("dtype"),
        );
    }
    tensors.sort_by(|a, b| super::natural_cmp(&a.name, &b.name));
    let provenance = Provenance {
        format: Some(format!("mlx-nvfp4 ({LAYOUT})")),
        source_revision: None,
        profile: None,
        expected_config_sha256: None,
        manifest_sha256: sha256_hex(&bytes),
        ..Provenance::default()
    };
    Bundle {
        dir,
        manifest_path,
        manifest_bytes: bytes,
        format: FormatKind::Nvfp4,
        tensors,
        files,
        provenance,
        findings,
    }
}

fn info(t: StTensor, file: usize) -> TensorInfo {
    let precision = if is_expert(&t.name).is_some() {
        match t.name.rsplit('.').next() {
            Some("weight") => Precision::Nvfp4,
            Some("scales") => Precision::E4m3,
            _ => Precision::Original,
        }
    } else {
        Precision::Original
    };
    let bytes = t.end - t.begin;
    TensorInfo {
        quant: None,
        record: serde_json::json!({
            "dtype": t.dtype, "shape": t.shape, "data_offsets": [t.begin, t.end],
        }),
        name: t.name,
        precision,
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

/// `(layer prefix, projection, part)` of an expert tensor name.
pub fn is_expert(name: &str) -> Option<(&str, &str, &str)> {
    let (prefix, rest) = name.rsplit_once(".experts.")?;
    let (proj, part) = rest.split_once('.')?;
    matches!(proj, "gate_up_proj" | "down_proj").then_some(())?;
    matches!(part, "weight" | "scales" | "global_scale").then_some((prefix, proj, part))
}

fn quantization(q: Option<&Value>, findings: &mut Vec<Finding>) {
    let Some(q) = q.and_then(Value::as_object) else {
        findings.push(
            Finding::error(
                c::NVFP4_MANIFEST,
                "'quantization' must be an object with mode, bits, group_size and layout",
            )
            .field("quantization"),
        );
        return;
    };
    let layout = q.get("layout");
    if layout.and_then(Value::as_str) != Some(LAYOUT) {
        let got = match layout {
            None => "None".to_string(),
            Some(Value::String(s)) => format!("'{s}'"),
            Some(v) => v.to_string(),
        };
        findings.push(
            Finding::error(
                c::NVFP4_LAYOUT,
                format!(
                    "expected a '{LAYOUT}' artifact from scripts/convert.py, got {got}; the old absolute-scale artifact is ~5% off and must be regenerated"
                ),
            )
            .field("quantization.layout"),
        );
    }
    for (key, want) in [
        ("mode", Value::from("nvfp4")),
        ("bits", Value::from(4)),
        ("group_size", Value::from(16)),
    ] {
        if q.get(key) != Some(&want) {
            findings.push(
                Finding::error(
                    c::NVFP4_LAYOUT,
                    format!(
                        "quantization.{key} is {}, expected {want}",
                        q.get(key).map_or("missing".into(), Value::to_string)
                    ),
                )
                .field(format!("quantization.{key}")),
            );
        }
    }
}

struct Shard {
    file: String,
    sha256: Option<String>,
    bytes: Option<u64>,
}

fn shard_list(v: Option<&Value>, findings: &mut Vec<Finding>) -> Vec<Shard> {
    let Some(list) = v.and_then(Value::as_array).filter(|l| !l.is_empty()) else {
        findings.push(
            Finding::error(
                c::NVFP4_MANIFEST,
                format!(
                    "'shards' is {}, expected a non-empty list of {{\"file\": ...}} objects",
                    v.map_or("missing".into(), kind)
                ),
            )
            .field("shards"),
        );
        return Vec::new();
    };
    let mut out: Vec<Shard> = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let field = format!("shards[{i}].file");
        let Some(file) = s.get("file").and_then(Value::as_str) else {
            findings.push(
                Finding::error(c::NVFP4_MANIFEST, format!("{field} is not a string")).field(field),
            );
            continue;
        };
        if !is_bare_name(file) {
            findings.push(
                Finding::error(
                    c::SHARD_NAME,
                    format!(
                        "shard {file:?} is not a bare file name inside the folder (no '/', no '..', not absolute); it is not read"
                    ),
                )
                .field(field),
            );
            continue;
        }
        if out.iter().any(|o| o.file == file) {
            findings.push(
                Finding::error(c::SHARD_NAME, format!("shard {file:?} is listed twice"))
                    .field(field),
            );
            continue;
        }
        let sha256 = match s.get("sha256") {
            None | Some(Value::Null) => None,
            Some(Value::String(h)) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Some(h.to_ascii_lowercase())
            }
            Some(other) => {
                findings.push(
                    Finding::error(
                        c::NVFP4_MANIFEST,
                        format!("shards[{i}].sha256 is {other}, expected 64 hex digits"),
                    )
                    .field(format!("shards[{i}].sha256")),
                );
                None
            }
        };
        let bytes = s.get("bytes").and_then(Value::as_u64);
        out.push(Shard {
            file: file.to_string(),
            sha256,
            bytes,
        });
    }
    out
}

fn weight_map(v: Option<&Value>, findings: &mut Vec<Finding>) -> BTreeMap<String, String> {
    let Some(map) = v.and_then(Value::as_object) else {
        findings.push(
            Finding::error(
                c::NVFP4_MANIFEST,
                format!(
                    "'weight_map' is {}, expected an object of tensor name to shard file",
                    v.map_or("missing".into(), kind)
                ),
            )
            .field("weight_map"),
        );
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (name, shard) in map {
        match shard.as_str() {
            Some(s) => {
                out.insert(name.clone(), s.to_string());
            }
            None => findings.push(
                Finding::error(
                    c::NVFP4_MANIFEST,
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
    out
}

fn check_weight_map(
    map: &BTreeMap<String, String>,
    shards: &[Shard],
    parsed: &[bool],
    holders: &HashMap<String, Vec<usize>>,
    findings: &mut Vec<Finding>,
) {
    let err = |name: &str, msg: String| {
        Finding::error(c::WEIGHT_MAP, msg)
            .tensor(name.to_string())
            .field("weight_map")
    };
    for (name, shard) in map {
        let Some(i) = shards.iter().position(|s| &s.file == shard) else {
            findings.push(err(
                name,
                format!("weight_map sends {name} to {shard:?}, which is not a listed shard"),
            ));
            continue;
        };
        if !parsed[i] {
            continue; // the shard itself is reported
        }
        let held = holders.get(name).map(Vec::as_slice).unwrap_or_default();
        if !held.contains(&i) {
            let actual = held
                .iter()
                .map(|&k| shards[k].file.as_str())
                .collect::<Vec<_>>();
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
    let mut names: Vec<&String> = holders.keys().collect();
    names.sort();
    for name in names {
        let held = &holders[name];
        if held.len() > 1 {
            findings.push(err(
                name,
                super::stored_in_shards(name, held.iter().map(|&k| shards[k].file.as_str())),
            ));
        }
        if !map.contains_key(name) {
            findings.push(err(
                name,
                format!(
                    "{name} is in {} but not in weight_map",
                    shards[held[0]].file
                ),
            ));
        }
    }
}

/// Each MoE layer's six tensors, with their dtypes and shapes; valid sets get layouts.
fn expert_sets(tensors: &mut [TensorInfo], findings: &mut Vec<Finding>) {
    let mut layers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, t) in tensors.iter().enumerate() {
        if let Some((prefix, _, _)) = is_expert(&t.name) {
            layers.entry(prefix.to_string()).or_default().push(i);
        }
    }
    for (prefix, members) in layers {
        let mut layer_e: Option<(u64, String)> = None;
        for proj in ["gate_up_proj", "down_proj"] {
            let parts = ["weight", "scales", "global_scale"].map(|part| {
                let name = format!("{prefix}.experts.{proj}.{part}");
                members.iter().copied().find(|&i| tensors[i].name == name)
            });
            let missing: Vec<&str> = ["weight", "scales", "global_scale"]
                .iter()
                .zip(&parts)
                .filter(|(_, i)| i.is_none())
                .map(|(p, _)| *p)
                .collect();
            let base = format!("{prefix}.experts.{proj}");
            if !missing.is_empty() {
                findings.push(
                    Finding::error(
                        c::EXPERT_SET,
                        format!("{base} lacks {}", missing.join(", ")),
                    )
                    .tensor(format!("{base}.{}", missing[0])),
                );
                continue;
            }
            let [w, s, g] = parts.map(|p| p.unwrap_or_default());
            let bad = |i: usize, msg: String| {
                Finding::error(c::EXPERT_SET, msg).tensor(tensors[i].name.clone())
            };
            let mut ok = true;
            for (i, want) in [(w, "U32"), (s, "U8"), (g, "F32")] {
                let dtype = tensors[i].source_dtype.as_deref().unwrap_or("?");
                if dtype != want {
                    findings.push(bad(
                        i,
                        format!("{} is {dtype}, expected {want}", tensors[i].name),
                    ));
                    ok = false;
                }
            }
            let shape = |i: usize| tensors[i].shape.clone().unwrap_or_default();
            let (ws, ss, gs) = (shape(w), shape(s), shape(g));
            if ws.len() != 3 || ws.contains(&0) {
                findings.push(bad(
                    w,
                    format!(
                        "{} has shape {ws:?}, expected [E, out, in/8]",
                        tensors[w].name
                    ),
                ));
                ok = false;
            } else {
                let (e, out, words) = (ws[0], ws[1], ws[2]);
                if e > MAX_EXPERTS {
                    findings.push(bad(
                        w,
                        format!(
                            "{} stacks {e} experts, more than {MAX_EXPERTS}",
                            tensors[w].name
                        ),
                    ));
                    ok = false;
                }
                if ss != [e, out, words / 2] || words % 2 != 0 {
                    findings.push(bad(
                        s,
                        format!(
                            "{} has shape {ss:?}; weight {ws:?} needs [{e}, {out}, {}] (one scale per 16 inputs)",
                            tensors[s].name,
                            words / 2
                        ),
                    ));
                    ok = false;
                }
                if gs != [e] {
                    findings.push(bad(
                        g,
                        format!(
                            "{} has shape {gs:?}, expected [{e}] (one per expert)",
                            tensors[g].name
                        ),
                    ));
                    ok = false;
                }
                match &layer_e {
                    Some((e0, other)) if *e0 != e => {
                        findings.push(bad(
                            w,
                            format!(
                                "{} stacks {e} experts but {other} stacks {e0}",
                                tensors[w].name
                            ),
                        ));
                        ok = false;
                    }
                    None => layer_e = Some((e, tensors[w].name.clone())),
                    _ => {}
                }
                if ok {
                    tensors[w].layout = Some(Layout::Fp4 {
                        experts: e,
                        rows: out,
                        cols: words * 8,
                    });
                    tensors[w].shape = Some(vec![e, out, words * 8]);
                    tensors[s].layout = Some(Layout::E4m3 {
                        experts: e,
                        rows: out,
                        groups: words / 2,
                    });
                    tensors[g].layout = Some(Layout::GlobalScale { experts: e });
                }
            }
            if !ok {
                continue;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            is_expert("model.decoder.layers.3.experts.down_proj.scales"),
            Some(("model.decoder.layers.3", "down_proj", "scales"))
        );
        assert_eq!(is_expert("model.decoder.layers.3.mlp.router.weight"), None);
    }
}
