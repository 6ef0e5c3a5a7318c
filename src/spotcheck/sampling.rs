//! The seeded randomness of a spot check: which rows are checked and the
//! input `x`, both drawn from the seed and the tensor's name, so the same
//! options always check the same thing.

use std::collections::HashSet;

use super::XDtype;
use crate::decode::{bf16_to_f32, f32_to_bf16};
use crate::util::Rng;

/// `k` distinct rows of `0..n` drawn from the seed and the name (all of
/// them when `k >= n`), ascending.
pub fn sample_rows(seed: u64, name: &str, n: usize, k: usize) -> Vec<u64> {
    if k >= n {
        return (0..n as u64).collect();
    }
    // Floyd's algorithm: k draws, no O(n) table.
    let mut rng = Rng::new(seed ^ name_hash(name) ^ 0x005e_ed0f_7265_7773);
    let mut chosen = HashSet::with_capacity(k);
    for j in (n - k)..n {
        let t = (rng.next_u64() % (j as u64 + 1)) as usize;
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    let mut out: Vec<u64> = chosen.into_iter().map(|r| r as u64).collect();
    out.sort_unstable();
    out
}

/// FNV-1a of a name: the per-tensor part of every seed.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The random input of a tensor's check: `[batch, cols]` standard normal
/// f32 (Box–Muller from the seed and the name), rounded to bfloat16 for
/// `Bf16`. Returns the f32 values (already rounded) and, for `Bf16`, the
/// bit patterns MLX receives.
pub fn random_x(
    seed: u64,
    name: &str,
    batch: usize,
    cols: usize,
    dtype: XDtype,
) -> (Vec<f32>, Vec<u16>) {
    let mut rng = Rng::new(seed ^ name_hash(name));
    let n = batch * cols;
    let mut x = Vec::with_capacity(n + 1);
    while x.len() < n {
        let u1 = (f64::from(rng.uniform()) + 0.5 / f64::from(1u32 << 24)).min(1.0);
        let u2 = f64::from(rng.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let a = std::f64::consts::TAU * u2;
        x.push((r * a.cos()) as f32);
        x.push((r * a.sin()) as f32);
    }
    x.truncate(n);
    match dtype {
        XDtype::F32 => (x, Vec::new()),
        XDtype::Bf16 => {
            let bits: Vec<u16> = x.iter().map(|&v| f32_to_bf16(v)).collect();
            (bits.iter().map(|&b| bf16_to_f32(b)).collect(), bits)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_rows_are_distinct_sorted_and_seeded() {
        let a = sample_rows(3, "t", 10_000, 100);
        assert_eq!(a.len(), 100);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(a.iter().all(|&r| r < 10_000));
        assert_eq!(a, sample_rows(3, "t", 10_000, 100));
        assert_ne!(a, sample_rows(4, "t", 10_000, 100));
        assert_ne!(a, sample_rows(3, "u", 10_000, 100));
        assert_eq!(sample_rows(3, "t", 5, 9), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn random_x_is_standard_normal_and_bf16_is_rounded() {
        let (x, bits) = random_x(1, "t", 8, 4096, XDtype::F32);
        assert!(bits.is_empty());
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        let (xb, bits) = random_x(1, "t", 8, 4096, XDtype::Bf16);
        assert_eq!(bits.len(), xb.len());
        for ((&a, &b), &h) in x.iter().zip(&xb).zip(&bits) {
            assert_eq!(b, bf16_to_f32(f32_to_bf16(a)));
            assert_eq!(f32_to_bf16(b), h);
        }
    }
}
