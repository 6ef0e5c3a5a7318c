//! MLX-LM modules in the report: a quantized weight's scales live in a
//! separate tensor, scanned on its own, so the weight's scale range is
//! filled in once both have been scanned (in either order), and the
//! totals count scales and biases as bytes of their module, not as
//! parameters of the model.

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
    let tensors = &bundle.tensors;
    let mut out = vec![None; tensors.len()];
    // A module's parts sort together (`p.biases`, `p.scales`, `p.weight`):
    // its scales are looked for beside its weight, and through a name map
    // (made at the first miss, as the rows of 20,000 tensors are applied in
    // the frame that shows them) only when they are not there. Of equal
    // names, the last row counts, as in the map.
    let mut by_name: Option<foldhash::HashMap<&str, usize>> = None;
    let mut key = String::new();
    for (w, t) in tensors.iter().enumerate() {
        let Some(Layout::MlxCodes { bits, .. }) = t.layout else {
            continue;
        };
        let Some(prefix) = t.name.strip_suffix(".weight") else {
            continue;
        };
        key.clear();
        key.push_str(prefix);
        key.push_str(".scales");
        let near =
            (w.saturating_sub(3)..tensors.len().min(w + 4)).find(|&i| tensors[i].name == key);
        let s = match near {
            Some(mut s) => {
                while tensors.get(s + 1).is_some_and(|t| t.name == key) {
                    s += 1;
                }
                Some(s)
            }
            None => by_name
                .get_or_insert_with(|| {
                    tensors
                        .iter()
                        .enumerate()
                        .map(|(i, t)| (t.name.as_str(), i))
                        .collect()
                })
                .get(key.as_str())
                .copied(),
        };
        if let Some(s) = s {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every quantized weight is paired with the row of its own scales,
    /// found by name here; in the sorted rows (scales beside the weight)
    /// and with every weight moved first, where the name map finds them.
    #[test]
    fn each_weight_is_paired_with_its_scales_in_any_row_order() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        let o = crate::sample::mlxlm::MlxLmOptions {
            mixed: true,
            ..Default::default()
        };
        crate::sample::mlxlm::write(&dir, &o, None).unwrap();
        let mut b = crate::format::open(&dir).unwrap();
        for weights_first in [false, true] {
            if weights_first {
                b.tensors.sort_by_key(|t| !t.name.ends_with(".weight"));
            }
            let got = modules(&b);
            let mut paired = 0;
            for (w, t) in b.tensors.iter().enumerate() {
                let Some(Layout::MlxCodes { bits, .. }) = t.layout else {
                    assert!(got[w].is_none_or(|(_, s, _)| s == w), "{}", t.name);
                    continue;
                };
                let scales = t.name.replace(".weight", ".scales");
                let s = b.tensors.iter().position(|x| x.name == scales).unwrap();
                assert_eq!(got[w], Some((w, s, bits)), "{}", t.name);
                assert_eq!(got[s], Some((w, s, bits)), "{scales}");
                paired += 1;
            }
            assert!(paired > 10, "{paired}");
        }
    }
}
