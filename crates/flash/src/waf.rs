//! Steady-state write amplification of the block SSD under uniform random overwrites of
//! its live data (`znswap sim waf --model block`).
//!
//! The run fills the logical space once, optionally TRIMs a fraction of it, then
//! overwrites live pages chosen uniformly at random: first until the WAF of successive
//! rounds (one round = one physical capacity of host writes) agrees within a tolerance,
//! then for the measured rounds. Commands go one at a time, each issued when the previous
//! completes, so background GC never finds idle time and all cleaning is the paced
//! foreground kind the analytic models describe.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use znswap_core::PAGE_BYTES;

use crate::analytic::{fifo_waf, greedy_waf};
use crate::block::{BlockConfig, BlockConfigError, BlockSsd, Victim};
use crate::nand::NandConfig;
use crate::{MediaCounters, Ns};

/// Knobs of a WAF run besides utilization, block size and seed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WafRun {
    /// Superblocks of the device (at least `SUPERBLOCKS_MIN`, reserve included).
    pub superblocks: u32,
    pub victim: Victim,
    /// Fraction of the live pages TRIMmed after the fill; overwrites then touch only the rest.
    pub trim_fraction: f64,
    /// Foreground GC threshold of the device (free superblocks kept in reserve).
    pub gc_foreground_free_superblocks: u32,
    pub warmup_rounds_min: u32,
    pub warmup_rounds_max: u32,
    /// Relative change of the round WAF below which the device counts as steady.
    pub steady_tolerance: f64,
    pub measure_rounds: u32,
}

impl Default for WafRun {
    fn default() -> WafRun {
        WafRun {
            superblocks: 1024,
            victim: Victim::Greedy,
            trim_fraction: 0.0,
            gc_foreground_free_superblocks: BlockConfig::default().gc_foreground_free_superblocks,
            warmup_rounds_min: 3,
            warmup_rounds_max: 40,
            steady_tolerance: 0.01,
            measure_rounds: 4,
        }
    }
}

/// What a WAF run measured, beside what the analytic models predict for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WafReport {
    pub utilization: f64,
    pub pages_per_block: u32,
    pub superblocks: u32,
    pub victim: Victim,
    pub trim_fraction: f64,
    pub seed: u64,
    /// Total WAF seen by the data (no host GC here, so equal to `device_waf`).
    pub waf: f64,
    /// Media pages / host pages over the measured rounds.
    pub device_waf: f64,
    pub host_pages: u64,
    pub media_pages: u64,
    pub gc_pages_copied: u64,
    pub erases: u64,
    pub warmup_host_pages: u64,
    pub live_pages: u64,
    pub physical_pages: u64,
    /// Physical / live pages.
    pub alpha_nominal: f64,
    /// Pages in play (physical minus free superblocks and unwritten open write points,
    /// averaged over the measured writes) / live pages.
    pub alpha_effective: f64,
    /// Desnoyers' greedy model at `alpha_effective` and this block size.
    pub model_greedy_waf: f64,
    /// The FIFO / `Np → ∞` limit at `alpha_effective`.
    pub model_fifo_waf: f64,
}

/// Why a WAF run could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WafError {
    #[error("waf: utilization {utilization} must be in (0, 1)")]
    Utilization { utilization: f64 },
    #[error("waf: trim_fraction {trim_fraction} must be in [0, 1)")]
    TrimFraction { trim_fraction: f64 },
    #[error("waf: pages_per_block and measure_rounds must be at least 1")]
    NothingToMeasure,
    #[error("waf: the block SSD cannot be built")]
    Device(#[from] BlockConfigError),
    #[error("waf: nothing live after the trim")]
    NothingLive,
}

/// Runs uniform random overwrites at `utilization` (live / physical pages) on a block SSD
/// with `pages_per_block` pages per superblock. Deterministic in `seed`.
pub fn block_uniform_overwrite(
    utilization: f64,
    pages_per_block: u32,
    seed: u64,
    run: &WafRun,
) -> Result<WafReport, WafError> {
    if !(utilization > 0.0 && utilization < 1.0) {
        return Err(WafError::Utilization { utilization });
    }
    if !(0.0..1.0).contains(&run.trim_fraction) {
        return Err(WafError::TrimFraction { trim_fraction: run.trim_fraction });
    }
    if pages_per_block == 0 || run.measure_rounds == 0 {
        return Err(WafError::NothingToMeasure);
    }
    let physical = run.superblocks as u64 * pages_per_block as u64;
    let logical_pages = (utilization * physical as f64).round() as u64;
    // One die, one page per program: any block size is a whole stripe. Timing does not
    // change which pages the FTL copies, only when.
    let nand = NandConfig {
        channels: 1,
        dies_per_channel: 1,
        program_unit_bytes: PAGE_BYTES as u32,
        write_buffer_bytes: 64 * PAGE_BYTES as u64,
        ..NandConfig::default()
    };
    let config = BlockConfig {
        logical_pages,
        superblock_pages: pages_per_block,
        superblocks: run.superblocks,
        gc_foreground_free_superblocks: run.gc_foreground_free_superblocks,
        gc_background_free_superblocks: run.gc_foreground_free_superblocks,
        victim: run.victim,
        nand,
        ..BlockConfig::default()
    };
    let mut ssd = BlockSsd::new(config)?;
    let mut driver = Driver { ssd: &mut ssd, now: 0, rng: Xoshiro256PlusPlus::seed_from_u64(seed) };

    const FILL_CHUNK_PAGES: u64 = 64;
    let mut lpn = 0;
    while lpn < logical_pages {
        let pages = FILL_CHUNK_PAGES.min(logical_pages - lpn) as u32;
        driver.now = driver.ssd.write(driver.now, lpn, pages);
        lpn += pages as u64;
    }
    let trimmed = (run.trim_fraction * logical_pages as f64).round() as u64;
    let mut lpn = 0;
    while lpn < trimmed {
        let pages = FILL_CHUNK_PAGES.min(trimmed - lpn) as u32;
        driver.now = driver.ssd.trim(driver.now, lpn, pages);
        lpn += pages as u64;
    }
    let live = trimmed..logical_pages;
    if live.is_empty() {
        return Err(WafError::NothingLive);
    }

    let round_pages = physical;
    let warmup_start = driver.ssd.counters();
    let mut previous: Option<f64> = None;
    for round in 0..run.warmup_rounds_max {
        let before = driver.ssd.counters();
        driver.overwrite(live.clone(), round_pages, None);
        let waf = driver.ssd.counters().since(&before).waf();
        let steady = previous.is_some_and(|p| (waf - p).abs() <= run.steady_tolerance * waf);
        if round + 1 >= run.warmup_rounds_min && steady {
            break;
        }
        previous = Some(waf);
    }
    let warmup = driver.ssd.counters().since(&warmup_start);

    let before = driver.ssd.counters();
    let mut reserved_sum = 0u128;
    driver.overwrite(live.clone(), round_pages * run.measure_rounds as u64, Some(&mut reserved_sum));
    let measured = driver.ssd.counters().since(&before);
    driver.ssd.check_invariants();

    let live_pages = live.end - live.start;
    let reserved_mean = reserved_sum as f64 / measured.host_pages_written as f64;
    let alpha_effective = (physical as f64 - reserved_mean) / live_pages as f64;
    Ok(report(utilization, pages_per_block, seed, run, measured, warmup, live_pages, physical, alpha_effective))
}

#[allow(clippy::too_many_arguments)]
fn report(
    utilization: f64,
    pages_per_block: u32,
    seed: u64,
    run: &WafRun,
    measured: MediaCounters,
    warmup: MediaCounters,
    live_pages: u64,
    physical_pages: u64,
    alpha_effective: f64,
) -> WafReport {
    let model = |f: &dyn Fn(f64) -> f64| if alpha_effective > 1.0 { f(alpha_effective) } else { f64::INFINITY };
    WafReport {
        utilization,
        pages_per_block,
        superblocks: run.superblocks,
        victim: run.victim,
        trim_fraction: run.trim_fraction,
        seed,
        waf: measured.waf(),
        device_waf: measured.waf(),
        host_pages: measured.host_pages_written,
        media_pages: measured.media_pages_written,
        gc_pages_copied: measured.gc_pages_copied,
        erases: measured.erases,
        warmup_host_pages: warmup.host_pages_written,
        live_pages,
        physical_pages,
        alpha_nominal: physical_pages as f64 / live_pages as f64,
        alpha_effective,
        model_greedy_waf: model(&|alpha| greedy_waf(alpha, pages_per_block)),
        model_fifo_waf: model(&fifo_waf),
    }
}

struct Driver<'a> {
    ssd: &'a mut BlockSsd,
    now: Ns,
    rng: Xoshiro256PlusPlus,
}

impl Driver<'_> {
    /// `count` single-page overwrites of pages drawn uniformly from `live`; optionally
    /// sums the reserved pages seen before each write.
    fn overwrite(&mut self, live: std::ops::Range<u64>, count: u64, mut reserved_sum: Option<&mut u128>) {
        let span = live.end - live.start;
        for _ in 0..count {
            // Lemire's multiply-shift: uniform enough for spans far below 2^64.
            let lpn = live.start + ((self.rng.next_u64() as u128 * span as u128) >> 64) as u64;
            if let Some(sum) = reserved_sum.as_deref_mut() {
                *sum += self.ssd.reserved_pages() as u128;
            }
            self.now = self.ssd.write(self.now, lpn, 1);
        }
    }
}
