//! A real zoned device behind the same checks as the emulator.
//!
//! Backends for real hardware (Linux zoned block devices, NVMe passthrough) implement
//! only [`RawZoned`]: raw commands, no bookkeeping. [`CheckedDevice`] keeps a mirror of
//! every zone's condition and write pointer in a [`ZoneTable`] and validates each command
//! against it first, so a host mistake gets the same typed error on every backend and
//! never reaches the device. The device still enforces its own rules: when it refuses
//! something the mirror allowed, or closes a zone on its own, the mirror is resynced
//! from a zone report.
//!
//! Ordering: each zone has a reader-writer lock. Native zone appends take it shared, so
//! many are in flight per zone; regular writes, emulated appends (a write at the mirror's
//! write pointer, for devices without zone append), zone management and resyncs take it
//! exclusively, so writes to one zone reach the device one at a time and in write-pointer
//! order whatever the I/O scheduler does.

use std::sync::{Mutex, MutexGuard, RwLock};

use crate::device::{
    counter_totals, zone_counter_snapshot, DeviceCounters, ZoneCounterCells, ZoneCounters, ZonedDevice,
};
use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;
use crate::validate::{check_append_size, check_data, check_metadata, check_read_range, lba_zone};
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp, ZoneState, ZoneTable};

/// Raw commands of a zoned device, issued only after [`CheckedDevice`] validated them.
pub trait RawZoned: Send + Sync {
    fn geometry(&self) -> &Geometry;
    /// Descriptors of `count` zones from `first_zone`.
    fn report(&self, first_zone: u32, count: u32) -> Result<Vec<ZoneInfo>>;
    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()>;
    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()>;
    /// Whether the device has a native zone append. Without one, the checked device
    /// appends by writing at its mirrored write pointer.
    fn has_native_append(&self) -> bool;
    /// Native zone append, returning the first LBA written (only called when
    /// `has_native_append`).
    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64>;
    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()>;
    fn sync(&self) -> Result<()>;
    fn describe(&self) -> String;
}

pub struct CheckedDevice<R: RawZoned> {
    raw: R,
    geometry: Geometry,
    table: Mutex<ZoneTable>,
    zone_locks: Box<[RwLock<()>]>,
    counters: Box<[ZoneCounterCells]>,
}

fn state_of(info: &ZoneInfo) -> ZoneState {
    let write_pointer_lbas = match info.condition {
        ZoneCondition::Empty | ZoneCondition::Offline => 0,
        ZoneCondition::Full => info.capacity_lbas,
        _ => info.write_pointer_lba - info.start_lba,
    };
    ZoneState { condition: info.condition, write_pointer_lbas }
}

impl<R: RawZoned> CheckedDevice<R> {
    /// Wraps `raw`, reading every zone's state from the device.
    pub fn new(raw: R) -> Result<CheckedDevice<R>> {
        let geometry = *raw.geometry();
        let zones = raw.report(0, geometry.zone_count)?;
        assert_eq!(zones.len(), geometry.zone_count as usize, "a report covers every zone asked for");
        let table = ZoneTable::from_states(geometry, zones.iter().map(state_of));
        Ok(CheckedDevice {
            geometry,
            table: Mutex::new(table),
            zone_locks: (0..geometry.zone_count).map(|_| RwLock::new(())).collect(),
            counters: (0..geometry.zone_count).map(|_| ZoneCounterCells::default()).collect(),
            raw,
        })
    }

    pub fn raw(&self) -> &R {
        &self.raw
    }

    fn lock_table(&self) -> MutexGuard<'_, ZoneTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adopts the device's view of `zone`. The caller holds the zone's lock exclusively.
    fn resync_locked(&self, zone: u32) {
        if let Ok(infos) = self.raw.report(zone, 1) {
            if let Some(info) = infos.first() {
                self.lock_table().set_state(zone, state_of(info));
            }
        }
    }

    fn resync(&self, zone: u32) {
        let _exclusive = self.zone_locks[zone as usize].write().unwrap_or_else(|p| p.into_inner());
        self.resync_locked(zone);
    }

    /// After the device implicitly closed a zone the mirror cannot predict which one, so
    /// re-read every open zone.
    fn resync_open_zones(&self) {
        let open: Vec<u32> = {
            let table = self.lock_table();
            (0..self.geometry.zone_count).filter(|&z| table.state(z).condition.is_active()).collect()
        };
        for zone in open {
            self.resync(zone);
        }
    }

    /// Writes `data` at the mirror's write pointer (or at `at_offset_lbas`, which must
    /// equal it), holding the zone exclusively.
    fn write_at_pointer(
        &self,
        zone: u32,
        at_offset_lbas: Option<u64>,
        data: &[u8],
        metadata: Option<&[u8]>,
    ) -> Result<u64> {
        let len_lbas = data.len() as u64 / self.geometry.lba_bytes as u64;
        let _exclusive = self.zone_locks[zone as usize].write().unwrap_or_else(|p| p.into_inner());
        let placement = self.lock_table().write(zone, at_offset_lbas, len_lbas)?;
        let lba = self.geometry.zone_start_lba(zone) + placement.offset_lbas;
        if let Err(error) = self.raw.write(lba, data, metadata) {
            self.resync_locked(zone);
            return Err(error);
        }
        drop(_exclusive);
        if placement.implicitly_closed.is_some() {
            self.resync_open_zones();
        }
        Ok(lba)
    }

    fn zone_index(&self, zone: u32) -> Result<u32> {
        if zone < self.geometry.zone_count {
            Ok(zone)
        } else {
            Err(ZoneError::InvalidZone { zone: zone as u64, zone_count: self.geometry.zone_count })
        }
    }
}

impl<R: RawZoned> ZonedDevice for CheckedDevice<R> {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn report_zone(&self, zone: u32) -> Result<ZoneInfo> {
        let zone = self.zone_index(zone)?;
        let infos = self.raw.report(zone, 1)?;
        infos
            .into_iter()
            .next()
            .ok_or(ZoneError::InvalidZone { zone: zone as u64, zone_count: self.geometry.zone_count })
    }

    fn report_zones(&self) -> Result<Vec<ZoneInfo>> {
        self.raw.report(0, self.geometry.zone_count)
    }

    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> {
        let geometry = &self.geometry;
        let (zone, offset_lbas) = lba_zone(geometry, lba)?;
        let len_lbas = check_data(geometry, "read", data.len(), geometry.lba_bytes as u64)?;
        check_read_range(geometry, zone, lba, offset_lbas, len_lbas)?;
        check_metadata(geometry, metadata.as_ref().map(|m| m.len()), len_lbas)?;
        if self.lock_table().state(zone).condition == ZoneCondition::Offline {
            return Err(ZoneError::ZoneOffline { zone });
        }
        let metadata = metadata.filter(|m| !m.is_empty());
        self.raw.read(lba, data, metadata)?;
        self.counters[zone as usize].count_read(data.len());
        Ok(())
    }

    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        let geometry = &self.geometry;
        let (zone, offset_lbas) = lba_zone(geometry, lba)?;
        let len_lbas = check_data(geometry, "write", data.len(), geometry.write_granularity_bytes as u64)?;
        check_metadata(geometry, metadata.map(<[u8]>::len), len_lbas)?;
        self.write_at_pointer(zone, Some(offset_lbas), data, metadata.filter(|m| !m.is_empty()))?;
        self.counters[zone as usize].count_write(data.len(), false);
        Ok(())
    }

    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        let zone = self.zone_index(zone)?;
        let geometry = &self.geometry;
        let len_lbas = check_data(geometry, "append", data.len(), geometry.write_granularity_bytes as u64)?;
        check_append_size(geometry, data.len())?;
        check_metadata(geometry, metadata.map(<[u8]>::len), len_lbas)?;
        let metadata = metadata.filter(|m| !m.is_empty());
        if !self.raw.has_native_append() {
            let lba = self.write_at_pointer(zone, None, data, metadata)?;
            self.counters[zone as usize].count_write(data.len(), true);
            return Ok(lba);
        }
        let shared = self.zone_locks[zone as usize].read().unwrap_or_else(|p| p.into_inner());
        // Reserve the range in the mirror first: it refuses what the device would.
        let placement = self.lock_table().write(zone, None, len_lbas)?;
        let lba = match self.raw.append(zone, data, metadata) {
            Ok(lba) => lba,
            Err(error) => {
                drop(shared);
                self.resync(zone);
                return Err(error);
            }
        };
        drop(shared);
        let start = geometry.zone_start_lba(zone);
        debug_assert!(lba >= start && lba + len_lbas <= start + geometry.zone_capacity_lbas);
        if placement.implicitly_closed.is_some() {
            self.resync_open_zones();
        }
        self.counters[zone as usize].count_write(data.len(), true);
        Ok(lba)
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        let zone = self.zone_index(zone)?;
        let exclusive = self.zone_locks[zone as usize].write().unwrap_or_else(|p| p.into_inner());
        let implicitly_closed = self.lock_table().zone_op(zone, op)?;
        if let Err(error) = self.raw.zone_op(zone, op) {
            self.resync_locked(zone);
            return Err(error);
        }
        if op == ZoneOp::Close {
            // Closing an unwritten zone leaves it Empty on some devices (null_blk) and
            // Closed, still active, on others (QEMU): adopt whichever this one did.
            self.resync_locked(zone);
        }
        drop(exclusive);
        if implicitly_closed.is_some() {
            self.resync_open_zones();
        }
        self.counters[zone as usize].count_zone_op(op);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.raw.sync()
    }

    fn counters(&self) -> DeviceCounters {
        counter_totals(&self.counters)
    }

    fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> {
        zone_counter_snapshot(&self.counters, zone)
    }

    fn describe(&self) -> String {
        self.raw.describe()
    }
}
