//! The I/O thread: runs the engine's appends, reads, resets and finishes on the device.

use super::*;

/// Where `pump` takes an append's page from.
#[derive(Clone, Copy)]
enum Source {
    /// A swap-out page, in place in its region.
    At(u64),
    /// A page of the GC move buffer.
    Gc(u32),
    /// The same position of `IoScratch::pages` (a chunk footer).
    Scratch,
    Zero,
}

/// An I/O thread's working memory, allocated once: a fresh megabyte per `pump` call
/// cost a page fault and a memset per page of it, about a third of the I/O thread's CPU
/// on a sequential swap-out.
struct IoScratch {
    /// Chunk footers to append, and reads that land in no buffer of their own;
    /// page-aligned, so O_DIRECT needs no bounce copy.
    pages: Vec<AlignedPage>,
    metadata: Vec<u8>,
    sources: Vec<Source>,
    /// The pager reports writes during write-out through `Engine::dirtied`, so no append
    /// ever carries a dirtied page of its own.
    no_dirtied: Vec<bool>,
}

impl IoScratch {
    fn new(max_append_pages: usize) -> IoScratch {
        IoScratch {
            pages: vec![AlignedPage::ZERO; max_append_pages],
            metadata: Vec::new(),
            sources: Vec::with_capacity(max_append_pages),
            no_dirtied: vec![false; max_append_pages],
        }
    }

    /// Ready for an I/O of `pages` pages (larger ones grow it, once).
    fn prepare(&mut self, pages: usize) {
        if self.pages.len() < pages {
            self.pages.resize(pages, AlignedPage::ZERO);
            self.no_dirtied.resize(pages, false);
        }
        self.metadata.clear();
        self.sources.clear();
    }
}

impl Shared {
    /// Runs the engine's I/O (swap-out appends, GC reads and moves, resets, finishes)
    /// until none is queued, then sleeps until the evictor queues more or the engine's
    /// clock needs a tick (the GC and the swap-zone flush run on ticks).
    pub(super) fn io_loop(&self) {
        let mut scratch = IoScratch::new(self.max_append_pages);
        let mut cpu_counted = thread_cpu_ns();
        while !self.stop.load(Relaxed) {
            let mut state = self.pump(&mut scratch);
            let cpu = thread_cpu_ns();
            self.counters.evictor_cpu_ns.fetch_add(cpu - cpu_counted, Relaxed);
            cpu_counted = cpu;
            if self.stop.load(Relaxed) {
                return;
            }
            state.io_asleep = true;
            let idle = Instant::now();
            let _ = self.io_wanted.wait_timeout(state, Duration::from_millis(5));
            self.counters.io_idle_ns.fetch_add(idle.elapsed().as_nanos() as u64, Relaxed);
        }
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
        self.device.read(self.lba(zone, slot), data, metadata).map_err(|error| io_error(&error))
    }

    /// Executes every I/O the engine has queued; the lock is released during device I/O
    /// (see `page_buffers` for who owns the GC buffer pages meanwhile).
    /// Returns holding the lock, with nothing queued.
    fn pump(&self, scratch: &mut IoScratch) -> MutexGuard<'_, State> {
        loop {
            // Swap-out appends read the pages in place: their regions stay mapped until
            // the append is done (`Region::drop` takes `mappings` exclusively).
            let mappings = self.mappings.read().unwrap_or_else(|p| p.into_inner());
            let mut state = self.lock();
            state.engine.tick(self.now());
            let Some(request) = state.engine.poll_io() else {
                drop(mappings);
                self.complete_events(&mut state);
                self.after_completions(&mut state);
                return state;
            };
            let cpu_started = thread_cpu_ns();
            let mut gc_work = false;
            match request {
                IoRequest::Append { io, zone, pages } => {
                    let pages = pages as usize;
                    scratch.prepare(pages);
                    let records = state.engine.append_records(io);
                    for (index, append_page) in state.engine.append_pages(io).iter().enumerate() {
                        let source = match append_page.buf {
                            Buf::Page(handle) => {
                                let out = state.out_pages[handle as usize];
                                let region = &state.regions[out.owner as usize];
                                if region.live && region.generation == out.generation {
                                    debug_assert_eq!(out.address, region.base + append_page.page * PAGE_BYTES as u64);
                                    Source::At(out.address)
                                } else {
                                    // Freed since: its slot ends invalid, whatever is written.
                                    Source::Zero
                                }
                            }
                            Buf::Gc(n) => {
                                gc_work = true;
                                Source::Gc(n)
                            }
                            Buf::Footer => {
                                scratch.pages[index].0.copy_from_slice(records);
                                Source::Scratch
                            }
                            Buf::Zero => Source::Zero,
                        };
                        scratch.sources.push(source);
                        if !self.footer_mode && self.metadata_bytes > 0 {
                            let record = &records[index * RECORD_BYTES..(index + 1) * RECORD_BYTES];
                            scratch.metadata.extend_from_slice(record);
                            scratch.metadata.resize(scratch.metadata.len() + self.metadata_bytes - RECORD_BYTES, 0);
                        }
                    }
                    drop(state);
                    // The pages go to the device from where they are, in one `pwritev`.
                    // One vector per append (a few KiB; the append is 4 KiB a page, so
                    // this is not where time goes).
                    let pieces: Vec<IoSlice<'_>> = scratch
                        .sources
                        .iter()
                        .enumerate()
                        .map(|(index, source)| {
                            IoSlice::new(match *source {
                                // SAFETY: the page's region was live under the lock and
                                // stays mapped while `mappings` is held. A write to the
                                // page meanwhile races with the device reading it, but
                                // dirties the page first (write-protect fault), which
                                // aborts this swap-out (Appendix A): those bytes are
                                // never read back.
                                Source::At(address) => unsafe {
                                    std::slice::from_raw_parts(address as *const u8, PAGE_BYTES)
                                },
                                // SAFETY: the engine owns these pages until this append
                                // completes (`append_done` below); nobody writes them.
                                Source::Gc(n) => unsafe { &self.gc_buffers.page(n as u64)[..] },
                                Source::Scratch => &scratch.pages[index].0,
                                Source::Zero => &ZERO_PAGE.0,
                            })
                        })
                        .collect();
                    let metadata_arg = (!scratch.metadata.is_empty()).then_some(scratch.metadata.as_slice());
                    let appending = Instant::now();
                    if !gc_work && self.counters.first_swap_out_ns.load(Relaxed) == 0 {
                        self.counters.first_swap_out_ns.store(self.now().max(1), Relaxed);
                    }
                    let result = self
                        .device
                        .append_vectored(zone, &pieces, metadata_arg)
                        .map(|lba| ((lba - self.device.geometry().zone_start_lba(zone)) / self.lbas_per_page) as u32);
                    drop(pieces);
                    drop(mappings);
                    if !gc_work {
                        self.counters.evictor_append_ns.fetch_add(appending.elapsed().as_nanos() as u64, Relaxed);
                        self.counters.swap_out_appends.fetch_add(1, Relaxed);
                    }
                    if result.is_err() {
                        self.counters.device_errors.fetch_add(1, Relaxed);
                    }
                    let mut state = self.lock();
                    let written = if result.is_ok() && !gc_work { pages as u64 } else { 0 };
                    self.counters.swap_outs_written.fetch_add(written, Relaxed);
                    state
                        .engine
                        .append_done(io, result.map_err(|e| io_error(&e)), &scratch.no_dirtied[..pages], self.now())
                        .expect("append completion");
                    self.complete_events(&mut state);
                    self.after_completions(&mut state);
                }
                IoRequest::Read { io, zone, slot, pages, buf, with_metadata } => {
                    gc_work = true;
                    drop(state);
                    drop(mappings);
                    let pages = pages as usize;
                    scratch.prepare(pages);
                    let metadata_arg = if with_metadata && self.metadata_bytes > 0 {
                        scratch.metadata.resize(pages * self.metadata_bytes, 0);
                        Some(scratch.metadata.as_mut_slice())
                    } else {
                        None
                    };
                    let result = match buf {
                        Buf::Gc(first) => {
                            // SAFETY: this read owns its GC buffer pages until `read_done`.
                            let data = unsafe { self.gc_buffers.pages_mut(first as usize, pages) };
                            self.read_slots(zone, slot, data, metadata_arg)
                        }
                        Buf::Footer | Buf::Page(_) | Buf::Zero => {
                            self.read_slots(zone, slot, bytes_mut(&mut scratch.pages[..pages]), metadata_arg)
                        }
                    };
                    let mut state = self.lock();
                    let records: &[u8] = match buf {
                        Buf::Gc(_) => &scratch.metadata,
                        Buf::Footer => bytes(&scratch.pages[..pages]),
                        Buf::Page(_) | Buf::Zero => &[],
                    };
                    state.engine.read_done(io, result, records, self.now()).expect("read completion");
                    self.complete_events(&mut state);
                    self.after_completions(&mut state);
                }
                IoRequest::Reset { io, zone } => {
                    gc_work = true;
                    drop(state);
                    drop(mappings);
                    let result = self.device.reset(zone).map_err(|e| io_error(&e));
                    self.lock().engine.reset_done(io, result, self.now()).expect("reset completion");
                }
                IoRequest::Finish { io, zone } => {
                    drop(state);
                    drop(mappings);
                    let result = self.device.finish(zone).map_err(|e| io_error(&e));
                    self.lock().engine.finish_done(io, result, self.now()).expect("finish completion");
                }
            }
            if gc_work {
                self.counters.gc_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(cpu_started), Relaxed);
            }
        }
    }
}
