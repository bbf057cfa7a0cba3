//! Two tenants sharing a swap device, each throttled like a cgroup under `blk-throttle`
//! (the paper's Fig. 5 and Fig. 11), and the token bucket that throttles them.

use crate::Workload;

const NS_PER_S: u128 = 1_000_000_000;

/// A token bucket in virtual time: `rate_bytes_per_s` tokens a second, at most `burst`
/// bytes saved up. [`TokenBucket::take`] always books the bytes and says how long to
/// wait before the I/O may start; the bucket goes into debt meanwhile, so a caller that
/// waits as told gets exactly the rate in the long run.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    pub rate_bytes_per_s: u64,
    pub burst: u64,
    /// Tokens × 10^9 (byte-nanoseconds per second), exact integer arithmetic; negative is
    /// debt.
    tokens_scaled: i128,
    last_ns: u64,
}

/// `throtl_slice` of blk-throttle on non-rotational devices (`DFL_THROTL_SLICE_SSD`,
/// HZ/50): the time over which a throttled group may save up bandwidth.
pub const THROTL_SLICE_SSD_NS: u64 = 20_000_000;

impl TokenBucket {
    /// A full bucket at time 0.
    pub fn new(rate_bytes_per_s: u64, burst: u64) -> TokenBucket {
        assert!(rate_bytes_per_s > 0, "a token bucket of rate 0 never lets anything through; use a positive rate");
        TokenBucket { rate_bytes_per_s, burst, tokens_scaled: burst as i128 * NS_PER_S as i128, last_ns: 0 }
    }

    /// A blk-throttle-like limit: `mib_per_s`, with a slice's worth of burst.
    pub fn blk_throttle_mib_s(mib_per_s: u64) -> TokenBucket {
        let rate = mib_per_s << 20;
        TokenBucket::new(rate, (rate as u128 * THROTL_SLICE_SSD_NS as u128 / NS_PER_S) as u64)
    }

    fn refill(&mut self, now_ns: u64) {
        if now_ns > self.last_ns {
            let earned = (now_ns - self.last_ns) as i128 * self.rate_bytes_per_s as i128;
            let cap = self.burst as i128 * NS_PER_S as i128;
            self.tokens_scaled = (self.tokens_scaled + earned).min(cap);
            self.last_ns = now_ns;
        }
    }

    /// Books `bytes` at `now_ns` and returns the nanoseconds to wait before they may go.
    /// Calls with a `now_ns` earlier than a previous one earn nothing in between.
    pub fn take(&mut self, now_ns: u64, bytes: u64) -> u64 {
        self.refill(now_ns);
        self.tokens_scaled -= bytes as i128 * NS_PER_S as i128;
        if self.tokens_scaled >= 0 {
            return 0;
        }
        let debt = -self.tokens_scaled;
        let rate = self.rate_bytes_per_s as i128;
        ((debt + rate - 1) / rate) as u64
    }

    /// Tokens available at the last call (negative: debt).
    pub fn tokens(&self) -> i64 {
        (self.tokens_scaled / NS_PER_S as i128) as i64
    }
}

/// One tenant: what its threads do to their memory and what its swap I/O may use.
#[derive(Clone, Debug)]
pub struct Tenant {
    pub name: &'static str,
    pub workload: Workload,
    /// Swap-in (read) and swap-out (write) limits of its cgroup.
    pub read_limit: TokenBucket,
    pub write_limit: TokenBucket,
}

/// The limit of each tenant in both experiments.
pub const TENANT_LIMIT_MIB_S: u64 = 300;

impl Tenant {
    fn limited(name: &'static str, workload: Workload) -> Tenant {
        Tenant {
            name,
            workload,
            read_limit: TokenBucket::blk_throttle_mib_s(TENANT_LIMIT_MIB_S),
            write_limit: TokenBucket::blk_throttle_mib_s(TENANT_LIMIT_MIB_S),
        }
    }

    /// Fig. 5 (§3.1.4): cgroup A reads uniformly random pages (after writing its set
    /// once), cgroup B reads and writes uniformly random pages half and half; each may
    /// read 300 MiB/s and write 300 MiB/s from/to swap.
    pub fn fig5() -> [Tenant; 2] {
        let mixed = Workload::Hotspot { hot_percent: 100, hot_access_percent: 100, read_percent: 50 };
        [
            Tenant::limited("A: 100 % random read", Workload::AnonRRand),
            Tenant::limited("B: 50/50 random read/write", mixed),
        ]
    }

    /// Fig. 11 (§6.1.3): cgroup A writes uniformly random pages over 30 % of the swap
    /// capacity, cgroup B only reads random pages over 10 %; both limited to 300 MiB/s.
    /// The sizes are the simulator's to set; this gives the workloads and limits.
    pub fn fig11() -> [Tenant; 2] {
        [
            Tenant::limited("A: random writes", Workload::AnonWRand),
            Tenant::limited("B: random reads", Workload::AnonRRand),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Generator;

    #[test]
    fn a_full_bucket_lets_the_burst_through_then_paces() {
        let mut bucket = TokenBucket::new(1_000_000, 10_000); // 1 MB/s: 1 byte per µs
        assert_eq!(bucket.take(0, 10_000), 0, "the burst goes at once");
        assert_eq!(bucket.take(0, 1_000), 1_000_000, "then 1000 bytes wait 1 ms");
        assert_eq!(bucket.take(1_000_000, 1), 1_000, "the debt is paid at 1 ms; one more byte waits 1 µs");
        // Idle time refills only up to the burst.
        bucket.take(10_000_000_000, 0);
        assert_eq!(bucket.tokens(), 10_000);
    }

    #[test]
    fn the_long_run_rate_is_the_rate() {
        // A greedy caller that waits as told: 4 KiB pages for 10 virtual seconds.
        let mut bucket = TokenBucket::blk_throttle_mib_s(300);
        let mut now = 0u64;
        let mut bytes = 0u64;
        while now < 10_000_000_000 {
            now += bucket.take(now, 4096);
            bytes += 4096;
        }
        let rate_mib_s = bytes as f64 / (now as f64 / 1e9) / (1 << 20) as f64;
        // The burst (6 MiB) is spread over 10 s: +0.2 %.
        assert!((rate_mib_s - 300.0).abs() < 1.0, "{rate_mib_s} MiB/s");
    }

    #[test]
    fn an_idle_tenant_does_not_save_more_than_a_slice() {
        let mut bucket = TokenBucket::blk_throttle_mib_s(300);
        let slice_bytes = (300u64 << 20) / 50;
        assert_eq!(bucket.take(60_000_000_000, slice_bytes), 0);
        assert!(bucket.take(60_000_000_000, 4096) > 0, "nothing saved past one slice");
    }

    #[test]
    fn fig5_tenants_read_and_mix() {
        let [a, b] = Tenant::fig5();
        let reads = |workload| {
            Generator::new(workload, 1000, 3).skip(1000).take(100_000).filter(|access| !access.write).count() as f64
                / 100_000.0
        };
        assert_eq!(reads(a.workload), 1.0);
        assert!((reads(b.workload) - 0.5).abs() < 0.01);
        assert_eq!(a.read_limit.rate_bytes_per_s, 300 << 20);
        assert_eq!(b.write_limit.rate_bytes_per_s, 300 << 20);
        let [writer, reader] = Tenant::fig11();
        assert_eq!((writer.workload, reader.workload), (Workload::AnonWRand, Workload::AnonRRand));
    }
}
