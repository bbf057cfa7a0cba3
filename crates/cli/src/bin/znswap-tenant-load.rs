//! `znswap-tenant-load`: the two tenants of `scripts/tenants.sh` (the paper's Fig. 11
//! on real processes), each an unmodified program to run under `znswap run --daemon`.
//!
//! - `reader MIB SECONDS [WARM-UP]`: fills MIB of heap, reads random pages untimed for
//!   WARM-UP seconds (0 by default), then reads random 4 KiB pages for SECONDS,
//!   timing each read: past its budget most are faults served from the device, so the
//!   latencies are the swap-in's as the program sees them.
//! - `writer MIB SECONDS [WARM-UP]`: fills MIB of heap, then rewrites random pages
//!   (untimed for WARM-UP seconds, then for SECONDS): every rewrite dirties a page the
//!   pager wrote out before, so the device fills with invalid slots and its GC runs.
//!
//! Every page read is checked against what was last written there (exit 1 on a wrong
//! byte). Says on stderr when the timed part begins; prints one JSON object: accesses,
//! their rate and latency percentiles, and the mean of those slow enough to be faults.

use std::time::{Duration, Instant};

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_workload::pattern;

const PAGE: usize = 4096;
/// An access slower than this waited on a fault.
const SLOW_NS: u64 = 20_000;

fn check(page: &[u8], index: usize, version: u64) {
    if let Some(offset) = pattern::first_wrong_byte(page, index as u64, version) {
        eprintln!("wrong byte: page {index} offset {offset}, version {version}");
        std::process::exit(1);
    }
}

/// One access: the page checked, and for a writer rewritten with its next version.
fn access(mode: &str, page: &mut [u8], index: usize, version: &mut u32) {
    check(page, index, *version as u64);
    if mode == "writer" {
        *version += 1;
        pattern::fill(page, index as u64, *version as u64);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    const USAGE: &str = "usage: znswap-tenant-load reader|writer MIB SECONDS [WARM-UP SECONDS]";
    let (Some(mode), Some(mib), Some(seconds), Some(warm_up)) = (
        args.first().map(String::as_str),
        args.get(1).and_then(|text| text.parse::<usize>().ok()),
        args.get(2).and_then(|text| text.parse::<f64>().ok()),
        args.get(3).map_or(Some(0.0), |text| text.parse::<f64>().ok()),
    ) else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    if !matches!(mode, "reader" | "writer")
        || mib == 0
        || !seconds.is_finite()
        || seconds <= 0.0
        || !warm_up.is_finite()
        || warm_up < 0.0
        || args.len() > 4
    {
        eprintln!("{USAGE} (MIB and SECONDS above 0)");
        std::process::exit(2);
    }
    let pages = mib * (1 << 20) / PAGE;
    let mut heap = vec![0u8; pages * PAGE];
    // Version 1 first: version 0 is all zero, which a pager keeps as no page at all.
    let mut versions = vec![1u32; pages];
    for (index, page) in heap.chunks_mut(PAGE).enumerate() {
        pattern::fill(page, index as u64, 1);
    }
    let seed = std::process::id() as u64 ^ Instant::now().elapsed().as_nanos() as u64;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut latency = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    // Untimed accesses first: the pages the fill left dirty in memory are written out
    // meanwhile (at a tenant's write limit, seconds), so the timed part sees the steady
    // state of its mode, not the end of the fill.
    let warm_until = Instant::now() + Duration::from_secs_f64(warm_up);
    while Instant::now() < warm_until {
        for _ in 0..64 {
            let index = (rng.next_u64() % pages as u64) as usize;
            access(mode, &mut heap[index * PAGE..(index + 1) * PAGE], index, &mut versions[index]);
        }
    }
    // Said on stderr as the timed part begins, so that a script can take the daemon's
    // figures for it alone (`scripts/tenants.sh`).
    eprintln!("znswap-tenant-load: {mode}: filled {mib} MiB, timing {seconds} s");
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut accesses = 0u64;
    // The time of the accesses slower than a memory read (faults, as the program waits
    // on them), summed: set beside the daemon's own time on the reader's faults, the
    // rest is the kernel's and the wake-ups'.
    let (mut slow, mut slow_ns) = (0u64, 0u64);
    while Instant::now() < deadline {
        for _ in 0..64 {
            let index = (rng.next_u64() % pages as u64) as usize;
            let at = Instant::now();
            access(mode, &mut heap[index * PAGE..(index + 1) * PAGE], index, &mut versions[index]);
            let ns = at.elapsed().as_nanos() as u64;
            latency.saturating_record(ns);
            if ns >= SLOW_NS {
                slow += 1;
                slow_ns += ns;
            }
            accesses += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let us = |quantile: f64| latency.value_at_quantile(quantile) as f64 / 1000.0;
    println!(
        "{{\"mode\":\"{mode}\",\"mib\":{mib},\"seconds\":{elapsed:.3},\"accesses\":{accesses},\
         \"accesses_per_s\":{:.1},\"p50_us\":{:.2},\"p99_us\":{:.2},\"p999_us\":{:.2},\
         \"accesses_over_20us\":{slow},\"over_20us_mean_us\":{:.2}}}",
        accesses as f64 / elapsed,
        us(0.5),
        us(0.99),
        us(0.999),
        slow_ns as f64 / 1000.0 / slow.max(1) as f64
    );
}
