//! Bandwidth targets of the default NAND (8 channels × 4 dies, tR 75 µs, tPROG 1 ms per
//! 32 KiB, 410 MiB/s channels), each within ±10 %, and the queueing a read sees.

use znswap_flash::bench::{block_read, block_write, zns_read, zns_sequential_append};
use znswap_flash::{BlockConfig, BlockSsd, ZnsConfig, ZnsSsd};

const MIB: u64 = 1 << 20;

fn zns() -> ZnsSsd {
    // 64 zones of 64 MiB capacity: big enough to stripe over all 32 dies many times.
    ZnsSsd::new(ZnsConfig::scaled(64, 64 * MIB)).unwrap()
}

fn assert_within(measured: f64, target: f64, what: &str) {
    assert!((measured - target).abs() <= 0.10 * target, "{what}: {measured:.3} GiB/s, target {target} GiB/s ± 10 %");
}

#[test]
fn zns_sequential_write_is_program_bound_near_1_gib_s() {
    let mut ssd = zns();
    let throughput = zns_sequential_append(&mut ssd, 0, 32, 32, 512 * MIB);
    assert_within(throughput.gib_s(), 1.0, "ZNS sequential 128 KiB appends");
}

#[test]
fn zns_sequential_read_is_channel_bound_near_3_2_gib_s() {
    let mut ssd = zns();
    let filled = zns_sequential_append(&mut ssd, 0, 32, 256, 8 * 64 * MIB);
    let start = filled.virtual_ns + 10_000_000;
    let throughput = zns_read(&mut ssd, start, 64, 64, 4096, 8, None);
    assert_within(throughput.gib_s(), 3.2, "ZNS sequential 256 KiB reads");
}

#[test]
fn zns_random_4k_read_is_die_bound_near_1_4_gib_s() {
    let mut ssd = zns();
    let filled = zns_sequential_append(&mut ssd, 0, 32, 256, 8 * 64 * MIB);
    let start = filled.virtual_ns + 10_000_000;
    let throughput = zns_read(&mut ssd, start, 256, 1, 200_000, 8, Some(9));
    assert_within(throughput.gib_s(), 1.4, "ZNS random 4 KiB reads at QD 256");
}

fn block_ssd() -> BlockSsd {
    BlockSsd::new(BlockConfig { logical_pages: 256 * MIB / 4096 * 4, ..BlockConfig::default() }).unwrap()
}

#[test]
fn block_ssd_bandwidth_matches_the_nand() {
    let mut ssd = block_ssd();
    let commands = ssd.logical_pages() / 32;
    let write = block_write(&mut ssd, 0, 32, 32, commands, None);
    assert_within(write.gib_s(), 1.0, "block SSD sequential 128 KiB writes on an empty device");
    let start = write.virtual_ns + 10_000_000;
    let read = block_read(&mut ssd, start, 64, 64, 4096, None);
    assert_within(read.gib_s(), 3.2, "block SSD sequential 256 KiB reads");
    let start = start + read.virtual_ns;
    let random = block_read(&mut ssd, start, 256, 1, 200_000, Some(4));
    assert_within(random.gib_s(), 1.4, "block SSD random 4 KiB reads at QD 256");
}
