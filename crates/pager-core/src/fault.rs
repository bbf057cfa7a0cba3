//! Faults: a missing page swapped in or zero-filled, a write to a write-protected page
//! (the swap cache, a victim on its way out, or reference sampling).

use znswap_core::{EngineError, IoError, IoId, PageState as EnginePage, ReadOutcome, SlotAddress, SlotState, SwapIn};

use crate::action::{Action, Actions, CopyFrom};
use crate::readahead::Claim;
use crate::tenant::of_tenant;
use crate::{ChildPage, Notice, PageState, PagerCore, Sealed, PAGE_BYTES, READAHEAD_PAGES_MAX};

/// Never-written pages mapped with a fault that continues a sequential run, beyond the
/// faulting page: they cost no I/O (zero fill), and one fault, one lock hold and one
/// `UFFDIO_COPY` then serve many first touches (a first-touch fault through the pager
/// costs several times the kernel's own). 63 swapped out faster than 31 on a sequential
/// pass, and 127 slower than 63 (the fault holds the state lock while it maps them, and
/// the evictor waits; figures: docs/measurements/2026-11-pager.md).
pub const ZERO_FILL_AROUND_PAGES: u64 = 63;

/// Reference sampling tracks references per granule of this many pages: a write fault
/// on a sampled page marks its whole granule referenced and unprotects it, so a run of
/// hot pages costs one sampling fault per sweep instead of one per page (a write-protect
/// fault costs the signal, and a TLB flush on the CPUs the process runs on; figures:
/// docs/measurements/2026-11-pager.md).
pub(crate) const SAMPLING_GRANULE_PAGES: u64 = 16;

/// Failed reads of one page before it is given up as lost: an injected or transient
/// error is retried, a slot that never reads back must not hang the faulting thread.
const READ_ATTEMPTS_MAX: u32 = 8;

/// Longest a fault waits for room under the budget before it goes past it. The budget
/// is a soft limit, as `memory.high` is: it throttles the program, it never hangs it,
/// whatever holds the room back (the pager DST found a nearly full device whose GC
/// thrashed, winning back a few slots at a time, while faults waited for minutes).
pub const ROOM_WAIT_MAX_NS: u64 = 50_000_000;

/// Write faults on pages a region had not mapped, in a row with no missing fault, that
/// reveal pages never dropped (`false_drop_suspected`): far more than the threads a
/// process has (each raises one such fault per page dropped under it), far fewer than a
/// spinning thread raises in a millisecond.
pub const FALSE_DROP_FAULTS: u32 = 4096;

/// How the fault reached the pager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A userfaultfd missing-page event (handler threads): nothing is mapped there.
    Missing { write: bool },
    /// A userfaultfd write-protect event: a write to a write-protected page.
    WriteProtect,
    /// SIGBUS in the faulting thread (self-paging): a missing page, or a write to a
    /// write-protected one; the page's state tells which.
    Sigbus { write: bool },
}

/// A pause the shell takes before calling [`PagerCore::fault`] again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Call again at once: the state changed (a failed read, to be retried).
    None,
    /// Give the CPU up once: a discard of the page is under way.
    Yield,
    /// Sleep this long: another thread's read of the page, or the engine's backpressure,
    /// which completions clear.
    Micros(u32),
}

/// What to do next with a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultStep {
    /// Not a page of this pager (self-paging: hand the signal on).
    NotOurs,
    /// Resolved: the actions are carried out, the access may retry.
    Done,
    /// Call `fault` again after the pause.
    Again(Pause),
    /// The resident set is at the budget plus slack: make room, then call `fault` again.
    /// With `discard`, written-out pages await their discard: do it here (direct
    /// reclaim: `discard_take`, `MADV_DONTNEED`, `discard_done`) if no other thread is;
    /// else wait for `Wakeups::room` (or a short timeout). `write_limited`: the room is
    /// the tenant's own, held back by its write limit, so the wait lasts as long as the
    /// limit says (`FaultTask::waits_on_write_limit`).
    WaitRoom { discard: bool, write_limited: bool },
    /// Read `pages` slots of `zone` from `slot` into `into`, outside the lock (the
    /// faulting page's slot and, into the cache, the slots read ahead around it), then
    /// call [`PagerCore::fault_read_done`]. With `sealed`, open the faulting page with
    /// it after the read; a page that fails to open is a failed read.
    Read { zone: u32, slot: u32, pages: u32, into: ReadInto, sealed: Option<Sealed> },
    /// Still under the lock: open read-ahead cache page `entry` in place as `sealed`'s
    /// page (`PagerConfig::encrypt`), and the `around` pages to be mapped along with it
    /// (each from [`PagerCore::fault_cache_around`]), then call
    /// [`PagerCore::fault_cache_opened`] with the bitmask of those that opened.
    OpenCached { entry: u32, sealed: Sealed, around: u32 },
    /// Map one page of zeroes at `address` only if nothing is mapped there, still under
    /// the lock (`UFFDIO_COPY` of a zero page, writable, waking the faulting threads;
    /// `EEXIST` means something is mapped), then call [`PagerCore::fault_zero_filled`]
    /// with whether it landed. Asked only in regions the program discarded from: what
    /// the program's discard left mapped is zapped by the kernel at a time the pager
    /// never learns, so whether a page is mapped is the kernel's to say.
    ZeroFill { address: u64 },
}

/// Where a fault's read goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadInto {
    /// The fault's own page buffer (one page).
    FaultPage,
    /// The read-ahead cache's pages `first..first + pages`, claimed for this read: the
    /// fault owns them until `fault_read_done`. The faulting page is `first +
    /// fault_index` (the one a sealed read opens; the others are opened when a fault
    /// wants them, `FaultStep::OpenCached`).
    Cache { first: u32, fault_index: u32 },
}

impl ReadInto {
    /// Where the faulting page is among the pages read.
    pub fn fault_index(self) -> usize {
        match self {
            ReadInto::FaultPage => 0,
            ReadInto::Cache { fault_index, .. } => fault_index as usize,
        }
    }
}

/// A fault's cache hit waiting for its page, and the pages next to it to be mapped
/// along, to be opened (`FaultStep::OpenCached`).
#[derive(Clone, Copy, Debug)]
struct OpeningCached {
    reading: Reading,
    entry: u32,
    zone: u32,
    slot: u32,
    around: [Around; READAHEAD_PAGES_MAX as usize],
    around_count: u32,
}

/// A page next to a cache hit's, in the cache too (`serve_around`'s conditions).
#[derive(Clone, Copy, Debug)]
struct Around {
    page: u64,
    entry: u32,
    down: bool,
}

/// One fault, from its first call to `Done`: the shell keeps it across the calls.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    address: u64,
    kind: FaultKind,
    /// Raised by one of the pager's own threads (the evictor's zero check, an append's
    /// read): they touch only pages the pager has mapped.
    pager_thread: bool,
    /// Its thread may set it aside while its tenant's write limit holds it (`Next::Aside`).
    aside: bool,
    counted: bool,
    read_failures: u32,
    /// When it first waited for room (0: it has not).
    waiting_since_ns: u64,
    progress: Progress,
}

// Inline, not boxed: a fault resolved in a SIGBUS handler must not allocate.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
enum Progress {
    New,
    /// Its place in the region's run of faults is noted.
    Started {
        owner: u32,
        generation: u64,
        sequential: bool,
    },
    Reading(Reading),
    /// Asked the shell to open a sealed page in the read-ahead cache
    /// (`FaultStep::OpenCached`).
    OpeningCached(OpeningCached),
    /// Reading a page a fork's child inherited from its parent's slot (one page, into
    /// the fault's page buffer).
    ReadingInherited {
        owner: u32,
        page: u64,
        generation: u64,
    },
    /// Asked the shell to map zeroes where nothing is mapped (`FaultStep::ZeroFill`).
    ZeroFilling {
        owner: u32,
        page: u64,
        generation: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Reading {
    owner: u32,
    page: u64,
    generation: u64,
    sequential: bool,
    write: bool,
    io: IoId,
    /// The read-ahead cache's pages it reads into, with the slots around the faulting one's.
    claim: Option<Claim>,
}

impl Fault {
    /// A fault at `address` (any byte of the page).
    pub fn new(address: u64, kind: FaultKind) -> Fault {
        Fault {
            address: address & !(PAGE_BYTES as u64 - 1),
            kind,
            pager_thread: false,
            aside: false,
            counted: false,
            read_failures: 0,
            waiting_since_ns: 0,
            progress: Progress::New,
        }
    }

    /// Marks a fault raised by one of the pager's own threads: a missing fault there on
    /// a page the pager has mapped means the pager lost track of the page (answered as
    /// a stale event, it would fault again forever), so it panics naming the page.
    pub fn from_pager_thread(mut self) -> Fault {
        self.pager_thread = true;
        self
    }

    /// Marks a fault its thread may set aside while its tenant's write limit holds it
    /// (`Next::Aside`): a served process's, read by a handler that serves others.
    pub fn may_go_aside(mut self) -> Fault {
        self.aside = true;
        self
    }

    /// Whether it may be set aside (`may_go_aside`).
    pub fn can_go_aside(&self) -> bool {
        self.aside
    }

    /// The faulting page's address.
    pub fn address(&self) -> u64 {
        self.address
    }

    pub fn kind(&self) -> FaultKind {
        self.kind
    }
}

impl PagerCore {
    /// Decides what a fault does. Call again as the answer says until `Done` or
    /// `NotOurs`; carry out `actions` before releasing the lock each time.
    pub fn fault(&mut self, fault: &mut Fault, now: u64, actions: &mut Actions) -> FaultStep {
        assert!(
            !matches!(
                fault.progress,
                Progress::Reading(_)
                    | Progress::ReadingInherited { .. }
                    | Progress::ZeroFilling { .. }
                    | Progress::OpeningCached(_)
            ),
            "a fault with a read, a zero fill or an open outstanding called again"
        );
        let address = fault.address;
        let Some((owner, page)) = self.locate(address) else {
            return match fault.kind {
                FaultKind::Sigbus { .. } => FaultStep::NotOurs,
                // A region freed while its event waited: let the thread retry (and find
                // no mapping there).
                _ => {
                    actions.push(Action::Wake { address });
                    FaultStep::Done
                }
            };
        };
        if let Progress::Started { owner: started, generation, .. } = fault.progress {
            if started != owner || generation != self.regions[owner as usize].generation {
                // Another region at the same address since the last call.
                fault.progress = Progress::New;
            }
        }
        let state = self.state(owner, page);
        if state.awaits_settling() {
            // Being moved out (outside the lock), perhaps discarded since: where its bytes
            // are is known once the round's moves are settled, soon.
            return FaultStep::Again(Pause::Yield);
        }
        if state == PageState::Poisoned && matches!(fault.kind, FaultKind::Sigbus { .. }) {
            // The touch of a lost page: the poison raised this SIGBUS, not userfaultfd
            // (on kernels without memory-failure handling it arrives as BUS_ADRERR, like
            // a userfault). Hand it on: the program hears of the loss.
            return FaultStep::NotOurs;
        }
        let write_protect = match fault.kind {
            FaultKind::WriteProtect => true,
            FaultKind::Missing { .. } => false,
            // A resident page raises SIGBUS only when written while write-protected (a
            // parked one has nothing mapped).
            FaultKind::Sigbus { .. } => state.is_resident() && !state.is_parked(),
        };
        if write_protect {
            self.write_fault(owner, page, now, actions);
            if matches!(fault.kind, FaultKind::Sigbus { .. }) && self.regions[owner as usize].program_discards {
                // A SIGBUS on a page the pager has mapped is a write to a protected
                // page, unless the program's discard zapped it: then it is missing, and
                // only the kernel can say which.
                return self.zero_fill_if_unmapped(fault, owner, page);
            }
            return FaultStep::Done;
        }
        self.missing_fault(fault, owner, page, now, actions)
    }

    /// A write fault on a page of region `owner` the pager had not mapped. One comes from
    /// each thread whose fault was read before the page went, and its retry is a missing
    /// fault. Thousands in a row with no missing fault between mean the pages are still
    /// there: a served process whose agent said it dropped pages it did not (its threads
    /// and a handler would spin on them, and its memory pass its budget). Its region is
    /// reported (`take_false_drops`), to be let go.
    fn false_drop_suspected(&mut self, owner: u32) {
        let region = &mut self.regions[owner as usize];
        region.write_faults_unmapped = region.write_faults_unmapped.saturating_add(1);
        if region.write_faults_unmapped == FALSE_DROP_FAULTS {
            self.stats.false_drops += 1;
            self.drops.false_drop(owner);
            self.threads.wake_for_false_drops();
        }
    }

    fn zero_fill_if_unmapped(&mut self, fault: &mut Fault, owner: u32, page: u64) -> FaultStep {
        let generation = self.regions[owner as usize].generation;
        fault.progress = Progress::ZeroFilling { owner, page, generation };
        FaultStep::ZeroFill { address: self.page_address(owner, page) }
    }

    /// The zero fill a fault asked for (`FaultStep::ZeroFill`) is done: `landed` if
    /// nothing was mapped there and the zero page now is.
    pub fn fault_zero_filled(&mut self, fault: &mut Fault, landed: bool, now: u64, actions: &mut Actions) -> FaultStep {
        let Progress::ZeroFilling { owner, page, generation } = fault.progress else {
            panic!("fault_zero_filled without a zero fill outstanding");
        };
        let address = fault.address;
        fault.progress = Progress::New;
        assert!(self.same_region(owner, generation), "{owner}:{page}: the region went while the lock was held");
        let state = self.state(owner, page);
        if !landed {
            match state {
                // The old entry is still there: the kernel's zap is still to come. A
                // write to it (a SIGBUS, if it was write-protected) may go ahead, into
                // memory about to be zapped; the pager never reads it.
                PageState::Removed => actions.push(Action::Unprotect { address, pages: 1 }),
                // A stale event: the page is mapped.
                _ => actions.push(Action::Wake { address }),
            }
            return FaultStep::Done;
        }
        match state {
            PageState::Removed => {
                let answer = self.engine.swap_in(owner, page, now).expect("swap-in of a discarded page");
                assert_eq!(answer, znswap_core::SwapIn::Zero, "{owner}:{page}: a discarded page holds nothing");
                self.stats.zero_fills += 1;
                self.mark_resident(owner, page);
            }
            // Lost since the program's discard was read, and its marker zapped by it: the
            // page reads zero now, and the loss no longer matters.
            PageState::Poisoned => {
                self.stats.zapped_pages_found += 1;
                self.engine.free(owner, page..page + 1, now).expect("freeing a registered page");
                self.set_state(owner, page, PageState::Removed);
                let answer = self.engine.swap_in(owner, page, now).expect("swap-in of a freed page");
                assert_eq!(answer, znswap_core::SwapIn::Zero, "{owner}:{page}: a freed page holds nothing");
                self.stats.zero_fills += 1;
                self.mark_resident(owner, page);
            }
            // Mapped since the program's discard was read, and zapped by it since: the
            // page reads zero now, so whatever the engine keeps of it (a swap-cached slot,
            // a swap-out in flight) is stale.
            PageState::Resident | PageState::Referenced | PageState::Evicting { .. } | PageState::Writing => {
                self.stats.zapped_pages_found += 1;
                self.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
                if matches!(state, PageState::Resident | PageState::Evicting { .. }) {
                    self.set_state(owner, page, PageState::Referenced);
                }
                self.after_engine();
            }
            other => panic!("{owner}:{page}: a zero fill landed on a {other:?} page"),
        }
        FaultStep::Done
    }

    /// A write to a write-protected page: the engine learns the page is dirty (a
    /// swap-cached slot goes stale, a swap-out in flight aborts), and the protection is
    /// lifted at once, so the writer never waits for the device.
    fn write_fault(&mut self, owner: u32, page: u64, now: u64, actions: &mut Actions) {
        self.stats.write_protect_faults += 1;
        let address = self.page_address(owner, page);
        let state = self.state(owner, page);
        if state == PageState::Removed {
            // A write to the entry the program's discard left mapped (or a stale event
            // once zapped): let it go into memory about to be zapped; once zapped, the
            // writer faults as missing and gets a zero page.
            actions.push(Action::Unprotect { address, pages: 1 });
            return;
        }
        if !state.is_resident() || state.is_parked() {
            // Dropped after its swap-out completed, or parked since the fault: the
            // writer retries, faults the page back in and writes to it then.
            actions.push(Action::Wake { address });
            // A page awaiting its discard is still mapped, as the pager knows (its
            // process's agent may be slow to zap it: `DropDelay::Late`).
            if state != PageState::Dropping {
                self.false_drop_suspected(owner);
            }
            return;
        }
        if matches!(self.engine.page_state(owner, page), Ok(EnginePage::SwapCached { .. })) {
            self.tenants.swap_cache_dirtied(self.tenant_of(owner));
            self.stats.swap_cache_dirtied += 1;
        } else if state == PageState::Resident && self.config.reference_sampling {
            // Protected by the hand to look at it: found written.
            self.sampling.written(1);
        }
        self.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
        match state {
            // A victim written before its hand-over stays (`evict_hand_over` sees it).
            PageState::Resident | PageState::Evicting { .. } => self.set_state(owner, page, PageState::Referenced),
            // Its swap-out aborts at completion (Appendix A).
            PageState::Writing | PageState::Referenced => {}
            _ => unreachable!("resident states"),
        }
        if self.config.reference_sampling {
            self.lift_sampling_protection(owner, page, actions);
        } else {
            actions.push(Action::Unprotect { address, pages: 1 });
        }
    }

    /// A write fault under reference sampling: marks the faulting page's granule
    /// referenced and lifts the protection of its pages that were write-protected only to
    /// sample (dirty, resident, not on their way out), with the faulting page's. Pages
    /// that must stay protected (clean ones whose slot is their swap cache, victims being
    /// written) keep it and their bit.
    ///
    /// One ioctl per run, and a run spans unmapped pages: each ioctl flushes the TLB of
    /// every CPU the process runs on (an IPI, costly in a VM), and under random access the
    /// granule's resident pages are scattered. Spanning is safe because, under the lock,
    /// an unmapped page has no PTE (every install takes the lock), so lifting protection
    /// there changes nothing.
    fn lift_sampling_protection(&mut self, owner: u32, page: u64, actions: &mut Actions) {
        let region_pages = self.regions[owner as usize].pages;
        let first = page - page % SAMPLING_GRANULE_PAGES;
        let end = (first + SAMPLING_GRANULE_PAGES).min(region_pages);
        // The run being built: its first and last liftable page.
        let mut run: Option<(u64, u64)> = None;
        for next in first..=end {
            let state = if next < end { self.state(owner, next) } else { PageState::Unmapped };
            let liftable = next < end
                && (next == page
                    || matches!(state, PageState::Resident | PageState::Referenced)
                        && self.engine.page_state(owner, next) == Ok(EnginePage::Resident));
            let unmapped = next < end && state == PageState::Unmapped;
            if liftable {
                if state == PageState::Resident {
                    // Its granule's write marks it referenced (the faulting page was
                    // counted by `write_fault`, which marked it first).
                    self.set_state(owner, next, PageState::Referenced);
                    self.sampling.written(1);
                }
                run = Some((run.map_or(next, |(start, _)| start), next));
            } else if !unmapped {
                if let Some((start, last)) = run.take() {
                    let address = self.page_address(owner, start);
                    actions.push(Action::Unprotect { address, pages: last + 1 - start });
                }
            }
        }
    }

    /// A missing page: zero-fill or swap in. For a write fault the page is about to be
    /// dirtied, so it is installed writable and the engine told at once (one fault
    /// instead of a missing fault followed by a write-protect fault).
    fn missing_fault(
        &mut self,
        fault: &mut Fault,
        owner: u32,
        page: u64,
        now: u64,
        actions: &mut Actions,
    ) -> FaultStep {
        let write = matches!(fault.kind, FaultKind::Missing { write: true } | FaultKind::Sigbus { write: true });
        if !fault.counted {
            fault.counted = true;
            self.stats.missing_faults += 1;
        }
        self.regions[owner as usize].write_faults_unmapped = 0;
        let state = self.state(owner, page);
        if let Some(step) = self.missing_fault_on_state(fault, owner, page, state, write, now, actions) {
            return step;
        }
        if let Some(step) = self.missing_fault_waits_for_room(fault, owner, now) {
            return step;
        }
        if state == PageState::Removed {
            // Whatever the program's discard left mapped may still be there: map zeroes
            // only where nothing is.
            return self.zero_fill_if_unmapped(fault, owner, page);
        }
        let sequential = self.missing_fault_run(fault, owner, page);
        if let Some(step) = self.inherited_fault(fault, owner, page, actions) {
            return step;
        }
        let answer = match self.engine.swap_in(owner, page, now) {
            Ok(answer) => answer,
            // The I/O table is full: completions make room.
            Err(EngineError::Backpressure) => return FaultStep::Again(Pause::Micros(100)),
            Err(error) => panic!("swap-in of {owner}:{page}: {error}"),
        };
        match answer {
            SwapIn::Resident => {
                // The engine holds data the pager thinks it dropped: zero-filling would
                // hand back wrong data, so stop loudly instead.
                panic!("page {owner}:{page} faulted while the engine says it is resident");
            }
            SwapIn::Zero => {
                self.zero_fault(fault.address, owner, page, write, sequential, now, actions);
                FaultStep::Done
            }
            SwapIn::Lost => {
                self.poison(owner, page, actions);
                FaultStep::Done
            }
            // Another thread's read of it: let that one install it.
            SwapIn::InFlight => FaultStep::Again(Pause::Micros(50)),
            SwapIn::Read { io, zone, slot } => {
                let generation = self.regions[owner as usize].generation;
                let reading = Reading { owner, page, generation, sequential, write, io, claim: None };
                self.swap_in_fault(fault, reading, zone, slot, now, actions)
            }
        }
    }

    /// A missing fault on a page the pager does not hold as missing (`None`: it does,
    /// `Unmapped` or `Removed`, and the fault goes on to map it).
    #[allow(clippy::too_many_arguments)]
    fn missing_fault_on_state(
        &mut self,
        fault: &mut Fault,
        owner: u32,
        page: u64,
        state: PageState,
        write: bool,
        now: u64,
        actions: &mut Actions,
    ) -> Option<FaultStep> {
        let address = fault.address;
        match state {
            // Its discard is under way: swap it in once that is done.
            PageState::Dropping => Some(FaultStep::Again(Pause::Yield)),
            // Parked: nothing is mapped here, and never was since (regions the program
            // discards from are not parked), so this is a touch.
            PageState::Parked | PageState::WritingParked => {
                self.parked_fault(owner, page, write, now, actions);
                Some(FaultStep::Done)
            }
            PageState::Parking { .. } | PageState::ParkingRemoved => unreachable!("answered in `fault`"),
            // Mapped, so a stale event; unless the program's discard zapped it since it
            // was mapped (then it reads zero): the kernel tells which.
            PageState::Resident
            | PageState::Referenced
            | PageState::Evicting { .. }
            | PageState::Writing
            | PageState::Poisoned
                if self.regions[owner as usize].program_discards =>
            {
                Some(self.zero_fill_if_unmapped(fault, owner, page))
            }
            // Another thread resolved it meanwhile (or the device lost it: the retried
            // access meets the poison).
            PageState::Resident
            | PageState::Referenced
            | PageState::Evicting { .. }
            | PageState::Writing
            | PageState::Poisoned => {
                // Only the program's threads race each other on a page; nothing maps a
                // page under a pager thread's read of it.
                assert!(
                    !fault.pager_thread || state == PageState::Poisoned,
                    "page {owner}:{page} at {address:#x} is {state:?} for the pager, but one of its own threads \
                     found nothing mapped there (a pager bug: the page's bytes are not where the pager thinks)"
                );
                actions.push(Action::Wake { address });
                Some(FaultStep::Done)
            }
            PageState::Unmapped | PageState::Removed => None,
        }
    }

    /// Faults beyond the budget (the pager's, or the tenant's own) wait for room (a
    /// bounded resident set), unless no room can come: swap is full and nothing is on
    /// its way out. Then the resident set grows past the budget, counted and said once,
    /// rather than hang the program. `Some(WaitRoom)`: wait; `None`: map the page.
    fn missing_fault_waits_for_room(&mut self, fault: &mut Fault, owner: u32, now: u64) -> Option<FaultStep> {
        let tenant_full = self.tenant_room(owner) == 0;
        let over = tenant_full
            || self.stats.resident_pages.saturating_sub(self.tenants.swap_limited_pages(&self.engine))
                >= self.config.budget_pages + self.config.slack_pages;
        if !over || self.threads.is_shut_down() {
            return None;
        }
        // A tenant held back by its write limit waits as long as the limit says: that
        // wait is not room failing to come.
        let write_limited = tenant_full && self.write_throttled(owner);
        if fault.waiting_since_ns == 0 || write_limited {
            fault.waiting_since_ns = now.max(1);
        }
        let waited_long = now.saturating_sub(fault.waiting_since_ns) > ROOM_WAIT_MAX_NS;
        // A tenant at its swap limit beyond its own budget: none of its pages may go.
        let tenant = self.regions[owner as usize].tenant;
        let tenant_swap_full = tenant_full && self.tenants.swap_full(tenant, &self.engine);
        if !self.no_room_can_come() && !waited_long && !tenant_swap_full {
            self.wake_evictor();
            return Some(FaultStep::WaitRoom { discard: self.discard_wanted(), write_limited });
        }
        self.stats.budget_overruns += 1;
        if tenant_swap_full {
            self.stats.swap_limit_overruns += 1;
            if let Some(slots) = self.tenants.swap_full_unsaid(tenant) {
                self.notices.say(Notice::TenantSwapFull { tenant, slots });
            }
        } else if self.notices.budget_unsaid() {
            let swap = self.engine.swap_inf();
            self.notices.say(if waited_long {
                Notice::RoomTooSlow { empty_zones: swap.free_zones, zones: swap.num_zones }
            } else {
                Notice::SwapFull
            });
        }
        None
    }

    /// Whether the fault continues a sequential run of its region's faults (noted at its
    /// first call, kept across its retries).
    fn missing_fault_run(&mut self, fault: &mut Fault, owner: u32, page: u64) -> bool {
        if let Progress::Started { sequential, .. } = fault.progress {
            return sequential;
        }
        let region = &mut self.regions[owner as usize];
        region.sequential_faults =
            if region.last_fault.wrapping_add(1) == page { region.sequential_faults.saturating_add(1) } else { 0 };
        region.last_fault = page;
        let sequential = region.sequential_faults > 0;
        fault.progress = Progress::Started { owner, generation: region.generation, sequential };
        sequential
    }

    /// A never-written page swapped in (`SwapIn::Zero`) at `address`: a zero page, or with
    /// the never-written pages after it in a sequential run, private zeroed pages.
    #[allow(clippy::too_many_arguments)]
    fn zero_fault(
        &mut self,
        address: u64,
        owner: u32,
        page: u64,
        write: bool,
        sequential: bool,
        now: u64,
        actions: &mut Actions,
    ) {
        self.stats.zero_fills += 1;
        let around = if sequential { self.plan_zero_fill(owner, page, now) } else { 0 };
        if write || around > 0 {
            // A zero page mapped for a write would take a second (copy-on-write) fault at
            // once: install private zeroed pages instead.
            let pages = 1 + around as u32;
            actions.push(Action::Copy { address, pages, from: CopyFrom::Zeros, write_protect: false });
            for next in page..page + 1 + around {
                self.mark_resident(owner, next);
            }
            self.regions[owner as usize].last_fault = page + around;
        } else {
            actions.push(Action::ZeroPage { address });
            self.mark_resident(owner, page);
        }
    }

    /// A missing fault whose page is on the device at `slot` of `zone` (`SwapIn::Read`,
    /// its engine read `reading.io`): served from the read-ahead cache if an earlier read
    /// brought the slot there, else read from the device.
    fn swap_in_fault(
        &mut self,
        fault: &mut Fault,
        reading: Reading,
        zone: u32,
        slot: u32,
        now: u64,
        actions: &mut Actions,
    ) -> FaultStep {
        let capacity = self.engine.config().geometry.zone_capacity_pages;
        let address = SlotAddress::new(zone, slot, capacity);
        let zone_generation = self.engine.zone_counters(zone).resets;
        let Some(entry) = self.readahead.lookup(address, zone_generation) else {
            return self.swap_in_read(fault, reading, zone, slot, zone_generation);
        };
        let Reading { owner, page, write, io, .. } = reading;
        if self.config.encrypt {
            // Opened first, under this lock, with the pages that would be mapped along: a
            // page that fails to open is read from the device instead, whose failure
            // reports it lost. The faulting page is not installed yet: one more pending.
            let (around, around_count) = self.plan_around(owner, page, address, 1);
            let opening = OpeningCached { reading, entry, zone, slot, around, around_count };
            fault.progress = Progress::OpeningCached(opening);
            let seal = self.regions[owner as usize].seals.get(page);
            return FaultStep::OpenCached { entry, sealed: Sealed { owner, page, seal }, around: around_count };
        }
        // Read ahead by an earlier fault: no device read.
        self.serve_from_cache(owner, page, io, entry, write, now, actions);
        self.serve_around(owner, page, address, write, now, actions);
        FaultStep::Done
    }

    /// A swap-in the cache cannot serve: the faulting page's slot is read from the
    /// device, with the valid slots around it into the read-ahead cache
    /// (`plan_readahead`).
    fn swap_in_read(
        &mut self,
        fault: &mut Fault,
        mut reading: Reading,
        zone: u32,
        slot: u32,
        zone_generation: u32,
    ) -> FaultStep {
        let Reading { owner, page, .. } = reading;
        let claim = self.plan_readahead(zone, slot, zone_generation);
        reading.claim = claim;
        let (start, pages, into) = match claim {
            Some(claim) => (
                slot - claim.fault_index,
                claim.pages,
                ReadInto::Cache { first: claim.first, fault_index: claim.fault_index },
            ),
            None => (slot, 1, ReadInto::FaultPage),
        };
        self.stats.swap_in_reads += pages as u64;
        self.count_tenant_traffic(owner, 0, pages as u64);
        self.stats.readahead_pages_read += pages as u64 - 1;
        fault.progress = Progress::Reading(reading);
        let region = &self.regions[owner as usize];
        let sealed = self.config.encrypt.then(|| Sealed { owner, page, seal: region.seals.get(page) });
        FaultStep::Read { zone, slot: start, pages, into, sealed }
    }

    /// A missing fault on a page a fork's child inherited (`region_add_inherited`): read
    /// from the parent's slot, once (another fault on it waits for that read), or
    /// poisoned if the device had lost it. `None`: not such a page.
    fn inherited_fault(
        &mut self,
        fault: &mut Fault,
        owner: u32,
        page: u64,
        actions: &mut Actions,
    ) -> Option<FaultStep> {
        let region = &mut self.regions[owner as usize];
        let generation = region.generation;
        let entry = region.inherited.get_mut(&page)?;
        if entry.reading {
            return Some(FaultStep::Again(Pause::Micros(50)));
        }
        match entry.from {
            ChildPage::Slot { zone, slot, sealed } => {
                entry.reading = true;
                fault.progress = Progress::ReadingInherited { owner, page, generation };
                self.stats.swap_in_reads += 1;
                self.stats.inherited_reads += 1;
                self.count_tenant_traffic(owner, 0, 1);
                Some(FaultStep::Read { zone, slot, pages: 1, into: ReadInto::FaultPage, sealed })
            }
            _ => {
                region.inherited.remove(&page);
                self.engine_lost_inherited(owner, page, actions);
                Some(FaultStep::Done)
            }
        }
    }

    /// An inherited page that cannot be read: the engine holds it lost (as for a swapped
    /// page whose read failed), and the page is poisoned.
    fn engine_lost_inherited(&mut self, owner: u32, page: u64, actions: &mut Actions) {
        let lost = self.engine.mark_lost(owner, page).expect("a registered page");
        assert!(lost, "{owner}:{page}: an inherited page the engine holds");
        self.after_engine();
        self.poison(owner, page, actions);
    }

    /// The read of an inherited page is done: the page is mapped writable (its data is
    /// the child's own from now on, never written out: dirty), read again, or poisoned after
    /// `READ_ATTEMPTS_MAX` failures. Discarded meanwhile by the program (its entry gone),
    /// nothing is mapped: the retried fault finds a page that reads zero.
    fn inherited_read_done(
        &mut self,
        fault: &mut Fault,
        result: Result<(), IoError>,
        now: u64,
        actions: &mut Actions,
    ) -> FaultStep {
        let Progress::ReadingInherited { owner, page, generation } = fault.progress else {
            unreachable!("an inherited read outstanding");
        };
        fault.progress = Progress::Started { owner, generation, sequential: false };
        let address = fault.address;
        if !self.same_region(owner, generation) {
            actions.push(Action::Wake { address });
            return FaultStep::Done;
        }
        let region = &mut self.regions[owner as usize];
        let Some(entry) = region.inherited.get_mut(&page).filter(|entry| entry.reading) else {
            return FaultStep::Again(Pause::None);
        };
        if result.is_err() {
            self.stats.device_errors += 1;
            entry.reading = false;
            fault.read_failures += 1;
            if fault.read_failures < READ_ATTEMPTS_MAX {
                return FaultStep::Again(Pause::None);
            }
            region.inherited.remove(&page);
            self.engine_lost_inherited(owner, page, actions);
            return FaultStep::Done;
        }
        region.inherited.remove(&page);
        let answer = self.engine.swap_in(owner, page, now).expect("swap-in of an inherited page");
        assert_eq!(answer, SwapIn::Zero, "{owner}:{page}: an inherited page the engine holds");
        actions.push(Action::Copy { address, pages: 1, from: CopyFrom::FaultPage, write_protect: false });
        self.mark_resident(owner, page);
        FaultStep::Done
    }

    /// The cache page `index` of those a fault asked to open (`FaultStep::OpenCached`'s
    /// `around`, after its own): its entry and what opens it.
    pub fn fault_cache_around(&self, fault: &Fault, index: u32) -> (u32, Sealed) {
        let Progress::OpeningCached(opening) = &fault.progress else {
            panic!("fault_cache_around without an open outstanding");
        };
        assert!(index < opening.around_count, "page {index} of {} to open", opening.around_count);
        let Around { page, entry, .. } = opening.around[index as usize];
        let owner = opening.reading.owner;
        (entry, Sealed { owner, page, seal: self.regions[owner as usize].seals.get(page) })
    }

    /// The sealed cache pages a fault asked to open (`FaultStep::OpenCached`) are open in
    /// place where `opened` has their bit (bit 0 the faulting page's, bit 1 + i its
    /// `around` page i's). The faulting page opened: served from the cache, and the pages
    /// next to it that opened, in each direction up to the first that did not. Not: the
    /// page is read from the device (its own check decides if it is lost). Entries not
    /// served are dropped: what they hold is no longer ciphertext.
    pub fn fault_cache_opened(&mut self, fault: &mut Fault, opened: u64, now: u64, actions: &mut Actions) -> FaultStep {
        let Progress::OpeningCached(opening) = fault.progress else {
            panic!("fault_cache_opened without an open outstanding");
        };
        let OpeningCached { reading, entry, zone, slot, around, around_count } = opening;
        let Reading { owner, page, generation, sequential, write, io, .. } = reading;
        assert!(self.same_region(owner, generation), "{owner}:{page}: the region went while the lock was held");
        if opened & 1 == 1 {
            fault.progress = Progress::Started { owner, generation, sequential };
            self.serve_from_cache(owner, page, io, entry, write, now, actions);
            self.serve_planned(owner, &around[..around_count as usize], opened >> 1, true, write, now, actions);
            return FaultStep::Done;
        }
        self.readahead.forget(entry);
        for next in &around[..around_count as usize] {
            self.readahead.forget(next.entry);
        }
        self.stats.swap_in_reads += 1;
        self.count_tenant_traffic(owner, 0, 1);
        fault.progress = Progress::Reading(reading);
        let seal = self.regions[owner as usize].seals.get(page);
        FaultStep::Read { zone, slot, pages: 1, into: ReadInto::FaultPage, sealed: Some(Sealed { owner, page, seal }) }
    }

    /// The read a fault asked for is done (`result`); its buffer holds the faulting page
    /// and the pages read ahead. Installs them, or asks for another try.
    pub fn fault_read_done(
        &mut self,
        fault: &mut Fault,
        result: Result<(), IoError>,
        now: u64,
        actions: &mut Actions,
    ) -> FaultStep {
        if let Progress::ReadingInherited { .. } = fault.progress {
            return self.inherited_read_done(fault, result, now, actions);
        }
        let Progress::Reading(reading) = fault.progress else {
            panic!("fault_read_done without a read outstanding");
        };
        let Reading { owner, page, generation, sequential, write, io, claim } = reading;
        fault.progress = Progress::Started { owner, generation, sequential };
        let address = fault.address;
        if result.is_err() {
            self.stats.device_errors += 1;
        }
        // The pages read ahead are entries now; the faulting page's cache page is copied
        // out by this call's actions, before anyone can claim it again.
        if let Some(claim) = claim {
            self.readahead.fill_done(claim, result.is_ok());
        }
        let from = match claim {
            Some(claim) => CopyFrom::Cache { page: claim.first + claim.fault_index },
            None => CopyFrom::FaultPage,
        };
        // The region may have been freed (and its id or addresses reused) meanwhile: the
        // engine orphaned its read, which completes as Freed; nothing is installed.
        let live = self.same_region(owner, generation);
        let outcome = self.engine.read_done(io, result, &[], now).expect("swap-in read completion");
        self.after_engine();
        self.assert_counts();
        if !live {
            actions.push(Action::Wake { address });
            return FaultStep::Done;
        }
        match outcome {
            ReadOutcome::SwappedIn { cached } => {
                self.install_swapped_in(owner, page, write, cached, from, now, actions);
                FaultStep::Done
            }
            ReadOutcome::Failed => {
                fault.read_failures += 1;
                if fault.read_failures < READ_ATTEMPTS_MAX {
                    return FaultStep::Again(Pause::None);
                }
                // The slot does not read back: never hand out a guess.
                let lost = self.engine.give_up_swapped_page(owner, page, now).expect("a registered page");
                assert!(lost, "{owner}:{page}: a failed swap-in leaves the page swapped");
                self.after_engine();
                self.poison(owner, page, actions);
                FaultStep::Done
            }
            ReadOutcome::Lost => {
                self.poison(owner, page, actions);
                FaultStep::Done
            }
            ReadOutcome::Freed | ReadOutcome::Gc => {
                actions.push(Action::Wake { address });
                FaultStep::Done
            }
        }
    }

    /// Maps a page swapped in, from its read or the read-ahead cache. A cached page
    /// keeps its slot while that pays (`src/swap_cache.rs`): it is mapped
    /// write-protected so the first write tells the engine the slot went stale (a write
    /// fault, or a slot not kept, maps it writable and says so at once).
    #[allow(clippy::too_many_arguments)]
    fn install_swapped_in(
        &mut self,
        owner: u32,
        page: u64,
        write: bool,
        cached: bool,
        from: CopyFrom,
        now: u64,
        actions: &mut Actions,
    ) {
        // Kept only while cached pages tend to be evicted clean: else the slot is dropped
        // now, as a write would drop it, and the first write costs no fault.
        // Asynchronously protected, a cached page's first write costs no fault (its digest
        // tells at its parking), so it always keeps the slot; and every page is mapped
        // protected, so that a scan sees the writes since it came back.
        let wp_async = self.config.wp_async;
        let skip_cache = cached && !write && !wp_async && {
            let tenant = self.regions[owner as usize].tenant;
            let clean = of_tenant(self.engine.tenant_swap_cache_hits(), tenant);
            !self.tenants.swap_cache_keeps(tenant, page, clean)
        };
        self.stats.swap_cache_skipped += skip_cache as u64;
        let write = write || skip_cache;
        let write_protect = wp_async || cached && !write;
        if cached && write {
            self.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
            self.after_engine();
        }
        actions.push(Action::Copy { address: self.page_address(owner, page), pages: 1, from, write_protect });
        self.mark_resident(owner, page);
    }

    /// Asks the engine to swap in the never-written pages right after `page` (at most
    /// [`ZERO_FILL_AROUND_PAGES`], within the budget's slack); returns how many.
    fn plan_zero_fill(&mut self, owner: u32, page: u64, now: u64) -> u64 {
        let room = (self.config.budget_pages + self.config.slack_pages)
            .saturating_sub(self.stats.resident_pages + 1)
            .min(self.tenant_room(owner).saturating_sub(1))
            .min(ZERO_FILL_AROUND_PAGES);
        let region_pages = self.regions[owner as usize].pages;
        let mut count = 0;
        while count < room {
            let next = page + 1 + count;
            if next >= region_pages
                || self.state(owner, next) != PageState::Unmapped
                || self.engine.page_state(owner, next) != Ok(EnginePage::Zero)
                || self.regions[owner as usize].inherited.contains_key(&next)
            {
                break;
            }
            match self.engine.swap_in(owner, next, now) {
                Ok(SwapIn::Zero) => count += 1,
                Ok(other) => panic!("swap-in of never-written page {owner}:{next} answered {other:?}"),
                Err(_) => break,
            }
        }
        count
    }

    /// A hit shows the run of faults going on as it was read ahead: the pages next to the
    /// faulting one in the address space whose slots are next to its slot, and in the
    /// cache, are mapped with it, each direction until one is not, at most a window's
    /// worth (`CoreConfig::readahead_pages`) and within the budget's slack. Each would be
    /// a fault of its own otherwise: a userfaultfd round trip, several times what the
    /// kernel takes to serve a page from its swap cache. They count as hits: the window
    /// keeps growing while the run lasts. They are mapped as the faulting page is:
    /// writable for a write (a run that writes, as Python's reference counts do, would
    /// otherwise take a write-protect fault per page, most of the missing faults saved
    /// coming back as write-protect faults; figures: docs/measurements/2026-11-pager.md),
    /// keeping their slots as swap cache for a read.
    fn serve_around(
        &mut self,
        owner: u32,
        page: u64,
        address: SlotAddress,
        write: bool,
        now: u64,
        actions: &mut Actions,
    ) {
        let (around, count) = self.plan_around(owner, page, address, 0);
        self.serve_planned(owner, &around[..count as usize], u64::MAX, false, write, now, actions);
    }

    /// Serves the pages `plan_around` chose whose bit is set in `served` (page i's is
    /// bit i), in each direction up to the first that is not, or whose swap-in cannot be
    /// served from the cache. With `drop_others`, the cache entries of the rest are
    /// dropped (sealed pages: an entry opened but not served is no longer ciphertext).
    #[allow(clippy::too_many_arguments)]
    fn serve_planned(
        &mut self,
        owner: u32,
        around: &[Around],
        served: u64,
        drop_others: bool,
        write: bool,
        now: u64,
        actions: &mut Actions,
    ) {
        let mut stopped = [false; 2];
        for (index, next) in around.iter().enumerate() {
            let direction = next.down as usize;
            if !stopped[direction] && served >> index & 1 == 1 {
                if let Ok(SwapIn::Read { io, .. }) = self.engine.swap_in(owner, next.page, now) {
                    self.serve_from_cache(owner, next.page, io, next.entry, write, now, actions);
                    continue;
                }
            }
            stopped[direction] = true;
            if drop_others {
                self.readahead.forget(next.entry);
            }
        }
        self.after_engine();
    }

    /// The pages `serve_around` maps with a cache hit's: next to it in the address space
    /// and in the cache, each direction until one is not (up first), within the room
    /// the budget's slack leaves with `pending` pages more resident. Chosen, not served:
    /// sealed pages are opened first (`FaultStep::OpenCached`).
    fn plan_around(
        &self,
        owner: u32,
        page: u64,
        address: SlotAddress,
        pending: u64,
    ) -> ([Around; READAHEAD_PAGES_MAX as usize], u32) {
        let mut around = [Around { page: 0, entry: 0, down: false }; READAHEAD_PAGES_MAX as usize];
        let mut count = 0u32;
        let capacity = self.engine.config().geometry.zone_capacity_pages;
        let room = (self.config.budget_pages + self.config.slack_pages)
            .saturating_sub(self.stats.resident_pages + pending)
            .min(self.tenant_room(owner).saturating_sub(pending))
            .min(self.config.readahead_pages as u64)
            .min(around.len() as u64);
        let region_pages = self.regions[owner as usize].pages;
        for down in [false, true] {
            for k in 1..=room - count as u64 {
                let (next, next_address) = match down {
                    false => (page + k, SlotAddress(address.0 + k)),
                    true => match (page.checked_sub(k), address.0.checked_sub(k)) {
                        (Some(next), Some(next_address)) => (next, SlotAddress(next_address)),
                        _ => break,
                    },
                };
                if next >= region_pages
                    || self.state(owner, next) != PageState::Unmapped
                    || self.engine.page_state(owner, next) != Ok(EnginePage::Swapped { address: next_address })
                {
                    break;
                }
                let zone = next_address.zone(capacity);
                let Some(entry) = self.readahead.lookup(next_address, self.engine.zone_counters(zone).resets) else {
                    break;
                };
                around[count as usize] = Around { page: next, entry, down };
                count += 1;
            }
        }
        (around, count)
    }

    /// Serves the swap-in `io` of `page` from read-ahead cache page `entry`: the engine's
    /// read completes at once, and the page is copied from the cache.
    #[allow(clippy::too_many_arguments)]
    fn serve_from_cache(
        &mut self,
        owner: u32,
        page: u64,
        io: IoId,
        entry: u32,
        write: bool,
        now: u64,
        actions: &mut Actions,
    ) {
        self.readahead.hit(entry);
        self.stats.readahead_hits += 1;
        let outcome = self.engine.read_done(io, Ok(()), &[], now).expect("swap-in from the cache");
        let ReadOutcome::SwappedIn { cached } = outcome else {
            panic!("{owner}:{page}: a swap-in served from the cache answered {outcome:?}");
        };
        self.install_swapped_in(owner, page, write, cached, CopyFrom::Cache { page: entry }, now, actions);
    }

    /// Plans a read of the faulting page's slot and the valid slots around it in its
    /// zone, as far as the read-ahead window goes (`ReadaheadCache::window`: after the
    /// slot, or before it for a run of faults going down), into the read-ahead cache.
    /// None: read the faulting page alone (no valid slot in the window, the window is one
    /// page, or the cache's pages at its hand are being filled).
    fn plan_readahead(&mut self, zone: u32, slot: u32, zone_generation: u32) -> Option<Claim> {
        let capacity = self.engine.config().geometry.zone_capacity_pages;
        let window = self.readahead.window(SlotAddress::new(zone, slot, capacity));
        // Only valid slots are kept: written (so the read sees their data), and the only
        // copy of a swapped page, which its fault may come for.
        let valid = |core: &PagerCore, next: u32| core.engine.slot_state(zone, next) == SlotState::Valid;
        // The farthest valid slot on each side bounds the read.
        let after = (1..=window.after.min(capacity - 1 - slot)).rev().find(|&k| valid(self, slot + k)).unwrap_or(0);
        let before = (1..=window.before.min(slot)).rev().find(|&k| valid(self, slot - k)).unwrap_or(0);
        if after == 0 && before == 0 {
            return None;
        }
        let start = slot - before;
        let pages = before + 1 + after;
        let mut keep = 0u64;
        for index in 0..pages {
            if index != before && valid(self, start + index) {
                keep |= 1 << index;
            }
        }
        self.readahead.claim(SlotAddress::new(zone, start, capacity), zone_generation, pages, before, keep)
    }

    /// The device destroyed the page's only copy. Never hand back wrong data: poison it
    /// (a touch raises SIGBUS). Once: a fault whose read was in flight when the zone
    /// was lost may learn of it after another fault on the page poisoned it (found by
    /// the pager DST), and then only wakes its thread, which meets the marker.
    fn poison(&mut self, owner: u32, page: u64, actions: &mut Actions) {
        let address = self.page_address(owner, page);
        if self.state(owner, page) == PageState::Poisoned {
            actions.push(Action::Wake { address });
            return;
        }
        self.set_state(owner, page, PageState::Poisoned);
        self.stats.pages_poisoned += 1;
        actions.push(Action::Poison { address });
    }
}
