//! WAF vs utilization with uniform random overwrites (greedy and cost-benefit), and
//! per-core vs hot/cold on a skewed 80/20 workload, on the model device (256 zones of
//! 1024 slots, 8 open zones, per-page metadata, no faults).
//!
//! `cargo run --release -p znswap-dst --example waf [turnovers] [all|uniform|skewed|cache|far|small]`
//! (turnovers: device-capacity writes measured after two of warm-up; default 2).
use znswap_core::{PolicyKind, VictimSelection};
use znswap_dst::{run, DstOptions, Scenario};

/// Greedy/FIFO analytic WAF for uniform random writes with large zones: 1 / (1 - x),
/// where x, the victim's valid fraction, solves x = exp(-(1 - x) / u).
fn analytic_waf(utilization: f64) -> f64 {
    let mut x: f64 = 0.0;
    for _ in 0..10_000 {
        x = (-(1.0 - x) / utilization).exp();
    }
    1.0 / (1.0 - x)
}

/// WAF over the window, and GC stalls in it.
fn measure(scenario: Scenario, turnovers: f64) -> (f64, u64) {
    let report = measure_report(scenario, turnovers, 1.0);
    (report.waf, report.window.gc_stalls)
}

/// `pages_per_op`: pages one op writes (32 for block churn).
fn measure_report(scenario: Scenario, turnovers: f64, pages_per_op: f64) -> znswap_dst::DstReport {
    let slots = (scenario.geometry.zone_count * scenario.geometry.zone_capacity_pages) as f64;
    let pages = scenario.owner_pages.expect("set") as f64;
    // Fill, then turn the device over twice before measuring.
    let warmup = ((pages + 2.0 * slots) / pages_per_op) as u64;
    let ops = warmup + (turnovers * slots / pages_per_op) as u64;
    let mut options = DstOptions::new(1, ops);
    options.scenario = Some(scenario);
    options.warmup_ops = warmup;
    options.check_every_ops = 0;
    let report = run(&options);
    assert!(report.passed(), "{:?}", report.violations);
    report
}

fn main() {
    let turnovers: f64 = std::env::args().nth(1).map(|arg| arg.parse().expect("number")).unwrap_or(2.0);
    let which = std::env::args().nth(2).unwrap_or_else(|| "all".to_string());
    if which == "all" || which == "uniform" {
        uniform(turnovers);
    }
    if which == "all" || which == "skewed" {
        skewed(turnovers);
    }
    if which == "all" || which == "cache" {
        swap_cache(turnovers);
    }
    if which == "all" || which == "far" {
        far(turnovers);
    }
    if which == "all" || which == "small" {
        small_zones(turnovers);
    }
}

/// Small zones with a coarse write granularity (seed 002): 2048 zones of 240 slots,
/// no metadata, 48-page (192 KiB) chunks, so a zone holds five chunks. One victim at a
/// time against the multi-victim mode.
fn small_zones(turnovers: f64) {
    println!();
    println!("small zones (2048 x 240 slots, 192 KiB chunks with footers), uniform overwrites: WAF incl. footers");
    println!("| utilization | 1 victim | 4 victims | GC runs, 1 victim | GC runs, 4 victims |");
    println!("|---|---|---|---|---|");
    for percent in [30, 50, 70] {
        let utilization = percent as f64 / 100.0;
        let mut cells = Vec::new();
        let mut runs = Vec::new();
        for victims in [1, 4] {
            let mut scenario = Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::PerCore, false);
            scenario.geometry.zone_count = 2048;
            scenario.geometry.zone_capacity_pages = 240;
            scenario.geometry.metadata_bytes = 0;
            scenario.geometry.write_granularity_pages = 48;
            scenario.geometry.zone_append_pages_max = 48;
            scenario.geometry.max_open_zones = 16;
            scenario.geometry.max_active_zones = 16;
            scenario.owner_pages = Some((2048.0 * 240.0 * 47.0 / 48.0 * utilization) as u64);
            scenario.gc_watermarks = Some((8, 16));
            scenario.gc_victims_max = victims;
            let report = measure_report(scenario, turnovers, 1.0);
            cells.push(format!("{:.3}", report.waf));
            runs.push(report.window.gc_runs.to_string());
        }
        println!("| {percent} % | {} | {} |", cells.join(" | "), runs.join(" | "));
    }
}

/// Random reads (swap in, swap out clean): device writes per op, by swap cache mode.
fn swap_cache(turnovers: f64) {
    use znswap_core::SwapCacheMode;
    println!();
    println!("uniform random reads (swap in, swap out clean): device pages written per op");
    println!("| utilization | adaptive (no cutoff) | static 50 % (vm_swap_full) | off |");
    println!("|---|---|---|---|");
    for percent in [30, 60, 80] {
        let utilization = percent as f64 / 100.0;
        let mut cells = Vec::new();
        for mode in [SwapCacheMode::Adaptive, SwapCacheMode::StaticHalf, SwapCacheMode::Off] {
            let mut scenario = Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::PerCore, false);
            scenario.workload = znswap_dst::Workload::UniformRead;
            scenario.swap_cache = mode;
            let report = measure_report(scenario, turnovers, 1.0);
            let window = &report.window;
            let written = window.host_pages_written + window.gc_pages_written;
            let ops = window.swap_outs.max(1);
            cells.push(format!("{:.3}", written as f64 / ops as f64));
        }
        println!("| {percent} % | {} |", cells.join(" | "));
    }
}

/// Block churn (write or free 32-page blocks, short-lived data): resets and wasted (partial) resets per
/// 1000 host pages written, FAR against eager reset.
fn far(turnovers: f64) {
    use znswap_core::ResetMode;
    println!();
    println!(
        "block churn (write or free 32-page blocks, half the frees of the block written last): zone resets per 1000 host pages (partial: reset with capacity unwritten)"
    );
    println!("| utilization | FAR resets | FAR partial | eager resets | eager partial | WAF FAR | WAF eager |");
    println!("|---|---|---|---|---|---|---|");
    for percent in [20, 50, 80] {
        let utilization = percent as f64 / 100.0;
        let mut cells = Vec::new();
        let mut wafs = Vec::new();
        for mode in [ResetMode::Far, ResetMode::Eager] {
            let mut scenario = Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::PerCore, false);
            scenario.workload = znswap_dst::Workload::Churn;
            scenario.reset_mode = mode;
            let report = measure_report(scenario, turnovers, 16.0);
            let window = &report.window;
            let host = window.host_pages_written as f64 / 1000.0;
            cells.push(format!("{:.3} | {:.3}", window.resets as f64 / host, window.resets_partial as f64 / host));
            wafs.push(format!("{:.3}", report.waf));
        }
        println!("| {percent} % | {} | {} |", cells.join(" | "), wafs.join(" | "));
    }
}

fn uniform(turnovers: f64) {
    println!("uniform random overwrites: WAF by utilization (of all slots)");
    println!("| utilization | analytic (greedy, large zones) | greedy | cost-benefit | GC stalls |");
    println!("|---|---|---|---|---|");
    for percent in (10..=90).step_by(10) {
        let utilization = percent as f64 / 100.0;
        let greedy =
            measure(Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::PerCore, false), turnovers);
        let cost_benefit = measure(
            Scenario::overwrite(utilization, VictimSelection::CostBenefit, PolicyKind::PerCore, false),
            turnovers,
        );
        println!(
            "| {percent} % | {:.3} | {:.3} | {:.3} | {} |",
            analytic_waf(utilization),
            greedy.0,
            cost_benefit.0,
            greedy.1 + cost_benefit.1
        );
    }
    println!();
}

fn skewed(turnovers: f64) {
    println!("skewed 80/20 overwrites (greedy): per-core vs hot/cold");
    println!("| utilization | per-core | hot/cold (1 GC stream) | hot/cold (2 GC streams) |");
    println!("|---|---|---|---|");
    for percent in [50, 70, 80] {
        let utilization = percent as f64 / 100.0;
        let per_core =
            measure(Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::PerCore, true), turnovers);
        let mut one_stream = Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::HotCold, true);
        one_stream.gc_streams = 1;
        let hot_cold_one = measure(one_stream, turnovers);
        let hot_cold =
            measure(Scenario::overwrite(utilization, VictimSelection::Greedy, PolicyKind::HotCold, true), turnovers);
        println!("| {percent} % | {:.3} | {:.3} | {:.3} |", per_core.0, hot_cold_one.0, hot_cold.0);
    }
}
