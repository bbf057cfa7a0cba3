//! One random-write run (the Fig. 1 / Fig. 10 experiment) at a chosen size, printed as
//! JSON with the wall time on stderr: for timing the simulator and exploring scales.
//!
//! `cargo run --release -p znswap-sim --example one_run -- <swap MiB> <utilization> <zns|linux|trim8> [zones]`

use std::time::Instant;

use znswap_core::{PolicyKind, PAGE_BYTES};
use znswap_sim::paper::scale::{page_tenant, safety_ns};
use znswap_sim::run::{run, BackendKind, DiscardMode, Phase, RunConfig};
use znswap_sim::{events::SECOND_NS, CpuCosts};
use znswap_workload::Workload;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: one_run <swap MiB> <utilization 0..1> <zns|linux|trim8> [zones]";
    let swap_mib: u64 = args.first().and_then(|s| s.parse().ok()).ok_or(usage)?;
    let utilization: f64 = args.get(1).and_then(|s| s.parse().ok()).ok_or(usage)?;
    let backend = match args.get(2).map(String::as_str) {
        Some("zns") => BackendKind::znswap(PolicyKind::PerCore),
        Some("linux") => BackendKind::linux(DiscardMode::None),
        Some("trim8") => BackendKind::linux(DiscardMode::Fine8),
        _ => return Err(usage.into()),
    };
    let zones: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(288);
    let swap_pages = swap_mib << 8;
    // The paper's 2 GiB cgroup for its 512 GiB swap, at least 4096 pages.
    let memory = (swap_pages / 256).max(4096) as u32;
    let pages = (swap_pages as f64 * utilization) as u64 + memory as u64;
    let bytes = |swaps: f64| (swap_pages as f64 * swaps) as u64 * PAGE_BYTES as u64;
    let config = RunConfig {
        name: format!("one-run-{swap_mib}MiB-u{utilization}"),
        seed: 1,
        backend,
        swap_pages,
        over_provisioning: 0.12,
        zones,
        cpus: 32,
        costs: CpuCosts::default(),
        tenants: vec![page_tenant("vm-scalability", Workload::AnonWRand, pages, memory, 64)],
        warmup: Phase::swap_out(bytes(1.5), safety_ns(bytes(1.5))),
        measure: Phase::swap_out(bytes(1.0), safety_ns(bytes(1.0))),
        sample_ns: SECOND_NS,
        precondition: true,
    };
    let started = Instant::now();
    let mut result = run(&config)?;
    result.series.clear();
    println!("{}", serde_json::to_string_pretty(&result)?);
    eprintln!("{:.1} s of wall time for {:.1} s of virtual time", started.elapsed().as_secs_f64(), result.window_s);
    Ok(())
}
