//! The run's schedule: the step count, the simulated clock, and the seed's random stream,
//! which picks what happens at each step (which actor steps, what an application thread
//! touches, which device command fails). One stream for all of it: a seed replays
//! exactly only if every draw comes in the same order.
//!
//! Also how an actor waits between two of its steps ([`Waiting`]), in steps.

use znswap_pager_core::Pause;

use crate::scenario::{below, chance, Rng};

/// A condvar wait's timeout, in steps (the shell waits 5-10 ms).
const WAIT_TIMEOUT_STEPS: u64 = 4_000;

pub struct Schedule {
    pub step: u64,
    pub now_ns: u64,
    pub rng: Rng,
}

impl Schedule {
    pub fn new(rng: Rng) -> Schedule {
        Schedule { step: 0, now_ns: 0, rng }
    }

    /// The next step: the clock moves on about a microsecond, now and then much more.
    pub fn advance(&mut self) {
        self.step += 1;
        self.now_ns += 1 + below(&mut self.rng, 2_000);
        if chance(&mut self.rng, 0.001) {
            // Now and then a longer gap: chunk flushes, FAR and GC pacing run on ticks.
            self.now_ns += below(&mut self.rng, 5_000_000);
        }
    }

    /// Everyone sleeps until step `until`: the clock moves on with them (a step is about
    /// a µs).
    pub fn sleep_until(&mut self, until: u64) {
        let slept = until.saturating_sub(self.step);
        self.step += slept;
        self.now_ns += slept * 1_000;
    }

    /// A step within the next `steps`.
    pub fn within(&mut self, steps: u64) -> u64 {
        self.step + 1 + below(&mut self.rng, steps.max(1))
    }

    /// How an actor waits after its step asked for `pause`.
    pub fn pause(&mut self, pause: Pause) -> Waiting {
        match pause {
            Pause::None => Waiting::No,
            Pause::Yield => Waiting::Paused(self.within(4)),
            Pause::Micros(micros) => Waiting::Paused(self.within(micros as u64 / 4)),
        }
    }

    /// A wait on a condvar, which times out.
    pub fn asleep(&mut self) -> Waiting {
        Waiting::Asleep(self.within(WAIT_TIMEOUT_STEPS))
    }

    /// Whether an actor waiting as `waiting` may step: its timer fired, or it was woken.
    pub fn ready(&self, waiting: Waiting, woken: bool) -> bool {
        match waiting {
            Waiting::No => true,
            Waiting::Paused(until) => self.step >= until,
            Waiting::Asleep(until) => woken || self.step >= until,
        }
    }
}

/// An actor's wait between two steps, as its thread would wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    No,
    /// A pause: runnable again at this step.
    Paused(u64),
    /// Asleep on a condvar: runnable again when woken, or at this step (the timeout).
    Asleep(u64),
}

impl Waiting {
    /// The step its timer fires at, if it waits.
    pub fn until(self) -> Option<u64> {
        match self {
            Waiting::No => None,
            Waiting::Paused(until) | Waiting::Asleep(until) => Some(until),
        }
    }
}

/// What may step next: a thread (by its index), or an event of the program's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// An application thread.
    App(usize),
    /// A fault handler thread.
    Handler(usize),
    Evictor(usize),
    Io(usize),
    /// The program frees a region, and maps another.
    Churn,
    /// The program discards a range, or its zap comes.
    ProgramDiscard,
    /// The program forks, its child reads a page, or the child goes.
    Fork,
    /// The budget moves.
    Budget,
}
