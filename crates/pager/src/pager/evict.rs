//! The evictor thread: discards, and eviction rounds whose write-protection and zero
//! checks run outside the lock.

use znswap_pager_core::{
    park_outcome, AddressRange, Digest, DiscardBatch, Evictor, EvictorDid, EvictorShell, ParkOutcome,
};

use super::shell::{CpuTime, Live, Role};
use super::*;
use crate::pagemap::page_at;

/// Whether the page at `address` reads all zeroes. Volatile word reads: a writer may
/// change the page meanwhile (the caller then throws the answer away), so the compiler
/// must not assume it stable. A page with data answers at its first non-zero word.
///
/// # Safety
/// `address` is a page-aligned, mapped, readable page.
unsafe fn page_is_zero(address: u64) -> bool {
    // Reading region memory under the state lock could fault into a handler that takes
    // it (self-paging): never.
    debug_assert!(!holds_state_lock(), "region memory read under the state lock");
    let words = address as *const u64;
    // SAFETY: within the page, per the contract.
    (0..PAGE_BYTES / 8).all(|index| unsafe { words.add(index).read_volatile() } == 0)
}

const _: () = assert!(std::mem::size_of::<AddressRange>() == std::mem::size_of::<libc::iovec>());
const _: () = assert!(std::mem::align_of::<AddressRange>() == std::mem::align_of::<libc::iovec>());

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

/// The evictor's part of its [`Live`] shell: its page-map scanner, with asynchronous
/// write protection.
pub(super) struct EvictorRole {
    scan: Option<crate::pagemap::WrittenScan>,
}

impl Role for EvictorRole {}

impl EvictorShell for Live<'_, EvictorRole> {
    fn park(&mut self, address: u64, shadow: u64) -> ParkOutcome {
        // Nobody waits on the shadow page: no wake-up.
        match self.shared.move_page(shadow, address) {
            Ok(()) => ParkOutcome::Moved,
            // Where the page is decides, not the error (`park_outcome`: this kernel can
            // move a page and fail the call). Rare, so two reads of the page map are
            // cheap enough.
            Err(failure) => {
                let outcome = park_outcome(failure, page_at(address), page_at(shadow));
                if outcome == ParkOutcome::Moved {
                    self.shared.counters.moves_misreported.fetch_add(1, Relaxed);
                }
                outcome
            }
        }
    }

    fn write_protect(&mut self, start: u64, end: u64) -> bool {
        let Some((space, target)) = self.shared.spaces.at(start) else { return false };
        match space.uffd.write_protect(target, end - start, true, false) {
            Ok(()) => true,
            Err(error) => {
                // (Counted if the served process is gone; its pages then stay until the
                // evictor lets it go at rest: `Shared::remove_gone_spaces`.)
                self.shared.served_process_gone(&space, &error);
                false
            }
        }
    }

    fn late_answered(&mut self, owner: u32) -> bool {
        self.shared.late_answered(owner)
    }

    fn page_is_zero(&mut self, address: u64) -> bool {
        if !self.shared.spaces.is_own() {
            // (A process let go meanwhile: its page is nobody's, zero will do.)
            let Some((space, target)) = self.shared.spaces.at(address) else { return true };
            let served = space.served.as_ref().expect("a served space");
            return served.page_is_zero(target, &self.shared.counters.served_process_gone);
        }
        // SAFETY: the page is a victim, mapped (its region cannot be unmapped while
        // `mappings` is held, from the pick to the hand-over) and readable.
        unsafe { page_is_zero(address) }
    }

    fn scan_written(&mut self, start: u64, end: u64, found: &mut dyn FnMut(u64, u64)) {
        let scan = self.role.scan.as_mut().expect("a scanner with asynchronous write protection");
        // It worked at start (`Pager::new`), on a range of regions kept mapped: a failure
        // now is not one the pager can go on from without losing track of writes.
        // (Never protecting: see the trait.)
        if let Err(error) = scan.scan(start, end, false, found) {
            panic!("PAGEMAP_SCAN of {start:#x}..{end:#x}: {error}");
        }
    }

    fn digest(&mut self, address: u64) -> Digest {
        debug_assert!(!holds_state_lock(), "region memory read under the state lock");
        let key = self.shared.digest_key.expect("a digest key with asynchronous write protection");
        // SAFETY: a parked victim's shadow page, mapped until the settling (`mappings`
        // held), and out of the program's reach: nobody writes it.
        let page = unsafe { std::slice::from_raw_parts(address as *const u8, PAGE_BYTES) };
        crate::pager::page_digest(key, page)
    }
}

impl Shared {
    /// The evictor picks and write-protects victims and hands them to the engine; the
    /// I/O thread writes them. So the next batch is prepared while the last is on its way
    /// to the device (one thread doing both spent about 3 µs of CPU and then 3-4 µs
    /// waiting for the append per page, with no overlap). Its steps are the core's
    /// (`znswap_pager_core::Evictor`).
    pub(super) fn evict_loop(&self) {
        let mut evictor = Evictor::new(&mut self.lock());
        let scan = self.digest_key.map(|_| crate::pagemap::WrittenScan::open().expect("PAGEMAP_SCAN worked at start"));
        let mut shell = Live::new(self, EvictorRole { scan });
        let mut did = EvictorDid::default();
        let mut cpu = CpuTime::new(&self.counters.evictor_cpu_ns);
        // A round in flight is finished before the thread stops.
        while !(evictor.at_rest() && self.stop.load(Relaxed)) {
            if evictor.at_rest() && self.tenant_gone.swap(false, Relaxed) {
                debug_assert!(shell.holds_nothing());
                self.remove_gone_spaces();
            }
            let next = evictor.step(&mut shell, &mut did);
            shell.carry_out(next, &mut cpu, &self.counters.evictor_idle_ns);
        }
        debug_assert!(shell.holds_nothing());
        cpu.charge();
    }

    /// `MADV_DONTNEED` over `ranges`: one `process_madvise` per batch where the kernel
    /// allows it on the calling process (6.13+; a TLB flush per batch instead of per page,
    /// about 0.35 instead of 1.2-2.5 µs per scattered page here), else one `madvise` each.
    pub(super) fn madvise_dontneed(&self, ranges: &[AddressRange]) {
        debug_assert!(self.spaces.is_own(), "a served process's pages are dropped by its agent");
        // Kernels cap a vector at IOV_MAX entries.
        const BATCH: usize = 512;
        let mut rest = ranges;
        if let Some(pidfd) = self.self_pidfd {
            while !rest.is_empty() {
                let batch = &rest[..rest.len().min(BATCH)];
                let bytes: usize = batch.iter().map(|r| r.len).sum();
                // SAFETY: the ranges are pages of our own mappings whose contents are on
                // the device (or were all zero); `AddressRange` is laid out as iovec
                // (asserted above), and the array outlives the call.
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
            let rc = unsafe { libc::madvise(range.start as *mut libc::c_void, range.len, libc::MADV_DONTNEED) };
            assert_eq!(rc, 0, "MADV_DONTNEED: {}", std::io::Error::last_os_error());
        }
    }

    /// A served process's agent answered (or the process left): no longer counted in
    /// `agents_starting`.
    pub(super) fn agent_heard(&self, space: &super::spaces::Space) {
        if space.served.as_ref().is_some_and(|served| served.starting.swap(false, Relaxed)) {
            self.agents_starting.fetch_sub(1, Relaxed);
        }
    }

    /// Served processes' pages: each process's agent drops its own (`TenantSpace::discard`),
    /// the ranges of one process at a time, translated into its addresses. (A range never
    /// spans two: each lies in one region.) A process whose agent does not answer in time
    /// is not waited for: its ranges are said late (`DropDelay`), and the evictor takes
    /// the answer when it comes (`late_answered`).
    pub(super) fn discard_served(&self, batch: &mut DiscardBatch) {
        let mut next = 0;
        let mut translated = Vec::with_capacity(batch.ranges().len());
        while let Some(first) = batch.ranges().get(next) {
            let Some((space, _)) = self.spaces.at(first.start as u64) else {
                // Let go meanwhile: its pages are nobody's.
                next += 1;
                continue;
            };
            let same = batch.ranges()[next..].iter().take_while(|range| space.holds(range.start as u64)).count();
            translated.clear();
            translated.extend(
                batch.ranges()[next..next + same]
                    .iter()
                    .map(|range| AddressRange { start: space.to_process(range.start as u64) as usize, len: range.len }),
            );
            match space.served.as_ref().expect("a served space").discard(&translated) {
                // (Answered, or found gone: either way not starting.)
                None => self.agent_heard(&space),
                Some(delay) => {
                    for range in next..next + same {
                        batch.delay(range, delay);
                    }
                }
            }
            next += same;
        }
    }

    /// Whether region `owner`'s process has answered the discard it was late to answer
    /// (or is let go, or gone: nothing more will come).
    fn late_answered(&self, owner: u32) -> bool {
        self.spaces.with_owner(owner).is_none_or(|space| space.served.as_ref().expect("a served space").late_answered())
    }
}
