//! The model's invariants, checked against a recount of the `swap_map` (tests call it
//! after operations; it is O(slots)).

use crate::device::{SlotState, SwapDevice};
use crate::SWAPFILE_CLUSTER;

impl SwapDevice {
    /// Checks every invariant of the model against a recount (O(slots): for tests).
    pub fn check_invariants(&self) {
        let max = self.config.slots;
        let mut inuse = 0u64;
        let mut recount = vec![0u32; self.clusters.len()];
        for (slot, &state) in self.swap_map.iter().enumerate() {
            let slot = slot as u64;
            assert_eq!(state == SlotState::Header, slot == 0, "slot {slot} is {state:?}: only slot 0 is the header");
            if matches!(state, SlotState::Swapped | SlotState::Cached) {
                inuse += 1;
            }
            if matches!(state, SlotState::Swapped | SlotState::Cached | SlotState::Header) {
                recount[(slot / SWAPFILE_CLUSTER) as usize] += 1;
            }
            if matches!(state, SlotState::Free | SlotState::Discarding) {
                assert!(
                    (self.lowest_bit..=self.highest_bit).contains(&slot),
                    "free slot {slot} outside lowest_bit {}..=highest_bit {}",
                    self.lowest_bit,
                    self.highest_bit
                );
            }
        }
        let last = recount.len() - 1;
        recount[last] += (recount.len() as u64 * SWAPFILE_CLUSTER - max) as u32;
        assert_eq!(inuse, self.inuse_pages, "inuse_pages disagrees with the swap_map");
        assert_eq!(
            self.nr_swap_pages,
            (self.pages - self.inuse_pages) as i64,
            "nr_swap_pages disagrees with inuse_pages"
        );
        // List membership per cluster; a cluster on a list twice, or on both, is a bug.
        let mut on_free = vec![false; self.clusters.len()];
        let mut on_discard = vec![false; self.clusters.len()];
        for (list, membership) in [(&self.free_clusters, &mut on_free), (&self.discard_clusters, &mut on_discard)] {
            let mut members = 0;
            for index in list.iter(&self.clusters) {
                assert!(!membership[index as usize], "cluster {index} is on a list twice");
                membership[index as usize] = true;
                members += 1;
            }
            assert_eq!(members, list.len(), "a cluster list miscounts its members");
        }
        for (index, cluster) in self.clusters.iter().enumerate() {
            assert_eq!(cluster.count, recount[index], "cluster {index} count disagrees with the swap_map");
            assert_eq!(cluster.free, on_free[index], "cluster {index}: free flag disagrees with the free list");
            let first = index as u64 * SWAPFILE_CLUSTER;
            let end = (first + SWAPFILE_CLUSTER).min(max);
            let states = &self.swap_map[first as usize..end as usize];
            if cluster.free {
                assert!(states.iter().all(|&s| s == SlotState::Free), "free cluster {index} has a slot in use");
            }
            if on_discard[index] {
                assert!(
                    states.iter().all(|&s| s == SlotState::Discarding),
                    "cluster {index} waits for discard with a slot in use"
                );
            } else {
                assert!(
                    states.iter().all(|&s| s != SlotState::Discarding),
                    "cluster {index} has discarding slots off the discard list"
                );
            }
            assert!(!(on_free[index] && on_discard[index]), "cluster {index} is both free and waiting for discard");
            if cluster.count == 0 {
                assert!(cluster.free || on_discard[index], "empty cluster {index} is on no list");
            }
        }
        for (cpu, percpu) in self.percpu_cluster.iter().enumerate() {
            if let Some(percpu) = percpu {
                assert!(
                    (percpu.index as usize) < self.clusters.len(),
                    "cpu {cpu} has cluster {} past the end",
                    percpu.index
                );
                let first = percpu.index as u64 * SWAPFILE_CLUSTER;
                assert!(
                    (first..=first + SWAPFILE_CLUSTER).contains(&percpu.next),
                    "cpu {cpu}: next slot outside its cluster"
                );
            }
        }
    }
}
