//! The zoned device under the pager: the reference driver's model device (a version per
//! slot instead of 4 KiB), the scenario's injected faults (command errors drawn from the
//! world's stream, zones taken offline, swapped pages altered on the device), and the
//! sealing of pages as the live pager's I/O thread seals them (`scenario.encrypt`: a
//! page's content, its version, is sealed as 8 bytes, and the device keeps the
//! ciphertext).

use std::collections::HashMap;

use znswap_core::driver::{Captured, Completion, ContractBreach, DeviceHooks, Driver, Stage};
use znswap_core::{IoError, PageState as EnginePage};
use znswap_pager_core::{PagerCore, Sealed};
use znswap_seal::{Seal, Sealer};

use super::coverage::Coverage;
use super::findings::Findings;
use super::page_tables::PageTables;
use super::scenario::{PagerFaults, PagerScenario};
use crate::scenario::{below, chance, error_probability, Rng};

pub struct Device {
    /// The model device and the GC move buffer.
    driver: Driver,
    faults: PagerFaults,
    zone_capacity_pages: u32,
    /// Command errors are injected (not in the final sweep, which reads every page back).
    errors_on: bool,
    /// When a zone goes offline, and when a swapped page's ciphertext is altered.
    offline_at_steps: Vec<u64>,
    altered_at_steps: Vec<u64>,
    /// The pages altered: (owner, page, the version its slot held). Only these may be
    /// lost beyond the offline zones'.
    altered: Vec<(u32, u64, u64)>,
    sealer: Option<Sealer>,
    /// The version each ciphertext on the device was sealed from: what the oracle's
    /// checks of the device's contents (a version lost with an offline zone) look at.
    sealed_versions: HashMap<u64, u64>,
}

/// What a forked child finds at a slot it reads.
pub enum ChildSlot {
    /// Its zone went offline: the read fails.
    Offline,
    /// Past the write pointer: reset under the fork's hold.
    Reset,
    Stored(u64),
}

impl Device {
    /// The device for `core`'s engine; when its faults strike is drawn from `rng`.
    pub fn new(core: &PagerCore, scenario: &PagerScenario, rng: &mut Rng, steps: u64) -> Device {
        let mut driver = Driver::new(core.engine());
        // The device's own limit (the engine may keep fewer zones open).
        driver.device.active_zones_max = scenario.geometry.max_active_zones.max(scenario.geometry.max_open_zones);
        let offline_at_steps =
            (0..scenario.faults.offline_zones).map(|_| steps / 4 + below(rng, steps / 2 + 1)).collect();
        let altered_at_steps = (0..scenario.faults.altered_pages).map(|_| below(rng, steps)).collect();
        // A fixed key: the same seed seals to the same ciphertext.
        let sealer = scenario.encrypt.then(|| Sealer::with_key(&[0x5e; 32]).expect("a key page"));
        Device {
            driver,
            faults: scenario.faults.clone(),
            zone_capacity_pages: scenario.geometry.zone_capacity_pages,
            errors_on: true,
            offline_at_steps,
            altered_at_steps,
            altered: Vec::new(),
            sealer,
            sealed_versions: HashMap::new(),
        }
    }

    /// No more command errors: the final sweep reads every page back.
    pub fn stop_errors(&mut self) {
        self.errors_on = false;
    }

    /// Runs `operation` on the model device with the scenario's errors; contract
    /// breaches become violations.
    fn on_device<T>(
        &mut self,
        rng: &mut Rng,
        findings: &mut Findings,
        step: u64,
        operation: impl FnOnce(&mut Driver, &mut ErrorInjector<'_>) -> T,
    ) -> T {
        let mut injector = ErrorInjector {
            rng,
            errors_on: self.errors_on,
            faults: &self.faults,
            injected: &mut findings.coverage.injected_errors,
            breaches: Vec::new(),
        };
        let result = operation(&mut self.driver, &mut injector);
        for breach in injector.breaches {
            findings.violation(step, breach.0);
        }
        result
    }

    /// A swap-in read for a fault: the versions of `pages` slots from `slot`.
    pub fn read(
        &mut self,
        zone: u32,
        slot: u32,
        pages: u32,
        rng: &mut Rng,
        findings: &mut Findings,
        step: u64,
    ) -> Result<Vec<u64>, IoError> {
        self.on_device(rng, findings, step, |driver, injector| driver.read_pages(zone, slot, pages, injector))
    }

    /// Runs an I/O thread's request on the model device.
    pub fn run(&mut self, captured: &Captured, rng: &mut Rng, findings: &mut Findings, step: u64) -> Completion {
        self.on_device(rng, findings, step, |driver, injector| driver.run(captured, injector))
    }

    pub fn sealing(&self) -> bool {
        self.sealer.is_some()
    }

    /// Seals `version`, the content of `owner`'s `page`, on its way to the device: its
    /// seal and the ciphertext the device stores.
    pub fn seal(&mut self, owner: u32, page: u64, version: u64) -> (Seal, u64) {
        let sealer = self.sealer.as_ref().expect("sealing");
        let mut bytes = version.to_le_bytes();
        let seal = sealer.seal(owner, page, &mut bytes);
        let ciphertext = u64::from_le_bytes(bytes);
        self.sealed_versions.insert(ciphertext, version);
        (seal, ciphertext)
    }

    /// Opens a sealed page's stored ciphertext: its version, or `None` if it fails to
    /// open (counted).
    pub fn open(&self, sealed: &Sealed, stored: u64, coverage: &mut Coverage) -> Option<u64> {
        let sealer = self.sealer.as_ref().expect("a sealed read in a sealing world");
        let mut bytes = stored.to_le_bytes();
        match sealer.open(sealed.owner, sealed.page, &mut bytes, &sealed.seal) {
            Ok(()) => Some(u64::from_le_bytes(bytes)),
            Err(_) => {
                coverage.pages_failed_open += 1;
                None
            }
        }
    }

    /// A slot as a forked child reads it.
    pub fn child_slot(&self, zone: u32, slot: u32) -> ChildSlot {
        let model = &self.driver.device.zones[zone as usize];
        if model.offline {
            ChildSlot::Offline
        } else if slot >= model.write_pointer {
            ChildSlot::Reset
        } else {
            ChildSlot::Stored(self.driver.device.version(zone, slot))
        }
    }

    /// Whether the device really lost one of `versions`, the last of `owner`'s `page`
    /// (or of its parent's, for a served child): with a zone taken offline, or altered.
    pub fn lost_one_of(&self, versions: [Option<u64>; 2], owner: u32, parent_owner: Option<u32>, page: u64) -> bool {
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
        let altered = self.altered.iter().any(|&(altered_owner, lost, version)| {
            (altered_owner == owner || Some(altered_owner) == parent_owner)
                && lost == page
                && versions.contains(&Some(version))
        });
        in_offline_zone || altered
    }

    /// The faults due at `step`: a swapped page altered, a zone taken offline.
    pub fn inject_due(
        &mut self,
        step: u64,
        tables: &PageTables,
        core: &PagerCore,
        rng: &mut Rng,
        coverage: &mut Coverage,
    ) {
        if self.altered_at_steps.contains(&step) {
            self.alter_swapped_page(tables, core, rng, coverage);
        }
        if self.offline_at_steps.contains(&step) {
            self.take_zone_offline(rng, coverage);
        }
    }

    /// Flips one bit of a swapped page's slot on the device (its only copy), as a
    /// drive's silent corruption or an attacker would.
    fn alter_swapped_page(&mut self, tables: &PageTables, core: &PagerCore, rng: &mut Rng, coverage: &mut Coverage) {
        let capacity = self.zone_capacity_pages;
        let places = tables.live_places();
        for _ in 0..16 {
            let Some(&place) = places.get(below(rng, places.len().max(1) as u64) as usize) else { return };
            let region = tables.live(place);
            let page = below(rng, region.pages());
            let (owner, version) = (region.owner, region.oracle.last(page as usize));
            let Ok(EnginePage::Swapped { address }) = core.engine().page_state(owner, page) else { continue };
            let (zone, slot) = (address.zone(capacity), address.slot(capacity));
            let model = &mut self.driver.device.zones[zone as usize];
            if model.offline || slot >= model.write_pointer {
                continue;
            }
            model.data[slot as usize] ^= 1 << below(rng, 64);
            self.altered.push((owner, page, version));
            coverage.pages_altered += 1;
            return;
        }
    }

    fn take_zone_offline(&mut self, rng: &mut Rng, coverage: &mut Coverage) {
        let zones = self.driver.device.zones.len() as u64;
        for _ in 0..zones {
            let zone = below(rng, zones) as usize;
            let model = &self.driver.device.zones[zone];
            if model.write_pointer > 0 && !model.offline {
                self.driver.device.take_offline(zone as u32);
                coverage.zones_taken_offline += 1;
                return;
            }
        }
    }
}

/// The scenario's device errors, drawn from the world's random stream (none during the
/// final sweep); contract breaches become violations.
struct ErrorInjector<'a> {
    rng: &'a mut Rng,
    errors_on: bool,
    faults: &'a PagerFaults,
    injected: &'a mut u64,
    breaches: Vec<ContractBreach>,
}

impl DeviceHooks for ErrorInjector<'_> {
    fn inject_error(&mut self, stage: Stage, _zone: u32) -> bool {
        let faults = self.faults;
        let probability = error_probability(stage, faults.append_error, faults.read_error, faults.reset_error);
        let hit = self.errors_on && probability > 0.0 && chance(self.rng, probability);
        *self.injected += hit as u64;
        hit
    }

    fn contract_breached(&mut self, breach: ContractBreach) {
        self.breaches.push(breach);
    }
}
