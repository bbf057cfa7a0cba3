//! The handler threads' polling for the next fault and for their reads: at most one
//! thread polls for faults at a time (two would take both CPUs of a small machine from
//! the program), for a window that adapts to the gaps between faults as the kernel's
//! halt polling does (`drivers/cpuidle/governors/haltpoll.c`); and only while the
//! machine has a CPU to spare (`SpareCpu`).
//!
//! Why the gate: a poll keeps its CPU busy while it waits (it yields to a thread
//! runnable on that CPU, not to one queued on another), so it pays while a CPU would
//! be idle anyway and is a loss when the program, its clients or other programs have
//! work for every CPU. Which of the two holds is a property of the moment, not of the
//! program: the machine's idle time, read every tick, with the polls' own time added
//! back (a poll's time would have been idle without it), decides.
//!
//! ```text
//!            spare < SPARE_OFF_MILLI                 (a window of
//!   ┌─────────┐ ─────────────────────▶ ┌─────────┐   WINDOW_NS or more
//!   │ polling │                        │ asleep  │   between looks)
//!   └─────────┘ ◀───────────────────── └─────────┘
//!            spare ≥ SPARE_ON_MILLI
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

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
    /// Whether the machine has a CPU to spare for polling now (`SpareCpu`).
    allowed: AtomicBool,
    /// Nanoseconds the handlers spent polling, for faults and for their reads'
    /// completions, without finding anything: CPU time that would have been idle.
    spun_ns: AtomicU64,
    /// The gate's memory between ticks (taken by the ticking thread only).
    spare: Mutex<SpareCpu>,
    /// Ticks the gate kept the handlers asleep.
    paused_ticks: AtomicU64,
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
            allowed: AtomicBool::new(true),
            spun_ns: AtomicU64::new(0),
            spare: Mutex::new(SpareCpu::default()),
            paused_ticks: AtomicU64::new(0),
        }
    }

    /// Whether the handlers poll now: polling is on and the machine has a CPU to spare.
    pub(super) fn allowed(&self) -> bool {
        self.max_ns > 0 && self.allowed.load(Relaxed)
    }

    /// Adds `ns` of polling that found nothing.
    pub(super) fn spun(&self, ns: u64) {
        self.spun_ns.fetch_add(ns, Relaxed);
    }

    /// One look at the machine (every 100 ms or so): `idle_ns`, the machine's idle time
    /// so far over every CPU (`None` if it cannot be read: polling stays as it is), at
    /// `now` (the pager's clock).
    pub(super) fn tick(&self, now: u64, idle_ns: Option<u64>) {
        let Some(idle_ns) = idle_ns.filter(|_| self.max_ns > 0) else { return };
        let sample = Sample { at_ns: now, idle_ns, spun_ns: self.spun_ns.load(Relaxed) };
        let allowed = self.spare.lock().unwrap_or_else(|p| p.into_inner()).step(sample);
        self.allowed.store(allowed, Relaxed);
        if !allowed {
            self.paused_ticks.fetch_add(1, Relaxed);
        }
    }

    /// The gate's figures: ticks it kept the handlers asleep, nanoseconds they polled
    /// for nothing, and the spare CPU it last measured (in thousandths of a CPU).
    pub(super) fn gate_figures(&self) -> (u64, u64, u64) {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).spare_milli;
        (self.paused_ticks.load(Relaxed), self.spun_ns.load(Relaxed), spare)
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
        (window > 0
            && self.allowed.load(Relaxed)
            && self.polling.compare_exchange(false, true, Relaxed, Relaxed).is_ok())
        .then_some(window)
    }

    /// The poll `begin` started found `found` faults (counted at once: a poll may last
    /// as long as faults keep coming).
    pub(super) fn found_some(&self, found: u64) {
        self.found.fetch_add(found, Relaxed);
    }

    /// The poll `begin` started has ended.
    pub(super) fn end(&self) {
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

/// The gate: whether a CPU would be idle but for the polls, measured over windows of at
/// least `WINDOW_NS`, with hysteresis (drawn in the module's comment).
#[derive(Debug, Default)]
pub(super) struct SpareCpu {
    /// The sample the window started at.
    last: Option<Sample>,
    /// The decision: true while asleep (so a fresh gate lets polling on).
    paused: bool,
    /// The spare CPU the last window measured, in thousandths of a CPU.
    spare_milli: u64,
}

/// What the shell reads at a tick: the time, the machine's idle time summed over its
/// CPUs, and the handlers' polling that found nothing (all in nanoseconds).
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) at_ns: u64,
    pub(super) idle_ns: u64,
    pub(super) spun_ns: u64,
}

/// Shortest window measured: the machine's idle time is counted in 10 ms ticks per CPU.
const WINDOW_NS: u64 = 200_000_000;
/// Spare CPU, in thousandths, at which polling starts again and below which it stops.
/// Polling takes at most a CPU: it pays where about one would be idle without it.
const SPARE_ON_MILLI: u64 = 900;
const SPARE_OFF_MILLI: u64 = 600;

impl SpareCpu {
    /// Takes a sample; whether the handlers may poll until the next.
    pub(super) fn step(&mut self, sample: Sample) -> bool {
        let Some(last) = self.last else {
            self.last = Some(sample);
            return !self.paused;
        };
        let wall = sample.at_ns.saturating_sub(last.at_ns);
        if wall < WINDOW_NS {
            return !self.paused;
        }
        let spare = sample.idle_ns.saturating_sub(last.idle_ns) + sample.spun_ns.saturating_sub(last.spun_ns);
        self.spare_milli = spare.saturating_mul(1000) / wall;
        self.paused = if self.paused { self.spare_milli < SPARE_ON_MILLI } else { self.spare_milli < SPARE_OFF_MILLI };
        self.last = Some(sample);
        !self.paused
    }
}

#[cfg(test)]
mod tests {
    use super::{FaultPoll, Sample, SpareCpu, SPARE_OFF_MILLI, SPARE_ON_MILLI, WINDOW_NS};
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
        on.found_some(3);
        on.end();
        assert_eq!((on.begin(), on.found()), (Some(200_000), 3));
    }

    /// Polling stops once less than a CPU's worth of idle time (the polls' own time
    /// counted as idle) is left in a window, and starts again only once most of a CPU
    /// is; windows shorter than the floor decide nothing.
    #[test]
    fn the_gate_polls_only_while_a_cpu_is_spare() {
        let mut gate = SpareCpu::default();
        // A window of `wall` ms in which the machine idled `idle` ms and the polls spun `spun` ms.
        let mut at = 0u64;
        let (mut idle_total, mut spun_total) = (0u64, 0u64);
        let mut window = |gate: &mut SpareCpu, wall: u64, idle: u64, spun: u64| {
            at += wall * 1_000_000;
            idle_total += idle * 1_000_000;
            spun_total += spun * 1_000_000;
            gate.step(Sample { at_ns: at, idle_ns: idle_total, spun_ns: spun_total })
        };
        assert!(window(&mut gate, 0, 0, 0), "a fresh gate polls");
        assert!(window(&mut gate, 300, 150, 150), "a CPU's worth spare (half of it the polls')");
        assert_eq!(gate.spare_milli, 1000);
        assert!(window(&mut gate, 100, 0, 0), "a short window decides nothing");
        assert!(!window(&mut gate, 200, 40, 40), "the program wants the CPU the polls took");
        assert!(gate.spare_milli < SPARE_OFF_MILLI);
        assert!(!window(&mut gate, 200, 150, 0), "between the marks: as it was");
        assert!(window(&mut gate, 200, 200, 0), "a whole CPU idle again");
        assert!(gate.spare_milli >= SPARE_ON_MILLI);
        assert!(window(&mut gate, 200, 80, 60), "between the marks: as it was");
        assert!(WINDOW_NS <= 200_000_000);

        // The shell's side: a tick with no idle time read leaves it; polling off, no gate.
        let poll = FaultPoll::new(200);
        poll.tick(0, Some(0));
        poll.tick(WINDOW_NS, Some(0));
        assert!(!poll.allowed() && poll.begin().is_none(), "no CPU spare: no poll");
        poll.tick(2 * WINDOW_NS, None);
        assert!(!poll.allowed());
        poll.spun(2 * WINDOW_NS);
        poll.tick(3 * WINDOW_NS, Some(0));
        assert!(poll.allowed() && poll.begin().is_some(), "the polls' own time was the spare CPU");
        assert_eq!(poll.gate_figures().0, 1, "one look held it asleep (the one that read nothing decides nothing)");
        let off = FaultPoll::new(0);
        off.tick(0, Some(0));
        off.tick(WINDOW_NS, Some(0));
        assert!(!off.allowed());
        assert_eq!(off.gate_figures().0, 0, "polling off: the gate never runs");
    }
}
