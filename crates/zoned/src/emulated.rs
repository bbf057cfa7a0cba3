//! An emulated ZNS device: the zone state machine, command validation, counters and
//! fault injection, over a pluggable byte store (memory or a file).
//!
//! Concurrency: one short mutex guards the zone table. A write or append validates and
//! advances the write pointer under it, then copies its bytes outside it, so appends to
//! one zone from many threads reserve disjoint ranges and copy in parallel.

use std::io::IoSlice;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use crate::device::{
    counter_totals, zone_counter_snapshot, DeviceCounters, FaultInjector, FaultKind, ZoneCounterCells, ZoneCounters,
    ZonedDevice,
};
use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;
use crate::validate::{check_append_size, check_data, check_metadata, check_read_range, lba_zone};
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp, ZoneState, ZoneTable};

/// The bytes behind an emulated device. Offsets are LBAs from the zone start, always
/// inside the zone capacity; the emulator guarantees concurrent writes never overlap.
pub trait Storage: Send + Sync {
    fn write_data(&self, zone: u32, offset_lbas: u64, data: &[u8]) -> std::io::Result<()>;
    /// `write_data` of the concatenation of `data`.
    fn write_data_vectored(&self, zone: u32, offset_lbas: u64, data: &[IoSlice<'_>]) -> std::io::Result<()>;
    fn read_data(&self, zone: u32, offset_lbas: u64, data: &mut [u8]) -> std::io::Result<()>;
    /// Stores `metadata` for the LBAs starting at `offset_lbas`, or zeroes for
    /// `len_lbas` LBAs when `None`. Only called when the geometry has metadata.
    fn write_metadata(
        &self,
        zone: u32,
        offset_lbas: u64,
        len_lbas: u64,
        metadata: Option<&[u8]>,
    ) -> std::io::Result<()>;
    fn read_metadata(&self, zone: u32, offset_lbas: u64, metadata: &mut [u8]) -> std::io::Result<()>;
    /// Records a zone's new state (persistent stores write it through).
    fn persist_zone(&self, zone: u32, state: ZoneState);
    /// Records a zone's counters (bytes written, bytes read, writes, appends, reads,
    /// resets, finishes); called on sync and close.
    fn persist_counters(&self, zone: u32, counters: [u64; 7]);
    fn sync(&self) -> std::io::Result<()>;
    fn describe(&self) -> String;
}

/// What a write carries: one buffer, or pieces written as one (scatter-gather).
#[derive(Clone, Copy)]
enum Payload<'a> {
    One(&'a [u8]),
    Pieces(&'a [IoSlice<'a>]),
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match self {
            Payload::One(data) => data.len(),
            Payload::Pieces(pieces) => pieces.iter().map(|piece| piece.len()).sum(),
        }
    }
}

#[derive(Debug, Default)]
struct FaultCells {
    read: AtomicU32,
    write: AtomicU32,
    append: AtomicU32,
    reset: AtomicU32,
}

impl FaultCells {
    fn cell(&self, kind: FaultKind) -> &AtomicU32 {
        match kind {
            FaultKind::Read => &self.read,
            FaultKind::Write => &self.write,
            FaultKind::Append => &self.append,
            FaultKind::Reset => &self.reset,
        }
    }

    /// Consumes one pending failure of `kind`, if any.
    fn take(&self, kind: FaultKind) -> bool {
        self.cell(kind).fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)).is_ok()
    }
}

/// A ZNS device emulated in software over a [`Storage`].
pub struct EmulatedDevice<S: Storage> {
    geometry: Geometry,
    table: Mutex<ZoneTable>,
    counters: Box<[ZoneCounterCells]>,
    faults: FaultCells,
    pub(crate) storage: S,
}

impl<S: Storage> EmulatedDevice<S> {
    pub(crate) fn with_storage(table: ZoneTable, counters: Box<[ZoneCounterCells]>, storage: S) -> Self {
        let geometry = *table.geometry();
        assert_eq!(counters.len(), geometry.zone_count as usize);
        EmulatedDevice { geometry, table: Mutex::new(table), counters, faults: FaultCells::default(), storage }
    }

    fn lock(&self) -> MutexGuard<'_, ZoneTable> {
        // A panic while holding the lock cannot leave the table half-updated (every
        // mutation validates first), so a poisoned lock is still consistent.
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Recounts open/active zones (tests call this after concurrent work).
    pub fn check_invariants(&self) {
        self.lock().check_invariants();
    }

    /// Validated write of `data` to `zone`: at `at_offset_lbas` (a write) or wherever
    /// the write pointer is (an append). Returns the offset written.
    fn write_zone(
        &self,
        zone: u32,
        at_offset_lbas: Option<u64>,
        data: Payload<'_>,
        metadata: Option<&[u8]>,
    ) -> Result<u64> {
        let (what, kind) =
            if at_offset_lbas.is_some() { ("write", FaultKind::Write) } else { ("append", FaultKind::Append) };
        let len = data.len();
        let len_lbas = check_data(&self.geometry, what, len, self.geometry.write_granularity_bytes as u64)?;
        if at_offset_lbas.is_none() {
            check_append_size(&self.geometry, len)?;
        }
        check_metadata(&self.geometry, metadata.map(<[u8]>::len), len_lbas)?;
        let offset_lbas = {
            let mut table = self.lock();
            if table.state(zone).condition == ZoneCondition::Offline {
                return Err(ZoneError::ZoneOffline { zone });
            }
            if self.faults.take(kind) {
                return Err(ZoneError::Injected { op: what, zone });
            }
            let placement = table.write(zone, at_offset_lbas, len_lbas)?;
            self.storage.persist_zone(zone, table.state(zone));
            if let Some(closed) = placement.implicitly_closed {
                self.storage.persist_zone(closed, table.state(closed));
            }
            placement.offset_lbas
        };
        match data {
            Payload::One(data) => self.storage.write_data(zone, offset_lbas, data),
            Payload::Pieces(pieces) => self.storage.write_data_vectored(zone, offset_lbas, pieces),
        }
        .map_err(|error| ZoneError::io(what, error))?;
        if self.geometry.metadata_bytes != 0 {
            self.storage
                .write_metadata(zone, offset_lbas, len_lbas, metadata)
                .map_err(|error| ZoneError::io(what, error))?;
        }
        self.counters[zone as usize].count_write(len, at_offset_lbas.is_none());
        Ok(offset_lbas)
    }

    fn zone_index(&self, zone: u32) -> Result<u32> {
        if zone < self.geometry.zone_count {
            Ok(zone)
        } else {
            Err(ZoneError::InvalidZone { zone: zone as u64, zone_count: self.geometry.zone_count })
        }
    }

    /// Writes every zone's counters to the store (persistent stores keep them).
    pub(crate) fn persist_all_counters(&self) {
        for (zone, counters) in self.counters.iter().enumerate() {
            self.storage.persist_counters(zone as u32, counters.cells().map(|cell| cell.load(Relaxed)));
        }
    }
}

impl<S: Storage> ZonedDevice for EmulatedDevice<S> {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn report_zone(&self, zone: u32) -> Result<ZoneInfo> {
        let zone = self.zone_index(zone)?;
        Ok(self.lock().info(zone))
    }

    fn report_zones(&self) -> Result<Vec<ZoneInfo>> {
        let table = self.lock();
        Ok((0..self.geometry.zone_count).map(|zone| table.info(zone)).collect())
    }

    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> {
        let geometry = &self.geometry;
        let (zone, offset_lbas) = lba_zone(geometry, lba)?;
        let len_lbas = check_data(geometry, "read", data.len(), geometry.lba_bytes as u64)?;
        check_read_range(geometry, zone, lba, offset_lbas, len_lbas)?;
        check_metadata(geometry, metadata.as_ref().map(|m| m.len()), len_lbas)?;
        let written_lbas = {
            let table = self.lock();
            let state = table.state(zone);
            if state.condition == ZoneCondition::Offline {
                return Err(ZoneError::ZoneOffline { zone });
            }
            if self.faults.take(FaultKind::Read) {
                return Err(ZoneError::Injected { op: "read", zone });
            }
            state.write_pointer_lbas
        };
        // Only the part below the write pointer holds data; the rest reads as zeroes.
        let valid_lbas = written_lbas.saturating_sub(offset_lbas).min(len_lbas);
        let valid_bytes = (valid_lbas * geometry.lba_bytes as u64) as usize;
        if valid_lbas > 0 {
            self.storage
                .read_data(zone, offset_lbas, &mut data[..valid_bytes])
                .map_err(|e| ZoneError::io("read", e))?;
        }
        data[valid_bytes..].fill(0);
        if let Some(metadata) = metadata {
            let valid_metadata = (valid_lbas * geometry.metadata_bytes as u64) as usize;
            if valid_metadata > 0 {
                self.storage
                    .read_metadata(zone, offset_lbas, &mut metadata[..valid_metadata])
                    .map_err(|e| ZoneError::io("read", e))?;
            }
            metadata[valid_metadata..].fill(0);
        }
        self.counters[zone as usize].count_read(data.len());
        Ok(())
    }

    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        let (zone, offset_lbas) = lba_zone(&self.geometry, lba)?;
        self.write_zone(zone, Some(offset_lbas), Payload::One(data), metadata).map(|_| ())
    }

    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        let zone = self.zone_index(zone)?;
        let offset_lbas = self.write_zone(zone, None, Payload::One(data), metadata)?;
        Ok(self.geometry.zone_start_lba(zone) + offset_lbas)
    }

    fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u64> {
        let zone = self.zone_index(zone)?;
        let offset_lbas = self.write_zone(zone, None, Payload::Pieces(data), metadata)?;
        Ok(self.geometry.zone_start_lba(zone) + offset_lbas)
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        let zone = self.zone_index(zone)?;
        let mut table = self.lock();
        if op == ZoneOp::Reset
            && table.state(zone).condition != ZoneCondition::Offline
            && self.faults.take(FaultKind::Reset)
        {
            return Err(ZoneError::Injected { op: "reset", zone });
        }
        let implicitly_closed = table.zone_op(zone, op)?;
        self.storage.persist_zone(zone, table.state(zone));
        if let Some(closed) = implicitly_closed {
            self.storage.persist_zone(closed, table.state(closed));
        }
        self.counters[zone as usize].count_zone_op(op);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.persist_all_counters();
        self.storage.sync().map_err(|e| ZoneError::io("sync", e))
    }

    fn counters(&self) -> DeviceCounters {
        counter_totals(&self.counters)
    }

    fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> {
        zone_counter_snapshot(&self.counters, zone)
    }

    fn fault_injector(&self) -> Option<&dyn FaultInjector> {
        Some(self)
    }

    fn counters_persist(&self) -> bool {
        true
    }

    fn save_counters(&self) {
        self.persist_all_counters();
    }

    fn describe(&self) -> String {
        self.storage.describe()
    }
}

impl<S: Storage> FaultInjector for EmulatedDevice<S> {
    fn fail_zone(&self, zone: u32, condition: ZoneCondition) {
        let mut table = self.lock();
        table.set_failed(zone, condition);
        self.storage.persist_zone(zone, table.state(zone));
    }

    fn fail_next(&self, kind: FaultKind, count: u32) {
        self.faults.cell(kind).store(count, Relaxed);
    }
}

impl<S: Storage> Drop for EmulatedDevice<S> {
    fn drop(&mut self) {
        // Counters live in memory between syncs; write them out on close.
        self.persist_all_counters();
        let _ = self.storage.sync();
    }
}
