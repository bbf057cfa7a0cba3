//! The swap engine: a deterministic, sans-I/O state machine.
//!
//! Calling order (one thread; the driver owns every byte and every clock):
//! 1. `Engine::new`, then `register_owner` for each region.
//! 2. Inputs, each with `now` in nanoseconds: `swap_out`, `swap_in`, `dirtied`, `free`,
//!    completions (`append_done`, `read_done`, `reset_done`, `finish_done`),
//!    `zone_offline` and `tick` (at `poll_timeout`, or whenever convenient).
//! 3. After every input, drain `poll_io` (submit each request; for an Append read
//!    `append_pages` and `append_records`) and `poll_event`.
//!
//! Swap-outs queued between two `poll_io` calls for one swap-zone are merged into one
//! Append (bounded by the zone append limit); in footer mode they fill a chunk, flushed
//! when full or `chunk_flush_timeout_ns` after its first page.

use std::collections::VecDeque;

use crate::config::{Config, ConfigError, Derived, RecordEncoding};
use crate::gc::GcState;
use crate::io::{IoId, IoKind, IoRequest, IoTable};
use crate::owner_table::{OwnerError, OwnerTable, PageState};
use crate::policy::{HistorySpan, PageInfo, Policy, PolicyView, SwapInfo, SwapZoneId, VmInfo, ZoneInfo};
use crate::record::{self, PageRecord, RecordError};
use crate::slot_map::{SlotAddress, SlotMaps, SlotState, ZoneState};
use crate::stats::Stats;
use crate::victim_index::VictimIndex;

pub(crate) const NO_ZONE: u32 = u32::MAX;
/// Attempts of a reset or finish before the zone is retired: transient errors should
/// not cost a zone, a zone that keeps failing should not loop forever.
pub(crate) const ZONE_COMMAND_ATTEMPTS_MAX: u8 = 8;

/// Names one swap-out; comes back in `Event::SwapOutDone`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Ticket(pub u64);

/// Why a swap-out was refused. None of these lose data: the page stays resident.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SwapOutError {
    /// No room right now (GC behind, open-zone limit, I/O table full): retry after
    /// completions.
    #[error("swap is busy or full: keep the page resident and retry later")]
    Backpressure,
    #[error("page is not resident (state {state:?})")]
    NotResident { state: PageState },
    #[error(transparent)]
    Owner(#[from] OwnerError),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error(transparent)]
    Owner(#[from] OwnerError),
    #[error("unknown or already completed I/O {io:?}")]
    UnknownIo { io: IoId },
    #[error("completion of the wrong kind for I/O {io:?}")]
    WrongKind { io: IoId },
    #[error("append {io:?} reported at slot {first_slot}, impossible for {pages} pages in zone {zone}")]
    BadCompletion { io: IoId, zone: u32, first_slot: u32, pages: u32 },
    #[error("{what}: {length} bytes, expected {expected}")]
    RecordsLength { what: &'static str, length: usize, expected: usize },
    #[error("swap-in table full: retry after completions")]
    Backpressure,
    #[error("zone {zone} out of range")]
    Zone { zone: u32 },
    #[error("owner {owner} page {page} is not freed: free all its pages before unregistering it")]
    NotFreed { owner: u32, page: u64 },
}

/// Answer to `swap_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapIn {
    /// The driver still holds the page.
    Resident,
    /// Never written: map a zero page.
    Zero,
    /// Read `slot` of `zone` into the faulting page, then call `read_done(io, ..)`.
    Read { io: IoId, zone: u32, slot: u32 },
    /// A read of this page is already in flight.
    InFlight,
    /// The device destroyed the only copy.
    Lost,
}

/// What a completed read meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The page is resident again; `cached`: its slot stays as swap cache.
    SwappedIn { cached: bool },
    /// The read failed; the page is still swapped: retry `swap_in`.
    Failed,
    /// The zone went offline: the page is lost.
    Lost,
    /// The page was freed while the read was in flight: discard the data.
    Freed,
    /// A GC read.
    Gc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapOutOutcome {
    /// Written; the driver may drop its copy.
    Swapped { zone: u32, slot: u32 },
    /// Dirtied during the write (Appendix A): stays resident, new slot invalid.
    AbortedDirty,
    /// The append failed: stays resident.
    Failed,
    /// Freed while in flight.
    Dropped,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    SwapOutDone {
        ticket: Ticket,
        owner: u32,
        page: u64,
        /// The buffer handle given to `swap_out`, given back: no append reads it any more,
        /// so the driver may reuse it. Exactly one `SwapOutDone` follows every swap-out
        /// the engine took.
        buf: u64,
        outcome: SwapOutOutcome,
    },
    /// The GC moved a page.
    Remapped { owner: u32, page: u64, zone: u32, slot: u32 },
    /// A zone went offline with the only copy of this page.
    Lost { owner: u32, page: u64 },
    /// A reverse-map record failed its checks; the owner was found by a table scan.
    RecordRejected { zone: u32, slot: u32, error: RecordError },
    /// A zone taken out of service (offline, or resets kept failing).
    ZoneRetired { zone: u32 },
}

/// Host memory the engine holds, for the "no host FTL" claim.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct HostMemory {
    pub slot_maps_bytes: u64,
    pub victim_index_bytes: u64,
    pub footer_bitmap_bytes: u64,
    pub owner_table_bytes: u64,
    pub io_table_bytes: u64,
    pub gc_buffers_bytes: u64,
    pub total_slots: u64,
    /// Everything but the owner table (which exists per application page, like PTEs)
    /// and the GC move buffer (a fixed bound), per 4 KiB slot.
    pub bytes_per_slot: f64,
}

pub(crate) struct SwapZone {
    /// Backing zone, `NO_ZONE` when detached.
    pub zone: u32,
    /// The Append being filled, not yet emitted.
    pub pending: Option<IoId>,
    /// Footer mode: data pages the filling chunk can take.
    pub chunk_data_pages: u32,
    pub pending_since_ns: u64,
    /// `Engine::pages_queued` of its side when this swap-zone last took a page or a zone.
    pub last_page_at: u64,
}

pub struct Engine {
    pub(crate) config: Config,
    pub(crate) derived: Derived,
    pub(crate) capacity: u32,
    pub(crate) slots: SlotMaps,
    /// Footer mode: one bit per slot marking footer pages, so the GC finds a slot's
    /// footer whatever order the device placed the chunks in.
    pub(crate) footer_bits: Vec<u64>,
    pub(crate) footer_words_per_zone: usize,
    pub(crate) victims: VictimIndex,
    pub(crate) owners: OwnerTable,
    pub(crate) policy: Option<Box<dyn Policy>>,
    /// The policy's victim choice, else the configuration's.
    pub(crate) victim_selection: crate::config::VictimSelection,
    pub(crate) swap_zones: Vec<SwapZone>,
    pub(crate) ios: IoTable,
    pub(crate) requests: VecDeque<IoRequest>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) empty_zones: VecDeque<u32>,
    pub(crate) open_user_zones: u32,
    pub(crate) open_gc_zones: u32,
    pub(crate) reset_wanted: Vec<u32>,
    pub(crate) finish_wanted: Vec<u32>,
    pub(crate) gc: GcState,
    pub(crate) stats: Stats,
    pub(crate) tenant_slots: Vec<u64>,
    pub(crate) tenant_gc_bytes: Vec<u64>,
    /// Bytes each tenant's swap-outs appended (written pages, not swap-cache hits).
    pub(crate) tenant_host_bytes: Vec<u64>,
    /// `tenant_gc_bytes` at the start of the last swap cache window and of this one
    /// (`adapt_swap_cache`): whether the GC moved a tenant's pages lately.
    pub(crate) tenant_gc_bytes_windows: Vec<u64>,
    pub(crate) tenant_gc_bytes_window_start: Vec<u64>,
    /// Each tenant's `Stats::swap_cache_hits`.
    pub(crate) tenant_cache_hits: Vec<u64>,
    pub(crate) next_ticket: u64,
    pub(crate) now_ns: u64,
    /// Epochs so far (the access history's clock): 1/16 of the policy's
    /// `history_span` each, `epoch_pages` swap-outs for the current one.
    pub(crate) epoch: u64,
    pub(crate) history_span: HistorySpan,
    pub(crate) epoch_pages: u64,
    pub(crate) pages_this_epoch: u64,
    /// Swap-outs so far (`swap_out_clock`).
    pub(crate) swap_out_count: u64,
    /// Pages queued to the user swap-zones and to the GC's: the clocks of
    /// `retire_idle_swap_zones`. Each side has its own, so that a GC burst while swap-outs
    /// wait does not age the user zones, nor a quiet GC its streams.
    pub(crate) pages_queued: [u64; 2],
    pub(crate) valid_total: u64,
    pub(crate) cached_total: u64,
    pub(crate) cache_limit_slots: u64,
    pub(crate) cache_window_host: u64,
    pub(crate) cache_window_gc: u64,
    pub(crate) scratch_records: Vec<PageRecord>,
    /// Slots that became garbage (invalid or swap-cached): the stalled GC's restart
    /// signal.
    pub(crate) invalidations: u64,
    pub(crate) resets_in_flight: u32,
    /// A swap-out was refused for want of a zone since the last slot was invalidated.
    pub(crate) refused_for_space: bool,
    /// Reset holds covering each zone (`hold_resets`): a zone is reset only at 0.
    pub(crate) zone_holds: Vec<u32>,
    /// A reset of the zone was due while it was held: it goes ahead at the release.
    pub(crate) reset_deferred: Vec<bool>,
    /// The zones each live hold covers, by hold id (`None`: released, id free).
    pub(crate) holds: Vec<Option<Vec<u32>>>,
}

/// The swap-zone the GC writes into: one past the user swap-zones.
impl Engine {
    pub fn new(config: Config, policy: Box<dyn Policy>) -> Result<Engine, ConfigError> {
        let derived = config.derive()?;
        let g = config.geometry;
        let capacity = g.zone_capacity_pages;
        let footer_words_per_zone =
            if derived.encoding == RecordEncoding::ChunkFooter { capacity.div_ceil(64) as usize } else { 0 };
        let record_bytes_max =
            (derived.append_pages_max as usize * record::PAGE_RECORD_BYTES).max(record::FOOTER_BYTES);
        let swap_zones = (0..derived.user_swap_zones + derived.gc_streams)
            .map(|_| SwapZone {
                zone: NO_ZONE,
                pending: None,
                chunk_data_pages: 0,
                pending_since_ns: 0,
                last_page_at: 0,
            })
            .collect();
        let total_slots = derived.total_slots;
        let history_span = policy.history_span();
        Ok(Engine {
            capacity,
            slots: SlotMaps::new(g.zone_count, capacity),
            footer_bits: vec![0; footer_words_per_zone * g.zone_count as usize],
            footer_words_per_zone,
            victims: VictimIndex::new(g.zone_count, capacity),
            owners: OwnerTable::new(config.owners_max, config.tenants_max),
            victim_selection: policy.victim_selection().unwrap_or(config.victim_selection),
            policy: Some(policy),
            swap_zones,
            ios: IoTable::new(config.io_in_flight_max, derived.append_pages_max, record_bytes_max),
            requests: VecDeque::with_capacity(config.io_in_flight_max as usize),
            events: VecDeque::with_capacity(1024),
            empty_zones: (0..g.zone_count).collect(),
            open_user_zones: 0,
            open_gc_zones: 0,
            reset_wanted: Vec::with_capacity(g.zone_count as usize),
            finish_wanted: Vec::with_capacity(g.zone_count as usize),
            gc: GcState::new(&config, derived.gc_batch_pages, derived.gc_buffer_pages),
            invalidations: 0,
            resets_in_flight: 0,
            refused_for_space: false,
            zone_holds: vec![0; g.zone_count as usize],
            reset_deferred: vec![false; g.zone_count as usize],
            holds: Vec::new(),
            stats: Stats::default(),
            tenant_slots: vec![0; config.tenants_max as usize],
            tenant_gc_bytes: vec![0; config.tenants_max as usize],
            tenant_host_bytes: vec![0; config.tenants_max as usize],
            tenant_gc_bytes_windows: vec![0; config.tenants_max as usize],
            tenant_cache_hits: vec![0; config.tenants_max as usize],
            tenant_gc_bytes_window_start: vec![0; config.tenants_max as usize],
            next_ticket: 1,
            now_ns: 0,
            epoch: 0,
            history_span,
            epoch_pages: history_span.epoch_pages(total_slots, 0),
            pages_this_epoch: 0,
            swap_out_count: 0,
            pages_queued: [0; 2],
            valid_total: 0,
            cached_total: 0,
            cache_limit_slots: total_slots,
            cache_window_host: 0,
            cache_window_gc: 0,
            scratch_records: vec![PageRecord { owner: 0, page: 0 }; record::FOOTER_RECORDS_MAX],
            derived,
            config,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn derived(&self) -> &Derived {
        &self.derived
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// GC bytes moved on behalf of each tenant (charged to its I/O budget).
    pub fn tenant_gc_bytes(&self) -> &[u64] {
        &self.tenant_gc_bytes
    }

    /// Bytes each tenant's swap-outs wrote to the device (its appended pages; a page
    /// whose swap cache slot held it wrote nothing). With `tenant_gc_bytes`, what a
    /// tenant's share of the device's writes is charged.
    pub fn tenant_host_bytes(&self) -> &[u64] {
        &self.tenant_host_bytes
    }

    /// Each tenant's slots in use: its pages on the device (valid) and its swap cache.
    pub fn tenant_slots(&self) -> &[u64] {
        &self.tenant_slots
    }

    /// Each tenant's pages evicted clean, their swap cache slot still theirs (its share
    /// of `Stats::swap_cache_hits`).
    pub fn tenant_swap_cache_hits(&self) -> &[u64] {
        &self.tenant_cache_hits
    }

    /// Pages of GC move buffer the driver must preallocate (`Buf::Gc(0 .. n)`).
    pub fn gc_buffer_pages(&self) -> u32 {
        self.derived.gc_buffer_pages
    }

    /// I/O requests emitted and not yet completed.
    pub fn io_in_flight(&self) -> u32 {
        self.ios.in_flight()
    }

    /// Swap-outs so far: the clock zone ages are counted in. Counting in writes, not
    /// nanoseconds, keeps cost-benefit's age independent of the load: a zone nothing
    /// has been written around for a second of idle time is no colder than before
    /// (SepBIT and the LFS cleaner count age in data written too).
    pub(crate) fn swap_out_clock(&self) -> u64 {
        self.swap_out_count
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.as_ref().expect("policy present").name()
    }

    pub fn register_owner(&mut self, owner: u32, pages: u64, tenant: u32) -> Result<(), OwnerError> {
        self.owners.register(owner, pages, tenant)
    }

    /// Takes back `owner`'s id, so it can be registered again (a region freed, its id
    /// reused). The caller has freed every page of it (`free`). While I/O in flight
    /// still names it (a queued or written swap-out, a swap-in read, a GC move), this
    /// returns false and changes nothing: ask again after completions. Unknown owners,
    /// and owners with pages not freed, are errors.
    pub fn unregister_owner(&mut self, owner: u32) -> Result<bool, EngineError> {
        let pages = self.owners.pages(owner)?;
        if let Some(page) = (0..pages).find(|&page| self.owners.get(owner, page) != PageState::Zero) {
            return Err(EngineError::NotFreed { owner, page });
        }
        if self.ios.names_owner(owner) {
            return Ok(false);
        }
        self.owners.unregister(owner)?;
        Ok(true)
    }

    pub fn page_state(&self, owner: u32, page: u64) -> Result<PageState, OwnerError> {
        self.owners.check(owner, page)?;
        Ok(self.owners.get(owner, page))
    }

    /// The first GC swap-zone; GC streams follow the user swap-zones.
    pub(crate) fn gc_swap_zone(&self) -> u32 {
        self.derived.user_swap_zones
    }

    pub(crate) fn is_gc_swap_zone(&self, swap_zone: u32) -> bool {
        swap_zone >= self.derived.user_swap_zones
    }

    pub(crate) fn address(&self, zone: u32, slot: u32) -> SlotAddress {
        SlotAddress::new(zone, slot, self.capacity)
    }

    /// The zone and the slot within it of a slot address.
    pub(crate) fn split(&self, address: SlotAddress) -> (u32, u32) {
        (address.zone(self.capacity), address.slot(self.capacity))
    }

    // ---------------------------------------------------------------- slot changes

    /// Every slot change goes through here, so counters, totals, the victim index,
    /// tenant charges and FAR stay in step with the slot map.
    pub(crate) fn set_slot(&mut self, zone: u32, slot: u32, to: SlotState, tenant: Option<u16>) {
        let from = self.slots.get(zone, slot);
        self.slots.set(zone, slot, to);
        let occupied = |state: SlotState| matches!(state, SlotState::Valid | SlotState::SwapCached);
        match from {
            SlotState::Valid => self.valid_total -= 1,
            SlotState::SwapCached => self.cached_total -= 1,
            _ => {}
        }
        match to {
            SlotState::Valid => self.valid_total += 1,
            SlotState::SwapCached => self.cached_total += 1,
            _ => {}
        }
        if to == SlotState::Invalid || to == SlotState::SwapCached {
            self.invalidations += 1;
            self.refused_for_space = false;
        }
        if occupied(from) != occupied(to) {
            let tenant = tenant.expect("occupancy change names its tenant") as usize;
            if occupied(to) {
                self.tenant_slots[tenant] += 1;
            } else {
                self.tenant_slots[tenant] -= 1;
            }
        }
        let counters = *self.slots.zone(zone);
        if counters.state == ZoneState::Full && !counters.in_gc {
            if counters.valid + counters.swap_cache == 0 {
                // Fully invalid and full: its write pointer is at the end, so FAR
                // resets it at any free-space level.
                self.victims.remove(zone);
                self.try_reset(zone);
            } else {
                self.index_victim(zone);
            }
        }
    }

    // ---------------------------------------------------------------- outputs

    /// The next I/O to submit. Also where queued appends are merged and sent, and where
    /// the GC advances.
    pub fn poll_io(&mut self) -> Option<IoRequest> {
        if self.requests.is_empty() {
            self.progress();
        }
        self.requests.pop_front()
    }

    pub(crate) fn progress(&mut self) {
        if self.derived.encoding == RecordEncoding::PerPageMetadata {
            for swap_zone in 0..self.derived.user_swap_zones {
                self.seal(swap_zone);
            }
        }
        // try_reset puts back what still cannot get an I/O descriptor. Once none is
        // left the rest waits as it is: trying each (a scan of the list apiece) made
        // every poll quadratic after a large free emptied thousands of zones at once.
        let mut wanted = std::mem::take(&mut self.reset_wanted);
        for (index, &zone) in wanted.iter().enumerate() {
            if self.ios.is_full() {
                self.reset_wanted.extend_from_slice(&wanted[index..]);
                break;
            }
            self.try_reset(zone);
        }
        wanted.clear();
        if self.reset_wanted.is_empty() {
            self.reset_wanted = wanted;
        }
        let mut index = 0;
        while index < self.finish_wanted.len() {
            let zone = self.finish_wanted[index];
            if self.slots.zone(zone).appends_in_flight > 0 {
                index += 1;
                continue;
            }
            let generation = self.slots.zone(zone).resets;
            let Some(io) = self.ios.allocate(IoKind::Finish, zone, generation) else { break };
            self.finish_wanted.swap_remove(index);
            self.requests.push_back(IoRequest::Finish { io, zone });
        }
        self.gc_step();
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Asks the GC to reclaim a zone (`rec_zn`).
    pub fn rec_zn(&mut self, zone: u32) -> Result<(), EngineError> {
        if zone >= self.slots.zone_count() {
            return Err(EngineError::Zone { zone });
        }
        self.gc.request(zone);
        Ok(())
    }

    // ------------------------------------------------------------ policy API

    pub(crate) fn view(&self) -> View<'_> {
        View { engine: self }
    }

    pub fn swap_inf(&self) -> SwapInfo {
        SwapInfo {
            num_slots: self.derived.total_slots,
            num_zones: self.slots.zone_count(),
            free_slots: self.free_slots(),
            live_slots: self.valid_total + self.cached_total,
            free_zones: self.empty_zones.len() as u32,
            high_wmark: self.derived.gc_high_watermark_zones,
            low_wmark: self.derived.gc_low_watermark_zones,
            gc_running: self.gc.running,
            swap_zones: self.derived.user_swap_zones,
            gc_streams: self.derived.gc_streams,
        }
    }

    /// `pg_inf`: what a policy would be told about this page.
    pub fn pg_inf(&self, owner: u32, page: u64) -> Result<PageInfo, OwnerError> {
        self.owners.check(owner, page)?;
        Ok(PageInfo {
            owner,
            page,
            tenant: self.owners.tenant(owner),
            access_history: self.owners.history(owner, page, self.epoch),
            core: 0,
        })
    }

    /// `vm_inf`.
    pub fn vm_inf(&self, owner: u32) -> Option<VmInfo> {
        self.view().vm_inf(owner)
    }

    pub fn zn_inf(&self, zone: u32) -> ZoneInfo {
        let counters = self.slots.zone(zone);
        ZoneInfo {
            zone_id: zone,
            capacity: self.capacity,
            valid_slots: counters.valid,
            invalid_slots: counters.invalid,
            swap_cache_slots: counters.swap_cache,
            written_slots: counters.written,
            swap_zone_id: self.is_attached(zone).then_some(counters.swap_zone as SwapZoneId),
            tenant: counters.tenant,
            reclaimable: counters.state == ZoneState::Full && !counters.in_gc,
        }
    }

    pub fn zone_counters(&self, zone: u32) -> crate::slot_map::ZoneCounters {
        *self.slots.zone(zone)
    }

    /// A slot's state in the slot map: a `Valid` slot holds a swapped-out page's only
    /// copy, written since its zone's last reset (`ZoneCounters::resets`).
    pub fn slot_state(&self, zone: u32, slot: u32) -> crate::slot_map::SlotState {
        self.slots.get(zone, slot)
    }

    pub fn host_memory(&self) -> HostMemory {
        let slot_maps_bytes = self.slots.host_bytes();
        let victim_index_bytes = self.slots.zone_count() as u64 * 12 + 1024 * 4;
        let footer_bitmap_bytes = self.footer_bits.len() as u64 * 8;
        let io_table_bytes = self.config.io_in_flight_max as u64
            * (self.derived.append_pages_max as u64 * 32 + record::FOOTER_BYTES as u64 + 64);
        let total_slots = self.derived.total_slots;
        HostMemory {
            slot_maps_bytes,
            victim_index_bytes,
            footer_bitmap_bytes,
            owner_table_bytes: self.owners.host_bytes(),
            io_table_bytes,
            gc_buffers_bytes: self.gc.host_bytes(),
            total_slots,
            bytes_per_slot: (slot_maps_bytes + victim_index_bytes + footer_bitmap_bytes) as f64 / total_slots as f64,
        }
    }

    /// Checks every cross-structure invariant (expensive: tests and simulation only).
    pub fn check_invariants(&self) {
        let zone_count = self.slots.zone_count();
        let (mut open_user, mut open_gc) = (0, 0);
        let (mut valid, mut cached) = (0u64, 0u64);
        for zone in 0..zone_count {
            self.slots.check_zone(zone);
            let counters = self.slots.zone(zone);
            match counters.state {
                ZoneState::Open | ZoneState::Resetting
                    if counters.state == ZoneState::Open || counters.reset_from_open =>
                {
                    if self.is_gc_swap_zone(counters.swap_zone) {
                        open_gc += 1;
                    } else {
                        open_user += 1;
                    }
                }
                ZoneState::Empty => assert!(self.empty_zones.contains(&zone), "empty zone {zone} not listed"),
                _ => {}
            }
            if counters.state != ZoneState::Offline {
                valid += counters.valid as u64;
                cached += counters.swap_cache as u64;
            }
            let held = self.zone_holds[zone as usize] > 0;
            let candidate = counters.state == ZoneState::Full
                && !counters.in_gc
                && counters.valid + counters.swap_cache > 0
                && !held;
            assert_eq!(self.victims.contains(zone), candidate, "zone {zone} victim index membership");
            if held {
                assert!(
                    !matches!(counters.state, ZoneState::Empty | ZoneState::Resetting),
                    "held zone {zone} is {:?}",
                    counters.state
                );
            }
            assert!(!self.reset_deferred[zone as usize] || held, "zone {zone}'s reset deferred with no hold on it");
        }
        let mut zone_holds = vec![0u32; zone_count as usize];
        for zones in self.holds.iter().flatten() {
            for &zone in zones {
                zone_holds[zone as usize] += 1;
            }
        }
        assert_eq!(zone_holds, self.zone_holds, "hold counts per zone against the holds' zone lists");
        assert_eq!((open_user, open_gc), (self.open_user_zones, self.open_gc_zones));
        assert!(self.open_user_zones <= self.derived.user_open_zones_max);
        assert!(self.open_gc_zones <= self.derived.gc_streams);
        assert_eq!((valid, cached), (self.valid_total, self.cached_total));
        let mut pointed = std::collections::HashSet::new();
        let mut tenant_slots = vec![0u64; self.tenant_slots.len()];
        self.owners.for_each(|owner, page, state| {
            let Some(address) = state.address() else { return };
            let (zone, zone_slot) = self.split(address);
            assert!(pointed.insert(address), "slot {address} pointed at twice");
            tenant_slots[self.owners.tenant(owner) as usize] += 1;
            let expected = match state {
                PageState::SwapCached { .. } => SlotState::SwapCached,
                _ => SlotState::Valid,
            };
            assert_ne!(self.slots.zone(zone).state, ZoneState::Offline, "{owner}:{page} points at an offline zone");
            assert_eq!(self.slots.get(zone, zone_slot), expected, "{owner}:{page} {state:?}");
        });
        assert_eq!(pointed.len() as u64, valid + cached, "every occupied slot has exactly one owner");
        assert_eq!(tenant_slots, self.tenant_slots);
    }
}

pub(crate) struct View<'a> {
    engine: &'a Engine,
}

impl PolicyView for View<'_> {
    fn zn_inf(&self, zone: u32) -> ZoneInfo {
        self.engine.zn_inf(zone)
    }

    fn vm_inf(&self, owner: u32) -> Option<VmInfo> {
        let pages = self.engine.owners.pages(owner).ok()?;
        Some(VmInfo { owner, pages, tenant: self.engine.owners.tenant(owner) })
    }

    fn swap_inf(&self) -> SwapInfo {
        self.engine.swap_inf()
    }

    fn tenant_slots(&self, tenant: u16) -> u64 {
        self.engine.tenant_slots.get(tenant as usize).copied().unwrap_or(0)
    }
}

impl Engine {
    /// The GC swap-zone the policy picks for a page the GC moves.
    pub(crate) fn policy_gc_swap_zone(&mut self, owner: u32, page: u64) -> u32 {
        if self.derived.gc_streams == 1 {
            return self.gc_swap_zone();
        }
        let info = PageInfo {
            owner,
            page,
            tenant: self.owners.tenant(owner),
            access_history: self.owners.history(owner, page, self.epoch),
            core: 0,
        };
        let mut policy = self.policy.take().expect("policy present");
        let stream = policy.gc_stream(&info, &self.view()) % self.derived.gc_streams;
        self.policy = Some(policy);
        let swap_zone = self.gc_swap_zone() + stream;
        if stream > 0 && self.swap_zones[swap_zone as usize].zone == NO_ZONE && !self.spares_last_empty_zone() {
            // The stream would need the last empty zone: the nearest stream below it with a
            // zone open takes the page (the policies number streams from hot to cold), else
            // the first stream, which may open that zone. (A stream held back by the open
            // limit waits instead: a zone closes as soon as its appends are done.)
            self.stats.gc_stream_fallbacks += 1;
            let first = self.gc_swap_zone();
            return (first + 1..swap_zone)
                .rev()
                .find(|&nearer| self.swap_zones[nearer as usize].zone != NO_ZONE)
                .unwrap_or(first);
        }
        swap_zone
    }

    /// Lets the policy react to the low watermark (`rec_zn` requests).
    pub(crate) fn policy_low_watermark(&mut self) {
        let mut policy = self.policy.take().expect("policy present");
        let mut reclaim = Vec::new();
        policy.low_watermark(&self.view(), &mut reclaim);
        self.policy = Some(policy);
        for zone in reclaim {
            if zone < self.slots.zone_count() {
                self.gc.request(zone);
            }
        }
    }
}
