//! How `znswap run` hands its configuration to the preload library in the program: one
//! environment variable holding a [`RunConfig`] as JSON, with every value decided by the
//! launcher (the library applies no defaults of its own). The preload library removes it
//! (and itself from `LD_PRELOAD`) at start-up, so programs the paged one executes run
//! without the pager.

use std::path::PathBuf;

use znswap_pager_core::READAHEAD_PAGES_MAX;

use crate::config::{FaultMode, PagerConfig};
pub use crate::config::{EXIT_DAEMONIZED, EXIT_PAGER_FAILED};
use crate::pager::{Pager, PagerStats};

/// The variable that carries the [`RunConfig`].
pub const CONFIG: &str = "ZNSWAP_RUN_CONFIG";

/// Everything the library needs to start the pager in the program.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
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
    /// The pager's configuration, as the launcher decided it (`PagerConfig::for_run`
    /// and the flags): the library starts its pager with it (adding its thread hooks).
    pub pager: PagerConfig,
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
    /// The configuration for a program with `memory_bytes` of anonymous memory and an
    /// arena of `arena_bytes`, paged by `pager`, its figures written to `stats`, its
    /// processes holding `alive_fd` open: served by nobody but the program's own pager
    /// (set `serve_fd`, or `daemon` and `tenant_token`, for the others).
    pub fn new(
        device: PathBuf,
        memory_bytes: u64,
        arena_bytes: u64,
        pager: PagerConfig,
        stats: PathBuf,
        alive_fd: i32,
    ) -> RunConfig {
        RunConfig {
            device,
            memory_bytes,
            arena_bytes,
            pager,
            serve_fd: None,
            daemon: None,
            tenant_token: None,
            descendant: false,
            stats,
            alive_fd,
            ld_preload_before: None,
        }
    }

    /// Checks what the launcher decided: a library given a configuration it cannot run
    /// says which value is wrong rather than adjusting it.
    pub fn check(&self) -> Result<(), String> {
        // Handler threads, not self-paging: the kernel itself touches a program's heap
        // (`read()` into it, `write()` from it), and a SIGBUS handler cannot serve that.
        match self.pager.fault_mode {
            FaultMode::HandlerThreads(0) => {
                return Err("handler_threads is 0: at least one thread must serve faults".into())
            }
            FaultMode::SelfPaging => {
                return Err("fault_mode is SelfPaging: a program's heap needs handler threads".into())
            }
            FaultMode::HandlerThreads(_) => {}
        }
        if self.pager.core.readahead_pages > READAHEAD_PAGES_MAX {
            return Err(format!(
                "readahead_pages is {}: at most {}",
                self.pager.core.readahead_pages, READAHEAD_PAGES_MAX
            ));
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

/// The arena for `--memory memory_bytes` when none is given: room for the heap to grow
/// twice past what memory and swap (`swap_bytes`, the device's capacity) hold, within
/// what one allocator arena manages.
pub fn default_arena_bytes(memory_bytes: u64, swap_bytes: u64) -> u64 {
    (2 * (memory_bytes + swap_bytes)).min(ARENA_MAX_BYTES)
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
        self.pager = pager.stats();
        self.budget_bytes = pager.budget_bytes();
        self.fault_p50_ns = pager.fault_latency(0.5).0;
        self.fault_p99_ns = pager.fault_latency(0.99).0;
    }
}

/// What the library writes to the stats file.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RunReport {
    pub pid: u32,
    /// Written at exit (the last one), not a periodic snapshot.
    pub at_exit: bool,
    /// `--memory`: the limit on the program's anonymous memory (`RssAnon + RssShmem`).
    pub memory_bytes: u64,
    /// What `--memory` holds, at its highest as sampled every 100 ms.
    pub memory_used_max_bytes: u64,
    /// The program's mapped files resident now (`RssFile`), not counted in `--memory`.
    pub rss_file_bytes: u64,
    /// The program's resident set (anonymous, file and shared memory), now and at its
    /// highest (`VmHWM`).
    pub rss_bytes: u64,
    pub rss_max_bytes: u64,
    /// Anonymous memory resident in the process (`RssAnon`), of which the paged heap's
    /// resident pages are a part; the rest is memory the pager does not cover (the
    /// pager's own tables, stacks, mappings it could not page).
    pub rss_anon_bytes: u64,
    /// The paged heap's budget now: what the rest of the resident set leaves of
    /// `memory_bytes`.
    pub budget_bytes: u64,
    /// Pages faults may map above the budget before they wait for room.
    pub slack_pages: u64,
    pub arena_bytes: u64,
    /// Allocations made outside the arena because it was full.
    pub overflow_bytes: u64,
    /// mlock/mlockall calls neutralised.
    pub mlocks_ignored: u64,
    /// Forks whose child got a snapshot of the paged heap.
    pub forks: u64,
    /// Anonymous mappings the program made itself (`mmap`) served from paged memory, and
    /// the bytes of them mapped now.
    pub mmaps_paged: u64,
    pub mapped_bytes: u64,
    /// The pager serving the program from another process died while it ran
    /// (`znswap run --daemon`): the program served its own faults since, and its
    /// `lost_pages` are the pages that pager had swapped out and the program touched.
    pub pager_gone: bool,
    /// Fault latency as the handler threads saw it (reading the event to the wake).
    pub fault_p50_ns: u64,
    pub fault_p99_ns: u64,
    /// CPU time of the whole process so far (`CLOCK_PROCESS_CPUTIME_ID`), of which the
    /// pager's threads' by role are in `pager` and the stats thread's here: the
    /// program's threads had the rest.
    pub cpu_ns: u64,
    pub stats_thread_cpu_ns: u64,
    /// The pager's counters (`PagerStats`, one name each): the core's, the engine's
    /// and the shell's.
    pub pager: PagerStats,
}

#[cfg(test)]
mod tests {
    use super::{PagerConfig, RunConfig};

    /// What the launcher decides reaches the library's pager through the environment,
    /// unchanged (the run's flags mean the same in the program as on the command line).
    #[test]
    fn the_pager_gets_the_launchers_choices_through_the_environment() {
        for (park_pages, reference_sampling, wp_async) in [(0, true, false), (4096, false, true)] {
            let mut pager = PagerConfig::for_run(256 << 20);
            pager.core.park_pages = park_pages;
            pager.core.reference_sampling = reference_sampling;
            pager.core.wp_async = wp_async;
            pager.core.readahead_pages = 5;
            pager.fault_poll_us = 0;
            let config = RunConfig::new("/dev/null".into(), 256 << 20, 1 << 30, pager, "/tmp/stats.json".into(), -1);
            config.check().unwrap();
            let back: RunConfig = serde_json::from_str(&config.to_env()).unwrap();
            assert_eq!(back.to_env(), config.to_env());
            let pager = &back.pager;
            assert_eq!(
                (pager.core.park_pages, pager.core.reference_sampling, pager.core.wp_async),
                (park_pages, reference_sampling, wp_async)
            );
            assert_eq!((pager.core.readahead_pages, pager.fault_poll_us), (5, 0));
        }
    }

    /// A configuration the library cannot run is refused with the value named.
    #[test]
    fn a_self_paging_program_is_refused() {
        let mut pager = PagerConfig::for_run(256 << 20);
        pager.fault_mode = crate::config::FaultMode::SelfPaging;
        let config = RunConfig::new("/dev/null".into(), 256 << 20, 1 << 30, pager, "/tmp/stats.json".into(), -1);
        assert!(config.check().unwrap_err().contains("SelfPaging"));
    }
}
