//! `znswap run`'s default: the launcher serves the program's whole process tree as the
//! daemon serves a tenant (`znswap_daemon::Embedded`, on a socket in a private
//! directory). The program and every process it forks or executes hand their heaps to
//! the launcher's pager and join the one tenant the launcher opened, so `--memory` holds
//! them together, as a memory cgroup holds a tree.
//!
//! The governor here holds the tree to `--memory` every 100 ms: what the tree's
//! processes hold outside their paged heaps (stacks, memory from before their library
//! started, processes no preload reaches) comes out of the paged heaps' budget. What the
//! launcher holds (the pager's tables and buffers) is the swap system's, not the
//! program's: a memory cgroup does not charge the kernel's swap tables (`swap_map`, the
//! swap cgroup map, the swap cache) to the cgroup whose pages they describe either, so
//! the launcher's memory is measured and reported beside the tree's, not taken from it.
//! The governor also finds processes of the tree that are not paged (a statically linked
//! program, an environment without `LD_PRELOAD`) and says so at once; their memory counts
//! all the same.
//!
//! The launcher is the tree's subreaper (`PR_SET_CHILD_SUBREAPER`): a process whose
//! parent exits stays in the tree (its pager is here), and the launcher waits for the
//! whole tree, not only the program.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use znswap_daemon::{DaemonConfig, Embedded};
use znswap_pager::run_env::{hold_budget, ResidentSet};
use znswap_pager::{PagerConfig, PAGE_BYTES};
use znswap_zoned::{format_size, ZonedDevice};

/// How long a process of the tree may run before its library has joined the tenant
/// (its start-up, a fork's child connecting) before it is said to run unpaged.
const JOIN_GRACE: Duration = Duration::from_millis(750);

/// A process of the tree that runs unpaged.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Escape {
    pub pid: u32,
    pub command: String,
    pub why: String,
    /// The most anonymous memory it was seen holding (counted against `--memory`).
    pub memory_max_bytes: u64,
}

/// What the governor saw of the tree.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TreeFigures {
    /// The tree's anonymous memory at its highest (sampled every 100 ms): what
    /// `--memory` holds.
    pub memory_used_max_bytes: u64,
    /// The launcher's own anonymous memory at its highest: the pager's tables and
    /// buffers, not counted in `--memory` (the module's comment says why).
    pub pager_memory_max_bytes: u64,
    /// Processes of the tree seen, and the most alive at once.
    pub processes_seen: u64,
    pub processes_max: u64,
    /// Processes that ran unpaged.
    pub escaped: Vec<Escape>,
}

/// The launcher serving the tree: its daemon, the socket's private directory, and the
/// governor once the program runs.
pub struct Tree {
    pub embedded: Arc<Embedded>,
    pub socket: PathBuf,
    /// Removed (with the socket) when the tree is done.
    _dir: tempfile::TempDir,
    /// What the tree's processes are held to: `--memory` less the compressed pool.
    memory: u64,
    slack: u64,
    governor: Option<Governor>,
}

struct Governor {
    figures: Arc<Mutex<TreeFigures>>,
    /// Dropped to stop the governor at once (its wait between looks ends).
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Tree {
    /// Starts the launcher's daemon over `device` with `--memory memory`, paging with
    /// `pager` (checked against the device first).
    pub fn start(device: Box<dyn ZonedDevice>, device_name: PathBuf, memory: u64, pager: PagerConfig) -> Result<Tree> {
        let dir = tempfile::Builder::new()
            .prefix("znswap-run-")
            .tempdir()
            .context("creating a private directory for the pager's socket")?;
        let socket = dir.path().join("pager.sock");
        let slack = pager.core.slack_pages * PAGE_BYTES as u64;
        // The compressed pool is part of `--memory` (the daemon grants the rest).
        let granted = memory.saturating_sub(pager.compressed_pool_bytes);
        let embedded = Embedded::start(DaemonConfig {
            device,
            device_name,
            memory,
            pager,
            socket: socket.clone(),
            socket_given: false,
            allow_uids: Vec::new(),
            write_limit: None,
            swap_limit_pages: None,
        })?;
        Ok(Tree { embedded: Arc::new(embedded), socket, _dir: dir, memory: granted, slack, governor: None })
    }

    /// Starts holding the tree under the launcher to `--memory` (its pages are the
    /// daemon's tenant `tenant`'s).
    pub fn govern(&mut self, tenant: u32) -> Result<()> {
        // SAFETY: a flag of this process.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error()).context("becoming the tree's subreaper");
        }
        let figures = Arc::new(Mutex::new(TreeFigures::default()));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let embedded = self.embedded.clone();
        let mut watch = Watch { tenant, memory: self.memory, slack: self.slack, ..Watch::default() };
        // Once now, before the program's memory grows: the grant was the whole of it.
        watch.tick(&embedded, &figures);
        let thread = {
            let figures = figures.clone();
            std::thread::Builder::new()
                .name("znswap-govern".into())
                .spawn(move || {
                    // A look every 100 ms until the sender is dropped (a short program's
                    // end waits for no sleep).
                    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_millis(100)) {
                        watch.tick(&embedded, &figures);
                    }
                })
                .context("starting the tree's governor")?
        };
        self.governor = Some(Governor { figures, stop, thread });
        Ok(())
    }

    /// The governor stopped, the device's counters saved; what it saw.
    pub fn stop(&mut self) -> TreeFigures {
        self.embedded.pager().device().save_counters();
        let Some(governor) = self.governor.take() else { return TreeFigures::default() };
        drop(governor.stop);
        let _ = governor.thread.join();
        let figures = governor.figures.lock().unwrap().clone();
        figures
    }
}

/// The governor's memory of the tree between ticks.
#[derive(Default)]
struct Watch {
    /// The daemon's tenant the tree is, `--memory`, and the pager's slack in bytes.
    tenant: u32,
    memory: u64,
    slack: u64,
    /// When each process of the tree was first seen, and its most anonymous memory.
    seen: BTreeMap<u32, (Instant, u64)>,
    /// Processes said to run unpaged.
    escaped: BTreeSet<u32>,
}

impl Watch {
    /// One look at the tree: the budget held, the figures kept, processes that escaped
    /// the pager said.
    fn tick(&mut self, embedded: &Embedded, figures: &Mutex<TreeFigures>) {
        let pager = embedded.pager();
        // The tree's hot thread pinned with the handlers, or let go (`--no-colocate`:
        // never), and the handlers' polling let or stopped.
        pager.tick();
        let tree = descendants(std::process::id());
        let served: BTreeSet<u32> = pager.served_pids().into_iter().collect();
        // (The launcher's own memory is reported, not counted: its resident set will do.)
        let launcher = ResidentSet::of("/proc/self/status").map_or(0, |set| set.charged);
        // A process alone shares no pages with another of the tree: its counters say
        // what a cgroup charges it at no cost (its proportional share walks its page
        // tables, ten times a second; docs/measurements/2026-12-suite.md).
        let shared = tree.len() > 1;
        let mut charged = 0;
        let mut escapes = Vec::new();
        for &pid in &tree {
            let Some(held) = charged_of(&format!("/proc/{pid}"), shared) else { continue };
            charged += held;
            let now = Instant::now();
            let (first, max) = self.seen.entry(pid).or_insert((now, 0));
            *max = (*max).max(held);
            let late = now.duration_since(*first) >= JOIN_GRACE;
            if !served.contains(&pid) && !self.escaped.contains(&pid) {
                match why_unpaged(pid) {
                    Some((why, at_once)) if at_once || late => {
                        self.escaped.insert(pid);
                        escapes.push(Escape { pid, command: command_of(pid), why, memory_max_bytes: *max });
                    }
                    _ => {}
                }
            }
        }
        // The paged heaps' resident pages live in the tree's anonymous memory: the rest
        // of it comes out of their budget.
        let paged = pager.tenant_figures(self.tenant).resident_pages * PAGE_BYTES as u64;
        let rest = charged.saturating_sub(paged);
        let floor = pager.budget_bytes_min().max(BUDGET_FLOOR_BYTES);
        hold_budget(pager, self.memory, rest, self.slack, floor);
        let mut figures = figures.lock().unwrap();
        figures.memory_used_max_bytes = figures.memory_used_max_bytes.max(charged);
        figures.pager_memory_max_bytes = figures.pager_memory_max_bytes.max(launcher);
        figures.processes_seen = self.seen.len() as u64;
        figures.processes_max = figures.processes_max.max(tree.len() as u64);
        for escape in &mut figures.escaped {
            if let Some(&(_, max)) = self.seen.get(&escape.pid) {
                escape.memory_max_bytes = max;
            }
        }
        for escape in escapes {
            eprintln!(
                "znswap run: pid {} ({}) runs unpaged: {}; its memory counts against --memory all the same ({} now)",
                escape.pid,
                escape.command,
                escape.why,
                format_size(escape.memory_max_bytes)
            );
            figures.escaped.push(escape);
        }
    }
}

/// The least the governor leaves the paged heaps, whatever the rest takes: a few
/// eviction rounds' worth, so the pager still works (a tree whose unpaged memory alone
/// passes `--memory` is over its limit, as it would be under a cgroup).
const BUDGET_FLOOR_BYTES: u64 = 4 << 20;

/// What `--memory` holds of the process at `proc` (`/proc/PID`): its anonymous and
/// shared memory, with `shared` (other processes in the tree) each page shared with
/// another process (a fork's, copy-on-write) counted in proportion (`Pss_Anon +
/// Pss_Shmem`), so the tree's sum counts each page once, as a memory cgroup charges it.
fn charged_of(proc: &str, shared: bool) -> Option<u64> {
    if !shared {
        return ResidentSet::of(&format!("{proc}/status")).map(|set| set.charged);
    }
    let rollup = std::fs::read_to_string(format!("{proc}/smaps_rollup")).ok();
    let kib = |text: &str, key: &str| -> Option<u64> {
        let line = text.lines().find(|line| line.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib * 1024)
    };
    match rollup.as_deref().and_then(|text| Some(kib(text, "Pss_Anon:")? + kib(text, "Pss_Shmem:").unwrap_or(0))) {
        Some(pss) => Some(pss),
        // Kernels before 5.11 give no Pss_Anon: the resident set, shared pages whole.
        None => ResidentSet::of(&format!("{proc}/status")).map(|set| set.charged),
    }
}

/// Every live process below `root` (its children, theirs, …), from `/proc`.
pub fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid …": the command may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|at| &stat[at + 1..]) else { continue };
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("");
        let Some(ppid) = fields.next().and_then(|ppid| ppid.parse::<u32>().ok()) else { continue };
        if state != "Z" && state != "X" {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(pid) = next.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            found.push(child);
            next.push(child);
        }
    }
    found
}

/// A process's command line, or its name.
fn command_of(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = cmdline
        .split(|&byte| byte == 0)
        .filter(|word| !word.is_empty())
        .map(|w| String::from_utf8_lossy(w).into())
        .collect();
    if words.is_empty() {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
    } else {
        words.join(" ")
    }
}

/// Why a process of the tree the pager does not serve runs unpaged, and whether that is
/// sure at once (`None`: it is on its way, or gone). A statically linked program is
/// sure from its exec on (the kernel maps a dynamic program's loader at exec, and a
/// static one has none); a dynamic one without the library only once its loader had
/// time to map it.
fn why_unpaged(pid: u32) -> Option<(String, bool)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if maps.contains("libznswap_preload") {
        // Its library is there: it is joining, or it said why it could not (in its log).
        return None;
    }
    let dynamic =
        maps.lines().any(|line| line.contains("/ld-linux") || line.contains("/ld-musl") || line.contains("/ld-2."));
    Some(if dynamic {
        (
            "its environment has no LD_PRELOAD with znswap's library (cleared by the program that started it, or \
             a set-user-ID program)"
                .to_string(),
            false,
        )
    } else {
        ("it is statically linked: no preloaded library reaches a program without a dynamic loader".to_string(), true)
    })
}
