//! The peer verdicts of a bundle's quantised tensors (see
//! [`crate::decode::peers`]): which tensors take part, with what names,
//! precisions and shapes, so `hist --all`, the report and the Quality view
//! rank alike.

use crate::decode::peers::{self, PeerInput, PeerVerdict};
use crate::decode::stats::TensorStats;
use crate::format::Bundle;

/// Whether tensor `i` is judged: it has quality statistics (a packed,
/// GGUF block-quantised or MLX-LM quantised weight) and is no alias.
fn judged(bundle: &Bundle, stats: &[Option<Box<TensorStats>>], i: usize) -> bool {
    bundle.tensors.get(i).is_some_and(|t| t.alias_of.is_none())
        && stats
            .get(i)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.quality.is_some())
}

/// The verdict of every judged tensor (`None` for the rest), given the
/// single pass's statistics by tensor index and the byte-identical pairs
/// `(tensor, earlier twin)` found so far.
pub fn verdicts(
    bundle: &Bundle,
    stats: &[Option<Box<TensorStats>>],
    twins: &[(usize, usize)],
) -> Vec<Option<PeerVerdict>> {
    let idx: Vec<usize> = (0..bundle.tensors.len())
        .filter(|&i| judged(bundle, stats, i))
        .collect();
    let twin_of = |i: usize| {
        twins.iter().find_map(|&(a, b)| {
            if a == i {
                Some(b)
            } else if b == i {
                Some(a)
            } else {
                None
            }
        })
    };
    let empty: Vec<u64> = Vec::new();
    let inputs: Vec<PeerInput> = idx
        .iter()
        .map(|&i| {
            let t = &bundle.tensors[i];
            PeerInput {
                name: &t.name,
                precision: t.precision.as_str(),
                shape: t.shape.as_deref().unwrap_or(&empty),
                stats: stats.get(i).and_then(Option::as_deref),
                twin: twin_of(i).map(|j| bundle.tensors[j].name.as_str()),
            }
        })
        .collect();
    let mut out = vec![None; bundle.tensors.len()];
    for (i, v) in idx.into_iter().zip(peers::assess(&inputs)) {
        out[i] = Some(v);
    }
    out
}
