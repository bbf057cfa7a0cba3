//! Carrying out the core's actions on the page tables (`Action`: `UFFDIO_COPY`,
//! `ZEROPAGE`, `WRITEPROTECT` off, `POISON`, moves back from the inactive list, wakes),
//! under the state lock that produced them, and the wake-ups they owe, given once that
//! lock is released.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use znswap_pager_core::{
    unpark_next, Action, Actions, CopyFrom, MoveFailure, UnparkNext, PAGE_BYTES, ZERO_FILL_AROUND_PAGES,
};

use super::spaces::{Space, Spaces};
use crate::page_buffers::PageBuffers;
use crate::uffd::{features, UffdError};

/// Zeroes for `CopyFrom::Zeros`: a fault maps at most the faulting page and the
/// never-written pages after it.
pub(super) static ZERO_PAGES: [u8; (ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES] =
    [0; (ZERO_FILL_AROUND_PAGES as usize + 1) * PAGE_BYTES];

/// What the installs need beyond the spaces, and what they count.
pub(super) struct Installer {
    /// The read-ahead cache's pages (`PagerCore::readahead_cache_pages`). Its pages are
    /// owned one by one as the core says: by the fault whose read the core claimed them
    /// for, until that read's completion; else read only under the state lock, by the
    /// `CopyFrom::Cache` of a fault it serves.
    readahead_cache: PageBuffers,
    /// Faults are resolved by the faulting threads (`FaultMode::SelfPaging`): nobody
    /// ever waits on the descriptor, so no wake is given. (Not from `uffd.features()`:
    /// the kernel reports every feature it supports there, asked for or not.)
    self_paging: bool,
    /// Asynchronous write protection is on: empty entries may hold write-protect
    /// markers (`clear_wp_marker`).
    wp_markers: bool,
    /// `PagerConfig::misreport_moves_every`, and the moves done so far while it is set.
    misreport_moves_every: u64,
    moves_done: AtomicU64,
    /// Parked pages brought back by a copy; pages shared with a fork's child made the
    /// parent's; write-protect markers cleared; moves done though the call failed.
    unparks_copied: AtomicU64,
    pages_unshared: AtomicU64,
    wp_markers_cleared: AtomicU64,
    moves_misreported: AtomicU64,
}

/// What the installer has counted (`PagerStats`' fields of the same names).
pub(super) struct InstallCounts {
    pub(super) unparks_copied: u64,
    pub(super) pages_unshared: u64,
    pub(super) wp_markers_cleared: u64,
    pub(super) moves_misreported: u64,
}

impl Installer {
    pub(super) fn new(
        readahead_cache_pages: usize,
        self_paging: bool,
        wp_markers: bool,
        misreport_moves_every: u32,
    ) -> Installer {
        Installer {
            readahead_cache: PageBuffers::new(readahead_cache_pages),
            self_paging,
            wp_markers,
            misreport_moves_every: misreport_moves_every as u64,
            moves_done: AtomicU64::new(0),
            unparks_copied: AtomicU64::new(0),
            pages_unshared: AtomicU64::new(0),
            wp_markers_cleared: AtomicU64::new(0),
            moves_misreported: AtomicU64::new(0),
        }
    }

    pub(super) fn counts(&self) -> InstallCounts {
        InstallCounts {
            unparks_copied: self.unparks_copied.load(Relaxed),
            pages_unshared: self.pages_unshared.load(Relaxed),
            wp_markers_cleared: self.wp_markers_cleared.load(Relaxed),
            moves_misreported: self.moves_misreported.load(Relaxed),
        }
    }

    /// A move the kernel did though the call failed, found by the page map.
    pub(super) fn note_move_misreported(&self) {
        self.moves_misreported.fetch_add(1, Relaxed);
    }

    /// Read-ahead cache pages `first..first + pages`, for a fault's read.
    ///
    /// # Safety
    /// The core claimed them for the caller's read (until its completion), or the
    /// caller holds the state lock and serves a fault from them.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn cache_pages_mut(&self, first: usize, pages: usize) -> &mut [u8] {
        // SAFETY: per the contract.
        unsafe { self.readahead_cache.pages_mut(first, pages) }
    }

    /// Carries out the core's actions, under the lock that produced them. `buffer`: the
    /// fault's page, for `CopyFrom::FaultPage`. The threads waiting on the pages these
    /// actions map are not woken here but noted in `wakes`, to be woken once the lock is
    /// released: a wake-up sends an inter-processor interrupt, a VM exit in a virtual
    /// machine, which would otherwise lengthen the lock's hold.
    pub(super) fn run(&self, spaces: &Spaces, actions: &mut Actions, buffer: &[u8], wakes: &mut Wakes) {
        for action in actions.drain() {
            match action {
                Action::Copy { address, pages, from, write_protect } => {
                    let bytes = pages as usize * PAGE_BYTES;
                    let source = match from {
                        CopyFrom::FaultPage => &buffer[..bytes],
                        // SAFETY: under the state lock, and the core names a page no read
                        // has claimed (a hit's entry, or the completing read's own page).
                        CopyFrom::Cache { page } => unsafe { &self.readahead_cache.page(page as u64)[..] },
                        CopyFrom::Zeros => &ZERO_PAGES[..bytes],
                        // SAFETY: a parked page's shadow page, mapped until its discard,
                        // which the core orders after this (and never on this path).
                        CopyFrom::Shadow { address } => unsafe {
                            std::slice::from_raw_parts(address as *const u8, bytes)
                        },
                    };
                    let Some((space, target)) = spaces.at(address) else { continue };
                    let mapped = match space.uffd.copy_pages(target, source, write_protect, false) {
                        Err(error) if spaces.gone(&space, &error) => continue,
                        result => result.expect("installing pages"),
                    };
                    // Only the pager maps region pages, and only under this lock.
                    assert_eq!(mapped, bytes as u64, "pages at {address:#x} were mapped behind the pager's back");
                    wakes.add(self, spaces, address, bytes as u64);
                }
                // (Only for forks of this process: never emitted for a served one.)
                Action::Unshare { address } => {
                    // SAFETY: a page of a live region, mapped (the core says so under this
                    // lock, which the program's discards take too): the kernel takes a
                    // write fault for us without changing a byte.
                    let rc =
                        unsafe { libc::madvise(address as *mut libc::c_void, PAGE_BYTES, libc::MADV_POPULATE_WRITE) };
                    // (Kernels before 5.14 refuse it: the page then stays until written.)
                    if rc == 0 {
                        self.pages_unshared.fetch_add(1, Relaxed);
                    }
                }
                Action::ZeroPage { address } => {
                    let Some((space, target)) = spaces.at(address) else { continue };
                    let mapped = match space.uffd.zeropage(target, PAGE_BYTES as u64, false) {
                        Err(error) if spaces.gone(&space, &error) => continue,
                        result => result.expect("zero-filling a page"),
                    } || self.clear_wp_marker(&space, target)
                        && space.uffd.zeropage(target, PAGE_BYTES as u64, false).expect("zero-filling a page");
                    assert!(mapped, "the page at {address:#x} was mapped behind the pager's back");
                    wakes.add(self, spaces, address, PAGE_BYTES as u64);
                }
                Action::Unprotect { address, pages } => {
                    let bytes = pages * PAGE_BYTES as u64;
                    let Some((space, target)) = spaces.at(address) else { continue };
                    match space.uffd.write_protect(target, bytes, false, false) {
                        Err(error) if spaces.gone(&space, &error) => continue,
                        result => result.expect("lifting write protection"),
                    }
                    wakes.add(self, spaces, address, bytes);
                }
                Action::Poison { address } => {
                    let Some((space, target)) = spaces.at(address) else { continue };
                    if space.uffd.features() & features::POISON == 0 {
                        eprintln!("znswap: the device lost the only copy of the page at {target:#x}; this kernel cannot poison it, so the process stops");
                        std::process::abort();
                    }
                    if let Err(error) = space.uffd.poison(target, PAGE_BYTES as u64) {
                        if spaces.gone(&space, &error) {
                            continue;
                        }
                        assert!(
                            error.errno() == Some(libc::EEXIST) && self.clear_wp_marker(&space, target),
                            "poisoning the lost page at {target:#x}: {error}"
                        );
                        space.uffd.poison(target, PAGE_BYTES as u64).expect("poisoning a lost page");
                    }
                }
                Action::Wake { address } => wakes.add(self, spaces, address, PAGE_BYTES as u64),
                Action::Unpark { address, shadow } => {
                    self.unpark(own_space(spaces), address, shadow);
                    wakes.add(self, spaces, address, PAGE_BYTES as u64);
                }
            }
        }
    }

    /// Moves a parked page back from its shadow page (its faulting threads are woken by
    /// the caller). A page shared with a fork's child since it was parked cannot move
    /// (`EBUSY`): it is copied, and the shadow page discarded. An empty shadow page
    /// means the parked page's data is gone: a broken invariant, never answered with an
    /// empty page (its toucher would fault again forever).
    fn unpark(&self, own: &Space, address: u64, shadow: u64) {
        let page = PAGE_BYTES as u64;
        let mut retried = false;
        loop {
            let Err(failure) = self.move_page(own, address, shadow) else { return };
            // Under the state lock nothing else maps either page: where the page is now
            // says what the move did (this kernel can move a page and fail the call).
            match unpark_next(failure, crate::pagemap::page_at(address), crate::pagemap::page_at(shadow), retried) {
                UnparkNext::Done => {
                    self.note_move_misreported();
                    return;
                }
                UnparkNext::ClearMarker if self.clear_wp_marker(own, address) => retried = true,
                UnparkNext::ClearMarker | UnparkNext::Copy => break,
                UnparkNext::Gone => panic!(
                    "the parked page at {address:#x} is gone: neither it nor its shadow page {shadow:#x} holds a \
                     page after a failed move back ({failure:?}; a pager bug)"
                ),
            }
        }
        // SAFETY: the shadow page is the parked page's, mapped (the core said so, and the
        // page map agreed just now) and ours; only the pager reads or discards it, under
        // this lock.
        let source = unsafe { std::slice::from_raw_parts(shadow as *const u8, PAGE_BYTES) };
        let mapped = own.uffd.copy_pages(address, source, false, false).expect("copying a parked page back");
        assert_eq!(mapped, page, "the page at {address:#x} was mapped behind the pager's back");
        self.unparks_copied.fetch_add(1, Relaxed);
        // SAFETY: as above; its content is the page's, now mapped at `address`.
        let rc = unsafe { libc::madvise(shadow as *mut libc::c_void, PAGE_BYTES, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0, "MADV_DONTNEED of a shadow page: {}", std::io::Error::last_os_error());
    }

    /// `UFFDIO_MOVE` of one page in the pager's own process, waking nobody; how it
    /// failed, if it did. With `PagerConfig::misreport_moves_every`, some moves done are
    /// reported failed, as Linux 6.18 now and then does (the rules that follow are
    /// tested so).
    pub(super) fn move_page(&self, own: &Space, destination: u64, source: u64) -> Result<(), MoveFailure> {
        let page = PAGE_BYTES as u64;
        match own.uffd.move_pages(destination, source, page, false) {
            Ok(moved) if moved == page => {
                let every = self.misreport_moves_every;
                if every > 0 && self.moves_done.fetch_add(1, Relaxed) % every == every - 1 {
                    return Err(MoveFailure::Exists);
                }
                Ok(())
            }
            Ok(_) => Err(MoveFailure::Other),
            Err(error) => Err(move_failure(&error)),
        }
    }

    /// With asynchronous write protection, protecting an entry with nothing mapped leaves
    /// a write-protect marker there (`WP_ASYNC` turns on `WP_UNPOPULATED`), and
    /// `UFFDIO_ZEROPAGE`, `UFFDIO_MOVE` and `UFFDIO_POISON` refuse to land on one
    /// (`EEXIST`; `UFFDIO_COPY` overwrites it). The evictor protects only mapped pages, but
    /// the program's discard may empty one between the pick and the protection. Lifting
    /// the protection of the entry drops the marker (and changes nothing for a mapped
    /// page, which an action landing here does not expect anyway). True if it could
    /// have been one.
    fn clear_wp_marker(&self, space: &Space, address: u64) -> bool {
        if !self.wp_markers {
            return false;
        }
        self.wp_markers_cleared.fetch_add(1, Relaxed);
        space.uffd.write_protect(address, PAGE_BYTES as u64, false, false).is_ok()
    }
}

/// This process's own space, for what is done only there (parking, forks).
pub(super) fn own_space(spaces: &Spaces) -> &Space {
    spaces.own_space().expect("done in the pager's own process only (never for a served one)")
}

/// A failed `UFFDIO_MOVE`'s kind, for the core's rules (`park_outcome`, `unpark_next`).
fn move_failure(error: &UffdError) -> MoveFailure {
    match error.errno() {
        Some(libc::ENOENT) => MoveFailure::NoEntry,
        Some(libc::EEXIST) => MoveFailure::Exists,
        _ => MoveFailure::Other,
    }
}

/// Wakes the threads waiting on core addresses `start..start + len`. (A range nobody
/// waits on any more wakes nobody: nothing to report.)
fn wake(spaces: &Spaces, start: u64, len: u64) {
    if let Some((space, target)) = spaces.at(start) {
        let _ = space.uffd.wake(target, len);
    }
}

/// Wake-ups owed to threads waiting on pages an actor mapped under the state lock, given
/// once it is released (`Installer::run`). Fixed room, no allocation: an action list
/// that maps more ranges than that wakes the oldest at once.
#[derive(Default)]
pub(super) struct Wakes {
    ranges: [(u64, u64); WAKES_MAX],
    len: usize,
}

const WAKES_MAX: usize = 8;

impl Wakes {
    fn add(&mut self, installer: &Installer, spaces: &Spaces, start: u64, len: u64) {
        // Self-paging: a fault raises SIGBUS and nobody ever waits on the descriptor, so
        // a wake would be a system call for nothing.
        if installer.self_paging {
            return;
        }
        if self.len == WAKES_MAX {
            let (start, len) = self.ranges[0];
            wake(spaces, start, len);
            self.ranges.copy_within(1.., 0);
            self.len -= 1;
        }
        self.ranges[self.len] = (start, len);
        self.len += 1;
    }

    /// Wakes every thread owed a wake-up.
    pub(super) fn give(&mut self, spaces: &Spaces) {
        for &(start, len) in &self.ranges[..self.len] {
            wake(spaces, start, len);
        }
        self.len = 0;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
