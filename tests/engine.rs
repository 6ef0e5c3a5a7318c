//! The audit engine through its library API: event order, cancellation,
//! a bundle changing under the audit, and results that do not depend on how
//! the payload is chunked.

mod common;

use std::sync::Mutex;

use bundlescope::audit::{self, CancelToken, Event, Failure, Options};
use bundlescope::report::ReportBuilder;
use common::*;
use serde_json::Value;

fn run_collect(
    dir: &std::path::Path,
    options: &Options,
    cancel: &CancelToken,
    on: impl Fn(&Event) + Sync,
) -> Vec<Event> {
    let events = Mutex::new(Vec::new());
    audit::run(dir, options, cancel, &|e: Event| {
        on(&e);
        events.lock().unwrap().push(e);
    });
    events.into_inner().unwrap()
}

fn report_of(events: &[Event], dir: &std::path::Path) -> Value {
    let mut b = ReportBuilder::default();
    for e in events {
        b.apply(e);
    }
    let mut v = serde_json::to_value(b.report(&dir.display().to_string()).unwrap()).unwrap();
    v["duration_s"] = Value::Null;
    v
}

#[test]
fn events_arrive_in_order_and_finish_once() {
    let b = TestBundle::v2();
    let opts = Options {
        chunk_bytes: Some(64 * 1024),
        ..Options::default()
    };
    let events = run_collect(&b.dir, &opts, &CancelToken::default(), |_| {});
    assert!(matches!(events.first(), Some(Event::Opened(_))));
    assert!(matches!(events.last(), Some(Event::Finished(Ok(o))) if o.valid));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Finished(_)))
            .count(),
        1
    );
    let started = events
        .iter()
        .position(|e| matches!(e, Event::Started { .. }))
        .unwrap();
    let first_progress = events
        .iter()
        .position(|e| matches!(e, Event::HashProgress { .. }))
        .unwrap();
    assert!(started < first_progress);
    let mut last = 0;
    let mut progress = 0;
    for e in &events {
        if let Event::HashProgress { done, total, .. } = e {
            assert!(*done > last && done <= total);
            last = *done;
            progress += 1;
        }
    }
    assert!(
        progress > 10,
        "a 1 MiB payload in 64 KiB chunks reports progress often"
    );
    let Some(Event::Opened(bundle)) = events.first() else {
        unreachable!()
    };
    let scanned = bundle
        .tensors
        .iter()
        .filter(|t| t.alias_of.is_none())
        .count();
    let done = events
        .iter()
        .filter(|e| matches!(e, Event::TensorDone { .. }))
        .count();
    assert_eq!(done, scanned);
}

#[test]
fn cancel_stops_the_audit() {
    let b = TestBundle::v2();
    let cancel = CancelToken::default();
    let opts = Options {
        chunk_bytes: Some(4096),
        ..Options::default()
    };
    let events = run_collect(&b.dir, &opts, &cancel, |e| {
        if matches!(e, Event::HashProgress { .. }) {
            cancel.cancel();
        }
    });
    assert!(matches!(
        events.last(),
        Some(Event::Finished(Err(Failure::Cancelled)))
    ));
    let progress = events
        .iter()
        .filter(|e| matches!(e, Event::HashProgress { .. }))
        .count();
    assert!(progress < 5, "kept reading after cancel: {progress} chunks");
}

/// The reader hashes ahead of the scanners and waits for their buffers: a
/// cancel while the range hasher also holds chunks must still end the pass
/// (a reader waiting for a buffer that never comes back would hang it).
#[test]
fn cancel_with_range_hashes_ends_the_pass() {
    let b = TestBundle::v2();
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = b.dir.clone();
    std::thread::spawn(move || {
        let cancel = CancelToken::default();
        let opts = Options {
            chunk_bytes: Some(64),
            range_hashes: true,
            ..Options::default()
        };
        let events = run_collect(&dir, &opts, &cancel, |e| {
            if matches!(e, Event::HashProgress { .. }) {
                cancel.cancel();
            }
        });
        let _ = tx.send(matches!(
            events.last(),
            Some(Event::Finished(Err(Failure::Cancelled)))
        ));
    });
    let cancelled = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the cancelled pass did not end");
    assert!(cancelled);
}

#[test]
fn spawned_audit_streams_over_the_channel_and_can_be_cancelled() {
    let b = TestBundle::v2();
    let handle = audit::spawn(b.dir.clone(), Options::default(), None).unwrap();
    let events: Vec<Event> = handle.events.iter().collect();
    assert!(matches!(events.last(), Some(Event::Finished(Ok(o))) if o.valid));
    let handle = audit::spawn(
        b.dir.clone(),
        Options {
            chunk_bytes: Some(64),
            ..Options::default()
        },
        None,
    )
    .unwrap();
    handle.cancel_and_join(); // must return promptly, not deadlock on a full channel
}

#[test]
fn a_bundle_changed_during_the_audit_is_reported() {
    let b = TestBundle::v2();
    let payload = b.payload();
    let touched = std::sync::atomic::AtomicBool::new(false);
    let opts = Options {
        chunk_bytes: Some(4096),
        ..Options::default()
    };
    let events = run_collect(&b.dir, &opts, &CancelToken::default(), |e| {
        if matches!(e, Event::HashProgress { .. })
            && !touched.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&payload)
                .unwrap();
            std::io::Write::write_all(&mut f, b"appended").unwrap();
        }
    });
    let r = report_of(&events, &b.dir);
    assert_eq!(r["verdict"], "invalid");
    let hits = findings_of(&r, "bundle.changed");
    assert_eq!(hits.len(), 1, "{:#}", r["findings"]);
    assert!(hits[0]["message"].as_str().unwrap().contains("weights.bin"));
}

#[test]
fn a_manifest_rewritten_during_the_audit_is_reported() {
    let b = TestBundle::v2();
    let manifest = b.dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let touched = std::sync::atomic::AtomicBool::new(false);
    let opts = Options {
        chunk_bytes: Some(4096),
        ..Options::default()
    };
    let events = run_collect(&b.dir, &opts, &CancelToken::default(), |e| {
        if matches!(e, Event::HashProgress { .. })
            && !touched.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            // Same length, other content: only the hash can tell.
            std::fs::write(&manifest, text.replacen("mixed", "MIXED", 1)).unwrap();
        }
    });
    let r = report_of(&events, &b.dir);
    assert_eq!(
        findings_of(&r, "bundle.changed").len(),
        1,
        "{:#}",
        r["findings"]
    );
}

#[test]
fn results_do_not_depend_on_chunk_size() {
    // A corrupted copy, so findings and their offsets are compared too.
    let b = TestBundle::v2();
    let gate = b.record("language_model.model.layers.1.mlp.gate_proj.weight");
    let v = b.record("language_model.model.layers.1.self_attn.v_proj.weight");
    let (g, s) = (
        gate["offset"].as_u64().unwrap() as usize,
        v["scales_offset"].as_u64().unwrap() as usize,
    );
    b.patch_payload(true, |p| {
        p[g + 4 * 24 + 1] |= 0x0e; // q3 code 7 somewhere in group 4
        p[s + 6..s + 8].copy_from_slice(&0x7e00u16.to_le_bytes());
    });
    let reports: Vec<Value> = [1 << 23, 4097, 333, 64]
        .iter()
        .map(|&c| {
            let events = run_collect(
                &b.dir,
                &Options {
                    chunk_bytes: Some(c),
                    ..Options::default()
                },
                &CancelToken::default(),
                |_| {},
            );
            report_of(&events, &b.dir)
        })
        .collect();
    assert_eq!(
        error_checks(&reports[0]),
        vec!["packed.reserved_code", "packed.scales"]
    );
    // Group 4 of a 256-column q3 matrix is row 1; byte 1 of it holds code 3's low bits.
    let reserved = findings_of(&reports[0], "packed.reserved_code");
    assert!(
        reserved[0]["message"]
            .as_str()
            .unwrap()
            .contains("row 1, column 3"),
        "{}",
        reserved[0]
    );
    assert_eq!(reserved[0]["offset"], (g + 4 * 24 + 1) as u64);
    for r in &reports[1..] {
        assert_eq!(r["findings"], reports[0]["findings"]);
        for (a, b) in r["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .zip(reports[0]["tensors"].as_array().unwrap())
        {
            assert_eq!(a["stats"]["codes"], b["stats"]["codes"], "{}", a["name"]);
            assert_eq!(
                a["stats"]["quality"], b["stats"]["quality"],
                "{}",
                a["name"]
            );
            assert_eq!(a["stats"], b["stats"], "{}", a["name"]);
        }
        assert_eq!(r, &reports[0]);
    }
}

/// `export`'s guard judges real paths: however the bundle is named on the
/// command line (its folder, its manifest.json, a symlink to it) and however
/// the output is named (through a symlink to the bundle), a file inside the
/// bundle folder is refused and nothing is written there.
#[cfg(unix)]
#[test]
fn export_through_a_symlink_to_the_bundle_is_refused() {
    let b = TestBundle::v2();
    let link = b.tmp.path().join("link");
    std::os::unix::fs::symlink(&b.dir, &link).unwrap();
    let before: Vec<_> = std::fs::read_dir(&b.dir).unwrap().collect();
    let out = link.join("x.npy");
    let manifest = b.dir.join("manifest.json");
    let link_manifest = link.join("manifest.json");
    let export = |opened: &std::path::Path, out: &std::path::Path| {
        common::export_tensor(
            opened.to_str().unwrap(),
            "language_model.model.norm.weight",
            out.to_str().unwrap(),
        )
    };
    for opened in [&b.dir, &manifest, &link, &link_manifest] {
        let run = export(opened, &out);
        assert_eq!(run.code, 2, "{}: {}", opened.display(), run.stdout);
        assert!(
            run.stderr.contains("inside the bundle folder"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(std::fs::read_dir(&b.dir).unwrap().count(), before.len());
    // Outside the bundle the same export works.
    let ok = b.tmp.path().join("x.npy");
    let run = export(&link_manifest, &ok);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(ok.is_file());
}

/// An error that cannot be opened says its cause once: `OpenError` leaves
/// the OS error to `source()`, and the CLI prints the chain.
#[test]
fn open_errors_say_their_cause_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    for sub in ["list", "audit", "hist"] {
        let mut args = vec![sub, missing.to_str().unwrap()];
        if sub == "hist" {
            args.push("--all");
        }
        let run = cli(&args);
        assert_eq!(run.code, 2, "{sub}: {}", run.stdout);
        let os = std::io::Error::from(std::io::ErrorKind::NotFound).to_string();
        let cause = run.stderr.matches("os error").count();
        assert_eq!(cause, 1, "{sub}: {} ({os})", run.stderr);
    }
}

/// A manifest.json that does not parse opens as a bundle (what the GUI
/// shows as invalid), not as an open failure: the events are Opened, the
/// one `manifest.parse` finding, and a finished, invalid outcome, with no
/// bundle.changed from a manifest hash left unset.
#[test]
fn a_broken_manifest_is_an_invalid_bundle_not_an_open_failure() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("manifest.json"),
        "{\"format\": \"audio8-mixed-bundle-v2\",\n",
    )
    .unwrap();
    let events = run_collect(
        tmp.path(),
        &Options::default(),
        &CancelToken::default(),
        |_| {},
    );
    let Some(Event::Opened(bundle)) = events.first() else {
        panic!("not opened: {events:?}");
    };
    assert!(bundle.tensors.is_empty() && bundle.files.is_empty());
    assert_eq!(bundle.format.name(), "unknown");
    assert!(
        matches!(events.last(), Some(Event::Finished(Ok(o))) if !o.valid && o.errors == 1),
        "{events:?}"
    );
    let r = report_of(&events, tmp.path());
    assert_eq!(r["verdict"], "invalid");
    assert_eq!(error_checks(&r), ["manifest.parse"]);
    let message = r["findings"][0]["message"].as_str().unwrap();
    assert!(message.contains("line 2, column 0"), "{message}");
}
