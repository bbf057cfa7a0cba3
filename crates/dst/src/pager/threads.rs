//! The pager as its threads share it: the core behind its state lock, the read lock on
//! its mappings, the direct-reclaim discard batch, the read-ahead cache's pages, the
//! pager's own threads (fault handlers, evictors, I/O threads), and the wake-ups the
//! core owes them after each hold of the lock.
//!
//! A thread's state between two of its steps is its slot here; the thread stepping is
//! out of its slot (`take_*`) while it steps, so that the rest stays reachable.

use znswap_pager_core::{DiscardBatch, Evictor, FaultTask, IoThread, PagerCore};

use super::findings::Findings;
use super::scenario::{PagerFaultMode, PagerScenario};
use super::schedule::{Schedule, Waiting};

/// What a read-ahead cache page holds before any read filled it, or after a failed
/// read: a version no write ever makes, so the oracle catches a page installed from it.
pub const NOT_READ: u64 = u64::MAX;

/// A thread's fault resolution: the core's task, its wait between steps, and the
/// versions its last device read brought (its read buffer).
pub struct FaultSlot {
    pub task: FaultTask,
    pub waiting: Waiting,
    /// Asleep for room: woken once the room epoch moves past this.
    pub room_epoch: u64,
    pub read: Vec<u64>,
}

impl FaultSlot {
    pub fn new() -> Box<FaultSlot> {
        Box::new(FaultSlot { task: FaultTask::new(), waiting: Waiting::No, room_epoch: 0, read: Vec::new() })
    }

    /// Whether it may step: a fault asleep for room wakes when the room epoch moves on.
    pub fn ready(&self, schedule: &Schedule, room_epoch: u64) -> bool {
        schedule.ready(self.waiting, room_epoch != self.room_epoch)
    }

    pub fn describe(&self) -> String {
        format!("{} {:?} room epoch {}", self.task.describe(), self.waiting, self.room_epoch)
    }
}

pub struct EvictorSlot {
    pub evictor: Evictor,
    pub waiting: Waiting,
    pub woken: bool,
}

pub struct IoSlot {
    pub io: IoThread,
    pub waiting: Waiting,
    pub woken: bool,
}

pub struct Pager {
    pub core: PagerCore,
    /// An actor holds the state lock (within its step, or into a wait).
    locked: bool,
    /// Readers of `mappings`: a region is freed only when there are none.
    mappings_readers: u32,
    /// The direct-reclaim discard batch (one per pager), free or taken.
    fault_discard: Option<DiscardBatch>,
    /// The read-ahead cache's pages: the version each holds (`NOT_READ` until a read
    /// fills it).
    pub readahead_cache: Vec<u64>,
    /// Room wake-ups so far: a fault waiting for room runs again once this moves on.
    room_epoch: u64,
    /// Handler threads' fault tasks (none when self-paging).
    handlers: Vec<Option<Box<FaultSlot>>>,
    /// Faults set aside (`Next::Aside`), each asleep for room, and the spare slots a
    /// handler whose fault goes aside takes (`pager/aside.rs` in the shell).
    aside: Vec<Box<FaultSlot>>,
    spares: Vec<Box<FaultSlot>>,
    evictors: Vec<Option<EvictorSlot>>,
    ios: Vec<Option<IoSlot>>,
}

impl Pager {
    pub fn new(mut core: PagerCore, scenario: &PagerScenario) -> Pager {
        let readahead_cache = vec![NOT_READ; core.readahead_cache_pages() as usize];
        let handlers = match scenario.fault_mode {
            PagerFaultMode::SelfPaging => Vec::new(),
            PagerFaultMode::HandlerThreads(count) => (0..count).map(|_| Some(FaultSlot::new())).collect(),
        };
        let evictors = (0..scenario.evictor_threads)
            .map(|_| Some(EvictorSlot { evictor: Evictor::new(&mut core), waiting: Waiting::No, woken: false }))
            .collect();
        let ios = (0..scenario.io_threads)
            .map(|_| Some(IoSlot { io: IoThread::new(&core), waiting: Waiting::No, woken: false }))
            .collect();
        Pager {
            fault_discard: Some(core.discard_batch()),
            core,
            locked: false,
            mappings_readers: 0,
            readahead_cache,
            room_epoch: 0,
            handlers,
            aside: Vec::new(),
            spares: (0..scenario.aside_spares).map(|_| FaultSlot::new()).collect(),
            evictors,
            ios,
        }
    }

    // --------------------------------------------------------------- the locks

    pub fn lock(&mut self) {
        assert!(!self.locked, "the state lock taken while held");
        self.locked = true;
    }

    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Lets the state lock go, and delivers the wake-ups the core owes.
    pub fn unlock(&mut self, findings: &mut Findings, step: u64) {
        assert!(self.locked, "the state lock released but not held");
        self.locked = false;
        self.after_lock_step(findings, step);
    }

    /// After every lock step: the wake-ups the core owes.
    pub fn after_lock_step(&mut self, findings: &mut Findings, step: u64) {
        if self.core.take_notice().is_some() {
            findings.coverage.swap_full_notices += 1;
        }
        let wakeups = self.core.take_wakeups();
        if wakeups.false_drops {
            // Only a served process's agent can say it dropped what it kept: this pager
            // drops its own pages, so its write faults never reveal one.
            let owners = self.core.take_false_drops();
            findings.violation(step, format!("regions {owners:?} suspected of pages not dropped"));
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

    pub fn room_epoch(&self) -> u64 {
        self.room_epoch
    }

    pub fn mappings_read(&mut self) {
        assert!(!self.locked, "`mappings` taken under the state lock (lock order)");
        self.mappings_readers += 1;
    }

    pub fn mappings_release(&mut self) {
        self.mappings_readers = self.mappings_readers.checked_sub(1).expect("`mappings` released but not held");
    }

    /// Whether a pager thread reads `mappings` (a region may not go meanwhile).
    pub fn mappings_in_use(&self) -> bool {
        self.mappings_readers > 0
    }

    pub fn fault_discard_take(&mut self) -> Option<DiscardBatch> {
        self.fault_discard.take()
    }

    pub fn fault_discard_return(&mut self, batch: DiscardBatch) {
        assert!(self.fault_discard.replace(batch).is_none(), "two direct-reclaim batches");
    }

    // ------------------------------------------------------------- the threads

    pub fn take_handler(&mut self, index: usize) -> Box<FaultSlot> {
        self.handlers[index].take().expect("in place between steps")
    }

    pub fn put_handler(&mut self, index: usize, slot: Box<FaultSlot>) {
        self.handlers[index] = Some(slot);
    }

    pub fn take_evictor(&mut self, index: usize) -> EvictorSlot {
        self.evictors[index].take().expect("in place between steps")
    }

    pub fn put_evictor(&mut self, index: usize, slot: EvictorSlot) {
        self.evictors[index] = Some(slot);
    }

    pub fn take_io(&mut self, index: usize) -> IoSlot {
        self.ios[index].take().expect("in place between steps")
    }

    pub fn put_io(&mut self, index: usize, slot: IoSlot) {
        self.ios[index] = Some(slot);
    }

    /// The handlers that may step, in order: an idle one when there is an event to read
    /// (`event_waiting`) or a fault aside may go on, a busy one when its fault may step.
    pub fn runnable_handlers<'a>(
        &'a self,
        schedule: &'a Schedule,
        event_waiting: bool,
    ) -> impl Iterator<Item = usize> + 'a {
        let room_epoch = self.room_epoch;
        let work = event_waiting || self.aside_due(schedule).is_some();
        self.handlers.iter().enumerate().filter_map(move |(index, handler)| {
            let slot = handler.as_ref().expect("in place between steps");
            let ready = if slot.task.is_resolved() { work } else { slot.ready(schedule, room_epoch) };
            ready.then_some(index)
        })
    }

    /// Whether a fault may be set aside now: a spare slot is left for its handler.
    pub fn has_spare(&self) -> bool {
        !self.spares.is_empty()
    }

    /// Sets `slot`'s fault aside; the spare its handler goes on with.
    pub fn set_aside(&mut self, slot: Box<FaultSlot>) -> Box<FaultSlot> {
        let spare = self.spares.pop().expect("a spare, checked before the step");
        self.aside.push(slot);
        spare
    }

    /// The first fault aside that may go on (room announced since, or its wait's
    /// timeout passed), if any.
    fn aside_due(&self, schedule: &Schedule) -> Option<usize> {
        self.aside.iter().position(|slot| slot.ready(schedule, self.room_epoch))
    }

    /// An idle handler takes the first fault aside that may go on, giving its own idle
    /// slot back to the spares.
    pub fn resume_aside(
        &mut self,
        schedule: &Schedule,
        idle: Box<FaultSlot>,
    ) -> Result<Box<FaultSlot>, Box<FaultSlot>> {
        let Some(at) = self.aside_due(schedule) else { return Err(idle) };
        debug_assert!(idle.task.is_resolved());
        self.spares.push(idle);
        Ok(self.aside.remove(at))
    }

    pub fn runnable_evictors<'a>(&'a self, schedule: &'a Schedule) -> impl Iterator<Item = usize> + 'a {
        self.evictors.iter().enumerate().filter_map(move |(index, evictor)| {
            let evictor = evictor.as_ref().expect("in place between steps");
            schedule.ready(evictor.waiting, evictor.woken).then_some(index)
        })
    }

    pub fn runnable_ios<'a>(&'a self, schedule: &'a Schedule) -> impl Iterator<Item = usize> + 'a {
        self.ios.iter().enumerate().filter_map(move |(index, io)| {
            let io = io.as_ref().expect("in place between steps");
            schedule.ready(io.waiting, io.woken).then_some(index)
        })
    }

    /// The steps the pager's waiting threads' timers fire at.
    pub fn timers(&self) -> impl Iterator<Item = u64> + '_ {
        let handlers = self.handlers.iter().filter_map(|handler| handler.as_ref()?.waiting.until());
        // A fault aside's timer is a handler's to act on only while one is idle.
        let idle = self.handlers.iter().flatten().any(|slot| slot.task.is_resolved());
        let aside = self.aside.iter().filter(move |_| idle).filter_map(|slot| slot.waiting.until());
        let handlers = handlers.chain(aside);
        let evictors = self.evictors.iter().flatten().filter_map(|evictor| evictor.waiting.until());
        let ios = self.ios.iter().flatten().filter_map(|io| io.waiting.until());
        handlers.chain(evictors).chain(ios)
    }

    /// What every actor is doing, for a hang's report: the pager's state and threads,
    /// with the application threads' faults (`faulting`) among them.
    pub fn describe(&self, step: u64, scenario: &PagerScenario, events: usize, faulting: &[String]) -> String {
        let mut lines = vec![format!(
            "step {} resident {} budget {} slack {} evictor work {:?} events {} room epoch {} mappings readers {}",
            step,
            self.core.stats().resident_pages,
            scenario.budget_pages,
            scenario.slack_pages,
            self.core.evictor_work(),
            events,
            self.room_epoch,
            self.mappings_readers
        )];
        lines.push(format!("core {}", self.core.describe()));
        lines.push(format!("core {:?}", self.core.stats()));
        lines.push(format!("engine {:?}", self.core.engine().swap_inf()));
        lines.push(format!("engine stats {:?}", self.core.engine().stats()));
        for handler in &self.handlers {
            let slot = handler.as_deref().expect("in place between steps");
            lines.push(format!(
                "handler: {}",
                if slot.task.is_resolved() { "idle".to_string() } else { slot.describe() }
            ));
        }
        lines.extend(self.aside.iter().map(|slot| format!("aside: {}", slot.describe())));
        lines.extend(faulting.iter().map(|fault| format!("app: {fault}")));
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
}
