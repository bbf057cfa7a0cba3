//! The swap area (`swap_info_struct`): `swap_map`, clusters, counters, freeing, the
//! swap-cache rule and discards. Allocation lives in `scan.rs`.

use crate::cluster::{ClusterInfo, ClusterList};
use crate::config::{ConfigError, Discard, SwapConfig};
use crate::rng::Prandom;
use crate::{FINE_DISCARD_SLOTS, SWAPFILE_CLUSTER, SWAP_CLUSTER_COLS};

/// What the `swap_map` says of one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotState {
    /// `swap_map[offset] == 0`: can be allocated.
    Free,
    /// Slot 0 (`SWAP_MAP_BAD`): the swap header, never allocated.
    Header,
    /// A swap PTE points at the slot (count ≥ 1): the slot holds the page's data; the page
    /// may also sit in memory as swap cache (read ahead, not yet mapped).
    Swapped,
    /// Swap cache only (`swap_map == SWAP_HAS_CACHE`): the page is mapped in memory and
    /// the slot keeps a clean copy, so evicting the page again needs no write.
    Cached,
    /// `SWAP_MAP_BAD` set by `swap_cluster_schedule_discard`: the slot's cluster is free
    /// but waits for its discard, and no allocator may take it until then.
    Discarding,
}

/// The outcome of [`SwapDevice::swap_in`] for the faulting slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapIn {
    /// The slot stays allocated as swap cache ([`SlotState::Cached`]).
    Cached,
    /// The slot was freed (`try_to_free_swap`): swap was full, or the fault was a write.
    Freed,
}

/// Totals since `swapon`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapCounters {
    /// Slots handed out by `alloc`/`alloc_batch`.
    pub slots_allocated: u64,
    /// Of those, slots found by the linear scan because no free cluster was left.
    pub slots_from_scan: u64,
    /// `swap_map` entries the fallback scans examined (the kernel's CPU cost of a
    /// fragmented area: a host may charge time per entry).
    pub slots_scanned: u64,
    /// Allocations that found no slot.
    pub alloc_failures: u64,
    /// Slots freed (by the host, by the swap-in rule, or reclaimed by the allocator).
    pub slots_freed: u64,
    /// Free clusters a CPU took as its current cluster.
    pub clusters_taken: u64,
    /// Swap-cached slots the allocator took back under `vm_swap_full`.
    pub cached_reclaimed: u64,
    /// Swap-ins that kept their slot as swap cache / that freed it.
    pub swap_ins_cached: u64,
    pub swap_ins_freed: u64,
    /// Discard ranges emitted, and the slots they cover.
    pub discards: u64,
    pub discarded_slots: u64,
}

/// One CPU's `percpu_cluster`: its current cluster and the next slot to try in it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PercpuCluster {
    pub(crate) index: u32,
    pub(crate) next: u64,
}

/// One swap area (`swap_info_struct`) on a non-rotational device (`SWP_SOLIDSTATE`).
pub struct SwapDevice {
    pub(crate) config: SwapConfig,
    pub(crate) swap_map: Vec<SlotState>,
    pub(crate) clusters: Vec<ClusterInfo>,
    pub(crate) free_clusters: ClusterList,
    pub(crate) discard_clusters: ClusterList,
    pub(crate) percpu_cluster: Vec<Option<PercpuCluster>>,
    /// `si->cluster_next_cpu`: the per-CPU base of the linear scan.
    pub(crate) cluster_next_cpu: Vec<u64>,
    /// `si->lowest_bit` / `si->highest_bit`: bounds on the free slots (`highest_bit` 0
    /// when none is free).
    pub(crate) lowest_bit: u64,
    pub(crate) highest_bit: u64,
    /// `si->pages` (= `total_swap_pages` with one area) and `si->inuse_pages`.
    pub(crate) pages: u64,
    pub(crate) inuse_pages: u64,
    /// `nr_swap_pages`: free slots minus those `get_swap_pages` is handing out.
    pub(crate) nr_swap_pages: i64,
    pub(crate) prandom: Prandom,
    /// Discards performed and not yet taken by the host.
    pub(crate) discards: Vec<(u64, u32)>,
    pub(crate) reclaimed: Vec<u64>,
    pub(crate) alloc_scratch: Vec<u64>,
    pub(crate) counters: SwapCounters,
}

impl SwapDevice {
    /// A swap area of `slots` slots (slot 0 is the header) with Linux defaults
    /// (`page-cluster` 3). Panics with the reason on a configuration that cannot work;
    /// use [`SwapDevice::with_config`] to get the error instead.
    pub fn new(slots: u64, cpus: u32, discard: Discard) -> SwapDevice {
        SwapDevice::with_config(SwapConfig::new(slots, cpus, discard)).unwrap_or_else(|error| panic!("{error}"))
    }

    /// `swapon`: `read_swap_header`, the SSD set-up and `setup_swap_map_and_extents`.
    pub fn with_config(config: SwapConfig) -> Result<SwapDevice, ConfigError> {
        config.validate()?;
        let max = config.slots;
        let cluster_count = max.div_ceil(SWAPFILE_CLUSTER);
        let mut device = SwapDevice {
            config,
            swap_map: vec![SlotState::Free; max as usize],
            clusters: vec![ClusterInfo::default(); cluster_count as usize],
            free_clusters: ClusterList::default(),
            discard_clusters: ClusterList::default(),
            percpu_cluster: vec![None; config.cpus as usize],
            cluster_next_cpu: Vec::with_capacity(config.cpus as usize),
            lowest_bit: 1,
            highest_bit: max - 1,
            pages: max - 1,
            inuse_pages: 0,
            nr_swap_pages: (max - 1) as i64,
            prandom: Prandom::new(config.seed),
            discards: Vec::new(),
            reclaimed: Vec::new(),
            alloc_scratch: Vec::with_capacity(1),
            counters: SwapCounters::default(),
        };
        // swapon: "select a random position to start with to help wear leveling SSD".
        for _ in 0..config.cpus {
            let base = 1 + device.prandom.below(device.highest_bit);
            device.cluster_next_cpu.push(base);
        }
        // The header slot and the slots past the end of the last cluster count as used,
        // so their clusters never become free.
        device.swap_map[0] = SlotState::Header;
        device.clusters[0].count += 1;
        let past_end = cluster_count * SWAPFILE_CLUSTER - max;
        device.clusters[cluster_count as usize - 1].count += past_end as u32;
        // The free list is filled column by column (`SWAP_CLUSTER_COLS`) starting at the
        // column of `si->cluster_next`, which stays 1 on an SSD: column 0.
        let rows = cluster_count.div_ceil(SWAP_CLUSTER_COLS);
        for column in 0..SWAP_CLUSTER_COLS {
            for row in 0..rows {
                let index = row * SWAP_CLUSTER_COLS + column;
                if index >= cluster_count || device.clusters[index as usize].count != 0 {
                    continue;
                }
                device.clusters[index as usize].free = true;
                device.free_clusters.add_tail(&mut device.clusters, index as u32);
            }
        }
        Ok(device)
    }

    pub fn config(&self) -> &SwapConfig {
        &self.config
    }

    /// Slots of the area including the header (`si->max`).
    pub fn slots(&self) -> u64 {
        self.config.slots
    }

    /// Usable slots (`total_swap_pages`: all but the header).
    pub fn total_swap_pages(&self) -> u64 {
        self.pages
    }

    /// Slots in use (`si->inuse_pages`): swapped and swap-cached; the header is not counted.
    pub fn used(&self) -> u64 {
        self.inuse_pages
    }

    /// Free slots (`nr_swap_pages`), including those of clusters waiting for discard.
    pub fn free_slots(&self) -> u64 {
        self.nr_swap_pages.max(0) as u64
    }

    /// Clusters on the free list / waiting for their discard.
    pub fn free_clusters(&self) -> u32 {
        self.free_clusters.len()
    }

    pub fn discard_pending_clusters(&self) -> u32 {
        self.discard_clusters.len()
    }

    pub fn state(&self, slot: u64) -> SlotState {
        self.check_slot(slot);
        self.swap_map[slot as usize]
    }

    pub fn counters(&self) -> SwapCounters {
        self.counters
    }

    /// `vm_swap_full()` (include/linux/swap.h): `nr_swap_pages * 2 < total_swap_pages`,
    /// the paper's 50 % "swap reclamation cutoff". With another cutoff c %: free slots
    /// below (100 − c) % of all (integer arithmetic, so 50 is exactly the kernel's test).
    pub fn swap_full(&self) -> bool {
        let cutoff = self.config.swap_full_cutoff_percent as i64;
        self.nr_swap_pages * 100 < self.pages as i64 * (100 - cutoff)
    }

    /// The slot's data is no longer needed: the page was freed, or a swap-cached page was
    /// written to (`do_wp_page` → `reuse_swap_page` drops it from the swap cache).
    /// `swap_entry_free` and, through `dec_cluster_info_page`, `free_cluster`.
    pub fn free(&mut self, slot: u64) {
        self.check_slot(slot);
        let state = self.swap_map[slot as usize];
        assert!(
            matches!(state, SlotState::Swapped | SlotState::Cached),
            "free of swap slot {slot} which is {state:?}: only a swapped or swap-cached slot can be freed (double free?)"
        );
        self.swap_entry_free(slot);
    }

    /// A fault brought the page of `slot` into memory and mapped it (`do_swap_page`):
    /// `swap_free` drops the PTE's reference, leaving the page in the swap cache; then the
    /// slot is freed at once (`try_to_free_swap`) when `vm_swap_full()`, or when the fault
    /// is a write (`reuse_swap_page` drops the swap cache of a page about to be dirtied).
    pub fn swap_in(&mut self, slot: u64, write: bool) -> SwapIn {
        self.check_slot(slot);
        let state = self.swap_map[slot as usize];
        assert!(
            state == SlotState::Swapped,
            "swap-in of slot {slot} which is {state:?}: only a swapped slot has a page to fault in"
        );
        self.swap_map[slot as usize] = SlotState::Cached;
        if write || self.swap_full() {
            self.counters.swap_ins_freed += 1;
            self.swap_entry_free(slot);
            SwapIn::Freed
        } else {
            self.counters.swap_ins_cached += 1;
            SwapIn::Cached
        }
    }

    /// A clean swap-cached page is evicted again: reclaim unmaps it to a swap PTE
    /// (`try_to_unmap` → `swap_duplicate`) and drops it from the swap cache
    /// (`__remove_mapping` → `put_swap_page`). No write: the slot still holds the data.
    pub fn evict_cached(&mut self, slot: u64) {
        self.check_slot(slot);
        let state = self.swap_map[slot as usize];
        assert!(
            state == SlotState::Cached,
            "eviction without write of slot {slot} which is {state:?}: only a swap-cached slot holds the page's data"
        );
        self.swap_map[slot as usize] = SlotState::Swapped;
    }

    /// Moves the discard ranges `(first slot, slots)` to TRIM into `out`. Runs the
    /// scheduled cluster discards first (`swap_discard_work` → `swap_do_scheduled_discard`),
    /// after which those clusters are free again. Issue the TRIMs before any write to a
    /// slot allocated after this call's predecessor.
    pub fn take_discards(&mut self, out: &mut Vec<(u64, u32)>) {
        self.swap_do_scheduled_discard();
        out.append(&mut self.discards);
    }

    /// Moves into `out` the swap-cached slots the allocator reclaimed for reuse
    /// (`scan_swap_map_slots` → `__try_to_reclaim_swap` under `vm_swap_full()`): their
    /// pages are still in memory but no longer have a copy on swap.
    pub fn take_reclaimed(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.reclaimed);
    }

    pub(crate) fn check_slot(&self, slot: u64) {
        assert!(slot < self.config.slots, "swap slot {slot} is past the end of the area ({} slots)", self.config.slots);
    }

    /// `swap_entry_free`: clear the map entry, `dec_cluster_info_page`, `swap_range_free`.
    pub(crate) fn swap_entry_free(&mut self, slot: u64) {
        self.swap_map[slot as usize] = SlotState::Free;
        self.dec_cluster_info_page(slot);
        self.swap_range_free(slot);
        self.counters.slots_freed += 1;
        if self.config.discard == Discard::Fine8 {
            self.fine_discard(slot);
        }
    }

    /// The paper's 8-slot TRIM: once every slot of the aligned group is free.
    fn fine_discard(&mut self, slot: u64) {
        let first = slot & !(FINE_DISCARD_SLOTS - 1);
        let end = first + FINE_DISCARD_SLOTS;
        if end > self.config.slots {
            return; // a partial group at the end is never trimmed
        }
        if self.swap_map[first as usize..end as usize].iter().all(|&state| state == SlotState::Free) {
            self.emit_discard(first, FINE_DISCARD_SLOTS as u32);
        }
    }

    fn emit_discard(&mut self, first: u64, slots: u32) {
        self.counters.discards += 1;
        self.counters.discarded_slots += slots as u64;
        self.discards.push((first, slots));
    }

    /// `inc_cluster_info_page`, with `alloc_cluster` when the cluster was free.
    pub(crate) fn inc_cluster_info_page(&mut self, slot: u64) {
        let index = (slot / SWAPFILE_CLUSTER) as u32;
        if self.clusters[index as usize].free {
            // alloc_cluster: a free cluster is only ever used from the head of the list.
            assert_eq!(
                self.free_clusters.first(),
                Some(index),
                "allocation in free cluster {index} which is not the list head"
            );
            self.free_clusters.del_first(&self.clusters);
            let cluster = &mut self.clusters[index as usize];
            cluster.free = false;
            cluster.count = 0;
        }
        let cluster = &mut self.clusters[index as usize];
        assert!((cluster.count as u64) < SWAPFILE_CLUSTER, "cluster {index} counts more slots than it has");
        cluster.count += 1;
    }

    /// `dec_cluster_info_page`; a cluster left empty goes to `free_cluster`.
    fn dec_cluster_info_page(&mut self, slot: u64) {
        let index = (slot / SWAPFILE_CLUSTER) as u32;
        let cluster = &mut self.clusters[index as usize];
        assert!(cluster.count > 0, "cluster {index} freed a slot while counting none");
        cluster.count -= 1;
        if cluster.count == 0 {
            self.free_cluster(index);
        }
    }

    /// `free_cluster`: with `SWP_PAGE_DISCARD` the cluster waits for its discard
    /// (`swap_cluster_schedule_discard` marks its slots bad so no scan takes them);
    /// otherwise it joins the tail of the free list (`__free_cluster`).
    fn free_cluster(&mut self, index: u32) {
        if self.config.discard == Discard::Pages {
            let first = index as u64 * SWAPFILE_CLUSTER;
            self.swap_map[first as usize..(first + SWAPFILE_CLUSTER) as usize].fill(SlotState::Discarding);
            self.discard_clusters.add_tail(&mut self.clusters, index);
        } else {
            self.free_cluster_to_list(index);
        }
    }

    /// `__free_cluster`.
    fn free_cluster_to_list(&mut self, index: u32) {
        self.clusters[index as usize].free = true;
        self.free_clusters.add_tail(&mut self.clusters, index);
    }

    /// `swap_do_scheduled_discard`: discard each waiting cluster in order, then free it.
    pub(crate) fn swap_do_scheduled_discard(&mut self) {
        while let Some(index) = self.discard_clusters.del_first(&self.clusters) {
            let first = index as u64 * SWAPFILE_CLUSTER;
            self.emit_discard(first, SWAPFILE_CLUSTER as u32);
            self.free_cluster_to_list(index);
            self.swap_map[first as usize..(first + SWAPFILE_CLUSTER) as usize].fill(SlotState::Free);
        }
    }

    /// `swap_range_alloc` for one slot.
    pub(crate) fn swap_range_alloc(&mut self, slot: u64) {
        if slot == self.lowest_bit {
            self.lowest_bit += 1;
        }
        if slot == self.highest_bit {
            self.highest_bit -= 1;
        }
        self.inuse_pages += 1;
        if self.inuse_pages == self.pages {
            self.lowest_bit = self.config.slots;
            self.highest_bit = 0;
        }
    }

    /// `swap_range_free` for one slot.
    fn swap_range_free(&mut self, slot: u64) {
        if slot < self.lowest_bit {
            self.lowest_bit = slot;
        }
        if slot > self.highest_bit {
            self.highest_bit = slot;
        }
        self.nr_swap_pages += 1;
        self.inuse_pages -= 1;
    }
}
