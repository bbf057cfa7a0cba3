//! Faults: the handler threads' loop, and the resolution of one fault in either mode
//! (a handler thread, or the faulting thread's SIGBUS handler).

use std::cell::Cell;

use znswap_pager_core::{Fault, FaultKind, FaultStep};

use super::*;
use crate::page_buffers::{bytes, bytes_mut, AlignedPage};
use crate::uffd::Event as UffdEvent;

/// What one fault works in: its page buffer (aligned, so the device reads into it
/// without a bounce copy) and its actions. Allocated once per thread.
pub(crate) struct FaultScratch {
    page: Box<AlignedPage>,
    actions: Actions,
}

impl FaultScratch {
    fn new() -> Box<FaultScratch> {
        Box::new(FaultScratch {
            page: Box::new(AlignedPage::ZERO),
            actions: Actions::with_capacity(Actions::FAULT_MAX),
        })
    }
}

thread_local! {
    /// A faulting thread's scratch in self-paging mode, taken while a fault is resolved
    /// (so the SIGBUS handler allocates only on a thread's first fault).
    static SIGBUS_SCRATCH: Cell<Option<Box<FaultScratch>>> = const { Cell::new(None) };
}

impl Shared {
    pub(super) fn handle_faults(&self) {
        let mut scratch = FaultScratch::new();
        while !self.stop.load(Relaxed) {
            match self.uffd.poll(50) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(error) => panic!("polling userfaultfd: {error}"),
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
        let step = self.resolve(Fault::new(address, FaultKind::Sigbus { write }), &mut scratch);
        SIGBUS_SCRATCH.with(|cell| cell.set(Some(scratch)));
        step != FaultStep::NotOurs
    }

    /// Runs one fault through the core until it is resolved (`Done`) or not ours.
    fn resolve(&self, mut fault: Fault, scratch: &mut FaultScratch) -> FaultStep {
        let FaultScratch { page, actions } = scratch;
        let mut state = self.lock_for_fault();
        let mut waiting_for_room: Option<Instant> = None;
        loop {
            let wants_readahead = self.readahead_pages > 0 && !matches!(fault.kind(), FaultKind::WriteProtect);
            let mut readahead = wants_readahead.then(|| self.readahead_buffer.try_lock().ok()).flatten();
            fault.readahead_room = readahead.as_ref().map_or(0, |buffer| buffer.len() as u32 - 1);
            let step = state.fault(&mut fault, self.now(), actions);
            self.run(actions, &[]);
            let step = match step {
                FaultStep::Read { zone, slot, pages } => {
                    drop(state);
                    let reading = Instant::now();
                    let buffer: &mut [u8] = match readahead.as_mut() {
                        Some(buffer) if pages > 1 => bytes_mut(&mut buffer[..pages as usize]),
                        _ => &mut page.0,
                    };
                    assert_eq!(buffer.len(), pages as usize * PAGE_BYTES, "a read larger than its buffer");
                    let result = self.read_slots(zone, slot, buffer, None);
                    self.counters.fault_read_ns.fetch_add(reading.elapsed().as_nanos() as u64, Relaxed);
                    self.counters.fault_reads.fetch_add(1, Relaxed);
                    state = self.lock_for_fault();
                    let step = state.fault_read_done(&mut fault, result, self.now(), actions);
                    let installing = Instant::now();
                    match readahead.as_ref() {
                        Some(buffer) if pages > 1 => self.run(actions, bytes(&buffer[..pages as usize])),
                        _ => self.run(actions, &page.0),
                    }
                    self.counters.fault_install_ns.fetch_add(installing.elapsed().as_nanos() as u64, Relaxed);
                    step
                }
                // Still under the lock: EEXIST means something is mapped there.
                FaultStep::ZeroFill { address } => {
                    let landed =
                        self.uffd.copy(address, &ZERO_PAGES[..PAGE_BYTES], false, true).expect("mapping a zero page");
                    let step = state.fault_zero_filled(&mut fault, landed, self.now(), actions);
                    self.run(actions, &[]);
                    step
                }
                step => step,
            };
            drop(readahead);
            match step {
                FaultStep::NotOurs | FaultStep::Done => {
                    if let Some(since) = waiting_for_room {
                        self.counters.budget_waits.fetch_add(1, Relaxed);
                        self.counters.budget_wait_ns.fetch_add(since.elapsed().as_nanos() as u64, Relaxed);
                    }
                    return step;
                }
                FaultStep::Again(pause) => {
                    drop(state);
                    Self::pause(pause);
                    state = self.lock_for_fault();
                }
                FaultStep::WaitRoom { discard } => {
                    waiting_for_room.get_or_insert_with(Instant::now);
                    // Pages already written out wait only for their discard: do it here
                    // rather than sleep until an evictor does (direct reclaim). This CPU
                    // would idle, while the evictor's may be busy (measured on 2 vCPUs:
                    // the one running the evictor, I/O thread and disk interrupts was).
                    let scratch = if discard { self.fault_discard.try_lock().ok() } else { None };
                    match scratch {
                        Some(mut batch) => {
                            drop(state);
                            let discarded = self.discard(&mut batch);
                            drop(batch);
                            self.counters.fault_discarded_pages.fetch_add(discarded as u64, Relaxed);
                            state = self.lock_for_fault();
                        }
                        None => state = state.wait_timeout(&self.space_freed, Duration::from_millis(10)),
                    }
                }
                FaultStep::Read { .. } | FaultStep::ZeroFill { .. } => {
                    unreachable!("a read or zero fill completion asks for no second one")
                }
            }
        }
    }
}
