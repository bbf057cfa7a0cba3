//! How large the simulated machine is, and the building blocks of the experiments.
//!
//! The paper's setup (§6): a 512 GiB swap partition on 1 TB SSDs with 12 % effective
//! over-provisioning for both, ZN540 zones of 1077 MiB capacity (about 475 of them
//! for the swap), 32 cores, 64 benchmark threads in a 2 GiB memory cgroup. Here every
//! size is scaled by the same factor (swap, memory, working sets), zones are scaled down
//! so there are a few hundred (capacity / size stays 1077/2048), and the device's NAND
//! timing is unchanged, so bandwidths and latencies keep their units.
//!
//! The block SSD keeps the real drive's erase unit (a 1077 MiB superblock, one block on
//! every die) and has fewer of them, so a 512-slot swap cluster stays 1/538 of one, as
//! long as at least `BlockConfig::min_superblocks` (64) remain; below that (every scale
//! here: 16 GiB of swap would hold only 18) the superblocks shrink to give 64, and the
//! cluster is 1/143 of one at the full scale, 1/36 in the key-value runs, 1/9 at the quick
//! scale (the old model: 1/36 at the full scale). Why 64 and not fewer: `crates/flash/README.md`.

use serde::Serialize;
use znswap_core::PAGE_BYTES;
use znswap_workload::Workload;

use crate::calib::CpuCosts;
use crate::events::{Ns, SECOND_NS};
use crate::run::{BackendKind, DiscardMode, Phase, RunConfig, TenantConfig};
use crate::workloads::WorkSpec;

pub const GIB_PAGES: u64 = (1 << 30) / PAGE_BYTES as u64;
/// The paper's swap partition, in pages.
pub const PAPER_SWAP_PAGES: u64 = 512 * GIB_PAGES;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Scale {
    pub name: &'static str,
    /// The swap partition of the vm-scalability / pmbench experiments.
    pub swap_pages: u64,
    pub zones: u32,
    /// The key-value experiments' swap (smaller: their memory equals the swap size).
    pub kv_swap_pages: u64,
    pub kv_zones: u32,
    pub cpus: u32,
    pub threads: u32,
    /// Swap-out volume before measuring, in swap sizes (device fill and GC steady state).
    pub warmup_swaps: f64,
    /// Swap-out volume measured, in swap sizes.
    pub measure_swaps: f64,
    /// Warm-up of the placement comparisons (§6.1.2, Fig. 13), in swap sizes: where the
    /// policies differ, their zones settle only after a few swap sizes. Per-core's WAF at
    /// 90 % swapped: §6.1.2 1.10 after 1.2 swap sizes, 1.15 after 3; Fig. 13 1.34 after 1,
    /// 1.51 after 3, 1.53 after 5 (full scale, seed 1).
    pub placement_warmup_swaps: f64,
    /// Fewer points per curve.
    pub quick: bool,
}

impl Scale {
    /// The report's scale: 16 GiB of swap (1/32 of the paper's), 288 zones of 63 MiB.
    pub fn full() -> Scale {
        Scale {
            name: "full",
            swap_pages: 16 * GIB_PAGES,
            zones: 288,
            kv_swap_pages: 4 * GIB_PAGES,
            kv_zones: 144,
            cpus: 32,
            threads: 64,
            warmup_swaps: 1.5,
            measure_swaps: 1.0,
            placement_warmup_swaps: 3.0,
            quick: false,
        }
    }

    /// CI's scale: 1 GiB of swap, 64 zones, short runs, few points.
    pub fn quick() -> Scale {
        Scale {
            name: "quick",
            swap_pages: GIB_PAGES,
            zones: 64,
            kv_swap_pages: GIB_PAGES / 2,
            kv_zones: 48,
            cpus: 32,
            threads: 64,
            warmup_swaps: 1.2,
            measure_swaps: 0.5,
            placement_warmup_swaps: 2.0,
            quick: true,
        }
    }

    /// Tests' scale: 256 MiB of swap (the block SSD's superblocks shrink to 4 MiB there,
    /// to keep its floor of 64; see `znswap_flash::BlockConfig`).
    pub fn tiny() -> Scale {
        Scale {
            name: "tiny",
            swap_pages: GIB_PAGES / 4,
            zones: 48,
            kv_swap_pages: GIB_PAGES / 4,
            kv_zones: 48,
            cpus: 8,
            threads: 16,
            warmup_swaps: 1.0,
            measure_swaps: 0.3,
            placement_warmup_swaps: 1.0,
            quick: true,
        }
    }

    pub fn by_name(name: &str) -> Option<Scale> {
        match name {
            "full" => Some(Scale::full()),
            "quick" => Some(Scale::quick()),
            "tiny" => Some(Scale::tiny()),
            _ => None,
        }
    }

    /// Scale factor against the paper's 512 GiB swap.
    pub fn factor(&self) -> f64 {
        self.swap_pages as f64 / PAPER_SWAP_PAGES as f64
    }

    /// The paper's 2 GiB memory cgroup, scaled (at least 4096 pages).
    pub fn cgroup_memory_pages(&self) -> u32 {
        ((2 * GIB_PAGES) as f64 * self.factor()).max(4096.0) as u32
    }

    pub fn swap_bytes(&self, swaps: f64) -> u64 {
        (self.swap_pages as f64 * swaps) as u64 * PAGE_BYTES as u64
    }

    pub fn describe(&self) -> String {
        format!(
            "{} scale: {:.2} GiB swap (1/{:.0} of the paper's 512 GiB) on {} zones; key-value runs {:.2} GiB swap on \
             {} zones; {} cores, {} benchmark threads",
            self.name,
            self.swap_pages as f64 / GIB_PAGES as f64,
            1.0 / self.factor(),
            self.zones,
            self.kv_swap_pages as f64 / GIB_PAGES as f64,
            self.kv_zones,
            self.cpus,
            self.threads
        )
    }
}

/// A short, unique id of a back end for run names.
pub fn backend_id(backend: &BackendKind) -> String {
    match backend {
        BackendKind::Znswap { policy, gc_streams, .. } => format!("zns-{policy:?}-{gc_streams}").to_lowercase(),
        BackendKind::Linux { discard, swap_full_cutoff } => {
            let base = match discard {
                DiscardMode::None => "linux",
                DiscardMode::Pages => "linux-trim512",
                DiscardMode::Fine8 => "linux-trim8",
            };
            if (*swap_full_cutoff - 0.5).abs() < 1e-9 {
                base.to_string()
            } else {
                format!("{base}-cutoff{:.0}", swap_full_cutoff * 100.0)
            }
        }
    }
}

/// A vm-scalability / pmbench tenant: `threads` threads on slices of `pages`.
pub fn page_tenant(name: &str, workload: Workload, pages: u64, memory_pages: u32, threads: u32) -> TenantConfig {
    TenantConfig {
        name: name.into(),
        work: WorkSpec::pages(workload),
        pages,
        memory_pages,
        threads,
        accesses_per_thread: None,
        read_limit_bytes_s: None,
        write_limit_bytes_s: None,
        slot_limit: None,
        request_cpu_ns: 0,
        access_cpu_ns: None,
    }
}

/// A run on the scale's machine and swap size.
pub fn base_config(
    scale: &Scale,
    seed: u64,
    name: String,
    backend: BackendKind,
    tenants: Vec<TenantConfig>,
    warmup: Phase,
    measure: Phase,
) -> RunConfig {
    RunConfig {
        name: format!("{}/s{seed}/{name}/{}", scale.name, backend_id(&backend)),
        seed,
        backend,
        swap_pages: scale.swap_pages,
        over_provisioning: 0.12,
        zones: scale.zones,
        cpus: scale.cpus,
        costs: CpuCosts::default(),
        tenants,
        warmup,
        measure,
        sample_ns: SECOND_NS,
        precondition: true,
    }
}

/// A phase bounded by swap-out volume (in swap sizes) and, as a safety net, by
/// virtual time: at least 10 MiB/s is expected of any configuration.
pub fn swap_out_phase(scale: &Scale, swaps: f64) -> Phase {
    let bytes = scale.swap_bytes(swaps);
    Phase::swap_out(bytes, safety_ns(bytes))
}

pub fn swap_in_phase(scale: &Scale, swaps: f64) -> Phase {
    let bytes = scale.swap_bytes(swaps);
    Phase::swap_in(bytes, safety_ns(bytes))
}

pub fn safety_ns(bytes: u64) -> Ns {
    (bytes / (10 << 20)).max(10) * SECOND_NS
}
