//! Faults: the handler threads' loop, and the resolution of one fault in either mode
//! (a handler thread, or the faulting thread's SIGBUS handler).

use std::cell::Cell;
use std::sync::atomic::AtomicU64;

use znswap_pager_core::{Fault, FaultKind, FaultShell, FaultTask, Next, ReadInto, Sealed, Shell, WaitOn};

use super::shell::{CpuTime, Live, Role};
use super::*;
use crate::page_buffers::AlignedPage;
use crate::uffd::Event as UffdEvent;

/// What a thread resolving faults works in: its fault task (actions included) and a
/// page buffer (aligned, so the device reads into it without a bounce copy). Allocated
/// once per thread.
pub(crate) struct FaultScratch {
    page: Box<AlignedPage>,
    task: FaultTask,
}

impl FaultScratch {
    pub(super) fn new() -> Box<FaultScratch> {
        Box::new(FaultScratch { page: Box::new(AlignedPage::ZERO), task: FaultTask::new() })
    }

    /// No fault under way in it.
    pub(super) fn is_idle(&self) -> bool {
        self.task.is_resolved()
    }
}

/// How a fault's steps ended (`Shared::run_fault`).
enum Ran {
    Resolved {
        ours: bool,
        times: FaultTimes,
    },
    /// Its wait for room is its tenant's write limit at work: it goes aside
    /// (`aside.rs`), with the room epoch `Aside::begin` gave.
    Aside {
        times: FaultTimes,
        epoch: u64,
    },
}

thread_local! {
    /// A faulting thread's scratch in self-paging mode, taken while a fault is resolved
    /// (so the SIGBUS handler allocates only on a thread's first fault).
    static SIGBUS_SCRATCH: Cell<Option<Box<FaultScratch>>> = const { Cell::new(None) };
}

/// A fault's part of its [`Live`] shell: the page a read fills, and where its time goes.
pub(super) struct FaultRole<'a> {
    page: &'a mut AlignedPage,
    /// Pages the last read filled (more than one: in the read-ahead cache).
    read_pages: u32,
    /// A read's pages await their install: its time is counted.
    installing: Option<Instant>,
    times: FaultTimes,
}

impl Role for FaultRole<'_> {
    const FAULT: bool = true;

    fn read_buffer(&self) -> &[u8] {
        &self.page.0
    }

    fn applying(&mut self, done: bool) {
        if !done && self.read_pages > 0 {
            self.installing = Some(Instant::now());
        } else if let Some(installing) = self.installing.take().filter(|_| done) {
            self.times.install_ns += installing.elapsed().as_nanos() as u64;
            self.read_pages = 0;
        }
    }

    fn lock_waited(&mut self, ns: u64) {
        self.times.lock_wait_ns += ns;
    }

    fn unlocked(&mut self, ns: u64) {
        self.times.unlock_ns += ns;
    }
}

impl<'a> FaultShell for Live<'a, FaultRole<'a>> {
    fn read(
        &mut self,
        zone: u32,
        slot: u32,
        pages: u32,
        into: ReadInto,
        sealed: Option<&Sealed>,
    ) -> Result<(), IoError> {
        let reading = Instant::now();
        let role = &mut self.role;
        let buffer: &mut [u8] = match into {
            ReadInto::FaultPage => &mut role.page.0,
            // SAFETY: the core claimed these pages for this fault's read, until its
            // completion (`fault_read_done`), which comes after this borrow ends.
            ReadInto::Cache { first, .. } => unsafe {
                self.shared.readahead_cache.pages_mut(first as usize, pages as usize)
            },
        };
        assert_eq!(buffer.len(), pages as usize * PAGE_BYTES, "a read larger than its buffer");
        let result = self.shared.read_slots(zone, slot, buffer, None).and_then(|()| {
            // The faulting page is opened now; the others read ahead when a fault wants
            // them (`open_cached`).
            self.shared.open_page(&mut buffer[into.fault_index() * PAGE_BYTES..][..PAGE_BYTES], sealed)
        });
        role.read_pages = pages;
        role.times.read_ns += reading.elapsed().as_nanos() as u64;
        role.times.reads += 1;
        result
    }

    fn open_cached(&mut self, entry: u32, sealed: &Sealed) -> bool {
        // SAFETY: under the state lock, which the cache's ready pages are read and
        // written under only; this fault is about to serve the page from there.
        let page = unsafe { self.shared.readahead_cache.pages_mut(entry as usize, 1) };
        self.shared.open_page(page, Some(sealed)).is_ok()
    }

    fn zero_fill(&mut self, address: u64) -> bool {
        // (Reported done when the page is nobody's now: its process let go, or gone.)
        let Some((space, target)) = self.shared.spaces.at(address) else { return true };
        // Under the lock: EEXIST means something is mapped there.
        match space.uffd.copy(target, &ZERO_PAGES[..PAGE_BYTES], false, true) {
            Err(error) if self.shared.served_process_gone(&space, &error) => true,
            result => result.expect("mapping a zero page"),
        }
    }

    fn fault_discard_take(&mut self) -> Option<DiscardBatch> {
        // Served processes' pages are dropped by their agents: a handler waiting for an
        // agent could wait for a fault of that agent's own (a fork's child's agent reads
        // the program's locale in the heap as its thread starts), which only a handler
        // serves. While a child's agent may be starting, the evictor drops them alone.
        if self.shared.agents_starting.load(Relaxed) > 0 {
            return None;
        }
        // Only tried, never waited for: the state lock is held.
        self.shared.fault_discard.try_lock().ok().and_then(|mut batch| batch.take())
    }

    fn fault_discard_return(&mut self, batch: DiscardBatch) {
        let mut slot = self.shared.fault_discard.lock().unwrap_or_else(|p| p.into_inner());
        assert!(slot.replace(batch).is_none(), "two direct-reclaim batches");
    }
}

/// The handler threads' polling for the next fault: at most one thread polls at a time
/// (two would take both CPUs of a small machine from the program), for a window that
/// adapts to the gaps between faults as the kernel's halt polling does
/// (`drivers/cpuidle/governors/haltpoll.c`).
pub(super) struct FaultPoll {
    /// The window's bound, in nanoseconds (0: no polling).
    max_ns: u64,
    /// The window now, in nanoseconds.
    window_ns: AtomicU64,
    /// Whether a thread is polling.
    polling: AtomicBool,
    /// When the last handler that found no more events went to sleep (`Shared::now`).
    slept_at_ns: AtomicU64,
}

/// A window grown from nothing starts here; one halved below the floor is nothing.
const POLL_WINDOW_START_NS: u64 = 25_000;
const POLL_WINDOW_FLOOR_NS: u64 = 10_000;

impl FaultPoll {
    pub(super) fn new(max_us: u32) -> FaultPoll {
        let max_ns = max_us as u64 * 1000;
        FaultPoll {
            max_ns,
            window_ns: AtomicU64::new(max_ns),
            polling: AtomicBool::new(false),
            slept_at_ns: AtomicU64::new(0),
        }
    }

    /// A handler woke from its sleep to faults at `now`: the window follows the gap.
    /// (Only when polling is on; a race between two waking handlers costs one step of
    /// the window at most.)
    fn woke(&self, now: u64) {
        if self.max_ns == 0 {
            return;
        }
        let gap = now.saturating_sub(self.slept_at_ns.load(Relaxed));
        let window = self.window_ns.load(Relaxed);
        let next = if gap <= self.max_ns {
            // Polling that long would have caught it.
            (window * 2).max(POLL_WINDOW_START_NS).max(gap).min(self.max_ns)
        } else if window / 2 < POLL_WINDOW_FLOOR_NS {
            0
        } else {
            window / 2
        };
        self.window_ns.store(next, Relaxed);
    }
}

impl Shared {
    /// After the faults it found, polls for the next one for the window (one thread at a
    /// time) and resolves those it finds; then notes when it went to sleep.
    fn poll_for_faults(&self, scratch: &mut Box<FaultScratch>) {
        let poll = &self.fault_poll;
        let window = poll.window_ns.load(Relaxed);
        if window > 0 && poll.polling.compare_exchange(false, true, Relaxed, Relaxed).is_ok() {
            let mut since = Instant::now();
            while (since.elapsed().as_nanos() as u64) < window && !self.stop.load(Relaxed) {
                let found = self.read_events(scratch, true);
                if found > 0 {
                    self.counters.faults_polled.fetch_add(found, Relaxed);
                    since = Instant::now();
                } else {
                    // The CPU goes to any other runnable thread between looks (the
                    // program, its clients): polling must not take their time.
                    // SAFETY: no arguments.
                    unsafe { libc::sched_yield() };
                }
            }
            poll.polling.store(false, Relaxed);
        }
        // Only `woke` reads it, and only with polling on: no clock read otherwise.
        if poll.max_ns > 0 {
            poll.slept_at_ns.store(self.now(), Relaxed);
        }
    }

    /// Reads and resolves the faults queued on every served descriptor (only the first
    /// with `one`); how many.
    fn read_events(&self, scratch: &mut Box<FaultScratch>, one: bool) -> u64 {
        let mut found = 0;
        match &self.spaces {
            spaces::Spaces::Own(space) => {
                while let Some(event) = space.uffd.read_event().expect("reading userfaultfd") {
                    found += self.handle_event(space, event, scratch) as u64;
                    if one {
                        break;
                    }
                }
            }
            spaces::Spaces::Served(_) => {
                for space in self.spaces.served_now().iter() {
                    loop {
                        // A served process's descriptor that cannot be read: that
                        // process is let go, never this pager stopped.
                        let event = match space.uffd.read_event() {
                            Ok(Some(event)) => event,
                            Ok(None) => break,
                            Err(error) => {
                                eprintln!("znswap: reading the userfaultfd of process {}: {error}", space.pid());
                                space.gone.store(true, Relaxed);
                                self.tenant_gone.store(true, Relaxed);
                                break;
                            }
                        };
                        found += self.handle_event(space, event, scratch) as u64;
                        if one {
                            break;
                        }
                    }
                }
            }
        }
        found
    }

    /// Resolves `event` if it is a page fault (the only events these registrations
    /// ask for); whether it was one.
    fn handle_event(&self, space: &spaces::Space, event: UffdEvent, scratch: &mut Box<FaultScratch>) -> bool {
        let UffdEvent::PageFault { address, write, write_protect, thread_id } = event else { return false };
        let Some(address) = space.to_core(address) else {
            // A served process registered memory outside the arena it handed over: its
            // faults there are not this pager's to serve, ever.
            if !space.gone.swap(true, Relaxed) {
                eprintln!(
                    "znswap: process {} faulted at {address:#x}, outside the arena it handed over: it is let go",
                    space.pid()
                );
            }
            self.tenant_gone.store(true, Relaxed);
            return false;
        };
        self.colocation.count(thread_id);
        let started = Instant::now();
        let kind = if write_protect { FaultKind::WriteProtect } else { FaultKind::Missing { write } };
        let mut fault = Fault::new(address, kind);
        if self.is_pager_thread(thread_id) {
            fault = fault.from_pager_thread();
        }
        let tenant = space.served.is_some().then_some(space.tenant);
        scratch.task.start(fault);
        // A served tenant's fault held back by its write limit goes aside, so that the
        // other tenants' faults are served meanwhile.
        let times = match self.run_fault(scratch, FaultTimes::default(), tenant.is_some()) {
            Ran::Resolved { times, .. } => times,
            Ran::Aside { times, epoch } => match self.aside.spare() {
                Some(spare) => {
                    let fault = std::mem::replace(scratch, spare);
                    self.aside.push(fault, tenant, started, times, epoch);
                    return true;
                }
                None => {
                    self.aside.abandon();
                    let Ran::Resolved { times, .. } = self.run_fault(scratch, times, false) else {
                        unreachable!("a fault not let aside went aside")
                    };
                    times
                }
            },
        };
        self.record_fault(tenant, &times, started.elapsed().as_nanos() as u64);
        true
    }

    fn record_fault(&self, tenant: Option<u32>, times: &FaultTimes, ns: u64) {
        self.counters.faults.record(times, ns);
        if let Some(record) = tenant.and_then(|tenant| self.counters.tenant_faults.get(tenant as usize)) {
            record.record(times, ns);
        }
    }

    /// Steps the faults aside that may go on (`Aside::take_due`; all of them, waited in
    /// rather than set aside again, with `all`: the pager stops, and its core lets them
    /// past the budget).
    fn resume_aside(&self, all: bool) {
        self.aside.drain();
        let mut looks = self.aside.len();
        while let Some(mut fault) = self.aside.take_due(all, &mut looks) {
            fault.times.room_wait_ns += fault.aside_at.elapsed().as_nanos() as u64;
            match self.run_fault(&mut fault.scratch, fault.times, !all) {
                Ran::Resolved { times, .. } => {
                    self.record_fault(fault.tenant, &times, fault.started.elapsed().as_nanos() as u64);
                    self.aside.give_back(fault.scratch);
                }
                Ran::Aside { times, epoch } => {
                    self.aside.push(fault.scratch, fault.tenant, fault.started, times, epoch);
                }
            }
        }
    }

    pub(super) fn handle_faults(&self) {
        let mut scratch = FaultScratch::new();
        let own_waiter = self
            .spaces
            .own_space()
            .map(|space| crate::uffd::Waiter::new(&space.uffd).expect("an epoll instance for a handler thread"));
        let waiter = match (&own_waiter, &self.spaces) {
            (Some(waiter), _) => waiter,
            (None, spaces::Spaces::Served(served)) => &served.waiter,
            (None, spaces::Spaces::Own(_)) => unreachable!("an own space has its waiter"),
        };
        let mut cpu = CpuTime::new(&self.counters.fault_cpu_ns);
        // A pager that polls for faults polls for its reads too: the faulting thread
        // waits on this read, and a sleep here would add a wake-up to its wait.
        znswap_zoned::poll_reads_on_this_thread(self.fault_poll.max_ns > 0);
        while !self.stop.load(Relaxed) {
            // Charged once a wake-up (a system call), not per fault.
            cpu.charge();
            let timeout_ms = if self.aside.any() { self.aside.retry_ms() } else { 50 };
            let ready = match waiter.wait(timeout_ms) {
                Ok(ready) => ready,
                Err(error) => panic!("waiting for userfaultfd events: {error}"),
            };
            if self.aside.any() {
                self.resume_aside(false);
            }
            if !ready {
                continue;
            }
            // (The poll window counts from the wake-up: the reads are part of it.)
            let woke = self.now();
            if self.read_events(&mut scratch, false) > 0 {
                self.fault_poll.woke(woke);
                self.poll_for_faults(&mut scratch);
            }
        }
        // The core lets every fault past the budget once the pager stops: none is left
        // aside with its thread blocked.
        while self.aside.any() {
            self.resume_aside(true);
        }
    }

    /// A SIGBUS in self-paging mode at `address`: resolves it if it is a page of one of
    /// this pager's regions (in the faulting thread), else returns false.
    pub(crate) fn resolve_in_thread(&self, address: u64, write: bool) -> bool {
        let mut scratch = SIGBUS_SCRATCH.with(Cell::take).unwrap_or_else(|| {
            znswap_zoned::poll_reads_on_this_thread(self.fault_poll.max_ns > 0);
            FaultScratch::new()
        });
        let (ours, times) = self.resolve(Fault::new(address, FaultKind::Sigbus { write }), &mut scratch);
        if ours {
            self.counters.faults.add(&times);
        }
        SIGBUS_SCRATCH.with(|cell| cell.set(Some(scratch)));
        ours
    }

    /// Runs one fault through the core's steps (`znswap_pager_core::FaultTask`) until
    /// it is resolved; whether it was ours, and where its time went.
    fn resolve(&self, fault: Fault, scratch: &mut FaultScratch) -> (bool, FaultTimes) {
        scratch.task.start(fault);
        match self.run_fault(scratch, FaultTimes::default(), false) {
            Ran::Resolved { ours, times } => (ours, times),
            Ran::Aside { .. } => unreachable!("a fault not let aside went aside"),
        }
    }

    /// Steps the fault started in `scratch` (its time so far in `times`) until it is
    /// resolved, or, with `may_aside`, until it would wait for room held back by its
    /// tenant's write limit: then it returns with the lock released (`Ran::Aside`), and
    /// the caller sets it aside or steps it again.
    fn run_fault(&self, scratch: &mut FaultScratch, times: FaultTimes, may_aside: bool) -> Ran {
        let FaultScratch { page, task } = scratch;
        let role = FaultRole { page, read_pages: 0, installing: None, times };
        let mut shell = Live::new(self, role);
        loop {
            match task.step(&mut shell) {
                Next::Continue => {}
                Next::Pause(pause) => {
                    let started = Instant::now();
                    Self::pause(pause);
                    shell.role.times.wait_ns += started.elapsed().as_nanos() as u64;
                }
                // Counted while the state lock is held: room made after the core's check
                // is announced to it (`aside.rs`).
                Next::Wait(WaitOn::Room) if may_aside && task.waits_on_write_limit() => {
                    let epoch = self.aside.begin();
                    shell.unlock();
                    debug_assert!(shell.holds_nothing() && shell.role.installing.is_none());
                    return Ran::Aside { times: shell.role.times, epoch };
                }
                // Waits for room are counted apart (`room_wait_ns`).
                Next::Wait(WaitOn::Room) => {
                    let started = Instant::now();
                    shell.wait(WaitOn::Room);
                    shell.role.times.room_wait_ns += started.elapsed().as_nanos() as u64;
                }
                Next::Wait(on) => {
                    let started = Instant::now();
                    shell.wait(on);
                    shell.role.times.wait_ns += started.elapsed().as_nanos() as u64;
                }
                Next::Resolved { ours } => {
                    debug_assert!(shell.holds_nothing());
                    let mut times = shell.role.times;
                    if let Some(since) = task.room_wait_since_ns() {
                        times.room_waits += 1;
                        times.budget_wait_ns = self.now().saturating_sub(since);
                    }
                    self.counters.fault_discarded_pages.fetch_add(task.discarded_pages(), Relaxed);
                    return Ran::Resolved { ours, times };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window grows while faults come within its bound after the handler slept,
    /// shrinks to nothing when they come later, and stays off when polling is.
    #[test]
    fn the_poll_window_follows_the_gaps_between_faults() {
        let poll = FaultPoll::new(200);
        let window = |poll: &FaultPoll| poll.window_ns.load(Relaxed);
        let gap = |poll: &FaultPoll, ns: u64| {
            poll.slept_at_ns.store(1_000_000, Relaxed);
            poll.woke(1_000_000 + ns);
        };
        assert_eq!(window(&poll), 200_000, "it starts at its bound");
        for _ in 0..6 {
            gap(&poll, 5_000_000);
        }
        assert_eq!(window(&poll), 0, "faults far apart: no polling");
        gap(&poll, 150_000);
        assert_eq!(window(&poll), 150_000, "a fault within the bound after a sleep: at least that gap");
        gap(&poll, 20_000);
        assert_eq!(window(&poll), 200_000, "doubled, within the bound");
        gap(&poll, 300_000);
        assert_eq!(window(&poll), 100_000, "a fault beyond the bound halves it");
        let off = FaultPoll::new(0);
        gap(&off, 10_000);
        assert_eq!(window(&off), 0);
    }
}
