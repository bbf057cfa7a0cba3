//! The pager's shared state: the core behind the state lock, and the parts the threads
//! share beside it, each the owner of its own state (the device side, whose memory is
//! served, the installs, the fault side, the wakers). [`StateGuard`] is the state lock
//! held: it marks its holder (`lock_flag`) and gives the wake-ups the core owes when it
//! is released.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::time::{Duration, Instant};

use znswap_pager_core::{PagerCore, WaitOn, Wakeups};

use super::colocate::Colocation;
use super::discard::OwnDiscard;
use super::faults::Faults;
use super::forks::Forks;
use super::install::Installer;
use super::lock_flag;
use super::spaces::Spaces;
use super::spaces::TenantId;
use super::stats::{PagerStats, ThreadTimes};
use super::storage::Storage;
use super::wakers::Wakers;
use crate::pager_thread::{PagerThread, PagerTids};

pub(crate) struct Shared {
    state: Mutex<PagerCore>,
    /// The pager's clock starts here (`now`).
    started: Instant,
    pub(super) wakers: Wakers,
    /// The device, its gate, sealing, the GC buffer.
    pub(super) storage: Storage,
    /// Whose memory is served: this process's, or other processes' (`Pager::serve`),
    /// whose victims are read and dropped through them.
    pub(super) spaces: Spaces,
    /// Carries out the core's actions on the page tables; the read-ahead cache.
    pub(super) install: Installer,
    pub(super) discard: OwnDiscard,
    /// Held shared while pages of regions are read or discarded outside the state lock
    /// (victims, appends, discards), and exclusively while a region is unmapped.
    pub(super) mappings: RwLock<()>,
    pub(super) faults: Faults,
    /// Forks whose children may still read the device.
    pub(super) forks: Forks,
    /// Who shares a CPU with the fault handlers (`colocate.rs`).
    pub(super) colocation: Colocation,
    pub(super) tids: PagerTids,
    pub(super) times: ThreadTimes,
    /// With asynchronous write protection (`PagerConfig::wp_async`, whose mark it is
    /// here): the seed of the pages' digests, made at start from the OS's random source.
    pub(super) digest_key: Option<u64>,
}

/// The parts `Shared::new` is made of.
pub(super) struct Parts {
    pub(super) core: PagerCore,
    pub(super) storage: Storage,
    pub(super) spaces: Spaces,
    pub(super) install: Installer,
    pub(super) faults: Faults,
    pub(super) colocation: Colocation,
    pub(super) digest_key: Option<u64>,
}

/// A kind of pager thread: its name, its role in a panic message, its body, how many.
pub(super) type ThreadRole = (&'static str, &'static str, fn(&Shared), usize);

/// Its role in a panic message, and how co-location knows a handler.
pub(super) const FAULT_HANDLER_ROLE: &str = "fault handler";

/// A page's digest (`CoreConfig::wp_async`): XXH3's 128 bits, seeded with the run's key
/// (a small fraction of a write-protect fault's cost a page; figures:
/// docs/measurements/2026-11-pager.md), never 0 (no digest).
/// Two different pages agree with a chance of about 2^-128: the swap cache would then
/// keep a stale slot, so a non-cryptographic hash of 64 bits would not do.
pub(super) fn page_digest(key: u64, page: &[u8]) -> znswap_pager_core::Digest {
    xxhash_rust::xxh3::xxh3_128_with_seed(page, key).max(1)
}

impl Shared {
    pub(super) fn new(parts: Parts) -> Shared {
        let Parts { core, storage, spaces, install, faults, colocation, digest_key } = parts;
        Shared {
            discard: OwnDiscard::new(spaces.is_own()),
            state: Mutex::new(core),
            started: Instant::now(),
            wakers: Wakers::default(),
            storage,
            spaces,
            install,
            mappings: RwLock::new(()),
            faults,
            forks: Forks::default(),
            colocation,
            tids: PagerTids::default(),
            times: ThreadTimes::default(),
            digest_key,
        }
    }

    pub(super) fn lock(&self) -> StateGuard<'_> {
        StateGuard::new(self, self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The lock, for a fault, and how long it waited for it in nanoseconds. A fault
    /// spins for the lock a little before it sleeps: holds are a few microseconds, while
    /// a futex sleep and wake-up costs more than that on a virtual machine, whose idle
    /// vCPUs halt and take an exit to wake.
    pub(super) fn lock_for_fault(&self) -> (StateGuard<'_>, u64) {
        const SPIN_NS: u128 = 20_000;
        match self.state.try_lock() {
            Ok(state) => return (StateGuard::new(self, state), 0),
            Err(TryLockError::Poisoned(poisoned)) => return (StateGuard::new(self, poisoned.into_inner()), 0),
            Err(TryLockError::WouldBlock) => {}
        }
        let waiting = Instant::now();
        let mut spins = 0u32;
        let state = loop {
            match self.state.try_lock() {
                Ok(state) => break StateGuard::new(self, state),
                Err(TryLockError::Poisoned(poisoned)) => break StateGuard::new(self, poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
            spins += 1;
            if spins % 64 == 0 && waiting.elapsed().as_nanos() > SPIN_NS {
                break self.lock();
            }
            std::hint::spin_loop();
        };
        (state, waiting.elapsed().as_nanos() as u64)
    }

    /// The pager's clock: nanoseconds since it started.
    pub(super) fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn notify(&self, wakeups: Wakeups) {
        self.wakers.notify(&wakeups);
        if wakeups.room {
            self.faults.aside.room_came();
        }
    }

    /// `Pager::remove_tenant`: the served process's region goes from the core (its
    /// slots freed), and its descriptors with the last user of its space (closing its
    /// agent's connection: the process knows it is let go).
    pub(super) fn remove_space(&self, id: TenantId) {
        let Some(served) = self.spaces.served_list() else { return };
        let Some(space) = served.remove(id) else { return };
        self.spaces.agent_heard(&space);
        let _mappings = self.mappings.write().unwrap_or_else(|p| p.into_inner());
        let mut state = self.lock();
        let now = self.now();
        state.region_remove(space.owner, now);
        drop(state);
        // Its arena stays registered: a process let go while it runs (a pager stopping,
        // a protocol broken) serves its own faults from then on through the same
        // registration (`serve_orphaned`), and its swapped-out pages must fault there
        // (SIGBUS), not read as the zero pages an unregistered arena would give.
    }

    /// The served processes found gone are let go: by the evictor at rest.
    pub(super) fn remove_gone_spaces(&self) {
        for space in self.spaces.served_now().iter() {
            if space.gone.load(Relaxed) {
                self.remove_space(space.id);
            }
        }
    }

    pub(super) fn stats(&self) -> PagerStats {
        let t = &self.times;
        let times = self.faults.all().times();
        let (poll_paused_ticks, poll_spun_ns, poll_spare_milli) = self.faults.poll.gate_figures();
        let installs = self.install.counts();
        let pool = self.storage.pool_stats().unwrap_or_default();
        let state = self.lock();
        let (core, engine) = (state.stats(), *state.engine().stats());
        drop(state);
        PagerStats {
            core,
            engine,
            unparks_copied: installs.unparks_copied,
            pages_unshared: installs.pages_unshared,
            wp_markers_cleared: installs.wp_markers_cleared,
            moves_misreported: installs.moves_misreported,
            served_process_gone: self.spaces.processes_gone(),
            budget_waits: times.room_waits,
            budget_wait_ns: times.budget_wait_ns,
            fault_discarded_pages: self.faults.discarded_pages(),
            pages_sealed: self.storage.pages_sealed(),
            pages_failed_open: self.storage.pages_failed_open(),
            gc_cpu_ns: t.gc_cpu_ns.load(Relaxed),
            fault_lock_wait_ns: times.lock_wait_ns,
            fault_read_ns: times.read_ns,
            fault_install_ns: times.install_ns,
            fault_unlock_ns: times.unlock_ns,
            fault_wait_ns: times.wait_ns,
            fault_reads: times.reads,
            fault_handled_ns: self.faults.all().latency.sum(),
            faults_polled: self.faults.poll.found(),
            poll_paused_ticks,
            poll_spun_ns,
            poll_spare_milli,
            compressed_pool_pages_stored: pool.pages_stored,
            compressed_pool_stored_bytes: pool.stored_bytes,
            compressed_pool_stored_raw_bytes: pool.stored_raw_bytes,
            compressed_pool_pages_refused: pool.pages_refused,
            compressed_pool_pages_skipped: pool.pages_skipped,
            compressed_pool_reads_served: pool.reads_served,
            compressed_pool_pages_served: pool.pages_served,
            compressed_pool_reads_missed: pool.reads_missed,
            compressed_pool_pages_dropped: pool.pages_dropped,
            compressed_pool_bytes: pool.capacity_bytes,
            compressed_pool_used_bytes: pool.used_bytes,
            compressed_pool_pages_held: pool.pages_held,
            fault_cpu_ns: self.faults.cpu_ns.load(Relaxed),
            evictor_cpu_ns: t.evictor_cpu_ns.load(Relaxed),
            io_cpu_ns: t.io_cpu_ns.load(Relaxed),
            evictor_append_ns: t.evictor_append_ns.load(Relaxed),
            evictor_idle_ns: t.evictor_idle_ns.load(Relaxed),
            io_idle_ns: t.io_idle_ns.load(Relaxed),
            uptime_ns: self.now(),
        }
    }
}

/// Starts a pager thread: marked first (`PagerConfig::thread_start`), and a panic in it
/// stops the process.
pub(super) fn spawn_thread(
    shared: &Arc<Shared>,
    name: String,
    role: &'static str,
    thread_start: Option<fn()>,
    body: fn(&Shared),
) -> std::io::Result<PagerThread> {
    let shared = shared.clone();
    PagerThread::spawn(&name, role, thread_start, move || {
        shared.colocation.register(role == FAULT_HANDLER_ROLE);
        shared.tids.note_this_thread();
        body(&shared)
    })
}

/// The state lock held: the core, and on release the wake-ups it owes.
pub(crate) struct StateGuard<'a> {
    shared: &'a Shared,
    guard: Option<MutexGuard<'a, PagerCore>>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = PagerCore;
    fn deref(&self) -> &PagerCore {
        self.guard.as_ref().expect("held")
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut PagerCore {
        self.guard.as_mut().expect("held")
    }
}

impl<'a> StateGuard<'a> {
    fn new(shared: &'a Shared, guard: MutexGuard<'a, PagerCore>) -> StateGuard<'a> {
        lock_flag::set(true);
        StateGuard { shared, guard: Some(guard) }
    }

    /// Releases the lock to wait as `on` says (for at most its timeout), then takes it
    /// again.
    pub(super) fn wait(mut self, on: WaitOn) -> StateGuard<'a> {
        let shared = self.shared;
        let mut guard = self.guard.take().expect("held");
        let wakeups = guard.take_wakeups();
        if wakeups.false_drops {
            // (Said and marked under the lock: rare, and nothing here waits on it.)
            shared.spaces.let_go_false_drops(guard.take_false_drops());
        }
        lock_flag::set(false);
        shared.notify(wakeups);
        let timeout = Duration::from_nanos(on.timeout_ns());
        let guard = shared.wakers.condvar(on).wait_timeout(guard, timeout).unwrap_or_else(|p| p.into_inner()).0;
        StateGuard::new(shared, guard)
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else { return };
        let wakeups = guard.take_wakeups();
        let notice = guard.take_notice();
        let false_drops = if wakeups.false_drops { guard.take_false_drops() } else { Vec::new() };
        drop(guard);
        if !false_drops.is_empty() {
            self.shared.spaces.let_go_false_drops(false_drops);
        }
        lock_flag::set(false);
        self.shared.notify(wakeups);
        if let Some(notice) = notice {
            eprintln!("znswap: warning: {notice}");
        }
    }
}
