//! What an unmodified program does to paged memory (`znswap run`): discards
//! (`madvise`), and fork.
//!
//! **Discards.** The program's `madvise(MADV_DONTNEED)` (or `FREE`/`REMOVE`) on a region
//! reaches `Pager::program_discard` (the preload library wraps `madvise`), which tells
//! the core first (`discard_range`: slots freed, mapped pages `Removed`) and zaps the
//! range after, as the kernel does after its REMOVE event is read. The pager's own
//! discards are plain `madvise` calls that nobody reports, so userfaultfd's REMOVE event
//! is not needed (it would block each of them until a handler read it).
//!
//! **Fork.** The child gets a copy-on-write copy of the whole process, the pager core
//! frozen at the fork included, but not the pager's threads nor the userfaultfd
//! registration (no `UFFD_FEATURE_EVENT_FORK`: the parent's handlers would have to keep
//! the child's view of every page apart from their own). So the child serves its own
//! faults: one thread asks its frozen core where each page was at the fork
//! (`child_page`) and reads it from the device itself. Zones are immutable until reset,
//! and the parent holds back the reset of every zone the child may read (`fork_hold`)
//! until the child and the children it forked are gone or have exec'd: a pipe whose
//! write end only they keep (close-on-exec) reads end-of-file then.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, RwLock};

use znswap_pager_core::{ChildPage, ForkHold, PAGE_BYTES};

use super::shared::{spawn_thread, Shared};
use super::spaces::TenantId;
use crate::config::{EXIT_DAEMONIZED, EXIT_PAGER_FAILED};
use crate::page_buffers::AlignedPage;
use crate::pager_thread::PagerThread;
use crate::tenant::ForkFill;
use crate::uffd::{features, register_mode, Event as UffdEvent, Userfaultfd};

/// MADV_DONTNEED by system call: the preload library's `madvise` wrapper is what
/// resolves `libc::madvise` in a program run under `znswap run`.
fn zap(start: u64, len: u64) -> i32 {
    // SAFETY: discarding a range of the program's own memory, as it asked.
    unsafe { libc::syscall(libc::SYS_madvise, start, len, libc::MADV_DONTNEED) as i32 }
}

/// The program discards `[start, start + len)` of a region (`Pager::program_discard`).
pub(super) fn program_discard(shared: &Shared, start: u64, len: u64) -> i32 {
    program_discard_then(shared, start, len, || zap(start, len))
}

/// Served process `tenant` discards `[start, start + len)` (its addresses), zapped
/// by `zap` (which returns what `madvise` does: the process itself zaps, asked over
/// the wire). What lies outside its arena is not the pager's: only zapped. Returns
/// what `zap` does.
///
/// The pager takes the discard first, then lets the state lock go before the zap, as
/// for a REMOVE event (`PagerCore::discard_range` without `zap_under_lock`: the
/// pager never trusts what was mapped there again). Held through the zap, the lock
/// waited on the process: one stopped between the request and its zap (SIGSTOP, a
/// debugger), or one that never zapped, stopped every process's faults.
pub(super) fn tenant_discard_then(
    shared: &Shared,
    tenant: TenantId,
    start: u64,
    len: u64,
    zap: impl FnOnce() -> i32,
) -> i32 {
    let space = shared.spaces.with_id(tenant);
    let (Some(space), Some(end)) = (space, start.checked_add(len)) else { return zap() };
    let (base, bytes) = space.arena();
    let (first, last) = (start.max(base), end.min(base + bytes));
    // (A range the kernel refuses, unaligned, is only zapped: `madvise` says so.)
    if let (Some(core), true, true) = (space.to_core(first), first < last, first % PAGE_BYTES as u64 == 0) {
        let mut state = shared.lock();
        let now = shared.now();
        state.discard_range(core, core + (last - first), now, false);
    }
    zap()
}

/// `program_discard` with the zap done by `zap` (which returns what `madvise` does),
/// for the pager's own process.
pub(super) fn program_discard_then(shared: &Shared, start: u64, len: u64, zap: impl FnOnce() -> i32) -> i32 {
    // What the kernel refuses must leave the core as it was: a range that wraps
    // would otherwise discard (and lose) every page up to the region's end first.
    if start % PAGE_BYTES as u64 != 0 || start.checked_add(len).is_none() {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    // The zap under the same lock hold: no fault maps a page of the range between
    // the two, so the pager's view stays the kernel's (and the region is parked).
    let mut state = shared.lock();
    let now = shared.now();
    state.discard_range(start, start.saturating_add(len), now, true);
    let rc = zap();
    drop(state);
    rc
}

/// What a forked child needs of the pager's configuration.
#[derive(Clone, Copy)]
pub(super) struct ForkHooks {
    /// `PagerConfig::thread_start` and `PagerConfig::child_orphaned`.
    pub(super) thread_start: Option<fn()>,
    pub(super) child_orphaned: Option<fn()>,
}

/// Forks the process with `fork` (the real `fork()`), giving the child a snapshot of
/// the paged memory served by a thread of its own (`Pager::fork`). Returns what `fork`
/// returns.
///
/// # Safety
/// As `fork()` in a threaded program: the child may only rely on the calling thread.
pub(super) unsafe fn fork(shared: &Arc<Shared>, hooks: ForkHooks, fork: impl FnOnce() -> libc::pid_t) -> libc::pid_t {
    let mut ends = [0 as RawFd; 2];
    if libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return -1;
    }
    let [eof, keep] = ends;
    // No device command in flight (the child would inherit its locks taken), no
    // decision half made (the child's core is consistent).
    let gate = shared.storage.close_gate();
    let mut state = shared.lock();
    let hold = state.fork_hold();
    let parent = libc::getpid();
    let pid = fork();
    if pid == 0 {
        // The child: this thread holds both locks, and no other thread exists.
        shared.colocation.restore_after_fork();
        shared.tids.forget();
        drop(state);
        drop(gate);
        libc::close(eof);
        // `keep` stays open until this child and its forks exit or exec.
        let _ = keep;
        std::mem::forget(hold);
        if let Err(error) = serve_child(shared, hooks, parent) {
            eprintln!("znswap: the forked child cannot page in its memory ({error}); it stops");
            libc::_exit(EXIT_PAGER_FAILED);
        }
        return 0;
    }
    libc::close(keep);
    if pid < 0 {
        state.fork_release(hold, shared.now());
        drop(state);
        libc::close(eof);
        return pid;
    }
    drop(state);
    drop(gate);
    if shared.forks.add(eof, hold) {
        let _ = spawn_thread(shared, "znswap-forks".into(), "fork watcher", hooks.thread_start, watch_forks);
    }
    pid
}

/// In the child: registers the regions with a userfaultfd of its own and starts the
/// thread that resolves its faults from its frozen core.
unsafe fn serve_child(shared: &Arc<Shared>, hooks: ForkHooks, parent: libc::pid_t) -> Result<(), String> {
    let uffd = Userfaultfd::new(0, features::POISON).map_err(|error| error.to_string())?;
    for (base, len) in shared.lock().region_ranges() {
        uffd.register(base, len, register_mode::MISSING).map_err(|error| error.to_string())?;
    }
    // A `PagerThread` (see pager_thread.rs: std's spawn and glibc's cached stacks
    // would put the new thread's first allocations in paged memory, a fault only it
    // could serve). Detached: it runs until the child ends.
    //
    // Its start may still touch paged memory before it can serve a fault: glibc's
    // thread start reads the program's locale (`__ctype_init`), which the program's
    // `setlocale` put in the paged heap (seen: Python forking after 100 MiB of data,
    // its child's fault thread stuck in `__ctype_init` on a swapped-out page). So
    // this thread serves the child's faults until the new one has started, then
    // hands over.
    let uffd = Arc::new(uffd);
    let started = Arc::new(AtomicBool::new(false));
    let handed_over = Arc::new(AtomicBool::new(false));
    let (child, orphaned) = (shared.clone(), hooks.child_orphaned);
    let thread = (uffd.clone(), started.clone(), handed_over.clone());
    PagerThread::spawn("znswap-child", "forked child's fault thread", hooks.thread_start, move || {
        let (uffd, started, handed_over) = thread;
        started.store(true, Release);
        while !handed_over.load(Acquire) {
            std::thread::yield_now();
        }
        serve_child_faults(&child, &uffd, parent, orphaned)
    })
    .map_err(|error| format!("starting its fault thread: {error}"))?;
    let mut page = Box::new(AlignedPage::ZERO);
    while !started.load(Acquire) {
        if uffd.poll(1).map_err(|error| format!("polling its userfaultfd: {error}"))? {
            serve_child_events(shared, &uffd, &mut page);
        }
    }
    handed_over.store(true, Release);
    Ok(())
}

/// A served process's heap as it was at a fork, for its child (`docs/daemon.md`): where
/// each page then on the device was, the zones holding them kept from reset until
/// released (`release`, or dropped). The child's own server asks for those pages by
/// address (`read`); every other page it misses was zero.
pub struct ForkSnapshot {
    shared: Arc<Shared>,
    /// The arena's first address in the process, and its length.
    arena: (u64, u64),
    /// By page index, sorted: pages on the device, or lost.
    pages: Vec<(u64, ChildPage)>,
    /// Pages holding a poison marker, which the child's page table copies.
    poisoned: Vec<u64>,
    /// The engine tenant the forking process is charged to.
    tenant: u32,
    /// Taken at release; reads hold it shared, so none runs across a reset.
    hold: RwLock<Option<ForkHold>>,
}

impl ForkSnapshot {
    /// The page at `address` (in the process) as it was at the fork, read into `page`
    /// when it was on the device.
    pub fn read(&self, address: u64, page: &mut [u8]) -> ForkFill {
        assert_eq!(page.len(), PAGE_BYTES);
        let (start, bytes) = self.arena;
        if address < start || address - start >= bytes {
            return ForkFill::Zero;
        }
        let index = (address - start) / PAGE_BYTES as u64;
        let Ok(at) = self.pages.binary_search_by_key(&index, |&(page, _)| page) else { return ForkFill::Zero };
        let held = self.hold.read().unwrap_or_else(|p| p.into_inner());
        if held.is_none() {
            return ForkFill::Lost;
        }
        match self.pages[at].1 {
            ChildPage::Slot { zone, slot, sealed } => {
                let storage = &self.shared.storage;
                let read = storage.read_slots(zone, slot, page, None);
                match read.and_then(|()| storage.open_page(page, sealed.as_ref())) {
                    Ok(()) => ForkFill::Data,
                    Err(_) => ForkFill::Lost,
                }
            }
            ChildPage::Zero | ChildPage::NotOurs => ForkFill::Zero,
            // (No parking under a daemon: a served process has no shadow.)
            ChildPage::Lost | ChildPage::Shadow { .. } => ForkFill::Lost,
        }
    }

    /// The engine tenant the forking process is charged to (its child's is the same).
    pub fn tenant(&self) -> u32 {
        self.tenant
    }

    /// The arena's first address in the process, and its length.
    pub(crate) fn arena(&self) -> (u64, u64) {
        self.arena
    }

    /// Where each page then on the device (or lost) was, by page index.
    pub(crate) fn pages(&self) -> &[(u64, ChildPage)] {
        &self.pages
    }

    /// Pages holding a poison marker at the fork.
    pub(crate) fn poisoned(&self) -> &[u64] {
        &self.poisoned
    }

    /// The child is gone or has exec'd: the zones held may be reset. Reads after it
    /// answer `Lost`.
    pub fn release(&self) {
        let hold = self.hold.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(hold) = hold {
            let now = self.shared.now();
            self.shared.lock().fork_release(hold, now);
        }
    }
}

impl Drop for ForkSnapshot {
    fn drop(&mut self) {
        self.release();
    }
}

/// Served process `tenant` is about to fork: its snapshot (`Pager::tenant_fork_snapshot`).
pub(super) fn tenant_fork_snapshot(shared: &Arc<Shared>, tenant: TenantId) -> Option<ForkSnapshot> {
    let space = shared.spaces.with_id(tenant)?;
    let mut state = shared.lock();
    let hold = state.fork_hold();
    let pages = state.child_pages(space.owner);
    let poisoned = state.poisoned_pages(space.owner);
    drop(state);
    let hold = RwLock::new(Some(hold));
    let arena = space.arena();
    Some(ForkSnapshot { shared: shared.clone(), arena, pages, poisoned, tenant: space.tenant, hold })
}

/// Releases each fork's hold once its pipe reads end-of-file. Ends when no fork is left
/// to watch (the next fork starts another).
fn watch_forks(shared: &Shared) {
    loop {
        let Some(watched) = shared.forks.watched() else { return };
        let mut polls: Vec<libc::pollfd> =
            watched.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: polls descriptors this pager owns.
        unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 100) };
        let ended: Vec<RawFd> =
            polls.iter().filter(|poll| poll.revents & (libc::POLLHUP | libc::POLLIN) != 0).map(|p| p.fd).collect();
        if ended.is_empty() {
            continue;
        }
        let holds = shared.forks.take_ended(&ended);
        let mut state = shared.lock();
        for hold in holds {
            state.fork_release(hold, shared.now());
        }
    }
}

/// The child's fault handler: each missing fault is served from where the page was
/// at the fork. A child whose parent exits has daemonized: it stops with a message
/// (its snapshot would outlive the pager that keeps it readable).
fn serve_child_faults(shared: &Shared, uffd: &Userfaultfd, parent: libc::pid_t, orphaned: Option<fn()>) {
    let mut page = Box::new(AlignedPage::ZERO);
    loop {
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            eprintln!(
                "znswap run: the program daemonized (pid {} outlived the process that forked it): \
                     znswap pages a program only in the foreground; run it without its daemon option",
                std::process::id()
            );
            if let Some(orphaned) = orphaned {
                orphaned();
            }
            // SAFETY: ends this child at once.
            unsafe { libc::_exit(EXIT_DAEMONIZED) };
        }
        match uffd.poll(100) {
            Ok(true) => serve_child_events(shared, uffd, &mut page),
            Ok(false) => continue,
            Err(error) => panic!("polling the child's userfaultfd: {error}"),
        }
    }
}

/// Resolves the child's fault events queued on `uffd`, reading swapped pages into
/// `page`.
fn serve_child_events(shared: &Shared, uffd: &Userfaultfd, page: &mut AlignedPage) {
    while let Some(event) = uffd.read_event().expect("reading the child's userfaultfd") {
        let UffdEvent::PageFault { address, .. } = event else { continue };
        let address = address / PAGE_BYTES as u64 * PAGE_BYTES as u64;
        let source = shared.lock().child_page(address);
        let installed = match source {
            ChildPage::NotOurs => uffd.wake(address, PAGE_BYTES as u64).map(|_| true),
            ChildPage::Zero => uffd.zeropage(address, PAGE_BYTES as u64, true),
            ChildPage::Slot { zone, slot, sealed } => match shared
                .storage
                .read_slots(zone, slot, &mut page.0, None)
                .and_then(|()| shared.storage.open_page(&mut page.0, sealed.as_ref()))
            {
                Ok(()) => uffd.copy(address, &page.0, false, true),
                Err(_) => uffd.poison(address, PAGE_BYTES as u64).map(|_| true),
            },
            ChildPage::Lost => uffd.poison(address, PAGE_BYTES as u64).map(|_| true),
            ChildPage::Shadow { address: shadow } => {
                // SAFETY: the child's copy of a parked page's shadow page, mapped at
                // the fork (copy-on-write) and touched by nobody in the child.
                let source = unsafe { std::slice::from_raw_parts(shadow as *const u8, PAGE_BYTES) };
                page.0.copy_from_slice(source);
                uffd.copy(address, &page.0, false, true)
            }
        };
        if let Err(error) = installed {
            panic!("serving the child's fault at {address:#x} ({source:?}): {error}");
        }
    }
}
