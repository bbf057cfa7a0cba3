//! Per-zone slot maps: 2 bits per slot, like the kernel's `swap_map`, plus the per-zone
//! counters the GC and the policies read (`zn_inf`).
//!
//! One flat bitmap for all zones, allocated at start-up: 0.25 bytes of host memory per
//! 4 KiB slot. The counters are kept equal to the map's contents (checked by
//! [`SlotMaps::check_zone`] in tests).

use serde::Serialize;

/// A slot's address on the whole device, Linux's `swp_entry_t` offset: the zone times
/// the zone capacity plus the slot's index in its zone. The owner table keeps it (40
/// bits); within a zone a slot is named by its index alone (`slot: u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SlotAddress(pub u64);

impl SlotAddress {
    pub fn new(zone: u32, slot: u32, zone_capacity_pages: u32) -> SlotAddress {
        debug_assert!(slot < zone_capacity_pages, "slot {slot} beyond the zone capacity {zone_capacity_pages}");
        SlotAddress(zone as u64 * zone_capacity_pages as u64 + slot as u64)
    }

    pub fn zone(self, zone_capacity_pages: u32) -> u32 {
        (self.0 / zone_capacity_pages as u64) as u32
    }

    /// The slot's index within its zone.
    pub fn slot(self, zone_capacity_pages: u32) -> u32 {
        (self.0 % zone_capacity_pages as u64) as u32
    }
}

impl std::fmt::Display for SlotAddress {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(formatter)
    }
}

/// A slot's state. A slot is *occupied* while Valid or SwapCached: it holds a copy a
/// page still needs, which the GC must move or drop before resetting its zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[repr(u8)]
pub enum SlotState {
    /// Not written since the zone's last reset.
    Free = 0,
    /// Holds the only copy of a swapped-out page.
    Valid = 1,
    /// Holds a clean copy of a page that is also resident (swap cache).
    SwapCached = 2,
    /// Written, but its data is dead.
    Invalid = 3,
}

impl SlotState {
    fn from_bits(bits: u64) -> SlotState {
        match bits & 3 {
            0 => SlotState::Free,
            1 => SlotState::Valid,
            2 => SlotState::SwapCached,
            _ => SlotState::Invalid,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ZoneState {
    Empty,
    /// Receiving appends (backing a swap-zone or the GC, or detached and draining).
    Open,
    /// Every slot written (or the zone finished).
    Full,
    /// A reset is in flight.
    Resetting,
    /// The device lost the zone.
    Offline,
}

/// Counters per zone (`zn_inf` reads them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneCounters {
    pub state: ZoneState,
    /// Valid slots.
    pub valid: u32,
    pub swap_cache: u32,
    pub invalid: u32,
    /// Slots written (valid + swap-cached + invalid): the write pointer's offset.
    pub written: u32,
    /// Slots promised to appends issued or queued (>= written).
    pub reserved: u32,
    pub appends_in_flight: u32,
    /// Swap-in and GC reads in flight: a zone is never reset under a read.
    pub reads_in_flight: u32,
    /// Resets so far: the zone's wear and its record generation.
    pub resets: u32,
    /// The swap-out clock (`Engine::swap_out_clock`) at the zone's last append, GC
    /// appends included: its age for cost-benefit victims. A zone of GC survivors so
    /// counts as young (LFS would keep its data's older age), which delays collecting
    /// zones of data already known to live long: keeping the data's age was tried and
    /// wrote 1-8 % more in the placement probe (crates/dst/RESULTS.md).
    pub last_write: u64,
    /// The swap-zone this zone backs, or `NO_SWAP_ZONE`.
    pub swap_zone: u32,
    /// Tenant of the swap-zone that opened it (tenant policy).
    pub tenant: u16,
    /// Taken by the GC as a victim.
    pub in_gc: bool,
    /// Consecutive failed resets.
    pub reset_failures: u8,
    /// Being reset from the Open state: it stays counted against the open limit until
    /// the device has reset it.
    pub reset_from_open: bool,
}

pub const NO_SWAP_ZONE: u32 = u32::MAX;

impl ZoneCounters {
    fn new() -> ZoneCounters {
        ZoneCounters {
            state: ZoneState::Empty,
            valid: 0,
            swap_cache: 0,
            invalid: 0,
            written: 0,
            reserved: 0,
            appends_in_flight: 0,
            reads_in_flight: 0,
            resets: 0,
            last_write: 0,
            swap_zone: NO_SWAP_ZONE,
            tenant: 0,
            in_gc: false,
            reset_failures: 0,
            reset_from_open: false,
        }
    }

    /// Slots the GC can win back from this zone without copying.
    pub fn garbage(&self) -> u32 {
        self.invalid + self.swap_cache
    }
}

/// All slot maps and zone counters.
pub struct SlotMaps {
    zone_capacity_pages: u32,
    words_per_zone: usize,
    bits: Vec<u64>,
    zones: Vec<ZoneCounters>,
}

const SLOTS_PER_WORD: u32 = 32;

impl SlotMaps {
    pub fn new(zone_count: u32, zone_capacity_pages: u32) -> SlotMaps {
        let words_per_zone = zone_capacity_pages.div_ceil(SLOTS_PER_WORD) as usize;
        SlotMaps {
            zone_capacity_pages,
            words_per_zone,
            bits: vec![0; words_per_zone * zone_count as usize],
            zones: vec![ZoneCounters::new(); zone_count as usize],
        }
    }

    pub fn zone_count(&self) -> u32 {
        self.zones.len() as u32
    }

    pub fn zone_capacity_pages(&self) -> u32 {
        self.zone_capacity_pages
    }

    pub fn zone(&self, zone: u32) -> &ZoneCounters {
        &self.zones[zone as usize]
    }

    pub fn zone_mut(&mut self, zone: u32) -> &mut ZoneCounters {
        &mut self.zones[zone as usize]
    }

    /// Host bytes the maps and counters take.
    pub fn host_bytes(&self) -> u64 {
        (self.bits.len() * 8 + self.zones.len() * std::mem::size_of::<ZoneCounters>()) as u64
    }

    fn position(&self, zone: u32, slot: u32) -> (usize, u32) {
        debug_assert!(slot < self.zone_capacity_pages);
        let word = zone as usize * self.words_per_zone + (slot / SLOTS_PER_WORD) as usize;
        (word, (slot % SLOTS_PER_WORD) * 2)
    }

    pub fn get(&self, zone: u32, slot: u32) -> SlotState {
        let (word, shift) = self.position(zone, slot);
        SlotState::from_bits(self.bits[word] >> shift)
    }

    /// Changes one slot and keeps the counters equal to the map. Only the transitions
    /// the engine makes are legal: Free -> any written state, Valid <-> SwapCached, and
    /// Valid or SwapCached -> Invalid. Anything else is a bug.
    pub fn set(&mut self, zone: u32, slot: u32, to: SlotState) {
        let from = self.get(zone, slot);
        let legal = matches!(
            (from, to),
            (SlotState::Free, SlotState::Valid | SlotState::SwapCached | SlotState::Invalid)
                | (SlotState::Valid, SlotState::SwapCached | SlotState::Invalid)
                | (SlotState::SwapCached, SlotState::Valid | SlotState::Invalid)
        );
        assert!(legal, "slot {zone}:{slot}: illegal transition {from:?} -> {to:?}");
        let (word, shift) = self.position(zone, slot);
        self.bits[word] = (self.bits[word] & !(3 << shift)) | ((to as u64) << shift);
        let counters = &mut self.zones[zone as usize];
        match from {
            SlotState::Free => counters.written += 1,
            SlotState::Valid => counters.valid -= 1,
            SlotState::SwapCached => counters.swap_cache -= 1,
            SlotState::Invalid => unreachable!(),
        }
        match to {
            SlotState::Valid => counters.valid += 1,
            SlotState::SwapCached => counters.swap_cache += 1,
            SlotState::Invalid => counters.invalid += 1,
            SlotState::Free => unreachable!(),
        }
        assert!(counters.written <= self.zone_capacity_pages);
    }

    /// Forgets every slot of a zone that was reset: the map and counters go back to
    /// empty, the reset count (generation) goes up.
    pub fn reset(&mut self, zone: u32) {
        let counters = &mut self.zones[zone as usize];
        assert_eq!(counters.valid, 0, "zone {zone} reset with valid slots");
        assert_eq!(counters.swap_cache, 0, "zone {zone} reset with swap-cached slots");
        assert_eq!(counters.appends_in_flight, 0);
        assert_eq!(counters.reads_in_flight, 0);
        let start = zone as usize * self.words_per_zone;
        self.bits[start..start + self.words_per_zone].fill(0);
        let resets = counters.resets + 1;
        *counters = ZoneCounters { resets, ..ZoneCounters::new() };
    }

    /// Index of the next slot at or after `from` in state Valid or SwapCached.
    pub fn next_occupied(&self, zone: u32, from: u32) -> Option<u32> {
        let mut slot = from;
        while slot < self.zone_capacity_pages {
            let (word, shift) = self.position(zone, slot);
            let rest = self.bits[word] >> shift;
            // Slots in state 1 or 2 have exactly one of their two bits set.
            let occupied = (rest ^ (rest >> 1)) & 0x5555_5555_5555_5555;
            if occupied != 0 {
                let candidate = slot + occupied.trailing_zeros() / 2;
                if candidate < self.zone_capacity_pages {
                    return Some(candidate);
                }
                return None;
            }
            slot += (64 - shift) / 2;
        }
        None
    }

    /// Recounts a zone from its map and compares with the counters (tests, DST).
    pub fn check_zone(&self, zone: u32) {
        let mut counts = [0u32; 4];
        for slot in 0..self.zone_capacity_pages {
            counts[self.get(zone, slot) as usize] += 1;
        }
        let counters = &self.zones[zone as usize];
        assert_eq!(counts[1], counters.valid, "zone {zone} valid");
        assert_eq!(counts[2], counters.swap_cache, "zone {zone} swap_cache");
        assert_eq!(counts[3], counters.invalid, "zone {zone} invalid");
        assert_eq!(counts[1] + counts[2] + counts[3], counters.written, "zone {zone} written");
        assert!(counters.written <= counters.reserved || counters.state != ZoneState::Open);
        if counters.state == ZoneState::Empty {
            assert_eq!(counters.written, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_the_map() {
        let mut maps = SlotMaps::new(3, 70);
        maps.set(1, 0, SlotState::Valid);
        maps.set(1, 69, SlotState::Valid);
        maps.set(1, 33, SlotState::SwapCached);
        maps.set(1, 34, SlotState::Invalid);
        maps.set(1, 0, SlotState::Invalid);
        maps.zone_mut(1).reserved = 70;
        maps.zone_mut(1).state = ZoneState::Open;
        maps.check_zone(1);
        let counters = maps.zone(1);
        assert_eq!((counters.valid, counters.swap_cache, counters.invalid, counters.written), (1, 1, 2, 4));
        assert_eq!(maps.get(0, 69), SlotState::Free);
        assert_eq!(maps.next_occupied(1, 0), Some(33));
        assert_eq!(maps.next_occupied(1, 34), Some(69));
        assert_eq!(maps.next_occupied(0, 0), None);
    }

    #[test]
    #[should_panic(expected = "illegal transition")]
    fn invalid_cannot_become_valid() {
        let mut maps = SlotMaps::new(1, 8);
        maps.set(0, 1, SlotState::Invalid);
        maps.set(0, 1, SlotState::Valid);
    }

    #[test]
    fn slot_address_names_zone_and_slot() {
        let address = SlotAddress::new(5, 69, 70);
        assert_eq!(address, SlotAddress(5 * 70 + 69));
        assert_eq!((address.zone(70), address.slot(70)), (5, 69));
    }

    #[test]
    fn reset_bumps_generation() {
        let mut maps = SlotMaps::new(1, 8);
        maps.set(0, 1, SlotState::Invalid);
        maps.reset(0);
        assert_eq!(maps.zone(0).resets, 1);
        assert_eq!(maps.zone(0).written, 0);
        assert_eq!(maps.get(0, 1), SlotState::Free);
    }

    proptest::proptest! {
        /// Random legal transitions keep the counters equal to the map, and
        /// `next_occupied` finds exactly the valid and swap-cached slots.
        #[test]
        fn counters_and_scan_match_a_model(ops in proptest::collection::vec((0u32..97, 0u8..4), 1..300)) {
            let mut maps = SlotMaps::new(2, 97);
            let mut model = [SlotState::Free; 97];
            for (slot, target) in ops {
                let to = SlotState::from_bits(target as u64);
                let legal = matches!(
                    (model[slot as usize], to),
                    (SlotState::Free, SlotState::Valid | SlotState::SwapCached | SlotState::Invalid)
                        | (SlotState::Valid, SlotState::SwapCached | SlotState::Invalid)
                        | (SlotState::SwapCached, SlotState::Valid | SlotState::Invalid)
                );
                if !legal {
                    continue;
                }
                maps.set(1, slot, to);
                model[slot as usize] = to;
            }
            maps.zone_mut(1).state = ZoneState::Full;
            maps.check_zone(1);
            let mut found = Vec::new();
            let mut cursor = 0;
            while let Some(slot) = maps.next_occupied(1, cursor) {
                found.push(slot);
                cursor = slot + 1;
            }
            let expected: Vec<u32> = (0..97)
                .filter(|&slot| matches!(model[slot as usize], SlotState::Valid | SlotState::SwapCached))
                .collect();
            proptest::prop_assert_eq!(found, expected);
            proptest::prop_assert_eq!(maps.next_occupied(0, 0), None);
        }
    }
}
