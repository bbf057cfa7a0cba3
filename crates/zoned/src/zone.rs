//! The NVMe ZNS zone state machine (NVMe ZNS Command Set, §2.1 "Zone State Machine"),
//! with open and active resource accounting.
//!
//! Active zones are the Implicitly Opened, Explicitly Opened and Closed ones; open
//! zones are the first two. Like Linux's null_blk and QEMU's emulated namespace, a write
//! that needs an open resource when all are taken implicitly closes an Implicitly
//! Opened zone (the lowest-numbered one) — the spec allows but does not require this,
//! so callers that manage zones explicitly should not rely on it.
//!
//! `ZoneTable` validates a whole command before changing anything: a refused command
//! leaves every zone and counter as it was.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;

/// Zone condition, with the codes NVMe (Zone State) and Linux (`BLK_ZONE_COND_*`) share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZoneCondition {
    Empty,
    ImplicitlyOpened,
    ExplicitlyOpened,
    Closed,
    Full,
    /// Set only by fault injection (or by a real device wearing out).
    ReadOnly,
    /// Set only by fault injection (or by a real device failing).
    Offline,
}

impl ZoneCondition {
    pub fn code(self) -> u8 {
        match self {
            ZoneCondition::Empty => 0x1,
            ZoneCondition::ImplicitlyOpened => 0x2,
            ZoneCondition::ExplicitlyOpened => 0x3,
            ZoneCondition::Closed => 0x4,
            ZoneCondition::ReadOnly => 0xD,
            ZoneCondition::Full => 0xE,
            ZoneCondition::Offline => 0xF,
        }
    }

    pub fn from_code(code: u8) -> Option<ZoneCondition> {
        Some(match code {
            0x1 => ZoneCondition::Empty,
            0x2 => ZoneCondition::ImplicitlyOpened,
            0x3 => ZoneCondition::ExplicitlyOpened,
            0x4 => ZoneCondition::Closed,
            0xD => ZoneCondition::ReadOnly,
            0xE => ZoneCondition::Full,
            0xF => ZoneCondition::Offline,
            _ => return None,
        })
    }

    /// The abbreviation `blkzone report` prints.
    pub fn short_name(self) -> &'static str {
        match self {
            ZoneCondition::Empty => "em",
            ZoneCondition::ImplicitlyOpened => "oi",
            ZoneCondition::ExplicitlyOpened => "oe",
            ZoneCondition::Closed => "cl",
            ZoneCondition::Full => "fu",
            ZoneCondition::ReadOnly => "ro",
            ZoneCondition::Offline => "ol",
        }
    }

    pub fn is_open(self) -> bool {
        matches!(self, ZoneCondition::ImplicitlyOpened | ZoneCondition::ExplicitlyOpened)
    }

    pub fn is_active(self) -> bool {
        self.is_open() || self == ZoneCondition::Closed
    }
}

impl fmt::Display for ZoneCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ZoneCondition::Empty => "empty",
            ZoneCondition::ImplicitlyOpened => "implicitly-opened",
            ZoneCondition::ExplicitlyOpened => "explicitly-opened",
            ZoneCondition::Closed => "closed",
            ZoneCondition::Full => "full",
            ZoneCondition::ReadOnly => "read-only",
            ZoneCondition::Offline => "offline",
        })
    }
}

/// Zone management commands (NVMe Zone Management Send actions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZoneOp {
    Reset,
    Open,
    Close,
    Finish,
}

impl fmt::Display for ZoneOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ZoneOp::Reset => "reset",
            ZoneOp::Open => "open",
            ZoneOp::Close => "close",
            ZoneOp::Finish => "finish",
        })
    }
}

/// One zone as a zone report describes it (what `blkzone report` prints).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneInfo {
    pub zone: u32,
    pub start_lba: u64,
    pub len_lbas: u64,
    pub capacity_lbas: u64,
    /// Absolute write pointer. For Full and Offline zones, as Linux reports them,
    /// `start_lba + len_lbas`.
    pub write_pointer_lba: u64,
    pub condition: ZoneCondition,
}

impl ZoneInfo {
    /// LBAs written since the last reset (the whole capacity once Full).
    pub fn written_lbas(&self) -> u64 {
        match self.condition {
            ZoneCondition::Full | ZoneCondition::Offline => self.capacity_lbas,
            _ => self.write_pointer_lba - self.start_lba,
        }
    }
}

/// The persistent part of one zone's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneState {
    pub condition: ZoneCondition,
    /// Write pointer as an offset from the zone start, in LBAs.
    pub write_pointer_lbas: u64,
}

impl ZoneState {
    pub const EMPTY: ZoneState = ZoneState { condition: ZoneCondition::Empty, write_pointer_lbas: 0 };
}

/// Where a validated write lands, and which zone (if any) was implicitly closed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritePlacement {
    pub offset_lbas: u64,
    pub implicitly_closed: Option<u32>,
}

/// Zone conditions and write pointers of a whole device, with open/active accounting.
#[derive(Clone, Debug)]
pub struct ZoneTable {
    geometry: Geometry,
    zones: Vec<ZoneState>,
    open_count: u32,
    active_count: u32,
}

impl ZoneTable {
    pub fn new(geometry: Geometry) -> ZoneTable {
        ZoneTable {
            geometry,
            zones: vec![ZoneState::EMPTY; geometry.zone_count as usize],
            open_count: 0,
            active_count: 0,
        }
    }

    /// Rebuilds a table from persisted states with power-cycle semantics: zones that were
    /// open come back Closed (or Empty if nothing was written), as on a real device.
    pub fn restore(geometry: Geometry, states: impl IntoIterator<Item = ZoneState>) -> ZoneTable {
        let mut table = ZoneTable::new(geometry);
        let mut count = 0;
        for (index, mut state) in states.into_iter().enumerate() {
            if state.condition.is_open() {
                state.condition =
                    if state.write_pointer_lbas == 0 { ZoneCondition::Empty } else { ZoneCondition::Closed };
            }
            if state.condition.is_active() {
                table.active_count += 1;
            }
            table.zones[index] = state;
            count += 1;
        }
        assert_eq!(count, geometry.zone_count as usize, "restore needs one state per zone");
        table
    }

    /// A table holding exactly `states` (as a device reported them).
    pub fn from_states(geometry: Geometry, states: impl IntoIterator<Item = ZoneState>) -> ZoneTable {
        let mut table = ZoneTable::new(geometry);
        let mut count = 0;
        for (zone, state) in states.into_iter().enumerate() {
            table.set_state(zone as u32, state);
            count += 1;
        }
        assert_eq!(count, geometry.zone_count as usize, "one state per zone");
        table
    }

    /// Adopts a state the device reported for `zone`, whatever it was before.
    pub fn set_state(&mut self, zone: u32, state: ZoneState) {
        let old = self.zones[zone as usize].condition;
        self.release(old);
        if state.condition.is_open() {
            self.open_count += 1;
        }
        if state.condition.is_active() {
            self.active_count += 1;
        }
        self.zones[zone as usize] = state;
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn open_count(&self) -> u32 {
        self.open_count
    }

    pub fn active_count(&self) -> u32 {
        self.active_count
    }

    pub fn check_zone(&self, zone: u64) -> Result<u32> {
        if zone < self.geometry.zone_count as u64 {
            Ok(zone as u32)
        } else {
            Err(ZoneError::InvalidZone { zone, zone_count: self.geometry.zone_count })
        }
    }

    pub fn state(&self, zone: u32) -> ZoneState {
        self.zones[zone as usize]
    }

    pub fn info(&self, zone: u32) -> ZoneInfo {
        let state = self.zones[zone as usize];
        let start_lba = self.geometry.zone_start_lba(zone);
        let write_pointer_lba = match state.condition {
            ZoneCondition::Full | ZoneCondition::Offline => start_lba + self.geometry.zone_size_lbas,
            _ => start_lba + state.write_pointer_lbas,
        };
        ZoneInfo {
            zone,
            start_lba,
            len_lbas: self.geometry.zone_size_lbas,
            capacity_lbas: self.geometry.zone_capacity_lbas,
            write_pointer_lba,
            condition: state.condition,
        }
    }

    /// Validates and applies a write of `len_lbas` to `zone`: at `at_offset_lbas` for a
    /// regular write (it must equal the write pointer), anywhere for an append (`None`).
    /// Granularity and buffer checks are the caller's; this checks zone rules only.
    pub fn write(&mut self, zone: u32, at_offset_lbas: Option<u64>, len_lbas: u64) -> Result<WritePlacement> {
        debug_assert!(len_lbas > 0);
        let state = self.zones[zone as usize];
        match state.condition {
            ZoneCondition::Full => return Err(ZoneError::ZoneFull { zone }),
            ZoneCondition::ReadOnly => return Err(ZoneError::ZoneReadOnly { zone }),
            ZoneCondition::Offline => return Err(ZoneError::ZoneOffline { zone }),
            _ => {}
        }
        let start = self.geometry.zone_start_lba(zone);
        if let Some(offset) = at_offset_lbas {
            if offset != state.write_pointer_lbas {
                return Err(ZoneError::NotAtWritePointer {
                    zone,
                    lba: start + offset,
                    write_pointer: start + state.write_pointer_lbas,
                });
            }
        }
        let end = state.write_pointer_lbas + len_lbas;
        if end > self.geometry.zone_capacity_lbas {
            return Err(ZoneError::ExceedsCapacity {
                zone,
                offset_lbas: state.write_pointer_lbas,
                len_bytes: len_lbas * self.geometry.lba_bytes as u64,
                capacity_lbas: self.geometry.zone_capacity_lbas,
            });
        }
        let implicitly_closed = self.acquire_open(zone, state.condition)?;
        let zone_state = &mut self.zones[zone as usize];
        if !zone_state.condition.is_open() {
            zone_state.condition = ZoneCondition::ImplicitlyOpened;
        }
        zone_state.write_pointer_lbas = end;
        if end == self.geometry.zone_capacity_lbas {
            zone_state.condition = ZoneCondition::Full;
            self.open_count -= 1;
            self.active_count -= 1;
        }
        self.debug_check();
        Ok(WritePlacement { offset_lbas: state.write_pointer_lbas, implicitly_closed })
    }

    /// Makes `zone` (currently in `condition`) count as open, taking an open and, if it
    /// was Empty, an active resource. May implicitly close another zone. Changes nothing
    /// on error.
    fn acquire_open(&mut self, zone: u32, condition: ZoneCondition) -> Result<Option<u32>> {
        if condition.is_open() {
            return Ok(None);
        }
        let needs_active = condition == ZoneCondition::Empty;
        if needs_active && self.active_count >= self.geometry.active_limit() {
            return Err(ZoneError::TooManyActiveZones { zone, max_active: self.geometry.max_active_zones });
        }
        let mut implicitly_closed = None;
        if self.open_count >= self.geometry.open_limit() {
            let victim = self
                .zones
                .iter()
                .position(|z| z.condition == ZoneCondition::ImplicitlyOpened)
                .ok_or(ZoneError::TooManyOpenZones { zone, max_open: self.geometry.max_open_zones })?;
            self.zones[victim].condition = ZoneCondition::Closed;
            self.open_count -= 1;
            implicitly_closed = Some(victim as u32);
        }
        self.open_count += 1;
        if needs_active {
            self.active_count += 1;
        }
        Ok(implicitly_closed)
    }

    /// Applies a zone management command. Returns the zone implicitly closed to make room
    /// for an explicit open, if any.
    pub fn zone_op(&mut self, zone: u32, op: ZoneOp) -> Result<Option<u32>> {
        let state = self.zones[zone as usize];
        match state.condition {
            ZoneCondition::Offline => return Err(ZoneError::ZoneOffline { zone }),
            ZoneCondition::ReadOnly => return Err(ZoneError::ZoneReadOnly { zone }),
            _ => {}
        }
        let invalid = || ZoneError::InvalidTransition { zone, op, condition: state.condition };
        let mut implicitly_closed = None;
        let next = match (op, state.condition) {
            (ZoneOp::Open, ZoneCondition::Full) => return Err(invalid()),
            (ZoneOp::Open, condition) => {
                implicitly_closed = self.acquire_open(zone, condition)?;
                ZoneState { condition: ZoneCondition::ExplicitlyOpened, ..state }
            }
            (ZoneOp::Close, ZoneCondition::Closed) => state,
            (ZoneOp::Close, condition) if condition.is_open() => {
                self.open_count -= 1;
                if state.write_pointer_lbas == 0 {
                    self.active_count -= 1;
                    ZoneState::EMPTY
                } else {
                    ZoneState { condition: ZoneCondition::Closed, ..state }
                }
            }
            (ZoneOp::Close, _) => return Err(invalid()),
            (ZoneOp::Finish, condition) => {
                if condition == ZoneCondition::Empty && self.active_count >= self.geometry.active_limit() {
                    return Err(ZoneError::TooManyActiveZones { zone, max_active: self.geometry.max_active_zones });
                }
                self.release(condition);
                ZoneState { condition: ZoneCondition::Full, write_pointer_lbas: self.geometry.zone_capacity_lbas }
            }
            (ZoneOp::Reset, condition) => {
                self.release(condition);
                ZoneState::EMPTY
            }
        };
        self.zones[zone as usize] = next;
        self.debug_check();
        Ok(implicitly_closed)
    }

    fn release(&mut self, condition: ZoneCondition) {
        if condition.is_open() {
            self.open_count -= 1;
        }
        if condition.is_active() {
            self.active_count -= 1;
        }
    }

    /// Fault injection: a zone turns Read-Only or Offline, releasing its resources.
    pub fn set_failed(&mut self, zone: u32, condition: ZoneCondition) {
        assert!(matches!(condition, ZoneCondition::ReadOnly | ZoneCondition::Offline));
        let state = self.zones[zone as usize];
        if state.condition == ZoneCondition::Offline {
            return;
        }
        self.release(state.condition);
        self.zones[zone as usize] = ZoneState { condition, ..state };
        self.debug_check();
    }

    /// Recounts open and active zones; panics if the running counts disagree.
    pub fn check_invariants(&self) {
        let open = self.zones.iter().filter(|z| z.condition.is_open()).count() as u32;
        let active = self.zones.iter().filter(|z| z.condition.is_active()).count() as u32;
        assert_eq!(open, self.open_count, "open-zone count drifted");
        assert_eq!(active, self.active_count, "active-zone count drifted");
        assert!(self.open_count <= self.geometry.open_limit());
        assert!(self.active_count <= self.geometry.active_limit());
        for (index, zone) in self.zones.iter().enumerate() {
            assert!(
                zone.write_pointer_lbas <= self.geometry.zone_capacity_lbas,
                "zone {index} write pointer past capacity"
            );
            if zone.condition == ZoneCondition::Empty {
                assert_eq!(zone.write_pointer_lbas, 0, "empty zone {index} has a write pointer");
            }
        }
    }

    fn debug_check(&self) {
        debug_assert!(self.open_count <= self.geometry.open_limit());
        debug_assert!(self.active_count <= self.geometry.active_limit());
        debug_assert!(self.open_count <= self.active_count);
        #[cfg(test)]
        self.check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geometry(max_open: u32, max_active: u32) -> Geometry {
        Geometry::from_bytes(4096, 0, 6, 64 << 10, 48 << 10, max_open, max_active, 4096).unwrap()
    }

    #[test]
    fn write_opens_then_fills() {
        let mut table = ZoneTable::new(geometry(2, 3));
        let placed = table.write(0, Some(0), 4).unwrap();
        assert_eq!(placed.offset_lbas, 0);
        assert_eq!(table.state(0).condition, ZoneCondition::ImplicitlyOpened);
        assert_eq!((table.open_count(), table.active_count()), (1, 1));
        table.write(0, None, 8).unwrap();
        assert_eq!(table.state(0).condition, ZoneCondition::Full);
        assert_eq!((table.open_count(), table.active_count()), (0, 0));
        assert!(matches!(table.write(0, None, 1), Err(ZoneError::ZoneFull { zone: 0 })));
    }

    #[test]
    fn implicit_close_makes_room_but_explicit_opens_do_not_yield() {
        let mut table = ZoneTable::new(geometry(2, 3));
        table.write(0, None, 1).unwrap();
        table.zone_op(1, ZoneOp::Open).unwrap();
        let placed = table.write(2, None, 1).unwrap();
        assert_eq!(placed.implicitly_closed, Some(0));
        assert_eq!(table.state(0).condition, ZoneCondition::Closed);
        // Zones 0 (closed), 1 (explicit), 2 (implicit) are active: the limit of 3 is hit.
        let before = table.clone();
        assert!(matches!(table.write(3, None, 1), Err(ZoneError::TooManyActiveZones { .. })));
        assert_eq!(table.zones, before.zones, "a refused write changes nothing");
        table.zone_op(2, ZoneOp::Open).unwrap();
        // Both open zones are explicit now: reopening the closed zone must fail.
        assert!(matches!(table.write(0, None, 1), Err(ZoneError::TooManyOpenZones { .. })));
        assert_eq!(
            table.zones,
            before
                .zones
                .iter()
                .enumerate()
                .map(|(i, z)| if i == 2 { ZoneState { condition: ZoneCondition::ExplicitlyOpened, ..*z } } else { *z })
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn restore_closes_open_zones() {
        let g = geometry(0, 0);
        let states = [
            ZoneState { condition: ZoneCondition::ImplicitlyOpened, write_pointer_lbas: 3 },
            ZoneState { condition: ZoneCondition::ExplicitlyOpened, write_pointer_lbas: 0 },
            ZoneState { condition: ZoneCondition::Full, write_pointer_lbas: 12 },
            ZoneState::EMPTY,
            ZoneState { condition: ZoneCondition::Offline, write_pointer_lbas: 0 },
            ZoneState { condition: ZoneCondition::Closed, write_pointer_lbas: 5 },
        ];
        let table = ZoneTable::restore(g, states);
        assert_eq!(table.state(0).condition, ZoneCondition::Closed);
        assert_eq!(table.state(1).condition, ZoneCondition::Empty);
        assert_eq!((table.open_count(), table.active_count()), (0, 2));
        table.check_invariants();
    }

    #[derive(Clone, Debug)]
    enum Command {
        Write(u32, u64),
        Append(u32, u64),
        Op(u32, ZoneOp),
        Fail(u32, bool),
    }

    fn command() -> impl Strategy<Value = Command> {
        let op = prop_oneof![Just(ZoneOp::Reset), Just(ZoneOp::Open), Just(ZoneOp::Close), Just(ZoneOp::Finish)];
        prop_oneof![
            4 => (0..6u32, 0..13u64).prop_map(|(z, o)| Command::Write(z, o)),
            4 => (0..6u32, 1..6u64).prop_map(|(z, n)| Command::Append(z, n)),
            3 => (0..6u32, op).prop_map(|(z, op)| Command::Op(z, op)),
            1 => (0..6u32, any::<bool>()).prop_map(|(z, offline)| Command::Fail(z, offline)),
        ]
    }

    proptest! {
        /// Any command sequence keeps the counters honest and the limits respected, and
        /// a refused command leaves the table exactly as it was.
        #[test]
        fn random_commands_keep_invariants(commands in proptest::collection::vec(command(), 1..200), max_open in 1..4u32, extra_active in 0..3u32) {
            let mut table = ZoneTable::new(geometry(max_open, max_open + extra_active));
            for command in commands {
                let before = table.clone();
                let result = match command {
                    Command::Write(z, offset) => table.write(z, Some(offset), 1).map(|_| ()),
                    Command::Append(z, n) => table.write(z, None, n).map(|_| ()),
                    Command::Op(z, op) => table.zone_op(z, op).map(|_| ()),
                    Command::Fail(z, offline) => {
                        table.set_failed(z, if offline { ZoneCondition::Offline } else { ZoneCondition::ReadOnly });
                        Ok(())
                    }
                };
                if result.is_err() {
                    prop_assert_eq!(&table.zones, &before.zones);
                    prop_assert_eq!(table.open_count, before.open_count);
                }
                table.check_invariants();
            }
        }
    }
}
