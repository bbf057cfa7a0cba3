//! Command checks every backend applies before a command reaches storage, so the same
//! mistake gets the same typed error on every device (and changes nothing).

use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;

/// A data buffer must be non-empty whole multiples of `granularity`; returns its LBAs.
pub(crate) fn check_data(geometry: &Geometry, what: &'static str, len: usize, granularity: u64) -> Result<u64> {
    if len == 0 {
        return Err(ZoneError::Empty { what });
    }
    let len = len as u64;
    if len % granularity != 0 {
        return Err(ZoneError::Misaligned { what, value: len, alignment: granularity });
    }
    Ok(len / geometry.lba_bytes as u64)
}

/// A metadata buffer, when given, holds exactly `metadata_bytes` per LBA (a device
/// without metadata takes only an empty one).
pub(crate) fn check_metadata(geometry: &Geometry, got: Option<usize>, len_lbas: u64) -> Result<()> {
    let metadata_bytes = geometry.metadata_bytes;
    let expected = len_lbas * metadata_bytes as u64;
    match got {
        None => Ok(()),
        Some(0) if metadata_bytes == 0 => Ok(()),
        Some(got) if got as u64 == expected => Ok(()),
        Some(got) => Err(ZoneError::MetadataLength { expected, got: got as u64, metadata_bytes }),
    }
}

pub(crate) fn check_append_size(geometry: &Geometry, len: usize) -> Result<()> {
    let max_bytes = geometry.zone_append_max_bytes as u64;
    if len as u64 > max_bytes {
        return Err(ZoneError::AppendTooLarge { len_bytes: len as u64, max_bytes });
    }
    Ok(())
}

/// The zone holding `lba` and the LBA's offset in it.
pub(crate) fn lba_zone(geometry: &Geometry, lba: u64) -> Result<(u32, u64)> {
    let zone = geometry.zone_of(lba).ok_or(ZoneError::LbaOutOfRange { lba, total_lbas: geometry.total_lbas() })?;
    Ok((zone, lba - geometry.zone_start_lba(zone)))
}

/// Reads stay inside one zone's capacity.
pub(crate) fn check_read_range(
    geometry: &Geometry,
    zone: u32,
    lba: u64,
    offset_lbas: u64,
    len_lbas: u64,
) -> Result<()> {
    if offset_lbas + len_lbas > geometry.zone_capacity_lbas {
        return Err(ZoneError::CrossesZoneCapacity { zone, lba, end: lba + len_lbas });
    }
    Ok(())
}
