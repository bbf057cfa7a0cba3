//! The pager's actors as step functions: the evictor, one fault's resolution and the I/O
//! thread. Each is a small state machine whose [`step`](Evictor::step) does one piece of
//! its loop (a lock hold, or one piece of work outside the lock) through a [`Shell`]
//! and says what should happen before the next ([`Next`]).
//!
//! The live pager's threads call `step` in a loop, carrying out `Next` with real
//! waits; the pager DST calls the very same `step` when its seed picks that actor, over
//! a model of the page tables and the device. So the order of calls, which lock is held
//! where, and what runs outside the lock are written once, here, and what the DST tests
//! is what runs.
//!
//! ```text
//!  evictor:  Check (late discards answered since: done) ──Sleep──> Wait(Evictors)
//!              │                                       (lock held into the wait)
//!              │ ├──Discard──> Discard(Take → Madvise → Done) ──> Check
//!              │ └──Evict────> Scan → Park(a move a step; settled under the lock) → Protect(range 0..n)
//!              │                 → ZeroCheck → HandOver ──> Check
//!              │        (asynchronous write protection: Protect → Scan → Park → HandOver)
//!  fault:    Call ──Read──> Read → ReadDone ──> resolved / Call
//!              ├──ZeroFill (under the same lock hold) ──> resolved
//!              ├──OpenCached (under the same lock hold) ──> served, or Read → ReadDone
//!              ├──WaitRoom──> Discard(Take → Madvise → Done) ──> Call, or Wait(Room)
//!              └──Again──> Pause ──> Call
//!  I/O:      Next ──none──> Wait(Io)
//!              └──> Device (outside the lock) → Complete ──> Next
//! ```

use znswap_core::{IoError, IoRequest};

use crate::discard::DiscardBatch;
use crate::evict::{EvictRound, EvictorWork, ParkOutcome};
use crate::fault::{Fault, FaultKind, FaultStep, Pause, ReadInto};
use crate::io::{IoCompletion, IoPlan};
use crate::{Actions, Digest, PagerCore, Sealed};

/// What the shell does before the actor's next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Step again at once.
    Continue,
    /// Wait for the wake-up named, or its timeout. The state lock is still held: the
    /// shell releases it as the wait begins, so a wake-up sent in between is not lost.
    Wait(WaitOn),
    /// Pause as asked (no lock held), then step again.
    Pause(Pause),
    /// The fault is resolved; `ours`: it was a page of this pager's (self-paging hands
    /// a signal that is not on).
    Resolved { ours: bool },
    /// A fault that may go aside (`Fault::may_go_aside`) would wait for room its
    /// tenant's write limit holds back: milliseconds, where other waits last
    /// microseconds. The shell sets it aside, still under the state lock (so room made
    /// after the core's check is announced to it), lets the lock go, and its thread
    /// serves other faults; it steps the fault again once room is announced
    /// (`Wakeups::room`) or a room wait's timeout passes, as after a wait. A shell with
    /// no room to set it aside waits in it instead, as for `Wait(WaitOn::Room)`.
    Aside,
}

/// The wake-ups an actor waits for (`Wakeups` of the core).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOn {
    Evictors,
    Io,
    Room,
}

impl WaitOn {
    /// The longest wait: the evictor and the I/O thread look again on a timer (the
    /// engine's flushes and GC pacing run on ticks); a fault waiting for room retries
    /// on one (the core lets it past the budget after `ROOM_WAIT_MAX_NS`).
    pub fn timeout_ns(self) -> u64 {
        match self {
            WaitOn::Evictors | WaitOn::Io => 5_000_000,
            WaitOn::Room => 10_000_000,
        }
    }
}

/// What every actor needs of its shell: the clock, the state lock with the core behind
/// it, the `mappings` lock, the core's actions carried out, and discards.
///
/// Lock order (`crate` docs): `mappings` before the state lock.
pub trait Shell {
    /// Nanoseconds on the shell's clock.
    fn now(&mut self) -> u64;
    /// Takes the state lock.
    fn lock(&mut self);
    /// Releases the state lock; the wake-ups and the notice the core owes go out.
    fn unlock(&mut self);
    /// The core: only while the state lock is held.
    fn core(&mut self) -> &mut PagerCore;
    /// Carries out (and drains) `actions` under the state lock. A copy from the fault's
    /// page takes what the last [`FaultShell::read`] put there.
    fn apply(&mut self, actions: &mut Actions);
    /// Takes `mappings` shared: regions stay mapped until the release.
    fn mappings_read(&mut self);
    fn mappings_release(&mut self);
    /// `MADV_DONTNEED` over `batch.ranges()`, outside the state lock, under `mappings`.
    /// A served process's ranges its agent has not dropped by the return are said with
    /// `batch.delay` (`DropDelay`).
    fn discard_pages(&mut self, batch: &mut DiscardBatch);
}

/// The evictor's work outside the state lock.
pub trait EvictorShell: Shell {
    /// Write-protects `start..end` (`UFFDIO_WRITEPROTECT`); false if it failed (the
    /// region went away).
    fn write_protect(&mut self, start: u64, end: u64) -> bool;
    /// Moves the victim at `address` to its shadow page (`UFFDIO_MOVE` with no wake-up
    /// and no source holes allowed), without the state lock (`park_settle` settles the
    /// outcome under it), and says what the kernel did (`ParkOutcome`).
    fn park(&mut self, address: u64, shadow: u64) -> ParkOutcome;
    /// Whether the write-protected victim at `address` reads all zeroes.
    fn page_is_zero(&mut self, address: u64) -> bool;
    /// Under the state lock, never waiting: whether the agent of region `owner`'s process
    /// has now answered the discard it was late to answer (`DropDelay::Late`), or is gone.
    fn late_answered(&mut self, owner: u32) -> bool;
    /// With asynchronous write protection (`CoreConfig::wp_async`): the pages of
    /// `start..end` written since they were last protected (`PAGEMAP_SCAN`), each run
    /// given to `found` as `start..end`; pages with nothing mapped scan as written too.
    /// It changes nothing: not `PM_SCAN_WP_MATCHING`, which puts a write-protect marker
    /// in every empty entry of the range (`make_uffd_wp_pte`), where `UFFDIO_ZEROPAGE`
    /// and `UFFDIO_MOVE` then fail with `EEXIST` (seen: redis stopped on the first
    /// zero fill after a scan). A written page the round keeps is protected again by the
    /// hand when it clears its bit, as in the synchronous mode.
    fn scan_written(&mut self, start: u64, end: u64, found: &mut dyn FnMut(u64, u64));
    /// With asynchronous write protection: the digest of the page at `address` (a
    /// parked victim's shadow page), as the I/O shell takes an append's.
    fn digest(&mut self, address: u64) -> Digest;
}

/// A fault's work outside the state lock, and its shared scratch.
pub trait FaultShell: Shell {
    /// Reads `pages` slots of `zone` from `slot` outside the lock, into the fault's page
    /// or the read-ahead cache's pages the core claimed for it.
    /// With `sealed`, opens the faulting page (`ReadInto::fault_index`) after the read;
    /// one that fails to open is a failed read (`IoError::Device`). Pages read ahead
    /// stay sealed until a fault wants them (`open_cached`).
    fn read(
        &mut self,
        zone: u32,
        slot: u32,
        pages: u32,
        into: ReadInto,
        sealed: Option<&Sealed>,
    ) -> Result<(), IoError>;
    /// Under the state lock: opens read-ahead cache page `entry` in place as `sealed`'s
    /// page; whether it opened (a page that did not must not be served).
    fn open_cached(&mut self, entry: u32, sealed: &Sealed) -> bool;
    /// Under the state lock: maps a page of zeroes at `address` only where nothing is
    /// mapped, waking the faulting threads; whether it landed.
    fn zero_fill(&mut self, address: u64) -> bool;
    /// Takes the direct-reclaim batch (one per pager) if no other fault has it.
    fn fault_discard_take(&mut self) -> Option<DiscardBatch>;
    fn fault_discard_return(&mut self, batch: DiscardBatch);
}

/// The I/O thread's device command.
pub trait IoShell: Shell {
    /// Runs the plan's request on the device outside the state lock. An append writes
    /// `records` with its pages (per-LBA metadata, or the footer page); a GC or footer
    /// read leaves the records it read in `records`.
    /// With sealed pages (`CoreConfig::encrypt`), an append seals each page it
    /// writes from the program's memory as `plan.identity(index)` and leaves the seals
    /// in `plan.seals_mut()`, one per page. With asynchronous write protection
    /// (`CoreConfig::wp_async`) it leaves each page's digest, of the bytes it read, in
    /// `plan.digests_mut()`.
    fn run_request(&mut self, plan: &mut IoPlan, records: &mut Vec<u8>) -> IoCompletion;
}

// ----------------------------------------------------------------------- discards

/// A discard of written-out pages, by the evictor or by a fault (direct reclaim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DiscardPhase {
    /// `mappings` and the lock: take the pages awaiting their discard.
    Take,
    /// Outside the lock, under `mappings`: `MADV_DONTNEED`.
    Madvise,
    /// The lock: the pages leave the resident set.
    Done,
}

/// One step of a discard: the next phase, or `Err(pages)` when it is over.
fn discard_step(shell: &mut impl Shell, phase: DiscardPhase, batch: &mut DiscardBatch) -> Result<DiscardPhase, usize> {
    match phase {
        DiscardPhase::Take => {
            shell.mappings_read();
            shell.lock();
            let taken = shell.core().discard_take(batch);
            shell.unlock();
            if taken {
                Ok(DiscardPhase::Madvise)
            } else {
                shell.mappings_release();
                Err(0)
            }
        }
        DiscardPhase::Madvise => {
            shell.discard_pages(batch);
            Ok(DiscardPhase::Done)
        }
        DiscardPhase::Done => {
            shell.lock();
            let pages = shell.core().discard_done(batch);
            shell.unlock();
            shell.mappings_release();
            Err(pages)
        }
    }
}

// ------------------------------------------------------------------------ evictor

#[derive(Clone, Copy, Debug)]
enum EvictorPhase {
    Check,
    Discard(DiscardPhase),
    /// Scan span `span` of the round for written victims, before any is moved
    /// (asynchronous write protection).
    Scan {
        span: usize,
        pause: Option<Pause>,
    },
    /// Park the round's victims to be parked, from victim `next` on (`mappings` held
    /// since the pick).
    Park {
        pause: Option<Pause>,
        next: usize,
    },
    /// Write-protect range `range` of the round.
    Protect {
        range: usize,
        pause: Option<Pause>,
    },
    /// Look for all-zero victims (they need no write).
    ZeroCheck {
        pause: Option<Pause>,
    },
    HandOver {
        pause: Option<Pause>,
    },
}

/// The evictor: discards written-out pages, picks victims, write-protects them and looks
/// for all-zero ones outside the lock, and hands them to the engine. Its round and
/// discard batch are allocated once.
pub struct Evictor {
    phase: EvictorPhase,
    round: EvictRound,
    batch: DiscardBatch,
    actions: Actions,
}

/// What an evictor's step did, for the shell's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvictorDid {
    /// An eviction round was picked.
    pub rounds: u64,
    /// A discard finished.
    pub discards: u64,
}

impl Evictor {
    pub fn new(core: &mut PagerCore) -> Evictor {
        Evictor {
            phase: EvictorPhase::Check,
            round: core.evict_round(),
            batch: core.discard_batch(),
            actions: Actions::with_capacity(core.hand_over_actions_max()),
        }
    }

    /// Between rounds and discards: the shell's loop may stop here.
    pub fn at_rest(&self) -> bool {
        matches!(self.phase, EvictorPhase::Check)
    }

    /// Where it is, for a hang's report.
    pub fn describe(&self) -> String {
        format!("{:?}", self.phase)
    }

    /// One step; `did` counts what it finished.
    pub fn step(&mut self, shell: &mut impl EvictorShell, did: &mut EvictorDid) -> Next {
        match self.phase {
            EvictorPhase::Check => self.step_check(shell, did),
            EvictorPhase::Discard(phase) => {
                match discard_step(shell, phase, &mut self.batch) {
                    Ok(next) => self.phase = EvictorPhase::Discard(next),
                    Err(_) => {
                        did.discards += 1;
                        self.phase = EvictorPhase::Check;
                    }
                }
                Next::Continue
            }
            EvictorPhase::Scan { span, pause } => self.step_scan(shell, span, pause),
            EvictorPhase::Park { pause, next } => self.step_park(shell, pause, next),
            EvictorPhase::Protect { range, pause } => self.step_protect(shell, range, pause),
            EvictorPhase::ZeroCheck { pause } => self.step_zero_check(shell, pause),
            EvictorPhase::HandOver { pause } => self.step_hand_over(shell, pause),
        }
    }

    /// `Check`: under `mappings` and the lock, takes the late discards answered since and
    /// asks the core what to do: sleep, discard, or pick a round.
    fn step_check(&mut self, shell: &mut impl EvictorShell, did: &mut EvictorDid) -> Next {
        // A victim's region stays mapped from its pick to its hand-over: freed between
        // them, its addresses could belong to a new region by the time the victims are
        // protected and read.
        shell.mappings_read();
        shell.lock();
        // Discards their agents were late to answer: those answered since.
        let mut index = 0;
        while let Some(&owner) = shell.core().late_owners().get(index) {
            if shell.late_answered(owner) {
                shell.core().late_discard_done(owner);
            } else {
                index += 1;
            }
        }
        match shell.core().evictor_work() {
            EvictorWork::Sleep => {
                shell.mappings_release();
                shell.core().evictor_sleeps(false);
                Next::Wait(WaitOn::Evictors)
            }
            EvictorWork::Discard => {
                shell.unlock();
                shell.mappings_release();
                self.phase = EvictorPhase::Discard(DiscardPhase::Take);
                Next::Continue
            }
            EvictorWork::Evict => {
                did.rounds += 1;
                self.step_pick(shell)
            }
        }
    }

    /// `Check`, still under `mappings` and the lock: picks a round, and starts its work
    /// outside the lock (the protection first with asynchronous write protection, else
    /// the scans and moves), or ends it at once if it has none.
    fn step_pick(&mut self, shell: &mut impl EvictorShell) -> Next {
        let now = shell.now();
        let pause = shell.core().evict_pick(&mut self.round, now);
        if !self.round.needs_hand_over() && shell.core().evictor_held_back() {
            // Nothing to pick but pages of tenants past their write limits: asleep, a
            // fault wanting room (or a budget) wakes it at once, as a pause would not.
            shell.mappings_release();
            shell.core().evictor_sleeps(true);
            return Next::Wait(WaitOn::Evictors);
        }
        shell.unlock();
        if !self.round.needs_hand_over() {
            shell.mappings_release();
            return pause.map_or(Next::Continue, Next::Pause);
        }
        self.phase = if self.round.protects_first() && !self.round.ranges().is_empty() {
            EvictorPhase::Protect { range: 0, pause }
        } else {
            EvictorPhase::Scan { span: 0, pause }
        };
        Next::Continue
    }

    /// `Scan`, without the state lock, before the moves: a write after the scan lands in
    /// the page that is moved (a reference missed, no data lost: a parked page is written
    /// out from the shadow, out of the program's reach).
    fn step_scan(&mut self, shell: &mut impl EvictorShell, span: usize, pause: Option<Pause>) -> Next {
        self.phase = match self.round.scans().get(span).copied() {
            Some(scan) => {
                let round = &mut self.round;
                shell.scan_written(scan.start, scan.end, &mut |start, end| round.found_written(span, start, end));
                EvictorPhase::Scan { span: span + 1, pause }
            }
            None => {
                self.round.spread_written();
                EvictorPhase::Park { pause, next: 0 }
            }
        };
        Next::Continue
    }

    /// `Park`: the next victim's move, without the state lock (a move is a TLB flush, an
    /// inter-processor interrupt, and faults should not wait behind it: held through the
    /// moves, the lock made memcached's faults wait longer for it; figures:
    /// docs/measurements/2026-11-pager.md). The victim cannot change meanwhile but by
    /// the program's discard: faults on a `Parking` or `ParkingRemoved` page wait for
    /// the settling, so the move takes the page's data or the old data of a discarded
    /// page, never a page the program mapped after the zap. One move a step: the pager
    /// DST runs the other actors' steps between them. After the last, one lock hold
    /// settles them all.
    fn step_park(&mut self, shell: &mut impl EvictorShell, pause: Option<Pause>, next: usize) -> Next {
        let victim = (next..self.round.victims()).find(|&v| self.round.victim_to_park(v).is_some());
        self.phase = match victim {
            Some(victim) => {
                let (address, shadow) = self.round.victim_to_park(victim).expect("a victim to park");
                let outcome = shell.park(address, shadow);
                self.round.park_done(victim, outcome);
                if self.round.wants_digest(victim) {
                    // Out of the program's reach now: the bytes cannot change.
                    let digest = shell.digest(shadow);
                    self.round.set_digest(victim, digest);
                }
                EvictorPhase::Park { pause, next: victim + 1 }
            }
            None => {
                // One lock hold settles every move before anything reads or protects the
                // victims: faults on them wait until then.
                if self.round.parks() {
                    shell.lock();
                    let now = shell.now();
                    shell.core().park_settle(&mut self.round, now, &mut self.actions);
                    shell.apply(&mut self.actions);
                    shell.unlock();
                }
                if self.round.ranges().is_empty() || self.round.protects_first() {
                    EvictorPhase::HandOver { pause }
                } else {
                    EvictorPhase::Protect { range: 0, pause }
                }
            }
        };
        Next::Continue
    }

    /// `Protect`: range `range` of the round, without the state lock (each protection
    /// costs a TLB flush, and faults should not wait behind them). Writers fault from
    /// here on, so the pages stay as the zero check and the append see them unless a
    /// write dirties them (which aborts their swap-out: Appendix A).
    fn step_protect(&mut self, shell: &mut impl EvictorShell, range: usize, pause: Option<Pause>) -> Next {
        let protect = self.round.ranges()[range];
        let protected = shell.write_protect(protect.start, protect.end);
        self.round.ranges_mut()[range].protected = protected;
        self.phase = if range + 1 < self.round.ranges().len() {
            EvictorPhase::Protect { range: range + 1, pause }
        } else if self.round.protects_first() {
            EvictorPhase::Scan { span: 0, pause }
        } else {
            EvictorPhase::ZeroCheck { pause }
        };
        Next::Continue
    }

    /// `ZeroCheck`: looks for all-zero victims (they need no write), outside the lock.
    fn step_zero_check(&mut self, shell: &mut impl EvictorShell, pause: Option<Pause>) -> Next {
        for victim in 0..self.round.victims() {
            if let Some(address) = self.round.victim_to_check(victim) {
                // A write fault meanwhile takes the page back: it is kept at the
                // hand-over, whatever this saw.
                let zero = shell.page_is_zero(address);
                self.round.set_zero(victim, zero);
            }
        }
        self.phase = EvictorPhase::HandOver { pause };
        Next::Continue
    }

    /// `HandOver`: under the lock, the round's victims go to the engine (or stay); the
    /// round is over, and `mappings` released.
    fn step_hand_over(&mut self, shell: &mut impl EvictorShell, pause: Option<Pause>) -> Next {
        shell.lock();
        let now = shell.now();
        shell.core().evict_hand_over(&mut self.round, now, &mut self.actions);
        shell.apply(&mut self.actions);
        shell.unlock();
        shell.mappings_release();
        self.phase = EvictorPhase::Check;
        pause.map_or(Next::Continue, Next::Pause)
    }
}

// -------------------------------------------------------------------------- fault

#[derive(Clone, Copy, Debug)]
enum FaultPhase {
    /// Not started, or resolved.
    Idle,
    /// The lock: ask the core.
    Call,
    /// Outside the lock: the device read the core asked for.
    Read { zone: u32, slot: u32, pages: u32, into: ReadInto, sealed: Option<Sealed> },
    /// The lock: the read's result to the core, the pages installed.
    ReadDone { result: Result<(), IoError> },
    /// Direct reclaim while waiting for room.
    Discard(DiscardPhase),
}

/// One fault's resolution, by a handler thread or by the faulting thread itself
/// (self-paging: in its SIGBUS handler, so nothing here allocates). Made once per
/// thread and reused ([`FaultTask::start`]).
pub struct FaultTask {
    fault: Fault,
    phase: FaultPhase,
    actions: Actions,
    /// Holds the direct-reclaim batch.
    discard: Option<DiscardBatch>,
    /// When it first waited for room, on the shell's clock.
    room_wait_since_ns: Option<u64>,
    /// Pages this fault discarded while it waited for room.
    discarded_pages: u64,
    /// Its last wait for room is its tenant's write limit at work.
    write_limited: bool,
}

impl Default for FaultTask {
    fn default() -> FaultTask {
        FaultTask::new()
    }
}

impl FaultTask {
    pub fn new() -> FaultTask {
        FaultTask {
            fault: Fault::new(0, FaultKind::Missing { write: false }),
            phase: FaultPhase::Idle,
            actions: Actions::with_capacity(Actions::FAULT_MAX),
            discard: None,
            room_wait_since_ns: None,
            discarded_pages: 0,
            write_limited: false,
        }
    }

    /// Starts resolving `fault` (the last one must be resolved).
    pub fn start(&mut self, fault: Fault) {
        assert!(matches!(self.phase, FaultPhase::Idle), "a fault started before the last one was resolved");
        debug_assert!(self.discard.is_none());
        self.fault = fault;
        self.phase = FaultPhase::Call;
        self.room_wait_since_ns = None;
        self.discarded_pages = 0;
        self.write_limited = false;
    }

    pub fn fault(&self) -> &Fault {
        &self.fault
    }

    /// When the fault first waited for room (the shell's clock), if it did.
    pub fn room_wait_since_ns(&self) -> Option<u64> {
        self.room_wait_since_ns
    }

    /// Pages it discarded while waiting for room.
    pub fn discarded_pages(&self) -> u64 {
        self.discarded_pages
    }

    /// Where it is, for a hang's report.
    pub fn describe(&self) -> String {
        format!("fault at {:#x} {:?}: {:?}", self.fault.address(), self.fault.kind(), self.phase)
    }

    /// Whether it is resolved (or was never started).
    pub fn is_resolved(&self) -> bool {
        matches!(self.phase, FaultPhase::Idle)
    }

    fn resolved(&mut self, ours: bool) -> Next {
        self.phase = FaultPhase::Idle;
        Next::Resolved { ours }
    }

    /// One step.
    pub fn step(&mut self, shell: &mut impl FaultShell) -> Next {
        match self.phase {
            FaultPhase::Idle => panic!("a fault stepped before it was started"),
            FaultPhase::Call => self.step_call(shell),
            FaultPhase::Read { zone, slot, pages, into, sealed } => {
                let result = shell.read(zone, slot, pages, into, sealed.as_ref());
                self.phase = FaultPhase::ReadDone { result };
                Next::Continue
            }
            FaultPhase::ReadDone { result } => self.step_read_done(shell, result),
            FaultPhase::Discard(phase) => self.step_discard(shell, phase),
        }
    }

    /// `Call`: under the lock, asks the core (and opens the sealed cache pages it names,
    /// still under the lock), and carries out what it answers.
    fn step_call(&mut self, shell: &mut impl FaultShell) -> Next {
        shell.lock();
        let now = shell.now();
        let mut step = shell.core().fault(&mut self.fault, now, &mut self.actions);
        shell.apply(&mut self.actions);
        // Still under the lock: a sealed page read ahead is opened, then served.
        if let FaultStep::OpenCached { entry, sealed, around } = step {
            let mut opened = shell.open_cached(entry, &sealed) as u64;
            for index in 0..around {
                let (entry, sealed) = shell.core().fault_cache_around(&self.fault, index);
                opened |= (shell.open_cached(entry, &sealed) as u64) << (index + 1);
            }
            step = shell.core().fault_cache_opened(&mut self.fault, opened, now, &mut self.actions);
            shell.apply(&mut self.actions);
        }
        match step {
            FaultStep::OpenCached { .. } => unreachable!("a cache page to open is opened above"),
            FaultStep::NotOurs | FaultStep::Done => {
                shell.unlock();
                self.resolved(step == FaultStep::Done)
            }
            FaultStep::Read { zone, slot, pages, into, sealed } => {
                shell.unlock();
                self.phase = FaultPhase::Read { zone, slot, pages, into, sealed };
                Next::Continue
            }
            // Still under the lock: a zero page lands only where nothing is.
            FaultStep::ZeroFill { address } => {
                let landed = shell.zero_fill(address);
                let step = shell.core().fault_zero_filled(&mut self.fault, landed, now, &mut self.actions);
                shell.apply(&mut self.actions);
                shell.unlock();
                assert_eq!(step, FaultStep::Done, "a zero fill completion asks for nothing more");
                self.resolved(true)
            }
            FaultStep::Again(pause) => {
                shell.unlock();
                Next::Pause(pause)
            }
            FaultStep::WaitRoom { discard, write_limited } => {
                self.room_wait_since_ns.get_or_insert(now);
                self.write_limited = write_limited;
                self.step_wait_room(shell, discard)
            }
        }
    }

    /// `Call` answered `WaitRoom`, still under the lock: pages already written out wait
    /// only for their discard, so the fault does it itself if no other fault is (direct
    /// reclaim) rather than sleep until an evictor does: this CPU would idle, while the
    /// evictor's may be busy (with the I/O thread and the device's interrupts too).
    /// Otherwise it waits for room.
    fn step_wait_room(&mut self, shell: &mut impl FaultShell, discard: bool) -> Next {
        if discard {
            if let Some(batch) = shell.fault_discard_take() {
                shell.unlock();
                self.discard = Some(batch);
                self.phase = FaultPhase::Discard(DiscardPhase::Take);
                return Next::Continue;
            }
        }
        // Waiting, a handler thread of a daemon was the write-limited tenant's for good,
        // and the tenants beside had one handler fewer (`docs/daemon.md`).
        if self.write_limited && self.fault.can_go_aside() {
            return Next::Aside;
        }
        Next::Wait(WaitOn::Room)
    }

    /// `ReadDone`: under the lock, the read's result to the core, which installs the
    /// pages or asks for another call.
    fn step_read_done(&mut self, shell: &mut impl FaultShell, result: Result<(), IoError>) -> Next {
        shell.lock();
        let now = shell.now();
        let step = shell.core().fault_read_done(&mut self.fault, result, now, &mut self.actions);
        shell.apply(&mut self.actions);
        shell.unlock();
        match step {
            FaultStep::Done => self.resolved(true),
            FaultStep::Again(pause) => {
                self.phase = FaultPhase::Call;
                Next::Pause(pause)
            }
            other => panic!("a read completion answered {other:?}"),
        }
    }

    /// `Discard`: a phase of the direct-reclaim discard, with the pager's one batch for
    /// it (given back when done).
    fn step_discard(&mut self, shell: &mut impl FaultShell, phase: DiscardPhase) -> Next {
        let mut batch = self.discard.take().expect("a discarding fault holds the batch");
        let next = discard_step(shell, phase, &mut batch);
        match next {
            Ok(next) => {
                self.discard = Some(batch);
                self.phase = FaultPhase::Discard(next);
            }
            Err(pages) => {
                shell.fault_discard_return(batch);
                self.discarded_pages += pages as u64;
                self.phase = FaultPhase::Call;
            }
        }
        Next::Continue
    }
}

// ---------------------------------------------------------------------------- I/O

#[derive(Clone, Copy, Debug)]
enum IoPhase {
    /// The lock: take the engine's next request.
    Next,
    /// Outside the lock: run it on the device.
    Device,
    /// The lock: its completion to the engine.
    Complete(IoCompletion),
}

/// The I/O thread: runs every I/O the engine asks for (swap-out appends straight from
/// the victim pages in place, GC reads and moves, resets, finishes). Its plan and record
/// buffer are allocated once.
pub struct IoThread {
    phase: IoPhase,
    plan: IoPlan,
    records: Vec<u8>,
    holds_mappings: bool,
}

impl IoThread {
    pub fn new(core: &PagerCore) -> IoThread {
        IoThread { phase: IoPhase::Next, plan: core.io_plan(), records: Vec::new(), holds_mappings: false }
    }

    /// The request under way, or the last one (for the shell's counters: GC time is the
    /// GC's).
    pub fn plan(&self) -> &IoPlan {
        &self.plan
    }

    /// Between requests: the shell's loop may stop here.
    pub fn at_rest(&self) -> bool {
        matches!(self.phase, IoPhase::Next)
    }

    /// Where it is, for a hang's report.
    pub fn describe(&self) -> String {
        format!("{:?}", self.phase)
    }

    /// One step.
    pub fn step(&mut self, shell: &mut impl IoShell) -> Next {
        match self.phase {
            IoPhase::Next => {
                // Swap-out appends read the pages in place: their regions stay mapped
                // until the append is done (a region's removal takes `mappings`
                // exclusively).
                shell.mappings_read();
                shell.lock();
                let now = shell.now();
                if !shell.core().io_next(&mut self.plan, now) {
                    shell.mappings_release();
                    shell.core().io_sleeps();
                    return Next::Wait(WaitOn::Io);
                }
                self.records.clear();
                if let IoRequest::Append { .. } = self.plan.request() {
                    self.records.extend_from_slice(shell.core().append_records(&self.plan));
                    self.holds_mappings = true;
                } else {
                    shell.mappings_release();
                }
                shell.unlock();
                self.phase = IoPhase::Device;
                Next::Continue
            }
            IoPhase::Device => {
                let completion = shell.run_request(&mut self.plan, &mut self.records);
                if self.holds_mappings {
                    self.holds_mappings = false;
                    shell.mappings_release();
                }
                self.phase = IoPhase::Complete(completion);
                Next::Continue
            }
            IoPhase::Complete(completion) => {
                shell.lock();
                let now = shell.now();
                shell.core().io_done(&mut self.plan, completion, &self.records, now);
                shell.unlock();
                self.phase = IoPhase::Next;
                Next::Continue
            }
        }
    }
}
