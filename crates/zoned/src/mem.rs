//! The in-memory device: for tests and the simulator. A zone's buffer is allocated on
//! its first write (zeroed lazily by the OS), so a large sparse device costs only what
//! is written.

use std::io::IoSlice;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::device::ZoneCounterCells;
use crate::emulated::{EmulatedDevice, Storage};
use crate::geometry::{Geometry, GeometryError};
use crate::zone::{ZoneState, ZoneTable};

/// An emulated ZNS device held in memory.
pub type MemDevice = EmulatedDevice<MemStorage>;

#[derive(Default)]
struct ZoneBytes {
    data: Box<[u8]>,
    metadata: Box<[u8]>,
}

pub struct MemStorage {
    zone_capacity_bytes: usize,
    lba_bytes: usize,
    metadata_bytes: usize,
    zones: Box<[RwLock<Option<ZoneBytes>>]>,
}

impl MemStorage {
    fn zone_read(&self, zone: u32) -> RwLockReadGuard<'_, Option<ZoneBytes>> {
        self.zones[zone as usize].read().unwrap_or_else(|p| p.into_inner())
    }

    fn zone_write(&self, zone: u32) -> RwLockWriteGuard<'_, Option<ZoneBytes>> {
        let mut guard = self.zones[zone as usize].write().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let lbas = self.zone_capacity_bytes / self.lba_bytes;
            *guard = Some(ZoneBytes {
                data: vec![0; self.zone_capacity_bytes].into_boxed_slice(),
                metadata: vec![0; lbas * self.metadata_bytes].into_boxed_slice(),
            });
        }
        guard
    }
}

impl Storage for MemStorage {
    fn write_data(&self, zone: u32, offset_lbas: u64, data: &[u8]) -> std::io::Result<()> {
        let start = offset_lbas as usize * self.lba_bytes;
        let mut guard = self.zone_write(zone);
        guard.as_mut().expect("allocated by zone_write").data[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn write_data_vectored(&self, zone: u32, offset_lbas: u64, data: &[IoSlice<'_>]) -> std::io::Result<()> {
        let mut at = offset_lbas as usize * self.lba_bytes;
        let mut guard = self.zone_write(zone);
        let bytes = &mut guard.as_mut().expect("allocated by zone_write").data;
        for piece in data {
            bytes[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        Ok(())
    }

    fn read_data(&self, zone: u32, offset_lbas: u64, data: &mut [u8]) -> std::io::Result<()> {
        let start = offset_lbas as usize * self.lba_bytes;
        match &*self.zone_read(zone) {
            Some(bytes) => data.copy_from_slice(&bytes.data[start..start + data.len()]),
            None => data.fill(0),
        }
        Ok(())
    }

    fn write_metadata(
        &self,
        zone: u32,
        offset_lbas: u64,
        len_lbas: u64,
        metadata: Option<&[u8]>,
    ) -> std::io::Result<()> {
        let start = offset_lbas as usize * self.metadata_bytes;
        let len = len_lbas as usize * self.metadata_bytes;
        let mut guard = self.zone_write(zone);
        let target = &mut guard.as_mut().expect("allocated by zone_write").metadata[start..start + len];
        match metadata {
            Some(metadata) => target.copy_from_slice(metadata),
            None => target.fill(0),
        }
        Ok(())
    }

    fn read_metadata(&self, zone: u32, offset_lbas: u64, metadata: &mut [u8]) -> std::io::Result<()> {
        let start = offset_lbas as usize * self.metadata_bytes;
        match &*self.zone_read(zone) {
            Some(bytes) => metadata.copy_from_slice(&bytes.metadata[start..start + metadata.len()]),
            None => metadata.fill(0),
        }
        Ok(())
    }

    fn persist_zone(&self, _zone: u32, _state: ZoneState) {}

    fn persist_counters(&self, _zone: u32, _counters: [u64; 7]) {}

    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn describe(&self) -> String {
        "memory".to_string()
    }
}

impl MemDevice {
    pub fn new(geometry: Geometry) -> Result<MemDevice, GeometryError> {
        geometry.validate()?;
        let zone_capacity_bytes = usize::try_from(geometry.zone_capacity_bytes()).map_err(|_| GeometryError {
            field: "zone-capacity",
            value: geometry.zone_capacity_bytes().to_string(),
            allowed: "must fit in this machine's address space".into(),
        })?;
        let storage = MemStorage {
            zone_capacity_bytes,
            lba_bytes: geometry.lba_bytes as usize,
            metadata_bytes: geometry.metadata_bytes as usize,
            zones: (0..geometry.zone_count).map(|_| RwLock::new(None)).collect(),
        };
        let counters = (0..geometry.zone_count).map(|_| ZoneCounterCells::default()).collect();
        Ok(EmulatedDevice::with_storage(ZoneTable::new(geometry), counters, storage))
    }
}
