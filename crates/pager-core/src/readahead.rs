//! Read-ahead with hit feedback: the valid slots around a faulting page's slot are read
//! with it (one device command) into a cache of the pager's own pages, where they stay
//! unmapped until a fault wants one. Linux does the same with its swap cache
//! (`swap_cluster_readahead`, sized by `swapin_nr_pages`).
//!
//! Why a cache rather than mapping the pages at once (the pager's first read-ahead):
//! pages mapped at once cost budget whether they are used or not, and since nobody
//! learns whether they were, the window cannot adapt: a fixed window over uniform random
//! access made swap-ins per operation and ops/s several times worse (figures:
//! docs/measurements/2026-11-pager.md). Here a page read ahead costs no budget (the
//! cache is a fixed pool, counted as the pager's buffers), a fault that finds its page
//! in the cache is a hit (no device read), and the window grows with hits and falls back
//! to one page without them.
//!
//! Why the slots around the faulting one: pages swapped out together sit in
//! neighbouring slots (an append writes a round's victims in order), so history, not
//! addresses, says what comes back together.
//!
//! # Why an entry can be trusted
//! An entry holds what slot `address` held in its zone's generation (the zone's reset
//! count). A slot is written once between resets; only slots `Valid` in the slot map
//! when the read was planned are kept (written, so the read saw their data, not what an
//! append in flight would put there later); and the zone cannot be reset under the read,
//! which counts as the faulting page's own read in flight in that zone. So while the
//! zone's generation is unchanged the entry equals the slot, and a fault whose page the
//! engine says is swapped at that slot (`SwapIn::Read`) may be served from it.

use znswap_core::SlotAddress;

/// Cache pages per page of the largest window: reads in flight from several faults,
/// and pages that wait a while for their fault.
const CACHE_WINDOWS: u32 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Free,
    /// A read in flight fills it: the fault that claimed it owns the page's bytes.
    Filling,
    /// Holds slot `address` as of its zone's `generation`.
    Ready {
        address: SlotAddress,
        generation: u32,
    },
}

/// A read planned into the cache: pages `first..first + pages` take slots from `start`
/// on, the faulting page's at `fault_index`; bit `i` of `keep` says the slot read into
/// page `first + i` was valid.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claim {
    pub(crate) first: u32,
    pub(crate) pages: u32,
    pub(crate) fault_index: u32,
    keep: u64,
    /// The first slot read, and its zone's generation.
    start: SlotAddress,
    generation: u32,
}

/// How far a read goes around the faulting page's slot: `before` slots before it (a run
/// of faults going down), or `after` it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) before: u32,
    pub(crate) after: u32,
}

/// Which pages of the cache hold what; the bytes are the shell's.
pub(crate) struct ReadaheadCache {
    entries: Vec<Entry>,
    /// Where the next read's pages go: the oldest entries are reused first.
    hand: u32,
    /// Largest window beyond the faulting page (`CoreConfig::readahead_pages`; 0: off).
    ahead_max: u32,
    /// Hits since the last read.
    hits: u32,
    /// The last read's window, the faulting page included.
    window: u32,
    /// The last fault's slot (a read's, or a hit's).
    last: Option<SlotAddress>,
}

impl ReadaheadCache {
    /// Pages of cache for a window of `ahead_max` pages beyond the faulting one.
    pub(crate) fn pages_for(ahead_max: u32) -> u32 {
        if ahead_max == 0 {
            0
        } else {
            (ahead_max + 1) * CACHE_WINDOWS
        }
    }

    pub(crate) fn new(ahead_max: u32) -> ReadaheadCache {
        let pages = ReadaheadCache::pages_for(ahead_max);
        ReadaheadCache {
            entries: vec![Entry::Free; pages as usize],
            hand: 0,
            ahead_max,
            hits: 0,
            window: 1,
            last: None,
        }
    }

    /// The entry holding `address` as of `generation`, if any. A linear scan: the cache
    /// is a few hundred entries, and a scan costs less than the fault around it.
    pub(crate) fn lookup(&self, address: SlotAddress, generation: u32) -> Option<u32> {
        let wanted = Entry::Ready { address, generation };
        self.entries.iter().position(|&entry| entry == wanted).map(|index| index as u32)
    }

    /// A fault was served from `entry` (its copy is carried out under the lock that
    /// found it, so the page may be reused once that lock is released).
    pub(crate) fn hit(&mut self, entry: u32) {
        let Entry::Ready { address, .. } = self.entries[entry as usize] else {
            panic!("a hit on entry {entry}, not ready");
        };
        self.entries[entry as usize] = Entry::Free;
        self.hits = self.hits.saturating_add(1);
        self.last = Some(address);
    }

    /// `entry` dropped, not a hit: its sealed page failed to open, or was opened and not
    /// served (no longer ciphertext).
    pub(crate) fn forget(&mut self, entry: u32) {
        assert!(matches!(self.entries[entry as usize], Entry::Ready { .. }), "forgetting entry {entry}, not ready");
        self.entries[entry as usize] = Entry::Free;
    }

    /// Slots to read with the one at `address`, as Linux's `swapin_nr_pages`: the hits
    /// since the last read plus two pages, rounded up to a power of two; with no hits,
    /// one page unless this fault's slot neighbours the last fault's (a sequential run
    /// has no hits to show yet); never below half the last window (it shrinks
    /// gradually), never above the largest. The window lies before the slot when the
    /// last fault was at the slot above (a run going down: Python frees a list from its
    /// end, a stack grows down), else after it.
    pub(crate) fn window(&mut self, address: SlotAddress) -> Window {
        if self.ahead_max == 0 {
            return Window { before: 0, after: 0 };
        }
        let hits = std::mem::take(&mut self.hits);
        let mut pages = hits.saturating_add(2);
        if pages == 2 {
            let neighbour = self.last.is_some_and(|last| last.0.abs_diff(address.0) == 1);
            if !neighbour {
                pages = 1;
            }
        } else {
            pages = pages.next_power_of_two().max(4);
        }
        pages = pages.min(self.ahead_max + 1).max(self.window / 2).max(1);
        self.window = pages;
        let down = self.last == Some(SlotAddress(address.0 + 1));
        self.last = Some(address);
        if down {
            Window { before: pages - 1, after: 0 }
        } else {
            Window { before: 0, after: pages - 1 }
        }
    }

    /// Claims `pages` consecutive pages for a read of as many slots from `start`, the
    /// faulting page's at `fault_index` (`keep`: which of the others to hold once read).
    /// None when the pages at the hand are being filled by other reads (then the fault
    /// reads its page alone).
    pub(crate) fn claim(
        &mut self,
        start: SlotAddress,
        generation: u32,
        pages: u32,
        fault_index: u32,
        keep: u64,
    ) -> Option<Claim> {
        assert!(fault_index < pages && pages <= 64, "a read of {pages} pages, the fault's at {fault_index}");
        let len = self.entries.len() as u32;
        assert!(pages <= len, "a read of {pages} pages into a cache of {len}");
        let first = if self.hand + pages > len { 0 } else { self.hand };
        let range = first as usize..(first + pages) as usize;
        if self.entries[range.clone()].contains(&Entry::Filling) {
            return None;
        }
        self.entries[range].fill(Entry::Filling);
        self.hand = (first + pages) % len;
        Some(Claim { first, pages, fault_index, keep, start, generation })
    }

    /// The claimed read is done (`ok`) and its faulting page copied out (or not wanted):
    /// the pages kept become entries, the others free.
    pub(crate) fn fill_done(&mut self, claim: Claim, ok: bool) {
        let Claim { first, pages, fault_index, keep, start, generation } = claim;
        for k in 0..pages {
            let index = (first + k) as usize;
            assert_eq!(self.entries[index], Entry::Filling, "cache page {index} released but not claimed");
            let kept = ok && k != fault_index && keep & (1 << k) != 0;
            self.entries[index] =
                if kept { Entry::Ready { address: SlotAddress(start.0 + k as u64), generation } } else { Entry::Free };
        }
    }

    /// Entries holding pages, and entries being filled.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let ready = self.entries.iter().filter(|entry| matches!(entry, Entry::Ready { .. })).count();
        let filling = self.entries.iter().filter(|&&entry| entry == Entry::Filling).count();
        (ready, filling)
    }
}

#[cfg(test)]
mod tests {
    use znswap_core::SlotAddress;

    use super::{ReadaheadCache, Window};

    #[test]
    fn the_window_grows_with_hits_and_falls_back_without_them() {
        let after = |pages| Window { before: 0, after: pages };
        let mut cache = ReadaheadCache::new(8);
        // A fault far from the last: one page.
        assert_eq!(cache.window(SlotAddress(100)), after(0));
        // Its neighbour: two pages, with no hits to judge by.
        assert_eq!(cache.window(SlotAddress(101)), after(1));
        let claim = cache.claim(SlotAddress(101), 0, 2, 0, 0b10).expect("room");
        cache.fill_done(claim, true);
        assert_eq!(cache.lookup(SlotAddress(101), 0), None, "the faulting page is not kept");
        let hit = cache.lookup(SlotAddress(102), 0).expect("the page read ahead");
        assert_eq!(cache.lookup(SlotAddress(102), 1), None, "another generation of the zone");
        cache.hit(hit);
        assert_eq!(cache.lookup(SlotAddress(102), 0), None, "a hit frees its entry");
        // One hit: 3 pages, rounded up to 4.
        assert_eq!(cache.window(SlotAddress(103)), after(3));
        cache.hits = 9;
        assert_eq!(cache.window(SlotAddress(500)), after(8), "at most the largest window");
        // No hits, far away: halves, not back to one at once.
        assert_eq!(cache.window(SlotAddress(900)), after(3));
        assert_eq!(cache.window(SlotAddress(10)), after(1));
        assert_eq!(cache.window(SlotAddress(7000)), after(0));
        // Going down: the window lies below.
        assert_eq!(cache.window(SlotAddress(6999)), Window { before: 1, after: 0 });
        let claim = cache.claim(SlotAddress(6998), 0, 2, 1, 0b01).expect("room");
        cache.fill_done(claim, true);
        let hit = cache.lookup(SlotAddress(6998), 0).expect("the page read behind");
        cache.hit(hit);
        assert_eq!(cache.window(SlotAddress(6997)), Window { before: 3, after: 0 });
    }

    #[test]
    fn reads_in_flight_are_never_given_to_another_read() {
        let mut cache = ReadaheadCache::new(1);
        let len = ReadaheadCache::pages_for(1);
        let mut claims = Vec::new();
        for _ in 0..len / 2 {
            claims.push(cache.claim(SlotAddress(0), 0, 2, 0, 0b10).expect("room"));
        }
        assert!(cache.claim(SlotAddress(0), 0, 2, 0, 0b10).is_none(), "every page is being filled");
        cache.fill_done(claims.remove(0), false);
        let again = cache.claim(SlotAddress(7), 0, 2, 0, 0).expect("the freed pages");
        assert_eq!(again.first, 0);
        assert_eq!(cache.counts(), (0, len as usize));
    }
}
