//! Prints the block SSD's measured WAF beside Desnoyers' models over a grid of
//! utilizations and block sizes: `cargo run --release -p znswap-flash --example waf_table`.

use znswap_flash::waf::{block_uniform_overwrite, WafRun};
use znswap_flash::Victim;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let victim = if args.iter().any(|a| a == "fifo") { Victim::Fifo } else { Victim::Greedy };
    println!(
        "{:>6} {:>5} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "u", "Np", "alpha_eff", "measured", "greedy", "fifo", "err_g%", "err_f%"
    );
    for &np in &[32u32, 64, 128, 256] {
        for &u in &[0.5, 0.6, 0.7, 0.8, 0.9, 0.935] {
            let run = WafRun { victim, ..WafRun::default() };
            let r = block_uniform_overwrite(u, np, 1, &run).unwrap();
            println!(
                "{:>6.3} {:>5} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>8.2} {:>8.2}",
                u,
                np,
                r.alpha_effective,
                r.waf,
                r.model_greedy_waf,
                r.model_fifo_waf,
                100.0 * (r.waf / r.model_greedy_waf - 1.0),
                100.0 * (r.waf / r.model_fifo_waf - 1.0)
            );
        }
    }
}
