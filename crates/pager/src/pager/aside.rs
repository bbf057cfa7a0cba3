//! Faults set aside: a served tenant's fault whose wait for room is its write limit at
//! work (the core's `Next::Aside`) is not waited on by the handler thread that read it,
//! which goes on serving the other tenants' faults. (The pager DST sets faults aside as
//! this does, with the same epochs: `crates/dst/src/pager/threads.rs`.) The fault's task and page
//! are kept here; when room comes (or a room wait's timeout passes) a handler steps it
//! again, as it would after the wait, on whichever thread the wake-up finds.
//!
//! ```text
//!  handler: step ── Aside ──> begin (under the state lock:
//!           `waiting` + 1, the room epoch read) → unlock → a spare scratch for the
//!           handler, the fault's pushed (none spare: abandon, and wait in it)
//!  room:    notify ── `waiting` > 0 ──> epoch + 1, the event descriptor written
//!  handler: woken (the descriptor, or its shorter timeout) ──> resume: each fault
//!           aside whose epoch is past, or aside a room wait's timeout, stepped again
//! ```
//!
//! No wake-up is lost: `waiting` rises under the state lock the room check ran under,
//! so room made after that check is announced; a fault pushed after an announcement
//! (its epoch behind) has the descriptor written again. (The two counters are
//! sequentially consistent: a push must see an announcement made before it.)

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Instant;

use znswap_pager_core::WaitOn;

use super::stats::FaultTimes;

/// Faults aside at most (a scratch each, made at start); beyond, a handler waits in the
/// fault as before.
pub(super) const ASIDE_MAX: usize = 32;

/// What a fault's scratch must say to go back to the spares.
pub(super) trait Scratch {
    /// No fault under way in it.
    fn is_idle(&self) -> bool;
}

/// One fault set aside: its scratch (task and page), and what its record needs.
pub(super) struct AsideFault<S> {
    pub(super) scratch: Box<S>,
    /// The engine tenant of the served process it came from.
    pub(super) tenant: Option<u32>,
    /// When its handler read it, for its latency.
    pub(super) started: Instant,
    pub(super) aside_at: Instant,
    pub(super) times: FaultTimes,
    /// The room epoch it last saw (`Aside::begin`).
    epoch: u64,
}

/// The faults aside, and a spare scratch for each handler whose fault goes aside
/// (scratches of type `S`: the shell's fault tasks and pages).
pub(super) struct Aside<S> {
    faults: Mutex<VecDeque<AsideFault<S>>>,
    /// (Boxed as the handlers' own are: a fault going aside swaps its handler's box
    /// for a spare.)
    #[allow(clippy::vec_box)]
    spares: Mutex<Vec<Box<S>>>,
    /// Faults aside or being set aside.
    waiting: AtomicUsize,
    /// Rooms announced while faults were aside.
    epoch: AtomicU64,
    /// Readable while faults aside may go on: the handler threads wait on it beside the
    /// served processes' descriptors.
    ready: OwnedFd,
}

impl<S: Scratch> Aside<S> {
    /// `spare` makes each of the spares (`ASIDE_MAX`), at once.
    pub(super) fn new(spare: impl Fn() -> Box<S>) -> std::io::Result<Aside<S>> {
        // SAFETY: a plain system call returning a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Aside {
            faults: Mutex::new(VecDeque::with_capacity(ASIDE_MAX)),
            spares: Mutex::new((0..ASIDE_MAX).map(|_| spare()).collect()),
            waiting: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            // SAFETY: `raw` is a descriptor we own from here on.
            ready: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    pub(super) fn ready_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }

    /// Whether any fault is aside (a handler then waits no longer than a room wait).
    pub(super) fn any(&self) -> bool {
        self.waiting.load(SeqCst) > 0
    }

    /// How long a handler waits for events at most while faults are aside.
    pub(super) fn retry_ms(&self) -> i32 {
        (WaitOn::Room.timeout_ns() / 1_000_000) as i32
    }

    /// A fault is about to be set aside, under the state lock its room check ran under:
    /// the room epoch to push it with.
    pub(super) fn begin(&self) -> u64 {
        self.waiting.fetch_add(1, SeqCst);
        self.epoch.load(SeqCst)
    }

    /// A fault `begin` counted is not set aside after all (no spare scratch for its
    /// handler, which then waits in it).
    pub(super) fn abandon(&self) {
        self.waiting.fetch_sub(1, SeqCst);
    }

    /// A scratch for a handler whose fault goes aside, if one is spare.
    pub(super) fn spare(&self) -> Option<Box<S>> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Sets the fault aside (after `begin`, the state lock released).
    pub(super) fn push(&self, scratch: Box<S>, tenant: Option<u32>, started: Instant, times: FaultTimes, epoch: u64) {
        let fault = AsideFault { scratch, tenant, started, aside_at: Instant::now(), times, epoch };
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).push_back(fault);
        if self.epoch.load(SeqCst) != epoch {
            // Room came between its check and here: someone is to look at it.
            self.signal();
        }
    }

    /// Room came (`Wakeups::room`): faults aside are to be stepped again.
    pub(super) fn room_came(&self) {
        if self.any() {
            self.epoch.fetch_add(1, SeqCst);
            self.signal();
        }
    }

    fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer; a full counter (EAGAIN) is readable
        // already.
        let _ = unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&self.ready), one.as_ptr().cast(), 8) };
    }

    /// The next fault aside that may go on now (room came since it was set aside, or it
    /// waited a room wait's timeout; all with `all`), out of at most `looks` looked at;
    /// the others stay. Drains the descriptor first, so one wake-up serves them all.
    pub(super) fn take_due(&self, all: bool, looks: &mut usize) -> Option<AsideFault<S>> {
        let epoch = self.epoch.load(SeqCst);
        let timeout = WaitOn::Room.timeout_ns() as u128;
        let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        while *looks > 0 {
            *looks -= 1;
            let fault = faults.pop_front()?;
            if all || fault.epoch != epoch || fault.aside_at.elapsed().as_nanos() >= timeout {
                self.waiting.fetch_sub(1, SeqCst);
                return Some(fault);
            }
            faults.push_back(fault);
        }
        None
    }

    /// How many faults are aside now (a bound on one pass over them).
    pub(super) fn len(&self) -> usize {
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Empties the descriptor (before a pass over the faults aside).
    pub(super) fn drain(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer; EAGAIN when empty.
        let _ = unsafe { libc::read(std::os::fd::AsRawFd::as_raw_fd(&self.ready), count.as_mut_ptr().cast(), 8) };
    }

    /// A scratch back to the spares (a fault aside resolved, or a spare not needed).
    pub(super) fn give_back(&self, scratch: Box<S>) {
        debug_assert!(scratch.is_idle());
        self.spares.lock().unwrap_or_else(|p| p.into_inner()).push(scratch);
    }
}
