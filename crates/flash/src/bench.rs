//! Closed-loop drivers that measure the devices' virtual bandwidth: `queue_depth`
//! commands in flight, each completion submitting the next at its completion time (so
//! `now` never runs backwards). Used by the timing tests and `examples/flash_bench.rs`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use znswap_core::PAGE_BYTES;

use crate::{BlockSsd, Ns, ZnsSsd};

/// Bytes moved over a span of virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub commands: u64,
    pub bytes: u64,
    /// From the first submission (time `start`) to the last completion.
    pub virtual_ns: Ns,
}

impl Throughput {
    pub fn mib_s(&self) -> f64 {
        self.bytes as f64 / (1u64 << 20) as f64 / (self.virtual_ns as f64 / 1e9)
    }

    pub fn gib_s(&self) -> f64 {
        self.mib_s() / 1024.0
    }
}

/// Runs `commands` commands, `queue_depth` at a time, from virtual time `start`.
/// `submit(now, index)` issues command `index` at `now` and returns (completion, bytes).
pub fn closed_loop(
    start: Ns,
    queue_depth: u32,
    commands: u64,
    mut submit: impl FnMut(Ns, u64) -> (Ns, u64),
) -> Throughput {
    assert!(queue_depth >= 1);
    let mut in_flight = BinaryHeap::with_capacity(queue_depth as usize);
    let mut bytes = 0;
    let mut last = start;
    for index in 0..commands {
        let now = if in_flight.len() < queue_depth as usize {
            start
        } else {
            let Reverse(done) = in_flight.pop().expect("queue is full");
            done
        };
        let (done, moved): (Ns, u64) = submit(now, index);
        assert!(done >= now, "a command completed before it was submitted");
        bytes += moved;
        last = last.max(done);
        in_flight.push(Reverse(done));
    }
    Throughput { commands, bytes, virtual_ns: last - start }
}

/// Appends `total_bytes` to zones `0..` in `append_pages`-page commands, resetting a zone
/// before reuse. Returns the throughput and the virtual time the last append completed.
pub fn zns_sequential_append(
    ssd: &mut ZnsSsd,
    start: Ns,
    queue_depth: u32,
    append_pages: u32,
    total_bytes: u64,
) -> Throughput {
    let geometry = ssd.geometry();
    let capacity = geometry.zone_capacity_lbas;
    let commands = total_bytes / (append_pages as u64 * PAGE_BYTES as u64);
    let (mut zone, mut used) = (0u32, 0u64);
    closed_loop(start, queue_depth, commands, |now, _| {
        let mut now = now;
        if used + append_pages as u64 > capacity {
            zone = (zone + 1) % geometry.zone_count;
            used = 0;
            if ssd.zone_info(zone).written_lbas() > 0 {
                now = ssd.reset(now, zone).expect("reset");
            }
        }
        used += append_pages as u64;
        let (_, done) = ssd.append(now, zone, append_pages).expect("append");
        (done, append_pages as u64 * PAGE_BYTES as u64)
    })
}

/// Reads `commands` × `read_pages` LBAs from the written part of zones `0..zones`:
/// sequentially through them, or at random page-aligned offsets.
pub fn zns_read(
    ssd: &mut ZnsSsd,
    start: Ns,
    queue_depth: u32,
    read_pages: u32,
    commands: u64,
    zones: u32,
    random_seed: Option<u64>,
) -> Throughput {
    let geometry = ssd.geometry();
    let per_zone = geometry.zone_capacity_lbas / read_pages as u64;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(random_seed.unwrap_or(0));
    let slots = per_zone * zones as u64;
    closed_loop(start, queue_depth, commands, |now, index| {
        let slot = match random_seed {
            Some(_) => ((rng.next_u64() as u128 * slots as u128) >> 64) as u64,
            None => index % slots,
        };
        let zone = (slot / per_zone) as u32;
        let lba = geometry.zone_start_lba(zone) + (slot % per_zone) * read_pages as u64;
        let done = ssd.read(now, lba, read_pages).expect("read");
        (done, read_pages as u64 * PAGE_BYTES as u64)
    })
}

/// Writes `commands` × `pages` logical pages: sequentially from 0 (wrapping), or at
/// random page-aligned positions.
pub fn block_write(
    ssd: &mut BlockSsd,
    start: Ns,
    queue_depth: u32,
    pages: u32,
    commands: u64,
    random_seed: Option<u64>,
) -> Throughput {
    block_commands(ssd, start, queue_depth, pages, commands, random_seed, BlockSsd::write)
}

/// Reads `commands` × `pages` logical pages, sequentially or at random.
pub fn block_read(
    ssd: &mut BlockSsd,
    start: Ns,
    queue_depth: u32,
    pages: u32,
    commands: u64,
    random_seed: Option<u64>,
) -> Throughput {
    block_commands(ssd, start, queue_depth, pages, commands, random_seed, BlockSsd::read)
}

/// `commands` × `pages`-page commands issued by `command`, sequentially from 0
/// (wrapping) or at random page-aligned positions.
fn block_commands(
    ssd: &mut BlockSsd,
    start: Ns,
    queue_depth: u32,
    pages: u32,
    commands: u64,
    random_seed: Option<u64>,
    command: fn(&mut BlockSsd, Ns, u64, u32) -> Ns,
) -> Throughput {
    let slots = ssd.logical_pages() / pages as u64;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(random_seed.unwrap_or(0));
    closed_loop(start, queue_depth, commands, |now, index| {
        let slot = match random_seed {
            Some(_) => ((rng.next_u64() as u128 * slots as u128) >> 64) as u64,
            None => index % slots,
        };
        (command(ssd, now, slot * pages as u64, pages), pages as u64 * PAGE_BYTES as u64)
    })
}
