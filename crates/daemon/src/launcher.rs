//! `znswap run --serve`: the launcher's own process pages the program's heap (the
//! daemon's design, `docs/daemon.md`, with the launcher as the daemon of one program),
//! which measures what serving a program from another process costs it.
//!
//! One thread here takes the program's `Hello` (its userfaultfd, `/proc/self/mem`,
//! agent socket), starts the pager on it (`Pager::serve_tenant`) and then serves the
//! program's calls (`connection::serve_calls`): each discard is taken into the pager's
//! state while the program zaps the range. Another holds the budget to `--memory` every
//! 100 ms, as the library does in the program: the program's anonymous memory outside the
//! paged heap, and this process's own (the pager's tables and buffers), come out of it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::connection::{self, Arrival};
use anyhow::{Context, Result};
use znswap_pager::run_env::{hold_budget, ResidentSet, RunConfig, RunReport};
use znswap_pager::{Pager, PagerConfig, PAGE_BYTES};
use znswap_wire::{Channel, ToTenant, Token};

/// The launcher's pager for its program, once the program has handed its heap over.
pub struct Serving {
    pager: Arc<Mutex<Option<Arc<Pager>>>>,
    /// The same connection, to end it: a program's forked child that kept its end
    /// open would otherwise keep the serving thread waiting after the program is gone.
    connection: Channel,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The socket pair: the launcher's end, and the program's (inherited across its exec).
pub fn socket() -> Result<(Channel, Channel)> {
    Channel::pair().context("creating the socket the program's heap is served on")
}

impl Serving {
    /// Serves the program `pid` on `channel` from a thread of this process.
    pub fn start(channel: Channel, config: &RunConfig, pid: u32) -> Result<Serving> {
        let device =
            znswap_zoned::open_path(&config.device).with_context(|| format!("opening {}", config.device.display()))?;
        // Swap holds nothing across runs (as in the program's own pager).
        device.reset_all().with_context(|| format!("resetting {}", config.device.display()))?;
        let pager_config = config.pager.clone();
        let memory = config.memory_bytes;
        let stats = config.stats.clone();
        let slack = pager_config.core.slack_pages * PAGE_BYTES as u64;
        let connection = channel.try_clone().context("a second handle on the program's socket")?;
        let slot = Arc::new(Mutex::new(None));
        let thread = {
            let slot = slot.clone();
            let device: Arc<dyn znswap_zoned::ZonedDevice> = device.into();
            std::thread::Builder::new()
                .name("znswap-serve".into())
                .spawn(move || serve(channel, device, pager_config, Target { pid, memory, slack, stats }, &slot))
                .context("starting the serving thread")?
        };
        Ok(Serving { pager: slot, connection, thread: Some(thread) })
    }

    /// The program's last report (`run_env::program_stats_path`) with this pager's
    /// figures in it.
    pub fn report(&self, stats: &Path) -> Option<RunReport> {
        let pager = self.pager.lock().unwrap().clone();
        complete(stats, pager.as_deref())
    }

    /// Stops serving (the program is gone) and the pager with it: the connection's end
    /// ends the serving thread's loop, wherever it waits.
    pub fn stop(mut self) {
        self.connection.shutdown();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.pager.lock().unwrap().take();
    }
}

/// The program served, and what holds it.
struct Target {
    pid: u32,
    /// `--memory`.
    memory: u64,
    /// The pager's slack, in bytes.
    slack: u64,
    /// Where the whole report goes (`RunConfig::stats`).
    stats: PathBuf,
}

/// The program's report with `pager`'s figures in it (under `--serve` the library writes
/// its own figures only), and this process's CPU time added to the program's (the
/// pager's threads run here).
fn complete(stats: &Path, pager: Option<&Pager>) -> Option<RunReport> {
    let mut report = RunReport::read(&znswap_pager::run_env::program_stats_path(stats))?;
    if let Some(pager) = pager {
        report.set_pager_figures(pager);
        report.cpu_ns += znswap_pager::process_cpu_ns();
    }
    Some(report)
}

fn serve(
    channel: Channel,
    device: Arc<dyn znswap_zoned::ZonedDevice>,
    config: PagerConfig,
    target: Target,
    slot: &Mutex<Option<Arc<Pager>>>,
) {
    let pid = target.pid;
    // Until the program's library says Hello (or the program ends without one: a static
    // binary, or the library failed, which it says itself). The socket is this
    // launcher's: its peer is this process, so the Hello is checked against the child.
    let Arrival { link, .. } = match connection::arrive(&channel, pid, 0) {
        Ok(Some(arrival)) => arrival,
        Ok(None) => return,
        Err(error) => return eprintln!("znswap run --serve: the program is refused: {error}"),
    };
    let budget_pages = config.core.budget_pages;
    let (pager, id) = match Pager::serve_tenant(device, config, link) {
        Ok((pager, id)) => (Arc::new(pager), id),
        Err(error) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(znswap_wire::Reason::Full));
            return eprintln!("znswap run --serve: cannot serve the program: {error}");
        }
    };
    if channel.send_to_tenant(&ToTenant::Welcome { tenant: 0, token: Token([0; 16]), budget_pages }).is_err() {
        return;
    }
    *slot.lock().unwrap() = Some(pager.clone());
    let governor = {
        let pager = pager.clone();
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let done = done.clone();
            std::thread::Builder::new()
                .name("znswap-govern".into())
                .spawn(move || {
                    for tick in 1u64.. {
                        if done.load(Relaxed) {
                            break;
                        }
                        pager.colocate_tick();
                        govern(&pager, target.pid, target.memory, target.slack);
                        // The whole report each second, where readers look (the
                        // library's has no pager figures here).
                        if tick % 10 == 0 {
                            if let Some(report) = complete(&target.stats, Some(&pager)) {
                                report.write(&target.stats);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
                .expect("starting the governor")
        };
        (done, thread)
    };
    // The program's calls, until it ends (its end of the socket closes with it).
    if let Err(error) = connection::serve_calls(&pager, id, pid, &channel, None) {
        eprintln!("znswap run --serve: the program's connection: {error}");
    }
    governor.0.store(true, Relaxed);
    let _ = governor.1.join();
    // The program is gone: its slots go back now.
    pager.remove_tenant(id);
}

/// The budget from what the program and this process hold outside the paged heap.
fn govern(pager: &Pager, pid: u32, memory: u64, slack: u64) {
    let charged = |status: &str| ResidentSet::of(status).map(|set| set.charged);
    let (Some(program), Some(launcher)) = (charged(&format!("/proc/{pid}/status")), charged("/proc/self/status"))
    else {
        return;
    };
    let paged = pager.stats().core.resident_pages * PAGE_BYTES as u64;
    let rest = program.saturating_sub(paged) + launcher;
    hold_budget(pager, memory, rest, slack, pager.budget_bytes_min());
}
