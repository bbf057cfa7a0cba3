//! Latency summaries.

pub use znswap_chart::Table;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of a set of latencies, in microseconds: the one percentile code of the
/// commands (`hdrhistogram`, 3 significant digits, so each is within 0.1 % of the exact
/// sample). The pager's fault path keeps its own lock-free histogram
/// (`znswap_pager`'s `latency.rs`), which `hdrhistogram`'s `&mut` recording cannot be.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

impl Latency {
    pub fn from_ns(samples_ns: &[u64]) -> Latency {
        if samples_ns.is_empty() {
            return Latency::default();
        }
        let mut histogram = Histogram::<u64>::new(3).expect("3 significant digits are valid");
        for &sample in samples_ns {
            histogram.record(sample).expect("an auto-resizing histogram takes any value");
        }
        let sum: u128 = samples_ns.iter().map(|&sample| sample as u128).sum();
        let us = |ns: u64| ns as f64 / 1e3;
        Latency {
            count: samples_ns.len() as u64,
            p50_us: us(histogram.value_at_quantile(0.50)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            min_us: us(histogram.min()),
            max_us: us(histogram.max()),
            mean_us: sum as f64 / samples_ns.len() as f64 / 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_samples() {
        let samples: Vec<u64> = (1..=100).rev().map(|i| i * 1000).collect();
        let latency = Latency::from_ns(&samples);
        let near = |value: f64, exact: f64| (value - exact).abs() <= exact * 0.001;
        assert_eq!(latency.count, 100);
        assert!(near(latency.p50_us, 50.0), "{latency:?}");
        assert!(near(latency.p99_us, 99.0), "{latency:?}");
        assert!(near(latency.min_us, 1.0) && near(latency.max_us, 100.0), "{latency:?}");
        assert_eq!(latency.mean_us, 50.5);
        assert_eq!(Latency::from_ns(&[]).count, 0);
    }
}
