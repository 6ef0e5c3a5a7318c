//! `bundlescope spotcheck`: the real MLX library (CPU device here) against
//! the decoder's f64 product, and the bundle against the unquantised
//! checkpoint it was made from.
#![cfg(feature = "mlx")]

mod common;

use std::path::Path;

use bundlescope::sample::nvfp4::Nvfp4Options;
use bundlescope::sample::{self, SampleFormat};
use bundlescope::spotcheck::{XDtype, random_x};
use common::{TestBundle, audit_json, cli};
use serde_json::Value;

fn spotcheck(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["spotcheck", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let run = cli(&args);
    assert!(
        run.code == 0 || run.code == 1,
        "spotcheck could not run ({}): {}",
        run.code,
        run.stderr
    );
    let json = run.json();
    (run.code, json)
}

/// A v2 sample (q3, q3_full8 and q4 tensors) with its reference checkpoint.
fn sample_with_reference() -> (TestBundle, std::path::PathBuf) {
    let b = TestBundle::v2();
    let reference = b.tmp.path().join("reference");
    let summary = sample::reference::write(&b.dir, &reference, 7).unwrap();
    assert!(summary.tensors > 0);
    (b, reference)
}

fn results(report: &Value) -> &Vec<Value> {
    report["results"].as_array().unwrap()
}

fn result_of<'a>(report: &'a Value, tensor: &str) -> &'a Value {
    results(report)
        .iter()
        .find(|r| r["tensor"] == tensor && r["kind"] == "matmul")
        .unwrap_or_else(|| panic!("no result for {tensor}: {report}"))
}

#[test]
fn mlx_agrees_with_the_decoder_on_every_precision_in_both_dtypes() {
    let b = TestBundle::v2();
    for (dtype, tol) in [("f32", 1e-5), ("bf16", 1e-2)] {
        let (code, report) = spotcheck(&b.dir, &["--dtype", dtype]);
        assert_eq!(code, 0, "{report}");
        assert_eq!(report["device"], "cpu");
        assert_eq!(report["mlx_version"], "0.32.4");
        let mut precisions: Vec<&str> = results(&report)
            .iter()
            .map(|r| r["precision"].as_str().unwrap())
            .collect();
        precisions.sort();
        precisions.dedup();
        assert_eq!(precisions, ["q3", "q3_full8", "q4"], "{dtype}");
        for r in results(&report) {
            assert_eq!(r["dtype"], dtype);
            let cols = r["shape"][1].as_f64().unwrap();
            let want_tol = match (r["kind"].as_str().unwrap(), dtype) {
                ("embedding", _) => 0.0,
                // MLX's CPU accumulates bf16 in bf16: the bound grows as √K.
                (_, "bf16") => f64::max(tol, cols.sqrt() / 256.0),
                _ => tol,
            };
            assert_eq!(r["tolerance"].as_f64().unwrap(), want_tol, "{r}");
            assert_eq!(r["pass"], true, "{r}");
            let rel = r["rel_err"].as_f64().unwrap();
            assert!(rel <= want_tol, "{dtype} {}: {rel}", r["tensor"]);
            if dtype == "bf16" && r["kind"] == "matmul" {
                // Rounding shows, so the bf16 path really ran in bf16...
                assert!(rel > 1e-4, "{r}");
                // ...and its error is well inside the bound.
                assert!(rel < want_tol / 2.0, "{r}");
            }
            // The product is not trivially zero: it agrees with something.
            assert!(r["cosine"].as_f64().unwrap() > 0.999, "{r}");
            if r["kind"] == "matmul" {
                assert!(r["gflops"].as_f64().unwrap() > 0.0);
                assert_eq!(r["batch"], 8);
            }
            assert!(r["reference"].is_null());
        }
        // The tied embedding's rows gathered through MLX equal the decoder's.
        let emb: Vec<&Value> = results(&report)
            .iter()
            .filter(|r| r["kind"] == "embedding")
            .collect();
        assert_eq!(emb.len(), 1, "{report}");
        assert_eq!(emb[0]["max_abs_err"].as_f64().unwrap(), 0.0);
    }
}

#[test]
fn one_tensor_bigger_batch_and_bad_options() {
    let b = TestBundle::v2();
    let t = b.first_of("q4")["name"].as_str().unwrap().to_string();
    let (code, report) = spotcheck(&b.dir, &["--tensor", &t, "--batch", "3", "--seed", "5"]);
    assert_eq!(code, 0, "{report}");
    let r = result_of(&report, &t);
    assert_eq!(r["batch"], 3);
    assert_eq!(report["seed"], 5);
    let run = cli(&["spotcheck", b.dir.to_str().unwrap(), "--tensor", "no.such"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no.such"), "{}", run.stderr);
    let run = cli(&["spotcheck", b.dir.to_str().unwrap(), "--dtype", "f8"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("f32 or bf16"), "{}", run.stderr);
}

#[test]
fn the_unaltered_sample_passes_against_its_reference() {
    let (b, reference) = sample_with_reference();
    let (code, report) = spotcheck(&b.dir, &["--reference", reference.to_str().unwrap()]);
    assert_eq!(code, 0, "{report}");
    // The embedding's gather row is measured too, not only the matmul rows.
    assert!(results(&report).iter().any(|r| r["kind"] == "embedding"));
    for r in results(&report) {
        let q = &r["reference"];
        assert!(q.is_object(), "{r}");
        assert!(q["snr_db"].as_f64().unwrap() > 5.0, "{r}");
        assert_eq!(q["pass"], true, "{r}");
    }
    // Ranked worst first by output error.
    let errs: Vec<f64> = results(&report)
        .iter()
        .filter_map(|r| r["reference"]["output_rel_err"].as_f64())
        .collect();
    assert!(errs.windows(2).all(|w| w[0] >= w[1]), "{errs:?}");
}

/// Reverses the code bytes of every row of `t` (a q4 record), which
/// permutes its codes within each row, and rehashes the payload so the
/// bundle still validates.
fn permute_codes(b: &TestBundle, t: &Value) {
    let offset = t["offset"].as_u64().unwrap() as usize;
    let row_bytes = t["row_bytes"].as_u64().unwrap() as usize;
    let codes = t["codes_bytes"].as_u64().unwrap() as usize;
    b.patch_payload(true, |bytes| {
        for row in bytes[offset..offset + codes].chunks_exact_mut(row_bytes) {
            row.reverse();
        }
    });
}

#[test]
fn permuted_codes_validate_but_fail_against_the_reference() {
    let (b, reference) = sample_with_reference();
    let t = b.first_of("q4");
    let name = t["name"].as_str().unwrap();
    permute_codes(&b, &t);
    let audit = audit_json(&b.dir);
    assert_eq!(
        audit.code, 0,
        "the permuted bytes still validate: {}",
        audit.stdout
    );

    let (code, report) = spotcheck(&b.dir, &["--reference", reference.to_str().unwrap()]);
    assert_eq!(code, 1, "{report}");
    let r = result_of(&report, name);
    // MLX and the decoder still agree on what the bytes say...
    assert_eq!(r["mlx_pass"], true, "{r}");
    // ...but the bytes no longer say what the source said.
    assert_eq!(r["pass"], false, "{r}");
    assert!(
        r["reference"]["output_rel_err"].as_f64().unwrap() > 1.0,
        "{r}"
    );
    assert!(
        r["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("reference checkpoint"),
        "{r}"
    );
    // Ranked first, and the only tensor failing: its matmul row, and its
    // gather row too when it is the tied embedding (measured against the
    // source as well).
    assert_eq!(results(&report)[0]["tensor"], name);
    let mut failed: Vec<&str> = results(&report)
        .iter()
        .filter(|r| r["pass"] == false)
        .inspect(|r| assert_eq!(r["tensor"], name, "{r}"))
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    failed.sort_unstable();
    if name == bundlescope::format::audio8::EMBED {
        assert_eq!(failed, ["embedding", "matmul"], "{report}");
    } else {
        assert_eq!(failed, ["matmul"], "{report}");
    }
}

#[test]
fn a_doubled_scale_validates_but_fails_against_the_reference() {
    let (b, reference) = sample_with_reference();
    let t = b.first_of("q4");
    let name = t["name"].as_str().unwrap();
    let groups = t["scales_shape"][1].as_u64().unwrap() as usize;
    let (row, group) = (5usize, 1usize);
    let at = t["scales_offset"].as_u64().unwrap() as usize + 2 * (row * groups + group);
    b.patch_payload(true, |bytes| {
        let h = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        // F16: one more in the exponent doubles the value.
        let doubled = h + (1 << 10);
        bytes[at..at + 2].copy_from_slice(&doubled.to_le_bytes());
    });
    assert_eq!(audit_json(&b.dir).code, 0);

    let (code, report) = spotcheck(
        &b.dir,
        &["--tensor", name, "--reference", reference.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{report}");
    let r = result_of(&report, name);
    assert_eq!(r["mlx_pass"], true);
    assert_eq!(r["pass"], false);
    let q = &r["reference"];
    assert_eq!(q["worst_group"], serde_json::json!([row, group]), "{q}");
    assert!(q["worst_group_rel_err"].as_f64().unwrap() > 0.9, "{q}");
}

/// Reads a float32 `.npy` written by `bundlescope export`.
fn read_npy(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + header_len]).unwrap();
    assert!(header.contains("'<f4'"), "{header}");
    b[10 + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn reference_errors_equal_a_naive_computation() {
    let (b, reference) = sample_with_reference();
    let ref_bytes = std::fs::read(reference.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&ref_bytes).unwrap();
    for precision in ["q3", "q3_full8", "q4"] {
        let t = b.first_of(precision);
        let name = t["name"].as_str().unwrap();
        let (rows, cols) = (
            t["shape"][0].as_u64().unwrap() as usize,
            t["shape"][1].as_u64().unwrap() as usize,
        );
        let (_, report) = spotcheck(
            &b.dir,
            &[
                "--tensor",
                name,
                "--seed",
                "3",
                "--reference",
                reference.to_str().unwrap(),
            ],
        );
        let q = &result_of(&report, name)["reference"];

        let npy = b.tmp.path().join(format!("{precision}.npy"));
        let run = common::export_tensor(b.dir.to_str().unwrap(), name, npy.to_str().unwrap());
        assert_eq!(run.code, 0, "{}", run.stderr);
        let wq = read_npy(&npy);
        let src = st.tensor(name).unwrap();
        assert_eq!(src.shape(), [rows, cols]);
        let w: Vec<f64> = src
            .data()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        assert_eq!(wq.len(), w.len());

        let (mut d2, mut w2) = (0f64, 0f64);
        for (&a, &s) in wq.iter().zip(&w) {
            let d = f64::from(a) - s;
            d2 += d * d;
            w2 += s * s;
        }
        let weight_rel = (d2 / w2).sqrt();
        let snr = 10.0 * (w2 / d2).log10();
        // Output space, on the x the spot check used (seed 3, batch 8).
        let (x, _) = random_x(3, name, 8, cols, XDtype::F32);
        let (mut yd2, mut yw2) = (0f64, 0f64);
        for bi in 0..8 {
            for r in 0..rows {
                let (mut yd, mut yw) = (0f64, 0f64);
                for c in 0..cols {
                    let xv = f64::from(x[bi * cols + c]);
                    yd += xv * (f64::from(wq[r * cols + c]) - w[r * cols + c]);
                    yw += xv * w[r * cols + c];
                }
                yd2 += yd * yd;
                yw2 += yw * yw;
            }
        }
        let output_rel = (yd2 / yw2).sqrt();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(
            close(q["weight_rel_err"].as_f64().unwrap(), weight_rel),
            "{precision}: {q} vs {weight_rel}"
        );
        assert!(
            close(q["snr_db"].as_f64().unwrap(), snr),
            "{precision}: {q} vs {snr}"
        );
        assert!(
            close(q["output_rel_err"].as_f64().unwrap(), output_rel),
            "{precision}: {q} vs {output_rel}"
        );
        assert!(
            weight_rel > 0.01,
            "quantisation cannot be lossless: {weight_rel}"
        );
    }
}

/// The tied embedding's gather row, measured against its source: written by
/// the CLI (`sample DIR --reference REF`), gathered over every row
/// (`--embedding-rows 0`) so a naive whole-tensor sum is the expected value.
#[test]
fn embedding_reference_equals_a_naive_computation() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, reference) = (tmp.path().join("bundle"), tmp.path().join("ref"));
    let run = cli(&[
        "sample",
        dir.to_str().unwrap(),
        "--reference",
        reference.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let name = bundlescope::format::audio8::EMBED;
    let (code, report) = spotcheck(
        &dir,
        &[
            "--tensor",
            name,
            "--embedding-rows",
            "0",
            "--reference",
            reference.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{report}");
    let row = results(&report)
        .iter()
        .find(|r| r["kind"] == "embedding")
        .unwrap_or_else(|| panic!("no embedding row: {report}"));
    let q = &row["reference"];
    assert!(q.is_object(), "embedding row has no reference: {row}");
    let rows = row["shape"][0].as_u64().unwrap() as usize;
    assert_eq!(
        row["batch"].as_u64().unwrap() as usize,
        rows,
        "every row gathered"
    );

    let npy = tmp.path().join("embed.npy");
    let run = common::export_tensor(dir.to_str().unwrap(), name, npy.to_str().unwrap());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let wq = read_npy(&npy);
    let ref_bytes = std::fs::read(reference.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&ref_bytes).unwrap();
    let w: Vec<f64> = st
        .tensor(name)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    assert_eq!(wq.len(), w.len());
    let (mut d2, mut w2) = (0f64, 0f64);
    for (&a, &s) in wq.iter().zip(&w) {
        let d = f64::from(a) - s;
        d2 += d * d;
        w2 += s * s;
    }
    let weight_rel = (d2 / w2).sqrt();
    let snr = 10.0 * (w2 / d2).log10();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    let got = q["weight_rel_err"].as_f64().unwrap();
    assert!(close(got, weight_rel), "{q} vs {weight_rel}");
    assert!(close(q["snr_db"].as_f64().unwrap(), snr), "{q} vs {snr}");
    // A gather's output is its rows: the output error is the weight error.
    assert_eq!(q["output_rel_err"].as_f64().unwrap(), got);
    assert!(
        weight_rel > 0.01,
        "quantisation cannot be lossless: {weight_rel}"
    );
    // The same tensor's matmul row covers the same rows, so the same error.
    let mm = &result_of(&report, name)["reference"];
    assert!(
        close(mm["weight_rel_err"].as_f64().unwrap(), weight_rel),
        "{mm}"
    );
}

#[test]
fn nvfp4_experts_agree_with_mlx_one_by_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nvfp4");
    sample::nvfp4::write(
        &dir,
        &Nvfp4Options {
            layers: 2,
            experts: 4,
            ..Nvfp4Options::default()
        },
    )
    .unwrap();
    let (code, report) = spotcheck(&dir, &[]);
    assert_eq!(code, 0, "{report}");
    let rs = results(&report);
    // 2 layers × 2 projections × 4 experts.
    assert_eq!(rs.len(), 16, "{report}");
    let mut experts: Vec<u64> = rs.iter().map(|r| r["expert"].as_u64().unwrap()).collect();
    experts.sort();
    experts.dedup();
    assert_eq!(experts, [0, 1, 2, 3]);
    for r in rs {
        assert_eq!(r["precision"], "nvfp4");
        assert_eq!(
            r["mlx_op"], "dequantize+matmul",
            "the CPU device has no gather_qmm"
        );
        assert!(r["rel_err"].as_f64().unwrap() <= 1e-5, "{r}");
    }

    // --expert narrows a tensor's check to one expert; one outside the
    // stack is refused.
    let t = "model.decoder.layers.0.experts.down_proj.weight";
    let (_, before) = spotcheck(&dir, &["--tensor", t, "--expert", "2"]);
    assert_eq!(results(&before).len(), 1);
    assert_eq!(results(&before)[0]["expert"], 2);
    let run = cli(&[
        "spotcheck",
        dir.to_str().unwrap(),
        "--tensor",
        t,
        "--expert",
        "9",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("outside 0..4"), "{}", run.stderr);
}

#[test]
fn without_packed_tensors_nothing_passes_silently() {
    let b = TestBundle::sample(SampleFormat::Audio8V1);
    let dense = b.first_of("original")["name"].as_str().unwrap().to_string();
    let run = cli(&["spotcheck", b.dir.to_str().unwrap(), "--tensor", &dense]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("stored as is"), "{}", run.stderr);
}
