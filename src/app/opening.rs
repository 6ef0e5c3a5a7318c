//! Opening a bundle: one job reads the audit cache and, on a miss, runs the
//! audit, streaming its events; a cached verdict is shown at once and, for a
//! small bundle, re-verified by a second audit job in the background. A
//! finished audit is stored in the cache by a job too: the UI thread never
//! touches the disk.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use super::cache::AuditCache;
use super::commands::Chore;
use super::jobs::{Job, Poll};
use super::{App, Session, SideTab};
use crate::audit::{self, Event, Failure};
use crate::util::CancelToken;

/// What the open job sends.
pub(super) enum AuditMsg {
    /// The events that follow come from the cache (date, passed checks).
    Cached { date: String, passed: u64 },
    /// One audit event.
    Event(Event),
}

/// The background re-verification of a cached verdict: a normal audit
/// whose events build a second session, swapped in when it finishes.
pub(super) struct Reverify {
    job: Job<AuditMsg>,
    session: Session,
}

/// The jobs of the open bundle, and one-shot disk chores.
#[derive(Default)]
pub(super) struct Opening {
    audit: Option<Job<AuditMsg>>,
    reverify: Option<Reverify>,
    stores: Vec<Job<()>>,
    pub(super) chores: Vec<Job<Chore>>,
    /// The cancel tokens of audits replaced by another open, newest last
    /// (a test checks the replaced audit was really told to stop).
    replaced: Vec<CancelToken>,
    /// Tells the audit its index is on screen (see [`start_audit`]).
    index_shown: Option<SyncSender<()>>,
    /// The index was applied in the last frame: the next one tells.
    index_drawn: bool,
}

impl Opening {
    /// Is something being opened, audited or written?
    pub(super) fn busy(&self) -> bool {
        self.audit.is_some()
            || self.reverify.is_some()
            || !self.stores.is_empty()
            || !self.chores.is_empty()
    }

    /// What the welcome screen says while a bundle is on its way.
    pub(super) fn busy_label(&self) -> Option<&'static str> {
        if self.audit.is_some() {
            Some("Opening…")
        } else if self.chores.iter().any(|c| c.name() == "demo") {
            Some("Writing the demo bundle…")
        } else {
            None
        }
    }

    /// Is a cached verdict being re-verified?
    pub(super) fn reverifying(&self) -> bool {
        self.reverify.is_some()
    }

    /// At the start of a frame: the previous frame drew the index, so the
    /// audit's pass may have the cores.
    fn tell_index_drawn(&mut self) {
        if std::mem::take(&mut self.index_drawn)
            && let Some(tx) = self.index_shown.take()
        {
            let _ = tx.try_send(());
        }
    }

    fn stop(&mut self) {
        // A waiting audit goes on at once (to see that it is cancelled).
        self.index_shown = None;
        self.index_drawn = false;
        for job in [self.audit.take(), self.reverify.take().map(|r| r.job)]
            .into_iter()
            .flatten()
        {
            job.cancel();
            self.replaced.push(job.token().clone());
        }
        // Only the last few matter (to tests); keep the list from growing.
        let excess = self.replaced.len().saturating_sub(8);
        self.replaced.drain(..excess);
    }
}

/// How long an audit waits, once its index is sent, for the window to draw
/// it before the pass begins: the pass takes every core, and the frame that
/// shows a 20,000-tensor table would share them. A hidden window draws no
/// frame, so the wait is bounded.
const INDEX_FRAME_WAIT: Duration = Duration::from_millis(250);

/// Starts the open job; the sender tells it that the index is on screen
/// (dropping it lets the audit go on at once).
fn start_audit(
    path: PathBuf,
    cache: Option<AuditCache>,
    wake: Option<egui::Context>,
    parent: Option<PathBuf>,
    trust: crate::signing::TrustPaths,
) -> Result<(Job<AuditMsg>, SyncSender<()>), String> {
    let (shown_tx, shown_rx) = std::sync::mpsc::sync_channel::<()>(1);
    // The sink is shared by the pass's threads; only this one waits.
    let shown_rx = std::sync::Mutex::new(shown_rx);
    // Bounded like the audit's own stream, for the same reason: a pass
    // outruns a busy window, and memory must not grow without limit.
    let job = Job::spawn("audit", audit::CHANNEL_CAPACITY, wake, move |w| {
        if let Some(hit) = cache.and_then(|c| c.load(&path)) {
            if !w.send(AuditMsg::Cached {
                date: super::window::local_date(&hit.date),
                passed: hit.passed,
            }) {
                return;
            }
            for e in hit.events {
                if !w.send(AuditMsg::Event(e)) {
                    return;
                }
            }
            return;
        }
        let options = audit::Options {
            parent,
            trust,
            ..audit::Options::default()
        };
        audit::run(&path, &options, w.token(), &|e| {
            let index = matches!(e, Event::Opened(_));
            // A closed channel means nobody listens: the token stops the pass.
            w.send(AuditMsg::Event(e));
            if index && let Ok(rx) = shown_rx.lock() {
                let _ = rx.recv_timeout(INDEX_FRAME_WAIT);
            }
        });
    })?;
    Ok((job, shown_tx))
}

impl App {
    /// Opens `path`: a job looks it up in the cache (when `use_cache`) and
    /// otherwise audits it; the running audit of the previous bundle is
    /// cancelled.
    pub fn open(&mut self, path: PathBuf, use_cache: bool) {
        // A parent picked in the Lineage tab stays with its bundle only.
        if self.session.as_ref().is_none_or(|s| s.path != path) {
            self.lineage.parent = None;
        }
        let parent = self.lineage.parent.clone();
        self.opening.stop();
        self.range_hashes.stop();
        self.selected = None;
        self.notice = None;
        self.side = SideTab::Summary;
        self.spot.reset();
        // The recent list gets the path once it opens as a bundle (see
        // `drain_audit`): a folder that is not one is not worth offering.
        // A comparison asked for before this open (`DIR --compare B`) waits
        // for this bundle; any other is about the bundle being replaced.
        let queued = self.compare.take_queued();
        self.compare.reset();
        if let Some(b) = queued {
            self.compare.queue(b);
        }
        // The session appears at once ("Opening…"); the job fills it.
        self.session = Some(Session::new(path.clone()));
        let cache = self.cache.clone().filter(|_| use_cache);
        let trust = self.signing.for_bundle(&path);
        match start_audit(path, cache, self.ctx.clone(), parent, trust) {
            Ok((job, shown)) => {
                self.opening.audit = Some(job);
                self.opening.index_shown = Some(shown);
            }
            Err(e) => self.set_notice(format!("could not start the audit: {e}"), true),
        }
    }

    /// Closes the open bundle: its jobs stop and the welcome screen shows.
    pub fn close(&mut self) {
        self.opening.stop();
        self.range_hashes.stop();
        self.session = None;
        self.selected = None;
        self.notice = None;
        self.side = SideTab::Summary;
        self.spot.reset();
    }

    /// The cancel tokens of audits that a later open replaced, oldest first.
    pub fn replaced_audits(&self) -> &[CancelToken] {
        &self.opening.replaced
    }

    /// Is a cached verdict being re-verified in the background?
    pub fn reverifying(&self) -> bool {
        self.opening.reverifying()
    }

    /// Shows an already opened bundle's index without auditing it (headless
    /// benchmarks, and callers that only browse).
    pub fn show_index(&mut self, bundle: Arc<crate::format::Bundle>) {
        self.opening.stop();
        let mut session = Session::new(bundle.dir.clone());
        session.apply(&Event::Opened(bundle));
        self.session = Some(session);
        self.selected = None;
    }

    /// Polls every job, spending at most `budget` on audit events.
    pub fn poll_jobs(&mut self, budget: Duration) {
        self.opening.tell_index_drawn();
        self.drain_audit(budget);
        self.drain_reverify(budget);
        self.stores_poll();
        self.poll_chores();
        self.poll_dialog();
        self.spot.poll();
        if let Some((m, e)) = self.compare.poll() {
            self.set_notice(m, e);
        }
        self.sync_lineage_compared();
        if let Some(s) = &mut self.session {
            for e in self.range_hashes.poll(s.id) {
                s.apply(&e);
            }
        }
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.model.bundle.is_some())
            && let Some(b) = self.compare.take_queued()
        {
            self.start_compare(b);
        }
        self.recent.poll();
        self.poll_chart_export();
        self.mlx_version.poll();
    }

    /// The Lineage tab's last node follows the comparison (Compare with…).
    fn sync_lineage_compared(&mut self) {
        let want = self
            .compare
            .compared()
            .map(|c| crate::report::lineage::Compared {
                path: c.path.display().to_string(),
                format: Some(c.format.clone()),
                manifest_sha256: Some(c.manifest_sha256.clone()),
                weights_sha256: c.files.first().and_then(|(_, h)| h.clone()),
                identical: c.summary.identical,
                changed: c.summary.changed,
                only_a: c.summary.only_a,
                only_b: c.summary.only_b,
            });
        // Only a change of the comparison moves the node (a test or another
        // caller may set it through `lineage_mut` in between).
        if self.lineage_from_compare != want {
            self.lineage.set_compared(want.clone());
            self.lineage_from_compare = want;
        }
    }

    fn drain_audit(&mut self, budget: Duration) {
        let deadline = Instant::now() + budget;
        let (Some(job), Some(session)) = (&self.opening.audit, &mut self.session) else {
            return;
        };
        let mut ended = false;
        let mut opened = false;
        while Instant::now() < deadline {
            match job.poll() {
                Poll::Msg(AuditMsg::Cached { date, passed }) => {
                    session.cached = Some(date);
                    session.cached_passed = Some(passed);
                }
                Poll::Msg(AuditMsg::Event(e)) => {
                    let last = matches!(e, Event::Finished(_));
                    let index = matches!(e, Event::Opened(_));
                    opened |= index;
                    session.apply(&e);
                    if last {
                        ended = true;
                        break;
                    }
                    // The index shows in this frame; the events behind it
                    // wait for the next one.
                    if index {
                        break;
                    }
                }
                Poll::Empty => break,
                Poll::Ended => {
                    ended = true;
                    break;
                }
            }
        }
        if opened {
            self.opening.index_drawn = true;
            let path = session.path.clone();
            self.remember(&path);
            // The events left behind the index come in the next frame, at once.
            if let Some(ctx) = &self.ctx {
                ctx.request_repaint();
            }
        }
        if !ended {
            return;
        }
        let Some(session) = &mut self.session else {
            return;
        };
        self.opening.audit = None;
        if let Some(p) = session.cached_passed {
            session.model.passed = p;
        }
        self.start_range_hashes();
        let Some(session) = &mut self.session else {
            return;
        };
        match &session.model.outcome {
            Some(Ok(_)) if session.cached.is_some() => self.start_reverify(),
            Some(Ok(_)) => self.store_in_cache(),
            Some(Err(Failure::Open(e))) => {
                let e = crate::format::error_chain(&**e);
                self.set_notice(e, true)
            }
            Some(Err(e @ Failure::Thread { .. })) => {
                let e = crate::format::error_chain(e);
                self.set_notice(e, true)
            }
            Some(Err(Failure::Cancelled)) => {}
            None => {
                session.model.outcome = Some(Err(Failure::Cancelled));
                self.set_notice("the audit stopped unexpectedly", true);
            }
        }
    }

    /// A cached verdict of a small enough payload is checked again: the
    /// cache key cannot see every possible tampering, the hashes can.
    fn start_reverify(&mut self) {
        let Some(s) = &self.session else { return };
        let payload: u64 = s.model.files.iter().filter_map(|f| f.bytes).sum();
        if payload > self.reverify_limit {
            return;
        }
        match start_audit(
            s.path.clone(),
            None,
            self.ctx.clone(),
            self.lineage.parent.clone(),
            self.signing.for_bundle(&s.path),
        ) {
            // Its index is not shown: no wait.
            Ok((job, _)) => {
                self.opening.reverify = Some(Reverify {
                    job,
                    session: Session::new(s.path.clone()),
                })
            }
            Err(e) => self.set_notice(format!("could not re-verify: {e}"), true),
        }
    }

    fn drain_reverify(&mut self, budget: Duration) {
        let deadline = Instant::now() + budget;
        let Some(r) = &mut self.opening.reverify else {
            return;
        };
        let mut ended = false;
        while Instant::now() < deadline {
            match r.job.poll() {
                Poll::Msg(AuditMsg::Event(e)) => {
                    let last = matches!(e, Event::Finished(_));
                    r.session.apply(&e);
                    if last {
                        ended = true;
                        break;
                    }
                }
                Poll::Msg(AuditMsg::Cached { .. }) => {}
                Poll::Empty => break,
                Poll::Ended => {
                    ended = true;
                    break;
                }
            }
        }
        if !ended {
            return;
        }
        let Some(r) = self.opening.reverify.take() else {
            return;
        };
        if matches!(r.session.model.outcome, Some(Ok(_))) {
            self.session = Some(r.session);
            self.store_in_cache();
            // The re-verified session replaces the one being hashed.
            self.start_range_hashes();
        }
    }

    /// Hashes each tensor's range of the finished audit on a job.
    fn start_range_hashes(&mut self) {
        let Some(session) = &self.session else { return };
        if matches!(session.model.outcome, Some(Ok(_)))
            && let Some(b) = session.model.bundle.clone()
        {
            self.range_hashes
                .start(session.id, b, &session.model.range_hashes, self.ctx.clone());
        }
    }

    /// Remembers the finished audit of the session, on a job.
    fn store_in_cache(&mut self) {
        let (Some(cache), Some(s)) = (&self.cache, &self.session) else {
            return;
        };
        let Some(entry) = cache.entry_of(&s.model) else {
            return;
        };
        let (cache, path) = (cache.clone(), s.path.clone());
        // Failures to write are not the user's problem: the cache is an optimisation.
        if let Ok(job) = Job::once("cache-store", None, move |_| cache.store(&path, entry)) {
            self.opening.stores.push(job);
        }
    }

    fn stores_poll(&mut self) {
        self.opening
            .stores
            .retain(|j| matches!(j.poll(), Poll::Empty));
    }

    /// Waits (up to `timeout`) until the running audit finishes, applying its
    /// events; a background re-verify is not waited for. For tests and the
    /// headless bench.
    pub fn wait_for_audit(&mut self, timeout: Duration) -> bool {
        self.wait_until(timeout, |app| {
            app.poll_chores();
            app.drain_audit(Duration::from_millis(50));
            app.opening.audit.is_none() && app.opening.chores.is_empty()
        })
    }

    /// Waits until the range hashes hashed after the audit are in. For tests.
    pub fn wait_for_range_hashes(&mut self, timeout: Duration) -> bool {
        self.wait_until(timeout, |app| {
            if let Some(s) = &mut app.session {
                for e in app.range_hashes.poll(s.id) {
                    s.apply(&e);
                }
            }
            !app.range_hashes.running()
        })
    }

    /// Runs `step` every 2 ms until it says done (true) or `timeout` passes
    /// (false).
    fn wait_until(&mut self, timeout: Duration, mut step: impl FnMut(&mut Self) -> bool) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if step(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Waits (up to `timeout`) until the background re-verify has finished
    /// and been applied. For tests.
    pub fn wait_for_reverify(&mut self, timeout: Duration) -> bool {
        self.wait_until(timeout, |app| {
            app.drain_reverify(Duration::from_millis(50));
            app.opening.reverify.is_none()
        })
    }

    /// Waits (up to `timeout`) until background writes (the cache, a saved
    /// report) are done. For tests.
    pub fn wait_for_writes(&mut self, timeout: Duration) -> bool {
        self.wait_until(timeout, |app| {
            app.stores_poll();
            app.poll_chores();
            app.opening.stores.is_empty() && app.opening.chores.is_empty()
        })
    }

    /// Waits (up to `timeout`) until the running spot check has finished
    /// and its result is in. For tests.
    pub fn wait_for_spot(&mut self, timeout: Duration) -> bool {
        self.spot.wait(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next message, waiting up to 10 s.
    fn next(job: &Job<AuditMsg>) -> Option<AuditMsg> {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            match job.poll() {
                Poll::Msg(m) => return Some(m),
                Poll::Ended => return None,
                Poll::Empty => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        None
    }

    fn is_event(m: &Option<AuditMsg>, want: fn(&Event) -> bool) -> bool {
        matches!(m, Some(AuditMsg::Event(e)) if want(e))
    }

    #[test]
    fn the_pass_waits_for_the_frame_that_draws_the_index() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("m");
        crate::sample::mlxlm::write(&dir, &Default::default(), None).unwrap();
        let start = || start_audit(dir.clone(), None, None, None, Default::default()).unwrap();

        let (job, shown) = start();
        assert!(is_event(&next(&job), |e| matches!(e, Event::Opened(_))));
        // Untold, the audit sends nothing more (it would have begun its
        // pass within a few milliseconds); a short look, so that a test
        // thread held up on a busy machine stays well inside the wait…
        std::thread::sleep(INDEX_FRAME_WAIT / 10);
        assert!(matches!(job.poll(), Poll::Empty));
        // …and once told, it goes on to the pass and its verdict.
        shown.send(()).unwrap();
        let mut rest = Vec::new();
        while let Some(m) = next(&job) {
            rest.push(m);
        }
        assert!(
            rest.iter()
                .any(|m| matches!(m, AuditMsg::Event(Event::Started { .. })))
        );
        assert!(is_event(&rest.pop(), |e| matches!(
            e,
            Event::Finished(Ok(_))
        )));

        // Nobody to tell (the sender dropped, as for a re-verification or a
        // replaced open): no wait at all.
        let (job, shown) = start();
        drop(shown);
        assert!(is_event(&next(&job), |e| matches!(e, Event::Opened(_))));
        let t = Instant::now();
        let mut started = false;
        while let Some(m) = next(&job) {
            started |= matches!(m, AuditMsg::Event(Event::Started { .. }));
            if started {
                break;
            }
        }
        assert!(
            started && t.elapsed() < INDEX_FRAME_WAIT,
            "{:?}",
            t.elapsed()
        );
    }
}
