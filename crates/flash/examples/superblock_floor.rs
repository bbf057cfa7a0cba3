//! How few superblocks the block SSD model can have before the count, not the workload,
//! sets its write amplification: `cargo run --release -p znswap-flash --example
//! superblock_floor [-- GIB]`. A device of GIB (default 4) logical GiB at 12 % spare is
//! built with `min_superblocks` = 16 … 512 (superblocks shrink to give that many), filled,
//! then overwritten (a) by uniform random 4 KiB writes and (b) by 512-page clusters in a
//! random order; the WAF of the last two device capacities of writes is printed. With
//! many superblocks (a) tends to Desnoyers' greedy limit for large blocks.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_flash::{BlockConfig, BlockSsd};

fn run(logical_pages: u64, floor: u32, clusters: bool) -> Option<(u32, u32, f64)> {
    let config = BlockConfig {
        logical_pages,
        over_provisioning: 0.12,
        min_superblocks: floor,
        // Force the floor: the real-size superblock would otherwise win on big devices.
        nand: znswap_flash::NandConfig { erase_block_bytes: 0, ..Default::default() },
        ..BlockConfig::default()
    };
    let mut ssd = match BlockSsd::new(config) {
        Ok(ssd) => ssd,
        Err(error) => {
            println!("{floor:>6} {error}");
            return None;
        }
    };
    let mut now = 0;
    for lpn in (0..logical_pages).step_by(64) {
        now = ssd.write(now, lpn, 64);
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let mut before = ssd.counters();
    let mut order: Vec<u64> = (0..logical_pages / 512).collect();
    for pass in 0..4 {
        if pass == 2 {
            before = ssd.counters();
        }
        if clusters {
            for i in (1..order.len()).rev() {
                order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            for &cluster in &order {
                for chunk in 0..8 {
                    now = ssd.write(now, cluster * 512 + chunk * 64, 64);
                }
            }
        } else {
            for _ in 0..logical_pages {
                now = ssd.write(now, rng.next_u64() % logical_pages, 1);
            }
        }
    }
    Some((ssd.superblocks(), ssd.superblock_pages(), ssd.counters().since(&before).waf()))
}

fn main() {
    let gib: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let logical = gib << 18;
    println!("{:>6} {:>11} {:>12} {:>10} {:>12}", "floor", "superblocks", "clusters/sb", "WAF rand", "WAF clusters");
    for floor in [16u32, 24, 32, 48, 64, 128, 256, 512] {
        let Some((count, pages, random)) = run(logical, floor, false) else { continue };
        let (_, _, clustered) = run(logical, floor, true).expect("same device");
        println!("{floor:>6} {count:>11} {:>12.1} {random:>10.3} {clustered:>12.3}", pages as f64 / 512.0);
    }
}
