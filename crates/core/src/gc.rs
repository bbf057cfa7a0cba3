//! ZNGC (§5.2) as an explicit state machine:
//! `Idle -> gather -> Reading -> Writing -> Activating -> Idle`, victims reset once empty.
//!
//! - **Gather** collects the victims' occupied slots (valid and swap-cached) into a
//!   preallocated batch of `gc_batch_pages_max` entries.
//! - **Read** reads the valid slots' data into the GC buffers with their reverse-map
//!   records (per-LBA metadata, or the chunk footers). Swap-cached slots need only their
//!   record: they are dropped, not copied; their owner is found through the record. A
//!   read spans small gaps of unoccupied slots (`gc_read_gap_pages_max`): gather gives
//!   the gap buffer pages too, so the read lands in one stretch of the buffer.
//! - **Write**: each entry's record is checked against the owner table; pages whose owner
//!   still points at the victim slot are appended to the GC swap-zone.
//! - **Activate** (on each append completion): compare-and-set each owner from the victim
//!   slot to the new slot; pages swapped in, freed or dirtied meanwhile are skipped and
//!   their new slot invalidated.
//! - **Reset** a victim once it holds nothing valid or cached and no read is in flight.
//!
//! A swap-in of a page under migration reads the old slot, which stays valid until the
//! activate stage, and the victim is never reset under a read in flight.
//!
//! Where this departs from the paper, and why:
//! - The GC writes into its own swap-zones (1 to 3 "GC streams", the policy picks the
//!   stream per page), never into user swap-zones: a zone the GC opened from the reserve
//!   would otherwise be filled by swap-outs, and the reserve could run dry (deadlock).
//!   With one victim at a time whose valid slots fit in one zone, the GC's first stream
//!   needs at most one empty zone per victim. The other streams open a zone only while
//!   another is left for it, and send their pages to a lower stream otherwise, so
//!   `gc_reserve_zones` (at least 1, 2 by default) need not grow with the streams: a
//!   larger reserve would raise the watermarks and keep a zone more of headroom empty.
//! - Dropping a swap-cached slot needs its owner, and there is no reverse table: the GC
//!   reads the slot's record (per-LBA metadata with the data, or just the chunk footer)
//!   and drops it without writing. Reads, not writes: WAF is unaffected.
//! - A progress guard stops a run whose victims win back no more zones than the GC opens
//!   (high watermark out of reach, or footer padding eating the gain); it restarts once
//!   more slots are invalidated. Swap-out meanwhile gets backpressure, never an error.

use std::collections::VecDeque;

use crate::config::{Config, RecordEncoding, VictimSelection};
use crate::engine::{Engine, Event};
use crate::io::{AppendPage, Buf, IoError, IoId, IoKind, IoRequest};
use crate::owner_table::PageState;
use crate::record::{self, PageRecord, RecordError};
use crate::slot_map::{SlotAddress, SlotState, ZoneState};

/// Largest GC read, in pages.
const GC_READ_PAGES_MAX: u32 = 64;
/// Passes over a victim before the GC gives up on it (read errors, races).
const VICTIM_PASSES_MAX: u32 = 4;
/// Candidates cost-benefit compares (from the fullest-of-garbage buckets down).
const COST_BENEFIT_CANDIDATES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Idle,
    Reading,
    Writing,
    Activating,
}

#[derive(Clone, Copy, Debug)]
struct Victim {
    zone: u32,
    cursor: u32,
    passes: u32,
    swept: bool,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    zone: u32,
    slot: u32,
    /// GC buffer page holding the slot's data once read.
    buf: u32,
    footer_slot: u32,
    record: Option<PageRecord>,
    record_error: Option<RecordError>,
    needs_data: bool,
    data_read: bool,
    failed: bool,
}

pub(crate) struct GcState {
    pub running: bool,
    /// Swap-out hit backpressure.
    pub wanted: bool,
    /// A GC append of this batch failed: victims get another pass.
    pub batch_failed: bool,
    stage: Stage,
    victims: Vec<Victim>,
    victims_max: u32,
    requested: VecDeque<u32>,
    batch: Vec<Entry>,
    batch_max: u32,
    buffer_pages: u32,
    gap_max: u32,
    next_read: usize,
    next_footer: usize,
    reads_outstanding: u32,
    next_write: usize,
    appends_outstanding: u32,
    candidates: Vec<u32>,
    /// Progress guard: victims reset minus zones the GC opened, over a window of
    /// victims. The GC's own balance, so swap-outs consuming zones meanwhile do not
    /// count against it.
    pub window_gain: i64,
    window_victims: u32,
    /// Victims collected since the policy was last asked for reclaim hints.
    victims_since_policy: u32,
    /// The GC gave up for lack of garbage; it restarts once this many more slots have
    /// been invalidated.
    stalled_until_invalidations: Option<u64>,
}

impl GcState {
    pub fn new(config: &Config, batch_max: u32, buffer_pages: u32) -> GcState {
        assert!(buffer_pages >= batch_max);
        GcState {
            window_gain: 0,
            window_victims: 0,
            victims_since_policy: u32::MAX,
            stalled_until_invalidations: None,
            running: false,
            wanted: false,
            batch_failed: false,
            stage: Stage::Idle,
            victims: Vec::with_capacity(config.gc_victims_max as usize),
            victims_max: config.gc_victims_max,
            requested: VecDeque::with_capacity(64),
            batch: Vec::with_capacity(config.gc_batch_pages_max as usize),
            batch_max,
            buffer_pages,
            gap_max: config.gc_read_gap_pages_max,
            next_read: 0,
            next_footer: 0,
            reads_outstanding: 0,
            next_write: 0,
            appends_outstanding: 0,
            candidates: vec![0; COST_BENEFIT_CANDIDATES],
        }
    }

    /// `rec_zn`: bounded; a request beyond the bound is dropped (the GC still runs).
    pub fn request(&mut self, zone: u32) {
        if self.requested.len() < self.requested.capacity().max(64) && !self.requested.contains(&zone) {
            self.requested.push_back(zone);
        }
    }

    /// The GC's memory bound: batch entries plus the move buffer the driver holds.
    pub fn host_bytes(&self) -> u64 {
        self.batch_max as u64 * std::mem::size_of::<Entry>() as u64
            + self.buffer_pages as u64 * crate::config::PAGE_BYTES as u64
    }
}

impl Engine {
    pub(crate) fn gc_step(&mut self) {
        // Each stage either moves on or waits for completions; the bound only guards
        // against a stage bug looping (an idle turn that emits nothing finishes a victim).
        for _ in 0..256 {
            let stage = self.gc.stage;
            match stage {
                Stage::Idle => {
                    if !self.gc_idle() {
                        return;
                    }
                }
                Stage::Reading => {
                    self.gc_issue_reads();
                    if self.gc.reads_outstanding > 0
                        || self.gc.next_read < self.gc.batch.len()
                        || self.gc.next_footer < self.gc.batch.len()
                    {
                        return;
                    }
                    self.gc.stage = Stage::Writing;
                }
                Stage::Writing => {
                    if !self.gc_write() {
                        return;
                    }
                    self.gc.stage = Stage::Activating;
                }
                Stage::Activating => {
                    if self.gc.appends_outstanding > 0 {
                        return;
                    }
                    self.stats.gc_batches += 1;
                    self.gc.batch.clear();
                    self.gc.batch_failed = false;
                    self.gc.stage = Stage::Idle;
                }
            }
        }
    }

    /// Decides whether to run, finishes swept victims, picks new ones and gathers a
    /// batch. True when a batch is ready to read.
    fn gc_idle(&mut self) -> bool {
        let empty = self.empty_zones.len() as u32;
        if !self.gc.running {
            let low = empty < self.derived.gc_low_watermark_zones;
            if !low && self.gc.requested.is_empty() {
                return false;
            }
            if let Some(until) = self.gc.stalled_until_invalidations {
                // An explicit `rec_zn` is tried even while stalled.
                if self.invalidations < until && self.gc.requested.is_empty() {
                    return false;
                }
                self.gc.stalled_until_invalidations = None;
            }
            self.gc.running = true;
            // The policy's reclaim hints (`rec_zn`) may cost it a scan of its zones: ask
            // once per low-watermark's worth of victims, not on every run.
            if low && self.gc.victims_since_policy >= self.derived.gc_low_watermark_zones.min(64) {
                self.gc.victims_since_policy = 0;
                self.policy_low_watermark();
            }
        }
        self.gc.wanted = false;
        self.gc_finish_victims();
        if !self.gc.running {
            // The progress guard stopped the run (`gc_check_progress`). Picking victims
            // now would carry on regardless, and the pages they move would count as the
            // invalidations the stall waits for: the GC never stopped (DST seeds 115 and
            // 141 at 200,000 ops).
            return false;
        }
        if self.gc.victims.is_empty() {
            let satisfied = self.empty_zones.len() as u32 >= self.derived.gc_high_watermark_zones;
            if satisfied && self.gc.requested.is_empty() {
                self.gc.running = false;
                return false;
            }
            self.retire_idle_swap_zones();
            if !self.gc_pick_victims() {
                // Nothing worth collecting: wait for more garbage instead of retrying on
                // every poll.
                self.gc.running = false;
                self.gc.stalled_until_invalidations = Some(self.invalidations + 1);
                return false;
            }
        }
        self.gc_gather();
        if self.gc.batch.is_empty() {
            // Every victim swept with nothing to move: finish them on the next turn.
            return self.gc.victims.iter().any(|victim| !victim.swept) || self.gc_finish_victims_now();
        }
        self.gc.next_read = 0;
        self.gc.next_footer = 0;
        self.gc.next_write = 0;
        self.gc.reads_outstanding = 0;
        self.gc.stage = Stage::Reading;
        true
    }

    fn gc_finish_victims_now(&mut self) -> bool {
        let before = self.gc.victims.len();
        self.gc_finish_victims();
        self.gc.victims.len() != before
    }

    /// Victims whose cursor reached the end: reset when empty, else another pass.
    fn gc_finish_victims(&mut self) {
        let mut index = 0;
        while index < self.gc.victims.len() {
            let victim = self.gc.victims[index];
            if !victim.swept {
                index += 1;
                continue;
            }
            let counters = *self.slots.zone(victim.zone);
            if counters.state == ZoneState::Offline {
                self.gc.victims.swap_remove(index);
                continue;
            }
            if counters.valid + counters.swap_cache == 0 {
                self.gc.victims.swap_remove(index);
                self.slots.zone_mut(victim.zone).in_gc = false;
                self.stats.gc_runs += 1;
                self.try_reset(victim.zone);
                self.gc_check_progress();
                continue;
            }
            if victim.passes + 1 >= VICTIM_PASSES_MAX {
                // Give it back; a later run may manage.
                self.gc.victims.swap_remove(index);
                self.slots.zone_mut(victim.zone).in_gc = false;
                self.index_victim(victim.zone);
                continue;
            }
            self.gc.victims[index] = Victim { zone: victim.zone, cursor: 0, passes: victim.passes + 1, swept: false };
            index += 1;
        }
    }

    /// Guards against collecting forever when the garbage left cannot win back zones
    /// (say the high watermark is out of reach, or footer padding eats the gain): after a
    /// window of victims that reset no more zones than the GC opened, the run stops
    /// until more slots are invalidated.
    fn gc_check_progress(&mut self) {
        self.gc.victims_since_policy = self.gc.victims_since_policy.saturating_add(1);
        self.gc.window_victims += 1;
        self.gc.window_gain += 1;
        // Long enough that slow but real progress (a tenth of a zone per victim at 90 %
        // utilization) shows, short enough to bound wasted work.
        let window = (4 * self.gc.victims_max).max(32);
        if self.gc.window_victims < window {
            return;
        }
        if self.gc.window_gain <= 0 {
            self.gc.running = false;
            self.stats.gc_stalls += 1;
            let restart = (self.capacity / 4 + self.derived.chunk_pages) as u64;
            self.gc.stalled_until_invalidations = Some(self.invalidations + restart);
        }
        self.gc.window_gain = 0;
        self.gc.window_victims = 0;
    }

    fn gc_take_victim(&mut self, zone: u32) {
        self.victims.remove(zone);
        self.slots.zone_mut(zone).in_gc = true;
        self.gc.victims.push(Victim { zone, cursor: 0, passes: 0, swept: false });
    }

    /// Requested zones first (`rec_zn`), then the victim index. Multi-victim mode adds
    /// victims while their valid slots together fit in one zone, so one batch of victims
    /// never needs more than the GC's one reserved zone.
    fn gc_pick_victims(&mut self) -> bool {
        while let Some(zone) = self.gc.requested.pop_front() {
            let counters = self.slots.zone(zone);
            if counters.state == ZoneState::Full
                && !counters.in_gc
                && counters.garbage() > 0
                && self.zone_holds[zone as usize] == 0
            {
                self.gc_take_victim(zone);
                break;
            }
        }
        let mut valid_sum: u64 = self.gc.victims.iter().map(|victim| self.slots.zone(victim.zone).valid as u64).sum();
        let mut garbage_sum: u64 =
            self.gc.victims.iter().map(|victim| self.slots.zone(victim.zone).garbage() as u64).sum();
        while (self.gc.victims.len() as u32) < self.gc.victims_max {
            let Some(zone) = self.gc_best_candidate() else { break };
            let counters = self.slots.zone(zone);
            if counters.garbage() == 0 {
                break;
            }
            if !self.gc.victims.is_empty() && valid_sum + counters.valid as u64 > self.capacity as u64 {
                break;
            }
            valid_sum += counters.valid as u64;
            garbage_sum += counters.garbage() as u64;
            self.gc_take_victim(zone);
        }
        // The victims together must win back more than the GC may pad (footer mode: up
        // to a chunk per stream); otherwise collecting them loses space. Small zones
        // whose chunk is most of a zone need the multi-victim mode to gain at all.
        // Victims with nothing valid (only swap-cached slots left to drop) write nothing,
        // so pad nothing: refusing them left the swap full of such zones, the GC idle
        // and every swap-out refused (DST seed 10 at 200,000 ops, 10061 and 10085 at
        // 1,000,000).
        let padding_max = if self.derived.chunk_pages > 1 && valid_sum > 0 {
            (self.derived.chunk_pages * self.derived.gc_streams) as u64
        } else {
            0
        };
        if garbage_sum <= padding_max {
            for victim in std::mem::take(&mut self.gc.victims) {
                self.slots.zone_mut(victim.zone).in_gc = false;
                self.index_victim(victim.zone);
            }
            return false;
        }
        true
    }

    fn gc_best_candidate(&mut self) -> Option<u32> {
        match self.victim_selection {
            VictimSelection::Greedy => self.victims.most_garbage(),
            VictimSelection::CostBenefit => {
                let mut candidates = std::mem::take(&mut self.gc.candidates);
                let count = self.victims.top_candidates(&mut candidates);
                let now = self.swap_out_clock();
                let capacity = self.capacity as f64;
                let best = candidates[..count].iter().copied().max_by(|&a, &b| {
                    let score = |zone: u32| {
                        let counters = self.slots.zone(zone);
                        let utilization = counters.valid as f64 / capacity;
                        let age = (now.saturating_sub(counters.last_write) + 1) as f64;
                        (1.0 - utilization) * age / (1.0 + utilization)
                    };
                    score(a).total_cmp(&score(b)).then(b.cmp(&a))
                });
                self.gc.candidates = candidates;
                best
            }
        }
    }

    fn footer_of(&self, zone: u32, slot: u32) -> Option<u32> {
        let base = zone as usize * self.footer_words_per_zone;
        let mut word = slot as usize / 64;
        let mut bits = self.footer_bits[base + word] & (u64::MAX << (slot % 64));
        loop {
            if bits != 0 {
                return Some(word as u32 * 64 + bits.trailing_zeros());
            }
            word += 1;
            if word >= self.footer_words_per_zone {
                return None;
            }
            bits = self.footer_bits[base + word];
        }
    }

    fn chunk_start_of(&self, zone: u32, footer_slot: u32) -> u32 {
        let base = zone as usize * self.footer_words_per_zone;
        let mut slot = footer_slot;
        while slot > 0 {
            slot -= 1;
            if self.footer_bits[base + slot as usize / 64] & (1 << (slot % 64)) != 0 {
                return slot + 1;
            }
        }
        0
    }

    /// Collects the victims' occupied slots and gives each a GC buffer page. A slot that
    /// must be read and follows the previous one across a gap of at most
    /// `gc_read_gap_pages_max` slots, within one read's reach, gets the buffer page at
    /// the same distance, so `gc_issue_reads` can read the gap along.
    fn gc_gather(&mut self) {
        assert!(self.gc.batch.is_empty());
        let footer_mode = self.derived.encoding == RecordEncoding::ChunkFooter;
        // Buffer pages handed out, and where the current read stretch began.
        let mut buffer_used = 0u32;
        let mut stretch_start_buf = 0u32;
        for index in 0..self.gc.victims.len() {
            let mut victim = self.gc.victims[index];
            while !victim.swept
                && (self.gc.batch.len() as u32) < self.gc.batch_max
                && buffer_used < self.gc.buffer_pages
            {
                match self.slots.next_occupied(victim.zone, victim.cursor) {
                    Some(slot) => {
                        let valid = self.slots.get(victim.zone, slot) == SlotState::Valid;
                        // Per-LBA metadata comes only with the data.
                        let needs_data = valid || !footer_mode;
                        let footer_slot =
                            if footer_mode { self.footer_of(victim.zone, slot).unwrap_or(u32::MAX) } else { 0 };
                        let spanned = match self.gc.batch.last() {
                            Some(previous)
                                if needs_data
                                    && previous.needs_data
                                    && previous.zone == victim.zone
                                    && slot
                                        .checked_sub(previous.slot + 1)
                                        .is_some_and(|gap| gap <= self.gc.gap_max) =>
                            {
                                let buf = previous.buf + (slot - previous.slot);
                                (buf - stretch_start_buf < GC_READ_PAGES_MAX && buf < self.gc.buffer_pages)
                                    .then_some(buf)
                            }
                            _ => None,
                        };
                        let buf = match spanned {
                            Some(buf) => buf,
                            None => {
                                stretch_start_buf = buffer_used;
                                buffer_used
                            }
                        };
                        buffer_used = buf + 1;
                        self.gc.batch.push(Entry {
                            zone: victim.zone,
                            slot,
                            buf,
                            footer_slot,
                            record: None,
                            record_error: None,
                            needs_data,
                            data_read: false,
                            failed: false,
                        });
                        victim.cursor = slot + 1;
                    }
                    None => victim.swept = true,
                }
            }
            self.gc.victims[index] = victim;
        }
    }

    fn gc_issue_reads(&mut self) {
        let footer_mode = self.derived.encoding == RecordEncoding::ChunkFooter;
        while self.gc.next_read < self.gc.batch.len() {
            let first = self.gc.next_read;
            let entry = self.gc.batch[first];
            if !entry.needs_data {
                self.gc.next_read += 1;
                continue;
            }
            // The stretch gather laid out: entries whose buffer pages sit as far apart
            // as their slots (gaps in between are read along).
            let mut end = first + 1;
            while end < self.gc.batch.len() {
                let next = self.gc.batch[end];
                let distance = next.slot.wrapping_sub(entry.slot);
                if next.zone != entry.zone
                    || !next.needs_data
                    || next.buf.wrapping_sub(entry.buf) != distance
                    || distance >= GC_READ_PAGES_MAX
                {
                    break;
                }
                end += 1;
            }
            let pages = self.gc.batch[end - 1].slot - entry.slot + 1;
            let generation = self.slots.zone(entry.zone).resets;
            let kind = IoKind::GcRead { first: first as u32, end: end as u32 };
            let Some(io) = self.ios.allocate(kind, entry.zone, generation) else {
                return;
            };
            let descriptor = self.ios.get_mut(io).expect("io");
            descriptor.slot = entry.slot;
            descriptor.pages_count = pages;
            self.slots.zone_mut(entry.zone).reads_in_flight += 1;
            self.gc.reads_outstanding += 1;
            self.stats.gc_pages_read += pages as u64;
            self.requests.push_back(IoRequest::Read {
                io,
                zone: entry.zone,
                slot: entry.slot,
                pages,
                buf: Buf::Gc(entry.buf),
                with_metadata: !footer_mode,
            });
            self.gc.next_read = end;
        }
        if !footer_mode {
            self.gc.next_footer = self.gc.batch.len();
            return;
        }
        while self.gc.next_footer < self.gc.batch.len() {
            let first = self.gc.next_footer;
            let entry = self.gc.batch[first];
            let mut last = first + 1;
            while last < self.gc.batch.len()
                && self.gc.batch[last].zone == entry.zone
                && self.gc.batch[last].footer_slot == entry.footer_slot
            {
                last += 1;
            }
            if entry.footer_slot == u32::MAX {
                for index in first..last {
                    self.gc.batch[index].record_error = Some(RecordError::NoFooter);
                }
                self.gc.next_footer = last;
                continue;
            }
            let generation = self.slots.zone(entry.zone).resets;
            let Some(io) = self.ios.allocate(IoKind::FooterRead, entry.zone, generation) else { return };
            let descriptor = self.ios.get_mut(io).expect("io");
            descriptor.slot = entry.footer_slot;
            descriptor.pages_count = 1;
            descriptor.tags.push(first as u64);
            descriptor.tags.push(last as u64);
            self.slots.zone_mut(entry.zone).reads_in_flight += 1;
            self.gc.reads_outstanding += 1;
            self.stats.gc_pages_read += 1;
            self.requests.push_back(IoRequest::Read {
                io,
                zone: entry.zone,
                slot: entry.footer_slot,
                pages: 1,
                buf: Buf::Footer,
                with_metadata: false,
            });
            self.gc.next_footer = last;
        }
    }

    pub(crate) fn gc_read_done(
        &mut self,
        io: IoId,
        result: Result<(), IoError>,
        records: &[u8],
    ) -> Result<(), crate::engine::EngineError> {
        let descriptor = self.ios.get(io).expect("checked by read_done");
        let (kind, zone, first_slot, pages, generation) =
            (descriptor.kind, descriptor.zone, descriptor.slot, descriptor.pages_count, descriptor.generation);
        let range = match kind {
            IoKind::GcRead { first, end } => first as usize..end as usize,
            _ => descriptor.tags[0] as usize..descriptor.tags[1] as usize,
        };
        self.ios.release(io);
        self.slots.zone_mut(zone).reads_in_flight -= 1;
        self.gc.reads_outstanding -= 1;
        if result.is_err() {
            self.stats.read_errors += 1;
            for entry in &mut self.gc.batch[range] {
                entry.failed = true;
            }
            return Ok(());
        }
        match kind {
            IoKind::GcRead { .. } if self.derived.encoding == RecordEncoding::ChunkFooter => {
                for entry in &mut self.gc.batch[range] {
                    entry.data_read = true;
                }
            }
            IoKind::GcRead { .. } => {
                let metadata_bytes = self.config.geometry.metadata_bytes as usize;
                if records.len() != pages as usize * metadata_bytes {
                    for entry in &mut self.gc.batch[range] {
                        entry.failed = true;
                    }
                    return Err(crate::engine::EngineError::RecordsLength {
                        what: "per-LBA metadata",
                        length: records.len(),
                        expected: pages as usize * metadata_bytes,
                    });
                }
                for entry in &mut self.gc.batch[range] {
                    let index = (entry.slot - first_slot) as usize;
                    assert!(index < pages as usize, "GC read entry outside its read");
                    let bytes = &records[index * metadata_bytes..(index + 1) * metadata_bytes];
                    match record::decode_metadata(bytes, zone, generation) {
                        Ok(record) => entry.record = Some(record),
                        Err(error) => entry.record_error = Some(error),
                    }
                    entry.data_read = true;
                }
            }
            _ => {
                let chunk_start = self.chunk_start_of(zone, first_slot);
                let identity = record::ChunkIdentity { zone, generation, chunk_pages: first_slot - chunk_start + 1 };
                let mut decoded = std::mem::take(&mut self.scratch_records);
                let result = record::decode_footer(records, identity, &mut decoded);
                for entry in &mut self.gc.batch[range] {
                    match &result {
                        Ok(count) if ((entry.slot - chunk_start) as usize) < *count => {
                            entry.record = Some(decoded[(entry.slot - chunk_start) as usize]);
                        }
                        Ok(_) => entry.record_error = Some(RecordError::Layout { expected: 0, found: 0 }),
                        Err(error) => entry.record_error = Some(*error),
                    }
                }
                self.scratch_records = decoded;
            }
        }
        Ok(())
    }

    /// Checks each read entry against the owner table and queues the survivors to the
    /// GC swap-zone. False when it must wait (no zone or I/O descriptor yet).
    fn gc_write(&mut self) -> bool {
        while self.gc.next_write < self.gc.batch.len() {
            let index = self.gc.next_write;
            let entry = self.gc.batch[index];
            self.gc.next_write += 1;
            if entry.failed || self.slots.zone(entry.zone).state == ZoneState::Offline {
                continue;
            }
            let state = self.slots.get(entry.zone, entry.slot);
            if !matches!(state, SlotState::Valid | SlotState::SwapCached) {
                continue; // freed, dirtied or swapped in meanwhile
            }
            let address = self.address(entry.zone, entry.slot);
            let Some((owner, page)) = self.gc_owner_of(&entry, address) else {
                panic!("slot {}:{} is {state:?} but no owner points at it", entry.zone, entry.slot);
            };
            let tenant = self.owners.tenant(owner);
            match self.owners.get(owner, page) {
                PageState::SwapCached { address: current } if current == address => {
                    self.set_slot(entry.zone, entry.slot, SlotState::Invalid, Some(tenant));
                    self.owners.set(owner, page, PageState::Resident);
                    self.stats.swap_cache_dropped += 1;
                }
                PageState::Swapped { address: current } | PageState::SwapInFlight { address: current }
                    if current == address =>
                {
                    if !entry.data_read {
                        continue; // became valid after gather: next pass
                    }
                    let page_out = AppendPage { owner, page, buf: Buf::Gc(entry.buf) };
                    let gc_swap_zone = self.policy_gc_swap_zone(owner, page);
                    if !self.queue_page(gc_swap_zone, page_out, address.0, tenant) {
                        self.gc.next_write = index;
                        return false;
                    }
                }
                other => unreachable!("owner {owner}:{page} {other:?} found for slot {address}"),
            }
        }
        for stream in 0..self.derived.gc_streams {
            self.seal(self.gc_swap_zone() + stream);
        }
        true
    }

    /// The owner page of a victim slot: from its record when the record checks out and
    /// the owner still points here; otherwise (corrupt or lying record) by a scan of the
    /// owner table, reported as a rejected record.
    fn gc_owner_of(&mut self, entry: &Entry, address: SlotAddress) -> Option<(u32, u64)> {
        let error = match (entry.record, &entry.record_error) {
            (Some(record), _) => {
                let points_here = self.owners.check(record.owner, record.page).is_ok()
                    && self.owners.get(record.owner, record.page).address() == Some(address);
                if points_here {
                    return Some((record.owner, record.page));
                }
                RecordError::Mismatch { owner: record.owner, page: record.page }
            }
            (None, Some(error)) => *error,
            (None, None) => RecordError::NoFooter,
        };
        self.stats.records_rejected += 1;
        self.events.push_back(Event::RecordRejected { zone: entry.zone, slot: entry.slot, error });
        self.owners.owner_of(address)
    }

    pub(crate) fn gc_seal_counted(&mut self) {
        self.gc.appends_outstanding += 1;
    }

    /// Activate: remap the owner only if it still points at the victim slot.
    pub(crate) fn activate(&mut self, owner: u32, page: u64, old: SlotAddress, zone: u32, zone_slot: u32) {
        self.stats.gc_pages_written += 1;
        self.note_gc_write();
        let tenant = self.owners.tenant(owner);
        self.tenant_gc_bytes[tenant as usize] += crate::config::PAGE_BYTES as u64;
        let new = self.address(zone, zone_slot);
        let (old_zone, old_slot) = self.split(old);
        let (new_state, slot_state) = match self.owners.get(owner, page) {
            PageState::Swapped { address } if address == old => (PageState::Swapped { address: new }, SlotState::Valid),
            PageState::SwapInFlight { address } if address == old => {
                (PageState::SwapInFlight { address: new }, SlotState::Valid)
            }
            PageState::SwapCached { address } if address == old => {
                (PageState::SwapCached { address: new }, SlotState::SwapCached)
            }
            _ => {
                self.set_slot(zone, zone_slot, SlotState::Invalid, None);
                self.stats.pages_skipped_race += 1;
                return;
            }
        };
        self.set_slot(zone, zone_slot, slot_state, Some(tenant));
        self.set_slot(old_zone, old_slot, SlotState::Invalid, Some(tenant));
        self.owners.set(owner, page, new_state);
        self.stats.pages_moved += 1;
        self.events.push_back(Event::Remapped { owner, page, zone, slot: zone_slot });
    }

    pub(crate) fn gc_append_done(&mut self) {
        assert!(self.gc.appends_outstanding > 0);
        self.gc.appends_outstanding -= 1;
    }

    /// A zone went offline: forget it as a victim and skip its batch entries.
    pub(crate) fn gc_zone_offline(&mut self, zone: u32) {
        self.gc.victims.retain(|victim| victim.zone != zone);
        self.gc.requested.retain(|&requested| requested != zone);
        for entry in &mut self.gc.batch {
            if entry.zone == zone {
                entry.failed = true;
            }
        }
    }

    /// Swap is full: a swap-out was refused for want of a zone (none empty outside the
    /// GC's reserve), no slot was invalidated since, and the GC found nothing it can
    /// reclaim. Only frees, or swap-ins that invalidate slots, make room; the driver
    /// should stop trying to swap out (and say so) rather than spin or wait.
    ///
    /// The GC is also of no help when it waits, mid-batch, for a zone to write into that
    /// cannot come: none is empty and none is being reset (failed GC appends finish the
    /// zones they were written to, and can use up the reserve on a nearly full device).
    /// It goes on once slots invalidated elsewhere empty a zone.
    pub fn swap_full(&self) -> bool {
        let gc_stalled = !self.gc.running
            && self.gc.stage == Stage::Idle
            && self.gc.stalled_until_invalidations.is_some_and(|until| self.invalidations < until);
        let gc_stuck = self.gc.stage == Stage::Writing
            && self.empty_zones.is_empty()
            && self.resets_in_flight == 0
            && self.reset_wanted.is_empty()
            && self.gc.appends_outstanding == 0;
        let no_empty_zone = self.empty_zones.len() as u32 <= self.derived.gc_reserve_zones;
        self.refused_for_space && (gc_stalled || gc_stuck) && no_empty_zone
    }

    /// Whether the GC is between batches (for tests).
    pub fn gc_idle_now(&self) -> bool {
        self.gc.stage == Stage::Idle && !self.gc.running
    }
}
