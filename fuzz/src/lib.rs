//! What the fuzz targets share: splitting one fuzzer input into the files of
//! a bundle, and writing them into a fresh temporary folder.

use std::path::Path;

/// Splits `data` into `n` parts: each but the last is prefixed by its length
/// as a little-endian u32 (cut short where the input ends); the last part is
/// the rest. Any input splits, so every mutation reaches a parser.
pub fn split(mut data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut parts = Vec::with_capacity(n);
    for _ in 1..n {
        let len = match data.get(..4) {
            Some(w) => u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize,
            None => 0,
        };
        data = data.get(4..).unwrap_or(&[]);
        let len = len.min(data.len());
        parts.push(&data[..len]);
        data = &data[len..];
    }
    parts.push(data);
    parts
}

/// The inverse of [`split`] (the seed writer uses it).
pub fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 < parts.len() {
            out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(p);
    }
    out
}

/// Writes `files` (name, bytes) into `dir`.
pub fn write_all(dir: &Path, files: &[(&str, &[u8])]) {
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write into the fuzz temp folder");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_inverts_join() {
        let parts: [&[u8]; 3] = [b"abc", b"", b"tail"];
        assert_eq!(super::split(&super::join(&parts), 3), parts);
        assert_eq!(super::split(&[1, 0], 3), [&[][..], &[], &[]]);
    }
}
