//! The evictor thread: discards, and eviction rounds whose write-protection and zero
//! checks run outside the lock.

use znswap_pager_core::{park_outcome, Digest, Evictor, EvictorDid, EvictorShell, ParkOutcome, PAGE_BYTES};

use super::install::own_space;
use super::lock_flag::holds_state_lock;
use super::shared::{page_digest, Shared};
use super::shell::{CpuTime, Live, Role};
use crate::pagemap::{page_at, WrittenScan};

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

/// The evictor's part of its [`Live`] shell: its page-map scanner, with asynchronous
/// write protection.
pub(super) struct EvictorRole {
    scan: Option<WrittenScan>,
}

impl Role for EvictorRole {}

impl EvictorShell for Live<'_, EvictorRole> {
    fn park(&mut self, address: u64, shadow: u64) -> ParkOutcome {
        // Nobody waits on the shadow page: no wake-up.
        let install = &self.shared.install;
        match install.move_page(own_space(&self.shared.spaces), shadow, address) {
            Ok(()) => ParkOutcome::Moved,
            // Where the page is decides, not the error (`park_outcome`: this kernel can
            // move a page and fail the call). Rare, so two reads of the page map are
            // cheap enough.
            Err(failure) => {
                let outcome = park_outcome(failure, page_at(address), page_at(shadow));
                if outcome == ParkOutcome::Moved {
                    install.note_move_misreported();
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
                self.shared.spaces.gone(&space, &error);
                false
            }
        }
    }

    fn late_answered(&mut self, owner: u32) -> bool {
        self.shared.spaces.late_answered(owner)
    }

    fn page_is_zero(&mut self, address: u64) -> bool {
        if !self.shared.spaces.is_own() {
            return self.shared.spaces.served_page_is_zero(address);
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
        page_digest(key, page)
    }
}

/// The evictor picks and write-protects victims and hands them to the engine; the I/O
/// thread writes them. So the next batch is prepared while the last is on its way to the
/// device (one thread doing both picked a batch, then waited for its append, with no
/// overlap; figures: docs/measurements/2026-11-pager.md). Its steps are the core's
/// (`znswap_pager_core::Evictor`).
pub(super) fn evict_loop(shared: &Shared) {
    let mut evictor = Evictor::new(&mut shared.lock());
    let scan = shared.digest_key.map(|_| WrittenScan::open().expect("PAGEMAP_SCAN worked at start"));
    let mut shell = Live::new(shared, EvictorRole { scan });
    let mut did = EvictorDid::default();
    let mut cpu = CpuTime::new(&shared.times.evictor_cpu_ns);
    // A round in flight is finished before the thread stops.
    while !(evictor.at_rest() && shared.wakers.stopping()) {
        if evictor.at_rest() && shared.spaces.take_gone_seen() {
            debug_assert!(shell.holds_nothing());
            shared.remove_gone_spaces();
        }
        let next = evictor.step(&mut shell, &mut did);
        shell.carry_out(next, &mut cpu, &shared.times.evictor_idle_ns);
    }
    debug_assert!(shell.holds_nothing());
    cpu.charge();
}
