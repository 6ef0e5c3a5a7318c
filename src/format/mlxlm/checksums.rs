//! Hash lists a checkpoint folder may carry: `SHA256SUMS` (`sha256sum`'s
//! output: `HEX  NAME` or `HEX *NAME` a line) and `NAME.sha256` files (the
//! hex first). They give the payload files their expected SHA-256, which
//! the audit pass verifies (`payload.sha256`).

use std::path::Path;

use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::{PayloadFile, read_capped};

/// Largest hash list read.
const MAX_BYTES: u64 = 1 << 20;
/// The list `sha256sum` users write.
pub const SUMS: &str = "SHA256SUMS";

/// Is `s` 64 hex digits?
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Reads the folder's hash lists and sets each named payload file's
/// expected hash; malformed lines and names of missing files are findings.
pub fn apply(dir: &Path, files: &mut [PayloadFile], findings: &mut Vec<Finding>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut lists: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n == SUMS || n.ends_with(".sha256"))
        .collect();
    lists.sort();
    for list in lists {
        let path = dir.join(&list);
        let bytes = match read_capped(&path, MAX_BYTES) {
            Ok(b) => b,
            Err(e) => {
                findings.push(
                    Finding::error(
                        c::CHECKSUMS_FILE,
                        format!("{list} cannot be read: {}", crate::format::error_chain(&e)),
                    )
                    .field(list.clone()),
                );
                continue;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let single = list.strip_suffix(".sha256").filter(|_| list != SUMS);
        let mut offset = 0u64;
        for (n, line) in text.lines().enumerate() {
            let at = offset;
            offset += line.len() as u64 + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.splitn(2, char::is_whitespace);
            let hex = parts.next().unwrap_or_default();
            let name = parts
                .next()
                .map(|r| {
                    r.trim_start()
                        .trim_start_matches('*')
                        .trim_start_matches("./")
                })
                .filter(|r| !r.is_empty())
                .or(single);
            let bad = |msg: String| {
                Finding::error(c::CHECKSUMS_FILE, format!("{list} line {}: {msg}", n + 1))
                    .field(list.clone())
                    .offset(at)
            };
            if !is_sha256(hex) {
                findings.push(bad(format!(
                    "expected 64 hex digits and a file name, found {:?}",
                    line.chars().take(80).collect::<String>()
                )));
                continue;
            }
            let Some(name) = name else {
                findings.push(bad("a hash without a file name".into()));
                continue;
            };
            match files.iter_mut().find(|f| f.name == name) {
                Some(f) => f.expected_sha256 = Some(hex.to_ascii_lowercase()),
                None if dir.join(name).exists() => {} // not a payload file: config, tokenizer…
                None => findings.push(bad(format!("names {name}, which is not in the folder"))),
            }
            if single.is_some() {
                break; // a NAME.sha256 file holds one hash
            }
        }
    }
}
