//! Small runs for the tests: the tiny scale (256 MiB of swap), a few threads.

#![allow(dead_code)]

use znswap_core::PolicyKind;
use znswap_sim::paper::scale::{base_config, page_tenant, swap_out_phase, Scale};
use znswap_sim::run::{BackendKind, DiscardMode, RunConfig};
use znswap_workload::Workload;

pub fn scale() -> Scale {
    Scale::tiny()
}

/// Random writes with `percent` of the swap holding swapped-out data.
pub fn wrand(percent: u64, backend: BackendKind, seed: u64) -> RunConfig {
    let scale = scale();
    let memory = scale.cgroup_memory_pages();
    let pages = scale.swap_pages * percent / 100 + memory as u64;
    let tenant = page_tenant("test", Workload::AnonWRand, pages, memory, scale.threads);
    base_config(
        &scale,
        seed,
        format!("test-wrand-u{percent}"),
        backend,
        vec![tenant],
        swap_out_phase(&scale, scale.warmup_swaps),
        swap_out_phase(&scale, scale.measure_swaps),
    )
}

pub fn zns() -> BackendKind {
    BackendKind::znswap(PolicyKind::PerCore)
}

pub fn linux(discard: DiscardMode) -> BackendKind {
    BackendKind::linux(discard)
}
