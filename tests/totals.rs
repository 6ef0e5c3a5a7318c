//! Parameter counts by stored dtype (`totals.by_dtype`): a plain
//! safetensors file of several dtypes counts, per dtype, the tensors, the
//! elements of their shapes and their bytes, as the test computes them from
//! what it wrote; the text summary and the Markdown report show the same.

mod common;

use std::collections::BTreeMap;

use bundlescope::format::safetensors::{WriteTensor, write};
use common::{audit_json, cli};

#[test]
fn a_plain_file_counts_parameters_by_dtype() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("model.safetensors");
    // (name, dtype, shape, bytes per element); the values are zeros.
    let specs: &[(&str, &str, &[u64], u64)] = &[
        ("a.weight", "F32", &[3, 4], 4),
        ("b.weight", "BF16", &[5], 2),
        ("c.weight", "BF16", &[2, 3], 2),
        ("d.position_ids", "I64", &[2, 2], 8),
        ("e.weight", "F8_E4M3", &[7], 1),
    ];
    let data: Vec<Vec<u8>> = specs
        .iter()
        .map(|(_, _, shape, size)| vec![0; (shape.iter().product::<u64>() * size) as usize])
        .collect();
    let tensors: Vec<WriteTensor> = specs
        .iter()
        .zip(&data)
        .map(|((name, dtype, shape, _), data)| WriteTensor {
            name,
            dtype,
            shape,
            data,
        })
        .collect();
    write(&path, &tensors).unwrap();

    let mut want: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for (_, dtype, shape, size) in specs {
        let n: u64 = shape.iter().product();
        let e = want.entry(dtype).or_default();
        *e = (e.0 + 1, e.1 + n, e.2 + n * size);
    }
    let run = audit_json(&path);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let r = run.json();
    let got: BTreeMap<&str, (u64, u64, u64)> = r["totals"]["by_dtype"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let n = |f: &str| v[f].as_u64().unwrap();
            (k.as_str(), (n("tensors"), n("parameters"), n("bytes")))
        })
        .collect();
    assert_eq!(got, want);

    let p = path.to_str().unwrap();
    let text = cli(&["audit", p]).stdout;
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("BF16 "))
        .unwrap_or_else(|| panic!("no BF16 row: {text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[..3], ["BF16", "2", "11"], "{row}");
    let md = cli(&["audit", p, "--markdown"]).stdout;
    assert!(md.contains("| `I64` | 1 | 4 |"), "{md}");
}
