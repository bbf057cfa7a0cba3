//! Discards: pages written out (or all zero) leave memory by `MADV_DONTNEED` outside the
//! state lock, in batches. A page dropped by the pager stays mapped, `Dropping`, counted
//! resident, until the batch that takes it is done; a stale copy at a shadow page goes
//! the same way, counted nowhere. A served process's pages are dropped by its agent,
//! which may answer late (`DropDelay`), or say it dropped pages it did not
//! (`PagerCore::take_false_drops`).

use crate::{PageState, PagerCore, PAGE_BYTES};

/// A page awaiting its discard.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dropping {
    pub(crate) owner: u32,
    pub(crate) page: u64,
    /// The region's generation when the page was dropped: a region freed meanwhile has
    /// no mapping left to discard (and its addresses may belong to a new region).
    pub(crate) generation: u64,
    pub(crate) kind: DropKind,
}

/// What a discard zaps for a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropKind {
    /// The page at its own address (`Dropping`, counted resident until discarded).
    Mapped,
    /// Its shadow page: written out from there (`Dropping`, counted resident).
    Parked,
    /// A stale copy at its shadow address, the page itself being elsewhere (copied back
    /// during its swap-out, or discarded by the program): not counted, no state change.
    ShadowCopy,
}

/// An address range laid out as `struct iovec`, so the shell can hand a batch of them to
/// `process_madvise` as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct AddressRange {
    pub start: usize,
    pub len: usize,
}

/// Pages taken for a discard, and their ranges (sorted, merged). Allocated once per
/// discarding thread (`PagerCore::discard_batch`).
pub struct DiscardBatch {
    dropping: Vec<Dropping>,
    addresses: Vec<u64>,
    ranges: Vec<AddressRange>,
    /// Ranges the shell did not drop by its return (`delay`), by index.
    delayed: Vec<(usize, DropDelay)>,
    /// The same, by region, as `discard_done` finds them.
    delayed_owners: Vec<(u32, DropDelay)>,
}

/// Why a discard's pages of one process were not dropped by the shell's return. Only a
/// served process's pages can be (`docs/daemon.md`): its agent thread drops them, and it
/// may be slow to answer or not answer for a long time (stopped by SIGSTOP or a
/// debugger, held by a fork), and the pager must not wait for it meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropDelay {
    /// Asked, not answered yet: the pages stay `Dropping` (faults on them wait, and the
    /// agent zaps them before it answers) until the answer (`late_discard_done`).
    Late,
    /// Not asked: the process's agent owes the answer to an earlier discard. They await
    /// the next.
    Unsent,
}

impl DiscardBatch {
    /// What to discard (`MADV_DONTNEED`): pages of regions still mapped; pages of freed
    /// regions are skipped, their mappings gone.
    pub fn ranges(&self) -> &[AddressRange] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.dropping.is_empty()
    }

    /// The shell did not drop `ranges()[range]` (yet): every range of a region must be
    /// said alike.
    pub fn delay(&mut self, range: usize, delay: DropDelay) {
        debug_assert!(range < self.ranges.len());
        self.delayed.push((range, delay));
    }
}

/// The pages awaiting a discard, those a discard took, and the agents that owe answers.
pub(crate) struct Drops {
    /// Pages swapped out (or zero) awaiting their discard; still counted resident (but
    /// for `DropKind::ShadowCopy` entries, `copies` of them).
    to_drop: Vec<Dropping>,
    copies: u64,
    /// Dropped pages taken by a discard not yet done; still counted resident. Late
    /// drops' pages among them.
    discarding: u64,
    /// Pages of discards asked of processes' agents that did not answer in time
    /// (`DropDelay::Late`): `Dropping` until the answer (`late_discard_done`).
    late: Vec<Dropping>,
    /// The regions whose agents owe that answer: asked nothing more until they give it.
    late_owners: Vec<u32>,
    /// Regions found with pages not dropped as their process said (`take_false_drops`).
    false_drops: Vec<u32>,
}

impl Drops {
    /// Room for `pages` pages awaiting their discard and `regions_max` regions late.
    pub(crate) fn new(pages: usize, regions_max: u32) -> Drops {
        Drops {
            to_drop: Vec::with_capacity(pages),
            copies: 0,
            discarding: 0,
            late: Vec::with_capacity(pages),
            late_owners: Vec::with_capacity(regions_max as usize),
            false_drops: Vec::new(),
        }
    }

    /// A page (or a stale shadow copy) awaits its discard.
    fn push(&mut self, dropping: Dropping) {
        self.copies += (dropping.kind == DropKind::ShadowCopy) as u64;
        self.to_drop.push(dropping);
    }

    /// Nothing awaits a discard (taken or not).
    pub(crate) fn is_empty(&self) -> bool {
        self.to_drop.is_empty()
    }

    /// Entries awaiting a discard, shadow copies included.
    pub(crate) fn waiting(&self) -> usize {
        self.to_drop.len()
    }

    /// Pages awaiting their discard that still count as resident.
    pub(crate) fn dropping_pages(&self) -> u64 {
        self.to_drop.len() as u64 - self.copies
    }

    /// Pages taken by discards not yet done (still counted resident).
    pub(crate) fn discarding_pages(&self) -> u64 {
        self.discarding
    }

    /// Whether pages await a discard that may be asked now: some not of a region whose
    /// agent owes an answer (`DropDelay::Late`).
    pub(crate) fn wanted(&self) -> bool {
        if self.late_owners.is_empty() {
            return !self.to_drop.is_empty();
        }
        self.to_drop.iter().any(|dropping| !self.late_owners.contains(&dropping.owner))
    }

    /// Whether region `owner`'s agent owes the answer to a discard.
    pub(crate) fn is_late(&self, owner: u32) -> bool {
        self.late_owners.contains(&owner)
    }

    /// Moves what awaits a discard and may be asked now into `dropping` (a region whose
    /// agent owes an answer is asked nothing more until it gives it: its pages stay),
    /// counted as being discarded but for the shadow copies. False if nothing was taken.
    fn take(&mut self, dropping: &mut Vec<Dropping>) -> bool {
        if self.to_drop.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.to_drop, dropping);
        if !self.late_owners.is_empty() {
            let mut index = 0;
            while index < dropping.len() {
                if self.late_owners.contains(&dropping[index].owner) {
                    self.to_drop.push(dropping.swap_remove(index));
                } else {
                    index += 1;
                }
            }
            if dropping.is_empty() {
                return false;
            }
        }
        let copies = dropping.iter().filter(|dropping| dropping.kind == DropKind::ShadowCopy).count() as u64;
        self.copies -= copies;
        self.discarding += dropping.len() as u64 - copies;
        true
    }

    /// A page a discard took was not asked (`DropDelay::Unsent`): it awaits the next.
    fn not_sent(&mut self, dropping: Dropping) {
        if dropping.kind != DropKind::ShadowCopy {
            self.discarding -= 1;
        }
        self.push(dropping);
    }

    /// A page a discard took awaits its agent's answer (still counted as discarding).
    fn answer_owed(&mut self, dropping: Dropping) {
        self.late.push(dropping);
    }

    /// Region `owner`'s agent is late to answer; false if it already was.
    fn late_region(&mut self, owner: u32) -> bool {
        if self.late_owners.contains(&owner) {
            return false;
        }
        self.late_owners.push(owner);
        true
    }

    /// The next of `owner`'s pages awaiting its agent's answer, from `*index` on.
    fn take_late(&mut self, owner: u32, index: &mut usize) -> Option<Dropping> {
        while *index < self.late.len() {
            if self.late[*index].owner == owner {
                return Some(self.late.swap_remove(*index));
            }
            *index += 1;
        }
        None
    }

    /// Region `owner`'s agent answered (or its region is gone): it may be asked again.
    fn answered(&mut self, owner: u32) {
        self.late_owners.retain(|&late| late != owner);
    }

    /// The regions whose agents owe an answer.
    fn late_owners(&self) -> &[u32] {
        &self.late_owners
    }

    /// `pages` taken by discards are gone.
    fn discarded(&mut self, pages: u64) {
        self.discarding -= pages;
    }

    /// Region `owner` found with pages not dropped as its process said.
    pub(crate) fn false_drop(&mut self, owner: u32) {
        self.false_drops.push(owner);
    }

    /// The regions found with pages not dropped, since the last call.
    fn take_false_drops(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.false_drops)
    }

    /// Panics if the count of shadow copies disagrees with the entries.
    pub(crate) fn check(&self) {
        let copies = self.to_drop.iter().filter(|dropping| dropping.kind == DropKind::ShadowCopy).count() as u64;
        assert_eq!(copies, self.copies, "shadow copies awaiting their discard");
    }
}

impl PagerCore {
    /// No longer resident for the pager, but mapped (at its address, or its shadow's)
    /// until a discard; faults on it wait for that.
    pub(crate) fn drop_page(&mut self, owner: u32, page: u64, kind: DropKind) {
        debug_assert!(kind != DropKind::ShadowCopy);
        self.set_state(owner, page, PageState::Dropping);
        let generation = self.regions[owner as usize].generation;
        self.drops.push(Dropping { owner, page, generation, kind });
    }

    /// A stale copy of the page at its shadow address goes with the next discard; the
    /// page itself is elsewhere (copied back, or discarded by the program). Until that
    /// discard a move there is refused (`EEXIST`): the page is then evicted in place.
    pub(crate) fn drop_shadow_copy(&mut self, owner: u32, page: u64) {
        self.regions[owner as usize].stale_shadow.set(page, true);
        let generation = self.regions[owner as usize].generation;
        self.drops.push(Dropping { owner, page, generation, kind: DropKind::ShadowCopy });
    }

    /// Buffers for one discarding thread.
    pub fn discard_batch(&self) -> DiscardBatch {
        // Every page between its pick and its swap-out's completion, and the shadow
        // copies of the whole inactive list (a discard of the program's over it).
        let pages = self.out_handles() + self.config.park_pages as usize;
        DiscardBatch {
            dropping: Vec::with_capacity(pages),
            addresses: Vec::with_capacity(pages),
            ranges: Vec::with_capacity(pages),
            delayed: Vec::with_capacity(pages),
            delayed_owners: Vec::with_capacity(self.config.regions_max as usize),
        }
    }

    /// Whether pages await a discard that may be asked now: some not of a region whose
    /// agent owes an answer (`DropDelay::Late`).
    pub(crate) fn discard_wanted(&self) -> bool {
        self.drops.wanted()
    }

    /// The regions whose agents owe the answer to a discard (`DropDelay::Late`).
    pub fn late_owners(&self) -> &[u32] {
        self.drops.late_owners()
    }

    /// The regions whose process said it dropped pages it did not (found by the write
    /// faults they raise, `Wakeups::false_drops`): only a served process's agent can, and
    /// that process is to be let go.
    pub fn take_false_drops(&mut self) -> Vec<u32> {
        self.drops.take_false_drops()
    }

    /// Takes the pages awaiting their discard; the shell discards `batch.ranges()`
    /// outside the state lock (`MADV_DONTNEED`, a cost per page and a TLB flush per
    /// batch, which faults would otherwise wait behind; figures:
    /// docs/measurements/2026-11-pager.md) while holding `mappings`, then calls
    /// `discard_done`. False when there was nothing to take.
    pub fn discard_take(&mut self, batch: &mut DiscardBatch) -> bool {
        assert!(batch.dropping.is_empty(), "a discard batch taken twice");
        if !self.drops.take(&mut batch.dropping) {
            return false;
        }
        batch.addresses.clear();
        for dropping in &batch.dropping {
            if self.same_region(dropping.owner, dropping.generation) {
                batch.addresses.push(match dropping.kind {
                    DropKind::Mapped => self.page_address(dropping.owner, dropping.page),
                    DropKind::Parked | DropKind::ShadowCopy => self.shadow_address(dropping.owner, dropping.page),
                });
            }
        }
        batch.addresses.sort_unstable();
        batch.ranges.clear();
        let mut index = 0;
        while index < batch.addresses.len() {
            let start = batch.addresses[index];
            let mut end = start + PAGE_BYTES as u64;
            index += 1;
            while index < batch.addresses.len() && batch.addresses[index] == end {
                end += PAGE_BYTES as u64;
                index += 1;
            }
            batch.ranges.push(AddressRange { start: start as usize, len: (end - start) as usize });
        }
        true
    }

    /// The batch is discarded: its pages are unmapped, and leave the resident set.
    /// Returns how many pages it held.
    ///
    /// The pages of regions the shell delayed (`DiscardBatch::delay`) are not: those
    /// asked wait for their agent's answer, those not asked for the next discard.
    pub fn discard_done(&mut self, batch: &mut DiscardBatch) -> usize {
        batch.delayed_owners.clear();
        for index in 0..batch.delayed.len() {
            let (range, delay) = batch.delayed[index];
            // (A region gone meanwhile: its pages are dropped below, as any freed region's.)
            let Some((owner, _)) = self.locate(batch.ranges[range].start as u64) else { continue };
            match batch.delayed_owners.iter().find(|&&(delayed, _)| delayed == owner) {
                Some(&(_, said)) => assert_eq!(said, delay, "region {owner}'s ranges delayed unlike"),
                None => batch.delayed_owners.push((owner, delay)),
            }
        }
        batch.delayed.clear();
        let mut pages = 0;
        for index in 0..batch.dropping.len() {
            let dropping = batch.dropping[index];
            let delay = batch
                .delayed_owners
                .iter()
                .find(|&&(owner, _)| owner == dropping.owner && self.same_region(owner, dropping.generation))
                .map(|&(_, delay)| delay);
            match delay {
                None => pages += self.dropped(dropping),
                // Still counted among the pages being discarded, until the answer.
                Some(DropDelay::Late) => self.drops.answer_owed(dropping),
                Some(DropDelay::Unsent) => self.drops.not_sent(dropping),
            }
        }
        for index in 0..batch.delayed_owners.len() {
            let (owner, delay) = batch.delayed_owners[index];
            if delay == DropDelay::Late && self.drops.late_region(owner) {
                self.stats.late_discards += 1;
            }
        }
        batch.dropping.clear();
        self.discarded(pages)
    }

    /// Region `owner`'s agent answered its late discard (`DropDelay::Late`), or its
    /// region is gone: its pages there are dropped, and it may be asked again.
    pub fn late_discard_done(&mut self, owner: u32) -> usize {
        let mut pages = 0;
        let mut index = 0;
        while let Some(dropping) = self.drops.take_late(owner, &mut index) {
            pages += self.dropped(dropping);
        }
        self.drops.answered(owner);
        self.discarded(pages)
    }

    /// A page awaiting its discard is gone from its mapping: 1 if it counted resident.
    fn dropped(&mut self, Dropping { owner, page, generation, kind }: Dropping) -> usize {
        if kind == DropKind::ShadowCopy {
            if self.same_region(owner, generation) {
                self.regions[owner as usize].stale_shadow.set(page, false);
            }
            return 0;
        }
        if self.same_region(owner, generation) {
            self.set_state(owner, page, PageState::Unmapped);
        }
        1
    }

    /// `pages` being discarded are gone: they leave the resident set.
    fn discarded(&mut self, pages: usize) -> usize {
        // Every dropped page was still counted resident, a freed region's too
        // (`region_remove` subtracts only resident pages).
        self.stats.resident_pages -= pages as u64;
        self.drops.discarded(pages as u64);
        self.stats.pages_discarded += pages as u64;
        self.threads.wake_room();
        self.wake_evictor();
        self.assert_counts();
        pages
    }
}
