//! §6.1.2's experiment (pmbench normal writes, memory shrunk until a share of the set is
//! swapped out) with the set's size relative to the swap chosen, so that the device's
//! use can go past the paper's 50-56 %: per-core against the lifetime policy, WAF and
//! swap-out bandwidth, in the simulator (host memory, CLOCK reclaim, NAND timing), at the
//! report's full scale unless told otherwise.
//!
//! `cargo run --release -p znswap-sim --example placement_sim -- [--set-share 1.0]
//! [--swapped 80,90] [--scale full|quick|tiny] [--warmup-swaps F] [--cpus N] [--threads N]
//! [--seed 1] [--json]`
//!
//! `--set-share`: the set's pages over the swap's (the paper's: 320 / 512 = 0.625).
//! `--warmup-swaps`: swap-out volume before measuring, in swap sizes (the scale's
//! `placement_warmup_swaps`, 3 at full scale, unless given): to see whether the gap has
//! settled.
//! `--cpus`, `--threads`: the host's cores and pmbench's threads (the scale's 32 / 64 unless
//! given): per-core opens a swap-zone per core, so the count of cores is part of what
//! is compared (the live bench on a 2-CPU VM runs 2 threads on 2 cores).

use std::time::Instant;

use serde_json::json;
use znswap_core::PolicyKind;
use znswap_sim::paper::scale::Scale;
use znswap_sim::paper::skewed_pmbench_config;
use znswap_sim::run::{run, BackendKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut set_share = 1.0;
    let mut swapped = vec![80u32, 90];
    let mut scale = Scale::full();
    let mut seed = 1;
    let mut json_out = false;
    let mut warmup_swaps = None;
    let mut cpus = None;
    let mut threads = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value (try --help)"));
        match arg.as_str() {
            "--set-share" => set_share = value()?.parse().map_err(|_| "--set-share: a number such as 0.9")?,
            "--swapped" => {
                swapped = value()?
                    .split(',')
                    .map(|p| p.parse::<u32>().ok().filter(|p| (1..100).contains(p)))
                    .collect::<Option<_>>()
                    .ok_or("--swapped: percents from 1 to 99, comma separated")?
            }
            "--scale" => {
                let name = value()?;
                scale = Scale::by_name(&name).ok_or_else(|| format!("--scale: unknown {name:?} (full, quick, tiny)"))?
            }
            "--seed" => seed = value()?.parse().map_err(|_| "--seed: a number")?,
            "--warmup-swaps" => {
                let swaps: f64 = value()?.parse().map_err(|_| "--warmup-swaps: a number of swap sizes such as 6")?;
                if !(0.5..=50.0).contains(&swaps) {
                    return Err("--warmup-swaps: from 0.5 to 50 swap sizes".into());
                }
                warmup_swaps = Some(swaps);
            }
            "--cpus" => {
                cpus = Some(value()?.parse::<u32>().ok().filter(|n| (1..=256).contains(n)).ok_or("--cpus: 1 to 256")?)
            }
            "--threads" => {
                threads = Some(
                    value()?.parse::<u32>().ok().filter(|n| (1..=1024).contains(n)).ok_or("--threads: 1 to 1024")?,
                )
            }
            "--json" => json_out = true,
            "-h" | "--help" => {
                println!(
                    "placement_sim: §6.1.2 (pmbench normal writes) per-core against lifetime in the simulator\n\
                     options: --set-share F (set pages / swap pages, default 1.0; the paper's 0.625)\n\
                     --swapped 80,90 (share of the set swapped out, %) --scale full|quick|tiny --seed S --json\n\
                     --warmup-swaps F (swap-out volume before measuring, in swap sizes; default the scale's)\n\
                     --cpus N --threads N (host cores, pmbench threads; default the scale's)"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument {other} (try --help)").into()),
        }
    }
    if !(0.05..=1.5).contains(&set_share) {
        return Err("--set-share: between 0.05 and 1.5 (the swap must hold what is swapped out)".into());
    }
    scale.cpus = cpus.unwrap_or(scale.cpus);
    scale.threads = threads.unwrap_or(scale.threads);
    scale.placement_warmup_swaps = warmup_swaps.unwrap_or(scale.placement_warmup_swaps);
    let pages = (scale.swap_pages as f64 * set_share) as u64;
    let policies = [PolicyKind::PerCore, PolicyKind::Lifetime];
    let mut rows = Vec::new();
    if !json_out {
        println!(
            "| swapped % | device use % | per-core WAF | lifetime WAF | change | per-core MiB/s | lifetime MiB/s |"
        );
        println!("|---|---|---|---|---|---|---|");
    }
    for &percent in &swapped {
        let mut results = Vec::new();
        for policy in policies {
            let config = skewed_pmbench_config(
                &scale,
                seed,
                format!("pmbench-share{set_share}-swapped{percent}"),
                BackendKind::znswap(policy),
                pages,
                percent,
            );
            let started = Instant::now();
            let result = run(&config)?;
            eprintln!(
                "{} swapped {percent} %: {:.0} s of wall time, WAF {:.3}",
                policy.name(),
                started.elapsed().as_secs_f64(),
                result.waf
            );
            results.push(result);
        }
        let (per_core, lifetime) = (&results[0], &results[1]);
        let change = (lifetime.waf / per_core.waf - 1.0) * 100.0;
        if !json_out {
            println!(
                "| {percent} | {:.1} | {:.3} | {:.3} | {change:+.1} % | {:.1} | {:.1} |",
                per_core.utilization * 100.0,
                per_core.waf,
                lifetime.waf,
                per_core.swap_out_mib_s,
                lifetime.swap_out_mib_s
            );
        }
        rows.push(json!({
            "swapped_percent": percent, "utilization": per_core.utilization,
            "waf": { "per-core": per_core.waf, "lifetime": lifetime.waf }, "waf_change_percent": change,
            "swap_out_mib_s": { "per-core": per_core.swap_out_mib_s, "lifetime": lifetime.swap_out_mib_s },
        }));
    }
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "experiment": "placement_sim", "scale": scale.name, "cpus": scale.cpus, "threads": scale.threads, "seed": seed, "set_share": set_share,
                "warmup_swaps": scale.placement_warmup_swaps, "rows": rows,
            }))?
        );
    }
    Ok(())
}
