//! Where the pager's threads sleep when the core says wait (`Next::Wait`), and the stop
//! that ends them: one condition variable per kind of wait, each notified as the core's
//! `Wakeups` say when the state lock is released.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Condvar;

use znswap_pager_core::{WaitOn, Wakeups};

#[derive(Default)]
pub(super) struct Wakers {
    /// Evictors wait for pressure, the I/O threads for I/O, faults for room.
    evictors: Condvar,
    io: Condvar,
    room: Condvar,
    /// The pager stops: every thread ends at its next look.
    stop: AtomicBool,
}

impl Wakers {
    /// The condition variable a wait on `on` sleeps on (with the state lock's mutex).
    pub(super) fn condvar(&self, on: WaitOn) -> &Condvar {
        match on {
            WaitOn::Evictors => &self.evictors,
            WaitOn::Io => &self.io,
            WaitOn::Room => &self.room,
        }
    }

    /// Wakes whom `wakeups` names (given once the state lock is released).
    pub(super) fn notify(&self, wakeups: &Wakeups) {
        if wakeups.evictors {
            self.evictors.notify_all();
        }
        if wakeups.io {
            self.io.notify_one();
        }
        if wakeups.room {
            self.room.notify_all();
        }
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }

    /// Stops every thread: each wakes and ends.
    pub(super) fn stop(&self) {
        self.stop.store(true, Relaxed);
        self.evictors.notify_all();
        self.io.notify_all();
        self.room.notify_all();
    }
}
