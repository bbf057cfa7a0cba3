//! What the core asks the shell to do with memory, and the wake-ups it owes.
//!
//! Actions come out of calls made under the pager's lock and are carried out, in order,
//! before the lock is released: a page the core calls mapped must be mapped by the time
//! anyone else can look. None of them touches region memory from user space (the
//! kernel copies into it), which keeps self-paging sound (crate docs).

/// One memory operation, by its userfaultfd name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `UFFDIO_COPY` of `pages` pages to `address`, write-protected or not; wakes the
    /// threads faulting there.
    Copy { address: u64, pages: u32, from: CopyFrom, write_protect: bool },
    /// `UFFDIO_ZEROPAGE`: the shared zero page, read-only (a write takes a copy-on-write
    /// fault in the kernel, not ours).
    ZeroPage { address: u64 },
    /// `UFFDIO_WRITEPROTECT` off for `pages` pages from `address`; wakes threads blocked
    /// on them.
    Unprotect { address: u64, pages: u64 },
    /// `UFFDIO_POISON`: the page's only copy is gone; a touch raises SIGBUS.
    Poison { address: u64 },
    /// `UFFDIO_WAKE`: what is mapped already resolves the fault.
    Wake { address: u64 },
    /// A parked page comes back, writable: `UFFDIO_MOVE` from `shadow` to `address`
    /// (nothing is mapped there), waking the faulting threads. Where the kernel refuses
    /// the move (the shadow page is shared with a fork's child since), `UFFDIO_COPY` of
    /// it instead, and the shadow page discarded.
    Unpark { address: u64, shadow: u64 },
    /// `MADV_POPULATE_WRITE` of the page at `address`, mapped: a write fault taken for
    /// the program, with no byte changed, so that a page shared with a fork's child since
    /// the fork becomes the parent's alone (copied while the child lives, reused once it
    /// is gone) and a later round can move it. Under the state lock: the program's
    /// discards take it too, so the page is still mapped and no userfault can come of it
    /// (asynchronous write protection lets the write through).
    Unshare { address: u64 },
}

/// Where the bytes of a `Copy` come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFrom {
    /// The fault's own page buffer, which its read filled.
    FaultPage,
    /// Page `page` of the read-ahead cache (`ReadInto::Cache`): the page a fault's read
    /// brought into it, or a page read ahead earlier (a hit).
    Cache { page: u32 },
    /// Zeroes (private zeroed pages, writable at once).
    Zeros,
    /// The page at `address`: a parked page's shadow page, mapped until its discard.
    Shadow { address: u64 },
}

/// Actions of one call, in a buffer sized once: a bound exceeded is a bug, not a reason
/// to allocate on the fault path.
pub struct Actions {
    list: Vec<Action>,
}

impl Actions {
    /// Room for what one fault can ask: a copy, a few unprotect runs.
    pub const FAULT_MAX: usize = 48;

    pub fn with_capacity(capacity: usize) -> Actions {
        Actions { list: Vec::with_capacity(capacity) }
    }

    pub(crate) fn push(&mut self, action: Action) {
        assert!(self.list.len() < self.list.capacity(), "more actions than the buffer was sized for: {action:?}");
        self.list.push(action);
    }

    pub fn as_slice(&self) -> &[Action] {
        &self.list
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn clear(&mut self) {
        self.list.clear();
    }

    /// The actions, leaving the buffer empty (and its capacity in place).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Action> {
        self.list.drain(..)
    }
}

/// Threads the shell must wake after a call: someone changed, under the lock, what
/// they wait for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakeups {
    /// Sleeping evictors: pages to evict or to discard.
    pub evictors: bool,
    /// A sleeping I/O thread: requests queued.
    pub io: bool,
    /// Faults waiting for room under the budget.
    pub room: bool,
    /// Regions whose pages were not dropped as their process said (`take_false_drops`).
    pub false_drops: bool,
}

impl Wakeups {
    pub fn any(self) -> bool {
        self.evictors || self.io || self.room || self.false_drops
    }
}

/// The threads around the core as it sees them: which are asleep (whoever changes, under
/// the lock, what one waits for owes it a wake-up), whether the evictors are gone, and
/// the wake-ups owed since the shell last took them.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    evictors_asleep: bool,
    io_asleep: bool,
    /// The evictors are gone: faults no longer wait for room.
    shut_down: bool,
    owed: Wakeups,
}

impl Threads {
    pub(crate) fn evictors_asleep(&self) -> bool {
        self.evictors_asleep
    }

    pub(crate) fn io_asleep(&self) -> bool {
        self.io_asleep
    }

    /// An evictor is about to wait for `Wakeups::evictors`.
    pub(crate) fn evictors_sleep(&mut self) {
        self.evictors_asleep = true;
    }

    /// The I/O thread is about to wait for `Wakeups::io`.
    pub(crate) fn io_sleeps(&mut self) {
        self.io_asleep = true;
    }

    /// Sleeping evictors are owed a wake-up.
    pub(crate) fn wake_evictors(&mut self) {
        if self.evictors_asleep {
            self.evictors_asleep = false;
            self.owed.evictors = true;
        }
    }

    /// A sleeping I/O thread is owed a wake-up.
    pub(crate) fn wake_io(&mut self) {
        if self.io_asleep {
            self.io_asleep = false;
            self.owed.io = true;
        }
    }

    /// Faults waiting for room are owed a wake-up.
    pub(crate) fn wake_room(&mut self) {
        self.owed.room = true;
    }

    /// Regions were found whose pages were not dropped as their process said.
    pub(crate) fn wake_for_false_drops(&mut self) {
        self.owed.false_drops = true;
    }

    /// The evictors are gone: everyone waiting is woken.
    pub(crate) fn shut_down(&mut self) {
        self.shut_down = true;
        self.owed = Wakeups { evictors: true, io: true, room: true, false_drops: self.owed.false_drops };
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// The wake-ups owed since the last call.
    pub(crate) fn take(&mut self) -> Wakeups {
        std::mem::take(&mut self.owed)
    }
}
