//! How `znswap run` hands its configuration to the preload library in the program: the
//! names of the environment variables, defined once for both sides. The preload library
//! removes them (and itself from `LD_PRELOAD`) at start-up, so programs the paged one
//! executes run without the pager.

/// The device path (already checked and created by the launcher).
pub const DEVICE: &str = "ZNSWAP_RUN_DEVICE";
/// The budget of resident paged memory, in bytes.
pub const MEMORY: &str = "ZNSWAP_RUN_MEMORY";
/// Bytes of address space reserved for the paged heap.
pub const ARENA: &str = "ZNSWAP_RUN_ARENA";
/// `per-core`, `hot-cold`, `tenant` or `lifetime` (`PolicyKind::NAMES`).
pub const POLICY: &str = "ZNSWAP_RUN_POLICY";
/// Fault handler threads.
pub const HANDLERS: &str = "ZNSWAP_RUN_HANDLERS";
/// Pages read ahead after a sequential fault (`PagerConfig::readahead_pages`).
pub const READAHEAD: &str = "ZNSWAP_RUN_READAHEAD";
/// Where the library writes its figures as JSON (every second, and at exit).
pub const STATS: &str = "ZNSWAP_RUN_STATS";
/// A pipe's write end the program and its forked (not exec'd) descendants keep open:
/// the launcher sees it close when the last of them is gone, and so learns that a
/// program daemonized (its forked child outlived it).
pub const ALIVE_FD: &str = "ZNSWAP_RUN_ALIVE_FD";
/// `LD_PRELOAD` as it was before the launcher added the library (restored at start-up).
pub const LD_PRELOAD_BEFORE: &str = "ZNSWAP_RUN_LD_PRELOAD_BEFORE";

/// The largest arena. mimalloc v3 covers at most 16 GiB with one arena's bitmaps and
/// splits larger memory into several, but here it refused 15.9 GiB (and 20.6 GiB) while
/// 8.8 GiB worked; why is not known yet, so arenas stop at 8 GiB.
pub const ARENA_MAX_BYTES: u64 = 8 << 30;

/// Every variable above, for the library to remove.
pub const ALL: [&str; 9] = [DEVICE, MEMORY, ARENA, POLICY, HANDLERS, READAHEAD, STATS, ALIVE_FD, LD_PRELOAD_BEFORE];

/// Exit status of a program whose pager could not start (the launcher explains it).
pub const EXIT_PAGER_FAILED: i32 = 125;
/// Exit status of a forked child that outlived its parent (a daemon).
pub const EXIT_DAEMONIZED: i32 = 124;

/// What the library writes to the stats file.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    pub pid: u32,
    /// Written at exit (the last one), not a periodic snapshot.
    pub at_exit: bool,
    pub budget_bytes: u64,
    pub arena_bytes: u64,
    pub swapped_out_pages: u64,
    pub swapped_in_pages: u64,
    pub missing_faults: u64,
    pub write_protect_faults: u64,
    pub fault_p50_ns: u64,
    pub fault_p99_ns: u64,
    pub resident_pages: u64,
    pub resident_pages_max: u64,
    pub host_bytes_written: u64,
    pub gc_bytes_written: u64,
    pub gc_runs: u64,
    pub lost_pages: u64,
    pub budget_overruns: u64,
    pub device_errors: u64,
    /// Anonymous memory resident in the process (`RssAnon`), of which the paged heap's
    /// resident pages are a part; the rest is memory the pager does not cover (the
    /// pager's own tables, stacks, mappings it could not page).
    pub rss_anon_bytes: u64,
    /// Allocations made outside the arena because it was full.
    pub overflow_bytes: u64,
    /// mlock/mlockall calls neutralised.
    pub mlocks_ignored: u64,
    /// Forks whose child got a snapshot of the paged heap.
    pub forks: u64,
    /// Anonymous mappings the program made itself (`mmap`) served from paged memory, and
    /// the bytes of them mapped now.
    #[serde(default)]
    pub mmaps_paged: u64,
    #[serde(default)]
    pub mapped_bytes: u64,
    /// Where the handler threads' time on faults goes, in nanoseconds summed over
    /// faults: all of it (from reading the event to the wake), and of it the waits for
    /// the pager's lock, the device reads (`fault_reads` of them), the installs
    /// (`UFFDIO_COPY`) and the waits for room under the budget. The rest of a fault's
    /// time, which the program sees but no handler does, is the kernel's: the event's
    /// delivery and the faulting thread's wake-up.
    #[serde(default)]
    pub fault_handled_ns: u64,
    #[serde(default)]
    pub fault_lock_wait_ns: u64,
    #[serde(default)]
    pub fault_reads: u64,
    #[serde(default)]
    pub fault_read_ns: u64,
    #[serde(default)]
    pub fault_install_ns: u64,
    #[serde(default)]
    pub budget_wait_ns: u64,
    pub uptime_ns: u64,
}
