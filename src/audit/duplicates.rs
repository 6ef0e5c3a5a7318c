//! Byte-identical tensors: a layer's tensor replaced by another layer's is
//! a classic packaging mistake that every rule of the format accepts. The
//! comparison needs no second read of the payload in the usual case: three
//! 4 KiB samples per tensor, and whole tensors only when those agree
//! ([`crate::decode::peers::duplicates`]).

use std::ops::Deref;

use super::{Event, Sink};
use crate::decode::peers;
use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::payload::open_regular;
use crate::format::{Bundle, Payload};

/// `(tensor, earlier twin)` for every tensor (aliases aside) whose bytes
/// equal an earlier one's; tensors whose bytes cannot be read are left out
/// (the audit says why elsewhere). The samples are positioned reads (a map
/// would bring whole pages of every tensor into the process: about 1 GiB
/// resident for a 2 GiB checkpoint); the payload is mapped only when two
/// tensors' samples agree.
pub fn twins<B: Deref<Target = Bundle>>(
    bundle: &Bundle,
    payload: &Payload<B>,
) -> Vec<(usize, usize)> {
    use std::os::unix::fs::FileExt;
    let files: Vec<Option<std::fs::File>> = bundle
        .files
        .iter()
        .map(|f| open_regular(&f.name, &f.path).ok().map(|(file, _)| file))
        .collect();
    let list: Vec<(usize, usize)> = bundle
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.alias_of.is_none() && t.layout.is_some())
        .filter_map(|(i, t)| Some((i, usize::try_from(t.bytes?).ok()?)))
        .collect();
    let sample = |i: usize, n: usize| -> Option<Vec<u8>> {
        let t = &bundle.tensors[i];
        let file = files.get(t.file)?.as_ref()?;
        let start = t.offset?;
        let mut s = Vec::with_capacity(3 * peers::SAMPLE);
        for (x, y) in peers::sample_ranges(n) {
            let at = s.len();
            s.resize(at + (y - x), 0);
            file.read_exact_at(&mut s[at..], start.checked_add(x as u64)?)
                .ok()?;
        }
        Some(s)
    };
    peers::duplicates_sampled(&list, sample, |i| payload.tensor_bytes(i).ok())
}

/// The `tensor.duplicate` check, after the pass: one warning per tensor
/// that repeats another, naming its twin.
pub(super) fn check(bundle: &Bundle, emit: Sink) {
    let payload = Payload::open(bundle);
    let found = twins(bundle, &payload);
    if found.is_empty() {
        emit(Event::Passed {
            check: c::TENSOR_DUPLICATE,
            tensor: None,
        });
    }
    for (i, j) in found {
        let (t, twin) = (&bundle.tensors[i], &bundle.tensors[j]);
        emit(Event::Finding(
            Finding::warning(
                c::TENSOR_DUPLICATE,
                format!(
                    "{} is byte-identical to {} ({} bytes): one of the two was likely copied over the other",
                    t.name,
                    twin.name,
                    t.bytes.unwrap_or(0)
                ),
            )
            .tensor(&t.name)
            .maybe_offset(t.offset),
        ));
    }
}
