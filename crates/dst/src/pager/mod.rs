//! Deterministic simulation of the live pager: the pager core (`znswap-pager-core`) and
//! the engine beneath it, driven by application threads, fault handlers, evictors and
//! I/O threads whose steps the seed interleaves, over a model of the page tables and a
//! fault-injecting zoned device. The oracle is every page's last written version: each
//! read must see exactly it, or find the page poisoned after the device really lost it.
//! A run also checks, every few thousand steps, the page tables against the core's page
//! states (a page on its way out is never writable unless the engine knows it was
//! written; a page awaiting its discard is never writable; a clean swap-cached page is
//! write-protected) and the core's and the engine's invariants.

mod agents;
mod checks;
mod coverage;
mod device;
mod discard;
mod findings;
mod fork;
mod oracle;
mod page_tables;
mod program;
mod report;
mod scenario;
mod schedule;
mod shell;
mod summary;
mod threads;
mod world;

use znswap_pager_core::{CoreConfig, PagerCore};

pub use coverage::Coverage;
pub use report::PagerDstReport;
pub use scenario::{Access, PagerFaultMode, PagerFaults, PagerScenario};
pub use summary::PagerCoverage;
use world::World;

#[derive(Clone, Debug)]
pub struct PagerDstOptions {
    pub seed: u64,
    /// Steps of the run before the final sweep (which reads every page once).
    pub steps: u64,
    /// Check the page tables and invariants every this many steps (0: only at the end).
    pub check_every_steps: u64,
    pub scenario: Option<PagerScenario>,
}

impl PagerDstOptions {
    pub fn new(seed: u64, steps: u64) -> PagerDstOptions {
        PagerDstOptions { seed, steps, check_every_steps: 20_000, scenario: None }
    }
}

/// Steps the final sweep may take at most, per page swept.
const SWEEP_STEPS_PER_PAGE: u64 = 4_000;

/// Runs one seed. Never panics: a panic in the core or the model becomes a violation
/// naming the seed and how to replay it.
pub fn run(options: &PagerDstOptions) -> PagerDstReport {
    let mut rng = crate::scenario::rng(options.seed ^ 0x9a9e_5eed);
    let scenario = options.scenario.clone().unwrap_or_else(|| seed_scenario(options.seed, &mut rng));
    let core = match PagerCore::new(scenario.geometry, scenario.chunk_footer, core_config(&scenario)) {
        Ok(core) => core,
        Err(error) => {
            return report(options, scenario, None, vec![format!("the core refused the scenario: {error}")]);
        }
    };
    let moves_rng = crate::scenario::rng(options.seed ^ 0x3073_e5ed);
    let late_rng = crate::scenario::rng(options.seed ^ 0x1a7e_a9e7);
    let mut world = World::new(scenario.clone(), core, rng, moves_rng, late_rng, options.steps);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drive(&mut world, options)));
    if let Err(panic) = outcome {
        world.violation(format!("panic: {}", crate::sim::panic_message(&panic)));
    }
    let violations = world.findings().violations.clone();
    report(options, scenario, Some(&world), violations)
}

/// A seed's random scenario, drawn from `rng`, with the knobs newer than
/// `PagerScenario::random` drawn from streams of their own (so that adding one left the
/// seeds' other draws as they were).
fn seed_scenario(seed: u64, rng: &mut crate::scenario::Rng) -> PagerScenario {
    let mut scenario = PagerScenario::random(rng);
    let mut own = crate::scenario::rng(seed ^ 0xb0d6_e7c4);
    scenario.budget_change_steps = [0, 0, 30_000, 300_000][crate::scenario::below(&mut own, 4) as usize];
    // Half the seeds park victims on an inactive list of an eighth of the budget up
    // to twice it (more than the budget: every victim waits there).
    let budget = scenario.budget_pages;
    scenario.park_pages =
        [0, 0, 0, (budget / 8).max(1), budget / 2, 2 * budget][crate::scenario::below(&mut own, 6) as usize];
    // Half the seeds that park with handler threads see writes asynchronously.
    let mut wp = crate::scenario::rng(seed ^ 0x3a5c_0a5c);
    scenario.wp_async = scenario.park_pages > 0
        && matches!(scenario.fault_mode, PagerFaultMode::HandlerThreads(_))
        && crate::scenario::below(&mut wp, 2) == 0;
    // Half the seeds that park meet a kernel that fails some moves it did.
    let mut moves = crate::scenario::rng(seed ^ 0x0e0e_57a1);
    if scenario.park_pages > 0 && crate::scenario::below(&mut moves, 2) == 0 {
        scenario.faults.misreported_moves = [0.01, 0.1][crate::scenario::below(&mut moves, 2) as usize];
    }
    // A quarter of the seeds seal their pages, and most of those have some altered
    // on the device.
    let mut sealing = crate::scenario::rng(seed ^ 0x5ea1_5ea1);
    if crate::scenario::below(&mut sealing, 4) == 0 {
        scenario.encrypt = true;
        scenario.faults.altered_pages = [0, 1, 3, 8][crate::scenario::below(&mut sealing, 4) as usize];
    }
    // Half the seeds whose pages a served process's agent could drop (handler
    // threads, no parking) meet agents that answer some discards late.
    let mut late = crate::scenario::rng(seed ^ 0x1a7e_d0c5);
    if scenario.park_pages == 0
        && matches!(scenario.fault_mode, PagerFaultMode::HandlerThreads(_))
        && crate::scenario::below(&mut late, 2) == 0
    {
        scenario.faults.late_discards = [0.05, 0.3][crate::scenario::below(&mut late, 2) as usize];
    }
    // Half the seeds served as processes are (handler threads, no parking) set aside the
    // faults their tenants' write limits hold, with one to four spare slots (so that
    // some find none and wait in their handler).
    let mut aside = crate::scenario::rng(seed ^ 0xa51d_e5e7);
    if scenario.park_pages == 0
        && matches!(scenario.fault_mode, PagerFaultMode::HandlerThreads(_))
        && crate::scenario::below(&mut aside, 2) == 0
    {
        scenario.aside_spares = 1 + crate::scenario::below(&mut aside, 4) as usize;
    }
    // A quarter of the seeds evict as if no page had come back soon (the hand's passes
    // off: `CoreConfig::refault_passes`).
    let mut refaults = crate::scenario::rng(seed ^ 0x4ef4_0175);
    scenario.refault_passes = crate::scenario::below(&mut refaults, 4) != 0;
    // Reference sampling's period: as the pager's default on half the seeds, every
    // revolution (sampling as it was) or up to 2 on a quarter each.
    let mut sampling = crate::scenario::rng(seed ^ 0x5a3b_11e7);
    scenario.sampling_period_max = [8, 8, 1, 2][crate::scenario::below(&mut sampling, 4) as usize];
    scenario
}

/// The core's configuration for a scenario.
fn core_config(scenario: &PagerScenario) -> CoreConfig {
    CoreConfig {
        slack_pages: scenario.slack_pages,
        evict_batch_pages: scenario.evict_batch_pages,
        reference_sampling: scenario.reference_sampling,
        sampling_period_max: scenario.sampling_period_max,
        readahead_pages: scenario.readahead_pages,
        park_pages: scenario.park_pages,
        regions_max: 2 * scenario.region_pages.len() as u32 + 8,
        tenants: scenario.tenants,
        policy: scenario.policy,
        encrypt: scenario.encrypt,
        wp_async: scenario.wp_async,
        refault_passes: scenario.refault_passes,
        ..CoreConfig::new(scenario.budget_pages)
    }
}

/// The run: the regions mapped, the steps, then the final sweep, checking as it goes.
fn drive(world: &mut World, options: &PagerDstOptions) {
    let region_pages = world.scenario().region_pages.clone();
    for pages in region_pages {
        if !world.add_region(pages, None) {
            world.violation(format!("a region of {pages} pages was refused at the start"));
        }
    }
    // (Steps may jump ahead when every actor waits on a timer: checks go by distance.)
    let mut next_check = options.check_every_steps;
    while world.step() < options.steps && world.passing() {
        if !world.run_step() {
            break;
        }
        if options.check_every_steps > 0 && world.step() >= next_check {
            next_check = world.step() + options.check_every_steps;
            world.check();
            world.check_hangs();
        }
    }
    world.start_sweep();
    let deadline = world.step() + SWEEP_STEPS_PER_PAGE * world.pages().max(1) + 1_000_000;
    let mut next_check = world.step() + 10_000;
    while !world.sweep_done() && world.step() < deadline && world.passing() {
        if !world.run_step() {
            break;
        }
        if world.step() >= next_check {
            next_check = world.step() + 10_000;
            world.check_hangs();
        }
    }
    if world.passing() {
        let stuck = world.stuck();
        if !stuck.is_empty() && std::env::var_os("ZNSWAP_PAGER_TRACE").is_some() {
            eprintln!("{}", world.describe());
        }
        for stuck in stuck {
            world.violation(format!("the final sweep did not finish: {stuck}"));
        }
    }
    world.check();
}

fn report(
    options: &PagerDstOptions,
    scenario: PagerScenario,
    world: Option<&World>,
    mut violations: Vec<String>,
) -> PagerDstReport {
    if !violations.is_empty() {
        violations.push(format!("replay with `znswap dst --pager --seed {} --ops {}`", options.seed, options.steps));
    }
    let engine_stats = world.map(|world| world.core().engine().stats().clone()).unwrap_or_default();
    PagerDstReport {
        seed: options.seed,
        ops: world.map_or(0, |world| world.step()),
        pages_verified: world.map_or(0, |world| world.findings().coverage.reads_verified),
        swap_ins_verified: world.map_or(0, |world| world.findings().coverage.swap_ins_verified),
        lost: world.map_or(0, |world| world.findings().coverage.lost_observed),
        corrupted: world.map_or(0, |world| world.findings().corrupted),
        violations,
        gc_runs: engine_stats.gc_runs,
        waf: engine_stats.waf(),
        zones_held_max: engine_stats.zones_held_max,
        resets_deferred: engine_stats.resets_deferred,
        core: world.map(|world| world.core().stats()).unwrap_or_default(),
        coverage: world
            .map(|world| Coverage {
                tenant_victims: world.core().stats().tenant_victims,
                swap_limit_overruns: world.core().stats().swap_limit_overruns,
                write_throttled_ms: (0..world.scenario().tenants)
                    .map(|tenant| world.core().tenant_figures(tenant, world.now_ns()).throttled_ns)
                    .sum::<u64>()
                    / 1_000_000,
                inherited_reads: world.core().stats().inherited_reads,
                ..world.findings().coverage.clone()
            })
            .unwrap_or_default(),
        scenario,
    }
}
