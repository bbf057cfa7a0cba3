//! Swap-out with zone append (Appendix A): queueing pages per swap-zone, merging them
//! into Appends (chunks with footers in footer mode), and their completions.

use crate::config::RecordEncoding;
use crate::engine::*;
use crate::io::{AppendPage, Buf, IoError, IoId, IoKind, IoRequest};
use crate::owner_table::PageState;
use crate::policy::PageInfo;
use crate::record::{self, PageRecord};
use crate::slot_map::{SlotAddress, SlotState, ZoneState};

impl Engine {
    // --------------------------------------------------------------- swap-out

    pub fn swap_out(&mut self, owner: u32, page: u64, buf: u64, now: u64) -> Result<Ticket, SwapOutError> {
        self.swap_out_from(0, owner, page, buf, now)
    }

    /// `swap_out` from a given core (or thread): the per-core policy's input.
    pub fn swap_out_from(
        &mut self,
        core: u32,
        owner: u32,
        page: u64,
        buf: u64,
        now: u64,
    ) -> Result<Ticket, SwapOutError> {
        self.advance(now);
        self.owners.check(owner, page)?;
        let state = self.owners.get(owner, page);
        let tenant = self.owners.tenant(owner);
        match state {
            PageState::Resident | PageState::Zero => {}
            PageState::SwapCached { address } => {
                let (zone, zone_slot) = self.split(address);
                if !self.slots.zone(zone).in_gc {
                    // The slot still holds this clean page: no write at all.
                    self.set_slot(zone, zone_slot, SlotState::Valid, Some(tenant));
                    self.owners.set(owner, page, PageState::Swapped { address });
                    let ticket = self.ticket();
                    self.stats.swap_outs += 1;
                    self.stats.swap_cache_hits += 1;
                    self.tenant_cache_hits[tenant as usize] += 1;
                    self.events.push_back(Event::SwapOutDone {
                        ticket,
                        owner,
                        page,
                        buf,
                        outcome: SwapOutOutcome::Swapped { zone, slot: zone_slot },
                    });
                    return Ok(ticket);
                }
                // The GC is collecting that zone: write the page elsewhere instead of
                // making the victim's slot valid again behind the GC's cursor.
            }
            _ => return Err(SwapOutError::NotResident { state }),
        }
        let history = self.owners.touch_history(owner, page, self.epoch, false);
        let info = PageInfo { owner, page, tenant, access_history: history, core };
        let mut policy = self.policy.take().expect("policy present");
        let swap_zone = policy.swap_zone(&info, &self.view()) % self.derived.user_swap_zones;
        self.policy = Some(policy);
        let ticket = Ticket(self.next_ticket & ((1 << crate::owner_table::ADDRESS_BITS) - 1));
        if !self.queue_page(swap_zone, AppendPage { owner, page, buf: Buf::Page(buf) }, ticket.0, tenant) {
            self.stats.backpressure += 1;
            self.gc.wanted = true;
            // No zone to attach (rather than no I/O descriptor): out of space until the
            // GC or the owners free some (`swap_full`).
            self.refused_for_space |= self.swap_zones[swap_zone as usize].zone == NO_ZONE;
            return Err(SwapOutError::Backpressure);
        }
        self.next_ticket += 1;
        if let PageState::SwapCached { address } = state {
            let (zone, zone_slot) = self.split(address);
            self.set_slot(zone, zone_slot, SlotState::Invalid, Some(tenant));
        }
        self.owners.set(owner, page, PageState::SwapOutInFlight { ticket: ticket.0, dirtied: false });
        self.stats.swap_outs += 1;
        self.swap_out_count += 1;
        self.pages_this_epoch += 1;
        if self.pages_this_epoch >= self.epoch_pages {
            self.pages_this_epoch = 0;
            self.epoch += 1;
            let live = self.valid_total + self.cached_total;
            self.epoch_pages = self.history_span.epoch_pages(self.derived.total_slots, live);
        }
        Ok(ticket)
    }

    pub(crate) fn ticket(&mut self) -> Ticket {
        let ticket = Ticket(self.next_ticket & ((1 << crate::owner_table::ADDRESS_BITS) - 1));
        self.next_ticket += 1;
        ticket
    }

    /// Adds a page to a swap-zone's filling Append, reserving its slot. False when it
    /// cannot (no zone can be opened, or no I/O descriptor).
    pub(crate) fn queue_page(&mut self, swap_zone: u32, page: AppendPage, tag: u64, tenant: u16) -> bool {
        if self.swap_zones[swap_zone as usize].pending.is_none() && !self.start_append(swap_zone, tenant) {
            return false;
        }
        let sz = &self.swap_zones[swap_zone as usize];
        let io = sz.pending.expect("pending append");
        let zone = sz.zone;
        let generation = self.slots.zone(zone).resets;
        let per_page = self.derived.encoding == RecordEncoding::PerPageMetadata;
        let side = usize::from(self.is_gc_swap_zone(swap_zone));
        self.pages_queued[side] += 1;
        self.swap_zones[swap_zone as usize].last_page_at = self.pages_queued[side];
        let descriptor = self.ios.get_mut(io).expect("pending io");
        descriptor.pages.push(page);
        descriptor.tags.push(tag);
        if per_page {
            let at = descriptor.records.len();
            descriptor.records.resize(at + record::PAGE_RECORD_BYTES, 0);
            record::encode_page_record(
                PageRecord { owner: page.owner, page: page.page },
                zone,
                generation,
                &mut descriptor.records[at..],
            );
            self.slots.zone_mut(zone).reserved += 1;
        }
        let count = descriptor.pages.len() as u32;
        let full = if per_page {
            count == self.derived.append_pages_max || self.slots.zone(zone).reserved == self.capacity
        } else {
            count == self.swap_zones[swap_zone as usize].chunk_data_pages
        };
        if full {
            self.seal(swap_zone);
        }
        true
    }

    /// Opens a new Append for a swap-zone (attaching a zone if needed).
    pub(crate) fn start_append(&mut self, swap_zone: u32, tenant: u16) -> bool {
        loop {
            if self.swap_zones[swap_zone as usize].zone == NO_ZONE && !self.attach_zone(swap_zone, tenant) {
                return false;
            }
            let zone = self.swap_zones[swap_zone as usize].zone;
            let generation = self.slots.zone(zone).resets;
            let gc = self.is_gc_swap_zone(swap_zone);
            let Some(io) = self.ios.allocate(IoKind::Append { swap_zone, gc }, zone, generation) else {
                return false;
            };
            let sz = &mut self.swap_zones[swap_zone as usize];
            sz.pending = Some(io);
            sz.pending_since_ns = self.now_ns;
            if self.derived.encoding == RecordEncoding::PerPageMetadata {
                return true;
            }
            // Footer mode reserves the whole chunk now: data pages + its footer.
            let counters = self.slots.zone_mut(zone);
            let chunk = self.derived.chunk_pages.min(self.capacity - counters.reserved);
            counters.reserved += chunk;
            self.swap_zones[swap_zone as usize].chunk_data_pages = chunk - 1;
            if chunk > 1 {
                return true;
            }
            // A one-page tail: a footer describing nothing; then try the next zone.
            self.seal(swap_zone);
        }
    }

    /// Emits a swap-zone's filling Append (padding and footer in footer mode).
    pub(crate) fn seal(&mut self, swap_zone: u32) {
        let sz = &mut self.swap_zones[swap_zone as usize];
        let Some(io) = sz.pending.take() else { return };
        let zone = sz.zone;
        let chunk_data_pages = sz.chunk_data_pages;
        let generation = self.slots.zone(zone).resets;
        let footer = self.derived.encoding == RecordEncoding::ChunkFooter;
        let descriptor = self.ios.get_mut(io).expect("pending io");
        if footer {
            let count = descriptor.pages.len();
            for (index, page) in descriptor.pages.iter().enumerate() {
                self.scratch_records[index] = PageRecord { owner: page.owner, page: page.page };
            }
            while (descriptor.pages.len() as u32) < chunk_data_pages {
                descriptor.pages.push(AppendPage { owner: 0, page: 0, buf: Buf::Zero });
                descriptor.tags.push(0);
            }
            descriptor.pages.push(AppendPage { owner: 0, page: 0, buf: Buf::Footer });
            descriptor.tags.push(0);
            descriptor.records.resize(record::FOOTER_BYTES, 0);
            let identity = record::ChunkIdentity { zone, generation, chunk_pages: descriptor.pages.len() as u32 };
            record::encode_footer(identity, &self.scratch_records[..count], &mut descriptor.records);
        }
        let pages = descriptor.pages.len() as u32;
        descriptor.pages_count = pages;
        assert!(pages >= 1 && pages <= self.derived.append_pages_max);
        self.slots.zone_mut(zone).appends_in_flight += 1;
        if self.is_gc_swap_zone(swap_zone) {
            self.gc_seal_counted();
        }
        if self.slots.zone(zone).reserved == self.capacity {
            self.detach_zone(swap_zone);
        }
        self.requests.push_back(IoRequest::Append { io, zone, pages });
    }

    /// The pages of an Append, in slot order.
    pub fn append_pages(&self, io: IoId) -> &[AppendPage] {
        self.ios.get(io).map(|descriptor| &descriptor.pages[..]).unwrap_or(&[])
    }

    /// The records of an Append: 16 bytes per page (per-page mode) or the footer page.
    pub fn append_records(&self, io: IoId) -> &[u8] {
        self.ios.get(io).map(|descriptor| &descriptor.records[..]).unwrap_or(&[])
    }

    pub fn append_done(
        &mut self,
        io: IoId,
        result: Result<u32, IoError>,
        dirtied: &[bool],
        now: u64,
    ) -> Result<(), EngineError> {
        self.advance(now);
        let descriptor = self.ios.get_mut(io).ok_or(EngineError::UnknownIo { io })?;
        let IoKind::Append { swap_zone: _, gc } = descriptor.kind else {
            return Err(EngineError::WrongKind { io });
        };
        let zone = descriptor.zone;
        let pages_count = descriptor.pages_count;
        let pages = std::mem::take(&mut descriptor.pages);
        let tags = std::mem::take(&mut descriptor.tags);
        self.slots.zone_mut(zone).appends_in_flight -= 1;
        let offline = self.slots.zone(zone).state == ZoneState::Offline;
        // Whatever the device says, nothing written to an offline zone can be read back.
        let outcome = if offline { Err(IoError::Offline) } else { result };
        if let Ok(first) = outcome {
            let legal = first as u64 + pages_count as u64 <= self.capacity as u64
                && (first..first + pages_count).all(|slot| self.slots.get(zone, slot) == SlotState::Free);
            if !legal {
                // Never trust an impossible completion: handle it as a failure.
                let descriptor = self.ios.get_mut(io).expect("io");
                descriptor.pages = pages;
                descriptor.tags = tags;
                self.append_failed(io, zone, gc);
                return Err(EngineError::BadCompletion { io, zone, first_slot: first, pages: pages_count });
            }
        }
        match outcome {
            Ok(first) => {
                for (index, (page, tag)) in pages.iter().zip(&tags).enumerate() {
                    let zone_slot = first + index as u32;
                    match page.buf {
                        Buf::Zero | Buf::Footer => {
                            self.set_slot(zone, zone_slot, SlotState::Invalid, None);
                            self.stats.record_pages_written += 1;
                            if page.buf == Buf::Footer {
                                let bit = self.footer_words_per_zone * 64 * zone as usize + zone_slot as usize;
                                self.footer_bits[bit / 64] |= 1 << (bit % 64);
                            }
                        }
                        _ if gc => self.activate(page.owner, page.page, SlotAddress(*tag), zone, zone_slot),
                        Buf::Page(buf) => {
                            let dirty = dirtied.get(index).copied().unwrap_or(false);
                            self.swap_out_done((page.owner, page.page, buf), Ticket(*tag), zone, zone_slot, dirty);
                        }
                        Buf::Gc(_) => unreachable!("a GC buffer page in a swap-out append"),
                    }
                }
                let clock = self.swap_out_clock();
                let counters = self.slots.zone_mut(zone);
                counters.last_write = clock;
                if counters.written == self.capacity && counters.state == ZoneState::Open {
                    self.close_zone(zone);
                }
            }
            Err(error) => {
                let descriptor = self.ios.get_mut(io).expect("io");
                descriptor.pages = pages;
                descriptor.tags = tags;
                if error == IoError::Offline {
                    self.zone_offline(zone, now);
                }
                self.append_failed(io, zone, gc);
                return Ok(());
            }
        }
        let descriptor = self.ios.get_mut(io).expect("io");
        descriptor.pages = pages;
        descriptor.tags = tags;
        self.ios.release(io);
        if gc {
            self.gc_append_done();
        }
        self.maybe_reset_open(zone);
        Ok(())
    }

    /// The append carrying swap-out `ticket` (of `owner`'s `page`, from the driver's
    /// buffer `buf`) landed at `zone_slot`.
    pub(crate) fn swap_out_done(
        &mut self,
        (owner, page, buf): (u32, u64, u64),
        ticket: Ticket,
        zone: u32,
        zone_slot: u32,
        dirty: bool,
    ) {
        self.stats.host_pages_written += 1;
        self.cache_window_host += 1;
        let tenant = self.owners.tenant(owner);
        self.tenant_host_bytes[tenant as usize] += crate::config::PAGE_BYTES as u64;
        let outcome = match self.owners.get(owner, page) {
            PageState::SwapOutInFlight { ticket: current, dirtied } if current == ticket.0 => {
                if dirtied || dirty {
                    self.set_slot(zone, zone_slot, SlotState::Invalid, None);
                    self.owners.set(owner, page, PageState::Resident);
                    self.stats.swap_outs_aborted_dirty += 1;
                    SwapOutOutcome::AbortedDirty
                } else {
                    self.set_slot(zone, zone_slot, SlotState::Valid, Some(tenant));
                    let address = self.address(zone, zone_slot);
                    self.owners.set(owner, page, PageState::Swapped { address });
                    SwapOutOutcome::Swapped { zone, slot: zone_slot }
                }
            }
            _ => {
                self.set_slot(zone, zone_slot, SlotState::Invalid, None);
                SwapOutOutcome::Dropped
            }
        };
        self.events.push_back(Event::SwapOutDone { ticket, owner, page, buf, outcome });
    }

    /// An append failed: its pages stay where they were (resident, or in the GC victim);
    /// the zone's write pointer is unknown, so it gets no more appends and is finished.
    pub(crate) fn append_failed(&mut self, io: IoId, zone: u32, gc: bool) {
        self.stats.append_errors += 1;
        let descriptor = self.ios.get_mut(io).expect("io");
        let pages = std::mem::take(&mut descriptor.pages);
        let tags = std::mem::take(&mut descriptor.tags);
        if !gc {
            for (page, tag) in pages.iter().zip(&tags) {
                let Buf::Page(buf) = page.buf else {
                    continue;
                };
                // A page freed meanwhile (its swap-out no longer the owner's current
                // one) is Dropped, as a successful append would say: the owner may have
                // swapped the page out again since, and that swap-out is still on.
                let current = matches!(
                    self.owners.get(page.owner, page.page),
                    PageState::SwapOutInFlight { ticket, .. } if ticket == *tag
                );
                let outcome = if current {
                    self.owners.set(page.owner, page.page, PageState::Resident);
                    self.stats.swap_outs_failed += 1;
                    SwapOutOutcome::Failed
                } else {
                    SwapOutOutcome::Dropped
                };
                self.events.push_back(Event::SwapOutDone {
                    ticket: Ticket(*tag),
                    owner: page.owner,
                    page: page.page,
                    buf,
                    outcome,
                });
            }
        } else {
            self.gc.batch_failed = true;
        }
        let descriptor = self.ios.get_mut(io).expect("io");
        descriptor.pages = pages;
        descriptor.tags = tags;
        self.ios.release(io);
        if gc {
            self.gc_append_done();
        }
        if self.slots.zone(zone).state == ZoneState::Open {
            let swap_zone = self.slots.zone(zone).swap_zone;
            if self.swap_zones[swap_zone as usize].zone == zone {
                // Whatever is still filling for this zone goes out and fails too; its
                // pages are all resident or still in the victim.
                self.seal(swap_zone);
                self.detach_zone(swap_zone);
            }
            self.want_finish(zone);
        }
    }

    pub fn finish_done(&mut self, io: IoId, result: Result<(), IoError>, now: u64) -> Result<(), EngineError> {
        self.advance(now);
        let descriptor = self.ios.get(io).ok_or(EngineError::UnknownIo { io })?;
        if descriptor.kind != IoKind::Finish {
            return Err(EngineError::WrongKind { io });
        }
        let zone = descriptor.zone;
        self.ios.release(io);
        if self.slots.zone(zone).state != ZoneState::Open {
            return Ok(());
        }
        match result {
            Ok(()) => self.stats.finishes += 1,
            Err(IoError::Offline) => {
                self.zone_offline(zone, now);
                return Ok(());
            }
            Err(_) => {
                self.stats.finish_errors += 1;
                let counters = self.slots.zone_mut(zone);
                counters.reset_failures += 1;
                if counters.reset_failures < ZONE_COMMAND_ATTEMPTS_MAX {
                    self.finish_wanted.push(zone);
                }
                // After the last attempt the zone stays open on the device, so it keeps
                // its open resource here too (the limits stay true); it gets no appends,
                // its data stays readable, and the GC never takes it: lost capacity,
                // never lost data.
                return Ok(());
            }
        }
        self.slots.zone_mut(zone).reset_failures = 0;
        // The unwritten rest of the zone can never hold data: count it invalid.
        for zone_slot in 0..self.capacity {
            if self.slots.get(zone, zone_slot) == SlotState::Free {
                self.set_slot(zone, zone_slot, SlotState::Invalid, None);
            }
        }
        self.slots.zone_mut(zone).reserved = self.capacity;
        self.close_zone(zone);
        Ok(())
    }
}
