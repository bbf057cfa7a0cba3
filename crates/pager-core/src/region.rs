//! The region table: the pager's page table of each region it manages.

use std::collections::BTreeMap;

use crate::{ChildPage, Digest, PageState, Seal, PAGE_BYTES};

pub(crate) struct Region {
    /// Distinguishes this region from a later one reusing its owner id (and perhaps its
    /// addresses) while work on it runs outside the lock.
    pub generation: u64,
    /// The engine's tenant it is charged to, and whose budget its pages count against
    /// (`PagerCore::set_tenant_budget`).
    pub tenant: u32,
    /// Its pages counted resident (`PageState::counts_resident`), and those of them the
    /// pager keeps, not on their way out (`PageState::is_kept`): kept by `set_state`.
    pub resident: u64,
    pub kept: u64,
    pub base: u64,
    pub pages: u64,
    /// Each page's `PageState`, a byte each (`PageState::to_byte`).
    pub states: Vec<u8>,
    /// Pages not `Unmapped` in each block of `OCCUPANCY_BLOCK_PAGES` (kept by
    /// `PagerCore::set_state`): the hand passes a block with none in one step. A
    /// region is mostly address space never used (`znswap run`'s arena is the device's
    /// size), which a sweep would otherwise look at page by page, under the state lock,
    /// every revolution.
    pub occupied: Vec<u16>,
    pub live: bool,
    /// The page of the last missing fault, and how many faults in a row followed it.
    pub last_fault: u64,
    pub sequential_faults: u32,
    /// Write faults on pages it had not mapped since its last missing fault
    /// (`PagerCore::false_drop_suspected`).
    pub write_faults_unmapped: u32,
    /// The program discarded some of it (`PagerCore::discard_range`): a page the pager
    /// mapped may have been zapped since, so its missing faults are not all stale.
    pub program_discards: bool,
    /// Where its pages are parked (`PagerCore::region_add`), if anywhere.
    pub shadow: Option<u64>,
    /// Each page's seal, when pages are sealed (`CoreConfig::encrypt`). Set when an
    /// append that wrote the page completes, read by the read.
    pub seals: PageTable<Seal>,
    /// Each swapped page's digest, with asynchronous write protection
    /// (`CoreConfig::wp_async`): the content of its slot, to tell a clean swap-cached
    /// page from a written one when it is parked. Set as seals are.
    pub digests: PageTable<Digest>,
    /// Pages whose shadow page may still hold bytes the pager no longer counts as the
    /// page (a stale copy awaiting its discard, an append still reading a page the
    /// program discarded): set when that starts, cleared once its discard is done. Such
    /// a page is not parked, so every move to a shadow page meets an empty one, and a
    /// move that failed with the page found at its shadow page was done
    /// (`park_outcome`).
    pub stale_shadow: PageTable<bool>,
    /// A fork's child served by this pager (`PagerCore::region_add_inherited`): its
    /// pages that were on the device at the fork, by page, read from the parent's slots
    /// (held from reset by the fork's snapshot) when it first faults on them. An entry
    /// leaves when its page lands or the program discards it; each names an `Unmapped`
    /// page the engine holds nothing of.
    pub inherited: BTreeMap<u64, Inherited>,
    /// Each page's heat: its last eviction's stamp, its level and the hand's passes it
    /// has left (`src/refault.rs`). Made as pages are first evicted.
    pub heat: PageTable<u32>,
}

/// A page a fork's child inherited from its parent's slots.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inherited {
    /// `ChildPage::Slot` or `ChildPage::Lost`.
    pub from: ChildPage,
    /// A fault is reading it (others wait for that one).
    pub reading: bool,
}

/// A value per page (a seal, a digest), in chunks made when a page of theirs is first
/// written out: a region is mostly address space never swapped (`znswap run`'s arena is
/// the device's size), and a table made whole, zeroed, is resident whole (the allocator
/// writes its zeroes: 48 MiB of seals for an 8 GiB arena), all of it out of
/// `--memory`. A table made with no pages (the feature off) holds nothing.
pub struct PageTable<T> {
    chunks: Vec<Option<Box<[T]>>>,
}

impl<T> Default for PageTable<T> {
    fn default() -> PageTable<T> {
        PageTable { chunks: Vec::new() }
    }
}

const TABLE_CHUNK_PAGES: u64 = 512;

/// Pages per block of `Region::occupied`.
pub(crate) const OCCUPANCY_BLOCK_PAGES: u64 = 512;

impl<T: Copy + Default> PageTable<T> {
    pub(crate) fn new(pages: u64) -> PageTable<T> {
        PageTable { chunks: (0..pages.div_ceil(TABLE_CHUNK_PAGES)).map(|_| None).collect() }
    }

    /// `page`'s value; the default if it was never written out.
    pub fn get(&self, page: u64) -> T {
        match &self.chunks[(page / TABLE_CHUNK_PAGES) as usize] {
            Some(chunk) => chunk[(page % TABLE_CHUNK_PAGES) as usize],
            None => T::default(),
        }
    }

    pub fn set(&mut self, page: u64, value: T) {
        let chunk = self.chunks[(page / TABLE_CHUNK_PAGES) as usize]
            .get_or_insert_with(|| vec![T::default(); TABLE_CHUNK_PAGES as usize].into_boxed_slice());
        chunk[(page % TABLE_CHUNK_PAGES) as usize] = value;
    }
}

impl Region {
    pub fn new(
        generation: u64,
        tenant: u32,
        base: u64,
        pages: u64,
        shadow: Option<u64>,
        sealed: bool,
        digests: bool,
    ) -> Region {
        Region {
            generation,
            tenant,
            resident: 0,
            kept: 0,
            base,
            pages,
            // Zeroed, not written: all `Unmapped`, and resident only as pages are used.
            states: vec![0; pages as usize],
            occupied: vec![0; pages.div_ceil(OCCUPANCY_BLOCK_PAGES) as usize],
            live: true,
            last_fault: u64::MAX,
            sequential_faults: 0,
            write_faults_unmapped: 0,
            program_discards: false,
            shadow,
            seals: if sealed { PageTable::new(pages) } else { PageTable::default() },
            digests: if digests { PageTable::new(pages) } else { PageTable::default() },
            stale_shadow: if shadow.is_some() { PageTable::new(pages) } else { PageTable::default() },
            inherited: BTreeMap::new(),
            heat: PageTable::new(pages),
        }
    }

    pub fn state(&self, page: u64) -> PageState {
        PageState::from_byte(self.states[page as usize])
    }

    /// Counts `page` going from `from` to `to` in its block's occupancy.
    pub fn count_occupancy(&mut self, page: u64, from: PageState, to: PageState) {
        let block = &mut self.occupied[(page / OCCUPANCY_BLOCK_PAGES) as usize];
        match (from == PageState::Unmapped, to == PageState::Unmapped) {
            (true, false) => *block += 1,
            (false, true) => *block -= 1,
            _ => {}
        }
    }

    /// The first page at or after `page` whose block may hold a page not `Unmapped`
    /// (`pages` if none): every page skipped is `Unmapped`.
    pub fn next_occupied(&self, page: u64) -> u64 {
        let mut block = page / OCCUPANCY_BLOCK_PAGES;
        if self.occupied.get(block as usize).is_some_and(|&count| count > 0) {
            return page;
        }
        block += 1;
        while (block as usize) < self.occupied.len() && self.occupied[block as usize] == 0 {
            block += 1;
        }
        (block * OCCUPANCY_BLOCK_PAGES).min(self.pages)
    }

    pub fn end(&self) -> u64 {
        self.base + self.pages * PAGE_BYTES as u64
    }
}

#[cfg(test)]
mod tests {
    use super::{Region, OCCUPANCY_BLOCK_PAGES};
    use crate::PageState;

    /// The hand's skip: a block with a page not `Unmapped` is stopped at, wherever in it
    /// the hand is; the empty ones are passed, up to the region's end.
    #[test]
    fn the_hand_passes_only_blocks_with_every_page_unmapped() {
        let block = OCCUPANCY_BLOCK_PAGES;
        let mut region = Region::new(0, 0, 0, 4 * block + 10, None, false, false);
        assert_eq!(region.next_occupied(0), 4 * block + 10, "an empty region: its end");
        region.count_occupancy(2 * block + 7, PageState::Unmapped, PageState::Referenced);
        assert_eq!(region.next_occupied(0), 2 * block);
        assert_eq!(region.next_occupied(2 * block + 300), 2 * block + 300, "within an occupied block: here");
        assert_eq!(region.next_occupied(3 * block), 4 * block + 10);
        region.count_occupancy(2 * block + 7, PageState::Referenced, PageState::Resident);
        assert_eq!(region.occupied[2], 1, "a change between mapped states counts nothing");
        region.count_occupancy(2 * block + 7, PageState::Resident, PageState::Unmapped);
        assert_eq!(region.next_occupied(0), 4 * block + 10);
    }
}
