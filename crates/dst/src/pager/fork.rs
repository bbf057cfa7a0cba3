//! The program's forks. At a fork the core holds the slots of the parent's pages
//! (`ForkHold`: their zones are not reset), and the child's snapshot is recorded: what
//! each page it would fault on must read. The child then reads a page now and then while
//! the parent runs on, until the hold is released. Half the forks' children are served
//! by the pager too (a daemon's tenant that forks): a region of their own that reads the
//! parent's pages from its held slots.

use znswap_pager_core::{ChildPage, ForkHold, PagerCore};

use super::device::ChildSlot;
use super::oracle::PageOracle;
use super::page_tables::{ModelRegion, PageTables, Pte, REGION_PLACES};
use super::shell::Sim;
use crate::scenario::{below, chance};

/// A page of the child's snapshot: where the child reads it, the versions it may hold,
/// and for a parked page what its copy of the shadow page held at the fork.
#[derive(Clone, Copy)]
struct ChildRead {
    place: usize,
    page: u64,
    child: ChildPage,
    allowed: [Option<u64>; 4],
    shadow: Option<u64>,
}

/// A forked child's snapshot: what each page it would fault on must read.
struct ForkModel {
    hold: ForkHold,
    pages: Vec<ChildRead>,
    /// The place of the child's region, when the pager serves the child too: removed
    /// (the child exited) before the hold is let go.
    served: Option<usize>,
    release_step: u64,
    next_read_step: u64,
}

pub struct Forks {
    fork: Option<ForkModel>,
    next_step: u64,
}

impl Forks {
    pub fn new(first_step: u64) -> Forks {
        Forks { fork: None, next_step: first_step }
    }

    /// A fork is due, or the child's next read (or its release).
    pub fn due(&self, step: u64, sweeping: bool) -> bool {
        match &self.fork {
            None => step >= self.next_step && !sweeping,
            Some(fork) => step >= fork.next_read_step,
        }
    }

    /// The step the child reads next at.
    pub fn timer(&self) -> Option<u64> {
        self.fork.as_ref().map(|fork| fork.next_read_step)
    }

    /// The program forks (`discarding`: the place of a region a discard is under way
    /// in); or the child reads a page; or, its time come, the child goes and the hold
    /// is released. (A served child is swept with the rest: its hold stays to the end.)
    pub fn step(&mut self, sim: &mut Sim, discarding: Option<usize>, sweeping: bool) {
        let Some(mut fork) = self.fork.take() else {
            self.fork = Some(fork_now(sim, discarding));
            return;
        };
        if sim.step() >= fork.release_step && !(sweeping && fork.served.is_some()) {
            if !remove_served_child(sim, &mut fork) {
                self.fork = Some(fork);
                return;
            }
            sim.pager.core.fork_release(fork.hold, sim.now_ns());
            sim.after_lock_step();
            let interval = sim.scenario.fork_steps;
            self.next_step = sim.step() + interval / 2 + below(&mut sim.schedule.rng, interval.max(1));
            return;
        }
        fork.next_read_step = sim.step() + 1 + below(&mut sim.schedule.rng, 40);
        if !fork.pages.is_empty() {
            let read = fork.pages[below(&mut sim.schedule.rng, fork.pages.len() as u64) as usize];
            child_read(sim, read);
        }
        self.fork = Some(fork);
    }

    /// The final sweep: a child the pager does not serve goes (a served child's region
    /// reads its parent's held slots: it is swept too, and the hold stays).
    pub fn release_unserved(&mut self, sim: &mut Sim) {
        if let Some(fork) = self.fork.take_if(|fork| fork.served.is_none()) {
            sim.pager.core.fork_release(fork.hold, sim.now_ns());
            sim.after_lock_step();
        }
    }
}

/// The fork: the hold taken, and the child's snapshot of every region recorded.
fn fork_now(sim: &mut Sim, discarding: Option<usize>) -> ForkModel {
    let hold = sim.pager.core.fork_hold();
    sim.after_lock_step();
    sim.findings.coverage.forks += 1;
    let mut pages = Vec::new();
    let mut problems = Vec::new();
    for place in 0..REGION_PLACES {
        let core = &sim.pager.core;
        let Some(region) = sim.tables.region_mut(place) else { continue };
        problems.extend(snapshot_problems(core, region, place));
        // The parent's private pages are shared with the child now.
        for pte in region.ptes.iter_mut().chain(region.shadow.iter_mut()) {
            pte.shared |= pte.mapped;
        }
        pages.extend(child_reads(core, region, place, &mut problems));
    }
    for problem in problems {
        sim.violation(problem);
    }
    let served = if chance(&mut sim.schedule.rng, 0.5) { add_served_child(sim, discarding) } else { None };
    let release_step = sim.step() + 2_000 + below(&mut sim.schedule.rng, 30_000);
    let next_read_step = sim.step() + 1 + below(&mut sim.schedule.rng, 40);
    ForkModel { hold, pages, served, release_step, next_read_step }
}

/// A daemon's snapshot of the region for a served child (`child_pages`) names what
/// `child_page` names for each page the child may miss.
fn snapshot_problems(core: &PagerCore, region: &ModelRegion, place: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let snapshot = core.child_pages(region.owner);
    for (page, pte) in region.ptes.iter().enumerate() {
        if pte.mapped || pte.poisoned || region.oracle.is_lost(page) {
            continue;
        }
        let listed = snapshot.binary_search_by_key(&(page as u64), |&(page, _)| page).ok();
        let listed = listed.map(|at| snapshot[at].1);
        let wanted = match core.child_page(region.address(page as u64)) {
            child @ (ChildPage::Slot { .. } | ChildPage::Lost) => Some(child),
            ChildPage::Zero => None,
            ChildPage::Shadow { .. } | ChildPage::NotOurs => listed,
        };
        if listed != wanted {
            problems.push(format!("the snapshot names {listed:?} for {place}:{page}, not {wanted:?}"));
        }
    }
    problems
}

/// The pages of `region` the child would fault on (the child gets a copy of what is
/// mapped, a poison marker too), with what each must read.
fn child_reads(core: &PagerCore, region: &ModelRegion, place: usize, problems: &mut Vec<String>) -> Vec<ChildRead> {
    let mut reads = Vec::new();
    for (page, pte) in region.ptes.iter().enumerate() {
        if pte.mapped || pte.poisoned || region.oracle.is_lost(page) {
            continue;
        }
        // What a read of the parent's would accept now.
        let allowed = region.oracle.allowed(page);
        let child = core.child_page(region.address(page as u64));
        let shadow = match child {
            ChildPage::Shadow { address } => {
                let shadow = region.shadow[page];
                if address != region.shadow_address(page as u64) {
                    problems.push(format!("the child's page {place}:{page} named {address:#x}"));
                } else if !shadow.mapped {
                    problems.push(format!("the child's page {place}:{page} is parked at nothing"));
                }
                Some(shadow.version)
            }
            _ => None,
        };
        reads.push(ChildRead { place, page: page as u64, child, allowed, shadow });
    }
    reads
}

/// The child reads a page of its snapshot: it must be a version the parent's page held
/// at the fork (or lost with it).
fn child_read(sim: &mut Sim, read: ChildRead) {
    let ChildRead { place, page, child, allowed, shadow } = read;
    let coverage = &mut sim.findings.coverage;
    let version = match child {
        ChildPage::Shadow { .. } => {
            coverage.child_reads_shadow += 1;
            shadow
        }
        ChildPage::Slot { zone, slot, sealed } => match sim.device.child_slot(zone, slot) {
            // The child's read fails: it poisons the page, as the parent would.
            ChildSlot::Offline => None,
            ChildSlot::Reset => {
                sim.violation(format!(
                    "the child's page {place}:{page} at zone {zone} slot {slot} was reset under the hold"
                ));
                None
            }
            ChildSlot::Stored(stored) => {
                coverage.child_reads_slot += 1;
                match sealed {
                    // A page that fails to open is lost to the child too.
                    Some(sealed) => sim.device.open(&sealed, stored, coverage),
                    None => Some(stored),
                }
            }
        },
        ChildPage::Zero => {
            coverage.child_reads_zero += 1;
            Some(0)
        }
        ChildPage::Lost => {
            coverage.child_reads_lost += 1;
            None
        }
        ChildPage::NotOurs => {
            sim.violation(format!("the child's page {place}:{page} is not the pager's"));
            None
        }
    };
    if let Some(version) = version {
        if !allowed.contains(&Some(version)) {
            let message =
                format!("the child read v{version} for {place}:{page} ({child:?}), which held {allowed:?} at the fork");
            sim.findings.corruption(sim.schedule.step, message);
        }
    }
}

/// A served child exits before its hold is let go: its region goes, then the slots it
/// read may. False if it cannot go yet (in use, or a pager thread reads the mappings):
/// its exit is put off a little.
fn remove_served_child(sim: &mut Sim, fork: &mut ForkModel) -> bool {
    let Some(place) = fork.served.take() else { return true };
    // (Removed as churn removes: unused, and no pager thread reading it.)
    let readers = sim.pager.mappings_in_use();
    match sim.tables.region(place).filter(|region| region.parent_owner.is_some()) {
        Some(region) if region.busy > 0 || readers => {
            fork.served = Some(place);
            fork.release_step = sim.step() + 100;
            return false;
        }
        Some(_) => {
            let region = sim.tables.remove(place);
            // (Its process gone, its agent's late answer never comes.)
            sim.agents.forget(region.owner);
            sim.pager.core.region_remove(region.owner, sim.now_ns());
            sim.after_lock_step();
        }
        None => {}
    }
    true
}

/// The fork's child is served by this pager too (a daemon's tenant that forks): a
/// region of its own in a free place, whose mapped pages are copies of the parent
/// region's (written or not, never write-protected: the child's registration is new)
/// and whose pages then on the device it reads from the parent's slots when it faults
/// on them. Only of a region with no discard under way and no parking (a daemon parks
/// nothing); `None` if there is none, or no free place.
fn add_served_child(sim: &mut Sim, discarding: Option<usize>) -> Option<usize> {
    if sim.scenario.park_pages > 0 {
        return None;
    }
    let free = (0..REGION_PLACES).find(|&place| sim.tables.is_free(place))?;
    let parents: Vec<usize> = (0..REGION_PLACES)
        .filter(|&place| Some(place) != discarding && sim.tables.region(place).is_some_and(ModelRegion::quiet))
        .collect();
    if parents.is_empty() {
        return None;
    }
    let parent = sim.tables.live(parents[below(&mut sim.schedule.rng, parents.len() as u64) as usize]);
    let core = &sim.pager.core;
    let inherited = core.child_pages(parent.owner);
    let poisoned = core.poisoned_pages(parent.owner);
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
    let last: Vec<u64> = (0..ptes.len())
        .map(|page| if parent.ptes[page].mapped { parent.ptes[page].version } else { parent.oracle.last(page) })
        .collect();
    // A marker the child inherits: the loss was the parent's to check.
    let lost: Vec<bool> = ptes.iter().map(|pte| pte.poisoned).collect();
    let (pages, parent_owner) = (ptes.len(), parent.owner);
    let base = PageTables::base(free);
    let tenant = below(&mut sim.schedule.rng, sim.scenario.tenants as u64) as u32;
    let added = sim.pager.core.region_add_inherited(
        base,
        pages as u64,
        tenant,
        &resident,
        &poisoned,
        &inherited,
        sim.schedule.now_ns,
    );
    sim.after_lock_step();
    let Ok(owner) = added else {
        sim.findings.coverage.regions_refused += 1;
        return None;
    };
    sim.findings.coverage.served_children += 1;
    let region = ModelRegion::with_ptes(owner, base, ptes, PageOracle::inherited(last, lost), Some(parent_owner));
    sim.tables.insert(free, region);
    Some(free)
}
