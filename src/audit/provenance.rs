//! The checks of a calibrated GPTQ-Q4 overlay that need bytes: the copied
//! range hashes and the overlay identity (from the range hashes of this
//! audit's own pass), and, with the parent at hand, the parent checks
//! (copied tensors byte-identical, overlay tensors changed, static parent
//! scale equality). Ends with one [`Event::Provenance`] carrying what was
//! measured, so the report and the app need not re-derive it.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::checks as c;
use super::{CancelToken, CheckId, Event, Finding, Severity, Sink};
use crate::format::gptq::{self, Declared, ParentCheck, ParentStatus, ProvenanceReport};
use crate::format::{self, Bundle, Layout, Payload, hex, read_capped, sha256_hex};

/// Most sibling folders looked at when searching for the parent.
const MAX_SIBLINGS: usize = 256;

/// Runs the byte-level provenance checks after the pass. `hashes` holds the
/// pass's range hash of each tensor (indexed like the bundle's tensors);
/// `manifest_findings` says which manifest-level checks failed.
pub(super) fn check(
    bundle: &Bundle,
    declared: &Declared,
    hashes: &[Option<String>],
    parent: Option<&Path>,
    cancel: &CancelToken,
    emit: Sink,
) {
    let failed = |id: CheckId| {
        bundle
            .findings
            .iter()
            .any(|f| f.check == id && f.severity == Severity::Error)
    };
    let hash_of = |name: &str| {
        bundle
            .find(name)
            .filter(|&i| bundle.tensors[i].alias_of.is_none())
            .and_then(|i| hashes.get(i).cloned().flatten())
    };

    // Copied range hashes against the payload.
    let mut copied_ok = true;
    let mut copied_complete = true;
    for e in &declared.copied {
        match hash_of(&e.name) {
            Some(h) if h == e.range_sha256 => {}
            Some(h) => {
                copied_ok = false;
                let offset = bundle.find(&e.name).and_then(|i| bundle.tensors[i].offset);
                emit(Event::Finding(
                    Finding::error(
                        c::PROVENANCE_COPIED_HASH,
                        format!(
                            "copied tensor {} declares range_sha256 {} but its bytes hash to {h}",
                            e.name, e.range_sha256
                        ),
                    )
                    .tensor(&e.name)
                    .field("provenance.copied")
                    .maybe_offset(offset),
                ));
            }
            // Not a tensor (provenance.partition says so) or never hashed
            // (its bytes could not be read; payload.* says why).
            None => copied_complete = false,
        }
    }
    let copied_verified = copied_ok && copied_complete && !failed(c::PROVENANCE_FIELD);
    if copied_verified {
        emit(Event::Passed {
            check: c::PROVENANCE_COPIED_HASH,
            tensor: None,
        });
    }

    // The overlay identity, recomputed from this payload's range hashes.
    let overlay: Option<Vec<(String, String)>> = declared
        .overlay
        .iter()
        .map(|n| hash_of(n).map(|h| (n.clone(), h)))
        .collect();
    let recomputed = match (&declared.parent.manifest_sha256, overlay) {
        (Some(p), Some(list)) => Some(gptq::overlay_identity(p, &dedup(list))),
        _ => None,
    };
    let mut identity_ok = false;
    if let (Some(r), Some(d)) = (&recomputed, &declared.overlay_identity_sha256) {
        if r == d {
            identity_ok = true;
            emit(Event::Passed {
                check: c::PROVENANCE_IDENTITY,
                tensor: None,
            });
        } else {
            emit(Event::Finding(
                Finding::error(
                    c::PROVENANCE_IDENTITY,
                    format!(
                        "overlay_identity_sha256 is {d}, but the canonical JSON of the parent's manifest hash and the {} overlay tensors' range hashes hashes to {r}",
                        declared.overlay.len()
                    ),
                )
                .field("provenance.overlay_identity_sha256"),
            ));
        }
    }

    let verified = identity_ok
        && copied_verified
        && !failed(c::PROVENANCE_FIELD)
        && !failed(c::PROVENANCE_PARTITION)
        && !failed(c::PROVENANCE_OVERLAY_Q4);

    let parent_check = if cancel.is_cancelled() {
        ParentCheck::default()
    } else {
        parent_checks(bundle, declared, hashes, parent, cancel, emit)
    };
    emit(Event::Provenance(Box::new(ProvenanceReport {
        reading: gptq::READING.to_string(),
        declared: declared.clone(),
        overlay_identity_recomputed_sha256: recomputed,
        calibration_provenance_verified: verified,
        copied_tensor_range_hashes_verified: copied_verified,
        static_parent_scale_equality_rechecked: matches!(
            parent_check.status,
            ParentStatus::Verified | ParentStatus::Mismatch
        ) && parent_check.manifest_sha256_ok == Some(true),
        parent_check,
    })));
}

/// Overlay entries once each (a name listed twice is a partition finding).
fn dedup(mut list: Vec<(String, String)>) -> Vec<(String, String)> {
    list.sort();
    list.dedup();
    list
}

/// A folder beside the bundle whose manifest.json hashes to `sha`.
fn find_sibling(bundle: &Bundle, sha: &str) -> Option<PathBuf> {
    let own = fs::canonicalize(&bundle.dir).ok();
    let up = bundle.dir.canonicalize().ok()?.parent()?.to_path_buf();
    let mut entries: Vec<PathBuf> = fs::read_dir(&up)
        .ok()?
        .filter_map(Result::ok)
        .take(MAX_SIBLINGS)
        .map(|e| e.path())
        .collect();
    entries.sort();
    entries.into_iter().find(|p| {
        p.is_dir()
            && fs::canonicalize(p).ok() != own
            && read_capped(&p.join("manifest.json"), format::MAX_MANIFEST_BYTES)
                .is_ok_and(|b| sha256_hex(&b) == sha)
    })
}

/// SHA-256 of a whole file, read in 8 MiB chunks.
fn file_sha(path: &Path) -> std::io::Result<String> {
    let (mut file, _) =
        format::payload::open_regular("weights", path).map_err(std::io::Error::other)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 8 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn parent_checks(
    bundle: &Bundle,
    declared: &Declared,
    hashes: &[Option<String>],
    given: Option<&Path>,
    cancel: &CancelToken,
    emit: Sink,
) -> ParentCheck {
    let mut pc = ParentCheck::default();
    let finding = |id: CheckId, msg: String| Finding::error(id, msg);
    let Some(want) = declared.parent.manifest_sha256.as_deref() else {
        pc.message = "provenance.parent.manifest_sha256 is missing: no parent to look for".into();
        return pc;
    };
    let (dir, by) = match given {
        Some(p) => (p.to_path_buf(), "option"),
        None => match find_sibling(bundle, want) {
            Some(p) => (p, "sibling"),
            None => {
                pc.message = format!(
                    "no parent given and no folder beside this bundle has manifest SHA-256 {want}: parent checks not run (audit --parent DIR, or pick it in the app's Lineage tab)"
                );
                emit(Event::Finding(
                    Finding::info(c::PROVENANCE_PARENT, pc.message.clone())
                        .field("provenance.parent"),
                ));
                return pc;
            }
        },
    };
    pc.path = Some(dir.display().to_string());
    pc.found_by = Some(by.into());
    let parent = match format::open(&dir) {
        Ok(b) => b,
        Err(e) => {
            pc.status = ParentStatus::Unreadable;
            pc.message = format!(
                "the parent {} could not be opened: {}",
                dir.display(),
                format::error_chain(&e)
            );
            emit(Event::Finding(
                finding(c::PROVENANCE_PARENT, pc.message.clone()).field("provenance.parent"),
            ));
            return pc;
        }
    };
    pc.manifest_sha256 = Some(parent.provenance.manifest_sha256.clone());
    let manifest_ok = parent.provenance.manifest_sha256 == want;
    pc.manifest_sha256_ok = Some(manifest_ok);
    if !manifest_ok {
        pc.status = ParentStatus::Mismatch;
        pc.message = format!(
            "{}'s manifest.json hashes to {}, not to the declared parent manifest SHA-256 {want}: it is not this overlay's parent",
            dir.display(),
            parent.provenance.manifest_sha256
        );
        emit(Event::Finding(
            finding(c::PROVENANCE_PARENT, pc.message.clone())
                .field("provenance.parent.manifest_sha256"),
        ));
        return pc;
    }
    let payload = Payload::open(&parent);
    // The parent's whole payload and each tensor's range, on all cores.
    let (weights, ranges) = rayon::join(
        || parent.files.first().map(|f| file_sha(&f.path)),
        || {
            (0..parent.tensors.len())
                .into_par_iter()
                .map(|i| {
                    // A cancelled audit stops hashing the parent; its
                    // outcome is discarded.
                    if cancel.is_cancelled() {
                        return None;
                    }
                    let r = parent.resolve_alias(i).ok()?;
                    payload
                        .tensor_bytes(r)
                        .ok()
                        .map(|b| hex(&Sha256::digest(b)))
                })
                .collect::<Vec<Option<String>>>()
        },
    );
    let mut problems = Vec::new();
    match weights {
        Some(Ok(sha)) => {
            let ok = declared.parent.weights_sha256.as_deref() == Some(sha.as_str());
            pc.weights_sha256_ok = Some(ok);
            if !ok {
                problems.push(format!(
                    "the parent's payload hashes to {sha}, not to the declared {}",
                    declared
                        .parent
                        .weights_sha256
                        .as_deref()
                        .unwrap_or("(none)")
                ));
            }
            pc.weights_sha256 = Some(sha);
        }
        Some(Err(e)) => problems.push(format!("the parent's payload could not be read ({e})")),
        None => problems.push("the parent names no payload file".into()),
    }
    let rev_ok = parent.provenance.source_revision == declared.parent.source_revision;
    pc.source_revision_ok = Some(rev_ok);
    if !rev_ok {
        problems.push(format!(
            "the parent's source_revision is {:?}, the overlay declares {:?}",
            parent.provenance.source_revision, declared.parent.source_revision
        ));
    }
    for p in &problems {
        emit(Event::Finding(
            finding(c::PROVENANCE_PARENT, p.clone()).field("provenance.parent"),
        ));
    }
    if problems.is_empty() {
        emit(Event::Passed {
            check: c::PROVENANCE_PARENT,
            tensor: None,
        });
    }
    let parent_hash = |name: &str| {
        parent
            .find(name)
            .and_then(|i| ranges.get(i).cloned().flatten())
    };

    // Copied tensors: the parent's bytes exactly.
    for e in &declared.copied {
        let ours = bundle
            .find(&e.name)
            .and_then(|i| hashes.get(i).cloned().flatten());
        match (parent_hash(&e.name), ours) {
            (Some(p), Some(o)) if p == o => pc.copied_identical += 1,
            (p, _) => {
                let why = match p {
                    None => {
                        "the parent has no such tensor (or its bytes could not be read)".to_string()
                    }
                    Some(p) => format!("the parent's bytes hash to {p}"),
                };
                pc.copied_differing.push(e.name.clone());
                emit(Event::Finding(
                    finding(
                        c::PROVENANCE_PARENT_COPIED,
                        format!(
                            "copied tensor {} is not byte-identical to the parent's: {why}",
                            e.name
                        ),
                    )
                    .tensor(&e.name)
                    .field("provenance.copied"),
                ));
            }
        }
    }
    if pc.copied_differing.is_empty() {
        emit(Event::Passed {
            check: c::PROVENANCE_PARENT_COPIED,
            tensor: None,
        });
    }

    // Overlay tensors: the parent's name and shape, other bytes; and
    // whether the scales stayed the parent's.
    let ours_payload = Payload::open(bundle);
    for name in &declared.overlay {
        let Some(i) = bundle
            .find(name)
            .filter(|&i| bundle.tensors[i].alias_of.is_none())
        else {
            continue; // provenance.partition reports it
        };
        let t = &bundle.tensors[i];
        let pj = parent.find(name).and_then(|j| parent.resolve_alias(j).ok());
        let problem = match pj {
            None => Some("the parent has no tensor of that name".to_string()),
            Some(j) if parent.tensors[j].shape != t.shape => Some(format!(
                "its shape {} differs from the parent's {}",
                t.shape_text(),
                parent.tensors[j].shape_text()
            )),
            Some(j) => match (ranges.get(j).cloned().flatten(), hashes.get(i).cloned().flatten()) {
                (Some(p), Some(o)) if p == o => Some(
                    "its bytes are identical to the parent's: it was not recalibrated (list it under copied)"
                        .to_string(),
                ),
                (Some(_), Some(_)) => None,
                _ => Some("its bytes or the parent's could not be read".to_string()),
            },
        };
        match problem {
            Some(why) => {
                pc.overlay_problems.push(name.clone());
                emit(Event::Finding(
                    finding(
                        c::PROVENANCE_PARENT_OVERLAY,
                        format!("overlay tensor {name}: {why}"),
                    )
                    .tensor(name)
                    .field("provenance.overlay"),
                ));
            }
            None => pc.overlay_changed += 1,
        }
        if let (Some(j), Some(ours)) = (pj, scale_bytes(&ours_payload, i))
            && let Some(theirs) = scale_bytes(&payload, j)
        {
            if ours == theirs {
                pc.scales_equal.push(name.clone());
            } else {
                pc.scales_differ.push(name.clone());
            }
        }
    }
    if pc.overlay_problems.is_empty() {
        emit(Event::Passed {
            check: c::PROVENANCE_PARENT_OVERLAY,
            tensor: None,
        });
    }
    let compared = pc.scales_equal.len() + pc.scales_differ.len();
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    emit(Event::Finding(
        Finding::info(
            c::PROVENANCE_PARENT_SCALES,
            format!(
                "static parent scale equality: {} of {compared} overlay tensors keep the parent's F16 scales exactly ({}); {} have new scales ({})",
                pc.scales_equal.len(),
                list(&pc.scales_equal),
                pc.scales_differ.len(),
                list(&pc.scales_differ)
            ),
        )
        .field("provenance.overlay"),
    ));
    let ok =
        problems.is_empty() && pc.copied_differing.is_empty() && pc.overlay_problems.is_empty();
    pc.status = if ok {
        ParentStatus::Verified
    } else {
        ParentStatus::Mismatch
    };
    pc.message = if ok {
        format!(
            "parent {} verified: {} copied tensors byte-identical, {} overlay tensors recalibrated",
            dir.display(),
            pc.copied_identical,
            pc.overlay_changed
        )
    } else {
        format!(
            "parent {}: {} parent finding(s), {} copied tensor(s) differ, {} overlay problem(s)",
            dir.display(),
            problems.len(),
            pc.copied_differing.len(),
            pc.overlay_problems.len()
        )
    };
    pc
}

/// The F16 scales of packed tensor `i` (the bytes after its codes).
fn scale_bytes<B: std::ops::Deref<Target = Bundle>>(p: &Payload<B>, i: usize) -> Option<&[u8]> {
    let layout = p.bundle().tensors.get(i)?.layout?;
    if !matches!(layout, Layout::Packed { .. }) {
        return None;
    }
    let bytes = p.tensor_bytes(i).ok()?;
    bytes.get(usize::try_from(layout.codes_bytes()).ok()?..)
}
