//! Plain safetensors checkpoints with F8_E4M3, F8_E5M2 and F64 tensors:
//! the audit decodes them (statistics equal an independent decoding of the
//! bytes, written here from the formats' definitions), a NaN or infinite
//! value is one `dense.finite` error at its byte offset, `export` writes
//! the exact float32 values (F64 narrowed as numpy's `astype(float32)`,
//! checked against numpy where the project's Python has it), and `hist`
//! shows them. A dtype bundlescope does not decode (F8_E8M0) is said to
//! be one, not broken metadata.
//!
//! Integer (I8 … U64) and BOOL tensors are decoded too: a file numpy
//! writes (its header built by hand) has statistics equal numpy's and
//! exports equal to numpy's `astype(float32)` bit for bit; the real
//! all-MiniLM-L6-v2's I64 position ids have their values; and an MLX
//! quantized module's U32 codes with no quantization block stay listed,
//! not read as integers.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// One tensor to write: name, safetensors dtype, shape, bytes.
type Entry<'a> = (&'a str, &'a str, Vec<u64>, Vec<u8>);

/// Writes a safetensors file by hand and returns each tensor's absolute
/// begin offset, in the order given.
fn write_safetensors(path: &Path, tensors: &[Entry]) -> Vec<u64> {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    let mut data = Vec::new();
    let mut begins = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let end = offset + bytes.len() as u64;
        header.insert(
            name.to_string(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}),
        );
        begins.push(offset);
        data.extend_from_slice(bytes);
        offset = end;
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    fs::write(path, out).unwrap();
    let start = 8 + h.len() as u64;
    begins.iter().map(|b| start + b).collect()
}

/// An 8-bit float's value from its definition: sign, `exp` exponent bits
/// of bias `2^(exp-1) - 1`, the rest mantissa. E4M3 is the "fn" variant
/// (no infinities, NaN only at S.1111.111); E5M2 is IEEE-like.
fn f8_value(b: u8, exp: u32) -> f64 {
    let man_bits = 7 - exp;
    let bias = (1i32 << (exp - 1)) - 1;
    let e = i32::from(b >> man_bits) & ((1 << exp) - 1);
    let m = f64::from(b & ((1 << man_bits) - 1));
    let frac = m / f64::from(1u32 << man_bits);
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let top = (1 << exp) - 1;
    if exp == 4 && e == top && m == 7.0 {
        return f64::NAN;
    }
    if exp == 5 && e == top {
        return if m == 0.0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if e == 0 {
        sign * frac * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + frac) * 2f64.powi(e - bias)
    }
}

fn e4m3(b: u8) -> f64 {
    f8_value(b, 4)
}

fn e5m2(b: u8) -> f64 {
    f8_value(b, 5)
}

/// Every finite byte of an F8 format, `copies` times, each copy in another
/// order (so the tensor spans several of the scanner's blocks).
fn all_finite(decode: fn(u8) -> f64, copies: usize) -> Vec<u8> {
    let finite: Vec<u8> = (0..=255u8).filter(|&b| decode(b).is_finite()).collect();
    let n = finite.len();
    let mut out = Vec::new();
    for c in 0..copies {
        // 37 and 41 are prime to 254 and 248: a permutation per copy.
        let step = if c % 2 == 0 { 37 } else { 41 };
        out.extend((0..n).map(|i| finite[(i * step + c) % n]));
    }
    out
}

/// F64 values: seeded normals at several scales, and the narrowing's
/// corner cases (ties to even, f32 subnormals and underflow, signed zero).
fn f64_values() -> Vec<f64> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut v = Vec::new();
    for i in 0..3000 {
        let (u1, u2) = (uniform(), uniform());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        v.push(z * [0.02, 1.0, 1e-3, 30.0][i % 4]);
    }
    v.extend([
        1.0 + 2f64.powi(-24),
        1.0 + 3.0 * 2f64.powi(-24),
        -(1.0 + 2f64.powi(-24) + 2f64.powi(-50)),
        3e-45,
        1e-46,
        -1e-40,
        -0.0,
        0.0,
        1e30,
        -3.0e38,
    ]);
    v
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The tensors of the clean checkpoint.
struct Clean {
    e4m3: Vec<u8>,
    e5m2: Vec<u8>,
    f64: Vec<f64>,
    /// F64 values beyond f32's range: finite in the file, ±inf once
    /// narrowed to float32.
    wide: Vec<f64>,
}

impl Clean {
    fn new() -> Self {
        Self {
            e4m3: all_finite(e4m3, 20),
            e5m2: all_finite(e5m2, 20),
            f64: f64_values(),
            wide: vec![1e150, -1e39, 2.5, f64::from(f32::MAX) * 1.000001],
        }
    }

    /// Writes the checkpoint with the given bytes; the begin offsets of
    /// `w.e4m3`, `w.e5m2`, `w.f64` and `w.wide`.
    fn write(&self, path: &Path, e4m3: &[u8], e5m2: &[u8], f64s: &[f64]) -> Vec<u64> {
        write_safetensors(
            path,
            &[
                ("w.e4m3", "F8_E4M3", vec![20, 254], e4m3.to_vec()),
                ("w.e5m2", "F8_E5M2", vec![20, 248], e5m2.to_vec()),
                ("w.f64", "F64", vec![f64s.len() as u64], f64_bytes(f64s)),
                ("w.wide", "F64", vec![2, 2], f64_bytes(&self.wide)),
                ("w.e8m0", "F8_E8M0", vec![4], vec![127, 128, 1, 254]),
            ],
        )
    }
}

/// The report row of tensor `name`.
fn row<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

/// Checks a value summary against values decoded independently: count,
/// min, max and mean exactly where the sums are exact (`exact_mean`),
/// else to 1e-12; std to 1e-9; and, where `bins` is set, each value's
/// linear bin as the summary's edges place it.
fn check_summary(name: &str, v: &Value, values: &[f64], exact_mean: bool, bins: bool) {
    let finite: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    assert_eq!(v["count"], values.len() as u64, "{name}: {v}");
    assert_eq!(
        v["nonfinite"],
        (values.len() - finite.len()) as u64,
        "{name}"
    );
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(v["min"].as_f64().unwrap(), min, "{name}");
    assert_eq!(v["max"].as_f64().unwrap(), max, "{name}");
    let n = finite.len() as f64;
    let mean = finite.iter().sum::<f64>() / n;
    let got = v["mean"].as_f64().unwrap();
    if exact_mean {
        assert_eq!(got, mean, "{name}");
    } else {
        assert!(
            (got - mean).abs() <= 1e-12 * mean.abs().max(1e-3),
            "{name}: {got} vs {mean}"
        );
    }
    let var = finite.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let std = v["std"].as_f64().unwrap();
    assert!(
        (std - var.sqrt()).abs() <= 1e-9 * var.sqrt(),
        "{name}: std {std} vs {}",
        var.sqrt()
    );
    if bins {
        let b = v["bins"].as_array().unwrap();
        assert_eq!(b.len(), 64, "{name}");
        let width = (max - min) / 64.0;
        let mut want = [0u64; 64];
        for x in &finite {
            want[(((x - min) / width).floor() as usize).min(63)] += 1;
        }
        let have: Vec<u64> = b.iter().map(|b| b["count"].as_u64().unwrap()).collect();
        assert_eq!(have, want, "{name}: bins");
    }
}

/// The float32 values `export` writes for `name`, and the .npy shape.
fn export(file: &Path, name: &str, out: &Path) -> (Vec<u64>, Vec<f32>) {
    let r = common::export_tensor(file.to_str().unwrap(), name, out.to_str().unwrap());
    assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    let n = common::npy::read(out);
    let values = n.values();
    (n.shape, values)
}

/// Bit-for-bit equality of float32 values, NaNs compared as "both NaN".
fn assert_same_f32(name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{name}[{i}]: {g:e} ({:#010x}) vs {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

#[test]
fn f8_and_f64_tensors_are_decoded_checked_exported_and_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    fs::create_dir(&dir).unwrap();
    let clean = Clean::new();
    let file = dir.join("model.safetensors");
    clean.write(&file, &clean.e4m3, &clean.e5m2, &clean.f64);

    // Audit: valid, nothing said, each tensor's statistics those of the
    // independently decoded values.
    let run = audit_json(&file);
    let report = run.json();
    assert_eq!(run.code, 0, "{report:#}");
    assert_eq!(report["verdict"], "valid");
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        0,
        "{report:#}"
    );
    let e4: Vec<f64> = clean.e4m3.iter().map(|&b| e4m3(b)).collect();
    let e5: Vec<f64> = clean.e5m2.iter().map(|&b| e5m2(b)).collect();
    // Every F8 value and sum is exact in f64: the mean is exactly zero
    // (each finite byte comes with its negation).
    let values = |name: &str| row(&report, name)["stats"]["values"].clone();
    check_summary("w.e4m3", &values("w.e4m3"), &e4, true, true);
    check_summary("w.e5m2", &values("w.e5m2"), &e5, true, true);
    assert_eq!(values("w.e4m3")["max"], 448.0);
    assert_eq!(values("w.e5m2")["max"], 57344.0);
    check_summary("w.f64", &values("w.f64"), &clean.f64, false, false);
    check_summary("w.wide", &values("w.wide"), &clean.wide, true, false);
    // The F64 bins hold every value (binned at bfloat16 precision, so the
    // edges are not checked value by value).
    let f64_bins: u64 = values("w.f64")["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(f64_bins, clean.f64.len() as u64);
    // The F8_E8M0 tensor is listed without values.
    assert!(
        row(&report, "w.e8m0")["stats"].is_null(),
        "{:#}",
        row(&report, "w.e8m0")
    );

    // Export: the exact float32 values, F64 narrowed to nearest.
    let npy = tmp.path().join("out.npy");
    let (shape, got) = export(&file, "w.e4m3", &npy);
    assert_eq!(shape, [20, 254]);
    let want: Vec<f32> = e4.iter().map(|&x| x as f32).collect();
    assert!(e4.iter().zip(&want).all(|(a, b)| f64::from(*b) == *a));
    assert_same_f32("w.e4m3", &got, &want);
    let (shape, got) = export(&file, "w.e5m2", &npy);
    assert_eq!(shape, [20, 248]);
    let want: Vec<f32> = e5.iter().map(|&x| x as f32).collect();
    assert_same_f32("w.e5m2", &got, &want);
    let (shape, got) = export(&file, "w.f64", &npy);
    assert_eq!(shape, [clean.f64.len() as u64]);
    let want: Vec<f32> = clean.f64.iter().map(|&x| x as f32).collect();
    assert_same_f32("w.f64", &got, &want);
    let (_, got) = export(&file, "w.wide", &npy);
    assert_eq!(
        got,
        [f32::INFINITY, f32::NEG_INFINITY, 2.5, f32::INFINITY],
        "beyond f32's range: ±inf, as numpy narrows"
    );
    numpy_agrees(&file, tmp.path());

    // hist: the same summary, no finding.
    for name in ["w.e4m3", "w.e5m2", "w.f64"] {
        let r = cli(&["hist", file.to_str().unwrap(), "--tensor", name, "--json"]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        assert!(r.stderr.is_empty(), "{name}: {}", r.stderr);
        let h = r.json();
        assert_eq!(h["values"], values(name), "{name}");
        let text = cli(&["hist", file.to_str().unwrap(), "--tensor", name]);
        assert_eq!(text.code, 0, "{name}: {}", text.stderr);
        assert!(text.stdout.contains("non-finite 0"), "{}", text.stdout);
    }
    // A dtype that is listed, not decoded, is said to be one.
    let (path, out) = (file.to_str().unwrap(), npy.to_str().unwrap());
    let hist: &[&str] = &["hist", path, "--tensor", "w.e8m0"];
    let export: &[&str] = &["export", path, "--tensor", "w.e8m0", "--out", out];
    for args in [hist, export] {
        let r = cli(args);
        assert_ne!(r.code, 0, "{args:?}");
        assert!(
            r.stderr.contains("w.e8m0 is F8_E8M0")
                && r.stderr.contains("does not decode their values")
                && !r.stderr.contains("broken metadata"),
            "{args:?}: {}",
            r.stderr
        );
    }
}

/// numpy's reading of the clean file: `astype(float32)` of the F64
/// tensors equals `export` bit for bit, and numpy's min, max and mean of
/// the F64 values equal the report's. F8 has no numpy dtype without
/// ml_dtypes (not installed here); E5M2 is checked as the top byte of a
/// numpy float16.
/// Runs Python with numpy on `args` and reads the JSON it prints; `None`
/// (the test skipped, with the reason) where Python or numpy is missing or
/// the script fails.
fn numpy_json(args: &[&str]) -> Option<Value> {
    let Some(o) = run_python(args) else {
        require_or_skip("Python with numpy", false);
        return None;
    };
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        require_or_skip(&format!("Python with numpy ({err})"), false);
        return None;
    }
    Some(serde_json::from_slice(&o.stdout).unwrap())
}

fn numpy_agrees(file: &Path, tmp: &Path) {
    let script = r#"
import json, sys
import numpy as np
path, out = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = int.from_bytes(raw[:8], "little")
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
def tensor(name):
    e = header[name]
    b, end = e["data_offsets"]
    return data[b:end], e
res = {}
for name in ["w.f64", "w.wide"]:
    b, e = tensor(name)
    with np.errstate(over="ignore"):
        v = np.frombuffer(b, dtype="<f8")
        f = v.astype(np.float32)
    np.save(out + "/" + name + ".npy", f.reshape(e["shape"]))
    res[name] = {"min": float(v.min()), "max": float(v.max()), "mean": float(v.mean())}
b, e = tensor("w.e5m2")
h = (np.frombuffer(b, dtype=np.uint8).astype(np.uint16) << 8).view(np.float16)
np.save(out + "/w.e5m2.npy", h.astype(np.float32).reshape(e["shape"]))
print(json.dumps(res))
"#;
    let Some(theirs) = numpy_json(&["-c", script, file.to_str().unwrap(), tmp.to_str().unwrap()])
    else {
        return;
    };
    let report = audit_json(file).json();
    for name in ["w.f64", "w.wide"] {
        let v = &row(&report, name)["stats"]["values"];
        assert_eq!(v["min"], theirs[name]["min"], "{name}");
        assert_eq!(v["max"], theirs[name]["max"], "{name}");
        let (a, b) = (
            v["mean"].as_f64().unwrap(),
            theirs[name]["mean"].as_f64().unwrap(),
        );
        assert!(
            (a - b).abs() <= 1e-12 * b.abs().max(1e-3),
            "{name}: {a} vs numpy {b}"
        );
    }
    let npy = tmp.join("ours.npy");
    for name in ["w.f64", "w.wide", "w.e5m2"] {
        let (_, ours) = export(file, name, &npy);
        let theirs = fs::read(tmp.join(format!("{name}.npy"))).unwrap();
        let ours_file = fs::read(&npy).unwrap();
        assert_eq!(
            ours_file, theirs,
            "{name}: export is numpy's .npy byte for byte"
        );
        assert!(!ours.is_empty());
    }
}

#[test]
fn a_nan_or_infinite_f8_or_f64_value_is_one_dense_finite_error_at_its_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = Clean::new();
    // (case, tensor, element of the first bad value, element of a second).
    type Patch = fn(&mut Vec<u8>, &mut Vec<u8>, &mut Vec<f64>, usize);
    let cases: &[(&str, &str, usize, usize, Patch)] = &[
        ("e4m3 NaN", "w.e4m3", 3001, 4000, |a, _, _, k| a[k] = 0x7f),
        ("e4m3 -NaN", "w.e4m3", 17, 5000, |a, _, _, k| a[k] = 0xff),
        ("e5m2 +inf", "w.e5m2", 2049, 4500, |_, b, _, k| b[k] = 0x7c),
        ("e5m2 -inf", "w.e5m2", 0, 100, |_, b, _, k| b[k] = 0xfc),
        ("e5m2 NaN", "w.e5m2", 600, 601, |_, b, _, k| b[k] = 0x7d),
        ("e5m2 -NaN", "w.e5m2", 4959, 4959, |_, b, _, k| b[k] = 0xff),
        ("f64 NaN", "w.f64", 1234, 2000, |_, _, c, k| c[k] = f64::NAN),
        ("f64 inf", "w.f64", 7, 3001, |_, _, c, k| {
            c[k] = f64::INFINITY
        }),
        ("f64 -inf", "w.f64", 3009, 3009, |_, _, c, k| {
            c[k] = f64::NEG_INFINITY
        }),
    ];
    for (i, &(case, tensor, first, second, patch)) in cases.iter().enumerate() {
        let dir = tmp.path().join(format!("case{i}"));
        fs::create_dir(&dir).unwrap();
        let file = dir.join("model.safetensors");
        let (mut a, mut b, mut c) = (clean.e4m3.clone(), clean.e5m2.clone(), clean.f64.clone());
        patch(&mut a, &mut b, &mut c, first);
        patch(&mut a, &mut b, &mut c, second);
        let bad = 1 + usize::from(second != first);
        let begins = clean.write(&file, &a, &b, &c);
        let (begin, size, count) = match tensor {
            "w.e4m3" => (begins[0], 1, a.len()),
            "w.e5m2" => (begins[1], 1, b.len()),
            _ => (begins[2], 8, c.len()),
        };
        let run = audit_json(&file);
        let report = run.json();
        assert_ne!(run.code, 0, "{case}");
        assert_eq!(report["verdict"], "invalid", "{case}");
        assert_eq!(
            error_checks(&report),
            ["dense.finite"],
            "{case}: {report:#}"
        );
        let f = findings_of(&report, "dense.finite");
        assert_eq!(f.len(), 1, "{case}: {f:#?}");
        assert_eq!(f[0]["tensor"], tensor, "{case}");
        assert_eq!(
            f[0]["offset"].as_u64().unwrap(),
            begin + (first * size) as u64,
            "{case}"
        );
        let message = f[0]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{bad} of {count} "))
                && message.ends_with(&format!("the first is element {first}")),
            "{case}: {message}"
        );
        assert_eq!(
            row(&report, tensor)["stats"]["values"]["nonfinite"],
            bad,
            "{case}"
        );
        // hist warns with the same finding and still shows the values;
        // export writes the NaN or infinity where it is.
        let r = cli(&["hist", file.to_str().unwrap(), "--tensor", tensor]);
        assert_eq!(r.code, 0, "{case}: {}", r.stderr);
        assert!(r.stderr.contains("NaN or infinite"), "{case}: {}", r.stderr);
        assert!(
            r.stdout.contains(&format!("non-finite {bad}")),
            "{case}: {}",
            r.stdout
        );
        let (_, got) = export(&file, tensor, &tmp.path().join(format!("case{i}.npy")));
        let want: Vec<f32> = match tensor {
            "w.e4m3" => a.iter().map(|&x| e4m3(x) as f32).collect(),
            "w.e5m2" => b.iter().map(|&x| e5m2(x) as f32).collect(),
            _ => c.iter().map(|&x| x as f32).collect(),
        };
        assert!(!want[first].is_finite(), "{case}");
        assert_same_f32(case, &got, &want);
        assert_eq!(got[first].is_nan(), want[first].is_nan(), "{case}");
    }
}

/// The app's tensor detail shows an F8 tensor's values as the report has
/// them (the same statistics), and its non-finite count.
#[cfg(feature = "gui")]
#[test]
fn the_app_shows_f8_and_f64_values() {
    use common::harness::{Gui, GuiOptions};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    fs::create_dir(&dir).unwrap();
    let clean = Clean::new();
    let mut e5m2 = clean.e5m2.clone();
    e5m2[10] = 0x7c;
    clean.write(
        &dir.join("model.safetensors"),
        &clean.e4m3,
        &e5m2,
        &clean.f64,
    );
    let mut g = Gui::new(GuiOptions {
        size: [1500.0, 1200.0],
        ..GuiOptions::default()
    });
    g.open(&dir);
    assert_eq!(g.verdict(), "Invalid (1 error)");
    g.select("w.e4m3");
    assert!(
        g.shows("5080 values · min -448.0000 · max 448.0000 · mean 0.0000"),
        "the E4M3 values"
    );
    g.select("w.e5m2");
    assert!(g.shows("4960 values · min -57344.0000"), "the E5M2 values");
    assert!(g.shows("· 1 non-finite"), "the E5M2 infinity");
    g.select("w.f64");
    assert!(g.shows("3010 values · min "), "the F64 values");
}

/// The integer and BOOL tensors numpy writes: (name, safetensors dtype,
/// numpy dtype), widest first so every tensor starts aligned.
const INTEGERS: [(&str, &str, &str); 9] = [
    ("t.i64", "I64", "<i8"),
    ("t.u64", "U64", "<u8"),
    ("t.i32", "I32", "<i4"),
    ("t.u32", "U32", "<u4"),
    ("t.i16", "I16", "<i2"),
    ("t.u16", "U16", "<u2"),
    ("t.i8", "I8", "i1"),
    ("t.u8", "U8", "u1"),
    ("t.bool", "BOOL", "?"),
];

/// numpy writes a safetensors file of one tensor per integer dtype and
/// BOOL (its header built by hand: 8-byte little-endian length, JSON,
/// data), 1000 values each: the type's min and max, values where rounding
/// to float32 straight from the integer and through float64 differ, and
/// seeded random ones (BOOL: random bytes, 40% zero, any nonzero byte
/// true). It prints numpy's count, min, max and mean of each and saves
/// `astype(np.float32)` of each as NAME.npy in the output folder.
const WRITE_INTEGERS: &str = r#"
import json, sys
import numpy as np
path, out, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rng = np.random.default_rng(20261207)
n, shape = 1000, [10, 100]
header, blobs, offset, res = {}, [], 0, {}
for name, st, nd in spec:
    dt = np.dtype(nd)
    if st == "BOOL":
        b = rng.integers(0, 256, n, dtype=np.uint8)
        b[rng.random(n) < 0.4] = 0
        b[:4] = [0, 1, 2, 255]
        v = b.view(np.bool_)
    else:
        info = np.iinfo(dt)
        v = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        special = [info.min, info.max, 0, 1]
        if info.bits == 64:
            sign = -1 if info.min < 0 else 1
            top = 62 if info.min < 0 else 63
            # Just above a float32 tie, within half a float64 ulp of it.
            special += [(1 << top) + (1 << (top - 24)) + 1,
                        sign * ((1 << 53) + 1), (1 << top) + (1 << (top - 24))]
        if info.bits == 32:
            special += [(1 << 24) + 1, (1 << 24) + 3]
        v[:len(special)] = np.array(special, dtype=object).astype(dt)
    b = v.tobytes()
    header[name] = {"dtype": st, "shape": shape, "data_offsets": [offset, offset + len(b)]}
    blobs.append(b)
    offset += len(b)
    np.save(out + "/" + name + ".npy", v.astype(np.float32).reshape(shape))
    res[name] = {"count": int(v.size), "min": float(v.min()), "max": float(v.max()),
                 "mean": float(v.mean())}
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
print(json.dumps(res))
"#;

#[test]
fn integer_and_bool_tensors_are_decoded_as_numpy_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    fs::create_dir(&dir).unwrap();
    let file = dir.join("ints.safetensors");
    let spec = serde_json::to_string(&INTEGERS).unwrap();
    let args = [
        "-c",
        WRITE_INTEGERS,
        file.to_str().unwrap(),
        tmp.path().to_str().unwrap(),
        &spec,
    ];
    let Some(numpy) = numpy_json(&args) else {
        return;
    };

    // The audit: valid, nothing said (integers are never non-finite).
    let run = audit_json(&file);
    let report = run.json();
    assert_eq!(run.code, 0, "{report:#}");
    assert_eq!(report["verdict"], "valid");
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        0,
        "{report:#}"
    );
    let path = file.to_str().unwrap();
    let npy = tmp.path().join("ours.npy");
    for (name, dtype, _) in INTEGERS {
        let want = &numpy[name];
        let r = cli(&["hist", path, "--tensor", name, "--json"]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        assert!(r.stderr.is_empty(), "{name}: {}", r.stderr);
        let v = &r.json()["values"];
        assert_eq!(v["count"], want["count"], "{name} ({dtype}): {v}");
        assert_eq!(v["nonfinite"], 0, "{name}");
        assert_eq!(
            v["min"].as_f64(),
            want["min"].as_f64(),
            "{name} ({dtype}) min"
        );
        assert_eq!(
            v["max"].as_f64(),
            want["max"].as_f64(),
            "{name} ({dtype}) max"
        );
        let (ours, theirs) = (v["mean"].as_f64().unwrap(), want["mean"].as_f64().unwrap());
        assert!(
            (ours - theirs).abs() <= 1e-9 * theirs.abs(),
            "{name} ({dtype}): mean {ours} vs numpy {theirs}"
        );
        let binned: u64 = v["bins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum();
        assert_eq!(binned, 1000, "{name}: every value binned");
        assert_eq!(
            &row(&report, name)["stats"]["values"],
            v,
            "{name}: the report's summary is hist's"
        );
        // export: numpy's astype(float32), bit for bit.
        let (shape, got) = export(&file, name, &npy);
        assert_eq!(shape, [10, 100], "{name}");
        let theirs = common::npy::read(&tmp.path().join(format!("{name}.npy")));
        assert_same_f32(name, &got, &theirs.values());
        assert_eq!(
            fs::read(&npy).unwrap(),
            fs::read(tmp.path().join(format!("{name}.npy"))).unwrap(),
            "{name}: export is numpy's .npy byte for byte"
        );
    }
}

/// The real all-MiniLM-L6-v2 (scripts/install-mlx.sh installs it): its I64
/// `embeddings.position_ids` has values, 0 up to numpy's max.
#[test]
fn the_real_checkpoint_position_ids_have_values() {
    let ck =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".pymodels/all-minilm-l6-v2/model.safetensors");
    if !require_or_skip(
        "the real checkpoint (scripts/install-mlx.sh installs it)",
        ck.exists(),
    ) {
        return;
    }
    let name = "embeddings.position_ids";
    let script = r#"
import json, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = int.from_bytes(raw[:8], "little")
e = json.loads(raw[8:8 + n]).get(sys.argv[2])
if e is None:
    print("null")
else:
    b, end = e["data_offsets"]
    v = np.frombuffer(raw[8 + n + b:8 + n + end], dtype="<i8")
    print(json.dumps({"dtype": e["dtype"], "count": int(v.size), "max": float(v.max())}))
"#;
    let Some(numpy) = numpy_json(&["-c", script, ck.to_str().unwrap(), name]) else {
        return;
    };
    if !require_or_skip(&format!("{name} in the real checkpoint"), !numpy.is_null()) {
        return;
    }
    assert_eq!(numpy["dtype"], "I64");
    let r = cli(&["hist", ck.to_str().unwrap(), "--tensor", name, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = &r.json()["values"];
    assert_eq!(v["count"], numpy["count"], "{v}");
    assert_eq!(v["min"].as_f64(), Some(0.0), "{v}");
    assert_eq!(v["max"].as_f64(), numpy["max"].as_f64(), "{v}");
    assert_eq!(v["nonfinite"], 0, "{v}");
}

/// A lone file holding an MLX quantized module (a U32 weight with its
/// scales and biases) and a U32 tensor outside any module: the module's
/// codes are still listed as stored, with the `mlxlm.config` warning that
/// nothing says how to decode them, and hist and export say so; the other
/// U32 tensor is decoded as integers.
#[test]
fn mlx_module_codes_stay_codes_beside_decoded_integers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    fs::create_dir(&dir).unwrap();
    let file = dir.join("model.safetensors");
    let words: Vec<u8> = (0..8u32)
        .flat_map(|w| (w * 0x1111_1111).to_le_bytes())
        .collect();
    let halves = |n: usize| -> Vec<u8> { [0x80u8, 0x3f].repeat(n) };
    let counts: Vec<u8> = [7u32, 0, u32::MAX, 40_000]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write_safetensors(
        &file,
        &[
            ("m.weight", "U32", vec![2, 4], words),
            ("m.scales", "BF16", vec![2, 1], halves(2)),
            ("m.biases", "BF16", vec![2, 1], halves(2)),
            ("counts", "U32", vec![4], counts),
        ],
    );
    let run = audit_json(&file);
    let report = run.json();
    assert_eq!(error_checks(&report), Vec::<String>::new(), "{report:#}");
    let config = findings_of(&report, "mlxlm.config");
    assert_eq!(config.len(), 1, "{report:#}");
    assert_eq!(config[0]["tensor"], "m.weight");
    assert!(row(&report, "m.weight")["stats"].is_null(), "{report:#}");
    let v = &row(&report, "counts")["stats"]["values"];
    assert_eq!(v["count"], 4, "{v}");
    assert_eq!(v["min"].as_f64(), Some(0.0));
    assert_eq!(v["max"].as_f64(), Some(f64::from(u32::MAX)));
    let path = file.to_str().unwrap();
    let out = tmp.path().join("out.npy");
    let (_, got) = export(&file, "counts", &out);
    assert_eq!(got, [7.0, 0.0, 4_294_967_296.0, 40_000.0]);
    let hist: &[&str] = &["hist", path, "--tensor", "m.weight"];
    let out = out.to_str().unwrap();
    let export: &[&str] = &["export", path, "--tensor", "m.weight", "--out", out];
    for args in [hist, export] {
        let r = cli(args);
        assert_ne!(r.code, 0, "{args:?}");
        assert!(
            r.stderr
                .contains("packed U32 codes of an MLX quantized module"),
            "{args:?}: {}",
            r.stderr
        );
    }
}
