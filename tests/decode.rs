//! `hist` and `export` against references that share no code with
//! `src/decode`: a bit-by-bit decoder written here, MLX's own
//! `dequantize`, and crafted tensors whose statistics are known by hand.

mod common;

use std::path::Path;

use common::{TestBundle, audit_json, cli, require_or_skip, run_python};
use serde_json::Value;

const PACKED: [&str; 3] = ["q3", "q3_full8", "q4"];

/// Bits, zero point and largest valid code of a packed precision.
fn grid(precision: &str) -> (usize, i64, usize) {
    match precision {
        "q3" => (3, 3, 6),
        "q3_full8" => (3, 4, 7),
        "q4" => (4, 7, 14),
        other => panic!("not packed: {other}"),
    }
}

fn u(v: &Value) -> usize {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}")) as usize
}

/// Code `j` of a row, one bit at a time: bit `k` of the code is bit
/// `j*bits + k` of the row, counting from bit 0 of its first byte.
fn naive_code(row: &[u8], bits: usize, j: usize) -> usize {
    (0..bits)
        .map(|k| {
            let b = j * bits + k;
            usize::from((row[b / 8] >> (b % 8)) & 1) << k
        })
        .sum()
}

/// Writes `codes` into `row` one bit at a time (the inverse of [`naive_code`]).
fn naive_pack(codes: &[usize], bits: usize, row: &mut [u8]) {
    row.fill(0);
    for (j, &c) in codes.iter().enumerate() {
        for k in 0..bits {
            let b = j * bits + k;
            row[b / 8] |= (((c >> k) & 1) as u8) << (b % 8);
        }
    }
}

/// Every stored code of a packed record, row-major.
fn naive_codes(payload: &[u8], rec: &Value) -> Vec<usize> {
    let (bits, _, _) = grid(rec["precision"].as_str().unwrap());
    let (rows, cols) = (u(&rec["shape"][0]), u(&rec["shape"][1]));
    let (offset, row_bytes) = (u(&rec["offset"]), u(&rec["row_bytes"]));
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &payload[offset + r * row_bytes..offset + (r + 1) * row_bytes];
        out.extend((0..cols).map(|j| naive_code(row, bits, j)));
    }
    out
}

fn histogram(codes: &[usize], bits: usize) -> Vec<u64> {
    let mut h = vec![0u64; 1 << bits];
    for &c in codes {
        h[c] += 1;
    }
    h
}

fn counts_of(v: &Value) -> Vec<u64> {
    v["codes"]["counts"]
        .as_array()
        .unwrap_or_else(|| panic!("no counts in {v}"))
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

fn hist_one(dir: &Path, name: &str) -> Value {
    let run = cli(&["hist", dir.to_str().unwrap(), "--tensor", name, "--json"]);
    assert_eq!(run.code, 0, "hist {name}: {}", run.stderr);
    run.json()
}

fn packed_records(b: &TestBundle) -> Vec<Value> {
    b.manifest()["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| PACKED.contains(&r["precision"].as_str().unwrap()))
        .cloned()
        .collect()
}

#[test]
fn histograms_equal_a_naive_decoder_for_every_precision() {
    let b = TestBundle::v2();
    let payload = std::fs::read(b.payload()).unwrap();
    let all = cli(&["hist", b.dir.to_str().unwrap(), "--all", "--json"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    let all = all.json();
    let audit = audit_json(&b.dir).json();
    let mut seen = Vec::new();
    for rec in packed_records(&b) {
        let name = rec["name"].as_str().unwrap();
        let precision = rec["precision"].as_str().unwrap();
        let (bits, _, _) = grid(precision);
        let want = histogram(&naive_codes(&payload, &rec), bits);
        let from_all = all["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tensor"] == name)
            .unwrap_or_else(|| panic!("{name} missing from --all"));
        assert_eq!(counts_of(from_all), want, "{name} (--all)");
        let from_audit = audit["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        assert_eq!(counts_of(&from_audit["stats"]), want, "{name} (audit)");
        seen.push(precision.to_string());
    }
    for p in PACKED {
        assert!(seen.iter().any(|s| s == p), "the sample has no {p} tensor");
    }
    // One tensor per precision through --tensor too, the exact JSON shape included.
    for p in PACKED {
        let rec = b.first_of(p);
        let one = hist_one(&b.dir, rec["name"].as_str().unwrap());
        let keys: Vec<&str> = one
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["tensor", "precision", "codes", "scales", "stats"]);
        let (bits, zero, _) = grid(p);
        assert_eq!(one["codes"]["bits"], bits as u64);
        assert_eq!(one["codes"]["zero"], zero);
        assert_eq!(
            counts_of(&one),
            histogram(&naive_codes(&payload, &rec), bits)
        );
        let scales = one["scales"].as_object().unwrap();
        for k in [
            "dtype", "count", "min", "max", "median", "p01", "p99", "bins",
        ] {
            assert!(scales.contains_key(k), "scales.{k} missing");
        }
        assert_eq!(
            u(&one["scales"]["count"]),
            u(&rec["scales_bytes"]) / 2,
            "{p}"
        );
    }
}

#[test]
fn all_ranks_worst_first_with_per_precision_aggregates() {
    let b = TestBundle::v2();
    // Make one q4 tensor suspicious: every code clipped at the top level.
    let rec = b.record("language_model.model.layers.1.self_attn.o_proj.weight");
    b.patch_payload(true, |p| {
        let (o, n) = (u(&rec["offset"]), u(&rec["codes_bytes"]));
        p[o..o + n].fill(0xee);
    });
    let run = cli(&["hist", b.dir.to_str().unwrap(), "--all", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), packed_records(&b).len());
    assert_eq!(tensors[0]["tensor"], rec["name"]);
    let scores: Vec<f64> = tensors
        .iter()
        .map(|t| t["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    // Each tensor says which peers it was judged against and why it ranks
    // where it does (two layers: too few peers, its own statistics).
    assert_eq!(
        tensors[0]["peer_group"],
        "language_model.model.layers.{N}.self_attn.o_proj.weight · q4 · [256, 256]"
    );
    assert_eq!(tensors[0]["peers"], 1);
    assert!(tensors[0]["z"].as_object().unwrap().is_empty());
    assert!(
        tensors[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("per-tensor suspicion"),
        "{}",
        tensors[0]["reason"]
    );
    let aggs = v["aggregates"].as_array().unwrap();
    let names: Vec<&str> = aggs
        .iter()
        .map(|a| a["precision"].as_str().unwrap())
        .collect();
    assert_eq!(names, PACKED);
    for a in aggs {
        let p = a["precision"].as_str().unwrap();
        let mine: Vec<&Value> = tensors.iter().filter(|t| t["precision"] == p).collect();
        assert_eq!(u(&a["tensors"]), mine.len());
        let mut sum = vec![0u64; 1 << grid(p).0];
        for t in &mine {
            for (s, c) in sum.iter_mut().zip(counts_of(t)) {
                *s += c;
            }
        }
        assert_eq!(counts_of(a), sum, "{p}");
        let mean = mine
            .iter()
            .map(|t| t["stats"]["entropy_bits"].as_f64().unwrap())
            .sum::<f64>()
            / mine.len() as f64;
        assert!((a["mean_entropy_bits"].as_f64().unwrap() - mean).abs() < 1e-9);
    }
    // The text form prints the same ranking.
    let text = cli(&["hist", b.dir.to_str().unwrap(), "--all"]);
    assert_eq!(text.code, 0);
    let first = text.stdout.lines().nth(1).unwrap_or_default();
    assert!(first.contains(rec["name"].as_str().unwrap()), "{first}");
}

/// Rewrites the codes of `name` so code `j` of row `r` is `f(r, j)`.
fn craft(b: &TestBundle, name: &str, f: impl Fn(usize, usize) -> usize) {
    let rec = b.record(name);
    let (bits, _, _) = grid(rec["precision"].as_str().unwrap());
    let (rows, cols) = (u(&rec["shape"][0]), u(&rec["shape"][1]));
    let (offset, rb) = (u(&rec["offset"]), u(&rec["row_bytes"]));
    b.patch_payload(true, |p| {
        for r in 0..rows {
            let codes: Vec<usize> = (0..cols).map(|j| f(r, j)).collect();
            naive_pack(&codes, bits, &mut p[offset + r * rb..offset + (r + 1) * rb]);
        }
    });
}

fn entropy(counts: &[u64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

fn levels(v: &Value) -> Vec<i64> {
    v["stats"]["unused_levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_i64().unwrap())
        .collect()
}

fn close(v: &Value, want: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!((got - want).abs() < 1e-12, "{got} != {want}");
}

#[test]
fn crafted_codes_give_known_entropy_clipping_and_unused_levels() {
    let b = TestBundle::v2();
    let full8 = "language_model.model.layers.0.self_attn.q_proj.weight";
    let q3 = "language_model.model.layers.0.mlp.gate_proj.weight";
    let q4_cycle = "language_model.model.layers.0.self_attn.v_proj.weight";
    let q4_zero = "language_model.model.layers.0.self_attn.o_proj.weight";
    // Every level of q3_full8 eight times per group; 3-bit codes straddle bytes.
    craft(&b, full8, |_, j| j % 8);
    // q3 all at its top level.
    craft(&b, q3, |_, _| 6);
    // Every q4 level at least once per group: 64 = 4 * 15 + 4.
    craft(&b, q4_cycle, |_, j| (j % 64) % 15);
    // q4 all at the zero level: every group is a zero group.
    craft(&b, q4_zero, |_, _| 7);
    assert_eq!(audit_json(&b.dir).code, 0, "crafted codes are all valid");

    let v = hist_one(&b.dir, full8);
    let total = 256 * 256;
    assert_eq!(counts_of(&v), vec![total / 8; 8]);
    close(&v["stats"]["entropy_bits"], 3.0);
    close(&v["stats"]["clipping_share"], 0.25);
    assert!(levels(&v).is_empty());
    assert_eq!(v["stats"]["zero_groups"], 0);

    let v = hist_one(&b.dir, q3);
    let mut want = vec![0u64; 8];
    want[6] = 704 * 256;
    assert_eq!(counts_of(&v), want);
    close(&v["stats"]["entropy_bits"], 0.0);
    close(&v["stats"]["clipping_share"], 1.0);
    assert_eq!(levels(&v), vec![-3, -2, -1, 0, 1, 2]);

    let v = hist_one(&b.dir, q4_cycle);
    let groups = 256 * 256 / 64;
    let mut want: Vec<u64> = (0..16).map(|c| if c < 4 { 5 } else { 4 }).collect();
    want[15] = 0;
    let want: Vec<u64> = want.iter().map(|c| c * groups).collect();
    assert_eq!(counts_of(&v), want);
    close(&v["stats"]["entropy_bits"], entropy(&want));
    close(&v["stats"]["clipping_share"], 9.0 / 64.0);
    assert!(levels(&v).is_empty());

    let v = hist_one(&b.dir, q4_zero);
    close(&v["stats"]["entropy_bits"], 0.0);
    close(&v["stats"]["clipping_share"], 0.0);
    assert_eq!(
        levels(&v),
        vec![-7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7]
    );
    assert_eq!(v["stats"]["zero_groups"], groups);
    assert_eq!(v["stats"]["groups"], groups);
}

/// The data of a float32 `.npy` file: its shape and its raw bytes.
fn read_npy(path: &Path) -> (Vec<u64>, Vec<u8>) {
    let n = common::npy::read(path);
    (n.shape, n.data)
}

fn export(dir: &Path, name: &str, out: &Path) -> common::Run {
    common::export_tensor(dir.to_str().unwrap(), name, out.to_str().unwrap())
}

fn mlx_present() -> bool {
    run_python(&["-c", "import mlx.core, numpy"]).is_some_and(|o| o.status.success())
}

#[test]
fn export_equals_mlx_dequantize_bit_for_bit() {
    if !require_or_skip("Python with mlx and numpy", mlx_present()) {
        return;
    }
    let b = TestBundle::v2();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mlx/dequant_mlx.py");
    for p in PACKED {
        let rec = b.first_of(p);
        let name = rec["name"].as_str().unwrap();
        let ours = b.tmp.path().join(format!("{p}.ours.npy"));
        let theirs = b.tmp.path().join(format!("{p}.mlx.npy"));
        let run = export(&b.dir, name, &ours);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let out = run_python(&[
            script.to_str().unwrap(),
            b.dir.to_str().unwrap(),
            name,
            theirs.to_str().unwrap(),
        ])
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (shape, data) = read_npy(&ours);
        let (mlx_shape, mlx_data) = read_npy(&theirs);
        assert_eq!(
            shape,
            [u(&rec["shape"][0]) as u64, u(&rec["shape"][1]) as u64]
        );
        assert_eq!(shape, mlx_shape, "{p}");
        assert_eq!(data.len(), mlx_data.len(), "{p}");
        if let Some(i) =
            (0..data.len() / 4).find(|i| data[4 * i..4 * i + 4] != mlx_data[4 * i..4 * i + 4])
        {
            panic!("{p}: element {i} differs from MLX's dequantize");
        }
    }
}

#[test]
fn packed_export_follows_the_value_formula() {
    // The same comparison without MLX, against the naive decoder, so it runs everywhere.
    let b = TestBundle::v2();
    let payload = std::fs::read(b.payload()).unwrap();
    for p in PACKED {
        let rec = b.first_of(p);
        let out = b.tmp.path().join(format!("{p}.npy"));
        assert_eq!(export(&b.dir, rec["name"].as_str().unwrap(), &out).code, 0);
        let (_, data) = read_npy(&out);
        let (_, zero, _) = grid(p);
        let cols = u(&rec["shape"][1]);
        let scales = u(&rec["scales_offset"]);
        for (i, code) in naive_codes(&payload, &rec).into_iter().enumerate() {
            let g = i / 64; // groups are row-major too: cols is a multiple of 64
            let h = u16::from_le_bytes([payload[scales + 2 * g], payload[scales + 2 * g + 1]]);
            let want = naive_f16(h) * (code as i64 - zero) as f32;
            let got = f32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap());
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{p} row {} col {}",
                i / cols,
                i % cols
            );
        }
    }
}

/// IEEE half to f32 by the definition, in f64 arithmetic.
fn naive_f16(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f64::from(h & 0x3ff);
    let v = match exp {
        0 => man * 2f64.powi(-24),
        0x1f if man == 0.0 => f64::INFINITY,
        0x1f => f64::NAN,
        e => (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    };
    (sign * v) as f32
}

#[test]
fn dense_export_equals_the_source_values() {
    let b = TestBundle::v2();
    let payload = std::fs::read(b.payload()).unwrap();
    let records: Vec<Value> = b.manifest()["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["precision"] == "original")
        .cloned()
        .collect();
    let mut dtypes = Vec::new();
    for rec in &records {
        let dtype = rec["source_dtype"].as_str().unwrap();
        if dtypes.contains(&dtype.to_string()) && rec["shape"].as_array().unwrap().len() == 1 {
            continue;
        }
        dtypes.push(dtype.to_string());
        let name = rec["name"].as_str().unwrap();
        let out = b.tmp.path().join("dense.npy");
        let run = export(&b.dir, name, &out);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let (shape, data) = read_npy(&out);
        let want_shape: Vec<u64> = rec["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(shape, want_shape, "{name}");
        let src = &payload[u(&rec["offset"])..u(&rec["offset"]) + u(&rec["bytes"])];
        let want: Vec<f32> = match dtype {
            "F32" => src
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            "BF16" => src
                .chunks(2)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                .collect(),
            "F16" => src
                .chunks(2)
                .map(|c| naive_f16(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            other => panic!("unexpected dtype {other}"),
        };
        let got: Vec<u32> = data
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            got,
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{name}"
        );
    }
    for d in ["BF16", "F16", "F32"] {
        assert!(
            dtypes.iter().any(|x| x == d),
            "no dense {d} tensor in the sample"
        );
    }
}

#[test]
fn aliases_export_their_target() {
    let b = TestBundle::v2();
    let (alias, target) = (
        b.tmp.path().join("alias.npy"),
        b.tmp.path().join("target.npy"),
    );
    assert_eq!(
        export(&b.dir, "language_model.lm_head.weight", &alias).code,
        0
    );
    assert_eq!(
        export(&b.dir, "language_model.model.embed_tokens.weight", &target).code,
        0
    );
    assert_eq!(
        std::fs::read(alias).unwrap(),
        std::fs::read(target).unwrap()
    );
    let v = hist_one(&b.dir, "language_model.lm_head.weight");
    assert_eq!(v["tensor"], "language_model.model.embed_tokens.weight");
}

#[test]
fn export_never_writes_inside_the_bundle() {
    let b = TestBundle::v2();
    let before: Vec<_> = std::fs::read_dir(&b.dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let name = "language_model.model.norm.weight";
    let sneaky = b.tmp.path().join("elsewhere");
    std::fs::create_dir(&sneaky).unwrap();
    let targets = vec![
        b.dir.join("x.npy"),
        sneaky.join("..").join("bundle").join("x.npy"),
        b.payload(),
    ];
    #[cfg(unix)]
    let targets = {
        let mut t = targets;
        let link = b.tmp.path().join("link");
        std::os::unix::fs::symlink(&b.dir, &link).unwrap();
        t.push(link.join("x.npy"));
        t
    };
    for out in targets {
        let run = export(&b.dir, name, &out);
        assert_eq!(run.code, 2, "{}: {}", out.display(), run.stdout);
        assert!(run.stderr.contains("inside the bundle"), "{}", run.stderr);
    }
    let after: Vec<_> = std::fs::read_dir(&b.dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(before, after);
    assert_eq!(audit_json(&b.dir).code, 0);
}

#[test]
fn an_unknown_name_exits_2_with_close_names() {
    let b = TestBundle::v2();
    let run = cli(&[
        "hist",
        b.dir.to_str().unwrap(),
        "--tensor",
        "language_model.model.layers.0.mlp.gate_proj.weigth",
        "--json",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr
            .contains("close names: language_model.model.layers.0.mlp.gate_proj.weight"),
        "{}",
        run.stderr
    );
    let out = b.tmp.path().join("x.npy");
    let run = export(&b.dir, "no.such.tensor", &out);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no tensor named"), "{}", run.stderr);
    assert!(!out.exists());
}

#[test]
fn a_tensor_with_broken_metadata_is_named() {
    let b = TestBundle::v2();
    let name = "language_model.model.layers.0.self_attn.v_proj.weight";
    let i = b.index(name);
    b.edit(|m| m["tensors"][i]["row_bytes"] = Value::from(1));
    let run = cli(&["hist", b.dir.to_str().unwrap(), "--tensor", name]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(name) && run.stderr.contains("broken metadata"),
        "{}",
        run.stderr
    );
    let out = b.tmp.path().join("x.npy");
    assert_eq!(export(&b.dir, name, &out).code, 2);
    let all = cli(&["hist", b.dir.to_str().unwrap(), "--all", "--json"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    let v = all.json();
    assert_eq!(v["skipped"][0]["tensor"], name);
    assert!(
        v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["tensor"] != name)
    );
}
