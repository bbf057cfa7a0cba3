//! The allocator's rules, each pinned by a scenario small enough to reason about.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_linux_swap::{
    ConfigError, Discard, SlotState, SwapConfig, SwapDevice, SwapIn, FINE_DISCARD_SLOTS, SWAPFILE_CLUSTER,
    SWAP_CLUSTER_COLS,
};

const C: u64 = SWAPFILE_CLUSTER;

/// The free-list order `setup_swap_map_and_extents` builds: column by column.
fn initial_cluster_order(clusters: u64) -> Vec<u64> {
    let rows = clusters.div_ceil(SWAP_CLUSTER_COLS);
    let mut order = Vec::new();
    for column in 0..SWAP_CLUSTER_COLS {
        for row in 0..rows {
            let index = row * SWAP_CLUSTER_COLS + column;
            if index != 0 && index < clusters {
                order.push(index);
            }
        }
    }
    order
}

fn alloc_n(swap: &mut SwapDevice, cpu: u32, n: u64) -> Vec<u64> {
    (0..n).map(|_| swap.alloc(cpu).expect("a free slot")).collect()
}

#[test]
fn a_new_area_has_only_the_header_in_use() {
    let swap = SwapDevice::new(10 * C, 2, Discard::None);
    assert_eq!(swap.state(0), SlotState::Header);
    assert_eq!(swap.used(), 0);
    assert_eq!(swap.total_swap_pages(), 10 * C - 1);
    assert_eq!(swap.free_slots(), 10 * C - 1);
    // Cluster 0 holds the header, so it is never free.
    assert_eq!(swap.free_clusters(), 9);
    swap.check_invariants();
}

#[test]
fn bad_configurations_name_the_fix() {
    let error = SwapDevice::with_config(SwapConfig::new(1, 1, Discard::None)).err().unwrap();
    assert_eq!(error, ConfigError::TooFewSlots { slots: 1 });
    assert!(error.to_string().contains("at least 2 slots"), "{error}");
    let error = SwapDevice::with_config(SwapConfig::new(100, 0, Discard::None)).err().unwrap();
    assert!(error.to_string().contains("cpus to 1"), "{error}");
    let config = SwapConfig { page_cluster: 12, ..SwapConfig::new(100, 1, Discard::None) };
    assert!(SwapDevice::with_config(config).err().unwrap().to_string().contains("Linux default 3"));
}

#[test]
fn one_cpu_fills_its_cluster_in_order_then_takes_the_free_list_head() {
    let clusters = 70u64;
    let mut swap = SwapDevice::new(clusters * C, 1, Discard::None);
    let slots = alloc_n(&mut swap, 0, (clusters - 1) * C);
    let order = initial_cluster_order(clusters);
    assert_eq!(&order[..4], &[32, 64, 1, 33], "the interleaved free list of swapon");
    for (i, &cluster) in order.iter().enumerate() {
        let expected: Vec<u64> = (cluster * C..(cluster + 1) * C).collect();
        assert_eq!(&slots[i * C as usize..(i + 1) * C as usize], &expected[..], "cluster #{i} is {cluster}");
    }
    assert_eq!(swap.counters().clusters_taken, clusters - 1);
    assert_eq!(swap.counters().slots_from_scan, 0);
    swap.check_invariants();
}

#[test]
fn emptied_clusters_rejoin_the_tail_so_allocation_sweeps_fifo() {
    let mut swap = SwapDevice::new(8 * C, 1, Discard::None);
    // Clusters 1..=7 in order (fewer than 32 clusters: one row).
    alloc_n(&mut swap, 0, 3 * C); // clusters 1, 2, 3 used
    for slot in 2 * C..3 * C {
        swap.free(slot); // cluster 2 empties: tail, behind 4..=7
    }
    for slot in C..2 * C {
        swap.free(slot); // then cluster 1
    }
    swap.check_invariants();
    let next = alloc_n(&mut swap, 0, 6 * C);
    let clusters: Vec<u64> = next.chunks(C as usize).map(|chunk| chunk[0] / C).collect();
    assert_eq!(clusters, [4, 5, 6, 7, 2, 1]);
    assert!(next.chunks(C as usize).all(|chunk| chunk.windows(2).all(|w| w[1] == w[0] + 1)));
}

#[test]
fn each_cpu_has_its_own_cluster() {
    let mut swap = SwapDevice::new(8 * C, 2, Discard::None);
    let mut by_cpu = [Vec::new(), Vec::new()];
    for i in 0..20 {
        by_cpu[i % 2].push(swap.alloc((i % 2) as u32).unwrap());
    }
    assert_eq!(by_cpu[0], (C..C + 10).collect::<Vec<_>>());
    assert_eq!(by_cpu[1], (2 * C..2 * C + 10).collect::<Vec<_>>());
}

#[test]
fn without_free_clusters_the_linear_scan_finds_scattered_slots() {
    let slots = 4 * C;
    let mut swap = SwapDevice::new(slots, 1, Discard::None);
    alloc_n(&mut swap, 0, slots - 1);
    assert_eq!(swap.alloc(0), None, "every slot is taken");
    assert_eq!(swap.counters().alloc_failures, 1);
    let freed = [5u64, 700, 701, 1500, 2000];
    for slot in freed {
        swap.free(slot);
    }
    let scanned_before = swap.counters().slots_scanned;
    let mut again: Vec<u64> = alloc_n(&mut swap, 0, freed.len() as u64);
    assert!(swap.counters().slots_from_scan >= 3, "{:?}", swap.counters());
    assert!(swap.counters().slots_scanned - scanned_before >= 2000 - 5, "the scans walked the area");
    again.sort_unstable();
    assert_eq!(again, freed);
    assert_eq!(swap.alloc(0), None);
    swap.check_invariants();
}

#[test]
fn the_scan_continues_from_cluster_next() {
    // With the device fragmented, consecutive allocations move forward from the last
    // slot found instead of restarting at the lowest free slot.
    let slots = 4 * C;
    let mut swap = SwapDevice::new(slots, 1, Discard::None);
    alloc_n(&mut swap, 0, slots - 1);
    for slot in [100u64, 900, 1300] {
        swap.free(slot);
    }
    let first = swap.alloc(0).unwrap();
    let second = swap.alloc(0).unwrap();
    let third = swap.alloc(0).unwrap();
    // Whatever the random start, the scan visits the three in cyclic order.
    let cycle = [100u64, 900, 1300];
    let start = cycle.iter().position(|&s| s == first).unwrap();
    assert_eq!([second, third], [cycle[(start + 1) % 3], cycle[(start + 2) % 3]]);
}

#[test]
fn page_discard_trims_only_whole_free_clusters_and_holds_them_until_discarded() {
    let mut swap = SwapDevice::new(8 * C, 1, Discard::Pages);
    alloc_n(&mut swap, 0, 2 * C); // clusters 1 and 2
    let mut trims = Vec::new();
    for slot in C..2 * C - 1 {
        swap.free(slot);
    }
    swap.take_discards(&mut trims);
    assert!(trims.is_empty(), "a cluster with a slot in use is not discarded: {trims:?}");
    swap.free(2 * C - 1);
    assert_eq!(swap.state(C), SlotState::Discarding);
    assert_eq!(swap.discard_pending_clusters(), 1);
    // Still counted free for vm_swap_full, but no allocator can take it.
    assert_eq!(swap.used(), C);
    let next = swap.alloc(0).unwrap();
    assert_eq!(next / C, 3, "allocation moves on past the discarding cluster");
    swap.check_invariants();
    swap.take_discards(&mut trims);
    assert_eq!(trims, [(C, C as u32)]);
    assert_eq!(swap.state(C), SlotState::Free);
    assert_eq!(swap.discard_pending_clusters(), 0);
    swap.check_invariants();
    // The discarded cluster is at the free-list tail: it comes back after 4..=7.
    let rest = alloc_n(&mut swap, 0, 6 * C - 1); // the rest of 3, then 4..=7, then 1
    assert!(rest[..5 * C as usize - 1].iter().all(|&slot| slot / C != 1));
    assert!(rest[5 * C as usize - 1..].iter().all(|&slot| slot / C == 1));
}

#[test]
fn with_no_free_cluster_the_allocator_discards_synchronously() {
    let mut swap = SwapDevice::new(3 * C, 1, Discard::Pages);
    alloc_n(&mut swap, 0, 3 * C - 1);
    for slot in C..2 * C {
        swap.free(slot);
    }
    assert_eq!(swap.free_clusters(), 0);
    let slot = swap.alloc(0).unwrap();
    assert_eq!(slot, C, "the cluster came back through its discard");
    let mut trims = Vec::new();
    swap.take_discards(&mut trims);
    assert_eq!(trims, [(C, C as u32)], "the TRIM was performed before the slot was handed out");
    swap.check_invariants();
}

#[test]
fn fine8_trims_each_aligned_group_once_it_is_all_free() {
    let mut swap = SwapDevice::new(4 * C, 1, Discard::Fine8);
    let slots = alloc_n(&mut swap, 0, 32); // C..C+32
    let mut trims = Vec::new();
    for &slot in &slots[..7] {
        swap.free(slot);
    }
    swap.take_discards(&mut trims);
    assert!(trims.is_empty(), "7 of 8 free: {trims:?}");
    swap.free(slots[7]);
    swap.free(slots[9]);
    swap.take_discards(&mut trims);
    assert_eq!(trims, [(C, 8)]);
    // The header's group never empties, nor does a partial group at the end.
    let mut small = SwapDevice::new(13, 1, Discard::Fine8);
    let taken = alloc_n(&mut small, 0, 12);
    for slot in taken {
        small.free(slot);
    }
    trims.clear();
    small.take_discards(&mut trims);
    assert!(trims.is_empty(), "{trims:?}");
    assert_eq!(FINE_DISCARD_SLOTS, 8);
}

#[test]
fn vm_swap_full_is_exactly_the_half() {
    // 1000 usable slots: full once free * 2 < 1000, i.e. at 501 used.
    let mut swap = SwapDevice::new(1001, 1, Discard::None);
    alloc_n(&mut swap, 0, 500);
    assert!(!swap.swap_full(), "500 free of 1000 is not full");
    swap.alloc(0).unwrap();
    assert!(swap.swap_full(), "499 free of 1000 is full");
    let mut odd = SwapDevice::new(1000, 1, Discard::None); // 999 usable
    alloc_n(&mut odd, 0, 499);
    assert!(!odd.swap_full(), "500 free: 1000 < 999 is false");
    odd.alloc(0).unwrap();
    assert!(odd.swap_full(), "499 free: 998 < 999");
}

#[test]
fn the_cutoff_can_move_as_in_the_papers_figure_4() {
    // Cutoff 25 %: full once free * 100 < 1000 * 75, i.e. at 251 used.
    let config = SwapConfig { swap_full_cutoff_percent: 25, ..SwapConfig::new(1001, 1, Discard::None) };
    let mut swap = SwapDevice::with_config(config).unwrap();
    let slots = alloc_n(&mut swap, 0, 250);
    assert!(!swap.swap_full());
    assert_eq!(swap.swap_in(slots[0], false), SwapIn::Cached);
    swap.alloc(0).unwrap();
    assert!(swap.swap_full());
    assert_eq!(swap.swap_in(slots[1], false), SwapIn::Freed);
    // 100 %: never full; 0 %: full as soon as a slot is used.
    let never = SwapConfig { swap_full_cutoff_percent: 100, ..SwapConfig::new(10, 1, Discard::None) };
    let mut never = SwapDevice::with_config(never).unwrap();
    alloc_n(&mut never, 0, 9);
    assert!(!never.swap_full());
    let always = SwapConfig { swap_full_cutoff_percent: 0, ..SwapConfig::new(10, 1, Discard::None) };
    let mut always = SwapDevice::with_config(always).unwrap();
    assert!(!always.swap_full());
    always.alloc(0).unwrap();
    assert!(always.swap_full());
    let bad = SwapConfig { swap_full_cutoff_percent: 101, ..SwapConfig::new(10, 1, Discard::None) };
    assert!(SwapDevice::with_config(bad).err().unwrap().to_string().contains("Linux: 50"));
}

#[test]
fn swap_in_keeps_the_slot_as_cache_until_swap_is_full() {
    let mut swap = SwapDevice::new(1001, 1, Discard::None);
    let slots = alloc_n(&mut swap, 0, 500);
    assert_eq!(swap.swap_in(slots[0], false), SwapIn::Cached);
    assert_eq!(swap.state(slots[0]), SlotState::Cached);
    assert_eq!(swap.used(), 500, "a swap-cached slot stays in use");
    assert_eq!(swap.swap_in(slots[1], true), SwapIn::Freed, "a write fault drops the swap cache");
    assert_eq!(swap.state(slots[1]), SlotState::Free);
    alloc_n(&mut swap, 0, 2); // 501 used: full
    assert!(swap.swap_full());
    assert_eq!(swap.swap_in(slots[2], false), SwapIn::Freed);
    swap.evict_cached(slots[0]);
    assert_eq!(swap.state(slots[0]), SlotState::Swapped);
    let counters = swap.counters();
    assert_eq!((counters.swap_ins_cached, counters.swap_ins_freed), (1, 2));
    swap.check_invariants();
}

#[test]
fn when_full_the_allocator_reclaims_swap_cache_only_slots() {
    let slots = 2 * C;
    let mut swap = SwapDevice::new(slots, 1, Discard::None);
    let taken = alloc_n(&mut swap, 0, slots - 1);
    // Every slot is used, so swap is full and a swap-in would free its slot: free every
    // other slot first (no cluster empties, so later allocations must scan), so that
    // swap-ins keep their slots as swap cache.
    for &slot in taken.iter().step_by(2) {
        swap.free(slot);
    }
    let cached: Vec<u64> = taken.iter().skip(1).step_by(2).take(300).copied().collect();
    for &slot in &cached {
        assert!(!swap.swap_full());
        assert_eq!(swap.swap_in(slot, false), SwapIn::Cached);
    }
    // Refill until swap is just full: nothing is reclaimed on the way.
    while !swap.swap_full() {
        swap.alloc(0).unwrap();
    }
    assert_eq!(swap.counters().cached_reclaimed, 0);
    assert_eq!(swap.free_slots(), 511);
    // Now the scan takes free slots and the swap-cache-only slots it passes.
    let handed_out = alloc_n(&mut swap, 0, 500);
    let mut reclaimed = Vec::new();
    swap.take_reclaimed(&mut reclaimed);
    assert!(reclaimed.len() > 100, "reclaimed {}", reclaimed.len());
    assert_eq!(reclaimed.len() as u64, swap.counters().cached_reclaimed);
    for slot in &reclaimed {
        assert!(cached.contains(slot), "reclaimed slot {slot} was not swap-cache only");
        assert!(handed_out.contains(slot), "reclaimed slot {slot} was not reused");
        assert_eq!(swap.state(*slot), SlotState::Swapped);
    }
    // A reclaimed slot is freed and taken again: only the others consume free slots.
    assert_eq!(swap.free_slots(), 511 - (500 - reclaimed.len() as u64));
    swap.check_invariants();
}

/// A 3-cluster area where CPU 0's fallback scan will next look at slot `C` (cluster 1's
/// first), which holds a swap-cache-only page, with swap full and slot `2C + 5` free.
fn full_with_a_cached_slot_next_in_the_scan(discard: Discard) -> SwapDevice {
    let mut swap = SwapDevice::new(3 * C, 1, discard);
    // Free list [1, 2]: cluster 1 first, then cluster 2, slot by slot.
    assert_eq!(swap.alloc(0), Some(C));
    assert_eq!(swap.swap_in(C, false), SwapIn::Cached);
    let clusters = alloc_n(&mut swap, 0, 2 * C - 1);
    assert_eq!(clusters, (C + 1..3 * C).collect::<Vec<_>>());
    // No free cluster left: the scan fills cluster 0 from its base one past the last slot,
    // and as each scan starts one past its base, it takes the odd slots, then the even ones.
    let scanned = alloc_n(&mut swap, 0, C - 1);
    assert_eq!(&scanned[..2], &[1, 3]);
    assert_eq!(scanned.last(), Some(&(C - 2)), "the scan base is now C - 1");
    let mut reclaimed = Vec::new();
    swap.take_reclaimed(&mut reclaimed);
    assert!(reclaimed.is_empty(), "no scan has looked at slot C yet: {reclaimed:?}");
    swap.free(2 * C + 5);
    assert!(swap.swap_full());
    swap
}

#[test]
fn when_full_the_allocator_hands_out_the_swap_cache_slot_it_reclaims() {
    // Regression (slots_are_never_handed_out_twice): the slot alloc returns can be one the
    // host still holds as swap cache, reclaimed within the same call; the host learns it
    // from take_reclaimed, so it must apply that before calling the slot a double hand-out.
    let mut swap = full_with_a_cached_slot_next_in_the_scan(Discard::None);
    let used = swap.used();
    assert_eq!(swap.alloc(0), Some(C), "the scan reclaims slot C and takes it (goto checks)");
    let mut reclaimed = Vec::new();
    swap.take_reclaimed(&mut reclaimed);
    assert_eq!(reclaimed, [C]);
    assert_eq!(swap.state(C), SlotState::Swapped);
    assert_eq!(swap.state(2 * C + 5), SlotState::Free);
    assert_eq!(swap.used(), used, "one slot freed by the reclaim, one handed out");
    assert_eq!(swap.counters().cached_reclaimed, 1);
    swap.check_invariants();
}

#[test]
fn with_page_discard_a_reclaim_that_empties_its_cluster_hands_out_another_slot() {
    // When the reclaimed slot was the last in use of its cluster, free_cluster schedules the
    // cluster's discard and marks its slots bad, so the scan moves on past it.
    let mut swap = full_with_a_cached_slot_next_in_the_scan(Discard::Pages);
    for slot in C + 1..2 * C {
        swap.free(slot);
    }
    assert!(swap.swap_full());
    assert_eq!(swap.alloc(0), Some(2 * C + 5));
    let mut reclaimed = Vec::new();
    swap.take_reclaimed(&mut reclaimed);
    assert_eq!(reclaimed, [C]);
    assert_eq!(swap.state(C), SlotState::Discarding);
    swap.check_invariants();
    let mut trims = Vec::new();
    swap.take_discards(&mut trims);
    assert_eq!(trims, [(C, C as u32)]);
    assert_eq!(swap.state(C), SlotState::Free);
    swap.check_invariants();
}

#[test]
fn the_fallback_scan_never_looks_at_its_own_base_slot() {
    // Regression (readahead_windows_are_aligned_and_in_bounds): 5.12's `scan:` loops run
    // `while (++offset <= highest_bit)` and then `while (offset < scan_base)`, so with no
    // free cluster a lone free slot at the CPU's scan base is missed until the base moves.
    let mut swap = SwapDevice::new(3 * C, 1, Discard::None);
    let taken = alloc_n(&mut swap, 0, 3 * C - 1);
    assert_eq!(taken.last(), Some(&(C - 2)), "the scan base is now C - 1");
    swap.free(C - 1);
    assert_eq!(swap.alloc(0), None, "the only free slot is the scan base");
    assert_eq!(swap.free_slots(), 1);
    assert_eq!(swap.state(C - 1), SlotState::Free);
    // Another free slot moves the base past it, and the next scan finds it.
    swap.free(100);
    assert_eq!(swap.alloc(0), Some(100));
    assert_eq!(swap.alloc(0), Some(C - 1));
    assert_eq!(swap.counters().alloc_failures, 1);
    swap.check_invariants();
}

#[test]
fn a_two_slot_area_never_allocates_its_only_slot() {
    // The header's cluster is never free, and every scan base is `1 + prandom_u32_max(1)`,
    // slot 1 itself, which the scan skips: whatever the seed and the CPU, as in 5.12.
    for seed in 0..16 {
        let config = SwapConfig { seed, ..SwapConfig::new(2, 2, Discard::None) };
        let mut swap = SwapDevice::with_config(config).unwrap();
        assert_eq!(swap.alloc(0), None);
        assert_eq!(swap.alloc(1), None);
        assert_eq!(swap.free_slots(), 1);
        assert_eq!(swap.state(1), SlotState::Free);
        assert_eq!(swap.counters().alloc_failures, 2);
        swap.check_invariants();
    }
}

#[test]
#[should_panic(expected = "double free")]
fn freeing_a_free_slot_panics() {
    let mut swap = SwapDevice::new(4 * C, 1, Discard::None);
    let slot = swap.alloc(0).unwrap();
    swap.free(slot);
    swap.free(slot);
}

#[test]
#[should_panic(expected = "past the end")]
fn a_slot_past_the_end_panics() {
    let mut swap = SwapDevice::new(100, 1, Discard::None);
    swap.free(100);
}

#[test]
fn readahead_reads_the_aligned_window_of_swapped_slots() {
    let mut swap = SwapDevice::new(4 * C, 1, Discard::None);
    let slots = alloc_n(&mut swap, 0, 32); // C..C+32, in order
    assert_eq!(slots[0], C);
    swap.free(C + 10);
    assert_eq!(swap.swap_in(C + 12, false), SwapIn::Cached);
    let mut window = Vec::new();
    swap.readahead(C + 11, &mut window);
    assert_eq!(window, [C + 8, C + 9, C + 11, C + 13, C + 14, C + 15], "skips the free and the cached slot");
    // page-cluster 0: only the faulting slot.
    let config = SwapConfig { page_cluster: 0, ..SwapConfig::new(4 * C, 1, Discard::None) };
    let mut single = SwapDevice::with_config(config).unwrap();
    let slots = alloc_n(&mut single, 0, 16);
    window.clear();
    single.readahead(slots[5], &mut window);
    assert_eq!(window, [slots[5]]);
}

#[test]
fn readahead_skips_the_header_and_stops_at_the_end() {
    let mut swap = SwapDevice::new(13, 1, Discard::None);
    let mut slots = alloc_n(&mut swap, 0, 12);
    slots.sort_unstable();
    assert_eq!(slots, (1..13).collect::<Vec<_>>());
    let mut window = Vec::new();
    swap.readahead(3, &mut window);
    assert_eq!(window, (1..8).collect::<Vec<_>>());
    window.clear();
    swap.readahead(12, &mut window);
    assert_eq!(window, (8..13).collect::<Vec<_>>());
}

#[test]
fn adaptive_readahead_grows_with_hits_and_shrinks_slowly() {
    use znswap_linux_swap::SwapinReadahead;
    let mut history = SwapinReadahead::default();
    assert_eq!(history.window_slots(100, 3), 1, "no hits, not adjacent");
    assert_eq!(history.window_slots(101, 3), 2, "adjacent to the previous fault");
    history.hit();
    history.hit();
    history.hit();
    assert_eq!(history.window_slots(500, 3), 8, "3 hits + 2 rounds up to 8");
    assert_eq!(history.window_slots(900, 3), 4, "halves at most");
    assert_eq!(history.window_slots(1300, 3), 2);
    assert_eq!(history.window_slots(1700, 3), 1);
    assert_eq!(history.window_slots(1700, 0), 1, "page-cluster 0 disables readahead");
}

#[test]
fn the_same_seed_gives_the_same_allocation() {
    let run = |seed: u64| {
        let config = SwapConfig { seed, ..SwapConfig::new(64 * C, 4, Discard::None) };
        let mut swap = SwapDevice::with_config(config).unwrap();
        let mut taken: Vec<u64> = Vec::new();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        for _ in 0..100_000 {
            let pick = rng.next_u64() >> 33;
            if pick % 3 != 0 || taken.is_empty() {
                if let Some(slot) = swap.alloc((pick % 4) as u32) {
                    taken.push(slot);
                }
            } else {
                let slot = taken.swap_remove((pick as usize / 3) % taken.len());
                swap.free(slot);
            }
        }
        swap.check_invariants();
        (taken, swap.counters())
    };
    let (a, counters) = run(7);
    assert_eq!(a, run(7).0);
    assert!(counters.slots_from_scan > 0, "the run got fragmented enough to scan: {counters:?}");
}
