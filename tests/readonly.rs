//! The read-only guarantee: audit, list, hist, export, spotcheck and diff
//! (and opening in the app) on a bundle of every format leave every file's
//! bytes, size and mtime as they were and create nothing in the folder; the
//! code opens bundle files only for reading.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use common::bundles::{self, Sample};

/// Name → (bytes, size, mtime) of every entry of a folder (files only; a
/// sub-folder would be listed too, as something created).
type Snapshot = BTreeMap<String, (Vec<u8>, u64, SystemTime)>;

fn snapshot(dir: &Path) -> Snapshot {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let bytes = if m.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes, m.len(), m.modified().unwrap()),
            )
        })
        .collect()
}

fn assert_unchanged(what: &str, dir: &Path, before: &Snapshot) {
    let after = snapshot(dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "{what}: entries created or removed in {}",
        dir.display()
    );
    for (name, (bytes, size, mtime)) in before {
        let (b, s, m) = &after[name];
        assert!(b == bytes, "{what}: {name}'s bytes changed");
        assert_eq!(s, size, "{what}: {name}'s size changed");
        assert_eq!(m, mtime, "{what}: {name}'s mtime changed");
    }
}

/// The first tensor `list --json` names.
fn first_tensor(s: &Sample) -> String {
    let run = common::cli(&["list", s.target.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()["tensors"][0]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn no_subcommand_writes_to_any_bundle() {
    let out = tempfile::tempdir().unwrap();
    // Each sample in a copy of its own, so the samples other tests share
    // stay untouched whatever happens here.
    let work = tempfile::tempdir().unwrap();
    let samples: Vec<(Sample, PathBuf)> = bundles::all()
        .iter()
        .map(|s| {
            let dir = work.path().join(s.name);
            let target = bundles::copy(s, &dir);
            (
                Sample {
                    dir: dir.clone(),
                    target: target.clone(),
                    ..s.clone()
                },
                target,
            )
        })
        .collect();
    // The GPTQ overlay's parent is looked for beside it, as in the samples.
    let before: Vec<Snapshot> = samples.iter().map(|(s, _)| snapshot(&s.dir)).collect();
    for (s, target) in &samples {
        let t = target.to_str().unwrap();
        // An NVFP4 artifact's first tensor is a scale; export one expert of
        // a stacked weight instead.
        let (tensor, expert) = if s.name == "nvfp4" {
            (
                "model.decoder.layers.0.experts.down_proj.weight".to_string(),
                vec!["--expert", "0"],
            )
        } else {
            (first_tensor(s), vec![])
        };
        let npy = out.path().join(format!("{}.npy", s.name));
        let runs: Vec<(&str, Vec<&str>)> = vec![
            ("audit", vec!["audit", t, "--json"]),
            ("audit", vec!["audit", t]),
            ("list", vec!["list", t]),
            ("hist", vec!["hist", t, "--all"]),
            ("hist", vec!["hist", t, "--tensor", &tensor, "--json"]),
            ("export", {
                let mut a = vec![
                    "export",
                    t,
                    "--tensor",
                    &tensor,
                    "--out",
                    npy.to_str().unwrap(),
                ];
                a.extend(&expert);
                a
            }),
            ("spotcheck", vec!["spotcheck", t]),
            ("diff", vec!["diff", t, t]),
        ];
        for (what, args) in runs {
            let run = common::cli(&args);
            assert!(
                [0, 1, 2].contains(&run.code) && !run.stderr.contains("panicked"),
                "{} {what}: exit {}\n{}",
                s.name,
                run.code,
                run.stderr
            );
            for ((other, _), snap) in samples.iter().zip(&before) {
                assert_unchanged(&format!("{} {what}", s.name), &other.dir, snap);
            }
        }
        // The export did write where it was told to.
        assert!(
            npy.exists(),
            "{}: export wrote no {}",
            s.name,
            npy.display()
        );
    }
}

/// Every place in `src/` that can create or write a file, and why it may:
/// none of them is given a path inside a bundle (export refuses one, the
/// samples write into a new folder, the app saves where the user chose and
/// caches in its own folder).
const WRITERS: &[(&str, &str)] = &[
    (
        "src/app/cache.rs",
        "the app's audit cache, in the user's cache folder",
    ),
    ("src/app/chart_export.rs", "a chart PNG the user asked for"),
    ("src/app/commands.rs", "a report saved where the user chose"),
    (
        "src/app/compare/mod.rs",
        "a comparison saved where the user chose",
    ),
    (
        "src/cli/export.rs",
        "the .npy of export --out (refused inside the bundle)",
    ),
    ("src/cli/sample.rs", "the sample subcommand's new folder"),
    ("src/sample/", "the sample writers"),
    (
        "src/format/safetensors.rs",
        "the sample writers' safetensors writer",
    ),
    (
        "src/format/payload.rs",
        "its unit tests only; bundle files open read(true)",
    ),
    ("src/util/paths.rs", "its unit tests only"),
    (
        "src/spotcheck/gguf_loader.rs",
        "MLX's GGUF loader's private copy of a payload file, in the temporary folder (mode 0600, created new, removed after the check)",
    ),
];

#[test]
fn only_known_writers_create_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stack = vec![root.join("src")];
    let mut offenders = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&p).unwrap();
            for (n, line) in text.lines().enumerate() {
                // A file's unit tests (its top-level `#[cfg(test)]` module)
                // write only in their own temporary folders.
                if line.starts_with("#[cfg(test)]") {
                    break;
                }
                let code = line.split("//").next().unwrap();
                let writes = [
                    "File::create",
                    "OpenOptions",
                    "fs::write",
                    "fs::rename",
                    "fs::remove",
                    "fs::copy",
                    "create_dir",
                    ".write(true)",
                    ".append(true)",
                ]
                .iter()
                .any(|w| code.contains(w));
                if writes && !WRITERS.iter().any(|(w, _)| rel.starts_with(w)) {
                    offenders.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
            if rel == "src/format/payload.rs" {
                assert!(text.contains("options.read(true);"));
                assert!(!text.contains(".write(true)") && !text.contains(".append(true)"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "code that can write outside the known writers:\n{}",
        offenders.join("\n")
    );
}

/// The app opens every sample (the audit, the cached verdict's write into
/// its own cache folder, the range hashes) and the folders stay as they were.
#[cfg(feature = "gui")]
#[test]
fn opening_in_the_app_writes_nothing_to_the_bundle() {
    let work = tempfile::tempdir().unwrap();
    let mut g = common::harness::gui();
    for s in bundles::all() {
        let dir = work.path().join(s.name);
        let target = bundles::copy(s, &dir);
        let before = snapshot(&dir);
        g.open(&target);
        assert!(!g.verdict().is_empty(), "{}: no verdict", s.name);
        assert_unchanged(&format!("{} in the app", s.name), &dir, &before);
    }
}
