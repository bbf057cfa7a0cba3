//! The shell the core's actors step against in the simulation ([`Sim`]), and how each
//! actor's step is taken.
//!
//! The pager's actors (the evictor, a fault, the I/O thread) are the core's own
//! (`znswap_pager_core::{Evictor, FaultTask, IoThread}`), the very step functions the
//! live threads call; `Sim` is their shell: it stands for the locks (one actor steps at a
//! time; the lock flags check the actors' discipline), the kernel (the page tables) and
//! the device (the model device with its errors). A step is one lock hold (a call into
//! the core, with the actions it returns carried out at once) or one piece of work
//! outside the lock (a device command, write-protecting a range, reading a victim, a
//! discard).
//!
//! `Sim` borrows every part of the world but the program, whose steps act through it
//! too (the program's calls into the core, its discards and forks).

use znswap_core::driver::{Captured, Completion};
use znswap_core::{AppendPage, Buf, IoError, IoRequest};
use znswap_pager_core::{
    Action, Actions, AddressRange, CopyFrom, Digest, DiscardBatch, DropDelay, EvictorDid, EvictorShell, Fault,
    FaultKind, FaultShell, IoCompletion, IoPlan, IoShell, Next, PageSource, PagerCore, ParkOutcome, ReadInto, Sealed,
    Shell, WaitOn, PAGE_BYTES,
};

use super::agents::LateAgents;
use super::device::Device;
use super::findings::Findings;
use super::page_tables::{PageTables, Pte};
use super::scenario::PagerScenario;
use super::schedule::{Schedule, Waiting};
use super::threads::{FaultSlot, Pager, NOT_READ};

/// The world but the program, borrowed for one step.
pub struct Sim<'a> {
    pub pager: &'a mut Pager,
    pub tables: &'a mut PageTables,
    pub device: &'a mut Device,
    pub agents: &'a mut LateAgents,
    pub findings: &'a mut Findings,
    pub schedule: &'a mut Schedule,
    pub scenario: &'a PagerScenario,
    /// The versions the stepping fault's last device read brought: its read buffer
    /// (empty for the other actors).
    pub read: Vec<u64>,
}

/// How a fault's step ended (`Sim::step_fault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    Going,
    Resolved,
    /// Set aside (`Next::Aside`): its slot goes to the faults aside.
    Aside,
}

/// A page's digest in the model: its content is its version (never 0: 0 is no digest).
fn digest_of(version: u64) -> Digest {
    version as Digest | 1 << 127
}

impl Sim<'_> {
    pub fn step(&self) -> u64 {
        self.schedule.step
    }

    pub fn now_ns(&self) -> u64 {
        self.schedule.now_ns
    }

    pub fn violation(&mut self, message: String) {
        self.findings.violation(self.schedule.step, message);
    }

    /// After a hold of the state lock: the wake-ups the core owes.
    pub fn after_lock_step(&mut self) {
        self.pager.after_lock_step(self.findings, self.schedule.step);
    }

    /// Prints `what` if `address..+pages` covers the traced page.
    pub fn trace(&self, address: u64, pages: u64, what: &dyn Fn() -> String) {
        let Some((place, page)) = self.tables.traced(address, pages) else { return };
        let region = self.tables.live(place);
        let state = self.pager.core.page_state(region.owner, page);
        let engine = self.pager.core.engine().page_state(region.owner, page);
        let pte = region.ptes.get(page as usize).copied();
        eprintln!("[{}] {} | now {state:?} / {engine:?} / {pte:?}", self.schedule.step, what());
    }

    /// The shadow entry at `address`, as an ioctl or a read of it would find it.
    fn shadow_pte(&mut self, address: u64, what: &str) -> Option<(usize, u64, Pte)> {
        let entry = self.tables.shadow_entry(address);
        if entry.is_none() {
            self.violation(format!("{what} at {address:#x}, outside any region's shadow"));
        }
        entry
    }

    /// An actor's step asked to wait (`Next::Wait`), the state lock still held: the
    /// lock goes as the wait begins, as a condvar's wait lets it go.
    fn wait(&mut self) -> Waiting {
        self.pager.unlock(self.findings, self.schedule.step);
        self.schedule.asleep()
    }

    // ------------------------------------------------------------- the actors

    /// One step of a fault's task (the core's, as the live pager runs it); whether it is
    /// resolved, goes on, or (with `may_aside`: a spare slot is left) was set aside.
    pub fn step_fault(&mut self, slot: &mut FaultSlot, may_aside: bool) -> Stepped {
        std::mem::swap(&mut self.read, &mut slot.read);
        let next = slot.task.step(self);
        std::mem::swap(&mut self.read, &mut slot.read);
        slot.waiting = Waiting::No;
        match next {
            Next::Continue => Stepped::Going,
            Next::Pause(pause) => {
                self.findings.coverage.fault_pauses += 1;
                slot.waiting = self.schedule.pause(pause);
                Stepped::Going
            }
            // As the shell's `aside.rs`: the room epoch read under the lock the core's
            // check ran under, then the lock let go; the slot sleeps for room.
            Next::Aside if may_aside => {
                self.findings.coverage.faults_aside += 1;
                slot.room_epoch = self.pager.room_epoch();
                slot.waiting = self.wait();
                Stepped::Aside
            }
            Next::Wait(on) => {
                assert_eq!(on, WaitOn::Room, "a fault waits only for room");
                self.findings.coverage.room_waits += 1;
                slot.waiting = self.wait();
                slot.room_epoch = self.pager.room_epoch();
                Stepped::Going
            }
            // No spare slot: the handler waits in it, as for room.
            Next::Aside => {
                self.findings.coverage.aside_no_spare += 1;
                slot.waiting = self.wait();
                slot.room_epoch = self.pager.room_epoch();
                Stepped::Going
            }
            Next::Resolved { .. } => Stepped::Resolved,
        }
    }

    /// A handler thread's step: its fault's, or, idle, the next fault event's first.
    /// False when it is idle with no fault event to read: it reads the program's REMOVE
    /// event instead (faults are read before other events), which is the program's to
    /// take.
    pub fn step_handler(&mut self, index: usize) -> bool {
        let mut slot = self.pager.take_handler(index);
        // An idle handler first steps a fault aside that may go on (as the shell's
        // handlers look at them as they wake), then reads events.
        if slot.task.is_resolved() {
            match self.pager.resume_aside(&self.schedule, slot) {
                Ok(aside) => {
                    self.findings.coverage.aside_resumed += 1;
                    slot = aside;
                }
                Err(idle) => slot = idle,
            }
        }
        if slot.task.is_resolved() {
            let Some((address, kind)) = self.tables.pop_event() else {
                self.pager.put_handler(index, slot);
                return false;
            };
            let stale = self.tables.locate(address).is_none_or(|(place, page)| {
                let pte = self.tables.live(place).ptes[page as usize];
                pte.mapped && !(pte.write_protected && kind == FaultKind::WriteProtect)
            });
            self.findings.coverage.stale_events += stale as u64;
            let fault = Fault::new(address, kind);
            slot.task.start(if self.scenario.aside_spares > 0 { fault.may_go_aside() } else { fault });
            slot.waiting = Waiting::No;
        }
        let may_aside = self.pager.has_spare();
        if self.step_fault(&mut slot, may_aside) == Stepped::Aside {
            slot = self.pager.set_aside(slot);
        }
        self.pager.put_handler(index, slot);
        true
    }

    pub fn step_evictor(&mut self, index: usize) {
        let mut slot = self.pager.take_evictor(index);
        slot.woken = false;
        let mut did = EvictorDid::default();
        let next = slot.evictor.step(self, &mut did);
        self.findings.coverage.rounds += did.rounds;
        self.findings.coverage.evictor_discards += did.discards;
        slot.waiting = self.background_wait(next);
        self.pager.put_evictor(index, slot);
    }

    pub fn step_io(&mut self, index: usize) {
        let mut slot = self.pager.take_io(index);
        slot.woken = false;
        let next = slot.io.step(self);
        slot.waiting = self.background_wait(next);
        self.pager.put_io(index, slot);
    }

    /// How a background actor (the evictor, the I/O thread) waits after a step, as its
    /// thread's loop (`Live::carry_out`) would.
    fn background_wait(&mut self, next: Next) -> Waiting {
        match next {
            Next::Continue => Waiting::No,
            Next::Pause(pause) => self.schedule.pause(pause),
            Next::Wait(_) => self.wait(),
            Next::Resolved { .. } | Next::Aside => panic!("only a fault is resolved or set aside"),
        }
    }

    // ------------------------------------------------------- the kernel's part

    /// Carries out the core's actions on the page tables, as the shell's `run`.
    fn carry_out(&mut self, actions: &mut Actions) {
        let list: Vec<Action> = actions.drain().collect();
        for action in list {
            let (address, pages) = match action {
                Action::Copy { address, pages, .. } => (address, pages as u64),
                Action::Unprotect { address, pages } => (address, pages),
                Action::ZeroPage { address } | Action::Poison { address } | Action::Wake { address } => (address, 1),
                Action::Unpark { address, .. } | Action::Unshare { address } => (address, 1),
            };
            self.trace(address, pages, &|| format!("before {action:?}"));
            let step = self.schedule.step;
            match action {
                Action::Copy { address, pages, from, write_protect } => self.copy(address, pages, from, write_protect),
                Action::ZeroPage { address } => {
                    self.tables.install(address, Pte::mapped(0, false, false), "UFFDIO_ZEROPAGE", self.findings, step);
                    self.tables.wake(address, 1);
                }
                Action::Unprotect { address, pages } => self.tables.unprotect(address, pages),
                Action::Poison { address } => self.tables.poison(address, self.findings, step),
                Action::Wake { address } => self.tables.wake(address, 1),
                Action::Unshare { address } => self.tables.unshare(address, self.findings, step),
                Action::Unpark { address, shadow } => self.tables.unpark(address, shadow, self.findings, step),
            }
        }
    }

    /// `UFFDIO_COPY` of `pages` pages to `address` from `from`, and the wake.
    fn copy(&mut self, address: u64, pages: u32, from: CopyFrom, write_protect: bool) {
        for index in 0..pages as u64 {
            let at = address + index * PAGE_BYTES as u64;
            let (version, from_device) = match from {
                CopyFrom::FaultPage => (self.read[index as usize], true),
                CopyFrom::Cache { page } => (self.pager.readahead_cache[page as usize + index as usize], true),
                CopyFrom::Zeros => (0, false),
                CopyFrom::Shadow { address: shadow } => {
                    self.findings.coverage.parked_copied_back += 1;
                    match self.shadow_pte(shadow + index * PAGE_BYTES as u64, "a copy from the shadow") {
                        Some((_, _, pte)) if pte.mapped => (pte.version, pte.from_device),
                        _ => {
                            self.violation(format!("a copy from the empty shadow page {shadow:#x}"));
                            (0, false)
                        }
                    }
                }
            };
            let entry = Pte::mapped(version, write_protect, from_device);
            self.tables.install(at, entry, "UFFDIO_COPY", self.findings, self.schedule.step);
        }
        self.tables.wake(address, pages as u64);
    }

    /// A discard's batch: each region's ranges zapped now, or left to its late agent
    /// (`PagerFaults::late_discards`), or not asked while that agent owes an answer.
    fn discard_batch(&mut self, batch: &mut DiscardBatch) {
        if !self.agents.enabled() {
            return self.discard_ranges(batch.ranges());
        }
        let ranges = batch.ranges().to_vec();
        let owner_of = |tables: &PageTables, range: &AddressRange| {
            tables.locate(range.start as u64).map(|(place, _)| tables.live(place).owner)
        };
        let mut next = 0;
        while next < ranges.len() {
            let owner = owner_of(self.tables, &ranges[next]);
            let same = ranges[next..].iter().take_while(|range| owner_of(self.tables, range) == owner).count();
            let group = next..next + same;
            next += same;
            let Some(owner) = owner else {
                self.discard_ranges(&ranges[group]);
                continue;
            };
            if self.agents.owes(owner) {
                self.findings.coverage.discards_unsent += 1;
                for range in group {
                    batch.delay(range, DropDelay::Unsent);
                }
                continue;
            }
            if !self.agents.take_late(owner, &ranges[group.clone()], self.schedule.step) {
                self.discard_ranges(&ranges[group]);
                continue;
            }
            self.findings.coverage.discards_late += 1;
            for range in group {
                batch.delay(range, DropDelay::Late);
            }
        }
    }

    /// `MADV_DONTNEED` of a discard's ranges: their entries go.
    fn discard_ranges(&mut self, ranges: &[AddressRange]) {
        for range in ranges {
            self.trace(range.start as u64, (range.len / PAGE_BYTES) as u64, &|| format!("discard {range:?}"));
            self.tables.discard_range(range, &self.pager.core, self.findings, self.schedule.step);
        }
    }

    /// Late agents whose time has come zap their ranges (outside any pager lock: the
    /// process's own thread).
    pub fn late_agents_zap(&mut self) {
        for ranges in self.agents.due_zaps(self.schedule.step) {
            self.discard_ranges(&ranges);
        }
    }

    /// The digest of a parked page's bytes, as the evictor takes it.
    fn shadow_digest(&mut self, shadow: u64) -> Digest {
        self.findings.coverage.digests += 1;
        match self.shadow_pte(shadow, "a digest of a shadow page") {
            Some((_, _, pte)) if pte.mapped => digest_of(pte.version),
            _ => {
                self.violation(format!("a digest of the empty shadow page {shadow:#x}"));
                0
            }
        }
    }

    // ---------------------------------------------------------------- device

    /// Runs the I/O thread's request on the model device; the records a read returns.
    fn device_command(&mut self, plan: &mut IoPlan, records: Vec<u8>) -> (IoCompletion, Vec<u8>) {
        let request = plan.request();
        let mut pages = Vec::new();
        if let IoRequest::Append { zone, .. } = request {
            self.findings.coverage.appends += 1;
            pages = self.append_pages(zone, plan);
        }
        let captured = Captured { request, pages, records };
        let completion = self.device.run(&captured, &mut self.schedule.rng, self.findings, self.schedule.step);
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

    /// The pages an append to `zone` writes, as the device reads them (with their
    /// digests, with asynchronous write protection, and sealed, when pages are).
    fn append_pages(&mut self, zone: u32, plan: &mut IoPlan) -> Vec<AppendPage> {
        let mut pages = Vec::with_capacity(plan.sources().len());
        for index in 0..plan.sources().len() {
            let source = plan.sources()[index];
            let (owner, page, buf) = self.append_source(zone, source);
            if self.scenario.wp_async {
                let digest = match (source, buf) {
                    (PageSource::Region { .. }, Buf::Page(version)) => digest_of(version),
                    _ => 0,
                };
                plan.digests_mut().push(digest);
            }
            let buf = match (source, buf) {
                (PageSource::Region { .. }, Buf::Page(version)) if self.device.sealing() => {
                    let (owner, page) = plan.identity(index);
                    let (seal, ciphertext) = self.device.seal(owner, page, version);
                    plan.seals_mut().push(seal);
                    self.findings.coverage.pages_sealed += 1;
                    Buf::Page(ciphertext)
                }
                _ => {
                    plan.seals_mut().push(znswap_seal::NO_SEAL);
                    buf
                }
            };
            pages.push(AppendPage { owner, page, buf });
        }
        pages
    }

    /// What the device reads of one source of an append to `zone`: a region page's
    /// content is its entry's version, which the captured copy carries as its buffer
    /// handle. (Owner, page, buffer.)
    fn append_source(&mut self, zone: u32, source: PageSource) -> (u32, u64, Buf) {
        match source {
            PageSource::Region { address } if self.tables.locate_shadow(address).is_some() => {
                let (place, page) = self.tables.locate_shadow(address).expect("just found");
                let region = self.tables.live(place);
                let (owner, base, pte) = (region.owner, region.base, region.shadow[page as usize]);
                if !pte.mapped {
                    self.violation(format!("an append read the empty shadow page of {place}:{page}"));
                }
                self.trace(base + page * PAGE_BYTES as u64, 1, &|| {
                    format!("append to zone {zone} reads the shadow's v{}", pte.version)
                });
                (owner, page, Buf::Page(pte.version))
            }
            PageSource::Region { address } => match self.tables.locate(address) {
                Some((place, page)) => {
                    let region = self.tables.live(place);
                    let (owner, pte) = (region.owner, region.ptes[page as usize]);
                    let discarded = region.discarded(page, &self.pager.core);
                    if self.tables.is_traced(place, page) {
                        self.trace(address, 1, &|| format!("append to zone {zone} reads v{}", pte.version));
                    } else if !pte.mapped && !discarded {
                        self.violation(format!("an append read the unmapped page {place}:{page}"));
                    }
                    // (Zapped by the program: the append's read faults, and reads the zero
                    // page a handler maps.)
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
        }
    }

    /// A swap-in read for a fault: the versions of `pages` slots from `slot`.
    fn device_read(&mut self, zone: u32, slot: u32, pages: u32) -> (Result<(), IoError>, Vec<u64>) {
        let step = self.schedule.step;
        match self.device.read(zone, slot, pages, &mut self.schedule.rng, self.findings, step) {
            Ok(versions) => (Ok(()), versions),
            Err(error) => (Err(error), Vec::new()),
        }
    }
}

impl Shell for Sim<'_> {
    fn now(&mut self) -> u64 {
        self.schedule.now_ns
    }

    fn lock(&mut self) {
        self.pager.lock();
    }

    fn unlock(&mut self) {
        self.pager.unlock(self.findings, self.schedule.step);
    }

    fn core(&mut self) -> &mut PagerCore {
        assert!(self.pager.locked(), "the core reached without the state lock");
        &mut self.pager.core
    }

    fn apply(&mut self, actions: &mut Actions) {
        assert!(self.pager.locked(), "actions carried out without the state lock");
        self.carry_out(actions);
    }

    fn mappings_read(&mut self) {
        self.pager.mappings_read();
    }

    fn mappings_release(&mut self) {
        self.pager.mappings_release();
    }

    fn discard_pages(&mut self, batch: &mut DiscardBatch) {
        assert!(self.pager.mappings_in_use(), "a discard without `mappings`");
        self.discard_batch(batch);
    }
}

impl EvictorShell for Sim<'_> {
    fn park(&mut self, address: u64, shadow: u64) -> ParkOutcome {
        self.trace(address, 1, &|| "park".to_string());
        self.tables.park(address, shadow, self.findings, self.schedule.step)
    }

    fn late_answered(&mut self, owner: u32) -> bool {
        assert!(self.pager.locked(), "a late answer taken without the state lock");
        match self.agents.answer(owner, self.schedule.step) {
            None => {
                self.violation(format!("a late answer asked of region {owner}, whose agent owes none"));
                true
            }
            Some(false) => false,
            Some(true) => {
                self.findings.coverage.late_answers += 1;
                true
            }
        }
    }

    fn write_protect(&mut self, start: u64, end: u64) -> bool {
        self.trace(start, (end - start) / PAGE_BYTES as u64, &|| format!("evictor protects {start:#x}..{end:#x}"));
        self.tables.write_protect(start, end)
    }

    fn page_is_zero(&mut self, address: u64) -> bool {
        assert!(!self.pager.locked(), "region memory read under the state lock");
        self.trace(address, 1, &|| "evictor zero check".to_string());
        self.tables.victim_is_zero(address, &self.pager.core, self.findings, self.schedule.step)
    }

    fn scan_written(&mut self, start: u64, end: u64, found: &mut dyn FnMut(u64, u64)) {
        assert!(!self.pager.locked(), "a scan under the state lock");
        self.trace(start, (end - start) / PAGE_BYTES as u64, &|| format!("evictor scans {start:#x}..{end:#x}"));
        self.tables.scan_written(start, end, found, self.findings, self.schedule.step);
    }

    fn digest(&mut self, address: u64) -> Digest {
        assert!(!self.pager.locked(), "region memory read under the state lock");
        self.shadow_digest(address)
    }
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
        assert!(!self.pager.locked(), "a device read under the state lock");
        let (mut result, mut versions) = self.device_read(zone, slot, pages);
        if let (Ok(()), Some(sealed)) = (result, sealed) {
            // The faulting page is opened now, the pages read ahead when a fault wants
            // them (`open_cached`).
            let index = into.fault_index();
            match self.device.open(sealed, versions[index], &mut self.findings.coverage) {
                Some(version) => versions[index] = version,
                None => {
                    result = Err(IoError::Device);
                    versions.clear();
                }
            }
        }
        match into {
            ReadInto::FaultPage => self.read = versions,
            ReadInto::Cache { first, .. } => {
                // A failed read leaves the pages as they were: garbage to whoever trusts them.
                let pages = &mut self.pager.readahead_cache[first as usize..][..pages as usize];
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
        assert!(self.pager.locked(), "a cache page opened outside the state lock");
        let stored = self.pager.readahead_cache[entry as usize];
        match self.device.open(sealed, stored, &mut self.findings.coverage) {
            Some(version) => {
                self.pager.readahead_cache[entry as usize] = version;
                self.findings.coverage.cache_pages_opened += 1;
                true
            }
            // (Not served: whatever the cache page holds now is never read.)
            None => false,
        }
    }

    fn zero_fill(&mut self, address: u64) -> bool {
        assert!(self.pager.locked(), "a zero fill outside the state lock");
        self.tables.zero_fill(address, self.findings, self.schedule.step)
    }

    fn fault_discard_take(&mut self) -> Option<DiscardBatch> {
        self.pager.fault_discard_take()
    }

    fn fault_discard_return(&mut self, batch: DiscardBatch) {
        self.pager.fault_discard_return(batch);
        self.findings.coverage.fault_discards += 1;
    }
}

impl IoShell for Sim<'_> {
    fn run_request(&mut self, plan: &mut IoPlan, records: &mut Vec<u8>) -> IoCompletion {
        assert!(!self.pager.locked(), "a device command under the state lock");
        let (completion, read) = self.device_command(plan, std::mem::take(records));
        *records = read;
        completion
    }
}
