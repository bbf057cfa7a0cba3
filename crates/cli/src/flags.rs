//! Flags that several commands take, each defined once: a command flattens the struct
//! (`#[command(flatten)]`), so the name, the help and the checks are the same
//! everywhere.

use std::path::PathBuf;

use clap::Args;
use znswap_core::PolicyKind;
use znswap_pager::{
    FaultMode, PagerConfig, PAGE_BYTES, READAHEAD_PAGES_DEFAULT, READAHEAD_PAGES_MAX, SAMPLING_PERIOD_MAX_DEFAULT,
};

/// `--device`, for commands that work on an existing device or the default one.
#[derive(Args, Clone, Debug)]
pub struct DeviceFlag {
    /// The zoned device [default: the embedded default device]
    ///
    /// A znswap device file, a Linux zoned block device (/dev/nvme0n1, /dev/nullb0) or an
    /// NVMe ZNS namespace's generic char device (/dev/ng0n1). Without it, the embedded
    /// default: $ZNSWAP_DEVICE or ~/.cache/znswap/default.zns, created on first use.
    /// Commands that write to it destroy its data.
    #[arg(long, visible_alias = "path", value_name = "DEVICE")]
    pub device: Option<PathBuf>,
}

/// `--memory`: the resident budget of paged memory.
#[derive(Args, Clone, Debug)]
pub struct MemoryFlag {
    /// Resident memory (e.g. 256M, 2G): pages beyond it are swapped to the device
    ///
    /// Pages beyond it come back on fault. For `bench`, the paged working set's budget;
    /// for `run`, the anonymous memory of the program and every process it forks or
    /// executes (heaps, stacks, their own anonymous and shared mappings), the paged heaps
    /// getting what the rest leaves, re-measured every 100 ms. Mapped files (code,
    /// libraries) are not counted: a memory cgroup at the same limit leaves them in the
    /// shared page cache and maps them back on use. Nor is the pager's own memory (its
    /// tables and buffers, in the launcher; in the program with --in-process, where it
    /// is counted): a memory cgroup does not charge the kernel's swap tables either. The
    /// summary reports it.
    #[arg(long, value_parser = size, default_value = "256M")]
    pub memory: u64,
}

/// `--policy`: where swapped-out pages go.
#[derive(Args, Clone, Debug)]
pub struct PolicyFlag {
    /// Where swapped-out pages go: per-core, hot-cold, lifetime or tenant
    ///
    /// per-core: a swap-zone per core that swaps out (the pager's evictor does every
    /// swap-out, so one swap-zone). hot-cold: the paper's, two or more accesses in 16
    /// samples is hot. lifetime: hot, warm and cold by returns while the live pages are
    /// rewritten 2.5 times, GC survivors by class, cost-benefit victims; a zone per class
    /// only while the device's free headroom pays for the zones it keeps open. tenant: a
    /// swap-zone per tenant, to keep tenants' pages (and their GC) apart under the daemon.
    #[arg(long, default_value = "per-core", value_parser = policy)]
    pub policy: PolicyKind,
}

impl PolicyFlag {
    pub fn apply(&self, config: &mut PagerConfig) {
        config.core.policy = self.policy;
    }
}

/// Who serves page faults, and how far they read ahead.
#[derive(Args, Clone, Debug)]
pub struct FaultFlags {
    /// Serve page faults with N threads reading userfaultfd events [default: `bench`
    /// self-pages; `run` uses 2]
    ///
    /// With handler threads the kernel may touch paged memory itself (a read() into it),
    /// which self-paging cannot serve: there each faulting thread resolves its own fault
    /// in a SIGBUS handler, with no context switch. Programs hand their heap to system
    /// calls, so `run` always uses handler threads. One per application thread that
    /// faults keeps their device reads in flight together. At least 1.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub handler_threads: Option<u32>,
    /// The largest read-ahead window, in pages beyond the faulting one (0: none; at most
    /// 32)
    ///
    /// A fault that reads from the device also reads the swapped pages in the slots
    /// around its own (pages swapped out together), one device command, into a cache of
    /// the pager's own that costs no budget; a later fault on one of them needs no device
    /// read. The window grows with such hits and falls back to one page without them, as
    /// Linux's swap read-ahead does, so random access reads no more than it did (8 is
    /// Linux's default, `page-cluster` 3).
    #[arg(long, value_name = "PAGES", default_value_t = READAHEAD_PAGES_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=READAHEAD_PAGES_MAX as i64))]
    pub readahead: u32,
    /// Microseconds a handler thread polls for the next fault before it sleeps (0: never;
    /// at most 10000)
    ///
    /// A fault that finds a handler polling needs none woken, which pays where waking a
    /// thread is slow (virtual CPUs that halt when idle, each wake-up a VM exit). The
    /// window adapts to the gaps between faults, so a program that seldom faults costs no
    /// polling. Not 0 also makes each fault's device read wait by polling rather than
    /// asleep, in handler and self-paging threads alike (one wake-up less per fault), at
    /// the price of the CPU the poll takes, which it yields to any other runnable thread.
    /// Both polls run only while the machine has a CPU to spare: when other work keeps
    /// the CPUs busy, the pager waits asleep until a CPU is free again (the summary's
    /// faults line says at how many looks it was held so). 0 where a CPU must not spin.
    /// Measured: docs/measurements/2026-11-pager.md, docs/measurements/2026-12-suite.md.
    #[arg(long, value_name = "US", default_value_t = znswap_pager::FAULT_POLL_US_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=znswap_pager::FAULT_POLL_US_MAX as i64))]
    pub fault_poll: u32,
    /// Memory for an inactive list of parked pages (0: none; needs Linux 6.8)
    ///
    /// Victims are first moved out of the program's reach (UFFDIO_MOVE, no copy) and stay
    /// in memory; a touch, read or write, brings a page back with no device read and marks
    /// it referenced, so pages the program only reads are seen at last; the pages still
    /// parked when their turn comes are written out, with no write-protect fault on the
    /// program's path. Part of the budget, not added to it. Off by default: each touch
    /// costs a fault round trip where the kernel's accessed bit is free, and each park a
    /// move of the evictor's. Worth trying on a program whose hot pages are mostly read
    /// (redis YCSB-A swapped in fewer pages with it); on memcached ETC, and on a hot set
    /// that nearly fills the budget (swapped-in pages start unreferenced, and a hot page
    /// waits longer between touches than it stays parked), it measured slower with a
    /// higher p99. Measured: docs/measurements/2026-11-pager.md; when: docs/tuning.md.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = size)]
    pub park: u64,
    /// Reference bits from faults only (no write-protect sampling)
    ///
    /// By default the CLOCK hand also write-protects the pages whose bit it clears, so
    /// their next write faults and marks their 16-page granule referenced; without that,
    /// and without --park, CLOCK evicts about as FIFO would. With --park the touches of
    /// parked pages still mark references, but fewer. For measuring what sampling buys
    /// (docs/measurements/2026-11-pager.md).
    #[arg(long)]
    pub no_reference_sampling: bool,
    /// The most revolutions of the CLOCK hand between two looks at a page by reference
    /// sampling (a power of two, 1 to 64)
    ///
    /// Each look is a write-protection, and a write after it a fault: the pages looked at
    /// and not written before the hand returns are the cold ones it finds. While most
    /// pages looked at come back written (an interpreter writes a reference count on
    /// every object it touches), the looks cost a fault each and find little, and the
    /// hand looks at each page less often, down to once every this many revolutions;
    /// while few do, more often, up to every revolution. 1: every revolution, always.
    #[arg(long, value_name = "N", default_value_t = SAMPLING_PERIOD_MAX_DEFAULT)]
    pub sampling_period_max: u32,
    /// Evict pages that come back soon after their eviction as any other
    ///
    /// By default a page swapped in within the budget's refault distance of its
    /// eviction (fewer evictions since than the budget's pages) earns passes of the CLOCK
    /// hand (1, 3, then 7 as it keeps coming back), so pages the program only reads,
    /// which no fault marks referenced, stay. For measuring what that buys.
    #[arg(long)]
    pub no_refault_passes: bool,
    /// See writes without write-protect faults (experimental; needs Linux 6.7, --park
    /// and handler threads)
    ///
    /// UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN: a write to a protected page goes ahead and
    /// the page reads as written to a scan. The CLOCK hand's victims are scanned before
    /// they are parked (a written one stays), and a page read back keeps its slot as swap
    /// cache until its parked bytes' digest says it was written (XXH3-128, keyed per
    /// run). Needs --park (a victim is only ever written out once parked, out of the
    /// program's reach) and fault handler threads. A page shared with a forked child
    /// cannot be parked: it is made the parent's alone (a write fault taken for the
    /// program) and parked at the hand's next pass. Reference sampling is part of it:
    /// writes cost no fault here. On bench hotspot it swapped in fewer pages than --park
    /// alone, on redis YCSB-A about as many as with no parking (docs/wp-async-facts.md).
    // Hidden from --help while it measures no better than --park alone on redis (its
    // aborts were the kernel's misreported moves, handled since: docs/wp-async-facts.md).
    #[arg(long, requires = "park", conflicts_with = "no_reference_sampling", hide = true)]
    pub wp_async: bool,
}

impl FaultFlags {
    /// Changes what the flags name in `config` (each command's constructor decided the
    /// rest): the one place a fault flag reaches the pager's configuration.
    pub fn apply(&self, config: &mut PagerConfig) {
        if let Some(threads) = self.handler_threads {
            config.fault_mode = FaultMode::HandlerThreads(threads as usize);
        }
        config.core.readahead_pages = self.readahead;
        config.fault_poll_us = self.fault_poll;
        config.core.park_pages = self.park / PAGE_BYTES as u64;
        config.core.reference_sampling = !self.no_reference_sampling;
        config.core.sampling_period_max = self.sampling_period_max;
        config.core.refault_passes = !self.no_refault_passes;
        config.core.wp_async = self.wp_async;
    }
}

/// `--encrypt`.
#[derive(Args, Clone, Debug)]
pub struct EncryptFlag {
    /// Encrypt every swapped page (AES-256-GCM, a key held only in memory)
    ///
    /// The key is made at start from the OS's random source and held only in the pager's
    /// memory (never written, left out of core dumps, zeroed at exit): what reaches the
    /// device is unreadable after the run, and a page altered there is reported lost
    /// (SIGBUS), never delivered. Each swapped page's nonce and tag (24 B) stay in the
    /// pager's memory. Use it when someone else may read the device after the run; it
    /// costs CPU on every swap-in and swap-out (docs/measurements/2026-11-pager.md).
    #[arg(long)]
    pub encrypt: bool,
}

impl EncryptFlag {
    pub fn apply(&self, config: &mut PagerConfig) {
        config.core.encrypt = self.encrypt;
    }
}

/// `--compressed-pool`.
#[derive(Args, Clone, Debug)]
pub struct CompressedPoolFlag {
    /// Memory for a compressed pool in front of the device, out of --memory (0: none)
    ///
    /// Every page written out is also kept in the pool as an lz4 block if it compresses
    /// to three quarters of a page or less, the oldest dropped first when the pool is
    /// full; a page that comes back while the pool holds it needs no device read (a few
    /// microseconds where a read takes tens or hundreds). The pool is part of --memory:
    /// the program's pages get --memory less the pool. It pays where pages compress and
    /// come back soon after they leave (an interpreter's objects); where they do not
    /// compress, or where the program needs every page of its memory, the memory is
    /// better left to the program. Not with --encrypt (sealed pages do not compress).
    /// The summary's pool line says what it held and served.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = size)]
    pub compressed_pool: u64,
}

impl CompressedPoolFlag {
    pub fn apply(&self, config: &mut PagerConfig) {
        config.compressed_pool_bytes = self.compressed_pool;
    }
}

/// The flags that make a pager's configuration, as every command that starts a pager
/// takes them: `--policy`, the fault flags, `--encrypt`, `--compressed-pool`.
#[derive(Args, Clone, Debug)]
pub struct PagerFlags {
    #[command(flatten)]
    pub policy: PolicyFlag,
    #[command(flatten)]
    pub faults: FaultFlags,
    #[command(flatten)]
    pub encrypt: EncryptFlag,
    #[command(flatten)]
    pub compressed_pool: CompressedPoolFlag,
}

impl PagerFlags {
    /// Changes what the flags name in `config`.
    pub fn apply(&self, config: &mut PagerConfig) {
        self.policy.apply(config);
        self.faults.apply(config);
        self.encrypt.apply(config);
        self.compressed_pool.apply(config);
    }
}

/// `--json`.
#[derive(Args, Clone, Debug)]
pub struct JsonFlag {
    /// Print JSON instead of a table
    ///
    /// One object (or array) of the same shape whatever the count of results.
    #[arg(long)]
    pub json: bool,
}

/// A size: bytes, or with a K/M/G/T suffix (powers of 1024).
pub fn size(text: &str) -> Result<u64, String> {
    znswap_zoned::parse_size(text)
}

/// Bytes a second: a size (`8M`), optionally with `/s` (`8M/s`); not zero.
pub fn rate(text: &str) -> Result<u64, String> {
    let bytes = size(text.strip_suffix("/s").unwrap_or(text))?;
    if bytes == 0 {
        return Err("a rate of 0 would stop every write: leave the flag out for no limit".into());
    }
    Ok(bytes)
}

/// A `--swap-limit` of `bytes` in pages: at least one (on the wire, 0 says no limit).
pub fn swap_limit_pages(bytes: u64) -> u64 {
    (bytes / znswap_pager::PAGE_BYTES as u64).max(1)
}

fn policy(name: &str) -> Result<PolicyKind, String> {
    PolicyKind::from_name(name)
        .ok_or_else(|| format!("unknown policy {name:?}: use one of {}", PolicyKind::NAMES.join(", ")))
}
