//! One opened bundle and its audit: the model the panels draw from.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::audit::{CheckId, Event, Failure, Severity};
use crate::report::{ReportBuilder, Totals, totals};

/// One line of the stream panel's check log.
#[derive(Debug, Clone)]
pub struct LogRow {
    /// Check id.
    pub check: CheckId,
    /// Tensor it concerns.
    pub tensor: Option<String>,
    /// `None` for a pass, else the finding's severity.
    pub severity: Option<Severity>,
    /// The finding's message.
    pub message: Option<String>,
}

/// The state of a tensor's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RowStatus {
    /// Not checked yet.
    Pending,
    /// Checked, no finding.
    Ok,
    /// Warnings only.
    Warning,
    /// At least one error.
    Error,
}

/// What is known of one payload file's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Not hashed yet.
    Pending,
    /// Hashed; no expected value to compare with.
    Hashed,
    /// Read to the end but not hashed whole: nothing expects its SHA-256
    /// (a signature by shards hashes its ranges instead).
    ReadNotHashed,
    /// Hashed in this session and equal to the expected value.
    Verified,
    /// Equal when the cached audit ran; not hashed in this session.
    VerifiedCached,
    /// Differs from the expected value.
    Mismatch,
    /// Nothing in the folder claims its digest, but the OMS signature
    /// verified and every digest it signs for the file matched.
    AsSigned,
    /// The OMS signature does not vouch for its bytes: a digest differs, a
    /// signed range is gone, or bytes are not covered (whatever the
    /// folder's own manifest says of them).
    NotAsSigned,
}

impl FileState {
    /// The words shown for it.
    pub fn text(self) -> &'static str {
        match self {
            Self::Pending => "… pending",
            Self::Hashed => "hashed",
            Self::ReadNotHashed => "read; not hashed whole (signed shards)",
            Self::Verified => "✔ verified",
            Self::VerifiedCached => "✔ verified (cached)",
            Self::Mismatch => "✖ mismatch",
            Self::AsSigned => "✔ as signed",
            Self::NotAsSigned => "✖ not as signed",
        }
    }
}

/// One opened bundle and its audit.
pub struct Session {
    /// Unique per session, so panels can tell a new one (even of the same
    /// bundle) from the one their caches were built for.
    pub id: u64,
    /// What the user opened.
    pub path: PathBuf,
    /// The report as it builds up.
    pub model: ReportBuilder,
    /// Every check as it arrived.
    pub log: Vec<LogRow>,
    /// Errors and warnings per tensor.
    pub tensor_findings: Vec<(u32, u32)>,
    /// Tensor scanned.
    pub tensor_done: Vec<bool>,
    /// Tensor index by name, made at the first finding that names a
    /// tensor (not when the index arrives: the table's first frame).
    by_name: Option<HashMap<String, usize>>,
    /// Indices into the model's findings, by the tensor name they carry,
    /// so the detail panel does not walk every finding each frame.
    findings_by_name: HashMap<String, Vec<usize>>,
    /// When the audit was taken from the cache, its date. Its file
    /// verdicts then say "verified (cached)": no byte was hashed this session.
    pub cached: Option<String>,
    /// Checks passed, as the cache remembered them.
    pub(super) cached_passed: Option<u64>,
    /// When it started.
    pub started: Instant,
    /// The bundle's precisions, sorted (the table's chips), computed once
    /// when the index arrives so no frame walks every tensor.
    pub precisions: Vec<String>,
    /// The bit widths of an MLX-LM checkpoint's quantized modules, sorted
    /// (the table's bits chips and column); empty for other formats.
    pub bits: Vec<u8>,
    /// Totals by precision (the summary), computed once with the index.
    pub totals: Option<Totals>,
    /// Bumped by every event that can change a row's status: what the
    /// panels key their caches on.
    pub generation: u64,
    /// Bumped when a tensor's statistics arrive (the quality view's key:
    /// it need not re-rank on every check that passes).
    pub stats_generation: u64,
}

impl Session {
    pub(super) fn new(path: PathBuf) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            path,
            model: ReportBuilder::default(),
            log: Vec::new(),
            tensor_findings: Vec::new(),
            tensor_done: Vec::new(),
            by_name: None,
            findings_by_name: HashMap::new(),
            cached: None,
            cached_passed: None,
            started: Instant::now(),
            precisions: Vec::new(),
            bits: Vec::new(),
            totals: None,
            generation: 0,
            stats_generation: 0,
        }
    }

    /// Applies one audit event to the session's model.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Opened(b) => {
                self.tensor_findings = vec![(0, 0); b.tensors.len()];
                self.tensor_done = vec![false; b.tensors.len()];
                self.by_name = None;
                // A handful of distinct precisions among thousands of
                // tensors: a set, not a sort of every name.
                let p: std::collections::BTreeSet<&str> =
                    b.tensors.iter().map(|t| t.precision.as_str()).collect();
                self.precisions = p.into_iter().map(str::to_string).collect();
                let mut bits: Vec<u8> = b
                    .tensors
                    .iter()
                    .filter_map(super::tensors::quant_bits)
                    .collect();
                bits.sort_unstable();
                bits.dedup();
                self.bits = bits;
                self.totals = Some(totals(&b.tensors));
            }
            Event::Passed { check, tensor } => self.log.push(LogRow {
                check: *check,
                tensor: tensor.clone(),
                severity: None,
                message: None,
            }),
            Event::Finding(f) => {
                self.note_finding(f);
                self.log.push(LogRow {
                    check: f.check,
                    tensor: f.tensor.clone(),
                    severity: Some(f.severity),
                    message: Some(f.message.clone()),
                });
            }
            Event::TensorDone { tensor, .. } => {
                if let Some(d) = self.tensor_done.get_mut(*tensor) {
                    *d = true;
                }
                self.stats_generation += 1;
            }
            _ => {}
        }
        if !matches!(event, Event::Passed { .. } | Event::HashProgress { .. }) {
            self.generation += 1;
        }
        self.model.apply(event);
    }

    /// The state text of file `i` in the summary and the stream panel:
    /// "verified" only once its bytes were hashed in this session.
    pub fn file_state(&self, i: usize) -> FileState {
        let Some(f) = self.model.files.get(i) else {
            return FileState::Pending;
        };
        let as_signed = f.as_signed;
        if as_signed == Some(false) {
            return FileState::NotAsSigned;
        }
        match (f.ok, &f.sha256) {
            (Some(true), _) if self.cached.is_some() => FileState::VerifiedCached,
            (Some(true), _) => FileState::Verified,
            (Some(false), _) => FileState::Mismatch,
            // A GGUF or a checkpoint claims no digest of its own: the
            // signature's are what it is checked against.
            (None, _) if as_signed == Some(true) => FileState::AsSigned,
            (None, Some(_)) => FileState::Hashed,
            (None, None) if f.bytes.is_some() => FileState::ReadNotHashed,
            (None, None) => FileState::Pending,
        }
    }

    fn note_finding(&mut self, f: &crate::audit::Finding) {
        if let Some(t) = &f.tensor {
            // `model.apply` pushes it next, at this index.
            let at = self.model.findings.len();
            self.findings_by_name.entry(t.clone()).or_default().push(at);
        }
        let Some(t) = &f.tensor else {
            return;
        };
        let by_name = self.by_name.get_or_insert_with(|| {
            self.model.bundle.as_ref().map_or_else(HashMap::new, |b| {
                b.tensors
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (t.name.clone(), i))
                    .collect()
            })
        });
        if let Some(i) = by_name.get(t)
            && let Some(c) = self.tensor_findings.get_mut(*i)
        {
            match f.severity {
                Severity::Error => c.0 += 1,
                Severity::Warning => c.1 += 1,
                Severity::Info => {}
            }
        }
    }

    /// The findings about the tensor named `name`, in arrival order.
    pub fn findings_of<'a>(
        &'a self,
        name: &str,
    ) -> impl Iterator<Item = &'a crate::audit::Finding> + 'a {
        self.findings_by_name
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.model.findings.get(i))
    }

    /// Is the audit still running?
    pub fn running(&self) -> bool {
        self.model.outcome.is_none()
    }

    /// Status mark of tensor `i`.
    pub fn status(&self, i: usize) -> RowStatus {
        let (errors, warnings) = self.tensor_findings.get(i).copied().unwrap_or((0, 0));
        if errors > 0 {
            RowStatus::Error
        } else if warnings > 0 {
            RowStatus::Warning
        } else if self.tensor_done.get(i).copied().unwrap_or(false) || !self.running() {
            RowStatus::Ok
        } else {
            RowStatus::Pending
        }
    }

    /// The verdict badge's text.
    pub fn verdict_text(&self) -> String {
        match &self.model.outcome {
            None => "Auditing…".into(),
            Some(Ok(o)) if o.valid => "Valid".into(),
            Some(Ok(o)) => format!(
                "Invalid ({} error{})",
                o.errors,
                if o.errors == 1 { "" } else { "s" }
            ),
            Some(Err(Failure::Cancelled)) => "Cancelled".into(),
            Some(Err(Failure::Open(_))) => "Not a bundle".into(),
            Some(Err(Failure::Thread { .. })) => "Could not run".into(),
        }
    }
}
