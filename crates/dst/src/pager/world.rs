//! The pager DST's world: the pager core, a model of the page table entries of the
//! regions it pages (what userfaultfd would do with each action), the model zoned
//! device with injected faults, and the actors whose steps the seed interleaves.
//!
//! The pager's actors (the evictor, a fault, the I/O thread) are the core's own
//! (`znswap_pager_core::{Evictor, FaultTask, IoThread}`), the very step functions the
//! live threads call; here [`Sim`] is their shell, and the seed picks which actor steps
//! next. A step is one lock hold (a call into the core, with the actions it returns
//! carried out at once) or one piece of work outside the lock (a device command,
//! write-protecting a range, reading a victim, a discard). Application accesses are
//! steps of their own and land between any two.

use std::collections::VecDeque;

use znswap_core::driver::{Captured, Completion, ContractBreach, DeviceHooks, Driver, Stage};
use znswap_core::{AppendPage, Buf, IoError, IoRequest, PageState as EnginePage};
use znswap_pager_core::{park_outcome, unpark_next};
use znswap_pager_core::{
    Action, Actions, AddressRange, ChildPage, CopyFrom, Digest, DiscardBatch, DropDelay, Evictor, EvictorDid,
    EvictorShell, Fault, FaultKind, FaultShell, FaultTask, ForkHold, IoCompletion, IoPlan, IoShell, IoThread,
    MoveFailure, Next, PageSource, PageState, PagerCore, ParkOutcome, Pause, ReadInto, Sealed, Shell, UnparkNext,
    WaitOn, PAGE_BYTES,
};

use super::scenario::{Access, PagerFaultMode, PagerFaults, PagerScenario};
use crate::scenario::{below, chance, error_probability, Rng};

/// What a read-ahead cache page holds before any read filled it, or after a failed
/// read: a version no write ever makes, so the oracle catches a page installed from it.
const NOT_READ: u64 = u64::MAX;

/// Regions live at `(k + 1) << 32` for a place `k`: a freed region's place (so
/// its addresses) may be taken by the next one, as `mmap` reuses addresses.
const REGION_PLACES: usize = 6;
const PLACE_SHIFT: u32 = 32;
/// A region's shadow (where its pages are parked) lies this far above it, in its place.
const SHADOW_OFFSET: u64 = 1 << 31;
/// A condvar wait's timeout, in steps (the shell waits 5-10 ms).
const WAIT_TIMEOUT_STEPS: u64 = 4_000;
/// Attempts of one access before it counts as a livelock.
const ACCESS_ATTEMPTS_MAX: u32 = 100_000;
/// Steps one access may take before it counts as a hang.
const ACCESS_STEPS_MAX: u64 = 400_000;
/// Steps a tenant may be held back by its write limit at most (a step's clock moves
/// 1 µs on average, and more with its longer gaps), once for each thread of the tenant
/// ahead of this one waiting for room.
const WRITE_HOLD_STEPS: u64 = znswap_pager_core::WRITE_HOLD_MAX_NS / 1_000;

/// One page table entry, as the kernel would hold it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pte {
    pub mapped: bool,
    pub write_protected: bool,
    pub poisoned: bool,
    /// The page's content: a version (0: all zero).
    pub version: u64,
    /// Installed from a device read, and not written since.
    pub from_device: bool,
    /// Mapped when a discard of the program's was read, whose zap has not come yet: it
    /// holds data from before the discard (perhaps written over in part since), which
    /// must never be read once zapped.
    pub tainted: bool,
    /// Shared with a fork's child since the fork, and not written since: `UFFDIO_MOVE`
    /// refuses it (`EBUSY`), even once the child is gone.
    pub shared: bool,
}

pub struct ModelRegion {
    pub owner: u32,
    pub base: u64,
    pub ptes: Vec<Pte>,
    /// The last version written to each page (0: never, reads as zeroes).
    pub oracle: Vec<u64>,
    /// Pages found poisoned: the program was told (SIGBUS).
    pub lost: Vec<bool>,
    /// Application accesses under way here: a program does not free memory it is using.
    pub busy: u32,
    /// A second version a read may see (after a discard: a write made between the event
    /// and the zap, which the pager may have written out before the zap).
    pub alt: Vec<Option<u64>>,
    /// While a discard's zap is pending: the version before the discard (a read may
    /// still see it, or zeroes).
    pub pre: Vec<Option<u64>>,
    /// The last write between a discard's event and its zap, if it landed on a page
    /// mapped since the event (one holding no data from before the discard).
    pub window_write: Vec<Option<u64>>,
    /// The program's zap took what the pager had mapped (it believes the page mapped
    /// until a fault says otherwise).
    pub zapped: Vec<bool>,
    /// The shadow's entries: parked pages, and copies awaiting their discard.
    pub shadow: Vec<Pte>,
    /// A fork's child served by the pager (`PagerCore::region_add_inherited`): the
    /// parent region's owner, whose slots (and altered pages) it reads.
    pub parent_owner: Option<u32>,
}

impl ModelRegion {
    /// Whether a read of `page` may see `version`.
    fn acceptable(&self, page: usize, version: u64) -> bool {
        version == self.oracle[page]
            || Some(version) == self.alt[page]
            || self.pre[page].is_some_and(|pre| version == pre || version == 0)
    }

    /// A read saw `version`: outside a discard's window, that is the page's content now.
    fn seen(&mut self, page: usize, version: u64) {
        if self.pre[page].is_none() {
            self.oracle[page] = version;
            self.alt[page] = None;
        }
    }
}

/// Counters of what the run exercised.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Coverage {
    pub accesses: u64,
    pub reads_verified: u64,
    /// Reads of pages installed from a device read and not written since.
    pub swap_ins_verified: u64,
    pub writes: u64,
    pub faults_missing: u64,
    pub faults_write_protect: u64,
    pub fault_pauses: u64,
    pub room_waits: u64,
    /// Discards done by faults waiting for room (direct reclaim).
    pub fault_discards: u64,
    pub evictor_discards: u64,
    pub rounds: u64,
    pub regions_freed: u64,
    /// New regions placed at a freed region's addresses.
    pub addresses_reused: u64,
    /// Region removals refused for lack of an owner id (the engine still names the old).
    pub regions_refused: u64,
    pub zones_taken_offline: u32,
    pub injected_errors: u64,
    pub lost_observed: u64,
    /// Appends that read a victim while an application write to it was pending.
    pub appends: u64,
    pub stale_events: u64,
    /// Episodes of full swap said to the user.
    pub swap_full_notices: u64,
    /// The program's discards (REMOVE events read), and their pages by pager state.
    pub program_discards: u64,
    /// Of them, through the pager with the zap under the state lock.
    pub program_discards_under_lock: u64,
    pub discarded_unmapped: u64,
    pub discarded_resident: u64,
    pub discarded_evicting: u64,
    pub discarded_writing: u64,
    pub discarded_dropping: u64,
    pub discarded_poisoned: u64,
    pub discarded_removed: u64,
    /// Pages the zap took from under the pager (mapped since the event).
    pub zapped_under_core: u64,
    /// Accesses between a discard's event and its zap to pages of its range.
    pub window_accesses: u64,
    /// `FaultStep::ZeroFill`s that landed, and that met something mapped.
    pub zero_fills_landed: u64,
    pub zero_fills_refused: u64,
    pub forks: u64,
    /// Budget changes while the run went on.
    pub budget_changes: u64,
    /// Tenants' own budgets set or lifted (seeds with two tenants), and victims the
    /// evictor picked from tenants over theirs.
    pub tenant_budget_changes: u64,
    pub tenant_victims: u64,
    /// Tenants' write limits set or lifted, and how long tenants' swap-outs waited for
    /// them (simulated milliseconds, summed).
    pub write_limit_changes: u64,
    pub write_throttled_ms: u64,
    /// Tenants' swap limits set or lifted, and faults that went past their tenant's
    /// budget at its swap limit.
    pub swap_limit_changes: u64,
    pub swap_limit_overruns: u64,
    /// The child's reads of its snapshot: from held slots, zero pages, lost pages.
    pub child_reads_slot: u64,
    pub child_reads_zero: u64,
    pub child_reads_lost: u64,
    /// Forks whose child the pager served (a region of its own inheriting the
    /// parent's pages), and the pages such children read from their parents' slots.
    pub served_children: u64,
    pub inherited_reads: u64,
    /// Sealed pages: written, altered on the device, failed to open when read.
    pub pages_sealed: u64,
    pub pages_altered: u64,
    pub pages_failed_open: u64,
    /// Sealed pages read ahead, opened when a fault wanted them.
    pub cache_pages_opened: u64,
    pub child_reads_shadow: u64,
    /// Victims moved to their shadow pages; moves that found nothing mapped (the
    /// program's discard zapped the page meanwhile); moves refused: shared with a fork's
    /// child, the shadow page still mapped.
    pub parks: u64,
    pub parks_hole: u64,
    pub parks_refused_shared: u64,
    /// Asynchronous write protection: scans of victims' spans, and pages they found
    /// written; digests of parked pages taken.
    pub scans: u64,
    /// Pages shared with a fork's child made the parent's (`Action::Unshare`).
    pub unshares: u64,
    /// Discards a served process's agent answered late, those answers taken, and
    /// discards not asked while an answer was owed (`DropDelay`).
    pub discards_late: u64,
    pub late_answers: u64,
    pub discards_unsent: u64,
    pub scanned_written: u64,
    pub digests: u64,
    pub parks_refused_occupied: u64,
    /// Moves to or from a shadow page done but failed all the same (Linux 6.18), which
    /// the shells' rules took as done.
    pub moves_misreported: u64,
    /// Parked pages moved back by a touch (of them, copied: shared with a child), and
    /// copied back during their swap-out.
    pub unparks: u64,
    pub unparks_copied: u64,
    pub parked_copied_back: u64,
    pub discarded_parked: u64,
    /// Of them, pages whose move was still to be settled (`ParkingRemoved`).
    pub discarded_parking: u64,
}

/// The program's discard in flight: its REMOVE event queued, then read (the zap to come).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProgramDiscard {
    Idle,
    Queued {
        place: usize,
        first: u64,
        last: u64,
    },
    /// Read (`discard_range` called); the madvising thread zaps at `zap_step`.
    Read {
        place: usize,
        first: u64,
        last: u64,
        zap_step: u64,
    },
}

/// A forked child's snapshot: what each page it would fault on must read.
struct ForkModel {
    hold: ForkHold,
    /// (place, page, where the child reads it, the versions it may hold, and for a
    /// parked page what its copy of the shadow page held at the fork).
    pages: Vec<(usize, u64, ChildPage, [Option<u64>; 4], Option<u64>)>,
    /// The place of the child's region, when the pager serves the child too: removed
    /// (the child exited) before the hold is let go.
    served: Option<usize>,
    release_step: u64,
    next_read_step: u64,
}

/// An actor's wait between two steps, as its thread would wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    No,
    /// A pause: runnable again at this step.
    Paused(u64),
    /// Asleep on a condvar: runnable again when woken, or at this step (the timeout).
    Asleep(u64),
}

impl Waiting {
    fn until(self) -> Option<u64> {
        match self {
            Waiting::No => None,
            Waiting::Paused(until) | Waiting::Asleep(until) => Some(until),
        }
    }
}

/// A thread's fault resolution: the core's task, its wait between steps, and the
/// versions its last device read brought (its read buffer).
struct FaultSlot {
    task: FaultTask,
    waiting: Waiting,
    /// Asleep for room: woken once the room epoch moves past this.
    room_epoch: u64,
    read: Vec<u64>,
}

impl FaultSlot {
    fn new() -> Box<FaultSlot> {
        Box::new(FaultSlot { task: FaultTask::new(), waiting: Waiting::No, room_epoch: 0, read: Vec::new() })
    }
}

enum AppPhase {
    Idle,
    Access {
        place: usize,
        page: u64,
        write: bool,
    },
    /// Self-paging: resolving its own fault (the task in `App::fault`).
    Faulting {
        place: usize,
        page: u64,
        write: bool,
    },
    /// Handler mode: asleep in the kernel until a wake-up covers the page.
    Blocked {
        place: usize,
        page: u64,
        write: bool,
    },
    Finished,
}

struct App {
    phase: AppPhase,
    attempts: u32,
    started_step: u64,
    /// Sequential access: the next page.
    cursor: (usize, u64),
    /// The final sweep: (place, page) to read next.
    sweep: Option<(usize, u64)>,
    woken: bool,
    /// Its fault task (self-paging), out of place while it steps.
    fault: Option<Box<FaultSlot>>,
}

struct Handler {
    /// Its fault task, out of place while it steps.
    fault: Option<Box<FaultSlot>>,
}

struct EvictorSlot {
    evictor: Evictor,
    waiting: Waiting,
    woken: bool,
}

struct IoSlot {
    io: IoThread,
    waiting: Waiting,
    woken: bool,
}

/// The scenario's device errors, drawn from the world's random stream (none during the
/// final sweep); contract breaches become violations.
struct ErrorInjector<'a> {
    rng: &'a mut Rng,
    sweeping: bool,
    faults: &'a PagerFaults,
    injected: &'a mut u64,
    breaches: Vec<ContractBreach>,
}

impl DeviceHooks for ErrorInjector<'_> {
    fn inject_error(&mut self, stage: Stage, _zone: u32) -> bool {
        let faults = self.faults;
        let probability = error_probability(stage, faults.append_error, faults.read_error, faults.reset_error);
        let hit = !self.sweeping && probability > 0.0 && chance(self.rng, probability);
        *self.injected += hit as u64;
        hit
    }

    fn contract_breached(&mut self, breach: ContractBreach) {
        self.breaches.push(breach);
    }
}

pub struct World {
    pub core: PagerCore,
    /// The model device and the GC move buffer.
    pub driver: Driver,
    pub scenario: PagerScenario,
    rng: Rng,
    /// Draws whether a move the kernel did fails all the same
    /// (`PagerFaults::misreported_moves`): a stream of its own, so that seeds without
    /// it run as before.
    moves_rng: Rng,
    /// Draws which discards an agent answers late, and when (`PagerFaults::late_discards`).
    late_rng: Rng,
    /// Discards agents are late to answer, one per region at most (`DropDelay::Late`).
    late: Vec<LateAgent>,
    pub step: u64,
    pub(crate) now_ns: u64,
    pub regions: Vec<Option<ModelRegion>>,
    /// userfaultfd events not yet read by a handler: (address, kind).
    events: VecDeque<(u64, FaultKind)>,
    /// Readers of `mappings`: a region is freed only when there are none.
    mappings_readers: u32,
    /// The direct-reclaim discard batch (one per pager), free or taken.
    fault_discard: Option<DiscardBatch>,
    /// An actor holds the state lock (within its step, or into a wait).
    locked: bool,
    /// The read-ahead cache's pages: the version each holds (`NOT_READ` until a read
    /// fills it).
    readahead_cache: Vec<u64>,
    version: u64,
    offline_at_steps: Vec<u64>,
    /// Seals pages as the live pager's I/O thread does (`scenario.seal_pages`): a page's
    /// content, its version, is sealed as 8 bytes, and the device keeps the ciphertext.
    sealer: Option<znswap_seal::Sealer>,
    /// When a swapped page's ciphertext is altered on the device, and the pages altered
    /// (owner, page, the version its slot held): only these may be lost beyond the
    /// offline zones'.
    altered_at_steps: Vec<u64>,
    altered: Vec<(u32, u64, u64)>,
    /// The version each ciphertext on the device was sealed from: what the oracle's
    /// checks of the device's contents (a version lost with an offline zone) look at.
    sealed_versions: std::collections::HashMap<u64, u64>,
    next_churn_step: u64,
    apps: Vec<App>,
    handlers: Vec<Handler>,
    evictors: Vec<Option<EvictorSlot>>,
    ios: Vec<Option<IoSlot>>,
    /// Room wake-ups so far: a fault waiting for room runs again once this moves on.
    room_epoch: u64,
    pub coverage: Coverage,
    pub violations: Vec<String>,
    pub corrupted: u64,
    /// The final sweep is on: application threads read every page once and stop.
    sweeping: bool,
    /// `ZNSWAP_PAGER_TRACE=place:page`: print what happens to that page.
    trace: Option<(usize, u64)>,
    discard: ProgramDiscard,
    next_discard_step: u64,
    fork: Option<ForkModel>,
    next_fork_step: u64,
    next_budget_step: u64,
}

const VIOLATIONS_MAX: usize = 32;

/// A served process's agent late to answer a discard: it zaps `ranges` at step `zap_at`
/// and answers at `answer_at` (after).
struct LateAgent {
    owner: u32,
    ranges: Vec<AddressRange>,
    zap_at: u64,
    answer_at: u64,
    zapped: bool,
}

/// Steps within which a late agent zaps, and then answers.
const LATE_ZAP_STEPS: u64 = 3_000;
const LATE_ANSWER_STEPS: u64 = 1_000;

impl World {
    pub fn new(
        scenario: PagerScenario,
        mut core: PagerCore,
        rng: Rng,
        moves_rng: Rng,
        late_rng: Rng,
        steps: u64,
    ) -> World {
        let mut driver = Driver::new(core.engine());
        let core_cache_pages = core.readahead_cache_pages() as usize;
        // The device's own limit (the engine may keep fewer zones open).
        driver.device.active_zones_max = scenario.geometry.max_active_zones.max(scenario.geometry.max_open_zones);
        let mut rng = rng;
        let offline_at_steps =
            (0..scenario.faults.offline_zones).map(|_| steps / 4 + below(&mut rng, steps / 2 + 1)).collect();
        let altered_at_steps = (0..scenario.faults.altered_pages).map(|_| below(&mut rng, steps)).collect();
        // A fixed key: the same seed seals to the same ciphertext.
        let sealer = scenario.seal_pages.then(|| znswap_seal::Sealer::with_key(&[0x5e; 32]).expect("a key page"));
        let self_paging = scenario.fault_mode == PagerFaultMode::SelfPaging;
        let apps = (0..scenario.app_threads)
            .map(|_| App {
                phase: AppPhase::Idle,
                attempts: 0,
                started_step: 0,
                cursor: (0, 0),
                sweep: None,
                woken: false,
                fault: self_paging.then(FaultSlot::new),
            })
            .collect();
        let handlers = match scenario.fault_mode {
            PagerFaultMode::SelfPaging => Vec::new(),
            PagerFaultMode::HandlerThreads(count) => {
                (0..count).map(|_| Handler { fault: Some(FaultSlot::new()) }).collect()
            }
        };
        let evictors = (0..scenario.evictor_threads)
            .map(|_| Some(EvictorSlot { evictor: Evictor::new(&mut core), waiting: Waiting::No, woken: false }))
            .collect();
        let ios = (0..scenario.io_threads)
            .map(|_| Some(IoSlot { io: IoThread::new(&core), waiting: Waiting::No, woken: false }))
            .collect();
        let churn = scenario.region_churn_steps;
        World {
            fault_discard: Some(core.discard_batch()),
            locked: false,
            core,
            driver,
            rng,
            moves_rng,
            late_rng,
            late: Vec::new(),
            step: 0,
            now_ns: 0,
            regions: (0..REGION_PLACES).map(|_| None).collect(),
            events: VecDeque::new(),
            mappings_readers: 0,
            readahead_cache: vec![NOT_READ; core_cache_pages],
            version: 0,
            offline_at_steps,
            sealer,
            altered_at_steps,
            altered: Vec::new(),
            sealed_versions: std::collections::HashMap::new(),
            next_churn_step: if churn == 0 { u64::MAX } else { churn },
            apps,
            handlers,
            evictors,
            ios,
            room_epoch: 0,
            coverage: Coverage::default(),
            violations: Vec::new(),
            corrupted: 0,
            sweeping: false,
            trace: std::env::var("ZNSWAP_PAGER_TRACE").ok().and_then(|text| {
                let (place, page) = text.split_once(':')?;
                Some((place.parse().ok()?, page.parse().ok()?))
            }),
            discard: ProgramDiscard::Idle,
            next_discard_step: if scenario.program_discard_steps == 0 {
                u64::MAX
            } else {
                scenario.program_discard_steps
            },
            fork: None,
            next_fork_step: if scenario.fork_steps == 0 { u64::MAX } else { scenario.fork_steps },
            next_budget_step: if scenario.budget_change_steps == 0 { u64::MAX } else { scenario.budget_change_steps },
            scenario,
        }
    }

    pub fn violation(&mut self, message: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(format!("step {}: {message}", self.step));
        }
    }

    /// Maps a new region of `pages` pages in a free place; false if none is free
    /// or the core refuses it (no owner id yet).
    pub fn add_region(&mut self, pages: u64, reuse: Option<usize>) -> bool {
        let free: Vec<usize> = (0..REGION_PLACES).filter(|&place| self.regions[place].is_none()).collect();
        if free.is_empty() {
            return false;
        }
        let place = match reuse {
            Some(place) if self.regions[place].is_none() && chance(&mut self.rng, 0.5) => {
                self.coverage.addresses_reused += 1;
                place
            }
            _ => free[below(&mut self.rng, free.len() as u64) as usize],
        };
        let base = ((place as u64) + 1) << PLACE_SHIFT;
        let tenant = below(&mut self.rng, self.scenario.tenants as u64) as u32;
        let shadow = (self.scenario.park_pages > 0).then_some(base + SHADOW_OFFSET);
        match self.core.region_add(base, pages, tenant, shadow) {
            Ok(owner) => {
                self.regions[place] = Some(ModelRegion {
                    owner,
                    base,
                    ptes: vec![Pte::default(); pages as usize],
                    oracle: vec![0; pages as usize],
                    lost: vec![false; pages as usize],
                    busy: 0,
                    alt: vec![None; pages as usize],
                    pre: vec![None; pages as usize],
                    window_write: vec![None; pages as usize],
                    zapped: vec![false; pages as usize],
                    shadow: vec![Pte::default(); pages as usize],
                    parent_owner: None,
                });
                self.after_lock_step();
                true
            }
            Err(_) => {
                self.coverage.regions_refused += 1;
                false
            }
        }
    }

    /// Prints `what` if `address..+pages` covers the traced page.
    fn trace(&self, address: u64, pages: u64, what: &dyn Fn() -> String) {
        let Some((place, page)) = self.trace else { return };
        let Some(region) = self.regions.get(place).and_then(Option::as_ref) else { return };
        let at = region.base + page * PAGE_BYTES as u64;
        if at >= address && at < address + pages * PAGE_BYTES as u64 {
            let state = self.core.page_state(region.owner, page);
            let engine = self.core.engine().page_state(region.owner, page);
            let pte = region.ptes.get(page as usize).copied();
            eprintln!("[{}] {} | now {state:?} / {engine:?} / {pte:?}", self.step, what());
        }
    }

    fn locate(&self, address: u64) -> Option<(usize, u64)> {
        let place = (address >> PLACE_SHIFT).checked_sub(1)? as usize;
        let region = self.regions.get(place)?.as_ref()?;
        let page = (address - region.base) / PAGE_BYTES as u64;
        (page < region.ptes.len() as u64).then_some((place, page))
    }

    /// The region page whose shadow page is at `address`, if any.
    fn locate_shadow(&self, address: u64) -> Option<(usize, u64)> {
        let place = (address >> PLACE_SHIFT).checked_sub(1)? as usize;
        let region = self.regions.get(place)?.as_ref()?;
        let page = (address.checked_sub(region.base + SHADOW_OFFSET)?) / PAGE_BYTES as u64;
        (page < region.shadow.len() as u64).then_some((place, page))
    }

    /// The shadow entry at `address`, as an ioctl or a read of it would find it.
    fn shadow_pte(&mut self, address: u64, what: &str) -> Option<(usize, u64, Pte)> {
        match self.locate_shadow(address) {
            Some((place, page)) => {
                Some((place, page, self.regions[place].as_ref().expect("live").shadow[page as usize]))
            }
            None => {
                self.violation(format!("{what} at {address:#x}, outside any region's shadow"));
                None
            }
        }
    }

    /// `UFFDIO_MOVE` of the page at `address` to its shadow page, as the kernel checks
    /// it (no source holes allowed): `EEXIST` if the shadow page is mapped, then `ENOENT`
    /// if nothing is mapped at `address`, then `EBUSY` if shared with a fork's child; and
    /// for some seeds a move done that fails all the same (`EEXIST`: Linux 6.18). A
    /// failure's outcome is the live shell's: `park_outcome`, from where the page is.
    fn park(&mut self, address: u64, shadow: u64) -> ParkOutcome {
        self.trace(address, 1, &|| "park".to_string());
        let Some((place, page)) = self.locate(address) else {
            self.violation(format!("a park of {address:#x}, outside any region"));
            return ParkOutcome::Busy;
        };
        if self.locate_shadow(shadow) != Some((place, page)) {
            self.violation(format!("{address:#x} parked at {shadow:#x}, not its shadow page"));
            return ParkOutcome::Busy;
        }
        let misreport = chance(&mut self.moves_rng, self.scenario.faults.misreported_moves);
        let region = self.regions[place].as_mut().expect("live");
        let pte = region.ptes[page as usize];
        let failure = if region.shadow[page as usize].mapped {
            let message = format!("a park of {place}:{page} into its shadow page, which holds a page");
            self.violation(message);
            Some(MoveFailure::Exists)
        } else if !pte.mapped {
            Some(MoveFailure::NoEntry)
        } else if pte.shared {
            Some(MoveFailure::Other)
        } else {
            region.shadow[page as usize] = Pte { write_protected: false, ..pte };
            region.ptes[page as usize] = Pte::default();
            self.coverage.parks += 1;
            misreport.then_some(MoveFailure::Exists)
        };
        let Some(failure) = failure else { return ParkOutcome::Moved };
        let region = self.regions[place].as_ref().expect("live");
        let outcome = park_outcome(failure, region.ptes[page as usize].mapped, region.shadow[page as usize].mapped);
        match outcome {
            ParkOutcome::Moved => self.coverage.moves_misreported += 1,
            ParkOutcome::Hole => self.coverage.parks_hole += 1,
            ParkOutcome::Busy => self.coverage.parks_refused_shared += 1,
            ParkOutcome::Occupied => self.coverage.parks_refused_occupied += 1,
        }
        outcome
    }

    fn address(&self, place: usize, page: u64) -> u64 {
        self.regions[place].as_ref().expect("live").base + page * PAGE_BYTES as u64
    }

    // ------------------------------------------------------------ the kernel's part

    /// Carries out the core's actions on the page table model, as the shell's `run`.
    fn apply(&mut self, actions: &mut Actions, buffer: &[u64]) {
        let list: Vec<Action> = actions.drain().collect();
        for action in list {
            let (address, pages) = match action {
                Action::Copy { address, pages, .. } => (address, pages as u64),
                Action::Unprotect { address, pages } => (address, pages),
                Action::ZeroPage { address } | Action::Poison { address } | Action::Wake { address } => (address, 1),
                Action::Unpark { address, .. } | Action::Unshare { address } => (address, 1),
            };
            self.trace(address, pages, &|| format!("before {action:?}"));
            match action {
                Action::Copy { address, pages, from, write_protect } => {
                    for index in 0..pages as u64 {
                        let at = address + index * PAGE_BYTES as u64;
                        let (version, from_device) = match from {
                            CopyFrom::FaultPage => (buffer[index as usize], true),
                            CopyFrom::Cache { page } => (self.readahead_cache[page as usize + index as usize], true),
                            CopyFrom::Zeros => (0, false),
                            CopyFrom::Shadow { address: shadow } => {
                                self.coverage.parked_copied_back += 1;
                                match self.shadow_pte(shadow + index * PAGE_BYTES as u64, "a copy from the shadow") {
                                    Some((_, _, pte)) if pte.mapped => (pte.version, pte.from_device),
                                    _ => {
                                        self.violation(format!("a copy from the empty shadow page {shadow:#x}"));
                                        (0, false)
                                    }
                                }
                            }
                        };
                        self.install(at, version, write_protect, from_device, "UFFDIO_COPY");
                    }
                    self.wake(address, pages as u64);
                }
                Action::ZeroPage { address } => {
                    self.install(address, 0, false, false, "UFFDIO_ZEROPAGE");
                    self.wake(address, 1);
                }
                Action::Unprotect { address, pages } => {
                    for index in 0..pages {
                        if let Some((place, page)) = self.locate(address + index * PAGE_BYTES as u64) {
                            let pte = &mut self.regions[place].as_mut().expect("live").ptes[page as usize];
                            if pte.mapped {
                                pte.write_protected = false;
                            }
                        }
                    }
                    self.wake(address, pages);
                }
                Action::Poison { address } => {
                    match self.locate(address) {
                        Some((place, page)) => {
                            let pte = &mut self.regions[place].as_mut().expect("live").ptes[page as usize];
                            if pte.mapped || pte.poisoned {
                                self.violation(format!("UFFDIO_POISON over a mapped page at {address:#x}"));
                            } else {
                                pte.poisoned = true;
                                self.regions[place].as_mut().expect("live").zapped[page as usize] = false;
                            }
                        }
                        None => self.violation(format!("UFFDIO_POISON outside any region at {address:#x}")),
                    }
                    self.wake(address, 1);
                }
                Action::Wake { address } => self.wake(address, 1),
                Action::Unshare { address } => {
                    let Some((place, page)) = self.locate(address) else {
                        self.violation(format!("an unshare of {address:#x}, outside any region"));
                        continue;
                    };
                    let pte = &mut self.regions[place].as_mut().expect("live").ptes[page as usize];
                    if !pte.mapped {
                        // The kernel would raise a userfault in the evictor, under the lock.
                        self.violation(format!("an unshare of {address:#x}, where nothing is mapped"));
                        continue;
                    }
                    // A write fault with no byte changed: the copy-on-write is taken, and
                    // the (asynchronous) protection lifted.
                    self.coverage.unshares += 1;
                    pte.shared = false;
                    pte.write_protected = false;
                }
                Action::Unpark { address, shadow } => {
                    let Some((place, page, pte)) = self.shadow_pte(shadow, "an unpark") else { continue };
                    if !pte.mapped {
                        self.violation(format!("an unpark of {address:#x} from its empty shadow page"));
                        continue;
                    }
                    // Shared with a fork's child, the kernel refuses the move (`EBUSY`);
                    // and for some seeds a move it did fails all the same (`EEXIST`). The
                    // shell's next step is `unpark_next`'s, from where the page is.
                    let misreport = chance(&mut self.moves_rng, self.scenario.faults.misreported_moves);
                    let region = self.regions[place].as_ref().expect("live");
                    let here = region.ptes[page as usize].mapped;
                    let (expected, next) = if pte.shared {
                        (UnparkNext::Copy, unpark_next(MoveFailure::Other, here, true, false))
                    } else if misreport {
                        self.coverage.moves_misreported += 1;
                        // Moved: the page here, none at the shadow page.
                        (UnparkNext::Done, unpark_next(MoveFailure::Exists, true, false, false))
                    } else {
                        (UnparkNext::Done, UnparkNext::Done)
                    };
                    if next != expected {
                        self.violation(format!(
                            "the shell's next step after the move back of {address:#x} would be {next:?}, not \
                             {expected:?}"
                        ));
                        continue;
                    }
                    // Moved, or copied and the shadow page discarded: the same to the
                    // program.
                    self.coverage.unparks += 1;
                    self.coverage.unparks_copied += pte.shared as u64;
                    self.regions[place].as_mut().expect("live").shadow[page as usize] = Pte::default();
                    self.install(address, pte.version, false, pte.from_device, "an unpark");
                    self.wake(address, 1);
                }
            }
        }
    }

    fn install(&mut self, address: u64, version: u64, write_protected: bool, from_device: bool, what: &str) {
        let Some((place, page)) = self.locate(address) else {
            self.violation(format!("{what} outside any region at {address:#x}"));
            return;
        };
        let region = self.regions[place].as_mut().expect("live");
        let pte = &mut region.ptes[page as usize];
        if pte.mapped || pte.poisoned {
            // EEXIST: the shell aborts on it.
            self.violation(format!("{what} over a page already mapped at {address:#x}"));
            return;
        }
        *pte =
            Pte { mapped: true, write_protected, poisoned: false, version, from_device, tainted: false, shared: false };
        region.zapped[page as usize] = false;
        let expected = region.oracle[page as usize];
        if region.acceptable(page as usize, version) {
            region.seen(page as usize, version);
        } else if !region.lost[page as usize] {
            self.corrupted += 1;
            let message = format!("page {place}:{page} installed with v{version}, last written v{expected}");
            self.violation(message);
        }
    }

    /// Wakes the application threads asleep on a page of `address..+pages`.
    fn wake(&mut self, address: u64, pages: u64) {
        let end = address + pages * PAGE_BYTES as u64;
        for index in 0..self.apps.len() {
            if let AppPhase::Blocked { place, page, .. } = self.apps[index].phase {
                if self.regions[place].is_none() {
                    continue;
                }
                let at = self.address(place, page);
                if at >= address && at < end {
                    self.apps[index].woken = true;
                }
            }
        }
    }

    /// After every lock step: the wake-ups the core owes.
    fn after_lock_step(&mut self) {
        if self.core.take_notice().is_some() {
            self.coverage.swap_full_notices += 1;
        }
        let wakeups = self.core.take_wakeups();
        if wakeups.false_drops {
            // Only a served process's agent can say it dropped what it kept: this pager
            // drops its own pages, so its write faults never reveal one.
            let owners = self.core.take_false_drops();
            self.violation(format!("regions {owners:?} suspected of pages not dropped"));
        }
        if wakeups.evictors {
            for evictor in self.evictors.iter_mut().flatten() {
                evictor.woken = true;
            }
        }
        if wakeups.io {
            if let Some(io) = self.ios.iter_mut().flatten().find(|io| matches!(io.waiting, Waiting::Asleep(_))) {
                io.woken = true;
            }
        }
        if wakeups.room {
            self.room_epoch += 1;
        }
    }

    fn advance_clock(&mut self) {
        self.now_ns += 1 + below(&mut self.rng, 2_000);
        if chance(&mut self.rng, 0.001) {
            // Now and then a longer gap: chunk flushes, FAR and GC pacing run on ticks.
            self.now_ns += below(&mut self.rng, 5_000_000);
        }
    }

    /// A step within the next `steps`.
    fn within(&mut self, steps: u64) -> u64 {
        self.step + 1 + below(&mut self.rng, steps.max(1))
    }

    fn pause_steps(&mut self, pause: Pause) -> Waiting {
        match pause {
            Pause::None => Waiting::No,
            Pause::Yield => Waiting::Paused(self.within(4)),
            Pause::Micros(micros) => Waiting::Paused(self.within(micros as u64 / 4)),
        }
    }

    /// An actor's step asked to wait (`Next::Wait`), the state lock still held: the
    /// lock goes as the wait begins, as a condvar's wait lets it go.
    fn wait(&mut self) -> Waiting {
        self.unlock();
        Waiting::Asleep(self.within(WAIT_TIMEOUT_STEPS))
    }

    fn unlock(&mut self) {
        assert!(self.locked, "the state lock released but not held");
        self.locked = false;
        self.after_lock_step();
    }

    // ------------------------------------------------------------------- device

    /// Runs `operation` on the model device with the scenario's errors; contract
    /// breaches become violations.
    fn on_device<T>(&mut self, operation: impl FnOnce(&mut Driver, &mut ErrorInjector<'_>) -> T) -> T {
        let mut injector = ErrorInjector {
            rng: &mut self.rng,
            sweeping: self.sweeping,
            faults: &self.scenario.faults,
            injected: &mut self.coverage.injected_errors,
            breaches: Vec::new(),
        };
        let result = operation(&mut self.driver, &mut injector);
        for breach in injector.breaches {
            self.violation(breach.0);
        }
        result
    }

    /// A swap-in read for a fault: the versions of `pages` slots from `slot`.
    fn device_read(&mut self, zone: u32, slot: u32, pages: u32) -> (Result<(), IoError>, Vec<u64>) {
        match self.on_device(|driver, injector| driver.read_pages(zone, slot, pages, injector)) {
            Ok(versions) => (Ok(()), versions),
            Err(error) => (Err(error), Vec::new()),
        }
    }

    /// Runs the I/O thread's request on the model device; the records a read returns.
    fn device_command(&mut self, plan: &mut IoPlan, records: Vec<u8>) -> (IoCompletion, Vec<u8>) {
        let request = plan.request();
        let mut pages = Vec::new();
        if let IoRequest::Append { zone, .. } = request {
            self.coverage.appends += 1;
            pages.reserve(plan.sources().len());
            for index in 0..plan.sources().len() {
                let source = plan.sources()[index];
                // The device reads each page's content: a region page's is its PTE's
                // version, which the captured copy carries as its buffer handle.
                let (owner, page, buf) = match source {
                    PageSource::Region { address } if self.locate_shadow(address).is_some() => {
                        let (place, page) = self.locate_shadow(address).expect("just found");
                        let region = self.regions[place].as_ref().expect("live");
                        let (owner, base, pte) = (region.owner, region.base, region.shadow[page as usize]);
                        if !pte.mapped {
                            self.violation(format!("an append read the empty shadow page of {place}:{page}"));
                        }
                        self.trace(base + page * PAGE_BYTES as u64, 1, &|| {
                            format!("append to zone {zone} reads the shadow's v{}", pte.version)
                        });
                        (owner, page, Buf::Page(pte.version))
                    }
                    PageSource::Region { address } => match self.locate(address) {
                        Some((place, page)) => {
                            let region = self.regions[place].as_ref().expect("live");
                            let (owner, pte) = (region.owner, region.ptes[page as usize]);
                            let discarded = region.zapped[page as usize]
                                || region.pre[page as usize].is_some()
                                || self.core.page_state(owner, page) == Some(PageState::Removed);
                            if self.trace == Some((place, page)) {
                                self.trace(address, 1, &|| format!("append to zone {zone} reads v{}", pte.version));
                            } else if !pte.mapped && !discarded {
                                self.violation(format!("an append read the unmapped page {place}:{page}"));
                            }
                            // (Zapped by the program: the append's read faults, and reads
                            // the zero page a handler maps.)
                            let version = if pte.mapped { pte.version } else { 0 };
                            (owner, page, Buf::Page(version))
                        }
                        None => {
                            self.violation(format!("an append read {address:#x}, outside any region"));
                            (0, 0, Buf::Page(0))
                        }
                    },
                    PageSource::Gc { page } => (0, 0, Buf::Gc(page)),
                    PageSource::Footer => (0, 0, Buf::Footer),
                    PageSource::Zero => (0, 0, Buf::Zero),
                };
                if self.scenario.wp_async {
                    let digest = match (plan.sources()[index], buf) {
                        (PageSource::Region { .. }, Buf::Page(version)) => digest_of(version),
                        _ => 0,
                    };
                    plan.digests_mut().push(digest);
                }
                let buf = match (&self.sealer, source, buf) {
                    (Some(sealer), PageSource::Region { .. }, Buf::Page(version)) => {
                        let (owner, page) = plan.identity(index);
                        let mut bytes = version.to_le_bytes();
                        let seal = sealer.seal(owner, page, &mut bytes);
                        plan.seals_mut().push(seal);
                        self.coverage.pages_sealed += 1;
                        let ciphertext = u64::from_le_bytes(bytes);
                        self.sealed_versions.insert(ciphertext, version);
                        Buf::Page(ciphertext)
                    }
                    _ => {
                        plan.seals_mut().push(znswap_seal::NO_SEAL);
                        buf
                    }
                };
                pages.push(AppendPage { owner, page, buf });
            }
        }
        let captured = Captured { request, pages, records };
        let completion = self.on_device(|driver, injector| driver.run(&captured, injector));
        match completion {
            Completion::Append(result) => (IoCompletion::Append(result), Vec::new()),
            Completion::Read { result, records, .. } => {
                if let (Ok(()), IoRequest::Read { buf: buf @ (Buf::Page(_) | Buf::Zero), .. }) = (result, request) {
                    self.violation(format!("a GC read into {buf:?}"));
                }
                (IoCompletion::Read(result), records)
            }
            Completion::Reset(result) => (IoCompletion::Reset(result), Vec::new()),
            Completion::Finish(result) => (IoCompletion::Finish(result), Vec::new()),
        }
    }

    /// Opens a sealed page's stored ciphertext: its version, or `None` if it fails to
    /// open (counted).
    fn open(&mut self, sealed: &Sealed, stored: u64) -> Option<u64> {
        let sealer = self.sealer.as_ref().expect("a sealed read in a sealing world");
        let mut bytes = stored.to_le_bytes();
        match sealer.open(sealed.owner, sealed.page, &mut bytes, &sealed.seal) {
            Ok(()) => Some(u64::from_le_bytes(bytes)),
            Err(_) => {
                self.coverage.pages_failed_open += 1;
                None
            }
        }
    }

    /// Flips one bit of a swapped page's slot on the device (its only copy), as a
    /// drive's silent corruption or an attacker would.
    fn alter_swapped_page(&mut self) {
        let capacity = self.scenario.geometry.zone_capacity_pages;
        let places: Vec<usize> = (0..REGION_PLACES).filter(|&place| self.regions[place].is_some()).collect();
        for _ in 0..16 {
            let Some(&place) = places.get(below(&mut self.rng, places.len().max(1) as u64) as usize) else { return };
            let region = self.regions[place].as_ref().expect("live");
            let page = below(&mut self.rng, region.ptes.len() as u64);
            let (owner, version) = (region.owner, region.oracle[page as usize]);
            let Ok(EnginePage::Swapped { address }) = self.core.engine().page_state(owner, page) else { continue };
            let (zone, slot) = (address.zone(capacity), address.slot(capacity));
            let model = &mut self.driver.device.zones[zone as usize];
            if model.offline || slot >= model.write_pointer {
                continue;
            }
            model.data[slot as usize] ^= 1 << below(&mut self.rng, 64);
            self.altered.push((owner, page, version));
            self.coverage.pages_altered += 1;
            return;
        }
    }

    fn take_zone_offline(&mut self) {
        let zones = self.driver.device.zones.len() as u64;
        for _ in 0..zones {
            let zone = below(&mut self.rng, zones) as usize;
            let model = &self.driver.device.zones[zone];
            if model.write_pointer > 0 && !model.offline {
                self.driver.device.take_offline(zone as u32);
                self.coverage.zones_taken_offline += 1;
                return;
            }
        }
    }

    // -------------------------------------------------------------- scheduling

    /// Runs one step of a runnable actor; false when nothing can ever run again (every
    /// thread asleep with nothing to wake it: the caller reports the hang). When every
    /// actor waits on a timer, time passes to the first.
    pub fn run_step(&mut self) -> bool {
        self.step += 1;
        self.advance_clock();
        if self.altered_at_steps.contains(&self.step) {
            self.alter_swapped_page();
        }
        if self.offline_at_steps.contains(&self.step) {
            self.take_zone_offline();
        }
        if !self.late.is_empty() {
            self.late_agents_zap();
        }
        let mut runnable = self.runnable();
        if runnable.is_empty() {
            let Some(until) = self.first_timer() else { return false };
            // Everyone sleeps: the clock moves on with them (a step is about a µs).
            let slept = until.saturating_sub(self.step);
            self.step += slept;
            self.now_ns += slept * 1_000;
            runnable = self.runnable();
        }
        if runnable.is_empty() {
            return false;
        }
        let (kind, index) = runnable[below(&mut self.rng, runnable.len() as u64) as usize];
        match kind {
            0 => self.step_app(index),
            1 => self.step_handler(index),
            2 => self.step_evictor(index),
            3 => self.step_io(index),
            4 => self.step_churn(),
            5 => self.step_program_discard(),
            6 => self.step_fork(),
            _ => self.step_budget(),
        }
        true
    }

    /// The earliest step a waiting actor's timer fires at.
    fn first_timer(&self) -> Option<u64> {
        let apps = self.apps.iter().filter_map(|app| match &app.phase {
            AppPhase::Faulting { .. } => app.fault.as_ref().and_then(|slot| slot.waiting.until()),
            _ => None,
        });
        let handlers = self.handlers.iter().filter_map(|handler| handler.fault.as_ref()?.waiting.until());
        let evictors = self.evictors.iter().flatten().filter_map(|evictor| evictor.waiting.until());
        let ios = self.ios.iter().flatten().filter_map(|io| io.waiting.until());
        let zap = match self.discard {
            ProgramDiscard::Read { zap_step, .. } => Some(zap_step),
            _ => None,
        };
        let child = self.fork.as_ref().map(|fork| fork.next_read_step);
        apps.chain(handlers).chain(evictors).chain(ios).chain(zap).chain(child).min()
    }

    /// Whether an actor waiting as `waiting` may step: its timer fired, or it was woken.
    fn ready(&self, waiting: Waiting, woken: bool) -> bool {
        match waiting {
            Waiting::No => true,
            Waiting::Paused(until) => self.step >= until,
            Waiting::Asleep(until) => woken || self.step >= until,
        }
    }

    fn runnable(&self) -> Vec<(u8, usize)> {
        let mut runnable: Vec<(u8, usize)> = Vec::with_capacity(16);
        for (index, app) in self.apps.iter().enumerate() {
            if self.app_runnable(app) {
                runnable.push((0, index));
            }
        }
        for (index, handler) in self.handlers.iter().enumerate() {
            let slot = handler.fault.as_ref().expect("in place between steps");
            let ready = if slot.task.is_resolved() {
                !self.events.is_empty() || matches!(self.discard, ProgramDiscard::Queued { .. })
            } else {
                self.fault_ready(slot)
            };
            if ready {
                runnable.push((1, index));
            }
        }
        for (index, evictor) in self.evictors.iter().enumerate() {
            let evictor = evictor.as_ref().expect("in place between steps");
            if self.ready(evictor.waiting, evictor.woken) {
                runnable.push((2, index));
            }
        }
        for (index, io) in self.ios.iter().enumerate() {
            let io = io.as_ref().expect("in place between steps");
            if self.ready(io.waiting, io.woken) {
                runnable.push((3, index));
            }
        }
        if self.step >= self.next_churn_step && !self.sweeping && self.mappings_readers == 0 {
            runnable.push((4, 0));
        }
        let discard_due = self.discard == ProgramDiscard::Idle && self.step >= self.next_discard_step && !self.sweeping;
        let zap_due = matches!(self.discard, ProgramDiscard::Read { zap_step, .. } if self.step >= zap_step);
        if discard_due || zap_due {
            runnable.push((5, 0));
        }
        let fork_due = match &self.fork {
            None => self.step >= self.next_fork_step && !self.sweeping,
            Some(fork) => self.step >= fork.next_read_step,
        };
        if fork_due {
            runnable.push((6, 0));
        }
        if self.step >= self.next_budget_step && !self.sweeping {
            runnable.push((7, 0));
        }
        runnable
    }

    fn app_runnable(&self, app: &App) -> bool {
        match &app.phase {
            AppPhase::Finished => false,
            AppPhase::Idle => !self.sweeping || app.sweep.is_some(),
            AppPhase::Blocked { .. } => app.woken,
            AppPhase::Faulting { .. } => self.fault_ready(app.fault.as_ref().expect("a self-paging thread's task")),
            AppPhase::Access { .. } => true,
        }
    }

    /// A fault asleep for room wakes when the room epoch moves on.
    fn fault_ready(&self, slot: &FaultSlot) -> bool {
        self.ready(slot.waiting, self.room_epoch != slot.room_epoch)
    }

    // ------------------------------------------------------------- application

    fn pick_access(&mut self, index: usize) -> Option<(usize, u64, bool)> {
        if let Some((place, page)) = self.apps[index].sweep {
            // The final sweep: read every page of the regions this thread covers.
            let threads = self.apps.len();
            let mut at = (place, page);
            loop {
                if at.0 >= REGION_PLACES {
                    self.apps[index].sweep = None;
                    return None;
                }
                let pages = self.regions[at.0].as_ref().map_or(0, |region| region.ptes.len() as u64);
                if at.0 % threads != index % threads || at.1 >= pages {
                    at = (at.0 + 1, 0);
                    continue;
                }
                self.apps[index].sweep = Some((at.0, at.1 + 1));
                return Some((at.0, at.1, false));
            }
        }
        let live: Vec<usize> = (0..REGION_PLACES).filter(|&place| self.regions[place].is_some()).collect();
        if live.is_empty() {
            return None;
        }
        let write = chance(&mut self.rng, self.scenario.write_share);
        let (place, page) = match self.scenario.access {
            Access::Sequential if chance(&mut self.rng, 0.9) => {
                let (place, page) = self.apps[index].cursor;
                match self.regions.get(place).and_then(Option::as_ref) {
                    Some(region) if page < region.ptes.len() as u64 => (place, page),
                    _ => {
                        let place = live[below(&mut self.rng, live.len() as u64) as usize];
                        (place, 0)
                    }
                }
            }
            access => {
                let place = live[below(&mut self.rng, live.len() as u64) as usize];
                let pages = self.regions[place].as_ref().expect("live").ptes.len() as u64;
                let page = if access == Access::Hot && chance(&mut self.rng, 0.8) {
                    below(&mut self.rng, (pages / 5).max(1))
                } else {
                    below(&mut self.rng, pages)
                };
                (place, page)
            }
        };
        self.apps[index].cursor = (place, page + 1);
        Some((place, page, write))
    }

    fn step_app(&mut self, index: usize) {
        let phase = std::mem::replace(&mut self.apps[index].phase, AppPhase::Finished);
        let next = match phase {
            AppPhase::Idle => match self.pick_access(index) {
                Some((place, page, write)) => {
                    self.regions[place].as_mut().expect("live").busy += 1;
                    self.apps[index].attempts = 0;
                    self.apps[index].started_step = self.step;
                    AppPhase::Access { place, page, write }
                }
                None if self.sweeping => AppPhase::Finished,
                None => AppPhase::Idle,
            },
            AppPhase::Blocked { place, page, write } => {
                self.apps[index].woken = false;
                AppPhase::Access { place, page, write }
            }
            AppPhase::Access { place, page, write } => self.access(index, place, page, write),
            AppPhase::Faulting { place, page, write } => {
                let mut slot = self.apps[index].fault.take().expect("a self-paging thread's task");
                let resolved = self.step_fault(&mut slot);
                self.apps[index].fault = Some(slot);
                if resolved {
                    AppPhase::Access { place, page, write }
                } else {
                    AppPhase::Faulting { place, page, write }
                }
            }
            AppPhase::Finished => AppPhase::Finished,
        };
        self.apps[index].phase = next;
    }

    /// Steps an access may take before it counts as a hang: more once tenants have write
    /// limits, whose waits are the limits at work.
    fn access_steps_max(&self) -> u64 {
        let holds = if self.coverage.write_limit_changes > 0 { self.apps.len() as u64 * WRITE_HOLD_STEPS } else { 0 };
        ACCESS_STEPS_MAX + holds
    }

    /// One try of an access: it completes, or faults.
    fn access(&mut self, index: usize, place: usize, page: u64, write: bool) -> AppPhase {
        let steps_max = self.access_steps_max();
        let app = &mut self.apps[index];
        app.attempts += 1;
        if app.attempts > ACCESS_ATTEMPTS_MAX || self.step - app.started_step > steps_max {
            let (attempts, steps) = (app.attempts, self.step - app.started_step);
            let state = self.core.page_state(self.regions[place].as_ref().expect("live").owner, page);
            if std::env::var_os("ZNSWAP_PAGER_TRACE").is_some() {
                eprintln!("{}", self.describe());
            }
            self.violation(format!(
                "an access to {place}:{page} (write {write}) never completes: {attempts} tries in {steps} steps, page {state:?}"
            ));
            self.regions[place].as_mut().expect("live").busy -= 1;
            return AppPhase::Finished;
        }
        let address = self.address(place, page);
        self.trace(address, 1, &|| format!("thread {index} access (write {write})"));
        let region = self.regions[place].as_mut().expect("live");
        let pte = region.ptes[page as usize];
        let fault_kind = if pte.poisoned {
            None
        } else if !pte.mapped {
            Some(FaultKind::Missing { write })
        } else if write && pte.write_protected && !self.scenario.wp_async {
            Some(FaultKind::WriteProtect)
        } else {
            None
        };
        if let Some(kind) = fault_kind {
            match kind {
                FaultKind::Missing { .. } => self.coverage.faults_missing += 1,
                _ => self.coverage.faults_write_protect += 1,
            }
            return match self.scenario.fault_mode {
                PagerFaultMode::SelfPaging => {
                    let slot = self.apps[index].fault.as_mut().expect("a self-paging thread's task");
                    slot.task.start(Fault::new(address, FaultKind::Sigbus { write }));
                    slot.waiting = Waiting::No;
                    AppPhase::Faulting { place, page, write }
                }
                PagerFaultMode::HandlerThreads(_) => {
                    self.events.push_back((address, kind));
                    self.apps[index].woken = false;
                    AppPhase::Blocked { place, page, write }
                }
            };
        }
        self.coverage.accesses += 1;
        let in_window = self.regions[place].as_ref().expect("live").pre[page as usize].is_some();
        self.coverage.window_accesses += in_window as u64;
        if pte.poisoned && pte.tainted {
            // A lost page's marker the program's discard is about to zap.
        } else if pte.poisoned {
            self.observe_lost(place, page);
        } else if write {
            let zero = chance(&mut self.rng, self.scenario.zero_write_share);
            self.version += 1;
            let version = if zero { 0 } else { self.version };
            let region = self.regions[place].as_mut().expect("live");
            region.ptes[page as usize].version = version;
            region.ptes[page as usize].from_device = false;
            // A write breaks the sharing with a fork's child (copy-on-write), and lifts
            // the protection (a protected page faults first, unless protection is
            // asynchronous: then the kernel lifts it, and the page scans as written).
            region.ptes[page as usize].shared = false;
            region.ptes[page as usize].write_protected = false;
            region.oracle[page as usize] = version;
            region.alt[page as usize] = None;
            if in_window {
                // Written over data from before the discard, the page is still that
                // data in part: the zap must take it. Written to a page mapped since,
                // it may survive the zap (written out before it).
                region.window_write[page as usize] = (!pte.tainted).then_some(version);
            }
            self.coverage.writes += 1;
        } else {
            let region = self.regions[place].as_mut().expect("live");
            let expected = region.oracle[page as usize];
            if region.acceptable(page as usize, pte.version) {
                region.seen(page as usize, pte.version);
                self.coverage.reads_verified += 1;
                self.coverage.swap_ins_verified += pte.from_device as u64;
            } else {
                self.corrupted += 1;
                self.violation(format!("page {place}:{page} read v{}, last written v{expected}", pte.version));
            }
        }
        self.regions[place].as_mut().expect("live").busy -= 1;
        AppPhase::Idle
    }

    /// A touch of a poisoned page: the device must really have lost its last version.
    fn observe_lost(&mut self, place: usize, page: u64) {
        let region = self.regions[place].as_ref().expect("live");
        if region.lost[page as usize] {
            return;
        }
        let expected = region.oracle[page as usize];
        // (After a discard, the write made before its zap may be what was lost.)
        let versions = [Some(expected), region.alt[page as usize]];
        let engine = self.core.engine().page_state(region.owner, page);
        let in_offline_zone = self.driver.device.zones.iter().any(|zone| {
            zone.offline
                && zone.data.iter().any(|stored| {
                    let stored = match self.sealer {
                        Some(_) => self.sealed_versions.get(stored).copied(),
                        None => Some(*stored),
                    };
                    versions.contains(&stored)
                })
        });
        let altered = self.altered.iter().any(|&(owner, lost, version)| {
            (owner == region.owner || Some(owner) == region.parent_owner)
                && lost == page
                && versions.contains(&Some(version))
        });
        if engine != Ok(EnginePage::Lost) || !(in_offline_zone || altered) {
            self.violation(format!(
                "page {place}:{page} poisoned (engine: {engine:?}), but v{expected} was not lost with an offline zone"
            ));
        }
        self.regions[place].as_mut().expect("live").lost[page as usize] = true;
        self.coverage.lost_observed += 1;
    }

    fn step_handler(&mut self, index: usize) {
        let mut slot = self.handlers[index].fault.take().expect("in place between steps");
        if slot.task.is_resolved() {
            if self.events.is_empty() {
                // Faults are read before other events: a REMOVE now, and the discard
                // applied in the same lock hold as its read.
                self.handlers[index].fault = Some(slot);
                self.read_program_discard();
                return;
            }
            let (address, kind) = self.events.pop_front().expect("runnable with an event");
            let stale = self.locate(address).is_none_or(|(place, page)| {
                let pte = self.regions[place].as_ref().expect("live").ptes[page as usize];
                pte.mapped && !(pte.write_protected && kind == FaultKind::WriteProtect)
            });
            self.coverage.stale_events += stale as u64;
            slot.task.start(Fault::new(address, kind));
            slot.waiting = Waiting::No;
        }
        self.step_fault(&mut slot);
        self.handlers[index].fault = Some(slot);
    }

    /// One step of a fault's task (the core's, as the live pager runs it); true when the
    /// fault is resolved.
    fn step_fault(&mut self, slot: &mut FaultSlot) -> bool {
        let next = slot.task.step(&mut Sim { world: self, read: &mut slot.read });
        slot.waiting = Waiting::No;
        match next {
            Next::Continue => false,
            Next::Pause(pause) => {
                self.coverage.fault_pauses += 1;
                slot.waiting = self.pause_steps(pause);
                false
            }
            Next::Wait(on) => {
                assert_eq!(on, WaitOn::Room, "a fault waits only for room");
                self.coverage.room_waits += 1;
                slot.waiting = self.wait();
                slot.room_epoch = self.room_epoch;
                false
            }
            Next::Resolved { .. } => true,
        }
    }

    // ----------------------------------------------------------------- evictor

    fn step_evictor(&mut self, index: usize) {
        let mut slot = self.evictors[index].take().expect("in place between steps");
        slot.woken = false;
        let mut did = EvictorDid::default();
        let next = slot.evictor.step(&mut Sim { world: self, read: &mut Vec::new() }, &mut did);
        self.coverage.rounds += did.rounds;
        self.coverage.evictor_discards += did.discards;
        slot.waiting = self.background_wait(next);
        self.evictors[index] = Some(slot);
    }

    /// `UFFDIO_WRITEPROTECT` of `start..end`: mapped entries get the bit; fails outside
    /// a registered region.
    fn write_protect(&mut self, start: u64, end: u64) -> bool {
        let Some((place, first)) = self.locate(start) else { return false };
        let region = self.regions[place].as_mut().expect("live");
        let last = (end - region.base) / PAGE_BYTES as u64;
        if last > region.ptes.len() as u64 {
            return false;
        }
        for pte in &mut region.ptes[first as usize..last as usize] {
            if pte.mapped {
                pte.write_protected = true;
            }
        }
        true
    }

    /// `PAGEMAP_SCAN` over `start..end`: reports the runs of pages not protected
    /// (written, or with nothing mapped: the kernel cannot vouch for those), changing
    /// nothing. Poison markers are not reported.
    fn scan_written(&mut self, start: u64, end: u64, found: &mut dyn FnMut(u64, u64)) {
        self.trace(start, (end - start) / PAGE_BYTES as u64, &|| format!("evictor scans {start:#x}..{end:#x}"));
        let Some((place, first)) = self.locate(start) else {
            self.violation(format!("a scan of {start:#x}..{end:#x}, outside any region"));
            return;
        };
        let region = self.regions[place].as_mut().expect("live");
        let (base, last) = (region.base, (end - region.base) / PAGE_BYTES as u64);
        if last > region.ptes.len() as u64 || end <= start {
            self.violation(format!("a scan of {start:#x}..{end:#x}, past its region"));
            return;
        }
        self.coverage.scans += 1;
        let mut run: Option<u64> = None;
        for page in first..=last {
            let written = page < last && {
                let pte = &region.ptes[page as usize];
                !pte.poisoned && (!pte.mapped || !pte.write_protected)
            };
            match (written, run) {
                (true, None) => run = Some(page),
                (false, Some(from)) => {
                    self.coverage.scanned_written += page - from;
                    found(base + from * PAGE_BYTES as u64, base + page * PAGE_BYTES as u64);
                    run = None;
                }
                _ => {}
            }
        }
    }

    /// The digest of a parked page's bytes, as the evictor takes it.
    fn shadow_digest(&mut self, shadow: u64) -> Digest {
        self.coverage.digests += 1;
        match self.shadow_pte(shadow, "a digest of a shadow page") {
            Some((_, _, pte)) if pte.mapped => digest_of(pte.version),
            _ => {
                self.violation(format!("a digest of the empty shadow page {shadow:#x}"));
                0
            }
        }
    }

    /// Whether the victim at `address` reads all zeroes, as the evictor would read it.
    fn victim_is_zero(&mut self, address: u64) -> bool {
        self.trace(address, 1, &|| "evictor zero check".to_string());
        match self.locate(address) {
            Some((place, page)) => {
                let region = self.regions[place].as_ref().expect("live");
                let pte = region.ptes[page as usize];
                let discarded = region.zapped[page as usize]
                    || region.pre[page as usize].is_some()
                    || self.core.page_state(region.owner, page) == Some(PageState::Removed);
                if !pte.mapped && !discarded {
                    // The shell would fault inside the evictor here.
                    self.violation(format!("the evictor read the unmapped victim {place}:{page}"));
                }
                // (A victim the program's discard zapped faults in the evictor, and reads
                // zero once a handler maps a zero page: modelled as read at once.)
                !pte.mapped || pte.version == 0
            }
            None => {
                self.violation(format!("the evictor read {address:#x}, outside any region"));
                false
            }
        }
    }

    /// `MADV_DONTNEED` of a discard's ranges: their entries go.
    /// A discard's batch: each region's ranges zapped now, or left to its late agent
    /// (`PagerFaults::late_discards`), or not asked while that agent owes an answer.
    fn discard_batch(&mut self, batch: &mut DiscardBatch) {
        if self.scenario.faults.late_discards == 0.0 {
            return self.discard_ranges(batch.ranges());
        }
        let ranges = batch.ranges().to_vec();
        let owner_of = |world: &World, range: &AddressRange| {
            world.locate(range.start as u64).map(|(place, _)| world.regions[place].as_ref().expect("live").owner)
        };
        let mut next = 0;
        while next < ranges.len() {
            let owner = owner_of(self, &ranges[next]);
            let same = ranges[next..].iter().take_while(|range| owner_of(self, range) == owner).count();
            let group = next..next + same;
            next += same;
            let Some(owner) = owner else {
                self.discard_ranges(&ranges[group]);
                continue;
            };
            if self.late.iter().any(|late| late.owner == owner) {
                self.coverage.discards_unsent += 1;
                for range in group {
                    batch.delay(range, DropDelay::Unsent);
                }
                continue;
            }
            if !chance(&mut self.late_rng, self.scenario.faults.late_discards) {
                self.discard_ranges(&ranges[group]);
                continue;
            }
            let zap_at = self.step + 1 + below(&mut self.late_rng, LATE_ZAP_STEPS);
            let answer_at = zap_at + below(&mut self.late_rng, LATE_ANSWER_STEPS);
            self.late.push(LateAgent {
                owner,
                ranges: ranges[group.clone()].to_vec(),
                zap_at,
                answer_at,
                zapped: false,
            });
            self.coverage.discards_late += 1;
            for range in group {
                batch.delay(range, DropDelay::Late);
            }
        }
    }

    /// Late agents whose time has come zap their ranges (outside any pager lock: the
    /// process's own thread).
    fn late_agents_zap(&mut self) {
        for index in 0..self.late.len() {
            if !self.late[index].zapped && self.step >= self.late[index].zap_at {
                self.late[index].zapped = true;
                let ranges = std::mem::take(&mut self.late[index].ranges);
                self.discard_ranges(&ranges);
            }
        }
    }

    fn discard_ranges(&mut self, ranges: &[AddressRange]) {
        for range in ranges {
            self.trace(range.start as u64, (range.len / PAGE_BYTES) as u64, &|| format!("discard {range:?}"));
            for index in 0..(range.len / PAGE_BYTES) as u64 {
                let address = range.start as u64 + index * PAGE_BYTES as u64;
                match (self.locate(address), self.locate_shadow(address)) {
                    (Some((place, page)), _) => {
                        self.regions[place].as_mut().expect("live").ptes[page as usize] = Pte::default();
                    }
                    (None, Some((place, page))) => {
                        // A shadow page that holds the page's only copy never goes with a
                        // discard (a stale copy's discard must not outlive the copy).
                        let region = self.regions[place].as_ref().expect("live");
                        let live = match self.core.page_state(region.owner, page) {
                            Some(PageState::Parked | PageState::WritingParked) => true,
                            // Moved already (nothing here, the page there), not a stale
                            // copy still awaiting this discard with the page here.
                            Some(PageState::Parking { .. }) => {
                                region.shadow[page as usize].mapped && !region.ptes[page as usize].mapped
                            }
                            _ => false,
                        };
                        if live {
                            self.violation(format!(
                                "a discard of the shadow page of {place}:{page}, which holds its data ({:?})",
                                self.core.page_state(region.owner, page)
                            ));
                        }
                        self.regions[place].as_mut().expect("live").shadow[page as usize] = Pte::default();
                    }
                    (None, None) => self.violation(format!("a discard of {address:#x}, outside any region")),
                }
            }
        }
    }

    /// Maps a zero page at `address` only where nothing is (a fault's `ZeroFill`).
    fn zero_fill(&mut self, address: u64) -> bool {
        let landed = self.locate(address).is_some_and(|(place, page)| {
            let pte = self.regions[place].as_ref().expect("live").ptes[page as usize];
            !pte.mapped && !pte.poisoned
        });
        if landed {
            self.coverage.zero_fills_landed += 1;
            self.install(address, 0, false, false, "ZeroFill");
            self.wake(address, 1);
        } else {
            self.coverage.zero_fills_refused += 1;
        }
        landed
    }

    // --------------------------------------------------------------------- I/O

    fn step_io(&mut self, index: usize) {
        let mut slot = self.ios[index].take().expect("in place between steps");
        slot.woken = false;
        let next = slot.io.step(&mut Sim { world: self, read: &mut Vec::new() });
        slot.waiting = self.background_wait(next);
        self.ios[index] = Some(slot);
    }

    /// How a background actor (the evictor, the I/O thread) waits after a step, as its
    /// thread's loop (`Live::carry_out`) would.
    fn background_wait(&mut self, next: Next) -> Waiting {
        match next {
            Next::Continue => Waiting::No,
            Next::Pause(pause) => self.pause_steps(pause),
            Next::Wait(_) => self.wait(),
            Next::Resolved { .. } => panic!("only a fault is resolved"),
        }
    }

    // ------------------------------------------------------- program memory

    /// The program discards a range (`MADV_DONTNEED`): the kernel queues a REMOVE event
    /// and blocks the madvising thread until a handler reads it; the zap comes after.
    fn step_program_discard(&mut self) {
        match self.discard {
            ProgramDiscard::Idle => {
                let live: Vec<usize> = (0..REGION_PLACES).filter(|&place| self.regions[place].is_some()).collect();
                if live.is_empty() {
                    self.next_discard_step = self.step + self.scenario.program_discard_steps;
                    return;
                }
                let place = live[below(&mut self.rng, live.len() as u64) as usize];
                let region = self.regions[place].as_mut().expect("live");
                let pages = region.ptes.len() as u64;
                // A whole region now and then (an allocator's purge of a free span);
                // mostly a run of pages.
                let (first, last) = if chance(&mut self.rng, 0.1) {
                    (0, pages)
                } else {
                    let first = below(&mut self.rng, pages);
                    (first, (first + 1 + below(&mut self.rng, 32)).min(pages))
                };
                // (Always, with asynchronous write protection: the core requires it.)
                if chance(&mut self.rng, 0.5) || self.scenario.wp_async {
                    // Through the pager (`znswap run`'s madvise wrapper): the core told
                    // and the range zapped in one hold of the state lock.
                    self.coverage.program_discards_under_lock += 1;
                    self.count_discarded(place, first, last);
                    let (start, end) = (self.address(place, first), self.address(place, last - 1) + PAGE_BYTES as u64);
                    self.trace(start, last - first, &|| format!("discard {first}..{last} under the lock"));
                    self.core.discard_range(start, end, self.now_ns, true);
                    self.zap(place, first, last, true);
                    self.after_lock_step();
                    let interval = self.scenario.program_discard_steps;
                    self.next_discard_step = self.step + interval / 2 + below(&mut self.rng, interval.max(1));
                    return;
                }
                // (It may not be freed under the discard: the program is using it.)
                region.busy += 1;
                self.discard = ProgramDiscard::Queued { place, first, last };
            }
            ProgramDiscard::Read { place, first, last, .. } => {
                self.zap(place, first, last, false);
                self.regions[place].as_mut().expect("busy regions stay").busy -= 1;
                self.discard = ProgramDiscard::Idle;
                let interval = self.scenario.program_discard_steps;
                self.next_discard_step = self.step + interval / 2 + below(&mut self.rng, interval.max(1));
            }
            ProgramDiscard::Queued { .. } => unreachable!("a queued discard waits for a handler"),
        }
    }

    /// The kernel's zap of the program's discard: whatever is mapped in the range goes,
    /// poison markers too, and the pages read zero.
    fn zap(&mut self, place: usize, first: u64, last: u64, under_lock: bool) {
        let owner = self.regions[place].as_ref().expect("busy regions stay").owner;
        for page in first..last {
            let state = self.core.page_state(owner, page);
            let region = self.regions[place].as_mut().expect("busy regions stay");
            let index = page as usize;
            let pte = region.ptes[index];
            if pte.mapped || pte.poisoned {
                let mapped_for_core = matches!(
                    state,
                    Some(
                        PageState::Resident
                            | PageState::Referenced
                            | PageState::Evicting { .. }
                            | PageState::Writing
                            | PageState::Poisoned
                    )
                );
                if mapped_for_core {
                    region.zapped[index] = true;
                    self.coverage.zapped_under_core += 1;
                    if under_lock {
                        self.violation(format!("page {place}:{page} is {state:?} after the discard told the core"));
                    }
                }
                let region = self.regions[place].as_mut().expect("busy regions stay");
                region.ptes[index] = Pte::default();
            }
            let region = self.regions[place].as_mut().expect("busy regions stay");
            region.lost[index] = false;
            region.oracle[index] = 0;
            region.alt[index] = region.window_write[index].take();
            region.pre[index] = None;
        }
        let address = self.address(place, first);
        self.trace(address, last - first, &|| format!("the program's zap of pages {first}..{last}"));
    }

    /// Counts the pages of a program's discard by their pager state.
    fn count_discarded(&mut self, place: usize, first: u64, last: u64) {
        let owner = self.regions[place].as_ref().expect("busy regions stay").owner;
        for page in first..last {
            match self.core.page_state(owner, page).expect("a live page") {
                PageState::Unmapped => self.coverage.discarded_unmapped += 1,
                PageState::Resident | PageState::Referenced => self.coverage.discarded_resident += 1,
                PageState::Evicting { .. } => self.coverage.discarded_evicting += 1,
                PageState::Writing => self.coverage.discarded_writing += 1,
                PageState::Dropping => self.coverage.discarded_dropping += 1,
                PageState::Poisoned => self.coverage.discarded_poisoned += 1,
                PageState::Removed => self.coverage.discarded_removed += 1,
                PageState::Parking { .. } | PageState::ParkingRemoved => {
                    self.coverage.discarded_parked += 1;
                    self.coverage.discarded_parking += 1;
                }
                PageState::Parked | PageState::WritingParked => self.coverage.discarded_parked += 1,
            }
        }
    }

    /// A handler reads the REMOVE event and, in the same lock hold, tells the core.
    fn read_program_discard(&mut self) {
        let ProgramDiscard::Queued { place, first, last } = self.discard else {
            unreachable!("a handler runs for a queued discard")
        };
        self.coverage.program_discards += 1;
        self.count_discarded(place, first, last);
        for page in first..last {
            let region = self.regions[place].as_mut().expect("busy regions stay");
            let index = page as usize;
            region.pre[index] = Some(region.oracle[index]);
            region.window_write[index] = None;
            let pte = &mut region.ptes[index];
            if pte.mapped || pte.poisoned {
                pte.tainted = true;
            }
        }
        let (start, end) = (self.address(place, first), self.address(place, last - 1) + PAGE_BYTES as u64);
        self.trace(start, last - first, &|| format!("REMOVE {first}..{last} read"));
        self.core.discard_range(start, end, self.now_ns, false);
        self.after_lock_step();
        // The madvising thread runs on at once, mostly; now and then it is preempted
        // for long enough that the pager evicts and swaps pages of the range meanwhile.
        let delay = if chance(&mut self.rng, 0.2) { below(&mut self.rng, 20_000) } else { below(&mut self.rng, 50) };
        self.discard = ProgramDiscard::Read { place, first, last, zap_step: self.step + delay };
    }

    /// The program forks: the child's snapshot is recorded, then read now and then while
    /// the parent runs on, until the hold is released.
    fn step_fork(&mut self) {
        let Some(mut fork) = self.fork.take() else {
            let hold = self.core.fork_hold();
            self.after_lock_step();
            self.coverage.forks += 1;
            let mut pages = Vec::new();
            let mut problems = Vec::new();
            for place in 0..REGION_PLACES {
                let Some(region) = self.regions[place].as_mut() else { continue };
                // A daemon's snapshot of the region for a served child (`child_pages`) names
                // what `child_page` names for each page the child may miss.
                let snapshot = self.core.child_pages(region.owner);
                for (page, pte) in region.ptes.iter().enumerate() {
                    if pte.mapped || pte.poisoned || region.lost[page] {
                        continue;
                    }
                    let at = region.base + page as u64 * PAGE_BYTES as u64;
                    let listed = snapshot.binary_search_by_key(&(page as u64), |&(page, _)| page).ok();
                    let listed = listed.map(|at| snapshot[at].1);
                    let wanted = match self.core.child_page(at) {
                        child @ (ChildPage::Slot { .. } | ChildPage::Lost) => Some(child),
                        ChildPage::Zero => None,
                        ChildPage::Shadow { .. } | ChildPage::NotOurs => listed,
                    };
                    if listed != wanted {
                        problems.push(format!("the snapshot names {listed:?} for {place}:{page}, not {wanted:?}"));
                    }
                }
                // The parent's private pages are shared with the child now.
                for pte in region.ptes.iter_mut().chain(region.shadow.iter_mut()) {
                    pte.shared |= pte.mapped;
                }
                for (page, pte) in region.ptes.iter().enumerate() {
                    // The child gets a copy of what is mapped (a poison marker too).
                    if pte.mapped || pte.poisoned || region.lost[page] {
                        continue;
                    }
                    let at = region.base + page as u64 * PAGE_BYTES as u64;
                    // What a read of the parent's would accept now.
                    let allowed =
                        [Some(region.oracle[page]), region.alt[page], region.pre[page], region.pre[page].map(|_| 0)];
                    let child = self.core.child_page(at);
                    let shadow = match child {
                        ChildPage::Shadow { address } => {
                            let shadow = region.shadow[page];
                            if address != region.base + SHADOW_OFFSET + page as u64 * PAGE_BYTES as u64 {
                                problems.push(format!("the child's page {place}:{page} named {address:#x}"));
                            } else if !shadow.mapped {
                                problems.push(format!("the child's page {place}:{page} is parked at nothing"));
                            }
                            Some(shadow.version)
                        }
                        _ => None,
                    };
                    pages.push((place, page as u64, child, allowed, shadow));
                }
            }
            for problem in problems {
                self.violation(problem);
            }
            let served = if chance(&mut self.rng, 0.5) { self.add_served_child() } else { None };
            let release_step = self.step + 2_000 + below(&mut self.rng, 30_000);
            let next_read_step = self.step + 1 + below(&mut self.rng, 40);
            self.fork = Some(ForkModel { hold, pages, served, release_step, next_read_step });
            return;
        };
        // (A served child is swept with the rest: its hold stays to the end.)
        if self.step >= fork.release_step && !(self.sweeping && fork.served.is_some()) {
            // A served child exits first: its region goes, then the slots it read may.
            if let Some(place) = fork.served.take() {
                // (Removed as churn removes: unused, and no pager thread reading it.)
                let readers = self.mappings_readers;
                match self.regions[place].as_ref().filter(|region| region.parent_owner.is_some()) {
                    Some(region) if region.busy > 0 || readers > 0 => {
                        fork.served = Some(place);
                        fork.release_step = self.step + 100;
                        self.fork = Some(fork);
                        return;
                    }
                    Some(_) => {
                        let region = self.regions[place].take().expect("live");
                        // (Its process gone, its agent's late answer never comes.)
                        self.late.retain(|late| late.owner != region.owner);
                        self.core.region_remove(region.owner, self.now_ns);
                        self.after_lock_step();
                    }
                    None => {}
                }
            }
            self.core.fork_release(fork.hold, self.now_ns);
            self.after_lock_step();
            let interval = self.scenario.fork_steps;
            self.next_fork_step = self.step + interval / 2 + below(&mut self.rng, interval.max(1));
            return;
        }
        fork.next_read_step = self.step + 1 + below(&mut self.rng, 40);
        if !fork.pages.is_empty() {
            let (place, page, child, allowed, shadow) =
                fork.pages[below(&mut self.rng, fork.pages.len() as u64) as usize];
            let version = match child {
                ChildPage::Shadow { .. } => {
                    self.coverage.child_reads_shadow += 1;
                    shadow
                }
                ChildPage::Slot { zone, slot, sealed } => {
                    let model = &self.driver.device.zones[zone as usize];
                    if model.offline {
                        // The child's read fails: it poisons the page, as the parent would.
                        None
                    } else if slot >= model.write_pointer {
                        self.violation(format!(
                            "the child's page {place}:{page} at zone {zone} slot {slot} was reset under the hold"
                        ));
                        None
                    } else {
                        self.coverage.child_reads_slot += 1;
                        let stored = self.driver.device.version(zone, slot);
                        match sealed {
                            // A page that fails to open is lost to the child too.
                            Some(sealed) => self.open(&sealed, stored),
                            None => Some(stored),
                        }
                    }
                }
                ChildPage::Zero => {
                    self.coverage.child_reads_zero += 1;
                    Some(0)
                }
                ChildPage::Lost => {
                    self.coverage.child_reads_lost += 1;
                    None
                }
                ChildPage::NotOurs => {
                    self.violation(format!("the child's page {place}:{page} is not the pager's"));
                    None
                }
            };
            if let Some(version) = version {
                if !allowed.contains(&Some(version)) {
                    self.corrupted += 1;
                    self.violation(format!(
                        "the child read v{version} for {place}:{page} ({child:?}), which held {allowed:?} at the fork"
                    ));
                }
            }
        }
        self.fork = Some(fork);
    }

    /// The fork's child is served by this pager too (a daemon's tenant that forks): a
    /// region of its own in a free place, whose mapped pages are copies of the parent
    /// region's (written or not, never write-protected: the child's registration is
    /// new) and whose pages then on the device it reads from the parent's slots when it
    /// faults on them. Only of a region with no discard under way and no parking (a
    /// daemon parks nothing); `None` if there is none, or no free place.
    fn add_served_child(&mut self) -> Option<usize> {
        if self.scenario.park_pages > 0 {
            return None;
        }
        let free = (0..REGION_PLACES).find(|&place| self.regions[place].is_none())?;
        let discarding = match self.discard {
            ProgramDiscard::Idle => None,
            ProgramDiscard::Queued { place, .. } | ProgramDiscard::Read { place, .. } => Some(place),
        };
        let quiet = |region: &ModelRegion| {
            region.pre.iter().all(Option::is_none)
                && region.alt.iter().all(Option::is_none)
                && !region.zapped.iter().any(|&zapped| zapped)
                && !region.ptes.iter().any(|pte| pte.tainted)
                && region.parent_owner.is_none()
        };
        let parents: Vec<usize> = (0..REGION_PLACES)
            .filter(|&place| Some(place) != discarding && self.regions[place].as_ref().is_some_and(quiet))
            .collect();
        if parents.is_empty() {
            return None;
        }
        let parent = self.regions[parents[below(&mut self.rng, parents.len() as u64) as usize]].as_ref().expect("live");
        let inherited = self.core.child_pages(parent.owner);
        let poisoned = self.core.poisoned_pages(parent.owner);
        let resident: Vec<u64> =
            (0..parent.ptes.len()).filter(|&page| parent.ptes[page].mapped).map(|page| page as u64).collect();
        let ptes: Vec<Pte> = parent
            .ptes
            .iter()
            .map(|pte| Pte {
                mapped: pte.mapped,
                write_protected: false,
                poisoned: pte.poisoned,
                version: pte.version,
                from_device: false,
                tainted: false,
                shared: false,
            })
            .collect();
        let oracle: Vec<u64> = (0..ptes.len())
            .map(|page| if parent.ptes[page].mapped { parent.ptes[page].version } else { parent.oracle[page] })
            .collect();
        // A marker the child inherits: the loss was the parent's to check.
        let lost: Vec<bool> = ptes.iter().map(|pte| pte.poisoned).collect();
        let (pages, parent_owner) = (ptes.len(), parent.owner);
        let base = ((free as u64) + 1) << PLACE_SHIFT;
        let tenant = below(&mut self.rng, self.scenario.tenants as u64) as u32;
        let added =
            self.core.region_add_inherited(base, pages as u64, tenant, &resident, &poisoned, &inherited, self.now_ns);
        self.after_lock_step();
        let Ok(owner) = added else {
            self.coverage.regions_refused += 1;
            return None;
        };
        self.coverage.served_children += 1;
        self.regions[free] = Some(ModelRegion {
            owner,
            base,
            ptes,
            oracle,
            lost,
            busy: 0,
            alt: vec![None; pages],
            pre: vec![None; pages],
            window_write: vec![None; pages],
            zapped: vec![false; pages],
            shadow: vec![Pte::default(); pages],
            parent_owner: Some(parent_owner),
        });
        Some(free)
    }

    // ------------------------------------------------------------------ regions

    /// A program frees a region it no longer uses, and maps another (perhaps at the same
    /// addresses, as `mmap` may).
    fn step_churn(&mut self) {
        let churn = self.scenario.region_churn_steps;
        self.next_churn_step = self.step + churn / 2 + below(&mut self.rng, churn.max(1));
        let idle: Vec<usize> = (0..REGION_PLACES)
            .filter(|&place| self.regions[place].as_ref().is_some_and(|region| region.busy == 0))
            .collect();
        let live = self.regions.iter().filter(|region| region.is_some()).count();
        let mut freed = None;
        // The next region is about the size of the one freed: the working set stays
        // about as the scenario sized it against the device.
        let mut pages = 32 + below(&mut self.rng, 600);
        if !idle.is_empty() && live > 1 || live == REGION_PLACES {
            if let Some(&place) = idle.get(below(&mut self.rng, idle.len().max(1) as u64) as usize) {
                let region = self.regions[place].take().expect("live");
                pages = (region.ptes.len() as u64 / 2 + below(&mut self.rng, region.ptes.len() as u64)).max(16);
                self.late.retain(|late| late.owner != region.owner);
                self.core.region_remove(region.owner, self.now_ns);
                self.after_lock_step();
                self.coverage.regions_freed += 1;
                freed = Some(place);
            }
        }
        self.add_region(pages, freed);
    }

    /// The budget moves (as `znswap run` moves it with the program's unpaged memory):
    /// anywhere from the smallest the core takes up to the scenario's.
    fn step_budget(&mut self) {
        assert!(!self.locked, "the budget changes under the state lock, taken here");
        let steps = self.scenario.budget_change_steps;
        self.next_budget_step = self.step + steps / 2 + below(&mut self.rng, steps.max(1));
        let min = self.core.budget_pages_min();
        let budget = min + below(&mut self.rng, self.scenario.budget_pages.saturating_sub(min) + 1);
        self.core.set_budget(budget).expect("a budget within the core's bounds");
        // With two tenants, each may be held to a budget of its own within it (as the
        // daemon holds each program to what it granted), or to none.
        if self.scenario.tenants > 1 {
            for tenant in 0..self.scenario.tenants {
                let own = match below(&mut self.rng, 3) {
                    0 => None,
                    _ => Some(min + below(&mut self.rng, budget.saturating_sub(min) + 1)),
                };
                self.core.set_tenant_budget(tenant, own).expect("a tenant budget within the core's bounds");
                self.coverage.tenant_budget_changes += 1;
                // A share of the device's writes (the daemon's --write-limit): from one
                // that holds a tenant back most of the time to one that never does. (At
                // 4 MiB/s a zone's GC moves charged at once hold a tenant back for a
                // fraction of the simulated second-odd an access may take.)
                if below(&mut self.rng, 2) == 0 {
                    let rate = match below(&mut self.rng, 4) {
                        0 => None,
                        1 => Some(4 << 20),
                        2 => Some(16 << 20),
                        _ => Some(256 << 20),
                    };
                    self.core.set_tenant_write_limit(tenant, rate, self.now_ns).expect("a tenant of the core");
                    self.coverage.write_limit_changes += 1;
                }
                // A swap limit (the daemon's --swap-limit), from a few batches of slots to
                // none: at it, the tenant's faults go past its budget.
                if below(&mut self.rng, 4) == 0 {
                    let slots = match below(&mut self.rng, 3) {
                        0 => None,
                        _ => Some(16 + below(&mut self.rng, 512)),
                    };
                    self.core.set_tenant_swap_limit(tenant, slots).expect("a tenant of the core");
                    self.coverage.swap_limit_changes += 1;
                }
            }
        }
        self.after_lock_step();
        self.coverage.budget_changes += 1;
    }

    // --------------------------------------------------------------- the end

    /// Stops new random accesses; each application thread then reads every page of its
    /// share of the regions once.
    pub fn start_sweep(&mut self) {
        self.sweeping = true;
        // Write limits go: the sweep reads every page back, and a tenant held to a few
        // MiB/s of a simulated device whose GC moves its pages over and over (charged to
        // it) would take simulated minutes to swap its way through.
        if self.coverage.write_limit_changes > 0 {
            for tenant in 0..self.scenario.tenants {
                self.core.set_tenant_write_limit(tenant, None, self.now_ns).expect("a tenant of the core");
            }
            self.after_lock_step();
        }
        // A served child's region reads its parent's held slots: it is swept too, and
        // the hold stays.
        if let Some(fork) = self.fork.take_if(|fork| fork.served.is_none()) {
            self.core.fork_release(fork.hold, self.now_ns);
            self.after_lock_step();
        }
        for app in &mut self.apps {
            app.sweep = Some((0, 0));
        }
    }

    pub fn sweep_done(&self) -> bool {
        self.apps.iter().all(|app| matches!(app.phase, AppPhase::Finished))
    }

    /// The page table against the core's page states, and the core's and the engine's
    /// own invariants. Panics are caught by the caller.
    pub fn check(&mut self) {
        self.core.check_invariants();
        self.core.engine().check_invariants();
        for place in 0..REGION_PLACES {
            let Some(region) = self.regions[place].as_ref() else { continue };
            let mut problems = Vec::new();
            for (page, pte) in region.ptes.iter().enumerate() {
                let state = self.core.page_state(region.owner, page as u64).expect("a live region's page");
                let engine = self.core.engine().page_state(region.owner, page as u64).expect("registered");
                let writable = pte.mapped && !pte.write_protected;
                let in_window = region.pre[page].is_some();
                let zapped = region.zapped[page] && !pte.mapped && !pte.poisoned;
                let agrees = in_window
                    || zapped
                    || match state {
                        PageState::Unmapped | PageState::Removed => !pte.mapped && !pte.poisoned,
                        PageState::Resident | PageState::Referenced | PageState::Evicting { .. } => pte.mapped,
                        // Appendix A: a page on its way out is writable only once a write has
                        // told the engine (which then drops the slot it writes).
                        PageState::Writing => {
                            pte.mapped
                                && (!writable || matches!(engine, EnginePage::SwapOutInFlight { dirtied: true, .. }))
                        }
                        // Never writable: a write there would be discarded.
                        PageState::Dropping => !writable,
                        PageState::Poisoned => pte.poisoned,
                        // At the shadow, nothing here.
                        PageState::Parked | PageState::WritingParked => {
                            !pte.mapped && !pte.poisoned && region.shadow[page].mapped
                        }
                        // Here or at the shadow, as far as the move went.
                        PageState::Parking { .. } => pte.mapped || region.shadow[page].mapped,
                        // Discarded, its move perhaps under way: after the zap nothing is
                        // here (its faults wait for the settling).
                        PageState::ParkingRemoved => !pte.mapped && !pte.poisoned,
                    };
                // A clean page whose slot is its swap cache must fault on its first write
                // (with asynchronous write protection no write faults: its digest decides
                // when it is parked, and the oracle sees any page read back wrong).
                let cache_guarded =
                    self.scenario.wp_async || !(writable && matches!(engine, EnginePage::SwapCached { .. }));
                if !agrees || !cache_guarded {
                    problems.push(format!("page {place}:{page} is {state:?} / {engine:?} with {pte:?}"));
                }
                if pte.mapped && !region.acceptable(page, pte.version) && !region.lost[page] {
                    problems.push(format!(
                        "page {place}:{page} holds v{}, last written v{}",
                        pte.version, region.oracle[page]
                    ));
                }
                let shadow = region.shadow[page];
                if matches!(state, PageState::Parked | PageState::WritingParked)
                    && !region.acceptable(page, shadow.version)
                    && !region.lost[page]
                {
                    problems.push(format!(
                        "page {place}:{page} is parked as v{}, last written v{}",
                        shadow.version, region.oracle[page]
                    ));
                }
            }
            for problem in problems.into_iter().take(4) {
                self.violation(problem);
            }
        }
    }

    /// Threads asleep in the kernel far longer than any access takes: nothing will wake
    /// them (a hang). Each is reported once, and stops.
    pub fn check_hangs(&mut self) {
        for index in 0..self.apps.len() {
            let app = &self.apps[index];
            if let AppPhase::Blocked { place, page, write } = app.phase {
                if self.step - app.started_step > self.access_steps_max() {
                    if std::env::var_os("ZNSWAP_PAGER_TRACE").is_some() {
                        eprintln!("{}", self.describe());
                    }
                    self.violation(format!("thread {index} asleep on {place}:{page} (write {write}) and never woken"));
                    self.regions[place].as_mut().expect("busy regions stay").busy -= 1;
                    self.apps[index].phase = AppPhase::Finished;
                }
            }
        }
    }

    /// What every actor is doing, for a hang's report.
    pub fn describe(&self) -> String {
        let fault =
            |slot: &FaultSlot| format!("{} {:?} room epoch {}", slot.task.describe(), slot.waiting, slot.room_epoch);
        let mut lines = vec![format!(
            "step {} resident {} budget {} slack {} evictor work {:?} events {} room epoch {} mappings readers {}",
            self.step,
            self.core.stats().resident_pages,
            self.scenario.budget_pages,
            self.scenario.slack_pages,
            self.core.evictor_work(),
            self.events.len(),
            self.room_epoch,
            self.mappings_readers
        )];
        lines.push(format!("core {}", self.core.describe()));
        lines.push(format!("core {:?}", self.core.stats()));
        lines.push(format!("engine {:?}", self.core.engine().swap_inf()));
        lines.push(format!("engine stats {:?}", self.core.engine().stats()));
        for handler in &self.handlers {
            let slot = handler.fault.as_deref().expect("in place between steps");
            lines.push(format!("handler: {}", if slot.task.is_resolved() { "idle".to_string() } else { fault(slot) }));
        }
        for app in &self.apps {
            if let (AppPhase::Faulting { .. }, Some(slot)) = (&app.phase, app.fault.as_deref()) {
                lines.push(format!("app: {}", fault(slot)));
            }
        }
        for evictor in self.evictors.iter().flatten() {
            lines.push(format!(
                "evictor: {} {:?} woken {}",
                evictor.evictor.describe(),
                evictor.waiting,
                evictor.woken
            ));
        }
        for io in self.ios.iter().flatten() {
            lines.push(format!("io: {} {:?} woken {}", io.io.describe(), io.waiting, io.woken));
        }
        lines.join("\n")
    }

    /// Threads still asleep in the kernel, or faults still waiting, once all else is
    /// done: hangs.
    pub fn stuck(&self) -> Vec<String> {
        let mut stuck = Vec::new();
        for (index, app) in self.apps.iter().enumerate() {
            match &app.phase {
                AppPhase::Finished => {}
                AppPhase::Blocked { place, page, .. } => stuck.push(format!("thread {index} asleep on {place}:{page}")),
                _ => stuck.push(format!("thread {index} not finished")),
            }
        }
        stuck
    }
}

/// The shell the core's actors step against in the simulation: the world stands for
/// the locks (one actor steps at a time; the lock flags check the actors' discipline),
/// the kernel (the page table model) and the device (the model device with its errors).
struct Sim<'a> {
    world: &'a mut World,
    /// The versions the fault's last device read brought: its read buffer.
    read: &'a mut Vec<u64>,
}

impl Shell for Sim<'_> {
    fn now(&mut self) -> u64 {
        self.world.now_ns
    }

    fn lock(&mut self) {
        assert!(!self.world.locked, "the state lock taken while held");
        self.world.locked = true;
    }

    fn unlock(&mut self) {
        self.world.unlock();
    }

    fn core(&mut self) -> &mut PagerCore {
        assert!(self.world.locked, "the core reached without the state lock");
        &mut self.world.core
    }

    fn apply(&mut self, actions: &mut Actions) {
        assert!(self.world.locked, "actions carried out without the state lock");
        self.world.apply(actions, self.read);
    }

    fn mappings_read(&mut self) {
        assert!(!self.world.locked, "`mappings` taken under the state lock (lock order)");
        self.world.mappings_readers += 1;
    }

    fn mappings_release(&mut self) {
        self.world.mappings_readers =
            self.world.mappings_readers.checked_sub(1).expect("`mappings` released but not held");
    }

    fn discard_pages(&mut self, batch: &mut DiscardBatch) {
        assert!(self.world.mappings_readers > 0, "a discard without `mappings`");
        self.world.discard_batch(batch);
    }
}

impl EvictorShell for Sim<'_> {
    fn park(&mut self, address: u64, shadow: u64) -> ParkOutcome {
        self.world.park(address, shadow)
    }

    fn late_answered(&mut self, owner: u32) -> bool {
        assert!(self.world.locked, "a late answer taken without the state lock");
        let Some(index) = self.world.late.iter().position(|late| late.owner == owner) else {
            self.world.violation(format!("a late answer asked of region {owner}, whose agent owes none"));
            return true;
        };
        let late = &self.world.late[index];
        if !late.zapped || self.world.step < late.answer_at {
            return false;
        }
        self.world.late.swap_remove(index);
        self.world.coverage.late_answers += 1;
        true
    }

    fn write_protect(&mut self, start: u64, end: u64) -> bool {
        self.world
            .trace(start, (end - start) / PAGE_BYTES as u64, &|| format!("evictor protects {start:#x}..{end:#x}"));
        self.world.write_protect(start, end)
    }

    fn page_is_zero(&mut self, address: u64) -> bool {
        assert!(!self.world.locked, "region memory read under the state lock");
        self.world.victim_is_zero(address)
    }

    fn scan_written(&mut self, start: u64, end: u64, found: &mut dyn FnMut(u64, u64)) {
        assert!(!self.world.locked, "a scan under the state lock");
        self.world.scan_written(start, end, found)
    }

    fn digest(&mut self, address: u64) -> Digest {
        assert!(!self.world.locked, "region memory read under the state lock");
        self.world.shadow_digest(address)
    }
}

/// A page's digest in the model: its content is its version (never 0: 0 is no digest).
fn digest_of(version: u64) -> Digest {
    version as Digest | 1 << 127
}

impl FaultShell for Sim<'_> {
    fn read(
        &mut self,
        zone: u32,
        slot: u32,
        pages: u32,
        into: ReadInto,
        sealed: Option<&Sealed>,
    ) -> Result<(), IoError> {
        assert!(!self.world.locked, "a device read under the state lock");
        let (mut result, mut versions) = self.world.device_read(zone, slot, pages);
        if let (Ok(()), Some(sealed)) = (result, sealed) {
            // The faulting page is opened now, the pages read ahead when a fault wants
            // them (`open_cached`).
            let index = into.fault_index();
            match self.world.open(sealed, versions[index]) {
                Some(version) => versions[index] = version,
                None => {
                    result = Err(IoError::Device);
                    versions.clear();
                }
            }
        }
        match into {
            ReadInto::FaultPage => *self.read = versions,
            ReadInto::Cache { first, .. } => {
                // A failed read leaves the pages as they were: garbage to whoever trusts them.
                let pages = &mut self.world.readahead_cache[first as usize..][..pages as usize];
                if result.is_ok() {
                    pages.copy_from_slice(&versions);
                } else {
                    pages.fill(NOT_READ);
                }
            }
        }
        result
    }

    fn open_cached(&mut self, entry: u32, sealed: &Sealed) -> bool {
        assert!(self.world.locked, "a cache page opened outside the state lock");
        let stored = self.world.readahead_cache[entry as usize];
        match self.world.open(sealed, stored) {
            Some(version) => {
                self.world.readahead_cache[entry as usize] = version;
                self.world.coverage.cache_pages_opened += 1;
                true
            }
            // (Not served: whatever the cache page holds now is never read.)
            None => false,
        }
    }

    fn zero_fill(&mut self, address: u64) -> bool {
        assert!(self.world.locked, "a zero fill outside the state lock");
        self.world.zero_fill(address)
    }

    fn fault_discard_take(&mut self) -> Option<DiscardBatch> {
        self.world.fault_discard.take()
    }

    fn fault_discard_return(&mut self, batch: DiscardBatch) {
        assert!(self.world.fault_discard.replace(batch).is_none(), "two direct-reclaim batches");
        self.world.coverage.fault_discards += 1;
    }
}

impl IoShell for Sim<'_> {
    fn run_request(&mut self, plan: &mut IoPlan, records: &mut Vec<u8>) -> IoCompletion {
        assert!(!self.world.locked, "a device command under the state lock");
        let (completion, read) = self.world.device_command(plan, std::mem::take(records));
        *records = read;
        completion
    }
}
