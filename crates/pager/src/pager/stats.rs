//! What the pager counts: `PagerStats` (a snapshot for callers) and the shell's live
//! counters (times and CPU; the core counts pages and events).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};
use znswap_core::Stats as EngineStats;
use znswap_pager_core::CoreStats;

use crate::latency::LatencyHistogram;

/// `PagerStats` with one line per shell counter, each a `count` (grows; `since`
/// subtracts) or a `gauge` (a value now; `since` keeps it), so `since` cannot miss or
/// mistreat a field; the core's and the engine's counters are theirs, embedded.
macro_rules! pager_stats {
    ($($(#[$doc:meta])* $kind:ident $name:ident,)*) => {
        /// Counters since the pager started, and a few gauges: the core's (pages and
        /// events, flattened: `missing_faults`, `swap_in_reads`, `swap_outs_written`,
        /// `resident_pages_max`, …), the engine's (device writes by kind, the GC, resets:
        /// under `engine`), and the shell's own (times, CPU, what only the shell sees).
        #[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
        pub struct PagerStats {
            #[serde(flatten)]
            pub core: CoreStats,
            #[serde(default)]
            pub engine: EngineStats,
            $($(#[$doc])* #[serde(default)] pub $name: u64,)*
        }

        impl PagerStats {
            /// The counts since `earlier` (a snapshot of the same pager); the gauges
            /// stay as they are now.
            pub fn since(&self, earlier: &PagerStats) -> PagerStats {
                PagerStats {
                    core: self.core.since(&earlier.core),
                    engine: self.engine.since(&earlier.engine),
                    $($name: znswap_pager_core::stat_since!($kind, self.$name, earlier.$name),)*
                }
            }
        }
    };
}

pager_stats! {
    /// Parked pages brought back by a copy, not a move: shared with a fork's child since
    /// they were parked (the kernel refuses to move them).
    count unparks_copied,
    /// Pages shared with a fork's child made the parent's alone so that they can be
    /// parked (`MADV_POPULATE_WRITE`; asynchronous write protection).
    count pages_unshared,
    /// Write-protect markers in empty entries cleared so that a zero page, a move back
    /// or a poison marker could land (asynchronous write protection; `install.rs`).
    count wp_markers_cleared,
    /// Moves to or from a shadow page that the kernel did though the call failed
    /// (Linux 6.18's `move_pages()` can fail the retry of a page it moved:
    /// `park_outcome` in the pager core), found by the page map.
    count moves_misreported,
    /// Ioctls on a served process that found it gone (`Pager::serve_tenant`), and its
    /// victims read as zeroes because it was.
    count served_process_gone,
    /// Faults that waited for the evictor to bring the resident set under the budget,
    /// and how long they waited in all (the discards they did meanwhile included).
    count budget_waits,
    count budget_wait_ns,
    /// Dropped pages that waiting faults discarded themselves instead of sleeping until
    /// an evictor did (direct reclaim).
    count fault_discarded_pages,
    /// With encryption (`CoreConfig::encrypt`): pages sealed as they were written, and
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
    /// The polls' gate (`poll.rs`): ticks it kept the handlers asleep (no CPU to spare),
    /// nanoseconds the handlers polled (for faults, for reads) finding nothing, and the
    /// spare CPU it last measured, in thousandths of a CPU.
    count poll_paused_ticks,
    count poll_spun_ns,
    gauge poll_spare_milli,
    /// The compressed pool (`PagerConfig::compressed_pool_bytes`; all 0 without one):
    /// pages written out and kept, their bytes compressed and before; pages that did not
    /// compress enough, and pages not tried after a run of those; device reads it served (no device command) and their pages;
    /// reads it could not serve whole; entries dropped, oldest first, for room; and now
    /// its size, the bytes of it in use, and the pages it holds.
    count compressed_pool_pages_stored,
    count compressed_pool_stored_bytes,
    count compressed_pool_stored_raw_bytes,
    count compressed_pool_pages_refused,
    count compressed_pool_pages_skipped,
    count compressed_pool_reads_served,
    count compressed_pool_pages_served,
    count compressed_pool_reads_missed,
    count compressed_pool_pages_dropped,
    gauge compressed_pool_bytes,
    gauge compressed_pool_used_bytes,
    gauge compressed_pool_pages_held,
    /// CPU time of the fault handler threads, in nanoseconds.
    count fault_cpu_ns,
    /// CPU time of the evictor threads (picking, write-protecting, handing over,
    /// discarding), in nanoseconds.
    count evictor_cpu_ns,
    /// CPU time of the I/O threads (appends, GC, resets), in nanoseconds.
    count io_cpu_ns,
    /// Wall time the I/O thread spent in swap-out appends, and the time it and the
    /// evictors slept with nothing to do, in nanoseconds: with the CPU times, where the
    /// swap-out's time goes.
    count evictor_append_ns,
    count evictor_idle_ns,
    count io_idle_ns,
    /// Nanoseconds since the pager started. A sequential writer swaps nothing out until
    /// the budget is full, so its swap-out bandwidth is over the time since the core's
    /// `first_swap_out_ns`.
    gauge uptime_ns,
}

impl PagerStats {
    /// Bytes the device wrote (swap-outs, the GC's moves, records and padding) per byte
    /// swapped out.
    pub fn waf(&self) -> f64 {
        let engine = &self.engine;
        let device = engine.host_pages_written + engine.gc_pages_written + engine.record_pages_written;
        znswap_core::waf(engine.host_pages_written, device)
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

#[cfg(test)]
mod tests {
    use super::{CoreStats, PagerStats};

    #[test]
    fn since_subtracts_counts_and_keeps_gauges() {
        let mut earlier = PagerStats { fault_reads: 3, uptime_ns: 10, ..Default::default() };
        earlier.core.missing_faults = 3;
        earlier.engine.gc_runs = 1;
        let now = PagerStats {
            core: CoreStats { missing_faults: 10, resident_pages: 40, resident_pages_max: 70, ..Default::default() },
            fault_reads: 5,
            uptime_ns: 25,
            engine: znswap_core::Stats { gc_runs: 4, ..Default::default() },
            ..Default::default()
        };
        let delta = now.since(&earlier);
        assert_eq!((delta.core.missing_faults, delta.engine.gc_runs, delta.fault_reads), (7, 3, 2));
        assert_eq!((delta.core.resident_pages, delta.core.resident_pages_max), (40, 70));
        assert_eq!(delta.uptime_ns, 25);
    }

    /// One name per counter: the core's, the engine's and the shell's never collide
    /// (a collision would read back as another counter's value, or not at all).
    #[test]
    fn a_snapshot_reads_back_as_written() {
        let mut stats = PagerStats { fault_reads: 7, uptime_ns: 9, ..Default::default() };
        stats.core.swap_in_reads = 11;
        stats.core.forks = 2;
        stats.engine.host_pages_written = 13;
        stats.engine.swap_in_reads = 17;
        let json = serde_json::to_string(&stats).unwrap();
        let back: PagerStats = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert_eq!((back.core.swap_in_reads, back.engine.swap_in_reads, back.fault_reads), (11, 17, 7));
    }
}
