//! The GGUF header and tensor infos: any bytes as a .gguf file's content.
#![no_main]

use bundlescope::format::gguf::header;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut findings = Vec::new();
    let h = header::parse(data, "fuzz.gguf", &mut findings);
    // Everything it kept was read from the buffer: never more tensor infos
    // than the bytes could hold.
    assert!(h.tensors.len() as u64 <= data.len() as u64 / 32 + 1);
    if !h.complete {
        assert!(!findings.is_empty());
    }
});
