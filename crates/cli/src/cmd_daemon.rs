//! `znswap daemon`: one zoned device for many programs (issue 34, `docs/daemon.md`).
//! The daemon owns the device and one pager (`Pager::serve`), and serves every program
//! started with `znswap run --daemon` over a unix socket: each program's library hands
//! its heap over (its userfaultfd, `/proc/self/mem`, an agent socket), and the daemon's
//! fault handlers, evictor and GC page it with everyone else's.
//!
//! Memory: `--memory` is what the served heaps may hold resident together. A tenant (a
//! program and every program it executes: `daemon_tenants.rs`) asks for its own
//! `--memory`, granted while the grants fit (else refused with a message); the pager's
//! budget is the sum granted, and each tenant's pages are held to its own grant
//! (`Pager::set_tenant_budget`: each is an engine tenant of its own). A fork's child
//! serves its own heap, reading the pages its parent had swapped out from a snapshot
//! the daemon keeps of the fork (`connection::ForkRegistry`). `znswap status` asks the
//! figures on the same socket. Not yet: forked children paged within their tenant.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use znswap_pager::connection::{self, Arrival, ForkRegistry};
use znswap_pager::{FaultMode, Pager, PagerConfig, PAGE_BYTES};
use znswap_wire::{Channel, DaemonStatus, Join, Listener, Name, Reason, TenantStatus, ToDaemon, ToTenant, Token};
use znswap_zoned::format_size;

use crate::daemon_tenants::{Tenant, Tenants, TENANTS_MAX};
use crate::device_path;
use crate::flags::{rate, size, DeviceFlag, EncryptFlag, FaultFlags, PolicyFlag};

#[derive(Args)]
pub struct DaemonArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// Resident memory the served programs' paged heaps hold together (e.g. 1G). Each
    /// program asks for its share with `znswap run --daemon --memory M` and is refused
    /// when the shares granted would pass this.
    #[arg(long, value_parser = size, default_value = "1G")]
    memory: u64,
    #[command(flatten)]
    policy: PolicyFlag,
    #[command(flatten)]
    encrypt: EncryptFlag,
    #[command(flatten)]
    faults: FaultFlags,
    /// The unix socket programs connect to [default: /run/znswap/znswap.sock as root,
    /// else $XDG_RUNTIME_DIR/znswap.sock]. Only this user (and root) may connect,
    /// unless --allow-uid says who else.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve programs of this user id (repeatable): the socket is then open to
    /// all, and each connection's user (SO_PEERCRED) is checked.
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uids: Vec<u32>,
    /// Each tenant's share of the device's writes: at most RATE bytes a second (e.g.
    /// 8M) of its swap-outs and of the GC's moves of its pages together, so a tenant
    /// pays for the GC its rewrites cause (with --policy tenant, only its own data is
    /// moved for it). Past its share a tenant's pages stay until its allowance catches
    /// up, and its faults wait: it slows, the others do not. A program may ask for less
    /// (`znswap run --daemon --write-limit`) [default: no limit]
    #[arg(long, value_name = "RATE", value_parser = rate)]
    write_limit: Option<u64>,
    /// Each tenant's swap limit: at most SIZE of its pages on the device (swapped out, or
    /// kept as their swap cache), so that no tenant fills the device the others swap to.
    /// At it, a tenant's pages stay in memory past its --memory (said once in the log). A
    /// program may ask for less (`znswap run --daemon --swap-limit`) [default: no limit]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    swap_limit: Option<u64>,
}

/// Processes served at once at most: a region each (`TENANTS_MAX` tenants share them).
const PROCESSES_MAX: u32 = 64;
/// Fault handler threads by default (as `znswap run`'s).
const HANDLER_THREADS: u32 = 2;
/// Connections served at once at most: each is a thread, serving its requests one at a
/// time (so a process has one in flight). A tenant holds one, each of its processes one
/// and each fork's child one more while it reads its parent's snapshot: four per process
/// is room to spare, and a peer opening connections without end is refused past it
/// rather than starting threads without end.
const CONNECTIONS_MAX: usize = 4 * PROCESSES_MAX as usize;

/// The daemon's socket when none is given: where `znswap run --daemon` looks too.
pub fn default_socket() -> PathBuf {
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/run/znswap/znswap.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("znswap.sock"),
        // SAFETY: as above.
        None => std::env::temp_dir().join(format!("znswap-{}.sock", unsafe { libc::geteuid() })),
    }
}

/// What every connection's thread shares.
struct Daemon {
    pager: Pager,
    /// Snapshots its processes' forks' children read.
    forks: Arc<ForkRegistry>,
    tenants: Mutex<Tenants>,
    started: Instant,
    device_bytes: u64,
    /// `--write-limit`: each tenant's at most, bytes a second.
    write_limit: Option<u64>,
    /// `--swap-limit`: each tenant's at most, in pages.
    swap_limit_pages: Option<u64>,
}

impl Daemon {
    /// The pager's budget and tenant `index`'s memory and limits (`None`: let go) after
    /// the grants moved.
    fn set_budgets(&self, tenants: &Tenants, index: u32, grant: Option<(u64, Limits)>) {
        let budget = self.pager.set_budget(tenants.budget_pages() * PAGE_BYTES as u64);
        let tenant = self.pager.set_tenant_budget(index, grant.map(|(pages, _)| pages * PAGE_BYTES as u64));
        let limits = grant.map(|(_, limits)| limits).unwrap_or_default();
        let writes = self.pager.set_tenant_write_limit(index, limits.write);
        let swap = self.pager.set_tenant_swap_limit(index, limits.swap_pages.map(|pages| pages * PAGE_BYTES as u64));
        if let Err(error) = budget.and(tenant).and(writes).and(swap) {
            eprintln!("znswap daemon: the budget: {error}");
        }
    }

    /// The limits a tenant asking `asked` (0: none of its own) gets: for each, the
    /// smaller of its own and the daemon's.
    fn limits_for(&self, asked: Limits) -> Limits {
        Limits {
            write: smaller(self.write_limit, asked.write),
            swap_pages: smaller(self.swap_limit_pages, asked.swap_pages),
        }
    }

    /// Begins a tenant (see `Tenants::begin`), its budget set: its index, grant and token.
    fn begin(&self, name: &Name, pages: u64, limits: Limits, opened: bool) -> Result<(u32, u64, Token), Reason> {
        let token = Token::random().map_err(|_| Reason::Full)?;
        let mut tenants = self.tenants.lock().unwrap();
        let tenant = tenants.begin(name, pages, opened, token, |index| {
            // (No process of the index is served: its latencies are a former tenant's.)
            self.pager.tenant_begins(index);
            self.pager.tenant_figures(index)
        })?;
        let (index, pages) = (tenant.index, tenant.pages);
        self.set_budgets(&tenants, index, Some((pages, self.limits_for(limits))));
        Ok((index, pages, token))
    }

    /// Says why a tenant was refused, with what is granted.
    fn refused(&self, who: &str, pages: u64, reason: Reason) {
        let tenants = self.tenants.lock().unwrap();
        eprintln!(
            "znswap daemon: {who} refused ({reason:?}): it asks for {}, and {} of {} is granted to {} tenants",
            format_size(pages * PAGE_BYTES as u64),
            format_size(tenants.granted_pages() * PAGE_BYTES as u64),
            format_size(tenants.pool_pages() * PAGE_BYTES as u64),
            tenants.iter().count()
        );
    }

    /// Tenant `index` let go (`Tenants::leave`, `close`): its budget lifted, its figures
    /// said.
    fn let_go(&self, tenants: &Tenants, gone: Tenant) {
        self.set_budgets(tenants, gone.index, None);
        let figures = gone.figures(self.pager.tenant_figures(gone.index));
        let stats = self.pager.stats();
        eprintln!(
            "znswap daemon: tenant {} ({}) closed: {} served, {} pages swapped out, {} in, {} moved by GC; all \
             programs so far: {} pages swapped out, {} in, {} lost",
            gone.index,
            gone.name.as_str(),
            plural(gone.joined, "process", "processes"),
            figures.swap_outs,
            figures.swap_ins,
            format_size(figures.gc_bytes),
            self.swapped_out_pages(),
            stats.swap_in_reads,
            stats.lost_pages
        );
    }

    /// Pages swapped out since the start, counted as the tenants' are.
    fn swapped_out_pages(&self) -> u64 {
        (0..TENANTS_MAX).map(|index| self.pager.tenant_figures(index).swap_outs).sum()
    }

    /// `znswap status`'s answer: the daemon's figures, then each tenant's.
    fn status(&self) -> (DaemonStatus, Vec<TenantStatus>) {
        let tenants = self.tenants.lock().unwrap();
        let stats = self.pager.stats();
        let page = PAGE_BYTES as u64;
        let each: Vec<TenantStatus> = tenants
            .iter()
            .map(|tenant| {
                let figures = tenant.figures(self.pager.tenant_figures(tenant.index));
                let (fault_p99_ns, _) = self.pager.tenant_fault_latency(tenant.index, 0.99);
                let totals = self.pager.tenant_fault_times(tenant.index);
                TenantStatus {
                    tenant: tenant.index,
                    processes: tenant.processes,
                    name: tenant.name.clone(),
                    processes_joined: tenant.joined,
                    budget_pages: tenant.pages,
                    resident_pages: figures.resident_pages,
                    swap_outs: figures.swap_outs,
                    swap_ins: figures.swap_ins,
                    gc_bytes: figures.gc_bytes,
                    faults: totals.faults,
                    fault_p99_ns,
                    fault_handled_ns: totals.handled_ns,
                    fault_lock_wait_ns: totals.times.lock_wait_ns,
                    fault_read_ns: totals.times.read_ns,
                    fault_reads: totals.times.reads,
                    fault_install_ns: totals.times.install_ns,
                    fault_room_wait_ns: totals.times.room_wait_ns,
                    fault_other_wait_ns: totals.times.wait_ns + totals.times.unlock_ns,
                    written_bytes: figures.written_bytes,
                    write_limit: figures.write_limit.unwrap_or(0),
                    throttled_ns: figures.throttled_ns,
                    grace_bytes: figures.grace_bytes,
                    swap_pages: figures.swap_slots,
                    swap_limit_pages: figures.swap_limit.unwrap_or(0),
                }
            })
            .collect();
        let status = DaemonStatus {
            pid: std::process::id(),
            tenants: each.len() as u32,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            memory_pages: tenants.pool_pages(),
            granted_pages: tenants.granted_pages(),
            resident_pages: stats.resident_pages,
            swap_outs: self.swapped_out_pages(),
            swap_ins: stats.swap_in_reads,
            lost_pages: stats.lost_pages,
            host_pages_written: stats.host_bytes_written / page,
            gc_pages_written: stats.gc_bytes_written / page,
            record_pages_written: stats.record_bytes_written / page,
            zone_resets: stats.zone_resets,
            device_bytes: self.device_bytes,
        };
        (status, each)
    }

    fn send_status(&self, channel: &Channel) -> std::io::Result<()> {
        let (status, tenants) = self.status();
        channel.send_to_tenant(&ToTenant::Status(status))?;
        for tenant in tenants {
            channel.send_to_tenant(&ToTenant::TenantStatus(tenant))?;
        }
        Ok(())
    }
}

pub fn run(args: DaemonArgs) -> Result<()> {
    // Before any thread starts, so that every thread inherits the mask and the signals
    // reach only the thread that waits for them.
    let stop_signals = block_stop_signals();
    // Parking moves pages within a process, which only its agent could do for the
    // daemon: one round trip per move (docs/daemon.md, "Three designs").
    if args.faults.park > 0 || args.faults.wp_async {
        bail!("--park and --wp-async are not available under the daemon (parking needs the program's own pager: use `znswap run` without --daemon)");
    }
    let socket = args.socket.clone().unwrap_or_else(default_socket);
    let device_name = args.device.device.clone().unwrap_or_else(device_path::default_path);
    let device = device_path::open(args.device.device.as_deref())?;
    let pool_pages = args.memory / PAGE_BYTES as u64;
    let config = PagerConfig {
        policy: args.policy.policy,
        regions_max: PROCESSES_MAX,
        tenants: TENANTS_MAX,
        fault_mode: FaultMode::HandlerThreads(args.faults.handler_threads.unwrap_or(HANDLER_THREADS) as usize),
        readahead_pages: args.faults.readahead,
        fault_poll_us: args.faults.fault_poll,
        reference_sampling: !args.faults.no_reference_sampling,
        encrypt: args.encrypt.encrypt,
        colocate: false,
        slack_pages: (pool_pages / 64).clamp(64, 256),
        ..PagerConfig::new(args.memory)
    };
    Pager::check(device.geometry(), &config).with_context(|| {
        format!("{} cannot serve as swap with --memory {}", device_name.display(), format_size(args.memory))
    })?;
    // Swap holds nothing across runs: whatever a daemon before this one left is gone.
    device.reset_all().with_context(|| format!("resetting {}", device_name.display()))?;
    let device_bytes = device.geometry().zone_count as u64 * device.geometry().zone_capacity_bytes();
    let listener = listen(&socket, !args.allow_uids.is_empty())?;
    let pager = Pager::serve(device.into(), config).context("starting the pager")?;
    let floor_pages = pager.budget_bytes_min() / PAGE_BYTES as u64;
    anyhow::ensure!(
        floor_pages <= pool_pages,
        "--memory {} is too small: the pager needs at least {}",
        format_size(args.memory),
        format_size(floor_pages * PAGE_BYTES as u64)
    );
    let tenants = Tenants::new(pool_pages, floor_pages);
    pager.set_budget(tenants.budget_pages() * PAGE_BYTES as u64)?;
    let forks = Arc::new(ForkRegistry::default());
    let daemon = Arc::new(Daemon {
        pager,
        forks,
        tenants: Mutex::new(tenants),
        started: Instant::now(),
        device_bytes,
        write_limit: args.write_limit,
        swap_limit_pages: args.swap_limit.map(crate::flags::swap_limit_pages),
    });
    stop_on_signals(stop_signals, socket.clone())?;
    eprintln!(
        "znswap daemon: serving {} with {} of memory on {} (`znswap run --daemon{} -- CMD`)",
        device_name.display(),
        format_size(args.memory),
        socket.display(),
        if args.socket.is_some() { format!(" {}", socket.display()) } else { String::new() }
    );
    // SAFETY: no arguments.
    let own_uid = unsafe { libc::geteuid() };
    let connections = Arc::new(AtomicUsize::new(0));
    let mut refused = 0u64;
    loop {
        let channel = match listener.accept() {
            Ok(channel) => channel,
            Err(error) => {
                eprintln!("znswap daemon: accepting a connection: {error}");
                continue;
            }
        };
        if connections.load(Relaxed) >= CONNECTIONS_MAX {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::Full));
            refused += 1;
            // (Said for the first and then every hundredth: a flood must not fill the log.)
            if refused % 100 == 1 {
                let pid = channel.peer().map_or(-1, |peer| peer.pid);
                eprintln!(
                    "znswap daemon: pid {pid} refused: {CONNECTIONS_MAX} connections are open ({refused} refused so far)"
                );
            }
            continue;
        }
        connections.fetch_add(1, Relaxed);
        let (daemon, allowed, open) = (daemon.clone(), args.allow_uids.clone(), connections.clone());
        let spawned = std::thread::Builder::new().name("znswap-conn".into()).spawn(move || {
            let _counted = Counted(open);
            serve_connection(&daemon, channel, |uid| uid == own_uid || uid == 0 || allowed.contains(&uid))
        });
        if let Err(error) = spawned {
            connections.fetch_sub(1, Relaxed);
            eprintln!("znswap daemon: a thread for a new connection: {error}");
        }
    }
}

/// One connection served, counted while its thread runs, whichever way it ends.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Binds the socket at `path`: its directory made, a stale socket (nobody answering)
/// replaced, a live one refused. Only this user may connect unless `open`.
fn listen(path: &Path, open: bool) -> Result<Listener> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if Channel::connect(path).is_ok() {
            bail!("a znswap daemon already listens at {} (stop it first, or give another --socket)", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener = Listener::bind(path, if open { 0o666 } else { 0o600 })
        .with_context(|| format!("listening at {}", path.display()))?;
    if open {
        // (The mode given to bind is cut by the umask.)
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .with_context(|| format!("opening {} to the users of --allow-uid", path.display()))?;
    }
    Ok(listener)
}

/// A tenant's limits on the device (`None`: none).
#[derive(Clone, Copy, Default)]
struct Limits {
    /// Bytes a second of its swap-outs and GC moves (`--write-limit`).
    write: Option<u64>,
    /// Pages on the device (`--swap-limit`).
    swap_pages: Option<u64>,
}

impl Limits {
    /// `, writing at most 8 MiB/s, swapping at most 1 GiB`, or nothing.
    fn describe(&self) -> String {
        let mut out = String::new();
        if let Some(rate) = self.write {
            out += &format!(", writing at most {}/s", format_size(rate));
        }
        if let Some(pages) = self.swap_pages {
            out += &format!(", swapping at most {}", format_size(pages * PAGE_BYTES as u64));
        }
        out
    }
}

/// The smaller of two limits, either absent.
fn smaller(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `1 process`, `2 processes`.
pub fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

/// SIGINT and SIGTERM, blocked in the calling thread (and so in those it starts).
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset; the mask is ours.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// SIGINT and SIGTERM (`set`, blocked everywhere) stop the daemon: its socket goes, and
/// so does it. (Its programs lose their swapped-out pages: they stop at their next
/// fault on one.)
fn stop_on_signals(set: libc::sigset_t, socket: PathBuf) -> Result<()> {
    std::thread::Builder::new()
        .name("znswap-signals".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: waits for one of the blocked signals.
            unsafe { libc::sigwait(&set, &mut signal) };
            let _ = std::fs::remove_file(&socket);
            eprintln!("znswap daemon: stopping (signal {signal})");
            std::process::exit(0);
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// One connection, by its first message: a launcher opening a tenant, a process
/// joining one (or one of its own), or `znswap status` asking. Its user is checked first.
fn serve_connection(daemon: &Daemon, channel: Channel, allowed: impl Fn(u32) -> bool) {
    let peer = match channel.peer() {
        Ok(peer) => peer,
        Err(error) => return eprintln!("znswap daemon: a connection's peer: {error}"),
    };
    if !allowed(peer.uid) {
        let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::NotAllowed));
        return eprintln!("znswap daemon: pid {} of user {} refused: not allowed (--allow-uid)", peer.pid, peer.uid);
    }
    let pid = peer.pid as u32;
    match channel.recv_to_daemon() {
        // A launcher checking that the daemon is there.
        Ok(None) => {}
        Ok(Some((ToDaemon::Open { name, memory_pages, write_limit, swap_limit_pages }, _))) => {
            let asked = Limits {
                write: (write_limit > 0).then_some(write_limit),
                swap_pages: (swap_limit_pages > 0).then_some(swap_limit_pages),
            };
            serve_opener(daemon, &channel, pid, name, memory_pages, asked)
        }
        Ok(Some((ToDaemon::Status, _))) => serve_status(daemon, &channel),
        Ok(Some((ToDaemon::ForkChild { token }, mut fds))) => {
            let staging = fds.pop().expect("ForkChild comes with one descriptor");
            if let Err(error) = daemon.forks.serve_child(&channel, pid, token, staging) {
                eprintln!("znswap daemon: pid {pid}, a fork's child: {error}");
            }
        }
        Ok(Some((ToDaemon::Hello(hello), fds))) => match connection::take_hello(&channel, hello, fds, pid, 0) {
            Ok(arrival) => serve_process(daemon, &channel, pid, arrival),
            Err(error) => eprintln!("znswap daemon: pid {pid} refused: {error}"),
        },
        Ok(Some((message, _))) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::BadMessage));
            eprintln!("znswap daemon: pid {pid} refused: it began with {message:?}");
        }
        Err(error) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::BadMessage));
            eprintln!("znswap daemon: pid {pid} refused: {error}");
        }
    }
}

/// `znswap status`: the figures, as often as asked, until it hangs up.
fn serve_status(daemon: &Daemon, channel: &Channel) {
    loop {
        if daemon.send_status(channel).is_err() {
            return;
        }
        match channel.recv_to_daemon() {
            Ok(Some((ToDaemon::Status, _))) => {}
            _ => return,
        }
    }
}

/// A launcher's tenant (`znswap run --daemon`): granted, its token sent for its
/// program's processes to join with, held until the launcher hangs up (and its last
/// process leaves). The launcher may ask the figures meanwhile (for its summary).
fn serve_opener(daemon: &Daemon, channel: &Channel, pid: u32, name: Name, memory_pages: u64, asked: Limits) {
    let (index, pages, token) = match daemon.begin(&name, memory_pages, asked, true) {
        Ok(begun) => begun,
        Err(reason) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(reason));
            return daemon.refused(&format!("tenant {name:?} of pid {pid}"), memory_pages, reason);
        }
    };
    if channel.send_to_tenant(&ToTenant::Welcome { tenant: index, token, budget_pages: pages }).is_ok() {
        eprintln!(
            "znswap daemon: tenant {index} ({}) opened by pid {pid} with {} of memory{}",
            name.as_str(),
            format_size(pages * PAGE_BYTES as u64),
            daemon.limits_for(asked).describe()
        );
        loop {
            match channel.recv_to_daemon() {
                Ok(Some((ToDaemon::Status, _))) => {
                    if daemon.send_status(channel).is_err() {
                        break;
                    }
                }
                Ok(Some((ToDaemon::Bye, _)) | None) => break,
                Ok(Some((message, _))) => {
                    eprintln!("znswap daemon: tenant {index}'s launcher (pid {pid}) sent {message:?}; closing it");
                    break;
                }
                Err(error) => {
                    eprintln!("znswap daemon: tenant {index}'s launcher (pid {pid}): {error}; closing it");
                    break;
                }
            }
        }
    }
    let mut tenants = daemon.tenants.lock().unwrap();
    if let Some(gone) = tenants.close(index) {
        daemon.let_go(&tenants, gone);
    }
}

/// One process: joined to its tenant (or a tenant of its own), its heap served until
/// it leaves, then its slots freed; the tenant let go with its last process.
fn serve_process(daemon: &Daemon, channel: &Channel, pid: u32, arrival: Arrival) {
    let Arrival { hello, link } = arrival;
    let joined = match &hello.join {
        Join::New(name) => daemon.begin(name, hello.memory_pages, Limits::default(), false).map(|(index, pages, _)| {
            eprintln!(
                "znswap daemon: pid {pid} ({}) joined with {} of memory",
                name.as_str(),
                format_size(pages * PAGE_BYTES as u64)
            );
            (index, pages)
        }),
        Join::Tenant(token) | Join::ForkChild { tenant: token, .. } => {
            daemon.tenants.lock().unwrap().join(token).map(|tenant| (tenant.index, tenant.pages))
        }
    };
    let (index, pages) = match joined {
        Ok(joined) => joined,
        Err(reason) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(reason));
            return daemon.refused(&format!("pid {pid}"), hello.memory_pages, reason);
        }
    };
    // A fork's child: paged from the fork on, within its parent's tenant, reading the
    // pages then on the device from the fork's snapshot (held until it is let go here).
    let inherit = match hello.join {
        Join::ForkChild { fork, .. } => match daemon.forks.take(pid, fork) {
            Ok(snapshot) if snapshot.tenant() == index => Some((fork, snapshot)),
            taken => {
                let why = match taken {
                    Ok(_) => {
                        daemon.forks.release(&fork);
                        "its fork's parent is of another tenant".to_string()
                    }
                    Err(error) => error.to_string(),
                };
                let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::UnknownTenant));
                eprintln!("znswap daemon: pid {pid} (tenant {index}), a fork's child, refused: {why}");
                let mut tenants = daemon.tenants.lock().unwrap();
                if let Some(gone) = tenants.leave(index) {
                    daemon.let_go(&tenants, gone);
                }
                return;
            }
        },
        _ => None,
    };
    let link = znswap_pager::TenantLink { tenant: index, ..link };
    let added = match &inherit {
        Some((_, snapshot)) => daemon.pager.add_forked_tenant(link, snapshot),
        None => daemon.pager.add_tenant(link),
    };
    let paged = match added {
        Ok(id) => {
            // (The token is the tenant's: a process that joined by it has it already.)
            let welcome = ToTenant::Welcome { tenant: index, token: Token([0; 16]), budget_pages: pages };
            if channel.send_to_tenant(&welcome).is_ok() {
                if let Err(error) = connection::serve_calls(&daemon.pager, id, pid, channel, Some(&daemon.forks)) {
                    eprintln!("znswap daemon: pid {pid} (tenant {index}) let go: {error}");
                }
            }
            daemon.pager.remove_tenant(id);
            true
        }
        Err(error) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::Full));
            eprintln!("znswap daemon: pid {pid} (tenant {index}) cannot be served: {error}");
            false
        }
    };
    if let Some((fork, _)) = inherit {
        if paged {
            // Its region is gone: the slots it inherited may be reset now.
            daemon.forks.release(&fork);
        } else {
            // Not paged here, it serves its own heap and reads its parent's pages from
            // the snapshot (let go when it exits).
            daemon.forks.give_back(&fork);
        }
    }
    let mut tenants = daemon.tenants.lock().unwrap();
    if let Some(gone) = tenants.leave(index) {
        daemon.let_go(&tenants, gone);
    }
}
