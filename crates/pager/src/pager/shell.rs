//! The live side of the pager core's actors (`znswap_pager_core::{Evictor, FaultTask,
//! IoThread}`): one [`Live`] per thread carries out what an actor's step asks with the
//! real locks, ioctls and device, and [`Live::wait`] / [`pause`] turn its `Next` into
//! real waits. The steps themselves, and so the order of calls, live in the core,
//! where the pager DST runs them too.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLockReadGuard;
use std::time::{Duration, Instant};

use znswap_pager_core::{Actions, DiscardBatch, Next, PagerCore, Pause, Shell, WaitOn};

use super::install::Wakes;
use super::shared::{Shared, StateGuard};
use crate::sys::thread_cpu_ns;

/// A thread's CPU time, charged to a counter as it goes.
pub(super) struct CpuTime<'a> {
    counter: &'a AtomicU64,
    counted: u64,
}

impl<'a> CpuTime<'a> {
    pub(super) fn new(counter: &'a AtomicU64) -> CpuTime<'a> {
        CpuTime { counter, counted: thread_cpu_ns() }
    }

    /// Adds the CPU time since the last charge.
    pub(super) fn charge(&mut self) {
        let now = thread_cpu_ns();
        self.counter.fetch_add(now - self.counted, Relaxed);
        self.counted = now;
    }
}

/// What the actor behind a [`Live`] adds to it: its read buffer, and whether its lock
/// waits are counted as a fault's.
pub(super) trait Role {
    /// Faults spin for the state lock a little before they sleep, and count the wait.
    const FAULT: bool = false;
    /// The fault's page, which its last read filled, for `CopyFrom::FaultPage`.
    fn read_buffer(&self) -> &[u8] {
        &[]
    }
    /// Called around carrying out actions (a fault times its install).
    fn applying(&mut self, _done: bool) {}
    /// A fault's wait for the state lock, and its release of it, in nanoseconds.
    fn lock_waited(&mut self, _ns: u64) {}
    fn unlocked(&mut self, _ns: u64) {}
}

/// One pager thread's hold on the shared state: the state lock and `mappings` while the
/// actor holds them, and the role's own parts.
pub(super) struct Live<'a, R: Role> {
    pub(super) shared: &'a Shared,
    state: Option<StateGuard<'a>>,
    mappings: Option<RwLockReadGuard<'a, ()>>,
    /// Wake-ups owed by the actions run under the lock held now, given at its release.
    wakes: Wakes,
    pub(super) role: R,
}

impl<'a, R: Role> Live<'a, R> {
    pub(super) fn new(shared: &'a Shared, role: R) -> Live<'a, R> {
        Live { shared, state: None, mappings: None, wakes: Wakes::default(), role }
    }

    /// Carries out `Next::Wait`: releases the state lock as the wait begins, waits for
    /// the wake-up or the timeout, and returns without the lock.
    pub(super) fn wait(&mut self, on: WaitOn) {
        let state = self.state.take().expect("an actor waits holding the state lock");
        // Given before the wait, still under the lock (rare: an actor seldom maps pages
        // and then waits).
        self.wakes.give(&self.shared.spaces);
        drop(state.wait(on));
    }

    /// Carries out a background actor's `Next` (the evictor's, the I/O thread's): a pause,
    /// or a wait, before which the thread's CPU time since its last wait is added to
    /// `cpu_ns`, and after which the wait to `idle_ns`.
    pub(super) fn carry_out(&mut self, next: Next, cpu: &mut CpuTime<'_>, idle_ns: &AtomicU64) {
        match next {
            Next::Continue => {}
            Next::Pause(pause) => pause_for(pause),
            Next::Wait(on) => {
                cpu.charge();
                let idle = Instant::now();
                self.wait(on);
                idle_ns.fetch_add(idle.elapsed().as_nanos() as u64, Relaxed);
            }
            Next::Resolved { .. } | Next::Aside => unreachable!("only a fault is resolved or set aside"),
        }
    }

    /// Nothing held: checked between a thread's steps' loops and at its exit.
    pub(super) fn holds_nothing(&self) -> bool {
        self.state.is_none() && self.mappings.is_none() && self.wakes.is_empty()
    }
}

impl<R: Role> Drop for Live<'_, R> {
    /// No thread is left waiting on a page an actor mapped, whatever path it left by.
    fn drop(&mut self) {
        self.state = None;
        self.wakes.give(&self.shared.spaces);
    }
}

impl<R: Role> Shell for Live<'_, R> {
    fn now(&mut self) -> u64 {
        self.shared.now()
    }

    fn lock(&mut self) {
        assert!(self.state.is_none(), "the state lock taken twice");
        self.state = Some(if R::FAULT {
            let (state, waited_ns) = self.shared.lock_for_fault();
            self.role.lock_waited(waited_ns);
            state
        } else {
            self.shared.lock()
        });
    }

    fn unlock(&mut self) {
        let started = R::FAULT.then(Instant::now);
        assert!(self.state.take().is_some(), "the state lock released but not held");
        self.wakes.give(&self.shared.spaces);
        if let Some(started) = started {
            self.role.unlocked(started.elapsed().as_nanos() as u64);
        }
    }

    fn core(&mut self) -> &mut PagerCore {
        self.state.as_mut().expect("the core is reached under the state lock")
    }

    fn apply(&mut self, actions: &mut Actions) {
        debug_assert!(self.state.is_some(), "actions are carried out under the state lock that made them");
        if actions.is_empty() {
            return;
        }
        self.role.applying(false);
        self.shared.install.run(&self.shared.spaces, actions, self.role.read_buffer(), &mut self.wakes);
        self.role.applying(true);
    }

    fn mappings_read(&mut self) {
        // Lock order: `mappings` before the state lock.
        assert!(self.state.is_none() && self.mappings.is_none(), "`mappings` taken out of order");
        self.mappings = Some(self.shared.mappings.read().unwrap_or_else(|p| p.into_inner()));
    }

    fn mappings_release(&mut self) {
        assert!(self.mappings.take().is_some(), "`mappings` released but not held");
    }

    fn discard_pages(&mut self, batch: &mut DiscardBatch) {
        debug_assert!(self.mappings.is_some() && self.state.is_none());
        if self.shared.spaces.is_own() {
            self.shared.discard.dontneed(batch.ranges());
        } else {
            self.shared.spaces.discard(batch);
        }
    }
}

/// Waits as the core asked, without the lock.
pub(super) fn pause_for(pause: Pause) {
    match pause {
        Pause::None => {}
        Pause::Yield => std::thread::yield_now(),
        Pause::Micros(micros) => std::thread::sleep(Duration::from_micros(micros as u64)),
    }
}
