//! The engine's placement probe: write amplification of each placement policy on the
//! skewed workloads of the paper (pmbench normal, hotspot 80/20, YCSB-A) at a steady,
//! exact utilization of the device, on the model device (256 zones of 1024 slots, 8 open
//! zones, per-page metadata, no faults). Victims are greedy unless the row says
//! cost-benefit (lifetime and the oracle choose it themselves); the oracle places by each
//! page's true access rate, the ceiling of a better classifier.
//!
//! Every page is written once in order, the device is turned over `warmup` times, then
//! the WAF is measured over `turnovers` more device-capacity writes. The warm-up is long
//! (16 by default) because pmbench's steady state comes late: its pages beyond 3 sigma are
//! written once in a few device writes, and each such write moves a page from the
//! in-order fill's zones, which no victim choice touches, into the zones the GC cleans.
//! Per-core's WAF at 80 % climbs from 2.02 after 2 turnovers to 2.46 after 64
//! (crates/dst/RESULTS.md has the sweep).
//!
//! `cargo run --release -p znswap-dst --example placement -- [--turnovers N] [--warmup N]
//! [--seeds N] [--utilization 80,90] [--workloads pmbench] [--policies lifetime] [--zones 64] [--json]`

use serde_json::json;
use znswap_core::{PageInfo, Policy, PolicyKind, PolicyView, SwapZoneId, VictimSelection};
use znswap_dst::{run, DstOptions, PolicyFactory, Scenario, Workload};
use znswap_workload::Workload as Access;

struct Args {
    turnovers: f64,
    warmup: f64,
    seeds: u64,
    json: bool,
    utilizations: Vec<u32>,
    /// Names from `WORKLOADS` to run; all when empty.
    workloads: Vec<String>,
    /// Labels from `POLICIES` to run; all when empty. A policy left out prints "-", so
    /// that one policy's change can be measured without re-running the others.
    policies: Vec<String>,
    /// Zones of the model device (the same slots in all: 2^18), default 256.
    zones: u32,
}

fn parse_args() -> Args {
    let mut args = Args {
        turnovers: 2.0,
        warmup: 16.0,
        seeds: 1,
        json: false,
        utilizations: vec![50, 70, 80, 90],
        workloads: Vec::new(),
        policies: Vec::new(),
        zones: 256,
    };
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
            "--workloads" => {
                args.workloads = value("--workloads").split(',').map(str::to_string).collect();
                let known: Vec<&str> = WORKLOADS.iter().map(|(name, _)| *name).collect();
                for name in &args.workloads {
                    assert!(known.contains(&name.as_str()), "--workloads: unknown {name:?}, known: {known:?}");
                }
            }
            "--policies" => {
                args.policies = value("--policies").split(',').map(str::to_string).collect();
                let known: Vec<&str> = POLICIES.iter().map(|(label, ..)| *label).collect();
                for label in &args.policies {
                    assert!(known.contains(&label.as_str()), "--policies: unknown {label:?}, known: {known:?}");
                }
            }
            "--zones" => {
                args.zones = value("--zones").parse().expect("--zones: a count");
                assert!(
                    (16..=4096).contains(&args.zones) && (1 << 18) % args.zones == 0,
                    "--zones: a power of two from 16 to 4096 (the device keeps its 2^18 slots)"
                );
            }
            "--json" => args.json = true,
            "-h" | "--help" => {
                println!(
                    "placement probe: WAF of per-core (greedy and cost-benefit ZNGC), hot/cold, lifetime and an oracle (true access rates) on skewed workloads\n\
                     options: --turnovers N (measured device writes, default 2) --warmup N (default 16)\n\
                     --seeds N (runs per point, default 1) --utilization 50,70,80,90\n\
                     --workloads pmbench,\"hotspot 80/20\",ycsb-a (default all)\n\
                     --policies per-core,per-core-cost-benefit,hot-cold,lifetime,oracle (default all)\n\
                     --zones N (zones of the 2^18-slot device, default 256) --json"
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
/// shows how much of the lifetime policy's gain is its victim choice alone; the oracle
/// shows how much any classifier could add.
pub const POLICIES: [(&str, PolicyKind, VictimSelection, Option<PolicyFactory>); 5] = [
    ("per-core", PolicyKind::PerCore, VictimSelection::Greedy, None),
    ("per-core-cost-benefit", PolicyKind::PerCore, VictimSelection::CostBenefit, None),
    ("hot-cold", PolicyKind::HotCold, VictimSelection::Greedy, None),
    ("lifetime", PolicyKind::Lifetime, VictimSelection::Greedy, None),
    // Lifetime's kind gives it the two GC streams; its victims are cost-benefit.
    ("oracle", PolicyKind::Lifetime, VictimSelection::CostBenefit, Some(oracle)),
];

/// Where a page's true access rate puts it.
#[derive(Debug)]
enum Rates {
    /// pmbench: the rate falls with the distance from the middle, in sigmas.
    Normal { mean: f64, sigma: f64 },
    /// Hotspot and YCSB-A: the first `hot_pages` take 80 % of the accesses.
    Hotspot { hot_pages: u64 },
}

/// Places pages by their true access rate, which no real policy knows: the ceiling of
/// what a better classifier could reach with cost-benefit victims and two GC streams.
/// pmbench gets three swap-out classes (within 1 sigma, 1 to 2, beyond 2), the best of
/// those tried (crates/dst/RESULTS.md); GC survivors split at 3 sigma, beyond which a page is
/// almost never written. Hotspot gets the true hot set.
#[derive(Debug)]
struct OraclePolicy {
    rates: Rates,
}

impl OraclePolicy {
    fn distance(&self, page: u64) -> f64 {
        match self.rates {
            Rates::Normal { mean, sigma } => ((page as f64 + 0.5 - mean) / sigma).abs(),
            Rates::Hotspot { hot_pages } => f64::from(u8::from(page >= hot_pages)),
        }
    }
}

impl Policy for OraclePolicy {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn victim_selection(&self) -> Option<VictimSelection> {
        Some(VictimSelection::CostBenefit)
    }

    fn swap_zone(&mut self, page: &PageInfo, view: &dyn PolicyView) -> SwapZoneId {
        let distance = self.distance(page.page);
        let class = match self.rates {
            Rates::Normal { .. } => u32::from(distance >= 1.0) + u32::from(distance >= 2.0),
            Rates::Hotspot { .. } => distance as u32,
        };
        class.min(view.swap_inf().swap_zones - 1)
    }

    fn gc_stream(&mut self, page: &PageInfo, view: &dyn PolicyView) -> u32 {
        let cold = match self.rates {
            Rates::Normal { .. } => self.distance(page.page) >= 3.0,
            Rates::Hotspot { .. } => self.distance(page.page) >= 1.0,
        };
        u32::from(view.swap_inf().gc_streams > 1 && cold)
    }
}

/// The oracle for the scenario's workload (one owner, as the probe runs).
fn oracle(scenario: &Scenario) -> Box<dyn Policy> {
    let pages = scenario.owner_pages.expect("the probe sets owner pages");
    let rates = match scenario.workload {
        Workload::Generated(Access::Pmbench { .. }) => {
            Rates::Normal { mean: pages as f64 / 2.0, sigma: pages as f64 / 12.0 }
        }
        Workload::Generated(Access::Hotspot { hot_percent, .. }) => {
            Rates::Hotspot { hot_pages: pages * hot_percent as u64 / 100 }
        }
        ref other => panic!("no oracle for {other:?}"),
    };
    Box::new(OraclePolicy { rates })
}

fn measure(
    workload: Access,
    (policy, victims, factory): (PolicyKind, VictimSelection, Option<PolicyFactory>),
    utilization: f64,
    args: &Args,
    seed: u64,
) -> f64 {
    let mut scenario = Scenario::overwrite(utilization, victims, policy, false);
    scenario.workload = Workload::Generated(workload);
    scenario.geometry.zone_capacity_pages =
        scenario.geometry.zone_count * scenario.geometry.zone_capacity_pages / args.zones;
    scenario.geometry.zone_count = args.zones;
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
    options.policy = factory;
    let report = run(&options);
    assert!(report.passed(), "seed {seed}: {:?}", report.violations);
    report.waf
}

fn main() {
    let args = parse_args();
    let mut rows = Vec::new();
    if !args.json {
        println!(
            "placement probe: WAF by policy ({} x {}-slot zones, 8 open; lifetime and the oracle pick cost-benefit victims)",
            args.zones,
            (1 << 18) / args.zones
        );
        println!(
            "| workload | util % | per-core | per-core, cost-benefit | hot/cold | lifetime | oracle | hot/cold vs per-core | \
             lifetime vs per-core | lifetime vs per-core, cost-benefit | oracle vs per-core |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
    }
    for (name, workload) in WORKLOADS {
        if !args.workloads.is_empty() && !args.workloads.iter().any(|chosen| chosen == name) {
            continue;
        }
        for &percent in &args.utilizations {
            let mut wafs = Vec::new();
            for (label, policy, victims, factory) in POLICIES {
                if !args.policies.is_empty() && !args.policies.iter().any(|chosen| chosen == label) {
                    wafs.push(None);
                    continue;
                }
                let mut sum = 0.0;
                for seed in 1..=args.seeds {
                    sum += measure(workload, (policy, victims, factory), percent as f64 / 100.0, &args, seed);
                }
                wafs.push(Some(sum / args.seeds as f64));
            }
            // The change of WAF against a baseline, in per cent (negative: lower).
            let change = |waf: usize, base: usize| Some((wafs[waf]? / wafs[base]? - 1.0) * 100.0);
            let changes = [
                ("hot-cold_vs_per-core", change(2, 0)),
                ("lifetime_vs_per-core", change(3, 0)),
                ("lifetime_vs_per-core-cost-benefit", change(3, 1)),
                ("oracle_vs_per-core", change(4, 0)),
            ];
            if !args.json {
                let waf = |waf: Option<f64>| waf.map_or("-".to_string(), |waf| format!("{waf:.3}"));
                let percent_change = |change: Option<f64>| change.map_or("-".to_string(), |c| format!("{c:+.1} %"));
                let cells: Vec<String> =
                    wafs.iter().map(|&w| waf(w)).chain(changes.iter().map(|&(_, c)| percent_change(c))).collect();
                println!("| {name} | {percent} | {} |", cells.join(" | "));
            }
            let waf: serde_json::Map<String, serde_json::Value> = POLICIES
                .iter()
                .zip(&wafs)
                .filter_map(|((label, ..), waf)| Some((label.to_string(), json!(waf.as_ref()?))))
                .collect();
            let changes: serde_json::Map<String, serde_json::Value> =
                changes.iter().filter_map(|&(label, c)| Some((label.to_string(), json!(c?)))).collect();
            rows.push(json!({
                "workload": name, "utilization_percent": percent, "seeds": args.seeds, "waf": waf,
                "waf_change_percent": changes,
            }));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "probe": "placement", "rows": rows })).expect("json"));
    }
}
