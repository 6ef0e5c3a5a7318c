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
}

/// Finds and checks the signature; emits its findings at once. `None`
/// when the bundle is unsigned (and nothing asks for a signature).
pub(super) fn start(bundle: &Bundle, options: &Options, emit: Sink) -> Option<Pending> {
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
    Some(Pending { path, checked })
}

/// Compares the signed manifest with the folder, using `hashed` (payload
/// file index to the pass's SHA-256 hex), and emits the report.
pub(super) fn finish(
    p: Pending,
    bundle: &Bundle,
    hashed: &HashMap<usize, String>,
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) {
    let Pending { path, mut checked } = p;
    let mut report = checked.report.clone();
    if let Some(statement) = checked.statement.take() {
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
        let cmp = signing::folder::compare(
            &dir,
            &statement,
            Some(&path),
            &known,
            options.ignore_unsigned,
            cancel,
        );
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
    } else {
        report.verified = false;
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
