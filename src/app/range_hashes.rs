//! Per-tensor range hashes in the app: the audit's pass leaves them out
//! (a second SHA-256 stream costs a core), so once an audit has finished a
//! background job hashes each tensor's byte range through the payload
//! layer and the detail panel and the saved report show them.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::jobs::{Job, Poll};
use crate::audit::Event;
use crate::format::{Bundle, Payload};

/// Hashed tensors sent to the window at once.
const BATCH: usize = 64;

/// A batch of hashed tensors: index and hex SHA-256.
type Hashed = Vec<(usize, String)>;

/// The running job, and the session it hashes for.
#[derive(Default)]
pub(super) struct RangeHashes {
    running: Option<(u64, Job<Hashed>)>,
}

impl RangeHashes {
    /// Hashes every tensor of `bundle` that has no range hash yet (an
    /// overlay's pass hashed them already) for session `session`.
    pub(super) fn start(
        &mut self,
        session: u64,
        bundle: Arc<Bundle>,
        have: &[Option<String>],
        wake: Option<egui::Context>,
    ) {
        let todo: Vec<usize> = (0..bundle.tensors.len())
            .filter(|&i| {
                bundle.tensors[i].alias_of.is_none()
                    && bundle.tensors[i].range().is_some()
                    && have.get(i).is_some_and(Option::is_none)
            })
            .collect();
        if todo.is_empty() {
            self.running = None;
            return;
        }
        let job = Job::spawn("range-hashes", 4, wake, move |w| {
            let payload = Payload::open(bundle);
            let mut out = Vec::with_capacity(BATCH);
            for i in todo {
                if w.token().is_cancelled() {
                    return;
                }
                // A tensor whose bytes cannot be read keeps no hash; the
                // audit has its finding already.
                if let Ok(bytes) = payload.tensor_bytes(i) {
                    out.push((i, crate::format::hex(&Sha256::digest(bytes))));
                }
                if out.len() == BATCH && !w.send(std::mem::take(&mut out)) {
                    return;
                }
            }
            if !out.is_empty() {
                w.send(out);
            }
        });
        self.running = job.ok().map(|j| (session, j));
    }

    /// Stops hashing (another bundle opened, or this one closed).
    pub(super) fn stop(&mut self) {
        if let Some((_, j)) = self.running.take() {
            j.cancel();
        }
    }

    /// True while hashing.
    pub(super) fn running(&self) -> bool {
        self.running.is_some()
    }

    /// The hashes that arrived, as audit events for session `session`.
    pub(super) fn poll(&mut self, session: u64) -> Vec<Event> {
        let mut events = Vec::new();
        let Some((id, job)) = &self.running else {
            return events;
        };
        if *id != session {
            self.stop();
            return events;
        }
        loop {
            match job.poll() {
                Poll::Msg(batch) => events.extend(
                    batch
                        .into_iter()
                        .map(|(tensor, sha256)| Event::TensorHashed { tensor, sha256 }),
                ),
                Poll::Empty => break,
                Poll::Ended => {
                    self.running = None;
                    break;
                }
            }
        }
        events
    }
}
