//! The live pager's shell: threads and system calls around the sans-I/O pager core
//! (`znswap-pager-core`), which makes every decision. Each thread takes the state lock,
//! asks the core what to do, carries out the actions it returns (userfaultfd ioctls)
//! before letting go of the lock, and does the slow work (device I/O, write-protecting
//! victims, discards) outside the lock on what the core handed out. The calling order,
//! the lock order and the rule self-paging rests on are in the core's crate docs; page
//! states and transitions are drawn in its README.
//!
//! The shared state (`pager/shared.rs`) is made of parts that each own their state: the
//! device side (`storage.rs`), whose memory is served (`spaces.rs`), the installs of the
//! core's actions (`install.rs`), the fault side (`faults.rs`, `poll.rs`, `aside.rs`), the
//! wakers (`wakers.rs`), forks (`forks.rs`, `program.rs`), co-location (`colocate.rs`).
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

use std::sync::Arc;

use znswap_pager_core::{CoreError, PageState, PagerCore, TenantFigures, PAGE_BYTES};
use znswap_zoned::{Geometry, ZonedDevice};

use crate::config::{FaultMode, PagerConfig};
use crate::pager_thread::PagerThread;
use crate::self_paging::{self, Registration, SelfPagingError};
use crate::sys::{map_anonymous, random_key};
use crate::tenant::TenantLink;
use crate::uffd::{features, register_mode, UffdError, Userfaultfd};

mod aside;
mod colocate;
mod discard;
mod evict;
pub(crate) mod fault;
mod faults;
mod forks;
mod install;
mod io;
pub(crate) mod lock_flag;
mod poll;
mod program;
pub(crate) mod shared;
mod shell;
mod spaces;
mod stats;
mod storage;
mod wakers;

use colocate::Colocation;
use faults::Faults;
use install::Installer;
use program::ForkHooks;
pub use program::ForkSnapshot;
use shared::{spawn_thread, Parts, Shared, ThreadRole, FAULT_HANDLER_ROLE};
use spaces::Spaces;
pub use spaces::TenantId;
pub use stats::{FaultTimeTotals, FaultTimes, PagerStats};
use storage::{engine_geometry, footer_mode, Storage};

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
    /// The compressed pool cannot be had with this configuration (the message says why).
    #[error("the compressed pool: {0}")]
    CompressedPool(String),
}

/// What a fork's child served from its fork on starts with (`Pager::add_forked_tenant`):
/// the pages mapped in it (indexes), and its parent's snapshot.
struct Inheritance<'a> {
    present: &'a [u64],
    snapshot: &'a ForkSnapshot,
}

/// The pager; dropping it stops its threads (regions must be dropped first).
pub struct Pager {
    shared: Arc<Shared>,
    threads: Vec<PagerThread>,
    registration: Option<Registration>,
    hooks: ForkHooks,
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

impl Pager {
    /// Checks that a pager could start with `config` on a device of `geometry` (the
    /// budget, the read-ahead, enough zones), starting nothing: for a launcher that
    /// wants to refuse before it runs a program.
    pub fn check(geometry: &Geometry, config: &PagerConfig) -> Result<(), PagerError> {
        PagerCore::check(engine_geometry(geometry), footer_mode(geometry), &config.core)?;
        check_compressed_pool(config)
    }

    pub fn new(device: Arc<dyn ZonedDevice>, config: PagerConfig) -> Result<Pager, PagerError> {
        let mut required = match config.fault_mode {
            FaultMode::HandlerThreads(_) => features::PAGEFAULT_FLAG_WP,
            FaultMode::SelfPaging => features::PAGEFAULT_FLAG_WP | features::SIGBUS,
        };
        if config.core.park_pages > 0 {
            required |= features::MOVE;
        }
        if config.core.wp_async {
            if config.fault_mode == FaultMode::SelfPaging {
                return Err(PagerError::WpAsyncSelfPaging);
            }
            required |= features::WP_ASYNC;
            crate::pagemap::WrittenScan::open().map_err(PagerError::PagemapScan)?;
        }
        // Thread ids name the faulting thread for co-location (`colocate.rs`).
        let uffd = Userfaultfd::new(required, features::POISON | features::THREAD_ID)?;
        Pager::start(device, config, Spaces::own(uffd))
    }

    /// A pager for other processes' memory (the daemon's, `docs/daemon.md`), serving
    /// none yet (`add_tenant`). Refused: what cannot be done from another process
    /// (parking, asynchronous write protection, self-paging). Co-location, if the
    /// configuration asks for it, pins whichever served thread takes nearly all the
    /// faults with this process's handlers (`PagerConfig::for_daemon` leaves it off: a
    /// daemon serves many programs; a launcher serving one program's tree turns it on).
    pub fn serve(device: Arc<dyn ZonedDevice>, config: PagerConfig) -> Result<Pager, PagerError> {
        Pager::serving(device, config)
    }

    /// A pager for one other process's arena: `serve` and `add_tenant`, with its hot
    /// thread pinned with this process's fault handlers (`tick`).
    pub fn serve_tenant(
        device: Arc<dyn ZonedDevice>,
        config: PagerConfig,
        link: TenantLink,
    ) -> Result<(Pager, TenantId), PagerError> {
        let pager = Pager::serving(device, config)?;
        let id = pager.add_tenant(link)?;
        Ok((pager, id))
    }

    fn serving(device: Arc<dyn ZonedDevice>, config: PagerConfig) -> Result<Pager, PagerError> {
        let refused = if config.fault_mode == FaultMode::SelfPaging {
            Some("its faults are served by handler threads here, not by its own SIGBUS handler")
        } else if config.core.park_pages > 0 || config.misreport_moves_every > 0 {
            Some("parking moves pages inside the process (UFFDIO_MOVE), which another process may not")
        } else if config.core.wp_async {
            Some("asynchronous write protection is not served across processes yet")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(PagerError::Tenant(why));
        }
        let spaces =
            Spaces::served().map_err(|source| PagerError::Uffd(UffdError::Ioctl { op: "epoll_create1", source }))?;
        Pager::start(device, config, spaces)
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
        let Some(served) = self.shared.spaces.served_list() else {
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
            self.shared.spaces.agent_starts();
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
                    self.shared.spaces.agent_never_started();
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
                self.shared.spaces.agent_never_started();
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

    fn start(device: Arc<dyn ZonedDevice>, config: PagerConfig, spaces: Spaces) -> Result<Pager, PagerError> {
        check_compressed_pool(&config)?;
        let geometry = *device.geometry();
        let core = PagerCore::new(engine_geometry(&geometry), footer_mode(&geometry), config.core.clone())?;
        let sealer = if config.core.encrypt { Some(znswap_seal::Sealer::new()?) } else { None };
        let storage =
            Storage::new(device, sealer, core.engine().gc_buffer_pages() as usize, config.compressed_pool_bytes);
        let self_paging = matches!(config.fault_mode, FaultMode::SelfPaging);
        let install = Installer::new(
            core.readahead_cache_pages() as usize,
            self_paging,
            config.core.wp_async,
            config.misreport_moves_every,
        );
        let faults = Faults::new(config.fault_poll_us, core.discard_batch(), config.core.tenants)
            .map_err(|source| PagerError::Io { what: "an event descriptor for faults set aside", source })?;
        let colocation = Colocation::new(config.colocate);
        let digest_key = config.core.wp_async.then(random_key);
        let shared = Arc::new(Shared::new(Parts { core, storage, spaces, install, faults, colocation, digest_key }));
        if let Some(served) = shared.spaces.served_list() {
            served.waiter.add_fd(shared.faults.aside.ready_fd()).map_err(|source| PagerError::Io {
                what: "watching the event descriptor of faults set aside",
                source,
            })?;
        }
        let (handlers, registration) = match config.fault_mode {
            FaultMode::HandlerThreads(count) => (count.max(1), None),
            FaultMode::SelfPaging => (0, Some(self_paging::register(&shared)?)),
        };
        let roles: [ThreadRole; 3] = [
            ("fault", FAULT_HANDLER_ROLE, fault::handle_faults, handlers),
            ("evict", "evictor", evict::evict_loop, config.evictor_threads.max(1)),
            ("io", "I/O thread", io::io_loop, config.io_threads.max(1)),
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
            hooks: ForkHooks { thread_start, child_orphaned: config.child_orphaned },
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

    /// The processes served now, by pid.
    pub fn served_pids(&self) -> Vec<u32> {
        self.shared.spaces.served_now().iter().map(|space| space.pid()).collect()
    }

    /// Lets every served process go (`remove_tenant`), as before the pager stops.
    pub fn release_tenants(&self) {
        for space in self.shared.spaces.served_now().iter() {
            self.shared.remove_space(space.id);
        }
    }

    /// The pager's decisions over time; the caller ticks it every 100 ms or so: the
    /// program thread that takes nearly all the faults pinned with the fault handlers,
    /// or released (`PagerConfig::colocate`), and whether the handlers may poll (only
    /// while the machine has a CPU to spare: `poll.rs`).
    pub fn tick(&self) {
        self.shared.colocation.tick();
        self.shared.faults.poll.tick(self.shared.now(), crate::sys::machine_idle_ns());
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
    pub fn tenant_figures(&self, tenant: u32) -> TenantFigures {
        let now = self.shared.now();
        self.shared.lock().tenant_figures(tenant, now)
    }

    /// The resident budget now, in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.shared.lock().config().budget_pages * PAGE_BYTES as u64
    }

    /// The pager's own buffers, in bytes (the GC's move buffer, each I/O thread's
    /// scratch, the read-ahead cache, the compressed pool): mapped untouched, they become
    /// resident as the pager first uses them, so a shell holding the process's memory
    /// to a limit keeps room for them from the start.
    pub fn buffers_bytes(&self) -> u64 {
        let state = self.shared.lock();
        let pages = state.engine().gc_buffer_pages() as u64
            + self.io_threads as u64 * state.append_pages_max() as u64
            + state.readahead_cache_pages() as u64;
        pages * PAGE_BYTES as u64 + self.shared.storage.pool_stats().map_or(0, |pool| pool.capacity_bytes)
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
            assert_eq!(page_state, Some(PageState::Unmapped), "unpaging a page the pager mapped");
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
        let histogram = &self.shared.faults.all().latency;
        (histogram.quantile(q), histogram.count())
    }

    /// The fault latency of the engine tenant `tenant`'s served processes, at quantile
    /// `q`, in nanoseconds; and how many were recorded (since `tenant_begins`).
    pub fn tenant_fault_latency(&self, tenant: u32, q: f64) -> (u64, u64) {
        match self.shared.faults.tenant(tenant) {
            Some(faults) => (faults.latency.quantile(q), faults.latency.count()),
            None => (0, 0),
        }
    }

    /// Where the engine tenant `tenant`'s faults spent their time (since `tenant_begins`).
    pub fn tenant_fault_times(&self, tenant: u32) -> FaultTimeTotals {
        self.shared.faults.tenant_totals(tenant)
    }

    /// A new tenant takes the engine tenant `tenant`: what was learnt of the former (its
    /// faults' latencies, how its swap cache paid) is forgotten.
    pub fn tenant_begins(&self, tenant: u32) {
        if let Some(faults) = self.shared.faults.tenant(tenant) {
            faults.reset();
        }
        self.shared.lock().tenant_begins(tenant);
    }

    /// Host memory the engine uses per 4 KiB of swap capacity.
    pub fn host_bytes_per_slot(&self) -> f64 {
        self.shared.lock().engine().host_memory().bytes_per_slot
    }

    pub fn device(&self) -> &Arc<dyn ZonedDevice> {
        self.shared.storage.device()
    }

    /// The program discards `[start, start + len)` of a region: its pages read back
    /// zero from now on and their slots are freed. Returns what `madvise` returns.
    pub fn program_discard(&self, start: u64, len: u64) -> i32 {
        program::program_discard(&self.shared, start, len)
    }

    /// `program_discard` with the zap done by `zap` (which returns what `madvise`
    /// does), for the pager's own process.
    pub fn program_discard_then(&self, start: u64, len: u64, zap: impl FnOnce() -> i32) -> i32 {
        program::program_discard_then(&self.shared, start, len, zap)
    }

    /// Served process `tenant` discards `[start, start + len)` (its addresses), zapped
    /// by `zap` (which returns what `madvise` does: the process itself zaps, asked over
    /// the wire). What lies outside its arena is not the pager's: only zapped. Returns
    /// what `zap` does.
    ///
    /// The pager takes the discard first, then lets the state lock go before the zap, as
    /// for a REMOVE event (`PagerCore::discard_range` without `zap_under_lock`: the
    /// pager never trusts what was mapped there again). Held through the zap, the lock
    /// waited on the process: one stopped between the request and its zap (SIGSTOP, a
    /// debugger), or one that never zapped, stopped every process's faults.
    pub fn tenant_discard_then(&self, tenant: TenantId, start: u64, len: u64, zap: impl FnOnce() -> i32) -> i32 {
        program::tenant_discard_then(&self.shared, tenant, start, len, zap)
    }

    /// Forks the process with `fork` (the real `fork()`), giving the child a snapshot
    /// of the paged memory served by a thread of its own. Returns what `fork` returns.
    /// In the child, allocations must stay out of paged memory until this returns (the
    /// preload library's fork wrapper sees to it).
    ///
    /// # Safety
    /// As `fork()` in a threaded program: the child may only rely on the calling thread.
    pub unsafe fn fork(&self, fork: impl FnOnce() -> libc::pid_t) -> libc::pid_t {
        // SAFETY: per the contract.
        unsafe { program::fork(&self.shared, self.hooks, fork) }
    }

    /// Served process `tenant` is about to fork (it holds its own drops and discards
    /// until the fork is done, so what it misses at the fork is what the pager had
    /// dropped): where each of its pages on the device is now, held there for the child.
    /// `None`: not a process this pager serves.
    pub fn tenant_fork_snapshot(&self, tenant: TenantId) -> Option<ForkSnapshot> {
        program::tenant_fork_snapshot(&self.shared, tenant)
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.release_tenants();
        self.registration.take();
        self.shared.lock().shut_down();
        self.shared.wakers.stop();
        for thread in self.threads.drain(..) {
            thread.join();
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

/// The compressed pool's share of the memory a shell holds its programs to: at most
/// half (the rest is the programs'). Every shell that takes the pool out of its memory
/// checks it here.
pub fn check_compressed_pool_share(memory_bytes: u64, pool_bytes: u64) -> Result<(), PagerError> {
    if pool_bytes <= memory_bytes / 2 {
        return Ok(());
    }
    Err(PagerError::CompressedPool(format!(
        "{} is more than half of the memory, {}: give it at most {}",
        znswap_zoned::format_size(pool_bytes),
        znswap_zoned::format_size(memory_bytes),
        znswap_zoned::format_size(memory_bytes / 2)
    )))
}

/// What the compressed pool needs: a size it can hold a few pages in, and pages that
/// reach the device as the program wrote them (sealed pages do not compress).
fn check_compressed_pool(config: &PagerConfig) -> Result<(), PagerError> {
    let bytes = config.compressed_pool_bytes;
    if bytes == 0 {
        return Ok(());
    }
    if bytes < znswap_zoned::COMPRESSED_POOL_MIN_BYTES {
        return Err(PagerError::CompressedPool(format!(
            "{} is below its least, {}",
            znswap_zoned::format_size(bytes),
            znswap_zoned::format_size(znswap_zoned::COMPRESSED_POOL_MIN_BYTES)
        )));
    }
    if config.core.encrypt {
        return Err(PagerError::CompressedPool(
            "pages are sealed before they reach it, and sealed pages do not compress: leave out one of the two".into(),
        ));
    }
    Ok(())
}
