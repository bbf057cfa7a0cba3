//! Eviction: the CLOCK sweep, write-protection, hand-over to the engine, discards.

use super::*;

/// Largest eviction round, in batches (see `evict_loop`).
const ROUND_BATCHES_MAX: usize = 4;

/// A page picked for eviction.
#[derive(Clone, Copy)]
struct Victim {
    owner: u32,
    page: u64,
    address: u64,
    generation: u64,
    /// Its handle in `State::out_pages` (taken from `out_free` when picked).
    handle: u64,
    /// The write-protect range (index into the round's ranges) that covers it.
    range: u32,
    protected: bool,
    /// The page was all zeroes once protected.
    zero: bool,
}

/// Pages the evictor write-protects with one ioctl (one TLB flush, one IPI to the
/// faulting CPUs): `start..end`, with the outcome.
#[derive(Clone, Copy)]
pub(super) struct ProtectRange {
    start: u64,
    end: u64,
    protected: bool,
}

/// Adds the page at `address` to the open range, or opens a new one.
fn protect_page(ranges: &mut Vec<ProtectRange>, open: &mut bool, address: u64) {
    let end = address + PAGE_BYTES as u64;
    match ranges.last_mut() {
        Some(range) if *open => range.end = end,
        _ => {
            ranges.push(ProtectRange { start: address, end, protected: false });
            *open = true;
        }
    }
}

/// Whether the page at `address` reads all zeroes. Volatile word reads: a writer may
/// change the page meanwhile (the caller then throws the answer away), so the compiler
/// must not assume it stable. A page with data answers at its first non-zero word.
///
/// # Safety
/// `address` is a page-aligned, mapped, readable page.
unsafe fn page_is_zero(address: u64) -> bool {
    let words = address as *const u64;
    // SAFETY: within the page, per the contract.
    (0..PAGE_BYTES / 8).all(|index| unsafe { words.add(index).read_volatile() } == 0)
}

/// An address range laid out as `struct iovec` (plain integers, so the state stays `Send`).
#[repr(C)]
struct IoVec {
    base: usize,
    len: usize,
}

const _: () = assert!(std::mem::size_of::<IoVec>() == std::mem::size_of::<libc::iovec>());

/// What `discard_dropped` works in, allocated once per discarding thread.
pub(super) struct DiscardScratch {
    batch: Vec<Dropping>,
    addresses: Vec<u64>,
    ranges: Vec<IoVec>,
}

impl DiscardScratch {
    pub(super) fn with_capacity(pages: usize) -> DiscardScratch {
        DiscardScratch {
            batch: Vec::with_capacity(pages),
            addresses: Vec::with_capacity(pages),
            ranges: Vec::with_capacity(pages),
        }
    }
}

/// A pidfd of this process if `process_madvise(MADV_DONTNEED)` works through it: probed
/// on a scratch page, because kernels before 6.13 refuse destructive advice there.
pub(super) fn self_pidfd_for_discard() -> Option<i32> {
    // SAFETY: plain syscalls on a fresh scratch mapping, unmapped before returning.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as i32;
        if pidfd < 0 {
            return None;
        }
        let scratch = map_anonymous(PAGE_BYTES).ok()?;
        scratch.write(1);
        let range = libc::iovec { iov_base: scratch.cast(), iov_len: PAGE_BYTES };
        let done = libc::syscall(libc::SYS_process_madvise, pidfd, &range, 1, libc::MADV_DONTNEED, 0);
        let dropped = done == PAGE_BYTES as i64 && scratch.read() == 0;
        libc::munmap(scratch.cast(), PAGE_BYTES);
        if dropped {
            Some(pidfd)
        } else {
            libc::close(pidfd);
            None
        }
    }
}

impl Shared {
    /// Whether an evictor has work: the resident set, less what is already being
    /// written out, is above the low watermark, and an out handle is free to take a
    /// victim. Eviction starts a batch below the budget, as kswapd works between
    /// watermarks, so a fault finds a free page instead of waiting for a write-out; and
    /// it evicts whole batches: evicting one page per fault made every append a single
    /// 4 KiB write (measured: 10k writes/s of 4 KiB, each a device doorbell the faulting
    /// reads queue behind).
    fn eviction_wanted(&self, state: &State) -> bool {
        let resident = self.counters.resident_pages.load(Relaxed);
        let leaving = state.writing_pages + state.to_drop.len() as u64;
        resident.saturating_sub(leaving) > self.low_watermark && !state.out_free.is_empty()
    }

    /// Wakes the evictors if they sleep and now have work; called under the lock by
    /// whoever changes the resident set, the pages in flight or the free out handles.
    pub(super) fn wake_evictor(&self, state: &mut State) {
        if state.evictors_asleep && self.eviction_wanted(state) {
            state.evictors_asleep = false;
            self.evict_wanted.notify_all();
        }
    }

    /// The evictor picks and write-protects victims and hands them to the
    /// engine; the I/O thread writes them. So the next batch is prepared while the last
    /// is on its way to the device (one thread doing both spent about 3 µs of CPU and
    /// then 3-4 µs waiting for the append per page, with no overlap).
    pub(super) fn evict_loop(&self) {
        // A round takes up to `wanted` victims: the batch, or up to 4 batches while rounds
        // find contiguous pages and nothing is swapped in (sequential eviction alone),
        // where a larger round costs no more write-protect ioctls and makes appends
        // larger (measured on anon-w-seq: 256-page rounds and appends swapped out 10-25 %
        // faster than 64-page ones). Otherwise rounds stay at one batch: larger appends
        // delayed the swap-in reads queued behind them (fault p99 +15 %), and each round
        // holds the state lock for its hand-over.
        let mut wanted = self.evict_batch_pages;
        let mut reads_seen = self.counters.swap_in_reads.load(Relaxed);
        let mut victims = Vec::with_capacity(ROUND_BATCHES_MAX * self.evict_batch_pages);
        let (out_count, regions_max) = {
            let state = self.lock();
            (state.out_free.len(), state.engine.config().owners_max as usize)
        };
        // A range per victim at most, and per region swept (twice at most) for sampling.
        let mut ranges = Vec::with_capacity(ROUND_BATCHES_MAX * self.evict_batch_pages + 2 * regions_max + 2);
        let mut discard_scratch = DiscardScratch::with_capacity(out_count);
        let mut cpu_counted = thread_cpu_ns();
        loop {
            self.discard_dropped(&mut discard_scratch);
            let mut state = self.lock();
            while !self.stop.load(Relaxed) && !self.eviction_wanted(&state) && state.to_drop.is_empty() {
                // The wait checks again under the lock the faults and completions change
                // the resident set and the pages in flight under, so no wake-up is missed.
                state.evictors_asleep = true;
                let idle = Instant::now();
                state = self
                    .evict_wanted
                    .wait_timeout(state, Duration::from_millis(5))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                self.counters.evictor_idle_ns.fetch_add(idle.elapsed().as_nanos() as u64, Relaxed);
            }
            if self.stop.load(Relaxed) {
                return;
            }
            if !state.to_drop.is_empty() {
                // Discard first: those pages leave the resident set without any I/O.
                continue;
            }
            victims.clear();
            ranges.clear();
            self.pick_victims(&mut state, wanted, &mut victims, &mut ranges);
            drop(state);
            if !ranges.is_empty() {
                self.evict_victims(&mut victims, &mut ranges);
            }
            if victims.is_empty() {
                // Every candidate was referenced or in flight: let the faults and the
                // I/O thread move on before sweeping again.
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            let contiguous = match (victims.first(), victims.last()) {
                (Some(first), Some(last)) => {
                    // (The hand may have wrapped around: then they are not.)
                    first.owner == last.owner && last.page.checked_sub(first.page) == Some(victims.len() as u64 - 1)
                }
                _ => false,
            };
            let reads = self.counters.swap_in_reads.load(Relaxed);
            let no_reads = reads == reads_seen;
            reads_seen = reads;
            wanted = if contiguous && no_reads && victims.len() == wanted {
                (2 * wanted).min(ROUND_BATCHES_MAX * self.evict_batch_pages)
            } else {
                self.evict_batch_pages
            };
            let cpu = thread_cpu_ns();
            self.counters.evictor_cpu_ns.fetch_add(cpu - cpu_counted, Relaxed);
            cpu_counted = cpu;
        }
    }

    /// CLOCK over the address space: the hand sweeps the regions' pages in address
    /// order, clears reference bits and picks unreferenced resident pages, up to
    /// `wanted` (each with an out handle). The pages to write-protect go into `ranges`:
    /// consecutive victims with only non-resident pages between them share a range, and
    /// one ioctl covers it (write-protecting an empty PTE does nothing), so one TLB flush
    /// serves many victims even under random access. With reference sampling, the pages
    /// whose bit is cleared are write-protected too (a range then spans the whole sweep
    /// of a region), so their next write faults and sets the bit again.
    fn pick_victims(
        &self,
        state: &mut State,
        wanted: usize,
        victims: &mut Vec<Victim>,
        ranges: &mut Vec<ProtectRange>,
    ) {
        let wanted = wanted.min(state.out_free.len());
        // Two sweeps at most: the first may only clear reference bits.
        let limit: u64 = 2 * state.regions.iter().filter(|r| r.live).map(|r| r.pages).sum::<u64>();
        let (mut owner, mut page) = state.hand;
        let mut scanned = 0;
        // Whether the last range may grow.
        let mut open = false;
        while victims.len() < wanted && scanned < limit {
            if owner as usize >= state.regions.len() {
                owner = 0;
            }
            let region = &mut state.regions[owner as usize];
            if !region.live || page >= region.pages {
                owner += 1;
                page = 0;
                open = false;
                continue;
            }
            scanned += 1;
            let address = region.base + page * PAGE_BYTES as u64;
            let flags = &mut region.flags[page as usize];
            if *flags & RESIDENT != 0 {
                if *flags & (EVICTING | WRITING) != 0 {
                    // Already write-protected: a sampling range may run over it.
                    open &= self.reference_sampling;
                } else if *flags & REFERENCED != 0 {
                    *flags &= !REFERENCED;
                    if self.reference_sampling {
                        protect_page(ranges, &mut open, address);
                    } else {
                        open = false;
                    }
                } else {
                    *flags |= EVICTING;
                    protect_page(ranges, &mut open, address);
                    let generation = region.generation;
                    let handle = state.out_free.pop().expect("no more victims than free handles");
                    victims.push(Victim {
                        owner,
                        page,
                        address,
                        generation,
                        handle,
                        range: ranges.len() as u32 - 1,
                        protected: false,
                        zero: false,
                    });
                }
            }
            page += 1;
        }
        state.hand = (owner, page);
    }

    /// Write-protects the picked victims and looks for all-zero pages without the state
    /// lock (each protection costs a TLB flush, and faults should not wait behind
    /// them); then, under the lock, hands the pages not written meanwhile to the engine
    /// and wakes the I/O thread, whose append reads them where they are.
    fn evict_victims(&self, victims: &mut [Victim], ranges: &mut [ProtectRange]) {
        // Writers fault from here on, so the pages stay as the zero check and the append
        // see them unless a write dirties them (which aborts their swap-out). An error
        // means the region went away meanwhile: checked below.
        let mappings = self.mappings.read().unwrap_or_else(|p| p.into_inner());
        for range in ranges.iter_mut() {
            range.protected = self.uffd.write_protect(range.start, range.end - range.start, true, false).is_ok();
        }
        if victims.is_empty() {
            return;
        }
        for victim in victims.iter_mut() {
            victim.protected = ranges[victim.range as usize].protected;
            if victim.protected {
                // SAFETY: the page is mapped (its region cannot be unmapped while
                // `mappings` is held); a write fault meanwhile clears EVICTING and the
                // page is kept below, whatever this saw.
                victim.zero = unsafe { page_is_zero(victim.address) };
            }
        }
        drop(mappings);
        let mut state = self.lock();
        let now = self.now();
        for &Victim { owner, page, address, generation, handle, protected, zero, .. } in victims.iter() {
            let region = &mut state.regions[owner as usize];
            if !region.live || region.generation != generation {
                state.out_free.push(handle);
                continue;
            }
            let flags = &mut region.flags[page as usize];
            debug_assert!(*flags & RESIDENT != 0, "only the evictor drops pages");
            let written = *flags & EVICTING == 0;
            *flags &= !EVICTING;
            if written || !protected {
                // Written (and unprotected) since it was picked, or (never for a live
                // region) not protected: keep it.
                state.out_free.push(handle);
                self.requeue(&mut state, owner, page, address);
                continue;
            }
            if zero {
                state.out_free.push(handle);
                state.engine.free(owner, page..page + 1, now).expect("freeing a zero page");
                self.counters.swap_outs_zero.fetch_add(1, Relaxed);
                self.drop_page(&mut state, owner, page);
                continue;
            }
            // The append reads the page where it is (`pump`).
            state.out_pages[handle as usize] = OutPage { owner, generation, address };
            match state.engine.swap_out(owner, page, handle, now) {
                Ok(_) => {
                    state.regions[owner as usize].flags[page as usize] |= WRITING;
                    state.writing_pages += 1;
                }
                Err(SwapOutError::Backpressure) => {
                    self.counters.backpressure.fetch_add(1, Relaxed);
                    state.out_free.push(handle);
                    self.requeue(&mut state, owner, page, address);
                }
                Err(error) => panic!("swap-out of resident page {owner}:{page}: {error}"),
            }
        }
        self.complete_events(&mut state);
        self.after_completions(&mut state);
        if state.io_asleep {
            state.io_asleep = false;
            self.io_wanted.notify_one();
        }
    }

    fn requeue(&self, state: &mut State, owner: u32, page: u64, address: u64) {
        // Dirty pages lose the protection again; a clean swap-cached one keeps it.
        let clean = matches!(state.engine.page_state(owner, page), Ok(znswap_core::PageState::SwapCached { .. }));
        if !clean {
            self.uffd
                .write_protect(address, PAGE_BYTES as u64, false, true)
                .expect("unprotecting a page kept resident");
        }
    }

    /// Marks a page dropped: no longer resident for the pager, but mapped until an
    /// evictor discards it (`discard_dropped`); faults on it wait for that (DROPPING).
    fn drop_page(&self, state: &mut State, owner: u32, page: u64) {
        let region = &mut state.regions[owner as usize];
        let generation = region.generation;
        let flags = &mut region.flags[page as usize];
        debug_assert!(*flags & RESIDENT != 0 && *flags & DROPPING == 0);
        *flags &= !(RESIDENT | REFERENCED);
        *flags |= DROPPING;
        state.to_drop.push(Dropping { owner, page, generation });
    }

    /// Called after `complete_events`, in the same lock hold: wakes an evictor for the
    /// pages to discard, or if completions left it pages to evict. Faults waiting for
    /// room wake too: the first of them or an evictor to take the pages discards them.
    pub(super) fn after_completions(&self, state: &mut State) {
        if !state.to_drop.is_empty() {
            self.space_freed.notify_all();
            if state.evictors_asleep {
                state.evictors_asleep = false;
                self.evict_wanted.notify_all();
            }
        }
        self.wake_evictor(state);
    }

    /// `MADV_DONTNEED` for the dropped pages, outside the state lock: it costs about
    /// 0.35 µs a page and a TLB flush per batch, which faults used to wait behind. The
    /// regions stay mapped meanwhile (`mappings` is held: `Region::drop` takes it
    /// exclusively), and pages of a region freed before are skipped.
    /// Returns how many pages it discarded.
    pub(super) fn discard_dropped(&self, scratch: &mut DiscardScratch) -> usize {
        let DiscardScratch { batch, addresses, ranges } = scratch;
        let _mappings = self.mappings.read().unwrap_or_else(|p| p.into_inner());
        {
            let mut state = self.lock();
            if state.to_drop.is_empty() {
                return 0;
            }
            debug_assert!(batch.is_empty());
            std::mem::swap(&mut state.to_drop, batch);
            addresses.clear();
            for dropping in batch.iter() {
                let region = &state.regions[dropping.owner as usize];
                if region.live && region.generation == dropping.generation {
                    addresses.push(region.base + dropping.page * PAGE_BYTES as u64);
                }
            }
        }
        addresses.sort_unstable();
        ranges.clear();
        let mut index = 0;
        while index < addresses.len() {
            let start = addresses[index];
            let mut end = start + PAGE_BYTES as u64;
            index += 1;
            while index < addresses.len() && addresses[index] == end {
                end += PAGE_BYTES as u64;
                index += 1;
            }
            ranges.push(IoVec { base: start as usize, len: (end - start) as usize });
        }
        self.discard(ranges);
        let mut state = self.lock();
        for dropping in batch.iter() {
            let region = &mut state.regions[dropping.owner as usize];
            if region.live && region.generation == dropping.generation {
                region.flags[dropping.page as usize] &= !DROPPING;
            }
        }
        // Every dropped page was still counted resident, a freed region's too (its
        // `Drop` subtracts only RESIDENT pages).
        self.counters.resident_pages.fetch_sub(batch.len() as u64, Relaxed);
        let discarded = batch.len();
        batch.clear();
        self.space_freed.notify_all();
        self.wake_evictor(&mut state);
        discarded
    }

    /// `MADV_DONTNEED` over `ranges`: one `process_madvise` per batch where the kernel
    /// allows it on the calling process (6.13+; a TLB flush per batch instead of per page,
    /// about 0.35 instead of 1.2-2.5 µs per scattered page here), else one `madvise` each.
    fn discard(&self, ranges: &[IoVec]) {
        // Kernels cap a vector at IOV_MAX entries.
        const BATCH: usize = 512;
        let mut rest = ranges;
        if let Some(pidfd) = self.self_pidfd {
            while !rest.is_empty() {
                let batch = &rest[..rest.len().min(BATCH)];
                let bytes: usize = batch.iter().map(|r| r.len).sum();
                // SAFETY: the ranges are pages of our own mappings whose contents are on
                // the device (or were all zero); the iovec array outlives the call.
                let done = unsafe {
                    libc::syscall(libc::SYS_process_madvise, pidfd, batch.as_ptr(), batch.len(), libc::MADV_DONTNEED, 0)
                };
                if done < 0 || done as usize != bytes {
                    // A partial or refused batch: finish it range by range below.
                    break;
                }
                rest = &rest[batch.len()..];
            }
        }
        for range in rest {
            // SAFETY: as above; MADV_DONTNEED of an already dropped range is harmless.
            let rc = unsafe { libc::madvise(range.base as *mut libc::c_void, range.len, libc::MADV_DONTNEED) };
            assert_eq!(rc, 0, "MADV_DONTNEED: {}", std::io::Error::last_os_error());
        }
    }

    pub(super) fn complete_events(&self, state: &mut State) {
        while let Some(event) = state.engine.poll_event() {
            match event {
                Event::SwapOutDone { owner, page, buf, outcome, .. } => {
                    // One per swap-out the engine took (a freed page's too, at its
                    // append's completion): no append reads the page any more.
                    state.out_free.push(buf);
                    state.writing_pages -= 1;
                    // The region it was taken from, not a later one under the same owner
                    // id (whose page of that index may have a swap-out of its own).
                    let generation = state.out_pages[buf as usize].generation;
                    let same_region =
                        state.regions.get(owner as usize).is_some_and(|r| r.live && r.generation == generation);
                    if !same_region {
                        continue;
                    }
                    let address = Self::page_address(state, owner, page);
                    state.regions[owner as usize].flags[page as usize] &= !WRITING;
                    match outcome {
                        SwapOutOutcome::Swapped { .. } => {
                            if state.regions[owner as usize].flags[page as usize] & RESIDENT != 0 {
                                self.drop_page(state, owner, page);
                            }
                        }
                        SwapOutOutcome::AbortedDirty => {
                            self.counters.swap_outs_aborted_dirty.fetch_add(1, Relaxed);
                            self.requeue(state, owner, page, address);
                        }
                        SwapOutOutcome::Failed => {
                            self.counters.device_errors.fetch_add(1, Relaxed);
                            self.requeue(state, owner, page, address);
                        }
                        SwapOutOutcome::Dropped => {}
                    }
                }
                Event::Lost { .. } => {
                    self.counters.lost_pages.fetch_add(1, Relaxed);
                }
                Event::Remapped { .. } | Event::RecordRejected { .. } | Event::ZoneRetired { .. } => {}
            }
        }
    }
}
