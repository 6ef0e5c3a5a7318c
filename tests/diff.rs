//! `bundlescope diff` and `audit --range-hashes`, driven through the real
//! binary on samples from the project's own writer. Every figure the tool
//! reports is recomputed here from the file bytes with a naive decoder.

mod common;

use std::collections::BTreeMap;
use std::fs;

use common::nvfp4::Artifact;
use common::{TestBundle, cli, hex};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn diff_json(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let run = cli(&args);
    (run.code, run.json())
}

/// Tensors in the index: the records and the aliases.
fn tensor_count(b: &TestBundle) -> u64 {
    let m = b.manifest();
    (m["tensors"].as_array().unwrap().len() + m["aliases"].as_object().map_or(0, |a| a.len()))
        as u64
}

fn summary(v: &Value) -> [u64; 4] {
    let s = &v["summary"];
    ["identical", "changed", "only_a", "only_b"].map(|k| s[k].as_u64().unwrap())
}

fn non_identical(v: &Value) -> Vec<&Value> {
    v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] != "identical")
        .collect()
}

#[test]
fn a_bundle_against_itself_is_identical_and_never_fails() {
    let b = TestBundle::v2();
    let (code, v) = diff_json(&b.dir, &b.dir, &["--fail-on", "any"]);
    assert_eq!(code, 0);
    let n = tensor_count(&b);
    assert_eq!(summary(&v), [n, 0, 0, 0]);
    assert!(non_identical(&v).is_empty());
    let human = cli(&["diff", b.dir.to_str().unwrap(), b.dir.to_str().unwrap()]);
    assert_eq!(human.code, 0);
    assert!(
        human.stdout.contains(&format!(
            "{n} identical, 0 changed, 0 only in A, 0 only in B"
        )),
        "{}",
        human.stdout
    );
}

/// IEEE half to f64, written out from the format's definition.
fn half(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 31);
    let man = f64::from(bits & 1023);
    match exp {
        0 => sign * man * 2f64.powi(-24),
        _ => sign * (1.0 + man / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// Code `j` of an LSB-first stream of `bits`-bit codes, one bit at a time.
fn get_code(row: &[u8], bits: usize, j: usize) -> u8 {
    (0..bits).fold(0, |c, k| {
        let bit = j * bits + k;
        c | ((row[bit / 8] >> (bit % 8)) & 1) << k
    })
}

fn set_code(row: &mut [u8], bits: usize, j: usize, code: u8) {
    for k in 0..bits {
        let bit = j * bits + k;
        row[bit / 8] &= !(1 << (bit % 8));
        row[bit / 8] |= ((code >> k) & 1) << (bit % 8);
    }
}

/// The dequantised rows of a packed record: `scale * (code - zero)`.
fn naive_decode(payload: &[u8], rec: &Value) -> Vec<Vec<f64>> {
    let (bits, zero) = match rec["precision"].as_str().unwrap() {
        "q3" => (3, 3.0),
        "q3_full8" => (3, 4.0),
        "q4" => (4, 7.0),
        p => panic!("{p}"),
    };
    let n = |k: &str| rec[k].as_u64().unwrap() as usize;
    let rows = rec["shape"][0].as_u64().unwrap() as usize;
    let cols = rec["shape"][1].as_u64().unwrap() as usize;
    let (off, row_bytes, scales_off) = (n("offset"), n("row_bytes"), n("scales_offset"));
    (0..rows)
        .map(|r| {
            let row = &payload[off + r * row_bytes..off + (r + 1) * row_bytes];
            (0..cols)
                .map(|j| {
                    let s = scales_off + 2 * (r * cols / 64 + j / 64);
                    let scale = half(u16::from_le_bytes([payload[s], payload[s + 1]]));
                    scale * (f64::from(get_code(row, bits, j)) - zero)
                })
                .collect()
        })
        .collect()
}

fn rel_err(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let (mut d, mut s) = (0.0, 0.0);
    for (ra, rb) in a.iter().zip(b) {
        for (x, y) in ra.iter().zip(rb) {
            d += (y - x) * (y - x);
            s += x * x;
        }
    }
    (d / s).sqrt()
}

#[test]
fn one_changed_packed_tensor_is_reported_with_its_code_share_and_error() {
    let a = TestBundle::v2();
    let b = TestBundle::v2();
    let rec = b.first_of("q3_full8");
    let name = rec["name"].as_str().unwrap().to_string();
    let n = |k: &str| rec[k].as_u64().unwrap() as usize;
    let (off, row_bytes) = (n("offset"), n("row_bytes"));
    let cols = rec["shape"][1].as_u64().unwrap() as usize;
    // Move 40 codes of rows 3 and 5 by one level (staying on the grid).
    let mut deltas: BTreeMap<i64, u64> = BTreeMap::new();
    b.patch_payload(true, |p| {
        for (r, count) in [(3usize, 30usize), (5, 10)] {
            let row = &mut p[off + r * row_bytes..off + (r + 1) * row_bytes];
            for j in (0..count).map(|k| k * 3) {
                let c = get_code(row, 3, j);
                let new = if c < 7 { c + 1 } else { c - 1 };
                set_code(row, 3, j, new);
                *deltas.entry(i64::from(new) - i64::from(c)).or_default() += 1;
            }
        }
    });
    let total = rec["shape"][0].as_u64().unwrap() * cols as u64;
    *deltas.entry(0).or_default() += total - 40;

    let (code, v) = diff_json(&a.dir, &b.dir, &[]);
    assert_eq!(code, 0, "no --fail-on: a difference is not a failure");
    let n_tensors = tensor_count(&a);
    assert_eq!(summary(&v), [n_tensors - 1, 1, 0, 0]);
    let rows = non_identical(&v);
    assert_eq!(rows.len(), 1);
    let row = rows[0];
    assert_eq!(row["name"], name.as_str());
    assert_eq!(row["status"], "changed");
    let differs: Vec<&str> = row["differs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(differs, ["codes", "values"]);

    let share = row["codes"]["changed_share"].as_f64().unwrap();
    assert!((share - 40.0 / total as f64).abs() < 1e-12, "{share}");
    let got: BTreeMap<i64, u64> = row["codes"]["delta_counts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(got, deltas);
    assert_eq!(row["scales"]["equal_share"], 1.0);
    assert_eq!(row["scales"]["median_ratio"], 1.0);

    let pa = fs::read(a.payload()).unwrap();
    let pb = fs::read(b.payload()).unwrap();
    let (wa, wb) = (naive_decode(&pa, &rec), naive_decode(&pb, &rec));
    let want = rel_err(&wa, &wb);
    let err = row["weight_rel_err"].as_f64().unwrap();
    assert!((err - want).abs() <= 1e-9 * want, "{err} vs {want}");
    // Row 3 has three times row 5's changes: it is the worst row.
    let worst_row = row["worst_row"]["row"].as_u64().unwrap() as usize;
    let want_row = rel_err(&wa[worst_row..=worst_row], &wb[worst_row..=worst_row]);
    assert!((row["worst_row"]["rel_err"].as_f64().unwrap() - want_row).abs() <= 1e-9 * want_row);
    for r in 0..wa.len() {
        assert!(
            rel_err(&wa[r..=r], &wb[r..=r]) <= want_row + 1e-12,
            "row {r}"
        );
    }
    assert!(want_row > 0.0);

    // The range hashes: A's and B's are sha256 of the record's bytes.
    let range = |p: &[u8]| hex(&Sha256::digest(&p[off..off + n("bytes")]));
    assert_eq!(row["a"]["sha256"], range(&pa).as_str());
    assert_eq!(row["b"]["sha256"], range(&pb).as_str());

    let fail = |on: &str| diff_json(&a.dir, &b.dir, &["--fail-on", on]).0;
    assert_eq!(fail("changed"), 1);
    assert_eq!(fail("any"), 1);
    let human = cli(&["diff", a.dir.to_str().unwrap(), b.dir.to_str().unwrap()]);
    assert!(
        human
            .stdout
            .contains(" 1 changed, 0 only in A, 0 only in B")
    );
    assert!(human.stdout.contains(&name), "{}", human.stdout);
}

#[test]
fn a_renamed_tensor_is_only_in_a_and_only_in_b() {
    let a = TestBundle::v2();
    let b = TestBundle::v2();
    let old = "audio_tower.conv1.bias";
    b.edit(|m| {
        for t in m["tensors"].as_array_mut().unwrap() {
            if t["name"] == old {
                t["name"] = "audio_tower.conv1.renamed".into();
            }
        }
    });
    let (code, v) = diff_json(&a.dir, &b.dir, &[]);
    assert_eq!(code, 0);
    let n = tensor_count(&a);
    assert_eq!(summary(&v), [n - 1, 0, 1, 1]);
    let rows = non_identical(&v);
    assert_eq!(rows[0]["status"], "only_a");
    assert_eq!(rows[0]["name"], old);
    assert!(rows[0]["b"].is_null() && rows[0]["a"].is_object());
    assert_eq!(rows[1]["status"], "only_b");
    assert_eq!(rows[1]["name"], "audio_tower.conv1.renamed");
    assert!(rows[1]["a"].is_null() && rows[1]["b"].is_object());
    assert_eq!(diff_json(&a.dir, &b.dir, &["--fail-on", "changed"]).0, 0);
    assert_eq!(diff_json(&a.dir, &b.dir, &["--fail-on", "any"]).0, 1);
}

#[test]
fn an_unreadable_side_exits_2_with_a_message() {
    let a = TestBundle::v2();
    let b = TestBundle::v2();
    fs::remove_file(b.payload()).unwrap();
    let run = cli(&["diff", a.dir.to_str().unwrap(), b.dir.to_str().unwrap()]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("bundle B") && run.stderr.contains("weights.bin"),
        "{}",
        run.stderr
    );
    let gone = a.tmp.path().join("nowhere");
    let run = cli(&["diff", gone.to_str().unwrap(), a.dir.to_str().unwrap()]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("bundle A"), "{}", run.stderr);
}

/// E2M1 value of a 4-bit code, from the format's definition.
fn e2m1(c: u8) -> f64 {
    let m = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0][usize::from(c & 7)];
    if c & 8 != 0 { -m } else { m }
}

/// E4M3 (bias 7, no infinities) value of a byte.
fn e4m3(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((b >> 3) & 15), f64::from(b & 7));
    match e {
        0 => sign * m / 8.0 * 2f64.powi(-6),
        _ => sign * (1.0 + m / 8.0) * 2f64.powi(e - 7),
    }
}

#[test]
fn nvfp4_reports_the_one_changed_expert() {
    let a = Artifact::sample();
    let b = Artifact::sample();
    let base = "model.decoder.layers.0.experts.down_proj";
    let weight = format!("{base}.weight");
    let (header, _) = Artifact::header(&b.shard_of(&weight));
    let shape: Vec<usize> = header[&weight]["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let (experts, rows, cols) = (shape[0], shape[1], shape[2] * 8);
    assert!(experts >= 2);
    let per = rows * cols / 2;
    // Flip the sign bit of the low code of 25 bytes of expert 1.
    b.patch(&weight, |d| {
        for k in 0..25 {
            d[per + 7 * k] ^= 0x08;
        }
    });
    let (code, v) = diff_json(&a.dir, &b.dir, &["--fail-on", "changed"]);
    assert_eq!(code, 1);
    assert_eq!(summary(&v)[1..], [1, 0, 0]);
    let rows_out = non_identical(&v);
    assert_eq!(rows_out.len(), 1, "{rows_out:?}");
    let row = rows_out[0];
    assert_eq!(row["name"], weight.as_str());
    assert_eq!(row["expert"], 1);
    let share = row["codes"]["changed_share"].as_f64().unwrap();
    // A flipped sign of a zero code (+0 ↔ −0) is still a changed code.
    assert!((share - 25.0 / (rows * cols) as f64).abs() < 1e-12);

    // Weight error of expert 1, decoded naively from both sides' bytes.
    let decode = |art: &Artifact| {
        let w = art.bytes(&weight);
        let s = art.bytes(&format!("{base}.scales"));
        let g = art.bytes(&format!("{base}.global_scale"));
        let global = f64::from(f32::from_le_bytes(g[4..8].try_into().unwrap()));
        (0..rows * cols)
            .map(|j| {
                let byte = w[per + j / 2];
                let c = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
                let scale = e4m3(s[rows * cols / 16 + j / 16]);
                // The products are exact in f32 and in f64 alike.
                f64::from((e2m1(c) * scale * global / 2688.0) as f32)
            })
            .collect::<Vec<f64>>()
    };
    let (wa, wb) = (decode(&a), decode(&b));
    let d: f64 = wa.iter().zip(&wb).map(|(x, y)| (y - x) * (y - x)).sum();
    let s: f64 = wa.iter().map(|x| x * x).sum();
    let want = (d / s).sqrt();
    assert!(want > 0.0, "the flips must move some non-zero value");
    assert_eq!(row["differs"], serde_json::json!(["codes", "values"]));
    let err = row["weight_rel_err"].as_f64().unwrap();
    assert!((err - want).abs() <= 1e-6 * want, "{err} vs {want}");
}

#[test]
fn audit_range_hashes_are_the_sha256_of_each_record() {
    let b = TestBundle::v2();
    let payload = fs::read(b.payload()).unwrap();
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json", "--range-hashes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    let tensors = report["tensors"].as_array().unwrap();
    let by_name = |n: &str| tensors.iter().find(|t| t["name"] == n).unwrap();
    for t in tensors {
        let want = match t["alias_of"].as_str() {
            Some(target) => by_name(target)["sha256"].clone(),
            None => {
                let (o, n) = (
                    t["offset"].as_u64().unwrap() as usize,
                    t["bytes"].as_u64().unwrap() as usize,
                );
                Value::String(hex(&Sha256::digest(&payload[o..o + n])))
            }
        };
        assert!(want.is_string(), "{}", t["name"]);
        assert_eq!(t["sha256"], want, "{}", t["name"]);
    }
    let plain = cli(&["audit", b.dir.to_str().unwrap(), "--json"]).json();
    assert!(
        plain["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["sha256"].is_null())
    );
}

#[test]
fn audit_range_hashes_cover_nvfp4_shard_tensors() {
    let art = Artifact::sample();
    let run = cli(&[
        "audit",
        art.dir.to_str().unwrap(),
        "--json",
        "--range-hashes",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    for t in report["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let want = hex(&Sha256::digest(art.bytes(name)));
        assert_eq!(t["sha256"], want.as_str(), "{name}");
    }
}

#[test]
fn range_hashes_are_exact_when_chunks_split_every_tensor() {
    use bundlescope::audit::{self, CancelToken, Event, Options};
    let b = TestBundle::v2();
    let payload = fs::read(b.payload()).unwrap();
    // 1000-byte reads: every record starts and ends inside some chunk, and
    // large ones span many.
    let events = std::sync::Mutex::new(Vec::new());
    audit::run(
        &b.dir,
        &Options {
            chunk_bytes: Some(1000),
            range_hashes: true,
            ..Options::default()
        },
        &CancelToken::default(),
        &|e: Event| events.lock().unwrap().push(e),
    );
    let events = events.into_inner().unwrap();
    let Some(Event::Opened(bundle)) = events.first() else {
        panic!("no Opened event")
    };
    let mut hashed = vec![None; bundle.tensors.len()];
    for e in &events {
        if let Event::TensorHashed { tensor, sha256 } = e {
            assert!(
                hashed[*tensor].replace(sha256.clone()).is_none(),
                "hashed twice"
            );
        }
    }
    for (t, h) in bundle.tensors.iter().zip(&hashed) {
        match t.range() {
            Some((s, e)) if t.alias_of.is_none() => {
                let want = hex(&Sha256::digest(&payload[s as usize..e as usize]));
                assert_eq!(h.as_deref(), Some(want.as_str()), "{}", t.name);
            }
            _ => assert!(h.is_none(), "{}", t.name),
        }
    }
}
