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

/// Compares the signed manifest with the folder (or the one signed file),
/// using `hashed` (payload file index to the pass's SHA-256 hex, for the
/// `files` method). `None` when the statement could not be read.
pub(super) fn compare(
    p: &Pending,
    bundle: &Bundle,
    hashed: &HashMap<usize, String>,
    options: &Options,
    cancel: &CancelToken,
) -> Option<signing::folder::Compared> {
    let statement = p.checked.statement.as_ref()?;
    let dir = folder_of(bundle);
    let mut known = HashMap::new();
    for (i, hex) in hashed {
        if let Some(f) = bundle.files.get(*i)
            && let Some(rel) = relative(&dir, &f.path)
            && let Some(d) = signing::statement::decode_hex(hex)
        {
            known.insert(rel, d);
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
        (true, Some(file)) => {
            let rel = relative(&dir, file);
            let known = rel.and_then(|r| known.get(&r));
            signing::folder::compare_file(file, statement, known, cancel)
        }
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
