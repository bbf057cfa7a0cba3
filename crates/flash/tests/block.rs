//! The block SSD model: FTL layout, TRIM, GC pacing and background GC, and the time GC
//! and TRIM take from the host.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_flash::bench::block_write;
use znswap_flash::{BlockConfig, BlockConfigError, BlockSsd, NandConfig, NandConfigError, Ns};

const MS: Ns = 1_000_000;
/// 256 MiB logical: 274 superblocks of 256 pages (one 32 KiB unit on each of 32 dies).
const LOGICAL_PAGES: u64 = 64 << 10;

fn config() -> BlockConfig {
    BlockConfig { logical_pages: LOGICAL_PAGES, ..BlockConfig::default() }
}

/// Writes every logical page once, sequentially; returns when the last write completed.
fn fill(ssd: &mut BlockSsd) -> Ns {
    let commands = ssd.logical_pages() / 64;
    block_write(ssd, 0, 32, 64, commands, None).virtual_ns
}

fn random_overwrites(ssd: &mut BlockSsd, mut now: Ns, count: u64, seed: u64) -> Ns {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    for _ in 0..count {
        let lpn = rng.next_u64() % ssd.logical_pages();
        now = ssd.write(now, lpn, 1);
    }
    now
}

#[test]
fn layout_follows_over_provisioning_and_superblock_rules() {
    let ssd = BlockSsd::new(config()).unwrap();
    assert_eq!(ssd.superblock_pages(), 256);
    assert!(ssd.superblocks() >= 256);
    let op = ssd.physical_pages() as f64 / ssd.logical_pages() as f64 - 1.0;
    assert!((0.07..0.07 + 256.0 / LOGICAL_PAGES as f64 + 1e-9).contains(&op), "over-provisioning {op}");
    let big = BlockSsd::new(BlockConfig::with_capacity_bytes(64 << 30)).unwrap();
    assert!(big.superblocks() >= 256 && big.superblocks() < 2 * 256, "auto-sized: {} superblocks", big.superblocks());
}

#[test]
fn bad_configs_name_the_problem() {
    let odd = BlockConfig { superblock_pages: 100, ..config() };
    assert!(matches!(
        BlockSsd::new(odd),
        Err(BlockConfigError::SuperblockNotStripe { superblock_pages: 100, stripe_pages: 256, .. })
    ));
    let small = BlockConfig { logical_pages: 10_000, ..config() };
    assert!(matches!(BlockSsd::new(small), Err(BlockConfigError::TooFewSuperblocks { .. })));
    let no_spare = BlockConfig { superblocks: 256, superblock_pages: 256, logical_pages: 255 * 256, ..config() };
    let error = BlockSsd::new(no_spare).unwrap_err();
    assert!(matches!(error, BlockConfigError::LogicalDoesNotFit { .. }));
    assert!(error.to_string().contains("over_provisioning"), "the fix is named: {error}");
    let nand = NandConfig { channels: 0, ..NandConfig::default() };
    assert!(matches!(
        BlockSsd::new(BlockConfig { nand, ..config() }),
        Err(BlockConfigError::Nand(NandConfigError::NoDies { channels: 0, .. }))
    ));
}

#[test]
fn trimmed_pages_are_never_copied() {
    let mut ssd = BlockSsd::new(config()).unwrap();
    let mut now = fill(&mut ssd);
    for lpn in (0..LOGICAL_PAGES).step_by(512) {
        now = ssd.trim(now, lpn, 512);
    }
    assert_eq!(ssd.counters().trims_pages, LOGICAL_PAGES);
    assert_eq!(ssd.live_pages(), 0);
    assert_eq!(ssd.read(now, 5, 1), now + ssd.config().nand.t_command_ns, "trimmed pages read as zeroes, no media");
    // Writing everything again needs the old superblocks back; none holds a valid page.
    let before = ssd.counters();
    let commands = LOGICAL_PAGES / 64;
    block_write(&mut ssd, now, 32, 64, commands, None);
    let refill = ssd.counters().since(&before);
    assert!(refill.gc_victims > 200 && refill.erases > 0, "GC reclaimed the trimmed superblocks");
    assert_eq!(refill.gc_pages_copied, 0, "trimmed pages are never copied");
    ssd.check_invariants();
}

#[test]
fn trim_invalidates_only_mapped_pages_and_keeps_counts_right() {
    let mut ssd = BlockSsd::new(config()).unwrap();
    ssd.write(0, 100, 10);
    ssd.trim(0, 95, 10);
    let counters = ssd.counters();
    assert_eq!((counters.trims_pages, counters.trim_commands), (5, 1), "only 100..105 were mapped");
    assert_eq!(ssd.live_pages(), 5);
    ssd.check_invariants();
}

#[test]
fn many_small_trims_cost_controller_time() {
    let mut ssd = BlockSsd::new(config()).unwrap();
    let start = fill(&mut ssd);
    let t_trim = ssd.config().t_trim_command_ns;
    let mut done = start;
    for lpn in 0..4096 {
        done = ssd.trim(start, lpn, 1);
    }
    assert!(done >= start + 4096 * t_trim, "4096 one-page TRIMs queue on the controller: {} ns", done - start);
    let read = ssd.read(start, 10_000, 1);
    assert!(read > done, "a read submitted with the TRIMs waits behind them");

    let mut other = BlockSsd::new(config()).unwrap();
    let start = fill(&mut other);
    let one = other.trim(start, 0, 4096);
    assert!(one - start < (done - start) / 50, "one 4096-page TRIM is far cheaper: {} ns", one - start);
}

#[test]
fn foreground_gc_keeps_free_space_and_paces_host_writes() {
    let mut ssd = BlockSsd::new(config()).unwrap();
    let filled = fill(&mut ssd);
    let empty_rate = (LOGICAL_PAGES * 4096) as f64 / filled as f64;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
    let before = ssd.counters();
    let start = filled;
    let mut now = start;
    let mut free_sum = 0u64;
    for _ in 0..3 * LOGICAL_PAGES {
        now = ssd.write(now, rng.next_u64() % LOGICAL_PAGES, 1);
        free_sum += ssd.free_superblocks() as u64;
    }
    let counters = ssd.counters().since(&before);
    // Paced GC holds free space just under the foreground threshold (the GC write point
    // may take the last free superblock for a moment while its victim is being cleaned).
    let free_mean = free_sum as f64 / (3 * LOGICAL_PAGES) as f64;
    let threshold = ssd.config().gc_foreground_free_superblocks as f64;
    assert!(free_mean > threshold - 2.0 && free_mean <= threshold, "mean free superblocks {free_mean}");
    assert!(counters.waf() > 4.0, "full device at 7 % spare: WAF {}", counters.waf());
    let full_rate = (3 * LOGICAL_PAGES * 4096) as f64 / (now - start) as f64;
    assert!(
        full_rate < empty_rate / 3.0,
        "GC steals bandwidth: {full_rate:.3} B/ns when full vs {empty_rate:.3} B/ns when empty"
    );
    ssd.check_invariants();
}

/// Mean latency of reads issued every 400 µs beside one 4 KiB write every 200 µs
/// (20 MiB/s: within what the device sustains even at its full-device WAF).
fn read_latency_beside_writes(sequential_writes: bool) -> f64 {
    let mut ssd = BlockSsd::new(config()).unwrap();
    let mut now = fill(&mut ssd) + 100 * MS;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let (mut total, mut reads) = (0, 0);
    for step in 0..30_000u64 {
        let lpn = if sequential_writes { step % LOGICAL_PAGES } else { rng.next_u64() % LOGICAL_PAGES };
        ssd.write(now, lpn, 1);
        if step % 2 == 0 {
            total += ssd.read(now, rng.next_u64() % LOGICAL_PAGES, 1) - now;
            reads += 1;
        }
        now += 200_000;
    }
    total as f64 / reads as f64
}

#[test]
fn gc_copies_delay_reads() {
    let quiet = read_latency_beside_writes(true);
    let busy = read_latency_beside_writes(false);
    assert!(busy > 1.5 * quiet, "reads beside GC take {busy:.0} ns, beside sequential writes {quiet:.0} ns");
}

#[test]
fn background_gc_uses_idle_time() {
    let mut ssd = BlockSsd::new(config()).unwrap();
    let now = fill(&mut ssd);
    let now = random_overwrites(&mut ssd, now, LOGICAL_PAGES, 4);
    let threshold = ssd.config().gc_background_free_superblocks;
    assert!(ssd.free_superblocks() < threshold, "the run left the device below the background threshold");
    let before = ssd.counters();
    // A read 50 µs later: too little idle time to clean a superblock.
    ssd.read(now + 50_000, 0, 1);
    assert!(ssd.free_superblocks() < threshold);
    // After two idle seconds the device has cleaned up to its background threshold.
    ssd.read(now + 2_000 * MS, 0, 1);
    let after = ssd.counters().since(&before);
    assert!(ssd.free_superblocks() >= threshold, "free superblocks: {}", ssd.free_superblocks());
    assert!(after.gc_pages_copied > 0 && after.host_pages_written == 0);
    ssd.check_invariants();
}

#[test]
fn unmapped_and_buffered_pages_cost_no_media_time() {
    let mut ssd = BlockSsd::new(config()).unwrap();
    let command = ssd.config().nand.t_command_ns;
    assert_eq!(ssd.read(0, 7, 4), command, "never written");
    let done = ssd.write(0, 7, 3);
    assert_eq!(ssd.read(done, 7, 3), done + command, "a partial program unit still in the buffer");
    assert_eq!(ssd.counters().pages_read, 7);
}
