//! The strict safetensors header parser: any bytes as a whole .safetensors
//! file. A header it accepts must describe ranges inside the file.
#![no_main]

use bundlescope::format::safetensors::parse_header;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = parse_header("fuzz.safetensors", data) {
        let len = data.len() as u64;
        assert!(h.data_start <= len);
        let mut last = h.data_start;
        for t in &h.tensors {
            assert!(t.begin >= last && t.begin <= t.end && t.end <= len, "{t:?}");
            last = t.end;
        }
    }
});
