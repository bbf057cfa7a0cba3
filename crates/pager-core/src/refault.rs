//! Refault distance: pages that come back soon after their eviction are kept longer.
//!
//! User space has no accessed bit here, so a page the program only reads is never seen
//! referenced: the CLOCK hand clears a swapped-in page's bit at its next pass and evicts
//! it at the one after, however often it is read. Its refault says what the bit could
//! not. As Linux's `workingset_refault` does with the shadow entries of evicted pages,
//! each eviction is stamped with the count of evictions so far; when the page comes back,
//! the evictions between (its refault distance) say whether it would have stayed had the
//! memory been a true LRU of the budget's size. A page back within the budget's distance
//! was evicted too early: it earns passes of the hand (1, then 3, then 7, as it keeps
//! coming back soon), which the hand spends before it may pick it. A page back from far
//! away (a scan, a working set beyond the budget) earns none and loses its level.
//!
//! The heat of a page, one `u32` in its region's table (`Region::heat`):
//!
//! ```text
//!   bits 6..32  eviction stamp (the eviction count, modulo 2^26)
//!   bit  5      evicted: the stamp is live (set at the pick, cleared at the install)
//!   bits 3..5   level 0..3
//!   bits 0..3   passes left 0..7
//!
//!   evicted ──install, distance <= budget──▶ level+1, passes 2^level - 1
//!   evicted ──install, distance >  budget──▶ level 0, passes 0 (counted near when
//!                                            within an eighth more)
//!   resident, passes > 0 ──hand's first sweep──▶ passes - 1 (not picked)
//!   resident ──pick──▶ evicted (stamped)
//! ```
//!
//! The hand spends passes only in the first of a sweep's two revolutions, so a budget
//! full of hot pages still yields victims.

use crate::region::PageTable;

const PASSES_MASK: u32 = 0b111;
const LEVEL_SHIFT: u32 = 3;
const LEVEL_MAX: u32 = 3;
const EVICTED: u32 = 1 << 5;
const STAMP_SHIFT: u32 = 6;
const STAMP_MASK: u64 = (1 << (32 - STAMP_SHIFT)) - 1;

/// What an install found of a page's last eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refault {
    /// Never evicted (a first touch), or evicted before its heat was kept.
    First,
    /// Back within the budget's distance: the page was given passes.
    Short,
    /// Back from beyond it, but within an eighth more: a budget an eighth larger would
    /// have kept it (under LRU). What memory given to something else (a compressed pool)
    /// costs the heap.
    Near,
    /// Back from farther.
    Long,
}

/// The eviction clock: evictions counted so far.
#[derive(Debug, Default)]
pub(crate) struct EvictionClock {
    evictions: u64,
}

impl EvictionClock {
    /// Page `page` of `heat`'s region is picked to leave memory: its eviction stamped.
    pub(crate) fn evicted(&mut self, heat: &mut PageTable<u32>, page: u64) {
        self.evictions += 1;
        let old = heat.get(page);
        let stamp = (self.evictions & STAMP_MASK) as u32;
        heat.set(page, (stamp << STAMP_SHIFT) | EVICTED | (old & (LEVEL_MAX << LEVEL_SHIFT)));
    }

    /// Page `page` is installed again: its refault distance against `budget_pages`.
    pub(crate) fn installed(&self, heat: &mut PageTable<u32>, page: u64, budget_pages: u64) -> Refault {
        let old = heat.get(page);
        if old & EVICTED == 0 {
            return Refault::First;
        }
        let stamp = (old >> STAMP_SHIFT) as u64;
        let distance = (self.evictions & STAMP_MASK).wrapping_sub(stamp) & STAMP_MASK;
        if distance <= budget_pages {
            let level = ((old >> LEVEL_SHIFT) & LEVEL_MAX).saturating_add(1).min(LEVEL_MAX);
            heat.set(page, (level << LEVEL_SHIFT) | ((1 << level) - 1));
            Refault::Short
        } else {
            heat.set(page, 0);
            if distance <= budget_pages + budget_pages / 8 {
                Refault::Near
            } else {
                Refault::Long
            }
        }
    }
}

/// Whether page `page` has passes of the hand left (it is known hot: sampling its
/// writes would tell nothing more).
pub(crate) fn has_passes(heat: &PageTable<u32>, page: u64) -> bool {
    let heat = heat.get(page);
    heat & EVICTED == 0 && heat & PASSES_MASK != 0
}

/// The hand is at resident page `page`, which it would pick: spends one of its passes if
/// it has one left (`true`: pass it by).
pub(crate) fn spend_pass(heat: &mut PageTable<u32>, page: u64) -> bool {
    let old = heat.get(page);
    if old & EVICTED != 0 || old & PASSES_MASK == 0 {
        return false;
    }
    heat.set(page, old - 1);
    true
}

#[cfg(test)]
mod tests {
    use super::{spend_pass, EvictionClock, Refault};
    use crate::region::PageTable;

    /// A page back soon climbs a level each time (1, 3, 7 passes), one back from beyond
    /// the budget drops to none, a first touch earns nothing, and passes are spent one
    /// at a time.
    #[test]
    fn refault_distance_gives_passes() {
        let mut heat = PageTable::<u32>::new(1024);
        let mut clock = EvictionClock::default();
        assert_eq!(clock.installed(&mut heat, 3, 100), Refault::First);
        assert!(!spend_pass(&mut heat, 3), "no passes before a refault");
        for passes in [1, 3, 7, 7] {
            clock.evicted(&mut heat, 3);
            for other in 10..60 {
                clock.evicted(&mut heat, other);
            }
            assert_eq!(clock.installed(&mut heat, 3, 100), Refault::Short);
            for _ in 0..passes {
                assert!(spend_pass(&mut heat, 3));
            }
            assert!(!spend_pass(&mut heat, 3), "{passes} passes, no more");
        }
        clock.evicted(&mut heat, 3);
        assert!(!spend_pass(&mut heat, 3), "an evicted page has none to spend");
        for other in 100..205 {
            clock.evicted(&mut heat, other);
        }
        assert_eq!(clock.installed(&mut heat, 3, 100), Refault::Near, "106 evictions: within an eighth more");
        clock.evicted(&mut heat, 3);
        assert_eq!(clock.installed(&mut heat, 3, 100), Refault::Short, "a near refault keeps no level");
        assert!(spend_pass(&mut heat, 3) && !spend_pass(&mut heat, 3));
        clock.evicted(&mut heat, 3);
        for other in 100..400 {
            clock.evicted(&mut heat, other);
        }
        assert_eq!(clock.installed(&mut heat, 3, 100), Refault::Long);
        assert!(!spend_pass(&mut heat, 3));
        clock.evicted(&mut heat, 3);
        assert_eq!(clock.installed(&mut heat, 3, 100), Refault::Short);
        assert!(spend_pass(&mut heat, 3) && !spend_pass(&mut heat, 3), "back to the first level");
    }
}
