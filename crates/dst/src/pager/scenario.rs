//! The pager DST's per-seed scenario: fault mode, threads, regions, budget, device
//! geometry, access pattern and injected faults.

use serde::Serialize;
use znswap_core::{Geometry, PolicyKind};

use crate::scenario::{below, chance, Rng};

/// How faults are served, as the live pager's `FaultMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PagerFaultMode {
    /// The faulting thread resolves its own fault (SIGBUS).
    SelfPaging,
    /// Handler threads read fault events; the faulting thread sleeps until woken.
    HandlerThreads(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Access {
    Uniform,
    /// 80 % of accesses on the first 20 % of a region.
    Hot,
    /// Runs of consecutive pages (read-ahead and zero fill-around).
    Sequential,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PagerFaults {
    pub append_error: f64,
    pub read_error: f64,
    pub reset_error: f64,
    /// Zones taken offline during the run (the pager learns of it by I/O errors).
    pub offline_zones: u32,
    /// Swapped pages whose bytes on the device are altered during the run (a bit of
    /// their slot flipped): with sealed pages each must be reported lost when read,
    /// never delivered; without, the oracle sees the wrong bytes (a corruption).
    pub altered_pages: u32,
    /// The chance that a move to or from a shadow page that the kernel did fails all the
    /// same (`EEXIST`), as Linux 6.18's `move_pages()` can
    /// (`znswap_pager_core::park_outcome`): the shells then learn from the page map
    /// where the page is.
    pub misreported_moves: f64,
    /// The chance that a served process's agent answers a discard late
    /// (`DropDelay::Late`: stopped, held by a fork, slow): it zaps the pages and answers
    /// some steps later, while the pager goes on.
    pub late_discards: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PagerScenario {
    pub fault_mode: PagerFaultMode,
    /// Faults a handler reads may be set aside while their tenant's write limit holds
    /// them (`Next::Aside`, as a served process's are), with this many spare fault
    /// slots (0: never set aside).
    pub aside_spares: usize,
    /// `CoreConfig::refault_passes`.
    pub refault_passes: bool,
    pub app_threads: u32,
    pub evictor_threads: u32,
    pub io_threads: u32,
    /// Region sizes in pages at the start (regions are freed and others added during
    /// the run).
    pub region_pages: Vec<u64>,
    pub budget_pages: u64,
    pub slack_pages: u64,
    pub evict_batch_pages: usize,
    pub reference_sampling: bool,
    /// `CoreConfig::sampling_period_max`.
    pub sampling_period_max: u32,
    pub readahead_pages: u32,
    /// Pages of the inactive list (0: no parking).
    pub park_pages: u64,
    /// Pages are sealed (encrypted and authenticated, `znswap-seal`) on their way to
    /// the device, as `znswap run --encrypt` does; read-ahead is off then.
    pub encrypt: bool,
    /// Writes are seen without faults (`UFFD_FEATURE_WP_ASYNC`, as `--wp-async`): only
    /// with parking and handler threads.
    pub wp_async: bool,
    pub policy: PolicyKind,
    pub tenants: u32,
    pub geometry: Geometry,
    /// The device keeps no per-page records: chunk footers.
    pub chunk_footer: bool,
    pub access: Access,
    /// Share of accesses that write.
    pub write_share: f64,
    /// Share of writes that leave the page all zero (zero pages are not written out).
    pub zero_write_share: f64,
    /// A region is freed (and another added) about once per this many steps; 0: never.
    pub region_churn_steps: u64,
    /// The program discards a range (a userfaultfd REMOVE) about once per this many
    /// steps; 0: never. Handler threads only: what `znswap run` pages.
    pub program_discard_steps: u64,
    /// The program forks about once per this many steps (the child reads its snapshot
    /// while the parent runs on); 0: never.
    pub fork_steps: u64,
    /// The budget changes (as `znswap run` moves it with what else the program holds
    /// resident) about once per this many steps; 0: never.
    pub budget_change_steps: u64,
    pub faults: PagerFaults,
}

impl PagerScenario {
    pub fn random(rng: &mut Rng) -> PagerScenario {
        let fault_mode = if chance(rng, 0.5) {
            PagerFaultMode::SelfPaging
        } else {
            PagerFaultMode::HandlerThreads(1 + below(rng, 3) as u32)
        };
        let regions = 1 + below(rng, 3) as usize;
        let region_pages: Vec<u64> = (0..regions).map(|_| 64 + below(rng, 700)).collect();
        let total: u64 = region_pages.iter().sum();
        let evict_batch_pages = [4usize, 8, 16, 32][below(rng, 4) as usize];
        let budget_pages = (total / (2 + below(rng, 6))).max(2 * evict_batch_pages as u64 + 1);
        let chunk_footer = chance(rng, 0.3);
        let granularity = if chunk_footer && chance(rng, 0.3) { 4 } else { 1 };
        let zone_capacity_pages = granularity * (16 + below(rng, 48) as u32);
        // Sized so the working set fills a third to most of the device (the GC runs);
        // one seed in ten gets a device too small for it (swap full: the budget gives).
        let utilization =
            if chance(rng, 0.1) { 1.3 + below(rng, 50) as f64 / 100.0 } else { 0.3 + below(rng, 45) as f64 / 100.0 };
        let slots_wanted = (total as f64 / utilization) as u64;
        let max_open = 3 + below(rng, 4) as u32;
        let zone_count = (slots_wanted / zone_capacity_pages as u64) as u32 + max_open + 8;
        let geometry = Geometry {
            zone_count,
            zone_capacity_pages,
            metadata_bytes: if chunk_footer {
                [0, 8][below(rng, 2) as usize]
            } else {
                [16, 64][below(rng, 2) as usize]
            },
            write_granularity_pages: granularity,
            max_open_zones: max_open,
            max_active_zones: max_open + below(rng, 2) as u32,
            // A footer append is one chunk: 16 pages at a 4 KiB granularity.
            zone_append_pages_max: if chunk_footer && granularity == 1 {
                16 + below(rng, 16) as u32
            } else {
                granularity * (4 + below(rng, 13) as u32)
            },
        };
        let faults = PagerFaults {
            append_error: [0.0, 0.0, 0.002, 0.02][below(rng, 4) as usize],
            read_error: [0.0, 0.0, 0.002, 0.02][below(rng, 4) as usize],
            reset_error: [0.0, 0.01, 0.1][below(rng, 3) as usize],
            offline_zones: [0, 0, 0, 1, 2][below(rng, 5) as usize],
            // Drawn by the caller from a stream of its own, with `encrypt`.
            altered_pages: 0,
            // Drawn by the caller from a stream of its own, with parking.
            misreported_moves: 0.0,
            // Drawn by the caller from a stream of its own.
            late_discards: 0.0,
        };
        let mut scenario = PagerScenario {
            fault_mode,
            // Drawn by the caller from a stream of its own.
            aside_spares: 0,
            refault_passes: true,
            app_threads: 1 + below(rng, 4) as u32,
            evictor_threads: 1 + chance(rng, 0.25) as u32,
            io_threads: 1 + chance(rng, 0.25) as u32,
            region_pages,
            budget_pages,
            slack_pages: [0, 8, 32, 128][below(rng, 4) as usize],
            evict_batch_pages,
            reference_sampling: chance(rng, 0.7),
            // Drawn by the caller from a stream of its own.
            sampling_period_max: 1,
            readahead_pages: if chance(rng, 0.5) { 1 + below(rng, 8) as u32 } else { 0 },
            // Drawn by the caller from a stream of its own, as the budget's changes.
            park_pages: 0,
            encrypt: false,
            // Drawn by the caller from a stream of its own, with parking.
            wp_async: false,
            policy: [PolicyKind::PerCore, PolicyKind::HotCold, PolicyKind::Tenant][below(rng, 3) as usize],
            tenants: 1 + below(rng, 2) as u32,
            geometry,
            chunk_footer,
            access: [Access::Uniform, Access::Hot, Access::Sequential][below(rng, 3) as usize],
            write_share: [0.2, 0.5, 0.9][below(rng, 3) as usize],
            zero_write_share: [0.0, 0.02, 0.1][below(rng, 3) as usize],
            region_churn_steps: [0, 20_000, 200_000][below(rng, 3) as usize],
            program_discard_steps: match fault_mode {
                PagerFaultMode::HandlerThreads(_) => [0, 2_000, 20_000][below(rng, 3) as usize],
                PagerFaultMode::SelfPaging => 0,
            },
            fork_steps: [0, 100_000, 400_000][below(rng, 3) as usize],
            // Drawn by the caller from a stream of its own, so the draws above (and the
            // world's after them) stay what they were for every seed.
            budget_change_steps: 0,
            faults,
        };
        // Hot/cold seeds with two tenants run lifetime (three GC streams): decided from
        // the draws above so they keep their meaning.
        if scenario.policy == PolicyKind::HotCold && scenario.tenants == 2 {
            scenario.policy = PolicyKind::Lifetime;
        }
        scenario
    }
}
