//! Hash lists a model folder may carry (MLX-LM and safetensors checkpoints,
//! GGUF files): `SHA256SUMS` (`sha256sum`'s
//! output: `HEX  NAME` or `HEX *NAME` a line) and `*.sha256` files: either
//! `NAME.sha256` holding NAME's hash alone, or a list in `sha256sum`'s form
//! under any name (`sha256sum * > all.sha256`), every line of it read.
//! They give the payload files their expected SHA-256, which the audit pass
//! verifies (`payload.sha256`); two lines that give one file different
//! hashes are a finding, not a silent choice.

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
    // Where each file's expected hash came from: list and line.
    let mut given: std::collections::HashMap<String, (String, usize)> = Default::default();
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
            let hex = hex.to_ascii_lowercase();
            match files.iter_mut().find(|f| f.name == name) {
                Some(f) => match (&f.expected_sha256, given.get(name)) {
                    (Some(before), Some((from, line))) if *before != hex => {
                        findings.push(bad(format!(
                            "gives {name} the SHA-256 {hex}, but {from} line {line} gives it {before}"
                        )));
                    }
                    _ => {
                        f.expected_sha256 = Some(hex);
                        given.insert(name.to_string(), (list.clone(), n + 1));
                    }
                },
                None if dir.join(name).exists() => {} // not a payload file: config, tokenizer…
                // A hub's list names every file of the repository, also
                // those not downloaded (the other GGUF variants): said, not
                // an error. A payload file missing is the format's finding.
                None => findings.push(
                    Finding::info(
                        c::CHECKSUMS_FILE,
                        format!(
                            "{list} line {}: names {name}, which is not in the folder (not checked)",
                            n + 1
                        ),
                    )
                    .field(list.clone())
                    .offset(at),
                ),
            }
        }
    }
}
