//! Faults: missing pages swapped in or zero-filled, writes to write-protected pages.

use super::*;

/// Never-written pages mapped with a fault that continues a sequential run, beyond the
/// faulting page: they cost no I/O (zero fill), and one fault, one lock hold and one
/// `UFFDIO_COPY` then serve many first touches (a first-touch fault costs about 6 µs
/// here, the kernel's own about 1 µs). 63 swapped out 5-16 % faster than 31 on a
/// sequential pass (3 alternating rounds); 127 was slower than 63 in each round (the
/// fault holds the state lock while it maps them, and the evictor waits).
const ZERO_FILL_AROUND_PAGES: u64 = 63;
static ZERO_PAGES: [u8; (ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES] =
    [0; (ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES];

/// Reference sampling tracks references per granule of this many pages: a write fault
/// on a sampled page marks its whole granule referenced and unprotects it, so a run of
/// hot pages costs one sampling fault per sweep instead of one per page (a write-protect
/// fault costs 6-10 µs here: the signal, and a TLB flush on the other CPU).
const SAMPLING_GRANULE_PAGES: u64 = 16;

impl Shared {
    /// The lock, for a fault: the time spent waiting for it is counted. A fault spins
    /// for the lock a little before it sleeps: holds are a few microseconds, while a
    /// futex sleep and wake-up costs more than that on a virtual machine, whose idle
    /// vCPUs halt and take an exit to wake.
    fn lock_for_fault(&self) -> MutexGuard<'_, State> {
        const SPIN_NS: u128 = 20_000;
        match self.state.try_lock() {
            Ok(state) => return state,
            Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {}
        }
        let waiting = Instant::now();
        let mut spins = 0u32;
        let state = loop {
            match self.state.try_lock() {
                Ok(state) => break state,
                Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
            spins += 1;
            if spins % 64 == 0 && waiting.elapsed().as_nanos() > SPIN_NS {
                break self.lock();
            }
            std::hint::spin_loop();
        };
        self.counters.fault_lock_wait_ns.fetch_add(waiting.elapsed().as_nanos() as u64, Relaxed);
        state
    }

    pub(super) fn handle_faults(&self) {
        let mut page_buffer = AlignedPage::ZERO;
        while !self.stop.load(Relaxed) {
            match self.uffd.poll(50) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(error) => panic!("polling userfaultfd: {error}"),
            }
            while let Some(event) = self.uffd.read_event().expect("reading userfaultfd") {
                if let UffdEvent::PageFault { address, write, write_protect, .. } = event {
                    let page_address = address & !(PAGE_BYTES as u64 - 1);
                    if write_protect {
                        self.write_fault(page_address);
                    } else {
                        self.missing_fault(page_address, write, &mut page_buffer.0);
                    }
                }
            }
        }
    }

    /// A SIGBUS in self-paging mode at `address`: resolves it if it is a page of one of
    /// this pager's regions (in the faulting thread), else returns false.
    pub(crate) fn resolve_in_thread(&self, address: u64, write: bool) -> bool {
        let page_address = address & !(PAGE_BYTES as u64 - 1);
        let state = self.lock_for_fault();
        let flags = match Self::locate(&state, page_address) {
            None => return false,
            Some((owner, page)) => state.regions[owner as usize].flags[page as usize],
        };
        if flags & DROPPING != 0 {
            // Being discarded: a write to it (still mapped, write-protected) lands here
            // too, and cannot be told from a missing page. Retry the access once the
            // evictor is done with it.
            drop(state);
            std::thread::yield_now();
            return true;
        }
        let resident = flags & RESIDENT != 0;
        // A resident page faults only when written while write-protected.
        if resident {
            self.write_fault_locked(state, page_address);
        } else {
            // Aligned: the device reads into it without a bounce copy.
            let mut data = AlignedPage::ZERO;
            self.missing_fault_locked(state, page_address, write, &mut data.0);
        }
        true
    }

    fn write_fault(&self, address: u64) {
        self.write_fault_locked(self.lock_for_fault(), address);
    }

    fn write_fault_locked<'a>(&'a self, mut state: MutexGuard<'a, State>, address: u64) {
        self.counters.write_protect_faults.fetch_add(1, Relaxed);
        let Some((owner, page)) = Self::locate(&state, address) else {
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        };
        if state.regions[owner as usize].flags[page as usize] & RESIDENT == 0 {
            // Dropped after its swap-out completed: the writer retries, faults the page
            // back in and writes to it then.
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        }
        let now = self.now();
        state.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
        let flags = &mut state.regions[owner as usize].flags[page as usize];
        *flags |= REFERENCED;
        *flags &= !EVICTING;
        if self.reference_sampling {
            self.lift_sampling_protection(&mut state, owner, page);
        } else {
            self.uffd.write_protect(address, PAGE_BYTES as u64, false, true).expect("lifting write protection");
        }
    }

    /// A write fault under reference sampling: marks the faulting page's granule
    /// referenced and lifts the protection of its pages that were write-protected only to
    /// sample (dirty, resident, not on their way out), with the faulting page's. Pages
    /// that must stay protected (clean ones whose slot is their swap cache, victims being
    /// written) keep it and their bit.
    ///
    /// One ioctl per run, and a run spans unmapped pages: each ioctl flushes the TLB of
    /// every CPU the process runs on (an IPI, costly in a VM), and under random access the
    /// granule's resident pages are scattered. Spanning is safe because, under the lock,
    /// a page that is neither resident nor being dropped has no PTE (every install takes
    /// the lock), so lifting protection there changes nothing.
    fn lift_sampling_protection(&self, state: &mut State, owner: u32, page: u64) {
        let region_pages = state.regions[owner as usize].pages;
        let first = page - page % SAMPLING_GRANULE_PAGES;
        let end = (first + SAMPLING_GRANULE_PAGES).min(region_pages);
        // The run being built: its first and last liftable page.
        let mut run: Option<(u64, u64)> = None;
        for next in first..=end {
            let flags = if next < end { state.regions[owner as usize].flags[next as usize] } else { 0 };
            let liftable = next < end
                && (next == page
                    || flags & RESIDENT != 0
                        && flags & (EVICTING | WRITING | DROPPING) == 0
                        && state.engine.page_state(owner, next) == Ok(PageState::Resident));
            let unmapped = next < end && flags & (RESIDENT | EVICTING | WRITING | DROPPING) == 0;
            if liftable {
                state.regions[owner as usize].flags[next as usize] |= REFERENCED;
                run = Some((run.map_or(next, |(start, _)| start), next));
            } else if !unmapped {
                if let Some((start, last)) = run.take() {
                    let address = Self::page_address(state, owner, start);
                    self.uffd
                        .write_protect(address, (last + 1 - start) * PAGE_BYTES as u64, false, true)
                        .expect("lifting write protection");
                }
            }
        }
    }

    /// A missing page: zero-fill or swap in. For a write fault the page is about to be
    /// dirtied, so it is installed writable and the engine told at once (one fault
    /// instead of a missing fault followed by a write-protect fault).
    fn missing_fault(&self, address: u64, write: bool, data: &mut [u8]) {
        self.missing_fault_locked(self.lock_for_fault(), address, write, data);
    }

    fn missing_fault_locked<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        address: u64,
        write: bool,
        data: &mut [u8],
    ) {
        self.counters.missing_faults.fetch_add(1, Relaxed);
        // Faults beyond the budget wait for the evictor (bounded resident set).
        if self.counters.resident_pages.load(Relaxed) >= self.budget_pages + self.slack_pages {
            let waiting = Instant::now();
            while self.counters.resident_pages.load(Relaxed) >= self.budget_pages + self.slack_pages
                && !self.stop.load(Relaxed)
            {
                // Pages already written out wait only for their discard: do it here
                // rather than sleep until an evictor does (direct reclaim). This CPU
                // would idle, while the evictor's may be busy (measured on 2 vCPUs:
                // the one running the evictor, I/O thread and disk interrupts was).
                if !state.to_drop.is_empty() {
                    if let Ok(mut scratch) = self.fault_discard.try_lock() {
                        drop(state);
                        let discarded = self.discard_dropped(&mut scratch);
                        drop(scratch);
                        self.counters.fault_discarded_pages.fetch_add(discarded as u64, Relaxed);
                        state = self.lock_for_fault();
                        continue;
                    }
                }
                self.evict_wanted.notify_one();
                state = self
                    .space_freed
                    .wait_timeout(state, Duration::from_millis(10))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            self.counters.budget_waits.fetch_add(1, Relaxed);
            self.counters.budget_wait_ns.fetch_add(waiting.elapsed().as_nanos() as u64, Relaxed);
        }
        let Some((owner, page)) = Self::locate(&state, address) else {
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        };
        if state.regions[owner as usize].flags[page as usize] & RESIDENT != 0 {
            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
            return;
        }
        let region = &mut state.regions[owner as usize];
        region.sequential_faults =
            if region.last_fault.wrapping_add(1) == page { region.sequential_faults.saturating_add(1) } else { 0 };
        region.last_fault = page;
        let sequential = region.sequential_faults > 0;
        loop {
            let flags = state.regions[owner as usize].flags[page as usize];
            if flags & RESIDENT != 0 {
                // Another handler swapped it in while this one waited.
                let _ = self.uffd.wake(address, PAGE_BYTES as u64);
                return;
            }
            if flags & DROPPING != 0 {
                // Its discard is under way: swap it in once that is done.
                drop(state);
                std::thread::yield_now();
                state = self.lock_for_fault();
                continue;
            }
            let now = self.now();
            let answer = match state.engine.swap_in(owner, page, now) {
                Ok(answer) => answer,
                Err(_) => {
                    // Backpressure: let the evictor complete I/O, then ask again.
                    drop(state);
                    std::thread::sleep(Duration::from_micros(100));
                    state = self.lock_for_fault();
                    continue;
                }
            };
            match answer {
                SwapIn::Resident => {
                    // The engine holds data the pager thinks it dropped: zero-filling would
                    // hand back wrong data, so stop loudly instead.
                    panic!("page {owner}:{page} faulted while the engine says it is resident");
                }
                SwapIn::Zero => {
                    self.counters.zero_fills.fetch_add(1, Relaxed);
                    let around = if sequential { self.plan_zero_fill(&mut state, owner, page) } else { 0 };
                    if write || around > 0 {
                        // A zero page mapped for a write would take a second (copy-on-
                        // write) fault at once: install private zeroed pages instead.
                        let bytes = &ZERO_PAGES[..(1 + around as usize) * PAGE_BYTES];
                        let mapped =
                            self.uffd.copy_pages(address, bytes, false, true).expect("installing zeroed pages");
                        let mapped_pages = mapped / PAGE_BYTES as u64;
                        let now = self.now();
                        for next in page..page + 1 + around {
                            if next < page + mapped_pages {
                                self.mark_resident(&mut state, owner, next);
                            } else {
                                // Not mapped (never expected: no one maps a page without
                                // this lock): never written it stays.
                                state.engine.free(owner, next..next + 1, now).expect("unmapped zero page");
                            }
                        }
                        state.regions[owner as usize].last_fault = page + mapped_pages.max(1) - 1;
                    } else {
                        self.uffd.zeropage(address, PAGE_BYTES as u64, true).expect("zero-filling a page");
                        self.mark_resident(&mut state, owner, page);
                    }
                    return;
                }
                SwapIn::Lost => {
                    self.lost(address);
                    return;
                }
                SwapIn::InFlight => {
                    drop(state);
                    std::thread::sleep(Duration::from_micros(50));
                    state = self.lock_for_fault();
                }
                SwapIn::Read { io, zone, slot } => {
                    let mut ahead = [(0u64, IoId(0)); READAHEAD_PAGES_MAX as usize];
                    let mut buffer = (sequential && self.readahead_pages > 0)
                        .then(|| self.readahead_buffer.try_lock().ok())
                        .flatten();
                    let count = match buffer {
                        Some(_) => self.plan_readahead(&mut state, owner, page, zone, slot, &mut ahead),
                        None => 0,
                    };
                    drop(state);
                    let reading = Instant::now();
                    let result = match buffer.as_mut() {
                        Some(buffer) if count > 0 => {
                            let result = self.read_slots(zone, slot, bytes_mut(&mut buffer[..count + 1]), None);
                            data.copy_from_slice(&buffer[0].0);
                            result
                        }
                        _ => self.read_slots(zone, slot, data, None),
                    };
                    self.counters.fault_read_ns.fetch_add(reading.elapsed().as_nanos() as u64, Relaxed);
                    self.counters.swap_in_reads.fetch_add(1 + count as u64, Relaxed);
                    state = self.lock_for_fault();
                    let now = self.now();
                    if let Some(buffer) = buffer.as_ref() {
                        for (index, &(ahead_page, ahead_io)) in ahead[..count].iter().enumerate() {
                            let bytes = &buffer[index + 1].0;
                            self.install_read_ahead(&mut state, owner, ahead_page, ahead_io, result, bytes, now);
                        }
                        // The run goes on at the first page not read ahead.
                        let region = &mut state.regions[owner as usize];
                        if region.live {
                            region.last_fault = page + count as u64;
                        }
                    }
                    drop(buffer);
                    let outcome = state.engine.read_done(io, result, &[], now).expect("read completion");
                    match outcome {
                        ReadOutcome::SwappedIn { cached } => {
                            // A cached page keeps its slot: map it write-protected so the
                            // first write tells the engine the slot went stale.
                            let protect = cached && !write;
                            if cached && write {
                                state.engine.dirtied(owner, page, now).expect("dirtied on a registered page");
                            }
                            let installing = Instant::now();
                            self.uffd.copy(address, data, protect, true).expect("installing a swapped-in page");
                            self.counters.fault_install_ns.fetch_add(installing.elapsed().as_nanos() as u64, Relaxed);
                            self.mark_resident(&mut state, owner, page);
                            return;
                        }
                        ReadOutcome::Failed => {
                            self.counters.device_errors.fetch_add(1, Relaxed);
                        }
                        ReadOutcome::Lost => {
                            self.lost(address);
                            return;
                        }
                        ReadOutcome::Freed | ReadOutcome::Gc => {
                            let _ = self.uffd.wake(address, PAGE_BYTES as u64);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Asks the engine to swap in the never-written pages right after `page` (at most
    /// [`ZERO_FILL_AROUND_PAGES`], within the budget's slack); returns how many.
    fn plan_zero_fill(&self, state: &mut State, owner: u32, page: u64) -> u64 {
        let room = (self.budget_pages + self.slack_pages)
            .saturating_sub(self.counters.resident_pages.load(Relaxed) + 1)
            .min(ZERO_FILL_AROUND_PAGES);
        let region_pages = state.regions[owner as usize].pages;
        let now = self.now();
        let mut count = 0;
        while count < room {
            let next = page + 1 + count;
            if next >= region_pages
                || state.regions[owner as usize].flags[next as usize] & (RESIDENT | DROPPING) != 0
                || state.engine.page_state(owner, next) != Ok(PageState::Zero)
            {
                break;
            }
            match state.engine.swap_in(owner, next, now) {
                Ok(SwapIn::Zero) => count += 1,
                Ok(other) => panic!("swap-in of never-written page {owner}:{next} answered {other:?}"),
                Err(_) => break,
            }
        }
        count
    }

    /// Asks the engine to swap in the pages after `page` whose slots follow `slot` in
    /// `zone`, so one device read brings them all; returns how many went into `ahead`.
    fn plan_readahead(
        &self,
        state: &mut State,
        owner: u32,
        page: u64,
        zone: u32,
        slot: u32,
        ahead: &mut [(u64, IoId)],
    ) -> usize {
        let capacity = state.engine.config().geometry.zone_capacity_pages as u64;
        let first = zone as u64 * capacity + slot as u64;
        let region_pages = state.regions[owner as usize].pages;
        let now = self.now();
        let mut count = 0;
        for k in 1..=self.readahead_pages as u64 {
            let next = page + k;
            if next >= region_pages
                || slot as u64 + k >= capacity
                || state.regions[owner as usize].flags[next as usize] & (RESIDENT | DROPPING) != 0
                || state.engine.page_state(owner, next) != Ok(PageState::Swapped { slot: first + k })
            {
                break;
            }
            match state.engine.swap_in(owner, next, now) {
                Ok(SwapIn::Read { io, zone: next_zone, slot: next_slot }) => {
                    assert!(
                        next_zone == zone && next_slot as u64 == slot as u64 + k,
                        "the engine reads a swapped page from its own slot"
                    );
                    ahead[count] = (next, io);
                    count += 1;
                }
                Ok(other) => panic!("swap-in of swapped page {owner}:{next} answered {other:?}"),
                Err(_) => break,
            }
        }
        count
    }

    /// Completes a read-ahead page and maps it: write-protected while its slot stays as
    /// swap cache, so it costs no write if it is evicted unwritten.
    #[allow(clippy::too_many_arguments)]
    fn install_read_ahead(
        &self,
        state: &mut State,
        owner: u32,
        page: u64,
        io: IoId,
        result: Result<(), IoError>,
        bytes: &[u8],
        now: u64,
    ) {
        let address = Self::page_address(state, owner, page);
        match state.engine.read_done(io, result, &[], now).expect("read-ahead completion") {
            ReadOutcome::SwappedIn { cached } => {
                self.uffd.copy(address, bytes, cached, true).expect("installing a read-ahead page");
                self.mark_resident(state, owner, page);
            }
            ReadOutcome::Failed => {
                self.counters.device_errors.fetch_add(1, Relaxed);
            }
            ReadOutcome::Lost => self.lost(address),
            ReadOutcome::Freed | ReadOutcome::Gc => {}
        }
    }

    /// The device destroyed the only copy of the page at `address`. Never hand back
    /// wrong data: poison the page (SIGBUS on touch, Linux 6.6+), or without poisoning
    /// stop the process.
    fn lost(&self, address: u64) {
        self.counters.lost_pages.fetch_add(1, Relaxed);
        if self.uffd.features() & features::POISON != 0 {
            self.uffd.poison(address, PAGE_BYTES as u64).expect("poisoning a lost page");
        } else {
            eprintln!("znswap: the device lost the only copy of the page at {address:#x}; this kernel cannot poison it, so the process stops");
            std::process::abort();
        }
    }
}
