//! Host memory: the page table (one entry per application page) and the memory pools
//! (one per tenant, like a memory cgroup) with their frames and CLOCK reclaim.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::backend::PageId;

pub const NO_FRAME: u32 = u32::MAX;
pub const NO_PAGE: PageId = PageId::MAX;

/// Page flags. A page is resident when it has a frame and is not `READING`.
pub mod flag {
    /// Written at least once: a fault needs a swap-in, not a zero page.
    pub const TOUCHED: u8 = 1 << 0;
    /// Mapped in a frame.
    pub const RESIDENT: u8 = 1 << 1;
    /// Picked by reclaim, whose CPU work is under way; an access rescues it.
    pub const RECLAIM: u8 = 1 << 2;
    /// Swap-out write in flight; the frame is pinned.
    pub const WRITEBACK: u8 = 1 << 3;
    /// Swap-in read in flight into a reserved frame.
    pub const READING: u8 = 1 << 4;
    /// The back end holds a copy: the next write must be reported (`Backend::dirtied`).
    pub const NOTIFY_DIRTY: u8 = 1 << 5;
    /// Swapped in with its slot kept and not written since: reclaim drops it cheaply.
    pub const CLEAN_ON_SWAP: u8 = 1 << 6;
    /// Read ahead and not yet accessed.
    pub const READAHEAD: u8 = 1 << 7;
}

/// Per page: flags, frame, and the oracle (the last version written).
pub struct PageTable {
    pub flags: Vec<u8>,
    pub frame: Vec<u32>,
    pub version: Vec<u32>,
    /// Pool (tenant) of each page, by region.
    regions: Vec<(PageId, PageId, u16)>,
}

impl PageTable {
    /// `regions`: (first page, page count, tenant), contiguous from page 0.
    pub fn new(regions: &[(PageId, PageId, u16)]) -> PageTable {
        let pages = regions.iter().map(|&(first, count, _)| first + count).max().unwrap_or(0) as usize;
        for window in regions.windows(2) {
            assert_eq!(window[0].0 + window[0].1, window[1].0, "regions must be contiguous and ordered");
        }
        PageTable {
            flags: vec![0; pages],
            frame: vec![NO_FRAME; pages],
            version: vec![0; pages],
            regions: regions.to_vec(),
        }
    }

    pub fn len(&self) -> usize {
        self.flags.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    pub fn tenant(&self, page: PageId) -> u16 {
        let index = self.regions.partition_point(|&(first, _, _)| first <= page) - 1;
        self.regions[index].2
    }

    pub fn has(&self, page: PageId, bits: u8) -> bool {
        self.flags[page as usize] & bits != 0
    }

    pub fn set(&mut self, page: PageId, bits: u8) {
        self.flags[page as usize] |= bits;
    }

    pub fn clear(&mut self, page: PageId, bits: u8) {
        self.flags[page as usize] &= !bits;
    }
}

/// A tenant's memory: frames, CLOCK hand, watermarks and the threads waiting for a
/// frame.
pub struct Pool {
    /// Page held by each frame (`NO_PAGE`: free).
    pub frame_page: Vec<PageId>,
    /// CLOCK referenced bit per frame.
    pub referenced: Vec<bool>,
    pub free: Vec<u32>,
    hand: usize,
    /// Background reclaim starts under `low` free frames and stops at `high`.
    pub low: u32,
    pub high: u32,
    /// Frames under swap-out write and picked for reclaim: soon free.
    pub writeback: u32,
    pub reclaiming: u32,
    /// Threads waiting for a frame, in order.
    pub waiters: VecDeque<u32>,
    /// The back end refused a swap-out: reclaim waits for a retry.
    pub busy: bool,
}

impl Pool {
    pub fn new(frames: u32) -> Pool {
        assert!(frames >= 16, "a memory pool needs at least 16 frames, got {frames}");
        // Linux sets its watermarks from min_free_kbytes (about 0.3 % of a 2 GiB
        // zone) with low = 1.25 min and high = 1.5 min, plus watermark_scale_factor
        // (0.1 % of memory) between them. A swap-heavy host needs a deeper queue of
        // writes than that to keep the device busy, so both are a little higher here.
        let low = (frames / 100).max(64).min(frames / 4);
        let high = (frames / 50).max(low + 32).min(frames / 2);
        Pool {
            frame_page: vec![NO_PAGE; frames as usize],
            referenced: vec![false; frames as usize],
            free: (0..frames).rev().collect(),
            hand: 0,
            low,
            high,
            writeback: 0,
            reclaiming: 0,
            waiters: VecDeque::new(),
            busy: false,
        }
    }

    pub fn frames(&self) -> u32 {
        self.frame_page.len() as u32
    }

    /// Free frames plus those on their way to being free.
    pub fn free_soon(&self) -> u32 {
        self.free.len() as u32 + self.writeback + self.reclaiming
    }

    pub fn needs_reclaim(&self) -> bool {
        !self.busy && self.free_soon() < self.low
    }

    pub fn reclaim_wanted(&self) -> u32 {
        if self.busy {
            return 0;
        }
        self.high.saturating_sub(self.free_soon())
    }

    pub fn take(&mut self, page: PageId) -> Option<u32> {
        let frame = self.free.pop()?;
        debug_assert_eq!(self.frame_page[frame as usize], NO_PAGE);
        self.frame_page[frame as usize] = page;
        self.referenced[frame as usize] = true;
        Some(frame)
    }

    /// Returns a frame to the free list (the caller hands it to a waiter first).
    pub fn put(&mut self, frame: u32) {
        assert_ne!(self.frame_page[frame as usize], NO_PAGE, "frame {frame} freed twice");
        self.frame_page[frame as usize] = NO_PAGE;
        self.referenced[frame as usize] = false;
        self.free.push(frame);
    }

    /// Reassigns a frame being freed straight to another page.
    pub fn hand_over(&mut self, frame: u32, page: PageId) {
        self.frame_page[frame as usize] = page;
        self.referenced[frame as usize] = true;
    }

    /// CLOCK: the next `count` resident, unpinned, unreferenced pages (referenced bits
    /// met on the way are cleared). Stops after two turns of the hand.
    pub fn select_victims(&mut self, pages: &mut PageTable, count: u32, out: &mut Vec<PageId>) {
        let frames = self.frame_page.len();
        let mut scanned = 0;
        let start = out.len();
        while ((out.len() - start) as u32) < count && scanned < 2 * frames {
            let frame = self.hand;
            self.hand = if self.hand + 1 == frames { 0 } else { self.hand + 1 };
            scanned += 1;
            let page = self.frame_page[frame];
            if page == NO_PAGE {
                continue;
            }
            let page_flags = pages.flags[page as usize];
            let pinned = flag::RECLAIM | flag::WRITEBACK | flag::READING;
            if page_flags & flag::RESIDENT == 0 || page_flags & pinned != 0 {
                continue;
            }
            if self.referenced[frame] {
                self.referenced[frame] = false;
                continue;
            }
            pages.set(page, flag::RECLAIM);
            self.reclaiming += 1;
            out.push(page);
        }
    }
}

/// A fast hasher for page ids (a multiplicative hash; keys are never iterated, so
/// the map's order cannot leak into the simulation).
#[derive(Default)]
pub struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ byte as u64).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u32(&mut self, value: u32) {
        self.0 = (value as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Threads waiting for the read of a page, woken in the order they came.
#[derive(Default)]
pub struct ReadWaiters {
    map: HashMap<PageId, Vec<u32>, BuildHasherDefault<PageHasher>>,
    spare: Vec<Vec<u32>>,
}

impl ReadWaiters {
    pub fn add(&mut self, page: PageId, thread: u32) {
        let spare = &mut self.spare;
        self.map.entry(page).or_insert_with(|| spare.pop().unwrap_or_default()).push(thread);
    }

    /// Moves the waiters of `page` into `out` (in arrival order).
    pub fn take(&mut self, page: PageId, out: &mut Vec<u32>) {
        if let Some(mut threads) = self.map.remove(&page) {
            out.extend_from_slice(&threads);
            threads.clear();
            self.spare.push(threads);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_skips_referenced_and_pinned_frames() {
        let mut pages = PageTable::new(&[(0, 64, 0)]);
        let mut pool = Pool::new(16);
        for page in 0..16 {
            let frame = pool.take(page).unwrap();
            pages.frame[page as usize] = frame;
            pages.set(page, flag::RESIDENT | flag::TOUCHED);
        }
        assert!(pool.take(99).is_none());
        pages.set(3, flag::WRITEBACK);
        // Every page was just referenced: the first turn clears, the second picks.
        let mut victims = Vec::new();
        pool.select_victims(&mut pages, 4, &mut victims);
        assert_eq!(victims.len(), 4);
        assert!(!victims.contains(&3), "a page under writeback is pinned");
        assert!(victims.iter().all(|&page| pages.has(page, flag::RECLAIM)));
        assert_eq!(pool.reclaiming, 4);
        // Picked pages are not picked again.
        let mut more = Vec::new();
        pool.select_victims(&mut pages, 100, &mut more);
        assert_eq!(more.len(), 11);
        assert!(more.iter().all(|page| !victims.contains(page)));
    }

    #[test]
    fn read_waiters_wake_in_arrival_order() {
        let mut waiters = ReadWaiters::default();
        waiters.add(7, 3);
        waiters.add(9, 1);
        waiters.add(7, 2);
        let mut out = Vec::new();
        waiters.take(7, &mut out);
        assert_eq!(out, [3, 2]);
        waiters.take(7, &mut out);
        assert_eq!(out, [3, 2], "taken once");
        assert_eq!(waiters.len(), 1);
        waiters.take(9, &mut out);
        assert_eq!(out, [3, 2, 1]);
        assert!(waiters.is_empty());
    }

    #[test]
    fn tenants_come_from_regions() {
        let pages = PageTable::new(&[(0, 10, 0), (10, 5, 1), (15, 1, 2)]);
        assert_eq!(pages.len(), 16);
        assert_eq!((pages.tenant(0), pages.tenant(9), pages.tenant(10), pages.tenant(14)), (0, 0, 1, 1));
        assert_eq!(pages.tenant(15), 2);
    }

    #[test]
    fn watermarks_are_ordered() {
        for frames in [16, 100, 1000, 65_536, 1 << 22] {
            let pool = Pool::new(frames);
            assert!(pool.low < pool.high && pool.high <= frames / 2 + 32, "{frames}: {} {}", pool.low, pool.high);
        }
    }
}
