//! Eviction: the CLOCK sweep, the hand-over to the engine, swap-out completions and
//! discards.

use znswap_core::{Event, PageState as EnginePage, SwapOutError, SwapOutOutcome};

use crate::action::{Action, Actions};
use crate::discard::DropKind;
use crate::fault::Pause;
use crate::out::OutPage;
use crate::page::ROUNDS_MAX;
use crate::region::Region;
use crate::{Digest, PageState, PagerCore, PAGE_BYTES};

/// Largest eviction round, in batches (see `evict_hand_over`).
pub const ROUND_BATCHES_MAX: usize = 4;

/// The pause after a round that found nothing to evict: every candidate was referenced
/// or in flight, so faults and the I/O thread should move on before the next sweep.
const NOTHING_PICKED_PAUSE_US: u32 = 200;

/// The CLOCK and its rounds: where the hand is, the rounds handed out, and whether one
/// is in flight. One round is in flight at a time: a victim stays its round's, mapped,
/// from its pick to its hand-over (`PagerCore::evictor_work`).
#[derive(Debug, Default)]
pub(crate) struct Rounds {
    /// The next (owner, page) the eviction sweep looks at.
    hand: (u32, u64),
    /// Rounds handed out (`evict_round`): each names its victims.
    made: u8,
    /// A round is between its pick and its hand-over.
    in_flight: bool,
}

impl Rounds {
    /// The id of a new round (one per evictor thread). Ids run from 1; a page byte names
    /// ids below `ROUNDS_MAX`.
    fn new_id(&mut self) -> u8 {
        assert!(self.made + 1 < ROUNDS_MAX, "at most {} evictors", ROUNDS_MAX - 2);
        self.made += 1;
        self.made
    }

    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight
    }
}

/// What an evictor should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictorWork {
    /// Nothing: call `evictor_sleeps` and wait for `Wakeups::evictors`.
    Sleep,
    /// Written-out pages await their discard: those leave the resident set without I/O.
    Discard,
    /// The resident set, less what is on its way out, is over the low watermark.
    Evict,
}

/// Pages write-protected with one ioctl (one TLB flush, one IPI to the faulting CPUs):
/// `start..end`, and whether the shell managed it.
#[derive(Clone, Copy, Debug)]
pub struct ProtectRange {
    pub start: u64,
    pub end: u64,
    pub protected: bool,
}

#[derive(Clone, Copy, Debug)]
struct Victim {
    owner: u32,
    page: u64,
    address: u64,
    /// Its shadow page's address if it is to be parked (`PageState::Parking`).
    shadow: Option<u64>,
    generation: u64,
    /// Its out handle (taken when picked; none for a page to park).
    handle: Option<u64>,
    /// The range that covers it, if it is to be write-protected.
    range: Option<u32>,
    /// All zeroes once protected.
    zero: bool,
    /// What its move to the shadow did (none: not tried, or not a page to park).
    moved: Option<ParkOutcome>,
    /// Its move was settled (`PagerCore::park_settle`): parked, or gone with the
    /// program's discard; the hand-over passes it by.
    settled: bool,
    /// Written since it was last protected, as the scan before its move found
    /// (`CoreConfig::wp_async`): not moved, referenced.
    written: bool,
    /// Its slot was its swap cache when picked (`CoreConfig::wp_async`): its digest is
    /// taken once it is parked.
    cached: bool,
    /// Its parked bytes' digest (`EvictRound::set_digest`), 0 if not taken.
    digest: Digest,
}

impl Victim {
    /// Victim `page` of region `owner` (of `generation`), at `address`: to evict in place
    /// with no handle yet, until told otherwise.
    fn new(owner: u32, page: u64, address: u64, generation: u64) -> Victim {
        Victim {
            owner,
            page,
            address,
            shadow: None,
            generation,
            handle: None,
            range: None,
            zero: false,
            moved: None,
            settled: false,
            written: false,
            cached: false,
            digest: 0,
        }
    }
}

/// One round's sweep of the CLOCK hand (`PagerCore::evict_pick`): what it may still
/// pick, where the hand is, the ranges it builds, and which regions it passes over.
struct Sweep {
    /// Victims still wanted: to evict in place, and to park.
    direct_room: usize,
    park_room: usize,
    /// The page the hand is at.
    owner: u32,
    page: u64,
    /// Pages looked at, at most `limit`.
    scanned: u64,
    limit: u64,
    /// Whether the last range may grow; the last scan span.
    open: bool,
    scan_open: bool,
    /// The hand write-protects the pages whose bit it clears.
    sampling: bool,
    wp_async: bool,
    /// Only regions of tenants over their own budgets are swept: `over[owner]`.
    tenants_first: bool,
    over: Vec<bool>,
    /// Tenants held back (`held[tenant]`: past their write limits, at their swap
    /// limits) are passed over.
    any_held: bool,
    held: Vec<bool>,
}

impl Sweep {
    /// Whether the round passes region `owner` over: gone, not of a tenant over its
    /// budget while some are, or of a tenant held back.
    fn region_passed_over(&self, regions: &[Region], owner: usize) -> bool {
        let region = &regions[owner];
        !region.live
            || (self.tenants_first && !self.over[owner])
            || (self.any_held && self.held[region.tenant as usize])
    }

    /// Whether the round passes the hand's region over.
    fn passes_over(&self, regions: &[Region]) -> bool {
        self.region_passed_over(regions, self.owner as usize)
    }
}

/// A stretch of a region to scan for written pages before the round's moves
/// (`CoreConfig::wp_async`): from a victim to park to the last of the hand's sweep of
/// the region (the scan changes nothing, so it may run over any page).
#[derive(Clone, Copy, Debug)]
pub struct ScanSpan {
    pub start: u64,
    pub end: u64,
    /// The round's victims `first..victims_end` lie in it.
    first: u32,
    victims_end: u32,
}

/// One evictor's round: the victims picked and the ranges to write-protect outside the
/// lock. Allocated once per evictor thread (`PagerCore::evict_round`).
pub struct EvictRound {
    /// Names this round's victims (`PageState::Evicting`).
    id: u8,
    /// Victims the next round takes: a batch, or up to `ROUND_BATCHES_MAX` batches while
    /// rounds find contiguous pages and nothing is swapped in.
    wanted: usize,
    /// `swap_in_reads` when the last round ended.
    reads_seen: u64,
    victims: Vec<Victim>,
    ranges: Vec<ProtectRange>,
    /// With asynchronous write protection: where the victims to park are, to scan.
    scans: Vec<ScanSpan>,
    /// Each tenant held back this round, by its write limit or its swap limit (kept to
    /// spare an allocation a round).
    held: Vec<bool>,
    /// With asynchronous write protection the ranges are protected before the moves:
    /// the hand may clear a page's bit in its first sweep of a round and pick it in the
    /// second, and protecting its address once it is parked would leave a write-protect
    /// marker there (`WP_UNPOPULATED`).
    protect_first: bool,
}

impl EvictRound {
    /// The ranges to write-protect, each to be marked `protected` if the ioctl worked
    /// (it fails only if the region went away: its victims are then let go).
    pub fn ranges_mut(&mut self) -> &mut [ProtectRange] {
        &mut self.ranges
    }

    pub fn ranges(&self) -> &[ProtectRange] {
        &self.ranges
    }

    /// The address of victim `index` if it is to be looked at (its range protected): an
    /// all-zero victim needs no write. Reading it is the shell's, outside the state lock.
    pub fn victim_to_check(&self, index: usize) -> Option<u64> {
        let victim = &self.victims[index];
        let range = victim.range?;
        self.ranges[range as usize].protected.then_some(victim.address)
    }

    /// Victim `index`'s address and its shadow page's, if it is to be parked (and the
    /// scan did not find it written).
    pub fn victim_to_park(&self, index: usize) -> Option<(u64, u64)> {
        let victim = &self.victims[index];
        victim.shadow.filter(|_| !victim.written).map(|shadow| (victim.address, shadow))
    }

    /// What became of victim `index`'s move (settled by `PagerCore::park_settle`).
    pub fn park_done(&mut self, index: usize, outcome: ParkOutcome) {
        self.victims[index].moved = Some(outcome);
    }

    /// Whether victim `index`, just moved, needs the digest of its parked bytes: its slot
    /// is its swap cache, which stays only if the bytes are still the slot's.
    pub fn wants_digest(&self, index: usize) -> bool {
        let victim = &self.victims[index];
        victim.cached && victim.moved == Some(ParkOutcome::Moved)
    }

    pub fn set_digest(&mut self, index: usize, digest: Digest) {
        self.victims[index].digest = digest;
    }

    /// Whether the ranges are protected before the scans and moves (asynchronous write
    /// protection) rather than after the settling.
    pub fn protects_first(&self) -> bool {
        self.protect_first
    }

    /// Whether the round has victims to park.
    pub fn parks(&self) -> bool {
        self.victims.iter().any(|victim| victim.shadow.is_some())
    }

    /// The stretches to scan for written pages before the moves (`CoreConfig::wp_async`;
    /// none otherwise).
    pub fn scans(&self) -> &[ScanSpan] {
        &self.scans
    }

    /// The scan of span `span` found `start..end` written: its victims there are not
    /// moved. (Pages of the span that are not victims hold nothing mapped that matters.)
    pub fn found_written(&mut self, span: usize, start: u64, end: u64) {
        let ScanSpan { first, victims_end, .. } = self.scans[span];
        for victim in &mut self.victims[first as usize..victims_end as usize] {
            if (start..end).contains(&victim.address) {
                victim.written = true;
            }
        }
    }

    /// After the scans: a written victim keeps the round's other victims of its
    /// sampling granule too, as a write fault on a sampled page references its granule
    /// in the synchronous mode (on `bench --workload hotspot`, written pages judged one
    /// by one swapped in more pages per access: docs/wp-async-facts.md).
    pub fn spread_written(&mut self) {
        // (A synchronous round scans nothing and finds nothing written.)
        if self.scans.is_empty() {
            return;
        }
        let granule = |victim: &Victim| (victim.owner, victim.page / crate::fault::SAMPLING_GRANULE_PAGES);
        // Victims come in the hand's order, so a granule's are next to each other
        // (a wrap-around of the hand splits at most one granule).
        let mut start = 0;
        while start < self.victims.len() {
            let key = granule(&self.victims[start]);
            let end = start + self.victims[start..].iter().take_while(|victim| granule(victim) == key).count();
            if self.victims[start..end].iter().any(|victim| victim.written) {
                for victim in &mut self.victims[start..end] {
                    victim.written = true;
                }
            }
            start = end;
        }
    }

    /// Whether the round has anything to do outside the lock, or to hand over.
    pub fn needs_hand_over(&self) -> bool {
        !self.ranges.is_empty() || self.victims.iter().any(|victim| victim.shadow.is_some())
    }

    pub fn set_zero(&mut self, victim: usize, zero: bool) {
        self.victims[victim].zero = zero;
    }

    pub fn victims(&self) -> usize {
        self.victims.len()
    }
}

/// What the kernel did with a victim's move to its shadow page (`EvictRound::park_done`;
/// `UFFDIO_MOVE` without `ALLOW_SRC_HOLES`, so an empty source is reported, not counted
/// as moved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParkOutcome {
    Moved,
    /// Not moved, still mapped here: shared with a fork's child (`EBUSY`, until the
    /// parent writes it), or any other refusal that leaves the source as it was.
    Busy,
    /// Not moved: something is at the shadow page (`EEXIST`), and the page is mapped
    /// here. (Pages whose shadow page may hold a stale copy are not parked, so this is
    /// not expected.)
    Occupied,
    /// Nothing was mapped here (`ENOENT`): the program's discard zapped it meanwhile.
    Hole,
}

/// How a `UFFDIO_MOVE` failed, as the shell saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveFailure {
    /// `ENOENT`: nothing at the source.
    NoEntry,
    /// `EEXIST`: something at the destination.
    Exists,
    /// Anything else (`EBUSY` for a page shared with a fork's child, `EFAULT` for a
    /// write-protect marker at the source, ...).
    Other,
}

/// What a failed move of a victim to its shadow page did, from where its page is now
/// (`here`: a page is present at its address; `at_shadow`: at its shadow page), which
/// the shell reads from the page map after any failure.
///
/// The error alone does not say: Linux 6.18's `move_pages()` (the batched moves of
/// present pages) keeps a pass's `EAGAIN` (the entry changed under it: a write to a
/// write-protected page, say) after the next pass moved the page, retries the same
/// address and fails it with `EEXIST`, nothing counted as moved
/// (`examples/uffd_move_race`, against a writer; figures:
/// docs/measurements/2026-11-run.md). Since no page is parked while its shadow page may
/// hold anything (`Region::stale_shadow`), a page found at its shadow page, and none
/// here, was moved by this call. Found nowhere, it was zapped before (`Hole`: the
/// program's discard, or a pager bug the settling names).
pub fn park_outcome(failure: MoveFailure, here: bool, at_shadow: bool) -> ParkOutcome {
    match (here, at_shadow) {
        (false, true) => ParkOutcome::Moved,
        (false, false) => ParkOutcome::Hole,
        (true, _) if failure == MoveFailure::Exists => ParkOutcome::Occupied,
        (true, _) => ParkOutcome::Busy,
    }
}

/// What to do after a failed move of a parked page back to its address, under the state
/// lock (so nothing else maps either page meanwhile), from where its page is now (as
/// `park_outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnparkNext {
    /// Moved, though the call failed (`park_outcome`'s kernel bug, the other way).
    Done,
    /// Something is at the address and the page still at the shadow: with asynchronous
    /// write protection, a write-protect marker the move refuses to land on (`EEXIST`);
    /// lift it and move again, once.
    ClearMarker,
    /// Still at the shadow page, refused otherwise (shared with a fork's child): copy it
    /// back, and discard the shadow page.
    Copy,
    /// At neither: its bytes are gone (a pager bug; the shell panics naming the page).
    Gone,
}

/// See [`UnparkNext`]. `retried`: the marker was cleared already.
pub fn unpark_next(failure: MoveFailure, here: bool, at_shadow: bool, retried: bool) -> UnparkNext {
    match (here, at_shadow) {
        (true, false) => UnparkNext::Done,
        (_, false) => UnparkNext::Gone,
        (_, true) if failure == MoveFailure::Exists && !retried => UnparkNext::ClearMarker,
        (_, true) => UnparkNext::Copy,
    }
}

impl PagerCore {
    /// Whether an evictor has pages to evict: the resident set, less what is already on
    /// its way out, is above the low watermark (a batch below the budget), and an out
    /// handle is free. Eviction starts below the budget, as kswapd works between
    /// watermarks, so a fault finds a free page instead of waiting for a write-out; and
    /// it evicts whole batches: evicting one page per fault made every append a single
    /// 4 KiB write, each a device doorbell the faulting reads queue behind (figures:
    /// docs/measurements/2026-11-pager.md).
    ///
    /// Not while swap is full: every dirty victim would be refused, and the evictor would
    /// spin picking them again (it looks again on its timeout, once frees made room).
    fn eviction_wanted(&self) -> bool {
        let low_watermark = self.config.budget_pages - self.config.evict_batch_pages as u64;
        // Pages taken by a discard under way still count as pressure: the eviction's
        // pacing is tuned with them counted.
        let leaving = self.out.writing() + self.drops.dropping_pages() + self.tenants.swap_limited_pages(&self.engine);
        (self.stats.resident_pages.saturating_sub(leaving) > low_watermark || self.any_tenant_over())
            && self.out.free() > 0
            && !self.engine.swap_full()
    }

    /// Whether a fault waiting for room would wait forever: swap is full, and no page is
    /// on its way out (a swap-out, a discard, a round that may drop zero pages).
    pub(crate) fn no_room_can_come(&self) -> bool {
        self.engine.swap_full()
            && self.out.writing() == 0
            && self.drops.is_empty()
            && self.drops.discarding_pages() == 0
            && self.out.evicting() == 0
    }

    /// Owed to sleeping evictors whenever the resident set, the pages in flight or the
    /// free out handles change.
    ///
    /// An evictor asleep because its last round found only held tenants' pages
    /// (`evictor_held_back`) is woken only for pages beside them: a held tenant over its
    /// budget stays over until its allowance catches up, which the evictor's wait times
    /// out to see. (Woken for it, the evictor picked nothing and slept again on nearly
    /// every fault of the tenants beside (a reader's, beside a write-limited writer),
    /// spending CPU for nothing: `scripts/tenants.sh`; figures:
    /// docs/measurements/2026-11-daemon.md.)
    pub(crate) fn wake_evictor(&mut self) {
        if self.threads.evictors_asleep()
            && self.eviction_wanted()
            && (!self.tenants.held_back() || self.picks_beside_held())
        {
            self.threads.wake_evictors();
        }
    }

    /// Whether a round would now find pages to pick beside the tenants the last one held
    /// (`evict_pick`'s choice, with those tenants passed over): a tenant over its budget
    /// and not held, or, with no tenant over, the pager over its low watermark.
    fn picks_beside_held(&self) -> bool {
        self.tenants.picks_beside_held(self.config.evict_batch_pages as u64, &self.engine)
    }

    /// One round is in flight at a time: a victim stays its round's, mapped, from its pick
    /// to its hand-over. With two rounds, a victim taken back by a write could be picked,
    /// written out and discarded by the other round while the first still meant to read
    /// it for its zero check (found by the pager DST), a fault inside the evictor. A
    /// second evictor still discards beside a round.
    pub fn evictor_work(&self) -> EvictorWork {
        if self.discard_wanted() {
            EvictorWork::Discard
        } else if self.eviction_wanted() && !self.rounds.in_flight() {
            EvictorWork::Evict
        } else {
            EvictorWork::Sleep
        }
    }

    /// The last round picked nothing, and tenants past their write limits or at their
    /// swap limits were passed over: the evictor is to sleep rather than pause, so that a
    /// fault wanting room wakes it (`WaitOn::Evictors`' timeout brings it back to see the
    /// allowances).
    pub fn evictor_held_back(&self) -> bool {
        self.tenants.held_back()
    }

    /// An evictor is about to wait: whoever gives it work under the lock wakes it.
    /// `held_back`: it sleeps because its round found only held tenants' pages
    /// (`evictor_held_back`); otherwise it has nothing to do, and what the last round
    /// held no longer narrows who wakes it.
    pub fn evictor_sleeps(&mut self, held_back: bool) {
        debug_assert!(!held_back || self.tenants.held_back());
        if !held_back {
            self.tenants.release_hold();
        }
        self.threads.evictors_sleep();
    }

    /// The I/O thread is about to wait: an eviction that queues appends wakes it.
    pub fn io_sleeps(&mut self) {
        self.threads.io_sleeps();
    }

    /// Actions one hand-over can leave: an unprotect per victim of the largest round.
    pub fn hand_over_actions_max(&self) -> usize {
        ROUND_BATCHES_MAX * self.config.evict_batch_pages
    }

    /// A round's buffers, sized for the largest round: one per evictor thread.
    pub fn evict_round(&mut self) -> EvictRound {
        let batch = self.config.evict_batch_pages;
        EvictRound {
            id: self.rounds.new_id(),
            wanted: batch,
            reads_seen: self.stats.swap_in_reads,
            victims: Vec::with_capacity(ROUND_BATCHES_MAX * batch),
            // A range per victim at most, and per region swept (twice at most) for sampling.
            ranges: Vec::with_capacity(ROUND_BATCHES_MAX * batch + 2 * self.config.regions_max as usize + 2),
            scans: Vec::with_capacity(if self.config.wp_async { ROUND_BATCHES_MAX * batch } else { 0 }),
            protect_first: self.config.wp_async,
            held: Vec::with_capacity(self.tenants.len() as usize),
        }
    }

    /// CLOCK over the address space: the hand sweeps the regions' pages in address
    /// order, clears reference bits and picks unreferenced resident pages (each with an
    /// out handle). The pages to write-protect go into the round's ranges: consecutive
    /// victims with only non-resident pages between them share a range, and one ioctl
    /// covers it (write-protecting an empty PTE does nothing), so one TLB flush serves
    /// many victims even under random access. With reference sampling, the pages whose
    /// bit is cleared are write-protected too (a range then spans the whole sweep of a
    /// region), so their next write faults and sets the bit again. With an inactive
    /// list, the round's writes from its old end go to the engine here.
    ///
    /// Then, outside the lock, the shell protects the ranges and looks for all-zero
    /// victims, and calls `evict_hand_over`. Returns a pause for after the hand-over when
    /// nothing was picked.
    pub fn evict_pick(&mut self, round: &mut EvictRound, now: u64) -> Option<Pause> {
        assert!(!self.rounds.in_flight(), "an eviction round picked while another is in flight");
        round.victims.clear();
        round.ranges.clear();
        round.scans.clear();
        let (writes, mut sweep) = self.evict_pick_sweep(round, now);
        while (sweep.direct_room > 0 || sweep.park_room > 0) && sweep.scanned < sweep.limit {
            if sweep.owner as usize >= self.regions.len() {
                sweep.owner = 0;
                self.sampling.revolution();
            }
            if sweep.page >= self.regions[sweep.owner as usize].pages || sweep.passes_over(&self.regions) {
                sweep.owner += 1;
                sweep.page = 0;
                sweep.open = false;
                sweep.scan_open = false;
                continue;
            }
            // A block with every page `Unmapped` is passed in one step, as the hand
            // would pass each of its pages (counted as looked at, and never past the
            // sweep's limit, so the sweep ends where it would have).
            let next = self.regions[sweep.owner as usize].next_occupied(sweep.page);
            if next > sweep.page {
                let skip = (next - sweep.page).min(sweep.limit - sweep.scanned);
                sweep.open &= !sweep.wp_async;
                sweep.scanned += skip;
                sweep.page += skip;
                continue;
            }
            sweep.scanned += 1;
            self.evict_pick_page(round, &mut sweep);
            sweep.page += 1;
        }
        self.rounds.hand = (sweep.owner, sweep.page);
        self.evict_pick_done(round, sweep, writes, now)
    }

    /// The round's writes from the inactive list's old end, and the sweep that picks the
    /// rest: how many victims it may take in place and to park, which regions it passes
    /// over, and from where the hand starts.
    fn evict_pick_sweep(&mut self, round: &mut EvictRound, now: u64) -> (usize, Sweep) {
        let wp_async = self.config.wp_async;
        let mut wanted = round.wanted.min(self.out.free());
        // With an inactive list, what the round evicts comes from its old end, and the
        // hand refills it; victims are evicted in place (the CLOCK of before) only while
        // the list cannot supply them, and in regions not parked. A round takes a
        // quarter of the list at most: the time a page stays parked is what lets a touch
        // save it (rounds of a whole list's size wrote every parked page at once).
        let writes = if self.config.park_pages > 0 {
            wanted = wanted.min((self.config.park_pages as usize / 4).max(1));
            wanted.min(self.parked.len())
        } else {
            0
        };
        // Asynchronously protected, a victim could be written during its write-out with
        // nothing to stop or tell it: victims are only ever parked then.
        let direct_room = if wp_async { 0 } else { wanted - writes };
        // Tenants over their own budgets are evicted from first (`set_tenant_budget`); the
        // others' pages are passed over meanwhile. A whole round, as for the pager's
        // budget: a tenant is over from a batch under its budget, so a round leaves it at
        // most a batch further under. (Rounds cut to the excess were a few pages each,
        // and each round costs a protection, a TLB flush and a discard, a round trip to a
        // served process's agent: two programs of a daemon then loaded their data at a
        // crawl; figures: docs/measurements/2026-11-daemon.md.)
        let tenants_first = self.any_tenant_over();
        let over: Vec<bool> = if tenants_first {
            self.regions.iter().map(|region| region.live && self.tenant_over(region.tenant)).collect()
        } else {
            Vec::new()
        };
        // Tenants past their share of the device's writes are passed over until their
        // allowance catches up (`src/write_limit.rs`), and those at their swap limits.
        // (Not the inactive list's writes: parking is off under the daemon.)
        let mut held = std::mem::take(&mut round.held);
        let any_held = self.tenants.find_held(&mut held, &self.engine, now);
        let (owner, page) = self.rounds.hand;
        let mut sweep = Sweep {
            direct_room,
            park_room: 0,
            owner,
            page,
            scanned: 0,
            // Two sweeps at most: the first may only clear reference bits. (Counted
            // before the tenants' pass over: a sweep of only theirs ends sooner.)
            limit: 2 * self.regions.iter().filter(|r| r.live).map(|r| r.pages).sum::<u64>(),
            open: false,
            scan_open: false,
            // Asynchronously, writes are seen by a scan that only reports: a page the
            // hand clears must be protected again, or it would read as written ever
            // after (and, kept for it, never be evicted: the pager DST's seeds without
            // sampling hung so).
            sampling: self.config.reference_sampling || wp_async,
            wp_async,
            tenants_first,
            over,
            any_held,
            held,
        };
        // With every region passed over, the hand would go round for ever.
        let none_to_pick = (0..self.regions.len()).all(|owner| sweep.region_passed_over(&self.regions, owner));
        if none_to_pick {
            sweep.direct_room = 0;
        }
        let capacity = round.victims.capacity();
        let parks = (0..self.regions.len() as u32).any(|owner| self.parks_in(owner));
        if parks && !none_to_pick {
            sweep.park_room = ((self.config.park_pages + writes as u64).saturating_sub(self.parked.len() as u64)
                as usize)
                .min(capacity - sweep.direct_room);
        }
        (writes, sweep)
    }

    /// The hand at a page of a region the round sweeps: its bit cleared, picked to park
    /// or to evict in place, or passed by; and whether the round's open range (and scan
    /// span) may run over it.
    fn evict_pick_page(&mut self, round: &mut EvictRound, sweep: &mut Sweep) {
        let (owner, page) = (sweep.owner, sweep.page);
        let region = &self.regions[owner as usize];
        let address = region.base + page * PAGE_BYTES as u64;
        let parkable = self.parks_in(owner) && !region.stale_shadow.get(page);
        match self.state(owner, page) {
            // Already write-protected: a sampling range may run over it.
            PageState::Evicting { .. } | PageState::Writing => sweep.open &= sweep.sampling,
            // Not this revolution's to look at: its bit stays, and the hand passes it. In
            // the sweep's first revolution only: when that found no victim, every page
            // is looked at.
            PageState::Referenced
                if sweep.sampling
                    && !sweep.wp_async
                    && sweep.scanned < sweep.limit / 2
                    && !self.sampling.looks_at(page) =>
            {
                self.stats.sampling_deferred += 1;
                sweep.open = false;
            }
            PageState::Referenced => {
                self.set_state(owner, page, PageState::Resident);
                // A page with passes left is kept for them, written or not: a write
                // fault to sample it would tell nothing (a victim is protected when
                // picked, whatever its sampling).
                let hot = self.config.refault_passes
                    && !sweep.wp_async
                    && crate::refault::has_passes(&self.regions[owner as usize].heat, page);
                if sweep.sampling && !hot {
                    protect_page(&mut round.ranges, &mut sweep.open, address);
                    if !sweep.wp_async {
                        self.sampling.looked_at();
                    }
                } else {
                    sweep.open = false;
                }
            }
            // A page that came back soon after its eviction spends a pass, in the sweep's
            // first revolution only: a budget of such pages still yields victims.
            PageState::Resident
                if (parkable && sweep.park_room > 0 || sweep.direct_room > 0)
                    && self.config.refault_passes
                    && sweep.scanned < sweep.limit / 2
                    && crate::refault::spend_pass(&mut self.regions[owner as usize].heat, page) =>
            {
                self.stats.refault_passes_spent += 1;
                sweep.open = false;
            }
            PageState::Resident if parkable && sweep.park_room > 0 => self.pick_to_park(round, sweep, address),
            PageState::Resident if sweep.direct_room > 0 => self.pick_in_place(round, sweep, address),
            // Passed over: the round wants none of its kind.
            PageState::Resident => sweep.open = false,
            // A lost page's marker may have been mapped over by the program (a handler of
            // the SIGBUS): no range spans it, or its ioctl would fail. Nor one the
            // program discarded: what is left there is not the pager's. Nor a parked
            // one: nothing is mapped there, or it is on its way.
            PageState::Poisoned
            | PageState::Removed
            | PageState::Parking { .. }
            | PageState::ParkingRemoved
            | PageState::Parked
            | PageState::WritingParked => sweep.open = false,
            // A range may run over them (protecting an empty entry does nothing), but for
            // asynchronous write protection: the kernel then turns on `WP_UNPOPULATED`,
            // and protecting an empty entry leaves a marker there, which a zero page or a
            // move back cannot land on.
            PageState::Unmapped | PageState::Dropping => sweep.open &= !sweep.wp_async,
        }
    }

    /// Picks the hand's page, at `address`, to be parked (moved outside the lock). With
    /// asynchronous write protection its stretch of the region is scanned first.
    fn pick_to_park(&mut self, round: &mut EvictRound, sweep: &mut Sweep, address: u64) {
        let (owner, page) = (sweep.owner, sweep.page);
        sweep.park_room -= 1;
        sweep.open = false;
        if sweep.wp_async {
            let index = round.victims.len() as u32;
            let end = address + PAGE_BYTES as u64;
            match round.scans.last_mut() {
                Some(span) if sweep.scan_open => {
                    span.end = end;
                    span.victims_end = index + 1;
                }
                _ => round.scans.push(ScanSpan { start: address, end, first: index, victims_end: index + 1 }),
            }
            sweep.scan_open = true;
        }
        let cached = sweep.wp_async && matches!(self.engine.page_state(owner, page), Ok(EnginePage::SwapCached { .. }));
        self.set_state(owner, page, PageState::Parking { by: round.id });
        let generation = self.regions[owner as usize].generation;
        let shadow = Some(self.shadow_address(owner, page));
        round.victims.push(Victim { shadow, cached, ..Victim::new(owner, page, address, generation) });
    }

    /// Picks the hand's page, at `address`, to be evicted where it is: write-protected by
    /// the round's open range, with an out handle.
    fn pick_in_place(&mut self, round: &mut EvictRound, sweep: &mut Sweep, address: u64) {
        let (owner, page) = (sweep.owner, sweep.page);
        sweep.direct_room -= 1;
        self.stats.tenant_victims += sweep.tenants_first as u64;
        self.set_state(owner, page, PageState::Evicting { by: round.id });
        protect_page(&mut round.ranges, &mut sweep.open, address);
        let handle = Some(self.out.take_for_victim());
        let range = Some(round.ranges.len() as u32 - 1);
        let generation = self.regions[owner as usize].generation;
        round.victims.push(Victim { handle, range, ..Victim::new(owner, page, address, generation) });
    }

    /// The sweep is over: the round's writes from the inactive list go to the engine,
    /// and if nothing was picked, the evictor pauses, or sleeps while tenants held it
    /// back.
    fn evict_pick_done(&mut self, round: &mut EvictRound, sweep: Sweep, writes: usize, now: u64) -> Option<Pause> {
        // The parked pages the round writes out go to the engine now, oldest first, after
        // the victims took their handles: they are out of the program's reach already, so
        // their appends need not wait for the round's moves (waiting for them at the
        // hand-over, faults waited for room far more often: `bench --workload
        // anon-r-rand`, 4 threads on one CPU; figures: docs/measurements/2026-11-pager.md).
        if writes > 0 {
            self.write_parked(writes, now);
            self.after_engine();
            self.threads.wake_io();
        }
        // With nothing to do outside the lock there is no hand-over: the round ends here.
        self.rounds.in_flight = round.needs_hand_over();
        let any_held = sweep.any_held;
        round.held = sweep.held;
        let nothing = round.victims.is_empty() && writes == 0;
        // Nothing picked while tenants are held: the evictor sleeps (`evictor_held_back`)
        // until woken or its wait's timeout.
        if nothing && any_held {
            self.tenants.hold_back(&round.held);
        } else {
            self.tenants.release_hold();
        }
        (nothing && !any_held).then_some(Pause::Micros(NOTHING_PICKED_PAUSE_US))
    }

    /// The round's moves are done (outside the lock): settles each victim to park, before
    /// anything reads or protects victims. Moved: parked (on the inactive list). Busy
    /// (shared with a fork's child): evicted in place as the CLOCK's victims are,
    /// write-protected by a range of its own. Occupied (something at its shadow page,
    /// which `Region::stale_shadow` rules out): kept, resident. Discarded by the program
    /// meanwhile (`ParkingRemoved`): what the move took, if anything, is the old data
    /// and goes; the page is the program's zero page. Until now faults on these pages
    /// waited: where their bytes are is known from here on.
    ///
    /// A `Parking` page whose address held nothing (`Hole`) had lost its data before
    /// the move (the pager believed it mapped): that is a broken invariant, and it
    /// panics naming the page rather than park nothing or read an empty page (which
    /// hung the evictor on its own fault).
    ///
    /// With asynchronous write protection, a victim the scan found written was not moved:
    /// it is referenced (as a write fault would have made it), and one refused as shared
    /// with a fork's child is kept (nothing may write out a page the program can write);
    /// a moved swap-cached one keeps its slot only if its digest is still the slot's.
    pub fn park_settle(&mut self, round: &mut EvictRound, now: u64, actions: &mut Actions) {
        for victim in round.victims.iter_mut() {
            if victim.shadow.is_none() || !self.same_region(victim.owner, victim.generation) {
                continue;
            }
            let (owner, page) = (victim.owner, victim.page);
            if victim.written {
                match self.state(owner, page) {
                    PageState::ParkingRemoved => self.set_state(owner, page, PageState::Removed),
                    PageState::Parking { by } if by == round.id => {
                        self.stats.victims_written += 1;
                        self.set_state(owner, page, PageState::Referenced);
                        self.reference_granule(owner, page);
                    }
                    other => unreachable!("{owner}:{page}: a victim found written became {other:?} before settling"),
                }
                victim.settled = true;
                continue;
            }
            let moved =
                victim.moved.unwrap_or_else(|| panic!("{owner}:{page}: a victim to park settled before its move"));
            match (self.state(owner, page), moved) {
                (PageState::ParkingRemoved, _) => {
                    if moved == ParkOutcome::Moved {
                        self.drop_shadow_copy(owner, page);
                    }
                    self.set_state(owner, page, PageState::Removed);
                    victim.settled = true;
                }
                (PageState::Parking { by }, ParkOutcome::Moved) if by == round.id => {
                    if self.config.wp_async {
                        self.verify_swap_cache(owner, page, victim.digest, now);
                    }
                    self.set_state(owner, page, PageState::Parked);
                    self.parked.push_back(crate::park::ParkedPage { owner, page });
                    self.stats.pages_parked += 1;
                    victim.settled = true;
                }
                (PageState::Parking { by }, ParkOutcome::Busy) if by == round.id && self.config.wp_async => {
                    // Nothing may write it out where the program can write it: kept, and
                    // made the parent's alone, so the hand's next pass can park it. (Left
                    // shared, a page the program only reads stayed unmovable after the
                    // child was gone: the budget could fill with them.)
                    self.stats.park_refused += 1;
                    self.set_state(owner, page, PageState::Resident);
                    actions.push(Action::Unshare { address: victim.address });
                    victim.settled = true;
                }
                (PageState::Parking { by }, ParkOutcome::Busy) if by == round.id => {
                    self.stats.park_refused += 1;
                    self.set_state(owner, page, PageState::Evicting { by });
                    victim.shadow = None;
                    victim.range = Some(round.ranges.len() as u32);
                    let end = victim.address + PAGE_BYTES as u64;
                    round.ranges.push(ProtectRange { start: victim.address, end, protected: false });
                }
                (PageState::Parking { by }, ParkOutcome::Occupied) if by == round.id => {
                    self.stats.park_occupied += 1;
                    self.set_state(owner, page, PageState::Resident);
                    victim.settled = true;
                }
                (PageState::Parking { by }, ParkOutcome::Hole) if by == round.id => panic!(
                    "page {owner}:{page} at {:#x}: nothing was mapped there when it was parked, though the pager \
                     had it resident (its data is gone; a pager bug)",
                    victim.address
                ),
                (other, _) => {
                    unreachable!("{owner}:{page}: a victim to park became {other:?} before its move was settled")
                }
            }
        }
    }

    /// A written victim (asynchronous write protection) references the resident pages of
    /// its sampling granule, as a write fault does in the synchronous mode.
    fn reference_granule(&mut self, owner: u32, page: u64) {
        let granule = crate::fault::SAMPLING_GRANULE_PAGES;
        let first = page - page % granule;
        for next in first..(first + granule).min(self.regions[owner as usize].pages) {
            if self.state(owner, next) == PageState::Resident {
                self.set_state(owner, next, PageState::Referenced);
            }
        }
    }

    /// A parked page whose slot is its swap cache (asynchronous write protection): the
    /// program may have written it since it was read back, with no fault to say so, so
    /// the slot stays its copy only if the parked bytes' digest is the one the slot was
    /// written with. Otherwise the engine learns it is dirty, as from a write fault.
    fn verify_swap_cache(&mut self, owner: u32, page: u64, digest: Digest, now: u64) {
        if !matches!(self.engine.page_state(owner, page), Ok(EnginePage::SwapCached { .. })) {
            return;
        }
        let slot_digest = self.regions[owner as usize].digests.get(page);
        // (0 is no digest: a victim not cached when picked, or a slot never digested.)
        if digest == 0 || digest != slot_digest {
            self.stats.swap_cache_digest_dirtied += 1;
            self.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
            self.after_engine();
        }
    }

    /// Hands the victims not written since their pick to the engine (the I/O thread's
    /// appends then read them where they are); keeps the others. Also sizes the next
    /// round: up to `ROUND_BATCHES_MAX` batches while victims are contiguous and nothing
    /// is swapped in (sequential eviction alone), where a larger round costs no more
    /// write-protect ioctls and makes appends larger, which swap out faster (anon-w-seq).
    /// Otherwise rounds stay at one batch: larger appends delay the swap-in reads queued
    /// behind them (a higher fault p99), and each round holds the state lock for its
    /// hand-over (figures: docs/measurements/2026-11-pager.md).
    pub fn evict_hand_over(&mut self, round: &mut EvictRound, now: u64, actions: &mut Actions) {
        assert!(self.rounds.in_flight, "a hand-over without a round in flight");
        self.rounds.in_flight = false;
        for index in 0..round.victims.len() {
            let Victim { owner, page, address, generation, handle, range, zero, shadow, settled, .. } =
                round.victims[index];
            if handle.is_some() {
                self.out.victim_handed_over();
            }
            if !self.same_region(owner, generation) {
                if let Some(handle) = handle {
                    self.out.give_back(handle);
                }
                continue;
            }
            if settled {
                continue;
            }
            assert!(shadow.is_none(), "{owner}:{page}: a victim to park handed over before its move was settled");
            let state = self.state(owner, page);
            let protected = range.is_some_and(|range| round.ranges[range as usize].protected);
            // Written (and unprotected by its fault) since it was picked, perhaps picked
            // again by another round since; or (never for a live region) not protected;
            // or (a refused page to park) no handle is free: keep it.
            let written = state != (PageState::Evicting { by: round.id });
            let handle = match handle {
                Some(handle) => Some(handle),
                None if !written && protected => self.out.take(),
                None => None,
            };
            if written || !protected || handle.is_none() {
                if let Some(handle) = handle {
                    self.out.give_back(handle);
                }
                if written {
                    // (A victim the program discarded meanwhile was not written: it is
                    // not the pager's any more, and never handed over.)
                    self.stats.evictions_raced += (state != PageState::Removed) as u64;
                } else {
                    self.set_state(owner, page, PageState::Resident);
                    self.unprotect_if_dirty(owner, page, actions);
                }
                continue;
            }
            let handle = handle.expect("checked above");
            if zero {
                self.out.give_back(handle);
                self.engine.free(owner, page..page + 1, now).expect("freeing a zero page");
                self.stats.swap_outs_zero += 1;
                self.drop_page(owner, page, DropKind::Mapped);
                continue;
            }
            match self.engine.swap_out(owner, page, handle, now) {
                Ok(_) => {
                    self.set_state(owner, page, PageState::Writing);
                    self.out.writing_started(handle, OutPage { owner, generation, page, address, parked: false });
                }
                Err(SwapOutError::Backpressure) => {
                    self.stats.backpressure += 1;
                    self.out.give_back(handle);
                    self.set_state(owner, page, PageState::Resident);
                    self.unprotect_if_dirty(owner, page, actions);
                }
                Err(error) => panic!("swap-out of resident page {owner}:{page}: {error}"),
            }
        }
        self.after_engine();
        self.threads.wake_io();
        if self.no_room_can_come() {
            // Faults waiting for room wait in vain: they go past the budget now.
            self.threads.wake_room();
        }
        self.assert_counts();
        if round.victims.is_empty() {
            return;
        }
        let first = round.victims[0];
        let last = round.victims[round.victims.len() - 1];
        // (The hand may have wrapped around: then they are not contiguous.)
        let contiguous =
            first.owner == last.owner && last.page.checked_sub(first.page) == Some(round.victims.len() as u64 - 1);
        let reads = self.stats.swap_in_reads;
        let no_reads = reads == round.reads_seen;
        round.reads_seen = reads;
        let batch = self.config.evict_batch_pages;
        round.wanted = if contiguous && no_reads && round.victims.len() == round.wanted {
            (2 * round.wanted).min(ROUND_BATCHES_MAX * batch)
        } else {
            batch
        };
    }

    /// A page kept resident after its eviction failed loses the protection again if it
    /// is dirty; a clean swap-cached one keeps it (its first write must reach the engine).
    fn unprotect_if_dirty(&mut self, owner: u32, page: u64, actions: &mut Actions) {
        let clean = matches!(self.engine.page_state(owner, page), Ok(EnginePage::SwapCached { .. }));
        if !clean {
            actions.push(Action::Unprotect { address: self.page_address(owner, page), pages: 1 });
        }
    }

    /// their pages on, losses are counted. Then wakes whoever the changes concern: an
    /// evictor for pages to discard or to evict, and faults waiting for room (the first
    /// of them or an evictor to take the pages discards them).
    pub(crate) fn after_engine(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            match event {
                Event::SwapOutDone { owner, page, buf, outcome, .. } => self.swap_out_done(owner, page, buf, outcome),
                Event::Lost { .. } => self.stats.lost_pages += 1,
                Event::Remapped { .. } | Event::RecordRejected { .. } | Event::ZoneRetired { .. } => {}
            }
        }
        if !self.drops.is_empty() {
            self.threads.wake_room();
            self.threads.wake_evictors();
        }
        self.wake_evictor();
    }

    /// One per swap-out the engine took (a freed page's too, at its append's completion):
    /// no append reads the page any more, so its handle is free.
    fn swap_out_done(&mut self, owner: u32, page: u64, handle: u64, outcome: SwapOutOutcome) {
        // The region it was taken from, not a later one under the same owner id (whose
        // page of that index may have a swap-out of its own).
        let OutPage { generation, parked, .. } = self.out.writing_done(handle);
        // Its region was freed (the shadow went with it).
        if !self.same_region(owner, generation) {
            return;
        }
        // Dropped: the program discarded the page during its swap-out (`discard_range`
        // made it Removed; it may have been mapped again since).
        if outcome == SwapOutOutcome::Dropped {
            if parked {
                self.drop_shadow_copy(owner, page);
            }
            return;
        }
        let state = self.state(owner, page);
        if matches!(outcome, SwapOutOutcome::Swapped { .. }) {
            self.count_tenant_traffic(owner, 1, 0);
        }
        match (state, outcome) {
            (PageState::Writing, SwapOutOutcome::Swapped { .. }) => self.drop_page(owner, page, DropKind::Mapped),
            (PageState::WritingParked, SwapOutOutcome::Swapped { .. }) => self.drop_page(owner, page, DropKind::Parked),
            (PageState::Writing, SwapOutOutcome::AbortedDirty) => {
                // Written during its append: the write fault lifted the protection (or a
                // touch copied the parked page back, and its shadow copy goes).
                self.stats.swap_outs_aborted_dirty += 1;
                self.set_state(owner, page, PageState::Referenced);
                if parked {
                    self.drop_shadow_copy(owner, page);
                }
            }
            // The append failed: kept, still write-protected, as a sampled page is (its
            // next write faults and lifts the protection; failures are rare). A parked
            // page copied back during it leaves a stale copy at the shadow: it goes, or
            // every later move there would be refused.
            (PageState::Writing, SwapOutOutcome::Failed) => {
                self.set_state(owner, page, PageState::Resident);
                if parked {
                    self.drop_shadow_copy(owner, page);
                }
            }
            // Back on the inactive list, at its young end.
            (PageState::WritingParked, SwapOutOutcome::Failed) => {
                self.set_state(owner, page, PageState::Parked);
                self.parked.push_back(crate::park::ParkedPage { owner, page });
            }
            (state, outcome) => panic!("{owner}:{page} completed a swap-out ({outcome:?}) as {state:?}"),
        }
    }
}

/// Adds the page at `address` to the open range, or opens a new one.
fn protect_page(ranges: &mut Vec<ProtectRange>, open: &mut bool, address: u64) {
    let end = address + PAGE_BYTES as u64;
    match ranges.last_mut() {
        Some(range) if *open => range.end = end,
        _ => {
            ranges.push(ProtectRange { start: address, end, protected: false });
            *open = true;
        }
    }
}
