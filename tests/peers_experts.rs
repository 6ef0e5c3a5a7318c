//! Stacked MoE experts are peers of each other within a layer: one expert
//! of a stacked weight damaged in a way every rule accepts (each kind of
//! the corpus in tests/common/damage.rs that the format can hold) puts the
//! tensor first in `hist --all --json`, with no reference, and the reason
//! names the expert; on the undamaged bundles no tensor stands out. Run on
//! an mlx-nvfp4 sample (8 experts, E2M1 codes, E4M3 scales, a global
//! scale per expert) and on an MLX-LM sample's `switch_mlp` (8 experts,
//! affine 4-bit). The tests print the table the README quotes.

mod common;

use std::fs;
use std::path::Path;

use bundlescope::sample::mlxlm::{self, MlxLmOptions};
use bundlescope::sample::nvfp4::Nvfp4Options;
use common::nvfp4::Artifact;
use common::{cli, codes};
use serde_json::Value;

/// No tensor of an undamaged bundle scores this much.
const CLEAN_MAX: f64 = 1.0;
/// The damaged expert.
const EXPERT: usize = 5;
const EXPERTS: u64 = 8;

/// `hist --all --json`'s tensors, worst first.
fn ranking(dir: &Path) -> Vec<Value> {
    let run = cli(&["hist", dir.to_str().unwrap(), "--all", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()["tensors"].as_array().unwrap().clone()
}

/// A deterministic hash of a position, for choosing codes.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rows a row-wise damage touches: 5% of them.
fn every_20th(r: usize) -> bool {
    r % 20 == 3
}

/// Damage to one expert's codes, whatever the grid: `new(code, row, j)`
/// gives the new code or None to keep it. `bytes` is the expert's slice
/// of 4-bit codes, `cols` codes a row.
fn recode(bytes: &mut [u8], cols: usize, new: impl Fn(u8, usize, usize) -> Option<u8>) {
    let row_bytes = cols / 2;
    for (r, row) in bytes.chunks_exact_mut(row_bytes).enumerate() {
        for j in 0..cols {
            let c = codes::get_code(row, 4, j);
            if let Some(n) = new(c, r, j) {
                codes::set_code(row, 4, j, n);
            }
        }
    }
}

/// Checks the undamaged ranking and each damaged one; prints the table.
/// `rows`: each damage's label, the score it must reach, and the ranking.
fn check(what: &str, clean: &[Value], rows: &[(&str, f64, Vec<Value>)], target: &str) {
    let top = &clean[0];
    println!(
        "\n{what}: undamaged, the highest score is {:.2}: {} ({})",
        top["score"].as_f64().unwrap(),
        top["tensor"],
        top["reason"]
    );
    println!("| damage to expert {EXPERT} | rank without a reference | score | reason |");
    println!("|---|---|---|---|");
    for (damage, _, r) in rows {
        let pos = r.iter().position(|t| t["tensor"] == target).unwrap();
        println!(
            "| {damage} | {} of {} | {:.2} | {} |",
            pos + 1,
            r.len(),
            r[pos]["score"].as_f64().unwrap(),
            r[pos]["reason"].as_str().unwrap()
        );
    }
    assert!(
        top["score"].as_f64().unwrap() < CLEAN_MAX,
        "{what}: an undamaged tensor stands out: {top}"
    );
    for (damage, min_score, r) in rows {
        let t = &r[0];
        assert_eq!(
            t["tensor"], target,
            "{what}: {damage}: ranked first instead: {} ({})",
            t["tensor"], t["reason"]
        );
        assert!(
            t["score"].as_f64().unwrap() >= *min_score,
            "{what}: {damage}: {t}"
        );
        let reason = t["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("expert {EXPERT} of {EXPERTS}:")),
            "{what}: {damage}: {reason}"
        );
        assert_eq!(t["expert"], EXPERT as u64, "{what}: {damage}");
    }
}

/// An mlx-nvfp4 expert's damage: its codes, or its global scale.
#[derive(Debug, Clone, Copy)]
enum Nv {
    Extremes,
    GlobalScale,
    ZeroedRows,
    ShiftedLevels,
    /// Its codes, scales and global scale copied from expert 2.
    Copied,
}

/// Copies expert 2's slice of a stacked tensor's bytes over expert 5's.
fn copy_expert(b: &mut [u8], experts: usize) {
    let per = b.len() / experts;
    let from = b[2 * per..3 * per].to_vec();
    b[EXPERT * per..(EXPERT + 1) * per].copy_from_slice(&from);
}

#[test]
fn one_damaged_nvfp4_expert_puts_its_tensor_first_and_is_named() {
    let o = Nvfp4Options::default();
    assert_eq!(o.experts, EXPERTS);
    let base = "model.decoder.layers.2.experts.down_proj";
    let target = format!("{base}.weight");
    // down_proj: [experts, hidden, intermediate].
    let (rows, cols) = (o.hidden as usize, o.intermediate as usize);
    let clean = Artifact::with(&o);
    let before = ranking(&clean.dir);
    let mut table = Vec::new();
    for (d, label) in [
        (Nv::Extremes, "30% of codes pushed to ±6"),
        (Nv::GlobalScale, "its global scale 4× too large"),
        (Nv::ZeroedRows, "5% of rows zeroed (all codes +0)"),
        (Nv::ShiftedLevels, "every magnitude up by one step"),
        (Nv::Copied, "its bytes copied from expert 2"),
    ] {
        let a = Artifact::with(&o);
        match d {
            Nv::Copied => {
                for part in ["weight", "scales", "global_scale"] {
                    a.patch(&format!("{base}.{part}"), |b| {
                        copy_expert(b, EXPERTS as usize)
                    });
                }
            }
            Nv::GlobalScale => a.patch(&format!("{base}.global_scale"), |b| {
                let at = EXPERT * 4;
                let g = f32::from_le_bytes(b[at..at + 4].try_into().unwrap());
                b[at..at + 4].copy_from_slice(&(g * 4.0).to_le_bytes());
            }),
            _ => a.patch(&target, |b| {
                let per = rows * cols / 2;
                let e = &mut b[EXPERT * per..(EXPERT + 1) * per];
                recode(e, cols, |c, r, j| match d {
                    Nv::Extremes => {
                        let h = mix((r * cols + j) as u64);
                        (h % 10 < 3).then_some(if h & 1024 == 0 { 7 } else { 15 })
                    }
                    Nv::ZeroedRows => every_20th(r).then_some(0),
                    _ => Some((c & 8) | ((c & 7) + 1).min(7)),
                });
            }),
        }
        let report = common::audit_json(&a.dir).json();
        assert!(
            common::error_checks(&report).is_empty(),
            "{d:?}: {:?}",
            common::error_checks(&report)
        );
        // The sample's experts differ by up to 2× by design (their source
        // spreads), so a 4× global scale on expert 5, one of the smallest,
        // lands 2.7× above its peers' median: first, with a reason, but
        // below the score of 1 that any other damage reaches.
        let min_score = match d {
            Nv::GlobalScale => 0.5,
            _ => CLEAN_MAX,
        };
        table.push((label, min_score, ranking(&a.dir)));
    }
    check(
        "mlx-nvfp4 sample (4 layers × 8 experts)",
        &before,
        &table,
        &target,
    );
}

/// A safetensors shard of `dir` holding `tensor`, its header's data
/// offsets made absolute.
fn locate(dir: &Path, tensor: &str) -> (std::path::PathBuf, usize, usize) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "safetensors") {
            continue;
        }
        let bytes = fs::read(&p).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        if let Some(o) = header[tensor]["data_offsets"].as_array() {
            let at = |k: usize| 8 + n + o[k].as_u64().unwrap() as usize;
            return (p, at(0), at(1));
        }
    }
    panic!("{tensor} is in no shard of {}", dir.display());
}

/// Edits `tensor`'s bytes in place.
fn patch(dir: &Path, tensor: &str, f: impl FnOnce(&mut [u8])) {
    let (p, a, b) = locate(dir, tensor);
    let mut bytes = fs::read(&p).unwrap();
    f(&mut bytes[a..b]);
    fs::write(&p, bytes).unwrap();
}

/// BF16 `h` times 2^k (an exponent shift); stays finite.
fn bf16_times_pow2(h: u16, k: u16) -> u16 {
    let exp = (h >> 7) & 0xff;
    if exp == 0 {
        return h; // zero or subnormal: stays
    }
    assert!(exp + k < 255, "{h:#06x} cannot be scaled by 2^{k}");
    h + (k << 7)
}

/// Damage kinds of an affine MLX-LM expert: the corpus's.
const MLX_DAMAGE: [(&str, u8); 6] = [
    ("30% of codes pushed to the extreme levels", 0),
    ("5% of rows with scales 16× too large", 1),
    ("every scale 4× too large", 2),
    ("5% of rows zeroed (all codes 0)", 3),
    ("every level shifted up by one", 4),
    ("its bytes copied from expert 2", 5),
];

#[test]
fn one_damaged_switch_mlp_expert_puts_its_tensor_first_and_is_named() {
    let o = MlxLmOptions {
        layers: 3,
        experts: EXPERTS,
        ..MlxLmOptions::default()
    };
    let write = || {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        mlxlm::write(&dir, &o, None).unwrap();
        (tmp, dir)
    };
    let module = "model.layers.1.mlp.switch_mlp.down_proj";
    let target = format!("{module}.weight");
    // down_proj: [experts, hidden, intermediate], 4-bit codes, groups of 64.
    let (rows, cols) = (o.hidden as usize, o.intermediate as usize);
    let groups = cols / o.group as usize;
    let (_t, clean) = write();
    let before = ranking(&clean);
    let mut table = Vec::new();
    for (label, d) in MLX_DAMAGE {
        let (_tmp, dir) = write();
        match d {
            5 => {
                for part in ["weight", "scales", "biases"] {
                    patch(&dir, &format!("{module}.{part}"), |b| {
                        copy_expert(b, EXPERTS as usize)
                    });
                }
            }
            1 | 2 => {
                // Scales and biases alike: the values themselves scaled.
                for part in ["scales", "biases"] {
                    patch(&dir, &format!("{module}.{part}"), |b| {
                        let per = rows * groups * 2;
                        let e = &mut b[EXPERT * per..(EXPERT + 1) * per];
                        for (r, row) in e.chunks_exact_mut(groups * 2).enumerate() {
                            let k = match d {
                                1 if every_20th(r) => 4,
                                2 => 2,
                                _ => continue,
                            };
                            for s in row.chunks_exact_mut(2) {
                                let h = u16::from_le_bytes([s[0], s[1]]);
                                s.copy_from_slice(&bf16_times_pow2(h, k).to_le_bytes());
                            }
                        }
                    });
                }
            }
            _ => patch(&dir, &target, |b| {
                let per = rows * cols / 2;
                let e = &mut b[EXPERT * per..(EXPERT + 1) * per];
                recode(e, cols, |c, r, j| match d {
                    0 => {
                        let h = mix((r * cols + j) as u64);
                        (h % 10 < 3).then_some(if h & 1024 == 0 { 0 } else { 15 })
                    }
                    3 => every_20th(r).then_some(0),
                    _ => Some((c + 1).min(15)),
                });
            }),
        }
        let report = common::audit_json(&dir).json();
        assert!(
            common::error_checks(&report).is_empty(),
            "{label}: {:?}",
            common::error_checks(&report)
        );
        table.push((label, CLEAN_MAX, ranking(&dir)));
    }
    check(
        "MLX-LM sample, switch_mlp (2 MoE layers × 8 experts, affine 4-bit)",
        &before,
        &table,
        &target,
    );
}
