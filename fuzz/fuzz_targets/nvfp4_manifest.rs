//! The mlx-nvfp4 manifest: fuzzer bytes as manifest.json, beside one shard
//! (the second part of the input) under the name the sample's manifest gives
//! its first shard, so the shard list, weight map and header checks all run.
#![no_main]

use bundlescope::format;
use bundlescope_fuzz::{split, write_all};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parts = split(data, 2);
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(parts[0]) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    write_all(tmp.path(), &[("model-00001-of-00001.safetensors", parts[1])]);
    let path = tmp.path().join("manifest.json");
    let _ = format::nvfp4::parse(tmp.path().to_path_buf(), path, parts[0].to_vec(), &m);
});
