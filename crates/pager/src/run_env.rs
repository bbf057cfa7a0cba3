//! How `znswap run` hands its configuration to the preload library in the program: one
//! environment variable holding a [`RunConfig`] as JSON, with every value decided by the
//! launcher (the library applies no defaults of its own). The preload library removes it
//! (and itself from `LD_PRELOAD`) at start-up, so programs the paged one executes run
//! without the pager.

use std::path::PathBuf;

use znswap_core::PolicyKind;
use znswap_pager_core::{GC_BATCH_PAGES_DEFAULT, PAGE_BYTES, READAHEAD_PAGES_MAX};

use crate::config::{FaultMode, PagerConfig};
pub use crate::config::{EXIT_DAEMONIZED, EXIT_PAGER_FAILED};
use crate::pager::Pager;

/// The variable that carries the [`RunConfig`].
pub const CONFIG: &str = "ZNSWAP_RUN_CONFIG";

/// Everything the library needs to start the pager in the program.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The device (checked, and created for the default device, by the launcher).
    pub device: PathBuf,
    /// The program's anonymous memory is held within this (`--memory`), as a memory
    /// cgroup's limit: the paged heap's budget is what the rest of it leaves, measured by
    /// the library at start and every 100 ms. In bytes.
    pub memory_bytes: u64,
    /// Address space reserved for the paged heap, in bytes.
    pub arena_bytes: u64,
    pub policy: PolicyKind,
    /// Fault handler threads (at least one).
    pub handler_threads: usize,
    /// Pages read ahead after a sequential fault, at most `READAHEAD_PAGES_MAX`.
    pub readahead_pages: u32,
    /// How long a handler thread polls for the next fault before it sleeps, at most, in
    /// microseconds (`PagerConfig::fault_poll_us`).
    pub fault_poll_us: u32,
    /// Pages of the inactive list (`PagerConfig::park_pages`; 0: none).
    pub park_pages: u64,
    /// The CLOCK hand write-protects the pages whose bit it clears
    /// (`PagerConfig::reference_sampling`).
    pub reference_sampling: bool,
    /// Writes are seen without faults (`PagerConfig::wp_async`).
    #[serde(default)]
    pub wp_async: bool,
    /// Tests only: some moves done are reported failed
    /// (`PagerConfig::misreport_moves_every`; 0: none).
    #[serde(default)]
    pub misreport_moves_every: u32,
    /// Pins the thread that takes nearly all the faults with the fault handlers
    /// (`PagerConfig::colocate`).
    #[serde(default)]
    pub colocate: bool,
    /// Seal every swapped page (`PagerConfig::encrypt`).
    #[serde(default)]
    pub encrypt: bool,
    /// The launcher serves the program's memory from its own process
    /// (`znswap run --serve`, `docs/daemon.md`): the library hands its arena over on this
    /// socket (`znswap_wire`) instead of starting a pager.
    #[serde(default)]
    pub serve_fd: Option<i32>,
    /// `znswap daemon`'s socket (`znswap run --daemon`): the library connects there and
    /// hands its arena over, and the daemon's pager serves it.
    #[serde(default)]
    pub daemon: Option<PathBuf>,
    /// Under `daemon`: the token of the tenant the launcher opened for the program
    /// (hex, `Token::to_hex`). Every process of the program joins that tenant with it,
    /// the programs it executes too: the library keeps itself and this configuration in
    /// their environment.
    #[serde(default)]
    pub tenant_token: Option<String>,
    /// This process is one the program executed (directly or further down), not the
    /// program the launcher started: it joins the tenant, writes its figures beside the
    /// program's (`descendant_stats_path`), and has no alive pipe (`alive_fd` is -1).
    #[serde(default)]
    pub descendant: bool,
    /// Where the library writes its figures as JSON: at start, every second, at exit.
    pub stats: PathBuf,
    /// A pipe's write end the program and its forked (not exec'd) descendants keep
    /// open: the launcher sees it close when the last of them is gone, and so learns
    /// that a program daemonized (its forked child outlived it).
    pub alive_fd: i32,
    /// `LD_PRELOAD` as it was before the launcher added the library (restored at
    /// start-up), if it was set.
    pub ld_preload_before: Option<String>,
}

impl RunConfig {
    /// Checks what the launcher decided: a library given a configuration it cannot run
    /// says which value is wrong rather than adjusting it.
    pub fn check(&self) -> Result<(), String> {
        if self.handler_threads == 0 {
            return Err("handler_threads is 0: at least one thread must serve faults".into());
        }
        if self.readahead_pages > READAHEAD_PAGES_MAX {
            return Err(format!("readahead_pages is {}: at most {}", self.readahead_pages, READAHEAD_PAGES_MAX));
        }
        if self.tenant_token.is_some() && self.daemon.is_none() {
            return Err("tenant_token without daemon: a tenant is the daemon's".into());
        }
        if self.descendant && self.tenant_token.is_none() {
            return Err("descendant without tenant_token: only a daemon's tenant takes in executed programs".into());
        }
        if self.arena_bytes <= self.memory_bytes || self.arena_bytes > ARENA_MAX_BYTES {
            return Err(format!(
                "arena_bytes {} must be above memory_bytes {} and at most {ARENA_MAX_BYTES}",
                self.arena_bytes, self.memory_bytes
            ));
        }
        Ok(())
    }

    /// The pager's configuration: the launcher checks it against the device
    /// (`Pager::check`) before the program starts, and the library starts the pager with
    /// it (adding its thread hooks).
    pub fn pager_config(&self) -> PagerConfig {
        let memory_pages = self.memory_bytes / PAGE_BYTES as u64;
        PagerConfig {
            policy: self.policy,
            // The arena is the one region.
            regions_max: 2,
            // Handler threads, not self-paging: the kernel itself touches a program's
            // heap (`read()` into it, `write()` from it), and a SIGBUS handler cannot
            // serve that.
            fault_mode: FaultMode::HandlerThreads(self.handler_threads),
            readahead_pages: self.readahead_pages,
            fault_poll_us: self.fault_poll_us,
            park_pages: self.park_pages,
            reference_sampling: self.reference_sampling,
            wp_async: self.wp_async,
            misreport_moves_every: self.misreport_moves_every,
            colocate: self.colocate,
            encrypt: self.encrypt,
            // Whatever the pager holds comes out of --memory, so it holds what it uses.
            // The slack: 1/64 of --memory, 256 pages (1 MiB) at most. Above the budget it
            // is room only bursts of faults use (measured, redis in 64 MiB: at most 356
            // pages over the budget), while the kernel's memory cgroup lets the program
            // have its whole limit; the default 4 MiB sat idle.
            slack_pages: (memory_pages / 64).clamp(64, 256),
            // The GC's buffer (twice a batch) is resident once the GC runs: 1/64 of
            // --memory (a batch of 1/128), 8 MiB at most, not 8 MiB from 64 MiB up.
            gc_batch_pages: (memory_pages / 128).clamp(64, GC_BATCH_PAGES_DEFAULT as u64) as u32,
            // Started at the whole of --memory; the library lowers it at once.
            ..PagerConfig::new(self.memory_bytes)
        }
    }

    /// The value of [`CONFIG`].
    pub fn to_env(&self) -> String {
        serde_json::to_string(self).expect("a run configuration serializes")
    }

    /// The launcher's configuration from the environment; `None` when the library was
    /// loaded without one (preloaded by hand, or in a program the paged one executed).
    pub fn from_env() -> Result<Option<RunConfig>, String> {
        let Some(value) = std::env::var_os(CONFIG) else { return Ok(None) };
        let value = value.into_string().map_err(|_| format!("{CONFIG} is not UTF-8"))?;
        let config: RunConfig = serde_json::from_str(&value)
            .map_err(|error| format!("{CONFIG} is not a configuration of this znswap ({error}): {value}"))?;
        config.check()?;
        Ok(Some(config))
    }
}

/// The largest arena. mimalloc v3 covers at most 16 GiB with one arena's bitmaps and
/// splits larger memory into several, but here it refused 15.9 GiB (and 20.6 GiB) while
/// 8.8 GiB worked; why is not known yet, so arenas stop at 8 GiB.
pub const ARENA_MAX_BYTES: u64 = 8 << 30;

/// A process's resident set, from one read of its `status` file, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResidentSet {
    /// `RssAnon + RssFile + RssShmem`: the whole resident set.
    pub now: u64,
    /// At its highest (`VmHWM`).
    pub max: u64,
    /// `RssAnon`: anonymous memory, the paged heap's resident pages among it.
    pub anon: u64,
    /// `RssAnon + RssShmem`: what `--memory` holds.
    pub charged: u64,
    /// `RssFile`: mapped files, not counted.
    pub file: u64,
}

impl ResidentSet {
    /// From `status` (`/proc/self/status`, `/proc/PID/status`).
    pub fn of(status: &str) -> Option<ResidentSet> {
        let status = std::fs::read_to_string(status).ok()?;
        let kib = |key: &str| -> Option<u64> {
            let line = status.lines().find(|line| line.starts_with(key))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib * 1024)
        };
        let anon = kib("RssAnon:")?;
        let file = kib("RssFile:")?;
        let charged = anon + kib("RssShmem:").unwrap_or(0);
        let now = charged + file;
        Some(ResidentSet { now, max: kib("VmHWM:").unwrap_or(now), anon, charged, file })
    }
}

/// Holds `--memory` (`memory`): the paged heap's budget is what the rest of the
/// anonymous memory (`rest`) leaves, less the slack faults may use above it, never below
/// `floor`; moved when it is off by a MiB or more. (The library's governor, and under
/// `--serve` the launcher's.)
pub fn hold_budget(pager: &Pager, memory: u64, rest: u64, slack: u64, floor: u64) {
    let budget = memory.saturating_sub(rest + slack).max(floor);
    if budget.abs_diff(pager.budget_bytes()) >= 1 << 20 {
        let _ = pager.set_budget(budget);
    }
}

/// Where the library writes its figures under `--serve` (`RunConfig::serve_fd`): the
/// launcher reads them there, adds its pager's and writes the whole report to
/// `RunConfig::stats`, where readers look.
pub fn program_stats_path(stats: &std::path::Path) -> std::path::PathBuf {
    stats.with_extension("program.json")
}

/// Where a process the program executed (`RunConfig::descendant`) writes its figures.
pub fn descendant_stats_path(stats: &std::path::Path, pid: u32) -> std::path::PathBuf {
    stats.with_extension(format!("descendant.{pid}.json"))
}

/// The figures of every process the program executed, as they last wrote them.
pub fn descendant_reports(stats: &std::path::Path) -> Vec<RunReport> {
    let (Some(dir), Some(stem)) = (stats.parent(), stats.file_stem().and_then(|stem| stem.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{stem}.descendant.");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".json")
        })
        .filter_map(|entry| RunReport::read(&entry.path()))
        .collect()
}

impl RunReport {
    /// The report at `path`, if one is there whole.
    pub fn read(path: &std::path::Path) -> Option<RunReport> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Writes the report to `path` whole (a temporary file of this process's renamed
    /// over it), so a reader never reads half of one.
    pub fn write(&self, path: &std::path::Path) {
        let Ok(json) = serde_json::to_vec(self) else { return };
        let temporary = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&temporary, json).is_ok() {
            let _ = std::fs::rename(&temporary, path);
        }
    }

    /// The pager's figures into the report (the library's own pager's, or under
    /// `--serve` the launcher's, over the library's process figures).
    pub fn set_pager_figures(&mut self, pager: &Pager) {
        let stats = pager.stats();
        let (fault_p50_ns, _) = pager.fault_latency(0.5);
        let (fault_p99_ns, _) = pager.fault_latency(0.99);
        self.budget_bytes = pager.budget_bytes();
        self.swapped_out_pages = stats.swap_outs_written;
        self.swapped_in_pages = stats.swap_in_reads;
        self.readahead_pages_read = stats.readahead_pages_read;
        self.readahead_hits = stats.readahead_hits;
        self.pages_parked = stats.pages_parked;
        self.parked_touched = stats.parked_touched;
        self.park_refused = stats.park_refused;
        self.park_occupied = stats.park_occupied;
        self.unparks_copied = stats.unparks_copied;
        self.swap_outs_clean = stats.swap_outs_clean;
        self.swap_cache_dirtied = stats.swap_cache_dirtied;
        self.swap_cache_skipped = stats.swap_cache_skipped;
        self.victims_written = stats.victims_written;
        self.swap_cache_digest_dirtied = stats.swap_cache_digest_dirtied;
        self.pages_unshared = stats.pages_unshared;
        self.wp_markers_cleared = stats.wp_markers_cleared;
        self.moves_misreported = stats.moves_misreported;
        self.missing_faults = stats.missing_faults;
        self.write_protect_faults = stats.write_protect_faults;
        self.fault_p50_ns = fault_p50_ns;
        self.fault_p99_ns = fault_p99_ns;
        self.resident_pages = stats.resident_pages;
        self.resident_pages_max = stats.resident_pages_max;
        self.host_bytes_written = stats.host_bytes_written;
        self.gc_bytes_written = stats.gc_bytes_written;
        self.record_bytes_written = stats.record_bytes_written;
        self.gc_runs = stats.gc_runs;
        self.lost_pages = stats.lost_pages;
        self.pages_sealed = stats.pages_sealed;
        self.pages_failed_open = stats.pages_failed_open;
        self.budget_overruns = stats.budget_overruns;
        self.device_errors = stats.device_errors;
        self.fault_handled_ns = stats.fault_handled_ns;
        self.fault_lock_wait_ns = stats.fault_lock_wait_ns;
        self.fault_reads = stats.fault_reads;
        self.faults_polled = stats.faults_polled;
        self.fault_read_ns = stats.fault_read_ns;
        self.fault_install_ns = stats.fault_install_ns;
        self.fault_unlock_ns = stats.fault_unlock_ns;
        self.fault_wait_ns = stats.fault_wait_ns;
        self.budget_wait_ns = stats.budget_wait_ns;
        self.uptime_ns = stats.uptime_ns;
        self.fault_threads_cpu_ns = stats.fault_cpu_ns;
        self.evictor_threads_cpu_ns = stats.evictor_cpu_ns;
        self.io_threads_cpu_ns = stats.io_cpu_ns;
    }
}

/// What the library writes to the stats file.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    pub pid: u32,
    /// Written at exit (the last one), not a periodic snapshot.
    pub at_exit: bool,
    /// `--memory`: the limit on the program's anonymous memory (`RssAnon + RssShmem`).
    #[serde(default)]
    pub memory_bytes: u64,
    /// What `--memory` holds, at its highest as sampled every 100 ms.
    #[serde(default)]
    pub memory_used_max_bytes: u64,
    /// The program's mapped files resident now (`RssFile`), not counted in `--memory`.
    #[serde(default)]
    pub rss_file_bytes: u64,
    /// The program's resident set (anonymous, file and shared memory), now and at its
    /// highest (`VmHWM`).
    #[serde(default)]
    pub rss_bytes: u64,
    #[serde(default)]
    pub rss_max_bytes: u64,
    /// The paged heap's budget now: what the rest of the resident set leaves of
    /// `memory_bytes`.
    pub budget_bytes: u64,
    /// Pages faults may map above the budget before they wait for room.
    #[serde(default)]
    pub slack_pages: u64,
    pub arena_bytes: u64,
    pub swapped_out_pages: u64,
    /// Pages read from the device (read-ahead pages included), as the kernel's `pswpin`.
    pub swapped_in_pages: u64,
    /// Pages read ahead, and faults served from them with no device read.
    #[serde(default)]
    pub readahead_pages_read: u64,
    #[serde(default)]
    pub readahead_hits: u64,
    /// Victims parked on the inactive list, parked pages the program touched (brought
    /// back with no device read), and victims the kernel would not move.
    #[serde(default)]
    pub pages_parked: u64,
    #[serde(default)]
    pub parked_touched: u64,
    #[serde(default)]
    pub park_refused: u64,
    /// Victims kept because their shadow page still awaited its discard.
    #[serde(default)]
    pub park_occupied: u64,
    #[serde(default)]
    pub unparks_copied: u64,
    /// Swapped-in pages evicted again clean (their slot kept: no write), written after
    /// their swap-in while their slot was kept (a write-protect fault each), and mapped
    /// writable at once with their slot dropped (kept slots were mostly written).
    #[serde(default)]
    pub swap_outs_clean: u64,
    #[serde(default)]
    pub swap_cache_dirtied: u64,
    #[serde(default)]
    pub swap_cache_skipped: u64,
    /// Asynchronous write protection (`--wp-async`): victims found written by the scan,
    /// cached pages whose digest showed them written, pages shared with a fork's child
    /// made the parent's, write-protect markers cleared.
    #[serde(default)]
    pub victims_written: u64,
    #[serde(default)]
    pub swap_cache_digest_dirtied: u64,
    #[serde(default)]
    pub pages_unshared: u64,
    #[serde(default)]
    pub wp_markers_cleared: u64,
    /// Moves to or from a shadow page the kernel did though the call failed
    /// (`PagerStats::moves_misreported`).
    #[serde(default)]
    pub moves_misreported: u64,
    pub missing_faults: u64,
    pub write_protect_faults: u64,
    pub fault_p50_ns: u64,
    pub fault_p99_ns: u64,
    pub resident_pages: u64,
    pub resident_pages_max: u64,
    pub host_bytes_written: u64,
    pub gc_bytes_written: u64,
    /// Chunk footers and their padding (devices without per-LBA metadata).
    #[serde(default)]
    pub record_bytes_written: u64,
    pub gc_runs: u64,
    pub lost_pages: u64,
    /// The pager serving the program from another process died while it ran
    /// (`znswap run --daemon`): the program served its own faults since, and its
    /// `lost_pages` are the pages that pager had swapped out and the program touched.
    #[serde(default)]
    pub pager_gone: bool,
    /// With `--encrypt`: pages sealed on their way out, and pages read back that failed
    /// to open (altered on the device; each is lost).
    #[serde(default)]
    pub pages_sealed: u64,
    #[serde(default)]
    pub pages_failed_open: u64,
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
    /// Faults a handler thread found while polling for the next one (`--fault-poll`).
    #[serde(default)]
    pub faults_polled: u64,
    #[serde(default)]
    pub fault_read_ns: u64,
    #[serde(default)]
    pub fault_install_ns: u64,
    /// The releases of the pager's lock in faults (the wake-ups given then), and the
    /// faults' pauses and waits for other actors (a page on its way out; not room).
    #[serde(default)]
    pub fault_unlock_ns: u64,
    #[serde(default)]
    pub fault_wait_ns: u64,
    #[serde(default)]
    pub budget_wait_ns: u64,
    pub uptime_ns: u64,
    /// CPU time of the whole process so far (`CLOCK_PROCESS_CPUTIME_ID`), and of the
    /// pager's threads by role (each thread's clock, as the pager counts it): the
    /// program's threads had the rest.
    #[serde(default)]
    pub cpu_ns: u64,
    #[serde(default)]
    pub fault_threads_cpu_ns: u64,
    #[serde(default)]
    pub evictor_threads_cpu_ns: u64,
    #[serde(default)]
    pub io_threads_cpu_ns: u64,
    #[serde(default)]
    pub stats_thread_cpu_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::{PolicyKind, RunConfig};

    /// What the launcher decides reaches the library's pager through the environment,
    /// unchanged (the run's flags mean the same in the program as on the command line).
    #[test]
    fn the_pager_gets_the_launchers_choices_through_the_environment() {
        for (park_pages, reference_sampling, wp_async) in [(0, true, false), (4096, false, true)] {
            let config = RunConfig {
                device: "/dev/null".into(),
                memory_bytes: 256 << 20,
                arena_bytes: 1 << 30,
                policy: PolicyKind::PerCore,
                handler_threads: 2,
                readahead_pages: 8,
                fault_poll_us: 0,
                park_pages,
                reference_sampling,
                wp_async,
                misreport_moves_every: 0,
                colocate: true,
                encrypt: false,
                serve_fd: None,
                daemon: None,
                tenant_token: None,
                descendant: false,
                stats: "/tmp/stats.json".into(),
                alive_fd: -1,
                ld_preload_before: None,
            };
            config.check().unwrap();
            let back: RunConfig = serde_json::from_str(&config.to_env()).unwrap();
            let pager = back.pager_config();
            assert_eq!(
                (pager.park_pages, pager.reference_sampling, pager.wp_async),
                (park_pages, reference_sampling, wp_async)
            );
            assert_eq!(pager.readahead_pages, 8);
        }
    }
}
