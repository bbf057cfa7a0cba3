//! The oracle's checks that span the parts of the world: every few thousand steps, the
//! page tables against the core's page states (a page on its way out is never writable
//! unless the engine knows it was written; a page awaiting its discard is never
//! writable; a clean swap-cached page is write-protected) and the core's and the
//! engine's invariants; and at each page found poisoned, that the device really lost
//! it.

use znswap_core::PageState as EnginePage;
use znswap_pager_core::PageState;

use super::page_tables::{ModelRegion, Pte, REGION_PLACES};
use super::shell::Sim;

/// Problems reported per region and check, at most.
const PROBLEMS_PER_REGION_MAX: usize = 4;

/// The page tables against the core's page states, and the core's and the engine's own
/// invariants. Panics are caught by the caller.
pub fn check(sim: &mut Sim) {
    sim.pager.core.check_invariants();
    sim.pager.core.engine().check_invariants();
    for place in 0..REGION_PLACES {
        let Some(region) = sim.tables.region(place) else { continue };
        let mut problems = Vec::new();
        for (page, pte) in region.ptes.iter().enumerate() {
            problems.extend(page_problems(sim, region, place, page, pte));
        }
        for problem in problems.into_iter().take(PROBLEMS_PER_REGION_MAX) {
            sim.violation(problem);
        }
    }
}

/// What is wrong with one page of `region`: its entry against its state in the core
/// and the engine, its content (and its parked copy's) against the oracle.
fn page_problems(sim: &Sim, region: &ModelRegion, place: usize, page: usize, pte: &Pte) -> Vec<String> {
    let core = &sim.pager.core;
    let mut problems = Vec::new();
    let state = core.page_state(region.owner, page as u64).expect("a live region's page");
    let engine = core.engine().page_state(region.owner, page as u64).expect("registered");
    let writable = pte.mapped && !pte.write_protected;
    let in_window = region.oracle.in_window(page);
    let zapped = region.zapped[page] && !pte.mapped && !pte.poisoned;
    let agrees = in_window
        || zapped
        || match state {
            PageState::Unmapped | PageState::Removed => !pte.mapped && !pte.poisoned,
            PageState::Resident | PageState::Referenced | PageState::Evicting { .. } => pte.mapped,
            // Appendix A: a page on its way out is writable only once a write has told
            // the engine (which then drops the slot it writes).
            PageState::Writing => {
                pte.mapped && (!writable || matches!(engine, EnginePage::SwapOutInFlight { dirtied: true, .. }))
            }
            // Never writable: a write there would be discarded.
            PageState::Dropping => !writable,
            PageState::Poisoned => pte.poisoned,
            // At the shadow, nothing here.
            PageState::Parked | PageState::WritingParked => !pte.mapped && !pte.poisoned && region.shadow[page].mapped,
            // Here or at the shadow, as far as the move went.
            PageState::Parking { .. } => pte.mapped || region.shadow[page].mapped,
            // Discarded, its move perhaps under way: after the zap nothing is here (its
            // faults wait for the settling).
            PageState::ParkingRemoved => !pte.mapped && !pte.poisoned,
        };
    // A clean page whose slot is its swap cache must fault on its first write (with
    // asynchronous write protection no write faults: its digest decides when it is
    // parked, and the oracle sees any page read back wrong).
    let cache_guarded = sim.scenario.wp_async || !(writable && matches!(engine, EnginePage::SwapCached { .. }));
    if !agrees || !cache_guarded {
        problems.push(format!("page {place}:{page} is {state:?} / {engine:?} with {pte:?}"));
    }
    let oracle = &region.oracle;
    if pte.mapped && !oracle.acceptable(page, pte.version) && !oracle.is_lost(page) {
        problems.push(format!("page {place}:{page} holds v{}, last written v{}", pte.version, oracle.last(page)));
    }
    let shadow = region.shadow[page];
    if matches!(state, PageState::Parked | PageState::WritingParked)
        && !oracle.acceptable(page, shadow.version)
        && !oracle.is_lost(page)
    {
        problems.push(format!(
            "page {place}:{page} is parked as v{}, last written v{}",
            shadow.version,
            oracle.last(page)
        ));
    }
    problems
}

/// A touch of a poisoned page: the device must really have lost its last version.
pub fn observe_lost(sim: &mut Sim, place: usize, page: u64) {
    let region = sim.tables.live(place);
    if region.oracle.is_lost(page as usize) {
        return;
    }
    let expected = region.oracle.last(page as usize);
    let versions = region.oracle.lost_candidates(page as usize);
    let engine = sim.pager.core.engine().page_state(region.owner, page);
    let lost = sim.device.lost_one_of(versions, region.owner, region.parent_owner, page);
    if engine != Ok(EnginePage::Lost) || !lost {
        sim.violation(format!(
            "page {place}:{page} poisoned (engine: {engine:?}), but v{expected} was not lost with an offline zone"
        ));
    }
    sim.tables.live_mut(place).oracle.mark_lost(page as usize);
    sim.findings.coverage.lost_observed += 1;
}
