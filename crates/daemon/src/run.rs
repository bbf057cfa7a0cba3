//! Starting the daemon: its configuration checked, its device reset, its socket bound,
//! its pager started, and connections served until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use znswap_pager::{Pager, PagerConfig, PAGE_BYTES};
use znswap_zoned::{format_size, ZonedDevice};

use crate::connection::ForkRegistry;
use crate::daemon::Daemon;
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
    check(&config.pager)?;
    let DaemonConfig {
        device,
        device_name,
        memory,
        pager,
        socket,
        socket_given,
        allow_uids,
        write_limit,
        swap_limit_pages,
    } = config;
    let pool_pages = memory / PAGE_BYTES as u64;
    Pager::check(device.geometry(), &pager).with_context(|| {
        format!("{} cannot serve as swap with --memory {}", device_name.display(), format_size(memory))
    })?;
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
    });
    listen::stop_on_signals(stop_signals, socket.clone())?;
    eprintln!(
        "znswap daemon: serving {} with {} of memory on {} (`znswap run --daemon{} -- CMD`)",
        device_name.display(),
        format_size(memory),
        socket.display(),
        if socket_given { format!(" {}", socket.display()) } else { String::new() }
    );
    listen::accept(&daemon, &listener, &allow_uids)
}
