//! Per-tenant swap bandwidth limits (cgroup `blk-throttle`), in virtual time, on the
//! shared `znswap_workload::TokenBucket` (20 ms of burst, blk-throttle's SSD slice).
//!
//! Host GC I/O done on a tenant's behalf is charged as debt (§4.3 "cgroup
//! accounting"): it delays that tenant's own later I/O, never the GC itself.

use znswap_workload::tenant::THROTL_SLICE_SSD_NS;
use znswap_workload::TokenBucket;

use crate::events::{Ns, SECOND_NS};

/// Read and write limits of one tenant.
#[derive(Clone, Debug)]
pub struct Throttle {
    read: TokenBucket,
    write: TokenBucket,
}

fn bucket(bytes_per_s: u64) -> TokenBucket {
    let burst = (bytes_per_s as u128 * THROTL_SLICE_SSD_NS as u128 / SECOND_NS as u128) as u64;
    TokenBucket::new(bytes_per_s, burst.max(4096))
}

impl Throttle {
    pub fn new(read_bytes_per_s: u64, write_bytes_per_s: u64) -> Throttle {
        Throttle { read: bucket(read_bytes_per_s), write: bucket(write_bytes_per_s) }
    }

    /// When a read of `bytes` completing at `now` may be delivered.
    pub fn read(&mut self, now: Ns, bytes: u64) -> Ns {
        now + self.read.take(now, bytes)
    }

    pub fn write(&mut self, now: Ns, bytes: u64) -> Ns {
        now + self.write.take(now, bytes)
    }

    /// Host GC moved `bytes` of this tenant's data: a read and a write each.
    pub fn charge_gc(&mut self, now: Ns, bytes: u64) {
        if bytes > 0 {
            self.read.take(now, bytes);
            self.write.take(now, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_holds_over_time() {
        let mut throttle = Throttle::new(300 << 20, 300 << 20);
        let mut last = 0;
        // 3000 MiB of 4 KiB reads issued as fast as allowed take ~10 s.
        for _ in 0..(3000u64 << 20) / 4096 {
            last = throttle.read(last, 4096);
        }
        let seconds = last as f64 / 1e9;
        assert!((seconds - 10.0).abs() < 0.05, "{seconds} s");
    }

    #[test]
    fn gc_debt_delays_later_io() {
        let mut throttle = Throttle::new(100 << 20, 100 << 20);
        assert_eq!(throttle.write(0, 4096), 0);
        throttle.charge_gc(0, 100 << 20);
        let ready = throttle.write(0, 4096);
        assert!(ready > 950 * crate::events::MILLISECOND_NS, "{ready}");
        // Reads were charged for the GC's reads too.
        assert!(throttle.read(0, 4096) > 950 * crate::events::MILLISECOND_NS);
    }
}
