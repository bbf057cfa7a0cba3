//! The live pager: regions of anonymous memory whose pages beyond a resident budget live
//! on a zoned device, driven by the sans-I/O swap engine of `znswap-core`.
//!
//! Threads (handler-thread mode: kernel-mode accesses such as `read()` into a region work),
//! each with a file of its own under `pager/`:
//! - the **fault handler** (`fault.rs`) reads userfaultfd events. A missing page is swapped in (a
//!   device read outside the lock) or zero-filled; a write to a write-protected page is
//!   reported to the engine (`dirtied`) and unprotected.
//! - the **evictor** (`evict.rs`) keeps the resident set within the budget. Once the resident set,
//!   less the pages already on their way out, passes a low watermark (a batch below the
//!   budget) it evicts a whole batch: a CLOCK hand sweeps the regions in address order,
//!   so victims separated only by non-resident pages share one write-protect ioctl (one
//!   TLB flush); they are handed to the engine as they are, no copy. Reference bits come
//!   from faults and, with reference sampling, from writes: the hand write-protects the
//!   pages whose bit it clears, and a write fault on one marks its 16-page granule
//!   referenced (userfaultfd offers no accessed bit). It also discards (`MADV_DONTNEED`) the pages whose swap-out
//!   completed, outside the lock.
//! - the **I/O thread** (`io.rs`) runs every I/O the engine asks for (swap-out appends straight
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

mod evict;
mod fault;
mod io;
mod stats;

use evict::{self_pidfd_for_discard, DiscardScratch};
use stats::Counters;
pub use stats::PagerStats;

pub const PAGE_BYTES: usize = 4096;
/// Largest readahead window.
pub const READAHEAD_PAGES_MAX: u32 = 32;
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
    /// Reference bits from writes, not only from faults (the default): the CLOCK hand
    /// write-protects the pages whose bit it clears, and a write to one faults and sets
    /// the bit again for its granule of 16 pages (the write-protect fault stands in for
    /// the accessed bit userfaultfd cannot read). Without it a page that stays resident
    /// looks unreferenced after one sweep, and CLOCK evicts about as FIFO would
    /// (measured, 512 MiB budget, 2 GiB set, 1 thread: hotspot 0.42 swap-ins per
    /// operation without, 0.24 with; uniform random writes unchanged at 0.75). Reads of a
    /// resident page still leave no trace.
    pub reference_sampling: bool,
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
            reference_sampling: true,
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
    reference_sampling: bool,
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
    /// Scratch for a fault that discards dropped pages while it waits for room (see
    /// `missing_fault_locked`); a fault that finds it busy just waits.
    fault_discard: Mutex<DiscardScratch>,
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
            fault_discard: Mutex::new(DiscardScratch::with_capacity(out_count)),
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
            reference_sampling: config.reference_sampling,
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

/// A page on its way to the device: the swap-out append reads it at `address` if its
/// region (`owner`, `generation`) is still the one mapped there.
#[derive(Clone, Copy)]
struct OutPage {
    owner: u32,
    generation: u64,
    address: u64,
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

    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
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
}
