//! What the settling of an eviction round makes of each victim to park, for each thing
//! the kernel's `UFFDIO_MOVE` can answer (`ParkOutcome`), driven through the core's
//! calls with no shell: a move never counts an empty page as parked.

mod common;

use znswap_core::PolicyKind;
use znswap_pager_core::{
    Actions, CoreConfig, DiscardBatch, EvictRound, Fault, FaultKind, FaultStep, PageState, PagerCore, ParkOutcome,
    PAGE_BYTES,
};

const BASE: u64 = 1 << 32;
const SHADOW: u64 = 1 << 33;
const PAGES: u64 = 16;

fn config() -> CoreConfig {
    CoreConfig { park_pages: 8, regions_max: 2, ..common::core_config(PolicyKind::PerCore) }
}

struct Harness {
    core: PagerCore,
    owner: u32,
    now: u64,
}

impl Harness {
    /// Pages `0..PAGES` mapped (zero-filled by write faults), none parked yet.
    fn new() -> Harness {
        let mut core = PagerCore::new(common::geometry(4), false, config()).expect("a valid core");
        let owner = core.region_add(BASE, PAGES, 0, Some(SHADOW)).expect("a region");
        let mut harness = Harness { core, owner, now: 1 };
        for page in 0..PAGES {
            harness.zero_fill(page);
        }
        harness
    }

    fn zero_fill(&mut self, page: u64) {
        let mut fault = Fault::new(BASE + page * PAGE_BYTES as u64, FaultKind::Missing { write: true });
        let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
        for _ in 0..10 {
            self.now += 1_000;
            let step = match self.core.fault(&mut fault, self.now, &mut actions) {
                FaultStep::ZeroFill { .. } => self.core.fault_zero_filled(&mut fault, true, self.now, &mut actions),
                step => step,
            };
            actions.drain().for_each(drop);
            if step == FaultStep::Done {
                return;
            }
        }
        panic!("page {page} was not mapped");
    }

    fn state(&self, page: u64) -> PageState {
        self.core.page_state(self.owner, page).expect("live")
    }

    /// A round; returns it with the pages of its victims to park, which come first
    /// (the hand parks pages while the inactive list has room, then evicts in place).
    fn pick(&mut self) -> (EvictRound, Vec<u64>) {
        let mut round = self.core.evict_round();
        self.core.evict_pick(&mut round, self.now);
        let pages: Vec<u64> = (0..round.victims())
            .map_while(|victim| {
                let (address, shadow) = round.victim_to_park(victim)?;
                assert_eq!(shadow - SHADOW, address - BASE, "each page parks at its own shadow page");
                Some((address - BASE) / PAGE_BYTES as u64)
            })
            .collect();
        assert!(
            (pages.len()..round.victims()).all(|victim| round.victim_to_park(victim).is_none()),
            "victims to park come first"
        );
        assert!(!pages.is_empty(), "nothing picked to park");
        assert!(pages.iter().all(|&page| matches!(self.state(page), PageState::Parking { .. })));
        (round, pages)
    }

    /// Settles a round whose first victim's move had `first` and the others moved.
    fn settle_first_as(&mut self, round: &mut EvictRound, parks: usize, first: ParkOutcome) {
        round.park_done(0, first);
        for victim in 1..parks {
            round.park_done(victim, ParkOutcome::Moved);
        }
        self.settle(round);
    }

    fn settle(&mut self, round: &mut EvictRound) {
        let mut actions = Actions::with_capacity(64);
        self.core.park_settle(round, self.now, &mut actions);
        assert!(actions.is_empty(), "a synchronous settling asks for nothing: {:?}", actions.as_slice());
        self.core.check_invariants();
    }

    fn hand_over(&mut self, round: &mut EvictRound) {
        let mut actions = Actions::with_capacity(self.core.hand_over_actions_max());
        self.now += 1_000;
        self.core.evict_hand_over(round, self.now, &mut actions);
        self.core.check_invariants();
    }

    /// The shadow addresses the pager's next discard takes.
    fn discarded(&mut self) -> Vec<u64> {
        let mut batch: DiscardBatch = self.core.discard_batch();
        if !self.core.discard_take(&mut batch) {
            return Vec::new();
        }
        let addresses = batch
            .ranges()
            .iter()
            .flat_map(|range| (0..range.len / PAGE_BYTES).map(move |i| (range.start + i * PAGE_BYTES) as u64))
            .collect();
        self.core.discard_done(&mut batch);
        addresses
    }
}

#[test]
fn a_moved_victim_is_parked() {
    let mut h = Harness::new();
    let (mut round, pages) = h.pick();
    for victim in 0..pages.len() {
        round.park_done(victim, ParkOutcome::Moved);
    }
    h.settle(&mut round);
    assert!(pages.iter().all(|&page| h.state(page) == PageState::Parked));
    assert_eq!(h.core.stats().pages_parked, pages.len() as u64);
}

/// The shadow page still holds a stale copy (`EEXIST`): the page is where it was,
/// mapped, so it stays resident (a later pass of the hand may park it); nothing reads
/// or writes it this round.
#[test]
fn a_victim_whose_shadow_page_is_occupied_stays_resident() {
    let mut h = Harness::new();
    let (mut round, pages) = h.pick();
    h.settle_first_as(&mut round, pages.len(), ParkOutcome::Occupied);
    assert_eq!(h.state(pages[0]), PageState::Resident);
    assert_eq!(h.core.stats().park_occupied, 1);
    let address = BASE + pages[0] * PAGE_BYTES as u64;
    assert!(
        round.ranges().iter().all(|range| address < range.start || address >= range.end),
        "no range protects a kept page: {:x?}",
        round.ranges()
    );
    assert_eq!(round.victim_to_check(0), None, "a kept page is not read for zeroes");
    h.hand_over(&mut round);
    assert_eq!(h.state(pages[0]), PageState::Resident, "kept by the hand-over");
}

/// Shared with a fork's child (`EBUSY`): still mapped where it is, so it is evicted in
/// place, write-protected and read for zeroes as the CLOCK's victims are.
#[test]
fn a_busy_victim_is_evicted_in_place() {
    let mut h = Harness::new();
    let (mut round, pages) = h.pick();
    h.settle_first_as(&mut round, pages.len(), ParkOutcome::Busy);
    assert!(matches!(h.state(pages[0]), PageState::Evicting { .. }), "{:?}", h.state(pages[0]));
    assert_eq!(h.core.stats().park_refused, 1);
    let address = BASE + pages[0] * PAGE_BYTES as u64;
    let own = round.ranges().iter().filter(|r| (r.start, r.end) == (address, address + PAGE_BYTES as u64)).count();
    assert_eq!(own, 1, "a range of its own: {:x?}", round.ranges());
    assert_eq!(round.victim_to_check(0), None, "not read before its range is protected");
    for range in round.ranges_mut() {
        range.protected = true;
    }
    assert_eq!(round.victim_to_check(0), Some(address));
}

/// Nothing was mapped at a page the pager had resident: its data is gone, and the
/// settling says so rather than park nothing (or read the empty page for zeroes, which
/// faults in the evictor forever).
#[test]
#[should_panic(expected = "nothing was mapped there when it was parked")]
fn a_hole_where_the_pager_mapped_a_page_panics() {
    let mut h = Harness::new();
    let (mut round, pages) = h.pick();
    for victim in 0..pages.len() {
        round.park_done(victim, ParkOutcome::Hole);
    }
    h.core.park_settle(&mut round, h.now, &mut Actions::with_capacity(64));
}

/// The program discarded the victim while its move was under way: a move that took
/// the old page leaves a stale copy at the shadow for the next discard; one that found
/// the page already zapped (`ENOENT`) leaves nothing there to discard.
#[test]
fn a_victim_discarded_during_its_move_drops_only_what_the_move_took() {
    let mut h = Harness::new();
    let (mut round, pages) = h.pick();
    assert!(pages.len() >= 2, "two victims: {pages:?}");
    let (moved, hole) = (pages[0], pages[1]);
    for page in [moved, hole] {
        let start = BASE + page * PAGE_BYTES as u64;
        h.now += 1_000;
        h.core.discard_range(start, start + PAGE_BYTES as u64, h.now, true);
        assert_eq!(h.state(page), PageState::ParkingRemoved);
    }
    round.park_done(0, ParkOutcome::Moved);
    round.park_done(1, ParkOutcome::Hole);
    for victim in 2..pages.len() {
        round.park_done(victim, ParkOutcome::Moved);
    }
    h.settle(&mut round);
    assert_eq!(h.state(moved), PageState::Removed);
    assert_eq!(h.state(hole), PageState::Removed);
    let discarded = h.discarded();
    assert!(discarded.contains(&(SHADOW + moved * PAGE_BYTES as u64)), "{discarded:x?}");
    assert!(!discarded.contains(&(SHADOW + hole * PAGE_BYTES as u64)), "{discarded:x?}");
}

/// A missing fault on a page the pager has mapped is a stale event when a program
/// thread raised it (another thread's fault mapped the page meanwhile): it is woken.
#[test]
fn a_program_threads_fault_on_a_mapped_page_is_woken() {
    let mut h = Harness::new();
    let address = BASE + 3 * PAGE_BYTES as u64;
    let mut fault = Fault::new(address, FaultKind::Missing { write: false });
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    assert_eq!(h.core.fault(&mut fault, h.now + 1, &mut actions), FaultStep::Done);
    let woken: Vec<_> = actions.drain().collect();
    assert!(
        matches!(woken.as_slice(), [znswap_pager_core::Action::Wake { address: at }] if *at == address),
        "{woken:?}"
    );
}

/// The pager's own threads read only pages it has mapped, and nothing can map one under
/// them: their missing fault there means the pager lost track of the page's bytes, and
/// it stops naming the page (the evictor's zero check once faulted forever instead).
#[test]
#[should_panic(expected = "one of its own threads found nothing mapped there")]
fn a_pager_threads_fault_on_a_mapped_page_panics() {
    let mut h = Harness::new();
    let address = BASE + 3 * PAGE_BYTES as u64;
    let mut fault = Fault::new(address, FaultKind::Missing { write: false }).from_pager_thread();
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    h.core.fault(&mut fault, h.now + 1, &mut actions);
}

/// The pages a round writes from the inactive list's old end go to the engine at the
/// pick, oldest first, while the round's own victims are still to be moved: their
/// appends do not wait for the moves.
#[test]
fn the_lists_writes_go_to_the_engine_at_the_pick_before_the_rounds_moves() {
    let mut h = Harness::new();
    let (mut round, parked) = h.pick();
    h.settle_first_as(&mut round, parked.len(), ParkOutcome::Moved);
    h.hand_over(&mut round);
    assert!(parked.iter().all(|&page| h.state(page) == PageState::Parked), "the first round parks its victims");

    let mut round = h.core.evict_round();
    h.now += 1_000;
    h.core.evict_pick(&mut round, h.now);
    h.core.check_invariants();
    let writing: Vec<u64> = parked.iter().copied().filter(|&page| h.state(page) == PageState::WritingParked).collect();
    assert!(!writing.is_empty(), "nothing written at the pick");
    assert_eq!(writing, parked[..writing.len()], "the oldest parked pages are written first");
    let to_move: Vec<(u64, u64)> = (0..round.victims()).filter_map(|victim| round.victim_to_park(victim)).collect();
    assert!(!to_move.is_empty(), "the round has victims of its own to move");
    assert!(to_move
        .iter()
        .all(|&(address, _)| matches!(h.state((address - BASE) / PAGE_BYTES as u64), PageState::Parking { .. })));
    // The hand-over writes nothing more: the round's writes were taken.
    for victim in 0..round.victims() {
        if round.victim_to_park(victim).is_some() {
            round.park_done(victim, ParkOutcome::Moved);
        }
    }
    h.settle(&mut round);
    h.hand_over(&mut round);
    let still_parked = parked.iter().filter(|&&page| h.state(page) == PageState::Parked).count();
    assert_eq!(still_parked, parked.len() - writing.len(), "the hand-over wrote parked pages again");
}
