//! The model zoned device: per slot, the page's version number (not its bytes) and its
//! metadata; chunk footers kept whole. Zone append places data at the write pointer when
//! the append completes, as a real device does. It checks the engine's side of the
//! contract (capacity, granularity, reads below the write pointer) and reports breaches.

/// Version stored in a footer page's data slot.
pub const FOOTER_VERSION: u64 = u64::MAX - 1;
/// Version of a slot that was never written (or was reset).
pub const UNWRITTEN: u64 = u64::MAX;

pub struct ZoneModel {
    pub write_pointer: u32,
    pub offline: bool,
    pub resets: u32,
    pub data: Vec<u64>,
    metadata: Vec<u8>,
    footers: Vec<Option<Box<[u8]>>>,
}

pub struct Device {
    /// Zones written but not full (open or closed): must stay within the limit.
    pub active_zones: u32,
    pub active_zones_max: u32,
    pub capacity: u32,
    pub metadata_bytes: u32,
    pub granularity: u32,
    pub zones: Vec<ZoneModel>,
}

/// A breach of the device contract by the engine.
#[derive(Debug)]
pub struct ContractBreach(pub String);

impl Device {
    pub fn new(zone_count: u32, capacity: u32, metadata_bytes: u32, granularity: u32) -> Device {
        let zones = (0..zone_count)
            .map(|_| ZoneModel {
                write_pointer: 0,
                offline: false,
                resets: 0,
                data: vec![UNWRITTEN; capacity as usize],
                metadata: vec![0; (capacity * metadata_bytes) as usize],
                footers: (0..capacity).map(|_| None).collect(),
            })
            .collect();
        Device { active_zones: 0, active_zones_max: 0, capacity, metadata_bytes, granularity, zones }
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
        let metadata_bytes = self.metadata_bytes as usize;
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
        for (index, version) in versions.iter().enumerate() {
            let slot = first as usize + index;
            model.data[slot] = *version;
            if let Some(records) = page_records {
                let area = &mut model.metadata[slot * metadata_bytes..(slot + 1) * metadata_bytes];
                area.fill(0);
                area[..16].copy_from_slice(&records[index * 16..(index + 1) * 16]);
            }
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

    pub fn metadata(&self, zone: u32, slot: u32) -> &[u8] {
        let bytes = self.metadata_bytes as usize;
        &self.zones[zone as usize].metadata[slot as usize * bytes..(slot as usize + 1) * bytes]
    }

    pub fn footer(&self, zone: u32, slot: u32) -> Option<&[u8]> {
        self.zones[zone as usize].footers[slot as usize].as_deref()
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
        model.data.fill(UNWRITTEN);
        model.metadata.fill(0);
        for footer in &mut model.footers {
            *footer = None;
        }
    }

    pub fn finish(&mut self, zone: u32) {
        self.deactivate(zone);
        self.zones[zone as usize].write_pointer = self.capacity;
    }
}
