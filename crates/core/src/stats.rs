//! Counters the engine keeps (`swap_inf` plus write amplification and GC work).

use serde::{Deserialize, Serialize};

/// Write amplification: what the device wrote per byte (or page) the host asked it to
/// write for swap-out, both in one unit. The device's writes are the host's plus the
/// GC's copies plus record pages (chunk footers and their padding); with nothing
/// written it is 1 (nothing amplified). Every report computes it here.
pub fn waf(host_written: u64, device_written: u64) -> f64 {
    if host_written == 0 {
        return 1.0;
    }
    device_written as f64 / host_written as f64
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    pub swap_outs: u64,
    pub swap_ins: u64,
    /// Swap-ins served from the device.
    pub swap_in_reads: u64,
    /// Swap-outs of clean swap-cached pages that needed no write.
    pub swap_cache_hits: u64,
    /// Swap-outs aborted because the page was dirtied during its append (Appendix A).
    pub swap_outs_aborted_dirty: u64,
    pub swap_outs_failed: u64,
    /// Data pages written for swap-out.
    pub host_pages_written: u64,
    /// Data pages written by the GC.
    pub gc_pages_written: u64,
    /// Footer pages and padding written (footer mode).
    pub record_pages_written: u64,
    pub gc_pages_read: u64,
    /// Victim zones collected.
    pub gc_runs: u64,
    pub gc_batches: u64,
    /// GC runs stopped because collecting more would not raise the empty zone count.
    pub gc_stalls: u64,
    pub pages_moved: u64,
    /// Pages the GC copied but did not remap: swapped in, freed or dirtied meanwhile.
    pub pages_skipped_race: u64,
    /// Swap-cached slots the GC dropped instead of copying.
    pub swap_cache_dropped: u64,
    pub resets: u64,
    /// Resets of zones with unwritten capacity left (wear FAR tries to avoid).
    pub resets_partial: u64,
    pub finishes: u64,
    /// Open zones finished because their swap-zone took no page for a device write, or
    /// the policy stopped using it (`Policy::swap_zones_in_use`).
    pub zones_retired_idle: u64,
    /// Open zones finished because a new tenant took their tenant's index
    /// (`Engine::tenant_begins`).
    pub zones_retired_tenant: u64,
    /// Pages the GC moved to a lower stream than the policy's because theirs could not
    /// open a zone without taking the last empty one.
    pub gc_stream_fallbacks: u64,
    pub finish_errors: u64,
    pub append_errors: u64,
    pub read_errors: u64,
    pub reset_errors: u64,
    pub records_rejected: u64,
    pub zones_offline: u64,
    pub pages_lost: u64,
    pub backpressure: u64,
    /// Zone resets held back by a reset hold (`Engine::hold_resets`) until its release.
    pub resets_deferred: u64,
    /// Most zones covered by reset holds at once (a high-water mark, not a count).
    pub zones_held_max: u64,
}

impl Stats {
    /// Counters accumulated since `earlier` (every field is a monotonic count).
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            swap_outs: self.swap_outs - earlier.swap_outs,
            swap_ins: self.swap_ins - earlier.swap_ins,
            swap_in_reads: self.swap_in_reads - earlier.swap_in_reads,
            swap_cache_hits: self.swap_cache_hits - earlier.swap_cache_hits,
            swap_outs_aborted_dirty: self.swap_outs_aborted_dirty - earlier.swap_outs_aborted_dirty,
            swap_outs_failed: self.swap_outs_failed - earlier.swap_outs_failed,
            host_pages_written: self.host_pages_written - earlier.host_pages_written,
            gc_pages_written: self.gc_pages_written - earlier.gc_pages_written,
            record_pages_written: self.record_pages_written - earlier.record_pages_written,
            gc_pages_read: self.gc_pages_read - earlier.gc_pages_read,
            gc_runs: self.gc_runs - earlier.gc_runs,
            gc_batches: self.gc_batches - earlier.gc_batches,
            gc_stalls: self.gc_stalls - earlier.gc_stalls,
            pages_moved: self.pages_moved - earlier.pages_moved,
            pages_skipped_race: self.pages_skipped_race - earlier.pages_skipped_race,
            swap_cache_dropped: self.swap_cache_dropped - earlier.swap_cache_dropped,
            resets: self.resets - earlier.resets,
            resets_partial: self.resets_partial - earlier.resets_partial,
            finishes: self.finishes - earlier.finishes,
            zones_retired_idle: self.zones_retired_idle - earlier.zones_retired_idle,
            zones_retired_tenant: self.zones_retired_tenant - earlier.zones_retired_tenant,
            gc_stream_fallbacks: self.gc_stream_fallbacks - earlier.gc_stream_fallbacks,
            finish_errors: self.finish_errors - earlier.finish_errors,
            append_errors: self.append_errors - earlier.append_errors,
            read_errors: self.read_errors - earlier.read_errors,
            reset_errors: self.reset_errors - earlier.reset_errors,
            records_rejected: self.records_rejected - earlier.records_rejected,
            zones_offline: self.zones_offline - earlier.zones_offline,
            pages_lost: self.pages_lost - earlier.pages_lost,
            backpressure: self.backpressure - earlier.backpressure,
            resets_deferred: self.resets_deferred - earlier.resets_deferred,
            zones_held_max: self.zones_held_max,
        }
    }

    /// Device pages written per host page written ([`waf`]).
    pub fn waf(&self) -> f64 {
        waf(self.host_pages_written, self.host_pages_written + self.gc_pages_written + self.record_pages_written)
    }
}
