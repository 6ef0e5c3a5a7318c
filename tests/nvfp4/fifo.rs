//! Payload files that are FIFOs: the audit must report them at once, never
//! block opening them (Unix only: that is where FIFOs are).

use std::fs;
use std::path::Path;

use serde_json::Value;

use super::LAYER1_DOWN;
use super::common::nvfp4::Artifact;
use super::common::*;

/// Runs `bundlescope audit DIR --json` with a short timeout of its own: a
/// reader blocked on a FIFO would otherwise hang until the harness's guard.
fn audit_within(dir: &Path, limit: std::time::Duration) -> Value {
    use std::process::{Command, Stdio};
    let mut child = Command::new(bin())
        .args(["audit", dir.to_str().unwrap(), "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read while waiting: a report larger than the pipe would stall the child.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(1), "an invalid artifact exits 1");
            return serde_json::from_str(&reader.join().unwrap()).unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("audit of {} still running after {limit:?}", dir.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Replaces `path` with a FIFO nobody writes to.
fn make_fifo(path: &Path) {
    let _ = fs::remove_file(path);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_shard_that_is_a_fifo_is_a_finding_at_once() {
    let a = Artifact::from_cli(&[]);
    let shard = a.shard_of(&format!("{LAYER1_DOWN}.weight"));
    let name = shard.file_name().unwrap().to_str().unwrap().to_string();
    make_fifo(&shard);
    let r = audit_within(&a.dir, std::time::Duration::from_secs(20));
    assert_eq!(error_checks(&r), ["payload.file"], "{r:#}");
    let f = findings_of(&r, "payload.file");
    let message = f[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&name) && message.contains("FIFO"),
        "{message}"
    );
    assert_eq!(f[0]["field"], name.as_str());
}

#[test]
fn an_audio8_weights_file_that_is_a_fifo_is_a_finding_at_once() {
    let b = TestBundle::v2();
    make_fifo(&b.payload());
    let r = audit_within(&b.dir, std::time::Duration::from_secs(20));
    assert!(
        error_checks(&r).contains(&"payload.file".to_string()),
        "{r:#}"
    );
    let f = findings_of(&r, "payload.file");
    assert!(
        f[0]["message"].as_str().unwrap().contains("FIFO"),
        "{}",
        f[0]
    );
    // `hist` and `export` refuse it too, without blocking.
    let out = b.tmp.path().join("x.npy");
    for args in [
        vec!["hist", b.dir.to_str().unwrap(), "--all"],
        vec![
            "export",
            b.dir.to_str().unwrap(),
            "--tensor",
            "language_model.model.norm.weight",
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let run = cli(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stdout);
        assert!(run.stderr.contains("FIFO"), "{args:?}: {}", run.stderr);
    }
}
