//! Code and scale-byte counts, off the frame: one named worker with a
//! bounded queue counts one (tensor, expert) at a time, so counts never
//! compete for the disk; results are cached per (tensor, expert). The
//! bytes come from the payload layer (type-checked open, read-only map,
//! bounds-checked tensor range); [`request`] only picks an expert's slice.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use crate::app::jobs::{Job, Poll, Worker};
use crate::format::{Bundle, Layout, Payload};
use crate::util::CancelToken;

/// Bytes counted per step; the worker checks for cancellation between steps.
const CHUNK: usize = 4 << 20;
/// Counts kept before the cache starts over (each is at most 2 KiB).
const MAX_CACHED: usize = 4096;
/// Orders waiting for the worker. The panel asks for at most two counts a
/// frame, so a short queue is plenty; a full one is retried next frame.
const QUEUE: usize = 16;

/// Which count: a tensor, and one expert of it or all (`None`).
pub(super) type Key = (usize, Option<usize>);
/// 16 E2M1 code counts for a weight, 256 byte counts for scales, or why not.
pub(super) type Hist = Result<Vec<u64>, String>;

/// What a count reads: bytes `lo..hi` of one tensor's range.
struct Request {
    payload: Arc<Payload>,
    tensor: usize,
    lo: usize,
    hi: usize,
    nibbles: bool,
}

struct Order {
    key: Key,
    request: Request,
    cancel: CancelToken,
}

/// The worker and its queue.
struct Queue {
    orders: SyncSender<Order>,
    job: Job<(Key, Hist)>,
}

/// The counts of the open bundle: finished, and asked for.
#[derive(Default)]
pub(super) struct Counts {
    queue: Option<Queue>,
    /// The open bundle's payload, mapped once and shared with the worker.
    payload: Option<Arc<Payload>>,
    pending: HashMap<Key, CancelToken>,
    done: HashMap<Key, Hist>,
}

impl Counts {
    /// A finished count.
    pub(super) fn get(&self, key: &Key) -> Option<&Hist> {
        self.done.get(key)
    }

    /// Is a count asked for and not finished?
    pub(super) fn counting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Forgets every count (another bundle) and stops the pending ones.
    pub(super) fn clear(&mut self) {
        for (_, c) in self.pending.drain() {
            c.cancel();
        }
        self.done.clear();
        self.payload = None;
    }

    /// Collects finished counts, cancels unwanted ones, queues missing ones.
    pub(super) fn want(&mut self, ctx: &egui::Context, b: &Arc<Bundle>, wanted: &[Key]) {
        self.collect();
        self.pending.retain(|k, c| {
            let keep = wanted.contains(k);
            if !keep {
                c.cancel();
            }
            keep
        });
        if self.done.len() > MAX_CACHED {
            self.done.clear();
        }
        for &key in wanted {
            if self.done.contains_key(&key) || self.pending.contains_key(&key) {
                continue;
            }
            let payload = match &self.payload {
                Some(p) if std::ptr::eq(p.bundle(), &**b) => p.clone(),
                _ => self
                    .payload
                    .insert(Arc::new(Payload::open(b.clone())))
                    .clone(),
            };
            let request = match request(payload, key.0, key.1) {
                Ok(r) => r,
                Err(e) => {
                    self.done.insert(key, Err(e));
                    continue;
                }
            };
            let queue = match &self.queue {
                Some(q) => q,
                None => match start(ctx.clone()) {
                    Ok(q) => self.queue.insert(q),
                    Err(e) => {
                        self.done.insert(key, Err(e));
                        continue;
                    }
                },
            };
            let cancel = CancelToken::default();
            let order = Order {
                key,
                request,
                cancel: cancel.clone(),
            };
            match queue.orders.try_send(order) {
                Ok(()) => {
                    self.pending.insert(key, cancel);
                }
                // Asked again next frame; make sure there is one.
                Err(TrySendError::Full(_)) => ctx.request_repaint(),
                Err(TrySendError::Disconnected(_)) => {
                    self.queue = None;
                    ctx.request_repaint();
                }
            }
        }
    }

    fn collect(&mut self) {
        let Some(q) = &self.queue else { return };
        loop {
            match q.job.poll() {
                Poll::Msg((key, h)) => {
                    if self.pending.remove(&key).is_some() {
                        self.done.insert(key, h);
                    }
                }
                Poll::Empty => return,
                Poll::Ended => {
                    for (key, _) in self.pending.drain() {
                        self.done
                            .insert(key, Err("the count stopped unexpectedly".into()));
                    }
                    self.queue = None;
                    return;
                }
            }
        }
    }
}

fn start(wake: egui::Context) -> Result<Queue, String> {
    let (orders, rx) = sync_channel::<Order>(QUEUE);
    let job = Job::spawn("nvfp4-counts", QUEUE, Some(wake), move |w| work(&w, &rx))?;
    Ok(Queue { orders, job })
}

/// Counts orders one by one until the panel drops the queue.
fn work(w: &Worker<(Key, Hist)>, orders: &Receiver<Order>) {
    for o in orders {
        if w.cancelled() {
            return;
        }
        if o.cancel.is_cancelled() {
            continue;
        }
        let h = count(&o.request, &o.cancel);
        if !o.cancel.is_cancelled() && !w.send((o.key, h)) {
            return;
        }
    }
}
/// The slice of tensor `i` to count (one expert's or all), from its
/// validated layout.
fn request(payload: Arc<Payload>, i: usize, expert: Option<usize>) -> Result<Request, String> {
    let t = payload.bundle().tensor(i).map_err(|e| e.to_string())?;
    let (experts, per, nibbles) = match t.layout {
        Some(Layout::Fp4 {
            experts,
            rows,
            cols,
        }) => (experts, rows.checked_mul(cols).map(|n| n / 2), true),
        Some(Layout::E4m3 {
            experts,
            rows,
            groups,
        }) => (experts, rows.checked_mul(groups), false),
        _ => return Err(format!("{} has no stacked NVFP4 layout", t.name)),
    };
    let (start, end) = t
        .range()
        .ok_or_else(|| format!("{} has no byte range", t.name))?;
    let per = per
        .filter(|&p| experts.checked_mul(p) == Some(end - start))
        .and_then(|p| usize::try_from(p).ok());
    let Some(per) = per else {
        return Err(format!(
            "{}: its {} bytes disagree with its shape",
            t.name,
            end - start
        ));
    };
    let whole = per.saturating_mul(experts as usize);
    let (lo, hi) = match expert {
        None => (0, whole),
        Some(e) if (e as u64) < experts => (e * per, (e + 1) * per),
        Some(e) => return Err(format!("{} has no expert {e}", t.name)),
    };
    Ok(Request {
        payload,
        tensor: i,
        lo,
        hi,
        nibbles,
    })
}

/// Counts the bytes of the request's slice, or the two E2M1 nibbles of each
/// byte, a chunk at a time so a cancel is seen.
fn count(r: &Request, cancel: &CancelToken) -> Hist {
    let bytes = r
        .payload
        .tensor_bytes(r.tensor)
        .map_err(|e| e.to_string())?;
    let slice = bytes
        .get(r.lo..r.hi)
        .ok_or_else(|| format!("bytes {}..{} are outside the tensor", r.lo, r.hi))?;
    let mut hist = [[0u64; 256]; 4];
    for chunk in slice.chunks(CHUNK) {
        if cancel.is_cancelled() {
            return Err("cancelled".into());
        }
        let mut quads = chunk.chunks_exact(4);
        for q in &mut quads {
            for (h, &b) in hist.iter_mut().zip(q) {
                h[usize::from(b)] += 1;
            }
        }
        for &b in quads.remainder() {
            hist[0][usize::from(b)] += 1;
        }
    }
    let bytes: Vec<u64> = (0..256).map(|b| hist.iter().map(|h| h[b]).sum()).collect();
    if !r.nibbles {
        return Ok(bytes);
    }
    let mut codes = vec![0u64; 16];
    for (b, &n) in bytes.iter().enumerate() {
        codes[b & 15] += n;
        codes[b >> 4] += n;
    }
    Ok(codes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::nvfp4::{Nvfp4Options, write};

    /// Wants `keys` frame after frame until all are counted.
    fn count_all(c: &mut Counts, ctx: &egui::Context, b: &Arc<Bundle>, keys: &[Key]) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !keys.iter().all(|k| c.get(k).is_some()) {
            assert!(std::time::Instant::now() < end, "counts never finished");
            c.want(ctx, b, keys);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn every_expert_is_counted_by_one_worker_and_the_parts_add_up() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nv");
        write(&dir, &Nvfp4Options::default()).unwrap();
        let b = Arc::new(crate::format::open(&dir).unwrap());
        let (w, experts) = b
            .tensors
            .iter()
            .enumerate()
            .find_map(|(i, t)| match t.layout {
                Some(Layout::Fp4 { experts, .. }) => Some((i, experts as usize)),
                _ => None,
            })
            .expect("an NVFP4 weight");
        let ctx = egui::Context::default();
        let mut c = Counts::default();
        let keys: Vec<Key> = (0..experts)
            .map(|e| (w, Some(e)))
            .chain([(w, None)])
            .collect();
        count_all(&mut c, &ctx, &b, &keys);
        assert!(!c.counting());
        let whole = c.get(&(w, None)).unwrap().as_ref().unwrap().clone();
        let mut sum = vec![0u64; 16];
        for e in 0..experts {
            let h = c.get(&(w, Some(e))).unwrap().as_ref().unwrap();
            for (s, n) in sum.iter_mut().zip(h) {
                *s += n;
            }
        }
        assert_eq!(sum, whole, "the experts' codes add up to the tensor's");
        // One worker served every order, and it is still there for more.
        let q = c.queue.as_ref().expect("the worker");
        assert_eq!(q.job.name(), "nvfp4-counts");
        // A count out of range is an error, not a panic or a wait.
        count_all(&mut c, &ctx, &b, &[(w, Some(experts))]);
        assert!(c.get(&(w, Some(experts))).unwrap().is_err());
    }
}
