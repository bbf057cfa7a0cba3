//! The region table: the pager's page table of each region it manages.

use crate::{PageState, Seal, PAGE_BYTES};

pub(crate) struct Region {
    /// Distinguishes this region from a later one reusing its owner id (and perhaps its
    /// addresses) while work on it runs outside the lock.
    pub generation: u64,
    pub base: u64,
    pub pages: u64,
    /// Each page's `PageState`, a byte each (`PageState::to_byte`).
    pub states: Vec<u8>,
    pub live: bool,
    /// The page of the last missing fault, and how many faults in a row followed it.
    pub last_fault: u64,
    pub sequential_faults: u32,
    /// The program discarded some of it (`PagerCore::discard_range`): a page the pager
    /// mapped may have been zapped since, so its missing faults are not all stale.
    pub program_discards: bool,
    /// Where its pages are parked (`PagerCore::region_add`), if anywhere.
    pub shadow: Option<u64>,
    /// Each page's seal, when pages are sealed (`CoreConfig::seal_pages`); empty
    /// otherwise. Set when an append that wrote the page completes, read by the read.
    pub seals: Vec<Seal>,
}

impl Region {
    pub fn new(generation: u64, base: u64, pages: u64, shadow: Option<u64>, sealed: bool) -> Region {
        Region {
            generation,
            base,
            pages,
            // Zeroed, not written: all `Unmapped`, and resident only as pages are used.
            states: vec![0; pages as usize],
            live: true,
            last_fault: u64::MAX,
            sequential_faults: 0,
            program_discards: false,
            shadow,
            // Zeroed too: resident only where pages were swapped.
            seals: if sealed { vec![[0; crate::SEAL_BYTES]; pages as usize] } else { Vec::new() },
        }
    }

    pub fn state(&self, page: u64) -> PageState {
        PageState::from_byte(self.states[page as usize])
    }

    pub fn end(&self) -> u64 {
        self.base + self.pages * PAGE_BYTES as u64
    }
}
