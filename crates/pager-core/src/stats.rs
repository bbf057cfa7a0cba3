//! What the core counts ([`CoreStats`]): one line per counter, each a `count` (grows;
//! `since` subtracts) or a `gauge` (a value now; `since` keeps it). Times are the
//! shell's to measure.

use serde::{Deserialize, Serialize};

/// The difference `since` takes of one field: a count's growth, a gauge's value now
/// (the pager's own `PagerStats` takes it too).
#[macro_export]
macro_rules! stat_since {
    (count, $now:expr, $earlier:expr) => {
        $now - $earlier
    };
    (gauge, $now:expr, $earlier:expr) => {
        $now
    };
}

macro_rules! core_stats {
    ($($(#[$doc:meta])* $kind:ident $name:ident,)*) => {
        /// What the core counts.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct CoreStats {
            $($(#[$doc])* #[serde(default)] pub $name: u64,)*
        }

        impl CoreStats {
            /// The counts since `earlier` (a snapshot of the same core); the gauges stay
            /// as they are now.
            pub fn since(&self, earlier: &CoreStats) -> CoreStats {
                CoreStats { $($name: $crate::stat_since!($kind, self.$name, earlier.$name),)* }
            }
        }
    };
}

core_stats! {
    count missing_faults,
    count write_protect_faults,
    count zero_fills,
    /// Pages read from the device for faults (read-ahead pages included).
    count swap_in_reads,
    /// Of those, pages a fork's child read from its parent's slots at the fork
    /// (`region_add_inherited`).
    count inherited_reads,
    /// Pages read after a faulting page's into the read-ahead cache (holes between
    /// valid slots included).
    count readahead_pages_read,
    /// Faults served from the read-ahead cache, with no device read.
    count readahead_hits,
    /// Pages read back that kept their slot as swap cache and were written since (a
    /// write-protect fault each; `src/swap_cache.rs`).
    count swap_cache_dirtied,
    /// Pages read back that did not keep their slot: cached pages were mostly written.
    count swap_cache_skipped,
    /// Victims moved to their shadow page (the inactive list).
    count pages_parked,
    /// Parked pages touched and brought back (moved back, or copied back while their
    /// swap-out was in flight): reads and writes the pager saw.
    count parked_touched,
    /// Victims the kernel refused to move (shared with a fork's child): write-protected
    /// and evicted in place instead.
    count park_refused,
    /// Victims not moved because their shadow page still awaited its discard: kept.
    count park_occupied,
    /// Victims found written by the scan before their move (`CoreConfig::wp_async`):
    /// referenced, kept.
    count victims_written,
    /// Parked swap-cached pages whose digest no longer matched their slot's
    /// (`CoreConfig::wp_async`): written since they were read back, so the slot went.
    count swap_cache_digest_dirtied,
    /// Pages written to the device by swap-out appends that succeeded.
    count swap_outs_written,
    /// Of the victims an append carries, those the program discarded (or whose region
    /// was freed) during their swap-out: written as zeroes, their slots never valid.
    count swap_outs_zeroed,
    count swap_outs_zero,
    /// Pages installed again within the budget's refault distance of their eviction:
    /// given passes of the hand (`src/refault.rs`).
    count refaults_short,
    /// Pages installed again from beyond it; and of those, the ones back within an
    /// eighth more of the budget (a budget an eighth larger would have kept them): what
    /// memory taken from the heap (a compressed pool) costs it.
    count refaults_long,
    count refaults_near,
    /// Pages reference sampling write-protected to look at, and pages a write fault on
    /// that protection marked referenced again (`src/sampling.rs`).
    count sampling_looked_at,
    count sampling_written,
    /// Referenced pages the hand passed by without a look: their granule's turn comes
    /// once every `sampling_period` revolutions.
    count sampling_deferred,
    gauge sampling_period,
    /// Times the hand passed a page by, spending one of its passes.
    count refault_passes_spent,
    count swap_outs_aborted_dirty,
    count swap_out_appends,
    count backpressure,
    /// Faults served beyond the budget because swap was full and no room could come, or
    /// because room did not come within `ROOM_WAIT_MAX_NS`.
    count budget_overruns,
    /// Of them, faults of tenants at their swap limits (`set_tenant_swap_limit`).
    count swap_limit_overruns,
    /// Victims written (or unprotected) between their pick and their hand-over: kept.
    count evictions_raced,
    /// Pages whose only copy the device lost (the engine's `Event::Lost`).
    count lost_pages,
    /// Faults answered with a poison marker.
    count pages_poisoned,
    /// Failed device commands: appends, reads, resets, finishes.
    count device_errors,
    count pages_discarded,
    /// Discards a process's agent did not answer in time (`DropDelay::Late`), answered
    /// later (`late_discard_done`).
    count late_discards,
    gauge resident_pages,
    gauge resident_pages_max,
    /// When the first swap-out append was handed out (0: none yet), in the shell's
    /// nanoseconds.
    gauge first_swap_out_ns,
    /// Discards of the program's (`discard_range`), and the pages they covered.
    count program_discards,
    count program_discarded_pages,
    /// Pages mapped after a discard of the program's was read and zapped by it since,
    /// found by a fault (`FaultStep::ZeroFill` landed on a page the pager had mapped).
    count zapped_pages_found,
    count forks,
    /// Regions found with pages their process said it dropped and did not
    /// (`take_false_drops`).
    count false_drops,
    /// Budget changes (`set_budget`).
    count budget_changes,
    /// Victims picked from tenants over their own budgets (`set_tenant_budget`).
    count tenant_victims,
}

#[cfg(test)]
mod tests {
    use super::CoreStats;

    #[test]
    fn since_subtracts_counts_and_keeps_gauges() {
        let earlier = CoreStats { missing_faults: 3, resident_pages: 50, ..Default::default() };
        let now = CoreStats { missing_faults: 10, resident_pages: 40, first_swap_out_ns: 12, ..Default::default() };
        let delta = now.since(&earlier);
        assert_eq!(delta.missing_faults, 7);
        assert_eq!((delta.resident_pages, delta.first_swap_out_ns), (40, 12));
    }
}
