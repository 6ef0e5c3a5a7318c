use super::*;
use crate::sample::gguf::{self as sg, Tensor};

fn parse_bytes(bytes: &[u8]) -> (Header, Vec<Finding>) {
    let mut f = Vec::new();
    let h = header::parse(bytes, "x.gguf", &mut f);
    (h, f)
}

fn ids(f: &[Finding]) -> Vec<&str> {
    f.iter().map(|f| f.check.as_str()).collect()
}

fn small() -> Vec<u8> {
    let mut rng = crate::util::Rng::new(3);
    let t = Tensor {
        name: "w".into(),
        ty: GgmlType::Q4_0,
        ne: vec![64, 2],
        data: sg::random_blocks(GgmlType::Q4_0, 4, &mut rng),
    };
    sg::encode(&sg::sample_kvs(5), &[t], 32)
}

#[test]
fn a_valid_header_parses_completely() {
    let (h, f) = parse_bytes(&small());
    assert!(f.is_empty(), "{f:?}");
    assert!(h.complete);
    assert_eq!(h.version, 3);
    assert_eq!(h.tensors[0].ne, vec![64, 2]);
    assert_eq!(
        h.get("general.architecture").and_then(Value::as_str),
        Some("llama")
    );
    assert_eq!(h.data_start % 32, 0);
}

#[test]
fn every_truncation_is_a_finding_never_a_panic() {
    let bytes = small();
    for n in 0..bytes.len() {
        let (h, f) = parse_bytes(&bytes[..n]);
        if !h.complete {
            assert_eq!(f.len(), 1, "cut at {n}: {f:?}");
        }
    }
}

#[test]
fn huge_claims_are_refused_before_allocating() {
    let mut bytes = small();
    // tensor_count = 2^62
    bytes[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let (_, f) = parse_bytes(&bytes);
    assert_eq!(ids(&f), ["gguf.counts"]);
    // The first key's length: 2^60.
    let mut bytes = small();
    bytes[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let (_, f) = parse_bytes(&bytes);
    assert_eq!(ids(&f), ["gguf.string"]);
    assert_eq!(f[0].offset, Some(24));
}

#[test]
fn split_names() {
    assert_eq!(split_name("m-00002-of-00003.gguf"), Some(("m", 2, 3)));
    assert_eq!(split_name("m-00004-of-00003.gguf"), None);
    assert_eq!(split_name("m.gguf"), None);
}

#[test]
fn array_counts_and_unknown_types_are_refused_before_allocating() {
    let kvs = [("a", Value::Array(0, vec![Value::U8(1)]))];
    let mut bytes = sg::encode(&kvs, &[], 32);
    // magic 4, version 4, counts 16, key length 8, "a", type 4, item type 4.
    bytes[41..49].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let (h, f) = parse_bytes(&bytes);
    assert!(!h.complete);
    assert_eq!(ids(&f), ["gguf.counts"]);
    assert_eq!(f[0].offset, Some(41));
    let mut bytes = sg::encode(&kvs, &[], 32);
    bytes[37..41].copy_from_slice(&13u32.to_le_bytes());
    let (_, f) = parse_bytes(&bytes);
    assert_eq!(ids(&f), ["gguf.kv_type"]);
    // Arrays nested deeper than three levels.
    let deep = Value::Array(
        9,
        vec![Value::Array(
            9,
            vec![Value::Array(9, vec![Value::Array(0, vec![])])],
        )],
    );
    let (_, f) = parse_bytes(&sg::encode(&[("d", deep)], &[], 32));
    assert_eq!(ids(&f), ["gguf.kv_type"]);
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for (v, ok) in [
        (Value::U32(64), true),
        (Value::U32(48), false),
        (Value::U32(0), false),
        (Value::U64(32), false),
    ] {
        let (h, f) = parse_bytes(&sg::encode(&[("general.alignment", v.clone())], &[], 32));
        assert_eq!(f.is_empty(), ok, "{v:?}: {f:?}");
        assert_eq!(h.alignment, if ok { 64 } else { 32 });
    }
}
