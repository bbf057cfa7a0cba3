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
use std::sync::atomic::Ordering::{Acquire, Release};

use znswap_pager_core::{ChildPage, ForkHold};

use super::*;
use crate::page_buffers::AlignedPage;
use crate::uffd::Event as UffdEvent;

/// Forks whose children may still read the device.
#[derive(Default)]
pub(crate) struct Forks {
    /// Each fork's end-of-file pipe and its hold.
    live: Vec<(RawFd, ForkHold)>,
    watcher: bool,
}

/// MADV_DONTNEED by system call: the preload library's `madvise` wrapper is what
/// resolves `libc::madvise` in a program run under `znswap run`.
fn zap(start: u64, len: u64) -> i32 {
    // SAFETY: discarding a range of the program's own memory, as it asked.
    unsafe { libc::syscall(libc::SYS_madvise, start, len, libc::MADV_DONTNEED) as i32 }
}

impl Pager {
    /// The program discards `[start, start + len)` of a region: its pages read back
    /// zero from now on and their slots are freed. Returns what `madvise` returns.
    pub fn program_discard(&self, start: u64, len: u64) -> i32 {
        self.program_discard_then(start, len, || zap(start, len))
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
    pub fn tenant_discard_then(&self, tenant: TenantId, start: u64, len: u64, zap: impl FnOnce() -> i32) -> i32 {
        let space = self.shared.spaces.served_now().iter().find(|space| space.id == tenant).cloned();
        let (Some(space), Some(end)) = (space, start.checked_add(len)) else { return zap() };
        let (base, bytes) = space.arena();
        let (first, last) = (start.max(base), end.min(base + bytes));
        // (A range the kernel refuses, unaligned, is only zapped: `madvise` says so.)
        if let (Some(core), true, true) = (space.to_core(first), first < last, first % PAGE_BYTES as u64 == 0) {
            let mut state = self.shared.lock();
            let now = self.shared.now();
            state.discard_range(core, core + (last - first), now, false);
        }
        zap()
    }

    /// `program_discard` with the zap done by `zap` (which returns what `madvise`
    /// does), for the pager's own process.
    pub fn program_discard_then(&self, start: u64, len: u64, zap: impl FnOnce() -> i32) -> i32 {
        // What the kernel refuses must leave the core as it was: a range that wraps
        // would otherwise discard (and lose) every page up to the region's end first.
        if start % PAGE_BYTES as u64 != 0 || start.checked_add(len).is_none() {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::EINVAL };
            return -1;
        }
        // The zap under the same lock hold: no fault maps a page of the range between
        // the two, so the pager's view stays the kernel's (and the region is parked).
        let mut state = self.shared.lock();
        let now = self.shared.now();
        state.discard_range(start, start.saturating_add(len), now, true);
        let rc = zap();
        drop(state);
        rc
    }

    /// Forks the process with `fork` (the real `fork()`), giving the child a snapshot
    /// of the paged memory served by a thread of its own. Returns what `fork` returns.
    /// In the child, allocations must stay out of paged memory until this returns (the
    /// preload library's fork wrapper sees to it).
    ///
    /// # Safety
    /// As `fork()` in a threaded program: the child may only rely on the calling thread.
    pub unsafe fn fork(&self, fork: impl FnOnce() -> libc::pid_t) -> libc::pid_t {
        let shared = &*self.shared;
        let mut ends = [0 as RawFd; 2];
        if libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return -1;
        }
        let [eof, keep] = ends;
        // No device command in flight (the child would inherit its locks taken), no
        // decision half made (the child's core is consistent).
        let gate = shared.device_gate.write().unwrap_or_else(|p| p.into_inner());
        let mut state = shared.lock();
        let hold = state.fork_hold();
        let parent = libc::getpid();
        let pid = fork();
        if pid == 0 {
            // The child: this thread holds both locks, and no other thread exists.
            shared.colocation.restore_after_fork();
            shared.forget_pager_threads();
            drop(state);
            drop(gate);
            libc::close(eof);
            // `keep` stays open until this child and its forks exit or exec.
            let _ = keep;
            std::mem::forget(hold);
            if let Err(error) = self.serve_child(parent) {
                eprintln!("znswap: the forked child cannot page in its memory ({error}); it stops");
                libc::_exit(crate::run_env::EXIT_PAGER_FAILED);
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
        let start_watcher = {
            let mut forks = shared.forks.lock().unwrap_or_else(|p| p.into_inner());
            forks.live.push((eof, hold));
            !std::mem::replace(&mut forks.watcher, true)
        };
        if start_watcher {
            let _ = spawn_thread(
                &self.shared,
                "znswap-forks".into(),
                "fork watcher",
                self.thread_start,
                Shared::watch_forks,
            );
        }
        pid
    }

    /// In the child: registers the regions with a userfaultfd of its own and starts the
    /// thread that resolves its faults from its frozen core.
    unsafe fn serve_child(&self, parent: libc::pid_t) -> Result<(), String> {
        let uffd = Userfaultfd::new(0, features::POISON).map_err(|error| error.to_string())?;
        for (base, len) in self.shared.lock().region_ranges() {
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
        let (shared, orphaned) = (self.shared.clone(), self.child_orphaned);
        let thread = (uffd.clone(), started.clone(), handed_over.clone());
        PagerThread::spawn("znswap-child", "forked child's fault thread", self.thread_start, move || {
            let (uffd, started, handed_over) = thread;
            started.store(true, Release);
            while !handed_over.load(Acquire) {
                std::thread::yield_now();
            }
            shared.serve_child_faults(&uffd, parent, orphaned)
        })
        .map_err(|error| format!("starting its fault thread: {error}"))?;
        let mut page = Box::new(AlignedPage::ZERO);
        while !started.load(Acquire) {
            if uffd.poll(1).map_err(|error| format!("polling its userfaultfd: {error}"))? {
                self.shared.serve_child_events(&uffd, &mut page);
            }
        }
        handed_over.store(true, Release);
        Ok(())
    }
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
    hold: std::sync::RwLock<Option<ForkHold>>,
}

/// What a fork's child gets for a page it faults on (`ForkSnapshot::read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkFill {
    /// The page's bytes, in the buffer given.
    Data,
    /// It was all zero (or not on the device).
    Zero,
    /// Lost on the device, or the snapshot is released: the child must not get a guess.
    Lost,
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
                let read = self.shared.read_slots(zone, slot, page, None);
                match read.and_then(|()| self.shared.open_page(page, sealed.as_ref())) {
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

impl Pager {
    /// Served process `tenant` is about to fork (it holds its own drops and discards
    /// until the fork is done, so what it misses at the fork is what the pager had
    /// dropped): where each of its pages on the device is now, held there for the child.
    /// `None`: not a process this pager serves.
    pub fn tenant_fork_snapshot(&self, tenant: TenantId) -> Option<ForkSnapshot> {
        let space = self.shared.spaces.served_now().iter().find(|space| space.id == tenant).cloned()?;
        let mut state = self.shared.lock();
        let hold = state.fork_hold();
        let pages = state.child_pages(space.owner);
        let poisoned = state.poisoned_pages(space.owner);
        drop(state);
        let hold = std::sync::RwLock::new(Some(hold));
        let arena = space.arena();
        Some(ForkSnapshot { shared: self.shared.clone(), arena, pages, poisoned, tenant: space.tenant, hold })
    }
}

impl Shared {
    /// Releases each fork's hold once its pipe reads end-of-file.
    /// Ends when no fork is left to watch (the next fork starts another).
    fn watch_forks(&self) {
        loop {
            let watched: Vec<RawFd> = {
                let mut forks = self.forks.lock().unwrap_or_else(|p| p.into_inner());
                if forks.live.is_empty() {
                    forks.watcher = false;
                    return;
                }
                forks.live.iter().map(|(fd, _)| *fd).collect()
            };
            let mut polls: Vec<libc::pollfd> =
                watched.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
            // SAFETY: polls descriptors this pager owns.
            unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 100) };
            let ended: Vec<RawFd> =
                polls.iter().filter(|poll| poll.revents & (libc::POLLHUP | libc::POLLIN) != 0).map(|p| p.fd).collect();
            if ended.is_empty() {
                continue;
            }
            let holds: Vec<ForkHold> = {
                let mut forks = self.forks.lock().unwrap_or_else(|p| p.into_inner());
                let (gone, live): (Vec<_>, Vec<_>) = forks.live.drain(..).partition(|(fd, _)| ended.contains(fd));
                forks.live = live;
                gone.into_iter()
                    .map(|(fd, hold)| {
                        // SAFETY: our own descriptor, no longer watched.
                        unsafe { libc::close(fd) };
                        hold
                    })
                    .collect()
            };
            let mut state = self.lock();
            for hold in holds {
                state.fork_release(hold, self.now());
            }
        }
    }

    /// The child's fault handler: each missing fault is served from where the page was
    /// at the fork. A child whose parent exits has daemonized: it stops with a message
    /// (its snapshot would outlive the pager that keeps it readable).
    fn serve_child_faults(&self, uffd: &Userfaultfd, parent: libc::pid_t, orphaned: Option<fn()>) {
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
                unsafe { libc::_exit(crate::run_env::EXIT_DAEMONIZED) };
            }
            match uffd.poll(100) {
                Ok(true) => self.serve_child_events(uffd, &mut page),
                Ok(false) => continue,
                Err(error) => panic!("polling the child's userfaultfd: {error}"),
            }
        }
    }

    /// Resolves the child's fault events queued on `uffd`, reading swapped pages into
    /// `page`.
    fn serve_child_events(&self, uffd: &Userfaultfd, page: &mut AlignedPage) {
        while let Some(event) = uffd.read_event().expect("reading the child's userfaultfd") {
            let UffdEvent::PageFault { address, .. } = event else { continue };
            let address = address / PAGE_BYTES as u64 * PAGE_BYTES as u64;
            let source = self.lock().child_page(address);
            let installed = match source {
                ChildPage::NotOurs => uffd.wake(address, PAGE_BYTES as u64).map(|_| true),
                ChildPage::Zero => uffd.zeropage(address, PAGE_BYTES as u64, true),
                ChildPage::Slot { zone, slot, sealed } => match self
                    .read_slots(zone, slot, &mut page.0, None)
                    .and_then(|()| self.open_page(&mut page.0, sealed.as_ref()))
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
}
