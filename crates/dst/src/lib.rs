//! Deterministic simulation testing of the znswap engine.
//!
//! One seed picks a scenario (geometry incl. non-power-of-two zones, record encoding,
//! policy, victim selection, swap cache and reset modes, faults, utilization) and drives
//! the engine through `ops` random operations against the reference driver's model device
//! (`znswap_core::driver`) with seeded faults, and an oracle of every page's last written
//! version (`sim`). The same seed reproduces the same run; the report names the seed on
//! any violation.

// `is_multiple_of` and `is_none_or` are newer than the workspace's rust-version (1.80).
#![allow(clippy::manual_is_multiple_of, clippy::unnecessary_map_or)]

pub mod coverage;
pub mod pager;
pub mod scenario;
pub mod sim;

use serde::Serialize;
use znswap_core::{Config, Stats};

pub use coverage::{Coverage, Floors, FloorsError, Shortfall};
pub use scenario::{Faults, Scenario, Workload};
pub use sim::FaultHits;

#[derive(Clone, Debug)]
pub struct DstOptions {
    pub seed: u64,
    pub ops: u64,
    /// Replace the seed's random scenario (the WAF experiments).
    pub scenario: Option<Scenario>,
    /// Check the engine's invariants every this many ops (0: only at the end).
    pub check_every_ops: u64,
    /// Ops before the WAF measurement window starts.
    pub warmup_ops: u64,
    /// Build the engine's policy instead of `scenario.policy` (the placement probe's
    /// oracle, which knows each page's true access rate).
    pub policy: Option<PolicyFactory>,
}

/// Builds a policy for a scenario whose owner pages are set.
pub type PolicyFactory = fn(&Scenario) -> Box<dyn znswap_core::Policy>;

impl DstOptions {
    pub fn new(seed: u64, ops: u64) -> DstOptions {
        DstOptions { seed, ops, scenario: None, check_every_ops: 100_000, warmup_ops: 0, policy: None }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct DstReport {
    pub seed: u64,
    pub ops: u64,
    /// Swap-ins read from the device and checked against the oracle.
    pub pages_verified: u64,
    /// Pages reported lost (their zone went offline).
    pub lost: u64,
    /// Swap-ins that returned anything but the last written version.
    pub corrupted: u64,
    /// Device pages written per host page, over the measurement window.
    pub waf: f64,
    pub gc_runs: u64,
    pub violations: Vec<String>,
    /// The workload's owner pages (the cold owner's are not counted).
    pub owner_pages: u64,
    pub zones_taken_offline: u32,
    pub records_corrupted: u64,
    /// Owners freed whole, unregistered once drained and registered again (the cold
    /// owner included).
    pub owners_reused: u64,
    /// Cold-owner cycles run to their release (`Scenario::cold_cycles`).
    pub cold_cycles: u64,
    pub cold_pages_written: u64,
    /// Peak share of all slots holding valid pages, sampled every 1024 ops.
    pub valid_share_peak: f64,
    /// Faults injected, by the stage of the request they hit.
    pub faults: FaultHits,
    /// Completions delivered while a request submitted before them was pending.
    pub completions_reordered: u64,
    /// Ops the swap spent full (below the GC low watermark, swap-outs refused) with
    /// the GC collecting nothing and under half the usable slots valid: small zones
    /// whose GC footer padding would eat the gain (see `Sim::check_progress`).
    pub ops_gc_idle_while_full: u64,
    /// Ops with no empty zone, the GC's reserve used up (sampled every 1024 ops).
    pub ops_without_empty_zone: u64,
    pub scenario: Scenario,
    pub stats: Stats,
    /// Counters over the measurement window (after `warmup_ops`).
    pub window: Stats,
    /// GC bytes moved on behalf of each tenant.
    pub tenant_gc_bytes: Vec<u64>,
    /// Host bytes per 4 KiB slot (slot maps, victim index, footer bitmap).
    pub host_bytes_per_slot: f64,
    pub policy: &'static str,
}

impl DstReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.corrupted == 0
    }
}

/// A valid engine config for a scenario; random geometries that break a rule are
/// repaired deterministically (more zones, a larger append limit).
pub fn config_for(scenario: &mut Scenario) -> Config {
    for _ in 0..64 {
        let mut config = Config::new(scenario.geometry);
        if scenario.footer {
            config.record_encoding = Some(znswap_core::RecordEncoding::ChunkFooter);
        }
        config.victim_selection = scenario.victim_selection;
        config.swap_cache = scenario.swap_cache;
        config.reset_mode = scenario.reset_mode;
        config.gc_victims_max = scenario.gc_victims_max;
        config.gc_batch_pages_max = scenario.gc_batch_pages_max;
        config.gc_read_gap_pages_max = scenario.gc_read_gap_pages_max;
        config.idle_zone_finish_pages = scenario.idle_zone_finish_pages;
        config.gc_streams = scenario.gc_streams;
        config.tenants_max = scenario.tenants.max(1);
        config.owners_max = scenario.owners.max(1) + u32::from(scenario.cold_cycles);
        config.io_in_flight_max = 64;
        config.chunk_flush_timeout_ns = 5_000_000;
        if let Some((low, high)) = scenario.gc_watermarks {
            config.gc_low_watermark_zones = low;
            config.gc_high_watermark_zones = high;
        }
        match config.derive() {
            Ok(_) => return config,
            Err(znswap_core::ConfigError::Invalid { field, .. }) => {
                let geometry = &mut scenario.geometry;
                match field {
                    "zone_append_pages_max" | "record_encoding" | "chunk_pages" => {
                        geometry.zone_append_pages_max =
                            geometry.zone_append_pages_max.max(16 * geometry.write_granularity_pages).max(16);
                        if field == "record_encoding" {
                            scenario.footer = false;
                        }
                    }
                    "max_open_zones" if scenario.gc_streams > 1 => scenario.gc_streams -= 1,
                    _ => geometry.zone_count += 16,
                }
            }
            Err(error) => panic!("{error}"),
        }
    }
    panic!("no valid config for {scenario:?}");
}

/// Runs one seed. Never panics: an engine panic becomes a violation naming the seed.
pub fn run(options: &DstOptions) -> DstReport {
    let mut rng = scenario::rng(options.seed);
    let mut scenario = options.scenario.clone().unwrap_or_else(|| Scenario::random(&mut rng));
    let config = config_for(&mut scenario);
    let mut sim = sim::Sim::new(scenario.clone(), config, options.seed, options.ops, options.policy);
    let mut baseline = Stats::default();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for op in 0..options.ops {
            if op == options.warmup_ops && op > 0 {
                baseline = sim.engine.stats().clone();
            }
            sim.step(op);
            if options.check_every_ops > 0 && op % options.check_every_ops == options.check_every_ops - 1 {
                sim.check_invariants();
            }
            if !sim.violations.is_empty() {
                break;
            }
        }
        if sim.violations.is_empty() {
            sim.finish();
        }
    }));
    if let Err(panic) = outcome {
        let message = sim::panic_message(&panic);
        sim.violations.push(format!("panic: {message}"));
    }
    let stats = sim.engine.stats().clone();
    let waf = stats.since(&baseline).waf();
    let mut violations = sim.violations.clone();
    if !violations.is_empty() {
        violations.push(format!("reproduce with seed {}", options.seed));
    }
    DstReport {
        seed: options.seed,
        ops: options.ops,
        pages_verified: sim.pages_verified,
        lost: sim.lost,
        corrupted: sim.corrupted,
        waf,
        gc_runs: stats.gc_runs,
        violations,
        owner_pages: sim.page_count(),
        zones_taken_offline: sim.zones_taken_offline,
        records_corrupted: sim.records_corrupted,
        owners_reused: sim.owners_reused,
        cold_cycles: sim.cold_cycles_done,
        cold_pages_written: sim.cold_pages_written,
        valid_share_peak: sim.valid_share_peak,
        faults: sim.faults.clone(),
        completions_reordered: sim.completions_reordered,
        ops_gc_idle_while_full: sim.ops_gc_idle_while_full,
        ops_without_empty_zone: sim.ops_without_empty_zone,
        host_bytes_per_slot: sim.engine.host_memory().bytes_per_slot,
        policy: sim.engine.policy_name(),
        window: stats.since(&baseline),
        tenant_gc_bytes: sim.engine.tenant_gc_bytes()[..scenario.tenants as usize].to_vec(),
        scenario,
        stats,
    }
}
