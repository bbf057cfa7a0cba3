//! Faults: the handler threads' loop, and the resolution of one fault in either mode
//! (a handler thread, or the faulting thread's SIGBUS handler).

use std::cell::Cell;
use std::time::Instant;

use znswap_core::IoError;
use znswap_pager_core::{
    DiscardBatch, Fault, FaultKind, FaultShell, Next, ReadInto, Sealed, Shell, WaitOn, PAGE_BYTES,
};

use super::faults::FaultScratch;
use super::install::ZERO_PAGES;
use super::shared::Shared;
use super::shell::{pause_for, CpuTime, Live, Role};
use super::spaces::{Kind, Space};
use super::stats::FaultTimes;
use crate::page_buffers::AlignedPage;
use crate::uffd::{Event as UffdEvent, Waiter};

/// How a fault's steps ended (`run_fault`).
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
                self.shared.install.cache_pages_mut(first as usize, pages as usize)
            },
        };
        assert_eq!(buffer.len(), pages as usize * PAGE_BYTES, "a read larger than its buffer");
        let storage = &self.shared.storage;
        let result = storage.read_slots(zone, slot, buffer, None).and_then(|()| {
            // The faulting page is opened now; the others read ahead when a fault wants
            // them (`open_cached`).
            storage.open_page(&mut buffer[into.fault_index() * PAGE_BYTES..][..PAGE_BYTES], sealed)
        });
        role.read_pages = pages;
        role.times.read_ns += reading.elapsed().as_nanos() as u64;
        role.times.reads += 1;
        result
    }

    fn open_cached(&mut self, entry: u32, sealed: &Sealed) -> bool {
        // SAFETY: under the state lock, which the cache's ready pages are read and
        // written under only; this fault is about to serve the page from there.
        let page = unsafe { self.shared.install.cache_pages_mut(entry as usize, 1) };
        self.shared.storage.open_page(page, Some(sealed)).is_ok()
    }

    fn zero_fill(&mut self, address: u64) -> bool {
        // (Reported done when the page is nobody's now: its process let go, or gone.)
        let Some((space, target)) = self.shared.spaces.at(address) else { return true };
        // Under the lock: EEXIST means something is mapped there.
        match space.uffd.copy(target, &ZERO_PAGES[..PAGE_BYTES], false, true) {
            Err(error) if self.shared.spaces.gone(&space, &error) => true,
            result => result.expect("mapping a zero page"),
        }
    }

    fn fault_discard_take(&mut self) -> Option<DiscardBatch> {
        // Served processes' pages are dropped by their agents: a handler waiting for an
        // agent could wait for a fault of that agent's own (a fork's child's agent reads
        // the program's locale in the heap as its thread starts), which only a handler
        // serves. While a child's agent may be starting, the evictor drops them alone.
        if self.shared.spaces.agents_starting() {
            return None;
        }
        self.shared.faults.reclaim_take()
    }

    fn fault_discard_return(&mut self, batch: DiscardBatch) {
        self.shared.faults.reclaim_return(batch);
    }
}

/// After the faults it found, polls for the next one for the window (one thread at a
/// time) and resolves those it finds; then notes when it went to sleep.
fn poll_for_faults(shared: &Shared, scratch: &mut Box<FaultScratch>) {
    let poll = &shared.faults.poll;
    if let Some(window) = poll.begin() {
        let mut since = Instant::now();
        // (A poll lasts while faults keep coming: the gate closing ends it too.)
        while (since.elapsed().as_nanos() as u64) < window && poll.allowed() && !shared.wakers.stopping() {
            let looked = Instant::now();
            let found = read_events(shared, scratch, true);
            if found > 0 {
                poll.found_some(found);
                poll.spun(looked.duration_since(since).as_nanos() as u64);
                znswap_zoned::pause_polled_reads_on_this_thread(!poll.allowed());
                since = Instant::now();
            } else {
                // The CPU goes to any other runnable thread between looks (the
                // program, its clients): polling must not take their time.
                // SAFETY: no arguments.
                unsafe { libc::sched_yield() };
            }
        }
        poll.spun(since.elapsed().as_nanos() as u64);
        poll.end();
    }
    if poll.is_on() {
        poll.sleeps(shared.now());
    }
}

/// Reads and resolves the faults queued on every served descriptor (only the first
/// with `one`); how many.
fn read_events(shared: &Shared, scratch: &mut Box<FaultScratch>, one: bool) -> u64 {
    let mut found = 0;
    match shared.spaces.kind() {
        Kind::Own(space) => {
            while let Some(event) = space.uffd.read_event().expect("reading userfaultfd") {
                found += handle_event(shared, space, event, scratch) as u64;
                if one {
                    break;
                }
            }
        }
        Kind::Served(_) => {
            for space in shared.spaces.served_now().iter() {
                loop {
                    // A served process's descriptor that cannot be read: that
                    // process is let go, never this pager stopped.
                    let event = match space.uffd.read_event() {
                        Ok(Some(event)) => event,
                        Ok(None) => break,
                        Err(error) => {
                            shared.spaces.let_go(space, format_args!("cannot have its userfaultfd read ({error})"));
                            break;
                        }
                    };
                    found += handle_event(shared, space, event, scratch) as u64;
                    if one {
                        break;
                    }
                }
            }
        }
    }
    found
}

/// Resolves `event` if it is a page fault (the only events these registrations ask
/// for); whether it was one.
fn handle_event(shared: &Shared, space: &Space, event: UffdEvent, scratch: &mut Box<FaultScratch>) -> bool {
    let UffdEvent::PageFault { address, write, write_protect, thread_id } = event else { return false };
    let Some(address) = space.to_core(address) else {
        // A served process registered memory outside the arena it handed over: its
        // faults there are not this pager's to serve, ever.
        shared.spaces.let_go(space, format_args!("faulted at {address:#x}, outside the arena it handed over"));
        return false;
    };
    shared.colocation.count(thread_id);
    let started = Instant::now();
    let kind = if write_protect { FaultKind::WriteProtect } else { FaultKind::Missing { write } };
    let mut fault = Fault::new(address, kind);
    // (Another process's faults never come from the pager's threads, and its thread ids
    // may be from another pid namespace.)
    if shared.spaces.is_own() && shared.tids.contains(thread_id) {
        fault = fault.from_pager_thread();
    }
    let tenant = space.served.is_some().then_some(space.tenant);
    if tenant.is_some() {
        fault = fault.may_go_aside();
    }
    scratch.task.start(fault);
    // A served tenant's fault held back by its write limit goes aside, so that the
    // other tenants' faults are served meanwhile.
    let aside = &shared.faults.aside;
    let times = match run_fault(shared, scratch, FaultTimes::default(), tenant.is_some()) {
        Ran::Resolved { times, .. } => times,
        Ran::Aside { times, epoch } => match aside.spare() {
            Some(spare) => {
                let fault = std::mem::replace(scratch, spare);
                aside.push(fault, tenant, started, times, epoch);
                return true;
            }
            None => {
                aside.abandon();
                let Ran::Resolved { times, .. } = run_fault(shared, scratch, times, false) else {
                    unreachable!("a fault not let aside went aside")
                };
                times
            }
        },
    };
    shared.faults.record(tenant, &times, started.elapsed().as_nanos() as u64);
    true
}

/// Steps the faults aside that may go on (`Aside::take_due`; all of them, waited in
/// rather than set aside again, with `all`: the pager stops, and its core lets them
/// past the budget).
fn resume_aside(shared: &Shared, all: bool) {
    let aside = &shared.faults.aside;
    aside.drain();
    let mut looks = aside.len();
    while let Some(mut fault) = aside.take_due(all, &mut looks) {
        fault.times.room_wait_ns += fault.aside_at.elapsed().as_nanos() as u64;
        match run_fault(shared, &mut fault.scratch, fault.times, !all) {
            Ran::Resolved { times, .. } => {
                shared.faults.record(fault.tenant, &times, fault.started.elapsed().as_nanos() as u64);
                aside.give_back(fault.scratch);
            }
            Ran::Aside { times, epoch } => {
                aside.push(fault.scratch, fault.tenant, fault.started, times, epoch);
            }
        }
    }
}

/// A fault handler thread's body: waits for faults on the descriptors served (and for
/// faults aside to go on), and resolves them.
pub(super) fn handle_faults(shared: &Shared) {
    let mut scratch = FaultScratch::new();
    let own_waiter = shared
        .spaces
        .own_space()
        .map(|space| Waiter::new(&space.uffd).expect("an epoll instance for a handler thread"));
    let waiter = match (&own_waiter, shared.spaces.kind()) {
        (Some(waiter), _) => waiter,
        (None, Kind::Served(served)) => &served.waiter,
        (None, Kind::Own(_)) => unreachable!("an own space has its waiter"),
    };
    let aside = &shared.faults.aside;
    let mut cpu = CpuTime::new(&shared.faults.cpu_ns);
    // A pager that polls for faults polls for its reads too: the faulting thread
    // waits on this read, and a sleep here would add a wake-up to its wait.
    znswap_zoned::poll_reads_on_this_thread(shared.faults.poll.is_on());
    let mut read_polled_ns = 0;
    while !shared.wakers.stopping() {
        // Charged once a wake-up (a system call), not per fault.
        cpu.charge();
        // The reads' polling, counted as the polls' own time, and gated with it.
        let polled = znswap_zoned::polled_read_wait_ns_on_this_thread();
        shared.faults.poll.spun(polled - read_polled_ns);
        read_polled_ns = polled;
        znswap_zoned::pause_polled_reads_on_this_thread(!shared.faults.poll.allowed());
        let timeout_ms = if aside.any() { aside.retry_ms() } else { 50 };
        let ready = match waiter.wait(timeout_ms) {
            Ok(ready) => ready,
            Err(error) => panic!("waiting for userfaultfd events: {error}"),
        };
        if aside.any() {
            resume_aside(shared, false);
        }
        if !ready {
            continue;
        }
        // (The poll window counts from the wake-up: the reads are part of it.)
        let woke = shared.now();
        if read_events(shared, &mut scratch, false) > 0 {
            shared.faults.poll.woke(woke);
            poll_for_faults(shared, &mut scratch);
        }
    }
    // The core lets every fault past the budget once the pager stops: none is left
    // aside with its thread blocked.
    while aside.any() {
        resume_aside(shared, true);
    }
}

/// A SIGBUS in self-paging mode at `address`: resolves it if it is a page of one of
/// this pager's regions (in the faulting thread), else returns false.
pub(crate) fn resolve_in_thread(shared: &Shared, address: u64, write: bool) -> bool {
    let mut scratch = SIGBUS_SCRATCH.with(Cell::take).unwrap_or_else(|| {
        znswap_zoned::poll_reads_on_this_thread(shared.faults.poll.is_on());
        FaultScratch::new()
    });
    scratch.task.start(Fault::new(address, FaultKind::Sigbus { write }));
    let Ran::Resolved { ours, times } = run_fault(shared, &mut scratch, FaultTimes::default(), false) else {
        unreachable!("a fault not let aside went aside")
    };
    if ours {
        shared.faults.add(&times);
    }
    SIGBUS_SCRATCH.with(|cell| cell.set(Some(scratch)));
    ours
}

/// Steps the fault started in `scratch` (its time so far in `times`) until it is
/// resolved, or, with `may_aside`, until it would wait for room held back by its
/// tenant's write limit: then it returns with the lock released (`Ran::Aside`), and
/// the caller sets it aside or steps it again.
fn run_fault(shared: &Shared, scratch: &mut FaultScratch, times: FaultTimes, may_aside: bool) -> Ran {
    let FaultScratch { page, task } = scratch;
    let role = FaultRole { page, read_pages: 0, installing: None, times };
    let mut shell = Live::new(shared, role);
    loop {
        match task.step(&mut shell) {
            Next::Continue => {}
            Next::Pause(pause) => {
                let started = Instant::now();
                pause_for(pause);
                shell.role.times.wait_ns += started.elapsed().as_nanos() as u64;
            }
            // Counted while the state lock is held: room made after the core's check
            // is announced to it (`aside.rs`).
            Next::Aside if may_aside => {
                let epoch = shared.faults.aside.begin();
                shell.unlock();
                debug_assert!(shell.holds_nothing() && shell.role.installing.is_none());
                return Ran::Aside { times: shell.role.times, epoch };
            }
            // Waits for room are counted apart (`room_wait_ns`); a fault that may not go
            // aside now waits in its thread.
            Next::Wait(WaitOn::Room) | Next::Aside => {
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
                    times.budget_wait_ns = shared.now().saturating_sub(since);
                }
                shared.faults.add_discarded(task.discarded_pages());
                return Ran::Resolved { ours, times };
            }
        }
    }
}
