//! What the pager counts: `PagerStats` (a snapshot for callers) and the live counters.

use super::*;

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
    count swap_in_reads,
    count swap_outs_written,
    count swap_outs_clean,
    count swap_outs_zero,
    count swap_outs_aborted_dirty,
    count backpressure,
    /// Faults that waited for the evictor to bring the resident set under the budget,
    /// and how long they waited in all (the discards they did meanwhile included).
    count budget_waits,
    count budget_wait_ns,
    /// Dropped pages that waiting faults discarded themselves instead of sleeping until
    /// an evictor did (direct reclaim).
    count fault_discarded_pages,
    gauge resident_pages,
    gauge resident_pages_max,
    count lost_pages,
    count device_errors,
    /// CPU time the evictor spent on GC work (GC reads, moves, resets), in nanoseconds.
    count gc_cpu_ns,
    /// Where swap-in faults spend their time, in nanoseconds summed over faults: waiting
    /// for the pager's lock, reading the device, installing the page (`UFFDIO_COPY`).
    count fault_lock_wait_ns,
    count fault_read_ns,
    count fault_install_ns,
    /// CPU time of the evictor threads and the I/O thread (eviction, appends, GC), in
    /// nanoseconds.
    count evictor_cpu_ns,
    /// Wall time the I/O thread spent in swap-out appends, the appends it made, and
    /// the time it and the evictors slept with nothing to do, in nanoseconds: with
    /// `evictor_cpu_ns`, where the swap-out's time goes.
    count evictor_append_ns,
    count swap_out_appends,
    count evictor_idle_ns,
    count io_idle_ns,
    count host_bytes_written,
    count gc_bytes_written,
    /// Bytes the GC read from victims (gaps a read spans included).
    count gc_bytes_read,
    count gc_runs,
    /// Gauges: nanoseconds since the pager started, now and when its first swap-out
    /// append was issued (0: none yet). A sequential writer swaps nothing out until the
    /// budget is full, so its swap-out bandwidth is over the time since then.
    gauge uptime_ns,
    gauge first_swap_out_ns,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) missing_faults: AtomicU64,
    pub(super) write_protect_faults: AtomicU64,
    pub(super) zero_fills: AtomicU64,
    pub(super) swap_in_reads: AtomicU64,
    pub(super) swap_outs_written: AtomicU64,
    pub(super) swap_outs_zero: AtomicU64,
    pub(super) swap_outs_aborted_dirty: AtomicU64,
    pub(super) backpressure: AtomicU64,
    pub(super) budget_waits: AtomicU64,
    pub(super) budget_wait_ns: AtomicU64,
    pub(super) fault_discarded_pages: AtomicU64,
    pub(super) resident_pages: AtomicU64,
    pub(super) resident_pages_max: AtomicU64,
    pub(super) lost_pages: AtomicU64,
    pub(super) device_errors: AtomicU64,
    pub(super) gc_cpu_ns: AtomicU64,
    pub(super) fault_lock_wait_ns: AtomicU64,
    pub(super) fault_read_ns: AtomicU64,
    pub(super) fault_install_ns: AtomicU64,
    pub(super) evictor_cpu_ns: AtomicU64,
    pub(super) evictor_append_ns: AtomicU64,
    pub(super) swap_out_appends: AtomicU64,
    pub(super) evictor_idle_ns: AtomicU64,
    pub(super) io_idle_ns: AtomicU64,
    pub(super) first_swap_out_ns: AtomicU64,
}

impl Shared {
    pub(super) fn stats(&self) -> PagerStats {
        let c = &self.counters;
        let state = self.lock();
        let engine_stats = state.engine.stats();
        PagerStats {
            missing_faults: c.missing_faults.load(Relaxed),
            write_protect_faults: c.write_protect_faults.load(Relaxed),
            zero_fills: c.zero_fills.load(Relaxed),
            swap_in_reads: c.swap_in_reads.load(Relaxed),
            swap_outs_written: c.swap_outs_written.load(Relaxed),
            swap_outs_clean: engine_stats.swap_cache_hits,
            swap_outs_zero: c.swap_outs_zero.load(Relaxed),
            swap_outs_aborted_dirty: c.swap_outs_aborted_dirty.load(Relaxed),
            backpressure: c.backpressure.load(Relaxed),
            budget_waits: c.budget_waits.load(Relaxed),
            budget_wait_ns: c.budget_wait_ns.load(Relaxed),
            fault_discarded_pages: c.fault_discarded_pages.load(Relaxed),
            resident_pages: c.resident_pages.load(Relaxed),
            resident_pages_max: c.resident_pages_max.load(Relaxed),
            lost_pages: c.lost_pages.load(Relaxed),
            device_errors: c.device_errors.load(Relaxed),
            gc_cpu_ns: c.gc_cpu_ns.load(Relaxed),
            fault_lock_wait_ns: c.fault_lock_wait_ns.load(Relaxed),
            fault_read_ns: c.fault_read_ns.load(Relaxed),
            fault_install_ns: c.fault_install_ns.load(Relaxed),
            evictor_cpu_ns: c.evictor_cpu_ns.load(Relaxed),
            evictor_append_ns: c.evictor_append_ns.load(Relaxed),
            swap_out_appends: c.swap_out_appends.load(Relaxed),
            evictor_idle_ns: c.evictor_idle_ns.load(Relaxed),
            io_idle_ns: c.io_idle_ns.load(Relaxed),
            host_bytes_written: engine_stats.host_pages_written * PAGE_BYTES as u64,
            gc_bytes_written: engine_stats.gc_pages_written * PAGE_BYTES as u64,
            gc_bytes_read: engine_stats.gc_pages_read * PAGE_BYTES as u64,
            gc_runs: engine_stats.gc_runs,
            uptime_ns: self.now(),
            first_swap_out_ns: c.first_swap_out_ns.load(Relaxed),
        }
    }
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
