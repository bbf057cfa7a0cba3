//! A lock-free latency histogram for the fault path: several handler threads record
//! into it at once, and nothing is allocated after start-up. Buckets are log-linear (4
//! per power of two), so a quantile is known to within a quarter of its value, enough
//! for p50/p99 of faults that range from microseconds to seconds. (`hdrhistogram` needs
//! `&mut` to record, which would put a lock or a per-thread copy on the fault path.)

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SUB_BUCKETS: usize = 4;
const BUCKETS: usize = 64 * SUB_BUCKETS;

pub struct LatencyHistogram {
    counts: [AtomicU64; BUCKETS],
    /// Every value recorded, summed (for the mean).
    sum_ns: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }
}

/// The bucket of `ns`: the power of two below it, then which quarter of the way to the
/// next one.
fn bucket(ns: u64) -> usize {
    if ns < SUB_BUCKETS as u64 {
        return ns as usize;
    }
    let power = 63 - ns.leading_zeros() as usize;
    let quarter = ((ns >> (power - 2)) & 3) as usize;
    power * SUB_BUCKETS + quarter
}

/// The largest value in `bucket` (what a quantile reports: never an underestimate).
fn bucket_top(bucket: usize) -> u64 {
    if bucket < SUB_BUCKETS {
        return bucket as u64;
    }
    let power = bucket / SUB_BUCKETS;
    let quarter = (bucket % SUB_BUCKETS) as u64;
    let base = 1u64 << power;
    let step = base / SUB_BUCKETS as u64;
    (base + (quarter + 1) * step).saturating_sub(1)
}

impl LatencyHistogram {
    pub fn record(&self, ns: u64) {
        self.counts[bucket(ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// Forgets every value recorded (a histogram of a tenant's, for the next tenant).
    pub fn reset(&self) {
        for count in &self.counts {
            count.store(0, Relaxed);
        }
        self.sum_ns.store(0, Relaxed);
    }

    /// All values recorded, summed.
    pub fn sum(&self) -> u64 {
        self.sum_ns.load(Relaxed)
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// The value at quantile `q` (0..=1), rounded up to its bucket's top; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_top(index);
            }
        }
        bucket_top(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::{bucket, bucket_top, LatencyHistogram};

    #[test]
    fn buckets_bound_their_values_within_a_quarter() {
        for ns in [0u64, 1, 3, 4, 5, 7, 8, 100, 1_000, 65_535, 1 << 40, u64::MAX / 2] {
            let top = bucket_top(bucket(ns));
            assert!(top >= ns, "{ns}: top {top}");
            assert!(top as f64 <= ns as f64 * 1.25 + 1.0, "{ns}: top {top}");
        }
    }

    #[test]
    fn quantiles_of_a_known_spread() {
        let histogram = LatencyHistogram::default();
        assert_eq!(histogram.quantile(0.5), 0);
        for ns in 1..=1000u64 {
            histogram.record(ns * 1000);
        }
        assert_eq!(histogram.count(), 1000);
        let p50 = histogram.quantile(0.5);
        let p99 = histogram.quantile(0.99);
        assert!((500_000..=625_000).contains(&p50), "p50 {p50}");
        assert!((990_000..=1_240_000).contains(&p99), "p99 {p99}");
    }
}
