//! The model of the kernel's side of the regions the pager serves: each region's page
//! table entries and its shadow's (where parked pages go), the userfaultfd events not
//! yet read, and what each userfaultfd ioctl, `MADV_DONTNEED` and `PAGEMAP_SCAN` does to
//! them, with the errors the kernel would return. The wake-ups these owe to threads
//! asleep on a page are queued here and delivered by the world after the step.
//!
//! Regions live at `(k + 1) << 32` for a place `k`: a freed region's place (so its
//! addresses) may be taken by the next one, as `mmap` reuses addresses.

use std::collections::VecDeque;

use znswap_pager_core::{
    park_outcome, unpark_next, AddressRange, FaultKind, MoveFailure, PageState, PagerCore, ParkOutcome, UnparkNext,
    PAGE_BYTES,
};

use super::findings::Findings;
use super::oracle::PageOracle;
use crate::scenario::{chance, Rng};

/// Places regions may take.
pub const REGION_PLACES: usize = 6;
const PLACE_SHIFT: u32 = 32;
/// A region's shadow (where its pages are parked) lies this far above it, in its place.
pub const SHADOW_OFFSET: u64 = 1 << 31;

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

impl Pte {
    /// A page just mapped with `version`.
    pub fn mapped(version: u64, write_protected: bool, from_device: bool) -> Pte {
        Pte { mapped: true, write_protected, poisoned: false, version, from_device, tainted: false, shared: false }
    }
}

/// A region of the program's that the pager serves.
pub struct ModelRegion {
    /// The core's owner id for it.
    pub owner: u32,
    pub base: u64,
    pub ptes: Vec<Pte>,
    /// The shadow's entries: parked pages, and copies awaiting their discard.
    pub shadow: Vec<Pte>,
    /// The program's zap took what the pager had mapped (it believes the page mapped
    /// until a fault says otherwise).
    pub zapped: Vec<bool>,
    /// Application accesses under way here: a program does not free memory it is using.
    pub busy: u32,
    /// A fork's child served by the pager (`PagerCore::region_add_inherited`): the
    /// parent region's owner, whose slots (and altered pages) it reads.
    pub parent_owner: Option<u32>,
    /// What each page may read.
    pub oracle: PageOracle,
}

impl ModelRegion {
    /// A region of `pages` pages, nothing mapped.
    pub fn new(owner: u32, base: u64, pages: usize) -> ModelRegion {
        ModelRegion::with_ptes(owner, base, vec![Pte::default(); pages], PageOracle::new(pages), None)
    }

    /// A region whose entries start as `ptes` (a served fork's child's).
    pub fn with_ptes(
        owner: u32,
        base: u64,
        ptes: Vec<Pte>,
        oracle: PageOracle,
        parent_owner: Option<u32>,
    ) -> ModelRegion {
        let pages = ptes.len();
        ModelRegion {
            owner,
            base,
            ptes,
            shadow: vec![Pte::default(); pages],
            zapped: vec![false; pages],
            busy: 0,
            parent_owner,
            oracle,
        }
    }

    pub fn pages(&self) -> u64 {
        self.ptes.len() as u64
    }

    pub fn address(&self, page: u64) -> u64 {
        self.base + page * PAGE_BYTES as u64
    }

    pub fn shadow_address(&self, page: u64) -> u64 {
        self.base + SHADOW_OFFSET + page * PAGE_BYTES as u64
    }

    /// Whether the program discarded `page` (zapped, or its discard under way), so a read
    /// of it by a pager thread may find nothing mapped.
    pub fn discarded(&self, page: u64, core: &PagerCore) -> bool {
        self.zapped[page as usize]
            || self.oracle.in_window(page as usize)
            || core.page_state(self.owner, page) == Some(PageState::Removed)
    }

    /// No discard under way or left behind, and not a served child itself: a region a
    /// served child may fork from.
    pub fn quiet(&self) -> bool {
        self.oracle.settled()
            && !self.zapped.iter().any(|&zapped| zapped)
            && !self.ptes.iter().any(|pte| pte.tainted)
            && self.parent_owner.is_none()
    }
}

pub struct PageTables {
    regions: Vec<Option<ModelRegion>>,
    /// userfaultfd events not yet read by a handler: (address, kind).
    events: VecDeque<(u64, FaultKind)>,
    /// Draws whether a move the kernel did fails all the same (`misreported_moves`): a
    /// stream of its own, so that seeds without it run as they would with none.
    moves_rng: Rng,
    /// `PagerFaults::misreported_moves`.
    misreported_moves: f64,
    /// Wake-ups of threads asleep on a page: ranges `(address, pages)`.
    wakes: Vec<(u64, u64)>,
    /// `ZNSWAP_PAGER_TRACE=place:page`: the page whose story is printed.
    trace: Option<(usize, u64)>,
}

impl PageTables {
    pub fn new(moves_rng: Rng, misreported_moves: f64) -> PageTables {
        PageTables {
            regions: (0..REGION_PLACES).map(|_| None).collect(),
            events: VecDeque::new(),
            moves_rng,
            misreported_moves,
            wakes: Vec::new(),
            trace: std::env::var("ZNSWAP_PAGER_TRACE").ok().and_then(|text| {
                let (place, page) = text.split_once(':')?;
                Some((place.parse().ok()?, page.parse().ok()?))
            }),
        }
    }

    // ------------------------------------------------------------------ regions

    /// The base address of a region in `place`.
    pub fn base(place: usize) -> u64 {
        ((place as u64) + 1) << PLACE_SHIFT
    }

    pub fn region(&self, place: usize) -> Option<&ModelRegion> {
        self.regions.get(place).and_then(Option::as_ref)
    }

    /// The live region in `place`.
    pub fn live(&self, place: usize) -> &ModelRegion {
        self.regions[place].as_ref().expect("live")
    }

    pub fn region_mut(&mut self, place: usize) -> Option<&mut ModelRegion> {
        self.regions.get_mut(place).and_then(Option::as_mut)
    }

    pub fn live_mut(&mut self, place: usize) -> &mut ModelRegion {
        self.regions[place].as_mut().expect("live")
    }

    pub fn is_free(&self, place: usize) -> bool {
        self.regions[place].is_none()
    }

    /// The places holding a region, in order.
    pub fn live_places(&self) -> Vec<usize> {
        (0..REGION_PLACES).filter(|&place| self.regions[place].is_some()).collect()
    }

    /// The places holding none, in order.
    pub fn free_places(&self) -> Vec<usize> {
        (0..REGION_PLACES).filter(|&place| self.regions[place].is_none()).collect()
    }

    pub fn live_count(&self) -> usize {
        self.regions.iter().filter(|region| region.is_some()).count()
    }

    /// Pages of all regions.
    pub fn pages(&self) -> u64 {
        self.regions.iter().flatten().map(ModelRegion::pages).sum()
    }

    pub fn insert(&mut self, place: usize, region: ModelRegion) {
        assert!(self.regions[place].replace(region).is_none(), "a region mapped over another");
    }

    pub fn remove(&mut self, place: usize) -> ModelRegion {
        self.regions[place].take().expect("live")
    }

    pub fn address(&self, place: usize, page: u64) -> u64 {
        self.live(place).address(page)
    }

    pub fn locate(&self, address: u64) -> Option<(usize, u64)> {
        let place = (address >> PLACE_SHIFT).checked_sub(1)? as usize;
        let region = self.regions.get(place)?.as_ref()?;
        let page = (address - region.base) / PAGE_BYTES as u64;
        (page < region.ptes.len() as u64).then_some((place, page))
    }

    /// The region page whose shadow page is at `address`, if any.
    pub fn locate_shadow(&self, address: u64) -> Option<(usize, u64)> {
        let place = (address >> PLACE_SHIFT).checked_sub(1)? as usize;
        let region = self.regions.get(place)?.as_ref()?;
        let page = (address.checked_sub(region.base + SHADOW_OFFSET)?) / PAGE_BYTES as u64;
        (page < region.shadow.len() as u64).then_some((place, page))
    }

    /// The shadow entry at `address`, as an ioctl or a read of it would find it.
    pub fn shadow_entry(&self, address: u64) -> Option<(usize, u64, Pte)> {
        let (place, page) = self.locate_shadow(address)?;
        Some((place, page, self.live(place).shadow[page as usize]))
    }

    /// The traced page, if `address..+pages` covers it.
    pub fn traced(&self, address: u64, pages: u64) -> Option<(usize, u64)> {
        let (place, page) = self.trace?;
        let at = self.region(place)?.address(page);
        (at >= address && at < address + pages * PAGE_BYTES as u64).then_some((place, page))
    }

    /// Whether `place:page` is the traced page.
    pub fn is_traced(&self, place: usize, page: u64) -> bool {
        self.trace == Some((place, page))
    }

    // ------------------------------------------------------------------- events

    pub fn push_event(&mut self, address: u64, kind: FaultKind) {
        self.events.push_back((address, kind));
    }

    pub fn pop_event(&mut self) -> Option<(u64, FaultKind)> {
        self.events.pop_front()
    }

    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    /// Wakes the threads asleep on a page of `address..+pages` (delivered after the step).
    pub fn wake(&mut self, address: u64, pages: u64) {
        self.wakes.push((address, pages));
    }

    /// The wake-ups owed since the last call, as `(address, pages)`.
    pub fn take_wakes(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.wakes)
    }

    // ------------------------------------------------------------------- ioctls

    /// `UFFDIO_COPY` or `UFFDIO_ZEROPAGE` of one page: `entry` mapped at `address`,
    /// which the oracle must allow. `EEXIST` over anything mapped, which the shell
    /// aborts on: a violation.
    pub fn install(&mut self, address: u64, entry: Pte, what: &str, findings: &mut Findings, step: u64) {
        let Some((place, page)) = self.locate(address) else {
            findings.violation(step, format!("{what} outside any region at {address:#x}"));
            return;
        };
        let region = self.live_mut(place);
        let pte = &mut region.ptes[page as usize];
        if pte.mapped || pte.poisoned {
            findings.violation(step, format!("{what} over a page already mapped at {address:#x}"));
            return;
        }
        *pte = entry;
        let version = entry.version;
        region.zapped[page as usize] = false;
        let expected = region.oracle.last(page as usize);
        if region.oracle.acceptable(page as usize, version) {
            region.oracle.seen(page as usize, version);
        } else if !region.oracle.is_lost(page as usize) {
            findings
                .corruption(step, format!("page {place}:{page} installed with v{version}, last written v{expected}"));
        }
    }

    /// `UFFDIO_WRITEPROTECT` lifting the protection of `address..+pages`, and the wake.
    pub fn unprotect(&mut self, address: u64, pages: u64) {
        for index in 0..pages {
            if let Some((place, page)) = self.locate(address + index * PAGE_BYTES as u64) {
                let pte = &mut self.live_mut(place).ptes[page as usize];
                if pte.mapped {
                    pte.write_protected = false;
                }
            }
        }
        self.wake(address, pages);
    }

    /// `UFFDIO_POISON` of the page at `address`, and the wake.
    pub fn poison(&mut self, address: u64, findings: &mut Findings, step: u64) {
        match self.locate(address) {
            Some((place, page)) => {
                let region = self.live_mut(place);
                let pte = &mut region.ptes[page as usize];
                if pte.mapped || pte.poisoned {
                    findings.violation(step, format!("UFFDIO_POISON over a mapped page at {address:#x}"));
                } else {
                    pte.poisoned = true;
                    region.zapped[page as usize] = false;
                }
            }
            None => findings.violation(step, format!("UFFDIO_POISON outside any region at {address:#x}")),
        }
        self.wake(address, 1);
    }

    /// A write fault with no byte changed (`Action::Unshare`): the copy-on-write of a
    /// page shared with a fork's child is taken, and the (asynchronous) protection lifted.
    pub fn unshare(&mut self, address: u64, findings: &mut Findings, step: u64) {
        let Some((place, page)) = self.locate(address) else {
            findings.violation(step, format!("an unshare of {address:#x}, outside any region"));
            return;
        };
        let pte = &mut self.live_mut(place).ptes[page as usize];
        if !pte.mapped {
            // The kernel would raise a userfault in the evictor, under the lock.
            findings.violation(step, format!("an unshare of {address:#x}, where nothing is mapped"));
            return;
        }
        findings.coverage.unshares += 1;
        pte.shared = false;
        pte.write_protected = false;
    }

    /// `UFFDIO_MOVE` of the page at `address` to its shadow page, as the kernel checks
    /// it (no source holes allowed): `EEXIST` if the shadow page is mapped, then `ENOENT`
    /// if nothing is mapped at `address`, then `EBUSY` if shared with a fork's child; and
    /// for some seeds a move done that fails all the same (`EEXIST`: Linux 6.18). A
    /// failure's outcome is the live shell's: `park_outcome`, from where the page is.
    pub fn park(&mut self, address: u64, shadow: u64, findings: &mut Findings, step: u64) -> ParkOutcome {
        let Some((place, page)) = self.locate(address) else {
            findings.violation(step, format!("a park of {address:#x}, outside any region"));
            return ParkOutcome::Busy;
        };
        if self.locate_shadow(shadow) != Some((place, page)) {
            findings.violation(step, format!("{address:#x} parked at {shadow:#x}, not its shadow page"));
            return ParkOutcome::Busy;
        }
        let misreport = chance(&mut self.moves_rng, self.misreported_moves);
        let region = self.live_mut(place);
        let pte = region.ptes[page as usize];
        let failure = if region.shadow[page as usize].mapped {
            let message = format!("a park of {place}:{page} into its shadow page, which holds a page");
            findings.violation(step, message);
            Some(MoveFailure::Exists)
        } else if !pte.mapped {
            Some(MoveFailure::NoEntry)
        } else if pte.shared {
            Some(MoveFailure::Other)
        } else {
            region.shadow[page as usize] = Pte { write_protected: false, ..pte };
            region.ptes[page as usize] = Pte::default();
            findings.coverage.parks += 1;
            misreport.then_some(MoveFailure::Exists)
        };
        let Some(failure) = failure else { return ParkOutcome::Moved };
        let region = self.live(place);
        let outcome = park_outcome(failure, region.ptes[page as usize].mapped, region.shadow[page as usize].mapped);
        let coverage = &mut findings.coverage;
        match outcome {
            ParkOutcome::Moved => coverage.moves_misreported += 1,
            ParkOutcome::Hole => coverage.parks_hole += 1,
            ParkOutcome::Busy => coverage.parks_refused_shared += 1,
            ParkOutcome::Occupied => coverage.parks_refused_occupied += 1,
        }
        outcome
    }

    /// `UFFDIO_MOVE` of a parked page back from its shadow page at `shadow` to `address`
    /// (`Action::Unpark`), and the wake. Shared with a fork's child, the kernel refuses
    /// the move (`EBUSY`); and for some seeds a move it did fails all the same (`EEXIST`).
    /// The shell's next step is `unpark_next`'s, from where the page is: it must be the
    /// one that leaves the page here and none at the shadow page.
    pub fn unpark(&mut self, address: u64, shadow: u64, findings: &mut Findings, step: u64) {
        let Some((place, page, pte)) = self.shadow_entry(shadow) else {
            findings.violation(step, format!("an unpark at {shadow:#x}, outside any region's shadow"));
            return;
        };
        if !pte.mapped {
            findings.violation(step, format!("an unpark of {address:#x} from its empty shadow page"));
            return;
        }
        let misreport = chance(&mut self.moves_rng, self.misreported_moves);
        let here = self.live(place).ptes[page as usize].mapped;
        let (expected, next) = if pte.shared {
            (UnparkNext::Copy, unpark_next(MoveFailure::Other, here, true, false))
        } else if misreport {
            findings.coverage.moves_misreported += 1;
            // Moved: the page here, none at the shadow page.
            (UnparkNext::Done, unpark_next(MoveFailure::Exists, true, false, false))
        } else {
            (UnparkNext::Done, UnparkNext::Done)
        };
        if next != expected {
            findings.violation(
                step,
                format!(
                    "the shell's next step after the move back of {address:#x} would be {next:?}, not {expected:?}"
                ),
            );
            return;
        }
        // Moved, or copied and the shadow page discarded: the same to the program.
        findings.coverage.unparks += 1;
        findings.coverage.unparks_copied += pte.shared as u64;
        self.live_mut(place).shadow[page as usize] = Pte::default();
        self.install(address, Pte::mapped(pte.version, false, pte.from_device), "an unpark", findings, step);
        self.wake(address, 1);
    }

    /// Maps a zero page at `address` only where nothing is (a fault's `ZeroFill`), and
    /// wakes its waiters.
    pub fn zero_fill(&mut self, address: u64, findings: &mut Findings, step: u64) -> bool {
        let landed = self.locate(address).is_some_and(|(place, page)| {
            let pte = self.live(place).ptes[page as usize];
            !pte.mapped && !pte.poisoned
        });
        if landed {
            findings.coverage.zero_fills_landed += 1;
            self.install(address, Pte::mapped(0, false, false), "ZeroFill", findings, step);
            self.wake(address, 1);
        } else {
            findings.coverage.zero_fills_refused += 1;
        }
        landed
    }

    /// `UFFDIO_WRITEPROTECT` of `start..end`: mapped entries get the bit; fails outside
    /// a registered region.
    pub fn write_protect(&mut self, start: u64, end: u64) -> bool {
        let Some((place, first)) = self.locate(start) else { return false };
        let region = self.live_mut(place);
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
    pub fn scan_written(
        &self,
        start: u64,
        end: u64,
        found: &mut dyn FnMut(u64, u64),
        findings: &mut Findings,
        step: u64,
    ) {
        let Some((place, first)) = self.locate(start) else {
            findings.violation(step, format!("a scan of {start:#x}..{end:#x}, outside any region"));
            return;
        };
        let region = self.live(place);
        let (base, last) = (region.base, (end - region.base) / PAGE_BYTES as u64);
        if last > region.ptes.len() as u64 || end <= start {
            findings.violation(step, format!("a scan of {start:#x}..{end:#x}, past its region"));
            return;
        }
        findings.coverage.scans += 1;
        let mut run: Option<u64> = None;
        for page in first..=last {
            let written = page < last && {
                let pte = &region.ptes[page as usize];
                !pte.poisoned && (!pte.mapped || !pte.write_protected)
            };
            match (written, run) {
                (true, None) => run = Some(page),
                (false, Some(from)) => {
                    findings.coverage.scanned_written += page - from;
                    found(base + from * PAGE_BYTES as u64, base + page * PAGE_BYTES as u64);
                    run = None;
                }
                _ => {}
            }
        }
    }

    /// Whether the victim at `address` reads all zeroes, as the evictor would read it.
    pub fn victim_is_zero(&self, address: u64, core: &PagerCore, findings: &mut Findings, step: u64) -> bool {
        match self.locate(address) {
            Some((place, page)) => {
                let region = self.live(place);
                let pte = region.ptes[page as usize];
                if !pte.mapped && !region.discarded(page, core) {
                    // The shell would fault inside the evictor here.
                    findings.violation(step, format!("the evictor read the unmapped victim {place}:{page}"));
                }
                // (A victim the program's discard zapped faults in the evictor, and reads
                // zero once a handler maps a zero page: modelled as read at once.)
                !pte.mapped || pte.version == 0
            }
            None => {
                findings.violation(step, format!("the evictor read {address:#x}, outside any region"));
                false
            }
        }
    }

    /// `MADV_DONTNEED` of a discard's range: its entries go. A shadow page that holds
    /// the page's only copy never goes with a discard (a stale copy's discard must not
    /// outlive the copy).
    pub fn discard_range(&mut self, range: &AddressRange, core: &PagerCore, findings: &mut Findings, step: u64) {
        for index in 0..(range.len / PAGE_BYTES) as u64 {
            let address = range.start as u64 + index * PAGE_BYTES as u64;
            match (self.locate(address), self.locate_shadow(address)) {
                (Some((place, page)), _) => {
                    self.live_mut(place).ptes[page as usize] = Pte::default();
                }
                (None, Some((place, page))) => {
                    let region = self.live(place);
                    let state = core.page_state(region.owner, page);
                    let live = match state {
                        Some(PageState::Parked | PageState::WritingParked) => true,
                        // Moved already (nothing here, the page there), not a stale copy
                        // still awaiting this discard with the page here.
                        Some(PageState::Parking { .. }) => {
                            region.shadow[page as usize].mapped && !region.ptes[page as usize].mapped
                        }
                        _ => false,
                    };
                    if live {
                        findings.violation(
                            step,
                            format!("a discard of the shadow page of {place}:{page}, which holds its data ({state:?})"),
                        );
                    }
                    self.live_mut(place).shadow[page as usize] = Pte::default();
                }
                (None, None) => findings.violation(step, format!("a discard of {address:#x}, outside any region")),
            }
        }
    }
}
