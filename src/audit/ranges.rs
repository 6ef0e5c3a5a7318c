//! Per-tensor range hashes inside the single pass: the SHA-256 of each
//! tensor's `[offset, offset + bytes)`, updated as the file's chunks pass by,
//! so a range hash costs no second read of the payload.

use std::collections::VecDeque;

use sha2::{Digest, Sha256};

use super::{Event, Sink};
use crate::format::{Bundle, hex};

/// Hashes the byte ranges of every tensor of one payload file, fed the
/// file's bytes in order, chunk by chunk.
pub(super) struct RangeHasher {
    /// Ranges not reached yet, by start: `(tensor, start, end)`.
    pending: VecDeque<(usize, u64, u64)>,
    /// Ranges being hashed. Records are contiguous in a valid bundle, so
    /// this holds one or two; overlapping records of a broken one still
    /// each get their own hash.
    active: Vec<(usize, u64, u64, Sha256)>,
    /// File offset of the next byte fed.
    offset: u64,
}

impl RangeHasher {
    /// The ranges of the tensors stored in payload file `file`; aliases and
    /// records without a usable range get none (their hash stays unknown).
    pub(super) fn new(bundle: &Bundle, file: usize) -> Self {
        let mut pending: Vec<_> = bundle
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.alias_of.is_none() && t.file == file)
            .filter_map(|(i, t)| t.range().map(|(s, e)| (i, s, e)))
            .collect();
        pending.sort_by_key(|&(_, s, e)| (s, e));
        Self {
            pending: pending.into(),
            active: Vec::new(),
            offset: 0,
        }
    }

    /// Feeds the file's next bytes, emitting [`Event::TensorHashed`] for
    /// every range that ends inside them. A range that runs past the end of
    /// the file is never emitted: its bytes do not exist.
    pub(super) fn feed(&mut self, data: &[u8], emit: Sink) {
        let (a, b) = (self.offset, self.offset + data.len() as u64);
        while let Some(&(t, s, e)) = self.pending.front()
            && (s < b || (s == e && s <= b))
        {
            self.pending.pop_front();
            self.active.push((t, s, e, Sha256::new()));
        }
        let mut k = 0;
        while k < self.active.len() {
            let (_, s, e, h) = &mut self.active[k];
            let (from, to) = ((*s).max(a), (*e).min(b));
            if from < to {
                // Both bounds lie inside [a, b), so the slice is in range.
                h.update(&data[(from - a) as usize..(to - a) as usize]);
            }
            if *e <= b {
                let (tensor, _, _, h) = self.active.swap_remove(k);
                emit(Event::TensorHashed {
                    tensor,
                    sha256: hex(&h.finalize()),
                });
            } else {
                k += 1;
            }
        }
        self.offset = b;
    }
}
