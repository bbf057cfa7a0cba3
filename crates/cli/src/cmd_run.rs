//! `znswap run -- CMD`: runs an unmodified program with its heap paged to a zoned
//! device. The launcher checks the device and the budget, starts CMD with the preload
//! library (`crates/preload`) in `LD_PRELOAD` and the configuration in the environment,
//! passes signals on, and at exit prints what the pager did (from the figures the
//! library writes) and returns CMD's exit status.

use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use znswap_pager::run_env::{self, RunConfig, RunReport};
use znswap_pager::{Pager, PagerConfig, PAGE_BYTES};
use znswap_zoned::format_size;

use crate::device_path;
use crate::flags::{size, DeviceFlag, JsonFlag, MemoryFlag, PagerFlags};
use crate::progress::Progress;
use crate::run_tree::{self, Tree, TreeFigures};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    device: DeviceFlag,
    #[command(flatten)]
    memory: MemoryFlag,
    #[command(flatten)]
    pager: PagerFlags,
    /// Address space reserved for the heap [default: the budget plus the device's
    /// capacity, doubled for fragmentation, at most 8 GiB]. Costs about 9 bytes of
    /// pager memory per 4 KiB page (the engine's owner table and the pager's page
    /// states), nothing else until used.
    #[arg(long, value_parser = size)]
    arena: Option<u64>,
    /// Leave the program's threads where the scheduler puts them
    ///
    /// By default, a thread of the program that takes nine in ten of the faults (redis's,
    /// a Python interpreter's) is pinned to the CPU it ran on with the fault handlers,
    /// the pager's evictor and I/O thread kept to the other CPUs, while that lasts: a
    /// fault's round trip between two threads then costs two context switches rather
    /// than two wake-ups of other CPUs. A thread the program pinned itself is left alone,
    /// and forked children get the CPUs back. Figures: docs/measurements/2026-11-pager.md.
    #[arg(long)]
    no_colocate: bool,
    /// For tests with real programs: every N-th move to or from a shadow page that
    /// succeeds is reported failed, as Linux 6.18 now and then does
    /// (`PagerConfig::misreport_moves_every`). Needs --park.
    #[arg(long, value_name = "N", requires = "park", hide = true)]
    misreport_moves_every: Option<u32>,
    /// Page the program from a pager inside it instead of from this launcher
    ///
    /// By default the launcher pages the program and every process it forks or executes
    /// (a shell's commands, a build's compilers, a server's workers) as one tenant held
    /// to --memory together. With --in-process only the program itself is paged, by a
    /// pager in its own process: a forked child serves its own heap from its snapshot of
    /// the fork, and programs it executes run unpaged. --park and --wp-async need it
    /// (they move pages within the program) and imply it.
    #[arg(long)]
    in_process: bool,
    /// Run CMD as a program of `znswap daemon`, which pages its heap from the daemon's
    /// device along with its other programs' (at SOCKET, or the daemon's default socket:
    /// /run/znswap/znswap.sock as root, else $XDG_RUNTIME_DIR/znswap.sock). --memory is
    /// what it asks the daemon for; the device, --policy and --encrypt are the daemon's.
    /// The program is a tenant of the daemon, and so is every program it executes (a
    /// shell's commands, a build's compilers): their heaps are held to --memory together.
    /// A forked child is paged within the same tenant, reading the pages swapped out at
    /// the fork as they were then. Should the daemon
    /// stop, the program goes on with what it holds, and its touch of a page the daemon
    /// had swapped out raises SIGBUS.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, default_missing_value = "",
          conflicts_with_all = ["in_process", "park", "wp_async", "device", "encrypt", "policy"])]
    daemon: Option<PathBuf>,
    /// Under --daemon: the tenant's name in the daemon's log and `znswap status`
    /// [default: the command's name].
    #[arg(long, value_name = "NAME", requires = "daemon")]
    tenant: Option<String>,
    /// Under --daemon: what the tenant may write to the device, at most RATE bytes a
    /// second (e.g. 8M) of its swap-outs and the GC's moves of its pages together (the
    /// daemon's own --write-limit, if smaller, applies instead). Past it the program
    /// slows: its pages stay until its allowance catches up, and its faults wait.
    #[arg(long, value_name = "RATE", value_parser = crate::flags::rate, requires = "daemon")]
    write_limit: Option<u64>,
    /// Under --daemon: the tenant's swap limit, at most SIZE of its pages on the device
    /// (the daemon's own --swap-limit, if smaller, applies instead). At it, the program's
    /// pages stay in memory, past --memory.
    #[arg(long, value_name = "SIZE", value_parser = crate::flags::size, requires = "daemon")]
    swap_limit: Option<u64>,
    /// Also write the summary as JSON to FILE (checked before the program starts).
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    #[command(flatten)]
    json: JsonFlag,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    command: Vec<String>,
}

/// What a heap under `--daemon` is given room for beyond `--memory` when no `--arena`
/// is given: the daemon's device is not the launcher's to know.
const DAEMON_SWAP_BYTES: u64 = 2 << 30;
/// The smallest budget: two eviction batches and the slack.
const MEMORY_MIN_BYTES: u64 = 4 << 20;

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

/// What the launcher decided before the program starts: everything is checked here,
/// so a problem is reported before the program runs rather than after.
struct Launch {
    library: PathBuf,
    config: RunConfig,
    /// `--stats`, opened (so known writable) before the program starts.
    stats_file: Option<(PathBuf, File)>,
    /// Under `--daemon`, and serving the tree: the connection holding the program's
    /// tenant open.
    tenant: Option<OpenTenant>,
    /// Serving the tree (the default): the launcher's daemon.
    tree: Option<Tree>,
}

/// A tenant the launcher opened at the daemon for its program (`--daemon`): held while
/// this connection is open.
struct OpenTenant {
    channel: znswap_wire::Channel,
    index: u32,
    name: String,
}

impl OpenTenant {
    /// The tenant's figures now, as the daemon counts them.
    fn status(&self) -> Option<znswap_wire::TenantStatus> {
        let (_, tenants) = crate::cmd_status::ask(&self.channel).ok()?;
        tenants.into_iter().find(|tenant| tenant.tenant == self.index)
    }
}

/// Checks the arguments, the device and the output paths; starts nothing.
fn prepare(args: &RunArgs, stats_path: PathBuf, alive_fd: i32) -> Result<Launch> {
    let library = find_library()?;
    let memory = args.memory.memory;
    anyhow::ensure!(
        memory >= MEMORY_MIN_BYTES,
        "--memory {} is too small: the pager needs at least {} (two eviction batches and its slack)",
        format_size(memory),
        format_size(MEMORY_MIN_BYTES)
    );
    if let Some(socket) = daemon_socket(args) {
        anyhow::ensure!(
            args.pager.compressed_pool.compressed_pool == 0,
            "--compressed-pool is the daemon's under --daemon: give it to `znswap daemon`, not to `znswap run`"
        );
        return prepare_for_daemon(args, library, socket, stats_path, alive_fd, None);
    }
    let device_path = args.device.device.clone().unwrap_or_else(device_path::default_path);
    // Opened now (created, for the default) so that its errors come with help.
    let device = device_path::open(args.device.device.as_deref())?;
    if !in_process(args) {
        let capacity = device.geometry().zone_count as u64 * device.geometry().zone_capacity_bytes();
        arena_bytes(args, memory, capacity)?;
        let tree = Tree::start(device, device_path.clone(), memory, tree_pager_config(args)).with_context(|| {
            format!("{} cannot serve as swap with --memory {}", device_path.display(), format_size(memory))
        })?;
        let socket = tree.socket.clone();
        return prepare_for_daemon(args, library, socket, stats_path, alive_fd, Some((tree, capacity)));
    }
    // Let go: the program opens it (and locks it) itself.
    let geometry = *device.geometry();
    drop(device);
    let capacity = geometry.zone_count as u64 * geometry.zone_capacity_bytes();
    let arena = arena_bytes(args, memory, capacity)?;
    let mut config = RunConfig::new(device_path.clone(), memory, arena, pager_config(args), stats_path, alive_fd);
    config.ld_preload_before = ld_preload_before()?;
    config.check().map_err(|error| anyhow::anyhow!("internal: the run configuration is wrong: {error}"))?;
    anyhow::ensure!(config.device.to_str().is_some(), "the device path {} is not UTF-8", device_path.display());
    Pager::check(&geometry, &config.pager).with_context(|| {
        format!("{} cannot serve as swap with --memory {}", device_path.display(), format_size(memory))
    })?;
    // Last, so that a refusal above leaves no file behind.
    let stats_file = stats_file(args)?;
    Ok(Launch { library, config, stats_file, tenant: None, tree: None })
}

/// The program's pager's configuration: `znswap run`'s defaults (`PagerConfig::for_run`)
/// and what the flags change.
fn pager_config(args: &RunArgs) -> PagerConfig {
    let mut config = PagerConfig::for_run(args.memory.memory);
    args.pager.apply(&mut config);
    config.colocate = !args.no_colocate;
    config.misreport_moves_every = args.misreport_moves_every.unwrap_or(0);
    config
}

/// `$LD_PRELOAD` as it is, to be kept behind the library.
fn ld_preload_before() -> Result<Option<String>> {
    match std::env::var_os("LD_PRELOAD").filter(|value| !value.is_empty()) {
        None => Ok(None),
        Some(value) => Ok(Some(value.into_string().map_err(|_| anyhow::anyhow!("$LD_PRELOAD is not UTF-8"))?)),
    }
}

/// `--stats`, opened now (so known writable before the program starts). Last of the
/// checks, so that a refusal before it leaves no file behind.
fn stats_file(args: &RunArgs) -> Result<Option<(PathBuf, File)>> {
    let Some(path) = &args.stats else { return Ok(None) };
    let file =
        File::create(path).with_context(|| format!("--stats {}: cannot write the summary there", path.display()))?;
    Ok(Some((path.clone(), file)))
}

/// `--daemon`'s socket, if given (its default if given without one).
fn daemon_socket(args: &RunArgs) -> Option<PathBuf> {
    args.daemon.as_ref().map(
        |path| {
            if path.as_os_str().is_empty() {
                znswap_daemon::default_socket()
            } else {
                path.clone()
            }
        },
    )
}

/// Under `--daemon`: the daemon answers at `socket` (checked now, so its absence is
/// said before the program starts), and the program's library will connect there.
fn prepare_for_daemon(
    args: &RunArgs,
    library: PathBuf,
    socket: PathBuf,
    stats_path: PathBuf,
    alive_fd: i32,
    tree: Option<(Tree, u64)>,
) -> Result<Launch> {
    let channel = match znswap_wire::Channel::connect(&socket) {
        Ok(channel) => channel,
        Err(error) => bail!(
            "no znswap daemon answers at {} ({error}): start one with `znswap daemon --memory 1G` (as this user{}), \
             or give its socket with --daemon PATH",
            socket.display(),
            if args.daemon.as_ref().is_some_and(|path| path.as_os_str().is_empty()) {
                ", in another terminal"
            } else {
                ""
            }
        ),
    };
    let name = tenant_name(args)?;
    // The launcher's own daemon keeps its compressed pool out of `--memory`; the program
    // asks for the rest.
    let pool = if tree.is_some() { args.pager.compressed_pool.compressed_pool } else { 0 };
    let open = znswap_wire::ToDaemon::Open {
        name: name.clone(),
        memory_pages: args.memory.memory.saturating_sub(pool) / PAGE_BYTES as u64,
        write_limit: args.write_limit.unwrap_or(0),
        swap_limit_pages: args.swap_limit.map_or(0, crate::flags::swap_limit_pages),
    };
    channel.send_to_daemon(&open, &[]).with_context(|| format!("asking the daemon at {}", socket.display()))?;
    let (index, token) = match channel.recv_to_tenant() {
        Ok(Some(znswap_wire::ToTenant::Welcome { tenant, token, .. })) => (tenant, token),
        Ok(Some(znswap_wire::ToTenant::Refused(reason))) => {
            bail!("the daemon at {} refused {}: {}", socket.display(), name.as_str(), reason.explain())
        }
        Ok(other) => bail!("the daemon at {} answered {other:?}: is it this znswap's?", socket.display()),
        Err(error) => bail!("the daemon at {}: {error}", socket.display()),
    };
    let tenant = OpenTenant { channel, index, name: name.as_str().to_string() };
    let memory = args.memory.memory;
    // Under a daemon the device's size is the daemon's: the arena is what a heap may
    // grow to, as if the device held 2 GiB.
    let swap_bytes = tree.as_ref().map_or(DAEMON_SWAP_BYTES, |(_, capacity)| *capacity);
    let arena = arena_bytes(args, memory, swap_bytes)?;
    // (The daemon's pager serves it, or the launcher's: the library starts none, and
    // the device, the policy and encryption are that pager's.)
    let mut config = RunConfig::new(socket.clone(), memory, arena, pager_config(args), stats_path, alive_fd);
    config.daemon = Some(socket);
    config.tenant_token = Some(token.to_hex());
    config.ld_preload_before = ld_preload_before()?;
    config.check().map_err(|error| anyhow::anyhow!("internal: the run configuration is wrong: {error}"))?;
    let stats_file = stats_file(args)?;
    Ok(Launch { library, config, stats_file, tenant: Some(tenant), tree: tree.map(|(tree, _)| tree) })
}

/// The heap's arena: `--arena`, or room for the heap to grow past what memory and swap
/// (`swap_bytes`) hold; checked either way, with what to change said.
fn arena_bytes(args: &RunArgs, memory: u64, swap_bytes: u64) -> Result<u64> {
    Ok(match args.arena {
        Some(arena) => {
            anyhow::ensure!(
                arena > memory,
                "--arena {} must be larger than --memory {}",
                format_size(arena),
                format_size(memory)
            );
            anyhow::ensure!(
                arena <= run_env::ARENA_MAX_BYTES,
                "--arena {} is more than the allocator can manage in one arena ({}); give a smaller one",
                format_size(arena),
                format_size(run_env::ARENA_MAX_BYTES)
            );
            arena
        }
        None => {
            let arena = run_env::default_arena_bytes(memory, swap_bytes);
            anyhow::ensure!(
                arena > memory,
                "--memory {} leaves nothing to swap: znswap run pages a heap of at most {} (one allocator \
                 arena), so give a smaller --memory (a program that fits in {} needs no swap)",
                format_size(memory),
                format_size(run_env::ARENA_MAX_BYTES),
                format_size(memory)
            );
            arena
        }
    })
}

/// Whether the program is paged by a pager of its own (`--in-process`, or what needs
/// it), not with its tree by the launcher's.
fn in_process(args: &RunArgs) -> bool {
    args.in_process || args.pager.faults.park > 0 || args.pager.faults.wp_async
}

/// The launcher's pager serving the tree: `znswap run`'s choices, as a daemon serves
/// (a region per process, the engine's tenants), co-locating the hot thread unless
/// `--no-colocate`.
fn tree_pager_config(args: &RunArgs) -> PagerConfig {
    let mut config = pager_config(args);
    config.core.regions_max = znswap_pager::DAEMON_PROCESSES_MAX;
    config.core.tenants = znswap_pager::DAEMON_TENANTS_MAX;
    config
}

/// The tenant's name: `--tenant`, or the command's name cut to what the wire carries.
fn tenant_name(args: &RunArgs) -> Result<znswap_wire::Name> {
    if let Some(name) = &args.tenant {
        return znswap_wire::Name::new(name).map_err(|error| {
            anyhow::anyhow!(
                "--tenant {name:?}: {error} (1 to {} bytes, no control characters)",
                znswap_wire::NAME_BYTES
            )
        });
    }
    let command = Path::new(&args.command[0]).file_name().map(|name| name.to_string_lossy().into_owned());
    let mut name: String = command.unwrap_or_default().chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    while name.len() > znswap_wire::NAME_BYTES {
        name.pop();
    }
    Ok(znswap_wire::Name::new(&name).unwrap_or_else(|_| znswap_wire::Name::new("program").expect("a valid name")))
}

/// Runs the program; returns its exit status (128+N when a signal ended it).
pub fn run(args: RunArgs) -> Result<u8> {
    // A private directory for the library's figures, removed however this ends.
    let stats_dir =
        tempfile::Builder::new().prefix("znswap-run-").tempdir().context("creating a temporary directory")?;
    let stats_path = stats_dir.path().join("stats.json");
    let (alive_read, alive_write) = pipe()?;
    // Blocked before `prepare` starts the tree's pager threads, which inherit the mask: a
    // thread that left them unblocked would take a Ctrl-C meant for the program whenever
    // the watch is not inside `sigtimedwait`, and die of it with the whole launcher.
    let waited = block_signals();
    let Launch { library, config, mut stats_file, tenant, mut tree } = prepare(&args, stats_path.clone(), alive_write)?;
    let program = args.command[0].clone();
    let started = Instant::now();
    let child = match spawn(&args, &library, &config, alive_read, alive_write) {
        Ok(child) => child,
        Err(error) => {
            if let Some((path, _)) = &stats_file {
                let _ = std::fs::remove_file(path);
            }
            return Err(error).with_context(|| format!("cannot run {program}"));
        }
    };
    // SAFETY: our own descriptor; the child has its copy.
    unsafe { libc::close(alive_write) };
    if let (Some(tree), Some(tenant)) = (&mut tree, &tenant) {
        tree.govern(tenant.index)?;
    }
    let reports = Reports { stats: &stats_path, daemon: config.daemon.is_some(), tree: tree.as_ref() };
    let watched = watch(&args, child.id() as i32, &reports, &waited, alive_read, tenant.is_some(), tree.is_some())?;
    let elapsed = started.elapsed();
    // Forks of an in-process program that outlived it (a tree's are waited for).
    let daemonized = tree.is_none() && outlived_by_forks(alive_read);
    let mut report = reports.read();
    let tree_figures = tree.as_mut().map(|tree| tree.stop());
    if let (Some(report), Some(figures)) = (report.as_mut(), &tree_figures) {
        // The tree's memory, and its CPU (every process of it reaped) with the pager's
        // threads' here.
        report.memory_used_max_bytes = figures.memory_used_max_bytes;
        report.cpu_ns = children_cpu_ns() + znswap_pager::process_cpu_ns();
    }
    // The tenant as the daemon counted it, then let go (its processes still running hold
    // it until they end).
    let tenant = tenant.map(|tenant| TenantSummary::new(&tenant, &run_env::descendant_reports(&stats_path)));
    drop(stats_dir);
    let ended = watched.ended;
    let code = ended.status();
    let failed = (ended == Ended::Exited(run_env::EXIT_PAGER_FAILED) && report.is_none()) || daemonized;
    if let (true, Some((path, _))) = (failed, &stats_file) {
        // Nothing to summarize: no empty file left behind.
        let _ = std::fs::remove_file(path);
    }
    if ended == Ended::Exited(run_env::EXIT_PAGER_FAILED) && report.is_none() {
        bail!("the pager did not start in {program} (its message is above)");
    }
    if daemonized {
        bail!(
            "{program} daemonized (a forked child outlived it): with --in-process znswap pages a program only \
             while it runs in the foreground; run it without its daemon option (memcached: drop -d; redis: \
             --daemonize no), or without --in-process"
        );
    }
    let summary = Summary {
        executed: watched.executed.map(|(seconds, exe)| Executed { seconds, program: exe.display().to_string() }),
        command: args.command.join(" "),
        exit_status: code,
        signal: match ended {
            Ended::Signal(signal) => Some(signal_name(signal)),
            Ended::Exited(_) => None,
        },
        seconds: elapsed.as_secs_f64(),
        report,
        daemon: if tree.is_some() { None } else { config.daemon.as_ref().map(|path| path.display().to_string()) },
        tenant,
        tree: tree_figures,
    };
    if args.json.json {
        eprintln!("{}", serde_json::to_string(&summary)?);
    } else {
        eprint!("{}", summary.table(&program));
    }
    // The summary is out and the program's status is kept whatever happens to the file.
    if let Some((path, file)) = stats_file.as_mut() {
        let written =
            serde_json::to_vec_pretty(&summary).map_err(std::io::Error::other).and_then(|json| file.write_all(&json));
        if let Err(error) = written {
            eprintln!("znswap run: warning: --stats {}: the summary could not be written: {error}", path.display());
        }
    }
    Ok(code.clamp(0, 255) as u8)
}

/// Where the program's figures are read: the library's own (the pager's too, in
/// process), or with the pager's figures added from the daemon serving it here.
struct Reports<'a> {
    stats: &'a Path,
    /// A daemon pages it (the launcher's, or `znswap daemon`): the library writes its
    /// own figures beside the stats file.
    daemon: bool,
    tree: Option<&'a Tree>,
}

impl Reports<'_> {
    fn read(&self) -> Option<RunReport> {
        if !self.daemon {
            return RunReport::read(self.stats);
        }
        let mut report = RunReport::read(&run_env::program_stats_path(self.stats))?;
        if let Some(tree) = self.tree {
            report.set_pager_figures(tree.embedded.pager());
        }
        Some(report)
    }
}

/// The signals the launcher takes (those it passes on, SIGUSR1 for the figures, and
/// SIGCHLD), blocked so that `sigtimedwait` takes them, not handlers.
fn block_signals() -> libc::sigset_t {
    let mut waited = FORWARDED.to_vec();
    waited.extend([libc::SIGUSR1, libc::SIGCHLD]);
    let waited = signal_set(&waited);
    // SAFETY: blocking signals in the launcher's only thread (the pager's threads, started
    // after, inherit the mask).
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &waited, std::ptr::null_mut()) };
    waited
}

/// Starts the program with the library preloaded and its configuration in its
/// environment, the alive pipe's write end kept open in it, its signals unblocked.
fn spawn(
    args: &RunArgs,
    library: &Path,
    config: &RunConfig,
    alive_read: i32,
    alive_write: i32,
) -> std::io::Result<std::process::Child> {
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let mut preload = library.as_os_str().to_owned();
    if let Some(before) = &config.ld_preload_before {
        preload.push(":");
        preload.push(before);
    }
    command.env("LD_PRELOAD", preload).env(run_env::CONFIG, config.to_env());
    // CPython keeps small objects in arenas it maps itself, which the pager would not
    // see; through malloc they are paged. (A user's own setting wins.)
    if std::env::var_os("PYTHONMALLOC").is_none() {
        command.env("PYTHONMALLOC", "malloc");
    }
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
    command.spawn()
}

/// How the watch over the program ended.
struct Watched {
    ended: Ended,
    /// The program executed another one, which ran without the pager (in process).
    executed: Option<(f64, PathBuf)>,
}

/// Waits for the program (and, serving its tree, for every process of the tree),
/// passing signals on, showing the figures, saying why a slow exit is slow.
fn watch(
    args: &RunArgs,
    pid: i32,
    reports: &Reports<'_>,
    waited: &libc::sigset_t,
    alive_read: i32,
    tenant: bool,
    tree: bool,
) -> Result<Watched> {
    let program = &args.command[0];
    let forwarded = signal_set(&FORWARDED);
    let started = Instant::now();
    // What the pager is doing, on a progress line while stderr is a terminal.
    let line = Progress::new(!args.json.json);
    let mut last_live = Instant::now();
    // What the program runs as (its interpreter, for a script): if that changes while
    // the alive pipe closes (the library marks it close-on-exec), it executed another
    // program, which runs without the pager.
    let first_exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut executed: Option<(f64, PathBuf)> = None;
    // A stop signal passed on (Ctrl-C): when, which, and whether the wait was explained.
    let mut stopping: Option<(Instant, i32, u64, bool)> = None;
    let mut ended: Option<Ended> = None;
    let mut said_waiting = false;
    loop {
        if let Some(status) = reap(pid) {
            ended = Some(status);
        }
        let rest = if tree { run_tree::descendants(std::process::id()) } else { Vec::new() };
        if let Some(ended) = ended {
            if rest.is_empty() {
                line.clear();
                return Ok(Watched { ended, executed });
            }
            if !said_waiting {
                said_waiting = true;
                line.say(&format!(
                    "znswap run: {program} {}; {} it started still {}: serving them until they end (Ctrl-C \
                     passes the signal on to them)",
                    ended.describe(),
                    znswap_daemon::plural(rest.len() as u64, "process", "processes"),
                    if rest.len() == 1 { "runs" } else { "run" }
                ));
            }
        }
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 200_000_000 };
        // SAFETY: waits for one of the blocked signals, or the timeout.
        let signal = unsafe { libc::sigtimedwait(waited, std::ptr::null_mut(), &timeout) };
        // SAFETY: membership test on our set.
        if signal > 0 && unsafe { libc::sigismember(&forwarded, signal) } == 1 {
            // To the program, or once it is gone to what it left running.
            let targets = if ended.is_none() { vec![pid as u32] } else { rest.clone() };
            for target in targets {
                // SAFETY: signalling a process of our own tree.
                unsafe { libc::kill(target as i32, signal) };
            }
            if STOPPING.contains(&signal) && stopping.is_none() {
                let swapped_in = reports.read().map_or(0, |report| report.pager.core.swap_in_reads);
                stopping = Some((Instant::now(), signal, swapped_in, false));
            }
        } else if signal == libc::SIGUSR1 {
            if let Some(report) = reports.read() {
                line.say(&live_line(&report));
            }
        }
        // A program that frees its heap on the way out reads its swapped-out memory back
        // first (Python does): say why the wait, once it is noticeable.
        if let Some((since, signal, swapped_in, said)) = &mut stopping {
            if !*said && since.elapsed() >= Duration::from_secs(2) && ended.is_none() {
                *said = true;
                let now = reports.read().map_or(*swapped_in, |report| report.pager.core.swap_in_reads);
                line.say(&format!(
                    "znswap run: {program} (pid {pid}) got {} {:.0} s ago and is still exiting: its exit \
                     handlers touch swapped-out memory, which comes back from the device first ({} pages so \
                     far); `kill -KILL {pid}` ends it at once",
                    signal_name(*signal),
                    since.elapsed().as_secs_f64(),
                    now.saturating_sub(*swapped_in)
                ));
            }
        }
        // (Under a daemon a program executed joins the tenant: paged as the program was.)
        if executed.is_none() && !tenant && pipe_closed(alive_read) {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            if let Some(exe) = exe.filter(|exe| Some(exe) != first_exe.as_ref()) {
                executed = Some((started.elapsed().as_secs_f64(), exe));
            }
        }
        if last_live.elapsed() >= Duration::from_secs(2) {
            last_live = Instant::now();
            if let Some(report) = reports.read() {
                line.set(live_line(&report));
            }
        }
    }
}

/// Reaps what ended among the launcher's children: the program (its status, once) and,
/// as the tree's subreaper, the processes its tree left behind.
fn reap(program: i32) -> Option<Ended> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of ours without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == program {
            found = Some(if libc::WIFSIGNALED(status) {
                Ended::Signal(libc::WTERMSIG(status))
            } else {
                Ended::Exited(libc::WEXITSTATUS(status))
            });
        }
    }
}

/// CPU time of the launcher's children reaped so far (the whole tree, once it is done),
/// in nanoseconds.
fn children_cpu_ns() -> u64 {
    // SAFETY: plain data, filled by the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: writes one rusage we own.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let ns = |time: libc::timeval| time.tv_sec as u64 * 1_000_000_000 + time.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signal(i32),
}

impl Ended {
    /// `exited (0)`, `was killed by SIGKILL`.
    fn describe(self) -> String {
        match self {
            Ended::Exited(code) => format!("exited ({code})"),
            Ended::Signal(signal) => format!("was killed by {}", signal_name(signal)),
        }
    }

    /// The status a shell would report: the exit code, or 128 + the signal.
    fn status(self) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Signal(signal) => 128 + signal,
        }
    }
}

/// Signals that ask a program to stop, after which a slow exit is explained.
const STOPPING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// A signal's name (`SIGKILL`), or its number.
fn signal_name(signal: i32) -> String {
    const NAMES: [(i32, &str); 20] = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGCHLD, "SIGCHLD"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGSYS, "SIGSYS"),
        (libc::SIGWINCH, "SIGWINCH"),
    ];
    NAMES.iter().find(|(number, _)| *number == signal).map_or(format!("signal {signal}"), |(_, name)| name.to_string())
}

#[derive(serde::Serialize)]
struct Summary {
    command: String,
    /// The exit code, or 128 + the signal that ended the program.
    exit_status: i32,
    /// The signal that ended the program, if one did.
    signal: Option<String>,
    seconds: f64,
    /// The library's last figures (none if the pager never started in the program).
    report: Option<RunReport>,
    /// The program executed another one, which ran without the pager.
    executed: Option<Executed>,
    /// The daemon's socket, when the daemon paged it (`--daemon`): the pager's figures
    /// are the daemon's, not in this summary.
    daemon: Option<String>,
    /// Under `--daemon`, or serving the tree: the program's tenant, as the daemon
    /// counted it.
    tenant: Option<TenantSummary>,
    /// Serving the tree (the default): what the launcher saw of it.
    tree: Option<TreeFigures>,
}

/// The program's tenant at the daemon (`--daemon`): the program and every process it
/// executed.
#[derive(serde::Serialize)]
struct TenantSummary {
    name: String,
    /// The engine's tenant at the daemon.
    index: u32,
    /// Programs of the tenant the daemon served: the program and those it executed, each
    /// image counted (none if the daemon did not answer at the end).
    processes: Option<u64>,
    /// The tenant's pages swapped out and read back (`TenantStatus`'s names).
    swap_outs: u64,
    swap_ins: u64,
    /// Bytes of the tenant's data the daemon's GC moved (charged to it).
    gc_bytes: u64,
    /// The tenant's faults the daemon served, and their latency's 99th percentile.
    faults: u64,
    fault_p99_us: f64,
    /// Where those faults' time went in the daemon (seconds summed over them).
    fault_seconds: Option<crate::cmd_status::FaultSeconds>,
    /// Bytes its swap-outs wrote; its write limit (bytes a second) if it had one, and
    /// how long its swap-outs waited for it.
    written_bytes: u64,
    write_limit_bytes_per_second: Option<u64>,
    throttled_seconds: f64,
    /// Bytes let through past its share when it was held back longest (a round each
    /// half second held).
    write_grace_bytes: u64,
    /// Its swap limit, if it had one.
    swap_limit_bytes: Option<u64>,
    /// The processes the programs it executed ran in (a process that executed again is
    /// one), by their own last figures.
    executed: u64,
    /// The most anonymous memory any of them held (its heap within the tenant's grant).
    executed_memory_max_bytes: u64,
    executed_cpu_ns: u64,
    /// Pages they lost with the daemon (SIGBUS when touched).
    executed_lost_pages: u64,
}

impl TenantSummary {
    fn new(tenant: &OpenTenant, executed: &[RunReport]) -> TenantSummary {
        let status = tenant.status();
        TenantSummary {
            name: tenant.name.clone(),
            index: tenant.index,
            processes: status.as_ref().map(|status| status.processes_joined),
            swap_outs: status.as_ref().map_or(0, |status| status.swap_outs),
            swap_ins: status.as_ref().map_or(0, |status| status.swap_ins),
            gc_bytes: status.as_ref().map_or(0, |status| status.gc_bytes),
            faults: status.as_ref().map_or(0, |status| status.faults),
            fault_p99_us: status.as_ref().map_or(0.0, |status| status.fault_p99_ns as f64 / 1000.0),
            fault_seconds: status.as_ref().map(crate::cmd_status::FaultSeconds::of),
            written_bytes: status.as_ref().map_or(0, |status| status.written_bytes),
            write_limit_bytes_per_second: status
                .as_ref()
                .and_then(|status| (status.write_limit > 0).then_some(status.write_limit)),
            throttled_seconds: status.as_ref().map_or(0.0, |status| status.throttled_ns as f64 / 1e9),
            write_grace_bytes: status.as_ref().map_or(0, |status| status.grace_bytes),
            swap_limit_bytes: status.as_ref().and_then(|status| {
                (status.swap_limit_pages > 0).then_some(status.swap_limit_pages * PAGE_BYTES as u64)
            }),
            executed: executed.len() as u64,
            executed_memory_max_bytes: executed.iter().map(|r| r.memory_used_max_bytes).max().unwrap_or(0),
            executed_cpu_ns: executed.iter().map(|r| r.cpu_ns).sum(),
            executed_lost_pages: executed.iter().map(|r| r.pager.core.lost_pages).sum(),
        }
    }
}

#[derive(serde::Serialize)]
struct Executed {
    /// When, in seconds after the start.
    seconds: f64,
    program: String,
}

impl Summary {
    fn ended(&self) -> String {
        match &self.signal {
            Some(signal) => format!("was killed by {signal}"),
            None => format!("exited ({})", self.exit_status),
        }
    }

    fn table(&self, program: &str) -> String {
        let Some(r) = &self.report else {
            return format!(
                "znswap run: {} {} after {:.1} s, and the pager never started in it: {}\n",
                self.command,
                self.ended(),
                self.seconds,
                why_no_pager(program)
            );
        };
        let mut out = format!("znswap run: {} {} after {:.1} s\n", self.command, self.ended(), self.seconds);
        if self.daemon.is_some() || self.tree.is_some() {
            // (Programs it executed joined its tenant: the tenant's or the tree's lines below.)
        } else if let Some(executed) = &self.executed {
            out.push_str(&format!(
                "  ({program} executed {} after {:.1} s, which ran without the pager: programs a paged program \
                 executes are not paged, so give the program itself (e.g. /usr/bin/python3 script.py rather than \
                 a wrapper); the figures are the pager's until then)\n",
                executed.program, executed.seconds
            ));
        } else if !r.at_exit && self.signal.is_some() {
            out.push_str("  (the signal ended it at once: the figures are its last ones, up to a second old)\n");
        } else if !r.at_exit {
            // `_exit` is wrapped to write the figures: an exit without them is an exec
            // (or a raw exit system call).
            out.push_str(&format!(
                "  ({program} ended without the pager's last report: most likely it executed another program, \
                 which ran without the pager (give the program itself, e.g. /usr/bin/python3 script.py rather than \
                 a wrapper); the figures are its last ones, up to a second old)\n"
            ));
        }
        let mut lines = Lines(out);
        match &self.daemon {
            Some(daemon) => self.daemon_lines(r, daemon, &mut lines),
            None => {
                if let Some(tree) = &self.tree {
                    self.tree_lines(tree, &mut lines);
                }
                paging_lines(r, &mut lines);
                time_lines(r, &mut lines);
                memory_lines(r, self.tree.as_ref(), &mut lines);
                lines.0.push_str(LEGEND);
            }
        }
        lines.0
    }

    /// Serving the tree: the processes paged as one, and those that ran unpaged.
    fn tree_lines(&self, tree: &TreeFigures, lines: &mut Lines) {
        let paged = self.tenant.as_ref().and_then(|tenant| tenant.processes);
        lines.line(
            "process tree",
            match paged {
                Some(processes) => format!(
                    "{} paged as one, held to --memory together (the program and {} it forked or executed); {} \
                     of them seen alive by the memory samples",
                    znswap_daemon::plural(processes, "process", "processes"),
                    processes.saturating_sub(1),
                    tree.processes_seen
                ),
                None => format!("{} processes seen", tree.processes_seen),
            },
        );
        for escape in &tree.escaped {
            lines.line(
                "ran unpaged",
                format!(
                    "pid {} ({}): {}; it held max {} (counted)",
                    escape.pid,
                    escape.command,
                    escape.why,
                    format_size(escape.memory_max_bytes)
                ),
            );
        }
    }

    /// Under `--daemon`: the swapping, the device and the budget are the daemon's; only
    /// what this process itself measured, and the tenant's figures the daemon gave.
    fn daemon_lines(&self, r: &RunReport, daemon: &str, lines: &mut Lines) {
        let page = PAGE_BYTES as u64;
        lines.line("paged by", format!("the znswap daemon at {daemon} (its swap and device figures are the daemon's)"));
        if r.pager_gone {
            lines.line(
                "the daemon stopped",
                format!(
                    "while the program ran: the pages it had swapped out are lost, and a touch of one raises \
                     SIGBUS ({} touched by the last report); the program served its own faults since",
                    r.pager.core.lost_pages
                ),
            );
        }
        if let Some(t) = &self.tenant {
            let processes = match t.processes {
                Some(processes) => format!(
                    "{} paged (the program and {} it forked or executed)",
                    znswap_daemon::plural(processes, "process", "processes"),
                    processes.saturating_sub(1)
                ),
                None => "the daemon did not say its figures at the end".to_string(),
            };
            lines.line("tenant", format!("{} (tenant {} of the daemon): {processes}", t.name, t.index));
            if t.faults > 0 {
                lines.line(
                    "faults",
                    format!(
                        "{} served by the daemon, p99 {:.0} µs, mean {} (read to wake)",
                        t.faults,
                        t.fault_p99_us,
                        t.fault_seconds.as_ref().map_or("-".to_string(), |f| f.mean(t.faults))
                    ),
                );
            }
            lines.line(
                "swapped out / in",
                format!(
                    "{} / {} pages of the tenant ({} / {}); the daemon's GC moved {} of its data",
                    t.swap_outs,
                    t.swap_ins,
                    format_size(t.swap_outs * page),
                    format_size(t.swap_ins * page),
                    format_size(t.gc_bytes)
                ),
            );
            if let Some(rate) = t.write_limit_bytes_per_second {
                lines.line(
                    "write limit",
                    format!(
                        "{}/s of swap-outs and GC moves; it wrote {} and waited {:.1} s for its share",
                        format_size(rate),
                        format_size(t.written_bytes + t.gc_bytes),
                        t.throttled_seconds
                    ),
                );
            }
        }
        let executed = self.tenant.as_ref().filter(|t| t.executed > 0);
        lines.line(
            "CPU",
            format!(
                "{:.2} s of the program's threads{} (the pager's are the daemon's)",
                r.cpu_ns as f64 / 1e9,
                executed.map_or(String::new(), |t| format!(
                    ", {:.2} s of those it executed",
                    t.executed_cpu_ns as f64 / 1e9
                ))
            ),
        );
        lines.line(
            "memory",
            format!(
                "max {} anonymous ({} asked of the daemon for its paged heap, which the daemon holds within its \
                 own --memory for all its programs); whole resident set max {}",
                format_size(r.memory_used_max_bytes),
                format_size(r.memory_bytes),
                format_size(r.rss_max_bytes)
            ),
        );
        if let Some(t) = executed {
            lines.line(
                "programs it executed",
                format!(
                    "ran in {} (one that executed again counted once), their heaps within the tenant's {}: \
                     the largest held max {} anonymous{}",
                    znswap_daemon::plural(t.executed, "process", "processes"),
                    format_size(r.memory_bytes),
                    format_size(t.executed_memory_max_bytes),
                    if t.executed_lost_pages > 0 {
                        format!("; {} pages lost with the daemon", t.executed_lost_pages)
                    } else {
                        String::new()
                    }
                ),
            );
        }
    }
}

/// The summary's lines, each a name and its value.
struct Lines(String);

impl Lines {
    fn line(&mut self, name: &str, value: String) {
        self.0.push_str(&format!("  {name:<22} {value}\n"));
    }
}

/// What the program's own pager swapped, read ahead, parked, kept as swap cache.
fn paging_lines(r: &RunReport, lines: &mut Lines) {
    let page = PAGE_BYTES as u64;
    lines.line(
        "swapped out / in",
        format!(
            "{} / {} pages ({} / {})",
            r.pager.core.swap_outs_written,
            r.pager.core.swap_in_reads,
            format_size(r.pager.core.swap_outs_written * page),
            format_size(r.pager.core.swap_in_reads * page)
        ),
    );
    if r.pager.core.readahead_pages_read > 0 {
        lines.line(
            "read-ahead",
            format!(
                "{} pages read ahead, {} of them used ({:.0} %): faults served with no device read",
                r.pager.core.readahead_pages_read,
                r.pager.core.readahead_hits,
                100.0 * r.pager.core.readahead_hits as f64 / r.pager.core.readahead_pages_read as f64
            ),
        );
    }
    if r.pager.compressed_pool_bytes > 0 {
        let p = &r.pager;
        let reads = p.compressed_pool_reads_served + p.compressed_pool_reads_missed;
        lines.line(
            "compressed pool",
            format!(
                "{}: {} of the pages written out kept ({:.1}x smaller), {} did not compress enough ({} more not tried after a run of those); {} of {} reads served from it ({} pages, no device read); {} dropped for room, {} held at the end",
                format_size(p.compressed_pool_bytes),
                p.compressed_pool_pages_stored,
                znswap_zoned::compression_ratio(p.compressed_pool_stored_raw_bytes, p.compressed_pool_stored_bytes),
                p.compressed_pool_pages_refused,
                p.compressed_pool_pages_skipped,
                p.compressed_pool_reads_served,
                reads,
                p.compressed_pool_pages_served,
                p.compressed_pool_pages_dropped,
                p.compressed_pool_pages_held
            ),
        );
    }
    if r.pager.core.pages_parked + r.pager.core.park_refused + r.pager.core.park_occupied > 0 {
        lines.line(
            "inactive list",
            format!(
                "{} victims parked, {} touched while parked (brought back with no device read), {} not \
                     movable (evicted in place), {} kept (their shadow page held a page){}",
                r.pager.core.pages_parked,
                r.pager.core.parked_touched,
                r.pager.core.park_refused,
                r.pager.core.park_occupied,
                if r.pager.moves_misreported > 0 {
                    format!(
                        "; {} moves the kernel did but failed, found done by the page map",
                        r.pager.moves_misreported
                    )
                } else {
                    String::new()
                }
            ),
        );
    }
    if r.pager.engine.swap_cache_hits + r.pager.core.swap_cache_dirtied + r.pager.core.swap_cache_skipped > 0 {
        lines.line(
            "swap cache",
            format!(
                "{} pages swapped out clean (no write), {} written after their swap-in (a write-protect \
                     fault each), {} mapped writable with their slot dropped",
                r.pager.engine.swap_cache_hits, r.pager.core.swap_cache_dirtied, r.pager.core.swap_cache_skipped
            ),
        );
    }
    if r.pager.core.refaults_short + r.pager.core.refaults_long > 0 {
        lines.line(
            "refaults",
            format!(
                "{} pages came back within the budget's distance of their eviction (kept longer: {} passes of \
                 the hand), {} from farther ({} within an eighth more: what a budget an eighth larger would \
                 have kept)",
                r.pager.core.refaults_short,
                r.pager.core.refault_passes_spent,
                r.pager.core.refaults_long,
                r.pager.core.refaults_near
            ),
        );
    }
    let core = &r.pager.core;
    if core.sampling_looked_at > 0 {
        lines.line(
            "sampling",
            format!(
                "{} pages looked at for references, {} of them written before the hand came back ({} %); \
                 {} passed by until their turn; a look every {} revolutions at the end",
                core.sampling_looked_at,
                core.sampling_written,
                core.sampling_written * 100 / core.sampling_looked_at,
                core.sampling_deferred,
                core.sampling_period
            ),
        );
    }
    lines.line(
        "faults",
        if r.pager.core.missing_faults + r.pager.core.write_protect_faults == 0 {
            "none".to_string()
        } else {
            format!(
                "{} missing, {} write-protect ({} found a handler polling; polls found nothing for {:.2} s, \
                 held asleep at {} looks with no CPU to spare); p50 ≤ {:.1} µs, p99 ≤ {:.1} µs",
                r.pager.core.missing_faults,
                r.pager.core.write_protect_faults,
                r.pager.faults_polled,
                r.pager.poll_spun_ns as f64 / 1e9,
                r.pager.poll_paused_ticks,
                r.fault_p50_ns as f64 / 1e3,
                r.fault_p99_ns as f64 / 1e3
            )
        },
    );
}

/// Where the CPU and the faults' time went.
fn time_lines(r: &RunReport, lines: &mut Lines) {
    if r.cpu_ns > 0 {
        let pager = r.pager.fault_cpu_ns + r.pager.evictor_cpu_ns + r.pager.io_cpu_ns + r.stats_thread_cpu_ns;
        let s = |ns: u64| ns as f64 / 1e9;
        lines.line(
            "CPU",
            format!(
                "{:.2} s: the program's threads {:.2} s, the pager's {:.2} s (fault handlers {:.2}, evictors \
                     {:.2}, I/O {:.2}, stats {:.2})",
                s(r.cpu_ns),
                s(r.cpu_ns.saturating_sub(pager)),
                s(pager),
                s(r.pager.fault_cpu_ns),
                s(r.pager.evictor_cpu_ns),
                s(r.pager.io_cpu_ns),
                s(r.stats_thread_cpu_ns)
            ),
        );
    }
    let faults = r.pager.core.missing_faults + r.pager.core.write_protect_faults;
    if faults > 0 && r.pager.fault_handled_ns > 0 {
        let per_fault = |ns: u64| ns as f64 / 1e3 / faults as f64;
        lines.line(
            "fault time",
            format!(
                "{:.1} µs per fault in the handlers: device reads {:.1} ({} reads of {:.1} µs), lock {:.1}, \
                     install {:.1}, lock release and wake-ups {:.1}, waiting for pages on their way \
                     out {:.1}, for room {:.1}",
                per_fault(r.pager.fault_handled_ns),
                per_fault(r.pager.fault_read_ns),
                r.pager.fault_reads,
                r.pager.fault_read_ns as f64 / 1e3 / r.pager.fault_reads.max(1) as f64,
                per_fault(r.pager.fault_lock_wait_ns),
                per_fault(r.pager.fault_install_ns),
                per_fault(r.pager.fault_unlock_ns),
                per_fault(r.pager.fault_wait_ns),
                per_fault(r.pager.budget_wait_ns)
            ),
        );
    }
}

/// Memory against `--memory`, the device's WAF, losses, what was not paged.
/// `tree`: the launcher served the program's whole tree, whose memory is its.
fn memory_lines(r: &RunReport, tree: Option<&TreeFigures>, lines: &mut Lines) {
    let page = PAGE_BYTES as u64;
    let uncovered = r.rss_anon_bytes.saturating_sub(r.pager.core.resident_pages * page);
    let whose = if tree.is_some() {
        "the tree's anonymous memory: every process's heap and mappings"
    } else {
        "the program's anonymous memory: heap, its own mappings, the pager's tables and buffers"
    };
    lines.line(
        "memory",
        format!(
            "max {} of --memory {} ({whose}); mapped files not counted, {} resident now (the program's whole \
             resident set max {})",
            format_size(r.memory_used_max_bytes),
            format_size(r.memory_bytes),
            format_size(r.rss_file_bytes),
            format_size(r.rss_max_bytes)
        ),
    );
    if r.memory_used_max_bytes > r.memory_bytes + (1 << 20) {
        lines.line(
            "over --memory",
            format!(
                "by {} at its highest: what the pager does not page (the program's memory from before it \
                     started, stacks{}) left the paged heap too little; give a larger --memory",
                format_size(r.memory_used_max_bytes - r.memory_bytes),
                if tree.is_some() { "" } else { ", the pager's tables and buffers" },
            ),
        );
    }
    lines.line(
        "paged heap resident",
        format!(
            "max {} (its budget is what the rest leaves of --memory: {} at the end, + slack {})",
            format_size(r.pager.core.resident_pages_max * page),
            format_size(r.budget_bytes),
            format_size(r.slack_pages * page)
        ),
    );
    lines.line("device WAF", format!("{:.2} ({} GC runs)", r.pager.waf(), r.pager.engine.gc_runs));
    lines.line("lost pages", r.pager.core.lost_pages.to_string());
    if r.pager.pages_sealed > 0 {
        lines.line(
            "encrypted",
            format!(
                "{} pages sealed (AES-256-GCM, a key held only in memory); {} read back failed their check",
                r.pager.pages_sealed, r.pager.pages_failed_open
            ),
        );
    }
    if let Some(tree) = tree {
        lines.line(
            "pager's memory",
            format!(
                "max {} in the launcher (the pager's tables and buffers): the swap system's, not counted in \
                 --memory, as a memory cgroup does not charge the kernel's swap tables",
                format_size(tree.pager_memory_max_bytes)
            ),
        );
    } else {
        lines.line(
            "not paged",
            format!(
                "{} of anonymous memory outside the paged heap (stacks, memory from before the pager started, \
                 the pager's own tables){}",
                format_size(uncovered),
                if r.overflow_bytes > 0 {
                    format!("; {} allocated outside a full arena", format_size(r.overflow_bytes))
                } else {
                    String::new()
                }
            ),
        );
    }
    if r.mmaps_paged > 0 {
        lines.line(
            "program mmaps",
            format!("{} paged ({} mapped at the end)", r.mmaps_paged, format_size(r.mapped_bytes)),
        );
    }
    if r.pager.core.budget_overruns > 0 {
        lines.line(
            "past the budget",
            format!("{} faults (swap was full, or room came too slowly)", r.pager.core.budget_overruns),
        );
    }
    if r.pager.core.device_errors > 0 {
        lines.line("device errors", r.pager.core.device_errors.to_string());
    }
    if r.mlocks_ignored > 0 {
        lines.line("mlock ignored", format!("{} calls", r.mlocks_ignored));
    }
}

/// What the summary's terms mean, for a reader who never read the paper.
const LEGEND: &str = "  (missing: a touch of a page not in memory, first use or swapped out; write-protect: a \
write to a page being swapped out or sampled for reference; latencies are upper bounds, within a quarter; WAF: \
device bytes written per byte swapped out, the garbage collector's copies and record pages included)\n";

/// Why a program never loaded the pager, from what it is.
fn why_no_pager(program: &str) -> String {
    let path = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|path| path.is_file()))
    };
    let mut head = [0u8; 4];
    let read = path.as_ref().and_then(|path| File::open(path).ok()).map(|mut file| {
        use std::io::Read;
        file.read(&mut head).unwrap_or(0)
    });
    match read {
        Some(n) if n >= 2 && &head[..2] == b"#!" => format!(
            "{program} is a script, and the programs a script execs run without the pager: give the program it \
             runs (e.g. /usr/bin/python3 script.py, not a pyenv shim or wrapper script)"
        ),
        Some(4) if &head == b"\x7fELF" => format!(
            "{program} did not load the preload library (a statically linked or setuid program ignores \
             LD_PRELOAD), or it ended before the library's start-up ran"
        ),
        _ => "the program given never ran with the library (it may exec another program, which runs without \
              the pager: give the real program instead, e.g. /usr/bin/python3)"
            .to_string(),
    }
}

fn live_line(report: &RunReport) -> String {
    format!(
        "znswap: resident set {} of {}, paged heap {} of its budget {}, out {} in {} pages, fault p99 ≤ {:.0} µs",
        format_size(report.rss_bytes),
        format_size(report.memory_bytes),
        format_size(report.pager.core.resident_pages * PAGE_BYTES as u64),
        format_size(report.budget_bytes),
        report.pager.core.swap_outs_written,
        report.pager.core.swap_in_reads,
        report.fault_p99_ns as f64 / 1e3
    )
}

/// Whether every holder of the alive pipe's write end has closed it (exec, or exit).
fn pipe_closed(alive_read: i32) -> bool {
    let mut poll = libc::pollfd { fd: alive_read, events: libc::POLLIN, revents: 0 };
    // SAFETY: polls one descriptor we own, without waiting.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & libc::POLLHUP != 0 && poll.revents & libc::POLLIN == 0
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

#[cfg(test)]
mod tests {
    use super::{memory_lines, Lines, RunReport, TreeFigures};

    /// The memory lines say by how much a run went over --memory, and the pager's own
    /// memory beside the tree's (not counted in it) when the launcher served the tree.
    #[test]
    fn the_memory_lines_say_what_went_over_and_what_the_pager_held() {
        let report =
            RunReport { memory_bytes: 128 << 20, memory_used_max_bytes: (128 << 20) + (4 << 20), ..Default::default() };
        let tree = TreeFigures { pager_memory_max_bytes: 7 << 20, ..Default::default() };
        let mut lines = Lines(String::new());
        memory_lines(&report, Some(&tree), &mut lines);
        let text = lines.0;
        assert!(text.contains("by 4 MiB at its highest: what the pager does not page"), "{text}");
        assert!(text.contains("started, stacks) left the paged heap"), "{text}");
        assert!(text.contains("pager's memory         max 7 MiB in the launcher"), "{text}");
        let mut lines = Lines(String::new());
        memory_lines(&report, None, &mut lines);
        assert!(lines.0.contains("stacks, the pager's tables and buffers) left"), "{}", lines.0);
        assert!(!lines.0.contains("pager's memory"), "{}", lines.0);
    }
}
