//! MLX-LM modules in the report: a quantized weight's scales live in a
//! separate tensor, scanned on its own, so the weight's scale range is
//! filled in once both have been scanned (in either order), and the
//! totals count scales and biases as bytes of their module, not as
//! parameters of the model.

use std::collections::HashMap;

use crate::decode::stats::TensorStats;
use crate::format::{Bundle, Layout, TensorInfo};

/// `max / min` of a scales tensor's scales: the E8M0/E4M3 summary of a
/// float mode, the nonzero magnitudes of affine scales (which take either
/// sign: MLX gives a group whose edge is its minimum a negative scale).
fn scale_range(s: &TensorStats) -> Option<f64> {
    let (min, max) = match (&s.scales, s.abs_range) {
        (Some(sc), _) => (sc.min, sc.max),
        (None, Some([min, max])) => (min, max),
        _ => return None,
    };
    (min > 0.0 && max.is_finite()).then(|| max / min)
}

/// For each tensor: `(weight, scales, bits)` when it is an MLX module's
/// quantized weight or its scales.
pub(super) fn modules(bundle: &Bundle) -> Vec<Option<Module>> {
    let mut out = vec![None; bundle.tensors.len()];
    let by_name: HashMap<&str, usize> = bundle
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    for (w, t) in bundle.tensors.iter().enumerate() {
        let Some(Layout::MlxCodes { bits, .. }) = t.layout else {
            continue;
        };
        let Some(prefix) = t.name.strip_suffix(".weight") else {
            continue;
        };
        if let Some(&s) = by_name.get(format!("{prefix}.scales").as_str()) {
            out[w] = Some((w, s, bits));
            out[s] = Some((w, s, bits));
        }
    }
    out
}

/// After a module's weight or scales was scanned: once both have been,
/// the weight's `scale_dynamic_range`, `outlier_rows` and `zero_groups`
/// (groups with a zero scale; and so its suspicion) from its scales.
pub(super) fn merge_scales((w, s, bits): Module, stats: &mut [Option<Box<TensorStats>>]) {
    let Some(scales) = stats.get(s).and_then(Option::as_ref) else {
        return;
    };
    let (range, outliers, zeros) = (scale_range(scales), scales.row_outliers, scales.zero_scales);
    let summary = scales.scales.clone();
    let parts = scales.experts.clone();
    // A stacked module's experts: each one's scales beside its codes.
    if let (Some(parts), Some(mine)) = (
        parts,
        stats
            .get_mut(w)
            .and_then(Option::as_mut)
            .and_then(|st| st.experts.as_mut()),
    ) {
        for (m, p) in mine.iter_mut().zip(&parts) {
            m.merge_scales(p, 1.0);
        }
    }
    if let Some(st) = stats.get_mut(w).and_then(Option::as_mut)
        && st.scales.is_none()
    {
        // The weight's scale distribution is its scales tensor's (the
        // magnitudes of affine scales), so its histogram, quantiles and
        // peer statistics are there as for any packed weight.
        st.scales = summary;
    }
    if let Some(q) = stats
        .get_mut(w)
        .and_then(Option::as_mut)
        .and_then(|st| st.quality.as_mut())
    {
        if let Some(r) = range {
            q.scale_dynamic_range = r;
        }
        if let Some(n) = zeros {
            q.zero_groups = n;
        }
        if let Some(n) = outliers {
            q.outlier_rows = n;
        }
        if outliers.is_some() || zeros.is_some() {
            q.suspicion = crate::decode::stats::suspicion(q, u32::from(bits));
        }
    }
}

/// A module: its weight, its scales, its bits.
pub(super) type Module = (usize, usize, u8);

/// The precision a tensor's bytes count under in the totals, and whether
/// its elements are parameters: an MLX module's scales, biases and global
/// scale count under their weight's precision (`affine4`, `mxfp4`…), with
/// no parameters of their own.
pub(super) fn counted_as(info: &TensorInfo) -> Option<&'static str> {
    if matches!(info.precision, crate::format::Precision::Mlx(..)) {
        return None;
    }
    let q = info.quantization()?;
    Some(q.mode.label(q.bits))
}
