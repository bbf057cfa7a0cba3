//! Typed errors of zoned operations. A rejected command changes nothing on the device.

use std::sync::Arc;

use crate::zone::{ZoneCondition, ZoneOp};

/// Why a zoned command was refused or failed.
///
/// Variants before `Io` are the host's mistakes (the command broke a ZNS rule) and leave
/// the device exactly as it was. `Io` and `Injected` are device failures.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ZoneError {
    #[error("zone {zone} does not exist (the device has {zone_count} zones)")]
    InvalidZone { zone: u64, zone_count: u32 },
    #[error("LBA {lba} is past the end of the device ({total_lbas} LBAs)")]
    LbaOutOfRange { lba: u64, total_lbas: u64 },
    #[error("write at LBA {lba} in zone {zone} is not at the write pointer (LBA {write_pointer}); use zone append, or write at the write pointer")]
    NotAtWritePointer { zone: u32, lba: u64, write_pointer: u64 },
    #[error("{len_bytes} B at offset {offset_lbas} of zone {zone} would pass its capacity ({capacity_lbas} LBAs)")]
    ExceedsCapacity { zone: u32, offset_lbas: u64, len_bytes: u64, capacity_lbas: u64 },
    #[error("zone {zone} is full; reset it before writing again")]
    ZoneFull { zone: u32 },
    #[error("zone {zone} is read-only")]
    ZoneReadOnly { zone: u32 },
    #[error("zone {zone} is offline")]
    ZoneOffline { zone: u32 },
    #[error("opening zone {zone} would exceed the open-zone limit ({max_open}); close or finish a zone first")]
    TooManyOpenZones { zone: u32, max_open: u32 },
    #[error("activating zone {zone} would exceed the active-zone limit ({max_active}); finish or reset an active zone first")]
    TooManyActiveZones { zone: u32, max_active: u32 },
    #[error("{what} of {value} B is not a multiple of {alignment} B")]
    Misaligned { what: &'static str, value: u64, alignment: u64 },
    #[error("zero-length {what}")]
    Empty { what: &'static str },
    #[error("append of {len_bytes} B exceeds the zone append limit of {max_bytes} B; split it")]
    AppendTooLarge { len_bytes: u64, max_bytes: u64 },
    #[error("metadata buffer of {got} B does not match the {expected} B the data needs ({metadata_bytes} B per LBA)")]
    MetadataLength { expected: u64, got: u64, metadata_bytes: u32 },
    #[error("read of LBAs {lba}..{end} crosses the end of zone {zone}'s capacity")]
    CrossesZoneCapacity { zone: u32, lba: u64, end: u64 },
    #[error("cannot {op} zone {zone} in condition {condition}")]
    InvalidTransition { zone: u32, op: ZoneOp, condition: ZoneCondition },
    #[error("device I/O failed during {op}: {source}")]
    Io { op: &'static str, source: Arc<std::io::Error> },
    #[error(
        "the storage holding the device is full ({op} failed with ENOSPC): a device file is sparse and grows \
         as its zones fill, so its file system needs room for the data written; free space there, or create \
         a smaller device (`znswap device create --zones N`)"
    )]
    StorageFull { op: &'static str },
    #[error("injected {op} failure on zone {zone}")]
    Injected { op: &'static str, zone: u32 },
}

impl ZoneError {
    pub(crate) fn io(op: &'static str, source: std::io::Error) -> ZoneError {
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return ZoneError::StorageFull { op };
        }
        ZoneError::Io { op, source: Arc::new(source) }
    }

    /// True for device failures (the command was valid), false for rule violations.
    pub fn is_device_failure(&self) -> bool {
        matches!(
            self,
            ZoneError::Io { .. }
                | ZoneError::StorageFull { .. }
                | ZoneError::Injected { .. }
                | ZoneError::ZoneOffline { .. }
        )
    }
}

pub type Result<T, E = ZoneError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_system_is_named_with_its_fix() {
        let full = ZoneError::io("append", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(full, ZoneError::StorageFull { op: "append" }));
        assert!(full.is_device_failure());
        let text = full.to_string();
        assert!(text.contains("full") && text.contains("--zones"), "{text}");
        let other = ZoneError::io("append", std::io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(other, ZoneError::Io { op: "append", .. }));
    }
}
