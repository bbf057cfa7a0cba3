//! The analytic ceiling of placement by separation: the least write amplification any
//! policy could reach on the placement probe's workloads if it knew every page's true
//! write rate, put each class of pages in its own log (survivors included), cleaned
//! each log on its own, and gave each log the best share of the spare room.
//!
//! Each log is modelled as uniform overwrites cleaned oldest first, the analytic model of
//! crates/dst/RESULTS.md: WAF = 1 / (1 - x), x = exp(-(1 - x) / u) at the log's own
//! utilization u = data / (data + spare). Within a class the rates still differ, which
//! greedy cleaning exploits a little; with many narrow classes that gain vanishes, so the
//! finest split bounds what a classifier can add. The spare room is shared out by water
//! filling (each slice to the log whose summed WAF falls most), the optimum for these
//! convex costs (Stoica and Ailamaki, "Improving Flash Write Performance by Using Update
//! Frequency", VLDB '13, derive the same split in closed form for an approximation).
//!
//! The probe's engine runs above this model even for one uniform class (open zones and
//! the empty-zone reserve hold no data: +5 % at 80 %, +7 % at 90 %, RESULTS.md), so a
//! measured cut is to be read against `ceiling x that overhead`.
//!
//! `cargo run --release -p znswap-dst --example separation -- [--json]`

use serde_json::json;

/// The analytic WAF of one log of uniform overwrites at utilization `u` (data / space).
fn log_waf(u: f64) -> f64 {
    if u <= 0.0 {
        return 1.0;
    }
    if u >= 1.0 - 1e-9 {
        return f64::INFINITY;
    }
    // x = exp(-(1 - x) / u) has the root 1 and one in (0, 1): f < 0 at 0, f > 0 just
    // below 1 (its slope there is 1 - 1/u < 0).
    let f = |x: f64| x - (-(1.0 - x) / u).exp();
    let (mut low, mut high) = (0.0, 1.0 - 1e-9);
    assert!(f(low) < 0.0 && f(high) > 0.0, "u {u}");
    for _ in 0..100 {
        let middle = (low + high) / 2.0;
        if f(middle) < 0.0 {
            low = middle;
        } else {
            high = middle;
        }
    }
    1.0 / (1.0 - low)
}

/// One class: its share of the device's slots holding data, and its share of writes.
#[derive(Clone, Copy, Debug)]
struct Class {
    data: f64,
    writes: f64,
}

/// The least summed WAF of the classes, each its own log, sharing `spare` (of the
/// device's slots) by water filling.
fn separated_waf(classes: &[Class], spare: f64) -> f64 {
    const SLICES: usize = 4_000;
    let slice = spare / SLICES as f64;
    let mut spares = vec![0.0; classes.len()];
    let cost = |class: &Class, spare: f64| {
        if class.writes == 0.0 {
            return 0.0;
        }
        class.writes * log_waf(class.data / (class.data + spare))
    };
    // A class with data and no spare has an infinite WAF, so its first slice gains
    // infinitely: every written class gets some before any gets more.
    let gain = |i: usize, spares: &[f64]| cost(&classes[i], spares[i]) - cost(&classes[i], spares[i] + slice);
    for _ in 0..SLICES {
        let best = (0..classes.len())
            .max_by(|&a, &b| gain(a, &spares).total_cmp(&gain(b, &spares)))
            .expect("at least one class");
        spares[best] += slice;
    }
    classes.iter().zip(&spares).map(|(class, &spare)| cost(class, spare)).sum()
}

/// The standard normal CDF (Abramowitz and Stegun 7.1.26 for erf, error < 1.5e-7).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// pmbench as the probe runs it: pages spread over +-6 sigma, writes normal around the
/// middle. `edges` (in sigmas, rising) cut the distance from the middle into classes.
fn pmbench_classes(utilization: f64, edges: &[f64]) -> Vec<Class> {
    let mut bounds = vec![0.0];
    bounds.extend_from_slice(edges);
    bounds.push(6.0);
    let mass = 2.0 * (normal_cdf(6.0) - 0.5);
    bounds
        .windows(2)
        .map(|w| Class {
            data: utilization * (w[1] - w[0]) / 6.0,
            writes: 2.0 * (normal_cdf(w[1]) - normal_cdf(w[0])) / mass,
        })
        .collect()
}

/// Hotspot 80/20 (and YCSB-A's writes): a fifth of the pages take 80 % of the writes.
fn hotspot_classes(utilization: f64) -> Vec<Class> {
    vec![Class { data: utilization * 0.2, writes: 0.8 }, Class { data: utilization * 0.8, writes: 0.2 }]
}

fn main() {
    let json_out = std::env::args().any(|a| a == "--json");
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        println!("separation: the analytic WAF ceiling of placement by true write rate (per-class logs, best spare split); --json");
        return;
    }
    // The model's one-class case is the uniform analytic row of RESULTS.md.
    for (u, expected) in [(0.5, 1.255), (0.8, 2.693), (0.9, 5.179)] {
        let one = separated_waf(&[Class { data: u, writes: 1.0 }], 1.0 - u);
        assert!((one - expected).abs() < 0.002, "one class at {u}: {one}, analytic {expected}");
    }
    let splits: [(&str, Vec<f64>); 5] = [
        ("2 classes, best edge (2.5 sigma)", vec![2.5]),
        ("3 classes (1, 3 sigma)", vec![1.0, 3.0]),
        ("4 classes (1, 2, 3 sigma)", vec![1.0, 2.0, 3.0]),
        ("7 classes (every 0.5 sigma to 3)", vec![0.5, 1.0, 1.5, 2.0, 2.5, 3.0]),
        ("24 classes (every 0.25 sigma)", (1..24).map(|i| i as f64 * 0.25).collect()),
    ];
    let mut rows = Vec::new();
    if !json_out {
        println!("separation ceiling: analytic WAF with every class in its own log and the best spare split");
        println!("| workload | util % | uniform (one log) | classes | ceiling |");
        println!("|---|---|---|---|---|");
    }
    for percent in [50u32, 70, 80, 90] {
        let u = percent as f64 / 100.0;
        let uniform = log_waf(u);
        let mut cases: Vec<(String, &str, f64)> = splits
            .iter()
            .map(|(label, edges)| ("pmbench".to_string(), *label, separated_waf(&pmbench_classes(u, edges), 1.0 - u)))
            .collect();
        cases.push((
            "hotspot 80/20".to_string(),
            "2 classes (the hot fifth)",
            separated_waf(&hotspot_classes(u), 1.0 - u),
        ));
        for (workload, label, ceiling) in cases {
            assert!(
                ceiling <= uniform + 1e-6,
                "{workload} {label} at {percent} %: separating cannot cost more than one log"
            );
            if !json_out {
                println!("| {workload} | {percent} | {uniform:.3} | {label} | {ceiling:.3} |");
            }
            rows.push(json!({
                "workload": workload, "utilization_percent": percent, "classes": label,
                "uniform_waf": uniform, "ceiling_waf": ceiling,
            }));
        }
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&json!({ "model": "separation", "rows": rows })).expect("json"));
    }
}
