//! The program's discards (`discard_range`) in every page state, and what a forked
//! child is told of its pages (`child_page`), driven through the core's calls over the
//! reference driver's model device.

mod common;

use common::{core_config, geometry};
use znswap_core::driver::{Captured, Completion, Driver, NoFaults};
use znswap_core::{AppendPage, Buf, IoError, IoRequest, PageState as EnginePage, PolicyKind};
use znswap_pager_core::{
    Action, Actions, ChildPage, CopyFrom, EvictRound, Fault, FaultKind, FaultStep, IoCompletion, PageSource, PageState,
    PagerCore, PAGE_BYTES,
};

const BASE: u64 = 1 << 32;
const PAGES: u64 = 64;

struct Harness {
    core: PagerCore,
    driver: Driver,
    now: u64,
    /// Each page's content as the program sees it (a version; 0: zeroes).
    memory: Vec<u64>,
    owner: u32,
}

fn address(page: u64) -> u64 {
    BASE + page * PAGE_BYTES as u64
}

impl Harness {
    fn new() -> Harness {
        let mut core = PagerCore::new(geometry(4), false, core_config(PolicyKind::PerCore)).expect("a valid core");
        let owner = core.region_add(BASE, PAGES, 0, None).expect("a region");
        let driver = Driver::new(core.engine());
        Harness { core, driver, now: 1, memory: vec![0; PAGES as usize], owner }
    }

    fn tick(&mut self) -> u64 {
        self.now += 1_000;
        self.now
    }

    fn state(&self, page: u64) -> PageState {
        self.core.page_state(self.owner, page).expect("live")
    }

    fn engine(&self, page: u64) -> EnginePage {
        self.core.engine().page_state(self.owner, page).expect("registered")
    }

    /// Runs a fault to `Done`; a zero fill lands if `mapped` says nothing is there.
    /// Returns the actions and the content mapped (if a copy or zero page was).
    fn fault(&mut self, page: u64, kind: FaultKind, mapped: bool) -> (Vec<Action>, Vec<FaultStep>) {
        let mut fault = Fault::new(address(page), kind);
        let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
        let mut all = Vec::new();
        let mut steps = Vec::new();
        for _ in 0..100 {
            let now = self.tick();
            let step = self.core.fault(&mut fault, now, &mut actions);
            all.extend(actions.drain());
            steps.push(step);
            let step = match step {
                FaultStep::Read { zone, slot, pages, .. } => {
                    let versions = self.driver.read_pages(zone, slot, pages, &mut NoFaults::default()).expect("read");
                    let step = self.core.fault_read_done(&mut fault, Ok(()), now, &mut actions);
                    for action in actions.as_slice() {
                        if let Action::Copy { from: CopyFrom::FaultPage | CopyFrom::Cache { .. }, .. } = action {
                            self.memory[page as usize] = versions[0];
                        }
                    }
                    all.extend(actions.drain());
                    step
                }
                FaultStep::ZeroFill { .. } => {
                    let step = self.core.fault_zero_filled(&mut fault, !mapped, now, &mut actions);
                    if !mapped {
                        self.memory[page as usize] = 0;
                    }
                    all.extend(actions.drain());
                    step
                }
                step => step,
            };
            if step == FaultStep::Done {
                self.core.check_invariants();
                return (all, steps);
            }
        }
        panic!("fault on page {page} never done: {steps:?}");
    }

    /// A first write: maps the page and writes `version` into it.
    fn write(&mut self, page: u64, version: u64) {
        if self.state(page) == PageState::Unmapped {
            self.fault(page, FaultKind::Missing { write: true }, false);
        }
        self.memory[page as usize] = version;
    }

    /// Picks victims (every resident page once the hand has passed them) and protects
    /// their ranges; returns the round, before its hand-over.
    fn pick(&mut self) -> EvictRound {
        let mut round = self.core.evict_round();
        for _ in 0..4 {
            self.core.evict_pick(&mut round, self.now);
            if round.victims() > 0 {
                break;
            }
            // Nothing picked: the hand only cleared bits; the round ends with no hand-over
            // when nothing was protected.
            if round.ranges().is_empty() {
                continue;
            }
            let mut actions = Actions::with_capacity(self.core.hand_over_actions_max());
            self.core.evict_hand_over(&mut round, self.now, &mut actions);
        }
        assert!(round.victims() > 0, "nothing to evict");
        for range in round.ranges_mut() {
            range.protected = true;
        }
        for victim in 0..round.victims() {
            if let Some(at) = round.victim_to_check(victim) {
                let page = (at - BASE) / PAGE_BYTES as u64;
                round.set_zero(victim, self.memory[page as usize] == 0);
            }
        }
        round
    }

    fn hand_over(&mut self, round: &mut EvictRound) {
        let mut actions = Actions::with_capacity(self.core.hand_over_actions_max());
        let now = self.tick();
        self.core.evict_hand_over(round, now, &mut actions);
        self.core.check_invariants();
    }

    /// Runs the I/O thread until nothing is queued.
    fn run_io(&mut self) {
        let mut plan = self.core.io_plan();
        loop {
            let now = self.tick();
            if !self.core.io_next(&mut plan, now) {
                break;
            }
            let request = plan.request();
            let mut pages = Vec::new();
            if let IoRequest::Append { .. } = request {
                for source in plan.sources() {
                    let buf = match *source {
                        PageSource::Region { address } => {
                            Buf::Page(self.memory[((address - BASE) / PAGE_BYTES as u64) as usize])
                        }
                        PageSource::Gc { page } => Buf::Gc(page),
                        PageSource::Footer => Buf::Footer,
                        PageSource::Zero => Buf::Zero,
                    };
                    pages.push(AppendPage { owner: 0, page: 0, buf });
                }
            }
            let records = match request {
                IoRequest::Append { .. } => self.core.append_records(&plan).to_vec(),
                _ => Vec::new(),
            };
            let captured = Captured { request, pages, records };
            let (completion, records) = match self.driver.run(&captured, &mut NoFaults::default()) {
                Completion::Append(result) => (IoCompletion::Append(result), Vec::new()),
                Completion::Read { result, records, .. } => (IoCompletion::Read(result), records),
                Completion::Reset(result) => (IoCompletion::Reset(result), Vec::new()),
                Completion::Finish(result) => (IoCompletion::Finish(result), Vec::new()),
            };
            self.core.io_done(&mut plan, completion, &records, now);
        }
        self.core.check_invariants();
    }

    /// Discards what awaits the pager's own discard.
    fn pager_discard(&mut self) {
        let mut batch = self.core.discard_batch();
        if self.core.discard_take(&mut batch) {
            for range in batch.ranges() {
                for index in 0..range.len / PAGE_BYTES {
                    let page = (range.start as u64 - BASE) / PAGE_BYTES as u64 + index as u64;
                    self.memory[page as usize] = 0;
                }
            }
            self.core.discard_done(&mut batch);
        }
        self.core.check_invariants();
    }

    /// Writes pages `0..count` and swaps them all out; they end Unmapped and Swapped.
    fn swap_out_all(&mut self, count: u64) {
        for first in (0..count).step_by(16) {
            let end = (first + 16).min(count);
            for page in first..end {
                self.write(page, 100 + page);
            }
            for _ in 0..64 {
                if (first..end).all(|page| self.state(page) == PageState::Unmapped) {
                    break;
                }
                let _ = self.core.evictor_work();
                let mut round = self.pick();
                self.hand_over(&mut round);
                self.run_io();
                self.pager_discard();
            }
        }
        assert!((0..count).all(|page| self.state(page) == PageState::Unmapped), "pages left resident");
    }

    fn discard(&mut self, first: u64, last: u64) {
        let now = self.tick();
        self.core.discard_range(address(first), address(last), now, false);
        self.core.check_invariants();
        self.core.engine().check_invariants();
    }
}

fn zero_filled(actions: &[Action], page: u64) -> bool {
    actions.iter().any(|action| match *action {
        Action::Copy { address: at, from: CopyFrom::Zeros, .. } => at == address(page),
        Action::ZeroPage { address: at } => at == address(page),
        _ => false,
    })
}

#[test]
fn an_unmapped_swapped_page_discarded_reads_zero_and_frees_its_slot() {
    let mut h = Harness::new();
    h.swap_out_all(4);
    assert!(matches!(h.engine(1), EnginePage::Swapped { .. }));
    h.discard(1, 2);
    assert_eq!(h.state(1), PageState::Unmapped);
    assert_eq!(h.engine(1), EnginePage::Zero, "the slot is freed");
    assert!(matches!(h.engine(0), EnginePage::Swapped { .. }), "the page before the range is untouched");
    assert!(matches!(h.engine(2), EnginePage::Swapped { .. }), "the page after the range is untouched");
    let (actions, steps) = h.fault(1, FaultKind::Missing { write: false }, false);
    assert!(zero_filled(&actions, 1), "a zero page, never the old data: {actions:?}");
    assert!(!steps.iter().any(|step| matches!(step, FaultStep::Read { .. })));
}

#[test]
fn a_swap_in_in_flight_when_discarded_ends_with_a_zero_page() {
    let mut h = Harness::new();
    h.swap_out_all(4);
    let mut fault = Fault::new(address(2), FaultKind::Missing { write: false });
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    let step = h.core.fault(&mut fault, h.now, &mut actions);
    assert!(matches!(step, FaultStep::Read { .. }), "{step:?}");
    h.discard(0, 4);
    // The read completes (with the old data): the engine orphaned it.
    let step = h.core.fault_read_done(&mut fault, Ok(()), h.now, &mut actions);
    assert_eq!(step, FaultStep::Done);
    assert!(
        actions.as_slice().iter().all(|action| matches!(action, Action::Wake { .. })),
        "nothing installed from the orphaned read: {:?}",
        actions.as_slice()
    );
    actions.clear();
    let (actions, _) = h.fault(2, FaultKind::Missing { write: false }, false);
    assert!(zero_filled(&actions, 2), "the refault zero-fills: {actions:?}");
    assert_eq!(h.state(2), PageState::Referenced);
}

#[test]
fn a_resident_page_discarded_is_removed_until_a_zero_page_lands() {
    let mut h = Harness::new();
    h.write(5, 7);
    let resident = h.core.stats().resident_pages;
    h.discard(5, 6);
    assert_eq!(h.state(5), PageState::Removed);
    assert_eq!(h.engine(5), EnginePage::Zero);
    assert_eq!(h.core.stats().resident_pages, resident - 1);
    // Before the kernel's zap: the old entry is there, nothing lands.
    let (actions, steps) = h.fault(5, FaultKind::Missing { write: true }, true);
    assert!(steps.contains(&FaultStep::ZeroFill { address: address(5) }), "{steps:?}");
    assert_eq!(h.state(5), PageState::Removed, "never trusts the old entry");
    assert!(actions.contains(&Action::Unprotect { address: address(5), pages: 1 }), "{actions:?}");
    // A write to the old, write-protected entry goes ahead into memory to be zapped.
    let (actions, _) = h.fault(5, FaultKind::WriteProtect, true);
    assert_eq!(actions, vec![Action::Unprotect { address: address(5), pages: 1 }]);
    assert_eq!(h.state(5), PageState::Removed);
    // After the zap: the zero page lands, and the page is the pager's again.
    h.fault(5, FaultKind::Missing { write: false }, false);
    assert_eq!(h.state(5), PageState::Referenced);
    assert_eq!(h.engine(5), EnginePage::Resident);
    assert_eq!(h.core.stats().resident_pages, resident);
}

#[test]
fn a_victim_discarded_before_its_hand_over_is_never_written() {
    let mut h = Harness::new();
    for page in 0..30 {
        h.write(page, 1000 + page);
    }
    let mut round = h.pick();
    let victim = (0..30).find(|&page| matches!(h.state(page), PageState::Evicting { .. })).expect("a victim");
    let raced = h.core.stats().evictions_raced;
    h.discard(victim, victim + 1);
    assert_eq!(h.state(victim), PageState::Removed);
    h.hand_over(&mut round);
    assert_eq!(h.state(victim), PageState::Removed, "the hand-over skips it");
    assert_eq!(h.engine(victim), EnginePage::Zero);
    assert_eq!(h.core.stats().evictions_raced, raced, "not counted as written");
    h.run_io();
    assert_eq!(h.engine(victim), EnginePage::Zero);
}

#[test]
fn a_page_discarded_during_its_swap_out_completes_dropped() {
    let mut h = Harness::new();
    for page in 0..30 {
        h.write(page, 1000 + page);
    }
    let mut round = h.pick();
    h.hand_over(&mut round);
    let writing = (0..30).find(|&page| h.state(page) == PageState::Writing).expect("a page being written");
    h.discard(writing, writing + 1);
    assert_eq!(h.state(writing), PageState::Removed);
    assert_eq!(h.engine(writing), EnginePage::Zero);
    h.run_io();
    assert_eq!(h.state(writing), PageState::Removed, "the Dropped completion leaves it alone");
    assert_eq!(h.engine(writing), EnginePage::Zero, "its slot was never made valid");
    let (actions, _) = h.fault(writing, FaultKind::Missing { write: false }, false);
    assert!(actions
        .iter()
        .all(|action| !matches!(action, Action::Copy { from: CopyFrom::FaultPage | CopyFrom::Cache { .. }, .. })));
    assert_eq!(h.state(writing), PageState::Referenced);
}

#[test]
fn a_page_awaiting_the_pagers_discard_stays_dropping_and_loses_its_slot() {
    let mut h = Harness::new();
    for page in 0..30 {
        h.write(page, 1000 + page);
    }
    let mut round = h.pick();
    h.hand_over(&mut round);
    h.run_io();
    let dropping = (0..30).find(|&page| h.state(page) == PageState::Dropping).expect("a written-out page");
    assert!(matches!(h.engine(dropping), EnginePage::Swapped { .. }));
    h.discard(dropping, dropping + 1);
    assert_eq!(h.state(dropping), PageState::Dropping, "the pager's discard still zaps it");
    assert_eq!(h.engine(dropping), EnginePage::Zero, "its slot must not be read back");
    let mut fault = Fault::new(address(dropping), FaultKind::Missing { write: false });
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    assert!(matches!(h.core.fault(&mut fault, h.now, &mut actions), FaultStep::Again(_)), "waits for the discard");
    h.pager_discard();
    assert_eq!(h.state(dropping), PageState::Unmapped);
    let (actions, _) = h.fault(dropping, FaultKind::Missing { write: false }, false);
    assert!(zero_filled(&actions, dropping), "{actions:?}");
}

#[test]
fn a_poisoned_page_discarded_reads_zero_once_zapped() {
    let mut h = Harness::new();
    h.swap_out_all(2);
    // The slot never reads back: the page is given up and poisoned.
    let mut fault = Fault::new(address(0), FaultKind::Missing { write: false });
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    loop {
        match h.core.fault(&mut fault, h.now, &mut actions) {
            FaultStep::Read { .. } => {}
            other => panic!("{other:?}"),
        }
        if h.core.fault_read_done(&mut fault, Err(IoError::Device), h.now, &mut actions) == FaultStep::Done {
            break;
        }
    }
    assert_eq!(h.state(0), PageState::Poisoned);
    h.discard(0, 1);
    assert_eq!(h.state(0), PageState::Removed, "the marker stays until the zap");
    assert_eq!(h.engine(0), EnginePage::Zero);
    h.fault(0, FaultKind::Missing { write: false }, true);
    assert_eq!(h.state(0), PageState::Removed, "the marker is still there");
    h.fault(0, FaultKind::Missing { write: false }, false);
    assert_eq!(h.state(0), PageState::Referenced);
}

#[test]
fn a_page_mapped_after_a_discard_and_zapped_by_it_faults_back_as_zero() {
    let mut h = Harness::new();
    h.swap_out_all(2);
    // The discard is read; a fault maps the page before the kernel's zap ...
    h.discard(0, 2);
    h.fault(1, FaultKind::Missing { write: false }, false);
    assert_eq!(h.state(1), PageState::Referenced);
    // ... which then takes it: the next fault is a real one, and the kernel says so.
    let (_, steps) = h.fault(1, FaultKind::Missing { write: false }, false);
    assert!(steps.contains(&FaultStep::ZeroFill { address: address(1) }), "{steps:?}");
    assert_eq!(h.core.stats().zapped_pages_found, 1);
    assert_eq!(h.state(1), PageState::Referenced);
    // A stale event (the page mapped): nothing changes.
    let (actions, _) = h.fault(1, FaultKind::Missing { write: false }, true);
    assert_eq!(actions, vec![Action::Wake { address: address(1) }]);
    assert_eq!(h.core.stats().zapped_pages_found, 1);
}

#[test]
fn a_discard_spanning_regions_and_gaps_covers_only_whole_pages() {
    let mut h = Harness::new();
    let second = h.core.region_add(BASE + 2 * PAGES * PAGE_BYTES as u64, 8, 0, None).expect("a second region");
    h.write(PAGES - 1, 3);
    h.write(0, 4);
    // From the middle of page 0 to past the second region.
    let now = h.tick();
    h.core.discard_range(address(0) + 1, BASE + 4 * PAGES * PAGE_BYTES as u64, now, false);
    h.core.check_invariants();
    assert_eq!(h.state(0), PageState::Referenced, "a partial page is left alone");
    assert_eq!(h.state(PAGES - 1), PageState::Removed);
    assert_eq!(h.core.stats().program_discarded_pages, PAGES - 1 + 8);
    assert_eq!(h.core.page_state(second, 0), Some(PageState::Unmapped));
    // A range over no region changes nothing.
    let before = h.core.stats().program_discarded_pages;
    h.core.discard_range(1 << 40, (1 << 40) + 8 * PAGE_BYTES as u64, now, false);
    assert_eq!(h.core.stats().program_discarded_pages, before);
}

#[test]
fn the_child_reads_swapped_pages_at_their_slots_while_the_hold_keeps_them() {
    let mut h = Harness::new();
    h.swap_out_all(40);
    h.write(50, 55);
    let hold = h.core.fork_hold();
    let mut slots = Vec::new();
    for page in 0..40 {
        let EnginePage::Swapped { address: slot } = h.engine(page) else { panic!("page {page} swapped") };
        let capacity = h.core.engine().config().geometry.zone_capacity_pages;
        let expected = ChildPage::Slot { zone: slot.zone(capacity), slot: slot.slot(capacity), sealed: None };
        assert_eq!(h.core.child_page(address(page)), expected);
        slots.push(expected);
    }
    assert_eq!(h.core.child_page(address(45)), ChildPage::Zero, "never written");
    assert_eq!(h.core.child_page(address(50)), ChildPage::Zero, "mapped: present in the child unless zapped");
    assert_eq!(h.core.child_page(1 << 40), ChildPage::NotOurs);
    assert!(h.core.engine().holds_info().zones_held > 0);
    // The parent moves on: every page discarded, so every slot invalid.
    h.discard(0, 40);
    h.run_io();
    for (page, slot) in slots.iter().enumerate() {
        let ChildPage::Slot { zone, slot, .. } = *slot else { unreachable!() };
        let versions = h.driver.read_pages(zone, slot, 1, &mut NoFaults::default()).expect("still readable");
        assert_eq!(versions[0], 100 + page as u64, "the child reads its page as at the fork");
    }
    assert!(h.core.engine().stats().resets_deferred > 0, "the emptied zone's reset waits");
    let resets = h.core.engine().stats().resets;
    let now = h.tick();
    h.core.fork_release(hold, now);
    h.run_io();
    assert!(h.core.engine().stats().resets > resets, "the deferred reset goes ahead");
    assert_eq!(h.core.engine().holds_info().zones_held, 0);
    h.core.engine().check_invariants();
}

/// Lifetime asks for three GC streams; a device that cannot keep that many zones open
/// beside a swap-zone gets fewer, shared by neighbouring classes, not an error.
#[test]
fn lifetime_on_a_small_device_shares_gc_streams() {
    let core = |max_open_zones: u32| {
        PagerCore::new(geometry(max_open_zones), false, core_config(PolicyKind::Lifetime)).expect("a valid core")
    };
    assert_eq!(core(4).engine().derived().gc_streams, 3);
    assert_eq!(core(3).engine().derived().gc_streams, 2);
    assert_eq!(core(2).engine().derived().gc_streams, 1);
}
