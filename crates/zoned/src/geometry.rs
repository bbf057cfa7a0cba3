//! Device geometry: what a ZNS namespace reports about its shape and limits.
//!
//! Names carry their unit last (`zone_size_lbas`, `write_granularity_bytes`), so a
//! reader never has to guess whether a number counts bytes, LBAs or zones.

use serde::{Deserialize, Serialize};

/// Logical block sizes a ZNS namespace may be formatted with.
pub const LBA_BYTES_ALLOWED: [u32; 2] = [512, 4096];
/// Per-LBA metadata sizes we support (NVMe LBA formats with separate metadata).
pub const METADATA_BYTES_ALLOWED: [u32; 4] = [0, 8, 16, 64];
/// Upper bound of the zone append size limit when the caller does not give one.
pub const ZONE_APPEND_MAX_BYTES_DEFAULT: u64 = 1 << 20;

/// The shape and limits of a zoned device. All zones share one size and one capacity
/// (as in NVMe ZNS); capacity may be smaller than size, and neither needs to be a power
/// of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Logical block size: 512 or 4096.
    pub lba_bytes: u32,
    /// Per-LBA metadata carried beside the data (0 when the format has none).
    pub metadata_bytes: u32,
    pub zone_count: u32,
    /// Distance between zone starts, in LBAs.
    pub zone_size_lbas: u64,
    /// Writable LBAs in each zone (<= zone size).
    pub zone_capacity_lbas: u64,
    /// Zones that may be open (implicitly or explicitly) at once; 0 means no limit.
    pub max_open_zones: u32,
    /// Zones that may be open or closed (active) at once; 0 means no limit.
    pub max_active_zones: u32,
    /// Every write and append must be a multiple of this, and so every write pointer is.
    pub write_granularity_bytes: u32,
    /// Largest single zone append.
    pub zone_append_max_bytes: u32,
}

/// A geometry field that is out of range, with the values it may take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid geometry: {field} = {value}: {allowed}")]
pub struct GeometryError {
    /// The field, named as the CLI flag names it.
    pub field: &'static str,
    pub value: String,
    /// What the field may be, phrased as a fix.
    pub allowed: String,
}

fn invalid(field: &'static str, value: impl ToString, allowed: impl Into<String>) -> GeometryError {
    GeometryError { field, value: value.to_string(), allowed: allowed.into() }
}

impl Geometry {
    /// A geometry from byte sizes, with the zone append limit defaulted to the largest
    /// multiple of the write granularity not above 1 MiB and not above the zone capacity.
    /// Validated: the error names the first bad field.
    pub fn from_bytes(
        lba_bytes: u32,
        metadata_bytes: u32,
        zone_count: u32,
        zone_size_bytes: u64,
        zone_capacity_bytes: u64,
        max_open_zones: u32,
        max_active_zones: u32,
        write_granularity_bytes: u32,
    ) -> Result<Geometry, GeometryError> {
        if !LBA_BYTES_ALLOWED.contains(&lba_bytes) {
            return Err(invalid("lba-size", lba_bytes, "must be 512 or 4096"));
        }
        let lba = lba_bytes as u64;
        if zone_size_bytes == 0 || zone_size_bytes % lba != 0 {
            return Err(invalid(
                "zone-size",
                zone_size_bytes,
                format!("must be a non-zero multiple of the LBA size ({lba_bytes} B)"),
            ));
        }
        if zone_capacity_bytes == 0 || zone_capacity_bytes % lba != 0 {
            return Err(invalid(
                "zone-capacity",
                zone_capacity_bytes,
                format!("must be a non-zero multiple of the LBA size ({lba_bytes} B)"),
            ));
        }
        let granularity = write_granularity_bytes as u64;
        let append_max = if granularity == 0 {
            0
        } else {
            let limit = ZONE_APPEND_MAX_BYTES_DEFAULT.min(zone_capacity_bytes).max(granularity);
            limit - limit % granularity
        };
        let geometry = Geometry {
            lba_bytes,
            metadata_bytes,
            zone_count,
            zone_size_lbas: zone_size_bytes / lba,
            zone_capacity_lbas: zone_capacity_bytes / lba,
            max_open_zones,
            max_active_zones,
            write_granularity_bytes,
            zone_append_max_bytes: u32::try_from(append_max).unwrap_or(u32::MAX),
        };
        geometry.validate()?;
        Ok(geometry)
    }

    /// Checks every rule a ZNS namespace obeys; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), GeometryError> {
        if !LBA_BYTES_ALLOWED.contains(&self.lba_bytes) {
            return Err(invalid("lba-size", self.lba_bytes, "must be 512 or 4096"));
        }
        if !METADATA_BYTES_ALLOWED.contains(&self.metadata_bytes) {
            return Err(invalid("metadata-bytes", self.metadata_bytes, "must be one of 0, 8, 16, 64"));
        }
        if self.zone_count == 0 {
            return Err(invalid("zones", 0, "must be at least 1"));
        }
        if self.zone_size_lbas == 0 {
            return Err(invalid("zone-size", 0, "must be at least one LBA"));
        }
        // Before any size in bytes is computed (a device file's header is untrusted: a
        // huge zone size there must be an error, not an overflow).
        let device_bytes = (self.zone_count as u64)
            .checked_mul(self.zone_size_lbas)
            .and_then(|lbas| lbas.checked_mul(self.lba_bytes as u64));
        if device_bytes.is_none_or(|bytes| bytes > 1 << 63) {
            return Err(invalid("zones", self.zone_count, "the device would exceed 2^63 bytes"));
        }
        if self.zone_capacity_lbas == 0 || self.zone_capacity_lbas > self.zone_size_lbas {
            return Err(invalid(
                "zone-capacity",
                self.zone_capacity_lbas.saturating_mul(self.lba_bytes as u64),
                format!("must be at least one LBA and at most the zone size ({} B)", self.zone_size_bytes()),
            ));
        }
        let granularity = self.write_granularity_bytes;
        if granularity == 0 || granularity % self.lba_bytes != 0 {
            return Err(invalid(
                "write-granularity",
                granularity,
                format!("must be a non-zero multiple of the LBA size ({} B)", self.lba_bytes),
            ));
        }
        if self.zone_capacity_bytes() % granularity as u64 != 0 {
            return Err(invalid(
                "zone-capacity",
                self.zone_capacity_bytes(),
                format!(
                    "must be a multiple of the write granularity ({granularity} B), or the zone's tail could never be written"
                ),
            ));
        }
        let append_max = self.zone_append_max_bytes;
        if append_max < granularity || append_max % granularity != 0 {
            return Err(invalid(
                "zone-append-max",
                append_max,
                format!("must be a non-zero multiple of the write granularity ({granularity} B)"),
            ));
        }
        if self.max_open_zones > self.zone_count {
            return Err(invalid(
                "max-open",
                self.max_open_zones,
                format!("must be at most the number of zones ({}); 0 means no limit", self.zone_count),
            ));
        }
        if self.max_active_zones > self.zone_count {
            return Err(invalid(
                "max-active",
                self.max_active_zones,
                format!("must be at most the number of zones ({}); 0 means no limit", self.zone_count),
            ));
        }
        if self.max_active_zones != 0 && (self.max_open_zones == 0 || self.max_open_zones > self.max_active_zones) {
            return Err(invalid(
                "max-open",
                self.max_open_zones,
                format!("must be between 1 and max-active ({}): every open zone is also active", self.max_active_zones),
            ));
        }
        Ok(())
    }

    pub fn zone_size_bytes(&self) -> u64 {
        self.zone_size_lbas * self.lba_bytes as u64
    }

    pub fn zone_capacity_bytes(&self) -> u64 {
        self.zone_capacity_lbas * self.lba_bytes as u64
    }

    /// LBAs addressed by the namespace (zone size times zone count).
    pub fn total_lbas(&self) -> u64 {
        self.zone_size_lbas * self.zone_count as u64
    }

    /// Bytes that can actually hold data (zone capacity times zone count).
    pub fn capacity_bytes(&self) -> u64 {
        self.zone_capacity_bytes() * self.zone_count as u64
    }

    pub fn write_granularity_lbas(&self) -> u64 {
        (self.write_granularity_bytes / self.lba_bytes) as u64
    }

    pub fn zone_start_lba(&self, zone: u32) -> u64 {
        debug_assert!(zone < self.zone_count);
        zone as u64 * self.zone_size_lbas
    }

    /// The zone holding `lba`, or `None` past the end of the namespace.
    pub fn zone_of(&self, lba: u64) -> Option<u32> {
        let zone = lba / self.zone_size_lbas;
        (zone < self.zone_count as u64).then_some(zone as u32)
    }

    /// Open zones allowed, with "no limit" expressed as the zone count.
    pub fn open_limit(&self) -> u32 {
        if self.max_open_zones == 0 {
            self.zone_count
        } else {
            self.max_open_zones
        }
    }

    /// Active zones allowed, with "no limit" expressed as the zone count.
    pub fn active_limit(&self) -> u32 {
        if self.max_active_zones == 0 {
            self.zone_count
        } else {
            self.max_active_zones
        }
    }
}

/// Parses a size such as `4096`, `192K`, `64MiB`, `1.5G` (binary units: K = 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown size unit {other:?} in {text:?}: use B, K, M, G or T (binary)")),
    };
    if number.is_empty() {
        return Err(format!("size {text:?} has no number: write e.g. 64M or 4096"));
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier).ok_or_else(|| format!("size {text:?} is too large"));
    }
    let value: f64 = number.parse().map_err(|_| format!("cannot read {text:?} as a size: write e.g. 64M or 4096"))?;
    let bytes = value * multiplier as f64;
    // `u64::MAX as f64` is 2^64, one past the largest u64.
    if bytes.fract() != 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("size {text:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats bytes with the largest binary unit that divides them (or two decimals).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, unit) in UNITS {
        if bytes >= unit {
            return if bytes % unit == 0 {
                format!("{} {name}", bytes / unit)
            } else {
                format!("{:.2} {name}", bytes as f64 / unit as f64)
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Geometry {
        Geometry::from_bytes(4096, 16, 8, 1 << 20, 960 << 10, 4, 6, 4096).unwrap()
    }

    /// Found by the `device_file` fuzz target: a header's huge zone size or capacity
    /// overflowed while the error about it was being worded.
    #[test]
    fn sizes_too_large_for_bytes_are_errors_not_overflows() {
        for (zones, size, capacity) in [(1, u64::MAX / 2, u64::MAX / 2), (u32::MAX, 1 << 40, 1), (2, 1 << 52, 1 << 52)]
        {
            let geometry = Geometry { zone_count: zones, zone_size_lbas: size, zone_capacity_lbas: capacity, ..base() };
            let error = geometry.validate().expect_err("a device past 2^63 bytes");
            assert!(error.to_string().contains("2^63"), "{error}");
        }
        let capacity_past_size = Geometry { zone_size_lbas: 256, zone_capacity_lbas: u64::MAX, ..base() };
        assert!(capacity_past_size
            .validate()
            .expect_err("capacity past the size")
            .to_string()
            .contains("zone-capacity"));
        assert!(parse_size("18446744073709551616").is_err(), "2^64 bytes read as u64::MAX");
        assert!(parse_size("16777216T").is_err());
    }

    #[test]
    fn from_bytes_derives_lbas_and_append_limit() {
        let g = base();
        assert_eq!(g.zone_size_lbas, 256);
        assert_eq!(g.zone_capacity_lbas, 240);
        assert_eq!(g.zone_append_max_bytes, 960 << 10, "append limit is capped at the capacity");
        assert_eq!(g.zone_start_lba(3), 768);
        assert_eq!(g.zone_of(767), Some(2));
        assert_eq!(g.zone_of(8 * 256), None);
    }

    #[test]
    fn append_limit_is_a_multiple_of_granularity() {
        let g = Geometry::from_bytes(4096, 0, 4, 64 << 20, 48 << 20, 0, 0, 192 << 10).unwrap();
        assert_eq!(g.zone_append_max_bytes % (192 << 10), 0);
        assert!(g.zone_append_max_bytes as u64 <= ZONE_APPEND_MAX_BYTES_DEFAULT);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: [(Geometry, &str); 9] = [
            (Geometry { lba_bytes: 1024, ..base() }, "lba-size"),
            (Geometry { metadata_bytes: 7, ..base() }, "metadata-bytes"),
            (Geometry { zone_count: 0, ..base() }, "zones"),
            (Geometry { zone_capacity_lbas: 257, ..base() }, "zone-capacity"),
            (Geometry { write_granularity_bytes: 6000, ..base() }, "write-granularity"),
            (
                Geometry { write_granularity_bytes: 4096 * 7, zone_append_max_bytes: 4096 * 7, ..base() },
                "zone-capacity",
            ),
            (Geometry { zone_append_max_bytes: 100, ..base() }, "zone-append-max"),
            (Geometry { max_open_zones: 9, ..base() }, "max-open"),
            (Geometry { max_open_zones: 7, ..base() }, "max-open"),
        ];
        for (geometry, field) in cases {
            let error = geometry.validate().unwrap_err();
            assert_eq!(error.field, field, "{error}");
            assert!(!error.allowed.is_empty());
        }
    }

    #[test]
    fn sizes_parse_and_format() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("192K").unwrap(), 192 << 10);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("0.3").is_err());
        assert_eq!(format_size(62 << 20), "62 MiB");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(12), "12 B");
    }
}
