//! A ZNS SSD shaped like the WD ZN540: the zone rules come from
//! [`znswap_zoned::ZoneTable`], the time from the shared NAND model.
//!
//! Placement: program unit `u` of zone `z` lives on die `(z + u) % dies`, so every zone is
//! striped over all dies and the zones open at once start on different dies. A zone holds
//! one erase block on each die it touches (the ZN540's 1077 MiB capacity is one superblock
//! across its dies), so a reset erases one block on each die the zone has written.
//! Data enters the write buffer; each full program unit is programmed at once, a partial
//! one waits in the buffer for more appends while its zone is open (a finish or close
//! programs it padded). The device never copies data: media pages written always equal
//! host pages written.

use serde::{Deserialize, Serialize};
use znswap_core::PAGE_BYTES;
use znswap_zoned::{Geometry, GeometryError, ZoneError, ZoneInfo, ZoneOp, ZoneTable};

use crate::buffer::WriteBuffer;
use crate::counters::MediaCounters;
use crate::nand::{Nand, NandConfig, NandConfigError};
use crate::Ns;

/// Zone capacity / zone size of the ZN540 (1077 MiB of 2 GiB).
pub const ZN540_CAPACITY_RATIO: f64 = 1077.0 / 2048.0;

/// Shape of a ZNS SSD. `Default` is a 1 TB ZN540: 904 zones of 2 GiB with 1077 MiB
/// capacity, 14 open / 14 active zones, 64 B metadata per 4 KiB LBA.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZnsConfig {
    pub zone_count: u32,
    pub zone_size_bytes: u64,
    pub zone_capacity_bytes: u64,
    pub max_open_zones: u32,
    pub max_active_zones: u32,
    /// Per-LBA metadata (0, 8, 16 or 64 B).
    pub metadata_bytes: u32,
    /// Largest single zone append.
    pub zone_append_max_bytes: u32,
    pub nand: NandConfig,
}

impl Default for ZnsConfig {
    fn default() -> ZnsConfig {
        ZnsConfig {
            zone_count: 904,
            zone_size_bytes: 2 << 30,
            zone_capacity_bytes: 1077 << 20,
            max_open_zones: 14,
            max_active_zones: 14,
            metadata_bytes: 64,
            zone_append_max_bytes: 1 << 20,
            nand: NandConfig::default(),
        }
    }
}

impl ZnsConfig {
    /// A ZN540 scaled down to `zone_count` zones of `zone_capacity_bytes` each, keeping
    /// the ZN540's capacity / size ratio (the size is rounded up to whole LBAs).
    pub fn scaled(zone_count: u32, zone_capacity_bytes: u64) -> ZnsConfig {
        let size = (zone_capacity_bytes as f64 / ZN540_CAPACITY_RATIO).ceil() as u64;
        let size = size.div_ceil(PAGE_BYTES as u64) * PAGE_BYTES as u64;
        ZnsConfig { zone_count, zone_size_bytes: size, zone_capacity_bytes, ..ZnsConfig::default() }
    }

    /// The zoned geometry the device reports; the error names the bad field and the fix.
    pub fn geometry(&self) -> Result<Geometry, ZnsConfigError> {
        self.nand.validate()?;
        let mut geometry = Geometry::from_bytes(
            PAGE_BYTES as u32,
            self.metadata_bytes,
            self.zone_count,
            self.zone_size_bytes,
            self.zone_capacity_bytes,
            self.max_open_zones,
            self.max_active_zones,
            PAGE_BYTES as u32,
        )
        .map_err(ZnsConfigError::Geometry)?;
        if self.zone_append_max_bytes < PAGE_BYTES as u32 || self.zone_append_max_bytes % PAGE_BYTES as u32 != 0 {
            return Err(ZnsConfigError::AppendLimit { zone_append_max_bytes: self.zone_append_max_bytes });
        }
        geometry.zone_append_max_bytes = self.zone_append_max_bytes;
        geometry.validate().map_err(ZnsConfigError::Geometry)?;
        let partial_units = geometry.open_limit().min(self.zone_count) as u64 + 2;
        if self.nand.write_buffer_bytes < partial_units * self.nand.program_unit_bytes as u64 {
            return Err(ZnsConfigError::WriteBuffer {
                write_buffer_bytes: self.nand.write_buffer_bytes,
                open_zones: geometry.open_limit(),
                needed_bytes: partial_units * self.nand.program_unit_bytes as u64,
            });
        }
        Ok(geometry)
    }
}

/// A ZNS SSD configuration that cannot work: each names the problem and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZnsConfigError {
    #[error(transparent)]
    Nand(#[from] NandConfigError),
    #[error("zns: the zoned geometry is invalid")]
    Geometry(#[source] GeometryError),
    #[error("zns: zone_append_max_bytes = {zone_append_max_bytes} must be a non-zero multiple of {page_bytes} B", page_bytes = PAGE_BYTES)]
    AppendLimit { zone_append_max_bytes: u32 },
    #[error(
        "zns: write_buffer_bytes = {write_buffer_bytes} cannot hold a partial program unit for each of {open_zones} \
         open zones; make it at least {needed_bytes} B or lower max_open_zones"
    )]
    WriteBuffer { write_buffer_bytes: u64, open_zones: u32, needed_bytes: u64 },
}

/// What the media holds for one zone since its last reset.
#[derive(Clone, Copy, Debug, Default)]
struct ZoneMedia {
    /// LBAs of data accepted (excludes what a finish skipped).
    written_lbas: u64,
    /// LBAs whose program is scheduled; the rest of `written_lbas` waits in the buffer.
    flushed_lbas: u64,
    /// When the last program scheduled into this zone ends.
    programmed_at: Ns,
    /// When the erase of the last reset ends: programs may not start earlier.
    erased_at: Ns,
}

/// A ZN540-like ZNS SSD in virtual time.
#[derive(Clone, Debug)]
pub struct ZnsSsd {
    geometry: Geometry,
    table: ZoneTable,
    nand: Nand,
    buffer: WriteBuffer,
    zones: Vec<ZoneMedia>,
    counters: MediaCounters,
    unit_lbas: u64,
    /// Latest `now` seen: time never runs backwards inside the device.
    clock: Ns,
}

impl ZnsSsd {
    pub fn new(config: ZnsConfig) -> Result<ZnsSsd, ZnsConfigError> {
        let geometry = config.geometry()?;
        Ok(ZnsSsd {
            geometry,
            table: ZoneTable::new(geometry),
            nand: Nand::new(config.nand),
            buffer: WriteBuffer::new(config.nand.write_buffer_bytes),
            zones: vec![ZoneMedia::default(); config.zone_count as usize],
            counters: MediaCounters::default(),
            unit_lbas: config.nand.program_unit_pages() as u64,
            clock: 0,
        })
    }

    /// 4096 B LBAs with the configured metadata, zone size, capacity and limits.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn counters(&self) -> MediaCounters {
        self.counters
    }

    /// Die time used so far, summed over all dies: divided by dies × elapsed time, the
    /// NAND's utilization.
    pub fn die_busy_ns(&self) -> Ns {
        self.nand.die_busy_ns()
    }

    pub fn zone_info(&self, zone: u32) -> ZoneInfo {
        self.table.info(zone)
    }

    /// The zone state machine (conditions, write pointers, open/active counts).
    pub fn zone_table(&self) -> &ZoneTable {
        &self.table
    }

    pub fn nand_config(&self) -> NandConfig {
        self.nand.config
    }

    /// Zone append of `pages` LBAs: returns the first LBA written and the completion time
    /// (when the data is in the write buffer).
    pub fn append(&mut self, now: Ns, zone: u32, pages: u32) -> Result<(u64, Ns), ZoneError> {
        let now = self.advance(now);
        let zone = self.table.check_zone(zone as u64)?;
        self.check_length(pages, true)?;
        let placement = self.table.write(zone, None, pages as u64)?;
        if let Some(closed) = placement.implicitly_closed {
            self.flush_partial(now, closed);
        }
        let done = self.accept(now, zone, pages as u64);
        Ok((self.geometry.zone_start_lba(zone) + placement.offset_lbas, done))
    }

    /// Regular write at the write pointer `lba`.
    pub fn write(&mut self, now: Ns, lba: u64, pages: u32) -> Result<Ns, ZoneError> {
        let now = self.advance(now);
        self.check_length(pages, false)?;
        let zone = self.zone_of(lba)?;
        let offset = lba - self.geometry.zone_start_lba(zone);
        let placement = self.table.write(zone, Some(offset), pages as u64)?;
        if let Some(closed) = placement.implicitly_closed {
            self.flush_partial(now, closed);
        }
        Ok(self.accept(now, zone, pages as u64))
    }

    /// Reads `pages` LBAs from `lba` (within one zone's capacity). Unwritten LBAs read as
    /// zeroes without touching the media; LBAs still in the write buffer come from there.
    pub fn read(&mut self, now: Ns, lba: u64, pages: u32) -> Result<Ns, ZoneError> {
        let now = self.advance(now);
        self.check_length(pages, false)?;
        let zone = self.zone_of(lba)?;
        let offset = lba - self.geometry.zone_start_lba(zone);
        let end = offset + pages as u64;
        if end > self.geometry.zone_capacity_lbas {
            return Err(ZoneError::CrossesZoneCapacity { zone, lba, end: lba + pages as u64 });
        }
        let media = self.zones[zone as usize];
        let mut done = now;
        let mut cursor = offset;
        // Only the part below `flushed_lbas` is on NAND; one array read per program unit.
        while cursor < end.min(media.flushed_lbas) {
            let unit = cursor / self.unit_lbas;
            let unit_end = ((unit + 1) * self.unit_lbas).min(end).min(media.flushed_lbas);
            let die = self.die_of(zone, unit);
            done = done.max(self.nand.read(now, die, (unit_end - cursor) as u32));
            cursor = unit_end;
        }
        self.counters.pages_read += pages as u64;
        Ok(done + self.nand.config.t_command_ns)
    }

    /// Resets `zone`: erases one block on every die the zone wrote; buffered data that
    /// was never programmed is dropped. Completes when the last erase ends.
    pub fn reset(&mut self, now: Ns, zone: u32) -> Result<Ns, ZoneError> {
        let now = self.advance(now);
        let zone = self.table.check_zone(zone as u64)?;
        self.table.zone_op(zone, ZoneOp::Reset)?;
        let media = self.zones[zone as usize];
        self.buffer.discard((media.written_lbas - media.flushed_lbas) * PAGE_BYTES as u64);
        let units = media.flushed_lbas.div_ceil(self.unit_lbas);
        let dies = units.min(self.nand.die_count() as u64) as u32;
        // After every program already queued for this zone's blocks.
        let earliest = now.max(media.programmed_at);
        let mut done = now;
        let block_bytes = self.block_bytes_per_die();
        for unit in 0..dies as u64 {
            let die = self.die_of(zone, unit);
            done = done.max(self.nand.erase(earliest, die, block_bytes));
        }
        self.counters.erases += dies as u64;
        self.zones[zone as usize] = ZoneMedia { erased_at: done.max(media.erased_at), ..ZoneMedia::default() };
        Ok(done + self.nand.config.t_command_ns)
    }

    /// Finishes `zone` (it becomes Full); a partial program unit in the buffer is
    /// programmed (padded) first. Completes when that program ends.
    pub fn finish(&mut self, now: Ns, zone: u32) -> Result<Ns, ZoneError> {
        let now = self.advance(now);
        let zone = self.table.check_zone(zone as u64)?;
        self.table.zone_op(zone, ZoneOp::Finish)?;
        let done = self.flush_partial(now, zone);
        Ok(done + self.nand.config.t_command_ns)
    }

    /// Explicitly opens `zone` (a controller operation, no media time; a zone closed
    /// implicitly to make room has its partial unit programmed).
    pub fn open(&mut self, now: Ns, zone: u32) -> Result<Ns, ZoneError> {
        let now = self.advance(now);
        let zone = self.table.check_zone(zone as u64)?;
        if let Some(closed) = self.table.zone_op(zone, ZoneOp::Open)? {
            self.flush_partial(now, closed);
        }
        Ok(now + self.nand.config.t_command_ns)
    }

    /// Closes `zone`. Its partial program unit is programmed (padded), so only open
    /// zones ever hold data in the write buffer; the command does not wait for it.
    pub fn close(&mut self, now: Ns, zone: u32) -> Result<Ns, ZoneError> {
        let now = self.advance(now);
        let zone = self.table.check_zone(zone as u64)?;
        self.table.zone_op(zone, ZoneOp::Close)?;
        self.flush_partial(now, zone);
        Ok(now + self.nand.config.t_command_ns)
    }

    /// Bytes of a zone's block on one die: its capacity spread over all dies.
    pub fn block_bytes_per_die(&self) -> u64 {
        let units = self.geometry.zone_capacity_lbas.div_ceil(self.unit_lbas);
        units.div_ceil(self.nand.die_count() as u64) * self.unit_lbas * PAGE_BYTES as u64
    }

    /// Time a reset takes on each die a zone wrote (tBERS scaled to the block size).
    pub fn reset_erase_ns(&self) -> Ns {
        self.nand.config.erase_ns(self.block_bytes_per_die())
    }

    fn advance(&mut self, now: Ns) -> Ns {
        self.clock = self.clock.max(now);
        self.nand.prune(self.clock);
        self.clock
    }

    fn check_length(&self, pages: u32, append: bool) -> Result<(), ZoneError> {
        if pages == 0 {
            return Err(ZoneError::Empty { what: if append { "zone append" } else { "command" } });
        }
        let bytes = pages as u64 * PAGE_BYTES as u64;
        if append && bytes > self.geometry.zone_append_max_bytes as u64 {
            return Err(ZoneError::AppendTooLarge {
                len_bytes: bytes,
                max_bytes: self.geometry.zone_append_max_bytes as u64,
            });
        }
        Ok(())
    }

    fn zone_of(&self, lba: u64) -> Result<u32, ZoneError> {
        self.geometry.zone_of(lba).ok_or(ZoneError::LbaOutOfRange { lba, total_lbas: self.geometry.total_lbas() })
    }

    fn die_of(&self, zone: u32, unit: u64) -> u32 {
        ((zone as u64 + unit) % self.nand.die_count() as u64) as u32
    }

    /// Takes `pages` LBAs of data for `zone` into the buffer and programs every program
    /// unit they complete. Returns when the last byte is in the buffer.
    fn accept(&mut self, now: Ns, zone: u32, pages: u64) -> Ns {
        self.counters.host_pages_written += pages;
        self.counters.media_pages_written += pages;
        let mut remaining = pages;
        let mut in_buffer = now;
        while remaining > 0 {
            let media = self.zones[zone as usize];
            let room_in_unit = self.unit_lbas - media.written_lbas % self.unit_lbas;
            let chunk = remaining.min(room_in_unit);
            in_buffer = self.buffer.admit(now, chunk * PAGE_BYTES as u64);
            self.zones[zone as usize].written_lbas += chunk;
            remaining -= chunk;
            if chunk == room_in_unit {
                self.program_unit(in_buffer, zone);
            }
        }
        in_buffer + self.nand.config.t_command_ns
    }

    /// Programs the buffered tail of `zone` (at most one program unit) from `ready` on.
    fn program_unit(&mut self, ready: Ns, zone: u32) -> Ns {
        let media = self.zones[zone as usize];
        let pages = media.written_lbas - media.flushed_lbas;
        debug_assert!(pages > 0 && pages <= self.unit_lbas);
        let die = self.die_of(zone, media.flushed_lbas / self.unit_lbas);
        let end = self.nand.program(ready, media.erased_at, die, pages as u32);
        self.buffer.release_at(end, pages * PAGE_BYTES as u64);
        let media = &mut self.zones[zone as usize];
        media.flushed_lbas = media.written_lbas;
        media.programmed_at = media.programmed_at.max(end);
        end
    }

    fn flush_partial(&mut self, now: Ns, zone: u32) -> Ns {
        let media = self.zones[zone as usize];
        if media.written_lbas == media.flushed_lbas {
            return now;
        }
        self.program_unit(now, zone)
    }
}
