//! The audit: every check and the single pass over the payload, as a stream
//! of [`Event`]s from a named worker thread. It never prints.

pub mod duplicates;
mod pass;
mod provenance;
mod ranges;
pub mod scan;
mod signature;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::decode::stats::TensorStats;
pub use crate::finding::{CheckId, Finding, Severity, checks};
use crate::format::{self, Bundle, OpenError};
pub use crate::util::CancelToken;

/// A file the audit will read.
#[derive(Debug, Clone)]
pub struct FileStart {
    /// Name as the manifest gives it.
    pub name: String,
    /// Bytes on disk (0 when it cannot be read).
    pub bytes: u64,
}

/// One step of an audit, in the order it happens.
#[derive(Debug, Clone)]
pub enum Event {
    /// The manifest was read: the tensor index is known, no payload byte is read yet.
    Opened(Arc<Bundle>),
    /// The payload pass begins.
    Started {
        /// Files to read.
        files: Vec<FileStart>,
        /// Sum of their sizes.
        total_bytes: u64,
    },
    /// A check that passed (failures arrive as [`Event::Finding`]).
    Passed {
        /// Check id.
        check: CheckId,
        /// The tensor it concerns, if any.
        tensor: Option<String>,
    },
    /// A check that did not pass.
    Finding(Finding),
    /// Hashing progress of one file.
    HashProgress {
        /// Index into the bundle's files.
        file: usize,
        /// Bytes hashed so far.
        done: u64,
        /// Bytes in the file.
        total: u64,
        /// Throughput since the file's start.
        bytes_per_s: f64,
    },
    /// A file is fully hashed.
    FileHashed {
        /// Index into the bundle's files.
        file: usize,
        /// Bytes read.
        bytes: u64,
        /// Its SHA-256 (lower-case hex); `None` when nothing needed it (a
        /// signature by shards checked every byte of the file instead).
        sha256: Option<String>,
        /// Whether it matches the manifest (None when the manifest gives none).
        ok: Option<bool>,
    },
    /// A tensor's bytes were all checked.
    TensorDone {
        /// Index into the bundle's tensors.
        tensor: usize,
        /// Resident bytes of the loaded tensor.
        resident_bytes: Option<u64>,
        /// No value finding on it.
        ok: bool,
        /// Histograms and statistics.
        stats: Box<TensorStats>,
    },
    /// A tensor's byte range was hashed (only with [`Options::range_hashes`]).
    TensorHashed {
        /// Index into the bundle's tensors.
        tensor: usize,
        /// SHA-256 of exactly its `[offset, offset + bytes)` (lower-case hex).
        sha256: String,
    },
    /// A shard of a file that a signature by shards covers was hashed in
    /// the pass (only with [`Options::shards`]; the audit keeps these for
    /// the signed manifest and does not pass them on).
    ShardHashed {
        /// Index into the bundle's files.
        file: usize,
        /// First byte of the shard.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// Its digest, in the signature's hash type.
        digest: Vec<u8>,
    },
    /// What the audit measured of a calibrated GPTQ-Q4 overlay's
    /// provenance (once, after the pass; only for that format).
    Provenance(Box<crate::format::gptq::ProvenanceReport>),
    /// What the OMS signature check found (once, after the pass; only
    /// for a signed bundle).
    Signature(Box<crate::signing::SignatureReport>),
    /// The audit ended.
    Finished(Result<Outcome, Failure>),
}

/// How a completed audit ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `true` iff no error finding.
    pub valid: bool,
    /// Error findings.
    pub errors: usize,
    /// Warning findings.
    pub warnings: usize,
    /// Wall time.
    pub duration: Duration,
}

/// Why an audit could not complete (no verdict; the CLI exits 2).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// The folder could not be opened as a bundle.
    #[error(transparent)]
    Open(Arc<OpenError>),
    /// The user cancelled it.
    #[error("cancelled")]
    Cancelled,
    /// A reader or hasher thread could not be started, so the payload was
    /// not (fully) read: a verdict would claim checks that never ran.
    #[error("could not start the audit's {thread} thread")]
    Thread {
        /// The thread's name.
        thread: String,
        /// The OS error.
        source: Arc<std::io::Error>,
    },
}

/// Options of one audit.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Bytes per read (default 8 MiB).
    pub chunk_bytes: Option<usize>,
    /// Also hash every tensor's byte range ([`Event::TensorHashed`]). Off by
    /// default: the second SHA-256 stream costs a core, and the default pass
    /// already keeps both cores of a small machine busy.
    pub range_hashes: bool,
    /// The parent bundle of a calibrated GPTQ-Q4 overlay (`--parent DIR`);
    /// without it the audit looks for a folder beside the bundle whose
    /// manifest hash is the declared parent's.
    pub parent: Option<PathBuf>,
    /// Expected SHA-256 of payload files by name (`audit --expect FILE=HEX`),
    /// for files whose format carries no checksum of its own (GGUF).
    pub expect: Vec<(String, String)>,
    /// The OMS signature file (`--signature`; default: `model.sig` in the folder).
    pub signature: Option<PathBuf>,
    /// Keys and roots to verify it with (`--key`, `--cert-root`, `--trusted-root`).
    pub trust: crate::signing::TrustPaths,
    /// Accept files in the folder the signature does not cover.
    pub ignore_unsigned: bool,
    /// Payload files (by index) whose whole-file SHA-256 the pass skips. The
    /// audit sets it itself: a signature by shards hashes every byte of
    /// those files (on every core), and nothing expects their whole digest.
    pub skip_file_sha256: Vec<usize>,
    /// The shard size and hash type of a signature by shards whose shards
    /// the pass hashes itself, for the files in `skip_file_sha256`
    /// ([`Event::ShardHashed`]): each such file is read once, its shards
    /// on every core, each hashed and scanned in the same read. The audit
    /// sets it itself.
    pub shards: Option<(u64, crate::signing::statement::HashType)>,
}

/// Where events go. Must be cheap: it is called from the pass.
pub type Sink<'a> = &'a (dyn Fn(Event) + Sync);

/// A running audit on its worker thread.
pub struct AuditHandle {
    /// The event stream (bounded).
    pub events: Receiver<Event>,
    /// Cancels it.
    pub cancel: CancelToken,
    thread: Option<JoinHandle<()>>,
}

impl AuditHandle {
    /// Cancels the audit and waits for the worker to stop.
    pub fn cancel_and_join(mut self) {
        self.cancel.cancel();
        while self.events.try_recv().is_ok() {}
        drop(std::mem::replace(&mut self.events, sync_channel(1).1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AuditHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Capacity of the event channel: enough to smooth bursts of findings,
/// small enough that a slow consumer throttles the worker.
pub const CHANNEL_CAPACITY: usize = 4096;

/// Starts an audit of `path` on a named worker thread. `wake` is called after
/// each event is queued (the GUI passes `request_repaint`).
pub fn spawn(
    path: PathBuf,
    options: Options,
    wake: Option<Box<dyn Fn() + Send + Sync>>,
) -> std::io::Result<AuditHandle> {
    let (tx, rx): (SyncSender<Event>, _) = sync_channel(CHANNEL_CAPACITY);
    let cancel = CancelToken::default();
    let worker_cancel = cancel.clone();
    let thread = std::thread::Builder::new()
        .name("bundlescope-audit".into())
        .spawn(move || {
            let sink = move |e: Event| {
                // A closed channel means nobody listens: the audit will be cancelled.
                let _ = tx.send(e);
                if let Some(w) = &wake {
                    w();
                }
            };
            run(&path, &options, &worker_cancel, &sink);
        })?;
    Ok(AuditHandle {
        events: rx,
        cancel,
        thread: Some(thread),
    })
}

/// Runs a whole audit on this thread, sending every event to `sink`.
pub fn run(path: &Path, options: &Options, cancel: &CancelToken, sink: Sink) {
    let started = Instant::now();
    let bundle = match format::open(path) {
        Ok(mut b) => {
            apply_expect(&mut b, &options.expect);
            flag_lookalike_names(&mut b);
            Arc::new(b)
        }
        Err(e) => {
            sink(Event::Finished(Err(Failure::Open(Arc::new(e)))));
            return;
        }
    };
    sink(Event::Opened(bundle.clone()));
    let counter = Counter::default();
    let emit = |e: Event| {
        if let Event::Finding(f) = &e {
            counter.add(f.severity);
        }
        sink(e);
    };
    let signed = signature::start(&bundle, path, options, &emit);
    // A signature by shards: the files it covers are not hashed whole by
    // the pass (unless something expects their digest), and its shards are
    // hashed beside the pass, on every core.
    let skip = signed
        .as_ref()
        .map(|p| p.skippable(&bundle, options))
        .unwrap_or_default();
    // Those files' shards are hashed by the pass itself, in its one read,
    // each shard while it is scanned (unless tensor ranges are hashed too:
    // that stream needs the file in order).
    let shards_in_pass = if skip.is_empty() || options.range_hashes {
        None
    } else {
        signed.as_ref().and_then(signature::Pending::shards)
    };
    let options = &Options {
        skip_file_sha256: skip,
        shards: shards_in_pass,
        ..options.clone()
    };
    // The pass's SHA-256 of each payload file and its shards' digests, for
    // the signed manifest.
    let hashed = std::sync::Mutex::new(signature::Hashed::default());
    let gather = |e: Event| {
        match &e {
            Event::FileHashed {
                file,
                sha256: Some(sha256),
                ..
            } if signed.is_some() => {
                if let Ok(mut h) = hashed.lock() {
                    h.files.insert(*file, sha256.clone());
                }
            }
            Event::ShardHashed {
                file,
                start,
                end,
                digest,
            } => {
                if let Ok(mut h) = hashed.lock() {
                    h.shards.insert((*file, *start, *end), digest.clone());
                }
                return;
            }
            _ => {}
        }
        emit(e);
    };
    let (passed, beside) = std::thread::scope(|scope| {
        let beside = signed
            .as_ref()
            .filter(|p| p.by_shards() && shards_in_pass.is_none())
            .map(|p| {
                let bundle = &bundle;
                std::thread::Builder::new()
                    .name("bundlescope-shards".into())
                    .spawn_scoped(scope, move || {
                        let compare =
                            || signature::compare(p, bundle, &Default::default(), options, cancel);
                        match yielding_pool() {
                            Some(pool) => pool.install(compare),
                            None => compare(),
                        }
                    })
            });
        let passed = audit_bundle(&bundle, options, cancel, &gather);
        let beside = match beside {
            // A thread that cannot start: the shards are hashed after the pass.
            None | Some(Err(_)) => None,
            Some(Ok(t)) => Some(t.join().ok().flatten()),
        };
        (passed, beside)
    });
    if let Err(f) = passed {
        sink(Event::Finished(Err(f)));
        return;
    }
    if let Some(p) = signed
        && !cancel.is_cancelled()
    {
        let compared = match beside {
            Some(c) => c,
            None => {
                let hashed = hashed.into_inner().unwrap_or_default();
                signature::compare(&p, &bundle, &hashed, options, cancel)
            }
        };
        signature::finish(p, compared, cancel, &emit);
    }
    if cancel.is_cancelled() {
        sink(Event::Finished(Err(Failure::Cancelled)));
        return;
    }
    let (errors, warnings) = counter.get();
    sink(Event::Finished(Ok(Outcome {
        valid: errors == 0,
        errors,
        warnings,
        duration: started.elapsed(),
    })));
}

/// A pool of one thread a core for the shard digests hashed beside the
/// pass, each thread at a lower priority than the pass's (Linux: nice 10):
/// the pass's reader, whose SHA-256 of the whole file is one stream that
/// no other core can help with, then keeps its core, and the shard
/// hashing takes the time it leaves. At equal priority the two shard
/// threads, the reader and its scanner shared two cores alike, and the
/// reader, the longest, finished last. `None` where the pool cannot start
/// (the global pool then hashes).
fn yielding_pool() -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    rayon::ThreadPoolBuilder::new()
        .num_threads(cores)
        .thread_name(|i| format!("bundlescope-shards-{i}"))
        .start_handler(|_| lower_this_threads_priority())
        .build()
        .ok()
}

/// Raises the calling thread's nice value (Linux, where it is per thread:
/// `PRIO_PROCESS` with id 0 is the calling thread); elsewhere nothing. It
/// cannot be lowered back without privileges, so only threads that end
/// with their work call it.
fn lower_this_threads_priority() {
    // SAFETY: setpriority on the calling thread only changes its
    // scheduling, and a failure leaves it as it was.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

/// Most look-alike name pairs reported for one bundle.
const MAX_LOOKALIKES: usize = 20;

/// A warning for each pair of tensor names that display alike (differing
/// only by invisible characters or look-alike letters), naming both with
/// their hidden characters escaped.
fn flag_lookalike_names(bundle: &mut Bundle) {
    use crate::util::text::{SHOWN_CHARS, lookalikes, shown};
    let pairs = lookalikes(
        bundle.tensors.iter().map(|t| t.name.as_str()),
        MAX_LOOKALIKES,
    );
    let found: Vec<crate::finding::Finding> = pairs
        .into_iter()
        .map(|(a, b)| {
            crate::finding::Finding::warning(
                crate::finding::checks::NAMES_CONFUSABLE,
                format!(
                    "tensor names \"{}\" and \"{}\" display alike; a reader may take one for the other",
                    shown(a, SHOWN_CHARS),
                    shown(b, SHOWN_CHARS)
                ),
            )
            .tensor(b.to_string())
        })
        .collect();
    bundle.findings.extend(found);
}

/// Sets each `(file name, hex)` expectation on the bundle's payload file of
/// that name (it then wins over a checksum file beside it); a name that is
/// no payload file of the bundle is a `checksums.file` finding of the audit.
pub fn apply_expect(bundle: &mut Bundle, expect: &[(String, String)]) {
    for (name, hex) in expect {
        if let Some(f) = bundle.files.iter_mut().find(|f| &f.name == name) {
            f.expected_sha256 = Some(hex.to_ascii_lowercase());
        }
    }
}

#[derive(Default)]
struct Counter {
    errors: std::sync::atomic::AtomicUsize,
    warnings: std::sync::atomic::AtomicUsize,
}

impl Counter {
    fn add(&self, s: Severity) {
        match s {
            Severity::Error => self.errors.fetch_add(1, Ordering::Relaxed),
            Severity::Warning => self.warnings.fetch_add(1, Ordering::Relaxed),
            Severity::Info => 0,
        };
    }

    fn get(&self) -> (usize, usize) {
        (
            self.errors.load(Ordering::Relaxed),
            self.warnings.load(Ordering::Relaxed),
        )
    }
}

/// The checks that only need the manifest, reported as pass or finding.
const MANIFEST_CHECKS: &[CheckId] = &[
    checks::MANIFEST_FIELD,
    checks::MANIFEST_GROUP_SIZE,
    checks::MANIFEST_TIED,
    checks::MANIFEST_WEIGHTS_FILE,
    checks::MANIFEST_TENSOR_COUNT,
    checks::PAYLOAD_UNREFERENCED,
    checks::RECORD_FIELD,
    checks::RECORD_NAME,
    checks::RECORD_BYTES,
    checks::RECORD_CONTIGUOUS,
    checks::RECORD_WITHIN,
    checks::RECORD_FULL8_V2,
    checks::RECORD_PRECISION,
    checks::DENSE_FORMAT,
    checks::DENSE_SHAPE,
    checks::DENSE_BYTES,
    checks::PACKED_GRID,
    checks::PACKED_DIMENSIONS,
    checks::PACKED_STORAGE,
    checks::ALIAS_TARGET,
    checks::ALIAS_TIED_HEAD,
];

fn audit_bundle(
    bundle: &Bundle,
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) -> Result<(), Failure> {
    for f in &bundle.findings {
        emit(Event::Finding(f.clone()));
    }
    for (name, _) in &options.expect {
        if !bundle.files.iter().any(|f| &f.name == name) {
            emit(Event::Finding(
                Finding::error(
                    checks::CHECKSUMS_FILE,
                    format!(
                        "--expect names {name}, which is not a payload file of this bundle ({})",
                        bundle
                            .files
                            .iter()
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .field(name.clone()),
            ));
        }
    }
    // A manifest that did not parse was not checked field by field.
    let parsed = !bundle
        .findings
        .iter()
        .any(|f| f.check == checks::MANIFEST_PARSE);
    for &check in MANIFEST_CHECKS {
        if parsed && !bundle.findings.iter().any(|f| f.check == check) {
            emit(Event::Passed {
                check,
                tensor: None,
            });
        }
    }
    let Some(declared) = bundle.provenance.calibrated.clone() else {
        return pass::payload(bundle, options, cancel, emit);
    };
    // A calibrated overlay: its checks need every tensor's range hash, so
    // they are always computed, and gathered here as they pass by.
    for check in [
        checks::PROVENANCE_FIELD,
        checks::PROVENANCE_PARTITION,
        checks::PROVENANCE_OVERLAY_Q4,
    ] {
        if !bundle.findings.iter().any(|f| f.check == check) {
            emit(Event::Passed {
                check,
                tensor: None,
            });
        }
    }
    let hashes = std::sync::Mutex::new(vec![None; bundle.tensors.len()]);
    let gather = |e: Event| {
        if let Event::TensorHashed { tensor, sha256 } = &e
            && let Ok(mut h) = hashes.lock()
            && let Some(slot) = h.get_mut(*tensor)
        {
            *slot = Some(sha256.clone());
        }
        emit(e);
    };
    let with_ranges = Options {
        range_hashes: true,
        ..options.clone()
    };
    pass::payload(bundle, &with_ranges, cancel, &gather)?;
    if !cancel.is_cancelled() {
        let hashes = hashes.into_inner().unwrap_or_default();
        provenance::check(
            bundle,
            &declared,
            &hashes,
            options.parent.as_deref(),
            cancel,
            emit,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The shard digests hashed beside the pass run below its priority, on
    /// one thread a core, and the threads' nice value is theirs alone: the
    /// caller's own stays as it was.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_hashing_beside_the_pass_yields_to_it() {
        // SAFETY: getpriority of the calling thread reads a value.
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let before = nice();
        let pool = super::yielding_pool().expect("the pool starts");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(pool.current_num_threads(), cores);
        let inside: Vec<i32> = pool.broadcast(|_| nice());
        assert_eq!(inside.len(), cores);
        assert!(
            inside.iter().all(|&n| n == before + 10 || n == 19),
            "{inside:?} (caller {before})"
        );
        assert_eq!(nice(), before);
    }
}
