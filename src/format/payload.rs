//! The payload access layer: every read of a bundle's payload files goes
//! through here, so the rules live in one place.
//!
//! - A file's type is checked before it is opened ([`open_regular`]): a
//!   FIFO, socket or device is refused from its metadata, and the open
//!   itself cannot block (it is non-blocking on Unix, and the opened handle
//!   is checked again), so a hostile bundle can never stall a reader.
//! - Files are mapped read-only on demand ([`Payload`]), and a tensor's
//!   bytes are handed out only after its range is checked against the file
//!   ([`Payload::tensor_bytes`]); every failure is a [`PayloadError`] that
//!   names the file, the tensor and the offset.
//! - Aliases are resolved in one place ([`Bundle::resolve_alias`]), and an
//!   NVFP4 expert set's members are found in one place
//!   ([`Bundle::expert_siblings`]).
//! - Payload file names from a manifest are held to one rule
//!   ([`is_bare_name`]).

use std::fs::{self, File, Metadata};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;

use super::nvfp4::is_expert;
use super::{Bundle, TensorInfo};

/// Why payload bytes could not be had. Each variant names the file (as the
/// manifest gives it) and, where one is involved, the tensor and the byte
/// offsets; none repeats its `source` in its message.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The index has no tensor at this position.
    #[error("tensor index {index} is outside the bundle's {count} tensors")]
    NoTensor {
        /// The index asked for.
        index: usize,
        /// Tensors in the bundle.
        count: usize,
    },
    /// An alias names a tensor that does not exist.
    #[error("alias {alias} points at {target:?}, which does not exist")]
    DanglingAlias {
        /// The alias.
        alias: String,
        /// The name it points at.
        target: String,
    },
    /// Following aliases never reaches a tensor.
    #[error("alias {alias} does not lead to a tensor (the aliases form a cycle)")]
    AliasCycle {
        /// The alias it started from.
        alias: String,
    },
    /// The tensor's record points at a file the bundle does not list.
    #[error("tensor {tensor} names payload file #{file}, which the bundle does not list")]
    NoFile {
        /// Tensor name.
        tensor: String,
        /// The file index its record holds.
        file: usize,
    },
    /// The tensor's record has no usable offset and length.
    #[error("tensor {tensor} has no byte range (its offset or length is missing or overflows)")]
    NoRange {
        /// Tensor name.
        tensor: String,
    },
    /// The file does not exist.
    #[error("payload file {file} is missing")]
    Missing {
        /// File name as the manifest gives it.
        file: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The path is a folder, FIFO, socket or device: it is never opened.
    #[error("payload file {file} is {kind}, not a regular file")]
    NotRegular {
        /// File name as the manifest gives it.
        file: String,
        /// Where it is.
        path: PathBuf,
        /// What it is instead (`a directory`, `a FIFO`, …).
        kind: &'static str,
    },
    /// The OS refused an operation on the file.
    #[error("cannot {op} payload file {file}")]
    Io {
        /// File name as the manifest gives it.
        file: String,
        /// Where it is.
        path: PathBuf,
        /// What was attempted (`inspect`, `open`, `map`).
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The tensor's range runs past the end of its file.
    #[error("{file} is {len} bytes long; tensor {tensor} needs bytes {start}..{end}")]
    OutOfBounds {
        /// File name as the manifest gives it.
        file: String,
        /// Tensor name.
        tensor: String,
        /// First byte of the tensor.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The file's length.
        len: u64,
    },
    /// The tensor is not part of an NVFP4 expert set.
    #[error("{tensor} is not a stacked NVFP4 expert tensor")]
    NotExpert {
        /// Tensor name.
        tensor: String,
    },
    /// A member of the tensor's expert set is absent from the index.
    #[error("{tensor} has no {missing} beside it")]
    MissingSibling {
        /// Tensor name.
        tensor: String,
        /// The absent member's name.
        missing: String,
    },
}

/// What a path that is not a regular file is, in words for a message.
pub fn describe_kind(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
        if ft.is_block_device() || ft.is_char_device() {
            return "a device";
        }
    }
    "a special file"
}

/// Opens `path` (the payload file `name`) for reading, only if it is a
/// regular file: the type is checked from the metadata first, so a FIFO,
/// socket or device is never opened. On Unix the open is non-blocking (it
/// has no effect on reads of a regular file) and the handle's own metadata
/// is checked again, so a path swapped for a FIFO between the two steps
/// cannot block either. Returns the file and its metadata.
pub fn open_regular(name: &str, path: &Path) -> Result<(File, Metadata), PayloadError> {
    let io = |op, source| PayloadError::Io {
        file: name.to_string(),
        path: path.to_path_buf(),
        op,
        source,
    };
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PayloadError::Missing {
                file: name.to_string(),
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(io("inspect", e)),
    };
    let not_regular = |meta: &Metadata| PayloadError::NotRegular {
        file: name.to_string(),
        path: path.to_path_buf(),
        kind: describe_kind(meta),
    };
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| io("open", e))?;
    let meta = file.metadata().map_err(|e| io("inspect", e))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    Ok((file, meta))
}

/// A read-only map of a file; empty files are not mapped (some systems
/// refuse a zero-length map), they read as no bytes.
#[derive(Debug)]
pub struct Mapped(Option<Mmap>);

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

/// Maps the regular file `path` (the payload file `name`) read-only, after
/// [`open_regular`]'s checks.
pub fn map_file(name: &str, path: &Path) -> Result<Mapped, PayloadError> {
    let (file, meta) = open_regular(name, path)?;
    if meta.len() == 0 {
        return Ok(Mapped(None));
    }
    // SAFETY: the map is read-only and bundlescope never writes to a
    // bundle. Another process truncating the file while it is mapped would
    // make a read of the lost pages fault (SIGBUS); that is the price of not
    // copying multi-GiB payloads, and `audit` (which reads through guarded
    // windows, `window.rs`, or plain reads, and reports a file that changed
    // under it) is the tool for a payload that may change.
    let map = unsafe { Mmap::map(&file) }.map_err(|source| PayloadError::Io {
        file: name.to_string(),
        path: path.to_path_buf(),
        op: "map",
        source,
    })?;
    Ok(Mapped(Some(map)))
}

/// Is `name` a bare file name that stays inside the bundle folder?
///
/// The one rule for every payload file name a manifest gives (audio8's
/// `weights_file`, an NVFP4 shard's `file`), the strictest of the loaders'
/// rules so a name accepted here is accepted everywhere: not empty, not `.`
/// or `..`, no path separator of any platform (`/`, `\`), no drive or
/// stream colon (`C:x`, `a:b`), no leading `~` (a home folder to a shell),
/// no NUL or other control character, and its own `file_name`.
pub fn is_bare_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('~')
        && !name
            .chars()
            .any(|c| matches!(c, '/' | '\\' | ':') || c.is_control())
        && Path::new(name).file_name().is_some_and(|n| n == name)
}

/// The three members of one NVFP4 expert set (a layer's projection):
/// indices into [`Bundle::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertSiblings {
    /// The stacked E2M1 weight, U32 `[E, out, in/8]`.
    pub weight: usize,
    /// Its E4M3 scales, U8 `[E, out, in/16]`.
    pub scales: usize,
    /// Its per-expert global scales, F32 `[E]`.
    pub global_scale: usize,
}

impl Bundle {
    /// The tensor at `index`, or an error saying the index is outside.
    pub fn tensor(&self, index: usize) -> Result<&TensorInfo, PayloadError> {
        self.tensors.get(index).ok_or(PayloadError::NoTensor {
            index,
            count: self.tensors.len(),
        })
    }

    /// The tensor `index` stands for: itself, or an alias's target
    /// (following chains, bounded so a cycle ends in an error).
    pub fn resolve_alias(&self, index: usize) -> Result<usize, PayloadError> {
        let start = self.tensor(index)?;
        let mut index = index;
        for _ in 0..=self.tensors.len() {
            let t = self.tensor(index)?;
            let Some(target) = &t.alias_of else {
                return Ok(index);
            };
            index = self
                .find(target)
                .ok_or_else(|| PayloadError::DanglingAlias {
                    alias: t.name.clone(),
                    target: target.clone(),
                })?;
        }
        Err(PayloadError::AliasCycle {
            alias: start.name.clone(),
        })
    }

    /// The weight, scales and global_scale of the expert set `index`
    /// belongs to (any of the three may be given).
    pub fn expert_siblings(&self, index: usize) -> Result<ExpertSiblings, PayloadError> {
        let t = self.tensor(index)?;
        let Some((prefix, proj, _)) = is_expert(&t.name) else {
            return Err(PayloadError::NotExpert {
                tensor: t.name.clone(),
            });
        };
        let member = |part: &str| {
            let name = format!("{prefix}.experts.{proj}.{part}");
            self.find(&name).ok_or(PayloadError::MissingSibling {
                tensor: t.name.clone(),
                missing: name,
            })
        };
        Ok(ExpertSiblings {
            weight: member("weight")?,
            scales: member("scales")?,
            global_scale: member("global_scale")?,
        })
    }
}

/// A bundle's payload files, each mapped read-only the first time one of
/// its tensors is asked for, and kept until the `Payload` is dropped.
///
/// `B` is how the bundle is held: `&Bundle` for a borrow, `Arc<Bundle>`
/// (the default) for a worker thread that owns its payload. `Payload` is
/// `Send + Sync` whenever `B` is, and may be shared by threads reading
/// different tensors at once.
#[derive(Debug)]
pub struct Payload<B: Deref<Target = Bundle> = Arc<Bundle>> {
    bundle: B,
    maps: Vec<OnceLock<Mapped>>,
}

impl<B: Deref<Target = Bundle>> Payload<B> {
    /// The payload of `bundle`; nothing is opened until bytes are asked for.
    pub fn open(bundle: B) -> Self {
        let maps = (0..bundle.files.len()).map(|_| OnceLock::new()).collect();
        Self { bundle, maps }
    }

    /// The bundle this payload belongs to.
    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    /// All bytes of payload file `file` (an index into [`Bundle::files`]),
    /// mapping it on first use. `tensor` names the tensor the bytes are for
    /// in the error when the bundle does not list the file.
    pub fn file_bytes(&self, file: usize, tensor: &str) -> Result<&[u8], PayloadError> {
        let (Some(info), Some(slot)) = (self.bundle.files.get(file), self.maps.get(file)) else {
            return Err(PayloadError::NoFile {
                tensor: tensor.to_string(),
                file,
            });
        };
        if let Some(m) = slot.get() {
            return Ok(&m[..]);
        }
        let mapped = map_file(&info.name, &info.path)?;
        // Two threads may map the same file at once; the first map is kept
        // and the other dropped, so every slice handed out stays valid.
        Ok(&slot.get_or_init(|| mapped)[..])
    }

    /// The bytes of tensor `index`, exactly its `[offset, offset + bytes)`
    /// in its file, checked against the file's length. An alias has no
    /// bytes of its own: pass [`Bundle::resolve_alias`]'s index.
    pub fn tensor_bytes(&self, index: usize) -> Result<&[u8], PayloadError> {
        let t = self.bundle.tensor(index)?;
        let (start, end) = t.range().ok_or_else(|| PayloadError::NoRange {
            tensor: t.name.clone(),
        })?;
        let bytes = self.file_bytes(t.file, &t.name)?;
        usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| bytes.get(s..e))
            .ok_or_else(|| PayloadError::OutOfBounds {
                file: self
                    .bundle
                    .files
                    .get(t.file)
                    .map_or_else(String::new, |f| f.name.clone()),
                tensor: t.name.clone(),
                start,
                end,
                len: bytes.len() as u64,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_are_one_strict_rule() {
        for good in ["a.bin", "model-00001-of-00002.safetensors", "weights.bin"] {
            assert!(is_bare_name(good), "{good}");
        }
        for bad in [
            "../x", "/x", "a/b", "a\\b", "C:x", "a:b", "~x", ".", "..", "", "a\0b", "a\nb",
        ] {
            assert!(!is_bare_name(bad), "{bad:?}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_being_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("w.bin");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Opening it for reading would block until a writer came; this
        // returns at once.
        match open_regular("w.bin", &fifo) {
            Err(PayloadError::NotRegular { kind, file, .. }) => {
                assert_eq!(kind, "a FIFO");
                assert_eq!(file, "w.bin");
            }
            other => panic!("{other:?}"),
        }
        let e = map_file("w.bin", &fifo).unwrap_err();
        assert_eq!(
            e.to_string(),
            "payload file w.bin is a FIFO, not a regular file"
        );
        assert!(matches!(
            open_regular("gone", &tmp.path().join("gone")),
            Err(PayloadError::Missing { .. })
        ));
        assert!(matches!(
            open_regular("dir", tmp.path()),
            Err(PayloadError::NotRegular {
                kind: "a directory",
                ..
            })
        ));
    }

    #[test]
    fn tensor_bytes_are_the_record_range_and_checked_against_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        crate::sample::write(&dir, &crate::sample::SampleOptions::default()).unwrap();
        let bundle = crate::format::open(&dir).unwrap();
        let whole = fs::read(&bundle.files[0].path).unwrap();
        let payload = Payload::open(&bundle);
        let mut last = None;
        for (i, t) in bundle.tensors.iter().enumerate() {
            let Some((start, end)) = t.range() else {
                assert!(t.alias_of.is_some(), "{}", t.name);
                continue;
            };
            let got = payload.tensor_bytes(i).unwrap();
            assert_eq!(got, &whole[start as usize..end as usize], "{}", t.name);
            last = Some((i, start, end));
        }
        // An alias resolves to its target; the tied head to the embedding.
        let head = bundle.find(crate::format::audio8::LM_HEAD).unwrap();
        let embed = bundle.find(crate::format::audio8::EMBED).unwrap();
        assert_eq!(bundle.resolve_alias(head).unwrap(), embed);
        assert_eq!(bundle.resolve_alias(embed).unwrap(), embed);
        assert!(matches!(
            bundle.resolve_alias(usize::MAX),
            Err(PayloadError::NoTensor { .. })
        ));
        // Cut the file inside the last tensor: its bytes are refused with
        // file, tensor and offsets, not read past the end.
        let (i, start, end) = last.unwrap();
        let cut = tmp.path().join("cut");
        fs::create_dir(&cut).unwrap();
        fs::write(cut.join("manifest.json"), &bundle.manifest_bytes).unwrap();
        fs::write(cut.join(&bundle.files[0].name), &whole[..end as usize - 1]).unwrap();
        let cut_bundle = crate::format::open(&cut).unwrap();
        let e = Payload::open(&cut_bundle).tensor_bytes(i).unwrap_err();
        match &e {
            PayloadError::OutOfBounds {
                file,
                tensor,
                start: s,
                end: en,
                len,
            } => {
                assert_eq!(file, &bundle.files[0].name);
                assert_eq!(tensor, &bundle.tensors[i].name);
                assert_eq!((*s, *en, *len), (start, end, end - 1));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn broken_aliases_end_in_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        crate::sample::write(&dir, &crate::sample::SampleOptions::default()).unwrap();
        let mut bundle = crate::format::open(&dir).unwrap();
        let head = bundle.find(crate::format::audio8::LM_HEAD).unwrap();
        bundle.tensors[head].alias_of = Some("nowhere".into());
        assert!(matches!(
            bundle.resolve_alias(head),
            Err(PayloadError::DanglingAlias { .. })
        ));
        let name = bundle.tensors[head].name.clone();
        bundle.tensors[head].alias_of = Some(name);
        assert!(matches!(
            bundle.resolve_alias(head),
            Err(PayloadError::AliasCycle { .. })
        ));
    }

    #[test]
    fn expert_siblings_are_found_from_any_member() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nv");
        crate::sample::nvfp4::write(&dir, &crate::sample::nvfp4::Nvfp4Options::default()).unwrap();
        let bundle = crate::format::open(&dir).unwrap();
        let base = "model.decoder.layers.0.experts.down_proj";
        let want = ExpertSiblings {
            weight: bundle.find(&format!("{base}.weight")).unwrap(),
            scales: bundle.find(&format!("{base}.scales")).unwrap(),
            global_scale: bundle.find(&format!("{base}.global_scale")).unwrap(),
        };
        for member in [want.weight, want.scales, want.global_scale] {
            assert_eq!(bundle.expert_siblings(member).unwrap(), want);
        }
        let norm = bundle.find("model.norm.weight").unwrap();
        assert!(matches!(
            bundle.expert_siblings(norm),
            Err(PayloadError::NotExpert { .. })
        ));
        let mut partial = bundle.clone();
        partial.tensors[want.scales].name = "renamed".into();
        assert!(matches!(
            partial.expert_siblings(want.weight),
            Err(PayloadError::MissingSibling { .. })
        ));
    }

    #[test]
    fn payload_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Payload>();
        both::<Payload<&Bundle>>();
        both::<PayloadError>();
    }
}
