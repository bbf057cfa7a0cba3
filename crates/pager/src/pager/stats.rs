//! What the pager counts: `PagerStats` (a snapshot for callers) and the shell's live
//! counters (times and CPU; the core counts pages and events).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::latency::LatencyHistogram;

/// The difference `since` takes of one field: a count's growth, a gauge's value now.
macro_rules! stat_since {
    (count, $now:expr, $earlier:expr) => {
        $now - $earlier
    };
    (gauge, $now:expr, $earlier:expr) => {
        $now
    };
}

/// `PagerStats` with one line per field, each a `count` (grows; `since` subtracts) or a
/// `gauge` (a value now; `since` keeps it), so `since` cannot miss or mistreat a field.
macro_rules! pager_stats {
    ($($(#[$doc:meta])* $kind:ident $name:ident,)*) => {
        /// Counters since the pager started, and a few gauges.
        #[derive(Clone, Copy, Debug, Default, serde::Serialize)]
        pub struct PagerStats {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl PagerStats {
            /// The counts since `earlier` (a snapshot of the same pager); the gauges
            /// stay as they are now.
            pub fn since(&self, earlier: &PagerStats) -> PagerStats {
                PagerStats { $($name: stat_since!($kind, self.$name, earlier.$name),)* }
            }
        }
    };
}

pager_stats! {
    count missing_faults,
    count write_protect_faults,
    count zero_fills,
    /// Pages read from the device for faults (read-ahead pages included).
    count swap_in_reads,
    /// Pages read ahead into the read-ahead cache, and faults served from it with no
    /// device read.
    count readahead_pages_read,
    count readahead_hits,
    /// Victims parked (the inactive list), parked pages touched and brought back,
    /// victims the kernel would not move (evicted in place), and victims kept because
    /// their shadow page awaited its discard.
    count pages_parked,
    count parked_touched,
    count park_refused,
    count park_occupied,
    /// Parked pages brought back by a copy, not a move: shared with a fork's child since
    /// they were parked (the kernel refuses to move them).
    count unparks_copied,
    /// Pages shared with a fork's child made the parent's alone so that they can be
    /// parked (`MADV_POPULATE_WRITE`; asynchronous write protection).
    count pages_unshared,
    /// Write-protect markers in empty entries cleared so that a zero page, a move back
    /// or a poison marker could land (asynchronous write protection; `Shared::unpark`).
    count wp_markers_cleared,
    /// Moves to or from a shadow page that the kernel did though the call failed
    /// (Linux 6.18's `move_pages()` can fail the retry of a page it moved:
    /// `park_outcome` in the pager core), found by the page map.
    count moves_misreported,
    /// Ioctls on a served process that found it gone (`Pager::serve_tenant`), and its
    /// victims read as zeroes because it was.
    count served_process_gone,
    /// Served processes let go for keeping pages their agent said it dropped
    /// (`PagerCore::take_false_drops`).
    count false_drops,
    /// Discards a served process's agent did not answer in time (stopped, held by a
    /// fork, or slow): the pager went on, and took the answer later.
    count late_discards,
    count swap_outs_written,
    count swap_outs_clean,
    /// Pages read back that kept their slot and were written since (a write-protect
    /// fault each), and pages read back that did not keep it (`swap_cache.rs` in the
    /// pager core: cached pages were mostly written).
    count swap_cache_dirtied,
    count swap_cache_skipped,
    /// With asynchronous write protection (`PagerConfig::wp_async`): victims the scan
    /// before their move found written (kept, referenced), and parked swap-cached pages
    /// whose digest showed them written since they were read back (their slot dropped).
    count victims_written,
    count swap_cache_digest_dirtied,
    count swap_outs_zero,
    count swap_outs_aborted_dirty,
    count backpressure,
    /// Faults served beyond the budget because swap was full and no room could come, or
    /// because room did not come within `ROOM_WAIT_MAX_NS`.
    count budget_overruns,
    /// Victims written between their pick and their hand-over (kept resident).
    count evictions_raced,
    /// Faults that waited for the evictor to bring the resident set under the budget,
    /// and how long they waited in all (the discards they did meanwhile included).
    count budget_waits,
    count budget_wait_ns,
    /// Dropped pages that waiting faults discarded themselves instead of sleeping until
    /// an evictor did (direct reclaim).
    count fault_discarded_pages,
    gauge resident_pages,
    gauge resident_pages_max,
    /// Pages whose only copy the device lost; a touch of one raises SIGBUS.
    count lost_pages,
    /// Faults answered with a poison marker (a lost page touched).
    count pages_poisoned,
    /// Failed device commands (appends, reads, resets, finishes), each counted once.
    count device_errors,
    /// With encryption (`PagerConfig::encrypt`): pages sealed as they were written, and
    /// pages read back that failed to open (altered on the device, or not the page
    /// asked for), each a failed read: the page is reported lost, never delivered.
    count pages_sealed,
    count pages_failed_open,
    /// CPU time the I/O threads spent on GC work (GC reads, moves, resets), in
    /// nanoseconds.
    count gc_cpu_ns,
    /// Where swap-in faults spend their time, in nanoseconds summed over faults: waiting
    /// for the pager's lock, reading the device, installing the page (`UFFDIO_COPY`).
    count fault_lock_wait_ns,
    count fault_read_ns,
    count fault_install_ns,
    /// And the releases of the lock (the wake-ups given then: a woken thread on the
    /// handler's CPU may run first, which is counted here too), and the pauses and
    /// waits for other actors (a page on its way out; waits for room are
    /// `budget_wait_ns`).
    count fault_unlock_ns,
    count fault_wait_ns,
    /// Device reads made for faults (one per fault that read, read-ahead included), and
    /// the handler threads' time on faults in all, from reading the event to the wake.
    count fault_reads,
    count fault_handled_ns,
    /// Faults a handler found while it polled for the next one (`PagerConfig::fault_poll_us`):
    /// the faulting thread's event needed no handler to be woken.
    count faults_polled,
    /// CPU time of the fault handler threads, in nanoseconds.
    count fault_cpu_ns,
    /// CPU time of the evictor threads (picking, write-protecting, handing over,
    /// discarding), in nanoseconds.
    count evictor_cpu_ns,
    /// CPU time of the I/O threads (appends, GC, resets), in nanoseconds.
    count io_cpu_ns,
    /// Wall time the I/O thread spent in swap-out appends, the appends it made, and
    /// the time it and the evictors slept with nothing to do, in nanoseconds: with
    /// the CPU times, where the swap-out's time goes.
    count evictor_append_ns,
    count swap_out_appends,
    count evictor_idle_ns,
    count io_idle_ns,
    count host_bytes_written,
    count gc_bytes_written,
    /// Chunk footers and their padding (footer mode: devices without per-LBA metadata).
    count record_bytes_written,
    /// Bytes the GC read from victims (gaps a read spans included).
    count gc_bytes_read,
    count gc_runs,
    /// Zones reset (made empty again: one erase each, the wear a swap device takes).
    count zone_resets,
    /// Open zones finished for their swap-zone going idle or unused (`Stats::zones_retired_idle`).
    count zones_retired_idle,
    /// Open zones finished because a new tenant took their tenant's index (the tenant
    /// policy: `Stats::zones_retired_tenant`).
    count zones_retired_tenant,
    /// Gauges: nanoseconds since the pager started, now and when its first swap-out
    /// append was issued (0: none yet). A sequential writer swaps nothing out until the
    /// budget is full, so its swap-out bandwidth is over the time since then.
    gauge uptime_ns,
    gauge first_swap_out_ns,
}

#[cfg(test)]
mod tests {
    use super::PagerStats;

    #[test]
    fn since_subtracts_counts_and_keeps_gauges() {
        let earlier =
            PagerStats { missing_faults: 3, gc_runs: 1, resident_pages: 50, uptime_ns: 10, ..Default::default() };
        let now = PagerStats {
            missing_faults: 10,
            gc_runs: 4,
            resident_pages: 40,
            resident_pages_max: 70,
            uptime_ns: 25,
            first_swap_out_ns: 12,
            ..Default::default()
        };
        let delta = now.since(&earlier);
        assert_eq!((delta.missing_faults, delta.gc_runs), (7, 3));
        assert_eq!((delta.resident_pages, delta.resident_pages_max), (40, 70));
        assert_eq!((delta.uptime_ns, delta.first_swap_out_ns), (25, 12));
    }
}

/// Where faults' time went, in nanoseconds: one fault's, gathered while it is resolved,
/// or summed over many ([`FaultRecord`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultTimes {
    /// Waiting for the state lock.
    pub lock_wait_ns: u64,
    /// Device reads, and how many.
    pub read_ns: u64,
    pub reads: u64,
    /// Installing what a read brought (`UFFDIO_COPY` and the wake-ups noted).
    pub install_ns: u64,
    /// Releasing the lock (the wake-ups given then).
    pub unlock_ns: u64,
    /// Pauses and waits for other actors (a page on its way out), waits for room apart.
    pub wait_ns: u64,
    /// Waiting for room in the budget (the pager's or the tenant's): faults that did,
    /// the time asleep for it, and the time from a fault's first wait to its end (the
    /// direct reclaim meanwhile and what followed the wait included, so it spans other
    /// parts: `PagerStats::budget_wait_ns`).
    pub room_waits: u64,
    pub room_wait_ns: u64,
    pub budget_wait_ns: u64,
}

const FAULT_TIME_PARTS: usize = 9;

impl FaultTimes {
    fn to_parts(self) -> [u64; FAULT_TIME_PARTS] {
        [
            self.lock_wait_ns,
            self.read_ns,
            self.reads,
            self.install_ns,
            self.unlock_ns,
            self.wait_ns,
            self.room_waits,
            self.room_wait_ns,
            self.budget_wait_ns,
        ]
    }

    fn from_parts(parts: [u64; FAULT_TIME_PARTS]) -> FaultTimes {
        let [lock_wait_ns, read_ns, reads, install_ns, unlock_ns, wait_ns, room_waits, room_wait_ns, budget_wait_ns] =
            parts;
        FaultTimes {
            lock_wait_ns,
            read_ns,
            reads,
            install_ns,
            unlock_ns,
            wait_ns,
            room_waits,
            room_wait_ns,
            budget_wait_ns,
        }
    }
}

/// A tenant's faults (`Pager::tenant_fault_times`): how many a handler resolved, their
/// whole time (from reading the event to the wake: `times` but `budget_wait_ns`, and the
/// fault's own work under the lock), and its parts summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultTimeTotals {
    pub faults: u64,
    pub handled_ns: u64,
    pub times: FaultTimes,
}

/// Faults recorded, the pager's or one tenant's: their latencies (with how many and
/// their sum) and where their time went, summed.
#[derive(Default)]
pub(super) struct FaultRecord {
    pub(super) latency: LatencyHistogram,
    parts: [AtomicU64; FAULT_TIME_PARTS],
}

impl FaultRecord {
    /// A fault a handler resolved in `handled_ns`.
    pub(super) fn record(&self, times: &FaultTimes, handled_ns: u64) {
        self.latency.record(handled_ns);
        self.add(times);
    }

    /// A fault's parts alone (self-paging: no handler timed it whole).
    pub(super) fn add(&self, times: &FaultTimes) {
        for (counter, value) in self.parts.iter().zip(times.to_parts()) {
            if value > 0 {
                counter.fetch_add(value, Relaxed);
            }
        }
    }

    pub(super) fn times(&self) -> FaultTimes {
        FaultTimes::from_parts(std::array::from_fn(|part| self.parts[part].load(Relaxed)))
    }

    pub(super) fn totals(&self) -> FaultTimeTotals {
        FaultTimeTotals { faults: self.latency.count(), handled_ns: self.latency.sum(), times: self.times() }
    }

    /// Forgotten (a new tenant takes the index). Faults in flight may add theirs after.
    pub(super) fn reset(&self) {
        self.latency.reset();
        for counter in &self.parts {
            counter.store(0, Relaxed);
        }
    }
}

/// The background threads' times (the evictors' and the I/O threads'), in nanoseconds:
/// with the CPU times, where the swap-out's time goes.
#[derive(Default)]
pub(super) struct ThreadTimes {
    pub(super) evictor_cpu_ns: AtomicU64,
    pub(super) io_cpu_ns: AtomicU64,
    /// Of the I/O threads' CPU, GC work (GC reads, moves, resets).
    pub(super) gc_cpu_ns: AtomicU64,
    /// Wall time of swap-out appends.
    pub(super) evictor_append_ns: AtomicU64,
    /// Time the evictors and the I/O threads slept with nothing to do.
    pub(super) evictor_idle_ns: AtomicU64,
    pub(super) io_idle_ns: AtomicU64,
}
