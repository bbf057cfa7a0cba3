//! The page-mapped FTL of the block SSD, without time: the L2P and P2L maps, valid
//! counts per superblock, the host and GC write points, victim selection and the
//! page-by-page cleaning of a victim. `BlockSsd` decides when to clean and what it costs.
//!
//! Host writes and GC copies go to separate write points (separate open superblocks), as
//! in most FTLs: data the GC relocates is colder than fresh host data, and mixing them
//! would make the victim choice see a blend of both.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Marks an unmapped logical page (L2P) or a physical page holding no valid data (P2L).
pub(crate) const UNMAPPED: u32 = u32::MAX;
const NONE: u32 = u32::MAX;

/// How the GC picks the superblock to clean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Victim {
    /// The closed superblock with the fewest valid pages.
    #[default]
    Greedy,
    /// The superblock closed longest ago (a circular log).
    Fifo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SuperblockState {
    Free,
    /// Being filled by the host or the GC write point.
    Open,
    /// Full; a cleaning candidate.
    Closed,
    /// Being cleaned.
    Victim,
}

/// Which write point a page goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Host,
    Gc,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct WritePoint {
    pub superblock: u32,
    /// Next page offset to program inside the superblock.
    pub next_page: u32,
}

/// One step of cleaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GcStep {
    /// A valid page moved from physical page `from` to `to`.
    Copied { from: u32, to: u32 },
    /// The victim held no valid page any more and is free again (after its erase).
    Erased { superblock: u32 },
    /// Nothing to clean: no closed superblock (greedy: none with an invalid page).
    Idle,
}

#[derive(Clone, Debug)]
pub(crate) struct Ftl {
    pages_per_superblock: u32,
    policy: Victim,
    l2p: Vec<u32>,
    p2l: Vec<u32>,
    valid: Vec<u32>,
    state: Vec<SuperblockState>,
    free: VecDeque<u32>,
    host: Option<WritePoint>,
    gc: Option<WritePoint>,
    /// The superblock being cleaned and the next page offset to look at.
    victim: Option<(u32, u32)>,
    /// Valid pages the current victim had when it was chosen.
    victim_valid_chosen: u32,
    /// Greedy: closed superblocks in intrusive lists by valid count.
    bucket_head: Vec<u32>,
    bucket_next: Vec<u32>,
    bucket_prev: Vec<u32>,
    /// Fifo: closed superblocks in the order they were closed.
    closed_order: VecDeque<u32>,
    live_pages: u64,
}

impl Ftl {
    pub fn new(logical_pages: u64, superblocks: u32, pages_per_superblock: u32, policy: Victim) -> Ftl {
        let physical = superblocks as u64 * pages_per_superblock as u64;
        assert!(physical < UNMAPPED as u64, "{physical} physical pages do not fit the u32 maps");
        assert!(logical_pages < physical, "logical space must be smaller than physical space");
        Ftl {
            pages_per_superblock,
            policy,
            l2p: vec![UNMAPPED; logical_pages as usize],
            p2l: vec![UNMAPPED; physical as usize],
            valid: vec![0; superblocks as usize],
            state: vec![SuperblockState::Free; superblocks as usize],
            free: (0..superblocks).collect(),
            host: None,
            gc: None,
            victim: None,
            victim_valid_chosen: 0,
            bucket_head: vec![NONE; pages_per_superblock as usize + 1],
            bucket_next: vec![NONE; superblocks as usize],
            bucket_prev: vec![NONE; superblocks as usize],
            closed_order: VecDeque::with_capacity(superblocks as usize),
            live_pages: 0,
        }
    }

    pub fn superblocks(&self) -> u32 {
        self.valid.len() as u32
    }

    pub fn logical_pages(&self) -> u64 {
        self.l2p.len() as u64
    }

    pub fn free_superblocks(&self) -> u32 {
        self.free.len() as u32
    }

    /// Logical pages currently mapped.
    pub fn live_pages(&self) -> u64 {
        self.live_pages
    }

    /// The physical page holding `lpn`, if any.
    pub fn lookup(&self, lpn: u64) -> Option<u32> {
        let ppn = self.l2p[lpn as usize];
        (ppn != UNMAPPED).then_some(ppn)
    }

    pub fn write_point(&self, stream: Stream) -> Option<WritePoint> {
        match stream {
            Stream::Host => self.host,
            Stream::Gc => self.gc,
        }
    }

    pub fn has_victim(&self) -> bool {
        self.victim.is_some()
    }

    /// Valid pages of the superblock being cleaned.
    pub fn victim_valid_pages(&self) -> Option<u32> {
        self.victim.map(|(superblock, _)| self.valid[superblock as usize])
    }

    /// Chooses the next victim if none is being cleaned; returns its valid pages at the
    /// time of the choice, or `None` when no superblock is worth cleaning.
    pub fn choose_victim(&mut self) -> Option<u32> {
        if self.victim.is_none() {
            self.select_victim()?;
        }
        Some(self.victim_valid_chosen)
    }

    /// Pages not holding data and not available to cleaning: free superblocks and the
    /// unwritten rest of the open ones.
    pub fn reserved_pages(&self) -> u64 {
        let open = |point: Option<WritePoint>| point.map_or(0, |p| (self.pages_per_superblock - p.next_page) as u64);
        self.free.len() as u64 * self.pages_per_superblock as u64 + open(self.host) + open(self.gc)
    }

    /// Maps `lpn` to the next page of the host write point; returns that physical page.
    /// The caller keeps at least one free superblock for the GC write point.
    pub fn host_write(&mut self, lpn: u64) -> u32 {
        let old = self.l2p[lpn as usize];
        if old == UNMAPPED {
            self.live_pages += 1;
        } else {
            self.invalidate(old);
        }
        let ppn = self.allocate(Stream::Host);
        self.map_new(lpn, ppn);
        ppn
    }

    /// Unmaps `lpn`; returns whether it was mapped (its page is now invalid).
    pub fn trim(&mut self, lpn: u64) -> bool {
        let old = self.l2p[lpn as usize];
        if old == UNMAPPED {
            return false;
        }
        self.invalidate(old);
        self.l2p[lpn as usize] = UNMAPPED;
        self.live_pages -= 1;
        true
    }

    /// True when the host write point has no room and would take a free superblock.
    pub fn host_needs_superblock(&self) -> bool {
        self.host.is_none()
    }

    /// Does one step of cleaning: picks a victim if none is being cleaned, then moves its
    /// next valid page to the GC write point, or frees it once it holds none.
    pub fn gc_step(&mut self) -> GcStep {
        let (victim, mut cursor) = match self.victim {
            Some(v) => v,
            None => match self.select_victim() {
                Some(victim) => (victim, 0),
                None => return GcStep::Idle,
            },
        };
        let base = victim as usize * self.pages_per_superblock as usize;
        while cursor < self.pages_per_superblock && self.p2l[base + cursor as usize] == UNMAPPED {
            cursor += 1;
        }
        if cursor == self.pages_per_superblock {
            assert_eq!(self.valid[victim as usize], 0, "victim {victim} cleaned with valid pages left");
            self.state[victim as usize] = SuperblockState::Free;
            self.free.push_back(victim);
            self.victim = None;
            return GcStep::Erased { superblock: victim };
        }
        let from = (base + cursor as usize) as u32;
        let lpn = self.p2l[from as usize];
        self.invalidate(from);
        let to = self.allocate(Stream::Gc);
        self.map_new(lpn as u64, to);
        self.victim = Some((victim, cursor + 1));
        GcStep::Copied { from, to }
    }

    fn select_victim(&mut self) -> Option<u32> {
        let victim = match self.policy {
            Victim::Greedy => {
                // A superblock with every page valid frees nothing: cleaning it is futile.
                let bucket = (0..self.pages_per_superblock as usize).find(|&b| self.bucket_head[b] != NONE)?;
                let victim = self.bucket_head[bucket];
                self.bucket_remove(victim);
                victim
            }
            // A circular log moves on even past a block with every page valid: copying it
            // frees nothing, but the blocks behind it are older still.
            Victim::Fifo => self.closed_order.pop_front()?,
        };
        self.state[victim as usize] = SuperblockState::Victim;
        self.victim = Some((victim, 0));
        self.victim_valid_chosen = self.valid[victim as usize];
        Some(victim)
    }

    fn map(&mut self, lpn: u64, ppn: u32) {
        self.l2p[lpn as usize] = ppn;
        self.p2l[ppn as usize] = lpn as u32;
        let superblock = ppn / self.pages_per_superblock;
        self.valid[superblock as usize] += 1;
    }

    fn invalidate(&mut self, ppn: u32) {
        debug_assert_ne!(self.p2l[ppn as usize], UNMAPPED, "invalidating a page that holds no data");
        self.p2l[ppn as usize] = UNMAPPED;
        let superblock = ppn / self.pages_per_superblock;
        let closed = self.state[superblock as usize] == SuperblockState::Closed;
        if closed && self.policy == Victim::Greedy {
            self.bucket_remove(superblock);
            self.valid[superblock as usize] -= 1;
            self.bucket_insert(superblock);
        } else {
            self.valid[superblock as usize] -= 1;
        }
    }

    fn allocate(&mut self, stream: Stream) -> u32 {
        let point = match stream {
            Stream::Host => self.host,
            Stream::Gc => self.gc,
        };
        let mut current = match point {
            Some(current) => current,
            None => {
                let superblock = self.free.pop_front().unwrap_or_else(|| {
                    panic!("no free superblock for the {stream:?} write point: the GC reserve was not kept")
                });
                debug_assert_eq!(self.valid[superblock as usize], 0);
                self.state[superblock as usize] = SuperblockState::Open;
                WritePoint { superblock, next_page: 0 }
            }
        };
        let ppn = current.superblock * self.pages_per_superblock + current.next_page;
        current.next_page += 1;
        let full = current.next_page == self.pages_per_superblock;
        let point = if full { None } else { Some(current) };
        match stream {
            Stream::Host => self.host = point,
            Stream::Gc => self.gc = point,
        }
        ppn
    }

    /// Maps `lpn` to the freshly allocated `ppn`, closing its superblock if that was its
    /// last page (after mapping, so the superblock enters its valid-count bucket right).
    fn map_new(&mut self, lpn: u64, ppn: u32) {
        self.map(lpn, ppn);
        if (ppn + 1) % self.pages_per_superblock == 0 {
            self.close(ppn / self.pages_per_superblock);
        }
    }

    fn close(&mut self, superblock: u32) {
        self.state[superblock as usize] = SuperblockState::Closed;
        match self.policy {
            Victim::Greedy => self.bucket_insert(superblock),
            Victim::Fifo => self.closed_order.push_back(superblock),
        }
    }

    fn bucket_insert(&mut self, superblock: u32) {
        let bucket = self.valid[superblock as usize] as usize;
        let head = self.bucket_head[bucket];
        self.bucket_next[superblock as usize] = head;
        self.bucket_prev[superblock as usize] = NONE;
        if head != NONE {
            self.bucket_prev[head as usize] = superblock;
        }
        self.bucket_head[bucket] = superblock;
    }

    fn bucket_remove(&mut self, superblock: u32) {
        let bucket = self.valid[superblock as usize] as usize;
        let (prev, next) = (self.bucket_prev[superblock as usize], self.bucket_next[superblock as usize]);
        if prev == NONE {
            debug_assert_eq!(self.bucket_head[bucket], superblock);
            self.bucket_head[bucket] = next;
        } else {
            self.bucket_next[prev as usize] = next;
        }
        if next != NONE {
            self.bucket_prev[next as usize] = prev;
        }
    }

    /// Recomputes everything from the maps; panics on any disagreement. O(physical).
    pub fn check_invariants(&self) {
        let mut valid = vec![0u32; self.valid.len()];
        let mut live = 0u64;
        for (lpn, &ppn) in self.l2p.iter().enumerate() {
            if ppn != UNMAPPED {
                assert_eq!(self.p2l[ppn as usize] as usize, lpn, "L2P and P2L disagree for lpn {lpn}");
                valid[(ppn / self.pages_per_superblock) as usize] += 1;
                live += 1;
            }
        }
        let mapped_physical = self.p2l.iter().filter(|&&lpn| lpn != UNMAPPED).count() as u64;
        assert_eq!(mapped_physical, live, "a physical page claims a logical page that points elsewhere");
        assert_eq!(valid, self.valid, "valid counts drifted");
        assert_eq!(live, self.live_pages, "live page count drifted");
        for &superblock in &self.free {
            assert_eq!(self.state[superblock as usize], SuperblockState::Free);
            assert_eq!(self.valid[superblock as usize], 0, "free superblock {superblock} holds valid pages");
        }
        if self.policy == Victim::Greedy {
            let mut in_buckets = 0;
            for (bucket, &head) in self.bucket_head.iter().enumerate() {
                let mut cursor = head;
                while cursor != NONE {
                    assert_eq!(self.valid[cursor as usize] as usize, bucket, "superblock in the wrong bucket");
                    assert_eq!(self.state[cursor as usize], SuperblockState::Closed);
                    in_buckets += 1;
                    cursor = self.bucket_next[cursor as usize];
                }
            }
            let closed = self.state.iter().filter(|&&s| s == SuperblockState::Closed).count();
            assert_eq!(in_buckets, closed, "every closed superblock is in exactly one bucket");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrite_invalidates_and_gc_skips_invalid_pages() {
        let mut ftl = Ftl::new(6, 4, 4, Victim::Greedy);
        for lpn in 0..6 {
            ftl.host_write(lpn);
        }
        // Superblock 0 holds lpns 0..4; overwriting 0, 1, 2 leaves it one valid page.
        for lpn in 0..3 {
            ftl.host_write(lpn);
        }
        ftl.check_invariants();
        assert!(matches!(ftl.gc_step(), GcStep::Copied { from: 3, .. }), "only lpn 3 is valid in the victim");
        assert_eq!(ftl.gc_step(), GcStep::Erased { superblock: 0 });
        assert_eq!(ftl.live_pages(), 6);
        ftl.check_invariants();
    }

    #[test]
    fn trimmed_pages_are_never_copied() {
        let mut ftl = Ftl::new(7, 4, 4, Victim::Greedy);
        for lpn in 0..4 {
            ftl.host_write(lpn);
        }
        for lpn in 0..4 {
            assert!(ftl.trim(lpn));
        }
        assert!(!ftl.trim(0), "a second trim finds nothing mapped");
        assert_eq!(ftl.gc_step(), GcStep::Erased { superblock: 0 });
        assert_eq!(ftl.live_pages(), 0);
        ftl.check_invariants();
    }

    #[test]
    fn fifo_cleans_in_close_order() {
        let mut ftl = Ftl::new(11, 4, 4, Victim::Fifo);
        for lpn in 0..8 {
            ftl.host_write(lpn);
        }
        // Superblock 1 ends with one valid page and superblock 0 with three, but
        // superblock 0 closed first.
        for lpn in [4, 5, 6, 0] {
            ftl.host_write(lpn);
        }
        assert!(matches!(ftl.gc_step(), GcStep::Copied { from: 1, .. }), "page 0 of superblock 0 is stale");
        ftl.check_invariants();
    }
}
