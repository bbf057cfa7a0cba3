//! CPU costs of the simulated host: the calibration constants.
//!
//! Everything the device does (reads, programs, erases, its GC) comes from the NAND
//! model in `znswap-flash`; everything the swap systems decide (slots, zones, ZNGC
//! victims, swap cache) comes from `znswap-core` and `znswap-linux-swap`. What neither
//! can know is how much CPU time the kernel spends per operation. Those numbers are set
//! here, each with where it comes from. Calibrated numbers are fitted to one figure of
//! the paper; that figure then cannot be claimed as a result of the simulation (the
//! README's table says which).

use serde::Serialize;

use crate::events::Ns;

/// CPU time per operation, in virtual nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CpuCosts {
    /// One access of an application thread to a resident page (a store or load that
    /// misses the caches, plus the benchmark's loop). Assumed; small next to faults.
    pub access_ns: Ns,
    /// First touch of an anonymous page: trap, page allocation, zeroing 4 KiB, PTE and
    /// LRU insertion. Assumed (about 1 µs on a 2019 Xeon).
    pub fault_zero_ns: Ns,
    /// A major fault's CPU work, not counting the wait for the read: trap, swap cache
    /// lookup, bio submission, completion interrupt, mapping. Assumed (2-3 µs is the
    /// usual figure for Linux major fault overhead excluding I/O).
    pub fault_swap_in_ns: Ns,
    /// Reclaiming one anonymous page by swap-out: LRU isolation, rmap unmap and TLB
    /// flush, slot or swap-zone allocation, bio submission, completion, freeing.
    /// Calibrated: §6.1.4 reports 740 MiB/s of swap-out on one core for
    /// `case-anon-w-seq`, i.e. 5.28 µs of CPU per 4 KiB page for access + first-touch
    /// fault + swap-out together; this is that figure less the two assumed above.
    pub swap_out_ns: Ns,
    /// Dropping a clean page whose copy is still on swap (a swap cache hit on reclaim):
    /// no I/O, just unmapping and freeing. Assumed: a third of a swap-out.
    pub swap_out_clean_ns: Ns,
    /// One TRIM (discard) command issued by the swap system. Calibrated: §6.1.1 reports
    /// 32 % of a core for 8-slot TRIMs; at the ~250 MiB/s the paper's block SSD reaches
    /// with them (Fig. 2, "2x lower than the maximum") that is 7.8 k TRIMs/s, so 41 µs
    /// each (the command is synchronous in Linux 5.12's discard path).
    pub trim_ns: Ns,
    /// ZNGC, per slot its gather stage scans in a victim zone. Calibrated: §6.1.1
    /// reports 0.3 % of a core at 10 % utilization, where the GC moves almost nothing;
    /// at ~480 MiB/s that is 0.45 victim zones of 275,712 slots per second, so 24 ns
    /// per slot scanned.
    pub gc_slot_scanned_ns: Ns,
    /// ZNGC, per valid page it moves (read and append submission, record check, rmap
    /// remap). Calibrated: §6.1.1 reports 15 % of a core at 80 % utilization; assuming
    /// ~250 MiB/s of swap-out there and the greedy WAF of 2.8 (crates/dst/RESULTS.md),
    /// that is 115 k pages moved per second, so 1.25 µs each after the scan share.
    pub gc_page_moved_ns: Ns,
    /// pmbench's CPU per access: its random offset (a normal draw), the access, and the
    /// rdtsc pair timing it. Assumed: 200 ns.
    pub pmbench_access_ns: Ns,
    /// A memcached request's CPU besides its page accesses (network stack, parsing,
    /// hashing). Assumed: memcached serves some 250 k small requests per second per
    /// core, so 4 µs.
    pub memcached_request_ns: Ns,
    /// A redis request's CPU (one redis instance serves about 100 k requests per second
    /// on one core). Assumed: 10 µs.
    pub redis_request_ns: Ns,
    /// The largest stretch of CPU an application thread runs before the simulator
    /// looks at the rest of the world again (events in between are applied up to this
    /// late). A modelling knob, not a kernel cost.
    pub burst_ns_max: Ns,
}

impl Default for CpuCosts {
    fn default() -> CpuCosts {
        CpuCosts {
            access_ns: 50,
            fault_zero_ns: 1_000,
            fault_swap_in_ns: 2_500,
            swap_out_ns: 4_230,
            swap_out_clean_ns: 1_400,
            trim_ns: 41_000,
            gc_slot_scanned_ns: 24,
            gc_page_moved_ns: 1_250,
            pmbench_access_ns: 200,
            memcached_request_ns: 4_000,
            redis_request_ns: 10_000,
            burst_ns_max: 20_000,
        }
    }
}

impl CpuCosts {
    /// CPU per page of `case-anon-w-seq`: the number §6.1.4 calibrates.
    pub fn sequential_swap_out_page_ns(&self) -> Ns {
        self.access_ns + self.fault_zero_ns + self.swap_out_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_core_swaps_out_740_mib_per_second() {
        let costs = CpuCosts::default();
        let mib_s = 1e9 / costs.sequential_swap_out_page_ns() as f64 * 4096.0 / (1 << 20) as f64;
        assert!((mib_s - 740.0).abs() < 2.0, "{mib_s} MiB/s");
    }
}
