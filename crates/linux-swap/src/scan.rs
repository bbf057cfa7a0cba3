//! Slot allocation: `get_swap_pages` → `scan_swap_map_slots` (mm/swapfile.c, 5.12) on a
//! `SWP_SOLIDSTATE` area with `cluster_info`.
//!
//! A CPU takes slots in order from its current cluster (`percpu_cluster`); when that is
//! used up it takes the head of the free-cluster list. Clusters that become entirely free
//! join the tail, so allocation sweeps the device. With no free cluster left, the
//! allocator falls back to a linear scan of the `swap_map` from the CPU's
//! `cluster_next_cpu`, wrapping once around `lowest_bit..=highest_bit`.

use crate::device::{PercpuCluster, SlotState, SwapDevice};
use crate::{LATENCY_LIMIT, SWAPFILE_CLUSTER, SWAP_ADDRESS_SPACE_PAGES, SWAP_BATCH};

/// The labels of `scan_swap_map_slots`, whose control flow is a graph of `goto`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Checks,
    Scan,
    Done,
    NoPage,
}

impl SwapDevice {
    /// One slot for a page `cpu` swaps out, or `None` when swap is full
    /// (`get_swap_page` → `get_swap_pages(1)`). The slot is [`SlotState::Swapped`].
    ///
    /// Under `vm_swap_full` the slot may be one the host held as swap cache until this
    /// call (the allocator reclaimed it first), so drain [`SwapDevice::take_reclaimed`]
    /// before checking the slot against the host's own records.
    ///
    /// As in 5.12, `None` can also come while a few slots are free: swap-cached slots
    /// count as used, and the fallback scan never looks at its own base slot (see
    /// `Step::Scan`), so a lone free slot sitting there is missed until the base moves.
    pub fn alloc(&mut self, cpu: u32) -> Option<u64> {
        // A buffer kept across calls, so allocating a slot allocates no memory.
        let mut slot = std::mem::take(&mut self.alloc_scratch);
        slot.clear();
        self.alloc_batch(cpu, 1, &mut slot);
        let got = slot.first().copied();
        self.alloc_scratch = slot;
        got
    }

    /// Up to `count` (≤ `SWAP_BATCH`) slots at once, as `get_swap_pages` hands them to the
    /// per-CPU swap slot cache; appends them to `out` and returns how many.
    pub fn alloc_batch(&mut self, cpu: u32, count: u32, out: &mut Vec<u64>) -> usize {
        assert!(cpu < self.config.cpus, "cpu {cpu} allocates from an area set up for {} CPUs", self.config.cpus);
        assert!((1..=SWAP_BATCH).contains(&count), "get_swap_pages hands out 1..={SWAP_BATCH} slots, not {count}");
        let start = out.len();
        let available = self.nr_swap_pages;
        if available <= 0 {
            self.counters.alloc_failures += 1;
            return 0;
        }
        let goal = (count as i64).min(available);
        self.nr_swap_pages -= goal;
        // A full area is off the avail list (`!si->highest_bit`).
        let got = if self.highest_bit == 0 { 0 } else { self.scan_swap_map_slots(cpu as usize, goal as usize, out) };
        self.nr_swap_pages += goal - got as i64;
        debug_assert_eq!(out.len() - start, got);
        if got == 0 {
            self.counters.alloc_failures += 1;
        }
        self.counters.slots_allocated += got as u64;
        got
    }

    /// `scan_swap_map_slots` with `usage` = a swapped page.
    fn scan_swap_map_slots(&mut self, cpu: usize, goal: usize, out: &mut Vec<u64>) -> usize {
        let mut latency_ration = LATENCY_LIMIT;
        let mut got = 0usize;
        let mut scanned_many = false;
        let mut scan_base = self.cluster_next_cpu[cpu];
        let mut offset = scan_base;
        // Whether `offset` came from the CPU's cluster rather than from a scan.
        let mut from_cluster = self.scan_swap_map_try_ssd_cluster(cpu, &mut offset, &mut scan_base);
        let mut step = if from_cluster { Step::Checks } else { Step::Scan };
        loop {
            match step {
                Step::Checks => {
                    step = Step::Done;
                    let mut conflict_exit = None;
                    while self.scan_swap_map_ssd_cluster_conflict(cpu, offset) {
                        if got > 0 {
                            conflict_exit = Some(Step::Done);
                            break;
                        }
                        if !self.scan_swap_map_try_ssd_cluster(cpu, &mut offset, &mut scan_base) {
                            conflict_exit = Some(Step::Scan);
                            break;
                        }
                        from_cluster = true;
                    }
                    if let Some(exit) = conflict_exit {
                        step = exit;
                        continue;
                    }
                    if self.highest_bit == 0 {
                        step = Step::NoPage;
                        continue;
                    }
                    if offset > self.highest_bit {
                        offset = self.lowest_bit;
                        scan_base = offset;
                    }
                    let state = self.swap_map[offset as usize];
                    if self.swap_full() && state == SlotState::Cached {
                        // Reuse the slot of a swap-cache-only page (`__try_to_reclaim_swap`
                        // with TTRS_ANYWAY): it always succeeds here, the page is not
                        // under writeback.
                        self.reclaim_cached(offset);
                        step = Step::Checks;
                        continue;
                    }
                    if state != SlotState::Free {
                        step = if got == 0 { Step::Scan } else { Step::Done };
                        continue;
                    }
                    self.swap_map[offset as usize] = SlotState::Swapped;
                    self.inc_cluster_info_page(offset);
                    self.swap_range_alloc(offset);
                    out.push(offset);
                    got += 1;
                    if !from_cluster {
                        self.counters.slots_from_scan += 1;
                    }
                    if got == goal || offset >= self.highest_bit {
                        continue; // done
                    }
                    latency_ration -= 1;
                    if latency_ration < 0 {
                        continue; // "time to take a break": we already have a slot
                    }
                    if self.scan_swap_map_try_ssd_cluster(cpu, &mut offset, &mut scan_base) {
                        from_cluster = true;
                        step = Step::Checks;
                        continue;
                    }
                    // Fragmented: scan a little further unless we already scanned many.
                    from_cluster = false;
                    if !scanned_many {
                        let scan_limit = if offset < scan_base { scan_base } else { self.highest_bit };
                        while offset <= scan_limit {
                            latency_ration -= 1;
                            if latency_ration <= 0 {
                                break;
                            }
                            self.counters.slots_scanned += 1;
                            if self.swap_map[offset as usize] == SlotState::Free {
                                step = Step::Checks;
                                break;
                            }
                            offset += 1;
                        }
                    }
                }
                Step::Done => {
                    self.set_cluster_next(cpu, offset + 1);
                    return got;
                }
                Step::Scan => {
                    // `while (++offset <= highest_bit)`: the scan starts *after* its base,
                    // and the wrap-around stops *before* it, so the base slot itself is
                    // not examined when the cluster path failed at once (a 5.12 quirk:
                    // after a scan allocation, consecutive allocations skip a slot).
                    from_cluster = false;
                    step = Step::NoPage;
                    let usable = |device: &mut SwapDevice, slot: u64| {
                        device.counters.slots_scanned += 1;
                        let state = device.swap_map[slot as usize];
                        state == SlotState::Free || (state == SlotState::Cached && device.swap_full())
                    };
                    offset += 1;
                    while offset <= self.highest_bit {
                        if usable(self, offset) {
                            step = Step::Checks;
                            break;
                        }
                        latency_ration -= 1;
                        if latency_ration < 0 {
                            latency_ration = LATENCY_LIMIT;
                            scanned_many = true;
                        }
                        offset += 1;
                    }
                    if step == Step::Checks {
                        continue;
                    }
                    offset = self.lowest_bit;
                    while offset < scan_base {
                        if usable(self, offset) {
                            step = Step::Checks;
                            break;
                        }
                        latency_ration -= 1;
                        if latency_ration < 0 {
                            latency_ration = LATENCY_LIMIT;
                            scanned_many = true;
                        }
                        offset += 1;
                    }
                }
                Step::NoPage => return got,
            }
        }
    }

    /// `scan_swap_map_try_ssd_cluster`: the next free slot of the CPU's cluster, taking the
    /// head of the free list when it has none; with no free cluster, run the scheduled
    /// discards synchronously and retry; `false` when no cluster is to be had.
    fn scan_swap_map_try_ssd_cluster(&mut self, cpu: usize, offset: &mut u64, scan_base: &mut u64) -> bool {
        loop {
            let mut percpu = match self.percpu_cluster[cpu] {
                Some(percpu) => percpu,
                None => {
                    if let Some(head) = self.free_clusters.first() {
                        // The cluster stays on the free list until its first slot is
                        // taken (`inc_cluster_info_page` → `alloc_cluster`).
                        self.counters.clusters_taken += 1;
                        PercpuCluster { index: head, next: head as u64 * SWAPFILE_CLUSTER }
                    } else if !self.discard_clusters.is_empty() {
                        self.swap_do_scheduled_discard();
                        *scan_base = self.cluster_next_cpu[cpu];
                        *offset = *scan_base;
                        continue;
                    } else {
                        return false;
                    }
                }
            };
            // Other CPUs may have used our cluster while no free cluster was left.
            let end = ((percpu.index as u64 + 1) * SWAPFILE_CLUSTER).min(self.config.slots);
            let mut next = percpu.next;
            while next < end && self.swap_map[next as usize] != SlotState::Free {
                next += 1;
            }
            if next >= end {
                self.percpu_cluster[cpu] = None;
                continue;
            }
            percpu.next = next + 1;
            self.percpu_cluster[cpu] = Some(percpu);
            *offset = next;
            *scan_base = next;
            return true;
        }
    }

    /// `scan_swap_map_ssd_cluster_conflict`: a slot in a free cluster other than the list
    /// head must not be used (it would corrupt the list); the CPU drops its cluster.
    fn scan_swap_map_ssd_cluster_conflict(&mut self, cpu: usize, offset: u64) -> bool {
        let index = (offset / SWAPFILE_CLUSTER) as u32;
        let conflict = match self.free_clusters.first() {
            Some(head) => index != head && self.clusters[index as usize].free,
            None => false,
        };
        if conflict {
            self.percpu_cluster[cpu] = None;
        }
        conflict
    }

    /// `set_cluster_next` on an SSD: the per-CPU scan base moves on, but crossing into
    /// another 64 MiB address-space trunk picks a random trunk instead.
    fn set_cluster_next(&mut self, cpu: usize, next: u64) {
        let previous = self.cluster_next_cpu[cpu];
        let trunk_shift = SWAP_ADDRESS_SPACE_PAGES.trailing_zeros();
        let mut next = next;
        if previous >> trunk_shift != next >> trunk_shift {
            if self.highest_bit <= self.lowest_bit {
                return; // no free swap slots available
            }
            next = self.lowest_bit + self.prandom.below(self.highest_bit - self.lowest_bit + 1);
            next = next / SWAP_ADDRESS_SPACE_PAGES * SWAP_ADDRESS_SPACE_PAGES;
            next = next.max(self.lowest_bit);
        }
        self.cluster_next_cpu[cpu] = next;
    }

    /// `__try_to_reclaim_swap` of a swap-cache-only slot: the page stays in memory, the
    /// slot is freed for reuse and reported through `take_reclaimed`.
    fn reclaim_cached(&mut self, slot: u64) {
        self.counters.cached_reclaimed += 1;
        self.reclaimed.push(slot);
        self.swap_entry_free(slot);
    }
}
