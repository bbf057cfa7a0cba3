//! The live pager: regions of anonymous memory whose pages beyond a resident budget live
//! on a zoned device, driven by the sans-I/O swap engine of `znswap-core`.
//!
//! Threads (handler-thread mode: kernel-mode accesses such as `read()` into a region work):
//! - the **fault handler** reads userfaultfd events. A missing page is swapped in (a
//!   device read outside the lock) or zero-filled; a write to a write-protected page is
//!   reported to the engine (`dirtied`) and unprotected.
//! - the **evictor** keeps the resident set within the budget. Once the resident set,
//!   less the pages already on their way out, passes a low watermark (a batch below the
//!   budget) it evicts a whole batch: a CLOCK hand sweeps the regions in address order
//!   (reference bits come from faults), so victims separated only by non-resident pages
//!   share one write-protect ioctl (one TLB flush); they are handed to the engine as
//!   they are, no copy. It also discards (`MADV_DONTNEED`) the pages whose swap-out
//!   completed, outside the lock.
//! - the **I/O thread** runs every I/O the engine asks for (swap-out appends straight
//!   from the victim pages in place, GC reads and moves, resets), so the evictor
//!   prepares the next batch while the last is written, and the GC runs beside faults.
//!
//! Appendix A, with write-protection instead of the PTE dirty bit: a victim is
//! write-protected before it is handed to the engine, so a write during the append
//! faults; the handler tells the engine (`dirtied`), which then aborts the swap-out, and
//! lifts the protection at once, so the writer never waits for the device (the append
//! may then carry a torn page: its slot is never made valid). The completion marks a swapped
//! page DROPPING under the same lock the handler takes; it stays mapped and
//! write-protected until the evictor discards it, and a fault on it meanwhile waits for
//! the discard and then swaps the page back in. So a write either lands before the
//! completion (swap-out aborted) or after the discard, on the page read back: never lost.
//!
//! Clean pages: a swapped-in page whose slot stays valid (swap cache) is mapped
//! write-protected; evicting it again costs no I/O. All-zero pages are not written: they
//! become zero entries again (Linux stopped writing them to swap in 6.12).
//!
//! Readahead: none by default (FlashVM, seed 004: flash does not reward disk-era
//! prefetching); an optional window for sequential runs of faults. Never-written pages
//! are different: a fault that continues a sequential run maps the never-written pages
//! after it too (zero fill-around, no I/O), so a first-touch sweep takes one fault per
//! 64 pages.

use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use znswap_core::{
    Buf, Config, Engine, Event, Geometry as EngineGeometry, IoError, IoId, IoRequest, PageState, PolicyKind,
    ReadOutcome, RecordEncoding, SwapIn, SwapOutError, SwapOutOutcome,
};
use znswap_zoned::{ZoneError, ZonedDevice};

use crate::page_buffers::{bytes, bytes_mut, AlignedPage, PageBuffers, ZERO_PAGE};
use crate::self_paging::{self, Registration, SelfPagingError};
use crate::uffd::{features, register_mode, Event as UffdEvent, UffdError, Userfaultfd};

pub const PAGE_BYTES: usize = 4096;
/// Largest readahead window.
pub const READAHEAD_PAGES_MAX: u32 = 32;
/// Never-written pages mapped with a fault that continues a sequential run, beyond the
/// faulting page: they cost no I/O (zero fill), and one fault, one lock hold and one
/// `UFFDIO_COPY` then serve many first touches (a first-touch fault costs about 6 µs
/// here, the kernel's own about 1 µs). 63 swapped out 5-16 % faster than 31 on a
/// sequential pass (3 alternating rounds); 127 was slower than 63 in each round (the
/// fault holds the state lock while it maps them, and the evictor waits).
const ZERO_FILL_AROUND_PAGES: u64 = 63;
static ZERO_PAGES: [u8; (ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES] =
    [0; (ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES];
/// Largest eviction round, in batches (see `evict_loop`).
const ROUND_BATCHES_MAX: usize = 4;
/// Records the engine writes per page in per-page metadata mode.
const RECORD_BYTES: usize = 16;

/// Page flags kept by the pager per region page.
const RESIDENT: u8 = 1 << 0;
const REFERENCED: u8 = 1 << 1;
/// Handed to the engine for swap-out; cleared when the engine reports it done.
const WRITING: u8 = 1 << 2;
/// Picked as a victim and not yet handed to the engine; a write fault meanwhile clears
/// it, and the evictor then keeps the page (no swap-out exists yet to abort).
const EVICTING: u8 = 1 << 3;
/// Dropped (not RESIDENT: its data is on the device, or it is a zero entry) but perhaps
/// still mapped, write-protected, until an evictor's `MADV_DONTNEED` outside the lock. A
/// fault on it waits until that is done: a write to it faults (write-protected) and must
/// not be mistaken for a missing page, which in self-paging mode looks the same.
const DROPPING: u8 = 1 << 4;

#[derive(Clone, Debug)]
pub struct PagerConfig {
    /// Resident bytes the pager aims to keep regions within.
    pub budget_bytes: u64,
    /// Pages the handler may install above the budget before it waits for the evictor.
    /// Pages on their way to the device still count as resident, so this also bounds
    /// the swap-out in flight; 1024 (4 MiB, the default from a 32 MiB budget up; an
    /// eighth of smaller budgets, at least 64) lets sequential eviction keep 1 MiB
    /// appends going back to back.
    pub slack_pages: u64,
    /// Victims per eviction round (up to 4 rounds' worth while victims are sequential).
    pub evict_batch_pages: usize,
    pub policy: PolicyKind,
    pub tenants: u32,
    /// Largest number of regions alive at once. A freed region's id is reused once no
    /// I/O names it any more (`Engine::unregister_owner`); until then it counts too.
    pub regions_max: u32,
    /// Who resolves page faults.
    pub fault_mode: FaultMode,
    /// Pages read ahead after a missing fault that continues a sequential run of faults
    /// in a region, when their slots follow the faulting page's slot on the device (one
    /// read instead of several faults). 0, the default, reads nothing ahead: flash does
    /// not reward disk-era prefetching of random pages (FlashVM, seed 004). At most
    /// [`READAHEAD_PAGES_MAX`].
    pub readahead_pages: u32,
    /// Threads picking and write-protecting victims and handing them to
    /// the engine. One keeps up with two faulting threads on this machine (measured: a
    /// second one added lock contention and no throughput).
    pub evictor_threads: usize,
    /// Threads running the engine's I/O (swap-out appends, GC reads and moves, resets),
    /// each with one request in flight.
    pub io_threads: usize,
}

/// Who resolves a page fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultMode {
    /// Threads reading userfaultfd events. One per application thread that may fault at
    /// once lets their swap-in reads be in flight together. Kernel-mode accesses to
    /// region memory (a `read()` into it) work.
    HandlerThreads(usize),
    /// The faulting thread resolves its own fault in a SIGBUS handler (no context
    /// switch). Kernel-mode accesses to a swapped-out page fail with `EFAULT`; see
    /// `self_paging`.
    SelfPaging,
}

impl PagerConfig {
    pub fn new(budget_bytes: u64) -> PagerConfig {
        PagerConfig {
            budget_bytes,
            slack_pages: (budget_bytes / PAGE_BYTES as u64 / 8).clamp(64, 1024),
            evict_batch_pages: 64,
            policy: PolicyKind::PerCore,
            tenants: 1,
            regions_max: 64,
            evictor_threads: 1,
            io_threads: 1,
            readahead_pages: 0,
            fault_mode: FaultMode::HandlerThreads(std::thread::available_parallelism().map_or(1, |n| n.get())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PagerError {
    #[error(transparent)]
    Uffd(#[from] UffdError),
    #[error("the engine refused the device geometry: {0}")]
    Config(String),
    #[error("the budget ({budget_bytes} B) must hold at least {min_pages} pages")]
    BudgetTooSmall { budget_bytes: u64, min_pages: u64 },
    #[error("mmap of {bytes} B failed: {source}")]
    Map { bytes: u64, source: std::io::Error },
    #[error("too many regions alive ({max}, the pager's `regions_max`); free one or raise it")]
    TooManyRegions { max: u32 },
    #[error("the region would exceed the device's swap capacity ({capacity_pages} pages)")]
    RegionTooLarge { capacity_pages: u64 },
    #[error("{0}")]
    Engine(String),
    #[error(transparent)]
    SelfPaging(#[from] SelfPagingError),
}

/// Counters since the pager started.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PagerStats {
    pub missing_faults: u64,
    pub write_protect_faults: u64,
    pub zero_fills: u64,
    pub swap_in_reads: u64,
    pub swap_outs_written: u64,
    pub swap_outs_clean: u64,
    pub swap_outs_zero: u64,
    pub swap_outs_aborted_dirty: u64,
    pub backpressure: u64,
    /// Faults that waited for the evictor to bring the resident set under the budget,
    /// and how long they waited in all.
    pub budget_waits: u64,
    pub budget_wait_ns: u64,
    pub resident_pages: u64,
    pub resident_pages_max: u64,
    pub lost_pages: u64,
    pub device_errors: u64,
    /// CPU time the evictor spent on GC work (GC reads, moves, resets), in nanoseconds.
    pub gc_cpu_ns: u64,
    /// Where swap-in faults spend their time, in nanoseconds summed over faults: waiting
    /// for the pager's lock, reading the device, installing the page (`UFFDIO_COPY`).
    pub fault_lock_wait_ns: u64,
    pub fault_read_ns: u64,
    pub fault_install_ns: u64,
    /// CPU time of the evictor threads and the I/O thread (eviction, appends, GC), in
    /// nanoseconds.
    pub evictor_cpu_ns: u64,
    /// Wall time the I/O thread spent in swap-out appends, the appends it made, and
    /// the time it and the evictors slept with nothing to do, in nanoseconds: with
    /// `evictor_cpu_ns`, where the swap-out's time goes.
    pub evictor_append_ns: u64,
    pub swap_out_appends: u64,
    pub evictor_idle_ns: u64,
    pub io_idle_ns: u64,
    pub host_bytes_written: u64,
    pub gc_bytes_written: u64,
    /// Bytes the GC read from victims (gaps a read spans included).
    pub gc_bytes_read: u64,
    pub gc_runs: u64,
    /// Gauges: nanoseconds since the pager started, now and when its first swap-out
    /// append was issued (0: none yet). A sequential writer swaps nothing out until the
    /// budget is full, so its swap-out bandwidth is over the time since then.
    pub uptime_ns: u64,
    pub first_swap_out_ns: u64,
}

impl PagerStats {
    /// The counts since `earlier` (a snapshot of the same pager); the gauges
    /// (`resident_pages`, `resident_pages_max`, `uptime_ns`, `first_swap_out_ns`) stay
    /// as they are now.
    pub fn since(&self, earlier: &PagerStats) -> PagerStats {
        PagerStats {
            missing_faults: self.missing_faults - earlier.missing_faults,
            write_protect_faults: self.write_protect_faults - earlier.write_protect_faults,
            zero_fills: self.zero_fills - earlier.zero_fills,
            swap_in_reads: self.swap_in_reads - earlier.swap_in_reads,
            swap_outs_written: self.swap_outs_written - earlier.swap_outs_written,
            swap_outs_clean: self.swap_outs_clean - earlier.swap_outs_clean,
            swap_outs_zero: self.swap_outs_zero - earlier.swap_outs_zero,
            swap_outs_aborted_dirty: self.swap_outs_aborted_dirty - earlier.swap_outs_aborted_dirty,
            backpressure: self.backpressure - earlier.backpressure,
            budget_waits: self.budget_waits - earlier.budget_waits,
            budget_wait_ns: self.budget_wait_ns - earlier.budget_wait_ns,
            resident_pages: self.resident_pages,
            resident_pages_max: self.resident_pages_max,
            lost_pages: self.lost_pages - earlier.lost_pages,
            device_errors: self.device_errors - earlier.device_errors,
            gc_cpu_ns: self.gc_cpu_ns - earlier.gc_cpu_ns,
            fault_lock_wait_ns: self.fault_lock_wait_ns - earlier.fault_lock_wait_ns,
            fault_read_ns: self.fault_read_ns - earlier.fault_read_ns,
            fault_install_ns: self.fault_install_ns - earlier.fault_install_ns,
            evictor_cpu_ns: self.evictor_cpu_ns - earlier.evictor_cpu_ns,
            evictor_append_ns: self.evictor_append_ns - earlier.evictor_append_ns,
            swap_out_appends: self.swap_out_appends - earlier.swap_out_appends,
            evictor_idle_ns: self.evictor_idle_ns - earlier.evictor_idle_ns,
            io_idle_ns: self.io_idle_ns - earlier.io_idle_ns,
            host_bytes_written: self.host_bytes_written - earlier.host_bytes_written,
            gc_bytes_written: self.gc_bytes_written - earlier.gc_bytes_written,
            gc_bytes_read: self.gc_bytes_read - earlier.gc_bytes_read,
            gc_runs: self.gc_runs - earlier.gc_runs,
            uptime_ns: self.uptime_ns,
            first_swap_out_ns: self.first_swap_out_ns,
        }
    }
}

#[derive(Default)]
struct Counters {
    missing_faults: AtomicU64,
    write_protect_faults: AtomicU64,
    zero_fills: AtomicU64,
    swap_in_reads: AtomicU64,
    swap_outs_written: AtomicU64,
    swap_outs_zero: AtomicU64,
    swap_outs_aborted_dirty: AtomicU64,
    backpressure: AtomicU64,
    budget_waits: AtomicU64,
    budget_wait_ns: AtomicU64,
    resident_pages: AtomicU64,
    resident_pages_max: AtomicU64,
    lost_pages: AtomicU64,
    device_errors: AtomicU64,
    gc_cpu_ns: AtomicU64,
    fault_lock_wait_ns: AtomicU64,
    fault_read_ns: AtomicU64,
    fault_install_ns: AtomicU64,
    evictor_cpu_ns: AtomicU64,
    evictor_append_ns: AtomicU64,
    swap_out_appends: AtomicU64,
    evictor_idle_ns: AtomicU64,
    io_idle_ns: AtomicU64,
    first_swap_out_ns: AtomicU64,
}

struct RegionEntry {
    /// Distinguishes this region from a later one reusing its owner number (and perhaps
    /// its addresses) while the evictor works without the lock.
    generation: u64,
    base: u64,
    pages: u64,
    flags: Vec<u8>,
    live: bool,
    /// The page of the last missing fault, and how many faults in a row followed it.
    last_fault: u64,
    sequential_faults: u32,
}

/// A page awaiting its `MADV_DONTNEED`.
struct Dropping {
    owner: u32,
    page: u64,
    /// The region's generation when the page was dropped: a region freed meanwhile has
    /// no mapping left to discard (and its addresses may belong to a new region).
    generation: u64,
}

struct State {
    engine: Engine,
    regions: Vec<RegionEntry>,
    /// Regions ever allocated (the last one's generation).
    generations: u64,
    /// The CLOCK hand: the next page (owner, page) the eviction sweep looks at.
    hand: (u32, u64),
    /// Free handles of `out_pages`. A victim takes one when picked; it comes back with
    /// the page's `SwapOutDone`, or when the page stays resident. So it bounds the pages
    /// between pick and completion.
    out_free: Vec<u64>,
    /// Per handle, the page a swap-out append reads in place (see `pump`).
    out_pages: Vec<OutPage>,
    /// Pages swapped out (or zero) awaiting their `MADV_DONTNEED`: marked DROPPING, still
    /// counted resident; an evictor discards them (`discard_dropped`).
    to_drop: Vec<Dropping>,
    /// Pages handed to the engine for swap-out and not yet completed: still resident,
    /// but on their way out, so the evictor does not count them as pressure.
    writing_pages: u64,
    /// An evictor waits on `evict_wanted`, or the I/O thread on `io_wanted`: whoever
    /// changes what they wait for under the lock wakes them (once: the flag is cleared).
    evictors_asleep: bool,
    io_asleep: bool,
}

pub(crate) struct Shared {
    device: Arc<dyn ZonedDevice>,
    /// The GC move buffer (`Buf::Gc`), owned by the engine's GC batch (see
    /// `page_buffers`).
    gc_buffers: PageBuffers,
    uffd: Userfaultfd,
    state: Mutex<State>,
    evict_wanted: Condvar,
    io_wanted: Condvar,
    space_freed: Condvar,
    stop: AtomicBool,
    budget_pages: u64,
    /// Eviction starts once the resident set, less the pages being written out, passes
    /// this (a batch below the budget).
    low_watermark: u64,
    slack_pages: u64,
    evict_batch_pages: usize,
    /// Largest Append the engine emits, in pages.
    max_append_pages: usize,
    lbas_per_page: u64,
    metadata_bytes: usize,
    footer_mode: bool,
    /// Held shared while the evictor reads victim pages without the state lock, and
    /// exclusively while a region is unmapped.
    mappings: RwLock<()>,
    readahead_pages: u32,
    /// Buffer for a read with readahead; a fault that finds it busy reads one page.
    readahead_buffer: Mutex<Vec<AlignedPage>>,
    /// A pidfd of this process for batched `process_madvise`, where the kernel accepts
    /// `MADV_DONTNEED` through it.
    self_pidfd: Option<i32>,
    started: Instant,
    counters: Counters,
}

/// A kind of pager thread: its name, its role in a panic message, its body, how many.
type ThreadRole = (&'static str, &'static str, fn(&Shared), usize);

/// The pager; dropping it stops its threads (regions must be dropped first).
pub struct Pager {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    registration: Option<Registration>,
}

/// A region of pager-backed memory. Behaves like anonymous memory; dropping it frees
/// its swap slots at once.
pub struct Region {
    shared: Arc<Shared>,
    owner: u32,
    base: *mut u8,
    len: usize,
}

// SAFETY: the region is plain memory; concurrent access follows the usual rules of the
// slices handed out (the caller's `&mut` discipline), and the pager's own accesses go
// through the kernel (uffd ioctls), never through these pointers.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

fn engine_geometry(device: &dyn ZonedDevice) -> EngineGeometry {
    let geometry = device.geometry();
    let page = PAGE_BYTES as u64;
    EngineGeometry {
        zone_count: geometry.zone_count,
        zone_capacity_pages: (geometry.zone_capacity_bytes() / page) as u32,
        metadata_bytes: if geometry.lba_bytes as usize == PAGE_BYTES { geometry.metadata_bytes } else { 0 },
        write_granularity_pages: (geometry.write_granularity_bytes as u64).div_ceil(page) as u32,
        max_open_zones: geometry.max_open_zones,
        max_active_zones: geometry.max_active_zones,
        zone_append_pages_max: (geometry.zone_append_max_bytes as u64 / page) as u32,
    }
}

fn io_error(error: &ZoneError) -> IoError {
    match error {
        ZoneError::ZoneOffline { .. } => IoError::Offline,
        _ => IoError::Device,
    }
}

impl Pager {
    pub fn new(device: Arc<dyn ZonedDevice>, config: PagerConfig) -> Result<Pager, PagerError> {
        let budget_pages = config.budget_bytes / PAGE_BYTES as u64;
        let min_pages = 2 * config.evict_batch_pages as u64;
        if budget_pages < min_pages {
            return Err(PagerError::BudgetTooSmall { budget_bytes: config.budget_bytes, min_pages });
        }
        let geometry = *device.geometry();
        let mut engine_config = Config::new(engine_geometry(&*device));
        if geometry.lba_bytes as usize != PAGE_BYTES || geometry.metadata_bytes < RECORD_BYTES as u32 {
            engine_config.record_encoding = Some(RecordEncoding::ChunkFooter);
        }
        engine_config.owners_max = config.regions_max;
        engine_config.tenants_max = config.tenants.max(1);
        // A small device cannot keep as many zones open as it allows and still hold the
        // GC's empty-zone watermarks: open fewer (always within the device's limits).
        while let Err(error) = engine_config.derive() {
            let g = &mut engine_config.geometry;
            let limit = match (g.max_open_zones, g.max_active_zones) {
                (0, 0) => engine_config.swap_zones_default,
                (0, a) | (a, 0) => a,
                (o, a) => o.min(a),
            };
            if limit <= 3 {
                return Err(PagerError::Config(error.to_string()));
            }
            g.max_open_zones = limit - 1;
            g.max_active_zones = limit - 1;
        }
        let engine = Engine::new(engine_config, config.policy.build(config.tenants.max(1)))
            .map_err(|e| PagerError::Config(e.to_string()))?;
        let footer_mode = engine.derived().encoding == RecordEncoding::ChunkFooter;
        let required = match config.fault_mode {
            FaultMode::HandlerThreads(_) => features::PAGEFAULT_FLAG_WP,
            FaultMode::SelfPaging => features::PAGEFAULT_FLAG_WP | features::SIGBUS,
        };
        let uffd = Userfaultfd::new(required, features::POISON)?;
        let gc_pages = engine.gc_buffer_pages() as usize;
        let max_append_pages = engine.derived().append_pages_max as usize;
        let out_count = config.evict_batch_pages * 4 + max_append_pages;
        let state = State {
            engine,
            regions: Vec::new(),
            generations: 0,
            hand: (0, 0),
            out_free: (0..out_count as u64).rev().collect(),
            out_pages: vec![OutPage { owner: 0, generation: 0, address: 0 }; out_count],
            to_drop: Vec::with_capacity(out_count),
            writing_pages: 0,
            evictors_asleep: false,
            io_asleep: false,
        };
        let readahead_pages = config.readahead_pages.min(READAHEAD_PAGES_MAX);
        let shared = Arc::new(Shared {
            gc_buffers: PageBuffers::new(gc_pages),
            lbas_per_page: (PAGE_BYTES / geometry.lba_bytes as usize) as u64,
            metadata_bytes: geometry.metadata_bytes as usize,
            footer_mode,
            self_pidfd: self_pidfd_for_discard(),
            mappings: RwLock::new(()),
            readahead_pages,
            readahead_buffer: Mutex::new(if readahead_pages > 0 {
                vec![AlignedPage::ZERO; readahead_pages as usize + 1]
            } else {
                Vec::new()
            }),
            device,
            uffd,
            state: Mutex::new(state),
            evict_wanted: Condvar::new(),
            io_wanted: Condvar::new(),
            space_freed: Condvar::new(),
            stop: AtomicBool::new(false),
            budget_pages,
            low_watermark: budget_pages - config.evict_batch_pages as u64,
            slack_pages: config.slack_pages,
            evict_batch_pages: config.evict_batch_pages,
            max_append_pages,
            started: Instant::now(),
            counters: Counters::default(),
        });
        let (handlers, registration) = match config.fault_mode {
            FaultMode::HandlerThreads(count) => (count.max(1), None),
            FaultMode::SelfPaging => (0, Some(self_paging::register(&shared)?)),
        };
        let roles: [ThreadRole; 3] = [
            ("fault", "fault handler", Shared::handle_faults, handlers),
            ("evict", "evictor", Shared::evict_loop, config.evictor_threads.max(1)),
            ("io", "I/O thread", Shared::io_loop, config.io_threads.max(1)),
        ];
        let mut threads = Vec::new();
        for (name, role, body, count) in roles {
            for index in 0..count {
                let shared = shared.clone();
                let thread = std::thread::Builder::new()
                    .name(format!("znswap-{name}-{index}"))
                    .spawn(move || {
                        let _guard = AbortOnPanic(role);
                        body(&shared)
                    })
                    .expect("spawn");
                threads.push(thread);
            }
        }
        Ok(Pager { shared, threads, registration })
    }

    /// A new region of `bytes` (rounded up to pages), zero-filled on first touch.
    pub fn alloc(&self, bytes: u64, tenant: u32) -> Result<Region, PagerError> {
        let pages = bytes.div_ceil(PAGE_BYTES as u64).max(1);
        let len = (pages * PAGE_BYTES as u64) as usize;
        let base =
            map_anonymous(len).map_err(|source| PagerError::Map { bytes: len as u64, source })?.cast::<libc::c_void>();
        let unmap = || {
            // SAFETY: unmapping the mapping made above, on an error path.
            unsafe { libc::munmap(base, len) };
        };
        let mut state = self.shared.lock();
        // A freed region's id once the engine lets it go (no swap-out, swap-in read or GC
        // move in flight names it), else a new one.
        let reusable = (0..state.regions.len())
            .find(|&index| !state.regions[index].live && state.engine.unregister_owner(index as u32).unwrap_or(false));
        let owner = match reusable {
            Some(index) => index as u32,
            None if (state.regions.len() as u32) < state.engine.config().owners_max => state.regions.len() as u32,
            None => {
                unmap();
                return Err(PagerError::TooManyRegions { max: state.engine.config().owners_max });
            }
        };
        if let Err(error) = state.engine.register_owner(owner, pages, tenant) {
            unmap();
            return Err(PagerError::Engine(error.to_string()));
        }
        if let Err(error) =
            self.shared.uffd.register(base as u64, len as u64, register_mode::MISSING | register_mode::WP)
        {
            unmap();
            return Err(error.into());
        }
        state.generations += 1;
        let generation = state.generations;
        let entry = RegionEntry {
            generation,
            base: base as u64,
            pages,
            flags: vec![0; pages as usize],
            live: true,
            last_fault: u64::MAX,
            sequential_faults: 0,
        };
        if owner as usize == state.regions.len() {
            state.regions.push(entry);
        } else {
            state.regions[owner as usize] = entry;
        }
        drop(state);
        Ok(Region { shared: self.shared.clone(), owner, base: base.cast(), len })
    }

    pub fn stats(&self) -> PagerStats {
        self.shared.stats()
    }

    /// Host memory the engine uses per 4 KiB of swap capacity.
    pub fn host_bytes_per_slot(&self) -> f64 {
        self.shared.lock().engine.host_memory().bytes_per_slot
    }

    pub fn device(&self) -> &Arc<dyn ZonedDevice> {
        &self.shared.device
    }
}

/// A private anonymous mapping of `len` bytes as paged memory wants it: no swap
/// reservation, no transparent huge pages (they would fault and swap 2 MiB at a time).
pub fn map_anonymous(len: usize) -> std::io::Result<*mut u8> {
    // SAFETY: a fresh private anonymous mapping, checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: advice on our own fresh mapping.
    unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    Ok(base.cast())
}

/// CPU time of the calling thread.
fn thread_cpu_ns() -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// A page picked for eviction.
#[derive(Clone, Copy)]
struct Victim {
    owner: u32,
    page: u64,
    address: u64,
    generation: u64,
    /// Its handle in `State::out_pages` (taken from `out_free` when picked).
    handle: u64,
    /// Victims of one run share a write-protect range.
    run: u32,
    protected: bool,
    /// The page was all zeroes once protected.
    zero: bool,
}

/// Whether the page at `address` reads all zeroes. Volatile word reads: a writer may
/// change the page meanwhile (the caller then throws the answer away), so the compiler
/// must not assume it stable. A page with data answers at its first non-zero word.
///
/// # Safety
/// `address` is a page-aligned, mapped, readable page.
unsafe fn page_is_zero(address: u64) -> bool {
    let words = address as *const u64;
    // SAFETY: within the page, per the contract.
    (0..PAGE_BYTES / 8).all(|index| unsafe { words.add(index).read_volatile() } == 0)
}

/// Where `pump` takes an append's page from.
#[derive(Clone, Copy)]
enum Source {
    /// A swap-out page, in place in its region.
    At(u64),
    /// A page of the GC move buffer.
    Gc(u32),
    /// The same position of `IoScratch::pages` (a chunk footer).
    Scratch,
    Zero,
}

/// An I/O thread's working memory, allocated once: a fresh megabyte per `pump` call
/// cost a page fault and a memset per page of it, about a third of the I/O thread's CPU
/// on a sequential swap-out.
struct IoScratch {
    /// Chunk footers to append, and reads that land in no buffer of their own;
    /// page-aligned, so O_DIRECT needs no bounce copy.
    pages: Vec<AlignedPage>,
    metadata: Vec<u8>,
    sources: Vec<Source>,
    /// The pager reports writes during write-out through `Engine::dirtied`, so no append
    /// ever carries a dirtied page of its own.
    no_dirtied: Vec<bool>,
}

impl IoScratch {
    fn new(max_append_pages: usize) -> IoScratch {
        IoScratch {
            pages: vec![AlignedPage::ZERO; max_append_pages],
            metadata: Vec::new(),
            sources: Vec::with_capacity(max_append_pages),
            no_dirtied: vec![false; max_append_pages],
        }
    }

    /// Ready for an I/O of `pages` pages (larger ones grow it, once).
    fn prepare(&mut self, pages: usize) {
        if self.pages.len() < pages {
            self.pages.resize(pages, AlignedPage::ZERO);
            self.no_dirtied.resize(pages, false);
        }
        self.metadata.clear();
        self.sources.clear();
    }
}

/// A page on its way to the device: the swap-out append reads it at `address` if its
/// region (`owner`, `generation`) is still the one mapped there.
#[derive(Clone, Copy)]
struct OutPage {
    owner: u32,
    generation: u64,
    address: u64,
}

/// An address range laid out as `struct iovec` (plain integers, so the state stays `Send`).
#[repr(C)]
struct IoVec {
    base: usize,
    len: usize,
}

const _: () = assert!(std::mem::size_of::<IoVec>() == std::mem::size_of::<libc::iovec>());

/// A pidfd of this process if `process_madvise(MADV_DONTNEED)` works through it: probed
/// on a scratch page, because kernels before 6.13 refuse destructive advice there.
fn self_pidfd_for_discard() -> Option<i32> {
    // SAFETY: plain syscalls on a fresh scratch mapping, unmapped before returning.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as i32;
        if pidfd < 0 {
            return None;
        }
        let scratch = map_anonymous(PAGE_BYTES).ok()?;
        scratch.write(1);
        let range = libc::iovec { iov_base: scratch.cast(), iov_len: PAGE_BYTES };
        let done = libc::syscall(libc::SYS_process_madvise, pidfd, &range, 1, libc::MADV_DONTNEED, 0);
        let dropped = done == PAGE_BYTES as i64 && scratch.read() == 0;
        libc::munmap(scratch.cast(), PAGE_BYTES);
        if dropped {
            Some(pidfd)
        } else {
            libc::close(pidfd);
            None
        }
    }
}

/// A pager thread that panics leaves faulting threads blocked forever, and paged memory
/// with no owner: stop the process loudly instead (as the kernel would BUG).
struct AbortOnPanic(&'static str);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("znswap: the pager's {} failed; aborting rather than hanging or losing pages", self.0);
            std::process::abort();
        }
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.registration.take();
        self.shared.stop.store(true, Relaxed);
        self.shared.evict_wanted.notify_all();
        self.shared.io_wanted.notify_all();
        self.shared.space_freed.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        if let Some(pidfd) = self.shared.self_pidfd {
            // SAFETY: our own descriptor; the threads that used it have stopped.
            unsafe { libc::close(pidfd) };
        }
    }
}

impl Region {
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn pages(&self) -> u64 {
        (self.len / PAGE_BYTES) as u64
    }

    /// The region as a byte slice.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as `self`; faults are served by the pager.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// The region as a mutable byte slice.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // The evictor reads victims without the state lock but under `mappings`: no
        // unmapping while it does.
        let _mappings = self.shared.mappings.write().unwrap_or_else(|p| p.into_inner());
        let mut state = self.shared.lock();
        let pages = self.pages();
        let now = self.shared.now();
        let _ = state.engine.free(self.owner, 0..pages, now);
        let resident = state.regions[self.owner as usize].flags.iter().filter(|&&f| f & RESIDENT != 0).count() as u64;
        state.regions[self.owner as usize].live = false;
        state.regions[self.owner as usize].flags = Vec::new();
        let _ = self.shared.uffd.unregister(self.base as u64, self.len as u64);
        // SAFETY: our own mapping; nothing refers to it once the region is gone.
        unsafe { libc::munmap(self.base.cast(), self.len) };
        self.shared.counters.resident_pages.fetch_sub(resident, Relaxed);
        drop(state);
        self.shared.space_freed.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock, for a fault: the time spent waiting for it is counted. A fault spins
    /// for the lock a little before it sleeps: holds are a few microseconds, while a
    /// futex sleep and wake-up costs more than that on a virtual machine, whose idle
    /// vCPUs halt and take an exit to wake.
    fn lock_for_fault(&self) -> MutexGuard<'_, State> {
        const SPIN_NS: u128 = 20_000;
        match self.state.try_lock() {
            Ok(state) => return state,
            Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {}
        }
        let waiting = Instant::now();
        let mut spins = 0u32;
        let state = loop {
            match self.state.try_lock() {
                Ok(state) => break state,
                Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
            spins += 1;
            if spins % 64 == 0 && waiting.elapsed().as_nanos() > SPIN_NS {
                break self.lock();
            }
            std::hint::spin_loop();
        };
        self.counters.fault_lock_wait_ns.fetch_add(waiting.elapsed().as_nanos() as u64, Relaxed);
        state
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn stats(&self) -> PagerStats {
        let c = &self.counters;
        let state = self.lock();
        let engine_stats = state.engine.stats();
        PagerStats {
            missing_faults: c.missing_faults.load(Relaxed),
            write_protect_faults: c.write_protect_faults.load(Relaxed),
            zero_fills: c.zero_fills.load(Relaxed),
            swap_in_reads: c.swap_in_reads.load(Relaxed),
            swap_outs_written: c.swap_outs_written.load(Relaxed),
            swap_outs_clean: engine_stats.swap_cache_hits,
            swap_outs_zero: c.swap_outs_zero.load(Relaxed),
            swap_outs_aborted_dirty: c.swap_outs_aborted_dirty.load(Relaxed),
            backpressure: c.backpressure.load(Relaxed),
            budget_waits: c.budget_waits.load(Relaxed),
            budget_wait_ns: c.budget_wait_ns.load(Relaxed),
            resident_pages: c.resident_pages.load(Relaxed),
            resident_pages_max: c.resident_pages_max.load(Relaxed),
            lost_pages: c.lost_pages.load(Relaxed),
            device_errors: c.device_errors.load(Relaxed),
            gc_cpu_ns: c.gc_cpu_ns.load(Relaxed),
            fault_lock_wait_ns: c.fault_lock_wait_ns.load(Relaxed),
            fault_read_ns: c.fault_read_ns.load(Relaxed),
            fault_install_ns: c.fault_install_ns.load(Relaxed),
            evictor_cpu_ns: c.evictor_cpu_ns.load(Relaxed),
            evictor_append_ns: c.evictor_append_ns.load(Relaxed),
            swap_out_appends: c.swap_out_appends.load(Relaxed),
            evictor_idle_ns: c.evictor_idle_ns.load(Relaxed),
            io_idle_ns: c.io_idle_ns.load(Relaxed),
            host_bytes_written: engine_stats.host_pages_written * PAGE_BYTES as u64,
            gc_bytes_written: engine_stats.gc_pages_written * PAGE_BYTES as u64,
            gc_bytes_read: engine_stats.gc_pages_read * PAGE_BYTES as u64,
            gc_runs: engine_stats.gc_runs,
            uptime_ns: self.now(),
            first_swap_out_ns: c.first_swap_out_ns.load(Relaxed),
        }
    }

    /// The region page at `address`, if any.
    fn locate(state: &State, address: u64) -> Option<(u32, u64)> {
        state.regions.iter().enumerate().find_map(|(owner, region)| {
            let end = region.base + region.pages * PAGE_BYTES as u64;
            (region.live && address >= region.base && address < end)
                .then(|| (owner as u32, (address - region.base) / PAGE_BYTES as u64))
        })
    }

    fn page_address(state: &State, owner: u32, page: u64) -> u64 {
        state.regions[owner as usize].base + page * PAGE_BYTES as u64
    }

    fn mark_resident(&self, state: &mut State, owner: u32, page: u64) {
        let flags = &mut state.regions[owner as usize].flags[page as usize];
        debug_assert!(*flags & (RESIDENT | DROPPING) == 0, "page {owner}:{page} installed twice or before its discard");
        *flags |= RESIDENT | REFERENCED;
        let resident = self.counters.resident_pages.fetch_add(1, Relaxed) + 1;
        self.counters.resident_pages_max.fetch_max(resident, Relaxed);
        self.wake_evictor(state);
    }

    // ------------------------------------------------------------------ faults

    fn handle_faults(&self) {
        let mut page_buffer = AlignedPage::ZERO;
        while !self.stop.load(Relaxed) {
            match self.uffd.poll(50) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(error) => panic!("polling userfaultfd: {error}"),
            }
            while let Some(event) = self.uffd.read_event().expect("reading userfaultfd") {
                if let UffdEvent::PageFault { address, write, write_protect, .. } = event {
                    let page_address = address & !(PAGE_BYTES as u64 - 1);
                    if write_protect {
                        self.write_fault(page_address);
                    } else {
                        self.missing_fault(page_address, write, &mut page_buffer.0);
                    }
                }
            }
        }
    }

    /// A SIGBUS in self-paging mode at `address`: resolves it if it is a page of one of
    /// this pager's regions (in the faulting thread), else returns false.
    pub(crate) fn resolve_in_thread(&self, address: u64, write: bool) -> bool {
        let page_address = address & !(PAGE_BYTES as u64 - 1);
        let state = self.lock_for_fault();
        let flags = match Self::locate(&state, page_address) {
            None => return false,
            Some((owner, page)) => state.regions[owner as usize].flags[page as usize],
        };
        if flags & DROPPING != 0 {
            // Being discarded: a write to it (still mapped, write-protected) lands here
            // too, and cannot be told from a missing page. Retry the access once the
            // evictor is done with it.
            drop(state);
            std::thread::yield_now();
            return true;
        }
        let resident = flags & RESIDENT != 0;
        // A resident page faults only when written while write-protected.
        if resident {
            self.write_fault_locked(state, page_address);
        } else {
            // Aligned: the device reads into it without a bounce copy.
            let mut data = AlignedPage::ZERO;
            self.missing_fault_locked(state, page_address, write, &mut data.0);
        }
        true
    }

    fn write_fault(&self, address: u64) {
        self.write_fault_locked(self.lock_for_fault(), address);
    }

    fn write_fault_locked<'a>(&'a self, mut state: MutexGuard<'a, State>, address: u64) {
        self.counters.write_protect_faults.fetch_add(1, Relaxed);
        let Some((owner, page)) = Self::locate(&state, address) else {
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        };
        if state.regions[owner as usize].flags[page as usize] & RESIDENT == 0 {
            // Dropped after its swap-out completed: the writer retries, faults the page
            // back in and writes to it then.
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        }
        let now = self.now();
        state.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
        let flags = &mut state.regions[owner as usize].flags[page as usize];
        *flags |= REFERENCED;
        *flags &= !EVICTING;
        self.uffd.write_protect(address, PAGE_BYTES as u64, false, true).expect("lifting write protection");
    }

    /// A missing page: zero-fill or swap in. For a write fault the page is about to be
    /// dirtied, so it is installed writable and the engine told at once (one fault
    /// instead of a missing fault followed by a write-protect fault).
    fn missing_fault(&self, address: u64, write: bool, data: &mut [u8]) {
        self.missing_fault_locked(self.lock_for_fault(), address, write, data);
    }

    fn missing_fault_locked<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        address: u64,
        write: bool,
        data: &mut [u8],
    ) {
        self.counters.missing_faults.fetch_add(1, Relaxed);
        // Faults beyond the budget wait for the evictor (bounded resident set).
        if self.counters.resident_pages.load(Relaxed) >= self.budget_pages + self.slack_pages {
            let waiting = Instant::now();
            while self.counters.resident_pages.load(Relaxed) >= self.budget_pages + self.slack_pages
                && !self.stop.load(Relaxed)
            {
                self.evict_wanted.notify_one();
                state = self
                    .space_freed
                    .wait_timeout(state, Duration::from_millis(10))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            self.counters.budget_waits.fetch_add(1, Relaxed);
            self.counters.budget_wait_ns.fetch_add(waiting.elapsed().as_nanos() as u64, Relaxed);
        }
        let Some((owner, page)) = Self::locate(&state, address) else {
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        };
        if state.regions[owner as usize].flags[page as usize] & RESIDENT != 0 {
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        }
        let region = &mut state.regions[owner as usize];
        region.sequential_faults =
            if region.last_fault.wrapping_add(1) == page { region.sequential_faults.saturating_add(1) } else { 0 };
        region.last_fault = page;
        let sequential = region.sequential_faults > 0;
        loop {
            let flags = state.regions[owner as usize].flags[page as usize];
            if flags & RESIDENT != 0 {
                // Another handler swapped it in while this one waited.
                let _ = self.uffd.wake(address, PAGE_BYTES as u64);
                return;
            }
            if flags & DROPPING != 0 {
                // Its discard is under way: swap it in once that is done.
                drop(state);
                std::thread::yield_now();
                state = self.lock_for_fault();
                continue;
            }
            let now = self.now();
            let answer = match state.engine.swap_in(owner, page, now) {
                Ok(answer) => answer,
                Err(_) => {
                    // Backpressure: let the evictor complete I/O, then ask again.
                    drop(state);
                    std::thread::sleep(Duration::from_micros(100));
                    state = self.lock_for_fault();
                    continue;
                }
            };
            match answer {
                SwapIn::Resident => {
                    // The engine holds data the pager thinks it dropped: zero-filling would
                    // hand back wrong data, so stop loudly instead.
                    panic!("page {owner}:{page} faulted while the engine says it is resident");
                }
                SwapIn::Zero => {
                    self.counters.zero_fills.fetch_add(1, Relaxed);
                    let around = if sequential { self.plan_zero_fill(&mut state, owner, page) } else { 0 };
                    if write || around > 0 {
                        // A zero page mapped for a write would take a second (copy-on-
                        // write) fault at once: install private zeroed pages instead.
                        let bytes = &ZERO_PAGES[..(1 + around as usize) * PAGE_BYTES];
                        let mapped =
                            self.uffd.copy_pages(address, bytes, false, true).expect("installing zeroed pages");
                        let mapped_pages = mapped / PAGE_BYTES as u64;
                        let now = self.now();
                        for next in page..page + 1 + around {
                            if next < page + mapped_pages {
                                self.mark_resident(&mut state, owner, next);
                            } else {
                                // Not mapped (never expected: no one maps a page without
                                // this lock): never written it stays.
                                state.engine.free(owner, next..next + 1, now).expect("unmapped zero page");
                            }
                        }
                        state.regions[owner as usize].last_fault = page + mapped_pages.max(1) - 1;
                    } else {
                        self.uffd.zeropage(address, PAGE_BYTES as u64, true).expect("zero-filling a page");
                        self.mark_resident(&mut state, owner, page);
                    }
                    return;
                }
                SwapIn::Lost => {
                    self.lost(address);
                    return;
                }
                SwapIn::InFlight => {
                    drop(state);
                    std::thread::sleep(Duration::from_micros(50));
                    state = self.lock_for_fault();
                }
                SwapIn::Read { io, zone, slot } => {
                    let mut ahead = [(0u64, IoId(0)); READAHEAD_PAGES_MAX as usize];
                    let mut buffer = (sequential && self.readahead_pages > 0)
                        .then(|| self.readahead_buffer.try_lock().ok())
                        .flatten();
                    let count = match buffer {
                        Some(_) => self.plan_readahead(&mut state, owner, page, zone, slot, &mut ahead),
                        None => 0,
                    };
                    drop(state);
                    let reading = Instant::now();
                    let result = match buffer.as_mut() {
                        Some(buffer) if count > 0 => {
                            let result = self.read_slots(zone, slot, bytes_mut(&mut buffer[..count + 1]), None);
                            data.copy_from_slice(&buffer[0].0);
                            result
                        }
                        _ => self.read_slots(zone, slot, data, None),
                    };
                    self.counters.fault_read_ns.fetch_add(reading.elapsed().as_nanos() as u64, Relaxed);
                    self.counters.swap_in_reads.fetch_add(1 + count as u64, Relaxed);
                    state = self.lock_for_fault();
                    let now = self.now();
                    if let Some(buffer) = buffer.as_ref() {
                        for (index, &(ahead_page, ahead_io)) in ahead[..count].iter().enumerate() {
                            let bytes = &buffer[index + 1].0;
                            self.install_read_ahead(&mut state, owner, ahead_page, ahead_io, result, bytes, now);
                        }
                        // The run goes on at the first page not read ahead.
                        let region = &mut state.regions[owner as usize];
                        if region.live {
                            region.last_fault = page + count as u64;
                        }
                    }
                    drop(buffer);
                    let outcome = state.engine.read_done(io, result, &[], now).expect("read completion");
                    match outcome {
                        ReadOutcome::SwappedIn { cached } => {
                            // A cached page keeps its slot: map it write-protected so the
                            // first write tells the engine the slot went stale.
                            let protect = cached && !write;
                            if cached && write {
                                state.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
                            }
                            let installing = Instant::now();
                            self.uffd.copy(address, data, protect, true).expect("installing a swapped-in page");
                            self.counters.fault_install_ns.fetch_add(installing.elapsed().as_nanos() as u64, Relaxed);
                            self.mark_resident(&mut state, owner, page);
                            return;
                        }
                        ReadOutcome::Failed => {
                            self.counters.device_errors.fetch_add(1, Relaxed);
                        }
                        ReadOutcome::Lost => {
                            self.lost(address);
                            return;
                        }
                        ReadOutcome::Freed | ReadOutcome::Gc => {
                            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Asks the engine to swap in the never-written pages right after `page` (at most
    /// [`ZERO_FILL_AROUND_PAGES`], within the budget's slack); returns how many.
    fn plan_zero_fill(&self, state: &mut State, owner: u32, page: u64) -> u64 {
        let room = (self.budget_pages + self.slack_pages)
            .saturating_sub(self.counters.resident_pages.load(Relaxed) + 1)
            .min(ZERO_FILL_AROUND_PAGES);
        let region_pages = state.regions[owner as usize].pages;
        let now = self.now();
        let mut count = 0;
        while count < room {
            let next = page + 1 + count;
            if next >= region_pages
                || state.regions[owner as usize].flags[next as usize] & (RESIDENT | DROPPING) != 0
                || state.engine.page_state(owner, next) != Ok(PageState::Zero)
            {
                break;
            }
            match state.engine.swap_in(owner, next, now) {
                Ok(SwapIn::Zero) => count += 1,
                Ok(other) => panic!("swap-in of never-written page {owner}:{next} answered {other:?}"),
                Err(_) => break,
            }
        }
        count
    }

    /// Asks the engine to swap in the pages after `page` whose slots follow `slot` in
    /// `zone`, so one device read brings them all; returns how many went into `ahead`.
    fn plan_readahead(
        &self,
        state: &mut State,
        owner: u32,
        page: u64,
        zone: u32,
        slot: u32,
        ahead: &mut [(u64, IoId)],
    ) -> usize {
        let capacity = state.engine.config().geometry.zone_capacity_pages as u64;
        let first = zone as u64 * capacity + slot as u64;
        let region_pages = state.regions[owner as usize].pages;
        let now = self.now();
        let mut count = 0;
        for k in 1..=self.readahead_pages as u64 {
            let next = page + k;
            if next >= region_pages
                || slot as u64 + k >= capacity
                || state.regions[owner as usize].flags[next as usize] & (RESIDENT | DROPPING) != 0
                || state.engine.page_state(owner, next) != Ok(PageState::Swapped { slot: first + k })
            {
                break;
            }
            match state.engine.swap_in(owner, next, now) {
                Ok(SwapIn::Read { io, zone: next_zone, slot: next_slot }) => {
                    assert!(
                        next_zone == zone && next_slot as u64 == slot as u64 + k,
                        "the engine reads a swapped page from its own slot"
                    );
                    ahead[count] = (next, io);
                    count += 1;
                }
                Ok(other) => panic!("swap-in of swapped page {owner}:{next} answered {other:?}"),
                Err(_) => break,
            }
        }
        count
    }

    /// Completes a read-ahead page and maps it: write-protected while its slot stays as
    /// swap cache, so it costs no write if it is evicted unwritten.
    #[allow(clippy::too_many_arguments)]
    fn install_read_ahead(
        &self,
        state: &mut State,
        owner: u32,
        page: u64,
        io: IoId,
        result: Result<(), IoError>,
        bytes: &[u8],
        now: u64,
    ) {
        let address = Self::page_address(state, owner, page);
        match state.engine.read_done(io, result, &[], now).expect("read-ahead completion") {
            ReadOutcome::SwappedIn { cached } => {
                self.uffd.copy(address, bytes, cached, true).expect("installing a read-ahead page");
                self.mark_resident(state, owner, page);
            }
            ReadOutcome::Failed => {
                self.counters.device_errors.fetch_add(1, Relaxed);
            }
            ReadOutcome::Lost => self.lost(address),
            ReadOutcome::Freed | ReadOutcome::Gc => {}
        }
    }

    /// The device destroyed the only copy of the page at `address`. Never hand back
    /// wrong data: poison the page (SIGBUS on touch, Linux 6.6+), or without poisoning
    /// stop the process.
    fn lost(&self, address: u64) {
        self.counters.lost_pages.fetch_add(1, Relaxed);
        if self.uffd.features() & features::POISON != 0 {
            self.uffd.poison(address, PAGE_BYTES as u64).expect("poisoning a lost page");
        } else {
            eprintln!("znswap: the device lost the only copy of the page at {address:#x}; this kernel cannot poison it, so the process stops");
            std::process::abort();
        }
    }

    // --------------------------------------------------------------- eviction

    /// Whether an evictor has work: the resident set, less what is already being
    /// written out, is above the low watermark, and an out handle is free to take a
    /// victim. Eviction starts a batch below the budget, as kswapd works between
    /// watermarks, so a fault finds a free page instead of waiting for a write-out; and
    /// it evicts whole batches: evicting one page per fault made every append a single
    /// 4 KiB write (measured: 10k writes/s of 4 KiB, each a device doorbell the faulting
    /// reads queue behind).
    fn eviction_wanted(&self, state: &State) -> bool {
        let resident = self.counters.resident_pages.load(Relaxed);
        let leaving = state.writing_pages + state.to_drop.len() as u64;
        resident.saturating_sub(leaving) > self.low_watermark && !state.out_free.is_empty()
    }

    /// Wakes the evictors if they sleep and now have work; called under the lock by
    /// whoever changes the resident set, the pages in flight or the free out handles.
    fn wake_evictor(&self, state: &mut State) {
        if state.evictors_asleep && self.eviction_wanted(state) {
            state.evictors_asleep = false;
            self.evict_wanted.notify_all();
        }
    }

    /// The evictor picks and write-protects victims and hands them to the
    /// engine; the I/O thread writes them. So the next batch is prepared while the last
    /// is on its way to the device (one thread doing both spent about 3 µs of CPU and
    /// then 3-4 µs waiting for the append per page, with no overlap).
    fn evict_loop(&self) {
        // A round takes up to `wanted` victims: the batch, or up to 4 batches while rounds
        // find contiguous pages and nothing is swapped in (sequential eviction alone),
        // where a larger round costs no more write-protect ioctls and makes appends
        // larger (measured on anon-w-seq: 256-page rounds and appends swapped out 10-25 %
        // faster than 64-page ones). Otherwise rounds stay at one batch: larger appends
        // delayed the swap-in reads queued behind them (fault p99 +15 %), and each round
        // holds the state lock for its hand-over.
        let mut wanted = self.evict_batch_pages;
        let mut reads_seen = self.counters.swap_in_reads.load(Relaxed);
        let mut victims = Vec::with_capacity(ROUND_BATCHES_MAX * self.evict_batch_pages);
        let out_count = self.lock().out_free.len();
        let mut dropping = Vec::with_capacity(out_count);
        let mut addresses = Vec::with_capacity(out_count);
        let mut ranges = Vec::with_capacity(out_count);
        let mut cpu_counted = thread_cpu_ns();
        loop {
            self.discard_dropped(&mut dropping, &mut addresses, &mut ranges);
            let mut state = self.lock();
            while !self.stop.load(Relaxed) && !self.eviction_wanted(&state) && state.to_drop.is_empty() {
                // The wait checks again under the lock the faults and completions change
                // the resident set and the pages in flight under, so no wake-up is missed.
                state.evictors_asleep = true;
                let idle = Instant::now();
                state = self
                    .evict_wanted
                    .wait_timeout(state, Duration::from_millis(5))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                self.counters.evictor_idle_ns.fetch_add(idle.elapsed().as_nanos() as u64, Relaxed);
            }
            if self.stop.load(Relaxed) {
                return;
            }
            if !state.to_drop.is_empty() {
                // Discard first: those pages leave the resident set without any I/O.
                continue;
            }
            victims.clear();
            self.pick_victims(&mut state, wanted, &mut victims);
            drop(state);
            if victims.is_empty() {
                // Every candidate was referenced or in flight: let the faults and the
                // I/O thread move on before sweeping again.
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            self.evict_victims(&mut victims);
            let contiguous = match (victims.first(), victims.last()) {
                (Some(first), Some(last)) => {
                    // (The hand may have wrapped around: then they are not.)
                    first.owner == last.owner && last.page.checked_sub(first.page) == Some(victims.len() as u64 - 1)
                }
                _ => false,
            };
            let reads = self.counters.swap_in_reads.load(Relaxed);
            let no_reads = reads == reads_seen;
            reads_seen = reads;
            wanted = if contiguous && no_reads && victims.len() == wanted {
                (2 * wanted).min(ROUND_BATCHES_MAX * self.evict_batch_pages)
            } else {
                self.evict_batch_pages
            };
            let cpu = thread_cpu_ns();
            self.counters.evictor_cpu_ns.fetch_add(cpu - cpu_counted, Relaxed);
            cpu_counted = cpu;
        }
    }

    /// Runs the engine's I/O (swap-out appends, GC reads and moves, resets, finishes)
    /// until none is queued, then sleeps until the evictor queues more or the engine's
    /// clock needs a tick (the GC and the swap-zone flush run on ticks).
    fn io_loop(&self) {
        let mut scratch = IoScratch::new(self.max_append_pages);
        let mut cpu_counted = thread_cpu_ns();
        while !self.stop.load(Relaxed) {
            let mut state = self.pump(&mut scratch);
            let cpu = thread_cpu_ns();
            self.counters.evictor_cpu_ns.fetch_add(cpu - cpu_counted, Relaxed);
            cpu_counted = cpu;
            if self.stop.load(Relaxed) {
                return;
            }
            state.io_asleep = true;
            let idle = Instant::now();
            let _ = self.io_wanted.wait_timeout(state, Duration::from_millis(5));
            self.counters.io_idle_ns.fetch_add(idle.elapsed().as_nanos() as u64, Relaxed);
        }
    }

    /// CLOCK over the address space: the hand sweeps the regions' pages in address
    /// order, clears reference bits and picks unreferenced resident pages, up to
    /// `wanted` (each with an out handle). Victims get a run number: consecutive victims
    /// with only non-resident pages between them share a run, and one write-protect
    /// ioctl covers it (write-protecting an empty PTE does nothing), so one TLB flush, one
    /// IPI to the faulting CPUs, serves many victims even under random access.
    fn pick_victims(&self, state: &mut State, wanted: usize, victims: &mut Vec<Victim>) {
        let wanted = wanted.min(state.out_free.len());
        // Two sweeps at most: the first may only clear reference bits.
        let limit: u64 = 2 * state.regions.iter().filter(|r| r.live).map(|r| r.pages).sum::<u64>();
        let (mut owner, mut page) = state.hand;
        let mut scanned = 0;
        let mut run = 0;
        while victims.len() < wanted && scanned < limit {
            if owner as usize >= state.regions.len() {
                owner = 0;
            }
            let region = &mut state.regions[owner as usize];
            if !region.live || page >= region.pages {
                owner += 1;
                page = 0;
                run += 1;
                continue;
            }
            scanned += 1;
            let flags = &mut region.flags[page as usize];
            if *flags & RESIDENT != 0 {
                if *flags & (EVICTING | WRITING) != 0 {
                    run += 1;
                } else if *flags & REFERENCED != 0 {
                    *flags &= !REFERENCED;
                    run += 1;
                } else {
                    *flags |= EVICTING;
                    let address = region.base + page * PAGE_BYTES as u64;
                    let generation = region.generation;
                    let handle = state.out_free.pop().expect("no more victims than free handles");
                    victims.push(Victim {
                        owner,
                        page,
                        address,
                        generation,
                        handle,
                        run,
                        protected: false,
                        zero: false,
                    });
                }
            }
            page += 1;
        }
        state.hand = (owner, page);
    }

    /// Write-protects the picked victims and looks for all-zero pages without the state
    /// lock (each protection costs a TLB flush, and faults should not wait behind
    /// them); then, under the lock, hands the pages not written meanwhile to the engine
    /// and wakes the I/O thread, whose append reads them where they are.
    fn evict_victims(&self, victims: &mut [Victim]) {
        // Writers fault from here on, so the pages stay as the zero check and the append
        // see them unless a write dirties them (which aborts their swap-out). An error
        // means the region went away meanwhile: checked below.
        let mappings = self.mappings.read().unwrap_or_else(|p| p.into_inner());
        let mut run_start = 0;
        while run_start < victims.len() {
            let mut run_end = run_start + 1;
            while run_end < victims.len() && victims[run_end].run == victims[run_start].run {
                run_end += 1;
            }
            let bytes = victims[run_end - 1].address + PAGE_BYTES as u64 - victims[run_start].address;
            let protected = self.uffd.write_protect(victims[run_start].address, bytes, true, false).is_ok();
            for victim in &mut victims[run_start..run_end] {
                victim.protected = protected;
            }
            run_start = run_end;
        }
        for victim in victims.iter_mut() {
            if victim.protected {
                // SAFETY: the page is mapped (its region cannot be unmapped while
                // `mappings` is held); a write fault meanwhile clears EVICTING and the
                // page is kept below, whatever this saw.
                victim.zero = unsafe { page_is_zero(victim.address) };
            }
        }
        drop(mappings);
        let mut state = self.lock();
        let now = self.now();
        for &Victim { owner, page, address, generation, handle, protected, zero, .. } in victims.iter() {
            let region = &mut state.regions[owner as usize];
            if !region.live || region.generation != generation {
                state.out_free.push(handle);
                continue;
            }
            let flags = &mut region.flags[page as usize];
            debug_assert!(*flags & RESIDENT != 0, "only the evictor drops pages");
            let written = *flags & EVICTING == 0;
            *flags &= !EVICTING;
            if written || !protected {
                // Written (and unprotected) since it was picked, or (never for a live
                // region) not protected: keep it.
                state.out_free.push(handle);
                self.requeue(&mut state, owner, page, address);
                continue;
            }
            if zero {
                state.out_free.push(handle);
                state.engine.free(owner, page..page + 1, now).expect("freeing a zero page");
                self.counters.swap_outs_zero.fetch_add(1, Relaxed);
                self.drop_page(&mut state, owner, page);
                continue;
            }
            // The append reads the page where it is (`pump`).
            state.out_pages[handle as usize] = OutPage { owner, generation, address };
            match state.engine.swap_out(owner, page, handle, now) {
                Ok(_) => {
                    state.regions[owner as usize].flags[page as usize] |= WRITING;
                    state.writing_pages += 1;
                }
                Err(SwapOutError::Backpressure) => {
                    self.counters.backpressure.fetch_add(1, Relaxed);
                    state.out_free.push(handle);
                    self.requeue(&mut state, owner, page, address);
                }
                Err(error) => panic!("swap-out of resident page {owner}:{page}: {error}"),
            }
        }
        self.complete_events(&mut state);
        self.after_completions(&mut state);
        if state.io_asleep {
            state.io_asleep = false;
            self.io_wanted.notify_one();
        }
    }

    fn requeue(&self, state: &mut State, owner: u32, page: u64, address: u64) {
        // Dirty pages lose the protection again; a clean swap-cached one keeps it.
        let clean = matches!(state.engine.page_state(owner, page), Ok(znswap_core::PageState::SwapCached { .. }));
        if !clean {
            self.uffd
                .write_protect(address, PAGE_BYTES as u64, false, true)
                .expect("unprotecting a page kept resident");
        }
    }

    /// Marks a page dropped: no longer resident for the pager, but mapped until an
    /// evictor discards it (`discard_dropped`); faults on it wait for that (DROPPING).
    fn drop_page(&self, state: &mut State, owner: u32, page: u64) {
        let region = &mut state.regions[owner as usize];
        let generation = region.generation;
        let flags = &mut region.flags[page as usize];
        debug_assert!(*flags & RESIDENT != 0 && *flags & DROPPING == 0);
        *flags &= !(RESIDENT | REFERENCED);
        *flags |= DROPPING;
        state.to_drop.push(Dropping { owner, page, generation });
    }

    /// Called after `complete_events`, in the same lock hold: wakes an evictor for the
    /// pages to discard, or if completions left it pages to evict.
    fn after_completions(&self, state: &mut State) {
        if !state.to_drop.is_empty() && state.evictors_asleep {
            state.evictors_asleep = false;
            self.evict_wanted.notify_all();
        }
        self.wake_evictor(state);
    }

    /// `MADV_DONTNEED` for the dropped pages, outside the state lock: it costs about
    /// 0.35 µs a page and a TLB flush per batch, which faults used to wait behind. The
    /// regions stay mapped meanwhile (`mappings` is held: `Region::drop` takes it
    /// exclusively), and pages of a region freed before are skipped.
    fn discard_dropped(&self, batch: &mut Vec<Dropping>, addresses: &mut Vec<u64>, ranges: &mut Vec<IoVec>) {
        let _mappings = self.mappings.read().unwrap_or_else(|p| p.into_inner());
        {
            let mut state = self.lock();
            if state.to_drop.is_empty() {
                return;
            }
            debug_assert!(batch.is_empty());
            std::mem::swap(&mut state.to_drop, batch);
            addresses.clear();
            for dropping in batch.iter() {
                let region = &state.regions[dropping.owner as usize];
                if region.live && region.generation == dropping.generation {
                    addresses.push(region.base + dropping.page * PAGE_BYTES as u64);
                }
            }
        }
        addresses.sort_unstable();
        ranges.clear();
        let mut index = 0;
        while index < addresses.len() {
            let start = addresses[index];
            let mut end = start + PAGE_BYTES as u64;
            index += 1;
            while index < addresses.len() && addresses[index] == end {
                end += PAGE_BYTES as u64;
                index += 1;
            }
            ranges.push(IoVec { base: start as usize, len: (end - start) as usize });
        }
        self.discard(ranges);
        let mut state = self.lock();
        for dropping in batch.iter() {
            let region = &mut state.regions[dropping.owner as usize];
            if region.live && region.generation == dropping.generation {
                region.flags[dropping.page as usize] &= !DROPPING;
            }
        }
        // Every dropped page was still counted resident, a freed region's too (its
        // `Drop` subtracts only RESIDENT pages).
        self.counters.resident_pages.fetch_sub(batch.len() as u64, Relaxed);
        batch.clear();
        self.space_freed.notify_all();
        self.wake_evictor(&mut state);
    }

    /// `MADV_DONTNEED` over `ranges`: one `process_madvise` per batch where the kernel
    /// allows it on the calling process (6.13+; a TLB flush per batch instead of per page,
    /// about 0.35 instead of 1.2-2.5 µs per scattered page here), else one `madvise` each.
    fn discard(&self, ranges: &[IoVec]) {
        // Kernels cap a vector at IOV_MAX entries.
        const BATCH: usize = 512;
        let mut rest = ranges;
        if let Some(pidfd) = self.self_pidfd {
            while !rest.is_empty() {
                let batch = &rest[..rest.len().min(BATCH)];
                let bytes: usize = batch.iter().map(|r| r.len).sum();
                // SAFETY: the ranges are pages of our own mappings whose contents are on
                // the device (or were all zero); the iovec array outlives the call.
                let done = unsafe {
                    libc::syscall(libc::SYS_process_madvise, pidfd, batch.as_ptr(), batch.len(), libc::MADV_DONTNEED, 0)
                };
                if done < 0 || done as usize != bytes {
                    // A partial or refused batch: finish it range by range below.
                    break;
                }
                rest = &rest[batch.len()..];
            }
        }
        for range in rest {
            // SAFETY: as above; MADV_DONTNEED of an already dropped range is harmless.
            let rc = unsafe { libc::madvise(range.base as *mut libc::c_void, range.len, libc::MADV_DONTNEED) };
            assert_eq!(rc, 0, "MADV_DONTNEED: {}", std::io::Error::last_os_error());
        }
    }

    fn complete_events(&self, state: &mut State) {
        while let Some(event) = state.engine.poll_event() {
            match event {
                Event::SwapOutDone { owner, page, buf, outcome, .. } => {
                    // One per swap-out the engine took (a freed page's too, at its
                    // append's completion): no append reads the page any more.
                    state.out_free.push(buf);
                    state.writing_pages -= 1;
                    // The region it was taken from, not a later one under the same owner
                    // id (whose page of that index may have a swap-out of its own).
                    let generation = state.out_pages[buf as usize].generation;
                    let same_region =
                        state.regions.get(owner as usize).is_some_and(|r| r.live && r.generation == generation);
                    if !same_region {
                        continue;
                    }
                    let address = Self::page_address(state, owner, page);
                    state.regions[owner as usize].flags[page as usize] &= !WRITING;
                    match outcome {
                        SwapOutOutcome::Swapped { .. } => {
                            if state.regions[owner as usize].flags[page as usize] & RESIDENT != 0 {
                                self.drop_page(state, owner, page);
                            }
                        }
                        SwapOutOutcome::AbortedDirty => {
                            self.counters.swap_outs_aborted_dirty.fetch_add(1, Relaxed);
                            self.requeue(state, owner, page, address);
                        }
                        SwapOutOutcome::Failed => {
                            self.counters.device_errors.fetch_add(1, Relaxed);
                            self.requeue(state, owner, page, address);
                        }
                        SwapOutOutcome::Dropped => {}
                    }
                }
                Event::Lost { .. } => {
                    self.counters.lost_pages.fetch_add(1, Relaxed);
                }
                Event::Remapped { .. } | Event::RecordRejected { .. } | Event::ZoneRetired { .. } => {}
            }
        }
    }

    // --------------------------------------------------------------------- I/O

    fn lba(&self, zone: u32, slot: u32) -> u64 {
        self.device.geometry().zone_start_lba(zone) + slot as u64 * self.lbas_per_page
    }

    fn read_slots(&self, zone: u32, slot: u32, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<(), IoError> {
        self.device.read(self.lba(zone, slot), data, metadata).map_err(|error| io_error(&error))
    }

    /// Executes every I/O the engine has queued; the lock is released during device I/O
    /// (see `page_buffers` for who owns the GC buffer pages meanwhile).
    /// Returns holding the lock, with nothing queued.
    fn pump(&self, scratch: &mut IoScratch) -> MutexGuard<'_, State> {
        loop {
            // Swap-out appends read the pages in place: their regions stay mapped until
            // the append is done (`Region::drop` takes `mappings` exclusively).
            let mappings = self.mappings.read().unwrap_or_else(|p| p.into_inner());
            let mut state = self.lock();
            state.engine.tick(self.now());
            let Some(request) = state.engine.poll_io() else {
                drop(mappings);
                self.complete_events(&mut state);
                self.after_completions(&mut state);
                return state;
            };
            let cpu_started = thread_cpu_ns();
            let mut gc_work = false;
            match request {
                IoRequest::Append { io, zone, pages } => {
                    let pages = pages as usize;
                    scratch.prepare(pages);
                    let records = state.engine.append_records(io);
                    for (index, append_page) in state.engine.append_pages(io).iter().enumerate() {
                        let source = match append_page.buf {
                            Buf::Page(handle) => {
                                let out = state.out_pages[handle as usize];
                                let region = &state.regions[out.owner as usize];
                                if region.live && region.generation == out.generation {
                                    debug_assert_eq!(out.address, region.base + append_page.page * PAGE_BYTES as u64);
                                    Source::At(out.address)
                                } else {
                                    // Freed since: its slot ends invalid, whatever is written.
                                    Source::Zero
                                }
                            }
                            Buf::Gc(n) => {
                                gc_work = true;
                                Source::Gc(n)
                            }
                            Buf::Footer => {
                                scratch.pages[index].0.copy_from_slice(records);
                                Source::Scratch
                            }
                            Buf::Zero => Source::Zero,
                        };
                        scratch.sources.push(source);
                        if !self.footer_mode && self.metadata_bytes > 0 {
                            let record = &records[index * RECORD_BYTES..(index + 1) * RECORD_BYTES];
                            scratch.metadata.extend_from_slice(record);
                            scratch.metadata.resize(scratch.metadata.len() + self.metadata_bytes - RECORD_BYTES, 0);
                        }
                    }
                    drop(state);
                    // The pages go to the device from where they are, in one `pwritev`.
                    // One vector per append (a few KiB; the append is 4 KiB a page, so
                    // this is not where time goes).
                    let pieces: Vec<IoSlice<'_>> = scratch
                        .sources
                        .iter()
                        .enumerate()
                        .map(|(index, source)| {
                            IoSlice::new(match *source {
                                // SAFETY: the page's region was live under the lock and
                                // stays mapped while `mappings` is held. A write to the
                                // page meanwhile races with the device reading it, but
                                // dirties the page first (write-protect fault), which
                                // aborts this swap-out (Appendix A): those bytes are
                                // never read back.
                                Source::At(address) => unsafe {
                                    std::slice::from_raw_parts(address as *const u8, PAGE_BYTES)
                                },
                                // SAFETY: the engine owns these pages until this append
                                // completes (`append_done` below); nobody writes them.
                                Source::Gc(n) => unsafe { &self.gc_buffers.page(n as u64)[..] },
                                Source::Scratch => &scratch.pages[index].0,
                                Source::Zero => &ZERO_PAGE.0,
                            })
                        })
                        .collect();
                    let metadata_arg = (!scratch.metadata.is_empty()).then_some(scratch.metadata.as_slice());
                    let appending = Instant::now();
                    if !gc_work && self.counters.first_swap_out_ns.load(Relaxed) == 0 {
                        self.counters.first_swap_out_ns.store(self.now().max(1), Relaxed);
                    }
                    let result = self
                        .device
                        .append_vectored(zone, &pieces, metadata_arg)
                        .map(|lba| ((lba - self.device.geometry().zone_start_lba(zone)) / self.lbas_per_page) as u32);
                    drop(pieces);
                    drop(mappings);
                    if !gc_work {
                        self.counters.evictor_append_ns.fetch_add(appending.elapsed().as_nanos() as u64, Relaxed);
                        self.counters.swap_out_appends.fetch_add(1, Relaxed);
                    }
                    if result.is_err() {
                        self.counters.device_errors.fetch_add(1, Relaxed);
                    }
                    let mut state = self.lock();
                    let written = if result.is_ok() && !gc_work { pages as u64 } else { 0 };
                    self.counters.swap_outs_written.fetch_add(written, Relaxed);
                    state
                        .engine
                        .append_done(io, result.map_err(|e| io_error(&e)), &scratch.no_dirtied[..pages], self.now())
                        .expect("append completion");
                    self.complete_events(&mut state);
                    self.after_completions(&mut state);
                }
                IoRequest::Read { io, zone, slot, pages, buf, with_metadata } => {
                    gc_work = true;
                    drop(state);
                    drop(mappings);
                    let pages = pages as usize;
                    scratch.prepare(pages);
                    let metadata_arg = if with_metadata && self.metadata_bytes > 0 {
                        scratch.metadata.resize(pages * self.metadata_bytes, 0);
                        Some(scratch.metadata.as_mut_slice())
                    } else {
                        None
                    };
                    let result = match buf {
                        Buf::Gc(first) => {
                            // SAFETY: this read owns its GC buffer pages until `read_done`.
                            let data = unsafe { self.gc_buffers.pages_mut(first as usize, pages) };
                            self.read_slots(zone, slot, data, metadata_arg)
                        }
                        Buf::Footer | Buf::Page(_) | Buf::Zero => {
                            self.read_slots(zone, slot, bytes_mut(&mut scratch.pages[..pages]), metadata_arg)
                        }
                    };
                    let mut state = self.lock();
                    let records: &[u8] = match buf {
                        Buf::Gc(_) => &scratch.metadata,
                        Buf::Footer => bytes(&scratch.pages[..pages]),
                        Buf::Page(_) | Buf::Zero => &[],
                    };
                    state.engine.read_done(io, result, records, self.now()).expect("read completion");
                    self.complete_events(&mut state);
                    self.after_completions(&mut state);
                }
                IoRequest::Reset { io, zone } => {
                    gc_work = true;
                    drop(state);
                    drop(mappings);
                    let result = self.device.reset(zone).map_err(|e| io_error(&e));
                    self.lock().engine.reset_done(io, result, self.now()).expect("reset completion");
                }
                IoRequest::Finish { io, zone } => {
                    drop(state);
                    drop(mappings);
                    let result = self.device.finish(zone).map_err(|e| io_error(&e));
                    self.lock().engine.finish_done(io, result, self.now()).expect("finish completion");
                }
            }
            if gc_work {
                self.counters.gc_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(cpu_started), Relaxed);
            }
        }
    }
}
