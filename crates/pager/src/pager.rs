//! The live pager's shell: threads and system calls around the sans-I/O pager core
//! (`znswap-pager-core`), which makes every decision. Each thread takes the state lock,
//! asks the core what to do, carries out the actions it returns (userfaultfd ioctls)
//! before letting go of the lock, and does the slow work (device I/O, write-protecting
//! victims, discards) outside the lock on what the core handed out. The calling order,
//! the lock order and the rule self-paging rests on are in the core's crate docs; page
//! states and transitions are drawn in its README.
//!
//! Threads, each with a file of its own under `pager/`:
//! - the **fault handler** (`fault.rs`, handler-thread mode; in self-paging mode the
//!   faulting thread itself, in its SIGBUS handler): resolves faults with
//!   `PagerCore::fault`, reading the device outside the lock when the core asks. A
//!   served tenant's fault held back by its write limit is set aside rather than waited
//!   in (`aside.rs`), so the other tenants' faults do not wait behind it.
//! - the **evictor** (`evict.rs`): discards written-out pages, picks victims
//!   (`PagerCore::evict_pick`), write-protects them and looks for all-zero ones outside
//!   the lock, and hands them over (`PagerCore::evict_hand_over`).
//! - the **I/O thread** (`io.rs`): runs every I/O the engine asks for (swap-out appends
//!   straight from the victim pages in place, GC reads and moves, resets), so the evictor
//!   prepares the next batch while the last is written, and the GC runs beside faults.
//!
//! Appendix A, with write-protection instead of the PTE dirty bit: a victim is
//! write-protected before it is handed to the engine, so a write during the append
//! faults; the core tells the engine (`dirtied`), which then aborts the swap-out, and
//! lifts the protection at once, so the writer never waits for the device (the append
//! may then carry a torn page: its slot is never made valid). A completed page is
//! `Dropping` until the evictor discards it, and a fault on it meanwhile waits for the
//! discard and then swaps the page back in. So a write either lands before the
//! completion (swap-out aborted) or after the discard, on the page read back: never lost.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, TryLockError};
use std::time::{Duration, Instant};

use znswap_core::{Geometry as EngineGeometry, IoError, PolicyKind};
use znswap_pager_core::{
    unpark_next, Action, Actions, CopyFrom, CoreConfig, CoreError, DiscardBatch, MoveFailure, PagerCore, Pause,
    UnparkNext,
};
use znswap_zoned::{ZoneError, ZonedDevice};

use crate::page_buffers::PageBuffers;
use crate::pager_thread::PagerThread;
use crate::self_paging::{self, Registration, SelfPagingError};
use crate::tenant::TenantLink;
use crate::uffd::{features, register_mode, UffdError, Userfaultfd};

mod aside;
mod colocate;
mod evict;
mod fault;
mod io;
mod program;
pub use program::{ForkFill, ForkSnapshot};
mod shell;
mod spaces;
mod stats;

use evict::self_pidfd_for_discard;
use fault::FaultPoll;
pub use spaces::TenantId;
use stats::Counters;
use stats::FaultRecord;
pub use stats::{FaultTimeTotals, FaultTimes, PagerStats};
/// The default bound of a handler thread's polling for the next fault
/// (`PagerConfig::fault_poll_us`), in microseconds.
pub const FAULT_POLL_US_DEFAULT: u32 = 200;
/// Its largest value (10 ms): beyond it a CPU would spin through gaps that dwarf the
/// wake-up it saves.
pub const FAULT_POLL_US_MAX: u32 = 10_000;

pub use znswap_pager_core::{GC_BATCH_PAGES_DEFAULT, PAGE_BYTES, READAHEAD_PAGES_DEFAULT, READAHEAD_PAGES_MAX};

/// Records the engine writes per page in per-page metadata mode.
const RECORD_BYTES: usize = 16;

/// Zeroes for `CopyFrom::Zeros`: a fault maps at most the faulting page and the
/// never-written pages after it.
static ZERO_PAGES: [u8; (znswap_pager_core::ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES] =
    [0; (znswap_pager_core::ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES];

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
    /// The largest read-ahead window beyond a faulting page (`CoreConfig::readahead_pages`:
    /// the valid slots around the faulting page's, read with it into a cache of the
    /// pager's own, the window following the hits). FlashVM (seed 004) warns that flash
    /// does not reward disk-era prefetching of random pages: this window stays at one
    /// page without hits. [`READAHEAD_PAGES_DEFAULT`] by default, at most
    /// [`READAHEAD_PAGES_MAX`]; 0 reads nothing ahead.
    pub readahead_pages: u32,
    /// Pages the GC moves per batch (1024, 4 MiB, by default). Its buffer holds twice
    /// that (a batch and the gaps its reads span), allocated at start and resident once
    /// the GC has run: `znswap run` counts it against `--memory`, so it scales it down
    /// for small budgets.
    pub gc_batch_pages: u32,
    /// After the faults it found, a handler thread polls userfaultfd for the next one
    /// for up to this many microseconds before it sleeps (one thread at a time; 0:
    /// never). A fault that finds a handler polling costs no wake-up of one: on this
    /// machine's virtual CPUs a sleeping handler took 20-50 µs to wake, more than a
    /// third of a fault. The window adapts as the kernel's halt polling does: it
    /// doubles when the next fault came after the handler slept but within the
    /// window's bound, and halves (to nothing) when it came later, so a program that
    /// seldom faults costs no polling. Handler threads only (self-paging has none).
    ///
    /// Not 0 also makes a fault's device read wait by polling, in a handler thread or
    /// a self-paging thread alike (`znswap_zoned::poll_reads_on_this_thread`): a sleep
    /// there adds a wake-up of a halted virtual CPU to the fault (measured, same
    /// minutes: handler-thread fault p50 113-119 -> 86-91 µs, redis 1 GiB in 256 MiB
    /// +20 % ops/s, self-paging bench anon-r-rand +17-21 %, hotspot +37-65 %).
    pub fault_poll_us: u32,
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
    /// Pages of the inactive list (0: none, the default). Victims are first parked:
    /// moved out of the program's reach with `UFFDIO_MOVE` (no copy) to a shadow mapping
    /// of their region, where they stay in memory; a touch, read or write, is a missing
    /// fault that moves the page back with no I/O and marks it referenced, so the pager
    /// sees reads. The pages still parked when their turn comes are written out from
    /// there, with no write-protect fault on the program's path. Needs `UFFDIO_MOVE`
    /// (Linux 6.8). See `znswap_pager_core`'s `park.rs`.
    pub park_pages: u64,
    /// Writes are seen without faults (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7): a write to a
    /// protected page goes ahead and leaves the page "written" for `PAGEMAP_SCAN`, where
    /// today it is a write-protect fault through a handler (76 µs here, against 0.7 µs).
    /// Reference sampling becomes a scan of the victims before they are parked, and a
    /// swap-cached page is told clean by a digest of its bytes once parked. Needs
    /// `park_pages` (a victim is only ever written out once parked) and handler threads;
    /// a page the move refuses because it is shared with a fork's child is made the
    /// parent's (`MADV_POPULATE_WRITE`) and parked at the hand's next pass. Experimental:
    /// see `docs/wp-async-facts.md` for what it measured.
    pub wp_async: bool,
    /// For tests: every this many moves to or from a shadow page that succeed are
    /// reported failed (`EEXIST`), as Linux 6.18 now and then does (`park_outcome` in the
    /// pager core); the shells must find them done by the page map. 0 (the default):
    /// never.
    pub misreport_moves_every: u32,
    /// Pins the program thread that takes nine in ten faults, and the fault handlers,
    /// to one CPU (the one it ran on), and the evictor and I/O threads to the others
    /// (`src/pager/colocate.rs`): a fault's round trip then costs context switches, not
    /// wake-ups of other CPUs. Off by default in the library; `znswap run` turns it on.
    pub colocate: bool,
    /// Seal every page written to the device (AES-256-GCM, `znswap-seal`) under a key
    /// made at start and held only in this process's memory; a page read back that
    /// fails to open is lost (SIGBUS), never delivered. A page read ahead is opened when
    /// a fault wants it, with the neighbours in the cache mapped along with it.
    pub encrypt: bool,
    /// Called first thing in every pager thread. `znswap run`'s preload library marks
    /// its threads there, so their allocations stay out of the paged heap (a handler
    /// faulting on memory only it can bring back would wait forever).
    pub thread_start: Option<fn()>,
    /// Called in a forked child whose parent has exited (a daemon), before the child
    /// stops: `znswap run` tells its launcher so.
    pub child_orphaned: Option<fn()>,
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
            park_pages: 0,
            wp_async: false,
            misreport_moves_every: 0,
            colocate: false,
            encrypt: false,
            readahead_pages: READAHEAD_PAGES_DEFAULT,
            gc_batch_pages: GC_BATCH_PAGES_DEFAULT,
            fault_poll_us: FAULT_POLL_US_DEFAULT,
            thread_start: None,
            child_orphaned: None,
            fault_mode: FaultMode::HandlerThreads(std::thread::available_parallelism().map_or(1, |n| n.get())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PagerError {
    #[error(transparent)]
    Uffd(#[from] UffdError),
    /// The core refused the device, the budget or a region (its message says which).
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error("mmap of {bytes} B failed: {source}")]
    Map { bytes: u64, source: std::io::Error },
    #[error(transparent)]
    SelfPaging(#[from] SelfPagingError),
    #[error("encryption: {0}")]
    Seal(#[from] znswap_seal::SealError),
    #[error("asynchronous write protection needs handler threads (no write fault reaches a SIGBUS handler)")]
    WpAsyncSelfPaging,
    #[error("asynchronous write protection needs PAGEMAP_SCAN on /proc/self/pagemap (Linux 6.7): {0}")]
    PagemapScan(std::io::Error),
    /// A pager serving another process cannot do this yet (`Pager::serve_tenant`).
    #[error("serving another process's memory: {0}")]
    Tenant(&'static str),
    #[error("{what}: {source}")]
    Io { what: &'static str, source: std::io::Error },
}

/// What a fork's child served from its fork on starts with (`Pager::add_forked_tenant`):
/// the pages mapped in it (indexes), and its parent's snapshot.
struct Inheritance<'a> {
    present: &'a [u64],
    snapshot: &'a ForkSnapshot,
}

pub(crate) struct Shared {
    device: Arc<dyn ZonedDevice>,
    /// Whose memory is served: this process's, or other processes' (`Pager::serve`),
    /// whose victims are read and dropped through them (`spaces.rs`).
    spaces: spaces::Spaces,
    /// An ioctl found a served process gone: the evictor lets its region go at its next
    /// rest (else it would pick, fail to protect and pick again the dead process's pages,
    /// as fast as it can).
    tenant_gone: AtomicBool,
    /// Forks' children served whose agent has not answered yet: an agent's thread start
    /// may fault on the heap (glibc reads the program's locale there), so no handler
    /// waits on agents meanwhile (`fault_discard_take`).
    agents_starting: AtomicU32,
    /// Seals pages as appends write them and opens them after reads
    /// (`PagerConfig::encrypt`).
    sealer: Option<znswap_seal::Sealer>,
    /// Faults are resolved by the faulting threads (`FaultMode::SelfPaging`): nobody
    /// ever waits on the descriptor. (Not from `uffd.features()`: the kernel reports
    /// every feature it supports there, asked for or not.)
    self_paging: bool,
    /// The GC move buffer (`Buf::Gc`), owned by the engine's GC batch (see
    /// `page_buffers`).
    gc_buffers: PageBuffers,
    /// With asynchronous write protection (`PagerConfig::wp_async`, whose mark it is
    /// here): the seed of the pages' digests, made at start from the OS's random source.
    digest_key: Option<u64>,
    /// `PagerConfig::misreport_moves_every`, and the moves done so far while it is set.
    misreport_moves_every: u64,
    moves_done: AtomicU64,
    state: Mutex<PagerCore>,
    evict_wanted: Condvar,
    io_wanted: Condvar,
    space_freed: Condvar,
    stop: AtomicBool,
    /// The handler threads' polling for the next fault (`fault.rs`).
    fault_poll: FaultPoll,
    /// Served tenants' faults held back by their write limits, which no handler waits
    /// in (`aside.rs`).
    aside: aside::Aside,
    device_error_shown: AtomicBool,
    /// Held shared by every device command, exclusively across a fork (`program.rs`).
    device_gate: RwLock<()>,
    /// Forks whose children may still read the device, and the thread watching them.
    forks: Mutex<program::Forks>,
    /// Who shares a CPU with the fault handlers (`colocate.rs`).
    colocation: colocate::Colocation,
    /// The pager's own threads (thread ids, 0: a free entry), so a fault one of them
    /// raises is known as such (`Fault::from_pager_thread`).
    pager_tids: [AtomicU32; PAGER_TIDS_MAX],
    lbas_per_page: u64,
    metadata_bytes: usize,
    footer_mode: bool,
    /// Held shared while pages of regions are read or discarded outside the state lock
    /// (victims, appends, discards), and exclusively while a region is unmapped.
    mappings: RwLock<()>,
    /// The read-ahead cache's pages (`PagerCore::readahead_cache_pages`). Its pages are
    /// owned one by one as the core says: by the fault whose read the core claimed them
    /// for, until that read's completion; else read only under the state lock, by the
    /// `CopyFrom::Cache` of a fault it serves.
    readahead_cache: PageBuffers,
    /// A pidfd of this process for batched `process_madvise`, where the kernel accepts
    /// `MADV_DONTNEED` through it.
    self_pidfd: Option<i32>,
    /// Scratch for a fault that discards dropped pages while it waits for room (direct
    /// reclaim); a fault that finds it busy just waits.
    /// (Taken out while in use: the fault that does the discard holds it.)
    fault_discard: Mutex<Option<DiscardBatch>>,
    started: Instant,
    counters: Counters,
}

/// A kind of pager thread: its name, its role in a panic message, its body, how many.
type ThreadRole = (&'static str, &'static str, fn(&Shared), usize);

/// The pager; dropping it stops its threads (regions must be dropped first).
pub struct Pager {
    shared: Arc<Shared>,
    threads: Vec<PagerThread>,
    registration: Option<Registration>,
    thread_start: Option<fn()>,
    child_orphaned: Option<fn()>,
    io_threads: usize,
}

/// A region of pager-backed memory. Behaves like anonymous memory; dropping it frees
/// its swap slots at once.
pub struct Region {
    shared: Arc<Shared>,
    owner: u32,
    base: *mut u8,
    len: usize,
    /// Where its pages are parked (a mapping of `len` bytes), if the pager parks.
    shadow: Option<*mut u8>,
}

// SAFETY: the region is plain memory; concurrent access follows the usual rules of the
// slices handed out (the caller's `&mut` discipline), and the pager's own accesses go
// through the kernel (uffd ioctls) or happen under `mappings`, never through these
// pointers.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

fn engine_geometry(geometry: &znswap_zoned::Geometry) -> EngineGeometry {
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

/// A key for the pages' digests, from the OS's random source.
fn digest_key() -> u64 {
    let mut key = [0u8; 8];
    // SAFETY: an 8-byte buffer, written by the call.
    let got = unsafe { libc::getrandom(key.as_mut_ptr().cast(), key.len(), 0) };
    assert_eq!(got, 8, "getrandom: {}", std::io::Error::last_os_error());
    u64::from_ne_bytes(key)
}

/// A page's digest (`CoreConfig::wp_async`): XXH3's 128 bits, seeded with the run's key
/// (about 0.1 µs a page, where a write-protect fault costs tens), never 0 (no digest).
/// Two different pages agree with a chance of about 2^-128: the swap cache would then
/// keep a stale slot, so a non-cryptographic hash of 64 bits would not do.
pub(crate) fn page_digest(key: u64, page: &[u8]) -> znswap_pager_core::Digest {
    xxhash_rust::xxh3::xxh3_128_with_seed(page, key).max(1)
}

/// Whether records go in a footer page per chunk: the device cannot carry a 16-byte
/// record beside each 4 KiB page.
fn footer_mode(geometry: &znswap_zoned::Geometry) -> bool {
    geometry.lba_bytes as usize != PAGE_BYTES || geometry.metadata_bytes < RECORD_BYTES as u32
}

impl PagerConfig {
    fn core_config(&self) -> CoreConfig {
        CoreConfig {
            budget_pages: self.budget_bytes / PAGE_BYTES as u64,
            slack_pages: self.slack_pages,
            evict_batch_pages: self.evict_batch_pages,
            reference_sampling: self.reference_sampling,
            readahead_pages: self.readahead_pages,
            gc_batch_pages: self.gc_batch_pages,
            park_pages: self.park_pages,
            regions_max: self.regions_max,
            tenants: self.tenants,
            policy: self.policy,
            seal_pages: self.encrypt,
            wp_async: self.wp_async,
        }
    }
}

impl Pager {
    /// Checks that a pager could start with `config` on a device of `geometry` (the
    /// budget, the read-ahead, enough zones), starting nothing: for a launcher that
    /// wants to refuse before it runs a program.
    pub fn check(geometry: &znswap_zoned::Geometry, config: &PagerConfig) -> Result<(), PagerError> {
        Ok(PagerCore::check(engine_geometry(geometry), footer_mode(geometry), &config.core_config())?)
    }

    pub fn new(device: Arc<dyn ZonedDevice>, config: PagerConfig) -> Result<Pager, PagerError> {
        let mut required = match config.fault_mode {
            FaultMode::HandlerThreads(_) => features::PAGEFAULT_FLAG_WP,
            FaultMode::SelfPaging => features::PAGEFAULT_FLAG_WP | features::SIGBUS,
        };
        if config.park_pages > 0 {
            required |= features::MOVE;
        }
        if config.wp_async {
            if config.fault_mode == FaultMode::SelfPaging {
                return Err(PagerError::WpAsyncSelfPaging);
            }
            required |= features::WP_ASYNC;
            crate::pagemap::WrittenScan::open().map_err(PagerError::PagemapScan)?;
        }
        // Thread ids name the faulting thread for co-location (`colocate.rs`).
        let uffd = Userfaultfd::new(required, features::POISON | features::THREAD_ID)?;
        Pager::start(device, config, spaces::Spaces::own(uffd), "/proc/self".to_string())
    }

    /// A pager for other processes' memory (the daemon's, `docs/daemon.md`), serving
    /// none yet (`add_tenant`). Refused: what cannot be done from another process
    /// (parking, asynchronous write protection, self-paging). Co-location is off: it
    /// pins one process's hot thread, and here there are many (`serve_tenant` pins the
    /// one it serves).
    pub fn serve(device: Arc<dyn ZonedDevice>, mut config: PagerConfig) -> Result<Pager, PagerError> {
        config.colocate = false;
        Pager::serving(device, config, "/proc/self".to_string())
    }

    /// A pager for one other process's arena: `serve` and `add_tenant`, with its hot
    /// thread pinned with this process's fault handlers (`colocate_tick`).
    pub fn serve_tenant(
        device: Arc<dyn ZonedDevice>,
        config: PagerConfig,
        link: TenantLink,
    ) -> Result<(Pager, TenantId), PagerError> {
        let pager = Pager::serving(device, config, format!("/proc/{}", link.pid))?;
        let id = pager.add_tenant(link)?;
        Ok((pager, id))
    }

    fn serving(device: Arc<dyn ZonedDevice>, config: PagerConfig, process: String) -> Result<Pager, PagerError> {
        let refused = if config.fault_mode == FaultMode::SelfPaging {
            Some("its faults are served by handler threads here, not by its own SIGBUS handler")
        } else if config.park_pages > 0 || config.misreport_moves_every > 0 {
            Some("parking moves pages inside the process (UFFDIO_MOVE), which another process may not")
        } else if config.wp_async {
            Some("asynchronous write protection is not served across processes yet")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(PagerError::Tenant(why));
        }
        let spaces = spaces::Spaces::served()
            .map_err(|source| PagerError::Uffd(UffdError::Ioctl { op: "epoll_create1", source }))?;
        Pager::start(device, config, spaces, process)
    }

    /// Serves another process's arena (its userfaultfd, `/proc/self/mem` and agent in
    /// `link`): its faults are served through the descriptor, its victims read through
    /// the mem file, and its agent drops what was written out (`tenant.rs`). Charged to
    /// the engine's tenant `link.tenant` (swap-zones under the tenant policy, GC).
    pub fn add_tenant(&self, link: TenantLink) -> Result<TenantId, PagerError> {
        self.add_served(link, None)
    }

    /// `add_tenant` for a fork's child of a served process, paged from the fork on: its
    /// mapped pages (read from its page map) are its own copies, counted resident and
    /// evicted as any; its pages that were on the device at the fork are read from the
    /// parent's slots in `snapshot` when it faults on them. Call `remove_tenant` before
    /// the snapshot is let go.
    pub fn add_forked_tenant(&self, link: TenantLink, snapshot: &ForkSnapshot) -> Result<TenantId, PagerError> {
        if snapshot.arena() != (link.arena.start(), link.arena.len()) {
            return Err(PagerError::Tenant("a fork's child handed over an arena other than its parent's"));
        }
        let present = crate::pagemap::present_pages(link.pid, link.arena.start(), link.arena.end())
            .map_err(|error| PagerError::Io { what: "reading a fork's child's page map", source: error })?;
        self.add_served(link, Some(Inheritance { present: &present, snapshot }))
    }

    fn add_served(&self, link: TenantLink, inherit: Option<Inheritance<'_>>) -> Result<TenantId, PagerError> {
        let spaces::Spaces::Served(served) = &self.shared.spaces else {
            return Err(PagerError::Tenant("this pager serves its own process (Pager::serve serves others)"));
        };
        if link.uffd.features() & features::PAGEFAULT_FLAG_WP == 0 {
            return Err(PagerError::Tenant(
                "its userfaultfd was opened without write-protect faults (UFFD_FEATURE_PAGEFAULT_FLAG_WP)",
            ));
        }
        let TenantLink { uffd, mem, channel, arena, tenant, pid } = link;
        let pages = arena.len() / PAGE_BYTES as u64;
        let (window, id) = served.reserve(arena.len());
        let starting = inherit.is_some();
        if starting {
            // Before its pages can be in a discard batch.
            self.shared.agents_starting.fetch_add(1, Relaxed);
        }
        let added = match inherit {
            None => self.shared.lock().region_add(window, pages, tenant, None),
            Some(Inheritance { present, snapshot }) => {
                let now = self.shared.now();
                let (poisoned, inherited) = (snapshot.poisoned(), snapshot.pages());
                self.shared.lock().region_add_inherited(window, pages, tenant, present, poisoned, inherited, now)
            }
        };
        let owner = match added {
            Ok(owner) => owner,
            Err(error) => {
                if starting {
                    self.shared.agents_starting.fetch_sub(1, Relaxed);
                }
                return Err(error.into());
            }
        };
        let space = spaces::served_space(
            uffd,
            window,
            (arena.start(), arena.len()),
            crate::tenant::TenantSpace::new(mem, channel, pid, starting),
            owner,
            id,
            tenant,
        );
        if let Err(error) = served.add(space) {
            if starting {
                self.shared.agents_starting.fetch_sub(1, Relaxed);
            }
            let now = self.shared.now();
            self.shared.lock().region_remove(owner, now);
            return Err(PagerError::Uffd(UffdError::Ioctl { op: "epoll_ctl", source: error }));
        }
        Ok(id)
    }

    /// Lets served process `id` go (`add_tenant`): its slots freed, its pages no
    /// longer counted, its faults no longer watched. For a process that has gone (the
    /// daemon learns it from its connection or its pidfd), or that leaves; a second call
    /// does nothing.
    pub fn remove_tenant(&self, id: TenantId) {
        self.shared.remove_space(id);
    }

    fn start(
        device: Arc<dyn ZonedDevice>,
        config: PagerConfig,
        spaces: spaces::Spaces,
        process: String,
    ) -> Result<Pager, PagerError> {
        let geometry = *device.geometry();
        let footer_mode = footer_mode(&geometry);
        let core = PagerCore::new(engine_geometry(&geometry), footer_mode, config.core_config())?;
        let readahead_cache_pages = core.readahead_cache_pages() as usize;
        let sealer = if config.encrypt { Some(znswap_seal::Sealer::new()?) } else { None };
        let in_process = spaces.is_own();
        let shared = Arc::new(Shared {
            spaces,
            tenant_gone: AtomicBool::new(false),
            agents_starting: AtomicU32::new(0),
            sealer,
            digest_key: config.wp_async.then(digest_key),
            misreport_moves_every: config.misreport_moves_every as u64,
            moves_done: AtomicU64::new(0),
            gc_buffers: PageBuffers::new(core.engine().gc_buffer_pages() as usize),
            lbas_per_page: (PAGE_BYTES / geometry.lba_bytes as usize) as u64,
            metadata_bytes: geometry.metadata_bytes as usize,
            footer_mode,
            self_paging: matches!(config.fault_mode, FaultMode::SelfPaging),
            self_pidfd: if in_process { self_pidfd_for_discard() } else { None },
            mappings: RwLock::new(()),
            fault_discard: Mutex::new(Some(core.discard_batch())),
            readahead_cache: PageBuffers::new(readahead_cache_pages),
            device,
            state: Mutex::new(core),
            evict_wanted: Condvar::new(),
            io_wanted: Condvar::new(),
            space_freed: Condvar::new(),
            stop: AtomicBool::new(false),
            fault_poll: FaultPoll::new(config.fault_poll_us),
            aside: aside::Aside::new()
                .map_err(|source| PagerError::Io { what: "an event descriptor for faults set aside", source })?,
            device_error_shown: AtomicBool::new(false),
            device_gate: RwLock::new(()),
            forks: Mutex::new(program::Forks::default()),
            colocation: colocate::Colocation::new(config.colocate, process),
            pager_tids: Default::default(),
            started: Instant::now(),
            counters: Counters {
                tenant_faults: (0..config.tenants.max(1)).map(|_| Default::default()).collect(),
                ..Counters::default()
            },
        });
        if let spaces::Spaces::Served(served) = &shared.spaces {
            served.waiter.add_fd(shared.aside.ready_fd()).map_err(|source| PagerError::Io {
                what: "watching the event descriptor of faults set aside",
                source,
            })?;
        }
        let (handlers, registration) = match config.fault_mode {
            FaultMode::HandlerThreads(count) => (count.max(1), None),
            FaultMode::SelfPaging => (0, Some(self_paging::register(&shared)?)),
        };
        let roles: [ThreadRole; 3] = [
            ("fault", FAULT_HANDLER_ROLE, Shared::handle_faults, handlers),
            ("evict", "evictor", Shared::evict_loop, config.evictor_threads.max(1)),
            ("io", "I/O thread", Shared::io_loop, config.io_threads.max(1)),
        ];
        let mut threads = Vec::new();
        let thread_start = config.thread_start;
        for (name, role, body, count) in roles {
            for index in 0..count {
                let name = format!("znswap-{name}-{index}");
                threads.push(spawn_thread(&shared, name, role, thread_start, body).expect("spawn"));
            }
        }
        Ok(Pager {
            shared,
            threads,
            registration,
            thread_start,
            child_orphaned: config.child_orphaned,
            io_threads: config.io_threads.max(1),
        })
    }

    /// A new region of `bytes` (rounded up to pages), zero-filled on first touch.
    pub fn alloc(&self, bytes: u64, tenant: u32) -> Result<Region, PagerError> {
        let Some(own) = self.shared.spaces.own_space() else {
            return Err(PagerError::Tenant("a pager serving other processes maps no memory of its own"));
        };
        let pages = bytes.div_ceil(PAGE_BYTES as u64).max(1);
        let len = (pages * PAGE_BYTES as u64) as usize;
        let base =
            map_anonymous(len).map_err(|source| PagerError::Map { bytes: len as u64, source })?.cast::<libc::c_void>();
        // The shadow only reserves addresses: pages land there by moves, not faults, and
        // it is registered only because a move's destination must be.
        let parks = self.shared.lock().config().park_pages > 0;
        let shadow = if parks {
            match map_anonymous(len) {
                Ok(shadow) => Some(shadow.cast::<libc::c_void>()),
                Err(source) => {
                    // SAFETY: unmapping the mapping made above, on an error path.
                    unsafe { libc::munmap(base, len) };
                    return Err(PagerError::Map { bytes: len as u64, source });
                }
            }
        } else {
            None
        };
        let unmap = || {
            // SAFETY: unmapping the mappings made above, on an error path.
            unsafe { libc::munmap(base, len) };
            if let Some(shadow) = shadow {
                // SAFETY: as above.
                unsafe { libc::munmap(shadow, len) };
            }
        };
        let mut registered = own.uffd.register(base as u64, len as u64, register_mode::MISSING | register_mode::WP);
        if let (Ok(()), Some(shadow)) = (&registered, shadow) {
            registered = own.uffd.register(shadow as u64, len as u64, register_mode::MISSING);
        }
        if let Err(error) = registered {
            unmap();
            return Err(error.into());
        }
        let added = self.shared.lock().region_add(base as u64, pages, tenant, shadow.map(|shadow| shadow as u64));
        match added {
            Ok(owner) => Ok(Region {
                shared: self.shared.clone(),
                owner,
                base: base.cast(),
                len,
                shadow: shadow.map(|shadow| shadow.cast()),
            }),
            Err(error) => {
                let _ = own.uffd.unregister(base as u64, len as u64);
                if let Some(shadow) = shadow {
                    let _ = own.uffd.unregister(shadow as u64, len as u64);
                }
                unmap();
                Err(error.into())
            }
        }
    }

    /// Lets every served process go (`remove_tenant`), as before the pager stops.
    pub fn release_tenants(&self) {
        for space in self.shared.spaces.served_now().iter() {
            self.shared.remove_space(space.id);
        }
    }

    /// Pins the program thread that takes nearly all the faults with the fault
    /// handlers, or releases it (`PagerConfig::colocate`); the caller ticks it every 100
    /// ms or so.
    pub fn colocate_tick(&self) {
        self.shared.colocation.tick();
    }

    /// The calling thread is about to start another program (`execve`, `posix_spawn`,
    /// `system`): it must not pass the co-location pin on (`PagerConfig::colocate`).
    pub fn before_spawn(&self) {
        self.shared.colocation.before_spawn();
    }

    pub fn stats(&self) -> PagerStats {
        self.shared.stats()
    }

    /// Changes the resident budget while the pager runs (rounded down to pages; at
    /// least two eviction batches): a smaller one is met by eviction.
    pub fn set_budget(&self, bytes: u64) -> Result<(), PagerError> {
        Ok(self.shared.lock().set_budget(bytes / PAGE_BYTES as u64)?)
    }

    /// Holds the engine tenant `tenant`'s pages (the regions and served processes charged
    /// to it) to `bytes` of their own within the budget (`None`: only the budget): the
    /// daemon holds each program to the memory it granted.
    pub fn set_tenant_budget(&self, tenant: u32, bytes: Option<u64>) -> Result<(), PagerError> {
        Ok(self.shared.lock().set_tenant_budget(tenant, bytes.map(|bytes| bytes / PAGE_BYTES as u64))?)
    }

    /// Limits what the engine tenant `tenant` writes to the device, its swap-outs and
    /// the GC's moves of its pages together, to `bytes_per_s` (`None`: no limit): the
    /// daemon's share of the device per tenant (the paper's §4.3).
    pub fn set_tenant_write_limit(&self, tenant: u32, bytes_per_s: Option<u64>) -> Result<(), PagerError> {
        let now = self.shared.now();
        Ok(self.shared.lock().set_tenant_write_limit(tenant, bytes_per_s, now)?)
    }

    /// Holds the engine tenant `tenant`'s pages on the device (written out, or kept as
    /// their swap cache) to `bytes` (`None`: no limit): at it, its pages stay in memory
    /// past its budget (`PagerCore::set_tenant_swap_limit`).
    pub fn set_tenant_swap_limit(&self, tenant: u32, bytes: Option<u64>) -> Result<(), PagerError> {
        Ok(self.shared.lock().set_tenant_swap_limit(tenant, bytes.map(|bytes| bytes / PAGE_BYTES as u64))?)
    }

    /// What the engine tenant `tenant` holds and has done (`znswap status`).
    pub fn tenant_figures(&self, tenant: u32) -> znswap_pager_core::TenantFigures {
        let now = self.shared.now();
        self.shared.lock().tenant_figures(tenant, now)
    }

    /// The resident budget now, in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.shared.lock().config().budget_pages * PAGE_BYTES as u64
    }

    /// The pager's own page buffers, in bytes (the GC's move buffer, each I/O thread's
    /// scratch, the read-ahead cache): mapped untouched, they become resident as the
    /// pager first uses them, so a shell holding the process's memory to a limit keeps
    /// room for them from the start.
    pub fn buffers_bytes(&self) -> u64 {
        let state = self.shared.lock();
        let pages = state.engine().gc_buffer_pages() as u64
            + self.io_threads as u64 * state.append_pages_max() as u64
            + state.readahead_cache_pages() as u64;
        pages * PAGE_BYTES as u64
    }

    /// The smallest budget `set_budget` takes, in bytes.
    pub fn budget_bytes_min(&self) -> u64 {
        self.shared.lock().budget_pages_min() * PAGE_BYTES as u64
    }

    /// Gives up `len` bytes of `region` from `offset`: they become plain anonymous
    /// memory, never swapped (a page-aligned range the pager has never mapped). For
    /// memory that whoever serves faults must itself read: `znswap run`'s allocator
    /// keeps its arena's bookkeeping there, which allocations by the pager's own threads
    /// read too.
    pub fn unpage(&self, region: &Region, offset: usize, len: usize) -> Result<(), PagerError> {
        assert!(offset % PAGE_BYTES == 0 && len % PAGE_BYTES == 0 && offset + len <= region.len);
        let state = self.shared.lock();
        let first = (offset / PAGE_BYTES) as u64;
        for page in first..first + (len / PAGE_BYTES) as u64 {
            let page_state = state.page_state(region.owner, page);
            assert_eq!(page_state, Some(znswap_pager_core::PageState::Unmapped), "unpaging a page the pager mapped");
        }
        // Under the lock, so no fault maps one of them meanwhile; after this, faults on
        // them are the kernel's (zero pages), not ours.
        let own = self.shared.spaces.own_space().expect("a region is of the pager's own process");
        own.uffd.unregister(region.base as u64 + offset as u64, len as u64)?;
        Ok(())
    }

    /// Fault latency seen by handler threads (from reading the event to waking the
    /// faulting thread), at quantile `q`, in nanoseconds; and how many were recorded.
    pub fn fault_latency(&self, q: f64) -> (u64, u64) {
        let histogram = &self.shared.counters.faults.latency;
        (histogram.quantile(q), histogram.count())
    }

    /// The fault latency of the engine tenant `tenant`'s served processes, at quantile
    /// `q`, in nanoseconds; and how many were recorded (since `tenant_begins`).
    pub fn tenant_fault_latency(&self, tenant: u32, q: f64) -> (u64, u64) {
        match self.shared.counters.tenant_faults.get(tenant as usize) {
            Some(faults) => (faults.latency.quantile(q), faults.latency.count()),
            None => (0, 0),
        }
    }

    /// Where the engine tenant `tenant`'s faults spent their time (since `tenant_begins`).
    pub fn tenant_fault_times(&self, tenant: u32) -> FaultTimeTotals {
        self.shared.counters.tenant_faults.get(tenant as usize).map(FaultRecord::totals).unwrap_or_default()
    }

    /// A new tenant takes the engine tenant `tenant`: what was learnt of the former (its
    /// faults' latencies, how its swap cache paid) is forgotten.
    pub fn tenant_begins(&self, tenant: u32) {
        if let Some(faults) = self.shared.counters.tenant_faults.get(tenant as usize) {
            faults.reset();
        }
        self.shared.lock().tenant_begins(tenant);
    }

    /// Host memory the engine uses per 4 KiB of swap capacity.
    pub fn host_bytes_per_slot(&self) -> f64 {
        self.shared.lock().engine().host_memory().bytes_per_slot
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

/// CPU time of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (its exited threads' included), in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

const FAULT_HANDLER_ROLE: &str = "fault handler";

/// Pager threads whose faults are told apart (`Shared::pager_tids`); more go unmarked.
const PAGER_TIDS_MAX: usize = 16;

impl Shared {
    /// Notes the calling thread as one of the pager's.
    fn note_pager_thread(&self) {
        // SAFETY: no arguments.
        let tid = unsafe { libc::gettid() } as u32;
        for entry in &self.pager_tids {
            if entry.compare_exchange(0, tid, Relaxed, Relaxed).is_ok() {
                return;
            }
        }
    }

    /// Whether thread `tid` (0: the kernel did not say) is one of the pager's.
    fn is_pager_thread(&self, tid: u32) -> bool {
        // Another process's faults never come from the pager's threads (and its thread
        // ids may be from another pid namespace).
        self.spaces.is_own() && tid != 0 && self.pager_tids.iter().any(|entry| entry.load(Relaxed) == tid)
    }

    /// A forked child runs none of the parent's threads (and its own ids may come back).
    fn forget_pager_threads(&self) {
        for entry in &self.pager_tids {
            entry.store(0, Relaxed);
        }
    }
}

/// Starts a pager thread: marked first (`PagerConfig::thread_start`), and a panic in it
/// stops the process.
fn spawn_thread(
    shared: &Arc<Shared>,
    name: String,
    role: &'static str,
    thread_start: Option<fn()>,
    body: fn(&Shared),
) -> std::io::Result<PagerThread> {
    let shared = shared.clone();
    PagerThread::spawn(&name, role, thread_start, move || {
        shared.colocation.register(role == FAULT_HANDLER_ROLE);
        shared.note_pager_thread();
        body(&shared)
    })
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.release_tenants();
        self.registration.take();
        self.shared.lock().shut_down();
        self.shared.stop.store(true, Relaxed);
        self.shared.evict_wanted.notify_all();
        self.shared.io_wanted.notify_all();
        self.shared.space_freed.notify_all();
        for thread in self.threads.drain(..) {
            thread.join();
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
        // Pages of regions are read and discarded outside the state lock under
        // `mappings`: no unmapping while anyone does.
        let _mappings = self.shared.mappings.write().unwrap_or_else(|p| p.into_inner());
        let mut state = self.shared.lock();
        let now = self.shared.now();
        state.region_remove(self.owner, now);
        let own = self.shared.spaces.own_space().expect("a region is of the pager's own process");
        let _ = own.uffd.unregister(self.base as u64, self.len as u64);
        // SAFETY: our own mapping; nothing refers to it once the region is gone.
        unsafe { libc::munmap(self.base.cast(), self.len) };
        if let Some(shadow) = self.shadow {
            let _ = own.uffd.unregister(shadow as u64, self.len as u64);
            // SAFETY: as above: its parked pages went with the region.
            unsafe { libc::munmap(shadow.cast(), self.len) };
        }
    }
}

thread_local! {
    /// Whether this thread holds the state lock: region memory must not be touched then
    /// (self-paging's soundness, crate docs), checked where the pager reads region
    /// memory and in the SIGBUS handler.
    static HOLDS_STATE_LOCK: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread holds the pager's state lock.
pub(crate) fn holds_state_lock() -> bool {
    HOLDS_STATE_LOCK.with(Cell::get)
}

/// The state lock held: the core, and on release the wake-ups it owes.
pub(crate) struct StateGuard<'a> {
    shared: &'a Shared,
    guard: Option<MutexGuard<'a, PagerCore>>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = PagerCore;
    fn deref(&self) -> &PagerCore {
        self.guard.as_ref().expect("held")
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut PagerCore {
        self.guard.as_mut().expect("held")
    }
}

impl<'a> StateGuard<'a> {
    fn new(shared: &'a Shared, guard: MutexGuard<'a, PagerCore>) -> StateGuard<'a> {
        HOLDS_STATE_LOCK.with(|held| held.set(true));
        StateGuard { shared, guard: Some(guard) }
    }

    /// Releases the lock to wait on `condvar` (for at most `timeout`), then takes it again.
    fn wait_timeout(mut self, condvar: &Condvar, timeout: Duration) -> StateGuard<'a> {
        let shared = self.shared;
        let mut guard = self.guard.take().expect("held");
        let wakeups = guard.take_wakeups();
        if wakeups.false_drops {
            // (Said and marked under the lock: rare, and nothing here waits on it.)
            shared.let_go_false_drops(guard.take_false_drops());
        }
        HOLDS_STATE_LOCK.with(|held| held.set(false));
        shared.notify(wakeups);
        let guard = condvar.wait_timeout(guard, timeout).unwrap_or_else(|p| p.into_inner()).0;
        StateGuard::new(shared, guard)
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else { return };
        let wakeups = guard.take_wakeups();
        let notice = guard.take_notice();
        let false_drops = if wakeups.false_drops { guard.take_false_drops() } else { Vec::new() };
        drop(guard);
        if !false_drops.is_empty() {
            self.shared.let_go_false_drops(false_drops);
        }
        HOLDS_STATE_LOCK.with(|held| held.set(false));
        self.shared.notify(wakeups);
        if let Some(notice) = notice {
            eprintln!("znswap: warning: {notice}");
        }
    }
}

impl Shared {
    fn lock(&self) -> StateGuard<'_> {
        StateGuard::new(self, self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The lock, for a fault, and how long it waited for it in nanoseconds. A fault
    /// spins for the lock a little before it sleeps: holds are a few microseconds, while
    /// a futex sleep and wake-up costs more than that on a virtual machine, whose idle
    /// vCPUs halt and take an exit to wake.
    fn lock_for_fault(&self) -> (StateGuard<'_>, u64) {
        const SPIN_NS: u128 = 20_000;
        match self.state.try_lock() {
            Ok(state) => return (StateGuard::new(self, state), 0),
            Err(TryLockError::Poisoned(poisoned)) => return (StateGuard::new(self, poisoned.into_inner()), 0),
            Err(TryLockError::WouldBlock) => {}
        }
        let waiting = Instant::now();
        let mut spins = 0u32;
        let state = loop {
            match self.state.try_lock() {
                Ok(state) => break StateGuard::new(self, state),
                Err(TryLockError::Poisoned(poisoned)) => break StateGuard::new(self, poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
            spins += 1;
            if spins % 64 == 0 && waiting.elapsed().as_nanos() > SPIN_NS {
                break self.lock();
            }
            std::hint::spin_loop();
        };
        (state, waiting.elapsed().as_nanos() as u64)
    }

    fn notify(&self, wakeups: znswap_pager_core::Wakeups) {
        if wakeups.evictors {
            self.evict_wanted.notify_all();
        }
        if wakeups.io {
            self.io_wanted.notify_one();
        }
        if wakeups.room {
            self.space_freed.notify_all();
            self.aside.room_came();
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Carries out the core's actions, under the lock that produced them. `buffer`: the
    /// fault's page, for `CopyFrom::FaultPage`. The threads waiting on the pages these
    /// actions map are not woken here but noted in `wakes`, to be woken once the lock is
    /// released: a wake-up sends an inter-processor interrupt, a VM exit here, which
    /// would otherwise lengthen the lock's hold.
    fn run(&self, actions: &mut Actions, buffer: &[u8], wakes: &mut Wakes) {
        for action in actions.drain() {
            match action {
                Action::Copy { address, pages, from, write_protect } => {
                    let bytes = pages as usize * PAGE_BYTES;
                    let source = match from {
                        CopyFrom::FaultPage => &buffer[..bytes],
                        // SAFETY: under the state lock, and the core names a page no read
                        // has claimed (a hit's entry, or the completing read's own page).
                        CopyFrom::Cache { page } => unsafe { &self.readahead_cache.page(page as u64)[..] },
                        CopyFrom::Zeros => &ZERO_PAGES[..bytes],
                        // SAFETY: a parked page's shadow page, mapped until its discard,
                        // which the core orders after this (and never on this path).
                        CopyFrom::Shadow { address } => unsafe {
                            std::slice::from_raw_parts(address as *const u8, bytes)
                        },
                    };
                    let Some((space, target)) = self.spaces.at(address) else { continue };
                    let mapped = match space.uffd.copy_pages(target, source, write_protect, false) {
                        Err(error) if self.served_process_gone(&space, &error) => continue,
                        result => result.expect("installing pages"),
                    };
                    // Only the pager maps region pages, and only under this lock.
                    assert_eq!(mapped, bytes as u64, "pages at {address:#x} were mapped behind the pager's back");
                    wakes.add(self, address, bytes as u64);
                }
                // (Only for forks of this process: never emitted for a served one.)
                Action::Unshare { address } => {
                    // SAFETY: a page of a live region, mapped (the core says so under this
                    // lock, which the program's discards take too): the kernel takes a
                    // write fault for us without changing a byte.
                    let rc =
                        unsafe { libc::madvise(address as *mut libc::c_void, PAGE_BYTES, libc::MADV_POPULATE_WRITE) };
                    // (Kernels before 5.14 refuse it: the page then stays until written.)
                    if rc == 0 {
                        self.counters.pages_unshared.fetch_add(1, Relaxed);
                    }
                }
                Action::ZeroPage { address } => {
                    let Some((space, target)) = self.spaces.at(address) else { continue };
                    let mapped = match space.uffd.zeropage(target, PAGE_BYTES as u64, false) {
                        Err(error) if self.served_process_gone(&space, &error) => continue,
                        result => result.expect("zero-filling a page"),
                    } || self.clear_wp_marker(&space, target)
                        && space.uffd.zeropage(target, PAGE_BYTES as u64, false).expect("zero-filling a page");
                    assert!(mapped, "the page at {address:#x} was mapped behind the pager's back");
                    wakes.add(self, address, PAGE_BYTES as u64);
                }
                Action::Unprotect { address, pages } => {
                    let bytes = pages * PAGE_BYTES as u64;
                    let Some((space, target)) = self.spaces.at(address) else { continue };
                    match space.uffd.write_protect(target, bytes, false, false) {
                        Err(error) if self.served_process_gone(&space, &error) => continue,
                        result => result.expect("lifting write protection"),
                    }
                    wakes.add(self, address, bytes);
                }
                Action::Poison { address } => {
                    let Some((space, target)) = self.spaces.at(address) else { continue };
                    if space.uffd.features() & features::POISON == 0 {
                        eprintln!("znswap: the device lost the only copy of the page at {target:#x}; this kernel cannot poison it, so the process stops");
                        std::process::abort();
                    }
                    if let Err(error) = space.uffd.poison(target, PAGE_BYTES as u64) {
                        if self.served_process_gone(&space, &error) {
                            continue;
                        }
                        assert!(
                            error.errno() == Some(libc::EEXIST) && self.clear_wp_marker(&space, target),
                            "poisoning the lost page at {target:#x}: {error}"
                        );
                        space.uffd.poison(target, PAGE_BYTES as u64).expect("poisoning a lost page");
                    }
                }
                Action::Wake { address } => wakes.add(self, address, PAGE_BYTES as u64),
                Action::Unpark { address, shadow } => {
                    self.unpark(address, shadow);
                    wakes.add(self, address, PAGE_BYTES as u64);
                }
            }
        }
    }

    /// Moves a parked page back from its shadow page (its faulting threads are woken by
    /// the caller). A page shared with a fork's child since it was parked cannot move
    /// (`EBUSY`): it is copied, and the shadow page discarded. An empty shadow page
    /// means the parked page's data is gone: a broken invariant, never answered with an
    /// empty page (its toucher would fault again forever).
    fn unpark(&self, address: u64, shadow: u64) {
        let page = PAGE_BYTES as u64;
        let mut retried = false;
        loop {
            let Err(failure) = self.move_page(address, shadow) else { return };
            // Under the state lock nothing else maps either page: where the page is now
            // says what the move did (this kernel can move a page and fail the call).
            match unpark_next(failure, crate::pagemap::page_at(address), crate::pagemap::page_at(shadow), retried) {
                UnparkNext::Done => {
                    self.counters.moves_misreported.fetch_add(1, Relaxed);
                    return;
                }
                UnparkNext::ClearMarker if self.clear_wp_marker(self.own_space(), address) => retried = true,
                UnparkNext::ClearMarker | UnparkNext::Copy => break,
                UnparkNext::Gone => panic!(
                    "the parked page at {address:#x} is gone: neither it nor its shadow page {shadow:#x} holds a \
                     page after a failed move back ({failure:?}; a pager bug)"
                ),
            }
        }
        // SAFETY: the shadow page is the parked page's, mapped (the core said so, and the
        // page map agreed just now) and ours; only the pager reads or discards it, under
        // this lock.
        let source = unsafe { std::slice::from_raw_parts(shadow as *const u8, PAGE_BYTES) };
        let mapped =
            self.own_space().uffd.copy_pages(address, source, false, false).expect("copying a parked page back");
        assert_eq!(mapped, page, "the page at {address:#x} was mapped behind the pager's back");
        self.counters.unparks_copied.fetch_add(1, Relaxed);
        // SAFETY: as above; its content is the page's, now mapped at `address`.
        let rc = unsafe { libc::madvise(shadow as *mut libc::c_void, PAGE_BYTES, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0, "MADV_DONTNEED of a shadow page: {}", std::io::Error::last_os_error());
    }

    /// `UFFDIO_MOVE` of one page, waking nobody; how it failed, if it did. With
    /// `PagerConfig::misreport_moves_every`, some moves done are reported failed, as
    /// Linux 6.18 now and then does (the rules that follow are tested so).
    pub(super) fn move_page(&self, destination: u64, source: u64) -> Result<(), MoveFailure> {
        let page = PAGE_BYTES as u64;
        match self.own_space().uffd.move_pages(destination, source, page, false) {
            Ok(moved) if moved == page => {
                let every = self.misreport_moves_every;
                if every > 0 && self.moves_done.fetch_add(1, Relaxed) % every == every - 1 {
                    return Err(MoveFailure::Exists);
                }
                Ok(())
            }
            Ok(_) => Err(MoveFailure::Other),
            Err(error) => Err(move_failure(&error)),
        }
    }

    /// An ioctl failed because the served process is gone (`ESRCH`: its address space
    /// has no users): the faults it raised went with it, and nothing is left to install.
    /// Never so for the pager's own process.
    pub(super) fn served_process_gone(&self, space: &spaces::Space, error: &UffdError) -> bool {
        let gone = space.is_gone(error);
        if gone {
            self.counters.served_process_gone.fetch_add(1, Relaxed);
            self.tenant_gone.store(true, Relaxed);
        }
        gone
    }

    /// `Pager::remove_tenant`: the served process's region goes from the core (its
    /// slots freed), and its descriptors with the last user of its space (closing its
    /// agent's connection: the process knows it is let go).
    pub(super) fn remove_space(&self, id: TenantId) {
        let spaces::Spaces::Served(served) = &self.spaces else { return };
        let Some(space) = served.remove(id) else { return };
        self.agent_heard(&space);
        let _mappings = self.mappings.write().unwrap_or_else(|p| p.into_inner());
        let mut state = self.lock();
        let now = self.now();
        state.region_remove(space.owner, now);
        drop(state);
        // Its arena stays registered: a process let go while it runs (a pager stopping,
        // a protocol broken) serves its own faults from then on through the same
        // registration (`serve_orphaned`), and its swapped-out pages must fault there
        // (SIGBUS), not read as the zero pages an unregistered arena would give.
    }

    /// Regions whose process said it dropped pages it kept (`PagerCore::take_false_drops`):
    /// a served process's agent lied, and the process is let go (its agent's connection
    /// ends with it, and it serves its own faults from then on) rather than have its
    /// threads and a handler spin on its pages. The pager drops its own process's pages
    /// itself, so there it is only said.
    fn let_go_false_drops(&self, owners: Vec<u32>) {
        for owner in owners {
            match self.spaces.with_owner(owner) {
                Some(space) => {
                    if !space.gone.swap(true, Relaxed) {
                        eprintln!(
                            "znswap: process {} kept pages its agent said it dropped (writes to them fault again \
                             and again): it is let go",
                            space.pid()
                        );
                    }
                    self.tenant_gone.store(true, Relaxed);
                }
                None => eprintln!("znswap: warning: pages of region {owner} were not dropped as the pager asked"),
            }
        }
    }

    /// The served processes an ioctl found gone are let go: by the evictor at rest.
    pub(super) fn remove_gone_spaces(&self) {
        for space in self.spaces.served_now().iter() {
            if space.gone.load(Relaxed) {
                self.remove_space(space.id);
            }
        }
    }

    /// With asynchronous write protection, protecting an entry with nothing mapped leaves
    /// a write-protect marker there (`WP_ASYNC` turns on `WP_UNPOPULATED`), and
    /// `UFFDIO_ZEROPAGE`, `UFFDIO_MOVE` and `UFFDIO_POISON` refuse to land on one
    /// (`EEXIST`; `UFFDIO_COPY` overwrites it). The evictor protects only mapped pages, but
    /// the program's discard may empty one between the pick and the protection. Lifting
    /// the protection of the entry drops the marker (and changes nothing for a mapped
    /// page, which an action landing here does not expect anyway). True if it could
    /// have been one.
    fn clear_wp_marker(&self, space: &spaces::Space, address: u64) -> bool {
        if self.digest_key.is_none() {
            return false;
        }
        self.counters.wp_markers_cleared.fetch_add(1, Relaxed);
        space.uffd.write_protect(address, PAGE_BYTES as u64, false, false).is_ok()
    }

    /// This process's own space, for what is done only there (parking, forks).
    fn own_space(&self) -> &spaces::Space {
        self.spaces.own_space().expect("done in the pager's own process only (never for a served one)")
    }

    /// Wakes the threads waiting on core addresses `start..start + len`. (A range nobody
    /// waits on any more wakes nobody: nothing to report.)
    fn wake(&self, start: u64, len: u64) {
        if let Some((space, target)) = self.spaces.at(start) {
            let _ = space.uffd.wake(target, len);
        }
    }

    /// Waits as the core asked, without the lock.
    fn pause(pause: Pause) {
        match pause {
            Pause::None => {}
            Pause::Yield => std::thread::yield_now(),
            Pause::Micros(micros) => std::thread::sleep(Duration::from_micros(micros as u64)),
        }
    }
}

/// A failed `UFFDIO_MOVE`'s kind, for the core's rules (`park_outcome`, `unpark_next`).
fn move_failure(error: &crate::uffd::UffdError) -> MoveFailure {
    match error.errno() {
        Some(libc::ENOENT) => MoveFailure::NoEntry,
        Some(libc::EEXIST) => MoveFailure::Exists,
        _ => MoveFailure::Other,
    }
}

/// Wake-ups owed to threads waiting on pages an actor mapped under the state lock, given
/// once it is released (`Shared::run`). Fixed room, no allocation: an action list that
/// maps more ranges than that wakes the oldest at once.
#[derive(Default)]
pub(crate) struct Wakes {
    ranges: [(u64, u64); WAKES_MAX],
    len: usize,
}

const WAKES_MAX: usize = 8;

impl Wakes {
    fn add(&mut self, shared: &Shared, start: u64, len: u64) {
        // Self-paging: a fault raises SIGBUS and nobody ever waits on the descriptor, so
        // a wake would be a system call for nothing.
        if shared.self_paging {
            return;
        }
        if self.len == WAKES_MAX {
            let (start, len) = self.ranges[0];
            shared.wake(start, len);
            self.ranges.copy_within(1.., 0);
            self.len -= 1;
        }
        self.ranges[self.len] = (start, len);
        self.len += 1;
    }

    /// Wakes every thread owed a wake-up.
    pub(crate) fn give(&mut self, shared: &Shared) {
        for &(start, len) in &self.ranges[..self.len] {
            shared.wake(start, len);
        }
        self.len = 0;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
