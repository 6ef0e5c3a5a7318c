//! The report: one schema for the CLI's `--json`, the GUI's "Save report…"
//! and every later command. Built by folding audit [`Event`]s.

mod experts;
pub mod lineage;
pub mod markdown;
mod mlxlm;
pub mod peers;

pub use experts::merge_companions;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::audit::{Event, Failure, Finding, Outcome, Severity};
use crate::decode::stats::TensorStats;
use crate::finding::checks;
use crate::format::{Bundle, OpenError, Provenance, TensorInfo, error_chain};

/// `{"name", "version"}` of the tool.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    /// Always `bundlescope`.
    pub name: &'static str,
    /// Crate version.
    pub version: &'static str,
}

impl Default for Tool {
    fn default() -> Self {
        Self {
            name: crate::TOOL_NAME,
            version: crate::TOOL_VERSION,
        }
    }
}

/// Which bundle the report is about.
#[derive(Debug, Clone, Serialize)]
pub struct BundleRef {
    /// Folder as given.
    pub path: String,
    /// Format name.
    pub format: Option<String>,
}

/// One row of the report's tensor list.
#[derive(Debug, Clone, Serialize)]
pub struct TensorRow {
    /// Index row fields.
    #[serde(flatten)]
    pub info: TensorInfo,
    /// Statistics from the pass (absent for aliases and broken records);
    /// boxed, so a row without them costs a pointer, not the whole struct.
    pub stats: Option<Box<TensorStats>>,
    /// SHA-256 of the tensor's byte range (an alias: its target's); null
    /// when range hashes were not computed (`audit --range-hashes`) or the
    /// range could not be read.
    pub sha256: Option<String>,
    /// A GGUF tensor's dimensions in ggml's order (`ne`, contiguous axis
    /// first; `shape` is PyTorch's order, `ne` reversed); absent for other
    /// formats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ne: Option<Vec<u64>>,
}

/// One payload file's integrity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileRow {
    /// File name.
    pub file: String,
    /// Bytes read.
    pub bytes: Option<u64>,
    /// Its SHA-256, once hashed.
    pub sha256: Option<String>,
    /// What the manifest claims.
    pub expected_sha256: Option<String>,
    /// Whether they match (null until hashed, or when nothing is claimed).
    /// This compares with the bundle's own manifest, which whoever changed
    /// the file can rewrite too; `as_signed` compares with the signature.
    pub ok: Option<bool>,
    /// Whether the file is as the signature (`model.sig`) lists it: true
    /// when the signature verified (`signature.signature_valid`) and every
    /// digest it signs for this file was recomputed and matched; false
    /// when one differs, a signed range is gone, bytes no shard covers are
    /// there, or the signature does not list the file (even when no key was
    /// given to check it); null when the file is unsigned, the digests were
    /// not compared, or they matched a statement nobody checked or vouched
    /// for (no key, a wrong key, a chain no given root issued, a sigstore
    /// chain or log entry not verified).
    #[serde(default)]
    pub as_signed: Option<bool>,
}

/// Totals of one precision.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PrecisionTotals {
    /// Tensor records (aliases excluded).
    pub tensors: u64,
    /// Parameters (elements).
    pub parameters: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Resident bytes when loaded.
    pub resident_bytes: u64,
    /// bytes × 8 / parameters.
    pub bits_per_weight: Option<f64>,
}

/// Bundle totals.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Totals {
    /// Tensor records.
    pub tensors: u64,
    /// Aliases.
    pub aliases: u64,
    /// Parameters.
    pub parameters: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Resident bytes.
    pub resident_bytes: u64,
    /// bytes × 8 / parameters.
    pub bits_per_weight: Option<f64>,
    /// The same, per precision.
    pub by_precision: BTreeMap<String, PrecisionTotals>,
    /// Tensors, parameters (each tensor's own elements: a scales tensor
    /// counts its scales here, where `by_precision` counts it with its
    /// module) and bytes per stored dtype ([`stored_dtype`]).
    pub by_dtype: BTreeMap<String, DtypeTotals>,
}

/// Totals of one stored dtype.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DtypeTotals {
    /// Tensor records (aliases excluded).
    pub tensors: u64,
    /// Elements of those tensors (logical ones for packed codes).
    pub parameters: u64,
    /// Payload bytes.
    pub bytes: u64,
}

/// The dtype a tensor is stored as, as the table shows it: the file's own
/// name for it (`BF16`, `U32`, `Q4_K`), or `uB+F16` for an audio8 or
/// NVFP4 packed record, or `—` when nothing says.
pub fn stored_dtype(t: &TensorInfo) -> String {
    match (&t.source_dtype, t.precision.packed()) {
        (Some(d), _) => d.clone(),
        (None, Some(k)) => format!("u{}+F16", k.bits()),
        _ => "—".into(),
    }
}

/// Totals of a bundle's index.
pub fn totals(tensors: &[TensorInfo]) -> Totals {
    let mut t = Totals::default();
    for info in tensors {
        if info.alias_of.is_some() {
            t.aliases += 1;
            continue;
        }
        let d = t.by_dtype.entry(stored_dtype(info)).or_default();
        d.tensors += 1;
        d.parameters = d.parameters.saturating_add(info.parameters().unwrap_or(0));
        d.bytes = d.bytes.saturating_add(info.bytes.unwrap_or(0));
        let member = mlxlm::counted_as(info);
        let key = member.unwrap_or(info.precision.as_str());
        // Looked up before it is inserted: one String per precision, not per tensor.
        if !t.by_precision.contains_key(key) {
            t.by_precision.insert(key.to_string(), Default::default());
        }
        let Some(p) = t.by_precision.get_mut(key) else {
            continue;
        };
        let params = match member {
            Some(_) => 0,
            None => info.parameters().unwrap_or(0),
        };
        let bytes = info.bytes.unwrap_or(0);
        let resident = info.resident_bytes.unwrap_or(0);
        for (tensors, parameters, b, r) in [
            (
                &mut p.tensors,
                &mut p.parameters,
                &mut p.bytes,
                &mut p.resident_bytes,
            ),
            (
                &mut t.tensors,
                &mut t.parameters,
                &mut t.bytes,
                &mut t.resident_bytes,
            ),
        ] {
            *tensors += 1;
            *parameters = parameters.saturating_add(params);
            *b = b.saturating_add(bytes);
            *r = r.saturating_add(resident);
        }
    }
    let bpw = |bytes: u64, params: u64| (params > 0).then(|| bytes as f64 * 8.0 / params as f64);
    for p in t.by_precision.values_mut() {
        p.bits_per_weight = bpw(p.bytes, p.parameters);
    }
    t.bits_per_weight = bpw(t.bytes, t.parameters);
    t
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Tool name and version.
    pub tool: Tool,
    /// The bundle.
    pub bundle: BundleRef,
    /// `valid` iff no error finding; `invalid` with one; `incomplete` when
    /// the audit was cancelled; `error` when the bundle could not be opened
    /// and `unsupported` for a recognised format bundlescope cannot audit
    /// (see [`failure_report`]).
    pub verdict: &'static str,
    /// Every finding, in the order found.
    pub findings: Vec<Finding>,
    /// The tensor index with statistics.
    pub tensors: Vec<TensorRow>,
    /// Payload files.
    pub files: Vec<FileRow>,
    /// Totals.
    pub totals: Totals,
    /// Provenance facts from the manifest.
    pub provenance: Provenance,
    /// The OMS signature: null when the bundle is unsigned.
    pub signature: Option<crate::signing::SignatureReport>,
    /// Wall time of the audit.
    pub duration_s: Option<f64>,
}

/// Folds audit events into a report; the GUI keeps one as its model.
#[derive(Debug, Default)]
pub struct ReportBuilder {
    /// The bundle, once opened.
    pub bundle: Option<Arc<Bundle>>,
    /// Findings so far.
    pub findings: Vec<Finding>,
    /// Checks passed so far.
    pub passed: u64,
    /// Per-file state, indexed like the bundle's files.
    pub files: Vec<FileRow>,
    /// Per-file bytes hashed so far and throughput.
    pub progress: Vec<(u64, u64, f64)>,
    /// Per-tensor statistics, indexed like the bundle's tensors (boxed: a
    /// checkpoint of 10^5 tensors without statistics costs 800 KB here,
    /// not 66 MB).
    pub stats: Vec<Option<Box<TensorStats>>>,
    /// Per-tensor range hashes, indexed like the bundle's tensors (aliases
    /// stay `None` here; the report gives them their target's).
    pub range_hashes: Vec<Option<String>>,
    /// What the audit measured of a calibrated GPTQ-Q4 overlay's provenance.
    pub gptq: Option<Box<crate::format::gptq::ProvenanceReport>>,
    /// What the OMS signature check found (None: unsigned).
    pub signature: Option<crate::signing::SignatureReport>,
    /// Set when finished.
    pub outcome: Option<Result<Outcome, Failure>>,
    /// MLX-LM modules: for a quantized weight or its scales, its module
    /// `(weight, scales, bits)` (found once, by name, when the bundle opens).
    mlx_modules: Vec<Option<mlxlm::Module>>,
    /// mlx-nvfp4 expert sets: for a member, its set `(weight, scales,
    /// global_scale)`.
    expert_sets: Vec<Option<experts::Set>>,
}

impl ReportBuilder {
    /// Applies one event.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Opened(b) => {
                self.files = b
                    .files
                    .iter()
                    .map(|f| FileRow {
                        file: f.name.clone(),
                        bytes: None,
                        sha256: None,
                        expected_sha256: f.expected_sha256.clone(),
                        ok: None,
                        as_signed: None,
                    })
                    .collect();
                self.progress = vec![(0, 0, 0.0); b.files.len()];
                self.stats = vec![None; b.tensors.len()];
                self.range_hashes = vec![None; b.tensors.len()];
                self.mlx_modules = mlxlm::modules(b);
                self.expert_sets = experts::sets(b);
                self.bundle = Some(b.clone());
            }
            Event::Started { files, .. } => {
                for (p, f) in self.progress.iter_mut().zip(files) {
                    p.1 = f.bytes;
                }
            }
            Event::Passed { .. } => self.passed += 1,
            Event::Finding(f) => self.findings.push(f.clone()),
            Event::HashProgress {
                file,
                done,
                total,
                bytes_per_s,
            } => {
                if let Some(p) = self.progress.get_mut(*file) {
                    *p = (*done, *total, *bytes_per_s);
                }
            }
            Event::FileHashed {
                file,
                bytes,
                sha256,
                ok,
            } => {
                if let Some(row) = self.files.get_mut(*file) {
                    row.bytes = Some(*bytes);
                    row.sha256 = sha256.clone();
                    row.ok = *ok;
                }
            }
            Event::TensorDone { tensor, stats, .. } => {
                if let Some(s) = self.stats.get_mut(*tensor) {
                    *s = Some(stats.clone());
                }
                if let Some(Some(pair)) = self.mlx_modules.get(*tensor) {
                    mlxlm::merge_scales(*pair, &mut self.stats);
                }
                if let Some(Some(set)) = self.expert_sets.get(*tensor) {
                    experts::merge(*set, &mut self.stats);
                }
            }
            Event::TensorHashed { tensor, sha256 } => {
                if let Some(h) = self.range_hashes.get_mut(*tensor) {
                    *h = Some(sha256.clone());
                }
            }
            // The audit keeps these for the signed manifest.
            Event::ShardHashed { .. } => {}
            Event::Provenance(p) => self.gptq = Some(p.clone()),
            Event::Signature(s) => {
                self.signature = Some((**s).clone());
                // The comparison's findings came just before it.
                self.mark_as_signed();
            }
            Event::Finished(r) => {
                self.outcome = Some(r.clone());
                self.mark_as_signed();
            }
        }
    }

    /// Number of error findings so far.
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    /// Whether the payload file `file` is as the signature lists it (see
    /// [`FileRow::as_signed`]); `None` while no signature was checked.
    pub fn as_signed(&self, file: &str) -> Option<bool> {
        let sig = self.signature.as_ref()?;
        if lineage::not_as_signed(&self.findings, file) {
            return Some(false);
        }
        let matched = sig
            .matched_files
            .binary_search_by(|f| f.as_str().cmp(file))
            .is_ok();
        // A signature that verifies with a key or chain nobody vouched
        // for (a leaf no given root issued, a sigstore chain without a
        // trusted root) vouches for nothing either.
        let untrusted = self.findings.iter().any(|f| {
            f.severity != Severity::Info
                && [
                    checks::OMS_KEY,
                    checks::OMS_CERTIFICATE,
                    checks::OMS_SIGSTORE,
                    checks::OMS_TLOG,
                    checks::OMS_TIMESTAMP,
                ]
                .contains(&f.check)
        });
        (sig.signature_valid == Some(true) && matched && !untrusted).then_some(true)
    }

    /// Sets each file row's `as_signed` from the signature and its findings.
    fn mark_as_signed(&mut self) {
        let states: Vec<_> = self.files.iter().map(|f| self.as_signed(&f.file)).collect();
        for (row, state) in self.files.iter_mut().zip(states) {
            row.as_signed = state;
        }
    }

    /// The report as it stands (complete once `Finished` was applied).
    pub fn report(&self, path: &str) -> Option<Report> {
        let b = self.bundle.as_ref()?;
        let verdict = match &self.outcome {
            Some(Ok(o)) if o.valid => "valid",
            Some(Ok(_)) => "invalid",
            _ if self.errors() > 0 => "invalid",
            _ => "incomplete",
        };
        let tensors = b
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| TensorRow {
                info: row_info(t),
                stats: self.stats.get(i).cloned().flatten(),
                sha256: b
                    .resolve_alias(i)
                    .ok()
                    .and_then(|r| self.range_hashes.get(r).cloned().flatten()),
                ne: (b.format == crate::format::FormatKind::Gguf)
                    .then(|| t.record.get("ne"))
                    .flatten()
                    .and_then(|ne| serde_json::from_value(ne.clone()).ok()),
            })
            .collect();
        Some(Report {
            tool: Tool::default(),
            bundle: BundleRef {
                path: path.to_string(),
                format: Some(b.format.name().to_string()),
            },
            verdict,
            findings: self.findings.clone(),
            tensors,
            files: self.files.clone(),
            totals: totals(&b.tensors),
            provenance: Provenance {
                gptq: self.gptq.clone(),
                ..b.provenance.clone()
            },
            signature: self.signature.clone(),
            duration_s: match &self.outcome {
                Some(Ok(o)) => Some(o.duration.as_secs_f64()),
                _ => None,
            },
        })
    }
}

/// A tensor's index row for the report: everything but the manifest record,
/// which the report never serialises (`#[serde(skip)]`) and which costs
/// most of a row (a JSON map per tensor).
fn row_info(t: &TensorInfo) -> TensorInfo {
    TensorInfo {
        name: t.name.clone(),
        precision: t.precision.clone(),
        shape: t.shape.clone(),
        source_dtype: t.source_dtype.clone(),
        encoding: t.encoding.clone(),
        offset: t.offset,
        bytes: t.bytes,
        resident_bytes: t.resident_bytes,
        alias_of: t.alias_of.clone(),
        file: t.file,
        layout: t.layout,
        record: serde_json::Value::Null,
        quant: t.quant.clone(),
    }
}

/// The report of an audit that could not open the bundle, so a pipeline
/// reading `--json` always gets one schema. Verdict `unsupported` (with a
/// `bundle.unsupported` finding) for a format bundlescope recognises but
/// cannot audit, else `error` (with a `bundle.open` finding): no manifest,
/// a path that cannot be read, an unknown format. Tensors, files and totals
/// are empty because nothing was read.
pub fn failure_report(path: &str, error: &OpenError) -> Report {
    let (verdict, check, format) = match error {
        OpenError::Unsupported { format, .. } => (
            "unsupported",
            checks::BUNDLE_UNSUPPORTED,
            Some(format.name().to_string()),
        ),
        OpenError::Io { .. } | OpenError::NotABundle { .. } => ("error", checks::BUNDLE_OPEN, None),
    };
    Report {
        tool: Tool::default(),
        bundle: BundleRef {
            path: path.to_string(),
            format,
        },
        verdict,
        // The whole chain (the OS error of an Io failure is its source).
        findings: vec![Finding::error(check, error_chain(error))],
        tensors: Vec::new(),
        files: Vec::new(),
        totals: Totals::default(),
        provenance: Provenance::default(),
        signature: None,
        duration_s: None,
    }
}

/// The line under a totals table about aliases (tensors that name another
/// tensor's bytes), in the singular or plural.
pub fn aliases_line(n: u64) -> String {
    if n == 1 {
        "1 alias shares its target's memory".into()
    } else {
        format!("{n} aliases share their targets' memory")
    }
}

/// Human-readable size, binary units.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn one_alias_is_singular() {
        assert_eq!(aliases_line(1), "1 alias shares its target's memory");
        assert_eq!(aliases_line(3), "3 aliases share their targets' memory");
    }
}
