//! Background work yields to the window: the app's audit runs below the
//! interface's priority, so a frame never waits behind a hashing core
//! (the machine's cores are all the audit's when the window is idle).

/// Lowers the calling thread's scheduling priority; the threads it spawns
/// afterwards inherit it. Linux: nice 10 (the nice value is per thread).
/// macOS: the utility QoS class. Best effort: where it fails, or on other
/// systems, the priority stays as it was.
pub fn background() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread's own id; no memory
    // is passed.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
    #[cfg(target_os = "macos")]
    // SAFETY: sets the calling thread's QoS class; no memory is passed.
    unsafe {
        libc::pthread_set_qos_class_self_np(libc::qos_class_t::QOS_CLASS_UTILITY, 0);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The nice value of thread `tid`, from `/proc` (field 19 of `stat`,
    /// counted after the command name's closing parenthesis).
    fn nice_of(tid: i32) -> i64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    fn background_lowers_this_thread_and_its_children_but_not_the_caller() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let before = nice_of(me);
        let (worker, child) = std::thread::spawn(|| {
            super::background();
            // SAFETY: as above.
            let worker = unsafe { libc::gettid() };
            let child = std::thread::spawn(|| {
                // SAFETY: as above.
                let child = unsafe { libc::gettid() };
                (child, nice_of(child))
            })
            .join()
            .unwrap();
            ((worker, nice_of(worker)), child)
        })
        .join()
        .unwrap();
        assert_eq!(worker.1, before.max(10), "the worker runs at nice 10");
        assert_eq!(child.1, worker.1, "threads it spawns inherit it");
        assert_eq!(
            nice_of(me),
            before,
            "the calling (window's) thread keeps its priority"
        );
        assert_ne!(worker.0, me);
    }
}
