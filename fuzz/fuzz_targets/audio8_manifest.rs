//! The audio8 v1/v2 manifest parser (and the calibrated GPTQ-Q4 overlay's
//! provenance block on top of it): any bytes as manifest.json. Parsing is
//! pure: it reads no payload.
#![no_main]

use std::path::PathBuf;

use bundlescope::format::{self, FormatKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(data) else {
        return;
    };
    let dir = PathBuf::from("/nonexistent-fuzz-bundle");
    let path = dir.join("manifest.json");
    // Whatever the manifest names, run both parsers on it: the detection
    // only picks one, and a v1 or v2 key set inside a foreign format is
    // exactly what the record parser must survive.
    let kind = match format::detect(&m) {
        Ok(FormatKind::Audio8V1) => FormatKind::Audio8V1,
        _ => FormatKind::Audio8V2,
    };
    let b = format::audio8::parse(dir.clone(), path.clone(), data.to_vec(), &m, kind);
    assert!(b.tensors.len() <= format::audio8::MAX_TENSORS + 1);
    let _ = format::gptq::parse(dir, path, data.to_vec(), &m);
});
