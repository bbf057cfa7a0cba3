//! `znswap daemon`: one zoned device for many programs (issue 34, `docs/daemon.md`).
//! The daemon owns the device and one pager (`Pager::serve`), and serves every program
//! started with `znswap run --daemon` over a unix socket: each program's library hands
//! its heap over (its userfaultfd, `/proc/self/mem`, an agent socket), and the daemon's
//! fault handlers, evictor and GC page it with everyone else's.
//!
//! Memory: `--memory` is what the served heaps may hold resident together. A program
//! asks for its own `--memory`, granted while the grants fit (else refused with a
//! message); the pager's budget is the sum granted, and each program's pages are held
//! to its own grant (`Pager::set_tenant_budget`: each program is an engine tenant of its
//! own). A fork's child serves its own heap (`crates/preload/src/served.rs`). Not yet:
//! children paged, `znswap status`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;
use znswap_pager::connection::{self, Arrival};
use znswap_pager::{FaultMode, Pager, PagerConfig, PAGE_BYTES};
use znswap_wire::{Channel, Listener, Reason, ToTenant, Token};
use znswap_zoned::format_size;

use crate::device_path;
use crate::flags::{size, DeviceFlag, EncryptFlag, PolicyFlag};

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
    /// The unix socket programs connect to [default: /run/znswap/znswap.sock as root,
    /// else $XDG_RUNTIME_DIR/znswap.sock]. Only this user (and root) may connect,
    /// unless --allow-uid says who else.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve programs of this user id (repeatable): the socket is then open to
    /// all, and each connection's user (SO_PEERCRED) is checked.
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uids: Vec<u32>,
}

/// Programs served at once at most: a region and an engine tenant each.
const PROCESSES_MAX: u32 = 16;
/// Fault handler threads (as `znswap run`'s default).
const HANDLER_THREADS: usize = 2;

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

/// What the daemon has granted: each served program's memory and engine tenant.
struct Grants {
    pool_pages: u64,
    /// (tenant index, pages) per program served now.
    granted: Vec<(u32, u64)>,
    /// The pager's smallest budget, in pages.
    floor_pages: u64,
}

impl Grants {
    fn granted_pages(&self) -> u64 {
        self.granted.iter().map(|&(_, pages)| pages).sum()
    }

    /// Grants `pages` (at least the floor) to a new program: its engine tenant, or why
    /// not.
    fn grant(&mut self, pages: u64) -> Result<(u32, u64), Reason> {
        let pages = pages.max(self.floor_pages);
        if self.granted_pages() + pages > self.pool_pages {
            return Err(Reason::NoMemory);
        }
        let tenant =
            (0..PROCESSES_MAX).find(|t| self.granted.iter().all(|&(used, _)| used != *t)).ok_or(Reason::Full)?;
        self.granted.push((tenant, pages));
        Ok((tenant, pages))
    }

    fn release(&mut self, tenant: u32) {
        self.granted.retain(|&(used, _)| used != tenant);
    }

    /// The pager's budget: what is granted, but never below its floor.
    fn budget_bytes(&self) -> u64 {
        self.granted_pages().max(self.floor_pages) * PAGE_BYTES as u64
    }
}

pub fn run(args: DaemonArgs) -> Result<()> {
    // Before any thread starts, so that every thread inherits the mask and the signals
    // reach only the thread that waits for them.
    let stop_signals = block_stop_signals();
    let socket = args.socket.clone().unwrap_or_else(default_socket);
    let device_name = args.device.device.clone().unwrap_or_else(device_path::default_path);
    let device = device_path::open(args.device.device.as_deref())?;
    let pool_pages = args.memory / PAGE_BYTES as u64;
    let config = PagerConfig {
        policy: args.policy.policy,
        regions_max: PROCESSES_MAX + 1,
        tenants: PROCESSES_MAX,
        fault_mode: FaultMode::HandlerThreads(HANDLER_THREADS),
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
    let listener = listen(&socket, !args.allow_uids.is_empty())?;
    let pager = Arc::new(Pager::serve(device.into(), config).context("starting the pager")?);
    let floor_pages = pager.budget_bytes_min() / PAGE_BYTES as u64;
    anyhow::ensure!(
        floor_pages <= pool_pages,
        "--memory {} is too small: the pager needs at least {}",
        format_size(args.memory),
        format_size(floor_pages * PAGE_BYTES as u64)
    );
    let grants = Arc::new(Mutex::new(Grants { pool_pages, granted: Vec::new(), floor_pages }));
    pager.set_budget(grants.lock().unwrap().budget_bytes())?;
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
    loop {
        let channel = match listener.accept() {
            Ok(channel) => channel,
            Err(error) => {
                eprintln!("znswap daemon: accepting a connection: {error}");
                continue;
            }
        };
        let (pager, grants, allowed) = (pager.clone(), grants.clone(), args.allow_uids.clone());
        let spawned = std::thread::Builder::new().name("znswap-tenant".into()).spawn(move || {
            serve_process(&pager, &grants, channel, |uid| uid == own_uid || uid == 0 || allowed.contains(&uid))
        });
        if let Err(error) = spawned {
            eprintln!("znswap daemon: a thread for a new program: {error}");
        }
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

/// One program's connection: its Hello checked (its user, its pid), its memory granted,
/// its heap served until it leaves, then its slots freed and its grant returned.
fn serve_process(pager: &Pager, grants: &Mutex<Grants>, channel: Channel, allowed: impl Fn(u32) -> bool) {
    let peer = match channel.peer() {
        Ok(peer) => peer,
        Err(error) => return eprintln!("znswap daemon: a connection's peer: {error}"),
    };
    if !allowed(peer.uid) {
        let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::NotAllowed));
        return eprintln!("znswap daemon: pid {} of user {} refused: not allowed (--allow-uid)", peer.pid, peer.uid);
    }
    // (A connection that ends before its Hello is a launcher checking that the daemon
    // is there.)
    let Arrival { hello, link } = match connection::arrive(&channel, peer.pid as u32, 0) {
        Ok(Some(arrival)) => arrival,
        Ok(None) => return,
        Err(error) => return eprintln!("znswap daemon: pid {} refused: {error}", peer.pid),
    };
    let name = match &hello.join {
        znswap_wire::Join::New(name) => name.as_str().to_string(),
        znswap_wire::Join::Tenant(_) => "a tenant by token".to_string(),
    };
    let granted = grants.lock().unwrap().grant(hello.memory_pages);
    let (tenant, pages) = match granted {
        Ok(granted) => granted,
        Err(reason) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(reason));
            let grants = grants.lock().unwrap();
            return eprintln!(
                "znswap daemon: pid {} ({name}) refused: it asks for {}, and {} of {} is granted",
                peer.pid,
                format_size(hello.memory_pages * PAGE_BYTES as u64),
                format_size(grants.granted_pages() * PAGE_BYTES as u64),
                format_size(grants.pool_pages * PAGE_BYTES as u64)
            );
        }
    };
    let link = znswap_pager::TenantLink { tenant, ..link };
    let release = |grants: &Mutex<Grants>| {
        let mut grants = grants.lock().unwrap();
        grants.release(tenant);
        let _ = pager.set_tenant_budget(tenant, None);
        let _ = pager.set_budget(grants.budget_bytes());
    };
    let id = match pager.add_tenant(link) {
        Ok(id) => id,
        Err(error) => {
            release(grants);
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::Full));
            return eprintln!("znswap daemon: pid {} ({name}) cannot be served: {error}", peer.pid);
        }
    };
    {
        let grants = grants.lock().unwrap();
        let budget = pager.set_budget(grants.budget_bytes());
        if let Err(error) = budget.and_then(|()| pager.set_tenant_budget(tenant, Some(pages * PAGE_BYTES as u64))) {
            eprintln!("znswap daemon: the budget: {error}");
        }
    }
    let welcome = ToTenant::Welcome { tenant, token: Token([0; 16]), budget_pages: pages };
    if channel.send_to_tenant(&welcome).is_ok() {
        eprintln!(
            "znswap daemon: pid {} ({name}) joined with {} of memory",
            peer.pid,
            format_size(pages * PAGE_BYTES as u64)
        );
        if let Err(error) = connection::serve_calls(pager, id, &channel) {
            eprintln!("znswap daemon: pid {} ({name}) let go: {error}", peer.pid);
        }
    }
    pager.remove_tenant(id);
    release(grants);
    let stats = pager.stats();
    eprintln!(
        "znswap daemon: pid {} ({name}) left; all programs so far: {} pages swapped out, {} in, {} lost",
        peer.pid, stats.swap_outs_written, stats.swap_in_reads, stats.lost_pages
    );
}
