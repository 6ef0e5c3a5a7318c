//! Turning a folder into a [`Bundle`]: format detection, the typed manifest
//! and the tensor index. Parsing never trusts a number before bounding it.

pub mod audio8;
pub mod checksums;
pub mod gguf;
pub mod gptq;
pub mod json;
pub mod mlxlm;
mod model;
pub mod nvfp4;
pub mod payload;
pub mod safetensors;
pub mod window;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use model::{
    Bundle, DenseDtype, FormatKind, IntDtype, Layout, PackedKind, PayloadFile, Precision,
    Provenance, QuantMode, QuantNote, ScaleKind, TensorInfo,
};
pub use payload::{ExpertSiblings, Payload, PayloadError, is_bare_name};

/// Largest manifest bundlescope reads. 2000 records with every field fit in
/// well under 2 MiB; 64 MiB leaves room and still bounds the allocation.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

/// Why a folder could not be opened as a bundle at all (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The path does not exist or cannot be read. The message leaves the OS
    /// error to `source()`, so a printer of the chain (`{:#}` of anyhow,
    /// [`error_chain`]) shows it once.
    #[error("cannot read {}", path.display())]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The folder has no usable manifest, or the manifest names no known format.
    #[error("{} is not a bundle: {reason}", path.display())]
    NotABundle {
        /// The folder or manifest.
        path: PathBuf,
        /// What was expected and what was found.
        reason: String,
    },
    /// A format bundlescope recognises but cannot audit yet.
    #[error("{}: recognised {} bundle, not yet supported: {detail}", path.display(), format.name())]
    Unsupported {
        /// The folder.
        path: PathBuf,
        /// Which format.
        format: FormatKind,
        /// What is missing.
        detail: String,
    },
}

/// An error and its causes on one line, joined by `: ` (for a finding's
/// message or a notice, where no chain printer is at hand).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Reads a small file (a manifest, a config, an index, a hash list) with a
/// size cap, without following a claimed length.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, OpenError> {
    let io = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    // Same rule as payload files: the type is checked before the open and
    // the open cannot block, so a FIFO named manifest.json is refused.
    let file = match payload::open_regular(&name, path) {
        Ok((file, _)) => file,
        Err(PayloadError::NotRegular { .. }) => {
            return Err(OpenError::NotABundle {
                path: path.to_path_buf(),
                reason: format!("{name} is not a regular file"),
            });
        }
        Err(PayloadError::Io { source, .. }) => return Err(io(source)),
        Err(_) => return Err(io(std::io::ErrorKind::NotFound.into())),
    };
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > cap {
        return Err(OpenError::NotABundle {
            path: path.to_path_buf(),
            reason: format!("{name} is larger than {} MiB", cap >> 20),
        });
    }
    Ok(bytes)
}

/// The finding text for tensor `name` stored in more than one of `files`.
pub(crate) fn stored_in_shards<'a>(name: &str, files: impl IntoIterator<Item = &'a str>) -> String {
    let files: Vec<&str> = files.into_iter().collect();
    format!(
        "{name} is stored in {} shards: {}",
        files.len(),
        files.join(", ")
    )
}

/// Opens `path` (a bundle folder, or the `manifest.json` inside one).
pub fn open(path: &Path) -> Result<Bundle, OpenError> {
    let mut bundle = open_any(path)?;
    bundle.provenance.manifest_file = manifest_file_of(&bundle);
    Ok(bundle)
}

/// The file a bundle hashes as its manifest, relative to its folder
/// (`None` for a GGUF, whose header is hashed, and for a checkpoint of
/// shards alone).
fn manifest_file_of(b: &Bundle) -> Option<String> {
    if b.format == FormatKind::Gguf || b.manifest_bytes.is_empty() {
        return None;
    }
    let rel = b.manifest_path.strip_prefix(&b.dir).ok()?.to_str()?;
    (!rel.is_empty()).then(|| rel.replace('\\', "/"))
}

fn open_any(path: &Path) -> Result<Bundle, OpenError> {
    let meta = fs::metadata(path).map_err(|source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if gguf::claims(path, &meta) {
        return gguf::open(path, &meta);
    }
    let (dir, manifest_path) = if meta.is_dir() {
        (path.to_path_buf(), path.join("manifest.json"))
    } else if path.file_name().is_some_and(|n| n == "manifest.json") {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        (dir, path.to_path_buf())
    } else if mlxlm::recognises(path) {
        return mlxlm::open(path);
    } else {
        return Err(OpenError::NotABundle {
            path: path.to_path_buf(),
            reason: "expected a bundle folder, its manifest.json, a checkpoint folder or a .safetensors file".into(),
        });
    };
    if !manifest_path.exists() && mlxlm::recognises(&dir) {
        // MLX-LM and plain safetensors checkpoints carry no manifest.json.
        return mlxlm::open(&dir);
    }
    if !manifest_path.exists() {
        return Err(OpenError::NotABundle {
            path: dir,
            reason: "the folder has no manifest.json".into(),
        });
    }
    let bytes = read_capped(&manifest_path, MAX_MANIFEST_BYTES)?;
    // From here the folder is a bundle: a manifest.json that does not parse
    // is a broken bundle (verdict invalid, one finding), not "not a bundle".
    let values = json::count_values(&bytes);
    if values > json::MAX_VALUES {
        let message = format!(
            "manifest.json holds about {values} JSON values, over the limit of {}",
            json::MAX_VALUES
        );
        return Ok(broken_manifest(dir, manifest_path, bytes, message));
    }
    let value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            let message = format!(
                "manifest.json is not valid JSON ({} at line {}, column {})",
                describe_json_error(&e),
                e.line(),
                e.column()
            );
            return Ok(broken_manifest(dir, manifest_path, bytes, message));
        }
    };
    let Some(object) = value.as_object() else {
        let message = format!(
            "manifest.json holds {}, expected a JSON object",
            json::kind(&value)
        );
        return Ok(broken_manifest(dir, manifest_path, bytes, message));
    };
    let format = detect(object).map_err(|reason| OpenError::NotABundle {
        path: dir.clone(),
        reason,
    })?;
    match format {
        FormatKind::Audio8V1 | FormatKind::Audio8V2 => {
            Ok(audio8::parse(dir, manifest_path, bytes, object, format))
        }
        FormatKind::GptqQ4Calibrated => Ok(gptq::parse(dir, manifest_path, bytes, object)),
        FormatKind::GptqQ4 => Err(OpenError::Unsupported {
            path: dir,
            format,
            detail:
                "bundlescope reads only audio8-gptq-q4-calibrated-v1 (docs/provenance.md); other GPTQ-Q4 variants are not verified"
                    .into(),
        }),
        FormatKind::Native => Err(OpenError::Unsupported {
            path: dir,
            format,
            detail:
                "the native A8MOD001 loader is not available; this is not a broken v1/v2 bundle"
                    .into(),
        }),
        FormatKind::Nvfp4 => Ok(nvfp4::parse(dir, manifest_path, bytes, object)),
        // detect never answers these: they have no manifest.json.
        FormatKind::MlxLm | FormatKind::Safetensors => mlxlm::open(&dir),
        // detect never answers Unknown; it names a manifest that did not parse.
        FormatKind::Unknown => Ok(broken_manifest(
            dir,
            manifest_path,
            bytes,
            "manifest.json names no format".into(),
        )),
        // detect reads manifests; a GGUF file was claimed above.
        FormatKind::Gguf => Err(OpenError::NotABundle {
            path: dir,
            reason: "a manifest.json cannot describe a GGUF file".into(),
        }),
    }
}

/// The bundle of a folder whose manifest.json exists but does not parse:
/// no tensors, no payload files, and the `manifest.parse` finding, so the
/// audit says invalid and the GUI shows why instead of an open error.
fn broken_manifest(
    dir: PathBuf,
    manifest_path: PathBuf,
    manifest_bytes: Vec<u8>,
    message: String,
) -> Bundle {
    // The hash is what the audit's bundle.changed check compares against.
    let provenance = Provenance {
        manifest_sha256: sha256_hex(&manifest_bytes),
        ..Provenance::default()
    };
    Bundle {
        dir,
        manifest_path,
        manifest_bytes,
        format: FormatKind::Unknown,
        tensors: Vec::new(),
        files: Vec::new(),
        provenance,
        findings: vec![
            crate::finding::Finding::error(crate::finding::checks::MANIFEST_PARSE, message)
                .field("manifest.json"),
        ],
    }
}

fn describe_json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    // serde_json appends " at line L column C"; we print those ourselves.
    match text.find(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Which format a manifest object describes, or why it is none.
pub fn detect(manifest: &serde_json::Map<String, serde_json::Value>) -> Result<FormatKind, String> {
    if let Some(format) = manifest.get("format") {
        let Some(format) = format.as_str() else {
            return Err(format!(
                "'format' is {}, expected a string",
                json::kind(format)
            ));
        };
        return match format {
            "audio8-mixed-bundle-v1" => Ok(FormatKind::Audio8V1),
            "audio8-mixed-bundle-v2" => Ok(FormatKind::Audio8V2),
            "A8MOD001" => Ok(FormatKind::Native),
            gptq::FORMAT => Ok(FormatKind::GptqQ4Calibrated),
            f if f.to_ascii_lowercase().contains("gptq") => Ok(FormatKind::GptqQ4),
            f => Err(format!(
                "unknown format {f:?} (expected audio8-mixed-bundle-v1, audio8-mixed-bundle-v2, A8MOD001, a GPTQ-Q4 bundle or an mlx-nvfp4 artifact)"
            )),
        };
    }
    if manifest.contains_key("quantization") {
        return Ok(FormatKind::Nvfp4);
    }
    Err("manifest.json has neither a 'format' key (audio8 bundles) nor a 'quantization' block (mlx-nvfp4 artifacts)".into())
}

/// A digit run without its leading zeros (`0` stays `0`).
fn strip_zeros(s: &[u8]) -> &[u8] {
    let z = s.iter().take_while(|&&c| c == b'0').count();
    &s[z.min(s.len() - 1)..]
}

/// The length of the bytes `a` and `b` start with alike, eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (ca, cb) = (a[..n].as_chunks::<8>().0, b[..n].as_chunks::<8>().0);
    for (k, (x, y)) in ca.iter().zip(cb).enumerate() {
        let diff = u64::from_le_bytes(*x) ^ u64::from_le_bytes(*y);
        if diff != 0 {
            return 8 * k + (diff.trailing_zeros() / 8) as usize;
        }
    }
    let done = 8 * ca.len();
    done + a[done..n]
        .iter()
        .zip(&b[done..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Orders names as a person reads them: runs of digits compare as numbers,
/// so `layers.9` comes before `layers.10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Names share long prefixes (`model.layers.12.mlp.`): skip the equal
    // bytes at once, back to the start of a digit run they end in, which
    // compares the same from there as from the start.
    let mut same = common_prefix(a, b);
    while same > 0 && a[same - 1].is_ascii_digit() {
        same -= 1;
    }
    let (mut i, mut j) = (same, same);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let run =
                |s: &[u8], k: usize| k + s[k..].iter().take_while(|c| c.is_ascii_digit()).count();
            let (ei, ej) = (run(a, i), run(b, j));
            // Leading zeros do not change the number; more digits is larger.
            let (na, nb) = (strip_zeros(&a[i..ei]), strip_zeros(&b[j..ej]));
            let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if ord != Ordering::Equal {
                return ord;
            }
            (i, j) = (ei, ej);
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    // Equal up to the shorter: the shorter first, then byte order for ties
    // such as `1` vs `01`.
    (a.len() - i).cmp(&(b.len() - j)).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;

    #[cfg(unix)]
    #[test]
    fn a_manifest_that_is_a_fifo_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path().join("manifest.json");
        let c = std::ffi::CString::new(m.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        match super::open(tmp.path()) {
            Err(super::OpenError::NotABundle { reason, .. }) => {
                assert!(reason.contains("not a regular file"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn natural_order_compares_digit_runs_as_numbers() {
        let mut names: Vec<String> = [10, 2, 1, 33, 9, 100, 0]
            .iter()
            .flat_map(|l| {
                ["mlp.down_proj", "attn.q_proj"].map(|s| format!("model.layers.{l}.{s}.weight"))
            })
            .collect();
        names.sort_by(|a, b| natural_cmp(a, b));
        // Independent key: (layer number parsed from the name, the rest).
        let key = |n: &str| {
            let rest = n.strip_prefix("model.layers.").unwrap();
            let (l, tail) = rest.split_once('.').unwrap();
            (l.parse::<u32>().unwrap(), tail.to_string())
        };
        let mut expected = names.clone();
        expected.sort_by_key(|n| key(n));
        assert_eq!(names, expected);
        assert_eq!(natural_cmp("a.9", "a.10"), std::cmp::Ordering::Less);
        assert_eq!(natural_cmp("a", "a.0"), std::cmp::Ordering::Less);
        assert_ne!(natural_cmp("x1", "x01"), std::cmp::Ordering::Equal);
        // Shared prefixes that end inside a digit run compare whole runs.
        assert_eq!(
            natural_cmp("layers.12.a", "layers.102.a"),
            std::cmp::Ordering::Less
        );
        assert_eq!(natural_cmp("w10x", "w1y"), std::cmp::Ordering::Greater);
        assert_eq!(natural_cmp("a007b", "a7c"), std::cmp::Ordering::Less);
        assert_eq!(
            natural_cmp("blk.19.q", "blk.1.q"),
            std::cmp::Ordering::Greater
        );
        // Without digits it is byte order.
        assert_eq!(natural_cmp("norm", "embed"), "norm".cmp("embed"));
    }

    #[test]
    fn the_shared_prefix_is_found_at_every_position_and_length() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for len_a in 0..=base.len() {
            for at in 0..=len_a {
                let a = &base[..len_a];
                let mut b = a.to_vec();
                if at < len_a {
                    b[at] = b'#';
                }
                let naive = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                assert_eq!(super::common_prefix(a, &b), naive, "{len_a} {at}");
                assert_eq!(super::common_prefix(a, &base), len_a);
            }
        }
    }
}
