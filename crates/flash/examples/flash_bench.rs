//! Virtual bandwidth of both device models and the simulator's own speed, as a table and
//! as JSON: `cargo run --release -p znswap-flash --example flash_bench [-- --ftl-gib N] [--ftl-only]`.
//!
//! The last row fills an 8 GiB block SSD, then writes N GiB (default 100) of 4 KiB random
//! overwrites through it (7 % over-provisioning, greedy GC: WAF about 9, the worst case
//! for the simulator's speed) and reports simulated GiB per wall second.

use std::time::Instant;

use serde::Serialize;
use znswap_flash::bench::{block_read, block_write, zns_read, zns_sequential_append, Throughput};
use znswap_flash::{BlockConfig, BlockSsd, ZnsConfig, ZnsSsd};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[derive(Serialize)]
struct Row {
    device: &'static str,
    workload: &'static str,
    queue_depth: u32,
    virtual_mib_s: f64,
    virtual_gib_s: f64,
    simulated_gib: f64,
    wall_s: f64,
    simulated_gib_per_wall_s: f64,
    device_waf: Option<f64>,
}

fn row(
    device: &'static str,
    workload: &'static str,
    queue_depth: u32,
    run: impl FnOnce() -> (Throughput, Option<f64>),
) -> Row {
    let started = Instant::now();
    let (throughput, device_waf) = run();
    let wall_s = started.elapsed().as_secs_f64();
    let simulated_gib = throughput.bytes as f64 / GIB as f64;
    Row {
        device,
        workload,
        queue_depth,
        virtual_mib_s: throughput.mib_s(),
        virtual_gib_s: throughput.gib_s(),
        simulated_gib,
        wall_s,
        simulated_gib_per_wall_s: simulated_gib / wall_s,
        device_waf,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ftl_gib: u64 = args
        .iter()
        .position(|a| a == "--ftl-gib")
        .and_then(|i| args.get(i + 1))
        .map_or(100, |v| v.parse().expect("--ftl-gib takes a whole number of GiB"));
    let ftl_only = args.iter().any(|a| a == "--ftl-only");
    let mut rows = Vec::new();
    if !ftl_only {
        device_rows(&mut rows);
    }

    let mut block = BlockSsd::new(BlockConfig::with_capacity_bytes(8 * GIB)).unwrap();
    let commands = block.logical_pages() / 32;
    let filled = block_write(&mut block, 0, 32, 32, commands, None).virtual_ns;
    let start = filled + 10 * 1_000_000_000;
    let before = block.counters();
    rows.push(row("block", "random write 4 KiB, full, 7 % OP", 32, || {
        let t = block_write(&mut block, start, 32, 1, ftl_gib * GIB / 4096, Some(3));
        (t, Some(block.counters().since(&before).waf()))
    }));
    print_rows(&rows);
}

/// Bandwidth rows of both devices: sequential write, sequential read, random read.
fn device_rows(rows: &mut Vec<Row>) {
    let mut zns = ZnsSsd::new(ZnsConfig::scaled(256, 256 * MIB)).unwrap();
    let mut end = 0;
    rows.push(row("zns", "sequential append 128 KiB", 32, || {
        let t = zns_sequential_append(&mut zns, 0, 32, 32, 16 * GIB);
        end = t.virtual_ns;
        (t, None)
    }));
    let start = end + 10_000_000;
    rows.push(row("zns", "sequential read 256 KiB", 64, || {
        (zns_read(&mut zns, start, 64, 64, 32_768, 32, None), None)
    }));
    let start = start + 10 * 1_000_000_000;
    rows.push(row("zns", "random read 4 KiB", 256, || (zns_read(&mut zns, start, 256, 1, 1 << 20, 32, Some(1)), None)));

    let mut block = BlockSsd::new(BlockConfig::with_capacity_bytes(8 * GIB)).unwrap();
    let commands = block.logical_pages() / 32;
    let mut end = 0;
    rows.push(row("block", "sequential write 128 KiB (empty)", 32, || {
        let t = block_write(&mut block, 0, 32, 32, commands, None);
        end = t.virtual_ns;
        (t, Some(block.counters().waf()))
    }));
    let start = end + 10_000_000;
    rows.push(row("block", "sequential read 256 KiB", 64, || {
        (block_read(&mut block, start, 64, 64, 32_768, None), None)
    }));
    let start = start + 10 * 1_000_000_000;
    rows.push(row("block", "random read 4 KiB", 256, || {
        (block_read(&mut block, start, 256, 1, 1 << 20, Some(2)), None)
    }));
}

fn print_rows(rows: &[Row]) {
    println!(
        "{:<6} {:<34} {:>4} {:>10} {:>8} {:>9} {:>8} {:>10} {:>6}",
        "device", "workload", "QD", "MiB/s", "GiB/s", "sim GiB", "wall s", "GiB/wall-s", "WAF"
    );
    for r in rows {
        println!(
            "{:<6} {:<34} {:>4} {:>10.1} {:>8.3} {:>9.2} {:>8.2} {:>10.1} {:>6}",
            r.device,
            r.workload,
            r.queue_depth,
            r.virtual_mib_s,
            r.virtual_gib_s,
            r.simulated_gib,
            r.wall_s,
            r.simulated_gib_per_wall_s,
            r.device_waf.map_or("-".to_string(), |w| format!("{w:.2}"))
        );
    }
    println!("{}", serde_json::to_string_pretty(rows).unwrap());
}
