//! ZNSwap: the unchanged `znswap-core` engine over the ZNS SSD model.
//!
//! Swap-outs become engine appends (merged per swap-zone until `flush`), faults become
//! engine swap-ins, and every request the engine emits (appends, swap-in and ZNGC reads
//! with their per-LBA metadata, resets, finishes) goes to `ZnsSsd`, whose completion
//! time schedules the engine's completion. The device's data is the reference driver's
//! model (`znswap_core::driver`): the version written to each slot and the records
//! written with it, so every swap-in is checked against the host's oracle and ZNGC's
//! metadata reads return the engine's own records (16 bytes in the 64-byte per-LBA
//! metadata, as `docs/format.md` says). An append lands in the model when `ZnsSsd`
//! takes it (it reports the slot at once); reads, resets and finishes when they
//! complete.
//! ZNGC's CPU time is derived from the engine's counters (`CpuCosts::gc_*`) and charged
//! to the `kznsd` kernel thread and, for accounting, to the tenants whose data it
//! moved.

use znswap_core::driver::{self, Captured, Completion, Driver, NoFaults};
use znswap_core::policy::TenantPolicy;
use znswap_core::{
    Config, ConfigError, Engine, Event, Geometry, IoError, IoRequest, OwnerError, PolicyKind, ReadOutcome,
    SwapCacheMode, SwapIn, SwapOutError, SwapOutOutcome,
};
use znswap_flash::{ZnsConfig, ZnsConfigError, ZnsSsd};

use crate::backend::{Backend, BackendCounters, Io, KernelThread, Notice, PageId, SwapOutStart};
use crate::calib::CpuCosts;
use crate::slab::Slab;

/// The version a swap-in reports when it read nothing.
const UNWRITTEN: u32 = u32::MAX;

/// How to build the ZNSwap back end.
#[derive(Clone, Debug)]
pub struct ZnsSetup {
    pub device: ZnsConfig,
    pub policy: PolicyKind,
    /// GC destination streams (hot/cold: 2, survivors split by access history).
    pub gc_streams: u32,
    pub swap_cache: SwapCacheMode,
    /// Host regions: (first page, pages, tenant); each is one engine owner.
    pub regions: Vec<(PageId, PageId, u16)>,
    pub tenants: u32,
    /// Tenant policy: slot limit per tenant (None: no limits).
    pub tenant_slot_limits: Option<Vec<u64>>,
    /// The nominal swap size (utilization = data on swap / this).
    pub swap_pages: u64,
    pub costs: CpuCosts,
}

/// Why the ZNSwap back end cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZnsBackendError {
    #[error("the ZNS SSD model's configuration")]
    Device(#[from] ZnsConfigError),
    #[error("the znswap engine's configuration")]
    Engine(#[from] ConfigError),
    #[error("the znswap engine refused region {owner} as an owner")]
    Region {
        owner: u32,
        #[source]
        source: OwnerError,
    },
}

/// A request `ZnsSsd` is carrying out.
struct Pending {
    captured: Captured,
    /// An append's end, known when the device took it.
    appended: Option<Completion>,
    /// A swap-in read's page.
    swap_in: Option<PageId>,
}

pub struct ZnsBackend {
    engine: Engine,
    device: ZnsSsd,
    zone_size_lbas: u64,
    capacity: u32,
    regions: Vec<(PageId, PageId, u16)>,
    /// What the device holds, and the ZNGC move buffer.
    driver: Driver,
    pending: Slab<Pending>,
    swap_pages: u64,
    costs: CpuCosts,
    /// Swap-ins refused for lack of an I/O descriptor, retried after completions.
    deferred_swap_ins: Vec<PageId>,
    in_swap_out: bool,
    last_gc: (u64, u64),
    last_tenant_gc_bytes: Vec<u64>,
    pub violations: Vec<String>,
}

impl ZnsBackend {
    pub fn new(setup: ZnsSetup) -> Result<ZnsBackend, ZnsBackendError> {
        let device = ZnsSsd::new(setup.device)?;
        let zoned = device.geometry();
        let geometry = Geometry {
            zone_count: zoned.zone_count,
            zone_capacity_pages: zoned.zone_capacity_lbas as u32,
            metadata_bytes: zoned.metadata_bytes,
            write_granularity_pages: (zoned.write_granularity_bytes / zoned.lba_bytes).max(1),
            max_open_zones: zoned.max_open_zones,
            max_active_zones: zoned.max_active_zones,
            zone_append_pages_max: zoned.zone_append_max_bytes / zoned.lba_bytes,
        };
        let mut config = Config::new(geometry);
        config.gc_streams = setup.gc_streams;
        config.swap_cache = setup.swap_cache;
        config.io_in_flight_max = 4096;
        // The paper's ZNGC reads only valid slots; spanning gaps saves syscalls in the
        // live pager, a cost this model does not have, and would add device reads.
        config.gc_read_gap_pages_max = 0;
        config.owners_max = setup.regions.len() as u32;
        config.tenants_max = setup.tenants.max(1);
        let policy: Box<dyn znswap_core::Policy> = match (setup.policy, &setup.tenant_slot_limits) {
            (PolicyKind::Tenant, Some(limits)) => {
                let mut policy = TenantPolicy::new(setup.tenants);
                policy.slot_limits.copy_from_slice(&limits[..setup.tenants as usize]);
                Box::new(policy)
            }
            (kind, _) => kind.build(setup.tenants),
        };
        let mut engine = Engine::new(config, policy)?;
        for (owner, &(_, pages, tenant)) in setup.regions.iter().enumerate() {
            engine
                .register_owner(owner as u32, pages as u64, tenant as u32)
                .map_err(|source| ZnsBackendError::Region { owner: owner as u32, source })?;
        }
        Ok(ZnsBackend {
            driver: Driver::new(&engine),
            engine,
            zone_size_lbas: zoned.zone_size_lbas,
            capacity: geometry.zone_capacity_pages,
            regions: setup.regions,
            pending: Slab::default(),
            swap_pages: setup.swap_pages,
            costs: setup.costs,
            deferred_swap_ins: Vec::new(),
            in_swap_out: false,
            last_gc: (0, 0),
            last_tenant_gc_bytes: vec![0; setup.tenants.max(1) as usize],
            violations: Vec::new(),
            device,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn device(&self) -> &ZnsSsd {
        &self.device
    }

    fn owner_of(&self, page: PageId) -> (u32, u64) {
        let owner = self.regions.partition_point(|&(first, _, _)| first <= page) - 1;
        (owner as u32, (page - self.regions[owner].0) as u64)
    }

    fn page_of(&self, owner: u32, index: u64) -> PageId {
        self.regions[owner as usize].0 + index as PageId
    }

    fn lba(&self, zone: u32, slot: u32) -> u64 {
        zone as u64 * self.zone_size_lbas + slot as u64
    }

    fn violation(&mut self, message: String) {
        if self.violations.len() < 32 {
            self.violations.push(message);
        }
    }

    /// Submits everything the engine wants done and turns its events into notices.
    fn drain(&mut self, io: &mut Io) {
        while let Some(captured) = driver::poll(&mut self.engine) {
            self.submit(io, captured);
        }
        self.events(io);
    }

    fn events(&mut self, io: &mut Io) {
        while let Some(event) = self.engine.poll_event() {
            match event {
                Event::SwapOutDone { owner, page, outcome, .. } => {
                    let page = self.page_of(owner, page);
                    // Inside `swap_out` only a clean swap cache hit completes at once.
                    let written = !self.in_swap_out;
                    let notice = match outcome {
                        SwapOutOutcome::Swapped { .. } => Notice::SwapOutDone { page, swapped: true, written },
                        SwapOutOutcome::AbortedDirty => Notice::SwapOutDone { page, swapped: false, written: true },
                        // Freed while in flight: nothing to keep.
                        SwapOutOutcome::Dropped => Notice::SwapOutDone { page, swapped: false, written: true },
                        SwapOutOutcome::Failed => {
                            self.violation(format!("page {page}: swap-out {outcome:?} with no fault injected"));
                            Notice::SwapOutDone { page, swapped: false, written: false }
                        }
                    };
                    io.notify(notice);
                }
                Event::Remapped { .. } => {}
                Event::Lost { owner, page } => {
                    let page = self.page_of(owner, page);
                    self.violation(format!("page {page} lost with no fault injected"));
                }
                Event::RecordRejected { zone, slot, error } => {
                    self.violation(format!("record at {zone}:{slot} rejected: {error}"));
                }
                Event::ZoneRetired { zone } => self.violation(format!("zone {zone} retired with no fault injected")),
            }
        }
    }

    fn submit(&mut self, io: &mut Io, captured: Captured) {
        let now = io.now;
        let request = captured.request;
        let timing = match request {
            IoRequest::Append { zone, pages, .. } => match self.device.append(now, zone, pages) {
                Ok((first_lba, done)) => {
                    // Zone append: the data is in place, at the slot the device says.
                    let first_slot = (first_lba - zone as u64 * self.zone_size_lbas) as u32;
                    let placed = self.run_on_model(&captured);
                    if placed != Completion::Append(Ok(first_slot)) {
                        self.violation(format!(
                            "append to zone {zone}: the ZNS SSD placed it at slot {first_slot}, the model {placed:?}"
                        ));
                    }
                    let appended = Some(Completion::Append(Ok(first_slot)));
                    let token = self.pending.insert(Pending { captured, appended, swap_in: None });
                    io.complete_at(done, token);
                    return;
                }
                Err(error) => Err(format!("append of {pages} pages to zone {zone} refused by the device: {error}")),
            },
            IoRequest::Read { zone, slot, pages, .. } => self
                .device
                .read(now, self.lba(zone, slot), pages)
                .map_err(|error| format!("read of {pages} pages at {zone}:{slot} refused: {error}")),
            IoRequest::Reset { zone, .. } => {
                self.device.reset(now, zone).map_err(|error| format!("reset of zone {zone} refused: {error}"))
            }
            IoRequest::Finish { zone, .. } => {
                self.device.finish(now, zone).map_err(|error| format!("finish of zone {zone} refused: {error}"))
            }
        };
        match timing {
            Ok(done) => {
                let token = self.pending.insert(Pending { captured, appended: None, swap_in: None });
                io.complete_at(done, token);
            }
            Err(refusal) => {
                self.violation(refusal);
                let failed = Completion::failed(&request, IoError::Device);
                let result = driver::complete(&mut self.engine, &request, &failed, &[], now);
                if let (IoRequest::Append { .. }, Err(refused)) = (request, result) {
                    self.violation(refused.to_string());
                }
            }
        }
    }

    /// Carries a request out on the model device; a breach of its contract is a
    /// violation.
    fn run_on_model(&mut self, captured: &Captured) -> Completion {
        let mut hooks = NoFaults::default();
        let completion = self.driver.run(captured, &mut hooks);
        for breach in hooks.breaches {
            self.violation(breach.0);
        }
        completion
    }

    fn read_completed(&mut self, io: &mut Io, captured: &Captured, completion: &Completion, swap_in: Option<PageId>) {
        let IoRequest::Read { zone, slot, .. } = captured.request else { unreachable!("only reads come here") };
        let outcome = driver::complete(&mut self.engine, &captured.request, completion, &[], io.now);
        match (outcome, swap_in) {
            (Ok(Some(ReadOutcome::SwappedIn { cached })), Some(page)) => {
                let version = completion.versions()[0] as u32;
                io.notify(Notice::SwapInDone { page, version, cached });
            }
            (Ok(Some(ReadOutcome::Gc)), None) => {}
            (Ok(outcome), page) => {
                let outcome = outcome.expect("a read's outcome");
                self.violation(format!("read of {zone}:{slot} for {page:?} ended {outcome:?}"));
            }
            (Err(refused), _) => self.violation(refused.to_string()),
        }
    }

    /// ZNGC CPU: per slot its gather stage scans and per page it moves, charged to
    /// `kznsd` and split over tenants by the bytes moved for each.
    fn charge_gc_cpu(&mut self, io: &mut Io) {
        let stats = self.engine.stats();
        let (victims, moved) = (stats.gc_runs, stats.gc_pages_written);
        let new_victims = victims - self.last_gc.0;
        let new_moved = moved - self.last_gc.1;
        self.last_gc = (victims, moved);
        let ns = new_victims * self.capacity as u64 * self.costs.gc_slot_scanned_ns
            + new_moved * self.costs.gc_page_moved_ns;
        if ns == 0 {
            return;
        }
        io.kernel_work(KernelThread::Gc, ns);
        let tenant_bytes = self.engine.tenant_gc_bytes();
        let tenants = io.tenant_gc_ns.len().min(self.last_tenant_gc_bytes.len());
        let deltas: Vec<u64> = (0..tenants).map(|t| tenant_bytes[t] - self.last_tenant_gc_bytes[t]).collect();
        self.last_tenant_gc_bytes[..tenants].copy_from_slice(&tenant_bytes[..tenants]);
        let total: u64 = deltas.iter().sum();
        for (tenant, delta) in deltas.iter().enumerate() {
            // Nothing moved (victims scanned only): split the scan evenly.
            io.tenant_gc_ns[tenant] += (ns * delta).checked_div(total).unwrap_or(ns / tenants as u64);
        }
    }

    fn retry_deferred(&mut self, io: &mut Io) {
        if self.deferred_swap_ins.is_empty() {
            return;
        }
        let mut deferred = std::mem::take(&mut self.deferred_swap_ins);
        let mut unused = Vec::new();
        for page in deferred.drain(..) {
            self.swap_in(io, 0, page, &mut unused);
        }
        self.deferred_swap_ins.append(&mut deferred);
    }
}

impl Backend for ZnsBackend {
    fn name(&self) -> String {
        format!("znswap/{}", self.engine.policy_name())
    }

    fn swap_out(&mut self, io: &mut Io, cpu: u32, page: PageId, version: u32) -> SwapOutStart {
        let (owner, index) = self.owner_of(page);
        let answer = self.engine.swap_out_from(cpu, owner, index, version as u64, io.now);
        self.in_swap_out = true;
        self.events(io);
        self.in_swap_out = false;
        match answer {
            Ok(_) => SwapOutStart::Started,
            Err(SwapOutError::Backpressure) => SwapOutStart::Busy,
            Err(error) => {
                self.violation(format!("page {page}: swap-out refused: {error}"));
                SwapOutStart::Busy
            }
        }
    }

    fn flush(&mut self, io: &mut Io) {
        self.drain(io);
    }

    fn swap_in(&mut self, io: &mut Io, _cpu: u32, page: PageId, _readahead: &mut Vec<PageId>) {
        let (owner, index) = self.owner_of(page);
        match self.engine.swap_in(owner, index, io.now) {
            Ok(SwapIn::Read { io: id, zone, slot }) => {
                let captured = Captured::swap_in(id, zone, slot);
                match self.device.read(io.now, self.lba(zone, slot), 1) {
                    Ok(done) => {
                        let token = self.pending.insert(Pending { captured, appended: None, swap_in: Some(page) });
                        io.complete_at(done, token);
                    }
                    Err(error) => {
                        self.violation(format!("swap-in read of {zone}:{slot} refused: {error}"));
                        let failed = Completion::failed(&captured.request, IoError::Device);
                        let _ = driver::complete(&mut self.engine, &captured.request, &failed, &[], io.now);
                    }
                }
            }
            Ok(other) => {
                // The host reads only pages it swapped out; anything else loses data.
                self.violation(format!("page {page}: swap-in answered {other:?}"));
                io.notify(Notice::SwapInDone { page, version: UNWRITTEN, cached: false });
            }
            Err(znswap_core::EngineError::Backpressure) => self.deferred_swap_ins.push(page),
            Err(error) => {
                self.violation(format!("page {page}: swap-in refused: {error}"));
                io.notify(Notice::SwapInDone { page, version: UNWRITTEN, cached: false });
            }
        }
        // Requests wait for the next flush or completion: appends keep merging.
        self.events(io);
    }

    fn read_ahead(&mut self, io: &mut Io, page: PageId) {
        // ZNSwap reads only what faults (the paper's prototype keeps Linux's readahead
        // path, which for random swap-ins shrinks to one page); never called.
        self.violation(format!("page {page}: readahead asked of ZNSwap"));
        io.notify(Notice::SwapInDone { page, version: UNWRITTEN, cached: false });
    }

    fn dirtied(&mut self, io: &mut Io, page: PageId) {
        let (owner, index) = self.owner_of(page);
        if let Err(error) = self.engine.dirtied(owner, index, io.now) {
            self.violation(format!("page {page}: dirtied refused: {error}"));
        }
        self.events(io);
    }

    fn free(&mut self, io: &mut Io, page: PageId) {
        let (owner, index) = self.owner_of(page);
        if let Err(error) = self.engine.free(owner, index..index + 1, io.now) {
            self.violation(format!("page {page}: free refused: {error}"));
        }
        self.drain(io);
    }

    fn complete(&mut self, io: &mut Io, token: u64) {
        let Some(Pending { captured, appended, swap_in }) = self.pending.take(token) else {
            self.violation(format!("unknown completion token {token}"));
            return;
        };
        let completion = match appended {
            Some(completion) => completion,
            None => self.run_on_model(&captured),
        };
        if let IoRequest::Read { .. } = captured.request {
            self.read_completed(io, &captured, &completion, swap_in);
        } else if let Err(refused) = driver::complete(&mut self.engine, &captured.request, &completion, &[], io.now) {
            self.violation(refused.to_string());
        }
        self.drain(io);
        self.retry_deferred(io);
    }

    fn tick(&mut self, io: &mut Io) {
        self.engine.tick(io.now);
        self.drain(io);
        self.retry_deferred(io);
        self.charge_gc_cpu(io);
    }

    fn counters(&self) -> BackendCounters {
        let stats = self.engine.stats();
        let media = self.device.counters();
        let zones = self.engine.config().geometry.zone_count;
        let slots_used = (0..zones)
            .map(|zone| {
                let counters = self.engine.zone_counters(zone);
                (counters.valid + counters.swap_cache) as u64
            })
            .sum();
        BackendCounters {
            swap_out_pages_written: stats.host_pages_written,
            swap_in_pages_read: stats.swap_in_reads,
            media_pages_written: media.media_pages_written,
            device_host_pages_written: media.host_pages_written,
            host_gc_pages_written: stats.gc_pages_written,
            host_gc_pages_read: stats.gc_pages_read,
            host_gc_victims: stats.gc_runs,
            trim_commands: 0,
            trim_pages: 0,
            erases: media.erases,
            slots_used,
            device_live_pages: slots_used,
            slots_capacity: self.swap_pages,
            records_rejected: stats.records_rejected,
        }
    }

    fn tenant_gc_bytes(&self) -> Vec<u64> {
        self.engine.tenant_gc_bytes().to_vec()
    }

    fn check(&mut self) -> Vec<String> {
        let engine = &self.engine;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.check_invariants())) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            self.violation(format!("engine invariant: {message}"));
        }
        self.violations.clone()
    }
}
