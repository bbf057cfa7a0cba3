//! What a paged program does to its own memory beyond reading and writing it: discards
//! (`MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`, which userfaultfd reports as REMOVE
//! events) and `fork`, whose child must see the memory as it was at the fork.

use znswap_core::{PageState as EnginePage, ResetHold};

use crate::{PageState, PagerCore, Sealed, PAGE_BYTES};

/// The device side of a fork: the zones holding the parent's swapped pages at the fork
/// are not reset until `PagerCore::fork_release`, so the child can read its pages at
/// the slots `PagerCore::child_page` named.
#[derive(Debug)]
#[must_use = "a fork hold keeps zones from reset until it is released"]
pub struct ForkHold {
    hold: ResetHold,
}

/// Where a page the child faults on has its content as at the fork (`child_page`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildPage {
    /// Not a page of a region of this pager's.
    NotOurs,
    /// All zeroes: never written, discarded by the program, or found all zero when
    /// swapped out.
    Zero,
    /// On the device: read slot `slot` of `zone` (one page, as a swap-in read does),
    /// and open it with `sealed` when pages are sealed.
    Slot { zone: u32, slot: u32, sealed: Option<Sealed> },
    /// The device lost the only copy: the child must not get a guess (poison the page).
    Lost,
    /// Parked: at `address` in the child's copy of the region's shadow.
    Shadow { address: u64 },
}

impl PagerCore {
    /// The program discarded `start..end` (a userfaultfd REMOVE event): every page
    /// wholly inside reads zero from now on (partial pages are left alone; the kernel
    /// reports whole pages, as `madvise` takes an aligned start and rounds the length up
    /// to pages). The range may span several regions, or none.
    ///
    /// The kernel zaps the range's page table entries only after a handler read the
    /// event, at a time the pager never learns. So call this in the same hold of the
    /// state lock as the `read` that returned the event (read userfaultfd under it), so
    /// no fault arriving after the zap is resolved against the pages as they were
    /// before the discard. Until the zap, what was mapped stays mapped (`Removed`); the
    /// pager never trusts it again. Nothing to carry out: the kernel does the zap.
    ///
    /// `zap_under_lock`: the shell zaps the range itself (`MADV_DONTNEED`) before it
    /// releases the state lock, as `znswap run`'s `madvise` wrapper does. Then no fault
    /// can map a page between this call and the zap, so what the pager believes mapped
    /// is mapped, and the regions keep being parked. Otherwise (a REMOVE event, the zap
    /// to come at a time the pager never learns) a missing fault on a page the pager
    /// mapped may mean the zap took it, and the regions are not parked from now on.
    /// With asynchronous write protection the zap must come under the lock: a region no
    /// longer parked could not be evicted at all.
    pub fn discard_range(&mut self, start: u64, end: u64, now: u64, zap_under_lock: bool) {
        assert!(
            zap_under_lock || !self.config.wp_async,
            "a discard zapped outside the state lock with asynchronous write protection"
        );
        let page_bytes = PAGE_BYTES as u64;
        let start = start.div_ceil(page_bytes) * page_bytes;
        let end = end / page_bytes * page_bytes;
        if start >= end {
            return;
        }
        self.stats.program_discards += 1;
        for owner in 0..self.regions.len() as u32 {
            let region = &self.regions[owner as usize];
            if !region.live || region.end() <= start || region.base >= end {
                continue;
            }
            let first = (start.max(region.base) - region.base) / page_bytes;
            let last = (end.min(region.end()) - region.base) / page_bytes;
            self.regions[owner as usize].program_discards |= !zap_under_lock;
            self.stats.program_discarded_pages += last - first;
            // Inherited pages read zero once discarded (a read of one in flight is
            // dropped at its end, `inherited_read_done`).
            self.regions[owner as usize].inherited.retain(|&page, _| page < first || page >= last);
            for page in first..last {
                match self.state(owner, page) {
                    // Nothing mapped: the engine's copy (if any) goes below; a read in
                    // flight is orphaned, and its fault maps a zero page instead.
                    PageState::Unmapped => {}
                    // Awaiting the pager's own discard, which zaps it: its faults wait
                    // for that, and map a zero page after.
                    PageState::Dropping => {}
                    PageState::Removed => {}
                    PageState::Resident | PageState::Referenced | PageState::Evicting { .. } | PageState::Writing => {
                        // An evicting victim is let go by its hand-over (no longer
                        // `Evicting`); a swap-out in flight completes as `Dropped`.
                        self.set_state(owner, page, PageState::Removed);
                        self.stats.resident_pages -= 1;
                    }
                    // The marker goes with the zap: the page reads zero again.
                    PageState::Poisoned => self.set_state(owner, page, PageState::Removed),
                    // Nothing mapped here for the zap: the copy at the shadow goes now,
                    // or when the move's hand-over or the append that reads it is done.
                    PageState::Parked => {
                        self.unlist(owner, page);
                        self.drop_shadow_copy(owner, page);
                        self.set_state(owner, page, PageState::Removed);
                        self.stats.resident_pages -= 1;
                    }
                    PageState::WritingParked => {
                        // Its append still reads the shadow page: no park there until
                        // the copy goes (at the append's completion, `swap_out_done`).
                        self.regions[owner as usize].stale_shadow.set(page, true);
                        self.set_state(owner, page, PageState::Removed);
                        self.stats.resident_pages -= 1;
                    }
                    // Its move may be under way (outside the lock): its faults wait until
                    // the moves are settled, which drops what the move took.
                    PageState::Parking { .. } => {
                        self.set_state(owner, page, PageState::ParkingRemoved);
                        self.stats.resident_pages -= 1;
                    }
                    PageState::ParkingRemoved => {}
                }
            }
            // Every slot the range held is invalid now (a swap-cached one, a swap-out's).
            self.engine.free(owner, first..last, now).expect("freeing a live region's pages");
        }
        self.after_engine();
        self.threads.wake_room();
        self.wake_evictor();
        self.assert_counts();
    }

    /// The program is about to fork (the shell holds the state lock from here to the
    /// fork, so the child's copy of the core is this one): the zones holding swapped
    /// pages now are not reset until `fork_release`, so the child's reads at the slots
    /// `child_page` names stay valid while the parent's pages move on.
    pub fn fork_hold(&mut self) -> ForkHold {
        self.stats.forks += 1;
        ForkHold { hold: self.engine.hold_resets() }
    }

    /// The child (and its descendants) exited or exec'd: deferred resets go ahead.
    pub fn fork_release(&mut self, hold: ForkHold, now: u64) {
        self.engine.release_resets(hold.hold, now);
        self.after_engine();
    }

    /// Asked of the child's copy of the core, frozen at the fork: where the content at
    /// the fork lives of the page at `address`, for a page the child faults on. Those
    /// are the pages nothing was mapped at when it forked (`fork` copies the parent's
    /// page table entries): unmapped ones, and ones whose discard was under way.
    ///
    /// Read a `Slot` as a swap-in read does (one page; a failed read is a lost page).
    /// Its zone is held from reset until `fork_release`, and zones are written once
    /// between resets, so the slot holds the fork-time page whatever the parent did
    /// since.
    pub fn child_page(&self, address: u64) -> ChildPage {
        let Some((owner, page)) = self.locate(address) else {
            return ChildPage::NotOurs;
        };
        self.child_page_of(owner, page)
    }

    /// `child_page` for each page of region `owner` that is on the device or lost (those
    /// a child reads other than as zero), by page index: a live core's snapshot for a
    /// child served from elsewhere (a daemon's tenant that forks). Call it between
    /// `fork_hold` and the fork, with the state held, as the frozen copy is made.
    pub fn child_pages(&self, owner: u32) -> Vec<(u64, ChildPage)> {
        let region = &self.regions[owner as usize];
        assert!(region.live, "a snapshot of region {owner}, which is gone");
        (0..region.pages)
            // A poisoned page too: its marker may not be mapped yet (the shell maps it
            // outside the lock), and a child that inherits none must not read zero.
            .filter(|&page| {
                matches!(region.state(page), PageState::Unmapped | PageState::Dropping | PageState::Poisoned)
            })
            .filter_map(|page| match self.child_page_of(owner, page) {
                ChildPage::Zero => None,
                other => Some((page, other)),
            })
            .collect()
    }

    /// The pages of region `owner` holding a poison marker (`PageState::Poisoned`), which
    /// a fork's child's page table copies: for `region_add_inherited`.
    pub fn poisoned_pages(&self, owner: u32) -> Vec<u64> {
        let region = &self.regions[owner as usize];
        (0..region.pages).filter(|&page| region.state(page) == PageState::Poisoned).collect()
    }

    fn child_page_of(&self, owner: u32, page: u64) -> ChildPage {
        let capacity = self.engine.config().geometry.zone_capacity_pages;
        let engine = self.engine.page_state(owner, page).expect("a live region's page");
        match (self.state(owner, page), engine) {
            // Mapped for the pager: present in the child unless the program's discard
            // zapped it, and then it reads zero.
            (PageState::Resident | PageState::Referenced | PageState::Evicting { .. } | PageState::Writing, _) => {
                ChildPage::Zero
            }
            (PageState::Removed | PageState::ParkingRemoved, _) => ChildPage::Zero,
            // Nothing mapped here in the child either: its copy of the shadow page (a
            // private mapping, inherited) holds the page as at the fork.
            (PageState::Parking { .. } | PageState::Parked | PageState::WritingParked, _) => {
                ChildPage::Shadow { address: self.shadow_address(owner, page) }
            }
            // A marker the child inherits (so it does not fault): lost there too.
            (PageState::Poisoned, _) => ChildPage::Lost,
            // A page this region (itself a fork's child) inherited and has not read yet:
            // its parent's slot, held from reset by that fork's snapshot and by this one's.
            (PageState::Unmapped, EnginePage::Zero) => match self.regions[owner as usize].inherited.get(&page) {
                Some(inherited) => inherited.from,
                None => ChildPage::Zero,
            },
            (PageState::Dropping, EnginePage::Zero) => ChildPage::Zero,
            (PageState::Unmapped | PageState::Dropping, EnginePage::Lost) => ChildPage::Lost,
            (
                PageState::Unmapped | PageState::Dropping,
                EnginePage::Swapped { address } | EnginePage::SwapInFlight { address },
            ) => ChildPage::Slot {
                zone: address.zone(capacity),
                slot: address.slot(capacity),
                sealed: self.config.encrypt.then(|| Sealed {
                    owner,
                    page,
                    seal: self.regions[owner as usize].seals.get(page),
                }),
            },
            (state, engine) => {
                unreachable!("page {owner}:{page} is {state:?} for the pager and {engine:?} for the engine")
            }
        }
    }
}
