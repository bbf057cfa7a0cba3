//! The pager DST's world, composed of its parts: the pager (its core and its threads,
//! [`Pager`]), the program it serves ([`Program`]), the kernel's page tables
//! ([`PageTables`]), the device ([`Device`]), the served processes' late agents
//! ([`LateAgents`]), what the run found ([`Findings`]) and the schedule that picks,
//! step by step, which actor steps next ([`Schedule`]).
//!
//! The world owns the scheduling: each step it injects the device faults due, lets the
//! late agents zap, picks a runnable actor with the seed's stream (or lets time pass to
//! the first timer when every actor waits), steps it through [`Sim`], and delivers the
//! kernel's wake-ups.

use znswap_pager_core::PagerCore;

use super::agents::LateAgents;
use super::checks;
use super::device::Device;
use super::findings::Findings;
use super::page_tables::PageTables;
use super::program::{map_region, Program};
use super::scenario::PagerScenario;
use super::schedule::{Actor, Schedule};
use super::shell::Sim;
use super::threads::Pager;
use crate::scenario::{below, Rng};

pub struct World {
    scenario: PagerScenario,
    schedule: Schedule,
    pager: Pager,
    program: Program,
    tables: PageTables,
    device: Device,
    agents: LateAgents,
    findings: Findings,
}

/// Whether `ZNSWAP_PAGER_TRACE` asks for what every actor is doing at a hang.
fn tracing() -> bool {
    std::env::var_os("ZNSWAP_PAGER_TRACE").is_some()
}

impl World {
    /// `rng` is the world's stream; `moves_rng` and `late_rng` draw the misreported
    /// moves and the late agents (streams of their own, so that seeds without them run
    /// as they would with none).
    pub fn new(
        scenario: PagerScenario,
        core: PagerCore,
        mut rng: Rng,
        moves_rng: Rng,
        late_rng: Rng,
        steps: u64,
    ) -> World {
        let device = Device::new(&core, &scenario, &mut rng, steps);
        let pager = Pager::new(core, &scenario);
        World {
            schedule: Schedule::new(rng),
            pager,
            program: Program::new(&scenario),
            tables: PageTables::new(moves_rng, scenario.faults.misreported_moves),
            device,
            agents: LateAgents::new(late_rng, scenario.faults.late_discards),
            findings: Findings::default(),
            scenario,
        }
    }

    /// The program, and the rest of the world as its steps see it.
    fn parts(&mut self) -> (&mut Program, Sim<'_>) {
        let sim = Sim {
            pager: &mut self.pager,
            tables: &mut self.tables,
            device: &mut self.device,
            agents: &mut self.agents,
            findings: &mut self.findings,
            schedule: &mut self.schedule,
            scenario: &self.scenario,
            read: Vec::new(),
        };
        (&mut self.program, sim)
    }

    pub fn step(&self) -> u64 {
        self.schedule.step
    }

    pub fn now_ns(&self) -> u64 {
        self.schedule.now_ns
    }

    pub fn core(&self) -> &PagerCore {
        &self.pager.core
    }

    pub fn scenario(&self) -> &PagerScenario {
        &self.scenario
    }

    pub fn findings(&self) -> &Findings {
        &self.findings
    }

    /// No violation so far.
    pub fn passing(&self) -> bool {
        self.findings.violations.is_empty()
    }

    pub fn violation(&mut self, message: String) {
        self.findings.violation(self.schedule.step, message);
    }

    /// Pages of all regions.
    pub fn pages(&self) -> u64 {
        self.tables.pages()
    }

    /// Maps a new region of `pages` pages in a free place; false if none is free or the
    /// core refuses it (no owner id yet).
    pub fn add_region(&mut self, pages: u64, reuse: Option<usize>) -> bool {
        map_region(&mut self.parts().1, pages, reuse)
    }

    // -------------------------------------------------------------- scheduling

    /// Runs one step of a runnable actor; false when nothing can ever run again (every
    /// thread asleep with nothing to wake it: the caller reports the hang). When every
    /// actor waits on a timer, time passes to the first.
    pub fn run_step(&mut self) -> bool {
        self.schedule.advance();
        let coverage = &mut self.findings.coverage;
        self.device.inject_due(self.schedule.step, &self.tables, &self.pager.core, &mut self.schedule.rng, coverage);
        if self.agents.any() {
            self.parts().1.late_agents_zap();
        }
        let mut runnable = self.runnable();
        if runnable.is_empty() {
            let Some(until) = self.first_timer() else { return false };
            self.schedule.sleep_until(until);
            runnable = self.runnable();
        }
        if runnable.is_empty() {
            return false;
        }
        let actor = runnable[below(&mut self.schedule.rng, runnable.len() as u64) as usize];
        self.step_actor(actor);
        let wakes = self.tables.take_wakes();
        self.program.wake(&wakes, &self.tables);
        true
    }

    /// The actors that may step, in a fixed order (the seed's draw picks among them).
    fn runnable(&self) -> Vec<Actor> {
        let schedule = &self.schedule;
        let mut runnable: Vec<Actor> = Vec::with_capacity(16);
        runnable.extend(self.program.runnable_threads(schedule, self.pager.room_epoch()));
        let event_waiting = self.tables.has_events() || self.program.discard_queued();
        runnable.extend(self.pager.runnable_handlers(schedule, event_waiting).map(Actor::Handler));
        runnable.extend(self.pager.runnable_evictors(schedule).map(Actor::Evictor));
        runnable.extend(self.pager.runnable_ios(schedule).map(Actor::Io));
        runnable.extend(self.program.due_events(schedule.step, self.pager.mappings_in_use()));
        runnable
    }

    /// The earliest step a waiting actor's timer fires at.
    fn first_timer(&self) -> Option<u64> {
        self.program.timers().chain(self.pager.timers()).min()
    }

    fn step_actor(&mut self, actor: Actor) {
        if let Actor::App(index) = actor {
            let steps_max = self.program.access_steps_max(&self.findings);
            if self.program.access_gives_up(index, self.schedule.step, steps_max) && tracing() {
                eprintln!("{}", self.describe());
            }
        }
        let (program, mut sim) = self.parts();
        match actor {
            Actor::App(index) => program.step_app(index, &mut sim),
            Actor::Handler(index) => {
                if !sim.step_handler(index) {
                    program.read_discard(&mut sim);
                }
            }
            Actor::Evictor(index) => sim.step_evictor(index),
            Actor::Io(index) => sim.step_io(index),
            Actor::Churn => program.step_churn(&mut sim),
            Actor::ProgramDiscard => program.step_discard(&mut sim),
            Actor::Fork => program.step_fork(&mut sim),
            Actor::Budget => program.step_budget(&mut sim),
        }
    }

    // ----------------------------------------------------------------- the end

    /// Stops new random accesses; each application thread then reads every page of its
    /// share of the regions once.
    pub fn start_sweep(&mut self) {
        let (program, mut sim) = self.parts();
        program.start_sweep(&mut sim);
    }

    pub fn sweep_done(&self) -> bool {
        self.program.sweep_done()
    }

    /// The page tables against the core's page states, and the core's and the engine's
    /// own invariants. Panics are caught by the caller.
    pub fn check(&mut self) {
        checks::check(&mut self.parts().1);
    }

    /// Threads asleep in the kernel far longer than any access takes: nothing will wake
    /// them (a hang). Each is reported once, and stops.
    pub fn check_hangs(&mut self) {
        let steps_max = self.program.access_steps_max(&self.findings);
        for index in self.program.hung_threads(self.schedule.step, steps_max) {
            if tracing() {
                eprintln!("{}", self.describe());
            }
            let (program, mut sim) = self.parts();
            program.stop_hung(index, &mut sim);
        }
    }

    /// What every actor is doing, for a hang's report.
    pub fn describe(&self) -> String {
        let faulting = self.program.faulting();
        self.pager.describe(self.schedule.step, &self.scenario, self.tables.events_len(), &faulting)
    }

    /// Threads still asleep in the kernel, or faults still waiting, once all else is
    /// done: hangs.
    pub fn stuck(&self) -> Vec<String> {
        self.program.stuck()
    }
}
