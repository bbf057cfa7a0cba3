//! The simulation driver: runs the engine against the model device with seeded faults,
//! and checks every swap-in against an oracle of each page's last written version.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use znswap_core::driver::{self, Captured, ContractBreach, DeviceHooks, Driver, Stage, UNWRITTEN_VERSION};
use znswap_core::policy::TenantPolicy;
use znswap_core::slot_map::ZoneState;
use znswap_core::{
    Buf, Config, Engine, Event, IoId, IoRequest, PolicyKind, ReadOutcome, RecordEncoding, SwapIn, SwapOutError,
    SwapOutOutcome,
};

use crate::scenario::{below, chance, error_probability, Faults, Rng, Scenario, Workload};

#[derive(Clone, Copy, Default)]
struct PageModel {
    /// The driver's resident copy.
    memory: Option<u64>,
    /// Last version the application wrote (0: never, or freed).
    oracle: u64,
    /// Written since its swap-out started (the PTE dirty bit of Appendix A).
    dirty: bool,
    swap_out: Option<u64>,
    /// The swap-in read in flight for the driver, if any.
    reading: Option<IoId>,
    lost: bool,
}

/// Faults the DST injected, by the stage of the request they hit: device errors on
/// completions, and bit flips in the records the GC reads back.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultHits {
    /// Appends of swapped-out pages.
    pub swap_out_append: u64,
    /// Swap-in reads.
    pub swap_in_read: u64,
    /// GC reads of victim data (with its per-LBA metadata, if any).
    pub gc_data_read: u64,
    /// GC reads of chunk footers.
    pub gc_footer_read: u64,
    /// Appends of pages the GC moves.
    pub gc_append: u64,
    /// Resets of zones the GC read from since their last reset (its victims).
    pub gc_victim_reset: u64,
    /// Other resets: zones emptied by swap-ins, frees and overwrites (FAR or eager).
    pub other_reset: u64,
    pub finish: u64,
    /// Bit flips in per-LBA metadata the GC read.
    pub metadata_record_flipped: u64,
    /// Bit flips in chunk footers the GC read.
    pub footer_record_flipped: u64,
    /// Zones taken offline while a GC read or append on them was in flight.
    pub zone_offline_under_gc: u64,
}

/// The cold owner of `Scenario::cold_cycles`.
struct Cold {
    owner: u32,
    /// New cold pages swapped out per op while the GC is not needed: enough to fill the
    /// device in a sixteenth of the run, within `COLD_FILL_PAGES_PER_OP_MAX`.
    pages_per_op: u64,
    /// In order; the first is current or next.
    cycles: Vec<ColdCycle>,
    /// The GC's victim count when the current cycle started.
    gc_runs_at_start: Option<u64>,
    /// Pages `0..written` were written this cycle.
    written: u64,
    /// The fill stops at this many valid pages on the device (cold and others).
    valid_pages_max: u64,
}

#[derive(Clone, Copy)]
struct ColdCycle {
    start_op: u64,
    /// Released here if the GC has run since the start, else once it has or at
    /// `deadline_op`: on a device that accepts writes slowly (small zones, few open, long
    /// completion delays) the fill takes longer.
    release_op: u64,
    deadline_op: u64,
}

/// The quarters of the run in which a cold cycle starts (see `Sim::new`).
const COLD_QUARTERS: [u64; 2] = [0, 2];
/// Among Mixed's owner pages, the share swapped out at any time (measured on seeds
/// 10001-10100: valid slots 0.33-0.37 of owner pages): accesses swap pages back in and
/// frees take them out, so a Mixed page count of utilization x usable slots left the
/// device two-thirds empty.
const MIXED_SWAPPED_OUT_SHARE: f64 = 0.35;
/// Ops between samples of the device's fill (a sum over every zone); more often while
/// a cold fill watches it.
const FILL_SAMPLE_OPS: u64 = 1024;
const COLD_FILL_SAMPLE_OPS: u64 = 64;
/// A cold fill stops at this share of the usable slots (those outside the GC watermark,
/// reserve and open zones) holding valid pages: the GC then has to run (the garbage of
/// the rest takes the device below its low watermark) yet can reach its high
/// watermark. Filling to the low watermark itself left the GC copying 20-90 pages per
/// page written (seeds 10010, 10024, 10078).
const COLD_FILL_USABLE_SHARE: f64 = 0.9;
/// Bounds a cold fill's pages per op: short runs (the tests' 20,000 ops) then fill
/// only small devices, instead of writing a large one twice over in a few ops.
const COLD_FILL_PAGES_PER_OP_MAX: u64 = 16;
/// Ops between attempts to unregister released owners.
const RELEASE_RETRY_OPS: u64 = 8;
/// Ops the swap may stay full with the GC idle (see `Sim::check_progress`).
const STUCK_OPS_MAX: u64 = 50_000;

/// A request on the model device, waiting for its completion.
struct Pending {
    captured: Captured,
    /// A swap-in read's page.
    swap_in: Option<(u32, u64)>,
}

impl Pending {
    /// The zone of a GC read (data or footer) or of a GC append.
    fn gc_zone(&self) -> Option<u32> {
        self.captured.stage().is_gc().then(|| self.captured.request.zone())
    }
}

/// The DST's faults on the model device, drawn from its one random stream: device
/// errors by stage, bit flips in the records the GC reads; contract breaches become
/// violations.
struct FaultInjector<'a> {
    rng: &'a mut Rng,
    on: bool,
    faults: &'a Faults,
    hits: &'a mut FaultHits,
    /// The GC read from the zone since its last reset (`Sim::gc_read_from`).
    gc_read_from: &'a [bool],
    records_corrupted: &'a mut u64,
    breaches: Vec<ContractBreach>,
}

impl DeviceHooks for FaultInjector<'_> {
    fn inject_error(&mut self, stage: Stage, zone: u32) -> bool {
        let faults = self.faults;
        let probability = error_probability(stage, faults.append_error, faults.read_error, faults.reset_error);
        if !(self.on && chance(self.rng, probability)) {
            return false;
        }
        let hits = match stage {
            Stage::SwapOutAppend => &mut self.hits.swap_out_append,
            Stage::GcAppend => &mut self.hits.gc_append,
            Stage::SwapInRead => &mut self.hits.swap_in_read,
            Stage::GcDataRead => &mut self.hits.gc_data_read,
            Stage::GcFooterRead => &mut self.hits.gc_footer_read,
            Stage::Reset if self.gc_read_from[zone as usize] => &mut self.hits.gc_victim_reset,
            Stage::Reset => &mut self.hits.other_reset,
            Stage::Finish => &mut self.hits.finish,
        };
        *hits += 1;
        true
    }

    fn records_read(&mut self, stage: Stage, records: &mut [u8]) {
        if !(self.on && chance(self.rng, self.faults.record_corruption)) {
            return;
        }
        let bit = below(self.rng, records.len() as u64 * 8) as usize;
        records[bit / 8] ^= 1 << (bit % 8);
        *self.records_corrupted += 1;
        if stage == Stage::GcFooterRead {
            self.hits.footer_record_flipped += 1;
        } else {
            self.hits.metadata_record_flipped += 1;
        }
    }

    fn contract_breached(&mut self, breach: ContractBreach) {
        self.breaches.push(breach);
    }
}

pub struct Sim {
    pub engine: Engine,
    /// The model device and the GC move buffer.
    pub driver: Driver,
    scenario: Scenario,
    rng: Rng,
    now_ns: u64,
    pages: Vec<Vec<PageModel>>,
    /// (ready at, submission sequence, request).
    pending: Vec<(u64, u64, Pending)>,
    submitted: u64,
    /// Swap-outs the engine took and has not reported done: ticket -> the buffer handle
    /// passed (the version), which its `SwapOutDone` must give back, exactly once.
    swap_outs_open: BTreeMap<u64, u64>,
    /// Owners freed whole, to be unregistered once no I/O names them, then registered
    /// again (a region freed and its id reused).
    releasing: Vec<u32>,
    pub owners_reused: u64,
    version: u64,
    faults_on: bool,
    pub violations: Vec<String>,
    pub pages_verified: u64,
    pub corrupted: u64,
    pub lost: u64,
    pub records_corrupted: u64,
    pub zones_taken_offline: u32,
    /// Zone-offline faults to come: (due op, wait for a GC request in flight and take
    /// its zone). Drawn at random, a zone seldom has GC I/O in flight when it goes.
    offline_due: Vec<(u64, bool)>,
    /// How long an offline fault waits for GC I/O before it takes any zone.
    offline_wait_ops: u64,
    page_count: u64,
    /// Churn workload: the block written last.
    last_block: (u32, u64),
    /// Generated workload: one access stream per workload owner, and the fill cursor
    /// (pages written in order before the first draw).
    generators: Vec<znswap_workload::Generator>,
    fill_cursor: u64,
    /// The workload's owners; the cold owner, if any, follows them.
    hot_owners: u32,
    /// Pages each owner was first registered with: re-registrations draw from it, so
    /// owners do not shrink release after release.
    owner_pages_initial: Vec<u64>,
    /// Chance that Mixed's release draw releases the owner picked.
    release_chance: f64,
    cold: Option<Cold>,
    /// The GC read from the zone since its last reset: the zone is (or was) a victim.
    gc_read_from: Vec<bool>,
    pub faults: FaultHits,
    /// Completions delivered while a request submitted earlier was still pending.
    pub completions_reordered: u64,
    pub cold_cycles_done: u64,
    pub cold_pages_written: u64,
    /// Peak share of all slots holding valid pages (sampled every `FILL_SAMPLE_OPS`).
    pub valid_share_peak: f64,
    /// Valid pages on the device at the last sample.
    valid_pages: u64,
    usable_slots: f64,
    /// Full zones holding no valid page (and not the GC's), at the last sample.
    full_zones_without_valid_pages: u64,
    progress: Progress,
    /// Ops the swap spent below the GC low watermark refusing swap-outs, the GC
    /// collecting nothing, with under half the usable slots valid (`check_progress`).
    pub ops_gc_idle_while_full: u64,
    /// Ops sampled with no empty zone at all: the GC's reserve used up, so a GC stream
    /// whose zone filled cannot open another and the GC waits for frees to empty one.
    pub ops_without_empty_zone: u64,
}

/// What `Sim::check_progress` compares between samples.
#[derive(Default)]
struct Progress {
    gc_runs: u64,
    backpressure: u64,
    stuck_since_op: Option<u64>,
}

/// Ops between two tenants beginning anew at an index, under the tenant policy.
const TENANT_BEGINS_OPS: u64 = 30_000;

const VIOLATIONS_MAX: usize = 32;

impl Sim {
    pub fn new(scenario: Scenario, config: Config, seed: u64, ops: u64, factory: Option<crate::PolicyFactory>) -> Sim {
        let mut rng = crate::scenario::rng(seed ^ 0x5eed_5eed);
        let derived = config.derive().expect("validated by the caller");
        let footer = derived.encoding == RecordEncoding::ChunkFooter;
        let geometry = config.geometry;
        let policy: Box<dyn znswap_core::Policy> = match (factory, scenario.policy) {
            (Some(build), _) => build(&scenario),
            // Tenant 0 gets a tight slot limit so the low-watermark reclaim (`rec_zn` of
            // the emptiest zone of the tenant most over its limit) runs.
            (None, PolicyKind::Tenant) => {
                let mut policy = TenantPolicy::new(scenario.tenants);
                policy.slot_limits[0] = derived.total_slots / (4 * scenario.tenants as u64);
                Box::new(policy)
            }
            (None, other) => other.build(scenario.tenants),
        };
        let engine = Engine::new(config, policy).expect("valid config");
        let driver = Driver::new(&engine);
        // Owner pages: the utilization of the slots swap may fill (outside the GC reserve
        // and the open zones), less the footer pages.
        let usable_zones =
            geometry.zone_count - derived.gc_high_watermark_zones - derived.open_zones_max - derived.gc_reserve_zones;
        let data_fraction = if footer { (derived.chunk_pages - 1) as f64 / derived.chunk_pages as f64 } else { 1.0 };
        let usable = usable_zones as f64 * geometry.zone_capacity_pages as f64 * data_fraction;
        let swapped_out_share = if scenario.workload == Workload::Mixed { MIXED_SWAPPED_OUT_SHARE } else { 1.0 };
        let page_count = scenario
            .owner_pages
            .unwrap_or((usable * scenario.utilization / swapped_out_share) as u64)
            .max(scenario.owners as u64);
        let mut pages = Vec::new();
        let mut owner_pages_initial = Vec::new();
        let mut engine = engine;
        for owner in 0..scenario.owners {
            let share =
                page_count / scenario.owners as u64 + u64::from(owner == 0) * (page_count % scenario.owners as u64);
            engine.register_owner(owner, share, owner % scenario.tenants).expect("register");
            pages.push(vec![PageModel::default(); share as usize]);
            owner_pages_initial.push(share);
        }
        let offline_due = (0..scenario.faults.offline_zones)
            .map(|_| (ops / 4 + below(&mut rng, ops / 2 + 1), chance(&mut rng, 0.5)))
            .collect();
        // A cycle starts early in the first or third quarter of the run and is released
        // in that quarter's second half once the GC has run (at the latest when the
        // next quarter ends); the quarter after it runs the workload alone, at the
        // scenario's utilization.
        let cold = (scenario.cold_cycles && ops >= 64).then(|| {
            let owner = scenario.owners;
            // Enough to bring the device to the GC low watermark with no other data.
            let cold_pages =
                (geometry.zone_count - derived.gc_low_watermark_zones) as u64 * geometry.zone_capacity_pages as u64;
            engine.register_owner(owner, cold_pages, owner % scenario.tenants).expect("register the cold owner");
            pages.push(vec![PageModel::default(); cold_pages as usize]);
            owner_pages_initial.push(cold_pages);
            let quarter = ops / 4;
            let fill_ops = (quarter / 4).max(1);
            let cycles = COLD_QUARTERS
                .iter()
                .map(|&index| {
                    let base = index * quarter;
                    ColdCycle {
                        start_op: base + below(&mut rng, quarter / 4 + 1),
                        release_op: base + quarter / 2 + below(&mut rng, quarter / 2 + 1),
                        deadline_op: base + 2 * quarter,
                    }
                })
                .collect();
            Cold {
                owner,
                pages_per_op: cold_pages.div_ceil(fill_ops).clamp(1, COLD_FILL_PAGES_PER_OP_MAX),
                cycles,
                gc_runs_at_start: None,
                written: 0,
                valid_pages_max: (usable * COLD_FILL_USABLE_SHARE) as u64,
            }
        });
        // An owner is released about once every 16 x page_count ops, so each of its
        // pages is touched some 16 times in between and the device refills: releasing
        // one every 800 ops kept most seeds' devices nearly empty.
        let release_chance = (100.0 * scenario.owners as f64 / (16.0 * page_count as f64)).min(1.0);
        Sim {
            engine,
            driver,
            rng,
            now_ns: 0,
            pages,
            pending: Vec::new(),
            swap_outs_open: BTreeMap::new(),
            releasing: Vec::new(),
            owners_reused: 0,
            version: 0,
            faults_on: true,
            violations: Vec::new(),
            pages_verified: 0,
            corrupted: 0,
            lost: 0,
            records_corrupted: 0,
            zones_taken_offline: 0,
            offline_due,
            offline_wait_ops: ops / 16,
            page_count,
            last_block: (0, 0),
            hot_owners: scenario.owners,
            generators: match scenario.workload {
                Workload::Generated(workload) => owner_pages_initial
                    .iter()
                    .take(scenario.owners as usize)
                    .enumerate()
                    .map(|(owner, &count)| {
                        znswap_workload::Generator::new(workload, count, seed ^ (owner as u64) << 32)
                    })
                    .collect(),
                _ => Vec::new(),
            },
            fill_cursor: 0,
            owner_pages_initial,
            release_chance,
            cold,
            gc_read_from: vec![false; geometry.zone_count as usize],
            submitted: 0,
            faults: FaultHits::default(),
            completions_reordered: 0,
            cold_cycles_done: 0,
            cold_pages_written: 0,
            valid_share_peak: 0.0,
            valid_pages: 0,
            usable_slots: usable,
            full_zones_without_valid_pages: 0,
            progress: Progress::default(),
            ops_gc_idle_while_full: 0,
            ops_without_empty_zone: 0,
            scenario,
        }
    }

    pub fn page_count(&self) -> u64 {
        self.page_count
    }

    fn violation(&mut self, message: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(message);
        }
    }

    fn pick_page(&mut self) -> (u32, u64) {
        let owner = below(&mut self.rng, self.hot_owners as u64) as u32;
        let count = self.pages[owner as usize].len() as u64;
        let skewed = self.scenario.workload == Workload::SkewedOverwrite;
        let page = if skewed && chance(&mut self.rng, 0.8) {
            below(&mut self.rng, (count / 5).max(1))
        } else {
            below(&mut self.rng, count)
        };
        (owner, page)
    }

    /// One operation of the workload, then the I/O it caused.
    pub fn step(&mut self, op: u64) {
        self.now_ns += 1 + below(&mut self.rng, 2_000);
        self.offline_faults(op);
        self.cold_op(op);
        match self.scenario.workload {
            Workload::Mixed => self.mixed_op(),
            Workload::UniformOverwrite | Workload::SkewedOverwrite => self.overwrite_op(true),
            Workload::UniformRead => self.overwrite_op(false),
            Workload::Churn => self.churn_op(),
            Workload::Generated(_) => self.generated_op(),
        }
        // A new tenant takes an index now and then (the daemon's tenants come and go):
        // its zones are finished, appends in flight or not.
        if self.scenario.policy == PolicyKind::Tenant && op % TENANT_BEGINS_OPS == TENANT_BEGINS_OPS / 2 {
            self.engine.tenant_begins((op / TENANT_BEGINS_OPS) as u32 % self.scenario.tenants);
        }
        self.engine.tick(self.now_ns);
        self.pump(false);
        // Not every op: unregistering scans the owner's pages (the cold owner's are a
        // device's worth), and I/O naming a released owner takes ops to drain anyway.
        if op % RELEASE_RETRY_OPS == 0 {
            self.retry_releases();
        }
        let filling =
            self.cold.as_ref().is_some_and(|cold| cold.cycles.first().is_some_and(|cycle| op >= cycle.start_op));
        if op % FILL_SAMPLE_OPS == 0 || (filling && op % COLD_FILL_SAMPLE_OPS == 0) {
            self.sample_fill();
        }
        if op % FILL_SAMPLE_OPS == 0 {
            self.check_progress(op);
        }
    }

    /// Liveness: the swap must not stay full of garbage. Between two samples the swap
    /// was below the GC low watermark, swap-outs were refused and the GC collected
    /// nothing, while valid pages filled under half the usable slots: the ops count as
    /// `ops_gc_idle_while_full`. When this lasts `STUCK_OPS_MAX` ops while some full
    /// zone holds no valid page at all (collecting it writes nothing), it is a
    /// violation: the GC refused such zones of swap-cached slots (seeds 10061, 10085).
    /// Zones with a few valid pages it may refuse, where its footer padding would eat
    /// the gain (small zones), so those stretches are only counted.
    fn check_progress(&mut self, op: u64) {
        let info = self.engine.swap_inf();
        let stats = self.engine.stats();
        let (gc_runs, backpressure) = (stats.gc_runs, stats.backpressure);
        let idle_while_full = info.free_zones < info.low_wmark
            && gc_runs == self.progress.gc_runs
            && backpressure > self.progress.backpressure
            && (self.valid_pages as f64) < 0.5 * self.usable_slots;
        self.progress.gc_runs = gc_runs;
        self.progress.backpressure = backpressure;
        if idle_while_full {
            self.ops_gc_idle_while_full += FILL_SAMPLE_OPS;
        }
        if info.free_zones == 0 {
            self.ops_without_empty_zone += FILL_SAMPLE_OPS;
        }
        if !idle_while_full || self.full_zones_without_valid_pages == 0 {
            self.progress.stuck_since_op = None;
            return;
        }
        let since = *self.progress.stuck_since_op.get_or_insert(op);
        if op - since >= STUCK_OPS_MAX {
            let message = format!(
                "GC idle for {} ops with the swap full: {} empty zones (low watermark {}), swap-outs refused, \
                 valid pages {} of {:.0} usable slots, {} full zones without a valid page",
                op - since,
                info.free_zones,
                info.low_wmark,
                self.valid_pages,
                self.usable_slots,
                self.full_zones_without_valid_pages
            );
            self.violation(message);
            self.progress.stuck_since_op = None;
        }
    }

    fn sample_fill(&mut self) {
        let zones = self.driver.device.zones.len() as u32;
        self.valid_pages = 0;
        self.full_zones_without_valid_pages = 0;
        for zone in 0..zones {
            let counters = self.engine.zone_counters(zone);
            self.valid_pages += counters.valid as u64;
            if counters.state == ZoneState::Full && counters.valid == 0 && !counters.in_gc {
                self.full_zones_without_valid_pages += 1;
            }
        }
        let share = self.valid_pages as f64 / (zones as f64 * self.driver.device.capacity as f64);
        self.valid_share_peak = self.valid_share_peak.max(share);
    }

    /// The cold owner's part of an op: within a cycle, swap out new cold pages while
    /// the device is above the GC low watermark (so the GC has to run, and keeps
    /// running as the workload adds garbage), and now and then read back or rewrite a
    /// written one (a GC-moved page is checked; cold zones get garbage, so the GC moves
    /// cold pages too). At the cycle's end the owner is released whole, under the GC.
    fn cold_op(&mut self, op: u64) {
        let Some(cold) = &self.cold else { return };
        let (owner, pages_per_op, mut written, valid_pages_max) =
            (cold.owner, cold.pages_per_op, cold.written, cold.valid_pages_max);
        let Some(&cycle) = cold.cycles.first() else { return };
        // A cycle waits for the previous one's release to be taken back.
        if op < cycle.start_op || self.releasing.contains(&owner) {
            return;
        }
        let gc_runs = self.engine.stats().gc_runs;
        let gc_runs_at_start = *self.cold.as_mut().expect("checked above").gc_runs_at_start.get_or_insert(gc_runs);
        let gc_ran = gc_runs > gc_runs_at_start;
        if (op >= cycle.release_op && gc_ran) || op >= cycle.deadline_op {
            self.release(owner);
            let cold = self.cold.as_mut().expect("checked above");
            cold.cycles.remove(0);
            cold.gc_runs_at_start = None;
            cold.written = 0;
            self.cold_cycles_done += 1;
            return;
        }
        let info = self.engine.swap_inf();
        let count = self.pages[owner as usize].len() as u64;
        if info.free_zones >= info.low_wmark && self.valid_pages < valid_pages_max {
            for _ in 0..pages_per_op {
                if written >= count {
                    break;
                }
                self.access(owner, written, true);
                self.swap_out(owner, written);
                if self.pages[owner as usize][written as usize].swap_out.is_none() {
                    break; // backpressure: the page stays resident, retried next op
                }
                written += 1;
                self.cold_pages_written += 1;
            }
            self.cold.as_mut().expect("checked above").written = written;
        }
        if written > 0 && chance(&mut self.rng, 0.25) {
            let page = below(&mut self.rng, written);
            if self.pages[owner as usize][page as usize].memory.is_some() {
                self.swap_out(owner, page);
            } else {
                let write = chance(&mut self.rng, 0.5);
                self.access(owner, page, write);
            }
        }
    }

    fn mixed_op(&mut self) {
        let (owner, page) = self.pick_page();
        if self.releasing.contains(&owner) {
            return;
        }
        match below(&mut self.rng, 100) {
            // Rare (see `release_chance`): the whole owner goes, and its id is registered
            // again once no I/O names it.
            99 if chance(&mut self.rng, self.release_chance) => self.release(owner),
            0..=39 => {
                let write = chance(&mut self.rng, 0.5);
                self.access(owner, page, write)
            }
            40..=89 => self.swap_out(owner, page),
            90..=91 => {
                let count = self.pages[owner as usize].len() as u64;
                let end = (page + 1 + below(&mut self.rng, 16)).min(count);
                self.free(owner, page..end);
            }
            _ => {
                // Let time pass: completions and chunk flushes.
                self.now_ns += below(&mut self.rng, 300_000);
            }
        }
    }

    /// Swap in (completing at once), write, swap out: one uniform or skewed overwrite.
    /// The placement probe's op: the fill first, then the generator's draws.
    fn generated_op(&mut self) {
        let filled: u64 = self.owner_pages_initial.iter().take(self.hot_owners as usize).sum();
        let (owner, page, write) = if self.fill_cursor < filled {
            let mut page = self.fill_cursor;
            let mut owner = 0;
            while page >= self.owner_pages_initial[owner as usize] {
                page -= self.owner_pages_initial[owner as usize];
                owner += 1;
            }
            self.fill_cursor += 1;
            (owner, page, true)
        } else {
            let owner = below(&mut self.rng, self.hot_owners as u64) as u32;
            let access = self.generators[owner as usize].next().expect("endless");
            (owner, access.page, access.write)
        };
        self.overwrite_page(owner, page, write);
    }

    fn overwrite_op(&mut self, write: bool) {
        let (owner, page) = self.pick_page();
        self.overwrite_page(owner, page, write);
    }

    fn overwrite_page(&mut self, owner: u32, page: u64, write: bool) {
        for _ in 0..4 {
            let model = self.pages[owner as usize][page as usize];
            if model.memory.is_some() && model.swap_out.is_none() {
                break;
            }
            self.access(owner, page, false);
            self.pump(true);
        }
        self.access(owner, page, write);
        self.swap_out(owner, page);
        self.pump(true);
    }

    /// Writes a 32-page block, or frees one: half the frees hit the block written last
    /// (short-lived data), so open zones die young, which is where eager reset wastes
    /// erases and FAR does not.
    fn churn_op(&mut self) {
        const BLOCK_PAGES: u64 = 32;
        let owner = below(&mut self.rng, self.hot_owners as u64) as u32;
        let count = self.pages[owner as usize].len() as u64;
        let random_block = below(&mut self.rng, count.div_ceil(BLOCK_PAGES)) * BLOCK_PAGES;
        if chance(&mut self.rng, 0.5) {
            let end = (random_block + BLOCK_PAGES).min(count);
            for page in random_block..end {
                self.access(owner, page, true);
                self.swap_out(owner, page);
            }
            self.last_block = (owner, random_block);
        } else {
            let (owner, start) = if chance(&mut self.rng, 0.5) { self.last_block } else { (owner, random_block) };
            let count = self.pages[owner as usize].len() as u64;
            self.free(owner, start..(start + BLOCK_PAGES).min(count));
        }
        self.pump(true);
    }

    fn access(&mut self, owner: u32, page: u64, write: bool) {
        let model = self.pages[owner as usize][page as usize];
        if model.reading.is_some() {
            return;
        }
        let answer = match self.engine.swap_in(owner, page, self.now_ns) {
            Ok(answer) => answer,
            Err(_) => return, // backpressure
        };
        match answer {
            SwapIn::Resident => {
                if model.memory.is_none() {
                    self.violation(format!("{owner}:{page} resident per engine, not held by the driver"));
                    return;
                }
            }
            SwapIn::Zero => {
                if model.oracle != 0 || model.memory.is_some() {
                    self.corrupted += 1;
                    self.violation(format!("{owner}:{page} swapped in as zero, last write was v{}", model.oracle));
                }
                self.pages[owner as usize][page as usize].memory = Some(0);
            }
            SwapIn::Read { io, zone, slot } => {
                self.pages[owner as usize][page as usize].reading = Some(io);
                self.submit(Pending { captured: Captured::swap_in(io, zone, slot), swap_in: Some((owner, page)) });
                return;
            }
            SwapIn::InFlight => return,
            SwapIn::Lost => {
                if !model.lost {
                    self.violation(format!("{owner}:{page} lost without a Lost event"));
                }
                return;
            }
        }
        if write {
            self.version += 1;
            let version = self.version;
            let entry = &mut self.pages[owner as usize][page as usize];
            entry.memory = Some(version);
            entry.oracle = version;
            entry.lost = false;
            let in_flight = entry.swap_out.is_some();
            if in_flight {
                entry.dirty = true;
            }
            // The pager learns of the first write by a write-protect fault; during a
            // swap-out it may instead read the dirty bit at completion. Exercise both.
            if !in_flight || chance(&mut self.rng, 0.5) {
                let _ = self.engine.dirtied(owner, page, self.now_ns);
            }
        }
    }

    fn swap_out(&mut self, owner: u32, page: u64) {
        let model = self.pages[owner as usize][page as usize];
        let Some(version) = model.memory else { return };
        if model.swap_out.is_some() || model.reading.is_some() {
            return;
        }
        let core = below(&mut self.rng, self.scenario.cores as u64) as u32;
        match self.engine.swap_out_from(core, owner, page, version, self.now_ns) {
            Ok(ticket) => {
                if self.swap_outs_open.insert(ticket.0, version).is_some() {
                    self.violation(format!("swap-out ticket {ticket:?} handed out twice"));
                }
                let entry = &mut self.pages[owner as usize][page as usize];
                entry.swap_out = Some(ticket.0);
                entry.dirty = false;
            }
            Err(SwapOutError::Backpressure) => {}
            Err(error) => self.violation(format!("{owner}:{page} held v{version} but swap-out refused: {error}")),
        }
    }

    fn release(&mut self, owner: u32) {
        let count = self.pages[owner as usize].len() as u64;
        self.free(owner, 0..count);
        self.releasing.push(owner);
    }

    /// Unregisters the released owners no I/O names any more, and registers their ids
    /// again, all pages never written.
    fn retry_releases(&mut self) {
        let mut index = 0;
        while index < self.releasing.len() {
            let owner = self.releasing[index];
            match self.engine.unregister_owner(owner) {
                Ok(true) => {
                    if self.pages[owner as usize]
                        .iter()
                        .any(|page| page.memory.is_some() || page.swap_out.is_some() || page.reading.is_some())
                    {
                        self.violation(format!("owner {owner} unregistered while the model holds its pages"));
                    }
                    // Often smaller: I/O still naming the old owner's last pages would
                    // then point past the new one's end. Drawn from the first size, not
                    // the last, so owners do not dwindle; the cold owner keeps its size,
                    // which its fill is sized to.
                    let initial = self.owner_pages_initial[owner as usize];
                    let count = if owner >= self.hot_owners || chance(&mut self.rng, 0.5) {
                        initial
                    } else {
                        1 + below(&mut self.rng, initial)
                    };
                    if let Err(error) = self.engine.register_owner(owner, count, owner % self.scenario.tenants) {
                        self.violation(format!("owner {owner} unregistered but not registered again: {error}"));
                    }
                    self.pages[owner as usize] = vec![PageModel::default(); count as usize];
                    self.releasing.swap_remove(index);
                    self.owners_reused += 1;
                }
                Ok(false) => index += 1,
                Err(error) => {
                    self.violation(format!("unregistering freed owner {owner}: {error}"));
                    self.releasing.swap_remove(index);
                }
            }
        }
    }

    fn free(&mut self, owner: u32, pages: std::ops::Range<u64>) {
        if self.engine.free(owner, pages.clone(), self.now_ns).is_err() {
            self.violation(format!("free {owner}:{pages:?} refused"));
            return;
        }
        for page in pages {
            self.pages[owner as usize][page as usize] = PageModel::default();
        }
    }

    fn offline_faults(&mut self, op: u64) {
        let mut index = 0;
        while index < self.offline_due.len() {
            let (due_op, at_gc) = self.offline_due[index];
            if op >= due_op {
                let gc_zone = if at_gc { self.zone_under_gc_io() } else { None };
                if !at_gc || gc_zone.is_some() || op >= due_op + self.offline_wait_ops {
                    self.offline_due.swap_remove(index);
                    self.take_zone_offline(gc_zone);
                    continue;
                }
            }
            index += 1;
        }
    }

    /// A zone with a GC read or append in flight, if any.
    fn zone_under_gc_io(&self) -> Option<u32> {
        self.pending
            .iter()
            .filter_map(|(_, _, request)| request.gc_zone())
            .find(|&zone| !self.driver.device.zones[zone as usize].offline)
    }

    /// Takes `zone`, or a random zone holding valid pages, offline.
    fn take_zone_offline(&mut self, zone: Option<u32>) {
        let zones = self.driver.device.zones.len() as u64;
        let zone = zone.or_else(|| {
            (0..zones).map(|_| below(&mut self.rng, zones) as u32).find(|&zone| {
                self.engine.zone_counters(zone).valid > 0 && !self.driver.device.zones[zone as usize].offline
            })
        });
        let Some(zone) = zone else { return };
        let under_gc = self.pending.iter().any(|(_, _, request)| request.gc_zone() == Some(zone));
        self.faults.zone_offline_under_gc += u64::from(under_gc);
        self.driver.device.take_offline(zone);
        self.zones_taken_offline += 1;
        self.engine.zone_offline(zone, self.now_ns);
        self.collect();
    }

    /// Queues a request on the model device, to complete after a random delay.
    fn submit(&mut self, request: Pending) {
        let delay = self.scenario.faults.delay_ns_max;
        let ready = self.now_ns + if delay == 0 { 0 } else { below(&mut self.rng, delay) };
        self.submitted += 1;
        self.pending.push((ready, self.submitted, request));
    }

    /// Drains the engine's requests and events, and completes what is due (all of it
    /// with `drain`), in a random order.
    pub fn pump(&mut self, drain: bool) {
        for _ in 0..100_000 {
            self.collect();
            let due: Vec<usize> =
                (0..self.pending.len()).filter(|&index| drain || self.pending[index].0 <= self.now_ns).collect();
            if due.is_empty() {
                return;
            }
            let pick = due[below(&mut self.rng, due.len() as u64) as usize];
            let (_, sequence, request) = self.pending.swap_remove(pick);
            if self.pending.iter().any(|&(_, earlier, _)| earlier < sequence) {
                self.completions_reordered += 1;
            }
            self.complete(request);
        }
        self.violation("I/O never settled".to_string());
    }

    fn collect(&mut self) {
        while let Some(captured) = driver::poll(&mut self.engine) {
            self.submit(Pending { captured, swap_in: None });
        }
        while let Some(event) = self.engine.poll_event() {
            self.event(event);
        }
    }

    /// Runs a request on the model device, with the scenario's faults, and hands the
    /// engine its end.
    fn complete(&mut self, pending: Pending) {
        let now = self.now_ns;
        let Pending { captured, swap_in } = pending;
        let zone = captured.request.zone();
        if matches!(captured.request, IoRequest::Read { .. }) && swap_in.is_none() {
            self.gc_read_from[zone as usize] = true;
        }
        let mut injector = FaultInjector {
            rng: &mut self.rng,
            on: self.faults_on,
            faults: &self.scenario.faults,
            hits: &mut self.faults,
            gc_read_from: &self.gc_read_from,
            records_corrupted: &mut self.records_corrupted,
            breaches: Vec::new(),
        };
        let completion = self.driver.run(&captured, &mut injector);
        for breach in injector.breaches {
            self.violation(breach.0);
        }
        if matches!(captured.request, IoRequest::Reset { .. }) && completion.is_ok() {
            self.gc_read_from[zone as usize] = false;
        }
        // The PTE dirty bits of Appendix A, read when the append completes.
        let dirtied: Vec<bool> = captured
            .pages
            .iter()
            .map(|page| {
                matches!(page.buf, Buf::Page(_)) && {
                    let model = self.pages[page.owner as usize][page.page as usize];
                    model.swap_out.is_some() && model.dirty
                }
            })
            .collect();
        match driver::complete(&mut self.engine, &captured.request, &completion, &dirtied, now) {
            Ok(outcome) => {
                if let (Some((owner, page)), Some(outcome)) = (swap_in, outcome) {
                    let data = completion.versions().first().copied().unwrap_or(UNWRITTEN_VERSION);
                    self.swap_in_done(captured.request.io(), owner, page, outcome, data);
                }
            }
            Err(refused) => self.violation(refused.to_string()),
        }
    }

    fn swap_in_done(&mut self, io: IoId, owner: u32, page: u64, outcome: ReadOutcome, data: u64) {
        // Not the page's current read: freed while in flight (the model was reset; the
        // owner may even be registered again, smaller), perhaps read again since.
        let current = self.pages[owner as usize].get(page as usize).is_some_and(|entry| entry.reading == Some(io));
        if !current {
            if !matches!(outcome, ReadOutcome::Freed) {
                self.violation(format!("{owner}:{page} stale read {io:?} completed as {outcome:?} after free"));
            }
            return;
        }
        let entry = &mut self.pages[owner as usize][page as usize];
        entry.reading = None;
        match outcome {
            ReadOutcome::SwappedIn { .. } => {
                let expected = entry.oracle;
                entry.memory = Some(data);
                self.pages_verified += 1;
                if data != expected {
                    self.corrupted += 1;
                    self.violation(format!("{owner}:{page} swapped in v{data}, last write was v{expected}"));
                }
            }
            ReadOutcome::Failed => {}
            ReadOutcome::Lost => entry.lost = true,
            other => self.violation(format!("{owner}:{page} swap-in read completed as {other:?}")),
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::SwapOutDone { ticket, owner, page, buf, outcome } => {
                match self.swap_outs_open.remove(&ticket.0) {
                    Some(passed) if passed == buf => {}
                    Some(passed) => self
                        .violation(format!("{owner}:{page} swap-out {ticket:?} gave back buffer {buf}, not {passed}")),
                    None => {
                        self.violation(format!("{owner}:{page} swap-out {ticket:?} reported done twice or unknown"))
                    }
                }
                let Some(&entry) = self.pages[owner as usize].get(page as usize) else {
                    self.violation(format!("{owner}:{page} swap-out done past its owner's end ({outcome:?})"));
                    return;
                };
                if entry.swap_out != Some(ticket.0) {
                    if matches!(outcome, SwapOutOutcome::Swapped { .. }) {
                        self.violation(format!("{owner}:{page} stale swap-out {ticket:?} committed"));
                    }
                    return;
                }
                match outcome {
                    SwapOutOutcome::Swapped { .. } => {
                        if entry.dirty {
                            self.violation(format!("{owner}:{page} dirtied during its write yet committed"));
                        }
                        self.pages[owner as usize][page as usize].memory = None;
                    }
                    SwapOutOutcome::AbortedDirty | SwapOutOutcome::Failed => {}
                    SwapOutOutcome::Dropped => self.violation(format!("{owner}:{page} live swap-out dropped")),
                }
                let entry = &mut self.pages[owner as usize][page as usize];
                entry.swap_out = None;
                entry.dirty = false;
            }
            Event::Lost { owner, page } => {
                let entry = self.pages[owner as usize][page as usize];
                if entry.memory.is_some() {
                    self.violation(format!("{owner}:{page} reported lost while the owner holds it"));
                }
                // Truly destroyed: its last version must sit in an offline zone.
                let in_offline_zone =
                    self.driver.device.zones.iter().any(|zone| zone.offline && zone.data.contains(&entry.oracle));
                if !in_offline_zone {
                    self.violation(format!(
                        "{owner}:{page} reported lost but v{} was not in an offline zone",
                        entry.oracle
                    ));
                }
                self.pages[owner as usize][page as usize].lost = true;
                self.lost += 1;
            }
            Event::RecordRejected { zone, slot, error } => {
                if self.scenario.faults.record_corruption == 0.0 {
                    self.violation(format!("record at {zone}:{slot} rejected without corruption: {error}"));
                }
            }
            Event::Remapped { .. } | Event::ZoneRetired { .. } => {}
        }
    }

    /// Completes everything, then swaps in and checks every page.
    pub fn finish(&mut self) {
        self.faults_on = false;
        self.pump(true);
        for _ in 0..4 {
            self.now_ns += 10_000_000;
            self.engine.tick(self.now_ns);
            self.pump(true);
        }
        // Drained: every released owner must come free now.
        self.retry_releases();
        if let Some(&owner) = self.releasing.first() {
            let message =
                format!("{} freed owners still named by I/O after it drained (owner {owner})", self.releasing.len());
            self.violation(message);
        }
        for owner in 0..self.pages.len() as u32 {
            for page in 0..self.pages[owner as usize].len() as u64 {
                for _ in 0..4 {
                    let model = self.pages[owner as usize][page as usize];
                    if model.lost || model.memory.is_some() {
                        break;
                    }
                    self.access(owner, page, false);
                    // A page never written comes back at once: no I/O to complete, and a
                    // pump per page (each poll advancing the engine) was most of a
                    // short run's time once the cold owner brought a device's worth.
                    if self.pages[owner as usize][page as usize].memory.is_none() {
                        self.pump(true);
                    }
                }
                let model = self.pages[owner as usize][page as usize];
                if let Some(memory) = model.memory {
                    if memory != model.oracle {
                        self.corrupted += 1;
                        self.violation(format!("{owner}:{page} holds v{memory}, last write was v{}", model.oracle));
                    }
                } else if !model.lost {
                    self.violation(format!("{owner}:{page} could not be swapped in"));
                }
            }
        }
        self.pump(true);
        if let Some((ticket, _)) = self.swap_outs_open.first_key_value() {
            let message =
                format!("{} swap-outs never reported done (ticket {ticket} first)", self.swap_outs_open.len());
            self.violation(message);
        }
        self.check_invariants();
    }

    pub fn check_invariants(&mut self) {
        let engine = &self.engine;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.check_invariants())) {
            let message = panic_message(&panic);
            self.violation(format!("invariant: {message}"));
        }
    }

    pub fn lost_pages(&self) -> HashMap<u32, u64> {
        let mut lost = HashMap::new();
        for (owner, pages) in self.pages.iter().enumerate() {
            let count = pages.iter().filter(|page| page.lost).count() as u64;
            if count > 0 {
                lost.insert(owner as u32, count);
            }
        }
        lost
    }
}

pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message.to_string()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "panic".to_string()
    }
}
