//! The pager's configuration, one struct from the flag to the core: the core's part
//! ([`CoreConfig`], embedded) and the shell's (threads, polling, co-location). Each use
//! has one constructor that decides its defaults: [`PagerConfig::new`] (the library),
//! [`PagerConfig::for_bench`], [`PagerConfig::for_run`] (a program under `znswap run`)
//! and [`PagerConfig::for_daemon`]. The command line's flags then change what they name
//! (`crates/cli/src/flags.rs`, `FaultFlags::apply`), and the configuration travels as it
//! is: to the preload library inside `RunConfig`, and back in the reports.

use serde::{Deserialize, Serialize};
use znswap_pager_core::{CoreConfig, GC_BATCH_PAGES_DEFAULT, PAGE_BYTES};

/// The default bound of a handler thread's polling for the next fault
/// (`PagerConfig::fault_poll_us`), in microseconds.
pub const FAULT_POLL_US_DEFAULT: u32 = 200;
/// Its largest value (10 ms): beyond it a CPU would spin through gaps that dwarf the
/// wake-up it saves.
pub const FAULT_POLL_US_MAX: u32 = 10_000;

/// Fault handler threads of a pager serving a program (`znswap run`, the daemon): the
/// kernel itself touches a program's heap (`read()` into it), which self-paging cannot
/// serve, and two let a second fault's device read overlap the first's.
pub const HANDLER_THREADS_SERVED: usize = 2;

/// Processes and tenants the daemon serves at once at most (a region each process; the
/// tenants are the engine's).
pub const DAEMON_PROCESSES_MAX: u32 = 64;
pub const DAEMON_TENANTS_MAX: u32 = 16;

/// Exit status of a program whose pager could not start (the launcher explains it).
pub const EXIT_PAGER_FAILED: i32 = 125;
/// Exit status of a forked child that outlived its parent (a daemon).
pub const EXIT_DAEMONIZED: i32 = 124;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PagerConfig {
    /// What the core decides with: the budget, the slack, eviction batches, reference
    /// sampling, read-ahead, the GC batch, the inactive list, policy, sealing.
    #[serde(flatten)]
    pub core: CoreConfig,
    /// Who resolves page faults.
    pub fault_mode: FaultMode,
    /// After the faults it found, a handler thread polls userfaultfd for the next one
    /// for up to this many microseconds before it sleeps (one thread at a time; 0:
    /// never). A fault that finds a handler polling costs no wake-up of one, which on a
    /// virtual machine's halted CPUs is a large part of a fault. The window adapts as
    /// the kernel's halt polling does (`pager/poll.rs`), so a program that seldom
    /// faults costs no polling. Not 0 also makes a fault's device read wait by polling
    /// (`znswap_zoned::poll_reads_on_this_thread`), for the same reason. Either poll
    /// runs only while the machine has a CPU to spare (`pager/poll.rs`'s gate).
    pub fault_poll_us: u32,
    /// Bytes of a compressed pool in front of the device (0: none): every page written
    /// out is also kept there as an lz4 block if it compresses to three quarters or
    /// less, and a swap-in of a page it holds needs no device read
    /// (`znswap_zoned::CompressedPool`). Part of the memory the shell holds its
    /// programs to: the shells take it out of the budget they grant.
    #[serde(default)]
    pub compressed_pool_bytes: u64,
    /// Threads picking and write-protecting victims and handing them to the engine.
    pub evictor_threads: usize,
    /// Threads running the engine's I/O (swap-out appends, GC reads and moves, resets),
    /// each with one request in flight.
    pub io_threads: usize,
    /// For tests: every this many moves to or from a shadow page that succeed are
    /// reported failed (`EEXIST`), as Linux 6.18 now and then does (`park_outcome` in the
    /// pager core); the shells must find them done by the page map. 0: never.
    pub misreport_moves_every: u32,
    /// Pins the program thread that takes nine in ten faults, and the fault handlers,
    /// to one CPU (the one it ran on), and the evictor and I/O threads to the others
    /// (`pager/colocate.rs`): a fault's round trip then costs context switches, not
    /// wake-ups of other CPUs.
    pub colocate: bool,
    /// Called first thing in every pager thread. `znswap run`'s preload library marks
    /// its threads there, so their allocations stay out of the paged heap (a handler
    /// faulting on memory only it can bring back would wait forever).
    #[serde(skip)]
    pub thread_start: Option<fn()>,
    /// Called in a forked child whose parent has exited (a daemon), before the child
    /// stops: `znswap run` tells its launcher so.
    #[serde(skip)]
    pub child_orphaned: Option<fn()>,
}

/// Who resolves a page fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

/// The slack of a pager whose memory is all it may hold (`znswap run`, the daemon):
/// 1/64 of it, 256 pages (1 MiB) at most. Above the budget it is room only bursts of
/// faults use, while a memory cgroup lets a program have its whole limit.
fn slack_in(memory_bytes: u64) -> u64 {
    (memory_bytes / PAGE_BYTES as u64 / 64).clamp(64, 256)
}

impl PagerConfig {
    /// The library's defaults, for a budget of `budget_bytes`: a handler thread per CPU,
    /// a slack of an eighth of the budget (64 to 1024 pages: sequential eviction keeps
    /// 1 MiB appends going back to back), reference sampling, read-ahead.
    pub fn new(budget_bytes: u64) -> PagerConfig {
        PagerConfig {
            core: CoreConfig::new(budget_bytes / PAGE_BYTES as u64),
            fault_mode: FaultMode::HandlerThreads(std::thread::available_parallelism().map_or(1, |n| n.get())),
            fault_poll_us: FAULT_POLL_US_DEFAULT,
            compressed_pool_bytes: 0,
            evictor_threads: 1,
            io_threads: 1,
            misreport_moves_every: 0,
            colocate: false,
            thread_start: None,
            child_orphaned: None,
        }
    }

    /// `znswap bench`'s: the library's, but each faulting thread resolves its own faults
    /// (self-paging: the bench's accesses are plain loads and stores).
    pub fn for_bench(budget_bytes: u64) -> PagerConfig {
        PagerConfig { fault_mode: FaultMode::SelfPaging, ..PagerConfig::new(budget_bytes) }
    }

    /// A program's under `znswap run --memory memory_bytes`: whatever the pager holds
    /// comes out of `--memory`, so it holds only what it uses. The arena is the one
    /// region; handler threads, since the kernel touches a program's heap; a small
    /// slack; the GC's buffer (twice a batch, resident once the GC runs) scaled to 1/64
    /// of `--memory`, 8 MiB at most; the hot thread co-located with the handlers. The
    /// budget starts at the whole of `--memory` (the library lowers it at once).
    pub fn for_run(memory_bytes: u64) -> PagerConfig {
        let memory_pages = memory_bytes / PAGE_BYTES as u64;
        let mut config = PagerConfig::new(memory_bytes);
        config.core.regions_max = 2;
        config.core.slack_pages = slack_in(memory_bytes);
        config.core.gc_batch_pages = (memory_pages / 128).clamp(64, GC_BATCH_PAGES_DEFAULT as u64) as u32;
        config.fault_mode = FaultMode::HandlerThreads(HANDLER_THREADS_SERVED);
        config.colocate = true;
        config
    }

    /// The daemon's, serving `memory_bytes` to its tenants together: a region per
    /// process, an engine tenant per tenant, handler threads, a small slack, no
    /// co-location (it pins one process's hot thread, and here there are many).
    pub fn for_daemon(memory_bytes: u64) -> PagerConfig {
        let mut config = PagerConfig::new(memory_bytes);
        config.core.regions_max = DAEMON_PROCESSES_MAX;
        config.core.tenants = DAEMON_TENANTS_MAX;
        config.core.slack_pages = slack_in(memory_bytes);
        config.fault_mode = FaultMode::HandlerThreads(HANDLER_THREADS_SERVED);
        config.colocate = false;
        config
    }

    /// The budget, in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.core.budget_pages * PAGE_BYTES as u64
    }

    /// Handler threads (0 when self-paging).
    pub fn handler_threads(&self) -> usize {
        match self.fault_mode {
            FaultMode::HandlerThreads(count) => count,
            FaultMode::SelfPaging => 0,
        }
    }
}
