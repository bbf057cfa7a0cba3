//! Linux zoned block devices (`/dev/nvmeXnY`, `/dev/nullbN`, SMR disks) through the
//! kernel's zoned ioctls (`include/uapi/linux/blkzoned.h`) and sysfs.
//!
//! Block devices have no zone append system call and expose no per-LBA metadata to user
//! space, so [`ZonedBlockDevice`] reports `metadata_bytes = 0` (swap then keeps its
//! reverse map in chunk footers) and no native append: [`crate::CheckedDevice`] appends
//! by writing at its mirrored write pointer, one write per zone at a time, which keeps
//! writes to a zone in order under any I/O scheduler (no need for mq-deadline).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::checked::RawZoned;
use crate::direct_io;
use crate::error::{Result, ZoneError};
use crate::geometry::{Geometry, GeometryError, ZONE_APPEND_MAX_BYTES_DEFAULT};
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp};

const SECTOR_BYTES: u64 = 512;

/// `_IOC(dir, 0x12, nr, size)` as <asm-generic/ioctl.h> builds it.
const fn block_ioctl(dir: u64, nr: u64, size: u64) -> u64 {
    (dir << 30) | (size << 16) | (0x12 << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const BLK_ZONE_REPORT_BYTES: u64 = 16;
const BLK_ZONE_RANGE_BYTES: u64 = 16;
const BLKREPORTZONE: u64 = block_ioctl(IOC_READ | IOC_WRITE, 130, BLK_ZONE_REPORT_BYTES);
const BLKRESETZONE: u64 = block_ioctl(IOC_WRITE, 131, BLK_ZONE_RANGE_BYTES);
const BLKGETZONESZ: u64 = block_ioctl(IOC_READ, 132, 4);
const BLKGETNRZONES: u64 = block_ioctl(IOC_READ, 133, 4);
const BLKOPENZONE: u64 = block_ioctl(IOC_WRITE, 134, BLK_ZONE_RANGE_BYTES);
const BLKCLOSEZONE: u64 = block_ioctl(IOC_WRITE, 135, BLK_ZONE_RANGE_BYTES);
const BLKFINISHZONE: u64 = block_ioctl(IOC_WRITE, 136, BLK_ZONE_RANGE_BYTES);

/// `struct blk_zone` is 64 bytes: start, len, wp (sectors), type, cond, non_seq, reset,
/// 4 reserved, capacity (sectors), 24 reserved.
const BLK_ZONE_BYTES: usize = 64;
const BLK_ZONE_REP_CAPACITY: u32 = 1;
const BLK_ZONE_TYPE_SEQWRITE_REQ: u8 = 2;
/// Zones asked for per `BLKREPORTZONE`.
const REPORT_BATCH_ZONES: u32 = 1024;

/// Why a zoned block device could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZbdError {
    #[error("{path}: {op} failed: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error("{path} is not a block device")]
    NotABlockDevice { path: PathBuf },
    #[error("{path} is not a zoned block device (queue/zoned = {model}); use a file device instead (`znswap device create`)")]
    NotZoned { path: PathBuf, model: String },
    #[error("{path}: zone {zone} is not sequential-write-required (type {zone_type}); znswap needs a host-managed device without conventional zones")]
    UnsupportedZoneType { path: PathBuf, zone: u32, zone_type: u8 },
    #[error("{path}: zone {zone} has capacity {capacity_lbas} LBAs but zone 0 has {first_lbas}; znswap needs equal zone capacities")]
    UnequalCapacity { path: PathBuf, zone: u32, capacity_lbas: u64, first_lbas: u64 },
    #[error("{path}: {0}", path = .1.display())]
    Geometry(GeometryError, PathBuf),
}

/// A Linux zoned block device, driven through ioctls and O_DIRECT reads and writes.
pub struct ZonedBlockDevice {
    path: PathBuf,
    file: File,
    geometry: Geometry,
    sectors_per_lba: u64,
}

fn sysfs_value(queue: &Path, name: &str) -> Option<u64> {
    std::fs::read_to_string(queue.join(name)).ok()?.trim().parse().ok()
}

fn ioctl_u32(file: &File, request: u64, path: &Path, op: &'static str) -> std::result::Result<u32, ZbdError> {
    let mut value: u32 = 0;
    // SAFETY: the request writes one u32 into `value`, which outlives the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request as _, &mut value as *mut u32) };
    if rc != 0 {
        return Err(ZbdError::Io { path: path.into(), op, source: std::io::Error::last_os_error() });
    }
    Ok(value)
}

/// Maps a failed zoned command's errno to the zone error it stands for
/// (`blk_status_to_errno`: open/active resources are ETOOMANYREFS/EOVERFLOW).
fn zone_error(op: &'static str, zone: u32, error: std::io::Error, geometry: &Geometry) -> ZoneError {
    match error.raw_os_error() {
        Some(libc::ETOOMANYREFS) => ZoneError::TooManyOpenZones { zone, max_open: geometry.max_open_zones },
        Some(libc::EOVERFLOW) => ZoneError::TooManyActiveZones { zone, max_active: geometry.max_active_zones },
        _ => ZoneError::io(op, error),
    }
}

impl ZonedBlockDevice {
    pub fn open(path: impl AsRef<Path>) -> std::result::Result<ZonedBlockDevice, ZbdError> {
        let path = path.as_ref();
        let io = |op: &'static str| move |source| ZbdError::Io { path: path.into(), op, source };
        let metadata = std::fs::metadata(path).map_err(io("stat"))?;
        if !metadata.file_type().is_block_device() {
            return Err(ZbdError::NotABlockDevice { path: path.into() });
        }
        let rdev = metadata.rdev();
        let queue = PathBuf::from(format!("/sys/dev/block/{}:{}/queue", libc::major(rdev), libc::minor(rdev)));
        let model = std::fs::read_to_string(queue.join("zoned")).map_err(io("read queue/zoned"))?.trim().to_string();
        if model != "host-managed" && model != "host-aware" {
            return Err(ZbdError::NotZoned { path: path.into(), model });
        }
        let file =
            OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path).map_err(io("open"))?;
        let lba_bytes = sysfs_value(&queue, "logical_block_size").unwrap_or(SECTOR_BYTES) as u32;
        let zone_sectors = ioctl_u32(&file, BLKGETZONESZ, path, "BLKGETZONESZ")? as u64;
        let zone_count = ioctl_u32(&file, BLKGETNRZONES, path, "BLKGETNRZONES")?;
        let sectors_per_lba = lba_bytes as u64 / SECTOR_BYTES;
        let clamp = |limit: u64| (limit.min(zone_count as u64)) as u32;
        let granularity = match sysfs_value(&queue, "zone_write_granularity") {
            Some(0) | None => lba_bytes,
            Some(bytes) => bytes as u32,
        };
        // Appends become writes here, but keep the device's own limit for fidelity.
        let append_limit = sysfs_value(&queue, "zone_append_max_bytes")
            .filter(|&bytes| bytes > 0)
            .unwrap_or(ZONE_APPEND_MAX_BYTES_DEFAULT)
            .min(ZONE_APPEND_MAX_BYTES_DEFAULT);
        let mut geometry = Geometry {
            lba_bytes,
            metadata_bytes: 0,
            zone_count,
            zone_size_lbas: zone_sectors / sectors_per_lba,
            zone_capacity_lbas: zone_sectors / sectors_per_lba,
            max_open_zones: clamp(sysfs_value(&queue, "max_open_zones").unwrap_or(0)),
            max_active_zones: clamp(sysfs_value(&queue, "max_active_zones").unwrap_or(0)),
            write_granularity_bytes: granularity,
            zone_append_max_bytes: (append_limit - append_limit % granularity as u64) as u32,
        };
        // A device with an active limit but no open limit still can't open more than it
        // can keep active.
        if geometry.max_active_zones != 0 && geometry.max_open_zones == 0 {
            geometry.max_open_zones = geometry.max_active_zones;
        }
        let mut device = ZonedBlockDevice { path: path.into(), file, geometry, sectors_per_lba };
        let zones = device.report_raw(0, zone_count).map_err(|e| ZbdError::Io {
            path: path.into(),
            op: "BLKREPORTZONE",
            source: std::io::Error::other(e.to_string()),
        })?;
        let first_capacity = zones.first().map_or(0, |(info, _)| info.capacity_lbas);
        for (info, zone_type) in &zones {
            if *zone_type != BLK_ZONE_TYPE_SEQWRITE_REQ {
                return Err(ZbdError::UnsupportedZoneType {
                    path: path.into(),
                    zone: info.zone,
                    zone_type: *zone_type,
                });
            }
            if info.capacity_lbas != first_capacity {
                return Err(ZbdError::UnequalCapacity {
                    path: path.into(),
                    zone: info.zone,
                    capacity_lbas: info.capacity_lbas,
                    first_lbas: first_capacity,
                });
            }
        }
        device.geometry.zone_capacity_lbas = first_capacity;
        device.geometry.validate().map_err(|e| ZbdError::Geometry(e, path.into()))?;
        Ok(device)
    }

    /// Zone descriptors (with their zone types) of `count` zones from `first_zone`.
    fn report_raw(&self, first_zone: u32, count: u32) -> Result<Vec<(ZoneInfo, u8)>> {
        let mut zones = Vec::with_capacity(count as usize);
        let zone_sectors = self.geometry.zone_size_lbas * self.sectors_per_lba;
        let mut next = first_zone;
        let end = first_zone + count;
        while next < end {
            let batch = (end - next).min(REPORT_BATCH_ZONES);
            // u64 words keep the buffer 8-byte aligned for the kernel's structs.
            let mut buffer = vec![0u64; (BLK_ZONE_REPORT_BYTES as usize + batch as usize * BLK_ZONE_BYTES) / 8];
            buffer[0] = next as u64 * zone_sectors;
            buffer[1] = batch as u64; // nr_zones (low half), flags (high half) = 0
                                      // SAFETY: the buffer holds the report header and `batch` descriptors, as the
                                      // header's nr_zones promises the kernel.
            let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKREPORTZONE as _, buffer.as_mut_ptr()) };
            if rc != 0 {
                return Err(ZoneError::io("BLKREPORTZONE", std::io::Error::last_os_error()));
            }
            let reported = (buffer[1] & 0xFFFF_FFFF) as u32;
            let flags = (buffer[1] >> 32) as u32;
            if reported == 0 {
                break;
            }
            let bytes: &[u8] = bytemuck_words(&buffer);
            for index in 0..reported.min(batch) as usize {
                let at = BLK_ZONE_REPORT_BYTES as usize + index * BLK_ZONE_BYTES;
                let word = |offset: usize| u64::from_ne_bytes(bytes[at + offset..at + offset + 8].try_into().unwrap());
                let (start, len, wp) = (word(0), word(8), word(16));
                let zone_type = bytes[at + 24];
                let condition = ZoneCondition::from_code(bytes[at + 25]).unwrap_or(ZoneCondition::Offline);
                let capacity = if flags & BLK_ZONE_REP_CAPACITY != 0 { word(32) } else { len };
                let lba = |sectors: u64| sectors / self.sectors_per_lba;
                let info = ZoneInfo {
                    zone: (start / zone_sectors) as u32,
                    start_lba: lba(start),
                    len_lbas: lba(len),
                    capacity_lbas: lba(capacity),
                    write_pointer_lba: match condition {
                        ZoneCondition::Full | ZoneCondition::Offline => lba(start + len),
                        _ => lba(wp),
                    },
                    condition,
                };
                zones.push((info, zone_type));
            }
            next += reported.min(batch);
        }
        Ok(zones)
    }

    fn zone_range_ioctl(&self, request: u64, zone: u32, op: &'static str) -> Result<()> {
        let zone_sectors = self.geometry.zone_size_lbas * self.sectors_per_lba;
        let range: [u64; 2] = [zone as u64 * zone_sectors, zone_sectors];
        // SAFETY: `struct blk_zone_range` is two u64s: start sector and sector count.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, range.as_ptr()) };
        if rc != 0 {
            return Err(zone_error(op, zone, std::io::Error::last_os_error(), &self.geometry));
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn bytemuck_words(words: &[u64]) -> &[u8] {
    // SAFETY: any u64 slice is a valid byte slice of eight times its length.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), std::mem::size_of_val(words)) }
}

impl RawZoned for ZonedBlockDevice {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn report(&self, first_zone: u32, count: u32) -> Result<Vec<ZoneInfo>> {
        Ok(self.report_raw(first_zone, count)?.into_iter().map(|(info, _)| info).collect())
    }

    fn read(&self, lba: u64, data: &mut [u8], _metadata: Option<&mut [u8]>) -> Result<()> {
        direct_io::read_at(&self.file, data, lba * self.geometry.lba_bytes as u64, true)
            .map_err(|e| ZoneError::io("read", e))
    }

    fn write(&self, lba: u64, data: &[u8], _metadata: Option<&[u8]>) -> Result<()> {
        let zone = self.geometry.zone_of(lba).unwrap_or(0);
        direct_io::write_at(&self.file, data, lba * self.geometry.lba_bytes as u64)
            .map_err(|e| zone_error("write", zone, e, &self.geometry))
    }

    fn has_native_append(&self) -> bool {
        false
    }

    fn append(&self, _zone: u32, _data: &[u8], _metadata: Option<&[u8]>) -> Result<u64> {
        unreachable!("block devices have no zone append system call; CheckedDevice writes at the write pointer")
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        match op {
            ZoneOp::Reset => self.zone_range_ioctl(BLKRESETZONE, zone, "BLKRESETZONE"),
            ZoneOp::Open => self.zone_range_ioctl(BLKOPENZONE, zone, "BLKOPENZONE"),
            ZoneOp::Close => self.zone_range_ioctl(BLKCLOSEZONE, zone, "BLKCLOSEZONE"),
            ZoneOp::Finish => self.zone_range_ioctl(BLKFINISHZONE, zone, "BLKFINISHZONE"),
        }
    }

    fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| ZoneError::io("sync", e))
    }

    fn describe(&self) -> String {
        format!("zoned block device {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        // Values of the _IOWR/_IOW/_IOR macros in include/uapi/linux/blkzoned.h on x86-64.
        assert_eq!(BLKREPORTZONE, 0xC010_1282);
        assert_eq!(BLKRESETZONE, 0x4010_1283);
        assert_eq!(BLKGETZONESZ, 0x8004_1284);
        assert_eq!(BLKGETNRZONES, 0x8004_1285);
        assert_eq!(BLKOPENZONE, 0x4010_1286);
        assert_eq!(BLKCLOSEZONE, 0x4010_1287);
        assert_eq!(BLKFINISHZONE, 0x4010_1288);
    }

    #[test]
    fn regular_files_are_refused() {
        let file = tempfile::NamedTempFile::new().unwrap();
        assert!(matches!(ZonedBlockDevice::open(file.path()), Err(ZbdError::NotABlockDevice { .. })));
    }

    #[test]
    fn resource_errnos_map_to_zone_errors() {
        let geometry = Geometry::from_bytes(4096, 0, 4, 1 << 20, 1 << 20, 2, 3, 4096).unwrap();
        let open = zone_error("write", 1, std::io::Error::from_raw_os_error(libc::ETOOMANYREFS), &geometry);
        assert!(matches!(open, ZoneError::TooManyOpenZones { zone: 1, max_open: 2 }));
        let active = zone_error("write", 1, std::io::Error::from_raw_os_error(libc::EOVERFLOW), &geometry);
        assert!(matches!(active, ZoneError::TooManyActiveZones { max_active: 3, .. }));
        assert!(matches!(
            zone_error("write", 1, std::io::Error::from_raw_os_error(libc::EIO), &geometry),
            ZoneError::Io { .. }
        ));
    }
}
