//! Serving another process's memory: the daemon's pager (issue 34, `docs/daemon.md`).
//!
//! A tenant process hands over its userfaultfd and its own `/proc/self/mem` (opened by
//! itself, so reading it later needs no ptrace rights). Through the first the pager
//! resolves the tenant's faults exactly as its own (`UFFDIO_COPY`, `UFFDIO_ZEROPAGE` and
//! `UFFDIO_WRITEPROTECT` act on the descriptor's address space, at the in-process cost:
//! `examples/uffd_remote.rs`, figures in docs/measurements/2026-11-daemon.md); through
//! the second it reads the victims it writes out. What only the tenant may do, dropping
//! written-out pages (`process_madvise` refuses `MADV_DONTNEED` for another process),
//! its agent thread does on request: a `Discard` of up to `RANGES_MAX` ranges, answered
//! `Discarded` once done, so a page is counted gone only when it is.
//!
//! A tenant that dies while it is served: its ioctls fail `ESRCH`, its memory reads
//! nothing, its agent hangs up; none of it is fatal (`Spaces::gone`), and
//! the evictor lets its regions go at its next rest (`Pager::release_tenant`).
//!
//! Not yet here (the design's later steps): parking (`UFFDIO_MOVE` is refused across
//! processes), asynchronous write protection, and forks.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use znswap_pager_core::{AddressRange, DropDelay, PAGE_BYTES};
use znswap_wire::{Channel, ChannelError, Hello, Join, Range, Reason, ToDaemon, ToTenant, RANGES_MAX};

use crate::page_buffers::AlignedPage;
use crate::uffd::{features, register_mode, Event as UffdEvent, UffdError, Userfaultfd};

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

/// What a tenant process handed over, and which of the pager's tenants it is.
pub struct TenantLink {
    /// The tenant's userfaultfd, with its arena registered for missing and
    /// write-protect faults.
    pub uffd: Userfaultfd,
    /// The tenant's own `/proc/self/mem`.
    pub mem: OwnedFd,
    /// The connection its agent thread answers on.
    pub channel: Channel,
    /// The paged arena in the tenant's address space.
    pub arena: Range,
    /// The engine's tenant it is charged to (swap-zones under the tenant policy, GC).
    pub tenant: u32,
    /// The process (as checked against the connection's peer), for co-location.
    pub pid: u32,
}

/// The pager's side of one tenant process.
pub(crate) struct TenantSpace {
    /// Its pid (co-location finds its threads under `/proc/PID`).
    pub(crate) pid: u32,
    mem: OwnedFd,
    agent: Mutex<Agent>,
    /// A fork's child whose agent has not answered a discard yet.
    pub(crate) starting: std::sync::atomic::AtomicBool,
}

struct Agent {
    channel: Channel,
    next_batch: u64,
    /// Discards asked and not answered yet: the last `unanswered` before `next_batch`
    /// (answers come in order).
    unanswered: u64,
    /// The agent stopped answering (the tenant is gone): discards are no-ops.
    gone: bool,
    /// A late answer was said in the log (once per process).
    said_late: bool,
}

/// How long a discard waits for the agent's answer before it leaves the agent to answer
/// later (`DropDelay::Late`). Agents answer in tens of µs; one that has not in this long
/// is stopped (SIGSTOP, a debugger), held by its process's fork, or not given a CPU,
/// and every process's evictions would wait behind it.
const AGENT_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

impl Agent {
    /// Whether the agent's next message is there within `wait` (or its end).
    fn readable(&self, wait: std::time::Duration) -> bool {
        let mut poll = libc::pollfd { fd: self.channel.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let wait_ms = wait.as_micros().div_ceil(1000) as i32;
        // SAFETY: one pollfd, valid for the call.
        unsafe { libc::poll(&mut poll, 1, wait_ms) > 0 }
    }

    /// Takes the agent's next answer: the first unanswered discard's, or it is gone.
    fn take_answer(&mut self) {
        let expected = self.next_batch - self.unanswered;
        let problem = match self.channel.recv_to_daemon() {
            Ok(Some((ToDaemon::Discarded { batch }, _))) if batch == expected => {
                self.unanswered -= 1;
                return;
            }
            Ok(None) => None,
            // A process that died mid-conversation resets it: gone, as above.
            Err(ChannelError::Io(error)) if error.kind() == std::io::ErrorKind::ConnectionReset => None,
            // Anything else from the agent: stop asking. The core counts the pages
            // dropped; if they are not, only the tenant's own pages are wrong (and the
            // core lets it go: `take_false_drops`).
            Ok(Some((message, _))) => Some(format!("answered discard {expected} with {message:?}")),
            Err(error) => Some(error.to_string()),
        };
        if let Some(problem) = problem {
            eprintln!("znswap: tenant agent: {problem}: no more discards asked");
        }
        self.gone = true;
        self.unanswered = 0;
    }
}

impl TenantSpace {
    /// `starting`: a fork's child, whose agent may still be starting (`Shared::agents_starting`).
    pub(crate) fn new(mem: OwnedFd, channel: Channel, pid: u32, starting: bool) -> TenantSpace {
        let agent = Mutex::new(Agent { channel, next_batch: 1, unanswered: 0, gone: false, said_late: false });
        TenantSpace { pid, mem, agent, starting: std::sync::atomic::AtomicBool::new(starting) }
    }

    /// The tenant's page at `address` into `into` (a page). A write meanwhile may tear
    /// the copy, as it may tear an in-process append's read: the write's protection
    /// fault came first and aborted the swap-out (Appendix A), so those bytes are never
    /// read back. A read that finds the tenant gone is counted in `failed`, and the page
    /// goes out as zeroes: no one is left to read it back.
    pub(crate) fn read_page(&self, address: u64, into: &mut [u8], failed: &AtomicU64) {
        debug_assert_eq!(into.len(), PAGE_BYTES);
        // SAFETY: a buffer of our own, valid for the call.
        let read =
            unsafe { libc::pread(self.mem.as_raw_fd(), into.as_mut_ptr().cast(), PAGE_BYTES, address as libc::off_t) };
        if read != PAGE_BYTES as isize {
            into.fill(0);
            failed.fetch_add(1, Relaxed);
        }
    }

    /// The tenant's pages from `address` on into `pages` (a whole number of them), in
    /// one read (`read_page`'s rules: a short read zeroes the rest, counted in `failed`).
    pub(crate) fn read_pages(&self, address: u64, pages: &mut [u8], failed: &AtomicU64) {
        debug_assert_eq!(pages.len() % PAGE_BYTES, 0);
        // SAFETY: a buffer of our own, valid for the call.
        let read = unsafe {
            libc::pread(self.mem.as_raw_fd(), pages.as_mut_ptr().cast(), pages.len(), address as libc::off_t)
        };
        let whole = usize::try_from(read).unwrap_or(0) / PAGE_BYTES * PAGE_BYTES;
        if whole < pages.len() {
            pages[whole..].fill(0);
            failed.fetch_add(((pages.len() - whole) / PAGE_BYTES) as u64, Relaxed);
        }
    }

    /// Whether the tenant's page at `address` reads all zeroes. Its first bytes are read
    /// first: a page with data nearly always says so there, and only a page that begins
    /// with zeroes is read whole.
    pub(crate) fn page_is_zero(&self, address: u64, failed: &AtomicU64) -> bool {
        const HEAD: usize = 256;
        let mut head = [0u8; HEAD];
        // SAFETY: a buffer of our own, valid for the call.
        let read = unsafe { libc::pread(self.mem.as_raw_fd(), head.as_mut_ptr().cast(), HEAD, address as libc::off_t) };
        if read == HEAD as isize && head.iter().any(|&byte| byte != 0) {
            return false;
        }
        let mut page = AlignedPage::ZERO;
        self.read_page(address, &mut page.0, failed);
        page.0.iter().all(|&byte| byte == 0)
    }

    /// Has the tenant's agent drop `ranges`, and waits until it has, or for
    /// `AGENT_ANSWER_WAIT` at most: then `Late`, the pages to be counted dropped once the
    /// agent answers (`late_answered`). `Unsent` if it owes an answer already. One
    /// request at a time (the lock): the evictor's discards and a fault's direct reclaim
    /// take turns.
    pub(crate) fn discard(&self, ranges: &[AddressRange]) -> Option<DropDelay> {
        let mut agent = self.agent.lock().unwrap_or_else(|p| p.into_inner());
        if agent.gone {
            return None;
        }
        if agent.unanswered > 0 {
            return Some(DropDelay::Unsent);
        }
        // Every request first, then the answers (they come in order).
        for chunk in ranges.chunks(RANGES_MAX) {
            let batch = agent.next_batch;
            agent.next_batch += 1;
            let ranges = chunk
                .iter()
                .map(|range| {
                    Range::new(range.start as u64, range.len as u64).expect("the core's discard ranges are pages")
                })
                .collect();
            if agent.channel.send_to_tenant(&ToTenant::Discard { batch, ranges }).is_err() {
                agent.gone = true;
                agent.unanswered = 0;
                return None;
            }
            agent.unanswered += 1;
        }
        let deadline = std::time::Instant::now() + AGENT_ANSWER_WAIT;
        while agent.unanswered > 0 {
            if !agent.readable(deadline.saturating_duration_since(std::time::Instant::now())) {
                if !agent.said_late {
                    agent.said_late = true;
                    eprintln!(
                        "znswap: process {} has not answered a discard in {} ms (stopped, or forking?): its pages \
                         written out stay until it does, and the other processes are served meanwhile",
                        self.pid,
                        AGENT_ANSWER_WAIT.as_millis()
                    );
                }
                return Some(DropDelay::Late);
            }
            agent.take_answer();
        }
        None
    }

    /// Whether the agent has now answered every discard it owed (or is gone), never
    /// waiting: not while another thread talks to it.
    pub(crate) fn late_answered(&self) -> bool {
        let mut agent = match self.agent.try_lock() {
            Ok(agent) => agent,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        while agent.unanswered > 0 {
            if !agent.readable(std::time::Duration::ZERO) {
                return false;
            }
            agent.take_answer();
        }
        true
    }
}

impl TenantLink {
    /// The link a `Hello` and its descriptors make (the userfaultfd, the mem file, the
    /// agent's socket, in the order `Hello::fds` gives), for tenant `tenant`.
    pub fn from_hello(hello: &Hello, mut fds: Vec<OwnedFd>, tenant: u32) -> Result<TenantLink, TenantError> {
        if hello.forked || fds.len() != 3 {
            return Err(TenantError::Protocol(format!(
                "a Hello with {} descriptors{}: a process's first takes its userfaultfd, mem file and agent socket",
                fds.len(),
                if hello.forked { ", from a fork's child" } else { "" }
            )));
        }
        let agent = Channel::from_fd(fds.pop().expect("three"));
        let mem = fds.pop().expect("three");
        let uffd = Userfaultfd::from_received(fds.pop().expect("three"), hello.uffd_features);
        Ok(TenantLink { uffd, mem, channel: agent, arena: hello.arena, tenant, pid: hello.pid })
    }
}

/// What goes wrong on the tenant's side of the hand-over.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error(transparent)]
    Uffd(#[from] UffdError),
    #[error("talking to the pager: {0}")]
    Channel(#[from] ChannelError),
    #[error("talking to the pager: {0}")]
    Io(#[from] std::io::Error),
    #[error("the pager refused this process: {}", .0.explain())]
    Refused(Reason),
    #[error("the pager hung up")]
    HungUp,
    #[error("{0}")]
    Protocol(String),
}

/// A process served by another's pager: its userfaultfd (kept, so its registrations
/// outlive any one connection) and its agent's socket.
pub struct HandedOver {
    pub uffd: Userfaultfd,
    pub agent: Channel,
    pub tenant: u32,
    pub budget_pages: u64,
}

/// The tenant's side of the hand-over: registers `arena` (mapped, private, anonymous)
/// with a new userfaultfd, and hands that, the process's own `/proc/self/mem` and an
/// agent socket to the pager at the other end of `calls`, asking for a resident budget
/// of `memory_pages`; waits for its welcome.
pub fn hand_over(calls: &Channel, arena: Range, join: Join, memory_pages: u64) -> Result<HandedOver, TenantError> {
    let uffd = Userfaultfd::new(features::PAGEFAULT_FLAG_WP, features::POISON | features::THREAD_ID)?;
    uffd.register(arena.start(), arena.len(), register_mode::MISSING | register_mode::WP)?;
    // SAFETY: a NUL-terminated path; a new descriptor or -1.
    let mem = unsafe { libc::open(c"/proc/self/mem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if mem < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a descriptor we own from here on.
    let mem = unsafe { OwnedFd::from_raw_fd(mem) };
    let (agent, pagers_end) = Channel::pair()?;
    let hello =
        Hello { pid: std::process::id(), forked: false, uffd_features: uffd.features(), arena, join, memory_pages };
    calls.send_to_daemon(&ToDaemon::Hello(hello), &[uffd.as_fd(), mem.as_fd(), pagers_end.as_fd()])?;
    match calls.recv_to_tenant()? {
        Some(ToTenant::Welcome { tenant, budget_pages, .. }) => Ok(HandedOver { uffd, agent, tenant, budget_pages }),
        Some(ToTenant::Refused(reason)) => Err(TenantError::Refused(reason)),
        Some(other) => Err(TenantError::Protocol(format!("the pager answered a Hello with {other:?}"))),
        None => Err(TenantError::HungUp),
    }
}

/// The pages of a served arena the pager had its agent drop, less those the program
/// discarded since: what only the pager's device holds (or held). Should the pager die,
/// these are the pages lost (`serve_orphaned`). A bit per page, set and cleared from any
/// thread.
pub struct DroppedPages {
    base: u64,
    pages: u64,
    words: Box<[AtomicU64]>,
}

impl DroppedPages {
    pub fn new(arena: Range) -> DroppedPages {
        let pages = arena.len() / PAGE_BYTES as u64;
        DroppedPages { base: arena.start(), pages, words: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Each page of `[start, start + len)` within the arena, by index.
    fn each(&self, start: u64, len: u64, mut f: impl FnMut(&AtomicU64, u64)) {
        let first = start.saturating_sub(self.base) / PAGE_BYTES as u64;
        let end = (start.saturating_add(len).saturating_sub(self.base)).div_ceil(PAGE_BYTES as u64).min(self.pages);
        for page in first..end {
            f(&self.words[(page / 64) as usize], 1 << (page % 64));
        }
    }

    /// The pager dropped `[start, start + len)`: its bytes are on the device.
    pub fn mark(&self, start: u64, len: u64) {
        self.each(start, len, |word, bit| {
            word.fetch_or(bit, Relaxed);
        });
    }

    /// The program discarded `[start, start + len)`: it reads zero from now on.
    pub fn clear(&self, start: u64, len: u64) {
        self.each(start, len, |word, bit| {
            word.fetch_and(!bit, Relaxed);
        });
    }

    /// Whether the page at `address` was dropped by the pager (and not discarded since).
    pub fn is_dropped(&self, address: u64) -> bool {
        let mut dropped = false;
        self.each(address, 1, |word, bit| dropped = word.load(Relaxed) & bit != 0);
        dropped
    }
}

/// The tenant's agent: drops each range the pager asks (with `zap`, which returns what
/// `madvise` does), notes it in `dropped`, and says so, until the pager hangs up. Ranges
/// outside `arena` are refused (the process's other memory is not the pager's to drop).
/// Returns the pages dropped.
pub fn agent_loop(
    agent: &Channel,
    arena: Range,
    dropped_pages: &DroppedPages,
    zap: impl Fn(u64, u64) -> i32,
) -> Result<u64, TenantError> {
    // A pager killed with a message of ours unread resets the connection rather than
    // closing it: gone all the same.
    let reset = |error: &std::io::Error| {
        matches!(error.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe)
    };
    let gone =
        |error: &znswap_wire::ChannelError| matches!(error, znswap_wire::ChannelError::Io(error) if reset(error));
    let mut dropped = 0;
    loop {
        let message = match agent.recv_to_tenant() {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(error) if gone(&error) => break,
            Err(error) => return Err(error.into()),
        };
        let ToTenant::Discard { batch, ranges } = message else {
            return Err(TenantError::Protocol(format!("the agent got {message:?}")));
        };
        for range in ranges {
            if range.start() < arena.start() || range.end() > arena.end() {
                return Err(TenantError::Protocol(format!("a discard of {range:?}, outside the arena {arena:?}")));
            }
            // Noted first: once zapped, a fault on the page may come at once.
            dropped_pages.mark(range.start(), range.len());
            if zap(range.start(), range.len()) != 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            dropped += range.len() / PAGE_BYTES as u64;
        }
        match agent.send_to_daemon(&ToDaemon::Discarded { batch }, &[]) {
            Err(error) if reset(&error) => break,
            sent => sent?,
        }
    }
    Ok(dropped)
}

/// Serves the faults queued on `uffd` as `serve_orphaned` does, counting them in
/// `done`; whether there were any.
pub fn serve_orphaned_events(
    uffd: &Userfaultfd,
    dropped: &DroppedPages,
    fetch: Option<&mut Fetch<'_>>,
    done: &mut Orphaned,
) -> Result<bool, TenantError> {
    let mut fetch = fetch;
    let mut fetched = AlignedPage::ZERO;
    let zeros = AlignedPage::ZERO;
    let mut any = false;
    while let Some(event) = uffd.read_event()? {
        let UffdEvent::PageFault { address, write_protect, .. } = event else { continue };
        any = true;
        let page = address & !(PAGE_BYTES as u64 - 1);
        if write_protect {
            uffd.write_protect(page, PAGE_BYTES as u64, false, true)?;
        } else if dropped.is_dropped(page) {
            let fill = fetch.as_mut().map_or(ForkFill::Lost, |fetch| fetch(page, &mut fetched.0));
            if fill != ForkFill::Lost {
                let bytes = if fill == ForkFill::Data { &fetched.0 } else { &zeros.0 };
                if !uffd.copy(page, bytes, false, true)? {
                    uffd.wake(page, PAGE_BYTES as u64)?;
                }
                done.fetched += 1;
                continue;
            }
            if uffd.features() & features::POISON == 0 {
                return Err(TenantError::Protocol(format!(
                    "the page at {page:#x} is lost, and this kernel cannot poison it (UFFD_FEATURE_POISON)"
                )));
            }
            // (EEXIST: mapped since, by a racing fault's resolution here.)
            match uffd.poison(page, PAGE_BYTES as u64) {
                Err(error) if error.errno() == Some(libc::EEXIST) => uffd.wake(page, PAGE_BYTES as u64)?,
                result => result?,
            }
            done.lost += 1;
        } else {
            if !uffd.copy(page, &zeros.0, false, true)? {
                uffd.wake(page, PAGE_BYTES as u64)?;
            }
            done.zero_filled += 1;
        }
    }
    Ok(any)
}

/// What `serve_orphaned` did: pages lost (poisoned), pages zero-filled, dropped pages
/// fetched (from a fork's snapshot).
#[derive(Clone, Copy, Debug, Default)]
pub struct Orphaned {
    pub lost: u64,
    pub zero_filled: u64,
    pub fetched: u64,
}

/// Where a dropped page comes from when the pager is not there to serve it: a fork's
/// snapshot at the daemon (`ForkFill::Data` into the buffer given, or `Zero`); `Lost`
/// poisons it.
pub type Fetch<'a> = dyn FnMut(u64, &mut [u8]) -> ForkFill + 'a;

/// The pager serving this process is gone (its agent's connection ended while the
/// process runs): the process serves its own arena's faults from now on, through its
/// own userfaultfd (`uffd`, which it kept), with what it knows. A page the pager had
/// dropped (`dropped`) is lost: poisoned, so a touch raises SIGBUS, never reads as
/// zeros. Any other missing page was never swapped out: zero-filled, as a fresh page. A
/// write-protected page is unprotected. Threads waiting on a fault the pager had read
/// but not answered are woken first (they fault again, here). Runs until `stop` says
/// so, calling `report` after each page it serves; returns its counts.
pub fn serve_orphaned(
    uffd: &Userfaultfd,
    arena: Range,
    dropped: &DroppedPages,
    mut fetch: Option<&mut Fetch<'_>>,
    stop: impl Fn() -> bool,
    report: impl Fn(Orphaned),
) -> Result<Orphaned, TenantError> {
    let mut done = Orphaned::default();
    uffd.wake(arena.start(), arena.len())?;
    while !stop() {
        if uffd.poll(100)? && serve_orphaned_events(uffd, dropped, fetch.as_deref_mut(), &mut done)? {
            report(done);
        }
    }
    Ok(done)
}
