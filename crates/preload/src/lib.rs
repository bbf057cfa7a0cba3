//! The library `znswap run` preloads into a program (`LD_PRELOAD`): at load, before the
//! program's `main`, it starts a pager on the device the launcher chose, reserves an
//! arena of paged memory, and from then on the program's heap (the whole malloc family,
//! `alloc.rs`) lives there: resident within the budget, the rest on the zoned device.
//!
//! - `alloc.rs`: malloc, free, ... over a mimalloc heap whose only arena is the paged
//!   region; the pager's own allocations in ordinary memory.
//! - `mapping.rs`: the program's own anonymous mappings (`mmap`, `munmap`, `mremap`),
//!   paged in the same arena.
//! - `wrap.rs`: what programs do to their memory beyond malloc (`mlock`, ...).
//! - `say.rs`: messages that never allocate, lock or panic.
//! - this file: start-up from the launcher's configuration, and the figures it writes.
//!
//! Nothing here may unwind into the program (C frames): no assertion or `eprintln!` on
//! a path the program's calls take (`say!` instead); start-up failures print a message
//! and exit with `EXIT_PAGER_FAILED`, which the launcher explains. Every `unsafe` block
//! says why it is sound (`undocumented_unsafe_blocks`), and unsafe functions do their
//! unsafe work in such blocks too (`unsafe_op_in_unsafe_fn`).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod alloc;
mod mapping;
mod say;
mod served;
mod wrap;

use say::say;

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use libmimalloc_sys as mi;
use znswap_pager::pager_thread::PagerThread;
use znswap_pager::run_env::{self, ResidentSet, RunConfig, RunReport};
use znswap_pager::{Pager, PagerConfig, Region};

use alloc::Internal;

#[global_allocator]
static INTERNAL_ALLOCATOR: alloc::InternalAllocator = alloc::InternalAllocator;

/// Runs `init` when the library is loaded, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// mimalloc arenas start and end on this boundary (its segment size on 64-bit, the
/// largest alignment any version asks for).
const ARENA_ALIGN: u64 = 32 << 20;

/// The launcher's alive pipe (`run_env::ALIVE_FD`), -1 without one.
static ALIVE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// A forked child outlived its parent: one byte on the alive pipe tells the launcher
/// why the program's pages stop being served (the child stops next).
fn tell_launcher_daemonized() {
    let fd = ALIVE_FD.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: a one-byte write to our own descriptor.
        unsafe { libc::write(fd, b"D".as_ptr().cast(), 1) };
    }
}

/// Who pages the arena.
enum Paging {
    /// The pager runs in this process (`znswap run`).
    Here {
        pager: Pager,
        /// Never dropped: the program's heap lives in it until the process ends.
        region: Region,
        /// Its paged part, `[start, end)`: the arena past mimalloc's bookkeeping.
        paged: (u64, u64),
    },
    /// The launcher's pager serves this process (`znswap run --serve`, `served.rs`).
    Served(served::Served),
}

/// The running pager and its arena, for the life of the process.
struct Runtime {
    paging: Paging,
    arena_bytes: u64,
    /// `--memory`: the limit on the program's anonymous memory (see [`govern`]).
    memory_bytes: u64,
    /// The most anonymous memory the governor saw (it looks every 100 ms).
    charged_max_bytes: std::sync::atomic::AtomicU64,
    slack_pages: u64,
    /// What the rest of the resident set will take at least: what it took at start plus
    /// the pager's buffers, which become resident only as they are first used.
    rest_floor_bytes: u64,
    /// The least the governor leaves the paged heap (`BUDGET_FLOOR_BYTES`, or the pager's
    /// own minimum if larger).
    budget_floor_bytes: u64,
    /// Where the figures go (`RunConfig::stats`, or beside it for a process the program
    /// executed: `run_env::descendant_stats_path`).
    stats: PathBuf,
    /// The process that started the pager (a forked child must not write its figures).
    pid: u32,
    /// A process the program executed (`RunConfig::descendant`).
    descendant: bool,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

impl Runtime {
    /// The pager, when it runs in this process.
    fn pager(&self) -> Option<&Pager> {
        match &self.paging {
            Paging::Here { pager, .. } => Some(pager),
            Paging::Served(_) => None,
        }
    }

    /// The pager in another process, when one serves this process.
    fn served(&self) -> Option<&served::Served> {
        match &self.paging {
            Paging::Here { .. } => None,
            Paging::Served(served) => Some(served),
        }
    }

    /// The paged part of the arena, `[start, end)`: past mimalloc's bookkeeping.
    fn paged_bounds(&self) -> (u64, u64) {
        match &self.paging {
            Paging::Here { paged, .. } => *paged,
            Paging::Served(served) => served.paged_bounds(),
        }
    }

    /// The program discards `[start, start + len)` of the arena (`Pager::program_discard`).
    fn program_discard(&self, start: u64, len: u64) -> i32 {
        match &self.paging {
            Paging::Here { pager, .. } => pager.program_discard(start, len),
            Paging::Served(served) => served.program_discard(start, len),
        }
    }
}

extern "C" fn init() {
    let _internal = Internal::enter();
    let started = std::panic::catch_unwind(|| -> Result<(), String> {
        let Some(config) = RunConfig::from_env()? else { return Ok(()) };
        if !config.descendant {
            // Kept by forks, dropped by exec: the launcher sees end-of-file when the last
            // process running the program is gone.
            // SAFETY: flags of a descriptor the launcher gave us.
            unsafe { libc::fcntl(config.alive_fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            ALIVE_FD.store(config.alive_fd, std::sync::atomic::Ordering::Relaxed);
        }
        if config.tenant_token.is_none() {
            scrub_environment(config.ld_preload_before.as_deref());
            return start(config);
        }
        // A daemon's tenant: the programs this one executes join it too, so the library
        // stays in their environment, with a configuration that says they are not the
        // program the launcher started.
        if !config.descendant {
            let descendants = RunConfig { descendant: true, alive_fd: -1, ..config.clone() };
            std::env::set_var(run_env::CONFIG, descendants.to_env());
        }
        let descendant = config.descendant;
        match start(config) {
            // Not this program's to end: it runs on unpaged (as a program executed
            // outside the tenant would), and so do those it executes.
            Err(error) if descendant => {
                say!("znswap run: pid {} runs unpaged: {error}", std::process::id());
                std::env::remove_var(run_env::CONFIG);
                std::env::remove_var("LD_PRELOAD");
                Ok(())
            }
            started => started,
        }
    });
    let error = match started {
        Ok(Ok(())) => return,
        Ok(Err(error)) => error,
        Err(_) => "the pager panicked while starting".to_string(),
    };
    say!("znswap run: {error}");
    // SAFETY: ends the process before `main`; nothing of the program ran yet.
    unsafe { libc::_exit(run_env::EXIT_PAGER_FAILED) };
}

/// Removes the launcher's variable and the library itself from the environment, so
/// programs this one executes run without the pager (forked children keep it: they are
/// this process).
fn scrub_environment(ld_preload_before: Option<&str>) {
    std::env::remove_var(run_env::CONFIG);
    match ld_preload_before.filter(|value| !value.is_empty()) {
        Some(value) => std::env::set_var("LD_PRELOAD", value),
        None => std::env::remove_var("LD_PRELOAD"),
    }
}

/// The pager in this process (`znswap run`): the device opened and reset, the arena
/// reserved as one region, its bookkeeping kept unpaged.
/// The pager in this process, its region, the paged part of the arena in it (`[start,
/// end)`, past mimalloc's bookkeeping) and the heap.
#[allow(clippy::type_complexity)]
fn start_here(config: &RunConfig, arena_bytes: u64) -> Result<(Pager, Region, (u64, u64), *mut mi::mi_heap_t), String> {
    let device = znswap_zoned::open_path(&config.device).map_err(|error| error.to_string())?;
    // Swap holds nothing across runs (as `swapon` discards a swap area's contents): the
    // engine starts from empty zones.
    device.reset_all().map_err(|error| format!("resetting {}: {error}", config.device.display()))?;
    let pager_config = PagerConfig {
        thread_start: Some(alloc::mark_internal_thread),
        child_orphaned: Some(tell_launcher_daemonized),
        ..config.pager.clone()
    };
    let pager = Pager::new(device.into(), pager_config).map_err(|error| error.to_string())?;
    let region = pager
        .alloc(arena_bytes + ARENA_ALIGN, 0)
        .map_err(|error| format!("reserving {arena_bytes} B of paged memory: {error}"))?;
    let arena_start = (region.as_ptr() as u64).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    let bookkeeping = arena_bookkeeping_bytes(arena_bytes);
    let offset = (arena_start - region.as_ptr() as u64) as usize;
    pager
        .unpage(&region, offset, bookkeeping as usize)
        .map_err(|error| format!("unpaging the arena's bookkeeping: {error}"))?;
    let touched_before = pager.stats().core.missing_faults;
    let heap = manage_arena(arena_start, arena_bytes)?;
    if pager.stats().core.missing_faults != touched_before {
        return Err("mimalloc's arena bookkeeping is larger than the memory kept unpaged for it".into());
    }
    Ok((pager, region, (arena_start + bookkeeping, arena_start + arena_bytes), heap))
}

/// The pages of an arena mimalloc keeps its bookkeeping in (its descriptor and bitmaps,
/// at the arena's start), which stay ordinary memory: every allocation, the pager
/// threads' own included, reads the descriptors of all arenas, and paged, a pager thread
/// would fault on memory only it can bring back (seen: the I/O thread stuck in
/// mi_arenas_try_find_free). Far more than the bitmaps need (about 1/20000 of the
/// arena); checked after mimalloc takes the arena.
fn arena_bookkeeping_bytes(arena_bytes: u64) -> u64 {
    (arena_bytes / 4096).max(2 << 20)
}

/// mimalloc takes `[arena_start, + arena_bytes)` as its one arena, and a heap in it.
///
/// mimalloc may purge the arena: free spans it has not reused for a while (its
/// `purge_delay`) go back, through `arena_commit`, as the pager's discards. Without
/// that, memory the program freed stayed resident in the budget until the hand evicted
/// it (a device write of garbage), and was read back from the device when mimalloc
/// handed it out again: the heap held the high-water mark of the program's use where
/// the C library's allocator gives freed spans back.
fn manage_arena(arena_start: u64, arena_bytes: u64) -> Result<*mut mi::mi_heap_t, String> {
    // Free spans purged after 10 ms unused rather than mimalloc v3's 1 s: memory freed
    // holds the budget until then (`MIMALLOC_PURGE_DELAY` still decides if set).
    // SAFETY: sets an option's default before the arena exists (not thread-safe: the
    // program's `main` has not started).
    unsafe { mi::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    let mut arena_id: mi::mi_arena_id_t = std::ptr::null_mut();
    // SAFETY: the range is ours, mapped (registered with the pager) for the process's
    // life, aligned as mimalloc asks; it reads as zeros until written. `arena_commit`
    // has the signature mimalloc's `mi_commit_fun_t` has, and lives as long as the library.
    let managed = unsafe {
        mi_manage_memory(
            arena_start as *const c_void,
            arena_bytes as usize,
            true,
            false,
            true,
            -1,
            true,
            arena_commit,
            std::ptr::null_mut(),
            &mut arena_id,
        )
    };
    if !managed {
        return Err(format!("mimalloc refused the paged arena ({arena_bytes} B at {arena_start:#x})"));
    }
    // SAFETY: an arena mimalloc just took.
    let heap = unsafe { mi::mi_heap_new_in_arena(arena_id) };
    if heap.is_null() {
        return Err("mimalloc could not make a heap in the paged arena".into());
    }
    Ok(heap)
}

/// mimalloc v3's `mi_option_purge_delay` (`libmimalloc-sys` names v2's options).
const MI_OPTION_PURGE_DELAY: mi::mi_option_t = 15;
const PURGE_DELAY_MS: libc::c_long = 10;

unsafe extern "C" {
    /// mimalloc v3's arena over memory the caller manages, whose commits and decommits
    /// (purges) go to `commit`. Not in `libmimalloc-sys`'s bindings.
    fn mi_manage_memory(
        start: *const c_void,
        size: usize,
        is_committed: bool,
        is_pinned: bool,
        is_zero: bool,
        numa_node: libc::c_int,
        exclusive: bool,
        commit: unsafe extern "C" fn(bool, *mut c_void, usize, *mut bool, *mut c_void) -> bool,
        commit_arg: *mut c_void,
        arena_id: *mut mi::mi_arena_id_t,
    ) -> bool;
}

/// mimalloc commits or purges `[start, start + size)` of the paged arena. A commit has
/// nothing to do (a touch faults the page in). A purge is the program's discard
/// (`Runtime::program_discard`: its slots freed, the range reads zero), made on the
/// program's own `malloc` and `free` calls only: elsewhere (a pager thread, the
/// library's own code; mimalloc purges any arena from any allocation) the thread may
/// hold a lock the discard takes, so the purge is declined, which mimalloc takes as the
/// range kept as it is. Returns whether the range was decommitted (then mimalloc
/// commits it again before reuse).
unsafe extern "C" fn arena_commit(
    commit: bool,
    start: *mut c_void,
    size: usize,
    is_zero: *mut bool,
    _arg: *mut c_void,
) -> bool {
    if commit {
        if !is_zero.is_null() {
            // SAFETY: mimalloc's out-parameter.
            unsafe { *is_zero = false };
        }
        return true;
    }
    if !alloc::in_program_call() {
        return false;
    }
    let Some(runtime) = RUNTIME.get() else { return false };
    let (paged_start, paged_end) = runtime.paged_bounds();
    let (start, end) = ((start as u64).max(paged_start), (start as u64 + size as u64).min(paged_end));
    if start >= end {
        return false;
    }
    let _internal = Internal::enter();
    runtime.program_discard(start, end - start) == 0
}

fn start(config: RunConfig) -> Result<(), String> {
    // No transparent huge pages in this process, before the pager allocates its tables
    // (as mimalloc's own `allow_thp=0` does). Those come from mimalloc's default heap,
    // which asks for huge pages, and a huge page makes one touched byte 2 MiB resident,
    // outside the paged heap and so out of its budget under --memory (figures:
    // docs/measurements/2026-11-pager.md). The paged arena never had them (userfaultfd
    // maps its pages one by one). Inherited by forks and programs executed, as the kernel
    // keeps the flag: a program that wants huge pages gets none under znswap run (redis,
    // for one, asks for them to be off).
    // SAFETY: a flag of this process, no memory involved.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        return Err(format!("disabling transparent huge pages: {}", std::io::Error::last_os_error()));
    }
    let arena_bytes = config.arena_bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    let slack_pages = config.pager.core.slack_pages;
    let served_at = match (config.serve_fd, &config.daemon) {
        (Some(fd), _) => Some(served::PagerAt::Fd(fd)),
        (None, Some(path)) => Some(served::PagerAt::Daemon(path)),
        (None, None) => None,
    };
    let (paging, heap, pager_buffers, budget_floor_bytes) = match served_at {
        Some(at) => {
            let token = config.tenant_token.as_deref().map(|hex| {
                znswap_wire::Token::from_hex(hex).ok_or_else(|| format!("the tenant's token {hex:?} is not one"))
            });
            let (served, heap) = served::start(at, arena_bytes, config.memory_bytes, token.transpose()?)?;
            (Paging::Served(served), heap, 0, BUDGET_FLOOR_BYTES)
        }
        None => {
            let (pager, region, paged, heap) = start_here(&config, arena_bytes)?;
            let buffers = pager.buffers_bytes();
            let floor = BUDGET_FLOOR_BYTES.max(pager.budget_bytes_min());
            (Paging::Here { pager, region, paged }, heap, buffers, floor)
        }
    };
    let runtime = Runtime {
        paging,
        arena_bytes,
        memory_bytes: config.memory_bytes,
        charged_max_bytes: std::sync::atomic::AtomicU64::new(0),
        slack_pages,
        rest_floor_bytes: resident_set().map_or(0, |set| set.charged) + pager_buffers,
        budget_floor_bytes,
        stats: if config.descendant {
            run_env::descendant_stats_path(&config.stats, std::process::id())
        } else {
            config.stats
        },
        pid: std::process::id(),
        descendant: config.descendant,
    };
    if RUNTIME.set(runtime).is_err() {
        return Err("the library was started twice".into());
    }
    wrap::find_spawners();
    alloc::PAGED_HEAP.store(heap, std::sync::atomic::Ordering::Release);
    // The budget from what the program holds already, before its `main`; and a first
    // report, so the launcher knows the pager started, however the program ends.
    govern();
    write_report(false);
    // Detached: it holds the budget to --memory every 100 ms and writes the figures (and
    // saves the device's counters) each second until the process ends, so a program
    // that ends by a signal leaves them as of its last second.
    PagerThread::spawn("znswap-stats", "stats thread", Some(alloc::mark_internal_thread), || {
        for tick in 1u64.. {
            std::thread::sleep(Duration::from_millis(100));
            govern();
            STATS_THREAD_CPU_NS.store(znswap_pager::thread_cpu_ns(), std::sync::atomic::Ordering::Relaxed);
            if tick % 10 == 0 {
                write_report(false);
            }
        }
    })
    .map_err(|error| format!("starting the stats thread: {error}"))?;
    // SAFETY: registers a plain function; it runs at exit on the exiting thread.
    unsafe { libc::atexit(at_exit) };
    Ok(())
}

/// The smallest budget the governor leaves the paged heap, whatever the rest takes: a
/// few eviction rounds' worth, so the pager still works (a program whose unpaged memory
/// alone passes `--memory` is over its limit, as it would be under a cgroup).
const BUDGET_FLOOR_BYTES: u64 = 4 << 20;

/// Holds the program's anonymous memory (its heap, its own anonymous and shared
/// mappings, the pager's tables and buffers) within `--memory`: the paged heap's budget
/// is what the rest leaves, less the slack faults may use above it. Mapped files (the
/// program's code and libraries) are not counted: a memory cgroup at the same limit
/// takes them back from the program and maps them again from the shared page cache on
/// use (redis under one kept little of its files resident; counted here they would take
/// from the heap: docs/measurements/2026-11-run.md), which a pager in user space cannot
/// do. Measured at start and every 100 ms (a program's unpaged memory grows fast at its
/// start, the pager's own buffers with its first swap-outs and GC); moved when it is off
/// by a MiB or more.
fn govern() {
    let Some(runtime) = RUNTIME.get() else { return };
    if std::process::id() != runtime.pid {
        return;
    }
    let Some(rss) = resident_set().map(|set| set.charged) else { return };
    runtime.charged_max_bytes.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
    // Under --serve the launcher governs (it has the pager); the peak above is still
    // this process's to report.
    let Some(pager) = runtime.pager() else { return };
    pager.tick();
    let paged = pager.stats().core.resident_pages * znswap_pager::PAGE_BYTES as u64;
    let rest = rss.saturating_sub(paged).max(runtime.rest_floor_bytes);
    let slack = runtime.slack_pages * znswap_pager::PAGE_BYTES as u64;
    run_env::hold_budget(pager, runtime.memory_bytes, rest, slack, runtime.budget_floor_bytes);
}

/// The stats thread's own CPU time, as it last charged it (the pager counts its threads').
static STATS_THREAD_CPU_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn resident_set() -> Option<ResidentSet> {
    ResidentSet::of("/proc/self/status")
}

/// Whether `[start, start + len)` overlaps the paged arena.
pub(crate) fn overlaps_arena(start: u64, len: u64) -> bool {
    let (region_start, region_end) = arena_bounds();
    start < region_end && start.saturating_add(len) > region_start
}

/// The paged region's `[start, end)` (empty before the pager runs).
pub(crate) fn arena_bounds() -> (u64, u64) {
    RUNTIME.get().map_or((0, 0), |runtime| match &runtime.paging {
        Paging::Here { region, .. } => {
            let start = region.as_ptr() as u64;
            (start, start + region.len() as u64)
        }
        Paging::Served(served) => served.bounds(),
    })
}

/// The last figures, as the process ends (its exit handlers, or `_exit`).
pub(crate) extern "C" fn at_exit() {
    let _internal = Internal::enter();
    let _ = std::panic::catch_unwind(|| write_report(true));
}

fn report(runtime: &Runtime, at_exit: bool) -> RunReport {
    let resident = resident_set().unwrap_or_default();
    let mut report = RunReport {
        pid: runtime.pid,
        at_exit,
        memory_bytes: runtime.memory_bytes,
        rss_bytes: resident.now,
        rss_max_bytes: resident.max,
        slack_pages: runtime.slack_pages,
        arena_bytes: runtime.arena_bytes,
        rss_anon_bytes: resident.anon,
        rss_file_bytes: resident.file,
        memory_used_max_bytes: runtime
            .charged_max_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(resident.charged),
        overflow_bytes: alloc::OVERFLOW_BYTES.load(std::sync::atomic::Ordering::Relaxed),
        mlocks_ignored: wrap::MLOCKS_IGNORED.load(std::sync::atomic::Ordering::Relaxed),
        forks: wrap::FORKS.load(std::sync::atomic::Ordering::Relaxed),
        mmaps_paged: mapping::MMAPS_PAGED.load(std::sync::atomic::Ordering::Relaxed),
        mapped_bytes: mapping::MAPPED_BYTES.load(std::sync::atomic::Ordering::Relaxed),
        cpu_ns: znswap_pager::process_cpu_ns(),
        stats_thread_cpu_ns: STATS_THREAD_CPU_NS.load(std::sync::atomic::Ordering::Relaxed),
        ..RunReport::default()
    };
    // Under --serve the launcher adds its pager's figures to what it reads.
    if let Some(pager) = runtime.pager() {
        report.set_pager_figures(pager);
    }
    if served::PAGER_GONE.load(std::sync::atomic::Ordering::Relaxed) {
        report.pager_gone = true;
        report.pager.core.lost_pages = served::PAGES_LOST.load(std::sync::atomic::Ordering::Relaxed);
    }
    report
}

/// Writes the figures to the stats file, whole (a temporary file renamed over it), so
/// the launcher never reads half a report.
fn write_report(at_exit: bool) {
    let Some(runtime) = RUNTIME.get() else { return };
    if std::process::id() != runtime.pid {
        return;
    }
    // Under --serve the launcher completes the figures and writes them where readers look.
    let served_path;
    let path = match runtime.pager() {
        Some(pager) => {
            pager.device().save_counters();
            &runtime.stats
        }
        None if runtime.descendant => &runtime.stats,
        None => {
            served_path = run_env::program_stats_path(&runtime.stats);
            &served_path
        }
    };
    report(runtime, at_exit).write(path);
}

#[cfg(test)]
mod tests {
    use libmimalloc_sys as mi;

    #[test]
    fn the_purge_delay_option_is_mimalloc_v3s() {
        // v3's `purge_delay` defaults to 1000 ms; at v2's index (14) v3 has a deprecated
        // option, and at 15 anything but the purge delay would read otherwise.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an option.
        let delay = unsafe { mi::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000, "option {} is not mimalloc's purge delay", super::MI_OPTION_PURGE_DELAY);
    }
}
