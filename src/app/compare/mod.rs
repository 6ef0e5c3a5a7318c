//! "Compare with…": the open bundle (A) against a second one (B), through
//! the same engine as `bundlescope diff` ([`crate::diff::diff_bundles`]),
//! run as a cancellable [`Job`] with progress. The result is a table of
//! every tensor, filterable by status and sortable by weight error (table.rs);
//! a changed tensor's A and B code and scale histograms are overlaid, with
//! its code-delta histogram (charts.rs), from statistics a second small job
//! computes for the selected pair.
//!
//! Started by `Command::PickCompare` (folder picker), `Command::Compare`,
//! dropping a folder while holding Alt/Option or Shift, or the Summary
//! tab's drop zone and button.

mod charts;
mod panel;
mod table;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::{KeyboardShortcut, Modifiers};

pub(super) use panel::{compare_ui, summary_ui};
pub use table::{DiffSort, StatusFilter};

use super::jobs::{Job, Poll, Worker};
use super::{Command, Commands};
use crate::audit::scan::Scanner;
use crate::decode::stats::TensorStats;
use crate::diff::{self, DiffError, DiffReport, Status, Summary};
use crate::format::{self, Bundle, Payload};

/// Cmd/Ctrl+Shift+O: Compare with… (Cmd/Ctrl+O opens).
pub fn shortcut() -> KeyboardShortcut {
    super::shortcuts::shortcut(super::shortcuts::Action::Compare)
}

/// Does a drop compare (rather than open)? With a bundle open, when Alt
/// (Option) or Shift is held, or when the pointer is over the Summary
/// tab's drop zone.
pub fn drop_compares(bundle_open: bool, modifiers: Modifiers, over_zone: bool) -> bool {
    bundle_open && (modifiers.alt || modifiers.shift || over_zone)
}

/// What the lineage view and other panels need of the compared bundle: its
/// path and hashes (what its manifest claims; the payloads' own hashes are
/// the per-tensor range hashes in the diff report).
#[derive(Debug, Clone)]
pub struct ComparedBundle {
    /// The path as picked or dropped.
    pub path: PathBuf,
    /// Its format name.
    pub format: String,
    /// SHA-256 of its manifest.json as read.
    pub manifest_sha256: String,
    /// The source revision its manifest names.
    pub source_revision: Option<String>,
    /// Each payload file and the SHA-256 the manifest claims for it.
    pub files: Vec<(String, Option<String>)>,
    /// Tensors by state against the open bundle.
    pub summary: Summary,
}

/// A finished comparison.
pub struct CompareResult {
    /// The engine's report (A is the open bundle).
    pub report: DiffReport,
    /// Bundle A as compared.
    pub a: Arc<Bundle>,
    /// Bundle B.
    pub b: Arc<Bundle>,
    /// What others need of B.
    pub compared: ComparedBundle,
    /// Wall time of the comparison.
    pub duration: Duration,
    /// Does any row name an expert (so the table shows that column)?
    pub has_experts: bool,
}

/// A and B's statistics of one tensor, for the overlays.
#[derive(Debug, Clone, Default)]
pub struct PairStats {
    /// A's (None when A has no such tensor, or it cannot be scanned).
    pub a: Option<TensorStats>,
    /// B's.
    pub b: Option<TensorStats>,
}

type DiffMsg = Result<(DiffReport, Arc<Bundle>, Duration), String>;

/// The comparison's own state: the running job, the result, the table's
/// filter, sort and selection, the selected pair's statistics.
pub struct CompareView {
    job: Option<Job<DiffMsg>>,
    /// Bundle B, to compare once bundle A's index is in.
    queued: Option<PathBuf>,
    /// Bundle B while the job runs.
    pending: Option<PathBuf>,
    /// Bundle A the running job compares (to match the result).
    pending_a: Option<Arc<Bundle>>,
    result: Option<CompareResult>,
    error: Option<String>,
    /// Statuses shown.
    pub filter: StatusFilter,
    /// Sort of the table.
    pub sort: DiffSort,
    /// Ascending?
    pub ascending: bool,
    rows: Vec<usize>,
    rows_key: Option<(StatusFilter, DiffSort, bool)>,
    selected: Option<usize>,
    stats_job: Option<Job<(usize, PairStats)>>,
    stats: Option<(usize, PairStats)>,
    /// Where the Summary tab's drop zone was last drawn.
    pub(super) drop_zone: Option<egui::Rect>,
    /// Scroll the table to the selection on the next frame.
    scroll_to_selected: bool,
}

impl Default for CompareView {
    fn default() -> Self {
        Self {
            job: None,
            queued: None,
            pending: None,
            pending_a: None,
            result: None,
            error: None,
            filter: StatusFilter::default(),
            sort: DiffSort::Engine,
            ascending: true,
            rows: Vec::new(),
            rows_key: None,
            selected: None,
            stats_job: None,
            stats: None,
            drop_zone: None,
            scroll_to_selected: false,
        }
    }
}

impl CompareView {
    /// Is the comparison running?
    pub fn running(&self) -> bool {
        self.job.is_some()
    }

    /// Is there anything to show (queued, running, a result or an error)?
    pub fn active(&self) -> bool {
        self.queued.is_some() || self.job.is_some() || self.result.is_some() || self.error.is_some()
    }

    /// Compares with `b` once bundle A's index is in.
    pub(super) fn queue(&mut self, b: PathBuf) {
        self.queued = Some(b);
    }

    /// The comparison waiting for bundle A, if any.
    pub(super) fn take_queued(&mut self) -> Option<PathBuf> {
        self.queued.take()
    }

    /// The finished comparison.
    pub fn result(&self) -> Option<&CompareResult> {
        self.result.as_ref()
    }

    /// The compared bundle (B): path and hashes, for the lineage view.
    pub fn compared(&self) -> Option<&ComparedBundle> {
        self.result.as_ref().map(|r| &r.compared)
    }

    /// Why the last comparison failed.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Bytes hashed so far and in all, while running.
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.job.as_ref().map(|j| j.progress().get())
    }

    /// The rows the table shows, in order (indices into the report's tensors).
    pub fn rows(&self) -> &[usize] {
        &self.rows
    }

    /// The selected row (index into the report's tensors).
    pub fn selected(&self) -> Option<usize> {
        self.selected
    }

    /// The selected row's A/B statistics, once computed.
    pub fn pair_stats(&self) -> Option<&PairStats> {
        match (&self.stats, self.selected) {
            (Some((k, s)), Some(sel)) if *k == sel => Some(s),
            _ => None,
        }
    }

    /// Is the over-the-drop-zone test true for `pos`?
    pub(super) fn over_drop_zone(&self, pos: Option<egui::Pos2>) -> bool {
        matches!((self.drop_zone, pos), (Some(r), Some(p)) if r.contains(p))
    }

    /// Forgets everything (a new bundle A was opened).
    pub fn reset(&mut self) {
        let filter = self.filter;
        *self = Self {
            filter,
            ..Self::default()
        };
    }

    /// Starts comparing `a` (opened from `a_path`) with the bundle at
    /// `b`; a running comparison is cancelled.
    pub fn start(
        &mut self,
        a_path: PathBuf,
        a: Arc<Bundle>,
        b: PathBuf,
        ctx: Option<egui::Context>,
    ) -> Result<(), String> {
        let filter = self.filter;
        let drop_zone = self.drop_zone;
        *self = Self {
            filter,
            drop_zone,
            ..Self::default()
        };
        let bundle_a = a.clone();
        let b_path = b.clone();
        let job = Job::once("compare", ctx, move |w: &Worker<DiffMsg>| {
            run_diff(&a_path, &bundle_a, &b_path, w)
        })?;
        self.job = Some(job);
        self.pending = Some(b);
        self.pending_a = Some(a);
        Ok(())
    }

    /// Asks the running comparison to stop.
    pub fn cancel(&self) {
        if let Some(j) = &self.job {
            j.cancel();
        }
    }

    /// Selects row `k` and, for a tensor on both sides, starts computing
    /// both sides' statistics for the overlays.
    pub fn select(&mut self, k: Option<usize>, ctx: Option<egui::Context>) {
        self.selected = k;
        self.stats_job = None;
        let (Some(k), Some(r)) = (k, &self.result) else {
            return;
        };
        if matches!(&self.stats, Some((s, _)) if *s == k) {
            return;
        }
        let Some(row) = r.report.tensors.get(k) else {
            return;
        };
        // A per-expert row of a stacked NVFP4 tensor: the tensor's
        // statistics would mix every expert; the delta histogram is its own.
        if row.expert.is_some() || row.status == Status::Identical {
            return;
        }
        let (a, b, name) = (r.a.clone(), r.b.clone(), row.name.clone());
        if let Ok(job) = Job::once("compare-stats", ctx, move |w| {
            let a = (!w.cancelled()).then(|| tensor_stats(a, &name)).flatten();
            let b = (!w.cancelled()).then(|| tensor_stats(b, &name)).flatten();
            (k, PairStats { a, b })
        }) {
            self.stats_job = Some(job);
        }
    }

    /// Polls both jobs; returns a message for the user when the comparison
    /// ended (`true`: it is an error).
    pub fn poll(&mut self) -> Option<(String, bool)> {
        if let Some(j) = &self.stats_job {
            match j.poll() {
                Poll::Msg(s) => {
                    self.stats = Some(s);
                    self.stats_job = None;
                }
                Poll::Ended => self.stats_job = None,
                Poll::Empty => {}
            }
        }
        let job = self.job.as_ref()?;
        let msg = match job.poll() {
            Poll::Empty => return None,
            Poll::Msg(m) => m,
            Poll::Ended => Err("the comparison stopped unexpectedly".into()),
        };
        self.job = None;
        let (b_path, a) = (self.pending.take(), self.pending_a.take());
        match (msg, a, b_path) {
            (Ok((report, b, duration)), Some(a), Some(b_path)) => {
                let compared = ComparedBundle {
                    path: b_path,
                    format: b.format.name().to_string(),
                    manifest_sha256: b.provenance.manifest_sha256.clone(),
                    source_revision: b.provenance.source_revision.clone(),
                    files: b
                        .files
                        .iter()
                        .map(|f| (f.name.clone(), f.expected_sha256.clone()))
                        .collect(),
                    summary: report.summary.clone(),
                };
                let s = &report.summary;
                let note = format!(
                    "compared with {}: {} identical, {} changed, {} only in A, {} only in B",
                    compared.path.display(),
                    s.identical,
                    s.changed,
                    s.only_a,
                    s.only_b
                );
                let has_experts = report.tensors.iter().any(|t| t.expert.is_some());
                self.result = Some(CompareResult {
                    has_experts,
                    report,
                    a,
                    b,
                    compared,
                    duration,
                });
                self.rows_key = None;
                Some((note, false))
            }
            (Err(e), _, _) if e == CANCELLED => Some(("comparison cancelled".into(), false)),
            (Err(e), _, _) => {
                self.error = Some(e.clone());
                Some((e, true))
            }
            _ => None,
        }
    }

    /// Recomputes the shown rows when the filter, sort or result changed.
    pub fn refresh(&mut self) {
        let key = (self.filter, self.sort, self.ascending);
        if self.rows_key == Some(key) {
            return;
        }
        self.rows = match &self.result {
            Some(r) => table::visible_rows(&r.report, &self.filter, self.sort, self.ascending),
            None => Vec::new(),
        };
        self.rows_key = Some(key);
    }

    /// Waits (up to `timeout`) until the comparison and the selected pair's
    /// statistics are in. For tests.
    pub fn wait(&mut self, timeout: Duration) -> Option<(String, bool)> {
        let end = Instant::now() + timeout;
        let mut note = None;
        while Instant::now() < end {
            if let Some(n) = self.poll() {
                note = Some(n);
            }
            if self.job.is_none() && self.stats_job.is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        note
    }
}

const CANCELLED: &str = "cancelled";

/// The job's work: open B, compare, report progress in bytes hashed.
fn run_diff(a_path: &Path, a: &Bundle, b_path: &Path, w: &Worker<DiffMsg>) -> DiffMsg {
    let start = Instant::now();
    w.progress(0, 0, Some("opening B"));
    let b = format::open(b_path).map_err(|e| {
        format!(
            "could not open {}: {}",
            b_path.display(),
            format::error_chain(&e)
        )
    })?;
    w.progress(0, 0, Some("hashing both bundles"));
    let progress = |done, total| w.progress(done, total, None);
    let control = diff::Control {
        cancel: w.token(),
        progress: &progress,
    };
    match diff::diff_bundles((a_path, a), (b_path, &b), &control) {
        Ok(report) => Ok((report, Arc::new(b), start.elapsed())),
        Err(DiffError::Cancelled) => Err(CANCELLED.into()),
        Err(e) => Err(format!(
            "could not compare with {}: {}",
            b_path.display(),
            format::error_chain(&e)
        )),
    }
}

/// The audit scanner's statistics of tensor `name` (an alias: its target),
/// read through the payload layer.
fn tensor_stats(bundle: Arc<Bundle>, name: &str) -> Option<TensorStats> {
    let i = bundle.find(name)?;
    let i = bundle.resolve_alias(i).ok()?;
    let t = bundle.tensors.get(i)?.clone();
    let payload = Payload::open(bundle);
    let bytes = payload.tensor_bytes(i).ok()?;
    let mut s = Scanner::for_tensor(i, &t)?;
    s.feed(bytes);
    Some(s.finish().stats)
}

/// Writes the comparison as Markdown (`.md`, `.markdown`) or JSON.
pub(super) fn write_diff_report(report: &DiffReport, out: &Path) -> Result<String, String> {
    let bytes = if super::commands::is_markdown(out) {
        diff::markdown::diff_markdown(report).into_bytes()
    } else {
        serde_json::to_vec_pretty(report)
            .map_err(|e| format!("could not encode the comparison: {e}"))?
    };
    std::fs::write(out, bytes).map_err(|e| format!("could not save {}: {e}", out.display()))?;
    Ok(format!("comparison saved to {}", out.display()))
}
