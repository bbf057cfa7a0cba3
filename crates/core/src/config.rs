//! The engine's view of the device and its tunables, validated once at start-up.
//!
//! The core does not depend on the zoned crate: the driver translates its device geometry
//! into [`Geometry`] (pages of 4 KiB, zone indexes, slot indexes) and maps slots back to
//! LBAs itself. Everything the engine allocates is sized from a validated [`Config`].

use serde::{Deserialize, Serialize};

/// Bytes in one page, which is also one swap slot: the workspace's one definition (the
/// pager, the device models, the workloads and the simulator import it). A `usize`, as
/// a page is first of all a buffer in memory.
pub const PAGE_BYTES: usize = 4096;

/// The shape of the zoned device, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub zone_count: u32,
    /// Writable 4 KiB slots per zone (the zone capacity, not the zone size).
    pub zone_capacity_pages: u32,
    /// Per-LBA metadata bytes available per page: 0, 8, 16 or 64.
    pub metadata_bytes: u32,
    /// Every append is a multiple of this many pages (1 for a 4 KiB granularity).
    pub write_granularity_pages: u32,
    /// Zones that may be open at once; 0 means no limit.
    pub max_open_zones: u32,
    /// Zones that may be active (open or closed) at once; 0 means no limit.
    pub max_active_zones: u32,
    /// Largest single zone append, in pages.
    pub zone_append_pages_max: u32,
}

/// How the reverse map (owner and page index of every slot) travels with the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordEncoding {
    /// A 16-byte record in each page's per-LBA metadata (the paper's design).
    PerPageMetadata,
    /// The last page of each chunk holds the records of the others (seed 002).
    ChunkFooter,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VictimSelection {
    /// Most invalid plus swap-cached slots (the kernel POC's choice).
    Greedy,
    /// Age-aware: (1 - u) * age / (1 + u), u = valid fraction (LFS).
    CostBenefit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SwapCacheMode {
    /// Keep swapped-in clean pages' slots while space allows; the limit adapts to WAF.
    Adaptive,
    /// Linux `vm_swap_full()`: drop the slot on swap-in once more than half is used.
    StaticHalf,
    /// Never keep a slot after swap-in.
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResetMode {
    /// FAR (seed 003): reset a fully invalid zone once its write pointer reaches a
    /// threshold that falls linearly with free space below `far_threshold`.
    Far,
    /// Reset every fully invalid zone as soon as nothing is in flight to it.
    Eager,
}

/// The most GC destination streams a config may ask for (`Config::gc_streams`).
pub const GC_STREAMS_MAX: u32 = 3;

/// Tunables. `Config::new(geometry)` picks the paper's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub geometry: Geometry,
    /// `None` picks per-page metadata when the device has >= 16 bytes of it and a 4 KiB
    /// write granularity, the chunk footer otherwise.
    pub record_encoding: Option<RecordEncoding>,
    /// Pages per chunk in footer mode when the write granularity is one page.
    pub chunk_pages_default: u32,
    /// Footer mode: a partly filled chunk is flushed (padded) after this long.
    pub chunk_flush_timeout_ns: u64,
    /// GC starts when empty zones fall under this; 0 picks max(reserve + 2, zones / 50).
    pub gc_low_watermark_zones: u32,
    /// GC stops at this many empty zones; 0 picks max(low + 2, zones / 25).
    pub gc_high_watermark_zones: u32,
    /// Empty zones swap-out may never take: they are the GC's, so GC cannot deadlock.
    /// At least 1; the same whatever `gc_streams` (the GC's first stream may take the
    /// last empty zone, the others leave it: `Engine::may_attach`).
    pub gc_reserve_zones: u32,
    /// Pages the GC moves per batch (1024 = 4 MiB of data).
    pub gc_batch_pages_max: u32,
    /// A GC read spans up to this many unoccupied slots between two it must read, so
    /// a victim full of small holes costs a few large reads instead of one read per
    /// run of valid slots (a GC read is a syscall, whose CPU cost was measured to hardly
    /// depend on its size). 0 reads only occupied slots. At most 63.
    pub gc_read_gap_pages_max: u32,
    /// GC destination streams (1 ..= `GC_STREAMS_MAX`), each an open zone of its own;
    /// the policy picks the stream of each moved page (hot/cold and lifetime: survivors
    /// split by access history). A stream that cannot open a zone without taking the
    /// last empty one sends its pages to a stream below it that has one open (else the
    /// first), so more streams need no larger reserve (nor higher watermarks).
    pub gc_streams: u32,
    /// Victims gathered together (>1: the small-zone multi-victim mode).
    pub gc_victims_max: u32,
    pub victim_selection: VictimSelection,
    pub swap_cache: SwapCacheMode,
    /// Adaptive swap cache: shrink the cache allowance when the window WAF exceeds this.
    pub swap_cache_waf_target: f64,
    pub reset_mode: ResetMode,
    /// FAR's free-space threshold T.
    pub far_threshold: f64,
    /// Swap-zones when the device reports no open/active limit.
    pub swap_zones_default: u32,
    /// A swap-zone whose open zone took no page while this many pages were queued to the
    /// others of its side (swap-outs for a user swap-zone, GC moves for a GC stream) has
    /// that zone finished before the GC next picks a victim, so its unwritten rest
    /// becomes collectable (`Engine::retire_idle_swap_zones`); 0 picks one device write
    /// (every slot), long enough that no stream in use goes idle.
    pub idle_zone_finish_pages: u64,
    /// Appends, reads and resets in flight at once (the I/O descriptor table).
    pub io_in_flight_max: u32,
    /// Largest owner id + 1.
    pub owners_max: u32,
    /// Tenants (cgroups) tracked for accounting and the tenant policy.
    pub tenants_max: u32,
}

/// A configuration that cannot work, naming the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("invalid config: {field} = {value}: {allowed}")]
    Invalid { field: &'static str, value: u64, allowed: &'static str },
}

fn invalid(field: &'static str, value: impl Into<u64>, allowed: &'static str) -> ConfigError {
    ConfigError::Invalid { field, value: value.into(), allowed }
}

impl Config {
    pub fn new(geometry: Geometry) -> Config {
        Config {
            geometry,
            record_encoding: None,
            chunk_pages_default: 16,
            chunk_flush_timeout_ns: 1_000_000,
            gc_low_watermark_zones: 0,
            gc_high_watermark_zones: 0,
            gc_reserve_zones: 2,
            gc_batch_pages_max: 1024,
            gc_read_gap_pages_max: 8,
            gc_victims_max: 1,
            gc_streams: 1,
            victim_selection: VictimSelection::Greedy,
            swap_cache: SwapCacheMode::Adaptive,
            swap_cache_waf_target: 1.5,
            reset_mode: ResetMode::Far,
            far_threshold: 0.7,
            swap_zones_default: 8,
            idle_zone_finish_pages: 0,
            io_in_flight_max: 256,
            owners_max: 1024,
            tenants_max: 64,
        }
    }

    /// Checks the config and derives every size the engine allocates from.
    pub fn derive(&self) -> Result<Derived, ConfigError> {
        let g = &self.geometry;
        if g.zone_capacity_pages == 0 || g.zone_capacity_pages >= 1 << 24 {
            return Err(invalid("zone_capacity_pages", g.zone_capacity_pages, "1 ..= 2^24 - 1"));
        }
        if ![0, 8, 16, 64].contains(&g.metadata_bytes) {
            return Err(invalid("metadata_bytes", g.metadata_bytes, "one of 0, 8, 16, 64"));
        }
        if g.write_granularity_pages == 0 || g.zone_capacity_pages % g.write_granularity_pages != 0 {
            return Err(invalid(
                "write_granularity_pages",
                g.write_granularity_pages,
                "non-zero and dividing the zone capacity",
            ));
        }
        if g.zone_append_pages_max < g.write_granularity_pages {
            return Err(invalid("zone_append_pages_max", g.zone_append_pages_max, ">= write granularity"));
        }
        let encoding = match self.record_encoding {
            Some(encoding) => encoding,
            None if g.metadata_bytes >= 16 && g.write_granularity_pages == 1 => RecordEncoding::PerPageMetadata,
            None => RecordEncoding::ChunkFooter,
        };
        if encoding == RecordEncoding::PerPageMetadata && (g.metadata_bytes < 16 || g.write_granularity_pages != 1) {
            return Err(invalid(
                "record_encoding",
                g.metadata_bytes,
                "per-page metadata needs >= 16 metadata bytes and a 4 KiB write granularity",
            ));
        }
        let chunk_pages = match encoding {
            RecordEncoding::PerPageMetadata => 1,
            RecordEncoding::ChunkFooter if g.write_granularity_pages > 1 => g.write_granularity_pages,
            RecordEncoding::ChunkFooter => self.chunk_pages_default,
        };
        if encoding == RecordEncoding::ChunkFooter
            && !(2..=crate::record::FOOTER_RECORDS_MAX as u32 + 1).contains(&chunk_pages)
        {
            return Err(invalid("chunk_pages", chunk_pages, "2 ..= 253 pages (one footer page holds 252 records)"));
        }
        if encoding == RecordEncoding::ChunkFooter && chunk_pages > g.zone_append_pages_max {
            return Err(invalid("zone_append_pages_max", g.zone_append_pages_max, ">= the chunk size"));
        }
        // Zero means "no limit"; the tighter of open and active bounds the swap-zones.
        let limit = match (g.max_open_zones, g.max_active_zones) {
            (0, 0) => self.swap_zones_default,
            (0, a) => a,
            (o, 0) => o,
            (o, a) => o.min(a),
        };
        if !(1..=GC_STREAMS_MAX).contains(&self.gc_streams) {
            return Err(invalid("gc_streams", self.gc_streams, "1 ..= 3"));
        }
        if limit < 1 + self.gc_streams {
            return Err(invalid("max_open_zones", limit, ">= 1 + gc_streams (a swap-zone plus the GC's zones)"));
        }
        let open_zones_max = limit;
        let user_open_zones_max = limit - self.gc_streams;
        if self.gc_reserve_zones == 0 {
            return Err(invalid("gc_reserve_zones", 0u32, ">= 1 (the GC needs an empty zone to move pages into)"));
        }
        let reserve = self.gc_reserve_zones;
        let low = if self.gc_low_watermark_zones == 0 {
            (reserve + 2).max(g.zone_count / 50)
        } else {
            self.gc_low_watermark_zones
        };
        let high = if self.gc_high_watermark_zones == 0 {
            (low + 2).max(g.zone_count / 25)
        } else {
            self.gc_high_watermark_zones
        };
        if low <= reserve || high < low {
            return Err(invalid("gc_low_watermark_zones", low, "> gc_reserve_zones and <= high watermark"));
        }
        if g.zone_count < high + open_zones_max + 2 {
            return Err(invalid("zone_count", g.zone_count, ">= high watermark + open zones + 2"));
        }
        if self.gc_batch_pages_max == 0 || self.gc_batch_pages_max > 1 << 20 {
            return Err(invalid("gc_batch_pages_max", self.gc_batch_pages_max, "1 ..= 2^20"));
        }
        if self.gc_read_gap_pages_max > 63 {
            return Err(invalid("gc_read_gap_pages_max", self.gc_read_gap_pages_max, "0 ..= 63"));
        }
        if self.gc_victims_max == 0 || self.gc_victims_max > 64 {
            return Err(invalid("gc_victims_max", self.gc_victims_max, "1 ..= 64"));
        }
        if self.io_in_flight_max < 8 {
            return Err(invalid("io_in_flight_max", self.io_in_flight_max, ">= 8"));
        }
        if self.owners_max == 0 || self.tenants_max == 0 || self.tenants_max > 1 << 16 {
            return Err(invalid("owners_max", self.owners_max, "owners and tenants (<= 65536) non-zero"));
        }
        let total_slots = g.zone_count as u64 * g.zone_capacity_pages as u64;
        if total_slots >= 1 << crate::owner_table::ADDRESS_BITS {
            return Err(invalid(
                "zone_count",
                g.zone_count,
                "zone_count * zone_capacity_pages < 2^36 (256 TiB of 4 KiB slots)",
            ));
        }
        // A per-page append never needs more pages than the append limit; a footer append
        // is one chunk.
        let append_pages_max = match encoding {
            RecordEncoding::PerPageMetadata => g.zone_append_pages_max.min(g.zone_capacity_pages),
            RecordEncoding::ChunkFooter => chunk_pages,
        };
        // In footer mode a GC batch is a whole number of chunks (at least one), so only a
        // victim's last batch pads its chunk: a smaller batch would pad every chunk and
        // could cost the GC more slots than it wins back.
        let gc_batch_pages = if encoding == RecordEncoding::ChunkFooter {
            let data_pages = chunk_pages - 1;
            (self.gc_batch_pages_max / data_pages * data_pages).max(data_pages)
        } else {
            self.gc_batch_pages_max
        };
        // Spanned gaps take buffer pages too: as many again as the batch, so a victim
        // with more gaps than data still fills whole batches (footer mode pads less).
        let gc_buffer_pages = if self.gc_read_gap_pages_max > 0 { 2 * gc_batch_pages } else { gc_batch_pages };
        let idle_zone_finish_pages =
            if self.idle_zone_finish_pages == 0 { total_slots } else { self.idle_zone_finish_pages };
        Ok(Derived {
            idle_zone_finish_pages,
            gc_batch_pages,
            gc_buffer_pages,
            encoding,
            chunk_pages,
            open_zones_max,
            user_open_zones_max,
            user_swap_zones: user_open_zones_max,
            gc_streams: self.gc_streams,
            gc_reserve_zones: reserve,
            gc_low_watermark_zones: low,
            gc_high_watermark_zones: high,
            append_pages_max,
            total_slots,
        })
    }
}

/// Sizes derived from a valid [`Config`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Derived {
    pub encoding: RecordEncoding,
    /// 1 in per-page mode; data pages + 1 footer page in footer mode.
    pub chunk_pages: u32,
    /// Zones open at once (swap-zones' zones plus the GC's).
    pub open_zones_max: u32,
    /// Open zones swap-out may hold; one more is the GC's.
    pub user_open_zones_max: u32,
    pub user_swap_zones: u32,
    /// GC swap-zones, numbered after the user swap-zones.
    pub gc_streams: u32,
    pub gc_reserve_zones: u32,
    pub gc_low_watermark_zones: u32,
    pub gc_high_watermark_zones: u32,
    /// Pages (data plus footer) in one Append request.
    pub append_pages_max: u32,
    /// GC batch, in pages (`gc_batch_pages_max`, rounded to whole chunks in footer
    /// mode).
    pub gc_batch_pages: u32,
    /// GC move buffer, in pages: the batch, plus as much again for the gaps a GC read
    /// spans (`gc_read_gap_pages_max` > 0).
    pub gc_buffer_pages: u32,
    pub total_slots: u64,
    /// `Config::idle_zone_finish_pages`, 0 resolved to `total_slots`.
    pub idle_zone_finish_pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn geometry() -> Geometry {
        Geometry {
            zone_count: 32,
            zone_capacity_pages: 64,
            metadata_bytes: 16,
            write_granularity_pages: 1,
            max_open_zones: 4,
            max_active_zones: 6,
            zone_append_pages_max: 32,
        }
    }

    #[test]
    fn defaults_derive() {
        let d = Config::new(geometry()).derive().unwrap();
        assert_eq!(d.encoding, RecordEncoding::PerPageMetadata);
        assert_eq!(d.open_zones_max, 4);
        assert_eq!(d.user_swap_zones, 3);
        assert_eq!(d.gc_low_watermark_zones, 4);
        assert_eq!(d.gc_high_watermark_zones, 6);
    }

    #[test]
    fn footer_for_coarse_granularity() {
        let mut g = geometry();
        g.write_granularity_pages = 48;
        g.zone_capacity_pages = 96;
        g.zone_append_pages_max = 48;
        let d = Config::new(g).derive().unwrap();
        assert_eq!(d.encoding, RecordEncoding::ChunkFooter);
        assert_eq!(d.chunk_pages, 48);
    }

    #[test]
    fn rejects_bad_fields() {
        let mut g = geometry();
        g.metadata_bytes = 12;
        assert!(Config::new(g).derive().is_err());
        let mut g = geometry();
        g.max_open_zones = 1;
        assert!(Config::new(g).derive().is_err());
        let mut g = geometry();
        g.zone_count = 8;
        assert!(Config::new(g).derive().is_err());
    }
}
