//! A pager in another process serves this process's heap: `znswap daemon`'s (`znswap
//! run --daemon`), or the launcher's (`znswap run --serve`, the daemon of one program);
//! `docs/daemon.md`. Here, the program's side: the arena reserved and handed over
//! (`znswap_pager::hand_over`: its userfaultfd, `/proc/self/mem`, an agent socket), the
//! agent thread that drops what the pager wrote out, and the program's own discards,
//! which the pager must see before the range is zapped.
//!
//! A pager that dies while the program runs (its agent's connection ends): the process
//! then serves its own faults (`serve_orphaned`): the pages the pager had swapped out are
//! lost, and raise SIGBUS when touched, never read as zeros; the rest of the heap stays,
//! unpaged, and the summary says so.
//!
//! A fork's child is not the parent's userfaultfd's (its registration does not follow
//! the fork): a child of a daemon's tenant registers its own and joins the tenant
//! (`in_child`, `Join::ForkChild`), reading the pages then on the device from the
//! daemon's snapshot of the fork. Otherwise it serves its own heap from the fork on, as
//! one whose pager died: its touch of a page swapped out at the fork is read from the
//! snapshot where there is one, else raises SIGBUS, never reads zeros; a child that
//! executes a program (a shell's, make's) runs it paged again.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::{Arc, Mutex};

use libmimalloc_sys as mi;
use znswap_pager::pager_thread::PagerThread;
use znswap_pager::uffd::{features, register_mode, Userfaultfd};
use znswap_pager::ForkFill;
use znswap_pager::{
    agent_loop, hand_over, map_anonymous, serve_orphaned, serve_orphaned_events, DroppedPages, Orphaned, PAGE_BYTES,
};
use znswap_wire::{Channel, ForkPage, Join, Kind, Name, Range, ToDaemon, ToTenant, Token};

use crate::alloc::Internal;
use crate::say;

const PAGE: u64 = PAGE_BYTES as u64;

pub(crate) struct Served {
    /// The calls this process makes to the pager, one at a time.
    calls: Mutex<Channel>,
    /// Held by the agent while it drops a range, and by a fork from before the daemon's
    /// snapshot until the fork is done: so what the child misses is what the snapshot
    /// knows as dropped.
    drops: Arc<Mutex<()>>,
    /// The daemon's socket (`None` under `--serve`): a fork's child connects there to
    /// read its parent's swapped pages.
    daemon: Option<std::path::PathBuf>,
    /// The reserved mapping: the arena, its alignment and its unpaged bookkeeping.
    bounds: (u64, u64),
    /// The pages only the pager's device holds (for the agent, should the pager die).
    dropped: Arc<DroppedPages>,
    /// The paged part of the arena.
    paged: Range,
    /// The daemon's tenant this process is of (`znswap run --daemon`): a fork's child
    /// joins it, paged from the fork on.
    tenant: Option<Token>,
}

/// The pager died while this process ran: its faults are served here since.
pub(crate) static PAGER_GONE: AtomicBool = AtomicBool::new(false);
/// Pages lost with it (poisoned, touched since).
pub(crate) static PAGES_LOST: AtomicU64 = AtomicU64::new(0);

/// Where the pager is: a socket the launcher made (`--serve`), or the daemon's path.
pub(crate) enum PagerAt<'a> {
    Fd(i32),
    Daemon(&'a std::path::Path),
}

/// Reserves the arena, hands its paged part to the pager at `at` asking for a budget of
/// `memory_bytes` (or joining the tenant `token` names, whose budget it shares), starts
/// the agent, and gives the arena to mimalloc. Returns the paged heap.
pub(crate) fn start(
    at: PagerAt<'_>,
    arena_bytes: u64,
    memory_bytes: u64,
    token: Option<Token>,
) -> Result<(Served, *mut mi::mi_heap_t), String> {
    let daemon = match &at {
        PagerAt::Daemon(path) => Some(path.to_path_buf()),
        PagerAt::Fd(_) => None,
    };
    let calls = match at {
        PagerAt::Fd(fd) => {
            // Not inherited by programs this one executes.
            // SAFETY: flags of a descriptor the launcher gave us.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            // SAFETY: the launcher's socket, ours from here on.
            Channel::from_fd(unsafe { OwnedFd::from_raw_fd(fd) })
        }
        // Connected from here, so the daemon sees this process as its peer.
        PagerAt::Daemon(path) => Channel::connect(path).map_err(|error| {
            format!("no znswap daemon answers at {}: {error}; start one with `znswap daemon`", path.display())
        })?,
    };
    let reserved = arena_bytes + crate::ARENA_ALIGN;
    let base = map_anonymous(reserved as usize)
        .map_err(|error| format!("reserving {arena_bytes} B for the heap: {error}"))? as u64;
    let arena_start = base.div_ceil(crate::ARENA_ALIGN) * crate::ARENA_ALIGN;
    let bookkeeping = crate::arena_bookkeeping_bytes(arena_bytes);
    let paged = Range::new(arena_start + bookkeeping, arena_bytes - bookkeeping).map_err(|error| error.to_string())?;
    let join = token.map_or_else(|| Join::New(program_name()), Join::Tenant);
    let handed = hand_over(&calls, paged, join, memory_bytes / PAGE)
        .map_err(|error| format!("handing the heap to the pager: {error}"))?;
    let dropped = Arc::new(DroppedPages::new(paged));
    let drops = Arc::new(Mutex::new(()));
    spawn_agent(handed, paged, dropped.clone(), drops.clone())?;
    let heap = crate::manage_arena(arena_start, arena_bytes)?;
    // Nothing of the paged part was touched (a touch is a fault the launcher served, and
    // leaves the page mapped).
    if znswap_pager::pagemap::page_at(paged.start()) {
        return Err("mimalloc's arena bookkeeping is larger than the memory kept unpaged for it".into());
    }
    let bounds = (base, base + reserved);
    Ok((Served { calls: Mutex::new(calls), drops, daemon, bounds, dropped, paged, tenant: token }, heap))
}

/// Starts the agent of a process handed over (`handed`): it drops what the pager wrote
/// out until the pager hangs up, then serves the process's own faults.
fn spawn_agent(
    handed: znswap_pager::HandedOver,
    paged: Range,
    dropped: Arc<DroppedPages>,
    drops: Arc<Mutex<()>>,
) -> Result<(), String> {
    let agent = handed.agent;
    // Kept open by the agent for the process's life: the arena's registrations hang on
    // it, and it serves the faults itself should the pager die.
    let uffd = handed.uffd;
    let (agents_dropped, agents_drops) = (dropped, drops);
    PagerThread::spawn("znswap-agent", "agent", Some(crate::alloc::mark_internal_thread), move || {
        // Until the pager hangs up: a launcher does once this process is gone, a daemon
        // only if it dies.
        let zap_held = |start, len| {
            let _held = agents_drops.lock().unwrap_or_else(|p| p.into_inner());
            zap(start, len)
        };
        if let Err(error) = agent_loop(&agent, paged, &agents_dropped, zap_held) {
            say!("znswap run: the pager's agent: {error}; stopping");
            std::process::abort();
        }
        PAGER_GONE.store(true, Relaxed);
        // Said in the figures at once: the program may die of its first lost page.
        crate::write_report(false);
        say!(
            "znswap run: the pager serving this process is gone: the pages it had swapped out are lost (SIGBUS \
             when touched); the rest of the heap stays, unpaged"
        );
        let report = |done: Orphaned| PAGES_LOST.store(done.lost, Relaxed);
        if let Err(error) = serve_orphaned(&uffd, paged, &agents_dropped, None, || false, report) {
            say!("znswap run: serving this process's own faults: {error}; stopping");
            std::process::abort();
        }
    })
    .map(|_| ())
    .map_err(|error| format!("starting the pager's agent: {error}"))
}

impl Served {
    pub(crate) fn bounds(&self) -> (u64, u64) {
        self.bounds
    }

    /// The paged part of the arena, `[start, end)`.
    pub(crate) fn paged_bounds(&self) -> (u64, u64) {
        (self.paged.start(), self.paged.end())
    }

    /// Before a fork: the daemon keeps where this process's swapped pages are for the
    /// child (`ToDaemon::Forking`), while this process's drops and discards are held
    /// (until `fork_end`). Without a daemon, or with it gone, only the locks are held.
    pub(crate) fn fork_begin(&self) -> Forking<'_> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        let asked =
            self.daemon.is_some() && !PAGER_GONE.load(Relaxed) && calls.send_to_daemon(&ToDaemon::Forking, &[]).is_ok();
        let token = match asked.then(|| calls.recv_to_tenant()) {
            Some(Ok(Some(ToTenant::ForkSnapshot { token }))) => Some(token),
            _ => None,
        };
        Forking { calls, _drops: drops, token, daemon: self.daemon.as_deref() }
    }

    /// After the fork, in the parent: the daemon told how it went (`pid`, -1 if it
    /// failed); drops and discards go on.
    pub(crate) fn fork_end(&self, forking: Forking<'_>, pid: libc::pid_t) {
        if forking.token.is_some() {
            let child = u32::try_from(pid).unwrap_or(0);
            if forking.calls.send_to_daemon(&ToDaemon::Forked { child }, &[]).is_ok() {
                let _ = forking.calls.recv_to_tenant();
            }
        }
    }

    /// In a fork's child, before `fork` returns there. A child of a daemon's tenant
    /// joins the tenant (`Join::ForkChild`): the daemon pages it from the fork on,
    /// within the tenant's budget, and reads the pages then on the device from its
    /// snapshot of the fork; `forking`'s connection becomes the child's own. Otherwise
    /// (no tenant, or the daemon refuses) the heap is served by a thread of the child's
    /// own from now on, from what the parent knew at the fork (`DroppedPages`, copied
    /// with the fork): a page out on the device then is read from the daemon's
    /// snapshot (when the parent got one), or else poisoned (SIGBUS when touched); any
    /// other missing page is zero-filled, and the child's memory is not paged. Its
    /// discards are its own (never sent on the parent's connection).
    pub(crate) fn in_child(&self, forking: &mut Forking<'_>) {
        if let (Some((fork, path)), Some(tenant)) = (forking.token(), self.tenant) {
            match self.join_as_child(path, tenant, fork) {
                Ok(calls) => {
                    *forking.calls = calls;
                    return;
                }
                Err(error) => say!("znswap run: a fork's child cannot be paged by the daemon ({error}); it serves its own heap, unpaged"),
            }
        }
        let reader = forking.token();
        PAGER_GONE.store(true, Relaxed);
        let started = (|| -> Result<(), String> {
            let reader = match reader.map(|(token, path)| ForkReader::connect(path, token)).transpose() {
                Ok(reader) => reader.map(|reader| Arc::new(Mutex::new(reader))),
                Err(error) => {
                    say!("znswap run: a fork's child cannot read its parent's swapped pages: {error}");
                    None
                }
            };
            let uffd = Userfaultfd::new(0, features::POISON).map_err(|error| error.to_string())?;
            uffd.register(self.paged.start(), self.paged.len(), register_mode::MISSING)
                .map_err(|error| error.to_string())?;
            // Its start may touch the heap before it can serve a fault (glibc's thread
            // start reads the program's locale, which `setlocale` put there): this thread
            // serves the child's faults until the new one has started, then hands over
            // (as the in-process pager's child does, `Pager::fork`).
            let uffd = Arc::new(uffd);
            let (started, handed_over) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
            let (paged, dropped) = (self.paged, self.dropped.clone());
            let thread = (uffd.clone(), started.clone(), handed_over.clone(), dropped.clone(), reader.clone());
            PagerThread::spawn(
                "znswap-child",
                "fork's heap server",
                Some(crate::alloc::mark_internal_thread),
                move || {
                    let (uffd, started, handed_over, dropped, reader) = thread;
                    started.store(true, Release);
                    while !handed_over.load(Acquire) {
                        std::thread::yield_now();
                    }
                    let report = |done: Orphaned| PAGES_LOST.store(done.lost, Relaxed);
                    let mut fetch = |address, page: &mut [u8]| fetch_from(&reader, address, page);
                    if let Err(error) = serve_orphaned(&uffd, paged, &dropped, Some(&mut fetch), || false, report) {
                        say!("znswap run: serving a fork's heap: {error}; stopping");
                        std::process::abort();
                    }
                },
            )
            .map_err(|error| error.to_string())?;
            let mut done = Orphaned::default();
            let mut fetch = |address, page: &mut [u8]| fetch_from(&reader, address, page);
            while !started.load(Acquire) {
                if uffd.poll(1).map_err(|error| error.to_string())? {
                    serve_orphaned_events(&uffd, &dropped, Some(&mut fetch), &mut done)
                        .map_err(|error| error.to_string())?;
                }
            }
            handed_over.store(true, Release);
            Ok(())
        })();
        if let Err(error) = started {
            say!("znswap run: a fork's child cannot serve its heap: {error}; stopping");
            std::process::abort();
        }
    }

    /// A fork's child hands its heap to the daemon at `path`, as a process of tenant
    /// `tenant` inheriting the pages of fork `fork`; returns its own connection.
    fn join_as_child(&self, path: &std::path::Path, tenant: Token, fork: Token) -> Result<Channel, String> {
        let calls = Channel::connect(path).map_err(|error| format!("connecting: {error}"))?;
        let handed =
            hand_over(&calls, self.paged, Join::ForkChild { tenant, fork }, 0).map_err(|error| error.to_string())?;
        spawn_agent(handed, self.paged, self.dropped.clone(), self.drops.clone())?;
        Ok(calls)
    }

    /// The program discards `[start, start + len)`: the pager frees the range's slots
    /// and holds its state while this process zaps the range (no fault maps a page in
    /// between), as `Pager::program_discard` does in one process. Returns what
    /// `madvise` returns.
    pub(crate) fn program_discard(&self, start: u64, len: u64) -> i32 {
        let _internal = Internal::enter();
        if start % PAGE != 0 || start.checked_add(len).is_none() {
            crate::alloc::set_errno(libc::EINVAL);
            return -1;
        }
        // Empty, or past user space: the kernel's answer, nothing of the pager's.
        let Ok(range) = Range::new(start, len.div_ceil(PAGE) * PAGE) else { return zap(start, len) };
        // With the pager gone (or never this process's: a fork's child), the range is only
        // zapped, and reads zero, nothing lost. (Checked before the lock: a child may
        // have it held by a thread that is not in it.)
        if PAGER_GONE.load(Relaxed) {
            let rc = zap(start, len);
            if rc == 0 {
                self.dropped.clear(start, len);
            }
            return rc;
        }
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let asked = !PAGER_GONE.load(Relaxed)
            && calls.send_to_daemon(&ToDaemon::ProgramDiscard(range), &[]).is_ok()
            && matches!(calls.recv_to_tenant(), Ok(Some(ToTenant::Ack(Kind::ProgramDiscard))));
        let rc = zap(start, len);
        if rc == 0 {
            self.dropped.clear(start, len);
        }
        if !asked {
            drop(calls);
            return rc;
        }
        let errno = if rc == 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL) };
        // (A pager gone meanwhile: its agent's end says so.)
        let _ = calls.send_to_daemon(&ToDaemon::Zapped { errno: errno as u32 }, &[]);
        drop(calls);
        if rc != 0 {
            crate::alloc::set_errno(errno);
        }
        rc
    }
}

/// A fork under way (`Served::fork_begin`): the calls and the drops held, and the
/// snapshot's token the child reads its parent's swapped pages by.
pub(crate) struct Forking<'a> {
    calls: std::sync::MutexGuard<'a, Channel>,
    _drops: std::sync::MutexGuard<'a, ()>,
    token: Option<Token>,
    daemon: Option<&'a std::path::Path>,
}

impl Forking<'_> {
    /// What the child needs to read its parent's swapped pages, if the daemon kept them.
    pub(crate) fn token(&self) -> Option<(Token, &std::path::Path)> {
        Some((self.token?, self.daemon?))
    }
}

/// A fork's child's connection to the daemon's snapshot of its parent's heap
/// (`ToDaemon::ForkChild`): pages come through a one-page memfd both map.
struct ForkReader {
    channel: Channel,
    staging: *const u8,
}

// SAFETY: the staging page is only read by whoever holds the reader (behind a mutex).
unsafe impl Send for ForkReader {}

impl ForkReader {
    fn connect(path: &std::path::Path, token: Token) -> Result<ForkReader, String> {
        // SAFETY: a NUL-terminated name; a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"znswap-fork".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: ours from here on.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        use std::os::fd::{AsFd, AsRawFd};
        // SAFETY: sizing, sealing (the daemon maps it only so) and mapping our own memfd.
        let staging = unsafe {
            if libc::ftruncate(memfd.as_raw_fd(), PAGE as i64) != 0
                || libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL) != 0
            {
                return Err(format!("sizing and sealing the staging page: {}", std::io::Error::last_os_error()));
            }
            libc::mmap(std::ptr::null_mut(), PAGE as usize, libc::PROT_READ, libc::MAP_SHARED, memfd.as_raw_fd(), 0)
        };
        if staging == libc::MAP_FAILED {
            return Err(format!("mapping the staging page: {}", std::io::Error::last_os_error()));
        }
        let channel = Channel::connect(path).map_err(|error| format!("connecting to {}: {error}", path.display()))?;
        channel
            .send_to_daemon(&ToDaemon::ForkChild { token }, &[memfd.as_fd()])
            .map_err(|error| format!("asking the daemon: {error}"))?;
        match channel.recv_to_tenant() {
            Ok(Some(ToTenant::Ack(Kind::ForkChild))) => Ok(ForkReader { channel, staging: staging.cast() }),
            Ok(Some(ToTenant::Refused(reason))) => Err(format!("the daemon refused: {}", reason.explain())),
            other => Err(format!("the daemon answered {other:?}")),
        }
    }

    fn fetch(&mut self, address: u64, page: &mut [u8]) -> ForkFill {
        let Ok(range) = Range::new(address, PAGE) else { return ForkFill::Lost };
        if self.channel.send_to_daemon(&ToDaemon::ForkRead(range), &[]).is_err() {
            return ForkFill::Lost;
        }
        match self.channel.recv_to_tenant() {
            Ok(Some(ToTenant::ForkPage(ForkPage::Data))) => {
                // SAFETY: the staging page, mapped for the reader's life; the daemon wrote
                // it before answering and writes it again only when asked.
                page.copy_from_slice(unsafe { std::slice::from_raw_parts(self.staging, PAGE as usize) });
                ForkFill::Data
            }
            Ok(Some(ToTenant::ForkPage(ForkPage::Zero))) => ForkFill::Zero,
            _ => ForkFill::Lost,
        }
    }
}

/// A dropped page from the fork's snapshot, if the child has one (else it is lost).
fn fetch_from(reader: &Option<Arc<Mutex<ForkReader>>>, address: u64, page: &mut [u8]) -> ForkFill {
    match reader {
        Some(reader) => reader.lock().unwrap_or_else(|p| p.into_inner()).fetch(address, page),
        None => ForkFill::Lost,
    }
}

/// MADV_DONTNEED by system call (the library's own `madvise` wrapper is what
/// `libc::madvise` resolves to here).
fn zap(start: u64, len: u64) -> i32 {
    // SAFETY: discarding a range of this process's own memory, as asked.
    unsafe { libc::syscall(libc::SYS_madvise, start, len, libc::MADV_DONTNEED) as i32 }
}

/// The program's name as the pager's tenant: its command (`/proc/self/comm`).
fn program_name() -> Name {
    std::fs::read_to_string("/proc/self/comm")
        .ok()
        .and_then(|comm| Name::new(comm.trim()).ok())
        .unwrap_or_else(|| Name::new("program").expect("a valid name"))
}
