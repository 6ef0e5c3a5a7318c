//! Comparing two bundles tensor by tensor: which tensors are identical
//! (same range hash), changed, or present on one side only, and for a
//! changed one, how (precision, shape, dtype, codes, scales, values) and by
//! how much in weight space.
//!
//! Both sides are hashed at once (one read of each payload, through the
//! payload layer's maps, on all cores); only changed tensors are decoded.

pub mod compare;
pub mod markdown;
mod tensor;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use compare::{CodeDiff, ScaleDiff, WorstRow};

use crate::format::{self, Bundle, OpenError, Payload, PayloadError, hex};
use crate::util::CancelToken;

/// Why two bundles could not be compared (the CLI exits 2).
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// A side could not be opened as a bundle.
    #[error("bundle {side} could not be opened")]
    Open {
        /// `A` or `B`.
        side: &'static str,
        /// Why.
        source: OpenError,
    },
    /// A side's payload bytes could not be read (missing file, a record
    /// past the end of its file, a broken alias).
    #[error("bundle {side} could not be read")]
    Payload {
        /// `A` or `B`.
        side: &'static str,
        /// Which file, tensor and offsets.
        source: PayloadError,
    },
    /// The caller cancelled the comparison (the app's job).
    #[error("the comparison was cancelled")]
    Cancelled,
}

/// How a caller follows and stops a long comparison (the app runs it as a
/// job): a cancel token checked before each tensor, and a progress callback
/// called from the hashing threads with (bytes hashed, bytes to hash) over
/// both sides.
pub struct Control<'a> {
    /// Stops the comparison before the next tensor.
    pub cancel: &'a CancelToken,
    /// Bytes hashed so far and in all; called from any thread.
    pub progress: &'a (dyn Fn(u64, u64) + Sync),
}

/// Bytes hashed so far and in all, shared by both sides' hashing tasks.
struct Counter<'a> {
    control: &'a Control<'a>,
    done: AtomicU64,
    total: u64,
}

impl Counter<'_> {
    fn add(&self, bytes: u64) {
        let done = self.done.fetch_add(bytes, Ordering::Relaxed) + bytes;
        (self.control.progress)(done, self.total);
    }
}

/// Bytes a side will hash: every record that is not an alias.
fn bytes_to_hash(b: &Bundle) -> u64 {
    b.tensors
        .iter()
        .filter(|t| t.alias_of.is_none())
        .map(|t| t.bytes.unwrap_or(0))
        .fold(0, u64::saturating_add)
}

/// Which bundle a side of the comparison is.
#[derive(Debug, Clone, Serialize)]
pub struct SideRef {
    /// The path as given.
    pub path: String,
    /// Its format name.
    pub format: String,
    /// SHA-256 of its manifest.json as read.
    pub manifest_sha256: String,
}

/// Tensors (by name) in each state.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Same range hash on both sides.
    pub identical: usize,
    /// On both sides, with different bytes.
    pub changed: usize,
    /// Only in A.
    pub only_a: usize,
    /// Only in B.
    pub only_b: usize,
}

/// The state of one tensor.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// On both sides, with different bytes.
    Changed,
    /// Only in A.
    OnlyA,
    /// Only in B.
    OnlyB,
    /// The same bytes on both sides.
    Identical,
}

/// One side of a tensor row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TensorSide {
    /// Precision as the manifest names it.
    pub precision: String,
    /// Shape, when known.
    pub shape: Option<Vec<u64>>,
    /// The record's source dtype (dense) or safetensors dtype (NVFP4).
    pub dtype: Option<String>,
    /// SHA-256 of its byte range (an alias: its target's).
    pub sha256: Option<String>,
}

/// One row of the comparison: a tensor, or one expert of a stacked NVFP4
/// tensor.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TensorDiff {
    /// Tensor name.
    pub name: String,
    /// Its state.
    pub status: Status,
    /// The expert, for a per-expert row of a stacked NVFP4 tensor.
    pub expert: Option<u64>,
    /// What differs, of `precision`, `shape`, `dtype`, `codes`, `scales`,
    /// `values` (empty unless changed).
    pub differs: Vec<&'static str>,
    /// A's version (null when only in B).
    pub a: Option<TensorSide>,
    /// B's version (null when only in A).
    pub b: Option<TensorSide>,
    /// Code changes (same shape and precision, packed or NVFP4 weights).
    pub codes: Option<CodeDiff>,
    /// Scale ratios B/A (same shape and precision, packed, E4M3 or global scales).
    pub scales: Option<ScaleDiff>,
    /// `‖W_B − W_A‖ / ‖W_A‖` over dequantised values (same shape).
    pub weight_rel_err: Option<f64>,
    /// The row with the largest relative error.
    pub worst_row: Option<WorstRow>,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    /// Bundle A.
    pub a: SideRef,
    /// Bundle B.
    pub b: SideRef,
    /// Tensors by state.
    pub summary: Summary,
    /// Non-identical rows first, worst first; then the identical tensors in
    /// A's order.
    pub tensors: Vec<TensorDiff>,
}

/// One opened, hashed side.
pub(crate) struct Side<'a> {
    pub(crate) bundle: &'a Bundle,
    pub(crate) payload: Payload<&'a Bundle>,
    /// Range hash of each tensor, aliases resolved to their target's.
    hashes: Vec<[u8; 32]>,
    /// First index of each name.
    names: HashMap<&'a str, usize>,
}

impl<'a> Side<'a> {
    fn new(bundle: &'a Bundle, side: &'static str, counter: &Counter) -> Result<Self, DiffError> {
        let payload = Payload::open(bundle);
        let err = |source| DiffError::Payload { side, source };
        // Every tensor's range is hashed from the mapped file on its own
        // rayon task, so each byte is read once and all cores share the work.
        let own: Vec<Option<[u8; 32]>> = (0..bundle.tensors.len())
            .into_par_iter()
            .map(|i| {
                if bundle.tensors[i].alias_of.is_some() {
                    return Ok(None);
                }
                if counter.control.cancel.is_cancelled() {
                    return Err(DiffError::Cancelled);
                }
                let bytes = payload.tensor_bytes(i).map_err(err)?;
                let hash = Sha256::digest(bytes).into();
                counter.add(bytes.len() as u64);
                Ok(Some(hash))
            })
            .collect::<Result<_, DiffError>>()?;
        let hashes = (0..bundle.tensors.len())
            .map(|i| {
                let target = bundle.resolve_alias(i)?;
                // resolve_alias only returns indices of real tensors, which
                // all have a hash.
                Ok(own.get(target).copied().flatten().unwrap_or_default())
            })
            .collect::<Result<_, PayloadError>>()
            .map_err(err)?;
        let mut names = HashMap::new();
        for (i, t) in bundle.tensors.iter().enumerate() {
            names.entry(t.name.as_str()).or_insert(i);
        }
        Ok(Self {
            bundle,
            payload,
            hashes,
            names,
        })
    }

    /// The row side of tensor `i`.
    pub(crate) fn describe(&self, i: usize) -> Option<TensorSide> {
        let t = self.bundle.tensors.get(i)?;
        Some(TensorSide {
            precision: t.precision.as_str().to_string(),
            shape: t.shape.clone(),
            dtype: t.source_dtype.clone(),
            sha256: self.hashes.get(i).map(|h| hex(h)),
        })
    }
}

/// Compares bundle `a` with bundle `b` (folders or their manifest.json).
pub fn diff(a: &Path, b: &Path) -> Result<DiffReport, DiffError> {
    let (ba, bb) = rayon::join(|| format::open(a), || format::open(b));
    let ba = ba.map_err(|source| DiffError::Open { side: "A", source })?;
    let bb = bb.map_err(|source| DiffError::Open { side: "B", source })?;
    let cancel = CancelToken::default();
    let control = Control {
        cancel: &cancel,
        progress: &|_, _| {},
    };
    diff_bundles((a, &ba), (b, &bb), &control)
}

/// Compares two opened bundles (each with the path it was opened from, as
/// the report names it), cancellable and with progress: what the app's
/// "Compare with…" job runs, on the bundle it already has open.
pub fn diff_bundles(
    (a, ba): (&Path, &Bundle),
    (b, bb): (&Path, &Bundle),
    control: &Control,
) -> Result<DiffReport, DiffError> {
    let counter = Counter {
        control,
        done: AtomicU64::new(0),
        total: bytes_to_hash(ba).saturating_add(bytes_to_hash(bb)),
    };
    let (sa, sb) = rayon::join(
        || Side::new(ba, "A", &counter),
        || Side::new(bb, "B", &counter),
    );
    let (sa, sb) = (sa?, sb?);

    let mut summary = Summary::default();
    let mut identical = Vec::new();
    let mut changed = Vec::new();
    let mut rows = Vec::new();
    for (i, t) in ba.tensors.iter().enumerate() {
        if sa.names.get(t.name.as_str()) != Some(&i) {
            continue; // a duplicate name: the first record stands for it
        }
        match sb.names.get(t.name.as_str()) {
            Some(&j) if sa.hashes[i] == sb.hashes[j] => {
                summary.identical += 1;
                identical.push(plain_row(&sa, &sb, i, Some(j), Status::Identical));
            }
            Some(&j) => {
                summary.changed += 1;
                changed.push((i, j));
            }
            None => {
                summary.only_a += 1;
                rows.push(plain_row(&sa, &sb, i, None, Status::OnlyA));
            }
        }
    }
    for (j, t) in bb.tensors.iter().enumerate() {
        if sb.names.get(t.name.as_str()) == Some(&j) && !sa.names.contains_key(t.name.as_str()) {
            summary.only_b += 1;
            let mut row = plain_row(&sb, &sa, j, None, Status::OnlyB);
            std::mem::swap(&mut row.a, &mut row.b);
            rows.push(row);
        }
    }
    let detailed: Vec<Vec<TensorDiff>> = changed
        .par_iter()
        .map(|&(i, j)| {
            if control.cancel.is_cancelled() {
                return Vec::new();
            }
            tensor::compare(&sa, &sb, i, j)
        })
        .collect();
    if control.cancel.is_cancelled() {
        return Err(DiffError::Cancelled);
    }
    rows.extend(detailed.into_iter().flatten());
    rows.sort_by(|x, y| {
        x.status
            .cmp(&y.status)
            // Structural changes (no error computable) first, then by error.
            .then_with(|| match (x.weight_rel_err, y.weight_rel_err) {
                (Some(p), Some(q)) => q.total_cmp(&p),
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.expert.cmp(&y.expert))
    });
    rows.extend(identical);
    let side_ref = |p: &Path, bundle: &Bundle| SideRef {
        path: p.display().to_string(),
        format: bundle.format.name().to_string(),
        manifest_sha256: bundle.provenance.manifest_sha256.clone(),
    };
    Ok(DiffReport {
        a: side_ref(a, ba),
        b: side_ref(b, bb),
        summary,
        tensors: rows,
    })
}

/// A row with no detail: identical, or on one side only (`i` in `this`).
fn plain_row(this: &Side, other: &Side, i: usize, j: Option<usize>, status: Status) -> TensorDiff {
    TensorDiff {
        name: this.bundle.tensors[i].name.clone(),
        status,
        expert: None,
        differs: Vec::new(),
        a: this.describe(i),
        b: j.and_then(|j| other.describe(j)),
        codes: None,
        scales: None,
        weight_rel_err: None,
        worst_row: None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::sample::{self, SampleFormat, SampleOptions};

    fn sample_dir(tmp: &tempfile::TempDir) -> std::path::PathBuf {
        let dir = tmp.path().join("b");
        let opts = SampleOptions {
            format: SampleFormat::Audio8V2,
            seed: 3,
            size_mib: None,
        };
        sample::write(&dir, &opts).unwrap();
        dir
    }

    #[test]
    fn progress_reaches_every_byte_of_both_sides_and_cancel_stops() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = sample_dir(&tmp);
        let bundle = format::open(&dir).unwrap();
        let payload = std::fs::metadata(dir.join("weights.bin")).unwrap().len();
        let seen = Mutex::new(Vec::new());
        let progress = |d, t| seen.lock().unwrap().push((d, t));
        let cancel = CancelToken::default();
        let control = Control {
            cancel: &cancel,
            progress: &progress,
        };
        let r = diff_bundles((&dir, &bundle), (&dir, &bundle), &control).unwrap();
        assert_eq!(r.summary.changed, 0);
        let seen = seen.into_inner().unwrap();
        // Records are contiguous and cover the payload: both sides hash all of it.
        assert_eq!(seen.iter().map(|s| s.0).max(), Some(2 * payload));
        assert!(seen.iter().all(|s| s.1 == 2 * payload));

        cancel.cancel();
        let control = Control {
            cancel: &cancel,
            progress: &|_, _| {},
        };
        assert!(matches!(
            diff_bundles((&dir, &bundle), (&dir, &bundle), &control),
            Err(DiffError::Cancelled)
        ));
    }
}
