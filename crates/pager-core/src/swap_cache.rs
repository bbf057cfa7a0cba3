//! Whether a page a read fault swapped in keeps its slot: the swap cache, as it pays.
//!
//! A page read back from the device still has an identical copy in its slot. Kept, the
//! page is mapped write-protected: evicted clean it needs no write (the engine's
//! `swap_cache_hits`), but its first write is a write-protect fault, a round trip
//! through the pager on the program's path, where the kernel's swap pays a minor fault
//! for its dirty bit. Dropped (the engine told the page is dirty at once), the page is
//! mapped writable and is written again if evicted: an append's page, off the program's
//! path.
//!
//! Which pays depends on the program: a read-mostly one evicts most cached pages clean,
//! an update-heavy one writes most of them first (redis under YCSB-A: most of its
//! write-protect faults were first writes to cached pages, and dropping the slots raised
//! its throughput; figures: docs/measurements/2026-11-pager.md). So the outcome of
//! cached pages is counted, decayed over a window, and a page keeps its slot while
//! cached pages end clean at least [`DIRTIED_WEIGHT`] times as often as they are
//! written: a write costs the program a fault round trip, a clean eviction saves a page
//! of an append that goes to the device off the program's path. One page in
//! [`PROBE_EVERY`] (by page number, so the choice is deterministic) always keeps it:
//! while the cache is off, the probes still tell how it would do.
//!
//! Counted per tenant: a daemon's tenants are different programs, and one that writes
//! every page it reads back (a tenant rewriting its data) must not turn the cache off
//! for one that only reads (which would then write each clean page it evicts again,
//! found by `scripts/tenants.sh`).

/// Pages whose number is a multiple of this always keep their slot: the feedback that
/// can turn the swap cache back on.
pub(crate) const PROBE_EVERY: u64 = 16;

/// How many clean evictions a cached page's write must be outweighed by. At 1, memcached
/// under ETC kept the cache though many of its cached pages were written, each write a
/// write-protect fault; at 3 it drops it but for the probes, with fewer write-protect
/// faults and more ops/s. redis, whose cached pages end clean far more often than
/// written overall, drops it in its write-heavy spells, with fewer write-protect faults
/// on cached pages and more ops/s (figures: docs/measurements/2026-11-pager.md).
const DIRTIED_WEIGHT: u64 = 3;

/// Outcomes counted before both counts are halved: the last few thousand decide.
const WINDOW: u64 = 2048;

#[derive(Clone, Debug, Default)]
pub(crate) struct SwapCacheFeedback {
    /// Cached pages evicted clean, decayed.
    clean: u64,
    /// Cached pages written (a write-protect fault each), decayed.
    dirtied: u64,
    /// The engine's `swap_cache_hits` when last looked at.
    clean_seen: u64,
}

impl SwapCacheFeedback {
    /// Nothing known yet, the engine's clean evictions counted from `clean_total` on.
    pub(crate) fn counting_from(clean_total: u64) -> SwapCacheFeedback {
        SwapCacheFeedback { clean_seen: clean_total, ..Default::default() }
    }

    /// Whether `page`, just read back, keeps its slot; `clean_total` is the engine's
    /// count of clean evictions so far (`swap_cache_hits`).
    pub(crate) fn keep(&mut self, page: u64, clean_total: u64) -> bool {
        let new = clean_total - self.clean_seen;
        self.clean_seen = clean_total;
        self.clean += new;
        self.decay();
        page.is_multiple_of(PROBE_EVERY) || self.clean >= DIRTIED_WEIGHT * self.dirtied
    }

    /// A cached page was written: its slot went stale, for a write-protect fault.
    pub(crate) fn dirtied(&mut self) {
        self.dirtied += 1;
        self.decay();
    }

    fn decay(&mut self) {
        if self.clean + self.dirtied > WINDOW {
            self.clean /= 2;
            self.dirtied /= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SwapCacheFeedback, PROBE_EVERY, WINDOW};

    #[test]
    fn pages_keep_their_slots_while_cached_pages_end_clean() {
        let mut feedback = SwapCacheFeedback::default();
        // Nothing known: kept.
        assert!(feedback.keep(1, 0));
        // Most cached pages written before their eviction: dropped, but for the probes.
        for _ in 0..100 {
            feedback.dirtied();
        }
        assert!(!feedback.keep(1, 10));
        assert!(feedback.keep(PROBE_EVERY * 3, 10));
        // The probes end clean from then on: the cache comes back once clean evictions
        // outweigh the writes.
        assert!(!feedback.keep(1, 10 + 95));
        assert!(feedback.keep(1, 10 + 95 + 3 * 95));
    }

    #[test]
    fn the_window_forgets_old_outcomes() {
        let mut feedback = SwapCacheFeedback::default();
        for _ in 0..100_000 {
            feedback.dirtied();
        }
        assert!(feedback.dirtied <= WINDOW + 1);
        // A few windows' worth of clean evictions outweighs what is left of the writes.
        assert!(feedback.keep(1, 8 * WINDOW));
    }
}
