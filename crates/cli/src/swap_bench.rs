//! `znswap bench`: a workload from the paper's evaluation running on pager memory larger
//! than its budget, every page verified, with the device's own limits measured in the
//! same run so the figures come as ratios.
//!
//! Each page holds a pattern derived from its number and a version the bench keeps, so a
//! read of stale, foreign or zeroed data is counted as corrupted.
//!
//! With `--inject-faults` the pager runs over a [`FaultyDevice`]: failed commands, zones
//! going offline, slow completions. A page whose only copy is lost comes back poisoned,
//! and touching it raises SIGBUS; [`lost_pages`] catches that, records the page and lets
//! the bench go on. A lost page is never verified again: losses are expected, a page read
//! back wrong never is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use znswap_pager::{lost_pages, Pager, PagerConfig, PagerStats, PAGE_BYTES};
use znswap_workload::pattern::{fill, holds};
use znswap_workload::{Generator, Workload};
use znswap_zoned::{
    format_size, AlignedBuf, FaultSpec, FaultyDevice, InjectedFaults, ZoneCondition, ZoneError, ZonedDevice,
};

use crate::progress::Progress;
use crate::stats::{Latency, Table};

/// A page access slower than this faulted (a resident page is touched in well under a
/// microsecond, a fault costs several).
const FAULT_THRESHOLD_NS: u64 = 1_500;
const MIB: f64 = (1 << 20) as f64;

pub struct SwapBenchOptions {
    pub workload: Workload,
    /// The pager's configuration (its budget is `--memory`).
    pub pager: PagerConfig,
    pub wss_bytes: u64,
    pub threads: usize,
    pub seconds: f64,
    pub ops_max: u64,
    /// Accesses run after the first writes, before the clock starts (all threads).
    pub warm_up_ops: u64,
    pub seed: u64,
    pub ceiling_seconds: f64,
    /// Write every page once before the clock starts (see [`warms_up`]).
    pub warm_up: bool,
    /// Faults injected into the pager's device commands (not the ceilings' measurements).
    pub inject_faults: Option<FaultSpec>,
    pub json: bool,
}

/// What `znswap bench` reports: the run's shape, the pager's configuration, its counters
/// over the timed run (`stats`, one name each), and the figures derived from them and
/// from the device's own limits measured in the same run.
#[derive(Serialize)]
pub struct SwapBench {
    pub workload: &'static str,
    pub device: String,
    pub threads: usize,
    /// Every page was written once before the clock started.
    pub warmed_up: bool,
    /// Accesses run after that, before the clock started.
    pub warm_up_ops: u64,
    pub wss_bytes: u64,
    /// Working set over the device's capacity.
    pub swap_utilization: f64,
    /// The pager's configuration.
    pub config: PagerConfig,
    /// The pager's counters over the timed run.
    pub stats: PagerStats,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub swap_out_mib_s: f64,
    /// Swap-out bandwidth while swap-out ran: over the time from the first swap-out
    /// append (or the start of the timed part, if later) to its end. Equals
    /// `swap_out_mib_s` when swapping ran all along; anon-w-seq's single pass first fills
    /// the budget, swapping nothing, for a part of its time.
    pub swap_out_steady_mib_s: f64,
    pub swap_out_seconds: f64,
    pub swap_in_mib_s: f64,
    /// Over the whole run, the final verification of every page included: swap-ins,
    /// device errors, pages the pager reported lost.
    pub swap_in_pages_with_verification: u64,
    pub device_errors: u64,
    pub lost_pages: u64,
    /// Fault latency as the bench's threads saw it (touches slower than a fault).
    pub fault_p50_us: f64,
    pub fault_p99_us: f64,
    pub faults_sampled: u64,
    /// A swap-in's time inside the pager, averaged over swap-in reads: waiting for the
    /// pager's lock, the device read, installing the page.
    pub swap_in_lock_wait_us: f64,
    pub swap_in_read_us: f64,
    pub swap_in_install_us: f64,
    /// Wall time of swap-out appends per page written, in µs.
    pub evictor_append_us_per_page: f64,
    /// Pages per swap-out append.
    pub evictor_append_pages_avg: f64,
    /// CPU time of the evictor threads (picking, protecting, handing over, discarding)
    /// per page swapped out, in µs.
    pub evictor_cpu_us_per_page: f64,
    /// CPU time of the I/O threads (appends, GC, resets) per page swapped out, in µs.
    pub io_cpu_us_per_page: f64,
    /// Device bytes written (data, GC moves, footers, padding) per byte swapped out.
    pub waf: f64,
    /// CPU time of GC work over the run, in percent of one core.
    pub gc_cpu_pct: f64,
    /// GC CPU per page the GC moved, in µs (independent of the run's throughput).
    pub gc_cpu_us_per_page_moved: f64,
    /// Pages the GC read per page it moved (> 1: reads span gaps of dead slots).
    pub gc_read_pages_per_page_moved: f64,
    pub pages_verified: u64,
    pub corrupted: u64,
    /// Pages whose touch raised the SIGBUS of a lost page (never verified after); pages
    /// lost after the final pass last touched them are touched again to be found.
    pub lost_pages_observed: u64,
    /// The `--inject-faults` spec in full, and what the wrapper injected.
    pub inject_faults: Option<String>,
    pub injected: Option<InjectedFaults>,
    pub host_bytes_per_slot: f64,
    /// Raw append bandwidth of the same device (the ceiling for `anon-w-seq`): the mean
    /// of a measurement before the workload and one after it.
    pub device_append_mib_s: f64,
    pub device_append_before_after_mib_s: [f64; 2],
    /// Append bandwidth while serving an equal number of 4 KiB random reads at the
    /// bench's thread count (the ceiling for random-write workloads); before and after
    /// too.
    pub device_mixed_mib_s: f64,
    pub device_mixed_before_after_mib_s: [f64; 2],
    /// Raw 4 KiB random read latency of the device, for the fault latency to be read against.
    pub device_read_p50_us: f64,
    pub device_read_p99_us: f64,
    /// `swap_out_mib_s` over the matching ceiling.
    pub efficiency: f64,
    /// `swap_out_steady_mib_s` over the same ceiling.
    pub efficiency_steady: f64,
}

/// Appends of `append_bytes` to zones in turn for `duration`; with `read_pairs`, each
/// appended page is paired with one 4 KiB random read of earlier data. Returns append
/// MiB/s and the read latencies.
fn device_ceiling(
    device: &dyn ZonedDevice,
    threads: usize,
    append_bytes: usize,
    duration: Duration,
    read_pairs: bool,
) -> Result<(f64, Latency)> {
    let geometry = *device.geometry();
    device.reset_all().context("resetting the device")?;
    // Something to read: the first zone, written once.
    let first_zone_bytes = geometry.zone_capacity_bytes().min(64 << 20) as usize;
    let seed_data = vec![0xA5u8; append_bytes];
    let mut written = 0;
    while written < first_zone_bytes {
        let len = append_bytes.min(first_zone_bytes - written);
        device.append(0, &seed_data[..len], None).context("seeding data to read")?;
        written += len;
    }
    device.finish(0).ok();
    let readable_pages = (first_zone_bytes / 4096) as u64;
    let next_zone = AtomicU64::new(1);
    let appended = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let samples: Vec<Vec<u64>> = std::thread::scope(|scope| -> Result<Vec<Vec<u64>>> {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (next_zone, appended, stop) = (&next_zone, &appended, &stop);
                scope.spawn(move || -> Result<Vec<u64>> {
                    // Aligned, as the pager's buffers are: no bounce copy in the ceiling.
                    let data = AlignedBuf::copy_of(&vec![0x5Au8; append_bytes]);
                    let mut page = AlignedBuf::zeroed(4096);
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(thread as u64 + 1);
                    let mut samples = Vec::new();
                    let mut zone = next_zone.fetch_add(1, Relaxed) as u32;
                    while !stop.load(Relaxed) && started.elapsed() < duration {
                        if zone >= geometry.zone_count {
                            break;
                        }
                        match device.append(zone, &data, None) {
                            Ok(_) => {
                                appended.fetch_add(append_bytes as u64, Relaxed);
                            }
                            Err(ZoneError::ZoneFull { .. } | ZoneError::ExceedsCapacity { .. }) => {
                                device.finish(zone).ok();
                                zone = next_zone.fetch_add(1, Relaxed) as u32;
                                continue;
                            }
                            Err(error) => return Err(error).context("append"),
                        }
                        if read_pairs {
                            for _ in 0..append_bytes / 4096 {
                                let lba = (rng.next_u64() % readable_pages) * (4096 / geometry.lba_bytes as u64);
                                let begun = Instant::now();
                                device.read(lba, &mut page, None).context("read")?;
                                samples.push(begun.elapsed().as_nanos() as u64);
                            }
                        }
                    }
                    if zone < geometry.zone_count {
                        device.finish(zone).ok();
                    }
                    stop.store(true, Relaxed);
                    Ok(samples)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("ceiling thread panicked")).collect()
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let all: Vec<u64> = samples.into_iter().flatten().collect();
    device.reset_all().context("resetting the device")?;
    Ok((appended.load(Relaxed) as f64 / MIB / seconds, Latency::from_ns(&all)))
}

pub fn run(device: Arc<dyn ZonedDevice>, options: &SwapBenchOptions) -> Result<SwapBench> {
    let geometry = *device.geometry();
    let line = Progress::new(!options.json);
    let progress = |message: &str| line.set(message.to_string());
    let capacity = geometry.capacity_bytes();
    ensure!(
        options.wss_bytes < capacity,
        "the working set ({}) does not fit the device's capacity ({}); use a smaller --wss or a larger device",
        format_size(options.wss_bytes),
        format_size(capacity)
    );
    ensure!(options.pager.budget_bytes() < options.wss_bytes, "--memory must be below --wss, or nothing is swapped");

    // The device's own limits, measured on this device before the workload and again
    // after it: its speed drifts within minutes, and the mean of the two brackets the run.
    let before = measure_ceilings(&*device, options, &progress)?;
    let mut bench = run_paged(&device, options, capacity)?;
    let after = measure_ceilings(&*device, options, &progress)?;
    bench.set_ceilings(options.workload, &before, &after);
    Ok(bench)
}

/// The workload on paged memory: the pager started (over injected faults if asked), the
/// working set allocated and driven, every lost page found, the figures taken.
fn run_paged(device: &Arc<dyn ZonedDevice>, options: &SwapBenchOptions, capacity: u64) -> Result<SwapBench> {
    // The ceilings measure the device as it is; only the pager's commands go through
    // the faults.
    let faulty = options.inject_faults.map(|spec| Arc::new(FaultyDevice::new(device.clone(), spec)));
    let pager_device: Arc<dyn ZonedDevice> = match &faulty {
        Some(faulty) => faulty.clone(),
        None => device.clone(),
    };
    // Before the pager starts: its self-paging handler must find ours to chain to.
    lost_pages::install().context("installing the SIGBUS handler for lost pages")?;
    let pager = Pager::new(pager_device, options.pager.clone()).context("starting the pager")?;
    let region = pager.alloc(options.wss_bytes, 0).context("allocating the working set")?;
    let pages = region.pages();
    let base = region.as_ptr() as usize;
    ensure!(pages / options.threads as u64 > 0, "the working set is smaller than one page per thread");
    let lost = lost_pages::watch(base, pages).context("watching the working set for lost pages")?;
    let driven = drive(
        base,
        pages,
        options,
        &|page| lost.is_lost(page),
        || format!("resident {}", format_size(pager.stats().core.resident_pages * PAGE_BYTES as u64)),
        || (pager.stats(), device.counters().bytes_written),
    );
    // (Taken before the touches below: the swap-in figures leave their reads out.)
    let whole_run = pager.stats();
    find_every_lost_page(base, pages, &lost, || pager.stats().core.lost_pages);
    let mut bench = SwapBench::of(options, &driven, &whole_run);
    bench.device = device.describe();
    bench.wss_bytes = pages * PAGE_BYTES as u64;
    bench.swap_utilization = bench.wss_bytes as f64 / capacity as f64;
    bench.lost_pages = pager.stats().core.lost_pages;
    bench.lost_pages_observed = lost.count();
    bench.injected = faulty.as_ref().map(|faulty| faulty.injected());
    bench.host_bytes_per_slot = pager.host_bytes_per_slot();
    drop(region);
    // The region is unmapped: no SIGBUS can name it any more.
    drop(lost);
    drop(pager);
    Ok(bench)
}

impl SwapBench {
    /// The figures of a driven run: the counters over its timed part (`driven`'s two
    /// snapshots, with the device's bytes written), `whole_run` the pager's at its end.
    fn of(options: &SwapBenchOptions, driven: &Driven<(PagerStats, u64)>, whole_run: &PagerStats) -> SwapBench {
        let Driven {
            results,
            seconds,
            ops,
            before: (start, device_written_before),
            figures: (end, device_written_after),
        } = driven;
        let (seconds, ops) = (*seconds, *ops);
        let stats = end.since(start);
        let core = &stats.core;
        let page = PAGE_BYTES as u64;
        let device_written = device_written_after - device_written_before;
        let host_written = core.swap_outs_written * page;
        let faults: Vec<u64> = results.iter().flat_map(|r| r.faults_ns.iter().copied()).collect();
        let fault_latency = Latency::from_ns(&faults);
        let swap_out_mib_s = host_written as f64 / MIB / seconds;
        // (The pager's clock: its uptime when the timed part began and ended.)
        let swap_out_seconds = if end.core.first_swap_out_ns == 0 {
            0.0
        } else {
            let from = end.core.first_swap_out_ns.max(start.uptime_ns);
            end.uptime_ns.saturating_sub(from) as f64 / 1e9
        };
        let swap_out_steady_mib_s =
            if swap_out_seconds > 0.0 { host_written as f64 / MIB / swap_out_seconds } else { swap_out_mib_s };
        let per_read_us = |ns: u64| ns as f64 / 1e3 / core.swap_in_reads.max(1) as f64;
        let per_out_us = |ns: u64| ns as f64 / 1e3 / core.swap_outs_written.max(1) as f64;
        SwapBench {
            workload: options.workload.name(),
            device: String::new(),
            threads: options.threads,
            warmed_up: options.warm_up && warms_up(options.workload),
            warm_up_ops: options.warm_up_ops,
            wss_bytes: 0,
            swap_utilization: 0.0,
            config: options.pager.clone(),
            seconds,
            ops,
            ops_per_s: ops as f64 / seconds,
            swap_out_mib_s,
            swap_out_steady_mib_s,
            swap_out_seconds,
            swap_in_mib_s: (core.swap_in_reads * page) as f64 / MIB / seconds,
            swap_in_pages_with_verification: whole_run.core.swap_in_reads,
            device_errors: whole_run.core.device_errors,
            lost_pages: 0,
            fault_p50_us: fault_latency.p50_us,
            fault_p99_us: fault_latency.p99_us,
            faults_sampled: faults.len() as u64,
            swap_in_lock_wait_us: per_read_us(stats.fault_lock_wait_ns),
            swap_in_read_us: per_read_us(stats.fault_read_ns),
            swap_in_install_us: per_read_us(stats.fault_install_ns),
            evictor_cpu_us_per_page: per_out_us(stats.evictor_cpu_ns),
            io_cpu_us_per_page: per_out_us(stats.io_cpu_ns),
            evictor_append_us_per_page: per_out_us(stats.evictor_append_ns),
            evictor_append_pages_avg: core.swap_outs_written as f64 / core.swap_out_appends.max(1) as f64,
            waf: znswap_core::waf(host_written, device_written),
            gc_cpu_pct: stats.gc_cpu_ns as f64 / 1e9 / seconds * 100.0,
            gc_cpu_us_per_page_moved: stats.gc_cpu_ns as f64 / 1e3 / stats.engine.gc_pages_written.max(1) as f64,
            gc_read_pages_per_page_moved: stats.engine.gc_pages_read as f64
                / stats.engine.gc_pages_written.max(1) as f64,
            pages_verified: results.iter().map(|r| r.verified).sum(),
            corrupted: results.iter().map(|r| r.corrupted).sum(),
            lost_pages_observed: 0,
            inject_faults: options.inject_faults.map(|spec| spec.to_string()),
            injected: None,
            host_bytes_per_slot: 0.0,
            device_append_mib_s: 0.0,
            device_append_before_after_mib_s: [0.0; 2],
            device_mixed_mib_s: 0.0,
            device_mixed_before_after_mib_s: [0.0; 2],
            device_read_p50_us: 0.0,
            device_read_p99_us: 0.0,
            efficiency: 0.0,
            efficiency_steady: 0.0,
            stats,
        }
    }

    /// The device's limits measured before and after the workload, and the swap-out's
    /// efficiency against the one that bounds this workload.
    fn set_ceilings(&mut self, workload: Workload, before: &Ceilings, after: &Ceilings) {
        self.device_append_before_after_mib_s = [before.append_mib_s, after.append_mib_s];
        self.device_append_mib_s = (before.append_mib_s + after.append_mib_s) / 2.0;
        self.device_mixed_before_after_mib_s = [before.mixed_mib_s, after.mixed_mib_s];
        self.device_mixed_mib_s = (before.mixed_mib_s + after.mixed_mib_s) / 2.0;
        self.device_read_p50_us = (before.reads.p50_us + after.reads.p50_us) / 2.0;
        self.device_read_p99_us = (before.reads.p99_us + after.reads.p99_us) / 2.0;
        let ceiling = if workload == Workload::AnonWSeq { self.device_append_mib_s } else { self.device_mixed_mib_s };
        self.efficiency = if ceiling > 0.0 { self.swap_out_mib_s / ceiling } else { 0.0 };
        self.efficiency_steady = if ceiling > 0.0 { self.swap_out_steady_mib_s / ceiling } else { 0.0 };
    }
}

struct Ceilings {
    append_mib_s: f64,
    mixed_mib_s: f64,
    reads: Latency,
}

/// Raw appends (one thread), then appends paired with 4 KiB random reads (the bench's
/// thread count). Resets the device.
fn measure_ceilings(device: &dyn ZonedDevice, options: &SwapBenchOptions, progress: &dyn Fn(&str)) -> Result<Ceilings> {
    let append_bytes = (device.geometry().zone_append_max_bytes as usize).min(1 << 20);
    let time = Duration::from_secs_f64(options.ceiling_seconds);
    progress("measuring the device: appends");
    let (append_mib_s, _) = device_ceiling(device, 1, append_bytes, time, false)?;
    progress("measuring the device: appends with paired 4 KiB reads");
    let (mixed_mib_s, reads) = device_ceiling(device, options.threads, append_bytes, time, true)?;
    Ok(Ceilings { append_mib_s, mixed_mib_s, reads })
}

/// A lost page is found only when touched after its loss, and a zone can go offline (or
/// the pager learn so, at its next command there) after the final pass last touched some
/// of its pages. While the pager counts more lost pages than were found, every page not
/// found lost is touched again; a pass that finds none ends it (the counts then differ
/// for real, which the fault tests catch).
fn find_every_lost_page(base: usize, pages: u64, lost: &lost_pages::Watch, pager_lost: impl Fn() -> u64) {
    loop {
        let found = lost.count();
        if pager_lost() <= found {
            return;
        }
        for page in (0..pages).filter(|&page| !lost.is_lost(page)) {
            // SAFETY: a page of the watched region; the bench's threads are done with it.
            unsafe { std::ptr::read_volatile((base + page as usize * PAGE_BYTES) as *const u8) };
        }
        if lost.count() == found {
            return;
        }
    }
}

/// After an access has touched `page`: a write fills it with its next version, a read
/// checks the last one.
fn write_or_verify(
    result: &mut ThreadResult,
    version: &mut u64,
    write: bool,
    bytes: &mut [u8],
    page: u64,
    is_lost: &dyn Fn(u64) -> bool,
) {
    if write {
        *version += 1;
        fill(bytes, page, *version);
    } else {
        verify(result, bytes, page, *version, is_lost);
    }
}

/// Counts a page read back as verified or corrupted, unless it is lost: skipped if it
/// was before, and if it turned out lost during the comparison, the handler had mapped a
/// fresh page over it (its bytes are not the pager's to answer for).
fn verify(result: &mut ThreadResult, bytes: &[u8], page: u64, version: u64, is_lost: &dyn Fn(u64) -> bool) {
    if is_lost(page) {
        return;
    }
    let same = holds(bytes, page, version);
    if is_lost(page) {
        return;
    }
    if same {
        result.verified += 1;
    } else {
        result.corrupted += 1;
    }
}

struct ThreadResult {
    faults_ns: Vec<u64>,
    verified: u64,
    corrupted: u64,
}

struct Driven<T> {
    results: Vec<ThreadResult>,
    seconds: f64,
    ops: u64,
    /// Figures when the timed part began (after the warm-up) and when it ended.
    before: T,
    figures: T,
}

/// Whether the bench first writes every page once, untimed, so the timed part measures
/// steady-state swapping instead of first touches. Not for anon-w-seq (its point is a
/// sweep of writes that only swap out) nor anon-r-rand (its stream fills the set first).
pub fn warms_up(workload: Workload) -> bool {
    !matches!(workload, Workload::AnonWSeq | Workload::AnonRRand)
}

/// What every bench thread shares: the pages, the options, the counters, and the
/// barriers they meet at around the timed part.
struct Drive<'a> {
    base: usize,
    per_thread: u64,
    options: &'a SwapBenchOptions,
    is_lost: &'a (dyn Fn(u64) -> bool + Sync),
    warm_up: bool,
    ops_done: AtomicU64,
    warm_ops_done: AtomicU64,
    /// Workers meet at `warmed`/`timed` around the start of the timed part, and at
    /// `workload_over`/`figures_taken` around its end; figures are taken in between,
    /// before the final verification pass.
    warmed: std::sync::Barrier,
    timed: std::sync::Barrier,
    workload_over: std::sync::Barrier,
    figures_taken: std::sync::Barrier,
    /// When the timed part began.
    clock: std::sync::OnceLock<Instant>,
}

impl Drive<'_> {
    /// The bytes of page `page` (a thread touches only its own slice's).
    #[allow(clippy::mut_from_ref)]
    fn page(&self, page: u64) -> &mut [u8] {
        // SAFETY: each thread alone touches pages of its slice (`first..first+per_thread`).
        unsafe { std::slice::from_raw_parts_mut((self.base + page as usize * PAGE_BYTES) as *mut u8, PAGE_BYTES) }
    }

    /// One bench thread: its slice written once (the warm-up), the untimed accesses,
    /// the timed ones (fault latencies sampled), then every page it wrote verified.
    fn thread(&self, thread: usize) -> ThreadResult {
        let options = self.options;
        let first = thread as u64 * self.per_thread;
        let mut versions = vec![0u64; self.per_thread as usize];
        if self.warm_up {
            for (slot, version) in versions.iter_mut().enumerate() {
                let page = first + slot as u64;
                *version = 1;
                fill(self.page(page), page, 1);
            }
        }
        let mut generator = Generator::new(options.workload, self.per_thread, options.seed ^ (thread as u64) << 32);
        let mut result = ThreadResult { faults_ns: Vec::with_capacity(1 << 16), verified: 0, corrupted: 0 };
        self.warm_accesses(&mut generator, first, &mut versions, &mut result);
        self.warmed.wait();
        self.timed.wait();
        self.timed_accesses(&mut generator, first, &mut versions, &mut result);
        self.workload_over.wait();
        self.figures_taken.wait();
        // Verify every page this thread wrote.
        for (slot, &version) in versions.iter().enumerate() {
            let page = first + slot as u64;
            verify(&mut result, self.page(page), page, version, self.is_lost);
        }
        result
    }

    /// The warm-up's accesses: the same stream, untimed (no fault latencies); what they
    /// read is verified all the same. Draws of lost pages count here (the timed part
    /// skips them), so a thread whose pages are all lost still gets through.
    fn warm_accesses(&self, generator: &mut Generator, first: u64, versions: &mut [u64], result: &mut ThreadResult) {
        let warm_ops_max = self.options.warm_up_ops / self.options.threads as u64;
        for warm_ops in 1..=warm_ops_max {
            if warm_ops.is_multiple_of(4096) {
                self.warm_ops_done.fetch_add(4096, Relaxed);
            }
            let access = generator.next().expect("generators are endless");
            let page = first + access.page;
            if (self.is_lost)(page) {
                continue;
            }
            let version = &mut versions[access.page as usize];
            write_or_verify(result, version, access.write, self.page(page), page, self.is_lost);
        }
    }

    /// The timed accesses, until the deadline or the thread's share of `--ops`; a touch
    /// slower than a fault is counted as one, with its latency.
    fn timed_accesses(&self, generator: &mut Generator, first: u64, versions: &mut [u64], result: &mut ThreadResult) {
        let options = self.options;
        let deadline = *self.clock.get().expect("set before the timed part") + Duration::from_secs_f64(options.seconds);
        let ops_max = options.ops_max / options.threads as u64;
        let mut ops = 0u64;
        // Accesses drawn, lost pages' included (those are skipped, not counted as
        // operations); the clock is read every 256.
        let mut draws = 0u64;
        while ops < ops_max && (draws & 255 != 0 || Instant::now() < deadline) {
            let access = generator.next().expect("generators are endless");
            let page = first + access.page;
            draws += 1;
            if (self.is_lost)(page) {
                continue;
            }
            let address = self.base + page as usize * PAGE_BYTES;
            let begun = Instant::now();
            // The first touch is where a fault happens.
            if access.write {
                // A store and nothing before it (reading the byte first would fault the
                // page in for a read, then take a second fault to write it); `fill`
                // below rewrites the whole page anyway.
                // SAFETY: a byte of this thread's page.
                unsafe { std::ptr::write_volatile(address as *mut u8, 0) };
            } else {
                // SAFETY: as above.
                unsafe { std::ptr::read_volatile(address as *const u8) };
            }
            let touch_ns = begun.elapsed().as_nanos() as u64;
            if touch_ns >= FAULT_THRESHOLD_NS {
                result.faults_ns.push(touch_ns);
            }
            let version = &mut versions[access.page as usize];
            write_or_verify(result, version, access.write, self.page(page), page, self.is_lost);
            ops += 1;
            if ops.is_multiple_of(4096) {
                self.ops_done.fetch_add(4096, Relaxed);
            }
        }
        self.ops_done.fetch_add(ops % 4096, Relaxed);
    }

    /// The progress line, until the workers are done.
    fn report(&self, done: &AtomicBool, status: &(impl Fn() -> String + Sync), progress: &dyn Fn(&str)) {
        let options = self.options;
        while !done.load(Relaxed) {
            let Some(started) = self.clock.get() else {
                let warm = self.warm_ops_done.load(Relaxed);
                if warm > 0 {
                    progress(&format!("warming up: {warm} of {} accesses, {}", options.warm_up_ops, status()));
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            progress(&format!(
                "{}: {:.0} s, {} ops, {}",
                options.workload.name(),
                started.elapsed().as_secs_f64(),
                self.ops_done.load(Relaxed),
                status()
            ));
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Runs the workload on `pages` pages at `base` from `options.threads` threads, each on
/// its own slice; `take_figures` runs when the timed part begins and the moment it ends,
/// before every page is verified.
fn drive<T: Send>(
    base: usize,
    pages: u64,
    options: &SwapBenchOptions,
    is_lost: &(dyn Fn(u64) -> bool + Sync),
    status: impl Fn() -> String + Sync,
    take_figures: impl Fn() -> T + Sync,
) -> Driven<T> {
    let barrier = || std::sync::Barrier::new(options.threads + 1);
    let drive = Drive {
        base,
        per_thread: pages / options.threads as u64,
        options,
        is_lost,
        warm_up: options.warm_up && warms_up(options.workload),
        ops_done: AtomicU64::new(0),
        warm_ops_done: AtomicU64::new(0),
        warmed: barrier(),
        timed: barrier(),
        workload_over: barrier(),
        figures_taken: barrier(),
        clock: std::sync::OnceLock::new(),
    };
    let workers_done = AtomicBool::new(false);
    let line = Progress::new(!options.json);
    let progress = |message: &str| line.set(message.to_string());
    let (results, figures) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..options.threads)
            .map(|thread| {
                scope.spawn({
                    let drive = &drive;
                    move || drive.thread(thread)
                })
            })
            .collect();
        let reporter = scope.spawn(|| drive.report(&workers_done, &status, &progress));
        if drive.warm_up {
            progress("warming up: writing every page once");
        }
        drive.warmed.wait();
        let before = take_figures();
        let started = *drive.clock.get_or_init(Instant::now);
        drive.timed.wait();
        drive.workload_over.wait();
        let figures = (started.elapsed().as_secs_f64(), before, take_figures());
        workers_done.store(true, Relaxed);
        drive.figures_taken.wait();
        progress("verifying every page");
        let results: Vec<ThreadResult> =
            handles.into_iter().map(|h| h.join().expect("bench thread panicked")).collect();
        reporter.join().ok();
        (results, figures)
    });
    line.clear();
    let ops = drive.ops_done.load(Relaxed);
    let (seconds, before, figures) = figures;
    Driven { results, seconds, ops, before, figures }
}

pub fn print(bench: &SwapBench) {
    let config = &bench.config;
    println!(
        "{} on {}: {} threads ({}), working set {} in a budget of {} ({:.0} % of the device)",
        bench.workload,
        bench.device,
        bench.threads,
        match config.handler_threads() {
            0 => "self-paging".to_string(),
            count => format!("{count} fault handler threads"),
        },
        format_size(bench.wss_bytes),
        format_size(config.budget_bytes()),
        bench.swap_utilization * 100.0
    );
    if bench.warm_up_ops > 0 {
        println!("measured after {} untimed accesses of warm-up", bench.warm_up_ops);
    }
    let mut table = Table::new(&["measure", "value", "against"]);
    throughput_rows(bench, &mut table);
    device_rows(bench, &mut table);
    paging_rows(bench, &mut table);
    print!("{}", table.render());
}

/// Swap-out and swap-in against the device, fault latency, operations.
fn throughput_rows(bench: &SwapBench, table: &mut Table) {
    let ceiling_name = if bench.workload == "anon-w-seq" { "raw appends" } else { "appends + paired reads" };
    let (ceiling, [before, after]) = if bench.workload == "anon-w-seq" {
        (bench.device_append_mib_s, bench.device_append_before_after_mib_s)
    } else {
        (bench.device_mixed_mib_s, bench.device_mixed_before_after_mib_s)
    };
    table.row(vec![
        "swap-out".into(),
        format!("{:.0} MiB/s", bench.swap_out_mib_s),
        format!("{:.2} of {ceiling:.0} MiB/s ({ceiling_name}; {before:.0} before, {after:.0} after)", bench.efficiency),
    ]);
    if bench.swap_out_seconds > 0.0 && bench.swap_out_seconds < 0.99 * bench.seconds {
        table.row(vec![
            "swap-out, while swapping".into(),
            format!(
                "{:.0} MiB/s over {:.2} s of {:.2} s",
                bench.swap_out_steady_mib_s, bench.swap_out_seconds, bench.seconds
            ),
            format!("{:.2} of {ceiling:.0} MiB/s", bench.efficiency_steady),
        ]);
    }
    table.row(vec!["swap-in".into(), format!("{:.0} MiB/s", bench.swap_in_mib_s), String::new()]);
    table.row(vec![
        "fault latency".into(),
        format!("p50 {:.1} µs, p99 {:.1} µs", bench.fault_p50_us, bench.fault_p99_us),
        format!("device 4 KiB read p50 {:.1} µs, p99 {:.1} µs", bench.device_read_p50_us, bench.device_read_p99_us),
    ]);
    if bench.stats.core.swap_in_reads > 0 {
        table.row(vec![
            "swap-in parts".into(),
            format!(
                "lock {:.1} µs, read {:.1} µs, install {:.1} µs",
                bench.swap_in_lock_wait_us, bench.swap_in_read_us, bench.swap_in_install_us
            ),
            "mean per swap-in read".into(),
        ]);
    }
    table.row(vec![
        "operations".into(),
        format!("{:.0}/s", bench.ops_per_s),
        format!("{} in {:.1} s", bench.ops, bench.seconds),
    ]);
}

/// WAF and the GC, memory against the budget, what was verified, device errors.
fn device_rows(bench: &SwapBench, table: &mut Table) {
    let (config, stats) = (&bench.config, &bench.stats);
    table.row(vec![
        "WAF".into(),
        format!("{:.3}", bench.waf),
        format!("{} GC runs, {} policy", stats.engine.gc_runs, config.core.policy.name()),
    ]);
    table.row(vec![
        "GC CPU".into(),
        format!("{:.2} % of a core", bench.gc_cpu_pct),
        format!(
            "{:.2} µs per page moved ({:.1} pages read each); per page swapped out: evictor {:.2} µs, I/O thread {:.2} µs",
            bench.gc_cpu_us_per_page_moved,
            bench.gc_read_pages_per_page_moved,
            bench.evictor_cpu_us_per_page,
            bench.io_cpu_us_per_page
        ),
    ]);
    let budget = format!(
        "budget {} + slack {}",
        format_size(config.budget_bytes()),
        format_size(config.core.slack_pages * PAGE_BYTES as u64)
    );
    table.row(vec![
        "resident max".into(),
        format_size(stats.core.resident_pages_max * PAGE_BYTES as u64),
        match stats.core.budget_overruns {
            0 => budget,
            overruns => format!("{budget}; {overruns} faults past it (swap full, or room too slow)"),
        },
    ]);
    table.row(vec![
        "pages verified".into(),
        bench.pages_verified.to_string(),
        format!("{} corrupted, {} lost ({} found lost)", bench.corrupted, bench.lost_pages, bench.lost_pages_observed),
    ]);
    if let Some(injected) = &bench.injected {
        table.row(vec![
            "device errors".into(),
            bench.device_errors.to_string(),
            format!(
                "injected: {} read, {} append, {} reset errors; {} zones offline ({} commands refused); \
                 {} slow completions; of {} commands",
                injected.read_errors,
                injected.append_errors,
                injected.reset_errors,
                injected.zones_offline,
                injected.offline_zone_errors,
                injected.slow_completions,
                injected.commands
            ),
        ]);
    } else if bench.device_errors > 0 {
        table.row(vec!["device errors".into(), bench.device_errors.to_string(), String::new()]);
    }
}

/// Clean drops, the swap cache, read-ahead, the inactive list, reference bits.
fn paging_rows(bench: &SwapBench, table: &mut Table) {
    let (config, core) = (&bench.config, &bench.stats.core);
    let per_op = |count: u64| count as f64 / bench.ops.max(1) as f64;
    table.row(vec![
        "clean drops".into(),
        bench.stats.engine.swap_cache_hits.to_string(),
        format!("{} aborted by writes, {} zero pages", core.swap_outs_aborted_dirty, core.swap_outs_zero),
    ]);
    table.row(vec![
        "swap cache".into(),
        format!("{} written", core.swap_cache_dirtied),
        format!(
            "swapped-in pages written while their slot was kept; {} mapped writable, slot dropped",
            core.swap_cache_skipped
        ),
    ]);
    table.row(vec![
        "read-ahead".into(),
        format!("{} pages", core.readahead_pages_read),
        format!(
            "{} of them used by faults ({:.0} %), window at most {}",
            core.readahead_hits,
            100.0 * core.readahead_hits as f64 / core.readahead_pages_read.max(1) as f64,
            config.core.readahead_pages
        ),
    ]);
    if config.core.park_pages > 0 {
        table.row(vec![
            "inactive list".into(),
            format!("{} parked", core.pages_parked),
            format!(
                "{} touched while parked ({:.3} per op), {} not movable (shared), {} kept (shadow busy); {} pages long",
                core.parked_touched,
                per_op(core.parked_touched),
                core.park_refused,
                core.park_occupied,
                config.core.park_pages
            ),
        ]);
    }
    table.row(vec![
        "write-protect faults".into(),
        format!("{:.3} per op", per_op(core.write_protect_faults)),
        format!(
            "{:.3} swap-ins per op; reference bits from {}",
            per_op(core.swap_in_reads),
            match (config.core.reference_sampling, config.core.wp_async) {
                (_, true) => "faults and scans for writes",
                (true, false) => "faults and writes",
                (false, false) => "faults",
            }
        ),
    ]);
}

/// The same workload on plain anonymous memory, paged by the kernel's own swap (run it
/// inside a memory cgroup whose limit is the budget: `scripts/kernel-swap-compare.sh`).
#[derive(Serialize)]
pub struct KernelSwapBench {
    pub workload: &'static str,
    pub threads: usize,
    pub wss_bytes: u64,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    /// From /proc/vmstat `pswpout` / `pswpin` over the timed run (machine-wide).
    pub swap_out_mib_s: f64,
    pub swap_in_mib_s: f64,
    pub swap_in_pages_per_s: f64,
    pub fault_p50_us: f64,
    pub fault_p99_us: f64,
    pub faults_sampled: u64,
    pub pages_verified: u64,
    pub corrupted: u64,
}

fn vmstat_swap_pages() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.trim().parse::<u64>().ok()))
            .unwrap_or(0)
    };
    (field("pswpout "), field("pswpin "))
}

pub fn run_kernel(options: &SwapBenchOptions) -> Result<KernelSwapBench> {
    let pages = options.wss_bytes.div_ceil(PAGE_BYTES as u64);
    ensure!(pages / options.threads as u64 > 0, "the working set is smaller than one page per thread");
    let len = (pages * PAGE_BYTES as u64) as usize;
    let base = znswap_pager::map_anonymous(len)
        .with_context(|| format!("mapping {} of plain memory", format_size(len as u64)))?
        .cast::<libc::c_void>();
    let driven = drive(base as usize, pages, options, &|_| false, || String::from("kernel swap"), vmstat_swap_pages);
    // SAFETY: our mapping, no longer used.
    unsafe { libc::munmap(base, len) };
    let Driven { results, seconds, ops, before, figures: after } = driven;
    let faults: Vec<u64> = results.iter().flat_map(|r| r.faults_ns.iter().copied()).collect();
    let latency = Latency::from_ns(&faults);
    let swapped_in = after.1 - before.1;
    Ok(KernelSwapBench {
        workload: options.workload.name(),
        threads: options.threads,
        wss_bytes: pages * PAGE_BYTES as u64,
        seconds,
        ops,
        ops_per_s: ops as f64 / seconds,
        swap_out_mib_s: ((after.0 - before.0) * PAGE_BYTES as u64) as f64 / MIB / seconds,
        swap_in_mib_s: (swapped_in * PAGE_BYTES as u64) as f64 / MIB / seconds,
        swap_in_pages_per_s: swapped_in as f64 / seconds,
        fault_p50_us: latency.p50_us,
        fault_p99_us: latency.p99_us,
        faults_sampled: faults.len() as u64,
        pages_verified: results.iter().map(|r| r.verified).sum(),
        corrupted: results.iter().map(|r| r.corrupted).sum(),
    })
}

/// A device whose zones an earlier run left written (one killed before it could reset
/// them: a device file keeps each zone's condition and write pointer, and zones that
/// were open come back Closed) is reset before anything is measured on it, saying so:
/// the bench destroys the device's data anyway, but not silently.
pub fn reset_earlier_run(device: &dyn ZonedDevice, name: &str) -> Result<()> {
    let zones = device.report_zones().with_context(|| format!("reading the zones of {name}"))?;
    let written = zones
        .iter()
        .filter(|zone| {
            !matches!(zone.condition, ZoneCondition::Empty | ZoneCondition::Offline | ZoneCondition::ReadOnly)
        })
        .count();
    if written == 0 {
        return Ok(());
    }
    eprintln!("znswap: {name} holds zones written by an earlier run ({written} not empty); resetting them");
    device.reset_all().with_context(|| format!("resetting the zones of {name}"))
}
