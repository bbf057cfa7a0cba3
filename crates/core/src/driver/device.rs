//! The model zoned device: per slot, the page's version number (not its bytes) and the
//! record the engine wrote with it; chunk footers kept whole. Zone append places data at
//! the write pointer when the caller runs the append, as a real device does when the
//! command executes. It checks the engine's side of the contract (capacity,
//! granularity, active zones, reads below the write pointer) and reports breaches.

use crate::record::PAGE_RECORD_BYTES;

/// Version stored in a footer page's data slot.
pub const FOOTER_PAGE_VERSION: u64 = u64::MAX - 1;
/// Version of a slot never written (or written before its zone's last reset).
pub const UNWRITTEN_VERSION: u64 = u64::MAX;

pub struct ZoneModel {
    pub write_pointer: u32,
    pub offline: bool,
    pub resets: u32,
    /// Per slot: the version written there.
    pub data: Vec<u64>,
    /// Per slot: the 16-byte record of its per-LBA metadata (per-page mode only; the
    /// rest of a slot's metadata bytes reads as zeros).
    records: Vec<u8>,
    /// Per slot: the footer page written there (footer mode only).
    footers: Vec<Option<Box<[u8]>>>,
}

pub struct ModelDevice {
    /// Zones written but not full (open or closed): must stay within the limit.
    pub active_zones: u32,
    /// 0: no limit.
    pub active_zones_max: u32,
    pub capacity: u32,
    pub metadata_bytes: u32,
    pub granularity: u32,
    pub zones: Vec<ZoneModel>,
}

/// A breach of the device contract by the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractBreach(pub String);

impl ModelDevice {
    /// A device of empty zones; `footers`: the engine writes chunk footers (else per-LBA
    /// metadata records).
    pub fn new(zone_count: u32, capacity: u32, metadata_bytes: u32, granularity: u32, footers: bool) -> ModelDevice {
        let zones = (0..zone_count)
            .map(|_| ZoneModel {
                write_pointer: 0,
                offline: false,
                resets: 0,
                data: vec![UNWRITTEN_VERSION; capacity as usize],
                records: if footers { Vec::new() } else { vec![0; capacity as usize * PAGE_RECORD_BYTES] },
                footers: if footers { (0..capacity).map(|_| None).collect() } else { Vec::new() },
            })
            .collect();
        ModelDevice { active_zones: 0, active_zones_max: 0, capacity, metadata_bytes, granularity, zones }
    }

    /// Appends pages (versions) with optional per-page records (16 bytes each) and an
    /// optional footer for the last page. Returns the first slot written.
    pub fn append(
        &mut self,
        zone: u32,
        versions: &[u64],
        page_records: Option<&[u8]>,
        footer: Option<&[u8]>,
    ) -> Result<u32, ContractBreach> {
        let capacity = self.capacity;
        let granularity = self.granularity;
        let model = &mut self.zones[zone as usize];
        let count = versions.len() as u32;
        if model.write_pointer + count > capacity {
            return Err(ContractBreach(format!(
                "append of {count} pages to zone {zone} at write pointer {} beyond capacity {capacity}",
                model.write_pointer
            )));
        }
        if count % granularity != 0 || model.write_pointer % granularity != 0 {
            return Err(ContractBreach(format!("append of {count} pages breaks the write granularity {granularity}")));
        }
        if page_records.is_some_and(|records| records.len() != versions.len() * PAGE_RECORD_BYTES) {
            return Err(ContractBreach(format!("append of {count} pages to zone {zone} without a record per page")));
        }
        let first = model.write_pointer;
        if first == 0 && count < capacity {
            if self.active_zones_max > 0 && self.active_zones + 1 > self.active_zones_max {
                return Err(ContractBreach(format!(
                    "append opens zone {zone}: {} zones already active, limit {}",
                    self.active_zones, self.active_zones_max
                )));
            }
            self.active_zones += 1;
        } else if first > 0 && first + count == capacity {
            self.active_zones -= 1;
        }
        let model = &mut self.zones[zone as usize];
        model.data[first as usize..(first + count) as usize].copy_from_slice(versions);
        if let Some(records) = page_records {
            let start = first as usize * PAGE_RECORD_BYTES;
            model.records[start..start + records.len()].copy_from_slice(records);
        }
        if let Some(footer) = footer {
            model.footers[(first + count - 1) as usize] = Some(footer.to_vec().into_boxed_slice());
        }
        model.write_pointer += count;
        Ok(first)
    }

    pub fn check_read(&self, zone: u32, slot: u32, pages: u32) -> Result<(), ContractBreach> {
        let model = &self.zones[zone as usize];
        if slot + pages > model.write_pointer {
            return Err(ContractBreach(format!(
                "read of {pages} pages at {zone}:{slot} beyond the write pointer {}",
                model.write_pointer
            )));
        }
        Ok(())
    }

    pub fn version(&self, zone: u32, slot: u32) -> u64 {
        self.zones[zone as usize].data[slot as usize]
    }

    /// Appends a slot's per-LBA metadata (`metadata_bytes`: its record, then zeros) to
    /// `out`.
    pub fn read_metadata(&self, zone: u32, slot: u32, out: &mut Vec<u8>) {
        let records = &self.zones[zone as usize].records;
        let start = out.len();
        if !records.is_empty() {
            let at = slot as usize * PAGE_RECORD_BYTES;
            out.extend_from_slice(&records[at..at + PAGE_RECORD_BYTES]);
        }
        out.resize(start + self.metadata_bytes as usize, 0);
    }

    pub fn footer(&self, zone: u32, slot: u32) -> Option<&[u8]> {
        self.zones[zone as usize].footers.get(slot as usize)?.as_deref()
    }

    fn deactivate(&mut self, zone: u32) {
        let write_pointer = self.zones[zone as usize].write_pointer;
        if write_pointer > 0 && write_pointer < self.capacity {
            self.active_zones -= 1;
        }
    }

    /// The zone is lost: it no longer counts as active.
    pub fn take_offline(&mut self, zone: u32) {
        self.deactivate(zone);
        self.zones[zone as usize].offline = true;
    }

    pub fn reset(&mut self, zone: u32) {
        self.deactivate(zone);
        let model = &mut self.zones[zone as usize];
        model.write_pointer = 0;
        model.resets += 1;
        model.data.fill(UNWRITTEN_VERSION);
        model.records.fill(0);
        for footer in &mut model.footers {
            *footer = None;
        }
    }

    pub fn finish(&mut self, zone: u32) {
        self.deactivate(zone);
        self.zones[zone as usize].write_pointer = self.capacity;
    }
}
