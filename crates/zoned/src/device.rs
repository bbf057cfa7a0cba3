//! The `ZonedDevice` trait: what a ZNS namespace offers, and nothing of swap.

use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::aligned::AlignedBuf;
use crate::error::Result;
use crate::geometry::Geometry;
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp};

/// A zoned block device with ZNS semantics.
///
/// All methods take `&self` and the device is `Sync`: many threads may issue commands at
/// once. Commands on one zone are atomic with respect to its write pointer (two appends
/// never overlap), but the host must not reset or finish a zone while it has writes in
/// flight to it, and must not rely on reads of a range racing a write to it — as on real
/// hardware.
///
/// Buffers: `data` lengths are whole LBAs; `metadata`, when given, holds
/// `metadata_bytes` per LBA of `data`. A device without metadata accepts only `None`
/// or an empty buffer. On writes, `None` stores zeroed metadata.
pub trait ZonedDevice: Send + Sync {
    fn geometry(&self) -> &Geometry;

    /// One zone's descriptor.
    fn report_zone(&self, zone: u32) -> Result<ZoneInfo>;

    /// Every zone's descriptor, in zone order.
    fn report_zones(&self) -> Result<Vec<ZoneInfo>> {
        (0..self.geometry().zone_count).map(|zone| self.report_zone(zone)).collect()
    }

    /// Reads whole LBAs inside one zone's capacity. LBAs at or past the write pointer
    /// read as zeroes on the emulated devices (real devices may return another fill).
    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()>;

    /// A regular write, which must start exactly at the zone's write pointer. Length and
    /// position are multiples of the write granularity.
    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()>;

    /// Zone Append: the device picks the position (the write pointer at the time it
    /// executes the command) and returns the first LBA written. Many appends to one zone
    /// may be in flight at once; each lands contiguously, in an order the device chooses.
    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64>;

    /// `append` of the concatenation of `data` (scatter-gather): a caller whose pages sit
    /// in separate buffers need not copy them into one first. The concatenation obeys
    /// `append`'s rules. This default gathers into one buffer; the emulated devices write
    /// the pieces as they are (`pwritev` on a file).
    fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u64> {
        let mut gathered = AlignedBuf::zeroed(data.iter().map(|piece| piece.len()).sum());
        let mut at = 0;
        for piece in data {
            gathered[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        self.append(zone, &gathered, metadata)
    }

    /// Zone Management Send: reset, open, close or finish one zone.
    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()>;

    fn reset(&self, zone: u32) -> Result<()> {
        self.zone_op(zone, ZoneOp::Reset)
    }
    fn open(&self, zone: u32) -> Result<()> {
        self.zone_op(zone, ZoneOp::Open)
    }
    fn close(&self, zone: u32) -> Result<()> {
        self.zone_op(zone, ZoneOp::Close)
    }
    fn finish(&self, zone: u32) -> Result<()> {
        self.zone_op(zone, ZoneOp::Finish)
    }

    /// Resets every zone that is not Empty, Read-Only or Offline.
    fn reset_all(&self) -> Result<()> {
        for info in self.report_zones()? {
            if !matches!(info.condition, ZoneCondition::Empty | ZoneCondition::ReadOnly | ZoneCondition::Offline) {
                self.reset(info.zone)?;
            }
        }
        Ok(())
    }

    /// Makes completed writes and zone state durable.
    fn sync(&self) -> Result<()>;

    /// Totals since the device was created (persisted by persistent backends).
    fn counters(&self) -> DeviceCounters;

    fn zone_counters(&self, zone: u32) -> Result<ZoneCounters>;

    /// Whether `counters` survive close and reopen (the emulated devices keep them in the
    /// device file; real hardware keeps no per-zone counters, so they restart at zero).
    fn counters_persist(&self) -> bool {
        false
    }

    /// Writes the counters where they persist (no flush, so cheap enough to call every
    /// second): a process that ends without closing the device (`_exit`, a signal)
    /// leaves them as of the last call. A no-op where they do not persist.
    fn save_counters(&self) {}

    /// Hooks to break the device on purpose; `None` for real hardware.
    fn fault_injector(&self) -> Option<&dyn FaultInjector> {
        None
    }

    /// A short human description, e.g. "file /tmp/x.zns (O_DIRECT)".
    fn describe(&self) -> String;
}

/// Device failures that emulated backends can be told to produce.
pub trait FaultInjector: Send + Sync {
    /// Turns a zone Read-Only or Offline, as a worn-out or failed zone would.
    fn fail_zone(&self, zone: u32, condition: ZoneCondition);
    /// Fails the next `count` commands of `kind` with `ZoneError::Injected`, changing
    /// nothing on the device (the command is dropped before it executes).
    fn fail_next(&self, kind: FaultKind, count: u32);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FaultKind {
    Read,
    Write,
    Append,
    Reset,
}

/// Whole-device totals. `bytes_written` counts data only (not metadata), so WAF
/// computations compare like with like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounters {
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub appends: u64,
    pub reads: u64,
    pub resets: u64,
    pub finishes: u64,
}

/// Per-zone totals; `resets` is the zone's wear (each reset erases its blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneCounters {
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub appends: u64,
    pub resets: u64,
    pub finishes: u64,
}

/// Device totals: the sum of every zone's counters.
pub(crate) fn counter_totals(zones: &[ZoneCounterCells]) -> DeviceCounters {
    let mut totals = DeviceCounters::default();
    for zone in zones {
        zone.add_to(&mut totals);
    }
    totals
}

/// One zone's counters, or the error for a zone past the last.
pub(crate) fn zone_counter_snapshot(zones: &[ZoneCounterCells], zone: u32) -> crate::error::Result<ZoneCounters> {
    zones
        .get(zone as usize)
        .map(ZoneCounterCells::snapshot)
        .ok_or(crate::error::ZoneError::InvalidZone { zone: zone as u64, zone_count: zones.len() as u32 })
}

/// Lock-free counters for one zone; the device totals are sums over zones.
#[derive(Debug, Default)]
pub(crate) struct ZoneCounterCells {
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    pub writes: AtomicU64,
    pub appends: AtomicU64,
    pub reads: AtomicU64,
    pub resets: AtomicU64,
    pub finishes: AtomicU64,
}

impl ZoneCounterCells {
    pub fn count_write(&self, bytes: usize, append: bool) {
        self.bytes_written.fetch_add(bytes as u64, Relaxed);
        let commands = if append { &self.appends } else { &self.writes };
        commands.fetch_add(1, Relaxed);
    }

    pub fn count_read(&self, bytes: usize) {
        self.bytes_read.fetch_add(bytes as u64, Relaxed);
        self.reads.fetch_add(1, Relaxed);
    }

    pub fn count_zone_op(&self, op: crate::zone::ZoneOp) {
        match op {
            crate::zone::ZoneOp::Reset => self.resets.fetch_add(1, Relaxed),
            crate::zone::ZoneOp::Finish => self.finishes.fetch_add(1, Relaxed),
            crate::zone::ZoneOp::Open | crate::zone::ZoneOp::Close => 0,
        };
    }

    pub fn snapshot(&self) -> ZoneCounters {
        ZoneCounters {
            bytes_written: self.bytes_written.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            appends: self.appends.load(Relaxed),
            resets: self.resets.load(Relaxed),
            finishes: self.finishes.load(Relaxed),
        }
    }

    pub fn add_to(&self, totals: &mut DeviceCounters) {
        totals.bytes_written += self.bytes_written.load(Relaxed);
        totals.bytes_read += self.bytes_read.load(Relaxed);
        totals.writes += self.writes.load(Relaxed);
        totals.appends += self.appends.load(Relaxed);
        totals.reads += self.reads.load(Relaxed);
        totals.resets += self.resets.load(Relaxed);
        totals.finishes += self.finishes.load(Relaxed);
    }

    /// The fields in their persisted order (see `file.rs`).
    pub fn cells(&self) -> [&AtomicU64; 7] {
        [&self.bytes_written, &self.bytes_read, &self.writes, &self.appends, &self.reads, &self.resets, &self.finishes]
    }
}

macro_rules! forward_zoned_device {
    ($($wrapper:ty),*) => {$(
        impl<T: ZonedDevice + ?Sized> ZonedDevice for $wrapper {
            fn geometry(&self) -> &Geometry { (**self).geometry() }
            fn report_zone(&self, zone: u32) -> Result<ZoneInfo> { (**self).report_zone(zone) }
            fn report_zones(&self) -> Result<Vec<ZoneInfo>> { (**self).report_zones() }
            fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> { (**self).read(lba, data, metadata) }
            fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> { (**self).write(lba, data, metadata) }
            fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> { (**self).append(zone, data, metadata) }
            fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u64> { (**self).append_vectored(zone, data, metadata) }
            fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> { (**self).zone_op(zone, op) }
            fn sync(&self) -> Result<()> { (**self).sync() }
            fn counters(&self) -> DeviceCounters { (**self).counters() }
            fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> { (**self).zone_counters(zone) }
            fn fault_injector(&self) -> Option<&dyn FaultInjector> { (**self).fault_injector() }
            fn counters_persist(&self) -> bool { (**self).counters_persist() }
            fn save_counters(&self) { (**self).save_counters() }
            fn describe(&self) -> String { (**self).describe() }
        }
    )*};
}

forward_zoned_device!(Arc<T>, Box<T>, &T);

/// A device with its fault injection hidden: for running checks against a device whose
/// zones must not be broken on purpose (a user's file device, real hardware).
pub struct WithoutFaultInjection<D: ZonedDevice>(pub D);

impl<D: ZonedDevice> ZonedDevice for WithoutFaultInjection<D> {
    fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }
    fn report_zone(&self, zone: u32) -> Result<ZoneInfo> {
        self.0.report_zone(zone)
    }
    fn report_zones(&self) -> Result<Vec<ZoneInfo>> {
        self.0.report_zones()
    }
    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> {
        self.0.read(lba, data, metadata)
    }
    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        self.0.write(lba, data, metadata)
    }
    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        self.0.append(zone, data, metadata)
    }
    fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u64> {
        self.0.append_vectored(zone, data, metadata)
    }
    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        self.0.zone_op(zone, op)
    }
    fn sync(&self) -> Result<()> {
        self.0.sync()
    }
    fn counters(&self) -> DeviceCounters {
        self.0.counters()
    }
    fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> {
        self.0.zone_counters(zone)
    }
    fn counters_persist(&self) -> bool {
        self.0.counters_persist()
    }
    fn save_counters(&self) {
        self.0.save_counters()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}
