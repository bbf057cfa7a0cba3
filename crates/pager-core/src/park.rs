//! The inactive list: victims parked at their region's shadow, so that the pager sees
//! every touch of them, reads included.
//!
//! User space has no accessed bit here (no idle page tracking, soft-dirty or MGLRU), and
//! write-protection shows writes only: a page the program only reads looked cold to the
//! CLOCK, was written out and read back at once. `UFFDIO_MOVE` takes a private page out
//! of the program's reach with no copy (`uffd_facts`; figures:
//! docs/measurements/2026-11-pager.md): parked, it stays in memory, and a touch is a
//! missing fault that moves it back with no I/O and marks it referenced. The pages still
//! parked when their turn comes at the list's old end are the ones written out, from the
//! shadow, where the program cannot write them: Appendix A's "dirtied during write-out"
//! cannot happen to them.
//!
//! A page the kernel refuses to move (shared with a fork's child: `EBUSY` until the
//! parent writes it again; or its shadow page not yet discarded: `EEXIST`) is evicted
//! in place, write-protected, as before. Regions the program discarded from are not
//! parked (`PagerCore::evict_pick`).

use znswap_core::{PageState as EnginePage, SwapOutError};

use crate::action::{Action, Actions, CopyFrom};
use crate::out::OutPage;
use crate::{PageState, PagerCore};

/// A page on the inactive list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParkedPage {
    pub owner: u32,
    pub page: u64,
}

impl PagerCore {
    /// Hands up to `wanted` pages from the inactive list's old end to the engine; their
    /// appends read them at their shadow pages. Under backpressure the rest wait.
    pub(crate) fn write_parked(&mut self, wanted: usize, now: u64) {
        for _ in 0..wanted {
            let Some(&ParkedPage { owner, page }) = self.parked.front() else { break };
            let Some(handle) = self.out.take() else { break };
            debug_assert_eq!(self.state(owner, page), PageState::Parked);
            let generation = self.regions[owner as usize].generation;
            let address = self.shadow_address(owner, page);
            match self.engine.swap_out(owner, page, handle, now) {
                Ok(_) => {
                    self.parked.pop_front();
                    self.set_state(owner, page, PageState::WritingParked);
                    self.out.writing_started(handle, OutPage { owner, generation, page, address, parked: true });
                }
                Err(SwapOutError::Backpressure) => {
                    self.stats.backpressure += 1;
                    self.out.give_back(handle);
                    break;
                }
                Err(error) => panic!("swap-out of parked page {owner}:{page}: {error}"),
            }
        }
    }

    /// Takes a page off the inactive list (a touch, or the program's discard).
    pub(crate) fn unlist(&mut self, owner: u32, page: u64) {
        // Linear, from the young end where touched pages mostly are: the list is a few
        // thousand entries, and a touch costs a fault round trip of tens of µs anyway.
        let index = self
            .parked
            .iter()
            .rposition(|parked| parked.owner == owner && parked.page == page)
            .expect("a parked page is on the inactive list");
        self.parked.remove(index);
    }

    /// A touch of a parked page (a missing fault, or a stale write-protect event for a
    /// page parked since): it comes back, referenced, with no device I/O.
    ///
    /// `Parked`: moved back (`Action::Unpark`), or copied back write-protected if its
    /// slot stays its swap cache (a read of a clean page). `WritingParked`: its append reads the
    /// shadow page, so it is copied back instead, writable, and its swap-out aborts
    /// (a read during the short write-out is rare; its shadow copy goes at completion).
    pub(crate) fn parked_fault(&mut self, owner: u32, page: u64, write: bool, now: u64, actions: &mut Actions) {
        let address = self.page_address(owner, page);
        let shadow = self.shadow_address(owner, page);
        self.stats.parked_touched += 1;
        match self.state(owner, page) {
            PageState::Parked => {
                self.unlist(owner, page);
                let cached = matches!(self.engine.page_state(owner, page), Ok(EnginePage::SwapCached { .. }));
                if cached && write {
                    self.tenants.swap_cache_dirtied(self.tenant_of(owner));
                    self.stats.swap_cache_dirtied += 1;
                    self.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
                    self.after_engine();
                }
                self.set_state(owner, page, PageState::Referenced);
                // (Asynchronously protected, protection says nothing a write must wait
                // for: the digest decides the slot's fate when it is parked again.)
                if cached && !write && !self.config.wp_async {
                    // Its slot stays its swap cache, so it must come back write-protected;
                    // a move drops the bit, and another thread could write the page before
                    // it is set again. Copied in protected, then; the shadow page goes with
                    // the next discard.
                    actions.push(Action::Copy {
                        address,
                        pages: 1,
                        from: CopyFrom::Shadow { address: shadow },
                        write_protect: true,
                    });
                    self.drop_shadow_copy(owner, page);
                } else {
                    actions.push(Action::Unpark { address, shadow });
                }
            }
            PageState::WritingParked => {
                self.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
                self.set_state(owner, page, PageState::Writing);
                // The copy left at the shadow page is stale from here on, though it goes
                // only at the swap-out's completion: no park there until that discard (the
                // program's discard may make the page pickable again before it).
                self.regions[owner as usize].stale_shadow.set(page, true);
                actions.push(Action::Copy {
                    address,
                    pages: 1,
                    from: CopyFrom::Shadow { address: shadow },
                    write_protect: false,
                });
                self.after_engine();
            }
            other => unreachable!("{owner}:{page}: a parked fault on a {other:?} page"),
        }
    }
}
