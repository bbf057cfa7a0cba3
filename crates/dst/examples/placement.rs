//! The engine's placement probe: write amplification of each placement policy on the
//! skewed workloads of the paper (pmbench normal, hotspot 80/20, YCSB-A) at a steady,
//! exact utilization of the device, on the model device (256 zones of 1024 slots, 8 open
//! zones, per-page metadata, greedy ZNGC, no faults).
//!
//! Every page is written once in order, the device is turned over `warmup` times, then
//! the WAF is measured over `turnovers` more device-capacity writes.
//!
//! `cargo run --release -p znswap-dst --example placement -- [--turnovers N] [--warmup N]
//! [--seeds N] [--json]`

use serde_json::json;
use znswap_core::{PolicyKind, VictimSelection};
use znswap_dst::{run, DstOptions, Scenario, Workload};
use znswap_workload::Workload as Access;

struct Args {
    turnovers: f64,
    warmup: f64,
    seeds: u64,
    json: bool,
    utilizations: Vec<u32>,
}

fn parse_args() -> Args {
    let mut args = Args { turnovers: 2.0, warmup: 3.0, seeds: 1, json: false, utilizations: vec![50, 70, 80, 90] };
    let mut iter = std::env::args().skip(1);
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| iter.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match arg.as_str() {
            "--turnovers" => args.turnovers = value("--turnovers").parse().expect("--turnovers: a number"),
            "--warmup" => args.warmup = value("--warmup").parse().expect("--warmup: a number"),
            "--seeds" => args.seeds = value("--seeds").parse().expect("--seeds: a count"),
            "--utilization" => {
                args.utilizations = value("--utilization")
                    .split(',')
                    .map(|p| p.parse().expect("--utilization: percents, comma separated"))
                    .collect()
            }
            "--json" => args.json = true,
            "-h" | "--help" => {
                println!(
                    "placement probe: WAF of per-core (greedy and cost-benefit ZNGC), hot/cold and lifetime placement on skewed workloads\n\
                     options: --turnovers N (measured device writes, default 2) --warmup N (default 3)\n\
                     --seeds N (runs per point, default 1) --utilization 50,70,80,90 --json"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other} (try --help)"),
        }
    }
    args
}

pub const WORKLOADS: [(&str, Access); 3] = [
    ("pmbench", Access::Pmbench { read_percent: 0 }),
    ("hotspot 80/20", Access::Hotspot { hot_percent: 20, hot_access_percent: 80, read_percent: 0 }),
    ("ycsb-a", Access::Hotspot { hot_percent: 20, hot_access_percent: 80, read_percent: 50 }),
];

/// Per-core with greedy ZNGC is the paper's baseline; per-core with cost-benefit victims
/// shows how much of the lifetime policy's gain is its victim choice alone.
pub const POLICIES: [(&str, PolicyKind, VictimSelection); 4] = [
    ("per-core", PolicyKind::PerCore, VictimSelection::Greedy),
    ("per-core-cost-benefit", PolicyKind::PerCore, VictimSelection::CostBenefit),
    ("hot-cold", PolicyKind::HotCold, VictimSelection::Greedy),
    ("lifetime", PolicyKind::Lifetime, VictimSelection::Greedy),
];

fn measure(
    workload: Access,
    (policy, victims): (PolicyKind, VictimSelection),
    utilization: f64,
    args: &Args,
    seed: u64,
) -> f64 {
    let mut scenario = Scenario::overwrite(utilization, victims, policy, false);
    scenario.workload = Workload::Generated(workload);
    let slots = (scenario.geometry.zone_count * scenario.geometry.zone_capacity_pages) as f64;
    let pages = scenario.owner_pages.expect("set") as f64;
    // A read leaves its slot in place (the swap cache keeps it): only writes turn the
    // device over.
    let write_share = match workload {
        Access::Pmbench { read_percent } | Access::Hotspot { read_percent, .. } => 1.0 - read_percent as f64 / 100.0,
        _ => 1.0,
    };
    let warmup = (pages + args.warmup * slots / write_share) as u64;
    let ops = warmup + (args.turnovers * slots / write_share) as u64;
    let mut options = DstOptions::new(seed, ops);
    options.scenario = Some(scenario);
    options.warmup_ops = warmup;
    options.check_every_ops = 0;
    let report = run(&options);
    assert!(report.passed(), "seed {seed}: {:?}", report.violations);
    report.waf
}

fn main() {
    let args = parse_args();
    let mut rows = Vec::new();
    if !args.json {
        println!("placement probe: WAF by policy (256 x 1024-slot zones, 8 open; lifetime picks cost-benefit victims)");
        println!(
            "| workload | util % | per-core | per-core, cost-benefit | hot/cold | lifetime | hot/cold vs per-core | \
             lifetime vs per-core | lifetime vs per-core, cost-benefit |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    for (name, workload) in WORKLOADS {
        for &percent in &args.utilizations {
            let mut wafs = Vec::new();
            for (_, policy, victims) in POLICIES {
                let mut sum = 0.0;
                for seed in 1..=args.seeds {
                    sum += measure(workload, (policy, victims), percent as f64 / 100.0, &args, seed);
                }
                wafs.push(sum / args.seeds as f64);
            }
            // The change of WAF against a baseline, in per cent (negative: lower).
            let change = |waf: f64, base: f64| (waf / base - 1.0) * 100.0;
            if !args.json {
                println!(
                    "| {name} | {percent} | {:.3} | {:.3} | {:.3} | {:.3} | {:+.1} % | {:+.1} % | {:+.1} % |",
                    wafs[0],
                    wafs[1],
                    wafs[2],
                    wafs[3],
                    change(wafs[2], wafs[0]),
                    change(wafs[3], wafs[0]),
                    change(wafs[3], wafs[1]),
                );
            }
            let waf: serde_json::Map<String, serde_json::Value> =
                POLICIES.iter().zip(&wafs).map(|((label, ..), &waf)| (label.to_string(), json!(waf))).collect();
            rows.push(json!({
                "workload": name, "utilization_percent": percent, "seeds": args.seeds, "waf": waf,
                "waf_change_percent": {
                    "hot-cold_vs_per-core": change(wafs[2], wafs[0]),
                    "lifetime_vs_per-core": change(wafs[3], wafs[0]),
                    "lifetime_vs_per-core-cost-benefit": change(wafs[3], wafs[1]),
                },
            }));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "probe": "placement", "rows": rows })).expect("json"));
    }
}
