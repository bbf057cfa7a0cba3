//! The I/O thread: runs the engine's appends, reads, resets and finishes on the device.

use std::io::IoSlice;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use znswap_core::{Buf, IoRequest};
use znswap_pager_core::{IoCompletion, IoPlan, IoShell, IoThread, PageSource, PAGE_BYTES};

use super::lock_flag::holds_state_lock;
use super::shared::{page_digest, Shared};
use super::shell::{CpuTime, Live, Role};
use super::storage::RECORD_BYTES;
use crate::page_buffers::{bytes, bytes_mut, ZeroedPages, ZERO_PAGE};
use crate::sys::thread_cpu_ns;

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
        let storage = &shared.storage;
        let scratch = &mut self.role.scratch;
        match plan.request() {
            IoRequest::Append { zone, pages, .. } => append(shared, plan, zone, pages as usize, records, scratch),
            IoRequest::Read { zone, slot, pages, buf, with_metadata, .. } => {
                let pages = pages as usize;
                scratch.prepare(pages);
                let metadata = if with_metadata && storage.metadata_bytes() > 0 {
                    scratch.metadata.resize(pages * storage.metadata_bytes(), 0);
                    Some(scratch.metadata.as_mut_slice())
                } else {
                    None
                };
                let result = match buf {
                    Buf::Gc(first) => {
                        // SAFETY: this read owns its GC buffer pages until `io_done`.
                        let data = unsafe { storage.gc_pages_mut(first as usize, pages) };
                        storage.read_slots(zone, slot, data, metadata)
                    }
                    Buf::Footer | Buf::Page(_) | Buf::Zero => {
                        storage.read_slots(zone, slot, bytes_mut(&mut scratch.pages[..pages]), metadata)
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
            IoRequest::Reset { zone, .. } => IoCompletion::Reset(storage.reset(zone)),
            IoRequest::Finish { zone, .. } => IoCompletion::Finish(storage.finish(zone)),
        }
    }
}

/// Runs the engine's I/O until none is queued, then sleeps until an eviction queues more
/// or the engine's clock needs a tick (the GC and the swap-zone flush run on ticks). Its
/// steps are the core's (`znswap_pager_core::IoThread`).
pub(super) fn io_loop(shared: &Shared) {
    let (mut io, scratch) = {
        let state = shared.lock();
        (IoThread::new(&state), IoScratch::new(state.append_pages_max()))
    };
    let mut shell = Live::new(shared, IoRole { scratch });
    let times = &shared.times;
    let mut cpu = CpuTime::new(&times.io_cpu_ns);
    let mut request_cpu_started = 0;
    while !(io.at_rest() && shared.wakers.stopping()) {
        let idle = io.at_rest();
        let next = io.step(&mut shell);
        match (idle, io.at_rest()) {
            (true, false) => request_cpu_started = thread_cpu_ns(),
            (false, true) if io.plan().is_gc() => {
                times.gc_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(request_cpu_started), Relaxed);
            }
            _ => {}
        }
        shell.carry_out(next, &mut cpu, &times.io_idle_ns);
    }
    debug_assert!(shell.holds_nothing());
    cpu.charge();
}

/// One append: its pages go to the device from where they are, in one `pwritev`,
/// outside the lock, with `records` (the engine's, taken under the lock) as per-LBA
/// metadata or in the footer page.
fn append(
    shared: &Shared,
    plan: &mut IoPlan,
    zone: u32,
    pages: usize,
    records: &[u8],
    scratch: &mut IoScratch,
) -> IoCompletion {
    let storage = &shared.storage;
    scratch.prepare(pages);
    if let Some(key) = shared.digest_key {
        digest_victims(key, plan);
    }
    let victims_copied = storage.seals() || !shared.spaces.is_own();
    if victims_copied {
        copy_victims(shared, plan, scratch);
    }
    if storage.seals() {
        seal_victims(shared, plan, scratch);
    }
    if storage.footer_mode() {
        if let Some(index) = plan.sources().iter().position(|source| *source == PageSource::Footer) {
            scratch.pages[index].0.copy_from_slice(records);
        }
    } else if storage.metadata_bytes() > 0 {
        for index in 0..pages {
            let record = &records[index * RECORD_BYTES..(index + 1) * RECORD_BYTES];
            scratch.metadata.extend_from_slice(record);
            scratch.metadata.resize(scratch.metadata.len() + storage.metadata_bytes() - RECORD_BYTES, 0);
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
                PageSource::Gc { page } => unsafe { storage.gc_page(page as u64) },
                PageSource::Footer => &scratch.pages[index].0,
                PageSource::Zero => &ZERO_PAGE.0,
            })
        })
        .collect();
    let metadata = (!scratch.metadata.is_empty()).then_some(scratch.metadata.as_slice());
    let appending = Instant::now();
    let result = storage.append(zone, &pieces, metadata);
    drop(pieces);
    if !plan.is_gc() {
        shared.times.evictor_append_ns.fetch_add(appending.elapsed().as_nanos() as u64, Relaxed);
    }
    IoCompletion::Append(result)
}

/// Each page's digest into the plan (asynchronous write protection), of its bytes
/// before any sealing: the core keeps it beside the slot.
fn digest_victims(key: u64, plan: &mut IoPlan) {
    debug_assert!(!holds_state_lock(), "region memory read under the state lock");
    for index in 0..plan.sources().len() {
        let digest = match plan.sources()[index] {
            // SAFETY: as for the append; with asynchronous write protection a victim
            // is written out only from its shadow page, which the program cannot
            // reach, so the bytes digested are the bytes written.
            PageSource::Region { address } => {
                page_digest(key, unsafe { std::slice::from_raw_parts(address as *const u8, PAGE_BYTES) })
            }
            _ => 0,
        };
        plan.digests_mut().push(digest);
    }
}

/// Copies each victim of the append into its scratch page, for an append that cannot
/// take it in place: to be sealed there, or from the served process's memory
/// (`Pager::serve_tenant`).
fn copy_victims(shared: &Shared, plan: &IoPlan, scratch: &mut IoScratch) {
    debug_assert!(!holds_state_lock(), "region memory read under the state lock");
    if !shared.spaces.is_own() {
        copy_served_victims(shared, plan, scratch);
        return;
    }
    for (index, source) in plan.sources().iter().enumerate() {
        let PageSource::Region { address } = *source else { continue };
        let page = &mut scratch.pages[index].0;
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

/// `copy_victims` for a served process's pages: each run of victims at consecutive
/// addresses (one region's, so one process's) read in one read of its memory.
fn copy_served_victims(shared: &Shared, plan: &IoPlan, scratch: &mut IoScratch) {
    let sources = plan.sources();
    let mut index = 0;
    while index < sources.len() {
        let PageSource::Region { address } = sources[index] else {
            index += 1;
            continue;
        };
        let run = sources[index..]
            .iter()
            .enumerate()
            .take_while(|(offset, source)| {
                **source == PageSource::Region { address: address + (*offset * PAGE_BYTES) as u64 }
            })
            .count();
        shared.spaces.read_served_pages(address, bytes_mut(&mut scratch.pages[index..index + run]));
        index += run;
    }
}

/// Seals each victim in its scratch page (`copy_victims`): the device gets only
/// ciphertext, the plan the seals (kept by the core once the append is done).
fn seal_victims(shared: &Shared, plan: &mut IoPlan, scratch: &mut IoScratch) {
    for index in 0..plan.sources().len() {
        let seal = match plan.sources()[index] {
            PageSource::Region { .. } => {
                let (owner, page_index) = plan.identity(index);
                shared.storage.seal(owner, page_index, &mut scratch.pages[index].0)
            }
            PageSource::Gc { .. } | PageSource::Footer | PageSource::Zero => znswap_seal::NO_SEAL,
        };
        plan.seals_mut().push(seal);
    }
}
