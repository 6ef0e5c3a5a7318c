//! MLX-LM checkpoints: config.json, model.safetensors.index.json and one
//! shard, all from the fuzzer, opened as a folder (the config's quantization
//! block, the index's weight map against the shard's header).
#![no_main]

use bundlescope::format;
use bundlescope_fuzz::{split, write_all};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parts = split(data, 3);
    let tmp = tempfile::tempdir().unwrap();
    write_all(
        tmp.path(),
        &[
            ("config.json", parts[0]),
            ("model.safetensors.index.json", parts[1]),
            ("model-00001-of-00001.safetensors", parts[2]),
        ],
    );
    let _ = format::open(tmp.path());
});
