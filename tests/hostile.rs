//! Hostile folders: payload files and shards that are symbolic links (out of
//! the folder, inside it, in a loop), FIFOs, sockets and devices, files that
//! grow or shrink while the audit reads them, a folder of 100,000 unrelated
//! files and a path that is not UTF-8. Each gives a finding at once (or a
//! normal audit), never a hang, a crash or a silent follow out of the folder.
#![cfg(unix)]

mod common;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bundlescope::audit::{self, Event, Options};
use bundlescope::report::ReportBuilder;
use bundlescope::util::CancelToken;
use common::bundles::{self, Sample};
use serde_json::Value;

fn sample(name: &str) -> &'static Sample {
    bundles::all().iter().find(|s| s.name == name).unwrap()
}

/// A copy of a sample in its own folder.
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let target = bundles::copy(sample(name), &dir);
    (tmp, dir, target)
}

/// `audit --json` within `limit`, returning the exit code and report.
fn audit(target: &Path, limit: Duration) -> (i32, Value) {
    let start = Instant::now();
    let run = common::cli(&["audit", target.to_str().unwrap(), "--json"]);
    assert!(
        start.elapsed() < limit,
        "{}: {:?}",
        target.display(),
        start.elapsed()
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    (run.code, run.json())
}

fn messages(report: &Value, check: &str, severity: &str) -> Vec<String> {
    common::findings_of(report, check)
        .iter()
        .filter(|f| f["severity"] == severity)
        .map(|f| f["message"].as_str().unwrap().to_string())
        .collect()
}

const QUICK: Duration = Duration::from_secs(30);

/// The payload file or first shard of each folder format, and the GGUF file.
fn linked() -> Vec<(&'static str, String)> {
    ["audio8-v2", "nvfp4", "mlx-lm", "gguf"]
        .iter()
        .map(|&name| {
            let file = bundles::files(&sample(name).dir)
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .find(|f| f == "weights.bin" || f.ends_with(".safetensors") || f.ends_with(".gguf"))
                .unwrap();
            (name, file)
        })
        .collect()
}

#[test]
fn a_symlink_out_of_the_folder_is_reported_with_its_real_path() {
    for (name, file) in &linked() {
        let (tmp, dir, target) = copy_of(name);
        let away = tmp.path().join("elsewhere");
        fs::create_dir(&away).unwrap();
        fs::rename(dir.join(file), away.join(file)).unwrap();
        std::os::unix::fs::symlink(away.join(file), dir.join(file)).unwrap();
        let (code, r) = audit(&target, QUICK);
        let real = fs::canonicalize(away.join(file)).unwrap();
        let warned = messages(&r, "payload.file", "warning");
        assert!(
            warned.iter().any(|m| m.contains("symbolic link")
                && m.contains("outside the bundle folder")
                && m.contains(&real.display().to_string())),
            "{name}: {warned:?}"
        );
        // Followed, said, and otherwise a normal audit of the same bytes.
        assert_eq!(code, 0, "{name}: {:#}", r["findings"]);
    }
}

#[test]
fn a_symlink_inside_the_folder_is_said_to_stay_inside() {
    let (_tmp, dir, target) = copy_of("audio8-v2");
    fs::rename(dir.join("weights.bin"), dir.join("real.bin")).unwrap();
    std::os::unix::fs::symlink("real.bin", dir.join("weights.bin")).unwrap();
    let (code, r) = audit(&target, QUICK);
    assert_eq!(code, 0);
    let warned = messages(&r, "payload.file", "warning");
    assert!(
        warned.len() == 1 && warned[0].contains("inside the bundle folder"),
        "{warned:?}"
    );
}

#[test]
fn a_symlink_loop_is_an_error_at_once() {
    for (name, file) in &linked() {
        let (_tmp, dir, target) = copy_of(name);
        fs::remove_file(dir.join(file)).unwrap();
        std::os::unix::fs::symlink(file, dir.join(file)).unwrap();
        let (code, r) = audit(&target, QUICK);
        assert_ne!(code, 0, "{name}");
        // A GGUF path that is a loop cannot be opened at all (exit 2, the
        // open error names it); the folder formats name the file.
        let all = r["findings"].to_string();
        assert!(
            all.contains("symbolic links") || all.contains("does not resolve"),
            "{name}: {all}"
        );
    }
}

#[cfg(unix)]
fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A FIFO, a socket and (where this user may make one) a device in place
/// of a payload file or shard: a finding naming the kind, within seconds.
#[test]
fn special_files_in_place_of_payloads_are_findings_at_once() {
    for (name, file) in linked().iter().filter(|(n, _)| *n != "gguf") {
        for kind in ["a FIFO", "a socket", "a device"] {
            let (_tmp, dir, target) = copy_of(name);
            let p = dir.join(file);
            fs::remove_file(&p).unwrap();
            let _keep = match kind {
                "a FIFO" => {
                    mkfifo(&p);
                    None
                }
                "a socket" => Some(std::os::unix::net::UnixListener::bind(&p).unwrap()),
                _ => {
                    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
                    // SAFETY: a valid path; makedev(1, 3) is /dev/null's number.
                    let made = unsafe {
                        libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3))
                    };
                    if made != 0 {
                        // Without CAP_MKNOD no device can be made here.
                        eprintln!("skipped: mknod not permitted");
                        continue;
                    }
                    None
                }
            };
            let (code, r) = audit(&target, QUICK);
            assert_eq!(code, 1, "{name} {kind}: {:#}", r["findings"]);
            let all = r["findings"].to_string();
            assert!(
                all.contains(&format!("{kind}, not a regular file")),
                "{name} {kind}: {all}"
            );
        }
    }
    // A GGUF path that is a FIFO is not opened at all.
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("model.gguf");
    mkfifo(&p);
    let start = Instant::now();
    let run = common::cli(&["audit", p.to_str().unwrap(), "--json"]);
    assert!(start.elapsed() < QUICK);
    assert!([1, 2].contains(&run.code), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"));
}

/// The audit's events of `target`; `during` runs once, at the first hash
/// progress (the pass has started reading).
fn audit_while(target: &Path, during: impl Fn() + Sync) -> Value {
    let events = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    audit::run(
        target,
        &Options {
            chunk_bytes: Some(4096),
            ..Options::default()
        },
        &CancelToken::default(),
        &|e: Event| {
            if matches!(e, Event::HashProgress { .. }) && !done.swap(true, Ordering::SeqCst) {
                during();
            }
            events.lock().unwrap().push(e);
        },
    );
    let mut b = ReportBuilder::default();
    for e in events.into_inner().unwrap() {
        b.apply(&e);
    }
    serde_json::to_value(b.report(&target.display().to_string()).unwrap()).unwrap()
}

/// A payload or shard that grows or shrinks while it is read: reported as
/// changed (bundle.changed), never a crash on the shrunk tail.
#[test]
fn files_that_grow_or_shrink_during_the_audit_are_reported_as_changed() {
    for (name, file) in &linked() {
        for grow in [true, false] {
            let (_tmp, dir, target) = copy_of(name);
            let p = dir.join(file);
            let r = audit_while(&target, || {
                let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
                let len = f.metadata().unwrap().len();
                f.set_len(if grow { len + 4096 } else { len / 2 }).unwrap();
            });
            assert_eq!(r["verdict"], "invalid", "{name} grow={grow}");
            let changed = messages(&r, "bundle.changed", "error");
            assert!(
                changed.iter().any(|m| m.contains(file.as_str())),
                "{name} grow={grow}: {:#}",
                r["findings"]
            );
        }
    }
}

/// 100,000 unrelated files beside a bundle cost no more than listing them
/// once: the audit reads only its own files.
#[test]
fn a_folder_of_100k_unrelated_files_does_not_slow_the_audit() {
    for name in ["audio8-v2", "mlx-lm"] {
        let (_tmp, dir, target) = copy_of(name);
        let time = |t: &Path| {
            let start = Instant::now();
            let (code, r) = audit(t, Duration::from_secs(120));
            assert_eq!(code, 0, "{name}: {:#}", r["findings"]);
            start.elapsed()
        };
        let base = time(&target);
        let junk = dir.join("junk");
        fs::create_dir(&junk).unwrap();
        for i in 0..100_000 {
            // Half beside the bundle's files, half one level down.
            let p = if i % 2 == 0 {
                dir.join(format!("unrelated-{i}.txt"))
            } else {
                junk.join(format!("{i}.safetensors.bak"))
            };
            fs::File::create(p).unwrap();
        }
        let with = time(&target);
        assert!(
            with < base * 3 + Duration::from_secs(3),
            "{name}: {base:?} alone, {with:?} beside 100,000 files"
        );
    }
}

/// A folder whose path is not UTF-8: audited normally, the path shown
/// (lossily) in the text and the JSON report.
#[test]
fn a_path_that_is_not_utf8_is_audited() {
    let tmp = tempfile::tempdir().unwrap();
    let mut raw = tmp.path().as_os_str().as_bytes().to_vec();
    raw.extend_from_slice(b"/bad\xffname");
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&raw));
    bundles::copy(sample("audio8-v2"), &dir);
    for args in [vec!["--json"], vec![]] {
        let mut cmd = std::process::Command::new(common::bin());
        cmd.arg("audit").arg(&dir).args(&args);
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        assert!(stdout.contains("bad\u{fffd}name"), "{stdout}");
    }
}
