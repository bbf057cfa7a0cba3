//! What the media saw: the numbers device write amplification is computed from.

use serde::{Deserialize, Serialize};

/// Page counters of one device (pages are 4 KiB, the LBA and FTL mapping unit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaCounters {
    /// Pages the host wrote (writes and zone appends).
    pub host_pages_written: u64,
    /// Pages programmed to NAND: host pages plus GC copies.
    pub media_pages_written: u64,
    /// Pages the host read.
    pub pages_read: u64,
    /// Erase-block erases (one per die per superblock or zone).
    pub erases: u64,
    /// Mapped pages a TRIM invalidated (trimming an unmapped page counts nothing).
    pub trims_pages: u64,
    /// TRIM commands received.
    pub trim_commands: u64,
    /// Valid pages the device GC copied (block SSD only; ZNS never copies).
    pub gc_pages_copied: u64,
    /// Superblocks the device GC reclaimed.
    pub gc_victims: u64,
}

impl MediaCounters {
    /// Device write amplification: media pages per host page (1.0 before any write).
    pub fn waf(&self) -> f64 {
        if self.host_pages_written == 0 {
            1.0
        } else {
            self.media_pages_written as f64 / self.host_pages_written as f64
        }
    }

    /// Counters accumulated since `earlier` (a snapshot of the same device).
    pub fn since(&self, earlier: &MediaCounters) -> MediaCounters {
        MediaCounters {
            host_pages_written: self.host_pages_written - earlier.host_pages_written,
            media_pages_written: self.media_pages_written - earlier.media_pages_written,
            pages_read: self.pages_read - earlier.pages_read,
            erases: self.erases - earlier.erases,
            trims_pages: self.trims_pages - earlier.trims_pages,
            trim_commands: self.trim_commands - earlier.trim_commands,
            gc_pages_copied: self.gc_pages_copied - earlier.gc_pages_copied,
            gc_victims: self.gc_victims - earlier.gc_victims,
        }
    }
}
