//! A small seeded generator (xoshiro256**) and a table-driven Student-t(4)
//! sampler: fast enough to write gigabytes of realistic weights.

use std::sync::OnceLock;

/// xoshiro256** seeded through SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
    pool: u64,
    pool_left: u32,
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const T_BITS: u32 = 12;

/// Quantiles of Student-t with 4 degrees of freedom at (i + 0.5) / 4096.
/// Its CDF has a closed form: F(t) = 1/2 + 3/4·a·(1 − a²/3), a = t/√(4+t²).
fn t_table() -> &'static [f32; 1 << T_BITS] {
    static TABLE: OnceLock<[f32; 1 << T_BITS]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0f32; 1 << T_BITS];
        for (i, v) in t.iter_mut().enumerate() {
            let u = (i as f64 + 0.5) / f64::from(1u32 << T_BITS);
            let target = u - 0.5;
            let (mut lo, mut hi) = (-1.0f64, 1.0f64);
            for _ in 0..60 {
                let a = (lo + hi) / 2.0;
                if 0.75 * a * (1.0 - a * a / 3.0) < target {
                    lo = a;
                } else {
                    hi = a;
                }
            }
            let a = (lo + hi) / 2.0;
            *v = (2.0 * a / (1.0 - a * a).sqrt()) as f32;
        }
        t
    })
}

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        Self {
            s: [
                splitmix(&mut x),
                splitmix(&mut x),
                splitmix(&mut x),
                splitmix(&mut x),
            ],
            pool: 0,
            pool_left: 0,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// A uniform float in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A Student-t(4) sample (heavy-tailed, unit-ish spread).
    #[inline]
    pub fn student_t(&mut self) -> f32 {
        if self.pool_left == 0 {
            self.pool = self.next_u64();
            self.pool_left = 64 / T_BITS;
        }
        let i = (self.pool & ((1 << T_BITS) - 1)) as usize;
        self.pool >>= T_BITS;
        self.pool_left -= 1;
        t_table()[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn student_t_is_symmetric_and_heavy_tailed() {
        let t = t_table();
        for i in 0..t.len() / 2 {
            assert!((t[i] + t[t.len() - 1 - i]).abs() < 1e-4);
        }
        // Median 0; t(4) 97.5% quantile is 2.776.
        let q = t[(0.975 * 4096.0) as usize];
        assert!((q - 2.776).abs() < 0.02, "{q}");
        assert!(t[t.len() - 1] > 8.0);
    }
}
