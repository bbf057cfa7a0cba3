//! Page-access streams modelled on the paper's benchmarks, deterministic per seed, shared
//! by `znswap bench` (real memory) and the simulator (virtual time) so both run the very
//! same accesses.
//!
//! A [`Generator`] walks a working set of `pages` pages and yields [`Access`]es. Threads
//! each get their own generator over their own slice of the working set (as
//! vm-scalability's `-mt` cases give each thread its own part of the region).
//!
//! For the simulator there are also key-value streams with operation boundaries
//! ([`KvStream`]: memcached under Facebook's ETC in [`etc`], redis under YCSB-A in
//! [`ycsb`]) and throttled tenants ([`tenant`]). They are not in [`Workload::NAMES`]:
//! `znswap bench` and the pager tests run plain page streams only.

mod dist;
pub mod etc;
mod kv;
pub mod pattern;
pub mod tenant;
pub mod ycsb;

pub use etc::{EtcConfig, EtcLayout, EtcStream};
pub use kv::{KvConfigError, KvOp, KvStream, OpKind, Popularity};
pub use tenant::{Tenant, TokenBucket};
pub use ycsb::{YcsbConfig, YcsbStream};

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

/// One access: a page of the working set, read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub page: u64,
    pub write: bool,
}

/// The benchmarks of ZNSwap's evaluation (§6).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "workload")]
pub enum Workload {
    /// vm-scalability `case-anon-w-rand-mt`: writes to uniformly random pages.
    AnonWRand,
    /// vm-scalability `case-anon-w-seq-mt`: writes sweeping the set in order, again and
    /// again (swap-out only: every page is written before it is needed again).
    AnonWSeq,
    /// Writes every page once in order, then reads uniformly random pages (a read-only
    /// phase never allocates new swap, so it measures swap-in and the swap cache).
    AnonRRand,
    /// pmbench with a normal distribution: mean at the middle of the set, sigma 1/12 of
    /// it, draws outside clamped to the ends; `read_percent` of accesses are reads.
    Pmbench { read_percent: u8 },
    /// `hot_percent` of the set takes `hot_access_percent` of the accesses (80/20:
    /// `hot_percent` 20, `hot_access_percent` 80), uniform within each part.
    Hotspot { hot_percent: u8, hot_access_percent: u8, read_percent: u8 },
}

impl Workload {
    pub const NAMES: [&'static str; 5] = ["anon-w-rand", "anon-w-seq", "anon-r-rand", "pmbench", "hotspot"];

    /// The workload a CLI name stands for, with the paper's parameters.
    pub fn from_name(name: &str) -> Option<Workload> {
        Some(match name {
            "anon-w-rand" => Workload::AnonWRand,
            "anon-w-seq" => Workload::AnonWSeq,
            "anon-r-rand" => Workload::AnonRRand,
            "pmbench" => Workload::Pmbench { read_percent: 0 },
            "hotspot" => Workload::Hotspot { hot_percent: 20, hot_access_percent: 80, read_percent: 0 },
            _ => return None,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Workload::AnonWRand => "anon-w-rand",
            Workload::AnonWSeq => "anon-w-seq",
            Workload::AnonRRand => "anon-r-rand",
            Workload::Pmbench { .. } => "pmbench",
            Workload::Hotspot { .. } => "hotspot",
        }
    }
}

/// An endless, deterministic stream of accesses to `0..pages`.
pub struct Generator {
    workload: Workload,
    pages: u64,
    rng: Xoshiro256PlusPlus,
    /// Sequential cursor: the sweep position, or the fill position of anon-r-rand.
    cursor: u64,
    /// A second normal draw from the last Box-Muller pair.
    spare_normal: Option<f64>,
}

impl Generator {
    pub fn new(workload: Workload, pages: u64, seed: u64) -> Generator {
        assert!(pages > 0, "a working set has at least one page");
        Generator { workload, pages, rng: Xoshiro256PlusPlus::seed_from_u64(seed), cursor: 0, spare_normal: None }
    }

    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// Uniform in `0..bound` without modulo bias worth measuring (Lemire's method).
    fn below(&mut self, bound: u64) -> u64 {
        ((self.rng.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    fn unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn percent(&mut self, percent: u8) -> bool {
        self.below(100) < percent as u64
    }

    /// A standard normal draw (Box-Muller; the pair's second value is kept).
    fn normal(&mut self) -> f64 {
        if let Some(value) = self.spare_normal.take() {
            return value;
        }
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        let radius = (-2.0 * u1.ln()).sqrt();
        let angle = std::f64::consts::TAU * u2;
        self.spare_normal = Some(radius * angle.sin());
        radius * angle.cos()
    }

    fn sequential(&mut self) -> u64 {
        let page = self.cursor % self.pages;
        self.cursor += 1;
        page
    }
}

impl Iterator for Generator {
    type Item = Access;

    fn next(&mut self) -> Option<Access> {
        let pages = self.pages;
        Some(match self.workload {
            Workload::AnonWRand => Access { page: self.below(pages), write: true },
            Workload::AnonWSeq => Access { page: self.sequential(), write: true },
            Workload::AnonRRand => {
                if self.cursor < pages {
                    Access { page: self.sequential(), write: true }
                } else {
                    Access { page: self.below(pages), write: false }
                }
            }
            Workload::Pmbench { read_percent } => {
                let mean = pages as f64 / 2.0;
                let sigma = pages as f64 / 12.0;
                let draw = (mean + sigma * self.normal()).floor();
                let page = draw.clamp(0.0, (pages - 1) as f64) as u64;
                Access { page, write: !self.percent(read_percent) }
            }
            Workload::Hotspot { hot_percent, hot_access_percent, read_percent } => {
                let hot_pages = (pages * hot_percent as u64 / 100).clamp(1, pages);
                let page = if self.percent(hot_access_percent) || hot_pages == pages {
                    self.below(hot_pages)
                } else {
                    hot_pages + self.below(pages - hot_pages)
                };
                Access { page, write: !self.percent(read_percent) }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(workload: Workload, pages: u64, draws: usize) -> Vec<u64> {
        let mut counts = vec![0u64; pages as usize];
        for access in Generator::new(workload, pages, 7).take(draws) {
            counts[access.page as usize] += 1;
        }
        counts
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        for name in Workload::NAMES {
            let workload = Workload::from_name(name).unwrap();
            assert_eq!(workload.name(), name);
            // Past anon-r-rand's sequential fill of the 100 pages.
            let a: Vec<Access> = Generator::new(workload, 100, 42).take(500).collect();
            let b: Vec<Access> = Generator::new(workload, 100, 42).take(500).collect();
            let c: Vec<Access> = Generator::new(workload, 100, 43).take(500).collect();
            assert!(a == b, "{name}: the same seed must give the same stream");
            if name != "anon-w-seq" {
                assert!(a != c, "{name}: another seed, another stream");
            }
        }
        assert!(Workload::from_name("anon").is_none());
    }

    #[test]
    fn uniform_writes_cover_the_set_evenly() {
        let counts = histogram(Workload::AnonWRand, 100, 200_000);
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 1700 && *max < 2300, "uniform within 15 %: {min}..{max}");
    }

    #[test]
    fn the_sequential_sweep_wraps() {
        let pages: Vec<u64> = Generator::new(Workload::AnonWSeq, 3, 1).take(7).map(|a| a.page).collect();
        assert_eq!(pages, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn anon_r_rand_writes_everything_then_only_reads() {
        let accesses: Vec<Access> = Generator::new(Workload::AnonRRand, 50, 3).take(1050).collect();
        assert!(accesses[..50].iter().enumerate().all(|(i, a)| a.write && a.page == i as u64));
        assert!(accesses[50..].iter().all(|a| !a.write && a.page < 50));
    }

    #[test]
    fn pmbench_is_normal_around_the_middle() {
        let pages = 1200u64;
        let accesses: Vec<u64> =
            Generator::new(Workload::Pmbench { read_percent: 0 }, pages, 5).take(200_000).map(|a| a.page).collect();
        let mean = accesses.iter().sum::<u64>() as f64 / accesses.len() as f64;
        let variance = accesses.iter().map(|&p| (p as f64 - mean).powi(2)).sum::<f64>() / accesses.len() as f64;
        assert!((mean - 600.0).abs() < 2.0, "mean {mean}");
        assert!((variance.sqrt() - 100.0).abs() < 2.0, "sigma {} (set/12 = 100)", variance.sqrt());
        // About 68 % within one sigma.
        let within = accesses.iter().filter(|&&p| (500..700).contains(&p)).count() as f64 / accesses.len() as f64;
        assert!((within - 0.683).abs() < 0.01, "{within}");
    }

    #[test]
    fn pmbench_clamps_outliers_to_the_ends() {
        // A tiny set makes most draws fall outside: they land on page 0 or the last.
        let counts = histogram(Workload::Pmbench { read_percent: 0 }, 2, 10_000);
        assert_eq!(counts.iter().sum::<u64>(), 10_000);
    }

    #[test]
    fn hotspot_sends_80_percent_to_20_percent() {
        let counts = histogram(Workload::from_name("hotspot").unwrap(), 1000, 500_000);
        let hot: u64 = counts[..200].iter().sum();
        let share = hot as f64 / 500_000.0;
        assert!((share - 0.80).abs() < 0.005, "hot share {share}");
    }

    #[test]
    fn read_percent_is_honoured() {
        let workload = Workload::Hotspot { hot_percent: 20, hot_access_percent: 80, read_percent: 50 };
        let reads = Generator::new(workload, 100, 9).take(100_000).filter(|a| !a.write).count();
        assert!((reads as f64 / 100_000.0 - 0.5).abs() < 0.01);
    }
}
