//! MLX spot checks in the window: the selected tensor's ("Run on MLX") in
//! the detail panel, every tensor's ("Spot-check all") in the central
//! "Spot checks" tab, ranked worst first against an optional reference
//! checkpoint. Checks run as one job at a time; the panels only read what
//! it reports, and the stream panel shows its progress with a Cancel.

mod view;

use std::path::PathBuf;
use std::sync::Arc;

pub use view::{central_ui, detail_section_ui, stream_line_ui};

use super::jobs::{Job, Poll, Worker};
use crate::format::{Bundle, Precision};
use crate::spotcheck::{self, Checkpoint, DEFAULT_MAX_ROWS, Options, Report, SpotResult, XDtype};

/// What a spot-check job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// One tensor's checks.
    Tensor(usize),
    /// Every packed tensor.
    All,
    /// Opening a reference checkpoint.
    Reference,
}

enum Done {
    Tensor(usize, Result<Vec<SpotResult>, String>),
    All(Result<Report, String>),
    Reference(PathBuf, Result<Checkpoint, String>),
}

/// The running spot-check job and what it is.
struct Running {
    kind: JobKind,
    job: Job<Done>,
}

/// The spot-check state of the open bundle.
#[derive(Default)]
pub struct SpotView {
    /// dtype of `x`.
    pub dtype: XDtype,
    /// Rows of `x`.
    pub batch: usize,
    running: Option<Running>,
    /// Results of "Run on MLX", per tensor index.
    pub by_tensor: Vec<(usize, Vec<SpotResult>)>,
    /// The last "Spot-check all".
    pub all: Option<Report>,
    /// The reference checkpoint, once opened.
    pub reference: Option<Arc<Checkpoint>>,
    /// The last error (MLX missing, a bad reference…).
    pub error: Option<String>,
}

/// "Spot-check all"'s progress: checks done, in all, and the current tensor.
#[derive(Debug, Clone, Default)]
pub struct SpotProgress {
    /// Checks finished.
    pub done: usize,
    /// Checks in all.
    pub total: usize,
    /// The tensor being checked.
    pub tensor: String,
}

impl SpotView {
    /// Forgets everything about the previous bundle (and stops its job).
    pub fn reset(&mut self) {
        self.cancel();
        self.running = None;
        self.by_tensor.clear();
        self.all = None;
        self.error = None;
    }

    /// Is a job running?
    pub fn running(&self) -> bool {
        self.running.is_some()
    }

    /// What the running job does.
    pub fn kind(&self) -> Option<JobKind> {
        self.running.as_ref().map(|r| r.kind)
    }

    /// The running "Spot-check all"'s progress.
    pub fn progress(&self) -> Option<SpotProgress> {
        let r = self.running.as_ref().filter(|r| r.kind == JobKind::All)?;
        let p = r.job.progress();
        let (done, total) = p.get();
        Some(SpotProgress {
            done: usize::try_from(done).unwrap_or(usize::MAX),
            total: usize::try_from(total).unwrap_or(usize::MAX),
            tensor: p.label(),
        })
    }

    /// Asks the running job to stop after its current check.
    pub(super) fn cancel(&self) {
        if let Some(r) = &self.running {
            r.job.cancel();
        }
    }

    /// Forgets the reference and every result measured with it.
    pub(super) fn clear_reference(&mut self) {
        if self.running() {
            return;
        }
        self.reference = None;
        self.all = None;
        self.by_tensor.clear();
    }

    /// The results of "Run on MLX" for tensor `i`.
    pub fn results_of(&self, i: usize) -> Option<&[SpotResult]> {
        self.by_tensor
            .iter()
            .find(|(t, _)| *t == i)
            .map(|(_, r)| r.as_slice())
    }

    fn options(&self, max_rows: Option<usize>) -> Options {
        Options {
            batch: if self.batch == 0 { 8 } else { self.batch },
            dtype: self.dtype,
            max_rows,
            reference: self.reference.clone(),
            ..Options::default()
        }
    }

    fn spawn(
        &mut self,
        kind: JobKind,
        wake: Option<egui::Context>,
        work: impl FnOnce(&Worker<Done>) -> Done + Send + 'static,
    ) {
        if self.running.is_some() {
            return;
        }
        match Job::once_on_mlx("spotcheck", wake, work) {
            Ok(job) => {
                self.error = None;
                self.running = Some(Running { kind, job });
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// Starts the checks of tensor `index` (every row, every expert).
    pub(super) fn run_tensor(
        &mut self,
        bundle: Arc<Bundle>,
        index: usize,
        wake: Option<egui::Context>,
    ) {
        let opts = self.options(None);
        self.spawn(JobKind::Tensor(index), wake, move |_| {
            Done::Tensor(
                index,
                spotcheck::run_tensor(&bundle, index, &opts).map_err(|e| e.to_string()),
            )
        });
    }

    /// Starts "Spot-check all" (at most [`DEFAULT_MAX_ROWS`] rows a tensor).
    pub(super) fn run_all(&mut self, bundle: Arc<Bundle>, wake: Option<egui::Context>) {
        let opts = self.options(Some(DEFAULT_MAX_ROWS));
        self.spawn(JobKind::All, wake, move |w| {
            let report = spotcheck::run_all(
                &bundle,
                &opts,
                |p| w.progress(p.done as u64, p.total as u64, Some(p.tensor)),
                w.token(),
            );
            Done::All(
                report
                    .map(|mut r| {
                        r.rank_worst_first();
                        r
                    })
                    .map_err(|e| e.to_string()),
            )
        });
    }

    /// Opens the reference checkpoint at `dir` (its headers only).
    pub(super) fn open_reference(&mut self, dir: PathBuf, wake: Option<egui::Context>) {
        self.spawn(JobKind::Reference, wake, move |_| {
            let r = Checkpoint::open(&dir).map_err(|e| e.to_string());
            Done::Reference(dir, r)
        });
    }

    /// Takes the finished job's result, if any.
    pub fn poll(&mut self) {
        let Some(r) = &self.running else { return };
        let done = match r.job.poll() {
            Poll::Empty => return,
            Poll::Msg(done) => done,
            Poll::Ended => {
                self.running = None;
                self.error = Some("the spot check stopped unexpectedly".into());
                return;
            }
        };
        self.running = None;
        match done {
            Done::Tensor(i, Ok(r)) => {
                self.by_tensor.retain(|(t, _)| *t != i);
                self.by_tensor.push((i, r));
            }
            Done::All(Ok(r)) => self.all = Some(r),
            Done::Reference(_, Ok(c)) => {
                self.reference = Some(Arc::new(c));
                // Old results were measured without (or against another) reference.
                self.by_tensor.clear();
                self.all = None;
            }
            Done::Tensor(_, Err(e)) | Done::All(Err(e)) => self.error = Some(e),
            Done::Reference(dir, Err(e)) => {
                self.error = Some(format!("reference {}: {e}", dir.display()))
            }
        }
    }

    /// Blocks until the running job finishes (tests).
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        while self.running.is_some() {
            if std::time::Instant::now() > end {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            self.poll();
        }
        true
    }
}

/// Does tensor `i` (or the tensor it aliases) have a matmul to check?
pub fn checkable(b: &Bundle, i: usize) -> bool {
    let Some(t) = b.resolve_alias(i).ok().and_then(|j| b.tensors.get(j)) else {
        return false;
    };
    t.precision.packed().is_some()
        || t.precision == Precision::Nvfp4
        || matches!(t.layout, Some(crate::format::Layout::Gguf { ty, .. }) if ty.decoded() && !ty.is_dense())
        || matches!(t.precision, Precision::Mlx(..))
}
