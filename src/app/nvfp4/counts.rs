//! Code and scale-byte counts, off the frame: one named worker with a
//! bounded queue counts one (tensor, expert) at a time, so counts never
//! compete for the disk; results are cached per (tensor, expert). The
//! tensor's byte range is resolved and bounds-checked in [`request`], the
//! one place that maps a tensor to its bytes (to be switched to the payload
//! layer when it lands).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use crate::app::jobs::{Job, Poll, Worker};
use crate::format::{Bundle, Layout};
use crate::util::CancelToken;

/// Bytes read per step of a count; the worker checks for cancellation between steps.
const CHUNK: u64 = 4 << 20;
/// Counts kept before the cache starts over (each is at most 2 KiB).
const MAX_CACHED: usize = 4096;
/// Orders waiting for the worker. The panel asks for at most two counts a
/// frame, so a short queue is plenty; a full one is retried next frame.
const QUEUE: usize = 16;

/// Which count: a tensor, and one expert of it or all (`None`).
pub(super) type Key = (usize, Option<usize>);
/// 16 E2M1 code counts for a weight, 256 byte counts for scales, or why not.
pub(super) type Hist = Result<Vec<u64>, String>;

/// What a count reads: one byte range of one file.
struct Request {
    path: PathBuf,
    start: u64,
    end: u64,
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
    }

    /// Collects finished counts, cancels unwanted ones, queues missing ones.
    pub(super) fn want(&mut self, ctx: &egui::Context, b: &Bundle, wanted: &[Key]) {
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
            let request = match request(b, key.0, key.1) {
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
/// The bytes of tensor `i` (one expert's or all), from its validated layout.
fn request(b: &Bundle, i: usize, expert: Option<usize>) -> Result<Request, String> {
    let t = b.tensors.get(i).ok_or("no such tensor")?;
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
    let per = per.filter(|&p| experts.checked_mul(p) == Some(end - start));
    let Some(per) = per else {
        return Err(format!(
            "{}: its {} bytes disagree with its shape",
            t.name,
            end - start
        ));
    };
    let (start, end) = match expert {
        None => (start, end),
        Some(e) if (e as u64) < experts => (start + e as u64 * per, start + (e as u64 + 1) * per),
        Some(e) => return Err(format!("{} has no expert {e}", t.name)),
    };
    let file = b
        .files
        .get(t.file)
        .ok_or("the tensor's file is not in the bundle")?;
    Ok(Request {
        path: file.path.clone(),
        start,
        end,
        nibbles,
    })
}

/// Reads the range with a fixed-size buffer and counts bytes, or the two
/// E2M1 nibbles of each byte.
fn count(r: &Request, cancel: &CancelToken) -> Hist {
    let shown = r.path.display();
    // Checked before opening: opening a FIFO would block until a writer came.
    let meta = std::fs::metadata(&r.path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() || meta.len() < r.end {
        return Err(format!(
            "{shown} is {} bytes long; the tensor needs bytes {}..{}",
            meta.len(),
            r.start,
            r.end
        ));
    }
    let mut f = File::open(&r.path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    f.seek(SeekFrom::Start(r.start))
        .map_err(|e| format!("cannot seek in {shown}: {e}"))?;
    let mut hist = [[0u64; 256]; 4];
    let mut left = r.end - r.start;
    let mut buf = vec![0u8; CHUNK.min(left) as usize];
    while left > 0 {
        if cancel.is_cancelled() {
            return Err("cancelled".into());
        }
        let n = CHUNK.min(left) as usize;
        let chunk = &mut buf[..n];
        f.read_exact(chunk)
            .map_err(|e| format!("reading {shown}: {e}"))?;
        let mut quads = chunk.chunks_exact(4);
        for q in &mut quads {
            for (h, &b) in hist.iter_mut().zip(q) {
                h[usize::from(b)] += 1;
            }
        }
        for &b in quads.remainder() {
            hist[0][usize::from(b)] += 1;
        }
        left -= n as u64;
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
    fn count_all(c: &mut Counts, ctx: &egui::Context, b: &Bundle, keys: &[Key]) {
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
        let b = crate::format::open(&dir).unwrap();
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
