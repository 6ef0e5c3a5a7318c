//! The one kind of background job the app runs: the audit, spot checks,
//! file dialogs, the audit cache, the demo bundle, saving a report and the
//! NVFP4 counts all go through [`Job`]. A job is a named thread, a bounded
//! channel of messages back to the UI, a [`CancelToken`], a progress counter
//! and a wake-up (`request_repaint`), so the frame only ever polls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex};

use crate::util::CancelToken;

/// How far a job has got; the worker writes it, the UI reads it.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    label: Mutex<String>,
}

impl Progress {
    /// Steps done and steps in all.
    pub fn get(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }

    /// What the job is working on (a tensor's name, a file).
    pub fn label(&self) -> String {
        self.label.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// The worker's side of a job: sends messages, reports progress, checks
/// whether it should stop.
pub struct Worker<M> {
    tx: SyncSender<M>,
    cancel: CancelToken,
    progress: Arc<Progress>,
    wake: Option<egui::Context>,
}

impl<M> Worker<M> {
    /// Sends a message to the UI and wakes it. Blocks while the channel is
    /// full (the UI drains it every frame); `false` once nobody listens,
    /// which the worker takes as a reason to stop.
    pub fn send(&self, m: M) -> bool {
        let ok = self.tx.send(m).is_ok();
        self.wake();
        ok
    }

    /// Has the UI asked the job to stop?
    pub fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The job's cancel token, for library code that takes one.
    pub fn token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Records progress (and wakes the UI so a progress bar moves).
    pub fn progress(&self, done: u64, total: u64, label: Option<&str>) {
        self.progress.done.store(done, Ordering::Relaxed);
        self.progress.total.store(total, Ordering::Relaxed);
        if let (Some(l), Ok(mut g)) = (label, self.progress.label.lock()) {
            l.clone_into(&mut g);
        }
        self.wake();
    }

    /// Asks the UI for a frame.
    pub fn wake(&self) {
        if let Some(ctx) = &self.wake {
            ctx.request_repaint();
        }
    }
}

/// What polling a job found.
#[derive(Debug)]
pub enum Poll<M> {
    /// A message.
    Msg(M),
    /// Nothing yet; the job is still running.
    Empty,
    /// The worker has ended and every message has been read.
    Ended,
}

/// The UI's side of a background job.
pub struct Job<M> {
    name: &'static str,
    rx: Receiver<M>,
    cancel: CancelToken,
    progress: Arc<Progress>,
}

impl<M: Send + 'static> Job<M> {
    /// Starts `work` on a thread named `bundlescope-{name}`, with a channel
    /// of `capacity` messages (bounded so a fast worker cannot fill memory
    /// while the window is busy or hidden).
    pub fn spawn(
        name: &'static str,
        capacity: usize,
        wake: Option<egui::Context>,
        work: impl FnOnce(Worker<M>) + Send + 'static,
    ) -> Result<Self, String> {
        let (tx, rx) = sync_channel(capacity.max(1));
        let cancel = CancelToken::default();
        let progress = Arc::new(Progress::default());
        let worker = Worker {
            tx,
            cancel: cancel.clone(),
            progress: progress.clone(),
            wake,
        };
        std::thread::Builder::new()
            .name(format!("bundlescope-{name}"))
            .spawn(move || {
                let wake = worker.wake.clone();
                work(worker);
                // The channel is closed now: one more frame sees the end.
                if let Some(ctx) = wake {
                    ctx.request_repaint();
                }
            })
            .map_err(|e| format!("could not start the {name} job: {e}"))?;
        Ok(Self {
            name,
            rx,
            cancel,
            progress,
        })
    }

    /// A job whose work returns one result, run on the app's one MLX
    /// thread (see [`mlx_thread`]) instead of a thread of its own: for
    /// work that calls MLX (spot checks). Jobs queue there one after
    /// another.
    pub fn once_on_mlx(
        name: &'static str,
        wake: Option<egui::Context>,
        work: impl FnOnce(&Worker<M>) -> M + Send + 'static,
    ) -> Result<Self, String> {
        let (tx, rx) = sync_channel(1);
        let cancel = CancelToken::default();
        let progress = Arc::new(Progress::default());
        let worker = Worker {
            tx,
            cancel: cancel.clone(),
            progress: progress.clone(),
            wake,
        };
        let task = Box::new(move || {
            let wake = worker.wake.clone();
            let m = work(&worker);
            worker.send(m);
            drop(worker);
            if let Some(ctx) = wake {
                ctx.request_repaint();
            }
        });
        mlx_thread()?
            .lock()
            .map_err(|_| format!("the MLX thread is gone; {name} cannot run"))?
            .send(task)
            .map_err(|_| format!("the MLX thread is gone; {name} cannot run"))?;
        Ok(Self {
            name,
            rx,
            cancel,
            progress,
        })
    }

    /// A job whose work returns one result.
    pub fn once(
        name: &'static str,
        wake: Option<egui::Context>,
        work: impl FnOnce(&Worker<M>) -> M + Send + 'static,
    ) -> Result<Self, String> {
        Self::spawn(name, 1, wake, move |w| {
            let m = work(&w);
            w.send(m);
        })
    }
}

/// Work queued for the MLX thread.
type MlxTask = Box<dyn FnOnce() + Send>;

/// The one thread that runs the app's MLX work, started on first use and
/// kept for the app's life. MLX gives every thread that calls it its own
/// default stream, whose scheduler thread never ends: a new thread per spot
/// check would leave one behind each time (tests/soak.rs counts them).
fn mlx_thread() -> Result<&'static Mutex<std::sync::mpsc::Sender<MlxTask>>, String> {
    static THREAD: std::sync::OnceLock<Result<Mutex<std::sync::mpsc::Sender<MlxTask>>, String>> =
        std::sync::OnceLock::new();
    THREAD
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<MlxTask>();
            std::thread::Builder::new()
                .name("bundlescope-mlx".into())
                .spawn(move || {
                    for task in rx {
                        // A task that panics drops its worker (its job
                        // ends, as a panicking job thread's would); the
                        // thread goes on with the next.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                    }
                })
                .map(|_| Mutex::new(tx))
                .map_err(|e| format!("could not start the MLX thread: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

impl<M> Job<M> {
    /// The next message, without waiting.
    pub fn poll(&self) -> Poll<M> {
        match self.rx.try_recv() {
            Ok(m) => Poll::Msg(m),
            Err(TryRecvError::Empty) => Poll::Empty,
            Err(TryRecvError::Disconnected) => Poll::Ended,
        }
    }

    /// Asks the worker to stop; it checks between steps.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The job's cancel token (tests check a replaced job was cancelled).
    pub fn token(&self) -> &CancelToken {
        &self.cancel
    }

    /// How far the worker has got.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The job's name (its thread is `bundlescope-{name}`).
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// A job nobody holds is a job nobody listens to: dropping the handle asks
/// the worker to stop, so a closed window or a replaced job does not keep
/// a thread busy.
impl<M> Drop for Job<M> {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait<M>(job: &Job<M>) -> Vec<M> {
        let mut out = Vec::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match job.poll() {
                Poll::Msg(m) => out.push(m),
                Poll::Empty if std::time::Instant::now() < end => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Poll::Empty => panic!("job never ended"),
                Poll::Ended => return out,
            }
        }
    }

    #[test]
    fn a_job_runs_on_a_named_thread_and_ends() {
        let job = Job::once("test-name", None, |_| {
            std::thread::current().name().map(str::to_string)
        })
        .unwrap();
        assert_eq!(wait(&job), vec![Some("bundlescope-test-name".to_string())]);
    }

    #[test]
    fn cancel_reaches_the_worker_and_progress_comes_back() {
        let job = Job::spawn("test-cancel", 2, None, |w: Worker<u64>| {
            let mut n = 0;
            while !w.cancelled() {
                n += 1;
                w.progress(n, 0, Some("spinning"));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            w.send(n);
        })
        .unwrap();
        while job.progress().get().0 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(job.progress().label(), "spinning");
        job.cancel();
        assert!(job.token().is_cancelled());
        let got = wait(&job);
        assert_eq!(got.len(), 1);
        assert!(got[0] > 0);
    }

    #[test]
    fn dropping_the_handle_stops_the_worker() {
        let job = Job::spawn("test-drop", 1, None, |w: Worker<()>| {
            while !w.cancelled() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
        .unwrap();
        let token = job.token().clone();
        drop(job);
        assert!(token.is_cancelled());
    }
}
