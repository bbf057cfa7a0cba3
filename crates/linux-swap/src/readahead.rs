//! Swap readahead (mm/swap_state.c, 5.12): `swap_cluster_readahead` reads the aligned
//! window of 2^`page-cluster` slots around the faulting one, skipping slots with no
//! swapped page. (5.12 uses VMA-based readahead for anonymous memory when no rotational
//! swap is on; the model follows the paper's setup with the offset-based window.)

use crate::device::{SlotState, SwapDevice};

impl SwapDevice {
    /// The slots a fault on `slot` reads, ascending, the faulting slot included, over the
    /// fixed window of 2^`page_cluster` slots (the most `swapin_nr_pages` grows to).
    /// Slots that are free, swap-cached (the page is already in memory), the header or
    /// waiting for discard are skipped, as `__read_swap_cache_async` skips them. The host
    /// drops the slots whose pages it already holds in its swap cache.
    pub fn readahead(&self, slot: u64, out: &mut Vec<u64>) {
        self.readahead_window(slot, 1 << self.config.page_cluster, out);
    }

    /// [`SwapDevice::readahead`] over an aligned window of `window_slots` (a power of
    /// two) slots; 1 reads the faulting slot only.
    pub fn readahead_window(&self, slot: u64, window_slots: u64, out: &mut Vec<u64>) {
        self.check_slot(slot);
        assert!(window_slots.is_power_of_two(), "a readahead window is a power of two slots, not {window_slots}");
        debug_assert_eq!(
            self.swap_map[slot as usize],
            SlotState::Swapped,
            "a fault on slot {slot} which holds no page"
        );
        let mask = window_slots - 1;
        // "Read a page_cluster sized and aligned cluster around offset."
        let start = (slot & !mask).max(1); // the first slot is the swap header
        let end = (slot | mask).min(self.config.slots - 1);
        out.extend((start..=end).filter(|&offset| self.swap_map[offset as usize] == SlotState::Swapped));
    }

    /// [`SwapDevice::readahead`] with the window sized by `swapin_nr_pages`' hit history.
    pub fn readahead_adaptive(&self, history: &mut SwapinReadahead, slot: u64, out: &mut Vec<u64>) {
        let window = history.window_slots(slot, self.config.page_cluster);
        self.readahead_window(slot, window, out);
    }
}

/// The state of `swapin_nr_pages` (`prev_offset`, `last_readahead_pages` and
/// `swapin_readahead_hits`), for a host that wants the kernel's adaptive window: it
/// starts at 1 slot, grows with readahead hits up to 2^page_cluster, and halves at most
/// per fault.
#[derive(Clone, Copy, Debug, Default)]
pub struct SwapinReadahead {
    prev_offset: u64,
    last_readahead_slots: u64,
    hits: u64,
}

impl SwapinReadahead {
    /// A fault found a page that readahead brought in (`lookup_swap_cache` clearing
    /// `PageReadahead`).
    pub fn hit(&mut self) {
        self.hits += 1;
    }

    /// `swapin_nr_pages(offset)` → `__swapin_nr_pages`.
    pub fn window_slots(&mut self, offset: u64, page_cluster: u32) -> u64 {
        let max_slots = 1u64 << page_cluster;
        if max_slots <= 1 {
            return 1;
        }
        let hits = std::mem::take(&mut self.hits);
        // "+ 2 … just happens to work well" (mm/swap_state.c).
        let mut slots = hits + 2;
        if slots == 2 {
            // No hits to judge by: read ahead only next to the previous fault.
            if offset != self.prev_offset + 1 && offset + 1 != self.prev_offset {
                slots = 1;
            }
        } else {
            slots = slots.next_power_of_two().max(4);
        }
        slots = slots.min(max_slots).max(self.last_readahead_slots / 2);
        if hits == 0 {
            self.prev_offset = offset;
        }
        self.last_readahead_slots = slots;
        slots
    }
}
