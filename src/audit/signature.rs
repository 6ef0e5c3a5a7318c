//! The OMS signature in the audit: found (`model.sig` or `--signature`),
//! checked before the pass, and its manifest compared after it with the
//! pass's own SHA-256 of every payload file (no second read for the
//! `files` method).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{CancelToken, Event, Finding, Options, Sink, checks};
use crate::format::Bundle;
use crate::signing::{self, Checked, Trust};

/// A signature being checked across the pass.
pub(super) struct Pending {
    path: PathBuf,
    checked: Checked,
    /// The audited path when it is one file (a single-file signature
    /// covers only that).
    target: Option<PathBuf>,
}

/// Finds and checks the signature; emits its findings at once. `None`
/// when the bundle is unsigned (and nothing asks for a signature).
pub(super) fn start(
    bundle: &Bundle,
    audited: &Path,
    options: &Options,
    emit: Sink,
) -> Option<Pending> {
    let path = options.signature.clone().or_else(|| {
        let p = bundle.dir.join(signing::SIGNATURE_FILE);
        std::fs::symlink_metadata(&p).is_ok().then_some(p)
    });
    let Some(path) = path else {
        if !options.trust.keys.is_empty()
            || !options.trust.roots.is_empty()
            || options.trust.trusted_root.is_some()
        {
            emit(Event::Finding(
                Finding::error(
                    checks::OMS_BUNDLE,
                    format!(
                        "a key or root was given, but the bundle is unsigned: no {} in {} (or pass --signature FILE)",
                        signing::SIGNATURE_FILE,
                        bundle.dir.display()
                    ),
                )
                .field(signing::SIGNATURE_FILE),
            ));
        }
        return None;
    };
    let (trust, trust_findings) = Trust::load(&options.trust);
    for f in trust_findings {
        emit(Event::Finding(f));
    }
    let checked = signing::check_file(&path, &trust);
    for f in &checked.findings {
        emit(Event::Finding(f.clone()));
    }
    let target = std::fs::metadata(audited)
        .is_ok_and(|m| m.is_file())
        .then(|| audited.to_path_buf());
    Some(Pending {
        path,
        checked,
        target,
    })
}

impl Pending {
    /// Whether the signature is by shards: its digests need nothing from
    /// the pass, so they are hashed beside it ([`compare`] on its own
    /// thread while the pass runs).
    pub(super) fn by_shards(&self) -> bool {
        self.checked.statement.as_ref().is_some_and(|s| {
            matches!(
                s.serialization.method,
                signing::statement::Method::Shards { .. }
            )
        })
    }

    /// The shard size and hash type of a signature by shards.
    pub(super) fn shards(&self) -> Option<(u64, signing::statement::HashType)> {
        let s = self.checked.statement.as_ref()?;
        match s.serialization.method {
            signing::statement::Method::Shards { shard_size } => {
                Some((shard_size, s.serialization.hash_type))
            }
            signing::statement::Method::Files => None,
        }
    }

    /// The payload files whose whole-file SHA-256 the pass can skip: every
    /// byte of them is in a shard of a signature by shards, and no
    /// manifest, hash list or `--expect` gives their digest.
    pub(super) fn skippable(&self, bundle: &Bundle, options: &Options) -> Vec<usize> {
        let Some(st) = self.checked.statement.as_ref().filter(|_| self.by_shards()) else {
            return Vec::new();
        };
        let dir = folder_of(bundle);
        let signed: std::collections::HashSet<&str> =
            st.resources.iter().map(|r| r.path.as_str()).collect();
        let target = self.target.as_ref().and_then(|t| t.canonicalize().ok());
        bundle
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                let expected =
                    f.expected_sha256.is_some() || options.expect.iter().any(|(n, _)| *n == f.name);
                let covered = if st.single_file {
                    target.is_some() && f.path.canonicalize().ok() == target
                } else {
                    relative(&dir, &f.path).is_some_and(|r| signed.contains(r.as_str()))
                };
                covered && !expected
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// What the pass hashed that the signed manifest can use: payload file
/// index to its SHA-256 hex (for the `files` method), and `(file index,
/// start, end)` to a shard's digest (for `shards`).
#[derive(Default)]
pub(super) struct Hashed {
    pub(super) files: HashMap<usize, String>,
    pub(super) shards: HashMap<(usize, u64, u64), Vec<u8>>,
}

/// Compares the signed manifest with the folder (or the one signed file),
/// using what the pass `hashed`. `None` when the statement could not be read.
pub(super) fn compare(
    p: &Pending,
    bundle: &Bundle,
    hashed: &Hashed,
    options: &Options,
    cancel: &CancelToken,
) -> Option<signing::folder::Compared> {
    let statement = p.checked.statement.as_ref()?;
    let dir = folder_of(bundle);
    // A single-file signature knows its file by its name alone.
    let name_of = |path: &Path| match (statement.single_file, &p.target) {
        (true, Some(t)) => (path.canonicalize().ok() == t.canonicalize().ok())
            .then(|| t.file_name().map(|n| n.to_string_lossy().into_owned()))
            .flatten(),
        _ => relative(&dir, path),
    };
    let mut known = signing::folder::Known::default();
    for (i, hex) in &hashed.files {
        if let Some(f) = bundle.files.get(*i)
            && let Some(name) = name_of(&f.path)
            && let Some(d) = signing::statement::decode_hex(hex)
        {
            known.sha256.insert(name, d);
        }
    }
    for ((i, a, b), d) in &hashed.shards {
        if let Some(f) = bundle.files.get(*i)
            && let Some(name) = name_of(&f.path)
        {
            known.ranges.insert((name, *a, *b), d.clone());
        }
    }
    Some(match (statement.single_file, &p.target) {
        (false, _) => signing::folder::compare(
            &dir,
            statement,
            Some(&p.path),
            &known,
            options.ignore_unsigned,
            cancel,
        ),
        (true, Some(file)) => signing::folder::compare_file(file, statement, &known, cancel),
        (true, None) => signing::folder::Compared {
            findings: vec![
                Finding::error(
                    checks::OMS_MANIFEST,
                    format!(
                        "the signature covers one file (resource \".\", signed as {:?}), but the folder {} was audited: audit that file",
                        statement.model_name,
                        dir.display()
                    ),
                )
                .field("predicate.resources"),
            ],
            ..Default::default()
        },
    })
}

/// Emits the comparison's findings and the signature's report.
pub(super) fn finish(
    p: Pending,
    compared: Option<signing::folder::Compared>,
    cancel: &CancelToken,
    emit: Sink,
) {
    let mut report = p.checked.report;
    match compared {
        Some(cmp) => {
            if cancel.is_cancelled() {
                return;
            }
            let failed = signing::has_errors(&cmp.findings);
            for f in cmp.findings {
                emit(Event::Finding(f));
            }
            if !failed {
                for c in [
                    checks::OMS_DIGEST,
                    checks::OMS_MISSING,
                    checks::OMS_UNSIGNED,
                ] {
                    emit(Event::Passed {
                        check: c,
                        tensor: None,
                    });
                }
            }
            report.files_checked = cmp.files_checked;
            report.matched_files = cmp.matched_files;
            report.matched_files.sort_unstable();
            report.unsigned_files = cmp.unsigned_files;
            if failed {
                report.verified = false;
                report
                    .not_verified
                    .push("the folder does not match the signed manifest".into());
            }
        }
        None => report.verified = false,
    }
    if report.verified {
        emit(Event::Passed {
            check: checks::OMS_SIGNATURE,
            tensor: None,
        });
    }
    emit(Event::Signature(Box::new(report)));
}

/// The model folder the signature covers.
fn folder_of(bundle: &Bundle) -> PathBuf {
    if bundle.dir.is_dir() {
        bundle.dir.clone()
    } else {
        bundle
            .dir
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }
}

fn relative(dir: &Path, file: &Path) -> Option<String> {
    let d = dir.canonicalize().ok()?;
    let f = file.canonicalize().ok()?;
    let rel = f.strip_prefix(&d).ok()?;
    Some(rel.to_string_lossy().replace('\\', "/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::statement::{HashType, Method, Resource, Serialization, Statement};

    /// A statement signing `files` (relative name, length) by shards of
    /// `size` bytes, every digest 32 bytes of 7 (what no file hashes to).
    fn by_shards(files: &[(&str, u64)], size: u64, single_file: bool) -> Statement {
        let mut resources = Vec::new();
        for &(path, len) in files {
            let mut a = 0;
            while a < len {
                let b = (a + size).min(len);
                resources.push(Resource {
                    name: format!("{path}:{a}:{b}"),
                    path: path.to_string(),
                    range: Some((a, b)),
                    digest: vec![7; 32],
                });
                a = b;
            }
        }
        Statement {
            predicate_type: signing::statement::PREDICATE_V1.into(),
            model_name: "m".into(),
            root_digest: None,
            serialization: Serialization {
                method: Method::Shards { shard_size: size },
                hash_type: HashType::Sha256,
                allow_symlinks: false,
                ignore_paths: Vec::new(),
            },
            resources,
            single_file,
        }
    }

    /// The shard digests the pass hands over (by payload file index) reach
    /// the signed manifest under the names it gives the files: a folder's
    /// relative paths, or the one signed file. With them nothing is read
    /// (the digests here match the statement, not the files); without them
    /// every shard is read and differs.
    #[test]
    fn the_pass_shard_digests_reach_the_signed_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let gguf = tmp.path().join("one").join("m.gguf");
        std::fs::create_dir_all(gguf.parent().unwrap()).unwrap();
        crate::sample::gguf::write(&gguf, 3).unwrap();
        let folder = tmp.path().join("mlx");
        let o = crate::sample::mlxlm::MlxLmOptions {
            shards: 2,
            ..Default::default()
        };
        crate::sample::mlxlm::write(&folder, &o, None).unwrap();
        let (trust, _) = signing::Trust::load(&Default::default());
        let options = Options {
            ignore_unsigned: true,
            ..Options::default()
        };
        let cancel = CancelToken::default();
        for (audited, single) in [(&gguf, true), (&folder, false)] {
            let bundle = crate::format::open(audited).unwrap();
            let files: Vec<(String, u64)> = bundle
                .files
                .iter()
                .map(|f| {
                    let name = if single {
                        signing::statement::SINGLE_FILE.to_string()
                    } else {
                        relative(&folder, &f.path).unwrap()
                    };
                    (name, std::fs::metadata(&f.path).unwrap().len())
                })
                .collect();
            let named: Vec<(&str, u64)> = files.iter().map(|(n, l)| (n.as_str(), *l)).collect();
            let size = files[0].1 / 3 + 1;
            let statement = by_shards(&named, size, single);
            let shards = statement.resources.len();
            assert!(shards >= 3);
            let sig = tmp.path().join("model.sig");
            let mut checked = signing::check_file(&sig, &trust);
            checked.statement = Some(statement);
            let p = Pending {
                path: sig,
                checked,
                target: single.then(|| audited.clone()),
            };
            let read = compare(&p, &bundle, &Hashed::default(), &options, &cancel).unwrap();
            let digest = read
                .findings
                .iter()
                .filter(|f| f.check == checks::OMS_DIGEST)
                .count();
            assert_eq!(digest, shards, "{:?}", read.findings);
            let mut hashed = Hashed::default();
            for (i, (_, len)) in files.iter().enumerate() {
                let mut a = 0;
                while a < *len {
                    let b = (a + size).min(*len);
                    hashed.shards.insert((i, a, b), vec![7; 32]);
                    a = b;
                }
            }
            let known = compare(&p, &bundle, &hashed, &options, &cancel).unwrap();
            assert!(known.findings.is_empty(), "{:?}", known.findings);
            assert_eq!(known.matched, shards);
        }
    }
}
