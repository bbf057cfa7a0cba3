//! Serving another process's memory: the daemon's pager (issue 34, `docs/daemon.md`).
//!
//! A tenant process hands over its userfaultfd and its own `/proc/self/mem` (opened by
//! itself, so reading it later needs no ptrace rights). Through the first the pager
//! resolves the tenant's faults exactly as its own (`UFFDIO_COPY`, `UFFDIO_ZEROPAGE`
//! and `UFFDIO_WRITEPROTECT` act on the descriptor's address space, measured at the
//! in-process cost: `examples/uffd_remote.rs`); through the second it reads the victims
//! it writes out. What only the tenant may do, dropping written-out pages
//! (`process_madvise` refuses `MADV_DONTNEED` for another process), its agent thread
//! does on request: a `Discard` of up to `RANGES_MAX` ranges, answered `Discarded` once
//! done, so a page is counted gone only when it is.
//!
//! A tenant that dies while it is served: its ioctls fail `ESRCH`, its memory reads
//! nothing, its agent hangs up; none of it is fatal (`Shared::served_process_gone`), and
//! the evictor lets its regions go at its next rest (`Pager::release_tenant`).
//!
//! Not yet here (the design's later steps): parking (`UFFDIO_MOVE` is refused across
//! processes), asynchronous write protection, co-location, the program's own discards
//! and forks.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use znswap_pager_core::AddressRange;
use znswap_wire::{Channel, ChannelError, Range, ToDaemon, ToTenant, RANGES_MAX};

use crate::uffd::Userfaultfd;
use crate::PAGE_BYTES;

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
}

/// The pager's side of one tenant process.
pub(crate) struct TenantSpace {
    mem: OwnedFd,
    agent: Mutex<Agent>,
    /// Victim reads that found the tenant gone (its pages then go out as zeroes: no one
    /// is left to read them back).
    pub(crate) reads_failed: AtomicU64,
}

struct Agent {
    channel: Channel,
    next_batch: u64,
    /// The agent stopped answering (the tenant is gone): discards are no-ops.
    gone: bool,
}

impl TenantSpace {
    pub(crate) fn new(mem: OwnedFd, channel: Channel) -> TenantSpace {
        TenantSpace {
            mem,
            agent: Mutex::new(Agent { channel, next_batch: 1, gone: false }),
            reads_failed: AtomicU64::new(0),
        }
    }

    /// The tenant's page at `address` into `into` (a page). A write meanwhile may tear
    /// the copy, as it may tear an in-process append's read: the write's protection
    /// fault came first and aborted the swap-out (Appendix A), so those bytes are never
    /// read back.
    pub(crate) fn read_page(&self, address: u64, into: &mut [u8]) {
        debug_assert_eq!(into.len(), PAGE_BYTES);
        // SAFETY: a buffer of our own, valid for the call.
        let read =
            unsafe { libc::pread(self.mem.as_raw_fd(), into.as_mut_ptr().cast(), PAGE_BYTES, address as libc::off_t) };
        if read != PAGE_BYTES as isize {
            into.fill(0);
            self.reads_failed.fetch_add(1, Relaxed);
        }
    }

    /// Whether the tenant's page at `address` reads all zeroes.
    pub(crate) fn page_is_zero(&self, address: u64) -> bool {
        let mut page = crate::page_buffers::AlignedPage::ZERO;
        self.read_page(address, &mut page.0);
        page.0.iter().all(|&byte| byte == 0)
    }

    /// Has the tenant's agent drop `ranges`, and waits until it has. One request at a
    /// time (the lock): the evictor's discards and a fault's direct reclaim take turns.
    pub(crate) fn discard(&self, ranges: &[AddressRange]) {
        let mut agent = self.agent.lock().unwrap_or_else(|p| p.into_inner());
        for chunk in ranges.chunks(RANGES_MAX) {
            if agent.gone {
                return;
            }
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
                return;
            }
            match agent.channel.recv_to_daemon() {
                Ok(Some((ToDaemon::Discarded { batch: done }, _))) if done == batch => {}
                Ok(None) => agent.gone = true,
                // Anything else from the agent: stop asking. The core counts the pages
                // dropped; if they are not, only the tenant's own pages are wrong. (A
                // hostile tenant is the design's step 5: it will be disconnected.)
                Ok(Some((message, _))) => {
                    eprintln!("znswap: tenant agent answered a discard with {message:?}: no more discards asked");
                    agent.gone = true;
                }
                // A process that died mid-conversation resets it: gone, as above.
                Err(ChannelError::Io(error)) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                    agent.gone = true;
                }
                Err(error) => {
                    eprintln!("znswap: tenant agent: {error}: no more discards asked");
                    agent.gone = true;
                }
            }
        }
    }
}
