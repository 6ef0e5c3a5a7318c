//! Calibrated GPTQ-Q4 overlays (docs/provenance.md) through the real
//! binary: a valid overlay with and without its parent, the report's four
//! loader fields, the identity recomputed in Python, diff against the
//! parent, the unmodified reference loader with the reading written again
//! in Python, and `q3_full8` refused. The corruption cases of every
//! provenance check are in tests/checks.rs.

mod common;

use std::path::Path;

use common::gptq::{Overlay, V_PROJ, identity};
use common::*;
use serde_json::{Value, json};

fn audit(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["audit", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let run = cli(&args);
    (run.code, run.json())
}

fn overlay_names(o: &Overlay) -> Vec<String> {
    o.manifest()["provenance"]["overlay"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_valid_overlay_beside_its_parent_verifies_every_link() {
    let o = Overlay::new(true);
    let (code, r) = audit(&o.dir, &[]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["verdict"], "valid");
    assert_eq!(r["bundle"]["format"], "audio8-gptq-q4-calibrated-v1");
    let p = &r["provenance"];
    assert_eq!(
        p["reading"],
        "bundlescope's documented reading of the calibrated GPTQ-Q4 format"
    );
    assert_eq!(p["calibration_provenance_verified"], true);
    assert_eq!(p["copied_tensor_range_hashes_verified"], true);
    assert_eq!(p["static_parent_scale_equality_rechecked"], true);
    let m = o.manifest();
    assert_eq!(
        p["overlay_identity_sha256"],
        m["provenance"]["overlay_identity_sha256"]
    );
    assert_eq!(
        p["overlay_identity_recomputed_sha256"],
        p["overlay_identity_sha256"]
    );
    let pc = &p["parent_check"];
    assert_eq!(pc["status"], "verified", "{pc:#}");
    assert_eq!(pc["found_by"], "sibling");
    assert_eq!(pc["manifest_sha256_ok"], true);
    assert_eq!(pc["weights_sha256_ok"], true);
    let overlay = overlay_names(&o);
    let copied = m["provenance"]["copied"].as_array().unwrap().len();
    assert_eq!(pc["copied_identical"], copied as u64);
    assert_eq!(pc["overlay_changed"], overlay.len() as u64);
    // The sample keeps the parent's scales for q4 tensors and gives the
    // 3-bit ones new q4 scales.
    let equal: Vec<&str> = pc["scales_equal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let parent = TestBundle {
        tmp: tempfile::tempdir().unwrap(),
        dir: o.parent.clone(),
    };
    for n in &overlay {
        let was_q4 = parent.record(n)["precision"] == "q4";
        assert_eq!(equal.contains(&n.as_str()), was_q4, "{n}");
        assert_eq!(o.record(n)["precision"], "q4", "{n}");
    }
    // Range hashes are always computed for an overlay, and each is the
    // SHA-256 of the tensor's bytes.
    for t in r["tensors"].as_array().unwrap() {
        if t["alias_of"].is_null() {
            let name = t["name"].as_str().unwrap();
            assert_eq!(t["sha256"], json!(o.range_sha(name)), "{name}");
        }
    }
    // The text summary prints the chain.
    let run = cli(&["audit", o.dir.to_str().unwrap()]);
    assert_eq!(run.code, 0);
    for needle in [
        "documented reading",
        "parent bundle",
        "provenance.parent_copied",
        "no bundle compared",
    ] {
        assert!(run.stdout.contains(needle), "{needle}: {}", run.stdout);
    }
}

#[test]
fn without_its_parent_the_overlay_still_verifies_what_it_can() {
    let o = Overlay::new(false);
    let (code, r) = audit(&o.dir, &[]);
    assert_eq!(code, 0, "{r:#}");
    let p = &r["provenance"];
    assert_eq!(p["calibration_provenance_verified"], true);
    assert_eq!(p["copied_tensor_range_hashes_verified"], true);
    // As the reference loader says: not rechecked without the parent.
    assert_eq!(p["static_parent_scale_equality_rechecked"], false);
    assert_eq!(p["parent_check"]["status"], "not_found");
    let info = findings_of(&r, "provenance.parent");
    assert!(info.iter().all(|f| f["severity"] == "info"), "{info:#?}");
    assert!(!info.is_empty());
    assert!(findings_of(&r, "provenance.parent_scales").is_empty());
    // Named with --parent, it is checked.
    let (code, r) = audit(&o.dir, &["--parent", o.parent.to_str().unwrap()]);
    assert_eq!(code, 0, "{r:#}");
    let p = &r["provenance"];
    assert_eq!(p["static_parent_scale_equality_rechecked"], true);
    assert_eq!(p["parent_check"]["status"], "verified");
    assert_eq!(p["parent_check"]["found_by"], "option");
}

#[test]
fn the_overlay_identity_recomputes_in_python() {
    let o = Overlay::new(false);
    let (_, r) = audit(&o.dir, &[]);
    let overlay = overlay_names(&o);
    let hashes: serde_json::Map<String, Value> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| overlay.iter().any(|n| t["name"] == n.as_str()))
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["sha256"].clone()))
        .collect();
    let parent = r["provenance"]["parent"]["manifest_sha256"].clone();
    let input = json!({"parent": parent, "hashes": hashes}).to_string();
    let code = "import json,sys,hashlib; d=json.loads(sys.argv[1]); \
        print(hashlib.sha256(json.dumps({'parent': d['parent'], 'overlay': sorted(({'name': n, 'range_sha256': h} for n, h in d['hashes'].items()), key=lambda e: e['name'])}, sort_keys=True, separators=(',',':'), ensure_ascii=False).encode('utf-8')).hexdigest())";
    let Some(out) = run_python(&["-c", code, &input]) else {
        assert!(!require_or_skip("python", false));
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(py.len(), 64);
    assert_eq!(r["provenance"]["overlay_identity_sha256"], json!(py));
    assert_eq!(
        r["provenance"]["overlay_identity_recomputed_sha256"],
        json!(py)
    );
    // And the test's own Rust implementation agrees.
    let pairs: Vec<(String, String)> = hashes
        .iter()
        .map(|(n, h)| (n.clone(), h.as_str().unwrap().to_string()))
        .collect();
    assert_eq!(identity(parent.as_str().unwrap(), &pairs), py);
}

#[test]
fn diff_of_parent_and_overlay_names_exactly_the_overlay() {
    let o = Overlay::new(true);
    let run = cli(&[
        "diff",
        o.parent.to_str().unwrap(),
        o.dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    let mut changed: Vec<String> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] != "identical")
        .map(|t| {
            assert_eq!(t["status"], "changed", "{t:#}");
            t["name"].as_str().unwrap().to_string()
        })
        .collect();
    changed.sort();
    let mut overlay = overlay_names(&o);
    overlay.sort();
    assert_eq!(changed, overlay);
    assert_eq!(v["summary"]["only_a"], 0);
    assert_eq!(v["summary"]["only_b"], 0);
    // A q4 tensor re-rounded on the parent's scales: same precision and
    // shape, codes changed, every scale ratio 1.
    let row = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == V_PROJ)
        .unwrap();
    assert_eq!(row["differs"], json!(["codes", "values"]), "{row:#}");
    assert_eq!(row["scales"]["equal_share"], json!(1.0));
    assert!(row["codes"]["changed_share"].as_f64().unwrap() > 0.0);
}

/// Runs the unmodified reference loader with the reading written again in
/// Python (tests/seed/gptq_q4_provenance.py) as its provenance module.
fn seed_load(dir: &Path) -> Option<Value> {
    let seed = shared_dir().join("seeds").join("weights.py");
    if !require_or_skip(
        "the reference loader (../shared/seeds/weights.py)",
        seed.exists(),
    ) {
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/seed/run_seed_gptq.py");
    let out = run_python(&[
        script.to_str().unwrap(),
        seed.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    let out = match out {
        Some(o) if o.status.success() => o,
        other => {
            let why = other.map_or("no python".into(), |o| {
                String::from_utf8_lossy(&o.stderr).into_owned()
            });
            require_or_skip(&format!("python with mlx ({why})"), false);
            return None;
        }
    };
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn the_reference_loader_accepts_the_overlay_with_the_documented_reading() {
    let o = Overlay::new(true);
    let Some(v) = seed_load(&o.dir) else { return };
    assert_eq!(v["verdict"], "valid", "{v:#}");
    let p = &v["provenance"];
    assert_eq!(p["format"], "audio8-gptq-q4-calibrated-v1");
    assert_eq!(p["calibration_provenance_verified"], true);
    assert_eq!(p["copied_tensor_range_hashes_verified"], true);
    assert_eq!(p["static_parent_scale_equality_rechecked"], false);
    let (_, r) = audit(&o.dir, &[]);
    assert_eq!(
        p["overlay_identity_sha256"],
        r["provenance"]["overlay_identity_recomputed_sha256"]
    );
    // Each corruption bundlescope calls invalid, the Python reading refuses.
    for (what, edit) in [
        (
            "identity",
            (|o: &Overlay| {
                o.edit(|m| m["provenance"]["overlay_identity_sha256"] = json!("cd".repeat(32)))
            }) as fn(&Overlay),
        ),
        ("copied hash", |o: &Overlay| {
            o.edit(|m| m["provenance"]["copied"][0]["range_sha256"] = json!("0".repeat(64)))
        }),
        ("neither list", |o: &Overlay| {
            o.edit(|m| {
                m["provenance"]["copied"].as_array_mut().unwrap().pop();
            })
        }),
        ("both lists", |o: &Overlay| {
            let sha = o.range_sha(V_PROJ);
            o.edit(|m| {
                m["provenance"]["copied"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": V_PROJ, "range_sha256": sha}))
            })
        }),
        ("overlay tensor not q4", |o: &Overlay| {
            let gate = common::gptq::GATE;
            o.edit(|m| {
                let p = &mut m["provenance"];
                p["copied"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|e| e["name"] != gate);
                p["overlay"].as_array_mut().unwrap().push(json!(gate));
            });
            o.reidentify();
        }),
    ] {
        let o = Overlay::new(false);
        edit(&o);
        let (code, r) = audit(&o.dir, &[]);
        assert_eq!(code, 1, "{what}: {r:#}");
        let Some(v) = seed_load(&o.dir) else { return };
        assert_eq!(v["verdict"], "invalid", "{what}: {v:#}");
    }
}

#[test]
fn a_v2_bundle_relabelled_as_an_overlay_is_refused_for_q3_full8() {
    let b = TestBundle::v2();
    let m = b.manifest();
    let names: Vec<String> = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    let bytes = std::fs::read(b.payload()).unwrap();
    let copied: Vec<Value> = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let (o, n) = (r["offset"].as_u64().unwrap() as usize, r["bytes"].as_u64().unwrap() as usize);
            json!({"name": r["name"], "range_sha256": hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes[o..o + n]))})
        })
        .collect();
    assert_eq!(copied.len(), names.len());
    let parent_sha = "a".repeat(64);
    let id = identity(&parent_sha, &[]);
    b.edit(|m| {
        m["format"] = json!("audio8-gptq-q4-calibrated-v1");
        m["provenance"] = json!({
            "parent": {"manifest_sha256": parent_sha, "weights_sha256": "b".repeat(64),
                       "source_revision": "r"},
            "calibration": {"method": "none"},
            "overlay": [],
            "copied": copied,
            "overlay_identity_sha256": id,
        });
    });
    let (code, r) = audit(&b.dir, &[]);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(error_checks(&r), vec!["record.full8_requires_v2"], "{r:#}");
    assert_eq!(r["provenance"]["calibration_provenance_verified"], true);
    // The reference loader, past the Python reading's checks, refuses it
    // for the same reason.
    let Some(v) = seed_load(&b.dir) else { return };
    assert_eq!(v["verdict"], "invalid", "{v:#}");
    assert!(
        v["error"].as_str().unwrap().contains("full8 requires v2"),
        "{v:#}"
    );
}

#[test]
fn other_gptq_names_stay_recognised_not_supported() {
    let b = TestBundle::v2();
    b.edit(|m| m["format"] = json!("audio8-gptq-q4-calibrated-v2"));
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 2);
    assert_eq!(run.json()["verdict"], "unsupported");
}

#[test]
fn a_parent_that_cannot_be_opened_is_a_parent_finding() {
    let o = Overlay::new(false);
    let (code, r) = audit(&o.dir, &["--parent", "/definitely/not/a/parent"]);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(error_checks(&r), vec!["provenance.parent"], "{r:#}");
    assert_eq!(r["provenance"]["parent_check"]["status"], "unreadable");
    assert_eq!(
        r["provenance"]["static_parent_scale_equality_rechecked"],
        false
    );
}

#[test]
fn an_endless_provenance_list_is_bounded() {
    let o = Overlay::new(false);
    o.edit(|m| {
        let names: Vec<Value> = (0..5000).map(|i| json!(format!("ghost.{i}"))).collect();
        m["provenance"]["overlay"] = Value::Array(names);
    });
    let (code, r) = audit(&o.dir, &[]);
    assert_eq!(code, 1);
    let partition = findings_of(&r, "provenance.partition").len();
    // At most one per examined entry, plus the real tensors now in neither list.
    assert!(partition <= 2000 + 40, "{partition}");
    assert!(
        findings_of(&r, "provenance.field")
            .iter()
            .any(|f| f["message"].as_str().unwrap().contains("5000 entries")),
        "{r:#}"
    );
}

#[test]
fn the_identity_of_unusual_names_matches_python() {
    // Non-ASCII (written as UTF-8, not escaped), a control character, a
    // quote, and an order where byte order and a naive sort could differ.
    let pairs: Vec<(String, String)> = [
        ("zeta.é.weight", "1"),
        ("alpha\u{1}\"q\".weight", "2"),
        ("Ω.bias", "3"),
        ("alpha.weight", "4"),
    ]
    .iter()
    .map(|(n, h)| (n.to_string(), h.repeat(64)))
    .collect();
    let parent = "f".repeat(64);
    let input = json!({"parent": parent, "pairs": pairs}).to_string();
    let code = "import json,sys,hashlib; d=json.loads(sys.argv[1]); \
        print(hashlib.sha256(json.dumps({'parent': d['parent'], 'overlay': sorted(({'name': n, 'range_sha256': h} for n, h in d['pairs']), key=lambda e: e['name'])}, sort_keys=True, separators=(',',':'), ensure_ascii=False).encode('utf-8')).hexdigest())";
    let Some(out) = run_python(&["-c", code, &input]) else {
        assert!(!require_or_skip("python", false));
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(
        bundlescope::format::gptq::overlay_identity(&parent, &pairs),
        py
    );
    assert_eq!(identity(&parent, &pairs), py);
}

#[test]
fn the_overlay_writer_refuses_what_the_format_cannot_hold() {
    let o = Overlay::new(false);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x");
    // No parent.
    let run = cli(&["sample", out.to_str().unwrap(), "--format", "gptq-q4"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--parent"), "{}", run.stderr);
    // A q3_full8 tensor left to be copied.
    let run = cli(&[
        "sample",
        out.to_str().unwrap(),
        "--format",
        "gptq-q4",
        "--parent",
        o.parent.to_str().unwrap(),
        "--overlay",
        V_PROJ,
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("q3_full8"), "{}", run.stderr);
    // The parent is only read.
    let (code, _) = audit(&o.parent, &[]);
    assert_eq!(code, 0);
}
