//! Device-level runs without a host: Fig. 6's sequential writes with erase-block-sized
//! TRIMs (or zone resets), and `znswap sim waf`'s uniform random overwrite.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use znswap_core::{PolicyKind, SwapCacheMode, PAGE_BYTES};
use znswap_flash::waf::WafError;
use znswap_flash::{BlockConfig, BlockConfigError, BlockSsd, ZnsConfigError, ZnsSsd};
use znswap_zoned::ZoneError;

use crate::backend::{Backend, Io};
use crate::calib::CpuCosts;
use crate::events::{EventQueue, Ns};
use crate::znswap::{ZnsBackend, ZnsBackendError, ZnsSetup};

/// Why a Fig. 6 device run could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SequentialError {
    #[error("fig 6: the block SSD model's configuration")]
    Block(#[from] BlockConfigError),
    #[error("fig 6: the ZNS SSD model's configuration")]
    Zns(#[from] ZnsConfigError),
    #[error("fig 6: {threads} regions of {region_pages} pages exceed the device")]
    RegionsExceedDevice { threads: u32, region_pages: u64 },
    #[error("fig 6: {threads} writers of {zones_per_thread} zones exceed the device")]
    ZonesExceedDevice { threads: u32, zones_per_thread: u64 },
    #[error("fig 6 on ZNS: {command} of zone {zone}")]
    Zone {
        command: &'static str,
        zone: u32,
        #[source]
        source: ZoneError,
    },
}

/// Why a `znswap sim waf` run could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WafRunError {
    #[error(transparent)]
    Block(#[from] WafError),
    #[error("waf: utilization {utilization} must be in (0, 1)")]
    Utilization { utilization: f64 },
    #[error("waf --model zns: pages per zone {pages_per_zone} must be a multiple of {stripe_pages}")]
    ZonePages { pages_per_zone: u32, stripe_pages: u32 },
    #[error("waf --model zns: the ZNSwap back end cannot be built")]
    Znswap(#[from] ZnsBackendError),
    #[error("waf --model zns: {}", violations.join("; "))]
    Violations { violations: Vec<String> },
}

/// Fig. 6: what `threads` sequential writers saw.
#[derive(Clone, Debug, Serialize)]
pub struct SequentialResult {
    pub device: String,
    pub utilization: f64,
    pub bandwidth_mib_s: f64,
    pub waf: f64,
}

/// Pages per write command of the Fig. 6 writers (64 KiB: fewer commands than the
/// paper's 4 KiB writes keep the run fast; the device sees the same sequential stream).
const WRITE_PAGES: u32 = 16;
/// Commands writer `i` keeps in flight: 1 + i % 4. Writers sharing a device never run
/// in lockstep (schedulers and per-CPU queues see to that); unequal queue depths give
/// them unequal, steady rates, so their laps over their regions drift apart, as real
/// threads' do.
fn queue_depth(thread: usize) -> u32 {
    1 + thread as u32 % 4
}

/// Each writer overwrites its own `utilization / threads` of the device in order, in
/// `chunk_pages` chunks, trimming each chunk before it writes it again (block SSD).
/// Warm-up: `warmup_pages` of writes; then `measure_pages` measured.
pub fn block_sequential_trim(
    config: BlockConfig,
    utilization: f64,
    threads: u32,
    warmup_pages: u64,
    measure_pages: u64,
) -> Result<SequentialResult, SequentialError> {
    let mut ssd = BlockSsd::new(config)?;
    let chunk = ssd.superblock_pages() as u64;
    let chunks_per_thread = ((ssd.logical_pages() as f64 * utilization / threads as f64) as u64 / chunk).max(2);
    let region = chunks_per_thread * chunk;
    if region * threads as u64 > ssd.logical_pages() {
        return Err(SequentialError::RegionsExceedDevice { threads, region_pages: region });
    }
    let mut cursor: Vec<u64> = vec![0; threads as usize];
    let mut write = |ssd: &mut BlockSsd, now: Ns, thread: usize| -> Ns {
        let offset = cursor[thread] % region;
        let lpn = thread as u64 * region + offset;
        if offset % chunk == 0 {
            // The erase-block-sized chunk about to be overwritten goes first.
            ssd.trim(now, lpn, chunk as u32);
        }
        cursor[thread] += WRITE_PAGES as u64;
        ssd.write(now, lpn, WRITE_PAGES)
    };
    let (host, media, seconds) = drive(threads, warmup_pages, measure_pages, &mut ssd, &mut write, |ssd| {
        let counters = ssd.counters();
        (counters.host_pages_written, counters.media_pages_written)
    });
    Ok(SequentialResult {
        device: "Block SSD".into(),
        utilization,
        bandwidth_mib_s: host as f64 * PAGE_BYTES as f64 / (1 << 20) as f64 / seconds,
        waf: media as f64 / host.max(1) as f64,
    })
}

/// The same on a ZNS SSD: each writer owns `utilization / threads` of the zones, writes
/// them in order and resets a zone before writing it again.
pub fn zns_sequential_reset(
    config: znswap_flash::ZnsConfig,
    utilization: f64,
    threads: u32,
    warmup_pages: u64,
    measure_pages: u64,
) -> Result<SequentialResult, SequentialError> {
    let mut ssd = ZnsSsd::new(config)?;
    let geometry = ssd.geometry();
    let capacity = geometry.zone_capacity_lbas;
    let zones_per_thread = ((geometry.zone_count as f64 * utilization / threads as f64) as u64).max(2);
    if zones_per_thread * threads as u64 > geometry.zone_count as u64 {
        return Err(SequentialError::ZonesExceedDevice { threads, zones_per_thread });
    }
    let mut cursor: Vec<u64> = vec![0; threads as usize];
    let mut failure = None;
    let mut write = |ssd: &mut ZnsSsd, now: Ns, thread: usize| -> Ns {
        let position = cursor[thread] % (zones_per_thread * capacity);
        let zone = (thread as u64 * zones_per_thread + position / capacity) as u32;
        let offset = position % capacity;
        let mut ready = now;
        if offset == 0 && cursor[thread] > 0 {
            match ssd.reset(now, zone) {
                Ok(done) => ready = done,
                Err(source) => failure = Some(SequentialError::Zone { command: "reset", zone, source }),
            }
        }
        let pages = (WRITE_PAGES as u64).min(capacity - offset) as u32;
        cursor[thread] += pages as u64;
        let lba = zone as u64 * geometry.zone_size_lbas + offset;
        match ssd.write(ready, lba, pages) {
            Ok(done) => done,
            Err(source) => {
                failure = Some(SequentialError::Zone { command: "write", zone, source });
                ready
            }
        }
    };
    let (host, media, seconds) = drive(threads, warmup_pages, measure_pages, &mut ssd, &mut write, |ssd| {
        let counters = ssd.counters();
        (counters.host_pages_written, counters.media_pages_written)
    });
    if let Some(error) = failure {
        return Err(error);
    }
    Ok(SequentialResult {
        device: "ZNS SSD".into(),
        utilization,
        bandwidth_mib_s: host as f64 * PAGE_BYTES as f64 / (1 << 20) as f64 / seconds,
        waf: media as f64 / host.max(1) as f64,
    })
}

/// Closed-loop writers: each keeps `queue_depth(i)` writes in flight. Returns the host and
/// media pages and the seconds of the measured part.
fn drive<D>(
    threads: u32,
    warmup_pages: u64,
    measure_pages: u64,
    device: &mut D,
    write: &mut dyn FnMut(&mut D, Ns, usize) -> Ns,
    counters: impl Fn(&D) -> (u64, u64),
) -> (u64, u64, f64) {
    let mut queue: EventQueue<usize> = EventQueue::new();
    for thread in 0..threads as usize {
        for _ in 0..queue_depth(thread) {
            let done = write(device, 0, thread);
            queue.schedule(done, thread);
        }
    }
    let mut written = 0u64;
    let mut start: Option<(Ns, (u64, u64))> = None;
    while let Some((now, thread)) = queue.pop() {
        written += WRITE_PAGES as u64;
        if start.is_none() && written >= warmup_pages {
            start = Some((now, counters(device)));
        }
        if let Some((_, _)) = start {
            if written >= warmup_pages + measure_pages {
                break;
            }
        }
        let done = write(device, now, thread);
        queue.schedule(done, thread);
    }
    let (started, (host0, media0)) = start.unwrap_or((0, (0, 0)));
    let (host1, media1) = counters(device);
    let seconds = ((queue.now() - started) as f64 / 1e9).max(1e-9);
    (host1 - host0, media1 - media0, seconds)
}

/// `znswap sim waf`'s answer.
#[derive(Clone, Debug, Serialize)]
pub struct WafAnswer {
    pub model: String,
    pub utilization: f64,
    pub pages_per_block: u32,
    pub seed: u64,
    /// All media writes / host writes (ZNGC copies included on ZNS).
    pub waf: f64,
    /// The device's own amplification (1 on ZNS).
    pub device_waf: f64,
    pub host_pages: u64,
    pub media_pages: u64,
    /// Extra fields from the block model (analytic predictions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<znswap_flash::waf::WafReport>,
}

pub fn waf_block(utilization: f64, pages_per_block: u32, seed: u64) -> Result<WafAnswer, WafRunError> {
    let report = znswap_flash::waf::block_uniform_overwrite(utilization, pages_per_block, seed, &Default::default())?;
    Ok(WafAnswer {
        model: "block".into(),
        utilization,
        pages_per_block,
        seed,
        waf: report.waf,
        device_waf: report.device_waf,
        host_pages: report.host_pages,
        media_pages: report.media_pages,
        block: Some(report),
    })
}

/// Uniform random overwrites through the unchanged engine on the ZNS model: `zones`
/// zones of `pages_per_block` pages, `utilization` of all slots live. Each overwrite
/// frees the page's slot and swaps the new version out; completions are served in
/// time order. Two device turnovers of warm-up, two measured.
pub fn waf_zns(utilization: f64, pages_per_block: u32, seed: u64) -> Result<WafAnswer, WafRunError> {
    if !(utilization > 0.0 && utilization < 1.0) {
        return Err(WafRunError::Utilization { utilization });
    }
    const ZONES: u32 = 256;
    let stripe = 256;
    if pages_per_block < stripe || pages_per_block % stripe != 0 {
        return Err(WafRunError::ZonePages { pages_per_zone: pages_per_block, stripe_pages: stripe });
    }
    let slots = ZONES as u64 * pages_per_block as u64;
    let live = ((slots as f64 * utilization) as u64).max(1);
    let setup = ZnsSetup {
        device: znswap_flash::ZnsConfig::scaled(ZONES, pages_per_block as u64 * PAGE_BYTES as u64),
        policy: PolicyKind::PerCore,
        gc_streams: 1,
        swap_cache: SwapCacheMode::Off,
        regions: vec![(0, live as u32, 0)],
        tenants: 1,
        tenant_slot_limits: None,
        swap_pages: slots,
        costs: CpuCosts::default(),
    };
    let mut backend = ZnsBackend::new(setup)?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut io = Io::new(1);
    let mut queue: EventQueue<u64> = EventQueue::new();
    let mut version = 0u32;
    let mut step = |backend: &mut ZnsBackend, io: &mut Io, queue: &mut EventQueue<u64>, page: u32, fresh: bool| {
        version = version.wrapping_add(1);
        if !fresh {
            backend.free(io, page);
        }
        while backend.swap_out(io, 0, page, version) != crate::backend::SwapOutStart::Started {
            // Backpressure: let the GC's I/O complete.
            backend.flush(io);
            settle(backend, io, queue, true);
        }
    };
    for page in 0..live as u32 {
        step(&mut backend, &mut io, &mut queue, page, true);
        if page % 64 == 63 {
            backend.flush(&mut io);
            settle(&mut backend, &mut io, &mut queue, false);
        }
    }
    let mut overwrite = |backend: &mut ZnsBackend, io: &mut Io, queue: &mut EventQueue<u64>, count: u64| {
        for index in 0..count {
            let page = ((rng.next_u64() as u128 * live as u128) >> 64) as u32;
            step(backend, io, queue, page, false);
            if index % 64 == 63 {
                backend.flush(io);
                settle(backend, io, queue, false);
            }
        }
        backend.flush(io);
        settle(backend, io, queue, true);
    };
    overwrite(&mut backend, &mut io, &mut queue, 2 * slots);
    let before = backend.counters();
    overwrite(&mut backend, &mut io, &mut queue, 2 * slots);
    let after = backend.counters();
    let violations = backend.check();
    if !violations.is_empty() {
        return Err(WafRunError::Violations { violations });
    }
    let host = after.swap_out_pages_written - before.swap_out_pages_written;
    let media = after.media_pages_written - before.media_pages_written;
    let device_host = after.device_host_pages_written - before.device_host_pages_written;
    Ok(WafAnswer {
        model: "zns".into(),
        utilization,
        pages_per_block,
        seed,
        waf: media as f64 / host.max(1) as f64,
        device_waf: media as f64 / device_host.max(1) as f64,
        host_pages: host,
        media_pages: media,
        block: None,
    })
}

/// Serves completions in time order: those due by the latest submission, or all.
fn settle(backend: &mut ZnsBackend, io: &mut Io, queue: &mut EventQueue<u64>, all: bool) {
    loop {
        for (at, token) in io.completions.drain(..) {
            queue.schedule(at, token);
        }
        io.notices.clear();
        let due = queue.peek_time().is_some_and(|at| all || at <= io.now);
        if !due {
            break;
        }
        let (at, token) = queue.pop().expect("peeked");
        io.now = io.now.max(at);
        backend.complete(io, token);
    }
    // Time moves on a little per batch so appends and reads spread out.
    io.now += 10_000;
}
