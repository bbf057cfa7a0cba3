//! The program the pager serves: its application threads and their accesses (each
//! read checked against the oracle, each write a new version), the regions it frees and
//! maps, its discards ([`super::discard`]) and forks ([`super::fork`]), the budget
//! `znswap run` moves with its unpaged memory, and the final sweep that reads every
//! page back.
//!
//! Application accesses are steps of their own and land between any two of the pager's.

use znswap_pager_core::{Fault, FaultKind, PAGE_BYTES};

use super::checks::observe_lost;
use super::discard::ProgramDiscards;
use super::findings::Findings;
use super::fork::Forks;
use super::page_tables::{ModelRegion, PageTables, REGION_PLACES, SHADOW_OFFSET};
use super::scenario::{Access, PagerFaultMode, PagerScenario};
use super::schedule::{Actor, Schedule, Waiting};
use super::shell::{Sim, Stepped};
use super::threads::FaultSlot;
use crate::scenario::{below, chance};

/// Attempts of one access before it counts as a livelock.
const ACCESS_ATTEMPTS_MAX: u32 = 100_000;
/// Steps one access may take before it counts as a hang.
const ACCESS_STEPS_MAX: u64 = 400_000;
/// Steps a tenant may be held back by its write limit at most (a step's clock moves
/// 1 µs on average, and more with its longer gaps), once for each thread of the tenant
/// ahead of this one waiting for room.
const WRITE_HOLD_STEPS: u64 = znswap_pager_core::WRITE_HOLD_MAX_NS / 1_000;

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

/// An application thread.
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

pub struct Program {
    threads: Vec<App>,
    /// The last version written (each write makes a new one).
    version: u64,
    /// The final sweep is on: application threads read every page once and stop.
    sweeping: bool,
    discards: ProgramDiscards,
    forks: Forks,
    next_churn_step: u64,
    next_budget_step: u64,
}

/// The first step of an event every `interval` steps (never, for 0).
fn first_step(interval: u64) -> u64 {
    if interval == 0 {
        u64::MAX
    } else {
        interval
    }
}

impl Program {
    pub fn new(scenario: &PagerScenario) -> Program {
        let self_paging = scenario.fault_mode == PagerFaultMode::SelfPaging;
        let threads = (0..scenario.app_threads)
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
        Program {
            threads,
            version: 0,
            sweeping: false,
            discards: ProgramDiscards::new(first_step(scenario.program_discard_steps)),
            forks: Forks::new(first_step(scenario.fork_steps)),
            next_churn_step: first_step(scenario.region_churn_steps),
            next_budget_step: first_step(scenario.budget_change_steps),
        }
    }

    // -------------------------------------------------------------- scheduling

    /// The application threads that may step, in order.
    pub fn runnable_threads<'a>(&'a self, schedule: &'a Schedule, room_epoch: u64) -> impl Iterator<Item = Actor> + 'a {
        self.threads.iter().enumerate().filter_map(move |(index, app)| {
            let runnable = match &app.phase {
                AppPhase::Finished => false,
                AppPhase::Idle => !self.sweeping || app.sweep.is_some(),
                AppPhase::Blocked { .. } => app.woken,
                AppPhase::Faulting { .. } => {
                    app.fault.as_ref().expect("a self-paging thread's task").ready(schedule, room_epoch)
                }
                AppPhase::Access { .. } => true,
            };
            runnable.then_some(Actor::App(index))
        })
    }

    /// The program's events due, in order; churn only while no pager thread reads the
    /// mappings (a region is not freed under it).
    pub fn due_events(&self, step: u64, mappings_in_use: bool) -> impl Iterator<Item = Actor> {
        let churn = step >= self.next_churn_step && !self.sweeping && !mappings_in_use;
        let discard = self.discards.due(step, self.sweeping);
        let fork = self.forks.due(step, self.sweeping);
        let budget = step >= self.next_budget_step && !self.sweeping;
        [(churn, Actor::Churn), (discard, Actor::ProgramDiscard), (fork, Actor::Fork), (budget, Actor::Budget)]
            .into_iter()
            .filter_map(|(due, actor)| due.then_some(actor))
    }

    /// A handler has the program's REMOVE event to read.
    pub fn discard_queued(&self) -> bool {
        self.discards.queued()
    }

    /// The steps the program's timers fire at: faulting threads' waits, a discard's
    /// zap, a fork's child's next read.
    pub fn timers(&self) -> impl Iterator<Item = u64> + '_ {
        let threads = self.threads.iter().filter_map(|app| match &app.phase {
            AppPhase::Faulting { .. } => app.fault.as_ref().and_then(|slot| slot.waiting.until()),
            _ => None,
        });
        threads.chain(self.discards.timer()).chain(self.forks.timer())
    }

    /// Delivers the kernel's wake-ups, `(address, pages)`, to the threads asleep on a
    /// page they cover.
    pub fn wake(&mut self, wakes: &[(u64, u64)], tables: &PageTables) {
        for &(address, pages) in wakes {
            let end = address + pages * PAGE_BYTES as u64;
            for app in &mut self.threads {
                if let AppPhase::Blocked { place, page, .. } = app.phase {
                    if tables.is_free(place) {
                        continue;
                    }
                    let at = tables.address(place, page);
                    if at >= address && at < end {
                        app.woken = true;
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------- the threads

    /// Steps an access may take before it counts as a hang: more once tenants have write
    /// limits, whose waits are the limits at work.
    pub fn access_steps_max(&self, findings: &Findings) -> u64 {
        let holds =
            if findings.coverage.write_limit_changes > 0 { self.threads.len() as u64 * WRITE_HOLD_STEPS } else { 0 };
        ACCESS_STEPS_MAX + holds
    }

    /// Whether thread `index`'s next try of its access counts as a hang or a livelock.
    pub fn access_gives_up(&self, index: usize, step: u64, steps_max: u64) -> bool {
        let app = &self.threads[index];
        matches!(app.phase, AppPhase::Access { .. })
            && (app.attempts >= ACCESS_ATTEMPTS_MAX || step - app.started_step > steps_max)
    }

    pub fn step_app(&mut self, index: usize, sim: &mut Sim) {
        let phase = std::mem::replace(&mut self.threads[index].phase, AppPhase::Finished);
        let next = match phase {
            AppPhase::Idle => match self.pick_access(index, sim) {
                Some((place, page, write)) => {
                    sim.tables.live_mut(place).busy += 1;
                    self.threads[index].attempts = 0;
                    self.threads[index].started_step = sim.step();
                    AppPhase::Access { place, page, write }
                }
                None if self.sweeping => AppPhase::Finished,
                None => AppPhase::Idle,
            },
            AppPhase::Blocked { place, page, write } => {
                self.threads[index].woken = false;
                AppPhase::Access { place, page, write }
            }
            AppPhase::Access { place, page, write } => self.access(index, place, page, write, sim),
            AppPhase::Faulting { place, page, write } => {
                let mut slot = self.threads[index].fault.take().expect("a self-paging thread's task");
                // (Self-paging: no fault goes aside.)
                let resolved = sim.step_fault(&mut slot, false) == Stepped::Resolved;
                self.threads[index].fault = Some(slot);
                if resolved {
                    AppPhase::Access { place, page, write }
                } else {
                    AppPhase::Faulting { place, page, write }
                }
            }
            AppPhase::Finished => AppPhase::Finished,
        };
        self.threads[index].phase = next;
    }

    /// The next page thread `index` touches: (place, page, whether it writes).
    fn pick_access(&mut self, index: usize, sim: &mut Sim) -> Option<(usize, u64, bool)> {
        if let Some((place, page)) = self.threads[index].sweep {
            // The final sweep: read every page of the regions this thread covers.
            let threads = self.threads.len();
            let mut at = (place, page);
            loop {
                if at.0 >= REGION_PLACES {
                    self.threads[index].sweep = None;
                    return None;
                }
                let pages = sim.tables.region(at.0).map_or(0, ModelRegion::pages);
                if at.0 % threads != index % threads || at.1 >= pages {
                    at = (at.0 + 1, 0);
                    continue;
                }
                self.threads[index].sweep = Some((at.0, at.1 + 1));
                return Some((at.0, at.1, false));
            }
        }
        let live = sim.tables.live_places();
        if live.is_empty() {
            return None;
        }
        let rng = &mut sim.schedule.rng;
        let write = chance(rng, sim.scenario.write_share);
        let (place, page) = match sim.scenario.access {
            Access::Sequential if chance(rng, 0.9) => {
                let (place, page) = self.threads[index].cursor;
                match sim.tables.region(place) {
                    Some(region) if page < region.pages() => (place, page),
                    _ => {
                        let place = live[below(rng, live.len() as u64) as usize];
                        (place, 0)
                    }
                }
            }
            access => {
                let place = live[below(rng, live.len() as u64) as usize];
                let pages = sim.tables.live(place).pages();
                let page = if access == Access::Hot && chance(rng, 0.8) {
                    below(rng, (pages / 5).max(1))
                } else {
                    below(rng, pages)
                };
                (place, page)
            }
        };
        self.threads[index].cursor = (place, page + 1);
        Some((place, page, write))
    }

    /// One try of an access: it completes, or faults.
    fn access(&mut self, index: usize, place: usize, page: u64, write: bool, sim: &mut Sim) -> AppPhase {
        let steps_max = self.access_steps_max(sim.findings);
        let gives_up = self.access_gives_up(index, sim.step(), steps_max);
        let app = &mut self.threads[index];
        app.attempts += 1;
        if gives_up {
            let (attempts, steps) = (app.attempts, sim.step() - app.started_step);
            let state = sim.pager.core.page_state(sim.tables.live(place).owner, page);
            sim.violation(format!(
                "an access to {place}:{page} (write {write}) never completes: {attempts} tries in {steps} steps, page {state:?}"
            ));
            sim.tables.live_mut(place).busy -= 1;
            return AppPhase::Finished;
        }
        let address = sim.tables.address(place, page);
        sim.trace(address, 1, &|| format!("thread {index} access (write {write})"));
        let pte = sim.tables.live(place).ptes[page as usize];
        let fault_kind = if pte.poisoned {
            None
        } else if !pte.mapped {
            Some(FaultKind::Missing { write })
        } else if write && pte.write_protected && !sim.scenario.wp_async {
            Some(FaultKind::WriteProtect)
        } else {
            None
        };
        if let Some(kind) = fault_kind {
            match kind {
                FaultKind::Missing { .. } => sim.findings.coverage.faults_missing += 1,
                _ => sim.findings.coverage.faults_write_protect += 1,
            }
            return match sim.scenario.fault_mode {
                PagerFaultMode::SelfPaging => {
                    let slot = self.threads[index].fault.as_mut().expect("a self-paging thread's task");
                    slot.task.start(Fault::new(address, FaultKind::Sigbus { write }));
                    slot.waiting = Waiting::No;
                    AppPhase::Faulting { place, page, write }
                }
                PagerFaultMode::HandlerThreads(_) => {
                    sim.tables.push_event(address, kind);
                    self.threads[index].woken = false;
                    AppPhase::Blocked { place, page, write }
                }
            };
        }
        self.complete_access(place, page, write, sim);
        sim.tables.live_mut(place).busy -= 1;
        AppPhase::Idle
    }

    /// An access that found its page mapped (or poisoned): the read checked against the
    /// oracle, or the write made.
    fn complete_access(&mut self, place: usize, page: u64, write: bool, sim: &mut Sim) {
        sim.findings.coverage.accesses += 1;
        let pte = sim.tables.live(place).ptes[page as usize];
        let in_window = sim.tables.live(place).oracle.in_window(page as usize);
        sim.findings.coverage.window_accesses += in_window as u64;
        if pte.poisoned && pte.tainted {
            // A lost page's marker the program's discard is about to zap.
        } else if pte.poisoned {
            observe_lost(sim, place, page);
        } else if write {
            let zero = chance(&mut sim.schedule.rng, sim.scenario.zero_write_share);
            self.version += 1;
            let version = if zero { 0 } else { self.version };
            let entry = &mut sim.tables.live_mut(place).ptes[page as usize];
            entry.version = version;
            entry.from_device = false;
            // A write breaks the sharing with a fork's child (copy-on-write), and lifts
            // the protection (a protected page faults first, unless protection is
            // asynchronous: then the kernel lifts it, and the page scans as written).
            entry.shared = false;
            entry.write_protected = false;
            sim.tables.live_mut(place).oracle.written(page as usize, version, pte.tainted);
            sim.findings.coverage.writes += 1;
        } else {
            let oracle = &mut sim.tables.live_mut(place).oracle;
            let expected = oracle.last(page as usize);
            if oracle.acceptable(page as usize, pte.version) {
                oracle.seen(page as usize, pte.version);
                sim.findings.coverage.reads_verified += 1;
                sim.findings.coverage.swap_ins_verified += pte.from_device as u64;
            } else {
                let message = format!("page {place}:{page} read v{}, last written v{expected}", pte.version);
                sim.findings.corruption(sim.schedule.step, message);
            }
        }
    }

    // ----------------------------------------------------------------- events

    /// A handler reads the program's REMOVE event (and, in the same lock hold, tells
    /// the core).
    pub fn read_discard(&mut self, sim: &mut Sim) {
        self.discards.read(sim);
    }

    pub fn step_discard(&mut self, sim: &mut Sim) {
        self.discards.step(sim);
    }

    pub fn step_fork(&mut self, sim: &mut Sim) {
        self.forks.step(sim, self.discards.place(), self.sweeping);
    }

    /// A program frees a region it no longer uses, and maps another (perhaps at the same
    /// addresses, as `mmap` may).
    pub fn step_churn(&mut self, sim: &mut Sim) {
        let churn = sim.scenario.region_churn_steps;
        self.next_churn_step = sim.step() + churn / 2 + below(&mut sim.schedule.rng, churn.max(1));
        let idle: Vec<usize> = (0..REGION_PLACES)
            .filter(|&place| sim.tables.region(place).is_some_and(|region| region.busy == 0))
            .collect();
        let live = sim.tables.live_count();
        let mut freed = None;
        // The next region is about the size of the one freed: the working set stays
        // about as the scenario sized it against the device.
        let mut pages = 32 + below(&mut sim.schedule.rng, 600);
        if !idle.is_empty() && live > 1 || live == REGION_PLACES {
            if let Some(&place) = idle.get(below(&mut sim.schedule.rng, idle.len().max(1) as u64) as usize) {
                let region = sim.tables.remove(place);
                pages = (region.pages() / 2 + below(&mut sim.schedule.rng, region.pages())).max(16);
                sim.agents.forget(region.owner);
                sim.pager.core.region_remove(region.owner, sim.now_ns());
                sim.after_lock_step();
                sim.findings.coverage.regions_freed += 1;
                freed = Some(place);
            }
        }
        map_region(sim, pages, freed);
    }

    /// The budget moves (as `znswap run` moves it with the program's unpaged memory):
    /// anywhere from the smallest the core takes up to the scenario's.
    pub fn step_budget(&mut self, sim: &mut Sim) {
        assert!(!sim.pager.locked(), "the budget changes under the state lock, taken here");
        let steps = sim.scenario.budget_change_steps;
        self.next_budget_step = sim.step() + steps / 2 + below(&mut sim.schedule.rng, steps.max(1));
        let min = sim.pager.core.budget_pages_min();
        let budget = min + below(&mut sim.schedule.rng, sim.scenario.budget_pages.saturating_sub(min) + 1);
        sim.pager.core.set_budget(budget).expect("a budget within the core's bounds");
        // With two tenants, each may be held to a budget of its own within it (as the
        // daemon holds each program to what it granted), or to none.
        if sim.scenario.tenants > 1 {
            for tenant in 0..sim.scenario.tenants {
                set_tenant_limits(sim, tenant, min, budget);
            }
        }
        sim.after_lock_step();
        sim.findings.coverage.budget_changes += 1;
    }

    // ---------------------------------------------------------------- the end

    /// Stops new random accesses; each application thread then reads every page of its
    /// share of the regions once.
    pub fn start_sweep(&mut self, sim: &mut Sim) {
        self.sweeping = true;
        sim.device.stop_errors();
        // Write limits go: the sweep reads every page back, and a tenant held to a few
        // MiB/s of a simulated device whose GC moves its pages over and over (charged to
        // it) would take simulated minutes to swap its way through.
        if sim.findings.coverage.write_limit_changes > 0 {
            for tenant in 0..sim.scenario.tenants {
                sim.pager.core.set_tenant_write_limit(tenant, None, sim.now_ns()).expect("a tenant of the core");
            }
            sim.after_lock_step();
        }
        self.forks.release_unserved(sim);
        for app in &mut self.threads {
            app.sweep = Some((0, 0));
        }
    }

    pub fn sweep_done(&self) -> bool {
        self.threads.iter().all(|app| matches!(app.phase, AppPhase::Finished))
    }

    /// Threads asleep in the kernel far longer than any access takes: nothing will wake
    /// them (a hang).
    pub fn hung_threads(&self, step: u64, steps_max: u64) -> Vec<usize> {
        (0..self.threads.len())
            .filter(|&index| {
                let app = &self.threads[index];
                matches!(app.phase, AppPhase::Blocked { .. }) && step - app.started_step > steps_max
            })
            .collect()
    }

    /// A hung thread is reported, and stops.
    pub fn stop_hung(&mut self, index: usize, sim: &mut Sim) {
        let AppPhase::Blocked { place, page, write } = self.threads[index].phase else {
            unreachable!("a hung thread is asleep in the kernel")
        };
        sim.violation(format!("thread {index} asleep on {place}:{page} (write {write}) and never woken"));
        sim.tables.live_mut(place).busy -= 1;
        self.threads[index].phase = AppPhase::Finished;
    }

    /// Threads still asleep in the kernel, or faults still waiting, once all else is
    /// done: hangs.
    pub fn stuck(&self) -> Vec<String> {
        let mut stuck = Vec::new();
        for (index, app) in self.threads.iter().enumerate() {
            match &app.phase {
                AppPhase::Finished => {}
                AppPhase::Blocked { place, page, .. } => stuck.push(format!("thread {index} asleep on {place}:{page}")),
                _ => stuck.push(format!("thread {index} not finished")),
            }
        }
        stuck
    }

    /// The faults application threads are resolving, for a hang's report.
    pub fn faulting(&self) -> Vec<String> {
        self.threads
            .iter()
            .filter_map(|app| match (&app.phase, app.fault.as_deref()) {
                (AppPhase::Faulting { .. }, Some(slot)) => Some(slot.describe()),
                _ => None,
            })
            .collect()
    }
}

/// The program maps a new region of `pages` pages in a free place (perhaps `reuse`, the
/// place of the one just freed); false if none is free or the core refuses it (no owner
/// id yet).
pub fn map_region(sim: &mut Sim, pages: u64, reuse: Option<usize>) -> bool {
    let free = sim.tables.free_places();
    if free.is_empty() {
        return false;
    }
    let rng = &mut sim.schedule.rng;
    let place = match reuse {
        Some(place) if sim.tables.is_free(place) && chance(rng, 0.5) => {
            sim.findings.coverage.addresses_reused += 1;
            place
        }
        _ => free[below(rng, free.len() as u64) as usize],
    };
    let base = PageTables::base(place);
    let tenant = below(rng, sim.scenario.tenants as u64) as u32;
    let shadow = (sim.scenario.park_pages > 0).then_some(base + SHADOW_OFFSET);
    match sim.pager.core.region_add(base, pages, tenant, shadow) {
        Ok(owner) => {
            sim.tables.insert(place, ModelRegion::new(owner, base, pages as usize));
            sim.after_lock_step();
            true
        }
        Err(_) => {
            sim.findings.coverage.regions_refused += 1;
            false
        }
    }
}

/// A tenant's own budget, between `min` and `budget`, or none; now and then its write
/// limit and its swap limit too.
fn set_tenant_limits(sim: &mut Sim, tenant: u32, min: u64, budget: u64) {
    let rng = &mut sim.schedule.rng;
    let own = match below(rng, 3) {
        0 => None,
        _ => Some(min + below(rng, budget.saturating_sub(min) + 1)),
    };
    sim.pager.core.set_tenant_budget(tenant, own).expect("a tenant budget within the core's bounds");
    sim.findings.coverage.tenant_budget_changes += 1;
    // A share of the device's writes (the daemon's --write-limit): from one that holds a
    // tenant back most of the time to one that never does. (At 4 MiB/s a zone's GC moves
    // charged at once hold a tenant back for a fraction of the simulated second-odd an
    // access may take.)
    if below(rng, 2) == 0 {
        let rate = match below(rng, 4) {
            0 => None,
            1 => Some(4 << 20),
            2 => Some(16 << 20),
            _ => Some(256 << 20),
        };
        sim.pager.core.set_tenant_write_limit(tenant, rate, sim.schedule.now_ns).expect("a tenant of the core");
        sim.findings.coverage.write_limit_changes += 1;
    }
    // A swap limit (the daemon's --swap-limit), from a few batches of slots to none: at
    // it, the tenant's faults go past its budget.
    if below(rng, 4) == 0 {
        let slots = match below(rng, 3) {
            0 => None,
            _ => Some(16 + below(rng, 512)),
        };
        sim.pager.core.set_tenant_swap_limit(tenant, slots).expect("a tenant of the core");
        sim.findings.coverage.swap_limit_changes += 1;
    }
}
