//! The handler threads' polling for the next fault: at most one thread polls at a time
//! (two would take both CPUs of a small machine from the program), for a window that
//! adapts to the gaps between faults as the kernel's halt polling does
//! (`drivers/cpuidle/governors/haltpoll.c`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// A window grown from nothing starts here; one halved below the floor is nothing.
const POLL_WINDOW_START_NS: u64 = 25_000;
const POLL_WINDOW_FLOOR_NS: u64 = 10_000;

pub(super) struct FaultPoll {
    /// The window's bound, in nanoseconds (0: no polling).
    max_ns: u64,
    /// The window now, in nanoseconds.
    window_ns: AtomicU64,
    /// Whether a thread is polling.
    polling: AtomicBool,
    /// When the last handler that found no more events went to sleep (the pager's clock).
    slept_at_ns: AtomicU64,
    /// Faults a handler found while it polled: their events needed no handler woken.
    found: AtomicU64,
}

impl FaultPoll {
    pub(super) fn new(max_us: u32) -> FaultPoll {
        let max_ns = max_us as u64 * 1000;
        FaultPoll {
            max_ns,
            window_ns: AtomicU64::new(max_ns),
            polling: AtomicBool::new(false),
            slept_at_ns: AtomicU64::new(0),
            found: AtomicU64::new(0),
        }
    }

    /// Whether polling is on at all (a pager that polls for faults polls for its reads
    /// too: `znswap_zoned::poll_reads_on_this_thread`).
    pub(super) fn is_on(&self) -> bool {
        self.max_ns > 0
    }

    /// A handler woke from its sleep to faults at `now`: the window follows the gap.
    /// (Only when polling is on; a race between two waking handlers costs one step of
    /// the window at most.)
    pub(super) fn woke(&self, now: u64) {
        if self.max_ns == 0 {
            return;
        }
        let gap = now.saturating_sub(self.slept_at_ns.load(Relaxed));
        let window = self.window_ns.load(Relaxed);
        let next = if gap <= self.max_ns {
            // Polling that long would have caught it.
            (window * 2).max(POLL_WINDOW_START_NS).max(gap).min(self.max_ns)
        } else if window / 2 < POLL_WINDOW_FLOOR_NS {
            0
        } else {
            window / 2
        };
        self.window_ns.store(next, Relaxed);
    }

    /// The window to poll for, if the caller is to poll now (no other thread is): it
    /// then calls `end` when it stops.
    pub(super) fn begin(&self) -> Option<u64> {
        let window = self.window_ns.load(Relaxed);
        (window > 0 && self.polling.compare_exchange(false, true, Relaxed, Relaxed).is_ok()).then_some(window)
    }

    /// The poll `begin` started has ended, having found `found` faults.
    pub(super) fn end(&self, found: u64) {
        self.found.fetch_add(found, Relaxed);
        self.polling.store(false, Relaxed);
    }

    /// A handler found no more events at `now` and goes to sleep.
    pub(super) fn sleeps(&self, now: u64) {
        // Only `woke` reads it, and only with polling on.
        if self.max_ns > 0 {
            self.slept_at_ns.store(now, Relaxed);
        }
    }

    /// Faults found while polling, so far.
    pub(super) fn found(&self) -> u64 {
        self.found.load(Relaxed)
    }

    #[cfg(test)]
    fn window_ns(&self) -> u64 {
        self.window_ns.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::FaultPoll;
    use std::sync::atomic::Ordering::Relaxed;

    /// The window grows while faults come within its bound after the handler slept,
    /// shrinks to nothing when they come later, and stays off when polling is.
    #[test]
    fn the_poll_window_follows_the_gaps_between_faults() {
        let poll = FaultPoll::new(200);
        let gap = |poll: &FaultPoll, ns: u64| {
            poll.slept_at_ns.store(1_000_000, Relaxed);
            poll.woke(1_000_000 + ns);
        };
        assert_eq!(poll.window_ns(), 200_000, "it starts at its bound");
        for _ in 0..6 {
            gap(&poll, 5_000_000);
        }
        assert_eq!(poll.window_ns(), 0, "faults far apart: no polling");
        gap(&poll, 150_000);
        assert_eq!(poll.window_ns(), 150_000, "a fault within the bound after a sleep: at least that gap");
        gap(&poll, 20_000);
        assert_eq!(poll.window_ns(), 200_000, "doubled, within the bound");
        gap(&poll, 300_000);
        assert_eq!(poll.window_ns(), 100_000, "a fault beyond the bound halves it");
        let off = FaultPoll::new(0);
        gap(&off, 10_000);
        assert_eq!(off.window_ns(), 0);
        assert_eq!(off.begin(), None, "no window, no poll");
        let on = FaultPoll::new(200);
        assert_eq!(on.begin(), Some(200_000));
        assert_eq!(on.begin(), None, "one thread polls at a time");
        on.end(3);
        assert_eq!((on.begin(), on.found()), (Some(200_000), 3));
    }
}
