//! Runs seeds and prints one JSON report per line: `dst [first_seed] [seeds] [ops]`.
fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|arg| arg.parse().expect("number")).collect();
    let first = args.first().copied().unwrap_or(1);
    let seeds = args.get(1).copied().unwrap_or(1);
    let ops = args.get(2).copied().unwrap_or(1_000_000);
    let mut failed = 0;
    for seed in first..first + seeds {
        let start = std::time::Instant::now();
        let report = znswap_dst::run(&znswap_dst::DstOptions::new(seed, ops));
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "seed {seed}: {} ops in {seconds:.2} s ({:.0} ops/s) verified {} lost {} corrupted {} waf {:.3} gc_runs {} policy {} {}",
            report.ops,
            report.ops as f64 / seconds,
            report.pages_verified,
            report.lost,
            report.corrupted,
            report.waf,
            report.gc_runs,
            report.policy,
            if report.passed() { "ok".to_string() } else { format!("FAILED {:?}", report.violations) }
        );
        if !report.passed() {
            failed += 1;
        }
    }
    if failed > 0 {
        eprintln!("{failed} seeds failed");
        std::process::exit(1);
    }
}
