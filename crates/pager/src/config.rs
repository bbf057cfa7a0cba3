//! The pager's configuration: what the library, `znswap bench`, `znswap run` and the
//! daemon start a pager with.

use znswap_core::PolicyKind;
use znswap_pager_core::{CoreConfig, GC_BATCH_PAGES_DEFAULT, PAGE_BYTES, READAHEAD_PAGES_DEFAULT};

/// The default bound of a handler thread's polling for the next fault
/// (`PagerConfig::fault_poll_us`), in microseconds.
pub const FAULT_POLL_US_DEFAULT: u32 = 200;
/// Its largest value (10 ms): beyond it a CPU would spin through gaps that dwarf the
/// wake-up it saves.
pub const FAULT_POLL_US_MAX: u32 = 10_000;

/// Exit status of a program whose pager could not start (the launcher explains it).
pub const EXIT_PAGER_FAILED: i32 = 125;
/// Exit status of a forked child that outlived its parent (a daemon).
pub const EXIT_DAEMONIZED: i32 = 124;

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
    /// `READAHEAD_PAGES_MAX`; 0 reads nothing ahead.
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

impl PagerConfig {
    pub(crate) fn core_config(&self) -> CoreConfig {
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
