//! Starting the daemon: its configuration checked, its device reset, its socket bound,
//! its pager started, and connections served until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use znswap_pager::{Pager, PagerConfig, PAGE_BYTES};
use znswap_zoned::{format_size, ZonedDevice};

use znswap_wire::{Listener, TenantStatus};

use crate::connection::ForkRegistry;
use crate::daemon::{Daemon, Log};
use crate::listen;
use crate::tenants::Tenants;

/// What the daemon serves with: its device, its memory, its pager's configuration, where
/// it listens and for whom, and each tenant's limits.
pub struct DaemonConfig {
    /// The device (opened by the caller) and its name for messages.
    pub device: Box<dyn ZonedDevice>,
    pub device_name: PathBuf,
    /// What the served heaps hold resident together.
    pub memory: u64,
    pub pager: PagerConfig,
    pub socket: PathBuf,
    /// The socket was given (said in the start message: `znswap run --daemon PATH`).
    pub socket_given: bool,
    /// Users besides this one (and root) who may connect.
    pub allow_uids: Vec<u32>,
    /// Each tenant's write share at most, bytes a second, and swap limit, pages.
    pub write_limit: Option<u64>,
    pub swap_limit_pages: Option<u64>,
}

/// Refuses what the daemon cannot serve, before anything is opened: parking moves pages
/// within a process, which only its agent could do for the daemon (one round trip per
/// move: `docs/daemon.md`, "Three designs").
pub fn check(pager: &PagerConfig) -> Result<()> {
    if pager.core.park_pages > 0 || pager.core.wp_async {
        bail!("--park and --wp-async are not available under the daemon (parking needs the program's own pager: use `znswap run` without --daemon)");
    }
    Ok(())
}

/// Serves until SIGINT or SIGTERM stops the process.
pub fn run(config: DaemonConfig) -> Result<()> {
    // Before any thread starts, so that every thread inherits the mask and the signals
    // reach only the thread that waits for them.
    let stop_signals = listen::block_stop_signals();
    let (device_name, memory, socket, socket_given) =
        (config.device_name.clone(), config.memory, config.socket.clone(), config.socket_given);
    let allow_uids = config.allow_uids.clone();
    let (daemon, listener) = start(config, Log { name: "znswap daemon", chatty: true })?;
    listen::stop_on_signals(stop_signals, socket.clone())?;
    // The pager's decisions over time (whether its handlers may poll), every 100 ms, for
    // as long as the daemon serves. (Under `znswap run` the launcher's governor ticks.)
    let ticked = daemon.clone();
    std::thread::Builder::new()
        .name("znswap-tick".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            ticked.pager.tick();
        })
        .context("starting the pager's tick thread")?;
    let pool = daemon.pager.stats().compressed_pool_bytes;
    eprintln!(
        "znswap daemon: serving {} with {} of memory{} on {} (`znswap run --daemon{} -- CMD`)",
        device_name.display(),
        format_size(memory),
        if pool > 0 {
            format!(" ({} of it the compressed pool, {} for programs)", format_size(pool), format_size(memory - pool))
        } else {
            String::new()
        },
        socket.display(),
        if socket_given { format!(" {}", socket.display()) } else { String::new() }
    );
    listen::accept(&daemon, &listener, &allow_uids)
}

/// The daemon started: its configuration checked, its device reset, its socket bound,
/// its pager started with the grants' budget.
fn start(config: DaemonConfig, log: Log) -> Result<(Arc<Daemon>, Listener)> {
    check(&config.pager)?;
    let DaemonConfig { device, device_name, memory, pager, socket, allow_uids, write_limit, swap_limit_pages, .. } =
        config;
    Pager::check(device.geometry(), &pager).with_context(|| {
        format!("{} cannot serve as swap with --memory {}", device_name.display(), format_size(memory))
    })?;
    // The compressed pool is part of the memory: the tenants are granted the rest.
    let compressed_pool = pager.compressed_pool_bytes;
    znswap_pager::check_compressed_pool_share(memory, compressed_pool)?;
    let pool_pages = (memory - compressed_pool) / PAGE_BYTES as u64;
    // Swap holds nothing across runs: whatever a daemon before this one left is gone.
    device.reset_all().with_context(|| format!("resetting {}", device_name.display()))?;
    let device_bytes = device.geometry().zone_count as u64 * device.geometry().zone_capacity_bytes();
    let listener = listen::bind(&socket, !allow_uids.is_empty())?;
    let pager = Pager::serve(device.into(), pager).context("starting the pager")?;
    let floor_pages = pager.budget_bytes_min() / PAGE_BYTES as u64;
    anyhow::ensure!(
        floor_pages <= pool_pages,
        "--memory {} is too small: the pager needs at least {}",
        format_size(memory),
        format_size(floor_pages * PAGE_BYTES as u64)
    );
    let tenants = Tenants::new(pool_pages, floor_pages);
    pager.set_budget(tenants.budget_pages() * PAGE_BYTES as u64)?;
    let daemon = Arc::new(Daemon {
        pager,
        forks: Arc::new(ForkRegistry::default()),
        tenants: Mutex::new(tenants),
        started: Instant::now(),
        device_bytes,
        write_limit,
        swap_limit_pages,
        log,
    });
    Ok((daemon, listener))
}

/// A daemon serving from threads of the caller's own process: `znswap run`'s launcher
/// serving its program's process tree as the daemon serves a tenant (the program and
/// every process it forks or executes join the tenant the launcher opens). It says only
/// what went wrong, as `znswap run`, and serves for as long as the caller runs.
pub struct Embedded {
    daemon: Arc<Daemon>,
}

impl Embedded {
    /// Starts serving on `config.socket` (only this user may connect).
    pub fn start(config: DaemonConfig) -> Result<Embedded> {
        let (daemon, listener) = start(config, Log { name: "znswap run", chatty: false })?;
        let serving = daemon.clone();
        std::thread::Builder::new()
            .name("znswap-accept".into())
            .spawn(move || listen::accept(&serving, &listener, &[]))
            .context("starting the thread that takes the program's connections")?;
        Ok(Embedded { daemon })
    }

    /// The pager serving the tree.
    pub fn pager(&self) -> &Pager {
        &self.daemon.pager
    }

    /// Tenant `index`'s figures now, as `znswap status` would say them.
    pub fn tenant_status(&self, index: u32) -> Option<TenantStatus> {
        crate::status::of(&self.daemon).1.into_iter().find(|tenant| tenant.tenant == index)
    }
}
