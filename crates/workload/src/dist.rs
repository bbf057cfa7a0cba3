//! Random draws shared by the key-value streams: a seeded generator, the fitted
//! distributions of the ETC model, and a storage-free permutation of record ids.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A seeded Xoshiro256++ with the few draws the streams need.
#[derive(Clone, Debug)]
pub(crate) struct Rng(Xoshiro256PlusPlus);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift; the bias is below 2^-64 · bound).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "a draw below 0 has no value");
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    /// Uniform in (0, 1]: never 0, so logarithms and negative powers stay finite.
    pub(crate) fn unit_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn percent(&mut self, percent: u8) -> bool {
        self.below(100) < percent as u64
    }
}

/// The generalized extreme value distribution's quantile at `u` in (0, 1) (ξ ≠ 0):
/// μ + σ/ξ · ((−ln u)^(−ξ) − 1).
pub(crate) fn gev_quantile(u: f64, mu: f64, sigma: f64, xi: f64) -> f64 {
    debug_assert!(u > 0.0 && u < 1.0 && xi != 0.0);
    mu + sigma / xi * ((-u.ln()).powf(-xi) - 1.0)
}

/// The generalized Pareto distribution's quantile at `u` in [0, 1) (ξ ≠ 0):
/// θ + σ/ξ · ((1 − u)^(−ξ) − 1).
pub(crate) fn gp_quantile(u: f64, theta: f64, sigma: f64, xi: f64) -> f64 {
    debug_assert!((0.0..1.0).contains(&u) && xi != 0.0);
    theta + sigma / xi * ((1.0 - u).powf(-xi) - 1.0)
}

/// A keyed bijection of `0..n` kept in three words: an invertible mix of the smallest
/// power-of-two domain holding `n`, walked until it lands below `n` (cycle walking).
/// Scatters a contiguous range of popularity ranks over the records without a table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scatter {
    n: u64,
    bits: u32,
    key: u64,
}

impl Scatter {
    pub(crate) fn new(n: u64, key: u64) -> Scatter {
        assert!(n > 0, "a permutation of nothing");
        let bits = 64 - (n - 1).leading_zeros().min(63);
        Scatter { n, bits: bits.max(1), key }
    }

    fn mix(&self, x: u64) -> u64 {
        let mask = if self.bits == 64 { u64::MAX } else { (1u64 << self.bits) - 1 };
        let half = self.bits.div_ceil(2);
        // Each step is a bijection of the b-bit domain: add, xor-shift right, odd multiply.
        let mut x = x.wrapping_add(self.key) & mask;
        for round_key in [0x9E37_79B9_7F4A_7C15u64, 0xBF58_476D_1CE4_E5B9, 0x94D0_49BB_1331_11EB] {
            x ^= x >> half;
            x = x.wrapping_mul(round_key | 1) & mask;
            x = x.wrapping_add(self.key.rotate_left(17)) & mask;
        }
        x
    }

    pub(crate) fn apply(&self, index: u64) -> u64 {
        assert!(index < self.n, "index {index} outside the permuted range 0..{}", self.n);
        let mut x = self.mix(index);
        while x >= self.n {
            x = self.mix(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_is_a_permutation() {
        for n in [1u64, 2, 3, 7, 8, 100, 1000, 4097] {
            let scatter = Scatter::new(n, 0xDEAD_BEEF);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = scatter.apply(i);
                assert!(!seen[j as usize], "n {n}: {j} hit twice");
                seen[j as usize] = true;
            }
        }
        // It does scatter: neighbours rarely stay neighbours.
        let scatter = Scatter::new(1 << 20, 1);
        let adjacent = (0..1000).filter(|&i| scatter.apply(i).abs_diff(scatter.apply(i + 1)) == 1).count();
        assert!(adjacent < 10, "{adjacent}");
    }

    #[test]
    fn quantiles_invert_the_cdfs() {
        // GEV CDF exp(-(1 + ξ(x−μ)/σ)^(−1/ξ)); GP CDF 1 − (1 + ξx/σ)^(−1/ξ).
        for u in [0.01, 0.3, 0.5, 0.9, 0.999] {
            let x = gev_quantile(u, 30.7984, 8.20449, 0.078688);
            let cdf = (-(1.0 + 0.078688 * (x - 30.7984) / 8.20449).powf(-1.0 / 0.078688)).exp();
            assert!((cdf - u).abs() < 1e-9, "gev {u}: {cdf}");
            let y = gp_quantile(u, 0.0, 214.476, 0.348238);
            let cdf = 1.0 - (1.0 + 0.348238 * y / 214.476).powf(-1.0 / 0.348238);
            assert!((cdf - u).abs() < 1e-9, "gp {u}: {cdf}");
        }
    }
}
