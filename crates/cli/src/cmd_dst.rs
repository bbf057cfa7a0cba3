//! `znswap dst`: deterministic simulation testing of the swap engine. Each seed picks a
//! scenario (policy, record encoding, geometry, workload, faults), runs it against a
//! fault-injecting model device and checks every swap-in against an oracle.

use std::io::IsTerminal;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use znswap_dst::{run, DstOptions, DstReport};

use crate::stats::Table;

pub struct DstRequest {
    pub seed: u64,
    pub seeds: u64,
    pub ops: u64,
    pub json: bool,
}

#[derive(Serialize)]
struct SeedLine<'a> {
    #[serde(flatten)]
    report: &'a DstReport,
    seconds: f64,
}

/// Runs the seeds; returns whether all passed.
pub fn dst(request: &DstRequest) -> Result<bool> {
    let show_progress = !request.json && std::io::stderr().is_terminal();
    let mut table =
        Table::new(&["seed", "ops", "verified", "lost", "corrupted", "waf", "gc runs", "policy", "seconds", "verdict"]);
    let mut failed = Vec::new();
    let mut lines = Vec::new();
    for seed in request.seed..request.seed + request.seeds {
        if show_progress {
            eprint!("\r\x1b[2Kseed {seed} ({} of {})", seed - request.seed + 1, request.seeds);
        }
        let started = Instant::now();
        let report = run(&DstOptions::new(seed, request.ops));
        let seconds = started.elapsed().as_secs_f64();
        if !report.passed() {
            failed.push(seed);
        }
        table.row(vec![
            seed.to_string(),
            report.ops.to_string(),
            report.pages_verified.to_string(),
            report.lost.to_string(),
            report.corrupted.to_string(),
            format!("{:.3}", report.waf),
            report.gc_runs.to_string(),
            report.policy.to_string(),
            format!("{seconds:.1}"),
            if report.passed() { "ok".into() } else { "FAILED".into() },
        ]);
        lines.push((report, seconds));
    }
    if show_progress {
        eprint!("\r\x1b[2K");
    }
    if request.json {
        let out: Vec<SeedLine> = lines.iter().map(|(report, seconds)| SeedLine { report, seconds: *seconds }).collect();
        if out.len() == 1 {
            println!("{}", serde_json::to_string_pretty(&out[0])?);
        } else {
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    } else {
        print!("{}", table.render());
        for (report, _) in &lines {
            for violation in report.violations.iter().take(10) {
                println!("seed {}: {violation}", report.seed);
            }
        }
        println!("dst: {} passed, {} failed", request.seeds - failed.len() as u64, failed.len());
    }
    for seed in &failed {
        eprintln!("dst: seed {seed} FAILED; reproduce with `znswap dst --seed {seed} --ops {}`", request.ops);
    }
    Ok(failed.is_empty())
}
