//! The single pass: each payload byte is read once, by a reader thread that
//! hashes every piece as soon as it is read (the SHA-256 is the one serial
//! stream, so it gets a core to itself and cache-hot bytes); the same chunk
//! then feeds the per-tensor scanners on the pass's thread (and the range
//! hasher on its own), so validation hides under hashing. When every core
//! already reads a file of its own there is no core to hide the scan on:
//! one thread then reads, hashes and scans each piece while it is in its
//! cache. Those one-thread loops (and the threads of a file read by
//! shards) take their pieces from guarded mapped windows of the file
//! ([`Pieces`]) where they can, not from copies `read` makes.

use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use super::checks as c;
use super::ranges::RangeHasher;
use super::scan::Scanner;
use super::{CancelToken, CheckId, Event, Failure, FileStart, Finding, Options, Sink};
use crate::format::payload::open_regular;
use crate::format::window::Pieces;
use crate::format::{Bundle, PayloadFile, error_chain, hex, sha256_hex};
use crate::signing::folder::Hasher;
use crate::signing::statement::HashType;

/// Default bytes per chunk handed from the reader to the scanners.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Bytes per read: each piece is hashed as soon as it is read, while it is
/// still in the reading core's cache.
const READ_PIECE: usize = 256 << 10;
/// Chunks in flight between the reader and the scanners.
const BUFFERS: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ident {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
    device: u64,
}

fn ident(meta: &fs::Metadata) -> Ident {
    #[cfg(unix)]
    let (inode, device) = {
        use std::os::unix::fs::MetadataExt;
        (meta.ino(), meta.dev())
    };
    #[cfg(not(unix))]
    let (inode, device) = (0, 0);
    Ident {
        len: meta.len(),
        modified: meta.modified().ok(),
        inode,
        device,
    }
}

/// Runs the pass over every payload file of `bundle`, then the end checks.
/// A reader or hasher thread that cannot start is a [`Failure`]: the pass
/// could not read what it was meant to, so it gives no verdict.
pub fn payload(
    bundle: &Bundle,
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) -> Result<(), Failure> {
    let manifest_ident = fs::metadata(&bundle.manifest_path).ok().map(|m| ident(&m));
    let mut opened = Vec::new();
    for f in &bundle.files {
        opened.push(open_file(f, emit));
    }
    let files = bundle
        .files
        .iter()
        .zip(&opened)
        .map(|(f, o)| FileStart {
            name: f.name.clone(),
            bytes: o.as_ref().map_or(0, |(_, id)| id.len),
        })
        .collect::<Vec<_>>();
    let total_bytes = files.iter().map(|f| f.bytes).sum();
    let starts: Vec<Option<Ident>> = opened
        .iter()
        .map(|o| o.as_ref().map(|(_, id)| id.clone()))
        .collect();
    emit(Event::Started { files, total_bytes });

    let mut scanners: Vec<Vec<Scanner>> = (0..bundle.files.len()).map(|_| Vec::new()).collect();
    for (i, t) in bundle.tensors.iter().enumerate() {
        if let Some(s) = Scanner::for_tensor(i, t)
            && let Some(list) = scanners.get_mut(t.file)
        {
            list.push(s);
        }
    }
    for list in &mut scanners {
        list.sort_by_key(|s| s.start);
    }

    let (by_shards, jobs): (Vec<_>, Vec<_>) = opened
        .into_iter()
        .zip(scanners)
        .enumerate()
        .filter_map(|(i, (o, s))| o.map(|(file, id)| (i, file, id, s)))
        .partition(|(i, ..)| {
            options.shards.is_some()
                && !options.range_hashes
                && options.skip_file_sha256.contains(i)
        });
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Files a signature by shards covers: one at a time, each on every core.
    if let Some(shards) = options.shards {
        for (i, file, id, scanners) in by_shards {
            if cancel.is_cancelled() {
                break;
            }
            let info = &bundle.files[i];
            scan_file_by_shards(
                bundle, i, info, file, &id, scanners, shards, cores, options, cancel, emit,
            )?;
        }
    }
    let parallel = cores.clamp(1, jobs.len().max(1));
    // Every core has a file of its own: no core is left for the scanners.
    #[cfg(test)]
    let inline = tests::inline_override().unwrap_or(jobs.len() >= cores);
    #[cfg(not(test))]
    let inline = jobs.len() >= cores;
    let queue = Mutex::new(jobs.into_iter());
    // The first thread that could not start; the pass ends in it.
    let failed: Mutex<Option<Failure>> = Mutex::new(None);
    let fail = |f: Failure| {
        if let Ok(mut slot) = failed.lock() {
            slot.get_or_insert(f);
        }
    };
    std::thread::scope(|scope| {
        for w in 0..parallel {
            let queue = &queue;
            let fail = &fail;
            let name = format!("bundlescope-read-{w}");
            let started = spawn_named(&name, |b| {
                b.spawn_scoped(scope, move || {
                    loop {
                        let job = queue.lock().ok().and_then(|mut q| q.next());
                        let Some((i, file, id, scanners)) = job else {
                            break;
                        };
                        if cancel.is_cancelled() {
                            break;
                        }
                        let info = &bundle.files[i];
                        if let Err(f) = scan_file(
                            bundle, i, info, file, &id, scanners, inline, options, cancel, emit,
                        ) {
                            fail(f);
                            break;
                        }
                    }
                })
            });
            if let Err(f) = started {
                fail(f);
            }
        }
    });
    if let Some(f) = failed.into_inner().ok().flatten() {
        return Err(f);
    }
    if cancel.is_cancelled() {
        return Ok(());
    }
    end_checks(bundle, manifest_ident, &starts, emit);
    super::duplicates::check(bundle, emit);
    Ok(())
}

/// Starts a named thread through `spawn` (which gets the builder), turning
/// a failure to start into the audit's [`Failure::Thread`].
fn spawn_named<T>(
    name: &str,
    spawn: impl FnOnce(std::thread::Builder) -> std::io::Result<T>,
) -> Result<T, Failure> {
    #[cfg(test)]
    if tests::refuse_spawn(name) {
        return Err(Failure::Thread {
            thread: name.to_string(),
            source: Arc::new(std::io::Error::other("refused by the test")),
        });
    }
    spawn(std::thread::Builder::new().name(name.to_string())).map_err(|e| Failure::Thread {
        thread: name.to_string(),
        source: Arc::new(e),
    })
}

fn open_file(f: &PayloadFile, emit: Sink) -> Option<(File, Ident)> {
    // A symbolic link is followed, but said, and where it leads: outside
    // the bundle's folder, inside it, or nowhere (a loop, a dangling link).
    if fs::symlink_metadata(&f.path).is_ok_and(|m| m.file_type().is_symlink()) {
        let target = fs::read_link(&f.path).map_or("?".into(), |p| p.display().to_string());
        let folder = f.path.parent().unwrap_or(std::path::Path::new("."));
        let whereto = match fs::canonicalize(&f.path) {
            Err(e) => format!("which does not resolve ({e})"),
            Ok(real) if crate::util::paths::is_inside(&real, folder) => {
                "inside the bundle folder".to_string()
            }
            Ok(real) => format!(
                "(real path {}); its bytes live outside the bundle folder",
                real.display()
            ),
        };
        emit(Event::Finding(
            Finding::warning(
                c::PAYLOAD_FILE,
                format!(
                    "payload file {} is a symbolic link to {target} {whereto}",
                    f.name
                ),
            )
            .field(f.name.clone()),
        ));
    }
    // The type is checked before the open, so a FIFO or device in place of
    // a payload file is a finding at once instead of a read that never ends.
    let (file, meta) = match open_regular(&f.name, &f.path) {
        Ok(opened) => opened,
        Err(e) => {
            emit(Event::Finding(
                Finding::error(c::PAYLOAD_FILE, error_chain(&e)).field(f.name.clone()),
            ));
            return None;
        }
    };
    let id = ident(&meta);
    if let Some(expected) = f.expected_bytes {
        if id.len != expected {
            emit(Event::Finding(
                Finding::error(
                    c::PAYLOAD_LENGTH,
                    format!(
                        "payload {} is {} bytes, the manifest says {expected}",
                        f.name, id.len
                    ),
                )
                .field(f.name.clone())
                .offset(id.len.min(expected)),
            ));
        } else {
            emit(Event::Passed {
                check: c::PAYLOAD_LENGTH,
                tensor: None,
            });
        }
    }
    Some((file, id))
}

/// What the hashing reader hands back when the file is read.
/// A file's SHA-256.
type FileDigest = sha2::digest::Output<Sha256>;

struct ReadEnd {
    /// `None`: not read to the end; `Some(None)`: read to the end without
    /// hashing (nothing needed the whole file's digest).
    digest: Option<Option<FileDigest>>,
    bytes: u64,
    error: Option<String>,
}

/// Sets the flag when dropped: the scanning side says it has stopped
/// (however it left), so the reader never waits for a buffer that will not
/// come back.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The file's one reader, on its own thread: reads each chunk in
/// [`READ_PIECE`] reads and hashes every piece as soon as it is read (so
/// the SHA-256 runs on bytes still in this core's cache, as `openssl dgst`
/// does), then hands the chunk to the scanners and the range hasher. The
/// hasher is the only serial stream of the pass, so it does nothing else.
#[allow(clippy::too_many_arguments)]
fn read_and_hash(
    mut file: File,
    chunk: usize,
    to_scan: SyncSender<Arc<Vec<u8>>>,
    to_ranges: Option<SyncSender<Arc<Vec<u8>>>>,
    back: Receiver<Arc<Vec<u8>>>,
    stopped: &AtomicBool,
    hash: bool,
    cancel: &CancelToken,
) -> ReadEnd {
    let mut h = hash.then(<Sha256 as Digest>::new);
    let mut offset = 0u64;
    let mut free: Vec<Vec<u8>> = Vec::new();
    let mut made = 0;
    let fail = |offset: u64, error: String| ReadEnd {
        digest: None,
        bytes: offset,
        error: Some(error),
    };
    loop {
        if cancel.is_cancelled() || stopped.load(Ordering::Acquire) {
            return fail(offset, "stopped".into());
        }
        while let Ok(b) = back.try_recv() {
            if let Some(v) = Arc::into_inner(b) {
                free.push(v);
            }
        }
        let mut buf = match free.pop() {
            Some(b) => b,
            None if made < BUFFERS => {
                made += 1;
                vec![0u8; chunk]
            }
            // Wait for a buffer's last holder to give it back (one
            // consumer's return while the other still reads is not yet
            // free), looking up now and then in case the scanners stopped.
            None => loop {
                match back.recv_timeout(Duration::from_millis(20)) {
                    Ok(b) => {
                        if let Some(v) = Arc::into_inner(b) {
                            break v;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        if cancel.is_cancelled() || stopped.load(Ordering::Acquire) {
                            return fail(offset, "stopped".into());
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => break vec![0u8; chunk],
                }
            },
        };
        buf.resize(chunk, 0);
        let mut n = 0;
        while n < chunk {
            let to = (n + READ_PIECE).min(chunk);
            match file.read(&mut buf[n..to]) {
                Ok(0) => break,
                Ok(k) => {
                    if let Some(h) = &mut h {
                        h.update(&buf[n..n + k]);
                    }
                    n += k;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return fail(
                        offset + n as u64,
                        format!("read error at byte {}: {e}", offset + n as u64),
                    );
                }
            }
        }
        if n == 0 {
            break;
        }
        buf.truncate(n);
        offset += n as u64;
        let data = Arc::new(buf);
        if let Some(tx) = &to_ranges
            && tx.send(data.clone()).is_err()
        {
            return fail(offset, "the range hasher thread stopped".into());
        }
        if to_scan.send(data).is_err() {
            return fail(offset, "the scanning thread stopped".into());
        }
    }
    ReadEnd {
        digest: Some(h.map(<Sha256 as Digest>::finalize)),
        bytes: offset,
        error: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn scan_file(
    bundle: &Bundle,
    index: usize,
    info: &PayloadFile,
    file: File,
    id: &Ident,
    mut scanners: Vec<Scanner>,
    inline: bool,
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) -> Result<(), Failure> {
    let chunk = options.chunk_bytes.unwrap_or(CHUNK_BYTES).max(64);
    let started = Instant::now();
    let progress = |done: u64| {
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        emit(Event::HashProgress {
            file: index,
            done,
            total: id.len,
            bytes_per_s: done as f64 / secs,
        });
    };
    let mut active: Vec<Scanner> = Vec::new();
    let mut pending: std::collections::VecDeque<Scanner> = scanners.drain(..).collect();
    let mut offset = 0u64;
    let mut read_error = None;
    // A file a signature by shards covers, whose whole digest nothing
    // expects, is not hashed here: the signature's shards are, on every core.
    let hash = !options.skip_file_sha256.contains(&index);
    let digest = if inline && !options.range_hashes {
        let end = read_hash_scan(
            (&file, id.len),
            hash,
            bundle,
            &mut pending,
            &mut active,
            cancel,
            &progress,
            emit,
        );
        offset = end.bytes;
        if !cancel.is_cancelled() {
            read_error = end.error;
        }
        end.digest
    } else {
        read_beside_scan(
            bundle,
            index,
            file,
            chunk,
            (&mut pending, &mut active),
            (&mut offset, &mut read_error),
            &progress,
            options,
            cancel,
            emit,
        )?
    };
    if digest.is_none() && read_error.is_none() && !cancel.is_cancelled() {
        // A hasher that died leaves the file unhashed: say so, never a silent pass.
        read_error = Some("the hasher thread stopped before the end".into());
    }
    let unfinished: Vec<Scanner> = active.into_iter().chain(pending).collect();
    let end = (offset, read_error, digest, unfinished);
    conclude(bundle, (index, info), end, options, cancel, emit);
    Ok(())
}

/// Where a file's read stopped, why (its read error), its digest, and the
/// scanners it left unfinished.
type ReadEnded = (
    u64,
    Option<String>,
    Option<Option<FileDigest>>,
    Vec<Scanner>,
);

/// The end of a file's read: the tensors it never reached, its read error,
/// and its digest against what the folder or `--expect` says. `offset` is
/// where the read stopped; `digest` is `None` when it did not reach the
/// end, `Some(None)` when it did without hashing.
fn conclude(
    bundle: &Bundle,
    (index, info): (usize, &PayloadFile),
    (offset, read_error, digest, mut unfinished): ReadEnded,
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) {
    // Tensors the payload never reached.
    unfinished.sort_by_key(|s| s.start);
    if !cancel.is_cancelled()
        && read_error.is_none()
        && let Some(first) = unfinished.first()
    {
        let name = &bundle.tensors[first.tensor].name;
        let more = unfinished.len() - 1;
        emit(Event::Finding(
            Finding::error(
                c::PAYLOAD_LENGTH,
                format!(
                    "{} ends at byte {offset}, inside this tensor (bytes {}..{}){}; its values could not be checked",
                    info.name,
                    first.start,
                    first.end,
                    if more > 0 {
                        format!(", and {more} more tensors lie beyond the end")
                    } else {
                        String::new()
                    }
                ),
            )
            .tensor(name.clone())
            .field(info.name.clone())
            .offset(offset),
        ));
    }

    if cancel.is_cancelled() {
        return;
    }
    if let Some(msg) = read_error {
        emit(Event::Finding(
            Finding::error(c::PAYLOAD_FILE, format!("{}: {msg}", info.name))
                .field(info.name.clone())
                .offset(offset),
        ));
        return;
    }
    let Some(digest) = digest else {
        return;
    };
    let Some(digest) = digest else {
        emit(Event::FileHashed {
            file: index,
            bytes: offset,
            sha256: None,
            ok: None,
        });
        return;
    };
    let sha = hex(&digest);
    // `audit --expect FILE=HEX` wins over what the folder says.
    let expected = options
        .expect
        .iter()
        .find(|(name, _)| *name == info.name)
        .map(|(_, hex)| hex.to_ascii_lowercase())
        .or_else(|| info.expected_sha256.clone());
    let ok = expected.as_ref().map(|e| e == &sha);
    match (ok, &expected) {
        (Some(false), Some(expected)) => emit(Event::Finding(
            Finding::error(
                c::PAYLOAD_SHA256,
                format!(
                    "SHA-256 of {} is {sha}, {} says {expected}",
                    info.name,
                    if options.expect.iter().any(|(n, _)| *n == info.name) {
                        "--expect"
                    } else if bundle.format == crate::format::FormatKind::MlxLm
                        || bundle.format == crate::format::FormatKind::Safetensors
                    {
                        "the folder's hash list"
                    } else {
                        "the manifest"
                    }
                ),
            )
            .field(info.name.clone()),
        )),
        (Some(true), _) => emit(Event::Passed {
            check: c::PAYLOAD_SHA256,
            tensor: None,
        }),
        _ => {}
    }
    emit(Event::FileHashed {
        file: index,
        bytes: offset,
        sha256: Some(sha),
        ok,
    });
}

/// The reader-hasher on a thread of its own, the scanners on this one
/// (see the module's doc): the file's digest, or `None` when it could not
/// be read to the end (`read_error` then says why, unless cancelled).
#[allow(clippy::too_many_arguments)]
fn read_beside_scan(
    bundle: &Bundle,
    index: usize,
    file: File,
    chunk: usize,
    (pending, active): (&mut std::collections::VecDeque<Scanner>, &mut Vec<Scanner>),
    (offset, read_error): (&mut u64, &mut Option<String>),
    progress: &(dyn Fn(u64) + Sync),
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) -> Result<Option<Option<FileDigest>>, Failure> {
    let (to_scan, scan_rx) = sync_channel::<Arc<Vec<u8>>>(BUFFERS);
    // Each buffer comes back once per consumer (scanners, range hasher),
    // so twice BUFFERS returns can be outstanding and no consumer blocks.
    let (back_tx, back_rx) = sync_channel::<Arc<Vec<u8>>>(2 * BUFFERS);
    let (to_ranges, ranges_rx) = sync_channel::<Arc<Vec<u8>>>(BUFFERS);
    let ranges_back = back_tx.clone();
    let stopped = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The range hasher is a second SHA-256 stream over the same
        // chunks, on its own thread: only with --range-hashes, since it
        // needs a core of its own to stay hidden under the read.
        let to_ranges = if options.range_hashes {
            let mut ranges = RangeHasher::new(bundle, index);
            spawn_named(&format!("bundlescope-range-{index}"), |b| {
                b.spawn_scoped(scope, move || {
                    for buf in ranges_rx {
                        ranges.feed(buf.as_slice(), emit);
                        let _ = ranges_back.send(buf);
                    }
                })
            })?;
            Some(to_ranges)
        } else {
            drop((ranges_rx, ranges_back));
            None
        };
        let stopped = &stopped;
        let reader = spawn_named(&format!("bundlescope-hash-{index}"), |b| {
            b.spawn_scoped(scope, move || {
                let hash = !options.skip_file_sha256.contains(&index);
                read_and_hash(
                    file, chunk, to_scan, to_ranges, back_rx, stopped, hash, cancel,
                )
            })
        })?;
        let guard = StopOnDrop(stopped);
        for data in &scan_rx {
            if cancel.is_cancelled() {
                break;
            }
            feed_scanners(bundle, pending, active, &data, *offset, emit);
            *offset += data.len() as u64;
            let _ = back_tx.send(data);
            progress(*offset);
        }
        drop(guard);
        drop(scan_rx);
        let end = reader.join().ok();
        Ok(match end {
            Some(ReadEnd {
                digest: Some(d),
                bytes,
                ..
            }) if bytes == *offset => Some(d),
            Some(ReadEnd {
                error: Some(e),
                bytes,
                ..
            }) => {
                if !cancel.is_cancelled() {
                    *offset = bytes;
                    *read_error = Some(e);
                }
                None
            }
            _ => None,
        })
    })
}

/// Reads, hashes and scans on this thread, a [`READ_PIECE`] at a time, each
/// piece scanned right after it is hashed, while it is still in this core's
/// cache (handed to another core, the bytes come back from memory and both
/// the hash and the code tally stall on them).
#[allow(clippy::too_many_arguments)]
fn read_hash_scan(
    (file, len): (&File, u64),
    hash: bool,
    bundle: &Bundle,
    pending: &mut std::collections::VecDeque<Scanner>,
    active: &mut Vec<Scanner>,
    cancel: &CancelToken,
    progress: &(dyn Fn(u64) + Sync),
    emit: Sink,
) -> ReadEnd {
    let mut h = hash.then(<Sha256 as Digest>::new);
    let mut offset = 0u64;
    let mut buf = vec![0u8; READ_PIECE];
    let mut pieces = Pieces::new(file, len);
    let mut since_progress = 0usize;
    loop {
        if cancel.is_cancelled() {
            return ReadEnd {
                digest: None,
                bytes: offset,
                error: Some("stopped".into()),
            };
        }
        let data = match pieces.at(&mut buf, offset, READ_PIECE) {
            Ok([]) => break,
            Ok(data) => data,
            Err(e) => {
                return ReadEnd {
                    digest: None,
                    bytes: offset,
                    error: Some(format!("read error at byte {offset}: {e}")),
                };
            }
        };
        let n = data.len();
        if let Some(h) = &mut h {
            h.update(data);
        }
        feed_scanners(bundle, pending, active, data, offset, emit);
        offset += n as u64;
        since_progress += n;
        if since_progress >= CHUNK_BYTES {
            since_progress = 0;
            progress(offset);
        }
    }
    progress(offset);
    ReadEnd {
        digest: Some(h.map(<Sha256 as Digest>::finalize)),
        bytes: offset,
        error: None,
    }
}

/// Finished tensors of a file read by shards, passed on in the order of
/// their start (the order a front-to-back read finishes them in), so the
/// events of a file read by shards are those of a front-to-back read.
struct InOrder {
    /// Every scanner's `(start, tensor)`, sorted.
    keys: Vec<(u64, usize)>,
    /// The next key to pass on.
    next: usize,
    waiting: std::collections::BTreeMap<(u64, usize), super::scan::ScanOutcome>,
}

impl InOrder {
    fn done(&mut self, bundle: &Bundle, s: Scanner, emit: Sink) {
        let key = (s.start, s.tensor);
        self.waiting.insert(key, s.finish());
        while let Some(&key) = self.keys.get(self.next) {
            let Some(out) = self.waiting.remove(&key) else {
                break;
            };
            self.next += 1;
            emit_tensor(bundle, key.1, out, emit);
        }
    }

    /// Passes on the rest (a file that ended early leaves gaps).
    fn flush(&mut self, bundle: &Bundle, emit: Sink) {
        for ((_, index), out) in std::mem::take(&mut self.waiting) {
            emit_tensor(bundle, index, out, emit);
        }
    }
}

/// Where a shard's read stopped short, and why (`None`: the file ended).
type Short = (u64, Option<String>);

/// A file that a signature by shards covers, and whose whole-file digest
/// nothing needs: read once, its shards spread over `cores` threads, each
/// shard read, hashed (its digest an [`Event::ShardHashed`]) and scanned a
/// [`READ_PIECE`] at a time, while the piece is in that core's cache. A
/// tensor is scanned by the thread of the shard it starts in, which reads
/// on past the shard's end (without hashing) until the tensor ends.
#[allow(clippy::too_many_arguments)]
fn scan_file_by_shards(
    bundle: &Bundle,
    index: usize,
    info: &PayloadFile,
    file: File,
    id: &Ident,
    scanners: Vec<Scanner>,
    (shard_size, hash_type): (u64, HashType),
    cores: usize,
    options: &Options,
    cancel: &CancelToken,
    emit: Sink,
) -> Result<(), Failure> {
    let len = id.len;
    let shard_size = shard_size.max(1);
    let count = usize::try_from(len.div_ceil(shard_size)).unwrap_or(usize::MAX);
    let mut keys: Vec<(u64, usize)> = scanners.iter().map(|s| (s.start, s.tensor)).collect();
    keys.sort_unstable();
    // Each shard's scanners: those whose tensor starts in it. Tensors that
    // start at or past the end are never reached.
    let mut work: Vec<(u64, Vec<Scanner>)> = Vec::new();
    let mut left = Vec::new();
    let mut shard = 0u64;
    let mut iter = scanners.into_iter().peekable();
    while shard < len {
        let end = (shard + shard_size).min(len);
        let mut mine = Vec::new();
        while let Some(s) = iter.next_if(|s| s.start < end) {
            mine.push(s);
        }
        work.push((shard, mine));
        shard = end;
    }
    left.extend(iter);
    let cost = |(a, mine): &(u64, Vec<Scanner>)| {
        let hash = (len.min(a + shard_size) - a) as f64;
        let scan: f64 = mine
            .iter()
            .map(|s| (s.end - s.start) as f64 * s.cost_per_byte())
            .sum();
        hash + scan
    };
    shard_order(&mut work, cost, cores);
    let work = Mutex::new(std::collections::VecDeque::from(work));
    let left = Mutex::new(left);
    let order = Mutex::new(InOrder {
        keys,
        next: 0,
        waiting: Default::default(),
    });
    let short: Mutex<Option<Short>> = Mutex::new(None);
    let hashed = std::sync::atomic::AtomicU64::new(0);
    let started = Instant::now();
    let progress = |n: u64| {
        let done = hashed.fetch_add(n, Ordering::Relaxed) + n;
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        emit(Event::HashProgress {
            file: index,
            done,
            total: len,
            bytes_per_s: done as f64 / secs,
        });
    };
    let failed: Mutex<Option<Failure>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for w in 0..cores.clamp(1, count.max(1)) {
            let (file, work, left, order, short, progress) =
                (&file, &work, &left, &order, &short, &progress);
            let started = spawn_named(&format!("bundlescope-shard-{index}-{w}"), |b| {
                b.spawn_scoped(scope, move || {
                    let mut buf = vec![0u8; READ_PIECE];
                    loop {
                        let next = work.lock().ok().and_then(|mut q| q.pop_front());
                        let Some((a, mine)) = next else { break };
                        if cancel.is_cancelled() {
                            break;
                        }
                        let b = (a + shard_size).min(len);
                        let end = read_shard(
                            bundle,
                            (index, file, hash_type),
                            (a, b, len),
                            mine,
                            &mut buf,
                            (order, progress),
                            cancel,
                            emit,
                        );
                        if let Ok(mut l) = left.lock() {
                            l.extend(end.0);
                        }
                        if let Some(stop) = end.1
                            && let Ok(mut s) = short.lock()
                            && s.as_ref().is_none_or(|(at, _)| stop.0 < *at)
                        {
                            *s = Some(stop);
                        }
                    }
                })
            });
            if let Err(f) = started
                && let Ok(mut slot) = failed.lock()
            {
                slot.get_or_insert(f);
            }
        }
    });
    if let Some(f) = failed.into_inner().ok().flatten() {
        return Err(f);
    }
    if let Ok(mut o) = order.lock() {
        o.flush(bundle, emit);
    }
    let short = short.into_inner().ok().flatten();
    let (offset, read_error) = match short {
        Some((at, error)) => (at, error),
        None => (len, None),
    };
    let digest = if read_error.is_some() {
        None
    } else {
        Some(None)
    };
    let unfinished = left.into_inner().unwrap_or_default();
    let end = (offset, read_error, digest, unfinished);
    conclude(bundle, (index, info), end, options, cancel, emit);
    Ok(())
}

/// Puts a file's shards in the order the threads take them, given each
/// shard's cost (hashing plus the scans of the tensors that start in it): file
/// order, so that the tensors' events stream front to back as the shards
/// finish, but the last `2·cores` shards costliest first, so that the
/// threads run out of work together with a cheap shard last (in file order
/// the tail in which one thread waits on another's shard was a tenth of
/// the wall time). Sorting every shard would do the same for the tail but
/// hold every event back behind a cheap first shard taken last.
fn shard_order<T>(shards: &mut [T], cost: impl Fn(&T) -> f64, cores: usize) {
    let tail = shards.len().saturating_sub(2 * cores.max(1));
    shards[tail..].sort_by(|x, y| cost(y).total_cmp(&cost(x)));
}

/// One shard `[a, b)` of a file read by shards (see
/// [`scan_file_by_shards`]): the scanners it never finished (the file
/// ended first), and where and why it stopped short, if it did.
#[allow(clippy::too_many_arguments)]
fn read_shard(
    bundle: &Bundle,
    (index, file, hash_type): (usize, &File, HashType),
    (a, b, len): (u64, u64, u64),
    mine: Vec<Scanner>,
    buf: &mut [u8],
    (order, progress): (&Mutex<InOrder>, &(dyn Fn(u64) + Sync)),
    cancel: &CancelToken,
    emit: Sink,
) -> (Vec<Scanner>, Option<Short>) {
    let mut pending: std::collections::VecDeque<Scanner> = mine.into();
    let mut active: Vec<Scanner> = Vec::new();
    let mut hasher = Some(Hasher::new(hash_type));
    let mut pieces = Pieces::new(file, len);
    let mut pos = a;
    let mut unreported = 0u64;
    let stop = loop {
        if cancel.is_cancelled() {
            break Some((pos, Some("stopped".into())));
        }
        // The shard's own bytes, then on past its end for the tensor that
        // started in it.
        let limit = if hasher.is_some() {
            b
        } else {
            active.iter().map(|s| s.end).max().unwrap_or(pos)
        };
        if pos >= limit {
            match hasher.take() {
                Some(h) => {
                    progress(std::mem::take(&mut unreported));
                    emit(Event::ShardHashed {
                        file: index,
                        start: a,
                        end: b,
                        digest: h.finish(),
                    });
                    continue;
                }
                None => break None,
            }
        }
        let want = usize::try_from(limit - pos).map_or(buf.len(), |n| n.min(buf.len()));
        let data = match pieces.at(buf, pos, want) {
            Ok([]) => break Some((pos, None)),
            Ok(data) => data,
            Err(e) => break Some((pos, Some(format!("read error at byte {pos}: {e}")))),
        };
        let n = data.len();
        if let Some(h) = &mut hasher {
            h.update(data);
            unreported += n as u64;
            if unreported >= CHUNK_BYTES as u64 {
                progress(std::mem::take(&mut unreported));
            }
        }
        feed(&mut pending, &mut active, data, pos, |s| {
            if let Ok(mut o) = order.lock() {
                o.done(bundle, s, emit);
            }
        });
        pos += n as u64;
    };
    (active.into_iter().chain(pending).collect(), stop)
}

/// Feeds `data`, the file's bytes from offset `a`, to every scanner whose
/// range it reaches (moving those it reaches first from `pending` to
/// `active`), and finishes each scanner it completes.
fn feed_scanners(
    bundle: &Bundle,
    pending: &mut std::collections::VecDeque<Scanner>,
    active: &mut Vec<Scanner>,
    data: &[u8],
    a: u64,
    emit: Sink,
) {
    feed(pending, active, data, a, |s| {
        let index = s.tensor;
        emit_tensor(bundle, index, s.finish(), emit);
    });
}

/// [`feed_scanners`], handing each scanner it completes to `finished`.
fn feed(
    pending: &mut std::collections::VecDeque<Scanner>,
    active: &mut Vec<Scanner>,
    data: &[u8],
    a: u64,
    mut finished: impl FnMut(Scanner),
) {
    let b = a + data.len() as u64;
    while pending.front().is_some_and(|s| s.start < b) {
        if let Some(s) = pending.pop_front() {
            active.push(s);
        }
    }
    // Finished scanners leave in one sweep that keeps the others' order
    // (removing each on its own shifted the rest: a chunk holding 32,768
    // tiny tensors moved gigabytes).
    let done = active.extract_if(.., |s| {
        let from = s.start.max(a).max(s.end - s.remaining());
        let to = s.end.min(b);
        if from < to {
            s.feed(&data[(from - a) as usize..(to - a) as usize]);
        }
        s.remaining() == 0
    });
    for s in done {
        finished(s);
    }
}

/// A finished tensor's checks, findings and statistics.
fn emit_tensor(bundle: &Bundle, index: usize, out: super::scan::ScanOutcome, emit: Sink) {
    let name = &bundle.tensors[index].name;
    let ok = out.findings.is_empty();
    use crate::format::Layout;
    let value_checks: &[CheckId] = match bundle.tensors[index].layout {
        Some(Layout::Dense { .. }) => &[c::DENSE_FINITE],
        Some(Layout::Packed { .. }) => &[c::PACKED_RESERVED_CODE, c::PACKED_SCALES],
        Some(Layout::E4m3 { .. }) => &[c::E4M3_SCALES],
        Some(Layout::GlobalScale { .. }) => &[c::GLOBAL_SCALE],
        Some(Layout::Gguf { ty, .. }) if ty.is_dense() => &[c::GGUF_FINITE],
        Some(Layout::Gguf { ty, .. }) if ty.decoded() => &[c::GGUF_SCALE],
        Some(Layout::MlxCodes {
            mode: crate::format::QuantMode::Mxfp8,
            ..
        }) => &[c::MLXLM_CODES],
        Some(Layout::MlxScales { .. } | Layout::MlxParams { .. }) => &[c::MLXLM_SCALES],
        _ => &[],
    };
    for &check in value_checks {
        if !out.findings.iter().any(|f| f.check == check) {
            emit(Event::Passed {
                check,
                tensor: Some(name.clone()),
            });
        }
    }
    for f in out.findings {
        emit(Event::Finding(f));
    }
    emit(Event::TensorDone {
        tensor: index,
        resident_bytes: bundle.tensors[index].resident_bytes,
        ok,
        stats: Box::new(out.stats),
    });
}

fn end_checks(
    bundle: &Bundle,
    manifest_before: Option<Ident>,
    starts: &[Option<Ident>],
    emit: Sink,
) {
    let mut changed = Vec::new();
    let manifest_now = fs::metadata(&bundle.manifest_path).ok().map(|m| ident(&m));
    if manifest_now != manifest_before {
        changed.push(describe_change(
            "manifest.json",
            manifest_before.as_ref(),
            manifest_now.as_ref(),
        ));
    } else if bundle.manifest_bytes.is_empty()
        && bundle.files.iter().any(|f| f.path == bundle.manifest_path)
    {
        // A lone .safetensors file stands for its own manifest; its
        // identity is compared with the payload files below.
    } else {
        match read_prefix(&bundle.manifest_path, bundle.manifest_bytes.len()) {
            Ok(bytes) if sha256_hex(&bytes) == bundle.provenance.manifest_sha256 => {}
            Ok(_) => changed.push("manifest.json's content changed".into()),
            Err(e) => changed.push(format!("manifest.json can no longer be read ({e})")),
        }
    }
    for (f, before) in bundle.files.iter().zip(starts) {
        let Some(before) = before else { continue };
        let now = fs::metadata(&f.path).ok().map(|m| ident(&m));
        if now.as_ref() != Some(before) {
            changed.push(describe_change(&f.name, Some(before), now.as_ref()));
        }
    }
    if changed.is_empty() {
        emit(Event::Passed {
            check: c::BUNDLE_CHANGED,
            tensor: None,
        });
    } else {
        for what in changed {
            emit(Event::Finding(Finding::error(
                c::BUNDLE_CHANGED,
                format!("the bundle changed while it was audited: {what}; audit it again"),
            )));
        }
    }
}

/// The first `n` bytes of `path` (all of a manifest.json; a GGUF file's
/// header), through the same type-checked open as the payload.
fn read_prefix(path: &std::path::Path, n: usize) -> Result<Vec<u8>, String> {
    let name = path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let (file, _) = open_regular(&name, path).map_err(|e| error_chain(&e))?;
    let mut bytes = Vec::with_capacity(n);
    file.take(n as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

fn describe_change(name: &str, before: Option<&Ident>, now: Option<&Ident>) -> String {
    match (before, now) {
        (Some(b), Some(n)) if b.len != n.len => {
            format!("{name} went from {} to {} bytes", b.len, n.len)
        }
        (Some(b), Some(n)) if b.inode != n.inode || b.device != n.device => {
            format!("{name} was replaced by another file")
        }
        (Some(_), Some(_)) => format!("{name} was modified (mtime changed)"),
        (Some(_), None) => format!("{name} disappeared"),
        (None, Some(_)) => format!("{name} appeared"),
        (None, None) => format!("{name} cannot be inspected"),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::audit::{self, Event};

    thread_local! {
        /// Thread-name prefixes [`spawn_named`] refuses on this thread, so a
        /// test can make a thread fail to start without touching others.
        static REFUSED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn refuse_spawn(name: &str) -> bool {
        REFUSED.with(|r| r.borrow().iter().any(|p| name.starts_with(p.as_str())))
    }

    thread_local! {
        /// Forces the reader to hash inline (or on a hasher thread) on this thread.
        static INLINE: RefCell<Option<bool>> = const { RefCell::new(None) };
    }

    pub(super) fn inline_override() -> Option<bool> {
        INLINE.with(|i| *i.borrow())
    }

    /// The digests, findings and per-tensor statistics of an audit of `dir`.
    fn outcome(dir: &std::path::Path, inline: bool, chunk: usize) -> Vec<String> {
        INLINE.with(|i| *i.borrow_mut() = Some(inline));
        let events = Mutex::new(Vec::new());
        let options = Options {
            chunk_bytes: Some(chunk),
            ..Options::default()
        };
        audit::run(dir, &options, &CancelToken::default(), &|e: Event| {
            let line = match e {
                Event::FileHashed { file, sha256, .. } => {
                    format!("file {file} {}", sha256.as_deref().unwrap_or("-"))
                }
                Event::TensorDone {
                    tensor, ok, stats, ..
                } => format!("tensor {tensor} {ok} {stats:?}"),
                Event::Finding(f) => format!("finding {f:?}"),
                _ => return,
            };
            events.lock().unwrap().push(line);
        });
        INLINE.with(|i| *i.borrow_mut() = None);
        let mut lines = events.into_inner().unwrap();
        lines.sort();
        lines
    }

    #[test]
    fn hashing_inline_or_on_a_thread_gives_the_same_audit() {
        use sha2::{Digest, Sha256};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        crate::sample::write(&dir, &crate::sample::SampleOptions::default()).unwrap();
        // The payload's digest, computed here.
        let bundle = crate::format::open(&dir).unwrap();
        let want = hex(&Sha256::digest(fs::read(&bundle.files[0].path).unwrap()));
        // Odd chunk sizes cut tensors and scan pieces anywhere.
        for chunk in [4099, 1 << 20, CHUNK_BYTES] {
            let threaded = outcome(&dir, false, chunk);
            // Inline, no hasher thread may start: refused, the audit still passes.
            REFUSED.with(|r| r.borrow_mut().push("bundlescope-hash-".into()));
            let inline = outcome(&dir, true, chunk);
            REFUSED.with(|r| r.borrow_mut().clear());
            assert!(threaded.contains(&format!("file 0 {want}")), "{chunk}");
            assert!(threaded.iter().filter(|l| l.starts_with("tensor ")).count() > 2);
            assert_eq!(inline, threaded, "chunk {chunk}");
        }
    }

    /// Shard digests by `(start, end)`.
    type Digests = Vec<(u64, u64, Vec<u8>)>;

    /// What the pass reports of `path` with no whole-file digest, read
    /// front to back (`shards` `None`) or by shards of that many bytes:
    /// the tensors in the order they finished, every event as a line
    /// (sorted), and the shard digests, by start.
    fn by_shards(
        path: &std::path::Path,
        shards: Option<u64>,
    ) -> (Vec<usize>, Vec<String>, Digests) {
        let bundle = crate::format::open(path).unwrap();
        let options = Options {
            skip_file_sha256: (0..bundle.files.len()).collect(),
            shards: shards.map(|n| (n, HashType::Sha256)),
            ..Options::default()
        };
        let events = Mutex::new(Vec::new());
        payload(&bundle, &options, &CancelToken::default(), &|e: Event| {
            events.lock().unwrap().push(e)
        })
        .unwrap();
        let (mut order, mut lines, mut digests) = (Vec::new(), Vec::new(), Vec::new());
        for e in events.into_inner().unwrap() {
            lines.push(match e {
                Event::FileHashed {
                    file,
                    bytes,
                    sha256,
                    ok,
                } => format!("file {file} {bytes} {sha256:?} {ok:?}"),
                Event::TensorDone {
                    tensor, ok, stats, ..
                } => {
                    order.push(tensor);
                    format!("tensor {tensor} {ok} {stats:?}")
                }
                Event::Finding(f) => format!("finding {f:?}"),
                Event::Passed { check, tensor } => format!("passed {check:?} {tensor:?}"),
                Event::ShardHashed {
                    file,
                    start,
                    end,
                    digest,
                } => {
                    assert_eq!(file, 0);
                    digests.push((start, end, digest));
                    continue;
                }
                _ => continue,
            });
        }
        lines.sort();
        digests.sort();
        (order, lines, digests)
    }

    /// Reading a file by shards (on every core, each tensor scanned by the
    /// shard it starts in) gives the audit a front-to-back read gives, in
    /// the same order, and each shard's digest is the SHA-256 of exactly
    /// its bytes (hashed here from the file).
    #[test]
    fn reading_by_shards_gives_the_audit_a_front_to_back_read_gives() {
        use sha2::{Digest, Sha256};
        let tmp = tempfile::tempdir().unwrap();
        let audio8 = tmp.path().join("audio8");
        crate::sample::write(&audio8, &crate::sample::SampleOptions::default()).unwrap();
        let gguf = tmp.path().join("m.gguf");
        crate::sample::gguf::write(&gguf, 3).unwrap();
        // The same audio8 bundle, its payload cut inside a tensor.
        let cut = tmp.path().join("cut");
        crate::sample::write(&cut, &crate::sample::SampleOptions::default()).unwrap();
        let payload_path = crate::format::open(&cut).unwrap().files[0].path.clone();
        let whole = fs::read(&payload_path).unwrap();
        fs::write(&payload_path, &whole[..whole.len() * 2 / 3]).unwrap();
        for path in [&audio8, &gguf, &cut] {
            let bytes = fs::read(&crate::format::open(path).unwrap().files[0].path).unwrap();
            let len = bytes.len() as u64;
            let (order, lines, none) = by_shards(path, None);
            assert!(none.is_empty());
            assert!(order.len() > 2, "{}", path.display());
            // Shards that cut tensors (and blocks) anywhere; one shard.
            for size in [4099, 1 << 20, len + 1] {
                let (o, l, digests) = by_shards(path, Some(size));
                assert_eq!(o, order, "{} by {size}", path.display());
                assert_eq!(l, lines, "{} by {size}", path.display());
                let mut at = 0;
                for (a, b, d) in &digests {
                    assert_eq!((*a, *b), (at, (at + size).min(len)));
                    let want = Sha256::digest(&bytes[*a as usize..*b as usize]);
                    assert_eq!(d.as_slice(), want.as_slice(), "{a}..{b}");
                    at = *b;
                }
                assert_eq!(
                    at,
                    len,
                    "{} by {size}: the shards cover the file",
                    path.display()
                );
            }
        }
        // The cut payload is reported as such both ways.
        let (_, lines, _) = by_shards(&cut, Some(4099));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("payload.length") && l.contains("inside this tensor")),
            "{lines:?}"
        );
    }

    /// The shards are taken front to back (a cheap first shard is not left
    /// for last, holding back every tensor's event), except the last few,
    /// which go costliest first so that the run ends on a cheap one.
    #[test]
    fn shards_go_front_to_back_but_end_on_the_cheapest() {
        // Each shard's index in the file, and its cost.
        let order_of = |costs: &[f64]| {
            let mut shards: Vec<(usize, f64)> = costs.iter().copied().enumerate().collect();
            shard_order(&mut shards, |s| s.1, 2);
            shards.into_iter().map(|s| s.0).collect::<Vec<_>>()
        };
        let costs = [1.0, 5.0, 5.0, 5.0, 5.0, 5.0, 2.0, 9.0, 1.5, 4.0];
        let order = order_of(&costs);
        assert_eq!(&order[..6], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(&order[6..], &[7, 9, 6, 8]);
        let mut all = order.clone();
        all.sort_unstable();
        assert_eq!(all, (0..costs.len()).collect::<Vec<_>>());
        // Fewer shards than the tail: all of them by cost.
        assert_eq!(order_of(&[1.0, 3.0, 2.0]), [1, 2, 0]);
        assert!(order_of(&[]).is_empty());
    }

    #[test]
    fn a_reader_that_cannot_start_fails_the_audit_instead_of_passing_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        crate::sample::write(&dir, &crate::sample::SampleOptions::default()).unwrap();
        REFUSED.with(|r| r.borrow_mut().push("bundlescope-read-".into()));
        let events = Mutex::new(Vec::new());
        audit::run(
            &dir,
            &Options::default(),
            &CancelToken::default(),
            &|e: Event| events.lock().unwrap().push(e),
        );
        REFUSED.with(|r| r.borrow_mut().clear());
        let events = events.into_inner().unwrap();
        match events.last() {
            Some(Event::Finished(Err(Failure::Thread { thread, .. }))) => {
                assert!(thread.starts_with("bundlescope-read-"), "{thread}");
            }
            other => panic!("expected a thread failure, got {other:?}"),
        }
        assert!(!events.iter().any(|e| matches!(e, Event::FileHashed { .. })));
    }
}
