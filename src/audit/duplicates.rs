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
use crate::format::{Bundle, Payload};

/// `(tensor, earlier twin)` for every tensor (aliases aside) whose bytes
/// equal an earlier one's; tensors whose bytes cannot be read are left out
/// (the audit says why elsewhere).
pub fn twins<B: Deref<Target = Bundle>>(
    bundle: &Bundle,
    payload: &Payload<B>,
) -> Vec<(usize, usize)> {
    let list: Vec<(usize, &[u8])> = bundle
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.alias_of.is_none() && t.layout.is_some())
        .filter_map(|(i, _)| payload.tensor_bytes(i).ok().map(|b| (i, b)))
        .collect();
    peers::duplicates(&list)
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
