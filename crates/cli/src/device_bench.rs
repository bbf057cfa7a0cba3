//! `znswap device bench`: the raw limits of a zoned device, which later figures are
//! divided by — sequential append bandwidth (1 and N threads, own zones and one shared
//! zone), merged 4 KiB appends, 4 KiB random read latency and throughput, reset latency.
//!
//! Destructive: every zone is reset first and last.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use znswap_pager::PAGE_BYTES;
use znswap_zoned::conformance::pattern;
use znswap_zoned::{format_size, AlignedBuf, AppendMerger, Geometry, ZoneCondition, ZoneError, ZonedDevice};

use crate::progress::Progress;
use crate::stats::{Latency, Table};

const MIB: f64 = (1 << 20) as f64;

pub struct BenchOptions {
    pub threads: usize,
    pub io_bytes: u64,
    /// Bytes each append phase writes at most.
    pub phase_bytes: Option<u64>,
    /// Wall-clock bound of each phase.
    pub phase_seconds: f64,
    pub json: bool,
}

#[derive(Serialize)]
pub struct DeviceBench {
    pub device: String,
    pub geometry: Geometry,
    pub threads: usize,
    pub io_bytes: u64,
    pub append_1t_mib_s: f64,
    pub append_nt_mib_s: f64,
    pub append_nt_one_zone_mib_s: f64,
    pub merged_append_threads: usize,
    pub merged_4k_append_mib_s: f64,
    pub merge_factor: f64,
    pub read_4k_qd1: Latency,
    pub read_4k_qd1_iops: f64,
    pub read_4k_nt: Latency,
    pub read_4k_nt_iops: f64,
    pub read_4k_nt_mib_s: f64,
    pub reset: Latency,
}

/// Hands out empty zones to append phases, so phases never write over each other.
struct ZoneSupply {
    next: AtomicU32,
    zone_count: u32,
}

impl ZoneSupply {
    fn claim(&self) -> Option<u32> {
        let zone = self.next.fetch_add(1, Relaxed);
        (zone < self.zone_count).then_some(zone)
    }
}

struct Phase<'a> {
    device: &'a dyn ZonedDevice,
    supply: &'a ZoneSupply,
    budget_bytes: u64,
    deadline: Instant,
}

/// Appends `io_bytes` chunks into zones claimed one after another until the budget or
/// the deadline; returns bytes written.
fn append_own_zones(phase: &Phase, io_bytes: u64, written: &AtomicU64) -> Result<()> {
    let geometry = *phase.device.geometry();
    let data = AlignedBuf::copy_of(&pattern(1, io_bytes as usize));
    let metadata = vec![0x5A; (io_bytes / geometry.lba_bytes as u64 * geometry.metadata_bytes as u64) as usize];
    while written.load(Relaxed) < phase.budget_bytes && Instant::now() < phase.deadline {
        let Some(zone) = phase.supply.claim() else { break };
        let mut zone_written = 0;
        while zone_written < geometry.zone_capacity_bytes()
            && written.load(Relaxed) < phase.budget_bytes
            && Instant::now() < phase.deadline
        {
            let len = io_bytes.min(geometry.zone_capacity_bytes() - zone_written) as usize;
            let md_len = len / geometry.lba_bytes as usize * geometry.metadata_bytes as usize;
            phase.device.append(zone, &data[..len], Some(&metadata[..md_len])).context("append")?;
            zone_written += len as u64;
            written.fetch_add(len as u64, Relaxed);
        }
        if zone_written < geometry.zone_capacity_bytes() {
            // Leave no zone open behind us: phases after this one need the open slots.
            phase.device.finish(zone).context("finish")?;
        }
    }
    Ok(())
}

/// All threads append `io_bytes` chunks to one shared zone at a time (zone append's
/// point: many writers, no coordination on the write pointer).
fn append_shared_zone(
    phase: &Phase,
    device: &dyn ZonedDevice,
    io_bytes: u64,
    current: &Mutex<Option<u32>>,
    written: &AtomicU64,
) -> Result<()> {
    let geometry = *device.geometry();
    let data = AlignedBuf::copy_of(&pattern(2, io_bytes as usize));
    let metadata = vec![0xA5; (io_bytes / geometry.lba_bytes as u64 * geometry.metadata_bytes as u64) as usize];
    let metadata = (geometry.metadata_bytes != 0).then_some(metadata.as_slice());
    while written.load(Relaxed) < phase.budget_bytes && Instant::now() < phase.deadline {
        let Some(zone) = *current.lock().unwrap() else { break };
        match device.append(zone, &data, metadata) {
            Ok(_) => {
                written.fetch_add(io_bytes, Relaxed);
            }
            Err(ZoneError::ZoneFull { .. } | ZoneError::ExceedsCapacity { .. }) => {
                let mut current = current.lock().unwrap();
                if *current == Some(zone) {
                    device.finish(zone).context("finish")?;
                    *current = phase.supply.claim();
                }
            }
            Err(error) => return Err(error).context("append"),
        }
    }
    Ok(())
}

fn run_append_phase(threads: usize, body: impl Fn(&AtomicU64) -> Result<()> + Sync) -> Result<f64> {
    let written = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(|| body(&written))).collect();
        for handle in handles {
            handle.join().expect("bench thread panicked")?;
        }
        Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(written.load(Relaxed) as f64 / MIB / seconds)
}

/// Random 4 KiB reads over everything written, from `threads` threads.
fn random_reads(
    device: &dyn ZonedDevice,
    threads: usize,
    deadline: Instant,
    limit_per_thread: usize,
) -> Result<(Latency, f64)> {
    let geometry = *device.geometry();
    let extents: Vec<(u64, u64)> = device
        .report_zones()?
        .into_iter()
        .map(|z| (z.start_lba, z.written_lbas()))
        .filter(|&(_, written)| written * geometry.lba_bytes as u64 >= PAGE_BYTES as u64)
        .collect();
    anyhow::ensure!(!extents.is_empty(), "nothing was written to read back");
    let page_lbas = PAGE_BYTES as u64 / geometry.lba_bytes as u64;
    let started = Instant::now();
    let samples: Vec<Vec<u64>> = std::thread::scope(|scope| -> Result<Vec<Vec<u64>>> {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let extents = &extents;
                scope.spawn(move || -> Result<Vec<u64>> {
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x5EED + thread as u64);
                    let mut buffer = AlignedBuf::zeroed(PAGE_BYTES);
                    let mut samples = Vec::with_capacity(limit_per_thread);
                    while samples.len() < limit_per_thread && Instant::now() < deadline {
                        let (start, written) = extents[(rng.next_u64() % extents.len() as u64) as usize];
                        let pages = written / page_lbas;
                        let lba = start + (rng.next_u64() % pages) * page_lbas;
                        let begun = Instant::now();
                        device.read(lba, &mut buffer, None).context("read")?;
                        samples.push(begun.elapsed().as_nanos() as u64);
                    }
                    Ok(samples)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("read thread panicked")).collect()
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let all: Vec<u64> = samples.into_iter().flatten().collect();
    let iops = all.len() as f64 / seconds;
    Ok((Latency::from_ns(&all), iops))
}

pub fn run(device: &dyn ZonedDevice, options: &BenchOptions) -> Result<DeviceBench> {
    let geometry = *device.geometry();
    let line = Progress::new(!options.json);
    let granule = geometry.write_granularity_bytes as u64;
    let io_bytes = (options.io_bytes.min(geometry.zone_append_max_bytes as u64) / granule).max(1) * granule;
    // Four append phases share the device; keep a fifth of it per phase by default.
    let phase_bytes = options.phase_bytes.unwrap_or((geometry.capacity_bytes() / 5).min(1 << 30));
    let open_limit = geometry.open_limit().saturating_sub(1).max(1) as usize;
    let threads = options.threads.clamp(1, open_limit);
    let phase_duration = Duration::from_secs_f64(options.phase_seconds);

    line.set("resetting zones");
    device.reset_all().context("resetting the device before the bench")?;
    let supply = ZoneSupply { next: AtomicU32::new(0), zone_count: geometry.zone_count };
    let phase =
        |budget_bytes| Phase { device, supply: &supply, budget_bytes, deadline: Instant::now() + phase_duration };

    line.set("append, 1 thread");
    let one = phase(phase_bytes);
    let append_1t_mib_s = run_append_phase(1, |written| append_own_zones(&one, io_bytes, written))?;

    line.set(format!("append, {threads} threads, a zone each"));
    let many = phase(phase_bytes);
    let append_nt_mib_s = run_append_phase(threads, |written| append_own_zones(&many, io_bytes, written))?;

    line.set(format!("append, {threads} threads, one zone"));
    let shared = phase(phase_bytes);
    let current = Mutex::new(supply.claim());
    let append_nt_one_zone_mib_s =
        run_append_phase(threads, |written| append_shared_zone(&shared, device, io_bytes, &current, written))?;
    if let Some(zone) = *current.lock().unwrap() {
        finish_if_open(device, zone)?;
    }

    // Many writers of single pages: what the swap-out path looks like before merging.
    let merged_append_threads = (threads * 4).max(4);
    line.set(format!("4 KiB appends, {merged_append_threads} threads, merged"));
    let merger = AppendMerger::new(device, 2);
    let merged = phase(phase_bytes / 4);
    let current = Mutex::new(supply.claim());
    let merged_4k_append_mib_s = run_append_phase(merged_append_threads, |written| {
        append_shared_zone(&merged, &merger, (PAGE_BYTES as u64).max(granule), &current, written)
    })?;
    if let Some(zone) = *current.lock().unwrap() {
        finish_if_open(device, zone)?;
    }
    let merge_stats = merger.stats();
    let merge_factor = merge_stats.requests as f64 / merge_stats.device_appends.max(1) as f64;

    line.set("4 KiB random reads, 1 thread");
    let (read_4k_qd1, read_4k_qd1_iops) = random_reads(device, 1, Instant::now() + phase_duration, 1 << 20)?;
    line.set(format!("4 KiB random reads, {threads} threads"));
    let (read_4k_nt, read_4k_nt_iops) = random_reads(device, threads, Instant::now() + phase_duration, 1 << 20)?;

    line.set("zone resets");
    let mut reset_ns = Vec::with_capacity(geometry.zone_count as usize);
    for zone in device.report_zones()? {
        if !matches!(zone.condition, ZoneCondition::Empty | ZoneCondition::ReadOnly | ZoneCondition::Offline) {
            let begun = Instant::now();
            device.reset(zone.zone).context("reset")?;
            reset_ns.push(begun.elapsed().as_nanos() as u64);
        }
    }
    device.sync()?;
    line.clear();

    Ok(DeviceBench {
        device: device.describe(),
        geometry,
        threads,
        io_bytes,
        append_1t_mib_s,
        append_nt_mib_s,
        append_nt_one_zone_mib_s,
        merged_append_threads,
        merged_4k_append_mib_s,
        merge_factor,
        read_4k_qd1,
        read_4k_qd1_iops,
        read_4k_nt,
        read_4k_nt_iops,
        read_4k_nt_mib_s: read_4k_nt_iops * PAGE_BYTES as f64 / MIB,
        reset: Latency::from_ns(&reset_ns),
    })
}

fn finish_if_open(device: &dyn ZonedDevice, zone: u32) -> Result<()> {
    let condition = device.report_zone(zone)?.condition;
    if condition.is_active() {
        device.finish(zone).context("finish")?;
    }
    Ok(())
}

pub fn print(bench: &DeviceBench) {
    println!("{}: {} threads, appends of {}", bench.device, bench.threads, format_size(bench.io_bytes));
    let latency = |l: &Latency| format!("p50 {:.1} µs, p99 {:.1} µs", l.p50_us, l.p99_us);
    let mut table = Table::new(&["measure", "throughput", "latency"]);
    table.row(vec!["append, 1 thread".into(), format!("{:.0} MiB/s", bench.append_1t_mib_s), String::new()]);
    table.row(vec![
        format!("append, {} threads (a zone each)", bench.threads),
        format!("{:.0} MiB/s", bench.append_nt_mib_s),
        String::new(),
    ]);
    table.row(vec![
        format!("append, {} threads (one zone)", bench.threads),
        format!("{:.0} MiB/s", bench.append_nt_one_zone_mib_s),
        String::new(),
    ]);
    table.row(vec![
        format!("4 KiB appends, {} threads, merged", bench.merged_append_threads),
        format!("{:.0} MiB/s", bench.merged_4k_append_mib_s),
        format!("{:.1} pages per device append", bench.merge_factor),
    ]);
    table.row(vec![
        "4 KiB random read, 1 thread".into(),
        format!("{:.1}k IOPS", bench.read_4k_qd1_iops / 1e3),
        latency(&bench.read_4k_qd1),
    ]);
    table.row(vec![
        format!("4 KiB random read, {} threads", bench.threads),
        format!("{:.1}k IOPS ({:.0} MiB/s)", bench.read_4k_nt_iops / 1e3, bench.read_4k_nt_mib_s),
        latency(&bench.read_4k_nt),
    ]);
    table.row(vec![
        format!("zone reset ({} zones)", bench.reset.count),
        String::new(),
        format!("{}, max {:.1} µs", latency(&bench.reset), bench.reset.max_us),
    ]);
    print!("{}", table.render());
}
