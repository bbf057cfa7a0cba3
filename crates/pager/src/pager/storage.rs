//! The device side of the pager: the zoned device behind its gate, where slots lie on it
//! (LBAs, the engine's records beside each page or in a footer page per chunk), sealing
//! and opening pages (`PagerConfig::encrypt`), and the GC's move buffer.
//!
//! Every device command runs inside the gate (shared), never under the state lock; a
//! fork takes the gate exclusively, so the child inherits no device lock a thread of
//! the parent held.

use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use znswap_core::{Geometry as EngineGeometry, IoError};
use znswap_pager_core::{Sealed, PAGE_BYTES};
use znswap_seal::{Seal, Sealer};
use znswap_zoned::{CompressedPool, Geometry, PoolStats, ZoneError, ZonedDevice};

use super::lock_flag::holds_state_lock;
use crate::page_buffers::PageBuffers;

/// Records the engine writes per page in per-page metadata mode.
pub(super) const RECORD_BYTES: usize = 16;

pub(super) struct Storage {
    /// The device, or the compressed pool in front of it (`PagerConfig::compressed_pool_bytes`).
    device: Arc<dyn ZonedDevice>,
    pool: Option<Arc<CompressedPool>>,
    /// Held shared by every device command, exclusively across a fork (`program.rs`).
    gate: RwLock<()>,
    lbas_per_page: u64,
    /// Per-LBA metadata bytes the device carries (0: none).
    metadata_bytes: usize,
    /// Records go in a footer page per chunk (`footer_mode`).
    footer_mode: bool,
    /// Seals pages as appends write them and opens them after reads.
    sealer: Option<Sealer>,
    /// The GC move buffer (`Buf::Gc`), owned by the engine's GC batch (`page_buffers`).
    gc_buffers: PageBuffers,
    /// The first device error, or failed open, has been shown (later ones are counted).
    error_shown: AtomicBool,
    /// Pages sealed as they were written, and pages read back that failed to open.
    pages_sealed: AtomicU64,
    pages_failed_open: AtomicU64,
}

/// The engine's view of the device, in pages.
pub(super) fn engine_geometry(geometry: &Geometry) -> EngineGeometry {
    let page = PAGE_BYTES as u64;
    EngineGeometry {
        zone_count: geometry.zone_count,
        zone_capacity_pages: (geometry.zone_capacity_bytes() / page) as u32,
        metadata_bytes: if geometry.lba_bytes as usize == PAGE_BYTES { geometry.metadata_bytes } else { 0 },
        write_granularity_pages: (geometry.write_granularity_bytes as u64).div_ceil(page) as u32,
        max_open_zones: geometry.max_open_zones,
        max_active_zones: geometry.max_active_zones,
        zone_append_pages_max: (geometry.zone_append_max_bytes as u64 / page) as u32,
    }
}

/// Whether records go in a footer page per chunk: the device cannot carry a 16-byte
/// record beside each 4 KiB page.
pub(super) fn footer_mode(geometry: &Geometry) -> bool {
    geometry.lba_bytes as usize != PAGE_BYTES || geometry.metadata_bytes < RECORD_BYTES as u32
}

fn io_error(error: &ZoneError) -> IoError {
    match error {
        ZoneError::ZoneOffline { .. } => IoError::Offline,
        _ => IoError::Device,
    }
}

impl Storage {
    /// The device, behind a compressed pool of `pool_bytes` if not 0.
    pub(super) fn new(
        device: Arc<dyn ZonedDevice>,
        sealer: Option<Sealer>,
        gc_buffer_pages: usize,
        pool_bytes: u64,
    ) -> Storage {
        let geometry = *device.geometry();
        let pool = (pool_bytes > 0).then(|| Arc::new(CompressedPool::new(device.clone(), pool_bytes)));
        let device = match &pool {
            Some(pool) => pool.clone() as Arc<dyn ZonedDevice>,
            None => device,
        };
        Storage {
            pool,
            lbas_per_page: (PAGE_BYTES / geometry.lba_bytes as usize) as u64,
            metadata_bytes: geometry.metadata_bytes as usize,
            footer_mode: footer_mode(&geometry),
            device,
            gate: RwLock::new(()),
            sealer,
            gc_buffers: PageBuffers::new(gc_buffer_pages),
            error_shown: AtomicBool::new(false),
            pages_sealed: AtomicU64::new(0),
            pages_failed_open: AtomicU64::new(0),
        }
    }

    pub(super) fn device(&self) -> &Arc<dyn ZonedDevice> {
        &self.device
    }

    /// The compressed pool's figures, if there is one.
    pub(super) fn pool_stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(|pool| pool.stats())
    }

    pub(super) fn footer_mode(&self) -> bool {
        self.footer_mode
    }

    /// Per-LBA metadata bytes the device carries (0: none).
    pub(super) fn metadata_bytes(&self) -> usize {
        self.metadata_bytes
    }

    pub(super) fn seals(&self) -> bool {
        self.sealer.is_some()
    }

    /// Pages sealed, and pages that failed to open, so far.
    pub(super) fn pages_sealed(&self) -> u64 {
        self.pages_sealed.load(Relaxed)
    }

    pub(super) fn pages_failed_open(&self) -> u64 {
        self.pages_failed_open.load(Relaxed)
    }

    fn lba(&self, zone: u32, slot: u32) -> u64 {
        self.device.geometry().zone_start_lba(zone) + slot as u64 * self.lbas_per_page
    }

    /// Reads the pages from `slot` of `zone` into `data` (and their metadata).
    pub(super) fn read_slots(
        &self,
        zone: u32,
        slot: u32,
        data: &mut [u8],
        metadata: Option<&mut [u8]>,
    ) -> Result<(), IoError> {
        let lba = self.lba(zone, slot);
        self.command(|device| device.read(lba, data, metadata)).map_err(|error| self.error(&error))
    }

    /// Appends `pieces` (with their per-LBA `metadata`) to `zone`; the slot the first
    /// landed in.
    pub(super) fn append(&self, zone: u32, pieces: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u32, IoError> {
        let zone_start = self.device.geometry().zone_start_lba(zone);
        self.command(|device| device.append_vectored(zone, pieces, metadata))
            .map(|lba| ((lba - zone_start) / self.lbas_per_page) as u32)
            .map_err(|error| self.error(&error))
    }

    pub(super) fn reset(&self, zone: u32) -> Result<(), IoError> {
        self.command(|device| device.reset(zone)).map_err(|error| self.error(&error))
    }

    pub(super) fn finish(&self, zone: u32) -> Result<(), IoError> {
        self.command(|device| device.finish(zone)).map_err(|error| self.error(&error))
    }

    /// A device command, inside the gate: a fork waits until none is running, so the
    /// child never inherits a device lock some thread of the parent held.
    fn command<T>(&self, command: impl FnOnce(&dyn ZonedDevice) -> T) -> T {
        debug_assert!(!holds_state_lock(), "a device command under the state lock");
        let _gate = self.gate.read().unwrap_or_else(|p| p.into_inner());
        command(&*self.device)
    }

    /// The gate held exclusively: no device command runs until it is let go (a fork).
    pub(super) fn close_gate(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A failed device command: the first one is shown (later ones are counted), so a
    /// device that fails for a reason the user can fix says why.
    fn error(&self, error: &ZoneError) -> IoError {
        if !self.error_shown.swap(true, Relaxed) {
            eprintln!("znswap: warning: device error (further ones are only counted): {error}");
        }
        io_error(error)
    }

    /// Seals page `page` of region `owner` in place (only with a sealer).
    pub(super) fn seal(&self, owner: u32, page: u64, bytes: &mut [u8]) -> Seal {
        let sealer = self.sealer.as_ref().expect("sealing with a sealer");
        self.pages_sealed.fetch_add(1, Relaxed);
        sealer.seal(owner, page, bytes)
    }

    /// Opens a page read for `sealed` in place; one that fails to open is a failed read
    /// (the page is lost, never delivered).
    pub(super) fn open_page(&self, page: &mut [u8], sealed: Option<&Sealed>) -> Result<(), IoError> {
        let (Some(sealer), Some(sealed)) = (&self.sealer, sealed) else { return Ok(()) };
        sealer.open(sealed.owner, sealed.page, page, &sealed.seal).map_err(|_| {
            self.pages_failed_open.fetch_add(1, Relaxed);
            if !self.error_shown.swap(true, Relaxed) {
                eprintln!(
                    "znswap: warning: page {} of region {} failed its integrity check: altered on the device; \
                     reported lost (further ones are only counted)",
                    sealed.page, sealed.owner
                );
            }
            IoError::Device
        })
    }

    /// GC buffer pages `first..first + pages`, to read into.
    ///
    /// # Safety
    /// The caller owns those pages (a GC read, until its `io_done`).
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn gc_pages_mut(&self, first: usize, pages: usize) -> &mut [u8] {
        // SAFETY: per the contract.
        unsafe { self.gc_buffers.pages_mut(first, pages) }
    }

    /// GC buffer page `page`, to append from.
    ///
    /// # Safety
    /// The engine owns it until the append completes (`io_done`); nobody writes it.
    pub(super) unsafe fn gc_page(&self, page: u64) -> &[u8] {
        // SAFETY: per the contract.
        unsafe { &self.gc_buffers.page(page)[..] }
    }
}
