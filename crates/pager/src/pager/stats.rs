//! What the pager counts: `PagerStats` (a snapshot for callers) and the live counters.

use super::*;

/// Counters since the pager started.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PagerStats {
    pub missing_faults: u64,
    pub write_protect_faults: u64,
    pub zero_fills: u64,
    pub swap_in_reads: u64,
    pub swap_outs_written: u64,
    pub swap_outs_clean: u64,
    pub swap_outs_zero: u64,
    pub swap_outs_aborted_dirty: u64,
    pub backpressure: u64,
    /// Faults that waited for the evictor to bring the resident set under the budget,
    /// and how long they waited in all.
    pub budget_waits: u64,
    pub budget_wait_ns: u64,
    pub resident_pages: u64,
    pub resident_pages_max: u64,
    pub lost_pages: u64,
    pub device_errors: u64,
    /// CPU time the evictor spent on GC work (GC reads, moves, resets), in nanoseconds.
    pub gc_cpu_ns: u64,
    /// Where swap-in faults spend their time, in nanoseconds summed over faults: waiting
    /// for the pager's lock, reading the device, installing the page (`UFFDIO_COPY`).
    pub fault_lock_wait_ns: u64,
    pub fault_read_ns: u64,
    pub fault_install_ns: u64,
    /// CPU time of the evictor threads and the I/O thread (eviction, appends, GC), in
    /// nanoseconds.
    pub evictor_cpu_ns: u64,
    /// Wall time the I/O thread spent in swap-out appends, the appends it made, and
    /// the time it and the evictors slept with nothing to do, in nanoseconds: with
    /// `evictor_cpu_ns`, where the swap-out's time goes.
    pub evictor_append_ns: u64,
    pub swap_out_appends: u64,
    pub evictor_idle_ns: u64,
    pub io_idle_ns: u64,
    pub host_bytes_written: u64,
    pub gc_bytes_written: u64,
    /// Bytes the GC read from victims (gaps a read spans included).
    pub gc_bytes_read: u64,
    pub gc_runs: u64,
    /// Gauges: nanoseconds since the pager started, now and when its first swap-out
    /// append was issued (0: none yet). A sequential writer swaps nothing out until the
    /// budget is full, so its swap-out bandwidth is over the time since then.
    pub uptime_ns: u64,
    pub first_swap_out_ns: u64,
}

impl PagerStats {
    /// The counts since `earlier` (a snapshot of the same pager); the gauges
    /// (`resident_pages`, `resident_pages_max`, `uptime_ns`, `first_swap_out_ns`) stay
    /// as they are now.
    pub fn since(&self, earlier: &PagerStats) -> PagerStats {
        PagerStats {
            missing_faults: self.missing_faults - earlier.missing_faults,
            write_protect_faults: self.write_protect_faults - earlier.write_protect_faults,
            zero_fills: self.zero_fills - earlier.zero_fills,
            swap_in_reads: self.swap_in_reads - earlier.swap_in_reads,
            swap_outs_written: self.swap_outs_written - earlier.swap_outs_written,
            swap_outs_clean: self.swap_outs_clean - earlier.swap_outs_clean,
            swap_outs_zero: self.swap_outs_zero - earlier.swap_outs_zero,
            swap_outs_aborted_dirty: self.swap_outs_aborted_dirty - earlier.swap_outs_aborted_dirty,
            backpressure: self.backpressure - earlier.backpressure,
            budget_waits: self.budget_waits - earlier.budget_waits,
            budget_wait_ns: self.budget_wait_ns - earlier.budget_wait_ns,
            resident_pages: self.resident_pages,
            resident_pages_max: self.resident_pages_max,
            lost_pages: self.lost_pages - earlier.lost_pages,
            device_errors: self.device_errors - earlier.device_errors,
            gc_cpu_ns: self.gc_cpu_ns - earlier.gc_cpu_ns,
            fault_lock_wait_ns: self.fault_lock_wait_ns - earlier.fault_lock_wait_ns,
            fault_read_ns: self.fault_read_ns - earlier.fault_read_ns,
            fault_install_ns: self.fault_install_ns - earlier.fault_install_ns,
            evictor_cpu_ns: self.evictor_cpu_ns - earlier.evictor_cpu_ns,
            evictor_append_ns: self.evictor_append_ns - earlier.evictor_append_ns,
            swap_out_appends: self.swap_out_appends - earlier.swap_out_appends,
            evictor_idle_ns: self.evictor_idle_ns - earlier.evictor_idle_ns,
            io_idle_ns: self.io_idle_ns - earlier.io_idle_ns,
            host_bytes_written: self.host_bytes_written - earlier.host_bytes_written,
            gc_bytes_written: self.gc_bytes_written - earlier.gc_bytes_written,
            gc_bytes_read: self.gc_bytes_read - earlier.gc_bytes_read,
            gc_runs: self.gc_runs - earlier.gc_runs,
            uptime_ns: self.uptime_ns,
            first_swap_out_ns: self.first_swap_out_ns,
        }
    }
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
