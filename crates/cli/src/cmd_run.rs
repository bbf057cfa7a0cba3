//! `znswap run -- CMD`: runs an unmodified program with its heap paged to a zoned
//! device. The launcher checks the device and the budget, starts CMD with the preload
//! library (`crates/preload`) in `LD_PRELOAD` and the configuration in the environment,
//! passes signals on, and at exit prints what the pager did (from the figures the
//! library writes) and returns CMD's exit status.

use std::io::IsTerminal;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use znswap_pager::run_env::{self, RunReport};
use znswap_pager::PAGE_BYTES;
use znswap_zoned::format_size;

use crate::device_path;

#[derive(Args)]
pub struct RunArgs {
    /// Resident memory the program's heap may use; the rest is swapped to the device.
    #[arg(long, default_value = "256M", value_parser = crate::size)]
    memory: u64,
    /// The zoned device [default: the embedded default device]. Its data is destroyed.
    #[arg(long, visible_alias = "path")]
    device: Option<PathBuf>,
    /// Where swapped-out pages go: per-core (a swap-zone per core that swaps out; here
    /// the pager's evictor does every swap-out, so one swap-zone), hot-cold (the
    /// paper's: two or more accesses in 16 samples is hot), lifetime (hot, warm and
    /// cold by returns while the live pages are rewritten 2.5 times, GC survivors by
    /// class, cost-benefit victims; a zone per class only while the device's free
    /// headroom pays for the zones it keeps open), tenant (a swap-zone per tenant).
    #[arg(long, default_value = "per-core", value_parser = crate::policy)]
    policy: znswap_core::PolicyKind,
    /// Threads resolving the program's page faults (one per program thread that may
    /// fault at once lets their reads be in flight together).
    #[arg(long, default_value_t = 2)]
    handler_threads: usize,
    /// Pages read ahead after a fault that continues a sequential run of faults, when
    /// their slots follow on the device (0: none; at most 32).
    #[arg(long, default_value_t = 0)]
    readahead: u32,
    /// Address space reserved for the heap [default: the budget plus the device's
    /// capacity, doubled for fragmentation, at most 8 GiB]. Costs about 9
    /// bytes of pager memory per 4 KiB page (the engine's owner table and the pager's
    /// page states), nothing else until used.
    #[arg(long, value_parser = crate::size)]
    arena: Option<u64>,
    /// Write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// Print the summary as JSON (on stderr, which the program shares) instead of a table.
    #[arg(long)]
    json: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    command: Vec<String>,
}

const LIBRARY: &str = "libznswap_preload.so";

/// The preload library: `$ZNSWAP_PRELOAD`, or next to this binary (where cargo builds
/// it), or in `../lib` beside an installed one.
fn find_library() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("ZNSWAP_PRELOAD").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        anyhow::ensure!(path.is_file(), "$ZNSWAP_PRELOAD names {}, which is not a file", path.display());
        return Ok(path);
    }
    let exe = std::env::current_exe().context("locating the znswap binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    // Test binaries live in target/<profile>/deps, the library one level up.
    for candidate in [dir.join(LIBRARY), dir.join("..").join(LIBRARY), dir.join("../lib").join(LIBRARY)] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize().unwrap_or(candidate));
        }
    }
    bail!(
        "the preload library {LIBRARY} is not next to {}; build it with `cargo build --release -p znswap-preload` \
         (or `cargo build --release --workspace`), or set ZNSWAP_PRELOAD to its path",
        exe.display()
    )
}

/// Signals passed on to the program; SIGUSR1 prints the figures instead.
const FORWARDED: [i32; 6] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR2, libc::SIGWINCH];

fn signal_set(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Runs the program; returns its exit status (128+N when a signal ended it).
pub fn run(args: RunArgs) -> Result<u8> {
    anyhow::ensure!(args.handler_threads > 0, "--handler-threads must be at least 1");
    let library = find_library()?;
    let device_path = args.device.clone().unwrap_or_else(device_path::default_path);
    // Check (and create, for the default) the device now, with errors that help, and
    // let it go: the program opens it (and locks it) itself.
    let capacity = {
        let device = device_path::open(args.device.as_deref())?;
        let geometry = device.geometry();
        geometry.zone_count as u64 * geometry.zone_capacity_bytes()
    };
    let min_budget = 4 << 20;
    anyhow::ensure!(
        args.memory >= min_budget,
        "--memory {} is too small: the pager needs at least {} (two eviction batches and its slack)",
        format_size(args.memory),
        format_size(min_budget)
    );
    let arena = args.arena.unwrap_or((2 * (args.memory + capacity)).min(run_env::ARENA_MAX_BYTES));
    anyhow::ensure!(arena > args.memory, "--arena must be larger than --memory");
    anyhow::ensure!(
        arena <= run_env::ARENA_MAX_BYTES,
        "--arena {} is more than the allocator can manage in one arena ({}); give a smaller one",
        format_size(arena),
        format_size(run_env::ARENA_MAX_BYTES)
    );

    // A private directory for the library's figures, removed however this ends.
    let stats_dir =
        tempfile::Builder::new().prefix("znswap-run-").tempdir().context("creating a temporary directory")?;
    let stats_path = stats_dir.path().join("stats.json");
    let (alive_read, alive_write) = pipe()?;

    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let before = std::env::var_os("LD_PRELOAD").unwrap_or_default();
    let mut preload = library.clone().into_os_string();
    if !before.is_empty() {
        preload.push(":");
        preload.push(&before);
    }
    command
        .env("LD_PRELOAD", preload)
        .env(run_env::LD_PRELOAD_BEFORE, &before)
        .env(run_env::DEVICE, &device_path)
        .env(run_env::MEMORY, args.memory.to_string())
        .env(run_env::ARENA, arena.to_string())
        .env(run_env::POLICY, args.policy.name())
        .env(run_env::HANDLERS, args.handler_threads.to_string())
        .env(run_env::READAHEAD, args.readahead.min(znswap_pager::READAHEAD_PAGES_MAX).to_string())
        .env(run_env::STATS, &stats_path)
        .env(run_env::ALIVE_FD, alive_write.to_string());
    // CPython keeps small objects in arenas it maps itself, which the pager would not
    // see; through malloc they are paged. (A user's own setting wins.)
    if std::env::var_os("PYTHONMALLOC").is_none() {
        command.env("PYTHONMALLOC", "malloc");
    }
    let forwarded = signal_set(&FORWARDED);
    let mut waited = FORWARDED.to_vec();
    waited.extend([libc::SIGUSR1, libc::SIGCHLD]);
    let waited = signal_set(&waited);
    // SAFETY: in the child between fork and exec: async-signal-safe calls only.
    unsafe {
        command.pre_exec(move || {
            // The alive pipe's write end stays open in the program (and its forks).
            libc::fcntl(alive_write, libc::F_SETFD, 0);
            libc::close(alive_read);
            let empty = signal_set(&[]);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    // Signals for the program are taken by `sigtimedwait` below, not by handlers.
    // SAFETY: blocking signals in this (single-threaded) launcher.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &waited, std::ptr::null_mut()) };
    let started = Instant::now();
    let mut child = command.spawn().with_context(|| format!("cannot run {}", args.command[0]))?;
    // SAFETY: our own descriptor; the child has its copy.
    unsafe { libc::close(alive_write) };
    let pid = child.id() as i32;
    let live = std::io::stderr().is_terminal();
    let mut last_live = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 200_000_000 };
        // SAFETY: waits for one of the blocked signals, or the timeout.
        let signal = unsafe { libc::sigtimedwait(&waited, std::ptr::null_mut(), &timeout) };
        // SAFETY: membership test on our set.
        if signal > 0 && unsafe { libc::sigismember(&forwarded, signal) } == 1 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, signal) };
        } else if signal == libc::SIGUSR1 {
            if let Some(report) = read_report(&stats_path) {
                eprintln!("{}", live_line(&report));
            }
        }
        if live && last_live.elapsed() >= Duration::from_secs(2) {
            last_live = Instant::now();
            if let Some(report) = read_report(&stats_path) {
                eprint!("\r{}\x1b[K", live_line(&report));
            }
        }
    };
    if live {
        eprint!("\r\x1b[K");
    }
    let elapsed = started.elapsed();
    let daemonized = outlived_by_forks(alive_read);
    let report = read_report(&stats_path);
    drop(stats_dir);
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        _ => 1,
    };
    if code == run_env::EXIT_PAGER_FAILED && report.is_none() {
        bail!("the pager did not start in {} (its message is above)", args.command[0]);
    }
    if daemonized {
        bail!(
            "{} daemonized (a forked child outlived it): znswap pages a program only while it runs in the foreground; \
             run it without its daemon option (memcached: drop -d; redis: --daemonize no)",
            args.command[0]
        );
    }
    let summary =
        Summary { command: args.command.join(" "), exit_status: code, seconds: elapsed.as_secs_f64(), report };
    if let Some(path) = &args.stats {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("writing the summary to {}", path.display()))?;
    }
    if args.json {
        eprintln!("{}", serde_json::to_string(&summary)?);
    } else {
        eprint!("{}", summary.table());
    }
    Ok(code.clamp(0, 255) as u8)
}

#[derive(serde::Serialize)]
struct Summary {
    command: String,
    exit_status: i32,
    seconds: f64,
    /// The library's last figures (none if the program ended before writing any).
    report: Option<RunReport>,
}

impl Summary {
    fn table(&self) -> String {
        let Some(r) = &self.report else {
            // The library writes its figures every second and at exit: none at all means
            // it never ran in the program, or the program ended without its exit handlers.
            return format!(
                "znswap run: {} exited ({}) after {:.1} s, and the pager reported nothing: it never ran in the \
                 program, or the program ended without running its exit handlers. Programs a command execs run \
                 without the pager, so if {} is a wrapper that execs the real program (a shell script, a pyenv \
                 shim), give the real program instead (e.g. /usr/bin/python3)\n",
                self.command,
                self.exit_status,
                self.seconds,
                self.command.split_whitespace().next().unwrap_or("the command")
            );
        };
        let page = PAGE_BYTES as u64;
        let waf = if r.host_bytes_written == 0 {
            1.0
        } else {
            (r.host_bytes_written + r.gc_bytes_written) as f64 / r.host_bytes_written as f64
        };
        let paged = r.resident_pages * page;
        let uncovered = r.rss_anon_bytes.saturating_sub(paged);
        let mut out =
            format!("znswap run: {} exited ({}) after {:.1} s\n", self.command, self.exit_status, self.seconds);
        let mut line = |name: &str, value: String| out.push_str(&format!("  {name:<22} {value}\n"));
        line(
            "swapped out / in",
            format!(
                "{} / {} pages ({} / {})",
                r.swapped_out_pages,
                r.swapped_in_pages,
                format_size(r.swapped_out_pages * page),
                format_size(r.swapped_in_pages * page)
            ),
        );
        line(
            "faults",
            format!(
                "{} missing, {} write-protect; p50 {:.1} us, p99 {:.1} us",
                r.missing_faults,
                r.write_protect_faults,
                r.fault_p50_ns as f64 / 1e3,
                r.fault_p99_ns as f64 / 1e3
            ),
        );
        let faults = r.missing_faults + r.write_protect_faults;
        if faults > 0 && r.fault_handled_ns > 0 {
            let per_fault = |ns: u64| ns as f64 / 1e3 / faults as f64;
            line(
                "fault time",
                format!(
                    "{:.1} us per fault in the handlers: device reads {:.1} ({} reads of {:.1} us), lock {:.1}, \
                     install {:.1}, waiting for room {:.1}",
                    per_fault(r.fault_handled_ns),
                    per_fault(r.fault_read_ns),
                    r.fault_reads,
                    r.fault_read_ns as f64 / 1e3 / r.fault_reads.max(1) as f64,
                    per_fault(r.fault_lock_wait_ns),
                    per_fault(r.fault_install_ns),
                    per_fault(r.budget_wait_ns)
                ),
            );
        }
        line(
            "resident max / budget",
            format!("{} / {}", format_size(r.resident_pages_max * page), format_size(r.budget_bytes)),
        );
        line("device WAF", format!("{waf:.2} ({} GC runs)", r.gc_runs));
        line("lost pages", r.lost_pages.to_string());
        line(
            "not covered",
            format!(
                "{} of anonymous memory outside the paged heap (the pager's own tables, stacks){}",
                format_size(uncovered),
                if r.overflow_bytes > 0 {
                    format!("; {} allocated outside a full arena", format_size(r.overflow_bytes))
                } else {
                    String::new()
                }
            ),
        );
        if r.mmaps_paged > 0 {
            line(
                "program mmaps",
                format!("{} paged ({} mapped at the end)", r.mmaps_paged, format_size(r.mapped_bytes)),
            );
        }
        if r.budget_overruns > 0 {
            line("past the budget", format!("{} faults (swap was full)", r.budget_overruns));
        }
        if r.device_errors > 0 {
            line("device errors", r.device_errors.to_string());
        }
        if r.mlocks_ignored > 0 {
            line("mlock ignored", format!("{} calls", r.mlocks_ignored));
        }
        out
    }
}

fn live_line(report: &RunReport) -> String {
    format!(
        "znswap: resident {} / {}, out {} in {} pages, fault p99 {:.0} us",
        format_size(report.resident_pages * PAGE_BYTES as u64),
        format_size(report.budget_bytes),
        report.swapped_out_pages,
        report.swapped_in_pages,
        report.fault_p99_ns as f64 / 1e3
    )
}

fn read_report(path: &Path) -> Option<RunReport> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// After the program exited: whether forked descendants that did not exec still hold
/// the alive pipe (waiting a moment for those on their way out).
fn outlived_by_forks(alive_read: i32) -> bool {
    let mut poll = libc::pollfd { fd: alive_read, events: libc::POLLIN, revents: 0 };
    let deadline = Instant::now() + Duration::from_millis(1500);
    loop {
        // SAFETY: polls one descriptor we own.
        let ready = unsafe { libc::poll(&mut poll, 1, 100) };
        if ready > 0 && poll.revents & (libc::POLLHUP | libc::POLLIN) != 0 {
            // A byte: a forked child found its parent gone and said so before stopping.
            let mut byte = [0u8; 1];
            // SAFETY: reads into our buffer from our own descriptor.
            let read = unsafe { libc::read(alive_read, byte.as_mut_ptr().cast(), 1) };
            // SAFETY: our own descriptor.
            unsafe { libc::close(alive_read) };
            return read == 1;
        }
        if Instant::now() >= deadline {
            // SAFETY: our own descriptor.
            unsafe { libc::close(alive_read) };
            return true;
        }
    }
}

fn pipe() -> Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: writes two descriptors into our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe");
    }
    Ok((fds[0], fds[1]))
}
