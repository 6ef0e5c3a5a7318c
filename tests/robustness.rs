//! Bad input never panics, never hangs and is never trusted: every case ends
//! with exit 1 (a finding) or 2 (not a bundle) and a readable message.

mod common;

use std::fs;

use common::*;
use serde_json::json;

fn expect_code(dir: &std::path::Path, code: i32) -> Run {
    let run = cli(&["audit", dir.to_str().unwrap()]);
    assert_eq!(
        run.code, code,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

/// `audit --json` on a folder it cannot audit: exit 2, a sentence on
/// stderr, and still a report on stdout that parses, with `verdict` and one
/// error finding of `check`, whose message names the reason `needle`.
fn expect_failure_report(dir: &str, verdict: &str, check: &str, needle: &str) -> serde_json::Value {
    let run = cli(&["audit", dir, "--json"]);
    assert_eq!(
        run.code, 2,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let r = run.json();
    assert_eq!(r["verdict"], verdict, "{r:#}");
    assert_eq!(error_checks(&r), vec![check.to_string()], "{r:#}");
    let message = findings_of(&r, check)[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(needle), "{needle}: {message}");
    assert_eq!(r["bundle"]["path"], dir);
    assert_eq!(r["tensors"], json!([]));
    r
}

#[test]
fn empty_folder_is_not_a_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let run = expect_code(tmp.path(), 2);
    assert!(run.stderr.contains("no manifest.json"), "{}", run.stderr);
    let r = expect_failure_report(
        tmp.path().to_str().unwrap(),
        "error",
        "bundle.open",
        "no manifest.json",
    );
    assert_eq!(r["bundle"]["format"], serde_json::Value::Null);
}

#[test]
fn missing_path_cannot_be_read() {
    let run = cli(&["audit", "/definitely/not/here"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cannot read"), "{}", run.stderr);
    expect_failure_report(
        "/definitely/not/here",
        "error",
        "bundle.open",
        "cannot read /definitely/not/here",
    );
}

#[test]
fn unsupported_formats_get_an_unsupported_report() {
    for (format, shown) in [
        ("acme-GPTQ-q4", "gptq-q4-calibrated"),
        ("A8MOD001", "A8MOD001"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join("manifest.json"),
            json!({ "format": format }).to_string(),
        )
        .unwrap();
        let r = expect_failure_report(
            tmp.path().to_str().unwrap(),
            "unsupported",
            "bundle.unsupported",
            "not yet supported",
        );
        assert_eq!(r["bundle"]["format"], shown);
    }
}

#[test]
fn unknown_formats_get_an_error_report() {
    for (text, needle) in [
        (&b"{\"format\": 5}"[..], "expected a string"),
        (b"{\"format\": \"something-else\"}", "unknown format"),
        (b"{}", "neither"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("manifest.json"), text).unwrap();
        let run = expect_code(tmp.path(), 2);
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
        expect_failure_report(tmp.path().to_str().unwrap(), "error", "bundle.open", needle);
    }
}

/// A manifest.json that is empty, not JSON or not an object makes a broken
/// bundle, not "not a bundle": verdict invalid, one `manifest.parse`
/// finding with the parser's line and column, exit 1 in both modes.
#[test]
fn empty_garbage_and_non_object_manifests_are_invalid_bundles() {
    for (text, needle) in [
        (
            &b""[..],
            "not valid JSON (EOF while parsing a value at line 1, column 0)",
        ),
        (
            b"{\n  \"format\": \n",
            "not valid JSON (EOF while parsing a value at line 3, column 0)",
        ),
        (b"\x00\xff garbage {", "not valid JSON"),
        (
            b"[1, 2, 3]",
            "holds a list of 3 items, expected a JSON object",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("manifest.json"), text).unwrap();
        let dir = tmp.path().to_str().unwrap();
        let run = expect_code(tmp.path(), 1);
        assert!(run.stdout.contains("manifest.parse"), "{}", run.stdout);
        assert!(run.stdout.contains(needle), "{needle}: {}", run.stdout);
        let run = cli(&["audit", dir, "--json"]);
        assert_eq!(run.code, 1, "{}", run.stderr);
        let r = run.json();
        assert_eq!(r["verdict"], "invalid");
        assert_eq!(
            error_checks(&r),
            vec!["manifest.parse".to_string()],
            "{r:#}"
        );
        let f = findings_of(&r, "manifest.parse")[0];
        assert!(
            f["message"].as_str().unwrap().contains(needle),
            "{needle}: {f}"
        );
        // Subcommands that need the index say why instead of listing nothing.
        let list = cli(&["list", dir]);
        assert_eq!(list.code, 2, "{}", list.stdout);
        assert!(list.stderr.contains(needle), "{needle}: {}", list.stderr);
    }
}

#[test]
fn huge_manifest_is_refused_without_reading_it_all() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fs::File::create(tmp.path().join("manifest.json")).unwrap();
    f.set_len(65 << 20).unwrap(); // sparse: 65 MiB of zero bytes
    let run = expect_code(tmp.path(), 2);
    assert!(run.stderr.contains("larger than 64 MiB"), "{}", run.stderr);
}

#[test]
fn manifest_that_is_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("manifest.json")).unwrap();
    let run = expect_code(tmp.path(), 2);
    assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
}

#[test]
fn wrong_shaped_json_gets_findings_not_panics() {
    let b = TestBundle::v2();
    b.edit(|m| {
        m["weights_bytes"] = json!("1045504");
        m["group_size"] = json!(64.0);
        m["tensors"][0]["offset"] = json!(-5);
        m["tensors"][1]["offset"] = json!(9_223_372_036_854_775_808u64);
        m["tensors"][1]["bytes"] = json!(18_446_744_073_709_551_615u64);
        m["tensors"][2]["shape"] = json!([4_000_000_000u64, 4_000_000_000u64]);
        m["tensors"][3]["shape"] = json!("wide");
        m["tensors"][4] = json!("not a record");
        m["tensors"][5]["bytes"] = json!(true);
        m["aliases"] = json!(["x"]);
    });
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = run.json();
    let checks = error_checks(&r);
    for id in [
        "manifest.field",
        "manifest.group_size",
        "record.field",
        "record.bytes",
        "packed.dimensions",
        "dense.shape",
    ] {
        assert!(
            checks.contains(&id.to_string()),
            "{id} missing from {checks:?}"
        );
    }
}

#[test]
fn claimed_sizes_are_never_allocated() {
    // A dense record claiming 2^62 bytes and a packed one at the row bound:
    // the audit must refuse both from the numbers alone, without allocating.
    let b = TestBundle::v2();
    b.edit(|m| {
        m["weights_bytes"] = json!(1u64 << 62);
        m["tensors"][0]["bytes"] = json!(1u64 << 62);
        m["tensors"][0]["shape"] = json!([1u64 << 61]);
    });
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1);
    let checks = error_checks(&run.json());
    assert!(checks.contains(&"dense.bytes".to_string()), "{checks:?}");
    assert!(checks.contains(&"payload.length".to_string()), "{checks:?}");
}

#[test]
fn too_many_records_are_bounded() {
    let b = TestBundle::v2();
    b.edit(|m| {
        let one = m["tensors"][0].clone();
        m["tensors"] = json!(vec![one; 5000]);
    });
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1);
    let r = run.json();
    assert!(error_checks(&r).contains(&"manifest.tensor_count".to_string()));
    assert!(r["tensors"].as_array().unwrap().len() <= 2001);
}

#[cfg(unix)]
#[test]
fn payload_fifo_does_not_hang() {
    let b = TestBundle::v2();
    fs::remove_file(b.payload()).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(b.payload())
        .status()
        .unwrap();
    assert!(status.success());
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1);
    assert!(error_checks(&run.json()).contains(&"payload.file".to_string()));
}

#[cfg(unix)]
#[test]
fn unreadable_payload_is_a_finding() {
    use std::os::unix::fs::PermissionsExt;
    let b = TestBundle::v2();
    fs::set_permissions(b.payload(), fs::Permissions::from_mode(0o000)).unwrap();
    let args = ["audit", b.dir.to_str().unwrap(), "--json"];
    let run = if fs::File::open(b.payload()).is_ok() {
        // Root reads through permissions (and CI runs as root): audit
        // without the capabilities that allow it, which mode 000 does stop.
        match cli_without_dac(&args) {
            Some(run) => run,
            None => {
                assert!(
                    require_or_skip(
                        "running the audit without CAP_DAC_OVERRIDE (setpriv)",
                        false
                    ),
                    "unreachable"
                );
                return;
            }
        }
    } else {
        cli(&args)
    };
    assert_eq!(
        run.code, 1,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    let report = run.json();
    assert_eq!(error_checks(&report), ["payload.file"], "{report:#}");
    let f = findings_of(&report, "payload.file");
    assert!(
        f[0]["message"].as_str().unwrap().contains("weights.bin"),
        "the finding names the file: {f:?}"
    );
}

#[test]
fn truncated_payload_names_the_tensor_it_ends_in() {
    let b = TestBundle::v2();
    let v = b.record("language_model.model.layers.1.mlp.up_proj.weight");
    let cut = v["offset"].as_u64().unwrap() as usize + 10;
    b.patch_payload(false, |p| p.truncate(cut));
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1);
    let r = run.json();
    let hits = findings_of(&r, "payload.length");
    assert!(
        hits.iter()
            .any(|f| f["tensor"] == "language_model.model.layers.1.mlp.up_proj.weight"),
        "{hits:#?}"
    );
}

#[test]
fn the_audit_never_writes_to_the_bundle() {
    let b = TestBundle::v2();
    let before: Vec<_> = ["manifest.json", "weights.bin"]
        .iter()
        .map(|f| {
            let m = fs::metadata(b.dir.join(f)).unwrap();
            (fs::read(b.dir.join(f)).unwrap(), m.modified().unwrap())
        })
        .collect();
    assert_eq!(cli(&["audit", b.dir.to_str().unwrap()]).code, 0);
    assert_eq!(fs::read_dir(&b.dir).unwrap().count(), 2);
    for (f, (bytes, mtime)) in ["manifest.json", "weights.bin"].iter().zip(before) {
        let m = fs::metadata(b.dir.join(f)).unwrap();
        assert_eq!(fs::read(b.dir.join(f)).unwrap(), bytes);
        assert_eq!(m.modified().unwrap(), mtime);
    }
}

#[test]
fn manifest_path_opens_its_folder_and_unknown_formats_are_named() {
    let b = TestBundle::v2();
    let run = cli(&["audit", b.dir.join("manifest.json").to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for (format, needle) in [("A8MOD001", "A8MOD001"), ("gptq-q4-calibrated-v1", "GPTQ")] {
        b.edit(|m| m["format"] = json!(format));
        let run = cli(&["audit", b.dir.to_str().unwrap()]);
        assert_eq!(run.code, 2);
        assert!(
            run.stderr.contains("recognised") && run.stderr.contains("not yet supported"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.to_lowercase().contains(&needle.to_lowercase()),
            "{}",
            run.stderr
        );
    }
    b.write_manifest(&json!({"quantization": {"mode": "nvfp4", "layout": "stacked-global-scale"}}));
    // Recognised and audited: with no shards and no weight_map it is invalid,
    // and the findings say what is missing.
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = run.json();
    assert_eq!(r["bundle"]["format"], "mlx-nvfp4");
    assert!(
        error_checks(&r).contains(&"nvfp4.manifest".to_string()),
        "{r:#}"
    );
}

/// A mistyped subcommand must not be taken for a folder (which would open a
/// window on nothing): exit 2 with clap's suggestion. The test machine has
/// no display, so a window attempt would show as a display error (or hang
/// into the runner's guard) instead of this message.
#[test]
fn mistyped_subcommand_is_named_with_a_suggestion() {
    let b = TestBundle::v2();
    for args in [vec!["audti", b.dir.to_str().unwrap()], vec!["audti"]] {
        let run = cli(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("no such subcommand or folder: 'audti'"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("did you mean 'audit'?"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("window"), "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
}

/// A path that does not exist is refused before any window opens, and the
/// message names it.
#[test]
fn opening_a_missing_path_fails_before_a_window() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-bundle");
    let run = cli(&[missing.to_str().unwrap()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "cannot open {}: no such file or folder",
            missing.display()
        )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("window"), "{}", run.stderr);
}

/// `completions SHELL` prints a script made from the real command tree.
#[test]
fn completion_scripts_cover_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let run = cli(&["completions", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        for sub in ["audit", "spotcheck", "completions"] {
            assert!(run.stdout.contains(sub), "{shell} script lacks {sub}");
        }
    }
    let bash = cli(&["completions", "bash"]).stdout;
    assert!(bash.contains("complete -F"), "not a bash completion script");
    let bad = cli(&["completions", "tcsh"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("possible values"), "{}", bad.stderr);
}
