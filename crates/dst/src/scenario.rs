//! Options and the per-seed randomised scenario (geometry, policy, encoding, faults).

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use znswap_core::driver::Stage;
use znswap_core::{Geometry, PolicyKind, ResetMode, SwapCacheMode, VictimSelection};

pub type Rng = Xoshiro256PlusPlus;

pub fn rng(seed: u64) -> Rng {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

pub fn below(rng: &mut Rng, bound: u64) -> u64 {
    assert!(bound > 0);
    rng.next_u64() % bound
}

pub fn chance(rng: &mut Rng, probability: f64) -> bool {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= probability && probability > 0.0
}

/// A scenario's chance of a device error for a request at `stage`: appends, reads, and
/// zone commands (resets and finishes) each have their own.
pub fn error_probability(stage: Stage, append_error: f64, read_error: f64, reset_error: f64) -> f64 {
    match stage {
        Stage::SwapOutAppend | Stage::GcAppend => append_error,
        Stage::SwapInRead | Stage::GcDataRead | Stage::GcFooterRead => read_error,
        Stage::Reset | Stage::Finish => reset_error,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Workload {
    /// Random swap-outs, swap-ins, writes and frees with delayed, reordered completions.
    Mixed,
    /// Each op overwrites one page chosen uniformly: swap in, write, swap out.
    UniformOverwrite,
    /// As above, 80 % of the overwrites on 20 % of the pages.
    SkewedOverwrite,
    /// Each op reads one page chosen uniformly (swap in, no write) and swaps it out
    /// again: the swap cache's case (Fig. 3, 4 of the paper).
    UniformRead,
    /// Each op frees a 32-page block and rewrites it: whole zones die at once, the case
    /// where FAR saves erases.
    Churn,
    /// The placement probe: every page is written once in order, then each op draws a
    /// page from the access generator (pmbench, hotspot, YCSB) and swaps it in, writes
    /// it if the access is a write, and swaps it out. Every page lives on the device, so
    /// the utilization is exact and steady.
    Generated(znswap_workload::Workload),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Faults {
    pub append_error: f64,
    pub read_error: f64,
    /// Reset and finish failures.
    pub reset_error: f64,
    /// A bit flipped in a record the GC reads back.
    pub record_corruption: f64,
    /// Zones taken offline during the run.
    pub offline_zones: u32,
    /// Completion delay bound: completions reorder within it.
    pub delay_ns_max: u64,
}

impl Faults {
    pub fn none() -> Faults {
        Faults {
            append_error: 0.0,
            read_error: 0.0,
            reset_error: 0.0,
            record_corruption: 0.0,
            offline_zones: 0,
            delay_ns_max: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scenario {
    pub geometry: Geometry,
    /// Force the chunk footer even when metadata would do.
    pub footer: bool,
    pub policy: PolicyKind,
    pub victim_selection: VictimSelection,
    pub swap_cache: SwapCacheMode,
    pub reset_mode: ResetMode,
    pub gc_victims_max: u32,
    pub gc_batch_pages_max: u32,
    /// Unoccupied slots a GC read may span.
    pub gc_read_gap_pages_max: u32,
    pub gc_streams: u32,
    pub owners: u32,
    pub tenants: u32,
    pub cores: u32,
    /// Share of the slots outside the GC watermark, reserve and open zones that the
    /// swapped-out pages fill: owner pages for the overwrite workloads (every page is
    /// swapped out once warm), more for Mixed, which keeps only about a third out.
    pub utilization: f64,
    pub workload: Workload,
    pub faults: Faults,
    /// Owner pages, overriding `utilization` (the WAF table: a share of all slots).
    pub owner_pages: Option<u64>,
    /// GC (low, high) watermarks in empty zones, overriding the defaults.
    pub gc_watermarks: Option<(u32, u32)>,
    /// Cold-owner cycles: an extra owner swaps out cold pages until the GC has to
    /// run, keeps reading and rewriting a few while it does, then is released whole.
    /// Without them a seed at low utilization or with small zones never needs the GC
    /// (zones die whole first), and the GC's races with frees and releases go untested.
    pub cold_cycles: bool,
    /// `Config::idle_zone_finish_pages` (0: the default, one device write). Short ones
    /// finish zones of swap-zones still in use, to test the finish against the GC, faults
    /// and swap-outs.
    pub idle_zone_finish_pages: u64,
}

impl Scenario {
    /// A random scenario from a seed: small and large zones, non-power-of-two sizes,
    /// both record encodings, all policies.
    pub fn random(rng: &mut Rng) -> Scenario {
        let granularity = [1, 1, 1, 4, 6, 12][below(rng, 6) as usize];
        let capacity = granularity * (8 + below(rng, 300 / granularity as u64) as u32).max(2);
        let capacity = if granularity == 1 { capacity.max(9) } else { capacity };
        // One seed in five: thousands of small zones (victim choice must stay cheap).
        let many_zones = chance(rng, 0.2);
        let zone_count = if many_zones { 1000 + below(rng, 2000) as u32 } else { 24 + below(rng, 180) as u32 };
        let capacity =
            if many_zones { granularity * (2 + below(rng, 64 / granularity as u64) as u32) } else { capacity };
        let capacity = if granularity == 1 { capacity.max(9) } else { capacity };
        // Sometimes no open limit at all (the engine then uses `swap_zones_default`).
        let max_open = if chance(rng, 0.1) { 0 } else { 2 + below(rng, 7) as u32 };
        let max_active = if chance(rng, 0.5) || max_open == 0 { 0 } else { max_open + below(rng, 3) as u32 };
        let metadata_bytes = [0, 8, 16, 64][below(rng, 4) as usize];
        let zone_append_pages_max = granularity * (1 + below(rng, 16) as u32);
        let geometry = Geometry {
            zone_count,
            zone_capacity_pages: capacity,
            metadata_bytes,
            write_granularity_pages: granularity,
            max_open_zones: max_open,
            max_active_zones: max_active,
            zone_append_pages_max,
        };
        let policy = [PolicyKind::PerCore, PolicyKind::HotCold, PolicyKind::Tenant][below(rng, 3) as usize];
        let swap_cache =
            [SwapCacheMode::Adaptive, SwapCacheMode::StaticHalf, SwapCacheMode::Off][below(rng, 3) as usize];
        let faults = Faults {
            append_error: [0.0, 0.001, 0.01][below(rng, 3) as usize],
            read_error: [0.0, 0.001, 0.01][below(rng, 3) as usize],
            reset_error: [0.0, 0.01, 0.1][below(rng, 3) as usize],
            record_corruption: [0.0, 0.0, 0.001][below(rng, 3) as usize],
            offline_zones: [0, 0, 1, 2][below(rng, 4) as usize],
            delay_ns_max: [0, 10_000, 200_000][below(rng, 3) as usize],
        };
        let mut scenario = Scenario {
            geometry,
            footer: chance(rng, 0.3),
            policy,
            victim_selection: if chance(rng, 0.5) { VictimSelection::Greedy } else { VictimSelection::CostBenefit },
            swap_cache,
            reset_mode: if chance(rng, 0.7) { ResetMode::Far } else { ResetMode::Eager },
            gc_victims_max: 1 + below(rng, 4) as u32,
            gc_batch_pages_max: [8, 32, 128, 1024][below(rng, 4) as usize],
            gc_streams: 1 + below(rng, 2) as u32,
            owners: 1 + below(rng, 8) as u32,
            tenants: 1 + below(rng, 4) as u32,
            cores: 1 + below(rng, 8) as u32,
            utilization: 0.1 + below(rng, 76) as f64 / 100.0,
            workload: [Workload::Mixed, Workload::Mixed, Workload::Mixed, Workload::SkewedOverwrite]
                [below(rng, 4) as usize],
            faults,
            owner_pages: None,
            gc_watermarks: None,
            // Drawn last, so the draws above (and the seeds that found bugs) keep their
            // meaning.
            gc_read_gap_pages_max: [0, 1, 8, 63][below(rng, 4) as usize],
            cold_cycles: true,
            idle_zone_finish_pages: 0,
        };
        // From the draws above, not a new one, so every seed keeps its run: a third of the
        // seeds each finish zones idle for a quarter of a zone's worth of pages, or a zone's.
        let zone = u64::from(scenario.geometry.zone_capacity_pages);
        scenario.idle_zone_finish_pages =
            [0, (zone / 4).max(1), zone][((scenario.owners + scenario.cores) % 3) as usize];
        // Hot/cold seeds that drew cost-benefit victims run lifetime, which picks those
        // victims itself; decided from the draws above so they keep their meaning. Two
        // streams drawn means as many as the policy splits survivors into (lifetime: 3).
        if scenario.policy == PolicyKind::HotCold && scenario.victim_selection == VictimSelection::CostBenefit {
            scenario.policy = PolicyKind::Lifetime;
        }
        if scenario.gc_streams > 1 {
            scenario.gc_streams = scenario.policy.gc_streams().max(2);
        }
        scenario
    }

    /// The WAF experiment: large zones, no faults, uniform or skewed overwrites.
    pub fn overwrite(
        utilization: f64,
        victim_selection: VictimSelection,
        policy: PolicyKind,
        skewed: bool,
    ) -> Scenario {
        Scenario {
            geometry: Geometry {
                zone_count: 256,
                zone_capacity_pages: 1024,
                metadata_bytes: 16,
                write_granularity_pages: 1,
                max_open_zones: 8,
                max_active_zones: 8,
                zone_append_pages_max: 64,
            },
            footer: false,
            policy,
            victim_selection,
            swap_cache: SwapCacheMode::Adaptive,
            reset_mode: ResetMode::Far,
            gc_victims_max: 1,
            gc_batch_pages_max: 1024,
            gc_read_gap_pages_max: 8,
            // Hot/cold splits GC survivors too.
            gc_streams: policy.gc_streams(),
            owners: 1,
            tenants: 1,
            cores: 1,
            utilization,
            workload: if skewed { Workload::SkewedOverwrite } else { Workload::UniformOverwrite },
            faults: Faults::none(),
            // Utilization here is of all slots, as in the analytic models.
            owner_pages: Some((256.0 * 1024.0 * utilization) as u64),
            gc_watermarks: Some((4, 6)),
            // The WAF tables measure the workload alone.
            cold_cycles: false,
            idle_zone_finish_pages: 0,
        }
    }
}
