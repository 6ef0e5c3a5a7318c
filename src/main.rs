//! The `bundlescope` binary: the CLI subcommands (and, later, the desktop app).

mod cli;

/// Opening a checkpoint is mostly small allocations (JSON maps, names), where
/// glibc's allocator spent a third of the time (README, speed).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Behave like a Unix tool when piped into `head`: end quietly on a closed pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(cli::main());
}
