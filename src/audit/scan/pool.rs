//! Cleared count tables kept for the next tensor on this thread: a
//! checkpoint of tens of thousands of small tensors would otherwise fault
//! in and zero a fresh table (128 or 256 KiB) for each, where the scanner
//! that returns one clears only the cells it used.

use std::cell::RefCell;

/// Tables of one length kept per thread.
const POOLED: usize = 4;

thread_local! {
    static TABLES: RefCell<Vec<Vec<u32>>> = const { RefCell::new(Vec::new()) };
}

/// A zeroed table of `len` cells, from this thread's pool when it has one.
pub(super) fn take(len: usize) -> Vec<u32> {
    TABLES
        .with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|t| t.len() == len)?;
            Some(p.swap_remove(i))
        })
        .unwrap_or_else(|| vec![0; len])
}

/// Whether this thread's pool has room for a table of `len` cells (a
/// caller that must clear a table before giving it back clears only then).
pub(super) fn wants(len: usize) -> bool {
    len > 0 && TABLES.with(|p| p.borrow().iter().filter(|t| t.len() == len).count() < POOLED)
}

/// Keeps `table`, which the caller has zeroed, for the next [`take`] of
/// its length on this thread.
pub(super) fn give_cleared(table: Vec<u32>) {
    if table.is_empty() {
        return;
    }
    TABLES.with(|p| {
        let mut p = p.borrow_mut();
        if p.iter().filter(|t| t.len() == table.len()).count() < POOLED {
            p.push(table);
        }
    });
}
