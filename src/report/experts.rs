//! mlx-nvfp4 expert sets in the report: a stacked weight's codes, its E4M3
//! scales and its per-expert global scales are three tensors, scanned on
//! their own; once all three have been, each expert of the weight gets its
//! scales (times its global scale, so experts compare in the units of their
//! values) and the weight its outlier rows.

use crate::decode::nvfp4::GLOBAL_DIVISOR;
use crate::decode::stats::TensorStats;
use crate::format::{Bundle, Layout};

/// One expert set: its weight, scales and global scale.
pub(super) type Set = (usize, usize, usize);

/// For each tensor: its expert set, when it is a member of one.
pub(super) fn sets(bundle: &Bundle) -> Vec<Option<Set>> {
    let mut out = vec![None; bundle.tensors.len()];
    for (w, t) in bundle.tensors.iter().enumerate() {
        if !matches!(t.layout, Some(Layout::Fp4 { .. })) {
            continue;
        }
        if let Ok(set) = bundle.expert_siblings(w) {
            let s = (set.weight, set.scales, set.global_scale);
            for i in [s.0, s.1, s.2] {
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(s);
                }
            }
        }
    }
    out
}

/// After a member of `set` was scanned: once all three have been, each
/// expert of the weight takes its scale statistics.
pub(super) fn merge((w, s, g): Set, stats: &mut [Option<Box<TensorStats>>]) {
    let get = |i: usize| stats.get(i).and_then(Option::as_ref);
    let (Some(parts), Some(globals)) = (
        get(s).and_then(|t| t.experts.clone()),
        get(g).and_then(|t| t.global_scales.clone()),
    ) else {
        return;
    };
    let Some(st) = stats.get_mut(w).and_then(Option::as_mut) else {
        return;
    };
    let Some(mine) = st.experts.as_mut() else {
        return;
    };
    for ((m, p), &gs) in mine.iter_mut().zip(&parts).zip(&globals) {
        // The codes' zero groups stand (a zero scale is one too, but the
        // codes count every group that carries nothing).
        let zero = m.zero_groups;
        m.merge_scales(p, gs / f64::from(GLOBAL_DIVISOR));
        m.zero_groups = zero;
    }
    let outliers = mine.iter().filter_map(|m| m.outlier_rows).sum();
    if let Some(q) = st.quality.as_mut() {
        q.outlier_rows = outliers;
        q.suspicion = crate::decode::stats::suspicion(q, 4);
    }
}

/// Fills in what the companions of every MLX-LM module and mlx-nvfp4
/// expert set give their weight, once all have been scanned (as the
/// report does while the audit runs): for a caller that scanned the
/// tensors itself (`hist --all`).
pub fn merge_companions(bundle: &Bundle, stats: &mut [Option<Box<TensorStats>>]) {
    for m in super::mlxlm::modules(bundle).into_iter().flatten() {
        if stats.get(m.0).is_some_and(Option::is_some) {
            super::mlxlm::merge_scales(m, stats);
        }
    }
    let mut done = std::collections::HashSet::new();
    for s in sets(bundle).into_iter().flatten() {
        if done.insert(s) {
            merge(s, stats);
        }
    }
}
