//! A tenant's share of the device's writes: the paper's cgroup accounting (§4.3,
//! Fig. 11), where each tenant's swap bandwidth is limited (as `blk-throttle` limits a
//! cgroup's) and the bytes the GC writes to move the tenant's data are charged to the
//! same limit. So a tenant whose rewrites keep the GC busy pays for it from its own
//! share, and a tenant that only reads keeps the device time it had alone.
//!
//! What is charged is what the engine counts per tenant: its swap-outs' appended
//! pages (`Engine::tenant_host_bytes`) and the GC's moves of its pages
//! (`Engine::tenant_gc_bytes`). A token bucket: the allowance grows at the limit's
//! rate and banks at most a burst; a tenant whose charges passed its allowance is
//! *throttled*, and the evictor passes its pages over until the allowance catches up.
//! Its faults then wait for room in its own budget, so the whole tenant slows, as a
//! cgroup over its I/O limit does; no other tenant waits for it (each has room in its
//! own budget). Charges land as appends complete, so a tenant may overshoot by the
//! appends of one round in flight.
//!
//! No tenant is held back for longer than `WRITE_HOLD_MAX_NS` at a stretch: past it, a
//! round of its pages goes (`GRACE_BYTES`, counted as `grace_bytes`) though it still
//! owes, and it owes them too. Without this, a tenant whose pages the GC moves faster
//! than its limit (its data mixed in zones others rewrite, as under per-core) would never
//! swap out again, and its faults would wait for ever (the pager DST found it). Forgiving
//! the debt instead lets a writer whose GC moves its pages in lumps write well past its
//! limit, the GC for free (`scripts/tenants.sh`; figures:
//! docs/measurements/2026-11-daemon.md).

use crate::PAGE_BYTES;

/// The most a tenant banks while it writes less than its limit: 100 ms of its rate, and
/// at least this (so a small limit still lets whole eviction rounds through).
const BURST_MIN_BYTES: u64 = 64 * PAGE_BYTES as u64;

/// The longest a tenant is held back at a stretch.
pub const WRITE_HOLD_MAX_NS: u64 = 500_000_000;

/// What a tenant held back `WRITE_HOLD_MAX_NS` may write all the same: a round of
/// eviction (so its floor is about 0.5 MB/s).
const GRACE_BYTES: u64 = 64 * PAGE_BYTES as u64;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WriteLimit {
    /// Bytes a second; 0: no limit.
    rate: u64,
    /// What the tenant may have written (its charges, counted as the engine counts
    /// them since the pager began) by `at_ns`.
    allowed: u64,
    at_ns: u64,
    /// Since when its swap-outs wait, if they do, and how long they waited before.
    throttled_since: Option<u64>,
    throttled_ns: u64,
    /// Bytes let through past the allowance to a tenant held back `WRITE_HOLD_MAX_NS`:
    /// it may write while its charges are under `grace_until`.
    grace_bytes: u64,
    grace_until: u64,
}

impl WriteLimit {
    /// A limit of `rate` bytes a second from `now`, for a tenant charged `charged` so far
    /// (`None`: no limit). Starts with a full burst.
    pub(crate) fn set(&mut self, rate: Option<u64>, charged: u64, now: u64) {
        self.end_throttle(now);
        let rate = rate.unwrap_or(0);
        *self = WriteLimit { rate, allowed: charged + burst(rate), at_ns: now, ..*self };
    }

    pub(crate) fn rate(&self) -> Option<u64> {
        (self.rate > 0).then_some(self.rate)
    }

    pub(crate) fn throttled(&self) -> bool {
        self.throttled_since.is_some()
    }

    pub(crate) fn grace_bytes(&self) -> u64 {
        self.grace_bytes
    }

    /// Nanoseconds the tenant's swap-outs waited for its allowance, by `now`.
    pub(crate) fn throttled_ns(&self, now: u64) -> u64 {
        self.throttled_ns + self.throttled_since.map_or(0, |since| now.saturating_sub(since))
    }

    /// The allowance brought to `now` for a tenant charged `charged`: how long its
    /// swap-outs must wait yet (0: they may go now).
    pub(crate) fn wait_ns(&mut self, charged: u64, now: u64) -> u64 {
        if self.rate == 0 {
            return 0;
        }
        let elapsed = now.saturating_sub(self.at_ns);
        let credit = (self.rate as u128 * elapsed as u128 / 1_000_000_000) as u64;
        // Time is taken only with the bytes it earned, so calls close together lose
        // nothing to rounding.
        if credit > 0 {
            self.allowed += credit;
            self.at_ns = now;
        }
        let ceiling = charged + burst(self.rate);
        if self.allowed > ceiling {
            self.allowed = ceiling;
            self.at_ns = now;
        }
        if charged < self.allowed || charged < self.grace_until {
            self.end_throttle(now);
            return 0;
        }
        let since = *self.throttled_since.get_or_insert(now);
        let held = now.saturating_sub(since);
        if held >= WRITE_HOLD_MAX_NS {
            self.grace_until = charged + GRACE_BYTES;
            self.grace_bytes += GRACE_BYTES;
            self.end_throttle(now);
            return 0;
        }
        let owed = (charged - self.allowed + 1) as u128;
        let wait = (owed * 1_000_000_000).div_ceil(self.rate as u128).min(u64::MAX as u128) as u64;
        wait.min(WRITE_HOLD_MAX_NS - held)
    }

    fn end_throttle(&mut self, now: u64) {
        if let Some(since) = self.throttled_since.take() {
            self.throttled_ns += now.saturating_sub(since);
        }
    }
}

fn burst(rate: u64) -> u64 {
    (rate / 10).max(BURST_MIN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::{WriteLimit, BURST_MIN_BYTES, GRACE_BYTES, WRITE_HOLD_MAX_NS};

    const MS: u64 = 1_000_000;

    #[test]
    fn unlimited_never_waits() {
        let mut limit = WriteLimit::default();
        assert_eq!(limit.wait_ns(u64::MAX / 2, 0), 0);
        assert!(!limit.throttled());
    }

    #[test]
    fn a_tenant_past_its_allowance_waits_until_the_rate_pays_it() {
        let mut limit = WriteLimit::default();
        let rate = 10 << 20; // 10 MiB/s: a burst of 1 MiB
        limit.set(Some(rate), 0, 0);
        assert_eq!(limit.wait_ns((1 << 20) - 1, 0), 0, "a burst's worth less a byte goes at once");
        let wait = limit.wait_ns((1 << 20) + (1 << 20), 0);
        // 1 MiB owed at 10 MiB/s: 100 ms.
        assert!((100 * MS..101 * MS).contains(&wait), "waits {wait} ns");
        assert!(limit.throttled());
        assert!(limit.wait_ns(2 << 20, 50 * MS) > 0, "half paid");
        assert_eq!(limit.wait_ns(2 << 20, 101 * MS), 0, "paid");
        assert!(!limit.throttled());
        assert_eq!(limit.throttled_ns(101 * MS), 101 * MS);
    }

    #[test]
    fn a_tenant_held_back_longest_writes_a_round_and_still_owes() {
        let mut limit = WriteLimit::default();
        let rate = 1 << 20;
        limit.set(Some(rate), 0, 0);
        // Owes 10 s of its rate (the GC moved its pages at once).
        let charged = 10 << 20;
        assert_eq!(limit.wait_ns(charged, 0), WRITE_HOLD_MAX_NS, "looks again at the hold max at the latest");
        assert!(limit.wait_ns(charged, WRITE_HOLD_MAX_NS - 1) > 0);
        assert_eq!(limit.wait_ns(charged, WRITE_HOLD_MAX_NS), 0, "held no longer than the hold max");
        assert_eq!(limit.grace_bytes(), GRACE_BYTES);
        assert_eq!(limit.throttled_ns(WRITE_HOLD_MAX_NS), WRITE_HOLD_MAX_NS);
        // A round goes; then it is held again, for another hold, its debt not forgiven.
        assert_eq!(limit.wait_ns(charged + GRACE_BYTES - 1, WRITE_HOLD_MAX_NS), 0);
        let after = charged + GRACE_BYTES;
        assert!(limit.wait_ns(after, WRITE_HOLD_MAX_NS + MS) > 0);
        assert_eq!(limit.wait_ns(after, 2 * WRITE_HOLD_MAX_NS + MS), 0, "the next round a hold later");
        // Over 1.5 s at 1 MiB/s it wrote 10 MiB and two rounds: it owes them all.
        assert!(limit.wait_ns(after + GRACE_BYTES, 2 * WRITE_HOLD_MAX_NS + 2 * MS) > 0);
        assert_eq!(limit.grace_bytes(), 2 * GRACE_BYTES);
    }

    #[test]
    fn an_idle_tenant_banks_one_burst_at_most() {
        let mut limit = WriteLimit::default();
        let rate = 10 << 20;
        limit.set(Some(rate), 0, 0);
        // Ten idle seconds bank 100 ms of writes, not 10 s.
        assert_eq!(limit.wait_ns(0, 10_000 * MS), 0);
        assert_eq!(limit.wait_ns((1 << 20) - 1, 10_000 * MS), 0);
        assert!(limit.wait_ns((1 << 20) + (1 << 19), 10_000 * MS) >= 50 * MS);
    }

    #[test]
    fn calls_close_together_lose_no_allowance_to_rounding() {
        let mut limit = WriteLimit::default();
        let rate = 1000; // a byte a millisecond, and a burst of BURST_MIN_BYTES
        limit.set(Some(rate), 0, 0);
        let charged = BURST_MIN_BYTES + 1000;
        // A call every 100 µs (a tenth of a byte each) for a second pays the 1000 bytes.
        let mut now = 0;
        while now < 1000 * MS {
            now += MS / 10;
            limit.wait_ns(charged, now);
        }
        assert!(limit.wait_ns(charged, now + 2 * MS) == 0, "the rate's 1000 bytes were lost to rounding");
    }
}
