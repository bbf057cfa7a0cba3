//! The program's discards (`MADV_DONTNEED`). Half go through the pager (`znswap run`'s
//! madvise wrapper: the core told and the range zapped in one hold of the state lock);
//! the others as the kernel does them to a registered range: a REMOVE event queued, the
//! madvising thread blocked until a handler reads it, and the zap some steps after,
//! while the pager's threads run on. Between the event and the zap a read of the range
//! may see the data from before the discard, or zeroes (the oracle's window).

use znswap_pager_core::{PageState, PAGE_BYTES};

use super::page_tables::Pte;
use super::shell::Sim;
use crate::scenario::{below, chance};

/// The program's discard in flight: its REMOVE event queued, then read (the zap to come).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProgramDiscard {
    Idle,
    Queued {
        place: usize,
        first: u64,
        last: u64,
    },
    /// Read (`discard_range` called); the madvising thread zaps at `zap_step`.
    Read {
        place: usize,
        first: u64,
        last: u64,
        zap_step: u64,
    },
}

pub struct ProgramDiscards {
    discard: ProgramDiscard,
    next_step: u64,
}

impl ProgramDiscards {
    pub fn new(first_step: u64) -> ProgramDiscards {
        ProgramDiscards { discard: ProgramDiscard::Idle, next_step: first_step }
    }

    /// A new discard is due, or a read one's zap.
    pub fn due(&self, step: u64, sweeping: bool) -> bool {
        let discard_due = self.discard == ProgramDiscard::Idle && step >= self.next_step && !sweeping;
        let zap_due = matches!(self.discard, ProgramDiscard::Read { zap_step, .. } if step >= zap_step);
        discard_due || zap_due
    }

    /// Its REMOVE event waits for a handler.
    pub fn queued(&self) -> bool {
        matches!(self.discard, ProgramDiscard::Queued { .. })
    }

    /// The step its zap comes at.
    pub fn timer(&self) -> Option<u64> {
        match self.discard {
            ProgramDiscard::Read { zap_step, .. } => Some(zap_step),
            _ => None,
        }
    }

    /// The place of the region a discard is under way in.
    pub fn place(&self) -> Option<usize> {
        match self.discard {
            ProgramDiscard::Idle => None,
            ProgramDiscard::Queued { place, .. } | ProgramDiscard::Read { place, .. } => Some(place),
        }
    }

    fn schedule_next(&mut self, sim: &mut Sim) {
        let interval = sim.scenario.program_discard_steps;
        self.next_step = sim.step() + interval / 2 + below(&mut sim.schedule.rng, interval.max(1));
    }

    /// The program discards a range, or the zap of a discard read comes.
    pub fn step(&mut self, sim: &mut Sim) {
        match self.discard {
            ProgramDiscard::Idle => self.start(sim),
            ProgramDiscard::Read { place, first, last, .. } => {
                zap(sim, place, first, last, false);
                sim.tables.live_mut(place).busy -= 1;
                self.discard = ProgramDiscard::Idle;
                self.schedule_next(sim);
            }
            ProgramDiscard::Queued { .. } => unreachable!("a queued discard waits for a handler"),
        }
    }

    /// A discard of a run of pages, now and then of a whole region (an allocator's
    /// purge of a free span).
    fn start(&mut self, sim: &mut Sim) {
        let live = sim.tables.live_places();
        if live.is_empty() {
            self.next_step = sim.step() + sim.scenario.program_discard_steps;
            return;
        }
        let rng = &mut sim.schedule.rng;
        let place = live[below(rng, live.len() as u64) as usize];
        let pages = sim.tables.live(place).pages();
        let (first, last) = if chance(rng, 0.1) {
            (0, pages)
        } else {
            let first = below(rng, pages);
            (first, (first + 1 + below(rng, 32)).min(pages))
        };
        // (Always, with asynchronous write protection: the core requires it.)
        if chance(rng, 0.5) || sim.scenario.wp_async {
            // Through the pager: the core told and the range zapped in one hold of the
            // state lock.
            sim.findings.coverage.program_discards_under_lock += 1;
            count_discarded(sim, place, first, last);
            let (start, end) = range_of(sim, place, first, last);
            sim.trace(start, last - first, &|| format!("discard {first}..{last} under the lock"));
            sim.pager.core.discard_range(start, end, sim.schedule.now_ns, true);
            zap(sim, place, first, last, true);
            sim.after_lock_step();
            self.schedule_next(sim);
            return;
        }
        // (It may not be freed under the discard: the program is using it.)
        sim.tables.live_mut(place).busy += 1;
        self.discard = ProgramDiscard::Queued { place, first, last };
    }

    /// A handler reads the REMOVE event and, in the same lock hold, tells the core.
    pub fn read(&mut self, sim: &mut Sim) {
        let ProgramDiscard::Queued { place, first, last } = self.discard else {
            unreachable!("a handler runs for a queued discard")
        };
        sim.findings.coverage.program_discards += 1;
        count_discarded(sim, place, first, last);
        let region = sim.tables.live_mut(place);
        for page in first as usize..last as usize {
            region.oracle.discard_read(page);
            let pte = &mut region.ptes[page];
            if pte.mapped || pte.poisoned {
                pte.tainted = true;
            }
        }
        let (start, end) = range_of(sim, place, first, last);
        sim.trace(start, last - first, &|| format!("REMOVE {first}..{last} read"));
        sim.pager.core.discard_range(start, end, sim.schedule.now_ns, false);
        sim.after_lock_step();
        // The madvising thread runs on at once, mostly; now and then it is preempted
        // for long enough that the pager evicts and swaps pages of the range meanwhile.
        let rng = &mut sim.schedule.rng;
        let delay = if chance(rng, 0.2) { below(rng, 20_000) } else { below(rng, 50) };
        self.discard = ProgramDiscard::Read { place, first, last, zap_step: sim.schedule.step + delay };
    }
}

/// The addresses of pages `first..last` of the region in `place`.
fn range_of(sim: &Sim, place: usize, first: u64, last: u64) -> (u64, u64) {
    (sim.tables.address(place, first), sim.tables.address(place, last - 1) + PAGE_BYTES as u64)
}

/// The kernel's zap of the program's discard: whatever is mapped in the range goes,
/// poison markers too, and the pages read zero.
fn zap(sim: &mut Sim, place: usize, first: u64, last: u64, under_lock: bool) {
    let owner = sim.tables.live(place).owner;
    for page in first..last {
        let state = sim.pager.core.page_state(owner, page);
        let region = sim.tables.live_mut(place);
        let index = page as usize;
        let pte = region.ptes[index];
        if pte.mapped || pte.poisoned {
            let mapped_for_core = matches!(
                state,
                Some(
                    PageState::Resident
                        | PageState::Referenced
                        | PageState::Evicting { .. }
                        | PageState::Writing
                        | PageState::Poisoned
                )
            );
            if mapped_for_core {
                region.zapped[index] = true;
                sim.findings.coverage.zapped_under_core += 1;
                if under_lock {
                    sim.violation(format!("page {place}:{page} is {state:?} after the discard told the core"));
                }
            }
            sim.tables.live_mut(place).ptes[index] = Pte::default();
        }
        sim.tables.live_mut(place).oracle.discard_zapped(index);
    }
    let address = sim.tables.address(place, first);
    sim.trace(address, last - first, &|| format!("the program's zap of pages {first}..{last}"));
}

/// Counts the pages of a program's discard by their pager state.
fn count_discarded(sim: &mut Sim, place: usize, first: u64, last: u64) {
    let owner = sim.tables.live(place).owner;
    let coverage = &mut sim.findings.coverage;
    for page in first..last {
        match sim.pager.core.page_state(owner, page).expect("a live page") {
            PageState::Unmapped => coverage.discarded_unmapped += 1,
            PageState::Resident | PageState::Referenced => coverage.discarded_resident += 1,
            PageState::Evicting { .. } => coverage.discarded_evicting += 1,
            PageState::Writing => coverage.discarded_writing += 1,
            PageState::Dropping => coverage.discarded_dropping += 1,
            PageState::Poisoned => coverage.discarded_poisoned += 1,
            PageState::Removed => coverage.discarded_removed += 1,
            PageState::Parking { .. } | PageState::ParkingRemoved => {
                coverage.discarded_parked += 1;
                coverage.discarded_parking += 1;
            }
            PageState::Parked | PageState::WritingParked => coverage.discarded_parked += 1,
        }
    }
}
