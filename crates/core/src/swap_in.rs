//! Swap-in, the swap cache without a static cutoff (§4.3), dirtying and freeing.

use crate::config::SwapCacheMode;
use crate::engine::*;
use crate::io::{IoError, IoId, IoKind};
use crate::owner_table::PageState;
use crate::slot_map::{SlotState, ZoneState};
use std::ops::Range;

impl Engine {
    // ---------------------------------------------------------------- swap-in

    pub fn swap_in(&mut self, owner: u32, page: u64, now: u64) -> Result<SwapIn, EngineError> {
        self.advance(now);
        self.owners.check(owner, page)?;
        self.stats.swap_ins += 1;
        let answer = match self.owners.get(owner, page) {
            PageState::Zero => {
                self.owners.set(owner, page, PageState::Resident);
                SwapIn::Zero
            }
            PageState::Resident | PageState::SwapOutInFlight { .. } | PageState::SwapCached { .. } => SwapIn::Resident,
            PageState::SwapInFlight { .. } => SwapIn::InFlight,
            PageState::Lost => SwapIn::Lost,
            PageState::Swapped { address } => {
                let (zone, zone_slot) = self.split(address);
                let generation = self.slots.zone(zone).resets;
                let Some(io) = self.ios.allocate(IoKind::SwapInRead { owner, page, orphaned: false }, zone, generation)
                else {
                    self.stats.swap_ins -= 1;
                    return Err(EngineError::Backpressure);
                };
                self.ios.get_mut(io).expect("io").slot = zone_slot;
                self.slots.zone_mut(zone).reads_in_flight += 1;
                self.owners.set(owner, page, PageState::SwapInFlight { address });
                self.stats.swap_in_reads += 1;
                SwapIn::Read { io, zone, slot: zone_slot }
            }
        };
        self.owners.touch_history(owner, page, self.epoch, true);
        Ok(answer)
    }

    /// Completion of a swap-in or GC read. `records`: per-LBA metadata of each page
    /// read (when asked for), or the footer page (for `Buf::Footer` reads).
    pub fn read_done(
        &mut self,
        io: IoId,
        result: Result<(), IoError>,
        records: &[u8],
        now: u64,
    ) -> Result<ReadOutcome, EngineError> {
        self.advance(now);
        let descriptor = self.ios.get(io).ok_or(EngineError::UnknownIo { io })?;
        let (kind, zone) = (descriptor.kind, descriptor.zone);
        match kind {
            IoKind::SwapInRead { owner, page, orphaned } => {
                self.ios.release(io);
                self.slots.zone_mut(zone).reads_in_flight -= 1;
                if result == Err(IoError::Offline) {
                    self.zone_offline(zone, now);
                }
                // (An orphaned read's owner may be unregistered, or registered again
                // with fewer pages, by now.)
                let lost = || self.owners.check(owner, page).is_ok() && self.owners.get(owner, page) == PageState::Lost;
                let outcome = match orphaned {
                    false => self.swap_in_done(owner, page, result.is_ok()),
                    true if lost() => ReadOutcome::Lost,
                    true => ReadOutcome::Freed,
                };
                self.try_reset(zone);
                Ok(outcome)
            }
            IoKind::GcRead { .. } | IoKind::FooterRead => {
                if result == Err(IoError::Offline) {
                    self.zone_offline(zone, now);
                }
                self.gc_read_done(io, result, records)?;
                Ok(ReadOutcome::Gc)
            }
            _ => Err(EngineError::WrongKind { io }),
        }
    }

    pub(crate) fn swap_in_done(&mut self, owner: u32, page: u64, ok: bool) -> ReadOutcome {
        let PageState::SwapInFlight { address } = self.owners.get(owner, page) else {
            return match self.owners.get(owner, page) {
                PageState::Lost => ReadOutcome::Lost,
                _ => ReadOutcome::Freed,
            };
        };
        let (zone, zone_slot) = self.split(address);
        if !ok {
            self.stats.read_errors += 1;
            self.owners.set(owner, page, PageState::Swapped { address });
            return ReadOutcome::Failed;
        }
        let tenant = self.owners.tenant(owner);
        let cached = self.swap_cache_admits(tenant) && !self.slots.zone(zone).in_gc;
        if cached {
            self.set_slot(zone, zone_slot, SlotState::SwapCached, Some(tenant));
            self.owners.set(owner, page, PageState::SwapCached { address });
        } else {
            self.set_slot(zone, zone_slot, SlotState::Invalid, Some(tenant));
            self.owners.set(owner, page, PageState::Resident);
        }
        ReadOutcome::SwappedIn { cached }
    }

    /// The driver gave up reading a swapped page (its slot kept failing): the page is
    /// lost, as if its zone had gone offline, and its slot invalid. True if the page was
    /// swapped (and is now lost); false, changing nothing, in any other state.
    pub fn give_up_swapped_page(&mut self, owner: u32, page: u64, now: u64) -> Result<bool, EngineError> {
        self.advance(now);
        self.owners.check(owner, page)?;
        let PageState::Swapped { address } = self.owners.get(owner, page) else {
            return Ok(false);
        };
        let (zone, zone_slot) = self.split(address);
        let tenant = self.owners.tenant(owner);
        self.set_slot(zone, zone_slot, SlotState::Invalid, Some(tenant));
        self.owners.set(owner, page, PageState::Lost);
        self.stats.pages_lost += 1;
        self.events.push_back(Event::Lost { owner, page });
        Ok(true)
    }

    /// A page never written out whose content was lost elsewhere (a fork's child served
    /// by the pager, inheriting a parent's slot that no longer reads): held `Lost` from
    /// now on, as a swapped page given up is, and reported the same way. `false`: the
    /// page is not `Zero` (nothing changed).
    pub fn mark_lost(&mut self, owner: u32, page: u64) -> Result<bool, EngineError> {
        self.owners.check(owner, page)?;
        if self.owners.get(owner, page) != PageState::Zero {
            return Ok(false);
        }
        self.owners.set(owner, page, PageState::Lost);
        self.stats.pages_lost += 1;
        self.events.push_back(Event::Lost { owner, page });
        Ok(true)
    }

    // --------------------------------------------------------- swap cache (§4.3)

    /// Whether a page of `tenant` swapped in keeps its slot as its swap cache.
    pub(crate) fn swap_cache_admits(&self, tenant: u16) -> bool {
        match self.config.swap_cache {
            SwapCacheMode::Off => false,
            // Linux `vm_swap_full()`: more than half the slots in use.
            SwapCacheMode::StaticHalf => (self.valid_total + self.cached_total) * 2 < self.derived.total_slots,
            // No static cutoff: keep cached slots while the WAF-driven allowance is not
            // exceeded and the GC is not short of zones; or either is, but the GC moves
            // none of this tenant's pages (its own swap-zones under the tenant policy):
            // dropping its cache would not lower the WAF nor help the GC, only make the
            // tenant write its clean pages again (and turn its zones into the GC's next
            // victims). A reader beside a writer whose GC had spent the allowance wrote
            // each page it let go, and was held back by its own write limit for it
            // (`scripts/tenants.sh`; docs/measurements/2026-11-daemon.md, 2026-11-29).
            SwapCacheMode::Adaptive => {
                !self.gc_moved_lately(tenant)
                    || self.cached_total < self.cache_limit_slots
                        && self.empty_zones.len() as u32 >= self.derived.gc_low_watermark_zones
            }
        }
    }

    /// Adapts the swap cache allowance from the WAF measured over a window of host
    /// writes: above target, shrink it to 3/4 of what the cache holds; below, grow it.
    pub(crate) fn adapt_swap_cache(&mut self) {
        // 1/16 of the device written, whatever the history's epoch.
        let window = (self.derived.total_slots / 16).max(1);
        if self.cache_window_host < window {
            return;
        }
        let waf = (self.cache_window_host + self.cache_window_gc) as f64 / self.cache_window_host as f64;
        let total = self.derived.total_slots;
        self.cache_limit_slots = if waf > self.config.swap_cache_waf_target {
            self.cached_total * 3 / 4
        } else {
            (self.cache_limit_slots + total / 16).min(total)
        };
        self.cache_window_host = 0;
        self.cache_window_gc = 0;
        // The GC bytes at the start of the window now ending become the mark
        // `gc_moved_lately` counts from: two windows.
        for (mark, (next, now)) in self
            .tenant_gc_bytes_windows
            .iter_mut()
            .zip(self.tenant_gc_bytes_window_start.iter_mut().zip(&self.tenant_gc_bytes))
        {
            *mark = *next;
            *next = *now;
        }
    }

    /// Whether the GC moved pages of `tenant` in this swap cache window or the last.
    fn gc_moved_lately(&self, tenant: u16) -> bool {
        let tenant = tenant as usize;
        self.tenant_gc_bytes[tenant] > self.tenant_gc_bytes_windows[tenant]
    }

    pub(crate) fn note_gc_write(&mut self) {
        self.cache_window_gc += 1;
    }

    /// The swap cache allowance in slots (adaptive mode).
    pub fn swap_cache_limit_slots(&self) -> u64 {
        self.cache_limit_slots
    }

    // ------------------------------------------------------- dirtied and free

    /// First write to a page since it was swapped in (or during its swap-out).
    pub fn dirtied(&mut self, owner: u32, page: u64, now: u64) -> Result<(), EngineError> {
        self.advance(now);
        self.owners.check(owner, page)?;
        self.owners.touch_history(owner, page, self.epoch, true);
        match self.owners.get(owner, page) {
            PageState::SwapCached { address } => {
                let (zone, zone_slot) = self.split(address);
                let tenant = self.owners.tenant(owner);
                self.set_slot(zone, zone_slot, SlotState::Invalid, Some(tenant));
                self.owners.set(owner, page, PageState::Resident);
            }
            PageState::SwapOutInFlight { ticket, .. } => {
                self.owners.set(owner, page, PageState::SwapOutInFlight { ticket, dirtied: true });
            }
            PageState::Zero => self.owners.set(owner, page, PageState::Resident),
            _ => {}
        }
        Ok(())
    }

    /// The owner freed `pages`: their slots are invalid at once (what TRIM never tells a
    /// block SSD in time).
    pub fn free(&mut self, owner: u32, pages: Range<u64>, now: u64) -> Result<(), EngineError> {
        self.advance(now);
        if pages.is_empty() {
            return Ok(());
        }
        self.owners.check(owner, pages.end - 1)?;
        let tenant = self.owners.tenant(owner);
        for page in pages {
            let state = self.owners.get(owner, page);
            if matches!(state, PageState::SwapInFlight { .. }) {
                self.ios.orphan_swap_in(owner, page);
            }
            if let Some(address) = state.address() {
                let (zone, zone_slot) = self.split(address);
                if self.slots.zone(zone).state != ZoneState::Offline {
                    self.set_slot(zone, zone_slot, SlotState::Invalid, Some(tenant));
                }
            }
            // (An entry already Zero is left as it is: a region is mostly pages never
            // used, whose table is not even resident, and writing each made a freed
            // arena's whole table resident as its process exited.)
            if state != PageState::Zero {
                self.owners.set(owner, page, PageState::Zero);
            }
        }
        Ok(())
    }
}
