//! The I/O thread: runs the engine's appends, reads, resets and finishes on the device.

use std::io::IoSlice;

use znswap_core::{Buf, IoRequest};
use znswap_pager_core::{IoCompletion, IoPlan, IoShell, IoThread, PageSource, Sealed};

use super::shell::{CpuTime, Live, Role};
use super::*;
use crate::page_buffers::{bytes, bytes_mut, ZeroedPages, ZERO_PAGE};

/// An I/O thread's working memory, allocated once: a fresh megabyte per request cost a
/// page fault and a memset per page of it, about a third of the I/O thread's CPU on a
/// sequential swap-out.
struct IoScratch {
    /// Chunk footers to append, and reads that land in no buffer of their own;
    /// page-aligned, so O_DIRECT needs no bounce copy.
    pages: ZeroedPages,
    metadata: Vec<u8>,
}

impl IoScratch {
    fn new(append_pages_max: usize) -> IoScratch {
        IoScratch { pages: ZeroedPages::new(append_pages_max), metadata: Vec::new() }
    }

    /// Ready for an I/O of `pages` pages (larger ones grow it, once).
    fn prepare(&mut self, pages: usize) {
        if self.pages.len() < pages {
            self.pages = ZeroedPages::new(pages);
        }
        self.metadata.clear();
    }
}

/// The I/O thread's part of its [`Live`] shell.
pub(super) struct IoRole {
    scratch: IoScratch,
}

impl Role for IoRole {}

impl IoShell for Live<'_, IoRole> {
    fn run_request(&mut self, plan: &mut IoPlan, records: &mut Vec<u8>) -> IoCompletion {
        let shared = self.shared;
        let scratch = &mut self.role.scratch;
        match plan.request() {
            IoRequest::Append { zone, pages, .. } => shared.append(plan, zone, pages as usize, records, scratch),
            IoRequest::Read { zone, slot, pages, buf, with_metadata, .. } => {
                let pages = pages as usize;
                scratch.prepare(pages);
                let metadata = if with_metadata && shared.metadata_bytes > 0 {
                    scratch.metadata.resize(pages * shared.metadata_bytes, 0);
                    Some(scratch.metadata.as_mut_slice())
                } else {
                    None
                };
                let result = match buf {
                    Buf::Gc(first) => {
                        // SAFETY: this read owns its GC buffer pages until `io_done`.
                        let data = unsafe { shared.gc_buffers.pages_mut(first as usize, pages) };
                        shared.read_slots(zone, slot, data, metadata)
                    }
                    Buf::Footer | Buf::Page(_) | Buf::Zero => {
                        shared.read_slots(zone, slot, bytes_mut(&mut scratch.pages[..pages]), metadata)
                    }
                };
                records.clear();
                match buf {
                    Buf::Gc(_) => records.extend_from_slice(&scratch.metadata),
                    Buf::Footer => records.extend_from_slice(bytes(&scratch.pages[..1])),
                    Buf::Page(_) | Buf::Zero => {}
                }
                IoCompletion::Read(result)
            }
            IoRequest::Reset { zone, .. } => IoCompletion::Reset(
                shared.with_device(|device| device.reset(zone)).map_err(|e| shared.device_error(&e)),
            ),
            IoRequest::Finish { zone, .. } => IoCompletion::Finish(
                shared.with_device(|device| device.finish(zone)).map_err(|e| shared.device_error(&e)),
            ),
        }
    }
}

impl Shared {
    /// Runs the engine's I/O until none is queued, then sleeps until an eviction queues
    /// more or the engine's clock needs a tick (the GC and the swap-zone flush run on
    /// ticks). Its steps are the core's (`znswap_pager_core::IoThread`).
    pub(super) fn io_loop(&self) {
        let (mut io, scratch) = {
            let state = self.lock();
            (IoThread::new(&state), IoScratch::new(state.append_pages_max()))
        };
        let mut shell = Live::new(self, IoRole { scratch });
        let mut cpu = CpuTime::new(&self.counters.io_cpu_ns);
        let mut request_cpu_started = 0;
        while !(io.at_rest() && self.stop.load(Relaxed)) {
            let idle = io.at_rest();
            let next = io.step(&mut shell);
            match (idle, io.at_rest()) {
                (true, false) => request_cpu_started = thread_cpu_ns(),
                (false, true) if io.plan().is_gc() => {
                    self.counters.gc_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(request_cpu_started), Relaxed);
                }
                _ => {}
            }
            shell.carry_out(next, &mut cpu, &self.counters.io_idle_ns);
        }
        debug_assert!(shell.holds_nothing());
        cpu.charge();
    }

    /// One append: its pages go to the device from where they are, in one `pwritev`,
    /// outside the lock, with `records` (the engine's, taken under the lock) as per-LBA
    /// metadata or in the footer page.
    fn append(
        &self,
        plan: &mut IoPlan,
        zone: u32,
        pages: usize,
        records: &[u8],
        scratch: &mut IoScratch,
    ) -> IoCompletion {
        scratch.prepare(pages);
        if let Some(key) = self.digest_key {
            self.digest_victims(key, plan);
        }
        let victims_copied = self.sealer.is_some() || !self.spaces.is_own();
        if victims_copied {
            self.copy_victims(plan, scratch);
        }
        if let Some(sealer) = &self.sealer {
            self.seal_victims(sealer, plan, scratch);
        }
        if self.footer_mode {
            if let Some(index) = plan.sources().iter().position(|source| *source == PageSource::Footer) {
                scratch.pages[index].0.copy_from_slice(records);
            }
        } else if self.metadata_bytes > 0 {
            for index in 0..pages {
                let record = &records[index * RECORD_BYTES..(index + 1) * RECORD_BYTES];
                scratch.metadata.extend_from_slice(record);
                scratch.metadata.resize(scratch.metadata.len() + self.metadata_bytes - RECORD_BYTES, 0);
            }
        }
        // One vector per append (a few KiB; the append is 4 KiB a page, so this is not
        // where time goes).
        let pieces: Vec<IoSlice<'_>> = plan
            .sources()
            .iter()
            .enumerate()
            .map(|(index, source)| {
                IoSlice::new(match *source {
                    // In the scratch page (`copy_victims`), sealed there or not.
                    PageSource::Region { .. } if victims_copied => &scratch.pages[index].0,
                    // SAFETY: the page's region was live under the lock and stays mapped
                    // while `mappings` is held (the I/O thread holds it from the request
                    // to here). A write to the page meanwhile races with the device
                    // reading it, but dirties the page first (write-protect fault), which
                    // aborts this swap-out (Appendix A): those bytes are never read back.
                    PageSource::Region { address } => unsafe {
                        std::slice::from_raw_parts(address as *const u8, PAGE_BYTES)
                    },
                    // SAFETY: the engine owns these pages until this append completes
                    // (`io_done`); nobody writes them.
                    PageSource::Gc { page } => unsafe { &self.gc_buffers.page(page as u64)[..] },
                    PageSource::Footer => &scratch.pages[index].0,
                    PageSource::Zero => &ZERO_PAGE.0,
                })
            })
            .collect();
        let metadata = (!scratch.metadata.is_empty()).then_some(scratch.metadata.as_slice());
        let appending = Instant::now();
        let result = self
            .with_device(|device| device.append_vectored(zone, &pieces, metadata))
            .map(|lba| ((lba - self.device.geometry().zone_start_lba(zone)) / self.lbas_per_page) as u32)
            .map_err(|e| self.device_error(&e));
        drop(pieces);
        if !plan.is_gc() {
            self.counters.evictor_append_ns.fetch_add(appending.elapsed().as_nanos() as u64, Relaxed);
        }
        IoCompletion::Append(result)
    }

    /// Each page's digest into the plan (asynchronous write protection), of its bytes
    /// before any sealing: the core keeps it beside the slot.
    fn digest_victims(&self, key: u64, plan: &mut IoPlan) {
        debug_assert!(!holds_state_lock(), "region memory read under the state lock");
        for index in 0..plan.sources().len() {
            let digest = match plan.sources()[index] {
                // SAFETY: as for the append below; with asynchronous write protection a
                // victim is written out only from its shadow page, which the program
                // cannot reach, so the bytes digested are the bytes written.
                PageSource::Region { address } => crate::pager::page_digest(key, unsafe {
                    std::slice::from_raw_parts(address as *const u8, PAGE_BYTES)
                }),
                _ => 0,
            };
            plan.digests_mut().push(digest);
        }
    }

    /// Copies each victim of the append into its scratch page, for an append that
    /// cannot take it in place: to be sealed there, or from the served process's memory
    /// (`Pager::serve_tenant`).
    fn copy_victims(&self, plan: &IoPlan, scratch: &mut IoScratch) {
        debug_assert!(!holds_state_lock(), "region memory read under the state lock");
        for (index, source) in plan.sources().iter().enumerate() {
            let PageSource::Region { address } = *source else { continue };
            let page = &mut scratch.pages[index].0;
            if !self.spaces.is_own() {
                match self.spaces.at(address) {
                    Some((space, target)) => space.served.as_ref().expect("a served space").read_page(
                        target,
                        page,
                        &self.counters.served_process_gone,
                    ),
                    // Let go meanwhile: nobody will read it back.
                    None => page.fill(0),
                }
                continue;
            }
            let words = address as *const u64;
            for (word, chunk) in page.chunks_exact_mut(8).enumerate() {
                // SAFETY: the victim's region stays mapped while `mappings` is held (as
                // for the append in place, which hands the kernel the same address).
                // Volatile: a write to the page meanwhile (after its write-protect fault,
                // which aborts this swap-out) may change it under the copy, whose bytes
                // are then never read back.
                let value = unsafe { words.add(word).read_volatile() };
                chunk.copy_from_slice(&value.to_ne_bytes());
            }
        }
    }

    /// Seals each victim in its scratch page (`copy_victims`): the device gets only
    /// ciphertext, the plan the seals (kept by the core once the append is done).
    fn seal_victims(&self, sealer: &znswap_seal::Sealer, plan: &mut IoPlan, scratch: &mut IoScratch) {
        let count = plan.sources().len();
        let mut sealed = 0;
        for index in 0..count {
            let seal = match plan.sources()[index] {
                PageSource::Region { .. } => {
                    let (owner, page_index) = plan.identity(index);
                    sealed += 1;
                    sealer.seal(owner, page_index, &mut scratch.pages[index].0)
                }
                PageSource::Gc { .. } | PageSource::Footer | PageSource::Zero => znswap_seal::NO_SEAL,
            };
            plan.seals_mut().push(seal);
        }
        self.counters.pages_sealed.fetch_add(sealed, Relaxed);
    }

    /// Opens a page read for `sealed` in place; one that fails to open is a failed read
    /// (the page is lost, never delivered).
    pub(super) fn open_page(&self, page: &mut [u8], sealed: Option<&Sealed>) -> Result<(), IoError> {
        let (Some(sealer), Some(sealed)) = (&self.sealer, sealed) else { return Ok(()) };
        sealer.open(sealed.owner, sealed.page, page, &sealed.seal).map_err(|_| {
            self.counters.pages_failed_open.fetch_add(1, Relaxed);
            if !self.device_error_shown.swap(true, Relaxed) {
                eprintln!(
                    "znswap: warning: page {} of region {} failed its integrity check: altered on the device; \
                     reported lost (further ones are only counted)",
                    sealed.page, sealed.owner
                );
            }
            IoError::Device
        })
    }

    fn lba(&self, zone: u32, slot: u32) -> u64 {
        self.device.geometry().zone_start_lba(zone) + slot as u64 * self.lbas_per_page
    }

    pub(super) fn read_slots(
        &self,
        zone: u32,
        slot: u32,
        data: &mut [u8],
        metadata: Option<&mut [u8]>,
    ) -> Result<(), IoError> {
        let lba = self.lba(zone, slot);
        self.with_device(|device| device.read(lba, data, metadata)).map_err(|error| self.device_error(&error))
    }

    /// A device command, inside the device gate: a fork waits until none is running, so
    /// the child never inherits a device lock some thread of the parent held.
    pub(super) fn with_device<T>(&self, command: impl FnOnce(&dyn ZonedDevice) -> T) -> T {
        debug_assert!(!holds_state_lock(), "a device command under the state lock");
        let _gate = self.device_gate.read().unwrap_or_else(|p| p.into_inner());
        command(&*self.device)
    }

    /// A failed device command: the first one is shown (later ones are counted), so a
    /// device that fails for a reason the user can fix says why.
    fn device_error(&self, error: &ZoneError) -> IoError {
        if !self.device_error_shown.swap(true, Relaxed) {
            eprintln!("znswap: warning: device error (further ones are only counted): {error}");
        }
        io_error(error)
    }
}
