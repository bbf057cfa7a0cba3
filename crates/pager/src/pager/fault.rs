//! Faults: the handler threads' loop, and the resolution of one fault in either mode
//! (a handler thread, or the faulting thread's SIGBUS handler).

use std::cell::Cell;

use znswap_pager_core::{Fault, FaultKind, FaultShell, FaultTask, Next, ReadInto};

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
    fn new() -> Box<FaultScratch> {
        Box::new(FaultScratch { page: Box::new(AlignedPage::ZERO), task: FaultTask::new() })
    }
}

thread_local! {
    /// A faulting thread's scratch in self-paging mode, taken while a fault is resolved
    /// (so the SIGBUS handler allocates only on a thread's first fault).
    static SIGBUS_SCRATCH: Cell<Option<Box<FaultScratch>>> = const { Cell::new(None) };
}

/// A fault's part of its [`Live`] shell: the page a read fills.
pub(super) struct FaultRole<'a> {
    page: &'a mut AlignedPage,
    /// Pages the last read filled (more than one: in the read-ahead cache).
    read_pages: u32,
    /// A read's pages await their install: its time is counted.
    installing: Option<Instant>,
}

impl Role for FaultRole<'_> {
    const FAULT: bool = true;

    fn read_buffer(&self) -> &[u8] {
        &self.page.0
    }

    fn applying(&mut self, counters: &Counters, done: bool) {
        if !done && self.read_pages > 0 {
            self.installing = Some(Instant::now());
        } else if let Some(installing) = self.installing.take().filter(|_| done) {
            counters.fault_install_ns.fetch_add(installing.elapsed().as_nanos() as u64, Relaxed);
            self.read_pages = 0;
        }
    }
}

impl<'a> FaultShell for Live<'a, FaultRole<'a>> {
    fn read(&mut self, zone: u32, slot: u32, pages: u32, into: ReadInto) -> Result<(), IoError> {
        let reading = Instant::now();
        let role = &mut self.role;
        let buffer: &mut [u8] = match into {
            ReadInto::FaultPage => &mut role.page.0,
            // SAFETY: the core claimed these pages for this fault's read, until its
            // completion (`fault_read_done`), which comes after this borrow ends.
            ReadInto::Cache { first } => unsafe {
                self.shared.readahead_cache.pages_mut(first as usize, pages as usize)
            },
        };
        assert_eq!(buffer.len(), pages as usize * PAGE_BYTES, "a read larger than its buffer");
        let result = self.shared.read_slots(zone, slot, buffer, None);
        role.read_pages = pages;
        self.shared.counters.fault_read_ns.fetch_add(reading.elapsed().as_nanos() as u64, Relaxed);
        self.shared.counters.fault_reads.fetch_add(1, Relaxed);
        result
    }

    fn zero_fill(&mut self, address: u64) -> bool {
        // Under the lock: EEXIST means something is mapped there.
        self.shared.uffd.copy(address, &ZERO_PAGES[..PAGE_BYTES], false, true).expect("mapping a zero page")
    }

    fn fault_discard_take(&mut self) -> Option<DiscardBatch> {
        // Only tried, never waited for: the state lock is held.
        self.shared.fault_discard.try_lock().ok().and_then(|mut batch| batch.take())
    }

    fn fault_discard_return(&mut self, batch: DiscardBatch) {
        let mut slot = self.shared.fault_discard.lock().unwrap_or_else(|p| p.into_inner());
        assert!(slot.replace(batch).is_none(), "two direct-reclaim batches");
    }
}

impl Shared {
    pub(super) fn handle_faults(&self) {
        let mut scratch = FaultScratch::new();
        let waiter = crate::uffd::Waiter::new(&self.uffd).expect("an epoll instance for a handler thread");
        let mut cpu = CpuTime::new(&self.counters.fault_cpu_ns);
        while !self.stop.load(Relaxed) {
            // Charged once a wake-up (a system call), not per fault.
            cpu.charge();
            match waiter.wait(50) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(error) => panic!("waiting for userfaultfd events: {error}"),
            }
            while let Some(event) = self.uffd.read_event().expect("reading userfaultfd") {
                if let UffdEvent::PageFault { address, write, write_protect, .. } = event {
                    let started = Instant::now();
                    let kind = if write_protect { FaultKind::WriteProtect } else { FaultKind::Missing { write } };
                    self.resolve(Fault::new(address, kind), &mut scratch);
                    self.counters.fault_latency.record(started.elapsed().as_nanos() as u64);
                }
            }
        }
    }

    /// A SIGBUS in self-paging mode at `address`: resolves it if it is a page of one of
    /// this pager's regions (in the faulting thread), else returns false.
    pub(crate) fn resolve_in_thread(&self, address: u64, write: bool) -> bool {
        let mut scratch = SIGBUS_SCRATCH.with(Cell::take).unwrap_or_else(FaultScratch::new);
        let ours = self.resolve(Fault::new(address, FaultKind::Sigbus { write }), &mut scratch);
        SIGBUS_SCRATCH.with(|cell| cell.set(Some(scratch)));
        ours
    }

    /// Runs one fault through the core's steps (`znswap_pager_core::FaultTask`) until
    /// it is resolved; whether it was ours.
    fn resolve(&self, fault: Fault, scratch: &mut FaultScratch) -> bool {
        let FaultScratch { page, task } = scratch;
        task.start(fault);
        let role = FaultRole { page, read_pages: 0, installing: None };
        let mut shell = Live::new(self, role);
        loop {
            match task.step(&mut shell) {
                Next::Continue => {}
                Next::Pause(pause) => Self::pause(pause),
                Next::Wait(on) => shell.wait(on),
                Next::Resolved { ours } => {
                    debug_assert!(shell.holds_nothing());
                    if let Some(since) = task.room_wait_since_ns() {
                        self.counters.budget_waits.fetch_add(1, Relaxed);
                        self.counters.budget_wait_ns.fetch_add(self.now().saturating_sub(since), Relaxed);
                    }
                    self.counters.fault_discarded_pages.fetch_add(task.discarded_pages(), Relaxed);
                    return ours;
                }
            }
        }
    }
}
