//! A whole audit of a small mutated bundle: the first byte picks the format,
//! the rest splits into that format's files, written to a temporary folder
//! and audited to the end (open, single pass, every check). The audit must
//! finish with a verdict or an open failure, never panic or hang.
#![no_main]

use bundlescope::audit::{self, Event};
use bundlescope::util::cancel::CancelToken;
use bundlescope_fuzz::{split, write_all};
use libfuzzer_sys::fuzz_target;
use std::sync::Mutex;

/// File names of each format, in the order the input's parts fill them.
pub const LAYOUTS: &[&[&str]] = &[
    &["manifest.json", "weights.bin"],
    &["manifest.json", "model-00001-of-00001.safetensors"],
    &[
        "config.json",
        "model.safetensors.index.json",
        "model-00001-of-00001.safetensors",
    ],
    &["model.safetensors"],
    &["model.gguf"],
];

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let names = LAYOUTS[kind as usize % LAYOUTS.len()];
    let parts = split(rest, names.len());
    let tmp = tempfile::tempdir().unwrap();
    let files: Vec<(&str, &[u8])> = names.iter().copied().zip(parts).collect();
    write_all(tmp.path(), &files);
    let target = if names == ["model.gguf"] {
        tmp.path().join("model.gguf")
    } else {
        tmp.path().to_path_buf()
    };
    let finished = Mutex::new(0usize);
    let sink = |e: Event| {
        if let Event::Finished(_) = e {
            *finished.lock().unwrap() += 1;
        }
    };
    audit::run(&target, &audit::Options::default(), &CancelToken::default(), &sink);
    assert_eq!(*finished.lock().unwrap(), 1, "the audit finishes exactly once");
});
