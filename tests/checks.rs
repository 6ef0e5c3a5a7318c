//! One corrupted copy of the sample per check: the audit must report exactly
//! that check (on the right tensor), verdict invalid, exit 1. The same copies
//! feed the seed-parity test, which runs the reference loader on each.

mod common;

use std::fs;

use common::gptq::{NORM, Overlay};
use common::mlxlm::Ckpt;
use common::nvfp4::Artifact;
use common::*;
use serde_json::{Value, json};

pub struct Case {
    /// Check id the corruption must trigger.
    pub check: &'static str,
    /// Other check ids that the same corruption necessarily triggers.
    pub also: &'static [&'static str],
    /// Tensor the finding must name.
    pub tensor: Option<&'static str>,
    pub make: fn(&TestBundle),
}

const LN: &str = "language_model.model.layers.0.input_layernorm.weight";
const Q_PROJ: &str = "language_model.model.layers.0.self_attn.q_proj.weight"; // q3_full8
const V_PROJ: &str = "language_model.model.layers.0.self_attn.v_proj.weight"; // q4
const GATE: &str = "language_model.model.layers.0.mlp.gate_proj.weight"; // q3

fn offset(b: &TestBundle, name: &str, field: &str) -> usize {
    b.record(name)[field].as_u64().unwrap() as usize
}

fn set_field(b: &TestBundle, name: &str, field: &str, v: Value) {
    let i = b.index(name);
    b.edit(|m| m["tensors"][i][field] = v);
}

fn set_scale(b: &TestBundle, bits: u16) {
    let at = offset(b, V_PROJ, "scales_offset");
    b.patch_payload(true, |p| p[at..at + 2].copy_from_slice(&bits.to_le_bytes()));
}

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            check: "manifest.parse",
            also: &[],
            tensor: None,
            // Cut mid-value, as an interrupted write leaves it.
            make: |b| fs::write(b.dir.join("manifest.json"), "{\"format\": \"audio8-").unwrap(),
        },
        Case {
            check: "manifest.field",
            also: &[],
            tensor: None,
            make: |b| {
                b.edit(|m| {
                    m.as_object_mut().unwrap().remove("profile");
                })
            },
        },
        Case {
            check: "manifest.group_size",
            also: &[],
            tensor: None,
            make: |b| b.edit(|m| m["group_size"] = json!(32)),
        },
        Case {
            check: "manifest.tie_word_embeddings",
            also: &[],
            tensor: None,
            make: |b| b.edit(|m| m["tie_word_embeddings"] = json!(false)),
        },
        Case {
            check: "manifest.weights_file",
            also: &[],
            tensor: None,
            make: |b| b.edit(|m| m["weights_file"] = json!("../bundle/weights.bin")),
        },
        Case {
            check: "manifest.tensor_count",
            also: &["alias.tied_head", "payload.unreferenced", "alias.target"],
            tensor: None,
            make: |b| b.edit(|m| m["tensors"] = json!([])),
        },
        Case {
            check: "payload.file",
            also: &[],
            tensor: None,
            make: |b| std::fs::remove_file(b.payload()).unwrap(),
        },
        Case {
            check: "payload.length",
            also: &[],
            tensor: None,
            make: |b| b.patch_payload(true, |p| p.extend_from_slice(&[0; 16])),
        },
        Case {
            check: "payload.sha256",
            also: &[],
            tensor: None,
            make: |b| {
                let at = offset(b, LN, "offset");
                b.patch_payload(false, |p| p[at] ^= 1);
            },
        },
        Case {
            check: "payload.unreferenced",
            also: &[],
            tensor: None,
            make: |b| {
                b.patch_payload(false, |p| p.extend_from_slice(&[0; 2]));
                b.edit(|m| m["weights_bytes"] = json!(m["weights_bytes"].as_u64().unwrap() + 2));
                b.rehash();
            },
        },
        Case {
            check: "record.field",
            also: &[],
            tensor: Some("audio_tower.conv1.weight"),
            make: |b| set_field(b, "audio_tower.conv1.weight", "offset", json!("0")),
        },
        Case {
            check: "record.name_unique",
            also: &[],
            tensor: Some("audio_tower.conv1.weight"),
            make: |b| {
                set_field(
                    b,
                    "audio_tower.conv1.bias",
                    "name",
                    json!("audio_tower.conv1.weight"),
                )
            },
        },
        Case {
            check: "record.bytes",
            also: &[],
            tensor: Some(LN),
            make: |b| set_field(b, LN, "bytes", json!(0)),
        },
        Case {
            check: "record.contiguous",
            also: &[],
            tensor: Some(Q_PROJ),
            make: |b| {
                let i = b.index(LN);
                b.edit(|m| m["tensors"].as_array_mut().unwrap().swap(i, i + 1));
            },
        },
        Case {
            check: "record.within_payload",
            also: &[],
            tensor: Some("language_model.model.norm.weight"),
            make: |b| {
                let last = b.record("language_model.model.norm.weight");
                let cut = last["bytes"].as_u64().unwrap() as usize;
                b.patch_payload(false, |p| p.truncate(p.len() - cut));
                b.edit(|m| {
                    m["weights_bytes"] = json!(m["weights_bytes"].as_u64().unwrap() - cut as u64)
                });
                b.rehash();
            },
        },
        Case {
            check: "record.full8_requires_v2",
            also: &[],
            tensor: Some(Q_PROJ),
            make: |b| b.edit(|m| m["format"] = json!("audio8-mixed-bundle-v1")),
        },
        Case {
            check: "record.precision",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_field(b, V_PROJ, "precision", json!("q5")),
        },
        Case {
            check: "dense.format",
            also: &[],
            tensor: Some(LN),
            make: |b| set_field(b, LN, "source_dtype", json!("F64")),
        },
        Case {
            check: "dense.shape",
            also: &[],
            tensor: Some(LN),
            make: |b| set_field(b, LN, "shape", json!(["256"])),
        },
        Case {
            check: "dense.bytes",
            also: &[],
            tensor: Some(LN),
            make: |b| set_field(b, LN, "shape", json!([128])),
        },
        Case {
            check: "dense.finite",
            also: &[],
            tensor: Some(LN),
            make: |b| {
                let at = offset(b, LN, "offset") + 2 * 17;
                b.patch_payload(true, |p| {
                    p[at..at + 2].copy_from_slice(&0x7fc0u16.to_le_bytes())
                });
            },
        },
        Case {
            check: "packed.grid",
            also: &[],
            tensor: Some(Q_PROJ),
            make: |b| {
                let i = b.index(Q_PROJ);
                b.edit(|m| {
                    m["tensors"][i].as_object_mut().unwrap().remove("grid");
                });
            },
        },
        Case {
            check: "packed.dimensions",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_field(b, V_PROJ, "shape", json!([256, 100])),
        },
        Case {
            check: "packed.storage",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| {
                let rb = b.record(V_PROJ)["row_bytes"].as_u64().unwrap();
                set_field(b, V_PROJ, "row_bytes", json!(rb + 1));
            },
        },
        Case {
            check: "packed.scales",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_scale(b, 0x0000),
        },
        Case {
            check: "packed.reserved_code",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| {
                let at = offset(b, V_PROJ, "offset") + 100;
                b.patch_payload(true, |p| p[at] |= 0xf0);
            },
        },
        Case {
            check: "alias.target",
            also: &[],
            tensor: Some("extra.alias"),
            make: |b| b.edit(|m| m["aliases"]["extra.alias"] = json!("does.not.exist")),
        },
        Case {
            check: "alias.tied_head",
            also: &[],
            tensor: Some("language_model.lm_head.weight"),
            make: |b| b.edit(|m| m["aliases"] = json!({})),
        },
    ]
}

/// Extra corruptions of the same checks, for broader coverage.
pub fn variants() -> Vec<Case> {
    vec![
        Case {
            check: "packed.scales",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_scale(b, 0xbc00),
        },
        Case {
            check: "packed.scales",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_scale(b, 0x7c00),
        },
        Case {
            check: "packed.scales",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_scale(b, 0x7e01),
        },
        Case {
            check: "packed.reserved_code",
            also: &[],
            tensor: Some(GATE),
            make: |b| {
                // Code 2 of row 5 straddles bytes: bits 6..9.
                let row_bytes = b.record(GATE)["row_bytes"].as_u64().unwrap() as usize;
                let at = offset(b, GATE, "offset") + 5 * row_bytes;
                b.patch_payload(true, |p| {
                    p[at] |= 0xc0;
                    p[at + 1] |= 0x01;
                });
            },
        },
        Case {
            check: "packed.grid",
            also: &[],
            tensor: Some(V_PROJ),
            make: |b| set_field(b, V_PROJ, "grid", bundlescope::format::audio8::full8_grid()),
        },
        Case {
            check: "payload.file",
            also: &[],
            tensor: None,
            make: |b| {
                std::fs::remove_file(b.payload()).unwrap();
                std::fs::create_dir(b.payload()).unwrap();
            },
        },
        Case {
            check: "dense.finite",
            also: &[],
            tensor: Some("language_model.model.norm.weight"),
            make: |b| {
                let at = offset(b, "language_model.model.norm.weight", "offset") + 4 * 3;
                b.patch_payload(true, |p| {
                    p[at..at + 4].copy_from_slice(&f32::INFINITY.to_le_bytes())
                });
            },
        },
    ]
}

fn assert_case(case: &Case) {
    let b = TestBundle::v2();
    (case.make)(&b);
    let run = audit_json(&b.dir);
    assert_eq!(run.code, 1, "{}: exit code\n{}", case.check, run.stderr);
    let report = run.json();
    assert_eq!(report["verdict"], "invalid", "{}", case.check);
    let mut want: Vec<String> = std::iter::once(case.check)
        .chain(case.also.iter().copied())
        .map(String::from)
        .collect();
    want.sort();
    assert_eq!(
        error_checks(&report),
        want,
        "{}: {:#}",
        case.check,
        report["findings"]
    );
    let hits = findings_of(&report, case.check);
    assert!(!hits.is_empty());
    if let Some(t) = case.tensor {
        assert!(
            hits.iter().any(|f| f["tensor"] == t),
            "{}: no finding names {t}: {hits:#?}",
            case.check
        );
    }
    for f in &hits {
        assert!(
            f["message"].as_str().is_some_and(|m| m.len() > 20),
            "terse message: {f}"
        );
    }
}

fn case(id: &str) -> Case {
    cases().into_iter().find(|c| c.check == id).unwrap()
}

macro_rules! check_tests {
    ($($f:ident => $id:literal),* $(,)?) => { $( #[test] fn $f() { assert_case(&case($id)); } )* };
}

check_tests! {
    manifest_parse => "manifest.parse",
    manifest_field => "manifest.field",
    manifest_group_size => "manifest.group_size",
    manifest_tie_word_embeddings => "manifest.tie_word_embeddings",
    manifest_weights_file => "manifest.weights_file",
    manifest_tensor_count => "manifest.tensor_count",
    payload_file => "payload.file",
    payload_length => "payload.length",
    payload_sha256 => "payload.sha256",
    payload_unreferenced => "payload.unreferenced",
    record_field => "record.field",
    record_name_unique => "record.name_unique",
    record_bytes => "record.bytes",
    record_contiguous => "record.contiguous",
    record_within_payload => "record.within_payload",
    record_full8_requires_v2 => "record.full8_requires_v2",
    record_precision => "record.precision",
    dense_format => "dense.format",
    dense_shape => "dense.shape",
    dense_bytes => "dense.bytes",
    dense_finite => "dense.finite",
    packed_grid => "packed.grid",
    packed_dimensions => "packed.dimensions",
    packed_storage => "packed.storage",
    packed_scales => "packed.scales",
    packed_reserved_code => "packed.reserved_code",
    alias_target => "alias.target",
    alias_tied_head => "alias.tied_head",
}

#[test]
fn variants_are_caught_too() {
    for v in variants() {
        assert_case(&v);
    }
}

/// A corruption of the mlx-nvfp4 sample that must trigger `check` with
/// `severity`, and exactly the error checks `errors`.
struct Nvfp4Case {
    check: &'static str,
    severity: &'static str,
    errors: &'static [&'static str],
    make: fn(&Artifact),
}

const NV_DOWN: &str = "model.decoder.layers.1.experts.down_proj";
const NV_UP: &str = "model.decoder.layers.0.experts.gate_up_proj";

fn nvfp4_cases() -> Vec<Nvfp4Case> {
    fn err(check: &'static str, make: fn(&Artifact)) -> Nvfp4Case {
        Nvfp4Case {
            check,
            severity: "error",
            errors: &[],
            make,
        }
    }
    vec![
        err("nvfp4.layout", |a| {
            a.edit(|m| m["quantization"]["layout"] = json!("absolute-scale"))
        }),
        Nvfp4Case {
            errors: &["nvfp4.manifest", "nvfp4.weight_map"],
            ..err("nvfp4.manifest", |a| a.edit(|m| m["shards"] = json!("x")))
        },
        Nvfp4Case {
            errors: &["nvfp4.weight_map", "shard.name"],
            ..err("shard.name", |a| {
                a.edit(|m| m["shards"][1]["file"] = json!("../outside.safetensors"))
            })
        },
        err("shard.header", |a| {
            let shard = a.shard_of(&format!("{NV_DOWN}.weight"));
            let mut bytes = fs::read(&shard).unwrap();
            bytes[..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
            fs::write(&shard, bytes).unwrap();
            a.rehash();
        }),
        err("shard.offsets", |a| {
            let shard = a.shard_of(&format!("{NV_DOWN}.weight"));
            let bytes = fs::read(&shard).unwrap();
            fs::write(&shard, &bytes[..bytes.len() - 100]).unwrap();
            a.rehash();
        }),
        err("nvfp4.weight_map", |a| {
            let name = format!("{NV_DOWN}.scales");
            let other = a.manifest()["shards"][0]["file"].clone();
            a.edit(|m| m["weight_map"][&name] = other);
        }),
        err("nvfp4.experts", |a| {
            let name = format!("{NV_DOWN}.scales");
            let shard = a.shard_of(&name);
            a.edit_header(&shard, |h| h[&name]["dtype"] = json!("I8"));
        }),
        err("nvfp4.global_scale", |a| {
            let name = format!("{NV_DOWN}.global_scale");
            a.patch(&name, |b| {
                b[12..16].copy_from_slice(&f32::NAN.to_le_bytes())
            });
        }),
        err("nvfp4.scales", |a| {
            a.patch(&format!("{NV_UP}.scales"), |b| b[5] = 0x7f)
        }),
        Nvfp4Case {
            severity: "warning",
            ..err("nvfp4.dtype", |a| {
                let shard = a.shard_of("model.norm.weight");
                a.edit_header(&shard, |h| h["model.norm.weight"]["dtype"] = json!("F16"));
            })
        },
    ]
}

fn assert_nvfp4_case(case: &Nvfp4Case) {
    let a = Artifact::from_cli(&[]);
    (case.make)(&a);
    let run = audit_json(&a.dir);
    let report = run.json();
    let mut want: Vec<&str> = case.errors.to_vec();
    if case.severity == "error" && want.is_empty() {
        want.push(case.check);
    }
    want.sort();
    assert_eq!(error_checks(&report), want, "{}: {report:#}", case.check);
    assert_eq!(
        run.code,
        if want.is_empty() { 0 } else { 1 },
        "{}",
        case.check
    );
    let hits = findings_of(&report, case.check);
    assert!(
        hits.iter().any(|f| f["severity"] == case.severity),
        "{}: no {} finding: {report:#}",
        case.check,
        case.severity
    );
    for f in &hits {
        assert!(
            f["message"].as_str().is_some_and(|m| m.len() > 20),
            "terse message: {f}"
        );
    }
}

#[test]
fn every_nvfp4_corruption_is_caught() {
    for case in nvfp4_cases() {
        assert_nvfp4_case(&case);
    }
}

/// A corruption of the GGUF sample (`model.gguf` in its own folder) that
/// must trigger `check` with `severity`, and exactly the error checks
/// `errors` (the check itself when empty and an error).
struct GgufCase {
    check: &'static str,
    severity: &'static str,
    errors: &'static [&'static str],
    tensor: Option<&'static str>,
    make: fn(&std::path::Path),
}

mod gguf_cases {
    use std::path::Path;

    use bundlescope::format::gguf::{GgmlType, Value};
    use bundlescope::sample::gguf as sg;

    pub fn patch(file: &Path, f: impl FnOnce(&mut Vec<u8>)) {
        let mut b = std::fs::read(file).unwrap();
        f(&mut b);
        std::fs::write(file, b).unwrap();
    }

    /// `(data offset, type field, offset field, ne[0] field)` of tensor `name`.
    pub fn at(file: &Path, name: &str) -> (usize, usize, usize, usize) {
        let b = bundlescope::format::open(file).unwrap();
        let t = &b.tensors[b.find(name).unwrap()];
        let info = t.record["info_offset"].as_u64().unwrap() as usize;
        let ndims = t.shape.as_ref().unwrap().len();
        let ne0 = info + 8 + name.len() + 4;
        let ty = ne0 + 8 * ndims;
        (t.offset.unwrap() as usize, ty, ty + 4, ne0)
    }

    pub fn set_u64(file: &Path, at: usize, v: u64) {
        patch(file, |b| b[at..at + 8].copy_from_slice(&v.to_le_bytes()));
    }

    /// Rewrites the file from tensors and key/values of the test's choice.
    pub fn rewrite(file: &Path, kvs: &[(&str, Value)], tensors: &[sg::Tensor]) {
        std::fs::write(file, sg::encode(kvs, tensors, 32)).unwrap();
    }

    pub fn q8(name: &str, blocks: usize) -> sg::Tensor {
        // d = 1.0 and codes 1: any 8-byte shift of it still reads finite scales.
        let mut data = Vec::new();
        for _ in 0..blocks {
            data.extend_from_slice(&0x3c00u16.to_le_bytes());
            data.extend_from_slice(&[1u8; 32]);
        }
        sg::Tensor {
            name: name.into(),
            ty: GgmlType::Q8_0,
            ne: vec![32 * blocks as u64],
            data,
        }
    }
}

fn gguf_cases() -> Vec<GgufCase> {
    use bundlescope::format::gguf::Value;
    use gguf_cases::*;
    fn err(check: &'static str, make: fn(&std::path::Path)) -> GgufCase {
        GgufCase {
            check,
            severity: "error",
            errors: &[],
            tensor: None,
            make,
        }
    }
    vec![
        err("gguf.magic", |f| patch(f, |b| b[0] = b'X')),
        err("gguf.version", |f| {
            patch(f, |b| b[4..8].copy_from_slice(&1u32.to_le_bytes()))
        }),
        err("gguf.header", |f| patch(f, |b| b.truncate(12))),
        err("gguf.counts", |f| set_u64(f, 8, 1 << 40)),
        err("gguf.string", |f| set_u64(f, 24, 1 << 50)),
        // The first key is "general.architecture": its type follows at 24 + 8 + 20.
        err("gguf.kv_type", |f| {
            patch(f, |b| b[52..56].copy_from_slice(&99u32.to_le_bytes()))
        }),
        err("gguf.kv_key", |f| {
            let mut kvs = bundlescope::sample::gguf::sample_kvs(4);
            kvs.push(("general.name", Value::Str("twice".into())));
            rewrite(f, &kvs, &[q8("a", 2)]);
        }),
        err("gguf.alignment", |f| {
            let mut kvs = bundlescope::sample::gguf::sample_kvs(4);
            for kv in &mut kvs {
                if kv.0 == "general.alignment" {
                    kv.1 = Value::U64(32);
                }
            }
            rewrite(f, &kvs, &[q8("a", 2)]);
        }),
        GgufCase {
            tensor: Some("blk.0.attn_q.weight"),
            ..err("gguf.tensor_type", |f| {
                let (_, ty, _, _) = at(f, "blk.0.attn_q.weight");
                patch(f, |b| b[ty..ty + 4].copy_from_slice(&4u32.to_le_bytes()));
            })
        },
        GgufCase {
            tensor: Some("blk.0.attn_q.weight"),
            ..err("gguf.dims", |f| {
                let (_, _, _, ne0) = at(f, "blk.0.attn_q.weight");
                set_u64(f, ne0, 255);
            })
        },
        GgufCase {
            tensor: Some("a"),
            ..err("gguf.offset_aligned", |f| {
                rewrite(
                    f,
                    &bundlescope::sample::gguf::sample_kvs(4),
                    &[q8("a", 1), q8("b", 1)],
                );
                let (_, _, off, _) = at(f, "a");
                set_u64(f, off, 8);
            })
        },
        GgufCase {
            tensor: Some("output.weight"),
            ..err("gguf.offset_range", |f| {
                let (_, _, off, _) = at(f, "output.weight");
                set_u64(f, off, 1 << 40);
            })
        },
        GgufCase {
            // Sorted by start, then end: the longer of the two is named.
            tensor: Some("blk.1.attn_k.weight"),
            ..err("gguf.overlap", |f| {
                // Both Q6_K: output.weight (32 rows) now reads the first
                // rows of blk.1.attn_k.weight (64 rows).
                let b = bundlescope::format::open(f).unwrap();
                let k = &b.tensors[b.find("blk.1.attn_k.weight").unwrap()];
                let rel = k.offset.unwrap() - b.provenance.gguf.as_ref().unwrap().data_start;
                let (_, _, off, _) = at(f, "output.weight");
                set_u64(f, off, rel);
            })
        },
        GgufCase {
            tensor: Some("a"),
            ..err("gguf.name_unique", |f| {
                rewrite(
                    f,
                    &bundlescope::sample::gguf::sample_kvs(4),
                    &[q8("a", 1), q8("a", 1)],
                )
            })
        },
        GgufCase {
            severity: "warning",
            ..err("gguf.uncovered", |f| {
                patch(f, |b| b.extend_from_slice(&[0; 96]))
            })
        },
        GgufCase {
            tensor: Some("blk.0.attn_q.weight"),
            ..err("gguf.scale", |f| {
                let (data, _, _, _) = at(f, "blk.0.attn_q.weight");
                let at = data + 3 * 18;
                patch(f, |b| {
                    b[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes())
                });
            })
        },
        GgufCase {
            tensor: Some("output_norm.weight"),
            ..err("gguf.finite", |f| {
                let (data, _, _, _) = at(f, "output_norm.weight");
                let at = data + 4 * 5;
                patch(f, |b| {
                    b[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes())
                });
            })
        },
    ]
}

/// Variants of the GGUF checks: the dmin of a K-quant, an MXFP4 E8M0 NaN,
/// an infinite BF16, a NaN F64.
fn gguf_variants() -> Vec<GgufCase> {
    use gguf_cases::*;
    vec![
        GgufCase {
            check: "gguf.scale",
            severity: "error",
            errors: &[],
            tensor: Some("token_embd.weight"),
            make: |f| {
                let (data, _, _, _) = at(f, "token_embd.weight");
                let at = data + 5 * 144 + 2; // block 5's dmin
                patch(f, |b| {
                    b[at..at + 2].copy_from_slice(&0xfc00u16.to_le_bytes())
                });
            },
        },
        GgufCase {
            check: "gguf.scale",
            severity: "error",
            errors: &[],
            tensor: Some("blk.1.ffn_gate.weight"),
            make: |f| {
                let (data, _, _, _) = at(f, "blk.1.ffn_gate.weight");
                patch(f, |b| b[data + 7 * 17] = 0xff); // block 7's E8M0 scale: NaN
            },
        },
        GgufCase {
            check: "gguf.finite",
            severity: "error",
            errors: &[],
            tensor: Some("blk.1.ffn_down.weight"),
            make: |f| {
                let (data, _, _, _) = at(f, "blk.1.ffn_down.weight");
                patch(f, |b| {
                    b[data + 100..data + 102].copy_from_slice(&0x7f80u16.to_le_bytes())
                });
            },
        },
        GgufCase {
            check: "gguf.finite",
            severity: "error",
            errors: &[],
            tensor: Some("f64"),
            make: |f| {
                // An F64 vector whose element 5 is NaN, beside a Q8_0 one.
                let mut data = Vec::new();
                for i in 0..64 {
                    let v = if i == 5 { f64::NAN } else { f64::from(i) / 7.0 };
                    data.extend_from_slice(&v.to_le_bytes());
                }
                let f64_tensor = bundlescope::sample::gguf::Tensor {
                    name: "f64".into(),
                    ty: bundlescope::format::gguf::GgmlType::F64,
                    ne: vec![64],
                    data,
                };
                rewrite(
                    f,
                    &bundlescope::sample::gguf::sample_kvs(4),
                    &[q8("a", 1), f64_tensor],
                );
            },
        },
    ]
}

fn assert_gguf_case(case: &GgufCase) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("model.gguf");
    bundlescope::sample::gguf::write(&file, 4).unwrap();
    (case.make)(&file);
    let run = audit_json(&file);
    let report = run.json();
    let mut want: Vec<&str> = case.errors.to_vec();
    if case.severity == "error" && want.is_empty() {
        want.push(case.check);
    }
    want.sort();
    assert_eq!(
        error_checks(&report),
        want,
        "{}: {:#}",
        case.check,
        report["findings"]
    );
    assert_eq!(
        run.code,
        if want.is_empty() { 0 } else { 1 },
        "{}",
        case.check
    );
    let hits = findings_of(&report, case.check);
    assert!(
        hits.iter().any(|f| f["severity"] == case.severity),
        "{}: no {} finding: {:#}",
        case.check,
        case.severity,
        report["findings"]
    );
    if let Some(t) = case.tensor {
        assert!(
            hits.iter().any(|f| f["tensor"] == t),
            "{}: no finding names {t}: {hits:#?}",
            case.check
        );
    }
    for f in &hits {
        assert!(f["offset"].is_u64(), "{}: no offset: {f}", case.check);
        assert!(
            f["message"].as_str().is_some_and(|m| m.len() > 20),
            "terse message: {f}"
        );
    }
}

#[test]
fn every_gguf_corruption_is_caught() {
    for case in gguf_cases().iter().chain(&gguf_variants()) {
        assert_gguf_case(case);
    }
}

/// A corruption of an MLX-written MLX-LM checkpoint (`args` for
/// tests/mlx_lm_checkpoint.py) that must trigger exactly the error checks
/// `errors` (`check` among them).
struct MlxCase {
    check: &'static str,
    args: &'static [&'static str],
    errors: &'static [&'static str],
    make: fn(&Ckpt),
}

const MX_DOWN: &str = "model.layers.0.mlp.down_proj";
const MX_SWITCH: &str = "model.layers.1.mlp.switch_mlp.down_proj";

fn mlx_cases() -> Vec<MlxCase> {
    fn one(check: &'static str, make: fn(&Ckpt)) -> MlxCase {
        MlxCase {
            check,
            args: &["--mode", "affine"],
            errors: &[],
            make,
        }
    }
    vec![
        one("mlxlm.config", |k| {
            k.edit_config(|c| c["quantization"]["mode"] = json!("int4"))
        }),
        one("mlxlm.index", |k| {
            k.edit_index(|i| i["weight_map"] = json!("x"))
        }),
        one("mlxlm.shards", |k| {
            // A shard the index does not name: mlx-lm would load it anyway.
            let path = k.dir.join("model-extra.safetensors");
            bundlescope::format::safetensors::write(
                &path,
                &[bundlescope::format::safetensors::WriteTensor {
                    name: "extra.weight",
                    dtype: "BF16",
                    shape: &[4],
                    data: &[0; 8],
                }],
            )
            .unwrap();
        }),
        one("mlxlm.weight_map", |k| {
            let name = format!("{MX_SWITCH}.scales");
            let here = k.shard_name(&name);
            let other = [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
            ]
            .into_iter()
            .find(|s| *s != here)
            .unwrap();
            k.edit_index(|i| i["weight_map"][&name] = json!(other));
        }),
        MlxCase {
            errors: &["shard.header", "mlxlm.module"],
            ..one("shard.header", |k| {
                let shard = k.shard_of(&format!("{MX_DOWN}.scales"));
                let mut bytes = fs::read(&shard).unwrap();
                bytes[..8].copy_from_slice(&(1u64 << 62).to_le_bytes());
                fs::write(&shard, bytes).unwrap();
            })
        },
        MlxCase {
            errors: &["shard.offsets", "mlxlm.module"],
            ..one("shard.offsets", |k| {
                let shard = k.shard_of(&format!("{MX_DOWN}.scales"));
                let bytes = fs::read(&shard).unwrap();
                fs::write(&shard, &bytes[..bytes.len() - 100]).unwrap();
            })
        },
        one("mlxlm.module", |k| {
            // Biases in another dtype than their scales (same byte size).
            let name = format!("{MX_DOWN}.biases");
            let shard = k.shard_of(&name);
            k.edit_header(&shard, |h| h[&name]["dtype"] = json!("F16"));
        }),
        one("mlxlm.override", |k| {
            k.edit_config(|c| {
                c["quantization"]["model.layers.9.mlp.down_proj"] =
                    json!({"group_size": 64, "bits": 4})
            })
        }),
        one("mlxlm.quant_config", |k| {
            k.edit_config(|c| c["quantization"]["bits"] = json!(8))
        }),
        one("mlxlm.scales", |k| {
            // A NaN bfloat16 scale.
            k.patch(&format!("{MX_DOWN}.scales"), |b| {
                b[6..8].copy_from_slice(&0x7fc0u16.to_le_bytes())
            })
        }),
        MlxCase {
            args: &["--mode", "mxfp4"],
            ..one("mlxlm.scales", |k| {
                k.patch(&format!("{MX_SWITCH}.scales"), |b| b[100] = 0xff)
            })
        },
        MlxCase {
            args: &["--mode", "nvfp4"],
            ..one("mlxlm.scales", |k| {
                // A negative E4M3 scale.
                k.patch(&format!("{MX_DOWN}.scales"), |b| b[3] = 0x80 | 0x30)
            })
        },
        MlxCase {
            // A global scale the config does not ask for: mlx-lm builds
            // the layer without one and refuses the tensor.
            args: &["--mode", "nvfp4", "--global-scale"],
            ..one("mlxlm.module", |k| {
                k.edit_config(|c| {
                    for key in ["quantization", "quantization_config"] {
                        c[key][MX_SWITCH]["global_scale"] = json!(false);
                    }
                })
            })
        },
        MlxCase {
            // Biases on a float-mode module (mxfp4 has none): a dense
            // tensor of the checkpoint renamed to be them.
            args: &["--mode", "mxfp4"],
            ..one("mlxlm.module", |k| {
                let (from, to) = (
                    "model.layers.0.input_layernorm.weight",
                    format!("{MX_DOWN}.biases"),
                );
                let shard = k.shard_of(from);
                k.edit_header(&shard, |h| {
                    let v = h.remove(from).unwrap();
                    h.insert(to.clone(), v);
                });
                k.edit_index(|i| {
                    let m = i["weight_map"].as_object_mut().unwrap();
                    let v = m.remove(from).unwrap();
                    m.insert(to.clone(), v);
                });
            })
        },
        MlxCase {
            args: &["--mode", "mxfp8"],
            ..one("mlxlm.codes", |k| {
                k.patch(&format!("{MX_DOWN}.weight"), |b| b[77] = 0x7f)
            })
        },
        one("dense.finite", |k| {
            k.patch("model.norm.weight", |b| {
                b[10..12].copy_from_slice(&0x7f80u16.to_le_bytes())
            })
        }),
        one("checksums.file", |k| {
            fs::write(k.dir.join("SHA256SUMS"), "not-a-hash  model.safetensors\n").unwrap()
        }),
        one("payload.sha256", |k| {
            let shard = k.shard_name(&format!("{MX_DOWN}.weight"));
            fs::write(
                k.dir.join("SHA256SUMS"),
                format!("{}  {shard}\n", "ab".repeat(32)),
            )
            .unwrap()
        }),
    ]
}

#[test]
fn every_mlx_lm_corruption_is_caught() {
    let Some(clean) = Ckpt::mlx(&["--mode", "affine"]) else {
        require_or_skip("Python with MLX", false);
        return;
    };
    // The clean copy is valid, so each case's findings are its own.
    let run = audit_json(&clean.dir);
    assert_eq!(error_checks(&run.json()), Vec::<String>::new());
    for case in mlx_cases() {
        let k = Ckpt::mlx(case.args).unwrap();
        (case.make)(&k);
        let run = audit_json(&k.dir);
        let report = run.json();
        let mut want: Vec<&str> = case.errors.to_vec();
        if want.is_empty() {
            want.push(case.check);
        }
        want.sort();
        assert_eq!(error_checks(&report), want, "{}: {report:#}", case.check);
        assert_eq!(run.code, 1, "{}", case.check);
        for f in findings_of(&report, case.check) {
            assert!(
                f["message"].as_str().is_some_and(|m| m.len() > 20),
                "terse message: {f}"
            );
        }
    }
}

/// Every check in the registry has a corruption case that runs in this
/// file (or a named reason why it is tested elsewhere).
#[test]
fn every_registered_check_has_a_case() {
    let elsewhere: &[(&str, &str)] = &[
        (
            "bundle.changed",
            "needs a change while the audit runs: tests/engine.rs",
        ),
        (
            "tensor.duplicate",
            "a warning, exit 0: tensor_duplicate_is_a_warning_naming_its_twin",
        ),
        (
            "names.confusable",
            "a warning on names written to look alike: tests/names.rs",
        ),
        (
            "bundle.open",
            "no bundle to corrupt, exit 2: tests/robustness.rs (empty_folder_is_not_a_bundle and others)",
        ),
        (
            "bundle.unsupported",
            "a recognised, unsupported format, exit 2: tests/robustness.rs (unsupported_formats_get_an_unsupported_report)",
        ),
    ];
    let covered: Vec<&str> = cases()
        .iter()
        .map(|c| c.check)
        .chain(nvfp4_cases().iter().map(|c| c.check))
        .chain(gptq_cases().iter().map(|c| c.check))
        .chain(gguf_cases().iter().map(|c| c.check))
        .chain(mlx_cases().iter().map(|c| c.check))
        .chain(common::oms::cases().iter().map(|c| c.check))
        .chain(elsewhere.iter().map(|(id, _)| *id))
        .collect();
    for c in bundlescope::finding::checks::ALL {
        let id = c.id.as_str();
        assert!(
            covered.contains(&id),
            "no corruption case for {id} ({})",
            c.rule
        );
    }
    for id in &covered {
        assert!(
            bundlescope::finding::CheckId::lookup(id).is_some(),
            "case for an unregistered check id {id}"
        );
    }
}

/// A corruption of a calibrated GPTQ-Q4 overlay (written by the real
/// binary on top of a sample parent) that must trigger `check` with
/// `severity`, and exactly the error checks `errors`. `beside`: the parent
/// lies beside the overlay (found as a sibling); `make` may return a
/// folder to pass as `--parent`.
struct GptqCase {
    check: &'static str,
    severity: &'static str,
    errors: &'static [&'static str],
    beside: bool,
    tensor: Option<&'static str>,
    make: fn(&Overlay) -> Option<std::path::PathBuf>,
}

/// In `errors`: the case's own check.
const SELF: &str = "<self>";

fn gptq_cases() -> Vec<GptqCase> {
    fn err(check: &'static str, make: fn(&Overlay) -> Option<std::path::PathBuf>) -> GptqCase {
        GptqCase {
            check,
            severity: "error",
            errors: &[SELF],
            beside: false,
            tensor: None,
            make,
        }
    }
    vec![
        err("provenance.field", |o| {
            o.edit(|m| {
                m["provenance"]
                    .as_object_mut()
                    .unwrap()
                    .remove("calibration");
            });
            None
        }),
        GptqCase {
            tensor: Some(V_PROJ),
            ..err("provenance.partition", |o| {
                // An overlay tensor listed under copied too, with its true hash.
                let sha = o.range_sha(V_PROJ);
                o.edit(|m| {
                    m["provenance"]["copied"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": V_PROJ, "range_sha256": sha}))
                });
                None
            })
        },
        GptqCase {
            tensor: Some(NORM),
            ..err("provenance.partition", |o| {
                // A copied tensor in neither list.
                o.edit(|m| {
                    m["provenance"]["copied"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|e| e["name"] != NORM)
                });
                None
            })
        },
        GptqCase {
            tensor: Some(GATE),
            ..err("provenance.overlay_q4", |o| {
                // A q3 tensor moved from copied to overlay, identity redone.
                o.edit(|m| {
                    let p = &mut m["provenance"];
                    p["copied"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|e| e["name"] != GATE);
                    p["overlay"].as_array_mut().unwrap().push(json!(GATE));
                });
                o.reidentify();
                None
            })
        },
        GptqCase {
            tensor: Some(NORM),
            ..err("provenance.copied_hash", |o| {
                o.edit(|m| {
                    for e in m["provenance"]["copied"].as_array_mut().unwrap() {
                        if e["name"] == NORM {
                            e["range_sha256"] = json!("0".repeat(64));
                        }
                    }
                });
                None
            })
        },
        err("provenance.overlay_identity", |o| {
            o.edit(|m| m["provenance"]["overlay_identity_sha256"] = json!("ab".repeat(32)));
            None
        }),
        err("provenance.parent", |o| {
            // --parent names a valid bundle that is not the declared parent.
            let other = o.dir.parent().unwrap().join("not-the-parent");
            let run = cli(&["sample", other.to_str().unwrap(), "--seed", "8"]);
            assert_eq!(run.code, 0, "{}", run.stderr);
            Some(other)
        }),
        GptqCase {
            beside: true,
            tensor: Some(NORM),
            ..err("provenance.parent_copied", |o| {
                // The overlay's copy of a dense tensor altered, its declared
                // range hash updated: only the parent can tell.
                let mut b = o.bytes_of(NORM);
                b[4..8].copy_from_slice(&1.5f32.to_le_bytes());
                o.set_bytes(NORM, &b);
                let sha = o.range_sha(NORM);
                o.edit(|m| {
                    for e in m["provenance"]["copied"].as_array_mut().unwrap() {
                        if e["name"] == NORM {
                            e["range_sha256"] = json!(sha);
                        }
                    }
                });
                None
            })
        },
        GptqCase {
            beside: true,
            tensor: Some(V_PROJ),
            ..err("provenance.parent_overlay", |o| {
                // An overlay tensor put back to the parent's exact bytes.
                let parent = common::TestBundle {
                    tmp: tempfile::tempdir().unwrap(),
                    dir: o.parent.clone(),
                };
                let r = parent.record(V_PROJ);
                let (off, n) = (
                    r["offset"].as_u64().unwrap() as usize,
                    r["bytes"].as_u64().unwrap() as usize,
                );
                let bytes = fs::read(parent.payload()).unwrap()[off..off + n].to_vec();
                o.set_bytes(V_PROJ, &bytes);
                o.reidentify();
                None
            })
        },
        GptqCase {
            severity: "info",
            errors: &[],
            beside: true,
            ..err("provenance.parent_scales", |_| None)
        },
    ]
}

fn assert_gptq_case(case: &GptqCase) {
    let o = Overlay::new(case.beside);
    let parent = (case.make)(&o);
    let mut args = vec![
        "audit".to_string(),
        o.dir.display().to_string(),
        "--json".into(),
    ];
    if let Some(p) = parent {
        args.extend(["--parent".to_string(), p.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = cli(&args);
    let report = run.json();
    let mut want: Vec<&str> = case
        .errors
        .iter()
        .map(|&e| if e == SELF { case.check } else { e })
        .collect();
    want.sort();
    assert_eq!(error_checks(&report), want, "{}: {report:#}", case.check);
    assert_eq!(
        run.code,
        if want.is_empty() { 0 } else { 1 },
        "{}",
        case.check
    );
    let hits = findings_of(&report, case.check);
    assert!(
        hits.iter().any(|f| f["severity"] == case.severity),
        "{}: no {} finding: {report:#}",
        case.check,
        case.severity
    );
    if let Some(t) = case.tensor {
        assert!(
            hits.iter().any(|f| f["tensor"] == t),
            "{}: no finding names {t}: {hits:#?}",
            case.check
        );
    }
    for f in &hits {
        assert!(
            f["message"].as_str().is_some_and(|m| m.len() > 20),
            "terse message: {f}"
        );
    }
}

#[test]
fn every_gptq_overlay_corruption_is_caught() {
    for case in gptq_cases() {
        assert_gptq_case(&case);
    }
}

/// `tensor.duplicate`: one layer's q4 tensor overwritten with another
/// layer's bytes (payload re-hashed, so every other rule holds) is a
/// warning on the copy that names its twin; the verdict stays valid.
#[test]
fn tensor_duplicate_is_a_warning_naming_its_twin() {
    let b = TestBundle::v2();
    let twin = "language_model.model.layers.0.mlp.down_proj.weight";
    let copy = "language_model.model.layers.1.mlp.down_proj.weight";
    let (from, to) = (offset(&b, twin, "offset"), offset(&b, copy, "offset"));
    let n = b.record(twin)["bytes"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| {
        let src = p[from..from + n].to_vec();
        p[to..to + n].copy_from_slice(&src);
    });
    let run = audit_json(&b.dir);
    let report = run.json();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(error_checks(&report).is_empty(), "{report:#}");
    let hits = findings_of(&report, "tensor.duplicate");
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert_eq!(hits[0]["severity"], "warning");
    assert_eq!(hits[0]["tensor"], copy);
    assert!(
        hits[0]["message"].as_str().unwrap().contains(twin),
        "{}",
        hits[0]
    );
    // The undamaged sample has no duplicate.
    let clean = TestBundle::v2();
    assert!(findings_of(&audit_json(&clean.dir).json(), "tensor.duplicate").is_empty());
}

#[test]
fn every_oms_signature_corruption_is_caught() {
    if !common::oms::available() {
        return;
    }
    for case in common::oms::cases() {
        common::oms::assert_case(&case);
    }
}
