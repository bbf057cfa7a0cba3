//! Where the pages the core names live: this process's memory, or served processes'
//! (`docs/daemon.md`).
//!
//! The core knows one address space. A pager of its own process's memory gives it that
//! process's addresses as they are. A pager serving other processes (the daemon) cannot:
//! two processes' arenas may lie at the same addresses. So each served process gets a
//! window of core addresses of its own, never reused, and the shell translates at the
//! edge: a fault's address into the window, an action's back into the process, whose own
//! userfaultfd the ioctl then goes to.

//!
//! Served processes come and go on their own: an ioctl that finds one gone (`ESRCH`),
//! an agent that lies about its drops, a descriptor that cannot be read. None of it is
//! fatal to the pager: the process is marked gone here and let go at the evictor's next
//! rest (`Shared::remove_gone_spaces`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use znswap_pager_core::{AddressRange, DiscardBatch};

use crate::tenant::TenantSpace;
use crate::uffd::{UffdError, Userfaultfd, Waiter};

/// A served process's name for the daemon: never reused within a pager's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TenantId(pub u64);

/// One address space the pager serves.
pub(crate) struct Space {
    pub(crate) uffd: Userfaultfd,
    /// The window's first core address, the same byte's address in the process, and the
    /// window's length (this process's own space: the identity over everything).
    window: u64,
    base: u64,
    len: u64,
    /// The served process (`None`: this one).
    pub(crate) served: Option<TenantSpace>,
    /// Its region in the core (a served process's arena).
    pub(crate) owner: u32,
    pub(crate) id: TenantId,
    /// The engine tenant it is charged to.
    pub(crate) tenant: u32,
    /// An ioctl found the process gone: its region is let go at the evictor's next rest.
    pub(crate) gone: AtomicBool,
}

impl Space {
    fn own(uffd: Userfaultfd) -> Space {
        Space {
            uffd,
            window: 0,
            base: 0,
            len: u64::MAX,
            served: None,
            owner: u32::MAX,
            id: TenantId(0),
            tenant: 0,
            gone: AtomicBool::new(false),
        }
    }

    /// Whether core address `core` lies in this window.
    pub(crate) fn holds(&self, core: u64) -> bool {
        core.wrapping_sub(self.window) < self.len
    }

    /// The process's address of core address `core` (in this window).
    pub(crate) fn to_process(&self, core: u64) -> u64 {
        debug_assert!(self.holds(core));
        core - self.window + self.base
    }

    /// The core address of the process's `address`, if the window holds it.
    pub(crate) fn to_core(&self, address: u64) -> Option<u64> {
        let offset = address.checked_sub(self.base).filter(|&offset| offset < self.len)?;
        Some(self.window + offset)
    }

    /// The served process's side (only for a served space).
    pub(crate) fn served(&self) -> &TenantSpace {
        self.served.as_ref().expect("a served space")
    }

    /// The process (this one's own, if not served).
    pub(crate) fn pid(&self) -> u32 {
        self.served.as_ref().map_or_else(std::process::id, |served| served.pid)
    }

    /// The window in the process: (start, bytes).
    pub(crate) fn arena(&self) -> (u64, u64) {
        (self.base, self.len)
    }

    /// Whether `error` says the served process is gone (`ESRCH`: its address space has
    /// no users); never so for this process.
    pub(crate) fn is_gone(&self, error: &UffdError) -> bool {
        let gone = self.served.is_some() && error.errno() == Some(libc::ESRCH);
        if gone {
            self.gone.store(true, Relaxed);
        }
        gone
    }
}

/// A space found by a core address: this process's (borrowed), or a served one's (kept
/// alive while used, even if its process is let go meanwhile).
pub(crate) enum SpaceRef<'a> {
    Own(&'a Space),
    Served(Arc<Space>),
}

impl std::ops::Deref for SpaceRef<'_> {
    type Target = Space;
    fn deref(&self) -> &Space {
        match self {
            SpaceRef::Own(space) => space,
            SpaceRef::Served(space) => space,
        }
    }
}

/// Core windows start above any user address (57 bits with five-level page tables), so
/// a window's address is never mistaken for a process's; each is rounded up to a GiB
/// and followed by a GiB of nothing.
const WINDOWS_START: u64 = 1 << 57;
const WINDOW_ALIGN: u64 = 1 << 30;

/// The pager's own process, or the processes it serves.
pub(crate) enum Kind {
    Own(Space),
    Served(Served),
}

/// Whose memory is served, and the served processes' comings and goings.
pub(crate) struct Spaces {
    kind: Kind,
    /// An ioctl found a served process gone: the evictor lets its region go at its next
    /// rest (else it would pick, fail to protect and pick again the dead process's pages,
    /// as fast as it can).
    gone_seen: AtomicBool,
    /// Forks' children served whose agent has not answered yet: an agent's thread start
    /// may fault on the heap (glibc reads the program's locale there), so no handler
    /// waits on agents meanwhile (`FaultShell::fault_discard_take`).
    agents_starting: AtomicU32,
    /// Ioctls on a served process that found it gone, and its victims read as zeroes
    /// because it was.
    processes_gone: AtomicU64,
}

pub(crate) struct Served {
    /// The served processes now. Never held across anything that may wait for the state
    /// lock (the state lock is taken before it): a lookup clones what it needs and lets go.
    list: RwLock<Arc<[Arc<Space>]>>,
    /// The next window's start, and the next id.
    next: Mutex<(u64, u64)>,
    /// Every served process's userfaultfd, for the handler threads to wait on together
    /// (one epoll instance: one handler is woken per event).
    pub(crate) waiter: Waiter,
}

impl Spaces {
    pub(crate) fn own(uffd: Userfaultfd) -> Spaces {
        Spaces::of(Kind::Own(Space::own(uffd)))
    }

    pub(crate) fn served() -> std::io::Result<Spaces> {
        Ok(Spaces::of(Kind::Served(Served {
            list: RwLock::new(Arc::from(Vec::new())),
            next: Mutex::new((WINDOWS_START, 1)),
            waiter: Waiter::empty()?,
        })))
    }

    fn of(kind: Kind) -> Spaces {
        Spaces {
            kind,
            gone_seen: AtomicBool::new(false),
            agents_starting: AtomicU32::new(0),
            processes_gone: AtomicU64::new(0),
        }
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// This process's own space, if the pager serves its own process.
    pub(crate) fn own_space(&self) -> Option<&Space> {
        match &self.kind {
            Kind::Own(space) => Some(space),
            Kind::Served(_) => None,
        }
    }

    /// The processes served, if the pager serves others.
    pub(crate) fn served_list(&self) -> Option<&Served> {
        match &self.kind {
            Kind::Own(_) => None,
            Kind::Served(served) => Some(served),
        }
    }

    pub(crate) fn is_own(&self) -> bool {
        matches!(self.kind, Kind::Own(_))
    }

    /// The space holding core address `core`, and the address in its process; `None`
    /// for a served process let go meanwhile.
    pub(crate) fn at(&self, core: u64) -> Option<(SpaceRef<'_>, u64)> {
        match &self.kind {
            Kind::Own(space) => Some((SpaceRef::Own(space), core)),
            Kind::Served(served) => {
                let list = served.list.read().unwrap_or_else(|p| p.into_inner());
                let space = list.iter().find(|space| space.holds(core))?.clone();
                drop(list);
                let address = space.to_process(core);
                Some((SpaceRef::Served(space), address))
            }
        }
    }

    /// The served process whose region in the core is `owner`, if it is served now.
    pub(crate) fn with_owner(&self, owner: u32) -> Option<Arc<Space>> {
        self.served_now().iter().find(|space| space.owner == owner).cloned()
    }

    /// The served process `id`, if it is served now.
    pub(crate) fn with_id(&self, id: TenantId) -> Option<Arc<Space>> {
        self.served_now().iter().find(|space| space.id == id).cloned()
    }

    /// The served processes now (none for this process's own space).
    pub(crate) fn served_now(&self) -> Arc<[Arc<Space>]> {
        match &self.kind {
            Kind::Own(_) => Arc::from(Vec::new()),
            Kind::Served(served) => served.list.read().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// An ioctl failed because the served process is gone (`ESRCH`: its address space
    /// has no users): the faults it raised went with it, and nothing is left to install.
    /// Never so for the pager's own process.
    pub(crate) fn gone(&self, space: &Space, error: &UffdError) -> bool {
        let gone = space.is_gone(error);
        if gone {
            self.processes_gone.fetch_add(1, Relaxed);
            self.gone_seen.store(true, Relaxed);
        }
        gone
    }

    /// Served process `space` is to be let go, for `why` (said once).
    pub(crate) fn let_go(&self, space: &Space, why: std::fmt::Arguments<'_>) {
        if !space.gone.swap(true, Relaxed) {
            eprintln!("znswap: process {} {why}: it is let go", space.pid());
        }
        self.gone_seen.store(true, Relaxed);
    }

    /// Whether a served process was found gone since the last call.
    pub(crate) fn take_gone_seen(&self) -> bool {
        self.gone_seen.swap(false, Relaxed)
    }

    /// Ioctls and reads that found a served process gone, so far.
    pub(crate) fn processes_gone(&self) -> u64 {
        self.processes_gone.load(Relaxed)
    }

    /// A fork's child is about to be served: until its agent first answers, no handler
    /// waits on agents (`agents_starting`).
    pub(crate) fn agent_starts(&self) {
        self.agents_starting.fetch_add(1, Relaxed);
    }

    /// A child counted by `agent_starts` will not be served after all.
    pub(crate) fn agent_never_started(&self) {
        self.agents_starting.fetch_sub(1, Relaxed);
    }

    /// Whether some served child's agent may still be starting.
    pub(crate) fn agents_starting(&self) -> bool {
        self.agents_starting.load(Relaxed) > 0
    }

    /// A served process's agent answered (or the process left): no longer counted in
    /// `agents_starting`.
    pub(crate) fn agent_heard(&self, space: &Space) {
        if space.served.as_ref().is_some_and(|served| served.starting.swap(false, Relaxed)) {
            self.agents_starting.fetch_sub(1, Relaxed);
        }
    }

    /// Whether region `owner`'s process has answered the discard it was late to answer
    /// (or is let go, or gone: nothing more will come).
    pub(crate) fn late_answered(&self, owner: u32) -> bool {
        self.with_owner(owner).is_none_or(|space| space.served().late_answered())
    }

    /// Served processes' pages: each process's agent drops its own (`TenantSpace::discard`),
    /// the ranges of one process at a time, translated into its addresses. (A range never
    /// spans two: each lies in one region.) A process whose agent does not answer in time
    /// is not waited for: its ranges are said late (`DropDelay`), and the evictor takes
    /// the answer when it comes (`late_answered`).
    pub(crate) fn discard(&self, batch: &mut DiscardBatch) {
        let mut next = 0;
        let mut translated = Vec::with_capacity(batch.ranges().len());
        while let Some(first) = batch.ranges().get(next) {
            let Some((space, _)) = self.at(first.start as u64) else {
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
            match space.served().discard(&translated) {
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

    /// A served process's pages from core address `core` on into `pages`, in one read
    /// (zeroes if the process is let go or gone: nobody will read them back). The range
    /// lies in one region, so in one process.
    pub(crate) fn read_served_pages(&self, core: u64, pages: &mut [u8]) {
        match self.at(core) {
            Some((space, target)) => space.served().read_pages(target, pages, &self.processes_gone),
            None => pages.fill(0),
        }
    }

    /// Whether a served process's page at core address `core` reads all zeroes (a
    /// process let go meanwhile: its page is nobody's, zero will do).
    pub(crate) fn served_page_is_zero(&self, core: u64) -> bool {
        let Some((space, target)) = self.at(core) else { return true };
        space.served().page_is_zero(target, &self.processes_gone)
    }

    /// Regions whose process said it dropped pages it kept (`PagerCore::take_false_drops`):
    /// a served process's agent lied, and the process is let go (its agent's connection
    /// ends with it, and it serves its own faults from then on) rather than have its
    /// threads and a handler spin on its pages. The pager drops its own process's pages
    /// itself, so there it is only said.
    pub(crate) fn let_go_false_drops(&self, owners: Vec<u32>) {
        for owner in owners {
            match self.with_owner(owner) {
                Some(space) => self.let_go(
                    &space,
                    format_args!("kept pages its agent said it dropped (writes to them fault again and again)"),
                ),
                None => eprintln!("znswap: warning: pages of region {owner} were not dropped as the pager asked"),
            }
        }
    }
}

impl Served {
    /// A window for an arena of `len` bytes in a served process at `base`, and the id
    /// of the process it is for.
    pub(crate) fn reserve(&self, len: u64) -> (u64, TenantId) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let (window, id) = *next;
        next.0 = window + len.div_ceil(WINDOW_ALIGN) * WINDOW_ALIGN + WINDOW_ALIGN;
        next.1 += 1;
        (window, TenantId(id))
    }

    /// Adds a served process's space (its region already in the core) and watches its
    /// userfaultfd.
    pub(crate) fn add(&self, space: Space) -> std::io::Result<()> {
        self.waiter.add(&space.uffd)?;
        let mut list = self.list.write().unwrap_or_else(|p| p.into_inner());
        let mut spaces = list.to_vec();
        spaces.push(Arc::new(space));
        *list = Arc::from(spaces);
        Ok(())
    }

    /// Takes process `id`'s space out (its faults no longer watched), if it is there.
    pub(crate) fn remove(&self, id: TenantId) -> Option<Arc<Space>> {
        let mut list = self.list.write().unwrap_or_else(|p| p.into_inner());
        let index = list.iter().position(|space| space.id == id)?;
        let mut spaces = list.to_vec();
        let space = spaces.remove(index);
        *list = Arc::from(spaces);
        drop(list);
        // (Fails only if the descriptor is not watched: nothing to undo then.)
        let _ = self.waiter.remove(&space.uffd);
        Some(space)
    }
}

/// A served space, as the pager's add makes it.
pub(crate) fn served_space(
    uffd: Userfaultfd,
    window: u64,
    arena: (u64, u64),
    served: TenantSpace,
    owner: u32,
    id: TenantId,
    tenant: u32,
) -> Space {
    let (base, len) = arena;
    Space { uffd, window, base, len, served: Some(served), owner, id, tenant, gone: AtomicBool::new(false) }
}

#[cfg(test)]
mod tests {
    use super::{AtomicBool, Space, Spaces, Userfaultfd};

    /// A window translates both ways over its length only; windows never overlap and
    /// lie above every user address.
    #[test]
    fn windows_translate_and_never_overlap() {
        let spaces = Spaces::served().unwrap();
        let served = spaces.served_list().expect("served");
        let (first, a) = served.reserve(3 << 30);
        let (second, b) = served.reserve(4096);
        assert_ne!(a, b);
        assert!(first >= 1 << 57);
        assert!(second >= first + (3 << 30), "the second window starts past the first");
        let space = Space {
            uffd: Userfaultfd::new(0, 0).expect("userfaultfd works here"),
            window: first,
            base: 0x7f00_0000_0000,
            len: 8192,
            served: None,
            owner: 0,
            id: a,
            tenant: 0,
            gone: AtomicBool::new(false),
        };
        assert_eq!(space.to_core(0x7f00_0000_1000), Some(first + 4096));
        assert_eq!(space.to_process(first + 4096), 0x7f00_0000_1000);
        assert_eq!(space.to_core(0x7f00_0000_2000), None, "past the arena");
        assert_eq!(space.to_core(0x7eff_ffff_f000), None, "before it");
        assert!(space.holds(first) && !space.holds(first + 8192) && !space.holds(first - 1));
    }
}
