//! Read-only windows of a payload file mapped into memory, for the audit's
//! read-hash-scan loops: the bytes are hashed and scanned where the page
//! cache holds them, with no copy into a buffer first (that copy, `read`'s,
//! was about a sixth of a sharded verification's CPU time).
//!
//! A file that another process truncates while a window of it is mapped
//! makes a read of the lost pages fault (SIGBUS), which would kill the
//! process. [`Window`] guards against that: a signal handler maps zero pages
//! over the rest of the window the fault is in, marks the window, and lets
//! the read go on; [`Pieces`] sees the mark, drops the map and reads the
//! rest with `pread`, which gives what a read gives: the file's real end
//! (the pass then says that the file changed under it) or the disk's read
//! error (a failing disk raises the same signal on a map). Faults outside
//! the faulting thread's own windows go to the handler that was there
//! before (Rust's own, or the default: the process stops).
//!
//! One difference from `read` stays: a file cut inside a page reads as
//! zeros up to that page's end without any fault, where `read` stops at
//! the cut; the pass still reports the file as changed (its size moved).
//!
//! Linux only; elsewhere [`Window::map`] gives `None` and [`Pieces`] reads.

use std::fs::File;
use std::io;

/// Bytes mapped at once: a few dozen maps for a multi-GiB file, and a
/// resident set that stays small (mapped pages count in it).
pub const WINDOW_BYTES: usize = 16 << 20;

/// A mapped, guarded window of a file (see the module's doc).
pub struct Window {
    #[cfg(target_os = "linux")]
    map: memmap2::Mmap,
    #[cfg(target_os = "linux")]
    slot: usize,
    /// File offset of the first byte.
    offset: u64,
}

impl Window {
    /// Maps `len` bytes of `file` from `offset`, or `None` when it cannot
    /// (no guard, no free slot, the map refused, another system).
    #[cfg(target_os = "linux")]
    pub fn map(file: &File, offset: u64, len: usize) -> Option<Self> {
        if len == 0 || !guard::install() {
            return None;
        }
        // SAFETY: the map is read-only and bundlescope never writes to a
        // bundle. A file truncated while it is mapped is what the guard
        // handles (the lost pages read as zeros, the window is marked);
        // bytes another process rewrites in place while they are read give
        // a wrong hash or statistics, as they would through `read`, and the
        // pass reports the file as changed (its time or size moved).
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map(file)
        }
        .ok()?;
        let page = guard::page_size();
        let start = (map.as_ptr() as usize) & !(page - 1);
        let end = (map.as_ptr() as usize + len).div_ceil(page) * page;
        // The pages are faulted in as they are read (populating the whole
        // window up front with MADV_POPULATE_READ measured slower).
        let slot = guard::claim(start, end)?;
        Some(Self { map, slot, offset })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn map(_file: &File, _offset: u64, _len: usize) -> Option<Self> {
        None
    }

    /// The window's bytes.
    pub fn bytes(&self) -> &[u8] {
        #[cfg(target_os = "linux")]
        return &self.map;
        #[cfg(not(target_os = "linux"))]
        return &[];
    }

    /// Does `[pos, pos + len)` (file offsets) lie inside the window?
    fn covers(&self, pos: u64, len: usize) -> bool {
        pos >= self.offset && pos + len as u64 <= self.offset + self.bytes().len() as u64
    }

    /// Touches a byte of each page of `range` (offsets into the window), so
    /// that a page lost to a truncation faults now, before the bytes are
    /// used; then says whether any page of the window was lost.
    fn touch(&self, range: std::ops::Range<usize>) -> bool {
        #[cfg(target_os = "linux")]
        {
            let page = guard::page_size();
            let bytes = &self.map[range];
            let mut i = 0;
            while i < bytes.len() {
                // A volatile read, so the touch is not optimised away.
                // SAFETY: `i` is inside `bytes`.
                unsafe { std::ptr::read_volatile(bytes.as_ptr().add(i)) };
                i += page;
            }
            if let Some(&last) = bytes.last() {
                std::hint::black_box(last);
            }
            !guard::lost(self.slot)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = range;
            true
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // The slot goes before the map does (the map is dropped after this
        // body): no fault can be in this window once its owner drops it.
        #[cfg(target_os = "linux")]
        guard::release(self.slot);
    }
}

/// The pieces a read loop hashes and scans: slices of mapped windows where
/// that works, positional reads into the caller's buffer where it does not.
pub struct Pieces<'f> {
    file: &'f File,
    /// The file's length when it was opened: nothing past it is mapped.
    len: u64,
    window: Option<Window>,
    /// Whether to try mapping (false after a map failed, or when asked not to).
    map: bool,
}

impl<'f> Pieces<'f> {
    /// Pieces of `file`, `len` bytes long when it was opened.
    pub fn new(file: &'f File, len: u64) -> Self {
        Self {
            file,
            len,
            window: None,
            map: cfg!(target_os = "linux") && std::env::var_os("BUNDLESCOPE_NO_MAP").is_none(),
        }
    }

    /// Up to `want` bytes from file offset `pos` (empty at the end of the
    /// file, or where the file has shrunk since it was opened).
    pub fn at<'a>(&'a mut self, buf: &'a mut [u8], pos: u64, want: usize) -> io::Result<&'a [u8]> {
        let want = want.min(buf.len());
        if self.map && pos < self.len {
            let want = usize::try_from(self.len - pos).map_or(want, |left| want.min(left));
            if !self.window.as_ref().is_some_and(|w| w.covers(pos, want)) {
                self.window = None;
                let left = usize::try_from(self.len - pos).unwrap_or(usize::MAX);
                self.window = Window::map(self.file, pos, left.min(WINDOW_BYTES.max(want)));
                if self.window.is_none() {
                    self.map = false;
                }
            }
            if let Some(w) = &self.window {
                let from = (pos - w.offset) as usize;
                if w.touch(from..from + want) {
                    return Ok(
                        &self.window.as_ref().map_or(&[][..], |w| w.bytes())[from..from + want]
                    );
                }
                // A page was lost (the file shrank, or the disk failed):
                // from here on, plain reads say which.
                self.window = None;
                self.map = false;
            }
        }
        let n = read_at(self.file, &mut buf[..want], pos)?;
        Ok(&buf[..n])
    }
}

/// Reads at `at` without moving the file's cursor (so threads can share
/// one open file), retrying an interrupted read.
#[cfg(unix)]
pub fn read_at(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    loop {
        match f.read_at(buf, at) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

#[cfg(not(unix))]
pub fn read_at(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    use std::os::windows::fs::FileExt;
    f.seek_read(buf, at)
}

#[cfg(target_os = "linux")]
mod guard {
    //! The SIGBUS handler and the table of mapped windows it consults. The
    //! table is a fixed array of atomics, so the handler reads it without
    //! locks or allocation; its one system call (`mmap`) is safe there.

    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Windows mapped at once, over every audit of the process.
    const SLOTS: usize = 64;

    struct Slot {
        /// The thread that maps and reads the window: the only one whose
        /// faults the handler takes for this window (a slot released and
        /// claimed again by another thread while the handler reads it
        /// cannot then pair one owner's start with another's end).
        owner: AtomicUsize,
        /// Page-aligned bounds of the mapping; `start` 0 when free.
        start: AtomicUsize,
        end: AtomicUsize,
        /// Claimed by a window (set before `start`, cleared after it).
        busy: AtomicBool,
        /// A page of the window was lost to a truncation.
        lost: AtomicBool,
    }

    #[allow(clippy::declare_interior_mutable_const)]
    const FREE: Slot = Slot {
        owner: AtomicUsize::new(0),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        busy: AtomicBool::new(false),
        lost: AtomicBool::new(false),
    };
    static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    /// The handler that was installed before ours; `None` if ours could not be.
    static PREVIOUS: OnceLock<Option<Previous>> = OnceLock::new();

    /// A copy of the previous `sigaction` (plain data).
    struct Previous(libc::sigaction);
    // SAFETY: `sigaction` holds a handler address, flags and a signal mask:
    // plain values, only ever read after it is set.
    unsafe impl Sync for Previous {}
    unsafe impl Send for Previous {}

    pub(super) fn page_size() -> usize {
        match PAGE.load(Ordering::Relaxed) {
            0 => {
                // SAFETY: sysconf has no preconditions.
                let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
                let p = usize::try_from(p)
                    .ok()
                    .filter(|p| p.is_power_of_two())
                    .unwrap_or(4096);
                PAGE.store(p, Ordering::Relaxed);
                p
            }
            p => p,
        }
    }

    /// Installs the handler once; whether it is in place.
    pub(super) fn install() -> bool {
        page_size();
        PREVIOUS
            .get_or_init(|| {
                // SAFETY: a zeroed sigaction is a valid value to fill in;
                // `on_sigbus` has the SA_SIGINFO signature and only does
                // what a handler may (atomics, mmap, sigaction).
                unsafe {
                    let mut ours: libc::sigaction = std::mem::zeroed();
                    ours.sa_sigaction = on_sigbus as *const () as usize;
                    ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                    libc::sigemptyset(&mut ours.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    (libc::sigaction(libc::SIGBUS, &ours, &mut old) == 0).then_some(Previous(old))
                }
            })
            .is_some()
    }

    /// The calling thread's kernel id (async-signal-safe).
    fn thread_id() -> usize {
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as usize }
    }

    /// A free slot for the mapping `[start, end)`, owned by this thread.
    pub(super) fn claim(start: usize, end: usize) -> Option<usize> {
        let me = thread_id();
        TABLE.iter().position(|s| {
            s.busy
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
                && {
                    s.lost.store(false, Ordering::Relaxed);
                    s.owner.store(me, Ordering::Relaxed);
                    s.end.store(end, Ordering::Relaxed);
                    s.start.store(start, Ordering::Release);
                    true
                }
        })
    }

    pub(super) fn release(slot: usize) {
        if let Some(s) = TABLE.get(slot) {
            s.start.store(0, Ordering::Release);
            s.busy.store(false, Ordering::Release);
        }
    }

    pub(super) fn lost(slot: usize) -> bool {
        TABLE
            .get(slot)
            .is_some_and(|s| s.lost.load(Ordering::Acquire))
    }

    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        let page = PAGE.load(Ordering::Relaxed).max(1);
        let me = thread_id();
        for s in &TABLE {
            let start = s.start.load(Ordering::Acquire);
            let end = s.end.load(Ordering::Relaxed);
            // Only this thread's windows: their slots cannot change while
            // it is here (it claims and releases them itself).
            if start != 0 && s.owner.load(Ordering::Relaxed) == me && (start..end).contains(&addr) {
                let from = addr & !(page - 1);
                // Zero pages over the rest of the window: the faulting read
                // is retried and reads zeros, and so does every later one.
                // SAFETY: [from, end) lies inside a read-only map this
                // process owns and no one else refers to; replacing its
                // pages changes only what reads of it return.
                let p = unsafe {
                    libc::mmap(
                        from as *mut libc::c_void,
                        end - from,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    )
                };
                if p != libc::MAP_FAILED {
                    s.lost.store(true, Ordering::Release);
                    return;
                }
            }
        }
        // Not a window's fault: what would have happened without us.
        match PREVIOUS.get() {
            Some(Some(Previous(old))) if old.sa_sigaction > libc::SIG_IGN => {
                // SAFETY: a handler address the previous owner installed,
                // called with the signature its flags say it has.
                unsafe {
                    if old.sa_flags & libc::SA_SIGINFO != 0 {
                        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                            std::mem::transmute(old.sa_sigaction);
                        f(sig, info, ctx);
                    } else {
                        let f: extern "C" fn(libc::c_int) = std::mem::transmute(old.sa_sigaction);
                        f(sig);
                    }
                }
            }
            _ => {
                // SAFETY: restoring the default action; returning re-runs
                // the faulting instruction, which then ends the process as
                // it would have.
                unsafe {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")] // the mapped path exists on Linux only
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(len: usize) -> (tempfile_path::Temp, File) {
        let t = tempfile_path::Temp::new("window");
        let mut f = File::create(&t.0).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8 + 1).collect();
        f.write_all(&bytes).unwrap();
        drop(f);
        let f = File::open(&t.0).unwrap();
        (t, f)
    }

    mod tempfile_path {
        pub struct Temp(pub std::path::PathBuf);
        impl Temp {
            pub fn new(tag: &str) -> Self {
                let n = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                Self(
                    std::env::temp_dir()
                        .join(format!("bundlescope-{tag}-{}-{n}", std::process::id())),
                )
            }
        }
        impl Drop for Temp {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    #[test]
    fn mapped_pieces_are_the_bytes_a_read_gives() {
        let len = 3 * WINDOW_BYTES / 2 + 12_345;
        let (t, f) = file_of(len);
        let whole = std::fs::read(&t.0).unwrap();
        let mut pieces = Pieces::new(&f, len as u64);
        assert!(pieces.map, "the map path is what this test is about");
        let mut buf = vec![0u8; 1 << 20];
        let (mut pos, mut got) = (0u64, Vec::new());
        loop {
            let p = pieces.at(&mut buf, pos, 700_001).unwrap();
            if p.is_empty() {
                break;
            }
            got.extend_from_slice(p);
            pos += p.len() as u64;
        }
        assert!(pieces.window.is_some(), "the pieces came from a map");
        assert_eq!(got.len(), whole.len());
        assert!(got == whole, "the mapped bytes differ from the file's");
    }

    #[test]
    fn a_file_truncated_under_its_map_ends_there_instead_of_killing_the_process() {
        let len = 4 << 20;
        let (t, f) = file_of(len);
        let whole = std::fs::read(&t.0).unwrap();
        let mut pieces = Pieces::new(&f, len as u64);
        let mut buf = vec![0u8; 256 << 10];
        let first = pieces.at(&mut buf, 0, 256 << 10).unwrap().to_vec();
        assert!(pieces.window.is_some());
        assert_eq!(first, whole[..256 << 10]);
        // Another writer cuts the file to 1 MiB while it is mapped.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&t.0)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        // Bytes still in the file still read as they are...
        let kept = pieces.at(&mut buf, 512 << 10, 256 << 10).unwrap().to_vec();
        assert_eq!(kept, whole[512 << 10..768 << 10]);
        // ...and a piece past the cut is the end of the file, not a crash;
        // the reads are then plain ones, which give the file's real end.
        let past = pieces.at(&mut buf, 2 << 20, 256 << 10).unwrap();
        assert!(
            past.is_empty(),
            "a piece past the truncation read {} bytes",
            past.len()
        );
        assert!(pieces.window.is_none() && !pieces.map);
        let tail = pieces.at(&mut buf, (1 << 20) - 100, 256 << 10).unwrap();
        assert_eq!(tail, &whole[(1 << 20) - 100..1 << 20]);
    }
}
