//! Runs pager DST seeds: `pager [first_seed] [seeds] [steps]`, one line per seed.
fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|arg| arg.parse().expect("number")).collect();
    let first = args.first().copied().unwrap_or(1);
    let seeds = args.get(1).copied().unwrap_or(1);
    let steps = args.get(2).copied().unwrap_or(1_000_000);
    let mut failed = 0;
    for seed in first..first + seeds {
        let start = std::time::Instant::now();
        let report = znswap_dst::pager::run(&znswap_dst::pager::PagerDstOptions::new(seed, steps));
        println!(
            "seed {seed}: {} steps in {:.2} s verified {} swap-ins {} lost {} corrupted {} gc {} {:?} {}",
            report.ops,
            start.elapsed().as_secs_f64(),
            report.pages_verified,
            report.swap_ins_verified,
            report.lost,
            report.corrupted,
            report.gc_runs,
            report.scenario.fault_mode,
            if report.passed() { "ok".to_string() } else { format!("FAILED {:#?}", report.violations) }
        );
        failed += !report.passed() as u32;
    }
    if failed > 0 {
        eprintln!("{failed} seeds failed");
        std::process::exit(1);
    }
}
