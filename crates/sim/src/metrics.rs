//! Latency histograms and time series.

use serde::Serialize;

use crate::events::Ns;

/// Sub-buckets per power of two: quantiles are within 1/32 (3 %) of the true value.
const SUB_BUCKETS_LOG2: u32 = 5;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKETS_LOG2;
const BUCKETS: usize = (64 - SUB_BUCKETS_LOG2 as usize + 1) * SUB_BUCKETS as usize;

/// A log-linear histogram of nanosecond latencies (fixed size, no allocation after
/// construction).
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    max: Ns,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram { counts: vec![0; BUCKETS], total: 0, sum: 0, max: 0 }
    }

    fn bucket(value: Ns) -> usize {
        if value < SUB_BUCKETS {
            return value as usize;
        }
        let magnitude = 63 - value.leading_zeros(); // >= SUB_BUCKETS_LOG2
        let shift = magnitude - SUB_BUCKETS_LOG2;
        let sub = (value >> shift) - SUB_BUCKETS; // 0 .. SUB_BUCKETS
        ((shift as u64 + 1) * SUB_BUCKETS + sub) as usize
    }

    /// The smallest value of a bucket's range.
    fn bucket_floor(bucket: usize) -> Ns {
        let bucket = bucket as u64;
        if bucket < SUB_BUCKETS {
            return bucket;
        }
        let shift = bucket / SUB_BUCKETS - 1;
        // The end of the last bucket is 2^64: saturate rather than overflow.
        (((SUB_BUCKETS + bucket % SUB_BUCKETS) as u128) << shift).min(Ns::MAX as u128) as Ns
    }

    pub fn record(&mut self, value: Ns) {
        self.counts[Self::bucket(value)] += 1;
        self.total += 1;
        self.sum += value as u128;
        self.max = self.max.max(value);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    pub fn max(&self) -> Ns {
        self.max
    }

    /// The value below which `fraction` of the samples fall (bucket midpoint).
    pub fn quantile(&self, fraction: f64) -> Ns {
        assert!((0.0..=1.0).contains(&fraction), "quantile {fraction} out of 0..=1");
        if self.total == 0 {
            return 0;
        }
        let rank = ((self.total as f64 * fraction).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let low = Self::bucket_floor(bucket);
                let high = Self::bucket_floor(bucket + 1).max(low + 1);
                return (low + (high - low) / 2).min(self.max);
            }
        }
        self.max
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }
}

/// One sample of a run's time series (rates over the interval that ends at `t_s`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Sample {
    /// End of the interval, seconds of virtual time.
    pub t_s: f64,
    pub swap_out_mib_s: f64,
    pub swap_in_mib_s: f64,
    /// Per tenant, swap-in MiB/s.
    pub tenant_swap_in_mib_s: Vec<f64>,
    /// Per tenant, swap-out MiB/s.
    pub tenant_swap_out_mib_s: Vec<f64>,
    /// Per tenant, host GC MiB/s moved on its behalf (ZNSwap).
    pub tenant_gc_mib_s: Vec<f64>,
    /// Media writes / host swap-out writes over the interval (1 when nothing written).
    pub waf: f64,
    /// Swap utilization: data on swap / swap capacity.
    pub utilization: f64,
    /// Host GC CPU as a fraction of one core.
    pub gc_cpu_cores: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_three_percent() {
        let mut histogram = Histogram::new();
        for value in 1..=100_000u64 {
            histogram.record(value * 10);
        }
        for (fraction, expected) in [(0.5, 500_000.0), (0.99, 990_000.0), (0.999, 999_000.0)] {
            let got = histogram.quantile(fraction) as f64;
            assert!((got / expected - 1.0).abs() < 0.03, "q{fraction}: {got} vs {expected}");
        }
        assert_eq!(histogram.count(), 100_000);
        assert_eq!(histogram.max(), 1_000_000);
        assert!((histogram.mean() - 500_005.0).abs() < 1.0);
    }

    #[test]
    fn small_values_are_exact_and_buckets_are_contiguous() {
        for value in 0..SUB_BUCKETS {
            assert_eq!(Histogram::bucket(value) as u64, value);
        }
        for bucket in 0..BUCKETS - 1 {
            let floor = Histogram::bucket_floor(bucket);
            assert_eq!(Histogram::bucket(floor), bucket, "floor of bucket {bucket}");
            assert!(Histogram::bucket_floor(bucket + 1) > floor);
        }
        let mut histogram = Histogram::new();
        histogram.record(7);
        assert_eq!(histogram.quantile(0.5), 7);
        assert_eq!(Histogram::new().quantile(0.99), 0);
    }

    #[test]
    fn merging_adds_counts() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(100);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert_eq!(a.max(), 1_000_000);
        assert!(a.quantile(1.0) > 900_000);
    }
}
